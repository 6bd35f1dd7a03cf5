/* SPDX-License-Identifier: MIT
 * ibpshim: shared state of the fake CUDA driver (devices, memory registry, streams, kernels). */
#ifndef IBP_TESTS_FAKECUDA_INTERNAL_H
#define IBP_TESTS_FAKECUDA_INTERNAL_H

#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tests/fakecuda/fakecuda.h"

/* CUDA 10-11's graph calls and stream memory operations and CUDA 12.8's batched copies, which
 * cuda.h maps to their newer forms and no longer declares. */
#undef cuGraphExecUpdate
#undef cuGraphInstantiate
#undef cuStreamWriteValue32
#undef cuStreamWriteValue64
#undef cuStreamBatchMemOp
CUresult cuGraphExecUpdate(CUgraphExec e, CUgraph g, CUgraphNode *error_node,
                           CUgraphExecUpdateResult *result);
CUresult cuGraphInstantiate(CUgraphExec *out, CUgraph g, CUgraphNode *error_node, char *log, size_t log_size);
CUresult cuGraphInstantiate_v2(CUgraphExec *out, CUgraph g, CUgraphNode *error_node, char *log,
                               size_t log_size);
#define FAKECUDA_WRITE_VALUE_DECL(name, type)                                                                \
    CUresult name(CUstream s, CUdeviceptr addr, type v, unsigned flags);                                     \
    CUresult name##_ptsz(CUstream s, CUdeviceptr addr, type v, unsigned flags);
FAKECUDA_WRITE_VALUE_DECL(cuStreamWriteValue32, cuuint32_t)
FAKECUDA_WRITE_VALUE_DECL(cuStreamWriteValue32_v2, cuuint32_t)
FAKECUDA_WRITE_VALUE_DECL(cuStreamWriteValue64, cuuint64_t)
FAKECUDA_WRITE_VALUE_DECL(cuStreamWriteValue64_v2, cuuint64_t)
#undef FAKECUDA_WRITE_VALUE_DECL
CUresult cuStreamBatchMemOp(CUstream s, unsigned count, CUstreamBatchMemOpParams *ops, unsigned flags);
CUresult cuStreamBatchMemOp_ptsz(CUstream s, unsigned count, CUstreamBatchMemOpParams *ops, unsigned flags);
CUresult cuStreamBatchMemOp_v2(CUstream s, unsigned count, CUstreamBatchMemOpParams *ops, unsigned flags);
CUresult cuStreamBatchMemOp_v2_ptsz(CUstream s, unsigned count, CUstreamBatchMemOpParams *ops,
                                    unsigned flags);

/* Everything is built with -fvisibility=hidden; the CUDA entry points opt back in. */
#define FAKECUDA_EXPORT __attribute__((visibility("default")))

#define FAKECUDA_MAX_DEVICES 16
#define FAKECUDA_CTX_STACK_MAX 16
/* Contexts made with cuCtxCreate that may exist at once. */
#define FAKECUDA_MAX_MADE_CONTEXTS 8
#define FAKECUDA_DRIVER_VERSION 13000
/* Size of the reserved device address range, shared by all fake devices. */
#define FAKECUDA_DEVICE_BYTES (16ull << 30)

/* ---- core.c: initialisation, devices, contexts, logging, stats ---- */

struct CUctx_st {
    int device;
    atomic_int retains; /* primary contexts */
    atomic_bool live;   /* made contexts: between cuCtxCreate and cuCtxDestroy */
    atomic_bool green;  /* made contexts: a green context's converted one, which ends only with it */
};

/* A green context (cuGreenCtxCreate): the made context cuCtxFromGreenCtx converts it to, NULL when
 * free.  What is allocated or registered while that is current is the primary context's. */
struct CUgreenCtx_st {
    CUcontext ctx;
};

/* The one resource descriptor of a device (cuDevResourceGenerateDesc): all of its SMs. */
struct CUdevResourceDesc_st {
    int device;
};

