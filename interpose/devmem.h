/* SPDX-License-Identifier: MIT
 * ibpshim: the shadow store's pinned memory and transfer fences, backed by the CUDA driver. */
#ifndef IBP_INTERPOSE_DEVMEM_H
#define IBP_INTERPOSE_DEVMEM_H

#include <cuda.h>

#include "policy/shadow.h"

/* Pinned, portable, device-mapped host memory and CUevent fences.  NULL-free: the ops report
 * errors.  Thread-safety: any thread; allocation makes device 0's primary context current on
 * threads that have none (the compressor thread). */
const IbpShadowOps *ibp_devmem_ops(void);

/* A fence that completes once everything enqueued on `stream` so far has run.  The caller hands
 * it to the policy (which releases it through the ops) or releases it with
 * ibp_devmem_fence_release().  NULL when no event could be recorded. */
void *ibp_devmem_fence_record(CUcontext ctx, CUstream stream);
/* The same on a stream that is not capturing, recorded in stream order (kernels/order.h): once a
 * later such fence on the stream has been seen complete, this one is known complete without a
 * driver call. */
void *ibp_devmem_fence_record_ordered(CUcontext ctx, CUstream stream);
void ibp_devmem_fence_release(void *fence);

/* The event behind a fence, to make a stream wait for it (cuStreamWaitEvent): the wait keeps the
 * record it was given after the fence is released and recorded again. */
CUevent ibp_devmem_fence_event(void *fence);

/* Makes `waiter` wait (on the device) for everything enqueued on `on` so far, through a pooled
 * fence.  Returns 0, or -EIO when no event could be recorded or waited on. */
int ibp_devmem_stream_join(CUcontext ctx, CUstream on, CUstream waiter);

#endif /* IBP_INTERPOSE_DEVMEM_H */
