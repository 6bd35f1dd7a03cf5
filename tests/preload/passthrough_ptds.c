/* SPDX-License-Identifier: MIT
 * ibpshim: the _ptds/_ptsz entry points, which this file reaches by being compiled for
 * per-thread default streams. */
#include <stdint.h>
#include <string.h>

#include "tests/preload/preload_check.h"

void passthrough_per_thread(void *dev, const void *host, size_t n);

void passthrough_per_thread(void *dev, const void *host, size_t n)
{
    uint8_t *back = malloc(n);
    CHECK(back != NULL, "malloc");
    memset((void *)host, 0x5a, n);
    /* Stream 0 here is the per-thread default stream: cudaMemcpyAsync_ptsz. */
    CHECK_CUDA(cudaMemcpyAsync(dev, host, n, cudaMemcpyHostToDevice, 0));
    CHECK_CUDA(cudaMemcpyAsync(back, dev, n, cudaMemcpyDeviceToHost, cudaStreamPerThread));
    CHECK_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
    CHECK(memcmp(back, host, n) == 0, "per-thread async round trip differs");
    memset(back, 0, n);
    CHECK_CUDA(cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice)); /* cudaMemcpy_ptds */
    CHECK_CUDA(cudaMemcpy(back, dev, n, cudaMemcpyDeviceToHost));
    CHECK(memcmp(back, host, n) == 0, "per-thread sync round trip differs");
    free(back);
}
