/* SPDX-License-Identifier: Apache-2.0 */
/* Monotonic time in nanoseconds: a precise clock for deadlines and time
 * lines, a cheaper one for timing every item, and the conversions. */
#ifndef EF_CORE_CLOCK_H
#define EF_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC. */
uint64_t ef__now_ns(void);

/* Nanoseconds as seconds. */
double ef__ns_to_s(uint64_t ns);
/* Seconds as nanoseconds, truncated: 0 for a negative or NaN time,
 * UINT64_MAX for one too long to hold. */
uint64_t ef__s_to_ns(double s);
/* Nanoseconds (a duration, or a CLOCK_MONOTONIC time) as a timespec. */
struct timespec ef__ns_to_timespec(uint64_t ns);

/* The clock the per-item timings use (every pull between stages, the
 * consumer's wait), where a clock read is paid twice per item per stage.
 * On x86-64 with an invariant time stamp counter it is the TSC scaled to
 * nanoseconds, calibrated once per process against CLOCK_MONOTONIC (a
 * 2 ms wait the first time it is read): about 15 ns a read instead of
 * 40 under a hypervisor's clock. Elsewhere, or with EF_CLOCK=monotonic
 * in the environment, it is ef__now_ns. Same origin and rate as
 * ef__now_ns to within about 1e-4, so its differences mix with
 * ef__now_ns's; use it for durations, not for deadlines. Readings on two
 * CPUs may differ by the counters' skew: subtract with ef__elapsed_ns. */
uint64_t ef__timer_ns(void);

/* t1 - t0, or 0 when t1 is earlier (two CPUs' counters a little apart). */
static inline uint64_t ef__elapsed_ns(uint64_t t0, uint64_t t1)
{
    return t1 > t0 ? t1 - t0 : 0;
}

#endif
