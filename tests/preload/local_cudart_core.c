/* SPDX-License-Identifier: MIT
 * ibpshim: a library that links libcudart, loaded RTLD_LOCAL by local_cudart.c the way Python
 * loads PyTorch's extension modules. */
#include <stdint.h>
#include <string.h>

#include "tests/preload/preload_check.h"

__attribute__((visibility("default"))) int core_round_trip(size_t n);
__attribute__((visibility("default"))) int core_device_count(void);

int core_device_count(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

int core_round_trip(size_t n)
{
    uint8_t *pinned = NULL, *back = malloc(n);
    void *dev = NULL;
    CHECK(back != NULL, "malloc");
    CHECK_CUDA(cudaHostAlloc((void **)&pinned, n, cudaHostAllocDefault));
    CHECK_CUDA(cudaMalloc(&dev, n));
    for (size_t i = 0; i < n; i++)
        pinned[i] = (uint8_t)(i * 37u + 11u);
    CHECK_CUDA(cudaMemcpyAsync(dev, pinned, n, cudaMemcpyHostToDevice, 0));
    CHECK_CUDA(cudaMemcpy(back, dev, n, cudaMemcpyDeviceToHost));
    const int same = memcmp(back, pinned, n) == 0;
    CHECK_CUDA(cudaFree(dev));
    CHECK_CUDA(cudaFreeHost(pinned));
    free(back);
    return same ? 0 : 1;
}
