/* SPDX-License-Identifier: MIT
 * ibpshim: the shape-blind planner: word size, row period, masks, mask sets and transforms. */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "codec/internal.h"

/* A plan of 2-byte words must be this much smaller than the best of wider words to be chosen. */
#define IBP_NARROW_MARGIN_PCT 2u
/* A plan with predictor columns over more than IBP_CARRY_MAX_COLUMNS columns keeps no carries in
 * its blocks, so the GPU decodes it a CTA per block: 10.3 GB/s at 8 MiB, 34.7 GB/s at 32 MiB on an
 * H100, slower than the link it is meant to save.  Such a plan wins only where every other trial
 * saves less than this percentage of the region (ibp_pick_best). */
#define IBP_LONG_PRED_SAVES_PCT 3u
#define IBP_SCREEN_BYTES ((size_t)96 * 1024) /* sample for ranking word size and period */
#define IBP_SAMPLE_MIN ((size_t)256 * 1024)  /* sample for the final choices */
#define IBP_SAMPLE_MAX ((size_t)1024 * 1024)
#define IBP_SAMPLE_CHUNKS 64u
/* Most bytes the trials fit masks to: each chunk of the fitting half cut to its share, so that
 * the fits still see every spot; their exact sizes on the whole judging half decide, and fitting
 * is most of a trial's cost. */
#define IBP_FIT_BYTES ((size_t)64 * 1024)
#define IBP_FIT_CHUNK_MIN ((size_t)1024) /* shortest piece of a chunk the fits take */
/* Most bytes the winner is refitted to and its sample ratio (and a reused plan's) is taken on:
 * every other pair of chunks where the sample is more. */
#define IBP_REFIT_BYTES ((size_t)512 * 1024)
#define IBP_CHUNK_MIN ((size_t)4096)
#define IBP_CHUNK_MAX ((size_t)64 * 1024)
#define IBP_SAME_PERMILLE 1u /* sizes this close (per mille) make a longer period a repeat */
#define IBP_SCREEN_FIT_BYTES ((size_t)24 * 1024) /* of the screen's fitting half, for the ranking */
#define IBP_SCREEN_COL_WORDS 16u             /* fewest words a column has in the screen's fitting sample */
#define IBP_SCREEN_ROW_WORDS 64u             /* the same for candidates of several columns */
#define IBP_PERIOD_BYTES ((size_t)8 * 1024) /* bytes the period search correlates */
#define IBP_PERIOD_MAX 2048u                 /* longest row period searched, bytes */
#define IBP_PERIOD_PICKS 8u
#define IBP_FINALISTS 3u
#define IBP_SET_FINALISTS 2u /* finalists that try more than one mask set */
/* How much larger than the best a word size's best (or best period-1) candidate may be estimated
 * by the screen and still be a finalist: no such candidate won over the six tensors and their
 * 4-256 MiB tiles, the winners came within 16.1% (fashion_mnist's four-byte words, a twin of its
 * two-byte ones), and those beyond 17% (eight-byte words for byte images, two- and four-byte
 * single columns for int32 triples and float64 features) sized 18% or more above the best one-set
 * trial with one set and did not get more. */
#define IBP_FINALIST_SLACK_PCT 15u
/* Refinement rounds of the mask-set trials and of the winner's refit: a second round in the
 * trials changed no plan of the six tensors or their 4-256 MiB tiles, in the refit only
 * fashion_mnist's by 0.0003-0.0005. */
#define IBP_TRIAL_ROUNDS 1
#define IBP_REFIT_ROUNDS 1
_Static_assert(IBP_TRIAL_ROUNDS >= 1, "a trial's first refinement round fits its next greedy set");
#define IBP_PLAN_MAX_THREADS 16u

typedef struct IbpChunk {
    const uint8_t *p;
    uint32_t len;
    uint64_t off; /* in the region; fixes the column phase */
} IbpChunk;

typedef struct IbpSample {
    IbpChunk *chunks;
    size_t n;
    size_t bytes;
} IbpSample;

/* The sample's words after a candidate's transforms, with their columns. */
typedef struct IbpWords {
    uint32_t word_size;
    uint32_t columns;
    size_t n;
    uint64_t *w;
    uint32_t *col;
    size_t *chunk_end; /* word index where each chunk ends */
    size_t nchunks;
    size_t cap;       /* words w and col have room for */
    size_t chunk_cap; /* entries chunk_end has room for */
    uint64_t gen;     /* loads so far: which load a fit's groups were made from */
    uint32_t *cycle;  /* 0 .. columns - 1 over and over, cycle_len entries: chunks' columns copied */
    size_t cycle_len;
    uint32_t cycle_cols;
} IbpWords;

/* Masks of one candidate: K sets of C {mask, value}, set-major. */
typedef struct IbpMasks {
    uint32_t nsets;
    uint64_t *mask;
    uint64_t *value;
} IbpMasks;

static size_t ibp_min_sz(size_t a, size_t b)
{
    return a < b ? a : b;
}

static size_t ibp_max_sz(size_t a, size_t b)
{
    return a > b ? a : b;
}

/* Spreads many small chunks evenly over the region (a region is often a concatenation of
 * tensors of different scales, so a few large chunks misjudge it); each starts 64-byte aligned
 * so that every word size sees whole words, like a real block.  With `part` 0 or 1 only the
 * even or odd chunks are kept: masks are fitted on one half and judged on the other, which
 * keeps many-column plans from fitting the sample instead of the region.  Of each pair of
 * chunks (the even one and the odd one after it) only every stride-th is kept (stride 1: all);
 * with cap, each kept chunk is cut to the start that keeps them within about cap bytes. */
static int ibp_sample_make(const uint8_t *region, size_t len, size_t block_size, size_t target, int part,
                           size_t stride, size_t cap, IbpSample *s)
{
    size_t chunk = target / IBP_SAMPLE_CHUNKS;
    chunk = chunk < IBP_CHUNK_MIN ? IBP_CHUNK_MIN : chunk;
    chunk = ibp_min_sz(ibp_min_sz(chunk, block_size), IBP_CHUNK_MAX) & ~(size_t)63;
    const int whole = len <= target;
    const size_t total = whole ? (len + chunk - 1u) / chunk : ibp_min_sz(target / chunk, len / chunk);
    s->chunks = calloc(total ? total : 1u, sizeof(IbpChunk));
    if (!s->chunks)
        return -ENOMEM;
    s->n = 0;
    s->bytes = 0;
    const size_t kept = part >= 0 ? (total + 1u - (size_t)part) / 2u : total; /* with stride 1 */
    const size_t piece =
        cap && !whole ? ibp_max_sz(cap / (kept ? kept : 1u), IBP_FIT_CHUNK_MIN) & ~(size_t)63 : chunk;
    for (size_t i = 0; i < total; i++) {
        if (!whole && ((part >= 0 && (int)(i % 2u) != part) || (i / 2u) % stride))
            continue;
        size_t off;
        if (whole)
            off = i * chunk;
        else
            off = (total > 1 ? (size_t)((double)i * (double)(len - chunk) / (double)(total - 1)) : 0) &
                  ~(size_t)63;
        IbpChunk *ch = &s->chunks[s->n++];
        ch->p = region + off;
        ch->off = off;
        ch->len = (uint32_t)ibp_min_sz(ibp_min_sz(chunk, piece), len - off);
        s->bytes += ch->len;
    }
    return 0;
}

static void ibp_words_free(IbpWords *ws)
{
    free(ws->w);
    free(ws->col);
    free(ws->chunk_end);
    free(ws->cycle);
    memset(ws, 0, sizeof(*ws));
}

typedef uint16_t ibp_v8u16w __attribute__((vector_size(16)));
typedef uint32_t ibp_v4u32w __attribute__((vector_size(16)));

/* One chunk's nw words from p into out, untransformed: 16 bytes at a time widened to 64-bit
 * words. */
static inline __attribute__((always_inline)) void ibp_words_copy(const uint8_t *p, uint32_t nw,
                                                                 const uint32_t w, uint64_t *restrict out)
{
    uint32_t j = 0;
    /* Widened by interleaving with zeros (unpacks): a conversion of the vector went through the
     * stack lane by lane on the baseline instruction set, each vector read back right after its
     * lanes were written.  __builtin_shufflevector: GCC 12 and clang both have it. */
    const ibp_v8u16w z16 = {0};
    const ibp_v4u32w z32 = {0};
    if (w == 2u) {
        for (; j + 8u <= nw; j += 8u) {
            ibp_v8u16w x;
            memcpy(&x, p + (size_t)j * 2u, 16);
            const ibp_v4u32w lo = (ibp_v4u32w)__builtin_shufflevector(x, z16, 0, 8, 1, 8, 2, 8, 3, 8);
            const ibp_v4u32w hi = (ibp_v4u32w)__builtin_shufflevector(x, z16, 4, 8, 5, 8, 6, 8, 7, 8);
            const ibp_v4u32w y[4] = {__builtin_shufflevector(lo, z32, 0, 4, 1, 4),
                                     __builtin_shufflevector(lo, z32, 2, 4, 3, 4),
                                     __builtin_shufflevector(hi, z32, 0, 4, 1, 4),
                                     __builtin_shufflevector(hi, z32, 2, 4, 3, 4)};
            memcpy(out + j, y, 64);
        }
    } else if (w == 4u) {
        for (; j + 4u <= nw; j += 4u) {
            ibp_v4u32w x;
            memcpy(&x, p + (size_t)j * 4u, 16);
            const ibp_v4u32w y[2] = {__builtin_shufflevector(x, z32, 0, 4, 1, 4),
                                     __builtin_shufflevector(x, z32, 2, 4, 3, 4)};
            memcpy(out + j, y, 32);
        }
    } else {
        memcpy(out, p, (size_t)nw * 8u);
        j = nw;
    }
    for (; j < nw; j++)
        out[j] = ibp_load_word(p + (size_t)j * w, w);
}

/* Copied per word size. */
void ibp_codec_widen_ref(const uint8_t *p, uint32_t nw, uint32_t w, uint64_t *out)
{
    if (w == 2u)
        ibp_words_copy(p, nw, 2u, out);
    else if (w == 4u)
        ibp_words_copy(p, nw, 4u, out);
    else
        ibp_words_copy(p, nw, 8u, out);
}

/* The words of ibp_words_load without transforms. */
static void ibp_words_load_plain(const IbpSample *s, uint32_t w, IbpWords *ws)
{
    const IbpCodecKernels *const kern = ibp_codec_kernels();
    size_t at = 0;
    for (size_t i = 0; i < s->n; i++) {
        const IbpChunk *ch = &s->chunks[i];
        const uint32_t nw = ch->len / w;
        kern->widen(ch->p, nw, w, ws->w + at);
        at += nw;
        ws->chunk_end[i] = at;
    }
    ws->n = at;
    ws->nchunks = s->n;
}

/* One chunk's nw words from p into out and their columns into cols, every column transformed as
 * xf says (a constant where inlined, as w is). */
static inline __attribute__((always_inline)) void ibp_words_xf_copy(const uint8_t *p, uint32_t nw,
                                                                    const uint32_t w, const uint32_t xf,
                                                                    uint32_t c_count, uint64_t *restrict out)
{
    /* The first C words are predicted from 0. */
    const uint32_t first = xf & IBP_XF_PRED_MASK ? (c_count < nw ? c_count : nw) : 0;
    for (uint32_t j = 0; j < first; j++)
        out[j] = ibp_xform(xf, ibp_load_word(p + (size_t)j * w, w), 0, w);
    for (uint32_t j = first; j < nw; j++) {
        const uint64_t prev = xf & IBP_XF_PRED_MASK ? ibp_load_word(p + (size_t)(j - c_count) * w, w) : 0;
        out[j] = ibp_xform(xf, ibp_load_word(p + (size_t)j * w, w), prev, w);
    }
}

/* ibp_words_xf_copy with W and XF constants. */
#define IBP_XF_COPY_CASE(W, XF)                                                                              \
    case (W)*8u + (XF):                                                                                      \
        ibp_words_xf_copy(p, nw, (W), (XF), c_count, out);                                                   \
        break;

/* Copied per word size and transform: testing each word's column for its transform took half of
 * the transform searches' loading. */
void ibp_codec_xf_widen_ref(const uint8_t *p, uint32_t nw, uint32_t w, uint32_t xf, uint32_t c_count,
                            uint64_t *out)
{
    switch (w * 8u + xf) {
        IBP_XF_COPY_CASE(2u, IBP_XF_ZIGZAG)
        IBP_XF_COPY_CASE(2u, IBP_XF_PRED_DELTA)
        IBP_XF_COPY_CASE(2u, IBP_XF_PRED_DELTA | IBP_XF_ZIGZAG)
        IBP_XF_COPY_CASE(2u, IBP_XF_PRED_XOR)
        IBP_XF_COPY_CASE(2u, IBP_XF_PRED_XOR | IBP_XF_ZIGZAG)
        IBP_XF_COPY_CASE(4u, IBP_XF_ZIGZAG)
        IBP_XF_COPY_CASE(4u, IBP_XF_PRED_DELTA)
        IBP_XF_COPY_CASE(4u, IBP_XF_PRED_DELTA | IBP_XF_ZIGZAG)
        IBP_XF_COPY_CASE(4u, IBP_XF_PRED_XOR)
        IBP_XF_COPY_CASE(4u, IBP_XF_PRED_XOR | IBP_XF_ZIGZAG)
        IBP_XF_COPY_CASE(8u, IBP_XF_ZIGZAG)
        IBP_XF_COPY_CASE(8u, IBP_XF_PRED_DELTA)
        IBP_XF_COPY_CASE(8u, IBP_XF_PRED_DELTA | IBP_XF_ZIGZAG)
        IBP_XF_COPY_CASE(8u, IBP_XF_PRED_XOR)
        IBP_XF_COPY_CASE(8u, IBP_XF_PRED_XOR | IBP_XF_ZIGZAG)
    default:
        ibp_words_xf_copy(p, nw, w, xf, c_count, out);
        break;
    }
}
#undef IBP_XF_COPY_CASE

/* The words of ibp_words_load with the same transform xf (not none) in every column. */
static void ibp_words_load_uniform(const IbpSample *s, uint32_t w, uint32_t c_count, uint32_t xf,
                                   IbpWords *ws)
{
    const IbpCodecKernels *const kern = ibp_codec_kernels();
    size_t at = 0;
    for (size_t i = 0; i < s->n; i++) {
        const IbpChunk *ch = &s->chunks[i];
        const uint32_t nw = ch->len / w;
        kern->xf_widen(ch->p, nw, w, xf, c_count, ws->w + at);
        at += nw;
        ws->chunk_end[i] = at;
    }
    ws->n = at;
    ws->nchunks = s->n;
}

/* Column c's words of one chunk (every C-th from j0, its first) from p into out, transformed as
 * xf says (w and xf constants where inlined). */
static inline __attribute__((always_inline)) void ibp_words_xf_column(const uint8_t *p, uint32_t nw,
                                                                      const uint32_t w, const uint32_t xf,
                                                                      uint32_t c_count, uint32_t j0,
                                                                      uint64_t *restrict out)
{
    uint32_t j = j0;
    if (j < nw && (xf & IBP_XF_PRED_MASK)) {
        out[j] = ibp_xform(xf, ibp_load_word(p + (size_t)j * w, w), 0, w); /* j0 < C: predicted from 0 */
        j += c_count;
    }
    for (; j < nw; j += c_count) {
        const uint64_t prev = xf & IBP_XF_PRED_MASK ? ibp_load_word(p + (size_t)(j - c_count) * w, w) : 0;
        out[j] = ibp_xform(xf, ibp_load_word(p + (size_t)j * w, w), prev, w);
    }
}

#define IBP_XF_COLUMN_CASE(W, XF)                                                                            \
    case (W)*8u + (XF):                                                                                      \
        ibp_words_xf_column(ch->p, nw, (W), (XF), c_count, j0, ws->w + at);                                  \
        break;
#define IBP_XF_COLUMN_CASES(W)                                                                               \
    IBP_XF_COLUMN_CASE(W, 0u)                                                                                \
    IBP_XF_COLUMN_CASE(W, IBP_XF_ZIGZAG)                                                                     \
    IBP_XF_COLUMN_CASE(W, IBP_XF_PRED_DELTA)                                                                 \
    IBP_XF_COLUMN_CASE(W, IBP_XF_PRED_DELTA | IBP_XF_ZIGZAG)                                                 \
    IBP_XF_COLUMN_CASE(W, IBP_XF_PRED_XOR)                                                                   \
    IBP_XF_COLUMN_CASE(W, IBP_XF_PRED_XOR | IBP_XF_ZIGZAG)

/* The words of ibp_words_load with transforms that differ between columns: column by column, each
 * with its word size and transform constants (a word's column's transform, tested word by word,
 * took most of the winner's loads). */
static void ibp_words_load_mixed(const IbpSample *s, uint32_t w, uint32_t c_count, const uint8_t *xform,
                                 IbpWords *ws)
{
    size_t at = 0;
    for (size_t i = 0; i < s->n; i++) {
        const IbpChunk *ch = &s->chunks[i];
        const uint32_t nw = ch->len / w;
        const uint32_t col0 = (uint32_t)((ch->off / w) % c_count);
        for (uint32_t c = 0; c < c_count; c++) {
            const uint32_t j0 = (c + c_count - col0) % c_count;
            switch (w * 8u + xform[c]) {
                IBP_XF_COLUMN_CASES(2u)
                IBP_XF_COLUMN_CASES(4u)
                IBP_XF_COLUMN_CASES(8u)
            default:
                ibp_words_xf_column(ch->p, nw, w, xform[c], c_count, j0, ws->w + at);
                break;
            }
        }
        at += nw;
        ws->chunk_end[i] = at;
    }
    ws->n = at;
    ws->nchunks = s->n;
}
#undef IBP_XF_COLUMN_CASES
#undef IBP_XF_COLUMN_CASE

/* Loads the sample as words of the candidate's shape, transformed as xform says (may be NULL).
 * Predictors look back C words within the chunk, as the encoder does within a block.  ws keeps
 * its buffers from one load to the next (zeroed before the first; ibp_words_free at the end). */
