/* SPDX-License-Identifier: MIT
 * ibpshim: block encoder and decoder with AVX2 lanes and BMI2 groups, per word size. */

/* No include guard: block_avx2.c includes this once per word size after block_impl.h and
 * block_fast.h, with IBP_W, IBP_KW(name) and IBP_KATTR defined as for block_fast.h.
 *
 * Against block_fast.h, whose kernels stay the fallback for plans without a group table (see
 * IBP_GROUP_TABLE_MAX):
 * - Groups: the G = 8 / W words of a group go through one pdep (decode) or pext (encode) with the
 *   group's combined mask (gtab), looked up once by the starting column and the G selectors as
 *   they lie in the stream.  Consecutive fields are adjacent in the payload, so that is exact.
 * - Transforms in separate vector passes.  The encoder transforms a row into a buffer first (each
 *   word is predicted from the original bytes, so lanes are independent).  The decoder decodes a
 *   row's transformed words into dst, then undoes the transforms over the row: mostly period-major
 *   (vectors aligned to the column period, lane constants in registers, the period before in a
 *   register), the rest with vectors predicted from words already final.  Per-lane constants come
 *   from the plan's lane tables, so no lane needs a gather.
 * The bytes written must be block_body.h's: tests/codec compares every level with the reference. */

#define IBP_YL (32u / IBP_W) /* words per 256-bit vector */
#define IBP_XL (16u / IBP_W) /* words per 128-bit vector */
#define IBP_G (8u / IBP_W)   /* words per group */

#ifndef IBP_AX_TAIL_BYTES
/* Room for the stream ends of a row of up to 1024 8-byte words; rows near the ends of streams
 * that need more take the checked path. */
#define IBP_AX_TAIL_BYTES (8192u + 512u)
#endif

IBP_KATTR static inline __m256i IBP_KW(ibp_y_add)(__m256i a, __m256i b)
{
#if IBP_W == 2u
    return _mm256_add_epi16(a, b);
#elif IBP_W == 4u
    return _mm256_add_epi32(a, b);
#else
    return _mm256_add_epi64(a, b);
#endif
}

IBP_KATTR static inline __m256i IBP_KW(ibp_y_sub)(__m256i a, __m256i b)
{
#if IBP_W == 2u
    return _mm256_sub_epi16(a, b);
#elif IBP_W == 4u
    return _mm256_sub_epi32(a, b);
#else
    return _mm256_sub_epi64(a, b);
#endif
}

IBP_KATTR static inline __m256i IBP_KW(ibp_y_eq)(__m256i a, __m256i b)
{
#if IBP_W == 2u
    return _mm256_cmpeq_epi16(a, b);
#elif IBP_W == 4u
    return _mm256_cmpeq_epi32(a, b);
#else
    return _mm256_cmpeq_epi64(a, b);
#endif
}

/* x in every lane. */
IBP_KATTR static inline __m256i IBP_KW(ibp_y_set1)(uint32_t x)
{
#if IBP_W == 2u
    return _mm256_set1_epi16((short)x);
#elif IBP_W == 4u
    return _mm256_set1_epi32((int)x);
#else
    return _mm256_set1_epi64x((long long)x);
#endif
}

/* The sum of the lanes (each below 2^15). */
IBP_KATTR static inline uint64_t IBP_KW(ibp_y_hsum)(__m256i a)
{
#if IBP_W == 2u
    a = _mm256_madd_epi16(a, _mm256_set1_epi16(1));
#endif
#if IBP_W <= 4u
    a = _mm256_add_epi64(_mm256_and_si256(a, _mm256_set1_epi64x(0xffffffff)), _mm256_srli_epi64(a, 32));
#endif
    const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    return (uint64_t)_mm_cvtsi128_si64(h) + (uint64_t)_mm_extract_epi64(h, 1);
}

/* (d << 1) ^ (d >>arith (bits - 1)) in every lane. */
IBP_KATTR static inline __m256i IBP_KW(ibp_y_zigzag)(__m256i d)
{
#if IBP_W == 2u
    return _mm256_xor_si256(_mm256_slli_epi16(d, 1), _mm256_srai_epi16(d, 15));
#elif IBP_W == 4u
    return _mm256_xor_si256(_mm256_slli_epi32(d, 1), _mm256_srai_epi32(d, 31));
#else
    return _mm256_xor_si256(_mm256_slli_epi64(d, 1), _mm256_cmpgt_epi64(_mm256_setzero_si256(), d));
#endif
}

/* (t >> 1) ^ -(t & 1) in every lane. */
IBP_KATTR static inline __m256i IBP_KW(ibp_y_unzigzag)(__m256i t)
{
#if IBP_W == 2u
    return _mm256_xor_si256(_mm256_srli_epi16(t, 1), _mm256_srai_epi16(_mm256_slli_epi16(t, 15), 15));
#elif IBP_W == 4u
    return _mm256_xor_si256(_mm256_srli_epi32(t, 1), _mm256_srai_epi32(_mm256_slli_epi32(t, 31), 31));
#else
    return _mm256_xor_si256(
        _mm256_srli_epi64(t, 1),
        _mm256_sub_epi64(_mm256_setzero_si256(), _mm256_and_si256(t, _mm256_set1_epi64x(1))));
#endif
}

IBP_KATTR static inline __m128i IBP_KW(ibp_x_add)(__m128i a, __m128i b)
{
#if IBP_W == 2u
    return _mm_add_epi16(a, b);
#elif IBP_W == 4u
    return _mm_add_epi32(a, b);
#else
    return _mm_add_epi64(a, b);
#endif
}

/* (t >> 1) ^ -(t & 1) in every lane. */
IBP_KATTR static inline __m128i IBP_KW(ibp_x_unzigzag)(__m128i t)
{
#if IBP_W == 2u
    return _mm_xor_si128(_mm_srli_epi16(t, 1), _mm_srai_epi16(_mm_slli_epi16(t, 15), 15));
#elif IBP_W == 4u
    return _mm_xor_si128(_mm_srli_epi32(t, 1), _mm_srai_epi32(_mm_slli_epi32(t, 31), 31));
#else
    return _mm_xor_si128(_mm_srli_epi64(t, 1),
                         _mm_sub_epi64(_mm_setzero_si128(), _mm_and_si128(t, _mm_set1_epi64x(1))));
#endif
}

