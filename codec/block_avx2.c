/* SPDX-License-Identifier: MIT
 * ibpshim: block kernels using AVX2 lanes and BMI2 group pext/pdep (picked at run time). */
#include <immintrin.h>

#include "codec/internal.h"

#define IBP_KFN(name) name##_avx2
#define IBP_KATTR __attribute__((target("avx2,bmi,bmi2,popcnt")))
#define IBP_PDEP(p, i, f) _pdep_u64((f), (p)->vmask[(i)])
#define IBP_OWN_CODER
#include "codec/block_impl.h"

/* 64 bits of the payload from bit ppos: a group's field may start at bit 7 of a byte and be 64
 * bits long, so a ninth byte completes it. */
static inline uint64_t ibp_ax_field64(const uint8_t *pbase, uint64_t ppos)
{
    const uint8_t *const at = pbase + (ppos >> 3);
    const uint32_t sh = (uint32_t)(ppos & 7u);
    return (ibp_load64(at) >> sh) | (((uint64_t)at[8] << 1) << (~sh & 63u));
}

/* A field of up to 64 bits: what the pending bits and the field exceed 64 by goes out in a
 * second store (block_fast.h's writer for 8-byte words). */
static inline void ibp_fw_put64(IbpFastWriter *fw, uint64_t v, uint32_t nb)
{
    const uint64_t lo = fw->acc | v << fw->n;
    const uint64_t hi = (v >> 1) >> (63u - fw->n);
    const uint32_t total = fw->n + nb;
    const uint32_t whole = total & ~7u;
    ibp_store64(fw->p, lo);
    ibp_store64(fw->p + 8, hi);
    fw->p += whole >> 3;
    fw->acc = whole >= 64u ? hi : lo >> (whole & 63u);
    fw->n = total & 7u;
}

#define IBP_W 2u
#define IBP_KW(name) IBP_PASTE(IBP_KFN(name), _w2)
#include "codec/block_fast.h"
#include "codec/block_avx2.h"
#undef IBP_W
#undef IBP_KW

#define IBP_W 4u
#define IBP_KW(name) IBP_PASTE(IBP_KFN(name), _w4)
#include "codec/block_fast.h"
#include "codec/block_avx2.h"
#undef IBP_W
#undef IBP_KW

#define IBP_W 8u
#define IBP_KW(name) IBP_PASTE(IBP_KFN(name), _w8)
#include "codec/block_fast.h"
#include "codec/block_avx2.h"
#undef IBP_W
#undef IBP_KW

static int ibp_block_encode_avx2(const IbpCodecPlan *p, const uint8_t *src, uint32_t len, uint32_t phase,
                                 uint8_t *dst, size_t cap, size_t *comp_len)
{
    switch (p->word_size) {
    case 2:
        return ibp_ax_block_encode_avx2_w2(p, src, len, phase, dst, cap, comp_len);
    case 4:
        return ibp_ax_block_encode_avx2_w4(p, src, len, phase, dst, cap, comp_len);
    default:
        return ibp_ax_block_encode_avx2_w8(p, src, len, phase, dst, cap, comp_len);
    }
}

static int ibp_block_decode_avx2(const IbpCodecPlan *p, const uint8_t *blk, size_t blk_len, uint32_t orig_len,
                                 uint8_t *dst, uint32_t limit)
{
    switch (p->word_size) {
    case 2:
        return ibp_ax_block_decode_avx2_w2(p, blk, blk_len, orig_len, dst, limit);
    case 4:
        return ibp_ax_block_decode_avx2_w4(p, blk, blk_len, orig_len, dst, limit);
    default:
        return ibp_ax_block_decode_avx2_w8(p, blk, blk_len, orig_len, dst, limit);
    }
}

static uint64_t ibp_block_cost_avx2_any(const IbpCodecPlan *p, const uint8_t *src, uint32_t len,
                                        uint32_t phase)
{
    switch (p->word_size) {
    case 2:
        return ibp_ax_block_cost_avx2_w2(p, src, len, phase);
    case 4:
        return ibp_ax_block_cost_avx2_w4(p, src, len, phase);
    default:
        return ibp_ax_block_cost_avx2_w8(p, src, len, phase);
    }
}

/* Histograms the agreement kernel counts into side by side: a vector's 32 lengths are often a
 * few values, and an increment of a counter waits for the last one's store (dev, one-thread plans
 * of the 4 MiB tiles: 4 histograms fashion_mnist 5.6 ms, movielens 3.9; 8: 4.8 and 3.3; 16: 4.3
 * and 2.95; 32: 4.5 and 3.0). */
#define IBP_AX_HIST_SLOTS 16u
#define IBP_AX_HIST_ROW 72u /* a table's counters, 0..64 rounded up to whole vectors */

/* Agreement lengths 32 / W words a vector: each byte's rank is the lower of those of its two
 * nibbles (16-entry tables, looked up by shuffles), each byte position q of the word has
 * its own tables (lanes of other positions masked to 0xff), and the least over a word's bytes
 * lands in its lowest byte.  The loops over the W bytes are unrolled by pragma: left as loops,
 * the tables and transposed vectors went through the stack every step. */
