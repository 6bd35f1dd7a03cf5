/* SPDX-License-Identifier: MIT
 * ibpshim: enqueueing a planned host-to-device copy: compressed runs (DMA + decode kernel) and
 * raw pieces, in order, on the caller's stream. */
#include "interpose/compressed.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "common/log.h"
#include "interpose/devmem.h"
#include "interpose/real.h"
#include "kernels/decode_abi.h"
#include "kernels/driver.h"
#include "kernels/module.h"
#include "kernels/staging.h"
#include "report/ledger.h"

#define IBP_STAGE_ALIGN 256u
/* Runs between two timed runs once the path has been measured. */
#define IBP_PROBE_EVERY 64u
#define IBP_SPEED_CONTEXTS 16

/* What the compressed path costs on each context, measured on real runs with timing events:
 * DMA and decode nanoseconds per byte.  A run goes compressed only while the measured cost of
 * moving its compressed bytes and decoding them beats moving the original bytes. */
typedef struct IbpSpeed {
    CUcontext ctx;
    CUevent ev[3];
    int pending;            /* ev[] recorded around a run not read yet */
    size_t pending_wire, pending_orig;
    void *pending_tag;      /* report entry of the timed run */
    double dma_ns_per_byte; /* 0 until measured */
    double dec_ns_per_byte;
    unsigned runs;
} IbpSpeed;

static pthread_mutex_t speed_lock = PTHREAD_MUTEX_INITIALIZER;
static IbpSpeed speeds[IBP_SPEED_CONTEXTS];

static IbpSpeed *speed_for(const IbpDriver *drv, CUcontext ctx)
{
    for (int i = 0; i < IBP_SPEED_CONTEXTS; i++) {
        if (speeds[i].ctx == ctx)
            return &speeds[i];
        if (!speeds[i].ctx) {
            for (int k = 0; k < 3; k++)
                if (drv->cuEventCreate(&speeds[i].ev[k], CU_EVENT_DEFAULT) != CUDA_SUCCESS)
                    return NULL;
            speeds[i].ctx = ctx;
            return &speeds[i];
        }
    }
    return NULL;
}

/* Folds a finished timed run into the averages.  Called with speed_lock held. */
static void speed_collect(const IbpDriver *drv, IbpSpeed *sp)
{
    if (!sp->pending || drv->cuEventQuery(sp->ev[2]) != CUDA_SUCCESS)
        return;
    float dma_ms = 0, dec_ms = 0;
    if (drv->cuEventElapsedTime(&dma_ms, sp->ev[0], sp->ev[1]) == CUDA_SUCCESS &&
        drv->cuEventElapsedTime(&dec_ms, sp->ev[1], sp->ev[2]) == CUDA_SUCCESS && sp->pending_wire &&
        sp->pending_orig) {
        const double dma = dma_ms * 1e6 / (double)sp->pending_wire;
        const double dec = dec_ms * 1e6 / (double)sp->pending_orig;
        sp->dma_ns_per_byte = sp->dma_ns_per_byte ? 0.75 * sp->dma_ns_per_byte + 0.25 * dma : dma;
        sp->dec_ns_per_byte = sp->dec_ns_per_byte ? 0.75 * sp->dec_ns_per_byte + 0.25 * dec : dec;
        IBP_DEBUG("measured compressed path: DMA %.1f GB/s, decode %.1f GB/s of output",
                  1.0 / sp->dma_ns_per_byte, 1.0 / sp->dec_ns_per_byte);
        ibp_ledger_decoded(sp->pending_tag, sp->pending_orig, (uint64_t)(dec_ms * 1e6));
    }
    sp->pending = 0;
}

