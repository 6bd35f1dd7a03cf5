/* SPDX-License-Identifier: MIT
 * ibpshim: the driver API's copies, memsets and stream writes into host memory.  A program may
 * copy device memory into a pinned region through the driver while the runtime's copies send that
 * region compressed; the device's writes land without a fault, so the tracker cannot see them.
 * The hooks are reached by symbol (a program or library linked with libcuda), and through the
 * addresses cuGetProcAddress and cudaGetDriverEntryPoint(ByVersion) answer; a library that
 * opens libcuda itself and looks functions up in its handle (Numba, cuda-python) does not reach
 * them, nor does the runtime itself, whose copies the runtime hooks follow.  Each call here is
 * forwarded unchanged, and what it may write is noted as a device-to-host copy through the runtime
 * is (router.c): marked stale now and again once its stream has passed it.  The driver's host
 * functions and stream callbacks, which may rewrite a region before a later copy of it in stream
 * order, run wrapped as the runtime's do (copies that would go compressed go raw while one is
 * pending), and its executable graphs are read and their launches followed as the runtime's are
 * (graphs.c).  A reset of a primary context stops the compressed path first (router.c). */
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <stdatomic.h>
#include <stdint.h>

#include "common/log.h"
#include "interpose/launches.h"
#include "interpose/pitched.h"
#include "interpose/real.h"
#include "interpose/router.h"
#include "interpose/shim.h"

#define IBP_HOOK __attribute__((visibility("default")))

/* cuda.h maps the plain names to their versioned forms (cuMemcpyDtoH to cuMemcpyDtoH_v2, ...);
 * this file defines each by its exported name. */
#undef cuMemcpyDtoH
#undef cuMemcpyDtoHAsync
#undef cuMemcpyDtoD
#undef cuMemcpyDtoDAsync
#undef cuMemcpyHtoD
#undef cuMemcpyHtoDAsync
#undef cuMemcpyAtoH
#undef cuMemcpyAtoD
#undef cuMemcpyAtoHAsync
#undef cuMemcpy2D
#undef cuMemcpy2DUnaligned
#undef cuMemcpy2DAsync
#undef cuMemcpy3D
#undef cuMemcpy3DAsync
#undef cuMemsetD8
#undef cuMemsetD16
#undef cuMemsetD32
#undef cuMemsetD2D8
#undef cuMemsetD2D16
#undef cuMemsetD2D32
#undef cuStreamWriteValue32
#undef cuStreamWriteValue64
#undef cuStreamBatchMemOp
#undef cuMemcpyBatchAsync
#undef cuMemcpy3DBatchAsync
#undef cuLaunchHostFunc
#undef cuStreamAddCallback
#undef cuGraphInstantiate
#undef cuGraphInstantiateWithFlags
#undef cuDevicePrimaryCtxReset
#undef cuCtxDestroy
#undef cuGraphInstantiateWithParams
#undef cuGraphExecUpdate
#undef cuGraphExecDestroy
#undef cuGraphExecMemcpyNodeSetParams
#undef cuGraphExecMemsetNodeSetParams
#undef cuGraphExecKernelNodeSetParams
#undef cuGraphLaunch
#undef cuGetProcAddress
#undef cuLaunchKernel
#undef cuLaunchKernelEx
#undef cuLaunchCooperativeKernel
#undef cudaGetDriverEntryPoint
#undef cudaGetDriverEntryPointByVersion

#define NO_STREAM ((CUstream)0)

static void noted(IbpStreamApi api, IbpPitched d, enum cudaMemcpyKind kind, CUstream stream)
{
    uintptr_t lo;
    const size_t n = ibp_pitched_span(d, &lo);
    if (n)
        ibp_router_enqueued_write(api, (void *)lo, n, kind, (cudaStream_t)stream);
}

static IbpPitched row(CUdeviceptr dst, size_t n)
{
    return ibp_pitched_row((const void *)(uintptr_t)dst, n);
}

static IbpPitched memset_span(CUdeviceptr dst, size_t pitch, unsigned element, size_t width, size_t height)
{
    return ibp_pitched_memset((const void *)(uintptr_t)dst, pitch, element, width, height);
}

static IbpPitched copy2d(const CUDA_MEMCPY2D *p)
{
    return p ? ibp_pitched_driver(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, 0,
                                  p->dstPitch, p->Height, p->WidthInBytes, p->Height, 1)
             : (IbpPitched){0};
}

static IbpPitched copy3d(const CUDA_MEMCPY3D *p)
{
    return p ? ibp_pitched_driver(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY,
                                  p->dstZ, p->dstPitch, p->dstHeight, p->WidthInBytes, p->Height, p->Depth)
             : (IbpPitched){0};
}

static IbpPitched copy3d_peer(const CUDA_MEMCPY3D_PEER *p)
{
    return p ? ibp_pitched_driver(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY,
                                  p->dstZ, p->dstPitch, p->dstHeight, p->WidthInBytes, p->Height, p->Depth)
             : (IbpPitched){0};
}

/* Every hook: P(name, per-thread suffix, params, args, span, kind, stream) defines name and
 * name##suffix (the _ptds/_ptsz form).  The kind only matters for a host-to-device copy, whose
 * destination through the unified address may still be host memory: such copies say Default. */
