/* SPDX-License-Identifier: MIT
 * ibpshim: CRC-32C (Castagnoli) of original bytes for the file form's block table. */
#include <pthread.h>

#include "codec/internal.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* Slicing-by-8 tables, built once from the polynomial and read-only afterwards. */
static uint32_t ibp_crc_table[8][256];
static pthread_once_t ibp_crc_once = PTHREAD_ONCE_INIT;

static void ibp_crc_build(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
        ibp_crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            ibp_crc_table[t][i] =
                (ibp_crc_table[t - 1][i] >> 8) ^ ibp_crc_table[0][ibp_crc_table[t - 1][i] & 0xffu];
}

uint32_t ibp_codec_crc32c_ref(uint32_t crc, const void *data, size_t len)
{
    const uint8_t *p = data;
    pthread_once(&ibp_crc_once, ibp_crc_build);
    crc = ~crc;
    while (len >= 8) {
        const uint64_t v = ibp_load64(p) ^ crc;
        crc = ibp_crc_table[7][v & 0xffu] ^ ibp_crc_table[6][(v >> 8) & 0xffu] ^
              ibp_crc_table[5][(v >> 16) & 0xffu] ^ ibp_crc_table[4][(v >> 24) & 0xffu] ^
              ibp_crc_table[3][(v >> 32) & 0xffu] ^ ibp_crc_table[2][(v >> 40) & 0xffu] ^
              ibp_crc_table[1][(v >> 48) & 0xffu] ^ ibp_crc_table[0][v >> 56];
        p += 8;
        len -= 8;
    }
    while (len--)
        crc = (crc >> 8) ^ ibp_crc_table[0][(crc ^ *p++) & 0xffu];
    return ~crc;
}

#if defined(__x86_64__)
uint32_t ibp_codec_crc32c_sse42(uint32_t crc, const void *data, size_t len);

__attribute__((target("sse4.2"))) uint32_t ibp_codec_crc32c_sse42(uint32_t crc, const void *data, size_t len)
{
    const uint8_t *p = data;
    uint64_t c = ~crc;
    while (len >= 8) {
        c = _mm_crc32_u64(c, ibp_load64(p));
        p += 8;
        len -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (len--)
        c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}
#endif
