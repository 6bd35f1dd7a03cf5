/* SPDX-License-Identifier: MIT
 * ibpshim: fake CUDA driver: initialisation, devices, primary contexts, errors, logging, counters. */
#include "tests/fakecuda/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

FakecudaGlobals fakecuda_g;
FakecudaCounters fakecuda_counters;

static pthread_once_t env_once = PTHREAD_ONCE_INIT;

/* Reports a H200-like part: 132 SMs, compute capability 9.0. */
#define FAKE_SM_COUNT 132
#define FAKE_CC_MAJOR 9
#define FAKE_CC_MINOR 0
#define FAKE_SMEM_PER_BLOCK (48 * 1024)
#define FAKE_SMEM_PER_BLOCK_OPTIN (227 * 1024)
#define FAKE_SMEM_PER_SM (228 * 1024)
#define FAKE_L2_BYTES (50 * 1024 * 1024)

static void read_env(void)
{
    const char *devices = getenv("FAKECUDA_DEVICES");
    int count = 1;
    if (devices && *devices) {
        char *end = NULL;
        const long v = strtol(devices, &end, 10);
        if (*end == '\0' && v >= 0 && v <= FAKECUDA_MAX_DEVICES)
            count = (int)v;
    }
    fakecuda_g.device_count = count;
    const char *log = getenv("FAKECUDA_LOG");
    fakecuda_g.log = log && (!strcmp(log, "1") || !strcmp(log, "true") || !strcmp(log, "yes"));
    const char *delay = getenv("FAKECUDA_COPY_DELAY_US");
    if (delay && *delay)
        atomic_store(&fakecuda_g.copy_delay_us, (unsigned)strtoul(delay, NULL, 10));
    const char *per_mib = getenv("FAKECUDA_COPY_US_PER_MIB");
    if (per_mib && *per_mib)
        fakecuda_g.copy_us_per_mib = (unsigned)strtoul(per_mib, NULL, 10);
    const char *kdelay = getenv("FAKECUDA_KERNEL_DELAY_US");
    if (kdelay && *kdelay)
        fakecuda_g.kernel_delay_us = (unsigned)strtoul(kdelay, NULL, 10);
    for (int i = 0; i < FAKECUDA_MAX_DEVICES; i++) {
        fakecuda_g.ctx[i].device = i;
        fakecuda_g.resource_desc[i].device = i;
    }
}

void fakecuda_env_once(void)
{
    pthread_once(&env_once, read_env);
}

void fakecuda_log(const char *fmt, ...)
{
    char line[512];
    const int head = snprintf(line, sizeof(line), "fakecuda: ");
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(line + head, sizeof(line) - (size_t)head - 1, fmt, ap);
    va_end(ap);
    if (len < 0)
        return;
    len += head;
    if ((size_t)len > sizeof(line) - 2)
        len = (int)sizeof(line) - 2;
    line[len++] = '\n';
    const ssize_t written = write(2, line, (size_t)len);
    (void)written;
}

CUresult fakecuda_check_init(void)
{
    fakecuda_env_once();
    if (fakecuda_g.device_count == 0)
        return CUDA_ERROR_NO_DEVICE;
    if (!atomic_load(&fakecuda_g.initialised))
        return CUDA_ERROR_NOT_INITIALIZED;
    return CUDA_SUCCESS;
}

/* ---- contexts: one primary context per device and a per-thread stack ---- */

static _Thread_local CUcontext ctx_stack[FAKECUDA_CTX_STACK_MAX];
static _Thread_local int ctx_depth;

CUcontext fakecuda_ctx_current(void)
{
    return ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL;
}

CUcontext fakecuda_ctx_owner(void)
{
    const CUcontext ctx = fakecuda_ctx_current();
    return ctx && atomic_load(&ctx->green) ? &fakecuda_g.ctx[ctx->device] : ctx;
}

bool fakecuda_ctx_valid(CUcontext ctx)
{
    for (int i = 0; i < fakecuda_g.device_count; i++)
        if (ctx == &fakecuda_g.ctx[i])
            return true;
    for (int i = 0; i < FAKECUDA_MAX_MADE_CONTEXTS; i++)
        if (ctx == &fakecuda_g.made[i])
            return atomic_load(&ctx->live);
    return false;
}