#define IBP_DRIVER_WRITERS(P)                                                                                \
    P(cuMemcpy, _ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n), row(dst, n),             \
      cudaMemcpyDefault, NO_STREAM)                                                                          \
    P(cuMemcpyAsync, _ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s),      \
      row(dst, n), cudaMemcpyDefault, s)                                                                     \
    P(cuMemcpyDtoH_v2, _ptds, (void *dst, CUdeviceptr src, size_t n), (dst, src, n),                         \
      row((CUdeviceptr)(uintptr_t)dst, n), cudaMemcpyDeviceToHost, NO_STREAM)                                \
    P(cuMemcpyDtoHAsync_v2, _ptsz, (void *dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s),     \
      row((CUdeviceptr)(uintptr_t)dst, n), cudaMemcpyDeviceToHost, s)                                        \
    P(cuMemcpyDtoD_v2, _ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n), row(dst, n),      \
      cudaMemcpyDefault, NO_STREAM)                                                                          \
    P(cuMemcpyDtoDAsync_v2, _ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s),                 \
      (dst, src, n, s), row(dst, n), cudaMemcpyDefault, s)                                                   \
    P(cuMemcpyHtoD_v2, _ptds, (CUdeviceptr dst, const void *src, size_t n), (dst, src, n), row(dst, n),      \
      cudaMemcpyDefault, NO_STREAM)                                                                          \
    P(cuMemcpyHtoDAsync_v2, _ptsz, (CUdeviceptr dst, const void *src, size_t n, CUstream s),                 \
      (dst, src, n, s), row(dst, n), cudaMemcpyDefault, s)                                                   \
    P(cuMemcpyAtoD_v2, _ptds, (CUdeviceptr dst, CUarray src, size_t offset, size_t n),                       \
      (dst, src, offset, n), row(dst, n), cudaMemcpyDefault, NO_STREAM)                                      \
    P(cuMemcpyAtoH_v2, _ptds, (void *dst, CUarray src, size_t offset, size_t n), (dst, src, offset, n),      \
      row((CUdeviceptr)(uintptr_t)dst, n), cudaMemcpyDeviceToHost, NO_STREAM)                                \
    P(cuMemcpyAtoHAsync_v2, _ptsz, (void *dst, CUarray src, size_t offset, size_t n, CUstream s),            \
      (dst, src, offset, n, s), row((CUdeviceptr)(uintptr_t)dst, n), cudaMemcpyDeviceToHost, s)              \
    P(cuMemcpyPeer, _ptds, (CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n),     \
      (dst, dctx, src, sctx, n), row(dst, n), cudaMemcpyDefault, NO_STREAM)                                  \
    P(cuMemcpyPeerAsync, _ptsz,                                                                              \
      (CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n, CUstream s),              \
      (dst, dctx, src, sctx, n, s), row(dst, n), cudaMemcpyDefault, s)                                       \
    P(cuMemcpy2D_v2, _ptds, (const CUDA_MEMCPY2D *p), (p), copy2d(p), cudaMemcpyDefault, NO_STREAM)          \
    P(cuMemcpy2DUnaligned_v2, _ptds, (const CUDA_MEMCPY2D *p), (p), copy2d(p), cudaMemcpyDefault, NO_STREAM) \
    P(cuMemcpy2DAsync_v2, _ptsz, (const CUDA_MEMCPY2D *p, CUstream s), (p, s), copy2d(p), cudaMemcpyDefault, \
      s)                                                                                                     \
    P(cuMemcpy3D_v2, _ptds, (const CUDA_MEMCPY3D *p), (p), copy3d(p), cudaMemcpyDefault, NO_STREAM)          \
    P(cuMemcpy3DAsync_v2, _ptsz, (const CUDA_MEMCPY3D *p, CUstream s), (p, s), copy3d(p), cudaMemcpyDefault, \
      s)                                                                                                     \
    P(cuMemcpy3DPeer, _ptds, (const CUDA_MEMCPY3D_PEER *p), (p), copy3d_peer(p), cudaMemcpyDefault,          \
      NO_STREAM)                                                                                             \
    P(cuMemcpy3DPeerAsync, _ptsz, (const CUDA_MEMCPY3D_PEER *p, CUstream s), (p, s), copy3d_peer(p),         \
      cudaMemcpyDefault, s)                                                                                  \
    P(cuMemsetD8_v2, _ptds, (CUdeviceptr d, unsigned char v, size_t n), (d, v, n),                           \
      memset_span(d, 0, 1, n, 1), cudaMemcpyDeviceToHost, NO_STREAM)                                         \
    P(cuMemsetD16_v2, _ptds, (CUdeviceptr d, unsigned short v, size_t n), (d, v, n),                         \
      memset_span(d, 0, 2, n, 1), cudaMemcpyDeviceToHost, NO_STREAM)                                         \
    P(cuMemsetD32_v2, _ptds, (CUdeviceptr d, unsigned int v, size_t n), (d, v, n),                           \
      memset_span(d, 0, 4, n, 1), cudaMemcpyDeviceToHost, NO_STREAM)                                         \
    P(cuMemsetD8Async, _ptsz, (CUdeviceptr d, unsigned char v, size_t n, CUstream s), (d, v, n, s),          \
      memset_span(d, 0, 1, n, 1), cudaMemcpyDeviceToHost, s)                                                 \
    P(cuMemsetD16Async, _ptsz, (CUdeviceptr d, unsigned short v, size_t n, CUstream s), (d, v, n, s),        \
      memset_span(d, 0, 2, n, 1), cudaMemcpyDeviceToHost, s)                                                 \
    P(cuMemsetD32Async, _ptsz, (CUdeviceptr d, unsigned int v, size_t n, CUstream s), (d, v, n, s),          \
      memset_span(d, 0, 4, n, 1), cudaMemcpyDeviceToHost, s)                                                 \
    P(cuMemsetD2D8_v2, _ptds, (CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h),            \
      (d, pitch, v, w, h), memset_span(d, pitch, 1, w, h), cudaMemcpyDeviceToHost, NO_STREAM)                \
    P(cuMemsetD2D16_v2, _ptds, (CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h),          \
      (d, pitch, v, w, h), memset_span(d, pitch, 2, w, h), cudaMemcpyDeviceToHost, NO_STREAM)                \
    P(cuMemsetD2D32_v2, _ptds, (CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h),            \
      (d, pitch, v, w, h), memset_span(d, pitch, 4, w, h), cudaMemcpyDeviceToHost, NO_STREAM)                \
    P(cuMemsetD2D8Async, _ptsz,                                                                              \
      (CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s),                        \
      (d, pitch, v, w, h, s), memset_span(d, pitch, 1, w, h), cudaMemcpyDeviceToHost, s)                     \
    P(cuMemsetD2D16Async, _ptsz,                                                                             \
      (CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h, CUstream s),                       \
      (d, pitch, v, w, h, s), memset_span(d, pitch, 2, w, h), cudaMemcpyDeviceToHost, s)                     \
    P(cuMemsetD2D32Async, _ptsz,                                                                             \
      (CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h, CUstream s), (d, pitch, v, w, h, s), \
      memset_span(d, pitch, 4, w, h), cudaMemcpyDeviceToHost, s)                                             \
    P(cuStreamWriteValue32_v2, _ptsz, (CUstream s, CUdeviceptr addr, cuuint32_t v, unsigned int flags),      \
      (s, addr, v, flags), row(addr, 4), cudaMemcpyDeviceToHost, s)                                          \
    P(cuStreamWriteValue64_v2, _ptsz, (CUstream s, CUdeviceptr addr, cuuint64_t v, unsigned int flags),      \
      (s, addr, v, flags), row(addr, 8), cudaMemcpyDeviceToHost, s)                                          \
    P(cuStreamWriteValue32, _ptsz, (CUstream s, CUdeviceptr addr, cuuint32_t v, unsigned int flags),         \
      (s, addr, v, flags), row(addr, 4), cudaMemcpyDeviceToHost, s)                                          \
    P(cuStreamWriteValue64, _ptsz, (CUstream s, CUdeviceptr addr, cuuint64_t v, unsigned int flags),         \
      (s, addr, v, flags), row(addr, 8), cudaMemcpyDeviceToHost, s)

