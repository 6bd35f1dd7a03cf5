/* SPDX-License-Identifier: MIT
 * ibpshim: compressed runs long enough to be pipelined (DMA of one chunk on an internal stream while
 * another decodes the chunk before): every byte checked, the chunks counted on the fake CUDA, and
 * driver calls made to fail half-way, after which the copy must still deliver every byte and
 * return what the runtime returns. */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include "tests/fakecuda/fakecuda.h"
#include "tests/preload/preload_check.h"

typedef void (*StatsFn)(FakecudaStats *out);
typedef void (*ResetFn)(void);
typedef void (*FailFn)(const char *entry, unsigned skip, unsigned count, int error);
typedef unsigned (*FailuresFn)(void);
typedef void (*DelayFn)(unsigned us);
typedef int (*GridFn)(const char *name, unsigned *grid_x);

/* Test-only calls of the fake driver; all NULL on a GPU. */
static StatsFn fake_stats;
static ResetFn fake_reset;
static FailFn fake_fail;
static FailuresFn fake_failures;
static DelayFn fake_delay;

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* "weights": float32 weights (no predictor).  "delta": a noisy counter, which the codec plans
 * with a delta predictor, so clipped edge blocks decode through scratch space. */
static void fill(uint8_t *p, size_t n, int delta)
{
    for (size_t i = 0; i + 4 <= n; i += 4) {
        if (delta) {
            const uint32_t v = (uint32_t)(i / 4 * 7 + (next() & 0xff));
            memcpy(p + i, &v, 4);
        } else {
            const double u = ((double)(next() >> 11) + 0.5) / 9007199254740992.0;
            const float v = (float)(0.15 * (u - 0.5));
            memcpy(p + i, &v, 4);
        }
    }
    for (size_t i = n & ~(size_t)3; i < n; i++)
        p[i] = (uint8_t)next();
}

static void *dev_buf;
static uint8_t *back;

