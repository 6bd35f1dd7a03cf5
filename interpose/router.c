/* SPDX-License-Identifier: MIT
 * ibpshim: the copy and allocation router behind the exported hooks. */
#include "interpose/router.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "common/log.h"
#include "interpose/compressed.h"
#include "interpose/devmem.h"
#include "interpose/real.h"
#include "interpose/shim.h"
#include "kernels/driver.h"
#include "kernels/module.h"
#include "kernels/staging.h"
#include "policy/engine.h"
#include "report/counters.h"
#include "report/ledger.h"

/* Compressed runs shorter than this go raw: below it a decode launch and the plan's DMA cost
 * about what the run saves on the wire. */
#define IBP_ROUTER_MIN_RUN ((size_t)2 << 20)

static atomic_int compress_on;
static atomic_int copies_on = 1; /* ibpshim_set_enabled() */
static uint64_t min_bytes = UINT64_MAX;
static IbpSendOptions send_opts; /* from [transfer] */

/* Host functions (cudaLaunchHostFunc, cudaStreamAddCallback) enqueued and not yet returned, plus one
 * for good once one ran unwrapped.  A plain copy enqueued behind such a function reads the source
 * when the stream reaches it, after the function ran, while a plan is made from the shadow of the
 * bytes at call time: if the function writes the source, the compressed copy delivers stale
 * bytes.  Which stream and which bytes a function touches is unknown, so while any is pending every
 * copy that would go compressed goes raw ("stale": the shadow may not hold what the copy must
 * read).  Release on the decrement, acquire on the copy's load: a copy that finds none pending
 * sees the function's writes, and the tracker has seen them too (they fault or dirty pages as any
 * write does). */
static atomic_ulong hostfn_pending;
static atomic_flag hostfn_unseen;

/* The contexts the shim copied in, recorded fences in or tracked pinned memory of (current when
 * it was allocated or registered), filled from the front; past that many, every destroyed context
 * counts as one of them. */
#define IBP_ROUTER_CONTEXTS 32
static _Atomic(CUcontext) seen_ctx[IBP_ROUTER_CONTEXTS];
static atomic_int seen_overflow;
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;

/* ctx's slot, or the first empty one, or IBP_ROUTER_CONTEXTS when neither is left. */
static int context_slot(CUcontext ctx)
{
    int i = 0;
    for (CUcontext c; i < IBP_ROUTER_CONTEXTS; i++)
        if (!(c = atomic_load_explicit(&seen_ctx[i], memory_order_acquire)) || c == ctx)
            break;
    return i;
}

static int context_seen(CUcontext ctx)
{
    const int i = context_slot(ctx);
    return i < IBP_ROUTER_CONTEXTS && atomic_load_explicit(&seen_ctx[i], memory_order_acquire) == ctx;
}

static void note_context(CUcontext ctx)
{
    static _Thread_local CUcontext last;
    if (!ctx || ctx == last)
        return;
    if (!context_seen(ctx)) {
        pthread_mutex_lock(&seen_lock);
        const int i = context_slot(ctx);
        if (i == IBP_ROUTER_CONTEXTS)
            atomic_store(&seen_overflow, 1);
        else
            atomic_store_explicit(&seen_ctx[i], ctx, memory_order_release);
        pthread_mutex_unlock(&seen_lock);
    }
    last = ctx;
}

/* The calling thread's current context, recorded among those seen; NULL when none. */
static CUcontext current_context(const IbpDriver *drv)
{
    CUcontext ctx = NULL;
    if (!drv || drv->cuCtxGetCurrent(&ctx) != CUDA_SUCCESS)
        return NULL;
    note_context(ctx);
    return ctx;
}

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

static void report_shadow_bytes(void *tag, int64_t delta)
{
    ibp_ledger_shadow(tag, delta);
}

static void report_evicted(void *tag, uint64_t bytes)
{
    ibp_ledger_evicted(tag, bytes);
}

static void report_blocks(void *tag, uint64_t invalidated, uint64_t recompressed)
{
    if (invalidated)
        ibp_ledger_invalidated(tag, invalidated);
    if (recompressed)
        ibp_ledger_recompressed(tag, recompressed);
}

static void report_tracking_ns(void *tag, uint64_t ns)
{
    ibp_ledger_tracking_ns(tag, ns);
}

static void report_planned(void *tag, uint64_t ns, int reused)
{
    ibp_ledger_planned(tag, ns, reused);
}

