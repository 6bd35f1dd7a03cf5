/* SPDX-License-Identifier: MIT
 * ibpshim: the copy and allocation router behind the exported hooks. */
#ifndef IBP_INTERPOSE_ROUTER_H
#define IBP_INTERPOSE_ROUTER_H

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "interpose/pitched.h"

/* Which default-stream semantics the caller compiled against: the plain
 * symbols (legacy default stream) or the _ptds/_ptsz ones (per-thread). */
typedef enum IbpStreamApi {
    IBP_STREAM_API_LEGACY = 0,
    IBP_STREAM_API_PER_THREAD = 1,
} IbpStreamApi;

/* Starts the compressed path with the loaded configuration (no CUDA call is made before the
 * first tracked allocation).  Called once from the shim's start-up. */
void ibp_router_start(const IbpConfig *cfg);
/* Stops the compressor at exit; copies are forwarded unchanged afterwards. */
void ibp_router_stop(void);
/* Before `call` destroys a context the shim may hold state in (cudaDeviceReset,
 * cuDevicePrimaryCtxReset): the shadows, staging, streams and kernels the compressed path keeps go
 * with it, and a later allocation may reuse their addresses and handles, so the compressed path
 * stops for the rest of the process (logged at level info) while they are still valid. */
void ibp_router_device_state_lost(const char *call);
/* Before `call` (cuCtxDestroy) destroys ctx: where the shim copied in it or tracked pinned memory
 * made or registered while it was current (or saw more contexts than it keeps), what it keeps
 * there goes with it, the memory may be unmapped under the compressor, and a context made later
 * may get the same handle: ibp_router_device_state_lost().  A context the shim never saw is
 * destroyed without it. */
void ibp_router_context_destroyed(CUcontext ctx, const char *call);

/* Each returns exactly what the real runtime call returns (or
 * cudaErrorSharedObjectSymbolNotFound when no runtime is loaded); the shim's
 * own failures never surface to the application. */
cudaError_t ibp_route_malloc_host(void **ptr, size_t size);
cudaError_t ibp_route_host_alloc(void **ptr, size_t size, unsigned int flags);
cudaError_t ibp_route_free_host(void *ptr);
cudaError_t ibp_route_device_reset(void);
/* cudaThreadExit: the CUDA 12 runtime's older name for cudaDeviceReset (gone from CUDA 13's). */
cudaError_t ibp_route_thread_exit(void);
cudaError_t ibp_route_host_register(void *ptr, size_t size, unsigned int flags);
cudaError_t ibp_route_host_unregister(void *ptr);
cudaError_t ibp_route_memcpy(IbpStreamApi api, void *dst, const void *src, size_t count,
                             enum cudaMemcpyKind kind);
cudaError_t ibp_route_memcpy_async(IbpStreamApi api, void *dst, const void *src, size_t count,
                                   enum cudaMemcpyKind kind, cudaStream_t stream);
/* Host functions and stream callbacks: the user's function runs wrapped, so that the router knows
 * while one is pending (it may write a region a later copy on its stream reads, and such copies go
 * raw).  Each returns exactly what the real call returns; the function runs unwrapped (as given)
 * when the shim is off, the stream is capturing, or fn is NULL. */
cudaError_t ibp_route_launch_host_func(IbpStreamApi api, cudaStream_t stream, cudaHostFn_t fn,
                                       void *user_data);
cudaError_t ibp_route_stream_add_callback(IbpStreamApi api, cudaStream_t stream,
                                          cudaStreamCallback_t callback, void *user_data, unsigned int flags);
/* The same for the driver's (drvwrites.c): real is the driver's own function. */
typedef CUresult (*IbpCuLaunchHostFuncFn)(CUstream stream, CUhostFn fn, void *user_data);
typedef CUresult (*IbpCuStreamAddCallbackFn)(CUstream stream, CUstreamCallback callback, void *user_data,
                                             unsigned int flags);
