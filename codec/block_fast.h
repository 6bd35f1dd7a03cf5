/* SPDX-License-Identifier: MIT
 * ibpshim: block encoder and decoder for levels with hardware pext/pdep, per word size. */

/* No include guard: block_bmi2.c includes this once per word size after block_impl.h, with
 *   IBP_W             the word size, a constant
 *   IBP_KW(name)      the name of an instantiated function (suffix per level and word size)
 *   IBP_KATTR         function attributes of the level
 * and IBP_KW(ibp_row_decode_checked) of the same word size already defined (block_body.h).
 *
 * Against block_body.h's decoder, which stays the simple oracle, the decoder here takes the selectors of
 * up to IBP_FAST_GROUP words from one load, looks each word up in the interleaved table dtab,
 * feeds pdep the unmasked field (pdep ignores bits beyond the mask's popcount), checks selectors
 * once per row, and instantiates its word loop apart for plans without transforms.  The encoder
 * scans each row once instead of twice (see ibp_fast_encode_row).  Both must give the bytes
 * block_body.h gives: tests/codec compares every level with the reference. */

#ifndef IBP_FAST_GROUP
/* Selectors per load: at most 32 bits of them (16 x 2), well inside the 57 a 64-bit load at a
 * byte boundary always gives. */
#define IBP_FAST_GROUP 16u
#endif

/* The next field of the payload at bit ppos: at least 57 valid bits, or 64 for 8-byte words,
 * where a field may start at bit 7 of a byte and be 64 bits long.  Bits past the field are not
 * cleared: pdep drops them and raw words are cut by the store. */
IBP_KATTR static inline uint64_t IBP_KW(ibp_fast_field)(const uint8_t *pbase, uint64_t ppos)
{
    const uint8_t *const at = pbase + (ppos >> 3);
    const uint32_t sh = (uint32_t)(ppos & 7u);
    uint64_t v = ibp_load64(at) >> sh;
    if (IBP_W == 8u)
        v |= ((uint64_t)at[8] << 1) << (63u - sh);
    return v;
}

/* Undoes word j's transform (column byte xf); out points at word j in dst, where the words
 * before it are already decoded. */
IBP_KATTR static inline uint64_t IBP_KW(ibp_fast_unxform)(uint64_t x, uint32_t xf, uint32_t j,
                                                          uint32_t c_count, const uint8_t *out)
{
    const uint32_t w = IBP_W;
    if (xf & IBP_XF_ZIGZAG)
        x = ibp_fmt_unzigzag(x & ibp_fmt_word_mask(w), w);
    if (xf & IBP_XF_PRED_MASK) {
        const uint64_t prev = j >= c_count ? ibp_load_word(out - (size_t)c_count * w, w) : 0;
        x = (xf & IBP_XF_PRED_MASK) == IBP_XF_PRED_DELTA ? x + prev : x ^ prev;
    }
    return x;
}

/* One packed row of n words, first word j in column col, whole row below limit and both streams
 * long enough for unchecked loads.  Returns nonzero when a selector exceeds K. */
IBP_KATTR static inline __attribute__((always_inline)) uint64_t
IBP_KW(ibp_fast_row)(const IbpCodecPlan *p, const uint8_t *pbase, uint64_t *ppos_io, const uint8_t *sbase,
                     uint64_t *spos_io, uint32_t j, uint32_t n, uint32_t col, uint8_t *dst, const int xf_on,
                     const int c1)
{
    const uint32_t w = IBP_W;
    /* c1: one column, so col stays 0 and the table index is the selector. */
    const uint32_t c_count = c1 ? 1u : p->columns;
    const uint32_t sb = p->sel_bits;
    const uint64_t smask = ((uint64_t)1 << sb) - 1u;
    /* Only K = 2 has an invalid selector value (3, both bits set). */
    const uint64_t bad_bits = p->nsets == 2u ? 0x5555555555555555u : 0u;
    const IbpDecEntry *const tab = p->dtab;
    uint64_t ppos = *ppos_io;
    uint64_t spos = *spos_io;
    uint64_t bad = 0;
    uint8_t *out = dst + (size_t)j * w;

    if (c1)
        col = 0;
    for (uint32_t i = 0; i < n;) {
        const uint32_t g = n - i < IBP_FAST_GROUP ? n - i : IBP_FAST_GROUP;
        uint64_t sg = ibp_load64(sbase + (spos >> 3)) >> (spos & 7u);
        spos += (uint64_t)g * sb;
        sg &= ((uint64_t)1 << (g * sb)) - 1u;
        bad |= sg & (sg >> 1) & bad_bits;
        for (uint32_t k = 0; k < g; k++, i++) {
            const uint64_t f = IBP_KW(ibp_fast_field)(pbase, ppos);
            const IbpDecEntry *const e = tab + ((size_t)col << sb) + (sg & smask);
            sg >>= sb;
            ppos += e->vbits;
            uint64_t x = e->dvalue | _pdep_u64(f, e->vmask);
            if (xf_on)
                x = IBP_KW(ibp_fast_unxform)(x, e->xform, j + i, c_count, out);
            ibp_store_word(out, x, w);
            out += w;
            if (++col == c_count)
                col = 0;
        }
    }
    *ppos_io = ppos;
    *spos_io = spos;
    return bad;
}

