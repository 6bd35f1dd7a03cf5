/* SPDX-License-Identifier: MIT
 * ibpshim: helpers shared by the preload test programs. */
#ifndef IBP_TESTS_PRELOAD_PRELOAD_CHECK_H
#define IBP_TESTS_PRELOAD_PRELOAD_CHECK_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "ibpshim/ibpshim.h"

#define CHECK_CUDA(call)                                                                           \
    do {                                                                                           \
        const cudaError_t check_err_ = (call);                                                     \
        if (check_err_ != cudaSuccess) {                                                           \
            fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #call,                        \
                    cudaGetErrorName(check_err_));                                                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

typedef size_t (*PreloadCountsFn)(IbpshimCallCount *out, size_t n);

/* The shim's counters, or exit(1) when the program does not run under it. */
static inline void preload_counts(IbpshimCallCount counts[IBPSHIM_CALL_KIND_COUNT])
{
    const PreloadCountsFn fn = (PreloadCountsFn)dlsym(RTLD_DEFAULT, "ibpshim_call_counts");
    CHECK(fn != NULL, "libibpshim.so is not preloaded (LD_PRELOAD)");
    CHECK(fn(counts, IBPSHIM_CALL_KIND_COUNT) == IBPSHIM_CALL_KIND_COUNT, "short counter snapshot");
}

typedef int (*PreloadTotalsFn)(IbpshimTransferTotals *out);
typedef int (*PreloadBuiltFn)(void);

/* For programs that need the compressed path: exits 77 (skipped) with a message when there are
 * fewer than min_devices devices or the shim was built without kernels, exits 1 when the shim is
 * not preloaded, and returns ibpshim_transfer_totals. */
static inline PreloadTotalsFn preload_compression_or_skip(const char *name, int min_devices)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < min_devices) {
        printf("%s: fewer than %d CUDA device(s), skipped\n", name, min_devices);
        exit(77);
    }
    const PreloadTotalsFn totals = (PreloadTotalsFn)dlsym(RTLD_DEFAULT, "ibpshim_transfer_totals");
    CHECK(totals != NULL, "libibpshim.so is not preloaded");
    const PreloadBuiltFn built = (PreloadBuiltFn)dlsym(RTLD_DEFAULT, "ibpshim_compression_built");
    if (!built || !built()) {
        printf("%s: the shim was built without decode kernels, skipped\n", name);
        exit(77);
    }
    return totals;
}

/* Float weights of a narrow range, the kind of data the codec compresses. */
static inline void preload_fill_weights(uint8_t *host, size_t n)
{
    for (size_t i = 0; i + 4 <= n; i += 4) {
        const float v = (float)((i * 2654435761u) % 1000u) * 1e-4f;
        memcpy(host + i, &v, 4);
    }
}

/* One copy of the region the program waits on (its bytes checked by the callee). */
typedef void (*PreloadCopyFn)(void *arg);

/* What a PreloadCopyFn of the harnesses copies while they wait: a pinned region on a stream. */
typedef struct PreloadWaiting {
    const uint8_t *host;
    size_t n;
    cudaStream_t s;
    /* The calling thread captures a stream in global mode, so waiting for s is refused (and would
     * invalidate the capture) unless the wait switches the thread to relaxed mode. */
    int capturing;
} PreloadWaiting;

/* One round trip of w's region through a device buffer: poisons dev, copies the region in, copies
 * it back into back and checks every byte (dev and back hold w->n bytes). */
static inline void preload_round_trip(const PreloadWaiting *w, void *dev, uint8_t *back)
{
    CHECK_CUDA(cudaMemsetAsync(dev, 0x5c, w->n, w->s));
    CHECK_CUDA(cudaMemcpyAsync(dev, w->host, w->n, cudaMemcpyHostToDevice, w->s));
    CHECK_CUDA(cudaMemcpyAsync(back, dev, w->n, cudaMemcpyDeviceToHost, w->s));
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    if (w->capturing)
        CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
    CHECK_CUDA(cudaStreamSynchronize(w->s));
    if (w->capturing)
        CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
    CHECK(memcmp(back, w->host, w->n) == 0, "a copy of the compressed region differs");
}

/* A region's round trip as a PreloadCopyFn (preload_trip): w's region through dev into back. */
typedef struct PreloadTrip {
    PreloadWaiting w;
    void *dev;
    uint8_t *back;
} PreloadTrip;

static inline void preload_trip(void *arg)
{
    const PreloadTrip *t = arg;
    preload_round_trip(&t->w, t->dev, t->back);
}

/* Around t's pinned region host of n bytes: a stream, a device buffer and a host buffer for the
 * way back. */
static inline void preload_trip_buffers(PreloadTrip *t, uint8_t *host, size_t n)
{
    *t = (PreloadTrip){.w = {.host = host, .n = n}};
    CHECK_CUDA(cudaStreamCreate(&t->w.s));
    CHECK_CUDA(cudaMalloc(&t->dev, n));
    t->back = malloc(n);
    CHECK(t->back != NULL, "malloc");
}

/* Frees what preload_trip_buffers() made. */
static inline void preload_trip_buffers_free(PreloadTrip *t)
{
    CHECK_CUDA(cudaFree(t->dev));
    CHECK_CUDA(cudaStreamDestroy(t->w.s));
    free(t->back);
}

