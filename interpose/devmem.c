/* SPDX-License-Identifier: MIT
 * ibpshim: the shadow store's pinned memory and transfer fences, backed by the CUDA driver. */
#include "interpose/devmem.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "common/log.h"
#include "kernels/driver.h"
#include "kernels/order.h"

typedef struct IbpFence {
    CUevent ev;
    IbpOrderMark mark; /* {0, 0} unless recorded in stream order */
    CUcontext ctx;
    struct IbpFence *next;
} IbpFence;

static pthread_mutex_t fence_lock = PTHREAD_MUTEX_INITIALIZER;
static IbpFence *fence_free;

static pthread_once_t primary_once = PTHREAD_ONCE_INIT;
static CUcontext primary_ctx;

static void retain_primary(void)
{
    const IbpDriver *drv = ibp_driver_get();
    CUdevice dev;
    CUresult res = drv ? drv->cuDeviceGet(&dev, 0) : CUDA_ERROR_NOT_INITIALIZED;
    if (res == CUDA_SUCCESS)
        res = drv->cuDevicePrimaryCtxRetain(&primary_ctx, dev);
    if (res != CUDA_SUCCESS) {
        primary_ctx = NULL;
        IBP_WARN("cannot retain device 0's primary context (%s): pinned shadows need a thread with a "
                 "current context", drv ? ibp_driver_result_name(res) : "no driver");
    }
}

/* Pinned allocations need a current context; portable ones serve every context. */
static int ensure_context(const IbpDriver *drv, int *pushed)
{
    CUcontext cur = NULL;
    *pushed = 0;
    if (drv->cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur)
        return 0;
    pthread_once(&primary_once, retain_primary);
    if (!primary_ctx)
        return -ENODEV;
    const CUresult res = drv->cuCtxPushCurrent(primary_ctx);
    if (res != CUDA_SUCCESS) {
        IBP_DEBUG("cuCtxPushCurrent(primary) failed: %s", ibp_driver_result_name(res));
        return -ENODEV;
    }
    *pushed = 1;
    return 0;
}

static void pop_context(const IbpDriver *drv, int pushed)
{
    CUcontext c;
    if (pushed)
        drv->cuCtxPopCurrent(&c);
}

static int dm_alloc(void *ctx, size_t size, void **host)
{
    (void)ctx;
    const IbpDriver *drv = ibp_driver_get();
    int pushed;
    if (!drv || ensure_context(drv, &pushed))
        return -ENODEV;
    const IbpCaptureMode mode = ibp_driver_capture_relax(drv);
    const CUresult res = drv->cuMemHostAlloc(host, size ? size : 1, CU_MEMHOSTALLOC_PORTABLE |
                                             CU_MEMHOSTALLOC_DEVICEMAP);
    ibp_driver_capture_restore(drv, mode);
    pop_context(drv, pushed);
    if (res != CUDA_SUCCESS) {
        IBP_DEBUG("cuMemHostAlloc(%zu) failed: %s", size, ibp_driver_result_name(res));
        return res == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
    }
    return 0;
}

static void dm_free(void *ctx, void *host, size_t size)
{
    (void)ctx;
    (void)size;
    const IbpDriver *drv = ibp_driver_get();
    int pushed;
    if (!drv || ensure_context(drv, &pushed))
        return;
    const IbpCaptureMode mode = ibp_driver_capture_relax(drv);
    drv->cuMemFreeHost(host);
    ibp_driver_capture_restore(drv, mode);
    pop_context(drv, pushed);
}

static int dm_fence_done(void *ctx, void *fence)
{
    (void)ctx;
    const IbpFence *f = fence;
    const CUresult res = ibp_order_query(ibp_driver_get(), f->ev, f->mark);
    /* Any answer but "not ready" means the event will never signal more than it has, but for a
     * query refused under a capture (the thread could not be relaxed): that says nothing. */
    return res != CUDA_ERROR_NOT_READY && res != CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED &&
           res != CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
}

static void dm_fence_wait(void *ctx, void *fence)
{
    (void)ctx;
    const IbpFence *f = fence;
    ibp_driver_event_sync(ibp_driver_get(), f->ev);
}

static void dm_fence_release(void *ctx, void *fence)
{
    (void)ctx;
    ibp_devmem_fence_release(fence);
}

static const IbpShadowOps devmem_ops = {
    .alloc = dm_alloc,
    .free = dm_free,
    .fence_done = dm_fence_done,
    .fence_wait = dm_fence_wait,
    .fence_release = dm_fence_release,
    .ctx = NULL,
};

const IbpShadowOps *ibp_devmem_ops(void)
{
    return &devmem_ops;
}

static void *fence_record(CUcontext ctx, CUstream stream, int ordered)
{
    const IbpDriver *drv = ibp_driver_get();
    if (!drv)
        return NULL;
    IbpFence *f = NULL;
    pthread_mutex_lock(&fence_lock);
    for (IbpFence **p = &fence_free; *p; p = &(*p)->next) {
        if ((*p)->ctx == ctx) {
            f = *p;
            *p = f->next;
            break;
        }
    }
    pthread_mutex_unlock(&fence_lock);
    if (!f) {
        f = calloc(1, sizeof(*f));
        if (!f)
            return NULL;
        f->ctx = ctx;
        if (drv->cuEventCreate(&f->ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
            free(f);
            return NULL;
        }
    }
    f->mark = (IbpOrderMark){0, 0};
    const CUresult res =
        ordered ? ibp_order_record(drv, f->ev, stream, &f->mark) : drv->cuEventRecord(f->ev, stream);
    if (res != CUDA_SUCCESS) {
        ibp_devmem_fence_release(f);
        return NULL;
    }
    return f;
}

void *ibp_devmem_fence_record(CUcontext ctx, CUstream stream)
{
    return fence_record(ctx, stream, 0);
}

void *ibp_devmem_fence_record_ordered(CUcontext ctx, CUstream stream)
{
    return fence_record(ctx, stream, 1);
}

void ibp_devmem_fence_release(void *fence)
{
    IbpFence *f = fence;
    if (!f)
        return;
    pthread_mutex_lock(&fence_lock);
    f->next = fence_free;
    fence_free = f;
    pthread_mutex_unlock(&fence_lock);
}

CUevent ibp_devmem_fence_event(void *fence)
{
    return ((IbpFence *)fence)->ev;
}

int ibp_devmem_stream_join(CUcontext ctx, CUstream on, CUstream waiter)
{
    void *fence = ibp_devmem_fence_record(ctx, on);
    if (!fence)
        return -EIO;
    /* The wait keeps the record it was given even when the fence is recorded again later. */
    const CUresult res = ibp_driver_get()->cuStreamWaitEvent(waiter, ibp_devmem_fence_event(fence), 0);
    ibp_devmem_fence_release(fence);
    return res == CUDA_SUCCESS ? 0 : -EIO;
}
