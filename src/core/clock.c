/* SPDX-License-Identifier: Apache-2.0 */
/* Monotonic clocks: CLOCK_MONOTONIC, the cheaper per-item timer (see
 * clock.h for what it promises), and the one place that knows a second is
 * 1e9 ns. */
#include "core/clock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NS_PER_S 1000000000u

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <x86intrin.h>
#define HAVE_TSC 1
#endif

uint64_t ef__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

double ef__ns_to_s(uint64_t ns)
{
    return (double)ns / NS_PER_S;
}

uint64_t ef__s_to_ns(double s)
{
    if (!(s > 0)) /* negative, zero or NaN */
        return 0;
    double ns = s * NS_PER_S;
    /* 2^64: the first double past UINT64_MAX (which converts to it) */
    return ns >= 18446744073709551616.0 ? UINT64_MAX : (uint64_t)ns;
}

struct timespec ef__ns_to_timespec(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / NS_PER_S),
                          .tv_nsec = (long)(ns % NS_PER_S)};
    return ts;
}

#ifdef HAVE_TSC

enum { TIMER_UNSET, TIMER_TSC, TIMER_MONOTONIC };

__extension__ typedef unsigned __int128 u128; /* GCC and Clang have it */

/* Written once under `once`, read after `mode` says so (acquire). */
static struct {
    uint64_t tsc0, ns0; /* a moment on both clocks */
    uint64_t mult;      /* nanoseconds per tick, times 2^32 */
} cal;
static _Atomic int mode = TIMER_UNSET;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* CPUID says the counter runs at a constant rate in every power state. */
static int tsc_invariant(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u)
        return 0;
    __get_cpuid(0x80000007u, &a, &b, &c, &d);
    return (d >> 8) & 1;
}

/* A moment on both clocks: the TSC read between two CLOCK_MONOTONIC reads,
 * from the tightest of a few tries (a preemption in between is dropped). */
static void read_pair(uint64_t *ns, uint64_t *tsc)
{
    uint64_t best = UINT64_MAX;
    *ns = *tsc = 0; /* the first try always replaces them */
    for (int i = 0; i < 16; i++) {
        uint64_t a = ef__now_ns();
        uint64_t t = __rdtsc();
        uint64_t b = ef__now_ns();
        if (b - a < best) {
            best = b - a;
            *ns = a + (b - a) / 2;
            *tsc = t;
        }
    }
}

static void calibrate(void)
{
    const char *env = getenv("EF_CLOCK");
    int m = TIMER_MONOTONIC;
    if ((!env || strcmp(env, "monotonic") != 0) && tsc_invariant()) {
        uint64_t ns0, t0, ns1, t1;
        read_pair(&ns0, &t0);
        /* 2 ms between the two moments: the pairs' spread (tens of ns)
         * makes the rate good to about 1e-5 */
        struct timespec wait = {0, 2000000};
        while (nanosleep(&wait, &wait) != 0)
            ;
        read_pair(&ns1, &t1);
        if (t1 > t0 && ns1 > ns0) {
            cal.tsc0 = t0;
            cal.ns0 = ns0;
            cal.mult = (uint64_t)(((u128)(ns1 - ns0) << 32) / (t1 - t0));
            m = TIMER_TSC;
        }
    }
    atomic_store_explicit(&mode, m, memory_order_release);
}

uint64_t ef__timer_ns(void)
{
    int m = atomic_load_explicit(&mode, memory_order_acquire);
    if (m == TIMER_UNSET) {
        pthread_once(&once, calibrate);
        m = atomic_load_explicit(&mode, memory_order_acquire);
    }
    if (m != TIMER_TSC)
        return ef__now_ns();
    uint64_t t = __rdtsc();
    /* a CPU whose counter is a little behind the calibrating one's, just
     * after calibration, reads the calibration moment */
    uint64_t ticks = t > cal.tsc0 ? t - cal.tsc0 : 0;
    return cal.ns0 + (uint64_t)(((u128)ticks * cal.mult) >> 32);
}

#else

uint64_t ef__timer_ns(void)
{
    return ef__now_ns();
}

#endif
