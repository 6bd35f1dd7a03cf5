/* SPDX-License-Identifier: MIT
 * ibpshim: the exported cuda* symbols; each only forwards into the router. */
#include <cuda_runtime_api.h>

#include "interpose/router.h"

#define IBP_HOOK __attribute__((visibility("default")))

/* The toolkit header maps these names to their _ptsz/_ptds forms when a file is
 * compiled for per-thread default streams; this file defines both explicitly. */
#undef cudaMemcpy
#undef cudaMemcpyAsync
#undef cudaLaunchHostFunc
#undef cudaStreamAddCallback
#undef cudaGraphInstantiateWithParams
#undef cudaGraphLaunch
#undef cudaLaunchKernel
#undef cudaLaunchKernelExC
#undef cudaLaunchCooperativeKernel

/* Declarations for the per-thread variants, which the header only declares
 * under CUDA_API_PER_THREAD_DEFAULT_STREAM. */
IBP_HOOK cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
IBP_HOOK cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                          cudaStream_t stream);
IBP_HOOK cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void *userData);
IBP_HOOK cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream, cudaStreamCallback_t callback,
                                                void *userData, unsigned int flags);
IBP_HOOK cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                         cudaGraphInstantiateParams *instantiateParams);
IBP_HOOK cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream);
IBP_HOOK cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                           size_t sharedMem, cudaStream_t stream);
IBP_HOOK cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim,
                                                      void **args, size_t sharedMem, cudaStream_t stream);
IBP_HOOK cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func,
                                              void **args);

IBP_HOOK cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    return ibp_route_malloc_host(ptr, size);
}

IBP_HOOK cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags)
{
    return ibp_route_host_alloc(ptr, size, flags);
}

IBP_HOOK cudaError_t cudaFreeHost(void *ptr)
{
    return ibp_route_free_host(ptr);
}

IBP_HOOK cudaError_t cudaDeviceReset(void)
{
    return ibp_route_device_reset();
}

#if CUDART_VERSION >= 13000
/* Deprecated since CUDA 4.0 and gone from the CUDA 13 headers, still in the CUDA 12 runtime: the
 * same reset as cudaDeviceReset, which the runtime makes without calling it. */
cudaError_t cudaThreadExit(void);
#endif

IBP_HOOK cudaError_t cudaThreadExit(void)
{
    return ibp_route_thread_exit();
}

IBP_HOOK cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
    return ibp_route_host_register(ptr, size, flags);
}

IBP_HOOK cudaError_t cudaHostUnregister(void *ptr)
{
    return ibp_route_host_unregister(ptr);
}

IBP_HOOK cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    return ibp_route_memcpy(IBP_STREAM_API_LEGACY, dst, src, count, kind);
}

IBP_HOOK cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    return ibp_route_memcpy(IBP_STREAM_API_PER_THREAD, dst, src, count, kind);
}

IBP_HOOK cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                     cudaStream_t stream)
{
    return ibp_route_memcpy_async(IBP_STREAM_API_LEGACY, dst, src, count, kind, stream);
}

IBP_HOOK cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                          cudaStream_t stream)
{
    return ibp_route_memcpy_async(IBP_STREAM_API_PER_THREAD, dst, src, count, kind, stream);
}

IBP_HOOK cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
    return ibp_route_launch_host_func(IBP_STREAM_API_LEGACY, stream, fn, userData);
}

IBP_HOOK cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
    return ibp_route_launch_host_func(IBP_STREAM_API_PER_THREAD, stream, fn, userData);
}

IBP_HOOK cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback, void *userData,
                                           unsigned int flags)
{
    return ibp_route_stream_add_callback(IBP_STREAM_API_LEGACY, stream, callback, userData, flags);
}

IBP_HOOK cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream, cudaStreamCallback_t callback,
                                                void *userData, unsigned int flags)
{
    return ibp_route_stream_add_callback(IBP_STREAM_API_PER_THREAD, stream, callback, userData, flags);
}

IBP_HOOK cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                          unsigned long long flags)
{
    return ibp_route_graph_instantiate(pGraphExec, graph, flags, 0);
}

IBP_HOOK cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                   unsigned long long flags)
{
    return ibp_route_graph_instantiate(pGraphExec, graph, flags, 1);
}

IBP_HOOK cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                    cudaGraphInstantiateParams *instantiateParams)
{
    return ibp_route_graph_instantiate_with_params(IBP_STREAM_API_LEGACY, pGraphExec, graph,
                                                   instantiateParams);
}

