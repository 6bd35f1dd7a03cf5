/* SPDX-License-Identifier: MIT
 * ibpshim: block encoder and decoder body, instantiated per instruction-set level and word size. */

/* No include guard: block_impl.h includes this once per word size after defining
 *   IBP_W             the word size, a constant, so loads, stores and shifts are fixed
 *   IBP_KW(name)      the name of an instantiated function (suffix per level and word size)
 * and, from block_ref.c or block_bmi2.c,
 *   IBP_KATTR         function attributes of the level (e.g. target("bmi2"))
 *   IBP_PEXT(p, i, x) gather the variant bits of x for mask entry i (not with IBP_OWN_CODER)
 *   IBP_PDEP(p, i, f) scatter f into the variant bits of mask entry i
 *   IBP_OWN_CODER     (optional) the level brings its own block encoder and decoder
 *                     (block_fast.h) and takes only the cost and the checked row decoder here */

/* Transforms the n words of one row starting at word j0 (column col), picks each word's mask
 * set and returns the row's packed size in bits (selectors included). */
IBP_KATTR static inline uint64_t IBP_KW(ibp_row_scan)(const IbpCodecPlan *p, const uint8_t *src, uint32_t j0,
                                                      uint32_t n, uint32_t col, uint64_t *t, uint8_t *sel)
{
    const uint32_t w = IBP_W;
    const uint32_t c_count = p->columns;
    const uint32_t k_count = p->nsets;
    uint64_t cost = (uint64_t)n * p->sel_bits;

    for (uint32_t i = 0; i < n; i++) {
        const uint32_t j = j0 + i;
        uint64_t x = ibp_load_word(src + (size_t)j * w, w);
        if (p->any_xform) {
            const uint32_t xf = p->xform[col];
            if (xf & IBP_XF_PRED_MASK) {
                const uint64_t prev = j >= c_count ? ibp_load_word(src + (size_t)(j - c_count) * w, w) : 0;
                x = (xf & IBP_XF_PRED_MASK) == IBP_XF_PRED_DELTA ? (x - prev) & ibp_fmt_word_mask(w)
                                                                 : x ^ prev;
            }
            if (xf & IBP_XF_ZIGZAG)
                x = ibp_fmt_zigzag(x, w);
        }
        t[i] = x;
        /* The first matching set wins: walk them backwards with conditional moves, since which
         * set matches is data-dependent and a branch on it mispredicts. */
        uint32_t s = 0;
        for (uint32_t k = k_count; k > 0; k--) {
            const uint32_t idx = (k - 1u) * c_count + col;
            s = (x & p->mask[idx]) == p->value[idx] ? k : s;
        }
        sel[i] = (uint8_t)s;
        cost += p->vbits[s * c_count + col];
        if (++col == c_count)
            col = 0;
    }
    return cost;
}

IBP_KATTR static uint64_t IBP_KW(ibp_block_cost)(const IbpCodecPlan *p, const uint8_t *src, uint32_t len,
                                                 uint32_t phase)
{
    const uint32_t w = IBP_W;
    const uint32_t r_len = p->row_words;
    const uint32_t nwords = len / w;
    const uint32_t nrows = (nwords + r_len - 1u) / r_len;
    uint64_t t[IBP_MAX_ROW_WORDS];
    uint8_t sel[IBP_MAX_ROW_WORDS];
    uint64_t payload_bits = 0;
    uint64_t sel_bits = 0;
    uint32_t col = phase;

    for (uint32_t r = 0; r < nrows; r++) {
        const uint32_t j0 = r * r_len;
        const uint32_t n = nwords - j0 < r_len ? nwords - j0 : r_len;
        const uint64_t packed = IBP_KW(ibp_row_scan)(p, src, j0, n, col, t, sel);
        const uint64_t raw = (uint64_t)n * w * 8u;
        if (packed < raw) {
            sel_bits += (uint64_t)n * p->sel_bits;
            payload_bits += packed - (uint64_t)n * p->sel_bits;
        } else {
            payload_bits += raw;
        }
        col = (uint32_t)((col + (uint64_t)n) % p->columns);
    }
    const uint64_t packed_len = IBP_BLOCK_HEADER_SIZE + ibp_fmt_round16((nrows + 7u) / 8u) +
                                ibp_fmt_round16((uint32_t)((payload_bits + 7u) / 8u)) +
                                ibp_fmt_round16((uint32_t)((sel_bits + 7u) / 8u)) + len % w;
    const uint64_t raw_len = ibp_fmt_round16(IBP_BLOCK_HEADER_SIZE + len);
    const uint64_t comp = ibp_fmt_round16((uint32_t)packed_len);
    return comp < raw_len ? comp : raw_len;
}

