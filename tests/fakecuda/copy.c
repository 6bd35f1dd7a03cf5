/* SPDX-License-Identifier: MIT
 * ibpshim: fake CUDA driver: memcpy and memset entry points with CUDA's host synchronization rules. */
#include "tests/fakecuda/internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* What an entry point requires of its endpoints (cuMemcpyHtoD wants a device destination...). */
typedef enum CopyShape {
    SHAPE_ANY,
    SHAPE_H2D,
    SHAPE_D2H,
    SHAPE_D2D,
} CopyShape;

typedef enum CopyMode {
    MODE_ASYNC, /* cu*Async */
    MODE_SYNC,  /* the blocking forms */
} CopyMode;

/* Classifies an endpoint of n bytes: device (must lie wholly in one allocation), pinned (wholly in
 * one pinned or registered range) or pageable (anything else, including ranges only partly pinned,
 * which the driver also stages).  Returns false for a bad device range. */
static bool classify(uintptr_t p, size_t n, bool *device, bool *pinned)
{
    FakecudaPtrInfo info;
    fakecuda_mem_lookup(p, &info);
    *device = info.kind == FAKECUDA_MEM_DEVICE;
    *pinned = false;
    if (*device)
        return info.size > 0 && n <= info.size - (p - info.base);
    if (info.kind != FAKECUDA_MEM_PAGEABLE)
        *pinned = n <= info.size - (p - info.base);
    return true;
}

/* The last asynchronous copy from the host to the device: the stream handle it was enqueued on. */
static pthread_mutex_t last_h2d_mu = PTHREAD_MUTEX_INITIALIZER;
static CUstream last_h2d_stream;
static size_t last_h2d_bytes;
static bool last_h2d_any;

FAKECUDA_EXPORT int fakecuda_last_h2d(void **stream, size_t *bytes)
{
    pthread_mutex_lock(&last_h2d_mu);
    const int any = last_h2d_any;
    if (stream)
        *stream = (void *)last_h2d_stream;
    if (bytes)
        *bytes = last_h2d_bytes;
    pthread_mutex_unlock(&last_h2d_mu);
    return any;
}

static CUresult copy(uintptr_t dst, uintptr_t src, size_t n, CUstream handle, bool per_thread,
                     CopyMode mode, CopyShape shape)
{
    CUstream s = NULL;
    CUresult r = fakecuda_stream_get(handle, per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    bool dst_dev = false, dst_pinned = false, src_dev = false, src_pinned = false;
    FakecudaOp *op = NULL;
    if (n == 0)
        goto done; /* an empty copy is a successful no-op, whatever the pointers */
    const bool dst_ok = classify(dst, n, &dst_dev, &dst_pinned);
    const bool src_ok = classify(src, n, &src_dev, &src_pinned);
    if (!dst || !src || !dst_ok || !src_ok) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    if ((shape == SHAPE_H2D && (!dst_dev || src_dev)) || (shape == SHAPE_D2H && (dst_dev || !src_dev)) ||
        (shape == SHAPE_D2D && (!dst_dev || !src_dev))) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    if (mode == MODE_ASYNC && dst_dev && !src_dev) {
        pthread_mutex_lock(&last_h2d_mu);
        last_h2d_stream = handle;
        last_h2d_bytes = n;
        last_h2d_any = true;
        pthread_mutex_unlock(&last_h2d_mu);
    }
    const bool src_pageable = !src_dev && !src_pinned;
    const bool dst_pageable = !dst_dev && !dst_pinned;
    /* Captured copies, pageable ones included, read their source at each graph launch. */
    const bool capturing = fakecuda_stream_capturing(s);
    op = fakecuda_op_new(FAKECUDA_OP_COPY);
    if (!op) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    op->u.copy.dst = dst;
    op->u.copy.src = src;
    op->u.copy.n = n;
    op->u.copy.delay = mode == MODE_ASYNC;

    bool wait = mode == MODE_SYNC;
    if (capturing) {
        wait = false;
    } else if (dst_dev && src_pageable) {
        /* The driver consumes a pageable source before returning: later host writes don't arrive. */
        op->u.copy.staging = malloc(n);
        if (!op->u.copy.staging) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            goto done;
        }
        memcpy(op->u.copy.staging, (const void *)src, n);
        atomic_fetch_add_explicit(&fakecuda_counters.h2d_staged_calls, 1, memory_order_relaxed);
        /* The blocking form also returns once the source is staged, before the DMA lands. */
        wait = false;
    } else if (dst_dev && src_dev) {
        wait = false; /* device to device never blocks the host */
    } else if (!dst_dev && !src_dev) {
        wait = wait || src_pageable || dst_pageable; /* host to host with pageable memory is done now */
    } else if (dst_pageable) {
        wait = true; /* device to pageable host returns once the copy is done */
    }
    FAKECUDA_TRACE("memcpy dst=%#lx%s src=%#lx%s n=%zu stream=%p %s", (unsigned long)dst,
                   dst_dev ? "(dev)" : dst_pinned ? "(pinned)" : "", (unsigned long)src,
                   src_dev ? "(dev)" : src_pinned ? "(pinned)" : "", n, (void *)handle,
                   wait ? "sync" : "async");
    r = wait ? fakecuda_stream_submit_sync(s, op) : fakecuda_stream_submit(s, op);
    op = NULL;
done:
    fakecuda_op_free(op);
    fakecuda_stream_unref(s);
    return r;
}

