/* SPDX-License-Identifier: MIT
 * ibpshim: the host bytes a pitched copy or memset may write, from the parameters each CUDA entry
 * point names them by (runtime or driver, stream or graph node). */
#ifndef IBP_INTERPOSE_PITCHED_H
#define IBP_INTERPOSE_PITCHED_H

#include <stddef.h>
#include <stdint.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

/* width bytes a row, height rows pitch apart, depth slices of `rows` rows; the first byte at
 * column x, row y, slice z of base. */
typedef struct IbpPitched {
    uintptr_t base;
    size_t x, y, z, pitch, rows;
    size_t width, height, depth;
} IbpPitched;

/* The widest element a CUDA array holds (four 32-bit channels): where a copy's extent counts an
 * array's elements, a pointer operand's bytes are taken at this many a element. */
#define IBP_ARRAY_ELEMENT_MAX 16u

/* From d's first byte to its last: returns the length (0 when d writes nothing) and sets *lo;
 * *lo + length never wraps.  Parameters whose arithmetic overflows give everything from base to
 * the end of the address space (a call that succeeded with them wrote somewhere in it). */
static inline size_t ibp_pitched_span(IbpPitched d, uintptr_t *lo)
{
    *lo = d.base;
    if (!d.width || !d.height || !d.depth)
        return 0;
    size_t slice, first, z, y, last;
    if (__builtin_mul_overflow(d.pitch, d.rows, &slice) || __builtin_mul_overflow(d.z, slice, &z) ||
        __builtin_mul_overflow(d.y, d.pitch, &y) || __builtin_add_overflow(d.x, y, &first) ||
        __builtin_add_overflow(first, z, &first) || __builtin_mul_overflow(d.depth - 1, slice, &z) ||
        __builtin_mul_overflow(d.height - 1, d.pitch, &y) || __builtin_add_overflow(z, y, &last) ||
        __builtin_add_overflow(last, d.width, &last) || first > UINTPTR_MAX - d.base)
        return (size_t)(UINTPTR_MAX - d.base);
    *lo = d.base + first;
    return last > UINTPTR_MAX - *lo ? (size_t)(UINTPTR_MAX - *lo) : last;
}

/* A batched 3D copy's destination: written only when it is a pointer operand, whose rows are
 * row_length elements apart (0: the extent's width) and layers layer_height rows (0: the extent's
 * height); an element is a byte unless the source is an array. */
static inline IbpPitched ibp_pitched_batch_op(int dst_pointer, int src_array, const void *ptr,
                                              size_t row_length, size_t layer_height, size_t width,
                                              size_t height, size_t depth)
{
    if (!dst_pointer)
        return (IbpPitched){0};
    const size_t element = src_array ? IBP_ARRAY_ELEMENT_MAX : 1;
    size_t pitch, bytes;
    if (__builtin_mul_overflow(row_length ? row_length : width, element, &pitch) ||
        __builtin_mul_overflow(width, element, &bytes))
        pitch = bytes = SIZE_MAX;
    return (IbpPitched){.base = (uintptr_t)ptr,
                        .pitch = pitch,
                        .rows = layer_height ? layer_height : height,
                        .width = bytes,
                        .height = height,
                        .depth = depth};
}

/* n bytes at dst. */
static inline IbpPitched ibp_pitched_row(const void *dst, size_t n)
{
    return (IbpPitched){.base = (uintptr_t)dst, .width = n, .height = 1, .depth = 1};
}

/* What stream memory operation op writes: its 4- or 8-byte value, nothing for waits, flushes and
 * barriers.  *known is 0 for a kind these headers do not name (which may write; nothing given). */
static inline IbpPitched ibp_pitched_mem_op(const CUstreamBatchMemOpParams *op, int *known)
{
    *known = 1;
    switch (op->operation) {
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
    case CU_STREAM_MEM_OP_WRITE_VALUE_64:
        return ibp_pitched_row((const void *)(uintptr_t)op->writeValue.address,
                               op->operation == CU_STREAM_MEM_OP_WRITE_VALUE_64 ? 8 : 4);
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
    case CU_STREAM_MEM_OP_WAIT_VALUE_64:
    case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
    case CU_STREAM_MEM_OP_BARRIER:
        return (IbpPitched){0};
    default:
        *known = 0;
        return (IbpPitched){0};
    }
}