IBP_KATTR static inline __attribute__((always_inline)) void
ibp_ax_agree_hist_w(const uint8_t *words, uint32_t n, const uint32_t w, uint64_t maj, const uint8_t *rank,
                    uint32_t *hist)
{
    const uint32_t per = 32u / w;
    __m256i lo_t[8], hi_t[8], other[8];
    /* Each byte's position in its word. */
    const __m256i pos =
        _mm256_and_si256(_mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4,
                                          5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm256_set1_epi8((char)(w - 1u)));
#pragma GCC unroll 8
    for (uint32_t q = 0; q < w; q++) {
        lo_t[q] =
            _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(rank + q * IBP_RANK_NIBBLES)));
        hi_t[q] = _mm256_broadcastsi128_si256(
            _mm_loadu_si128((const __m128i *)(rank + q * IBP_RANK_NIBBLES + 16u)));
        other[q] =
            _mm256_xor_si256(_mm256_cmpeq_epi8(pos, _mm256_set1_epi8((char)q)), _mm256_set1_epi8((char)0xff));
    }
    __m256i mv;
    if (w == 2u)
        mv = _mm256_set1_epi16((short)maj);
    else if (w == 4u)
        mv = _mm256_set1_epi32((int)maj);
    else
        mv = _mm256_set1_epi64x((long long)maj);
    const __m256i nib = _mm256_set1_epi8(0x0f);
    /* Only the counters of lengths 0..8W are zeroed and summed, a vector of 8 at a time. */
    const uint32_t hs = (w * 8u + 8u) & ~7u;
    _Alignas(32) uint32_t h[IBP_AX_HIST_SLOTS][IBP_AX_HIST_ROW];
    /* By vector stores: memset of a table's few counters compiled to rep stos, whose start-up took
     * 4% of a plan (fashion_mnist's 4 MiB tile: 750 calls of 16 tables). */
    for (uint32_t t = 0; t < IBP_AX_HIST_SLOTS; t++)
        for (uint32_t k = 0; k < hs; k += 8u)
            _mm256_store_si256((__m256i *)(h[t] + k), _mm256_setzero_si256());
    uint32_t j = 0;
    /* 4- and 8-byte words 32 at a time, transposed so that one vector holds byte q of all of
     * them: each byte's tables then apply to whole vectors, where word by word w lookups took a
     * vector each for 32 / w useful lanes. */
    if (w >= 4u) {
        /* Within each 128-bit lane: byte q of the lane's words side by side (4-byte words: dword
         * q; 8-byte words: 16-bit element q). */
        const __m256i group = w == 4u
                                  ? _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0,
                                                     4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15)
                                  : _mm256_setr_epi8(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15, 0,
                                                     8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
        for (; j + 32u <= n; j += 32u) {
            __m256i t[8], b[8];
#pragma GCC unroll 8
            for (uint32_t k = 0; k < w; k++)
                t[k] = _mm256_shuffle_epi8(
                    _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(words + (size_t)j * w + 32u * k)),
                                     mv),
                    group);
            if (w == 4u) {
                const __m256i s0 = _mm256_unpacklo_epi32(t[0], t[1]), s1 = _mm256_unpackhi_epi32(t[0], t[1]);
                const __m256i s2 = _mm256_unpacklo_epi32(t[2], t[3]), s3 = _mm256_unpackhi_epi32(t[2], t[3]);
                b[0] = _mm256_unpacklo_epi64(s0, s2);
                b[1] = _mm256_unpackhi_epi64(s0, s2);
                b[2] = _mm256_unpacklo_epi64(s1, s3);
                b[3] = _mm256_unpackhi_epi64(s1, s3);
            } else {
                __m256i s[8], u[8];
#pragma GCC unroll 8
                for (uint32_t k = 0; k < 4u; k++) {
                    s[2u * k] = _mm256_unpacklo_epi16(t[2u * k], t[2u * k + 1u]);
                    s[2u * k + 1u] = _mm256_unpackhi_epi16(t[2u * k], t[2u * k + 1u]);
                }
#pragma GCC unroll 8
                for (uint32_t k = 0; k < 2u; k++) {
                    u[4u * k] = _mm256_unpacklo_epi32(s[4u * k], s[4u * k + 2u]);
                    u[4u * k + 1u] = _mm256_unpackhi_epi32(s[4u * k], s[4u * k + 2u]);
                    u[4u * k + 2u] = _mm256_unpacklo_epi32(s[4u * k + 1u], s[4u * k + 3u]);
                    u[4u * k + 3u] = _mm256_unpackhi_epi32(s[4u * k + 1u], s[4u * k + 3u]);
                }
#pragma GCC unroll 8
                for (uint32_t k = 0; k < 4u; k++) {
                    b[2u * k] = _mm256_unpacklo_epi64(u[k], u[4u + k]);
                    b[2u * k + 1u] = _mm256_unpackhi_epi64(u[k], u[4u + k]);
                }
            }
            __m256i a = _mm256_set1_epi8((char)0xff);
#pragma GCC unroll 8
            for (uint32_t q = 0; q < w; q++) {
                const __m256i lo = _mm256_and_si256(b[q], nib);
                const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(b[q], 4), nib);
                a = _mm256_min_epu8(
                    a, _mm256_min_epu8(_mm256_shuffle_epi8(lo_t[q], lo), _mm256_shuffle_epi8(hi_t[q], hi)));
            }
            uint8_t out[32];
            _mm256_storeu_si256((__m256i *)out, a);
#pragma GCC unroll 32
            for (uint32_t k = 0; k < 32u; k++)
                h[k % IBP_AX_HIST_SLOTS][out[k]]++;
        }
    }
    for (; j + per <= n; j += per) {
        const __m256i d = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(words + (size_t)j * w)), mv);
        const __m256i lo = _mm256_and_si256(d, nib);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(d, 4), nib);
        __m256i a = _mm256_set1_epi8((char)0xff);
#pragma GCC unroll 8
        for (uint32_t q = 0; q < w; q++) {
            const __m256i r =
                _mm256_min_epu8(_mm256_shuffle_epi8(lo_t[q], lo), _mm256_shuffle_epi8(hi_t[q], hi));
            a = _mm256_min_epu8(a, _mm256_or_si256(r, other[q]));
        }
        if (w >= 2u)
            a = _mm256_min_epu8(a, _mm256_srli_epi64(a, 8));
        if (w >= 4u)
            a = _mm256_min_epu8(a, _mm256_srli_epi64(a, 16));
        if (w >= 8u)
            a = _mm256_min_epu8(a, _mm256_srli_epi64(a, 32));
        uint8_t out[32];
        _mm256_storeu_si256((__m256i *)out, a);
