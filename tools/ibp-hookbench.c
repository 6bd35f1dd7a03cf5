/* SPDX-License-Identifier: MIT
 * ibpshim: the time a hooked call adds over calling libcudart or libcuda directly, measured in one
 * process by interleaving both call paths (run it under LD_PRELOAD=libibpshim.so): a small
 * host-to-device cudaMemcpyAsync (the router's fast reject), a small device-to-host one (its check
 * for tracked destinations), a cudaMemsetAsync of device memory (a hook that only notes device
 * writes), the driver's cuMemcpyDtoHAsync and cuMemsetD8Async (the driver hooks, the same checks).
 * And what the shim pays to query its own events beside a capture: cuEventQuery between two
 * cuThreadExchangeStreamCaptureMode calls (relaxed, then back) against cuEventQuery alone.  And
 * kernel launches, cudaLaunchKernel and cuLaunchKernel of a three-argument kernel writing device
 * memory (the hooks read the arguments of every launch while a region is registered: --region
 * registers one through the hooked cudaHostAlloc first).  And a plain copy of pinned bytes on a
 * stream whose copies of a region went compressed (h2d-after-region): what [transfer] raw_in_order
 * costs the host to send it on the shim's copy stream, joined to the stream both ways. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "ibpshim/ibpshim.h"
#include "tools/fill_kernel.h"

typedef cudaError_t (*MemcpyAsyncFn)(void *, const void *, size_t, enum cudaMemcpyKind, cudaStream_t);
typedef cudaError_t (*MemsetAsyncFn)(void *, int, size_t, cudaStream_t);
typedef cudaError_t (*MallocHostFn)(void **, size_t);
typedef cudaError_t (*MallocFn)(void **, size_t);
typedef cudaError_t (*StreamCreateFn)(cudaStream_t *);
typedef cudaError_t (*StreamSyncFn)(cudaStream_t);
typedef cudaError_t (*DeviceCountFn)(int *);
typedef const char *(*VersionFn)(void);
typedef CUresult (*DrvDtoHAsyncFn)(void *, CUdeviceptr, size_t, CUstream);
typedef CUresult (*DrvMemsetD8AsyncFn)(CUdeviceptr, unsigned char, size_t, CUstream);
typedef CUresult (*DrvEventCreateFn)(CUevent *, unsigned);
typedef CUresult (*DrvEventRecordFn)(CUevent, CUstream);
typedef CUresult (*DrvEventQueryFn)(CUevent);
typedef CUresult (*DrvExchangeModeFn)(CUstreamCaptureMode *);
typedef cudaError_t (*HostAllocFn)(void **, size_t, unsigned int);
typedef cudaError_t (*LaunchFn)(const void *, dim3, dim3, void **, size_t, cudaStream_t);
typedef cudaError_t (*LibraryLoadFn)(cudaLibrary_t *, const void *, enum cudaJitOption *, void **,
                                     unsigned int, enum cudaLibraryOption *, void **, unsigned int);
typedef cudaError_t (*LibraryKernelFn)(cudaKernel_t *, cudaLibrary_t, const char *);
typedef CUresult (*DrvLaunchFn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                unsigned, CUstream, void **, void **);
typedef CUresult (*DrvModuleLoadFn)(CUmodule *, const void *);
typedef CUresult (*DrvModuleFunctionFn)(CUfunction *, CUmodule, const char *);

enum {
    CALL_H2D,
    CALL_D2H,
    CALL_MEMSET,
    CALL_LAUNCH,
    CALL_H2D_REGION,
    CALL_H2D_AFTER_REGION,
    CALL_DRV_D2H,
    CALL_DRV_MEMSET,
    CALL_DRV_LAUNCH,
    CALL_RELAXED_QUERY,
    NCALLS
};

static const struct {
    const char *name, *symbol, *what, *paths[2];
} kCalls[NCALLS] = {
    {"h2d", "cudaMemcpyAsync", "pinned bytes to the device (cudaMemcpyAsync)", {"hooked", "direct"}},
    {"d2h", "cudaMemcpyAsync", "device bytes to pinned memory (cudaMemcpyAsync)", {"hooked", "direct"}},
    {"memset", "cudaMemsetAsync", "device bytes set (cudaMemsetAsync)", {"hooked", "direct"}},
    {"launch",
     "cudaLaunchKernel",
     "launches of a kernel writing B device bytes (cudaLaunchKernel)",
     {"hooked", "direct"}},
    {"h2d-region",
     "cudaMemcpyAsync",
     "copies of a whole compressed region to the device (cudaMemcpyAsync)",
     {"hooked", "direct"}},
    {"h2d-after-region",
     "cudaMemcpyAsync",
     "pinned bytes to the device on a stream whose region copies went compressed (cudaMemcpyAsync)",
     {"hooked", "direct"}},
    {"drv-d2h",
     "cuMemcpyDtoHAsync_v2",
     "device bytes to pinned memory (cuMemcpyDtoHAsync)",
     {"hooked", "direct"}},
    {"drv-memset", "cuMemsetD8Async", "device bytes set (cuMemsetD8Async)", {"hooked", "direct"}},
    {"drv-launch",
     "cuLaunchKernel",
     "launches of a kernel writing B device bytes (cuLaunchKernel)",
     {"hooked", "direct"}},
    {"relaxed-query", "cuEventQuery", "queries of a completed event (cuEventQuery)", {"relaxed", "plain"}},
};

/* The query of a completed event as the shim makes its own: between a switch of the thread's
 * capture mode to relaxed and the switch back. */
