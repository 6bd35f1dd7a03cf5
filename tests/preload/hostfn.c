/* SPDX-License-Identifier: MIT
 * ibpshim: a host function (cudaLaunchHostFunc, cudaStreamAddCallback, the driver's
 * cuLaunchHostFunc and cuStreamAddCallback, legacy and _ptsz, or a graph's host node) that
 * rewrites a compressed region before a copy of it in stream order: the copy delivers the new
 * bytes; so does a copy after a graph's device-to-host copy or stream memory operations (value
 * writes) into the region. */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include "tests/preload/preload_check.h"

typedef cudaError_t (*LaunchHostFuncFn)(cudaStream_t stream, cudaHostFn_t fn, void *user_data);
typedef cudaError_t (*AddCallbackFn)(cudaStream_t stream, cudaStreamCallback_t cb, void *user_data,
                                     unsigned int flags);
typedef cudaError_t (*MemcpyAsyncFn)(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                                     cudaStream_t stream);
typedef CUresult (*CuLaunchHostFuncFn)(CUstream stream, CUhostFn fn, void *user_data);
typedef CUresult (*GetProcAddressFn)(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult *status);
typedef CUresult (*CuGraphInstantiateFn)(CUgraphExec *exec, CUgraph graph, unsigned long long flags);
typedef CUresult (*CuGraphInstantiateParamsFn)(CUgraphExec *exec, CUgraph graph,
                                               CUDA_GRAPH_INSTANTIATE_PARAMS *params);
typedef CUresult (*CuGraphExecUpdateFn)(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo *info);
typedef CUresult (*CuGraphExecMemcpyFn)(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D *p,
                                        CUcontext ctx);
typedef CUresult (*CuGraphInstantiateV1Fn)(CUgraphExec *exec, CUgraph graph, CUgraphNode *error_node,
                                           char *log, size_t log_size);
typedef CUresult (*CuGraphExecUpdateV1Fn)(CUgraphExec exec, CUgraph graph, CUgraphNode *error_node,
                                          CUgraphExecUpdateResult *result);
typedef CUresult (*CuGraphExecChildFn)(CUgraphExec exec, CUgraphNode node, CUgraph child);
typedef CUresult (*CuGraphExecNodeFn)(CUgraphExec exec, CUgraphNode node, CUgraphNodeParams *p);
typedef CUresult (*CuGraphLaunchFn)(CUgraphExec exec, CUstream stream);
typedef CUresult (*CuGraphExecDestroyFn)(CUgraphExec exec);
typedef CUresult (*CuAddCallbackFn)(CUstream stream, CUstreamCallback cb, void *user_data,
                                    unsigned int flags);
typedef CUresult (*CuWriteValue32Fn)(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags);
typedef CUresult (*CuBatchMemOpFn)(CUstream stream, unsigned int count, CUstreamBatchMemOpParams *ops,
                                   unsigned int flags);
typedef CUresult (*CuMemOpNodeGetParamsFn)(CUgraphNode node, CUDA_BATCH_MEM_OP_NODE_PARAMS *p);
typedef CUresult (*CuGraphExecMemOpFn)(CUgraphExec exec, CUgraphNode node,
                                       const CUDA_BATCH_MEM_OP_NODE_PARAMS *p);

/* What the host function does once opened: writes patch over [dst, dst + len). */
typedef struct Gate {
    atomic_int open;
    atomic_int ran;
    atomic_int wrong_args; /* the callback got another stream or a failure status */
    cudaStream_t stream;   /* the stream the callback must be given */
    uint8_t *dst;
    const uint8_t *patch;
    size_t len;
} Gate;

static void gate_run(Gate *g)
{
    const double start = preload_now();
    while (!atomic_load(&g->open) && preload_now() - start < 60.0)
        usleep(1000);
    memcpy(g->dst, g->patch, g->len);
    atomic_store(&g->ran, 1);
}

static void CUDART_CB gate_host_fn(void *arg)
{
    gate_run(arg);
}

static void CUDART_CB gate_callback(cudaStream_t stream, cudaError_t status, void *arg)
{
    Gate *g = arg;
    if (stream != g->stream || status != cudaSuccess)
        atomic_store(&g->wrong_args, 1);
    gate_run(g);
}

/* The driver's callback: given the stream as the application passed it where that is a stream it
 * created (the driver's name for a default stream may differ), and success. */
static void CUDA_CB gate_cu_callback(CUstream stream, CUresult status, void *arg)
{
    Gate *g = arg;
    if ((g->stream && stream != (CUstream)g->stream) || status != CUDA_SUCCESS)
        atomic_store(&g->wrong_args, 1);
    gate_run(g);
}

static void CUDART_CB count_callback(cudaStream_t stream, cudaError_t status, void *arg)
{
    (void)stream;
    (void)status;
    atomic_fetch_add((atomic_int *)arg, 1);
}

static void CUDART_CB count_host_fn(void *arg)
{
    atomic_fetch_add((atomic_int *)arg, 1);
}

static void *lookup(void *handle, const char *name)
{
    void *fn = dlsym(handle, name);
    CHECK(fn != NULL, "%s not found", name);
    return fn;
}

/* Whether the loaded driver still exports CUDA 10-11's graph calls (a newer one may not). */
static int driver_has_v1_graph_calls(void)
{
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return cuda && dlsym(cuda, "cuGraphInstantiate") && dlsym(cuda, "cuGraphInstantiate_v2") &&
           dlsym(cuda, "cuGraphExecUpdate");
}

static void *dev_buf;
static uint8_t *back;

static void copy_all(void *arg)
{
    preload_round_trip(arg, dev_buf, back);
}

/* The hooks answer bad arguments exactly as the runtime does, and a refused function leaves no
 * pending host function behind (the copies after this are compressed again). */
