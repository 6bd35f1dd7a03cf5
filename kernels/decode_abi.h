/* SPDX-License-Identifier: MIT
 * ibpshim: the argument block of the decode kernels, shared by the CUDA kernels, the launchers
 * and the CPU implementation the fake driver runs in tests. */
#ifndef IBP_KERNELS_DECODE_ABI_H
#define IBP_KERNELS_DECODE_ABI_H

#include <stdint.h>

#if defined(__CUDACC__)
#define IBP_DECODE_HD __host__ __device__
#else
#define IBP_DECODE_HD
#endif

/* Block offsets a launch can carry in its arguments: runs of up to 255 blocks (64 MiB of 256 KiB
 * blocks) need no offset table in device memory, so no copy of one and no reads of the pinned
 * table across PCIe. */
#define IBP_DECODE_INLINE_OFFSETS 256u

/* One launch decodes a run of consecutive blocks of one region into [dst, dst + len).  Passed
 * by value as the kernels' only parameter. */
typedef struct IbpDecodeArgs {
    uint64_t comp;     /* device address of the run's first block (staging buffer or mapped shadow) */
    uint64_t offsets;  /* device address of the run's nblocks + 1 block offsets (relative to offsets[0]);
                        * unused when inline_offsets is set */
    uint64_t plan;     /* device address of the plan blob (codec/format.h IbpPlanHeader ...) */
    uint64_t dst;      /* device address receiving original bytes [skip, skip + len) of the run */
    uint64_t len;
    uint64_t skip; /* original bytes of the run's first block that precede dst */
    uint64_t scratch; /* device scratch of ibp_decode_scratch_bytes(), or 0 */
    uint64_t selx;    /* with blocks of flagged selectors (codec/format.h IBP_BLOCK_SELFLAGS): device
                       * memory of ibp_decode_selx_bytes() where ibp_k_decode_unflag rewrites their
                       * selectors in the fixed-width form for the decode to read; else 0 */
    uint32_t nblocks;
    uint32_t block_size;
    uint32_t flags; /* IBP_DECODE_ARG_*, set by the launcher */
    uint32_t inline_offsets;                 /* 1: rel[] holds the nblocks + 1 offsets */
    uint32_t unflag_words; /* ibp_k_decode_unflag's share size (ibp_decode_unflag_words()), set by
                            * the launcher */
    uint32_t rel[IBP_DECODE_INLINE_OFFSETS]; /* block offsets minus the first block's */
} IbpDecodeArgs;

/* Whether a launch can carry the offsets of nblocks blocks whose compressed bytes span `span`. */
static inline int ibp_decode_offsets_fit(uint32_t nblocks, uint64_t span)
{
    return nblocks + 1u <= IBP_DECODE_INLINE_OFFSETS && span <= UINT32_MAX;
}

/* Puts the run's nblocks + 1 block offsets (offs[0] the first block's) into the arguments when
 * they fit; returns whether they did. */
static inline int ibp_decode_inline_offsets(IbpDecodeArgs *a, const uint64_t *offs)
{
    if (!ibp_decode_offsets_fit(a->nblocks, offs[a->nblocks] - offs[0]))
        return 0;
    for (uint32_t i = 0; i <= a->nblocks; i++)
        a->rel[i] = (uint32_t)(offs[i] - offs[0]);
    a->inline_offsets = 1;
    return 1;
}

/* Bytes of IbpDecodeArgs.selx a block of the run takes: room for two selector bits a word,
 * 16-aligned.  Block bi's selectors start at bi times this. */
static inline IBP_DECODE_HD uint32_t ibp_decode_selx_stride(uint32_t word_size, uint32_t block_size)
{
    return (block_size / word_size / 4u + 15u) & ~15u;
}

static inline IBP_DECODE_HD uint64_t ibp_decode_selx_bytes(uint32_t word_size, uint32_t block_size,
                                                           uint32_t nblocks)
{
    return (uint64_t)nblocks * ibp_decode_selx_stride(word_size, block_size);
}

/* 32-bit words of a flagged block's rewritten selectors a CTA of ibp_k_decode_unflag takes (a
 * block whose rows are all packed is split among CTAs; one with raw rows goes to one CTA whole):
 * a power of two from MIN to MAX, whole rounds of the CTA's threads.  Larger shares pay the
 * counting of the flags and planes before them less often; smaller ones put more CTAs, each with
 * fewer dependent rounds, on a run of few blocks. */
