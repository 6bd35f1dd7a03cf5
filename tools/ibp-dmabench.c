/* SPDX-License-Identifier: MIT
 * ibpshim: what splitting one host-to-device copy into several costs: back-to-back
 * cuMemcpyAsync calls of the parts of a pinned buffer on one stream, plain, with an event after
 * each part (as a pipelined copy records for its decodes), with a second stream waiting on those
 * events, and with a stream memory operation after each instead of an event; and, as the bound
 * of any path whose kernels read the compressed bytes across the link themselves, a kernel that
 * copies the same pinned bytes by their unified address (tools/fill_kernel.h). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "fill_kernel.h"
#include "size_arg.h"

#define MAX_PARTS 16
#define MAX_ITERS 101

typedef CUresult (*InitFn)(unsigned);
typedef CUresult (*DeviceGetFn)(CUdevice *, int);
typedef CUresult (*DeviceCountFn)(int *);
typedef CUresult (*CtxRetainFn)(CUcontext *, CUdevice);
typedef CUresult (*CtxSetFn)(CUcontext);
typedef CUresult (*HostAllocFn)(void **, size_t, unsigned);
typedef CUresult (*MemAllocFn)(CUdeviceptr *, size_t);
typedef CUresult (*MemsetFn)(CUdeviceptr, unsigned char, size_t);
typedef CUresult (*StreamCreateFn)(CUstream *, unsigned);
typedef CUresult (*EventCreateFn)(CUevent *, unsigned);
typedef CUresult (*EventRecordFn)(CUevent, CUstream);
typedef CUresult (*WaitEventFn)(CUstream, CUevent, unsigned);
typedef CUresult (*EventSyncFn)(CUevent);
typedef CUresult (*ElapsedFn)(float *, CUevent, CUevent);
typedef CUresult (*CopyFn)(CUdeviceptr, const void *, size_t, CUstream);
typedef CUresult (*WriteValueFn)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
typedef CUresult (*WaitValueFn)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
typedef CUresult (*ModuleLoadFn)(CUmodule *, const void *);
typedef CUresult (*ModuleFunctionFn)(CUfunction *, CUmodule, const char *);
typedef CUresult (*LaunchFn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
typedef CUresult (*DtoHFn)(void *, CUdeviceptr, size_t);
typedef CUresult (*CtxSyncFn)(void);

static struct {
    EventRecordFn record;
    WaitEventFn wait;
    EventSyncFn sync;
    ElapsedFn elapsed;
    CopyFn copy;
    WriteValueFn write_value; /* NULL where the driver has no stream memory operations */
    WaitValueFn wait_value;
    LaunchFn launch;
    CUfunction copy16; /* ibp_test_copy16 */
} cu;

enum { MODE_PLAIN, MODE_EVENT, MODE_EVENT_WAIT, MODE_MEMOP, MODES };
static const char *const mode_names[MODES] = {"plain", "event", "event_wait", "stream_memop"};

typedef struct {
    CUstream copy, other;
    CUevent t0, t1, ev[MAX_PARTS + 1];
    CUdeviceptr dev, flags;
    const char *host;
    int iters;
    cuuint32_t seq;
} Bench;

static void *need(void *lib, const char *name)
{
    void *fn = dlsym(lib, name);
    if (!fn) {
        fprintf(stderr, "ibp-dmabench: %s not found in the driver\n", name);
        exit(2);
    }
    return fn;
}

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The median of n times in ms, in us. */
static double median_us(float *ms, int n)
{
    qsort(ms, (size_t)n, sizeof(ms[0]), cmp_float);
    return ms[n / 2] * 1e3;
}

/* The median time (us) of copying the parts sz[0..n) back to back in `mode`, or a negative value
 * when a call failed. */
