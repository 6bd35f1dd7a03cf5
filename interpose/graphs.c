/* SPDX-License-Identifier: MIT
 * ibpshim: executable graphs whose launches run host code or write host memory where the router
 * does not see it.
 *
 * A host node runs when the stream reaches the graph, long after cudaGraphLaunch returned: like a
 * host function it may rewrite a region a copy behind it reads, so while a launch of a graph with
 * host nodes is pending, copies that would go compressed go raw.  A memcpy or memset node that
 * writes host memory lands as a device-to-host copy does, without a fault: its bytes are marked
 * dirty at each launch and again once the stream has passed it.  What each executable graph does
 * is read once from its graph's nodes at instantiation (and at cudaGraphExecUpdate); a launch
 * costs one lookup in a table of the graphs that do either.  A graph instantiated for launches
 * from the device may run at any time no host call marks: when it writes a registered region (or
 * cannot be read), copies go raw from then on. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "interpose/launches.h"
#include "interpose/pitched.h"
#include "interpose/real.h"
#include "interpose/router.h"
#include "interpose/shim.h"
#include "kernels/driver.h"
#include "policy/engine.h"

static int graphs_oom;
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(elt) (graphs_oom = 1)
#include <uthash.h>

/* Child graphs nested deeper than this are not read: the graph is taken as unreadable. */
#define IBP_GRAPH_MAX_DEPTH 16

typedef struct IbpHostWrite {
    void *dst;
    size_t n;
} IbpHostWrite;

/* What launches of one executable graph do behind the router's back. */
typedef struct IbpGraphExec {
    UT_hash_handle hh;
    cudaGraphExec_t exec; /* the key */
    int host;             /* runs host nodes */
    int opaque;           /* holds nodes whose writes cannot be read (conditional bodies, errors) */
    int device_launch;    /* instantiated to be launchable from the device too */
    size_t nwrites;
    IbpHostWrite *writes; /* memcpy and memset nodes into host memory */
} IbpGraphExec;

static pthread_mutex_t graphs_mu = PTHREAD_MUTEX_INITIALIZER;
static IbpGraphExec *graphs;     /* under graphs_mu */
static atomic_size_t graphs_len; /* entries in graphs: launches skip the lock while it is 0 */

/* ---- Reading a graph ---- */

typedef struct IbpGraphScan {
    int host, opaque, device_launch;
    size_t nwrites, cap;
    IbpHostWrite *writes;
} IbpGraphScan;

/* Whether p is host memory: pinned (the driver says so) or unknown to the driver (pageable). */
static int is_host_memory(const IbpDriver *drv, uintptr_t p)
{
    unsigned int type = 0;
    if (drv->cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)p) != CUDA_SUCCESS)
        return 1;
    return type == CU_MEMORYTYPE_HOST;
}

/* The bytes d spans, from its first to its last, when they are host memory. */
static void scan_pitched(const IbpDriver *drv, IbpGraphScan *s, IbpPitched d)
{
    uintptr_t lo;
    const size_t n = ibp_pitched_span(d, &lo);
    if (!n || !is_host_memory(drv, lo))
        return;
    if (s->nwrites == s->cap) {
        const size_t cap = s->cap ? 2 * s->cap : 8;
        IbpHostWrite *const w = realloc(s->writes, cap * sizeof(*w));
        if (!w) {
            s->opaque = 1;
            return;
        }
        s->writes = w;
        s->cap = cap;
    }
    s->writes[s->nwrites++] = (IbpHostWrite){(void *)lo, n};
}

static void scan_memcpy(const IbpDriver *drv, CUgraphNode node, IbpGraphScan *s)
{
    CUDA_MEMCPY3D p;
    memset(&p, 0, sizeof(p));
    if (drv->cuGraphMemcpyNodeGetParams(node, &p) != CUDA_SUCCESS) {
        s->opaque = 1;
        return;
    }
    scan_pitched(drv, s,
                 ibp_pitched_driver(p.dstMemoryType, p.dstHost, p.dstDevice, p.dstXInBytes, p.dstY, p.dstZ,
                                    p.dstPitch, p.dstHeight, p.WidthInBytes, p.Height, p.Depth));
}

static void scan_memset(const IbpDriver *drv, CUgraphNode node, IbpGraphScan *s)
{
    CUDA_MEMSET_NODE_PARAMS p;
    memset(&p, 0, sizeof(p));
    if (drv->cuGraphMemsetNodeGetParams(node, &p) != CUDA_SUCCESS) {
        s->opaque = 1;
        return;
    }
    scan_pitched(drv, s,
                 ibp_pitched_memset((void *)(uintptr_t)p.dst, p.pitch, p.elementSize, p.width, p.height));
}

