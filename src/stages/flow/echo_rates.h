/* SPDX-License-Identifier: Apache-2.0 */
/* The echo stage's estimate of R = t_up / t_down over a moving window.
 *
 * t_up is the time the upstream takes to produce one item: the time spent
 * inside its next() (on whichever thread pulls it), per item. t_down is the
 * time the downstream takes per item when it is not waiting on the echo
 * stage: wall time minus that waiting, per item emitted. The waiting is
 * the smaller of the time spent inside echo's next() and the consumer's
 * time inside ef_pipeline_next(): in a chain without threads below echo
 * the consumer's wait also holds the work of the stages in between, which
 * is the downstream's; behind a thread (a prefetch), that thread sits in
 * echo's next() while the consumer computes, so only the consumer's wait
 * says whether the consumer was kept waiting (counting the thread's would
 * measure the stages in between alone, an R far above the real one when
 * echo is the bottleneck). All come from counters the pipeline keeps anyway; the window
 * is a ring of snapshots taken at most every SNAPSHOT interval, so the
 * per-item cost is a counter test. */
#ifndef EF_STAGES_FLOW_ECHO_RATES_H
#define EF_STAGES_FLOW_ECHO_RATES_H

#include <pthread.h>
#include <stdint.h>

#include "pipeline/stage.h"

#define EF__RATE_SNAPSHOTS 8

typedef struct {
    uint64_t t_ns, up_ns, up_items, in_echo_ns, consumer_ns, out_items;
} ef__rate_snap;

typedef struct {
    /* the counters read (owned by the stages and the pipeline) */
    const _Atomic uint64_t *up_ns, *up_items, *in_echo_ns, *out_items;
    const ef__consumer_wait *consumer;
    pthread_mutex_t mu; /* guards the ring: written by the echo thread,
                           read by whoever asks for stats */
    ef__rate_snap ring[EF__RATE_SNAPSHOTS];
    int nsnaps, head;   /* head: the oldest snapshot */
    ef__rate_snap last; /* the newest reading */
    unsigned every;     /* items between readings (echo_rates.c) */
    unsigned countdown; /* items until the next reading */
} ef__rates;

typedef struct {
    double r;               /* t_up / t_down; 0 when unknown */
    double upstream_rate;   /* items/s the upstream can produce */
    double downstream_rate; /* items/s the downstream can consume */
} ef__rate_estimate;

void ef__rates_init(ef__rates *r, const _Atomic uint64_t *up_ns,
                    const _Atomic uint64_t *up_items,
                    const _Atomic uint64_t *in_echo_ns,
                    const ef__consumer_wait *consumer,
                    const _Atomic uint64_t *out_items);
void ef__rates_destroy(ef__rates *r);
/* Starts the window again from now, forgetting what came before (the
 * echo stage's start-up: see echo.c). Until the next reading the
 * estimate is unknown. */
void ef__rates_restart(ef__rates *r);
/* Takes a reading now: see ef__rates_tick. */
void ef__rates_reading(ef__rates *r);
/* Called on every item the stage emits; takes a reading now and then.
 * force: take one now (at the end of the data). Inline: on most items it
 * is a decrement. */
static inline void ef__rates_tick(ef__rates *r, int force)
{
    if (force || --r->countdown == 0)
        ef__rates_reading(r);
}
void ef__rates_estimate(ef__rates *r, ef__rate_estimate *out);

#endif