typedef struct FakecudaGlobals {
    int device_count;      /* FAKECUDA_DEVICES, default 1 */
    bool log;              /* FAKECUDA_LOG=1 */
    atomic_uint copy_delay_us;
    unsigned kernel_delay_us; /* FAKECUDA_KERNEL_DELAY_US */
    unsigned copy_us_per_mib; /* FAKECUDA_COPY_US_PER_MIB: asynchronous copies take time by size too */
    atomic_bool initialised; /* cuInit succeeded */
    struct CUctx_st ctx[FAKECUDA_MAX_DEVICES]; /* the primary contexts */
    /* Contexts of cuCtxCreate: the lowest free slot is taken, so a context made after another was
     * destroyed has its handle, as a driver reusing the memory of the one before may give it. */
    struct CUctx_st made[FAKECUDA_MAX_MADE_CONTEXTS];
    /* Green contexts, each with one of the made contexts' slots for its converted context; the
     * lowest free slot is taken. */
    struct CUgreenCtx_st green[FAKECUDA_MAX_MADE_CONTEXTS];
    struct CUdevResourceDesc_st resource_desc[FAKECUDA_MAX_DEVICES];
} FakecudaGlobals;

extern FakecudaGlobals fakecuda_g;

/* Reads the environment once; safe from any thread. */
void fakecuda_env_once(void);

void fakecuda_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define FAKECUDA_TRACE(...)                                                                          \
    do {                                                                                            \
        if (fakecuda_g.log)                                                                         \
            fakecuda_log(__VA_ARGS__);                                                              \
    } while (0)

/* Returns CUDA_SUCCESS when cuInit ran and a device exists, the error every call gives otherwise. */
CUresult fakecuda_check_init(void);

/* The calling thread's current context, or NULL. */
CUcontext fakecuda_ctx_current(void);

/* The context what is allocated or registered now belongs to (fakecuda_mem_drop_context): the
 * current one, or its device's primary context where that is a green context's converted context
 * (the header calls it a primary context with the green context's resources), or NULL. */
CUcontext fakecuda_ctx_owner(void);

/* Checks init and returns the current context's device in *device (CUDA_ERROR_INVALID_CONTEXT when
 * no context is current). */
CUresult fakecuda_current_device(int *device);

bool fakecuda_ctx_valid(CUcontext ctx);

/* Failure injection (fakecuda_fail_calls): returns the error armed for `entry` (a driver entry
 * point's base name, e.g. "cuLaunchKernel") when this call is one of those to fail, else
 * CUDA_SUCCESS.  Entry points that call it fail before doing anything. */
CUresult fakecuda_injected_failure(const char *entry);
/* Returns from the calling entry point with the injected failure, if one is due. */
#define FAKECUDA_RETURN_IF_INJECTED(entry)                                                         \
    do {                                                                                           \
        const CUresult injected_ = fakecuda_injected_failure(entry);                               \
        if (injected_ != CUDA_SUCCESS)                                                             \
            return injected_;                                                                      \
    } while (0)

/* Statistics, updated with relaxed atomics when work executes. */
typedef struct FakecudaCounters {
    atomic_ullong h2d_bytes, d2h_bytes, d2d_bytes, h2h_bytes;
    atomic_ullong h2d_calls, d2h_calls, d2d_calls, h2h_calls;
    atomic_ullong h2d_staged_calls;
    atomic_ullong memset_bytes, memset_calls;
    atomic_ullong kernel_launches;
    atomic_ullong device_allocs, host_allocs, host_registers;
} FakecudaCounters;

extern FakecudaCounters fakecuda_counters;

/* ---- mem.c: device address space and host registry ---- */

typedef enum FakecudaMemKind {
    FAKECUDA_MEM_PAGEABLE = 0, /* unknown to the driver */
    FAKECUDA_MEM_DEVICE,
    FAKECUDA_MEM_HOST_ALLOC,   /* cuMemHostAlloc / cuMemAllocHost */
    FAKECUDA_MEM_REGISTERED,   /* cuMemHostRegister */
} FakecudaMemKind;