/* Stream memory operations: their value writes (ibp_pitched_mem_op); a kind newer than this
 * toolkit may write too, so it makes the graph opaque. */
static void scan_mem_op_array(const IbpDriver *drv, IbpGraphScan *s, const CUstreamBatchMemOpParams *ops,
                              unsigned count)
{
    if (count && !ops) {
        s->opaque = 1;
        return;
    }
    for (unsigned i = 0; i < count; i++) {
        int known;
        scan_pitched(drv, s, ibp_pitched_mem_op(&ops[i], &known));
        s->opaque |= !known;
    }
}

/* A node that stream memory operations were captured into (or that cuGraphAddBatchMemOpNode made). */
static void scan_mem_ops(const IbpDriver *drv, CUgraphNode node, IbpGraphScan *s)
{
    CUDA_BATCH_MEM_OP_NODE_PARAMS p;
    memset(&p, 0, sizeof(p));
    if (drv->cuGraphBatchMemOpNodeGetParams(node, &p) != CUDA_SUCCESS) {
        s->opaque = 1;
        return;
    }
    scan_mem_op_array(drv, s, p.paramArray, p.count);
}

/* A kernel node: the registered regions its arguments point into, each whole (launches.c).  Where
 * the driver cannot size the arguments this is said once, as for launches, and the graph stays
 * readable. */
static void scan_kernel_args(const IbpDriver *drv, IbpGraphScan *s, IbpArgsApi api, const void *func,
                             void **params, void **extra)
{
    IbpArgRegions r = {0};
    ibp_args_read(&r, api, func, params, extra);
    for (size_t i = 0; i < r.n; i++) {
        const IbpArgRegion *const g = ibp_args_at(&r, i);
        scan_pitched(drv, s, ibp_pitched_row((const void *)g->base, g->size));
    }
    ibp_args_noted(IBP_STREAM_API_LEGACY, &r, NULL, 0);
}

/* A kernel node the device may update (CUDA 12.4's device-updatable kernel nodes) can be pointed
 * anywhere by a kernel, with no host call to see: the graph cannot be read.  A driver that does
 * not know the attribute has no such nodes. */
static int device_updatable(const IbpDriver *drv, CUgraphNode node)
{
    CUkernelNodeAttrValue v;
    memset(&v, 0, sizeof(v));
    return drv->cuGraphKernelNodeGetAttribute(node, CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE, &v) ==
               CUDA_SUCCESS &&
           v.deviceUpdatableKernelNode.deviceUpdatable;
}

static void scan_kernel(const IbpDriver *drv, CUgraphNode node, IbpGraphScan *s)
{
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof(p));
    if (drv->cuGraphKernelNodeGetParams(node, &p) != CUDA_SUCCESS) {
        s->opaque = 1;
        return;
    }
    s->opaque |= device_updatable(drv, node);
    scan_kernel_args(drv, s, IBP_ARGS_DRIVER, p.func ? (const void *)p.func : (const void *)p.kern,
                     p.kernelParams, p.extra);
}

static void scan_graph(const IbpDriver *drv, CUgraph g, int depth, IbpGraphScan *s)
{
    size_t n = 0;
    if (depth > IBP_GRAPH_MAX_DEPTH || drv->cuGraphGetNodes(g, NULL, &n) != CUDA_SUCCESS) {
        s->opaque = 1;
        return;
    }
    if (!n)
        return;
    CUgraphNode *const nodes = calloc(n, sizeof(*nodes));
    if (!nodes || drv->cuGraphGetNodes(g, nodes, &n) != CUDA_SUCCESS) {
        free(nodes);
        s->opaque = 1;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        CUgraphNodeType type;
        CUgraph child = NULL;
        if (!nodes[i] || drv->cuGraphNodeGetType(nodes[i], &type) != CUDA_SUCCESS) {
            s->opaque = 1;
            continue;
        }
        switch (type) {
        case CU_GRAPH_NODE_TYPE_HOST:
            s->host = 1;
            break;
        case CU_GRAPH_NODE_TYPE_GRAPH:
            if (drv->cuGraphChildGraphNodeGetGraph(nodes[i], &child) == CUDA_SUCCESS)
                scan_graph(drv, child, depth + 1, s);
            else
                s->opaque = 1;
            break;
        case CU_GRAPH_NODE_TYPE_MEMCPY:
            scan_memcpy(drv, nodes[i], s);
            break;
        case CU_GRAPH_NODE_TYPE_MEMSET:
            scan_memset(drv, nodes[i], s);
            break;
        case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
            scan_mem_ops(drv, nodes[i], s);
            break;
        case CU_GRAPH_NODE_TYPE_KERNEL:
            scan_kernel(drv, nodes[i], s);
            break;
        case CU_GRAPH_NODE_TYPE_EMPTY:
        case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        case CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL:
        case CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT:
        case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
        case CU_GRAPH_NODE_TYPE_MEM_FREE:
            break;
        default:
            /* Conditional nodes: their bodies (memcpys and memsets among them) cannot be read
             * through this toolkit's driver API; and node types newer than it. */
            s->opaque = 1;
            break;
        }
    }
    free(nodes);
}