#define P(x) ((uintptr_t)(x))

FAKECUDA_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return copy(P(dst), P(src), n, NULL, false, MODE_SYNC, SHAPE_ANY);
}

FAKECUDA_EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return copy(P(dst), P(src), n, NULL, true, MODE_SYNC, SHAPE_ANY);
}

FAKECUDA_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return copy(P(dst), P(src), n, s, false, MODE_ASYNC, SHAPE_ANY);
}

FAKECUDA_EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return copy(P(dst), P(src), n, s, true, MODE_ASYNC, SHAPE_ANY);
}

FAKECUDA_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
    return copy(P(dst), P(src), n, NULL, false, MODE_SYNC, SHAPE_H2D);
}

FAKECUDA_EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n)
{
    return copy(P(dst), P(src), n, NULL, true, MODE_SYNC, SHAPE_H2D);
}

FAKECUDA_EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
    return copy(P(dst), P(src), n, NULL, false, MODE_SYNC, SHAPE_D2H);
}

FAKECUDA_EXPORT CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n)
{
    return copy(P(dst), P(src), n, NULL, true, MODE_SYNC, SHAPE_D2H);
}

FAKECUDA_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return copy(P(dst), P(src), n, NULL, false, MODE_SYNC, SHAPE_D2D);
}

FAKECUDA_EXPORT CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return copy(P(dst), P(src), n, NULL, true, MODE_SYNC, SHAPE_D2D);
}

FAKECUDA_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    FAKECUDA_RETURN_IF_INJECTED("cuMemcpyHtoDAsync");
    return copy(P(dst), P(src), n, s, false, MODE_ASYNC, SHAPE_H2D);
}

FAKECUDA_EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    FAKECUDA_RETURN_IF_INJECTED("cuMemcpyHtoDAsync");
    return copy(P(dst), P(src), n, s, true, MODE_ASYNC, SHAPE_H2D);
}

FAKECUDA_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    return copy(P(dst), P(src), n, s, false, MODE_ASYNC, SHAPE_D2H);
}

FAKECUDA_EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    return copy(P(dst), P(src), n, s, true, MODE_ASYNC, SHAPE_D2H);
}

FAKECUDA_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return copy(P(dst), P(src), n, s, false, MODE_ASYNC, SHAPE_D2D);
}

FAKECUDA_EXPORT CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    return copy(P(dst), P(src), n, s, true, MODE_ASYNC, SHAPE_D2D);
}

