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
#include "core/sample.h"

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
/* ef__shufbuf_next, off the steady state: the fills, the end. */
int ef__shufbuf_fill_next(ef__shufbuf *b, ef__producer produce, void *arg,
                          ef__rng *rng, ef_sample **out, ef__err *err);
/* x would pass the budget with the buffer's contents: fails with the
 * message, freeing x. */
int ef__shufbuf_overflow(ef__shufbuf *b, ef_sample *x, ef__err *err);

/* The budget's charge follows the bytes held a step at a time: up a
 * step ahead once the bytes pass it, down once it is two steps ahead. */
static inline void ef__shufbuf_charge_up(ef__shufbuf *b)
{
    if (b->bytes > b->charged) {
        uint64_t more = b->bytes - b->charged + b->step;
        ef__budget_hold(b->budget, more);
        b->charged += more;
    }
}

static inline void ef__shufbuf_charge_down(ef__shufbuf *b)
{
    if (b->charged - b->bytes > 2 * b->step) {
        uint64_t less = b->charged - b->bytes - b->step;
        ef__budget_release(b->budget, less);
        b->charged -= less;
    }
}

/* The steady state, a full buffer less the item handed out last: hold()
 * of the new item x and take() of the item drawn in one step. take()
 * moves the last item, x, into the drawn one's place; here x goes there
 * directly (or out, when it is the one drawn). The same draws, the same
 * items in the same places, the same budget charges. */
static inline int ef__shufbuf_swap_in(ef__shufbuf *b, ef_sample *x,
                                      ef__rng *rng, ef_sample **out,
                                      ef__err *err)
{
    uint64_t n = ef__sample_bytes(x);
    if (!ef__budget_fits(b->budget, b->bytes + n)) {
        *out = NULL;
        return ef__shufbuf_overflow(b, x, err);
    }
    b->bytes += n;
    ef__shufbuf_charge_up(b);
    size_t i = (size_t)ef__rng_below(rng, b->cap);
    if (i == b->n) {
        *out = x;
        b->bytes -= n;
    } else {
        *out = b->items[i];
        b->bytes -= b->sizes[i];
        b->items[i] = x;
        b->sizes[i] = n;
    }
    ef__shufbuf_charge_down(b);
    return EF_OK;
}

/* Tops the buffer up from `produce`, then hands out a random item (the
 * caller owns it). EF_END once the producer has ended and the buffer is
 * empty; errors from the producer pass through. Inline in the steady
 * state, one item in and one out: it is most of an echoed copy's cost. */
static inline int ef__shufbuf_next(ef__shufbuf *b, ef__producer produce,
                                   void *arg, ef__rng *rng, ef_sample **out,
                                   ef__err *err)
{
    if (!b->ended && b->n + 1 == b->cap && b->step) {
        ef_sample *x;
        int rc = produce(arg, &x, err);
        if (rc == EF_OK)
            return ef__shufbuf_swap_in(b, x, rng, out, err);
        if (rc != EF_END) {
            *out = NULL;
            return rc;
        }
        b->ended = 1;
    }
    return ef__shufbuf_fill_next(b, produce, arg, rng, out, err);
}
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
