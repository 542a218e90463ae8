/* SPDX-License-Identifier: Apache-2.0 */
/* The bounded queue (see queue.h).
 *
 * Lock rules: `mu` guards every field of the queue but the atomics `out`
 * and `push_waiting`. Waiters re-check their condition in a loop; close()
 * broadcasts both condition variables so no waiter sleeps through a
 * shutdown. No callback runs under the lock.
 *
 * A hand-out (ef__queue_handed) lowers `out` without the lock. A push
 * that finds no room counts itself in `push_waiting` and then checks
 * again, and a hand-out reads `push_waiting` after lowering `out` (both
 * sequentially consistent): either the push sees the room, or the
 * hand-out sees the waiter and wakes it under the lock, which the push
 * holds from its check until it sleeps. */
#include "core/queue.h"

#include <assert.h>
#include <stdio.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/run_length.h"
#include "core/sample.h"

void ef__item_clear(ef__item *item)
{
    ef_sample_free(item->sample);
    ef__free(item->msg);
    item->sample = NULL;
    item->msg = NULL;
}

int ef__queue_init(ef__queue *q, size_t capacity)
{
    /* room for a whole run past the limit (see push_at_once) */
    size_t ring = capacity + EF__RUN_MAX;
    q->ring = ef__calloc(ring, sizeof *q->ring);
    if (!q->ring)
        return EF_ENOMEM;
    q->cap = ring;
    q->limit = capacity;
    q->head = q->count = 0;
    q->closed = 0;
    atomic_init(&q->queued, 0);
    atomic_init(&q->is_closed, 0);
    atomic_init(&q->out, 0);
    atomic_init(&q->push_waiting, 0);
    atomic_init(&q->pending, 0);
    q->budget = NULL;
    q->owner = "queue";
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->not_empty, NULL);
    pthread_cond_init(&q->not_full, NULL);
    return EF_OK;
}

void ef__queue_set_budget(ef__queue *q, ef__budget *b, const char *owner)
{
    q->budget = b;
    q->owner = owner;
}

/* Frees a queued item and gives its bytes back. */
static void drop_item(ef__queue *q, ef__item *item)
{
    if (item->charged)
        ef__budget_release(q->budget, item->charged);
    item->charged = 0;
    ef__item_clear(item);
}

void ef__queue_destroy(ef__queue *q)
{
    if (!q->ring)
        return;
    for (size_t i = 0; i < q->count; i++)
        drop_item(q, &q->ring[(q->head + i) % q->cap]);
    ef__free(q->ring);
    q->ring = NULL;
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->not_empty);
    pthread_cond_destroy(&q->not_full);
}

/* Charges the item's sample to the budget, waiting for room. A sample
 * that cannot fit becomes an error item saying so. */
static int charge(ef__queue *q, ef__item *item, uint64_t *waited_ns)
{
    item->charged = 0;
    if (!q->budget || !item->sample)
        return EF_OK;
    uint64_t n = ef__sample_bytes(item->sample);
    if (!ef__budget_fits(q->budget, n)) {
        char what[96];
        snprintf(what, sizeof what, "%s: sample %lld", q->owner,
                 (long long)ef_sample_identity(item->sample).index);
        ef__err why;
        ef__budget_check(q->budget, n, what, &why);
        ef__item_clear(item);
        item->status = EF_ENOMEM;
        item->msg = ef__strdup(why.msg);
        return EF_OK;
    }
    int rc =
        ef__budget_take(q->budget, n, &q->pending, &q->is_closed, waited_ns);
    if (rc == EF_OK)
        item->charged = n;
    return rc;
}

/* Items the queue takes before a push waits; the lock is held. */
static size_t room(const ef__queue *q)
{
    size_t used = q->count + atomic_load(&q->out);
    return used < q->limit ? q->limit - used : 0;
}

int ef__queue_push(ef__queue *q, ef__item *item, uint64_t *waited_ns)
{
    if (charge(q, item, waited_ns) != EF_OK)
        return EF_ECANCELED;
    return ef__queue_push_charged(q, item, waited_ns);
}

int ef__queue_push_charged(ef__queue *q, ef__item *item, uint64_t *waited_ns)
{
    pthread_mutex_lock(&q->mu);
    if (!room(q) && !q->closed) {
        uint64_t t0 = ef__now_ns();
        atomic_fetch_add(&q->push_waiting, 1);
        while (!room(q) && !q->closed)
            pthread_cond_wait(&q->not_full, &q->mu);
        atomic_fetch_sub(&q->push_waiting, 1);
        if (waited_ns)
            *waited_ns += ef__now_ns() - t0;
    }
    if (q->closed) {
        pthread_mutex_unlock(&q->mu);
        if (item->charged)
            ef__budget_release(q->budget, item->charged);
        item->charged = 0;
        return EF_ECANCELED;
    }
    q->ring[(q->head + q->count) % q->cap] = *item;
    q->count++;
    atomic_store(&q->queued, q->count);
    atomic_fetch_add(&q->pending, 1);
    pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->mu);
    return EF_OK;
}

