/* SPDX-License-Identifier: MIT
 * ibpshim: the policy engine: which regions are registered, when they are compressed, when
 * they stop being worth it, and the pieces of each host-to-device copy. */
#ifndef IBP_POLICY_ENGINE_H
#define IBP_POLICY_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "policy/registry.h"
#include "policy/shadow.h"
#include "policy/track.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct IbpPolicyParams {
    uint64_t min_bytes;          /* regions and copies below it are never compressed */
    unsigned min_copies;         /* copies of a region before it is compressed */
    double min_ratio;            /* blocks and regions compressing worse stay raw */
    uint64_t max_shadow_bytes;   /* pinned bytes all shadows may hold; 0 = no bound */
    IbpTrackBackend tracking;
    unsigned compressor_threads;
    double plan_reuse;           /* slack for reusing a site's last plan; < 0 = always plan */
    unsigned churn_limit;        /* 0 = never stop tracking */
    uint64_t churn_window_ns;
    int track_write_combined;
    int track_mapped;
    int track_shared;            /* also compress registered shared or file-backed mappings */
    int selector_flags;          /* plans may write flagged selectors (IBP_CODEC_PLAN_SELECTOR_FLAGS)... */
    double selector_flags_min_ratio; /* ...when they compress their region to at least this (0: always) */
    size_t selector_flags_min_copy;  /* ...and its largest copy before was at least this long (0: any) */
    int top_coded;                   /* plans may write top-byte coded blocks (IBP_CODEC_PLAN_TOP_CODED) */
    size_t block_bytes;          /* 0 = the codec's default */
    size_t min_run;              /* compressed runs shorter than this go raw */
    int manual;                  /* no compressor thread: ibp_policy_run_pending() does the work */
    IbpShadowOps ops;            /* pinned memory and fences */
    /* Events for the transfer report, each with the region's tag; any may be NULL.  Called from
     * the compressor thread or the copying thread, never with a policy lock a copy needs. */
    void (*on_shadow_bytes)(void *tag, int64_t delta);   /* pinned bytes held by the region's shadow */
    void (*on_evicted)(void *tag, uint64_t bytes);       /* a shadow dropped to respect the budget */
    void (*on_blocks)(void *tag, uint64_t invalidated, uint64_t recompressed);
    void (*on_tracking_ns)(void *tag, uint64_t ns);       /* time a copy spent asking the tracker */
    void (*on_planned)(void *tag, uint64_t ns, int reused); /* the region planned (reused: its site's plan) */
    void (*on_built)(void *tag, uint64_t ns);               /* its shadow built (planning not included) */
} IbpPolicyParams;

/* Why a copy (or part of it) goes raw. */
typedef enum IbpCopyWhy {
    IBP_COPY_COMPRESSED = 0,
    IBP_COPY_BELOW_THRESHOLD,
    IBP_COPY_NOT_TRACKED, /* source not inside one registered region */
    IBP_COPY_COLD,        /* region not hot yet, or being compressed */
    IBP_COPY_STALE,
    IBP_COPY_INCOMPRESSIBLE,
    IBP_COPY_CHURN,
    IBP_COPY_BUDGET,
    IBP_COPY_UNTRACKABLE, /* the tracker cannot cover the mapping */
    IBP_COPY_ERROR,
    IBP_COPY_SLOWER, /* compressed copies of the region measured slower than plain ones */
    IBP_COPY_WHY_COUNT
} IbpCopyWhy;

const char *ibp_copy_why_name(IbpCopyWhy why);

#define IBP_POLICY_MAX_PIECES 64
/* Copies that pass unplanned after one whose compressed pieces all measured slower. */
#define IBP_POLICY_SLOWER_SKIP 7u

typedef struct IbpPolicyRegion IbpPolicyRegion;

/* A planned host-to-device copy.  When ibp_policy_plan_h2d() returns 1 the plan holds the
 * region and its shadow until ibp_policy_plan_end(). */
