/* SPDX-License-Identifier: Apache-2.0 */
/* Shuffle buffer (see shuffle_buffer.h). */
#include "stages/flow/shuffle_buffer.h"

#include <stdio.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/sample.h"
#include "pipeline/stage.h"
#include "pipeline/state.h"

/* A fill from empty that is on course to take longer than this warns.
 * The downstream gets nothing until the fill ends, and the next pass
 * fills again: past a couple of seconds a training step's first wait is
 * no longer start-up noise but the buffer's doing (a buffer as large as
 * the data behind a slow reader waits for the whole pass). */
#define SLOW_FILL_NS 2000000000ull
/* The first prediction, once this long after the first item came: the
 * pace is measured from there, so the upstream's own start (a file
 * opening, a shuffle buffer of its own) is not taken for its pace; late
 * enough for a steady measure, early enough to warn well before the end
 * of a slow fill. */
#define FILL_LOOK_NS 500000000ull

/* The most a buffer charges the budget in one step: 64 KiB, or 1/64 of a
 * small budget. */
#define STEP_MAX ((uint64_t)64 << 10)

int ef__shufbuf_init(ef__shufbuf *b, size_t cap, ef__budget *budget,
                     const char *owner)
{
    b->items = ef__calloc(cap, sizeof *b->items);
    b->sizes = ef__calloc(cap, sizeof *b->sizes);
    b->cap = cap;
    b->n = 0;
    b->ended = 0;
    b->budget = budget;
    b->owner = owner;
    b->bytes = b->charged = b->step = 0; /* step: on the first hold */
    if (b->items && b->sizes)
        return EF_OK;
    ef__free(b->items);
    ef__free(b->sizes);
    b->items = NULL;
    b->sizes = NULL;
    return EF_ENOMEM;
}

/* Frees what the buffer holds. */
static void empty(ef__shufbuf *b)
{
    ef__budget_release(b->budget, b->charged);
    b->bytes = b->charged = 0;
    for (size_t i = 0; i < b->n; i++)
        ef_sample_free(b->items[i]);
    b->n = 0;
}

void ef__shufbuf_watch(ef__shufbuf *b, ef__stage *watcher, const char *label,
                       const char *advice)
{
    b->watcher = watcher;
    snprintf(b->label, sizeof b->label, "%s", label);
    b->advice = advice;
}

/* During a fill from empty that started at t0, its first item in at t1:
 * warns once when the time so far and the pace since t1 say the whole
 * fill takes more than SLOW_FILL_NS. */
static void watch_fill(ef__shufbuf *b, uint64_t t0, uint64_t t1)
{
    uint64_t now = ef__timer_ns();
    uint64_t pacing = ef__elapsed_ns(t1, now);
    if (pacing < FILL_LOOK_NS || b->n < 2)
        return;
    double rate = (double)(b->n - 1) / ef__ns_to_s(pacing);
    double whole =
        ef__ns_to_s(ef__elapsed_ns(t0, now)) + (double)(b->cap - b->n) / rate;
    if (whole * 1e9 <= (double)SLOW_FILL_NS)
        return;
    b->warned = 1;
    ef__warn(b->watcher->ctx,
             "%s must read %zu items before its first; the upstream gives "
             "%.0f items/s, so the first item waits about %.1f s: %s",
             b->label, b->cap, rate, whole, b->advice);
}

void ef__shufbuf_destroy(ef__shufbuf *b)
{
    empty(b);
    ef__free(b->items);
    ef__free(b->sizes);
    b->items = NULL;
    b->sizes = NULL;
}

/* Adds a sample to the buffer, charging it; frees it and fails when the
 * buffer would pass the budget on its own. */
