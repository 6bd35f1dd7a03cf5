/* SPDX-License-Identifier: MIT
 * ibpshim: the policy engine: which regions are registered, when they are compressed, when
 * they stop being worth it, and the pieces of each host-to-device copy. */
#include "policy/engine.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "ibpshim/codec.h"
#include "policy/mapping.h"

/* Device writes into a region still landing, kept until a plan has seen them land: room for
 * IBP_POLICY_D2H_MIN at first, doubled while more are in flight, up to IBP_POLICY_D2H_MAX (past
 * that a new one waits for the oldest to land). */
#define IBP_POLICY_D2H_MIN 16
#define IBP_POLICY_D2H_MAX 65536
/* A stale block is recompressed once no write to it was seen for this long. */
#define IBP_POLICY_STABLE_NS 50000000ull
/* How often the compressor looks at compressed regions when nothing wakes it. */
#define IBP_POLICY_TICK_NS 20000000ull
#define IBP_POLICY_STAGING_IDLE_NS 10000000000ull /* 10 s without a build: unmap the kept staging buffer */
/* Stale blocks re-encoded per compressor thread in one maintenance pass of a region. */
#define IBP_POLICY_RECOMPRESS_BATCH 64u
/* Most hot regions planned side by side in one pass of the compressor. */
#define IBP_POLICY_PREPLAN_MAX 64

typedef struct IbpPendingD2h {
    size_t off;
    size_t len;
    void *fence;
} IbpPendingD2h;

struct IbpPolicyRegion {
    /* Held by the compressor for a whole compression (it reads the region's memory) and by
     * on_free() until the region is gone, so memory is never freed under the compressor. */
    pthread_mutex_t busy;
    /* Readers: planners and the recompressor while they use the shadow.  Writer: whoever
     * installs or drops it. */
    pthread_rwlock_t lock;
    IbpShadow *shadow;
    _Atomic uint32_t copies;      /* copies in a row that found the same fingerprint, while RAW */
    _Atomic uint64_t fingerprint; /* of the region's bytes at the last copy while RAW (0: none) */
    _Atomic uint32_t fp_skip;     /* cold copies still to pass without a fingerprint */
    _Atomic uint32_t fp_backoff;  /* the last skip: doubles at every new fingerprint, up to 64 */
    _Atomic uint64_t last_use_ns;
    _Atomic int why;              /* IbpCopyWhy for UNTRACKED regions and evicted ones */
    _Atomic size_t slab_bytes;
    void *tag;
    /* Copies in a row that found the region written since the copy before and sent nothing
     * compressed (a transient buffer), and the shadow's write count the last copy saw. */
    _Atomic uint32_t rewritten_copies;
    _Atomic uint64_t copy_writes;
    _Atomic size_t largest_copy; /* bytes of the longest copy planned while RAW */
    /* Copies still to pass unplanned since one whose compressed pieces all measured slower, and
     * whether the copy after them is to be timed. */
    _Atomic uint32_t slower_skip;
    _Atomic int slower_probe;

    /* Compressor thread only. */
    uint64_t last_compress_ns;
    uint64_t seen_invalidations;
    uint64_t seen_recompressions;
    unsigned churn;
    int churn_counted;

    pthread_mutex_t d2h_lock;
    IbpPendingD2h *d2h; /* nd2h of cap_d2h entries, oldest first */
    size_t nd2h, cap_d2h;
};

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int started;
    int thread_started;
    int stop;
    pthread_t thread;
    IbpPolicyParams p;
    _Atomic uint64_t shadow_bytes;
    _Atomic uint64_t shadow_bytes_peak;
    _Atomic uint64_t regions_compressed;
    _Atomic uint64_t regions_incompressible;
    _Atomic uint64_t regions_churned;
    _Atomic uint64_t regions_evicted;
    _Atomic uint64_t bytes_evicted;
    _Atomic uint64_t build_ns;
    _Atomic uint64_t plans_made;
    _Atomic uint64_t plans_reused;
} eng = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

/* The last plans made for the most recently planning allocation sites, as blobs (a shadow owns its
 * plan), with the ratio each gave on its own region's sample.  A site keeps several: one
 * allocator often hands out blocks of different kinds (weights, then a batch of images). */
#define IBP_POLICY_SITE_PLANS 16
#define IBP_POLICY_PLANS_PER_SITE 4

typedef struct IbpSitePlan {
    uint64_t site;
    void *blob;
    size_t blob_len;
    double ratio;
    uint64_t used; /* last put or reuse, on site_plans.clock; 0 = empty */
} IbpSitePlan;

static struct {
    pthread_mutex_t lock;
    IbpSitePlan e[IBP_POLICY_SITE_PLANS];
    uint64_t clock;
} site_plans = {.lock = PTHREAD_MUTEX_INITIALIZER};

static const char *const why_names[IBP_COPY_WHY_COUNT] = {
    [IBP_COPY_COMPRESSED] = "compressed",
    [IBP_COPY_BELOW_THRESHOLD] = "below_threshold",
    [IBP_COPY_NOT_TRACKED] = "not_pinned",
    [IBP_COPY_COLD] = "cold",
    [IBP_COPY_STALE] = "stale",
    [IBP_COPY_INCOMPRESSIBLE] = "incompressible",
    [IBP_COPY_CHURN] = "churn",
    [IBP_COPY_BUDGET] = "budget",
    [IBP_COPY_UNTRACKABLE] = "untrackable",
    [IBP_COPY_ERROR] = "error",
    [IBP_COPY_SLOWER] = "slower",
};

const char *ibp_copy_why_name(IbpCopyWhy why)
{
    return (unsigned)why < IBP_COPY_WHY_COUNT ? why_names[why] : "?";
}

int ibp_policy_start(const IbpPolicyParams *params)
{
    if (!params || !params->ops.alloc || !params->ops.fence_done)
        return -EINVAL;
    const int err = ibp_track_init();
    if (err)
        return err;
    pthread_mutex_lock(&eng.lock);
    const int already = eng.started;
    if (!already) {
        eng.p = *params;
        if (!eng.p.compressor_threads)
            eng.p.compressor_threads = 1;
        eng.started = 1;
    }
    pthread_mutex_unlock(&eng.lock);
    return already ? -EALREADY : 0;
}

/* ---- Per-region state ---- */

static void d2h_release_all(IbpPolicyRegion *pr)
{
    for (size_t i = 0; i < pr->nd2h; i++) {
        eng.p.ops.fence_wait(eng.p.ops.ctx, pr->d2h[i].fence);
        eng.p.ops.fence_release(eng.p.ops.ctx, pr->d2h[i].fence);
    }
    pr->nd2h = 0;
}

static void policy_region_fini(void *data)
{
    IbpPolicyRegion *pr = data;
    if (pr->shadow) {
        atomic_fetch_sub(&eng.shadow_bytes, atomic_load(&pr->slab_bytes));
        ibp_shadow_destroy(&pr->shadow);
    }
    d2h_release_all(pr);
    pthread_rwlock_destroy(&pr->lock);
    pthread_mutex_destroy(&pr->d2h_lock);
    pthread_mutex_destroy(&pr->busy);
    free(pr->d2h);
    free(pr);
}