CUresult fakecuda_current_device(int *device)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    const CUcontext ctx = fakecuda_ctx_current();
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    /* a context destroyed while current here (another thread's destroy, or one below the top of
     * this thread's stack) stays current, and every call in it fails, as the real driver says */
    if (!fakecuda_ctx_valid(ctx))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *device = ctx->device;
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuInit(unsigned int flags)
{
    fakecuda_env_once();
    FAKECUDA_TRACE("cuInit(%u) devices=%d", flags, fakecuda_g.device_count);
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (fakecuda_g.device_count == 0)
        return CUDA_ERROR_NO_DEVICE;
    atomic_store(&fakecuda_g.initialised, true);
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuDriverGetVersion(int *version)
{
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = FAKECUDA_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuDeviceGetCount(int *count)
{
    const CUresult r = fakecuda_check_init();
    if (r == CUDA_ERROR_NOT_INITIALIZED)
        return r;
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = fakecuda_g.device_count;
    return r == CUDA_ERROR_NO_DEVICE ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= fakecuda_g.device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

static bool device_valid(CUdevice dev)
{
    return dev >= 0 && dev < fakecuda_g.device_count;
}

/* The checks of a call that fills *out for device dev: initialised, out given, dev valid. */
static CUresult check_out_device(const void *out, CUdevice dev)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    return device_valid(dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

FAKECUDA_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "fakecuda");
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    const CUresult r = check_out_device(bytes, dev);
    if (r != CUDA_SUCCESS)
        return r;
    *bytes = (size_t)FAKECUDA_DEVICE_BYTES;
    return CUDA_SUCCESS;
}

static int attribute_value(CUdevice_attribute attr, CUdevice dev)
{
    switch (attr) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return FAKE_SMEM_PER_BLOCK;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return FAKE_SM_COUNT;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: return 0;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: return CU_COMPUTEMODE_DEFAULT;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return 0x18 + dev;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 3;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 6144;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return FAKE_L2_BYTES;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return FAKE_CC_MAJOR;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return FAKE_CC_MINOR;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return FAKE_SMEM_PER_SM;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: return 0;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: return 1;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return FAKE_SMEM_PER_BLOCK_OPTIN;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return 32;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
    default: return 0;
    }
}

FAKECUDA_EXPORT CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attr, CUdevice dev)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!value || (int)attr <= 0 || attr >= CU_DEVICE_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    if (!device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *value = attribute_value(attr, dev);
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    const CUresult r = check_out_device(pctx, dev);
    if (r != CUDA_SUCCESS)
        return r;
    atomic_fetch_add(&fakecuda_g.ctx[dev].retains, 1);
    *pctx = &fakecuda_g.ctx[dev];
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    int old = atomic_load(&fakecuda_g.ctx[dev].retains);
    do {
        if (old <= 0)
            return CUDA_ERROR_INVALID_CONTEXT;
    } while (!atomic_compare_exchange_weak(&fakecuda_g.ctx[dev].retains, &old, old - 1));
    return CUDA_SUCCESS;
}

/* Destroys every allocation of the device's primary context (fakecuda_mem_drop_context).  Streams,
 * events and modules stay usable here, where a real driver invalidates them too. */
FAKECUDA_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    fakecuda_mem_drop_context(&fakecuda_g.ctx[dev]);
    FAKECUDA_TRACE("cuDevicePrimaryCtxReset(%d)", (int)dev);
    return CUDA_SUCCESS;
}

/* The CUDA 10 name, which the header maps to the _v2 form. */
#undef cuDevicePrimaryCtxReset
FAKECUDA_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev);
CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    return cuDevicePrimaryCtxReset_v2(dev);
}

/* ---- contexts made and destroyed by the application ---- */

/* Guards the taking of made contexts and green contexts' slots. */
static pthread_mutex_t made_lock = PTHREAD_MUTEX_INITIALIZER;

/* The lowest free made context, now live on dev (owned by a green context where green says so);
 * NULL when every one is taken.  made_lock is held. */
