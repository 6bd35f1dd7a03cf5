/* SPDX-License-Identifier: MIT
 * ibpshim: the CUDA Driver API entry points the shim uses, loaded once from libcuda.so.1. */
#ifndef IBP_KERNELS_DRIVER_H
#define IBP_KERNELS_DRIVER_H

#include <cuda.h>

/* X(name as cuda.h spells it, name cuGetProcAddress knows).  cuda.h maps most
 * names to their current ABI version (cuMemAlloc -> cuMemAlloc_v2), so the
 * field types always match the header the library was compiled against, and
 * the lookup asks the driver for that same version (CUDA_VERSION). */
#define IBP_DRIVER_LIST(X)                                                                         \
    X(cuInit, "cuInit")                                                                            \
    X(cuDriverGetVersion, "cuDriverGetVersion")                                                    \
    X(cuGetErrorString, "cuGetErrorString")                                                        \
    X(cuGetErrorName, "cuGetErrorName")                                                            \
    X(cuDeviceGet, "cuDeviceGet")                                                                  \
    X(cuDeviceGetCount, "cuDeviceGetCount")                                                        \
    X(cuDeviceGetAttribute, "cuDeviceGetAttribute")                                                \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")                                        \
    X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease")                                      \
    X(cuCtxGetCurrent, "cuCtxGetCurrent")                                                          \
    X(cuCtxSetCurrent, "cuCtxSetCurrent")                                                          \
    X(cuCtxPushCurrent, "cuCtxPushCurrent")                                                        \
    X(cuCtxPopCurrent, "cuCtxPopCurrent")                                                          \
    X(cuCtxGetDevice, "cuCtxGetDevice")                                                            \
    X(cuCtxSynchronize, "cuCtxSynchronize")                                                        \
    X(cuModuleLoadData, "cuModuleLoadData")                                                        \
    X(cuModuleUnload, "cuModuleUnload")                                                            \
    X(cuModuleGetFunction, "cuModuleGetFunction")                                                  \
    X(cuLaunchKernel, "cuLaunchKernel")                                                            \
    X(cuMemAlloc, "cuMemAlloc")                                                                    \
    X(cuMemFree, "cuMemFree")                                                                      \
    X(cuMemcpyHtoD, "cuMemcpyHtoD")                                                                \
    X(cuMemcpyDtoH, "cuMemcpyDtoH")                                                                \
    X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync")                                                      \
    X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync")                                                      \
    X(cuMemsetD8, "cuMemsetD8")                                                                    \
    X(cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer")                                      \
    X(cuStreamCreate, "cuStreamCreate")                                                            \
    X(cuStreamDestroy, "cuStreamDestroy")                                                          \
    X(cuStreamSynchronize, "cuStreamSynchronize")                                                  \
    X(cuStreamWaitEvent, "cuStreamWaitEvent")                                                      \
    X(cuStreamIsCapturing, "cuStreamIsCapturing")                                                  \
    X(cuEventCreate, "cuEventCreate")                                                              \
    X(cuEventRecord, "cuEventRecord")                                                              \
    X(cuEventQuery, "cuEventQuery")                                                                \
    X(cuEventSynchronize, "cuEventSynchronize")                                                    \
    X(cuEventDestroy, "cuEventDestroy")                                                            \
    X(cuEventElapsedTime, "cuEventElapsedTime")                                                    \
    X(cuPointerGetAttribute, "cuPointerGetAttribute")

typedef struct IbpDriver {
#define IBP_DRIVER_FIELD(name, text) __typeof__(&name) name;
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
