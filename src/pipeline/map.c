/* SPDX-License-Identifier: Apache-2.0 */
/* The map machinery: runs a transform on `threads` worker threads, or
 * inline, for the `map` stage and every stage built as a map (decode,
 * crop, tokenize, tfexample ...; see map.h).
 *
 * Workers move items in runs (core/run_length.h): a worker pulls a run of
 * items, transforms them, and hands the results over at once, so that
 * cheap items pay one lock and at most one wake-up per run rather than
 * per item; slow items (a JPEG) go in runs of one. Each worker sizes its
 * runs from what its last ones cost. Item k of the pass is the k-th
 * pulled whatever the runs, so the output never depends on them.
 *
 * Ordered mode (the default) keeps the upstream's order with a ring of
 * slots, one run each: a worker takes sequence number `submit` while it
 * pulls a run, puts the results in slot seq % cap, and the consumer emits
 * slots in order (`emit`), item by item, without the lock inside a slot.
 * Unordered mode hands runs over through a queue as they finish.
 *
 * Inline (ordered mode): items so cheap that handing them to another
 * core costs more than their work gain nothing from the workers. While
 * `inline_on` the workers park, and once none holds a run and the ring
 * is empty the consumer pulls and transforms each item itself, numbered
 * as the workers would have, so the output is the same. With inline=auto and run=auto, items the workers find
 * cheap (CHEAP_NS, pull and transform) are timed both ways on the
 * consumer (core/inline_choice.h) and the faster way stays until the
 * next comparison; inline=always runs inline from the start.
 *
 * Lock rules: `in_mu` serialises pulls from the upstream and guards
 * `submit`; `mu` guards the ring, `emit`, `stopped` and `active`. A worker
 * may take `mu` while holding `in_mu` (and wait there for room in the
 * ring), never the other way round. `input_done` is atomic so a worker
 * whose transform failed can stop the input without taking `in_mu`, which
 * a worker waiting for room may hold. The transform runs under neither
 * lock. The threads and the queue are a feed (feed.h), which
 * also keeps the END or error the consumer took, in either mode.
 *
 * An ordered map stage whose consumer is a batch (feeds_batch) offers
 * each transform the slot of its seq in a batch slab (slabs.h) through
 * ef__map_ctx_output; `slabs` has a lock of its own, taken under no other.
 *
 * threads=auto starts one worker per usable core; worker `id` takes input
 * only while id < allowed (ef__auto_threads, set by the pipeline's tuner)
 * and otherwise waits on `park` under `mu`. `allowed`, `input_done` and
 * `stopped` are each changed before `mu` is taken to broadcast `park`, so
 * no parked worker misses a change. Which workers run never changes what
 * comes out: ordered mode still emits by sequence number. */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/cores.h"
#include "core/inline_choice.h"
#include "core/run_length.h"
#include "core/sample.h"
#include "pipeline/feed.h"
#include "pipeline/map.h"
#include "pipeline/slabs.h"
#include "pipeline/stage.h"
#include "pipeline/state.h"

struct ef_map_ctx {
    void *user;
    /* the item's generator, keyed by the stage and id, made when the
     * transform first draws (most draw nothing) */
    const ef__stage *stage;
    ef_sample_id id;
    int rng_made;
    ef__rng rng;
    ef__err *err;
    ef__slabs *slabs; /* NULL: no slots (unordered, or not before batch) */
    uint64_t seq;     /* the item's number in the pass (ordered mode) */
    int asked;        /* the slot was asked for: one slot per item */
    void *scratch;    /* the worker's, from the kernel; NULL when none */
    size_t index;     /* the item's place in its run */
};

/* Items whose pull and transform take less than this on the workers are
 * worth timing inline; slower ones (a decode) never are: a window of
 * them inline would run at one thread's pace for a while. */
#define CHEAP_NS 4000
/* The workers' items measured before that choice. */
#define CHEAP_PROBE 4096

/* A run: items pulled in order and, once transformed, their results. */
typedef struct {
    size_t n;   /* items[0..n): the last may be END or an error */
    uint64_t pull_ns; /* spent in the upstream pulling them */
    size_t cap; /* room in items and inputs */
    ef__item *items;
    /* ordered mode, for checkpoints: the identities of the inputs pulled
     * (inputs[0..pulled)); and the number of items[0] in the pass */
    ef__ident *inputs;
    size_t pulled;
    uint64_t first;
} run;

typedef struct {
    int done;   /* a worker put its run here */
    size_t pos; /* the consumer's next item of the run */
    run r;
} slot;

