/* SPDX-License-Identifier: MIT
 * ibpshim: the documented run-time API of libibpshim.so (beside the interposed cuda* symbols). */
#ifndef IBPSHIM_IBPSHIM_H
#define IBPSHIM_IBPSHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Programs that may run with or without the shim look these up with
 * dlsym(RTLD_DEFAULT, "ibpshim_version") and treat NULL as "not preloaded". */

/* The library version, e.g. "0.1.0".  Never NULL. */
const char *ibpshim_version(void);

/* 1 when the library carries decode kernels (built with nvcc) and can send
 * compressed copies, 0 when it only forwards. */
int ibpshim_compression_built(void);

/* What the interposed entry points have seen, by kind of call. */
typedef enum IbpshimCallKind {
    IBPSHIM_CALL_MALLOC_HOST = 0,
    IBPSHIM_CALL_HOST_ALLOC,
    IBPSHIM_CALL_FREE_HOST,
    IBPSHIM_CALL_HOST_REGISTER,
    IBPSHIM_CALL_HOST_UNREGISTER,
    IBPSHIM_CALL_MEMCPY_H2D,
    IBPSHIM_CALL_MEMCPY_D2H,
    IBPSHIM_CALL_MEMCPY_OTHER, /* H2H, D2D and cudaMemcpyDefault whose direction was not resolved */
    IBPSHIM_CALL_MEMCPY_ASYNC_H2D,
    IBPSHIM_CALL_MEMCPY_ASYNC_D2H,
    IBPSHIM_CALL_MEMCPY_ASYNC_OTHER,
    IBPSHIM_CALL_KIND_COUNT
} IbpshimCallKind;

typedef struct IbpshimCallCount {
    uint64_t calls;
    uint64_t bytes; /* bytes requested by the application */
} IbpshimCallCount;

/* Copies a snapshot of the per-kind counters into out[0 .. n-1] (n is clipped
 * to IBPSHIM_CALL_KIND_COUNT).  Returns the number of entries written.
 * Thread-safety: may be called at any time from any thread; each entry is
 * read atomically, the set is not a single atomic snapshot. */
size_t ibpshim_call_counts(IbpshimCallCount *out, size_t n);

/* A short stable name for a kind ("cudaHostAlloc", "cudaMemcpyAsync H2D", ...); "?" if out of range. */
const char *ibpshim_call_kind_name(IbpshimCallKind kind);

/* Host-to-device copies the shim has planned (copies of at least [policy] min_bytes). */
typedef struct IbpshimTransferTotals {
    uint64_t copies;
    uint64_t requested;       /* bytes the application asked to copy */
    uint64_t sent;            /* bytes that crossed PCIe for them */
    uint64_t compressed_in;   /* bytes delivered through the compressed path */
    uint64_t compressed_out;  /* their compressed size */
} IbpshimTransferTotals;

/* Fills *out.  Returns 0, or -ENOMEM.  Thread-safety: any thread. */
int ibpshim_transfer_totals(IbpshimTransferTotals *out);

/* Turns the compressed path on (1) or off (0) for copies from now on and returns the previous
 * setting; allocations stay registered either way, so turning it back on resumes where it was.
 * Lets a program compare both paths in one process.  Thread-safety: any thread. */
int ibpshim_set_enabled(int on);

/* Writes a transfer report now (text to the log, JSON to [report] path).  Returns 0 or a
 * negative errno (-ENODEV when reporting is off). */
int ibpshim_report_now(void);

#ifdef __cplusplus
}
#endif

#endif /* IBPSHIM_IBPSHIM_H */
