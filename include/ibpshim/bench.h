/* SPDX-License-Identifier: MIT
 * ibpshim: measuring the compressed path on a GPU (the API behind the ibp-bench tool). */
#ifndef IBPSHIM_BENCH_H
#define IBPSHIM_BENCH_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define IBPSHIM_BENCH_SPLITS_MAX 8
/* Timed rounds at most (IbpshimBenchOptions.iters). */
#define IBPSHIM_BENCH_ITERS_MAX 64
#define IBPSHIM_BENCH_RAW_TAILS_MAX 8

typedef struct IbpshimBenchOptions {
    size_t size;  /* tile the data up to at least this many bytes (0: the data as it is) */
    int iters;    /* timed rounds, after two warm-ups, each running every path once in turn (so that the
                     machine's drift weighs on all alike); each path's median is reported (0: 9) */
    int device;   /* CUDA device ordinal */
    size_t chunk; /* compressed bytes per pipelined chunk (0: as the shim's default, an eighth of the
                     run, at least 16 MiB) */
    int copy_streams; /* streams the pipelined chunks' DMAs alternate over, 1 or 2 (0: 1, as the shim;
                         with 2 the copy engine may run one stream's chunks before the other's, and
                         the decodes, in chunk order, wait for the late ones) */
    unsigned max_sms; /* at most this many CTAs per decode launch, as [transfer] max_sms (0: no bound) */
    int offsets_mapped; /* the decode reads the block offsets from the pinned host table through
                           its mapped address, instead of as the shim does: carried in the launch's
                           arguments (runs of up to 255 blocks), else from a copy in device memory
                           that the DMA paths send before the run */
    size_t tail;        /* pipelined: shrink the last chunks down to about this many compressed bytes
                           (halving what is left once less than two chunks are; half this for runs
                           compressed below 0.7; 0: equal chunks), as the shim's [transfer] pipeline_tail */
    int trace;          /* time each chunk of one more pipelined run (IbpshimBenchResult.trace) */
    int paired;         /* pipelined: each chunk's decode on the stream of its DMA, right after it, two
                           streams alternating (else: the DMAs on copy_streams, the decodes on a stream
                           of their own that waits for each DMA's event) */
    unsigned word_size; /* plan words of this many bytes, 2, 4 or 8 (0: the planner's choice) */
    int decode_streams; /* pipelined, not paired: streams the chunks' decodes go round, 1-4 (0: 1), so
                           that with more a chunk's decode need not wait for the one before's */
    int last_decode_on_copy; /* pipelined: the last chunk's decode on its DMA's stream, right after it
                                (no wait for an event of another stream) */
    int selector_flags;      /* blocks take the flagged selector form where it is smaller
                                (IBP_CODEC_PLAN_SELECTOR_FLAGS); each decode rewrites them first */
    int top_coded;           /* blocks take the top-byte coded form where it is smaller
                                (IBP_CODEC_PLAN_TOP_CODED), as the shim's [policy] top_coded */
    /* Split runs: for each of the first nsplits shares (permille of the run's compressed bytes,
     * 1-1000, whole blocks from its end), that end of the run decoded zero-copy on a stream of its
     * own while the rest goes the pipelined way (DMA then decode when it makes one chunk), both
     * started together, so that the zero-copy reads share the link with the DMA and the decode
     * after the last DMA has less to do.  IbpshimBenchResult.split has the times. */
    unsigned splits[IBPSHIM_BENCH_SPLITS_MAX];
    int nsplits;
    /* Raw tails: for each of the first nraw_tails sizes, the pipelined path with about that many
     * original bytes of the run's end (whole blocks, at least one) sent as they are, a DMA on the
     * last chunk's stream right after it (as the shim sends it; raw_tail_own_stream: on a stream of
     * its own after it), so that the last chunk's decode overlaps a DMA instead of following them
     * all.  IbpshimBenchResult.raw_tail has the times. */
    size_t raw_tails[IBPSHIM_BENCH_RAW_TAILS_MAX];
    int nraw_tails;
    int raw_tail_own_stream;
    size_t shim_raw_tail; /* the shim's [transfer] pipeline_raw_tail to judge its path by
                             (IbpshimBenchResult.shim_raw_tail); 0: none, its default */
} IbpshimBenchOptions;

