/* SPDX-License-Identifier: MIT
 * ibpshim: IBP block and plan layout, shared by the CPU codec and the CUDA decode kernels. */
#ifndef IBP_CODEC_FORMAT_H
#define IBP_CODEC_FORMAT_H

/* Compiles as C11 and as CUDA C++; includes nothing but fixed-width types and calls no library
 * function.  codec/FORMAT.md is the prose version of this file; keep the two in step. */
#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define IBP_HD __host__ __device__
#else
#define IBP_HD
#endif

/* Written; readers also take versions 1 (blocks without an index) and 2 (without carries). */
#define IBP_FORMAT_VERSION 3u
#define IBP_FORMAT_VERSION_MIN 1u

/* Every section of a block, the plan blob and the file form start on this boundary, so a warp
 * can load them with aligned vector loads. */
#define IBP_ALIGN 16u

#define IBP_MAX_SETS 3u         /* mask sets per column; the selector is 1 bit for 1 set, else 2 */
#define IBP_MAX_COLUMNS 8192u   /* column period C, in words */
#define IBP_MAX_ROW_WORDS 8192u /* row length R (the packed-or-raw unit), in words */
#define IBP_MIN_BLOCK_SIZE 4096u
#define IBP_MAX_BLOCK_SIZE (1u << 24)

/* Per-column transform byte, applied to each word before bit packing (decode undoes it after). */
#define IBP_XF_ZIGZAG 0x1u /* t = (d << 1) ^ (d >> (bits - 1)), arithmetic shift */
#define IBP_XF_PRED_MASK 0x6u
#define IBP_XF_PRED_NONE 0x0u
#define IBP_XF_PRED_DELTA 0x2u /* d = x - x[j - C] modulo 2^bits; 0 before the block's first C words */
#define IBP_XF_PRED_XOR 0x4u   /* d = x ^ x[j - C] */
#define IBP_XF_VALID 0x7u

/* ---- Plan blob: position independent, uploaded once per region. ---- */
#define IBP_PLAN_MAGIC 0x4e4c5049u /* "IPLN" little endian */

typedef struct IbpPlanHeader {
    uint32_t magic;
    uint16_t version;
    uint8_t word_size;   /* W: 2, 4 or 8 bytes */
    uint8_t nsets;       /* K: 1..IBP_MAX_SETS */
    uint32_t columns;    /* C: mask period in words */
    uint32_t row_words;  /* R: words per row */
    uint32_t block_size; /* bytes of original data per block (last block shorter) */
    uint32_t blob_len;   /* whole blob, multiple of IBP_ALIGN */
    uint32_t xform_off;  /* C transform bytes */
    uint32_t mask_off;   /* K*C entries {mask, value}, each W bytes little endian, set-major */
} IbpPlanHeader;

/* ---- Block: header, then sections at the offsets it names. ---- */
#define IBP_BLOCK_RAW 0x1u     /* the original bytes follow the header verbatim */
#define IBP_BLOCK_INDEXED 0x2u /* a group index lies between the header and the row flags */
#define IBP_BLOCK_CARRIES 0x4u /* with INDEXED: the index's carries follow its entries */
/* The selector section holds the flagged form (FORMAT.md, "Flagged selectors") instead of
 * fixed-width selectors.  Written only for plans made with IBP_CODEC_PLAN_SELECTOR_FLAGS; on the
 * GPU a pass rewrites it in the fixed-width form before the decode (kernels/module.h
 * IBP_DECODE_SELFLAGS). */
#define IBP_BLOCK_SELFLAGS 0x8u
/* The block's bytes as a top-byte coded run (FORMAT.md, "Top-byte coded runs") at
 * IBP_BLOCK_HEADER_SIZE, to comp_len; the flag alone, every other header field 0 but orig_len and
 * comp_len.  Written only for plans made with IBP_CODEC_PLAN_TOP_CODED (the shim's under [policy]
 * top_coded); on the GPU ibp_k_decode_top decodes it (kernels/module.h IBP_DECODE_TOPCODED). */
#define IBP_BLOCK_TOPCODED 0x10u

/* The group index of a packed block: for g = 1 .. ceil(words / IBP_INDEX_WORDS) - 1, a u32 with
 * the payload bit offset of word g * IBP_INDEX_WORDS, so that a decoder starting there needs no
 * count of the fields before it. */
#define IBP_INDEX_WORDS 4096u

/* The carries of an indexed block of a plan of at most IBP_CARRY_MAX_COLUMNS columns with P > 0
 * predictor columns: for each entry g, the P original words among g * IBP_INDEX_WORDS - C ..
 * g * IBP_INDEX_WORDS - 1 whose column has a predictor, in order, W bytes each, so that a decoder
 * starting at an entry has every predecessor it needs. */
#define IBP_CARRY_MAX_COLUMNS 32u