/* 1 when the run should go compressed; *timed = 1 when this run is to be timed. */
static int speed_allows(const IbpDriver *drv, CUcontext ctx, size_t wire, size_t orig, int *timed)
{
    *timed = 0;
    pthread_mutex_lock(&speed_lock);
    IbpSpeed *sp = speed_for(drv, ctx);
    int ok = 1;
    if (sp) {
        speed_collect(drv, sp);
        const unsigned n = sp->runs++;
        if (!sp->pending && (!sp->dma_ns_per_byte || n % IBP_PROBE_EVERY == 0)) {
            *timed = 1; /* measure; an unmeasured path gets the benefit of the doubt */
        } else if (sp->dma_ns_per_byte) {
            const double compressed = (double)wire * sp->dma_ns_per_byte + (double)orig * sp->dec_ns_per_byte;
            ok = compressed < 0.97 * (double)orig * sp->dma_ns_per_byte;
        }
    }
    pthread_mutex_unlock(&speed_lock);
    return ok;
}

static void speed_mark(const IbpDriver *drv, CUcontext ctx, int which, CUstream stream, size_t wire, size_t orig,
                       void *tag)
{
    pthread_mutex_lock(&speed_lock);
    IbpSpeed *sp = speed_for(drv, ctx);
    if (sp && drv->cuEventRecord(sp->ev[which], stream) == CUDA_SUCCESS && which == 2) {
        sp->pending = 1;
        sp->pending_wire = wire;
        sp->pending_orig = orig;
        sp->pending_tag = tag;
    }
    pthread_mutex_unlock(&speed_lock);
}

static size_t align_up(size_t n)
{
    return (n + IBP_STAGE_ALIGN - 1) & ~(size_t)(IBP_STAGE_ALIGN - 1);
}

static cudaError_t raw_copy(IbpStreamApi api, void *dst, const void *src, size_t n, cudaStream_t stream)
{
    const IbpReal_cudaMemcpyAsync real = api == IBP_STREAM_API_PER_THREAD ? IBP_REAL(cudaMemcpyAsync_ptsz)
                                                                          : IBP_REAL(cudaMemcpyAsync);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    return real(dst, src, n, cudaMemcpyHostToDevice, stream);
}

typedef struct IbpLaunch {
    const IbpDriver *drv;
    const IbpModule *mod;
    CUstream stream;
    CUdeviceptr plan;       /* the plan blob in the staging buffer */
    CUdeviceptr offsets;    /* device address of the shadow's offset table */
    const uint64_t *host_offsets;
    size_t block_size;
    unsigned word_size;     /* of the plan */
    int has_pred;           /* the plan has predictor columns */
    CUdeviceptr index;      /* segment index scratch for the run (0: decode a block per CTA) */
    IbpSendOptions opts;
    void *tag;              /* the region's report entry */
} IbpLaunch;

/* Decodes blocks [first, first + count) of the staged run (run_base = device address of block
 * `run_first`) into dst, writing original bytes [skip, skip + len) of those blocks. */
static int launch_decode(const IbpLaunch *l, CUdeviceptr run_base, uint32_t run_first, uint32_t first,
                         uint32_t count, CUdeviceptr dst, uint64_t skip, uint64_t len)
{
    const uint64_t index_at = ibp_decode_index_bytes(l->word_size, (uint32_t)l->block_size, first - run_first);
    IbpDecodeArgs args = {
        .comp = run_base + (l->host_offsets[first] - l->host_offsets[run_first]),
        .offsets = l->offsets + (CUdeviceptr)first * sizeof(uint64_t),
        .plan = l->plan,
        .dst = dst,
        .len = len,
        .skip = skip,
        .index = l->index ? l->index + index_at : 0,
        .nblocks = count,
        .block_size = (uint32_t)l->block_size,
    };
    return ibp_decode_launch(l->mod, &args, l->word_size, l->has_pred, l->opts.max_grid, l->stream);
}

/* One compressed piece: stage the plan blob and the run, then decode.  Plans with predictor
 * columns decode clipped edge blocks whole into scratch space first, since undoing a predictor
 * needs the words before the clip. */
