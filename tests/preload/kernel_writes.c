/* SPDX-License-Identifier: MIT
 * ibpshim: a kernel writes a compressed pinned region through its unified address, and the copy of
 * the region behind it in stream order must deliver the bytes it wrote.  The device's stores land
 * without a fault, so only the launch's arguments can tell the shim.  KERNEL_WRITES_HOW picks the
 * launch: runtime (cudaLaunchKernel), runtime-ex (cudaLaunchKernelExC), struct (the pointer inside
 * a structure passed by value), driver (cuLaunchKernel by symbol), driver-kernel (the same with a
 * CUkernel of a library in place of a CUfunction), extra (cuLaunchKernel with the
 * arguments in one buffer), driver-ex (cuLaunchKernelEx through cuGetProcAddress), or none (the
 * kernel writes device memory only, and the region stays compressed); and in a graph: graph
 * (cudaLaunchKernel captured), graph-driver (cuLaunchKernel captured), graph-update (captured
 * writing device memory, then pointed into the region with cudaGraphExecKernelNodeSetParams) and
 * graph-update-driver (the same with cuGraphExecKernelNodeSetParams); and graph-device-node, a
 * graph whose kernel node (writing device memory) the device may update, which copies must treat
 * as unreadable: raw from its launch on.  The kernels are PTX
 * (tools/fill_kernel.h), loaded as a library for the runtime's launches and as a module for the
 * driver's. */
#include <stdint.h>
#include <string.h>

#include <cuda.h>

#include "tools/fill_kernel.h"
#include "tests/preload/preload_check.h"

typedef CUresult (*ModuleLoadFn)(CUmodule *m, const void *image);
typedef CUresult (*ModuleGetFunctionFn)(CUfunction *f, CUmodule m, const char *name);
typedef CUresult (*LibraryLoadFn)(CUlibrary *l, const void *code, CUjit_option *o, void **v, unsigned n,
                                  CUlibraryOption *lo, void **lv, unsigned ln);
typedef CUresult (*LibraryKernelFn)(CUkernel *k, CUlibrary l, const char *name);
typedef CUresult (*LaunchFn)(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned shared, CUstream s, void **params, void **extra);
typedef CUresult (*LaunchExFn)(const CUlaunchConfig *config, CUfunction f, void **params, void **extra);
typedef CUresult (*ExecKernelFn)(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *p);
typedef CUresult (*GetProcFn)(const char *symbol, void **pfn, int version, cuuint64_t flags,
                              CUdriverProcAddressQueryResult *status);

static void *dev_buf;
static uint8_t *back;
/* What load_kernel loaded, unloaded at the end (the shim drops what it kept of its kernels). */
static void *loaded;
static const char *unload_with;

static void copy_all(void *arg)
{
    preload_round_trip(arg, dev_buf, back);
}

/* A driver function as a program linked with libcuda reaches it: the shim's hook where it has one,
 * else the driver's own (looked up in libcuda, which the runtime loads privately). */
static void *driver_symbol(const char *name)
{
    void *fn = dlsym(RTLD_DEFAULT, name);
    if (!fn) {
        void *const cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        fn = cuda ? dlsym(cuda, name) : NULL;
    }
    CHECK(fn != NULL, "%s not found", name);
    return fn;
}

