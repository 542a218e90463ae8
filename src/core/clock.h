/* Monotonic time in nanoseconds. */
#ifndef EF_CORE_CLOCK_H
#define EF_CORE_CLOCK_H

#include <stdint.h>

uint64_t ef__now_ns(void);

#endif