/* height rows of width bytes, pitch apart. */
static inline IbpPitched ibp_pitched_2d(const void *dst, size_t pitch, size_t width, size_t height)
{
    return (IbpPitched){.base = (uintptr_t)dst, .pitch = pitch, .width = width, .height = height, .depth = 1};
}

/* The rows a slice of a 3D destination takes: its height as given, or, given as 0, the copy's
 * rows past its first row, as the driver takes it (H200, CUDA 13: a cuMemcpy3D of 2 rows at row
 * 1, slice 3 with dstHeight 0 wrote from (3 * 3 + 1) rows in).  A nonzero height below that is
 * refused. */
static inline size_t ibp_pitched_slice_rows(size_t rows, size_t height, size_t y)
{
    size_t all;
    if (rows)
        return rows;
    return __builtin_add_overflow(height, y, &all) ? SIZE_MAX : all;
}

/* The destination of a runtime 3D copy (cudaMemcpy3DParms, cudaMemcpy3DPeerParms): nothing when
 * it is an array.  The extent counts bytes unless an array takes part, then that array's elements. */
static inline IbpPitched ibp_pitched_3d(cudaArray_t dst_array, struct cudaPitchedPtr dst, struct cudaPos pos,
                                        struct cudaExtent extent, int src_is_array)
{
    if (dst_array)
        return (IbpPitched){0};
    size_t width = extent.width;
    if (src_is_array && __builtin_mul_overflow(width, (size_t)IBP_ARRAY_ELEMENT_MAX, &width))
        width = SIZE_MAX;
    /* ysize is the driver's dstHeight (ibp_pitched_slice_rows). */
    return (IbpPitched){.base = (uintptr_t)dst.ptr,
                        .x = pos.x,
                        .y = pos.y,
                        .z = pos.z,
                        .pitch = dst.pitch,
                        .rows = ibp_pitched_slice_rows(dst.ysize, extent.height, pos.y),
                        .width = width,
                        .height = extent.height,
                        .depth = extent.depth};
}

static inline IbpPitched ibp_pitched_memcpy3d(const struct cudaMemcpy3DParms *p)
{
    return p ? ibp_pitched_3d(p->dstArray, p->dstPtr, p->dstPos, p->extent, p->srcArray != NULL)
             : (IbpPitched){0};
}

/* The destination of a driver copy (CUDA_MEMCPY2D, CUDA_MEMCPY3D, CUDA_MEMCPY3D_PEER, a memcpy
 * graph node): nothing when it is an array; host memory by dstHost, anything else (device,
 * unified) by dstDevice, which is a host address for pinned memory. */
static inline IbpPitched ibp_pitched_driver(CUmemorytype type, const void *host, CUdeviceptr dev, size_t x,
                                            size_t y, size_t z, size_t pitch, size_t rows, size_t width,
                                            size_t height, size_t depth)
{
    if (type == CU_MEMORYTYPE_ARRAY)
        return (IbpPitched){0};
    return (IbpPitched){.base = type == CU_MEMORYTYPE_HOST ? (uintptr_t)host : (uintptr_t)dev,
                        .x = x,
                        .y = y,
                        .z = z,
                        .pitch = pitch,
                        .rows = ibp_pitched_slice_rows(rows, height, y),
                        .width = width,
                        .height = height,
                        .depth = depth};
}

/* A memset of height rows of width elements of `element` bytes, pitch apart. */
static inline IbpPitched ibp_pitched_memset(const void *dst, size_t pitch, unsigned element, size_t width,
                                            size_t height)
{
    size_t bytes;
    if (__builtin_mul_overflow(width, (size_t)element, &bytes))
        bytes = SIZE_MAX;
    return ibp_pitched_2d(dst, pitch, bytes, height);
}

#endif /* IBP_INTERPOSE_PITCHED_H */
