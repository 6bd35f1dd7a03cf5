/* SPDX-License-Identifier: MIT
 * ibpshim: plan objects, their position-independent blob, and the per-block entry points. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "codec/internal.h"

static int ibp_valid_shape(uint32_t word_size, uint32_t columns, uint32_t row_words, uint32_t nsets,
                           uint32_t block_size)
{
    return (word_size == 2u || word_size == 4u || word_size == 8u) && columns >= 1u &&
           columns <= IBP_MAX_COLUMNS && row_words >= 1u && row_words <= IBP_MAX_ROW_WORDS && nsets >= 1u &&
           nsets <= IBP_MAX_SETS && block_size >= IBP_MIN_BLOCK_SIZE && block_size <= IBP_MAX_BLOCK_SIZE &&
           (block_size & (block_size - 1u)) == 0;
}

/* Counts the runs of contiguous set bits of v and, when out is not NULL, stores them. */
static uint32_t ibp_plan_bit_runs(uint64_t v, IbpBitRun *out)
{
    uint32_t n = 0;
    uint32_t packed = 0; /* bits of v below the current run */
    while (v) {
        const uint32_t s = (uint32_t)__builtin_ctzll(v);
        const uint64_t shifted = v >> s;
        const uint32_t len = ~shifted ? (uint32_t)__builtin_ctzll(~shifted) : 64u;
        if (out) {
            out[n].bits = ibp_low_mask(len) << s;
            out[n].gap = s - packed;
        }
        n++;
        packed += len;
        v = s + len >= 64u ? 0 : (v >> (s + len)) << (s + len);
    }
    return n;
}

/* Masks of the shift network that deposits the low popcount(m) bits of a word into the set bits
 * of m (pdep without the instruction).  A bit of the field bound for set bit p of m must move up
 * by z(p), the clear bits of m below p; the network moves it by 32, 16, 8, 4, 2, 1 where z(p) has
 * that bit.  Run backwards, the steps are those of gathering the set bits down (pext): step k
 * moves down by 2^k the bits whose count of clear bits below (at that stage) is odd in bit k.
 * steps[5 - k] holds the positions those bits leave in pext, which are the positions they reach
 * in pdep; bits move in order, so no step overwrites a bit that is still needed. */
static void ibp_plan_expand_steps(uint64_t m, uint64_t *steps)
{
    /* below: bit q set where position q - 1 is clear in m, one mark per clear bit still counted */
    uint64_t below = ~m << 1;
    for (uint32_t k = 0; k < 6u; k++) {
        uint64_t odd = below; /* bit q: odd number of marks at or below q */
        for (uint32_t s = 1; s < 64u; s *= 2u)
            odd ^= odd << s;
        const uint64_t move = odd & m;
        steps[5u - k] = move;
        m = (m ^ move) | (move >> (1u << k));
        /* Marks of an odd prefix are now accounted for in units of 2^k. */
        below &= ~odd;
    }
}

/* Lane `to` takes lane `from`: as dword indices of vpermd (wide) or byte indices of pshufb. */
static void ibp_plan_lane_index(uint8_t *idx, uint32_t to, uint32_t from, uint32_t w, int wide)
{
    if (wide) {
        for (uint32_t d = 0; d < w / 4u; d++)
            idx[(to * w / 4u + d) * 4u] = (uint8_t)(from * w / 4u + d);
    } else {
        for (uint32_t b = 0; b < w; b++)
            idx[to * w + b] = (uint8_t)(from * w + b);
    }
}

