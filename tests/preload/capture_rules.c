/* SPDX-License-Identifier: MIT
 * ibpshim: which calls a stream capture in global mode refuses, and which of them invalidate it.
 * The shim relies on the fake CUDA refusing what the real one refuses (so that a shim call that
 * would break a PyTorch capture fails in CI too), so this program runs, without the shim, against
 * the fake (suite preload) and against the real runtime (suite gpu), and checks both against one
 * table measured on the real one.
 *
 * Each probe makes one call on a stream that is not capturing, in one of three settings:
 *   own     the calling thread captures another stream in global mode;
 *   other   another thread does, and the calling thread is in the default (global) mode;
 *   relaxed the calling thread captures in global mode but has switched itself to relaxed
 *           (cudaThreadExchangeStreamCaptureMode), as the shim does around its own unsafe calls.
 * It records whether the call failed and whether the capture survived.  With CAPTURE_RULES_PRINT
 * set it prints the table in the form `expected` below takes. */
#include <pthread.h>
#include <stdbool.h>

#include "tests/preload/preload_check.h"

enum { N = 1 << 20 };

typedef struct Fixture {
    cudaStream_t s;   /* never captured */
    cudaEvent_t done; /* recorded on s before the capture, complete */
    cudaEvent_t spare;
    cudaEvent_t t0, t1; /* timed, recorded on s before the capture, complete */
    void *dev;
    void *pinned;
    void *pageable;
} Fixture;

static Fixture fx;

static void host_fn(void *arg)
{
    (void)arg;
}

typedef cudaError_t (*ProbeFn)(void);

static cudaError_t p_event_query(void)
{
    return cudaEventQuery(fx.done);
}
static cudaError_t p_stream_query(void)
{
    return cudaStreamQuery(fx.s);
}
static cudaError_t p_stream_sync(void)
{
    return cudaStreamSynchronize(fx.s);
}
static cudaError_t p_event_sync(void)
{
    return cudaEventSynchronize(fx.done);
}
static cudaError_t p_device_sync(void)
{
    return cudaDeviceSynchronize();
}
static cudaError_t p_malloc(void)
{
    void *p = NULL;
    const cudaError_t e = cudaMalloc(&p, N);
    if (e == cudaSuccess)
        cudaFree(p);
    return e;
}
static cudaError_t p_free(void)
{
    void *p = NULL;
    enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
    CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&m));
    const cudaError_t got = cudaMalloc(&p, N);
    CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&m));
    CHECK_CUDA(got);
    const cudaError_t e = cudaFree(p);
    if (e != cudaSuccess) { /* not leaked: freed relaxed */
        m = cudaStreamCaptureModeRelaxed;
        CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&m));
        cudaFree(p);
        CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&m));
    }
    return e;
}
static cudaError_t p_malloc_host(void)
{
    void *p = NULL;
    const cudaError_t e = cudaMallocHost(&p, N);
    if (e == cudaSuccess)
        cudaFreeHost(p);
    return e;
}
static cudaError_t p_host_register(void)
{
    void *p = aligned_alloc(4096, N);
    if (!p)
        return cudaErrorMemoryAllocation;
    const cudaError_t e = cudaHostRegister(p, N, cudaHostRegisterDefault);
    if (e == cudaSuccess)
        cudaHostUnregister(p);
    free(p);
    return e;
}
static cudaError_t p_memcpy_async_pinned(void)
{
    return cudaMemcpyAsync(fx.dev, fx.pinned, N, cudaMemcpyHostToDevice, fx.s);
}
static cudaError_t p_memcpy_async_pageable(void)
{
    return cudaMemcpyAsync(fx.dev, fx.pageable, N, cudaMemcpyHostToDevice, fx.s);
}
static cudaError_t p_memcpy_async_d2h_pageable(void)
{
    return cudaMemcpyAsync(fx.pageable, fx.dev, N, cudaMemcpyDeviceToHost, fx.s);
}
static cudaError_t p_memcpy_blocking(void)
{
    return cudaMemcpy(fx.dev, fx.pinned, N, cudaMemcpyHostToDevice);
}
static cudaError_t p_memset_async(void)
{
    return cudaMemsetAsync(fx.dev, 7, N, fx.s);
}
static cudaError_t p_event_record(void)
{
    return cudaEventRecord(fx.spare, fx.s);
}
static cudaError_t p_stream_wait_event(void)
{
    return cudaStreamWaitEvent(fx.s, fx.done, 0);
}
static cudaError_t p_launch_host_func(void)
{
    return cudaLaunchHostFunc(fx.s, host_fn, NULL);
}
static cudaError_t p_stream_create(void)
{
    cudaStream_t t = NULL;
    const cudaError_t e = cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        cudaStreamDestroy(t);
    return e;
}
static cudaError_t p_event_create(void)
{
    cudaEvent_t e = NULL;
    const cudaError_t r = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (r == cudaSuccess)
        cudaEventDestroy(e);
    return r;
}