typedef struct FakecudaPtrInfo {
    FakecudaMemKind kind;
    uintptr_t base;    /* start of the allocation or registered range */
    size_t size;       /* its size in bytes as requested */
    unsigned flags;    /* allocation or registration flags */
    int device;        /* device the memory belongs to (the current one at allocation) */
} FakecudaPtrInfo;

/* Classifies p.  Pointers inside the device address range but outside every allocation come back as
 * FAKECUDA_MEM_DEVICE with size 0, so callers reject them. */
void fakecuda_mem_lookup(uintptr_t p, FakecudaPtrInfo *out);

/* True if p lies inside the reserved device range. */
bool fakecuda_mem_in_device_range(uintptr_t p);

/* Translates [p, p + n) to host-accessible memory: device allocations map to their backing store,
 * pinned and registered host memory to itself.  When allow_pageable is true, unknown host memory maps
 * to itself too.  Returns NULL when the range is not wholly inside one allocation (or is unknown and
 * pageable is not allowed). */
void *fakecuda_mem_access(uintptr_t p, size_t n, bool allow_pageable);

/* Writes n bytes at dst (host-accessible, from fakecuda_mem_access) as the device's DMA lands in
 * pinned memory: through /proc/self/mem, which ignores page protection (stream.c). */
void fakecuda_dma_write(void *dst, const void *src, size_t n);

/* ---- stream.c: streams, events, ordering, capture ---- */

typedef struct FakecudaKernel FakecudaKernel;

typedef enum FakecudaOpType {
    FAKECUDA_OP_COPY,
    FAKECUDA_OP_MEMSET,
    FAKECUDA_OP_KERNEL,
    FAKECUDA_OP_EVENT,
    FAKECUDA_OP_WAIT,
    FAKECUDA_OP_HOST_FN,
    FAKECUDA_OP_NOP,
    FAKECUDA_OP_CHILD,  /* a child graph node: only in graphs, never on a stream */
    FAKECUDA_OP_MEM_OP, /* stream memory operations: 4- and 8-byte value writes */
} FakecudaOpType;

typedef struct FakecudaOp {
    struct FakecudaOp *next;
    FakecudaOpType type;
    uint64_t seq;
    union {
        struct {
            uintptr_t dst, src;
            size_t n;
            void *staging;   /* owned copy of a pageable source, or NULL */
            bool delay;      /* an asynchronous copy (FAKECUDA_COPY_DELAY_US applies) */
        } copy;
        struct {
            uintptr_t dst;
            size_t n;
            unsigned char value;
        } memset;
        struct {
            CUstreamBatchMemOpParams *ops; /* owned; each a CU_STREAM_MEM_OP_WRITE_VALUE_32 or _64 */
            unsigned count;
            CUcontext ctx;
        } mem_op;
        struct {
            const FakecudaKernel *kernel;
            CUfunction func; /* as launched (a graph's kernel node answers it) */
            int device_updatable; /* a graph's kernel node opted in (it never opts out) */
            unsigned grid[3], block[3];
            unsigned shared_bytes;
            void *blob;      /* owned copy of the parameter values */
            void **params;   /* pointers into blob, one per parameter */
        } kernel;
        struct {
            CUevent event;   /* holds a reference */
            uint64_t gen;
        } event;
        struct {
            CUstream target; /* holds a reference */
            uint64_t seq;
        } wait;
        struct {
            CUhostFn fn;
            void *arg;
        } host_fn;
        struct {
            struct CUgraph_st *graph; /* owned: freed with the node */
        } child;
    } u;
} FakecudaOp;

typedef enum FakecudaStreamKind {
    FAKECUDA_STREAM_USER,
    FAKECUDA_STREAM_LEGACY,
    FAKECUDA_STREAM_PER_THREAD,
} FakecudaStreamKind;

/* Resolves a handle as passed to the API (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD or a created
 * stream) into a referenced stream; per_thread says how 0 is read (the _ptsz/_ptds entry points).
 * Release with fakecuda_stream_unref. */