static CUcontext made_take_locked(CUdevice dev, bool green)
{
    for (int i = 0; i < FAKECUDA_MAX_MADE_CONTEXTS; i++) {
        CUcontext const made = &fakecuda_g.made[i];
        if (!atomic_load(&made->live)) {
            made->device = (int)dev;
            atomic_store(&made->green, green);
            atomic_store(&made->live, true);
            return made;
        }
    }
    return NULL;
}

/* Invalidates a live made context, whichever call ends it (cuCtxDestroy_v2, cuGreenCtxDestroy):
 * it is taken off the calling thread's stack where it is on top, and its slot is free again. */
static void made_retire(CUcontext ctx)
{
    if (ctx_depth > 0 && ctx_stack[ctx_depth - 1] == ctx)
        ctx_depth--;
    atomic_store(&ctx->live, false);
}

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    const CUresult r = check_out_device(pctx, dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (flags & ~(unsigned)(CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX))
        return CUDA_ERROR_INVALID_VALUE;
    if (ctx_depth == FAKECUDA_CTX_STACK_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&made_lock);
    const CUcontext made = made_take_locked(dev, false);
    pthread_mutex_unlock(&made_lock);
    if (!made)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_stack[ctx_depth++] = made; /* current on the calling thread, as cuCtxCreate makes it */
    *pctx = made;
    FAKECUDA_TRACE("cuCtxCreate(dev %d) -> %p", (int)dev, (void *)made);
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

/* CUDA 13's form: no execution affinity or shared-memory carve-out is modelled. */
FAKECUDA_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                                        CUdevice dev)
{
    if (params && (params->execAffinityParams || params->numExecAffinityParams || params->cigParams))
        return CUDA_ERROR_NOT_SUPPORTED;
    return ctx_create(pctx, flags, dev);
}

/* Frees every allocation made in the context (pinned memory unmapped) after its device's work, and
 * pops it where it is the calling thread's current context; a primary context is not destroyed
 * so, nor is a green context's converted one (cuGreenCtxDestroy ends it: what a real driver
 * answers here is not documented).  Where it stays current (on other threads, or below the top
 * here) calls there fail with CUDA_ERROR_CONTEXT_IS_DESTROYED until it is popped or replaced.
 * Streams, events and modules made in it stay usable here, where a real driver invalidates them. */
FAKECUDA_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!ctx || ctx < &fakecuda_g.made[0] || ctx >= &fakecuda_g.made[FAKECUDA_MAX_MADE_CONTEXTS] ||
        !atomic_load(&ctx->live) || atomic_load(&ctx->green))
        return CUDA_ERROR_INVALID_CONTEXT;
    fakecuda_mem_drop_context(ctx);
    made_retire(ctx);
    FAKECUDA_TRACE("cuCtxDestroy(%p)", (void *)ctx);
    return CUDA_SUCCESS;
}

/* The CUDA 3.x name, which the header maps to the _v2 form. */
#undef cuCtxDestroy
FAKECUDA_EXPORT CUresult cuCtxDestroy(CUcontext ctx);
CUresult cuCtxDestroy(CUcontext ctx)
{
    return cuCtxDestroy_v2(ctx);
}

/* ---- green contexts (CUDA 12.4) ---- */

/* Marks a resource cuDeviceGetDevResource filled, in the part of it the driver keeps to itself. */
typedef struct ResourceTag {
    unsigned magic;
    int device;
} ResourceTag;
#define RESOURCE_MAGIC 0x5e50u

/* The device a resource of cuDeviceGetDevResource came from, or -1 for anything else. */
static int resource_device(const CUdevResource *res)
{
    ResourceTag tag;
    memcpy(&tag, res->_internal_padding, sizeof(tag));
    return tag.magic == RESOURCE_MAGIC && device_valid(tag.device) ? tag.device : -1;
}

/* Only the SM resource exists (the header's only type): all of the device's SMs, the minimum
 * partition the header's guide for compute capability 9.0 and an alignment that divides the
 * count, as the header requires.  Nothing reads them but the application: cuDevSmResourceSplitByCount
 * and cuCtxGetDevResource/cuGreenCtxGetDevResource are not modelled. */
