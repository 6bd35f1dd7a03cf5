/* SPDX-License-Identifier: MIT
 * ibpshim: helpers shared by the preload test programs. */
#ifndef IBP_TESTS_PRELOAD_PRELOAD_CHECK_H
#define IBP_TESTS_PRELOAD_PRELOAD_CHECK_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "ibpshim/ibpshim.h"

#define CHECK_CUDA(call)                                                                           \
    do {                                                                                           \
        const cudaError_t check_err_ = (call);                                                     \
        if (check_err_ != cudaSuccess) {                                                           \
            fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #call,                        \
                    cudaGetErrorName(check_err_));                                                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

typedef size_t (*PreloadCountsFn)(IbpshimCallCount *out, size_t n);

/* The shim's counters, or exit(1) when the program does not run under it. */
static inline void preload_counts(IbpshimCallCount counts[IBPSHIM_CALL_KIND_COUNT])
{
    const PreloadCountsFn fn = (PreloadCountsFn)dlsym(RTLD_DEFAULT, "ibpshim_call_counts");
    CHECK(fn != NULL, "libibpshim.so is not preloaded (LD_PRELOAD)");
    CHECK(fn(counts, IBPSHIM_CALL_KIND_COUNT) == IBPSHIM_CALL_KIND_COUNT, "short counter snapshot");
}

typedef int (*PreloadTotalsFn)(IbpshimTransferTotals *out);
typedef int (*PreloadBuiltFn)(void);

/* For programs that need the compressed path: exits 77 (skipped) with a message when there are
 * fewer than min_devices devices or the shim was built without kernels, exits 1 when the shim is
 * not preloaded, and returns ibpshim_transfer_totals. */
static inline PreloadTotalsFn preload_compression_or_skip(const char *name, int min_devices)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < min_devices) {
        printf("%s: fewer than %d CUDA device(s), skipped\n", name, min_devices);
        exit(77);
    }
    const PreloadTotalsFn totals = (PreloadTotalsFn)dlsym(RTLD_DEFAULT, "ibpshim_transfer_totals");
    CHECK(totals != NULL, "libibpshim.so is not preloaded");
    const PreloadBuiltFn built = (PreloadBuiltFn)dlsym(RTLD_DEFAULT, "ibpshim_compression_built");
    if (!built || !built()) {
        printf("%s: the shim was built without decode kernels, skipped\n", name);
        exit(77);
    }
    return totals;
}

#endif /* IBP_TESTS_PRELOAD_PRELOAD_CHECK_H */
