/* SPDX-License-Identifier: MIT
 * ibpshim: the shim's kernels per CUDA context, loaded once from the embedded images. */
#ifndef IBP_KERNELS_MODULE_H
#define IBP_KERNELS_MODULE_H

#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

/* X(id, entry-point name, the .cu source whose image defines it) */
#define IBP_KERNEL_LIST(X)                                                                                   \
    X(IBP_KERNEL_SELFTEST, "ibp_k_selftest", "selftest")                                                     \
    X(IBP_KERNEL_DECODE, "ibp_k_decode", "decode")                                                           \
    X(IBP_KERNEL_DECODE_SEG, "ibp_k_decode_seg", "decode")                                                   \
    X(IBP_KERNEL_DECODE_SEG1, "ibp_k_decode_seg1", "decode")                                                 \
    X(IBP_KERNEL_DECODE_SEG_INL, "ibp_k_decode_seg_inl", "decode")                                           \
    X(IBP_KERNEL_DECODE_SEGS, "ibp_k_decode_segs", "decode")                                                 \
    X(IBP_KERNEL_DECODE_SEGS_INL, "ibp_k_decode_segs_inl", "decode")                                         \
    X(IBP_KERNEL_DECODE_SEG1_INL, "ibp_k_decode_seg1_inl", "decode")                                         \
    X(IBP_KERNEL_DECODE_SEG1W8, "ibp_k_decode_seg1w8", "decode")                                             \
    X(IBP_KERNEL_DECODE_SEG1W8_INL, "ibp_k_decode_seg1w8_inl", "decode")                                     \
    X(IBP_KERNEL_DECODE_SEGW8, "ibp_k_decode_segw8", "decode")                                               \
    X(IBP_KERNEL_DECODE_SEGW8_INL, "ibp_k_decode_segw8_inl", "decode")                                       \
    X(IBP_KERNEL_DECODE_SEGP, "ibp_k_decode_segp", "decode")                                                 \
    X(IBP_KERNEL_DECODE_SEGPS, "ibp_k_decode_segps", "decode")                                               \
    X(IBP_KERNEL_DECODE_FIX, "ibp_k_decode_fix", "decode")                                                   \
    X(IBP_KERNEL_DECODE_COUNT, "ibp_k_decode_count", "decode")                                               \
    X(IBP_KERNEL_DECODE_UNFLAG, "ibp_k_decode_unflag", "decode")                                             \
    X(IBP_KERNEL_DECODE_TOP, "ibp_k_decode_top", "decode")                                                   \
    X(IBP_KERNEL_COPY_EDGES, "ibp_k_copy_edges", "decode")

typedef enum IbpKernelId {
#define IBP_KERNEL_ID(id, name, src) id,
    IBP_KERNEL_LIST(IBP_KERNEL_ID)
#undef IBP_KERNEL_ID
        IBP_KERNEL_COUNT
} IbpKernelId;

typedef struct IbpModule {
    CUcontext ctx;
    CUdevice device;
    int sm_count;
    int max_threads_per_block;
    unsigned segp_max_dynamic;  /* dynamic shared bytes ibp_k_decode_segp may take here (0: none) */
    unsigned segps_max_dynamic; /* the same for ibp_k_decode_segps */
    CUfunction fn[IBP_KERNEL_COUNT];
    /* word sizes (each size's bit) a segmented kernel stores its segments through shared memory
     * for here: launched with IBP_DECODE_VIA_BYTES(w) of it */
    unsigned char via_words[IBP_KERNEL_COUNT];
} IbpModule;

/* 1 when the library was built with its kernels embedded. */
int ibp_kernels_built(void);

/* Returns the kernels loaded into `ctx`, loading every embedded image the
 * first time a context is seen.  `ctx` must be current on the calling thread
 * and no stream of it may be capturing (module loads are not capturable).
 * Errors: -ENODEV (no driver), -ENOTSUP (built without kernels), -ENOENT (an
 * image lacks a kernel), -ENOSPC (too many contexts), -EIO (driver error).
 * Thread-safety: any thread; lookups of a known context take no lock.  The
 * returned module lives until process exit. */
int ibp_module_get(CUcontext ctx, const IbpModule **out);

/* Launches `kernel` on `stream`.  Returns 0 or -EIO. */
int ibp_kernel_launch(const IbpModule *mod, IbpKernelId kernel, unsigned grid, unsigned block,
                      unsigned shared_bytes, CUstream stream, void **params);

struct IbpDecodeArgs;

