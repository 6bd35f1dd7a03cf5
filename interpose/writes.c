/* SPDX-License-Identifier: MIT
 * ibpshim: the runtime's copies and memsets besides cudaMemcpy(Async).  None is ever sent
 * compressed; each is forwarded unchanged, and what it may write into host memory is noted as a
 * device-to-host copy's is (the device's writes land without a fault, so the tracker cannot see
 * them): pitched and 3D copies, copies from arrays and symbols, peer and batched copies, memsets
 * of pinned memory through its unified address. */
#include <cuda_runtime_api.h>

#include <stdatomic.h>
#include <stdint.h>

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

static void noted(IbpStreamApi api, IbpPitched d, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    uintptr_t lo;
    const size_t n = ibp_pitched_span(d, &lo);
    if (n)
        ibp_router_enqueued_write(api, (void *)lo, n, kind, stream);
}

/* One hook: the real call, then, on success, what it may have written noted, marked now and once
 * stream has passed it (blocking calls: NO_STREAM, the default stream of the caller's semantics;
 * CUDA returns from some, peer copies for one, before their writes land). */
#define WRITE_HOOK(name, api, params, args, span, kind, stream)                                              \
    IBP_HOOK cudaError_t name params                                                                         \
    {                                                                                                        \
        const IbpReal_##name real = IBP_REAL(name);                                                          \
        if (!real)                                                                                           \
            return IBP_REAL_MISSING_ERROR;                                                                   \
        const cudaError_t ret = real args;                                                                   \
        if (ret == cudaSuccess)                                                                              \
            noted(api, span, kind, stream);                                                                  \
        return ret;                                                                                          \
    }