#pragma GCC unroll 16
        for (uint32_t k = 0; k < per; k++)
            h[k % IBP_AX_HIST_SLOTS][out[k * w]]++;
    }
    for (; j < n; j++)
        h[0][ibp_rank_agree(ibp_load_word(words + (size_t)j * w, w) ^ maj, w, rank)]++;
    _Alignas(32) uint32_t sum[IBP_AX_HIST_ROW];
    for (uint32_t k = 0; k < hs; k += 8u) {
        __m256i acc = _mm256_load_si256((const __m256i *)(h[0] + k));
        for (uint32_t t = 1; t < IBP_AX_HIST_SLOTS; t++)
            acc = _mm256_add_epi32(acc, _mm256_load_si256((const __m256i *)(h[t] + k)));
        _mm256_store_si256((__m256i *)(sum + k), acc);
    }
    for (uint32_t k = 0; k <= w * 8u; k++)
        hist[k] += sum[k];
}

IBP_KATTR static void ibp_codec_agree_hist_avx2(const uint8_t *words, uint32_t n, uint32_t w, uint64_t maj,
                                                const uint8_t *rank, uint32_t *hist)
{
    switch (w) {
    case 2:
        ibp_ax_agree_hist_w(words, n, 2u, maj, rank, hist);
        break;
    case 4:
        ibp_ax_agree_hist_w(words, n, 4u, maj, rank, hist);
        break;
    default:
        ibp_ax_agree_hist_w(words, n, 8u, maj, rank, hist);
        break;
    }
}

/* The sum of the four 64-bit lanes of v. */
IBP_KATTR static inline __attribute__((always_inline)) uint64_t ibp_ax_sum64(__m256i v)
{
    const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    return (uint64_t)_mm_cvtsi128_si64(h) + (uint64_t)_mm_extract_epi64(h, 1);
}

/* lag_equal four lags at a time, 32 bytes a vector: a vector of p is loaded once for the four
 * (one load a compare more, where one lag at a time took two), each lag's equal bytes in byte-lane
 * counters emptied (summed by sad) before any lane can pass 255.  The vectors the longer lags of a
 * group have fewer of, and what is left of each, 8 bytes at a time as the reference. */
IBP_KATTR static void ibp_codec_lag_equal_avx2(const uint8_t *p, size_t n, uint32_t lag_max, uint32_t *eq)
{
    const __m256i zero = _mm256_setzero_si256();
    for (uint32_t lag = 1; lag <= lag_max; lag += 4u) {
        const uint32_t nl = lag_max - lag + 1u < 4u ? lag_max - lag + 1u : 4u;
        __m256i sums[4] = {zero, zero, zero, zero};
        /* Vectors every lag of the group has (lag + 3 included, read even past lag_max). */
        const size_t common = n > lag + 3u ? (n - (lag + 3u)) / 32u : 0;
        size_t i = 0;
        while (i < common * 32u) {
            const size_t run = common - i / 32u < 252u ? common - i / 32u : 252u;
            __m256i l0 = zero, l1 = zero, l2 = zero, l3 = zero;
            const uint8_t *a = p + i;
            const uint8_t *const stop = a + run * 32u;
            /* The last group's lags past lag_max are compared too, and dropped. */
            for (; a < stop; a += 32) {
                const __m256i x = _mm256_loadu_si256((const __m256i *)a);
                const uint8_t *const b = a + lag;
                l0 = _mm256_sub_epi8(l0, _mm256_cmpeq_epi8(x, _mm256_loadu_si256((const __m256i *)b)));
                l1 = _mm256_sub_epi8(l1, _mm256_cmpeq_epi8(x, _mm256_loadu_si256((const __m256i *)(b + 1))));
                l2 = _mm256_sub_epi8(l2, _mm256_cmpeq_epi8(x, _mm256_loadu_si256((const __m256i *)(b + 2))));
                l3 = _mm256_sub_epi8(l3, _mm256_cmpeq_epi8(x, _mm256_loadu_si256((const __m256i *)(b + 3))));
            }
            sums[0] = _mm256_add_epi64(sums[0], _mm256_sad_epu8(l0, zero));
            sums[1] = _mm256_add_epi64(sums[1], _mm256_sad_epu8(l1, zero));
            sums[2] = _mm256_add_epi64(sums[2], _mm256_sad_epu8(l2, zero));
            sums[3] = _mm256_add_epi64(sums[3], _mm256_sad_epu8(l3, zero));
            i += run * 32u;
        }
        for (uint32_t k = 0; k < nl; k++) {
            const uint32_t lk = lag + k;
            size_t at = i;
            uint64_t count = ibp_ax_sum64(sums[k]);
            for (; at + 32u <= (n - lk) / 32u * 32u; at += 32u) {
                const __m256i eqv = _mm256_cmpeq_epi8(_mm256_loadu_si256((const __m256i *)(p + at)),
                                                      _mm256_loadu_si256((const __m256i *)(p + at + lk)));
                count += (uint32_t)__builtin_popcount((uint32_t)_mm256_movemask_epi8(eqv));
            }
            eq[lk] = (uint32_t)count + ibp_codec_lag_equal_tail(p, at, (n - lk) / 8u * 8u, lk);
        }
    }
}

/* vpermd indices that move the 64-bit lanes set in a 4-bit mask to the front, in order: whole
 * (two dwords a lane), and their low dwords only. */
static const uint32_t ibp_ax_pack_q[16][8] = {
    {0, 0, 0, 0, 0, 0, 0, 0}, {0, 1, 0, 0, 0, 0, 0, 0}, {2, 3, 0, 0, 0, 0, 0, 0}, {0, 1, 2, 3, 0, 0, 0, 0},
    {4, 5, 0, 0, 0, 0, 0, 0}, {0, 1, 4, 5, 0, 0, 0, 0}, {2, 3, 4, 5, 0, 0, 0, 0}, {0, 1, 2, 3, 4, 5, 0, 0},
    {6, 7, 0, 0, 0, 0, 0, 0}, {0, 1, 6, 7, 0, 0, 0, 0}, {2, 3, 6, 7, 0, 0, 0, 0}, {0, 1, 2, 3, 6, 7, 0, 0},
    {4, 5, 6, 7, 0, 0, 0, 0}, {0, 1, 4, 5, 6, 7, 0, 0}, {2, 3, 4, 5, 6, 7, 0, 0}, {0, 1, 2, 3, 4, 5, 6, 7}};
