/* SPDX-License-Identifier: MIT
 * ibpshim: per-kind call and byte counters of the interposed entry points. */
#include "report/counters.h"

#include <stdatomic.h>

#include "common/log.h"

typedef struct IbpCounter {
    _Atomic uint64_t calls;
    _Atomic uint64_t bytes;
} IbpCounter;

/* One cache line per kind: threads copying in different directions don't share lines. */
typedef struct IbpCounterSlot {
    IbpCounter c;
    char pad[64 - sizeof(IbpCounter)];
} IbpCounterSlot;

static IbpCounterSlot counters[IBPSHIM_CALL_KIND_COUNT];

static const char *const kind_names[IBPSHIM_CALL_KIND_COUNT] = {
    [IBPSHIM_CALL_MALLOC_HOST] = "cudaMallocHost",
    [IBPSHIM_CALL_HOST_ALLOC] = "cudaHostAlloc",
    [IBPSHIM_CALL_FREE_HOST] = "cudaFreeHost",
    [IBPSHIM_CALL_HOST_REGISTER] = "cudaHostRegister",
    [IBPSHIM_CALL_HOST_UNREGISTER] = "cudaHostUnregister",
    [IBPSHIM_CALL_MEMCPY_H2D] = "cudaMemcpy H2D",
    [IBPSHIM_CALL_MEMCPY_D2H] = "cudaMemcpy D2H",
    [IBPSHIM_CALL_MEMCPY_OTHER] = "cudaMemcpy other",
    [IBPSHIM_CALL_MEMCPY_ASYNC_H2D] = "cudaMemcpyAsync H2D",
    [IBPSHIM_CALL_MEMCPY_ASYNC_D2H] = "cudaMemcpyAsync D2H",
    [IBPSHIM_CALL_MEMCPY_ASYNC_OTHER] = "cudaMemcpyAsync other",
};

void ibp_counters_add(IbpshimCallKind kind, uint64_t bytes)
{
    if ((unsigned)kind >= IBPSHIM_CALL_KIND_COUNT)
        return;
    atomic_fetch_add_explicit(&counters[kind].c.calls, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&counters[kind].c.bytes, bytes, memory_order_relaxed);
}

void ibp_counters_reset(void)
{
    for (int k = 0; k < IBPSHIM_CALL_KIND_COUNT; k++) {
        atomic_store_explicit(&counters[k].c.calls, 0, memory_order_relaxed);
        atomic_store_explicit(&counters[k].c.bytes, 0, memory_order_relaxed);
    }
}

__attribute__((visibility("default"))) size_t ibpshim_call_counts(IbpshimCallCount *out, size_t n)
{
    if (!out)
        return 0;
    if (n > IBPSHIM_CALL_KIND_COUNT)
        n = IBPSHIM_CALL_KIND_COUNT;
    for (size_t k = 0; k < n; k++) {
        out[k].calls = atomic_load_explicit(&counters[k].c.calls, memory_order_relaxed);
        out[k].bytes = atomic_load_explicit(&counters[k].c.bytes, memory_order_relaxed);
    }
    return n;
}

__attribute__((visibility("default"))) const char *ibpshim_call_kind_name(IbpshimCallKind kind)
{
    if ((unsigned)kind >= IBPSHIM_CALL_KIND_COUNT)
        return "?";
    return kind_names[kind];
}

void ibp_counters_log(void)
{
    if (!IBP_LOG_ENABLED(IBP_LOG_INFO))
        return;
    int any = 0;
    for (int k = 0; k < IBPSHIM_CALL_KIND_COUNT; k++) {
        const uint64_t calls = atomic_load_explicit(&counters[k].c.calls, memory_order_relaxed);
        if (!calls)
            continue;
        const uint64_t bytes = atomic_load_explicit(&counters[k].c.bytes, memory_order_relaxed);
        ibp_log(IBP_LOG_INFO, "%-22s calls=%llu bytes=%llu", kind_names[k], (unsigned long long)calls,
                (unsigned long long)bytes);
        any = 1;
    }
    if (!any)
        ibp_log(IBP_LOG_INFO, "no intercepted CUDA calls");
}
