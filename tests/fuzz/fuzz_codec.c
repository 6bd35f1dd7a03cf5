/* SPDX-License-Identifier: MIT
 * ibpshim: libFuzzer target: decoding untrusted IBP files must fail cleanly or round-trip. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codec/format.h"
#include "codec/internal.h"
#include "codec/topcode.h"
#include "ibpshim/codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A mutated header, plan or block table would almost always fail the metadata checksum and
 * never reach the parsers behind it, so the target repairs that checksum first. */
static void ibp_fuzz_fix_meta_crc(uint8_t *file, size_t size)
{
    IbpFileHeader h;
    if (size < sizeof(h))
        return;
    memcpy(&h, file, sizeof(h));
    if ((uint64_t)h.plan_off + h.plan_len > size || h.table_off > size ||
        (uint64_t)h.nblocks * sizeof(IbpFileBlock) > size - h.table_off || h.plan_off > size)
        return;
    h.meta_crc = 0;
    uint32_t crc = ibp_codec_crc32c_ref(0, &h, sizeof(h));
    crc = ibp_codec_crc32c_ref(crc, file + h.plan_off, h.plan_len);
    h.meta_crc = ibp_codec_crc32c_ref(crc, file + h.table_off, (size_t)h.nblocks * sizeof(IbpFileBlock));
    memcpy(file, &h, sizeof(h));
}

/* The input is tried as a whole file image (as is, then with its metadata checksum repaired),
 * then as plain data that must round-trip.  Outputs stay small so the fuzzer stays fast. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1u);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    for (int pass = 0; pass < 2; pass++) {
        uint64_t orig = 0;
        if (pass)
            ibp_fuzz_fix_meta_crc(copy, size);
        if (ibp_codec_file_orig_len(copy, size, &orig) == 0 && orig <= ((uint64_t)16 << 20)) {
            uint8_t *out = malloc(orig ? (size_t)orig : 1u);
            if (out) {
                ibp_codec_file_decompress(copy, size, out, (size_t)orig);
                free(out);
            }
        }
    }
    free(copy);
    /* The input as a top-byte coded run, decoded to the length its header gives. */
    if (size >= 4) {
        const uint32_t orig =
            (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 | (uint32_t)data[3] << 24;
        if (orig <= (1u << 24)) {
            uint8_t *out = malloc(orig ? orig : 1u);
            if (out) {
                const int r = ibp_top_decode(data, size, out, orig);
                if (r != 0 && r != -EBADMSG && r != -ENOMEM)
                    abort();
                free(out);
            }
        }
    }
    /* Plain data through the top-byte coded form: words of 2, 4 or 8 bytes and 32 to 1024 lanes
     * by the first byte; it must decode to the same bytes. */
    if (size) {
        const unsigned w = 2u << (data[0] % 3u), lanes = IBP_TOP_LANES_MIN << (data[0] / 3u % 6u);
        const size_t cap = ibp_top_bound(size, w, lanes);
        uint8_t *run = malloc(cap), *back = malloc(size);
        size_t len = 0;
        if (run && back) {
            if (ibp_top_encode(data, size, w, lanes, run, cap, &len) != 0 ||
                ibp_top_decode(run, len, back, size) != 0 || memcmp(back, data, size))
                abort();
        }
        free(run);
        free(back);
    }
    /* Plain data: compress it (with fixed-width selectors, or the flagged form where shorter, and
     * top-byte coded blocks where shorter, by the input's first byte) and the result must decode
     * to the same bytes.  4 KiB blocks, so that each form is weighed block by block. */
    if (size <= 1024u) {
        void *packed = NULL;
        size_t packed_len = 0;
        const IbpCodecPlanOptions opts = {.block_size = 4096,
                                          .flags =
                                              (size && (data[0] & 1u) ? IBP_CODEC_PLAN_SELECTOR_FLAGS : 0u) |
                                              (size && (data[0] & 2u) ? IBP_CODEC_PLAN_TOP_CODED : 0u)};
        if (ibp_codec_file_compress(data, size, &opts, 1, &packed, &packed_len) == 0) {
            uint8_t *back = malloc(size ? size : 1u);
            if (back) {
                if (ibp_codec_file_decompress(packed, packed_len, back, size) != 0 ||
                    memcmp(back, data, size))
                    abort();
                free(back);
            }
            free(packed);
        }
    }
    return 0;
}