typedef struct {
    ef_map_fn fn;
    void *user;
    ef__map_kernel kernel; /* zero: none */
    int nthreads, ordered;
    size_t run; /* items per run, or 0: from their cost */
    pthread_mutex_t in_mu, mu;
    pthread_cond_t can_submit, can_emit;
    slot *ring;
    size_t cap;
    run *own; /* unordered mode: each worker's run, by id */
    uint64_t submit, emit;
    uint64_t items_pulled; /* under in_mu (or inline, the consumer's):
                              item numbers for slabs */
    atomic_int input_done;
    atomic_int halt; /* stopped, as seen by a worker inside a run */
    int stopped, active;
    int emit_waiting;   /* the consumer sleeps on can_emit */
    int submit_waiters; /* workers sleeping on can_submit */
    /* checkpoints (ordered): while `paused`, no worker takes a new
     * sequence number; `pulling` counts those taken and not yet
     * delivered, and paused_cv tells pause() they are all in */
    int paused, pulling;
    pthread_cond_t paused_cv;
    ef__feed feed;   /* the workers; its queue serves unordered mode */
    ef__slabs slabs; /* batch slabs, when feeding a batch in order */
    /* threads=auto (is_auto): the tuner's share, the parked workers'
     * condition, and the ids workers take as they start */
    int is_auto;
    ef__auto_threads at;
    pthread_cond_t park;
    atomic_int next_id;
    /* inline (see the top): the option, whether on; the workers' measure
     * of their items (cheap: worth comparing; probe_done once decided);
     * the consumer's comparison, the items it took, and its kernel
     * scratch */
    int inline_mode;
    atomic_int inline_on;
    _Atomic uint64_t probe_ns, probe_items;
    atomic_int probe_done, cheap;
    ef__inline_choice choice;
    uint64_t taken;
    atomic_int working; /* workers past may_work, not yet back */
    void *inline_scratch;
    int inline_scratch_made;
} map_state;

/* The option `inline`. */
enum { INLINE_AUTO, INLINE_ALWAYS, INLINE_NEVER };

/* Frees what a slot holds from item `from` on, and the identities of its
 * inputs; the slot is empty again. */
static void clear_slot(slot *sl, size_t from)
{
    for (size_t i = from; i < sl->r.n; i++)
        ef__item_clear(&sl->r.items[i]);
    for (size_t i = 0; i < sl->r.pulled; i++)
        ef__ident_clear(&sl->r.inputs[i]);
    sl->r.n = sl->r.pulled = 0;
    sl->pos = 0;
    sl->done = 0;
}

/* ---- the callback context --------------------------------------- */

void *ef_map_ctx_user(const ef_map_ctx *ctx)
{
    return ctx->user;
}

static ef__rng *ctx_rng(ef_map_ctx *ctx)
{
    if (!ctx->rng_made) {
        ef__stage_rng(ctx->stage, &ctx->rng, ctx->id);
        ctx->rng_made = 1;
    }
    return &ctx->rng;
}

uint64_t ef_map_ctx_random(ef_map_ctx *ctx)
{
    return ef__rng_u64(ctx_rng(ctx));
}

double ef_map_ctx_uniform(ef_map_ctx *ctx)
{
    return ef__rng_uniform(ctx_rng(ctx));
}

ef_status ef_map_ctx_fail(ef_map_ctx *ctx, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err->msg, sizeof ctx->err->msg, fmt, ap);
    va_end(ap);
    ctx->err->status = status;
    return status;
}

ef_buffer *ef__map_ctx_output(ef_map_ctx *ctx, size_t nbytes, size_t *offset)
{
    ef_buffer *b = NULL;
    if (ctx->slabs && !ctx->asked) {
        ctx->asked = 1;
        b = ef__slabs_take(ctx->slabs, ctx->seq, nbytes, offset);
    }
    if (!b) {
        b = ef_buffer_new(nbytes);
        *offset = 0;
    }
    return b;
}

void *ef__map_ctx_scratch(const ef_map_ctx *ctx)
{
    return ctx->scratch;
}

size_t ef__map_ctx_index(const ef_map_ctx *ctx)
{
    return ctx->index;
}

/* Runs the transform on `in` (consumed), item number `seq`, into an
 * item; `scratch` and `index` for a kernel (see ef__map_kernel). Returns
 * the output's payload bytes (0 when there is none). */
