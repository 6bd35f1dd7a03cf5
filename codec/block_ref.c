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

/* The agreement length of word x by the rank tables t: the least of its bytes' entries. */
static inline __attribute__((always_inline)) uint32_t ibp_ref_agree(uint64_t x, const uint32_t w,
                                                                    uint64_t maj, const uint8_t *t)
{
    const uint64_t d = x ^ maj;
    uint32_t agree = t[d & 0xffu];
#pragma GCC unroll 8
    for (uint32_t q = 1; q < w; q++) {
        const uint32_t r = t[q * 256u + ((d >> (8u * q)) & 0xffu)];
        agree = r < agree ? r : agree;
    }
    return agree;
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

const IbpCodecKernels ibp_codec_kernels_ref = {
    .name = "reference",
    .encode = ibp_block_encode_ref,
    .decode = ibp_block_decode_ref,
    .cost = ibp_block_cost_ref,
    .crc32c = ibp_codec_crc32c_ref,
    .agree_hist = ibp_codec_agree_hist_ref,
};