/* A hook and its per-thread form (suffix _ptds or _ptsz). */
#define WRITE_HOOKS(name, suffix, params, args, span, kind, stream)                                          \
    WRITE_HOOK(name, IBP_STREAM_API_LEGACY, params, args, span, kind, stream)                                \
    WRITE_HOOK(name##suffix, IBP_STREAM_API_PER_THREAD, params, args, span, kind, stream)

#define NO_STREAM ((cudaStream_t)0)

/* Every declaration the header leaves out without CUDA_API_PER_THREAD_DEFAULT_STREAM. */
#define DECLARE(name, ret, params) IBP_HOOK ret name params;
IBP_REAL_CUDART_WRITERS(DECLARE)
#undef DECLARE

WRITE_HOOKS(cudaMemcpy2D, _ptds,
            (void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
             enum cudaMemcpyKind kind),
            (dst, dpitch, src, spitch, width, height, kind), ibp_pitched_2d(dst, dpitch, width, height), kind,
            NO_STREAM)
WRITE_HOOKS(cudaMemcpy2DAsync, _ptsz,
            (void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
             enum cudaMemcpyKind kind, cudaStream_t stream),
            (dst, dpitch, src, spitch, width, height, kind, stream),
            ibp_pitched_2d(dst, dpitch, width, height), kind, stream)
WRITE_HOOKS(cudaMemcpy2DFromArray, _ptds,
            (void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t width,
             size_t height, enum cudaMemcpyKind kind),
            (dst, dpitch, src, wOffset, hOffset, width, height, kind),
            ibp_pitched_2d(dst, dpitch, width, height), kind, NO_STREAM)
WRITE_HOOKS(cudaMemcpy2DFromArrayAsync, _ptsz,
            (void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t width,
             size_t height, enum cudaMemcpyKind kind, cudaStream_t stream),
            (dst, dpitch, src, wOffset, hOffset, width, height, kind, stream),
            ibp_pitched_2d(dst, dpitch, width, height), kind, stream)
WRITE_HOOKS(cudaMemcpyFromArray, _ptds,
            (void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count,
             enum cudaMemcpyKind kind),
            (dst, src, wOffset, hOffset, count, kind), ibp_pitched_row(dst, count), kind, NO_STREAM)
WRITE_HOOKS(cudaMemcpyFromArrayAsync, _ptsz,
            (void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count,
             enum cudaMemcpyKind kind, cudaStream_t stream),
            (dst, src, wOffset, hOffset, count, kind, stream), ibp_pitched_row(dst, count), kind, stream)
WRITE_HOOKS(cudaMemcpyFromSymbol, _ptds,
            (void *dst, const void *symbol, size_t count, size_t offset, enum cudaMemcpyKind kind),
            (dst, symbol, count, offset, kind), ibp_pitched_row(dst, count), kind, NO_STREAM)
WRITE_HOOKS(cudaMemcpyFromSymbolAsync, _ptsz,
            (void *dst, const void *symbol, size_t count, size_t offset, enum cudaMemcpyKind kind,
             cudaStream_t stream),
            (dst, symbol, count, offset, kind, stream), ibp_pitched_row(dst, count), kind, stream)
WRITE_HOOKS(cudaMemcpy3D, _ptds, (const struct cudaMemcpy3DParms *p), (p), ibp_pitched_memcpy3d(p), p->kind,
            NO_STREAM)
WRITE_HOOKS(cudaMemcpy3DAsync, _ptsz, (const struct cudaMemcpy3DParms *p, cudaStream_t stream), (p, stream),
            ibp_pitched_memcpy3d(p), p->kind, stream)
WRITE_HOOKS(cudaMemcpy3DPeer, _ptds, (const struct cudaMemcpy3DPeerParms *p), (p),
            ibp_pitched_3d(p->dstArray, p->dstPtr, p->dstPos, p->extent, p->srcArray != NULL),
            cudaMemcpyDefault, NO_STREAM)
WRITE_HOOKS(cudaMemcpy3DPeerAsync, _ptsz, (const struct cudaMemcpy3DPeerParms *p, cudaStream_t stream),
            (p, stream), ibp_pitched_3d(p->dstArray, p->dstPtr, p->dstPos, p->extent, p->srcArray != NULL),
            cudaMemcpyDefault, stream)
WRITE_HOOK(cudaMemcpyPeer, IBP_STREAM_API_LEGACY,
           (void *dst, int dstDevice, const void *src, int srcDevice, size_t count),
           (dst, dstDevice, src, srcDevice, count), ibp_pitched_row(dst, count), cudaMemcpyDefault, NO_STREAM)
WRITE_HOOK(cudaMemcpyPeerAsync, IBP_STREAM_API_LEGACY,
           (void *dst, int dstDevice, const void *src, int srcDevice, size_t count, cudaStream_t stream),
           (dst, dstDevice, src, srcDevice, count, stream), ibp_pitched_row(dst, count), cudaMemcpyDefault,
           stream)
WRITE_HOOKS(cudaMemset, _ptds, (void *devPtr, int value, size_t count), (devPtr, value, count),
            ibp_pitched_row(devPtr, count), cudaMemcpyDeviceToHost, NO_STREAM)
WRITE_HOOKS(cudaMemsetAsync, _ptsz, (void *devPtr, int value, size_t count, cudaStream_t stream),
            (devPtr, value, count, stream), ibp_pitched_row(devPtr, count), cudaMemcpyDeviceToHost, stream)
WRITE_HOOKS(cudaMemset2D, _ptds, (void *devPtr, size_t pitch, int value, size_t width, size_t height),
            (devPtr, pitch, value, width, height), ibp_pitched_2d(devPtr, pitch, width, height),
            cudaMemcpyDeviceToHost, NO_STREAM)
WRITE_HOOKS(cudaMemset2DAsync, _ptsz,
            (void *devPtr, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream),
            (devPtr, pitch, value, width, height, stream), ibp_pitched_2d(devPtr, pitch, width, height),
            cudaMemcpyDeviceToHost, stream)
WRITE_HOOKS(cudaMemset3D, _ptds, (struct cudaPitchedPtr p, int value, struct cudaExtent extent),
            (p, value, extent), ibp_pitched_3d(NULL, p, (struct cudaPos){0, 0, 0}, extent, 0),
            cudaMemcpyDeviceToHost, NO_STREAM)
WRITE_HOOKS(cudaMemset3DAsync, _ptsz,
            (struct cudaPitchedPtr p, int value, struct cudaExtent extent, cudaStream_t stream),
            (p, value, extent, stream), ibp_pitched_3d(NULL, p, (struct cudaPos){0, 0, 0}, extent, 0),
            cudaMemcpyDeviceToHost, stream)

/* ---- Batches ---- */

void ibp_batch_flush(IbpBatch *b)
{
    if (b->hi > b->lo)
        ibp_router_enqueued_write(b->api, (void *)b->lo, b->hi - b->lo, cudaMemcpyDefault, b->stream);
    b->lo = b->hi = 0;
}

void ibp_batch_add(IbpBatch *b, IbpPitched d)
{
    uintptr_t lo, base;
    size_t size;
    const size_t n = ibp_pitched_span(d, &lo);
    if (!n)
        return;
    const uintptr_t hi = lo + n;
    if (b->hi > b->lo && lo >= b->base && hi <= b->end) {
        b->lo = lo < b->lo ? lo : b->lo;
        b->hi = hi > b->hi ? hi : b->hi;
        return;
    }
    ibp_batch_flush(b);
    if (ibp_router_tracked_region((const void *)lo, n, &base, &size))
        *b = (IbpBatch){
            .api = b->api, .stream = b->stream, .lo = lo, .hi = hi, .base = base, .end = base + size};
    else /* untracked (one quick search), or across regions */
        ibp_router_enqueued_write(b->api, (void *)lo, n, cudaMemcpyDefault, b->stream);
}

/* CUDA 12.8 and 12.9 took a failIdx argument before the stream, which 13.0 dropped; the batch hooks
 * are defined to take either and forward by the runtime behind them. */
static int runtime_is_12(void)
{
    static atomic_int major; /* 0: not asked yet */
    int m = atomic_load_explicit(&major, memory_order_relaxed);
    if (!m) {
        typedef cudaError_t (*VersionFn)(int *);
        const VersionFn version = (VersionFn)ibp_real_resolve("cudaRuntimeGetVersion");
        int v = 0;
        m = version && version(&v) == cudaSuccess && v >= 1000 ? v / 1000 : 13;
        atomic_store_explicit(&major, m, memory_order_relaxed);
    }
    return m == 12;
}

typedef cudaError_t (*Batch12Fn)(void *const *dsts, const void *const *srcs, const size_t *sizes,
                                 size_t count, struct cudaMemcpyAttributes *attrs, size_t *attrs_idxs,
                                 size_t nattrs, size_t *fail_idx, cudaStream_t stream);
typedef cudaError_t (*Batch3d12Fn)(size_t nops, struct cudaMemcpy3DBatchOp *ops, size_t *fail_idx,
                                   unsigned long long flags, cudaStream_t stream);

/* a8 and a9: 13.x passes the stream in a8 (a9 is whatever the caller's frame holds there, never
 * read); 12.x passes failIdx in a8, the stream in a9.  What the copies wrote is noted whatever the
 * result (a batch that fails part way may have enqueued the copies before the failure; marking
 * bytes not written costs a recompression, never a wrong byte). */
static cudaError_t batch(IbpStreamApi api, void *real, void *const *dsts, const void *const *srcs,
                         const size_t *sizes, size_t count, struct cudaMemcpyAttributes *attrs, size_t *idxs,
                         size_t nattrs, uintptr_t a8, uintptr_t a9)
{
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    const int v12 = runtime_is_12();
    const cudaStream_t stream = (cudaStream_t)(v12 ? a9 : a8);
    const cudaError_t ret =
        v12 ? ((Batch12Fn)real)(dsts, srcs, sizes, count, attrs, idxs, nattrs, (size_t *)a8, stream)
            : ((IbpReal_cudaMemcpyBatchAsync)real)(dsts, srcs, sizes, count, attrs, idxs, nattrs, stream);
    if (dsts && sizes) {
        IbpBatch b = {.api = api, .stream = stream};
        for (size_t i = 0; i < count; i++)
            ibp_batch_add(&b, ibp_pitched_row(dsts[i], sizes[i]));
        ibp_batch_flush(&b);
    }
    return ret;
}

/* Declared here under the exported names, with the arguments of either version. */
IBP_HOOK cudaError_t batch_hook(void *const *dsts, const void *const *srcs, const size_t *sizes, size_t count,
                                struct cudaMemcpyAttributes *attrs, size_t *idxs, size_t nattrs, uintptr_t a8,
                                uintptr_t a9) __asm__("cudaMemcpyBatchAsync");
IBP_HOOK cudaError_t batch_hook_ptsz(void *const *dsts, const void *const *srcs, const size_t *sizes,
                                     size_t count, struct cudaMemcpyAttributes *attrs, size_t *idxs,
                                     size_t nattrs, uintptr_t a8,
                                     uintptr_t a9) __asm__("cudaMemcpyBatchAsync_ptsz");
IBP_HOOK cudaError_t batch3d_hook(size_t nops, struct cudaMemcpy3DBatchOp *ops, uintptr_t a3, uintptr_t a4,
                                  uintptr_t a5) __asm__("cudaMemcpy3DBatchAsync");
IBP_HOOK cudaError_t batch3d_hook_ptsz(size_t nops, struct cudaMemcpy3DBatchOp *ops, uintptr_t a3,
                                       uintptr_t a4, uintptr_t a5) __asm__("cudaMemcpy3DBatchAsync_ptsz");

cudaError_t batch_hook(void *const *dsts, const void *const *srcs, const size_t *sizes, size_t count,
                       struct cudaMemcpyAttributes *attrs, size_t *idxs, size_t nattrs, uintptr_t a8,
                       uintptr_t a9)
{
    return batch(IBP_STREAM_API_LEGACY, (void *)IBP_REAL(cudaMemcpyBatchAsync), dsts, srcs, sizes, count,
                 attrs, idxs, nattrs, a8, a9);
}

cudaError_t batch_hook_ptsz(void *const *dsts, const void *const *srcs, const size_t *sizes, size_t count,
                            struct cudaMemcpyAttributes *attrs, size_t *idxs, size_t nattrs, uintptr_t a8,
                            uintptr_t a9)
{
    return batch(IBP_STREAM_API_PER_THREAD, (void *)IBP_REAL(cudaMemcpyBatchAsync_ptsz), dsts, srcs, sizes,
                 count, attrs, idxs, nattrs, a8, a9);
}

static IbpPitched batch3d_span(const struct cudaMemcpy3DBatchOp *op)
{
    return ibp_pitched_batch_op(op->dst.type == cudaMemcpyOperandTypePointer,
                                op->src.type == cudaMemcpyOperandTypeArray, op->dst.op.ptr.ptr,
                                op->dst.op.ptr.rowLength, op->dst.op.ptr.layerHeight, op->extent.width,
                                op->extent.height, op->extent.depth);
}

/* 13.x: (nops, ops, flags, stream); 12.x: (nops, ops, failIdx, flags, stream). */
static cudaError_t batch3d(IbpStreamApi api, void *real, size_t nops, struct cudaMemcpy3DBatchOp *ops,
                           uintptr_t a3, uintptr_t a4, uintptr_t a5)
{
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    const int v12 = runtime_is_12();
    const cudaStream_t stream = (cudaStream_t)(v12 ? a5 : a4);
    const cudaError_t ret =
        v12 ? ((Batch3d12Fn)real)(nops, ops, (size_t *)a3, (unsigned long long)a4, stream)
            : ((IbpReal_cudaMemcpy3DBatchAsync)real)(nops, ops, (unsigned long long)a3, stream);
    if (ops) {
        IbpBatch b = {.api = api, .stream = stream};
        for (size_t i = 0; i < nops; i++)
            ibp_batch_add(&b, batch3d_span(&ops[i]));
        ibp_batch_flush(&b);
    }
    return ret;
}

cudaError_t batch3d_hook(size_t nops, struct cudaMemcpy3DBatchOp *ops, uintptr_t a3, uintptr_t a4,
                         uintptr_t a5)
{
    return batch3d(IBP_STREAM_API_LEGACY, (void *)IBP_REAL(cudaMemcpy3DBatchAsync), nops, ops, a3, a4, a5);
}

cudaError_t batch3d_hook_ptsz(size_t nops, struct cudaMemcpy3DBatchOp *ops, uintptr_t a3, uintptr_t a4,
                              uintptr_t a5)
{
    return batch3d(IBP_STREAM_API_PER_THREAD, (void *)IBP_REAL(cudaMemcpy3DBatchAsync_ptsz), nops, ops, a3,
                   a4, a5);
}