static uint64_t transform(ef__stage *s, map_state *st, ef_sample *in,
                          uint64_t seq, void *scratch, size_t index,
                          ef__item *item)
{
    ef__err err;
    ef__err_clear(&err);
    /* a fetch (seq UINT64_MAX) makes an item again outside the ring */
    ef_map_ctx ctx = {.user = st->user,
                      .err = &err,
                      .slabs =
                          st->slabs.n && seq != UINT64_MAX ? &st->slabs : NULL,
                      .seq = seq,
                      .scratch = scratch,
                      .index = index,
                      .stage = s,
                      .id = in->id};
    ef_sample *out = NULL;
    int rc = st->fn(in, &out, &ctx);
    if (rc == EF_OK && !out)
        rc = ef__err_set(&err, EF_ECALLBACK, "returned success but no sample");
    if (rc > 0)
        rc = ef__err_set(&err, EF_ECALLBACK,
                         "returned %d, not a success or an error", rc);
    /* the ordered ring is not charged: an output larger than the whole
     * budget fails here, before more of them fill the ring (budget.h) */
    uint64_t bytes = rc == EF_OK ? ef__sample_bytes(out) : 0;
    if (rc == EF_OK)
        rc = ef__budget_check(&s->ctx->budget, bytes, "its output", &err);
    if (rc == EF_OK) {
        ef__sample_origin_copy(out, in); /* it can be read again as in */
        item->status = EF_OK;
        item->sample = out;
    } else {
        ef_sample_free(out);
        item->sample = NULL;
        char at[EF__ERR_MAX / 2], where[EF__ERR_MAX / 2 + 32];
        ef__stage_where(s, in, at, sizeof at);
        snprintf(where, sizeof where, "%s: %s", s->def->info.name, at);
        if (!err.msg[0])
            ef__err_set(&err, rc, "%s", ef_strerror(rc));
        err.status = rc;
        ef__err_prefix(&err, where);
        if (ef__stage_skip(s, &err)) {
            item->status = EF_OK; /* no sample: dropped, see map_next */
        } else {
            item->status = rc;
            item->msg = ef__strdup(err.msg);
        }
    }
    ef_sample_free(in);
    return item->sample ? bytes : 0;
}

/* ---- workers ------------------------------------------------------ */

/* Marks the input finished (END, an error, or a failed transform) and
 * wakes the parked workers (threads=auto, inline) so that they end too. */
static void end_input(map_state *st)
{
    atomic_store(&st->input_done, 1);
    pthread_mutex_lock(&st->mu);
    pthread_cond_broadcast(&st->park);
    pthread_mutex_unlock(&st->mu);
}

/* threads=auto: waits while worker `id` is not among the allowed ones.
 * Returns 0 when the worker should stop. */
static int may_take(map_state *st, int id)
{
    if (id < atomic_load_explicit(&st->at.allowed, memory_order_relaxed))
        return 1;
    pthread_mutex_lock(&st->mu);
    while (id >= atomic_load(&st->at.allowed) && !st->stopped &&
           !atomic_load(&st->input_done))
        pthread_cond_wait(&st->park, &st->mu);
    int go = !st->stopped && !atomic_load(&st->input_done);
    pthread_mutex_unlock(&st->mu);
    return go;
}

/* The tuner stored a new `allowed`: the workers it lets in wake up. */
static void wake_parked(ef__stage *s)
{
    map_state *st = s->state;
    if (!atomic_load(&st->inline_on)) /* 0 while inline */
        atomic_store(&s->threads_now, atomic_load(&st->at.allowed));
    pthread_mutex_lock(&st->mu);
    pthread_cond_broadcast(&st->park);
    pthread_mutex_unlock(&st->mu);
}

/* Room for `want` items in r, which the calling worker alone holds;
 * returns how many it has (fewer when out of memory, at least 1). */
static size_t run_room(run *r, size_t want, int with_inputs)
{
    assert(r->cap >= 1); /* made so by ef__map_setup */
    if (want <= r->cap)
        return want;
    ef__item *items = ef__realloc(r->items, want * sizeof *items);
    if (items)
        r->items = items;
    ef__ident *inputs = with_inputs && items
                            ? ef__realloc(r->inputs, want * sizeof *inputs)
                            : NULL;
    if (inputs)
        r->inputs = inputs;
    if (items && (inputs || !with_inputs))
        r->cap = want;
    return want < r->cap ? want : r->cap;
}

/* Ordered mode: reserves the next slot, waiting for room in the ring;
 * under in_mu. Returns 0 when the worker should stop. */
static int reserve_slot(ef__stage *s, map_state *st, uint64_t *seq)
{
    pthread_mutex_lock(&st->mu);
    if ((st->submit - st->emit >= st->cap || st->paused) && !st->stopped) {
        uint64_t t0 = ef__now_ns();
        st->submit_waiters++;
        while ((st->submit - st->emit >= st->cap || st->paused) && !st->stopped)
            pthread_cond_wait(&st->can_submit, &st->mu);
        st->submit_waiters--;
        ef__stat_add(&s->wait_down_ns, ef__now_ns() - t0);
    }
    int go = !st->stopped;
    *seq = st->submit;
    st->submit += go;
    st->pulling += go;
    pthread_mutex_unlock(&st->mu);
    return go;
}

/* Pulls up to `want` items into r under in_mu (ordered mode first
 * reserves slot *seq, whose run r is). Returns 0 when the worker should
 * stop; r->n is then 0. */