int ibp_policy_on_alloc(void *ptr, size_t size, uint32_t region_flags, uint64_t site, void *tag)
{
    if (!eng.started || !ptr || size < eng.p.min_bytes)
        return 0;
    if ((region_flags & IBP_REGION_WRITE_COMBINED) && !eng.p.track_write_combined)
        return 0;
    IbpPolicyRegion *pr = calloc(1, sizeof(*pr));
    if (!pr)
        return -ENOMEM;
    pthread_rwlock_init(&pr->lock, NULL);
    pthread_mutex_init(&pr->d2h_lock, NULL);
    pthread_mutex_init(&pr->busy, NULL);
    pr->tag = tag;
    IbpRegion *region = NULL;
    const int64_t id = ibp_registry_add(ptr, size, region_flags, site, &region);
    if (id < 0) {
        pthread_rwlock_destroy(&pr->lock);
        pthread_mutex_destroy(&pr->d2h_lock);
        pthread_mutex_destroy(&pr->busy);
        free(pr);
        IBP_DEBUG("region %p+%zu not registered (%d)", ptr, size, (int)id);
        return (int)id;
    }
    ibp_region_attach_data(region, pr, policy_region_fini);
    /* Application memory registered with cudaHostRegister may be a mapping that another process
     * or a second mapping writes without our page tables noticing: such regions stay raw. */
    char why[256] = "";
    if ((region_flags & IBP_REGION_REGISTERED) && !eng.p.track_shared &&
        ibp_mapping_private_anon((uintptr_t)ptr, size, why, sizeof(why)) != 1) {
        atomic_store(&pr->why, IBP_COPY_UNTRACKABLE);
        ibp_region_set_state(region, IBP_REGION_RAW, IBP_REGION_UNTRACKED);
        IBP_INFO("region %lld (%p + %zu) is a %s: never compressed (set [policy] track_shared = true to allow)",
                 (long long)id, ptr, size, why[0] ? why : "mapping the tracker cannot cover");
    } else if ((region_flags & IBP_REGION_MAPPED) && !eng.p.track_mapped) {
        /* Asked for by name for kernels to use through its device pointer: a kernel's writes
         * land without a fault, where no tracker sees them. */
        atomic_store(&pr->why, IBP_COPY_UNTRACKABLE);
        ibp_region_set_state(region, IBP_REGION_RAW, IBP_REGION_UNTRACKED);
        IBP_INFO(
            "region %lld (%p + %zu) was pinned mapped (zero-copy): kernels may write it unseen, so it is "
            "never compressed (set [policy] track_mapped = true to allow)",
            (long long)id, ptr, size);
    }
    ibp_region_put(&region);
    IBP_DEBUG("region %lld: %p + %zu registered", (long long)id, ptr, size);
    return 1;
}

/* Takes the shadow away from planners, waits for transfers that read it and frees it; an
 * eviction is reported as such.  Returns the pinned bytes released. */
static size_t drop_shadow_as(IbpPolicyRegion *pr, int evicted)
{
    pthread_rwlock_wrlock(&pr->lock);
    IbpShadow *sh = pr->shadow;
    pr->shadow = NULL;
    pthread_rwlock_unlock(&pr->lock);
    size_t bytes = 0;
    if (sh) {
        bytes = atomic_exchange(&pr->slab_bytes, 0);
        atomic_fetch_sub(&eng.shadow_bytes, bytes);
        if (evicted) {
            atomic_fetch_add(&eng.regions_evicted, 1);
            atomic_fetch_add(&eng.bytes_evicted, bytes);
            if (eng.p.on_evicted)
                eng.p.on_evicted(pr->tag, bytes);
        } else if (eng.p.on_shadow_bytes) {
            eng.p.on_shadow_bytes(pr->tag, -(int64_t)bytes);
        }
        ibp_shadow_destroy(&sh);
    }
    return bytes;
}

static void drop_shadow(IbpPolicyRegion *pr)
{
    drop_shadow_as(pr, 0);
}

void *ibp_policy_on_free(void *ptr)
{
    /* A forked child: a lock may belong to a thread that was not copied (the compressor in a
     * build), and CUDA refuses the free there anyway.  The region is left as it is. */
    if (!eng.started || !ptr || ibp_track_forked_child())
        return NULL;
    IbpRegion *region = NULL;
    void *tag = NULL;
    if (ibp_registry_lookup(ptr, 0, &region))
        return NULL;
    if (ibp_region_base(region) == (uintptr_t)ptr) {
        IbpPolicyRegion *pr = ibp_region_data(region);
        if (pr) {
            tag = pr->tag;
            pthread_mutex_lock(&pr->busy);
            drop_shadow(pr);
            pthread_mutex_lock(&pr->d2h_lock);
            d2h_release_all(pr);
            pthread_mutex_unlock(&pr->d2h_lock);
        }
        ibp_registry_remove(ptr);
        if (pr)
            pthread_mutex_unlock(&pr->busy);
    }
    ibp_region_put(&region);
    return tag;
}

/* With d2h_lock held: one pass over the device writes a region keeps.  Each is marked stale in sh
 * (those still landing only when mark_pending), and, when may_forget, those that had landed
 * before their marking are forgotten (checked first: a write landing in between would otherwise
 * be forgotten with only its old bytes marked). */
static void d2h_sweep(IbpPolicyRegion *pr, IbpShadow *sh, int may_forget, int mark_pending)
{
    size_t kept = 0;
    for (size_t i = 0; i < pr->nd2h; i++) {
        const IbpPendingD2h e = pr->d2h[i];
        const int landed = may_forget && eng.p.ops.fence_done(eng.p.ops.ctx, e.fence);
        if (sh && (landed || mark_pending))
            ibp_shadow_invalidate(sh, e.off, e.len);
        if (landed)
            eng.p.ops.fence_release(eng.p.ops.ctx, e.fence);
        else
            pr->d2h[kept++] = e;
    }
    pr->nd2h = kept;
}

/* Marks the ranges of device writes still landing (or landed since the last look) stale,
 * and forgets those that have landed.  Called with pr->lock held for reading. */
static void d2h_apply(IbpPolicyRegion *pr, IbpShadow *sh, int may_forget)
{
    pthread_mutex_lock(&pr->d2h_lock);
    d2h_sweep(pr, sh, may_forget, 1);
    pthread_mutex_unlock(&pr->d2h_lock);
}

/* With d2h_lock held: room for one more entry.  Landed writes are forgotten first, then the list
 * grows; only past IBP_POLICY_D2H_MAX entries still landing (or without memory) does the oldest
 * have to land first. */
