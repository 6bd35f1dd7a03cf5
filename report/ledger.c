/* SPDX-License-Identifier: MIT
 * ibpshim: the transfer ledger: lock-free recording, region bookkeeping and snapshots. */
#include "report/ledger.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "report/ledger_internal.h"

typedef struct IbpLedgerCounters {
    _Atomic uint64_t copies;
    _Atomic uint64_t requested;
    _Atomic uint64_t compressed_in;
    _Atomic uint64_t compressed_out;
    _Atomic uint64_t raw[IBP_RAW_REASON_COUNT];
    _Atomic uint64_t invalidations;
    _Atomic uint64_t recompressions;
    _Atomic uint64_t evictions;
    _Atomic uint64_t evicted_bytes;
    _Atomic uint64_t tracking_ns;
    _Atomic uint64_t routed;
    _Atomic uint64_t lookup_ns;
    _Atomic uint64_t enqueue_ns;
    _Atomic uint64_t staging_wait_ns;
    _Atomic uint64_t dma_ns;
    _Atomic uint64_t dma_bytes;
    _Atomic uint64_t decode_ns;
    _Atomic uint64_t decoded_bytes;
    _Atomic uint64_t plans;
    _Atomic uint64_t plans_reused;
    _Atomic uint64_t plan_ns;
    _Atomic uint64_t builds;
    _Atomic uint64_t build_ns;
    /* Signed: a release may be recorded by one thread before the matching grow by another. */
    _Atomic int64_t shadow_bytes;
    _Atomic int64_t shadow_peak;
} IbpLedgerCounters;

/* Counters first and cache-line aligned: threads copying from different regions share no line. */
struct IbpLedgerRegion {
    IbpLedgerCounters c __attribute__((aligned(64)));
    uint64_t id;
    uintptr_t base;
    uint64_t size;
    uint32_t flags;
    uint32_t site_id;
    int freed;
    uint64_t opened_ns;
    uint64_t closed_ns;
    IbpLedgerRegion *prev; /* every kept region, by id */
    IbpLedgerRegion *next;
    IbpLedgerRegion *next_freed; /* freed regions, oldest first */
};

/* Per site: the totals of freed regions that were merged away, and how many. */
typedef struct IbpSiteMerged {
    IbpLedgerTotals totals;
    uint64_t regions;
} IbpSiteMerged;

static const char *const raw_reason_names[IBP_RAW_REASON_COUNT] = {
    [IBP_RAW_BELOW_THRESHOLD] = "below_threshold",
    [IBP_RAW_NOT_PINNED] = "not_pinned",
    [IBP_RAW_COLD] = "cold",
    [IBP_RAW_STALE] = "stale",
    [IBP_RAW_INCOMPRESSIBLE] = "incompressible",
    [IBP_RAW_CAPTURING] = "capturing",
    [IBP_RAW_CHURN] = "churn",
    [IBP_RAW_BUDGET] = "budget",
    [IBP_RAW_ERROR] = "error",
    [IBP_RAW_DISABLED] = "disabled",
    [IBP_RAW_SLOWER] = "slower",
};

static IbpLedgerCounters untracked __attribute__((aligned(64)));
static _Atomic int64_t process_shadow __attribute__((aligned(64)));
static _Atomic int64_t process_shadow_peak;

static pthread_once_t ledger_once = PTHREAD_ONCE_INIT;
static uint64_t ledger_start_ns;

/* Guards the lists below; taken by open, close and snapshot, never by recording. */
static pthread_mutex_t ledger_lock = PTHREAD_MUTEX_INITIALIZER;
static IbpLedgerRegion *region_head;
static IbpLedgerRegion *region_tail;
static size_t region_kept;
static IbpLedgerRegion *freed_head;
static IbpLedgerRegion *freed_tail;
static size_t freed_kept;
static uint64_t region_next_id = 1;
static uint64_t regions_merged;
static IbpSiteMerged *merged_by_site; /* [site id] */
static size_t merged_cap;