static int take_run(ef__stage *s, map_state *st, size_t want, uint64_t *seq,
                    run **rp, run *own)
{
    /* own: unordered mode's run, this worker's */
    run *r = own;
    r->n = 0;
    pthread_mutex_lock(&st->in_mu);
    int go = !atomic_load(&st->input_done);
    if (go && st->ordered && (go = reserve_slot(s, st, seq)) != 0)
        r = &st->ring[*seq % st->cap].r;
    want = go ? run_room(r, want, st->ordered) : 0;
    r->first = st->items_pulled;
    r->pulled = 0;
    ef__err err;
    uint64_t pulled_at = ef__stat_get(&s->wait_up_ns);
    while (r->n < want) {
        ef__item *it = &r->items[r->n++];
        memset(it, 0, sizeof *it);
        ef__err_clear(&err);
        uint64_t waited = ef__stat_get(&s->wait_up_ns);
        it->status = ef__stage_pull(s, &it->sample, &err);
        if (it->status != EF_OK) {
            end_input(st);
            if (it->status < 0)
                it->msg = ef__strdup(err.msg);
            break;
        }
        if (st->ordered)
            r->inputs[r->pulled++] = ef__ident_of(it->sample);
        /* a pull that stalled (a slow read): what is here goes now */
        if (ef__stat_get(&s->wait_up_ns) - waited > EF__RUN_TARGET_NS)
            break;
    }
    st->items_pulled += r->n;
    r->pull_ns = ef__stat_get(&s->wait_up_ns) - pulled_at;
    pthread_mutex_unlock(&st->in_mu);
    *rp = r;
    return go;
}

/* Drops the run's items from i on: r->n becomes i. */
static void cut_run(run *r, size_t i)
{
    for (size_t j = i; j < r->n; j++)
        ef__item_clear(&r->items[j]);
    r->n = i;
}

/* Transforms the run's items in place. After a failure the rest of the
 * run is dropped (the input has ended) and the run cut after it; a stop
 * cuts it at once, so that a run of slow items does not keep it waiting.
 * Returns the outputs' payload bytes. */
static uint64_t transform_run(ef__stage *s, map_state *st, run *r,
                              void *scratch)
{
    uint64_t bytes = 0;
    if (scratch && st->kernel.run_begin) {
        size_t n = 0; /* the inputs: all but an END or error at the end */
        while (n < r->n && r->items[n].status == EF_OK)
            n++;
        st->kernel.run_begin(st->user, scratch, r->items, n);
    }
    for (size_t i = 0; i < r->n; i++) {
        ef__item *it = &r->items[i];
        if (it->status != EF_OK)
            break; /* END or an error: the last */
        if (atomic_load_explicit(&st->halt, memory_order_relaxed)) {
            cut_run(r, i);
            break;
        }
        bytes += transform(s, st, it->sample, r->first + i, scratch, i, it);
        if (it->status != EF_OK) {
            end_input(st);
            cut_run(r, i + 1);
            break;
        }
    }
    return bytes;
}

/* Ordered mode: the run of slot seq is done. */
static void deliver(map_state *st, uint64_t seq)
{
    pthread_mutex_lock(&st->mu);
    st->ring[seq % st->cap].done = 1;
    if (--st->pulling == 0 && st->paused)
        pthread_cond_broadcast(&st->paused_cv);
    if (st->emit_waiting && seq == st->emit)
        pthread_cond_signal(&st->can_emit);
    pthread_mutex_unlock(&st->mu);
}

/* Unordered mode: hands the run's results over, but an END, which only
 * the last worker hands over (worker_main). Returns 0 when the worker
 * should stop. */
static int deliver_unordered(map_state *st, run *r)
{
    size_t n = r->n;
    int last = n > 0 && r->items[n - 1].status != EF_OK;
    if (last && r->items[n - 1].status == EF_END)
        n--;
    return ef__feed_push_run(&st->feed, r->items, n) == EF_OK && !last;
}

/* The output a worker's run may hold: the ordered ring is not charged to
 * the budget, so its runs are kept to a share of it. */
static size_t run_bytes(const ef__stage *s, const map_state *st)
{
    size_t most = (size_t)1 << 20;
    uint64_t share = s->ctx->budget.limit / (2 * st->cap);
    return s->ctx->budget.limit && share < most ? (size_t)share : most;
}

/* ---- inline --------------------------------------------------------- */

/* Whether the workers measure their items for the comparison. */
static int probing(const map_state *st)
{
    return st->inline_mode == INLINE_AUTO && st->ordered && st->run == 0 &&
           !atomic_load_explicit(&st->probe_done, memory_order_relaxed);
}

/* A worker's run of n items cost ns to pull and transform: once the
 * workers measured CHEAP_PROBE items, cheap ones are worth comparing. */
static void note_probe(map_state *st, size_t n, uint64_t ns)
{
    uint64_t items = atomic_fetch_add(&st->probe_items, n) + n;
    uint64_t spent = atomic_fetch_add(&st->probe_ns, ns) + ns;
    if (items >= CHEAP_PROBE && !atomic_exchange(&st->probe_done, 1))
        atomic_store(&st->cheap, spent < items * CHEAP_NS);
}

/* A consumer waiting for its slot learns that a worker is back: the
 * stage may now run inline (see take_ordered). */
static void worker_back(map_state *st)
{
    atomic_fetch_sub(&st->working, 1);
    if (!atomic_load(&st->inline_on))
        return;
    pthread_mutex_lock(&st->mu);
    if (st->emit_waiting)
        pthread_cond_signal(&st->can_emit);
    pthread_mutex_unlock(&st->mu);
}

