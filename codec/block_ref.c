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

const IbpCodecKernels ibp_codec_kernels_ref = {
    .name = "reference",
    .encode = ibp_block_encode_ref,
    .decode = ibp_block_decode_ref,
    .cost = ibp_block_cost_ref,
    .crc32c = ibp_codec_crc32c_ref,
};