const char *ibp_raw_reason_name(IbpRawReason reason)
{
    if ((unsigned)reason >= IBP_RAW_REASON_COUNT)
        return "?";
    return raw_reason_names[reason];
}


static void ledger_fork_prepare(void)
{
    pthread_mutex_lock(&ledger_lock);
    ibp_site_lock_for_fork();
}

static void ledger_fork_release(void)
{
    ibp_site_unlock_after_fork();
    pthread_mutex_unlock(&ledger_lock);
}

static void ledger_init(void)
{
    ledger_start_ns = ibp_monotonic_ns();
    pthread_atfork(ledger_fork_prepare, ledger_fork_release, ledger_fork_release);
}

uint64_t ibp_ledger_elapsed_ns(void)
{
    pthread_once(&ledger_once, ledger_init);
    return ibp_monotonic_ns() - ledger_start_ns;
}

static inline IbpLedgerCounters *counters_of(IbpLedgerRegion *region)
{
    return region ? &region->c : &untracked;
}

static inline void add(_Atomic uint64_t *counter, uint64_t v)
{
    atomic_fetch_add_explicit(counter, v, memory_order_relaxed);
}

static inline void raise_peak(_Atomic int64_t *peak, int64_t now)
{
    int64_t seen = atomic_load_explicit(peak, memory_order_relaxed);
    while (now > seen && !atomic_compare_exchange_weak_explicit(peak, &seen, now, memory_order_relaxed,
                                                                memory_order_relaxed))
        ;
}

void ibp_ledger_copy(IbpLedgerRegion *region, uint64_t requested)
{
    IbpLedgerCounters *c = counters_of(region);
    add(&c->copies, 1);
    add(&c->requested, requested);
}

void ibp_ledger_compressed(IbpLedgerRegion *region, uint64_t original, uint64_t wire)
{
    IbpLedgerCounters *c = counters_of(region);
    add(&c->compressed_in, original);
    add(&c->compressed_out, wire);
}

void ibp_ledger_raw(IbpLedgerRegion *region, IbpRawReason reason, uint64_t bytes)
{
    if ((unsigned)reason >= IBP_RAW_REASON_COUNT)
        reason = IBP_RAW_ERROR;
    add(&counters_of(region)->raw[reason], bytes);
}

void ibp_ledger_copy_raw(IbpLedgerRegion *region, IbpRawReason reason, uint64_t bytes)
{
    ibp_ledger_copy(region, bytes);
    ibp_ledger_raw(region, reason, bytes);
}

void ibp_ledger_invalidated(IbpLedgerRegion *region, uint64_t blocks)
{
    add(&counters_of(region)->invalidations, blocks);
}

void ibp_ledger_recompressed(IbpLedgerRegion *region, uint64_t blocks)
{
    add(&counters_of(region)->recompressions, blocks);
}

void ibp_ledger_tracking_ns(IbpLedgerRegion *region, uint64_t ns)
{
    add(&counters_of(region)->tracking_ns, ns);
}

void ibp_ledger_routed(IbpLedgerRegion *region, uint64_t lookup_ns, uint64_t enqueue_ns, uint64_t wait_ns)
{
    IbpLedgerCounters *c = counters_of(region);
    add(&c->routed, 1);
    add(&c->lookup_ns, lookup_ns);
    add(&c->enqueue_ns, enqueue_ns);
    if (wait_ns)
        add(&c->staging_wait_ns, wait_ns);
}

void ibp_ledger_dma(IbpLedgerRegion *region, uint64_t bytes, uint64_t ns)
{
    IbpLedgerCounters *c = counters_of(region);
    add(&c->dma_bytes, bytes);
    add(&c->dma_ns, ns);
}

void ibp_ledger_decoded(IbpLedgerRegion *region, uint64_t bytes, uint64_t ns)
{
    IbpLedgerCounters *c = counters_of(region);
    add(&c->decoded_bytes, bytes);
    add(&c->decode_ns, ns);
}