static const uint32_t ibp_ax_pack_d[16][8] = {
    {0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}, {2, 0, 0, 0, 0, 0, 0, 0}, {0, 2, 0, 0, 0, 0, 0, 0},
    {4, 0, 0, 0, 0, 0, 0, 0}, {0, 4, 0, 0, 0, 0, 0, 0}, {2, 4, 0, 0, 0, 0, 0, 0}, {0, 2, 4, 0, 0, 0, 0, 0},
    {6, 0, 0, 0, 0, 0, 0, 0}, {0, 6, 0, 0, 0, 0, 0, 0}, {2, 6, 0, 0, 0, 0, 0, 0}, {0, 2, 6, 0, 0, 0, 0, 0},
    {4, 6, 0, 0, 0, 0, 0, 0}, {0, 4, 6, 0, 0, 0, 0, 0}, {2, 4, 6, 0, 0, 0, 0, 0}, {0, 2, 4, 6, 0, 0, 0, 0}};

/* The lanes of x set in m (a 4-bit mask), packed at w bytes to the front, stored at dst: 4 * w
 * bytes, what follows the taken lanes is left over. */
IBP_KATTR static inline __attribute__((always_inline)) void ibp_ax_stage_store(uint8_t *dst, __m256i x,
                                                                               uint32_t m, const uint32_t w)
{
    if (w == 8u) {
        const __m256i idx = _mm256_loadu_si256((const __m256i *)ibp_ax_pack_q[m]);
        _mm256_storeu_si256((__m256i *)dst, _mm256_permutevar8x32_epi32(x, idx));
        return;
    }
    const __m256i idx = _mm256_loadu_si256((const __m256i *)ibp_ax_pack_d[m]);
    const __m128i d = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(x, idx));
    if (w == 4u) {
        _mm_storeu_si128((__m128i *)dst, d);
        return;
    }
    const __m128i h =
        _mm_shuffle_epi8(d, _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1));
    _mm_storel_epi64((__m128i *)dst, h);
}

/* The sets a staged step can write to, routes [*lo, *hi], for either lane width's kernel. */
static inline __attribute__((always_inline)) void ibp_ax_stage_routes(const uint32_t how, const uint32_t ak,
                                                                      const IbpStageRoute *rt, uint32_t *lo,
                                                                      uint32_t *hi)
{
    *lo = how == IBP_ROUTE_ONE || how == IBP_ROUTE_SIGN ? 1u : rt->first;
    *hi = how == IBP_ROUTE_SETS ? ak : how == IBP_ROUTE_SIGN ? 2u : 1u;
}

/* Steps of `per` words that no buffer of routes [lo, hi] can fill in (after them each could still
 * take `per` more words), at most left / per. */
static inline __attribute__((always_inline)) uint32_t ibp_ax_stage_safe_steps(const uint32_t *f, uint32_t lo,
                                                                              uint32_t hi, uint32_t cap,
                                                                              uint32_t left,
                                                                              const uint32_t per)
{
    uint32_t room = cap;
    for (uint32_t r = lo; r <= hi; r++)
        room = cap - f[r] < room ? cap - f[r] : room;
    const uint32_t steps = room > per ? (room - 1u) / per : 0;
    return steps < left / per ? steps : left / per;
}

/* The kernel stage four words a step: their routes by compares, then each set's words packed to
 * the front by a permute and stored whole; a step runs only where no set's buffer can fill in it
 * (the steps safe from every fill are counted beforehand), the rest word by word. */
IBP_KATTR static inline __attribute__((always_inline)) uint32_t
ibp_ax_stage_w(const uint64_t *words, size_t stride, uint32_t n, const uint32_t w, const uint32_t how,
               const uint32_t ak, const IbpStageRoute *rt, uint8_t *const *to, uint32_t *fill, uint32_t cap)
{
    uint32_t r_lo, r_hi;
    ibp_ax_stage_routes(how, ak, rt, &r_lo, &r_hi);
    __m256i mk[IBP_MAX_SETS], vl[IBP_MAX_SETS];
    for (uint32_t k = 0; k < ak; k++) {
        mk[k] = _mm256_set1_epi64x((long long)rt->mask[k]);
        vl[k] = _mm256_set1_epi64x((long long)rt->value[k]);
    }
    uint32_t f[IBP_MAX_SETS + 1u];
    for (uint32_t r = 0; r <= IBP_MAX_SETS; r++)
        f[r] = fill[r];
    uint32_t i = 0;
    for (;;) {
        uint32_t steps = ibp_ax_stage_safe_steps(f, r_lo, r_hi, cap, n - i, 4u);
        if (!steps)
            break;
        for (; steps; steps--, i += 4u) {
            const uint64_t *const at = words + (size_t)i * stride;
            const __m256i x = stride == 1u
                                  ? _mm256_loadu_si256((const __m256i *)at)
                                  : _mm256_set_epi64x((long long)at[3u * stride], (long long)at[2u * stride],
                                                      (long long)at[stride], (long long)at[0]);
            if (how == IBP_ROUTE_ONE) {
                ibp_ax_stage_store(to[1] + (size_t)f[1] * w, x, 15u, w);
                f[1] += 4u;
                continue;
            }
            __m256i route;
            if (how == IBP_ROUTE_SIGN) {
                route = _mm256_srli_epi64(x, (int)(w * 8u - 1u));
                route = _mm256_and_si256(route, _mm256_set1_epi64x(1));
                route = _mm256_add_epi64(route, _mm256_set1_epi64x(1));
            } else {
                route = _mm256_setzero_si256();
                for (uint32_t k = ak; k > 0; k--) {
                    const __m256i hit = _mm256_cmpeq_epi64(_mm256_and_si256(x, mk[k - 1u]), vl[k - 1u]);
                    route = _mm256_blendv_epi8(route, _mm256_set1_epi64x((long long)k), hit);
                }
                if (how == IBP_ROUTE_FREE)
                    route = _mm256_and_si256(_mm256_cmpeq_epi64(route, _mm256_setzero_si256()),
                                             _mm256_set1_epi64x(1));
            }
            for (uint32_t r = r_lo; r <= r_hi; r++) {
                const uint32_t m = (uint32_t)_mm256_movemask_pd(
                    _mm256_castsi256_pd(_mm256_cmpeq_epi64(route, _mm256_set1_epi64x((long long)r))));
                ibp_ax_stage_store(to[r] + (size_t)f[r] * w, x, m, w);
                f[r] += (uint32_t)_mm_popcnt_u32(m);
            }
        }
    }
    for (uint32_t r = 0; r <= IBP_MAX_SETS; r++)
        fill[r] = f[r];
    return i + ibp_codec_stage_ref(words + (size_t)i * stride, stride, n - i, w, rt, to, fill, cap);
}