/* The direct loop of ibp_ax_unxform (C >= XL) from word j while a whole vector fits before end;
 * returns where it stopped.  back = pred_dist / XL vectors: the predecessors lie in the vectors
 * stored back and back - 1 iterations before.  With back <= 2 (regs) those are still in registers,
 * so the chain from one vector to the next has no store and reload in it (a forwarded load adds
 * its latency to every step); further back the loads are exact copies of stores long done. */
IBP_KATTR static inline __attribute__((always_inline)) uint32_t
IBP_KW(ibp_ax_unxform_direct)(const IbpCodecPlan *p, uint8_t *dst, uint32_t j, uint32_t end, uint32_t col,
                              const uint32_t regs)
{
    const uint32_t w = IBP_W;
    const uint32_t c_count = p->columns;
    const uint32_t step = IBP_XL % c_count;
    const size_t back = (size_t)p->pred_dist * w;
    const __m128i lo_ctrl = _mm_loadu_si128((const __m128i *)p->pred_lo);
    const __m128i hi_ctrl = _mm_loadu_si128((const __m128i *)p->pred_hi);
    /* r1, r2: the vectors one and two iterations back. */
    __m128i r1 = _mm_setzero_si128();
    __m128i r2 = _mm_setzero_si128();
    if (regs && j + IBP_XL <= end) {
        r1 = _mm_loadu_si128((const __m128i *)(dst + (size_t)(j - IBP_XL) * w));
        if (regs == 2u)
            r2 = _mm_loadu_si128((const __m128i *)(dst + (size_t)(j - 2u * IBP_XL) * w));
    }
    for (; j + IBP_XL <= end; j += IBP_XL) {
        uint8_t *const out = dst + (size_t)j * w;
        const size_t at = (size_t)col * w;
        const __m128i t = _mm_loadu_si128((const __m128i *)out);
        const __m128i u = _mm_blendv_epi8(t, IBP_KW(ibp_x_unzigzag)(t),
                                          _mm_loadu_si128((const __m128i *)(p->lane_zz + at)));
        __m128i older;
        __m128i newer;
        if (regs == 1u) {
            older = r1;
            newer = r1; /* pred_hi takes nothing: the window is r1 itself */
        } else if (regs == 2u) {
            older = r2;
            newer = r1;
        } else {
            older = _mm_loadu_si128((const __m128i *)(out - back));
            newer = _mm_loadu_si128((const __m128i *)(out - back + 16));
        }
        const __m128i prev = _mm_or_si128(_mm_shuffle_epi8(older, lo_ctrl), _mm_shuffle_epi8(newer, hi_ctrl));
        const __m128i dm = _mm_loadu_si128((const __m128i *)(p->lane_delta + at));
        const __m128i xm = _mm_loadu_si128((const __m128i *)(p->lane_xor + at));
        const __m128i x =
            _mm_xor_si128(IBP_KW(ibp_x_add)(u, _mm_and_si128(prev, dm)), _mm_and_si128(prev, xm));
        _mm_storeu_si128((__m128i *)out, x);
        r2 = r1;
        r1 = x;
        col += step;
        col = col >= c_count ? col - c_count : col;
    }
    return j;
}

/* x_j = unzigzag?(t_j) (+ or ^) x_{j-C}, in place, for words [j, end) of a block, the first in
 * column col; the words before j are final.
 *
 * A vector's predecessors x[j - C, j - C + XL) straddle two vectors stored before, and a load
 * across two stores still pending waits for both to reach the cache (store forwarding fails).
 * So they come from the two vectors as they were stored, at j - D and j - D + XL with D = XL *
 * ceil(C / XL), shifted into place with byte shuffles (pred_lo/pred_hi, fixed per plan). */
IBP_KATTR static void IBP_KW(ibp_ax_unxform)(const IbpCodecPlan *p, uint8_t *dst, uint32_t j, uint32_t end,
                                             uint32_t col)
{
    const uint32_t w = IBP_W;
    const uint32_t c_count = p->columns;
    const uint32_t step = IBP_XL % c_count;
    /* A vector may start where every predecessor lies in the block: j >= D, or j >= XL for the
     * scan, whose carry comes from the vector before. */
    const uint32_t first = c_count >= IBP_XL ? p->pred_dist : IBP_XL;
    for (; j < end && j < first; j++) {
        uint8_t *const out = dst + (size_t)j * w;
        const uint64_t x = IBP_KW(ibp_fast_unxform)(ibp_load_word(out, w), p->xform[col], j, c_count, out);
        ibp_store_word(out, x, w);
        if (++col == c_count)
            col = 0;
    }
    if (c_count >= IBP_XL) {
        const uint32_t back = p->pred_dist / IBP_XL;
        const uint32_t from = j;
        if (back == 1u)
            j = IBP_KW(ibp_ax_unxform_direct)(p, dst, j, end, col, 1u);
        else if (back == 2u)
            j = IBP_KW(ibp_ax_unxform_direct)(p, dst, j, end, col, 2u);
        else
            j = IBP_KW(ibp_ax_unxform_direct)(p, dst, j, end, col, 0u);
        col = (uint32_t)((col + (uint64_t)(j - from)) % c_count);
    } else if (j + IBP_XL <= end) {
        /* C < XL: lanes of one column form chains within the vector.  Hillis-Steele over shifts
         * of C, 2C, 4C lanes (the same column, so the same operation), then the chain's carry
         * from the last C lanes of the vector before. */
        __m128i prev = _mm_loadu_si128((const __m128i *)(dst + (size_t)(j - IBP_XL) * w));
        const __m128i carry = _mm_loadu_si128((const __m128i *)p->scan_ctrl[3]);
        for (; j + IBP_XL <= end; j += IBP_XL) {
            uint8_t *const out = dst + (size_t)j * w;
            const size_t at = (size_t)col * w;
            const __m128i t = _mm_loadu_si128((const __m128i *)out);
            __m128i v = _mm_blendv_epi8(t, IBP_KW(ibp_x_unzigzag)(t),
                                        _mm_loadu_si128((const __m128i *)(p->lane_zz + at)));
            const __m128i dm = _mm_loadu_si128((const __m128i *)(p->lane_delta + at));
            const __m128i xm = _mm_loadu_si128((const __m128i *)(p->lane_xor + at));
            for (uint32_t s = 0; s < p->scan_steps; s++) {
                const __m128i sh = _mm_shuffle_epi8(v, _mm_loadu_si128((const __m128i *)p->scan_ctrl[s]));
                v = _mm_xor_si128(IBP_KW(ibp_x_add)(v, _mm_and_si128(sh, dm)), _mm_and_si128(sh, xm));
            }
            const __m128i cv = _mm_shuffle_epi8(prev, carry);
            prev = _mm_xor_si128(IBP_KW(ibp_x_add)(v, _mm_and_si128(cv, dm)), _mm_and_si128(cv, xm));
            _mm_storeu_si128((__m128i *)out, prev);
            col += step;
            col = col >= c_count ? col - c_count : col;
        }
    }
    for (; j < end; j++) {
        uint8_t *const out = dst + (size_t)j * w;
        const uint64_t x = IBP_KW(ibp_fast_unxform)(ibp_load_word(out, w), p->xform[col], j, c_count, out);
        ibp_store_word(out, x, w);
        if (++col == c_count)
            col = 0;
    }
}

