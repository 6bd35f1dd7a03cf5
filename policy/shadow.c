/* SPDX-License-Identifier: MIT
 * ibpshim: the shadow store: a region's compressed blocks in pinned memory, their validity,
 * and the pieces a copy can use right now. */
#include "policy/shadow.h"

#include "codec/format.h"
#include "common/clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Readers kept at once (plans being enqueued and the transfers they left); when all are pending
 * the next plan reaps or waits for the oldest transfer, so recording one never allocates. */
#define IBP_SHADOW_FENCES 128
/* Pages per tracker query: an 8 KiB bitmap on the stack covers 256 MiB of 4 KiB pages. */
#define IBP_SHADOW_QUERY_PAGES 65536u
/* Stretches of at most this many blocks that do not compress, between blocks that do, are kept
 * in the slab as they are (raw blocks the decoder copies): a copy then sends one run instead of
 * two runs and a raw piece, each its own DMA, and the bytes on the wire are the same. */
#define IBP_SHADOW_RAW_BRIDGE 4u
/* Stale blocks re-encoded before the slab is taken to write them into their slots. */
#define IBP_SHADOW_RECOMPRESS_GROUP 16u

/* A reader of the slab: a plan between ibp_shadow_plan and ibp_shadow_plan_end (ev NULL), or the
 * transfer it enqueued (ev its fence); with the plan's ticket. */
typedef struct IbpShadowFence {
    void *ev;
    uint64_t ticket;
} IbpShadowFence;

struct IbpShadow {
    IbpShadowOps ops;
    uintptr_t base;
    size_t size;
    IbpCodecPlan *plan;
    size_t block_size;
    uint32_t nblocks;
    size_t page_size;

    uint8_t *slab;         /* pinned; block i lives at [offsets[i], offsets[i + 1]) */
    size_t slab_len;
    uint64_t *offsets;     /* pinned, nblocks + 1 entries */
    void *blob;            /* pinned copy of the plan blob */
    size_t blob_len;
    uint32_t *comp_len;    /* encoded length of each slot's current content */
    _Atomic uint32_t *state;
    /* Bumped every time a block is found written; an encoding is published only if the
     * generation it started from is still current after the validating tracker query. */
    _Atomic uint64_t *gen;
    /* 1 + the generation whose content was encoded and found not to fit the block's slot, 0 when
     * none: recompression skips such a block until it is written again. */
    _Atomic uint64_t *misfit;
    /* When a block went from VALID to STALE: the plan ticket then (every plan that may still read
     * its old slot has a ticket at most this), written under query_lock; and the last time it was
     * found written, in ibp_monotonic_ns(). */
    _Atomic uint64_t *stale_ticket;
    _Atomic uint64_t *touched_ns;
    /* Tickets handed to plans, in order. */
    _Atomic uint64_t tickets;
    _Atomic int built; /* set once the build has published its blocks */
    /* The forms its blocks took (FORM_*), each set before the first block of the form is
     * published and never cleared: runs of a shadow without flagged selectors need no rewrite of
     * them on the GPU, and runs of one without top-coded blocks no top-byte decode; runs of one
     * without packed blocks (top-coded and raw ones only) decode with the top-byte kernel alone. */
    _Atomic unsigned forms;
    double min_ratio;

    /* Tracker queries consume what they report: query and marking must be one step, or a
     * second planner could see a block as valid between another's query and its marking.  Every
     * marking happens under it. */
    pthread_mutex_t query_lock;
    /* Serialises recompression passes (they share the scratch below).  Plans never wait for it:
     * a slot is rewritten only when no reader registered in fences may read it. */
    pthread_mutex_t recompress_lock;
    uint8_t *scratch; /* IBP_SHADOW_RECOMPRESS_GROUP encoder bounds, kept while blocks are stale */
    pthread_mutex_t fence_lock;
    IbpShadowFence fences[IBP_SHADOW_FENCES];
    size_t nfences;

    _Atomic uint64_t invalidations;
    _Atomic uint64_t writes; /* every time a block is found written, stale or not */
    _Atomic uint64_t recompressions;
    _Atomic uint64_t discarded;
};

static size_t block_len(const IbpShadow *s, uint32_t i)
{
    const size_t start = (size_t)i * s->block_size;
    return s->size - start < s->block_size ? s->size - start : s->block_size;
}

/* Called with query_lock held.  The state change and the ticket read are sequentially
 * consistent, as are a planner's ticket and its reads of the states (ibp_shadow_plan): a plan
 * that saw the block VALID has a ticket at most stale_ticket. */
static void mark_stale(IbpShadow *s, uint32_t i, uint64_t now)
{
    atomic_fetch_add_explicit(&s->gen[i], 1, memory_order_acq_rel);
    atomic_fetch_add_explicit(&s->writes, 1, memory_order_relaxed);
    atomic_store_explicit(&s->touched_ns[i], now, memory_order_relaxed);
    uint32_t expect = IBP_BLOCK_VALID;
    if (atomic_compare_exchange_strong(&s->state[i], &expect, IBP_BLOCK_STALE)) {
        atomic_store_explicit(&s->stale_ticket[i], atomic_load(&s->tickets), memory_order_relaxed);
        atomic_fetch_add_explicit(&s->invalidations, 1, memory_order_relaxed);
    }
}