#define IBP_DECODE_UNFLAG_WORDS_MIN 256u
#define IBP_DECODE_UNFLAG_WORDS_MAX 2048u
/* CTAs a multiprocessor of ibp_k_decode_unflag: its launch bounds and the launcher's grid cap. */
#define IBP_DECODE_UNFLAG_CTAS_PER_SM 4u

/* Shares of share_words words a block has. */
static inline IBP_DECODE_HD uint32_t ibp_decode_unflag_shares(uint32_t word_size, uint32_t block_size,
                                                              uint32_t share_words)
{
    return (ibp_decode_selx_stride(word_size, block_size) / 4u + share_words - 1) / share_words;
}

/* The share size for a run of nblocks blocks on a device that holds `resident` CTAs of
 * ibp_k_decode_unflag at once: the largest whose shares still fill it, MIN where none does. */
static inline uint32_t ibp_decode_unflag_words(uint32_t word_size, uint32_t block_size, uint32_t nblocks,
                                               uint32_t resident)
{
    uint32_t words = IBP_DECODE_UNFLAG_WORDS_MAX;
    while (words > IBP_DECODE_UNFLAG_WORDS_MIN &&
           (uint64_t)nblocks * ibp_decode_unflag_shares(word_size, block_size, words) < resident)
        words /= 2;
    return words;
}

/* ibp_k_decode_count ran before with the same grid: each CTA's payload bits of its share's last
 * block are in the scratch. */
#define IBP_DECODE_ARG_COUNTED 1u

/* ibp_k_decode_top copies the run's raw blocks too: no other decode kernel runs on it. */
#define IBP_DECODE_ARG_TOP_RAW 2u

/* CTAs a multiprocessor of ibp_k_decode_top (its launch bounds and the launcher's grid cap): each
 * holds a 16 KiB slot table in shared memory. */
#define IBP_DECODE_TOP_CTAS_PER_SM 3u

/* Threads per CTA of every decode kernel. */
#define IBP_DECODE_THREADS 256

/* Segment buffers (below) for one column of 4-byte words and for several columns of 8-byte words
 * (0 turns one off; with it on, the one-column kernel runs at three CTAs a multiprocessor, for want
 * of shared memory at four).  On an H100 they took float64 features' decode from 730-900 to
 * 1180-1580 GB/s and bf16's up 2-5% (docs/BENCHMARKS.md, "Segment buffers for bf16 and float64
 * features"). */
#ifndef IBP_DECODE_SEG1_VIA
#define IBP_DECODE_SEG1_VIA 1
#endif
#ifndef IBP_DECODE_SEGW8_VIA
#define IBP_DECODE_SEGW8_VIA 1
#endif

/* CTAs a multiprocessor of ibp_k_decode_seg1 (one-column plans of 2- and 4-byte words),
 * ibp_k_decode_seg1w8 (one column of 8-byte words), ibp_k_decode_seg (more columns of 2- and
 * 4-byte words) and ibp_k_decode_segw8 (more columns of 8-byte words): the kernels' launch bounds
 * and the launcher's grid cap.  At three (80 registers, no spill) several columns of 4-byte words
 * decoded faster than at two (uint8 images, from 18 MiB), and so did those of 8-byte words (float64
 * features, 1-5%) once their kernel was compiled without the narrower paths (together they had
 * lost 25%). */
#define IBP_DECODE_SEG1_CTAS_PER_SM (IBP_DECODE_SEG1_VIA ? 3u : 4u)
#define IBP_DECODE_SEG1W8_CTAS_PER_SM 3u
#define IBP_DECODE_SEG_CTAS_PER_SM 3u
#define IBP_DECODE_SEGW8_CTAS_PER_SM 3u

/* Dynamic shared memory the segmented kernels without predictors store their segments through
 * for words of w bytes: a segment for each warp.  Launched without it, a kernel stores from the
 * lanes' runs.  The word sizes (each size's bit) each kernel has that path for: both ways of
 * storing in one kernel spill the several-column kernel of 2- and 4-byte words (80 registers),
 * and the one-column one at four CTAs a multiprocessor (64 registers; at three, 2-byte words). */
#define IBP_DECODE_VIA_BYTES(w) (IBP_DECODE_THREADS / 32 * IBP_DECODE_SEG_WORDS * (unsigned)(w))
/* The predictor kernel's segment buffers: 16 bytes of padding after every 128 of a segment of
 * words narrower than 8 bytes (with 8-byte words three CTAs a multiprocessor would not fit). */
