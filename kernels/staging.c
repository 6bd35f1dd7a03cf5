/* SPDX-License-Identifier: MIT
 * ibpshim: device staging buffers for compressed runs, recycled by events on the streams that
 * used them (never host callbacks). */
#include "kernels/staging.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/clock.h"
#include "common/log.h"
#include "kernels/driver.h"
#include "kernels/order.h"

#define IBP_STAGING_CONTEXTS 64
/* Buffers live at once per context (each holds an event once released). */
#define IBP_STAGING_ENTRIES 256
#define IBP_STAGING_ALIGN ((size_t)256)
/* Longest an exhausted acquire waits for an oldest buffer that is not yet released. */
#define IBP_STAGING_HELD_WAIT_NS 20000000ull
/* A device short of memory gets a ring of half the size, and so on down to this; below it, no
 * ring, and the context's copies go raw until IBP_STAGING_RETRY_NS later. */
#define IBP_STAGING_MIN_BYTES ((size_t)16 << 20)
#define IBP_STAGING_RETRY_NS 10000000000ull

/* The pool of a context is one device allocation of staging_max bytes used as a ring: buffers
 * are cut from it in acquire order and the space comes back in that order, as the events their
 * releases recorded complete.  Compressed runs come in every size, so a pool of separately
 * allocated buffers had to free idle ones to make room for larger runs (cuMemFree waits for the
 * whole device) and ran out of buffers when many short runs were in flight. */
typedef struct IbpStagingSlot {
    IbpStagingBuf buf; /* first member: a buffer is its slot */
    CUevent ev;
    IbpOrderMark mark; /* of ev's record, in stream order */
    int busy;     /* acquired and not released yet */
    int recorded; /* released: ev marks when its stream is done with it */
} IbpStagingSlot;