/* One raw row: words whole, under the same conditions as ibp_fast_row. */
IBP_KATTR static inline void IBP_KW(ibp_fast_raw_row)(const IbpCodecPlan *p, const uint8_t *pbase,
                                                      uint64_t *ppos_io, uint32_t j, uint32_t n, uint32_t col,
                                                      uint8_t *dst)
{
    const uint32_t w = IBP_W;
    const uint32_t c_count = p->columns;
    uint64_t ppos = *ppos_io;
    uint8_t *out = dst + (size_t)j * w;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t x = IBP_KW(ibp_fast_field)(pbase, ppos);
        ppos += w * 8u;
        if (p->any_xform)
            x = IBP_KW(ibp_fast_unxform)(x, p->xform[col], j + i, c_count, out);
        ibp_store_word(out, x, w);
        out += w;
        if (++col == c_count)
            col = 0;
    }
    *ppos_io = ppos;
}

IBP_KATTR static int IBP_KW(ibp_block_decode_fast)(const IbpCodecPlan *p, const uint8_t *blk, size_t blk_len,
                                                   uint32_t orig_len, uint8_t *dst, uint32_t limit)
{
    const uint32_t w = IBP_W;
    const uint32_t r_len = p->row_words;
    const uint32_t c_count = p->columns;
    const uint32_t sb = p->sel_bits;
    IbpBlockHeader h;

    int rc = ibp_block_open(p, blk, blk_len, orig_len, limit, &h);
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
    IbpIndexWalk ix;
    ibp_index_walk_init(&ix, h.flags & IBP_BLOCK_INDEXED ? blk + IBP_BLOCK_HEADER_SIZE : NULL, NULL, nwords);
    const uint32_t need_words = (uint32_t)(((uint64_t)limit + w - 1u) / w);
    const uint32_t need = need_words < nwords ? need_words : nwords;
    /* Rows whose words all lie below limit are stored whole; the row holding limit goes through
     * the checked path, which cuts its last word. */
    const uint32_t whole = limit / w;
    uint32_t col = h.col_phase;
    uint32_t j = 0;
    for (uint32_t r = 0; j < need; r++) {
        const uint32_t row_end = j + r_len < need ? j + r_len : need;
        const uint32_t n = row_end - j;
        const int packed = (rowflags[r / 8u] >> (r % 8u)) & 1;
        if (row_end > ix.next && (rc = ibp_index_check(&ix, p, j, row_end, col, packed, pr.pos, &sr)) != 0)
            return rc;
        /* 128 bits of slack: a load of 9 bytes at the last field, and a selector load of 8. */
        const int fast = row_end <= whole && pr.end - pr.pos >= (uint64_t)n * w * 8u + 128u &&
                         sr.end - sr.pos >= (uint64_t)n * sb + 128u;
        if (fast) {
            uint64_t bad = 0;
            if (!packed)
                IBP_KW(ibp_fast_raw_row)(p, pr.base, &pr.pos, j, n, col, dst);
            else if (p->any_xform)
                bad = IBP_KW(ibp_fast_row)(p, pr.base, &pr.pos, sr.base, &sr.pos, j, n, col, dst, 1, 0);
            else if (c_count == 1u)
                bad = IBP_KW(ibp_fast_row)(p, pr.base, &pr.pos, sr.base, &sr.pos, j, n, col, dst, 0, 1);
            else
                bad = IBP_KW(ibp_fast_row)(p, pr.base, &pr.pos, sr.base, &sr.pos, j, n, col, dst, 0, 0);
            if (bad)
                return -EBADMSG;
        } else {
            rc = IBP_KW(ibp_row_decode_checked)(p, &pr, &sr, packed, j, row_end, col, dst, limit);
            if (rc)
                return rc;
        }
        j = row_end;
        col = (uint32_t)((col + (uint64_t)n) % c_count);
    }
    if (limit > (uint64_t)nwords * w)
        memcpy(dst + (size_t)nwords * w, blk + h.tail_off, limit - (size_t)nwords * w);
    return ibp_carry_check(p, blk, &h, dst, limit);
}