static void report_built(void *tag, uint64_t ns)
{
    ibp_ledger_built(tag, ns);
}

void ibp_router_start(const IbpConfig *cfg)
{
    if (!cfg->shim.enabled)
        return;
    if (!ibp_kernels_built()) {
        IBP_INFO("built without decode kernels: copies are forwarded unchanged");
        return;
    }
    IbpPolicyParams p = {
        .min_bytes = cfg->policy.min_bytes,
        .min_copies = cfg->policy.min_copies > 0 ? (unsigned)cfg->policy.min_copies : 1u,
        .min_ratio = cfg->policy.min_ratio,
        .max_shadow_bytes =
            cfg->policy.max_shadow_bytes ? cfg->policy.max_shadow_bytes : ibp_config_shadow_budget(cfg),
        .tracking = (IbpTrackBackend)cfg->policy.tracking,
        .compressor_threads =
            cfg->policy.compressor_threads > 0 ? (unsigned)cfg->policy.compressor_threads : 1u,
        .plan_reuse = cfg->policy.plan_reuse,
        .churn_limit = cfg->policy.churn_limit > 0 ? (unsigned)cfg->policy.churn_limit : 0u,
        .churn_window_ns = cfg->policy.churn_window_ns,
        .track_write_combined = cfg->policy.track_write_combined,
        .track_mapped = cfg->policy.track_mapped,
        .track_shared = cfg->policy.track_shared,
        .selector_flags = cfg->policy.selector_flags != IBP_SELECTOR_FLAGS_OFF,
        .selector_flags_min_ratio =
            cfg->policy.selector_flags == IBP_SELECTOR_FLAGS_AUTO ? IBP_SELECTOR_FLAGS_AUTO_RATIO : 0.0,
        .selector_flags_min_copy =
            cfg->policy.selector_flags == IBP_SELECTOR_FLAGS_AUTO ? IBP_SELECTOR_FLAGS_AUTO_COPY_BYTES : 0u,
        .top_coded = cfg->policy.top_coded,
        .block_bytes = cfg->transfer.block_bytes,
        .min_run = IBP_ROUTER_MIN_RUN,
        .ops = *ibp_devmem_ops(),
        .on_shadow_bytes = report_shadow_bytes,
        .on_evicted = report_evicted,
        .on_blocks = report_blocks,
        .on_tracking_ns = report_tracking_ns,
        .on_planned = report_planned,
        .on_built = report_built,
    };
    send_opts.force = cfg->transfer.path != IBP_TRANSFER_PATH_AUTO;
    send_opts.zerocopy = cfg->transfer.path == IBP_TRANSFER_PATH_ZEROCOPY;
    send_opts.max_grid = cfg->transfer.max_sms > 0 ? (unsigned)cfg->transfer.max_sms : 0u;
    send_opts.pipeline_chunk = (size_t)cfg->transfer.pipeline_chunk;
    send_opts.pipeline_tail = (size_t)cfg->transfer.pipeline_tail;
    send_opts.pipeline_raw_tail = (size_t)cfg->transfer.pipeline_raw_tail;
    send_opts.priority_decode = cfg->transfer.priority_decode;
    send_opts.raw_in_order = cfg->transfer.raw_in_order;
    send_opts.raw_edges = cfg->transfer.raw_edges;
    send_opts.edge_kernel = cfg->transfer.edge_kernel;
    ibp_staging_configure(cfg->transfer.staging_bytes,
                          cfg->transfer.staging_exhausted == IBP_STAGING_EXHAUSTED_WAIT);
    if (ibp_policy_start(&p) == 0) {
        min_bytes = p.min_bytes;
        atomic_store(&compress_on, 1);
    }
}

void ibp_router_stop(void)
{
    if (atomic_exchange(&compress_on, 0))
        ibp_policy_stop();
}

void ibp_router_device_state_lost(const char *call)
{
    if (!atomic_exchange(&compress_on, 0))
        return;
    /* Information, not a warning: many programs reset the device just before they exit. */
    IBP_INFO("%s destroys the context the shim keeps its compressed copies in: every copy goes as it is "
             "from now on",
             call);
    ibp_policy_stop();
}

void ibp_router_context_destroyed(CUcontext ctx, const char *call)
{
    if (ctx && atomic_load(&compress_on) && (context_seen(ctx) || atomic_load(&seen_overflow)))
        ibp_router_device_state_lost(call);
}