CUresult ibp_route_cu_launch_host_func(IbpStreamApi api, IbpCuLaunchHostFuncFn real, CUstream stream,
                                       CUhostFn fn, void *user_data);
CUresult ibp_route_cu_stream_add_callback(IbpStreamApi api, IbpCuStreamAddCallbackFn real, CUstream stream,
                                          CUstreamCallback callback, void *user_data, unsigned int flags);

/* Kernel launches (launches.c): a launch whose arguments point into a registered region is noted
 * as a device write of the whole region.  Each returns exactly what the real call returns. */
cudaError_t ibp_route_launch_kernel(IbpStreamApi api, int cooperative, const void *func, dim3 grid,
                                    dim3 block, void **args, size_t shared, cudaStream_t stream);
cudaError_t ibp_route_launch_kernel_ex(IbpStreamApi api, const cudaLaunchConfig_t *config, const void *func,
                                       void **args);
/* Unloads of kernels the launch hooks know by handle or host stub. */
cudaError_t ibp_route_library_unload(cudaLibrary_t library);
void ibp_route_unregister_fat_binary(void **handle);

/* Graphs (graphs.c).  Each returns exactly what the real call returns.  An executable graph with
 * host nodes counts as pending host work from its launch until the stream passes it (copies that
 * would go compressed go raw meanwhile, as behind a host function); its memcpy and memset nodes
 * whose destination is host memory mark what they write in tracked regions dirty at launch and
 * again once they have run, as a device-to-host copy does. */
cudaError_t ibp_route_graph_instantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags,
                                        int with_flags);
cudaError_t ibp_route_graph_instantiate_with_params(IbpStreamApi api, cudaGraphExec_t *exec,
                                                    cudaGraph_t graph, cudaGraphInstantiateParams *params);
cudaError_t ibp_route_graph_exec_update(cudaGraphExec_t exec, cudaGraph_t graph,
                                        cudaGraphExecUpdateResultInfo *info);
cudaError_t ibp_route_graph_exec_destroy(cudaGraphExec_t exec);
/* A node changed in an executable graph: what it may now write is added to what the graph did. */
cudaError_t ibp_route_graph_exec_memcpy_3d(cudaGraphExec_t exec, cudaGraphNode_t node,
                                           const struct cudaMemcpy3DParms *params);
