/* The bounded queue (see queue.h).
 *
 * Lock rules: `mu` guards every field of the queue. Waiters re-check their
 * condition in a loop; close() broadcasts both condition variables so no
 * waiter sleeps through a shutdown. No callback runs under the lock. */
#include "core/queue.h"

#include <assert.h>
#include <stdio.h>

#include "core/alloc.h"
#include "core/clock.h"

void ef__item_clear(ef__item *item)
{
    ef_sample_free(item->sample);
    ef__free(item->msg);
    item->sample = NULL;
    item->msg = NULL;
}

int ef__queue_init(ef__queue *q, size_t capacity)
{
    q->ring = ef__calloc(capacity, sizeof *q->ring);
    if (!q->ring)
        return EF_ENOMEM;
    q->cap = q->limit = capacity;
    q->head = q->count = 0;
    q->closed = 0;
    atomic_init(&q->queued, 0);
    atomic_init(&q->is_closed, 0);
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
    int rc = ef__budget_take(q->budget, n, &q->queued, &q->is_closed,
                             waited_ns);
    if (rc == EF_OK)
        item->charged = n;
    return rc;
}

int ef__queue_push(ef__queue *q, ef__item *item, uint64_t *waited_ns)
{
    if (charge(q, item, waited_ns) != EF_OK)
        return EF_ECANCELED;
    pthread_mutex_lock(&q->mu);
    if (q->count >= q->limit && !q->closed) {
        uint64_t t0 = ef__now_ns();
        while (q->count >= q->limit && !q->closed)
            pthread_cond_wait(&q->not_full, &q->mu);
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
    pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->mu);
    return EF_OK;
}

/* Takes the head item; the lock is held and the queue is not empty. */
static void take_head(ef__queue *q, ef__item *item)
{
    *item = q->ring[q->head];
    q->head = (q->head + 1) % q->cap;
    q->count--;
    atomic_store(&q->queued, q->count);
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
    atomic_store(&q->is_closed, 0);
    pthread_mutex_unlock(&q->mu);
}

void ef__queue_set_limit(ef__queue *q, size_t limit)
{
    pthread_mutex_lock(&q->mu);
    assert(limit >= 1 && limit <= q->cap);
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
