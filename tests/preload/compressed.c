/* SPDX-License-Identifier: MIT
 * ibpshim: an unmodified CUDA program whose repeated copies of a pinned region go compressed,
 * with every kind of write between copies; every byte that arrives is checked, and the shim's
 * totals must show fewer bytes sent than requested. */
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tests/preload/preload_check.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Gaussian-ish float32 weights: the kind of data IBP compresses. */
static void fill_weights(uint8_t *p, size_t n)
{
    for (size_t i = 0; i + 4 <= n; i += 4) {
        const double u = ((double)(next() >> 11) + 0.5) / 9007199254740992.0;
        const float v = (float)(0.05 * (u - 0.5) * 3.0);
        memcpy(p + i, &v, 4);
    }
    for (size_t i = n & ~(size_t)3; i < n; i++)
        p[i] = (uint8_t)next();
}

static void *dev_buf;
static uint8_t *back;

/* Copies [off, off + len) of host to the device asynchronously, brings it back and compares. */
static void round_trip(const uint8_t *host, size_t off, size_t len, cudaStream_t s, const char *what)
{
    CHECK_CUDA(cudaMemsetAsync(dev_buf, 0x5c, len, s));
    CHECK_CUDA(cudaMemcpyAsync(dev_buf, host + off, len, cudaMemcpyHostToDevice, s));
    CHECK_CUDA(cudaMemcpyAsync(back, dev_buf, len, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    for (size_t i = 0; i < len; i++)
        CHECK(back[i] == host[off + i], "%s: byte %zu of [%zu, +%zu) is 0x%02x, expected 0x%02x", what, i, off, len,
              back[i], host[off + i]);
}

static void copy_all(void *arg)
{
    const PreloadWaiting *w = arg;
    round_trip(w->host, 0, w->n, w->s, "waiting for compression");
}

int main(int argc, char **argv)
{
    const PreloadTotalsFn totals = preload_compression_or_skip("compressed", 1);
    /* Not a multiple of the block size or the word size; argv[1] (MiB) for larger runs. */
    const size_t n = (argc > 1 ? strtoul(argv[1], NULL, 10) << 20 : 6u << 20) + 1000;
    uint8_t *host = NULL;
    CHECK_CUDA(cudaHostAlloc((void **)&host, n, cudaHostAllocDefault));
    CHECK_CUDA(cudaMalloc(&dev_buf, n));
    back = malloc(n);
    CHECK(back != NULL, "malloc");
    fill_weights(host, n);
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreate(&s));

    round_trip(host, 0, n, s, "first copy");
    PreloadWaiting waiting = {.host = host, .n = n, .s = s};
    preload_wait_compressed("compressed", "the first compression", totals, copy_all, &waiting);
    IbpshimTransferTotals before, after;
    totals(&before);

    /* Partial copies at odd offsets. */
    for (int k = 0; k < 20; k++) {
        const size_t off = next() % (n / 2);
        const size_t len = (2u << 20) + next() % (n - off - (2u << 20));
        round_trip(host, off, len, s, "partial copy");
    }
    /* A store, a memset and a read() from a file, each followed by a copy. */
    host[12345] ^= 0xff;
    round_trip(host, 0, n, s, "after a single-byte store");
    memset(host + (3u << 20), 0x11, 70000);
    round_trip(host, 0, n, s, "after memset");
    char path[] = "/tmp/ibpshim-compressed-XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    uint8_t chunk[8192];
    for (size_t i = 0; i < sizeof(chunk); i++)
        chunk[i] = (uint8_t)(i * 7);
    CHECK(write(fd, chunk, sizeof(chunk)) == (ssize_t)sizeof(chunk), "write");
    CHECK(lseek(fd, 0, SEEK_SET) == 0, "lseek");
    CHECK(read(fd, host + (1u << 20) + 3, sizeof(chunk)) == (ssize_t)sizeof(chunk), "read");
    close(fd);
    unlink(path);
    round_trip(host, 0, n, s, "after read()");
    /* A device-to-host copy into the region: the tracker cannot see it. */
    CHECK_CUDA(cudaMemsetAsync(dev_buf, 0x77, 1u << 20, s));
    CHECK_CUDA(cudaMemcpyAsync(host + (4u << 20), dev_buf, 1u << 20, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    round_trip(host, 0, n, s, "after a device-to-host copy into the region");
    /* Whole rewrite with new data of the same kind, then copies until it is compressed again. */
    fill_weights(host, n);
    round_trip(host, 0, n, s, "after a rewrite");
    preload_wait_compressed("compressed", "compression after the rewrite", totals, copy_all, &waiting);
    /* The synchronous call keeps its meaning. */
    memset(back, 0, n);
    CHECK_CUDA(cudaMemcpy(dev_buf, host, n, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(back, dev_buf, n, cudaMemcpyDeviceToHost));
    CHECK(memcmp(back, host, n) == 0, "synchronous copy differs");

    totals(&after);
    CHECK(after.compressed_in > before.compressed_in, "no compressed copies after the region was compressed");
    CHECK(after.sent < after.requested, "sent %llu bytes for %llu requested", (unsigned long long)after.sent,
          (unsigned long long)after.requested);
    printf("compressed: ok (%llu copies, %llu bytes requested, %llu sent, %llu through the compressed path as %llu)\n",
           (unsigned long long)after.copies, (unsigned long long)after.requested, (unsigned long long)after.sent,
           (unsigned long long)after.compressed_in, (unsigned long long)after.compressed_out);
    CHECK_CUDA(cudaStreamDestroy(s));
    CHECK_CUDA(cudaFree(dev_buf));
    CHECK_CUDA(cudaFreeHost(host));
    free(back);
    return 0;
}