static void check_errors(cudaStream_t s)
{
    void *rt = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
    CHECK(rt != NULL, "libcudart.so.13 is not loaded");
    const char *names[] = {"cudaLaunchHostFunc", "cudaLaunchHostFunc_ptsz", "cudaStreamAddCallback",
                           "cudaStreamAddCallback_ptsz"};
    void *hook[4], *real[4];
    for (int i = 0; i < 4; i++) {
        hook[i] = lookup(RTLD_DEFAULT, names[i]);
        real[i] = lookup(rt, names[i]);
        CHECK(hook[i] != real[i], "%s is not hooked", names[i]);
    }
    /* A destroyed stream's handle is only safe to pass to the fake. */
    cudaStream_t gone = NULL;
    const int fake = dlsym(RTLD_DEFAULT, "fakecuda_stats") != NULL;
    if (fake) {
        CHECK_CUDA(cudaStreamCreate(&gone));
        CHECK_CUDA(cudaStreamDestroy(gone));
    }
    atomic_int calls = 0;
    for (int i = 0; i < 4; i++) {
        cudaError_t got[3], want[3];
        if (i < 2) {
            got[0] = ((LaunchHostFuncFn)hook[i])(s, NULL, NULL);
            want[0] = ((LaunchHostFuncFn)real[i])(s, NULL, NULL);
            got[1] = fake ? ((LaunchHostFuncFn)hook[i])(gone, gate_host_fn, NULL) : cudaErrorInvalidValue;
            want[1] = fake ? ((LaunchHostFuncFn)real[i])(gone, gate_host_fn, NULL) : cudaErrorInvalidValue;
            got[2] = want[2] = cudaErrorInvalidValue;
        } else {
            got[0] = ((AddCallbackFn)hook[i])(s, NULL, NULL, 0);
            want[0] = ((AddCallbackFn)real[i])(s, NULL, NULL, 0);
            got[1] = fake ? ((AddCallbackFn)hook[i])(gone, count_callback, &calls, 0) : cudaErrorInvalidValue;
            want[1] =
                fake ? ((AddCallbackFn)real[i])(gone, count_callback, &calls, 0) : cudaErrorInvalidValue;
            /* flags must be 0: the wrapped call is refused and undone. */
            got[2] = ((AddCallbackFn)hook[i])(s, count_callback, &calls, 1);
            want[2] = ((AddCallbackFn)real[i])(s, count_callback, &calls, 1);
        }
        for (int k = 0; k < 3; k++)
            CHECK(got[k] == want[k] && got[k] != cudaSuccess, "%s, case %d: %s under the shim, %s without",
                  names[i], k, cudaGetErrorName(got[k]), cudaGetErrorName(want[k]));
        cudaGetLastError();
    }
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK(atomic_load(&calls) == 0, "a refused callback ran %d times", atomic_load(&calls));
}

/* A host function captured into a graph runs at every launch of it, long after the call: it must
 * reach the runtime as given, and leave nothing pending behind (the copies after it go compressed). */
static void check_capture(void)
{
    cudaStream_t cs;
    CHECK_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    atomic_int runs = 0;
    CHECK_CUDA(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    CHECK_CUDA(cudaLaunchHostFunc(cs, count_host_fn, &runs));
    cudaGraph_t graph = NULL;
    CHECK_CUDA(cudaStreamEndCapture(cs, &graph));
    CHECK(atomic_load(&runs) == 0, "a captured host function ran at capture");
    cudaGraphExec_t exec = NULL;
    CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 3; i++) {
        CHECK_CUDA(cudaGraphLaunch(exec, cs));
        CHECK_CUDA(cudaStreamSynchronize(cs));
    }
    CHECK(atomic_load(&runs) == 3, "a captured host function ran %d times in 3 graph launches",
          atomic_load(&runs));
    CHECK_CUDA(cudaGraphExecDestroy(exec));
    CHECK_CUDA(cudaGraphDestroy(graph));
    CHECK_CUDA(cudaStreamDestroy(cs));
}

/* One variant: host function (driver: through the driver API's hooks), then the copy behind it,
 * in one stream's order. */
static void check_variant(const char *name, int ptsz, int callback, int driver, uint8_t *host, size_t n,
                          cudaStream_t s, PreloadTotalsFn totals)
{
    const MemcpyAsyncFn copy =
        (MemcpyAsyncFn)lookup(RTLD_DEFAULT, ptsz ? "cudaMemcpyAsync_ptsz" : "cudaMemcpyAsync");
    /* _ptsz on stream 0 is the calling thread's default stream. */
    const cudaStream_t stream = ptsz ? NULL : s;
    const cudaStream_t memset_stream = ptsz ? cudaStreamPerThread : s;
    /* 64 KiB and a bit at an odd offset: the copy after it still has a long run to compress. */
    const size_t off = (1u << 20) + 3 * 4096 + 17, len = (64u << 10) + 5;
    uint8_t *patch = malloc(len);
    CHECK(patch != NULL, "malloc");
    for (size_t i = 0; i < len; i++)
        patch[i] = (uint8_t)~host[off + i];
    Gate gate = {.stream = stream, .dst = host + off, .patch = patch, .len = len};

    IbpshimTransferTotals a, b;
    CHECK_CUDA(cudaMemsetAsync(dev_buf, 0x5c, n, memset_stream));
    if (driver) {
        void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        CHECK(cuda != NULL, "libcuda.so.1 is not loaded");
        const char *const symbol = callback ? (ptsz ? "cuStreamAddCallback_ptsz" : "cuStreamAddCallback")
                                            : (ptsz ? "cuLaunchHostFunc_ptsz" : "cuLaunchHostFunc");
        void *const hook = lookup(RTLD_DEFAULT, symbol);
        CHECK(hook != lookup(cuda, symbol), "%s is not hooked", symbol);
        /* Asked for through cuGetProcAddress, the driver's answer is the hook too. */
        const GetProcAddressFn gpa = (GetProcAddressFn)lookup(RTLD_DEFAULT, "cuGetProcAddress_v2");
        void *pfn = NULL;
        CUdriverProcAddressQueryResult status;
        CHECK(gpa(callback ? "cuStreamAddCallback" : "cuLaunchHostFunc", &pfn, 12000,
                  ptsz ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                  &status) == CUDA_SUCCESS &&
                  pfn == hook,
              "cuGetProcAddress does not hand out the hook of %s", symbol);
        const CUresult r = callback ? ((CuAddCallbackFn)hook)((CUstream)stream, gate_cu_callback, &gate, 0)
                                    : ((CuLaunchHostFuncFn)hook)((CUstream)stream, gate_host_fn, &gate);
        CHECK(r == CUDA_SUCCESS, "%s failed (%d)", symbol, (int)r);
    } else if (callback) {
        const AddCallbackFn add = (AddCallbackFn)lookup(RTLD_DEFAULT, ptsz ? "cudaStreamAddCallback_ptsz"
                                                                           : "cudaStreamAddCallback");
        CHECK_CUDA(add(stream, gate_callback, &gate, 0));
    } else {
        const LaunchHostFuncFn launch =
            (LaunchHostFuncFn)lookup(RTLD_DEFAULT, ptsz ? "cudaLaunchHostFunc_ptsz" : "cudaLaunchHostFunc");
        CHECK_CUDA(launch(stream, gate_host_fn, &gate));
    }
    CHECK(totals(&a) == 0, "totals");
    CHECK_CUDA(copy(dev_buf, host, n, cudaMemcpyHostToDevice, stream));
    CHECK(totals(&b) == 0, "totals");
    CHECK(!atomic_load(&gate.ran), "%s: the host function ran before it was released", name);
    atomic_store(&gate.open, 1);
    CHECK_CUDA(copy(back, dev_buf, n, cudaMemcpyDeviceToHost, stream));
    CHECK_CUDA(ptsz ? cudaStreamSynchronize(cudaStreamPerThread) : cudaStreamSynchronize(s));
    CHECK(atomic_load(&gate.ran), "%s: the host function did not run", name);
    CHECK(!atomic_load(&gate.wrong_args), "%s: the callback got another stream or a failure", name);
    for (size_t i = 0; i < n; i++)
        CHECK(back[i] == host[i], "%s: byte %zu is 0x%02x, expected 0x%02x (%s)", name, i, back[i], host[i],
              i >= off && i < off + len ? "written by the host function" : "unchanged");
    CHECK(b.copies == a.copies + 1 && b.compressed_in == a.compressed_in,
          "%s: the copy behind a pending host function went compressed (%llu bytes)", name,
          (unsigned long long)(b.compressed_in - a.compressed_in));

    /* Once it has returned, copies go compressed again (all but the blocks it wrote). */
    PreloadWaiting waiting = {.host = host, .n = n, .s = s};
    const unsigned copies = preload_wait_compressed("hostfn", name, totals, copy_all, &waiting);
    printf("hostfn: %s: copy behind it raw and correct, compressed again after %u copies\n", name, copies);
    free(patch);
}

