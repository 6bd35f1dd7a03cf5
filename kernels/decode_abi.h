/* SPDX-License-Identifier: MIT
 * ibpshim: the argument block of the decode kernel, shared by the CUDA kernel, the router that
 * launches it and the CPU implementation the fake driver runs in tests. */
#ifndef IBP_KERNELS_DECODE_ABI_H
#define IBP_KERNELS_DECODE_ABI_H

#include <stdint.h>

/* One launch decodes a run of consecutive blocks of one region into [dst, dst + len).  Passed
 * by value as the kernel's only parameter. */
typedef struct IbpDecodeArgs {
    uint64_t comp;     /* device address of the run's first block (staging buffer or mapped shadow) */
    uint64_t offsets;  /* device address of the run's nblocks + 1 block offsets (relative to offsets[0]) */
    uint64_t plan;     /* device address of the plan blob (codec/format.h IbpPlanHeader ...) */
    uint64_t dst;      /* device address receiving original bytes [skip, skip + len) of the run */
    uint64_t len;
    uint64_t skip;     /* original bytes of the run's first block that precede dst */
    uint32_t nblocks;
    uint32_t block_size;
} IbpDecodeArgs;

#define IBP_DECODE_THREADS 256

#endif /* IBP_KERNELS_DECODE_ABI_H */