/* ibp_decode_launch flags */
#define IBP_DECODE_PRED 1u  /* the plan has predictor columns (codec IbpCodecPlanInfo xf_delta/xf_xor) */
#define IBP_DECODE_BLOCK 2u /* a CTA per block whatever the plan (tests compare the two decodes) */
/* Every packed block of the run has a group index (IBP_BLOCK_INDEXED, as the codec writes since
 * format version 2) and, where the plan's predictors call for them, its carries
 * (IBP_BLOCK_CARRIES, since version 3): no counting pass, no predictor fix-up.  Without it a run
 * of version-1 blocks is counted first; with it such blocks still decode, each CTA counting the
 * segments before its share itself. */
#define IBP_DECODE_INDEXED 4u
/* Blocks of the run may hold flagged selectors (codec/format.h IBP_BLOCK_SELFLAGS, from plans made
 * with IBP_CODEC_PLAN_SELECTOR_FLAGS): a->selx must then be 16-aligned device memory of
 * ibp_decode_selx_bytes() that no launch still in flight uses, and ibp_k_decode_unflag rewrites
 * their selectors there before the decode. */
#define IBP_DECODE_SELFLAGS 8u
/* Blocks of the run may be top-byte coded (codec/format.h IBP_BLOCK_TOPCODED, from plans made with
 * IBP_CODEC_PLAN_TOP_CODED): ibp_k_decode_top decodes them after the kernels above, which leave
 * them alone. */
#define IBP_DECODE_TOPCODED 16u
/* Every block of the run is top-byte coded or raw: ibp_k_decode_top alone decodes the run. */
#define IBP_DECODE_TOP_ONLY 32u

/* The flag above for a run that may hold top-byte coded blocks (any_top) and may hold packed
 * ones, neither raw nor top-byte coded (any_packed): none without the former, TOP_ONLY without the
 * latter. */
static inline unsigned ibp_decode_top_flag(int any_top, int any_packed)
{
    return !any_top ? 0u : any_packed ? IBP_DECODE_TOPCODED : IBP_DECODE_TOP_ONLY;
}

/* Enqueues on `stream` the decode of a->nblocks blocks of a plan of `word_size`-byte words and
 * `columns` columns.  A warp per 512-word segment of a block, so that a few blocks still occupy
 * every SM: ibp_k_decode_seg1 (one column; ibp_k_decode_seg1w8 for 8-byte words) and
 * ibp_k_decode_seg (more; ibp_k_decode_segw8 for 8-byte words) for plans without predictor
 * columns, ibp_k_decode_segp (then ibp_k_decode_fix, unless IBP_DECODE_INDEXED) for plans with
 * predictors of a period of at most IBP_DECODE_PRED_MAX_COLUMNS words; plans of several columns of
 * 2- and 4-byte words whose `nsets` mask sets make more than IBP_DECODE_PARTS_ENTRIES_MAX table
 * entries take ibp_k_decode_segs and ibp_k_decode_segps instead.  Those need a->scratch:
 * ibp_decode_scratch_bytes() of device memory that no other launch still in flight uses; given
 * it, runs of plans of several columns that are short against the grid and lack
 * IBP_DECODE_INDEXED are counted first by ibp_k_decode_count, so that no CTA counts the segments
 * of its first block that precede its share (the group index says where they end).  Without
 * scratch, predictor plans, and any plan with IBP_DECODE_BLOCK, go through ibp_k_decode, a CTA
 * per block, which decodes any plan.  a->comp must be 16-byte aligned (blocks and their sections
 * then are); a->flags is the launcher's.  max_ctas caps the grid (0: no cap).  Returns 0,
 * -EINVAL (a misaligned run, a word size other than 2, 4 or 8, IBP_DECODE_SELFLAGS without
 * a->selx) or -EIO. */
int ibp_decode_launch(const IbpModule *mod, const struct IbpDecodeArgs *a, unsigned word_size,
                      unsigned columns, unsigned nsets, unsigned flags, unsigned max_ctas, CUstream stream);

/* Device bytes (8-byte aligned) of a launch's scratch. */
size_t ibp_decode_scratch_bytes(const IbpModule *mod);

/* Runs ibp_k_selftest over `n` words on device `ordinal` through the primary
 * context and checks every word on the host.  Returns 0, or a negative errno
 * with the reason in why[] (-ENODEV no driver/device, -ENOTSUP no kernels,
 * -EIO a driver call failed, -EBADMSG wrong output). */
int ibp_kernels_selftest(int ordinal, uint32_t n, char *why, size_t why_len);

#endif /* IBP_KERNELS_MODULE_H */
