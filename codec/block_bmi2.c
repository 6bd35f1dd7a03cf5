/* SPDX-License-Identifier: MIT
 * ibpshim: block kernels using BMI2 pext/pdep (picked at run time where they are fast). */
#include <immintrin.h>

#include "codec/internal.h"

#define IBP_KFN(name) name##_bmi2
#define IBP_KATTR __attribute__((target("bmi2,popcnt")))
#define IBP_PEXT(p, i, x) _pext_u64((x), (p)->vmask[(i)])
#define IBP_PDEP(p, i, f) _pdep_u64((f), (p)->vmask[(i)])
#include "codec/block_impl.h"

uint32_t ibp_codec_crc32c_sse42(uint32_t crc, const void *data, size_t len);

const IbpCodecKernels ibp_codec_kernels_bmi2 = {
    .name = "bmi2",
    .encode = ibp_block_encode_bmi2,
    .decode = ibp_block_decode_bmi2,
    .cost = ibp_block_cost_bmi2,
    .crc32c = ibp_codec_crc32c_sse42,
};
