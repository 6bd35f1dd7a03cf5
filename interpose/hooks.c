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

/* Declarations for the per-thread variants, which the header only declares
 * under CUDA_API_PER_THREAD_DEFAULT_STREAM. */
IBP_HOOK cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
IBP_HOOK cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                          cudaStream_t stream);
IBP_HOOK cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void *userData);
IBP_HOOK cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream, cudaStreamCallback_t callback,
                                                void *userData, unsigned int flags);

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