static cudaError_t p_event_elapsed(void)
{
    float ms = 0;
    return cudaEventElapsedTime(&ms, fx.t0, fx.t1);
}
static cudaError_t p_pointer_attributes(void)
{
    struct cudaPointerAttributes a;
    return cudaPointerGetAttributes(&a, fx.pinned);
}
static cudaError_t p_stream_create_priority(void)
{
    cudaStream_t t = NULL; /* as the shim makes its decode stream: the highest priority, clamped */
    const cudaError_t e = cudaStreamCreateWithPriority(&t, cudaStreamNonBlocking, -1000);
    if (e == cudaSuccess)
        cudaStreamDestroy(t);
    return e;
}

typedef struct Probe {
    const char *name;
    ProbeFn fn;
} Probe;

static const Probe probes[] = {
    {"event_query", p_event_query},
    {"stream_query", p_stream_query},
    {"stream_sync", p_stream_sync},
    {"event_sync", p_event_sync},
    {"device_sync", p_device_sync},
    {"malloc", p_malloc},
    {"free", p_free},
    {"malloc_host", p_malloc_host},
    {"host_register", p_host_register},
    {"memcpy_async_pinned", p_memcpy_async_pinned},
    {"memcpy_async_pageable", p_memcpy_async_pageable},
    {"memcpy_async_d2h_pageable", p_memcpy_async_d2h_pageable},
    {"memcpy_blocking", p_memcpy_blocking},
    {"memset_async", p_memset_async},
    {"event_record", p_event_record},
    {"stream_wait_event", p_stream_wait_event},
    {"launch_host_func", p_launch_host_func},
    {"stream_create", p_stream_create},
    {"event_create", p_event_create},
    {"event_elapsed", p_event_elapsed},
    {"pointer_attributes", p_pointer_attributes},
    {"stream_create_priority", p_stream_create_priority},
};
enum { NPROBES = sizeof probes / sizeof probes[0] };

static const char *const settings[] = {"own", "other", "relaxed"};
enum { NSETTINGS = 3 };

/* What a probe did: 'o' succeeded and the capture survived, 'r' refused and survived, 'i' refused
 * and invalidated it, 'x' succeeded yet invalidated it. */
static char outcome(cudaError_t e, bool survived)
{
    if (e == cudaSuccess)
        return survived ? 'o' : 'x';
    return survived ? 'r' : 'i';
}

/* Measured with CUDA 13 on an H200 (driver 580.159.04, 2026-12-05); one letter per setting (own,
 * other, relaxed).  Every refusal was cudaErrorStreamCaptureUnsupported. */
typedef struct Expected {
    const char *name;
    const char *got;
} Expected;

static const Expected expected[] = {
    {"event_query", "iio"},
    {"stream_query", "iio"},
    {"stream_sync", "iio"},
    {"event_sync", "iio"},
    {"device_sync", "iii"},
    {"malloc", "iio"},
    {"free", "iio"},
    {"malloc_host", "iio"},
    {"host_register", "iio"},
    {"memcpy_async_pinned", "ooo"},
    {"memcpy_async_pageable", "ooo"},
    {"memcpy_async_d2h_pageable", "ooo"},
    {"memcpy_blocking", "ooo"},
    {"memset_async", "ooo"},
    {"event_record", "ooo"},
    {"stream_wait_event", "ooo"},
    {"launch_host_func", "ooo"},
    {"stream_create", "ooo"},
    {"event_create", "ooo"},
    {"event_elapsed", "ooo"},
    {"pointer_attributes", "ooo"},
    {"stream_create_priority", "ooo"},
    {NULL, NULL},
};

/* A capture begun on its own stream by another thread, which waits until told to end it. */
typedef struct Capturer {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int phase; /* 0 begin, 1 capturing, 2 end, 3 ended */
    cudaStream_t cs;
    void *dev;
    cudaError_t end;
} Capturer;

