/* SPDX-License-Identifier: MIT
 * ibpshim: the decode kernel against the CPU codec on real tensors and random data of every word
 * size, whole runs and clipped ranges, output poisoned first and every byte checked; then, given
 * a size, the library's bench (ibpshim_bench) on each real tensor tiled to it (suite gpu). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codec/format.h"
#include "common/log.h"
#include "ibpshim/bench.h"
#include "ibpshim/codec.h"
#include "kernels/decode_abi.h"
#include "kernels/driver.h"
#include "kernels/module.h"
#include "tests/codec/strip_index.h"

#define CHECK_CU(call)                                                                             \
    do {                                                                                           \
        const CUresult r_ = (call);                                                                \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, ibp_driver_result_name(r_)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static const IbpDriver *drv;
static const IbpModule *mod;
static CUdeviceptr d_scratch; /* the predictor decode's, poisoned before every launch */
static int failures;
static uint64_t flagged_blocks; /* blocks of flagged selectors the flagged cases decoded */
static uint64_t top_blocks;     /* top-byte coded blocks the top-coded cases decoded */
static uint64_t mixed_runs;     /* top-coded cases whose runs held packed blocks too */

typedef struct Encoded {
    IbpCodecPlan *plan;
    uint8_t *run;        /* pinned: blocks back to back */
    uint64_t *offsets;   /* pinned, nblocks + 1 */
    size_t run_len;
    uint32_t nblocks;
    size_t block_size;
    int has_pred;
    unsigned columns, nsets;
    unsigned word_size;
    int legacy; /* launched without IBP_DECODE_INDEXED (the blocks may lack the index or carries) */
    int flagged; /* the plan may write flagged selectors: launched with IBP_DECODE_SELFLAGS */
    uint32_t flagged_blocks, raw_row_blocks; /* blocks that took that form; of them, with raw rows */
    uint32_t top_blocks, packed_blocks;      /* blocks top-byte coded; neither that nor raw */
} Encoded;

/* What to encode with: the plan's forms on top of the planner's (or the given) plan. */
#define FORM_FLAGGED 1u /* flagged selectors where smaller (IBP_CODEC_PLAN_SELECTOR_FLAGS) */
#define FORM_TOP 2u     /* top-byte coded blocks where smaller (IBP_CODEC_PLAN_TOP_CODED) */

