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
    X(cudaDeviceReset, cudaError_t, (void))                                                                  \
    X(cudaThreadExit, cudaError_t, (void))                                                                   \
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
    X(cudaGraphExecKernelNodeSetParams, cudaError_t,                                                         \
      (cudaGraphExec_t exec, cudaGraphNode_t node, const struct cudaKernelNodeParams *params))               \
    X(cudaGraphLaunch, cudaError_t, (cudaGraphExec_t exec, cudaStream_t stream))                             \
    X(cudaLaunchKernel, cudaError_t,                                                                         \
      (const void *func, dim3 grid, dim3 block, void **args, size_t shared, cudaStream_t stream))            \
    X(cudaLaunchKernel_ptsz, cudaError_t,                                                                    \
      (const void *func, dim3 grid, dim3 block, void **args, size_t shared, cudaStream_t stream))            \
    X(cudaLaunchCooperativeKernel, cudaError_t,                                                              \
      (const void *func, dim3 grid, dim3 block, void **args, size_t shared, cudaStream_t stream))            \
    X(cudaLaunchCooperativeKernel_ptsz, cudaError_t,                                                         \
      (const void *func, dim3 grid, dim3 block, void **args, size_t shared, cudaStream_t stream))            \
    X(cudaLibraryUnload, cudaError_t, (cudaLibrary_t library))                                               \
    X(__cudaUnregisterFatBinary, void, (void **handle))                                                      \
    X(cudaLaunchKernelExC, cudaError_t, (const cudaLaunchConfig_t *config, const void *func, void **args))   \
    X(cudaLaunchKernelExC_ptsz, cudaError_t,                                                                 \
      (const cudaLaunchConfig_t *config, const void *func, void **args))                                     \
    X(cudaGraphLaunch_ptsz, cudaError_t, (cudaGraphExec_t exec, cudaStream_t stream))                        \
    IBP_REAL_CUDART_WRITERS(X)

/* Copies and memsets besides cudaMemcpy(Async), which the shim follows only for what they may
 * write into host memory (interpose/writes.c). */