/* Memsets target device memory or pinned host memory (reachable through unified addressing). */
static CUresult memset_d8(uintptr_t dst, unsigned char value, size_t n, CUstream handle, bool per_thread,
                          CopyMode mode)
{
    CUstream s = NULL;
    CUresult r = fakecuda_stream_get(handle, per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    bool device = false, pinned = false;
    if (!dst || !classify(dst, n ? n : 1, &device, &pinned) || (!device && !pinned)) {
        fakecuda_stream_unref(s);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (n > 0) {
        FakecudaOp *const op = fakecuda_op_new(FAKECUDA_OP_MEMSET);
        if (!op) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            op->u.memset.dst = dst;
            op->u.memset.n = n;
            op->u.memset.value = value;
            /* The blocking form is asynchronous for device memory, synchronous for host memory. */
            r = mode == MODE_SYNC && !device ? fakecuda_stream_submit_sync(s, op)
                                             : fakecuda_stream_submit(s, op);
        }
    }
    fakecuda_stream_unref(s);
    return r;
}

FAKECUDA_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n)
{
    return memset_d8(P(dst), value, n, NULL, false, MODE_SYNC);
}

FAKECUDA_EXPORT CUresult cuMemsetD8_v2_ptds(CUdeviceptr dst, unsigned char value, size_t n)
{
    return memset_d8(P(dst), value, n, NULL, true, MODE_SYNC);
}

FAKECUDA_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream s)
{
    return memset_d8(P(dst), value, n, s, false, MODE_ASYNC);
}

FAKECUDA_EXPORT CUresult cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char value, size_t n, CUstream s)
{
    return memset_d8(P(dst), value, n, s, true, MODE_ASYNC);
}

/* ---- Batches: each copy (or each row of a 3D copy) enqueued in order, pointer operands only ---- */

static CUresult batch(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                      const CUmemcpyAttributes *attrs, const size_t *idxs, size_t nattrs, size_t *fail_idx,
                      CUstream s, bool per_thread)
{
    if (fail_idx)
        *fail_idx = SIZE_MAX;
    if (!dsts || !srcs || !sizes || !count || !attrs || !idxs || !nattrs || nattrs > count || idxs[0] != 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < nattrs; i++)
        if (attrs[i].srcAccessOrder == CU_MEMCPY_SRC_ACCESS_ORDER_INVALID || (i && idxs[i] <= idxs[i - 1]) ||
            idxs[i] >= count)
            return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        const CUresult r = copy(P(dsts[i]), P(srcs[i]), sizes[i], s, per_thread, MODE_ASYNC, SHAPE_ANY);
        if (r != CUDA_SUCCESS) {
            if (fail_idx)
                *fail_idx = i;
            return r;
        }
    }
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuMemcpyBatchAsync(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                            CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs,
                                            size_t *fail_idx, CUstream s)
{
    return batch(dsts, srcs, sizes, count, attrs, idxs, nattrs, fail_idx, s, false);
}

FAKECUDA_EXPORT CUresult cuMemcpyBatchAsync_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
                                                 size_t count, CUmemcpyAttributes *attrs, size_t *idxs,
                                                 size_t nattrs, size_t *fail_idx, CUstream s)
{
    return batch(dsts, srcs, sizes, count, attrs, idxs, nattrs, fail_idx, s, true);
}

FAKECUDA_EXPORT CUresult cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
                                               size_t count, CUmemcpyAttributes *attrs, size_t *idxs,
                                               size_t nattrs, CUstream s)
{
    return batch(dsts, srcs, sizes, count, attrs, idxs, nattrs, NULL, s, false);
}

FAKECUDA_EXPORT CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
                                                    size_t count, CUmemcpyAttributes *attrs, size_t *idxs,
                                                    size_t nattrs, CUstream s)
{
    return batch(dsts, srcs, sizes, count, attrs, idxs, nattrs, NULL, s, true);
}

