/* SPDX-License-Identifier: MIT
 * ibpshim: how a pipelined copy splits its compressed run into chunks (the shim and ibp-bench). */
#ifndef IBP_INTERPOSE_PIPE_CHUNKS_H
#define IBP_INTERPOSE_PIPE_CHUNKS_H

#include <stddef.h>
#include <stdint.h>

/* [transfer] pipeline_chunk's default (ibp-bench's too): with chunks of 6-7 MiB a 64 MiB copy of
 * the weights reached 94.6-95.9% of the ideal on the H200, with 16 MiB 95.9-96.7%, since each
 * chunk's copy start-up costs some microseconds. */
#define IBP_PIPE_CHUNK_DEFAULT ((size_t)16 << 20)

/* [transfer] pipeline_raw_tail's default (ibp-bench's --shim-raw-tail too): none.  A copy alone
 * gains from 1 MiB of raw tail (H100, tail on the copy stream: 4-7 MiB copies of the weights and
 * uint8 images 5-16 points of the ideal, 64 MiB ones 1-2), but a table streamed in 4-64 MiB slices
 * copied 0-4% slower with it (1-7% while the tail had a stream of its own), and which copy has
 * none after it is not known when it is enqueued (docs/BENCHMARKS.md). */
#define IBP_PIPE_RAW_TAIL_DEFAULT ((size_t)0)

/* Whether a compressed run of run_len bytes is pipelined with chunks of at least `base` bytes
 * ([transfer] pipeline_chunk; 0: never): when it makes two of them. */
static inline int ibp_pipe_worth(size_t run_len, size_t base)
{
    return base && run_len / 2 >= base;
}

/* Whether a run of less than two chunks is pipelined when no other compressed copy is in flight:
 * with a tail (ibp_pipe_tail(); 0: equal chunks), when its original bytes are at least a chunk and
 * it makes two tails.  A well compressed run holds much more to decode than to copy: on the H200 a
 * single 64 MiB copy of int32 triples (ratio 0.35, a run of 22 MB) reached 0.91 of the ideal
 * pipelined against 0.70 as DMA then decode, of float64 features (ratio 0.1) 0.71 against 0.57;
 * below 16 MiB, or with less than two tails, DMA then decode was as fast or faster (float64
 * features at 16.7 MiB, a run of 1.7 MB: 239 against 228 GB/s).  Copies back to back already
 * overlap one copy's DMA with the last one's decode, and pipelined lost up to 13 points there. */
static inline int ibp_pipe_alone_worth(uint64_t run_len, uint64_t orig_len, size_t base, size_t tail)
{
    return base && tail && orig_len >= base && run_len >= 2 * (uint64_t)tail;
}

/* Whether a compressed run of run_len bytes for orig_len original bytes may keep a raw tail
 * (ibp_pipe_raw_from() says how much), with pipeline_chunk `base` (0: no pipelining, no tail) and
 * the run's pipeline tail: a pipelined run always (ibp_pipe_worth(), ibp_pipe_alone_worth()); one
 * that only its tail would pipeline where it is at least a quarter of its original bytes.  Such a
 * run otherwise goes as DMA then decode; with the tail, the decode overlaps the tail's DMA, and the
 * tail costs (1 - ratio) of its DMA time and a copy start-up.  On the H100, 4-7 MiB copies with
 * 1 MiB of raw tail: int32 triples (ratio 0.36) 0.57-0.58 of the ideal as DMA then decode,
 * 0.63-0.64 with it; float64 features (ratio 0.10) 0.32 and 0.28. */
static inline int ibp_pipe_raw_worth(uint64_t run_len, uint64_t orig_len, size_t base, size_t tail)
{
    return base && (ibp_pipe_worth(run_len, base) || ibp_pipe_alone_worth(run_len, orig_len, base, tail) ||
                    run_len >= orig_len / 4);
}

/* The chunk size a pipelined run aims at: an eighth of the run, at least base (fewer copy
 * start-ups, and enough blocks per chunk to occupy the GPU). */
static inline size_t ibp_pipe_chunk_size(size_t run_len, size_t base)
{
    return run_len / 8 > base ? run_len / 8 : base;
}

/* The tail a run of run_len compressed bytes for orig_len original bytes ends in, from the tail
 * asked for ([transfer] pipeline_tail): half of it where the run is less than 0.7 of the original.
 * The last chunk's decode is the part no DMA hides and takes time by the original bytes, of which
 * a well compressed chunk holds more: with a tail of 1 MiB instead of 2, 16-64 MiB copies on the
 * H200 reached 0.9-5.4 points more of the ideal for uint8 images (ratio 0.6), int32 triples (0.35)
 * and float64 features (0.1) at 64 MiB, and 0.1-1.6 points less for fp32 and bf16 weights
 * (0.76-0.88), whose small chunks copy slower than they decode. */
static inline size_t ibp_pipe_tail(size_t tail, uint64_t run_len, uint64_t orig_len)
{
    return run_len * 10 < orig_len * 7 ? tail / 2 : tail;
}

/* The first block of the raw tail of blocks [first, end) of block_size bytes ([transfer]
 * pipeline_raw_tail): their last blocks, enough for `want` original bytes (fewer where the last
 * block is short), sent as they are after
 * the rest's DMA, so that the decode of the rest's end overlaps a DMA instead of following every
 * one.  `end` (no tail) where none is asked or its blocks would outnumber the rest's. */
static inline uint32_t ibp_pipe_raw_from(uint32_t first, uint32_t end, size_t block_size, size_t want)
{
    const uint64_t n = want && block_size ? (want + block_size - 1) / block_size : 0;
    return n && 2 * n <= (uint64_t)end - first ? end - (uint32_t)n : end;
}

/* The end of the chunk that starts at block b of blocks [b, end), block i's compressed bytes
 * starting at offs[i]: about `chunk` compressed bytes, at least one block.  With tail > 0 the
 * chunks shrink towards the end of the run: once less than two chunks are left each takes half
 * of what is left, and once at most two tails are left the rest goes as one.
 * The decode of the last chunk is the part of a pipelined copy that no DMA hides, so a small last
 * chunk shortens the copy, while each chunk more costs a copy start-up. */
static inline uint32_t ibp_pipe_chunk_end(const uint64_t *offs, uint32_t b, uint32_t end, size_t chunk,
                                          size_t tail)
{
    const uint64_t left = offs[end] - offs[b];
    uint64_t want = chunk;
    if (tail && left < 2 * want)
        want = left <= 2 * (uint64_t)tail ? left : left / 2;
    uint32_t e = b + 1;
    while (e < end && offs[e + 1] - offs[b] <= want)
        e++;
    return e;
}

/* The chunks of blocks [b, end) in that schedule: how many, and the most blocks and compressed
 * bytes any one of them has. */
typedef struct IbpPipeChunks {
    uint32_t count, max_blocks;
    uint64_t max_bytes;
} IbpPipeChunks;

static inline IbpPipeChunks ibp_pipe_chunks(const uint64_t *offs, uint32_t b, uint32_t end, size_t chunk,
                                            size_t tail)
{
    IbpPipeChunks c = {0, 0, 0};
    for (; b < end; c.count++) {
        const uint32_t e = ibp_pipe_chunk_end(offs, b, end, chunk, tail);
        if (e - b > c.max_blocks)
            c.max_blocks = e - b;
        if (offs[e] - offs[b] > c.max_bytes)
            c.max_bytes = offs[e] - offs[b];
        b = e;
    }
    return c;
}

#endif /* IBP_INTERPOSE_PIPE_CHUNKS_H */