static void d2h_make_room(IbpPolicyRegion *pr, IbpShadow *sh)
{
    if (pr->nd2h < pr->cap_d2h)
        return;
    /* Writes that have landed are marked once more (after landing, so that a build or
     * recompression that read the bytes before cannot publish them) and forgotten. */
    d2h_sweep(pr, sh, 1, 0);
    if (pr->nd2h < pr->cap_d2h)
        return;
    const size_t cap = pr->cap_d2h ? 2 * pr->cap_d2h : IBP_POLICY_D2H_MIN;
    IbpPendingD2h *grown = cap <= IBP_POLICY_D2H_MAX ? realloc(pr->d2h, cap * sizeof(*grown)) : NULL;
    if (grown) {
        pr->d2h = grown;
        pr->cap_d2h = cap;
        return;
    }
    /* Full: the oldest write has to land before it can be forgotten. */
    const IbpPendingD2h oldest = pr->d2h[0];
    eng.p.ops.fence_wait(eng.p.ops.ctx, oldest.fence);
    if (sh)
        ibp_shadow_invalidate(sh, oldest.off, oldest.len);
    eng.p.ops.fence_release(eng.p.ops.ctx, oldest.fence);
    memmove(pr->d2h, pr->d2h + 1, sizeof(pr->d2h[0]) * (pr->nd2h - 1));
    pr->nd2h--;
}

static void wake_compressor(void);

/* A fingerprint of a region's bytes from 64 cache lines spread evenly over it (never 0): a batch
 * buffer refilled before every copy shows a new one at each copy, weights the same one. */
static uint64_t region_fingerprint(const uint8_t *base, size_t size)
{
    enum { kLines = 64, kLine = 64 };
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)size;
    const size_t stride = size > kLine ? (size - kLine) / (kLines - 1) : 0;
    for (size_t i = 0; i < kLines; i++) {
        const uint8_t *p = base + (size > kLine ? stride * i : 0);
        for (size_t k = 0; k + 8 <= kLine && k + 8 <= size; k += 8) {
            uint64_t w;
            memcpy(&w, p + k, 8);
            h = (h ^ w) * 0x100000001b3ull;
            h ^= h >> 29;
        }
    }
    return h | 1u;
}

int ibp_policy_plan_h2d(const void *src, size_t n, IbpCopyPlan *plan)
{
    plan->region = NULL;
    plan->pr = NULL;
    plan->shadow = NULL;
    plan->tag = NULL;
    plan->npieces = 0;
    plan->probe = 0;
    plan->slower = 0;
    if (!eng.started || n < eng.p.min_bytes || !n) {
        plan->why = IBP_COPY_BELOW_THRESHOLD;
        return 0;
    }
    IbpRegion *region = NULL;
    if (ibp_registry_lookup(src, n, &region)) {
        plan->why = IBP_COPY_NOT_TRACKED;
        return 0;
    }
    IbpPolicyRegion *pr = ibp_region_data(region);
    plan->tag = pr ? pr->tag : NULL;
    if (!pr || ibp_track_forked_child()) {
        plan->why = IBP_COPY_UNTRACKABLE;
        goto raw;
    }
    atomic_store_explicit(&pr->last_use_ns, ibp_monotonic_ns(), memory_order_relaxed);
    switch (ibp_region_state(region)) {
    case IBP_REGION_RAW: {
        /* The longest copy so far, which selector_flags = auto weighs (fit_selector_flags). */
        size_t longest = atomic_load_explicit(&pr->largest_copy, memory_order_relaxed);
        while (n > longest && !atomic_compare_exchange_weak(&pr->largest_copy, &longest, n))
            ;
        /* Only copies that find the same bytes count towards hot: a buffer given new content before
         * every copy would be compressed for nothing, and write tracking would cost it a fault on
         * every page it rewrites.  A fingerprint costs a few microseconds (64 cache misses), so
         * after each new one the next 1, 2, 4 .. 64 copies pass without. */
        const uint32_t skip = atomic_load(&pr->fp_skip);
        const int evicted = atomic_load(&pr->why) == IBP_COPY_BUDGET;
        plan->why = evicted ? IBP_COPY_BUDGET : IBP_COPY_COLD;
        if (skip) {
            atomic_store(&pr->fp_skip, skip - 1);
            goto raw;
        }
        const uint64_t fp =
            region_fingerprint((const uint8_t *)ibp_region_base(region), ibp_region_size(region));
        const uint64_t before = atomic_exchange(&pr->fingerprint, fp);
        uint32_t copies = 1;
        if (before == fp && atomic_exchange(&pr->fp_backoff, 0)) {
            /* The same bytes as the last fingerprint, but copies passed in between unseen: a buffer
             * cycling through a few batches matches so now and then.  Count from here, every copy
             * fingerprinted, so only copies in a row that find the same bytes make it hot. */
            atomic_store(&pr->copies, 1);
        } else if (before == fp || !before) {
            copies = atomic_fetch_add(&pr->copies, 1) + 1;
        } else {
            atomic_store(&pr->copies, 1);
            const uint32_t backoff = atomic_load(&pr->fp_backoff);
            const uint32_t next = backoff ? (backoff < 32u ? 2u * backoff : 64u) : 1u;
            atomic_store(&pr->fp_backoff, next);
            atomic_store(&pr->fp_skip, next);
        }
        if (copies >= eng.p.min_copies && ibp_region_set_state(region, IBP_REGION_RAW, IBP_REGION_HOT))
            wake_compressor();
        goto raw;
    }
    case IBP_REGION_COMPRESSED: {
        /* The last planned copy went raw as slower than a plain copy: the next few go raw without
         * a plan, whose write-tracking query costs this thread about a microsecond per 2-3 MiB
         * (their writes are reported to the next query), and the one after them is timed. */
        uint32_t skip = atomic_load(&pr->slower_skip);
        while (skip && !atomic_compare_exchange_weak(&pr->slower_skip, &skip, skip - 1))
            ;
        if (skip) {
            plan->why = IBP_COPY_SLOWER;
            goto raw;
        }
        plan->probe = atomic_exchange(&pr->slower_probe, 0);
        break;
    }
    case IBP_REGION_UNTRACKED:
        plan->why = (IbpCopyWhy)atomic_load(&pr->why);
        goto raw;
    default:
        plan->why = IBP_COPY_COLD;
        goto raw;
    }
    pthread_rwlock_rdlock(&pr->lock);
    IbpShadow *sh = pr->shadow;
    /* Looked at again under the lock: a rebuild since the look above may have installed a
     * shadow that is still being built. */
    if (!sh || ibp_region_state(region) != IBP_REGION_COMPRESSED) {
        pthread_rwlock_unlock(&pr->lock);
        plan->why = IBP_COPY_COLD;
        goto raw;
    }
    d2h_apply(pr, sh, 1);
    const uintptr_t base = ibp_region_base(region);
    const uint64_t t0 = eng.p.on_tracking_ns ? ibp_monotonic_ns() : 0;
    const int np = ibp_shadow_plan(sh, ibp_region_tracker(region), (uintptr_t)src - base, n, eng.p.min_run,
                                   plan->pieces, IBP_POLICY_MAX_PIECES, &plan->ticket);
    if (eng.p.on_tracking_ns)
        eng.p.on_tracking_ns(pr->tag, ibp_monotonic_ns() - t0);
    int any = 0;
    for (int i = 0; i < np; i++) /* none when the plan failed (np < 0) */
        any |= plan->pieces[i].kind == IBP_PIECE_COMPRESSED;
    const uint64_t writes = ibp_shadow_writes(sh);
    const int rewritten = atomic_exchange(&pr->copy_writes, writes) < writes;
    if (any)
        atomic_store(&pr->rewritten_copies, 0);
    else if (rewritten)
        atomic_fetch_add(&pr->rewritten_copies, 1);
    if (np < 0) {
        pthread_rwlock_unlock(&pr->lock);
        plan->why = IBP_COPY_ERROR;
        goto raw;
    }
    if (!any) {
        switch (plan->pieces[0].why) {
        case IBP_PIECE_WHY_INCOMPRESSIBLE:
            plan->why = IBP_COPY_INCOMPRESSIBLE;
            break;
        case IBP_PIECE_WHY_SHORT:
            plan->why = IBP_COPY_BELOW_THRESHOLD;
            break;
        default:
            plan->why = IBP_COPY_STALE;
            break;
        }
        ibp_shadow_plan_end(sh, plan->ticket, NULL);
        pthread_rwlock_unlock(&pr->lock);
        wake_compressor();
        goto raw;
    }
    plan->why = IBP_COPY_COMPRESSED;
    plan->region = region;
    plan->pr = pr;
    plan->shadow = sh;
    plan->region_base = base;
    plan->npieces = np;
    return 1;
raw:
    ibp_region_put(&region);
    return 0;
}

