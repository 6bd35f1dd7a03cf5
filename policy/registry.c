/* SPDX-License-Identifier: MIT
 * ibpshim: registry of pinned host regions: immutable sorted snapshots, two-counter read sections. */
#include "policy/registry.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "common/log.h"
#include "policy/track.h"

struct IbpRegion {
    uint64_t id;
    uintptr_t base;
    size_t size;
    uint32_t flags;
    uint64_t site;
    _Atomic int state;
    _Atomic long refs;
    _Atomic(IbpTracker *) tracker;
    /* Written under the writer mutex only. */
    _Atomic bool span_published;
    uintptr_t span_start;
    uintptr_t span_end;
    _Atomic(void *) data;
    void (*data_fini)(void *data);
    UT_hash_handle hh;
};

typedef struct IbpSiteEntry {
    IbpSiteStats stats;
    UT_hash_handle hh;
} IbpSiteEntry;

typedef struct IbpRegionEntry {
    uintptr_t start;
    uintptr_t end;
    IbpRegion *region;
} IbpRegionEntry;

typedef struct IbpSpanEntry {
    uintptr_t start;
    uintptr_t end;
    IbpTracker *tracker;
} IbpSpanEntry;

/* Never modified once published.  Both arrays are sorted by start and their
 * ranges are disjoint. */
typedef struct IbpSnapshot {
    size_t nregions;
    size_t nspans;
    const IbpRegionEntry *regions;
    const IbpSpanEntry *spans;
} IbpSnapshot;

static const IbpSnapshot empty_snapshot = {0, 0, NULL, NULL};

/* Read sections: a reader counts itself in readers[parity] and re-checks the
 * parity; a writer that has swapped the snapshot flips the parity and waits
 * for the old side to drain.  A reader that raced with the flip sees the new
 * parity on its re-check and retries on the new side, so one flip suffices. */
typedef struct IbpReaderCount {
    _Atomic unsigned long n;
    char pad[64 - sizeof(unsigned long)];
} IbpReaderCount;

static IbpReaderCount readers[2];
static _Atomic unsigned reader_parity;
static _Atomic(const IbpSnapshot *) current_snapshot = &empty_snapshot;

static pthread_mutex_t writer_mutex = PTHREAD_MUTEX_INITIALIZER;
static IbpRegion *regions_by_id;
static IbpSiteEntry *sites;
static uint64_t next_region_id = 1;

unsigned ibp_registry_read_enter(void)
{
    for (;;) {
        const unsigned p = atomic_load(&reader_parity) & 1u;
        atomic_fetch_add(&readers[p].n, 1);
        if ((atomic_load(&reader_parity) & 1u) == p)
            return p;
        atomic_fetch_sub(&readers[p].n, 1);
    }
}

void ibp_registry_read_exit(unsigned token)
{
    assert(token < 2);
    atomic_fetch_sub(&readers[token].n, 1);
}

static void synchronize_readers(void)
{
    const unsigned p = atomic_load(&reader_parity) & 1u;
    atomic_store(&reader_parity, p ^ 1u);
    unsigned spins = 0;
    while (atomic_load(&readers[p].n) != 0) {
        if (++spins > 64)
            sched_yield();
    }
}

static const IbpSnapshot *snapshot_read(void)
{
    return atomic_load(&current_snapshot);
}

/* Index of the last entry whose start <= addr, or SIZE_MAX.  Entries are
 * accessed through a stride so one search serves both arrays. */
static size_t search_floor(const void *entries, size_t n, size_t stride, uintptr_t addr)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        const uintptr_t start = *(const uintptr_t *)((const char *)entries + mid * stride);
        if (start <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo == 0 ? SIZE_MAX : lo - 1;
}

static IbpSnapshot *snapshot_alloc(size_t nregions, size_t nspans)
{
    const size_t bytes = sizeof(IbpSnapshot) + nregions * sizeof(IbpRegionEntry) +
                         nspans * sizeof(IbpSpanEntry);
    IbpSnapshot *const s = malloc(bytes);
    if (!s)
        return NULL;
    IbpRegionEntry *const r = (IbpRegionEntry *)(s + 1);
    IbpSpanEntry *const sp = (IbpSpanEntry *)(r + nregions);
    s->nregions = nregions;
    s->nspans = nspans;
    s->regions = nregions ? r : NULL;
    s->spans = nspans ? sp : NULL;
    return s;
}

/* Publishes next and frees the previous snapshot once no reader can hold it.
 * Called with the writer mutex held. */