void ibp_ledger_shadow(IbpLedgerRegion *region, int64_t delta)
{
    IbpLedgerCounters *c = counters_of(region);
    const int64_t now = atomic_fetch_add_explicit(&c->shadow_bytes, delta, memory_order_relaxed) + delta;
    const int64_t all = atomic_fetch_add_explicit(&process_shadow, delta, memory_order_relaxed) + delta;
    if (delta > 0) {
        raise_peak(&c->shadow_peak, now);
        raise_peak(&process_shadow_peak, all);
    }
}

void ibp_ledger_planned(IbpLedgerRegion *region, uint64_t ns, int reused)
{
    IbpLedgerCounters *c = counters_of(region);
    add(&c->plans, 1);
    add(&c->plans_reused, reused ? 1u : 0u);
    add(&c->plan_ns, ns);
}

void ibp_ledger_built(IbpLedgerRegion *region, uint64_t ns)
{
    IbpLedgerCounters *c = counters_of(region);
    add(&c->builds, 1);
    add(&c->build_ns, ns);
}

void ibp_ledger_evicted(IbpLedgerRegion *region, uint64_t bytes)
{
    IbpLedgerCounters *c = counters_of(region);
    add(&c->evictions, 1);
    add(&c->evicted_bytes, bytes);
    ibp_ledger_shadow(region, -(int64_t)bytes);
}

static uint64_t load(const _Atomic uint64_t *counter)
{
    return atomic_load_explicit(counter, memory_order_relaxed);
}

static uint64_t load_gauge(const _Atomic int64_t *gauge)
{
    const int64_t v = atomic_load_explicit(gauge, memory_order_relaxed);
    return v > 0 ? (uint64_t)v : 0;
}

static void counters_read(const IbpLedgerCounters *c, IbpLedgerTotals *t)
{
    t->copies = load(&c->copies);
    t->requested = load(&c->requested);
    t->compressed_in = load(&c->compressed_in);
    t->compressed_out = load(&c->compressed_out);
    for (int r = 0; r < IBP_RAW_REASON_COUNT; r++)
        t->raw[r] = load(&c->raw[r]);
    t->invalidations = load(&c->invalidations);
    t->recompressions = load(&c->recompressions);
    t->evictions = load(&c->evictions);
    t->evicted_bytes = load(&c->evicted_bytes);
    t->tracking_ns = load(&c->tracking_ns);
    t->routed = load(&c->routed);
    t->lookup_ns = load(&c->lookup_ns);
    t->enqueue_ns = load(&c->enqueue_ns);
    t->staging_wait_ns = load(&c->staging_wait_ns);
    t->dma_ns = load(&c->dma_ns);
    t->dma_bytes = load(&c->dma_bytes);
    t->decode_ns = load(&c->decode_ns);
    t->decoded_bytes = load(&c->decoded_bytes);
    t->plans = load(&c->plans);
    t->plans_reused = load(&c->plans_reused);
    t->plan_ns = load(&c->plan_ns);
    t->builds = load(&c->builds);
    t->build_ns = load(&c->build_ns);
    t->shadow_bytes = load_gauge(&c->shadow_bytes);
    t->shadow_peak = load_gauge(&c->shadow_peak);
}

/* Shadow gauges add up as "held now" and "sum of peaks" (an upper bound of the group's peak). */
static void totals_add(IbpLedgerTotals *sum, const IbpLedgerTotals *t)
{
    sum->copies += t->copies;
    sum->requested += t->requested;
    sum->compressed_in += t->compressed_in;
    sum->compressed_out += t->compressed_out;
    for (int r = 0; r < IBP_RAW_REASON_COUNT; r++)
        sum->raw[r] += t->raw[r];
    sum->invalidations += t->invalidations;
    sum->recompressions += t->recompressions;
    sum->evictions += t->evictions;
    sum->evicted_bytes += t->evicted_bytes;
    sum->tracking_ns += t->tracking_ns;
    sum->routed += t->routed;
    sum->lookup_ns += t->lookup_ns;
    sum->enqueue_ns += t->enqueue_ns;
    sum->staging_wait_ns += t->staging_wait_ns;
    sum->dma_ns += t->dma_ns;
    sum->dma_bytes += t->dma_bytes;
    sum->decode_ns += t->decode_ns;
    sum->decoded_bytes += t->decoded_bytes;
    sum->plans += t->plans;
    sum->plans_reused += t->plans_reused;
    sum->plan_ns += t->plan_ns;
    sum->builds += t->builds;
    sum->build_ns += t->build_ns;
    sum->shadow_bytes += t->shadow_bytes;
    sum->shadow_peak += t->shadow_peak;
}

