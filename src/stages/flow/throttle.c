/* SPDX-License-Identifier: Apache-2.0 */
/* throttle: at most `rate` items per second, by sleeping (never spinning).
 * Emulates a slow upstream (disk, network) in experiments.
 *
 * Items follow a schedule, one every 1/rate seconds. A late wake-up (the
 * scheduler's, a few microseconds to a few hundred) is caught up by
 * emitting the next items without sleeping, so the long-run rate is the
 * one asked for. Time the downstream keeps the throttle idle (between
 * handing an item over and being asked for the next) shifts the schedule
 * instead: a source does not produce faster after a pause, so none is
 * banked. A stream behind by more than CATCH_UP restarts from now. */
#include "core/alloc.h"
#include "core/clock.h"
#include "pipeline/stage.h"

#define CATCH_UP_NS 2e6

typedef struct {
    double interval_ns;
    double next_ns; /* earliest time for the next item; 0 before the first */
    uint64_t returned_ns; /* when the last item was handed over */
} throttle_state;

static int throttle_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    throttle_state *st = ef__stage_new_state(s, sizeof *st, err);
    if (!st)
        return EF_ENOMEM;
    st->interval_ns = (double)ef__s_to_ns(1.0 / ef__opt_float(o, "rate"));
    return EF_OK;
}

static int throttle_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    throttle_state *st = s->state;
    uint64_t entry = ef__now_ns();
    if (st->returned_ns)
        st->next_ns += (double)(entry - st->returned_ns);
    int rc = ef__stage_pull(s, out, err);
    if (rc != EF_OK)
        return rc;
    double now = (double)ef__now_ns();
    if (st->next_ns < now - CATCH_UP_NS)
        st->next_ns = now;
    else if (st->next_ns > now &&
             ef__ctx_sleep_until(s->ctx, (uint64_t)st->next_ns) != EF_OK) {
        ef_sample_free(*out);
        *out = NULL;
        return ef__stage_stopped(s, err);
    }
    st->next_ns += st->interval_ns;
    st->returned_ns = ef__now_ns();
    return EF_OK;
}

static void throttle_destroy(ef__stage *s)
{
    ef__free(s->state);
}

static const ef__option_def throttle_options[] = {
    EF__OPT("rate", EF_OPT_FLOAT, NULL, "items per second at most", 1e-6, 1e12),
};

const ef__stage_def ef__stage_throttle = {
    .info = {"throttle", "at most rate items/s (emulates a slow upstream)",
             EF__OPTIONS(throttle_options)},
    .create = throttle_create,
    .next = throttle_next,
    .destroy = throttle_destroy,
};
