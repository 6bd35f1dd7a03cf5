/* SPDX-License-Identifier: MIT
 * ibpshim: block kernels of one instruction-set level, specialised per word size. */

/* No include guard: block_ref.c and block_bmi2.c each include this once after defining
 * IBP_KFN(name), IBP_KATTR, IBP_PEXT and IBP_PDEP (see block_body.h). */

#include <errno.h>

#include "codec/internal.h"

#define IBP_PASTE_(a, b) a##b
#define IBP_PASTE(a, b) IBP_PASTE_(a, b)

#define IBP_W 2u
#define IBP_KW(name) IBP_PASTE(IBP_KFN(name), _w2)
#include "codec/block_body.h"
#undef IBP_W
#undef IBP_KW

#define IBP_W 4u
#define IBP_KW(name) IBP_PASTE(IBP_KFN(name), _w4)
#include "codec/block_body.h"
#undef IBP_W
#undef IBP_KW

#define IBP_W 8u
#define IBP_KW(name) IBP_PASTE(IBP_KFN(name), _w8)
#include "codec/block_body.h"
#undef IBP_W
#undef IBP_KW

static uint64_t IBP_KFN(ibp_block_cost)(const IbpCodecPlan *p, const uint8_t *src, uint32_t len,
                                        uint32_t phase)
{
    switch (p->word_size) {
    case 2:
        return IBP_PASTE(IBP_KFN(ibp_block_cost), _w2)(p, src, len, phase);
    case 4:
        return IBP_PASTE(IBP_KFN(ibp_block_cost), _w4)(p, src, len, phase);
    default:
        return IBP_PASTE(IBP_KFN(ibp_block_cost), _w8)(p, src, len, phase);
    }
}

#ifndef IBP_OWN_CODER
static int IBP_KFN(ibp_block_encode)(const IbpCodecPlan *p, const uint8_t *src, uint32_t len, uint32_t phase,
                                     uint8_t *dst, size_t cap, size_t *comp_len)
{
    switch (p->word_size) {
    case 2:
        return IBP_PASTE(IBP_KFN(ibp_block_encode), _w2)(p, src, len, phase, dst, cap, comp_len);
    case 4:
        return IBP_PASTE(IBP_KFN(ibp_block_encode), _w4)(p, src, len, phase, dst, cap, comp_len);
    default:
        return IBP_PASTE(IBP_KFN(ibp_block_encode), _w8)(p, src, len, phase, dst, cap, comp_len);
    }
}

static int IBP_KFN(ibp_block_decode)(const IbpCodecPlan *p, const uint8_t *blk, size_t blk_len,
                                     uint32_t orig_len, uint8_t *dst, uint32_t limit)
{
    switch (p->word_size) {
    case 2:
        return IBP_PASTE(IBP_KFN(ibp_block_decode), _w2)(p, blk, blk_len, orig_len, dst, limit);
    case 4:
        return IBP_PASTE(IBP_KFN(ibp_block_decode), _w4)(p, blk, blk_len, orig_len, dst, limit);
    default:
        return IBP_PASTE(IBP_KFN(ibp_block_decode), _w8)(p, blk, blk_len, orig_len, dst, limit);
    }
}
#endif
