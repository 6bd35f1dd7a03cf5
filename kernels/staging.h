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

/* The size of the buffer an acquire of `size` bytes gets: powers of two from 1 MiB up to 8 MiB,
 * then steps of an eighth of a power of two (a 68 MiB run takes 72 MiB, not 128). */
size_t ibp_staging_size_class(size_t size);

/* Sets the bound on device bytes held per context (default 256 MiB) and whether an exhausted
 * pool waits for the oldest buffer (1) or answers -EBUSY so the caller copies raw (0).
 * Call before the first acquire. */
void ibp_staging_configure(size_t max_bytes_per_context, int wait_when_exhausted);

/* Returns a device buffer of at least `size` bytes in `ctx` (current on the calling thread).
 * The buffer's waited_ns says how long the call waited for the pool.
 * Errors: -EBUSY (pool exhausted and not allowed to wait, or size above the bound), -ENOMEM,
 * -EIO (driver error), -ENOSPC (too many contexts).  Thread-safety: any thread; several streams
 * and threads may hold buffers at once. */
int ibp_staging_acquire(CUcontext ctx, size_t size, IbpStagingBuf **out);

/* Gives the buffer back once everything enqueued on `stream` so far has run: records an event
 * there and reuses the buffer only after it completed.  Returns 0 or -EIO (the buffer is then
 * kept out of use until the context's pool is torn down). */
int ibp_staging_release(IbpStagingBuf *buf, CUstream stream);

#endif /* IBP_KERNELS_STAGING_H */