/* The other hooks, each defined below on its own. */
#define IBP_DRIVER_OTHERS(X)                                                                                 \
    X(cuStreamBatchMemOp_v2)                                                                                 \
    X(cuStreamBatchMemOp)                                                                                    \
    X(cuStreamBatchMemOp_ptsz)                                                                               \
    X(cuMemcpyBatchAsync)                                                                                    \
    X(cuMemcpyBatchAsync_ptsz)                                                                               \
    X(cuMemcpyBatchAsync_v2)                                                                                 \
    X(cuMemcpyBatchAsync_v2_ptsz)                                                                            \
    X(cuMemcpy3DBatchAsync)                                                                                  \
    X(cuMemcpy3DBatchAsync_ptsz)                                                                             \
    X(cuMemcpy3DBatchAsync_v2)                                                                               \
    X(cuMemcpy3DBatchAsync_v2_ptsz)                                                                          \
    X(cuStreamBatchMemOp_v2_ptsz)                                                                            \
    X(cuLaunchHostFunc)                                                                                      \
    X(cuLaunchHostFunc_ptsz)                                                                                 \
    X(cuStreamAddCallback)                                                                                   \
    X(cuStreamAddCallback_ptsz)                                                                              \
    X(cuGraphInstantiate)                                                                                    \
    X(cuGraphInstantiate_v2)                                                                                 \
    X(cuGraphInstantiateWithFlags)                                                                           \
    X(cuGraphInstantiateWithParams)                                                                          \
    X(cuGraphInstantiateWithParams_ptsz)                                                                     \
    X(cuGraphExecUpdate)                                                                                     \
    X(cuGraphExecUpdate_v2)                                                                                  \
    X(cuGraphExecDestroy)                                                                                    \
    X(cuGraphExecMemcpyNodeSetParams)                                                                        \
    X(cuGraphExecMemsetNodeSetParams)                                                                        \
    X(cuGraphExecChildGraphNodeSetParams)                                                                    \
    X(cuGraphExecBatchMemOpNodeSetParams)                                                                    \
    X(cuGraphExecNodeSetParams)                                                                              \
    X(cuGraphExecKernelNodeSetParams)                                                                        \
    X(cuGraphExecKernelNodeSetParams_v2)                                                                     \
    X(cuGraphLaunch)                                                                                         \
    X(cuGraphLaunch_ptsz)                                                                                    \
    X(cuLaunchKernel)                                                                                        \
    X(cuLaunchKernel_ptsz)                                                                                   \
    X(cuLaunchKernelEx)                                                                                      \
    X(cuLaunchKernelEx_ptsz)                                                                                 \
    X(cuLaunchCooperativeKernel)                                                                             \
    X(cuLaunchCooperativeKernel_ptsz)                                                                        \
    X(cuModuleUnload)                                                                                        \
    X(cuLibraryUnload)                                                                                       \
    X(cuDevicePrimaryCtxReset)                                                                               \
    X(cuDevicePrimaryCtxReset_v2)                                                                            \
    X(cuCtxDestroy)                                                                                          \
    X(cuCtxDestroy_v2)                                                                                       \
    X(cuGreenCtxDestroy)

/* Each hook's real function, resolved at its first call. */
enum {
#define HOOK_ID(name, suffix, params, args, span, kind, stream) ID_##name, ID_##name##suffix,
    IBP_DRIVER_WRITERS(HOOK_ID)
#undef HOOK_ID
#define OTHER_ID(name) ID_##name,
        IBP_DRIVER_OTHERS(OTHER_ID)
#undef OTHER_ID
            ID_COUNT
};

static const char *const real_names[ID_COUNT] = {
#define HOOK_NAME(name, suffix, params, args, span, kind, stream) #name, #name #suffix,
    IBP_DRIVER_WRITERS(HOOK_NAME)
#undef HOOK_NAME
#define OTHER_NAME(name) #name,
        IBP_DRIVER_OTHERS(OTHER_NAME)
#undef OTHER_NAME
};

static _Atomic(void *) real_fns[ID_COUNT];
static atomic_flag missing_logged[ID_COUNT];
static atomic_int absent[ID_COUNT]; /* not defined by the loaded driver (cuGetProcAddress's check) */

/* name resolved by resolve, once found kept in *cache. */
static void *resolve_cached(_Atomic(void *) *cache, void *(*resolve)(const char *), const char *name)
{
    void *fn = atomic_load_explicit(cache, memory_order_acquire);
    /* Racing first callers resolve the same address; whichever store lands is right. */
    if (!fn && (fn = resolve(name)))
        atomic_store_explicit(cache, fn, memory_order_release);
    return fn;
}

/* The driver's own function for hook id, or NULL where no loaded driver defines it. */
static void *real_fn_quiet(int id)
{
    return resolve_cached(&real_fns[id], ibp_real_resolve_driver, real_names[id]);
}

static void *real_fn(int id)
{
    void *fn = real_fn_quiet(id);
    if (!fn) {
        if (!atomic_flag_test_and_set(&missing_logged[id]))
            IBP_ERROR("%s: no CUDA driver (libcuda) defines it in this process; returning "
                      "CUDA_ERROR_NOT_FOUND",
                      real_names[id]);
        return NULL;
    }
    return fn;
}

/* One hook: the real call, then, on success, `after`. */
#define HOOK_THEN(name, id, params, args, after)                                                             \
    IBP_HOOK CUresult name params;                                                                           \
    CUresult name params                                                                                     \
    {                                                                                                        \
        typedef CUresult(*Fn) params;                                                                        \
        const Fn real = (Fn)real_fn(id);                                                                     \
        if (!real)                                                                                           \
            return CUDA_ERROR_NOT_FOUND;                                                                     \
        const CUresult ret = real args;                                                                      \
        if (ret == CUDA_SUCCESS)                                                                             \
            after;                                                                                           \
        return ret;                                                                                          \
    }

/* A writer's hook: what it may have written noted. */
#define HOOK(name, id, api, params, args, span, kind, stream)                                                \
    HOOK_THEN(name, id, params, args, noted(api, span, kind, stream))