static void mark_range_stale(IbpShadow *s, uintptr_t start, uintptr_t end, uint64_t now)
{
    if (end <= s->base || start >= s->base + s->size)
        return;
    const size_t lo = start > s->base ? start - s->base : 0;
    const size_t hi = end < s->base + s->size ? end - s->base : s->size;
    for (size_t b = lo / s->block_size; b <= (hi - 1) / s->block_size; b++)
        mark_stale(s, (uint32_t)b, now);
}

/* Asks the tracker which pages of [addr, addr + len) were written, re-arms them and marks
 * every block touching one STALE.  Called with query_lock held.  On a tracker error the
 * whole range is marked. */
static int query_consume(IbpShadow *s, IbpTracker *tracker, uintptr_t addr, size_t len)
{
    if (!len)
        return 0;
    uint64_t bitmap[IBP_SHADOW_QUERY_PAGES / 64];
    const uint64_t now = ibp_monotonic_ns();
    const uintptr_t ps = s->page_size;
    const uintptr_t first = addr & ~(ps - 1);
    const uintptr_t end = addr + len;
    for (uintptr_t p = first; p < end;) {
        const uintptr_t chunk_end =
            end - p > (uintptr_t)IBP_SHADOW_QUERY_PAGES * ps ? p + (uintptr_t)IBP_SHADOW_QUERY_PAGES * ps : end;
        const uintptr_t q = p < addr ? addr : p;
        const int64_t n = ibp_tracker_query(tracker, (const void *)q, chunk_end - q, IBP_TRACK_QUERY_REARM,
                                            bitmap, IBP_SHADOW_QUERY_PAGES);
        if (n < 0) {
            mark_range_stale(s, addr, end, now);
            return (int)n;
        }
        if (n > 0) {
            const size_t npages = (chunk_end - p + ps - 1) / ps;
            for (size_t w = 0; w < (npages + 63) / 64; w++) {
                uint64_t bits = bitmap[w];
                while (bits) {
                    const size_t page = w * 64 + (size_t)__builtin_ctzll(bits);
                    bits &= bits - 1;
                    const uintptr_t pa = p + page * ps;
                    mark_range_stale(s, pa, pa + ps, now);
                }
            }
        }
        p = (chunk_end + ps - 1) & ~(ps - 1);
    }
    return 0;
}

int ibp_shadow_create(const IbpShadowOps *ops, const void *base, size_t size, IbpCodecPlan **plan,
                      IbpShadow **out)
{
    IbpShadow *s = NULL;
    if (!ops || !ops->alloc || !ops->free || !ops->fence_done || !ops->fence_wait || !ops->fence_release ||
        !base || !size || !plan || !*plan || !out)
        goto invalid;
    const size_t bs = ibp_codec_plan_block_size(*plan);
    if (!bs || (size + bs - 1) / bs > UINT32_MAX)
        goto invalid;
    s = calloc(1, sizeof(*s));
    if (!s)
        goto nomem;
    s->ops = *ops;
    s->base = (uintptr_t)base;
    s->size = size;
    s->plan = *plan;
    *plan = NULL;
    s->block_size = bs;
    s->nblocks = (uint32_t)((size + bs - 1) / bs);
    s->page_size = ibp_track_page_size();
    s->comp_len = calloc(s->nblocks, sizeof(*s->comp_len));
    s->state = calloc(s->nblocks, sizeof(*s->state));
    s->gen = calloc(s->nblocks, sizeof(*s->gen));
    s->misfit = calloc(s->nblocks, sizeof(*s->misfit));
    s->stale_ticket = calloc(s->nblocks, sizeof(*s->stale_ticket));
    s->touched_ns = calloc(s->nblocks, sizeof(*s->touched_ns));
    if (!s->comp_len || !s->state || !s->gen || !s->misfit || !s->stale_ticket || !s->touched_ns)
        goto nomem;
    pthread_mutex_init(&s->query_lock, NULL);
    pthread_mutex_init(&s->recompress_lock, NULL);
    pthread_mutex_init(&s->fence_lock, NULL);
    *out = s;
    return 0;
invalid:
    if (plan)
        ibp_codec_plan_destroy(plan);
    return -EINVAL;
nomem:
    if (s) {
        ibp_codec_plan_destroy(&s->plan);
        free(s->comp_len);
        free((void *)s->state);
        free((void *)s->gen);
        free((void *)s->misfit);
        free((void *)s->stale_ticket);
        free((void *)s->touched_ns);
        free(s);
    }
    ibp_codec_plan_destroy(plan);
    return -ENOMEM;
}

static void fences_drain(IbpShadow *s)
{
    pthread_mutex_lock(&s->fence_lock);
    for (size_t i = 0; i < s->nfences; i++) {
        if (!s->fences[i].ev) /* a plan never ended: nothing to wait for */
            continue;
        s->ops.fence_wait(s->ops.ctx, s->fences[i].ev);
        s->ops.fence_release(s->ops.ctx, s->fences[i].ev);
    }
    s->nfences = 0;
    pthread_mutex_unlock(&s->fence_lock);
}

/* Drops completed fences; returns how many readers are still pending (plans being enqueued
 * included).  Called with fence_lock held. */
