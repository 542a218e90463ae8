/* Monotonic time in nanoseconds, and the conversions to and from it. */
#ifndef EF_CORE_CLOCK_H
#define EF_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>

uint64_t ef__now_ns(void);

/* Nanoseconds as seconds. */
double ef__ns_to_s(uint64_t ns);
/* Seconds as nanoseconds, truncated: 0 for a negative or NaN time,
 * UINT64_MAX for one too long to hold. */
uint64_t ef__s_to_ns(double s);
/* Nanoseconds (a duration, or a CLOCK_MONOTONIC time) as a timespec. */
struct timespec ef__ns_to_timespec(uint64_t ns);

#endif