/* The period-major layout of block_avx2.h's transform undo (see IbpCodecPlan.period). */
static void ibp_plan_periods(IbpCodecPlan *p)
{
    const uint32_t w = p->word_size;
    const uint32_t c_count = p->columns;
    p->xf_kinds = 0;
    for (uint32_t c = 0; c < c_count; c++) {
        const uint32_t xf = p->xform[c];
        p->xf_kinds |= (xf & IBP_XF_ZIGZAG ? 1u : 0u) |
                       ((xf & IBP_XF_PRED_MASK) == IBP_XF_PRED_DELTA ? 2u : 0u) |
                       ((xf & IBP_XF_PRED_MASK) == IBP_XF_PRED_XOR ? 4u : 0u);
    }
    /* 2-byte lanes cannot cross the halves of a 256-bit vector, so their k > 1 layout is 128-bit. */
    const uint32_t wide_lanes = 32u / w;
    const int wide = w > 2u || c_count > 8u;
    const uint32_t lanes = wide ? wide_lanes : 16u / w;
    p->period = 0;
    if (c_count > 2u * lanes)
        return;
    const uint32_t k = c_count <= lanes / 2u ? lanes / c_count : 1u;
    p->period = k * c_count;
    p->period_vecs = (c_count + lanes - 1u) / lanes;
    p->period_wide = (uint32_t)wide;
    p->period_steps = 0;
    memset(p->period_idx, 0, sizeof(p->period_idx));
    memset(p->period_keep, 0, sizeof(p->period_keep));
    /* Lane i of shift s takes lane i - s; lane i of the carry continues the chain that ended in
     * the last period of the vector before: lane (k - 1) * C + i mod C. */
    for (uint32_t shift = c_count; k > 1u && shift < p->period; shift *= 2u) {
        const uint32_t st = p->period_steps++;
        for (uint32_t i = 0; i < lanes; i++) {
            const uint32_t from = i >= shift ? i - shift : 0u;
            const uint64_t keep = i >= shift ? ibp_fmt_word_mask(w) : 0;
            memcpy(p->period_keep[st] + (size_t)i * w, &keep, w);
            ibp_plan_lane_index(p->period_idx[st], i, from, w, wide);
        }
    }
    for (uint32_t i = 0; i < lanes; i++)
        ibp_plan_lane_index(p->period_idx[3], i, (k - 1u) * c_count + i % c_count, w, wide);
}

/* Group table, reference table, lane tables and scan shuffles (see IbpCodecPlan), all derived
 * from the per-word tables already built. */
