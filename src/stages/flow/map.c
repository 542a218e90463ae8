/* map: runs a transform (a user callback or a built-in) on `threads`
 * threads.
 *
 * Ordered mode (the default) keeps the upstream's order with a ring of
 * slots: a worker takes sequence number `submit` while it pulls an item,
 * puts the result in slot seq % cap, and the consumer emits slots in order
 * (`emit`). Unordered mode hands results over through a queue as they
 * finish.
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
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/cores.h"
#include "core/sample.h"
#include "feed.h"
#include "stage.h"
#include "stages/flow/map.h"
#include "stages/flow/slabs.h"
#include "state.h"

struct ef_map_ctx {
    void *user;
    ef__rng rng;
    ef__err *err;
    ef__slabs *slabs; /* NULL: no slots (unordered, or not before batch) */
    uint64_t seq;     /* the item's sequence number in the ordered ring */
    int asked;        /* the slot was asked for: one slot per item */
};

typedef struct {
    int done;
    ef__item item;
    /* the identity of the input pulled for this slot (set: pulled and
     * not yet emitted), for checkpoints */
    int pulled;
    ef__ident input;
} slot;

typedef struct {
    ef_map_fn fn;
    void *user;
    int nthreads, ordered;
    pthread_mutex_t in_mu, mu;
    pthread_cond_t can_submit, can_emit;
    slot *ring;
    size_t cap;
    uint64_t submit, emit;
    atomic_int input_done;
    int stopped, active;
    int emit_waiting;   /* the consumer sleeps on can_emit */
    int submit_waiters; /* workers sleeping on can_submit */
    /* checkpoints (ordered): while `paused`, no worker takes a new
     * sequence number; `pulling` counts those taken and not yet
     * delivered, and paused_cv tells pause() they are all in */
    int paused, pulling;
    pthread_cond_t paused_cv;
    ef__feed feed;      /* the workers; its queue serves unordered mode */
    ef__slabs slabs;    /* batch slabs, when feeding a batch in order */
    /* threads=auto (is_auto): the tuner's share, the parked workers'
     * condition, and the ids workers take as they start */
    int is_auto;
    ef__auto_threads at;
    pthread_cond_t park;
    atomic_int next_id;
} map_state;

/* ---- the built-in transforms ------------------------------------ */

static int map_noop(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    *out = ef_sample_clone(in);
    return *out ? EF_OK : ef_map_ctx_fail(ctx, EF_ENOMEM, "out of memory");
}

/* Every u8 field becomes f32 in [0, 1]; other fields are shared. */
static int map_to_f32(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    ef_sample *o = ef_sample_new(in->id);
    int rc = o ? EF_OK : EF_ENOMEM;
    for (int i = 0; i < in->nfields && rc == EF_OK; i++) {
        const ef__field *f = &in->fields[i];
        if (f->dtype != EF_U8) {
            rc = ef_sample_add(o, f->name, f->dtype, f->ndim, f->shape, f->buf,
                               f->offset);
            continue;
        }
        float *dst;
        rc = ef_sample_add_new(o, f->name, EF_F32, f->ndim, f->shape,
                               (void **)&dst);
        if (rc != EF_OK)
            break;
        const unsigned char *src =
            (const unsigned char *)ef_buffer_data(f->buf) + f->offset;
        for (size_t j = 0; j < f->nbytes; j++)
            dst[j] = (float)src[j] * (1.0f / 255.0f);
    }
    if (rc != EF_OK) {
        ef_sample_free(o);
        return ef_map_ctx_fail(ctx, rc, "%s", ef_strerror(rc));
    }
    *out = o;
    return EF_OK;
}

static const struct {
    const char *name;
    ef_map_fn fn;
} builtins[] = {
    {"noop", map_noop},
    {"to_f32", map_to_f32},
};

/* ---- the callback context --------------------------------------- */

void *ef_map_ctx_user(const ef_map_ctx *ctx)
{
    return ctx->user;
}

uint64_t ef_map_ctx_random(ef_map_ctx *ctx)
{
    return ef__rng_u64(&ctx->rng);
}

