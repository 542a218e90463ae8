/* SPDX-License-Identifier: Apache-2.0 */
/* The memory budget: a pipeline-wide limit on the payload bytes its
 * buffers hold (read-ahead queues, shuffle buffers, echo pools).
 *
 * Queues wait for room (back-pressure) before taking a sample, except
 * when they are empty: a consumer may be waiting on exactly that queue
 * while the others hold the budget, so an empty queue always takes one
 * sample and the pipeline cannot deadlock. Buffers filled by the
 * consumer's own pull (shuffle, echo) cannot wait for anyone: they charge
 * without waiting and fail, naming themselves, when their own contents
 * alone pass the budget. A single sample larger than the budget is an
 * error wherever it is met, a queue or not: every hand-over between
 * stages checks (ef__stage_check_size in stage.h), since one item is the
 * least a pipeline holds and no wait can make room for it.
 *
 * Lock rules: `held`, `peak` and `waiters` are atomics, so a charge that
 * fits and a release that wakes no one take no lock; `mu` and `room` serve
 * only the waits. A waiter counts itself in `waiters` before it checks for
 * room, and a release reads `waiters` after giving its bytes back (both
 * sequentially consistent), so one of the two always sees the other: no
 * wake-up is lost. A caller may hold its own lock (a queue's) while
 * calling any function here; nothing here takes another lock. */
#ifndef EF_CORE_BUDGET_H
#define EF_CORE_BUDGET_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* The default: enough for ImageNet-sized read-ahead on a small machine. */
#define EF__BUDGET_DEFAULT ((uint64_t)1 << 30)

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t room;
    uint64_t limit; /* set before the pipeline starts; 0: no limit */
    _Atomic uint64_t held, peak;
    atomic_int waiters; /* pushes waiting for room */
} ef__budget;

void ef__budget_init(ef__budget *b, uint64_t limit);
void ef__budget_destroy(ef__budget *b);

/* Charges n bytes for a queue, waiting while the total would pass the
 * limit and the queue still holds items (*queued > 0: queued, or taken
 * by its consumer and not handed on yet) and is open
 * (*closed == 0). EF_OK, or EF_ECANCELED once the queue is closed. */
int ef__budget_take(ef__budget *b, uint64_t n, const atomic_size_t *queued,
                    const atomic_int *closed, uint64_t *waited_ns);
/* Charges n bytes when the total stays within the limit: 1, else 0 with
 * nothing charged. Never waits. */
int ef__budget_try_take(ef__budget *b, uint64_t n);
/* Charges n bytes for a producer that holds them before any queue does
 * (a reader filling a buffer), waiting while the total would pass the
 * limit, unless first(arg) says the consumer waits for this producer's
 * item next (it goes on then: no wait could end), and while *stop is 0.
 * The state first() reads changes with a wake (ef__budget_notify) after
 * it. EF_OK, or EF_ECANCELED once *stop is set (nothing charged). */
int ef__budget_reserve(ef__budget *b, uint64_t n,
                       int (*first)(const void *arg), const void *arg,
                       const atomic_int *stop, uint64_t *waited_ns);
/* Charges n bytes without waiting. */
void ef__budget_hold(ef__budget *b, uint64_t n);
/* Gives n bytes back and wakes the queues waiting for room. */
void ef__budget_release(ef__budget *b, uint64_t n);
/* Wakes every waiter to re-check its queue (after a queue closes). */
void ef__budget_wake(ef__budget *b);
/* Wakes the waiters, if any, to re-check their condition: after a change
 * that may let one go on (see ef__budget_reserve). */
void ef__budget_notify(ef__budget *b);

/* Whether n bytes can fit the budget at all (a cheap test for hot paths,
 * before ef__budget_check formats its message). */
static inline int ef__budget_fits(const ef__budget *b, uint64_t n)
{
    return !b->limit || n <= b->limit;
}

/* EF_ENOMEM with the message "WHAT: N bytes, over the memory budget ..."
 * when n bytes of `what` (a sample, a buffer's contents) cannot fit the
 * budget at all; EF_OK otherwise. */
int ef__budget_check(const ef__budget *b, uint64_t n, const char *what,
                     ef__err *err);

#endif