/* GRAPH_DRIVER and after: the driver's cuGraphInstantiateWithFlags, cuGraphInstantiateWithParams
 * or CUDA 10-11's cuGraphInstantiate, and the graph launched and
 * destroyed through the driver too (its hooks). */
typedef enum GraphMake {
    GRAPH_INSTANTIATE,
    GRAPH_WITH_FLAGS,
    GRAPH_WITH_PARAMS,
    GRAPH_DRIVER,
    GRAPH_DRIVER_PARAMS,
    GRAPH_DRIVER_V1,     /* CUDA 10's cuGraphInstantiate, by symbol */
    GRAPH_DRIVER_V1_PROC /* what cuGetProcAddress answers a CUDA 11 program (cuGraphInstantiate_v2) */
} GraphMake;

/* The driver's hook of symbol, checked to be a hook. */
static void *driver_hook(const char *symbol)
{
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(cuda != NULL, "libcuda.so.1 is not loaded");
    void *const hook = lookup(RTLD_DEFAULT, symbol);
    CHECK(hook != lookup(cuda, symbol), "%s is not hooked", symbol);
    return hook;
}

static void graph_launch(cudaGraphExec_t exec, cudaStream_t s, GraphMake how)
{
    if (how >= GRAPH_DRIVER) {
        const CUresult r = ((CuGraphLaunchFn)driver_hook("cuGraphLaunch"))((CUgraphExec)exec, (CUstream)s);
        CHECK(r == CUDA_SUCCESS, "cuGraphLaunch failed (%d)", (int)r);
    } else {
        CHECK_CUDA(cudaGraphLaunch(exec, s));
    }
}

static void graph_exec_destroy(cudaGraphExec_t exec, GraphMake how)
{
    if (how >= GRAPH_DRIVER) {
        const CUresult r = ((CuGraphExecDestroyFn)driver_hook("cuGraphExecDestroy"))((CUgraphExec)exec);
        CHECK(r == CUDA_SUCCESS, "cuGraphExecDestroy failed (%d)", (int)r);
    } else {
        CHECK_CUDA(cudaGraphExecDestroy(exec));
    }
}

static cudaGraphExec_t instantiate(cudaGraph_t graph, GraphMake how)
{
    cudaGraphExec_t exec = NULL;
    if (how == GRAPH_DRIVER_V1 || how == GRAPH_DRIVER_V1_PROC) {
        void *fn = driver_hook("cuGraphInstantiate");
        if (how == GRAPH_DRIVER_V1_PROC) {
            /* The hook of the old form, exported under both of its names.  The driver answers the
             * name with it for CUDA 12 and 13 too (their cuda.h maps the name at compile time). */
            const GetProcAddressFn gpa = (GetProcAddressFn)lookup(RTLD_DEFAULT, "cuGetProcAddress_v2");
            CUdriverProcAddressQueryResult status;
            for (int version = 11080; version <= 13000; version += 960) {
                CHECK(
                    gpa("cuGraphInstantiate", &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) ==
                            CUDA_SUCCESS &&
                        (fn == driver_hook("cuGraphInstantiate_v2") ||
                         fn == driver_hook("cuGraphInstantiate")),
                    "cuGetProcAddress does not hand out the hook of the old cuGraphInstantiate (version %d)",
                    version);
            }
        }
        CUgraphNode error_node = NULL;
        char log[64];
        const CUresult r =
            ((CuGraphInstantiateV1Fn)fn)((CUgraphExec *)&exec, (CUgraph)graph, &error_node, log, sizeof(log));
        CHECK(r == CUDA_SUCCESS, "cuGraphInstantiate (CUDA 10-11) failed (%d)", (int)r);
    } else if (how == GRAPH_DRIVER_PARAMS) {
        CUDA_GRAPH_INSTANTIATE_PARAMS params = {.flags = 0};
        const CUresult r = ((CuGraphInstantiateParamsFn)driver_hook("cuGraphInstantiateWithParams"))(
            (CUgraphExec *)&exec, (CUgraph)graph, &params);
        CHECK(r == CUDA_SUCCESS && params.result_out == CUDA_GRAPH_INSTANTIATE_SUCCESS,
              "cuGraphInstantiateWithParams failed (%d, result %d)", (int)r, (int)params.result_out);
    } else if (how == GRAPH_DRIVER) {
        void *const hook = driver_hook("cuGraphInstantiateWithFlags");
        /* What a program built for CUDA 12 asks for: cuda.h names cuGraphInstantiate so. */
        const GetProcAddressFn gpa = (GetProcAddressFn)lookup(RTLD_DEFAULT, "cuGetProcAddress_v2");
        void *pfn = NULL;
        CUdriverProcAddressQueryResult status;
        CHECK(gpa("cuGraphInstantiateWithFlags", &pfn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status) ==
                      CUDA_SUCCESS &&
                  pfn == hook,
              "cuGetProcAddress does not hand out the hook of cuGraphInstantiateWithFlags");
        const CUresult r = ((CuGraphInstantiateFn)hook)((CUgraphExec *)&exec, (CUgraph)graph, 0);
        CHECK(r == CUDA_SUCCESS, "cuGraphInstantiateWithFlags failed (%d)", (int)r);
    } else if (how == GRAPH_INSTANTIATE) {
        CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    } else if (how == GRAPH_WITH_FLAGS) {
        CHECK_CUDA(cudaGraphInstantiateWithFlags(&exec, graph, 0));
    } else {
        cudaGraphInstantiateParams params = {.flags = 0};
        CHECK_CUDA(cudaGraphInstantiateWithParams(&exec, graph, &params));
        CHECK(params.result_out == cudaGraphInstantiateSuccess, "instantiation reported %d",
              (int)params.result_out);
    }
    return exec;
}