#ifndef IBP_OWN_CODER
IBP_KATTR static int IBP_KW(ibp_block_encode)(const IbpCodecPlan *p, const uint8_t *src, uint32_t len,
                                              uint32_t phase, uint8_t *dst, size_t cap, size_t *comp_len)
{
    const uint32_t w = IBP_W;
    const uint32_t r_len = p->row_words;
    const uint32_t c_count = p->columns;
    const uint32_t sb = p->sel_bits;
    const uint32_t wbits = w * 8u;
    const uint32_t nwords = len / w;
    const uint32_t nrows = (nwords + r_len - 1u) / r_len;
    const uint32_t rf_len = ibp_fmt_round16((nrows + 7u) / 8u);
    const uint32_t payload_off = IBP_BLOCK_HEADER_SIZE + rf_len;
    const uint32_t sel_max = ibp_fmt_round16((uint32_t)(((uint64_t)nwords * sb + 7u) / 8u));
    uint64_t t[IBP_MAX_ROW_WORDS];
    uint8_t sel[IBP_MAX_ROW_WORDS];
    IbpBitWriter pw;
    IbpBitWriter sw;

    if (cap < ibp_codec_bound_for(p, len) || phase >= c_count)
        return -EINVAL;
    /* Selectors go to the end of dst first (their section's offset depends on the payload's
     * length) and are moved down once the payload is complete. */
    uint8_t *const sel_scratch = dst + cap - sel_max;
    memset(dst + IBP_BLOCK_HEADER_SIZE, 0, rf_len);
    ibp_bw_init(&pw, dst + payload_off);
    ibp_bw_init(&sw, sel_scratch);

    uint32_t col = phase;
    for (uint32_t r = 0; r < nrows; r++) {
        const uint32_t j0 = r * r_len;
        const uint32_t n = nwords - j0 < r_len ? nwords - j0 : r_len;
        const uint64_t packed = IBP_KW(ibp_row_scan)(p, src, j0, n, col, t, sel);
        if (packed < (uint64_t)n * wbits) {
            dst[IBP_BLOCK_HEADER_SIZE + r / 8u] |= (uint8_t)(1u << (r % 8u));
            uint32_t cc = col;
            for (uint32_t i = 0; i < n; i++) {
                const uint32_t s = sel[i];
                const uint32_t idx = s * c_count + cc;
                ibp_bw_put(&sw, s, sb);
                ibp_bw_put(&pw, IBP_PEXT(p, idx, t[i]), p->vbits[idx]);
                if (++cc == c_count)
                    cc = 0;
            }
        } else {
            for (uint32_t i = 0; i < n; i++)
                ibp_bw_put(&pw, t[i], wbits);
        }
        col = (uint32_t)((col + (uint64_t)n) % c_count);
    }

    const uint64_t pbits = ibp_bw_finish(&pw);
    return ibp_block_finish(dst, src, len, w, phase, payload_off, pbits, ibp_bw_finish(&sw), sel_scratch,
                            comp_len);
}

#endif

/* Decodes words [j, row_end) of one row (its first word in column col) with a bounds check on
 * every read; the fallback of every level for rows near the end of a stream or of limit. */
IBP_KATTR static inline int IBP_KW(ibp_row_decode_checked)(const IbpCodecPlan *p, IbpBitReader *pr,
                                                           IbpBitReader *sr, int packed, uint32_t j,
                                                           uint32_t row_end, uint32_t col, uint8_t *dst,
                                                           uint32_t limit)
{
    const uint32_t w = IBP_W;
    for (; j < row_end; j++) {
        uint64_t x;
        if (packed) {
            const uint32_t s = (uint32_t)ibp_br_read(sr, p->sel_bits);
            if (s > p->nsets)
                return -EBADMSG;
            const uint32_t idx = s * p->columns + col;
            const uint64_t f = ibp_br_read(pr, p->vbits[idx]);
            x = p->dvalue[idx] | IBP_PDEP(p, idx, f);
        } else {
            x = ibp_br_read(pr, w * 8u);
        }
        if (p->any_xform)
            x = ibp_unxform(p, x, col, j, dst, w);
        const size_t at = (size_t)j * w;
        if (at + w <= limit)
            ibp_store_word(dst + at, x, w);
        else
            memcpy(dst + at, &x, limit - at);
        if (++col == p->columns)
            col = 0;
    }
    return pr->err || sr->err ? -EBADMSG : 0;
}

