/* SPDX-License-Identifier: MIT
 * ibpshim: resolution of the real CUDA runtime entry points behind the hooks. */
#ifndef IBP_INTERPOSE_REAL_H
#define IBP_INTERPOSE_REAL_H

#include <cuda_runtime_api.h>

/* Every runtime function the shim forwards to, with its exact signature.
 * X(name, return type, parameter list) */
#define IBP_REAL_CUDART_LIST(X)                                                                              \
    X(cudaMallocHost, cudaError_t, (void **ptr, size_t size))                                                \
    X(cudaHostAlloc, cudaError_t, (void **ptr, size_t size, unsigned int flags))                             \
    X(cudaFreeHost, cudaError_t, (void *ptr))                                                                \
    X(cudaHostRegister, cudaError_t, (void *ptr, size_t size, unsigned int flags))                           \
    X(cudaHostUnregister, cudaError_t, (void *ptr))                                                          \
    X(cudaMemcpy, cudaError_t, (void *dst, const void *src, size_t count, enum cudaMemcpyKind kind))         \
    X(cudaMemcpy_ptds, cudaError_t, (void *dst, const void *src, size_t count, enum cudaMemcpyKind kind))    \
    X(cudaMemcpyAsync, cudaError_t,                                                                          \
      (void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream))             \
    X(cudaMemcpyAsync_ptsz, cudaError_t,                                                                     \
      (void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream))             \
    X(cudaLaunchHostFunc, cudaError_t, (cudaStream_t stream, cudaHostFn_t fn, void *userData))               \
    X(cudaLaunchHostFunc_ptsz, cudaError_t, (cudaStream_t stream, cudaHostFn_t fn, void *userData))          \
    X(cudaStreamAddCallback, cudaError_t,                                                                    \
      (cudaStream_t stream, cudaStreamCallback_t callback, void *userData, unsigned int flags))              \
    X(cudaStreamAddCallback_ptsz, cudaError_t,                                                               \
      (cudaStream_t stream, cudaStreamCallback_t callback, void *userData, unsigned int flags))              \
    X(cudaGraphInstantiate, cudaError_t,                                                                     \
      (cudaGraphExec_t * exec, cudaGraph_t graph, unsigned long long flags))                                 \
    X(cudaGraphInstantiateWithFlags, cudaError_t,                                                            \
      (cudaGraphExec_t * exec, cudaGraph_t graph, unsigned long long flags))                                 \
    X(cudaGraphInstantiateWithParams, cudaError_t,                                                           \
      (cudaGraphExec_t * exec, cudaGraph_t graph, cudaGraphInstantiateParams * params))                      \
    X(cudaGraphInstantiateWithParams_ptsz, cudaError_t,                                                      \
      (cudaGraphExec_t * exec, cudaGraph_t graph, cudaGraphInstantiateParams * params))                      \
    X(cudaGraphExecUpdate, cudaError_t,                                                                      \
      (cudaGraphExec_t exec, cudaGraph_t graph, cudaGraphExecUpdateResultInfo * info))                       \
    X(cudaGraphExecDestroy, cudaError_t, (cudaGraphExec_t exec))                                             \
    X(cudaGraphExecMemcpyNodeSetParams, cudaError_t,                                                         \
      (cudaGraphExec_t exec, cudaGraphNode_t node, const struct cudaMemcpy3DParms *params))                  \
    X(cudaGraphExecMemcpyNodeSetParams1D, cudaError_t,                                                       \
      (cudaGraphExec_t exec, cudaGraphNode_t node, void *dst, const void *src, size_t count,                 \
       enum cudaMemcpyKind kind))                                                                            \
    X(cudaGraphExecMemcpyNodeSetParamsFromSymbol, cudaError_t,                                               \
      (cudaGraphExec_t exec, cudaGraphNode_t node, void *dst, const void *symbol, size_t count,              \
       size_t offset, enum cudaMemcpyKind kind))                                                             \
    X(cudaGraphExecMemsetNodeSetParams, cudaError_t,                                                         \
      (cudaGraphExec_t exec, cudaGraphNode_t node, const struct cudaMemsetParams *params))                   \
    X(cudaGraphExecChildGraphNodeSetParams, cudaError_t,                                                     \
      (cudaGraphExec_t exec, cudaGraphNode_t node, cudaGraph_t child))                                       \
    X(cudaGraphExecNodeSetParams, cudaError_t,                                                               \
      (cudaGraphExec_t exec, cudaGraphNode_t node, struct cudaGraphNodeParams * params))                     \
    X(cudaGraphLaunch, cudaError_t, (cudaGraphExec_t exec, cudaStream_t stream))                             \
    X(cudaGraphLaunch_ptsz, cudaError_t, (cudaGraphExec_t exec, cudaStream_t stream))

typedef enum IbpRealId {
#define IBP_REAL_ID(name, ret, params) IBP_REAL_##name,
    IBP_REAL_CUDART_LIST(IBP_REAL_ID)
#undef IBP_REAL_ID
    IBP_REAL_COUNT
} IbpRealId;

#define IBP_REAL_TYPEDEF(name, ret, params) typedef ret (*IbpReal_##name) params;
IBP_REAL_CUDART_LIST(IBP_REAL_TYPEDEF)
#undef IBP_REAL_TYPEDEF

/* Returns the next definition of `id` after libibpshim.so: first through
 * dlsym(RTLD_NEXT), then, when the application loaded libcudart with
 * RTLD_LOCAL, from the libcudart already mapped in the process.  Never returns
 * one of our own symbols.  NULL when no runtime is loaded; an error is logged
 * once per symbol.  Thread-safety: any thread; the first successful result is
 * cached and never changes.  Allocates nothing itself on the failure path. */
void *ibp_real_get(IbpRealId id);

/* Typed accessor: IBP_REAL(cudaMemcpyAsync) has type IbpReal_cudaMemcpyAsync. */
#define IBP_REAL(name) ((IbpReal_##name)ibp_real_get(IBP_REAL_##name))

/* The error the hooks return when the real function cannot be found. */
#define IBP_REAL_MISSING_ERROR cudaErrorSharedObjectSymbolNotFound

/* Exposed for tests: the lookup itself, bypassing the cache. */
void *ibp_real_resolve(const char *name);

#endif /* IBP_INTERPOSE_REAL_H */