/* Copies [off, off + len) of host to the device on s, brings it back and compares every byte. */
static void round_trip(const uint8_t *host, size_t off, size_t len, cudaStream_t s, const char *what)
{
    CHECK_CUDA(cudaMemsetAsync(dev_buf, 0x5c, len, s));
    CHECK_CUDA(cudaMemcpyAsync(dev_buf, host + off, len, cudaMemcpyHostToDevice, s));
    CHECK_CUDA(cudaMemcpyAsync(back, dev_buf, len, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    for (size_t i = 0; i < len; i++)
        CHECK(back[i] == host[off + i], "%s: byte %zu of [%zu, +%zu) is 0x%02x, expected 0x%02x", what, i,
              off, len, back[i], host[off + i]);
}

static void copy_all(void *arg)
{
    const PreloadWaiting *w = arg;
    round_trip(w->host, 0, w->n, w->s, "waiting for compression");
}

/* Bytes delivered through the compressed path by one whole copy. */
static uint64_t compressed_by(PreloadTotalsFn totals, const uint8_t *host, size_t n, cudaStream_t s,
                              const char *what)
{
    IbpshimTransferTotals a, b;
    CHECK(totals(&a) == 0, "totals");
    round_trip(host, 0, n, s, what);
    CHECK(totals(&b) == 0, "totals");
    return b.compressed_in - a.compressed_in;
}

/* Makes `entry` fail once `skip` more calls of it went through, during one whole copy: the copy
 * must succeed, deliver every byte and not count as compressed; the next one goes compressed. */
static void copy_with_failure(PreloadTotalsFn totals, const uint8_t *host, size_t n, cudaStream_t s,
                              const char *entry, unsigned skip, unsigned count)
{
    const unsigned before = fake_failures();
    fake_fail(entry, skip, count, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
    const uint64_t got = compressed_by(totals, host, n, s, entry);
    fake_fail(entry, 0, 0, 0);
    CHECK(fake_failures() > before, "%s: the injected failure was never reached", entry);
    CHECK(got == 0, "%s failed half-way, yet %llu bytes counted as compressed", entry,
          (unsigned long long)got);
    CHECK(compressed_by(totals, host, n, s, "after the failure") == n,
          "%s: the next copy did not go compressed", entry);
}

/* Two whole copies back to back, slowed so that the first one's decode is pending at the second;
 * every byte checked. */
static void back_to_back(const uint8_t *host, size_t n, cudaStream_t s)
{
    fake_delay(2000);
    CHECK_CUDA(cudaMemsetAsync(dev_buf, 0x5c, n, s));
    CHECK_CUDA(cudaMemcpyAsync(dev_buf, host, n, cudaMemcpyHostToDevice, s));
    CHECK_CUDA(cudaMemcpyAsync(dev_buf, host, n, cudaMemcpyHostToDevice, s));
    CHECK_CUDA(cudaMemcpyAsync(back, dev_buf, n, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    fake_delay(0);
    CHECK(memcmp(back, host, n) == 0, "back to back: bytes differ");
}

/* A run of less than two chunks: pipelined when the copy is alone, DMA, then decode behind another
 * compressed copy whose decode is still pending. */
static void check_alone(PreloadTotalsFn totals, const uint8_t *host, size_t n, cudaStream_t s, size_t chunk)
{
    CHECK(compressed_by(totals, host, n, s, "alone") == n, "the copy did not go compressed");
    if (!fake_stats)
        return;
    /* A run the speed probe times goes serial: one of three alone is pipelined at least. */
    FakecudaStats st;
    unsigned long long piped = 0;
    for (int k = 0; k < 3 && piped < 2; k++) {
        fake_reset();
        round_trip(host, 0, n, s, "alone");
        fake_stats(&st);
        CHECK(st.h2d_bytes < 2 * chunk, "%llu compressed bytes: two whole chunks",
              (unsigned long long)st.h2d_bytes);
        piped = st.kernel_launches;
    }
    CHECK(piped >= 2, "a copy alone went as %llu decode launch: not pipelined", piped);
    /* Back to back: at most one of the two pipelined. */
    fake_reset();
    back_to_back(host, n, s);
    fake_stats(&st);
    CHECK(st.kernel_launches < 2 * piped, "back to back: %llu decode launches, %llu for one pipelined copy",
          (unsigned long long)st.kernel_launches, piped);
}

int main(int argc, char **argv)
{
    const PreloadTotalsFn totals = preload_compression_or_skip("pipelined", 1);
    const int delta = argc > 1 && !strcmp(argv[1], "delta");
    const int gate = argc > 1 && !strcmp(argv[1], "gate"); /* [transfer] path = auto: timing only */
    /* The default pipeline_chunk (16 MiB): the weights' run is less than two chunks, but holds more
     * than a chunk of original bytes and two tails, so it is pipelined while no other compressed
     * copy is in flight, and goes DMA, then decode behind one. */
    const int alone = argc > 1 && !strcmp(argv[1], "alone");
    const char *chunk_env = getenv("IBPSHIM_TRANSFER_PIPELINE_CHUNK");
    if (alone)
        CHECK(!chunk_env, "run without IBPSHIM_TRANSFER_PIPELINE_CHUNK");
    else
        CHECK(chunk_env && !strcmp(chunk_env, "256KiB"), "run with IBPSHIM_TRANSFER_PIPELINE_CHUNK=256KiB");
    const size_t chunk = alone ? 16u << 20 : 256u << 10;
    fake_stats = (StatsFn)dlsym(RTLD_DEFAULT, "fakecuda_stats");
    fake_reset = (ResetFn)dlsym(RTLD_DEFAULT, "fakecuda_reset_stats");
    fake_fail = (FailFn)dlsym(RTLD_DEFAULT, "fakecuda_fail_calls");
    fake_failures = (FailuresFn)dlsym(RTLD_DEFAULT, "fakecuda_injected_failures");
    fake_delay = (DelayFn)dlsym(RTLD_DEFAULT, "fakecuda_set_copy_delay_us");
    const int fake = fake_stats && fake_reset && fake_fail && fake_failures && fake_delay;

    /* Not a multiple of the block size or the word size; alone, whole blocks, so that DMA, then
     * decode is one launch. */
    const size_t n = (24u << 20) + (alone ? 0 : 1000);
    uint8_t *host = NULL;
    CHECK_CUDA(cudaHostAlloc((void **)&host, n, cudaHostAllocDefault));
    CHECK_CUDA(cudaMalloc(&dev_buf, n));
    back = malloc(n);
    CHECK(back != NULL, "malloc");
    fill(host, n, delta);
    cudaStream_t s, nb;
    CHECK_CUDA(cudaStreamCreate(&s));
    CHECK_CUDA(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));

    /* The internal streams cannot be created the first time: that run goes DMA, then decode. */
    const unsigned failures0 = fake ? fake_failures() : 0;
    if (fake && !gate)
        fake_fail("cuStreamCreate", 0, 1, CUDA_ERROR_OUT_OF_MEMORY);
    round_trip(host, 0, n, s, "first copy");
    PreloadWaiting waiting = {.host = host, .n = n, .s = s};
    preload_wait_compressed("pipelined", "the first compression", totals, copy_all, &waiting);
    if (gate) {
        for (int k = 0; k < 3; k++)
            round_trip(host, 0, n, s, "path = auto");
        printf("pipelined: ok (path = auto)\n");
        return 0;
    }
    if (fake) {
        fake_fail("cuStreamCreate", 0, 0, 0);
        CHECK(fake_failures() == failures0 + 1, "the internal streams were never created");
    }

    if (alone) {
        check_alone(totals, host, n, s, chunk);
        printf("pipelined: ok (weights alone, default chunk)\n");
        return 0;
    }

    /* One whole copy: every byte through the compressed path, in chunks. */
    IbpshimTransferTotals a, b;
    FakecudaStats st;
    if (fake)
        fake_reset();
    CHECK(totals(&a) == 0, "totals");
    round_trip(host, 0, n, s, "whole copy");
    CHECK(totals(&b) == 0, "totals");
    CHECK(b.compressed_in - a.compressed_in == n, "%llu of %zu bytes went compressed",
          (unsigned long long)(b.compressed_in - a.compressed_in), n);
    const uint64_t sent = b.compressed_out - a.compressed_out;
    if (fake) {
        fake_stats(&st);
        /* A run of at least 8 chunks goes in chunks of max(chunk, run / 8) compressed bytes: at least
         * 8 of them, each copied and decoded on its own, or the last copied as it is (the raw tail);
         * DMA, then decode would be 2 copies, 1 launch. */
        const uint64_t want = sent / chunk < 8 ? sent / chunk : 8;
        CHECK(sent / chunk >= 8, "only %llu compressed bytes: too few for 8 chunks of %zu",
              (unsigned long long)sent, chunk);
        /* The plan went to the device with the first runs; what counts as sent is what moved. */
        CHECK(st.h2d_bytes == sent, "%llu bytes moved host to device, %llu counted as sent",
              (unsigned long long)st.h2d_bytes, (unsigned long long)sent);
        CHECK(st.h2d_calls >= want && st.kernel_launches + 1 >= want,
              "%llu H2D copies and %llu decode launches for %llu compressed bytes in chunks of %zu",
              (unsigned long long)st.h2d_calls, (unsigned long long)st.kernel_launches,
              (unsigned long long)sent, chunk);
        /* PIPELINED_KERNEL: a decode kernel the copies must have used (the fake's by name) */
        const char *const kernel = getenv("PIPELINED_KERNEL");
        const GridFn grid = (GridFn)dlsym(RTLD_DEFAULT, "fakecuda_kernel_grid");
        unsigned grid_x = 0;
        CHECK(!kernel || (grid && grid(kernel, &grid_x)), "%s was never launched", kernel);
    }

    /* Partial copies at odd offsets (clipped edge blocks), on a blocking and a non-blocking stream
     * and synchronously on the legacy default stream. */
    for (int k = 0; k < 16; k++) {
        const size_t off = next() % (n / 2);
        const size_t len = (4u << 20) + next() % (n - off - (4u << 20));
        round_trip(host, off, len, k % 2 ? nb : s, "partial copy");
    }
    /* Back to back, the second copy keeps no raw tail (the debug log says which runs did). */
    if (fake)
        back_to_back(host, n, s);
    memset(back, 0, n);
    CHECK_CUDA(cudaMemcpy(dev_buf, host, n, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(back, dev_buf, n, cudaMemcpyDeviceToHost));
    CHECK(memcmp(back, host, n) == 0, "synchronous copy differs");

    if (fake) {
        /* Slow copies, so work still queued on the internal streams would show. */
        fake_delay(2000);
        copy_with_failure(totals, host, n, s, "cuLaunchKernel", 2, 1);
        copy_with_failure(totals, host, n, s, "cuMemcpyHtoDAsync", 3, 1);
        copy_with_failure(totals, host, n, s, "cuEventRecord", 4, 1);
        /* Every wait from the fourth on fails, the final join too: the shim synchronises the
         * internal streams on the host before the raw copy. */
        copy_with_failure(totals, host, n, s, "cuStreamWaitEvent", 3, 1u << 20);
        fake_delay(0);
    }

    CHECK(totals(&b) == 0, "totals");
    CHECK(b.sent < b.requested, "sent %llu bytes for %llu requested", (unsigned long long)b.sent,
          (unsigned long long)b.requested);
    printf("pipelined: ok (%s, %llu copies, %llu bytes through the compressed path as %llu)\n",
           delta ? "delta" : "weights", (unsigned long long)b.copies, (unsigned long long)b.compressed_in,
           (unsigned long long)b.compressed_out);
    CHECK_CUDA(cudaStreamDestroy(s));
    CHECK_CUDA(cudaStreamDestroy(nb));
    CHECK_CUDA(cudaFree(dev_buf));
    CHECK_CUDA(cudaFreeHost(host));
    free(back);
    return 0;
}