static size_t fences_reap_locked(IbpShadow *s)
{
    /* Newest first: a fence seen complete can answer for the earlier ones of its stream (the
     * devmem fences of compressed copies do, kernels/order.h) without asking the driver. */
    unsigned char done[IBP_SHADOW_FENCES];
    for (size_t i = s->nfences; i-- > 0;)
        done[i] = s->fences[i].ev && s->ops.fence_done(s->ops.ctx, s->fences[i].ev);
    size_t kept = 0;
    for (size_t i = 0; i < s->nfences; i++) {
        if (done[i])
            s->ops.fence_release(s->ops.ctx, s->fences[i].ev);
        else
            s->fences[kept++] = s->fences[i];
    }
    s->nfences = kept;
    return kept;
}

/* Registers a plan as a reader before it reads any block state and gives it its ticket, in one
 * step under fence_lock, so a recompression pass either sees the reader or runs before the ticket
 * existed (and then every block it rewrites went stale before this plan: the plan sees them STALE
 * and never reads their slots).  The ticket is taken sequentially consistent with the states (see
 * mark_stale).  Returns -EBUSY when every entry is a plan still being enqueued. */
static int reader_enter(IbpShadow *s, uint64_t *ticket)
{
    pthread_mutex_lock(&s->fence_lock);
    while (s->nfences == IBP_SHADOW_FENCES && fences_reap_locked(s) == IBP_SHADOW_FENCES) {
        size_t oldest = IBP_SHADOW_FENCES;
        for (size_t i = 0; i < s->nfences; i++)
            if (s->fences[i].ev &&
                (oldest == IBP_SHADOW_FENCES || s->fences[i].ticket < s->fences[oldest].ticket))
                oldest = i;
        if (oldest == IBP_SHADOW_FENCES) {
            pthread_mutex_unlock(&s->fence_lock);
            return -EBUSY;
        }
        s->ops.fence_wait(s->ops.ctx, s->fences[oldest].ev);
    }
    *ticket = atomic_fetch_add(&s->tickets, 1) + 1;
    s->fences[s->nfences++] = (IbpShadowFence){.ev = NULL, .ticket = *ticket};
    pthread_mutex_unlock(&s->fence_lock);
    return 0;
}

/* The lowest ticket of a reader that may still read the slab, or UINT64_MAX when none. */
static uint64_t oldest_reader(IbpShadow *s)
{
    uint64_t oldest = UINT64_MAX;
    pthread_mutex_lock(&s->fence_lock);
    fences_reap_locked(s);
    for (size_t i = 0; i < s->nfences; i++)
        if (s->fences[i].ticket < oldest)
            oldest = s->fences[i].ticket;
    pthread_mutex_unlock(&s->fence_lock);
    return oldest;
}

void ibp_shadow_destroy(IbpShadow **shadow)
{
    if (!shadow || !*shadow)
        return;
    IbpShadow *s = *shadow;
    *shadow = NULL;
    fences_drain(s);
    if (s->slab)
        s->ops.free(s->ops.ctx, s->slab, s->slab_len);
    if (s->offsets)
        s->ops.free(s->ops.ctx, s->offsets, ((size_t)s->nblocks + 1) * sizeof(uint64_t));
    if (s->blob)
        s->ops.free(s->ops.ctx, s->blob, s->blob_len);
    ibp_codec_plan_destroy(&s->plan);
    pthread_mutex_destroy(&s->query_lock);
    pthread_mutex_destroy(&s->recompress_lock);
    free(s->scratch);
    pthread_mutex_destroy(&s->fence_lock);
    free(s->comp_len);
    free((void *)s->state);
    free((void *)s->gen);
    free((void *)s->misfit);
    free((void *)s->stale_ticket);
    free((void *)s->touched_ns);
    free(s);
}

#define FORM_FLAGGED 1u  /* packed, with flagged selectors */
#define FORM_TOPCODED 2u /* top-byte coded */
#define FORM_PACKED 4u   /* neither raw nor top-byte coded */

/* Notes the form of a block (comp bytes at blk) before it is published. */
static void note_form(IbpShadow *s, const uint8_t *blk, size_t comp)
{
    IbpBlockHeader h;
    if (comp < sizeof(h))
        return;
    memcpy(&h, blk, sizeof(h));
    const unsigned form = (h.flags & IBP_BLOCK_TOPCODED) ? FORM_TOPCODED
                          : (h.flags & IBP_BLOCK_RAW)
                              ? 0u
                              : FORM_PACKED | (ibp_fmt_selflags(h.flags) ? FORM_FLAGGED : 0u);
    if (form & ~atomic_load(&s->forms))
        atomic_fetch_or(&s->forms, form);
}

/* Each block is encoded into its own fixed slot of a pageable staging buffer: slot i starts at
 * i * stride, so workers never coordinate beyond taking the next block number.
 *
 * The buffer is as large as the region, and a fresh one costs a page fault and a cleared page
 * every 4 KiB: about as long as encoding into it.  One buffer of at most IBP_STAGING_KEEP bytes
 * is kept for the next build (the compressor builds region after region, often of one size),
 * marked MADV_FREE so that the kernel may take its pages back under memory pressure. */
#define IBP_STAGING_KEEP ((size_t)512 << 20)