static void *pinned(size_t n)
{
    void *p = NULL;
    CHECK_CU(drv->cuMemHostAlloc(&p, n ? n : 1, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
    return p;
}

static void release(Encoded *e);

/* Encodes data with plan (taken over), or with the planner's choice when plan is NULL, in blocks
 * that take the forms asked for (FORM_*) where they are smaller; on failure nothing is left to
 * release. */
static int encode(const uint8_t *data, size_t len, size_t block_size, IbpCodecPlan *plan, unsigned forms,
                  Encoded *e)
{
    IbpCodecPlanOptions opts = {.block_size = block_size};
    memset(e, 0, sizeof(*e));
    e->plan = plan;
    if (!plan && ibp_codec_plan_create(data, len, &opts, &e->plan))
        return -1;
    const int flagged = (forms & FORM_FLAGGED) != 0;
    if (forms) {
        size_t blob_len = 0;
        const void *blob = ibp_codec_plan_blob(e->plan, &blob_len);
        IbpCodecPlan *f = NULL;
        const int rc = ibp_codec_plan_from_blob_flags(blob, blob_len,
                                                      (flagged ? IBP_CODEC_PLAN_SELECTOR_FLAGS : 0u) |
                                                          (forms & FORM_TOP ? IBP_CODEC_PLAN_TOP_CODED : 0u),
                                                      &f);
        ibp_codec_plan_destroy(&e->plan);
        if (rc)
            return -1;
        e->plan = f;
        e->flagged = flagged;
    }
    e->block_size = ibp_codec_plan_block_size(e->plan);
    e->nblocks = (uint32_t)((len + e->block_size - 1) / e->block_size);
    const size_t bound = (ibp_codec_block_bound(e->plan, e->block_size) + 15) & ~(size_t)15;
    e->run = pinned((size_t)e->nblocks * bound);
    e->offsets = pinned(((size_t)e->nblocks + 1) * sizeof(uint64_t));
    /* Every block into a slot of its own on all CPUs (the 2 GiB cases), then moved down into a
     * run: a block never moves up, so each move reads bytes no earlier move wrote. */
    void **slots = malloc(sizeof(void *) * e->nblocks);
    size_t *comp = malloc(sizeof(size_t) * e->nblocks);
    for (uint32_t i = 0; i < e->nblocks; i++)
        slots[i] = e->run + (size_t)i * bound;
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const int err =
        ibp_codec_region_encode(e->plan, data, len, cpus > 1 ? (unsigned)cpus : 1u, slots, bound, comp);
    size_t at = 0;
    for (uint32_t i = 0; !err && i < e->nblocks; i++) {
        e->offsets[i] = at;
        memmove(e->run + at, slots[i], comp[i]);
        at += comp[i];
    }
    e->offsets[e->nblocks] = at;
    e->run_len = at;
    IbpCodecPlanInfo info;
    ibp_codec_plan_info(e->plan, &info);
    for (uint32_t i = 0; !err && i < e->nblocks; i++) {
        IbpBlockHeader h;
        memcpy(&h, e->run + e->offsets[i], sizeof(h));
        e->top_blocks += (h.flags & IBP_BLOCK_TOPCODED) != 0;
        e->packed_blocks += !(h.flags & (IBP_BLOCK_TOPCODED | IBP_BLOCK_RAW));
        if (!ibp_fmt_selflags(h.flags))
            continue;
        e->flagged_blocks++;
        /* Blocks with raw rows: the rewrite cannot take selector k for word k there. */
        const uint32_t rows = (h.orig_len / info.word_size + info.row_words - 1) / info.row_words;
        const uint8_t *rf = e->run + e->offsets[i] + h.rowflag_off;
        for (uint32_t r = 0; r < rows; r++)
            if (!((rf[r / 8] >> (r % 8)) & 1u)) {
                e->raw_row_blocks++;
                break;
            }
    }
    top_blocks += e->top_blocks;
    mixed_runs += e->top_blocks && e->packed_blocks;
    flagged_blocks += e->flagged_blocks;
    free(slots);
    free(comp);
    if (err) {
        release(e);
        return -1;
    }
    e->has_pred = info.xf_delta + info.xf_xor > 0;
    e->columns = info.columns;
    e->nsets = info.nsets;
    e->word_size = info.word_size;
    return 0;
}

/* Rewrites the run as format version 1 (v2 = 0: every packed block without its group index) or 2
 * (v2 = 1: without the index's carries) wrote it, its sections moved down and its offsets
 * shortened, so that the kernels' counting and predictor fix-up paths (which such blocks take) are
 * checked too. */
static void strip_run(Encoded *e, int v2)
{
    uint64_t at = 0;
    for (uint32_t i = 0; i < e->nblocks; i++) {
        uint8_t *blk = e->run + e->offsets[i];
        const uint32_t len = v2 ? ibp_test_strip_carries(blk, e->word_size) : ibp_test_strip_index(blk);
        memmove(e->run + at, e->run + e->offsets[i], len);
        e->offsets[i] = at;
        at += len;
    }
    e->offsets[e->nblocks] = at;
    e->run_len = at;
    e->legacy = 1;
}

static void release(Encoded *e)
{
    drv->cuMemFreeHost(e->run);
    drv->cuMemFreeHost(e->offsets);
    ibp_codec_plan_destroy(&e->plan);
}

/* An encoded run of len original bytes on the device, its plan, an output buffer (len + 64
 * bytes) and the host buffer the output is read back into. */
typedef struct Uploaded {
    CUdeviceptr run, plan, out;
    uint8_t *host_out;
} Uploaded;

static void upload(const Encoded *e, size_t len, Uploaded *u)
{
    size_t blob_len;
    const void *blob = ibp_codec_plan_blob(e->plan, &blob_len);
    CHECK_CU(drv->cuMemAlloc(&u->run, e->run_len + 16));
    CHECK_CU(drv->cuMemAlloc(&u->plan, blob_len));
    CHECK_CU(drv->cuMemAlloc(&u->out, len + 64));
    CHECK_CU(drv->cuMemcpyHtoD(u->run, e->run, e->run_len));
    CHECK_CU(drv->cuMemcpyHtoD(u->plan, blob, blob_len));
    u->host_out = malloc(len + 64);
}

static void unload(Uploaded *u)
{
    free(u->host_out);
    drv->cuMemFree(u->run);
    drv->cuMemFree(u->plan);
    drv->cuMemFree(u->out);
}

/* Decodes blocks [first, first + count) with clip (skip, len) and checks against data; the offsets
 * from the pinned table, or (inl) carried in the arguments; the run from d_run, or (mapped) read
 * through the pinned run's mapped address, as zero-copy reads it. */
static void check_range_from(const char *name, const uint8_t *data, const Encoded *e, CUdeviceptr d_run,
                             CUdeviceptr d_plan, CUdeviceptr d_out, uint8_t *host_out, uint32_t first,
                             uint32_t count, uint64_t skip, uint64_t len, size_t dst_misalign, unsigned grid,
                             int cta, int inl, int mapped)
{
    CUdeviceptr d_offsets;
    CHECK_CU(drv->cuMemHostGetDevicePointer(&d_offsets, e->offsets, 0));
    if (mapped)
        CHECK_CU(drv->cuMemHostGetDevicePointer(&d_run, e->run, 0));
    CHECK_CU(drv->cuMemsetD8(d_out, 0xa5, len + dst_misalign + 16));
    CHECK_CU(drv->cuMemsetD8(d_scratch, 0x5a, ibp_decode_scratch_bytes(mod)));
    CUdeviceptr d_selx = 0; /* poisoned, as a reused buffer would be */
    const size_t selx_len = ibp_decode_selx_bytes(e->word_size, (uint32_t)e->block_size, count);
    if (e->flagged) {
        CHECK_CU(drv->cuMemAlloc(&d_selx, selx_len));
        CHECK_CU(drv->cuMemsetD8(d_selx, 0x5a, selx_len));
    }
    IbpDecodeArgs a = {.comp = d_run + e->offsets[first],
                       .offsets = d_offsets + first * sizeof(uint64_t),
                       .plan = d_plan,
                       .dst = d_out + dst_misalign,
                       .len = len,
                       .skip = skip,
                       .scratch = d_scratch,
                       .selx = d_selx,
                       .nblocks = count,
                       .block_size = (uint32_t)e->block_size};
    if (inl)
        ibp_decode_inline_offsets(&a, e->offsets + first);
    /* Runs of top-coded and raw blocks only go as the shim sends them, by ibp_k_decode_top alone,
     * and (with a CTA a block) also with the packed decode before it, which must leave them be. */
    const unsigned top = ibp_decode_top_flag(e->top_blocks != 0, e->packed_blocks || cta);
    const unsigned flags = (e->has_pred ? IBP_DECODE_PRED : 0u) | (cta ? IBP_DECODE_BLOCK : 0u) |
                           (e->legacy ? 0u : IBP_DECODE_INDEXED) | (e->flagged ? IBP_DECODE_SELFLAGS : 0u) |
                           top;
    const int launched = ibp_decode_launch(mod, &a, e->word_size, e->columns, e->nsets, flags, grid, NULL);
    CHECK_CU(drv->cuCtxSynchronize());
    if (d_selx)
        drv->cuMemFree(d_selx);
    if (launched) {
        fprintf(stderr, "%s: launch failed\n", name);
        failures++;
        return;
    }
    CHECK_CU(drv->cuMemcpyDtoH(host_out, d_out, len + dst_misalign + 16));
    const uint8_t *want = data + (size_t)first * e->block_size + skip;
    for (uint64_t i = memcmp(host_out + dst_misalign, want, len) ? 0 : len; i < len; i++) {
        if (host_out[dst_misalign + i] != want[i]) {
            fprintf(stderr, "%s: blocks %u+%u%s skip %llu len %llu: byte %llu is 0x%02x, expected 0x%02x\n",
                    name, first, count, inl ? " (offsets inline)" : "", (unsigned long long)skip,
                    (unsigned long long)len, (unsigned long long)i, host_out[dst_misalign + i], want[i]);
            failures++;
            return;
        }
    }
    for (size_t i = 0; i < dst_misalign; i++)
        if (host_out[i] != 0xa5) {
            fprintf(stderr, "%s: wrote before dst\n", name);
            failures++;
            return;
        }
    for (size_t i = 0; i < 16; i++)
        if (host_out[dst_misalign + len + i] != 0xa5) {
            fprintf(stderr, "%s: wrote past dst + len\n", name);
            failures++;
            return;
        }
}

/* check_range_from with the offsets from the table and, where they fit, carried; mapped: the
 * carried ones only (zero-copy launches carry them where they fit, as the shim's do). */
static void check_range(const char *name, const uint8_t *data, const Encoded *e, CUdeviceptr d_run,
                        CUdeviceptr d_plan, CUdeviceptr d_out, uint8_t *host_out, uint32_t first,
                        uint32_t count, uint64_t skip, uint64_t len, size_t dst_misalign, unsigned grid,
                        int cta, int mapped)
{
    const int fit = count + 1u <= IBP_DECODE_INLINE_OFFSETS;
    if (!mapped || !fit)
        check_range_from(name, data, e, d_run, d_plan, d_out, host_out, first, count, skip, len, dst_misalign,
                         grid, cta, 0, mapped);
    if (fit)
        check_range_from(name, data, e, d_run, d_plan, d_out, host_out, first, count, skip, len, dst_misalign,
                         grid, cta, 1, mapped);
}

static void run_case(const char *name, const uint8_t *data, size_t len, size_t block_size, IbpCodecPlan *plan,
                     unsigned forms)
{
    Encoded e;
    if (encode(data, len, block_size, plan, forms, &e)) {
        fprintf(stderr, "%s: CPU encode failed\n", name);
        failures++;
        return;
    }
    if (forms & FORM_FLAGGED)
        printf("decode check: %s: %u of %u blocks flagged, %u of them with raw rows\n", name,
               e.flagged_blocks, e.nblocks, e.raw_row_blocks);
    if (forms & FORM_TOP)
        printf("decode check: %s: %u of %u blocks top-coded, %u packed\n", name, e.top_blocks, e.nblocks,
               e.packed_blocks);
    Uploaded u;
    upload(&e, len, &u);
    const CUdeviceptr d_run = u.run, d_plan = u.plan, d_out = u.out;
    uint8_t *const host_out = u.host_out;
    /* Whole run (also with fewer CTAs than blocks, as max_sms does, a CTA per block, and read
     * through the pinned run's mapped address as zero-copy reads it), then clipped ranges,
     * alternately by the segmented kernels and a CTA per block, every third one zero-copy.  Both undo
     * predictors of periods up to 32 words themselves, so they clip those blocks; longer periods
     * only clip whole blocks (the router sends their clipped edge blocks through scratch space). */
    check_range(name, data, &e, d_run, d_plan, d_out, host_out, 0, e.nblocks, 0, len, 0, 0, 0, 0);
    check_range(name, data, &e, d_run, d_plan, d_out, host_out, 0, e.nblocks, 0, len, 1, 0, 1,
                0); /* a CTA per block */
    check_range(name, data, &e, d_run, d_plan, d_out, host_out, 0, e.nblocks, 0, len, 3, 0, 0,
                1); /* zero-copy */
    if (e.nblocks > 3)
        check_range(name, data, &e, d_run, d_plan, d_out, host_out, 0, e.nblocks, 0, len, 0, 3, 0, 0);
    const int clip_blocks = !e.has_pred || e.columns <= 32;
    uint64_t seed = len * 2654435761u;
    for (int k = 0; k < 12 && !failures; k++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        const uint32_t first = (uint32_t)((seed >> 33) % e.nblocks);
        const uint32_t count = 1 + (uint32_t)((seed >> 17) % (e.nblocks - first));
        const size_t span_end = (size_t)(first + count) * e.block_size < len ? (size_t)(first + count) * e.block_size : len;
        const size_t span = span_end - (size_t)first * e.block_size;
        uint64_t skip = 0, l = span;
        if (clip_blocks) {
            skip = (seed >> 5) % (span < e.block_size ? span : e.block_size);
            l = 1 + (seed >> 11) % (span - skip);
        }
        check_range(name, data, &e, d_run, d_plan, d_out, host_out, first, count, skip, l, (size_t)(seed % 7),
                    0, k & 1, k % 3 == 2);
    }
    /* Launched as for blocks of older versions: the same blocks (with a predictor fix-up launch
     * that must leave blocks with carries alone), then, for plans with carries, the blocks as
     * version 2 wrote them (no carries), then as version 1 did (no group index): each time the
     * whole run and a range from inside the second block to the end, with the CTAs the device
     * holds and with three. */
    const int carries = e.has_pred && e.columns <= IBP_CARRY_MAX_COLUMNS;
    e.legacy = 1;
    for (int version = carries ? 3 : 2; version >= 1 && !failures; version--) {
        if (version < 3)
            strip_run(&e, version == 2);
        CHECK_CU(drv->cuMemcpyHtoD(d_run, e.run, e.run_len));
        check_range(name, data, &e, d_run, d_plan, d_out, host_out, 0, e.nblocks, 0, len, 0, 0, 0, 0);
        check_range(name, data, &e, d_run, d_plan, d_out, host_out, 0, e.nblocks, 0, len, 0, 3, 0, 0);
        const uint64_t skip = e.block_size / 3;
        if (clip_blocks && len > e.block_size + skip) {
            check_range(name, data, &e, d_run, d_plan, d_out, host_out, 1, e.nblocks - 1, skip,
                        len - e.block_size - skip, 1, 0, 0, 0);
        }
    }
    unload(&u);
    release(&e);
}

/* Past 2^31 bytes and of an odd length: the output's byte positions, and the run's offsets,
 * no longer fit a signed 32-bit integer. */
#define LARGE_BYTES (((size_t)2 << 30) + 4099)

/* tile repeated to LARGE_BYTES: the whole run (offsets from the table: more blocks than a launch
 * carries) into an aligned destination (the one the shared-memory stores of 8-byte words take),
 * zero-copy and a CTA per block into misaligned ones, and a clipped range from inside the block
 * at 1 GiB to inside the last one; every destination poisoned first. */
static void large_case(const char *name, const uint8_t *tile, size_t tile_len, unsigned forms)
{
    const size_t len = LARGE_BYTES;
    uint8_t *data = malloc(len);
    if (!data) {
        fprintf(stderr, "%s: no memory for %zu bytes\n", name, len);
        failures++;
        return;
    }
    for (size_t at = 0; at < len; at += tile_len)
        memcpy(data + at, tile, len - at < tile_len ? len - at : tile_len);
    Encoded e;
    if (encode(data, len, 0, NULL, forms, &e)) {
        fprintf(stderr, "%s x %zu bytes: CPU encode failed\n", name, len);
        failures++;
        free(data);
        return;
    }
    Uploaded u;
    upload(&e, len, &u);
    const CUdeviceptr d_run = u.run, d_plan = u.plan, d_out = u.out;
    uint8_t *const host_out = u.host_out;
    const int before = failures;
    check_range(name, data, &e, d_run, d_plan, d_out, host_out, 0, e.nblocks, 0, len, 0, 0, 0, 0);
    check_range(name, data, &e, d_run, d_plan, d_out, host_out, 0, e.nblocks, 0, len, 3, 0, 0, 1);
    check_range(name, data, &e, d_run, d_plan, d_out, host_out, 0, e.nblocks, 0, len, 1, 0, 1, 0);
    const uint32_t first = (uint32_t)(((size_t)1 << 30) / e.block_size);
    const uint64_t skip = e.block_size / 3 + 1;
    const uint64_t clip = len - (size_t)first * e.block_size - skip - 7;
    check_range(name, data, &e, d_run, d_plan, d_out, host_out, first, e.nblocks - first, skip, clip, 5, 0, 0,
                0);
    printf("decode check: %s tiled to %zu bytes%s%s (%u blocks, %u top-coded, ratio %.4f): %s\n", name, len,
           forms & FORM_FLAGGED ? ", flagged selectors" : "", forms & FORM_TOP ? ", top-coded" : "",
           e.nblocks, e.top_blocks, (double)e.run_len / (double)len,
           failures == before ? "every byte matched" : "MISMATCH");
    unload(&u);
    release(&e);
    free(data);
}

/* A plan the planner would not necessarily pick: W-byte words, C columns with the transform
 * xf(c), K mask sets whose set k keeps the low 6 + 5k bits of every column variant (high bits
 * zero), rows of R words.  Built as a blob, as the router would receive it. */
static IbpCodecPlan *synthetic_plan(unsigned w, unsigned c, unsigned r, unsigned k, unsigned block_size,
                                    uint8_t (*xf)(unsigned col))
{
    const uint32_t xform_off = 32, mask_off = xform_off + ((c + 15) & ~15u);
    const uint32_t blob_len = mask_off + ((k * c * 2 * w + 15) & ~15u);
    uint8_t *blob = calloc(1, blob_len);
    IbpPlanHeader h = {.magic = IBP_PLAN_MAGIC, .version = IBP_FORMAT_VERSION, .word_size = (uint8_t)w,
                       .nsets = (uint8_t)k, .columns = c, .row_words = r, .block_size = block_size,
                       .blob_len = blob_len, .xform_off = xform_off, .mask_off = mask_off};
    memcpy(blob, &h, sizeof(h));
    for (unsigned col = 0; col < c; col++)
        blob[xform_off + col] = xf(col);
    for (unsigned set = 0; set < k; set++)
        for (unsigned col = 0; col < c; col++) {
            const uint64_t full = w == 8 ? ~0ull : (1ull << (8 * w)) - 1;
            const uint64_t mask = full & ~((1ull << (6 + 5 * set)) - 1);
            memcpy(blob + mask_off + ((size_t)set * c + col) * 2 * w, &mask, w);
        }
    IbpCodecPlan *plan = NULL;
    if (ibp_codec_plan_from_blob(blob, blob_len, &plan)) {
        fprintf(stderr, "synthetic plan W=%u C=%u R=%u K=%u rejected\n", w, c, r, k);
        failures++;
    }
    free(blob);
    return plan;
}

static uint8_t xf_mixed(unsigned col)
{
    static const uint8_t kinds[] = {IBP_XF_PRED_DELTA, IBP_XF_PRED_XOR | IBP_XF_ZIGZAG, 0,
                                    IBP_XF_PRED_DELTA | IBP_XF_ZIGZAG, IBP_XF_ZIGZAG};
    return kinds[col % 5];
}

static uint8_t xf_none(unsigned col)
{
    (void)col;
    return 0;
}

/* Every other column zigzag-coded, none predicted. */
static uint8_t xf_zigzag(unsigned col)
{
    return col % 2 ? IBP_XF_ZIGZAG : 0;
}

/* Tables whose columns grow slowly row by row (what delta and xor predict), with noise so that
 * some words match no mask set and some rows go raw. */
static void synthetic_cases(void)
{
    static const struct {
        unsigned w, c, r, k, block_size;
        uint8_t (*xf)(unsigned);
        size_t len;
    } cases[] = {
        {4, 40, 1024, 1, 65536, xf_mixed, (3u << 20) + 6}, /* period > 32: predictors by column */
        {8, 33, 7, 3, 16384, xf_mixed, 300001},            /* short rows, period just above a warp */
        {2, 24, 100, 2, 65536, xf_mixed, (1u << 20) + 1},  /* period < 32, rows not a warp multiple */
        {4, 3, 1024, 3, 262144, xf_mixed, 5u << 20},       /* movielens-like */
        {4, 1, 1024, 2, 262144, xf_mixed, (7u << 20) + 2}, /* one delta column, two rounds of CTAs */
        {2, 32, 33, 1, 4096, xf_mixed, 100003},            /* period exactly a warp */
        {4, 1000, 64, 2, 65536, xf_none, (2u << 20) + 2},  /* long period, no predictor */
        /* no predictor, more table entries than IBP_DECODE_PARTS_ENTRIES_MAX: the sliced table */
        {4, 7, 1792, 3, 262144, xf_zigzag, (3u << 20) + 5}, /* uint8-images-like */
        {2, 12, 96, 2, 65536, xf_none, (1u << 20) + 7},
        {4, 2, 1024, 3, 262144, xf_zigzag, (2u << 20) + 9}, /* 8 entries: the table in parts */
        /* rows whole periods of the columns, some raw: flagged blocks rewritten in shares */
        {4, 8, 1024, 3, 262144, xf_mixed, (4u << 20) + 12},
        {2, 4, 64, 1, 65536, xf_mixed, (1u << 20) + 3}, /* the same, one mask set */
    };
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        const unsigned w = cases[ci].w, c = cases[ci].c;
        const size_t len = cases[ci].len;
        uint8_t *buf = malloc(len);
        uint64_t x = 0x9e3779b97f4a7c15ull * (ci + 1);
        const size_t nwords = len / w;
        for (size_t j = 0; j < nwords; j++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            const uint64_t row = j / c, col = j % c;
            uint64_t v = row * (col + 1) + (x & 7);
            if ((x >> 20) % 97 == 0)
                v = x;                       /* matches no set */
            if ((row / 300) % 11 == 5)
                v = x >> 3;                  /* a stretch of rows that packs badly */
            memcpy(buf + j * w, &v, w);
        }
        for (size_t i = nwords * w; i < len; i++)
            buf[i] = (uint8_t)(i * 31);
        char name[128];
        snprintf(name, sizeof(name), "synthetic W=%u C=%u R=%u K=%u, %zu bytes", w, c, cases[ci].r, cases[ci].k,
                 len);
        for (int flagged = 0; flagged < 2; flagged++) {
            IbpCodecPlan *plan =
                synthetic_plan(w, c, cases[ci].r, cases[ci].k, cases[ci].block_size, cases[ci].xf);
            if (flagged)
                strcat(name, ", flagged selectors");
            if (plan)
                run_case(name, buf, len, cases[ci].block_size, plan, flagged ? FORM_FLAGGED : 0u);
        }
        free(buf);
    }
}

static uint8_t *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(*len ? *len : 1);
    if (fread(buf, 1, *len, f) != *len) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

/* Times the compressed paths on the tensor tiled to `bytes` through the library's bench. */
static void bench(const char *name, const uint8_t *data, size_t len, size_t bytes, int top)
{
    IbpshimBenchOptions opts = {.size = bytes, .iters = 9, .device = 0, .top_coded = top};
    IbpshimBenchResult r;
    const int err = ibpshim_bench(data, len, &opts, &r);
    if (err || !r.verified) {
        fprintf(stderr, "%s: bench failed (%d, verified %d)\n", name, err, r.verified);
        failures++;
        return;
    }
    printf("%-36s %8.1f MiB ratio %.4f | decode-only %7.1f GB/s | DMA+decode %6.1f GB/s | pipelined %6.1f GB/s"
           " | zero-copy %6.1f GB/s | raw pinned %6.1f GB/s | speedup %.3f (ideal %.3f)\n",
           name, (double)r.bytes / 1048576.0, r.ratio, r.decode_gbps, r.dma_decode_gbps, r.pipelined_gbps,
           r.zerocopy_gbps, r.raw_gbps, r.raw_gbps > 0 ? r.pipelined_gbps / r.raw_gbps : 0, 1.0 / r.ratio);
}

int main(int argc, char **argv)
{
    ibp_log_init_from_env();
    drv = ibp_driver_get();
    if (!drv) {
        printf("decode check skipped: no CUDA driver (%s)\n", ibp_driver_error());
        return 77;
    }
    int count = 0;
    if (drv->cuDeviceGetCount(&count) != CUDA_SUCCESS || !count) {
        printf("decode check skipped: no GPU\n");
        return 77;
    }
    const size_t bench_bytes = argc > 1 ? strtoull(argv[1], NULL, 10) : 0;
    CUdevice dev;
    CUcontext ctx;
    CHECK_CU(drv->cuDeviceGet(&dev, 0));
    CHECK_CU(drv->cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK_CU(drv->cuCtxPushCurrent(ctx));
    if (ibp_module_get(ctx, &mod)) {
        fprintf(stderr, "decode check: kernels did not load\n");
        return 1;
    }
    CHECK_CU(drv->cuMemAlloc(&d_scratch, ibp_decode_scratch_bytes(mod)));
    /* Random data of every word size and awkward lengths. */
    const size_t sizes[] = {1, 7, 4095, 65536 * 3 + 5, (1u << 20) + 3};
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        const size_t n = sizes[si];
        uint8_t *buf = malloc(n);
        uint64_t x = 88172645463325252ull ^ n;
        for (int kind = 0; kind < 5; kind++) {
            for (size_t i = 0; i < n; i++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                switch (kind) {
                case 0: buf[i] = (uint8_t)x; break;                                 /* random bytes */
                case 1: buf[i] = (i % 4 == 3) ? 0x3c : (uint8_t)x; break;           /* fp32-like */
                case 2: buf[i] = (i % 2 == 1) ? (uint8_t)(0x3f + (x & 1)) : (uint8_t)x; break; /* bf16-like */
                case 3:
                    buf[i] = (i % 8 < 2) ? (uint8_t)(x & 15) : 0;
                    break; /* small int64 */
                default:   /* fp32-like and small int32 blocks in turn: runs of both forms */
                    buf[i] = (i / 65536) % 2 ? ((i % 4 == 3) ? (uint8_t)(0x3c + (x & 1)) : (uint8_t)x)
                                             : ((i % 4 == 0) ? (uint8_t)(x & 7) : 0);
                    break;
                }
            }
            char name[96];
            snprintf(name, sizeof(name), "random kind %d, %zu bytes", kind, n);
            char more[128];
            run_case(name, buf, n, 65536, NULL, 0);
            snprintf(more, sizeof(more), "%s, flagged selectors", name);
            run_case(more, buf, n, 65536, NULL, FORM_FLAGGED);
            snprintf(more, sizeof(more), "%s, top-coded", name);
            run_case(more, buf, n, 65536, NULL, FORM_TOP);
            snprintf(more, sizeof(more), "%s, top-coded, flagged selectors", name);
            run_case(more, buf, n, 65536, NULL, FORM_TOP | FORM_FLAGGED);
        }
        free(buf);
    }
    synthetic_cases();
    const char *dir = getenv("IBPSHIM_TEST_DATA");
    static const char *const files[] = {"ocr_rec_linear85_f32_120x6625.bin", "ocr_det_all_f32.bin",
                                        "ocr_rec_all_bf16.bin", "fashion_mnist_5000x784_u8.bin",
                                        "movielens_100004x3_i32.bin", "digits_1797x64_f64.bin"};
    int found = 0;
    for (size_t i = 0; dir && i < sizeof(files) / sizeof(files[0]); i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        size_t len = 0;
        uint8_t *data = read_file(path, &len);
        if (!data)
            continue;
        found++;
        run_case(files[i], data, len, 0, NULL, 0);
        char name[128];
        snprintf(name, sizeof(name), "%s, flagged selectors", files[i]);
        run_case(name, data, len, 0, NULL, FORM_FLAGGED);
        snprintf(name, sizeof(name), "%s, top-coded", files[i]);
        run_case(name, data, len, 0, NULL, FORM_TOP);
        if (i == 1 || i == 2 || i == 4) /* fp32 and bf16 (one column), movielens (predictors) */
            large_case(files[i], data, len, 0);
        if (i == 2) /* the tensor the flagged form helps most */
            large_case(files[i], data, len, FORM_FLAGGED);
        if (i == 1) /* fp32 weights, every block top-coded */
            large_case(files[i], data, len, FORM_TOP);
        if (bench_bytes && !failures)
            bench(files[i], data, len, bench_bytes, 0);
        if (bench_bytes && !failures && i < 3) /* the weights, top-coded */
            bench(name, data, len, bench_bytes, 1);
        free(data);
    }
    if (!found) {
        printf("decode check: real tensors skipped (set IBPSHIM_TEST_DATA to the data folder)\n");
        const size_t n = (1u << 20) + 3;
        uint8_t *tile = malloc(n);
        uint64_t x = 0x9e3779b97f4a7c15ull;
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            tile[i] = (i % 4 == 3) ? 0x3c : (uint8_t)x; /* fp32-like */
        }
        large_case("random fp32-like", tile, n, 0);
        free(tile);
    }
    CUcontext popped;
    drv->cuCtxPopCurrent(&popped);
    /* The flagged cases are only a check where some block took the flagged form. */
    printf("decode check: %llu blocks of flagged selectors decoded\n", (unsigned long long)flagged_blocks);
    if (!flagged_blocks) {
        fprintf(stderr, "decode check: no flagged case wrote a block of flagged selectors\n");
        failures++;
    }
    printf("decode check: %llu top-coded blocks decoded, %llu runs of them with packed blocks\n",
           (unsigned long long)top_blocks, (unsigned long long)mixed_runs);
    if (!top_blocks || !mixed_runs) {
        fprintf(stderr,
                "decode check: no top-coded case wrote a top-coded block, or none beside packed ones\n");
        failures++;
    }
    printf("decode check: %s\n", failures ? "FAILED" : "every byte matched");
    return failures ? 1 : 0;
}
