/* SPDX-License-Identifier: MIT
 * ibpshim: the runtime's copies and memsets besides cudaMemcpy(Async).  None is ever sent
 * compressed; each is forwarded unchanged, and what it may write into host memory is noted as a
 * device-to-host copy's is (the device's writes land without a fault, so the tracker cannot see
 * them): pitched and 3D copies, copies from arrays and symbols, peer and batched copies, memsets
 * of pinned memory through its unified address. */
#include <cuda_runtime_api.h>

#include "interpose/pitched.h"
#include "interpose/real.h"
#include "interpose/router.h"

#define IBP_HOOK __attribute__((visibility("default")))

/* The toolkit header maps these names to their _ptds/_ptsz forms when a file is compiled for
 * per-thread default streams; this file defines both explicitly. */
#undef cudaMemcpy2D
#undef cudaMemcpy2DAsync
#undef cudaMemcpy2DFromArray
#undef cudaMemcpy2DFromArrayAsync
#undef cudaMemcpyFromArray
#undef cudaMemcpyFromArrayAsync
#undef cudaMemcpyFromSymbol
#undef cudaMemcpyFromSymbolAsync
#undef cudaMemcpy3D
#undef cudaMemcpy3DAsync
#undef cudaMemcpy3DPeer
#undef cudaMemcpy3DPeerAsync
#undef cudaMemcpyBatchAsync
#undef cudaMemcpy3DBatchAsync
#undef cudaMemset
#undef cudaMemsetAsync
#undef cudaMemset2D
#undef cudaMemset2DAsync
#undef cudaMemset3D
#undef cudaMemset3DAsync

/* How a call's writes are followed. */
enum {
    ON_STREAM = 0, /* enqueued on its stream: marked now and once the stream has passed it */
    LANDED = 1,    /* the call returned once they had landed (blocking copies to host memory) */
};

static void noted(IbpStreamApi api, IbpPitched d, enum cudaMemcpyKind kind, cudaStream_t stream, int how)
{
    uintptr_t lo;
    const size_t n = ibp_pitched_span(d, &lo);
    if (n)
        ibp_router_enqueued_write(api, (void *)lo, n, kind, stream, how);
}

/* One hook: the real call, then, on success, what it may have written noted.  The blocking
 * memsets and peer copies may return before their writes land: they are followed on the default
 * stream (stream NULL under the caller's default-stream semantics). */
#define WRITE_HOOK(name, api, params, args, span, kind, stream, how)                                         \
    IBP_HOOK cudaError_t name params                                                                         \
    {                                                                                                        \
        const IbpReal_##name real = IBP_REAL(name);                                                          \
        if (!real)                                                                                           \
            return IBP_REAL_MISSING_ERROR;                                                                   \
        const cudaError_t ret = real args;                                                                   \
        if (ret == cudaSuccess)                                                                              \
            noted(api, span, kind, stream, how);                                                             \
        return ret;                                                                                          \
    }

