/* SPDX-License-Identifier: MIT
 * ibpshim: registry of pinned host regions with lock-free range lookup. */
#ifndef IBP_POLICY_REGISTRY_H
#define IBP_POLICY_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How the region came to be pinned, and how the driver maps it. */
typedef enum IbpRegionFlags {
    IBP_REGION_PINNED_ALLOC = 1u << 0,    /* cudaHostAlloc / cudaMallocHost */
    IBP_REGION_REGISTERED = 1u << 1,      /* cudaHostRegister over application memory */
    IBP_REGION_MAPPED = 1u << 2,          /* has a device pointer (zero-copy capable) */
    IBP_REGION_PORTABLE = 1u << 3,        /* pinned for every context */
    IBP_REGION_WRITE_COMBINED = 1u << 4,  /* uncached reads: never tracked, never compressed */
} IbpRegionFlags;

/* Life cycle seen by the router and the compressor.  Transitions go through
 * ibp_region_set_state(), which is a compare-and-swap. */
typedef enum IbpRegionState {
    IBP_REGION_RAW = 0,       /* registered, never copied (or reset after churn) */
    IBP_REGION_HOT,           /* copied at least once; queued for compression */
    IBP_REGION_COMPRESSING,   /* tracking armed, blocks being encoded */
    IBP_REGION_COMPRESSED,    /* shadow published; valid blocks may go compressed */
    IBP_REGION_UNTRACKED,     /* churned or untrackable: always raw, no tracking cost */
    IBP_REGION_DEAD,          /* removed; held only by outstanding references */
} IbpRegionState;

typedef struct IbpRegion IbpRegion;
typedef struct IbpTracker IbpTracker;

/* Plain copy of a region's fields, for reports and tests. */
typedef struct IbpRegionInfo {
    uint64_t id;
    uintptr_t base;
    size_t size;
    uint32_t flags;
    uint64_t site;
    IbpRegionState state;
    int tracked; /* a tracker's span is published (the region is under write tracking) */
} IbpRegionInfo;

/* Counters per allocation site, kept for the life of the process. */
typedef struct IbpSiteStats {
    uint64_t site;
    uint64_t regions_added;
    uint64_t regions_live;
    uint64_t bytes_added;
    uint64_t churned; /* regions from this site switched to UNTRACKED because of rewrites */
} IbpSiteStats;

/* The registry is one per process (the SIGSEGV handler must find it without
 * arguments).  Only regions at or above the caller's size threshold are meant
 * to be added: a pointer into anything smaller costs exactly one failed lookup,
 * and the snapshot that every lookup searches stays short.
 *
 * Thread-safety: every function may be called from any thread.  Writers
 * (add, remove, attach, detach) serialise on one mutex and publish a new
 * immutable sorted snapshot; readers (lookup, the tracking fault path) never
 * lock and never allocate.  Old snapshots are freed only after every reader
 * that could hold them has left its read section.  The functions marked
 * async-signal-safe may be used from signal handlers. */

/* Adds [base, base + size).  site identifies the allocation site (0 when
 * unknown).  Returns the region's id (> 0), or -EINVAL (size 0, range wraps),
 * -EEXIST (overlaps a registered region), -ENOMEM.  If out is non-NULL it
 * receives a reference that the caller releases with ibp_region_put(). */
int64_t ibp_registry_add(const void *base, size_t size, uint32_t flags, uint64_t site, IbpRegion **out);

/* Removes the region that starts exactly at base: marks it DEAD, fully disarms
 * its tracker (the pages become writable again before this returns), unpublishes
 * it and waits until no reader can still see it.  The region's memory is freed
 * when the last reference is dropped.  Returns 0 or -ENOENT. */
int ibp_registry_remove(const void *base);

/* Finds the region that fully contains [ptr, ptr + len) (len 0 means the byte
 * at ptr) and takes a reference.  Returns 0, or -ENOENT (not registered, or
 * only partly inside one region).  Lock-free. */
int ibp_registry_lookup(const void *ptr, size_t len, IbpRegion **out);

/* Whether any registered region overlaps [ptr, ptr + len) (len 0: no byte, so never).  One
 * search of the snapshot, no reference taken.  Lock-free. */
int ibp_registry_overlaps(const void *ptr, size_t len);

/* Same as lookup, by id.  Takes the writer mutex: not for hot paths. */
int ibp_registry_get(uint64_t id, IbpRegion **out);

