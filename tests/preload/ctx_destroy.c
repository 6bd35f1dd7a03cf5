/* SPDX-License-Identifier: MIT
 * ibpshim: an application's own context destroyed in the middle of a run.  "used": the application
 * makes a context (cuCtxCreate), the runtime copies in it, a region registered there goes
 * compressed; then the application destroys the context, which takes the registration, its device
 * buffers and everything the shim made in it (staging, streams, kernels), and makes another one,
 * which may get the same handle and the same device addresses.  There it allocates a bystander
 * buffer first (over the addresses freed), writes other bytes into the region and registers it
 * again: every copy must deliver them, none compressed, and the bystander's bytes must stay as
 * written; the context is destroyed through cuGetProcAddress.  "green": the same, the first context
 * a green context (CUDA 12.4: cuGreenCtxCreate over the device's SMs, converted by
 * cuCtxFromGreenCtx and set current), destroyed by cuGreenCtxDestroy through cuGetProcAddress;
 * skipped where the driver has no green contexts.  The shim stops its compressed path there all
 * the same, but what was allocated or registered while the converted context was current is the
 * device's primary context's, as cuda.h describes the converted context, and may outlive the
 * destroy: on an H100 with driver 580.159 the region's registration did (registering it again
 * failed as already registered).  So the region is unregistered in the next context where it is
 * still registered, before the bystander and the new bytes.  "unused": a context the shim never
 * saw is made and destroyed before the runtime starts; the region's copies in the primary context
 * must still go compressed. */
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

typedef CUresult (*GetResourceFn)(CUdevice dev, CUdevResource *resource, CUdevResourceType type);
typedef CUresult (*GenerateDescFn)(CUdevResourceDesc *desc, CUdevResource *resources, unsigned int n);
typedef CUresult (*GreenCreateFn)(CUgreenCtx *green, CUdevResourceDesc desc, CUdevice dev,
                                  unsigned int flags);
typedef CUresult (*FromGreenFn)(CUcontext *ctx, CUgreenCtx green);
typedef CUresult (*GreenDestroyFn)(CUgreenCtx green);
typedef CUresult (*SetCurrentFn)(CUcontext ctx);

typedef struct Driver {
    CreateFn create;
    DestroyFn destroy;
    /* green contexts, for "green" only */
    GetResourceFn get_resource;
    GenerateDescFn generate_desc;
    GreenCreateFn green_create;
    FromGreenFn from_green;
    GreenDestroyFn green_destroy;
    SetCurrentFn set_current;
} Driver;

/* symbol through cuGetProcAddress as of CUDA `version`, as programs that load the driver at run
 * time reach it (the shim's hook, when preloaded); NULL where the driver does not define it. */
static void *proc_address(void *cuda, const char *symbol, int version)
{
    ProcFn proc = (ProcFn)dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2");
    if (!proc)
        proc = (ProcFn)dlsym(cuda, "cuGetProcAddress_v2");
    CHECK(proc != NULL, "cuGetProcAddress_v2 not found");
    void *fn = NULL;
    CUdriverProcAddressQueryResult found;
    return proc(symbol, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &found) == CUDA_SUCCESS ? fn : NULL;
}

/* The driver's calls; cuCtxDestroy as the application would reach it (the shim's hook, when
 * preloaded): by symbol, or through cuGetProcAddress as programs that load the driver at run time
 * do.  With green, the green-context calls too, cuGreenCtxDestroy through cuGetProcAddress: the
 * program is skipped where the driver lacks them. */
static Driver driver_open(int by_proc_address, int green)
{
    void *const cuda = dlopen("libcuda.so.1", RTLD_NOW);
    CHECK(cuda != NULL, "dlopen libcuda.so.1: %s", dlerror());
    const InitFn init = (InitFn)dlsym(cuda, "cuInit");
    CHECK(init && init(0) == CUDA_SUCCESS, "cuInit failed");
    Driver d = {.create = (CreateFn)dlsym(cuda, "cuCtxCreate_v4")};
    if (by_proc_address) {
        d.destroy = (DestroyFn)proc_address(cuda, "cuCtxDestroy", 12000);
        CHECK(d.destroy != NULL, "cuGetProcAddress(cuCtxDestroy) failed");
    } else {
        d.destroy = (DestroyFn)dlsym(RTLD_DEFAULT, "cuCtxDestroy_v2");
        if (!d.destroy)
            d.destroy = (DestroyFn)dlsym(cuda, "cuCtxDestroy_v2");
    }
    CHECK(d.create && d.destroy, "cuCtxCreate_v4 or cuCtxDestroy not found");
    if (green) {
        d.get_resource = (GetResourceFn)dlsym(cuda, "cuDeviceGetDevResource");
        d.generate_desc = (GenerateDescFn)dlsym(cuda, "cuDevResourceGenerateDesc");
        d.green_create = (GreenCreateFn)dlsym(cuda, "cuGreenCtxCreate");
        d.from_green = (FromGreenFn)dlsym(cuda, "cuCtxFromGreenCtx");
        d.green_destroy = (GreenDestroyFn)proc_address(cuda, "cuGreenCtxDestroy", 12040);
        d.set_current = (SetCurrentFn)dlsym(cuda, "cuCtxSetCurrent");
        CHECK(d.set_current != NULL, "cuCtxSetCurrent not found");
        if (!d.get_resource || !d.generate_desc || !d.green_create || !d.from_green || !d.green_destroy) {
            printf("ctx_destroy: the driver has no green contexts (CUDA 12.4), skipped\n");
            exit(77);
        }
    }
    return d;
}