static double run(Bench *b, const size_t *sz, int n, int mode)
{
    float ms[MAX_ITERS];
    for (int it = -3; it < b->iters; it++) {
        int bad = cu.record(b->t0, b->copy) || cu.wait(b->other, b->t0, 0);
        size_t off = 0;
        for (int k = 0; k < n && !bad; k++) {
            bad = cu.copy(b->dev + off, b->host + off, sz[k], b->copy) != CUDA_SUCCESS;
            off += sz[k];
            if (!bad && (mode == MODE_EVENT || mode == MODE_EVENT_WAIT))
                bad = cu.record(b->ev[k], b->copy) != CUDA_SUCCESS;
            if (!bad && mode == MODE_EVENT_WAIT)
                bad = cu.wait(b->other, b->ev[k], 0) != CUDA_SUCCESS;
            if (!bad && mode == MODE_MEMOP)
                bad = cu.write_value(b->copy, b->flags + 4 * (CUdeviceptr)k, b->seq, 0) != CUDA_SUCCESS ||
                      cu.wait_value(b->other, b->flags + 4 * (CUdeviceptr)k, b->seq,
                                    CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS;
        }
        b->seq++;
        /* The clock stream waits for the other one, so its waits count. */
        if (!bad && mode >= MODE_EVENT_WAIT)
            bad = cu.record(b->ev[MAX_PARTS], b->other) || cu.wait(b->copy, b->ev[MAX_PARTS], 0);
        float t = 0;
        if (bad || cu.record(b->t1, b->copy) || cu.sync(b->t1) || cu.elapsed(&t, b->t0, b->t1))
            return -1;
        if (it >= 0)
            ms[it] = t;
    }
    return median_us(ms, b->iters);
}

/* The median time (us) of ibp_test_copy16 copying the first `vecs` 16-byte vectors of the pinned
 * buffer to the device on the copy stream, or a negative value when a launch failed. */
static double run_kernel_copy(Bench *b, uint64_t vecs)
{
    float ms[MAX_ITERS];
    CUdeviceptr src = (CUdeviceptr)(uintptr_t)b->host;
    void *params[] = {&src, &b->dev, &vecs};
    const uint64_t ctas = (vecs + 255) / 256;
    for (int it = -3; it < b->iters; it++) {
        float t = 0;
        if (cu.record(b->t0, b->copy) ||
            cu.launch(cu.copy16, ctas < 65535 ? (unsigned)ctas : 65535u, 1, 1, 256, 1, 1, 0, b->copy, params,
                      NULL) ||
            cu.record(b->t1, b->copy) || cu.sync(b->t1) || cu.elapsed(&t, b->t0, b->t1))
            return -1;
        if (it >= 0)
            ms[it] = t;
    }
    return median_us(ms, b->iters);
}

int main(int argc, char **argv)
{
    const char *driver = "libcuda.so.1";
    size_t totals[8];
    int ntotals = 0, json = 0, iters = 25;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--size") && i + 1 < argc && ntotals < 8) {
            const char *v = argv[++i];
            if ((totals[ntotals++] = ibp_size_arg(v)) < 256) {
                fprintf(stderr, "ibp-dmabench: --size takes a size of at least 256 bytes, not '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
            const char *v = argv[++i];
            long n = 0;
            if (ibp_count_parse(v, 1, MAX_ITERS, &n)) {
                fprintf(stderr, "ibp-dmabench: --iters takes 1 to %d, not '%s'\n", MAX_ITERS, v);
                return 2;
            }
            iters = (int)n;
        } else if (!strcmp(argv[i], "--driver") && i + 1 < argc) {
            driver = argv[++i];
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else {
            fprintf(stderr,
                    "usage: %s [--size BYTES]... [--iters N] [--driver SONAME] [--json]\n"
                    "Copies BYTES of pinned memory to the device (default 64M, 22M, 6M and 1.66M) as one\n"
                    "cuMemcpyHtoDAsync and as 2, 5, 8 and 16 equal parts and 5 halving parts back to back\n"
                    "on one stream: plain, with an event after each part, with a second stream waiting on\n"
                    "each event, and with cuStreamWriteValue32 / cuStreamWaitValue32 instead of events;\n"
                    "then a kernel copying the same bytes in 16-byte loads from the pinned buffer's\n"
                    "unified address (what the multiprocessors alone read across the link); prints the\n"
                    "median of N timed runs (default 25, after 3 warm-ups) in microseconds.\n",
                    argv[0]);
            return 2;
        }
    }
    if (!ntotals) {
        const size_t def[4] = {(size_t)64 << 20, (size_t)22 << 20, (size_t)6 << 20, (size_t)1700 << 10};
        memcpy(totals, def, sizeof(def));
        ntotals = 4;
    }
    void *lib = dlopen(driver, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        printf("ibp-dmabench: no CUDA driver (%s), skipped\n", dlerror());
        return 77;
    }
    int ndev = 0;
    if (((InitFn)need(lib, "cuInit"))(0) != CUDA_SUCCESS ||
        ((DeviceCountFn)need(lib, "cuDeviceGetCount"))(&ndev) != CUDA_SUCCESS || ndev == 0) {
        printf("ibp-dmabench: no CUDA device, skipped\n");
        return 77;
    }
    cu.record = (EventRecordFn)need(lib, "cuEventRecord");
    cu.wait = (WaitEventFn)need(lib, "cuStreamWaitEvent");
    cu.sync = (EventSyncFn)need(lib, "cuEventSynchronize");
    cu.elapsed = (ElapsedFn)need(lib, "cuEventElapsedTime");
    cu.copy = (CopyFn)need(lib, "cuMemcpyHtoDAsync_v2");
    cu.write_value = (WriteValueFn)dlsym(lib, "cuStreamWriteValue32_v2");
    cu.wait_value = (WaitValueFn)dlsym(lib, "cuStreamWaitValue32_v2");
    size_t cap = 0;
    for (int t = 0; t < ntotals; t++)
        cap = totals[t] > cap ? totals[t] : cap;
    Bench b = {.iters = iters, .seq = 1};
    CUdevice dev;
    CUcontext ctx;
    void *host = NULL;
    const EventCreateFn event_create = (EventCreateFn)need(lib, "cuEventCreate");
    const StreamCreateFn stream_create = (StreamCreateFn)need(lib, "cuStreamCreate");
    const MemsetFn memset_d8 = (MemsetFn)need(lib, "cuMemsetD8_v2");
    const DtoHFn dtoh = (DtoHFn)need(lib, "cuMemcpyDtoH_v2");
    /* cuMemsetD8 on device memory runs on the legacy stream, which the non-blocking streams below
     * do not wait for: each memset is waited for before those streams touch its buffer. */
    const CtxSyncFn ctx_sync = (CtxSyncFn)need(lib, "cuCtxSynchronize");
    int bad = ((DeviceGetFn)need(lib, "cuDeviceGet"))(&dev, 0) ||
              ((CtxRetainFn)need(lib, "cuDevicePrimaryCtxRetain"))(&ctx, dev) ||
              ((CtxSetFn)need(lib, "cuCtxSetCurrent"))(ctx) ||
              ((HostAllocFn)need(lib, "cuMemHostAlloc"))(&host, cap, CU_MEMHOSTALLOC_PORTABLE) ||
              ((MemAllocFn)need(lib, "cuMemAlloc_v2"))(&b.dev, cap) ||
              ((MemAllocFn)need(lib, "cuMemAlloc_v2"))(&b.flags, 4 * MAX_PARTS) ||
              memset_d8(b.flags, 0, 4 * MAX_PARTS) || ctx_sync() ||
              stream_create(&b.copy, CU_STREAM_NON_BLOCKING) ||
              stream_create(&b.other, CU_STREAM_NON_BLOCKING) || event_create(&b.t0, CU_EVENT_DEFAULT) ||
              event_create(&b.t1, CU_EVENT_DEFAULT);
    for (int k = 0; k <= MAX_PARTS && !bad; k++)
        bad = event_create(&b.ev[k], CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS;
    CUmodule mod = NULL;
    cu.launch = (LaunchFn)need(lib, "cuLaunchKernel");
    if (!bad && (((ModuleLoadFn)need(lib, "cuModuleLoadData"))(&mod, ibp_fill_ptx) ||
                 ((ModuleFunctionFn)need(lib, "cuModuleGetFunction"))(&cu.copy16, mod, "ibp_test_copy16"))) {
        fprintf(stderr, "ibp-dmabench: the copy kernel did not load\n");
        bad = 1;
    }
    if (bad) {
        fprintf(stderr, "ibp-dmabench: CUDA set-up failed\n");
        return 1;
    }
    for (size_t i = 0; i < cap; i++) /* varied, so that a misplaced vector shows */
        ((unsigned char *)host)[i] = (unsigned char)(i * 131u ^ i >> 9);
    b.host = host;
    /* A stream memory operation refused here is left out, not counted as a failure. */
    const size_t probe[1] = {256};
    const int memops = cu.write_value && cu.wait_value && run(&b, probe, 1, MODE_MEMOP) >= 0;
    static const int equal_parts[] = {1, 2, 5, 8, 16};
    if (json)
        printf("{\"iters\": %d, \"results\": [", iters);
    for (int t = 0; t < ntotals; t++) {
        const size_t total = totals[t];
        if (!json)
            printf("%.2f MiB, us (GB/s):\n", (double)total / 1048576.0);
        for (int s = 0; s <= 5; s++) {
            size_t sz[MAX_PARTS];
            int n = s < 5 ? equal_parts[s] : 5;
            if (s < 5) {
                for (int k = 0; k < n; k++)
                    sz[k] = (total / (size_t)n) & ~(size_t)255;
            } else { /* as a pipelined copy's chunks shrink: halves of what is left, the last two equal */
                for (int k = 0; k < n - 1; k++)
                    sz[k] = (total >> (k + 1)) & ~(size_t)255;
            }
            size_t head = 0;
            for (int k = 0; k < n - 1; k++)
                head += sz[k];
            sz[n - 1] = total - head;
            if (!json)
                printf("  %-14s", s < 5 ? (n == 1 ? "one copy" : "") : "halving, 5");
            if (!json && s < 5 && n > 1)
                printf("%2d parts      ", n);
            for (int m = 0; m < MODES; m++) {
                if ((n == 1 && m) || (m == MODE_MEMOP && !memops))
                    continue;
                const double us = run(&b, sz, n, m);
                if (us < 0) {
                    fprintf(stderr, "ibp-dmabench: a copy failed\n");
                    return 1;
                }
                if (json)
                    printf(
                        "%s{\"bytes\": %zu, \"parts\": %d, \"halving\": %s, \"mode\": \"%s\", \"us\": %.1f}",
                        t || s || m ? ", " : "", total, n, s == 5 ? "true" : "false", mode_names[m], us);
                else
                    printf(" %s %.1f (%.1f)", mode_names[m], us, (double)total / us / 1e3);
            }
            if (!json)
                printf("\n");
        }
        /* The kernel's copy, checked: the device buffer cleared, copied, and read back. */
        const uint64_t vecs = total / 16;
        const double us = memset_d8(b.dev, 0, total) || ctx_sync() ? -1 : run_kernel_copy(&b, vecs);
        unsigned char *back = us < 0 ? NULL : malloc(total);
        const int same = back && !dtoh(back, b.dev, total) && !memcmp(back, host, vecs * 16);
        free(back);
        if (!same) {
            fprintf(stderr, "ibp-dmabench: the copy kernel %s\n", us < 0 ? "failed" : "copied wrong bytes");
            return 1;
        }
        if (json)
            printf(", {\"bytes\": %zu, \"parts\": 1, \"halving\": false, \"mode\": \"kernel_copy\", \"us\": "
                   "%.1f}",
                   (size_t)(vecs * 16), us);
        else
            printf("  kernel copy    %.1f (%.1f)\n", us, (double)(vecs * 16) / us / 1e3);
    }
    if (json)
        printf("]}\n");
    return 0;
}