void ibp_policy_plan_end(IbpCopyPlan *plan, void *fence)
{
    if (!plan->shadow)
        return;
    ibp_shadow_plan_end(plan->shadow, plan->ticket, fence);
    if (plan->slower) {
        atomic_store(&plan->pr->slower_probe, 1);
        atomic_store(&plan->pr->slower_skip, IBP_POLICY_SLOWER_SKIP);
    }
    pthread_rwlock_unlock(&plan->pr->lock);
    ibp_region_put(&plan->region);
    plan->shadow = NULL;
    plan->pr = NULL;
}

static void d2h_record(IbpRegion *region, size_t off, size_t len, void *fence)
{
    IbpPolicyRegion *pr = ibp_region_data(region);
    if (!pr) {
        if (fence)
            eng.p.ops.fence_release(eng.p.ops.ctx, fence);
        return;
    }
    /* A region no longer tracked never is again: nothing of it will be sent compressed. */
    const IbpRegionState state = ibp_region_state(region);
    if (state == IBP_REGION_UNTRACKED || state == IBP_REGION_DEAD) {
        if (fence)
            eng.p.ops.fence_release(eng.p.ops.ctx, fence);
        return;
    }
    pthread_rwlock_rdlock(&pr->lock);
    if (pr->shadow)
        ibp_shadow_invalidate(pr->shadow, off, len);
    if (fence) {
        pthread_mutex_lock(&pr->d2h_lock);
        d2h_make_room(pr, pr->shadow);
        pr->d2h[pr->nd2h++] = (IbpPendingD2h){.off = off, .len = len, .fence = fence};
        pthread_mutex_unlock(&pr->d2h_lock);
    }
    pthread_rwlock_unlock(&pr->lock);
}

typedef struct IbpOverlap {
    uintptr_t lo, hi;
    uint64_t ids[64];
    int n;
    uintptr_t last_end; /* the end of the last region collected */
} IbpOverlap;

/* The first 64 regions overlapping [lo, hi), in address order. */
static int collect_overlap(const IbpRegionInfo *info, void *arg)
{
    IbpOverlap *o = arg;
    if (info->base < o->hi && o->lo < info->base + info->size) {
        o->ids[o->n++] = info->id;
        o->last_end = info->base + info->size;
    }
    return o->n == 64;
}

void ibp_policy_on_d2h(void *dst, size_t n, void *fence)
{
    if (!eng.started || !n) {
        if (eng.started && fence)
            eng.p.ops.fence_release(eng.p.ops.ctx, fence);
        return;
    }
    IbpRegion *region = NULL;
    if (!ibp_registry_lookup(dst, n, &region)) {
        d2h_record(region, (uintptr_t)dst - ibp_region_base(region), n, fence);
        ibp_region_put(&region);
        return;
    }
    /* A copy that straddles regions (or lands partly outside any): each overlapped region
     * waits for the copy to land, since one fence cannot be shared by several owners.  Regions
     * are taken 64 at a time, in address order, until none is left in the range. */
    IbpOverlap o = {.lo = (uintptr_t)dst, .hi = (uintptr_t)dst + n};
    int waited = !fence;
    for (;;) {
        o.n = 0;
        ibp_registry_foreach(collect_overlap, &o);
        if (o.n && !waited) {
            eng.p.ops.fence_wait(eng.p.ops.ctx, fence);
            waited = 1;
        }
        for (int i = 0; i < o.n; i++) {
            if (ibp_registry_get(o.ids[i], &region))
                continue;
            const uintptr_t base = ibp_region_base(region), end = base + ibp_region_size(region);
            const uintptr_t lo = o.lo > base ? o.lo : base;
            const uintptr_t hi = o.hi < end ? o.hi : end;
            d2h_record(region, lo - base, hi - lo, NULL);
            ibp_region_put(&region);
        }
        if (o.n < 64 || o.last_end >= o.hi)
            break;
        o.lo = o.last_end; /* the next 64 start after the last of these */
    }
    if (fence)
        eng.p.ops.fence_release(eng.p.ops.ctx, fence);
}

int ibp_policy_region_bounds(const void *p, size_t n, uintptr_t *base, size_t *size)
{
    IbpRegion *region = NULL;
    if (!eng.started || !n || ibp_registry_lookup(p, n, &region))
        return 0;
    *base = ibp_region_base(region);
    *size = ibp_region_size(region);
    ibp_region_put(&region);
    return 1;
}

int ibp_policy_touches_region(const void *p, size_t n)
{
    if (!eng.started || !n)
        return 0;
    return ibp_registry_overlaps(p, n);
}

/* ---- The compressor ---- */

static void give_up(IbpRegion *region, IbpPolicyRegion *pr, IbpRegionState from, IbpCopyWhy why)
{
    drop_shadow(pr);
    atomic_store(&pr->why, why);
    if (ibp_region_set_state(region, from, IBP_REGION_UNTRACKED))
        ibp_track_region_stop(region);
}

typedef struct IbpLruEntry {
    uint64_t id;
    uint64_t last_use;
} IbpLruEntry;

typedef struct IbpLruList {
    IbpLruEntry e[256];
    int n;
    uint64_t skip_id;
} IbpLruList;

static int collect_compressed(const IbpRegionInfo *info, void *arg)
{
    IbpLruList *l = arg;
    if (info->state == IBP_REGION_COMPRESSED && info->id != l->skip_id && l->n < 256)
        l->e[l->n++].id = info->id;
    return 0;
}