/* The lanes of x (eight words of w = 2 or 4 bytes, one a 32-bit lane) set in m, packed at w bytes
 * to the front, stored at dst: 8 * w bytes.  The permute's indices are the positions of m's bits,
 * taken out of 0 .. 7 by pext. */
IBP_KATTR static inline __attribute__((always_inline)) void ibp_ax_stage_store32(uint8_t *dst, __m256i x,
                                                                                 uint32_t m, const uint32_t w)
{
    const uint64_t keep = _pdep_u64(m, 0x0101010101010101u) * 0xffu;
    const __m256i idx =
        _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)_pext_u64(0x0706050403020100u, keep)));
    const __m256i v = _mm256_permutevar8x32_epi32(x, idx);
    if (w == 4u) {
        _mm256_storeu_si256((__m256i *)dst, v);
        return;
    }
    /* Each 32-bit lane holds a zero-extended 2-byte word: packing saturates none. */
    const __m256i h = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08);
    _mm_storeu_si128((__m128i *)dst, _mm256_castsi256_si128(h));
}

/* ibp_ax_stage_w for words of 2 and 4 bytes, eight words a step in 32-bit lanes (half the
 * compares, permutes and stores of 64-bit lanes a word). */
IBP_KATTR static inline __attribute__((always_inline)) uint32_t
ibp_ax_stage_w32(const uint64_t *words, size_t stride, uint32_t n, const uint32_t w, const uint32_t how,
                 const uint32_t ak, const IbpStageRoute *rt, uint8_t *const *to, uint32_t *fill, uint32_t cap)
{
    uint32_t r_lo, r_hi;
    ibp_ax_stage_routes(how, ak, rt, &r_lo, &r_hi);
    __m256i mk[IBP_MAX_SETS], vl[IBP_MAX_SETS];
    for (uint32_t k = 0; k < ak; k++) {
        mk[k] = _mm256_set1_epi32((int)(uint32_t)rt->mask[k]);
        vl[k] = _mm256_set1_epi32((int)(uint32_t)rt->value[k]);
    }
    const __m256i low_dwords = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    uint32_t f[IBP_MAX_SETS + 1u];
    for (uint32_t r = 0; r <= IBP_MAX_SETS; r++)
        f[r] = fill[r];
    uint32_t i = 0;
    for (;;) {
        uint32_t steps = ibp_ax_stage_safe_steps(f, r_lo, r_hi, cap, n - i, 8u);
        if (!steps)
            break;
        for (; steps; steps--, i += 8u) {
            const uint64_t *const at = words + (size_t)i * stride;
            __m256i x;
            if (stride == 1u) {
                const __m256i a =
                    _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)at), low_dwords);
                const __m256i b =
                    _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)(at + 4)), low_dwords);
                x = _mm256_inserti128_si256(a, _mm256_castsi256_si128(b), 1);
            } else {
                x = _mm256_setr_epi32((int)at[0], (int)at[stride], (int)at[2u * stride], (int)at[3u * stride],
                                      (int)at[4u * stride], (int)at[5u * stride], (int)at[6u * stride],
                                      (int)at[7u * stride]);
            }
            if (how == IBP_ROUTE_ONE) {
                ibp_ax_stage_store32(to[1] + (size_t)f[1] * w, x, 0xffu, w);
                f[1] += 8u;
                continue;
            }
            __m256i route;
            if (how == IBP_ROUTE_SIGN) {
                route = _mm256_add_epi32(_mm256_srli_epi32(x, (int)(w * 8u - 1u)), _mm256_set1_epi32(1));
            } else {
                route = _mm256_setzero_si256();
                for (uint32_t k = ak; k > 0; k--) {
                    const __m256i hit = _mm256_cmpeq_epi32(_mm256_and_si256(x, mk[k - 1u]), vl[k - 1u]);
                    route = _mm256_blendv_epi8(route, _mm256_set1_epi32((int)k), hit);
                }
                if (how == IBP_ROUTE_FREE)
                    route = _mm256_and_si256(_mm256_cmpeq_epi32(route, _mm256_setzero_si256()),
                                             _mm256_set1_epi32(1));
            }
            for (uint32_t r = r_lo; r <= r_hi; r++) {
                const uint32_t m = (uint32_t)_mm256_movemask_ps(
                    _mm256_castsi256_ps(_mm256_cmpeq_epi32(route, _mm256_set1_epi32((int)r))));
                ibp_ax_stage_store32(to[r] + (size_t)f[r] * w, x, m, w);
                f[r] += (uint32_t)_mm_popcnt_u32(m);
            }
        }
    }
    for (uint32_t r = 0; r <= IBP_MAX_SETS; r++)
        fill[r] = f[r];
    return i + ibp_codec_stage_ref(words + (size_t)i * stride, stride, n - i, w, rt, to, fill, cap);
}

#define IBP_AX_STAGE_CASE(W, HOW, K)                                                                         \
    case IBP_STAGE_KEY(W, HOW, K):                                                                           \
        return (W) < 8u ? ibp_ax_stage_w32(words, stride, n, (W), (HOW), (K), rt, to, fill, cap)             \
                        : ibp_ax_stage_w(words, stride, n, (W), (HOW), (K), rt, to, fill, cap);