/* A runtime call that resets the device: the compressed path stops before it. */
static cudaError_t device_reset(cudaError_t (*real)(void), const char *call)
{
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    ibp_router_device_state_lost(call);
    return real();
}

cudaError_t ibp_route_device_reset(void)
{
    return device_reset(IBP_REAL(cudaDeviceReset), "cudaDeviceReset");
}

cudaError_t ibp_route_thread_exit(void)
{
    return device_reset(IBP_REAL(cudaThreadExit), "cudaThreadExit");
}

static IbpRawReason raw_reason(IbpCopyWhy why)
{
    switch (why) {
    case IBP_COPY_BELOW_THRESHOLD:
        return IBP_RAW_BELOW_THRESHOLD;
    case IBP_COPY_NOT_TRACKED:
        return IBP_RAW_NOT_PINNED;
    case IBP_COPY_COLD:
        return IBP_RAW_COLD;
    case IBP_COPY_STALE:
        return IBP_RAW_STALE;
    case IBP_COPY_INCOMPRESSIBLE:
        return IBP_RAW_INCOMPRESSIBLE;
    case IBP_COPY_CHURN:
        return IBP_RAW_CHURN;
    case IBP_COPY_BUDGET:
        return IBP_RAW_BUDGET;
    case IBP_COPY_UNTRACKABLE:
        return IBP_RAW_DISABLED;
    case IBP_COPY_SLOWER:
        return IBP_RAW_SLOWER;
    default:
        return IBP_RAW_ERROR;
    }
}

static IbpRawReason piece_reason(IbpPieceWhy why)
{
    switch (why) {
    case IBP_PIECE_WHY_STALE:
        return IBP_RAW_STALE;
    case IBP_PIECE_WHY_INCOMPRESSIBLE:
        return IBP_RAW_INCOMPRESSIBLE;
    case IBP_PIECE_WHY_SHORT:
        return IBP_RAW_BELOW_THRESHOLD;
    default:
        return IBP_RAW_COLD;
    }
}

static uint32_t region_flags_of(unsigned int host_alloc_flags, int registered)
{
    uint32_t f = registered ? IBP_REGION_REGISTERED : IBP_REGION_PINNED_ALLOC;
    if (registered) {
        if (host_alloc_flags & cudaHostRegisterMapped)
            f |= IBP_REGION_MAPPED;
        if (host_alloc_flags & cudaHostRegisterPortable)
            f |= IBP_REGION_PORTABLE;
    } else {
        if (host_alloc_flags & cudaHostAllocMapped)
            f |= IBP_REGION_MAPPED;
        if (host_alloc_flags & cudaHostAllocPortable)
            f |= IBP_REGION_PORTABLE;
        if (host_alloc_flags & cudaHostAllocWriteCombined)
            f |= IBP_REGION_WRITE_COMBINED;
    }
    return f;
}

/* The allocation site is captured here, two frames below the application's call. */
__attribute__((noinline)) static void track_allocation(void *ptr, size_t size, uint32_t flags)
{
    if (!atomic_load_explicit(&compress_on, memory_order_relaxed) || size < min_bytes)
        return;
    const uint32_t site = ibp_site_capture(2);
    (void)current_context(ibp_driver_get());
    IbpLedgerRegion *entry = ibp_ledger_region_open(ptr, size, flags, site);
    if (ibp_policy_on_alloc(ptr, size, flags, site, entry) != 1)
        ibp_ledger_region_close(&entry);
}

static void untrack_allocation(void *ptr)
{
    if (!atomic_load_explicit(&compress_on, memory_order_relaxed))
        return;
    IbpLedgerRegion *entry = ibp_policy_on_free(ptr);
    ibp_ledger_region_close(&entry);
}

cudaError_t ibp_route_malloc_host(void **ptr, size_t size)
{
    ibp_shim_init();
    const IbpReal_cudaMallocHost real = IBP_REAL(cudaMallocHost);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    ibp_counters_add(IBPSHIM_CALL_MALLOC_HOST, size);
    const cudaError_t err = real(ptr, size);
    if (err == cudaSuccess && ptr)
        track_allocation(*ptr, size, region_flags_of(cudaHostAllocDefault, 0));
    return err;
}