static CUcontext make_context(const Driver *d)
{
    CUcontext ctx = NULL;
    CHECK(d->create(&ctx, NULL, 0, 0) == CUDA_SUCCESS && ctx, "cuCtxCreate failed");
    return ctx;
}

/* A green context over all of the device's SMs, its context (in *ctx) current; the program is
 * skipped where the device makes none. */
static CUgreenCtx make_green_context(const Driver *d, CUcontext *ctx)
{
    CUdevResource sm;
    memset(&sm, 0, sizeof(sm));
    CHECK(d->get_resource(0, &sm, CU_DEV_RESOURCE_TYPE_SM) == CUDA_SUCCESS, "cuDeviceGetDevResource failed");
    CUdevResourceDesc desc = NULL;
    CHECK(d->generate_desc(&desc, &sm, 1) == CUDA_SUCCESS, "cuDevResourceGenerateDesc failed");
    CUgreenCtx green = NULL;
    const CUresult made = d->green_create(&green, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM);
    if (made == CUDA_ERROR_NOT_SUPPORTED) {
        printf("ctx_destroy: the device makes no green contexts, skipped\n");
        exit(77);
    }
    CHECK(made == CUDA_SUCCESS && green, "cuGreenCtxCreate failed (%d)", (int)made);
    CHECK(d->from_green(ctx, green) == CUDA_SUCCESS && *ctx, "cuCtxFromGreenCtx failed");
    CHECK(d->set_current(*ctx) == CUDA_SUCCESS, "cuCtxSetCurrent failed");
    return green;
}

/* After cuGreenCtxDestroy: the region's registration is unregistered where the driver kept it (a
 * real one did), and not-registered is fine where it went with the green context. */
static void unregister_if_registered(void *host)
{
    const cudaError_t err = cudaHostUnregister(host);
    if (err == cudaErrorHostMemoryNotRegistered)
        (void)cudaGetLastError();
    else
        CHECK_CUDA(err);
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
    CHECK(argc == 2 && (!strcmp(argv[1], "used") || !strcmp(argv[1], "green") || !strcmp(argv[1], "unused")),
          "usage: ctx_destroy used|green|unused");
    const int green = !strcmp(argv[1], "green");
    const PreloadTotalsFn totals = preload_compression_or_skip("ctx_destroy", 1);
    /* The context the shim copied in is destroyed through cuGetProcAddress, the other by symbol. */
    const Driver d = driver_open(strcmp(argv[1], "unused") != 0, green);
    const size_t n = (size_t)4 << 20;
    uint8_t *const host = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(host != MAP_FAILED, "mmap");
    preload_fill_weights(host, n);
    if (!strcmp(argv[1], "unused"))
        return unused_context(&d, totals, host, n);

    CUcontext first = NULL;
    const CUgreenCtx first_green = green ? make_green_context(&d, &first) : NULL;
    if (!green)
        first = make_context(&d);
    PreloadTrip t;
    preload_trip_register(&t, host, n);
    preload_wait_compressed("ctx_destroy", "the region", totals, preload_trip, &t);
    free(t.back);
    IbpshimTransferTotals a;
    CHECK(totals(&a) == 0, "totals");
    if (green)
        CHECK(d.green_destroy(first_green) == CUDA_SUCCESS, "cuGreenCtxDestroy failed");
    else
        CHECK(d.destroy(first) == CUDA_SUCCESS, "cuCtxDestroy failed");

    const CUcontext second = make_context(&d);
    if (green)
        unregister_if_registered(host);
    /* Over the device addresses the first context's buffers had where they went with it: nothing
     * but the application may write it. */
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
    printf("ctx_destroy: ok (%s: %d copies after the context was destroyed checked; the next context %s its "
           "handle)\n",
           argv[1], copies, second == first ? "had" : "did not have");
    return 0;
}
