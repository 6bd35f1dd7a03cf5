/* SPDX-License-Identifier: MIT
 * ibpshim: codec internals shared by the planner, the block kernels and the dispatch. */
#ifndef IBP_CODEC_INTERNAL_H
#define IBP_CODEC_INTERNAL_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codec/format.h"
#include "ibpshim/codec.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the codec assumes a little-endian host"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* A contiguous run of variant bits: pext/pdep without BMI2 move one run at a time.  The run
 * sits at bits `bits` of the word and at those bits shifted down by gap (the invariant bits
 * below it) in the packed field, so each run is one shift and one and, independent of the others. */
typedef struct IbpBitRun {
    uint64_t bits;
    uint32_t gap;
} IbpBitRun;

/* One table entry of the pext/pdep kernels: all a word of one column with one selector needs,
 * side by side, so a word costs one table lookup instead of four. */
typedef struct IbpDecEntry {
    uint64_t vmask;
    uint64_t dvalue;
    uint32_t vbits;
    uint32_t xform; /* the column's transform byte */
} IbpDecEntry;

/* A column's mask sets for the encoder, padded to IBP_MAX_SETS with copies of set 1: the first
 * matching set wins, and a copy of set 1 matches only where set 1 does, so the padding never
 * changes the choice and the selection runs a fixed number of compares. */
typedef struct IbpEncEntry {
    uint64_t mask[IBP_MAX_SETS];
    uint64_t value[IBP_MAX_SETS];
} IbpEncEntry;

/* Largest group table a plan builds; above it (many columns with 2-byte words and 2-bit
 * selectors) the kernels go word by word. */
#define IBP_GROUP_TABLE_MAX ((size_t)256 * 1024)

/* Groups the kernels take per selector load: 7 groups of up to 8 selector bits fit the 57 bits a
 * 64-bit load at a byte boundary always holds. */
#define IBP_GROUP_RUN 7u

/* Per-lane tables of the vector kernels have this many elements past the last column, so a
 * 256-bit load at any column stays inside them. */
#define IBP_LANE_PAD 32u

struct IbpCodecPlan {
    uint32_t word_size;
    uint32_t columns;
    uint32_t row_words;
    uint32_t nsets;
    uint32_t sel_bits;
    uint32_t block_size;
    int any_xform;
    uint32_t carry_words; /* words of an index entry's carries (format.h), 0 when blocks carry none */
    int sel_flags;        /* blocks may take the flagged selector form (IBP_CODEC_PLAN_SELECTOR_FLAGS) */
    int top_coded;        /* blocks may take the top-byte coded form (IBP_CODEC_PLAN_TOP_CODED) */
    uint8_t *xform;  /* [C] */
    uint64_t *mask;  /* [K*C] invariant bits, set-major: index k * C + c */
    uint64_t *value; /* [K*C] their values (value & ~mask == 0) */
    /* Decode tables over selectors 0..K, index s * C + c.  Selector 0 (word stored whole) is
     * an entry like the others (no invariant bits), so kernels need no branch on it. */
    uint64_t *dvalue;    /* [(K+1)*C] invariant bit values */
    uint64_t *vmask;     /* [(K+1)*C] variant bits within the word */
    uint8_t *vbits;      /* [(K+1)*C] popcount(vmask) */
    uint32_t *run_first; /* [(K+1)*C] index of the first run in runs */
    uint8_t *nruns;      /* [(K+1)*C] */
    IbpBitRun *runs;
    /* The same as vmask/dvalue/vbits/xform, interleaved, column-major over every selector value
     * the selector width can hold ((1 << sel_bits) * C entries, index (c << sel_bits) + s): a
     * selector above K (corrupt data) reads an empty entry instead of past the table, and is
     * rejected once per row. */
    IbpDecEntry *dtab;
    IbpEncEntry *etab; /* [C] */
    /* Group table (NULL when larger than IBP_GROUP_TABLE_MAX).  Entry e describes the G = 8 / W
     * consecutive words of a group as one 64-bit word, for one starting column and one combination
     * of the G selectors, e = (c << group_sel_bits) | (the G selectors as they lie in the stream):
     * gtab[2e] holds their variant bits (the words' masks side by side), gtab[2e + 1] their
     * invariant values.  The fields of consecutive words follow each other in the payload, so one
     * pdep (decode) or pext (encode) with gtab[2e] moves the whole group, and its popcount is the
     * group's payload length.  Mask and value share a cache line. */
    uint64_t *gtab;
    uint32_t group_sel_bits; /* G * sel_bits */
    /* gcols[c * (IBP_GROUP_RUN + 1) + q] = 2 * (((c + q * G) mod C) << group_sel_bits): where in
     * gtab the q-th group of a run that starts at column c finds its column's entries. */
    uint32_t *gcols;
    /* The reference decoder's group table (NULL without gtab, or in plans built for cost only):
     * entry e (as in gtab) is rgtab[8e .. 8e + 7] = mask, value, then the masks of the six steps
     * of a shift network that deposits a group's field into its mask, shifts of 32, 16, 8, 4, 2
     * and 1 bits (see ibp_plan_expand_steps), so pdep costs the same for every mask, with no
     * branch; rgbits[e] = popcount(mask). */
    uint64_t *rgtab;
    uint8_t *rgbits;
    /* Lane tables: element e (W bytes each) describes column e mod C, for e < C + IBP_LANE_PAD, so
     * a vector load at element c gives the lanes of words starting at column c.  lane_zz,
     * lane_delta and lane_xor are all ones where the column has that transform, else zero;
     * lane_mask/lane_value hold mask set k of each column (set 1 repeated past K, as in etab),
     * lane_vbits its variant bits (W * 8 less the mask's bits) as a W-byte integer. */
    uint8_t *lanes; /* one allocation behind the pointers below */
    uint8_t *lane_zz;
    uint8_t *lane_delta;
    uint8_t *lane_xor;
    uint8_t *lane_mask[IBP_MAX_SETS];
    uint8_t *lane_value[IBP_MAX_SETS];
    uint8_t *lane_vbits[IBP_MAX_SETS];
    /* The allocation behind lane_vbits: in lanes, it made that one a third larger, and planning,
     * which builds a plan for every trial, touched fresh pages after glibc trimmed its heap
     * (ocr_rec_linear85: 17 times the page faults, 5% more time). */
    uint8_t *lanes_vbits;
    /* Byte shuffles of the 128-bit prefix scan that undoes predictors when C < 16 / W (see
     * block_avx2.h): scan_steps shifts by C, 2C, 4C lanes, then the carry from the vector before. */
    uint32_t scan_steps;
    uint8_t scan_ctrl[4][16];
    /* When C >= XL = 16 / W: the predecessors of a vector at word j are bytes [o, o + 16) of the
     * two vectors at j - pred_dist (pred_dist = XL * ceil(C / XL) words, o = (pred_dist - C) * W);
     * pred_lo and pred_hi shuffle them into place. */
    uint32_t pred_dist;
    uint8_t pred_lo[16];
    uint8_t pred_hi[16];
    /* Period-major undo of the transforms (block_avx2.h), 0 where it does not apply: vectors start
     * at column 0, so lane constants stay in registers.  period = k * C words, k periods per vector
     * when C is at most half a vector (their chains joined by period_steps shifts, then the carry
     * from the vector before), else one period over period_vecs (1 or 2) vectors.  period_wide: 256-
     * bit vectors (else 128).  period_idx: lane indices of the shifts by C, 2C, 4C lanes and of the
     * carry (index 3), as vpermd dwords (256-bit) or pshufb bytes (128-bit); period_keep: all ones
     * in the lanes each shift fills. */
    uint32_t period;
    uint32_t period_vecs;
    uint32_t period_steps;
    uint32_t period_wide;
    uint32_t xf_kinds; /* bit 0: some column zigzags; bit 1: some delta; bit 2: some xor */
    uint8_t period_idx[4][32];
    uint8_t period_keep[3][32];
    void *blob;
    size_t blob_len;
    double sample_ratio;
    size_t sample_bytes;
};