static int ibp_plan_vector_tables(IbpCodecPlan *p, int full)
{
    const uint32_t w = p->word_size;
    const uint32_t c_count = p->columns;
    const uint32_t sb = p->sel_bits;
    const uint32_t g = 8u / w;
    const uint32_t wbits = w * 8u;

    p->group_sel_bits = g * sb;
    const size_t gentries = (size_t)c_count << p->group_sel_bits;
    if (gentries * 2u * sizeof(uint64_t) <= IBP_GROUP_TABLE_MAX) {
        p->gtab = malloc(gentries * 2u * sizeof(uint64_t));
        p->gcols = malloc((size_t)c_count * (IBP_GROUP_RUN + 1u) * sizeof(uint32_t));
        if (!p->gtab || !p->gcols)
            return -ENOMEM;
        for (uint32_t c = 0; c < c_count; c++)
            for (uint32_t q = 0; q <= IBP_GROUP_RUN; q++)
                p->gcols[c * (IBP_GROUP_RUN + 1u) + q] = (((c + q * g) % c_count) << p->group_sel_bits) * 2u;
        /* Column by column, each word's entries found once a column, not by a division an entry
         * and word: the planner builds a plan for every trial it judges. */
        const size_t per_col = (size_t)1 << p->group_sel_bits;
        for (uint32_t c = 0; c < c_count; c++) {
            const IbpDecEntry *col[8];
            for (uint32_t i = 0, ci = c; i < g; i++, ci = ci + 1u == c_count ? 0 : ci + 1u)
                col[i] = p->dtab + ((size_t)ci << sb);
            for (size_t e = (size_t)c * per_col; e < (size_t)(c + 1u) * per_col; e++) {
                uint64_t mask = 0;
                uint64_t value = 0;
                for (uint32_t i = 0; i < g; i++) {
                    /* A selector above K (corrupt data) takes the empty entry, as in dtab. */
                    const IbpDecEntry *d = col[i] + ((uint32_t)(e >> (i * sb)) & ((1u << sb) - 1u));
                    mask |= d->vmask << (i * wbits);
                    value |= d->dvalue << (i * wbits);
                }
                p->gtab[2u * e] = mask;
                p->gtab[2u * e + 1u] = value;
            }
        }
    }

    if (p->gtab && full) {
        p->rgtab = malloc(gentries * 8u * sizeof(uint64_t));
        p->rgbits = malloc(gentries);
        if (!p->rgtab || !p->rgbits)
            return -ENOMEM;
        for (size_t e = 0; e < gentries; e++) {
            uint64_t *const r = p->rgtab + 8u * e;
            r[0] = p->gtab[2u * e];
            r[1] = p->gtab[2u * e + 1u];
            ibp_plan_expand_steps(r[0], r + 2);
            p->rgbits[e] = (uint8_t)__builtin_popcountll(r[0]);
        }
    }

    const size_t lane_len = (size_t)(c_count + IBP_LANE_PAD) * w;
    p->lanes = calloc(3u + 2u * IBP_MAX_SETS, lane_len);
    p->lanes_vbits = calloc(IBP_MAX_SETS, lane_len);
    if (!p->lanes || !p->lanes_vbits)
        return -ENOMEM;
    p->lane_zz = p->lanes;
    p->lane_delta = p->lanes + lane_len;
    p->lane_xor = p->lanes + 2u * lane_len;
    for (uint32_t k = 0; k < IBP_MAX_SETS; k++) {
        p->lane_mask[k] = p->lanes + (3u + k) * lane_len;
        p->lane_value[k] = p->lanes + (3u + IBP_MAX_SETS + k) * lane_len;
        p->lane_vbits[k] = p->lanes_vbits + k * lane_len;
    }
    const uint64_t ones = ibp_fmt_word_mask(w);
    for (uint32_t e = 0; e < c_count + IBP_LANE_PAD; e++) {
        const uint32_t c = e % c_count;
        const uint32_t xf = p->xform[c];
        const uint64_t zz = xf & IBP_XF_ZIGZAG ? ones : 0;
        const uint64_t delta = (xf & IBP_XF_PRED_MASK) == IBP_XF_PRED_DELTA ? ones : 0;
        const uint64_t xr = (xf & IBP_XF_PRED_MASK) == IBP_XF_PRED_XOR ? ones : 0;
        memcpy(p->lane_zz + (size_t)e * w, &zz, w);
        memcpy(p->lane_delta + (size_t)e * w, &delta, w);
        memcpy(p->lane_xor + (size_t)e * w, &xr, w);
        for (uint32_t k = 0; k < IBP_MAX_SETS; k++) {
            memcpy(p->lane_mask[k] + (size_t)e * w, &p->etab[c].mask[k], w);
            memcpy(p->lane_value[k] + (size_t)e * w, &p->etab[c].value[k], w);
            const uint64_t vbits = wbits - (uint64_t)__builtin_popcountll(p->etab[c].mask[k]);
            memcpy(p->lane_vbits[k] + (size_t)e * w, &vbits, w);
        }
    }

    /* Scan of 16 / W lanes: lane i takes lane i - shift (none below 0: index 0x80 gives 0). */
    const uint32_t lanes = 16u / w;
    p->scan_steps = 0;
    p->pred_dist = (c_count + lanes - 1u) / lanes * lanes;
    const uint32_t o = (p->pred_dist - c_count) * w;
    for (uint32_t b = 0; b < 16u; b++) {
        p->pred_lo[b] = b + o < 16u ? (uint8_t)(b + o) : 0x80u;
        p->pred_hi[b] = b + o >= 16u ? (uint8_t)(b + o - 16u) : 0x80u;
    }
    ibp_plan_periods(p);
    if (c_count < lanes) {
        for (uint32_t shift = c_count; shift < lanes; shift *= 2u) {
            uint8_t *ctrl = p->scan_ctrl[p->scan_steps++];
            for (uint32_t b = 0; b < 16u; b++)
                ctrl[b] = b / w >= shift ? (uint8_t)(b - shift * w) : 0x80u;
        }
        /* Carry: lane i continues the chain that ended in lane lanes - C + i mod C of the vector
         * before. */
        for (uint32_t b = 0; b < 16u; b++)
            p->scan_ctrl[3][b] = (uint8_t)((lanes - c_count + (b / w) % c_count) * w + b % w);
    }
    return 0;
}

