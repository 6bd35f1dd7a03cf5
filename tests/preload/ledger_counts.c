/* SPDX-License-Identifier: MIT
 * ibpshim: a known sequence of copies and the shim's totals for it (nothing gets hot here:
 * min_copies is set far above the number of copies). */
#include <stdint.h>
#include <string.h>

#include "tests/preload/preload_check.h"

int main(void)
{
    const PreloadTotalsFn totals = preload_compression_or_skip("ledger_counts", 1);
    const size_t big = 4u << 20, half = 2u << 20, tiny = 4096;
    uint8_t *pinned = NULL, *pageable = malloc(half);
    void *dev = NULL;
    CHECK(pageable != NULL, "malloc");
    memset(pageable, 1, half);
    CHECK_CUDA(cudaHostAlloc((void **)&pinned, big, cudaHostAllocDefault));
    memset(pinned, 2, big);
    CHECK_CUDA(cudaMalloc(&dev, big));
    IbpshimTransferTotals t0, t1;
    CHECK(totals(&t0) == 0, "totals");
    for (int i = 0; i < 5; i++)
        CHECK_CUDA(cudaMemcpyAsync(dev, pinned, big, cudaMemcpyHostToDevice, 0));
    for (int i = 0; i < 3; i++)
        CHECK_CUDA(cudaMemcpyAsync(dev, pinned + 4097, half, cudaMemcpyHostToDevice, 0));
    for (int i = 0; i < 2; i++)
        CHECK_CUDA(cudaMemcpy(dev, pageable, half, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dev, pinned, tiny, cudaMemcpyHostToDevice)); /* below min_bytes: not planned */
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK(totals(&t1) == 0, "totals");
    const uint64_t want = 5 * (uint64_t)big + 3 * (uint64_t)half + 2 * (uint64_t)half;
    CHECK(t1.copies - t0.copies == 10, "copies %llu", (unsigned long long)(t1.copies - t0.copies));
    CHECK(t1.requested - t0.requested == want, "requested %llu, expected %llu",
          (unsigned long long)(t1.requested - t0.requested), (unsigned long long)want);
    CHECK(t1.sent - t0.sent == want, "sent %llu", (unsigned long long)(t1.sent - t0.sent));
    CHECK(t1.compressed_in == t0.compressed_in, "nothing may go compressed here");
    CHECK_CUDA(cudaFree(dev));
    CHECK_CUDA(cudaFreeHost(pinned));
    free(pageable);
    printf("ledger_counts: ok (10 copies, %llu bytes, all raw)\n", (unsigned long long)want);
    return 0;
}
