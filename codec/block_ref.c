/* SPDX-License-Identifier: MIT
 * ibpshim: the scalar reference block kernels, the oracle for every other path. */
#include "codec/internal.h"

/* pext/pdep one run of contiguous variant bits at a time: masks of real data have few runs
 * (low mantissa, a few exponent bits), so this stays close to the hardware instructions. */
static inline uint64_t ibp_ref_pext(const IbpCodecPlan *p, uint32_t idx, uint64_t x)
{
    const IbpBitRun *run = p->runs + p->run_first[idx];
    const uint32_t count = p->nruns[idx];
    uint64_t out = 0;
    for (uint32_t i = 0; i < count; i++)
        out |= (x & run[i].bits) >> run[i].gap;
    return out;
}

static inline uint64_t ibp_ref_pdep(const IbpCodecPlan *p, uint32_t idx, uint64_t f)
{
    const IbpBitRun *run = p->runs + p->run_first[idx];
    const uint32_t count = p->nruns[idx];
    uint64_t out = 0;
    for (uint32_t i = 0; i < count; i++)
        out |= (f << run[i].gap) & run[i].bits;
    return out;
}

#define IBP_KFN(name) name##_ref
#define IBP_KATTR
#define IBP_PEXT(p, i, x) ibp_ref_pext((p), (i), (x))
#define IBP_PDEP(p, i, f) ibp_ref_pdep((p), (i), (f))
#include "codec/block_impl.h"

/* The agreement length of word x by the rank tables t. */
static inline __attribute__((always_inline)) uint32_t ibp_ref_agree(uint64_t x, const uint32_t w,
                                                                    uint64_t maj, const uint8_t *t)
{
    return ibp_rank_agree(x ^ maj, w, t);
}

/* Four histograms side by side, so that a word's count does not wait for the one before. */
static inline __attribute__((always_inline)) void ibp_ref_agree_hist_w(const uint8_t *words, uint32_t n,
                                                                       const uint32_t w, uint64_t maj,
                                                                       const uint8_t *rank, uint32_t *hist)
{
    uint32_t h[4][65];
    memset(h, 0, sizeof(h));
    uint32_t j = 0;
    for (; j + 4u <= n; j += 4u)
#pragma GCC unroll 4
        for (uint32_t k = 0; k < 4u; k++)
            h[k][ibp_ref_agree(ibp_load_word(words + (size_t)(j + k) * w, w), w, maj, rank)]++;
    for (; j < n; j++)
        h[0][ibp_ref_agree(ibp_load_word(words + (size_t)j * w, w), w, maj, rank)]++;
    for (uint32_t a = 0; a <= w * 8u; a++)
        hist[a] += h[0][a] + h[1][a] + h[2][a] + h[3][a];
}

void ibp_codec_agree_hist_ref(const uint8_t *words, uint32_t n, uint32_t w, uint64_t maj, const uint8_t *rank,
                              uint32_t *hist)
{
    switch (w) {
    case 2:
        ibp_ref_agree_hist_w(words, n, 2u, maj, rank, hist);
        break;
    case 4:
        ibp_ref_agree_hist_w(words, n, 4u, maj, rank, hist);
        break;
    default:
        ibp_ref_agree_hist_w(words, n, 8u, maj, rank, hist);
        break;
    }
}

typedef uint8_t ibp_ref_v16u8 __attribute__((vector_size(16)));

uint32_t ibp_codec_lag_equal_tail(const uint8_t *p, size_t i0, size_t i1, uint32_t lag)
{
    static const uint64_t lo7 = 0x7f7f7f7f7f7f7f7full;
    uint32_t eq = 0;
    size_t i = i0;
    while (i < i1) {
        /* Equal bytes counted in byte lanes, emptied before any lane can pass 255. */
        uint64_t lanes = 0;
        for (uint32_t k = 0; k < 255u && i < i1; k++, i += 8u) {
            const uint64_t x = ibp_load64(p + i) ^ ibp_load64(p + i + lag);
            const uint64_t nz = ((x & lo7) + lo7) | x; /* top bit of each byte: the byte differs */
            lanes += (~nz >> 7) & 0x0101010101010101ull;
        }
        lanes = (lanes & 0x00ff00ff00ff00ffull) + ((lanes >> 8) & 0x00ff00ff00ff00ffull);
        eq += (uint32_t)((lanes * 0x0001000100010001ull) >> 48);
    }
    return eq;
}

/* 16 bytes at a time in byte-lane counters (equal lanes are all ones: subtracting counts them),
 * four vectors a step in counters of their own, emptied before any lane can pass 255; then 8
 * bytes at a time for what is left. */
void ibp_codec_lag_equal_ref(const uint8_t *p, size_t n, uint32_t lag_max, uint32_t *eq)
{
    for (uint32_t lag = 1; lag <= lag_max; lag++) {
        uint32_t count = 0;
        size_t i = 0;
        size_t vecs = (n - lag) / 16u;
        while (vecs) {
            const size_t run = vecs < 4u * 252u ? vecs : 4u * 252u;
            ibp_ref_v16u8 l0 = {0}, l1 = {0}, l2 = {0}, l3 = {0};
            const uint8_t *a = p + i;
            const uint8_t *const stop = a + run / 4u * 64u;
            for (; a < stop; a += 64) {
                ibp_ref_v16u8 x0, x1, x2, x3, y0, y1, y2, y3;
                memcpy(&x0, a, 16);
                memcpy(&y0, a + lag, 16);
                memcpy(&x1, a + 16, 16);
                memcpy(&y1, a + 16 + lag, 16);
                memcpy(&x2, a + 32, 16);
                memcpy(&y2, a + 32 + lag, 16);
                memcpy(&x3, a + 48, 16);
                memcpy(&y3, a + 48 + lag, 16);
                l0 -= (ibp_ref_v16u8)(x0 == y0);
                l1 -= (ibp_ref_v16u8)(x1 == y1);
                l2 -= (ibp_ref_v16u8)(x2 == y2);
                l3 -= (ibp_ref_v16u8)(x3 == y3);
            }
            for (size_t k = run / 4u * 4u; k < run; k++, a += 16) {
                ibp_ref_v16u8 x, y;
                memcpy(&x, a, 16);
                memcpy(&y, a + lag, 16);
                l0 -= (ibp_ref_v16u8)(x == y);
            }
            i += run * 16u;
            vecs -= run;
            for (uint32_t l = 0; l < 16u; l++)
                count += (uint32_t)l0[l] + l1[l] + l2[l] + l3[l];
        }
        eq[lag] = count + ibp_codec_lag_equal_tail(p, i, (n - lag) / 8u * 8u, lag);
    }
}

const IbpCodecKernels ibp_codec_kernels_ref = {
    .name = "reference",
    .encode = ibp_block_encode_ref,
    .decode = ibp_block_decode_ref,
    .cost = ibp_block_cost_ref,
    .crc32c = ibp_codec_crc32c_ref,
    .agree_hist = ibp_codec_agree_hist_ref,
    .lag_equal = ibp_codec_lag_equal_ref,
    .stage = ibp_codec_stage_ref,
    .count_bits = ibp_plan_count_packed,
    .assign = ibp_codec_assign_ref,
    .row_level = ibp_codec_row_level_ref,
    .widen = ibp_codec_widen_ref,
    .xf_widen = ibp_codec_xf_widen_ref,
};