/* How the staged count pass's kernel routes a word to a set (IbpStageRoute.how). */
enum { IBP_ROUTE_ONE, IBP_ROUTE_SIGN, IBP_ROUTE_SETS, IBP_ROUTE_FREE };

/* The sets one column's words are routed to by the kernel stage: with IBP_ROUTE_SETS a word's set
 * is the first k + 1 (k < nsets) whose mask[k] bits equal value[k], 0 for none; IBP_ROUTE_FREE
 * takes the words of set 0 so found to set 1 and the rest to set 0; IBP_ROUTE_SIGN sends a word
 * to set 1 plus its top bit, IBP_ROUTE_ONE every word to set 1.  Words of sets below first (0 or
 * 1) are dropped. */
typedef struct IbpStageRoute {
    uint64_t mask[IBP_MAX_SETS];
    uint64_t value[IBP_MAX_SETS];
    uint32_t nsets;
    uint32_t how;
    uint32_t first;
} IbpStageRoute;

/* The stage kernels (reference and SIMD) are compiled for the routings and set counts the planner
 * asks for: IBP_STAGE_EACH(X, W) applies X(W, how, K) to each of them, IBP_STAGE_KEY numbers one,
 * and ibp_stage_sets() is a route's K (0 where the routing has no sets). */
#define IBP_STAGE_KEY(W, HOW, K) (((W)*4u + (HOW)) * 4u + (K))
#define IBP_STAGE_EACH(X, W)                                                                                 \
    X(W, IBP_ROUTE_ONE, 0u)                                                                                  \
    X(W, IBP_ROUTE_SIGN, 0u)                                                                                 \
    X(W, IBP_ROUTE_FREE, 1u)                                                                                 \
    X(W, IBP_ROUTE_FREE, 2u)                                                                                 \
    X(W, IBP_ROUTE_SETS, 2u)                                                                                 \
    X(W, IBP_ROUTE_SETS, 3u)

static inline uint32_t ibp_stage_sets(const IbpStageRoute *rt)
{
    return rt->how == IBP_ROUTE_SETS || rt->how == IBP_ROUTE_FREE ? rt->nsets : 0u;
}

/* The mask sets of ibp_assign's kernel, column by column as lanes: entry j (j < period + 8) of set
 * k is at k * stride + j and describes column j mod C; period is a multiple of C of at least 8, so
 * that eight entries from any j < period lie in the table.  bits: the variable bits of the mask.
 * For words of 2 and 4 bytes the same in 32-bit entries (else NULL). */
typedef struct IbpAssignTable {
    const uint64_t *mask;
    const uint64_t *value;
    const uint64_t *bits;
    const uint32_t *mask32;
    const uint32_t *value32;
    const uint32_t *bits32;
    size_t stride;
    uint32_t nsets;
    uint32_t period;
} IbpAssignTable;

/* The body of an assign kernel's entry point: calls fn(words, n, wbits, t, j0, base, run, K) with
 * the set count K and whether run is wanted (else NULL) as constants, so that each always-inline
 * fn unrolls its set loop and drops the run stores it does not need. */