#define IBP_DECODE_SEGP_BYTES(w) (IBP_DECODE_VIA_BYTES(w) + ((w) < 8u ? IBP_DECODE_VIA_BYTES(w) / 8u : 0u))
#define IBP_DECODE_SEG1_VIA_WORDS (IBP_DECODE_SEG1_VIA ? 4u : 0u)
#define IBP_DECODE_SEG1W8_VIA_WORDS 8u
#define IBP_DECODE_SEG_VIA_WORDS 0u
#define IBP_DECODE_SEGW8_VIA_WORDS (IBP_DECODE_SEGW8_VIA ? 8u : 0u)

/* CTAs a multiprocessor of ibp_k_decode_segp, the segmented decode of plans with predictor columns
 * of a period of at most IBP_DECODE_PRED_MAX_COLUMNS words: three (80 registers) where two (128)
 * left a decode of 4-5 MiB two rounds of CTAs for one and a few groups. */
#define IBP_DECODE_SEGP_CTAS_PER_SM 3u
#define IBP_DECODE_PRED_MAX_COLUMNS 32u
/* Plans of several columns of 2- and 4-byte words with more mask table entries ((sets + 1) *
 * columns) than this take ibp_k_decode_segs or ibp_k_decode_segps, whose table is sliced by
 * words: a quarter warp's loads of it meet in no bank for up to 32 entries, where the 16-byte
 * parts of the other kernels' table meet for entries 8 apart.  Up to 8 entries parts cannot meet
 * and take two loads a word where slices take seven.  Sliced, uint8 images (28 entries) decode
 * 15-20% faster and int32 triples (12) as fast (H200, docs/BENCHMARKS.md). */
#define IBP_DECODE_PARTS_ENTRIES_MAX 8u

/* The segmented kernels' scratch: the decoded words straddling the ends of dst, then a record per
 * CTA: the predictor state at the end of its share of the run (a carry per column residue, read
 * by ibp_k_decode_fix) and the payload bits of the share's part of its last block (written by
 * ibp_k_decode_count), each with whether it counts only the share (which then lies inside one
 * block and starts after its start). */
#define IBP_DECODE_SCRATCH_HEADER 16u
#define IBP_DECODE_SCRATCH_RECORD (8u * IBP_DECODE_PRED_MAX_COLUMNS + 16u)

static inline IBP_DECODE_HD uint64_t ibp_decode_scratch_size(uint32_t ctas)
{
    return IBP_DECODE_SCRATCH_HEADER + (uint64_t)ctas * IBP_DECODE_SCRATCH_RECORD;
}

/* ibp_k_decode_seg gives each warp a segment of this many words of a block, so that a few blocks
 * still spread over every SM. */
#define IBP_DECODE_SEG_WORDS 512u

static inline IBP_DECODE_HD uint32_t ibp_decode_segments(uint32_t word_size, uint32_t block_size)
{
    return (block_size / word_size + IBP_DECODE_SEG_WORDS - 1) / IBP_DECODE_SEG_WORDS;
}

/* The clipped edges of a copy that go as they are ([transfer] edge_kernel): up to two byte ranges
 * ibp_k_copy_edges copies on the application's stream from its pinned source, read by the
 * source's device address, to the destination; an edge of length 0 is none.  Passed by value as
 * the kernel's only parameter.  Each range goes in 16-byte accesses where its source and
 * destination agree modulo 16, in 4-byte ones where they agree modulo 4, else byte by byte. */
typedef struct IbpEdgeArgs {
    uint64_t src[2];
    uint64_t dst[2];
    uint64_t len[2];
} IbpEdgeArgs;

#define IBP_EDGE_THREADS 256u
/* Bytes a CTA of ibp_k_copy_edges moves of an edge at most: a 16-byte access a thread, four times
 * over. */
#define IBP_EDGE_CTA_BYTES (IBP_EDGE_THREADS * 16u * 4u)

/* The grid of ibp_k_copy_edges for edges of len0 and len1 bytes: CTA i copies part of edge i % 2,
 * the same number of CTAs taking each. */
static inline uint32_t ibp_edge_grid(uint64_t len0, uint64_t len1)
{
    const uint64_t n = len0 > len1 ? len0 : len1;
    const uint64_t ctas = (n + IBP_EDGE_CTA_BYTES - 1) / IBP_EDGE_CTA_BYTES;
    return 2u * (ctas > 32768u ? 32768u : ctas ? (uint32_t)ctas : 1u);
}

#endif /* IBP_KERNELS_DECODE_ABI_H */
