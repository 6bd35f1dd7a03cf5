/* SPDX-License-Identifier: MIT
 * ibpshim: the shadow store: a region's compressed blocks in pinned memory, their validity,
 * and the pieces a copy can use right now. */
#ifndef IBP_POLICY_SHADOW_H
#define IBP_POLICY_SHADOW_H

#include <stddef.h>
#include <stdint.h>

#include "ibpshim/codec.h"
#include "policy/track.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the shadow needs from the outside world: pinned memory for the compressed blocks and
 * their offset table (the router DMAs both), and fences, one per transfer that read the shadow,
 * which must complete before the memory they read is rewritten or freed.  The shim backs these
 * with the CUDA driver (cuMemHostAlloc, events); tests back them with malloc and flags. */
typedef struct IbpShadowOps {
    /* Returns 0 and a 16-byte aligned block in *host, or a negative errno. */
    int (*alloc)(void *ctx, size_t size, void **host);
    void (*free)(void *ctx, void *host, size_t size);
    /* 1 when the fence has completed, 0 while pending. */
    int (*fence_done)(void *ctx, void *fence);
    /* Blocks until the fence has completed. */
    void (*fence_wait)(void *ctx, void *fence);
    /* Drops the shadow's reference to a completed fence. */
    void (*fence_release)(void *ctx, void *fence);
    void *ctx;
} IbpShadowOps;

typedef enum IbpBlockState {
    IBP_BLOCK_EMPTY = 0,        /* never encoded */
    IBP_BLOCK_VALID,            /* compressed bytes equal the source since the last tracker query */
    IBP_BLOCK_STALE,            /* a page of the block was written after it was encoded */
    IBP_BLOCK_INCOMPRESSIBLE,   /* does not compress below min_ratio: always sent raw */
} IbpBlockState;

typedef enum IbpPieceKind {
    IBP_PIECE_RAW = 0,          /* copy [off, off + len) of the source as it is */
    IBP_PIECE_COMPRESSED,       /* send the run, decode [off, off + len) from it */
} IbpPieceKind;

/* Why a raw piece is raw (mirrors the report's reasons). */
typedef enum IbpPieceWhy {
    IBP_PIECE_WHY_NONE = 0,
    IBP_PIECE_WHY_STALE,
    IBP_PIECE_WHY_INCOMPRESSIBLE,
    IBP_PIECE_WHY_EMPTY,        /* not encoded yet */
    IBP_PIECE_WHY_SHORT,        /* a compressed run too short to pay for its launch */
} IbpPieceWhy;

typedef struct IbpPiece {
    IbpPieceKind kind;
    IbpPieceWhy why;
    size_t off;                 /* original bytes [off, off + len) of the region */
    size_t len;
    /* Compressed pieces: blocks [first_block, first_block + nblocks) are contiguous in the slab,
     * starting at run (pinned) for run_len bytes; offsets points at the nblocks + 1 slab offsets
     * of those blocks (pinned; subtract offsets[0] for offsets within the run). */
    uint32_t first_block;
    uint32_t nblocks;
    const void *run;
    size_t run_len;
    const uint64_t *offsets;
} IbpPiece;

typedef struct IbpShadowStats {
    uint32_t nblocks;
    uint32_t valid;
    uint32_t stale;
    uint32_t misfit;             /* of the stale ones: re-encoded since their last write and too big
                                  * for their slot, so only a rebuild makes them valid again */
    uint32_t incompressible;
    uint32_t empty;
    size_t slab_bytes;           /* pinned bytes held (slab + offset table) */
    size_t valid_orig_bytes;     /* original bytes of valid blocks */
    size_t valid_comp_bytes;     /* their compressed size */
    uint64_t invalidations;      /* VALID -> STALE transitions */
    uint64_t recompressions;     /* STALE -> VALID transitions */
    uint64_t discarded;          /* encodings thrown away because a write raced with them */
} IbpShadowStats;

typedef struct IbpShadow IbpShadow;

/* Creates the shadow of the region [base, base + size) with `plan` (ownership passes to the
 * shadow, also on failure; *plan is NULLed).  No block is encoded yet.  Returns 0, -EINVAL,
 * -ENOMEM. */
int ibp_shadow_create(const IbpShadowOps *ops, const void *base, size_t size, IbpCodecPlan **plan,
                      IbpShadow **out);

/* Waits for every fence, frees the pinned memory and NULLs *shadow. */
void ibp_shadow_destroy(IbpShadow **shadow);

/* Encodes every block with `threads` threads and publishes those no write raced with.  The
 * caller armed `tracker` (covering the region) before calling.  Blocks whose encoded size is
 * above min_ratio of their original size become INCOMPRESSIBLE and take no slab space.
 * Returns 0, -ENOMEM, or -EALREADY when the shadow was already built.  The ratio of the whole
 * region (slab bytes / region bytes) is in *ratio. */
