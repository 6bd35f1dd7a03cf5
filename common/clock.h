/* SPDX-License-Identifier: MIT
 * ibpshim: the monotonic clock every module times with. */
#ifndef IBP_COMMON_CLOCK_H
#define IBP_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds of CLOCK_MONOTONIC.  Async-signal-safe. */
static inline uint64_t ibp_monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif /* IBP_COMMON_CLOCK_H */