cudaError_t ibp_route_host_alloc(void **ptr, size_t size, unsigned int flags)
{
    ibp_shim_init();
    const IbpReal_cudaHostAlloc real = IBP_REAL(cudaHostAlloc);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    ibp_counters_add(IBPSHIM_CALL_HOST_ALLOC, size);
    const cudaError_t err = real(ptr, size, flags);
    if (err == cudaSuccess && ptr)
        track_allocation(*ptr, size, region_flags_of(flags, 0));
    return err;
}

cudaError_t ibp_route_free_host(void *ptr)
{
    const IbpReal_cudaFreeHost real = IBP_REAL(cudaFreeHost);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    ibp_counters_add(IBPSHIM_CALL_FREE_HOST, 0);
    untrack_allocation(ptr);
    return real(ptr);
}

cudaError_t ibp_route_host_register(void *ptr, size_t size, unsigned int flags)
{
    ibp_shim_init();
    const IbpReal_cudaHostRegister real = IBP_REAL(cudaHostRegister);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    ibp_counters_add(IBPSHIM_CALL_HOST_REGISTER, size);
    const cudaError_t err = real(ptr, size, flags);
    if (err == cudaSuccess)
        track_allocation(ptr, size, region_flags_of(flags, 1));
    return err;
}

cudaError_t ibp_route_host_unregister(void *ptr)
{
    const IbpReal_cudaHostUnregister real = IBP_REAL(cudaHostUnregister);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    ibp_counters_add(IBPSHIM_CALL_HOST_UNREGISTER, 0);
    untrack_allocation(ptr);
    return real(ptr);
}

/* The driver's handle for the application's stream under its default-stream semantics. */
static CUstream driver_stream(IbpStreamApi api, cudaStream_t stream)
{
    if (stream == NULL)
        return api == IBP_STREAM_API_PER_THREAD ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
    return (CUstream)stream;
}