/* The kernel's function in the way `how` launches it: a cudaKernel_t or a CUfunction. */
static void *load_kernel(const char *how, const char *name)
{
    if (!strncmp(how, "runtime", 7) || !strcmp(how, "struct") || !strcmp(how, "none") ||
        !strcmp(how, "graph") || !strcmp(how, "graph-update") || !strcmp(how, "graph-device-node")) {
        cudaLibrary_t lib = NULL;
        cudaKernel_t kernel = NULL;
        CHECK_CUDA(cudaLibraryLoadData(&lib, ibp_fill_ptx, NULL, NULL, 0, NULL, NULL, 0));
        CHECK_CUDA(cudaLibraryGetKernel(&kernel, lib, name));
        loaded = (void *)lib;
        unload_with = "cudaLibraryUnload";
        return (void *)kernel;
    }
    if (!strcmp(how, "driver-kernel")) {
        CUlibrary lib = NULL;
        CUkernel kernel = NULL;
        CHECK(((LibraryLoadFn)driver_symbol("cuLibraryLoadData"))(&lib, ibp_fill_ptx, NULL, NULL, 0, NULL,
                                                                  NULL, 0) == CUDA_SUCCESS,
              "cuLibraryLoadData");
        CHECK(((LibraryKernelFn)driver_symbol("cuLibraryGetKernel"))(&kernel, lib, name) == CUDA_SUCCESS,
              "cuLibraryGetKernel(%s)", name);
        loaded = (void *)lib;
        unload_with = "cuLibraryUnload";
        return (void *)kernel;
    }
    CUmodule m = NULL;
    CUfunction f = NULL;
    CHECK(((ModuleLoadFn)driver_symbol("cuModuleLoadData"))(&m, ibp_fill_ptx) == CUDA_SUCCESS,
          "cuModuleLoadData");
    CHECK(((ModuleGetFunctionFn)driver_symbol("cuModuleGetFunction"))(&f, m, name) == CUDA_SUCCESS,
          "cuModuleGetFunction(%s)", name);
    loaded = (void *)m;
    unload_with = "cuModuleUnload";
    return (void *)f;
}

/* value into words 32-bit words from dst, launched on s as `how` says. */
static void fill(const char *how, void *kernel, uint32_t *dst, uint32_t value, uint64_t words, cudaStream_t s)
{
    void *params[] = {&dst, &value, &words};
    const dim3 grid = {16, 1, 1}, block = {128, 1, 1};
    if (!strcmp(how, "runtime") || !strcmp(how, "none") || !strcmp(how, "graph") ||
        !strcmp(how, "graph-update") || !strcmp(how, "graph-device-node")) {
        CHECK_CUDA(cudaLaunchKernel(kernel, grid, block, params, 0, s));
    } else if (!strcmp(how, "runtime-ex")) {
        const cudaLaunchConfig_t config = {.gridDim = grid, .blockDim = block, .stream = s};
        CHECK_CUDA(cudaLaunchKernelExC(&config, kernel, params));
    } else if (!strcmp(how, "struct")) {
        IbpFillArgs a = {.tag = 0x1234, .dst = dst, .value = value, .words = (uint32_t)words};
        void *one[] = {&a};
        CHECK_CUDA(cudaLaunchKernel(kernel, grid, block, one, 0, s));
    } else if (!strcmp(how, "driver") || !strcmp(how, "driver-kernel") || !strcmp(how, "graph-driver") ||
               !strcmp(how, "graph-update-driver")) {
        const CUresult r = ((LaunchFn)driver_symbol("cuLaunchKernel"))((CUfunction)kernel, 16, 1, 1, 128, 1,
                                                                       1, 0, (CUstream)s, params, NULL);
        CHECK(r == CUDA_SUCCESS, "cuLaunchKernel: %d", (int)r);
    } else if (!strcmp(how, "extra")) {
        struct {
            uint32_t *dst;
            uint32_t value, pad;
            uint64_t words;
        } buf = {dst, value, 0, words};
        size_t size = sizeof(buf);
        void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                         CU_LAUNCH_PARAM_END};
        const CUresult r = ((LaunchFn)driver_symbol("cuLaunchKernel"))((CUfunction)kernel, 16, 1, 1, 128, 1,
                                                                       1, 0, (CUstream)s, NULL, extra);
        CHECK(r == CUDA_SUCCESS, "cuLaunchKernel with extra: %d", (int)r);
    } else if (!strcmp(how, "driver-ex")) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult status;
        CHECK(((GetProcFn)driver_symbol("cuGetProcAddress_v2"))("cuLaunchKernelEx", &fn, 12000, 0, &status) ==
                      CUDA_SUCCESS &&
                  fn,
              "cuGetProcAddress_v2(cuLaunchKernelEx)");
        const CUlaunchConfig config = {.gridDimX = 16,
                                       .gridDimY = 1,
                                       .gridDimZ = 1,
                                       .blockDimX = 128,
                                       .blockDimY = 1,
                                       .blockDimZ = 1,
                                       .hStream = (CUstream)s};
        const CUresult r = ((LaunchExFn)fn)(&config, (CUfunction)kernel, params, NULL);
        CHECK(r == CUDA_SUCCESS, "cuLaunchKernelEx: %d", (int)r);
    } else {
        CHECK(0,
              "KERNEL_WRITES_HOW=%s is not one of runtime, runtime-ex, struct, driver, driver-kernel, extra, "
              "driver-ex, none, graph, graph-driver, graph-update, graph-update-driver, graph-device-node",
              how);
    }
}