/* A graph whose host node rewrites a compressed region, launched before a copy of the region in
 * stream order (twice: each launch is followed on its own): the copy delivers the node's bytes.
 * nested: the host node sits in a child graph.  Each variant has a region of its own, so that the
 * block the node writes is compressed when it runs. */
static void check_graph_host(const char *name, GraphMake how, int nested, size_t n, cudaStream_t s,
                             PreloadTotalsFn totals)
{
    const size_t off = (2u << 20) + 5 * 4096 + 3, len = (32u << 10) + 7;
    uint8_t *host = NULL, *patch = malloc(len);
    CHECK(patch != NULL, "malloc");
    CHECK_CUDA(cudaHostAlloc((void **)&host, n, cudaHostAllocDefault));
    preload_fill_weights(host, n);
    Gate gate = {.dst = host + off, .patch = patch, .len = len};
    cudaStream_t cs;
    CHECK_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    CHECK_CUDA(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    CHECK_CUDA(cudaLaunchHostFunc(cs, gate_host_fn, &gate));
    cudaGraph_t graph = NULL, child = NULL;
    CHECK_CUDA(cudaStreamEndCapture(cs, &graph));
    if (nested) {
        child = graph;
        CHECK_CUDA(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
        CHECK_CUDA(cudaMemsetAsync(dev_buf, 0, 16, cs));
        CHECK_CUDA(cudaStreamEndCapture(cs, &graph));
        cudaGraphNode_t node = NULL;
        CHECK_CUDA(cudaGraphAddChildGraphNode(&node, graph, NULL, 0, child));
    }
    const cudaGraphExec_t exec = instantiate(graph, how);
    PreloadWaiting waiting = {.host = host, .n = n, .s = s};
    preload_wait_compressed("hostfn", name, totals, copy_all, &waiting);
    for (int launch = 0; launch < 2; launch++) {
        for (size_t i = 0; i < len; i++)
            patch[i] = (uint8_t)(host[off + i] + 1 + launch);
        atomic_store(&gate.open, 0);
        atomic_store(&gate.ran, 0);
        IbpshimTransferTotals a, b;
        CHECK_CUDA(cudaMemsetAsync(dev_buf, 0x5c, n, s));
        graph_launch(exec, s, how);
        CHECK(totals(&a) == 0, "totals");
        CHECK_CUDA(cudaMemcpyAsync(dev_buf, host, n, cudaMemcpyHostToDevice, s));
        CHECK(totals(&b) == 0, "totals");
        CHECK(!atomic_load(&gate.ran), "%s: the host node ran before it was released", name);
        atomic_store(&gate.open, 1);
        CHECK_CUDA(cudaMemcpyAsync(back, dev_buf, n, cudaMemcpyDeviceToHost, s));
        CHECK_CUDA(cudaStreamSynchronize(s));
        CHECK(atomic_load(&gate.ran), "%s: the host node did not run", name);
        for (size_t i = 0; i < n; i++)
            CHECK(back[i] == host[i], "%s, launch %d: byte %zu is 0x%02x, expected 0x%02x (%s)", name, launch,
                  i, back[i], host[i], i >= off && i < off + len ? "written by the host node" : "unchanged");
        CHECK(b.copies == a.copies + 1 && b.compressed_in == a.compressed_in,
              "%s, launch %d: the copy behind a pending host node went compressed (%llu bytes)", name, launch,
              (unsigned long long)(b.compressed_in - a.compressed_in));
        const unsigned copies = preload_wait_compressed("hostfn", name, totals, copy_all, &waiting);
        printf("hostfn: %s, launch %d: copy behind it raw and correct, compressed again after %u copies\n",
               name, launch, copies);
    }
    graph_exec_destroy(exec, how);
    CHECK_CUDA(cudaGraphDestroy(graph));
    if (child)
        CHECK_CUDA(cudaGraphDestroy(child));
    CHECK_CUDA(cudaStreamDestroy(cs));
    CHECK_CUDA(cudaFreeHost(host));
    free(patch);
}

/* How an executable graph comes to copy into the region. */
typedef enum GraphRetarget {
    GRAPH_AS_CAPTURED,    /* captured so */
    GRAPH_EXEC_UPDATE,    /* made from a graph copying elsewhere, then cudaGraphExecUpdate */
    GRAPH_NODE_PARAMS,    /* made from a graph copying elsewhere, then cudaGraphExecMemcpyNodeSetParams1D */
    GRAPH_IN_CHILD,       /* the copy sits in a child graph */
    GRAPH_CHILD_PARAMS,   /* a child graph copying elsewhere, then cudaGraphExecChildGraphNodeSetParams */
    GRAPH_NODE_ANY,       /* made from a graph copying elsewhere, then cudaGraphExecNodeSetParams */
    GRAPH_NODE_ANY_CHILD, /* a child graph copying elsewhere, then cudaGraphExecNodeSetParams */
} GraphRetarget;

/* The node's own parameters with only the destination changed to dst: the driver refuses other
 * memory types than the node was made with. */
static CUDA_MEMCPY3D retargeted(cudaGraphNode_t node, void *dst)
{
    typedef CUresult (*MemcpyNodeGetParamsFn)(CUgraphNode, CUDA_MEMCPY3D *);
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(cuda != NULL, "libcuda.so.1 is not loaded");
    CUDA_MEMCPY3D p;
    CHECK(((MemcpyNodeGetParamsFn)lookup(cuda, "cuGraphMemcpyNodeGetParams"))((CUgraphNode)node, &p) ==
              CUDA_SUCCESS,
          "cuGraphMemcpyNodeGetParams");
    if (p.dstMemoryType == CU_MEMORYTYPE_HOST)
        p.dstHost = dst;
    else
        p.dstDevice = (CUdeviceptr)(uintptr_t)dst;
    return p;
}

static CUcontext current_context(void)
{
    typedef CUresult (*CtxGetCurrentFn)(CUcontext *);
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(cuda != NULL, "libcuda.so.1 is not loaded");
    CUcontext ctx = NULL;
    CHECK(((CtxGetCurrentFn)lookup(cuda, "cuCtxGetCurrent"))(&ctx) == CUDA_SUCCESS, "cuCtxGetCurrent");
    return ctx;
}

/* The one node of a graph captured with one call. */
static cudaGraphNode_t only_node(cudaGraph_t graph)
{
    cudaGraphNode_t node = NULL;
    size_t count = 1;
    CHECK_CUDA(cudaGraphGetNodes(graph, &node, &count));
    CHECK(count == 1 && node != NULL, "the captured graph has %zu nodes", count);
    return node;
}

/* Changes the node (a copy, or a child graph node) of exec with the call `how` names, through the
 * runtime or the driver, to copy into dst or to run graph `to`. */
static void retarget(cudaGraphExec_t exec, cudaGraphNode_t node, GraphRetarget how, int driver, void *dst,
                     const void *src, size_t len, cudaGraph_t to)
{
    if (how == GRAPH_NODE_PARAMS && driver) {
        const CUDA_MEMCPY3D p = retargeted(node, dst);
        const CUresult r = ((CuGraphExecMemcpyFn)driver_hook("cuGraphExecMemcpyNodeSetParams"))(
            (CUgraphExec)exec, (CUgraphNode)node, &p, current_context());
        CHECK(r == CUDA_SUCCESS, "cuGraphExecMemcpyNodeSetParams failed (%d)", (int)r);
    } else if (how == GRAPH_NODE_PARAMS) {
        CHECK_CUDA(cudaGraphExecMemcpyNodeSetParams1D(exec, node, dst, src, len, cudaMemcpyDeviceToHost));
    } else if (how == GRAPH_CHILD_PARAMS && driver) {
        const CUresult r = ((CuGraphExecChildFn)driver_hook("cuGraphExecChildGraphNodeSetParams"))(
            (CUgraphExec)exec, (CUgraphNode)node, (CUgraph)to);
        CHECK(r == CUDA_SUCCESS, "cuGraphExecChildGraphNodeSetParams failed (%d)", (int)r);
    } else if (how == GRAPH_CHILD_PARAMS) {
        CHECK_CUDA(cudaGraphExecChildGraphNodeSetParams(exec, node, to));
    } else if (driver) {
        CUgraphNodeParams p;
        memset(&p, 0, sizeof(p));
        if (how == GRAPH_NODE_ANY) {
            p.type = CU_GRAPH_NODE_TYPE_MEMCPY;
            p.memcpy.copyParams = retargeted(node, dst);
            p.memcpy.copyCtx = current_context();
        } else {
            p.type = CU_GRAPH_NODE_TYPE_GRAPH;
            p.graph.graph = (CUgraph)to;
        }
        const CUresult r = ((CuGraphExecNodeFn)driver_hook("cuGraphExecNodeSetParams"))(
            (CUgraphExec)exec, (CUgraphNode)node, &p);
        CHECK(r == CUDA_SUCCESS, "cuGraphExecNodeSetParams failed (%d)", (int)r);
    } else {
        struct cudaGraphNodeParams p;
        memset(&p, 0, sizeof(p));
        if (how == GRAPH_NODE_ANY) {
            /* The node's own parameters with only the destination changed, as above. */
            p.type = cudaGraphNodeTypeMemcpy;
            CHECK_CUDA(cudaGraphMemcpyNodeGetParams(node, &p.memcpy.copyParams));
            p.memcpy.copyParams.dstPtr.ptr = dst;
        } else {
            p.type = cudaGraphNodeTypeGraph;
            p.graph.graph = to;
        }
        CHECK_CUDA(cudaGraphExecNodeSetParams(exec, node, &p));
    }
}

/* A graph's device-to-host copy lands in a compressed region without a fault: later copies of
 * the region deliver the graph's bytes.  Each variant copies into a region of its own, so that
 * the block it writes is compressed when the graph runs (blocks written lately may stay raw a
 * while, which would deliver the right bytes whether or not the write was followed). */
static void check_graph_write(const char *name, GraphRetarget how, int driver, size_t n, cudaStream_t s,
                              PreloadTotalsFn totals)
{
    const GraphMake make = driver == 2 ? GRAPH_DRIVER_V1 : driver ? GRAPH_DRIVER : GRAPH_INSTANTIATE;
    const int update = how != GRAPH_AS_CAPTURED && how != GRAPH_IN_CHILD;
    const int child = how == GRAPH_IN_CHILD || how == GRAPH_CHILD_PARAMS || how == GRAPH_NODE_ANY_CHILD;
    const size_t off = (1u << 20) + 7 * 4096 + 9, len = (48u << 10) + 3;
    uint8_t *host = NULL, *patch = malloc(len), *elsewhere = NULL;
    void *dev_patch = NULL;
    CHECK(patch != NULL, "malloc");
    CHECK_CUDA(cudaHostAlloc((void **)&host, n, cudaHostAllocDefault));
    preload_fill_weights(host, n);
    CHECK_CUDA(cudaHostAlloc((void **)&elsewhere, len, cudaHostAllocDefault));
    CHECK_CUDA(cudaMalloc(&dev_patch, len));
    cudaStream_t cs;
    CHECK_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    cudaGraph_t graph[2] = {NULL, NULL};
    uint8_t *const dsts[2] = {elsewhere, host + off};
    for (int g = update ? 0 : 1; g < 2; g++) {
        CHECK_CUDA(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
        CHECK_CUDA(cudaMemcpyAsync(dsts[g], dev_patch, len, cudaMemcpyDeviceToHost, cs));
        CHECK_CUDA(cudaStreamEndCapture(cs, &graph[g]));
    }
    /* A parent graph holding the first graph as a child: the region's copy (GRAPH_IN_CHILD) or the
     * copy elsewhere, which the child node is then changed to run instead. */
    cudaGraph_t parent = NULL;
    cudaGraphNode_t child_node = NULL;
    if (child) {
        CHECK_CUDA(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
        CHECK_CUDA(cudaMemsetAsync(dev_buf, 0, 16, cs));
        CHECK_CUDA(cudaStreamEndCapture(cs, &parent));
        CHECK_CUDA(cudaGraphAddChildGraphNode(&child_node, parent, NULL, 0, graph[update ? 0 : 1]));
    }
    const cudaGraphExec_t exec = instantiate(parent ? parent : graph[update ? 0 : 1], make);
    if (how == GRAPH_EXEC_UPDATE && driver == 2) {
        CUgraphNode error_node = NULL;
        CUgraphExecUpdateResult result;
        const CUresult r = ((CuGraphExecUpdateV1Fn)driver_hook("cuGraphExecUpdate"))(
            (CUgraphExec)exec, (CUgraph)graph[1], &error_node, &result);
        CHECK(r == CUDA_SUCCESS && result == CU_GRAPH_EXEC_UPDATE_SUCCESS,
              "cuGraphExecUpdate (CUDA 10-11) failed (%d, result %d)", (int)r, (int)result);
    } else if (how == GRAPH_EXEC_UPDATE && driver) {
        CUgraphExecUpdateResultInfo info;
        const CUresult r = ((CuGraphExecUpdateFn)driver_hook("cuGraphExecUpdate_v2"))(
            (CUgraphExec)exec, (CUgraph)graph[1], &info);
        CHECK(r == CUDA_SUCCESS, "cuGraphExecUpdate failed (%d)", (int)r);
    } else if (how == GRAPH_EXEC_UPDATE) {
        cudaGraphExecUpdateResultInfo info;
        CHECK_CUDA(cudaGraphExecUpdate(exec, graph[1], &info));
    } else if (update) {
        retarget(exec, child ? child_node : only_node(graph[0]), how, driver, host + off, dev_patch, len,
                 graph[1]);
    }
    PreloadWaiting waiting = {.host = host, .n = n, .s = s};
    const unsigned copies = preload_wait_compressed("hostfn", name, totals, copy_all, &waiting);
    for (size_t i = 0; i < len; i++)
        patch[i] = (uint8_t)~host[off + i];
    CHECK_CUDA(cudaMemcpy(dev_patch, patch, len, cudaMemcpyHostToDevice));
    graph_launch(exec, s, make);
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK(memcmp(host + off, patch, len) == 0, "%s: the graph did not write the region", name);
    CHECK_CUDA(cudaMemsetAsync(dev_buf, 0x5c, n, s));
    CHECK_CUDA(cudaMemcpyAsync(dev_buf, host, n, cudaMemcpyHostToDevice, s));
    CHECK_CUDA(cudaMemcpyAsync(back, dev_buf, n, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    for (size_t i = 0; i < n; i++)
        CHECK(back[i] == host[i], "%s: byte %zu is 0x%02x, expected 0x%02x (%s)", name, i, back[i], host[i],
              i >= off && i < off + len ? "written by the graph" : "unchanged");
    printf("hostfn: %s: compressed after %u copies, the copy after the graph delivered its bytes\n", name,
           copies);
    graph_exec_destroy(exec, make);
    if (parent)
        CHECK_CUDA(cudaGraphDestroy(parent));
    for (int g = 0; g < 2; g++)
        if (graph[g])
            CHECK_CUDA(cudaGraphDestroy(graph[g]));
    CHECK_CUDA(cudaStreamDestroy(cs));
    CHECK_CUDA(cudaFree(dev_patch));
    CHECK_CUDA(cudaFreeHost(elsewhere));
    CHECK_CUDA(cudaFreeHost(host));
    free(patch);
}

/* Stream memory operations captured into a graph write a compressed region from the device when
 * it runs: a cuStreamWriteValue32 of 4 bytes and a cuStreamBatchMemOp of an 8- and a 4-byte write,
 * each at these offsets of its buffer. */
#define MEM_OPS 3
static const size_t mem_op_at[MEM_OPS] = {(1u << 20) + 4 * 4096 + 12, (1u << 20) + 9 * 4096 + 8,
                                          (3u << 20) + 20};
static const unsigned mem_op_bytes[MEM_OPS] = {4, 8, 4};

/* How the executable graph comes to write the region. */
typedef enum MemOpsHow {
    MEM_OPS_AS_CAPTURED, /* captured so */
    MEM_OPS_IN_CHILD,    /* captured so, in a child graph */
    MEM_OPS_EXEC_SET,    /* captured writing elsewhere, then cuGraphExecBatchMemOpNodeSetParams */
    MEM_OPS_NODE_ANY,    /* captured writing elsewhere, then cuGraphExecNodeSetParams */
} MemOpsHow;

static CUstreamBatchMemOpParams mem_op(uint8_t *base, int k, uint64_t value)
{
    CUstreamBatchMemOpParams op;
    memset(&op, 0, sizeof(op));
    op.writeValue.operation =
        mem_op_bytes[k] == 8 ? CU_STREAM_MEM_OP_WRITE_VALUE_64 : CU_STREAM_MEM_OP_WRITE_VALUE_32;
    op.writeValue.address = (CUdeviceptr)(uintptr_t)(base + mem_op_at[k]);
    if (mem_op_bytes[k] == 8)
        op.writeValue.value64 = value;
    else
        op.writeValue.value = (cuuint32_t)value;
    return op;
}

/* Captures the writes into base on cs.  Returns 0 when the driver does not capture stream memory
 * operations on this device. */
static int capture_mem_ops(cudaStream_t cs, uint8_t *base, const uint64_t values[MEM_OPS], cudaGraph_t *graph)
{
    CHECK_CUDA(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
    CUresult r = ((CuWriteValue32Fn)driver_hook("cuStreamWriteValue32_v2"))(
        (CUstream)cs, (CUdeviceptr)(uintptr_t)(base + mem_op_at[0]), (cuuint32_t)values[0], 0);
    if (r == CUDA_SUCCESS) {
        CUstreamBatchMemOpParams ops[2] = {mem_op(base, 1, values[1]), mem_op(base, 2, values[2])};
        r = ((CuBatchMemOpFn)driver_hook("cuStreamBatchMemOp_v2"))((CUstream)cs, 2, ops, 0);
    }
    *graph = NULL;
    const cudaError_t end = cudaStreamEndCapture(cs, graph);
    if (r == CUDA_ERROR_NOT_SUPPORTED) {
        if (*graph)
            CHECK_CUDA(cudaGraphDestroy(*graph));
        (void)cudaGetLastError();
        return 0;
    }
    CHECK(r == CUDA_SUCCESS, "capturing stream memory operations failed (%d)", (int)r);
    CHECK_CUDA(end);
    return 1;
}

/* Moves each write of exec's node `node` (of graph made writing `from`) to the same offset of to. */
static void move_mem_ops(cudaGraphExec_t exec, cudaGraphNode_t node, MemOpsHow how, const uint8_t *from,
                         uint8_t *to)
{
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(cuda != NULL, "libcuda.so.1 is not loaded");
    CUDA_BATCH_MEM_OP_NODE_PARAMS p;
    memset(&p, 0, sizeof(p));
    CHECK(((CuMemOpNodeGetParamsFn)lookup(cuda, "cuGraphBatchMemOpNodeGetParams"))((CUgraphNode)node, &p) ==
                  CUDA_SUCCESS &&
              p.count && p.count <= 2 && p.paramArray,
          "cuGraphBatchMemOpNodeGetParams");
    CUstreamBatchMemOpParams ops[2];
    memcpy(ops, p.paramArray, p.count * sizeof(ops[0]));
    for (unsigned i = 0; i < p.count; i++)
        ops[i].writeValue.address += (CUdeviceptr)(to - from);
    p.paramArray = ops;
    CUresult r;
    if (how == MEM_OPS_EXEC_SET) {
        r = ((CuGraphExecMemOpFn)driver_hook("cuGraphExecBatchMemOpNodeSetParams"))((CUgraphExec)exec,
                                                                                    (CUgraphNode)node, &p);
    } else {
        CUgraphNodeParams any;
        memset(&any, 0, sizeof(any));
        any.type = CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
        any.memOp.ctx = p.ctx;
        any.memOp.count = p.count;
        any.memOp.paramArray = p.paramArray;
        any.memOp.flags = p.flags;
        r = ((CuGraphExecNodeFn)driver_hook("cuGraphExecNodeSetParams"))((CUgraphExec)exec, (CUgraphNode)node,
                                                                         &any);
    }
    CHECK(r == CUDA_SUCCESS, "setting a stream memory operations node's parameters failed (%d)", (int)r);
}

/* Returns 0 when the driver does not capture stream memory operations on this device. */
static int check_graph_mem_ops(const char *name, MemOpsHow how, GraphMake make, size_t n, cudaStream_t s,
                               PreloadTotalsFn totals)
{
    const int moved = how == MEM_OPS_EXEC_SET || how == MEM_OPS_NODE_ANY;
    const size_t elsewhere_n = (4u << 20);
    uint8_t *host = NULL, *elsewhere = NULL;
    CHECK_CUDA(cudaHostAlloc((void **)&host, n, cudaHostAllocDefault));
    preload_fill_weights(host, n);
    CHECK_CUDA(cudaHostAlloc((void **)&elsewhere, elsewhere_n, cudaHostAllocDefault));
    memset(elsewhere, 0, elsewhere_n);
    uint64_t values[MEM_OPS];
    for (int k = 0; k < MEM_OPS; k++) {
        uint64_t v = 0;
        memcpy(&v, host + mem_op_at[k], mem_op_bytes[k]);
        values[k] = ~v;
    }
    cudaStream_t cs;
    CHECK_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    cudaGraph_t graph = NULL, parent = NULL;
    if (!capture_mem_ops(cs, moved ? elsewhere : host, values, &graph)) {
        CHECK_CUDA(cudaStreamDestroy(cs));
        CHECK_CUDA(cudaFreeHost(elsewhere));
        CHECK_CUDA(cudaFreeHost(host));
        return 0;
    }
    if (how == MEM_OPS_IN_CHILD) {
        CHECK_CUDA(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
        CHECK_CUDA(cudaMemsetAsync(dev_buf, 0, 16, cs));
        CHECK_CUDA(cudaStreamEndCapture(cs, &parent));
        cudaGraphNode_t child_node = NULL;
        CHECK_CUDA(cudaGraphAddChildGraphNode(&child_node, parent, NULL, 0, graph));
    }
    const cudaGraphExec_t exec = instantiate(parent ? parent : graph, make);
    if (moved) {
        cudaGraphNode_t nodes[2] = {NULL, NULL};
        size_t count = 2;
        CHECK_CUDA(cudaGraphGetNodes(graph, nodes, &count));
        CHECK(count == 2, "%s: the captured graph has %zu nodes", name, count);
        for (size_t i = 0; i < count; i++)
            move_mem_ops(exec, nodes[i], how, elsewhere, host);
    }
    PreloadWaiting waiting = {.host = host, .n = n, .s = s};
    const unsigned copies = preload_wait_compressed("hostfn", name, totals, copy_all, &waiting);
    graph_launch(exec, s, make);
    CHECK_CUDA(cudaStreamSynchronize(s));
    for (int k = 0; k < MEM_OPS; k++) {
        uint64_t v = 0;
        memcpy(&v, host + mem_op_at[k], mem_op_bytes[k]);
        CHECK(v == (mem_op_bytes[k] == 8 ? values[k] : (uint32_t)values[k]),
              "%s: the graph did not write the region at %zu", name, mem_op_at[k]);
    }
    CHECK_CUDA(cudaMemsetAsync(dev_buf, 0x5c, n, s));
    CHECK_CUDA(cudaMemcpyAsync(dev_buf, host, n, cudaMemcpyHostToDevice, s));
    CHECK_CUDA(cudaMemcpyAsync(back, dev_buf, n, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    for (size_t i = 0; i < n; i++)
        CHECK(back[i] == host[i], "%s: byte %zu is 0x%02x, expected 0x%02x", name, i, back[i], host[i]);
    printf("hostfn: %s: compressed after %u copies, the copy after the graph delivered its writes\n", name,
           copies);
    graph_exec_destroy(exec, make);
    if (parent)
        CHECK_CUDA(cudaGraphDestroy(parent));
    CHECK_CUDA(cudaGraphDestroy(graph));
    CHECK_CUDA(cudaStreamDestroy(cs));
    CHECK_CUDA(cudaFreeHost(elsewhere));
    CHECK_CUDA(cudaFreeHost(host));
    return 1;
}

int main(void)
{
    const PreloadTotalsFn totals = preload_compression_or_skip("hostfn", 1);
    const size_t n = (6u << 20) + 1000;
    uint8_t *host = NULL;
    CHECK_CUDA(cudaHostAlloc((void **)&host, n, cudaHostAllocDefault));
    CHECK_CUDA(cudaMalloc(&dev_buf, n));
    back = malloc(n);
    CHECK(back != NULL, "malloc");
    preload_fill_weights(host, n);
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreate(&s));

    check_errors(s);
    check_capture();
    PreloadWaiting waiting = {.host = host, .n = n, .s = s};
    preload_wait_compressed("hostfn", "the first compression", totals, copy_all, &waiting);
    check_variant("cudaLaunchHostFunc", 0, 0, 0, host, n, s, totals);
    check_variant("cudaLaunchHostFunc_ptsz", 1, 0, 0, host, n, s, totals);
    check_variant("cudaStreamAddCallback", 0, 1, 0, host, n, s, totals);
    check_variant("cudaStreamAddCallback_ptsz", 1, 1, 0, host, n, s, totals);
    check_variant("cuLaunchHostFunc", 0, 0, 1, host, n, s, totals);
    check_variant("cuLaunchHostFunc_ptsz", 1, 0, 1, host, n, s, totals);
    check_variant("cuStreamAddCallback", 0, 1, 1, host, n, s, totals);
    check_variant("cuStreamAddCallback_ptsz", 1, 1, 1, host, n, s, totals);
    check_graph_host("a host node (cudaGraphInstantiate)", GRAPH_INSTANTIATE, 0, n, s, totals);
    check_graph_host("a host node (cudaGraphInstantiateWithFlags)", GRAPH_WITH_FLAGS, 0, n, s, totals);
    check_graph_host("a host node (cudaGraphInstantiateWithParams)", GRAPH_WITH_PARAMS, 0, n, s, totals);
    check_graph_host("a host node in a child graph", GRAPH_INSTANTIATE, 1, n, s, totals);
    check_graph_host("a host node (cuGraphInstantiateWithFlags, cuGraphLaunch)", GRAPH_DRIVER, 0, n, s,
                     totals);
    check_graph_host("a host node (cuGraphInstantiateWithParams, cuGraphLaunch)", GRAPH_DRIVER_PARAMS, 0, n,
                     s, totals);
    if (driver_has_v1_graph_calls())
        check_graph_host("a host node (CUDA 11's cuGraphInstantiate from cuGetProcAddress, cuGraphLaunch)",
                         GRAPH_DRIVER_V1_PROC, 0, n, s, totals);
    else
        printf("hostfn: skipped CUDA 10-11's cuGraphInstantiate and cuGraphExecUpdate: the driver no longer "
               "exports them\n");
    check_graph_write("a graph's device-to-host copy", GRAPH_AS_CAPTURED, 0, n, s, totals);
    check_graph_write("a graph's device-to-host copy after cudaGraphExecUpdate", GRAPH_EXEC_UPDATE, 0, n, s,
                      totals);
    check_graph_write("a graph's device-to-host copy after cudaGraphExecMemcpyNodeSetParams1D",
                      GRAPH_NODE_PARAMS, 0, n, s, totals);
    check_graph_write("a child graph's device-to-host copy", GRAPH_IN_CHILD, 0, n, s, totals);
    check_graph_write("a graph's device-to-host copy (cuGraphInstantiateWithFlags, cuGraphLaunch)",
                      GRAPH_AS_CAPTURED, 1, n, s, totals);
    check_graph_write("a graph's device-to-host copy after cuGraphExecUpdate", GRAPH_EXEC_UPDATE, 1, n, s,
                      totals);
    check_graph_write("a graph's device-to-host copy after cuGraphExecMemcpyNodeSetParams", GRAPH_NODE_PARAMS,
                      1, n, s, totals);
    check_graph_write("a child graph's device-to-host copy after cudaGraphExecChildGraphNodeSetParams",
                      GRAPH_CHILD_PARAMS, 0, n, s, totals);
    check_graph_write("a child graph's device-to-host copy after cuGraphExecChildGraphNodeSetParams",
                      GRAPH_CHILD_PARAMS, 1, n, s, totals);
    check_graph_write("a graph's device-to-host copy after cudaGraphExecNodeSetParams", GRAPH_NODE_ANY, 0, n,
                      s, totals);
    check_graph_write("a graph's device-to-host copy after cuGraphExecNodeSetParams", GRAPH_NODE_ANY, 1, n, s,
                      totals);
    check_graph_write("a child graph's device-to-host copy after cudaGraphExecNodeSetParams",
                      GRAPH_NODE_ANY_CHILD, 0, n, s, totals);
    check_graph_write("a child graph's device-to-host copy after cuGraphExecNodeSetParams",
                      GRAPH_NODE_ANY_CHILD, 1, n, s, totals);
    if (driver_has_v1_graph_calls()) {
        check_graph_write("a graph's device-to-host copy (CUDA 10's cuGraphInstantiate)", GRAPH_AS_CAPTURED,
                          2, n, s, totals);
        check_graph_write("a graph's device-to-host copy (CUDA 10's cuGraphInstantiate, cuGraphExecUpdate)",
                          GRAPH_EXEC_UPDATE, 2, n, s, totals);
    }
    if (check_graph_mem_ops("captured stream memory operations (cudaGraphInstantiate)", MEM_OPS_AS_CAPTURED,
                            GRAPH_INSTANTIATE, n, s, totals)) {
        check_graph_mem_ops("captured stream memory operations (cuGraphInstantiateWithFlags, cuGraphLaunch)",
                            MEM_OPS_AS_CAPTURED, GRAPH_DRIVER, n, s, totals);
        check_graph_mem_ops("captured stream memory operations in a child graph", MEM_OPS_IN_CHILD,
                            GRAPH_INSTANTIATE, n, s, totals);
        check_graph_mem_ops("stream memory operations after cuGraphExecBatchMemOpNodeSetParams",
                            MEM_OPS_EXEC_SET, GRAPH_DRIVER, n, s, totals);
        check_graph_mem_ops("stream memory operations after cuGraphExecNodeSetParams", MEM_OPS_NODE_ANY,
                            GRAPH_INSTANTIATE, n, s, totals);
    } else {
        printf("hostfn: skipped captured stream memory operations: the driver does not capture them on this "
               "device\n");
    }
    printf("hostfn: ok\n");

    CHECK_CUDA(cudaStreamDestroy(s));
    CHECK_CUDA(cudaFree(dev_buf));
    CHECK_CUDA(cudaFreeHost(host));
    free(back);
    return 0;
}
