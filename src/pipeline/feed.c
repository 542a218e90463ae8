/* SPDX-License-Identifier: Apache-2.0 */
/* Producer threads feeding a stage's queue (see feed.h). The queue
 * does the locking; the fields here are the consumer thread's, except
 * what cancel() touches, which is only the queue. */
#include "pipeline/feed.h"

#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/run_length.h"
#include "core/sample.h"
#include "pipeline/state.h"

int ef__feed_init(ef__feed *p, ef__stage *owner, size_t depth, int nthreads,
                  void *(*main)(void *), void *arg, ef__err *err)
{
    memset(p, 0, sizeof *p);
    p->owner = owner;
    p->main = main;
    p->arg = arg;
    p->nthreads = nthreads;
    p->threads = ef__calloc((size_t)nthreads, sizeof *p->threads);
    p->hands = ef__calloc(EF__RUN_MAX, sizeof *p->hands);
    p->run = ef__calloc(EF__RUN_MAX, sizeof *p->run);
    p->cache = ef__calloc(EF__RUN_MAX, sizeof *p->cache);
    pthread_mutex_init(&p->gate, NULL);
    if (!p->threads || !p->hands || !p->run || !p->cache ||
        ef__queue_init(&p->q, depth) != EF_OK) {
        ef__feed_destroy(p);
        return ef__err_set(err, EF_ENOMEM,
                           "%s: out of memory for a queue of %zu",
                           owner->def->info.name, depth);
    }
    ef__queue_set_budget(&p->q, &owner->ctx->budget, owner->def->info.name);
    return EF_OK;
}

int ef__feed_start(ef__feed *p, ef__err *err)
{
    for (; p->started < p->nthreads; p->started++) {
        int rc = pthread_create(&p->threads[p->started], NULL, p->main, p->arg);
        if (rc != 0)
            return ef__err_set(err, EF_ENOMEM, "%s: cannot start a thread: %s",
                               p->owner->def->info.name, strerror(rc));
    }
    return EF_OK;
}

/* The output a pump's run may hold: its items are charged to the budget
 * only once queued. */
static size_t run_bytes(const ef__feed *p)
{
    size_t most = (size_t)1 << 20;
    uint64_t limit = p->owner->ctx->budget.limit;
    return limit && limit / 16 < most ? (size_t)(limit / 16) : most;
}

/* Drops the identities of the run in the pump's hands; under the gate. */
static void clear_hands(ef__feed *p)
{
    for (size_t i = 0; i < p->in_hand; i++)
        ef__ident_clear(&p->hands[i]);
    p->in_hand = 0;
}

/* Pulls up to `want` items into p->run, under the gate; *last is set when
 * the final one is END or an error. Returns how many. */
static size_t pull_run(ef__feed *p, size_t want, uint64_t *bytes, int *last)
{
    ef__stage *s = p->owner;
    size_t n = 0;
    ef__err err;
    pthread_mutex_lock(&p->gate);
    clear_hands(p); /* the last run is queued: nothing of it is in hand */
    while (n < want) {
        ef__item *it = &p->run[n++];
        memset(it, 0, sizeof *it);
        ef__err_clear(&err);
        uint64_t waited = ef__stat_get(&s->wait_up_ns);
        it->status = ef__stage_pull(s, &it->sample, &err);
        if (it->status != EF_OK) {
            if (it->status < 0)
                it->msg = ef__strdup(err.msg); /* NULL if out of memory: ok */
            *last = 1;
            break;
        }
        p->pulled++;
        p->hands[p->in_hand++] = ef__ident_of(it->sample);
        *bytes += ef__sample_bytes(it->sample);
        /* a pull that stalled (a slow read): what is here goes now */
        if (ef__stat_get(&s->wait_up_ns) - waited > EF__RUN_TARGET_NS)
            break;
    }
    pthread_mutex_unlock(&p->gate);
    return n;
}

void *ef__feed_pump(void *feed)
{
    ef__feed *p = feed;
    ef__run_length rl;
    ef__run_length_init(&rl, EF__RUN_MAX, run_bytes(p));
    int last = 0;
    while (!last) {
        uint64_t t0 = ef__timer_ns(), bytes = 0;
        size_t n = pull_run(p, ef__run_length_next(&rl), &bytes, &last);
        ef__run_length_note(&rl, n, ef__elapsed_ns(t0, ef__timer_ns()), bytes);
        if (ef__feed_push_run(p, p->run, n) != EF_OK)
            break;
    }
    return NULL;
}

int ef__feed_push(ef__feed *p, ef__item *item)
{
    uint64_t waited = 0;
    int rc = ef__queue_push(&p->q, item, &waited);
    atomic_fetch_add_explicit(&p->owner->wait_down_ns, waited,
                              memory_order_relaxed);
    if (rc != EF_OK)
        ef__item_clear(item);
    return rc;
}

int ef__feed_push_charged(ef__feed *p, ef__item *item)
{
    uint64_t waited = 0;
    int rc = ef__queue_push_charged(&p->q, item, &waited);
    atomic_fetch_add_explicit(&p->owner->wait_down_ns, waited,
                              memory_order_relaxed);
    if (rc != EF_OK)
        ef__item_clear(item);
    return rc;
}