/* A hook and its per-thread form (suffix _ptds or _ptsz). */
#define WRITE_HOOKS(name, suffix, params, args, span, kind, stream, how)                                     \
    WRITE_HOOK(name, IBP_STREAM_API_LEGACY, params, args, span, kind, stream, how)                           \
    WRITE_HOOK(name##suffix, IBP_STREAM_API_PER_THREAD, params, args, span, kind, stream, how)

#define NO_STREAM ((cudaStream_t)0)

/* Every declaration the header leaves out without CUDA_API_PER_THREAD_DEFAULT_STREAM. */
#define DECLARE(name, ret, params) IBP_HOOK ret name params;
IBP_REAL_CUDART_WRITERS(DECLARE)
#undef DECLARE

WRITE_HOOKS(cudaMemcpy2D, _ptds,
            (void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
             enum cudaMemcpyKind kind),
            (dst, dpitch, src, spitch, width, height, kind), ibp_pitched_2d(dst, dpitch, width, height), kind,
            NO_STREAM, LANDED)
WRITE_HOOKS(cudaMemcpy2DAsync, _ptsz,
            (void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
             enum cudaMemcpyKind kind, cudaStream_t stream),
            (dst, dpitch, src, spitch, width, height, kind, stream),
            ibp_pitched_2d(dst, dpitch, width, height), kind, stream, ON_STREAM)
WRITE_HOOKS(cudaMemcpy2DFromArray, _ptds,
            (void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t width,
             size_t height, enum cudaMemcpyKind kind),
            (dst, dpitch, src, wOffset, hOffset, width, height, kind),
            ibp_pitched_2d(dst, dpitch, width, height), kind, NO_STREAM, LANDED)
WRITE_HOOKS(cudaMemcpy2DFromArrayAsync, _ptsz,
            (void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t width,
             size_t height, enum cudaMemcpyKind kind, cudaStream_t stream),
            (dst, dpitch, src, wOffset, hOffset, width, height, kind, stream),
            ibp_pitched_2d(dst, dpitch, width, height), kind, stream, ON_STREAM)
WRITE_HOOKS(cudaMemcpyFromArray, _ptds,
            (void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count,
             enum cudaMemcpyKind kind),
            (dst, src, wOffset, hOffset, count, kind), ibp_pitched_row(dst, count), kind, NO_STREAM, LANDED)
WRITE_HOOKS(cudaMemcpyFromArrayAsync, _ptsz,
            (void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count,
             enum cudaMemcpyKind kind, cudaStream_t stream),
            (dst, src, wOffset, hOffset, count, kind, stream), ibp_pitched_row(dst, count), kind, stream,
            ON_STREAM)
WRITE_HOOKS(cudaMemcpyFromSymbol, _ptds,
            (void *dst, const void *symbol, size_t count, size_t offset, enum cudaMemcpyKind kind),
            (dst, symbol, count, offset, kind), ibp_pitched_row(dst, count), kind, NO_STREAM, LANDED)
WRITE_HOOKS(cudaMemcpyFromSymbolAsync, _ptsz,
            (void *dst, const void *symbol, size_t count, size_t offset, enum cudaMemcpyKind kind,
             cudaStream_t stream),
            (dst, symbol, count, offset, kind, stream), ibp_pitched_row(dst, count), kind, stream, ON_STREAM)
WRITE_HOOKS(cudaMemcpy3D, _ptds, (const struct cudaMemcpy3DParms *p), (p), ibp_pitched_memcpy3d(p), p->kind,
            NO_STREAM, LANDED)
WRITE_HOOKS(cudaMemcpy3DAsync, _ptsz, (const struct cudaMemcpy3DParms *p, cudaStream_t stream), (p, stream),
            ibp_pitched_memcpy3d(p), p->kind, stream, ON_STREAM)
WRITE_HOOKS(cudaMemcpy3DPeer, _ptds, (const struct cudaMemcpy3DPeerParms *p), (p),
            ibp_pitched_3d(p->dstArray, p->dstPtr, p->dstPos, p->extent, p->srcArray != NULL),
            cudaMemcpyDefault, NO_STREAM, ON_STREAM)
WRITE_HOOKS(cudaMemcpy3DPeerAsync, _ptsz, (const struct cudaMemcpy3DPeerParms *p, cudaStream_t stream),
            (p, stream), ibp_pitched_3d(p->dstArray, p->dstPtr, p->dstPos, p->extent, p->srcArray != NULL),
            cudaMemcpyDefault, stream, ON_STREAM)
WRITE_HOOK(cudaMemcpyPeer, IBP_STREAM_API_LEGACY,
           (void *dst, int dstDevice, const void *src, int srcDevice, size_t count),
           (dst, dstDevice, src, srcDevice, count), ibp_pitched_row(dst, count), cudaMemcpyDefault, NO_STREAM,
           ON_STREAM)
WRITE_HOOK(cudaMemcpyPeerAsync, IBP_STREAM_API_LEGACY,
           (void *dst, int dstDevice, const void *src, int srcDevice, size_t count, cudaStream_t stream),
           (dst, dstDevice, src, srcDevice, count, stream), ibp_pitched_row(dst, count), cudaMemcpyDefault,
           stream, ON_STREAM)
WRITE_HOOKS(cudaMemset, _ptds, (void *devPtr, int value, size_t count), (devPtr, value, count),
            ibp_pitched_row(devPtr, count), cudaMemcpyDeviceToHost, NO_STREAM, ON_STREAM)
WRITE_HOOKS(cudaMemsetAsync, _ptsz, (void *devPtr, int value, size_t count, cudaStream_t stream),
            (devPtr, value, count, stream), ibp_pitched_row(devPtr, count), cudaMemcpyDeviceToHost, stream,
            ON_STREAM)
WRITE_HOOKS(cudaMemset2D, _ptds, (void *devPtr, size_t pitch, int value, size_t width, size_t height),
            (devPtr, pitch, value, width, height), ibp_pitched_2d(devPtr, pitch, width, height),
            cudaMemcpyDeviceToHost, NO_STREAM, ON_STREAM)
WRITE_HOOKS(cudaMemset2DAsync, _ptsz,
            (void *devPtr, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream),
            (devPtr, pitch, value, width, height, stream), ibp_pitched_2d(devPtr, pitch, width, height),
            cudaMemcpyDeviceToHost, stream, ON_STREAM)
WRITE_HOOKS(cudaMemset3D, _ptds, (struct cudaPitchedPtr p, int value, struct cudaExtent extent),
            (p, value, extent), ibp_pitched_3d(NULL, p, (struct cudaPos){0, 0, 0}, extent, 0),
            cudaMemcpyDeviceToHost, NO_STREAM, ON_STREAM)
WRITE_HOOKS(cudaMemset3DAsync, _ptsz,
            (struct cudaPitchedPtr p, int value, struct cudaExtent extent, cudaStream_t stream),
            (p, value, extent, stream), ibp_pitched_3d(NULL, p, (struct cudaPos){0, 0, 0}, extent, 0),
            cudaMemcpyDeviceToHost, stream, ON_STREAM)

/* ---- Batches: one span per copy ---- */

static cudaError_t batch(IbpStreamApi api, IbpReal_cudaMemcpyBatchAsync real, void *const *dsts,
                         const void *const *srcs, const size_t *sizes, size_t count,
                         struct cudaMemcpyAttributes *attrs, size_t *attrs_idxs, size_t nattrs,
                         cudaStream_t stream)
{
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    const cudaError_t ret = real(dsts, srcs, sizes, count, attrs, attrs_idxs, nattrs, stream);
    if (ret == cudaSuccess)
        for (size_t i = 0; i < count; i++)
            noted(api, ibp_pitched_row(dsts[i], sizes[i]), cudaMemcpyDefault, stream, ON_STREAM);
    return ret;
}

IBP_HOOK cudaError_t cudaMemcpyBatchAsync(void *const *dsts, const void *const *srcs, const size_t *sizes,
                                          size_t count, struct cudaMemcpyAttributes *attrs, size_t *attrsIdxs,
                                          size_t numAttrs, cudaStream_t stream)
{
    return batch(IBP_STREAM_API_LEGACY, IBP_REAL(cudaMemcpyBatchAsync), dsts, srcs, sizes, count, attrs,
                 attrsIdxs, numAttrs, stream);
}

IBP_HOOK cudaError_t cudaMemcpyBatchAsync_ptsz(void *const *dsts, const void *const *srcs,
                                               const size_t *sizes, size_t count,
                                               struct cudaMemcpyAttributes *attrs, size_t *attrsIdxs,
                                               size_t numAttrs, cudaStream_t stream)
{
    return batch(IBP_STREAM_API_PER_THREAD, IBP_REAL(cudaMemcpyBatchAsync_ptsz), dsts, srcs, sizes, count,
                 attrs, attrsIdxs, numAttrs, stream);
}

/* A pointer operand's rows are rowLength elements apart (0: the extent's width), its layers
 * layerHeight rows (0: the extent's height); an element is a byte unless the source is an array. */
static IbpPitched batch3d_span(const struct cudaMemcpy3DBatchOp *op)
{
    if (op->dst.type != cudaMemcpyOperandTypePointer)
        return (IbpPitched){0};
    const size_t element = op->src.type == cudaMemcpyOperandTypeArray ? IBP_ARRAY_ELEMENT_MAX : 1;
    const size_t row = op->dst.op.ptr.rowLength ? op->dst.op.ptr.rowLength : op->extent.width;
    const size_t rows = op->dst.op.ptr.layerHeight ? op->dst.op.ptr.layerHeight : op->extent.height;
    size_t pitch, width;
    if (__builtin_mul_overflow(row, element, &pitch) ||
        __builtin_mul_overflow(op->extent.width, element, &width))
        pitch = width = SIZE_MAX;
    return (IbpPitched){.base = (uintptr_t)op->dst.op.ptr.ptr,
                        .pitch = pitch,
                        .rows = rows,
                        .width = width,
                        .height = op->extent.height,
                        .depth = op->extent.depth};
}

static cudaError_t batch3d(IbpStreamApi api, IbpReal_cudaMemcpy3DBatchAsync real, size_t nops,
                           struct cudaMemcpy3DBatchOp *ops, unsigned long long flags, cudaStream_t stream)
{
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    const cudaError_t ret = real(nops, ops, flags, stream);
    if (ret == cudaSuccess)
        for (size_t i = 0; i < nops; i++)
            noted(api, batch3d_span(&ops[i]), cudaMemcpyDefault, stream, ON_STREAM);
    return ret;
}

IBP_HOOK cudaError_t cudaMemcpy3DBatchAsync(size_t numOps, struct cudaMemcpy3DBatchOp *opList,
                                            unsigned long long flags, cudaStream_t stream)
{
    return batch3d(IBP_STREAM_API_LEGACY, IBP_REAL(cudaMemcpy3DBatchAsync), numOps, opList, flags, stream);
}

IBP_HOOK cudaError_t cudaMemcpy3DBatchAsync_ptsz(size_t numOps, struct cudaMemcpy3DBatchOp *opList,
                                                 unsigned long long flags, cudaStream_t stream)
{
    return batch3d(IBP_STREAM_API_PER_THREAD, IBP_REAL(cudaMemcpy3DBatchAsync_ptsz), numOps, opList, flags,
                   stream);
}
