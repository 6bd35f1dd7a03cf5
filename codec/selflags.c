/* SPDX-License-Identifier: MIT
 * ibpshim: the flagged selector form (FORMAT.md, "Flagged selectors"): written after a block's
 * fixed-width selectors where it is smaller, read back into the fixed-width form before the
 * block decodes. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codec/internal.h"

/* Bits of a word's rank among the selector values other than its column's commonest. */
static uint32_t rest_bits(uint32_t nsets)
{
    return nsets >= 3u ? 2u : nsets == 2u ? 1u : 0u;
}

/* The columns of a block's packed words, in order (their selectors' order), into *cols (nwords
 * entries allocated, NULL when the allocation fails); returns how many. */
static uint32_t packed_columns(const IbpCodecPlan *p, const uint8_t *rowflags, uint32_t nwords,
                               uint32_t phase, uint32_t **cols)
{
    uint32_t *const c = malloc((nwords ? nwords : 1u) * sizeof(*c));
    *cols = c;
    uint32_t n = 0;
    for (uint32_t j = 0; c && j < nwords; j++)
        if ((rowflags[j / p->row_words / 8u] >> (j / p->row_words % 8u)) & 1u)
            c[n++] = (uint32_t)(((uint64_t)phase + j) % p->columns);
    return n;
}

/* Sizes of the four parts of the flagged form of n selectors: primaries, flags, plane, rest. */
typedef struct SelFlagsLayout {
    uint32_t flags_off, plane_off, rest_off, len;
} SelFlagsLayout;

static SelFlagsLayout layout(const IbpCodecPlan *p, uint64_t n, uint64_t planes, uint64_t others)
{
    SelFlagsLayout l;
    l.flags_off = ibp_fmt_round16(p->columns);
    l.plane_off = l.flags_off + ibp_fmt_round16((uint32_t)((n + 63u) / 64u));
    l.rest_off = l.plane_off + ibp_fmt_round16((uint32_t)planes);
    l.len = l.rest_off + ibp_fmt_round16((uint32_t)((others * rest_bits(p->nsets) + 7u) / 8u));
    return l;
}

uint32_t ibp_selflags_encode(const IbpCodecPlan *p, const uint8_t *rowflags, uint32_t nwords, uint32_t phase,
                             const uint8_t *sel, uint64_t sbits, uint8_t *out, uint32_t limit)
{
    const uint32_t sb = p->sel_bits, c_count = p->columns, rb = rest_bits(p->nsets);
    uint32_t *cols = NULL;
    const uint32_t n = packed_columns(p, rowflags, nwords, phase, &cols);
    uint8_t *const sv = n ? malloc(n) : NULL; /* the selectors, one a byte */
    uint32_t *const counts = n ? calloc((size_t)c_count * 4u, sizeof(*counts)) : NULL;
    uint8_t *const prim = n ? malloc(c_count) : NULL;
    uint32_t len = 0;
    if (!n || (uint64_t)n * sb != sbits || !cols || !sv || !counts || !prim)
        goto done;
    IbpBitReader sr;
    ibp_br_init(&sr, sel, (sbits + 7u) / 8u);
    for (uint32_t k = 0; k < n; k++) {
        sv[k] = (uint8_t)ibp_br_read(&sr, sb);
        counts[cols[k] * 4u + sv[k]]++;
    }
    for (uint32_t c = 0; c < c_count; c++) {
        uint32_t best = 0;
        for (uint32_t v = 1; v <= p->nsets; v++)
            best = counts[c * 4u + v] > counts[c * 4u + best] ? v : best;
        prim[c] = (uint8_t)best;
    }
    uint64_t planes = 0, others = 0;
    for (uint32_t g = 0; g < n; g += 8) {
        uint32_t miss = 0;
        for (uint32_t k = g; k < n && k < g + 8; k++)
            miss += sv[k] != prim[cols[k]];
        planes += miss != 0;
        others += miss;
    }
    const SelFlagsLayout l = layout(p, n, planes, others);
    if (l.len >= limit)
        goto done;
    memset(out, 0, l.len);
    memcpy(out, prim, c_count);
    /* Each part padded to 16 bytes, so that no writer's whole-word stores reach the next. */
    IbpBitWriter fw, rw;
    ibp_bw_init(&fw, out + l.flags_off);
    ibp_bw_init(&rw, out + l.rest_off);
    uint64_t plane = 0;
    for (uint32_t g = 0; g < n; g += 8) {
        uint32_t bits = 0;
        for (uint32_t k = g; k < n && k < g + 8; k++) {
            const uint32_t s = sv[k], pr = prim[cols[k]];
            if (s == pr)
                bits |= 1u << (k - g);
            else
                ibp_bw_put(&rw, s < pr ? s : s - 1u, rb);
        }
        const uint32_t full = n - g >= 8 ? 0xffu : (1u << (n - g)) - 1u;
        ibp_bw_put(&fw, bits == full, 1);
        if (bits != full)
            out[l.plane_off + plane++] = (uint8_t)bits;
    }
    ibp_bw_finish(&fw);
    ibp_bw_finish(&rw);
    len = l.len;
done:
    free(cols);
    free(sv);
    free(counts);
    free(prim);
    return len;
}

/* Reads the flagged form at sec (len bytes) back into n fixed-width selectors at out (zeroed,
 * with room for ibp_bw_finish's whole-word store). */