/* ---- The table ---- */

static void exec_free(IbpGraphExec *e)
{
    if (e) {
        free(e->writes);
        free(e);
    }
}

/* Takes exec's entry out of the table (NULL when it has none); the caller frees it. */
static IbpGraphExec *take(cudaGraphExec_t exec)
{
    IbpGraphExec *e = NULL;
    pthread_mutex_lock(&graphs_mu);
    HASH_FIND_PTR(graphs, &exec, e);
    if (e) {
        HASH_DEL(graphs, e);
        atomic_fetch_sub_explicit(&graphs_len, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&graphs_mu);
    return e;
}

/* Drops exec's entry (a destroyed or re-read executable graph). */
void ibp_graph_forget(cudaGraphExec_t exec)
{
    exec_free(take(exec));
}

/* Adds what s found to exec's entry (made if it has none); s's writes are taken over.  What the
 * entry held stays: a node changed in an executable graph is added, not replaced (a range
 * marked dirty twice costs a lookup). */
static void record(cudaGraphExec_t exec, IbpGraphScan *s)
{
    if (!s->host && !s->opaque && !s->nwrites && !s->device_launch) {
        free(s->writes);
        return;
    }
    int failed = 0, unseen = 0;
    pthread_mutex_lock(&graphs_mu);
    IbpGraphExec *e = NULL;
    HASH_FIND_PTR(graphs, &exec, e);
    if (!e && (e = calloc(1, sizeof(*e))) != NULL) {
        e->exec = exec;
        graphs_oom = 0;
        HASH_ADD_PTR(graphs, exec, e);
        if (graphs_oom) {
            free(e);
            e = NULL;
        } else {
            atomic_fetch_add_explicit(&graphs_len, 1, memory_order_relaxed);
        }
    }
    if (e) {
        e->host |= s->host;
        e->opaque |= s->opaque;
        e->device_launch |= s->device_launch;
        /* The device may launch it: the writes found now land unmarked. */
        for (size_t i = 0; e->device_launch && !unseen && i < s->nwrites; i++)
            unseen = ibp_policy_touches_region(s->writes[i].dst, s->writes[i].n);
        unseen |= e->device_launch && s->opaque;
        if (!e->nwrites) {
            free(e->writes);
            e->writes = s->writes;
            e->nwrites = s->nwrites;
            s->writes = NULL;
        } else if (s->nwrites) {
            IbpHostWrite *const w = realloc(e->writes, (e->nwrites + s->nwrites) * sizeof(*w));
            if (w) {
                memcpy(w + e->nwrites, s->writes, s->nwrites * sizeof(*w));
                e->writes = w;
                e->nwrites += s->nwrites;
            } else {
                e->opaque = 1;
            }
        }
    } else {
        failed = 1;
    }
    pthread_mutex_unlock(&graphs_mu);
    free(s->writes);
    if (failed)
        ibp_router_hostwork_lost("a graph with host nodes or host memory writes could not be recorded");
    else if (unseen)
        ibp_router_hostwork_lost("a graph instantiated for launches from the device writes pinned memory "
                                 "that copies may send compressed (or cannot be read)");
    if (!failed)
        IBP_DEBUG("graph exec %p: %s, %zu host memory writes found%s", (void *)exec,
                  s->host ? "host nodes" : "no host nodes", s->nwrites,
                  s->opaque ? ", some nodes unreadable" : "");
}

/* The driver, while copies can go compressed (else nothing needs following). */
static const IbpDriver *driver_if_compressing(void)
{
    return ibp_router_compressing() ? ibp_driver_get() : NULL;
}

/* Adds to exec's entry what graph (at depth, 0 for the graph exec was made from) does. */
static void learn_graph(cudaGraphExec_t exec, cudaGraph_t graph, int depth, int device_launch)
{
    const IbpDriver *drv = driver_if_compressing();
    if (!drv)
        return;
    IbpGraphScan s = {.device_launch = device_launch};
    scan_graph(drv, (CUgraph)graph, depth, &s);
    record(exec, &s);
}

/* Reads graph, the graph exec was made from (flags: its instantiation flags) or updated with
 * (flags IBP_GRAPH_UPDATED: launchable from the device as it was), and keeps what it found. */
void ibp_graph_learn(cudaGraphExec_t exec, cudaGraph_t graph, unsigned long long flags)
{
    IbpGraphExec *const old = take(exec);
    const int device_launch = flags == IBP_GRAPH_UPDATED
                                  ? old && old->device_launch
                                  : !!(flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH);
    exec_free(old);
    learn_graph(exec, graph, 0, device_launch);
}

/* A child graph node of exec now runs child. */
void ibp_graph_learn_child(cudaGraphExec_t exec, cudaGraph_t child)
{
    learn_graph(exec, child, 1, 0);
}

/* A node of exec now writes d. */
void ibp_graph_learn_write(cudaGraphExec_t exec, IbpPitched d)
{
    const IbpDriver *drv = driver_if_compressing();
    if (!drv)
        return;
    IbpGraphScan s = {0};
    scan_pitched(drv, &s, d);
    record(exec, &s);
}

/* A stream memory operations node of exec now runs ops. */
void ibp_graph_learn_mem_ops(cudaGraphExec_t exec, const CUstreamBatchMemOpParams *ops, unsigned count)
{
    const IbpDriver *drv = driver_if_compressing();
    if (!drv)
        return;
    IbpGraphScan s = {0};
    scan_mem_op_array(drv, &s, ops, count);
    record(exec, &s);
}

/* A kernel node of exec now takes these arguments. */
void ibp_graph_learn_kernel(cudaGraphExec_t exec, int driver, const void *func, void **params, void **extra)
{
    const IbpDriver *drv = driver_if_compressing();
    if (!drv)
        return;
    IbpGraphScan s = {0};
    scan_kernel_args(drv, &s, driver ? IBP_ARGS_DRIVER : IBP_ARGS_RUNTIME, func, params, extra);
    record(exec, &s);
}

/* ---- Hooks ---- */

cudaError_t ibp_route_graph_instantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags,
                                        int with_flags)
{
    ibp_shim_init();
    /* the two entry points take the same arguments */
    const IbpReal_cudaGraphInstantiate real =
        with_flags ? IBP_REAL(cudaGraphInstantiateWithFlags) : IBP_REAL(cudaGraphInstantiate);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    const cudaError_t err = real(exec, graph, flags);
    if (err == cudaSuccess && exec)
        ibp_graph_learn(*exec, graph, flags);
    return err;
}