static struct {
    pthread_mutex_t lock;
    void *p;
    size_t len;
    uint64_t kept_ns; /* CLOCK_MONOTONIC when it was kept */
} staging_cache = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0};

static void *staging_get(size_t len, size_t *mapped)
{
    pthread_mutex_lock(&staging_cache.lock);
    void *p = NULL;
    if (staging_cache.p && staging_cache.len >= len) {
        p = staging_cache.p;
        *mapped = staging_cache.len;
        staging_cache.p = NULL;
        staging_cache.len = 0;
    }
    pthread_mutex_unlock(&staging_cache.lock);
    if (p)
        return p;
    p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    *mapped = len;
    return p == MAP_FAILED ? NULL : p;
}

static void staging_put(void *p, size_t len)
{
    if (!p)
        return;
    if (len <= IBP_STAGING_KEEP) {
#ifdef MADV_FREE
        (void)madvise(p, len, MADV_FREE); /* advice only: kept pages are simply reused */
#endif
        pthread_mutex_lock(&staging_cache.lock);
        if (staging_cache.len < len) { /* keep the larger of the two */
            void *old = staging_cache.p;
            const size_t old_len = staging_cache.len;
            staging_cache.p = p;
            staging_cache.len = len;
            staging_cache.kept_ns = ibp_monotonic_ns();
            p = old;
            len = old_len;
        }
        pthread_mutex_unlock(&staging_cache.lock);
    }
    if (p)
        munmap(p, len);
}

size_t ibp_shadow_staging_bytes(void)
{
    pthread_mutex_lock(&staging_cache.lock);
    const size_t len = staging_cache.p ? staging_cache.len : 0;
    pthread_mutex_unlock(&staging_cache.lock);
    return len;
}

void ibp_shadow_release_staging(uint64_t idle_ns)
{
    pthread_mutex_lock(&staging_cache.lock);
    void *p = NULL;
    size_t len = 0;
    if (staging_cache.p && ibp_monotonic_ns() - staging_cache.kept_ns >= idle_ns) {
        p = staging_cache.p;
        len = staging_cache.len;
        staging_cache.p = NULL;
        staging_cache.len = 0;
    }
    pthread_mutex_unlock(&staging_cache.lock);
    if (p)
        munmap(p, len);
}
typedef struct IbpBuildJob {
    IbpShadow *s;
    uint8_t *staging;
    size_t stride;
    size_t bound;
    int copying; /* 0: encode every block into its slot; 1: copy the kept ones into the slab */
    _Atomic uint32_t next;
    _Atomic int err;
} IbpBuildJob;

static void *build_worker(void *arg)
{
    IbpBuildJob *job = arg;
    IbpShadow *s = job->s;
    for (;;) {
        const uint32_t i = atomic_fetch_add(&job->next, 1);
        if (i >= s->nblocks || atomic_load_explicit(&job->err, memory_order_relaxed))
            break;
        if (job->copying) {
            /* comp_len is 0 for a block left out of the slab. */
            if (s->comp_len[i])
                memcpy(s->slab + s->offsets[i], job->staging + (size_t)i * job->stride, s->comp_len[i]);
            continue;
        }
        const size_t len = block_len(s, i);
        size_t comp = 0;
        /* Straight into the block's slot: a slot holds the encoder's bound. */
        const int err = ibp_codec_block_encode(s->plan, (const uint8_t *)s->base + (size_t)i * s->block_size, len,
                                               (size_t)i * s->block_size, job->staging + (size_t)i * job->stride,
                                               job->stride, &comp);
        if (err) {
            atomic_store(&job->err, err);
            break;
        }
        note_form(s, job->staging + (size_t)i * job->stride, comp);
        s->comp_len[i] = (uint32_t)comp;
    }
    return NULL;
}