#define IBPSHIM_BENCH_TRACE_MAX 64

/* One chunk of a traced pipelined run, microseconds from the run's start. */
typedef struct IbpshimBenchChunk {
    size_t compressed; /* bytes the chunk's DMA moved */
    size_t bytes;      /* original bytes its decode wrote */
    double dma_end_us, decode_start_us, decode_end_us;
} IbpshimBenchChunk;

/* One split run (IbpshimBenchOptions.splits). */
typedef struct IbpshimBenchSplit {
    unsigned share;       /* as asked, permille */
    size_t zc_compressed; /* compressed bytes the zero-copy decode read (whole blocks) */
    size_t zc_bytes;      /* original bytes it wrote */
    double gbps;
} IbpshimBenchSplit;

/* One raw tail (IbpshimBenchOptions.raw_tails). */
typedef struct IbpshimBenchRawTail {
    size_t asked;      /* original bytes, as asked */
    size_t bytes;      /* original bytes sent raw: the run's last blocks */
    size_t compressed; /* those blocks' compressed bytes, which were not sent */
    double gbps;
} IbpshimBenchRawTail;

/* GB/s are original bytes per second. */
typedef struct IbpshimBenchResult {
    size_t bytes;            /* original bytes timed */
    size_t compressed;       /* compressed run plus plan */
    double ratio;            /* compressed / bytes */
    double raw_gbps;         /* plain pinned host-to-device copy */
    double dma_only_gbps;    /* the DMA of the run alone, no decode: what no path that sends the run
                                through the copy engine can beat */
    double dma_decode_gbps;  /* DMA of the run, then the decode kernel, on one stream */
    double pipelined_gbps;   /* DMA of chunks overlapped with their decodes (options chunk, copy_streams) */
    double zerocopy_gbps;    /* the kernel reading the pinned run through its mapped address */
    double decode_gbps;      /* decode only, device to device */
    int verified;            /* 1 when every decoded byte matched the input, on the DMA, pipelined and
                                zero-copy paths (each run once before the timing) */
    size_t chunk;            /* the pipelined chunk size used */
    size_t tail;             /* the pipelined tail used (options tail, halved for runs below 0.7) */
    int shim_pipelined;      /* how the shim's dma path copies this run (pipeline_chunk as options
                                chunk, default 16 MiB, pipeline_tail as options tail): 1 pipelined (a
                                run of two chunks), 2 pipelined while no other compressed copy is in
                                flight (a chunk of original bytes and two tails, or a raw tail), 0
                                DMA, then decode */
    size_t shim_raw_tail;    /* original bytes of the run's end that the shim's dma path, with the
                                default pipeline_raw_tail, sends as they are (0: none) */
    int rotation;            /* device buffers cycled through, so that together they exceed twice the L2 */
    unsigned trace_chunks;   /* chunks of the traced run (the first IBPSHIM_BENCH_TRACE_MAX are in trace) */
    double trace_us;         /* the traced run's time, start to the caller's join */
    IbpshimBenchChunk trace[IBPSHIM_BENCH_TRACE_MAX];
    char device_name[96];
    unsigned word_size, columns; /* the plan's word size (bytes) and columns */
    unsigned blocks, top_blocks; /* blocks of the run, and of them those top-byte coded */
    int nsplits;
    IbpshimBenchSplit split[IBPSHIM_BENCH_SPLITS_MAX];
    int nraw_tails;
    IbpshimBenchRawTail raw_tail[IBPSHIM_BENCH_RAW_TAILS_MAX];
} IbpshimBenchResult;

/* Plans and encodes data (shape-blind, as the shim would), then times each path on `device`.
 * Returns 0, -ENODEV (no driver or GPU), -ENOTSUP (built without kernels), -ENOMEM, -EIO (a
 * driver call failed) or a codec error (-EINVAL for a word size other than 0, 2, 4 or 8).  Takes a few
 * seconds per GiB.  Thread-safety: one call at a time per process. */
int ibpshim_bench(const void *data, size_t len, const IbpshimBenchOptions *opts, IbpshimBenchResult *out);

#ifdef __cplusplus
}
#endif

#endif /* IBPSHIM_BENCH_H */
