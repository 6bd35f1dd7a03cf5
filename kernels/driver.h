/* SPDX-License-Identifier: MIT
 * ibpshim: the CUDA Driver API entry points the shim uses, loaded once from libcuda.so.1. */
#ifndef IBP_KERNELS_DRIVER_H
#define IBP_KERNELS_DRIVER_H

#include <cuda.h>
#include <cudaTypedefs.h>

/* X(name, CUDA version of the ABI we call).  Each entry point is pinned to one
 * ABI version and typed with cudaTypedefs.h's PFN_<name>_v<version>: asking
 * the driver for "the newest" would hand out e.g. cuCtxSynchronize_v2, which
 * takes a context argument that the old signature does not pass. */
#define IBP_DRIVER_LIST(X)                                                                                   \
    X(cuInit, 2000)                                                                                          \
    X(cuDriverGetVersion, 2020)                                                                              \
    X(cuGetErrorString, 6000)                                                                                \
    X(cuGetErrorName, 6000)                                                                                  \
    X(cuDeviceGet, 2000)                                                                                     \
    X(cuDeviceGetCount, 2000)                                                                                \
    X(cuDeviceGetAttribute, 2000)                                                                            \
    X(cuDeviceGetName, 2000)                                                                                 \
    X(cuDevicePrimaryCtxRetain, 7000)                                                                        \
    X(cuDevicePrimaryCtxRelease, 11000)                                                                      \
    X(cuCtxGetCurrent, 4000)                                                                                 \
    X(cuCtxSetCurrent, 4000)                                                                                 \
    X(cuCtxPushCurrent, 4000)                                                                                \
    X(cuCtxPopCurrent, 4000)                                                                                 \
    X(cuCtxGetDevice, 2000)                                                                                  \
    X(cuCtxSynchronize, 2000)                                                                                \
    X(cuModuleLoadData, 2000)                                                                                \
    X(cuModuleUnload, 2000)                                                                                  \
    X(cuModuleGetFunction, 2000)                                                                             \
    X(cuFuncSetAttribute, 9000)                                                                              \
    X(cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050)                                                     \
    X(cuLaunchKernel, 4000)                                                                                  \
    X(cuMemAlloc, 3020)                                                                                      \
    X(cuMemFree, 3020)                                                                                       \
    X(cuMemcpyHtoD, 3020)                                                                                    \
    X(cuMemcpyDtoH, 3020)                                                                                    \
    X(cuMemcpyHtoDAsync, 3020)                                                                               \
    X(cuMemcpyDtoHAsync, 3020)                                                                               \
    X(cuMemsetD8, 3020)                                                                                      \
    X(cuMemcpyDtoDAsync, 3020)                                                                               \
    X(cuMemHostAlloc, 2020)                                                                                  \
    X(cuMemFreeHost, 2000)                                                                                   \
    X(cuMemHostGetDevicePointer, 3020)                                                                       \
    X(cuStreamCreate, 2000)                                                                                  \
    X(cuStreamCreateWithPriority, 5050)                                                                      \
    X(cuStreamDestroy, 4000)                                                                                 \
    X(cuStreamSynchronize, 2000)                                                                             \
    X(cuStreamWaitEvent, 3020)                                                                               \
    X(cuStreamIsCapturing, 10000)                                                                            \
    X(cuThreadExchangeStreamCaptureMode, 10010)                                                              \
    X(cuEventCreate, 2000)                                                                                   \
    X(cuEventRecord, 2000)                                                                                   \
    X(cuEventQuery, 2000)                                                                                    \
    X(cuEventSynchronize, 2000)                                                                              \
    X(cuEventDestroy, 4000)                                                                                  \
    X(cuEventElapsedTime, 12080)                                                                             \
    X(cuPointerGetAttribute, 4000)                                                                           \
    X(cuGraphGetNodes, 10000)                                                                                \
    X(cuGraphNodeGetType, 10000)                                                                             \
    X(cuGraphChildGraphNodeGetGraph, 10000)                                                                  \
    X(cuGraphMemcpyNodeGetParams, 10000)                                                                     \
    X(cuGraphMemsetNodeGetParams, 10000)                                                                     \
    X(cuGraphBatchMemOpNodeGetParams, 11070)                                                                 \
    X(cuGraphKernelNodeGetParams, 12000)                                                                     \
    X(cuGraphKernelNodeGetAttribute, 11000)                                                                  \
    X(cuStreamGetId, 12000)

typedef struct IbpDriver {
#define IBP_DRIVER_FIELD(name, version) PFN_##name##_v##version name;
    IBP_DRIVER_LIST(IBP_DRIVER_FIELD)
#undef IBP_DRIVER_FIELD
    int version; /* from cuDriverGetVersion, e.g. 13000 */
} IbpDriver;

/* Loads libcuda.so.1 and every entry point above once per process, then calls
 * cuInit(0).  Returns the table, or NULL when no usable driver is present
 * (the reason is logged once at debug level and available from
 * ibp_driver_error()).  Thread-safety: any thread; the table is immutable
 * once returned. */
const IbpDriver *ibp_driver_get(void);

/* Why ibp_driver_get() returned NULL; "" when it did not. */
const char *ibp_driver_error(void);

/* The driver's name for a CUresult ("CUDA_ERROR_INVALID_VALUE"), usable even
 * when the table failed to load. */
const char *ibp_driver_result_name(CUresult result);

/* The shim's own allocations, frees and module loads touch no stream, but CUDA counts them as
 * unsafe while any thread captures a stream in global mode (PyTorch's default) or this thread
 * captures one: made from the calling thread's default interaction mode they would fail and
 * invalidate the application's capture.  relax() puts the calling thread in relaxed mode, which
 * allows them; restore() puts back what it found.  Thread-safety: per thread. */
typedef struct IbpCaptureMode {
    CUstreamCaptureMode saved;
    int relaxed; /* saved holds the mode to put back */
} IbpCaptureMode;

IbpCaptureMode ibp_driver_capture_relax(const IbpDriver *drv);
void ibp_driver_capture_restore(const IbpDriver *drv, IbpCaptureMode mode);

/* cuEventQuery, cuEventSynchronize and cuStreamSynchronize of the shim's own events and streams
 * (never captured), made in relaxed mode: in the calling thread's own mode they are refused while
 * a capture prohibits unsafe calls, and the refusal invalidates the application's capture; worse,
 * a refused query would read as an event that will never signal more.  Thread-safety: as the
 * calls they make. */
CUresult ibp_driver_event_query(const IbpDriver *drv, CUevent ev);
CUresult ibp_driver_event_sync(const IbpDriver *drv, CUevent ev);
CUresult ibp_driver_stream_sync(const IbpDriver *drv, CUstream stream);

/* Evaluates a driver call; on failure logs the call, file:line and the error
 * name at debug level and jumps to `label`.  `res` receives the CUresult. */
#define IBP_CU_CHECK_GOTO(res, call, label)                                                        \
    do {                                                                                           \
        (res) = (call);                                                                            \
        if ((res) != CUDA_SUCCESS) {                                                               \
            IBP_DEBUG("%s:%d: %s failed: %s", __FILE__, __LINE__, #call,                           \
                      ibp_driver_result_name(res));                                                \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

#endif /* IBP_KERNELS_DRIVER_H */