static int send_run(const IbpLaunch *base, IbpShadow *shadow, const IbpPiece *p, uint8_t *dst_piece,
                    CUcontext ctx, size_t *sent)
{
    const IbpDriver *drv = base->drv;
    size_t blob_len = 0;
    const void *blob = ibp_shadow_plan_blob(shadow, &blob_len);
    IbpCodecPlanInfo info;
    ibp_codec_plan_info(ibp_shadow_codec_plan(shadow), &info);
    const int has_pred = info.xf_delta + info.xf_xor > 0;
    const size_t bs = base->block_size;
    const uint32_t first = p->first_block, last = p->first_block + p->nblocks - 1;
    const uint64_t skip = p->off - (uint64_t)first * bs;
    const uint64_t end_in_last = p->off + p->len - (uint64_t)last * bs; /* bytes of the last block used */
    const int head_clipped = has_pred && skip > 0;
    const int tail_clipped = has_pred && end_in_last < bs && (last != first || !head_clipped) &&
                             (p->off + p->len) % bs != 0;
    const size_t scratch = (head_clipped || tail_clipped) ? 2 * bs : 0;
    const size_t index_len = has_pred ? 0 : (size_t)ibp_decode_index_bytes(info.word_size, (uint32_t)bs, p->nblocks);
    const size_t need = align_up(blob_len) + align_up(p->run_len) + scratch + index_len;
    if (base->opts.zerocopy && !scratch) {
        /* The kernel reads the run, its offsets and the plan through their mapped addresses. */
        IbpLaunch l = *base;
        l.word_size = info.word_size;
        l.has_pred = has_pred;
        l.index = 0;
        CUdeviceptr run_dev, blob_dev;
        void *run_host = (void *)p->run, *blob_host = (void *)blob, *offsets_host = (void *)p->offsets;
        if (drv->cuMemHostGetDevicePointer(&run_dev, run_host, 0) != CUDA_SUCCESS ||
            drv->cuMemHostGetDevicePointer(&blob_dev, blob_host, 0) != CUDA_SUCCESS ||
            drv->cuMemHostGetDevicePointer(&l.offsets, offsets_host, 0) != CUDA_SUCCESS)
            return -EIO;
        l.plan = blob_dev;
        l.offsets -= (CUdeviceptr)first * sizeof(uint64_t);
        *sent += p->run_len;
        return launch_decode(&l, run_dev, first, first, p->nblocks, (CUdeviceptr)(uintptr_t)dst_piece, skip,
                             p->len);
    }
    int timed = 0;
    if (!speed_allows(drv, ctx, blob_len + p->run_len, p->len, &timed) && !base->opts.force)
        return -ETIME;
    IbpStagingBuf *stage = NULL;
    int err = ibp_staging_acquire(ctx, need, &stage);
    if (err)
        return err;
    IbpLaunch l = *base;
    l.plan = stage->ptr;
    const CUdeviceptr run = stage->ptr + align_up(blob_len);
    const CUdeviceptr scr = run + align_up(p->run_len);
    l.word_size = info.word_size;
    l.has_pred = has_pred;
    l.index = index_len ? scr + scratch : 0;
    CUresult res;
    void *offsets_host = (void *)p->offsets;
    IBP_CU_CHECK_GOTO(res, drv->cuMemHostGetDevicePointer(&l.offsets, offsets_host, 0), fail);
    l.offsets -= (CUdeviceptr)first * sizeof(uint64_t); /* index by absolute block number */
    if (timed)
        speed_mark(drv, ctx, 0, l.stream, 0, 0, NULL);
    IBP_CU_CHECK_GOTO(res, drv->cuMemcpyHtoDAsync(l.plan, blob, blob_len, l.stream), fail);
    IBP_CU_CHECK_GOTO(res, drv->cuMemcpyHtoDAsync(run, p->run, p->run_len, l.stream), fail);
    *sent += blob_len + p->run_len;
    if (timed)
        speed_mark(drv, ctx, 1, l.stream, 0, 0, NULL);
    const CUdeviceptr dst = (CUdeviceptr)(uintptr_t)dst_piece;
    if (!head_clipped && !tail_clipped) {
        err = launch_decode(&l, run, first, first, p->nblocks, dst, skip, p->len);
    } else {
        uint32_t mid_first = first, mid_last = last;
        uint64_t done = 0;
        if (head_clipped) {
            const uint64_t take = p->len < bs - skip ? p->len : bs - skip;
            err = launch_decode(&l, run, first, first, 1, scr, 0, bs);
            if (!err && drv->cuMemcpyDtoDAsync(dst, scr + skip, take, l.stream) != CUDA_SUCCESS)
                err = -EIO;
            done = take;
            mid_first++;
        }
        if (!err && tail_clipped && last >= mid_first) {
            err = launch_decode(&l, run, first, last, 1, scr + bs, 0, bs);
            const uint64_t at = (uint64_t)last * bs - p->off;
            if (!err && drv->cuMemcpyDtoDAsync(dst + at, scr + bs, end_in_last, l.stream) != CUDA_SUCCESS)
                err = -EIO;
            mid_last--;
        }
        if (!err && mid_last + 1 > mid_first && mid_last >= mid_first)
            err = launch_decode(&l, run, first, mid_first, mid_last - mid_first + 1, dst + done, 0,
                                (uint64_t)(mid_last - mid_first + 1) * bs);
    }
    if (timed && !err)
        speed_mark(drv, ctx, 2, l.stream, blob_len + p->run_len, p->len, base->tag);
    ibp_staging_release(stage, l.stream);
    return err;
fail:
    ibp_staging_release(stage, l.stream);
    return -EIO;
}