int ef__feed_push_run(ef__feed *p, ef__item *items, size_t n)
{
    uint64_t waited = 0;
    size_t queued;
    int rc = ef__queue_push_run(&p->q, items, n, &queued, &waited);
    atomic_fetch_add_explicit(&p->owner->wait_down_ns, waited,
                              memory_order_relaxed);
    for (size_t i = queued; i < n; i++)
        ef__item_clear(&items[i]);
    return rc;
}

int ef__feed_take(ef__feed *p, ef_sample **out, int block, ef__err *err)
{
    *out = NULL;
    int rc = ef__feed_final(p, err);
    if (rc)
        return rc;
    if (p->cache_pos == p->cache_n) {
        p->cache_pos = p->cache_n = 0;
        rc =
            ef__queue_pop_run(&p->q, p->cache, EF__RUN_MAX, &p->cache_n, block);
        if (rc == EF_AGAIN)
            return rc;
    } else if (atomic_load_explicit(&p->q.is_closed, memory_order_relaxed)) {
        rc = EF_ECANCELED; /* a stop is not kept waiting by the cache */
    }
    if (rc != EF_OK)
        return ef__stage_stopped(p->owner, err);
    ef__item item = p->cache[p->cache_pos];
    memset(&p->cache[p->cache_pos++], 0, sizeof item);
    ef__queue_handed(&p->q, &item);
    if (item.status != EF_OK)
        return ef__feed_finish(p, &item, err);
    p->taken += item.sample != NULL;
    *out = item.sample;
    return EF_OK;
}

size_t ef__feed_ready(ef__feed *p)
{
    return p->cache_n - p->cache_pos + atomic_load(&p->q.queued);
}

/* Frees the items in the consumer's cache. */
static void drop_cache(ef__feed *p)
{
    for (; p->cache_pos < p->cache_n; p->cache_pos++) {
        ef__item *item = &p->cache[p->cache_pos];
        ef__queue_handed(&p->q, item);
        ef__item_clear(item);
    }
    p->cache_pos = p->cache_n = 0;
}

void ef__feed_pause(ef__feed *p)
{
    pthread_mutex_lock(&p->gate);
}

void ef__feed_resume(ef__feed *p)
{
    pthread_mutex_unlock(&p->gate);
}

typedef struct {
    ef__state_out *o;
    uint64_t n;
} listing;

static void list_item(void *arg, const ef__item *item)
{
    listing *l = arg;
    if (item->status == EF_OK && item->sample) {
        ef__state_replay(l->o, item->sample);
        l->n++;
    }
}

int ef__feed_save(ef__feed *p, ef__state_out *o, ef__err *err)
{
    (void)err;
    listing l = {o, 0};
    for (size_t i = p->cache_pos; i < p->cache_n; i++)
        list_item(&l, &p->cache[i]);
    ef__queue_each(&p->q, list_item, &l);
    /* pulled, and neither cached, queued nor taken: the end of the run in
     * the pump's hands, which it queues in order */
    uint64_t ahead = p->taken + l.n;
    if (p->pulled > ahead) {
        size_t m = (size_t)(p->pulled - ahead);
        for (size_t i = p->in_hand - m; i < p->in_hand; i++)
            ef__state_replay_ident(o, &p->hands[i]);
    }
    return EF_OK;
}

int ef__feed_final(const ef__feed *p, ef__err *err)
{
    if (!p->finished)
        return 0;
    if (p->final_status < 0)
        *err = p->final_err;
    return p->final_status;
}

int ef__feed_finish(ef__feed *p, ef__item *item, ef__err *err)
{
    p->finished = 1;
    p->final_status = item->status;
    if (item->status < 0)
        ef__err_set(&p->final_err, item->status, "%s",
                    item->msg ? item->msg : ef_strerror(item->status));
    ef__item_clear(item);
    return ef__feed_final(p, err);
}

void ef__feed_cancel(ef__feed *p)
{
    if (p->q.ring)
        ef__queue_close(&p->q);
}

void ef__feed_stop(ef__feed *p)
{
    ef__feed_cancel(p);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->threads[i], NULL);
    p->started = 0;
}

int ef__feed_rewind(ef__feed *p, ef__err *err)
{
    ef__feed_stop(p); /* mid-pass, a thread may wait on a full queue */
    drop_cache(p);
    ef__queue_reopen(&p->q);
    clear_hands(p);
    p->finished = 0;
    p->pulled = p->taken = 0;
    /* the pipeline's flag is set before any cancel() closes the queue: a
     * stop that came just before the reopen is seen here */
    if (ef__ctx_is_cancelled(p->owner->ctx)) {
        ef__queue_close(&p->q);
        return ef__stage_stopped(p->owner, err);
    }
    return EF_OK;
}

int ef__feed_restart(ef__feed *p, int64_t epoch, ef__err *err)
{
    int rc = ef__feed_rewind(p, err);
    if (rc == EF_OK)
        rc = ef__stage_reset_upstream(p->owner, epoch, err);
    return rc == EF_OK ? ef__feed_start(p, err) : rc;
}

void ef__feed_destroy(ef__feed *p)
{
    ef__feed_stop(p);
    if (p->q.ring)
        drop_cache(p);
    ef__queue_destroy(&p->q);
    ef__free(p->threads);
    ef__free(p->cache);
    ef__free(p->run); /* its items were queued or freed */
    p->threads = NULL;
    p->cache = p->run = NULL;
    if (p->hands) {
        clear_hands(p);
        ef__free(p->hands);
        p->hands = NULL;
        pthread_mutex_destroy(&p->gate);
    }
}
