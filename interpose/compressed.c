/* SPDX-License-Identifier: MIT
 * ibpshim: enqueueing a planned host-to-device copy: compressed runs (DMA + decode kernel, long
 * runs pipelined on internal streams) and raw pieces, in the caller's stream order. */
#include "interpose/compressed.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "common/log.h"
#include "interpose/devmem.h"
#include "interpose/pipe_chunks.h"
#include "interpose/real.h"
#include "kernels/decode_abi.h"
#include "kernels/driver.h"
#include "kernels/module.h"
#include "kernels/staging.h"
#include "report/ledger.h"

#define IBP_STAGE_ALIGN 256u
/* Runs between two timed runs once the path has been measured, and while it is judged slower
 * than a plain copy: a verdict from a bad sample (copies on other streams sharing the link, a
 * shadow still being built) is then revisited soon, since it costs every run in between. */
#define IBP_PROBE_EVERY 64u
#define IBP_PROBE_EVERY_SLOWER 8u
#define IBP_SPEED_CONTEXTS 16
/* Pipelined runs: a few pairs of internal streams per context, picked by the caller's stream, so
 * copies enqueued on different streams do not queue behind each other's earlier work; and two
 * chunk slots per run, one landing while the other decodes. */
#define IBP_PIPE_CONTEXTS 16
#define IBP_PIPE_PAIRS 4
#define IBP_PIPE_SLOTS 2
/* Plan blobs kept in device memory, over all contexts. */
#define IBP_DEV_PLANS 128

/* A timed run's events: recorded (state PROBE_RECORDED) and read back once they completed.
 * Serial runs: ev[0] before the DMA, ev[1] after it, ev[2] after the decode, all on the caller's
 * stream.  Pipelined runs: ev[0] on the copy stream once the caller's earlier work is done, ev[1]
 * there after the first IBP_PIPE_SLOTS chunks (DMA that no decode held up), ev[2] on the decode
 * stream before the last chunk's decode, ev[3] on the caller's stream after the join. */
enum { PROBE_IDLE = 0, PROBE_RESERVED, PROBE_RECORDED };

/* A timed run's events: serial, [0] DMA start, [1] DMA end, [2] decode end; pipelined, [0] first
 * chunk's DMA start, [1] the DMA end of the chunks the slots hold, [2] last chunk's decode start,
 * [3] the caller's join (the run's end, the raw tail's DMA included), [4] last chunk's decode end
 * on the decode stream. */
#define IBP_PROBE_EVENTS 5

typedef struct IbpProbe {
    CUevent ev[IBP_PROBE_EVENTS];
    int state;
    size_t dma_bytes; /* bytes moved between ev[0] and ev[1] */
    size_t dec_bytes; /* original bytes decoded in the decode interval */
    size_t orig;      /* pipelined: original bytes of the whole run */
    void *tag;        /* report entry of the timed run */
    unsigned runs;
    int slower;       /* the last run judged went raw as slower */
} IbpProbe;

/* What the compressed path costs on each context, measured on real runs with timing events:
 * DMA nanoseconds per byte moved, decode nanoseconds per byte written, and for pipelined runs the
 * whole run's nanoseconds per original byte.  A run goes compressed only while the measured cost
 * of the path it would take beats moving the original bytes. */
typedef struct IbpSpeed {
    CUcontext ctx;
    IbpProbe serial, pipe;
    /* Recorded after each serial run's decode: while it is pending, the next run's DMA (which runs
     * ahead of the caller's stream) overlaps that decode. */
    CUevent busy;
    int busy_recorded;
    double dma_ns_per_byte; /* 0 until measured */
    double dec_ns_per_byte;
    double pipe_ns_per_byte;
} IbpSpeed;

static pthread_mutex_t speed_lock = PTHREAD_MUTEX_INITIALIZER;
static IbpSpeed speeds[IBP_SPEED_CONTEXTS];

static int probe_init(const IbpDriver *drv, IbpProbe *pr)
{
    for (int k = 0; k < IBP_PROBE_EVENTS; k++)
        if (!pr->ev[k] && drv->cuEventCreate(&pr->ev[k], CU_EVENT_DEFAULT) != CUDA_SUCCESS)
            return -EIO;
    return 0;
}