double ef_map_ctx_uniform(ef_map_ctx *ctx)
{
    return ef__rng_uniform(&ctx->rng);
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

/* Runs the transform on `in` (consumed), sequence number `seq`, into an
 * item. */
static void transform(ef__stage *s, map_state *st, ef_sample *in, uint64_t seq,
                      ef__item *item)
{
    ef__err err;
    ef__err_clear(&err);
    /* a fetch (seq UINT64_MAX) makes an item again outside the ring */
    ef_map_ctx ctx = {.user = st->user,
                      .err = &err,
                      .slabs = st->slabs.n && seq != UINT64_MAX ? &st->slabs
                                                                : NULL,
                      .seq = seq};
    ef__stage_rng(s, &ctx.rng, in->id);
    ef_sample *out = NULL;
    int rc = st->fn(in, &out, &ctx);
    if (rc == EF_OK && !out)
        rc = ef__err_set(&err, EF_ECALLBACK, "returned success but no sample");
    if (rc > 0)
        rc = ef__err_set(&err, EF_ECALLBACK,
                         "returned %d, not a success or an error", rc);
    /* the ordered ring is not charged: an output larger than the whole
     * budget fails here, before more of them fill the ring (budget.h) */
    if (rc == EF_OK)
        rc = ef__budget_check(&s->ctx->budget, ef__sample_bytes(out),
                              "its output", &err);
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
}

/* ---- workers ------------------------------------------------------ */

/* Marks the input finished (END, an error, or a failed transform) and,
 * with threads=auto, wakes the parked workers so that they end too. */
static void end_input(map_state *st)
{
    atomic_store(&st->input_done, 1);
    if (st->is_auto) {
        pthread_mutex_lock(&st->mu);
        pthread_cond_broadcast(&st->park);
        pthread_mutex_unlock(&st->mu);
    }
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
    atomic_store(&s->threads_now, atomic_load(&st->at.allowed));
    pthread_mutex_lock(&st->mu);
    pthread_cond_broadcast(&st->park);
    pthread_mutex_unlock(&st->mu);
}

/* Pulls one item under in_mu. Ordered mode first reserves a slot. Returns
 * 0 when the worker should stop. */
static int take_input(ef__stage *s, map_state *st, uint64_t *seq,
                      ef__item *item)
{
    int go = 0;
    pthread_mutex_lock(&st->in_mu);
    if (!atomic_load(&st->input_done)) {
        go = 1;
        if (st->ordered) {
            pthread_mutex_lock(&st->mu);
            if ((st->submit - st->emit >= st->cap || st->paused) &&
                !st->stopped) {
                uint64_t t0 = ef__now_ns();
                st->submit_waiters++;
                while ((st->submit - st->emit >= st->cap || st->paused) &&
                       !st->stopped)
                    pthread_cond_wait(&st->can_submit, &st->mu);
                st->submit_waiters--;
                ef__stat_add(&s->wait_down_ns, ef__now_ns() - t0);
            }
            go = !st->stopped;
            *seq = st->submit++;
            st->pulling += go;
            pthread_mutex_unlock(&st->mu);
        }
    }
    if (go) {
        ef__err err;
        ef__err_clear(&err);
        item->status = ef__stage_pull(s, &item->sample, &err);
        if (st->ordered && item->status == EF_OK) {
            /* the slot is free: its last item was emitted */
            slot *sl = &st->ring[*seq % st->cap];
            sl->input = ef__ident_of(item->sample);
            sl->pulled = 1;
        }
        if (item->status != EF_OK) {
            end_input(st);
            if (item->status < 0)
                item->msg = ef__strdup(err.msg);
        }
    }
    pthread_mutex_unlock(&st->in_mu);
    return go;
}

/* Hands a result over; returns 0 when the worker should stop. */
static int deliver(map_state *st, uint64_t seq, ef__item *item)
{
    if (!st->ordered)
        return ef__feed_push(&st->feed, item) == EF_OK;
    pthread_mutex_lock(&st->mu);
    slot *sl = &st->ring[seq % st->cap];
    sl->item = *item;
    sl->done = 1;
    if (--st->pulling == 0 && st->paused)
        pthread_cond_broadcast(&st->paused_cv);
    if (st->emit_waiting && seq == st->emit)
        pthread_cond_signal(&st->can_emit);
    pthread_mutex_unlock(&st->mu);
    return 1;
}

static void *worker_main(void *arg)
{
    ef__stage *s = arg;
    map_state *st = s->state;
    int id = atomic_fetch_add(&st->next_id, 1);
    for (;;) {
        uint64_t seq = 0;
        ef__item item = {0};
        if (st->is_auto && !may_take(st, id))
            break;
        if (!take_input(s, st, &seq, &item))
            break;
        int last = item.status != EF_OK;
        if (item.status == EF_OK) {
            /* threads=auto: the transform's time is what the tuner
             * shares the cores by */
            uint64_t t0 = st->is_auto ? ef__timer_ns() : 0;
            transform(s, st, item.sample, seq, &item);
            if (st->is_auto)
                atomic_fetch_add_explicit(&st->at.busy_ns,
                                          ef__elapsed_ns(t0, ef__timer_ns()),
                                          memory_order_relaxed);
            if (item.status != EF_OK) {
                end_input(st);
                last = 1;
            }
        }
        /* unordered: END goes out only from the last worker, below */
        if (!st->ordered && item.status == EF_END)
            break;
        if (!deliver(st, seq, &item) || last)
            break;
    }
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

/* ---- the stage ---------------------------------------------------- */

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

/* The names bound for the parse under way, "a, b", into buf. */
static void bound_names(const ef__ctx *ctx, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; ctx->bound && i < ctx->bound->n && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? ", " : "",
                                 ctx->bound->v[i].name);
}

static int map_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    const char *name = ef__opt_string(o, "fn");
    ef_map_fn fn = (ef_map_fn)s->user_fn;
    void *user = s->user_data;
    if (fn && name[0])
        return ef__err_set(err, EF_ESPEC,
                           "stage 'map': option 'fn' cannot be combined with a "
                           "C callback");
    /* a bound name comes first: it may shadow a built-in */
    const ef__bound_map *b = fn ? NULL : ef__ctx_use_map(s->ctx, name);
    if (b) {
        fn = b->fn;
        user = b->user;
    }
    for (size_t i = 0; !fn && i < sizeof builtins / sizeof builtins[0]; i++)
        if (strcmp(builtins[i].name, name) == 0)
            fn = builtins[i].fn;
    if (!fn && !name[0])
        return ef__err_set(err, EF_ESPEC,
                           "stage 'map': option 'fn' is required (built-ins: "
                           "noop, to_f32)");
    if (!fn) {
        char bound[256];
        bound_names(s->ctx, bound, sizeof bound);
        return ef__err_set(err, EF_ESPEC,
                           "stage 'map': option 'fn' names no %stransform: "
                           "'%s' (%s%s%sbuilt-ins: noop, to_f32)",
                           bound[0] ? "bound map or built-in " : "built-in ",
                           name, bound[0] ? "bound: " : "", bound,
                           bound[0] ? "; " : "");
    }
    return ef__map_setup(s, fn, user, (int)ef__opt_int(o, "threads"),
                         ef__opt_bool(o, "ordered"), err);
}