static void snapshot_publish(IbpSnapshot *next)
{
    const IbpSnapshot *const prev = atomic_exchange(&current_snapshot, next);
    synchronize_readers();
    if (prev != &empty_snapshot)
        free((void *)prev);
}

static bool region_tryget(IbpRegion *r)
{
    long n = atomic_load(&r->refs);
    while (n > 0) {
        if (atomic_compare_exchange_weak(&r->refs, &n, n + 1))
            return true;
    }
    return false;
}

static void region_free(IbpRegion *r)
{
    void *const data = atomic_load(&r->data);
    if (data && r->data_fini)
        r->data_fini(data);
    IbpTracker *t = atomic_load(&r->tracker);
    ibp_tracker_destroy(&t);
    free(r);
}

void ibp_region_get(IbpRegion *region)
{
    const long prev = atomic_fetch_add(&region->refs, 1);
    assert(prev > 0);
    (void)prev;
}

/* Reaching zero is only possible after ibp_registry_remove() has unpublished
 * the region and waited out every reader, so nobody can find it any more. */
void ibp_region_put(IbpRegion **region)
{
    if (!region || !*region)
        return;
    IbpRegion *const r = *region;
    *region = NULL;
    const long prev = atomic_fetch_sub(&r->refs, 1);
    assert(prev > 0);
    if (prev == 1)
        region_free(r);
}

static IbpSiteEntry *site_find_or_add(uint64_t site)
{
    IbpSiteEntry *e = NULL;
    HASH_FIND(hh, sites, &site, sizeof site, e);
    if (e)
        return e;
    e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->stats.site = site;
    HASH_ADD(hh, sites, stats.site, sizeof e->stats.site, e);
    return e;
}

int64_t ibp_registry_add(const void *base, size_t size, uint32_t flags, uint64_t site, IbpRegion **out)
{
    const uintptr_t start = (uintptr_t)base;
    if (out)
        *out = NULL;
    if (size == 0 || size > UINTPTR_MAX - start)
        return -EINVAL;
    const uintptr_t end = start + size;

    IbpRegion *const r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    r->base = start;
    r->size = size;
    r->flags = flags;
    r->site = site;
    atomic_init(&r->state, IBP_REGION_RAW);
    atomic_init(&r->refs, out ? 2 : 1);

    int64_t ret;
    pthread_mutex_lock(&writer_mutex);
    const IbpSnapshot *const cur = snapshot_read();
    const size_t at = search_floor(cur->regions, cur->nregions, sizeof(IbpRegionEntry), start);
    const size_t ins = at == SIZE_MAX ? 0 : at + 1;
    if ((at != SIZE_MAX && cur->regions[at].end > start) ||
        (ins < cur->nregions && cur->regions[ins].start < end)) {
        ret = -EEXIST;
        goto fail;
    }
    IbpSiteEntry *const se = site_find_or_add(site);
    IbpSnapshot *const next = se ? snapshot_alloc(cur->nregions + 1, cur->nspans) : NULL;
    if (!next) {
        ret = -ENOMEM;
        goto fail;
    }
    IbpRegionEntry *const nr = (IbpRegionEntry *)next->regions;
    if (ins)
        memcpy(nr, cur->regions, ins * sizeof *nr);
    nr[ins] = (IbpRegionEntry){start, end, r};
    if (cur->nregions > ins)
        memcpy(nr + ins + 1, cur->regions + ins, (cur->nregions - ins) * sizeof *nr);
    if (cur->nspans)
        memcpy((IbpSpanEntry *)next->spans, cur->spans, cur->nspans * sizeof(IbpSpanEntry));

    r->id = next_region_id++;
    HASH_ADD(hh, regions_by_id, id, sizeof r->id, r);
    se->stats.regions_added++;
    se->stats.regions_live++;
    se->stats.bytes_added += size;
    snapshot_publish(next);
    ret = (int64_t)r->id;
    pthread_mutex_unlock(&writer_mutex);
    if (out)
        *out = r;
    IBP_DEBUG("region %llu added: %p + %zu, flags 0x%x, site 0x%llx", (unsigned long long)r->id, base,
              size, flags, (unsigned long long)site);
    return ret;

fail:
    pthread_mutex_unlock(&writer_mutex);
    free(r);
    return ret;
}

/* Copies cur without the region at index ri and without span index si
 * (SIZE_MAX: keep all spans). */