cudaError_t ibp_route_graph_instantiate_with_params(IbpStreamApi api, cudaGraphExec_t *exec,
                                                    cudaGraph_t graph, cudaGraphInstantiateParams *params)
{
    ibp_shim_init();
    const IbpReal_cudaGraphInstantiateWithParams real = api == IBP_STREAM_API_PER_THREAD
                                                            ? IBP_REAL(cudaGraphInstantiateWithParams_ptsz)
                                                            : IBP_REAL(cudaGraphInstantiateWithParams);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    const cudaError_t err = real(exec, graph, params);
    if (err == cudaSuccess && exec)
        ibp_graph_learn(*exec, graph, params ? params->flags : 0);
    return err;
}

cudaError_t ibp_route_graph_exec_update(cudaGraphExec_t exec, cudaGraph_t graph,
                                        cudaGraphExecUpdateResultInfo *info)
{
    ibp_shim_init();
    const IbpReal_cudaGraphExecUpdate real = IBP_REAL(cudaGraphExecUpdate);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    const cudaError_t err = real(exec, graph, info);
    if (err == cudaSuccess)
        ibp_graph_learn(exec, graph, IBP_GRAPH_UPDATED);
    return err;
}

cudaError_t ibp_route_graph_exec_destroy(cudaGraphExec_t exec)
{
    ibp_shim_init();
    const IbpReal_cudaGraphExecDestroy real = IBP_REAL(cudaGraphExecDestroy);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    const cudaError_t err = real(exec);
    if (err == cudaSuccess)
        ibp_graph_forget(exec);
    return err;
}