FAKECUDA_EXPORT CUresult cuDeviceGetDevResource(CUdevice device, CUdevResource *resource,
                                                CUdevResourceType type)
{
    const CUresult r = check_out_device(resource, device);
    if (r != CUDA_SUCCESS)
        return r;
    if (type != CU_DEV_RESOURCE_TYPE_SM)
        return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    memset(resource, 0, sizeof(*resource));
    resource->type = CU_DEV_RESOURCE_TYPE_SM;
    resource->sm.smCount = FAKE_SM_COUNT;
    resource->sm.minSmPartitionSize = 8;
    resource->sm.smCoscheduledAlignment = 2;
    const ResourceTag tag = {RESOURCE_MAGIC, (int)device};
    memcpy(resource->_internal_padding, &tag, sizeof(tag));
    return CUDA_SUCCESS;
}

/* With no split modelled a descriptor holds one whole device's SMs, the same descriptor every
 * time for a device (a real driver has no call to free one either).  Several resources never come
 * from one split here, so they are refused as a real driver refuses those that do not. */
FAKECUDA_EXPORT CUresult cuDevResourceGenerateDesc(CUdevResourceDesc *phDesc, CUdevResource *resources,
                                                   unsigned int nbResources)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!phDesc || !resources || nbResources == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < nbResources; i++) {
        if (resources[i].type != CU_DEV_RESOURCE_TYPE_SM)
            return CUDA_ERROR_INVALID_RESOURCE_TYPE;
        if (resource_device(&resources[i]) < 0)
            return CUDA_ERROR_INVALID_VALUE;
    }
    if (nbResources > 1)
        return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    *phDesc = &fakecuda_g.resource_desc[resource_device(&resources[0])];
    return CUDA_SUCCESS;
}

static bool desc_valid(CUdevResourceDesc desc)
{
    for (int i = 0; i < fakecuda_g.device_count; i++)
        if (desc == &fakecuda_g.resource_desc[i])
            return true;
    return false;
}

/* The green context's made context, or NULL where g is no live green context.  made_lock is
 * held. */
static CUcontext green_ctx_locked(CUgreenCtx g)
{
    for (int i = 0; i < FAKECUDA_MAX_MADE_CONTEXTS; i++)
        if (g == &fakecuda_g.green[i])
            return g->ctx;
    return NULL;
}

/* A green context takes one made context's slot for the context cuCtxFromGreenCtx converts it to,
 * which it does not make current (the application sets it current), and retains the device's
 * primary context until it is destroyed, as the header says.  The header calls the converted
 * context "a normal primary context but with the resources of the specified green context": what
 * is allocated or registered while it is current is the primary context's (fakecuda_ctx_owner),
 * and outlives the green context.  Its handle is kept apart from the primary context's all the
 * same: whether a real driver answers the primary context's own handle is not established, and a
 * handle of its own is the case where a destroy has something to take.  Its SMs are not
 * partitioned: work in it runs as in any context of the device.  CU_GREEN_CTX_DEFAULT_STREAM,
 * which the header requires, gives no stream of its own: the made context's default stream
 * serves.  cuGreenCtxStreamCreate, cuStreamGetGreenCtx and the green event calls are not
 * modelled. */
FAKECUDA_EXPORT CUresult cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev,
                                          unsigned int flags)
{
    const CUresult r = check_out_device(phCtx, dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!desc_valid(desc) || desc->device != (int)dev || flags != CU_GREEN_CTX_DEFAULT_STREAM)
        return CUDA_ERROR_INVALID_VALUE;
    CUgreenCtx g = NULL;
    CUcontext made = NULL;
    pthread_mutex_lock(&made_lock);
    for (int i = 0; i < FAKECUDA_MAX_MADE_CONTEXTS && !g; i++)
        if (!fakecuda_g.green[i].ctx)
            g = &fakecuda_g.green[i];
    if (g && (made = made_take_locked(dev, true)))
        g->ctx = made;
    pthread_mutex_unlock(&made_lock);
    if (!made)
        return CUDA_ERROR_OUT_OF_MEMORY;
    atomic_fetch_add(&fakecuda_g.ctx[dev].retains, 1);
    *phCtx = g;
    FAKECUDA_TRACE("cuGreenCtxCreate(dev %d) -> %p (context %p)", (int)dev, (void *)g, (void *)made);
    return CUDA_SUCCESS;
}