#define IBP_ASSIGN_BY_SETS(fn, words, n, wbits, t, j0, base, run)                                            \
    switch ((t)->nsets * 2u + ((run) != NULL)) {                                                             \
    case 2:                                                                                                  \
        return fn(words, n, wbits, t, j0, base, NULL, 1u);                                                   \
    case 3:                                                                                                  \
        return fn(words, n, wbits, t, j0, base, run, 1u);                                                    \
    case 4:                                                                                                  \
        return fn(words, n, wbits, t, j0, base, NULL, 2u);                                                   \
    case 5:                                                                                                  \
        return fn(words, n, wbits, t, j0, base, run, 2u);                                                    \
    case 6:                                                                                                  \
        return fn(words, n, wbits, t, j0, base, NULL, 3u);                                                   \
    default:                                                                                                 \
        return fn(words, n, wbits, t, j0, base, run, 3u);                                                    \
    }

/* Bytes of the rank tables of one byte of a word: rank[v] (v < 16) is the lowest rank among the
 * bits set in low nibble v, rank[16 + v] among those set in high nibble v, w * 8 for v = 0; a
 * byte's lowest rank is the lower of its two nibbles'. */
#define IBP_RANK_NIBBLES 32u

/* The agreement length of d (a word xor its majority, w bytes) by the nibble tables t of each of
 * its bytes: the lowest rank among its bits set, w * 8 for none. */
static inline __attribute__((always_inline)) uint32_t ibp_rank_agree(uint64_t d, const uint32_t w,
                                                                     const uint8_t *t)
{
    uint32_t agree = 255u;
#pragma GCC unroll 8
    for (uint32_t q = 0; q < w; q++) {
        const uint32_t b = (uint32_t)(d >> (8u * q)) & 0xffu;
        const uint32_t lo = t[q * IBP_RANK_NIBBLES + (b & 15u)];
        const uint32_t hi = t[q * IBP_RANK_NIBBLES + 16u + (b >> 4)];
        const uint32_t r = lo < hi ? lo : hi;
        agree = r < agree ? r : agree;
    }
    return agree;
}

/* Block kernels, one set per instruction-set level. */
typedef struct IbpCodecKernels {
    const char *name;
    int (*encode)(const IbpCodecPlan *plan, const uint8_t *src, uint32_t len, uint32_t phase, uint8_t *dst,
                  size_t cap, size_t *comp_len);
    int (*decode)(const IbpCodecPlan *plan, const uint8_t *blk, size_t blk_len, uint32_t orig_len,
                  uint8_t *dst, uint32_t limit);
    /* Encoded size of a block without writing it (planner). */
    uint64_t (*cost)(const IbpCodecPlan *plan, const uint8_t *src, uint32_t len, uint32_t phase);
    uint32_t (*crc32c)(uint32_t crc, const void *data, size_t len);
    /* Adds to hist[a] how many of the n words of w bytes packed at words (little-endian) have
     * agreement length a with the majority maj: the lowest rank among the bits where they differ
     * from it, w * 8 where none.  rank holds the nibble tables of each byte of the word
     * (IBP_RANK_NIBBLES, ibp_rank_agree) (planner). */
    void (*agree_hist)(const uint8_t *words, uint32_t n, uint32_t w, uint64_t maj, const uint8_t *rank,
                       uint32_t *hist);
    /* eq[lag] for lag in [1, lag_max] (lag_max < n): how many of the bytes p[i], i below
     * (n - lag) rounded down to a multiple of 8, equal p[i + lag] (the planner's period search). */
    void (*lag_equal)(const uint8_t *p, size_t n, uint32_t lag_max, uint32_t *eq);
    /* The staged count pass's word loop (planner): the n words words[0], words[stride], ... (w
     * bytes each, in 64-bit words) routed to sets 0 .. IBP_MAX_SETS by rt, each it keeps appended, packed at
     * w bytes, to its set's buffer: set r's next word goes to to[r] + fill[r] * w and counts in
     * fill[r].  Every fill is below cap on entry; returns after the word that brings one to cap,
     * or after all n: the words taken. */
    uint32_t (*stage)(const uint64_t *words, size_t stride, uint32_t n, uint32_t w, const IbpStageRoute *rt,
                      uint8_t *const *to, uint32_t *fill, uint32_t cap);
    /* ibp_plan_count_packed (planner): the staged words' bit counts. */
    void (*count_bits)(const uint8_t *buf, size_t nvec, uint32_t wbits, uint32_t *cnt);
    /* ibp_assign's word loop (planner): the sum of the sizes of the n words at words, each the bits
     * of the first set of t whose mask it matches, wbits where none does; word i takes entry
     * (j0 + i) mod period.  With run, also run[i] = base + the sizes of words 0 .. i (mod 2^32).
     * The planner passes a chunk at a time: n below 2^24, so that vector levels may sum 32-bit
     * lanes. */
    uint64_t (*assign)(const uint64_t *words, size_t n, uint32_t wbits, const IbpAssignTable *t, uint32_t j0,
                       uint32_t base, uint32_t *run);
    /* ibp_pick_rows' sum for one row length (planner): over the nrows rows whose sizes are
     * sums[0 .. nrows), min(row_sel + the row's size, row_raw) + 1 (the row packed or raw, and its
     * flag); and the sizes of rows twice as long, sums[q] = sums[2q] + sums[2q + 1] for q below
     * nrows / 2, in place.  The rows of one chunk: their bits sum below 2^32. */
    uint64_t (*row_level)(uint32_t *sums, size_t nrows, uint32_t row_sel, uint32_t row_raw);
    /* The planner's loads: the nw words of w bytes at p into out, one a 64-bit word (widen), and
     * the same with transform xf (not none) in every column, predicted from the word c_count
     * before (from 0 for the first c_count) (xf_widen). */
    void (*widen)(const uint8_t *p, uint32_t nw, uint32_t w, uint64_t *out);
    void (*xf_widen)(const uint8_t *p, uint32_t nw, uint32_t w, uint32_t xf, uint32_t c_count, uint64_t *out);
} IbpCodecKernels;