static int ibp_words_load(const IbpSample *s, uint32_t w, uint32_t c_count, const uint8_t *xform,
                          IbpWords *ws)
{
    size_t n = 0;
    size_t longest = 0;
    for (size_t i = 0; i < s->n; i++) {
        n += s->chunks[i].len / w;
        longest = ibp_max_sz(longest, s->chunks[i].len / w);
    }
    n = n ? n : 1u;
    /* Each chunk's columns are a stretch of the cycle 0 .. C - 1, C - 1 entries at most before its
     * first 0. */
    if (ws->cycle_cols != c_count || ws->cycle_len < longest + c_count) {
        free(ws->cycle);
        ws->cycle_len = longest + c_count;
        ws->cycle = malloc(ws->cycle_len * sizeof(uint32_t));
        ws->cycle_cols = c_count;
        for (size_t k = 0, c = 0; ws->cycle && k < ws->cycle_len; k++, c = c + 1u == c_count ? 0 : c + 1u)
            ws->cycle[k] = (uint32_t)c;
    }
    if (n > ws->cap) {
        free(ws->w);
        free(ws->col);
        ws->w = malloc(n * sizeof(uint64_t));
        ws->col = malloc(n * sizeof(uint32_t));
        ws->cap = n;
    }
    if (s->n > ws->chunk_cap || !ws->chunk_end) {
        free(ws->chunk_end);
        ws->chunk_end = malloc((s->n ? s->n : 1u) * sizeof(size_t));
        ws->chunk_cap = s->n;
    }
    if (!ws->w || !ws->col || !ws->chunk_end || !ws->cycle) {
        ibp_words_free(ws);
        return -ENOMEM;
    }
    ws->word_size = w;
    ws->columns = c_count;
    ws->gen++;
    int any = 0;
    int uniform = 1;
    for (uint32_t c = 0; xform && c < c_count; c++) {
        any |= xform[c] != 0;
        uniform &= xform[c] == xform[0];
    }
    if (!any) {
        ibp_words_load_plain(s, w, ws);
    } else if (uniform) {
        ibp_words_load_uniform(s, w, c_count, xform[0], ws);
    } else {
        ibp_words_load_mixed(s, w, c_count, xform, ws);
    }
    size_t start = 0;
    for (size_t i = 0; i < s->n; i++) {
        const size_t col = (size_t)((s->chunks[i].off / w) % c_count);
        memcpy(ws->col + start, ws->cycle + col, (ws->chunk_end[i] - start) * sizeof(uint32_t));
        start = ws->chunk_end[i];
    }
    return 0;
}

/* Which words a fit takes: all of them into set 1, those no set takes yet (member 0) into set 1,
 * or each into the set member names (several sets at once, as one round of ibp_fit_sets); or, in
 * a count pass alone, each into set 1 or 2 by its top bit (ibp_pick_xforms). */
enum { IBP_FIT_ALL, IBP_FIT_FREE, IBP_FIT_SETS, IBP_FIT_SIGN };

/* Counters are kept in this many interleaved copies when there are fewer than 4 columns, so that
 * consecutive words do not update the same memory one after the other (each update would wait
 * for the one before). */
#define IBP_FIT_SLOTS 4u

/* Bytes of a block of grouped words (IbpFit.grp): at 2 KiB the kernels' calls, cut at every full
 * block, and the blocks' own set-up (the histogram kernel's tables) took 4-5% of a plan. */
#define IBP_GROUP_BYTES 8192u
/* Most columns the count pass takes column by column: with the kernels, 64-column candidates
 * (digits, ocr_rec_linear85) plan 4-6% faster so than word by word; 128 gained nothing more. */
#define IBP_STAGE_COLUMNS 64u

typedef struct IbpGroup {
    uint32_t set;
    uint32_t col;
    uint32_t n;
} IbpGroup;

/* Work space for mask fitting, sized for the largest candidate.  Everything is per (set,
 * column), set 0 being where the words no fitted set takes go (and are ignored). */
typedef struct IbpFit {
    uint32_t *cnt;        /* (K+1) * C * 64: words with each bit set */
    uint32_t *ncol;       /* (K+1) * C: words */
    uint64_t *acc;        /* slots * (K+1) * C * 8: byte-lane counters (ibp_acc_lane), emptied by batches */
    uint8_t *pending;     /* slots * (K+1) * C */
    uint64_t *maj;        /* (K+1) * C */
    uint64_t *prefix;     /* (K+1) * C * 65 */
    uint32_t *hist;       /* slots * (K+1) * C * (W*8 + 1) */
    /* (K+1) * C * W * 256, when that is at most IBP_FIT_RANK_MAX bytes: for byte q of a word and
     * its value v, the lowest rank (position in the column's bit ranking) of a bit set in v, or
     * W*8 for v = 0; a word's agreement length is the least over its bytes. */
    uint8_t *rank;
    size_t rank_cap;
    /* The same as nibble tables, (K+1) * C * W * IBP_RANK_NIBBLES, for the kernel agree_hist:
     * built from the ranks at an eighth of the bytes, they are all that grouped words need. */
    uint8_t *nib;
    const struct IbpPar *par; /* threads its word passes may spread over, or NULL */
    int gpu_runs;             /* masks only of variant bits the GPU rebuilds run by run (ibp_gpu_runs_fit) */
    /* The words of the last count pass that went column by column, grouped by (set, column) in
     * blocks of IBP_GROUP_BYTES packed at their width, for its histogram pass: blk[b] is block b's
     * set, column and words.  grp_of is the load they are of (NULL: none), with the pass's mode,
     * sets and words [grp_lo, grp_hi). */
    uint8_t *grp;
    IbpGroup *blk;
    size_t blk_cap;
    size_t nblk;
    const IbpWords *grp_of;
    uint64_t grp_gen;
    int grp_mode;
    uint32_t grp_nfit;
    size_t grp_lo, grp_hi;
    size_t bytes; /* allocated */
} IbpFit;

/* Threads a fit may spread its word passes over (the final refit, which runs alone): fits[0] is
 * the fit itself, the others lend their counters and histograms. */
typedef struct IbpPar {
    IbpFit *fits[IBP_PLAN_MAX_THREADS];
    unsigned n;
} IbpPar;

/* Fewer words than this a thread are not worth starting it for. */
#define IBP_PAR_MIN_WORDS ((size_t)32 * 1024)

#define IBP_FIT_RANK_MAX ((size_t)256 * 1024)
#define IBP_RANK_BUCKETS 256u /* counting-sort buckets for ibp_rank_bits */

static void ibp_fit_free(IbpFit *f)
{
    free(f->cnt);
    free(f->ncol);
    free(f->acc);
    free(f->pending);
    free(f->maj);
    free(f->prefix);
    free(f->hist);
    free(f->rank);
    free(f->nib);
    free(f->grp);
    free(f->blk);
    memset(f, 0, sizeof(*f));
}

/* The tables' sizes for at most c_count columns and samples of at most max_bytes, which decide how
 * passes go (a rank table or a search): the same in a fit kept from a larger plan's as in a new one. */
static void ibp_fit_size(IbpFit *f, uint32_t c_count, size_t max_bytes)
{
    const size_t sc = (size_t)(IBP_MAX_SETS + 1u) * c_count;
    f->rank_cap = sc * 8u * 256u < IBP_FIT_RANK_MAX ? sc * 8u * 256u : IBP_FIT_RANK_MAX;
    f->blk_cap = max_bytes / IBP_GROUP_BYTES + 1u + (IBP_MAX_SETS + 1u) * IBP_STAGE_COLUMNS;
}

/* A fit kept from an earlier plan, for one of at most c_count columns and max_bytes (no more than
 * it was allocated for): no grouped words, no other threads' counters lent (IbpFit.par). */
static void ibp_fit_reuse(IbpFit *f, uint32_t c_count, size_t max_bytes)
{
    ibp_fit_size(f, c_count, max_bytes);
    f->par = NULL;
    f->nblk = 0;
    f->grp_of = NULL;
    f->grp_gen = 0;
    f->grp_mode = 0;
    f->grp_nfit = 0;
    f->grp_lo = 0;
    f->grp_hi = 0;
}

/* Sized for any candidate of at most c_count columns and samples of at most max_bytes: those with
 * fewer than IBP_FIT_SLOTS columns keep IBP_FIT_SLOTS copies of their counters, which may take
 * more than one copy of c_count; grouped words take whole blocks, but for one partly filled block
 * per (set, column). */
static int ibp_fit_alloc(IbpFit *f, uint32_t c_count, size_t max_bytes)
{
    const size_t sc = (size_t)(IBP_MAX_SETS + 1u) * c_count;
    const uint32_t small = c_count < IBP_FIT_SLOTS - 1u ? c_count : IBP_FIT_SLOTS - 1u;
    const size_t ssc = (size_t)(IBP_MAX_SETS + 1u) * IBP_FIT_SLOTS * small;
    const size_t slot_sc = ssc > sc ? ssc : sc;
    memset(f, 0, sizeof(*f));
    ibp_fit_size(f, c_count, max_bytes);
    f->cnt = malloc(sc * 64u * sizeof(uint32_t));
    f->ncol = malloc(sc * sizeof(uint32_t));
    f->acc = malloc(slot_sc * 8u * sizeof(uint64_t));
    f->pending = malloc(slot_sc);
    f->maj = malloc(sc * sizeof(uint64_t));
    f->prefix = malloc(sc * 65u * sizeof(uint64_t));
    f->hist = malloc(slot_sc * 65u * sizeof(uint32_t));
    f->rank = malloc(f->rank_cap);
    f->nib = malloc(f->rank_cap / 256u * IBP_RANK_NIBBLES);
    f->grp = malloc(f->blk_cap * IBP_GROUP_BYTES);
    f->blk = malloc(f->blk_cap * sizeof(IbpGroup));
    f->bytes = sc * (64u * sizeof(uint32_t) + sizeof(uint32_t) + sizeof(uint64_t) + 65u * sizeof(uint64_t)) +
               slot_sc * (8u * sizeof(uint64_t) + 1u + 65u * sizeof(uint32_t)) + f->rank_cap +
               f->rank_cap / 256u * IBP_RANK_NIBBLES + f->blk_cap * (IBP_GROUP_BYTES + sizeof(IbpGroup));
    if (!f->cnt || !f->ncol || !f->acc || !f->pending || !f->maj || !f->prefix || !f->hist || !f->rank ||
        !f->nib || !f->grp || !f->blk) {
        ibp_fit_free(f);
        return -ENOMEM;
    }
    return 0;
}

/* Largest m with no disagreeing bit among the m most invariant bits of the column: a
 * branch-free binary search (the branchy one mispredicts on every other word). */
static inline uint32_t ibp_agree_len(const uint64_t *prefix, uint32_t wbits, uint64_t d)
{
    uint32_t lo = 0;
#pragma GCC unroll 8
    for (uint32_t step = wbits; step; step >>= 1) {
        const uint32_t cand = lo + step;
        const int ok = cand <= wbits && !(d & prefix[cand <= wbits ? cand : 0]);
        lo = ok ? cand : lo;
    }
    return lo;
}