int ef__map_setup(ef__stage *s, ef_map_fn fn, void *user, int threads,
                  int ordered, ef__err *err)
{
    map_state *st = ef__stage_new_state(s, sizeof *st, err);
    if (!st)
        return EF_ENOMEM;
    st->fn = fn;
    st->user = user;
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
    st->ring = ef__calloc(st->cap, sizeof *st->ring);
    /* the ordered ring is bounded by its count of slots only; the queue
     * is charged to the budget */
    int rc = st->ring ? ef__feed_init(&st->feed, s, st->cap, threads,
                                      worker_main, s, err)
                      : ef__err_set(err, EF_ENOMEM, "%s: out of memory",
                                    s->def->info.name);
    if (rc != EF_OK) {
        ef__free(st->ring);
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

void ef__map_feeds_batch(ef__stage *s, int64_t n)
{
    map_state *st = s->state;
    /* slots follow the ring's order; unordered results have none. Out of
     * memory for the table only leaves slabs off. */
    if (st->ordered && n > 1)
        (void)ef__slabs_on(&st->slabs, (uint64_t)n, st->cap);
}

int ef__map_open(ef__stage *s, ef__err *err)
{
    map_state *st = s->state;
    st->active = st->nthreads;
    atomic_store(&st->next_id, 0);
    return started(st, ef__feed_start(&st->feed, err));
}

/* Ordered mode: the item of slot `emit`, once a worker has put it there;
 * EF_ECANCELED when the stage was stopped. */
static int take_slot(ef__stage *s, map_state *st, ef__item *item, ef__err *err)
{
    pthread_mutex_lock(&st->mu);
    slot *sl = &st->ring[st->emit % st->cap];
    st->emit_waiting = 1;
    while (!sl->done && !st->stopped)
        pthread_cond_wait(&st->can_emit, &st->mu);
    st->emit_waiting = 0;
    if (st->stopped) {
        pthread_mutex_unlock(&st->mu);
        return ef__stage_stopped(s, err);
    }
    *item = sl->item;
    sl->done = 0;
    memset(&sl->item, 0, sizeof sl->item);
    sl->pulled = 0;
    ef__ident_clear(&sl->input);
    if (item->status == EF_OK) {
        st->emit++;
        /* wake workers in bulk, once half the ring is free: fewer
         * context switches than one wake-up per item */
        if (st->submit_waiters && st->submit - st->emit <= st->cap / 2)
            pthread_cond_broadcast(&st->can_submit);
    }
    pthread_mutex_unlock(&st->mu);
    return EF_OK;
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
        if ((rc = take_slot(s, st, &item, err)) != EF_OK)
            return rc;
        if (item.status != EF_OK)
            return ef__feed_finish(&st->feed, &item, err);
    } while (!item.sample);
    *out = item.sample;
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
    /* the new pass numbers its items, and batch its batches, from 0 */
    ef__slabs_clear(&st->slabs);
    for (size_t i = 0; i < st->cap; i++) {
        if (st->ring[i].done) {
            ef__item_clear(&st->ring[i].item);
            st->ring[i].done = 0;
        }
        st->ring[i].pulled = 0;
        ef__ident_clear(&st->ring[i].input);
    }
    pthread_mutex_lock(&st->mu);
    st->stopped = 0;
    pthread_mutex_unlock(&st->mu);
    atomic_store(&st->input_done, 0);
    st->submit = st->emit = 0;
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
    for (size_t i = 0; i < st->cap; i++) {
        if (st->ring[i].done)
            ef__item_clear(&st->ring[i].item);
        ef__ident_clear(&st->ring[i].input);
    }
    ef__slabs_destroy(&st->slabs);
    pthread_mutex_destroy(&st->in_mu);
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->can_submit);
    pthread_cond_destroy(&st->can_emit);
    pthread_cond_destroy(&st->park);
    pthread_cond_destroy(&st->paused_cv);
    ef__free(st->ring);
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
 * ring's slots from `emit` on, in order, to be transformed again. */
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
        if (sl->pulled)
            ef__state_replay_ident(o, &sl->input);
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
    transform(s, st, in, UINT64_MAX, &item);
    if (item.status != EF_OK) {
        ef__err_set(err, item.status, "%s",
                    item.msg ? item.msg : ef_strerror(item.status));
        ef__item_clear(&item);
        return err->status;
    }
    *out = item.sample; /* NULL: dropped under on_error=skip */
    return EF_OK;
}

static const ef__option_def map_options[] = {
    {"fn", EF_OPT_STRING, "",
     "built-in transform (noop, to_f32), or a name bound to a callback "
     "(ef_pipeline_bind_map)",
     0, 0},
    EF__MAP_THREADS_OPTION,
    {"ordered", EF_OPT_BOOL, "true",
     "keep the upstream's order (deterministic)", 0, 0},
};

void *ef__map_user(const ef__stage *s)
{
    return ((const map_state *)s->state)->user;
}

const ef__stage_def ef__stage_map = {
    .info = {"map", "apply a transform on worker threads",
             EF__OPTIONS(map_options)},
    .create = map_create,
    .open = ef__map_open,
    .next = ef__map_next,
    .reset = ef__map_reset,
    .cancel = ef__map_cancel,
    .destroy = ef__map_destroy,
    .pause = ef__map_pause,
    .resume = ef__map_resume,
    .save = ef__map_save,
    .fetch = ef__map_fetch,
};