/* v (+ or ^) s per lane, the operation of the lane's column (dm: delta lanes, xm: xor lanes);
 * kinds (IbpCodecPlan.xf_kinds) is a constant of the instance, so a plan with one kind of
 * predictor skips the other. */
IBP_KATTR static inline __attribute__((always_inline)) __m256i
IBP_KW(ibp_y_pred)(__m256i v, __m256i s, __m256i dm, __m256i xm, const uint32_t kinds)
{
    if (!(kinds & 4u))
        return IBP_KW(ibp_y_add)(v, _mm256_and_si256(s, dm));
    if (!(kinds & 2u))
        return _mm256_xor_si256(v, _mm256_and_si256(s, xm));
    return _mm256_xor_si256(IBP_KW(ibp_y_add)(v, _mm256_and_si256(s, dm)), _mm256_and_si256(s, xm));
}

IBP_KATTR static inline __attribute__((always_inline)) __m128i
IBP_KW(ibp_x_pred)(__m128i v, __m128i s, __m128i dm, __m128i xm, const uint32_t kinds)
{
    if (!(kinds & 4u))
        return IBP_KW(ibp_x_add)(v, _mm_and_si128(s, dm));
    if (!(kinds & 2u))
        return _mm_xor_si128(v, _mm_and_si128(s, xm));
    return _mm_xor_si128(IBP_KW(ibp_x_add)(v, _mm_and_si128(s, dm)), _mm_and_si128(s, xm));
}

/* The period-major undo of ibp_ax_unxform_row for 256-bit vectors, from word j (column 0, with a
 * whole period before it in the block) while whole vectors fit before end; returns where it
 * stopped.  A vector's last lanes run into the next period: their results are wrong (their
 * predecessors are not in the vector yet) but the next period's store replaces them, and each
 * iteration loads the next period before it stores, so it reads the transformed words.  At the
 * end the last loaded vector goes back, restoring what the last store covered beyond j. */
IBP_KATTR static inline __attribute__((always_inline)) uint32_t
IBP_KW(ibp_ax_periods_y)(const IbpCodecPlan *p, uint8_t *dst, uint32_t j, uint32_t end, const uint32_t kinds)
{
    const uint32_t w = IBP_W;
    const uint32_t per = p->period;
    const size_t pb = (size_t)per * w;
#define IBP_LOADY(ptr) _mm256_loadu_si256((const __m256i *)(ptr))
#define IBP_UNZY(t, zm) ((kinds & 1u) ? _mm256_blendv_epi8((t), IBP_KW(ibp_y_unzigzag)(t), (zm)) : (t))
    const __m256i zm0 = IBP_LOADY(p->lane_zz);
    const __m256i dm0 = IBP_LOADY(p->lane_delta);
    const __m256i xm0 = IBP_LOADY(p->lane_xor);
    uint8_t *at = dst + (size_t)j * w;
    if (p->period_vecs == 2u) {
        const __m256i zm1 = IBP_LOADY(p->lane_zz + 32);
        const __m256i dm1 = IBP_LOADY(p->lane_delta + 32);
        const __m256i xm1 = IBP_LOADY(p->lane_xor + 32);
        __m256i prev0 = IBP_LOADY(at - pb);
        __m256i prev1 = IBP_LOADY(at - pb + 32);
        __m256i cur0 = IBP_LOADY(at);
        __m256i cur1 = IBP_LOADY(at + 32);
        for (; j + per + 2u * IBP_YL <= end; j += per, at += pb) {
            const __m256i next0 = IBP_LOADY(at + pb);
            const __m256i next1 = IBP_LOADY(at + pb + 32);
            prev0 = IBP_KW(ibp_y_pred)(IBP_UNZY(cur0, zm0), prev0, dm0, xm0, kinds);
            prev1 = IBP_KW(ibp_y_pred)(IBP_UNZY(cur1, zm1), prev1, dm1, xm1, kinds);
            _mm256_storeu_si256((__m256i *)at, prev0);
            _mm256_storeu_si256((__m256i *)(at + 32), prev1);
            cur0 = next0;
            cur1 = next1;
        }
        _mm256_storeu_si256((__m256i *)at, cur0);
        return j;
    }
    __m256i prev = IBP_LOADY(at - pb);
    __m256i cur = IBP_LOADY(at);
    if (p->period_steps == 0) {
        for (; j + per + IBP_YL <= end; j += per, at += pb) {
            const __m256i next = IBP_LOADY(at + pb);
            prev = IBP_KW(ibp_y_pred)(IBP_UNZY(cur, zm0), prev, dm0, xm0, kinds);
            _mm256_storeu_si256((__m256i *)at, prev);
            cur = next;
        }
    } else {
        /* k periods per vector: Hillis-Steele over shifts of C, 2C, 4C lanes (lanes the shift
         * leaves empty keep their value: keep is zero there), then the carry. */
        __m256i idx[3];
        __m256i dms[3];
        __m256i xms[3];
        for (uint32_t s = 0; s < p->period_steps; s++) {
            const __m256i keep = IBP_LOADY(p->period_keep[s]);
            idx[s] = IBP_LOADY(p->period_idx[s]);
            dms[s] = _mm256_and_si256(dm0, keep);
            xms[s] = _mm256_and_si256(xm0, keep);
        }
        const __m256i carry = IBP_LOADY(p->period_idx[3]);
        for (; j + per + IBP_YL <= end; j += per, at += pb) {
            const __m256i next = IBP_LOADY(at + pb);
            __m256i v = IBP_UNZY(cur, zm0);
            for (uint32_t s = 0; s < p->period_steps; s++)
                v = IBP_KW(ibp_y_pred)(v, _mm256_permutevar8x32_epi32(v, idx[s]), dms[s], xms[s], kinds);
            prev = IBP_KW(ibp_y_pred)(v, _mm256_permutevar8x32_epi32(prev, carry), dm0, xm0, kinds);
            _mm256_storeu_si256((__m256i *)at, prev);
            cur = next;
        }
    }
    _mm256_storeu_si256((__m256i *)at, cur);
#undef IBP_LOADY
#undef IBP_UNZY
    return j;
}