/* Runs fn(arg) on `threads` threads, the calling one included. */
static void run_threads(void *(*fn)(void *), void *arg, unsigned threads)
{
    pthread_t tids[64];
    unsigned started = 0;
    for (; started + 1 < threads && started < 64; started++)
        if (pthread_create(&tids[started], NULL, fn, arg))
            break;
    fn(arg);
    for (unsigned t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
}

static int block_compresses(const IbpShadow *s, uint32_t i, const void *blk)
{
    IbpBlockHeader h;
    memcpy(&h, blk, sizeof(h));
    return !(h.flags & IBP_BLOCK_RAW) && (double)s->comp_len[i] <= s->min_ratio * (double)block_len(s, i);
}

/* Which blocks get a slot: those that compress, and short stretches of others between them
 * (IBP_SHADOW_RAW_BRIDGE). */
static void choose_slots(const IbpShadow *s, const uint8_t *staging, size_t stride, uint8_t *keep)
{
    for (uint32_t i = 0; i < s->nblocks; i++)
        keep[i] = (uint8_t)block_compresses(s, i, staging + (size_t)i * stride);
    for (uint32_t i = 0; i < s->nblocks;) {
        if (keep[i]) {
            i++;
            continue;
        }
        uint32_t e = i;
        while (e < s->nblocks && !keep[e])
            e++;
        if (i > 0 && e < s->nblocks && e - i <= IBP_SHADOW_RAW_BRIDGE)
            memset(keep + i, 1, e - i);
        i = e;
    }
}

int ibp_shadow_build(IbpShadow *s, IbpTracker *tracker, unsigned threads, double min_ratio, double *ratio)
{
    if (s->built)
        return -EALREADY;
    s->min_ratio = min_ratio;
    uint64_t *snap = malloc((size_t)s->nblocks * sizeof(*snap));
    uint8_t *keep = malloc(s->nblocks);
    IbpBuildJob job = {.s = s, .bound = ibp_codec_block_bound(s->plan, s->block_size)};
    /* The encoder needs its bound of room; what it keeps is at most header + data, rounded to 16. */
    job.stride = (job.bound + 15) & ~(size_t)15;
    size_t staging_len = 0;
    job.staging = staging_get((size_t)s->nblocks * job.stride, &staging_len);
    int err = 0;
    if (!snap || !keep || !job.staging) {
        err = -ENOMEM;
        goto out;
    }
    for (uint32_t i = 0; i < s->nblocks; i++)
        snap[i] = atomic_load_explicit(&s->gen[i], memory_order_acquire);

    if (threads < 1)
        threads = 1;
    if (threads > s->nblocks)
        threads = s->nblocks;
    run_threads(build_worker, &job, threads);
    err = atomic_load(&job.err);
    if (err)
        goto out;

    /* Writes that raced with encoding: one query over the region, after every block. */
    pthread_mutex_lock(&s->query_lock);
    query_consume(s, tracker, s->base, s->size);
    pthread_mutex_unlock(&s->query_lock);

    choose_slots(s, job.staging, job.stride, keep);
    size_t total = 0;
    for (uint32_t i = 0; i < s->nblocks; i++)
        if (keep[i])
            total += s->comp_len[i];
    size_t blob_len = 0;
    const void *blob = ibp_codec_plan_blob(s->plan, &blob_len);
    err = s->ops.alloc(s->ops.ctx, blob_len, &s->blob);
    if (err) {
        s->blob = NULL;
        goto out;
    }
    memcpy(s->blob, blob, blob_len);
    s->blob_len = blob_len;
    const size_t table_len = ((size_t)s->nblocks + 1) * sizeof(uint64_t);
    err = s->ops.alloc(s->ops.ctx, table_len, (void **)&s->offsets);
    if (err) {
        s->offsets = NULL;
        goto out;
    }
    if (total) {
        err = s->ops.alloc(s->ops.ctx, total, (void **)&s->slab);
        if (err) {
            s->slab = NULL;
            goto out;
        }
        s->slab_len = total;
    }
    uint64_t at = 0;
    for (uint32_t i = 0; i < s->nblocks; i++) {
        s->offsets[i] = at;
        if (!keep[i]) {
            /* Incompressible only when the bytes encoded are still the block's content: a block
             * rewritten during the build (a transient buffer, or new data of another scale) says
             * nothing about what it holds now, and is left STALE for the churn and rebuild rules
             * instead of being sent raw for good.  Its slot is empty: it fits again only after a
             * rebuild. */
            s->comp_len[i] = 0;
            const int clean = atomic_load_explicit(&s->gen[i], memory_order_acquire) == snap[i];
            if (!clean)
                atomic_fetch_add_explicit(&s->discarded, 1, memory_order_relaxed);
            atomic_store_explicit(&s->state[i], clean ? IBP_BLOCK_INCOMPRESSIBLE : IBP_BLOCK_STALE,
                                  memory_order_release);
            continue;
        }
        at += s->comp_len[i];
    }
    /* The kept blocks into the slab, on the build's threads (a region's worth of bytes). */
    job.copying = 1;
    atomic_store(&job.next, 0);
    run_threads(build_worker, &job, threads);
    s->offsets[s->nblocks] = at;
    /* Under the lock that marks blocks stale: an invalidation between the generation check and
     * the store would otherwise find the block not yet VALID, leave its state alone, and be
     * lost once the store made it VALID. */
    pthread_mutex_lock(&s->query_lock);
    for (uint32_t i = 0; i < s->nblocks; i++) {
        if (s->offsets[i + 1] == s->offsets[i]) /* settled above: no slot */
            continue;
        const int clean = atomic_load_explicit(&s->gen[i], memory_order_acquire) == snap[i];
        if (!clean)
            atomic_fetch_add_explicit(&s->discarded, 1, memory_order_relaxed);
        atomic_store_explicit(&s->state[i], clean ? IBP_BLOCK_VALID : IBP_BLOCK_STALE, memory_order_release);
    }
    pthread_mutex_unlock(&s->query_lock);
    s->built = 1;
    if (ratio)
        *ratio = (double)s->slab_len / (double)s->size;
out:
    staging_put(job.staging, staging_len);
    free(snap);
    free(keep);
    return err;
}

/* A stale block re-encoded, waiting to be written into its slot. */
typedef struct IbpRecoded {
    uint32_t block;
    uint64_t gen;          /* the generation encoded */
    uint64_t stale_ticket; /* plans up to this one may have read the old slot */
    size_t comp;
    int fits; /* 1: encoded and fits its slot; 0: does not fit; -1: the encoder failed */
} IbpRecoded;

typedef struct IbpRecodeJob {
    IbpShadow *s;
    IbpRecoded *group;
    unsigned n;
    size_t stride;
    size_t bound;
    _Atomic unsigned next;
} IbpRecodeJob;

/* Encodes group entries into their scratch slots until none is left. */
static void *recode_worker(void *arg)
{
    IbpRecodeJob *job = arg;
    IbpShadow *s = job->s;
    for (;;) {
        const unsigned k = atomic_fetch_add(&job->next, 1);
        if (k >= job->n)
            break;
        IbpRecoded *r = &job->group[k];
        const size_t off = (size_t)r->block * s->block_size;
        uint8_t *out = s->scratch + k * job->stride;
        if (ibp_codec_block_encode(s->plan, (const uint8_t *)s->base + off, block_len(s, r->block), off, out,
                                   job->bound, &r->comp)) {
            r->fits = -1;
            continue;
        }
        /* A raw block fits only a bridging slot (choose_slots), made for one. */
        r->fits = r->comp <= s->offsets[r->block + 1] - s->offsets[r->block];
    }
    return NULL;
}

/* Writes the fitting encodings of a group into their slots (those no reader may still read),
 * then publishes the ones no write raced with.  Returns how many were made VALID.  Plans are
 * never held up: one planned after a block went stale sent it raw and never reads its slot,
 * one planned before is a reader with a ticket at most the block's stale_ticket. */
static int recompress_flush(IbpShadow *s, IbpTracker *tracker, const IbpRecoded *group, unsigned n,
                            size_t stride)
{
    const uint64_t oldest = oldest_reader(s);
    int made = 0;
    for (unsigned k = 0; k < n; k++) {
        const IbpRecoded *r = &group[k];
        if (r->fits != 1 || r->stale_ticket >= oldest)
            continue; /* the latter tried again once that transfer is done */
        memcpy(s->slab + s->offsets[r->block], s->scratch + k * stride, r->comp);
        note_form(s, s->scratch + k * stride, r->comp);
        s->comp_len[r->block] = (uint32_t)r->comp;
        pthread_mutex_lock(&s->query_lock);
        query_consume(s, tracker, s->base + (size_t)r->block * s->block_size, block_len(s, r->block));
        uint32_t expect = IBP_BLOCK_STALE;
        const int clean = atomic_load_explicit(&s->gen[r->block], memory_order_acquire) == r->gen &&
                          atomic_compare_exchange_strong(&s->state[r->block], &expect, IBP_BLOCK_VALID);
        pthread_mutex_unlock(&s->query_lock);
        if (clean) {
            atomic_fetch_add_explicit(&s->recompressions, 1, memory_order_relaxed);
            made++;
        } else {
            atomic_fetch_add_explicit(&s->discarded, 1, memory_order_relaxed);
        }
    }
    return made;
}

int ibp_shadow_recompress(IbpShadow *s, IbpTracker *tracker, unsigned max_blocks, uint64_t min_age_ns,
                          unsigned threads)
{
    if (!s->built)
        return -EINVAL;
    const size_t bound = ibp_codec_block_bound(s->plan, s->block_size);
    const size_t stride = (bound + 15) & ~(size_t)15;
    IbpRecoded group[IBP_SHADOW_RECOMPRESS_GROUP];
    unsigned tried = 0, stale_seen = 0;
    int made = 0, err = 0;
    uint32_t i = 0;
    pthread_mutex_lock(&s->recompress_lock);
    while (!err) {
        unsigned n = 0;
        for (; i < s->nblocks && tried < max_blocks && n < IBP_SHADOW_RECOMPRESS_GROUP; i++) {
            if (atomic_load_explicit(&s->state[i], memory_order_acquire) != IBP_BLOCK_STALE)
                continue;
            stale_seen++;
            if (atomic_load_explicit(&s->misfit[i], memory_order_relaxed) ==
                atomic_load_explicit(&s->gen[i], memory_order_acquire) + 1)
                continue; /* this content was tried already and does not fit */
            const uint64_t now = ibp_monotonic_ns();
            if (atomic_load_explicit(&s->touched_ns[i], memory_order_relaxed) + min_age_ns > now)
                continue; /* written too recently: likely to be written again */
            /* Writes since the last query first: a block being written now is left for later. */
            pthread_mutex_lock(&s->query_lock);
            query_consume(s, tracker, s->base + (size_t)i * s->block_size, block_len(s, i));
            const uint64_t g = atomic_load_explicit(&s->gen[i], memory_order_acquire);
            const uint64_t ticket = atomic_load_explicit(&s->stale_ticket[i], memory_order_relaxed);
            const int fresh =
                min_age_ns &&
                atomic_load_explicit(&s->touched_ns[i], memory_order_relaxed) + min_age_ns > now;
            pthread_mutex_unlock(&s->query_lock);
            if (fresh)
                continue;
            tried++;
            group[n++] = (IbpRecoded){.block = i, .gen = g, .stale_ticket = ticket};
        }
        if (!n)
            break;
        if (!s->scratch && !(s->scratch = aligned_alloc(16, IBP_SHADOW_RECOMPRESS_GROUP * stride))) {
            err = -ENOMEM;
            break;
        }
        IbpRecodeJob job = {.s = s, .group = group, .n = n, .stride = stride, .bound = bound};
        run_threads(recode_worker, &job, threads < 1 ? 1 : threads < n ? threads : n);
        for (unsigned k = 0; k < n; k++)
            if (!group[k].fits) /* stays STALE until it is written again or the region is rebuilt */
                atomic_store_explicit(&s->misfit[group[k].block], group[k].gen + 1, memory_order_relaxed);
        made += recompress_flush(s, tracker, group, n, stride);
    }
    if (!stale_seen && i >= s->nblocks) { /* nothing left to do: the scratch goes until needed */
        free(s->scratch);
        s->scratch = NULL;
    }
    pthread_mutex_unlock(&s->recompress_lock);
    return made ? made : err;
}

static IbpPieceWhy raw_why(uint32_t state)
{
    switch (state) {
    case IBP_BLOCK_STALE:
        return IBP_PIECE_WHY_STALE;
    case IBP_BLOCK_INCOMPRESSIBLE:
        return IBP_PIECE_WHY_INCOMPRESSIBLE;
    default:
        return IBP_PIECE_WHY_EMPTY;
    }
}

/* Appends [off, off + len) to the list, merging with the last piece when kinds and reasons
 * match.  Returns -ENOSPC when the list is full. */
static int piece_push(IbpPiece *pieces, size_t max, size_t *n, IbpPieceKind kind, IbpPieceWhy why, size_t off,
                      size_t len, uint32_t block)
{
    if (*n) {
        IbpPiece *last = &pieces[*n - 1];
        if (last->kind == kind && last->why == why && last->off + last->len == off) {
            last->len += len;
            if (kind == IBP_PIECE_COMPRESSED)
                last->nblocks++;
            return 0;
        }
    }
    if (*n == max)
        return -ENOSPC;
    pieces[(*n)++] = (IbpPiece){.kind = kind, .why = why, .off = off, .len = len, .first_block = block,
                                .nblocks = kind == IBP_PIECE_COMPRESSED ? 1u : 0u};
    return 0;
}

int ibp_shadow_plan(IbpShadow *s, IbpTracker *tracker, size_t off, size_t len, size_t min_run,
                    IbpPiece *pieces, size_t max, uint64_t *ticket)
{
    if (!len || off > s->size || len > s->size - off || !max)
        return -EINVAL;
    /* Before the states are read (see reader_enter). */
    const int busy = reader_enter(s, ticket);
    if (busy)
        return busy;
    /* Read once: a shadow that becomes built between a skipped query and the reads of its
     * states would have its VALID blocks trusted without the writes since the build's query. */
    const int built = atomic_load(&s->built);
    if (built) {
        pthread_mutex_lock(&s->query_lock);
        query_consume(s, tracker, s->base + off, len);
        pthread_mutex_unlock(&s->query_lock);
    }
    size_t n = 0;
    const uint32_t b0 = (uint32_t)(off / s->block_size);
    const uint32_t b1 = (uint32_t)((off + len - 1) / s->block_size);
    for (uint32_t b = b0; b <= b1; b++) {
        const size_t start = (size_t)b * s->block_size;
        const size_t lo = start > off ? start : off;
        const size_t hi = start + block_len(s, b) < off + len ? start + block_len(s, b) : off + len;
        const uint32_t st = built ? atomic_load(&s->state[b]) : IBP_BLOCK_EMPTY;
        /* The last slot is kept: when stale blocks cut the range into more pieces than fit, the
         * rest of it goes raw as one piece, and the runs before it still go compressed. */
        const int full =
            st == IBP_BLOCK_VALID
                ? piece_push(pieces, max - 1, &n, IBP_PIECE_COMPRESSED, IBP_PIECE_WHY_NONE, lo, hi - lo, b)
                : piece_push(pieces, max - 1, &n, IBP_PIECE_RAW, raw_why(st), lo, hi - lo, b);
        if (full) {
            pieces[n++] = (IbpPiece){.kind = IBP_PIECE_RAW, .why = IBP_PIECE_WHY_STALE, .off = lo,
                                     .len = off + len - lo, .first_block = b};
            break;
        }
    }
    /* Short compressed runs go raw; merge the raw neighbours they now touch. */
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        IbpPiece p = pieces[i];
        if (p.kind == IBP_PIECE_COMPRESSED && p.len < min_run) {
            p.kind = IBP_PIECE_RAW;
            p.why = IBP_PIECE_WHY_SHORT;
            p.nblocks = 0;
        }
        if (p.kind == IBP_PIECE_COMPRESSED) {
            p.offsets = s->offsets + p.first_block;
            p.run = s->slab + p.offsets[0];
            p.run_len = p.offsets[p.nblocks] - p.offsets[0];
        }
        if (out && p.kind == IBP_PIECE_RAW && pieces[out - 1].kind == IBP_PIECE_RAW &&
            pieces[out - 1].why == p.why)
            pieces[out - 1].len += p.len;
        else
            pieces[out++] = p;
    }
    return (int)out;
}