/* A field of up to W*8 bits.  For 8-byte words a field and the pending bits can exceed 64: the
 * bits that spill over go out in a second store, and become the accumulator when the pointer
 * moves a whole 8 bytes. */
IBP_KATTR static inline void IBP_KW(ibp_fw_field)(IbpFastWriter *fw, uint64_t v, uint32_t nb)
{
    if (IBP_W == 8u) {
        const uint64_t lo = fw->acc | v << fw->n;
        const uint64_t hi = (v >> 1) >> (63u - fw->n);
        const uint32_t total = fw->n + nb;
        const uint32_t whole = total & ~7u;
        ibp_store64(fw->p, lo);
        ibp_store64(fw->p + 8, hi);
        fw->p += whole >> 3;
        fw->acc = whole >= 64u ? hi : lo >> (whole & 63u);
        fw->n = total & 7u;
    } else {
        ibp_fw_put(fw, v, nb);
    }
}

/* The first matching set of word x (0: none), as in block_body.h's row scan. */
IBP_KATTR static inline uint32_t IBP_KW(ibp_fast_select)(const IbpEncEntry *e, uint64_t x)
{
    uint32_t s = (x & e->mask[2]) == e->value[2] ? 3u : 0u;
    s = (x & e->mask[1]) == e->value[1] ? 2u : s;
    return (x & e->mask[0]) == e->value[0] ? 1u : s;
}

/* Encodes one row in a single pass: transforms, selects, packs into the payload and selector
 * streams as it goes, and rewinds both to write the row raw when packing did not make it smaller
 * (the payload of a packed row never exceeds the raw row, so the speculative writes stay in the
 * space the raw row would take).  Returns 1 when the row went packed. */
IBP_KATTR static inline __attribute__((always_inline)) int
IBP_KW(ibp_fast_encode_row)(const IbpCodecPlan *p, const uint8_t *src, uint32_t j0, uint32_t n, uint32_t col,
                            IbpFastWriter *pw, IbpBitWriter *sw, uint64_t *t, const int xf_on, const int c1)
{
    const uint32_t w = IBP_W;
    /* c1: one column, so col stays 0 and the column's sets live in registers. */
    const uint32_t c_count = c1 ? 1u : p->columns;
    const IbpEncEntry e1 = p->etab[0];
    const IbpEncEntry *const etab = p->etab;
    const uint8_t *const xform = p->xform;
    const uint32_t sb = p->sel_bits;
    const IbpDecEntry *const tab = p->dtab;
    const IbpBitWriter sw0 = *sw;
    /* The writer in locals, so the accumulator stays in a register across the stores. */
    IbpFastWriter lw = *pw;
    uint64_t pend = 0;
    uint32_t pend_n = 0;
    const uint8_t *in = src + (size_t)j0 * w;

    for (uint32_t i = 0; i < n;) {
        const uint32_t g = n - i < IBP_FAST_GROUP ? n - i : IBP_FAST_GROUP;
        uint64_t sg = 0;
        for (uint32_t k = 0; k < g; k++, i++) {
            uint64_t x = ibp_load_word(in, w);
            if (xf_on) {
                const uint32_t xf = xform[col];
                const uint64_t prev = (xf & IBP_XF_PRED_MASK) && j0 + i >= c_count
                                          ? ibp_load_word(in - (size_t)c_count * w, w)
                                          : 0;
                x = ibp_xform(xf, x, prev, w);
            }
            in += w;
            t[i] = x;
            const uint32_t s = IBP_KW(ibp_fast_select)(c1 ? &e1 : etab + col, x);
            sg |= (uint64_t)s << (k * sb);
            const IbpDecEntry *const e = tab + ((size_t)col << sb) + s;
            const uint64_t f = _pext_u64(x, e->vmask);
            if (IBP_W == 2u) {
                /* Fields of 2-byte words go out in pairs, one store per two words. */
                if (k & 1u)
                    ibp_fw_put(&lw, pend | f << pend_n, pend_n + e->vbits);
                pend = f;
                pend_n = e->vbits;
            } else {
                IBP_KW(ibp_fw_field)(&lw, f, e->vbits);
            }
            if (++col == c_count)
                col = 0;
        }
        if (IBP_W == 2u && (g & 1u))
            ibp_fw_put(&lw, pend, pend_n);
        ibp_bw_put(sw, sg, g * sb);
    }
    /* The row's packed size: the payload bits just written plus its selectors. */
    const uint64_t cost = (uint64_t)(lw.p - pw->p) * 8u + lw.n - pw->n + (uint64_t)n * sb;
    if (cost < (uint64_t)n * w * 8u) {
        *pw = lw;
        return 1;
    }
    *sw = sw0;
    for (uint32_t i = 0; i < n; i++)
        IBP_KW(ibp_fw_field)(pw, t[i], w * 8u);
    return 0;
}