const IbpCodecKernels *ibp_codec_kernels(void);
const IbpCodecKernels *ibp_codec_kernels_reference(void);

/* ---- Flagged selectors (selflags.c) ---- */

/* The flagged form of a block's sbits bits of fixed-width selectors at sel (the block's row flags
 * at rowflags, its first word in column phase) written to out: its length, a multiple of 16, or 0
 * when it would not be shorter than limit bytes (out then unwritten). */
uint32_t ibp_selflags_encode(const IbpCodecPlan *p, const uint8_t *rowflags, uint32_t nwords, uint32_t phase,
                             const uint8_t *sel, uint64_t sbits, uint8_t *out, uint32_t limit);
/* A copy of the block at blk (flag IBP_BLOCK_SELFLAGS) with fixed-width selectors, allocated in
 * *out (*out_len bytes).  0, -EBADMSG for a malformed block or section, -ENOMEM. */
int ibp_selflags_unflag(const IbpCodecPlan *p, const uint8_t *blk, size_t blk_len, uint32_t orig_len,
                        uint8_t **out, size_t *out_len);
/* k->decode of the block, through ibp_selflags_unflag when it has the flagged form, or the
 * top-byte coded form's decoder. */
int ibp_block_decode_any(const IbpCodecKernels *k, const IbpCodecPlan *p, const uint8_t *blk, size_t blk_len,
                         uint32_t orig_len, uint8_t *dst, uint32_t limit);

/* ---- Top-byte coded blocks (topcode.c) ---- */

/* k->encode of the block, then, for plans with top_coded, the top-byte coded form in its place
 * where that is shorter.  Same contract as k->encode. */
int ibp_block_encode_any(const IbpCodecKernels *k, const IbpCodecPlan *p, const uint8_t *src, uint32_t len,
                         uint32_t phase, uint8_t *dst, size_t cap, size_t *comp_len);
/* Bytes [0, limit) of a block with the flag IBP_BLOCK_TOPCODED (header h, read from blk).  0, or
 * -EBADMSG when the block or its run is malformed, -ENOMEM. */
int ibp_top_block_decode(const IbpBlockHeader *h, const uint8_t *blk, size_t blk_len, uint32_t orig_len,
                         uint8_t *dst, uint32_t limit);

/* Every level this CPU can run, the reference first, whether or not dispatch would pick it (so
 * tests compare each with the reference): fills up to cap entries, returns how many there are. */
size_t ibp_codec_kernels_levels(const IbpCodecKernels **levels, size_t cap);

extern const IbpCodecKernels ibp_codec_kernels_ref;
void ibp_codec_agree_hist_ref(const uint8_t *words, uint32_t n, uint32_t w, uint64_t maj, const uint8_t *rank,
                              uint32_t *hist);
void ibp_codec_lag_equal_ref(const uint8_t *p, size_t n, uint32_t lag_max, uint32_t *eq);
uint64_t ibp_codec_assign_ref(const uint64_t *words, size_t n, uint32_t wbits, const IbpAssignTable *t,
                              uint32_t j0, uint32_t base, uint32_t *run);
uint64_t ibp_codec_row_level_ref(uint32_t *sums, size_t nrows, uint32_t row_sel, uint32_t row_raw);
/* row_level's rows [from, nrows) and pairs [from / 2, nrows / 2), from even: what a vector kernel
 * leaves after its whole steps (the pairs before from / 2 written, the rows from `from` unread). */
uint64_t ibp_codec_row_level_from(uint32_t *sums, size_t from, size_t nrows, uint32_t row_sel,
                                  uint32_t row_raw);
void ibp_codec_widen_ref(const uint8_t *p, uint32_t nw, uint32_t w, uint64_t *out);
void ibp_codec_xf_widen_ref(const uint8_t *p, uint32_t nw, uint32_t w, uint32_t xf, uint32_t c_count,
                            uint64_t *out);
uint32_t ibp_codec_stage_ref(const uint64_t *words, size_t stride, uint32_t n, uint32_t w,
                             const IbpStageRoute *rt, uint8_t *const *to, uint32_t *fill, uint32_t cap);
/* The equal bytes among p[i] and p[i + lag] for i in [i0, i1) (a multiple of 8 apart), 8 at a
 * time: what the vector levels of lag_equal leave. */
uint32_t ibp_codec_lag_equal_tail(const uint8_t *p, size_t i0, size_t i1, uint32_t lag);
extern const IbpCodecKernels ibp_codec_kernels_bmi2;
extern const IbpCodecKernels ibp_codec_kernels_avx2;

/* Builds a plan from explicit parameters.  xform may be NULL (no transforms); mask/value hold
 * nsets * columns entries, set-major.  Sorts nothing: the encoder takes the first matching set. */
int ibp_codec_plan_build(uint32_t word_size, uint32_t columns, uint32_t row_words, uint32_t nsets,
                         uint32_t block_size, const uint8_t *xform, const uint64_t *mask,
                         const uint64_t *value, IbpCodecPlan **out);

/* The same for plans only asked for their cost (the planner's candidates): skips the tables
 * only decoding needs and that take long to build. */
int ibp_codec_plan_build_lite(uint32_t word_size, uint32_t columns, uint32_t row_words, uint32_t nsets,
                              uint32_t block_size, const uint8_t *xform, const uint64_t *mask,
                              const uint64_t *value, IbpCodecPlan **out);