static IbpSnapshot *snapshot_without(const IbpSnapshot *cur, size_t ri, size_t si)
{
    const size_t nr = cur->nregions - (ri != SIZE_MAX);
    const size_t ns = cur->nspans - (si != SIZE_MAX);
    IbpSnapshot *const next = snapshot_alloc(nr, ns);
    if (!next)
        return NULL;
    IbpRegionEntry *r = (IbpRegionEntry *)next->regions;
    for (size_t i = 0; i < cur->nregions; i++)
        if (i != ri)
            *r++ = cur->regions[i];
    IbpSpanEntry *s = (IbpSpanEntry *)next->spans;
    for (size_t i = 0; i < cur->nspans; i++)
        if (i != si)
            *s++ = cur->spans[i];
    return next;
}

static size_t span_index(const IbpSnapshot *s, const IbpRegion *r)
{
    if (!atomic_load(&r->span_published))
        return SIZE_MAX;
    const size_t i = search_floor(s->spans, s->nspans, sizeof(IbpSpanEntry), r->span_start);
    assert(i != SIZE_MAX && s->spans[i].start == r->span_start);
    return i;
}

int ibp_registry_remove(const void *base)
{
    const uintptr_t start = (uintptr_t)base;
    int ret = 0;
    pthread_mutex_lock(&writer_mutex);
    const IbpSnapshot *const cur = snapshot_read();
    const size_t ri = search_floor(cur->regions, cur->nregions, sizeof(IbpRegionEntry), start);
    if (ri == SIZE_MAX || cur->regions[ri].start != start) {
        ret = -ENOENT;
        goto out;
    }
    IbpRegion *r = cur->regions[ri].region;
    atomic_store(&r->state, IBP_REGION_DEAD);
    /* Pages must be writable before the span disappears: after that a fault
     * on them would no longer be recognised as ours. */
    IbpTracker *const t = atomic_load(&r->tracker);
    if (t)
        ibp_tracker_retire(t);

    IbpSnapshot *const next = snapshot_without(cur, ri, span_index(cur, r));
    if (!next) {
        /* Without memory for a smaller snapshot the region stays visible but
         * DEAD and untracked: harmless, and the caller may retry. */
        ret = -ENOMEM;
        goto out;
    }
    atomic_store(&r->span_published, false);
    snapshot_publish(next);
    HASH_DEL(regions_by_id, r);
    IbpSiteEntry *se = NULL;
    HASH_FIND(hh, sites, &r->site, sizeof r->site, se);
    if (se && se->stats.regions_live)
        se->stats.regions_live--;
    pthread_mutex_unlock(&writer_mutex);
    IBP_DEBUG("region %llu removed", (unsigned long long)r->id);
    ibp_region_put(&r);
    return 0;

out:
    pthread_mutex_unlock(&writer_mutex);
    return ret;
}

int ibp_registry_lookup(const void *ptr, size_t len, IbpRegion **out)
{
    const uintptr_t a = (uintptr_t)ptr;
    const size_t n = len ? len : 1;
    *out = NULL;
    if (n > UINTPTR_MAX - a)
        return -ENOENT;
    int ret = -ENOENT;
    const unsigned tok = ibp_registry_read_enter();
    const IbpSnapshot *const s = snapshot_read();
    const size_t i = search_floor(s->regions, s->nregions, sizeof(IbpRegionEntry), a);
    if (i != SIZE_MAX && a + n <= s->regions[i].end && region_tryget(s->regions[i].region)) {
        *out = s->regions[i].region;
        ret = 0;
    }
    ibp_registry_read_exit(tok);
    return ret;
}

int ibp_registry_overlaps(const void *ptr, size_t len)
{
    const uintptr_t a = (uintptr_t)ptr;
    if (!len)
        return 0;
    const uintptr_t last = len - 1 > UINTPTR_MAX - a ? UINTPTR_MAX : a + (len - 1);
    const unsigned tok = ibp_registry_read_enter();
    const IbpSnapshot *const s = snapshot_read();
    /* The last region starting at or before the range's last byte overlaps it iff it ends after
     * the first byte: regions are sorted and disjoint. */
    const size_t i = search_floor(s->regions, s->nregions, sizeof(IbpRegionEntry), last);
    const int hit = i != SIZE_MAX && s->regions[i].end > a;
    ibp_registry_read_exit(tok);
    return hit;
}

int ibp_registry_get(uint64_t id, IbpRegion **out)
{
    IbpRegion *r = NULL;
    *out = NULL;
    pthread_mutex_lock(&writer_mutex);
    HASH_FIND(hh, regions_by_id, &id, sizeof id, r);
    if (r && region_tryget(r))
        *out = r;
    pthread_mutex_unlock(&writer_mutex);
    return *out ? 0 : -ENOENT;
}