typedef struct {
    DrvEventQueryFn query;
    DrvExchangeModeFn exchange;
    CUevent event;
} RelaxedQuery;

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double quantile(double *sorted, size_t n, double q)
{
    return sorted[(size_t)(q * (double)(n - 1))];
}

static void *need(void *lib, const char *name)
{
    void *fn = dlsym(lib, name);
    if (!fn) {
        fprintf(stderr, "ibp-hookbench: %s not found: %s\n", name, dlerror());
        exit(2);
    }
    return fn;
}

/* Float weights of a narrow range, which the codec compresses (as the preload tests' regions). */
static void fill_weights(void *p, size_t n)
{
    float *const f = p;
    for (size_t i = 0; i < n / sizeof(float); i++)
        f[i] = 0.02f * (float)((i * 2654435761u) % 1000u) / 1000.0f - 0.01f;
}

/* Copies of the region through the hooked call until the shim sends one compressed (up to 30 s);
 * 0 when it does, 1 when it never did or no shim is loaded. */
static int wait_compressed(void *fn, void *host, void *dev, size_t bytes, cudaStream_t stream,
                           StreamSyncFn sync)
{
    typedef int (*TotalsFn)(IbpshimTransferTotals *);
    const TotalsFn totals = (TotalsFn)dlsym(RTLD_DEFAULT, "ibpshim_transfer_totals");
    IbpshimTransferTotals a, b;
    for (int i = 0; totals && i < 1500; i++) {
        if (totals(&a))
            return 1;
        ((MemcpyAsyncFn)fn)(dev, host, bytes, cudaMemcpyHostToDevice, stream);
        sync(stream);
        if (totals(&b))
            return 1;
        if (b.compressed_in > a.compressed_in)
            return 0;
        const struct timespec pause = {0, 20 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    return 1;
}

/* One call of the timed kind through fn (for relaxed-query: path 0 relaxed, 1 plain; for the
 * launches, kernel is the fill kernel). */
static int one_call(int kind, void *fn, int path, const RelaxedQuery *rq, void *kernel, void *host, void *dev,
                    size_t bytes, cudaStream_t stream)
{
    uint32_t value = 0x42424242u;
    uint64_t words = bytes / 4;
    void *params[] = {&dev, &value, &words};
    switch (kind) {
    case CALL_H2D_REGION:
    case CALL_H2D_AFTER_REGION:
        return ((MemcpyAsyncFn)fn)(dev, host, bytes, cudaMemcpyHostToDevice, stream) != cudaSuccess;
    case CALL_LAUNCH:
        return ((LaunchFn)fn)(kernel, (dim3){1, 1, 1}, (dim3){128, 1, 1}, params, 0, stream) != cudaSuccess;
    case CALL_DRV_LAUNCH:
        return ((DrvLaunchFn)fn)((CUfunction)kernel, 1, 1, 1, 128, 1, 1, 0, (CUstream)stream, params, NULL) !=
               CUDA_SUCCESS;
    case CALL_H2D:
        return ((MemcpyAsyncFn)fn)(dev, host, bytes, cudaMemcpyHostToDevice, stream) != cudaSuccess;
    case CALL_D2H:
        return ((MemcpyAsyncFn)fn)(host, dev, bytes, cudaMemcpyDeviceToHost, stream) != cudaSuccess;
    case CALL_MEMSET:
        return ((MemsetAsyncFn)fn)(dev, 0, bytes, stream) != cudaSuccess;
    case CALL_DRV_D2H:
        return ((DrvDtoHAsyncFn)fn)(host, (CUdeviceptr)(uintptr_t)dev, bytes, (CUstream)stream) !=
               CUDA_SUCCESS;
    case CALL_DRV_MEMSET:
        return ((DrvMemsetD8AsyncFn)fn)((CUdeviceptr)(uintptr_t)dev, 0, bytes, (CUstream)stream) !=
               CUDA_SUCCESS;
    default: {
        if (path == 1)
            return rq->query(rq->event) != CUDA_SUCCESS;
        CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        if (rq->exchange(&mode) != CUDA_SUCCESS)
            return 1;
        const CUresult r = rq->query(rq->event);
        return (rq->exchange(&mode) != CUDA_SUCCESS) | (r != CUDA_SUCCESS);
    }
    }
}

int main(int argc, char **argv)
{
    long calls = 100000, batch = 1000;
    size_t bytes = 64, region = 0;
    int json = 0;
    const char *cudart = "libcudart.so.13";
    const char *call = "h2d";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--calls") && i + 1 < argc)
            calls = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--bytes") && i + 1 < argc)
            bytes = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--cudart") && i + 1 < argc)
            cudart = argv[++i];
        else if (!strcmp(argv[i], "--call") && i + 1 < argc)
            call = argv[++i];
        else if (!strcmp(argv[i], "--region") && i + 1 < argc)
            region = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--json"))
            json = 1;
        else {
            fprintf(
                stderr,
                "usage: %s [--calls N] [--bytes B] [--call KIND] [--region R] [--cudart SONAME] [--json]\n"
                "Times N small calls through the hooked symbol and directly, interleaved in\n"
                "batches; prints medians.  KIND: h2d (default) and d2h: cudaMemcpyAsync between B\n"
                "pinned and B device bytes; memset: cudaMemsetAsync of B device bytes; drv-d2h and\n"
                "drv-memset: cuMemcpyDtoHAsync and cuMemsetD8Async, the same through the driver\n"
                "(direct: libcuda's own symbol); relaxed-query: cuEventQuery of a completed event\n"
                "between two cuThreadExchangeStreamCaptureMode calls, as the shim queries its own\n"
                "events, against cuEventQuery alone; launch and drv-launch: cudaLaunchKernel and\n"
                "cuLaunchKernel of a kernel writing B device bytes.  --region R first pins R bytes\n"
                "through the hooked cudaHostAlloc (a registered region: the launch hooks then read\n"
                "every launch's arguments).  h2d-after-region: h2d of B bytes (256 KiB by default)\n"
                "on a stream whose copies of a region of R bytes (default 32 MiB) went compressed,\n"
                "each call on an idle stream.\n",
                argv[0]);
            return 2;
        }
    }
    int kind = -1;
    for (int k = 0; k < NCALLS; k++)
        if (!strcmp(call, kCalls[k].name))
            kind = k;
    if (kind < 0) {
        fprintf(stderr,
                "ibp-hookbench: --call takes h2d, d2h, memset, launch, h2d-region, drv-d2h, drv-memset, "
                "drv-launch, relaxed-query or h2d-after-region, not %s\n",
                call);
        return 2;
    }
    if (calls < batch)
        batch = calls > 0 ? calls : 1;
    void *lib = dlopen(cudart, RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        fprintf(stderr, "ibp-hookbench: cannot load %s: %s\n", cudart, dlerror());
        return 2;
    }
    const int driver = kind >= CALL_DRV_D2H;
    /* Global, so that without the shim the default lookup finds libcuda's own symbols (noise). */
    void *cuda = driver ? dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL) : NULL;
    if (driver && !cuda) {
        printf("ibp-hookbench: cannot load libcuda.so.1 (%s), skipped\n", dlerror());
        return 77;
    }
    const char *const symbol = kCalls[kind].symbol;
    /* hooked, direct: a handle's lookup never sees the preloaded shim */
    void *const fns[2] = {need(RTLD_DEFAULT, symbol), need(driver ? cuda : lib, symbol)};
    const VersionFn shim_version = (VersionFn)dlsym(RTLD_DEFAULT, "ibpshim_version");
    int ndev = 0;
    if (((DeviceCountFn)need(lib, "cudaGetDeviceCount"))(&ndev) != cudaSuccess || ndev == 0) {
        printf("ibp-hookbench: no CUDA device, skipped\n");
        return 77;
    }
    const int whole_region = kind == CALL_H2D_REGION, after_region = kind == CALL_H2D_AFTER_REGION;
    if (whole_region || after_region) {
        region = region ? region : (size_t)32 << 20;
        batch = batch < 50 ? batch : 50;
    }
    if (whole_region)
        bytes = region;
    if (after_region && bytes == 64)
        bytes = (size_t)256 << 10;
    void *host = NULL, *dev = NULL;
    cudaStream_t stream;
    if (((MallocHostFn)need(lib, "cudaMallocHost"))(&host, bytes) != cudaSuccess ||
        ((MallocFn)need(lib, "cudaMalloc"))(&dev, bytes) != cudaSuccess ||
        ((StreamCreateFn)need(lib, "cudaStreamCreate"))(&stream) != cudaSuccess) {
        fprintf(stderr, "ibp-hookbench: CUDA set-up failed\n");
        return 1;
    }
    void *region_host = NULL;
    if (region &&
        ((HostAllocFn)need(RTLD_DEFAULT, "cudaHostAlloc"))(&region_host, region, 0) != cudaSuccess) {
        fprintf(stderr, "ibp-hookbench: cudaHostAlloc of the region failed\n");
        return 1;
    }
    if (region_host)
        fill_weights(region_host, region);
    void *kernel = NULL;
    if (kind == CALL_LAUNCH) {
        cudaLibrary_t l = NULL;
        if (((LibraryLoadFn)need(lib, "cudaLibraryLoadData"))(&l, ibp_fill_ptx, NULL, NULL, 0, NULL, NULL,
                                                              0) != cudaSuccess ||
            ((LibraryKernelFn)need(lib, "cudaLibraryGetKernel"))((cudaKernel_t *)&kernel, l,
                                                                 "ibp_test_fill") != cudaSuccess) {
            fprintf(stderr, "ibp-hookbench: loading the kernel failed\n");
            return 1;
        }
    } else if (kind == CALL_DRV_LAUNCH) {
        CUmodule m = NULL;
        if (((DrvModuleLoadFn)need(cuda, "cuModuleLoadData"))(&m, ibp_fill_ptx) != CUDA_SUCCESS ||
            ((DrvModuleFunctionFn)need(cuda, "cuModuleGetFunction"))((CUfunction *)&kernel, m,
                                                                     "ibp_test_fill") != CUDA_SUCCESS) {
            fprintf(stderr, "ibp-hookbench: loading the kernel failed\n");
            return 1;
        }
    }
    RelaxedQuery rq = {0};
    if (kind == CALL_RELAXED_QUERY) {
        rq.query = (DrvEventQueryFn)fns[1];
        rq.exchange = (DrvExchangeModeFn)need(cuda, "cuThreadExchangeStreamCaptureMode");
        if (((DrvEventCreateFn)need(cuda, "cuEventCreate"))(&rq.event, CU_EVENT_DISABLE_TIMING) !=
                CUDA_SUCCESS ||
            ((DrvEventRecordFn)need(cuda, "cuEventRecord"))(rq.event, (CUstream)stream) != CUDA_SUCCESS) {
            fprintf(stderr, "ibp-hookbench: event set-up failed\n");
            return 1;
        }
    }
    const StreamSyncFn sync = (StreamSyncFn)need(lib, "cudaStreamSynchronize");
    memset(host, 0x42, bytes);
    double *t_hooked = malloc(sizeof(double) * (size_t)calls);
    double *t_direct = malloc(sizeof(double) * (size_t)calls);
    if (!t_hooked || !t_direct)
        return 1;
    if (whole_region || after_region) {
        /* Copies of the region until the shim sends one compressed; a whole-region call then
         * copies the region itself. */
        void *region_dev = NULL;
        if (((MallocFn)need(lib, "cudaMalloc"))(&region_dev, region) != cudaSuccess) {
            fprintf(stderr, "ibp-hookbench: cudaMalloc of %zu bytes failed\n", region);
            return 1;
        }
        if (wait_compressed(fns[0], region_host, region_dev, region, stream, sync) && shim_version)
            fprintf(stderr, "ibp-hookbench: the shim sent no copy of the region compressed in 30 s\n");
        if (whole_region) {
            host = region_host;
            dev = region_dev;
        }
    }
    /* Warm-up: first calls pay for lazy module and context set-up. */
    for (int i = 0; i < (whole_region || after_region ? 20 : 1000); i++)
        for (int path = 0; path < 2; path++)
            one_call(kind, fns[path], path, &rq, kernel, host, dev, bytes, stream);
    sync(stream);
    long done = 0;
    while (done < calls) {
        const long n = calls - done < batch ? calls - done : batch;
        for (int path = 0; path < 2; path++) {
            double *out = (path ? t_direct : t_hooked) + done;
            for (long i = 0; i < n; i++) {
                const double t0 = now_ns();
                const int failed = one_call(kind, fns[path], path, &rq, kernel, host, dev, bytes, stream);
                out[i] = now_ns() - t0;
                if (whole_region || after_region)
                    sync(stream); /* each copy starts on an idle stream */
                if (failed) {
                    fprintf(stderr, "ibp-hookbench: %s failed\n", symbol);
                    return 1;
                }
            }
            sync(stream);
        }
        done += n;
    }
    qsort(t_hooked, (size_t)calls, sizeof(double), cmp_double);
    qsort(t_direct, (size_t)calls, sizeof(double), cmp_double);
    const double mh = quantile(t_hooked, (size_t)calls, 0.5), md = quantile(t_direct, (size_t)calls, 0.5);
    const char *mode = shim_version ? "preloaded"
                       : driver     ? "not preloaded (both paths are libcuda)"
                                    : "not preloaded (both paths are libcudart)";
    if (json) {
        printf("{\"call\": \"%s\", \"calls\": %ld, \"bytes\": %zu, \"region\": %zu, \"shim\": %s, "
               "\"median_hooked_ns\": %.1f, "
               "\"median_direct_ns\": %.1f, \"added_ns\": %.1f, \"p10_hooked_ns\": %.1f, \"p90_hooked_ns\": "
               "%.1f, "
               "\"p10_direct_ns\": %.1f, \"p90_direct_ns\": %.1f}\n",
               call, calls, bytes, region, shim_version ? "true" : "false", mh, md, mh - md,
               quantile(t_hooked, (size_t)calls, 0.1), quantile(t_hooked, (size_t)calls, 0.9),
               quantile(t_direct, (size_t)calls, 0.1), quantile(t_direct, (size_t)calls, 0.9));
    } else {
        const char *const *paths = kCalls[kind].paths;
        printf("ibp-hookbench: %ld x %zu %s, shim %s\n", calls, bytes, kCalls[kind].what, mode);
        printf("  path      median     p10      p90   (ns per call)\n");
        printf("  %-7s %8.1f %8.1f %8.1f\n", paths[0], mh, quantile(t_hooked, (size_t)calls, 0.1),
               quantile(t_hooked, (size_t)calls, 0.9));
        printf("  %-7s %8.1f %8.1f %8.1f\n", paths[1], md, quantile(t_direct, (size_t)calls, 0.1),
               quantile(t_direct, (size_t)calls, 0.9));
        if (kind == CALL_RELAXED_QUERY)
            printf("  added by the mode switches: %.1f ns (median difference)\n", mh - md);
        else
            printf("  added by the hook: %.1f ns (median difference)\n", mh - md);
    }
    free(t_hooked);
    free(t_direct);
    return 0;
}