void ibp_shadow_plan_end(IbpShadow *s, uint64_t ticket, void *fence)
{
    pthread_mutex_lock(&s->fence_lock);
    for (size_t i = 0; i < s->nfences; i++) {
        if (s->fences[i].ev || s->fences[i].ticket != ticket)
            continue;
        if (fence)
            s->fences[i].ev = fence; /* the plan's reader becomes its transfer's */
        else
            s->fences[i] = s->fences[--s->nfences];
        break;
    }
    pthread_mutex_unlock(&s->fence_lock);
}

void ibp_shadow_invalidate(IbpShadow *s, size_t off, size_t len)
{
    if (!len || off >= s->size)
        return;
    if (len > s->size - off)
        len = s->size - off;
    pthread_mutex_lock(&s->query_lock);
    mark_range_stale(s, s->base + off, s->base + off + len, ibp_monotonic_ns());
    pthread_mutex_unlock(&s->query_lock);
}

uint64_t ibp_shadow_writes(const IbpShadow *s)
{
    return atomic_load_explicit(&s->writes, memory_order_relaxed);
}

void ibp_shadow_stats(IbpShadow *s, IbpShadowStats *out)
{
    memset(out, 0, sizeof(*out));
    out->nblocks = s->nblocks;
    out->slab_bytes = s->slab_len + s->blob_len + (s->offsets ? ((size_t)s->nblocks + 1) * sizeof(uint64_t) : 0);
    for (uint32_t i = 0; i < s->nblocks; i++) {
        switch (atomic_load_explicit(&s->state[i], memory_order_relaxed)) {
        case IBP_BLOCK_VALID:
            out->valid++;
            out->valid_orig_bytes += block_len(s, i);
            out->valid_comp_bytes += s->comp_len[i];
            break;
        case IBP_BLOCK_STALE:
            out->stale++;
            if (atomic_load_explicit(&s->misfit[i], memory_order_relaxed) ==
                atomic_load_explicit(&s->gen[i], memory_order_relaxed) + 1)
                out->misfit++;
            break;
        case IBP_BLOCK_INCOMPRESSIBLE:
            out->incompressible++;
            break;
        default:
            out->empty++;
            break;
        }
    }
    out->invalidations = atomic_load_explicit(&s->invalidations, memory_order_relaxed);
    out->recompressions = atomic_load_explicit(&s->recompressions, memory_order_relaxed);
    out->discarded = atomic_load_explicit(&s->discarded, memory_order_relaxed);
}