IBP_KATTR static uint32_t ibp_codec_stage_avx2(const uint64_t *words, size_t stride, uint32_t n, uint32_t w,
                                               const IbpStageRoute *rt, uint8_t *const *to, uint32_t *fill,
                                               uint32_t cap)
{
    switch (IBP_STAGE_KEY(w, rt->how, ibp_stage_sets(rt))) {
        IBP_STAGE_EACH(IBP_AX_STAGE_CASE, 2u)
        IBP_STAGE_EACH(IBP_AX_STAGE_CASE, 4u)
        IBP_STAGE_EACH(IBP_AX_STAGE_CASE, 8u)
    default:
        return ibp_codec_stage_ref(words, stride, n, w, rt, to, fill, cap);
    }
}
#undef IBP_AX_STAGE_CASE

/* ibp_plan_count_packed 32 bytes a step: the same nibble and byte counters, four 64-bit lanes
 * each; an odd vector at the end goes to the reference. */
IBP_KATTR static void ibp_codec_count_bits_avx2(const uint8_t *buf, size_t nvec, uint32_t wbits,
                                                uint32_t *cnt)
{
    const __m256i ones = _mm256_set1_epi8(0x11);
    const __m256i lows = _mm256_set1_epi8(0x0f);
    const size_t npair = nvec / 2u;
    size_t v = 0;
    while (v < npair) {
        __m256i bytes[8];
        for (uint32_t k = 0; k < 8u; k++)
            bytes[k] = _mm256_setzero_si256();
        for (uint32_t round = 0; round < 17u && v < npair; round++) {
            __m256i nib[4];
            for (uint32_t j = 0; j < 4u; j++)
                nib[j] = _mm256_setzero_si256();
            const size_t stop = npair - v < 15u ? npair : v + 15u;
            for (; v < stop; v++) {
                const __m256i x = _mm256_loadu_si256((const __m256i *)(buf + 32u * v));
                nib[0] = _mm256_add_epi8(nib[0], _mm256_and_si256(x, ones));
                nib[1] = _mm256_add_epi8(nib[1], _mm256_and_si256(_mm256_srli_epi64(x, 1), ones));
                nib[2] = _mm256_add_epi8(nib[2], _mm256_and_si256(_mm256_srli_epi64(x, 2), ones));
                nib[3] = _mm256_add_epi8(nib[3], _mm256_and_si256(_mm256_srli_epi64(x, 3), ones));
            }
            for (uint32_t j = 0; j < 4u; j++) {
                bytes[j] = _mm256_add_epi8(bytes[j], _mm256_and_si256(nib[j], lows));
                bytes[4u + j] =
                    _mm256_add_epi8(bytes[4u + j], _mm256_and_si256(_mm256_srli_epi64(nib[j], 4), lows));
            }
        }
        /* Byte q of each 64-bit lane of bytes[h * 4 + j] counts bit 8q + 4h + j. */
        for (uint32_t k = 0; k < 8u; k++) {
            uint8_t lane[32];
            _mm256_storeu_si256((__m256i *)lane, bytes[k]);
            for (uint32_t q = 0; q < 8u; q++)
                cnt[(8u * q + 4u * (k / 4u) + k % 4u) & (wbits - 1u)] +=
                    (uint32_t)lane[q] + lane[8u + q] + lane[16u + q] + lane[24u + q];
        }
    }
    if (nvec % 2u)
        ibp_plan_count_packed(buf + 32u * npair, 1u, wbits, cnt);
}

/* ibp_assign's word loop four words a step: each set's lanes of four consecutive entries, a
 * word's size picked by blends, and the running sums by two shifted adds and a carry; what is left
 * of n goes to the reference.  K and run (NULL or not) are constants where inlined. */
IBP_KATTR static inline __attribute__((always_inline)) uint64_t
ibp_ax_assign_k(const uint64_t *words, size_t n, uint32_t wbits, const IbpAssignTable *t, uint32_t j0,
                uint32_t base, uint32_t *run, const uint32_t k_count)
{
    const size_t stride = t->stride;
    const uint32_t period = t->period;
    const __m256i none = _mm256_set1_epi64x(wbits);
    const __m256i high = _mm256_setr_epi64x(0, 0, -1, -1);
    const __m256i low_dwords = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    __m256i total = _mm256_setzero_si256();
    __m256i carry = _mm256_set1_epi64x(base);
    uint32_t j = j0;
    size_t i = 0;
    for (; i + 4u <= n; i += 4u) {
        const __m256i x = _mm256_loadu_si256((const __m256i *)(words + i));
        __m256i sz = none;
        for (uint32_t k = k_count; k > 0; k--) {
            const size_t e = (size_t)(k - 1u) * stride + j;
            const __m256i hit =
                _mm256_cmpeq_epi64(_mm256_and_si256(x, _mm256_loadu_si256((const __m256i *)(t->mask + e))),
                                   _mm256_loadu_si256((const __m256i *)(t->value + e)));
            sz = _mm256_blendv_epi8(sz, _mm256_loadu_si256((const __m256i *)(t->bits + e)), hit);
        }
        total = _mm256_add_epi64(total, sz);
        if (run) {
            __m256i s = _mm256_add_epi64(sz, _mm256_slli_si256(sz, 8));
            s = _mm256_add_epi64(s, _mm256_and_si256(_mm256_permute4x64_epi64(s, 0x55), high));
            s = _mm256_add_epi64(s, carry);
            _mm_storeu_si128((__m128i *)(run + i),
                             _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(s, low_dwords)));
            carry = _mm256_permute4x64_epi64(s, 0xff);
        }
        j += 4u;
        j = j >= period ? j - period : j;
    }
    const __m128i t2 = _mm_add_epi64(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
    const uint64_t sum = (uint64_t)_mm_cvtsi128_si64(t2) + (uint64_t)_mm_extract_epi64(t2, 1);
    if (i == n)
        return sum;
    return sum +
           ibp_codec_assign_ref(words + i, n - i, wbits, t, j, base + (uint32_t)sum, run ? run + i : NULL);
}