#define HOOKS(name, suffix, params, args, span, kind, stream)                                                \
    HOOK(name, ID_##name, IBP_STREAM_API_LEGACY, params, args, span, kind, stream)                           \
    HOOK(name##suffix, ID_##name##suffix, IBP_STREAM_API_PER_THREAD, params, args, span, kind, stream)

IBP_DRIVER_WRITERS(HOOKS)

/* A batch of stream memory operations: its 32- and 64-bit value writes (a kind newer than these
 * headers goes unnoted; in a graph it makes the graph opaque). */
static CUresult batch_mem_op(int id, IbpStreamApi api, CUstream s, unsigned int count,
                             CUstreamBatchMemOpParams *ops, unsigned int flags)
{
    typedef CUresult (*Fn)(CUstream, unsigned int, CUstreamBatchMemOpParams *, unsigned int);
    const Fn real = (Fn)real_fn(id);
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    const CUresult ret = real(s, count, ops, flags);
    for (unsigned int i = 0; ret == CUDA_SUCCESS && ops && i < count; i++) {
        int known;
        noted(api, ibp_pitched_mem_op(&ops[i], &known), cudaMemcpyDeviceToHost, s);
    }
    return ret;
}

IBP_HOOK CUresult cuStreamBatchMemOp_v2(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops,
                                        unsigned int flags);
IBP_HOOK CUresult cuStreamBatchMemOp_v2_ptsz(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops,
                                             unsigned int flags);

CUresult cuStreamBatchMemOp_v2(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops,
                               unsigned int flags)
{
    return batch_mem_op(ID_cuStreamBatchMemOp_v2, IBP_STREAM_API_LEGACY, s, count, ops, flags);
}

CUresult cuStreamBatchMemOp_v2_ptsz(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops,
                                    unsigned int flags)
{
    return batch_mem_op(ID_cuStreamBatchMemOp_v2_ptsz, IBP_STREAM_API_PER_THREAD, s, count, ops, flags);
}

/* CUDA 8-11's forms, which the driver still exports and still answers cuGetProcAddress with for a
 * program that asks for a version before 12.0. */
IBP_HOOK CUresult cuStreamBatchMemOp(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops,
                                     unsigned int flags);
IBP_HOOK CUresult cuStreamBatchMemOp_ptsz(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops,
                                          unsigned int flags);

CUresult cuStreamBatchMemOp(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops, unsigned int flags)
{
    return batch_mem_op(ID_cuStreamBatchMemOp, IBP_STREAM_API_LEGACY, s, count, ops, flags);
}

CUresult cuStreamBatchMemOp_ptsz(CUstream s, unsigned int count, CUstreamBatchMemOpParams *ops,
                                 unsigned int flags)
{
    return batch_mem_op(ID_cuStreamBatchMemOp_ptsz, IBP_STREAM_API_PER_THREAD, s, count, ops, flags);
}

/* ---- batched copies ---- */

/* What a batch's copies may write is noted whatever the result: a batch that fails part way may
 * have enqueued the copies before the failure (marking bytes not written costs a recompression,
 * never a wrong byte). */
static void batch_noted(IbpStreamApi api, CUstream s, const CUdeviceptr *dsts, const size_t *sizes,
                        size_t count)
{
    if (!dsts || !sizes)
        return;
    IbpBatch b = {.api = api, .stream = (cudaStream_t)s};
    for (size_t i = 0; i < count; i++)
        ibp_batch_add(&b, row(dsts[i], sizes[i]));
    ibp_batch_flush(&b);
}

static void batch3d_noted(IbpStreamApi api, CUstream s, const CUDA_MEMCPY3D_BATCH_OP *ops, size_t nops)
{
    if (!ops)
        return;
    IbpBatch b = {.api = api, .stream = (cudaStream_t)s};
    for (size_t i = 0; i < nops; i++) {
        const CUDA_MEMCPY3D_BATCH_OP *const op = &ops[i];
        ibp_batch_add(&b, ibp_pitched_batch_op(op->dst.type == CU_MEMCPY_OPERAND_TYPE_POINTER,
                                               op->src.type == CU_MEMCPY_OPERAND_TYPE_ARRAY,
                                               (const void *)(uintptr_t)op->dst.op.ptr.ptr,
                                               op->dst.op.ptr.rowLength, op->dst.op.ptr.layerHeight,
                                               op->extent.width, op->extent.height, op->extent.depth));
    }
    ibp_batch_flush(&b);
}

/* CUDA 12.8-12.9's forms take a failIdx before the stream; 13.0's (_v2) do not. */
#define BATCH_HOOK(name, api, fail_param, fail_arg)                                                          \
    IBP_HOOK CUresult name(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,                \
                           CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs fail_param, CUstream s);   \
    CUresult name(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,                         \
                  CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs fail_param, CUstream s)             \
    {                                                                                                        \
        typedef CUresult (*Fn)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *,         \
                               size_t *, size_t fail_param, CUstream);                                       \
        const Fn real = (Fn)real_fn(ID_##name);                                                              \
        if (!real)                                                                                           \
            return CUDA_ERROR_NOT_FOUND;                                                                     \
        const CUresult ret = real(dsts, srcs, sizes, count, attrs, idxs, nattrs fail_arg, s);                \
        batch_noted(api, s, dsts, sizes, count);                                                             \
        return ret;                                                                                          \
    }

#define BATCH3D_HOOK(name, api, fail_param, fail_arg)                                                        \
    IBP_HOOK CUresult name(size_t nops, CUDA_MEMCPY3D_BATCH_OP *ops fail_param, unsigned long long flags,    \
                           CUstream s);                                                                      \
    CUresult name(size_t nops, CUDA_MEMCPY3D_BATCH_OP *ops fail_param, unsigned long long flags, CUstream s) \
    {                                                                                                        \
        typedef CUresult (*Fn)(size_t, CUDA_MEMCPY3D_BATCH_OP * fail_param, unsigned long long, CUstream);   \
        const Fn real = (Fn)real_fn(ID_##name);                                                              \
        if (!real)                                                                                           \
            return CUDA_ERROR_NOT_FOUND;                                                                     \
        const CUresult ret = real(nops, ops fail_arg, flags, s);                                             \
        batch3d_noted(api, s, ops, nops);                                                                    \
        return ret;                                                                                          \
    }

#define FAIL_PARAM , size_t *fail_idx
#define FAIL_ARG , fail_idx
BATCH_HOOK(cuMemcpyBatchAsync, IBP_STREAM_API_LEGACY, FAIL_PARAM, FAIL_ARG)
BATCH_HOOK(cuMemcpyBatchAsync_ptsz, IBP_STREAM_API_PER_THREAD, FAIL_PARAM, FAIL_ARG)
BATCH_HOOK(cuMemcpyBatchAsync_v2, IBP_STREAM_API_LEGACY, , )
BATCH_HOOK(cuMemcpyBatchAsync_v2_ptsz, IBP_STREAM_API_PER_THREAD, , )
BATCH3D_HOOK(cuMemcpy3DBatchAsync, IBP_STREAM_API_LEGACY, FAIL_PARAM, FAIL_ARG)
BATCH3D_HOOK(cuMemcpy3DBatchAsync_ptsz, IBP_STREAM_API_PER_THREAD, FAIL_PARAM, FAIL_ARG)
BATCH3D_HOOK(cuMemcpy3DBatchAsync_v2, IBP_STREAM_API_LEGACY, , )
BATCH3D_HOOK(cuMemcpy3DBatchAsync_v2_ptsz, IBP_STREAM_API_PER_THREAD, , )

/* ---- host functions and stream callbacks ---- */

static CUresult launch_host_func(int id, IbpStreamApi api, CUstream s, CUhostFn fn, void *user_data)
{
    const IbpCuLaunchHostFuncFn real = (IbpCuLaunchHostFuncFn)real_fn(id);
    return real ? ibp_route_cu_launch_host_func(api, real, s, fn, user_data) : CUDA_ERROR_NOT_FOUND;
}

static CUresult stream_add_callback(int id, IbpStreamApi api, CUstream s, CUstreamCallback cb,
                                    void *user_data, unsigned int flags)
{
    const IbpCuStreamAddCallbackFn real = (IbpCuStreamAddCallbackFn)real_fn(id);
    return real ? ibp_route_cu_stream_add_callback(api, real, s, cb, user_data, flags) : CUDA_ERROR_NOT_FOUND;
}

IBP_HOOK CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *user_data);
IBP_HOOK CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void *user_data);
IBP_HOOK CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void *user_data, unsigned int flags);
IBP_HOOK CUresult cuStreamAddCallback_ptsz(CUstream s, CUstreamCallback cb, void *user_data,
                                           unsigned int flags);

CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *user_data)
{
    return launch_host_func(ID_cuLaunchHostFunc, IBP_STREAM_API_LEGACY, s, fn, user_data);
}

CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void *user_data)
{
    return launch_host_func(ID_cuLaunchHostFunc_ptsz, IBP_STREAM_API_PER_THREAD, s, fn, user_data);
}

CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void *user_data, unsigned int flags)
{
    return stream_add_callback(ID_cuStreamAddCallback, IBP_STREAM_API_LEGACY, s, cb, user_data, flags);
}

CUresult cuStreamAddCallback_ptsz(CUstream s, CUstreamCallback cb, void *user_data, unsigned int flags)
{
    return stream_add_callback(ID_cuStreamAddCallback_ptsz, IBP_STREAM_API_PER_THREAD, s, cb, user_data,
                               flags);
}

/* ---- executable graphs ---- */

IBP_HOOK CUresult cuGraphLaunch(CUgraphExec exec, CUstream s);
IBP_HOOK CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s);

/* What graph holds, read for the executable graph *exec made from it (or updated with it). */
static void learned(CUgraphExec *exec, CUgraph graph, unsigned long long flags)
{
    ibp_shim_init(); /* a graph is read once: before the shim was set up it would go unread */
    if (exec)
        ibp_graph_learn((cudaGraphExec_t)*exec, (cudaGraph_t)graph, flags);
}

static void memcpy_learned(CUgraphExec exec, const CUDA_MEMCPY3D *p)
{
    ibp_shim_init();
    ibp_graph_learn_write((cudaGraphExec_t)exec, copy3d(p));
}

static void memset_learned(CUgraphExec exec, const CUDA_MEMSET_NODE_PARAMS *p)
{
    ibp_shim_init();
    if (p)
        ibp_graph_learn_write((cudaGraphExec_t)exec,
                              memset_span(p->dst, p->pitch, p->elementSize, p->width, p->height));
}

static void child_learned(CUgraphExec exec, CUgraph child)
{
    ibp_shim_init();
    ibp_graph_learn_child((cudaGraphExec_t)exec, (cudaGraph_t)child);
}

static void mem_ops_learned(CUgraphExec exec, const CUDA_BATCH_MEM_OP_NODE_PARAMS *p)
{
    ibp_shim_init();
    if (p)
        ibp_graph_learn_mem_ops((cudaGraphExec_t)exec, p->paramArray, p->count);
}

/* A kernel node's new arguments: func, or the CUkernel kern where func is NULL (CUDA 12's form). */
static void kernel_learned(CUgraphExec exec, CUfunction func, CUkernel kern, void **params, void **extra)
{
    ibp_shim_init();
    ibp_graph_learn_kernel((cudaGraphExec_t)exec, 1, func ? (const void *)func : (const void *)kern, params,
                           extra);
}

static void node_learned(CUgraphExec exec, const CUgraphNodeParams *p)
{
    ibp_shim_init();
    if (!p)
        return;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        ibp_graph_learn_write((cudaGraphExec_t)exec, copy3d(&p->memcpy.copyParams));
        break;
    case CU_GRAPH_NODE_TYPE_MEMSET:
        ibp_graph_learn_write((cudaGraphExec_t)exec,
                              memset_span(p->memset.dst, p->memset.pitch, p->memset.elementSize,
                                          p->memset.width, p->memset.height));
        break;
    case CU_GRAPH_NODE_TYPE_GRAPH:
        ibp_graph_learn_child((cudaGraphExec_t)exec, (cudaGraph_t)p->graph.graph);
        break;
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
        ibp_graph_learn_mem_ops((cudaGraphExec_t)exec, p->memOp.paramArray, p->memOp.count);
        break;
    case CU_GRAPH_NODE_TYPE_KERNEL:
        kernel_learned(exec, p->kernel.func, p->kernel.kern, p->kernel.kernelParams, p->kernel.extra);
        break;
    default: /* a host node was one already; the other kinds write no host memory the shim follows */
        break;
    }
}

/* CUDA 10-11's instantiation and update, which cuda.h no longer declares: programs built then
 * call them by these names. */
HOOK_THEN(cuGraphInstantiate, ID_cuGraphInstantiate,
          (CUgraphExec * exec, CUgraph graph, CUgraphNode *error_node, char *log, size_t log_size),
          (exec, graph, error_node, log, log_size), learned(exec, graph, 0))
