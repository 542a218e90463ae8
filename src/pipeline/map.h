/* SPDX-License-Identifier: Apache-2.0 */
/* The parallel map machinery, shared by `map` and by the stages that are a
 * map with options of their own (random_crop, flip). */
#ifndef EF_PIPELINE_MAP_H
#define EF_PIPELINE_MAP_H

#include "core/queue.h"
#include "core/run_length.h"
#include "pipeline/stage.h"

#define EF__MAP_MAX_THREADS 256

/* The options every map stage has: `threads` and `run`, counts or auto
 * (see map.c, the pipeline's tuner, tune.c, and core/run_length.h), and
 * `inline` (map.c, core/inline_choice.h). */
#define EF__MAP_THREADS_ROW                                                    \
    EF__OPT("threads", EF_OPT_INT_AUTO, "1",                                   \
            "worker threads, or auto: one per core, of which the pipeline "    \
            "lets the slowest stages use the most",                            \
            1, EF__MAP_MAX_THREADS, EF__SPEED_ONLY)
#define EF__MAP_RUN_ROW                                                        \
    EF__OPT("run", EF_OPT_INT_AUTO, "auto",                                    \
            "items a worker takes and hands over at once (at most, within a "  \
            "share of the memory budget), or auto: from what items cost, one " \
            "at a time when they are slow",                                    \
            1, EF__RUN_MAX, EF__SPEED_ONLY)
#define EF__MAP_INLINE_ROW                                                     \
    EF__OPT("inline", EF_OPT_STRING, "auto",                                   \
            "run the transform on the consumer's thread instead of the "       \
            "workers: auto (with run=auto, when that is timed faster, as for " \
            "items cheaper than a hand-off between cores), always, or never",  \
            0, 0, EF__SPEED_ONLY)
#define EF__MAP_OPTIONS EF__MAP_THREADS_ROW, EF__MAP_RUN_ROW, EF__MAP_INLINE_ROW

/* Sets s->state up to run `fn` on `threads` threads (0: auto, one per
 * usable core, as many taking input as the tuner allows). `user` is
 * handed to fn through its context; it stays the caller's (see
 * ef__map_user). */
int ef__map_setup(ef__stage *s, ef_map_fn fn, void *user, int threads,
                  int ordered, ef__err *err);
void *ef__map_user(const ef__stage *s);

/* A kernel that sees whole runs: for stages whose work goes faster on
 * many items at once (a tokenizer handed a run's documents together) or
 * with memory kept between items. Each worker makes its scratch when it
 * starts (NULL: it goes without) and frees it when it ends; before the
 * stage's fn runs on each item of a run, run_begin gets the run's inputs
 * (items[0..n).sample, in order), and fn finds the scratch and the item's
 * place in the run through its context. fn must also work without them:
 * an item made again for a restore (ef__map_fetch) runs alone, with no
 * scratch. Any member may be NULL. */
typedef struct {
    void *(*scratch_new)(void *user);
    void (*scratch_free)(void *user, void *scratch);
    void (*run_begin)(void *user, void *scratch, const ef__item *items,
                      size_t n);
} ef__map_kernel;
/* Gives the map stage set up by ef__map_setup a kernel; before open. */
void ef__map_set_kernel(ef__stage *s, const ef__map_kernel *k);
/* For fn: the worker's scratch (NULL when none) and the item's place in
 * the run that run_begin saw. */
void *ef__map_ctx_scratch(const ef_map_ctx *ctx);
size_t ef__map_ctx_index(const ef_map_ctx *ctx);

/* The stage's feeds_batch (stage.h): ordered, each output may go into the
 * slot of a batch slab (slabs.h). */
void ef__map_feeds_batch(ef__stage *s, int64_t n);
/* For a built-in transform: where to write an output of nbytes, a new
 * reference (the caller's) and the offset in it. The slot its item has in
 * a batch slab when there is one (the stage feeds a batch, the size is the
 * slab's, not asked already for this item), else a buffer of its own;
 * NULL when out of memory. */
ef_buffer *ef__map_ctx_output(ef_map_ctx *ctx, size_t nbytes, size_t *offset);

int ef__map_open(ef__stage *s, ef__err *err);
int ef__map_next(ef__stage *s, ef_sample **out, ef__err *err);
int ef__map_reset(ef__stage *s, int64_t epoch, ef__err *err);
void ef__map_cancel(ef__stage *s);
void ef__map_destroy(ef__stage *s);
/* Checkpoints (stage.h): ordered maps only. */
void ef__map_pause(ef__stage *s);
void ef__map_resume(ef__stage *s);
int ef__map_save(ef__stage *s, ef__state_out *o, ef__err *err);
int ef__map_fetch(ef__stage *s, const struct ef__ident *d, ef_sample **out,
                  ef__err *err);

/* The stage def entries a stage built on the map machinery shares with
 * every other: its own are create, destroy, and any stats or length. */
#define EF__MAP_STAGE_OPS                                                      \
    .open = ef__map_open, .next = ef__map_next, .reset = ef__map_reset,        \
    .cancel = ef__map_cancel, .pause = ef__map_pause,                          \
    .resume = ef__map_resume, .save = ef__map_save, .fetch = ef__map_fetch

#endif
