/* SPDX-License-Identifier: Apache-2.0 */
/* The kit of indexed sources: those whose records are numbered 0 to
 * count - 1 once their input is read, any of which can be made again
 * from its number (range computes them; idx, cifar and npy hold or map
 * their files; tokens reads block k of a pass from its files at an
 * offset computed from k and the pass). A source says how many records
 * it has and how to make record i; the kit does the rest once, for all
 * of them: the pass's cursor, shard=I/N, the range first= and count=
 * where the source takes them, reset, checkpoints (the cursor, after
 * what identifies the input where the source says), fetch by identity,
 * length, part names and the "records" statistic.
 *
 * A sample's identity is its record number in the whole input, whatever
 * the range or the part read, so checkpoints and fetch name the same
 * record. The cursor counts from `first`: part I of N reads the records
 * first + I, first + I + N, ... below first + count.
 *
 * Layout: the source's state struct begins with an ef__indexed, so that
 * s->state is both; create() calls ef__indexed_init on it. */
#ifndef EF_STAGES_SOURCES_INDEXED_H
#define EF_STAGES_SOURCES_INDEXED_H

#include <stdint.h>

#include "pipeline/stage.h"

typedef struct {
    /* Reads the input and gives its record count. Called once it
     * succeeds: at open, or at the first fetch, restore or length before
     * it. A failure must keep nothing it read: the next call starts over. */
    int (*load)(ef__stage *s, int64_t *records, ef__err *err);
    /* Record i of pass `epoch` into *out: a new sample with identity
     * (i, epoch). Called after load, from any thread (fetch). A failure
     * about the data goes through on_error (ef__stage_skip): under skip,
     * next() drops the record, counted, and goes on. */
    int (*make)(const ef__stage *s, int64_t i, int64_t epoch, ef_sample **out,
                ef__err *err);
    /* Optional: EF_OK when record i is emitted; else an error saying why
     * not (a record found bad and skipped when the input was read): next
     * passes over it, fetch fails with it. */
    int (*check)(const ef__stage *s, int64_t i, ef__err *err);
    /* Optional: the count without reading the input (from a header), for
     * length() before open; without it, length() loads. */
    int (*peek)(ef__stage *s, int64_t *records, ef__err *err);
    /* Optional: the source's own figures, after "records". */
    void (*stats)(const ef__stage *s, ef_stage_stats *out);
    /* Optional: make for next(), called on the pulling thread alone, so
     * that it may use what only that thread touches (a file kept open
     * from one record to the next); without it, next() calls make. */
    int (*make_next)(ef__stage *s, int64_t i, int64_t epoch, ef_sample **out,
                     ef__err *err);
    /* Optional, for fetch: EF_OK when identity d's origin (its part and
     * byte offset, as make set them) is still record d->id.index's; else
     * an error saying the input changed since the state was saved. */
    int (*check_origin)(const ef__stage *s, const struct ef__ident *d,
                        ef__err *err);
    /* Optional, for checkpoints: what identifies the input (its files,
     * their size), written before the cursor, and read back by restore,
     * which refuses a state saved over another input. restore runs
     * before the input is read, and may read it (ef__indexed_ready) to
     * compare what only the input tells. */
    void (*save)(const ef__stage *s, ef__state_out *o);
    int (*restore)(ef__stage *s, ef__state_in *in, ef__err *err);
    /* Optional: the name of part `part` of the input, a sample's
     * origin.part as make set it (a file's path), for messages about the
     * sample; NULL when unknown. Borrowed, alive as long as the stage. */
    const char *(*part_name)(const ef__stage *s, int64_t part);
    /* Where set, the source declares EF__INDEXED_RANGE_OPTIONS (first=
     * and count=) and this names its option that names the input, for
     * the messages about a range past the end. */
    const char *ranged;
} ef__indexed_ops;

typedef struct {
    const ef__indexed_ops *ops; /* static */
    ef__shard shard;
    int64_t records;      /* in the input, once loaded */
    int64_t first, count; /* the range read, once ready */
    int64_t next;         /* the next record of this pass, from first */
    int loaded, ready;
} ef__indexed;

/* For create(): sets up the kit's part of s->state (which must begin
 * with an ef__indexed) with `ops`, and parses the shard option. */
int ef__indexed_init(ef__stage *s, const ef__opts *o,
                     const ef__indexed_ops *ops, ef__err *err);

/* Reads the input (once: load) and sets the range; EF_OK once done.
 * For a restore hook that compares what the input tells. */
int ef__indexed_ready(ef__stage *s, ef__err *err);

/* The def's entries (stage.h), for EF__INDEXED_STAGE_OPS. */
int ef__indexed_open(ef__stage *s, ef__err *err);
int ef__indexed_next(ef__stage *s, ef_sample **out, ef__err *err);
int ef__indexed_reset(ef__stage *s, int64_t epoch, ef__err *err);
int ef__indexed_save(ef__stage *s, ef__state_out *o, ef__err *err);
int ef__indexed_restore(ef__stage *s, ef__state_in *in, ef__err *err);
int ef__indexed_fetch(ef__stage *s, const struct ef__ident *d, ef_sample **out,
                      ef__err *err);
int ef__indexed_length(ef__stage *s, int64_t up, int64_t *n, ef__err *err);
void ef__indexed_stats(const ef__stage *s, ef_stage_stats *out);
const char *ef__indexed_part_name(const ef__stage *s, int64_t part);

/* The def entries every indexed source shares: its own are info,
 * create and destroy. */
#define EF__INDEXED_STAGE_OPS                                                  \
    .is_source = 1, .open = ef__indexed_open, .next = ef__indexed_next,        \
    .reset = ef__indexed_reset, .save = ef__indexed_save,                      \
    .restore = ef__indexed_restore, .fetch = ef__indexed_fetch,                \
    .length = ef__indexed_length, .stats = ef__indexed_stats,                  \
    .part_name = ef__indexed_part_name

/* The options of a source with `ranged` set: a held-out split of one
 * input, records [first, first + count). */
#define EF__INDEXED_RANGE_OPTIONS                                              \
    EF__OPT("first", EF_OPT_INT, "0", "first record read (0-based)", 0,        \
            9.2e18),                                                           \
        EF__OPT("count", EF_OPT_INT, "",                                       \
                "records read from first on (none: to the end)", 1, 9.2e18)

#endif