/* Serialises the plan: header, C transform bytes, then K*C {mask, value} pairs of W bytes. */
static int ibp_plan_make_blob(IbpCodecPlan *p)
{
    const uint32_t entries = p->nsets * p->columns;
    const uint32_t xform_off = ibp_fmt_round16((uint32_t)sizeof(IbpPlanHeader));
    const uint32_t mask_off = xform_off + ibp_fmt_round16(p->columns);
    const uint32_t blob_len = mask_off + ibp_fmt_round16(entries * 2u * p->word_size);
    uint8_t *blob = calloc(1, blob_len);
    if (!blob)
        return -ENOMEM;
    const IbpPlanHeader h = {
        .magic = IBP_PLAN_MAGIC,
        .version = IBP_FORMAT_VERSION,
        .word_size = (uint8_t)p->word_size,
        .nsets = (uint8_t)p->nsets,
        .columns = p->columns,
        .row_words = p->row_words,
        .block_size = p->block_size,
        .blob_len = blob_len,
        .xform_off = xform_off,
        .mask_off = mask_off,
    };
    memcpy(blob, &h, sizeof(h));
    memcpy(blob + xform_off, p->xform, p->columns);
    for (uint32_t i = 0; i < entries; i++) {
        memcpy(blob + mask_off + (size_t)i * 2u * p->word_size, &p->mask[i], p->word_size);
        memcpy(blob + mask_off + (size_t)i * 2u * p->word_size + p->word_size, &p->value[i], p->word_size);
    }
    p->blob = blob;
    p->blob_len = blob_len;
    return 0;
}