/* Enters `working` to take a run, or waits while the stage runs inline.
 * With the consumer's store of inline_on and its load of `working` (both
 * sequentially consistent), a worker either counts before the consumer
 * looks or sees inline_on: none takes input while the consumer runs
 * inline. Returns 0 when the worker should stop. */
static int may_work(map_state *st)
{
    for (;;) {
        atomic_fetch_add(&st->working, 1);
        if (!atomic_load(&st->inline_on))
            return 1;
        worker_back(st);
        pthread_mutex_lock(&st->mu);
        while (atomic_load(&st->inline_on) && !st->stopped &&
               !atomic_load(&st->input_done))
            pthread_cond_wait(&st->park, &st->mu);
        int go = !st->stopped && !atomic_load(&st->input_done);
        pthread_mutex_unlock(&st->mu);
        if (!go)
            return 0;
    }
}

/* Runs inline (on) or on the workers; threads_now says which. */
static void set_inline(ef__stage *s, map_state *st, int on)
{
    if (atomic_load(&st->inline_on) == on)
        return;
    atomic_store(&s->threads_now,
                 on            ? 0
                 : st->is_auto ? atomic_load(&st->at.allowed)
                               : st->nthreads);
    pthread_mutex_lock(&st->mu);
    atomic_store(&st->inline_on, on);
    pthread_cond_broadcast(&st->park);
    pthread_mutex_unlock(&st->mu);
}

/* The consumer took an item: every 256 items, the comparison of both ways
 * (core/inline_choice.h) may change the way. */
static void choose_inline(ef__stage *s, map_state *st)
{
    if (st->taken++ == 0) { /* the workers measured CHEAP_PROBE items */
        ef__inline_choice_init(&st->choice, ef__timer_ns(), 1);
        return;
    }
    if ((st->taken & 255) != 0)
        return;
    int way = ef__inline_choice_note(&st->choice, 256, ef__timer_ns());
    if (way >= 0)
        set_inline(s, st, way);
}

/* Inline: the consumer pulls and transforms the next item itself. Only
 * when no worker is out (may_work) and no run is in the ring (the ring's
 * slot `emit` is empty), so it is the next item of the pass, and the
 * ring and its counters are the consumer's alone until it lets the
 * workers in again. */
static int may_run_inline(const map_state *st)
{
    return atomic_load_explicit(&st->inline_on, memory_order_relaxed) &&
           atomic_load(&st->working) == 0 && st->submit == st->emit;
}

static int next_inline(ef__stage *s, map_state *st, ef__item *item,
                       ef__err *err)
{
    if (atomic_load_explicit(&st->halt, memory_order_relaxed))
        return ef__stage_stopped(s, err);
    memset(item, 0, sizeof *item);
    ef_sample *in;
    int rc = ef__stage_pull(s, &in, err);
    if (rc != EF_OK) {
        end_input(st);
        item->status = rc;
        if (rc < 0)
            item->msg = ef__strdup(err->msg);
        return EF_OK;
    }
    if (!st->inline_scratch_made && st->kernel.scratch_new) {
        st->inline_scratch = st->kernel.scratch_new(st->user);
        st->inline_scratch_made = 1;
    }
    ef__item one = {.status = EF_OK, .sample = in};
    if (st->inline_scratch && st->kernel.run_begin)
        st->kernel.run_begin(st->user, st->inline_scratch, &one, 1);
    transform(s, st, in, st->items_pulled++, st->inline_scratch, 0, item);
    if (item->status != EF_OK)
        end_input(st);
    return EF_OK;
}

static void *worker_main(void *arg)
{
    ef__stage *s = arg;
    map_state *st = s->state;
    int id = atomic_fetch_add(&st->next_id, 1);
    run *own = &st->own[id];
    ef__run_length rl;
    /* a few tens of thousands of items in flight at most, however many
     * workers fill the ring */
    ef__run_length_init(&rl, 65536 / st->cap, run_bytes(s, st));
    void *scratch =
        st->kernel.scratch_new ? st->kernel.scratch_new(st->user) : NULL;
    for (;;) {
        uint64_t seq = 0;
        run *r;
        if (atomic_load_explicit(&st->halt, memory_order_relaxed) ||
            (st->is_auto && !may_take(st, id)) || !may_work(st))
            break;
        uint64_t t0 = ef__timer_ns();
        size_t want = ef__run_length_next(&rl);
        if (st->run) /* the bytes bound still holds: a run of images could
                        otherwise fill the memory */
            want = st->run < ef__run_length_fit(&rl) ? st->run
                                                     : ef__run_length_fit(&rl);
        if (!take_run(s, st, want, &seq, &r, own)) {
            worker_back(st);
            break;
        }
        /* threads=auto: the transform's time is what the tuner shares
         * the cores by */
        uint64_t t1 = ef__timer_ns();
        uint64_t bytes = transform_run(s, st, r, scratch);
        uint64_t t2 = ef__timer_ns();
        if (st->is_auto)
            atomic_fetch_add_explicit(&st->at.busy_ns, ef__elapsed_ns(t1, t2),
                                      memory_order_relaxed);
        ef__run_length_note(&rl, r->n, ef__elapsed_ns(t0, t2), bytes);
        if (probing(st))
            note_probe(st, r->n, r->pull_ns + ef__elapsed_ns(t1, t2));
        int last = r->n > 0 && r->items[r->n - 1].status != EF_OK;
        int go = 1;
        if (st->ordered)
            deliver(st, seq);
        else
            go = deliver_unordered(st, r);
        worker_back(st);
        if (!go || last)
            break;
    }
    if (scratch && st->kernel.scratch_free)
        st->kernel.scratch_free(st->user, scratch);
    if (!st->ordered) {
        pthread_mutex_lock(&st->mu);
        int last_one = --st->active == 0;
        pthread_mutex_unlock(&st->mu);
        if (last_one) {
            ef__item end = {.status = EF_END};
            ef__feed_push(&st->feed, &end);
        }
    }
    return NULL;
}