/* Node parameters changed in an executable graph: what the node may now write is added. */

cudaError_t ibp_route_graph_exec_memcpy_3d(cudaGraphExec_t exec, cudaGraphNode_t node,
                                           const struct cudaMemcpy3DParms *params)
{
    ibp_shim_init();
    const IbpReal_cudaGraphExecMemcpyNodeSetParams real = IBP_REAL(cudaGraphExecMemcpyNodeSetParams);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    const cudaError_t err = real(exec, node, params);
    if (err == cudaSuccess)
        ibp_graph_learn_write(exec, ibp_pitched_memcpy3d(params));
    return err;
}

cudaError_t ibp_route_graph_exec_memcpy_1d(cudaGraphExec_t exec, cudaGraphNode_t node, void *dst,
                                           const void *src, size_t count, enum cudaMemcpyKind kind)
{
    ibp_shim_init();
    const IbpReal_cudaGraphExecMemcpyNodeSetParams1D real = IBP_REAL(cudaGraphExecMemcpyNodeSetParams1D);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    const cudaError_t err = real(exec, node, dst, src, count, kind);
    if (err == cudaSuccess)
        ibp_graph_learn_write(exec, ibp_pitched_row(dst, count));
    return err;
}

cudaError_t ibp_route_graph_exec_memcpy_from_symbol(cudaGraphExec_t exec, cudaGraphNode_t node, void *dst,
                                                    const void *symbol, size_t count, size_t offset,
                                                    enum cudaMemcpyKind kind)
{
    ibp_shim_init();
    const IbpReal_cudaGraphExecMemcpyNodeSetParamsFromSymbol real =
        IBP_REAL(cudaGraphExecMemcpyNodeSetParamsFromSymbol);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    const cudaError_t err = real(exec, node, dst, symbol, count, offset, kind);
    if (err == cudaSuccess)
        ibp_graph_learn_write(exec, ibp_pitched_row(dst, count));
    return err;
}

cudaError_t ibp_route_graph_exec_memset(cudaGraphExec_t exec, cudaGraphNode_t node,
                                        const struct cudaMemsetParams *params)
{
    ibp_shim_init();
    const IbpReal_cudaGraphExecMemsetNodeSetParams real = IBP_REAL(cudaGraphExecMemsetNodeSetParams);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    const cudaError_t err = real(exec, node, params);
    if (err == cudaSuccess && params)
        ibp_graph_learn_write(exec, ibp_pitched_memset(params->dst, params->pitch, params->elementSize,
                                                       params->width, params->height));
    return err;
}

cudaError_t ibp_route_graph_exec_child(cudaGraphExec_t exec, cudaGraphNode_t node, cudaGraph_t child)
{
    ibp_shim_init();
    const IbpReal_cudaGraphExecChildGraphNodeSetParams real = IBP_REAL(cudaGraphExecChildGraphNodeSetParams);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    const cudaError_t err = real(exec, node, child);
    if (err == cudaSuccess)
        ibp_graph_learn_child(exec, child);
    return err;
}

cudaError_t ibp_route_graph_exec_node(cudaGraphExec_t exec, cudaGraphNode_t node,
                                      struct cudaGraphNodeParams *params)
{
    ibp_shim_init();
    const IbpReal_cudaGraphExecNodeSetParams real = IBP_REAL(cudaGraphExecNodeSetParams);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    const cudaError_t err = real(exec, node, params);
    if (err != cudaSuccess || !params)
        return err;
    switch (params->type) {
    case cudaGraphNodeTypeMemcpy:
        ibp_graph_learn_write(exec, ibp_pitched_memcpy3d(&params->memcpy.copyParams));
        break;
    case cudaGraphNodeTypeMemset:
        ibp_graph_learn_write(exec, ibp_pitched_memset(params->memset.dst, params->memset.pitch,
                                                       params->memset.elementSize, params->memset.width,
                                                       params->memset.height));
        break;
    case cudaGraphNodeTypeGraph:
        ibp_graph_learn_child(exec, params->graph.graph);
        break;
    case cudaGraphNodeTypeKernel:
        ibp_graph_learn_kernel(exec, 0, params->kernel.func, params->kernel.kernelParams,
                               params->kernel.extra);
        break;
    case cudaGraphNodeTypeHost: /* was a host node already */
    default:
        break;
    }
    return err;
}