/* The fewest bits one mask set can leave n words of wbits bits whose bit counts (words with each
 * bit set) are cnt[0 .. wbits): a mask of m bits saves m bits of each word that matches it, and
 * no more words match m bits than agree with the majority on the m-th most agreeing bit alone.
 * The planner skips a transform's fit where this shows it cannot pay. */
uint64_t ibp_plan_bits_bound(const uint32_t *cnt, uint32_t wbits, uint32_t n);

/* Adds to cnt[b] (b < wbits) how many of the words packed in the nvec 16-byte vectors at buf
 * (128 / wbits words of wbits bits a vector, little-endian) have bit b set.  The planner's count
 * pass counts each (set, column)'s words so. */
void ibp_plan_count_packed(const uint8_t *buf, size_t nvec, uint32_t wbits, uint32_t *cnt);

/* Byte size of a block's worst case, as ibp_codec_block_bound() but for internal callers. */
size_t ibp_codec_bound_for(const IbpCodecPlan *plan, size_t orig_len);

uint32_t ibp_codec_crc32c_ref(uint32_t crc, const void *data, size_t len);

/* Constant-size copies compile to single moves; a memcpy of a variable size would be a call. */
static inline uint64_t ibp_load_word(const uint8_t *p, uint32_t word_size)
{
    uint16_t v16;
    uint32_t v32;
    uint64_t v64;
    switch (word_size) {
    case 2:
        memcpy(&v16, p, 2);
        return v16;
    case 4:
        memcpy(&v32, p, 4);
        return v32;
    default:
        memcpy(&v64, p, 8);
        return v64;
    }
}

static inline void ibp_store_word(uint8_t *p, uint64_t v, uint32_t word_size)
{
    const uint16_t v16 = (uint16_t)v;
    const uint32_t v32 = (uint32_t)v;
    switch (word_size) {
    case 2:
        memcpy(p, &v16, 2);
        break;
    case 4:
        memcpy(p, &v32, 4);
        break;
    default:
        memcpy(p, &v, 8);
        break;
    }
}

static inline uint64_t ibp_load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline void ibp_store64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

/* Little-endian bit writer.  Stores whole 64-bit words; the caller sizes sections so that the
 * last store stays inside them (see ibp_codec_bound_for). */
typedef struct IbpBitWriter {
    uint8_t *start;
    uint8_t *p;
    uint64_t acc;
    uint32_t n;
} IbpBitWriter;

static inline void ibp_bw_init(IbpBitWriter *w, uint8_t *start)
{
    w->start = start;
    w->p = start;
    w->acc = 0;
    w->n = 0;
}

/* v must have no bits at or above nb; nb <= 64. */
static inline void ibp_bw_put(IbpBitWriter *w, uint64_t v, uint32_t nb)
{
    if (nb == 0)
        return;
    w->acc |= v << w->n;
    const uint32_t n2 = w->n + nb;
    if (n2 >= 64) {
        ibp_store64(w->p, w->acc);
        w->p += 8;
        w->n = n2 - 64;
        w->acc = w->n ? v >> (nb - w->n) : 0;
    } else {
        w->n = n2;
    }
}

/* Writes the pending bits (as a whole zero-padded word) and returns the stream's length in bits. */
static inline uint64_t ibp_bw_finish(IbpBitWriter *w)
{
    const uint64_t bits = (uint64_t)(w->p - w->start) * 8u + w->n;
    if (w->n)
        ibp_store64(w->p, w->acc);
    return bits;
}

/* Branch-free payload writer: after every field the accumulator goes out with one 64-bit store
 * and the pointer moves over its whole bytes, so at most 7 bits stay pending (already stored)
 * and a field of up to 57 bits always fits.  Writes the same stream as IbpBitWriter, with more
 * (overlapping) stores and no final flush.  Stores reach 16 bytes past the stream's end (the
 * 8-byte-word writer in block_fast.h stores two words), which ibp_codec_bound_for leaves free. */
typedef struct IbpFastWriter {
    uint8_t *p;
    uint64_t acc;
    uint32_t n;
} IbpFastWriter;

static inline void ibp_fw_put(IbpFastWriter *fw, uint64_t v, uint32_t nb)
{
    fw->acc |= v << fw->n;
    fw->n += nb;
    ibp_store64(fw->p, fw->acc);
    const uint32_t whole = fw->n & ~7u; /* at most 7 + 57 bits: below 64 */
    fw->p += whole >> 3;
    fw->acc >>= whole;
    fw->n &= 7u;
}

/* Bounds-checked little-endian bit reader.  A read past the end sets err and yields 0, so a
 * corrupt block costs a check per row, not per read. */
typedef struct IbpBitReader {
    const uint8_t *base;
    uint64_t bytes;
    uint64_t pos; /* bits */
    uint64_t end; /* bits */
    int err;
} IbpBitReader;

static inline void ibp_br_init(IbpBitReader *r, const uint8_t *base, uint64_t bytes)
{
    r->base = base;
    r->bytes = bytes;
    r->pos = 0;
    r->end = bytes * 8u;
    r->err = 0;
}

static inline uint64_t ibp_low_mask(uint32_t nb)
{
    return nb ? ~(uint64_t)0 >> (64u - nb) : 0;
}

static inline uint64_t ibp_br_read(IbpBitReader *r, uint32_t nb)
{
    if (nb == 0)
        return 0;
    if (r->end - r->pos < nb) {
        r->err = 1;
        return 0;
    }
    const uint64_t byte = r->pos >> 3;
    const uint32_t sh = (uint32_t)(r->pos & 7u);
    uint64_t lo;
    uint64_t hi;
    if (byte + 9u <= r->bytes) {
        lo = ibp_load64(r->base + byte);
        hi = r->base[byte + 8u];
    } else {
        uint8_t tmp[9] = {0};
        memcpy(tmp, r->base + byte, (size_t)(r->bytes - byte));
        lo = ibp_load64(tmp);
        hi = tmp[8];
    }
    uint64_t v = lo >> sh;
    if (sh + nb > 64u)
        v |= hi << (64u - sh);
    r->pos += nb;
    return v & ibp_low_mask(nb);
}