/* ---- setting up and running -------------------------------------- */

/* After starting the workers (rc: how that went): when some did not
 * start, the last of those that did still hands END over. */
static int started(map_state *st, int rc)
{
    if (rc != EF_OK) {
        pthread_mutex_lock(&st->mu);
        st->active -= st->nthreads - st->feed.started;
        pthread_mutex_unlock(&st->mu);
    }
    return rc;
}

/* The ring's runs and the workers' own, each with room for one item to
 * start with (runs grow as their workers need): 1, or 0 when out of
 * memory. */
static int alloc_runs(map_state *st)
{
    st->ring = ef__calloc(st->cap, sizeof *st->ring);
    st->own = ef__calloc((size_t)st->nthreads, sizeof *st->own);
    if (!st->ring || !st->own)
        return 0;
    for (size_t i = 0; i < st->cap + (size_t)st->nthreads; i++) {
        run *r = i < st->cap ? &st->ring[i].r : &st->own[i - st->cap];
        r->items = ef__calloc(1, sizeof *r->items);
        r->inputs = ef__calloc(1, sizeof *r->inputs);
        if (!r->items || !r->inputs)
            return 0;
        r->cap = 1;
    }
    return 1;
}

/* Frees the runs and what they hold. */
static void free_runs(map_state *st)
{
    for (size_t i = 0; st->ring && i < st->cap; i++) {
        clear_slot(&st->ring[i], st->ring[i].pos);
        ef__free(st->ring[i].r.items);
        ef__free(st->ring[i].r.inputs);
    }
    for (int i = 0; st->own && i < st->nthreads; i++) {
        ef__free(st->own[i].items);
        ef__free(st->own[i].inputs);
    }
    ef__free(st->ring);
    ef__free(st->own);
    st->ring = NULL;
    st->own = NULL;
}

/* The option `inline` into *mode. */
static int parse_inline(const ef__stage *s, int ordered, int *mode,
                        ef__err *err)
{
    static const char *const ways[] = {"auto", "always", "never"};
    const char *v = ef__opt_string(&s->opts, "inline");
    *mode = -1;
    for (int i = 0; i < 3; i++)
        if (strcmp(v, ways[i]) == 0)
            *mode = i;
    if (*mode < 0)
        return ef__err_set(err, EF_ESPEC,
                           "stage '%s': option 'inline' must be auto, always "
                           "or never, not '%s'",
                           s->def->info.name, v);
    if (*mode == INLINE_ALWAYS && !ordered)
        return ef__err_set(err, EF_ESPEC,
                           "stage '%s': inline=always runs items in their "
                           "order on the consumer's thread, which "
                           "ordered=false does not ask for",
                           s->def->info.name);
    return EF_OK;
}