static int lru_cmp(const void *a, const void *b)
{
    const uint64_t x = ((const IbpLruEntry *)a)->last_use, y = ((const IbpLruEntry *)b)->last_use;
    return (x > y) - (x < y);
}

/* Evicts least recently used shadows (never `keep`) until the budget holds. */
static void enforce_budget(uint64_t keep)
{
    if (!eng.p.max_shadow_bytes || atomic_load(&eng.shadow_bytes) <= eng.p.max_shadow_bytes)
        return;
    IbpLruList *l = calloc(1, sizeof(*l));
    if (!l)
        return;
    l->skip_id = keep;
    ibp_registry_foreach(collect_compressed, l);
    for (int i = 0; i < l->n; i++) {
        IbpRegion *r = NULL;
        if (!ibp_registry_get(l->e[i].id, &r)) {
            const IbpPolicyRegion *pr = ibp_region_data(r);
            l->e[i].last_use = pr ? atomic_load(&pr->last_use_ns) : 0;
            ibp_region_put(&r);
        }
    }
    qsort(l->e, (size_t)l->n, sizeof(l->e[0]), lru_cmp);
    for (int i = 0; i < l->n && atomic_load(&eng.shadow_bytes) > eng.p.max_shadow_bytes; i++) {
        IbpRegion *r = NULL;
        if (ibp_registry_get(l->e[i].id, &r))
            continue;
        IbpPolicyRegion *pr = ibp_region_data(r);
        if (pr && ibp_region_set_state(r, IBP_REGION_COMPRESSED, IBP_REGION_RAW)) {
            const size_t bytes = drop_shadow_as(pr, 1);
            if (ibp_region_tracker(r))
                ibp_tracker_disarm(ibp_region_tracker(r));
            atomic_store(&pr->why, IBP_COPY_BUDGET);
            atomic_store(&pr->copies, 0);
            atomic_store(&pr->fingerprint, 0);
            atomic_store(&pr->fp_skip, 0);
            atomic_store(&pr->fp_backoff, 0);
            IBP_INFO("shadow of region %llu evicted (%zu bytes) to stay within max_shadow_bytes",
                     (unsigned long long)l->e[i].id, bytes);
        }
        ibp_region_put(&r);
    }
    free(l);
}

static int compress_region_locked(IbpRegion *region, IbpPolicyRegion *pr, IbpCodecPlan **preplan);

/* Plan options for one of `regions` regions planned side by side: the compressor threads are
 * shared among them (the planner judges candidates on threads; the plan does not depend on it). */
static IbpCodecPlanOptions plan_options(unsigned regions)
{
    const unsigned share = eng.p.compressor_threads / (regions ? regions : 1u);
    return (IbpCodecPlanOptions){.block_size = eng.p.block_bytes,
                                 .threads = share ? share : 1u,
                                 .flags = (eng.p.selector_flags ? IBP_CODEC_PLAN_SELECTOR_FLAGS : 0u) |
                                          (eng.p.top_coded ? IBP_CODEC_PLAN_TOP_CODED : 0u)};
}

/* Copies of the plans kept for `site` (at most IBP_POLICY_PLANS_PER_SITE): their blobs in
 * out[k].blob (malloc'd, the caller frees them), their own ratios, and `used` as the entry's
 * identity for site_plan_used(). */
static int site_plans_of(uint64_t site, IbpSitePlan *out)
{
    int n = 0;
    pthread_mutex_lock(&site_plans.lock);
    for (int i = 0; i < IBP_POLICY_SITE_PLANS && n < IBP_POLICY_PLANS_PER_SITE; i++) {
        const IbpSitePlan *e = &site_plans.e[i];
        if (e->site != site || !e->blob)
            continue;
        void *copy = malloc(e->blob_len);
        if (!copy)
            continue;
        memcpy(copy, e->blob, e->blob_len);
        out[n] = *e;
        out[n++].blob = copy;
    }
    pthread_mutex_unlock(&site_plans.lock);
    return n;
}

/* Marks the kept plan that `kept` was copied from as just used, if it is still kept. */
static void site_plan_used(const IbpSitePlan *kept)
{
    pthread_mutex_lock(&site_plans.lock);
    for (int i = 0; i < IBP_POLICY_SITE_PLANS; i++)
        if (site_plans.e[i].blob && site_plans.e[i].site == kept->site &&
            site_plans.e[i].used == kept->used) {
            site_plans.e[i].used = ++site_plans.clock;
            break;
        }
    pthread_mutex_unlock(&site_plans.lock);
}

/* Keeps `plan` for the site: in the site's least recently used entry when it has its share,
 * else in the least recently used entry of all.  A plan that left its own region above
 * min_ratio is worth nothing to the next. */
static void site_plan_put(uint64_t site, const IbpCodecPlan *plan)
{
    size_t len = 0;
    const void *blob = ibp_codec_plan_blob(plan, &len);
    IbpCodecPlanInfo info;
    ibp_codec_plan_info(plan, &info);
    if (info.sample_ratio > eng.p.min_ratio)
        return;
    void *copy = malloc(len);
    if (!copy)
        return;
    memcpy(copy, blob, len);
    pthread_mutex_lock(&site_plans.lock);
    int any = 0, own = -1, kept = 0;
    for (int i = 0; i < IBP_POLICY_SITE_PLANS; i++) {
        const IbpSitePlan *e = &site_plans.e[i];
        if (e->used < site_plans.e[any].used)
            any = i;
        if (e->blob && e->site == site) {
            kept++;
            if (own < 0 || e->used < site_plans.e[own].used)
                own = i;
        }
    }
    IbpSitePlan *e = &site_plans.e[kept >= IBP_POLICY_PLANS_PER_SITE ? own : any];
    void *old = e->blob;
    *e = (IbpSitePlan){
        .site = site, .blob = copy, .blob_len = len, .ratio = info.sample_ratio, .used = ++site_plans.clock};
    pthread_mutex_unlock(&site_plans.lock);
    free(old);
}

static void site_plans_clear(void)
{
    pthread_mutex_lock(&site_plans.lock);
    for (int i = 0; i < IBP_POLICY_SITE_PLANS; i++) {
        free(site_plans.e[i].blob);
        site_plans.e[i] = (IbpSitePlan){0};
    }
    pthread_mutex_unlock(&site_plans.lock);
}

/* Under selector_flags = auto: a plan that compresses its region below the ratio where the
 * decode, not the copy, takes the time (*judged, its ratio on the region's sample; NULL for the
 * sample ratio the plan was made with), or a region whose copies were all shorter than those
 * where the rewrite pass pays for itself, keeps its blocks in fixed-width selectors. */