/* Unchecked read for callers that proved 9 readable bytes at pos / 8.  word_size bounds nb, so
 * for 2- and 4-byte words the second load is compiled out. */
static inline uint64_t ibp_peek(const uint8_t *base, uint64_t pos, uint32_t nb, uint32_t word_size)
{
    const uint64_t byte = pos >> 3;
    const uint32_t sh = (uint32_t)(pos & 7u);
    uint64_t v = ibp_load64(base + byte) >> sh;
    if (word_size == 8u && sh + nb > 64u)
        v |= (uint64_t)base[byte + 8u] << (64u - sh);
    return v & ibp_low_mask(nb);
}

/* Whether a block header's lengths fit: orig_len the one expected, comp_len within the blk_len
 * readable bytes, at least a header, a multiple of IBP_ALIGN.  Every form checks this first. */
static inline int ibp_block_sized(const IbpBlockHeader *h, size_t blk_len, uint32_t orig_len)
{
    return h->orig_len == orig_len && h->comp_len <= blk_len && h->comp_len >= IBP_BLOCK_HEADER_SIZE &&
           !(h->comp_len & (IBP_ALIGN - 1u));
}

/* Reads and checks a block's header against the block's expected original length and the plan's
 * shape (W, R, C).  Returns -EINVAL for a limit beyond orig_len, -EBADMSG for a corrupt header
 * (FORMAT.md lists what is rejected), else 1 with *h filled: the block is RAW or its sections lie
 * in order inside it. */
static inline int ibp_block_open(const IbpCodecPlan *p, const uint8_t *blk, size_t blk_len, uint32_t orig_len,
                                 uint32_t limit, IbpBlockHeader *h)
{
    const uint32_t word_size = p->word_size, row_words = p->row_words, columns = p->columns;
    if (limit > orig_len)
        return -EINVAL;
    if (blk_len < IBP_BLOCK_HEADER_SIZE)
        return -EBADMSG;
    memcpy(h, blk, sizeof(*h));
    if (!ibp_block_sized(h, blk_len, orig_len))
        return -EBADMSG;
    if (h->flags == IBP_BLOCK_RAW)
        return (uint64_t)IBP_BLOCK_HEADER_SIZE + orig_len > h->comp_len ? -EBADMSG : 1;
    const uint32_t nwords = orig_len / word_size;
    const uint32_t tail = orig_len % word_size;
    const uint32_t nrows = (nwords + row_words - 1u) / row_words;
    const uint32_t index_len = h->flags & IBP_BLOCK_INDEXED ? ibp_fmt_index_len(nwords) : 0u;
    const uint32_t carry_len =
        h->flags & IBP_BLOCK_CARRIES ? ibp_fmt_carry_len(nwords, p->carry_words, word_size) : 0u;
    const uint32_t layout = h->flags & ~IBP_BLOCK_SELFLAGS;
    if ((layout != 0 && layout != IBP_BLOCK_INDEXED &&
         !(layout == (IBP_BLOCK_INDEXED | IBP_BLOCK_CARRIES) && p->carry_words)) ||
        h->col_phase >= columns || h->rowflag_off != IBP_BLOCK_HEADER_SIZE + index_len + carry_len ||
        (uint64_t)h->rowflag_off + (nrows + 7u) / 8u > h->payload_off || h->payload_off > h->sel_off ||
        h->sel_off > h->tail_off || (uint64_t)h->tail_off + tail > h->comp_len)
        return -EBADMSG;
    return 1;
}

/* ---- The group index (format.h): written by every encoder, checked by every decoder ---- */

/* Bytes before a packed block's row flags: the header, the group index and its carries. */
static inline uint32_t ibp_block_meta_len(const IbpCodecPlan *p, uint32_t nwords)
{
    return IBP_BLOCK_HEADER_SIZE + ibp_fmt_index_len(nwords) +
           ibp_fmt_carry_len(nwords, p->carry_words, p->word_size);
}

/* Runs the statements given last for each carry of a block of nwords words starting in column
 * phase, in order: word j of the block is the carry at byte `at` of the carries section. */
#define IBP_CARRY_EACH(p, nwords, phase, j, at, ...)                                                         \
    do {                                                                                                     \
        uint32_t at = 0;                                                                                     \
        for (uint32_t g_ = 1; (p)->carry_words && (uint64_t)g_ * IBP_INDEX_WORDS < (nwords); g_++)           \
            for (uint32_t j = g_ * IBP_INDEX_WORDS - (p)->columns; j < g_ * IBP_INDEX_WORDS; j++)            \
                if ((p)->xform[((phase) + j) % (p)->columns] & IBP_XF_PRED_MASK) {                           \
                    __VA_ARGS__;                                                                             \
                    at += (p)->word_size;                                                                    \
                }                                                                                            \
    } while (0)

/* Decoder, once words [0, limit / W) of the block are in dst: checks the carries of the entries
 * whose predecessors all lie there.  0, or -EBADMSG when one differs from the decoded word. */
static inline int ibp_carry_check(const IbpCodecPlan *p, const uint8_t *blk, const IbpBlockHeader *h,
                                  const uint8_t *dst, uint32_t limit)
{
    if (!(h->flags & IBP_BLOCK_CARRIES))
        return 0;
    const uint32_t w = p->word_size;
    const uint32_t nwords = h->orig_len / w;
    const uint8_t *carries = blk + IBP_BLOCK_HEADER_SIZE + ibp_fmt_index_len(nwords);
    int bad = 0;
    IBP_CARRY_EACH(p, nwords, h->col_phase, j, at,
                   bad |=
                   (uint64_t)(j + 1u) * w <= limit && memcmp(carries + at, dst + (size_t)j * w, w) != 0);
    return bad ? -EBADMSG : 0;
}