CUresult fakecuda_stream_get(CUstream handle, bool per_thread, CUstream *out);
void fakecuda_stream_unref(CUstream s);

/* Queues op on s in stream order (or appends it to the capture graph), taking ownership of op in
 * every case.  Returns a capture error when the op may not be issued now. */
CUresult fakecuda_stream_submit(CUstream s, FakecudaOp *op);

/* Queues op and waits until s has executed it. */
CUresult fakecuda_stream_submit_sync(CUstream s, FakecudaOp *op);

/* Waits for every stream of device (all devices when device < 0); returns a sticky error if any. */
CUresult fakecuda_device_sync(int device);

/* Frees every allocation that belongs to ctx (fakecuda_ctx_owner), registrations included, after
 * draining its device's work (mem.c; cuDevicePrimaryCtxReset, cuCtxDestroy): pinned memory is
 * unmapped. */
void fakecuda_mem_drop_context(CUcontext ctx);

/* True if s is capturing (status active or invalidated). */
bool fakecuda_stream_capturing(CUstream s);

/* Marks an active capture of s invalidated: EndCapture will fail. */
void fakecuda_stream_invalidate_capture(CUstream s);

/* Fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (and invalidates the captures concerned) when a
 * global-mode capture is active anywhere or a thread-local one in this thread: the call that asked is
 * not legal during capture. */
CUresult fakecuda_capture_check_unsafe(void);
/* Synchronizing a whole device encompasses its capturing streams: refused, and those captures
 * invalidated, whatever the calling thread's interaction mode (as on the H200). */
CUresult fakecuda_capture_check_device(int device);

FakecudaOp *fakecuda_op_new(FakecudaOpType type);

/* A copy of count stream memory operations (free() it), or NULL when out of memory. */
CUstreamBatchMemOpParams *fakecuda_mem_ops_dup(const CUstreamBatchMemOpParams *ops, unsigned count);

/* Whether op is a value write the fake runs: 32 or 64 bits, aligned, into device memory or pinned
 * host memory (copy.c). */
bool fakecuda_mem_op_valid(const CUstreamBatchMemOpParams *op);
void fakecuda_op_free(FakecudaOp *op);

/* ---- module.c / kernels_cpu.c ---- */

typedef struct FakecudaGrid {
    unsigned grid[3], block[3];
    unsigned shared_bytes;
} FakecudaGrid;

/* A CPU implementation of a kernel: runs on the stream's worker thread, reaches device memory
 * through fakecuda_mem_access and returns CUDA_ERROR_ILLEGAL_ADDRESS when a pointer is bad. */
typedef CUresult (*FakecudaKernelFn)(const FakecudaGrid *grid, void *const *params);

#define FAKECUDA_KERNEL_MAX_PARAMS 16

struct FakecudaKernel {
    const char *name;
    FakecudaKernelFn fn;
    unsigned param_count;
    size_t param_sizes[FAKECUDA_KERNEL_MAX_PARAMS];
};

/* One table entry per kernel: FAKECUDA_KERNEL(name, fn, sizeof param0, sizeof param1, ...). */
#define FAKECUDA_KERNEL(kname, kfn, ...)                                                             \
    {                                                                                               \
        .name = #kname, .fn = (kfn),                                                                \
        .param_count = (unsigned)(sizeof((size_t[]){__VA_ARGS__}) / sizeof(size_t)),                \
        .param_sizes = {__VA_ARGS__},                                                               \
    }

extern const FakecudaKernel fakecuda_kernels[];
extern const size_t fakecuda_kernel_count;

CUresult fakecuda_kernel_run(const FakecudaOp *op);
/* Copies kernel's arguments from params into op's own blob and params (both left for
 * fakecuda_op_free to release, on failure too). */
CUresult fakecuda_kernel_args(const FakecudaKernel *kernel, void *const *params, FakecudaOp *op);
/* The kernel behind a live function handle; false for any other handle. */
bool fakecuda_function_kernel(CUfunction f, const FakecudaKernel **kernel);

#endif /* IBP_TESTS_FAKECUDA_INTERNAL_H */