IBP_HOOK cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                         cudaGraphInstantiateParams *instantiateParams)
{
    return ibp_route_graph_instantiate_with_params(IBP_STREAM_API_PER_THREAD, pGraphExec, graph,
                                                   instantiateParams);
}

IBP_HOOK cudaError_t cudaGraphExecUpdate(cudaGraphExec_t hGraphExec, cudaGraph_t hGraph,
                                         cudaGraphExecUpdateResultInfo *resultInfo)
{
    return ibp_route_graph_exec_update(hGraphExec, hGraph, resultInfo);
}

IBP_HOOK cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
    return ibp_route_graph_exec_destroy(graphExec);
}

IBP_HOOK cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    return ibp_route_graph_launch(IBP_STREAM_API_LEGACY, graphExec, stream);
}

IBP_HOOK cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    return ibp_route_graph_launch(IBP_STREAM_API_PER_THREAD, graphExec, stream);
}

IBP_HOOK cudaError_t cudaGraphExecMemcpyNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                      const struct cudaMemcpy3DParms *pNodeParams)
{
    return ibp_route_graph_exec_memcpy_3d(hGraphExec, node, pNodeParams);
}

IBP_HOOK cudaError_t cudaGraphExecMemcpyNodeSetParams1D(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                        void *dst, const void *src, size_t count,
                                                        enum cudaMemcpyKind kind)
{
    return ibp_route_graph_exec_memcpy_1d(hGraphExec, node, dst, src, count, kind);
}

IBP_HOOK cudaError_t cudaGraphExecMemcpyNodeSetParamsFromSymbol(cudaGraphExec_t hGraphExec,
                                                                cudaGraphNode_t node, void *dst,
                                                                const void *symbol, size_t count,
                                                                size_t offset, enum cudaMemcpyKind kind)
{
    return ibp_route_graph_exec_memcpy_from_symbol(hGraphExec, node, dst, symbol, count, offset, kind);
}

IBP_HOOK cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                      const struct cudaMemsetParams *pNodeParams)
{
    return ibp_route_graph_exec_memset(hGraphExec, node, pNodeParams);
}

IBP_HOOK cudaError_t cudaGraphExecChildGraphNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                          cudaGraph_t childGraph)
{
    return ibp_route_graph_exec_child(hGraphExec, node, childGraph);
}

IBP_HOOK cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                      const struct cudaKernelNodeParams *pNodeParams)
{
    return ibp_route_graph_exec_kernel(hGraphExec, node, pNodeParams);
}

IBP_HOOK cudaError_t cudaGraphExecNodeSetParams(cudaGraphExec_t graphExec, cudaGraphNode_t node,
                                                struct cudaGraphNodeParams *nodeParams)
{
    return ibp_route_graph_exec_node(graphExec, node, nodeParams);
}

IBP_HOOK cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                      size_t sharedMem, cudaStream_t stream)
{
    return ibp_route_launch_kernel(IBP_STREAM_API_LEGACY, 0, func, gridDim, blockDim, args, sharedMem,
                                   stream);
}

IBP_HOOK cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                           size_t sharedMem, cudaStream_t stream)
{
    return ibp_route_launch_kernel(IBP_STREAM_API_PER_THREAD, 0, func, gridDim, blockDim, args, sharedMem,
                                   stream);
}

IBP_HOOK cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                                 size_t sharedMem, cudaStream_t stream)
{
    return ibp_route_launch_kernel(IBP_STREAM_API_LEGACY, 1, func, gridDim, blockDim, args, sharedMem,
                                   stream);
}

IBP_HOOK cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim,
                                                      void **args, size_t sharedMem, cudaStream_t stream)
{
    return ibp_route_launch_kernel(IBP_STREAM_API_PER_THREAD, 1, func, gridDim, blockDim, args, sharedMem,
                                   stream);
}

IBP_HOOK cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args)
{
    return ibp_route_launch_kernel_ex(IBP_STREAM_API_LEGACY, config, func, args);
}

IBP_HOOK cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func, void **args)
{
    return ibp_route_launch_kernel_ex(IBP_STREAM_API_PER_THREAD, config, func, args);
}

IBP_HOOK cudaError_t cudaLibraryUnload(cudaLibrary_t library)
{
    return ibp_route_library_unload(library);
}

/* Called by the host code nvcc generates when an object with kernels is unloaded (at exit, or by
 * dlclose). */
IBP_HOOK void __cudaUnregisterFatBinary(void **fatCubinHandle);
void __cudaUnregisterFatBinary(void **fatCubinHandle)
{
    ibp_route_unregister_fat_binary(fatCubinHandle);
}
