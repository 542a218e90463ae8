/* SPDX-License-Identifier: Apache-2.0 */
/* The echo stage's pump: where its upstream cannot be polled, a thread of
 * the stage's own reads it ahead into a queue (echo.c says when). */
#include "core/alloc.h"
#include "core/sample.h"
#include "stages/flow/echo_stage.h"

/* The most items the pump of factor=auto reads ahead when the downstream
 * asks in bursts (ef__echo_pump_take); a larger pool= reads that far ahead
 * anyway. */
#define PUMP_MAX 1024

/* Starts the pump: a thread of the stage's own that reads the upstream
 * ahead into a queue of `pool` items at first (ef__echo_pump_take deepens it).
 */
int ef__echo_start_pump(ef__stage *s, ef__echo_state *st, ef__err *err)
{
    ef__feed *f = ef__calloc(1, sizeof *f);
    if (!f)
        return ef__err_set(err, EF_ENOMEM, "echo: out of memory");
    size_t cap = st->pool_cap > PUMP_MAX ? st->pool_cap : PUMP_MAX;
    int rc = ef__feed_init(f, s, cap, 1, ef__feed_pump, f, err);
    if (rc == EF_OK) {
        st->pump_depth = st->pool_cap;
        ef__queue_set_limit(&f->q, st->pump_depth);
        atomic_store(&s->depth_now, (int)st->pump_depth);
    }
    if (rc == EF_OK)
        rc = ef__feed_start(f, err);
    if (rc != EF_OK) {
        ef__feed_destroy(f);
        ef__free(f);
        return rc;
    }
    /* a stop from another thread that did not see the feed set the flag
     * before looking: seen here (both sides sequentially consistent) */
    atomic_store(&st->pump, f);
    if (atomic_load(&s->ctx->cancelled))
        ef__feed_cancel(f);
    return EF_OK;
}

/* The pump's queue was found empty after it had run ahead: a deeper one.
 * Doubles up to PUMP_MAX, or what a quarter of the memory budget holds at
 * the bytes per item taken so far; never below `pool`. */
static void pump_deepen(ef__stage *s, ef__echo_state *st)
{
    uint64_t bound = PUMP_MAX, budget = s->ctx->budget.limit;
    if (budget && st->taken && st->taken_bytes) {
        uint64_t per_item = st->taken_bytes / st->taken;
        uint64_t fits = budget / 4 / (per_item ? per_item : 1);
        bound = fits < bound ? fits : bound;
    }
    if (bound < st->pool_cap)
        bound = st->pool_cap;
    size_t want =
        2 * st->pump_depth < bound ? 2 * st->pump_depth : (size_t)bound;
    if (want == st->pump_depth)
        return;
    st->pump_depth = want;
    ef__queue_set_limit(&st->pump->q, want);
    atomic_store(&s->depth_now, (int)want);
}

/* A take from the pump that watches its queue. A queue that filled since
 * the stage last found it empty says the upstream ran ahead of the
 * downstream meanwhile: finding it empty now is a burst of requests (a
 * `batch` downstream asks for its whole batch at once) longer than the
 * read-ahead, not a slow upstream. Then the stage waits for the fresh
 * item, which the upstream is about to give, rather than echo, and
 * deepens the queue so the next burst fits (prefetch's depth=auto rule).
 * An upstream slower than the downstream never fills the queue, so it is
 * echoed as before. */
int ef__echo_pump_take(ef__stage *s, ef__echo_state *st, int block,
                       ef_sample **out, ef__err *err)
{
    ef__feed *f = st->pump;
    int rc = ef__feed_take(f, out, 0, err);
    if (rc == EF_AGAIN) {
        if (st->ran_ahead) {
            st->ran_ahead = 0;
            pump_deepen(s, st);
            block = 1;
        }
        if (block)
            rc = ef__feed_take(f, out, 1, err);
    } else if (rc == EF_OK && atomic_load(&f->q.queued) + 1 >= st->pump_depth) {
        st->ran_ahead = 1; /* it held pump_depth items before this take */
    }
    if (rc == EF_OK && *out) {
        st->taken_bytes += ef__sample_bytes(*out);
        st->taken++;
    }
    return rc;
}
