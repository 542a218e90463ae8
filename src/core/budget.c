/* SPDX-License-Identifier: Apache-2.0 */
/* The memory budget (see budget.h). */
#include "core/budget.h"

#include "core/clock.h"
#include "core/sample.h"

void ef__budget_init(ef__budget *b, uint64_t limit)
{
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->room, NULL);
    b->limit = limit;
    atomic_init(&b->held, 0);
    atomic_init(&b->peak, 0);
    atomic_init(&b->waiters, 0);
}

void ef__budget_destroy(ef__budget *b)
{
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->room);
}

static void raise_peak(ef__budget *b, uint64_t now)
{
    uint64_t peak = atomic_load(&b->peak);
    while (now > peak && !atomic_compare_exchange_weak(&b->peak, &peak, now))
        ;
}

int ef__budget_try_take(ef__budget *b, uint64_t n)
{
    uint64_t held = atomic_load(&b->held);
    do {
        if (b->limit && held + n > b->limit)
            return 0;
    } while (!atomic_compare_exchange_weak(&b->held, &held, held + n));
    raise_peak(b, held + n);
    return 1;
}

/* ef__budget_take's way out of a wait: nothing queued (budget.h). */
static int nothing_queued(const void *queued)
{
    return atomic_load((const atomic_size_t *)queued) == 0;
}

int ef__budget_take(ef__budget *b, uint64_t n, const atomic_size_t *queued,
                    const atomic_int *closed, uint64_t *waited_ns)
{
    /* the caller sees a close when it pushes */
    return ef__budget_reserve(b, n, nothing_queued, queued, closed,
                              waited_ns);
}

int ef__budget_reserve(ef__budget *b, uint64_t n,
                       int (*first)(const void *arg), const void *arg,
                       const atomic_int *stop, uint64_t *waited_ns)
{
    if (ef__budget_try_take(b, n))
        return EF_OK;
    uint64_t t0 = ef__now_ns();
    int charged = 0;
    pthread_mutex_lock(&b->mu);
    atomic_fetch_add(&b->waiters, 1);
    while (!atomic_load(stop)) {
        if (ef__budget_try_take(b, n)) {
            charged = 1;
            break;
        }
        if (first(arg)) { /* the consumer waits for this, or nothing is
                             queued: never a deadlock (budget.h) */
            ef__budget_hold(b, n);
            charged = 1;
            break;
        }
        pthread_cond_wait(&b->room, &b->mu);
    }
    atomic_fetch_sub(&b->waiters, 1);
    pthread_mutex_unlock(&b->mu);
    if (waited_ns)
        *waited_ns += ef__now_ns() - t0;
    return charged ? EF_OK : EF_ECANCELED;
}

void ef__budget_hold(ef__budget *b, uint64_t n)
{
    raise_peak(b, atomic_fetch_add(&b->held, n) + n);
}

void ef__budget_release(ef__budget *b, uint64_t n)
{
    atomic_fetch_sub(&b->held, n);
    if (atomic_load(&b->waiters) > 0)
        ef__budget_wake(b);
}

void ef__budget_wake(ef__budget *b)
{
    pthread_mutex_lock(&b->mu);
    pthread_cond_broadcast(&b->room);
    pthread_mutex_unlock(&b->mu);
}

void ef__budget_notify(ef__budget *b)
{
    if (atomic_load(&b->waiters) > 0)
        ef__budget_wake(b);
}

int ef__budget_check(const ef__budget *b, uint64_t n, const char *what,
                     ef__err *err)
{
    if (ef__budget_fits(b, n))
        return EF_OK;
    return ef__err_set(err, EF_ENOMEM,
                       "%s: %llu bytes, over the memory budget of %llu bytes "
                       "(raise it: --memory-budget, memory_budget= in "
                       "Python, ef_pipeline_set_memory_budget)",
                       what, (unsigned long long)n,
                       (unsigned long long)b->limit);
}