static IbpSpeed *speed_for(const IbpDriver *drv, CUcontext ctx)
{
    for (int i = 0; i < IBP_SPEED_CONTEXTS; i++) {
        if (speeds[i].ctx == ctx)
            return &speeds[i];
        if (!speeds[i].ctx) {
            if (probe_init(drv, &speeds[i].serial) || probe_init(drv, &speeds[i].pipe) ||
                (!speeds[i].busy && drv->cuEventCreate(&speeds[i].busy, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS))
                return NULL;
            speeds[i].ctx = ctx;
            return &speeds[i];
        }
    }
    return NULL;
}

static double ewma(double old, double sample)
{
    return old ? 0.75 * old + 0.25 * sample : sample;
}

/* Milliseconds between two completed events, or -1. */
static double elapsed_ms(const IbpDriver *drv, CUevent a, CUevent b)
{
    float ms = 0;
    return drv->cuEventElapsedTime(&ms, a, b) == CUDA_SUCCESS ? (double)ms : -1.0;
}

/* Folds a finished timed run into the averages.  Called with speed_lock held. */
static void speed_collect(const IbpDriver *drv, IbpSpeed *sp, IbpProbe *pr, int pipelined)
{
    const int last = pipelined ? 3 : 2;
    if (pr->state != PROBE_RECORDED || ibp_driver_event_query(drv, pr->ev[last]) != CUDA_SUCCESS)
        return;
    const double dma_ms = elapsed_ms(drv, pr->ev[0], pr->ev[1]);
    /* A pipelined run's last decode ends on the decode stream: the caller's join after it also
     * waits for the raw tail's DMA, which would count as decode time. */
    const double dec_ms =
        pipelined ? elapsed_ms(drv, pr->ev[2], pr->ev[4]) : elapsed_ms(drv, pr->ev[1], pr->ev[2]);
    const double all_ms = pipelined ? elapsed_ms(drv, pr->ev[0], pr->ev[3]) : 0.0;
    if (dma_ms >= 0 && dec_ms >= 0 && all_ms >= 0 && pr->dma_bytes && pr->dec_bytes) {
        sp->dma_ns_per_byte = ewma(sp->dma_ns_per_byte, dma_ms * 1e6 / (double)pr->dma_bytes);
        sp->dec_ns_per_byte = ewma(sp->dec_ns_per_byte, dec_ms * 1e6 / (double)pr->dec_bytes);
        if (pipelined && pr->orig) {
            sp->pipe_ns_per_byte = ewma(sp->pipe_ns_per_byte, all_ms * 1e6 / (double)pr->orig);
            IBP_DEBUG("measured pipelined path: %.1f GB/s of output (DMA %.1f GB/s, decode %.1f GB/s)",
                      1.0 / sp->pipe_ns_per_byte, 1.0 / sp->dma_ns_per_byte, 1.0 / sp->dec_ns_per_byte);
        } else {
            IBP_DEBUG("measured compressed path: DMA %.1f GB/s, decode %.1f GB/s of output",
                      1.0 / sp->dma_ns_per_byte, 1.0 / sp->dec_ns_per_byte);
        }
        ibp_ledger_dma(pr->tag, pr->dma_bytes, (uint64_t)(dma_ms * 1e6));
        /* A pipelined run's last decode may have waited for the caller's own work (the decode
         * stream joins it first): good enough to judge the run, not to report a speed. */
        if (!pipelined)
            ibp_ledger_decoded(pr->tag, pr->dec_bytes, (uint64_t)(dec_ms * 1e6));
    }
    pr->state = PROBE_IDLE;
}

/* 1 when the run should go compressed (always when `force`: nothing is weighed); *timed = 1 when
 * this run is to be timed (the caller then records the probe's events, or calls speed_unreserve()
 * when it cannot): every so many runs, and a run the caller asks to `probe` while no other is. */
static int speed_allows(const IbpDriver *drv, CUcontext ctx, size_t wire, size_t orig, int pipelined,
                        int force, int probe, int *timed)
{
    *timed = 0;
    pthread_mutex_lock(&speed_lock);
    IbpSpeed *sp = speed_for(drv, ctx);
    int ok = 1;
    if (sp) {
        speed_collect(drv, sp, &sp->serial, 0);
        speed_collect(drv, sp, &sp->pipe, 1);
        IbpProbe *pr = pipelined ? &sp->pipe : &sp->serial;
        const unsigned n = pr->runs++;
        const int measured =
            sp->dma_ns_per_byte > 0 && (pipelined ? sp->pipe_ns_per_byte > 0 : sp->dec_ns_per_byte > 0);
        if (pr->state == PROBE_IDLE &&
            (!measured || probe || n % (pr->slower ? IBP_PROBE_EVERY_SLOWER : IBP_PROBE_EVERY) == 0)) {
            *timed = 1; /* measure; an unmeasured path gets the benefit of the doubt */
            pr->state = PROBE_RESERVED;
        } else if (measured && !force) {
            const double raw = (double)orig * sp->dma_ns_per_byte;
            const double dma = (double)wire * sp->dma_ns_per_byte, dec = (double)orig * sp->dec_ns_per_byte;
            /* Copies back to back: this run's DMA overlaps the last one's decode, so the copy engine
             * is busy for the DMA alone while decodes keep up. */
            const int overlap = !pipelined && sp->busy_recorded &&
                                ibp_driver_event_query(drv, sp->busy) == CUDA_ERROR_NOT_READY;
            const double compressed =
                pipelined ? (double)orig * sp->pipe_ns_per_byte : overlap ? (dma > dec ? dma : dec) : dma + dec;
            ok = compressed < 0.97 * raw;
            pr->slower = !ok;
        }
    }
    pthread_mutex_unlock(&speed_lock);
    return ok;
}

/* Records event `which` of the context's probe on `stream`.  Returns 0 or -EIO. */
static int speed_mark(const IbpDriver *drv, CUcontext ctx, int pipelined, int which, CUstream stream)
{
    pthread_mutex_lock(&speed_lock);
    IbpSpeed *sp = speed_for(drv, ctx);
    const int ok =
        sp && drv->cuEventRecord((pipelined ? &sp->pipe : &sp->serial)->ev[which], stream) == CUDA_SUCCESS;
    pthread_mutex_unlock(&speed_lock);
    return ok ? 0 : -EIO;
}

/* The timed run's events are all recorded: read them once they complete. */
static void speed_recorded(const IbpDriver *drv, CUcontext ctx, int pipelined, size_t dma_bytes,
                           size_t dec_bytes, size_t orig, void *tag)
{
    pthread_mutex_lock(&speed_lock);
    IbpSpeed *sp = speed_for(drv, ctx);
    if (sp) {
        IbpProbe *pr = pipelined ? &sp->pipe : &sp->serial;
        pr->dma_bytes = dma_bytes;
        pr->dec_bytes = dec_bytes;
        pr->orig = orig;
        pr->tag = tag;
        pr->state = PROBE_RECORDED;
    }
    pthread_mutex_unlock(&speed_lock);
}

/* Whether the decode of the context's last compressed run is still pending. */
static int speed_pending(const IbpDriver *drv, CUcontext ctx)
{
    pthread_mutex_lock(&speed_lock);
    IbpSpeed *sp = speed_for(drv, ctx);
    const int pending =
        sp && sp->busy_recorded && ibp_driver_event_query(drv, sp->busy) == CUDA_ERROR_NOT_READY;
    pthread_mutex_unlock(&speed_lock);
    return pending;
}

/* A compressed run's decode is enqueued on `stream` (or the caller's stream joined to it): later
 * runs see whether it is still going. */
static void speed_busy(const IbpDriver *drv, CUcontext ctx, CUstream stream)
{
    pthread_mutex_lock(&speed_lock);
    IbpSpeed *sp = speed_for(drv, ctx);
    if (sp)
        sp->busy_recorded = drv->cuEventRecord(sp->busy, stream) == CUDA_SUCCESS;
    pthread_mutex_unlock(&speed_lock);
}

/* A timed run that did not record all its events: its probe is free for the next run. */
static void speed_unreserve(const IbpDriver *drv, CUcontext ctx, int pipelined)
{
    pthread_mutex_lock(&speed_lock);
    IbpSpeed *sp = speed_for(drv, ctx);
    if (sp)
        (pipelined ? &sp->pipe : &sp->serial)->state = PROBE_IDLE;
    pthread_mutex_unlock(&speed_lock);
}

static size_t align_up(size_t n)
{
    return (n + IBP_STAGE_ALIGN - 1) & ~(size_t)(IBP_STAGE_ALIGN - 1);
}

/* The real cudaMemcpyAsync of the application's default-stream semantics. */
static IbpReal_cudaMemcpyAsync real_memcpy_async(IbpStreamApi api)
{
    return api == IBP_STREAM_API_PER_THREAD ? IBP_REAL(cudaMemcpyAsync_ptsz) : IBP_REAL(cudaMemcpyAsync);
}

static cudaError_t raw_copy(IbpStreamApi api, void *dst, const void *src, size_t n, cudaStream_t stream)
{
    const IbpReal_cudaMemcpyAsync real = real_memcpy_async(api);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    return real(dst, src, n, cudaMemcpyHostToDevice, stream);
}

typedef struct IbpLaunch {
    const IbpDriver *drv;
    const IbpModule *mod;
    CUstream stream;
    CUdeviceptr plan;       /* the plan blob in the staging buffer */
    CUdeviceptr offsets;    /* device address of the offset table, indexed by absolute block number */
    const uint64_t *host_offsets;
    size_t block_size;
    unsigned word_size;     /* of the plan */
    unsigned columns, nsets;
    int has_pred; /* the plan has predictor columns */
    CUdeviceptr dec_scratch; /* ibp_decode_scratch_bytes() of device memory, or 0 */
    int flagged;             /* the plan's blocks may hold flagged selectors */
    CUdeviceptr selx;        /* where the decode rewrites them (IbpDecodeArgs.selx), or 0 */
    unsigned top;            /* IBP_DECODE_TOPCODED or IBP_DECODE_TOP_ONLY where blocks may be top-coded */
    IbpSendOptions opts;
    void *tag;              /* the region's report entry */
    int probe;              /* time this copy's run (the policy's plan->probe) */
    uint64_t *staging_wait; /* waits for staging buffers add up here */
} IbpLaunch;

/* Device scratch the decode takes beside the staged data (plans of one column without predictors
 * decode without). */
static size_t dec_scratch_bytes(const IbpLaunch *l)
{
    return l->has_pred || l->columns > 1 ? align_up(ibp_decode_scratch_bytes(l->mod)) : 0;
}

/* Device memory the decodes of up to nblocks blocks rewrite flagged selectors into (plans that
 * write them only). */
static size_t selx_bytes(const IbpLaunch *l, uint32_t nblocks)
{
    return l->flagged ? align_up(ibp_decode_selx_bytes(l->word_size, (uint32_t)l->block_size, nblocks)) : 0;
}

/* ibp_staging_acquire, the time it waited added to the copy's. */
static int stage_acquire(const IbpLaunch *l, CUcontext ctx, size_t size, IbpStagingBuf **out)
{
    const int err = ibp_staging_acquire(ctx, size, out);
    if (!err)
        *l->staging_wait += (*out)->waited_ns;
    return err;
}

/* Bytes of a piece's offset table (its blocks' slab offsets and the end). */
static size_t offsets_bytes(const IbpPiece *p)
{
    return ((size_t)p->nblocks + 1) * sizeof(uint64_t);
}

/* Whether the decodes of the piece need its offset table in device memory: a launch carries
 * the offsets of up to IBP_DECODE_INLINE_OFFSETS - 1 blocks spanning under 4 GiB in its
 * arguments (ibp_decode_inline_offsets). */
static int offsets_staged(const IbpPiece *p)
{
    return !ibp_decode_offsets_fit(p->nblocks, p->run_len);
}

/* Copies the piece's offset table to `at` on `stream` and points l->offsets at it, for runs too
 * long to carry their offsets in the launch.  The decode reads an offset per warp and group of
 * segments: from device memory that costs a cached load, through the table's mapped address a
 * read across PCIe, thousands of which at once slowed the decode (4 MiB of bf16 weights: 87
 * against 255 GB/s on an H200) and the DMAs beside it. */
static int stage_offsets(IbpLaunch *l, const IbpPiece *p, CUdeviceptr at, CUstream stream)
{
    if (l->drv->cuMemcpyHtoDAsync(at, p->offsets, offsets_bytes(p), stream) != CUDA_SUCCESS)
        return -EIO;
    l->offsets = at - (CUdeviceptr)p->first_block * sizeof(uint64_t);
    return 0;
}

/* Decodes blocks [first, first + count) of the staged run (run_base = device address of block
 * `run_first`) into dst, writing original bytes [skip, skip + len) of those blocks. */
static int launch_decode(const IbpLaunch *l, CUdeviceptr run_base, uint32_t run_first, uint32_t first,
                         uint32_t count, CUdeviceptr dst, uint64_t skip, uint64_t len)
{
    IbpDecodeArgs args = {
        .comp = run_base + (l->host_offsets[first] - l->host_offsets[run_first]),
        .offsets = l->offsets + (CUdeviceptr)first * sizeof(uint64_t),
        .plan = l->plan,
        .dst = dst,
        .len = len,
        .skip = skip,
        .scratch = l->dec_scratch,
        .selx = l->selx,
        .nblocks = count,
        .block_size = (uint32_t)l->block_size,
    };
    if (!ibp_decode_inline_offsets(&args, l->host_offsets + first) && !l->offsets)
        return -EINVAL; /* the piece's table was not staged: its runs all fit the arguments */
    /* The shadow's blocks are this library's: every packed one has its group index, and its
     * carries where the plan's predictors call for them. */
    const unsigned flags = IBP_DECODE_INDEXED | (l->has_pred ? IBP_DECODE_PRED : 0u) |
                           (l->flagged ? IBP_DECODE_SELFLAGS : 0u) | l->top;
    return ibp_decode_launch(l->mod, &args, l->word_size, l->columns, l->nsets, flags, l->opts.max_grid,
                             l->stream);
}

/* Which blocks of a compressed piece are needed and how.  Plans with predictor columns decode a
 * clipped edge block whole into scratch space and copy the bytes wanted, since undoing a predictor
 * needs the words before the clip. */
typedef struct IbpGeom {
    uint32_t first, last; /* blocks of the piece */
    uint64_t start;       /* original byte of the region at dst[0] */
    uint64_t len;
    int head_clipped, tail_clipped;
} IbpGeom;

static void piece_geom(const IbpPiece *p, size_t bs, int has_pred, IbpGeom *g)
{
    g->first = p->first_block;
    g->last = p->first_block + p->nblocks - 1;
    g->start = p->off;
    g->len = p->len;
    const uint64_t skip = p->off - (uint64_t)g->first * bs;
    const uint64_t end_in_last = p->off + p->len - (uint64_t)g->last * bs; /* bytes of the last block used */
    g->head_clipped = has_pred && skip > 0;
    g->tail_clipped = has_pred && end_in_last < bs && (g->last != g->first || !g->head_clipped) &&
                      (p->off + p->len) % bs != 0;
}

/* A piece's raw tail (ibp_pipe_raw_from()): the compressed rest's geometry (blocks g->first to
 * comp->last) and the raw part, bytes [*off, *off + *len) of the piece; 0 where it keeps none. */
static int raw_tail_split(const IbpGeom *g, size_t bs, size_t want, IbpGeom *comp, uint64_t *off,
                          uint64_t *len)
{
    const uint32_t from = ibp_pipe_raw_from(g->first, g->last + 1, bs, want);
    if (from == g->last + 1)
        return 0;
    *comp = *g;
    comp->last = from - 1;
    comp->len = (uint64_t)from * bs - g->start;
    comp->tail_clipped = 0;
    *off = comp->len;
    *len = g->len - comp->len;
    return 1;
}

/* A serial run's clipped edge goes as it is where that saves at least this many bytes of the wire
 * over its block compressed: about what the DMA of its own costs in start-up at 55 GB/s. */
#define IBP_EDGE_MIN_SAVING ((uint64_t)64 << 10)

/* The edges of a piece that starts or ends inside a block and whose bytes there are fewer, as they
 * are, than that block compressed (by IBP_EDGE_MIN_SAVING): the geometry of the blocks between
 * (mid) and the bytes of the piece that go as they are, [0, *head) and [g->len - *tail, g->len).
 * offs: the slab offsets, indexed by absolute block number.  0 where no edge goes so, or where
 * fewer than one whole block would be left between. */
static int edge_split(const IbpGeom *g, const uint64_t *offs, size_t bs, IbpGeom *mid, uint64_t *head,
                      uint64_t *tail)
{
    *head = *tail = 0;
    if (g->last < g->first + 2)
        return 0;
    const uint64_t skip = g->start - (uint64_t)g->first * bs;
    const uint64_t end = g->start + g->len, end_in_last = end - (uint64_t)g->last * bs;
    if (skip && offs[g->first + 1] - offs[g->first] >= (bs - skip) + IBP_EDGE_MIN_SAVING)
        *head = bs - skip;
    if (end_in_last < bs && offs[g->last + 1] - offs[g->last] >= end_in_last + IBP_EDGE_MIN_SAVING)
        *tail = end_in_last;
    if (!*head && !*tail)
        return 0;
    *mid = *g;
    if (*head) {
        mid->first++;
        mid->start = (uint64_t)mid->first * bs;
        mid->head_clipped = 0;
    }
    if (*tail) {
        mid->last--;
        mid->tail_clipped = 0;
    }
    mid->len = (*tail ? (uint64_t)(mid->last + 1) * bs : end) - mid->start;
    return 1;
}

/* Writes the edges [0, head) and [len - tail, len) of a piece of len bytes from src (pinned host
 * memory) to dst by ibp_k_copy_edges on l->stream, reading src by its device address ([transfer]
 * edge_kernel): 0, or -1 where src has no device address or the launch failed, leaving them to the
 * caller's DMAs. */
static int launch_edges(const IbpLaunch *l, CUdeviceptr dst, const uint8_t *src, uint64_t len, uint64_t head,
                        uint64_t tail)
{
    CUdeviceptr at = 0;
    if (l->drv->cuMemHostGetDevicePointer(&at, (void *)src, 0) != CUDA_SUCCESS)
        return -1;
    IbpEdgeArgs a = {.src = {at, at + (len - tail)}, .dst = {dst, dst + (len - tail)}, .len = {head, tail}};
    void *params[] = {&a};
    return ibp_kernel_launch(l->mod, IBP_KERNEL_COPY_EDGES, ibp_edge_grid(head, tail), IBP_EDGE_THREADS, 0,
                             l->stream, params)
               ? -1
               : 0;
}

/* Enqueues on l->stream the decodes that write what the piece wants of blocks [b, e) into dst (the
 * piece's destination); the compressed bytes of block run_first are at run_base.  scr: 2 blocks of
 * scratch when the piece has clipped edges. */
static int decode_blocks(const IbpLaunch *l, const IbpGeom *g, CUdeviceptr run_base, uint32_t run_first,
                         uint32_t b, uint32_t e, CUdeviceptr dst, CUdeviceptr scr)
{
    const IbpDriver *drv = l->drv;
    const uint64_t bs = l->block_size;
    uint32_t lo = b, hi = e;
    int err = 0;
    if (g->head_clipped && b == g->first) {
        const uint64_t skip = g->start - (uint64_t)g->first * bs;
        const uint64_t take = g->len < bs - skip ? g->len : bs - skip;
        err = launch_decode(l, run_base, run_first, g->first, 1, scr, 0, bs);
        if (!err && drv->cuMemcpyDtoDAsync(dst, scr + skip, take, l->stream) != CUDA_SUCCESS)
            err = -EIO;
        lo++;
    }
    if (!err && g->tail_clipped && e == g->last + 1 && g->last >= lo) {
        const uint64_t at = (uint64_t)g->last * bs;
        err = launch_decode(l, run_base, run_first, g->last, 1, scr + bs, 0, bs);
        if (!err && drv->cuMemcpyDtoDAsync(dst + (at - g->start), scr + bs, g->start + g->len - at,
                                           l->stream) != CUDA_SUCCESS)
            err = -EIO;
        hi--;
    }
    if (!err && hi > lo) {
        const uint64_t from = (uint64_t)lo * bs > g->start ? (uint64_t)lo * bs : g->start;
        const uint64_t to = (uint64_t)hi * bs < g->start + g->len ? (uint64_t)hi * bs : g->start + g->len;
        err = launch_decode(l, run_base, run_first, lo, hi - lo, dst + (from - g->start),
                            from - (uint64_t)lo * bs, to - from);
    }
    return err;
}

/* ---- Plans on the device ---- */

/* A shadow's plan blob uploaded once to a context.  An entry serves a run only when its bytes
 * equal the blob's now (a blob's address may come back with another plan); entries stay until
 * the process ends, since a decode may still read one at any time. */
typedef struct IbpDevPlan {
    CUcontext ctx;
    const void *host;
    size_t len;
    uint8_t *bytes;
    CUdeviceptr dev;
    CUevent ready; /* recorded after the upload */
    int settled;   /* ready has completed */
} IbpDevPlan;

static pthread_mutex_t dev_plan_lock = PTHREAD_MUTEX_INITIALIZER;
static IbpDevPlan dev_plans[IBP_DEV_PLANS];
static int ndev_plans;

/* Uploads the blob on `stream` into a new entry; NULL when there is no room or the driver
 * refuses.  Called with dev_plan_lock held. */
static IbpDevPlan *dev_plan_add(const IbpDriver *drv, CUcontext ctx, const void *blob, size_t len,
                                CUstream stream)
{
    if (ndev_plans == IBP_DEV_PLANS || !len)
        return NULL;
    IbpDevPlan e = {.ctx = ctx, .host = blob, .len = len, .bytes = malloc(len)};
    if (!e.bytes)
        return NULL;
    const IbpCaptureMode mode = ibp_driver_capture_relax(drv);
    const CUresult allocated = drv->cuMemAlloc(&e.dev, len);
    ibp_driver_capture_restore(drv, mode);
    if (allocated != CUDA_SUCCESS) {
        free(e.bytes);
        return NULL;
    }
    const int queued = drv->cuMemcpyHtoDAsync(e.dev, blob, len, stream) == CUDA_SUCCESS;
    if (!queued || drv->cuEventCreate(&e.ready, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
        drv->cuEventRecord(e.ready, stream) != CUDA_SUCCESS) {
        if (queued)
            ibp_driver_stream_sync(drv, stream); /* the upload must not land in freed memory */
        if (queued && e.ready)
            drv->cuEventDestroy(e.ready);
        const IbpCaptureMode relaxed = ibp_driver_capture_relax(drv);
        drv->cuMemFree(e.dev);
        ibp_driver_capture_restore(drv, relaxed);
        free(e.bytes);
        return NULL;
    }
    memcpy(e.bytes, blob, len);
    dev_plans[ndev_plans] = e;
    return &dev_plans[ndev_plans++];
}

/* Where a run's decode reads the plan, with what it needs enqueued on `stream` (the run's DMA
 * stream, which the decode follows): the context's device copy of the blob (uploaded at its first
 * run, waited for while that upload may still be pending), else a copy into `staged` as part of
 * the run.  On the H200 each run's own plan copy (96 bytes to a few KiB) held the copy engine
 * 5-25 us before the next DMA started.  *wire: the plan bytes this run moves.  0 on a driver
 * error. */
static CUdeviceptr plan_for_run(const IbpDriver *drv, CUcontext ctx, const void *blob, size_t len,
                                CUstream stream, CUdeviceptr staged, size_t *wire)
{
    *wire = 0;
    CUdeviceptr dev = 0;
    CUevent wait = NULL;
    pthread_mutex_lock(&dev_plan_lock);
    IbpDevPlan *e = NULL;
    for (int i = 0; i < ndev_plans && !e; i++) {
        IbpDevPlan *c = &dev_plans[i];
        if (c->ctx == ctx && c->host == blob && c->len == len && !memcmp(c->bytes, blob, len))
            e = c;
    }
    if (e) {
        dev = e->dev;
        if (!e->settled && !(e->settled = ibp_driver_event_query(drv, e->ready) == CUDA_SUCCESS))
            wait = e->ready;
    } else if ((e = dev_plan_add(drv, ctx, blob, len, stream))) {
        dev = e->dev; /* uploaded on this stream: the run's DMA and decode follow it */
        *wire = len;
    }
    pthread_mutex_unlock(&dev_plan_lock);
    if (dev && (!wait || drv->cuStreamWaitEvent(stream, wait, 0) == CUDA_SUCCESS))
        return dev;
    if (drv->cuMemcpyHtoDAsync(staged, blob, len, stream) != CUDA_SUCCESS)
        return 0;
    *wire = len;
    return staged;
}

/* ---- Pipelined runs ---- */

typedef struct IbpPipe {
    CUstream copy, decode;
    /* The raw pieces of a copy that also has compressed runs, beside its decodes. */
    CUstream raw;
    /* The application's stream whose copies made the pair, and whether another's copies used it
     * since (streams share the IBP_PIPE_PAIRS pairs of a context): only an owner's own copies that
     * go as they are follow its DMAs on the copy stream (ibp_send_raw_in_order). */
    CUstream owner;
    int shared;
} IbpPipe;

typedef struct IbpPipeSet {
    CUcontext ctx;
    IbpPipe pair[IBP_PIPE_PAIRS];
} IbpPipeSet;

static pthread_mutex_t pipe_lock = PTHREAD_MUTEX_INITIALIZER;
static IbpPipeSet pipes[IBP_PIPE_CONTEXTS];

/* Which of a context's IBP_PIPE_PAIRS pairs copies on `caller` use. */
static unsigned pipe_slot(CUstream caller)
{
    return (unsigned)(((uint64_t)(uintptr_t)caller * 0x9e3779b97f4a7c15ull) >> 32) % IBP_PIPE_PAIRS;
}

/* The pair of internal streams that runs copied on `caller` use in `ctx` (current), created on
 * first use as non-blocking streams (no implicit ordering with the legacy stream); NULL when they
 * cannot be created, and the run goes DMA, then decode.  Never called for a capturing stream. */
static const IbpPipe *pipe_for(const IbpDriver *drv, CUcontext ctx, CUstream caller, int priority)
{
    const unsigned k = pipe_slot(caller);
    const IbpPipe *found = NULL;
    pthread_mutex_lock(&pipe_lock);
    for (int i = 0; i < IBP_PIPE_CONTEXTS; i++) {
        IbpPipeSet *set = &pipes[i];
        if (set->ctx && set->ctx != ctx)
            continue;
        set->ctx = ctx;
        IbpPipe *pp = &set->pair[k];
        if (!pp->copy && drv->cuStreamCreate(&pp->copy, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
            pp->copy = NULL;
        /* Priorities out of the device's range are clamped to it: this asks for the highest. */
        if (pp->copy && !pp->decode &&
            (priority ? drv->cuStreamCreateWithPriority(&pp->decode, CU_STREAM_NON_BLOCKING, -1000)
                      : drv->cuStreamCreate(&pp->decode, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS)
            pp->decode = NULL;
        if (pp->copy && pp->decode && !pp->raw && drv->cuStreamCreate(&pp->raw, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
            pp->raw = NULL;
        if (pp->copy && pp->decode && pp->raw) {
            found = pp;
            if (!pp->owner)
                pp->owner = caller;
            else if (pp->owner != caller)
                pp->shared = 1;
        } else
            IBP_DEBUG("internal streams for pipelined copies could not be created: DMA, then decode");
        break;
    }
    pthread_mutex_unlock(&pipe_lock);
    return found;
}

/* The copy stream that compressed copies on `caller` in `ctx`, and on no other stream, sent their
 * DMAs on ahead of the caller's stream; NULL where there is none (a shared one: making it wait
 * for the caller's earlier work would hold back other streams' DMAs behind it). */
static CUstream copy_stream_of(CUcontext ctx, CUstream caller)
{
    CUstream found = NULL;
    pthread_mutex_lock(&pipe_lock);
    for (int i = 0; i < IBP_PIPE_CONTEXTS && pipes[i].ctx; i++) {
        if (pipes[i].ctx == ctx) {
            const IbpPipe *pp = &pipes[i].pair[pipe_slot(caller)];
            found = pp->owner == caller && !pp->shared ? pp->copy : NULL;
            break;
        }
    }
    pthread_mutex_unlock(&pipe_lock);
    return found;
}

/* Whether the copy goes from pinned host memory to device memory: a pageable source would make
 * the real call wait for the copy stream to drain first, and a copy in another direction has no
 * place among the copy stream's host-to-device DMAs. */
static int pinned_to_device(const IbpDriver *drv, const void *dst, const void *src)
{
    unsigned int dst_type = 0, src_type = 0;
    return drv->cuPointerGetAttribute(&dst_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                      (CUdeviceptr)(uintptr_t)dst) == CUDA_SUCCESS &&
           dst_type == CU_MEMORYTYPE_DEVICE &&
           drv->cuPointerGetAttribute(&src_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                      (CUdeviceptr)(uintptr_t)src) == CUDA_SUCCESS &&
           src_type == CU_MEMORYTYPE_HOST;
}

int ibp_send_raw_in_order(IbpStreamApi api, void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                          CUcontext ctx, CUstream cu_stream, cudaError_t *ret)
{
    const IbpReal_cudaMemcpyAsync real = real_memcpy_async(api);
    const IbpDriver *drv = ibp_driver_get();
    /* Each thread's per-thread default stream has the same handle: whose it is cannot be told.
     * The pair is looked up first: most streams have none, and pay no driver call more. */
    const CUstream copy = n >= IBP_RAW_IN_ORDER_MIN && cu_stream != CU_STREAM_PER_THREAD
                              ? copy_stream_of(ctx, cu_stream)
                              : NULL;
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    if (!real || !drv || !copy || drv->cuStreamIsCapturing(cu_stream, &capture) != CUDA_SUCCESS ||
        capture != CU_STREAM_CAPTURE_STATUS_NONE || !pinned_to_device(drv, dst, src) ||
        ibp_devmem_stream_join(ctx, cu_stream, copy))
        return 0;
    /* The copy stream's handle is the runtime's too; the real call answers as it would on the
     * caller's stream (an invalid argument enqueues nothing).  The caller's stream waits for the
     * copy stream whatever it answered (an error of earlier work may come with a copy enqueued). */
    *ret = real(dst, src, n, kind, (cudaStream_t)copy);
    if (ibp_devmem_stream_join(ctx, copy, cu_stream) && ibp_driver_stream_sync(drv, copy) != CUDA_SUCCESS &&
        *ret == cudaSuccess)
        *ret = cudaErrorUnknown; /* the bytes may land after the caller's later work */
    return 1;
}

/* Copies the piece's run in chunks on the pair's copy stream into IBP_PIPE_SLOTS staging slots
 * and decodes each chunk on the decode stream once it landed, so the DMA of a chunk overlaps the
 * decode of the one before; a slot is written again only after the decode that read it (device
 * waits on events, no host synchronisation).  The decode stream first waits for the caller's
 * earlier work and the caller's stream then waits for it, also when something failed half-way,
 * so a raw copy of the piece enqueued after a failure is never overwritten by a late decode.  When
 * no join can be enqueued, the internal streams are synchronised on the host before returning.
 * The last chunks shrink down to `tail` (ibp_pipe_tail()).  g covers the compressed blocks; with
 * raw_len, bytes [raw_off, raw_off + raw_len) of the piece follow as they are from raw_src, on the
 * copy stream after the caller's earlier work and the last chunk's DMA.  Returns 0, -EBUSY (no
 * staging) or -EIO. */
static int send_pipelined(const IbpLaunch *base, const IbpPipe *pp, CUcontext ctx, const IbpPiece *p,
                          const IbpGeom *g, const void *blob, size_t blob_len, CUdeviceptr dst, size_t tail,
                          const uint8_t *raw_src, uint64_t raw_off, uint64_t raw_len, int timed, size_t *sent)
{
    const IbpDriver *drv = base->drv;
    const uint64_t *offs = base->host_offsets;
    const uint32_t end = g->last + 1;
    const size_t chunk = ibp_pipe_chunk_size(p->run_len, base->opts.pipeline_chunk);
    const IbpPipeChunks chunks = ibp_pipe_chunks(offs, g->first, end, chunk, tail);
    const uint32_t nchunks = chunks.count;
    const size_t scratch = (g->head_clipped || g->tail_clipped) ? 2 * base->block_size : 0;
    const size_t dec_scratch = dec_scratch_bytes(base);
    const size_t selx = selx_bytes(base, chunks.max_blocks); /* one chunk's decode at a time */
    const size_t slot_stride = align_up(chunks.max_bytes);
    IbpStagingBuf *stage = NULL;
    /* Each chunk's decode is a launch of its own: when every one can carry its blocks' offsets,
     * the table is not sent (a copy start-up less ahead of the first chunk). */
    const int chunks_inline = ibp_decode_offsets_fit(chunks.max_blocks, chunks.max_bytes);
    const size_t offs_len = offsets_staged(p) && !chunks_inline ? align_up(offsets_bytes(p)) : 0;
    int err = stage_acquire(
        base, ctx,
        align_up(blob_len) + offs_len + dec_scratch + selx + scratch + IBP_PIPE_SLOTS * slot_stride, &stage);
    if (err) {
        if (timed)
            speed_unreserve(drv, ctx, 1);
        return err;
    }
    IbpLaunch l = *base;
    l.plan = stage->ptr;
    l.stream = pp->decode;
    const CUdeviceptr offs_dev = stage->ptr + align_up(blob_len);
    l.dec_scratch = dec_scratch ? offs_dev + offs_len : 0;
    l.selx = selx ? offs_dev + offs_len + dec_scratch : 0;
    const CUdeviceptr scr = offs_dev + offs_len + dec_scratch + selx;
    const CUdeviceptr slots = scr + scratch;
    void *decoded[IBP_PIPE_SLOTS] = {NULL};
    size_t plan_wire = 0, dma_sample = 0, dec_sample = 0;
    int marked = 0; /* probe events recorded so far (the fourth is ev[4]) */
    /* The copies write only staging slots: like a serial run's DMA (send_run), they run ahead of
     * the caller's earlier work, except in a timed run, whose first event must mark when the
     * caller's stream got there. */
    if ((timed && ibp_devmem_stream_join(ctx, base->stream, pp->copy)) ||
        ibp_devmem_stream_join(ctx, base->stream, pp->decode))
        err = -EIO;
    if (!err && timed && !speed_mark(drv, ctx, 1, 0, pp->copy))
        marked = 1;
    if (!err && (!(l.plan = plan_for_run(drv, ctx, blob, blob_len, pp->copy, stage->ptr, &plan_wire)) ||
                 (offs_len && stage_offsets(&l, p, offs_dev, pp->copy))))
        err = -EIO;
    plan_wire += offs_len ? offsets_bytes(p) : 0;
    dma_sample = plan_wire;
    uint32_t k = 0;
    for (uint32_t b = g->first; !err && b < end; k++) {
        const uint32_t e = ibp_pipe_chunk_end(offs, b, end, chunk, tail);
        const unsigned s = k % IBP_PIPE_SLOTS;
        const CUdeviceptr slot = slots + s * slot_stride;
        /* The slot's last reader must be done before the copy stream writes it again. */
        if (decoded[s]) {
            const CUresult res = drv->cuStreamWaitEvent(pp->copy, ibp_devmem_fence_event(decoded[s]), 0);
            ibp_devmem_fence_release(decoded[s]);
            decoded[s] = NULL;
            if (res != CUDA_SUCCESS) {
                err = -EIO;
                break;
            }
        }
        const uint8_t *src = (const uint8_t *)p->run + (offs[b] - offs[g->first]);
        if (drv->cuMemcpyHtoDAsync(slot, src, offs[e] - offs[b], pp->copy) != CUDA_SUCCESS) {
            err = -EIO;
            break;
        }
        if (k < IBP_PIPE_SLOTS)
            dma_sample += offs[e] - offs[b];
        if (timed && marked == 1 && (k + 1 == IBP_PIPE_SLOTS || e == end) &&
            !speed_mark(drv, ctx, 1, 1, pp->copy))
            marked = 2;
        if (ibp_devmem_stream_join(ctx, pp->copy, pp->decode)) {
            err = -EIO;
            break;
        }
        if (timed && marked == 2 && e == end && !speed_mark(drv, ctx, 1, 2, pp->decode)) {
            const uint64_t lo =
                (uint64_t)b * base->block_size > g->start ? (uint64_t)b * base->block_size : g->start;
            dec_sample = g->start + g->len - lo; /* what the last chunk's decode writes */
            marked = 3;
        }
        err = decode_blocks(&l, g, slot, b, b, e, dst, scr);
        if (!err && marked == 3 && e == end && !speed_mark(drv, ctx, 1, 4, pp->decode))
            marked = 4;
        if (!err && k + IBP_PIPE_SLOTS < nchunks && !(decoded[s] = ibp_devmem_fence_record(ctx, pp->decode)))
            err = -EIO;
        b = e;
    }
    for (unsigned s = 0; s < IBP_PIPE_SLOTS; s++)
        ibp_devmem_fence_release(decoded[s]);
    /* The raw tail writes dst, so it waits for the caller's earlier work (a timed run's copy
     * stream already does), and it follows the last chunk's DMA on the copy stream.  That wait
     * holds back the next runs' chunks, yet on a stream of its own the tail cost copies streamed
     * back to back 2-5% more than on the copy stream, where it ran about as fast as without a
     * tail; a copy alone measured the same either way (docs/BENCHMARKS.md, "The raw tail on the
     * copy stream"). */
    const int tailed = !err && raw_len;
    if (tailed && ((!timed && ibp_devmem_stream_join(ctx, base->stream, pp->copy)) ||
                   drv->cuMemcpyHtoDAsync(dst + raw_off, raw_src, raw_len, pp->copy) != CUDA_SUCCESS))
        err = -EIO;
    if (!err && raw_len)
        IBP_DEBUG("pipelined run: %u chunks, then a raw tail of %llu bytes", k, (unsigned long long)raw_len);
    else if (!err)
        IBP_DEBUG("pipelined run: %u chunks", k);
    /* The caller's stream waits for the decodes and the raw tail; after a failure also for the
     * copies, which may still read the shadow or write the staging buffer. */
    if (ibp_devmem_stream_join(ctx, pp->decode, base->stream) ||
        ((err || tailed) && ibp_devmem_stream_join(ctx, pp->copy, base->stream))) {
        ibp_driver_stream_sync(drv, pp->decode);
        ibp_driver_stream_sync(drv, pp->copy);
        err = -EIO;
    }
    if (!err)
        speed_busy(drv, ctx, base->stream);
    if (timed) {
        if (!err && marked == 4 && !speed_mark(drv, ctx, 1, 3, base->stream))
            speed_recorded(drv, ctx, 1, dma_sample, dec_sample, p->len, base->tag);
        else
            speed_unreserve(drv, ctx, 1);
    }
    ibp_staging_release(stage, base->stream);
    *sent = plan_wire + (offs[end] - offs[g->first]) + raw_len;
    return err;
}

/* Decodes the staged run (after its copy on l->stream): on the internal decode stream of the
 * highest priority with [transfer] priority_decode, joined to l->stream both ways, else on
 * l->stream itself. */
static int decode_on_priority(const IbpLaunch *l, const IbpGeom *g, CUdeviceptr run, CUdeviceptr dst,
                              CUdeviceptr scr, CUcontext ctx)
{
    const IbpPipe *pp = l->opts.priority_decode ? pipe_for(l->drv, ctx, l->stream, 1) : NULL;
    if (!pp || ibp_devmem_stream_join(ctx, l->stream, pp->decode))
        return decode_blocks(l, g, run, g->first, g->first, g->last + 1, dst, scr);
    IbpLaunch on = *l;
    on.stream = pp->decode;
    const int err = decode_blocks(&on, g, run, g->first, g->first, g->last + 1, dst, scr);
    if (ibp_devmem_stream_join(ctx, pp->decode, l->stream)) {
        /* The caller's stream cannot wait for the decode: wait here, so nothing it enqueues later
         * sees the destination before the decode wrote it. */
        ibp_driver_stream_sync(l->drv, pp->decode);
        return -EIO;
    }
    return err;
}

/* One compressed piece: stage the plan blob and the run, then decode; runs longer than a chunk
 * go pipelined where internal streams are available. */
static int send_run(const IbpLaunch *base, IbpShadow *shadow, const IbpPiece *p, uint8_t *dst_piece,
                    const uint8_t *src_piece, CUcontext ctx, size_t *sent)
{
    const IbpDriver *drv = base->drv;
    size_t blob_len = 0;
    const void *blob = ibp_shadow_plan_blob(shadow, &blob_len);
    IbpCodecPlanInfo info;
    ibp_codec_plan_info(ibp_shadow_codec_plan(shadow), &info);
    const size_t bs = base->block_size;
    IbpGeom g;
    piece_geom(p, bs, info.xf_delta + info.xf_xor > 0, &g);
    const uint64_t skip = p->off - (uint64_t)g.first * bs;
    const size_t scratch = (g.head_clipped || g.tail_clipped) ? 2 * bs : 0;
    const CUdeviceptr dst = (CUdeviceptr)(uintptr_t)dst_piece;
    IbpLaunch l = *base;
    l.word_size = info.word_size;
    l.columns = info.columns;
    l.nsets = info.nsets;
    l.has_pred = info.xf_delta + info.xf_xor > 0;
    l.flagged = info.selector_flags && ibp_shadow_any_flagged(shadow);
    /* (the piece's blocks were published before, so the forms they took are noted) */
    l.top =
        ibp_decode_top_flag(info.top_coded && ibp_shadow_any_topcoded(shadow), ibp_shadow_any_packed(shadow));
    if (base->opts.zerocopy && !scratch) {
        /* The kernel reads the run, its offsets and the plan through their mapped addresses. */
        CUdeviceptr run_dev, blob_dev;
        void *run_host = (void *)p->run, *blob_host = (void *)blob, *offsets_host = (void *)p->offsets;
        if (drv->cuMemHostGetDevicePointer(&run_dev, run_host, 0) != CUDA_SUCCESS ||
            drv->cuMemHostGetDevicePointer(&blob_dev, blob_host, 0) != CUDA_SUCCESS ||
            drv->cuMemHostGetDevicePointer(&l.offsets, offsets_host, 0) != CUDA_SUCCESS)
            return -EIO;
        l.offsets -= (CUdeviceptr)g.first * sizeof(uint64_t); /* index by absolute block number */
        l.plan = blob_dev;
        IbpStagingBuf *stage = NULL;
        const size_t dec_scratch = dec_scratch_bytes(&l), selx = selx_bytes(&l, p->nblocks);
        if (dec_scratch + selx) {
            const int err = stage_acquire(base, ctx, dec_scratch + selx, &stage);
            if (err)
                return err;
            l.dec_scratch = dec_scratch ? stage->ptr : 0;
            l.selx = selx ? stage->ptr + dec_scratch : 0;
        }
        const int err = launch_decode(&l, run_dev, g.first, g.first, p->nblocks, dst, skip, p->len);
        if (stage)
            ibp_staging_release(stage, l.stream);
        if (!err)
            *sent += p->run_len;
        return err;
    }
    /* Runs of two chunks are pipelined; shorter ones that hold a chunk of original bytes, or that
     * keep a raw tail (and compress to no less than a quarter), too, as long as no other compressed
     * copy's decode is pending.  A raw tail is kept only then, pipelined or not: back to back, one
     * copy's DMAs overlap the decode before them, and a tail only adds bytes and a DMA that waits
     * for the caller's earlier work (64 MiB slices streamed two an epoch copied 1-7% slower with a
     * 1 MiB tail on every run, on the H200, the tail then on a stream of its own). */
    const uint64_t run_orig = (uint64_t)(g.last + 1 - g.first) * bs;
    const size_t tail = ibp_pipe_tail(base->opts.pipeline_tail, p->run_len, run_orig);
    const int whole = ibp_pipe_worth(p->run_len, base->opts.pipeline_chunk);
    const int alone_worth = ibp_pipe_alone_worth(p->run_len, run_orig, base->opts.pipeline_chunk, tail);
    IbpGeom comp = g;
    uint64_t raw_off = 0, raw_len = 0;
    const int want_tail = base->opts.pipeline_raw_tail &&
                          ibp_pipe_raw_worth(p->run_len, run_orig, base->opts.pipeline_chunk, tail);
    const int quiet = (want_tail || (!whole && alone_worth)) && !speed_pending(drv, ctx);
    const int tailed =
        want_tail && quiet && raw_tail_split(&g, bs, base->opts.pipeline_raw_tail, &comp, &raw_off, &raw_len);
    const int alone = !whole && (tailed || alone_worth) && quiet;
    const IbpPipe *pp = whole || alone ? pipe_for(drv, ctx, base->stream, base->opts.priority_decode) : NULL;
    int timed = 0;
    if (!speed_allows(drv, ctx, blob_len + p->run_len, p->len, whole && pp, base->opts.force, base->probe,
                      &timed))
        return -ETIME;
    /* A run pipelined only while alone is judged as a serial run, which it beats; a timed one
     * goes serial, so that the serial path's speeds are what is measured. */
    if (pp && !whole && timed)
        pp = NULL;
    if (pp) {
        size_t moved = 0;
        const int err = send_pipelined(&l, pp, ctx, p, &comp, blob, blob_len, dst, tail, src_piece + raw_off,
                                       raw_off, raw_len, timed, &moved);
        if (!err)
            *sent += moved;
        return err;
    }
    /* Clipped edges that are fewer bytes as they are than their blocks compressed go so, on the
     * DMA's stream after it (not in a timed run, whose speeds are the compressed path's). */
    const uint64_t *offs = base->host_offsets;
    IbpGeom mid = g;
    uint64_t head = 0, tail_raw = 0;
    if (!timed && base->opts.raw_edges)
        edge_split(&g, offs, bs, &mid, &head, &tail_raw);
    const uint8_t *run_src = (const uint8_t *)p->run + (offs[mid.first] - offs[g.first]);
    const size_t run_len = offs[mid.last + 1] - offs[mid.first];
    const size_t mid_scratch = (mid.head_clipped || mid.tail_clipped) ? 2 * bs : 0;
    IbpStagingBuf *stage = NULL;
    const size_t dec_scratch = dec_scratch_bytes(&l), selx = selx_bytes(&l, p->nblocks);
    const size_t offs_len = offsets_staged(p) ? align_up(offsets_bytes(p)) : 0;
    int err = stage_acquire(base, ctx,
                            align_up(blob_len) + offs_len + align_up(run_len) + align_up(mid_scratch) +
                                dec_scratch + selx,
                            &stage);
    if (err) {
        if (timed)
            speed_unreserve(drv, ctx, 0);
        return err;
    }
    const CUdeviceptr offs_dev = stage->ptr + align_up(blob_len);
    const CUdeviceptr run = offs_dev + offs_len;
    const CUdeviceptr scr = run + align_up(run_len);
    l.dec_scratch = dec_scratch ? scr + align_up(mid_scratch) : 0;
    l.selx = selx ? scr + align_up(mid_scratch) + dec_scratch : 0;
    /* The DMA writes only the staging buffer, which is idle, from the shadow, which the plan
     * holds: it need not wait for the caller's earlier work, and on an internal copy stream it
     * runs ahead of it (while the copy engine would otherwise wait for the last copy's decode).
     * Only the decode, which writes dst, takes the caller's place in its stream.  A timed run's
     * DMA waits for the caller's earlier work, so the speeds measured are never flattered by an
     * overlap with the last decode; on the copy stream later runs' DMAs queue behind it rather
     * than share the link with it (on the caller's stream they did, and its DMA measured 2-30
     * GB/s on the H200). */
    const IbpPipe *ahead = pipe_for(drv, ctx, base->stream, base->opts.priority_decode);
    if (ahead && timed && ibp_devmem_stream_join(ctx, l.stream, ahead->copy))
        ahead = NULL;
    const CUstream dma_stream = ahead ? ahead->copy : l.stream;
    int marked = timed && !speed_mark(drv, ctx, 0, 0, dma_stream);
    size_t plan_wire = 0;
    if (!(l.plan = plan_for_run(drv, ctx, blob, blob_len, dma_stream, stage->ptr, &plan_wire)) ||
        (offs_len && stage_offsets(&l, p, offs_dev, dma_stream)) ||
        drv->cuMemcpyHtoDAsync(run, run_src, run_len, dma_stream) != CUDA_SUCCESS)
        err = -EIO;
    plan_wire += offs_len ? offsets_bytes(p) : 0;
    /* The staging buffer goes back on the caller's stream: it must wait for the DMA whatever
     * happened, or the host does. */
    if (ahead && ibp_devmem_stream_join(ctx, ahead->copy, l.stream)) {
        ibp_driver_stream_sync(drv, ahead->copy);
        err = -EIO;
    }
    /* The edges write dst: by a kernel on the caller's stream ([transfer] edge_kernel), else after
     * the caller's earlier work on the copy stream (a wait recorded before this run's decode, so
     * neither waits for the other), the caller's stream waiting for them after the decode. */
    const int edged = !err && (head || tail_raw) &&
                      !(base->opts.edge_kernel && !launch_edges(&l, dst, src_piece, g.len, head, tail_raw));
    if (edged &&
        ((ahead && ibp_devmem_stream_join(ctx, l.stream, ahead->copy)) ||
         (head && drv->cuMemcpyHtoDAsync(dst, src_piece, head, dma_stream) != CUDA_SUCCESS) ||
         (tail_raw && drv->cuMemcpyHtoDAsync(dst + (g.len - tail_raw), src_piece + (g.len - tail_raw),
                                             tail_raw, dma_stream) != CUDA_SUCCESS)))
        err = -EIO;
    if (!err) {
        marked = marked && !speed_mark(drv, ctx, 0, 1, l.stream);
        err = decode_on_priority(&l, &mid, run, dst + (mid.start - g.start), scr, ctx);
    }
    if (edged && ahead && ibp_devmem_stream_join(ctx, ahead->copy, l.stream)) {
        ibp_driver_stream_sync(drv, ahead->copy);
        err = -EIO;
    }
    if (!err)
        speed_busy(drv, ctx, l.stream);
    if (timed) {
        if (!err && marked && !speed_mark(drv, ctx, 0, 2, l.stream))
            speed_recorded(drv, ctx, 0, plan_wire + p->run_len, p->len, 0, base->tag);
        else
            speed_unreserve(drv, ctx, 0);
    }
    if (!err)
        *sent += plan_wire + run_len + head + tail_raw;
    ibp_staging_release(stage, l.stream);
    return err;
}

cudaError_t ibp_send_plan(IbpStreamApi api, IbpCopyPlan *plan, void *dst, const void *src, size_t n,
                          cudaStream_t stream, CUcontext ctx, CUstream cu_stream, int synchronous,
                          const IbpSendOptions *opts, IbpSendStats *stats)
{
    (void)n;
    const uint64_t t0 = ibp_ledger_elapsed_ns();
    const IbpDriver *drv = ibp_driver_get();
    const IbpModule *mod = NULL;
    memset(stats, 0, sizeof(*stats));
    int gpu_ok = drv && ibp_module_get(ctx, &mod) == 0;
    IbpLaunch l = {.drv = drv,
                   .mod = mod,
                   .stream = cu_stream,
                   .block_size = ibp_shadow_block_size(plan->shadow),
                   .opts = *opts,
                   .tag = plan->tag,
                   .probe = plan->probe,
                   .staging_wait = &stats->staging_wait_ns};
    cudaError_t ret = cudaSuccess;
    const uintptr_t copy_off = (uintptr_t)src - plan->region_base;
    int shadow_read = 0;
    /* Raw pieces between compressed runs go on an internal stream that waits for the caller's
     * earlier work (they write dst) but not for this copy's decodes: the copy engine moves them
     * while the runs before them decode, instead of each raw piece waiting for the decode before
     * it in the caller's stream.  They write bytes no decode writes; the caller's stream waits
     * for them at the end. */
    const IbpPipe *side = NULL;
    int side_used = 0;
    if (gpu_ok && plan->npieces > 1) {
        int kinds = 0;
        for (int i = 0; i < plan->npieces; i++)
            kinds |= plan->pieces[i].kind == IBP_PIECE_COMPRESSED ? 1 : 2;
        if (kinds == 3 && (side = pipe_for(drv, ctx, cu_stream, opts->priority_decode)) &&
            ibp_devmem_stream_join(ctx, cu_stream, side->raw))
            side = NULL;
    }
    for (int i = 0; i < plan->npieces && ret == cudaSuccess; i++) {
        const IbpPiece *p = &plan->pieces[i];
        uint8_t *dst_piece = (uint8_t *)dst + (p->off - copy_off);
        const uint8_t *src_piece = (const uint8_t *)plan->region_base + p->off;
        if (p->kind == IBP_PIECE_RAW && side &&
            drv->cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)dst_piece, src_piece, p->len, side->raw) == CUDA_SUCCESS) {
            side_used = 1;
            stats->raw += p->len;
            continue;
        }
        if (p->kind == IBP_PIECE_COMPRESSED && gpu_ok) {
            l.host_offsets = p->offsets - p->first_block;
            size_t sent = 0;
            const int err = send_run(&l, plan->shadow, p, dst_piece, src_piece, ctx, &sent);
            /* Work that reads the shadow may be queued, also when it failed half-way. */
            shadow_read |= err != -ETIME;
            if (!err) {
                stats->compressed_orig += p->len;
                stats->compressed_sent += sent;
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
        /* A compressed piece that failed goes raw on the caller's stream, behind anything of it
         * already enqueued there. */
        if (!opts->raw_in_order || !ibp_send_raw_in_order(api, dst_piece, src_piece, p->len,
                                                          cudaMemcpyHostToDevice, ctx, cu_stream, &ret))
            ret = raw_copy(api, dst_piece, src_piece, p->len, stream);
        stats->raw += p->len;
    }
    if (side_used && ibp_devmem_stream_join(ctx, side->raw, cu_stream))
        ibp_driver_stream_sync(drv, side->raw); /* the caller's later work must see those bytes */
    void *fence = NULL;
    if (shadow_read) {
        fence = ibp_devmem_fence_record_ordered(ctx, cu_stream); /* never a capturing stream here */
        if (!fence)
            ibp_driver_stream_sync(drv, cu_stream); /* without a fence, the shadow must be free now */
    }
    plan->slower = stats->slower && !stats->compressed_orig;
    ibp_policy_plan_end(plan, fence);
    stats->enqueue_ns = ibp_ledger_elapsed_ns() - t0;
    /* The application's own wait, in its own interaction mode: refused where CUDA would refuse
     * the blocking copy itself. */
    if (synchronous && ret == cudaSuccess && drv) {
        const CUresult waited = drv->cuStreamSynchronize(cu_stream);
        if (waited == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
            ret = cudaErrorStreamCaptureUnsupported;
        else if (waited == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
            ret = cudaErrorStreamCaptureInvalidated;
        else if (waited != CUDA_SUCCESS)
            ret = cudaErrorUnknown;
    }
    return ret;
}
