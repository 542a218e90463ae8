/* SPDX-License-Identifier: Apache-2.0 */
/* The echo stage's state, shared by its files: echo.c (the stage),
 * echo_pump.c (the thread that reads the upstream ahead) and
 * echo_checkpoint.c (save and restore). */
#ifndef EF_STAGES_FLOW_ECHO_STAGE_H
#define EF_STAGES_FLOW_ECHO_STAGE_H

#include <stdatomic.h>
#include <stdint.h>

#include "pipeline/feed.h"
#include "pipeline/stage.h"
#include "stages/flow/echo_policy.h"
#include "stages/flow/echo_pool.h"
#include "stages/flow/echo_rates.h"
#include "stages/flow/shuffle_buffer.h"

/* A fixed factor uses `held` and the fields below it; auto, the pool. */
typedef enum { EF__ECHO_FIXED, EF__ECHO_AUTO } ef__echo_mode;

typedef struct ef__echo_state {
    ef__echo_mode mode;
    double factor; /* fixed */
    int max;       /* auto: copies per item at most */
    size_t shuffle;
    /* fixed factor */
    ef_sample *held; /* the fresh item whose copies are still due; it
                        holds copies_left - 1 buffer references per field
                        beyond its own, taken ahead for the copies */
    int copies_left; /* copies of `held` still to emit */
    int next_copy;   /* echo_copy number of the next copy */
    /* where the upstream cannot be polled, a thread reading it ahead:
     * factor=auto's from open, a fixed factor's once the upstream proved
     * slow (take_fixed); read by cancel from any thread */
    ef__feed *_Atomic pump;
    int pump_considered; /* a fixed factor: take_fixed has decided */
    /* auto */
    /* the pump's read-ahead: starts at `pool` and deepens like prefetch's
     * depth=auto (ef__echo_pump_take) */
    size_t pump_depth;
    int ran_ahead;               /* the pump's queue was full since the
                                    stage last found it empty */
    uint64_t taken_bytes, taken; /* handed out by the pump, for the bound */
    size_t pool_cap;             /* the pool's slots */
    ef__echo_pool *pool;         /* auto, or a policy: the items echoed from */
    /* a policy: NULL for uniform. Fixed factor: echoes due, and drawn
     * from the pool, as each fresh item adds factor - 1 */
    ef__policy *policy;
    double owed;
    _Atomic uint64_t fed, stale; /* values fed back: matched, not held */
    /* both */
    ef__sample_pool *headers; /* where our copies' headers come from */
    ef__shufbuf buf;
    ef__rng rng;  /* shuffle draws, keyed per epoch */
    int restored; /* rng came from a state: open leaves it */
    ef__rates rates;
    int passing;       /* 0: no item out this pass yet, 1: one, 2: more */
    int factor_warned; /* watch_factor warned */
    _Atomic uint64_t fresh, echoed; /* items emitted: new, and copies */
    const _Atomic uint64_t *up_ns, *up_items; /* where t_up is measured */
} ef__echo_state;

/* Numbers `copy` as the k-th echo of its item (k >= 1). */
void ef__echo_mark_copy(ef_sample *copy, int k);

/* ---- the pump (echo_pump.c) ---- */

/* Starts the pump over the stage's upstream. */
int ef__echo_start_pump(ef__stage *s, ef__echo_state *st, ef__err *err);
/* A fresh item from the pump: EF_AGAIN when none is ready and `block` is
 * 0 (see there for when it waits anyway). */
int ef__echo_pump_take(ef__stage *s, ef__echo_state *st, int block,
                       ef_sample **out, ef__err *err);

/* ---- checkpoints (echo_checkpoint.c): the stage def's entries ---- */

void ef__echo_pause(ef__stage *s);
void ef__echo_resume(ef__stage *s);
int ef__echo_save(ef__stage *s, ef__state_out *o, ef__err *err);
int ef__echo_fetch(ef__stage *s, const struct ef__ident *d, ef_sample **out,
                   ef__err *err);
int ef__echo_restore(ef__stage *s, ef__state_in *in, ef__err *err);

#endif
