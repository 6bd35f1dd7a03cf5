/* SPDX-License-Identifier: MIT
 * ibpshim: one pinned region copied to every visible device from one process; each device gets
 * its own kernels and staging, the region one shadow, and every byte must arrive everywhere. */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "tests/preload/preload_check.h"

typedef struct CopyArgs {
    void *dev;
    const void *host;
    size_t n;
    uint8_t *back;
} CopyArgs;

/* One copy to the current device and back, every byte checked. */
static void copy_and_check(void *arg)
{
    const CopyArgs *a = arg;
    CHECK_CUDA(cudaMemset(a->dev, 0, a->n));
    CHECK_CUDA(cudaMemcpyAsync(a->dev, a->host, a->n, cudaMemcpyHostToDevice, 0));
    CHECK_CUDA(cudaMemcpy(a->back, a->dev, a->n, cudaMemcpyDeviceToHost));
    CHECK(memcmp(a->back, a->host, a->n) == 0, "received different bytes");
}

int main(void)
{
    const PreloadTotalsFn totals = preload_compression_or_skip("multi_device", 2);
    int ndev = 0;
    CHECK_CUDA(cudaGetDeviceCount(&ndev));
    if (ndev > 8)
        ndev = 8;
    const size_t n = (6u << 20) + 4; /* float weights, compressible */
    float *host = NULL;
    CHECK_CUDA(cudaHostAlloc((void **)&host, n, cudaHostAllocPortable));
    for (size_t i = 0; i < n / 4; i++)
        host[i] = (float)((int)(i % 1000) - 500) * 1e-4f;
    void *dev[8];
    uint8_t *back = malloc(n);
    CHECK(back != NULL, "malloc");
    for (int d = 0; d < ndev; d++) {
        CHECK_CUDA(cudaSetDevice(d));
        CHECK_CUDA(cudaMalloc(&dev[d], n));
    }
    /* Compressed once (copies to device 0), the region's next copy to every device must go
     * through that device's compressed path. */
    CHECK_CUDA(cudaSetDevice(0));
    CopyArgs first = {.dev = dev[0], .host = host, .n = n, .back = back};
    preload_wait_compressed("multi_device", "compression of the region", totals, copy_and_check, &first);
    IbpshimTransferTotals t, u;
    for (int d = 0; d < ndev; d++) {
        CHECK_CUDA(cudaSetDevice(d));
        CopyArgs args = {.dev = dev[d], .host = host, .n = n, .back = back};
        CHECK(totals(&t) == 0, "totals");
        copy_and_check(&args);
        CHECK(totals(&u) == 0, "totals");
        CHECK(u.compressed_in > t.compressed_in, "device %d: the copy of the compressed region went raw", d);
    }
    CHECK(totals(&t) == 0, "totals");
    for (int round = 0; round < 60; round++) {
        const int d = round % ndev;
        CHECK_CUDA(cudaSetDevice(d));
        CHECK_CUDA(cudaMemset(dev[d], 0, n));
        CHECK_CUDA(cudaMemcpyAsync(dev[d], host, n, cudaMemcpyHostToDevice, 0));
        CHECK_CUDA(cudaMemcpy(back, dev[d], n, cudaMemcpyDeviceToHost));
        CHECK(memcmp(back, host, n) == 0, "round %d: device %d received different bytes", round, d);
        if (round == 30)
            host[12345] += 1.0f; /* a write in the middle: stale for every device */
        usleep(10000);
    }
    CHECK(totals(&u) == 0, "totals");
    CHECK(u.compressed_in > t.compressed_in, "no copy of the rounds went compressed");
    for (int d = 0; d < ndev; d++) {
        CHECK_CUDA(cudaSetDevice(d));
        CHECK_CUDA(cudaFree(dev[d]));
    }
    CHECK_CUDA(cudaFreeHost(host));
    free(back);
    printf("multi_device: ok (%d devices, %llu bytes through the compressed path)\n", ndev,
           (unsigned long long)u.compressed_in);
    return 0;
}
