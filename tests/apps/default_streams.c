/* SPDX-License-Identifier: MIT
 * ibpshim: harness app: copies on the default streams (0, cudaStreamLegacy, cudaStreamPerThread) and
 * the ordering the legacy stream promises.  Built twice: as is, and with
 * CUDA_API_PER_THREAD_DEFAULT_STREAM so the _ptsz/_ptds entry points are the ones called. */
#include <pthread.h>

#include "tests/apps/harness.h"

#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
#define APP_NAME "default_streams_ptds"
#else
#define APP_NAME "default_streams"
#endif

typedef struct Job {
    size_t n;
    int iterations;
    uint64_t seed;
    int bad;
    unsigned long long bytes;
} Job;

static int check_stream(cudaStream_t s, const char *label, uint8_t *src, uint8_t *back, void *dev, size_t n,
                        uint64_t seed, unsigned long long *bytes)
{
    app_fill(src, n, seed);
    APP_CHECK(cudaMemcpyAsync(dev, src, n, cudaMemcpyHostToDevice, s));
    APP_CHECK(cudaMemcpyAsync(back, dev, n, cudaMemcpyDeviceToHost, s));
    APP_CHECK(cudaStreamSynchronize(s));
    *bytes += n;
    if (app_compare(back, src, n, label))
        return 1;
    /* The synchronous forms on the same buffers. */
    app_fill(src + 1, n - 1, seed + 7);
    APP_CHECK(cudaMemcpy((uint8_t *)dev + 1, src + 1, n - 1, cudaMemcpyHostToDevice));
    APP_CHECK(cudaMemset(dev, 0x3c, 1));
    src[0] = 0x3c;
    APP_CHECK(cudaMemcpy(back, dev, n, cudaMemcpyDeviceToHost));
    *bytes += n;
    return app_compare(back, src, n, "cudaMemcpy after cudaMemset");
}

static void *job_main(void *arg)
{
    Job *const job = arg;
    const size_t n = job->n;
    uint8_t *src = NULL, *back = NULL;
    void *dev = NULL;
    APP_CHECK(cudaHostAlloc((void **)&src, n, cudaHostAllocDefault));
    APP_CHECK(cudaMallocHost((void **)&back, n));
    APP_CHECK(cudaMalloc(&dev, n));
    for (int it = 0; it < job->iterations && !job->bad; it++) {
        job->bad |= check_stream(0, "stream 0", src, back, dev, n, job->seed + (uint64_t)it, &job->bytes);
        job->bad |= check_stream(cudaStreamLegacy, "cudaStreamLegacy", src, back, dev, n,
                                 job->seed + 100 + (uint64_t)it, &job->bytes);
        job->bad |= check_stream(cudaStreamPerThread, "cudaStreamPerThread", src, back, dev, n,
                                 job->seed + 200 + (uint64_t)it, &job->bytes);
    }
    APP_CHECK(cudaFree(dev));
    APP_CHECK(cudaFreeHost(back));
    APP_CHECK(cudaFreeHost(src));
    return NULL;
}

/* A copy on a blocking stream followed by a read-back on the legacy stream, with no explicit
 * synchronization between them: the legacy stream waits for the blocking stream. */
static int legacy_orders_after_blocking(size_t n, int iterations, unsigned long long *bytes)
{
    uint8_t *src = NULL, *back = NULL;
    void *dev = NULL;
    cudaStream_t s;
    int bad = 0;
    APP_CHECK(cudaHostAlloc((void **)&src, n, cudaHostAllocDefault));
    APP_CHECK(cudaMallocHost((void **)&back, n));
    APP_CHECK(cudaMalloc(&dev, n));
    APP_CHECK(cudaStreamCreate(&s));
    for (int it = 0; it < iterations && !bad; it++) {
        app_fill(src, n, 900 + (uint64_t)it);
        APP_CHECK(cudaMemcpyAsync(dev, src, n, cudaMemcpyHostToDevice, s));
        APP_CHECK(cudaMemcpyAsync(back, dev, n, cudaMemcpyDeviceToHost, cudaStreamLegacy));
        APP_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
        *bytes += n;
        bad |= app_compare(back, src, n, "blocking stream then cudaStreamLegacy");
    }
    APP_CHECK(cudaStreamDestroy(s));
    APP_CHECK(cudaFree(dev));
    APP_CHECK(cudaFreeHost(back));
    APP_CHECK(cudaFreeHost(src));
    return bad;
}

int main(int argc, char **argv)
{
    size_t n = 2u << 20;
    int iterations = 3;
    app_start(APP_NAME, argc, argv, &n, &iterations);
    unsigned long long bytes = 0;
    int bad = legacy_orders_after_blocking(n, iterations, &bytes);
    /* Two threads at once: each has its own per-thread default stream. */
    Job jobs[2] = {{.n = n, .iterations = iterations, .seed = 1}, {.n = n + 5, .iterations = iterations, .seed = 2}};
    pthread_t threads[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&threads[i], NULL, job_main, &jobs[i]))
            app_fail("pthread_create failed");
    for (int i = 0; i < 2; i++) {
        pthread_join(threads[i], NULL);
        bad |= jobs[i].bad;
        bytes += jobs[i].bytes;
    }
    APP_CHECK(cudaDeviceSynchronize());
    if (bad)
        return APP_EXIT_FAIL;
    printf("%s: OK %d iterations, streams 0/legacy/per-thread, %zu bytes, %llu bytes checked\n", APP_NAME,
           iterations, n, bytes);
    return APP_EXIT_OK;
}
