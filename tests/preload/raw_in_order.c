/* SPDX-License-Identifier: MIT
 * ibpshim: copies that go as they are, on a stream whose compressed copies sent their DMAs ahead
 * on the shim's copy stream.  With [transfer] raw_in_order (the default) a plain copy of 64 KiB or
 * more from pinned memory goes on that copy stream too, after the stream's earlier work, and the
 * stream waits for it; shorter ones, those from pageable memory, and every one with the option
 * off, stay on the application's stream.  Either way the last writer in stream order must win:
 * each round copies a compressed region into dev, then a pinned buffer below [policy] min_bytes
 * over its first bytes, then (every other round) a short buffer over those, then reads dev back.
 * The fake delays every decode and copy, copies by their size too, so that a copy that did not
 * wait for the decode before it is overwritten by it, and a stream that did not wait for the
 * moved copy reads dev back (or takes the short copy) before the moved copy lands.  Argument:
 * "on" or "off", what IBPSHIM_TRANSFER_RAW_IN_ORDER says. */
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "tests/preload/preload_check.h"

typedef int (*LastH2dFn)(void **stream, size_t *bytes);

/* Fills n bytes with a pattern of round r that no other round or buffer shares. */
static void fill_round(uint8_t *p, size_t n, unsigned r, unsigned salt)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)((i * 131u + r * 17u + salt) ^ (i >> 9));
}

