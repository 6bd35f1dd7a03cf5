/* SPDX-License-Identifier: MIT
 * ibpshim: the copy and allocation router behind the exported hooks. */
#include "interpose/router.h"

#include "interpose/real.h"
#include "interpose/shim.h"
#include "report/counters.h"

static IbpshimCallKind memcpy_kind(enum cudaMemcpyKind kind, int async)
{
    switch (kind) {
    case cudaMemcpyHostToDevice:
        return async ? IBPSHIM_CALL_MEMCPY_ASYNC_H2D : IBPSHIM_CALL_MEMCPY_H2D;
    case cudaMemcpyDeviceToHost:
        return async ? IBPSHIM_CALL_MEMCPY_ASYNC_D2H : IBPSHIM_CALL_MEMCPY_D2H;
    default:
        return async ? IBPSHIM_CALL_MEMCPY_ASYNC_OTHER : IBPSHIM_CALL_MEMCPY_OTHER;
    }
}

cudaError_t ibp_route_malloc_host(void **ptr, size_t size)
{
    ibp_shim_init();
    const IbpReal_cudaMallocHost real = IBP_REAL(cudaMallocHost);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    ibp_counters_add(IBPSHIM_CALL_MALLOC_HOST, size);
    return real(ptr, size);
}

cudaError_t ibp_route_host_alloc(void **ptr, size_t size, unsigned int flags)
{
    ibp_shim_init();
    const IbpReal_cudaHostAlloc real = IBP_REAL(cudaHostAlloc);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    ibp_counters_add(IBPSHIM_CALL_HOST_ALLOC, size);
    return real(ptr, size, flags);
}

cudaError_t ibp_route_free_host(void *ptr)
{
    const IbpReal_cudaFreeHost real = IBP_REAL(cudaFreeHost);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    ibp_counters_add(IBPSHIM_CALL_FREE_HOST, 0);
    return real(ptr);
}

cudaError_t ibp_route_host_register(void *ptr, size_t size, unsigned int flags)
{
    ibp_shim_init();
    const IbpReal_cudaHostRegister real = IBP_REAL(cudaHostRegister);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    ibp_counters_add(IBPSHIM_CALL_HOST_REGISTER, size);
    return real(ptr, size, flags);
}

cudaError_t ibp_route_host_unregister(void *ptr)
{
    const IbpReal_cudaHostUnregister real = IBP_REAL(cudaHostUnregister);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    ibp_counters_add(IBPSHIM_CALL_HOST_UNREGISTER, 0);
    return real(ptr);
}

cudaError_t ibp_route_memcpy(IbpStreamApi api, void *dst, const void *src, size_t count,
                             enum cudaMemcpyKind kind)
{
    const IbpReal_cudaMemcpy real =
        api == IBP_STREAM_API_PER_THREAD ? IBP_REAL(cudaMemcpy_ptds) : IBP_REAL(cudaMemcpy);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    ibp_counters_add(memcpy_kind(kind, 0), count);
    return real(dst, src, count, kind);
}

cudaError_t ibp_route_memcpy_async(IbpStreamApi api, void *dst, const void *src, size_t count,
                                   enum cudaMemcpyKind kind, cudaStream_t stream)
{
    const IbpReal_cudaMemcpyAsync real = api == IBP_STREAM_API_PER_THREAD
                                             ? IBP_REAL(cudaMemcpyAsync_ptsz)
                                             : IBP_REAL(cudaMemcpyAsync);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    ibp_counters_add(memcpy_kind(kind, 1), count);
    return real(dst, src, count, kind, stream);
}
