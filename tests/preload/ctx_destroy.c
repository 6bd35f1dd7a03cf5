/* SPDX-License-Identifier: MIT
 * ibpshim: an application's own context destroyed in the middle of a run.  "used": the application
 * makes a context (cuCtxCreate), the runtime copies in it, a region registered there goes
 * compressed; then the application destroys the context, which takes the registration, its device
 * buffers and everything the shim made in it (staging, streams, kernels), and makes another one,
 * which may get the same handle and the same device addresses.  There it allocates a bystander
 * buffer first (over the addresses freed), writes other bytes into the region and registers it
 * again: every copy must deliver them, none compressed, and the bystander's bytes must stay as
 * written; the context is destroyed through cuGetProcAddress.  "unused": a context the shim never saw is made
 * and destroyed before the runtime starts; the region's copies in the primary context must still go
 * compressed. */
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include <cuda.h>

#include "tests/preload/preload_check.h"

typedef CUresult (*InitFn)(unsigned int flags);
typedef CUresult (*CreateFn)(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev);
typedef CUresult (*DestroyFn)(CUcontext ctx);
typedef CUresult (*ProcFn)(const char *symbol, void **pfn, int version, cuuint64_t flags,
                           CUdriverProcAddressQueryResult *status);

typedef struct Driver {
    CreateFn create;
    DestroyFn destroy;
} Driver;

/* The driver's calls; cuCtxDestroy as the application would reach it (the shim's hook, when
 * preloaded): by symbol, or through cuGetProcAddress as programs that load the driver at run time
 * do. */
static Driver driver_open(int by_proc_address)
{
    void *const cuda = dlopen("libcuda.so.1", RTLD_NOW);
    CHECK(cuda != NULL, "dlopen libcuda.so.1: %s", dlerror());
    const InitFn init = (InitFn)dlsym(cuda, "cuInit");
    CHECK(init && init(0) == CUDA_SUCCESS, "cuInit failed");
    Driver d = {.create = (CreateFn)dlsym(cuda, "cuCtxCreate_v4")};
    if (by_proc_address) {
        ProcFn proc = (ProcFn)dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2");
        if (!proc)
            proc = (ProcFn)dlsym(cuda, "cuGetProcAddress_v2");
        void *fn = NULL;
        CUdriverProcAddressQueryResult found;
        CHECK(proc && proc("cuCtxDestroy", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found) == CUDA_SUCCESS,
              "cuGetProcAddress(cuCtxDestroy) failed");
        d.destroy = (DestroyFn)fn;
    } else {
        d.destroy = (DestroyFn)dlsym(RTLD_DEFAULT, "cuCtxDestroy_v2");
        if (!d.destroy)
            d.destroy = (DestroyFn)dlsym(cuda, "cuCtxDestroy_v2");
    }
    CHECK(d.create && d.destroy, "cuCtxCreate_v4 or cuCtxDestroy not found");
    return d;
}

static CUcontext make_context(const Driver *d)
{
    CUcontext ctx = NULL;
    CHECK(d->create(&ctx, NULL, 0, 0) == CUDA_SUCCESS && ctx, "cuCtxCreate failed");
    return ctx;
}

/* The application's part when the shim never saw the context it destroys. */
static int unused_context(const Driver *d, PreloadTotalsFn totals, uint8_t *host, size_t n)
{
    CHECK(d->destroy(make_context(d)) == CUDA_SUCCESS, "cuCtxDestroy failed");
    PreloadTrip t;
    preload_trip_register(&t, host, n);
    preload_wait_compressed("ctx_destroy", "the region", totals, preload_trip, &t);
    preload_trip_unregister(&t);
    printf("ctx_destroy: ok (unused: the region went compressed after another context was destroyed)\n");
    return 0;
}

int main(int argc, char **argv)
{
    CHECK(argc == 2 && (!strcmp(argv[1], "used") || !strcmp(argv[1], "unused")),
          "usage: ctx_destroy used|unused");
    const PreloadTotalsFn totals = preload_compression_or_skip("ctx_destroy", 1);
    /* The context the shim copied in is destroyed through cuGetProcAddress, the other by symbol. */
    const Driver d = driver_open(!strcmp(argv[1], "used"));
    const size_t n = (size_t)4 << 20;
    uint8_t *const host = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(host != MAP_FAILED, "mmap");
    preload_fill_weights(host, n);
    if (!strcmp(argv[1], "unused"))
        return unused_context(&d, totals, host, n);

    const CUcontext first = make_context(&d);
    PreloadTrip t;
    preload_trip_register(&t, host, n);
    preload_wait_compressed("ctx_destroy", "the region", totals, preload_trip, &t);
    free(t.back);
    IbpshimTransferTotals a;
    CHECK(totals(&a) == 0, "totals");
    CHECK(d.destroy(first) == CUDA_SUCCESS, "cuCtxDestroy failed");

    const CUcontext second = make_context(&d);
    /* Over the device addresses the first context's buffers had: nothing but the application may
     * write it. */
    const size_t by_n = (size_t)64 << 20;
    void *bystander = NULL;
    CHECK_CUDA(cudaMalloc(&bystander, by_n));
    CHECK_CUDA(cudaMemset(bystander, 0x5a, by_n));
    const int copies = preload_trips_after_loss(totals, &a, &t, host, n, "the context was destroyed");
    uint8_t *const by_back = malloc(by_n);
    CHECK(by_back != NULL, "malloc");
    CHECK_CUDA(cudaMemcpy(by_back, bystander, by_n, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < by_n; i++)
        CHECK(by_back[i] == 0x5a, "bystander byte %zu is %#x, not 0x5a: something else wrote it", i,
              by_back[i]);
    free(by_back);
    CHECK_CUDA(cudaFree(bystander));
    preload_trip_unregister(&t);
    CHECK(d.destroy(second) == CUDA_SUCCESS, "cuCtxDestroy failed");
    munmap(host, n);
    printf(
        "ctx_destroy: ok (used: %d copies after the context was destroyed checked; the next context %s its "
        "handle)\n",
        copies, second == first ? "had" : "did not have");
    return 0;
}