cudaError_t ibp_route_graph_exec_kernel(cudaGraphExec_t exec, cudaGraphNode_t node,
                                        const struct cudaKernelNodeParams *params)
{
    ibp_shim_init();
    const IbpReal_cudaGraphExecKernelNodeSetParams real = IBP_REAL(cudaGraphExecKernelNodeSetParams);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    const cudaError_t err = real(exec, node, params);
    if (err == cudaSuccess && params)
        ibp_graph_learn_kernel(exec, 0, params->func, params->kernelParams, params->extra);
    return err;
}

static void CUDART_CB launch_done(void *arg)
{
    (void)arg;
    ibp_router_hostwork_end();
}

int ibp_graph_launch_begin(IbpStreamApi api, cudaGraphExec_t exec, cudaStream_t stream, IbpGraphLaunch *gl)
{
    memset(gl, 0, sizeof(*gl));
    if (!atomic_load_explicit(&graphs_len, memory_order_relaxed))
        return 0;
    int host = 0, opaque = 0;
    size_t nwrites = 0;
    IbpHostWrite *writes = NULL;
    pthread_mutex_lock(&graphs_mu);
    IbpGraphExec *e = NULL;
    HASH_FIND_PTR(graphs, &exec, e);
    if (e) {
        host = e->host;
        opaque = e->opaque;
        if (e->nwrites && (writes = malloc(e->nwrites * sizeof(*writes))) != NULL) {
            memcpy(writes, e->writes, e->nwrites * sizeof(*writes));
            nwrites = e->nwrites;
        } else if (e->nwrites) {
            opaque = 1;
        }
    }
    pthread_mutex_unlock(&graphs_mu);
    if (!e || (!host && !opaque && !nwrites)) { /* an entry kept only for its device_launch */
        free(writes);
        return 0;
    }
    const int capturing = ibp_router_stream_capturing(api, stream);
    if (capturing > 0) {
        /* The launch becomes a node of the graph being captured, which is read when that one is
         * instantiated. */
        free(writes);
        return 0;
    }
    if (capturing < 0)
        opaque = 1;
    if (opaque)
        ibp_router_hostwork_lost("a graph was launched whose host memory writes cannot be followed "
                                 "(conditional nodes, or the driver refused to describe a node or stream)");
    if (host)
        ibp_router_hostwork_begin();
    gl->host = host;
    gl->nwrites = nwrites;
    gl->writes = writes;
    return 1;
}

void ibp_graph_launch_end(IbpStreamApi api, IbpGraphLaunch *gl, cudaStream_t stream, int launched, int driver,
                          IbpCuLaunchHostFuncFn cu_launch_host_func)
{
    IbpHostWrite *const writes = gl->writes;
    gl->writes = NULL;
    if (!launched) {
        if (gl->host)
            ibp_router_hostwork_end();
        free(writes);
        return;
    }
    for (size_t i = 0; i < gl->nwrites; i++)
        ibp_router_device_write(api, writes[i].dst, writes[i].n, stream);
    free(writes);
    if (!gl->host)
        return;
    /* After the graph in stream order: its host nodes have returned when this runs.  The real
     * call, not the hook: the hook would count it pending itself. */
    int queued;
    if (driver) {
        queued =
            cu_launch_host_func && cu_launch_host_func((CUstream)stream, launch_done, NULL) == CUDA_SUCCESS;
    } else {
        const IbpReal_cudaLaunchHostFunc launch = api == IBP_STREAM_API_PER_THREAD
                                                      ? IBP_REAL(cudaLaunchHostFunc_ptsz)
                                                      : IBP_REAL(cudaLaunchHostFunc);
        queued = launch && launch(stream, launch_done, NULL) == cudaSuccess;
    }
    if (!queued)
        ibp_router_hostwork_lost("the end of a graph with host nodes cannot be followed");
}

cudaError_t ibp_route_graph_launch(IbpStreamApi api, cudaGraphExec_t exec, cudaStream_t stream)
{
    ibp_shim_init();
    const IbpReal_cudaGraphLaunch real =
        api == IBP_STREAM_API_PER_THREAD ? IBP_REAL(cudaGraphLaunch_ptsz) : IBP_REAL(cudaGraphLaunch);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    IbpGraphLaunch gl;
    if (!ibp_graph_launch_begin(api, exec, stream, &gl))
        return real(exec, stream);
    const cudaError_t err = real(exec, stream);
    ibp_graph_launch_end(api, &gl, stream, err == cudaSuccess, 0, NULL);
    return err;
}