int ibp_router_stream_capturing(IbpStreamApi api, cudaStream_t stream)
{
    const IbpDriver *drv = ibp_driver_get();
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    if (!drv || drv->cuStreamIsCapturing(driver_stream(api, stream), &capture) != CUDA_SUCCESS)
        return -1;
    return capture != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* Tries to send [src, src + n) -> dst compressed.  Returns 1 when the copy was handled (its
 * result in *ret), 0 when the caller should make the real call. */
static int route_h2d(IbpStreamApi api, void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                     cudaStream_t stream, int synchronous, cudaError_t *ret)
{
    IbpCopyPlan plan;
    const uint64_t t_lookup = ibp_ledger_elapsed_ns();
    /* Loaded before planning: a host function that returns after the load may have written the
     * source behind the plan's back. */
    const int hostfn_busy = atomic_load_explicit(&hostfn_pending, memory_order_acquire) != 0;
    if (!ibp_policy_plan_h2d(src, n, &plan)) {
        ibp_ledger_routed(plan.tag, ibp_ledger_elapsed_ns() - t_lookup, 0, 0);
        ibp_ledger_copy_raw(plan.tag, raw_reason(plan.why), n);
        return 0;
    }
    const uint64_t t_enqueue = ibp_ledger_elapsed_ns();
    const IbpDriver *drv = ibp_driver_get();
    IbpRawReason why = IBP_RAW_ERROR;
    CUcontext ctx = NULL;
    const CUstream cu_stream = driver_stream(api, stream);
    if (hostfn_busy) {
        why = IBP_RAW_STALE;
        goto raw;
    }
    if (!(ctx = current_context(drv)))
        goto raw;
    if (ibp_router_stream_capturing(api, stream) != 0) {
        why = IBP_RAW_CAPTURING;
        goto raw;
    }
    /* The decode kernel writes dst itself: it must be device memory holding all n bytes.  Anything
     * else goes to the real call, which answers exactly as it would without the shim (a kernel
     * writing out of bounds would instead break the whole context). */
    unsigned int mem_type = 0;
    CUdeviceptr range_start = 0;
    size_t range_size = 0;
    const CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst;
    if (drv->cuPointerGetAttribute(&mem_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d) != CUDA_SUCCESS ||
        mem_type != CU_MEMORYTYPE_DEVICE ||
        drv->cuPointerGetAttribute(&range_start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d) != CUDA_SUCCESS ||
        drv->cuPointerGetAttribute(&range_size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d) != CUDA_SUCCESS ||
        d < range_start || n > range_size - (d - range_start)) {
        why = kind == cudaMemcpyDefault ? IBP_RAW_NOT_PINNED : IBP_RAW_ERROR;
        goto raw;
    }
    IbpSendStats st;
    const uint64_t t_send = ibp_ledger_elapsed_ns();
    *ret = ibp_send_plan(api, &plan, dst, src, n, stream, ctx, cu_stream, synchronous, &send_opts, &st);
    ibp_ledger_routed(plan.tag, t_enqueue - t_lookup, t_send - t_enqueue + st.enqueue_ns, st.staging_wait_ns);
    ibp_ledger_copy(plan.tag, n);
    ibp_ledger_compressed(plan.tag, st.compressed_orig, st.compressed_sent);
    size_t planned_raw = 0;
    for (int i = 0; i < plan.npieces; i++) {
        if (plan.pieces[i].kind == IBP_PIECE_RAW) {
            ibp_ledger_raw(plan.tag, piece_reason(plan.pieces[i].why), plan.pieces[i].len);
            planned_raw += plan.pieces[i].len;
        }
    }
    /* Compressed pieces that went raw: slower than a plain copy here, or a failure. */
    if (st.slower)
        ibp_ledger_raw(plan.tag, IBP_RAW_SLOWER, st.slower);
    if (st.raw > planned_raw + st.slower)
        ibp_ledger_raw(plan.tag, IBP_RAW_ERROR, st.raw - planned_raw - st.slower);
    IBP_TRACE("copy %p <- %p (%zu bytes): %zu compressed as %zu, %zu raw", dst, src, n, st.compressed_orig,
              st.compressed_sent, st.raw);
    return 1;
raw:
    ibp_policy_plan_end(&plan, NULL);
    ibp_ledger_routed(plan.tag, t_enqueue - t_lookup, ibp_ledger_elapsed_ns() - t_enqueue, 0);
    ibp_ledger_copy_raw(plan.tag, why, n);
    return 0;
}

/* Device writes into a tracked region land behind the tracker's back: marked now and again
 * once a fence behind them on their stream has passed.  Blocking calls too: a copy whose kind
 * CUDA does not synchronize (device to device through a pinned buffer's unified address) may
 * return before it lands, and the fence of one that has landed is passed at once. */
static void note_device_write(IbpStreamApi api, void *dst, size_t n, cudaStream_t stream)
{
    void *fence = NULL;
    const IbpDriver *drv = ibp_driver_get();
    const CUcontext ctx = current_context(drv);
    if (ctx)
        fence = ibp_devmem_fence_record(ctx, driver_stream(api, stream));
    if (!fence && drv)
        ibp_driver_stream_sync(drv, driver_stream(api, stream));
    ibp_policy_on_d2h(dst, n, fence);
}

static int writes_tracked_host(void *dst, size_t n, enum cudaMemcpyKind kind)
{
    return kind != cudaMemcpyHostToDevice && atomic_load_explicit(&compress_on, memory_order_relaxed) &&
           ibp_policy_touches_region(dst, n);
}

static int may_compress(const void *src, size_t n, enum cudaMemcpyKind kind)
{
    (void)src;
    return atomic_load_explicit(&compress_on, memory_order_relaxed) && n >= min_bytes &&
           (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDefault) &&
           atomic_load_explicit(&copies_on, memory_order_relaxed);
}

/* A copy from the host that goes as it is, on a stream whose compressed copies send their DMAs
 * ahead on an internal copy stream: sent there too (ibp_send_raw_in_order). */
static int raw_in_order(IbpStreamApi api, void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                        cudaStream_t stream, cudaError_t *ret)
{
    /* Not while the application switched the shim's copies off (ibpshim_set_enabled): its copies
     * then go exactly as without the shim. */
    if (count < IBP_RAW_IN_ORDER_MIN || !send_opts.raw_in_order ||
        (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDefault) ||
        !atomic_load_explicit(&compress_on, memory_order_relaxed) ||
        !atomic_load_explicit(&copies_on, memory_order_relaxed))
        return 0;
    const CUcontext ctx = current_context(ibp_driver_get());
    if (!ctx)
        return 0;
    return ibp_send_raw_in_order(api, dst, src, count, kind, ctx, driver_stream(api, stream), ret);
}

__attribute__((visibility("default"))) int ibpshim_set_enabled(int on)
{
    return atomic_exchange(&copies_on, on ? 1 : 0);
}

cudaError_t ibp_route_memcpy(IbpStreamApi api, void *dst, const void *src, size_t count,
                             enum cudaMemcpyKind kind)
{
    const IbpReal_cudaMemcpy real =
        api == IBP_STREAM_API_PER_THREAD ? IBP_REAL(cudaMemcpy_ptds) : IBP_REAL(cudaMemcpy);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    ibp_counters_add(memcpy_kind(kind, 0), count);
    cudaError_t ret;
    if (may_compress(src, count, kind) && route_h2d(api, dst, src, count, kind, NULL, 1, &ret))
        return ret;
    ret = real(dst, src, count, kind);
    if (ret == cudaSuccess)
        ibp_router_enqueued_write(api, dst, count, kind, NULL);
    return ret;
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
    cudaError_t ret;
    if (may_compress(src, count, kind) && route_h2d(api, dst, src, count, kind, stream, 0, &ret))
        return ret;
    if (!raw_in_order(api, dst, src, count, kind, stream, &ret))
        ret = real(dst, src, count, kind, stream);
    if (ret == cudaSuccess)
        ibp_router_enqueued_write(api, dst, count, kind, stream);
    return ret;
}

/* A host function or stream callback, wrapped while it is pending. */
typedef struct IbpHostFnCall {
    cudaHostFn_t fn;         /* cudaLaunchHostFunc's or cuLaunchHostFunc's, or NULL */
    cudaStreamCallback_t cb; /* cudaStreamAddCallback's, or NULL */
    CUstreamCallback cu_cb;  /* cuStreamAddCallback's, or NULL */
    void *user_data;
} IbpHostFnCall;

static void hostfn_done(IbpHostFnCall *call)
{
    free(call);
    ibp_router_hostwork_end();
}

static void CUDART_CB hostfn_trampoline(void *arg)
{
    IbpHostFnCall *call = arg;
    call->fn(call->user_data);
    hostfn_done(call);
}

static void CUDART_CB callback_trampoline(cudaStream_t stream, cudaError_t status, void *arg)
{
    IbpHostFnCall *call = arg;
    call->cb(stream, status, call->user_data);
    hostfn_done(call);
}

static void CUDA_CB cu_callback_trampoline(CUstream stream, CUresult status, void *arg)
{
    IbpHostFnCall *call = arg;
    call->cu_cb(stream, status, call->user_data);
    hostfn_done(call);
}

/* Returns a record counted as pending, or NULL when the function goes unwrapped: the shim is off
 * (no copy is ever planned), there is no function (the real call rejects it), or the stream is
 * capturing (the function becomes a graph node that runs at every launch of the graph, long
 * after any record would be freed).  *unseen is set when the function cannot be followed (no
 * memory, the stream's capture state unknown): if the real call takes it, copies go raw for good. */
static IbpHostFnCall *hostfn_begin(IbpStreamApi api, cudaStream_t stream, int has_fn, int *unseen)
{
    *unseen = 0;
    if (!has_fn || !atomic_load_explicit(&compress_on, memory_order_relaxed))
        return NULL;
    const IbpDriver *drv = ibp_driver_get();
    if (!drv)
        return NULL; /* no driver: every copy goes raw anyway */
    const int capturing = ibp_router_stream_capturing(api, stream);
    if (capturing < 0)
        *unseen = 1;
    if (capturing != 0)
        return NULL;
    IbpHostFnCall *call = calloc(1, sizeof(*call));
    if (!call) {
        *unseen = 1;
        return NULL;
    }
    ibp_router_hostwork_begin();
    return call;
}

void ibp_router_hostwork_begin(void)
{
    atomic_fetch_add_explicit(&hostfn_pending, 1, memory_order_relaxed);
}

void ibp_router_hostwork_end(void)
{
    atomic_fetch_sub_explicit(&hostfn_pending, 1, memory_order_release);
}

void ibp_router_hostwork_lost(const char *what)
{
    if (!atomic_flag_test_and_set(&hostfn_unseen)) {
        atomic_fetch_add_explicit(&hostfn_pending, 1, memory_order_relaxed);
        IBP_WARN("%s: host-to-device copies go raw from now on", what);
    }
}

void ibp_router_enqueued_write(IbpStreamApi api, void *dst, size_t n, enum cudaMemcpyKind kind,
                               cudaStream_t stream)
{
    if (!writes_tracked_host(dst, n, kind))
        return;
    /* A write captured into a graph writes nothing now: the graph's launches are followed
     * (graphs.c), and a fence recorded into the capture would never be seen to land. */
    if (ibp_router_stream_capturing(api, stream) != 1)
        note_device_write(api, dst, n, stream);
}

void ibp_router_device_write(IbpStreamApi api, void *dst, size_t n, cudaStream_t stream)
{
    if (writes_tracked_host(dst, n, cudaMemcpyDeviceToHost))
        note_device_write(api, dst, n, stream);
}

int ibp_router_tracked_region(const void *p, size_t n, uintptr_t *base, size_t *size)
{
    return atomic_load_explicit(&compress_on, memory_order_relaxed) &&
           ibp_policy_region_bounds(p, n, base, size);
}

int ibp_router_compressing(void)
{
    return atomic_load_explicit(&compress_on, memory_order_relaxed);
}

/* After the real call: undoes a wrap it refused, or records an unwrapped function it took. */
static cudaError_t hostfn_end(IbpHostFnCall *call, int unseen, cudaError_t err)
{
    if (err != cudaSuccess) {
        if (call)
            hostfn_done(call);
        return err;
    }
    if (unseen)
        ibp_router_hostwork_lost("a host function could not be wrapped (out of memory, or its stream's "
                                 "capture state unknown)");
    return err;
}

cudaError_t ibp_route_launch_host_func(IbpStreamApi api, cudaStream_t stream, cudaHostFn_t fn,
                                       void *user_data)
{
    ibp_shim_init();
    const IbpReal_cudaLaunchHostFunc real =
        api == IBP_STREAM_API_PER_THREAD ? IBP_REAL(cudaLaunchHostFunc_ptsz) : IBP_REAL(cudaLaunchHostFunc);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    int unseen;
    IbpHostFnCall *call = hostfn_begin(api, stream, fn != NULL, &unseen);
    if (!call)
        return hostfn_end(NULL, unseen, real(stream, fn, user_data));
    call->fn = fn;
    call->user_data = user_data;
    return hostfn_end(call, 0, real(stream, hostfn_trampoline, call));
}

cudaError_t ibp_route_stream_add_callback(IbpStreamApi api, cudaStream_t stream,
                                          cudaStreamCallback_t callback, void *user_data, unsigned int flags)
{
    ibp_shim_init();
    const IbpReal_cudaStreamAddCallback real = api == IBP_STREAM_API_PER_THREAD
                                                   ? IBP_REAL(cudaStreamAddCallback_ptsz)
                                                   : IBP_REAL(cudaStreamAddCallback);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    int unseen;
    IbpHostFnCall *call = hostfn_begin(api, stream, callback != NULL, &unseen);
    if (!call)
        return hostfn_end(NULL, unseen, real(stream, callback, user_data, flags));
    call->cb = callback;
    call->user_data = user_data;
    return hostfn_end(call, 0, real(stream, callback_trampoline, call, flags));
}

/* hostfn_end for a driver call's result. */
static CUresult cu_hostfn_end(IbpHostFnCall *call, int unseen, CUresult err)
{
    hostfn_end(call, unseen, err == CUDA_SUCCESS ? cudaSuccess : cudaErrorUnknown);
    return err;
}

CUresult ibp_route_cu_launch_host_func(IbpStreamApi api, IbpCuLaunchHostFuncFn real, CUstream stream,
                                       CUhostFn fn, void *user_data)
{
    ibp_shim_init();
    int unseen;
    IbpHostFnCall *call = hostfn_begin(api, (cudaStream_t)stream, fn != NULL, &unseen);
    if (!call)
        return cu_hostfn_end(NULL, unseen, real(stream, fn, user_data));
    call->fn = fn;
    call->user_data = user_data;
    return cu_hostfn_end(call, 0, real(stream, hostfn_trampoline, call));
}

CUresult ibp_route_cu_stream_add_callback(IbpStreamApi api, IbpCuStreamAddCallbackFn real, CUstream stream,
                                          CUstreamCallback callback, void *user_data, unsigned int flags)
{
    ibp_shim_init();
    int unseen;
    IbpHostFnCall *call = hostfn_begin(api, (cudaStream_t)stream, callback != NULL, &unseen);
    if (!call)
        return cu_hostfn_end(NULL, unseen, real(stream, callback, user_data, flags));
    call->cu_cb = callback;
    call->user_data = user_data;
    return cu_hostfn_end(call, 0, real(stream, cu_callback_trampoline, call, flags));
}