uint64_t ibp_ledger_totals_raw(const IbpLedgerTotals *t)
{
    uint64_t raw = 0;
    for (int r = 0; r < IBP_RAW_REASON_COUNT; r++)
        raw += t->raw[r];
    return raw;
}

uint64_t ibp_ledger_totals_sent(const IbpLedgerTotals *t)
{
    return t->compressed_out + ibp_ledger_totals_raw(t);
}

/* Makes merged_by_site[site_id] addressable.  Called with ledger_lock held. */
static int merged_reserve(uint32_t site_id)
{
    if (site_id < merged_cap)
        return 0;
    size_t cap = merged_cap ? merged_cap : 64;
    while (cap <= site_id)
        cap *= 2;
    IbpSiteMerged *grown = realloc(merged_by_site, cap * sizeof(*grown));
    if (!grown)
        return -ENOMEM;
    memset(grown + merged_cap, 0, (cap - merged_cap) * sizeof(*grown));
    merged_by_site = grown;
    merged_cap = cap;
    return 0;
}

IbpLedgerRegion *ibp_ledger_region_open(const void *base, size_t size, uint32_t flags, uint32_t site_id)
{
    pthread_once(&ledger_once, ledger_init);
    if (site_id > ibp_site_count())
        site_id = IBP_SITE_UNKNOWN;
    IbpLedgerRegion *region = aligned_alloc(64, sizeof(*region));
    if (!region)
        return NULL;
    memset(region, 0, sizeof(*region));
    region->base = (uintptr_t)base;
    region->size = size;
    region->flags = flags;
    region->site_id = site_id;
    region->opened_ns = ibp_ledger_elapsed_ns();

    pthread_mutex_lock(&ledger_lock);
    if (merged_reserve(site_id) < 0) {
        pthread_mutex_unlock(&ledger_lock);
        free(region);
        return NULL;
    }
    region->id = region_next_id++;
    region->prev = region_tail;
    if (region_tail)
        region_tail->next = region;
    else
        region_head = region;
    region_tail = region;
    region_kept++;
    pthread_mutex_unlock(&ledger_lock);
    return region;
}

/* Folds the oldest freed region into its site and frees it.  Called with ledger_lock held. */
static void merge_oldest_freed(void)
{
    IbpLedgerRegion *old = freed_head;
    assert(old && old->freed);
    freed_head = old->next_freed;
    if (!freed_head)
        freed_tail = NULL;
    freed_kept--;

    if (old->prev)
        old->prev->next = old->next;
    else
        region_head = old->next;
    if (old->next)
        old->next->prev = old->prev;
    else
        region_tail = old->prev;
    region_kept--;

    IbpLedgerTotals t;
    counters_read(&old->c, &t);
    IbpSiteMerged *m = &merged_by_site[old->site_id];
    totals_add(&m->totals, &t);
    m->regions++;
    regions_merged++;
    free(old);
}

void ibp_ledger_region_close(IbpLedgerRegion **region)
{
    if (!region || !*region)
        return;
    IbpLedgerRegion *r = *region;
    *region = NULL;

    const int64_t held = atomic_exchange_explicit(&r->c.shadow_bytes, 0, memory_order_relaxed);
    atomic_fetch_sub_explicit(&process_shadow, held, memory_order_relaxed);

    pthread_mutex_lock(&ledger_lock);
    assert(!r->freed);
    r->freed = 1;
    r->closed_ns = ibp_ledger_elapsed_ns();
    if (freed_tail)
        freed_tail->next_freed = r;
    else
        freed_head = r;
    freed_tail = r;
    freed_kept++;
    while (freed_kept > IBP_LEDGER_FREED_KEEP)
        merge_oldest_freed();
    pthread_mutex_unlock(&ledger_lock);
}