IBP_KATTR static int IBP_KW(ibp_block_encode_fast)(const IbpCodecPlan *p, const uint8_t *src, uint32_t len,
                                                   uint32_t phase, uint8_t *dst, size_t cap, size_t *comp_len)
{
    const uint32_t w = IBP_W;
    const uint32_t r_len = p->row_words;
    const uint32_t c_count = p->columns;
    const uint32_t sb = p->sel_bits;
    const uint32_t nwords = len / w;
    const uint32_t nrows = (nwords + r_len - 1u) / r_len;
    const uint32_t rf_len = ibp_fmt_round16((nrows + 7u) / 8u);
    const uint32_t rf_off = ibp_block_meta_len(p, nwords);
    const uint32_t payload_off = rf_off + rf_len;
    const uint32_t sel_max = ibp_fmt_round16((uint32_t)(((uint64_t)nwords * sb + 7u) / 8u));
    uint64_t t[IBP_MAX_ROW_WORDS];
    IbpFastWriter pw;
    IbpBitWriter sw;

    if (cap < ibp_codec_bound_for(p, len) || phase >= c_count)
        return -EINVAL;
    /* Selectors go to the end of dst first, as in block_body.h's encoder. */
    uint8_t *const sel_scratch = dst + cap - sel_max;
    memset(dst + IBP_BLOCK_HEADER_SIZE, 0, payload_off - IBP_BLOCK_HEADER_SIZE);
    IbpIndexWalk ix;
    ibp_index_walk_init(&ix, NULL, dst + IBP_BLOCK_HEADER_SIZE, nwords);
    pw.p = dst + payload_off;
    pw.acc = 0;
    pw.n = 0;
    ibp_bw_init(&sw, sel_scratch);

    uint32_t col = phase;
    for (uint32_t r = 0; r < nrows; r++) {
        const uint32_t j0 = r * r_len;
        const uint32_t n = nwords - j0 < r_len ? nwords - j0 : r_len;
        if (j0 + n > ix.next)
            ibp_index_mark(&ix, j0 + n, (uint64_t)(pw.p - (dst + payload_off)) * 8u + pw.n);
        int packed;
        if (p->any_xform)
            packed = IBP_KW(ibp_fast_encode_row)(p, src, j0, n, col, &pw, &sw, t, 1, 0);
        else if (c_count == 1u)
            packed = IBP_KW(ibp_fast_encode_row)(p, src, j0, n, col, &pw, &sw, t, 0, 1);
        else
            packed = IBP_KW(ibp_fast_encode_row)(p, src, j0, n, col, &pw, &sw, t, 0, 0);
        if (packed)
            dst[rf_off + r / 8u] |= (uint8_t)(1u << (r % 8u));
        col = (uint32_t)((col + (uint64_t)n) % c_count);
    }

    const uint64_t pbits = (uint64_t)(pw.p - (dst + payload_off)) * 8u + pw.n;
    return ibp_block_finish(p, dst, src, len, phase, payload_off, pbits, ibp_bw_finish(&sw), sel_scratch,
                            comp_len);
}
