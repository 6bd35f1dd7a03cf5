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

int ibp_codec_plan_build(uint32_t word_size, uint32_t columns, uint32_t row_words, uint32_t nsets,
                         uint32_t block_size, const uint8_t *xform, const uint64_t *mask,
                         const uint64_t *value, IbpCodecPlan **out)
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
    }
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
    rc = ibp_plan_make_blob(p);
    if (rc)
        goto fail;
    *out = p;
    return 0;
fail:
    ibp_codec_plan_destroy(&p);
    return rc;
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
    if (h.magic != IBP_PLAN_MAGIC || h.version != IBP_FORMAT_VERSION || h.blob_len > len ||
        !ibp_valid_shape(h.word_size, h.columns, h.row_words, h.nsets, h.block_size))
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
    const size_t packed = IBP_BLOCK_HEADER_SIZE + (((nrows + 7u) / 8u + r16) & ~r16) +
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
    return ibp_codec_kernels()->encode(plan, src, (uint32_t)len, phase, dst, cap, comp_len);
}

int ibp_codec_block_decode(const IbpCodecPlan *plan, const void *blk, size_t blk_len, size_t orig_len,
                           void *dst, size_t limit)
{
    if (!plan || !blk || (!dst && limit) || orig_len > plan->block_size || limit > orig_len)
        return -EINVAL;
    return ibp_codec_kernels()->decode(plan, blk, blk_len, (uint32_t)orig_len, dst, (uint32_t)limit);
}
