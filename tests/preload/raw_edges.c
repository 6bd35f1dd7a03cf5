/* SPDX-License-Identifier: MIT
 * ibpshim: copies that start or end inside a block.  With [transfer] raw_edges (the default) a
 * serial run sends such an edge as it is where its bytes there are fewer than the block compressed
 * by 64 KiB or more; without, every block the copy touches goes compressed.  Each copy is of a
 * compressed region's sub-range at a different distance from the block bounds (256 KiB blocks),
 * into a poisoned device buffer at an odd offset, read back and checked byte for byte, every decode
 * and copy of the fake delayed.  The wire is checked too: a copy whose edges are 16 KiB into their
 * blocks sends, beyond the whole blocks between, about 32 KiB as they are with the option and about
 * two blocks compressed without.  Argument: "on" or "off", what IBPSHIM_TRANSFER_RAW_EDGES says, or
 * "kernel": raw_edges and IBPSHIM_TRANSFER_EDGE_KERNEL on, where on the fake an edged copy makes one
 * kernel launch more than a copy of whole blocks and no more copies to the device (two more with
 * "on"). */
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "tests/fakecuda/fakecuda.h"
#include "tests/preload/preload_check.h"

#define BLOCK ((size_t)256 << 10)

typedef void (*SetDelayFn)(unsigned us);
typedef void (*StatsFn)(FakecudaStats *out);

typedef struct Edges {
    PreloadTrip t;
    uint8_t *dev; /* n + 64 bytes: copies land at offset 7 */
} Edges;

/* Copies bytes [off, off + len) of the region to dev + 7 and checks them; returns the compressed
 * bytes the copy sent (totals before and after).  On the fake, *launches and *h2d (either may be
 * NULL) get the kernels launched and the copies to the device the copy made. */
static uint64_t copy_range(PreloadTotalsFn totals, Edges *e, size_t off, size_t len, uint64_t *launches,
                           uint64_t *h2d)
{
    const StatsFn stats = (StatsFn)dlsym(RTLD_DEFAULT, "fakecuda_stats");
    FakecudaStats sa = {0}, sb = {0};
    IbpshimTransferTotals a, b;
    CHECK(totals(&a) == 0, "totals");
    CHECK_CUDA(cudaMemsetAsync(e->dev, 0x5c, e->t.w.n + 64, e->t.w.s));
    CHECK_CUDA(cudaStreamSynchronize(e->t.w.s));
    if (stats)
        stats(&sa);
    CHECK_CUDA(cudaMemcpyAsync(e->dev + 7, e->t.w.host + off, len, cudaMemcpyHostToDevice, e->t.w.s));
    CHECK_CUDA(cudaStreamSynchronize(e->t.w.s));
    if (stats)
        stats(&sb);
    CHECK_CUDA(cudaMemcpyAsync(e->t.back, e->dev, len + 14, cudaMemcpyDeviceToHost, e->t.w.s));
    CHECK_CUDA(cudaStreamSynchronize(e->t.w.s));
    CHECK(totals(&b) == 0, "totals");
    if (launches)
        *launches = sb.kernel_launches - sa.kernel_launches;
    if (h2d)
        *h2d = sb.h2d_calls - sa.h2d_calls;
    for (int i = 0; i < 7; i++)
        CHECK(e->t.back[i] == 0x5c && e->t.back[7 + len + (size_t)i] == 0x5c,
              "copy of [%zu, +%zu): a byte outside the destination was written", off, len);
    CHECK(memcmp(e->t.back + 7, e->t.w.host + off, len) == 0, "copy of [%zu, +%zu) differs", off, len);
    CHECK(b.compressed_in - a.compressed_in == len, "copy of [%zu, +%zu) did not go compressed whole", off,
          len);
    return b.compressed_out - a.compressed_out;
}