size_t ibp_shadow_run_bytes(IbpShadow *s, size_t min_run, int stale_counts)
{
    size_t total = 0, run = 0;
    for (uint32_t i = 0; i <= s->nblocks; i++) {
        const uint32_t st = i < s->nblocks ? atomic_load_explicit(&s->state[i], memory_order_relaxed)
                                           : IBP_BLOCK_EMPTY;
        if (st == IBP_BLOCK_VALID || (stale_counts && st == IBP_BLOCK_STALE)) {
            run += block_len(s, i);
            continue;
        }
        if (run >= min_run)
            total += run;
        run = 0;
    }
    return total;
}

const IbpCodecPlan *ibp_shadow_codec_plan(const IbpShadow *s)
{
    return s->plan;
}

static unsigned forms_of(const IbpShadow *s)
{
    return atomic_load((_Atomic unsigned *)&s->forms);
}

int ibp_shadow_any_flagged(const IbpShadow *s)
{
    return (forms_of(s) & FORM_FLAGGED) != 0;
}

int ibp_shadow_any_topcoded(const IbpShadow *s)
{
    return (forms_of(s) & FORM_TOPCODED) != 0;
}

int ibp_shadow_any_packed(const IbpShadow *s)
{
    return (forms_of(s) & FORM_PACKED) != 0;
}