#ifndef IBP_OWN_CODER
IBP_KATTR static int IBP_KW(ibp_block_decode)(const IbpCodecPlan *p, const uint8_t *blk, size_t blk_len,
                                              uint32_t orig_len, uint8_t *dst, uint32_t limit)
{
    const uint32_t w = IBP_W;
    const uint32_t r_len = p->row_words;
    const uint32_t c_count = p->columns;
    const uint32_t k_count = p->nsets;
    const uint32_t sb = p->sel_bits;
    const uint32_t wbits = w * 8u;
    IbpBlockHeader h;

    int rc = ibp_block_open(blk, blk_len, orig_len, limit, w, r_len, c_count, &h);
    if (rc <= 0)
        return rc;
    if (h.flags == IBP_BLOCK_RAW) {
        memcpy(dst, blk + IBP_BLOCK_HEADER_SIZE, limit);
        return 0;
    }

    const uint32_t nwords = orig_len / w;
    const uint8_t *const rowflags = blk + h.rowflag_off;
    IbpBitReader pr;
    IbpBitReader sr;
    ibp_br_init(&pr, blk + h.payload_off, h.sel_off - h.payload_off);
    ibp_br_init(&sr, blk + h.sel_off, h.tail_off - h.sel_off);

    const uint32_t need = (uint32_t)(((uint64_t)limit + w - 1u) / w) < nwords
                              ? (uint32_t)(((uint64_t)limit + w - 1u) / w)
                              : nwords;
    const uint8_t *const pbase = pr.base;
    const uint8_t *const sbase = sr.base;
    uint32_t col = h.col_phase;
    uint32_t j = 0;
    for (uint32_t r = 0; j < need; r++) {
        const uint32_t row_end = j + r_len < need ? j + r_len : need;
        const uint32_t n = row_end - j;
        const int packed = (rowflags[r / 8u] >> (r % 8u)) & 1;
        /* A row cannot take more payload than its words whole: when that much (plus a load's
         * reach) is left in both streams, the row is read without per-field checks. */
        const int fast =
            pr.end - pr.pos >= (uint64_t)n * wbits + 72u && sr.end - sr.pos >= (uint64_t)n * sb + 72u;
        if (!fast) {
            rc = IBP_KW(ibp_row_decode_checked)(p, &pr, &sr, packed, j, row_end, col, dst, limit);
            if (rc)
                return rc;
            j = row_end;
            col = (uint32_t)((col + (uint64_t)n) % c_count);
            continue;
        }
        uint64_t ppos = pr.pos;
        uint64_t spos = sr.pos;
        for (; j < row_end; j++) {
            uint64_t x;
            if (packed) {
                const uint32_t s = (uint32_t)ibp_peek(sbase, spos, sb, 1);
                spos += sb;
                if (s > k_count)
                    return -EBADMSG;
                const uint32_t idx = s * c_count + col;
                const uint32_t nb = p->vbits[idx];
                const uint64_t f = ibp_peek(pbase, ppos, nb, w);
                ppos += nb;
                x = p->dvalue[idx] | IBP_PDEP(p, idx, f);
            } else {
                x = ibp_peek(pbase, ppos, wbits, w);
                ppos += wbits;
            }
            if (p->any_xform)
                x = ibp_unxform(p, x, col, j, dst, w);
            const size_t at = (size_t)j * w;
            if (at + w <= limit)
                ibp_store_word(dst + at, x, w);
            else
                memcpy(dst + at, &x, limit - at);
            if (++col == c_count)
                col = 0;
        }
        pr.pos = ppos;
        sr.pos = spos;
    }
    if (limit > (uint64_t)nwords * w)
        memcpy(dst + (size_t)nwords * w, blk + h.tail_off, limit - (size_t)nwords * w);
    return 0;
}
#endif