static void region_info(const IbpLedgerRegion *r, IbpLedgerRegionInfo *out)
{
    out->id = r->id;
    out->base = r->base;
    out->size = r->size;
    out->flags = r->flags;
    out->site_id = r->site_id;
    out->freed = r->freed;
    out->opened_ns = r->opened_ns;
    out->closed_ns = r->closed_ns;
    counters_read(&r->c, &out->totals);
}

void ibp_ledger_region_read(const IbpLedgerRegion *region, IbpLedgerRegionInfo *out)
{
    assert(region && out);
    pthread_mutex_lock(&ledger_lock);
    region_info(region, out);
    pthread_mutex_unlock(&ledger_lock);
}

void ibp_ledger_snapshot_free(IbpLedgerSnapshot **snap)
{
    if (!snap || !*snap)
        return;
    free((*snap)->regions);
    free((*snap)->sites);
    free(*snap);
    *snap = NULL;
}

int ibp_ledger_snapshot(IbpLedgerSnapshot **out)
{
    pthread_once(&ledger_once, ledger_init);
    IbpLedgerSnapshot *snap = calloc(1, sizeof(*snap));
    IbpLedgerSiteInfo *by_site = NULL;
    if (!snap)
        goto fail;

    pthread_mutex_lock(&ledger_lock);
    snap->elapsed_ns = ibp_ledger_elapsed_ns();
    snap->regions_merged = regions_merged;
    /* Every region's site id is below merged_cap (merged_reserve at open). */
    const size_t site_slots = merged_cap ? merged_cap : 1;
    snap->regions = region_kept ? malloc(region_kept * sizeof(*snap->regions)) : NULL;
    by_site = calloc(site_slots, sizeof(*by_site));
    if ((region_kept && !snap->regions) || !by_site) {
        pthread_mutex_unlock(&ledger_lock);
        goto fail;
    }
    for (const IbpLedgerRegion *r = region_head; r; r = r->next) {
        IbpLedgerRegionInfo *info = &snap->regions[snap->region_count++];
        region_info(r, info);
        IbpLedgerSiteInfo *site = &by_site[r->site_id];
        totals_add(&site->totals, &info->totals);
        site->regions++;
        site->regions_live += !r->freed;
        totals_add(&snap->total, &info->totals);
    }
    for (size_t s = 0; s < merged_cap; s++) {
        totals_add(&by_site[s].totals, &merged_by_site[s].totals);
        by_site[s].regions += merged_by_site[s].regions;
        totals_add(&snap->total, &merged_by_site[s].totals);
    }
    pthread_mutex_unlock(&ledger_lock);

    counters_read(&untracked, &snap->untracked);
    totals_add(&snap->total, &snap->untracked);
    snap->total.shadow_bytes = load_gauge(&process_shadow);
    snap->total.shadow_peak = load_gauge(&process_shadow_peak);

    size_t used = 0;
    for (size_t s = 0; s < site_slots; s++)
        used += by_site[s].regions != 0;
    snap->sites = used ? malloc(used * sizeof(*snap->sites)) : NULL;
    if (used && !snap->sites)
        goto fail;
    for (size_t s = 0; s < site_slots; s++) {
        if (!by_site[s].regions)
            continue;
        IbpLedgerSiteInfo *site = &snap->sites[snap->site_count++];
        *site = by_site[s];
        site->id = (uint32_t)s;
        const int depth = ibp_site_frames(site->id, site->frames, IBP_SITE_MAX_DEPTH);
        site->depth = depth > 0 ? depth : 0;
    }
    free(by_site);
    *out = snap;
    return 0;

fail:
    free(by_site);
    ibp_ledger_snapshot_free(&snap);
    return -ENOMEM;
}