int ibp_registry_foreach(int (*fn)(const IbpRegionInfo *info, void *arg), void *arg)
{
    int ret = 0;
    pthread_mutex_lock(&writer_mutex);
    const IbpSnapshot *const s = snapshot_read();
    for (size_t i = 0; i < s->nregions && ret == 0; i++) {
        IbpRegionInfo info;
        ibp_region_info(s->regions[i].region, &info);
        ret = fn(&info, arg);
    }
    pthread_mutex_unlock(&writer_mutex);
    return ret;
}

size_t ibp_registry_count(void)
{
    const unsigned tok = ibp_registry_read_enter();
    const size_t n = snapshot_read()->nregions;
    ibp_registry_read_exit(tok);
    return n;
}

void ibp_registry_regions_at(const uint64_t *addrs, size_t n,
                             void (*fn)(uintptr_t start, size_t size, void *arg), void *arg)
{
    const unsigned tok = ibp_registry_read_enter();
    const IbpSnapshot *const s = snapshot_read();
    if (s->nregions) {
        const uintptr_t lo = s->regions[0].start, hi = s->regions[s->nregions - 1].end;
        for (size_t i = 0; i < n; i++) {
            if (addrs[i] < lo || addrs[i] >= hi)
                continue;
            const size_t at =
                search_floor(s->regions, s->nregions, sizeof(IbpRegionEntry), (uintptr_t)addrs[i]);
            if (at != SIZE_MAX && addrs[i] < s->regions[at].end)
                fn(s->regions[at].start, s->regions[at].end - s->regions[at].start, arg);
        }
    }
    ibp_registry_read_exit(tok);
}

int ibp_registry_site_stats(uint64_t site, IbpSiteStats *out)
{
    IbpSiteEntry *e = NULL;
    pthread_mutex_lock(&writer_mutex);
    HASH_FIND(hh, sites, &site, sizeof site, e);
    if (e)
        *out = e->stats;
    pthread_mutex_unlock(&writer_mutex);
    return e ? 0 : -ENOENT;
}

void ibp_registry_site_note_churn(uint64_t site)
{
    pthread_mutex_lock(&writer_mutex);
    IbpSiteEntry *const e = site_find_or_add(site);
    if (e)
        e->stats.churned++;
    pthread_mutex_unlock(&writer_mutex);
}

uint64_t ibp_region_id(const IbpRegion *region)
{
    return region->id;
}

uintptr_t ibp_region_base(const IbpRegion *region)
{
    return region->base;
}

size_t ibp_region_size(const IbpRegion *region)
{
    return region->size;
}

uint32_t ibp_region_flags(const IbpRegion *region)
{
    return region->flags;
}

uint64_t ibp_region_site(const IbpRegion *region)
{
    return region->site;
}

void ibp_region_info(const IbpRegion *region, IbpRegionInfo *out)
{
    out->id = region->id;
    out->base = region->base;
    out->size = region->size;
    out->flags = region->flags;
    out->site = region->site;
    out->state = ibp_region_state(region);
    out->tracked = atomic_load(&((IbpRegion *)region)->span_published);
}

IbpRegionState ibp_region_state(const IbpRegion *region)
{
    return (IbpRegionState)atomic_load(&((IbpRegion *)region)->state);
}

const char *ibp_region_state_name(IbpRegionState state)
{
    switch (state) {
    case IBP_REGION_RAW:
        return "raw";
    case IBP_REGION_HOT:
        return "hot";
    case IBP_REGION_COMPRESSING:
        return "compressing";
    case IBP_REGION_COMPRESSED:
        return "compressed";
    case IBP_REGION_UNTRACKED:
        return "untracked";
    case IBP_REGION_DEAD:
        return "dead";
    }
    return "?";
}

int ibp_region_set_state(IbpRegion *region, IbpRegionState from, IbpRegionState to)
{
    if (from == IBP_REGION_DEAD)
        return 0;
    int expected = (int)from;
    return atomic_compare_exchange_strong(&region->state, &expected, (int)to) ? 1 : 0;
}

IbpTracker *ibp_region_tracker(const IbpRegion *region)
{
    return atomic_load(&((IbpRegion *)region)->tracker);
}

int ibp_region_attach_data(IbpRegion *region, void *data, void (*fini)(void *data))
{
    int ret = -EBUSY;
    pthread_mutex_lock(&writer_mutex);
    if (!atomic_load(&region->data)) {
        region->data_fini = fini;
        atomic_store(&region->data, data);
        ret = 0;
    }
    pthread_mutex_unlock(&writer_mutex);
    return ret;
}

void *ibp_region_data(const IbpRegion *region)
{
    return atomic_load(&((IbpRegion *)region)->data);
}

