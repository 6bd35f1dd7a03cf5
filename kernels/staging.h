/* SPDX-License-Identifier: MIT
 * ibpshim: device staging buffers for compressed runs, recycled by events on the streams that
 * used them (never host callbacks). */
#ifndef IBP_KERNELS_STAGING_H
#define IBP_KERNELS_STAGING_H

#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

typedef struct IbpStagingBuf {
    CUdeviceptr ptr;
    size_t size;
    uint64_t waited_ns; /* how long the acquire that returned it waited for a buffer in flight */
} IbpStagingBuf;

/* Sets the device bytes of each context's pool (default 256 MiB, allocated at its first acquire
 * and cut into buffers in a ring) and whether an exhausted pool waits for the oldest buffer (1)
 * or answers -EBUSY so the caller copies raw (0).  Call before the first acquire. */
void ibp_staging_configure(size_t max_bytes_per_context, int wait_when_exhausted);

/* Returns a device buffer of `size` bytes rounded up to 256 in `ctx` (current on the calling
 * thread).  The buffer's waited_ns says how long the call waited for the pool.
 * Errors: -EBUSY (pool exhausted and not allowed to wait, or its oldest buffer not released for
 * 20 ms, or size above the bound), -ENOMEM (no device memory for the pool: on a device short of
 * memory it is made a half, a quarter .. of the size set, down to 16 MiB; below that the context
 * has none, and acquires fail at once for 10 s before the next try), -EIO (driver error),
 * -ENOSPC (too many contexts).  Thread-safety: any thread; several streams
 * and threads may hold buffers at once. */
int ibp_staging_acquire(CUcontext ctx, size_t size, IbpStagingBuf **out);

/* Gives the buffer back once everything enqueued on `stream` so far has run: records an event
 * there and reuses the space only after it completed.  Returns 0 or -EIO (the event could not be
 * recorded: the call then waited for the stream). */
int ibp_staging_release(IbpStagingBuf *buf, CUstream stream);

#endif /* IBP_KERNELS_STAGING_H */
