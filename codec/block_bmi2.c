/* SPDX-License-Identifier: MIT
 * ibpshim: block kernels using BMI2 pext/pdep (picked at run time where they are fast). */
#include <immintrin.h>

#include "codec/internal.h"

#define IBP_KFN(name) name##_bmi2
#define IBP_KATTR __attribute__((target("bmi2,popcnt")))
#define IBP_PDEP(p, i, f) _pdep_u64((f), (p)->vmask[(i)])
#define IBP_OWN_CODER
#include "codec/block_impl.h"

#define IBP_W 2u
#define IBP_KW(name) IBP_PASTE(IBP_KFN(name), _w2)
#include "codec/block_fast.h"
#undef IBP_W
#undef IBP_KW

#define IBP_W 4u
#define IBP_KW(name) IBP_PASTE(IBP_KFN(name), _w4)
#include "codec/block_fast.h"
#undef IBP_W
#undef IBP_KW

#define IBP_W 8u
#define IBP_KW(name) IBP_PASTE(IBP_KFN(name), _w8)
#include "codec/block_fast.h"
#undef IBP_W
#undef IBP_KW

static int ibp_block_encode_fast_bmi2(const IbpCodecPlan *p, const uint8_t *src, uint32_t len, uint32_t phase,
                                      uint8_t *dst, size_t cap, size_t *comp_len)
{
    switch (p->word_size) {
    case 2:
        return ibp_block_encode_fast_bmi2_w2(p, src, len, phase, dst, cap, comp_len);
    case 4:
        return ibp_block_encode_fast_bmi2_w4(p, src, len, phase, dst, cap, comp_len);
    default:
        return ibp_block_encode_fast_bmi2_w8(p, src, len, phase, dst, cap, comp_len);
    }
}

static int ibp_block_decode_fast_bmi2(const IbpCodecPlan *p, const uint8_t *blk, size_t blk_len,
                                      uint32_t orig_len, uint8_t *dst, uint32_t limit)
{
    switch (p->word_size) {
    case 2:
        return ibp_block_decode_fast_bmi2_w2(p, blk, blk_len, orig_len, dst, limit);
    case 4:
        return ibp_block_decode_fast_bmi2_w4(p, blk, blk_len, orig_len, dst, limit);
    default:
        return ibp_block_decode_fast_bmi2_w8(p, blk, blk_len, orig_len, dst, limit);
    }
}

uint32_t ibp_codec_crc32c_sse42(uint32_t crc, const void *data, size_t len);

const IbpCodecKernels ibp_codec_kernels_bmi2 = {
    .name = "bmi2",
    .encode = ibp_block_encode_fast_bmi2,
    .decode = ibp_block_decode_fast_bmi2,
    .cost = ibp_block_cost_bmi2,
    .crc32c = ibp_codec_crc32c_sse42,
    .agree_hist = ibp_codec_agree_hist_ref,
    .lag_equal = ibp_codec_lag_equal_ref,
    .stage = ibp_codec_stage_ref,
    .count_bits = ibp_plan_count_packed,
    .assign = ibp_codec_assign_ref,
    .row_level = ibp_codec_row_level_ref,
    .widen = ibp_codec_widen_ref,
    .xf_widen = ibp_codec_xf_widen_ref,
};
