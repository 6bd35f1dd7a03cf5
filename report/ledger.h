/* SPDX-License-Identifier: MIT
 * ibpshim: the transfer ledger: counters per pinned region and per allocation site. */
#ifndef IBP_REPORT_LEDGER_H
#define IBP_REPORT_LEDGER_H

#include <stddef.h>
#include <stdint.h>

/* Why bytes of a host-to-device copy crossed PCIe uncompressed.  The names
 * (ibp_raw_reason_name) are part of the report schema: append, never reorder. */
typedef enum IbpRawReason {
    IBP_RAW_BELOW_THRESHOLD = 0, /* copy smaller than the compression threshold */
    IBP_RAW_NOT_PINNED,          /* source is not a tracked pinned region (pageable or unknown) */
    IBP_RAW_COLD,                /* region not hot yet, or its compression is still pending */
    IBP_RAW_STALE,               /* blocks written since they were compressed */
    IBP_RAW_INCOMPRESSIBLE,      /* blocks that did not reach the minimum ratio */
    IBP_RAW_CAPTURING,           /* stream capturing a graph */
    IBP_RAW_CHURN,               /* region rewritten too often: no longer tracked */
    IBP_RAW_BUDGET,              /* shadow memory bound reached */
    IBP_RAW_ERROR,               /* a failure inside the shim fell back to the real copy */
    IBP_RAW_DISABLED,            /* shim off, no decode kernels or no GPU path */
    IBP_RAW_SLOWER,              /* compressed blocks the measured speeds judged slower than a plain copy */
    IBP_RAW_REASON_COUNT
} IbpRawReason;

/* A stable lower-case name ("below_threshold", ...); "?" when out of range. */
const char *ibp_raw_reason_name(IbpRawReason reason);

/* Deepest backtrace a site records. */
#define IBP_SITE_MAX_DEPTH 64

/* Site id 0: no backtrace (depth 0, unwinding failed or out of memory). */
#define IBP_SITE_UNKNOWN 0u

/* Frames recorded by later ibp_site_capture() calls, clipped to
 * [0, IBP_SITE_MAX_DEPTH]; 0 turns backtraces off.  Default 8.
 * Thread-safety: an atomic; sites already captured keep their frames. */
void ibp_site_set_depth(int depth);

/* Captures the native backtrace of the caller (libunwind; glibc backtrace()
 * when built without it) and returns the id of the matching site, creating it
 * on first sight; identical frame lists give the same id.  With skip_frames 0,
 * frame 0 is the return address in the function that called
 * ibp_site_capture(); each further skip drops one more caller (a hook passes 1
 * or 2 so that frame 0 lies in the application).  Returns IBP_SITE_UNKNOWN
 * when the depth is 0 or nothing could be recorded.  Symbols are resolved
 * (dladdr) only when a report is written.
 * Thread-safety: safe from any thread; takes a mutex to look the site up
 * (allocation paths only) and allocates the first time a site is seen.  Not
 * async-signal-safe. */
uint32_t ibp_site_capture(int skip_frames);

/* Number of sites created so far, IBP_SITE_UNKNOWN excluded. */
uint32_t ibp_site_count(void);

/* Copies up to max frames of site id into frames; returns how many the site
 * has (0 for IBP_SITE_UNKNOWN), or -ENOENT for an id never returned. */
int ibp_site_frames(uint32_t id, uintptr_t *frames, int max);

/* One pinned region's ledger entry.  Opaque; the ledger owns it. */
typedef struct IbpLedgerRegion IbpLedgerRegion;

/* Starts a ledger entry for a region.  flags are recorded as given (the
 * cudaHostAlloc/cudaHostRegister flags); site_id comes from ibp_site_capture().
 * Returns NULL when out of memory: pass NULL to the recording calls below and
 * the copies count as untracked.  Thread-safety: takes the ledger mutex. */
IbpLedgerRegion *ibp_ledger_region_open(const void *base, size_t size, uint32_t flags, uint32_t site_id);

/* Marks the region freed.  Its totals stay in every later report (the oldest
 * freed regions beyond IBP_LEDGER_FREED_KEEP are merged into their site's
 * totals); the shadow bytes it still held are released from the gauge.  The
 * caller must not record into the region after this (it may be reused);
 * *region is set to NULL.  NULL or *region == NULL is a no-op. */
void ibp_ledger_region_close(IbpLedgerRegion **region);

/* Freed regions kept one by one in reports before older ones are merged. */
#define IBP_LEDGER_FREED_KEEP 4096

/* Recording.  region NULL means "not a tracked region": the bytes count in
 * the process totals only (the "untracked" entry of the report).  Every call
 * is a few relaxed atomic adds on the region's own cache lines: no lock, no
 * allocation, safe from any thread and from signal handlers.
 *
 * A copy's bytes should add up: requested == compressed original bytes + raw
 * bytes of all reasons.  The report prints what it was told. */

/* One host-to-device copy of requested bytes (call once per application copy). */
void ibp_ledger_copy(IbpLedgerRegion *region, uint64_t requested);
/* original bytes of that copy went compressed and took wire bytes on PCIe. */
void ibp_ledger_compressed(IbpLedgerRegion *region, uint64_t original, uint64_t wire);
/* bytes of that copy went raw, for reason. */
void ibp_ledger_raw(IbpLedgerRegion *region, IbpRawReason reason, uint64_t bytes);
/* Shorthand for the common fast-reject path: a copy that went raw whole. */
void ibp_ledger_copy_raw(IbpLedgerRegion *region, IbpRawReason reason, uint64_t bytes);

