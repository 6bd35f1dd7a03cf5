/* SPDX-License-Identifier: MIT
 * ibpshim: strange arguments to the hooked calls get exactly the answer the runtime gives without
 * the shim, also for copies from a compressed region, and the program carries on. */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "tests/preload/preload_check.h"

typedef struct CopyArgs {
    void *dev;
    const void *host;
    size_t n;
} CopyArgs;

static void copy_once(void *arg)
{
    const CopyArgs *a = arg;
    CHECK_CUDA(cudaMemcpy(a->dev, a->host, a->n, cudaMemcpyHostToDevice));
}

int main(void)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("bad_args: no CUDA device, skipped\n");
        return 77;
    }
    /* Also run without the shim, so both answers can be compared. */
    const PreloadTotalsFn totals = (PreloadTotalsFn)dlsym(RTLD_DEFAULT, "ibpshim_transfer_totals");
    const size_t n = 4u << 20;
    float *host = NULL;
    void *dev = NULL;
    CHECK_CUDA(cudaHostAlloc((void **)&host, n, cudaHostAllocDefault));
    for (size_t i = 0; i < n / 4; i++)
        host[i] = (float)(i % 777) * 0.01f;
    CHECK_CUDA(cudaMalloc(&dev, n));
    /* Under a shim with kernels, copy until the region is compressed. */
    const PreloadBuiltFn built = (PreloadBuiltFn)dlsym(RTLD_DEFAULT, "ibpshim_compression_built");
    if (totals && built && built()) {
        CopyArgs args = {.dev = dev, .host = host, .n = n};
        preload_wait_compressed("bad_args", "compression of the region", totals, copy_once, &args);
    }
    /* A destination too small for the copy: the runtime's own error, no kernel writing past it. */
    const cudaError_t past = cudaMemcpyAsync((uint8_t *)dev + 4096, host, n, cudaMemcpyHostToDevice, 0);
    CHECK(past != cudaSuccess, "a copy past the end of the allocation succeeded");
    cudaGetLastError();
    /* A host destination with an H2D kind, an unknown kind, a NULL source, unknown flags. */
    uint8_t *pageable = malloc(n);
    CHECK(pageable != NULL, "malloc");
    const cudaError_t wrong_kind = cudaMemcpy(pageable, host, n, (enum cudaMemcpyKind)77);
    CHECK(wrong_kind != cudaSuccess, "an unknown copy kind succeeded");
    cudaGetLastError();
    CHECK(cudaMemcpyAsync(dev, NULL, n, cudaMemcpyHostToDevice, 0) != cudaSuccess, "a NULL source succeeded");
    cudaGetLastError();
    void *odd = NULL;
    CHECK(cudaHostAlloc(&odd, n, 0x80000000u) != cudaSuccess, "unknown cudaHostAlloc flags succeeded");
    cudaGetLastError();
    /* The program carries on: a good copy still delivers every byte. */
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(pageable, dev, n, cudaMemcpyDeviceToHost));
    CHECK(memcmp(pageable, host, n) == 0, "a good copy after the bad ones differs");
    printf("bad_args: ok (past-the-end copy -> %s, unknown kind -> %s)\n", cudaGetErrorName(past),
           cudaGetErrorName(wrong_kind));
    free(pageable);
    CHECK_CUDA(cudaFree(dev));
    CHECK_CUDA(cudaFreeHost(host));
    return 0;
}