static int ibp_plan_build(uint32_t word_size, uint32_t columns, uint32_t row_words, uint32_t nsets,
                          uint32_t block_size, const uint8_t *xform, const uint64_t *mask,
                          const uint64_t *value, int full, IbpCodecPlan **out)
{
    IbpCodecPlan *p = NULL;
    int rc = -EINVAL;

    if (!out || !mask || !value || !ibp_valid_shape(word_size, columns, row_words, nsets, block_size))
        return -EINVAL;
    const uint32_t entries = nsets * columns;
    const uint64_t wmask = ibp_fmt_word_mask(word_size);
    p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->word_size = word_size;
    p->columns = columns;
    p->row_words = row_words;
    p->nsets = nsets;
    p->sel_bits = ibp_fmt_sel_bits(nsets);
    p->block_size = block_size;
    p->xform = calloc(columns, 1);
    p->mask = calloc(entries, sizeof(uint64_t));
    p->value = calloc(entries, sizeof(uint64_t));
    const uint32_t dentries = entries + columns;
    p->dvalue = calloc(dentries, sizeof(uint64_t));
    p->vmask = calloc(dentries, sizeof(uint64_t));
    p->vbits = calloc(dentries, 1);
    p->run_first = calloc(dentries, sizeof(uint32_t));
    p->nruns = calloc(dentries, 1);
    p->dtab = calloc((size_t)columns << p->sel_bits, sizeof(IbpDecEntry));
    p->etab = calloc(columns, sizeof(IbpEncEntry));
    rc = -ENOMEM;
    if (!p->xform || !p->mask || !p->value || !p->dvalue || !p->vmask || !p->vbits || !p->run_first ||
        !p->nruns || !p->dtab || !p->etab)
        goto fail;
    rc = -EINVAL;
    for (uint32_t c = 0; c < columns; c++) {
        const uint8_t xf = xform ? xform[c] : 0;
        if (xf & ~IBP_XF_VALID || (xf & IBP_XF_PRED_MASK) == IBP_XF_PRED_MASK)
            goto fail;
        p->xform[c] = xf;
        p->any_xform |= xf != 0;
        p->carry_words += (xf & IBP_XF_PRED_MASK) != 0;
    }
    if (columns > IBP_CARRY_MAX_COLUMNS)
        p->carry_words = 0;
    for (uint32_t i = 0; i < entries; i++) {
        if (mask[i] & ~wmask || value[i] & ~mask[i])
            goto fail;
        p->mask[i] = mask[i];
        p->value[i] = value[i];
    }
    for (uint32_t i = 0; i < (columns << p->sel_bits); i++)
        p->dtab[i].xform = p->xform[i >> p->sel_bits];
    for (uint32_t c = 0; c < columns; c++) {
        for (uint32_t k = 0; k < IBP_MAX_SETS; k++) {
            const uint32_t from = (k < nsets ? k : 0u) * columns + c;
            p->etab[c].mask[k] = mask[from];
            p->etab[c].value[k] = value[from];
        }
    }
    uint32_t total_runs = 0;
    for (uint32_t i = 0; i < dentries; i++) {
        const uint64_t inv = i < columns ? 0 : mask[i - columns];
        p->dvalue[i] = i < columns ? 0 : value[i - columns];
        p->vmask[i] = ~inv & wmask;
        p->vbits[i] = (uint8_t)__builtin_popcountll(p->vmask[i]);
        IbpDecEntry *const e = p->dtab + ((size_t)(i % columns) << p->sel_bits) + i / columns;
        e->vmask = p->vmask[i];
        e->dvalue = p->dvalue[i];
        e->vbits = p->vbits[i];
        p->nruns[i] = (uint8_t)ibp_plan_bit_runs(p->vmask[i], NULL);
        total_runs += p->nruns[i];
    }
    p->runs = calloc(total_runs ? total_runs : 1u, sizeof(IbpBitRun));
    rc = -ENOMEM;
    if (!p->runs)
        goto fail;
    uint32_t used = 0;
    for (uint32_t i = 0; i < dentries; i++) {
        p->run_first[i] = used;
        used += ibp_plan_bit_runs(p->vmask[i], p->runs + used);
    }
    rc = ibp_plan_vector_tables(p, full);
    if (rc)
        goto fail;
    rc = ibp_plan_make_blob(p);
    if (rc)
        goto fail;
    *out = p;
    return 0;
fail:
    ibp_codec_plan_destroy(&p);
    return rc;
}

int ibp_codec_plan_build(uint32_t word_size, uint32_t columns, uint32_t row_words, uint32_t nsets,
                         uint32_t block_size, const uint8_t *xform, const uint64_t *mask,
                         const uint64_t *value, IbpCodecPlan **out)
{
    return ibp_plan_build(word_size, columns, row_words, nsets, block_size, xform, mask, value, 1, out);
}

int ibp_codec_plan_build_lite(uint32_t word_size, uint32_t columns, uint32_t row_words, uint32_t nsets,
                              uint32_t block_size, const uint8_t *xform, const uint64_t *mask,
                              const uint64_t *value, IbpCodecPlan **out)
{
    return ibp_plan_build(word_size, columns, row_words, nsets, block_size, xform, mask, value, 0, out);
}

void ibp_codec_plan_destroy(IbpCodecPlan **plan)
{
    if (!plan || !*plan)
        return;
    IbpCodecPlan *p = *plan;
    free(p->xform);
    free(p->mask);
    free(p->value);
    free(p->dvalue);
    free(p->vmask);
    free(p->vbits);
    free(p->run_first);
    free(p->nruns);
    free(p->runs);
    free(p->dtab);
    free(p->etab);
    free(p->gtab);
    free(p->gcols);
    free(p->rgtab);
    free(p->rgbits);
    free(p->lanes);
    free(p->lanes_vbits);
    free(p->blob);
    free(p);
    *plan = NULL;
}