typedef struct IbpStagingPool {
    CUcontext ctx;
    CUdeviceptr base;
    size_t cap;
    uint64_t failed_ns;                       /* when no ring could be allocated (0: never) */
    IbpStagingSlot slot[IBP_STAGING_ENTRIES]; /* live ones: [head, head + count) modulo */
    unsigned head, count;
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

static IbpStagingSlot *slot_at(IbpStagingPool *pool, unsigned k)
{
    return &pool->slot[(pool->head + k) % IBP_STAGING_ENTRIES];
}

/* Gives back the space of the oldest buffers whose streams are done with them.  The newest done
 * buffer is looked for first, by bisection (on one stream the done ones come before the pending
 * ones): every older buffer released on its stream is then known done without a query of its
 * own, and a ring of a hundred buffers costs a handful of queries rather than a hundred. */
static void retire_done(const IbpDriver *drv, IbpStagingPool *pool)
{
    unsigned lo = 1, hi = pool->count; /* [lo, hi): not looked at yet */
    while (lo < hi) {
        const unsigned mid = lo + (hi - lo) / 2;
        const IbpStagingSlot *m = slot_at(pool, mid);
        if (m->recorded && ibp_order_query(drv, m->ev, m->mark) == CUDA_SUCCESS)
            lo = mid + 1;
        else
            hi = mid;
    }
    while (pool->count) {
        IbpStagingSlot *h = slot_at(pool, 0);
        if (h->busy || (h->recorded && ibp_order_query(drv, h->ev, h->mark) != CUDA_SUCCESS))
            return;
        h->recorded = 0;
        pool->head = (pool->head + 1) % IBP_STAGING_ENTRIES;
        pool->count--;
    }
}

/* Offset of a free span of `want` bytes after the newest buffer (or at the start of the ring
 * when the end is too short), or SIZE_MAX. */
static size_t place(IbpStagingPool *pool, size_t want)
{
    if (!pool->count)
        return want <= pool->cap ? 0 : SIZE_MAX;
    const size_t first = slot_at(pool, 0)->buf.ptr - pool->base;
    const IbpStagingSlot *last = slot_at(pool, pool->count - 1);
    const size_t tail = last->buf.ptr - pool->base + last->buf.size;
    if (tail > first) { /* one span [first, tail) in use */
        if (pool->cap - tail >= want)
            return tail;
        return first >= want ? 0 : SIZE_MAX;
    }
    return first - tail >= want ? tail : SIZE_MAX; /* wrapped: free between tail and first */
}

/* Allocates the context's ring: staging_max bytes, or on a device short of memory the largest
 * half, quarter .. of it down to IBP_STAGING_MIN_BYTES that fits.  A failure is remembered, so
 * copies do not each try again (and go raw) for IBP_STAGING_RETRY_NS.  Called with
 * staging_lock held. */
static int pool_allocate(const IbpDriver *drv, IbpStagingPool *pool)
{
    const uint64_t now = ibp_monotonic_ns();
    if (pool->failed_ns && now - pool->failed_ns < IBP_STAGING_RETRY_NS)
        return -ENOMEM;
    CUresult res = CUDA_ERROR_OUT_OF_MEMORY;
    size_t cap = staging_max;
    const IbpCaptureMode mode = ibp_driver_capture_relax(drv);
    for (;;) {
        res = drv->cuMemAlloc(&pool->base, cap);
        if (res != CUDA_ERROR_OUT_OF_MEMORY || cap / 2 < IBP_STAGING_MIN_BYTES)
            break;
        cap /= 2;
    }
    ibp_driver_capture_restore(drv, mode);
    if (res != CUDA_SUCCESS) {
        pool->base = 0;
        pool->failed_ns = now ? now : 1;
        IBP_WARN("staging: no device memory for a staging ring of %zu MiB or less (CUDA error %d); "
                 "compressed copies on this context go raw, retried in %llu s",
                 cap >> 20, (int)res, (unsigned long long)(IBP_STAGING_RETRY_NS / 1000000000ull));
        return res == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
    }
    if (cap < staging_max)
        IBP_WARN("staging: device short of memory: a staging ring of %zu MiB instead of %zu MiB", cap >> 20,
                 staging_max >> 20);
    pool->cap = cap;
    pool->failed_ns = 0;
    return 0;
}

int ibp_staging_acquire(CUcontext ctx, size_t size, IbpStagingBuf **out)
{
    const IbpDriver *drv = ibp_driver_get();
    if (!drv)
        return -EIO;
    const size_t want = size ? (size + IBP_STAGING_ALIGN - 1) & ~(IBP_STAGING_ALIGN - 1) : IBP_STAGING_ALIGN;
    uint64_t waited = 0, held_ns = 0;
    int err = 0;
    pthread_mutex_lock(&staging_lock);
    IbpStagingPool *pool = pool_for(ctx);
    if (!pool) {
        err = -ENOSPC;
        goto out;
    }
    if (!pool->base && (err = pool_allocate(drv, pool)))
        goto out;
    if (want > pool->cap) {
        err = -EBUSY;
        goto out;
    }
    for (;;) {
        /* Space is given back only when it is needed: a query of an event still pending costs the
         * caller's thread a microsecond or more (the driver flushes its queue), and the oldest
         * buffers' events have usually completed by the time the ring comes round to them. */
        size_t off = pool->count < IBP_STAGING_ENTRIES ? place(pool, want) : SIZE_MAX;
        if (off == SIZE_MAX) {
            retire_done(drv, pool);
            off = pool->count < IBP_STAGING_ENTRIES ? place(pool, want) : SIZE_MAX;
        }
        if (off != SIZE_MAX) {
            IbpStagingSlot *e = slot_at(pool, pool->count);
            if (!e->ev && drv->cuEventCreate(&e->ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
                e->ev = NULL;
                err = -EIO;
                goto out;
            }
            e->buf = (IbpStagingBuf){.ptr = pool->base + off, .size = want, .waited_ns = waited};
            e->busy = 1;
            e->recorded = 0;
            pool->count++;
            *out = &e->buf;
            goto out;
        }
        if (!staging_wait) {
            err = -EBUSY;
            goto out;
        }
        /* Exhausted: wait for the oldest buffer, then look again.  One in flight on its stream
         * is waited for on its event; one still held (being enqueued by another thread, which
         * takes well under a millisecond) for at most IBP_STAGING_HELD_WAIT_NS, then the caller
         * goes raw: a thread holding it itself would wait forever. */
        IbpStagingSlot *h = slot_at(pool, 0);
        const int held = h->busy;
        const CUevent ev = h->ev;
        if (held && held_ns >= IBP_STAGING_HELD_WAIT_NS) {
            err = -EBUSY;
            goto out;
        }
        pthread_mutex_unlock(&staging_lock);
        const uint64_t t0 = ibp_monotonic_ns();
        if (held)
            sched_yield();
        else
            ibp_driver_event_sync(drv, ev);
        const uint64_t dt = ibp_monotonic_ns() - t0;
        waited += dt;
        held_ns += held ? dt : 0;
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
    /* The compressed path never stages for a capturing stream. */
    const int ok = drv && ibp_order_record(drv, s->ev, stream, &s->mark) == CUDA_SUCCESS;
    if (!ok && drv)
        ibp_driver_stream_sync(drv, stream); /* without an event, the space is free only once it ran */
    s->recorded = ok;
    s->busy = 0;
    pthread_mutex_unlock(&staging_lock);
    return ok ? 0 : -EIO;
}
