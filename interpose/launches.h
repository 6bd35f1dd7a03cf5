/* SPDX-License-Identifier: MIT
 * ibpshim: the registered regions a kernel's arguments point into.  A kernel may write pinned
 * memory through its unified address; the device's writes land without a fault, so the tracker
 * cannot see them.  A launch whose arguments hold an address inside a registered region is taken
 * to write all of it, as a device-to-host copy of the region would (launches.c). */
#ifndef IBP_INTERPOSE_LAUNCHES_H
#define IBP_INTERPOSE_LAUNCHES_H

#include <stddef.h>
#include <stdint.h>

#include "interpose/router.h"

/* One registered region, whole. */
typedef struct IbpArgRegion {
    uintptr_t base;
    size_t size;
} IbpArgRegion;

#define IBP_ARG_REGIONS_INLINE 4

/* The regions a launch's arguments point into, each once.  Start from {0}; release after use. */
typedef struct IbpArgRegions {
    size_t n, cap;
    IbpArgRegion *more; /* beyond the inline ones; NULL until needed */
    IbpArgRegion inl[IBP_ARG_REGIONS_INLINE];
    int unread; /* the arguments could not be read (no size for them, or out of memory) */
} IbpArgRegions;

/* Whose launch API func comes from: the runtime's (a kernel's host stub, or a cudaKernel_t) or the
 * driver's (a CUfunction, or a CUkernel passed as one). */
typedef enum IbpArgsApi {
    IBP_ARGS_RUNTIME,
    IBP_ARGS_DRIVER,
} IbpArgsApi;

/* Reads a launch's arguments into r (nothing while the compressed path is off or no region is
 * registered): params as the launch APIs take them (one pointer to each
 * parameter's value), or extra as the driver takes it (CU_LAUNCH_PARAM_BUFFER_POINTER and _SIZE).
 * Every 8-byte word of a parameter of 8 bytes or more (a pointer, or a structure holding pointers)
 * that falls inside a registered region puts the region in r.  Parameter sizes come from the
 * driver (cuFuncGetParamInfo, cuKernelGetParamInfo: CUDA 12.4 on), once per function: they are
 * kept until a module or library is unloaded (ibp_args_forget_layouts). */
void ibp_args_read(IbpArgRegions *r, IbpArgsApi api, const void *func, void *const *params,
                   void *const *extra);
const IbpArgRegion *ibp_args_at(const IbpArgRegions *r, size_t i);
void ibp_args_release(IbpArgRegions *r);

/* After the launch: when it was launched, each region in r is noted as written by the device on
 * stream (ibp_router_enqueued_write: nothing while the stream captures, the graph's launches are
 * followed); says once when arguments could not be read.  Releases r. */
void ibp_args_noted(IbpStreamApi api, IbpArgRegions *r, cudaStream_t stream, int launched);

/* A module, library or fat binary is being unloaded: a function handle or host stub may name
 * another kernel from now on, so the parameter sizes kept are dropped.  Thread-safety: any. */
void ibp_args_forget_layouts(void);

#endif /* IBP_INTERPOSE_LAUNCHES_H */