cudaError_t ibp_send_plan(IbpStreamApi api, IbpCopyPlan *plan, void *dst, const void *src, size_t n,
                          cudaStream_t stream, CUcontext ctx, CUstream cu_stream, int synchronous,
                          const IbpSendOptions *opts, IbpSendStats *stats)
{
    (void)n;
    const IbpDriver *drv = ibp_driver_get();
    const IbpModule *mod = NULL;
    memset(stats, 0, sizeof(*stats));
    int gpu_ok = drv && ibp_module_get(ctx, &mod) == 0;
    IbpLaunch l = {.drv = drv, .mod = mod, .stream = cu_stream,
                   .block_size = ibp_shadow_block_size(plan->shadow), .opts = *opts, .tag = plan->tag};
    cudaError_t ret = cudaSuccess;
    const uintptr_t copy_off = (uintptr_t)src - plan->region_base;
    int any_compressed = 0;
    for (int i = 0; i < plan->npieces && ret == cudaSuccess; i++) {
        const IbpPiece *p = &plan->pieces[i];
        uint8_t *dst_piece = (uint8_t *)dst + (p->off - copy_off);
        if (p->kind == IBP_PIECE_COMPRESSED && gpu_ok) {
            l.host_offsets = p->offsets - p->first_block;
            size_t sent = 0;
            const int err = send_run(&l, plan->shadow, p, dst_piece, ctx, &sent);
            if (!err) {
                stats->compressed_orig += p->len;
                stats->compressed_sent += sent;
                any_compressed = 1;
                continue;
            }
            if (err == -ETIME) {
                stats->slower += p->len;
            } else {
                IBP_DEBUG("compressed piece of %zu bytes went raw (%d)", p->len, err);
                if (err != -EBUSY)
                    gpu_ok = 0;
            }
        }
        ret = raw_copy(api, dst_piece, (const uint8_t *)plan->region_base + p->off, p->len, stream);
        stats->raw += p->len;
    }
    void *fence = NULL;
    if (any_compressed) {
        fence = ibp_devmem_fence_record(ctx, cu_stream);
        if (!fence)
            drv->cuStreamSynchronize(cu_stream); /* without a fence, the shadow must be free now */
    }
    ibp_policy_plan_end(plan, fence);
    if (synchronous && ret == cudaSuccess && drv && drv->cuStreamSynchronize(cu_stream) != CUDA_SUCCESS)
        ret = cudaErrorUnknown;
    return ret;
}
