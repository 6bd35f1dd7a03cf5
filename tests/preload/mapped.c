/* SPDX-License-Identifier: MIT
 * ibpshim: regions pinned mapped by name (cudaHostAllocMapped, cudaHostRegisterMapped) are for
 * kernels to use through their device pointer, whose writes no tracker sees: they stay raw, while
 * a region pinned without the flag goes compressed, unless [policy] track_mapped is on
 * (MAPPED_EXPECT=compressed: then all three go compressed). */
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "tests/preload/preload_check.h"

static void *dev_buf;
static uint8_t *back;

static void copy_all(void *arg)
{
    preload_round_trip(arg, dev_buf, back);
}

int main(void)
{
    const PreloadTotalsFn totals = preload_compression_or_skip("mapped", 1);
    const char *expect = getenv("MAPPED_EXPECT");
    const int compressed = expect && !strcmp(expect, "compressed");
    const size_t n = (4u << 20) + 1000;
    uint8_t *plain = NULL, *alloc = NULL;
    uint8_t *reg = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(reg != MAP_FAILED, "mmap");
    CHECK_CUDA(cudaHostAlloc((void **)&plain, n, cudaHostAllocDefault));
    CHECK_CUDA(cudaHostAlloc((void **)&alloc, n, cudaHostAllocMapped));
    CHECK_CUDA(cudaHostRegister(reg, n, cudaHostRegisterMapped));
    CHECK_CUDA(cudaMalloc(&dev_buf, n));
    back = malloc(n);
    CHECK(back != NULL, "malloc");
    uint8_t *const regions[3] = {plain, alloc, reg};
    const char *const names[3] = {"cudaHostAllocDefault", "cudaHostAllocMapped", "cudaHostRegisterMapped"};
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    PreloadWaiting w[3];
    for (int i = 0; i < 3; i++) {
        preload_fill_weights(regions[i], n);
        w[i] = (PreloadWaiting){.host = regions[i], .n = n, .s = s};
    }
    /* Each region copied alike; the flagless one (and, with track_mapped, every one) compresses. */
    for (int i = 0; i < 3; i++) {
        if (i == 0 || compressed) {
            const unsigned copies = preload_wait_compressed("mapped", names[i], totals, copy_all, &w[i]);
            printf("mapped: %s: compressed after %u copies\n", names[i], copies);
            continue;
        }
        /* As many copies as the flagless region needed and more, spread over a second. */
        for (int k = 0; k < 20; k++) {
            IbpshimTransferTotals a, b;
            CHECK(totals(&a) == 0, "totals");
            copy_all(&w[i]);
            CHECK(totals(&b) == 0, "totals");
            CHECK(b.compressed_in == a.compressed_in, "%s: copy %d went compressed", names[i], k);
            usleep(50000);
        }
        printf("mapped: %s: 20 copies over a second, all raw\n", names[i]);
    }
    CHECK_CUDA(cudaStreamDestroy(s));
    CHECK_CUDA(cudaHostUnregister(reg));
    CHECK_CUDA(cudaFreeHost(alloc));
    CHECK_CUDA(cudaFreeHost(plain));
    CHECK_CUDA(cudaFree(dev_buf));
    munmap(reg, n);
    free(back);
    printf("mapped: ok\n");
    return 0;
}
