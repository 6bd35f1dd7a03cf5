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

uint32_t ibp_codec_crc32c_sse42(uint32_t crc, const void *data, size_t len);

const IbpCodecKernels ibp_codec_kernels_avx2 = {
    .name = "avx2",
    .encode = ibp_block_encode_avx2,
    .decode = ibp_block_decode_avx2,
    .cost = ibp_block_cost_avx2_any,
    .crc32c = ibp_codec_crc32c_sse42,
};