HOOK_THEN(cuGraphInstantiate_v2, ID_cuGraphInstantiate_v2,
          (CUgraphExec * exec, CUgraph graph, CUgraphNode *error_node, char *log, size_t log_size),
          (exec, graph, error_node, log, log_size), learned(exec, graph, 0))
HOOK_THEN(cuGraphExecUpdate, ID_cuGraphExecUpdate,
          (CUgraphExec exec, CUgraph graph, CUgraphNode *error_node, CUgraphExecUpdateResult *result),
          (exec, graph, error_node, result), learned(&exec, graph, IBP_GRAPH_UPDATED))
HOOK_THEN(cuGraphInstantiateWithFlags, ID_cuGraphInstantiateWithFlags,
          (CUgraphExec * exec, CUgraph graph, unsigned long long flags), (exec, graph, flags),
          learned(exec, graph, flags))
HOOK_THEN(cuGraphInstantiateWithParams, ID_cuGraphInstantiateWithParams,
          (CUgraphExec * exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *params), (exec, graph, params),
          learned(exec, graph, params ? params->flags : 0))
HOOK_THEN(cuGraphInstantiateWithParams_ptsz, ID_cuGraphInstantiateWithParams_ptsz,
          (CUgraphExec * exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *params), (exec, graph, params),
          learned(exec, graph, params ? params->flags : 0))
HOOK_THEN(cuGraphExecUpdate_v2, ID_cuGraphExecUpdate_v2,
          (CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo *info), (exec, graph, info),
          learned(&exec, graph, IBP_GRAPH_UPDATED))
HOOK_THEN(cuGraphExecDestroy, ID_cuGraphExecDestroy, (CUgraphExec exec), (exec),
          ibp_graph_forget((cudaGraphExec_t)exec))
HOOK_THEN(cuGraphExecMemcpyNodeSetParams, ID_cuGraphExecMemcpyNodeSetParams,
          (CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D *p, CUcontext ctx), (exec, node, p, ctx),
          memcpy_learned(exec, p))
HOOK_THEN(cuGraphExecMemsetNodeSetParams, ID_cuGraphExecMemsetNodeSetParams,
          (CUgraphExec exec, CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx),
          (exec, node, p, ctx), memset_learned(exec, p))
HOOK_THEN(cuGraphExecChildGraphNodeSetParams, ID_cuGraphExecChildGraphNodeSetParams,
          (CUgraphExec exec, CUgraphNode node, CUgraph child), (exec, node, child),
          child_learned(exec, child))
HOOK_THEN(cuGraphExecBatchMemOpNodeSetParams, ID_cuGraphExecBatchMemOpNodeSetParams,
          (CUgraphExec exec, CUgraphNode node, const CUDA_BATCH_MEM_OP_NODE_PARAMS *p), (exec, node, p),
          mem_ops_learned(exec, p))
/* CUDA 10-11's form (no kern) and 12's. */
HOOK_THEN(cuGraphExecKernelNodeSetParams, ID_cuGraphExecKernelNodeSetParams,
          (CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v1 *p), (exec, node, p),
          if (p) kernel_learned(exec, p->func, NULL, p->kernelParams, p->extra))
HOOK_THEN(cuGraphExecKernelNodeSetParams_v2, ID_cuGraphExecKernelNodeSetParams_v2,
          (CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *p), (exec, node, p),
          if (p) kernel_learned(exec, p->func, p->kern, p->kernelParams, p->extra))
HOOK_THEN(cuGraphExecNodeSetParams, ID_cuGraphExecNodeSetParams,
          (CUgraphExec exec, CUgraphNode node, CUgraphNodeParams *p), (exec, node, p), node_learned(exec, p))

static CUresult graph_launch(int id, IbpStreamApi api, CUgraphExec exec, CUstream s)
{
    ibp_shim_init();
    typedef CUresult (*Fn)(CUgraphExec, CUstream);
    const Fn real = (Fn)real_fn(id);
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    IbpGraphLaunch gl;
    if (!ibp_graph_launch_begin(api, (cudaGraphExec_t)exec, (cudaStream_t)s, &gl))
        return real(exec, s);
    const CUresult ret = real(exec, s);
    /* The launch's end goes behind it through the driver's own host-function call, with the
     * default stream the launch had. */
    ibp_graph_launch_end(api, &gl, (cudaStream_t)s, ret == CUDA_SUCCESS, 1,
                         (IbpCuLaunchHostFuncFn)real_fn_quiet(api == IBP_STREAM_API_PER_THREAD
                                                                  ? ID_cuLaunchHostFunc_ptsz
                                                                  : ID_cuLaunchHostFunc));
    return ret;
}

CUresult cuGraphLaunch(CUgraphExec exec, CUstream s)
{
    return graph_launch(ID_cuGraphLaunch, IBP_STREAM_API_LEGACY, exec, s);
}

CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s)
{
    return graph_launch(ID_cuGraphLaunch_ptsz, IBP_STREAM_API_PER_THREAD, exec, s);
}

/* ---- kernel launches ---- */

/* A launch whose arguments point into a registered region writes it, as far as anyone can tell
 * (launches.c).  Each form reads the arguments, launches, and notes what it found. */
#define LAUNCH_DIMS                                                                                          \
    unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz
#define LAUNCH_DIM_ARGS gx, gy, gz, bx, by, bz

static CUresult launch_kernel(int id, IbpStreamApi api, CUfunction f, LAUNCH_DIMS, unsigned int shared,
                              CUstream s, void **params, void **extra)
{
    typedef CUresult (*Fn)(CUfunction, LAUNCH_DIMS, unsigned int, CUstream, void **, void **);
    const Fn real = (Fn)real_fn(id);
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    IbpArgRegions r = {0};
    ibp_args_read(&r, IBP_ARGS_DRIVER, f, params, extra);
    const CUresult ret = real(f, LAUNCH_DIM_ARGS, shared, s, params, extra);
    ibp_args_noted(api, &r, (cudaStream_t)s, ret == CUDA_SUCCESS);
    return ret;
}

static CUresult launch_cooperative(int id, IbpStreamApi api, CUfunction f, LAUNCH_DIMS, unsigned int shared,
                                   CUstream s, void **params)
{
    typedef CUresult (*Fn)(CUfunction, LAUNCH_DIMS, unsigned int, CUstream, void **);
    const Fn real = (Fn)real_fn(id);
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    IbpArgRegions r = {0};
    ibp_args_read(&r, IBP_ARGS_DRIVER, f, params, NULL);
    const CUresult ret = real(f, LAUNCH_DIM_ARGS, shared, s, params);
    ibp_args_noted(api, &r, (cudaStream_t)s, ret == CUDA_SUCCESS);
    return ret;
}

