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

#endif /* IBP_TESTS_PRELOAD_PRELOAD_CHECK_H */