/* Bit count without relying on the popcnt instruction (the library builds for baseline x86-64). */
static inline uint32_t ibp_popcount(uint64_t v)
{
    v = v - ((v >> 1) & 0x5555555555555555ull);
    v = (v & 0x3333333333333333ull) + ((v >> 2) & 0x3333333333333333ull);
    v = (v + (v >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (uint32_t)((v * 0x0101010101010101ull) >> 56);
}

/* Whether the bits that invariant bits `mask` leave variant in a word of w bytes form runs that
 * the GPU decode rebuilds with a shift and a mask each (format.h IBP_GPU_RUNS). */
static int ibp_gpu_runs_fit(uint64_t mask, uint32_t w)
{
    const uint64_t v = ~mask & (w == 8 ? ~0ull : ((uint64_t)1 << (8u * w)) - 1u);
    if (w < 8)
        return ibp_popcount(v & ~(v << 1)) <= IBP_GPU_RUNS;
    /* An 8-byte word is rebuilt as two 32-bit halves: bit 32 starts a run of the high half. */
    const uint64_t starts = v & ~((v << 1) & ~((uint64_t)1 << 32));
    return ibp_popcount(starts & 0xffffffffu) <= IBP_GPU_RUNS_HALF &&
           ibp_popcount(starts >> 32) <= IBP_GPU_RUNS_HALF;
}

/* Whether every mask of m keeps within ibp_gpu_runs_fit. */
static int ibp_masks_gpu_fit(const IbpMasks *m, uint32_t w, uint32_t c_count)
{
    for (size_t i = 0; i < (size_t)m->nsets * c_count; i++)
        if (!ibp_gpu_runs_fit(m->mask[i], w))
            return 0;
    return 1;
}

static inline uint32_t ibp_fit_route(const uint8_t *member, int mode, size_t i)
{
    if (mode == IBP_FIT_ALL)
        return 1u;
    if (mode == IBP_FIT_FREE)
        return member[i] == 0;
    return member[i];
}

typedef uint8_t ibp_v16u8 __attribute__((vector_size(16)));
typedef uint64_t ibp_v2u64 __attribute__((vector_size(16)));

/* The bit counters of one (set, column) are W*8 byte lanes, W/2 vectors of 16: lane l of vector p
 * counts bit p*16/W + l/W of byte l%W, so that a word repeated to fill a vector (its byte l%W in
 * lane l) is tested against one constant per vector. */
static inline uint32_t ibp_acc_bit(uint32_t w, uint32_t j)
{
    const uint32_t p = j / 16u, l = j % 16u;
    return (l % w) * 8u + p * (16u / w) + l / w;
}

/* Adds the byte lanes of counters a to cnt (W*8 entries by bit) and empties them. */
static inline __attribute__((always_inline)) void ibp_acc_flush(uint64_t *a, uint32_t w, uint32_t *cnt)
{
    uint8_t lanes[64];
    memcpy(lanes, a, w * 8u);
    for (uint32_t j = 0; j < w * 8u; j++)
        cnt[ibp_acc_bit(w, j)] += lanes[j];
    memset(a, 0, w * 8u);
}

typedef uint16_t ibp_v8u16 __attribute__((vector_size(16)));
typedef uint32_t ibp_v4u32 __attribute__((vector_size(16)));

/* Word x (of w bytes) repeated to fill a vector. */
static inline __attribute__((always_inline)) ibp_v16u8 ibp_fill(uint64_t x, const uint32_t w)
{
    if (w == 2u) {
        const uint16_t h = (uint16_t)x;
        return (ibp_v16u8)(ibp_v8u16){h, h, h, h, h, h, h, h};
    }
    if (w == 4u) {
        const uint32_t h = (uint32_t)x;
        return (ibp_v16u8)(ibp_v4u32){h, h, h, h};
    }
    return (ibp_v16u8)(ibp_v2u64){x, x};
}

/* The words [lo, hi) of ibp_fit_count into the byte-lane counters acc, counted in pending (the
 * caller keeps every counter at most 255).  w, mode, slots and ak (the sets of am, 0 without)
 * are constants where inlined. */
static inline __attribute__((always_inline)) void
ibp_fit_count_run(const uint64_t *restrict words, const uint32_t *restrict cols, uint8_t *restrict mem,
                  uint32_t nfit, uint32_t c_count, const uint32_t slots, uint64_t *restrict acc,
                  uint8_t *restrict pending, const uint32_t w, const int mode, const uint64_t *restrict amask,
                  const uint64_t *restrict avalue, const uint32_t ak, const ibp_v16u8 *bit, size_t lo,
                  size_t hi)
{
    const size_t slot_stride = (size_t)(nfit + 1u) * c_count;
    for (size_t i = lo; i < hi; i++) {
        const uint64_t x = words[i];
        const uint32_t c = cols[i];
        uint32_t route;
        if (ak) {
            uint32_t sel = 0;
#pragma GCC unroll 4
            for (uint32_t k = ak; k > 0; k--) {
                const size_t idx = (size_t)(k - 1u) * c_count + c;
                sel = (x & amask[idx]) == avalue[idx] ? k : sel;
            }
            mem[i] = (uint8_t)sel;
            route = mode == IBP_FIT_FREE ? sel == 0 : sel;
        } else if (mode == IBP_FIT_SIGN) {
            route = 1u + (uint32_t)((x >> (w * 8u - 1u)) & 1u);
        } else {
            route = ibp_fit_route(mem, mode, i);
        }
        const size_t at = (i & (slots - 1u)) * slot_stride + (size_t)route * c_count + c;
        uint64_t *a = acc + at * w;
        const ibp_v16u8 xv = ibp_fill(x, w);
#pragma GCC unroll 4
        for (uint32_t p = 0; p < w / 2u; p++) {
            ibp_v16u8 v;
            memcpy(&v, a + 2u * p, 16);
            v -= (ibp_v16u8)((xv & bit[p]) == bit[p]); /* set lanes are all ones */
            memcpy(a + 2u * p, &v, 16);
        }
        pending[at]++;
    }
}

/* The word loops of ibp_fit_masks, instantiated per word size and mode (ibp_fit_route is then a
 * load or a constant, and the per-byte loops unroll). */
static inline __attribute__((always_inline)) void ibp_fit_count(const IbpWords *ws, const uint8_t *member,
                                                                uint32_t nfit, IbpFit *f, const uint32_t w,
                                                                const int mode, const uint32_t slots,
                                                                const uint32_t ak, const IbpMasks *am,
                                                                size_t lo, size_t hi)
{
    const uint32_t wbits = w * 8u;
    const uint32_t c_count = ws->columns;
    const size_t sc = (size_t)(nfit + 1u) * c_count;
    /* Locals: the pending counters are bytes, which may alias anything, so fields read through
     * f and ws would be loaded again after every word. */
    const uint64_t *restrict const words = ws->w;
    const uint32_t *restrict const cols = ws->col;
    uint64_t *restrict const acc = f->acc;
    uint8_t *restrict const pending = f->pending;
    uint32_t *restrict const cnt = f->cnt;
    uint32_t *restrict const ncol = f->ncol;
    /* With am (a constant NULL or not where inlined), each word's set under am is found here, as
     * ibp_assign would, and written to member before it routes the word. */
    const uint64_t *restrict const amask = am ? am->mask : NULL;
    const uint64_t *restrict const avalue = am ? am->value : NULL;
    uint8_t *restrict const mem = (uint8_t *)member;
    /* Words go in batches that add at most 255 to any one counter, emptied after each batch
     * instead of checked after each word: within a chunk a counter (slot and column) comes back
     * every lcm(slots, C) words, so a run of n words adds at most ceil(n / lcm) to it. */
    const size_t *const cend = ws->chunk_end;
    const size_t nch = ws->nchunks;
    const size_t nacc = (size_t)slots * sc;
    size_t period = c_count;
    while (period % slots)
        period += c_count;
    /* Each vector's bit of each lane, built once a pass: built per batch, it took 3% of a plan. */
    ibp_v16u8 bit[4];
    for (uint32_t p = 0; p < w / 2u; p++)
        for (uint32_t l = 0; l < 16u; l++)
            bit[p][l] = (uint8_t)(1u << (p * (16u / w) + l / w));
    size_t ch = 0;
    for (size_t i = lo; i < hi;) {
        size_t end = i;
        size_t budget = 255u;
        while (end < hi && budget > 0) {
            while (ch < nch && cend[ch] <= end)
                ch++;
            const size_t stop = ch < nch && cend[ch] < hi ? cend[ch] : hi;
            const size_t most = budget * period;
            if (stop - end >= most) {
                end += most;
                budget = 0;
            } else {
                budget -= (stop - end + period - 1u) / period;
                end = stop;
            }
        }
        ibp_fit_count_run(words, cols, mem, nfit, c_count, slots, acc, pending, w, mode, amask, avalue, ak,
                          bit, i, end);
        i = end;
        for (size_t at = 0; at < nacc; at++) {
            if (pending[at]) {
                const size_t sc_at = at % sc;
                ibp_acc_flush(acc + at * w, w, cnt + sc_at * wbits);
                ncol[sc_at] += pending[at];
                pending[at] = 0;
            }
        }
    }
}

/* Agreement histograms of words [lo, hi) into out->hist, by the bit ranking of model. */
static inline __attribute__((always_inline)) void
ibp_fit_hist_rank(const IbpWords *ws, const uint8_t *member, uint32_t nfit, const IbpFit *f, IbpFit *out,
                  const uint32_t w, const int mode, const uint32_t slots, size_t lo, size_t hi)
{
    const uint32_t wbits = w * 8u;
    const uint32_t c_count = ws->columns;
    const size_t slot_stride = (size_t)(nfit + 1u) * c_count * (wbits + 1u);
    const uint64_t *restrict const words = ws->w;
    const uint32_t *restrict const cols = ws->col;
    const uint64_t *restrict const maj = f->maj;
    const uint8_t *restrict const rank = f->rank;
    uint32_t *restrict const hist = out->hist;
    for (size_t i = lo; i < hi; i++) {
        const size_t at = (size_t)ibp_fit_route(member, mode, i) * c_count + cols[i];
        const uint64_t d = words[i] ^ maj[at];
        const uint8_t *t = rank + at * w * 256u;
        uint32_t agree = t[d & 0xffu];
#pragma GCC unroll 8
        for (uint32_t q = 1; q < w; q++) {
            const uint32_t r = t[q * 256u + ((d >> (8u * q)) & 0xffu)];
            agree = r < agree ? r : agree;
        }
        hist[(i & (slots - 1u)) * slot_stride + at * (wbits + 1u) + agree]++;
    }
}

/* ibp_fit_hist_rank for one column and every word in set 1 (IBP_FIT_ALL): one majority and one
 * rank table for all the words, kept out of the loop. */
static inline __attribute__((always_inline)) void
ibp_fit_hist_one(const IbpWords *ws, const IbpFit *f, IbpFit *out, const uint32_t w, size_t lo, size_t hi)
{
    const uint32_t hs = w * 8u + 1u;
    const uint64_t *restrict const words = ws->w;
    const uint64_t maj = f->maj[1];
    const uint8_t *restrict const t = f->rank + (size_t)w * 256u;
    uint32_t *restrict const hist = out->hist + hs; /* set 1 of slot 0; slot s 2 * hs further */
    for (size_t i = lo; i < hi; i++) {
        const uint64_t d = words[i] ^ maj;
        uint32_t agree = t[d & 0xffu];
#pragma GCC unroll 8
        for (uint32_t q = 1; q < w; q++) {
            const uint32_t r = t[q * 256u + ((d >> (8u * q)) & 0xffu)];
            agree = r < agree ? r : agree;
        }
        hist[(i & (IBP_FIT_SLOTS - 1u)) * 2u * hs + agree]++;
    }
}

static inline __attribute__((always_inline)) void
ibp_fit_hist_search(const IbpWords *ws, const uint8_t *member, uint32_t nfit, const IbpFit *f, IbpFit *out,
                    const uint32_t w, const int mode, size_t lo, size_t hi)
{
    const uint32_t wbits = w * 8u;
    const uint32_t c_count = ws->columns;
    const size_t sc = (size_t)(nfit + 1u) * c_count;
    const uint32_t slots = c_count < IBP_FIT_SLOTS ? IBP_FIT_SLOTS : 1u;
    const uint64_t *restrict const words = ws->w;
    const uint32_t *restrict const cols = ws->col;
    const uint64_t *restrict const maj = f->maj;
    const uint64_t *restrict const prefix = f->prefix;
    uint32_t *restrict const hist = out->hist;
    for (size_t i = lo; i < hi; i++) {
        const size_t at = (size_t)ibp_fit_route(member, mode, i) * c_count + cols[i];
        const uint32_t agree = ibp_agree_len(prefix + at * 65u, wbits, words[i] ^ maj[at]);
        hist[((i & (slots - 1u)) * sc + at) * (wbits + 1u) + agree]++;
    }
}

/* Agreement histograms of the words that f's count pass grouped (f->blk), each block's by the bit
 * ranking of its (set, column) in model: by its rank tables through the kernel agree_hist where
 * use_rank, else by binary search.  Set 0's only where need0; with sign (groups by sign for a
 * one-set histogram), sets 1 and 2 are both set 1.  w and use_rank are constants where inlined. */
static inline __attribute__((always_inline)) void ibp_fit_hist_groups(
    const IbpFit *model, IbpFit *f, uint32_t c_count, const uint32_t w, const int use_rank, int sign,
    int need0, void (*agree_hist)(const uint8_t *, uint32_t, uint32_t, uint64_t, const uint8_t *, uint32_t *))
{
    const uint32_t hs = w * 8u + 1u;
    for (size_t b = 0; b < f->nblk; b++) {
        const IbpGroup g = f->blk[b];
        if (!g.n || (!g.set && !need0))
            continue;
        const size_t at = (size_t)(sign ? 1u : g.set) * c_count + g.col;
        const uint8_t *restrict const buf = f->grp + b * IBP_GROUP_BYTES;
        const uint64_t maj = model->maj[at];
        if (use_rank) {
            agree_hist(buf, g.n, w, maj, model->nib + at * w * IBP_RANK_NIBBLES, f->hist + at * hs);
            continue;
        }
        const uint64_t *const prefix = model->prefix + at * 65u;
        /* Four histograms side by side, so that a word's count does not wait for the last one's. */
        uint32_t h[IBP_FIT_SLOTS][65];
        memset(h, 0, sizeof(h));
        uint32_t j = 0;
        for (; j + IBP_FIT_SLOTS <= g.n; j += IBP_FIT_SLOTS) {
#pragma GCC unroll 4
            for (uint32_t k = 0; k < IBP_FIT_SLOTS; k++)
                h[k][ibp_agree_len(prefix, w * 8u, ibp_load_word(buf + (size_t)(j + k) * w, w) ^ maj)]++;
        }
        for (; j < g.n; j++)
            h[0][ibp_agree_len(prefix, w * 8u, ibp_load_word(buf + (size_t)j * w, w) ^ maj)]++;
        uint32_t *const hist = f->hist + at * hs;
        for (uint32_t k = 0; k < hs; k++)
            hist[k] += h[0][k] + h[1][k] + h[2][k] + h[3][k];
    }
}

/* Runs CALL with w_ and mode_ constants equal to the word size w and the mode in scope, so that
 * the always-inline word loops it calls are compiled once per combination. */
#define IBP_FIT_CASE(W, MODE, CALL)                                                                          \
    case (W) * 4u + (MODE): {                                                                                \
        const uint32_t w_ = (W);                                                                             \
        const int mode_ = (MODE);                                                                            \
        CALL;                                                                                                \
        break;                                                                                               \
    }
#define IBP_FIT_DISPATCH(CALL)                                                                               \
    do {                                                                                                     \
        switch (w * 4u + (uint32_t)mode) {                                                                   \
            IBP_FIT_CASE(2u, IBP_FIT_ALL, CALL)                                                              \
            IBP_FIT_CASE(2u, IBP_FIT_FREE, CALL)                                                             \
            IBP_FIT_CASE(2u, IBP_FIT_SETS, CALL)                                                             \
            IBP_FIT_CASE(4u, IBP_FIT_ALL, CALL)                                                              \
            IBP_FIT_CASE(4u, IBP_FIT_FREE, CALL)                                                             \
            IBP_FIT_CASE(4u, IBP_FIT_SETS, CALL)                                                             \
            IBP_FIT_CASE(8u, IBP_FIT_ALL, CALL)                                                              \
            IBP_FIT_CASE(8u, IBP_FIT_FREE, CALL)                                                             \
        default: {                                                                                           \
            const uint32_t w_ = 8u;                                                                          \
            const int mode_ = IBP_FIT_SETS;                                                                  \
            CALL;                                                                                            \
            break;                                                                                           \
        }                                                                                                    \
        }                                                                                                    \
    } while (0)

/* The bits of a column ordered by how often they agree with the majority, most first, ties by
 * bit position (a stable sort).  freq[b] lies in [n/2, n]: where that range is short (columns
 * with few words, the many-column candidates) a counting sort, else an insertion sort. */
static void ibp_rank_bits(const uint32_t *freq, uint32_t wbits, uint32_t n, uint8_t *order)
{
    if (n <= 2u * IBP_RANK_BUCKETS - 2u) {
        uint8_t at[IBP_RANK_BUCKETS + 1u] = {0}; /* at[n - f]: bits agreeing more than f times */
        for (uint32_t b = 0; b < wbits; b++)
            at[n - freq[b] + 1u]++;
        for (uint32_t k = 1; k <= n / 2u + 1u; k++)
            at[k] = (uint8_t)(at[k] + at[k - 1u]);
        for (uint32_t b = 0; b < wbits; b++)
            order[at[n - freq[b]]++] = (uint8_t)b;
        return;
    }
    for (uint32_t b = 0; b < wbits; b++) {
        uint32_t k = b;
        while (k > 0 && freq[order[k - 1]] < freq[b]) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = (uint8_t)b;
    }
}

/* The nibble tables of one byte of a word (IBP_RANK_NIBBLES) into nib: the lowest rank among the
 * bits set in each nibble value (rk: the ranks of the byte's 8 bits), none for 0; with t, also the
 * rank table of the byte, t[v] the lowest rank among the bits set in v.  That is the lower of the
 * low and the high nibble's, so each 16 entries with the same high nibble are the low nibble's 16
 * against one value, a vector. */
static void ibp_rank_table(const uint8_t *rk, uint8_t none, uint8_t *nib, uint8_t *t)
{
    uint8_t lo[16], hi[16];
    lo[0] = hi[0] = none;
    for (uint32_t v = 1; v < 16u; v++) {
        const uint32_t b = (uint32_t)__builtin_ctz(v);
        lo[v] = rk[b] < lo[v & (v - 1u)] ? rk[b] : lo[v & (v - 1u)];
        hi[v] = rk[4u + b] < hi[v & (v - 1u)] ? rk[4u + b] : hi[v & (v - 1u)];
    }
    memcpy(nib, lo, 16);
    memcpy(nib + 16, hi, 16);
    if (!t)
        return;
    ibp_v16u8 low;
    memcpy(&low, lo, 16);
    for (uint32_t h = 0; h < 16u; h++) {
        const ibp_v16u8 high = low - low + hi[h];
        const ibp_v16u8 row = (low & (ibp_v16u8)(low < high)) | (high & (ibp_v16u8)(low >= high));
        memcpy(t + 16u * h, &row, 16);
    }
}

/* Fits one mask per column to the words of each set (mode and member as IBP_FIT_*; nfit sets,
 * written to mask/value set-major): the bits ranked by how invariant they are, then the prefix of
 * that ranking that saves most (m invariant bits save m bits on every word that agrees on all m).
 * This is the threshold sweep of the paper, done exactly per column.  Returns the bits saved in
 * total; f->hist and f->ncol hold set 1's agreement histogram (W*8 + 1 entries per column) and
 * word counts afterwards. */
/* One thread's share of a word pass of ibp_fit_masks. */
typedef struct IbpPass {
    void (*run)(struct IbpPass *p);
    const IbpWords *ws;
    const uint8_t *member;
    int mode;
    uint32_t nfit;
    int use_rank;
    const IbpFit *model; /* the bit ranking, for the histogram pass */
    const IbpMasks *am;  /* the count pass assigns member by these sets first, or NULL */
    int count0;          /* both passes take set 0's words too (a fit reads them) */
    IbpFit *f;           /* this thread's counters */
    size_t lo, hi;       /* its words */
} IbpPass;

static void *ibp_pass_thread(void *arg)
{
    IbpPass *p = arg;
    p->run(p);
    return NULL;
}

/* Runs passes[0..n) on n threads, the calling one included (a thread that cannot be started has
 * its share run by the caller). */
static void ibp_passes_run(IbpPass *passes, unsigned n)
{
    pthread_t tid[IBP_PLAN_MAX_THREADS];
    int started[IBP_PLAN_MAX_THREADS] = {0};
    for (unsigned t = 1; t < n; t++)
        started[t] = pthread_create(&tid[t], NULL, ibp_pass_thread, &passes[t]) == 0;
    passes[0].run(&passes[0]);
    for (unsigned t = 1; t < n; t++) {
        if (started[t])
            pthread_join(tid[t], NULL);
        else
            passes[t].run(&passes[t]);
    }
}

/* How many threads a pass over ws takes with f's helpers, and each one's words. */
static unsigned ibp_passes_split(const IbpWords *ws, const IbpFit *f, IbpPass *passes, const IbpPass *proto)
{
    unsigned n = f->par ? f->par->n : 1u;
    while (n > 1u && ws->n / n < IBP_PAR_MIN_WORDS)
        n--;
    for (unsigned t = 0; t < n; t++) {
        passes[t] = *proto;
        passes[t].f = t ? f->par->fits[t] : (IbpFit *)proto->f;
        passes[t].lo = ws->n * t / n;
        passes[t].hi = ws->n * (t + 1u) / n;
    }
    return n;
}

/* The count pass's word loops are compiled per word size, mode, counter slots and sets assigned
 * by (am; a greedy set's fit assigns by the one or two before it, a refinement by two or three):
 * with the counter index and the set tests constants, a word takes about half the instructions. */
#define IBP_COUNT_KEY(W, MODE, S, K) (((((W)*4u + (uint32_t)(MODE)) * 8u) + (S)) * 4u + (K))
#define IBP_COUNT_CASE(W, MODE, S, K)                                                                        \
    case IBP_COUNT_KEY(W, MODE, S, K):                                                                       \
        ibp_fit_count(ws, p->member, p->nfit, f, (W), (MODE), (S), (K), (K) ? p->am : NULL, p->lo, p->hi);   \
        break;
#define IBP_COUNT_CASES(W)                                                                                   \
    IBP_COUNT_CASE(W, IBP_FIT_ALL, 1u, 0u)                                                                   \
    IBP_COUNT_CASE(W, IBP_FIT_ALL, IBP_FIT_SLOTS, 0u)                                                        \
    IBP_COUNT_CASE(W, IBP_FIT_SIGN, 1u, 0u)                                                                  \
    IBP_COUNT_CASE(W, IBP_FIT_SIGN, IBP_FIT_SLOTS, 0u)                                                       \
    IBP_COUNT_CASE(W, IBP_FIT_FREE, 1u, 1u)                                                                  \
    IBP_COUNT_CASE(W, IBP_FIT_FREE, IBP_FIT_SLOTS, 1u)                                                       \
    IBP_COUNT_CASE(W, IBP_FIT_FREE, 1u, 2u)                                                                  \
    IBP_COUNT_CASE(W, IBP_FIT_FREE, IBP_FIT_SLOTS, 2u)                                                       \
    IBP_COUNT_CASE(W, IBP_FIT_SETS, 1u, 2u)                                                                  \
    IBP_COUNT_CASE(W, IBP_FIT_SETS, IBP_FIT_SLOTS, 2u)                                                       \
    IBP_COUNT_CASE(W, IBP_FIT_SETS, 1u, 3u)                                                                  \
    IBP_COUNT_CASE(W, IBP_FIT_SETS, IBP_FIT_SLOTS, 3u)

/* The words two 64-bit halves at a time in a vector, bit 4k + j of each half in nibble k of
 * counter j (j < 4), the nibbles emptied into byte lanes every 15 vectors and those into cnt every
 * 255 nibble-fulls. */
void ibp_plan_count_packed(const uint8_t *buf, size_t nvec, uint32_t wbits, uint32_t *cnt)
{
    const ibp_v2u64 ones = {0x1111111111111111u, 0x1111111111111111u};
    const ibp_v2u64 lows = {0x0f0f0f0f0f0f0f0fu, 0x0f0f0f0f0f0f0f0fu};
    size_t v = 0;
    while (v < nvec) {
        ibp_v2u64 bytes[8] = {0};
        for (uint32_t round = 0; round < 17u && v < nvec; round++) {
            ibp_v2u64 nib[4] = {0};
            const size_t stop = nvec - v < 15u ? nvec : v + 15u;
            for (; v < stop; v++) {
                ibp_v2u64 x;
                memcpy(&x, buf + 16u * v, 16);
#pragma GCC unroll 4
                for (uint32_t j = 0; j < 4u; j++)
                    nib[j] += (x >> j) & ones;
            }
            for (uint32_t j = 0; j < 4u; j++) {
                bytes[j] += nib[j] & lows;
                bytes[4u + j] += (nib[j] >> 4) & lows;
            }
        }
        /* Byte q of bytes[h * 4 + j] (q < 8, either half of the vector) counts bit 8q + 4h + j. */
        for (uint32_t k = 0; k < 8u; k++) {
            uint8_t lane[16];
            memcpy(lane, &bytes[k], 16);
            for (uint32_t q = 0; q < 8u; q++)
                cnt[(8u * q + 4u * (k / 4u) + k % 4u) & (wbits - 1u)] += (uint32_t)lane[q] + lane[8u + q];
        }
    }
}

/* Block b of f's groups, n words of w bytes, into the counters of its (set, column) where count. */
static inline __attribute__((always_inline)) void
ibp_group_close(IbpFit *f, size_t b, uint32_t n, const uint32_t w, uint32_t c_count, int count)
{
    IbpGroup *const g = &f->blk[b];
    g->n = n;
    if (!count)
        return;
    uint8_t *const buf = f->grp + b * IBP_GROUP_BYTES;
    const size_t bytes = (size_t)n * w;
    if (bytes % 16u)
        memset(buf + bytes, 0, 16u - bytes % 16u);
    const size_t at = (size_t)g->set * c_count + g->col;
    ibp_codec_kernels()->count_bits(buf, (bytes + 15u) / 16u, w * 8u, f->cnt + at * w * 8u);
    f->ncol[at] += n;
}

/* A new block of f's groups for (set, column). */
static inline size_t ibp_group_open(IbpFit *f, uint32_t set, uint32_t col)
{
    const size_t b = f->nblk++;
    f->blk[b] = (IbpGroup){.set = set, .col = col, .n = 0};
    return b;
}

/* ibp_codec_stage_ref's word loop with w, how and the number of sets ak constants. */
static inline __attribute__((always_inline)) uint32_t
ibp_stage_words(const uint64_t *restrict words, size_t stride, uint32_t n, const uint32_t w,
                const uint32_t how, const uint32_t ak, const IbpStageRoute *rt, uint8_t *const *to,
                uint32_t *fill, uint32_t cap)
{
    uint64_t mk[IBP_MAX_SETS] = {0}, vl[IBP_MAX_SETS] = {0};
    for (uint32_t k = 0; k < ak; k++) {
        mk[k] = rt->mask[k];
        vl[k] = rt->value[k];
    }
    /* Each set's fill, 16 bits a set in one register: kept in an array, a word's fill was a load
     * that waited on the last word's store of it. */
    _Static_assert(IBP_MAX_SETS + 1u <= 4u, "a set's fill is 16 bits of fills");
    static const uint64_t one[4] = {1u, (uint64_t)1 << 16, (uint64_t)1 << 32, (uint64_t)1 << 48};
    uint64_t fills = 0;
    for (uint32_t r = 0; r <= IBP_MAX_SETS; r++)
        fills |= (uint64_t)fill[r] << (16u * r);
    const uint32_t first = rt->first;
    uint32_t i = 0;
    while (i < n) {
        const uint64_t x = words[(size_t)i * stride];
        i++;
        uint32_t route = 1u;
        if (how == IBP_ROUTE_SETS || how == IBP_ROUTE_FREE) {
            uint32_t sel = 0;
#pragma GCC unroll 4
            for (uint32_t k = ak; k > 0; k--)
                sel = (x & mk[k - 1u]) == vl[k - 1u] ? k : sel;
            route = how == IBP_ROUTE_FREE ? sel == 0 : sel;
        } else if (how == IBP_ROUTE_SIGN) {
            route = 1u + (uint32_t)((x >> (w * 8u - 1u)) & 1u);
        }
        if (route < first)
            continue;
        const uint32_t sh = route * 16u;
        const uint32_t at = (uint32_t)(fills >> sh) & 0xffffu;
        ibp_store_word(to[route] + (size_t)at * w, x, w);
        fills += one[route];
        if (at + 1u == cap)
            break;
    }
    for (uint32_t r = 0; r <= IBP_MAX_SETS; r++)
        fill[r] = (uint32_t)(fills >> (16u * r)) & 0xffffu;
    return i;
}

#define IBP_STAGE_CASE(W, HOW, K)                                                                            \
    case IBP_STAGE_KEY(W, HOW, K):                                                                           \
        return ibp_stage_words(words, stride, n, (W), (HOW), (K), rt, to, fill, cap);

/* Compiled per word size, routing and number of sets (those the planner asks for), so that the
 * set tests and the store are constants. */
uint32_t ibp_codec_stage_ref(const uint64_t *words, size_t stride, uint32_t n, uint32_t w,
                             const IbpStageRoute *rt, uint8_t *const *to, uint32_t *fill, uint32_t cap)
{
    _Static_assert(IBP_GROUP_BYTES / 2u < 65536u, "a set's fill is 16 bits");
    const uint32_t ak = ibp_stage_sets(rt);
    switch (IBP_STAGE_KEY(w, rt->how, ak)) {
        IBP_STAGE_EACH(IBP_STAGE_CASE, 2u)
        IBP_STAGE_EACH(IBP_STAGE_CASE, 4u)
        IBP_STAGE_EACH(IBP_STAGE_CASE, 8u)
    default:
        return ibp_stage_words(words, stride, n, w, rt->how, ak, rt, to, fill, cap);
    }
}
#undef IBP_STAGE_CASE

/* The count pass column by column, for few columns: each column's words (every C-th of a chunk)
 * are routed to their set as in ibp_fit_count_run (by the kernel stage) and packed into that set's
 * block of f's groups, counted 16 bytes a vector when full and at the column's end; the histogram
 * pass then takes the words by (set, column) from the blocks, so member is not written.  The
 * counts are those of ibp_fit_count, except set 0's where count0 is 0 (no fit reads them then). */
static void ibp_fit_count_staged(const IbpWords *ws, uint32_t nfit, IbpFit *f, int mode, const IbpMasks *am,
                                 int count0, size_t lo, size_t hi)
{
    const uint32_t w = ws->word_size;
    const uint32_t c_count = ws->columns;
    const uint32_t per_block = IBP_GROUP_BYTES / w;
    const uint32_t ak = am ? am->nsets : 0;
    const uint64_t *const words = ws->w;
    const uint32_t *const cols = ws->col;
    const size_t *const cend = ws->chunk_end;
    uint8_t *const grp = f->grp;
    const IbpCodecKernels *const kern = ibp_codec_kernels();
    /* Without sets only one set or the sign routes: a member to route by is never asked for. */
    assert(ak || mode == IBP_FIT_ALL || mode == IBP_FIT_SIGN);
    /* Set 0's words only where they are counted: no histogram pass reads them otherwise. */
    IbpStageRoute rt = {.nsets = ak, .first = count0 ? 0u : 1u};
    rt.how = ak ? (mode == IBP_FIT_FREE ? IBP_ROUTE_FREE : IBP_ROUTE_SETS)
                : (mode == IBP_FIT_SIGN ? IBP_ROUTE_SIGN : IBP_ROUTE_ONE);
    f->nblk = 0;
    for (uint32_t c = 0; c < c_count; c++) {
        for (uint32_t k = 0; k < ak; k++) {
            rt.mask[k] = am->mask[(size_t)k * c_count + c];
            rt.value[k] = am->value[(size_t)k * c_count + c];
        }
        size_t blk[IBP_MAX_SETS + 1u] = {0};
        uint8_t *to[IBP_MAX_SETS + 1u] = {NULL};
        uint32_t fill[IBP_MAX_SETS + 1u] = {0};
        for (uint32_t r = 0; r <= nfit; r++) {
            blk[r] = ibp_group_open(f, r, c);
            to[r] = grp + blk[r] * IBP_GROUP_BYTES;
        }
        size_t start = 0;
        for (size_t ch = 0; ch < ws->nchunks; ch++) {
            const size_t a = start > lo ? start : lo;
            const size_t b = cend[ch] < hi ? cend[ch] : hi;
            start = cend[ch];
            if (a >= b)
                continue;
            size_t i = a + (c + c_count - cols[a]) % c_count;
            uint32_t left = i < b ? (uint32_t)((b - 1u - i) / c_count + 1u) : 0;
            while (left) {
                const uint32_t took = kern->stage(words + i, c_count, left, w, &rt, to, fill, per_block);
                i += (size_t)took * c_count;
                left -= took;
                for (uint32_t r = 0; r <= nfit; r++) {
                    if (fill[r] < per_block)
                        continue;
                    ibp_group_close(f, blk[r], per_block, w, c_count, r || count0);
                    blk[r] = ibp_group_open(f, r, c);
                    to[r] = grp + blk[r] * IBP_GROUP_BYTES;
                    fill[r] = 0;
                }
            }
            if (hi <= cend[ch])
                break;
        }
        for (uint32_t r = 0; r <= nfit; r++)
            ibp_group_close(f, blk[r], fill[r], w, c_count, r || count0);
    }
    f->grp_of = ws;
    f->grp_gen = ws->gen;
    f->grp_mode = mode;
    f->grp_nfit = nfit;
    f->grp_lo = lo;
    f->grp_hi = hi;
}

/* Bit counts of a share of the words into p->f->cnt / ncol. */
static void ibp_count_pass(IbpPass *p)
{
    const IbpWords *ws = p->ws;
    IbpFit *f = p->f;
    const uint32_t w = ws->word_size;
    const uint32_t wbits = w * 8u;
    const int mode = p->mode;
    const size_t sc = (size_t)(p->nfit + 1u) * ws->columns;
    const uint32_t slots = ws->columns < IBP_FIT_SLOTS ? IBP_FIT_SLOTS : 1u;
    memset(f->cnt, 0, sc * wbits * sizeof(uint32_t));
    memset(f->ncol, 0, sc * sizeof(uint32_t));
    f->grp_of = NULL;
    const uint32_t ak = p->am ? p->am->nsets : 0;
    /* Few columns, each with many words a chunk: column by column through the staging buffers. */
    if (ws->columns <= IBP_STAGE_COLUMNS && (p->hi - p->lo) >= (size_t)ws->nchunks * ws->columns * 8u) {
        ibp_fit_count_staged(ws, p->nfit, f, mode, p->am, p->count0, p->lo, p->hi);
        return;
    }
    memset(f->acc, 0, slots * sc * w * sizeof(uint64_t));
    memset(f->pending, 0, slots * sc);
    switch (IBP_COUNT_KEY(w, mode, slots, ak)) {
        IBP_COUNT_CASES(2u)
        IBP_COUNT_CASES(4u)
        IBP_COUNT_CASES(8u)
    default:
        ibp_fit_count(ws, p->member, p->nfit, f, w, mode, slots, ak, p->am, p->lo, p->hi);
        break;
    }
}

/* Agreement histograms of a share of the words into p->f->hist (its slots summed into slot 0). */
/* Whether f's groups are the words [lo, hi) of ws as a count pass of mode and nfit sets would
 * group them (or grouped by sign, for a one-set histogram). */
static int ibp_fit_grouped(const IbpFit *f, const IbpWords *ws, int mode, uint32_t nfit, size_t lo, size_t hi)
{
    const int sign = f->grp_mode == IBP_FIT_SIGN && mode == IBP_FIT_ALL && nfit == 1u;
    return f->grp_of == ws && f->grp_gen == ws->gen && f->grp_lo == lo && f->grp_hi == hi &&
           ((f->grp_mode == mode && f->grp_nfit == nfit) || sign);
}

static void ibp_hist_pass(IbpPass *p)
{
    const IbpWords *ws = p->ws;
    IbpFit *f = p->f;
    const uint32_t w = ws->word_size;
    const int mode = p->mode;
    const size_t sc = (size_t)(p->nfit + 1u) * ws->columns;
    const uint32_t slots = ws->columns < IBP_FIT_SLOTS ? IBP_FIT_SLOTS : 1u;
    const size_t hs = w * 8u + 1u;
    memset(f->hist, 0, slots * sc * hs * sizeof(uint32_t));
    /* The words as this thread's count pass grouped them, where it did for these words and sets. */
    const int sign = f->grp_mode == IBP_FIT_SIGN && mode == IBP_FIT_ALL && p->nfit == 1u;
    if (ibp_fit_grouped(f, ws, mode, p->nfit, p->lo, p->hi)) {
        _Static_assert(IBP_FIT_SLOTS == 4u, "ibp_fit_hist_groups sums four histograms");
        const uint32_t c_count = ws->columns;
        const IbpCodecKernels *const k = ibp_codec_kernels();
        switch (w * 2u + (p->use_rank != 0)) {
        case 4:
            ibp_fit_hist_groups(p->model, f, c_count, 2u, 0, sign, p->count0, k->agree_hist);
            break;
        case 5:
            ibp_fit_hist_groups(p->model, f, c_count, 2u, 1, sign, p->count0, k->agree_hist);
            break;
        case 8:
            ibp_fit_hist_groups(p->model, f, c_count, 4u, 0, sign, p->count0, k->agree_hist);
            break;
        case 9:
            ibp_fit_hist_groups(p->model, f, c_count, 4u, 1, sign, p->count0, k->agree_hist);
            break;
        case 16:
            ibp_fit_hist_groups(p->model, f, c_count, 8u, 0, sign, p->count0, k->agree_hist);
            break;
        default:
            ibp_fit_hist_groups(p->model, f, c_count, 8u, 1, sign, p->count0, k->agree_hist);
            break;
        }
        return;
    }
    /* A count pass that grouped the words wrote no member to route them by. */
    assert(!f->grp_of || mode == IBP_FIT_ALL);
    if (p->use_rank && ws->columns == 1u && mode == IBP_FIT_ALL && p->nfit == 1u) {
        _Static_assert(IBP_FIT_SLOTS > 1u, "one column keeps IBP_FIT_SLOTS histograms");
        switch (w) {
        case 2:
            ibp_fit_hist_one(ws, p->model, f, 2u, p->lo, p->hi);
            break;
        case 4:
            ibp_fit_hist_one(ws, p->model, f, 4u, p->lo, p->hi);
            break;
        default:
            ibp_fit_hist_one(ws, p->model, f, 8u, p->lo, p->hi);
            break;
        }
    } else if (p->use_rank && slots == 1u)
        IBP_FIT_DISPATCH(ibp_fit_hist_rank(ws, p->member, p->nfit, p->model, f, w_, mode_, 1u, p->lo, p->hi));
    else if (p->use_rank)
        IBP_FIT_DISPATCH(
            ibp_fit_hist_rank(ws, p->member, p->nfit, p->model, f, w_, mode_, IBP_FIT_SLOTS, p->lo, p->hi));
    else
        IBP_FIT_DISPATCH(ibp_fit_hist_search(ws, p->member, p->nfit, p->model, f, w_, mode_, p->lo, p->hi));
    for (uint32_t slot = 1; slot < slots; slot++)
        for (size_t k = 0; k < sc * hs; k++)
            f->hist[k] += f->hist[slot * sc * hs + k];
}

/* Fits one mask per column to the words of each set (mode and member as IBP_FIT_*; nfit sets,
 * written to mask/value set-major): the bits ranked by how invariant they are, then the prefix of
 * that ranking that saves most (m invariant bits save m bits on every word that agrees on all m).
 * This is the threshold sweep of the paper, done exactly per column.  Returns the bits saved in
 * total; f->hist and f->ncol hold set 1's agreement histogram (W*8 + 1 entries per column) and
 * word counts afterwards.  With f->par, the two word passes are shared among its threads; the
 * counts, and so the masks, are the same.  With am, member is first written as ibp_assign writes it
 * for the sets am (by the count pass, which reads the same words). */
static uint64_t ibp_fit_masks_free(const IbpWords *ws, uint8_t *member, const IbpMasks *am, int mode,
                                   uint32_t nfit, IbpFit *f, uint64_t *mask, uint64_t *value,
                                   uint64_t *free_mask, uint64_t *free_value);

static uint64_t ibp_fit_masks(const IbpWords *ws, uint8_t *member, const IbpMasks *am, int mode, uint32_t nfit,
                              IbpFit *f, uint64_t *mask, uint64_t *value)
{
    return ibp_fit_masks_free(ws, member, am, mode, nfit, f, mask, value, NULL, NULL);
}

/* ibp_fit_masks, and with free_mask (mode IBP_FIT_SETS only) one more set fitted to the words no
 * set of am takes, into free_mask/free_value: the set a greedy fit after am's sets would fit
 * (IBP_FIT_FREE), since which words no set takes does not depend on the sets' order.  Those words
 * go through both passes anyway (as set 0), so the extra set costs no word pass. */
/* The count pass of ibp_fit_masks: each (set, column)'s words and bit counts into f->ncol and
 * f->cnt (with am, member written first, as ibp_fit_masks says). */
static void ibp_fit_count_words(const IbpWords *ws, uint8_t *member, const IbpMasks *am, int mode,
                                uint32_t nfit, int count0, IbpFit *f)
{
    const uint32_t wbits = ws->word_size * 8u;
    const size_t sc = (size_t)(nfit + 1u) * ws->columns;
    const IbpPass proto = {.run = ibp_count_pass,
                           .ws = ws,
                           .member = member,
                           .mode = mode,
                           .nfit = nfit,
                           .am = am,
                           .count0 = count0,
                           .f = f};
    IbpPass passes[IBP_PLAN_MAX_THREADS];
    const unsigned nt = ibp_passes_split(ws, f, passes, &proto);
    ibp_passes_run(passes, nt);
    for (unsigned t = 1; t < nt; t++) {
        for (size_t k = 0; k < sc * wbits; k++)
            f->cnt[k] += passes[t].f->cnt[k];
        for (size_t k = 0; k < sc; k++)
            f->ncol[k] += passes[t].f->ncol[k];
    }
}

static uint64_t ibp_fit_finish(const IbpWords *ws, const uint8_t *member, int mode, uint32_t nfit, IbpFit *f,
                               uint64_t *mask, uint64_t *value, uint64_t *free_mask, uint64_t *free_value);

static uint64_t ibp_fit_masks_free(const IbpWords *ws, uint8_t *member, const IbpMasks *am, int mode,
                                   uint32_t nfit, IbpFit *f, uint64_t *mask, uint64_t *value,
                                   uint64_t *free_mask, uint64_t *free_value)
{
    ibp_fit_count_words(ws, member, am, mode, nfit, free_mask != NULL, f);
    return ibp_fit_finish(ws, member, mode, nfit, f, mask, value, free_mask, free_value);
}

/* ibp_fit_masks after its count pass, from the counts in f (which need not come from a count
 * pass over ws, only equal what one in this mode would count). */
static uint64_t ibp_fit_finish(const IbpWords *ws, const uint8_t *member, int mode, uint32_t nfit, IbpFit *f,
                               uint64_t *mask, uint64_t *value, uint64_t *free_mask, uint64_t *free_value)
{
    const uint32_t w = ws->word_size;
    const uint32_t wbits = w * 8u;
    const uint32_t c_count = ws->columns;
    const size_t sc = (size_t)(nfit + 1u) * c_count; /* (set, column) pairs, set 0 discarded */
    const size_t hs = wbits + 1u; /* histogram entries per (set, column): agreement 0 to wbits */
    /* Rank tables where they take at most 32 bytes a word: a lookup a byte against a binary
     * search of 5-7 steps, each waiting on the last (ocr_rec_linear85's 4 MiB tile 7% fewer
     * instructions).  Grouped words (agree_hist) took them only up to 4 bytes a word, where
     * their search takes about as many instructions, but more time: 2-6% more a plan on the
     * 4 MiB tiles. */
    const int use_rank = sc * w * 256u <= f->rank_cap && sc * w * 32u <= ws->n * 4u;
    const IbpPass proto = {.run = ibp_hist_pass,
                           .ws = ws,
                           .member = member,
                           .mode = mode,
                           .nfit = nfit,
                           .use_rank = use_rank,
                           .model = f,
                           .count0 = free_mask != NULL,
                           .f = f};
    IbpPass passes[IBP_PLAN_MAX_THREADS];
    const unsigned nt = ibp_passes_split(ws, f, passes, &proto);
    /* Rank tables of whole bytes only for a thread that takes the words word by word; grouped
     * words take the nibble tables alone (whole-byte tables took up to 4% of a plan to build). */
    int whole = 0;
    for (unsigned t = 0; t < nt; t++)
        whole |= !ibp_fit_grouped(passes[t].f, ws, mode, nfit, passes[t].lo, passes[t].hi);
    /* Set 0's words are ignored unless free_mask asks for them: its constants only need to be
     * valid, and only where the histogram pass looks them up (all words are set 1's in
     * IBP_FIT_ALL). */
    const size_t first = free_mask ? 0 : c_count;
    if (!free_mask && mode != IBP_FIT_ALL) {
        memset(f->maj, 0, c_count * sizeof(uint64_t));
        memset(f->prefix, 0, c_count * 65u * sizeof(uint64_t));
        if (use_rank) {
            memset(f->rank, (int)wbits, (size_t)c_count * w * 256u);
            memset(f->nib, (int)wbits, (size_t)c_count * w * IBP_RANK_NIBBLES);
        }
    }
    for (size_t at = first; at < sc; at++) {
        const uint32_t *cnt = f->cnt + at * wbits;
        const uint32_t n = f->ncol[at];
        uint8_t order[64];
        uint32_t freq[64];
        uint64_t maj = 0;
        for (uint32_t b = 0; b < wbits; b++) {
            freq[b] = cnt[b] * 2u > n ? cnt[b] : n - cnt[b];
            if (cnt[b] * 2u > n)
                maj |= (uint64_t)1 << b;
        }
        ibp_rank_bits(freq, wbits, n, order);
        uint64_t *prefix = f->prefix + at * 65u;
        prefix[0] = 0;
        for (uint32_t m = 1; m <= wbits; m++)
            prefix[m] = prefix[m - 1] | ((uint64_t)1 << order[m - 1]);
        f->maj[at] = maj;
        if (use_rank) {
            uint8_t rk[64];
            for (uint32_t m = 0; m < wbits; m++)
                rk[order[m]] = (uint8_t)m;
            uint8_t *const t = f->rank + at * w * 256u;
            uint8_t *const nib = f->nib + at * w * IBP_RANK_NIBBLES;
            for (uint32_t q = 0; q < w; q++)
                ibp_rank_table(rk + 8u * q, (uint8_t)wbits, nib + q * IBP_RANK_NIBBLES,
                               whole ? t + q * 256u : NULL);
        }
    }
    ibp_passes_run(passes, nt);
    for (unsigned t = 1; t < nt; t++)
        for (size_t k = 0; k < sc * hs; k++)
            f->hist[k] += passes[t].f->hist[k];
    uint64_t saved = 0;
    for (size_t at = first; at < sc; at++) {
        const uint32_t *h = f->hist + at * hs;
        uint64_t at_least = 0;
        uint64_t best = 0;
        uint32_t best_m = 0;
        for (uint32_t m = wbits; m >= 1u; m--) {
            at_least += h[m];
            if ((uint64_t)m * at_least > best &&
                (!f->gpu_runs || ibp_gpu_runs_fit(f->prefix[at * 65u + m], w))) {
                best = (uint64_t)m * at_least;
                best_m = m;
            }
        }
        if (at < c_count) {
            free_mask[at] = f->prefix[at * 65u + best_m];
            free_value[at] = f->maj[at] & free_mask[at];
            continue;
        }
        mask[at - c_count] = f->prefix[at * 65u + best_m];
        value[at - c_count] = f->maj[at] & mask[at - c_count];
        saved += best;
    }
    return saved;
}

/* Orders each column's sets by invariant bits, most first, so the encoder's first match is the
 * cheapest one. */
static void ibp_masks_sort(IbpMasks *m, uint32_t c_count)
{
    for (uint32_t c = 0; c < c_count; c++) {
        for (uint32_t a = 1; a < m->nsets; a++) {
            for (uint32_t b = a; b > 0; b--) {
                const size_t i = (size_t)(b - 1u) * c_count + c;
                const size_t j = (size_t)b * c_count + c;
                if (ibp_popcount(m->mask[i]) >= ibp_popcount(m->mask[j]))
                    break;
                const uint64_t tm = m->mask[i];
                const uint64_t tv = m->value[i];
                m->mask[i] = m->mask[j];
                m->value[i] = m->value[j];
                m->mask[j] = tm;
                m->value[j] = tv;
            }
        }
    }
}

/* ibp_codec_assign_ref's word loop with K (t->nsets) a constant, and run (NULL or not) a constant
 * where inlined.  A word's size by conditional moves from the last set (which set matches is
 * data, and a branch on it mispredicts). */
static inline __attribute__((always_inline)) uint64_t
ibp_assign_words(const uint64_t *restrict words, size_t n, uint32_t wbits, const IbpAssignTable *t,
                 uint32_t j0, uint32_t base, uint32_t *restrict run, const uint32_t k_count)
{
    const uint64_t *restrict const mk = t->mask;
    const uint64_t *restrict const vl = t->value;
    const uint64_t *restrict const vb = t->bits;
    const size_t stride = t->stride;
    const uint32_t period = t->period;
    uint64_t total = 0;
    uint32_t sum = base;
    uint32_t j = j0;
    for (size_t i = 0; i < n; i++) {
        const uint64_t x = words[i];
        uint32_t sz = wbits;
#pragma GCC unroll 4
        for (uint32_t k = k_count; k > 0; k--) {
            const size_t idx = (size_t)(k - 1u) * stride + j;
            /* The variable bits loaded whether taken or not (the empty asm keeps the load out of
             * the condition): loaded only where taken, the conditional move became a branch, which
             * mispredicts. */
            uint32_t v = (uint32_t)vb[idx];
            __asm__("" : "+r"(v));
            sz = (x & mk[idx]) == vl[idx] ? v : sz;
        }
        total += sz;
        if (run) {
            sum += sz;
            run[i] = sum;
        }
        j = j + 1u == period ? 0 : j + 1u;
    }
    return total;
}

uint64_t ibp_codec_assign_ref(const uint64_t *words, size_t n, uint32_t wbits, const IbpAssignTable *t,
                              uint32_t j0, uint32_t base, uint32_t *run)
{
    IBP_ASSIGN_BY_SETS(ibp_assign_words, words, n, wbits, t, j0, base, run);
}

/* Entries of an ibp_assign table for c_count columns, a set: a period of at least 8 and 8 more. */
static size_t ibp_assign_stride(uint32_t c_count)
{
    return (size_t)c_count * ((8u + c_count - 1u) / c_count) + 8u;
}

/* Bytes of an ibp_assign table for any candidate of at most max_cols columns (the period of fewer
 * than 8 columns is less than 16): 64- and 32-bit entries, three arrays of each. */
static size_t ibp_assign_bytes(uint32_t max_cols)
{
    return 3u * IBP_MAX_SETS * ((max_cols > 16u ? max_cols : 16u) + 8u) *
           (sizeof(uint64_t) + sizeof(uint32_t));
}

/* The bits of all words of the sample under masks m with per-word selectors and no row grouping.
 * With prefix (ws->n + 1 entries), also the running sums of the words' sizes without selectors
 * (prefix[i]: words before i), what ibp_pick_rows takes: written here, they cost no pass of
 * their own.  tab: ibp_assign_bytes(ws->columns) bytes at least, where the
 * kernel's table of m is laid out.  Each chunk's columns are counted from its first, not read: the
 * column array is half as many bytes again as the words, and the passes over them wait on memory. */
static uint64_t ibp_assign(const IbpWords *ws, const IbpMasks *m, uint64_t *tab, uint32_t *prefix)
{
    const uint32_t wbits = ws->word_size * 8u;
    const uint32_t c_count = ws->columns;
    const size_t stride = ibp_assign_stride(c_count);
    uint64_t *const mk = tab;
    uint64_t *const vl = tab + IBP_MAX_SETS * stride;
    uint64_t *const vb = tab + 2u * IBP_MAX_SETS * stride;
    uint32_t *const mk32 = (uint32_t *)(tab + 3u * IBP_MAX_SETS * stride);
    uint32_t *const vl32 = mk32 + IBP_MAX_SETS * stride;
    uint32_t *const vb32 = mk32 + 2u * IBP_MAX_SETS * stride;
    const int narrow = ws->word_size < 8u;
    for (uint32_t k = 0; k < m->nsets; k++)
        for (size_t j = 0, c = 0; j < stride; j++, c = c + 1u == c_count ? 0 : c + 1u) {
            const size_t at = (size_t)k * c_count + c;
            const size_t e = k * stride + j;
            mk[e] = m->mask[at];
            vl[e] = m->value[at];
            vb[e] = wbits - ibp_popcount(m->mask[at]);
            if (narrow) {
                mk32[e] = (uint32_t)mk[e];
                vl32[e] = (uint32_t)vl[e];
                vb32[e] = (uint32_t)vb[e];
            }
        }
    const IbpAssignTable t = {.mask = mk,
                              .value = vl,
                              .bits = vb,
                              .mask32 = narrow ? mk32 : NULL,
                              .value32 = narrow ? vl32 : NULL,
                              .bits32 = narrow ? vb32 : NULL,
                              .stride = stride,
                              .nsets = m->nsets,
                              .period = (uint32_t)(stride - 8u)};
    const IbpCodecKernels *const kern = ibp_codec_kernels();
    uint64_t sizes = 0;
    uint32_t base = 0;
    if (prefix)
        prefix[0] = 0;
    for (size_t ch = 0, i = 0; ch < ws->nchunks; ch++) {
        const size_t end = ws->chunk_end[ch];
        if (i < end) {
            const uint64_t s = kern->assign(ws->w + i, end - i, wbits, &t, ws->col[i], base,
                                            prefix ? prefix + i + 1u : NULL);
            sizes += s;
            base += (uint32_t)s;
        }
        i = end;
    }
    return sizes + (uint64_t)ws->n * ibp_fmt_sel_bits(m->nsets);
}

/* The greedy start of the clustered variant: sets [from, to) fitted one after the other, set 1
 * over all words and each further set over the words no earlier set takes (sets before `from`
 * are already in mask/value, set-major). */
static void ibp_fit_greedy(const IbpWords *ws, uint32_t from, uint32_t to, IbpFit *f, uint8_t *member,
                           uint64_t *mask, uint64_t *value)
{
    const uint32_t c_count = ws->columns;
    for (uint32_t k = from; k < to; k++) {
        if (k == 0) {
            ibp_fit_masks(ws, NULL, NULL, IBP_FIT_ALL, 1, f, mask, value);
        } else {
            const IbpMasks partial = {.nsets = k, .mask = mask, .value = value};
            ibp_fit_masks(ws, member, &partial, IBP_FIT_FREE, 1, f, mask + (size_t)k * c_count,
                          value + (size_t)k * c_count);
        }
    }
}

/* Refines greedy sets: rounds of reassigning every word to its cheapest set and refitting each
 * set to its own words; the sets end ordered by invariant bits. */
static void ibp_refine_sets(const IbpWords *ws, IbpFit *f, uint8_t *member, IbpMasks *m, int rounds,
                            uint64_t *free_mask, uint64_t *free_value)
{
    const uint32_t c_count = ws->columns;
    for (int round = 0; round < rounds && m->nsets > 1; round++) {
        ibp_masks_sort(m, c_count);
        /* The words are assigned by m in the fit's count pass; the fit writes m only after both
         * of its passes.  The first round's words that no set takes are those of the sets m
         * starts with, whatever their order: the greedy set after them, where asked for. */
        ibp_fit_masks_free(ws, member, m, IBP_FIT_SETS, m->nsets, f, m->mask, m->value,
                           round ? NULL : free_mask, round ? NULL : free_value);
    }
    ibp_masks_sort(m, c_count);
}

/* Fits K mask sets per column (the clustered variant): greedy sets, then refined. */
static void ibp_fit_sets(const IbpWords *ws, uint32_t nsets, IbpFit *f, uint8_t *member, IbpMasks *out)
{
    out->nsets = nsets;
    ibp_fit_greedy(ws, 0, nsets, f, member, out->mask, out->value);
    ibp_refine_sets(ws, f, member, out, IBP_REFIT_ROUNDS, NULL, NULL);
}

/* Row sizes the row-length pick keeps at once: a chunk's words at most (IBP_CHUNK_MAX of 2-byte
 * words), so that rows of any length start from one word each. */
#define IBP_ROW_SUMS_MAX (IBP_CHUNK_MAX / 2u)

/* Best row length for per-word sizes: rows are packed (selectors + fields) or raw, whichever
 * is smaller, plus one flag bit each.  Rows restart at every chunk, as at every block.  prefix:
 * the running sums of the sizes (ibp_assign).  The lengths are doubling chains (8 .. 1024, and
 * the period's C, 2C, ...): a chain's rows of 2R words are pairs of its rows of R, so each
 * chunk's row sizes are read from prefix once a chain, at its shortest length, and summed in
 * pairs for the next (kernel row_level), where a strided read a length took most of the pick.
 * sums: IBP_ROW_SUMS_MAX entries of scratch. */
static uint32_t ibp_pick_rows(const IbpWords *ws, const uint32_t *prefix, uint32_t sb, uint32_t *sums,
                              uint64_t *bits_out)
{
    static const uint32_t fixed[] = {8, 16, 32, 64, 128, 256, 512, 1024};
    uint32_t cand[32];
    uint32_t nc = 0;
    const uint32_t wbits = ws->word_size * 8u;
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        cand[nc++] = fixed[i];
    for (uint32_t r = ws->columns; r <= IBP_MAX_ROW_WORDS && nc < 32u; r *= 2u) {
        /* A length already listed (a power-of-two period) would only be counted again: a later
         * equal count never wins. */
        int listed = 0;
        for (uint32_t k = 0; k < nc; k++)
            listed |= cand[k] == r;
        if (!listed)
            cand[nc++] = r;
        if (r >= 1024u)
            break;
    }
    const IbpCodecKernels *const kern = ibp_codec_kernels();
    uint64_t bits[32] = {0};
    uint8_t done[32] = {0};
    for (uint32_t ci = 0; ci < nc; ci++) {
        if (done[ci])
            continue;
        /* The chain from cand[ci]: which candidate each doubling is, if any. */
        const uint32_t r0 = cand[ci];
        uint32_t at[32];
        uint32_t levels = 0;
        for (uint32_t r = r0; r <= IBP_MAX_ROW_WORDS && levels < 32u; r *= 2u) {
            at[levels] = nc;
            for (uint32_t k = ci; k < nc; k++)
                if (cand[k] == r && !done[k]) {
                    at[levels] = k;
                    done[k] = 1;
                }
            levels++;
        }
        while (at[levels - 1u] == nc)
            levels--;
        size_t start = 0;
        for (size_t ch = 0; ch < ws->nchunks; ch++) {
            const size_t end = ws->chunk_end[ch];
            const size_t n0 = (end - start) / r0;
            assert(n0 <= IBP_ROW_SUMS_MAX);
            for (size_t q = 0; q < n0; q++)
                sums[q] = prefix[start + (q + 1u) * r0] - prefix[start + q * r0];
            for (uint32_t l = 0; l < levels; l++) {
                const uint32_t r = r0 << l;
                const size_t nrows = (end - start) / r;
                const uint64_t b = kern->row_level(sums, nrows, r * sb, r * wbits);
                if (at[l] == nc)
                    continue;
                bits[at[l]] += b;
                const size_t j = start + nrows * r;
                if (j < end) {
                    const size_t n = end - j;
                    const uint64_t packed = (uint64_t)n * sb + (prefix[end] - prefix[j]);
                    const uint64_t raw = (uint64_t)n * wbits;
                    bits[at[l]] += (packed < raw ? packed : raw) + 1u;
                }
            }
            start = end;
        }
    }
    uint64_t best = UINT64_MAX;
    uint32_t best_r = cand[0];
    for (uint32_t ci = 0; ci < nc; ci++)
        if (bits[ci] < best) {
            best = bits[ci];
            best_r = cand[ci];
        }
    *bits_out = best;
    return best_r;
}

uint64_t ibp_codec_row_level_from(uint32_t *sums, size_t from, size_t nrows, uint32_t row_sel,
                                  uint32_t row_raw)
{
    uint64_t bits = 0;
    for (size_t q = from; q < nrows; q++) {
        const uint64_t packed = (uint64_t)row_sel + sums[q];
        bits += (packed < row_raw ? packed : row_raw) + 1u;
    }
    for (size_t q = from / 2u; q < nrows / 2u; q++)
        sums[q] = sums[2u * q] + sums[2u * q + 1u];
    return bits;
}

uint64_t ibp_codec_row_level_ref(uint32_t *sums, size_t nrows, uint32_t row_sel, uint32_t row_raw)
{
    return ibp_codec_row_level_from(sums, 0, nrows, row_sel, row_raw);
}

/* Equal-byte counts at every lag up to IBP_PERIOD_MAX over a stretch of the region; the lags
 * where bytes repeat most are the candidate row periods. */
static uint32_t ibp_find_periods(const uint8_t *p, size_t len, uint32_t *out, uint32_t max_out)
{
    const size_t n = ibp_min_sz(len, IBP_PERIOD_BYTES);
    const uint32_t pmax = (uint32_t)ibp_min_sz(IBP_PERIOD_MAX, n / 4u);
    uint32_t score[IBP_PERIOD_MAX + 1];
    uint32_t count = 0;
    if (pmax < 2u)
        return 0;
    uint32_t eq[IBP_PERIOD_MAX + 1];
    ibp_codec_kernels()->lag_equal(p, n, pmax, eq);
    for (uint32_t lag = 1; lag <= pmax; lag++)
        score[lag] = (uint32_t)((uint64_t)eq[lag] * 65536u / ((n - lag) / 8u * 8u + 1u));
    /* Greedy: highest score first; a lag that is a multiple of a picked one must beat it
     * clearly, or it adds nothing the shorter period does not already give.  Which lags a pick
     * rules out is marked once, on its multiples (tested against every pick at every lag, with a
     * division each, it took 3-4% of a plan on float tensors). */
    uint8_t skip[IBP_PERIOD_MAX + 1] = {0};
    for (uint32_t pick = 0; pick < max_out; pick++) {
        uint32_t best = 0;
        for (uint32_t lag = 1; lag <= pmax; lag++)
            if (!skip[lag] && (best == 0 || score[lag] > score[best]))
                best = lag;
        if (best == 0)
            break;
        out[count++] = best;
        skip[best] = 1;
        for (uint32_t lag = 2u * best; lag <= pmax; lag += best)
            skip[lag] |= score[lag] < score[best] + 655u;
    }
    return count;
}

static uint32_t ibp_gcd(uint32_t a, uint32_t b)
{
    while (b) {
        const uint32_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Region-level estimate from sample bits: scale to the region, add the mask tables. */
static uint64_t ibp_scale(uint64_t sample_bits, size_t sample_bytes, size_t len, uint32_t nsets,
                          uint32_t c_count, uint32_t w)
{
    const double scaled = sample_bytes ? (double)sample_bits * ((double)len / (double)sample_bytes) : 0.0;
    return (uint64_t)scaled + (uint64_t)nsets * c_count * 2u * w * 8u + (uint64_t)c_count * 8u;
}

static uint64_t ibp_exact_bytes(const IbpCodecPlan *plan, const IbpSample *s, size_t len)
{
    const IbpCodecKernels *k = ibp_codec_kernels();
    uint64_t bytes = 0;
    for (size_t i = 0; i < s->n; i++) {
        const IbpChunk *ch = &s->chunks[i];
        bytes += k->cost(plan, ch->p, ch->len, (uint32_t)((ch->off / plan->word_size) % plan->columns));
    }
    const double scaled = s->bytes ? (double)bytes * ((double)len / (double)s->bytes) : 0.0;
    return (uint64_t)scaled + plan->blob_len;
}

/* The counts of a one-set fit to all the words of ws (set 1 of f, as a count pass in mode
 * IBP_FIT_ALL leaves them), and those of the same words zigzagged kept in set 3 for
 * ibp_counts_take_zigzag: the words are counted in two sets by their top bit, and bit b of a
 * zigzagged word is bit b - 1 of the word, flipped where the top bit is set (bit 0 the top bit). */
static void ibp_counts_by_sign(const IbpWords *ws, IbpFit *f)
{
    const uint32_t c_count = ws->columns;
    const uint32_t wbits = ws->word_size * 8u;
    ibp_fit_count_words(ws, NULL, NULL, IBP_FIT_SIGN, 2, 0, f);
    for (uint32_t c = 0; c < c_count; c++) {
        uint32_t *const pos = f->cnt + (size_t)(c_count + c) * wbits; /* top bit clear */
        const uint32_t *const neg = f->cnt + (size_t)(2u * c_count + c) * wbits;
        uint32_t *const zz = f->cnt + (size_t)(3u * c_count + c) * wbits;
        const uint32_t npos = f->ncol[c_count + c], nneg = f->ncol[2u * c_count + c];
        zz[0] = nneg;
        for (uint32_t b = 1; b < wbits; b++)
            zz[b] = pos[b - 1u] + (nneg - neg[b - 1u]);
        for (uint32_t b = 0; b < wbits; b++)
            pos[b] += neg[b];
        f->ncol[c_count + c] = npos + nneg;
        f->ncol[3u * c_count + c] = npos + nneg;
    }
}

/* The zigzagged words' counts ibp_counts_by_sign kept, as set 1's. */
static void ibp_counts_take_zigzag(IbpFit *f, uint32_t c_count, uint32_t w)
{
    const size_t wbits = (size_t)w * 8u;
    memcpy(f->cnt + c_count * wbits, f->cnt + 3u * c_count * wbits, c_count * wbits * sizeof(uint32_t));
    memcpy(f->ncol + c_count, f->ncol + 3u * c_count, c_count * sizeof(uint32_t));
}

uint64_t ibp_plan_bits_bound(const uint32_t *cnt, uint32_t wbits, uint32_t n)
{
    uint32_t freq[64];
    for (uint32_t b = 0; b < wbits; b++)
        freq[b] = cnt[b] * 2u > n ? cnt[b] : n - cnt[b];
    /* Descending order: an insertion sort of at most 64. */
    for (uint32_t a = 1; a < wbits; a++)
        for (uint32_t b = a; b > 0 && freq[b] > freq[b - 1u]; b--) {
            const uint32_t t = freq[b];
            freq[b] = freq[b - 1u];
            freq[b - 1u] = t;
        }
    uint64_t saved = 0;
    for (uint32_t m = 1; m <= wbits; m++)
        saved = (uint64_t)m * freq[m - 1u] > saved ? (uint64_t)m * freq[m - 1u] : saved;
    return (uint64_t)n * wbits - saved;
}

/* Zigzags every word of f's groups in place, 16 bytes a step in lanes of the word size: a block's
 * bytes past its words are zeros (ibp_group_close) or unread, and stay so. */
static void ibp_groups_zigzag(IbpFit *f, uint32_t w)
{
    for (size_t b = 0; b < f->nblk; b++) {
        uint8_t *const buf = f->grp + b * IBP_GROUP_BYTES;
        const size_t nvec = ((size_t)f->blk[b].n * w + 15u) / 16u;
        for (size_t v = 0; v < nvec; v++) {
            uint8_t *const at = buf + 16u * v;
            if (w == 2u) {
                ibp_v8u16 x;
                memcpy(&x, at, 16);
                x = (x << 1) ^ -(x >> 15);
                memcpy(at, &x, 16);
            } else if (w == 4u) {
                ibp_v4u32 x;
                memcpy(&x, at, 16);
                x = (x << 1) ^ -(x >> 31);
                memcpy(at, &x, 16);
            } else {
                ibp_v2u64 x;
                memcpy(&x, at, 16);
                x = (x << 1) ^ -(x >> 63);
                memcpy(at, &x, 16);
            }
        }
    }
}

/* Picks the transform of each column among none, zigzag, delta, delta+zigzag and xor by the
 * single-set bits each leaves; a transform must save 1% of the column to be taken. */
static int ibp_pick_xforms(const IbpSample *s, uint32_t w, uint32_t c_count, IbpWords *ws, IbpFit *f,
                           uint64_t *mask, uint64_t *value, uint8_t *xform)
{
    static const uint8_t options[] = {IBP_XF_ZIGZAG, IBP_XF_PRED_DELTA, IBP_XF_PRED_DELTA | IBP_XF_ZIGZAG,
                                      IBP_XF_PRED_XOR};
    const size_t nopt = sizeof(options) / sizeof(options[0]);
    uint64_t *col_bits = malloc((size_t)c_count * sizeof(uint64_t));
    uint8_t *trial = malloc(c_count);
    int rc = -ENOMEM;
    if (!col_bits || !trial)
        goto fail;
    memset(xform, 0, c_count);
    const uint32_t wbits = w * 8u;
    for (size_t o = 0; o <= nopt; o++) {
        const uint8_t xf = o ? options[o - 1] : 0;
        const uint8_t before = o > 1u ? options[o - 2] : 0; /* the option tried before, if o > 0 */
        memset(trial, xf, c_count);
        /* An option that only zigzags the one before takes the counts that one left, and needs
         * its words only for the histogram pass. */
        const int derived = o && xf == (before | IBP_XF_ZIGZAG) && !(before & IBP_XF_ZIGZAG);
        if (derived) {
            ibp_counts_take_zigzag(f, c_count, w);
        } else {
            rc = ibp_words_load(s, w, c_count, trial, ws);
            if (rc)
                goto fail;
            if (o < nopt && options[o] == (xf | IBP_XF_ZIGZAG) && !(xf & IBP_XF_ZIGZAG))
                ibp_counts_by_sign(ws, f);
            else
                ibp_fit_count_words(ws, NULL, NULL, IBP_FIT_ALL, 1, 0, f);
        }
        /* The histogram pass (and a derived option's words) only where the counts leave this
         * option a chance in some column. */
        if (o) {
            int chance = 0;
            for (uint32_t c = 0; c < c_count && !chance; c++)
                chance =
                    ibp_plan_bits_bound(f->cnt + (size_t)(c_count + c) * wbits, wbits, f->ncol[c_count + c]) *
                        100u <
                    col_bits[c] * 99u;
            if (!chance)
                continue;
        }
        if (derived) {
            /* The words the count pass grouped by sign, zigzagged where they lie, where it grouped
             * them (a load and a histogram pass over the 64-bit words, word by word, otherwise). */
            if (f->grp_of == ws && f->grp_gen == ws->gen && f->grp_mode == IBP_FIT_SIGN)
                ibp_groups_zigzag(f, w);
            else
                rc = ibp_words_load(s, w, c_count, trial, ws);
            if (rc)
                goto fail;
        }
        ibp_fit_finish(ws, NULL, IBP_FIT_ALL, 1, f, mask, value, NULL, NULL);
        /* Bits per column under this transform: words * W*8 minus what its mask saves. */
        for (uint32_t c = 0; c < c_count; c++) {
            const uint32_t *h = f->hist + (size_t)(c_count + c) * (wbits + 1u);
            const uint32_t m = (uint32_t)ibp_popcount(mask[c]);
            uint64_t agree = 0;
            for (uint32_t k = m; k <= wbits; k++)
                agree += h[k];
            const uint64_t bits = (uint64_t)f->ncol[c_count + c] * wbits - (uint64_t)m * agree;
            if (o == 0 || bits * 100u < col_bits[c] * 99u) {
                col_bits[c] = bits;
                xform[c] = trial[0];
            }
        }
    }
    rc = 0;
fail:
    free(col_bits);
    free(trial);
    return rc;
}

static int ibp_plan_trivial(size_t block_size, IbpCodecPlan **out)
{
    const uint64_t zero = 0;
    return ibp_codec_plan_build(2, 1, 64, 1, (uint32_t)block_size, NULL, &zero, &zero, out);
}

/* Work space of one planning thread, sized for the widest candidate. */
typedef struct IbpWork {
    IbpWords ws; /* the sample as words of the candidate being judged */
    IbpFit fit;
    uint8_t *member;
    uint32_t *prefix;
    uint8_t *xform;
    IbpMasks m;
    uint64_t *greedy_mask; /* the greedy sets of ibp_job_sets, before refinement */
    uint64_t *greedy_value;
    uint64_t *assign_tab; /* ibp_assign's table */
    uint32_t *row_sums;   /* ibp_pick_rows' scratch */
    uint32_t cols; /* the widest candidate and most words it was allocated for */
    size_t words;
} IbpWork;

/* Work spaces a thread keeps from one plan for its next: new ones are new pages, each faulted in
 * on first use, every plan (some 330 page faults a plan on a 256 MiB tile of ocr_rec_linear85,
 * 4% of its planning time).  Freed when the thread exits. */
typedef struct IbpWorkKeep {
    IbpWork work[IBP_PLAN_MAX_THREADS];
    unsigned n;
} IbpWorkKeep;

#define IBP_KEEP_BYTES ((size_t)32 * 1024 * 1024) /* most bytes of work spaces a thread keeps */

static pthread_key_t ibp_keep_key;
static int ibp_keep_ok;
static pthread_once_t ibp_keep_once = PTHREAD_ONCE_INIT;

static void ibp_work_free(IbpWork *wk)
{
    ibp_words_free(&wk->ws);
    ibp_fit_free(&wk->fit);
    free(wk->member);
    free(wk->prefix);
    free(wk->xform);
    free(wk->m.mask);
    free(wk->m.value);
    free(wk->greedy_mask);
    free(wk->greedy_value);
    free(wk->assign_tab);
    free(wk->row_sums);
    memset(wk, 0, sizeof(*wk));
}

/* Bytes a work space holds, its word buffers as they have grown included. */
static size_t ibp_work_bytes(const IbpWork *wk)
{
    const IbpWords *ws = &wk->ws;
    return wk->fit.bytes + wk->words * (1u + sizeof(uint32_t)) + sizeof(uint32_t) + wk->cols +
           4u * (size_t)IBP_MAX_SETS * wk->cols * sizeof(uint64_t) + ibp_assign_bytes(wk->cols) +
           ws->cap * (sizeof(uint64_t) + sizeof(uint32_t)) + ws->chunk_cap * sizeof(size_t) +
           ws->cycle_len * sizeof(uint32_t) + IBP_ROW_SUMS_MAX * sizeof(uint32_t);
}

static void ibp_keep_destroy(void *p)
{
    IbpWorkKeep *k = p;
    for (unsigned t = 0; t < k->n; t++)
        ibp_work_free(&k->work[t]);
    free(k);
}

static void ibp_keep_init(void)
{
    ibp_keep_ok = pthread_key_create(&ibp_keep_key, ibp_keep_destroy) == 0;
}

/* Moves the work spaces the calling thread kept into work[0 .. n) and returns n; the rest of work
 * is zeroed.  The thread keeps none until ibp_keep_give. */
static unsigned ibp_keep_take(IbpWork work[IBP_PLAN_MAX_THREADS])
{
    memset(work, 0, IBP_PLAN_MAX_THREADS * sizeof(*work));
    pthread_once(&ibp_keep_once, ibp_keep_init);
    IbpWorkKeep *k = ibp_keep_ok ? pthread_getspecific(ibp_keep_key) : NULL;
    if (!k)
        return 0;
    const unsigned n = k->n;
    memcpy(work, k->work, n * sizeof(*work));
    k->n = 0;
    return n;
}

/* Keeps work[0 .. n) for the calling thread's next plan, as many as IBP_KEEP_BYTES holds, and
 * frees the rest. */
static void ibp_keep_give(IbpWork *work, unsigned n)
{
    /* n > 0: ibp_keep_take ran on this thread, ibp_keep_ok is set. */
    IbpWorkKeep *k = n && ibp_keep_ok ? pthread_getspecific(ibp_keep_key) : NULL;
    if (n && ibp_keep_ok && !k) {
        k = calloc(1, sizeof(*k));
        if (k && pthread_setspecific(ibp_keep_key, k)) {
            free(k);
            k = NULL;
        }
    }
    size_t kept = 0;
    for (unsigned t = 0; t < n; t++) {
        const size_t bytes = ibp_work_bytes(&work[t]);
        if (k && work[t].member && kept + bytes <= IBP_KEEP_BYTES) {
            k->work[k->n++] = work[t];
            kept += bytes;
        } else {
            ibp_work_free(&work[t]);
        }
    }
}

/* Readies wk for candidates of at most max_cols columns and max_words words: a kept work space as
 * it is where it is large enough, else a new one. */
static int ibp_work_alloc(IbpWork *wk, uint32_t max_cols, size_t max_words)
{
    if (wk->member && wk->cols >= max_cols && wk->words >= max_words) {
        ibp_fit_reuse(&wk->fit, max_cols, max_words * 2u);
        return 0;
    }
    ibp_work_free(wk);
    const size_t masks = (size_t)IBP_MAX_SETS * max_cols * sizeof(uint64_t);
    int rc = ibp_fit_alloc(&wk->fit, max_cols, max_words * 2u);
    if (rc)
        return rc;
    wk->member = malloc(max_words);
    wk->prefix = malloc((max_words + 1u) * sizeof(uint32_t));
    wk->xform = malloc(max_cols);
    wk->m.mask = malloc(masks);
    wk->m.value = malloc(masks);
    wk->greedy_mask = malloc(masks);
    wk->greedy_value = malloc(masks);
    wk->assign_tab = malloc(ibp_assign_bytes(max_cols));
    wk->row_sums = malloc(IBP_ROW_SUMS_MAX * sizeof(uint32_t));
    if (!wk->member || !wk->prefix || !wk->xform || !wk->m.mask || !wk->m.value || !wk->greedy_mask ||
        !wk->greedy_value || !wk->assign_tab || !wk->row_sums) {
        ibp_work_free(wk);
        return -ENOMEM;
    }
    wk->cols = max_cols;
    wk->words = max_words;
    return 0;
}

/* The sized outcome of one fitted candidate. */
typedef struct IbpTrial {
    uint64_t bytes; /* exact, on the judging half, scaled to the region; UINT64_MAX: not tried */
    uint32_t rows;
} IbpTrial;

/* A (word size, period) pair the planner considers, and what it found for it. */
typedef struct IbpCandidate {
    uint32_t word_size;
    uint32_t columns;
    uint64_t est_bits;                /* per region, metadata included: single-set IBP on the screen sample */
    IbpTrial plain;                   /* one set, no transforms */
    IbpTrial xformed;                 /* one set, the transforms ibp_pick_xforms chose (when it chose any) */
    IbpTrial more[IBP_MAX_SETS - 1u]; /* 2 .. IBP_MAX_SETS sets, for the few best */
    IbpTrial more_alt[IBP_MAX_SETS - 1u]; /* the same with the other one-set variant's transforms */
    uint8_t *xform;                   /* the better one-set variant's transforms */
    uint8_t *alt_xform;               /* the other variant's (with has_alt) */
    int has_alt;
    uint64_t one_set;                 /* its bytes */
    /* Each variant's one-set masks ({mask, value} x C, then the alt variant's): the first greedy
     * set of its mask-set trials, fitted to the same words. */
    uint64_t *set1;
} IbpCandidate;

#define IBP_MAX_CANDIDATES (3u * (IBP_PERIOD_PICKS + 1u))

/* What the planning threads share: the samples, the candidates and the jobs of a phase. */
typedef struct IbpSearch {
    const IbpSample *screen;
    const IbpSample *screen_fit; /* the screen sample's chunks cut to IBP_SCREEN_FIT_BYTES */
    const IbpSample *screen_eval;
    const IbpSample *fit_s;
    const IbpSample *eval_s;
    size_t len;
    uint32_t block_size;
    int faithful;
    IbpCandidate cand[IBP_MAX_CANDIDATES];
    uint32_t ncand;
    /* The current phase: njobs jobs, job j on candidate jobs[j]. */
    int (*run)(struct IbpSearch *s, IbpWork *wk, IbpCandidate *c);
    uint32_t jobs[IBP_MAX_CANDIDATES];
    uint32_t njobs;
    uint32_t next; /* atomic */
    int error;     /* atomic: the first error */
} IbpSearch;

/* The share of a plan's sample bits that masks within the GPU's runs may add and replace the
 * masks fitted without that limit (ibp_refit_gpu_runs). */
#define IBP_GPU_RUNS_COST_PCT 1u

/* The winner's sets fitted again where a mask leaves more runs of variant bits than the GPU
 * rebuilds a shift and a mask each: such a mask sends every word of the plan the bit-run way there.
 * The refit within them is kept where it costs at most IBP_GPU_RUNS_COST_PCT of the sample's bits
 * (uint8 images at 3.7-256 MiB 0.04%, bf16 weights at 64 MiB 0.4%; words whose invariant bits
 * alternate with variant ones lose far more, and keep their masks).  Limiting every fit of the
 * search instead moved it elsewhere: bf16 weights, whose winner keeps within the runs, lost 0.75%
 * of their size. */
static void ibp_refit_gpu_runs(const IbpWords *ws, uint32_t nsets, IbpWork *wk)
{
    const size_t n = (size_t)nsets * ws->columns;
    if (ibp_masks_gpu_fit(&wk->m, ws->word_size, ws->columns))
        return;
    uint64_t *keep = malloc(2u * n * sizeof(uint64_t));
    if (!keep)
        return;
    memcpy(keep, wk->m.mask, n * sizeof(uint64_t));
    memcpy(keep + n, wk->m.value, n * sizeof(uint64_t));
    const uint64_t free_bits = ibp_assign(ws, &wk->m, wk->assign_tab, NULL);
    wk->fit.gpu_runs = 1;
    ibp_fit_sets(ws, nsets, &wk->fit, wk->member, &wk->m);
    wk->fit.gpu_runs = 0;
    const uint64_t gpu_bits = ibp_assign(ws, &wk->m, wk->assign_tab, NULL);
    if (gpu_bits * 100u > free_bits * (100u + IBP_GPU_RUNS_COST_PCT)) {
        memcpy(wk->m.mask, keep, n * sizeof(uint64_t));
        memcpy(wk->m.value, keep + n, n * sizeof(uint64_t));
    }
    free(keep);
}

/* Sizes masks m fitted to ws: row length from the per-word sizes, then the encoder's exact size
 * on the judging half of the sample. */
static int ibp_judge(const IbpSearch *s, IbpWork *wk, const IbpWords *ws, const uint8_t *xform, IbpTrial *out)
{
    uint64_t row_bits;
    IbpCodecPlan *p = NULL;
    ibp_assign(ws, &wk->m, wk->assign_tab, wk->prefix);
    const uint32_t r_len =
        ibp_pick_rows(ws, wk->prefix, ibp_fmt_sel_bits(wk->m.nsets), wk->row_sums, &row_bits);
    const int rc = ibp_codec_plan_build_lite(ws->word_size, ws->columns, r_len, wk->m.nsets, s->block_size,
                                             xform, wk->m.mask, wk->m.value, &p);
    if (rc)
        return rc;
    out->bytes = ibp_exact_bytes(p, s->eval_s, s->len);
    out->rows = p->row_words;
    ibp_codec_plan_destroy(&p);
    return 0;
}

/* One set fitted on one half of the sample, sized exactly on the other. */
static int ibp_try_one_set(const IbpSearch *s, IbpWork *wk, uint32_t w, uint32_t c_count,
                           const uint8_t *xform, IbpTrial *out)
{
    const int rc = ibp_words_load(s->fit_s, w, c_count, xform, &wk->ws);
    if (rc)
        return rc;
    ibp_fit_sets(&wk->ws, 1, &wk->fit, wk->member, &wk->m);
    return ibp_judge(s, wk, &wk->ws, xform, out);
}

/* Phase 1 job: single-set IBP fitted on one half of the small sample (cut short), counted on the
 * other. */
static int ibp_job_screen(IbpSearch *s, IbpWork *wk, IbpCandidate *c)
{
    int rc = ibp_words_load(s->screen_fit, c->word_size, c->columns, NULL, &wk->ws);
    if (rc)
        return rc;
    ibp_fit_masks(&wk->ws, NULL, NULL, IBP_FIT_ALL, 1, &wk->fit, wk->m.mask, wk->m.value);
    rc = ibp_words_load(s->screen_eval, c->word_size, c->columns, NULL, &wk->ws);
    if (rc)
        return rc;
    wk->m.nsets = 1;
    const uint64_t bits = ibp_assign(&wk->ws, &wk->m, wk->assign_tab, NULL);
    c->est_bits = ibp_scale(bits, s->screen_eval->bytes, s->len, 1, c->columns, c->word_size);
    return 0;
}

/* The one-set masks just fitted (wk->m) as variant v's of candidate c (0 the better, 1 the alt). */
static void ibp_keep_set1(IbpCandidate *c, const IbpWork *wk, int v)
{
    uint64_t *to = c->set1 + (size_t)v * 2u * c->columns;
    memcpy(to, wk->m.mask, c->columns * sizeof(uint64_t));
    memcpy(to + c->columns, wk->m.value, c->columns * sizeof(uint64_t));
}

/* Phase 2 job: one set without transforms. */
static int ibp_job_plain(IbpSearch *s, IbpWork *wk, IbpCandidate *c)
{
    memset(c->xform, 0, c->columns);
    c->has_alt = 0;
    const int rc = ibp_try_one_set(s, wk, c->word_size, c->columns, c->xform, &c->plain);
    if (rc)
        return rc;
    ibp_keep_set1(c, wk, 0);
    c->one_set = c->plain.bytes;
    return 0;
}

/* Phase 2 job, after every plain trial: one set with the transforms the screen sample suggests;
 * the better variant's transforms stay with the candidate. */
static int ibp_job_xforms(IbpSearch *s, IbpWork *wk, IbpCandidate *c)
{
    const uint32_t w = c->word_size;
    const uint32_t c_count = c->columns;
    int rc = ibp_pick_xforms(s->screen, w, c_count, &wk->ws, &wk->fit, wk->m.mask, wk->m.value, wk->xform);
    if (rc)
        return rc;
    int any = 0;
    for (uint32_t k = 0; k < c_count; k++)
        any |= wk->xform[k] != 0;
    if (!any)
        return 0;
    rc = ibp_try_one_set(s, wk, w, c_count, wk->xform, &c->xformed);
    if (rc)
        return rc;
    /* Both variants stay for the mask sets: one set can say little about them when the data is a
     * mixture (zero padding next to weights: one set fits the zeros, whatever the transforms). */
    c->has_alt = 1;
    if (c->xformed.bytes < c->one_set) {
        c->one_set = c->xformed.bytes;
        memcpy(c->xform, wk->xform, c_count);
        memset(c->alt_xform, 0, c_count);
        memcpy(c->set1 + 2u * c_count, c->set1, 2u * c_count * sizeof(uint64_t));
        ibp_keep_set1(c, wk, 0);
    } else {
        memcpy(c->alt_xform, wk->xform, c_count);
        ibp_keep_set1(c, wk, 1);
    }
    return 0;
}

/* 2 .. IBP_MAX_SETS sets with the transforms xform (variant v's), into trials[0 ..], stopping
 * after two sets when they are no smaller than `bound` bytes.  The greedy start of K sets is that
 * of K - 1 sets plus one, its first set the variant's one-set masks, so the words are loaded and
 * each greedy set fitted once for all K. */
static int ibp_try_sets(IbpSearch *s, IbpWork *wk, const IbpCandidate *c, const uint8_t *xform, int v,
                        uint64_t bound, IbpTrial *trials)
{
    IbpWords *const ws = &wk->ws;
    int rc = ibp_words_load(s->fit_s, c->word_size, c->columns, xform, ws);
    if (rc)
        return rc;
    const size_t set_len = (size_t)c->columns * sizeof(uint64_t);
    const uint64_t *set1 = c->set1 + (size_t)v * 2u * c->columns;
    memcpy(wk->greedy_mask, set1, set_len);
    memcpy(wk->greedy_value, set1 + c->columns, set_len);
    ibp_fit_greedy(ws, 1, 2, &wk->fit, wk->member, wk->greedy_mask, wk->greedy_value);
    for (uint32_t nsets = 2; nsets <= IBP_MAX_SETS && !rc; nsets++) {
        memcpy(wk->m.mask, wk->greedy_mask, nsets * set_len);
        memcpy(wk->m.value, wk->greedy_value, nsets * set_len);
        wk->m.nsets = nsets;
        /* Refining K greedy sets also fits greedy set K + 1 (see ibp_fit_masks_free), the start
         * of the next trial. */
        const int more = nsets < IBP_MAX_SETS;
        ibp_refine_sets(ws, &wk->fit, wk->member, &wk->m, IBP_TRIAL_ROUNDS,
                        more ? wk->greedy_mask + (size_t)nsets * c->columns : NULL,
                        more ? wk->greedy_value + (size_t)nsets * c->columns : NULL);
        rc = ibp_judge(s, wk, ws, xform, &trials[nsets - 2u]);
        if (nsets == 2u && trials[0].bytes >= bound)
            break;
    }
    return rc;
}

/* Phase 3 job: 2 .. IBP_MAX_SETS sets, with the better one-set variant's transforms and, where
 * the candidate has transforms, with the other variant's; that one goes on to three sets only
 * where its two sets beat the first variant's by the 1% it needs to win (ibp_pick_one).  Over the
 * six tensors and their tiles no such trial won; its three sets took 5% of fashion_mnist's plan at
 * 4 MiB. */
static int ibp_job_sets(IbpSearch *s, IbpWork *wk, IbpCandidate *c)
{
    const int rc = ibp_try_sets(s, wk, c, c->xform, 0, UINT64_MAX, c->more);
    const uint64_t lead = c->more[0].bytes - c->more[0].bytes / 100u;
    return rc || !c->has_alt ? rc : ibp_try_sets(s, wk, c, c->alt_xform, 1, lead, c->more_alt);
}

/* Takes jobs of the current phase until none is left or one failed. */
static void ibp_search_work(IbpSearch *s, IbpWork *wk)
{
    for (;;) {
        const uint32_t j = __atomic_fetch_add(&s->next, 1u, __ATOMIC_RELAXED);
        if (j >= s->njobs || __atomic_load_n(&s->error, __ATOMIC_RELAXED))
            return;
        const int rc = s->run(s, wk, &s->cand[s->jobs[j]]);
        if (rc) {
            int expected = 0;
            __atomic_compare_exchange_n(&s->error, &expected, rc, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
        }
    }
}

typedef struct IbpThreadArg {
    IbpSearch *s;
    IbpWork *wk;
} IbpThreadArg;

static void *ibp_search_thread(void *arg)
{
    const IbpThreadArg *a = arg;
    ibp_search_work(a->s, a->wk);
    return NULL;
}

/* Runs one phase over `threads` work spaces (the calling thread takes part).  Each job writes
 * only its own candidate, so the outcome does not depend on the thread count. */
static int ibp_search_phase(IbpSearch *s, int (*run)(IbpSearch *, IbpWork *, IbpCandidate *), IbpWork *work,
                            unsigned threads)
{
    s->run = run;
    s->next = 0;
    if (threads > s->njobs)
        threads = s->njobs ? s->njobs : 1u;
    pthread_t tid[IBP_PLAN_MAX_THREADS];
    IbpThreadArg arg[IBP_PLAN_MAX_THREADS];
    unsigned started = 0;
    for (unsigned t = 1; t < threads; t++) {
        arg[started] = (IbpThreadArg){s, &work[t]};
        if (pthread_create(&tid[started], NULL, ibp_search_thread, &arg[started]))
            break; /* fewer threads: the ones running take the jobs */
        started++;
    }
    ibp_search_work(s, &work[0]);
    for (unsigned t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
    return __atomic_load_n(&s->error, __ATOMIC_RELAXED);
}

/* Collects the candidates for word size and row period: each word size with period 1 and with
 * each period the byte correlation found (as lcm(period, W) / W columns). */
static void ibp_collect_candidates(IbpSearch *s, const IbpCodecPlanOptions *opts, const uint32_t *periods,
                                   uint32_t nper, uint32_t *max_cols)
{
    static const uint32_t sizes[] = {2, 4, 8};
    *max_cols = 1;
    for (size_t wi = 0; wi < 3; wi++) {
        const uint32_t w = sizes[wi];
        if (opts->word_size && opts->word_size != w)
            continue;
        for (uint32_t pi = 0; pi <= nper; pi++) {
            uint32_t c_count;
            if (opts->columns)
                c_count = pi == 0 ? opts->columns : 0;
            else if (pi == 0)
                c_count = 1;
            else
                c_count = periods[pi - 1] / ibp_gcd(periods[pi - 1], w); /* lcm(period, W) / W */
            if (!c_count || c_count > IBP_MAX_COLUMNS || (uint64_t)c_count * w * 4u > s->len)
                continue;
            /* A column with a few words in the screen's fitting sample cannot be judged: its mask
             * fits those words, not the column (periods of a few hundred bytes that are not a
             * multiple of W give as many columns).  Only the period the caller asked for stays.
             * Several columns need more words each, which leaves out rows of more than 384 bytes
             * (24 KiB / 64): on float data the period search finds many such lags (bytes repeat
             * at most lags about equally), whose screens took 19-42% of a plan there, and none
             * of them won on the six tensors or their tiles (every plan is the same without). */
            const uint32_t col_words = c_count > 1u ? IBP_SCREEN_ROW_WORDS : IBP_SCREEN_COL_WORDS;
            if (!opts->columns && (uint64_t)c_count * w * col_words > s->screen_fit->bytes)
                continue;
            int dup = 0;
            for (uint32_t k = 0; k < s->ncand; k++)
                dup |= s->cand[k].word_size == w && s->cand[k].columns == c_count;
            if (dup)
                continue;
            IbpCandidate *c = &s->cand[s->ncand++];
            c->word_size = w;
            c->columns = c_count;
            c->plain.bytes = c->xformed.bytes = c->one_set = UINT64_MAX;
            for (uint32_t k = 0; k + 1u < IBP_MAX_SETS; k++)
                c->more[k].bytes = c->more_alt[k].bytes = UINT64_MAX;
            if (c_count > *max_cols)
                *max_cols = c_count;
        }
    }
}

/* The candidate of 4-byte words whose rows are those of 2-byte-word candidate k (the same period
 * in bytes, or twice it when that is not a whole number of 4-byte words), or s->ncand. */
static uint32_t ibp_wide_twin(const IbpSearch *s, uint32_t k)
{
    if (s->cand[k].word_size != 2u)
        return s->ncand;
    const uint32_t c = s->cand[k].columns;
    const uint32_t want = c % 2u ? c : c / 2u;
    for (uint32_t i = 0; i < s->ncand; i++)
        if (s->cand[i].word_size == 4u && s->cand[i].columns == want)
            return i;
    return s->ncand;
}

/* Whether candidate k only repeats a candidate of the same word size with fewer columns that
 * divide its own: its size (by `size`, which each candidate compared must have) within
 * IBP_SAME_PERMILLE either way.  Every column then found the masks the shorter period finds, so
 * the period is noise (float data: bytes repeat at many lags about equally), and its trials
 * would only repeat the shorter one's with more metadata.  One clearly better or clearly worse
 * has columns that differ, which mask sets may use (fashion_mnist's rows of 28 bytes: worse than
 * one column with one set, best with three). */
static int ibp_repeats_shorter(const IbpSearch *s, uint32_t k, uint64_t (*size)(const IbpCandidate *))
{
    const IbpCandidate *c = &s->cand[k];
    const uint64_t mine = size(c);
    if (mine == UINT64_MAX)
        return 0;
    for (uint32_t j = 0; j < s->ncand; j++) {
        const IbpCandidate *d = &s->cand[j];
        const uint64_t theirs = size(d);
        if (j == k || d->word_size != c->word_size || d->columns >= c->columns || c->columns % d->columns ||
            theirs == UINT64_MAX)
            continue;
        const uint64_t margin = theirs / 1000u * IBP_SAME_PERMILLE;
        if (mine + margin >= theirs && mine <= theirs + margin)
            return 1;
    }
    return 0;
}

static uint64_t ibp_size_one_set(const IbpCandidate *c)
{
    return c->one_set;
}

static uint64_t ibp_size_plain(const IbpCandidate *c)
{
    return c->plain.bytes;
}

/* ibp_repeats_shorter by the one-set trials: without transforms (the same words, so a repeating
 * period finds the same masks) and with the better variant's (a period whose transforms pay is
 * no repeat).  The screen alone cannot tell: without transforms fashion_mnist's 14 columns of
 * 2-byte words can match one column there, and its rows are what its transforms use. */
static int ibp_repeats_shorter_trials(const IbpSearch *s, uint32_t k)
{
    return ibp_repeats_shorter(s, k, ibp_size_plain) && ibp_repeats_shorter(s, k, ibp_size_one_set);
}

/* Whether candidate c's trials with transforms `variant` (0 none, 1 its own, 2 the other
 * variant's) have predictor columns over more columns than blocks keep carries for. */
static int ibp_long_pred(const IbpCandidate *c, int variant)
{
    const uint8_t *xf = variant == 2 ? c->alt_xform : variant ? c->xform : NULL;
    if (!xf || c->columns <= IBP_CARRY_MAX_COLUMNS)
        return 0;
    for (uint32_t i = 0; i < c->columns; i++)
        if (xf[i] & IBP_XF_PRED_MASK)
            return 1;
    return 0;
}

/* A trial that won: its size, its candidate, its mask sets, which transforms it used (0 none, 1
 * the candidate's, 2 the other variant's) and its rows. */
typedef struct IbpPick {
    uint64_t bytes; /* UINT64_MAX: no trial qualified */
    uint32_t k, nsets;
    int xformed;
    uint32_t rows;
} IbpPick;

/* The winner among every trial, in the order they were made: each finalist's one-set trials
 * (plain, then transformed) in rank order, then the more-set trials of the picks in pick order
 * (s->jobs of the last phase), those with the candidate's transforms before those with the other
 * variant's; the first of the least size wins.  Without narrow_ok only candidates of words wider
 * than 2 bytes compete, without long_pred_ok only trials the GPU decodes by segments
 * (ibp_long_pred). */
static IbpPick ibp_pick_one(const IbpSearch *s, int narrow_ok, int long_pred_ok)
{
    IbpPick p = {.bytes = UINT64_MAX, .k = 0, .nsets = 1, .xformed = 0, .rows = 0};
    for (uint32_t k = 0; k < s->ncand; k++) {
        const IbpCandidate *c = &s->cand[k];
        const IbpTrial *t[2] = {&c->plain, &c->xformed};
        for (int i = 0; i < 2; i++)
            if (t[i]->bytes < p.bytes && (narrow_ok || c->word_size > 2u) &&
                (long_pred_ok || !ibp_long_pred(c, i)))
                p = (IbpPick){.bytes = t[i]->bytes, .k = k, .nsets = 1, .xformed = i, .rows = t[i]->rows};
    }
    for (uint32_t j = 0; j < s->njobs; j++) {
        const IbpCandidate *c = &s->cand[s->jobs[j]];
        if (!narrow_ok && c->word_size <= 2u)
            continue;
        for (int v = 1; v <= 2; v++) {
            if (!long_pred_ok && ibp_long_pred(c, v))
                continue;
            const IbpTrial *more = v == 1 ? c->more : c->more_alt;
            for (uint32_t i = 0; i + 1u < IBP_MAX_SETS; i++)
                /* The other variant only by a clear margin: the two halves of a sample differ by
                 * a few tenths of a percent, and the variant the one-set trials preferred is the
                 * better guess within that. */
                if (v == 1 ? more[i].bytes < p.bytes : more[i].bytes < p.bytes - p.bytes / 100u)
                    p = (IbpPick){.bytes = more[i].bytes,
                                  .k = s->jobs[j],
                                  .nsets = i + 2u,
                                  .xformed = v,
                                  .rows = more[i].rows};
        }
    }
    return p;
}

/* The winner as ibp_pick_one finds it, except that a plan of long-period predictors gives way to
 * one the GPU decodes by segments, and 2-byte words to wider ones, within a margin each. */
static void ibp_pick_best(const IbpSearch *s, uint32_t *best_k, uint32_t *best_nsets, int *xformed,
                          uint32_t *rows)
{
    IbpPick best = ibp_pick_one(s, 1, 1);
    if (ibp_long_pred(&s->cand[best.k], best.xformed)) {
        /* The best trial the GPU decodes by segments, where it saves anything worth a copy (the
         * synthetic weights of the tests, a period of 1000 floats, 32 MiB of them: 46 columns with
         * deltas at 0.58, decoded at 35 GB/s on an H100, or one column of 8-byte words at 0.88,
         * decoded at 460). */
        const IbpPick fast = ibp_pick_one(s, 1, 0);
        if (fast.bytes != UINT64_MAX &&
            fast.bytes <= (uint64_t)s->len / 100u * (100u - IBP_LONG_PRED_SAVES_PCT))
            best = fast;
    }
    if (s->cand[best.k].word_size <= 2u) {
        /* Both decoders spend about the same per word whether it holds 2 or 4 bytes, so 2-byte
         * words decode at half the bytes a second: they win only by more than
         * IBP_NARROW_MARGIN_PCT percent of the size (fashion_mnist: 0.6197 against 0.6275 at 4
         * bytes; the GPU decode twice as fast is worth more than the 1.3% on the wire). */
        const IbpPick wide = ibp_pick_one(s, 0, ibp_long_pred(&s->cand[best.k], best.xformed));
        if (wide.bytes != UINT64_MAX && wide.bytes - best.bytes <= best.bytes / 100u * IBP_NARROW_MARGIN_PCT)
            best = wide;
    }
    *best_k = best.k;
    *best_nsets = best.nsets;
    *xformed = best.xformed;
    *rows = best.rows;
}

/* Bytes of a region of len bytes the planner samples (`asked`: IbpCodecPlanOptions.sample_bytes). */
static size_t ibp_sample_target(size_t len, size_t asked)
{
    size_t target = asked ? asked : len / 16u;
    if (target < IBP_SAMPLE_MIN)
        target = IBP_SAMPLE_MIN;
    if (target > IBP_SAMPLE_MAX && !asked)
        target = IBP_SAMPLE_MAX;
    return target;
}

/* Stride of the sample the winner is refitted to and the plan's sample ratio is taken on (every
 * pair of chunks of the target sample, or fewer to keep it within IBP_REFIT_BYTES). */
static size_t ibp_whole_stride(size_t target)
{
    return (target + IBP_REFIT_BYTES - 1u) / IBP_REFIT_BYTES;
}

int ibp_codec_plan_judge(const IbpCodecPlan *plan, const void *region, size_t len, double *ratio)
{
    if (!plan || !ratio || !region || len < 64u)
        return -EINVAL;
    IbpSample all_s = {0};
    const size_t target = ibp_sample_target(len, 0);
    const int rc =
        ibp_sample_make(region, len, plan->block_size, target, -1, ibp_whole_stride(target), 0, &all_s);
    if (rc)
        return rc;
    *ratio = all_s.bytes ? (double)ibp_exact_bytes(plan, &all_s, all_s.bytes) / (double)all_s.bytes : 1.0;
    free(all_s.chunks);
    return 0;
}

int ibp_codec_plan_create(const void *region, size_t len, const IbpCodecPlanOptions *opts, IbpCodecPlan **out)
{
    const IbpCodecPlanOptions defaults = {0};
    IbpSample screen = {0};
    IbpSample screen_eval = {0};
    IbpSample screen_fit = {0};
    IbpSample fit_s = {0};
    IbpSample eval_s = {0};
    IbpSample all_s = {0};
    IbpWork work[IBP_PLAN_MAX_THREADS] = {0};
    unsigned nwork = 0;
    unsigned nkept = 0;
    uint8_t *cand_xform = NULL;
    uint64_t *cand_set1 = NULL;
    uint8_t *plain = NULL;
    IbpCodecPlan *best = NULL;
    IbpSearch *s = NULL;
    int rc;

    if (!out || (!region && len))
        return -EINVAL;
    if (!opts)
        opts = &defaults;
    const size_t bs = opts->block_size ? opts->block_size : IBP_CODEC_DEFAULT_BLOCK_SIZE;
    if (bs < IBP_MIN_BLOCK_SIZE || bs > IBP_MAX_BLOCK_SIZE || (bs & (bs - 1u)) ||
        (opts->word_size && opts->word_size != 2u && opts->word_size != 4u && opts->word_size != 8u) ||
        opts->columns > IBP_MAX_COLUMNS)
        return -EINVAL;
    if (len < 64u)
        return ibp_plan_trivial(bs, out);
    unsigned threads = opts->threads ? opts->threads : 1u;
    threads = threads > IBP_PLAN_MAX_THREADS ? IBP_PLAN_MAX_THREADS : threads;
    const size_t target = ibp_sample_target(len, opts->sample_bytes);
    s = calloc(1, sizeof(*s));
    rc = s ? 0 : -ENOMEM;
    if (!rc)
        rc = ibp_sample_make(region, len, bs, target, 0, 1, IBP_FIT_BYTES, &fit_s);
    if (!rc)
        rc = ibp_sample_make(region, len, bs, target, 1, 1, 0, &eval_s);
    if (!rc)
        rc = ibp_sample_make(region, len, bs, target, -1, ibp_whole_stride(target), 0, &all_s);
    if (!rc)
        rc = ibp_sample_make(region, len, bs, ibp_min_sz(target, IBP_SCREEN_BYTES), 0, 1, 0, &screen);
    if (!rc)
        rc = ibp_sample_make(region, len, bs, ibp_min_sz(target, IBP_SCREEN_BYTES), 1, 1, 0, &screen_eval);
    if (!rc)
        rc = ibp_sample_make(region, len, bs, ibp_min_sz(target, IBP_SCREEN_BYTES), 0, 1,
                             IBP_SCREEN_FIT_BYTES, &screen_fit);
    if (rc)
        goto fail;
    *s = (IbpSearch){
        .screen = &screen,
        .screen_fit = &screen_fit,
        .screen_eval = &screen_eval,
        .fit_s = &fit_s,
        .eval_s = &eval_s,
        .len = len,
        .block_size = (uint32_t)bs,
        .faithful = (opts->flags & IBP_CODEC_PLAN_FAITHFUL) != 0,
    };

    uint32_t periods[IBP_PERIOD_PICKS];
    uint32_t nper = 0;
    if (!opts->columns) {
        const size_t mid = (len / 2u) & ~(size_t)63;
        nper = ibp_find_periods((const uint8_t *)region + mid, len - mid, periods, IBP_PERIOD_PICKS);
    }
    uint32_t max_cols;
    ibp_collect_candidates(s, opts, periods, nper, &max_cols);
    const size_t max_words = all_s.bytes / 2u + 1u;
    threads = threads > s->ncand ? (s->ncand ? s->ncand : 1u) : threads;
    nkept = ibp_keep_take(work);
    for (; nwork < threads; nwork++) {
        rc = ibp_work_alloc(&work[nwork], max_cols, max_words);
        if (rc)
            goto fail;
    }
    cand_xform = calloc((size_t)(s->ncand ? s->ncand : 1u) * 2u, max_cols);
    cand_set1 = calloc((size_t)(s->ncand ? s->ncand : 1u) * 4u * max_cols, sizeof(uint64_t));
    rc = -ENOMEM;
    if (!cand_xform || !cand_set1)
        goto fail;
    for (uint32_t k = 0; k < s->ncand; k++) {
        s->cand[k].xform = cand_xform + (size_t)k * 2u * max_cols;
        s->cand[k].set1 = cand_set1 + (size_t)k * 4u * max_cols;
        s->cand[k].alt_xform = s->cand[k].xform + max_cols;
        s->jobs[k] = k;
    }

    /* 1. Rank (word size, period) pairs by single-set IBP on the small sample. */
    s->njobs = s->ncand;
    rc = ibp_search_phase(s, ibp_job_screen, work, nwork);
    if (rc)
        goto fail;
    for (uint32_t a = 1; a < s->ncand; a++)
        for (uint32_t b = a; b > 0 && s->cand[b].est_bits < s->cand[b - 1].est_bits; b--) {
            const IbpCandidate t = s->cand[b];
            s->cand[b] = s->cand[b - 1];
            s->cand[b - 1] = t;
        }

    /* 2. For the finalists: transforms, mask sets and row length fitted on one half of the
     * sample and judged by the encoder's exact size on the other.  Faithful IBP (one set, no
     * transform) is always among them.  Finalists: the top candidates, plus each word size's
     * best candidate and its best period-1 candidate where their estimate is within
     * IBP_FINALIST_SLACK_PCT of the best (mask sets and transforms, which the ranking does not
     * see, change the order). */
    uint32_t seen_any = 0;
    uint32_t seen_single = 0;
    s->njobs = 0;
    const uint64_t slack = s->ncand ? s->cand[0].est_bits / 100u * (100u + IBP_FINALIST_SLACK_PCT) : 0;
    for (uint32_t k = 0; k < s->ncand; k++) {
        const uint32_t bit = 1u << s->cand[k].word_size;
        const int first_of_kind = !(seen_any & bit) || (s->cand[k].columns == 1u && !(seen_single & bit));
        if (k < IBP_FINALISTS || (first_of_kind && s->cand[k].est_bits <= slack))
            s->jobs[s->njobs++] = k;
        seen_any |= bit;
        if (s->cand[k].columns == 1u)
            seen_single |= bit;
    }
    /* Each 2-byte-word finalist's row in 4-byte words too (ibp_pick_best prefers wider words
     * within a margin). */
    for (uint32_t j = 0, n = s->njobs; j < n; j++) {
        const uint32_t k = ibp_wide_twin(s, s->jobs[j]);
        int listed = k == s->ncand;
        for (uint32_t i = 0; i < s->njobs && !listed; i++)
            listed = s->jobs[i] == k;
        if (!listed)
            s->jobs[s->njobs++] = k;
    }
    rc = ibp_search_phase(s, ibp_job_plain, work, nwork);
    if (rc)
        goto fail;
    /* Transforms only for the finalists that do not repeat a shorter period without them (plain
     * trials within IBP_SAME_PERMILLE): such a period's columns found the shorter one's masks.
     * Picking transforms is most of a one-set trial's cost, and on float weights every period
     * found is such a repeat; of the 30 repeats among the six tensors and their 4-256 MiB tiles
     * none won or went on to mask sets, and no plan changed without their transforms. */
    if (!s->faithful) {
        uint32_t kept = 0;
        for (uint32_t j = 0; j < s->njobs; j++)
            if (!ibp_repeats_shorter(s, s->jobs[j], ibp_size_plain))
                s->jobs[kept++] = s->jobs[j];
        s->njobs = kept;
        rc = ibp_search_phase(s, ibp_job_xforms, work, nwork);
    }
    if (rc)
        goto fail;

    /* More mask sets for the few best of those: sets pay most where one set already fits well,
     * and fitting them takes several passes each.  A third pick (with IBP_SET_FINALISTS 3) won
     * no plan of the six tensors or their 4-256 MiB tiles, and its trials took 6-20% of the
     * plans of digits, movielens and some float tiles. */
    uint8_t picked[IBP_MAX_CANDIDATES] = {0};
    s->njobs = 0;
    for (uint32_t round = 0; round < IBP_SET_FINALISTS && !s->faithful; round++) {
        uint32_t pick = s->ncand;
        for (uint32_t k = 0; k < s->ncand; k++)
            if (!picked[k] && s->cand[k].one_set != UINT64_MAX &&
                (pick == s->ncand || s->cand[k].one_set < s->cand[pick].one_set))
                pick = k;
        if (pick == s->ncand)
            break;
        picked[pick] = 1;
        if (!ibp_repeats_shorter_trials(s, pick))
            s->jobs[s->njobs++] = pick;
    }
    /* Each 2-byte-word one's row in 4-byte words too. */
    for (uint32_t j = 0, n = s->njobs; j < n; j++) {
        const uint32_t k = ibp_wide_twin(s, s->jobs[j]);
        if (k < s->ncand && s->cand[k].one_set != UINT64_MAX && !picked[k] &&
            !ibp_repeats_shorter_trials(s, k)) {
            picked[k] = 1;
            s->jobs[s->njobs++] = k;
        }
    }
    rc = ibp_search_phase(s, ibp_job_sets, work, nwork);
    if (rc)
        goto fail;

    /* 3. The winner refitted on the refit sample, and its row length picked there. */
    uint32_t bk = 0, bnsets = 1, brows = 0;
    int xformed = 0;
    ibp_pick_best(s, &bk, &bnsets, &xformed, &brows);
    plain = calloc(max_cols, 1);
    rc = -ENOMEM;
    if (!plain)
        goto fail;
    const IbpCandidate *bc = &s->cand[bk];
    const uint8_t *bxform = xformed == 2 ? bc->alt_xform : xformed ? bc->xform : plain;
    IbpWords *const ws = &work[0].ws;
    rc = ibp_words_load(&all_s, bc->word_size, bc->columns, bxform, ws);
    if (rc)
        goto fail;
    /* Alone now: the refit's word passes spread over every planning thread's counters. */
    IbpPar par = {.n = nwork};
    for (unsigned t = 0; t < nwork; t++)
        par.fits[t] = &work[t].fit;
    work[0].fit.par = nwork > 1u ? &par : NULL;
    ibp_fit_sets(ws, bnsets, &work[0].fit, work[0].member, &work[0].m);
    ibp_refit_gpu_runs(ws, bnsets, &work[0]);
    work[0].fit.par = NULL;
    /* The row length on the refit sample's whole chunks: the trials' fits saw pieces of 1 KiB
     * and more, too short for long rows. */
    uint64_t row_bits;
    ibp_assign(ws, &work[0].m, work[0].assign_tab, work[0].prefix);
    brows = ibp_pick_rows(ws, work[0].prefix, ibp_fmt_sel_bits(bnsets), work[0].row_sums, &row_bits);
    rc = ibp_codec_plan_build(bc->word_size, bc->columns, brows, bnsets, (uint32_t)bs, bxform, work[0].m.mask,
                              work[0].m.value, &best);
    if (rc)
        goto fail;
    best->sel_flags = (opts->flags & IBP_CODEC_PLAN_SELECTOR_FLAGS) != 0;
    best->top_coded = (opts->flags & IBP_CODEC_PLAN_TOP_CODED) != 0;
    best->sample_bytes = all_s.bytes;
    best->sample_ratio = (double)ibp_exact_bytes(best, &all_s, all_s.bytes) / (double)all_s.bytes;
    *out = best;
    best = NULL;
    rc = 0;
fail:
    ibp_codec_plan_destroy(&best);
    ibp_keep_give(work, nwork > nkept ? nwork : nkept);
    free(fit_s.chunks);
    free(eval_s.chunks);
    free(all_s.chunks);
    free(screen.chunks);
    free(screen_eval.chunks);
    free(screen_fit.chunks);
    free(cand_xform);
    free(cand_set1);
    free(plain);
    free(s);
    return rc;
}