static void fit_selector_flags(const IbpPolicyRegion *pr, IbpCodecPlan **plan, const double *judged)
{
    IbpCodecPlanInfo info;
    ibp_codec_plan_info(*plan, &info);
    IbpCodecPlan *fixed = NULL;
    const double ratio = judged ? *judged : info.sample_ratio;
    const size_t longest = pr ? atomic_load(&pr->largest_copy) : SIZE_MAX;
    if (!info.selector_flags ||
        (ratio >= eng.p.selector_flags_min_ratio && longest >= eng.p.selector_flags_min_copy) ||
        ibp_codec_plan_with_selector_flags(*plan, 0, &fixed))
        return;
    ibp_codec_plan_destroy(plan);
    *plan = fixed;
}

/* Plans a region (one of `regions` planned side by side).  Regions of one allocation site often
 * hold data of a few kinds (a framework's pinned blocks of weights, of batches): the plans the
 * site kept are judged on the region's sample first, one encode pass over at most 1 MiB each, and
 * the best of those that compress it at most plan_reuse worse than they compressed their own
 * region is reused; else the search runs and its plan is kept for the site.  Either plan then
 * takes the selector form the configuration asks for (fit_selector_flags). */
static int plan_region(IbpRegion *region, unsigned regions, IbpCodecPlan **out)
{
    const uint64_t t0 = ibp_monotonic_ns();
    const void *base = (const void *)ibp_region_base(region);
    const size_t size = ibp_region_size(region);
    const uint64_t site = ibp_region_site(region);
    IbpPolicyRegion *pr = ibp_region_data(region);
    if (site && eng.p.plan_reuse >= 0) {
        IbpSitePlan kept[IBP_POLICY_PLANS_PER_SITE];
        const int n = site_plans_of(site, kept);
        IbpCodecPlan *best = NULL;
        const unsigned flags = plan_options(regions).flags;
        double best_here = 0;
        int best_k = -1;
        for (int k = 0; k < n; k++) {
            IbpCodecPlan *p = NULL;
            double here = 0;
            /* Made as the options would make it (a blob does not say whether its blocks may take
             * the flagged selector form); not where it would leave the region above min_ratio: a
             * search may still find a plan that compresses it. */
            if (!ibp_codec_plan_from_blob_flags(kept[k].blob, kept[k].blob_len, flags, &p) &&
                !ibp_codec_plan_judge(p, base, size, &here) && here <= kept[k].ratio + eng.p.plan_reuse &&
                here <= eng.p.min_ratio && (!best || here < best_here)) {
                ibp_codec_plan_destroy(&best);
                best = p;
                best_here = here;
                best_k = k;
                p = NULL;
            }
            ibp_codec_plan_destroy(&p);
        }
        if (best)
            site_plan_used(&kept[best_k]);
        for (int k = 0; k < n; k++)
            free(kept[k].blob);
        if (best) {
            IBP_DEBUG("region %llu reuses a plan of its site: %.4f on its sample",
                      (unsigned long long)ibp_region_id(region), best_here);
            atomic_fetch_add(&eng.plans_reused, 1);
            if (pr && eng.p.on_planned)
                eng.p.on_planned(pr->tag, ibp_monotonic_ns() - t0, 1);
            fit_selector_flags(pr, &best, &best_here);
            *out = best;
            return 0;
        }
    }
    const IbpCodecPlanOptions opts = plan_options(regions);
    const int err = ibp_codec_plan_create(base, size, &opts, out);
    if (err)
        return err;
    atomic_fetch_add(&eng.plans_made, 1);
    if (pr && eng.p.on_planned)
        eng.p.on_planned(pr->tag, ibp_monotonic_ns() - t0, 0);
    if (site && eng.p.plan_reuse >= 0)
        site_plan_put(site, *out);
    fit_selector_flags(pr, out, NULL);
    return 0;
}

/* Compresses a hot region; *preplan (may be NULL), a plan made beforehand, is used and taken. */
static int compress_region(IbpRegion *region, IbpCodecPlan **preplan)
{
    IbpPolicyRegion *pr = ibp_region_data(region);
    int done = 0;
    if (pr) {
        pthread_mutex_lock(&pr->busy);
        done = ibp_region_set_state(region, IBP_REGION_HOT, IBP_REGION_COMPRESSING) &&
               compress_region_locked(region, pr, preplan);
        pthread_mutex_unlock(&pr->busy);
    }
    if (preplan)
        ibp_codec_plan_destroy(preplan);
    return done;
}