int main(int argc, char **argv)
{
    CHECK(argc == 2 && (!strcmp(argv[1], "on") || !strcmp(argv[1], "off")), "usage: raw_in_order on|off");
    const int on = !strcmp(argv[1], "on");
    const PreloadTotalsFn totals = preload_compression_or_skip("raw_in_order", 1);
    const LastH2dFn last_h2d = (LastH2dFn)dlsym(RTLD_DEFAULT, "fakecuda_last_h2d");
    const size_t n = 4u << 20, m = 512u << 10, small = 4u << 10;
    PreloadTrip t;
    const uint8_t *host = preload_trip_open(&t, n);
    uint8_t *plain = NULL, *tiny = NULL;
    CHECK_CUDA(cudaHostAlloc((void **)&plain, m, cudaHostAllocDefault));
    CHECK_CUDA(cudaHostAlloc((void **)&tiny, small, cudaHostAllocDefault));
    uint8_t *want = malloc(n);
    CHECK(want != NULL, "malloc");
    preload_wait_compressed("raw_in_order", "the region", totals, preload_trip, &t);
    IbpshimTransferTotals a, b;
    CHECK(totals(&a) == 0, "totals");
    const unsigned rounds = 12;
    unsigned moved = 0;
    for (unsigned r = 0; r < rounds; r++) {
        fill_round(plain, m, r, 1);
        fill_round(tiny, small, r, 2);
        CHECK_CUDA(cudaMemsetAsync(t.dev, 0x5c, n, t.w.s));
        CHECK_CUDA(cudaMemcpyAsync(t.dev, host, n, cudaMemcpyHostToDevice, t.w.s));
        CHECK_CUDA(cudaMemcpyAsync(t.dev, plain, m, cudaMemcpyHostToDevice, t.w.s));
        void *seen = NULL;
        size_t bytes = 0;
        if (last_h2d && last_h2d(&seen, &bytes)) {
            CHECK(bytes == m, "the fake saw a copy of %zu bytes last, not the plain one", bytes);
            CHECK(on ? seen != (void *)t.w.s : seen == (void *)t.w.s,
                  "round %u: the plain copy went on %s stream", r, on ? "the application's" : "another");
            moved += seen != (void *)t.w.s;
        }
        /* Rounds alternate: a short copy over the plain one's first bytes, which stays on the
         * application's stream and must land after it. */
        const int with_tiny = r % 2 == 1;
        if (with_tiny) {
            CHECK_CUDA(cudaMemcpyAsync(t.dev, tiny, small, cudaMemcpyHostToDevice, t.w.s));
            if (last_h2d && last_h2d(&seen, &bytes))
                CHECK(bytes == small && seen == (void *)t.w.s, "round %u: the short copy left the stream", r);
        }
        CHECK_CUDA(cudaMemcpyAsync(t.back, t.dev, n, cudaMemcpyDeviceToHost, t.w.s));
        CHECK_CUDA(cudaStreamSynchronize(t.w.s));
        memcpy(want, host, n);
        memcpy(want, plain, m);
        if (with_tiny)
            memcpy(want, tiny, small);
        for (size_t i = 0; i < n; i++)
            CHECK(t.back[i] == want[i], "round %u: byte %zu is %#x, the last writer in stream order wrote %#x", r,
                  i, t.back[i], want[i]);
    }
    CHECK(totals(&b) == 0, "totals");
    CHECK(b.compressed_in > a.compressed_in, "no copy of the region went compressed during the rounds");
    /* Five more streams copy the region compressed, then a plain buffer: the shim's four pairs of
     * internal streams a context are shared by some of them, and a stream that shares its pair
     * keeps its plain copies (the shared copy stream must not wait for its earlier work), so at
     * most three of the five move theirs; every byte still lands in stream order. */
    enum { kStreams = 5 };
    cudaStream_t more[kStreams];
    unsigned more_moved = 0;
    for (int k = 0; k < kStreams; k++) {
        CHECK_CUDA(cudaStreamCreate(&more[k]));
        CHECK_CUDA(cudaMemcpyAsync(t.dev, host, n, cudaMemcpyHostToDevice, more[k]));
        CHECK_CUDA(cudaStreamSynchronize(more[k]));
    }
    for (int k = 0; k < kStreams; k++) {
        fill_round(plain, m, rounds + 1 + (unsigned)k, 4);
        CHECK_CUDA(cudaMemcpyAsync(t.dev, host, n, cudaMemcpyHostToDevice, more[k]));
        CHECK_CUDA(cudaMemcpyAsync(t.dev, plain, m, cudaMemcpyHostToDevice, more[k]));
        void *seen = NULL;
        if (last_h2d && last_h2d(&seen, NULL))
            more_moved += seen != (void *)more[k];
        CHECK_CUDA(cudaMemcpyAsync(t.back, t.dev, n, cudaMemcpyDeviceToHost, more[k]));
        CHECK_CUDA(cudaStreamSynchronize(more[k]));
        CHECK(memcmp(t.back, plain, m) == 0 && memcmp(t.back + m, host + m, n - m) == 0,
              "stream %d of %d: the device does not hold the last writer's bytes", k + 1, kStreams);
    }
    CHECK(more_moved <= kStreams - 2, "%u of %d streams moved plain copies, though some share a copy stream",
          more_moved, kStreams);
    for (int k = 0; k < kStreams; k++)
        CHECK_CUDA(cudaStreamDestroy(more[k]));
    /* From pageable memory the real call would first wait for the copy stream to drain: it stays. */
    uint8_t *pageable = malloc(m);
    CHECK(pageable != NULL, "malloc");
    fill_round(pageable, m, rounds, 3);
    CHECK_CUDA(cudaMemcpyAsync(t.dev, pageable, m, cudaMemcpyHostToDevice, t.w.s));
    void *seen = NULL;
    size_t bytes = 0;
    if (last_h2d && last_h2d(&seen, &bytes))
        CHECK(bytes == m && seen == (void *)t.w.s, "the copy from pageable memory left the stream");
    CHECK_CUDA(cudaMemcpyAsync(t.back, t.dev, m, cudaMemcpyDeviceToHost, t.w.s));
    CHECK_CUDA(cudaStreamSynchronize(t.w.s));
    CHECK(memcmp(t.back, pageable, m) == 0, "the copy from pageable memory differs");
    free(pageable);
    preload_trip_close(&t);
    CHECK_CUDA(cudaFreeHost(plain));
    CHECK_CUDA(cudaFreeHost(tiny));
    free(want);
    printf("raw_in_order: ok (%s: %u of %u plain copies on the shim's copy stream, %u of %d streams that may "
           "share it%s)\n",
           argv[1], moved, rounds, more_moved, kStreams, last_h2d ? "" : "; streams not observable here");
    return 0;
}