static int expand(const IbpCodecPlan *p, const uint32_t *cols, uint32_t n, const uint8_t *sec, uint32_t len,
                  uint8_t *out)
{
    const uint32_t sb = p->sel_bits, rb = rest_bits(p->nsets);
    if (ibp_fmt_round16(p->columns) > len)
        return -EBADMSG;
    for (uint32_t c = 0; c < p->columns; c++)
        if (sec[c] > p->nsets)
            return -EBADMSG;
    const uint32_t groups = (n + 7u) / 8u;
    const SelFlagsLayout head = layout(p, n, 0, 0);
    if (head.plane_off > len)
        return -EBADMSG;
    IbpBitReader fr;
    ibp_br_init(&fr, sec + head.flags_off, head.plane_off - head.flags_off);
    uint64_t planes = 0, others = 0;
    for (uint32_t g = 0; g < groups; g++) {
        if (ibp_br_read(&fr, 1))
            continue;
        if (head.plane_off + planes >= len)
            return -EBADMSG;
        const uint32_t bits = sec[head.plane_off + planes++];
        const uint32_t full = n - g * 8u >= 8u ? 0xffu : (1u << (n - g * 8u)) - 1u;
        if ((bits & ~full) || bits == full) /* words past the last, or a group its flag would take */
            return -EBADMSG;
        others += (uint32_t)__builtin_popcount(full & ~bits);
    }
    const SelFlagsLayout l = layout(p, n, planes, others);
    if (l.len != len)
        return -EBADMSG;
    while (fr.pos < fr.end)
        if (ibp_br_read(&fr, 1)) /* flags past the last group */
            return -EBADMSG;
    IbpBitReader rr;
    ibp_br_init(&fr, sec + l.flags_off, l.plane_off - l.flags_off);
    ibp_br_init(&rr, sec + l.rest_off, l.len - l.rest_off);
    IbpBitWriter ow;
    ibp_bw_init(&ow, out);
    uint64_t plane = 0;
    for (uint32_t g = 0; g < groups; g++) {
        const uint32_t bits = ibp_br_read(&fr, 1) ? 0xffu : sec[l.plane_off + plane++];
        for (uint32_t k = g * 8u; k < n && k < g * 8u + 8u; k++) {
            const uint32_t pr = sec[cols[k]];
            uint32_t s = pr;
            if (!((bits >> (k - g * 8u)) & 1u)) {
                const uint32_t r = (uint32_t)ibp_br_read(&rr, rb);
                if (r >= p->nsets)
                    return -EBADMSG;
                s = r < pr ? r : r + 1u;
            }
            ibp_bw_put(&ow, s, sb);
        }
    }
    ibp_bw_finish(&ow);
    return rr.err ? -EBADMSG : 0;
}

int ibp_selflags_unflag(const IbpCodecPlan *p, const uint8_t *blk, size_t blk_len, uint32_t orig_len,
                        uint8_t **out, size_t *out_len)
{
    IbpBlockHeader h;
    *out = NULL;
    int rc = ibp_block_open(p, blk, blk_len, orig_len, orig_len, &h);
    if (rc <= 0)
        return rc;
    if (!ibp_fmt_selflags(h.flags))
        return -EBADMSG;
    const uint32_t w = p->word_size, nwords = orig_len / w, tail = orig_len % w;
    uint32_t *cols = NULL;
    const uint32_t n = packed_columns(p, blk + h.rowflag_off, nwords, h.col_phase, &cols);
    if (!cols)
        return -ENOMEM;
    const uint32_t sbytes = (uint32_t)(((uint64_t)n * p->sel_bits + 7u) / 8u);
    const uint32_t tail_off = h.sel_off + ibp_fmt_round16(sbytes);
    const uint32_t comp = ibp_fmt_round16(tail_off + tail);
    uint8_t *const b = calloc(comp, 1);
    rc = -ENOMEM;
    if (b) {
        memcpy(b, blk, h.sel_off);
        rc = expand(p, cols, n, blk + h.sel_off, h.tail_off - h.sel_off, b + h.sel_off);
    }
    if (!rc) {
        memcpy(b + tail_off, blk + h.tail_off, tail);
        h.flags &= ~IBP_BLOCK_SELFLAGS;
        h.comp_len = comp;
        h.tail_off = tail_off;
        memcpy(b, &h, sizeof(h));
        *out = b;
        *out_len = comp;
    } else {
        free(b);
    }
    free(cols);
    return rc;
}

int ibp_block_decode_any(const IbpCodecKernels *k, const IbpCodecPlan *p, const uint8_t *blk, size_t blk_len,
                         uint32_t orig_len, uint8_t *dst, uint32_t limit)
{
    IbpBlockHeader h;
    if (blk_len >= sizeof(h)) {
        memcpy(&h, blk, sizeof(h));
        if (h.flags == IBP_BLOCK_TOPCODED)
            return limit > orig_len ? -EINVAL : ibp_top_block_decode(&h, blk, blk_len, orig_len, dst, limit);
        if (ibp_fmt_selflags(h.flags)) {
            uint8_t *b = NULL;
            size_t b_len = 0;
            int rc = ibp_selflags_unflag(p, blk, blk_len, orig_len, &b, &b_len);
            if (!rc)
                rc = k->decode(p, b, b_len, orig_len, dst, limit);
            free(b);
            return rc;
        }
    }
    return k->decode(p, blk, blk_len, orig_len, dst, limit);
}
