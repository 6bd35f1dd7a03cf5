/* SPDX-License-Identifier: MIT
 * ibpshim: measuring the compressed path on a GPU (the API behind the ibp-bench tool). */
#include "ibpshim/bench.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codec/format.h"
#include "ibpshim/codec.h"
#include "interpose/pipe_chunks.h"
#include "kernels/decode_abi.h"
#include "kernels/driver.h"
#include "kernels/module.h"

#define BENCH_EVENTS 64
#define BENCH_MAX_ITERS IBPSHIM_BENCH_ITERS_MAX
#define BENCH_MAX_ROTATION 64
#define BENCH_DECODE_STREAMS 4
/* Stream-bound buffers: s_copy, s_copy2, s_dec[], s_zc. */
#define BENCH_SLOTS (3 + BENCH_DECODE_STREAMS)
/* ev[]: a chunk's each, then the pipelined run's start and its joins, then a split run's start and
 * zero-copy end. */
#define BENCH_EV_COUNT (BENCH_EVENTS + 4 + BENCH_DECODE_STREAMS)

typedef struct Bench {
    const IbpDriver *drv;
    const IbpModule *mod;
    size_t total, run_len, blob_len, block_size;
    uint32_t nblocks;
    uint8_t *src;         /* pinned original bytes */
    uint8_t *run;         /* pinned compressed blocks, back to back */
    uint64_t *offsets;    /* pinned, nblocks + 1 */
    unsigned word_size, columns, nsets;
    int has_pred;
    CUdeviceptr d_run, d_plan, d_out;
    CUdeviceptr d_offsets_mapped; /* the pinned offsets' device address */
    CUdeviceptr d_offsets;        /* where the DMA paths' decodes read them */
    size_t offsets_len;
    size_t run_stride, out_stride; /* between the rotation's copies of d_run and d_out */
    int rotation;                  /* copies of each, together more than twice the L2 */
    unsigned max_sms;
    /* The decode's scratch, one for each stream a decode may run on: s_copy, s_copy2, s_dec[];
     * s_zc; and with flagged selectors, where each stream's decodes rewrite them. */
    CUdeviceptr d_scratch[BENCH_SLOTS];
    CUdeviceptr d_selx[BENCH_SLOTS];
    int flagged; /* some block took the flagged form: decodes rewrite the selectors (as the shim) */
    uint32_t top_blocks, packed_blocks; /* blocks top-byte coded, and neither that nor raw */
    CUstream s_copy, s_copy2, s_dec[BENCH_DECODE_STREAMS];
    CUstream s_zc;  /* a split run's zero-copy decode */
    uint32_t split; /* a split run's first block decoded zero-copy */
    CUevent t0, t1;
    CUevent ev[BENCH_EV_COUNT];
    size_t chunk, tail;
    int copy_streams;
    int decode_streams; /* pipelined chunks' decodes go round these streams */
    int paired;        /* a chunk's decode follows its DMA on the same stream, two streams alternating */
    int last_on_copy;  /* the last chunk's decode follows its DMA on the same stream */
    int tail_own_stream; /* a raw rest goes on a stream of its own after the last chunk's DMA */
    int chunks_inline; /* every pipelined chunk's launch carries its offsets: no table sent */
    /* A traced pipelined run: per chunk, timing events after its DMA, before and after its decode. */
    CUevent tr[IBPSHIM_BENCH_TRACE_MAX][3];
    int tracing;
} Bench;

/* The first block of the run's end that holds about `share` permille of its compressed bytes
 * (at least one block for a share above 0). */
