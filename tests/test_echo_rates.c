/* SPDX-License-Identifier: Apache-2.0 */
/* The echo stage's R estimate (echo_rates.c), driven through counters the
 * test sets, so every figure is known: the only clock read is the window's
 * own, which the test reads back from the ring. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <time.h>

#include "stages/flow/echo_rates.h"

#define MS 1000000ull

typedef struct {
    _Atomic uint64_t up_ns, up_items, in_echo_ns, out_items;
    ef__consumer_wait consumer;
    ef__rates rates;
} counters;

static void sleep_ms(long ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

static void start_window(counters *c)
{
    ef__rates_init(&c->rates, &c->up_ns, &c->up_items, &c->in_echo_ns,
                   &c->consumer, &c->out_items);
}

/* 20 upstream items in 1 s of upstream time (20 items/s) and 80 items
 * out, over a window of at least 60 ms; returns the window in seconds. */
static double end_window(counters *c, uint64_t in_echo_ns,
                         uint64_t consumer_done_ns)
{
    sleep_ms(60);
    c->up_ns = 1000 * MS;
    c->up_items = 20;
    c->out_items = 80;
    c->in_echo_ns = in_echo_ns;
    c->consumer.done_ns = consumer_done_ns;
    ef__rates_reading(&c->rates);
    return (double)(c->rates.last.t_ns - c->rates.ring[c->rates.head].t_ns) /
           1e9;
}

static double run_window(counters *c, uint64_t in_echo_ns,
                         uint64_t consumer_done_ns)
{
    start_window(c);
    return end_window(c, in_echo_ns, consumer_done_ns);
}

static void check_r(counters *c, double busy_s)
{
    ef__rate_estimate e;
    ef__rates_estimate(&c->rates, &e);
    assert_true(fabs(e.upstream_rate - 20) < 1e-9);
    assert_true(fabs(e.downstream_rate - 80 / busy_s) < 1e-6);
    assert_true(fabs(e.r - 80 / busy_s / 20) < 1e-6);
    ef__rates_destroy(&c->rates);
}

/* Behind a thread (a prefetch) that sits in echo's next() for nearly the
 * whole window while the consumer computes: the consumer's shorter wait is
 * what the downstream lost. Counting the thread's time would leave 5 ms of
 * "work" and an R of about 800 where the consumer's wait gives 80. */
static void thread_below_counts_the_consumers_wait(void **state)
{
    (void)state;
    counters c = {0};
    double window = run_window(&c, 55 * MS, 10 * MS);
    check_r(&c, window - 0.010);
}

/* A chain without threads: the consumer's wait also holds the stages
 * between echo and the consumer, which is downstream work; the time inside
 * echo's next() is the waiting. */
static void chain_counts_the_time_inside_echo(void **state)
{
    (void)state;
    counters c = {0};
    double window = run_window(&c, 20 * MS, 50 * MS);
    check_r(&c, window - 0.020);
}

/* A reading taken while the consumer waits counts the wait so far: a long
 * wait (a slow upstream, a whole batch) is not left out until it ends. */
static void a_wait_in_progress_counts(void **state)
{
    (void)state;
    counters c = {0};
    start_window(&c);
    uint64_t since = c.rates.ring[c.rates.head].t_ns + 10 * MS;
    c.consumer.since_ns = since;
    /* inside echo longer than the window: the consumer's wait is less */
    double window = end_window(&c, 1000 * MS, 0);
    check_r(&c, window - (double)(c.rates.last.t_ns - since) / 1e9);
}

/* A wait counted while in progress and again once done makes the
 * consumer's figure fall back: the window's wait is then zero, not a
 * huge unsigned difference. */
static void a_consumer_figure_that_falls_back_counts_nothing(void **state)
{
    (void)state;
    counters c = {0};
    c.consumer.done_ns = 500 * MS;
    double window = run_window(&c, 30 * MS, 100 * MS);
    check_r(&c, window);
}

/* A restart forgets what came before: a start-up in which one upstream
 * item took 5 s (a shuffle buffer filling) reads as 20 items/s after it,
 * not 21 items in 6 s. */
static void a_restart_forgets_the_start_up(void **state)
{
    (void)state;
    counters c = {0};
    start_window(&c);
    c.up_ns = 5000 * MS;
    c.up_items = 1;
    ef__rates_reading(&c.rates);
    ef__rate_estimate e;
    ef__rates_estimate(&c.rates, &e);
    assert_true(fabs(e.upstream_rate - 0.2) < 1e-9);
    ef__rates_restart(&c.rates);
    ef__rates_estimate(&c.rates, &e);
    assert_true(e.upstream_rate == 0 && e.r == 0); /* unknown yet */
    c.up_ns = 6000 * MS;
    c.up_items = 21;
    ef__rates_reading(&c.rates);
    ef__rates_estimate(&c.rates, &e);
    assert_true(fabs(e.upstream_rate - 20) < 1e-9);
    ef__rates_destroy(&c.rates);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(thread_below_counts_the_consumers_wait),
        cmocka_unit_test(chain_counts_the_time_inside_echo),
        cmocka_unit_test(a_wait_in_progress_counts),
        cmocka_unit_test(a_consumer_figure_that_falls_back_counts_nothing),
        cmocka_unit_test(a_restart_forgets_the_start_up),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