/* ibp_ax_assign_k for words of 2 and 4 bytes, eight words a step in 32-bit lanes (the sizes of
 * fewer than 2^24 words fit them). */
IBP_KATTR static inline __attribute__((always_inline)) uint64_t
ibp_ax_assign_k32(const uint64_t *words, size_t n, uint32_t wbits, const IbpAssignTable *t, uint32_t j0,
                  uint32_t base, uint32_t *run, const uint32_t k_count)
{
    const size_t stride = t->stride;
    const uint32_t period = t->period;
    const __m256i none = _mm256_set1_epi32((int)wbits);
    const __m256i low_dwords = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    const __m256i high = _mm256_setr_epi32(0, 0, 0, 0, -1, -1, -1, -1);
    __m256i total = _mm256_setzero_si256();
    __m256i carry = _mm256_set1_epi32((int)base);
    uint32_t j = j0;
    size_t i = 0;
    for (; i + 8u <= n; i += 8u) {
        const __m256i a =
            _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)(words + i)), low_dwords);
        const __m256i b =
            _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)(words + i + 4u)), low_dwords);
        const __m256i x = _mm256_inserti128_si256(a, _mm256_castsi256_si128(b), 1);
        __m256i sz = none;
        for (uint32_t k = k_count; k > 0; k--) {
            const size_t e = (size_t)(k - 1u) * stride + j;
            const __m256i hit =
                _mm256_cmpeq_epi32(_mm256_and_si256(x, _mm256_loadu_si256((const __m256i *)(t->mask32 + e))),
                                   _mm256_loadu_si256((const __m256i *)(t->value32 + e)));
            sz = _mm256_blendv_epi8(sz, _mm256_loadu_si256((const __m256i *)(t->bits32 + e)), hit);
        }
        total = _mm256_add_epi32(total, sz);
        if (run) {
            __m256i s = _mm256_add_epi32(sz, _mm256_slli_si256(sz, 4));
            s = _mm256_add_epi32(s, _mm256_slli_si256(s, 8));
            s = _mm256_add_epi32(
                s, _mm256_and_si256(_mm256_permutevar8x32_epi32(s, _mm256_set1_epi32(3)), high));
            s = _mm256_add_epi32(s, carry);
            _mm256_storeu_si256((__m256i *)(run + i), s);
            carry = _mm256_permutevar8x32_epi32(s, _mm256_set1_epi32(7));
        }
        j += 8u;
        j = j >= period ? j - period : j;
    }
    const __m256i wide = _mm256_add_epi64(_mm256_cvtepu32_epi64(_mm256_castsi256_si128(total)),
                                          _mm256_cvtepu32_epi64(_mm256_extracti128_si256(total, 1)));
    const __m128i t2 = _mm_add_epi64(_mm256_castsi256_si128(wide), _mm256_extracti128_si256(wide, 1));
    const uint64_t sum = (uint64_t)_mm_cvtsi128_si64(t2) + (uint64_t)_mm_extract_epi64(t2, 1);
    if (i == n)
        return sum;
    return sum +
           ibp_codec_assign_ref(words + i, n - i, wbits, t, j, base + (uint32_t)sum, run ? run + i : NULL);
}

IBP_KATTR static uint64_t ibp_codec_assign_avx2(const uint64_t *words, size_t n, uint32_t wbits,
                                                const IbpAssignTable *t, uint32_t j0, uint32_t base,
                                                uint32_t *run)
{
    if (t->mask32) {
        IBP_ASSIGN_BY_SETS(ibp_ax_assign_k32, words, n, wbits, t, j0, base, run);
    }
    IBP_ASSIGN_BY_SETS(ibp_ax_assign_k, words, n, wbits, t, j0, base, run);
}

/* row_level 16 rows a step: both vectors' rows summed, and their pairs added by hadd (pairs of
 * each 128-bit lane, interleaved by lane) and put in order by a permute; stored at half the
 * index, behind the rows still to be read. */
IBP_KATTR static uint64_t ibp_codec_row_level_avx2(uint32_t *sums, size_t nrows, uint32_t row_sel,
                                                   uint32_t row_raw)
{
    const __m256i sel = _mm256_set1_epi32((int)row_sel);
    const __m256i raw = _mm256_set1_epi32((int)row_raw);
    __m256i acc = _mm256_setzero_si256();
    size_t q = 0;
    for (; q + 16u <= nrows; q += 16u) {
        const __m256i a = _mm256_loadu_si256((const __m256i *)(sums + q));
        const __m256i b = _mm256_loadu_si256((const __m256i *)(sums + q + 8u));
        acc = _mm256_add_epi32(acc, _mm256_min_epu32(_mm256_add_epi32(sel, a), raw));
        acc = _mm256_add_epi32(acc, _mm256_min_epu32(_mm256_add_epi32(sel, b), raw));
        _mm256_storeu_si256((__m256i *)(sums + q / 2u),
                            _mm256_permute4x64_epi64(_mm256_hadd_epi32(a, b), 0xd8));
    }
    const __m256i wide = _mm256_add_epi64(_mm256_cvtepu32_epi64(_mm256_castsi256_si128(acc)),
                                          _mm256_cvtepu32_epi64(_mm256_extracti128_si256(acc, 1)));
    const __m256i h = _mm256_add_epi64(wide, _mm256_permute4x64_epi64(wide, 0x4e));
    const uint64_t bits = (uint64_t)_mm256_extract_epi64(h, 0) + (uint64_t)_mm256_extract_epi64(h, 1) + q;
    return bits + ibp_codec_row_level_from(sums, q, nrows, row_sel, row_raw);
}