int ibp_shadow_build(IbpShadow *shadow, IbpTracker *tracker, unsigned threads, double min_ratio, double *ratio);

/* Unmaps the staging buffer builds keep for the next one (ibp_shadow_build keeps one of at most
 * 512 MiB, its pages MADV_FREE between builds) when it was kept at least idle_ns ago; 0 = now. */
void ibp_shadow_release_staging(uint64_t idle_ns);
/* Bytes of the staging buffer kept now. */
size_t ibp_shadow_staging_bytes(void);

/* Re-encodes up to max_blocks STALE blocks in place on `threads` threads (the caller's
 * included), publishing those that stayed clean while they were encoded and still fit their
 * slot.  A block is left for later while it was found written less than min_age_ns ago (likely
 * to be written again), and while a plan made before it went stale (or that plan's transfer)
 * may still read its slot; the rest of the region may be written and sent meanwhile, and plans
 * never wait for a pass.  A block whose content was found too big for its slot is a misfit: it
 * is skipped (not encoded again, not counted in max_blocks) until it is written again.  Passes
 * on one shadow run one at a time.  Returns the number of blocks made VALID, or -ENOMEM when
 * none was and scratch memory was short. */
int ibp_shadow_recompress(IbpShadow *shadow, IbpTracker *tracker, unsigned max_blocks, uint64_t min_age_ns,
                          unsigned threads);

/* Plans a copy of [off, off + len) of the region: asks the tracker which pages were written
 * (consuming and re-arming them: every block touching a written page becomes STALE), then
 * splits the range into compressed runs of VALID blocks and raw pieces.  Compressed runs whose
 * original length is below min_run become raw (why SHORT).  Writes at most max pieces: when
 * more would be needed, the last one covers the rest of the range raw (why STALE, since only
 * stale blocks cut a range into many pieces).  On success (return value = number of pieces)
 * the plan is a reader of the slab (no slot it may read is rewritten) until the caller calls
 * ibp_shadow_plan_end() once, with *ticket, after it enqueued the transfers.  Returns -EINVAL
 * for a range outside the region, -EBUSY when as many plans are being enqueued at once as the
 * shadow keeps readers (128).  Thread-safe. */
int ibp_shadow_plan(IbpShadow *shadow, IbpTracker *tracker, size_t off, size_t len, size_t min_run,
                    IbpPiece *pieces, size_t max, uint64_t *ticket);

/* Ends the plan that got `ticket`.  fence (may be NULL when no compressed piece was enqueued)
 * completes once every transfer that reads the slab has; the shadow keeps it until then. */
void ibp_shadow_plan_end(IbpShadow *shadow, uint64_t ticket, void *fence);

/* Marks every block touching [off, off + len) STALE: writes the tracker cannot see. */
void ibp_shadow_invalidate(IbpShadow *shadow, size_t off, size_t len);

void ibp_shadow_stats(IbpShadow *shadow, IbpShadowStats *out);

/* How often blocks were found written since the shadow was made, counting a block again each
 * time it is found written again (stale ones too); only its growth means anything. */
uint64_t ibp_shadow_writes(const IbpShadow *shadow);

/* Original bytes a copy of the whole region would send compressed now: VALID blocks (and STALE
 * ones too when stale_counts is 1, i.e. were they recompressed) in runs of at least min_run. */
size_t ibp_shadow_run_bytes(IbpShadow *shadow, size_t min_run, int stale_counts);
const IbpCodecPlan *ibp_shadow_codec_plan(const IbpShadow *shadow);
/* Whether any block of the shadow may hold flagged selectors (set before such a block is first
 * published, never cleared): its runs need IBP_DECODE_SELFLAGS. */
int ibp_shadow_any_flagged(const IbpShadow *shadow);
/* Whether any block may be top-byte coded (its runs need IBP_DECODE_TOPCODED), and whether any
 * may be packed, neither raw nor top-byte coded (without one, runs take IBP_DECODE_TOP_ONLY); the
 * same way set and never cleared. */
int ibp_shadow_any_topcoded(const IbpShadow *shadow);
int ibp_shadow_any_packed(const IbpShadow *shadow);

/* The plan blob (what the GPU decoder reads) in pinned memory, for DMA next to the runs.  NULL
 * before the shadow is built. */
const void *ibp_shadow_plan_blob(const IbpShadow *shadow, size_t *len);
size_t ibp_shadow_block_size(const IbpShadow *shadow);
IbpBlockState ibp_shadow_block_state(const IbpShadow *shadow, uint32_t block);

/* Decodes [off, off + len) of a plan's pieces on the CPU into dst, reading raw pieces from
 * the region: what the GPU path must deliver, for tests and the CPU fallback.  Returns 0 or a
 * codec error. */
int ibp_shadow_decode_pieces(const IbpShadow *shadow, const IbpPiece *pieces, size_t npieces, void *dst);

#ifdef __cplusplus
}
#endif

#endif /* IBP_POLICY_SHADOW_H */
