/* SPDX-License-Identifier: MIT
 * ibpshim: enqueueing a planned host-to-device copy: compressed runs (DMA + decode kernel, long
 * runs pipelined on internal streams) and raw pieces, in the caller's stream order. */
#ifndef IBP_INTERPOSE_COMPRESSED_H
#define IBP_INTERPOSE_COMPRESSED_H

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "interpose/router.h"
#include "policy/engine.h"

typedef struct IbpSendStats {
    size_t compressed_orig;   /* original bytes that went compressed */
    size_t compressed_sent;   /* bytes that crossed PCIe for them (runs, plan blobs, raw tails) */
    size_t raw;               /* bytes copied as they are */
    size_t slower;            /* of those, compressed runs the measured speeds sent raw */
    uint64_t enqueue_ns;      /* host time enqueueing (a synchronous copy's final wait not included) */
    uint64_t staging_wait_ns; /* of that, waiting for staging buffers in flight */
} IbpSendStats;

typedef struct IbpSendOptions {
    int force;          /* send compressed even where measured slower ([transfer] path = dma/zerocopy) */
    int zerocopy;       /* the kernel reads runs through their mapped addresses: no staging, no DMA */
    unsigned max_grid;  /* at most this many CTAs per decode launch ([transfer] max_sms); 0 = no bound */
    /* Runs longer than this go in chunks of about this many compressed bytes, the DMA of one
     * overlapping the decode of the last ([transfer] pipeline_chunk); 0 = DMA, then decode. */
    size_t pipeline_chunk;
    size_t pipeline_tail; /* the last chunks shrink down to about this ([transfer] pipeline_tail) */
    /* A pipelined run's last blocks, about this many original bytes, go as they are after its
     * chunks ([transfer] pipeline_raw_tail); 0 = none. */
    size_t pipeline_raw_tail;
    int priority_decode; /* decode on the internal decode stream, of the highest priority */
    int raw_in_order;    /* ibp_send_raw_in_order() for what goes as it is ([transfer] raw_in_order) */
    int raw_edges; /* a serial run's clipped edges as they are where fewer bytes ([transfer] raw_edges) */
    int edge_kernel; /* those edges by ibp_k_copy_edges on the caller's stream ([transfer] edge_kernel) */
} IbpSendOptions;

/* Shorter copies that go as they are stay on the caller's stream: they hold the copy engine for
 * about as long as the two joins would take the host. */
#define IBP_RAW_IN_ORDER_MIN ((size_t)64 << 10)

/* A copy of n >= IBP_RAW_IN_ORDER_MIN bytes from pinned host memory to device memory that goes
 * as it is (the real cudaMemcpyAsync), on `cu_stream` (current context ctx; not while it captures,
 * nor a per-thread default stream), whose compressed copies, and no other stream's, have sent DMAs
 * ahead on an internal copy stream: it goes on that copy stream too, after the caller's earlier
 * work, and the caller's stream waits for it.  On the caller's own stream the
 * copy engine served it only after every DMA queued ahead, and the decodes behind it in the
 * caller's stream with it (docs/BENCHMARKS.md, "copies that go as they are, in order").  Returns
 * 1 with the real call's result in *ret, or 0 where the stream has no copy stream or cannot be
 * joined to it: the caller makes the real call itself. */
int ibp_send_raw_in_order(IbpStreamApi api, void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                          CUcontext ctx, CUstream cu_stream, cudaError_t *ret);

/* Enqueues every piece of `plan` for the copy [src, src + n) -> dst on `stream` (the
 * application's handle) and ends the plan.  A compressed piece goes raw when it cannot be
 * enqueued, or (unless opts->force) when the compressed path measured on this context would be
 * slower than a plain copy.  Returns what the application should see: cudaSuccess, or the
 * error of a raw copy. */
cudaError_t ibp_send_plan(IbpStreamApi api, IbpCopyPlan *plan, void *dst, const void *src, size_t n,
                          cudaStream_t stream, CUcontext ctx, CUstream cu_stream, int synchronous,
                          const IbpSendOptions *opts, IbpSendStats *stats);

#endif /* IBP_INTERPOSE_COMPRESSED_H */