/* The same with 128-bit vectors and byte shuffles (2-byte words, C <= 8). */
IBP_KATTR static inline __attribute__((always_inline)) uint32_t
IBP_KW(ibp_ax_periods_x)(const IbpCodecPlan *p, uint8_t *dst, uint32_t j, uint32_t end, const uint32_t kinds)
{
    const uint32_t w = IBP_W;
    const uint32_t per = p->period;
    const size_t pb = (size_t)per * w;
#define IBP_LOADX(ptr) _mm_loadu_si128((const __m128i *)(ptr))
#define IBP_UNZX(t, zm) ((kinds & 1u) ? _mm_blendv_epi8((t), IBP_KW(ibp_x_unzigzag)(t), (zm)) : (t))
    const __m128i zm0 = IBP_LOADX(p->lane_zz);
    const __m128i dm0 = IBP_LOADX(p->lane_delta);
    const __m128i xm0 = IBP_LOADX(p->lane_xor);
    __m128i idx[3];
    __m128i dms[3];
    __m128i xms[3];
    for (uint32_t s = 0; s < p->period_steps; s++) {
        const __m128i keep = IBP_LOADX(p->period_keep[s]);
        idx[s] = IBP_LOADX(p->period_idx[s]);
        dms[s] = _mm_and_si128(dm0, keep);
        xms[s] = _mm_and_si128(xm0, keep);
    }
    const __m128i carry = IBP_LOADX(p->period_idx[3]);
    uint8_t *at = dst + (size_t)j * w;
    __m128i prev = IBP_LOADX(at - pb);
    __m128i cur = IBP_LOADX(at);
    for (; j + per + IBP_XL <= end; j += per, at += pb) {
        const __m128i next = IBP_LOADX(at + pb);
        __m128i v = IBP_UNZX(cur, zm0);
        for (uint32_t s = 0; s < p->period_steps; s++)
            v = IBP_KW(ibp_x_pred)(v, _mm_shuffle_epi8(v, idx[s]), dms[s], xms[s], kinds);
        prev = IBP_KW(ibp_x_pred)(v, p->period_steps ? _mm_shuffle_epi8(prev, carry) : prev, dm0, xm0, kinds);
        _mm_storeu_si128((__m128i *)at, prev);
        cur = next;
    }
    _mm_storeu_si128((__m128i *)at, cur);
#undef IBP_LOADX
#undef IBP_UNZX
    return j;
}

IBP_KATTR static inline __attribute__((always_inline)) uint32_t
IBP_KW(ibp_ax_periods_k)(const IbpCodecPlan *p, uint8_t *dst, uint32_t j, uint32_t end, const uint32_t kinds)
{
    if (p->period_wide)
        return IBP_KW(ibp_ax_periods_y)(p, dst, j, end, kinds);
    return IBP_KW(ibp_ax_periods_x)(p, dst, j, end, kinds);
}

IBP_KATTR static uint32_t IBP_KW(ibp_ax_periods)(const IbpCodecPlan *p, uint8_t *dst, uint32_t j,
                                                 uint32_t end)
{
    switch (p->xf_kinds) {
    case 1:
        return IBP_KW(ibp_ax_periods_k)(p, dst, j, end, 1u);
    case 2:
        return IBP_KW(ibp_ax_periods_k)(p, dst, j, end, 2u);
    case 3:
        return IBP_KW(ibp_ax_periods_k)(p, dst, j, end, 3u);
    case 4:
        return IBP_KW(ibp_ax_periods_k)(p, dst, j, end, 4u);
    case 5:
        return IBP_KW(ibp_ax_periods_k)(p, dst, j, end, 5u);
    case 6:
        return IBP_KW(ibp_ax_periods_k)(p, dst, j, end, 6u);
    default:
        return IBP_KW(ibp_ax_periods_k)(p, dst, j, end, 7u);
    }
}

/* Undoes the transforms of words [j, end) of a row in place (the first in column col): the bulk
 * period-major from the first word in column 0 with a whole period before it, the rest by
 * ibp_ax_unxform. */
IBP_KATTR static void IBP_KW(ibp_ax_unxform_row)(const IbpCodecPlan *p, uint8_t *dst, uint32_t j,
                                                 uint32_t end, uint32_t col)
{
    const uint32_t c_count = p->columns;
    const uint32_t lanes = p->period_wide ? IBP_YL : IBP_XL;
    uint32_t start = j + (col ? c_count - col : 0u);
    while (start < p->period)
        start += c_count;
    if (!p->period || (uint64_t)start + p->period + (uint64_t)p->period_vecs * lanes > end) {
        IBP_KW(ibp_ax_unxform)(p, dst, j, end, col);
        return;
    }
    IBP_KW(ibp_ax_unxform)(p, dst, j, start, col);
    const uint32_t stop = IBP_KW(ibp_ax_periods)(p, dst, start, end);
    IBP_KW(ibp_ax_unxform)(p, dst, stop, end, 0);
}

/* The next group's field, v bits at bit ppos of the payload.  A field of more than 57 bits may
 * need a ninth byte.  Fields of 8-byte words often do, and always take it (a branch would
 * mispredict).  Groups of 2- and 4-byte words take that many only when nearly all their words
 * match no set: where that is rare (nine == 0) a branch skips the ninth byte and counts in
 * *longs the groups that needed it; where it is not (images whose pixels are often stored whole:
 * the branch mispredicted so often that fashion_mnist decoded at 2.9 GB/s against 4.5 without
 * it) the ninth byte is always taken (nine == 1). */
IBP_KATTR static inline __attribute__((always_inline)) uint64_t
IBP_KW(ibp_ax_group_field)(const uint8_t *pbase, uint64_t ppos, uint32_t v, uint32_t *longs, const int nine)
{
    if (IBP_W == 8u || nine)
        return ibp_ax_field64(pbase, ppos);
    const uint8_t *const at = pbase + (ppos >> 3);
    const uint32_t sh = (uint32_t)(ppos & 7u);
    uint64_t f = ibp_load64(at) >> sh;
    if (__builtin_expect(v + sh > 64u, 0)) {
        f |= (uint64_t)at[8] << (64u - sh);
        ++*longs;
    }
    return f;
}

/* One packed row of n words through the group table, the first in column col, all below limit;
 * both streams hold enough bytes for unchecked loads.  Writes the transformed words to out (the
 * caller undoes transforms).  Returns nonzero when a selector exceeds K. */
