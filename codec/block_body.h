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
            const uint64_t prev = (xf & IBP_XF_PRED_MASK) && j >= c_count
                                      ? ibp_load_word(src + (size_t)(j - c_count) * w, w)
                                      : 0;
            x = ibp_xform(xf, x, prev, w);
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
    const uint64_t packed_len = ibp_block_meta_len(p, nwords) + ibp_fmt_round16((nrows + 7u) / 8u) +
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
    const uint32_t rf_off = ibp_block_meta_len(p, nwords);
    const uint32_t payload_off = rf_off + rf_len;
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
    memset(dst + IBP_BLOCK_HEADER_SIZE, 0, payload_off - IBP_BLOCK_HEADER_SIZE);
    IbpIndexWalk ix;
    ibp_index_walk_init(&ix, NULL, dst + IBP_BLOCK_HEADER_SIZE, nwords);
    ibp_bw_init(&pw, dst + payload_off);
    ibp_bw_init(&sw, sel_scratch);

    uint32_t col = phase;
    for (uint32_t r = 0; r < nrows; r++) {
        const uint32_t j0 = r * r_len;
        const uint32_t n = nwords - j0 < r_len ? nwords - j0 : r_len;
        if (j0 + n > ix.next)
            ibp_index_mark(&ix, j0 + n, (uint64_t)(pw.p - pw.start) * 8u + pw.n);
        const uint64_t packed = IBP_KW(ibp_row_scan)(p, src, j0, n, col, t, sel);
        if (packed < (uint64_t)n * wbits) {
            dst[rf_off + r / 8u] |= (uint8_t)(1u << (r % 8u));
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
    return ibp_block_finish(p, dst, src, len, phase, payload_off, pbits, ibp_bw_finish(&sw), sel_scratch,
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
/* The reference decoder works like block_avx2.h's without vector instructions: rows are decoded
 * into dst group by group (a group is the 8 bytes of G = 8 / W words, deposited with the plan's
 * shift network instead of pdep), then a pass per transformed column undoes the transforms. */

#define IBP_RG (8u / IBP_W) /* words per group */

#ifndef IBP_REF_TAIL_BYTES
/* Room for the stream ends of a row of up to 1024 8-byte words; rows near the ends of streams
 * that need more take the checked path. */
#define IBP_REF_TAIL_BYTES (8192u + 512u)
#endif

/* 64 bits of a stream from bit pos; 9 bytes are readable at pos / 8. */
IBP_KATTR static inline uint64_t IBP_KW(ibp_ref_field64)(const uint8_t *base, uint64_t pos)
{
    const uint8_t *const at = base + (pos >> 3);
    const uint32_t sh = (uint32_t)(pos & 7u);
    return (ibp_load64(at) >> sh) | (((uint64_t)at[8] << 1) << (63u - sh));
}

/* A group's field, nb bits at bit pos.  Fields of more than 57 bits may need a ninth byte; groups
 * of 2- and 4-byte words seldom take that many, so a branch skips it, while fields of 8-byte
 * words often do (a branch there would mispredict). */
IBP_KATTR static inline uint64_t IBP_KW(ibp_ref_group_field)(const uint8_t *base, uint64_t pos, uint32_t nb)
{
    if (IBP_W == 8u)
        return IBP_KW(ibp_ref_field64)(base, pos);
    const uint8_t *const at = base + (pos >> 3);
    const uint32_t sh = (uint32_t)(pos & 7u);
    uint64_t f = ibp_load64(at) >> sh;
    if (nb + sh > 64u)
        f |= (uint64_t)at[8] << (64u - sh);
    return f;
}

/* pdep of field f into the group entry r of rgtab: mask r[0], value r[1], network steps r[2..7]. */
IBP_KATTR static inline uint64_t IBP_KW(ibp_ref_deposit)(uint64_t f, const uint64_t *r)
{
    f ^= (f ^ (f << 32)) & r[2];
    f ^= (f ^ (f << 16)) & r[3];
    f ^= (f ^ (f << 8)) & r[4];
    f ^= (f ^ (f << 4)) & r[5];
    f ^= (f ^ (f << 2)) & r[6];
    f ^= (f ^ (f << 1)) & r[7];
    return (f & r[0]) | r[1];
}

/* Words [i, n) of a packed row one by one, word i in column col, into out (word 0 of the row);
 * streams readable as for the checked-free rows below.  Returns nonzero on a selector above K. */
IBP_KATTR static inline uint64_t IBP_KW(ibp_ref_words)(const IbpCodecPlan *p, const uint8_t *pbase,
                                                       uint64_t *ppos_io, const uint8_t *sbase,
                                                       uint64_t *spos_io, uint32_t i, uint32_t n,
                                                       uint32_t col, uint8_t *out)
{
    const uint32_t w = IBP_W;
    const uint32_t sb = p->sel_bits;
    uint64_t ppos = *ppos_io;
    uint64_t spos = *spos_io;
    for (; i < n; i++) {
        const uint32_t s = (uint32_t)ibp_peek(sbase, spos, sb, 1);
        spos += sb;
        if (s > p->nsets)
            return 1;
        const uint32_t idx = s * p->columns + col;
        const uint32_t nb = p->vbits[idx];
        const uint64_t f = ibp_peek(pbase, ppos, nb, w);
        ppos += nb;
        ibp_store_word(out + (size_t)i * w, p->dvalue[idx] | IBP_PDEP(p, idx, f), w);
        if (++col == p->columns)
            col = 0;
    }
    *ppos_io = ppos;
    *spos_io = spos;
    return 0;
}

/* One packed row of n words, the first in column col, into out, transformed words (the caller
 * undoes transforms); both streams hold enough bytes for unchecked loads (see the decoder).
 * Returns nonzero on a selector above K. */
IBP_KATTR static uint64_t IBP_KW(ibp_ref_row)(const IbpCodecPlan *p, const uint8_t *pbase, uint64_t *ppos_io,
                                              const uint8_t *sbase, uint64_t *spos_io, uint32_t n,
                                              uint32_t col, uint8_t *out)
{
    const uint32_t gsb = p->group_sel_bits;
    const uint64_t gsel = ((uint64_t)1 << gsb) - 1u;
    const uint64_t bad_bits = p->nsets == 2u ? 0x5555555555555555u : 0u;
    const uint32_t ngroups = p->rgtab ? n / IBP_RG : 0u;
    uint64_t ppos = *ppos_io;
    uint64_t spos = *spos_io;
    uint64_t bad = 0;

    for (uint32_t g = 0; g < ngroups;) {
        const uint32_t k = ngroups - g < IBP_GROUP_RUN ? ngroups - g : IBP_GROUP_RUN;
        uint64_t sg = ibp_load64(sbase + (spos >> 3)) >> (spos & 7u);
        spos += (uint64_t)k * gsb;
        sg &= ibp_low_mask(k * gsb);
        bad |= sg & (sg >> 1) & bad_bits;
        const uint32_t *const cols = p->gcols + (size_t)col * (IBP_GROUP_RUN + 1u);
#define IBP_REF_GROUP(q)                                                                                     \
    do {                                                                                                     \
        const size_t e_ = (cols[(q)] >> 1) | ((sg >> ((q)*gsb)) & gsel);                                     \
        const uint32_t nb_ = p->rgbits[e_];                                                                  \
        const uint64_t f_ = IBP_KW(ibp_ref_group_field)(pbase, ppos, nb_);                                   \
        ppos += nb_;                                                                                         \
        ibp_store64(out + (size_t)(q)*8u, IBP_KW(ibp_ref_deposit)(f_, p->rgtab + 8u * e_));                  \
    } while (0)
        if (k == IBP_GROUP_RUN) {
#pragma GCC unroll 8
            for (uint32_t q = 0; q < IBP_GROUP_RUN; q++)
                IBP_REF_GROUP(q);
        } else {
            for (uint32_t q = 0; q < k; q++)
                IBP_REF_GROUP(q);
        }
#undef IBP_REF_GROUP
        out += (size_t)k * 8u;
        col = cols[k] >> (gsb + 1u);
        g += k;
    }
    bad |= IBP_KW(ibp_ref_words)(p, pbase, &ppos, sbase, &spos, 0, n - ngroups * IBP_RG, col, out);
    *ppos_io = ppos;
    *spos_io = spos;
    return bad;
}

/* One raw row: words whole, 8 bytes at a time. */
IBP_KATTR static void IBP_KW(ibp_ref_raw_row)(const uint8_t *pbase, uint64_t *ppos_io, uint32_t n,
                                              uint8_t *out)
{
    const uint32_t w = IBP_W;
    uint64_t ppos = *ppos_io;
    const uint32_t chunks = n / IBP_RG;
    for (uint32_t i = 0; i < chunks; i++) {
        ibp_store64(out, IBP_KW(ibp_ref_field64)(pbase, ppos));
        ppos += 64u;
        out += 8;
    }
    for (uint32_t i = chunks * IBP_RG; i < n; i++) {
        ibp_store_word(out, ibp_peek(pbase, ppos, w * 8u, w), w);
        ppos += w * 8u;
        out += w;
    }
    *ppos_io = ppos;
}

/* One column's chain from word j (step C, up to end) under transform xf, a constant of each
 * instance. */
IBP_KATTR static inline __attribute__((always_inline)) void
IBP_KW(ibp_ref_unxform_column)(uint8_t *dst, uint32_t j, uint32_t end, uint32_t c_count, const uint32_t xf)
{
    const uint32_t w = IBP_W;
    const uint32_t pred = xf & IBP_XF_PRED_MASK;
    uint64_t prev = j >= c_count ? ibp_load_word(dst + (size_t)(j - c_count) * w, w) : 0;
    for (; j < end; j += c_count) {
        uint8_t *const at = dst + (size_t)j * w;
        uint64_t x = ibp_load_word(at, w);
        if (xf & IBP_XF_ZIGZAG)
            x = ibp_fmt_unzigzag(x, w);
        if (pred == IBP_XF_PRED_DELTA)
            x += prev;
        else if (pred == IBP_XF_PRED_XOR)
            x ^= prev;
        ibp_store_word(at, x, w);
        prev = x & ibp_fmt_word_mask(w);
    }
}

/* Undoes the transforms of words [j0, end) of a block in place (word j0 in column col; the words
 * before j0 are final), one column at a time: a column's words form a chain, x_j = unzigzag?(t_j)
 * (+ or ^) x_{j-C}, whose last value stays in a register, and columns without a transform are
 * not touched. */
IBP_KATTR static void IBP_KW(ibp_ref_unxform_row)(const IbpCodecPlan *p, uint8_t *dst, uint32_t j0,
                                                  uint32_t end, uint32_t col)
{
    const uint32_t c_count = p->columns;
    const uint32_t span = end - j0 < c_count ? end - j0 : c_count;
    for (uint32_t o = 0; o < span; o++, col = col + 1u == c_count ? 0u : col + 1u) {
        const uint32_t j = j0 + o;
        switch (p->xform[col]) {
        case 0:
            break;
#define IBP_REF_XF_CASE(xf_)                                                                                 \
    case (xf_):                                                                                              \
        IBP_KW(ibp_ref_unxform_column)(dst, j, end, c_count, (xf_));                                         \
        break
            IBP_REF_XF_CASE(IBP_XF_ZIGZAG);
            IBP_REF_XF_CASE(IBP_XF_PRED_DELTA);
            IBP_REF_XF_CASE(IBP_XF_PRED_DELTA | IBP_XF_ZIGZAG);
            IBP_REF_XF_CASE(IBP_XF_PRED_XOR);
            IBP_REF_XF_CASE(IBP_XF_PRED_XOR | IBP_XF_ZIGZAG);
#undef IBP_REF_XF_CASE
        default:
            break;
        }
    }
}

IBP_KATTR static int IBP_KW(ibp_block_decode)(const IbpCodecPlan *p, const uint8_t *blk, size_t blk_len,
                                              uint32_t orig_len, uint8_t *dst, uint32_t limit)
{
    const uint32_t w = IBP_W;
    const uint32_t r_len = p->row_words;
    const uint32_t c_count = p->columns;
    const uint32_t sb = p->sel_bits;
    IbpBlockHeader h;
    /* Copies of the streams' last bytes, zero-padded, for rows near their ends (below). */
    uint8_t tail[IBP_REF_TAIL_BYTES];

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
    const uint32_t whole = limit / w;
    uint32_t col = h.col_phase;
    uint32_t j = 0;
    for (uint32_t r = 0; j < need; r++) {
        const uint32_t row_end = j + r_len < need ? j + r_len : need;
        const uint32_t n = row_end - j;
        const int packed = (rowflags[r / 8u] >> (r % 8u)) & 1;
        if (row_end > ix.next && (rc = ibp_index_check(&ix, p, j, row_end, col, packed, pr.pos, &sr)) != 0)
            return rc;
        /* A row takes at most its words whole from the payload and n * sb selector bits; the
         * unchecked loads reach 72 bits past the last field and 64 past the last selector.  With
         * that much left in both streams the row decodes in place.  Near the streams' ends it
         * decodes from copies padded with zeros to that length, and fails when it went past the
         * real ends, as the checked reader would have. */
        const uint64_t p_room = (uint64_t)n * w * 8u + 128u;
        const uint64_t s_room = (uint64_t)n * sb + 128u;
        const int in_place = pr.end - pr.pos >= p_room && sr.end - sr.pos >= s_room;
        const size_t p_copy = (size_t)(p_room + 7u) / 8u + 1u;
        const size_t s_copy = (size_t)(s_room + 7u) / 8u + 1u;
        if (row_end <= whole && (in_place || p_copy + s_copy <= sizeof(tail))) {
            /* Positions count from p_at and s_at, the bytes the row starts in. */
            const size_t p_at = (size_t)(pr.pos >> 3);
            const size_t s_at = (size_t)(sr.pos >> 3);
            const uint8_t *pbase = pr.base + p_at;
            const uint8_t *sbase = sr.base + s_at;
            uint64_t ppos = pr.pos & 7u;
            uint64_t spos = sr.pos & 7u;
            if (!in_place) {
                const size_t p_have = (size_t)pr.bytes - p_at < p_copy ? (size_t)pr.bytes - p_at : p_copy;
                const size_t s_have = (size_t)sr.bytes - s_at < s_copy ? (size_t)sr.bytes - s_at : s_copy;
                memcpy(tail, pbase, p_have);
                memset(tail + p_have, 0, p_copy - p_have);
                memcpy(tail + p_copy, sbase, s_have);
                memset(tail + p_copy + s_have, 0, s_copy - s_have);
                pbase = tail;
                sbase = tail + p_copy;
            }
            if (!packed)
                IBP_KW(ibp_ref_raw_row)(pbase, &ppos, n, dst + (size_t)j * w);
            else if (IBP_KW(ibp_ref_row)(p, pbase, &ppos, sbase, &spos, n, col, dst + (size_t)j * w))
                return -EBADMSG;
            if (ppos > pr.end - (uint64_t)p_at * 8u || spos > sr.end - (uint64_t)s_at * 8u)
                return -EBADMSG;
            pr.pos = (uint64_t)p_at * 8u + ppos;
            sr.pos = (uint64_t)s_at * 8u + spos;
            if (p->any_xform)
                IBP_KW(ibp_ref_unxform_row)(p, dst, j, row_end, col);
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

#undef IBP_RG
#endif