int main(int argc, char **argv)
{
    CHECK(argc == 2 && (!strcmp(argv[1], "on") || !strcmp(argv[1], "off") || !strcmp(argv[1], "kernel")),
          "usage: raw_edges on|off|kernel");
    const int kernel = !strcmp(argv[1], "kernel"), on = kernel || !strcmp(argv[1], "on");
    const PreloadTotalsFn totals = preload_compression_or_skip("raw_edges", 1);
    const size_t n = 16 * BLOCK;
    Edges e;
    preload_trip_open(&e.t, n);
    CHECK_CUDA(cudaMalloc((void **)&e.dev, n + 64));
    free(e.t.back);
    e.t.back = malloc(n + 64);
    CHECK(e.t.back != NULL, "malloc");
    preload_wait_compressed("raw_edges", "the region", totals, preload_trip, &e.t);
    /* Head and tail a few bytes, 16 KiB, half a block and all but 16 KiB into their blocks, ten
     * whole blocks between (copies shorter than 2 MiB go raw), and one that ends at the region's
     * end. */
    const size_t into[] = {1, 4093, 16u << 10, BLOCK / 2, BLOCK - (16u << 10)};
    for (size_t i = 0; i < sizeof(into) / sizeof(into[0]); i++)
        for (size_t j = 0; j < sizeof(into) / sizeof(into[0]); j++)
            copy_range(totals, &e, BLOCK - into[i], into[i] + 10 * BLOCK + into[j], NULL, NULL);
    copy_range(totals, &e, 5 * BLOCK + 777, n - 5 * BLOCK - 777, NULL, NULL);
    /* The wire: 10 whole blocks against the same 10 with 16 KiB edges on either side. */
    uint64_t whole_launches, whole_h2d, edged_launches, edged_h2d;
    const uint64_t whole = copy_range(totals, &e, BLOCK, 10 * BLOCK, &whole_launches, &whole_h2d);
    const uint64_t edged =
        copy_range(totals, &e, BLOCK - (16u << 10), 10 * BLOCK + (32u << 10), &edged_launches, &edged_h2d);
    const uint64_t more = edged > whole ? edged - whole : 0;
    if (on && dlsym(RTLD_DEFAULT, "fakecuda_stats"))
        CHECK(
            edged_launches == whole_launches + (uint64_t)kernel && edged_h2d == whole_h2d + (kernel ? 0 : 2),
            "an edged copy made %llu launches and %llu copies to the device against %llu and %llu for "
            "whole blocks: its edges did not go by %s",
            (unsigned long long)edged_launches, (unsigned long long)edged_h2d,
            (unsigned long long)whole_launches, (unsigned long long)whole_h2d, kernel ? "a kernel" : "DMAs");
    if (on)
        CHECK(more <= (32u << 10) + (8u << 10), "16 KiB edges sent %llu bytes more than the whole blocks",
              (unsigned long long)more);
    else
        CHECK(more >= (96u << 10), "two edge blocks compressed sent only %llu bytes more",
              (unsigned long long)more);
    /* Back to back with no wait between: the edges of the second copy must land after the first
     * copy's decode (10 ms on the fake) that writes the same bytes, and a memset after the first
     * copy must land after its edges, which the fake makes slow (30 ms a copy) for that part. */
    const size_t len = 10 * BLOCK + (32u << 10);
    CHECK_CUDA(cudaMemcpyAsync(e.dev + 7, e.t.w.host + BLOCK, len, cudaMemcpyHostToDevice, e.t.w.s));
    CHECK_CUDA(
        cudaMemcpyAsync(e.dev + 7, e.t.w.host + BLOCK - (16u << 10), len, cudaMemcpyHostToDevice, e.t.w.s));
    CHECK_CUDA(cudaMemcpyAsync(e.t.back, e.dev + 7, len, cudaMemcpyDeviceToHost, e.t.w.s));
    CHECK_CUDA(cudaStreamSynchronize(e.t.w.s));
    CHECK(memcmp(e.t.back, e.t.w.host + BLOCK - (16u << 10), len) == 0,
          "back to back: the second copy's bytes were overwritten by the first's");
    const SetDelayFn set_delay = (SetDelayFn)dlsym(RTLD_DEFAULT, "fakecuda_set_copy_delay_us");
    if (set_delay)
        set_delay(30000);
    CHECK_CUDA(
        cudaMemcpyAsync(e.dev + 7, e.t.w.host + BLOCK - (16u << 10), len, cudaMemcpyHostToDevice, e.t.w.s));
    CHECK_CUDA(cudaMemsetAsync(e.dev, 0x5c, n + 64, e.t.w.s));
    CHECK_CUDA(cudaMemcpyAsync(e.t.back, e.dev, n + 64, cudaMemcpyDeviceToHost, e.t.w.s));
    CHECK_CUDA(cudaStreamSynchronize(e.t.w.s));
    if (set_delay)
        set_delay(1000);
    for (size_t i = 0; i < n + 64; i++)
        CHECK(e.t.back[i] == 0x5c, "byte %zu of a buffer set after a copy holds %#x: the copy landed after",
              i, e.t.back[i]);
    CHECK_CUDA(cudaFree(e.dev));
    preload_trip_close(&e.t);
    printf("raw_edges: ok (%s: 28 copies checked; 16 KiB edges cost %llu bytes beyond their whole blocks' "
           "%llu)\n",
           argv[1], (unsigned long long)more, (unsigned long long)whole);
    return 0;
}