/* k copies of the region, each checked byte for byte; returns the compressed bytes they sent. */
static uint64_t copies(PreloadTotalsFn totals, const PreloadWaiting *w, int k)
{
    return preload_round_trips(totals, w, dev_buf, back, k);
}

/* The graph ways: a graph of one fill, captured on its own stream writing dst (the region, or
 * device memory for the updates, then moved into the region); launched on w's stream once the
 * region is compressed, and the copies behind it checked. */
static void graph_round(const char *how, void *kernel, PreloadTotalsFn totals, PreloadWaiting *w,
                        uint32_t *region, uint32_t *dev_words, uint64_t words)
{
    const int update = strstr(how, "update") != NULL, device_node = !strcmp(how, "graph-device-node");
    const uint32_t value = 0x6b1e0000u;
    cudaStream_t cs;
    CHECK_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    cudaGraph_t graph = NULL;
    CHECK_CUDA(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    fill(how, kernel, update || device_node ? dev_words : region, value, words, cs);
    CHECK_CUDA(cudaStreamEndCapture(cs, &graph));
    if (device_node) {
        cudaGraphNode_t node = NULL;
        size_t count = 1;
        CHECK_CUDA(cudaGraphGetNodes(graph, &node, &count));
        cudaKernelNodeAttrValue v;
        memset(&v, 0, sizeof(v));
        v.deviceUpdatableKernelNode.deviceUpdatable = 1;
        const cudaError_t err =
            cudaGraphKernelNodeSetAttribute(node, cudaLaunchAttributeDeviceUpdatableKernelNode, &v);
        if (err != cudaSuccess) {
            printf("kernel_writes: %s: the device refused a device-updatable kernel node (%s), skipped\n",
                   how, cudaGetErrorName(err));
            exit(77);
        }
    }
    cudaGraphExec_t exec = NULL;
    CHECK_CUDA(cudaGraphInstantiateWithFlags(&exec, graph, 0));
    if (update) {
        CHECK(copies(totals, w, 2) > 0, "%s: copies went raw before the graph wrote the region", how);
        cudaGraphNode_t node = NULL;
        size_t count = 1;
        CHECK_CUDA(cudaGraphGetNodes(graph, &node, &count));
        CHECK(count == 1, "%s: the graph has %zu nodes", how, count);
        void *params[] = {&region, (void *)&value, &words};
        if (!strcmp(how, "graph-update")) {
            const struct cudaKernelNodeParams p = {
                .func = kernel, .gridDim = {16, 1, 1}, .blockDim = {128, 1, 1}, .kernelParams = params};
            CHECK_CUDA(cudaGraphExecKernelNodeSetParams(exec, node, &p));
        } else {
            const CUDA_KERNEL_NODE_PARAMS p = {.func = (CUfunction)kernel,
                                               .gridDimX = 16,
                                               .gridDimY = 1,
                                               .gridDimZ = 1,
                                               .blockDimX = 128,
                                               .blockDimY = 1,
                                               .blockDimZ = 1,
                                               .kernelParams = params};
            const CUresult r = ((ExecKernelFn)driver_symbol("cuGraphExecKernelNodeSetParams_v2"))(
                (CUgraphExec)exec, (CUgraphNode)node, &p);
            CHECK(r == CUDA_SUCCESS, "cuGraphExecKernelNodeSetParams_v2: %d", (int)r);
        }
    }
    CHECK_CUDA(cudaGraphLaunch(exec, w->s));
    const uint64_t sent = copies(totals, w, 2);
    if (device_node) {
        CHECK(sent == 0, "%s: copies went compressed (%llu bytes) after a graph the device may re-point ran",
              how, (unsigned long long)sent);
        CHECK_CUDA(cudaGraphExecDestroy(exec));
        CHECK_CUDA(cudaGraphDestroy(graph));
        CHECK_CUDA(cudaStreamDestroy(cs));
        return;
    }
    for (size_t i = 0; i < words; i++)
        CHECK(region[i] == value, "%s: word %zu of the graph's stores is 0x%08x, expected 0x%08x", how, i,
              region[i], value);
    CHECK_CUDA(cudaGraphExecDestroy(exec));
    CHECK_CUDA(cudaGraphDestroy(graph));
    CHECK_CUDA(cudaStreamDestroy(cs));
}

int main(void)
{
    const PreloadTotalsFn totals = preload_compression_or_skip("kernel_writes", 1);
    const char *how = getenv("KERNEL_WRITES_HOW");
    if (!how)
        how = "runtime";
    const int none = !strcmp(how, "none");
    /* 4-byte stores at an offset that is no block's start, over blocks' edges. */
    const size_t n = (4u << 20) + 1000, off = (1u << 20) + 3 * 4096 + 4, words = ((40u << 10) + 8) / 4;
    uint8_t *host = NULL;
    void *dev_words = NULL;
    CHECK_CUDA(cudaHostAlloc((void **)&host, n, cudaHostAllocDefault));
    CHECK_CUDA(cudaMalloc(&dev_buf, n));
    CHECK_CUDA(cudaMalloc(&dev_words, words * 4));
    back = malloc(n);
    CHECK(back != NULL, "malloc");
    preload_fill_weights(host, n);
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    PreloadWaiting w = {.host = host, .n = n, .s = s};
    void *const kernel = load_kernel(how, strcmp(how, "struct") ? "ibp_test_fill" : "ibp_test_fill_struct");
    const unsigned waited = preload_wait_compressed("kernel_writes", how, totals, copy_all, &w);

    uint64_t sent = 0;
    if (!strncmp(how, "graph", 5))
        graph_round(how, kernel, totals, &w, (uint32_t *)(void *)(host + off), dev_words, words);
    for (uint32_t round = 0; strncmp(how, "graph", 5) && round < 3; round++) {
        const uint32_t value = 0x3c5a0000u + round * 0x0101u;
        uint32_t *const dst = none ? dev_words : (uint32_t *)(void *)(host + off);
        fill(how, kernel, dst, value, words, s);
        /* The copies follow on s: each must deliver what the kernel stored (copy_all checks every
         * byte against the region, which the kernel has written once s has passed it). */
        sent += copies(totals, &w, 2);
        if (!none)
            for (size_t i = 0; i < words; i++) {
                uint32_t got;
                memcpy(&got, host + off + 4 * i, 4);
                CHECK(got == value, "%s: word %zu of the kernel's stores is 0x%08x, expected 0x%08x", how, i,
                      got, value);
            }
    }
    if (none)
        CHECK(sent > 0, "none: the region went raw for a kernel that writes only device memory");
    printf("kernel_writes: %s: compressed after %u copies; each copy after a launch delivered the kernel's "
           "bytes (%llu bytes sent compressed)\n",
           how, waited, (unsigned long long)sent);

    CHECK_CUDA(cudaStreamDestroy(s));
    if (!strcmp(unload_with, "cudaLibraryUnload")) {
        CHECK_CUDA(cudaLibraryUnload((cudaLibrary_t)loaded));
    } else {
        typedef CUresult (*UnloadFn)(void *);
        CHECK(((UnloadFn)driver_symbol(unload_with))(loaded) == CUDA_SUCCESS, "%s", unload_with);
    }
    CHECK_CUDA(cudaFree(dev_words));
    CHECK_CUDA(cudaFree(dev_buf));
    CHECK_CUDA(cudaFreeHost(host));
    free(back);
    return 0;
}