int ef__map_setup(ef__stage *s, ef_map_fn fn, void *user, int threads,
                  int ordered, ef__err *err)
{
    int mode;
    int rc = parse_inline(s, ordered, &mode, err);
    if (rc != EF_OK)
        return rc;
    map_state *st = ef__stage_new_state(s, sizeof *st, err);
    if (!st)
        return EF_ENOMEM;
    st->fn = fn;
    st->user = user;
    st->run = (size_t)ef__opt_int(&s->opts, "run");
    st->is_auto = threads == 0;
    if (st->is_auto) {
        /* one worker per usable core; one takes input until the tuner
         * has measured something */
        int cores = ef__usable_cores();
        threads = cores < EF__MAP_MAX_THREADS ? cores : EF__MAP_MAX_THREADS;
        st->at.max = threads;
        atomic_init(&st->at.allowed, 1);
        st->at.wake = wake_parked;
    }
    atomic_store(&s->threads_now, st->is_auto ? 1 : threads);
    st->nthreads = threads;
    st->ordered = ordered;
    st->cap = (size_t)st->nthreads * 16;
    /* the ordered ring is bounded by its count of runs, and each run by
     * its bytes (run_bytes); the queue is charged to the budget */
    st->inline_mode = mode;
    if (mode == INLINE_ALWAYS) {
        atomic_init(&st->inline_on, 1);
        atomic_store(&s->threads_now, 0);
    }
    rc = alloc_runs(st) ? ef__feed_init(&st->feed, s, st->cap, threads,
                                            worker_main, s, err)
                            : ef__err_set(err, EF_ENOMEM, "%s: out of memory",
                                          s->def->info.name);
    if (rc != EF_OK) {
        free_runs(st);
        ef__free(st);
        s->state = NULL; /* destroy() would expect the locks */
        return rc;
    }
    pthread_mutex_init(&st->in_mu, NULL);
    pthread_mutex_init(&st->mu, NULL);
    ef__slabs_init(&st->slabs);
    pthread_cond_init(&st->can_submit, NULL);
    pthread_cond_init(&st->can_emit, NULL);
    pthread_cond_init(&st->park, NULL);
    pthread_cond_init(&st->paused_cv, NULL);
    if (st->is_auto) /* for the tuner, now that the state stays */
        s->auto_threads = &st->at;
    return EF_OK;
}

void ef__map_set_kernel(ef__stage *s, const ef__map_kernel *k)
{
    ((map_state *)s->state)->kernel = *k;
}

void ef__map_feeds_batch(ef__stage *s, int64_t n)
{
    map_state *st = s->state;
    /* slots follow the ring's order; unordered results have none. Out of
     * memory for the table only leaves slabs off. */
    if (st->ordered && n > 1)
        (void)ef__slabs_on(&st->slabs, (uint64_t)n,
                           (uint64_t)st->cap * EF__RUN_MAX);
}

int ef__map_open(ef__stage *s, ef__err *err)
{
    map_state *st = s->state;
    st->active = st->nthreads;
    atomic_store(&st->next_id, 0);
    return started(st, ef__feed_start(&st->feed, err));
}

/* Ordered mode: waits until a worker put the run of slot `emit` there
 * (EF_OK), or the consumer may run inline (EF_AGAIN); EF_ECANCELED when
 * the stage was stopped. */
static int wait_slot(ef__stage *s, map_state *st, slot *sl, ef__err *err)
{
    pthread_mutex_lock(&st->mu);
    st->emit_waiting = 1;
    while (!sl->done && !st->stopped && !may_run_inline(st))
        pthread_cond_wait(&st->can_emit, &st->mu);
    st->emit_waiting = 0;
    int stopped = st->stopped, done = sl->done;
    pthread_mutex_unlock(&st->mu);
    return stopped ? ef__stage_stopped(s, err) : done ? EF_OK : EF_AGAIN;
}

/* Ordered mode: the consumer is through slot `emit`; its workers may use
 * it again. */
static void release_slot(map_state *st, slot *sl)
{
    clear_slot(sl, sl->pos);
    pthread_mutex_lock(&st->mu);
    st->emit++;
    /* wake workers in bulk, once half the ring is free: fewer context
     * switches than one wake-up per run */
    if (st->submit_waiters && st->submit - st->emit <= st->cap / 2)
        pthread_cond_broadcast(&st->can_submit);
    pthread_mutex_unlock(&st->mu);
}

/* Ordered mode: the next item, in the run of slot `emit`. A slot whose
 * run the consumer is reading is the consumer's alone (done stays set
 * until release_slot), so its items are taken without the lock. */
static int take_ordered(ef__stage *s, map_state *st, ef__item *item,
                        ef__err *err)
{
    for (;;) {
        slot *sl = &st->ring[st->emit % st->cap];
        if (sl->pos == 0) {
            if (may_run_inline(st))
                return next_inline(s, st, item, err);
            int rc = wait_slot(s, st, sl, err);
            if (rc == EF_AGAIN)
                continue;
            if (rc != EF_OK)
                return rc;
        }
        if (sl->pos < sl->r.n) {
            *item = sl->r.items[sl->pos];
            memset(&sl->r.items[sl->pos++], 0, sizeof *item);
            /* END or an error: the slot stays, as its pass has ended */
            return EF_OK;
        }
        release_slot(st, sl);
    }
}

int ef__map_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    map_state *st = s->state;
    int rc;
    /* either way an item without a sample is one dropped under
     * on_error=skip */
    if (!st->ordered) {
        do
            rc = ef__feed_take(&st->feed, out, 1, err);
        while (rc == EF_OK && !*out);
        return rc;
    }
    *out = NULL;
    if ((rc = ef__feed_final(&st->feed, err)) != 0)
        return rc;
    ef__item item;
    do {
        if ((rc = take_ordered(s, st, &item, err)) != EF_OK)
            return rc;
        if (item.status != EF_OK)
            return ef__feed_finish(&st->feed, &item, err);
    } while (!item.sample);
    *out = item.sample;
    if (atomic_load_explicit(&st->cheap, memory_order_relaxed))
        choose_inline(s, st);
    return EF_OK;
}