/* Charges items[0..n) to the budget at once, when all of them fit
 * without waiting: 1, else 0 with nothing charged. */
static int charge_at_once(ef__queue *q, ef__item *items, size_t n)
{
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        items[i].charged = 0;
        if (!q->budget || !items[i].sample)
            continue;
        uint64_t bytes = ef__sample_bytes(items[i].sample);
        if (!ef__budget_fits(q->budget, bytes))
            return 0; /* push makes the error item */
        items[i].charged = bytes;
        total += bytes;
    }
    if (total == 0 || ef__budget_try_take(q->budget, total))
        return 1;
    for (size_t i = 0; i < n; i++)
        items[i].charged = 0;
    return 0;
}

/* Whether a run goes in whole: the queue, the consumer's cache included,
 * is at most half full; the lock is held. */
static int takes_a_run(const ef__queue *q)
{
    return q->count + atomic_load(&q->out) <= q->limit / 2;
}

/* Queues the first of items[0..n) that fit the queue's room and the
 * budget without waiting, under one lock; returns how many (0: none,
 * and *full says whether for want of room in the queue).
 *
 * A queue at most half full takes the whole run, past its limit: a
 * consumer faster than its producer then sleeps and wakes once per run,
 * where a limit shorter than the run made the two take turns item by
 * item, a wake-up each; and a slower consumer still has half a queue to
 * take from while the run goes in. */
static size_t push_at_once(ef__queue *q, ef__item *items, size_t n, int *full)
{
    pthread_mutex_lock(&q->mu);
    size_t k = q->closed ? 0 : takes_a_run(q) ? q->cap - q->count : room(q);
    if (k > n)
        k = n;
    *full = !q->closed && k == 0;
    if (k > 0 && !charge_at_once(q, items, k))
        k = 0;
    for (size_t i = 0; i < k; i++)
        q->ring[(q->head + q->count + i) % q->cap] = items[i];
    if (k > 0) {
        q->count += k;
        atomic_store(&q->queued, q->count);
        atomic_fetch_add(&q->pending, k);
        pthread_cond_signal(&q->not_empty);
    }
    pthread_mutex_unlock(&q->mu);
    return k;
}

/* Waits until the queue takes a run again (takes_a_run), the time added
 * to *waited_ns: a hand-out wakes the producer there (ef__queue_handed),
 * so the rest of its run goes in at once, not item by item. EF_OK, or
 * EF_ECANCELED when the queue was closed. */
static int wait_for_a_run(ef__queue *q, uint64_t *waited_ns)
{
    pthread_mutex_lock(&q->mu);
    uint64_t t0 = ef__now_ns();
    atomic_fetch_add(&q->push_waiting, 1);
    while (!takes_a_run(q) && !q->closed)
        pthread_cond_wait(&q->not_full, &q->mu);
    atomic_fetch_sub(&q->push_waiting, 1);
    if (waited_ns)
        *waited_ns += ef__now_ns() - t0;
    int rc = q->closed ? EF_ECANCELED : EF_OK;
    pthread_mutex_unlock(&q->mu);
    return rc;
}

int ef__queue_push_run(ef__queue *q, ef__item *items, size_t n, size_t *queued,
                       uint64_t *waited_ns)
{
    size_t done = 0;
    while (done < n) {
        int full;
        size_t k = push_at_once(q, items + done, n - done, &full);
        if (k > 0) {
            done += k;
            continue;
        }
        if (full) {
            if (wait_for_a_run(q, waited_ns) != EF_OK) {
                *queued = done;
                return EF_ECANCELED;
            }
            continue;
        }
        /* closed, or no room in the budget now: one item the slow way,
         * waiting as push does */
        int was_sample = items[done].status == EF_OK && items[done].sample;
        int rc = ef__queue_push(q, &items[done], waited_ns);
        if (rc != EF_OK) {
            *queued = done;
            return rc;
        }
        if (was_sample && items[done].status != EF_OK) {
            /* over the budget: the error ends the run */
            for (size_t i = done + 1; i < n; i++)
                ef__item_clear(&items[i]);
            break;
        }
        done++;
    }
    *queued = n;
    return EF_OK;
}

