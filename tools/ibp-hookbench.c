/* SPDX-License-Identifier: MIT
 * ibpshim: the time a hooked call adds over calling libcudart directly, measured in one process by
 * interleaving both call paths (run it under LD_PRELOAD=libibpshim.so): a small host-to-device
 * cudaMemcpyAsync (the router's fast reject), a small device-to-host one (its check for tracked
 * destinations), or a cudaMemsetAsync of device memory (a hook that only notes device writes). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

typedef cudaError_t (*MemcpyAsyncFn)(void *, const void *, size_t, enum cudaMemcpyKind, cudaStream_t);
typedef cudaError_t (*MemsetAsyncFn)(void *, int, size_t, cudaStream_t);
typedef cudaError_t (*MallocHostFn)(void **, size_t);
typedef cudaError_t (*MallocFn)(void **, size_t);
typedef cudaError_t (*StreamCreateFn)(cudaStream_t *);
typedef cudaError_t (*StreamSyncFn)(cudaStream_t);
typedef cudaError_t (*DeviceCountFn)(int *);
typedef const char *(*VersionFn)(void);

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

/* One call of the timed kind through fn. */
static cudaError_t one_call(int kind, void *fn, void *host, void *dev, size_t bytes, cudaStream_t stream)
{
    switch (kind) {
    case 0:
        return ((MemcpyAsyncFn)fn)(dev, host, bytes, cudaMemcpyHostToDevice, stream);
    case 1:
        return ((MemcpyAsyncFn)fn)(host, dev, bytes, cudaMemcpyDeviceToHost, stream);
    default:
        return ((MemsetAsyncFn)fn)(dev, 0, bytes, stream);
    }
}

int main(int argc, char **argv)
{
    long calls = 100000, batch = 1000;
    size_t bytes = 64;
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
        else if (!strcmp(argv[i], "--json"))
            json = 1;
        else {
            fprintf(stderr,
                    "usage: %s [--calls N] [--bytes B] [--call h2d|d2h|memset] [--cudart SONAME] [--json]\n"
                    "Times N small calls through the hooked symbol and through libcudart directly,\n"
                    "interleaved in batches; prints medians.  h2d (default) and d2h: cudaMemcpyAsync\n"
                    "between B pinned and B device bytes; memset: cudaMemsetAsync of B device bytes.\n",
                    argv[0]);
            return 2;
        }
    }
    const int kind = !strcmp(call, "h2d") ? 0 : !strcmp(call, "d2h") ? 1 : !strcmp(call, "memset") ? 2 : -1;
    if (kind < 0) {
        fprintf(stderr, "ibp-hookbench: --call takes h2d, d2h or memset, not %s\n", call);
        return 2;
    }
    if (calls < batch)
        batch = calls > 0 ? calls : 1;
    void *lib = dlopen(cudart, RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        fprintf(stderr, "ibp-hookbench: cannot load %s: %s\n", cudart, dlerror());
        return 2;
    }
    const char *const symbol = kind == 2 ? "cudaMemsetAsync" : "cudaMemcpyAsync";
    void *const fns[2] = {need(RTLD_DEFAULT, symbol), need(lib, symbol)}; /* hooked, direct */
    const VersionFn shim_version = (VersionFn)dlsym(RTLD_DEFAULT, "ibpshim_version");
    int ndev = 0;
    if (((DeviceCountFn)need(lib, "cudaGetDeviceCount"))(&ndev) != cudaSuccess || ndev == 0) {
        printf("ibp-hookbench: no CUDA device, skipped\n");
        return 77;
    }
    void *host = NULL, *dev = NULL;
    cudaStream_t stream;
    if (((MallocHostFn)need(lib, "cudaMallocHost"))(&host, bytes) != cudaSuccess ||
        ((MallocFn)need(lib, "cudaMalloc"))(&dev, bytes) != cudaSuccess ||
        ((StreamCreateFn)need(lib, "cudaStreamCreate"))(&stream) != cudaSuccess) {
        fprintf(stderr, "ibp-hookbench: CUDA set-up failed\n");
        return 1;
    }
    const StreamSyncFn sync = (StreamSyncFn)need(lib, "cudaStreamSynchronize");
    memset(host, 0x42, bytes);
    double *t_hooked = malloc(sizeof(double) * (size_t)calls);
    double *t_direct = malloc(sizeof(double) * (size_t)calls);
    if (!t_hooked || !t_direct)
        return 1;
    /* Warm-up: first calls pay for lazy module and context set-up. */
    for (int i = 0; i < 1000; i++)
        for (int path = 0; path < 2; path++)
            one_call(kind, fns[path], host, dev, bytes, stream);
    sync(stream);
    long done = 0;
    while (done < calls) {
        const long n = calls - done < batch ? calls - done : batch;
        for (int path = 0; path < 2; path++) {
            double *out = (path ? t_direct : t_hooked) + done;
            for (long i = 0; i < n; i++) {
                const double t0 = now_ns();
                const cudaError_t err = one_call(kind, fns[path], host, dev, bytes, stream);
                out[i] = now_ns() - t0;
                if (err != cudaSuccess) {
                    fprintf(stderr, "ibp-hookbench: %s failed (%d)\n", symbol, (int)err);
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
    const char *mode = shim_version ? "preloaded" : "not preloaded (both paths are libcudart)";
    if (json) {
        printf("{\"call\": \"%s\", \"calls\": %ld, \"bytes\": %zu, \"shim\": %s, \"median_hooked_ns\": %.1f, "
               "\"median_direct_ns\": %.1f, \"added_ns\": %.1f, \"p10_hooked_ns\": %.1f, \"p90_hooked_ns\": "
               "%.1f, "
               "\"p10_direct_ns\": %.1f, \"p90_direct_ns\": %.1f}\n",
               call, calls, bytes, shim_version ? "true" : "false", mh, md, mh - md,
               quantile(t_hooked, (size_t)calls, 0.1), quantile(t_hooked, (size_t)calls, 0.9),
               quantile(t_direct, (size_t)calls, 0.1), quantile(t_direct, (size_t)calls, 0.9));
    } else {
        static const char *const what[3] = {"pinned bytes to the device (cudaMemcpyAsync)",
                                            "device bytes to pinned memory (cudaMemcpyAsync)",
                                            "device bytes set (cudaMemsetAsync)"};
        printf("ibp-hookbench: %ld x %zu %s, shim %s\n", calls, bytes, what[kind], mode);
        printf("  path      median     p10      p90   (ns per call)\n");
        printf("  hooked  %8.1f %8.1f %8.1f\n", mh, quantile(t_hooked, (size_t)calls, 0.1),
               quantile(t_hooked, (size_t)calls, 0.9));
        printf("  direct  %8.1f %8.1f %8.1f\n", md, quantile(t_direct, (size_t)calls, 0.1),
               quantile(t_direct, (size_t)calls, 0.9));
        printf("  added by the hook: %.1f ns (median difference)\n", mh - md);
    }
    free(t_hooked);
    free(t_direct);
    return 0;
}