/* Payload bits of the first m words of a row, the first in column col: m whole words for a raw
 * row; for a packed row, whose first selector is bit s0 of sel, the fields its selectors give, or
 * UINT64_MAX for a selector above K.  Selectors are 1 or 2 bits at multiples of their size, so
 * none straddles a byte. */
static inline uint64_t ibp_row_prefix_bits(const IbpCodecPlan *p, int packed, const uint8_t *sel, uint64_t s0,
                                           uint32_t m, uint32_t col)
{
    if (!packed)
        return (uint64_t)m * p->word_size * 8u;
    const uint32_t sb = p->sel_bits;
    const uint32_t c_count = p->columns;
    uint64_t bits = 0;
    for (uint32_t i = 0; i < m; i++) {
        const uint64_t at = s0 + (uint64_t)i * sb;
        const uint32_t s = (sel[at >> 3] >> (at & 7u)) & ((1u << sb) - 1u);
        if (s > p->nsets)
            return UINT64_MAX;
        bits += p->vbits[s * c_count + col];
        col = col + 1u == c_count ? 0u : col + 1u;
    }
    return bits;
}

/* A walk over a block's rows that meets its index entries: `next` is the next entry's word
 * (UINT32_MAX when none is left), so a row loop pays one compare a row. */
typedef struct IbpIndexWalk {
    const uint8_t *slots; /* entry g - 1 holds the offset of word g * IBP_INDEX_WORDS */
    uint8_t *out;         /* the same entries, for an encoder */
    uint32_t next;
    uint32_t nwords;
} IbpIndexWalk;

/* slots: the index, or NULL for a block without one; out: where an encoder writes it. */
static inline void ibp_index_walk_init(IbpIndexWalk *ix, const uint8_t *slots, uint8_t *out, uint32_t nwords)
{
    ix->slots = slots;
    ix->out = out;
    ix->nwords = nwords;
    ix->next = (slots || out) && nwords > IBP_INDEX_WORDS ? IBP_INDEX_WORDS : UINT32_MAX;
}

/* The walk's next entry, or UINT32_MAX past the last. */
static inline void ibp_index_step(IbpIndexWalk *ix)
{
    ix->next = ix->next + IBP_INDEX_WORDS < ix->nwords ? ix->next + IBP_INDEX_WORDS : UINT32_MAX;
}

/* Encoder, at the start of row [j0, j1) whose payload begins at bit pbits: the entries inside the
 * row get pbits now and the row's share before them in ibp_index_finish. */
static inline void ibp_index_mark(IbpIndexWalk *ix, uint32_t j1, uint64_t pbits)
{
    for (; ix->next < j1; ibp_index_step(ix)) {
        const uint32_t v = (uint32_t)pbits;
        memcpy(ix->out + 4u * (ix->next / IBP_INDEX_WORDS - 1u), &v, 4);
    }
}

/* Encoder, once the selectors lie at sel (flushed): adds to each entry the payload bits its row
 * holds before it.  rowflags: the block's row flags; phase: the block's first column.  Rows before
 * a packed row are whole, so its first selector follows theirs. */
static inline void ibp_index_finish(const IbpCodecPlan *p, uint8_t *slots, uint32_t nwords, uint32_t phase,
                                    const uint8_t *rowflags, const uint8_t *sel)
{
    const uint32_t r_len = p->row_words;
    uint64_t packed_rows = 0; /* packed rows before row r */
    uint32_t r = 0;
    for (uint32_t g = 1; (uint64_t)g * IBP_INDEX_WORDS < nwords; g++) {
        const uint32_t at = g * IBP_INDEX_WORDS;
        const uint32_t row = at / r_len;
        for (; r < row; r++)
            packed_rows += (rowflags[r / 8u] >> (r % 8u)) & 1u;
        const uint32_t j0 = row * r_len;
        const int packed = (rowflags[row / 8u] >> (row % 8u)) & 1u;
        const uint32_t col = (uint32_t)((phase + (uint64_t)j0) % p->columns);
        uint32_t v;
        memcpy(&v, slots + 4u * (g - 1u), 4);
        v += (uint32_t)ibp_row_prefix_bits(p, packed, sel, packed_rows * r_len * p->sel_bits, at - j0, col);
        memcpy(slots + 4u * (g - 1u), &v, 4);
    }
}

/* Decoder, at the start of row [j0, j1) (column col, packed or not), the payload and selector
 * readers at the row's first field and selector: checks the entries inside the row.  0, or
 * -EBADMSG when an entry disagrees with the fields or the selectors run past their stream. */
static inline int ibp_index_check(IbpIndexWalk *ix, const IbpCodecPlan *p, uint32_t j0, uint32_t j1,
                                  uint32_t col, int packed, uint64_t ppos, const IbpBitReader *sr)
{
    for (; ix->next < j1; ibp_index_step(ix)) {
        const uint32_t m = ix->next - j0;
        if (packed && sr->pos + (uint64_t)m * p->sel_bits > sr->end)
            return -EBADMSG;
        const uint64_t bits = ibp_row_prefix_bits(p, packed, sr->base, sr->pos, m, col);
        uint32_t have;
        memcpy(&have, ix->slots + 4u * (ix->next / IBP_INDEX_WORDS - 1u), 4);
        if (bits == UINT64_MAX || have != ppos + bits)
            return -EBADMSG;
    }
    return 0;
}

