/* SPDX-License-Identifier: MIT
 * ibpshim: every runtime copy and memset besides cudaMemcpy(Async) that can write pinned memory
 * from the device (pitched, 3D and batched copies; memsets through the unified address) writes a
 * slot of a compressed region of its own, and the copy of the region behind it in stream order must
 * deliver the bytes it wrote.  The device's writes land without a fault, so only the hooks can
 * tell the shim.  Under a CUDA 12 runtime the batched copies are called with 12.8's arguments.
 * The driver API's forms are called as a program linked with libcuda calls them (the symbol the
 * process resolves), through the address the exported cuGetProcAddress_v2 answers, and through
 * the one cudaGetDriverEntryPointByVersion answers; the stream memory operations also in the
 * first forms that CUDA 8-11 programs call and are still answered. */
#include <cuda.h>
#include <stdint.h>
#include <string.h>

#include "tests/preload/preload_check.h"

/* Each form writes inside the first SLOT bytes of its region. */
#define SLOT ((size_t)1 << 20)

static void *dev_buf;     /* the round trip's device side */
static uint8_t *dev_src;  /* device bytes the copies read, equal to src_host */
static uint8_t *src_host; /* what dev_src holds */
static uint8_t *back;

static void copy_all(void *arg)
{
    preload_round_trip(arg, dev_buf, back);
}

/* What a form writes, applied to the model of the region: depth slices of height rows of width
 * bytes; src NULL for a memset of value. */
typedef struct Rows {
    size_t dst, dpitch, dslice;
    size_t src, spitch, sslice;
    size_t width, height, depth;
    int value;
    int memset;
} Rows;

static void model(uint8_t *expect, const Rows *r)
{
    for (size_t z = 0; z < r->depth; z++)
        for (size_t y = 0; y < r->height; y++) {
            uint8_t *const d = expect + r->dst + z * r->dslice + y * r->dpitch;
            if (r->memset)
                memset(d, r->value, r->width);
            else
                memcpy(d, src_host + r->src + z * r->sslice + y * r->spitch, r->width);
        }
}

static struct cudaPitchedPtr pitched(void *ptr, size_t pitch, size_t xsize, size_t ysize)
{
    return (struct cudaPitchedPtr){.ptr = ptr, .pitch = pitch, .xsize = xsize, .ysize = ysize};
}

static struct cudaExtent extent(size_t width, size_t height, size_t depth)
{
    return (struct cudaExtent){.width = width, .height = height, .depth = depth};
}

typedef enum Form {
    MEMCPY_2D_ASYNC,
    MEMCPY_2D_ASYNC_PTSZ,
    MEMCPY_2D,
    MEMCPY_3D_ASYNC,
    MEMCPY_3D,
    MEMSET_ASYNC,
    MEMSET_ASYNC_PTSZ,
    MEMSET,
    MEMSET_2D_ASYNC,
    MEMSET_3D_ASYNC,
    MEMSET_2D,
    BATCH,
    BATCH_3D,
    CU_DTOH_ASYNC,
    CU_DTOH_ASYNC_PROC,
    CU_DTOH_ASYNC_ENTRY,
    CU_DTOH,
    CU_COPY_ASYNC,
    CU_MEMSET_D8_ASYNC,
    CU_MEMSET_D8,
    CU_BATCH,
    CU_BATCH_12,
    CU_BATCH_PROC,
    CU_BATCH_3D,
    CU_BATCH_3D_12,
    CU_WRITE_VALUE32,
    CU_WRITE_VALUE64_V1,
    CU_WRITE_VALUE32_PROC11,
    CU_BATCH_MEM_OP,
    CU_BATCH_MEM_OP_PROC11,
    FORM_COUNT
} Form;

