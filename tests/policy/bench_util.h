/* SPDX-License-Identifier: MIT
 * ibpshim: what the policy benchmarks share: shadow memory from the heap (the shim's is pinned),
 * fences that are always done, and a monotonic clock. */
#ifndef IBP_TESTS_POLICY_BENCH_UTIL_H
#define IBP_TESTS_POLICY_BENCH_UTIL_H

#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "policy/shadow.h"

static int bench_alloc(void *ctx, size_t size, void **host)
{
    (void)ctx;
    *host = aligned_alloc(16, (size + 15) & ~(size_t)15);
    return *host ? 0 : -ENOMEM;
}

static void bench_free(void *ctx, void *host, size_t size)
{
    (void)ctx;
    (void)size;
    free(host);
}

static int bench_fence_done(void *ctx, void *f)
{
    (void)ctx;
    (void)f;
    return 1;
}

static void bench_fence_wait(void *ctx, void *f)
{
    (void)ctx;
    (void)f;
}

static const IbpShadowOps bench_ops = {bench_alloc,      bench_free,       bench_fence_done,
                                       bench_fence_wait, bench_fence_wait, NULL};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif /* IBP_TESTS_POLICY_BENCH_UTIL_H */