int ibp_codec_plan_from_blob(const void *blob, size_t len, IbpCodecPlan **out)
{
    IbpPlanHeader h;
    const uint8_t *b = blob;
    uint64_t *mask = NULL;
    uint64_t *value = NULL;
    int rc = -EBADMSG;

    if (!blob || !out)
        return -EINVAL;
    if (len < sizeof(h))
        return -EBADMSG;
    memcpy(&h, b, sizeof(h));
    if (h.magic != IBP_PLAN_MAGIC || h.version < IBP_FORMAT_VERSION_MIN || h.version > IBP_FORMAT_VERSION ||
        h.blob_len > len || !ibp_valid_shape(h.word_size, h.columns, h.row_words, h.nsets, h.block_size))
        return -EBADMSG;
    const uint64_t entries = (uint64_t)h.nsets * h.columns;
    if (h.xform_off != ibp_fmt_round16((uint32_t)sizeof(h)) ||
        h.mask_off != h.xform_off + ibp_fmt_round16(h.columns) ||
        h.blob_len != h.mask_off + ibp_fmt_round16((uint32_t)(entries * 2u * h.word_size)))
        return -EBADMSG;
    mask = calloc(entries, sizeof(uint64_t));
    value = calloc(entries, sizeof(uint64_t));
    if (!mask || !value) {
        rc = -ENOMEM;
        goto fail;
    }
    for (uint64_t i = 0; i < entries; i++) {
        memcpy(&mask[i], b + h.mask_off + i * 2u * h.word_size, h.word_size);
        memcpy(&value[i], b + h.mask_off + i * 2u * h.word_size + h.word_size, h.word_size);
    }
    rc = ibp_codec_plan_build(h.word_size, h.columns, h.row_words, h.nsets, h.block_size, b + h.xform_off,
                              mask, value, out);
    if (rc == -EINVAL)
        rc = -EBADMSG;
fail:
    free(mask);
    free(value);
    return rc;
}

int ibp_codec_plan_from_blob_flags(const void *blob, size_t len, unsigned flags, IbpCodecPlan **out)
{
    const int rc = ibp_codec_plan_from_blob(blob, len, out);
    if (!rc) {
        (*out)->sel_flags = (flags & IBP_CODEC_PLAN_SELECTOR_FLAGS) != 0;
        (*out)->top_coded = (flags & IBP_CODEC_PLAN_TOP_CODED) != 0;
    }
    return rc;
}

int ibp_codec_plan_with_selector_flags(const IbpCodecPlan *plan, int on, IbpCodecPlan **out)
{
    if (!plan || !out)
        return -EINVAL;
    size_t len = 0;
    const void *blob = ibp_codec_plan_blob(plan, &len);
    return ibp_codec_plan_from_blob_flags(
        blob, len,
        (on ? IBP_CODEC_PLAN_SELECTOR_FLAGS : 0u) | (plan->top_coded ? IBP_CODEC_PLAN_TOP_CODED : 0u), out);
}

const void *ibp_codec_plan_blob(const IbpCodecPlan *plan, size_t *len)
{
    if (len)
        *len = plan ? plan->blob_len : 0;
    return plan ? plan->blob : NULL;
}

size_t ibp_codec_plan_block_size(const IbpCodecPlan *plan)
{
    return plan ? plan->block_size : 0;
}

void ibp_codec_plan_info(const IbpCodecPlan *plan, IbpCodecPlanInfo *info)
{
    memset(info, 0, sizeof(*info));
    if (!plan)
        return;
    info->word_size = plan->word_size;
    info->columns = plan->columns;
    info->row_words = plan->row_words;
    info->nsets = plan->nsets;
    info->block_size = plan->block_size;
    uint64_t inv = 0;
    for (uint32_t c = 0; c < plan->columns; c++) {
        const uint32_t xf = plan->xform[c];
        info->xf_zigzag += (xf & IBP_XF_ZIGZAG) != 0;
        info->xf_delta += (xf & IBP_XF_PRED_MASK) == IBP_XF_PRED_DELTA;
        info->xf_xor += (xf & IBP_XF_PRED_MASK) == IBP_XF_PRED_XOR;
        inv += plan->word_size * 8u - plan->vbits[plan->columns + c];
    }
    info->invariant_bits = (unsigned)(inv * 100u / plan->columns);
    info->sample_ratio = plan->sample_ratio;
    info->sample_bytes = plan->sample_bytes;
    info->blob_len = plan->blob_len;
    info->selector_flags = plan->sel_flags;
    info->top_coded = plan->top_coded;
}

