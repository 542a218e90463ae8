/* SPDX-License-Identifier: Apache-2.0 */
/* The bounded queue every asynchronous stage uses.
 *
 * A ring of items guarded by one mutex, with two condition variables
 * (not_empty, not_full) and a closed flag. Closing wakes every waiter;
 * afterwards push and pop fail with EF_ECANCELED. End of data and errors are
 * ordinary items (a status with no sample), so they reach the consumer in
 * order.
 *
 * Items may move in runs (core/run_length.h): a producer pushes a run
 * under one lock and one wake-up, and a consumer takes all that is ready
 * at once into a cache of its own, from which it hands items out without
 * the lock (ef__queue_pop_run, ef__queue_handed). Items in such a cache
 * still count against the queue's limit and the budget until handed out,
 * so the bounds are the same as with single items, but for one: a queue
 * at most half full, cache included, takes a whole run past its limit (a
 * run holds at most EF__RUN_MAX items and what its producer's byte bound
 * allows), so that a consumer faster than its producer is woken once per
 * run, not once per `limit` items. A producer waiting for room is woken
 * once the queue and the cache together are down to half the limit, and
 * then puts the rest of its run in at once: one wake-up per run, not per
 * item.
 *
 * With a memory budget (ef__queue_set_budget), a push also waits for room
 * in the budget (see budget.h), and a sample larger than the whole budget
 * is replaced by an EF_ENOMEM item saying so. */
#ifndef EF_CORE_QUEUE_H
#define EF_CORE_QUEUE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/budget.h"
#include "echoflow/echoflow.h"

typedef struct {
    int status;        /* EF_OK with a sample, else END or an error */
    ef_sample *sample; /* owned by whoever holds the item */
    char *msg;         /* error message (ef__malloc'd) or NULL */
    uint64_t charged;  /* bytes charged to the budget while queued */
} ef__item;

typedef struct {
    pthread_mutex_t mu; /* guards every field below */
    pthread_cond_t not_empty;
    pthread_cond_t not_full;
    ef__item *ring;
    size_t cap, head, count;
    size_t limit; /* a push waits while count + out >= limit; cap is
                     limit + EF__RUN_MAX, for a whole run */
    int closed;
    /* items a consumer took with pop_run and has not handed out yet, and
     * pushes waiting for room: atomics, which the consumer's hand-out
     * reads and writes without mu */
    atomic_size_t out;
    atomic_int push_waiting;
    /* count + out, for the budget's wait: a queue whose consumer still
     * holds items of it is not empty (see budget.h) */
    atomic_size_t pending;
    /* mirrors of count and closed for the budget's wait, which runs
     * without mu */
    atomic_size_t queued;
    atomic_int is_closed;
    ef__budget *budget; /* NULL: none */
    const char *owner;  /* the stage's name, for messages */
} ef__queue;

int ef__queue_init(ef__queue *q, size_t capacity);
/* Charges the samples pushed from now on to `b` (before any push);
 * `owner` names the stage in messages and must outlive the queue. */
void ef__queue_set_budget(ef__queue *q, ef__budget *b, const char *owner);
/* Frees items still queued. No thread may use the queue any more. */
void ef__queue_destroy(ef__queue *q);
/* Blocks while full (or the budget has no room). On EF_OK the queue owns
 * the item; on EF_ECANCELED the caller keeps it. A sample larger than the
 * budget is freed and an EF_ENOMEM item pushed in its place: item->status
 * says so on return. Adds the time spent blocked to *waited_ns if not
 * NULL. */
int ef__queue_push(ef__queue *q, ef__item *item, uint64_t *waited_ns);
/* As push, for an item whose bytes the caller charged to the queue's
 * budget already (item->charged, 0 when none): the queue takes the
 * charge over, and waits for nothing but room in the queue. On
 * EF_ECANCELED the charge was given back and the caller keeps the item. */
int ef__queue_push_charged(ef__queue *q, ef__item *item, uint64_t *waited_ns);
/* Queues items[0..n) in order, as n pushes would, under one lock where
 * the run fits at once (the queue's room, or all of a queue at most half
 * full, and the budget's room, without waiting); n <= EF__RUN_MAX.
 * EF_OK: the queue owns them all (an item's status may have become
 * EF_ENOMEM, as with push; then the run was cut after it and the later
 * items freed). EF_ECANCELED: the queue owns items[0..*queued) and the
 * caller the rest. */
int ef__queue_push_run(ef__queue *q, ef__item *items, size_t n, size_t *queued,
                       uint64_t *waited_ns);
/* Takes up to max items that are ready into items[], blocking while none
 * are (block = 0: EF_AGAIN then). The caller owns them, but they count
 * against the queue's limit and stay charged to the budget until the
 * caller hands each one out with ef__queue_handed. *n: how many. EF_OK,
 * EF_AGAIN or EF_ECANCELED. */
int ef__queue_pop_run(ef__queue *q, ef__item *items, size_t max, size_t *n,
                      int block);
/* An item taken with pop_run leaves the consumer's hands (handed on, or
 * dropped): its bytes go back to the budget and its place to the queue.
 * Takes no lock unless a producer waits for room. */
void ef__queue_handed(ef__queue *q, ef__item *item);
/* Blocks while empty. EF_OK (caller owns *item) or EF_ECANCELED. */
int ef__queue_pop(ef__queue *q, ef__item *item, uint64_t *waited_ns);
/* Never blocks: EF_OK, EF_AGAIN when empty, or EF_ECANCELED. */
int ef__queue_try_pop(ef__queue *q, ef__item *item);
/* Wakes every waiter; later calls fail with EF_ECANCELED. */
void ef__queue_close(ef__queue *q);
/* Frees every queued item and opens a closed queue again, for a stage
 * that restarts its producer mid-pass. No producer may be running, and
 * the consumer has handed out every item it took with pop_run. */
void ef__queue_reopen(ef__queue *q);
size_t ef__queue_count(ef__queue *q);
/* Calls fn on each queued item, oldest first, under the lock: fn must
 * not use the queue. */
void ef__queue_each(ef__queue *q, void (*fn)(void *arg, const ef__item *item),
                    void *arg);
/* Sets how many items the queue holds before a push waits, 1 <= limit <=
 * its capacity (a queue that grows: prefetch's depth=auto); wakes pushes
 * waiting for room. */
void ef__queue_set_limit(ef__queue *q, size_t limit);

/* Frees what an item owns. */
void ef__item_clear(ef__item *item);

#endif