static int hold(ef__shufbuf *b, ef_sample *smp, ef__err *err)
{
    uint64_t n = ef__sample_bytes(smp);
    if (!ef__budget_fits(b->budget, b->bytes + n)) {
        char what[96];
        snprintf(what, sizeof what, "%s: its buffer at %zu samples (of %zu)",
                 b->owner, b->n + 1, b->cap);
        ef_sample_free(smp);
        return ef__budget_check(b->budget, b->bytes + n, what, err);
    }
    if (!b->step) /* the budget is set by the time items come */
        b->step = b->budget->limit && b->budget->limit / 64 < STEP_MAX
                      ? b->budget->limit / 64 + 1
                      : STEP_MAX;
    b->bytes += n;
    ef__shufbuf_charge_up(b);
    b->sizes[b->n] = n;
    b->items[b->n++] = smp;
    return EF_OK;
}

/* Takes item i out of the buffer, giving its bytes back; the charge comes
 * down once it is two steps ahead. */
static ef_sample *take(ef__shufbuf *b, size_t i)
{
    ef_sample *smp = b->items[i];
    b->bytes -= b->sizes[i];
    b->n--;
    b->items[i] = b->items[b->n];
    b->sizes[i] = b->sizes[b->n];
    ef__shufbuf_charge_down(b);
    return smp;
}

int ef__shufbuf_overflow(ef__shufbuf *b, ef_sample *x, ef__err *err)
{
    return hold(b, x, err);
}

int ef__shufbuf_fill_next(ef__shufbuf *b, ef__producer produce, void *arg,
                          ef__rng *rng, ef_sample **out, ef__err *err)
{
    *out = NULL;
    /* a fill from empty (a pass's first call) is watched, until it warns */
    int watch = b->n == 0 && b->watcher && !b->warned && b->cap > 1;
    uint64_t t0 = watch ? ef__timer_ns() : 0, t1 = 0;
    while (!b->ended && b->n < b->cap) {
        ef_sample *smp;
        int rc = produce(arg, &smp, err);
        if (rc == EF_END)
            b->ended = 1;
        else if (rc != EF_OK)
            return rc;
        else if ((rc = hold(b, smp, err)) != EF_OK)
            return rc;
        if (watch && b->n == 1)
            t1 = ef__timer_ns();
        else if (watch && !b->warned)
            watch_fill(b, t0, t1);
    }
    if (b->n == 0)
        return EF_END;
    *out = take(b, (size_t)ef__rng_below(rng, b->n));
    return EF_OK;
}

void ef__shufbuf_reset(ef__shufbuf *b)
{
    empty(b); /* a pass cut short (take under repeat): its leftovers */
    b->ended = 0;
}

void ef__shufbuf_save(const ef__shufbuf *b, ef__state_out *o)
{
    ef__put_u64(o, (uint64_t)b->ended);
    ef__put_u64(o, b->n);
    for (size_t i = 0; i < b->n; i++) {
        ef__ident d = ef__ident_of(b->items[i]);
        ef__put_ident(o, &d);
        ef__ident_clear(&d);
    }
}

int ef__shufbuf_restore(ef__shufbuf *b, ef__state_in *in, ef__stage *from,
                        ef__err *err)
{
    uint64_t ended, n;
    ef__get_count(in, "the buffer's end flag", 1, &ended);
    int rc = ef__get_count(in, "the items in the buffer", b->cap, &n);
    b->ended = (int)ended;
    for (uint64_t i = 0; i < n && rc == EF_OK; i++) {
        ef__ident d;
        ef_sample *smp = NULL;
        if ((rc = ef__get_ident(in, "an item in the buffer", &d)) != EF_OK)
            break;
        rc = ef__stage_fetch(from, &d, &smp, err);
        ef__ident_clear(&d);
        if (rc == EF_OK && !smp)
            rc = ef__err_set(err, EF_EFORMAT,
                             "%s: an item of the buffer could not be read "
                             "again",
                             b->owner);
        /* hold() frees the sample when the budget refuses it */
        if (rc == EF_OK)
            rc = hold(b, smp, err);
    }
    return rc;
}