static uint32_t split_at(const Bench *b, unsigned share)
{
    const uint64_t want = (uint64_t)b->run_len * share / 1000u;
    uint32_t s = b->nblocks;
    while (s > 0 && (s == b->nblocks ? share > 0 : b->run_len - b->offsets[s - 1] <= want))
        s--;
    return s;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Which of the per-stream buffers decodes on stream s take: no two decodes that may run at once
 * share one. */
static int stream_slot(const Bench *b, CUstream s)
{
    for (int i = 0; i < BENCH_DECODE_STREAMS; i++)
        if (s == b->s_dec[i])
            return 2 + i;
    return s == b->s_zc ? 2 + BENCH_DECODE_STREAMS : s != b->s_copy;
}

static int decode(const Bench *b, CUdeviceptr comp, CUdeviceptr offsets, CUdeviceptr out, uint32_t first,
                  uint32_t count, uint64_t len, CUstream s)
{
    IbpDecodeArgs a = {.comp = comp,
                       .offsets = offsets + (CUdeviceptr)first * 8,
                       .plan = b->d_plan,
                       .dst = out + (CUdeviceptr)first * b->block_size,
                       .len = len,
                       .skip = 0,
                       .scratch = b->d_scratch[stream_slot(b, s)],
                       .selx = b->flagged ? b->d_selx[stream_slot(b, s)] : 0,
                       .nblocks = count,
                       .block_size = (uint32_t)b->block_size};
    if (b->d_offsets != b->d_offsets_mapped)
        ibp_decode_inline_offsets(&a, b->offsets + first);
    const unsigned flags = IBP_DECODE_INDEXED |
                           (b->has_pred ? IBP_DECODE_PRED : 0u) |    /* blocks encoded here */
                           (b->flagged ? IBP_DECODE_SELFLAGS : 0u) | /* the decode the shim asks for */
                           ibp_decode_top_flag(b->top_blocks != 0, b->packed_blocks != 0);
    return ibp_decode_launch(b->mod, &a, b->word_size, b->columns, b->nsets, flags, b->max_sms, s);
}

static uint64_t span(const Bench *b, uint32_t first, uint32_t end)
{
    const uint64_t hi = (uint64_t)end * b->block_size;
    return (hi < b->total ? hi : b->total) - (uint64_t)first * b->block_size;
}

/* As the shim does, launches carry the offsets of runs that fit their arguments, and the DMA paths
 * send the table ahead of the run when the run does not (unless they are read mapped). */
static int send_offsets(const Bench *b, CUstream s)
{
    if (b->d_offsets == b->d_offsets_mapped || ibp_decode_offsets_fit(b->nblocks, b->run_len))
        return 0;
    return b->drv->cuMemcpyHtoDAsync(b->d_offsets, b->offsets, b->offsets_len, s) == CUDA_SUCCESS ? 0 : -EIO;
}

/* The pipelined path over blocks [0, end) of the run, its clock on s_copy. */
static int run_pipelined(const Bench *b, CUdeviceptr d_run, CUdeviceptr d_out, uint32_t end, int raw_rest)
{
    const IbpDriver *drv = b->drv;
    /* Chunks of about b->chunk compressed bytes: each chunk's DMA on s_copy (or alternating
     * over s_copy and s_copy2), its decode once its DMA is done on a decode stream (chunk k on
     * s_dec[k % decode_streams], so with more than one a decode need not wait for the chunk
     * before's), the last one's with last_on_copy on its DMA's stream right after it; paired:
     * each chunk's DMA and then its decode on one stream, s_copy and s_copy2 alternating.  With
     * raw_rest, blocks [end, nblocks) follow as they are, a DMA of their original bytes after the
     * last chunk's, which the last decode then overlaps. */
    const int ndec = b->paired ? 0 : b->decode_streams;
    CUevent start = b->ev[BENCH_EVENTS];
    if (drv->cuEventRecord(start, b->s_copy) != CUDA_SUCCESS ||
        drv->cuStreamWaitEvent(b->s_copy2, start, 0) != CUDA_SUCCESS ||
        (!b->chunks_inline && send_offsets(b, b->s_copy)))
        return -EIO;
    for (int i = 0; i < ndec; i++)
        if (drv->cuStreamWaitEvent(b->s_dec[i], start, 0) != CUDA_SUCCESS)
            return -EIO;
    int err = 0;
    uint32_t s = 0, k = 0;
    CUstream last_cs = b->s_copy;
    while (!err && s < end) {
        const uint32_t e = ibp_pipe_chunk_end(b->offsets, s, end, b->chunk, b->tail);
        const CUstream cs = (k & 1) && (b->copy_streams > 1 || b->paired) ? b->s_copy2 : b->s_copy;
        last_cs = cs;
        const int on_copy = b->paired || (b->last_on_copy && e == end);
        const CUstream ds = on_copy ? cs : b->s_dec[k % (uint32_t)ndec];
        const CUevent ev = b->ev[k % BENCH_EVENTS];
        const int tr = b->tracing && k < IBPSHIM_BENCH_TRACE_MAX;
        if (drv->cuMemcpyHtoDAsync(d_run + b->offsets[s], b->run + b->offsets[s],
                                   b->offsets[e] - b->offsets[s], cs) != CUDA_SUCCESS ||
            (tr && drv->cuEventRecord(b->tr[k][0], cs) != CUDA_SUCCESS) ||
            (!on_copy && (drv->cuEventRecord(ev, cs) != CUDA_SUCCESS ||
                          drv->cuStreamWaitEvent(ds, ev, 0) != CUDA_SUCCESS)) ||
            (tr && drv->cuEventRecord(b->tr[k][1], ds) != CUDA_SUCCESS))
            err = -EIO;
        else
            err = decode(b, d_run + b->offsets[s], b->d_offsets, d_out, s, e - s, span(b, s, e), ds);
        if (!err && tr && drv->cuEventRecord(b->tr[k][2], ds) != CUDA_SUCCESS)
            err = -EIO;
        s = e;
        k++;
    }
    /* As in the shim, the raw rest goes right after the last chunk's DMA on its stream; or with
     * tail_own_stream on a stream of its own (s_zc, idle in this path) after that DMA, and s_copy
     * waits for it. */
    const CUevent chunks_done = b->ev[BENCH_EV_COUNT - 2], rest_done = b->ev[BENCH_EV_COUNT - 1];
    const CUstream rs = b->tail_own_stream ? b->s_zc : last_cs;
    if (!err && raw_rest && end < b->nblocks &&
        ((rs != last_cs && (drv->cuEventRecord(chunks_done, last_cs) != CUDA_SUCCESS ||
                            drv->cuStreamWaitEvent(rs, chunks_done, 0) != CUDA_SUCCESS)) ||
         drv->cuMemcpyHtoDAsync(d_out + (CUdeviceptr)end * b->block_size,
                                b->src + (size_t)end * b->block_size, span(b, end, b->nblocks),
                                rs) != CUDA_SUCCESS ||
         (rs != last_cs && (drv->cuEventRecord(rest_done, rs) != CUDA_SUCCESS ||
                            drv->cuStreamWaitEvent(b->s_copy, rest_done, 0) != CUDA_SUCCESS))))
        err = -EIO;
    /* s_copy, which carries the clock, waits for the other streams' last work. */
    CUstream others[1 + BENCH_DECODE_STREAMS];
    int nothers = 0;
    for (int i = 0; i < ndec; i++)
        others[nothers++] = b->s_dec[i];
    if (b->paired || b->copy_streams > 1)
        others[nothers++] = b->s_copy2;
    for (int i = 0; !err && i < nothers; i++) {
        const CUstream last = others[i];
        const CUevent done = b->ev[BENCH_EVENTS + 1 + i];
        if (drv->cuEventRecord(done, last) != CUDA_SUCCESS ||
            drv->cuStreamWaitEvent(b->s_copy, done, 0) != CUDA_SUCCESS)
            err = -EIO;
    }
    return err;
}

/* One run of `path`: 0 raw, 1 DMA + decode, 2 pipelined, 3 zero-copy, 4 decode only, 5 split at
 * b->split, 6 the DMA of the run alone, 7 blocks [0, b->split) pipelined and the rest raw; into
 * copy `slot` of the rotation. */
static int run_path(const Bench *b, int path, CUdeviceptr zc_run, int slot)
{
    const IbpDriver *drv = b->drv;
    const CUdeviceptr d_run = b->d_run + (CUdeviceptr)slot * b->run_stride;
    const CUdeviceptr d_out = b->d_out + (CUdeviceptr)slot * b->out_stride;
    switch (path) {
    case 0:
        return drv->cuMemcpyHtoDAsync(d_out, b->src, b->total, b->s_copy) == CUDA_SUCCESS ? 0 : -EIO;
    case 1:
        if (send_offsets(b, b->s_copy) ||
            drv->cuMemcpyHtoDAsync(d_run, b->run, b->run_len, b->s_copy) != CUDA_SUCCESS)
            return -EIO;
        return decode(b, d_run, b->d_offsets, d_out, 0, b->nblocks, b->total, b->s_copy);
    case 2:
        return run_pipelined(b, d_run, d_out, b->nblocks, 0);
    case 5: {
        /* Split: blocks [split, nblocks) decoded zero-copy on s_zc, launched first, the rest
         * pipelined; s_copy waits for both. */
        const CUevent start = b->ev[BENCH_EV_COUNT - 2], zc_done = b->ev[BENCH_EV_COUNT - 1];
        if (b->split < b->nblocks &&
            (drv->cuEventRecord(start, b->s_copy) != CUDA_SUCCESS ||
             drv->cuStreamWaitEvent(b->s_zc, start, 0) != CUDA_SUCCESS ||
             decode(b, zc_run + b->offsets[b->split], b->d_offsets_mapped, d_out, b->split,
                    b->nblocks - b->split, span(b, b->split, b->nblocks), b->s_zc) ||
             drv->cuEventRecord(zc_done, b->s_zc) != CUDA_SUCCESS))
            return -EIO;
        if (b->split && run_pipelined(b, d_run, d_out, b->split, 0))
            return -EIO;
        return b->split < b->nblocks && drv->cuStreamWaitEvent(b->s_copy, zc_done, 0) != CUDA_SUCCESS ? -EIO
                                                                                                      : 0;
    }
    case 3:
        return decode(b, zc_run, b->d_offsets_mapped, d_out, 0, b->nblocks, b->total, b->s_copy);
    case 6:
        return drv->cuMemcpyHtoDAsync(d_run, b->run, b->run_len, b->s_copy) == CUDA_SUCCESS ? 0 : -EIO;
    case 7:
        return run_pipelined(b, d_run, d_out, b->split, 1);
    default:
        return decode(b, d_run, b->d_offsets, d_out, 0, b->nblocks, b->total, b->s_copy);
    }
}

/* One timed path of a round: run_path's path, with b->split for a split run. */
typedef struct BenchJob {
    int path;
    uint32_t split;
    double *gbps; /* the median goes here */
} BenchJob;

/* Times the jobs in rounds, each round running every job once in turn, so that a drift of the
 * machine (the plain copy moved 44-53 GB/s from one run to the next on an H100) weighs on every
 * path alike and their ratios hold; two rounds warm up, then the median of `iters` per job.
 * Each run uses the next copy of the rotation.  Returns 0, -ENOMEM or -EIO. */
static int time_jobs(Bench *b, BenchJob *jobs, int njobs, int iters, CUdeviceptr zc_run)
{
    double(*ms)[BENCH_MAX_ITERS] = calloc((size_t)njobs, sizeof(*ms));
    if (!ms)
        return -ENOMEM;
    unsigned turn = 0;
    int err = 0;
    for (int i = -2; i < iters && !err; i++)
        for (int j = 0; j < njobs && !err; j++) {
            float t = 0;
            b->split = jobs[j].split;
            if (b->drv->cuEventRecord(b->t0, b->s_copy) != CUDA_SUCCESS ||
                run_path(b, jobs[j].path, zc_run, (int)(turn++ % (unsigned)b->rotation)) ||
                b->drv->cuEventRecord(b->t1, b->s_copy) != CUDA_SUCCESS ||
                b->drv->cuEventSynchronize(b->t1) != CUDA_SUCCESS ||
                b->drv->cuEventElapsedTime(&t, b->t0, b->t1) != CUDA_SUCCESS)
                err = -EIO;
            else if (i >= 0)
                ms[j][i] = t;
        }
    for (int j = 0; j < njobs && !err; j++) {
        qsort(ms[j], (size_t)iters, sizeof(ms[j][0]), cmp_double);
        const double med = ms[j][iters / 2];
        *jobs[j].gbps = med > 0 ? (double)b->total / (med * 1e6) : 0;
    }
    free(ms);
    return err;
}

/* One more pipelined run with timing events around each chunk (the events cost the run a little). */
static int trace_pipelined(Bench *b, CUdeviceptr zc_run, IbpshimBenchResult *out)
{
    const IbpDriver *drv = b->drv;
    for (int k = 0; k < IBPSHIM_BENCH_TRACE_MAX; k++)
        for (int j = 0; j < 3; j++)
            if (!b->tr[k][j] && drv->cuEventCreate(&b->tr[k][j], CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
                b->tr[k][j] = NULL;
                return -EIO;
            }
    b->tracing = 1;
    float all = 0;
    int err = drv->cuEventRecord(b->t0, b->s_copy) != CUDA_SUCCESS || run_path(b, 2, zc_run, 0) ||
              drv->cuEventRecord(b->t1, b->s_copy) != CUDA_SUCCESS ||
              drv->cuEventSynchronize(b->t1) != CUDA_SUCCESS ||
              drv->cuEventElapsedTime(&all, b->t0, b->t1) != CUDA_SUCCESS;
    b->tracing = 0;
    if (err)
        return -EIO;
    out->trace_us = all * 1e3;
    unsigned k = 0;
    for (uint32_t s = 0; s < b->nblocks; k++) {
        const uint32_t e = ibp_pipe_chunk_end(b->offsets, s, b->nblocks, b->chunk, b->tail);
        if (k < IBPSHIM_BENCH_TRACE_MAX) {
            IbpshimBenchChunk *c = &out->trace[k];
            float t[3] = {0, 0, 0};
            for (int j = 0; j < 3; j++)
                if (drv->cuEventElapsedTime(&t[j], b->t0, b->tr[k][j]) != CUDA_SUCCESS)
                    return -EIO;
            c->compressed = b->offsets[e] - b->offsets[s];
            c->bytes = span(b, s, e);
            c->dma_end_us = t[0] * 1e3;
            c->decode_start_us = t[1] * 1e3;
            c->decode_end_us = t[2] * 1e3;
        }
        s = e;
    }
    out->trace_chunks = k;
    return 0;
}

static int encode(Bench *b, IbpCodecPlan *plan)
{
    const size_t bound = ibp_codec_block_bound(plan, b->block_size);
    uint8_t *tmp = aligned_alloc(16, (bound + 15) & ~(size_t)15);
    if (!tmp)
        return -ENOMEM;
    size_t at = 0;
    int err = 0;
    for (uint32_t i = 0; i < b->nblocks && !err; i++) {
        const size_t off = (size_t)i * b->block_size;
        size_t comp = 0;
        err = ibp_codec_block_encode(plan, b->src + off, b->total - off < b->block_size ? b->total - off : b->block_size,
                                     off, tmp, bound, &comp);
        b->offsets[i] = at;
        memcpy(b->run + at, tmp, comp);
        at += comp;
        IbpBlockHeader h;
        memcpy(&h, tmp, sizeof(h));
        b->flagged |= !err && ibp_fmt_selflags(h.flags);
        b->top_blocks += !err && (h.flags & IBP_BLOCK_TOPCODED);
        b->packed_blocks += !err && !(h.flags & (IBP_BLOCK_TOPCODED | IBP_BLOCK_RAW));
    }
    b->offsets[b->nblocks] = at;
    b->run_len = at;
    free(tmp);
    return err;
}

__attribute__((visibility("default"))) int ibpshim_bench(const void *data, size_t len,
                                                         const IbpshimBenchOptions *opts, IbpshimBenchResult *out)
{
    Bench b = {0};
    memset(out, 0, sizeof(*out));
    if (!data || !len || !opts)
        return -EINVAL;
    b.drv = ibp_driver_get();
    if (!b.drv)
        return -ENODEV;
    if (!ibp_kernels_built())
        return -ENOTSUP;
    const IbpDriver *drv = b.drv;
    const int iters = opts->iters > 0 ? (opts->iters < BENCH_MAX_ITERS ? opts->iters : BENCH_MAX_ITERS) : 9;
    const size_t reps = opts->size > len ? (opts->size + len - 1) / len : 1;
    b.total = reps * len;
    CUdevice dev;
    CUcontext ctx = NULL;
    IbpCodecPlan *plan = NULL;
    int err = -EIO, pushed = 0;
    if (drv->cuDeviceGet(&dev, opts->device) != CUDA_SUCCESS || drv->cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS) {
        ctx = NULL;
        err = -ENODEV;
        goto out;
    }
    if (drv->cuCtxPushCurrent(ctx) != CUDA_SUCCESS)
        goto out;
    pushed = 1;
    if (ibp_module_get(ctx, &b.mod))
        goto out;
    drv->cuDeviceGetName(out->device_name, (int)sizeof(out->device_name), dev);
    const unsigned host_flags = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP;
    if (drv->cuMemHostAlloc((void **)&b.src, b.total, host_flags) != CUDA_SUCCESS) {
        b.src = NULL;
        err = -ENOMEM;
        goto out;
    }
    for (size_t r = 0; r < reps; r++)
        memcpy(b.src + r * len, data, len);
    const IbpCodecPlanOptions plan_opts = {.word_size = opts->word_size,
                                           .flags =
                                               (opts->selector_flags ? IBP_CODEC_PLAN_SELECTOR_FLAGS : 0u) |
                                               (opts->top_coded ? IBP_CODEC_PLAN_TOP_CODED : 0u)};
    err = ibp_codec_plan_create(b.src, b.total, &plan_opts, &plan);
    if (err)
        goto out;
    err = -ENOMEM;
    b.block_size = ibp_codec_plan_block_size(plan);
    b.nblocks = (uint32_t)((b.total + b.block_size - 1) / b.block_size);
    const size_t run_cap = (size_t)b.nblocks * ((b.block_size + 64 + 15) & ~(size_t)15);
    if (drv->cuMemHostAlloc((void **)&b.run, run_cap, host_flags) != CUDA_SUCCESS) {
        b.run = NULL;
        goto out;
    }
    if (drv->cuMemHostAlloc((void **)&b.offsets, ((size_t)b.nblocks + 1) * 8, host_flags) != CUDA_SUCCESS) {
        b.offsets = NULL;
        goto out;
    }
    err = encode(&b, plan);
    if (err)
        goto out;
    err = -EIO;
    IbpCodecPlanInfo info;
    ibp_codec_plan_info(plan, &info);
    b.word_size = info.word_size;
    b.columns = info.columns;
    b.nsets = info.nsets;
    out->word_size = info.word_size;
    out->columns = info.columns;
    out->blocks = b.nblocks;
    out->top_blocks = b.top_blocks;
    b.has_pred = info.xf_delta + info.xf_xor > 0;
    const void *blob = ibp_codec_plan_blob(plan, &b.blob_len);
    CUdeviceptr zc_run;
    /* Copies of the run and the output cycled through from one timed run to the next, so that no
     * run finds its buffers in the L2 the one before left them in. */
    int l2 = 0;
    drv->cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev);
    b.run_stride = (b.run_len + 16 + 255) & ~(size_t)255;
    b.out_stride = (b.total + 255) & ~(size_t)255;
    b.rotation =
        (int)((2 * (size_t)(l2 > 0 ? l2 : 0) + b.run_stride + b.out_stride) / (b.run_stride + b.out_stride));
    b.rotation = b.rotation < 1 ? 1 : b.rotation > BENCH_MAX_ROTATION ? BENCH_MAX_ROTATION : b.rotation;
    b.max_sms = opts->max_sms;
    if (drv->cuMemAlloc(&b.d_run, b.run_stride * (size_t)b.rotation) != CUDA_SUCCESS ||
        drv->cuMemAlloc(&b.d_plan, b.blob_len) != CUDA_SUCCESS ||
        drv->cuMemAlloc(&b.d_out, b.out_stride * (size_t)b.rotation) != CUDA_SUCCESS ||
        drv->cuMemHostGetDevicePointer(&b.d_offsets_mapped, b.offsets, 0) != CUDA_SUCCESS ||
        drv->cuMemHostGetDevicePointer(&zc_run, b.run, 0) != CUDA_SUCCESS ||
        drv->cuMemcpyHtoD(b.d_plan, blob, b.blob_len) != CUDA_SUCCESS ||
        drv->cuStreamCreate(&b.s_copy, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
        drv->cuStreamCreate(&b.s_copy2, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
        drv->cuStreamCreate(&b.s_zc, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
        drv->cuEventCreate(&b.t0, CU_EVENT_DEFAULT) != CUDA_SUCCESS ||
        drv->cuEventCreate(&b.t1, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
        goto out;
    const size_t selx = ibp_decode_selx_bytes(b.word_size, (uint32_t)b.block_size, b.nblocks);
    for (int k = 0; k < BENCH_SLOTS; k++) {
        if (drv->cuMemAlloc(&b.d_scratch[k], ibp_decode_scratch_bytes(b.mod)) != CUDA_SUCCESS) {
            b.d_scratch[k] = 0;
            goto out;
        }
        if (b.flagged && drv->cuMemAlloc(&b.d_selx[k], selx) != CUDA_SUCCESS) {
            b.d_selx[k] = 0;
            goto out;
        }
    }
    for (int k = 0; k < BENCH_DECODE_STREAMS; k++)
        if (drv->cuStreamCreate(&b.s_dec[k], CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
            b.s_dec[k] = NULL;
            goto out;
        }
    b.offsets_len = ((size_t)b.nblocks + 1) * 8;
    b.d_offsets = b.d_offsets_mapped;
    if (!opts->offsets_mapped) {
        if (drv->cuMemAlloc(&b.d_offsets, b.offsets_len) != CUDA_SUCCESS ||
            drv->cuMemcpyHtoD(b.d_offsets, b.offsets, b.offsets_len) != CUDA_SUCCESS) {
            b.d_offsets = 0;
            goto out;
        }
    }
    /* Decode only reads whichever copy of the run its turn gives it. */
    for (int k = 0; k < b.rotation; k++)
        if (drv->cuMemcpyHtoD(b.d_run + (CUdeviceptr)k * b.run_stride, b.run, b.run_len) != CUDA_SUCCESS)
            goto out;
    for (int k = 0; k < BENCH_EV_COUNT; k++)
        if (drv->cuEventCreate(&b.ev[k], CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
            b.ev[k] = NULL;
            goto out;
        }
    b.copy_streams = opts->copy_streams == 2 ? 2 : 1;
    b.paired = opts->paired;
    b.last_on_copy = opts->last_decode_on_copy;
    b.tail_own_stream = opts->raw_tail_own_stream;
    b.decode_streams = opts->decode_streams < 1                      ? 1
                       : opts->decode_streams > BENCH_DECODE_STREAMS ? BENCH_DECODE_STREAMS
                                                                     : opts->decode_streams;
    /* As the shim with the default pipeline_chunk (an explicit chunk size is taken as it is). */
    b.chunk = opts->chunk ? opts->chunk : ibp_pipe_chunk_size(b.run_len, IBP_PIPE_CHUNK_DEFAULT);
    b.tail = ibp_pipe_tail(opts->tail, b.run_len, b.total);
    /* As the shim: the pipelined path sends no offset table when every chunk's launch carries its
     * offsets (decode() carries them whenever they fit). */
    const IbpPipeChunks chunks = ibp_pipe_chunks(b.offsets, 0, b.nblocks, b.chunk, b.tail);
    b.chunks_inline =
        b.d_offsets != b.d_offsets_mapped && ibp_decode_offsets_fit(chunks.max_blocks, chunks.max_bytes);
    out->chunk = b.chunk;
    out->tail = b.tail;
    const size_t shim_chunk = opts->chunk ? opts->chunk : IBP_PIPE_CHUNK_DEFAULT;
    const int shim_whole = ibp_pipe_worth(b.run_len, shim_chunk);
    const int shim_alone = ibp_pipe_alone_worth(b.run_len, b.total, shim_chunk, b.tail);
    const uint32_t shim_raw_from = ibp_pipe_raw_worth(b.run_len, b.total, shim_chunk, b.tail)
                                       ? ibp_pipe_raw_from(0, b.nblocks, b.block_size, opts->shim_raw_tail)
                                       : b.nblocks;
    out->shim_raw_tail = shim_raw_from < b.nblocks ? span(&b, shim_raw_from, b.nblocks) : 0;
    out->shim_pipelined = shim_whole ? 1 : shim_alone || out->shim_raw_tail ? 2 : 0;
    out->rotation = b.rotation;
    BenchJob jobs[6 + IBPSHIM_BENCH_SPLITS_MAX + IBPSHIM_BENCH_RAW_TAILS_MAX] = {
        {0, 0, &out->raw_gbps},       {6, 0, &out->dma_only_gbps}, {1, 0, &out->dma_decode_gbps},
        {2, 0, &out->pipelined_gbps}, {3, 0, &out->zerocopy_gbps}, {4, 0, &out->decode_gbps}};
    int njobs = 6;
    out->nsplits = opts->nsplits < 0                          ? 0
                   : opts->nsplits > IBPSHIM_BENCH_SPLITS_MAX ? IBPSHIM_BENCH_SPLITS_MAX
                                                              : opts->nsplits;
    for (int i = 0; i < out->nsplits; i++) {
        IbpshimBenchSplit *sp = &out->split[i];
        sp->share = opts->splits[i] > 1000 ? 1000 : opts->splits[i];
        const uint32_t split = split_at(&b, sp->share);
        sp->zc_compressed = b.run_len - b.offsets[split];
        sp->zc_bytes = split < b.nblocks ? span(&b, split, b.nblocks) : 0;
        jobs[njobs++] = (BenchJob){5, split, &sp->gbps};
    }
    out->nraw_tails = opts->nraw_tails < 0                             ? 0
                      : opts->nraw_tails > IBPSHIM_BENCH_RAW_TAILS_MAX ? IBPSHIM_BENCH_RAW_TAILS_MAX
                                                                       : opts->nraw_tails;
    for (int i = 0; i < out->nraw_tails; i++) {
        IbpshimBenchRawTail *rt = &out->raw_tail[i];
        rt->asked = opts->raw_tails[i];
        const uint64_t want = (rt->asked + b.block_size - 1) / b.block_size;
        const uint32_t from = want >= b.nblocks ? 0 : b.nblocks - (uint32_t)(want ? want : 1);
        rt->bytes = span(&b, from, b.nblocks);
        rt->compressed = b.run_len - b.offsets[from];
        jobs[njobs++] = (BenchJob){7, from, &rt->gbps};
    }
    /* Verify once each path that decodes the run into the output (DMA then decode, pipelined,
     * zero-copy, each split and raw tail), the output poisoned before each. */
    uint8_t *check = malloc(b.total);
    if (!check) {
        err = -ENOMEM;
        goto out;
    }
    out->verified = 1;
    for (int j = 0; j < njobs && out->verified; j++) {
        const int path = jobs[j].path;
        if (path == 0 || path == 4 || path == 6)
            continue;
        b.split = jobs[j].split;
        /* The poison goes through the legacy stream, which the bench's non-blocking streams do
         * not wait for: let it land first. */
        drv->cuMemsetD8(b.d_out, 0xa5, b.total);
        drv->cuCtxSynchronize();
        out->verified =
            run_path(&b, path, zc_run, 0) == 0 && drv->cuStreamSynchronize(b.s_copy) == CUDA_SUCCESS &&
            drv->cuMemcpyDtoH(check, b.d_out, b.total) == CUDA_SUCCESS && memcmp(check, b.src, b.total) == 0;
    }
    free(check);
    out->bytes = b.total;
    out->compressed = b.run_len + b.blob_len;
    out->ratio = (double)out->compressed / (double)b.total;
    err = time_jobs(&b, jobs, njobs, iters, zc_run);
    if (err)
        goto out;
    err = opts->trace ? trace_pipelined(&b, zc_run, out) : 0;
out:
    if (b.t0)
        drv->cuEventDestroy(b.t0);
    if (b.t1)
        drv->cuEventDestroy(b.t1);
    if (b.s_copy)
        drv->cuStreamDestroy(b.s_copy);
    for (int k = 0; k < BENCH_DECODE_STREAMS; k++)
        if (b.s_dec[k])
            drv->cuStreamDestroy(b.s_dec[k]);
    if (b.s_copy2)
        drv->cuStreamDestroy(b.s_copy2);
    if (b.s_zc)
        drv->cuStreamDestroy(b.s_zc);
    for (int k = 0; k < BENCH_EV_COUNT; k++)
        if (b.ev[k])
            drv->cuEventDestroy(b.ev[k]);
    for (int k = 0; k < IBPSHIM_BENCH_TRACE_MAX; k++)
        for (int j = 0; j < 3; j++)
            if (b.tr[k][j])
                drv->cuEventDestroy(b.tr[k][j]);
    if (b.d_run)
        drv->cuMemFree(b.d_run);
    if (b.d_plan)
        drv->cuMemFree(b.d_plan);
    if (b.d_out)
        drv->cuMemFree(b.d_out);
    if (b.d_offsets && b.d_offsets != b.d_offsets_mapped)
        drv->cuMemFree(b.d_offsets);
    for (int k = 0; k < BENCH_SLOTS; k++) {
        if (b.d_scratch[k])
            drv->cuMemFree(b.d_scratch[k]);
        if (b.d_selx[k])
            drv->cuMemFree(b.d_selx[k]);
    }
    if (b.src)
        drv->cuMemFreeHost(b.src);
    if (b.run)
        drv->cuMemFreeHost(b.run);
    if (b.offsets)
        drv->cuMemFreeHost(b.offsets);
    ibp_codec_plan_destroy(&plan);
    if (pushed)
        drv->cuCtxPopCurrent(&ctx);
    if (ctx)
        drv->cuDevicePrimaryCtxRelease(dev);
    return err;
}
