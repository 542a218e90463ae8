/* SPDX-License-Identifier: Apache-2.0 */
/* A shuffle buffer: filled from a producer, emptied at random positions.
 * Used by the shuffle stage and by the echo stage's copy spreading. Its
 * samples are charged to the pipeline's memory budget; a buffer whose
 * contents alone pass the budget fails (it is filled by the consumer's
 * own pull, so it cannot wait for room). The buffer charges the budget in
 * steps of `step` bytes rather than per item, holding at most two steps
 * more than its samples' bytes: the budget's counters are shared by every
 * thread, and two atomic updates per item were most of an echoed copy's
 * cost. */
#ifndef EF_STAGES_FLOW_SHUFFLE_BUFFER_H
#define EF_STAGES_FLOW_SHUFFLE_BUFFER_H

#include <stddef.h>

#include "core/budget.h"
#include "core/err.h"
#include "core/rng.h"

struct ef__state_out;
struct ef__state_in;
struct ef__ident;
struct ef__stage;

typedef int (*ef__producer)(void *arg, ef_sample **out, ef__err *err);

typedef struct {
    ef_sample **items;
    size_t cap, n;
    int ended; /* the producer returned EF_END */
    uint64_t *sizes; /* sizes[i]: payload bytes of items[i] */
    ef__budget *budget;
    const char *owner; /* the stage, for messages */
    uint64_t bytes;    /* payload of the samples held */
    uint64_t charged;  /* bytes charged to the budget: bytes or a little more */
    uint64_t step;     /* what the charge moves by */
    /* ef__shufbuf_watch: who warns of a slow fill, once */
    struct ef__stage *watcher;
    char label[96]; /* the stage as the warning names it */
    const char *advice;
    int warned;
} ef__shufbuf;

int ef__shufbuf_init(ef__shufbuf *b, size_t cap, ef__budget *budget,
                     const char *owner);
/* Warns (ef__warn, once) when a fill from empty, at the start of a pass,
 * is on course to keep the first item waiting more than a few seconds:
 * "<label> must read N items before its first; the upstream gives R
 * items/s, so the first item waits about T s: <advice>". The strings are
 * copied (label) or borrowed (advice: a literal). */
void ef__shufbuf_watch(ef__shufbuf *b, struct ef__stage *watcher,
                       const char *label, const char *advice);
/* Frees the samples still held. */
void ef__shufbuf_destroy(ef__shufbuf *b);
/* Tops the buffer up from `produce`, then hands out a random item (the
 * caller owns it). EF_END once the producer has ended and the buffer is
 * empty; errors from the producer pass through. */
int ef__shufbuf_next(ef__shufbuf *b, ef__producer produce, void *arg,
                     ef__rng *rng, ef_sample **out, ef__err *err);
/* Ready for another pass: after EF_END, or mid-pass (what is still held
 * belongs to the pass that ended, and is dropped). */
void ef__shufbuf_reset(ef__shufbuf *b);

/* Checkpoints (state.h): the end flag and the identities of the items
 * held, in their order in the buffer. */
void ef__shufbuf_save(const ef__shufbuf *b, struct ef__state_out *o);
/* Reads them back into an empty buffer, making each item again as stage
 * `from` emitted it (ef__stage_fetch). */
int ef__shufbuf_restore(ef__shufbuf *b, struct ef__state_in *in,
                        struct ef__stage *from, ef__err *err);

#endif
