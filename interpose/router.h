/* SPDX-License-Identifier: MIT
 * ibpshim: the copy and allocation router behind the exported hooks. */
#ifndef IBP_INTERPOSE_ROUTER_H
#define IBP_INTERPOSE_ROUTER_H

#include <cuda_runtime_api.h>

#include "config/config.h"

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

/* Each returns exactly what the real runtime call returns (or
 * cudaErrorSharedObjectSymbolNotFound when no runtime is loaded); the shim's
 * own failures never surface to the application. */
cudaError_t ibp_route_malloc_host(void **ptr, size_t size);
cudaError_t ibp_route_host_alloc(void **ptr, size_t size, unsigned int flags);
cudaError_t ibp_route_free_host(void *ptr);
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

#endif /* IBP_INTERPOSE_ROUTER_H */
