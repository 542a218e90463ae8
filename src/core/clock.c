/* Monotonic clock, and the one place that knows a second is 1e9 ns. */
#include "core/clock.h"

#define NS_PER_S 1000000000u

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