/* Write tracking made blocks stale. */
void ibp_ledger_invalidated(IbpLedgerRegion *region, uint64_t blocks);
/* Blocks compressed again after they went stale. */
void ibp_ledger_recompressed(IbpLedgerRegion *region, uint64_t blocks);
/* Time spent on write tracking (scans, faults) for the region. */
void ibp_ledger_tracking_ns(IbpLedgerRegion *region, uint64_t ns);
/* The router's host time for one copy it looked up: lookup_ns asking the policy (region, write
 * tracking, pieces), enqueue_ns enqueueing what the policy planned, of which wait_ns waiting for
 * staging buffers in flight. */
void ibp_ledger_routed(IbpLedgerRegion *region, uint64_t lookup_ns, uint64_t enqueue_ns, uint64_t wait_ns);
/* A DMA of compressed bytes whose duration was measured on the device. */
void ibp_ledger_dma(IbpLedgerRegion *region, uint64_t bytes, uint64_t ns);
/* A decode whose duration was measured: bytes written to the device in ns. */
void ibp_ledger_decoded(IbpLedgerRegion *region, uint64_t bytes, uint64_t ns);
/* Shadow bytes held by the region grew (delta > 0) or shrank (delta < 0).
 * Keeps the current and peak values, per region and for the process. */
void ibp_ledger_shadow(IbpLedgerRegion *region, int64_t delta);
/* The compressor planned the region (reused: with its site's last plan) in ns. */
void ibp_ledger_planned(IbpLedgerRegion *region, uint64_t ns, int reused);
/* The compressor finished a shadow build of the region in ns (planning not included). */
void ibp_ledger_built(IbpLedgerRegion *region, uint64_t ns);
/* The memory budget evicted bytes of the region's shadow: counts one eviction
 * and lowers the held gauge by bytes. */
void ibp_ledger_evicted(IbpLedgerRegion *region, uint64_t bytes);

/* Plain-value counters of one ledger entry, a site, or the process. */
typedef struct IbpLedgerTotals {
    uint64_t copies;
    uint64_t requested;      /* bytes the application asked to copy */
    uint64_t compressed_in;  /* of those, bytes that went compressed */
    uint64_t compressed_out; /* their size on PCIe */
    uint64_t raw[IBP_RAW_REASON_COUNT];
    uint64_t invalidations;
    uint64_t recompressions;
    uint64_t evictions;
    uint64_t evicted_bytes;
    uint64_t tracking_ns;
    uint64_t routed;    /* copies the router looked up (lookup_ns and enqueue_ns are theirs) */
    uint64_t lookup_ns; /* tracking_ns included */
    uint64_t enqueue_ns;
    uint64_t staging_wait_ns; /* of enqueue_ns */
    uint64_t dma_ns; /* measured DMAs of compressed bytes */
    uint64_t dma_bytes;
    uint64_t decode_ns;
    uint64_t decoded_bytes;
    uint64_t plans;        /* the compressor's plans for the region (a search or a reused plan) */
    uint64_t plans_reused; /* of those, its allocation site's last plan reused */
    uint64_t plan_ns;
    uint64_t builds;       /* shadow builds finished (compressed or found incompressible) */
    uint64_t build_ns;
    uint64_t shadow_bytes; /* held now */
    uint64_t shadow_peak;  /* most held at once */
} IbpLedgerTotals;

/* Bytes that crossed PCIe: compressed_out plus all raw bytes. */
uint64_t ibp_ledger_totals_sent(const IbpLedgerTotals *t);
/* Sum of the raw bytes of all reasons. */
uint64_t ibp_ledger_totals_raw(const IbpLedgerTotals *t);

typedef struct IbpLedgerRegionInfo {
    uint64_t id; /* 1, 2, ... in the order regions were opened */
    uintptr_t base;
    uint64_t size;
    uint32_t flags;
    uint32_t site_id;
    int freed;
    uint64_t opened_ns; /* since the ledger started, CLOCK_MONOTONIC */
    uint64_t closed_ns; /* 0 while live */
    IbpLedgerTotals totals;
} IbpLedgerRegionInfo;

typedef struct IbpLedgerSiteInfo {
    uint32_t id;
    int depth; /* frames used */
    uintptr_t frames[IBP_SITE_MAX_DEPTH];
    uint64_t regions;       /* regions opened at this site, merged ones included */
    uint64_t regions_live;  /* of those, not freed */
    IbpLedgerTotals totals; /* sum over its regions */
} IbpLedgerSiteInfo;

/* Everything a report needs, copied out of the ledger at one moment. */
typedef struct IbpLedgerSnapshot {
    uint64_t elapsed_ns;       /* since the ledger started */
    IbpLedgerTotals total;     /* untracked + every region, freed and merged ones included */
    IbpLedgerTotals untracked; /* copies whose source was no tracked region */
    uint64_t regions_merged;   /* freed regions only counted in their site */
    size_t region_count;
    IbpLedgerRegionInfo *regions; /* by id */
    size_t site_count;
    IbpLedgerSiteInfo *sites; /* by id; only sites with at least one region */
} IbpLedgerSnapshot;

/* Copies the ledger into a new snapshot.  Each counter is read atomically;
 * counters recorded while the snapshot is taken may or may not be in it.
 * Holds the ledger mutex (region open/close wait) only while copying; copies
 * never wait.  Returns 0, or -ENOMEM.  Not async-signal-safe. */
int ibp_ledger_snapshot(IbpLedgerSnapshot **out);
void ibp_ledger_snapshot_free(IbpLedgerSnapshot **snap);

/* Reads one region's counters (also after close, until it is merged).  For tests and the router. */
void ibp_ledger_region_read(const IbpLedgerRegion *region, IbpLedgerRegionInfo *out);

/* Nanoseconds since the ledger started (CLOCK_MONOTONIC). */
uint64_t ibp_ledger_elapsed_ns(void);

#endif /* IBP_REPORT_LEDGER_H */
