/* SPDX-License-Identifier: MIT
 * ibpshim: public API of the IBP codec (planner, block encoder and decoder, file form). */
#ifndef IBPSHIM_CODEC_H
#define IBPSHIM_CODEC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* All functions return 0 or a negative errno value:
 *   -EINVAL   bad argument (NULL pointer, size out of range, block not on a block boundary)
 *   -ENOMEM   allocation failed
 *   -ENOSPC   destination too small
 *   -EBADMSG  corrupt or truncated compressed data (never a crash, never an out-of-bounds access)
 * Thread safety: a plan is immutable once created; any number of threads may encode and decode
 * with the same plan at once.  The only process-wide state is the SIMD dispatch table,
 * initialised once on first use, and the force-reference switch. */

/* Bytes of original data per block unless the options say otherwise (see codec/FORMAT.md for
 * the measurements behind it). */
#define IBP_CODEC_DEFAULT_BLOCK_SIZE ((size_t)256 * 1024)

/* Plain IBP only: one mask set per column, no transforms. */
#define IBP_CODEC_PLAN_FAITHFUL 0x1u
/* Blocks may store their selectors in the flagged form where it is smaller (codec/FORMAT.md);
 * the GPU decodes such blocks after a pass that rewrites their selectors (kernels/module.h
 * IBP_DECODE_SELFLAGS). */
#define IBP_CODEC_PLAN_SELECTOR_FLAGS 0x2u
/* Blocks may take the top-byte coded form where it is smaller (codec/FORMAT.md): each word's top
 * byte coded at its entropy, in words of 2, 4 or 8 bytes, whichever the entropy says is shortest.
 * The GPU decodes such blocks with a kernel of their own (kernels/module.h IBP_DECODE_TOPCODED). */
#define IBP_CODEC_PLAN_TOP_CODED 0x4u

typedef struct IbpCodecPlan IbpCodecPlan;

typedef struct IbpCodecPlanOptions {
    size_t block_size;   /* 0: IBP_CODEC_DEFAULT_BLOCK_SIZE; else a power of two in [4 KiB, 16 MiB] */
    size_t sample_bytes; /* 0: automatic; bytes of the region the planner looks at */
    unsigned flags;      /* IBP_CODEC_PLAN_* */
    unsigned word_size;  /* 0: inferred; else 2, 4 or 8 */
    unsigned columns;    /* 0: inferred; else the row period in words */
    unsigned threads;    /* 0 or 1: the calling thread only; else threads judging candidates side by
                          * side (at most 16); the plan does not depend on it */
} IbpCodecPlanOptions;

/* What a plan decided, for tools and reports. */
typedef struct IbpCodecPlanInfo {
    unsigned word_size;
    unsigned columns;   /* mask period C in words */
    unsigned row_words; /* packed-or-raw unit R in words */
    unsigned nsets;     /* mask sets per column */
    size_t block_size;
    unsigned xf_zigzag; /* columns using each transform */
    unsigned xf_delta;
    unsigned xf_xor;
    unsigned invariant_bits; /* mean invariant bits per word over the columns of set 1, x100 */
    double sample_ratio;     /* encoded/original on the planner's sample, blocks only */
    size_t sample_bytes;
    size_t blob_len;
    int selector_flags; /* its blocks may hold flagged selectors (IBP_CODEC_PLAN_SELECTOR_FLAGS) */
    int top_coded;      /* its blocks may be top-byte coded (IBP_CODEC_PLAN_TOP_CODED) */
} IbpCodecPlanInfo;

/* ---- Plans ---- */

/* Chooses a plan from the bytes of a region (shape-blind: word size, row period, threshold,
 * mask sets and transforms are inferred).  opts may be NULL.  Reads len bytes of region.
 * The plan encodes any bytes losslessly, whatever it was planned on.  The calling thread keeps
 * the planner's work spaces (at most 32 MiB) for its next plan; they are freed when it exits. */
int ibp_codec_plan_create(const void *region, size_t len, const IbpCodecPlanOptions *opts,
                          IbpCodecPlan **out);

/* Rebuilds a plan from the bytes of ibp_codec_plan_blob().  -EBADMSG when malformed. */
int ibp_codec_plan_from_blob(const void *blob, size_t len, IbpCodecPlan **out);

/* ibp_codec_plan_from_blob, the plan's blocks taking the flagged selector form where it is
 * smaller when flags holds IBP_CODEC_PLAN_SELECTOR_FLAGS (a blob does not say); other flags are
 * ignored. */
int ibp_codec_plan_from_blob_flags(const void *blob, size_t len, unsigned flags, IbpCodecPlan **out);

/* A copy of plan whose blocks take the flagged selector form where it is smaller (on != 0, as with
 * IBP_CODEC_PLAN_SELECTOR_FLAGS) or never (on == 0); either copy decodes the blocks of the other. */