static CUresult launch_kernel_ex(int id, IbpStreamApi api, const CUlaunchConfig *config, CUfunction f,
                                 void **params, void **extra)
{
    typedef CUresult (*Fn)(const CUlaunchConfig *, CUfunction, void **, void **);
    const Fn real = (Fn)real_fn(id);
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    if (!config)
        return real(config, f, params, extra);
    IbpArgRegions r = {0};
    ibp_args_read(&r, IBP_ARGS_DRIVER, f, params, extra);
    const CUresult ret = real(config, f, params, extra);
    ibp_args_noted(api, &r, (cudaStream_t)config->hStream, ret == CUDA_SUCCESS);
    return ret;
}

IBP_HOOK CUresult cuLaunchKernel(CUfunction f, LAUNCH_DIMS, unsigned int shared, CUstream s, void **params,
                                 void **extra);
IBP_HOOK CUresult cuLaunchKernel_ptsz(CUfunction f, LAUNCH_DIMS, unsigned int shared, CUstream s,
                                      void **params, void **extra);
IBP_HOOK CUresult cuLaunchCooperativeKernel(CUfunction f, LAUNCH_DIMS, unsigned int shared, CUstream s,
                                            void **params);
IBP_HOOK CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, LAUNCH_DIMS, unsigned int shared, CUstream s,
                                                 void **params);
IBP_HOOK CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra);
IBP_HOOK CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params,
                                        void **extra);

CUresult cuLaunchKernel(CUfunction f, LAUNCH_DIMS, unsigned int shared, CUstream s, void **params,
                        void **extra)
{
    return launch_kernel(ID_cuLaunchKernel, IBP_STREAM_API_LEGACY, f, LAUNCH_DIM_ARGS, shared, s, params,
                         extra);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, LAUNCH_DIMS, unsigned int shared, CUstream s, void **params,
                             void **extra)
{
    return launch_kernel(ID_cuLaunchKernel_ptsz, IBP_STREAM_API_PER_THREAD, f, LAUNCH_DIM_ARGS, shared, s,
                         params, extra);
}

CUresult cuLaunchCooperativeKernel(CUfunction f, LAUNCH_DIMS, unsigned int shared, CUstream s, void **params)
{
    return launch_cooperative(ID_cuLaunchCooperativeKernel, IBP_STREAM_API_LEGACY, f, LAUNCH_DIM_ARGS, shared,
                              s, params);
}

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, LAUNCH_DIMS, unsigned int shared, CUstream s,
                                        void **params)
{
    return launch_cooperative(ID_cuLaunchCooperativeKernel_ptsz, IBP_STREAM_API_PER_THREAD, f,
                              LAUNCH_DIM_ARGS, shared, s, params);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    return launch_kernel_ex(ID_cuLaunchKernelEx, IBP_STREAM_API_LEGACY, config, f, params, extra);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    return launch_kernel_ex(ID_cuLaunchKernelEx_ptsz, IBP_STREAM_API_PER_THREAD, config, f, params, extra);
}

/* An unloaded module or library frees its function handles for others: the parameter sizes kept
 * per handle are dropped before and after (launches.c). */
static CUresult unload(int id, void *handle)
{
    typedef CUresult (*Fn)(void *);
    const Fn real = (Fn)real_fn(id);
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    ibp_args_forget_layouts();
    const CUresult ret = real(handle);
    ibp_args_forget_layouts();
    return ret;
}

IBP_HOOK CUresult cuModuleUnload(CUmodule m);
IBP_HOOK CUresult cuLibraryUnload(CUlibrary l);

CUresult cuModuleUnload(CUmodule m)
{
    return unload(ID_cuModuleUnload, (void *)m);
}

CUresult cuLibraryUnload(CUlibrary l)
{
    return unload(ID_cuLibraryUnload, (void *)l);
}

/* A reset of a device's primary context destroys what the shim keeps in it: the compressed path
 * stops first (router.c). */
static CUresult primary_reset(int id, CUdevice dev)
{
    typedef CUresult (*Fn)(CUdevice);
    const Fn real = (Fn)real_fn(id);
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    ibp_router_device_state_lost("cuDevicePrimaryCtxReset");
    return real(dev);
}

IBP_HOOK CUresult cuDevicePrimaryCtxReset(CUdevice dev);
IBP_HOOK CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev);

CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    return primary_reset(ID_cuDevicePrimaryCtxReset, dev);
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    return primary_reset(ID_cuDevicePrimaryCtxReset_v2, dev);
}

/* Destroying a context the shim copied in, or whose pinned memory it tracks, takes what the shim
 * keeps there with it: the compressed path stops first (router.c). */
static CUresult ctx_destroy(int id, CUcontext ctx)
{
    typedef CUresult (*Fn)(CUcontext);
    const Fn real = (Fn)real_fn(id);
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    ibp_router_context_destroyed(ctx, "cuCtxDestroy");
    return real(ctx);
}

IBP_HOOK CUresult cuCtxDestroy(CUcontext ctx);
IBP_HOOK CUresult cuCtxDestroy_v2(CUcontext ctx);

CUresult cuCtxDestroy(CUcontext ctx)
{
    return ctx_destroy(ID_cuCtxDestroy, ctx);
}

CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    return ctx_destroy(ID_cuCtxDestroy_v2, ctx);
}

/* A green context (CUDA 12.4) is made current as the CUcontext cuCtxFromGreenCtx converts it to,
 * the handle the runtime and the shim copied in: its destroy takes that context, and what the
 * shim keeps there, with it, as cuCtxDestroy does.  The conversion is asked again here, of the
 * driver itself (it writes nothing, so it is no hook); where it fails the driver does not know
 * the green context, and its destroy is left to fail as it will. */
typedef CUresult (*CtxFromGreenCtxFn)(CUcontext *ctx, CUgreenCtx green);
static _Atomic(void *) real_ctx_from_green;

IBP_HOOK CUresult cuGreenCtxDestroy(CUgreenCtx green);

CUresult cuGreenCtxDestroy(CUgreenCtx green)
{
    typedef CUresult (*Fn)(CUgreenCtx);
    const Fn real = (Fn)real_fn(ID_cuGreenCtxDestroy);
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    const CtxFromGreenCtxFn from_green =
        (CtxFromGreenCtxFn)resolve_cached(&real_ctx_from_green, ibp_real_resolve_driver, "cuCtxFromGreenCtx");
    CUcontext ctx = NULL;
    if (from_green && from_green(&ctx, green) == CUDA_SUCCESS)
        ibp_router_context_destroyed(ctx, "cuGreenCtxDestroy");
    return real(green);
}