/* Sets t up for preload_trip: a pinned region of n bytes of float weights (cudaHostAlloc), a
 * stream, a device buffer and a host buffer for the way back; returns the region. */
static inline uint8_t *preload_trip_open(PreloadTrip *t, size_t n)
{
    uint8_t *host = NULL;
    CHECK_CUDA(cudaHostAlloc((void **)&host, n, cudaHostAllocDefault));
    preload_fill_weights(host, n);
    preload_trip_buffers(t, host, n);
    return host;
}

/* Sets t up for preload_trip around memory the application already has: host registered
 * (cudaHostRegister), a stream, a device buffer and a host buffer for the way back. */
static inline void preload_trip_register(PreloadTrip *t, uint8_t *host, size_t n)
{
    CHECK_CUDA(cudaHostRegister(host, n, cudaHostRegisterDefault));
    preload_trip_buffers(t, host, n);
}

/* Frees what preload_trip_open() made. */
static inline void preload_trip_close(PreloadTrip *t)
{
    preload_trip_buffers_free(t);
    CHECK_CUDA(cudaFreeHost((void *)t->w.host));
}

/* k round trips of w's region through dev into back (each checked byte for byte); returns the
 * original bytes they sent through the compressed path. */
static inline uint64_t preload_round_trips(PreloadTotalsFn totals, const PreloadWaiting *w, void *dev,
                                           uint8_t *back, int k)
{
    IbpshimTransferTotals a, b;
    CHECK(totals(&a) == 0, "totals");
    for (int i = 0; i < k; i++)
        preload_round_trip(w, dev, back);
    CHECK(totals(&b) == 0, "totals");
    return b.compressed_in - a.compressed_in;
}

/* How long preload_wait_compressed() waits: PRELOAD_WAIT_SECONDS, default 100 s.  Compressing a
 * 40 MiB region took 6 s at most under AddressSanitizer with both cores of the CI machine busy
 * with other work; the default leaves room for two waits within the 300 s test timeout. */
static inline double preload_wait_seconds(void)
{
    const char *env = getenv("PRELOAD_WAIT_SECONDS");
    const double s = env ? strtod(env, NULL) : 100.0;
    return s > 0 ? s : 100.0;
}

static inline double preload_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Waits for the background compressor: makes one copy (copy(arg)) every 20 ms until one sent at
 * least min_bytes of original bytes through the compressed path, measured on wall time, not on a
 * number of copies, so a slow machine only makes it slower.  Exits 1 with a message naming `what`
 * when preload_wait_seconds() pass first (the exit report that follows says why the copies went
 * raw).  Returns the copies made. */
static inline unsigned preload_wait_compressed_bytes(const char *prog, const char *what,
                                                     PreloadTotalsFn totals, PreloadCopyFn copy, void *arg,
                                                     uint64_t min_bytes)
{
    const double start = preload_now(), limit = preload_wait_seconds();
    IbpshimTransferTotals a, b;
    for (unsigned copies = 1;; copies++) {
        CHECK(totals(&a) == 0, "totals");
        copy(arg);
        CHECK(totals(&b) == 0, "totals");
        if (b.compressed_in > a.compressed_in && b.compressed_in - a.compressed_in >= min_bytes)
            return copies;
        const double waited = preload_now() - start;
        if (waited >= limit) {
            fprintf(stderr,
                    "%s: %s: no copy sent %llu bytes through the compressed path in %.1f s (%u copies); the "
                    "report below says why they went raw\n",
                    prog, what, (unsigned long long)min_bytes, waited, copies);
            exit(1);
        }
        usleep(20000);
    }
}

/* The same until any bytes of a copy went compressed. */
static inline unsigned preload_wait_compressed(const char *prog, const char *what, PreloadTotalsFn totals,
                                               PreloadCopyFn copy, void *arg)
{
    return preload_wait_compressed_bytes(prog, what, totals, copy, arg, 1);
}

/* Frees what preload_trip_register() made; the memory stays the caller's. */
static inline void preload_trip_unregister(PreloadTrip *t)
{
    preload_trip_buffers_free(t);
    CHECK_CUDA(cudaHostUnregister((void *)t->w.host));
}

/* After the context that held a compressed region went (a reset, a destroyed context): other
 * weights (the old ones doubled) in the same memory, registered again, then at least 20 round
 * trips over at least a second (more copies and more time than the compressor took to take the
 * region up before), each checked byte for byte; none may go compressed.  Returns the trips. */
static inline int preload_trips_after_loss(PreloadTotalsFn totals, const IbpshimTransferTotals *before,
                                           PreloadTrip *t, uint8_t *host, size_t n, const char *what)
{
    for (size_t i = 0; i + 4 <= n; i += 4) {
        float v;
        memcpy(&v, host + i, 4);
        v *= 2.0f;
        memcpy(host + i, &v, 4);
    }
    preload_trip_register(t, host, n);
    const double until = preload_now() + 1.0;
    int copies = 0;
    while (copies < 20 || preload_now() < until) {
        preload_trip(t);
        copies++;
        usleep(10000);
    }
    IbpshimTransferTotals after;
    CHECK(totals(&after) == 0, "totals");
    CHECK(after.compressed_in == before->compressed_in, "%llu bytes went compressed after %s",
          (unsigned long long)(after.compressed_in - before->compressed_in), what);
    return copies;
}

#endif /* IBP_TESTS_PRELOAD_PRELOAD_CHECK_H */