typedef struct IbpCopyPlan {
    IbpCopyWhy why;              /* the reason when nothing goes compressed */
    void *tag;                   /* the region's tag, NULL when the source is in no region */
    IbpRegion *region;
    IbpPolicyRegion *pr;
    IbpShadow *shadow;
    uintptr_t region_base;
    uint64_t ticket;             /* the shadow's plan ticket */
    int probe;                   /* the first copy planned after copies passed as slower: time it */
    int slower; /* set by the sender: every compressed piece went raw as slower than a plain copy */
    int npieces;
    IbpPiece pieces[IBP_POLICY_MAX_PIECES];
} IbpCopyPlan;

/* Starts the engine with a copy of params.  Idempotent: later calls return -EALREADY.
 * The compressor thread starts on the first region that becomes hot. */
int ibp_policy_start(const IbpPolicyParams *params);

/* Stops the compressor thread and frees every shadow (process exit). */
void ibp_policy_stop(void);

/* A successful cudaHostAlloc/cudaMallocHost/cudaHostRegister of [ptr, ptr + size).  Regions
 * below min_bytes or write-combined (unless allowed) are not registered.  Returns 1 when
 * registered, 0 when not, or a negative errno (the allocation itself stays valid).  `tag` is
 * the caller's per-region pointer (its report entry), handed back by plans and on_free. */
int ibp_policy_on_alloc(void *ptr, size_t size, uint32_t region_flags, uint64_t site, void *tag);

/* Before cudaFreeHost/cudaHostUnregister of ptr: waits for transfers reading its shadow and
 * removes the region.  Returns the tag given to ibp_policy_on_alloc(), or NULL for pointers
 * that were not registered. */
void *ibp_policy_on_free(void *ptr);

/* Plans the copy of [src, src + n).  Returns 1 when at least one piece goes compressed (the
 * caller enqueues the pieces in order, then calls ibp_policy_plan_end), 0 when the whole copy
 * should go raw (plan->why says why).  Never blocks on the compressor. */
int ibp_policy_plan_h2d(const void *src, size_t n, IbpCopyPlan *plan);

/* Ends a plan; fence (NULL when nothing compressed was enqueued) completes after the
 * transfers that read the shadow.  When plan->slower is set, the region's next
 * IBP_POLICY_SLOWER_SKIP copies go raw without a plan (IBP_COPY_SLOWER), and the one after them
 * is planned with plan->probe set. */
void ibp_policy_plan_end(IbpCopyPlan *plan, void *fence);

/* A device-to-host copy into [dst, dst + n) was enqueued; fence completes when it has landed
 * (NULL: it already has).  The policy keeps the range stale until then.  The engine owns the
 * fence from here on. */
void ibp_policy_on_d2h(void *dst, size_t n, void *fence);

/* 1 when any byte of [p, p + n) lies in a registered region: a device write there must be
 * reported with ibp_policy_on_d2h().  Lock-free. */
int ibp_policy_touches_region(const void *p, size_t n);
/* 1 when [p, p + n) lies wholly inside one registered region, whose bounds it sets.  Lock-free. */
int ibp_policy_region_bounds(const void *p, size_t n, uintptr_t *base, size_t *size);

/* Runs the compressor's work now on the calling thread (tests): compresses every hot region
 * and recompresses stable stale blocks.  Returns the number of regions compressed. */
int ibp_policy_run_pending(void);

typedef struct IbpPolicyStats {
    uint64_t regions_compressed;
    uint64_t regions_incompressible;
    uint64_t regions_churned;
    uint64_t regions_evicted;
    uint64_t bytes_evicted;
    uint64_t shadow_bytes;       /* held now */
    uint64_t shadow_bytes_peak;
    uint64_t build_ns;           /* time spent building shadows */
    uint64_t plans_made;         /* regions planned afresh */
    uint64_t plans_reused;       /* regions given the last plan of their allocation site */
} IbpPolicyStats;

void ibp_policy_stats(IbpPolicyStats *out);

#ifdef __cplusplus
}
#endif

#endif /* IBP_POLICY_ENGINE_H */