int ibp_codec_plan_describe(const IbpCodecPlan *plan, int json, char *buf, size_t cap)
{
    IbpCodecPlanInfo in;
    if (!plan)
        return -EINVAL;
    ibp_codec_plan_info(plan, &in);
    if (json)
        return snprintf(buf, cap,
                        "{\"word_size\": %u, \"columns\": %u, \"row_words\": %u, \"mask_sets\": %u, "
                        "\"block_size\": %zu, \"zigzag_columns\": %u, \"delta_columns\": %u, "
                        "\"xor_columns\": %u, \"invariant_bits_per_word\": %.2f, \"plan_bytes\": %zu, "
                        "\"sample_bytes\": %zu, \"sample_ratio\": %.4f}",
                        in.word_size, in.columns, in.row_words, in.nsets, in.block_size, in.xf_zigzag,
                        in.xf_delta, in.xf_xor, in.invariant_bits / 100.0, in.blob_len, in.sample_bytes,
                        in.sample_ratio);
    return snprintf(buf, cap,
                    "%u-byte words, masks repeat every %u words (%u bytes), rows of %u words packed or raw, "
                    "%u mask set%s per column, blocks of %zu bytes; transforms: %u zigzag, %u delta, %u xor "
                    "of %u columns; %.2f invariant bits per word (set 1); plan %zu bytes; "
                    "ratio on a %zu-byte sample %.4f",
                    in.word_size, in.columns, in.columns * in.word_size, in.row_words, in.nsets,
                    in.nsets > 1 ? "s" : "", in.block_size, in.xf_zigzag, in.xf_delta, in.xf_xor, in.columns,
                    in.invariant_bits / 100.0, in.blob_len, in.sample_bytes, in.sample_ratio);
}

size_t ibp_codec_bound_for(const IbpCodecPlan *p, size_t orig_len)
{
    const size_t nwords = orig_len / p->word_size;
    const size_t nrows = (nwords + p->row_words - 1u) / p->row_words;
    const size_t r16 = IBP_ALIGN - 1u;
    const size_t packed = ibp_block_meta_len(p, (uint32_t)nwords) + (((nrows + 7u) / 8u + r16) & ~r16) +
                          ((nwords * p->word_size + r16) & ~r16) +
                          (((nwords * p->sel_bits + 7u) / 8u + r16) & ~r16) + IBP_ALIGN;
    const size_t raw = (IBP_BLOCK_HEADER_SIZE + orig_len + r16) & ~r16;
    return packed > raw ? packed : raw;
}

size_t ibp_codec_block_bound(const IbpCodecPlan *plan, size_t orig_len)
{
    if (!plan || orig_len > plan->block_size)
        return 0;
    return ibp_codec_bound_for(plan, orig_len);
}

int ibp_codec_block_encode(const IbpCodecPlan *plan, const void *src, size_t len, size_t region_off,
                           void *dst, size_t cap, size_t *comp_len)
{
    if (!plan || (!src && len) || !dst || !comp_len || len > plan->block_size ||
        region_off % plan->block_size)
        return -EINVAL;
    if (cap < ibp_codec_bound_for(plan, len))
        return -ENOSPC;
    const uint32_t phase = (uint32_t)((region_off / plan->word_size) % plan->columns);
    return ibp_block_encode_any(ibp_codec_kernels(), plan, src, (uint32_t)len, phase, dst, cap, comp_len);
}

int ibp_codec_block_decode(const IbpCodecPlan *plan, const void *blk, size_t blk_len, size_t orig_len,
                           void *dst, size_t limit)
{
    if (!plan || !blk || (!dst && limit) || orig_len > plan->block_size || limit > orig_len)
        return -EINVAL;
    return ibp_block_decode_any(ibp_codec_kernels(), plan, blk, blk_len, (uint32_t)orig_len, dst,
                                (uint32_t)limit);
}