IBP_KATTR static inline __attribute__((always_inline)) uint64_t
IBP_KW(ibp_ax_row_sb)(const IbpCodecPlan *p, const uint8_t *pbase, uint64_t *ppos_io, const uint8_t *sbase,
                      uint64_t *spos_io, uint32_t n, uint32_t col, uint8_t *out, uint32_t *longs,
                      const uint32_t sb, const int nine)
{
    const uint32_t w = IBP_W;
    const uint32_t c_count = p->columns;
    const uint32_t gsb = IBP_G * sb;
    const uint64_t gsel2 = (((uint64_t)1 << gsb) - 1u) << 1;
    const uint64_t bad_bits = p->nsets == 2u ? 0x5555555555555555u : 0u;
    const uint64_t *const gt = p->gtab;
    const uint32_t ngroups = n / IBP_G;
    uint64_t ppos = *ppos_io;
    uint64_t spos = *spos_io;
    uint64_t bad = 0;

    for (uint32_t g = 0; g < ngroups;) {
        const uint32_t k = ngroups - g < IBP_GROUP_RUN ? ngroups - g : IBP_GROUP_RUN;
        uint64_t sg = ibp_load64(sbase + (spos >> 3)) >> (spos & 7u);
        spos += (uint64_t)k * gsb;
        sg &= ibp_low_mask(k * gsb);
        bad |= sg & (sg >> 1) & bad_bits;
        /* Doubled, so that a group's selectors, shifted and masked, index gtab's pairs. */
        const uint64_t sg2 = sg << 1;
        const uint32_t *const cols = p->gcols + (size_t)col * (IBP_GROUP_RUN + 1u);
#define IBP_AX_GROUP(q)                                                                                      \
    do {                                                                                                     \
        const size_t e_ = cols[(q)] | ((sg2 >> ((q)*gsb)) & gsel2);                                          \
        const uint64_t m_ = gt[e_];                                                                          \
        const uint32_t v_ = (uint32_t)__builtin_popcountll(m_);                                              \
        const uint64_t f_ = IBP_KW(ibp_ax_group_field)(pbase, ppos, v_, longs, nine);                        \
        ppos += v_;                                                                                          \
        ibp_store64(out + (size_t)(q)*8u, _pdep_u64(f_, m_) | gt[e_ + 1u]);                                  \
    } while (0)
        if (k == IBP_GROUP_RUN) {
            /* Unrolled: table offsets and stores at constant displacements. */
#pragma GCC unroll 8
            for (uint32_t q = 0; q < IBP_GROUP_RUN; q++)
                IBP_AX_GROUP(q);
        } else {
            for (uint32_t q = 0; q < k; q++)
                IBP_AX_GROUP(q);
        }
#undef IBP_AX_GROUP
        out += (size_t)k * 8u;
        col = cols[k] >> (gsb + 1u);
        g += k;
    }
    /* The row's last n % G words, one by one. */
    for (uint32_t i = ngroups * IBP_G; i < n; i++) {
        const uint32_t s = (uint32_t)(ibp_load64(sbase + (spos >> 3)) >> (spos & 7u)) & ((1u << sb) - 1u);
        spos += sb;
        bad |= s > p->nsets;
        const IbpDecEntry *const e = p->dtab + ((size_t)col << sb) + s;
        const uint64_t f = IBP_KW(ibp_fast_field)(pbase, ppos);
        ppos += e->vbits;
        ibp_store_word(out, e->dvalue | _pdep_u64(f, e->vmask), w);
        out += w;
        if (++col == c_count)
            col = 0;
    }
    *ppos_io = ppos;
    *spos_io = spos;
    return bad;
}

/* ibp_ax_row_sb with the selector width and the ninth-byte choice constants: shifts and masks by
 * immediates, and few enough live values that the group loop keeps everything in registers. */
IBP_KATTR static __attribute__((noinline)) uint64_t
IBP_KW(ibp_ax_row)(const IbpCodecPlan *p, const uint8_t *pbase, uint64_t *ppos_io, const uint8_t *sbase,
                   uint64_t *spos_io, uint32_t n, uint32_t col, uint8_t *out, uint32_t *longs, uint32_t nine)
{
    if (p->sel_bits == 1u)
        return nine ? IBP_KW(ibp_ax_row_sb)(p, pbase, ppos_io, sbase, spos_io, n, col, out, longs, 1u, 1)
                    : IBP_KW(ibp_ax_row_sb)(p, pbase, ppos_io, sbase, spos_io, n, col, out, longs, 1u, 0);
    return nine ? IBP_KW(ibp_ax_row_sb)(p, pbase, ppos_io, sbase, spos_io, n, col, out, longs, 2u, 1)
                : IBP_KW(ibp_ax_row_sb)(p, pbase, ppos_io, sbase, spos_io, n, col, out, longs, 2u, 0);
}

/* One raw row: words whole, 8 bytes at a time, under the same conditions as ibp_ax_row. */
IBP_KATTR static inline void IBP_KW(ibp_ax_raw_row)(const uint8_t *pbase, uint64_t *ppos_io, uint32_t j,
                                                    uint32_t n, uint8_t *dst)
{
    const uint32_t w = IBP_W;
    uint64_t ppos = *ppos_io;
    uint8_t *out = dst + (size_t)j * w;
    const uint32_t chunks = n / IBP_G;
    for (uint32_t i = 0; i < chunks; i++) {
        ibp_store64(out, ibp_ax_field64(pbase, ppos));
        ppos += 64u;
        out += 8;
    }
    for (uint32_t i = chunks * IBP_G; i < n; i++) {
        ibp_store_word(out, IBP_KW(ibp_fast_field)(pbase, ppos), w);
        ppos += w * 8u;
        out += w;
    }
    *ppos_io = ppos;
}

