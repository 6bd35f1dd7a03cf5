/* SPDX-License-Identifier: MIT
 * ibpshim: every hooked runtime call goes through the shim unchanged and is counted. */
#include <stdint.h>
#include <string.h>

#include "tests/preload/preload_check.h"

/* Defined in passthrough_ptds.c, compiled for per-thread default streams. */
void passthrough_per_thread(void *dev, const void *host, size_t n);

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)((i * 131u) ^ (seed * 7u) ^ (i >> 9));
}

int main(void)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("passthrough: no CUDA device, skipped\n");
        return 77;
    }
    const size_t n = (1u << 20) + 7;
    IbpshimCallCount before[IBPSHIM_CALL_KIND_COUNT], after[IBPSHIM_CALL_KIND_COUNT];
    preload_counts(before);

    uint8_t *pinned = NULL, *mapped = NULL, *back = malloc(n);
    uint8_t *pageable = malloc(n + 64);
    void *dev = NULL;
    CHECK(back && pageable, "malloc");
    CHECK_CUDA(cudaMallocHost((void **)&pinned, n));
    CHECK_CUDA(cudaHostAlloc((void **)&mapped, n, cudaHostAllocMapped | cudaHostAllocPortable));
    CHECK_CUDA(cudaHostRegister(pageable, n + 64, cudaHostRegisterDefault));
    CHECK_CUDA(cudaMalloc(&dev, n));

    cudaStream_t stream;
    CHECK_CUDA(cudaStreamCreate(&stream));
    for (uint32_t round = 0; round < 3; round++) {
        fill(pinned, n, round);
        CHECK_CUDA(cudaMemcpyAsync(dev, pinned, n, cudaMemcpyHostToDevice, stream));
        CHECK_CUDA(cudaMemcpyAsync(back, dev, n, cudaMemcpyDeviceToHost, stream));
        CHECK_CUDA(cudaStreamSynchronize(stream));
        CHECK(memcmp(back, pinned, n) == 0, "round %u: async round trip differs", round);
    }
    /* An odd, unaligned sub-range through the synchronous call and cudaMemcpyDefault. */
    fill(pageable, n + 64, 9);
    CHECK_CUDA(cudaMemcpy(dev, pageable + 3, n - 11, cudaMemcpyHostToDevice));
    memset(back, 0, n);
    CHECK_CUDA(cudaMemcpy(back, dev, n - 11, cudaMemcpyDefault));
    CHECK(memcmp(back, pageable + 3, n - 11) == 0, "sync sub-range round trip differs");

    passthrough_per_thread(dev, mapped, n);

    CHECK_CUDA(cudaStreamDestroy(stream));
    CHECK_CUDA(cudaFree(dev));
    CHECK_CUDA(cudaHostUnregister(pageable));
    CHECK_CUDA(cudaFreeHost(mapped));
    CHECK_CUDA(cudaFreeHost(pinned));
    /* Errors pass through unchanged. */
    CHECK(cudaHostUnregister(pageable) == cudaErrorHostMemoryNotRegistered, "unregister twice");

    preload_counts(after);
#define DELTA(kind) (after[kind].calls - before[kind].calls)
    CHECK(DELTA(IBPSHIM_CALL_MALLOC_HOST) == 1, "cudaMallocHost counted %llu",
          (unsigned long long)DELTA(IBPSHIM_CALL_MALLOC_HOST));
    CHECK(DELTA(IBPSHIM_CALL_HOST_ALLOC) == 1, "cudaHostAlloc");
    CHECK(DELTA(IBPSHIM_CALL_HOST_REGISTER) == 1, "cudaHostRegister");
    CHECK(DELTA(IBPSHIM_CALL_HOST_UNREGISTER) == 2, "cudaHostUnregister");
    CHECK(DELTA(IBPSHIM_CALL_FREE_HOST) == 2, "cudaFreeHost");
    CHECK(DELTA(IBPSHIM_CALL_MEMCPY_ASYNC_H2D) == 4, "cudaMemcpyAsync H2D (3 legacy + 1 per-thread)");
    CHECK(DELTA(IBPSHIM_CALL_MEMCPY_ASYNC_D2H) == 4, "cudaMemcpyAsync D2H");
    CHECK(DELTA(IBPSHIM_CALL_MEMCPY_H2D) == 2, "cudaMemcpy H2D (1 legacy + 1 per-thread)");
    CHECK(DELTA(IBPSHIM_CALL_MEMCPY_OTHER) == 1, "cudaMemcpy Default");
    CHECK(DELTA(IBPSHIM_CALL_MEMCPY_D2H) == 1, "cudaMemcpy D2H (per-thread)");
    CHECK(after[IBPSHIM_CALL_MEMCPY_ASYNC_H2D].bytes - before[IBPSHIM_CALL_MEMCPY_ASYNC_H2D].bytes == 4 * n,
          "H2D bytes");
    free(back);
    free(pageable);
    printf("passthrough: ok (%zu-byte copies, all calls counted)\n", n);
    return 0;
}