static int compress_region_locked(IbpRegion *region, IbpPolicyRegion *pr, IbpCodecPlan **preplan)
{
    IbpTracker *tracker = ibp_region_tracker(region);
    if (!tracker) {
        IbpTrackBackend got;
        const int err = ibp_track_region(region, eng.p.tracking, &got);
        if (err) {
            IBP_INFO("region %llu cannot be write-tracked (%d): it stays raw",
                     (unsigned long long)ibp_region_id(region), err);
            give_up(region, pr, IBP_REGION_COMPRESSING, IBP_COPY_UNTRACKABLE);
            return 0;
        }
        tracker = ibp_region_tracker(region);
    }
    if (ibp_tracker_arm(tracker)) {
        give_up(region, pr, IBP_REGION_COMPRESSING, IBP_COPY_UNTRACKABLE);
        return 0;
    }
    const uint64_t t0 = ibp_monotonic_ns();
    const void *base = (const void *)ibp_region_base(region);
    const size_t size = ibp_region_size(region);
    IbpCodecPlan *plan = NULL;
    IbpShadow *sh = NULL;
    double ratio = 1.0;
    int err = 0;
    if (preplan && *preplan) {
        /* Planned before tracking was armed: any bytes encode losslessly with any plan, so a write
         * since then costs ratio at worst, never correctness. */
        plan = *preplan;
        *preplan = NULL;
    } else {
        err = plan_region(region, 1, &plan);
    }
    if (!err)
        err = ibp_shadow_create(&eng.p.ops, base, size, &plan, &sh);
    if (err) {
        IBP_WARN("planning region %llu failed (%d): it stays raw", (unsigned long long)ibp_region_id(region), err);
        give_up(region, pr, IBP_REGION_COMPRESSING, IBP_COPY_ERROR);
        return 0;
    }
    /* Installed before the build so that device writes during it reach its blocks. */
    pthread_rwlock_wrlock(&pr->lock);
    pr->shadow = sh;
    atomic_store(&pr->copy_writes, 0);
    pthread_rwlock_unlock(&pr->lock);
    pthread_rwlock_rdlock(&pr->lock);
    if (pr->shadow != sh) {
        /* Freed by the application meanwhile; on_free() destroyed the shadow. */
        pthread_rwlock_unlock(&pr->lock);
        return 0;
    }
    d2h_apply(pr, sh, 0);
    const uint64_t t_build = ibp_monotonic_ns();
    err = ibp_shadow_build(sh, tracker, eng.p.compressor_threads, eng.p.min_ratio, &ratio);
    const uint64_t t_built = ibp_monotonic_ns();
    atomic_fetch_add(&eng.build_ns, t_built - t0);
    if (!err && eng.p.on_built)
        eng.p.on_built(pr->tag, t_built - t_build);
    if (err || ratio > eng.p.min_ratio) {
        pthread_rwlock_unlock(&pr->lock);
        if (err)
            IBP_WARN("compressing region %llu failed (%d)", (unsigned long long)ibp_region_id(region), err);
        else
            IBP_INFO("region %llu compresses to %.3f, above min_ratio %.3f: it stays raw",
                     (unsigned long long)ibp_region_id(region), ratio, eng.p.min_ratio);
        atomic_fetch_add(&eng.regions_incompressible, 1);
        give_up(region, pr, IBP_REGION_COMPRESSING, err ? IBP_COPY_ERROR : IBP_COPY_INCOMPRESSIBLE);
        return 0;
    }
    IbpShadowStats st;
    ibp_shadow_stats(sh, &st);
    const int flagged = ibp_shadow_any_flagged(sh);
    /* Rewritten while it was being encoded (a transient buffer): counts towards churn, since such a
     * region never stays compressed long enough to be copied and its rebuilds only cost CPU. */
    const int rewritten = st.nblocks && st.valid * 2 < st.nblocks;
    if (rewritten && eng.p.churn_limit && pr->churn + 1 >= eng.p.churn_limit) {
        pthread_rwlock_unlock(&pr->lock);
        IBP_INFO("region %llu rewritten while being compressed %u times: no longer tracked",
                 (unsigned long long)ibp_region_id(region), pr->churn + 1);
        atomic_fetch_add(&eng.regions_churned, 1);
        ibp_registry_site_note_churn(ibp_region_site(region));
        give_up(region, pr, IBP_REGION_COMPRESSING, IBP_COPY_CHURN);
        return 0;
    }
    atomic_store(&pr->slab_bytes, st.slab_bytes);
    if (eng.p.on_shadow_bytes)
        eng.p.on_shadow_bytes(pr->tag, (int64_t)st.slab_bytes);
    const uint64_t held = atomic_fetch_add(&eng.shadow_bytes, st.slab_bytes) + st.slab_bytes;
    uint64_t peak = atomic_load(&eng.shadow_bytes_peak);
    while (held > peak && !atomic_compare_exchange_weak(&eng.shadow_bytes_peak, &peak, held))
        ;
    pr->last_compress_ns = ibp_monotonic_ns();
    pr->seen_invalidations = st.invalidations;
    pr->seen_recompressions = st.recompressions;
    pr->churn_counted = 0;
    if (rewritten) {
        pr->churn++;
        pr->churn_counted = 1;
    }
    atomic_store(&pr->why, IBP_COPY_COMPRESSED);
    ibp_region_set_state(region, IBP_REGION_COMPRESSING, IBP_REGION_COMPRESSED);
    pthread_rwlock_unlock(&pr->lock);
    atomic_fetch_add(&eng.regions_compressed, 1);
    IBP_DEBUG("region %llu compressed: ratio %.4f, %u/%u blocks valid, %s selectors, %.1f ms",
              (unsigned long long)ibp_region_id(region), ratio, st.valid, st.nblocks,
              flagged ? "flagged" : "fixed-width", (double)(ibp_monotonic_ns() - t0) / 1e6);
    enforce_budget(ibp_region_id(region));
    if (eng.p.max_shadow_bytes && atomic_load(&eng.shadow_bytes) > eng.p.max_shadow_bytes &&
        ibp_region_set_state(region, IBP_REGION_COMPRESSED, IBP_REGION_RAW)) {
        drop_shadow_as(pr, 1);
        ibp_tracker_disarm(tracker);
        atomic_store(&pr->why, IBP_COPY_BUDGET);
        return 0;
    }
    return 1;
}

/* 1 when every stale block of the shadow (st: its statistics, just taken) has been re-encoded
 * since its last write and found too big for its slot (only a new plan makes it valid again), and
 * those blocks cost copies of the region at least half of what they would send compressed were the
 * blocks valid: counted by the runs a copy would use, since a few misfits spread out leave only
 * runs shorter than min_run. */
static int misfits_cost_half(IbpShadow *sh, const IbpShadowStats *st)
{
    if (!st->stale || st->misfit < st->stale)
        return 0;
    return 2 * ibp_shadow_run_bytes(sh, eng.p.min_run, 0) <= ibp_shadow_run_bytes(sh, eng.p.min_run, 1);
}

/* Churn accounting and recompression of a compressed region's stale blocks. */
static void maintain_region(IbpRegion *region)
{
    IbpPolicyRegion *pr = ibp_region_data(region);
    if (!pr || ibp_region_state(region) != IBP_REGION_COMPRESSED)
        return;
    pthread_rwlock_rdlock(&pr->lock);
    IbpShadow *sh = pr->shadow;
    if (!sh) {
        pthread_rwlock_unlock(&pr->lock);
        return;
    }
    IbpShadowStats st;
    ibp_shadow_stats(sh, &st);
    const uint64_t now = ibp_monotonic_ns();
    int churned = 0, rebuild = 0;
    if (eng.p.on_blocks && (st.invalidations > pr->seen_invalidations || st.recompressions > pr->seen_recompressions))
        eng.p.on_blocks(pr->tag, st.invalidations - pr->seen_invalidations,
                        st.recompressions - pr->seen_recompressions);
    pr->seen_recompressions = st.recompressions;
    if (st.invalidations > pr->seen_invalidations) {
        /* Churn is most of the region rewritten soon after compression (a recycled buffer); a few
         * rows of a table updated between epochs only make their blocks go raw until recompressed. */
        if (!pr->churn_counted && st.stale * 2 >= st.nblocks && now - pr->last_compress_ns <= eng.p.churn_window_ns) {
            pr->churn++;
            pr->churn_counted = 1;
        }
        pr->seen_invalidations = st.invalidations;
        churned = eng.p.churn_limit && pr->churn >= eng.p.churn_limit;
    }
    /* Block by block, while the rest of the region is still written and sent: the rows of a
     * table updated between epochs come back compressed an epoch or two later. */
    if (st.stale && !churned) {
        const int made = ibp_shadow_recompress(sh, ibp_region_tracker(region),
                                               IBP_POLICY_RECOMPRESS_BATCH * eng.p.compressor_threads,
                                               IBP_POLICY_STABLE_NS, eng.p.compressor_threads);
        if (made > 0) {
            pr->last_compress_ns = ibp_monotonic_ns();
            pr->churn_counted = 0;
        } else if (made == 0) {
            /* New content no longer fits the old plan's slots: plan and build afresh, at once when
             * half the blocks are stale and what this pass tried (or every stale block) did not
             * fit, else once the misfits are known to cost half. */
            IbpShadowStats after;
            ibp_shadow_stats(sh, &after);
            const int half = after.stale * 2 >= after.nblocks;
            rebuild = (half && (after.misfit > st.misfit || after.misfit == after.stale)) || misfits_cost_half(sh, &after);
        }
    }
    /* Written between every copy and never stable long enough to recompress: such a region costs
     * a tracker query at every copy and a write fault at every page it rewrites, and saves
     * nothing.  Only while most of it is stale: a table with a few rows written between copies
     * still sends the rest compressed. */
    const uint32_t rewritten = atomic_load(&pr->rewritten_copies);
    const int rewritten_often = eng.p.churn_limit && rewritten >= eng.p.churn_limit && st.stale * 2 >= st.nblocks;
    pthread_rwlock_unlock(&pr->lock);
    if (rewritten_often && !churned) {
        IBP_INFO("region %llu rewritten before each of %u copies in a row: no longer tracked",
                 (unsigned long long)ibp_region_id(region), rewritten);
        churned = 1;
    } else if (churned) {
        IBP_INFO("region %llu rewritten soon after compression %u times: no longer tracked",
                 (unsigned long long)ibp_region_id(region), pr->churn);
    }
    if (rebuild && !churned && ibp_region_set_state(region, IBP_REGION_COMPRESSED, IBP_REGION_HOT)) {
        IBP_DEBUG("region %llu: %u of %u blocks stale and no longer fit their slots: rebuilding",
                  (unsigned long long)ibp_region_id(region), st.stale, st.nblocks);
        drop_shadow(pr);
        return;
    }
    if (churned) {
        atomic_fetch_add(&eng.regions_churned, 1);
        ibp_registry_site_note_churn(ibp_region_site(region));
        give_up(region, pr, IBP_REGION_COMPRESSED, IBP_COPY_CHURN);
    }
}