IBP_KATTR static int IBP_KW(ibp_ax_block_decode)(const IbpCodecPlan *p, const uint8_t *blk, size_t blk_len,
                                                 uint32_t orig_len, uint8_t *dst, uint32_t limit)
{
    const uint32_t w = IBP_W;
    const uint32_t r_len = p->row_words;
    const uint32_t c_count = p->columns;
    const uint32_t sb = p->sel_bits;
    IbpBlockHeader h;
    /* Copies of the streams' last bytes, zero-padded, for rows near their ends (below). */
    uint8_t tail[IBP_AX_TAIL_BYTES] __attribute__((aligned(16)));

    if (!p->gtab)
        return IBP_KW(ibp_block_decode_fast)(p, blk, blk_len, orig_len, dst, limit);
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
    uint32_t longs = 0; /* the row's groups that needed a ninth byte (ibp_ax_group_field) */
    uint32_t nine = 0;  /* packed rows left that take the ninth byte always */
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
                IBP_KW(ibp_ax_raw_row)(pbase, &ppos, j, n, dst);
            else if (IBP_KW(ibp_ax_row)(p, pbase, &ppos, sbase, &spos, n, col, dst + (size_t)j * w, &longs,
                                        nine))
                return -EBADMSG;
            /* A block starts with the branch; a row where more than one group in 16 needed the
             * ninth byte makes the next 8 packed rows take it always, then a row with the branch
             * measures again. */
            nine = nine ? nine - 1 : (longs * 16u > n / IBP_G ? 8 : 0);
            longs = 0;
            if (ppos > pr.end - (uint64_t)p_at * 8u || spos > sr.end - (uint64_t)s_at * 8u)
                return -EBADMSG;
            pr.pos = (uint64_t)p_at * 8u + ppos;
            sr.pos = (uint64_t)s_at * 8u + spos;
            if (p->any_xform)
                IBP_KW(ibp_ax_unxform_row)(p, dst, j, row_end, col);
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

/* The transformed words [j0, j0 + n) of a block (column col at j0) into t. */
IBP_KATTR static void IBP_KW(ibp_ax_xform)(const IbpCodecPlan *p, const uint8_t *src, uint32_t j0, uint32_t n,
                                           uint32_t col, uint8_t *t)
{
    const uint32_t w = IBP_W;
    const uint32_t c_count = p->columns;
    const uint32_t step = IBP_YL % c_count;
    uint32_t i = 0;
    /* Words predicted from 0 (j < C) go one by one, so every vector lane has its predecessor. */
    for (; i < n && j0 + i < c_count; i++) {
        const uint32_t j = j0 + i;
        const uint32_t xf = p->xform[col];
        const uint64_t prev =
            (xf & IBP_XF_PRED_MASK) && j >= c_count ? ibp_load_word(src + (size_t)(j - c_count) * w, w) : 0;
        const uint64_t x = ibp_xform(xf, ibp_load_word(src + (size_t)j * w, w), prev, w);
        ibp_store_word(t + (size_t)i * w, x, w);
        if (++col == c_count)
            col = 0;
    }
    for (; i + IBP_YL <= n; i += IBP_YL) {
        const uint8_t *const in = src + (size_t)(j0 + i) * w;
        const size_t at = (size_t)col * w;
        const __m256i x = _mm256_loadu_si256((const __m256i *)in);
        const __m256i prev = _mm256_loadu_si256((const __m256i *)(in - (size_t)c_count * w));
        const __m256i dm = _mm256_loadu_si256((const __m256i *)(p->lane_delta + at));
        const __m256i xm = _mm256_loadu_si256((const __m256i *)(p->lane_xor + at));
        const __m256i d =
            _mm256_xor_si256(IBP_KW(ibp_y_sub)(x, _mm256_and_si256(prev, dm)), _mm256_and_si256(prev, xm));
        const __m256i zz = _mm256_loadu_si256((const __m256i *)(p->lane_zz + at));
        _mm256_storeu_si256((__m256i *)(t + (size_t)i * w),
                            _mm256_blendv_epi8(d, IBP_KW(ibp_y_zigzag)(d), zz));
        col += step;
        col = col >= c_count ? col - c_count : col;
    }
    for (; i < n; i++) {
        const uint32_t j = j0 + i;
        const uint32_t xf = p->xform[col];
        const uint64_t prev = xf & IBP_XF_PRED_MASK ? ibp_load_word(src + (size_t)(j - c_count) * w, w) : 0;
        const uint64_t x = ibp_xform(xf, ibp_load_word(src + (size_t)j * w, w), prev, w);
        ibp_store_word(t + (size_t)i * w, x, w);
        if (++col == c_count)
            col = 0;
    }
}

/* Selectors of the YL words of tv (first in column col), as they go into the selector stream:
 * word i's selector at bits [i * sb, (i + 1) * sb).  k_count is a constant in each instance. */
IBP_KATTR static inline __attribute__((always_inline)) uint32_t
IBP_KW(ibp_ax_select)(const IbpCodecPlan *p, __m256i tv, uint32_t col, const uint32_t k_count)
{
    const size_t at = (size_t)col * IBP_W;
#define IBP_AX_MATCH(k)                                                                                      \
    IBP_KW(ibp_y_eq)                                                                                         \
    (_mm256_and_si256(tv, _mm256_loadu_si256((const __m256i *)(p->lane_mask[(k)] + at))),                    \
     _mm256_loadu_si256((const __m256i *)(p->lane_value[(k)] + at)))
    const __m256i e1 = IBP_AX_MATCH(0);
    __m256i b0;
    __m256i b1;
    if (k_count == 1u) {
#if IBP_W == 2u
        return (uint32_t)_pext_u32((uint32_t)_mm256_movemask_epi8(e1), 0x55555555u);
#elif IBP_W == 4u
        return (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(e1));
#else
        return (uint32_t)_mm256_movemask_pd(_mm256_castsi256_pd(e1));
#endif
    }
    const __m256i e2 = IBP_AX_MATCH(1);
    if (k_count == 2u) {
        b0 = e1;
        b1 = _mm256_andnot_si256(e1, e2);
    } else {
        const __m256i e3 = IBP_AX_MATCH(2);
        b0 = _mm256_or_si256(e1, _mm256_andnot_si256(e2, e3));
        b1 = _mm256_andnot_si256(e1, _mm256_or_si256(e2, e3));
    }
#undef IBP_AX_MATCH
    /* Bit 0 of each selector from b0, bit 1 from b1: take the lane's low half from b0 and its high
     * half from b1, so the sign bits fall in stream order. */
#if IBP_W == 2u
    return (uint32_t)_mm256_movemask_epi8(_mm256_blendv_epi8(b0, b1, _mm256_set1_epi16((short)0xff00)));
#elif IBP_W == 4u
    return (uint32_t)_pext_u32((uint32_t)_mm256_movemask_epi8(_mm256_blend_epi16(b0, b1, 0xaa)), 0x55555555u);
#else
    return (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_blend_epi32(b0, b1, 0xaa)));
#endif
}