cudaError_t ibp_route_graph_exec_memcpy_1d(cudaGraphExec_t exec, cudaGraphNode_t node, void *dst,
                                           const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t ibp_route_graph_exec_memcpy_from_symbol(cudaGraphExec_t exec, cudaGraphNode_t node, void *dst,
                                                    const void *symbol, size_t count, size_t offset,
                                                    enum cudaMemcpyKind kind);
cudaError_t ibp_route_graph_exec_memset(cudaGraphExec_t exec, cudaGraphNode_t node,
                                        const struct cudaMemsetParams *params);
cudaError_t ibp_route_graph_exec_child(cudaGraphExec_t exec, cudaGraphNode_t node, cudaGraph_t child);
cudaError_t ibp_route_graph_exec_node(cudaGraphExec_t exec, cudaGraphNode_t node,
                                      struct cudaGraphNodeParams *params);
cudaError_t ibp_route_graph_exec_kernel(cudaGraphExec_t exec, cudaGraphNode_t node,
                                        const struct cudaKernelNodeParams *params);
cudaError_t ibp_route_graph_launch(IbpStreamApi api, cudaGraphExec_t exec, cudaStream_t stream);
/* What the hooks above and the driver's (drvwrites.c) note after the real call: what an
 * executable graph does read from graph (instantiated with flags, or updated), dropped
 * (destroyed), a node's new write d added, what a child graph node's new graph does added, the
 * value writes among a stream memory operations node's new ops added, or what a kernel node's new
 * arguments point into added. */
#define IBP_GRAPH_UPDATED (~0ull) /* ibp_graph_learn's flags after an update: as instantiated */
void ibp_graph_learn(cudaGraphExec_t exec, cudaGraph_t graph, unsigned long long flags);
void ibp_graph_forget(cudaGraphExec_t exec);
void ibp_graph_learn_write(cudaGraphExec_t exec, IbpPitched d);
void ibp_graph_learn_child(cudaGraphExec_t exec, cudaGraph_t child);
void ibp_graph_learn_mem_ops(cudaGraphExec_t exec, const CUstreamBatchMemOpParams *ops, unsigned count);
/* A kernel node's new arguments (func's parameters sized by the runtime, or by the driver): the
 * registered regions they point into are added (launches.c). */
void ibp_graph_learn_kernel(cudaGraphExec_t exec, int driver, const void *func, void **params, void **extra);
/* A launch of exec on stream: begin returns 1 when the graph does something to follow (then end
 * must follow the real launch, launched saying whether it succeeded), 0 when the real launch is
 * all there is.  end queues the launch's end behind it with the runtime's cudaLaunchHostFunc or,
 * for a launch through the driver, with cu_launch_host_func (the driver's own; NULL when it has
 * none, and copies then go raw for good). */
typedef struct IbpGraphLaunch {
    int host;
    size_t nwrites;
    struct IbpHostWrite *writes;
} IbpGraphLaunch;
int ibp_graph_launch_begin(IbpStreamApi api, cudaGraphExec_t exec, cudaStream_t stream, IbpGraphLaunch *gl);
void ibp_graph_launch_end(IbpStreamApi api, IbpGraphLaunch *gl, cudaStream_t stream, int launched, int driver,
                          IbpCuLaunchHostFuncFn cu_launch_host_func);

/* For graphs.c: host work the router cannot wrap.  begin/end count it pending (copies that would
 * go compressed go raw while any is); lost: its end cannot be followed, so copies go raw for good
 * (warns once, naming `what`). */
void ibp_router_hostwork_begin(void);
void ibp_router_hostwork_end(void);
void ibp_router_hostwork_lost(const char *what);
/* A device write of [dst, dst + n) enqueued on stream: tracked bytes it touches are marked dirty
 * now and again once the stream has passed it. */
void ibp_router_device_write(IbpStreamApi api, void *dst, size_t n, cudaStream_t stream);
/* A call that may write [dst, dst + n) from the device (a copy of that kind, a memset) returned
 * success: tracked bytes it touches are marked dirty now and again once stream (NULL: the
 * default stream of the caller's semantics, for blocking calls) has passed it.  Nothing is marked
 * for a host-to-device kind, or for a call captured into a graph (its launches are followed). */
void ibp_router_enqueued_write(IbpStreamApi api, void *dst, size_t n, enum cudaMemcpyKind kind,
                               cudaStream_t stream);
/* What a batch of copies (writes.c: the runtime's; drvwrites.c: the driver's) may write, added
 * copy by copy, noted by flush.  Consecutive copies into one tracked region are noted as one span,
 * from the first byte of the first to the last of the last (more marked than written, never less),
 * so that a batch into one buffer costs one fence instead of one a copy.  Start from
 * {.api, .stream}. */
typedef struct IbpBatch {
    IbpStreamApi api;
    cudaStream_t stream;
    uintptr_t lo, hi;    /* the span gathered; empty when hi <= lo */
    uintptr_t base, end; /* its region */
} IbpBatch;
void ibp_batch_add(IbpBatch *b, IbpPitched d);
void ibp_batch_flush(IbpBatch *b);
/* 1 when [p, p + n) lies wholly inside one tracked region, whose bounds it sets. */
int ibp_router_tracked_region(const void *p, size_t n, uintptr_t *base, size_t *size);
/* 1 when stream is capturing, 0 when not, -1 when the driver cannot say. */
int ibp_router_stream_capturing(IbpStreamApi api, cudaStream_t stream);
/* Whether the compressed path is running (nothing needs following when it is not). */
int ibp_router_compressing(void);

#endif /* IBP_INTERPOSE_ROUTER_H */