#define IBP_REAL_CUDART_WRITERS(X)                                                                           \
    X(cudaMemcpy2D, cudaError_t,                                                                             \
      (void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,                \
       enum cudaMemcpyKind kind))                                                                            \
    X(cudaMemcpy2D_ptds, cudaError_t,                                                                        \
      (void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,                \
       enum cudaMemcpyKind kind))                                                                            \
    X(cudaMemcpy2DAsync, cudaError_t,                                                                        \
      (void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,                \
       enum cudaMemcpyKind kind, cudaStream_t stream))                                                       \
    X(cudaMemcpy2DAsync_ptsz, cudaError_t,                                                                   \
      (void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,                \
       enum cudaMemcpyKind kind, cudaStream_t stream))                                                       \
    X(cudaMemcpy2DFromArray, cudaError_t,                                                                    \
      (void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t width,        \
       size_t height, enum cudaMemcpyKind kind))                                                             \
    X(cudaMemcpy2DFromArray_ptds, cudaError_t,                                                               \
      (void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t width,        \
       size_t height, enum cudaMemcpyKind kind))                                                             \
    X(cudaMemcpy2DFromArrayAsync, cudaError_t,                                                               \
      (void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t width,        \
       size_t height, enum cudaMemcpyKind kind, cudaStream_t stream))                                        \
    X(cudaMemcpy2DFromArrayAsync_ptsz, cudaError_t,                                                          \
      (void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t width,        \
       size_t height, enum cudaMemcpyKind kind, cudaStream_t stream))                                        \
    X(cudaMemcpyFromArray, cudaError_t,                                                                      \
      (void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count,                       \
       enum cudaMemcpyKind kind))                                                                            \
    X(cudaMemcpyFromArray_ptds, cudaError_t,                                                                 \
      (void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count,                       \
       enum cudaMemcpyKind kind))                                                                            \
    X(cudaMemcpyFromArrayAsync, cudaError_t,                                                                 \
      (void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count,                       \
       enum cudaMemcpyKind kind, cudaStream_t stream))                                                       \
    X(cudaMemcpyFromArrayAsync_ptsz, cudaError_t,                                                            \
      (void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count,                       \
       enum cudaMemcpyKind kind, cudaStream_t stream))                                                       \
    X(cudaMemcpyFromSymbol, cudaError_t,                                                                     \
      (void *dst, const void *symbol, size_t count, size_t offset, enum cudaMemcpyKind kind))                \
    X(cudaMemcpyFromSymbol_ptds, cudaError_t,                                                                \
      (void *dst, const void *symbol, size_t count, size_t offset, enum cudaMemcpyKind kind))                \
    X(cudaMemcpyFromSymbolAsync, cudaError_t,                                                                \
      (void *dst, const void *symbol, size_t count, size_t offset, enum cudaMemcpyKind kind,                 \
       cudaStream_t stream))                                                                                 \
    X(cudaMemcpyFromSymbolAsync_ptsz, cudaError_t,                                                           \
      (void *dst, const void *symbol, size_t count, size_t offset, enum cudaMemcpyKind kind,                 \
       cudaStream_t stream))                                                                                 \
    X(cudaMemcpy3D, cudaError_t, (const struct cudaMemcpy3DParms *p))                                        \
    X(cudaMemcpy3D_ptds, cudaError_t, (const struct cudaMemcpy3DParms *p))                                   \
    X(cudaMemcpy3DAsync, cudaError_t, (const struct cudaMemcpy3DParms *p, cudaStream_t stream))              \
    X(cudaMemcpy3DAsync_ptsz, cudaError_t, (const struct cudaMemcpy3DParms *p, cudaStream_t stream))         \
    X(cudaMemcpy3DPeer, cudaError_t, (const struct cudaMemcpy3DPeerParms *p))                                \
    X(cudaMemcpy3DPeer_ptds, cudaError_t, (const struct cudaMemcpy3DPeerParms *p))                           \
    X(cudaMemcpy3DPeerAsync, cudaError_t, (const struct cudaMemcpy3DPeerParms *p, cudaStream_t stream))      \
    X(cudaMemcpy3DPeerAsync_ptsz, cudaError_t, (const struct cudaMemcpy3DPeerParms *p, cudaStream_t stream)) \
    X(cudaMemcpyPeer, cudaError_t, (void *dst, int dstDevice, const void *src, int srcDevice, size_t count)) \
    X(cudaMemcpyPeerAsync, cudaError_t,                                                                      \
      (void *dst, int dstDevice, const void *src, int srcDevice, size_t count, cudaStream_t stream))         \
    X(cudaMemcpyBatchAsync, cudaError_t,                                                                     \
      (void *const *dsts, const void *const *srcs, const size_t *sizes, size_t count,                        \
       struct cudaMemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, cudaStream_t stream))         \
    X(cudaMemcpyBatchAsync_ptsz, cudaError_t,                                                                \
      (void *const *dsts, const void *const *srcs, const size_t *sizes, size_t count,                        \
       struct cudaMemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, cudaStream_t stream))         \
    X(cudaMemcpy3DBatchAsync, cudaError_t,                                                                   \
      (size_t numOps, struct cudaMemcpy3DBatchOp * opList, unsigned long long flags, cudaStream_t stream))   \
    X(cudaMemcpy3DBatchAsync_ptsz, cudaError_t,                                                              \
      (size_t numOps, struct cudaMemcpy3DBatchOp * opList, unsigned long long flags, cudaStream_t stream))   \
    X(cudaMemset, cudaError_t, (void *devPtr, int value, size_t count))                                      \
    X(cudaMemset_ptds, cudaError_t, (void *devPtr, int value, size_t count))                                 \
    X(cudaMemsetAsync, cudaError_t, (void *devPtr, int value, size_t count, cudaStream_t stream))            \
    X(cudaMemsetAsync_ptsz, cudaError_t, (void *devPtr, int value, size_t count, cudaStream_t stream))       \
    X(cudaMemset2D, cudaError_t, (void *devPtr, size_t pitch, int value, size_t width, size_t height))       \
    X(cudaMemset2D_ptds, cudaError_t, (void *devPtr, size_t pitch, int value, size_t width, size_t height))  \
    X(cudaMemset2DAsync, cudaError_t,                                                                        \
      (void *devPtr, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream))             \
    X(cudaMemset2DAsync_ptsz, cudaError_t,                                                                   \
      (void *devPtr, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream))             \
    X(cudaMemset3D, cudaError_t, (struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent)) \
    X(cudaMemset3D_ptds, cudaError_t,                                                                        \
      (struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent))                            \
    X(cudaMemset3DAsync, cudaError_t,                                                                        \
      (struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent, cudaStream_t stream))       \
    X(cudaMemset3DAsync_ptsz, cudaError_t,                                                                   \
      (struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent, cudaStream_t stream))

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
/* The same in the driver (libcuda), for the driver-API hooks (drvwrites.c); NULL when no loaded
 * object but this one defines name. */
void *ibp_real_resolve_driver(const char *name);
/* Whether addr lies in a loaded object whose file name begins with lib ("libcudart.so"). */
int ibp_real_in_library(const void *addr, const char *lib);

#endif /* IBP_INTERPOSE_REAL_H */
