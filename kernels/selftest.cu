// SPDX-License-Identifier: MIT
// ibpshim: a kernel whose output the host can predict, proving build, embedding, load and launch.
#include <stdint.h>

extern "C" __global__ void ibp_k_selftest(uint32_t *out, uint32_t n, uint32_t seed)
{
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = (uint32_t)(i * 2654435761u) ^ seed;
}