/* rowLength and layerHeight in bytes and rows (0: the extent's). */
static CUresult batch3d(size_t nops, const CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail_idx,
                        unsigned long long flags, CUstream s, bool per_thread)
{
    if (fail_idx)
        *fail_idx = SIZE_MAX;
    if (!ops || !nops || flags)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < nops; i++)
        if (ops[i].src.type != CU_MEMCPY_OPERAND_TYPE_POINTER ||
            ops[i].dst.type != CU_MEMCPY_OPERAND_TYPE_POINTER || !ops[i].extent.width ||
            !ops[i].extent.height || !ops[i].extent.depth ||
            ops[i].srcAccessOrder == CU_MEMCPY_SRC_ACCESS_ORDER_INVALID)
            return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < nops; i++) {
        const CUDA_MEMCPY3D_BATCH_OP *const op = &ops[i];
        const size_t w = op->extent.width, h = op->extent.height;
        const size_t dpitch = op->dst.op.ptr.rowLength ? op->dst.op.ptr.rowLength : w;
        const size_t spitch = op->src.op.ptr.rowLength ? op->src.op.ptr.rowLength : w;
        const size_t dslice = dpitch * (op->dst.op.ptr.layerHeight ? op->dst.op.ptr.layerHeight : h);
        const size_t sslice = spitch * (op->src.op.ptr.layerHeight ? op->src.op.ptr.layerHeight : h);
        for (size_t z = 0; z < op->extent.depth; z++)
            for (size_t y = 0; y < h; y++) {
                const CUresult r = copy(P(op->dst.op.ptr.ptr) + z * dslice + y * dpitch,
                                        P(op->src.op.ptr.ptr) + z * sslice + y * spitch, w, s, per_thread,
                                        MODE_ASYNC, SHAPE_ANY);
                if (r != CUDA_SUCCESS) {
                    if (fail_idx)
                        *fail_idx = i;
                    return r;
                }
            }
    }
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuMemcpy3DBatchAsync(size_t nops, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail_idx,
                                              unsigned long long flags, CUstream s)
{
    return batch3d(nops, ops, fail_idx, flags, s, false);
}

FAKECUDA_EXPORT CUresult cuMemcpy3DBatchAsync_ptsz(size_t nops, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail_idx,
                                                   unsigned long long flags, CUstream s)
{
    return batch3d(nops, ops, fail_idx, flags, s, true);
}

FAKECUDA_EXPORT CUresult cuMemcpy3DBatchAsync_v2(size_t nops, CUDA_MEMCPY3D_BATCH_OP *ops,
                                                 unsigned long long flags, CUstream s)
{
    return batch3d(nops, ops, NULL, flags, s, false);
}

FAKECUDA_EXPORT CUresult cuMemcpy3DBatchAsync_v2_ptsz(size_t nops, CUDA_MEMCPY3D_BATCH_OP *ops,
                                                      unsigned long long flags, CUstream s)
{
    return batch3d(nops, ops, NULL, flags, s, true);
}

/* ---- Stream memory operations: 4- and 8-byte values written in stream order, the device's own
 * writes.  A call is one op (one graph node when captured, as the driver makes it); the fake runs
 * no wait or flush kinds. ---- */

bool fakecuda_mem_op_valid(const CUstreamBatchMemOpParams *op)
{
    const CUstreamBatchMemOpType t = op->operation;
    if (t != CU_STREAM_MEM_OP_WRITE_VALUE_32 && t != CU_STREAM_MEM_OP_WRITE_VALUE_64)
        return false;
    const size_t n = t == CU_STREAM_MEM_OP_WRITE_VALUE_64 ? 8 : 4;
    const uintptr_t addr = (uintptr_t)op->writeValue.address;
    bool device = false, pinned = false;
    return addr && addr % n == 0 && classify(addr, n, &device, &pinned) && (device || pinned) &&
           !op->writeValue.flags;
}