/* The most runs of contiguous variant bits (bits a mask set leaves variant) that the GPU decode
 * rebuilds with a shift and a mask each: IBP_GPU_RUNS in a word of 2 or 4 bytes, IBP_GPU_RUNS_HALF
 * in each 32-bit half of an 8-byte word.  The planner keeps masks within them where that costs
 * little; the GPU decodes a plan with any other mask by its slower general path, every word. */
#define IBP_GPU_RUNS 4u
#define IBP_GPU_RUNS_HALF 2u

typedef struct IbpBlockHeader {
    uint32_t orig_len;    /* original bytes in this block */
    uint32_t comp_len;    /* bytes of this block including the header, multiple of IBP_ALIGN */
    uint32_t flags;       /* IBP_BLOCK_* */
    uint32_t col_phase;   /* column of the block's first word: (block offset / W) mod C */
    uint32_t rowflag_off; /* one bit per row, 1 = packed; the group index (if any) before it */
    uint32_t payload_off; /* bit stream of words: packed fields and whole words */
    uint32_t sel_off;     /* selector bits of the words of packed rows, in order */
    uint32_t tail_off;    /* orig_len % W trailing bytes, verbatim */
} IbpBlockHeader;

#define IBP_BLOCK_HEADER_SIZE 32u

/* ---- Stand-alone file form: header, plan blob, block table, blocks (all 16-aligned). ---- */
#define IBP_FILE_MAGIC 0x46504249u /* "IBPF" little endian */

typedef struct IbpFileHeader {
    uint32_t magic;
    uint16_t version;
    uint16_t header_size; /* sizeof(IbpFileHeader) */
    uint64_t orig_len;
    uint32_t block_size;
    uint32_t nblocks;
    uint32_t plan_off;
    uint32_t plan_len;
    uint64_t table_off; /* nblocks IbpFileBlock entries */
    uint64_t file_len;
    uint32_t meta_crc;  /* CRC-32C of header (this field 0), plan blob and block table */
    uint32_t reserved;  /* 0 */
    uint64_t reserved2; /* 0 */
} IbpFileHeader;

typedef struct IbpFileBlock {
    uint64_t offset; /* from the start of the file, multiple of IBP_ALIGN */
    uint32_t comp_len;
    uint32_t crc; /* CRC-32C of the block's original bytes */
} IbpFileBlock;

/* Bit streams (row flags, selectors, payload) are little endian: bit i of a stream is bit
 * (i % 8) of byte (i / 8); a field of n bits at bit offset o holds its least significant bit at o. */

/* Whether a block with these header flags holds its selectors in the flagged form (a raw block
 * holds none). */
IBP_HD static inline int ibp_fmt_selflags(uint32_t flags)
{
    return (flags & IBP_BLOCK_SELFLAGS) && !(flags & IBP_BLOCK_RAW);
}

IBP_HD static inline uint32_t ibp_fmt_round16(uint32_t n)
{
    return (n + (IBP_ALIGN - 1u)) & ~(IBP_ALIGN - 1u);
}

/* Bytes of the group index of a block of nwords words (padded to IBP_ALIGN; 0 for one group). */
IBP_HD static inline uint32_t ibp_fmt_index_len(uint32_t nwords)
{
    const uint32_t groups = (nwords + IBP_INDEX_WORDS - 1u) / IBP_INDEX_WORDS;
    return groups > 1u ? ibp_fmt_round16(4u * (groups - 1u)) : 0u;
}

/* Bytes of the carries of a block of nwords words of a plan whose carries are pred_words words of
 * word_size bytes an entry (padded to IBP_ALIGN; 0 for one group). */
IBP_HD static inline uint32_t ibp_fmt_carry_len(uint32_t nwords, uint32_t pred_words, uint32_t word_size)
{
    const uint32_t groups = (nwords + IBP_INDEX_WORDS - 1u) / IBP_INDEX_WORDS;
    return groups > 1u ? ibp_fmt_round16((groups - 1u) * pred_words * word_size) : 0u;
}

IBP_HD static inline uint32_t ibp_fmt_sel_bits(uint32_t nsets)
{
    return nsets > 1u ? 2u : 1u;
}

IBP_HD static inline uint64_t ibp_fmt_word_mask(uint32_t word_size)
{
    return word_size >= 8u ? ~(uint64_t)0 : (((uint64_t)1 << (word_size * 8u)) - 1u);
}

IBP_HD static inline uint64_t ibp_fmt_zigzag(uint64_t d, uint32_t word_size)
{
    const uint32_t bits = word_size * 8u;
    const uint64_t sign = (d >> (bits - 1u)) & 1u;
    return ((d << 1) ^ (uint64_t)(0u - sign)) & ibp_fmt_word_mask(word_size);
}

IBP_HD static inline uint64_t ibp_fmt_unzigzag(uint64_t t, uint32_t word_size)
{
    return ((t >> 1) ^ (uint64_t)(0u - (t & 1u))) & ibp_fmt_word_mask(word_size);
}

#endif /* IBP_CODEC_FORMAT_H */
