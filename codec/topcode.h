/* SPDX-License-Identifier: MIT
 * ibpshim: the top-byte coded form (codec/FORMAT.md, "Top-byte coded runs"): each word's most
 * significant byte (a float's sign and exponent bits) coded with interleaved rANS in lanes a warp
 * decodes together, the other bytes stored as they are in byte planes.  Where IBP stores the
 * exponent in whole bits a word and a selector, this codes it at its entropy: fp32 and bf16
 * weights compress 2-6% smaller (docs/BENCHMARKS.md).  Blocks take it for plans made with
 * IBP_CODEC_PLAN_TOP_CODED (topcode.c, ibp_block_encode_any); the GPU decodes them with
 * ibp_k_decode_top (kernels/decode.cu). */
#ifndef IBP_CODEC_TOPCODE_H
#define IBP_CODEC_TOPCODE_H

#include <stddef.h>
#include <stdint.h>

/* Lanes a run may be coded in: a power of two in [IBP_TOP_LANES_MIN, IBP_TOP_LANES_MAX]; lanes go
 * in groups of 32 (a warp), each group with a stream of its own. */
#define IBP_TOP_LANES_MIN 32u
#define IBP_TOP_LANES_MAX 1024u
#define IBP_TOP_LANES_DEFAULT 256u

/* rANS: 12-bit frequencies, states in [2^16, 2^32) renormalised 16 bits at a time. */
#define IBP_TOP_SCALE_BITS 12u
#define IBP_TOP_STATE_LOW (1u << 16)

/* The header of a coded run, 16 bytes. */
typedef struct IbpTopHeader {
    uint32_t orig_len;     /* original bytes: orig_len / word_size words, orig_len % word_size tail */
    uint32_t stream_bytes; /* bytes of all groups' streams, even */
    uint16_t lanes;
    uint8_t word_size; /* 2, 4 or 8 */
    uint8_t symbols;   /* distinct top bytes minus one (0 where the run has no word) */
    uint32_t reserved; /* 0 */
} IbpTopHeader;

/* Bytes ibp_top_encode() writes at most for n bytes in words of w bytes, in `lanes` lanes. */
size_t ibp_top_bound(size_t n, unsigned w, unsigned lanes);

/* Codes n bytes of src (words of w = 2, 4 or 8 bytes, n < 2^32) in `lanes` lanes into out (cap
 * bytes, at least ibp_top_bound()); *out_len gets the bytes written.  0, -EINVAL for bad
 * arguments, -ENOBUFS when cap is short, -ENOMEM. */
int ibp_top_encode(const void *src, size_t n, unsigned w, unsigned lanes, void *out, size_t cap,
                   size_t *out_len);

/* Decodes a coded run of len bytes into dst, which takes n bytes, the run's original length.
 * 0, or -EBADMSG when the run is malformed, is not exactly len bytes, or decodes to another
 * length; every read stays inside [in, in + len) whatever its bytes.  -ENOMEM. */
int ibp_top_decode(const void *in, size_t len, void *dst, size_t n);

#endif /* IBP_CODEC_TOPCODE_H */