typedef struct IbpIdList {
    uint64_t ids[1024];
    int n;
} IbpIdList;

static int collect_active(const IbpRegionInfo *info, void *arg)
{
    IbpIdList *l = arg;
    if ((info->state == IBP_REGION_HOT || info->state == IBP_REGION_COMPRESSED) && l->n < 1024)
        l->ids[l->n++] = info->id;
    return 0;
}

/* Hot regions planned side by side before their builds, sharing the compressor threads (the
 * builds spread over all of them). */
typedef struct IbpPrePlan {
    IbpRegion *r[IBP_POLICY_PREPLAN_MAX];
    IbpCodecPlan *plan[IBP_POLICY_PREPLAN_MAX];
    int n;
    _Atomic int next;
} IbpPrePlan;

static void *preplan_worker(void *arg)
{
    IbpPrePlan *pp = arg;
    for (int i; (i = atomic_fetch_add(&pp->next, 1)) < pp->n;) {
        IbpPolicyRegion *pr = ibp_region_data(pp->r[i]);
        if (!pr)
            continue;
        /* busy keeps a free from returning while the region's bytes are read; a region freed
         * before is no longer hot. */
        pthread_mutex_lock(&pr->busy);
        if (ibp_region_state(pp->r[i]) == IBP_REGION_HOT) {
            if (plan_region(pp->r[i], (unsigned)pp->n, &pp->plan[i]))
                pp->plan[i] = NULL;
        }
        pthread_mutex_unlock(&pr->busy);
    }
    return NULL;
}

static void preplan(IbpPrePlan *pp)
{
    unsigned threads = eng.p.compressor_threads < (unsigned)pp->n ? eng.p.compressor_threads : (unsigned)pp->n;
    if (threads < 2)
        return;
    pthread_t tids[IBP_POLICY_PREPLAN_MAX];
    unsigned started = 0;
    for (; started + 1 < threads; started++)
        if (pthread_create(&tids[started], NULL, preplan_worker, pp))
            break;
    preplan_worker(pp);
    for (unsigned t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
}

int ibp_policy_run_pending(void)
{
    if (!eng.started)
        return 0;
    IbpIdList *l = calloc(1, sizeof(*l));
    IbpPrePlan *pp = calloc(1, sizeof(*pp));
    if (!l || !pp) {
        free(l);
        free(pp);
        return -ENOMEM;
    }
    ibp_registry_foreach(collect_active, l);
    int compressed = 0;
    for (int i = 0; i < l->n; i++) {
        IbpRegion *r = NULL;
        if (ibp_registry_get(l->ids[i], &r))
            continue;
        if (ibp_region_state(r) == IBP_REGION_HOT) {
            /* As many hot regions a pass as there are compressor threads to plan them: the first
             * builds start soon, the others wait for the next pass (a tick away at most). */
            if (pp->n < IBP_POLICY_PREPLAN_MAX && (unsigned)pp->n < eng.p.compressor_threads) {
                pp->r[pp->n++] = r;
                continue;
            }
        } else {
            maintain_region(r);
        }
        ibp_region_put(&r);
    }
    if (pp->n > 1)
        preplan(pp);
    for (int i = 0; i < pp->n; i++) {
        compressed += compress_region(pp->r[i], &pp->plan[i]);
        ibp_region_put(&pp->r[i]);
    }
    free(pp);
    free(l);
    return compressed;
}

static void *compressor_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&eng.lock);
    while (!eng.stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += (long)IBP_POLICY_TICK_NS;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&eng.cond, &eng.lock, &until);
        if (eng.stop)
            break;
        pthread_mutex_unlock(&eng.lock);
        ibp_policy_run_pending();
        /* A staging buffer no build has wanted for a while goes back to the system. */
        ibp_shadow_release_staging(IBP_POLICY_STAGING_IDLE_NS);
        pthread_mutex_lock(&eng.lock);
    }
    pthread_mutex_unlock(&eng.lock);
    return NULL;
}

static void wake_compressor(void)
{
    pthread_mutex_lock(&eng.lock);
    if (!eng.thread_started && !eng.stop && !eng.p.manual && !ibp_track_forked_child()) {
        if (pthread_create(&eng.thread, NULL, compressor_main, NULL) == 0)
            eng.thread_started = 1;
        else
            IBP_WARN("cannot start the compressor thread: regions stay raw");
    }
    pthread_cond_signal(&eng.cond);
    pthread_mutex_unlock(&eng.lock);
}

void ibp_policy_stop(void)
{
    pthread_mutex_lock(&eng.lock);
    eng.stop = 1;
    const int joinable = eng.thread_started;
    eng.thread_started = 0;
    pthread_cond_broadcast(&eng.cond);
    pthread_mutex_unlock(&eng.lock);
    if (joinable)
        pthread_join(eng.thread, NULL);
    ibp_shadow_release_staging(0);
    site_plans_clear();
}

void ibp_policy_stats(IbpPolicyStats *out)
{
    out->regions_compressed = atomic_load(&eng.regions_compressed);
    out->regions_incompressible = atomic_load(&eng.regions_incompressible);
    out->regions_churned = atomic_load(&eng.regions_churned);
    out->plans_made = atomic_load(&eng.plans_made);
    out->plans_reused = atomic_load(&eng.plans_reused);
    out->regions_evicted = atomic_load(&eng.regions_evicted);
    out->bytes_evicted = atomic_load(&eng.bytes_evicted);
    out->shadow_bytes = atomic_load(&eng.shadow_bytes);
    out->shadow_bytes_peak = atomic_load(&eng.shadow_bytes_peak);
    out->build_ns = atomic_load(&eng.build_ns);
}
