/* SPDX-License-Identifier: Apache-2.0 */
/* Moving-window R estimate (see echo_rates.h). */
#include "stages/flow/echo_rates.h"

#include "core/clock.h"

#define SNAPSHOT_NS 250000000u /* a reading every 0.25 s: 2 s of window */
/* The readings between snapshots keep the estimate fresh; about one per
 * millisecond is plenty, so the items between clock reads (`every`)
 * double while a reading comes sooner than half of that and halve while
 * it comes later than twice that. At millions of items per second this
 * makes the per-item cost a decrement. The cap bounds how stale a sudden
 * slowdown can leave the estimate: 256 items, a quarter second at 1,000
 * items/s. */
#define READING_NS 1000000u
#define EVERY_MAX 256u

static void read_counters(ef__rates *r, ef__rate_snap *s, uint64_t now)
{
    s->t_ns = now;
    s->up_ns = ef__stat_get(r->up_ns);
    s->up_items = ef__stat_get(r->up_items);
    s->in_echo_ns = ef__stat_get(r->in_echo_ns);
    s->consumer_ns = ef__consumer_waited_ns(r->consumer, now);
    s->out_items = ef__stat_get(r->out_items);
}

void ef__rates_init(ef__rates *r, const _Atomic uint64_t *up_ns,
                    const _Atomic uint64_t *up_items,
                    const _Atomic uint64_t *in_echo_ns,
                    const ef__consumer_wait *consumer,
                    const _Atomic uint64_t *out_items)
{
    r->up_ns = up_ns;
    r->up_items = up_items;
    r->in_echo_ns = in_echo_ns;
    r->consumer = consumer;
    r->out_items = out_items;
    pthread_mutex_init(&r->mu, NULL);
    r->every = r->countdown = 1;
    read_counters(r, &r->ring[0], ef__timer_ns());
    r->last = r->ring[0];
    r->nsnaps = 1;
    r->head = 0;
}

void ef__rates_destroy(ef__rates *r)
{
    pthread_mutex_destroy(&r->mu);
}

void ef__rates_restart(ef__rates *r)
{
    ef__rate_snap s;
    read_counters(r, &s, ef__timer_ns());
    pthread_mutex_lock(&r->mu);
    r->ring[0] = r->last = s;
    r->nsnaps = 1;
    r->head = 0;
    pthread_mutex_unlock(&r->mu);
    r->every = r->countdown = 1;
}

void ef__rates_reading(ef__rates *r)
{
    ef__rate_snap s;
    read_counters(r, &s, ef__timer_ns());
    uint64_t since = s.t_ns - r->last.t_ns; /* only this thread writes it */
    if (since < READING_NS / 2 && r->every < EVERY_MAX)
        r->every *= 2;
    else if (since > 2 * (uint64_t)READING_NS && r->every > 1)
        r->every /= 2;
    r->countdown = r->every;
    pthread_mutex_lock(&r->mu);
    r->last = s;
    int newest = (r->head + r->nsnaps - 1) % EF__RATE_SNAPSHOTS;
    if (s.t_ns - r->ring[newest].t_ns >= SNAPSHOT_NS) {
        if (r->nsnaps < EF__RATE_SNAPSHOTS) {
            r->ring[(r->head + r->nsnaps) % EF__RATE_SNAPSHOTS] = s;
            r->nsnaps++;
        } else {
            r->ring[r->head] = s;
            r->head = (r->head + 1) % EF__RATE_SNAPSHOTS;
        }
    }
    pthread_mutex_unlock(&r->mu);
}

void ef__rates_estimate(ef__rates *r, ef__rate_estimate *out)
{
    pthread_mutex_lock(&r->mu);
    ef__rate_snap a = r->ring[r->head], b = r->last;
    pthread_mutex_unlock(&r->mu);
    double up_items = (double)(b.up_items - a.up_items);
    double out_items = (double)(b.out_items - a.out_items);
    double up_s = ef__ns_to_s(b.up_ns - a.up_ns);
    uint64_t in_echo = b.in_echo_ns - a.in_echo_ns;
    /* a reading's in-progress wait may be counted again once it returns
     * (the counters are read apart): never below zero */
    uint64_t consumer =
        b.consumer_ns > a.consumer_ns ? b.consumer_ns - a.consumer_ns : 0;
    double busy_s = ef__ns_to_s(b.t_ns - a.t_ns) -
                    ef__ns_to_s(in_echo < consumer ? in_echo : consumer);
    out->upstream_rate = up_s > 0 && up_items > 0 ? up_items / up_s : 0;
    out->downstream_rate = busy_s > 0 && out_items > 0 ? out_items / busy_s : 0;
    out->r = out->upstream_rate > 0 && out->downstream_rate > 0
                 ? out->downstream_rate / out->upstream_rate
                 : 0;
}