/* The first matching set of word x in column col, as block_body.h's row scan picks it. */
IBP_KATTR static inline uint32_t IBP_KW(ibp_ax_select1)(const IbpCodecPlan *p, uint64_t x, uint32_t col)
{
    return IBP_KW(ibp_fast_select)(p->etab + col, x);
}

/* Packs the n transformed words at t (first in column col) into the payload and selector streams
 * when that makes the row smaller, else writes them whole.  Returns 1 when packed. */
IBP_KATTR static inline __attribute__((always_inline)) int
IBP_KW(ibp_ax_encode_row)(const IbpCodecPlan *p, const uint8_t *t, uint32_t n, uint32_t col,
                          IbpFastWriter *pw, IbpBitWriter *sw, const uint32_t k_count)
{
    const uint32_t w = IBP_W;
    const uint32_t c_count = p->columns;
    const uint32_t sb = p->sel_bits;
    const uint32_t gsb = p->group_sel_bits;
    const uint32_t gsel2 = ((1u << gsb) - 1u) << 1;
    const uint64_t *const gt = p->gtab;
    const IbpBitWriter sw0 = *sw;
    IbpFastWriter lw = *pw;
    uint64_t bits = 0;
    uint32_t i = 0;

    /* A vector of YL words is 4 groups. */
    for (; i + IBP_YL <= n; i += IBP_YL) {
        const uint8_t *const in = t + (size_t)i * w;
        const uint32_t sel = IBP_KW(ibp_ax_select)(p, _mm256_loadu_si256((const __m256i *)in), col, k_count);
        const uint32_t *const cols = p->gcols + (size_t)col * (IBP_GROUP_RUN + 1u);
        const uint64_t sel2 = (uint64_t)sel << 1;
        for (uint32_t q = 0; q < 4u; q++) {
            const uint64_t m = gt[cols[q] | ((sel2 >> (q * gsb)) & gsel2)];
            const uint32_t nb = (uint32_t)__builtin_popcountll(m);
            ibp_fw_put64(&lw, _pext_u64(ibp_load64(in + q * 8u), m), nb);
            bits += nb;
        }
        ibp_bw_put(sw, sel, IBP_YL * sb);
        col = cols[4] >> (gsb + 1u);
    }
    for (; i < n; i++) {
        const uint64_t x = ibp_load_word(t + (size_t)i * w, w);
        const uint32_t s = IBP_KW(ibp_ax_select1)(p, x, col);
        const IbpDecEntry *const e = p->dtab + ((size_t)col << sb) + s;
        ibp_fw_put64(&lw, _pext_u64(x, e->vmask), e->vbits);
        bits += e->vbits;
        ibp_bw_put(sw, s, sb);
        if (++col == c_count)
            col = 0;
    }
    if (bits + (uint64_t)n * sb < (uint64_t)n * w * 8u) {
        *pw = lw;
        return 1;
    }
    *sw = sw0;
    const uint32_t chunks = n / IBP_G;
    for (uint32_t k = 0; k < chunks; k++)
        ibp_fw_put64(pw, ibp_load64(t + (size_t)k * 8u), 64u);
    for (uint32_t k = chunks * IBP_G; k < n; k++)
        ibp_fw_put64(pw, ibp_load_word(t + (size_t)k * w, w), w * 8u);
    return 0;
}

IBP_KATTR static inline __attribute__((always_inline)) int
IBP_KW(ibp_ax_encode_k)(const IbpCodecPlan *p, const uint8_t *src, uint32_t len, uint32_t phase, uint8_t *dst,
                        size_t cap, size_t *comp_len, uint8_t *t, const uint32_t k_count)
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
        const uint8_t *in = src + (size_t)j0 * w;
        if (p->any_xform) {
            IBP_KW(ibp_ax_xform)(p, src, j0, n, col, t);
            in = t;
        }
        if (IBP_KW(ibp_ax_encode_row)(p, in, n, col, &pw, &sw, k_count))
            dst[rf_off + r / 8u] |= (uint8_t)(1u << (r % 8u));
        col = (uint32_t)((col + (uint64_t)n) % c_count);
    }

    const uint64_t pbits = (uint64_t)(pw.p - (dst + payload_off)) * 8u + pw.n;
    return ibp_block_finish(p, dst, src, len, phase, payload_off, pbits, ibp_bw_finish(&sw), sel_scratch,
                            comp_len);
}

IBP_KATTR static int IBP_KW(ibp_ax_block_encode)(const IbpCodecPlan *p, const uint8_t *src, uint32_t len,
                                                 uint32_t phase, uint8_t *dst, size_t cap, size_t *comp_len)
{
    uint8_t t[IBP_MAX_ROW_WORDS * 8u] __attribute__((aligned(32)));
    if (!p->gtab)
        return IBP_KW(ibp_block_encode_fast)(p, src, len, phase, dst, cap, comp_len);
    switch (p->nsets) {
    case 1:
        return IBP_KW(ibp_ax_encode_k)(p, src, len, phase, dst, cap, comp_len, t, 1u);
    case 2:
        return IBP_KW(ibp_ax_encode_k)(p, src, len, phase, dst, cap, comp_len, t, 2u);
    default:
        return IBP_KW(ibp_ax_encode_k)(p, src, len, phase, dst, cap, comp_len, t, 3u);
    }
}

/* Packed size in bits of the n transformed words at t, selectors included. */
IBP_KATTR static inline __attribute__((always_inline)) uint64_t
IBP_KW(ibp_ax_row_cost)(const IbpCodecPlan *p, const uint8_t *t, uint32_t n, uint32_t col,
                        const uint32_t k_count)
{
    const uint32_t w = IBP_W;
    const uint32_t c_count = p->columns;
    const uint32_t sb = p->sel_bits;
    uint64_t bits = (uint64_t)n * sb;
    uint32_t i = 0;

    /* Each lane's variant bits under the first set it matches (W * 8 under none), added up in the
     * lanes: a row's lane holds at most IBP_MAX_ROW_WORDS / YL words' bits, which fits it. */
    const uint32_t step = IBP_YL % c_count;
    __m256i acc = _mm256_setzero_si256();
    for (; i + IBP_YL <= n; i += IBP_YL) {
        const __m256i tv = _mm256_loadu_si256((const __m256i *)(t + (size_t)i * w));
        const size_t at = (size_t)col * w;
        __m256i v = IBP_KW(ibp_y_set1)(w * 8u);
        for (uint32_t k = k_count; k > 0; k--) {
            const __m256i e = IBP_KW(ibp_y_eq)(
                _mm256_and_si256(tv, _mm256_loadu_si256((const __m256i *)(p->lane_mask[k - 1u] + at))),
                _mm256_loadu_si256((const __m256i *)(p->lane_value[k - 1u] + at)));
            v = _mm256_blendv_epi8(v, _mm256_loadu_si256((const __m256i *)(p->lane_vbits[k - 1u] + at)), e);
        }
        acc = IBP_KW(ibp_y_add)(acc, v);
        col += step;
        col = col >= c_count ? col - c_count : col;
    }
    bits += IBP_KW(ibp_y_hsum)(acc);
    for (; i < n; i++) {
        const uint32_t s = IBP_KW(ibp_ax_select1)(p, ibp_load_word(t + (size_t)i * w, w), col);
        bits += p->dtab[((size_t)col << sb) + s].vbits;
        if (++col == c_count)
            col = 0;
    }
    return bits;
}