/* The 32 bytes of words of w bytes in v as 64-bit words, 32 / w of them, into out. */
IBP_KATTR static inline __attribute__((always_inline)) void ibp_ax_widen_store(uint64_t *out, __m256i v,
                                                                               const uint32_t w)
{
    if (w == 8u) {
        _mm256_storeu_si256((__m256i *)out, v);
        return;
    }
    const __m128i lo = _mm256_castsi256_si128(v);
    const __m128i hi = _mm256_extracti128_si256(v, 1);
    if (w == 4u) {
        _mm256_storeu_si256((__m256i *)out, _mm256_cvtepu32_epi64(lo));
        _mm256_storeu_si256((__m256i *)(out + 4), _mm256_cvtepu32_epi64(hi));
        return;
    }
    _mm256_storeu_si256((__m256i *)out, _mm256_cvtepu16_epi64(lo));
    _mm256_storeu_si256((__m256i *)(out + 4), _mm256_cvtepu16_epi64(_mm_srli_si128(lo, 8)));
    _mm256_storeu_si256((__m256i *)(out + 8), _mm256_cvtepu16_epi64(hi));
    _mm256_storeu_si256((__m256i *)(out + 12), _mm256_cvtepu16_epi64(_mm_srli_si128(hi, 8)));
}

/* The planner's loads 32 bytes a step: transformed in lanes of the word size (a predictor's words
 * C back are a second load), then zero-extended; the first C words go to the reference, what is
 * left of nw word by word.  w and xf are constants where inlined (xf 0: none). */
IBP_KATTR static inline __attribute__((always_inline)) void ibp_ax_widen_w(const uint8_t *p, uint32_t nw,
                                                                           const uint32_t w,
                                                                           const uint32_t xf,
                                                                           uint32_t c_count, uint64_t *out)
{
    const uint32_t per = 32u / w;
    const uint32_t first = xf & IBP_XF_PRED_MASK ? (c_count < nw ? c_count : nw) : 0;
    if (first)
        ibp_codec_xf_widen_ref(p, first, w, xf, c_count, out);
    uint32_t j = first;
    for (; j + per <= nw; j += per) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(p + (size_t)j * w));
        if (xf & IBP_XF_PRED_MASK) {
            const __m256i prev = _mm256_loadu_si256((const __m256i *)(p + (size_t)(j - c_count) * w));
            if ((xf & IBP_XF_PRED_MASK) == IBP_XF_PRED_XOR)
                x = _mm256_xor_si256(x, prev);
            else if (w == 2u)
                x = _mm256_sub_epi16(x, prev);
            else if (w == 4u)
                x = _mm256_sub_epi32(x, prev);
            else
                x = _mm256_sub_epi64(x, prev);
        }
        if (xf & IBP_XF_ZIGZAG) {
            if (w == 2u)
                x = _mm256_xor_si256(_mm256_slli_epi16(x, 1), _mm256_srai_epi16(x, 15));
            else if (w == 4u)
                x = _mm256_xor_si256(_mm256_slli_epi32(x, 1), _mm256_srai_epi32(x, 31));
            else
                x = _mm256_xor_si256(_mm256_slli_epi64(x, 1), _mm256_cmpgt_epi64(_mm256_setzero_si256(), x));
        }
        ibp_ax_widen_store(out + j, x, w);
    }
    for (; j < nw; j++) {
        const uint64_t prev = xf & IBP_XF_PRED_MASK ? ibp_load_word(p + (size_t)(j - c_count) * w, w) : 0;
        out[j] = ibp_xform(xf, ibp_load_word(p + (size_t)j * w, w), prev, w);
    }
}

IBP_KATTR static void ibp_codec_widen_avx2(const uint8_t *p, uint32_t nw, uint32_t w, uint64_t *out)
{
    if (w == 2u)
        ibp_ax_widen_w(p, nw, 2u, 0, 1u, out);
    else if (w == 4u)
        ibp_ax_widen_w(p, nw, 4u, 0, 1u, out);
    else
        memcpy(out, p, (size_t)nw * 8u);
}

#define IBP_AX_WIDEN_CASE(W, XF)                                                                             \
    case (W)*8u + (XF):                                                                                      \
        ibp_ax_widen_w(p, nw, (W), (XF), c_count, out);                                                      \
        break;
#define IBP_AX_WIDEN_CASES(W)                                                                                \
    IBP_AX_WIDEN_CASE(W, IBP_XF_ZIGZAG)                                                                      \
    IBP_AX_WIDEN_CASE(W, IBP_XF_PRED_DELTA)                                                                  \
    IBP_AX_WIDEN_CASE(W, IBP_XF_PRED_DELTA | IBP_XF_ZIGZAG)                                                  \
    IBP_AX_WIDEN_CASE(W, IBP_XF_PRED_XOR)                                                                    \
    IBP_AX_WIDEN_CASE(W, IBP_XF_PRED_XOR | IBP_XF_ZIGZAG)

IBP_KATTR static void ibp_codec_xf_widen_avx2(const uint8_t *p, uint32_t nw, uint32_t w, uint32_t xf,
                                              uint32_t c_count, uint64_t *out)
{
    switch (w * 8u + xf) {
        IBP_AX_WIDEN_CASES(2u)
        IBP_AX_WIDEN_CASES(4u)
        IBP_AX_WIDEN_CASES(8u)
    default:
        ibp_codec_xf_widen_ref(p, nw, w, xf, c_count, out);
        break;
    }
}
#undef IBP_AX_WIDEN_CASES
#undef IBP_AX_WIDEN_CASE

uint32_t ibp_codec_crc32c_sse42(uint32_t crc, const void *data, size_t len);

const IbpCodecKernels ibp_codec_kernels_avx2 = {
    .name = "avx2",
    .encode = ibp_block_encode_avx2,
    .decode = ibp_block_decode_avx2,
    .cost = ibp_block_cost_avx2_any,
    .crc32c = ibp_codec_crc32c_sse42,
    .agree_hist = ibp_codec_agree_hist_avx2,
    .lag_equal = ibp_codec_lag_equal_avx2,
    .stage = ibp_codec_stage_avx2,
    .count_bits = ibp_codec_count_bits_avx2,
    .assign = ibp_codec_assign_avx2,
    .row_level = ibp_codec_row_level_avx2,
    .widen = ibp_codec_widen_avx2,
    .xf_widen = ibp_codec_xf_widen_avx2,
};