/* The same context every time for one green context. */
FAKECUDA_EXPORT CUresult cuCtxFromGreenCtx(CUcontext *pContext, CUgreenCtx hCtx)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pContext)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&made_lock);
    const CUcontext ctx = green_ctx_locked(hCtx);
    pthread_mutex_unlock(&made_lock);
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    *pContext = ctx;
    return CUDA_SUCCESS;
}

/* Invalidates the green handle (until a later cuGreenCtxCreate takes its slot) and its converted
 * context (taken off the calling thread's stack where it is on top, as cuCtxDestroy_v2 does; what a
 * real driver leaves current is not documented), and releases the primary context.  Nothing is
 * freed: what was allocated or registered while the converted context was current is the primary
 * context's, and stays until that is reset.  A host registration made so outlived
 * cuGreenCtxDestroy on an H100 with driver 580.159. */
FAKECUDA_EXPORT CUresult cuGreenCtxDestroy(CUgreenCtx hCtx)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&made_lock);
    const CUcontext ctx = green_ctx_locked(hCtx);
    if (ctx)
        hCtx->ctx = NULL;
    pthread_mutex_unlock(&made_lock);
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    const int dev = ctx->device; /* the slot may be another context's once retired */
    made_retire(ctx);
    atomic_fetch_sub(&fakecuda_g.ctx[dev].retains, 1);
    FAKECUDA_TRACE("cuGreenCtxDestroy(%p) (context %p)", (void *)hCtx, (void *)ctx);
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    if (!device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    *flags = 0;
    *active = atomic_load(&fakecuda_g.ctx[dev].retains) > 0;
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = fakecuda_ctx_current();
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!ctx) {
        if (ctx_depth > 0)
            ctx_depth--;
        return CUDA_SUCCESS;
    }
    if (!fakecuda_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == 0)
        ctx_depth = 1;
    ctx_stack[ctx_depth - 1] = ctx;
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!ctx || !fakecuda_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx_depth == FAKECUDA_CTX_STACK_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_stack[ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (ctx_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    const CUcontext top = ctx_stack[--ctx_depth];
    if (pctx)
        *pctx = top;
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    int dev = 0;
    const CUresult r = fakecuda_current_device(&dev);
    if (r != CUDA_SUCCESS)
        return r;
    *device = dev;
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuCtxSynchronize(void)
{
    int dev = 0;
    CUresult r = fakecuda_current_device(&dev);
    if (r != CUDA_SUCCESS)
        return r;
    r = fakecuda_capture_check_unsafe();
    if (r == CUDA_SUCCESS)
        r = fakecuda_capture_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    return fakecuda_device_sync(dev);
}

/* ---- errors ---- */

typedef struct ErrorText {
    CUresult code;
    const char *name;
    const char *text;
} ErrorText;

#define E(code, text) {code, #code, text}
static const ErrorText error_texts[] = {
    E(CUDA_SUCCESS, "no error"),
    E(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
    E(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
    E(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
    E(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
    E(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
    E(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
    E(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
    E(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
    E(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
    E(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
    E(CUDA_ERROR_NOT_READY, "device not ready"),
    E(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
    E(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"),
    E(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "part or all of the requested memory range is already mapped"),
    E(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "pointer does not correspond to a registered memory region"),
    E(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
    E(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state"),
    E(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing"),
    E(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture"),
    E(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "capture was not ended in the same stream as it began"),
    E(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "operation would make the legacy stream depend on a capturing blocking stream"),
    E(CUDA_ERROR_CAPTURED_EVENT, "operation not permitted on an event last recorded in a capturing stream"),
    E(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "attempt to terminate a thread-local capture sequence from another thread"),
    E(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef E

FAKECUDA_EXPORT CUresult cuGetErrorString(CUresult error, const char **str)
{
    if (!str)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof(error_texts) / sizeof(error_texts[0]); i++) {
        if (error_texts[i].code == error) {
            *str = error_texts[i].text;
            return CUDA_SUCCESS;
        }
    }
    *str = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

FAKECUDA_EXPORT CUresult cuGetErrorName(CUresult error, const char **str)
{
    if (!str)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof(error_texts) / sizeof(error_texts[0]); i++) {
        if (error_texts[i].code == error) {
            *str = error_texts[i].name;
            return CUDA_SUCCESS;
        }
    }
    *str = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

/* ---- failure injection ---- */

static pthread_mutex_t fail_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_uint fail_armed; /* calls still to fail: the fast path reads only this */
static char fail_entry[64];
static unsigned fail_skip;
static CUresult fail_error;
static atomic_uint fail_hits;

CUresult fakecuda_injected_failure(const char *entry)
{
    if (!atomic_load_explicit(&fail_armed, memory_order_acquire))
        return CUDA_SUCCESS;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&fail_mu);
    if (atomic_load(&fail_armed) && !strcmp(entry, fail_entry)) {
        if (fail_skip) {
            fail_skip--;
        } else {
            atomic_fetch_sub(&fail_armed, 1);
            atomic_fetch_add(&fail_hits, 1);
            r = fail_error;
        }
    }
    pthread_mutex_unlock(&fail_mu);
    if (r != CUDA_SUCCESS)
        FAKECUDA_TRACE("%s: injected failure %d", entry, (int)r);
    return r;
}

FAKECUDA_EXPORT void fakecuda_fail_calls(const char *entry, unsigned skip, unsigned count, int error)
{
    fakecuda_env_once();
    pthread_mutex_lock(&fail_mu);
    snprintf(fail_entry, sizeof(fail_entry), "%s", entry ? entry : "");
    fail_skip = skip;
    fail_error = error ? (CUresult)error : CUDA_ERROR_UNKNOWN;
    atomic_store(&fail_armed, entry && count ? count : 0);
    pthread_mutex_unlock(&fail_mu);
}

FAKECUDA_EXPORT unsigned fakecuda_injected_failures(void)
{
    return atomic_load(&fail_hits);
}

/* ---- counters ---- */

FAKECUDA_EXPORT void fakecuda_stats(FakecudaStats *out)
{
    if (!out)
        return;
    FakecudaCounters *const c = &fakecuda_counters;
    out->h2d_bytes = atomic_load(&c->h2d_bytes);
    out->d2h_bytes = atomic_load(&c->d2h_bytes);
    out->d2d_bytes = atomic_load(&c->d2d_bytes);
    out->h2h_bytes = atomic_load(&c->h2h_bytes);
    out->h2d_calls = atomic_load(&c->h2d_calls);
    out->d2h_calls = atomic_load(&c->d2h_calls);
    out->d2d_calls = atomic_load(&c->d2d_calls);
    out->h2h_calls = atomic_load(&c->h2h_calls);
    out->h2d_staged_calls = atomic_load(&c->h2d_staged_calls);
    out->memset_bytes = atomic_load(&c->memset_bytes);
    out->memset_calls = atomic_load(&c->memset_calls);
    out->kernel_launches = atomic_load(&c->kernel_launches);
    out->device_allocs = atomic_load(&c->device_allocs);
    out->host_allocs = atomic_load(&c->host_allocs);
    out->host_registers = atomic_load(&c->host_registers);
}

FAKECUDA_EXPORT void fakecuda_reset_stats(void)
{
    FakecudaCounters *const c = &fakecuda_counters;
    atomic_ullong *const all[] = {
        &c->h2d_bytes, &c->d2h_bytes, &c->d2d_bytes, &c->h2h_bytes,
        &c->h2d_calls, &c->d2h_calls, &c->d2d_calls, &c->h2h_calls,
        &c->h2d_staged_calls, &c->memset_bytes, &c->memset_calls, &c->kernel_launches,
        &c->device_allocs, &c->host_allocs, &c->host_registers,
    };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        atomic_store(all[i], 0);
}

FAKECUDA_EXPORT void fakecuda_set_copy_delay_us(unsigned us)
{
    fakecuda_env_once();
    atomic_store(&fakecuda_g.copy_delay_us, us);
}
