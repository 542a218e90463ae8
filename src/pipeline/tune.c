/* SPDX-License-Identifier: Apache-2.0 */
/* The threads=auto tuner (see tune.h).
 *
 * The rule. Over each window, for every auto stage i: cost_i, the time
 * its transform took (all its workers together) per item the consumer
 * took, i.e. the cores it keeps busy per item delivered; and c, the
 * consumer's own time per item, outside next(). Both are smoothed,
 * x = (x + sample) / 2, so one odd window moves a choice only halfway.
 * - need_i = cost_i / c workers let stage i keep pace with the consumer.
 *   When the consumer is the slowest part (one core for it plus
 *   ceil(1.5 need_i) for every stage fit in the cores), each stage gets
 *   ceil(1.5 need_i), the 1.5 being headroom for bursts: more workers
 *   would only idle, or take the consumer's core.
 * - Otherwise the stages are the bottleneck and share the cores in
 *   proportion to cost: allowed_i = round(cores * cost_i / sum cost).
 * Each allowed_i is then held within [1, max_i]. A stage kept waiting
 * by another (a full ring, a slow upstream) does not count that wait as
 * cost, so the cores go to the stage that actually works.
 *
 * Only `allowed` changes; the map stage keeps its order, so a choice
 * never changes what comes out. */
#include "pipeline/tune.h"

#include <math.h>

#include "core/clock.h"
#include "core/cores.h"

void ef__tuner_init(ef__tuner *t, ef__stage *const *stages, int n, uint64_t now)
{
    t->cores = ef__usable_cores();
    t->nauto = 0;
    for (int i = 0; i < n; i++)
        t->nauto += stages[i]->auto_threads != NULL;
    t->last_ns = now;
    t->items = t->wait_ns = 0;
    t->consumer_ns = 0;
}

static double smooth(double old, double sample)
{
    return old > 0 ? (old + sample) / 2 : sample;
}

static void set_allowed(ef__stage *s, double want)
{
    ef__auto_threads *at = s->auto_threads;
    int n = want >= at->max ? at->max : want < 1 ? 1 : (int)want;
    if (n != atomic_load(&at->allowed)) {
        atomic_store(&at->allowed, n);
        at->wake(s);
    }
}

void ef__tuner_tick(ef__tuner *t, ef__stage *const *stages, int n, uint64_t now,
                    uint64_t items, uint64_t wait_ns)
{
    uint64_t window = ef__elapsed_ns(t->last_ns, now);
    if (!t->nauto || window < EF__TUNE_PERIOD_NS || items <= t->items)
        return;
    double took = (double)(items - t->items);
    uint64_t waited = wait_ns - t->wait_ns;
    double own = window > waited ? (double)(window - waited) : 0;
    t->consumer_ns = smooth(t->consumer_ns, own / took);
    t->last_ns = now;
    t->items = items;
    t->wait_ns = wait_ns;

    double total = 0, fit = 1; /* the consumer's core */
    for (int i = 0; i < n; i++) {
        ef__auto_threads *at = stages[i]->auto_threads;
        if (!at)
            continue;
        uint64_t busy =
            atomic_load_explicit(&at->busy_ns, memory_order_relaxed);
        at->cost = smooth(at->cost, (double)(busy - at->seen_busy_ns) / took);
        at->seen_busy_ns = busy;
        total += at->cost;
        fit += t->consumer_ns > 0
                   ? fmax(1, ceil(1.5 * at->cost / t->consumer_ns))
                   : t->cores;
    }
    if (total <= 0)
        return; /* nothing measured yet */
    for (int i = 0; i < n; i++) {
        ef__auto_threads *at = stages[i]->auto_threads;
        if (!at)
            continue;
        if (fit <= t->cores)
            set_allowed(stages[i], ceil(1.5 * at->cost / t->consumer_ns));
        else
            set_allowed(stages[i], round(t->cores * at->cost / total));
    }
}