/* Calls fn for every live region in address order, with the writer mutex held:
 * fn must not add or remove regions.  Stops early when fn returns non-zero and
 * returns that value; returns 0 otherwise. */
int ibp_registry_foreach(int (*fn)(const IbpRegionInfo *info, void *arg), void *arg);

/* Number of live regions. */
size_t ibp_registry_count(void);

/* For each of the n addresses that lies in a registered region, fn(start, size, arg) with that
 * region's bounds (a region holding several of them is reported for each).  One read section for
 * all of them and no reference taken: lock-free, and the region may be gone by the time the caller
 * acts on it. */
void ibp_registry_regions_at(const uint64_t *addrs, size_t n,
                             void (*fn)(uintptr_t start, size_t size, void *arg), void *arg);

/* Returns 0 and fills out, or -ENOENT for a site never seen. */
int ibp_registry_site_stats(uint64_t site, IbpSiteStats *out);

/* Records that a region of this site churned (policy may then start future
 * regions of the site UNTRACKED). */
void ibp_registry_site_note_churn(uint64_t site);

/* References.  get never fails on a region the caller already holds. */
void ibp_region_get(IbpRegion *region);
void ibp_region_put(IbpRegion **region);

uint64_t ibp_region_id(const IbpRegion *region);
uintptr_t ibp_region_base(const IbpRegion *region);
size_t ibp_region_size(const IbpRegion *region);
uint32_t ibp_region_flags(const IbpRegion *region);
uint64_t ibp_region_site(const IbpRegion *region);
void ibp_region_info(const IbpRegion *region, IbpRegionInfo *out);

IbpRegionState ibp_region_state(const IbpRegion *region);
const char *ibp_region_state_name(IbpRegionState state);
/* Moves from `from` to `to` if the state is still `from`.  Returns 1 on
 * success, 0 if another thread changed it first.  DEAD is final. */
int ibp_region_set_state(IbpRegion *region, IbpRegionState from, IbpRegionState to);

/* The region's tracker, or NULL.  Set once by ibp_registry_attach_tracker()
 * and owned by the region from then on: destroyed when the region is freed. */
IbpTracker *ibp_region_tracker(const IbpRegion *region);

/* Per-region data of later stages (the shadow store): one slot, freed with
 * fini(data) when the last reference goes away.  Returns 0, or -EBUSY if the
 * slot is taken. */
int ibp_region_attach_data(IbpRegion *region, void *data, void (*fini)(void *data));
void *ibp_region_data(const IbpRegion *region);

/* --- Used by the write tracker; not for other modules. --- */

/* Gives the region its tracker, whose protection covers the page span
 * [span_start, span_end), and publishes the span for the fault path.  Spans are
 * kept disjoint so that one page has at most one tracker.  Returns 0, -EBUSY
 * (a tracker already attached, or the span shares a page with another tracked
 * region's span), -ENOENT (region removed), -ENOMEM. */
int ibp_registry_attach_tracker(IbpRegion *region, IbpTracker *tracker, uintptr_t span_start,
                                uintptr_t span_end);

/* Unpublishes the region's span (the tracker stays owned by the region) and
 * waits until no reader can still see it.  Returns 0 or -ENOENT. */
int ibp_registry_detach_tracker(IbpRegion *region);

/* Read sections.  Async-signal-safe, nestable, never block.  The token from
 * enter must be passed to the matching exit. */
unsigned ibp_registry_read_enter(void);
void ibp_registry_read_exit(unsigned token);

/* Inside a read section: the tracker whose published span contains addr, or
 * NULL.  Async-signal-safe. */
IbpTracker *ibp_registry_tracker_at(uintptr_t addr);

/* Inside a read section: calls fn for each published tracker whose span
 * overlaps [addr, addr + len), in address order.  Async-signal-safe if fn is. */
void ibp_registry_trackers_in(uintptr_t addr, size_t len, void (*fn)(IbpTracker *tracker, void *arg),
                              void *arg);

/* Calls fn for every published tracker with the writer mutex held (fork
 * handling).  Must be called between ibp_registry_lock() and _unlock(). */
void ibp_registry_foreach_tracker_locked(void (*fn)(IbpTracker *tracker, void *arg), void *arg);

/* Fork support: lock before fork, unlock in the parent; in the child call
 * ibp_registry_child_after_fork() (which also unlocks). */
void ibp_registry_lock(void);
void ibp_registry_unlock(void);
void ibp_registry_child_after_fork(void);

#ifdef __cplusplus
}
#endif

#endif /* IBP_POLICY_REGISTRY_H */