IBP_KATTR static inline __attribute__((always_inline)) uint64_t
IBP_KW(ibp_ax_cost_k)(const IbpCodecPlan *p, const uint8_t *src, uint32_t len, uint32_t phase, uint8_t *t,
                      const uint32_t k_count)
{
    const uint32_t w = IBP_W;
    const uint32_t r_len = p->row_words;
    const uint32_t nwords = len / w;
    const uint32_t nrows = (nwords + r_len - 1u) / r_len;
    uint64_t payload_bits = 0;
    uint64_t sel_bits = 0;
    uint32_t col = phase;
    uint32_t r = 0;

    /* Rows that are not a whole number of vectors but a whole number of groups (the planner's
     * trials pick rows of 2, 4, 8 or 56 words on fashion_mnist): the words go by vectors
     * regardless of rows, each group's bits counted into its row, up to the last point where a
     * row and a vector end together.  Row by row, each row's last words went one at a time (all
     * of them in rows shorter than a vector): judging such trials took most of a plan's time in
     * this kernel. */
    const uint32_t low = r_len & (0u - r_len); /* gcd(r_len, YL), YL being a power of two */
    const uint32_t span = r_len % IBP_YL ? r_len / (low < IBP_YL ? low : IBP_YL) * IBP_YL : 0u;
    if (r_len % IBP_G == 0u && span && span <= IBP_MAX_ROW_WORDS / 2u && nwords >= span) {
        const uint32_t sb = p->sel_bits;
        const uint32_t gsb = p->group_sel_bits;
        const uint32_t gsel2 = ((1u << gsb) - 1u) << 1;
        const uint64_t *const gt = p->gtab;
        const uint64_t raw = (uint64_t)r_len * w * 8u;
        const uint64_t row_sel = (uint64_t)r_len * sb;
        const uint32_t stretch = IBP_MAX_ROW_WORDS / span * span;
        const uint32_t end = nwords / span * span;
        uint64_t acc = 0;
        uint32_t left = r_len;
        for (uint32_t j0 = 0; j0 < end; j0 += stretch) {
            const uint32_t n = end - j0 < stretch ? end - j0 : stretch;
            const uint8_t *in = src + (size_t)j0 * w;
            if (p->any_xform) {
                IBP_KW(ibp_ax_xform)(p, src, j0, n, col, t);
                in = t;
            }
            for (uint32_t i = 0; i < n; i += IBP_YL) {
                const uint64_t sel2 =
                    (uint64_t)IBP_KW(ibp_ax_select)(
                        p, _mm256_loadu_si256((const __m256i *)(in + (size_t)i * w)), col, k_count)
                    << 1;
                const uint32_t *const cols = p->gcols + (size_t)col * (IBP_GROUP_RUN + 1u);
                for (uint32_t q = 0; q < 4u; q++) {
                    acc += (uint64_t)__builtin_popcountll(gt[cols[q] | ((sel2 >> (q * gsb)) & gsel2)]);
                    left -= IBP_G;
                    if (left == 0u) {
                        /* Packed or raw is data: by masks rather than a branch that mispredicts. */
                        const uint64_t packed = (uint64_t)0 - (uint64_t)(acc + row_sel < raw);
                        sel_bits += row_sel & packed;
                        payload_bits += (acc & packed) | (raw & ~packed);
                        acc = 0;
                        left = r_len;
                    }
                }
                col = cols[4] >> (gsb + 1u);
            }
        }
        r = end / r_len;
    }

    for (; r < nrows; r++) {
        const uint32_t j0 = r * r_len;
        const uint32_t n = nwords - j0 < r_len ? nwords - j0 : r_len;
        const uint8_t *in = src + (size_t)j0 * w;
        if (p->any_xform) {
            IBP_KW(ibp_ax_xform)(p, src, j0, n, col, t);
            in = t;
        }
        const uint64_t packed = IBP_KW(ibp_ax_row_cost)(p, in, n, col, k_count);
        const uint64_t raw = (uint64_t)n * w * 8u;
        const uint64_t take = (uint64_t)0 - (uint64_t)(packed < raw);
        const uint64_t row_sel = (uint64_t)n * p->sel_bits;
        sel_bits += row_sel & take;
        payload_bits += ((packed - row_sel) & take) | (raw & ~take);
        col = (uint32_t)((col + (uint64_t)n) % p->columns);
    }
    const uint64_t packed_len = ibp_block_meta_len(p, nwords) + ibp_fmt_round16((nrows + 7u) / 8u) +
                                ibp_fmt_round16((uint32_t)((payload_bits + 7u) / 8u)) +
                                ibp_fmt_round16((uint32_t)((sel_bits + 7u) / 8u)) + len % w;
    const uint64_t raw_len = ibp_fmt_round16(IBP_BLOCK_HEADER_SIZE + len);
    const uint64_t comp = ibp_fmt_round16((uint32_t)packed_len);
    return comp < raw_len ? comp : raw_len;
}

IBP_KATTR static uint64_t IBP_KW(ibp_ax_block_cost)(const IbpCodecPlan *p, const uint8_t *src, uint32_t len,
                                                    uint32_t phase)
{
    uint8_t t[IBP_MAX_ROW_WORDS * 8u] __attribute__((aligned(32)));
    if (!p->gtab)
        return IBP_KFN(ibp_block_cost)(p, src, len, phase);
    switch (p->nsets) {
    case 1:
        return IBP_KW(ibp_ax_cost_k)(p, src, len, phase, t, 1u);
    case 2:
        return IBP_KW(ibp_ax_cost_k)(p, src, len, phase, t, 2u);
    default:
        return IBP_KW(ibp_ax_cost_k)(p, src, len, phase, t, 3u);
    }
}

#undef IBP_YL
#undef IBP_XL
#undef IBP_G