/* A column's transform xf of word x; prev is the word C before it (0 for the first C words) and
 * is read only by predictor transforms. */
static inline uint64_t ibp_xform(uint32_t xf, uint64_t x, uint64_t prev, uint32_t word_size)
{
    if (xf & IBP_XF_PRED_MASK)
        x = (xf & IBP_XF_PRED_MASK) == IBP_XF_PRED_DELTA ? (x - prev) & ibp_fmt_word_mask(word_size)
                                                         : x ^ prev;
    if (xf & IBP_XF_ZIGZAG)
        x = ibp_fmt_zigzag(x, word_size);
    return x;
}

/* Undoes a column's transform; the predictor reads word j - C, already written to dst. */
static inline uint64_t ibp_unxform(const IbpCodecPlan *p, uint64_t x, uint32_t col, uint32_t j,
                                   const uint8_t *dst, uint32_t word_size)
{
    const uint32_t xf = p->xform[col];
    if (xf & IBP_XF_ZIGZAG)
        x = ibp_fmt_unzigzag(x, word_size);
    if (xf & IBP_XF_PRED_MASK) {
        const uint64_t prev =
            j >= p->columns ? ibp_load_word(dst + (size_t)(j - p->columns) * word_size, word_size) : 0;
        x = (xf & IBP_XF_PRED_MASK) == IBP_XF_PRED_DELTA ? (x + prev) & ibp_fmt_word_mask(word_size)
                                                         : x ^ prev;
    }
    return x;
}

/* Lays out an encoded block once its payload (pbits bits at payload_off) and selectors (sbits
 * bits at sel_scratch) are written, and the row loop marked the group index (ibp_index_mark):
 * completes the index, moves the selectors after the payload, copies the tail, zeroes the
 * padding and writes the header; stores the block raw instead when that is not larger.  Shared
 * by every encoder level, so they cannot disagree on the layout. */
static inline int ibp_block_finish(const IbpCodecPlan *p, uint8_t *dst, const uint8_t *src, uint32_t len,
                                   uint32_t phase, uint32_t payload_off, uint64_t pbits, uint64_t sbits,
                                   const uint8_t *sel_scratch, size_t *comp_len)
{
    const uint32_t w = p->word_size;
    const uint32_t nwords = len / w;
    const uint32_t index_len = ibp_fmt_index_len(nwords);
    const uint32_t meta_len = ibp_block_meta_len(p, nwords);
    const uint32_t tail = len % w;
    const uint32_t raw_len = ibp_fmt_round16(IBP_BLOCK_HEADER_SIZE + len);
    const uint32_t pbytes = (uint32_t)((pbits + 7u) / 8u);
    uint32_t sbytes = (uint32_t)((sbits + 7u) / 8u);
    /* The flagged form where the plan allows it and it is shorter, written over the fixed one. */
    uint8_t *const flagged = p->sel_flags && sbits ? (uint8_t *)malloc(ibp_fmt_round16(sbytes)) : NULL;
    const uint32_t flagged_len = flagged ? ibp_selflags_encode(p, dst + meta_len, nwords, phase, sel_scratch,
                                                               sbits, flagged, ibp_fmt_round16(sbytes))
                                         : 0u;
    const uint32_t sel_off = payload_off + ibp_fmt_round16(pbytes);
    const uint32_t tail_off = sel_off + (flagged_len ? flagged_len : ibp_fmt_round16(sbytes));
    const uint32_t comp = ibp_fmt_round16(tail_off + tail);
    IbpBlockHeader h;

    if (comp >= raw_len) {
        free(flagged);
        memset(&h, 0, sizeof(h));
        h.orig_len = len;
        h.comp_len = raw_len;
        h.flags = IBP_BLOCK_RAW;
        memcpy(dst, &h, sizeof(h));
        memcpy(dst + IBP_BLOCK_HEADER_SIZE, src, len);
        memset(dst + IBP_BLOCK_HEADER_SIZE + len, 0, raw_len - IBP_BLOCK_HEADER_SIZE - len);
        *comp_len = raw_len;
        return 0;
    }
    ibp_index_finish(p, dst + IBP_BLOCK_HEADER_SIZE, nwords, phase, dst + meta_len, sel_scratch);
    uint8_t *const carries = dst + IBP_BLOCK_HEADER_SIZE + index_len; /* zeroed with the index */
    IBP_CARRY_EACH(p, nwords, phase, j, at, memcpy(carries + at, src + (size_t)j * w, w));
    memset(dst + payload_off + pbytes, 0, sel_off - payload_off - pbytes);
    if (flagged_len) {
        memcpy(dst + sel_off, flagged, flagged_len);
        sbytes = flagged_len;
    } else {
        memmove(dst + sel_off, sel_scratch, sbytes);
    }
    free(flagged);
    memset(dst + sel_off + sbytes, 0, tail_off - sel_off - sbytes);
    memcpy(dst + tail_off, src + (size_t)nwords * w, tail);
    memset(dst + tail_off + tail, 0, comp - tail_off - tail);

    h.orig_len = len;
    h.comp_len = comp;
    h.flags = IBP_BLOCK_INDEXED | (p->carry_words ? IBP_BLOCK_CARRIES : 0u) |
              (flagged_len ? IBP_BLOCK_SELFLAGS : 0u);
    h.col_phase = phase;
    h.rowflag_off = meta_len;
    h.payload_off = payload_off;
    h.sel_off = sel_off;
    h.tail_off = tail_off;
    memcpy(dst, &h, sizeof(h));
    *comp_len = comp;
    return 0;
}

#ifdef __cplusplus
}
#endif

#endif /* IBP_CODEC_INTERNAL_H */
