/* SPDX-License-Identifier: MIT
 * ibpshim: test-only extras of the fake CUDA driver (libcuda.so.1 built from tests/fakecuda). */
#ifndef IBP_TESTS_FAKECUDA_FAKECUDA_H
#define IBP_TESTS_FAKECUDA_FAKECUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Work the fake executed since start-up or the last reset.  Copies and memsets count when a stream
 * executes them (a copy still queued is not counted yet), one call per API copy; copies replayed by a
 * graph launch count again, as they cross the bus again on a GPU.  "Staged" H2D calls are those whose
 * pageable source was copied at call time. */
typedef struct FakecudaStats {
    uint64_t h2d_bytes, d2h_bytes, d2d_bytes, h2h_bytes;
    uint64_t h2d_calls, d2h_calls, d2d_calls, h2h_calls;
    uint64_t h2d_staged_calls;
    uint64_t memset_bytes, memset_calls;
    uint64_t kernel_launches;
    uint64_t device_allocs, host_allocs, host_registers;
} FakecudaStats;

/* These symbols exist only in the fake: programs that must also run on a real GPU look them up with
 * dlsym and skip what needs them when they are absent.  Thread-safety: any thread, any time; a
 * snapshot taken while streams run is consistent per counter, not across counters. */
void fakecuda_stats(FakecudaStats *out);
void fakecuda_reset_stats(void);

/* The name of the last kernel launched (any thread) into name (len bytes), its grid's x dimension
 * and its dynamic shared memory (either pointer may be NULL); returns 0 when none was. */
int fakecuda_last_launch(char *name, size_t len, unsigned *grid_x, unsigned *shared_bytes);

/* The grid's x dimension of the last launch of the kernel called name (any thread) into grid_x;
 * returns 0 when it was never launched. */
int fakecuda_kernel_grid(const char *name, unsigned *grid_x);

/* The stream handle the last asynchronous copy from the host to the device was enqueued on (any
 * thread, the handle as passed, NULL for the legacy stream) and its size (either pointer may be
 * NULL); returns 0 when none was. */
int fakecuda_last_h2d(void **stream, size_t *bytes);

/* Sleeps this long before each asynchronous copy a stream executes (FAKECUDA_COPY_DELAY_US sets the
 * start value), so a program that reads a destination before synchronizing sees stale data. */
void fakecuda_set_copy_delay_us(unsigned us);

/* Failure injection: after `skip` more calls of the driver entry point `entry` succeed, the next
 * `count` calls return `error` (a CUresult; 0 means CUDA_ERROR_UNKNOWN) and do nothing, as when the
 * driver refuses work.  Entry points: "cuLaunchKernel", "cuMemcpyHtoDAsync", "cuStreamCreate",
 * "cuEventRecord", "cuStreamWaitEvent", "cuFuncSetAttribute", "cuOccupancyMaxActiveBlocksPerMultiprocessor",
 * "cuMemAlloc" (every _v2/_ptsz flavour, and
 * runtime calls that reach them). One rule at a time: a call replaces the last; count 0 disarms. */
void fakecuda_fail_calls(const char *entry, unsigned skip, unsigned count, int error);

/* Failures injected since start-up. */
unsigned fakecuda_injected_failures(void);

#ifdef __cplusplus
}
#endif

#endif /* IBP_TESTS_FAKECUDA_FAKECUDA_H */