static const char *const form_names[FORM_COUNT] = {
    "cudaMemcpy2DAsync",
    "cudaMemcpy2DAsync_ptsz",
    "cudaMemcpy2D",
    "cudaMemcpy3DAsync",
    "cudaMemcpy3D",
    "cudaMemsetAsync",
    "cudaMemsetAsync_ptsz",
    "cudaMemset",
    "cudaMemset2DAsync",
    "cudaMemset3DAsync",
    "cudaMemset2D",
    "cudaMemcpyBatchAsync",
    "cudaMemcpy3DBatchAsync",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoHAsync (cuGetProcAddress)",
    "cuMemcpyDtoHAsync (cudaGetDriverEntryPointByVersion)",
    "cuMemcpyDtoH_v2",
    "cuMemcpyAsync",
    "cuMemsetD8Async",
    "cuMemsetD8_v2",
    "cuMemcpyBatchAsync_v2",
    "cuMemcpyBatchAsync (CUDA 12.8)",
    "cuMemcpyBatchAsync_v2_ptsz (cuGetProcAddress)",
    "cuMemcpy3DBatchAsync_v2",
    "cuMemcpy3DBatchAsync (CUDA 12.8)",
    "cuStreamWriteValue32_v2",
    "cuStreamWriteValue64 (CUDA 8-11)",
    "cuStreamWriteValue32 (cuGetProcAddress, CUDA 11)",
    "cuStreamBatchMemOp_v2",
    "cuStreamBatchMemOp_ptsz (cuGetProcAddress, CUDA 11)",
};

/* CUDA 12.8 and 12.9 took a failIdx argument before the stream; 13.0 dropped it. */
typedef cudaError_t (*Batch12Fn)(void *const *, const void *const *, const size_t *, size_t,
                                 struct cudaMemcpyAttributes *, size_t *, size_t, size_t *, cudaStream_t);
typedef cudaError_t (*Batch3d12Fn)(size_t, struct cudaMemcpy3DBatchOp *, size_t *, unsigned long long,
                                   cudaStream_t);

static int runtime_is_12(void)
{
    int v = 0;
    CHECK_CUDA(cudaRuntimeGetVersion(&v));
    return v / 1000 == 12;
}

typedef cudaError_t (*Memcpy2DAsyncFn)(void *, size_t, const void *, size_t, size_t, size_t,
                                       enum cudaMemcpyKind, cudaStream_t);
typedef cudaError_t (*MemsetAsyncFn)(void *, int, size_t, cudaStream_t);

static void *lookup(const char *name)
{
    void *fn = dlsym(RTLD_DEFAULT, name);
    CHECK(fn != NULL, "%s not found", name);
    return fn;
}

/* The driver's functions, by the types cuda.h gives them (CUdeviceptr an integer, CUstream the
 * runtime's stream handle). */
typedef unsigned long long DevPtr;
typedef int (*CuCopyToHostAsyncFn)(void *, DevPtr, size_t, cudaStream_t);
typedef int (*CuCopyToHostFn)(void *, DevPtr, size_t);
typedef int (*CuCopyAsyncFn)(DevPtr, DevPtr, size_t, cudaStream_t);
typedef int (*CuMemsetD8AsyncFn)(DevPtr, unsigned char, size_t, cudaStream_t);
typedef int (*CuMemsetD8Fn)(DevPtr, unsigned char, size_t);
typedef int (*CuGetProcAddressFn)(const char *, void **, int, unsigned long long, int *);
typedef CUresult (*CuBatchFn)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *, size_t *,
                              size_t, CUstream);
typedef CUresult (*CuBatch12Fn)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *,
                                size_t *, size_t, size_t *, CUstream);
typedef CUresult (*CuBatch3dFn)(size_t, CUDA_MEMCPY3D_BATCH_OP *, unsigned long long, CUstream);
typedef CUresult (*CuBatch3d12Fn)(size_t, CUDA_MEMCPY3D_BATCH_OP *, size_t *, unsigned long long, CUstream);