int ef__map_reset(ef__stage *s, int64_t epoch, ef__err *err)
{
    map_state *st = s->state;
    /* Mid-pass (take under repeat) the workers may wait on a full ring or
     * queue (after the END the consumer took, they have ended): stop
     * them, then drop what they had done. */
    ef__map_cancel(s);
    ef__feed_stop(&st->feed);
    assert(atomic_load(&st->working) == 0); /* every worker came back */
    /* the new pass numbers its items, and batch its batches, from 0 */
    ef__slabs_clear(&st->slabs);
    for (size_t i = 0; i < st->cap; i++)
        clear_slot(&st->ring[i], st->ring[i].pos);
    pthread_mutex_lock(&st->mu);
    st->stopped = 0;
    pthread_mutex_unlock(&st->mu);
    atomic_store(&st->halt, 0);
    atomic_store(&st->input_done, 0);
    st->submit = st->emit = 0;
    st->items_pulled = 0;
    st->active = st->nthreads;
    atomic_store(&st->next_id, 0);
    int rc = started(st, ef__feed_restart(&st->feed, epoch, err));
    if (rc == EF_ECANCELED) /* a stop that came before the restart stays */
        ef__map_cancel(s);
    return rc;
}

void ef__map_cancel(ef__stage *s)
{
    map_state *st = s->state;
    atomic_store(&st->halt, 1);
    pthread_mutex_lock(&st->mu);
    st->stopped = 1;
    pthread_cond_broadcast(&st->can_submit);
    pthread_cond_broadcast(&st->can_emit);
    pthread_cond_broadcast(&st->park);
    pthread_mutex_unlock(&st->mu);
    ef__feed_cancel(&st->feed);
}

void ef__map_destroy(ef__stage *s)
{
    map_state *st = s->state;
    ef__map_cancel(s);
    ef__feed_destroy(&st->feed);
    if (st->inline_scratch && st->kernel.scratch_free)
        st->kernel.scratch_free(st->user, st->inline_scratch);
    free_runs(st);
    ef__slabs_destroy(&st->slabs);
    pthread_mutex_destroy(&st->in_mu);
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->can_submit);
    pthread_cond_destroy(&st->can_emit);
    pthread_cond_destroy(&st->park);
    pthread_cond_destroy(&st->paused_cv);
    ef__free(st);
}

/* ---- checkpoints ------------------------------------------------- */

void ef__map_pause(ef__stage *s)
{
    map_state *st = s->state;
    if (!st->ordered)
        return; /* save() refuses */
    pthread_mutex_lock(&st->mu);
    st->paused = 1;
    while (st->pulling > 0 && !st->stopped)
        pthread_cond_wait(&st->paused_cv, &st->mu);
    pthread_mutex_unlock(&st->mu);
}

void ef__map_resume(ef__stage *s)
{
    map_state *st = s->state;
    pthread_mutex_lock(&st->mu);
    st->paused = 0;
    pthread_cond_broadcast(&st->can_submit);
    pthread_mutex_unlock(&st->mu);
}

/* What the workers took and the consumer has not: the inputs of the
 * ring's runs from `emit` on, in order, to be transformed again; of the
 * run the consumer is reading, those after the items it took. */
int ef__map_save(ef__stage *s, ef__state_out *o, ef__err *err)
{
    map_state *st = s->state;
    if (!st->ordered)
        return ef__err_set(err, EF_EUNSUPPORTED,
                           "%s with ordered=false emits in an order that "
                           "depends on timing: its position cannot be saved "
                           "(use ordered=true)",
                           s->def->info.name);
    pthread_mutex_lock(&st->mu);
    for (uint64_t seq = st->emit; seq < st->submit; seq++) {
        const slot *sl = &st->ring[seq % st->cap];
        for (size_t i = seq == st->emit ? sl->pos : 0; i < sl->r.pulled; i++)
            ef__state_replay_ident(o, &sl->r.inputs[i]);
    }
    pthread_mutex_unlock(&st->mu);
    return EF_OK;
}

int ef__map_fetch(ef__stage *s, const ef__ident *d, ef_sample **out,
                  ef__err *err)
{
    map_state *st = s->state;
    ef_sample *in;
    int rc = ef__stage_fetch(s->up, d, &in, err);
    if (rc != EF_OK || !in)
        return rc;
    ef__item item = {0};
    transform(s, st, in, UINT64_MAX, NULL, 0, &item);
    if (item.status != EF_OK) {
        ef__err_set(err, item.status, "%s",
                    item.msg ? item.msg : ef_strerror(item.status));
        ef__item_clear(&item);
        return err->status;
    }
    *out = item.sample; /* NULL: dropped under on_error=skip */
    return EF_OK;
}

void *ef__map_user(const ef__stage *s)
{
    return ((const map_state *)s->state)->user;
}