/* ---- cuGetProcAddress ---- */

static void *const hooks[ID_COUNT] = {
#define HOOK_FN(name, suffix, params, args, span, kind, stream) (void *)name, (void *)name##suffix,
    IBP_DRIVER_WRITERS(HOOK_FN)
#undef HOOK_FN
#define OTHER_FN(name) (void *)name,
        IBP_DRIVER_OTHERS(OTHER_FN)
#undef OTHER_FN
};

/* Whether the caller at `ret` (a return address) lies in the CUDA runtime, whose copies are
 * followed by the runtime's hooks. */
static int called_by_runtime(const void *ret)
{
    return ibp_real_in_library(ret, "libcudart.so");
}

/* The driver answered *pfn for a symbol: when that is one of the functions hooked here (the very
 * address the driver exports it at), the hook goes in its place. */
static void *gpa_real(_Atomic(void *) *cache, const char *name);
static _Atomic(void *) real_gpa, real_gpa2;
IBP_HOOK CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags);
IBP_HOOK CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                      CUdriverProcAddressQueryResult *status);

static void hand_out_hook(const char *symbol, void **pfn, const void *caller)
{
    if (!symbol || !pfn || !*pfn || called_by_runtime(caller))
        return;
    /* cuGetProcAddress itself: every lookup through what it answers must come back here. */
    if (*pfn == gpa_real(&real_gpa2, "cuGetProcAddress_v2")) {
        *pfn = (void *)cuGetProcAddress_v2;
        return;
    }
    if (*pfn == gpa_real(&real_gpa, "cuGetProcAddress")) {
        *pfn = (void *)cuGetProcAddress;
        return;
    }
    /* By address, not by name: the very function hooked, whatever the name asked for (the driver
     * answers cuGraphInstantiate with cuGraphInstantiate_v2 from CUDA 11 on, cuStreamWriteValue32
     * with cuStreamWriteValue32_v2 from 12.0 on and with the first form before).  The driver has
     * answered, so it is loaded: a function it does not define is remembered as absent, not
     * looked up again. */
    for (int id = 0; id < ID_COUNT; id++) {
        if (atomic_load_explicit(&absent[id], memory_order_relaxed))
            continue;
        void *const real = real_fn_quiet(id);
        if (!real) {
            atomic_store_explicit(&absent[id], 1, memory_order_relaxed);
        } else if (real == *pfn) {
            *pfn = hooks[id];
            return;
        }
    }
}

typedef CUresult (*GetProcAddressFn)(const char *symbol, void **pfn, int version, cuuint64_t flags);
typedef CUresult (*GetProcAddressV2Fn)(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *status);

static void *gpa_real(_Atomic(void *) *cache, const char *name)
{
    return resolve_cached(cache, ibp_real_resolve_driver, name);
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    const GetProcAddressFn real = (GetProcAddressFn)gpa_real(&real_gpa, "cuGetProcAddress");
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    const CUresult ret = real(symbol, pfn, version, flags);
    if (ret == CUDA_SUCCESS)
        hand_out_hook(symbol, pfn, __builtin_return_address(0));
    return ret;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status)
{
    const GetProcAddressV2Fn real = (GetProcAddressV2Fn)gpa_real(&real_gpa2, "cuGetProcAddress_v2");
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    const CUresult ret = real(symbol, pfn, version, flags, status);
    if (ret == CUDA_SUCCESS)
        hand_out_hook(symbol, pfn, __builtin_return_address(0));
    return ret;
}

/* The runtime's way to the same addresses: what it answers the program gets hooked. */
typedef cudaError_t (*EntryPointFn)(const char *symbol, void **fn, unsigned long long flags,
                                    enum cudaDriverEntryPointQueryResult *status);
typedef cudaError_t (*EntryPointByVersionFn)(const char *symbol, void **fn, unsigned int version,
                                             unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *status);

static _Atomic(void *) real_entry[4];

static void *entry_real(int which, const char *name)
{
    return resolve_cached(&real_entry[which], ibp_real_resolve, name);
}

static cudaError_t entry_point(int which, const char *name, const char *symbol, void **fn,
                               unsigned long long flags, enum cudaDriverEntryPointQueryResult *status)
{
    const EntryPointFn real = (EntryPointFn)entry_real(which, name);
    if (!real)
        return cudaErrorSharedObjectSymbolNotFound;
    const cudaError_t ret = real(symbol, fn, flags, status);
    if (ret == cudaSuccess)
        hand_out_hook(symbol, fn, NULL);
    return ret;
}

static cudaError_t entry_point_by_version(int which, const char *name, const char *symbol, void **fn,
                                          unsigned int version, unsigned long long flags,
                                          enum cudaDriverEntryPointQueryResult *status)
{
    const EntryPointByVersionFn real = (EntryPointByVersionFn)entry_real(which, name);
    if (!real)
        return cudaErrorSharedObjectSymbolNotFound;
    const cudaError_t ret = real(symbol, fn, version, flags, status);
    if (ret == cudaSuccess)
        hand_out_hook(symbol, fn, NULL);
    return ret;
}

IBP_HOOK cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **fn, unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *status);
IBP_HOOK cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **fn, unsigned long long flags,
                                                  enum cudaDriverEntryPointQueryResult *status);
IBP_HOOK cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned int version,
                                                      unsigned long long flags,
                                                      enum cudaDriverEntryPointQueryResult *status);
IBP_HOOK cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **fn,
                                                           unsigned int version, unsigned long long flags,
                                                           enum cudaDriverEntryPointQueryResult *status);

cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **fn, unsigned long long flags,
                                    enum cudaDriverEntryPointQueryResult *status)
{
    return entry_point(0, "cudaGetDriverEntryPoint", symbol, fn, flags, status);
}

cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **fn, unsigned long long flags,
                                         enum cudaDriverEntryPointQueryResult *status)
{
    return entry_point(1, "cudaGetDriverEntryPoint_ptsz", symbol, fn, flags, status);
}

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned int version,
                                             unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *status)
{
    return entry_point_by_version(2, "cudaGetDriverEntryPointByVersion", symbol, fn, version, flags, status);
}

cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **fn, unsigned int version,
                                                  unsigned long long flags,
                                                  enum cudaDriverEntryPointQueryResult *status)
{
    return entry_point_by_version(3, "cudaGetDriverEntryPointByVersion_ptsz", symbol, fn, version, flags,
                                  status);
}
