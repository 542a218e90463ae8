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
    b->waiters = 0;
}

void ef__budget_destroy(ef__budget *b)
{
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->room);
}

static void add_held(ef__budget *b, uint64_t n)
{
    uint64_t now = atomic_fetch_add(&b->held, n) + n;
    uint64_t peak = atomic_load(&b->peak);
    while (now > peak && !atomic_compare_exchange_weak(&b->peak, &peak, now))
        ;
}

int ef__budget_take(ef__budget *b, uint64_t n, const atomic_size_t *queued,
                    const atomic_int *closed, uint64_t *waited_ns)
{
    pthread_mutex_lock(&b->mu);
    uint64_t t0 = 0;
    while (b->limit && atomic_load(&b->held) + n > b->limit &&
           atomic_load(queued) > 0 && !atomic_load(closed)) {
        if (!t0)
            t0 = ef__now_ns();
        b->waiters++;
        pthread_cond_wait(&b->room, &b->mu);
        b->waiters--;
    }
    if (t0 && waited_ns)
        *waited_ns += ef__now_ns() - t0;
    int rc = atomic_load(closed) ? EF_ECANCELED : EF_OK;
    if (rc == EF_OK)
        add_held(b, n);
    pthread_mutex_unlock(&b->mu);
    return rc;
}

void ef__budget_hold(ef__budget *b, uint64_t n)
{
    add_held(b, n);
}

void ef__budget_release(ef__budget *b, uint64_t n)
{
    atomic_fetch_sub(&b->held, n);
    ef__budget_wake(b);
}

void ef__budget_wake(ef__budget *b)
{
    pthread_mutex_lock(&b->mu);
    if (b->waiters)
        pthread_cond_broadcast(&b->room);
    pthread_mutex_unlock(&b->mu);
}

int ef__budget_check(const ef__budget *b, uint64_t n, const char *what,
                     ef__err *err)
{
    if (!b->limit || n <= b->limit)
        return EF_OK;
    return ef__err_set(err, EF_ENOMEM,
                       "%s: %llu bytes, over the memory budget of %llu bytes "
                       "(raise it: --memory-budget, memory_budget= in "
                       "Python, ef_pipeline_set_memory_budget)",
                       what, (unsigned long long)n,
                       (unsigned long long)b->limit);
}

uint64_t ef__sample_bytes(const ef_sample *s)
{
    uint64_t n = 0;
    for (int i = 0; i < s->nfields; i++)
        n += s->fields[i].nbytes;
    return n;
}
