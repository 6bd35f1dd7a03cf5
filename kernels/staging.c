/* SPDX-License-Identifier: MIT
 * ibpshim: device staging buffers for compressed runs, recycled by events on the streams that
 * used them (never host callbacks). */
#include "kernels/staging.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "common/clock.h"
#include "common/log.h"
#include "kernels/driver.h"

#define IBP_STAGING_CONTEXTS 64
#define IBP_STAGING_BUFFERS 32
/* Buffers come in a few size classes from 1 MiB so that a few of them serve any mix of runs. */
#define IBP_STAGING_MIN ((size_t)1 << 20)
#define IBP_STAGING_FINE ((size_t)8 << 20) /* classes from here on are eighths of a power of two */

typedef struct IbpStagingSlot {
    IbpStagingBuf buf;
    CUevent ev;
    int busy;
    int recorded;
} IbpStagingSlot;

typedef struct IbpStagingPool {
    CUcontext ctx;
    size_t held;
    IbpStagingSlot slot[IBP_STAGING_BUFFERS];
} IbpStagingPool;

static pthread_mutex_t staging_lock = PTHREAD_MUTEX_INITIALIZER;
static IbpStagingPool pools[IBP_STAGING_CONTEXTS];
static int npools;
static size_t staging_max = (size_t)256 << 20;
static int staging_wait = 1;

void ibp_staging_configure(size_t max_bytes_per_context, int wait_when_exhausted)
{
    pthread_mutex_lock(&staging_lock);
    if (max_bytes_per_context)
        staging_max = max_bytes_per_context;
    staging_wait = wait_when_exhausted;
    pthread_mutex_unlock(&staging_lock);
}

static IbpStagingPool *pool_for(CUcontext ctx)
{
    for (int i = 0; i < npools; i++)
        if (pools[i].ctx == ctx)
            return &pools[i];
    if (npools == IBP_STAGING_CONTEXTS)
        return NULL;
    pools[npools].ctx = ctx;
    return &pools[npools++];
}

static int slot_idle(const IbpDriver *drv, IbpStagingSlot *s)
{
    if (s->busy || !s->buf.ptr)
        return 0;
    if (!s->recorded)
        return 1;
    if (drv->cuEventQuery(s->ev) != CUDA_SUCCESS)
        return 0;
    s->recorded = 0;
    return 1;
}

size_t ibp_staging_size_class(size_t size)
{
    size_t r = IBP_STAGING_MIN;
    while (r < size && r < IBP_STAGING_FINE)
        r <<= 1;
    if (r >= size)
        return r;
    while (r * 2 < size)
        r <<= 1;
    const size_t step = r / 8;
    return (size + step - 1) / step * step;
}


int ibp_staging_acquire(CUcontext ctx, size_t size, IbpStagingBuf **out)
{
    const IbpDriver *drv = ibp_driver_get();
    if (!drv)
        return -EIO;
    const size_t want = ibp_staging_size_class(size);
    uint64_t waited = 0;
    int err = 0;
    pthread_mutex_lock(&staging_lock);
    IbpStagingPool *pool = pool_for(ctx);
    if (!pool) {
        err = -ENOSPC;
        goto out;
    }
    if (want > staging_max) {
        err = -EBUSY;
        goto out;
    }
    for (;;) {
        IbpStagingSlot *fit = NULL, *empty = NULL, *oldest_idle_small = NULL, *pending = NULL;
        for (int i = 0; i < IBP_STAGING_BUFFERS; i++) {
            IbpStagingSlot *s = &pool->slot[i];
            if (!s->buf.ptr) {
                if (!empty)
                    empty = s;
                continue;
            }
            if (slot_idle(drv, s)) {
                if (s->buf.size >= want && (!fit || s->buf.size < fit->buf.size))
                    fit = s;
                else if (s->buf.size < want && !oldest_idle_small)
                    oldest_idle_small = s;
            } else if (!s->busy && !pending) {
                pending = s;
            }
        }
        if (fit) {
            fit->busy = 1;
            fit->buf.waited_ns = waited;
            *out = &fit->buf;
            goto out;
        }
        /* Make room: idle buffers that are too small go first. */
        if (oldest_idle_small && pool->held + want > staging_max) {
            drv->cuMemFree(oldest_idle_small->buf.ptr);
            pool->held -= oldest_idle_small->buf.size;
            oldest_idle_small->buf.ptr = 0;
            continue;
        }
        if (empty && pool->held + want <= staging_max) {
            if (!empty->ev && drv->cuEventCreate(&empty->ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
                err = -EIO;
                goto out;
            }
            const CUresult res = drv->cuMemAlloc(&empty->buf.ptr, want);
            if (res != CUDA_SUCCESS) {
                empty->buf.ptr = 0;
                err = res == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
                goto out;
            }
            empty->buf.size = want;
            empty->buf.waited_ns = waited;
            empty->busy = 1;
            empty->recorded = 0;
            pool->held += want;
            *out = &empty->buf;
            goto out;
        }
        if (!pending || !staging_wait) {
            err = -EBUSY;
            goto out;
        }
        /* Exhausted: wait for the oldest buffer still in flight, then look again. */
        const CUevent ev = pending->ev;
        pthread_mutex_unlock(&staging_lock);
        const uint64_t t0 = ibp_monotonic_ns();
        drv->cuEventSynchronize(ev);
        waited += ibp_monotonic_ns() - t0;
        pthread_mutex_lock(&staging_lock);
    }
out:
    pthread_mutex_unlock(&staging_lock);
    return err;
}

int ibp_staging_release(IbpStagingBuf *buf, CUstream stream)
{
    const IbpDriver *drv = ibp_driver_get();
    IbpStagingSlot *s = (IbpStagingSlot *)buf; /* buf is the slot's first member */
    pthread_mutex_lock(&staging_lock);
    const int ok = drv && drv->cuEventRecord(s->ev, stream) == CUDA_SUCCESS;
    s->recorded = ok;
    s->busy = !ok; /* without an event we cannot know when the stream is done with it */
    pthread_mutex_unlock(&staging_lock);
    return ok ? 0 : -EIO;
}