const void *ibp_shadow_plan_blob(const IbpShadow *s, size_t *len)
{
    *len = s->blob_len;
    return s->blob;
}

size_t ibp_shadow_block_size(const IbpShadow *s)
{
    return s->block_size;
}

IbpBlockState ibp_shadow_block_state(const IbpShadow *s, uint32_t block)
{
    if (block >= s->nblocks)
        return IBP_BLOCK_EMPTY;
    return (IbpBlockState)atomic_load_explicit(&s->state[block], memory_order_acquire);
}

int ibp_shadow_decode_pieces(const IbpShadow *s, const IbpPiece *pieces, size_t npieces, void *dst)
{
    uint8_t *tmp = NULL;
    int err = 0;
    for (size_t k = 0; k < npieces && !err; k++) {
        const IbpPiece *p = &pieces[k];
        uint8_t *out = (uint8_t *)dst + (p->off - pieces[0].off);
        if (p->kind == IBP_PIECE_RAW) {
            memcpy(out, (const uint8_t *)s->base + p->off, p->len);
            continue;
        }
        if (!tmp && !(tmp = malloc(s->block_size)))
            return -ENOMEM;
        for (uint32_t b = 0; b < p->nblocks && !err; b++) {
            const uint32_t i = p->first_block + b;
            const size_t start = (size_t)i * s->block_size;
            const size_t blen = block_len(s, i);
            const uint8_t *blk = (const uint8_t *)p->run + (p->offsets[b] - p->offsets[0]);
            err = ibp_codec_block_decode(s->plan, blk, p->offsets[b + 1] - p->offsets[b], blen, tmp, blen);
            const size_t lo = start > p->off ? start : p->off;
            const size_t hi = start + blen < p->off + p->len ? start + blen : p->off + p->len;
            if (!err)
                memcpy((uint8_t *)dst + (lo - pieces[0].off), tmp + (lo - start), hi - lo);
        }
    }
    free(tmp);
    return err;
}
