/* SPDX-License-Identifier: MIT
 * ibpshim: copies that go as they are, on a stream whose compressed copies sent their DMAs ahead
 * on the shim's copy stream.  With [transfer] raw_in_order (the default) a plain copy of 64 KiB or
 * more goes on that copy stream too, after the stream's earlier work, and the stream waits for it;
 * shorter ones, and every one with the option off, stay on the application's stream.  Either way
 * the last writer in stream order must win: each round copies a compressed region into dev, then
 * a buffer below [policy] min_bytes over its first bytes, then (the option on) a short buffer over
 * those, then reads dev back, with every decode and copy of the fake delayed so that a copy that
 * did not wait for the work before it would be overwritten by it.  Argument: "on" or "off", what
 * IBPSHIM_TRANSFER_RAW_IN_ORDER says. */
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
    preload_trip_close(&t);
    CHECK_CUDA(cudaFreeHost(plain));
    CHECK_CUDA(cudaFreeHost(tiny));
    free(want);
    printf("raw_in_order: ok (%s: %u of %u plain copies on the shim's copy stream%s)\n", argv[1], moved, rounds,
           last_h2d ? "" : "; streams not observable here");
    return 0;
}