int ibp_registry_attach_tracker(IbpRegion *region, IbpTracker *tracker, uintptr_t span_start,
                                uintptr_t span_end)
{
    assert(span_start < span_end);
    int ret = 0;
    pthread_mutex_lock(&writer_mutex);
    const IbpTracker *const have = atomic_load(&region->tracker);
    if (atomic_load(&region->state) == IBP_REGION_DEAD) {
        ret = -ENOENT;
        goto out;
    }
    if ((have && have != tracker) || atomic_load(&region->span_published)) {
        ret = -EBUSY;
        goto out;
    }
    const IbpSnapshot *const cur = snapshot_read();
    const size_t at = search_floor(cur->spans, cur->nspans, sizeof(IbpSpanEntry), span_start);
    const size_t ins = at == SIZE_MAX ? 0 : at + 1;
    if ((at != SIZE_MAX && cur->spans[at].end > span_start) ||
        (ins < cur->nspans && cur->spans[ins].start < span_end)) {
        ret = -EBUSY;
        goto out;
    }
    IbpSnapshot *const next = snapshot_alloc(cur->nregions, cur->nspans + 1);
    if (!next) {
        ret = -ENOMEM;
        goto out;
    }
    if (cur->nregions)
        memcpy((IbpRegionEntry *)next->regions, cur->regions, cur->nregions * sizeof(IbpRegionEntry));
    IbpSpanEntry *const ns = (IbpSpanEntry *)next->spans;
    if (ins)
        memcpy(ns, cur->spans, ins * sizeof *ns);
    ns[ins] = (IbpSpanEntry){span_start, span_end, tracker};
    if (cur->nspans > ins)
        memcpy(ns + ins + 1, cur->spans + ins, (cur->nspans - ins) * sizeof *ns);
    atomic_store(&region->tracker, tracker);
    region->span_start = span_start;
    region->span_end = span_end;
    atomic_store(&region->span_published, true);
    snapshot_publish(next);
out:
    pthread_mutex_unlock(&writer_mutex);
    return ret;
}

int ibp_registry_detach_tracker(IbpRegion *region)
{
    int ret = 0;
    pthread_mutex_lock(&writer_mutex);
    const IbpSnapshot *const cur = snapshot_read();
    if (!atomic_load(&region->span_published)) {
        ret = -ENOENT;
        goto out;
    }
    IbpSnapshot *const next = snapshot_without(cur, SIZE_MAX, span_index(cur, region));
    if (!next) {
        ret = -ENOMEM;
        goto out;
    }
    atomic_store(&region->span_published, false);
    snapshot_publish(next);
out:
    pthread_mutex_unlock(&writer_mutex);
    return ret;
}

IbpTracker *ibp_registry_tracker_at(uintptr_t addr)
{
    const IbpSnapshot *const s = snapshot_read();
    const size_t i = search_floor(s->spans, s->nspans, sizeof(IbpSpanEntry), addr);
    if (i == SIZE_MAX || addr >= s->spans[i].end)
        return NULL;
    return s->spans[i].tracker;
}

void ibp_registry_trackers_in(uintptr_t addr, size_t len, void (*fn)(IbpTracker *tracker, void *arg),
                              void *arg)
{
    if (len == 0)
        return;
    const uintptr_t end = len > UINTPTR_MAX - addr ? UINTPTR_MAX : addr + len;
    const IbpSnapshot *const s = snapshot_read();
    size_t i = search_floor(s->spans, s->nspans, sizeof(IbpSpanEntry), addr);
    if (i == SIZE_MAX || s->spans[i].end <= addr)
        i = i == SIZE_MAX ? 0 : i + 1;
    for (; i < s->nspans && s->spans[i].start < end; i++)
        fn(s->spans[i].tracker, arg);
}

void ibp_registry_foreach_tracker_locked(void (*fn)(IbpTracker *tracker, void *arg), void *arg)
{
    const IbpSnapshot *const s = snapshot_read();
    for (size_t i = 0; i < s->nspans; i++)
        fn(s->spans[i].tracker, arg);
}

void ibp_registry_lock(void)
{
    pthread_mutex_lock(&writer_mutex);
}

void ibp_registry_unlock(void)
{
    pthread_mutex_unlock(&writer_mutex);
}

/* Threads that were inside read sections at fork time do not exist in the
 * child; their counts would make every later writer wait forever. */
void ibp_registry_child_after_fork(void)
{
    atomic_store(&readers[0].n, 0);
    atomic_store(&readers[1].n, 0);
    pthread_mutex_unlock(&writer_mutex);
}