#define CHECK_CU(call)                                                                                       \
    do {                                                                                                     \
        const int check_cu_ = (call);                                                                        \
        CHECK(check_cu_ == 0, "%s -> CUresult %d", #call, check_cu_);                                        \
    } while (0)

static DevPtr dptr(const void *p)
{
    return (DevPtr)(uintptr_t)p;
}

/* What the exported cuGetProcAddress_v2 answers a program built for `version` that asks for
 * symbol with `flags`. */
static void *proc(const char *symbol, int version, unsigned long long flags)
{
    const CuGetProcAddressFn gpa = (CuGetProcAddressFn)lookup("cuGetProcAddress_v2");
    void *fn = NULL;
    int status = -1;
    CHECK_CU(gpa(symbol, &fn, version, flags, &status));
    CHECK(fn != NULL && status == 0, "cuGetProcAddress_v2(%s, %d) gave nothing (status %d)", symbol, version,
          status);
    return fn;
}

/* The driver's batch of three copies, two into host at `at` (applied to expect), one into device
 * memory, through the 13.0 form by symbol or by cuGetProcAddress, or 12.8's. */
static void cu_batch(Form f, uint8_t *host, uint8_t *expect, size_t at, cudaStream_t s)
{
    CUdeviceptr dsts[3] = {dptr(host + at), dptr(dev_buf), dptr(host + at + 300000)};
    CUdeviceptr srcs[3] = {dptr(dev_src + 13), dptr(dev_src + 5), dptr(dev_src + 4097)};
    size_t sizes[3] = {5001, 64, 123455};
    CUmemcpyAttributes attr;
    memset(&attr, 0, sizeof(attr));
    attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    size_t idx = 0, fail = 0;
    if (f == CU_BATCH_12) {
        CHECK_CU(((CuBatch12Fn)lookup("cuMemcpyBatchAsync"))(dsts, srcs, sizes, 3, &attr, &idx, 1, &fail,
                                                             (CUstream)s));
    } else if (f == CU_BATCH_PROC) {
        /* The per-thread form (what a program built with --default-stream per-thread asks for). */
        const CuBatchFn fn =
            (CuBatchFn)proc("cuMemcpyBatchAsync", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
        CHECK_CU(fn(dsts, srcs, sizes, 3, &attr, &idx, 1, (CUstream)s));
    } else {
        CHECK_CU(
            ((CuBatchFn)lookup("cuMemcpyBatchAsync_v2"))(dsts, srcs, sizes, 3, &attr, &idx, 1, (CUstream)s));
    }
    const Rows a = {.dst = at, .src = 13, .width = 5001, .height = 1, .depth = 1};
    const Rows b = {.dst = at + 300000, .src = 4097, .width = 123455, .height = 1, .depth = 1};
    model(expect, &a);
    model(expect, &b);
}

/* What each 3D batch copies into host at `at`: 3 layers of 8 rows of 2500 bytes, rows 4000
 * bytes apart and layers 9 rows, from rows 3000 bytes apart and layers of 10 rows. */
static Rows batch3d_rows(size_t at)
{
    return (Rows){.dst = at,
                  .dpitch = 4000,
                  .dslice = 4000 * 9,
                  .src = 7,
                  .spitch = 3000,
                  .sslice = 3000 * 10,
                  .width = 2500,
                  .height = 8,
                  .depth = 3};
}

/* The driver's 3D batch of one copy, r (batch3d_rows) into host. */
static void cu_batch_3d(Form f, uint8_t *host, const Rows *r, cudaStream_t s)
{
    CUDA_MEMCPY3D_BATCH_OP op;
    memset(&op, 0, sizeof(op));
    op.src.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
    op.src.op.ptr.ptr = dptr(dev_src + r->src);
    op.src.op.ptr.rowLength = r->spitch;
    op.src.op.ptr.layerHeight = r->sslice / r->spitch;
    op.dst.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
    op.dst.op.ptr.ptr = dptr(host + r->dst);
    op.dst.op.ptr.rowLength = r->dpitch;
    op.dst.op.ptr.layerHeight = r->dslice / r->dpitch;
    op.extent = (CUextent3D){.width = r->width, .height = r->height, .depth = r->depth};
    op.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    size_t fail = 0;
    if (f == CU_BATCH_3D_12)
        CHECK_CU(((CuBatch3d12Fn)lookup("cuMemcpy3DBatchAsync"))(1, &op, &fail, 0, (CUstream)s));
    else
        CHECK_CU(((CuBatch3dFn)lookup("cuMemcpy3DBatchAsync_v2"))(1, &op, 0, (CUstream)s));
}

typedef CUresult (*CuWriteValue32Fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
typedef CUresult (*CuWriteValue64Fn)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
typedef CUresult (*CuBatchMemOpFn)(CUstream, unsigned int, CUstreamBatchMemOpParams *, unsigned int);

/* The stream memory operations: 4- and 8-byte values the device writes into host (and applied to
 * expect), aligned as the driver requires.  0 where the driver refuses the form
 * (CUDA_ERROR_NOT_SUPPORTED: a device without stream memory operations, or without the first forms). */
static int cu_write_values(Form f, uint8_t *host, uint8_t *expect, cudaStream_t s)
{
    const size_t at32 = 8192 + 4 * (size_t)f, at64 = 3 * 65536 + 8 * (size_t)f;
    const cuuint32_t v32 = 0x5a17c3e1u ^ (cuuint32_t)f;
    const cuuint64_t v64 = 0x0123fedc89ab4567ull ^ (cuuint64_t)f;
    CUresult r = CUDA_SUCCESS;
    int wide = 0, narrow = 1;
    if (f == CU_WRITE_VALUE32) {
        r = ((CuWriteValue32Fn)lookup("cuStreamWriteValue32_v2"))((CUstream)s, dptr(host + at32), v32, 0);
    } else if (f == CU_WRITE_VALUE64_V1) {
        r = ((CuWriteValue64Fn)lookup("cuStreamWriteValue64"))((CUstream)s, dptr(host + at64), v64, 0);
        wide = 1;
        narrow = 0;
    } else if (f == CU_WRITE_VALUE32_PROC11) {
        r = ((CuWriteValue32Fn)proc("cuStreamWriteValue32", 11000, 0))((CUstream)s, dptr(host + at32), v32,
                                                                       0);
    } else {
        CUstreamBatchMemOpParams ops[2];
        memset(ops, 0, sizeof(ops));
        ops[0].operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
        ops[0].writeValue.address = dptr(host + at32);
        ops[0].writeValue.value = v32;
        ops[1].operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
        ops[1].writeValue.address = dptr(host + at64);
        ops[1].writeValue.value64 = v64;
        const CuBatchMemOpFn fn = f == CU_BATCH_MEM_OP
                                      ? (CuBatchMemOpFn)lookup("cuStreamBatchMemOp_v2")
                                      : (CuBatchMemOpFn)proc("cuStreamBatchMemOp", 11000,
                                                             CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
        r = fn((CUstream)s, 2, ops, 0);
        wide = 1;
    }
    if (r == CUDA_ERROR_NOT_SUPPORTED)
        return 0;
    CHECK(r == CUDA_SUCCESS, "%s -> CUresult %d", form_names[f], (int)r);
    for (size_t i = 0; narrow && i < 4; i++)
        expect[at32 + i] = (uint8_t)(v32 >> (8 * i));
    for (size_t i = 0; wide && i < 8; i++)
        expect[at64 + i] = (uint8_t)(v64 >> (8 * i));
    return 1;
}

/* Enqueues form f on s writing host (and applies it to expect); 0 where the driver refuses it. */
static int write_form(Form f, uint8_t *host, uint8_t *expect, cudaStream_t s)
{
    const size_t at = 4096 + 3;    /* unaligned */
    const size_t slot = (size_t)f; /* varies the source and the values */
    Rows r = {.dst = at,
              .dpitch = 8192 + 5,
              .src = 100 + slot,
              .spitch = 6000,
              .width = 3000,
              .height = 40,
              .depth = 1};
    switch (f) {
    case MEMCPY_2D_ASYNC:
        CHECK_CUDA(cudaMemcpy2DAsync(host + r.dst, r.dpitch, dev_src + r.src, r.spitch, r.width, r.height,
                                     cudaMemcpyDeviceToHost, s));
        break;
    case MEMCPY_2D_ASYNC_PTSZ: {
        const Memcpy2DAsyncFn fn = (Memcpy2DAsyncFn)lookup("cudaMemcpy2DAsync_ptsz");
        CHECK_CUDA(
            fn(host + r.dst, r.dpitch, dev_src + r.src, r.spitch, r.width, r.height, cudaMemcpyDefault, s));
        break;
    }
    case MEMCPY_2D:
        CHECK_CUDA(cudaMemcpy2D(host + r.dst, r.dpitch, dev_src + r.src, r.spitch, r.width, r.height,
                                cudaMemcpyDeviceToHost));
        break;
    case MEMCPY_3D_ASYNC:
    case MEMCPY_3D: {
        /* Slices of 30 rows 4096 bytes apart; the copy starts at column 17, row 2, slice 1. */
        struct cudaMemcpy3DParms p;
        memset(&p, 0, sizeof(p));
        p.srcPtr = pitched(dev_src + r.src, 6000, 6000, 20);
        p.dstPtr = pitched(host, 4096, 4096, 30);
        p.dstPos = (struct cudaPos){17, 2, 1};
        p.extent = extent(2000, 12, 3);
        p.kind = cudaMemcpyDeviceToHost;
        r = (Rows){.dst = 17 + 2 * 4096 + 4096 * 30,
                   .dpitch = 4096,
                   .dslice = 4096 * 30,
                   .src = r.src,
                   .spitch = 6000,
                   .sslice = 6000 * 20,
                   .width = 2000,
                   .height = 12,
                   .depth = 3};
        CHECK_CUDA(f == MEMCPY_3D ? cudaMemcpy3D(&p) : cudaMemcpy3DAsync(&p, s));
        break;
    }
    case MEMSET_ASYNC:
    case MEMSET_ASYNC_PTSZ:
    case MEMSET:
        r = (Rows){
            .dst = at, .width = 70001, .height = 1, .depth = 1, .value = 0x3c + (int)slot, .memset = 1};
        if (f == MEMSET)
            CHECK_CUDA(cudaMemset(host + r.dst, r.value, r.width));
        else if (f == MEMSET_ASYNC)
            CHECK_CUDA(cudaMemsetAsync(host + r.dst, r.value, r.width, s));
        else
            CHECK_CUDA(((MemsetAsyncFn)lookup("cudaMemsetAsync_ptsz"))(host + r.dst, r.value, r.width, s));
        break;
    case MEMSET_2D_ASYNC:
    case MEMSET_2D:
        r = (Rows){
            .dst = at, .dpitch = 10000, .width = 777, .height = 50, .depth = 1, .value = 0xe1, .memset = 1};
        CHECK_CUDA(f == MEMSET_2D ? cudaMemset2D(host + r.dst, r.dpitch, r.value, r.width, r.height)
                                  : cudaMemset2DAsync(host + r.dst, r.dpitch, r.value, r.width, r.height, s));
        break;
    case MEMSET_3D_ASYNC:
        r = (Rows){.dst = at,
                   .dpitch = 5000,
                   .dslice = 5000 * 20,
                   .width = 999,
                   .height = 15,
                   .depth = 4,
                   .value = 0x0f,
                   .memset = 1};
        CHECK_CUDA(cudaMemset3DAsync(pitched(host + r.dst, r.dpitch, r.dpitch, 20), r.value,
                                     extent(r.width, r.height, r.depth), s));
        break;
    case BATCH: {
        /* Three copies: two into the slot, one into device memory. */
        void *dsts[3] = {host + at, dev_buf, host + at + 300000};
        const void *srcs[3] = {dev_src + 11, dev_src + 5, dev_src + 4099};
        size_t sizes[3] = {5000, 64, 123457};
        struct cudaMemcpyAttributes attr;
        memset(&attr, 0, sizeof(attr));
        attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
        size_t idx = 0;
        size_t fail = 0;
        if (runtime_is_12())
            CHECK_CUDA(
                ((Batch12Fn)lookup("cudaMemcpyBatchAsync"))(dsts, srcs, sizes, 3, &attr, &idx, 1, &fail, s));
        else
            CHECK_CUDA(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, &attr, &idx, 1, s));
        const Rows a = {.dst = at, .src = 11, .width = 5000, .height = 1, .depth = 1};
        model(expect, &a);
        r = (Rows){.dst = at + 300000, .src = 4099, .width = 123457, .height = 1, .depth = 1};
        break;
    }
    case BATCH_3D: {
        r = batch3d_rows(at);
        struct cudaMemcpy3DBatchOp op;
        memset(&op, 0, sizeof(op));
        op.src.type = cudaMemcpyOperandTypePointer;
        op.src.op.ptr.ptr = dev_src + r.src;
        op.src.op.ptr.rowLength = r.spitch;
        op.src.op.ptr.layerHeight = r.sslice / r.spitch;
        op.dst.type = cudaMemcpyOperandTypePointer;
        op.dst.op.ptr.ptr = host + r.dst;
        op.dst.op.ptr.rowLength = r.dpitch;
        op.dst.op.ptr.layerHeight = r.dslice / r.dpitch;
        op.extent = extent(r.width, r.height, r.depth);
        op.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
        size_t fail = 0;
        if (runtime_is_12())
            CHECK_CUDA(((Batch3d12Fn)lookup("cudaMemcpy3DBatchAsync"))(1, &op, &fail, 0, s));
        else
            CHECK_CUDA(cudaMemcpy3DBatchAsync(1, &op, 0, s));
        break;
    }
    case CU_DTOH_ASYNC:
        CHECK_CU(((CuCopyToHostAsyncFn)lookup("cuMemcpyDtoHAsync_v2"))(host + r.dst, dptr(dev_src + r.src),
                                                                       r.width, s));
        r.height = 1;
        break;
    case CU_DTOH_ASYNC_PROC:
        CHECK_CU(((CuCopyToHostAsyncFn)proc("cuMemcpyDtoHAsync", 12000, 0))(
            host + r.dst, dptr(dev_src + r.src), r.width, s));
        r.height = 1;
        break;
    case CU_DTOH_ASYNC_ENTRY: {
        void *fn = NULL;
        enum cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
        CHECK_CUDA(
            cudaGetDriverEntryPointByVersion("cuMemcpyDtoHAsync", &fn, 12000, cudaEnableDefault, &status));
        CHECK(fn != NULL && status == cudaDriverEntryPointSuccess,
              "cudaGetDriverEntryPointByVersion(cuMemcpyDtoHAsync) gave nothing (status %d)", (int)status);
        CHECK_CU(((CuCopyToHostAsyncFn)fn)(host + r.dst, dptr(dev_src + r.src), r.width, s));
        r.height = 1;
        break;
    }
    case CU_DTOH:
        CHECK_CU(((CuCopyToHostFn)lookup("cuMemcpyDtoH_v2"))(host + r.dst, dptr(dev_src + r.src), r.width));
        r.height = 1;
        break;
    case CU_COPY_ASYNC:
        CHECK_CU(
            ((CuCopyAsyncFn)lookup("cuMemcpyAsync"))(dptr(host + r.dst), dptr(dev_src + r.src), r.width, s));
        r.height = 1;
        break;
    case CU_MEMSET_D8_ASYNC:
        r.memset = 1;
        r.value = 0x3d;
        r.height = 1;
        CHECK_CU(((CuMemsetD8AsyncFn)lookup("cuMemsetD8Async"))(dptr(host + r.dst), (unsigned char)r.value,
                                                                r.width, s));
        break;
    case CU_MEMSET_D8:
        r.memset = 1;
        r.value = 0x4e;
        r.height = 1;
        CHECK_CU(
            ((CuMemsetD8Fn)lookup("cuMemsetD8_v2"))(dptr(host + r.dst), (unsigned char)r.value, r.width));
        break;
    case CU_BATCH:
    case CU_BATCH_12:
    case CU_BATCH_PROC:
        cu_batch(f, host, expect, at, s);
        return 1;
    case CU_BATCH_3D:
    case CU_BATCH_3D_12:
        r = batch3d_rows(at);
        cu_batch_3d(f, host, &r, s);
        break;
    case CU_WRITE_VALUE32:
    case CU_WRITE_VALUE64_V1:
    case CU_WRITE_VALUE32_PROC11:
    case CU_BATCH_MEM_OP:
    case CU_BATCH_MEM_OP_PROC11:
        return cu_write_values(f, host, expect, s);
    case FORM_COUNT:
        break;
    }
    model(expect, &r);
    return 1;
}

int main(void)
{
    const PreloadTotalsFn totals = preload_compression_or_skip("device_writes", 1);
    const size_t n = 4 * SLOT + 1000;
    uint8_t *expect = malloc(n);
    src_host = malloc(SLOT);
    back = malloc(n);
    CHECK(expect != NULL && src_host != NULL && back != NULL, "malloc");
    CHECK_CUDA(cudaMalloc(&dev_buf, n));
    CHECK_CUDA(cudaMalloc((void **)&dev_src, SLOT));
    for (size_t i = 0; i < SLOT; i++)
        src_host[i] = (uint8_t)(i * 7 + (i >> 9));
    CHECK_CUDA(cudaMemcpy(dev_src, src_host, SLOT, cudaMemcpyHostToDevice));
    /* From pageable memory the blocking copy may return before it lands, queued on the legacy
     * stream, which the non-blocking streams below do not wait for. */
    CHECK_CUDA(cudaDeviceSynchronize());
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    /* A region of its own for each form: what one form writes does not fit the weights' plan and
     * stays raw, which would leave the next form nothing compressed to test. */
    for (int f = 0; f < FORM_COUNT; f++) {
        uint8_t *host = NULL;
        CHECK_CUDA(cudaHostAlloc((void **)&host, n, cudaHostAllocDefault));
        preload_fill_weights(host, n);
        memcpy(expect, host, n);
        PreloadWaiting waiting = {.host = host, .n = n, .s = s};
        preload_wait_compressed_bytes("device_writes", form_names[f], totals, copy_all, &waiting, SLOT);
        IbpshimTransferTotals a, b;
        CHECK(totals(&a) == 0, "totals");
        if (!write_form((Form)f, host, expect, s)) {
            printf("device_writes: %s: skipped, the driver does not support it on this device\n",
                   form_names[f]);
            CHECK_CUDA(cudaFreeHost(host));
            continue;
        }
        CHECK_CUDA(cudaMemsetAsync(dev_buf, 0x5c, n, s));
        CHECK_CUDA(cudaMemcpyAsync(dev_buf, host, n, cudaMemcpyHostToDevice, s));
        CHECK(totals(&b) == 0, "totals");
        CHECK_CUDA(cudaMemcpyAsync(back, dev_buf, n, cudaMemcpyDeviceToHost, s));
        CHECK_CUDA(cudaStreamSynchronize(s));
        CHECK(memcmp(host, expect, n) == 0, "%s: the region does not hold what the test expects",
              form_names[f]);
        for (size_t i = 0; i < n; i++)
            CHECK(back[i] == expect[i], "%s: byte %zu of the copy behind it is 0x%02x, expected 0x%02x",
                  form_names[f], i, back[i], expect[i]);
        CHECK(b.compressed_in > a.compressed_in,
              "%s: the copy behind it sent nothing compressed: it tested nothing", form_names[f]);
        printf("device_writes: %s: ok (%llu of %zu bytes compressed)\n", form_names[f],
               (unsigned long long)(b.compressed_in - a.compressed_in), n);
        CHECK_CUDA(cudaFreeHost(host));
    }

    CHECK_CUDA(cudaStreamDestroy(s));
    CHECK_CUDA(cudaFree(dev_src));
    CHECK_CUDA(cudaFree(dev_buf));
    free(back);
    free(src_host);
    free(expect);
    printf("device_writes: ok\n");
    return 0;
}
