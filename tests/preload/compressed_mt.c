/* SPDX-License-Identifier: MIT
 * ibpshim: several threads, each with its own stream, copy slices of one compressed region while
 * another thread rewrites parts of it between copies (the application orders them with a lock, as
 * a correct program must); then the region is freed and a new one allocated in its place. Every
 * byte is checked. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "tests/preload/preload_check.h"

#define THREADS 4
#define ROUNDS 25

static uint8_t *host;
static size_t size = 8u << 20;
static pthread_rwlock_t order = PTHREAD_RWLOCK_INITIALIZER;
static volatile int failed;

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i + 4 <= n; i += 4) {
        const float v = (float)((int)((i / 4 * 2654435761u + seed) % 2001) - 1000) * 1e-4f;
        memcpy(p + i, &v, 4);
    }
}

static uint64_t next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void *copier(void *arg)
{
    uint64_t rng = 0x9e3779b97f4a7c15ull * (uintptr_t)arg + 1;
    cudaStream_t s;
    void *dev = NULL;
    uint8_t *back = malloc(size);
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess || cudaMalloc(&dev, size) != cudaSuccess ||
        !back) {
        failed = 1;
        return NULL;
    }
    for (int r = 0; r < ROUNDS && !failed; r++) {
        const size_t off = next(&rng) % (size / 2);
        const size_t len = (1u << 20) + next(&rng) % (size - off - (1u << 20));
        pthread_rwlock_rdlock(&order);
        int ok = cudaMemcpyAsync(dev, host + off, len, cudaMemcpyHostToDevice, s) == cudaSuccess &&
                 cudaMemcpyAsync(back, dev, len, cudaMemcpyDeviceToHost, s) == cudaSuccess &&
                 cudaStreamSynchronize(s) == cudaSuccess && memcmp(back, host + off, len) == 0;
        pthread_rwlock_unlock(&order);
        if (!ok) {
            fprintf(stderr, "compressed_mt: thread %lu round %d: bytes differ at [%zu, +%zu)\n",
                    (unsigned long)(uintptr_t)arg, r, off, len);
            failed = 1;
        }
    }
    cudaFree(dev);
    cudaStreamDestroy(s);
    free(back);
    return NULL;
}

static void *writer(void *arg)
{
    (void)arg;
    uint64_t rng = 12345;
    for (int r = 0; r < ROUNDS * 2 && !failed; r++) {
        usleep(3000);
        pthread_rwlock_wrlock(&order);
        const size_t page = next(&rng) % (size / 4096);
        fill(host + page * 4096, 4096, (uint32_t)next(&rng));
        pthread_rwlock_unlock(&order);
    }
    return NULL;
}

static void copy_region(void *dev)
{
    CHECK_CUDA(cudaMemcpy(dev, host, size, cudaMemcpyHostToDevice));
}

static void wait_compressed(PreloadTotalsFn totals, const char *what)
{
    void *dev = NULL;
    CHECK_CUDA(cudaMalloc(&dev, size));
    preload_wait_compressed("compressed_mt", what, totals, copy_region, dev);
    CHECK_CUDA(cudaFree(dev));
}

static void run_threads(void)
{
    pthread_t t[THREADS + 1];
    for (uintptr_t i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, copier, (void *)i) == 0, "pthread_create");
    CHECK(pthread_create(&t[THREADS], NULL, writer, NULL) == 0, "pthread_create");
    for (int i = 0; i <= THREADS; i++)
        pthread_join(t[i], NULL);
    CHECK(!failed, "a copy delivered different bytes");
}

int main(void)
{
    const PreloadTotalsFn totals = preload_compression_or_skip("compressed_mt", 1);
    CHECK_CUDA(cudaHostAlloc((void **)&host, size, cudaHostAllocDefault));
    fill(host, size, 1);
    wait_compressed(totals, "the first region's compression");
    run_threads();
    /* Free it and allocate again: whatever address comes back, nothing of the old shadow may leak
     * into the new region's copies. */
    CHECK_CUDA(cudaFreeHost(host));
    CHECK_CUDA(cudaHostAlloc((void **)&host, size, cudaHostAllocDefault));
    fill(host, size, 99);
    wait_compressed(totals, "the second region's compression");
    run_threads();
    IbpshimTransferTotals t;
    totals(&t);
    CHECK_CUDA(cudaFreeHost(host));
    printf("compressed_mt: ok (%d threads, %llu bytes through the compressed path)\n", THREADS,
           (unsigned long long)t.compressed_in);
    return 0;
}