static void capture_begin(cudaStream_t cs, void *dev)
{
    CHECK_CUDA(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    CHECK_CUDA(cudaMemsetAsync(dev, 0x3c, 4096, cs));
}

/* Ends the capture on cs; returns whether it was still valid. */
static bool capture_end(cudaStream_t cs)
{
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    CHECK_CUDA(cudaStreamIsCapturing(cs, &st));
    cudaGraph_t g = NULL;
    const cudaError_t e = cudaStreamEndCapture(cs, &g);
    if (g)
        cudaGraphDestroy(g);
    (void)cudaGetLastError();
    return st == cudaStreamCaptureStatusActive && e == cudaSuccess;
}

static void *capturer_main(void *arg)
{
    Capturer *c = arg;
    capture_begin(c->cs, c->dev);
    pthread_mutex_lock(&c->mu);
    c->phase = 1;
    pthread_cond_broadcast(&c->cv);
    while (c->phase != 2)
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    c->end = capture_end(c->cs) ? cudaSuccess : cudaErrorStreamCaptureInvalidated;
    pthread_mutex_lock(&c->mu);
    c->phase = 3;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static char run_probe(const Probe *p, int setting, cudaStream_t cs, void *cdev)
{
    cudaError_t e;
    bool survived;
    if (setting == 1) {
        Capturer c = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .cs = cs, .dev = cdev};
        pthread_t t;
        if (pthread_create(&t, NULL, capturer_main, &c) != 0) {
            fprintf(stderr, "capture_rules: pthread_create failed\n");
            exit(1);
        }
        pthread_mutex_lock(&c.mu);
        while (c.phase != 1)
            pthread_cond_wait(&c.cv, &c.mu);
        pthread_mutex_unlock(&c.mu);
        e = p->fn();
        pthread_mutex_lock(&c.mu);
        c.phase = 2;
        pthread_cond_broadcast(&c.cv);
        while (c.phase != 3)
            pthread_cond_wait(&c.cv, &c.mu);
        pthread_mutex_unlock(&c.mu);
        pthread_join(t, NULL);
        survived = c.end == cudaSuccess;
    } else {
        capture_begin(cs, cdev);
        enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
        if (setting == 2)
            CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&m));
        e = p->fn();
        if (setting == 2)
            CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&m));
        survived = capture_end(cs);
    }
    (void)cudaGetLastError();
    CHECK_CUDA(cudaDeviceSynchronize()); /* nothing of one probe runs into the next */
    if (e != cudaSuccess && getenv("CAPTURE_RULES_PRINT"))
        fprintf(stderr, "capture_rules: %s (%s): %s\n", p->name, settings[setting], cudaGetErrorName(e));
    return outcome(e, survived);
}

int main(void)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        printf("capture_rules: no CUDA device, skipped\n");
        return 77;
    }
    cudaStream_t cs;
    void *cdev = NULL;
    CHECK_CUDA(cudaStreamCreateWithFlags(&fx.s, cudaStreamNonBlocking));
    CHECK_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    CHECK_CUDA(cudaEventCreateWithFlags(&fx.done, cudaEventDisableTiming));
    CHECK_CUDA(cudaEventCreateWithFlags(&fx.spare, cudaEventDisableTiming));
    CHECK_CUDA(cudaMalloc(&fx.dev, N));
    CHECK_CUDA(cudaMalloc(&cdev, 4096));
    CHECK_CUDA(cudaMallocHost(&fx.pinned, N));
    fx.pageable = calloc(1, N);
    if (!fx.pageable) {
        fprintf(stderr, "capture_rules: out of memory\n");
        return 1;
    }
    CHECK_CUDA(cudaEventCreate(&fx.t0));
    CHECK_CUDA(cudaEventCreate(&fx.t1));
    CHECK_CUDA(cudaEventRecord(fx.t0, fx.s));
    CHECK_CUDA(cudaMemsetAsync(fx.dev, 1, N, fx.s));
    CHECK_CUDA(cudaEventRecord(fx.t1, fx.s));
    CHECK_CUDA(cudaEventRecord(fx.done, fx.s));
    CHECK_CUDA(cudaDeviceSynchronize());

    char got[NPROBES][NSETTINGS + 1];
    for (int i = 0; i < NPROBES; i++) {
        for (int k = 0; k < NSETTINGS; k++)
            got[i][k] = run_probe(&probes[i], k, cs, cdev);
        got[i][NSETTINGS] = '\0';
    }
    int mismatches = 0, checked = 0;
    for (int i = 0; i < NPROBES; i++) {
        if (getenv("CAPTURE_RULES_PRINT"))
            printf("    {\"%s\", \"%s\"},\n", probes[i].name, got[i]);
        for (const Expected *x = expected; x->name; x++) {
            if (strcmp(x->name, probes[i].name) != 0)
                continue;
            checked++;
            if (strcmp(x->got, got[i]) != 0) {
                fprintf(stderr,
                        "capture_rules: %s: got %s (own, other, relaxed), the real runtime gives %s\n",
                        probes[i].name, got[i], x->got);
                mismatches++;
            }
        }
    }
    CHECK_CUDA(cudaFreeHost(fx.pinned));
    CHECK_CUDA(cudaFree(fx.dev));
    CHECK_CUDA(cudaFree(cdev));
    free(fx.pageable);
    if (checked != NPROBES) {
        fprintf(stderr, "capture_rules: %d of %d probes have no measured answer to check against\n",
                NPROBES - checked, NPROBES);
        return 1;
    }
    if (mismatches) {
        fprintf(stderr, "capture_rules: %d of %d probes differ from the real runtime\n", mismatches, checked);
        return 1;
    }
    printf("capture_rules: %d probes as the real runtime gives them\n", checked);
    return 0;
}