static CUresult mem_ops(CUstream handle, bool per_thread, const CUstreamBatchMemOpParams *ops, unsigned count,
                        unsigned flags)
{
    if (flags || (count && !ops))
        return CUDA_ERROR_INVALID_VALUE;
    if (!count)
        return CUDA_SUCCESS;
    for (unsigned i = 0; i < count; i++) {
        const CUstreamBatchMemOpType t = ops[i].operation;
        if (t != CU_STREAM_MEM_OP_WRITE_VALUE_32 && t != CU_STREAM_MEM_OP_WRITE_VALUE_64)
            return CUDA_ERROR_NOT_SUPPORTED;
        if (!fakecuda_mem_op_valid(&ops[i]))
            return CUDA_ERROR_INVALID_VALUE;
    }
    CUstream s = NULL;
    CUresult r = fakecuda_stream_get(handle, per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    FakecudaOp *const op = fakecuda_op_new(FAKECUDA_OP_MEM_OP);
    if (!op || !(op->u.mem_op.ops = fakecuda_mem_ops_dup(ops, count))) {
        fakecuda_op_free(op);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        op->u.mem_op.count = count;
        cuCtxGetCurrent(&op->u.mem_op.ctx);
        r = fakecuda_stream_submit(s, op);
    }
    fakecuda_stream_unref(s);
    return r;
}

static CUresult write_value(CUstream s, bool per_thread, CUdeviceptr addr, uint64_t value, size_t n)
{
    CUstreamBatchMemOpParams op;
    memset(&op, 0, sizeof(op));
    op.writeValue.operation = n == 8 ? CU_STREAM_MEM_OP_WRITE_VALUE_64 : CU_STREAM_MEM_OP_WRITE_VALUE_32;
    op.writeValue.address = addr;
    if (n == 8)
        op.writeValue.value64 = value;
    else
        op.writeValue.value = (cuuint32_t)value;
    return mem_ops(s, per_thread, &op, 1, 0);
}

/* The first forms (CUDA 8-11) and the second (11.7 on) behave alike here. */
#define WRITE_VALUE_FORMS(name, type, bytes)                                                                 \
    FAKECUDA_EXPORT CUresult name(CUstream s, CUdeviceptr addr, type v, unsigned flags)                      \
    {                                                                                                        \
        return flags ? CUDA_ERROR_INVALID_VALUE : write_value(s, false, addr, v, bytes);                     \
    }                                                                                                        \
    FAKECUDA_EXPORT CUresult name##_ptsz(CUstream s, CUdeviceptr addr, type v, unsigned flags)               \
    {                                                                                                        \
        return flags ? CUDA_ERROR_INVALID_VALUE : write_value(s, true, addr, v, bytes);                      \
    }
WRITE_VALUE_FORMS(cuStreamWriteValue32, cuuint32_t, 4)
WRITE_VALUE_FORMS(cuStreamWriteValue32_v2, cuuint32_t, 4)
WRITE_VALUE_FORMS(cuStreamWriteValue64, cuuint64_t, 8)
WRITE_VALUE_FORMS(cuStreamWriteValue64_v2, cuuint64_t, 8)
#undef WRITE_VALUE_FORMS

#define BATCH_MEM_OP_FORMS(name)                                                                             \
    FAKECUDA_EXPORT CUresult name(CUstream s, unsigned count, CUstreamBatchMemOpParams *ops, unsigned flags) \
    {                                                                                                        \
        return mem_ops(s, false, ops, count, flags);                                                         \
    }                                                                                                        \
    FAKECUDA_EXPORT CUresult name##_ptsz(CUstream s, unsigned count, CUstreamBatchMemOpParams *ops,          \
                                         unsigned flags)                                                     \
    {                                                                                                        \
        return mem_ops(s, true, ops, count, flags);                                                          \
    }
BATCH_MEM_OP_FORMS(cuStreamBatchMemOp)
BATCH_MEM_OP_FORMS(cuStreamBatchMemOp_v2)
#undef BATCH_MEM_OP_FORMS
