/* SPDX-License-Identifier: MIT
 * ibpshim: harness app: several threads, each with its own streams, copy pinned data through device
 * buffers; a cross-stream event orders one copy after another. */
#include <pthread.h>

#include "tests/apps/harness.h"

#define THREADS 4

typedef struct Worker {
    int index;
    size_t n;
    int iterations;
    int bad;
    unsigned long long bytes;
} Worker;

static void *worker_main(void *arg)
{
    Worker *const w = arg;
    const size_t n = w->n;
    uint8_t *src = NULL, *out = NULL;
    void *dev_a = NULL, *dev_b = NULL;
    cudaStream_t up, down;
    cudaEvent_t uploaded;
    APP_CHECK(cudaHostAlloc((void **)&src, n, cudaHostAllocDefault));
    APP_CHECK(cudaMallocHost((void **)&out, n));
    APP_CHECK(cudaMalloc(&dev_a, n));
    APP_CHECK(cudaMalloc(&dev_b, n));
    APP_CHECK(cudaStreamCreateWithFlags(&up, w->index % 2 ? cudaStreamNonBlocking : cudaStreamDefault));
    APP_CHECK(cudaStreamCreateWithFlags(&down, cudaStreamNonBlocking));
    APP_CHECK(cudaEventCreateWithFlags(&uploaded, cudaEventDisableTiming));
    for (int it = 0; it < w->iterations && !w->bad; it++) {
        /* Every other iteration sends the previous contents again. */
        if (it % 2 == 0)
            app_fill(src, n, (uint64_t)(w->index * 1000 + it));
        APP_CHECK(cudaMemcpyAsync(dev_a, src, n, cudaMemcpyHostToDevice, up));
        APP_CHECK(cudaMemcpyAsync(dev_b, dev_a, n, cudaMemcpyDeviceToDevice, up));
        APP_CHECK(cudaEventRecord(uploaded, up));
        APP_CHECK(cudaStreamWaitEvent(down, uploaded, 0));
        APP_CHECK(cudaMemcpyAsync(out, dev_b, n, cudaMemcpyDeviceToHost, down));
        APP_CHECK(cudaStreamSynchronize(down));
        char what[96];
        snprintf(what, sizeof(what), "thread %d iteration %d", w->index, it);
        w->bad |= app_compare(out, src, n, what);
        w->bytes += n;
        /* Partial copy from an odd offset on the upload stream, checked through the same path. */
        const size_t off = 1 + (size_t)it * 4099 % (n / 2), len = n / 2 - 1;
        APP_CHECK(cudaMemcpyAsync(dev_a, src + off, len, cudaMemcpyHostToDevice, up));
        APP_CHECK(cudaMemcpyAsync(out, dev_a, len, cudaMemcpyDeviceToHost, up));
        APP_CHECK(cudaStreamSynchronize(up));
        snprintf(what, sizeof(what), "thread %d iteration %d partial", w->index, it);
        w->bad |= app_compare(out, src + off, len, what);
        w->bytes += len;
    }
    APP_CHECK(cudaEventDestroy(uploaded));
    APP_CHECK(cudaStreamDestroy(up));
    APP_CHECK(cudaStreamDestroy(down));
    APP_CHECK(cudaFree(dev_a));
    APP_CHECK(cudaFree(dev_b));
    APP_CHECK(cudaFreeHost(out));
    APP_CHECK(cudaFreeHost(src));
    return NULL;
}

int main(int argc, char **argv)
{
    size_t n = 2u << 20;
    int iterations = 4;
    app_start("streams", argc, argv, &n, &iterations);
    Worker workers[THREADS];
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) {
        workers[i] = (Worker){.index = i, .n = n + (size_t)i * 3, .iterations = iterations};
        if (pthread_create(&threads[i], NULL, worker_main, &workers[i]))
            app_fail("pthread_create failed");
    }
    int bad = 0;
    unsigned long long bytes = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        bad |= workers[i].bad;
        bytes += workers[i].bytes;
    }
    APP_CHECK(cudaDeviceSynchronize());
    if (bad)
        return APP_EXIT_FAIL;
    printf("streams: OK %d threads x %d iterations, %zu bytes each, %llu bytes checked\n", THREADS, iterations, n,
           bytes);
    return APP_EXIT_OK;
}