int ibp_codec_plan_with_selector_flags(const IbpCodecPlan *plan, int on, IbpCodecPlan **out);

/* Frees the plan and sets *plan to NULL.  NULL and *plan == NULL are fine. */
void ibp_codec_plan_destroy(IbpCodecPlan **plan);

/* The plan as a compact, position-independent blob (layout: IbpPlanHeader in codec/format.h),
 * what the GPU decoder needs.  Owned by the plan. */
const void *ibp_codec_plan_blob(const IbpCodecPlan *plan, size_t *len);

void ibp_codec_plan_info(const IbpCodecPlan *plan, IbpCodecPlanInfo *info);

/* How well a plan (made for other bytes) fits a region: the compressed / original size of the
 * sample a default plan_create of the region would take, as IbpCodecPlanInfo.sample_ratio
 * gives for the region the plan was made for (equal to it there).  One encode-speed pass over at
 * most 1 MiB.  -EINVAL for fewer than 64 bytes. */
int ibp_codec_plan_judge(const IbpCodecPlan *plan, const void *region, size_t len, double *ratio);

/* Writes the plan in words (json != 0: a JSON object) like snprintf: returns the length it
 * needed, writes at most cap bytes including the terminating NUL. */
int ibp_codec_plan_describe(const IbpCodecPlan *plan, int json, char *buf, size_t cap);

size_t ibp_codec_plan_block_size(const IbpCodecPlan *plan);

/* ---- Blocks ---- */

/* Worst-case encoded size of a block of orig_len bytes (orig_len <= block size). */
size_t ibp_codec_block_bound(const IbpCodecPlan *plan, size_t orig_len);

/* Encodes the block of len bytes that starts at byte region_off of its region (a multiple of
 * the plan's block size; len at most the block size) into dst.  cap must be at least
 * ibp_codec_block_bound(plan, len); a block that does not compress is stored raw.  *comp_len
 * receives the encoded size, a multiple of 16.  dst should be 16-byte aligned for the GPU. */
int ibp_codec_block_encode(const IbpCodecPlan *plan, const void *src, size_t len, size_t region_off,
                           void *dst, size_t cap, size_t *comp_len);

/* Decodes the first `limit` original bytes of a block (limit <= orig_len; orig_len is what the
 * caller expects the block to hold and must match the block's header) into dst.  blk_len is
 * the number of readable bytes at blk. */
int ibp_codec_block_decode(const IbpCodecPlan *plan, const void *blk, size_t blk_len, size_t orig_len,
                           void *dst, size_t limit);

/* ---- Regions ---- */

/* Encodes a whole region with `threads` threads (0 or 1: the calling thread only).  Block i
 * goes to dst[i], which holds cap_each >= ibp_codec_block_bound(plan, block size) bytes;
 * comp_lens[i] receives its size.  There are ceil(len / block size) blocks. */
int ibp_codec_region_encode(const IbpCodecPlan *plan, const void *src, size_t len, unsigned threads,
                            void *const *dst, size_t cap_each, size_t *comp_lens);

/* Decodes bytes [off, off + len) of a region of region_len bytes into dst, reading only the
 * blocks that cover the range.  blocks[i] and comp_lens[i] describe block i. */
int ibp_codec_region_decode_range(const IbpCodecPlan *plan, const void *const *blocks,
                                  const size_t *comp_lens, size_t region_len, size_t off, size_t len,
                                  void *dst);

/* ---- Stand-alone file form (magic, version, plan, block table with checksums) ---- */

/* Plans (opts may be NULL; on `threads` threads unless opts->threads is set), encodes with
 * `threads` threads and returns a malloc'd file image in *out (free() it). */
int ibp_codec_file_compress(const void *src, size_t len, const IbpCodecPlanOptions *opts, unsigned threads,
                            void **out, size_t *out_len);

/* Same with a plan the caller made. */
int ibp_codec_file_compress_with(const IbpCodecPlan *plan, const void *src, size_t len, unsigned threads,
                                 void **out, size_t *out_len);

/* Original size stored in a file image; -EBADMSG when the header is malformed. */
int ibp_codec_file_orig_len(const void *file, size_t len, uint64_t *orig_len);

/* Decodes a file image into dst (dst_cap >= its original size) and verifies every block's
 * checksum: -EBADMSG on any inconsistency. */
int ibp_codec_file_decompress(const void *file, size_t len, void *dst, size_t dst_cap);

/* ---- Dispatch ---- */

/* on != 0 makes every later call use the scalar reference code; also set by the environment
 * variable IBPSHIM_CODEC_FORCE_REFERENCE=1 at first use.  Thread-safe. */
void ibp_codec_force_reference(int on);

/* "reference" or the name of the SIMD path in use, e.g. "bmi2". */
const char *ibp_codec_backend(void);

#ifdef __cplusplus
}
#endif

#endif /* IBPSHIM_CODEC_H */