int ef__queue_pop_run(ef__queue *q, ef__item *items, size_t max, size_t *n,
                      int block)
{
    *n = 0;
    pthread_mutex_lock(&q->mu);
    while (block && q->count == 0 && !q->closed)
        pthread_cond_wait(&q->not_empty, &q->mu);
    int rc = q->closed ? EF_ECANCELED : q->count == 0 ? EF_AGAIN : EF_OK;
    if (rc == EF_OK) {
        size_t k = q->count < max ? q->count : max;
        for (size_t i = 0; i < k; i++)
            items[i] = q->ring[(q->head + i) % q->cap];
        q->head = (q->head + k) % q->cap;
        q->count -= k;
        atomic_store(&q->queued, q->count);
        atomic_fetch_add(&q->out, k);
        *n = k;
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

void ef__queue_handed(ef__queue *q, ef__item *item)
{
    atomic_fetch_sub(&q->out, 1);
    size_t pending = atomic_fetch_sub(&q->pending, 1) - 1;
    /* after `pending` fell, so that a push waiting in the budget for this
     * queue to empty sees it when the release wakes it (budget.h) */
    if (q->budget)
        ef__budget_release(q->budget, item->charged);
    item->charged = 0;
    /* a waiting producer is woken once half the limit is free */
    if (atomic_load(&q->push_waiting) > 0 && pending <= q->limit / 2) {
        pthread_mutex_lock(&q->mu);
        pthread_cond_broadcast(&q->not_full);
        pthread_mutex_unlock(&q->mu);
    }
}

/* Takes the head item; the lock is held and the queue is not empty. */
static void take_head(ef__queue *q, ef__item *item)
{
    *item = q->ring[q->head];
    q->head = (q->head + 1) % q->cap;
    q->count--;
    atomic_store(&q->queued, q->count);
    atomic_fetch_sub(&q->pending, 1);
    pthread_cond_signal(&q->not_full);
    /* the consumer owns the sample now; a queue that waits for room may
     * also be waiting for this one to empty */
    if (q->budget)
        ef__budget_release(q->budget, item->charged);
    item->charged = 0;
}

int ef__queue_pop(ef__queue *q, ef__item *item, uint64_t *waited_ns)
{
    pthread_mutex_lock(&q->mu);
    if (q->count == 0 && !q->closed) {
        uint64_t t0 = ef__now_ns();
        while (q->count == 0 && !q->closed)
            pthread_cond_wait(&q->not_empty, &q->mu);
        if (waited_ns)
            *waited_ns += ef__now_ns() - t0;
    }
    if (q->closed) {
        pthread_mutex_unlock(&q->mu);
        return EF_ECANCELED;
    }
    take_head(q, item);
    pthread_mutex_unlock(&q->mu);
    return EF_OK;
}

int ef__queue_try_pop(ef__queue *q, ef__item *item)
{
    int rc = EF_AGAIN;
    pthread_mutex_lock(&q->mu);
    if (q->closed) {
        rc = EF_ECANCELED;
    } else if (q->count > 0) {
        take_head(q, item);
        rc = EF_OK;
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

void ef__queue_close(ef__queue *q)
{
    pthread_mutex_lock(&q->mu);
    q->closed = 1;
    atomic_store(&q->is_closed, 1);
    pthread_cond_broadcast(&q->not_empty);
    pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->mu);
    if (q->budget)
        ef__budget_wake(q->budget); /* a push waiting for room gives up */
}

void ef__queue_reopen(ef__queue *q)
{
    pthread_mutex_lock(&q->mu);
    for (; q->count > 0; q->count--) {
        drop_item(q, &q->ring[q->head]);
        q->head = (q->head + 1) % q->cap;
    }
    q->head = 0;
    q->closed = 0;
    atomic_store(&q->queued, 0);
    atomic_store(&q->out, 0);
    atomic_store(&q->pending, 0);
    atomic_store(&q->is_closed, 0);
    pthread_mutex_unlock(&q->mu);
}

void ef__queue_set_limit(ef__queue *q, size_t limit)
{
    pthread_mutex_lock(&q->mu);
    assert(limit >= 1 && limit + EF__RUN_MAX <= q->cap);
    q->limit = limit;
    pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->mu);
}

size_t ef__queue_count(ef__queue *q)
{
    pthread_mutex_lock(&q->mu);
    size_t n = q->count;
    pthread_mutex_unlock(&q->mu);
    return n;
}

void ef__queue_each(ef__queue *q, void (*fn)(void *arg, const ef__item *item),
                    void *arg)
{
    pthread_mutex_lock(&q->mu);
    for (size_t i = 0; i < q->count; i++)
        fn(arg, &q->ring[(q->head + i) % q->cap]);
    pthread_mutex_unlock(&q->mu);
}
