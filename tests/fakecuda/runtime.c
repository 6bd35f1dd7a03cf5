/* SPDX-License-Identifier: MIT
 * ibpshim: fake CUDA runtime (libcudart.so.13) built on the fake driver, as the real one is. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RT_EXPORT __attribute__((visibility("default")))
#define RT_MAX_DEVICES 16

/* The driver's copy, memset, host-function, graph and entry-point functions, taken from its own handle as the
 * real runtime takes them: called by symbol they would bind to a preloaded library's hooks of the same names
 * (the shim's driver-API hooks), which the real runtime never reaches. */
typedef struct DriverCalls {
    CUresult (*memcpy)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*memcpy_ptds)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*memcpy_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*memcpy_async_ptsz)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*memset_d8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*memset_d8_ptds)(CUdeviceptr, unsigned char, size_t);
    CUresult (*memset_d8_async)(CUdeviceptr, unsigned char, size_t, CUstream);
    CUresult (*memset_d8_async_ptsz)(CUdeviceptr, unsigned char, size_t, CUstream);
    CUresult (*get_proc_address)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
    CUresult (*launch_host_func)(CUstream, CUhostFn, void *);
    CUresult (*launch_host_func_ptsz)(CUstream, CUhostFn, void *);
    CUresult (*graph_instantiate)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*graph_exec_update)(CUgraphExec, CUgraph, CUgraphExecUpdateResultInfo *);
    CUresult (*graph_exec_memcpy)(CUgraphExec, CUgraphNode, const CUDA_MEMCPY3D *, CUcontext);
    CUresult (*graph_exec_memset)(CUgraphExec, CUgraphNode, const CUDA_MEMSET_NODE_PARAMS *, CUcontext);
    CUresult (*graph_exec_child)(CUgraphExec, CUgraphNode, CUgraph);
    CUresult (*graph_launch)(CUgraphExec, CUstream);
    CUresult (*graph_launch_ptsz)(CUgraphExec, CUstream);
    CUresult (*graph_exec_destroy)(CUgraphExec);
    CUresult (*graph_exec_kernel)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS *);
    CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, CUstream, void **, void **);
    CUresult (*launch_kernel_ptsz)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   unsigned, CUstream, void **, void **);
} DriverCalls;

static DriverCalls driver_calls;
static pthread_once_t driver_calls_once = PTHREAD_ONCE_INIT;

static void *driver_call(void *lib, const char *name)
{
    void *fn = lib ? dlsym(lib, name) : NULL;
    if (!fn) {
        fprintf(stderr, "fakecuda runtime: the driver has no %s\n", name);
        abort();
    }
    return fn;
}

static void driver_calls_load(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    /* POSIX's way to store dlsym's answer into a function pointer. */
#define LOAD(field, name) (*(void **)&driver_calls.field = driver_call(lib, name))
    LOAD(memcpy, "cuMemcpy");
    LOAD(memcpy_ptds, "cuMemcpy_ptds");
    LOAD(memcpy_async, "cuMemcpyAsync");
    LOAD(memcpy_async_ptsz, "cuMemcpyAsync_ptsz");
    LOAD(memset_d8, "cuMemsetD8_v2");
    LOAD(memset_d8_ptds, "cuMemsetD8_v2_ptds");
    LOAD(memset_d8_async, "cuMemsetD8Async");
    LOAD(memset_d8_async_ptsz, "cuMemsetD8Async_ptsz");
    LOAD(get_proc_address, "cuGetProcAddress_v2");
    LOAD(launch_host_func, "cuLaunchHostFunc");
    LOAD(launch_host_func_ptsz, "cuLaunchHostFunc_ptsz");
    LOAD(graph_instantiate, "cuGraphInstantiateWithFlags");
    LOAD(graph_exec_update, "cuGraphExecUpdate_v2");
    LOAD(graph_exec_memcpy, "cuGraphExecMemcpyNodeSetParams");
    LOAD(graph_exec_memset, "cuGraphExecMemsetNodeSetParams");
    LOAD(graph_exec_child, "cuGraphExecChildGraphNodeSetParams");
    LOAD(graph_launch, "cuGraphLaunch");
    LOAD(graph_launch_ptsz, "cuGraphLaunch_ptsz");
    LOAD(graph_exec_destroy, "cuGraphExecDestroy");
    LOAD(graph_exec_kernel, "cuGraphExecKernelNodeSetParams_v2");
    LOAD(launch_kernel, "cuLaunchKernel");
    LOAD(launch_kernel_ptsz, "cuLaunchKernel_ptsz");
#undef LOAD
}

static const DriverCalls *drv(void)
{
    pthread_once(&driver_calls_once, driver_calls_load);
    return &driver_calls;
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static CUresult init_result;
static atomic_bool retained[RT_MAX_DEVICES];
static _Thread_local int current_device; /* the runtime's device for this thread until a context exists */
static _Thread_local cudaError_t last_error;

static void rt_init(void)
{
    init_result = cuInit(0);
}

static cudaError_t from_cu(CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
    case CUDA_ERROR_NOT_INITIALIZED: return cudaErrorInitializationError;
    case CUDA_ERROR_NO_DEVICE: return cudaErrorNoDevice;
    case CUDA_ERROR_INVALID_DEVICE: return cudaErrorInvalidDevice;
    case CUDA_ERROR_INVALID_CONTEXT: return cudaErrorDeviceUninitialized;
    case CUDA_ERROR_INVALID_IMAGE: return cudaErrorInvalidKernelImage;
    case CUDA_ERROR_INVALID_HANDLE: return cudaErrorInvalidResourceHandle;
    case CUDA_ERROR_NOT_FOUND: return cudaErrorSymbolNotFound;
    case CUDA_ERROR_NOT_READY: return cudaErrorNotReady;
    case CUDA_ERROR_ILLEGAL_ADDRESS: return cudaErrorIllegalAddress;
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: return cudaErrorHostMemoryAlreadyRegistered;
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: return cudaErrorHostMemoryNotRegistered;
    case CUDA_ERROR_NOT_SUPPORTED: return cudaErrorNotSupported;
    case CUDA_ERROR_ILLEGAL_STATE: return cudaErrorIllegalState;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: return cudaErrorStreamCaptureUnsupported;
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: return cudaErrorStreamCaptureInvalidated;
    case CUDA_ERROR_STREAM_CAPTURE_UNMATCHED: return cudaErrorStreamCaptureUnmatched;
    case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: return cudaErrorStreamCaptureImplicit;
    case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: return cudaErrorStreamCaptureWrongThread;
    case CUDA_ERROR_CAPTURED_EVENT: return cudaErrorCapturedEvent;
    default: return cudaErrorUnknown;
    }
}

/* Every entry point returns through here: failures other than "not ready" become the last error. */
static cudaError_t ret(cudaError_t e)
{
    if (e != cudaSuccess && e != cudaErrorNotReady)
        last_error = e;
    return e;
}

static cudaError_t ret_cu(CUresult r)
{
    return ret(from_cu(r));
}

static cudaError_t bind_device(int dev)
{
    CUcontext ctx = NULL;
    CUresult r = cuDevicePrimaryCtxRetain(&ctx, dev);
    if (r != CUDA_SUCCESS)
        return from_cu(r);
    bool expected = false;
    if (!atomic_compare_exchange_strong(&retained[dev], &expected, true))
        cuDevicePrimaryCtxRelease_v2(dev); /* the runtime keeps one reference per device */
    return from_cu(cuCtxSetCurrent(ctx));
}

/* Lazily initialises the driver and makes a context current, as the first runtime call does. */
static cudaError_t enter(void)
{
    pthread_once(&init_once, rt_init);
    if (init_result != CUDA_SUCCESS)
        return init_result == CUDA_ERROR_NO_DEVICE ? cudaErrorNoDevice : cudaErrorInitializationError;
    CUcontext ctx = NULL;
    const CUresult r = cuCtxGetCurrent(&ctx);
    if (r != CUDA_SUCCESS)
        return from_cu(r);
    return ctx ? cudaSuccess : bind_device(current_device);
}

#define ENTER()                                                                                     \
    do {                                                                                            \
        const cudaError_t entered = enter();                                                        \
        if (entered != cudaSuccess)                                                                 \
            return ret(entered);                                                                    \
    } while (0)

/* ---- errors ---- */

typedef struct ErrorText {
    cudaError_t code;
    const char *name;
    const char *text;
} ErrorText;

#define E(code, text) {code, #code, text}
static const ErrorText error_texts[] = {
    E(cudaSuccess, "no error"),
    E(cudaErrorInvalidValue, "invalid argument"),
    E(cudaErrorMemoryAllocation, "out of memory"),
    E(cudaErrorInitializationError, "initialization error"),
    E(cudaErrorCudartUnloading, "driver shutting down"),
    E(cudaErrorInvalidConfiguration, "invalid configuration argument"),
    E(cudaErrorInvalidPitchValue, "invalid pitch argument"),
    E(cudaErrorInvalidSymbol, "invalid device symbol"),
    E(cudaErrorInvalidHostPointer, "invalid host pointer"),
    E(cudaErrorInvalidDevicePointer, "invalid device pointer"),
    E(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy"),
    E(cudaErrorNoDevice, "no CUDA-capable device is detected"),
    E(cudaErrorInvalidDevice, "invalid device ordinal"),
    E(cudaErrorInvalidKernelImage, "device kernel image is invalid"),
    E(cudaErrorDeviceUninitialized, "invalid device context"),
    E(cudaErrorInvalidResourceHandle, "invalid resource handle"),
    E(cudaErrorIllegalState, "the operation cannot be performed in the present state"),
    E(cudaErrorSymbolNotFound, "named symbol not found"),
    E(cudaErrorNotReady, "device not ready"),
    E(cudaErrorIllegalAddress, "an illegal memory access was encountered"),
    E(cudaErrorLaunchOutOfResources, "too many resources requested for launch"),
    E(cudaErrorHostMemoryAlreadyRegistered, "part or all of the requested memory range is already mapped"),
    E(cudaErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region"),
    E(cudaErrorNotSupported, "operation not supported"),
    E(cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing"),
    E(cudaErrorStreamCaptureInvalidated, "operation failed due to a previous error during capture"),
    E(cudaErrorStreamCaptureUnmatched, "capture was not ended in the same stream as it began"),
    E(cudaErrorStreamCaptureImplicit,
      "operation would make the legacy stream depend on a capturing blocking stream"),
    E(cudaErrorCapturedEvent, "operation not permitted on an event last recorded in a capturing stream"),
    E(cudaErrorStreamCaptureWrongThread,
      "attempt to terminate a thread-local capture sequence from another thread"),
    E(cudaErrorUnknown, "unknown error"),
};
#undef E

RT_EXPORT const char *cudaGetErrorString(cudaError_t error)
{
    for (size_t i = 0; i < sizeof(error_texts) / sizeof(error_texts[0]); i++)
        if (error_texts[i].code == error)
            return error_texts[i].text;
    return "unrecognized error code";
}

RT_EXPORT const char *cudaGetErrorName(cudaError_t error)
{
    for (size_t i = 0; i < sizeof(error_texts) / sizeof(error_texts[0]); i++)
        if (error_texts[i].code == error)
            return error_texts[i].name;
    return "unrecognized error code";
}

RT_EXPORT cudaError_t cudaGetLastError(void)
{
    const cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

RT_EXPORT cudaError_t cudaPeekAtLastError(void)
{
    return last_error;
}

/* ---- devices ---- */

RT_EXPORT cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count)
        return ret(cudaErrorInvalidValue);
    pthread_once(&init_once, rt_init);
    if (init_result != CUDA_SUCCESS) {
        *count = 0;
        return ret(init_result == CUDA_ERROR_NO_DEVICE ? cudaErrorNoDevice : cudaErrorInitializationError);
    }
    return ret_cu(cuDeviceGetCount(count));
}

RT_EXPORT cudaError_t cudaSetDevice(int device)
{
    pthread_once(&init_once, rt_init);
    if (init_result != CUDA_SUCCESS)
        return ret(init_result == CUDA_ERROR_NO_DEVICE ? cudaErrorNoDevice : cudaErrorInitializationError);
    int count = 0;
    cuDeviceGetCount(&count);
    if (device < 0 || device >= count || device >= RT_MAX_DEVICES)
        return ret(cudaErrorInvalidDevice);
    current_device = device;
    return ret(bind_device(device));
}

RT_EXPORT cudaError_t cudaGetDevice(int *device)
{
    if (!device)
        return ret(cudaErrorInvalidValue);
    ENTER();
    CUdevice dev = 0;
    const CUresult r = cuCtxGetDevice(&dev);
    if (r == CUDA_SUCCESS)
        *device = dev;
    return ret_cu(r);
}

RT_EXPORT cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    ENTER();
    return ret_cu(cuDeviceGetAttribute(value, (CUdevice_attribute)attr, device));
}

static int attr(CUdevice_attribute a, int device)
{
    int v = 0;
    cuDeviceGetAttribute(&v, a, device);
    return v;
}

RT_EXPORT cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    if (!prop)
        return ret(cudaErrorInvalidValue);
    ENTER();
    int count = 0;
    cuDeviceGetCount(&count);
    if (device < 0 || device >= count)
        return ret(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof(*prop));
    cuDeviceGetName(prop->name, (int)sizeof(prop->name), device);
    size_t total = 0;
    cuDeviceTotalMem_v2(&total, device);
    prop->uuid.bytes[0] = (char)(0xfc);
    prop->uuid.bytes[15] = (char)device;
    prop->totalGlobalMem = total;
    prop->sharedMemPerBlock = (size_t)attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, device);
    prop->regsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, device);
    prop->warpSize = attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE, device);
    prop->memPitch = (size_t)attr(CU_DEVICE_ATTRIBUTE_MAX_PITCH, device);
    prop->maxThreadsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, device);
    prop->maxThreadsDim[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, device);
    prop->maxThreadsDim[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, device);
    prop->maxThreadsDim[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, device);
    prop->maxGridSize[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, device);
    prop->maxGridSize[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, device);
    prop->maxGridSize[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, device);
    prop->totalConstMem = (size_t)attr(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, device);
    prop->major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
    prop->minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
    prop->textureAlignment = (size_t)attr(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, device);
    prop->multiProcessorCount = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
    prop->canMapHostMemory = attr(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, device);
    prop->concurrentKernels = attr(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, device);
    prop->ECCEnabled = attr(CU_DEVICE_ATTRIBUTE_ECC_ENABLED, device);
    prop->pciBusID = attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, device);
    prop->asyncEngineCount = attr(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, device);
    prop->unifiedAddressing = attr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, device);
    prop->memoryBusWidth = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, device);
    prop->l2CacheSize = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device);
    prop->maxThreadsPerMultiProcessor = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, device);
    prop->streamPrioritiesSupported = attr(CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, device);
    prop->globalL1CacheSupported = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED, device);
    prop->localL1CacheSupported = attr(CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED, device);
    prop->sharedMemPerMultiprocessor =
        (size_t)attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, device);
    prop->regsPerMultiprocessor = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, device);
    prop->managedMemory = attr(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, device);
    prop->computePreemptionSupported = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED, device);
    prop->canUseHostPointerForRegisteredMem =
        attr(CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, device);
    prop->cooperativeLaunch = attr(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, device);
    prop->sharedMemPerBlockOptin = (size_t)attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device);
    prop->maxBlocksPerMultiProcessor = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, device);
    prop->reservedSharedMemPerBlock = (size_t)attr(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, device);
    prop->hostRegisterSupported = attr(CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, device);
    prop->hostRegisterReadOnlySupported = attr(CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, device);
    prop->memoryPoolsSupported = attr(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, device);
    prop->hostNumaId = -1;
    return ret(cudaSuccess);
}

/* FAKECUDA_RUNTIME_VERSION (e.g. 12080) makes the fake say it is that runtime, and take the batch
 * copies' arguments as CUDA 12.8 and 12.9 did (a failIdx before the stream). */
static int runtime_version(void)
{
    const char *env = getenv("FAKECUDA_RUNTIME_VERSION");
    const int v = env && *env ? atoi(env) : 0;
    return v >= 1000 ? v : CUDART_VERSION;
}

RT_EXPORT cudaError_t cudaRuntimeGetVersion(int *version)
{
    if (!version)
        return ret(cudaErrorInvalidValue);
    *version = runtime_version();
    return cudaSuccess;
}

RT_EXPORT cudaError_t cudaDriverGetVersion(int *version)
{
    if (!version)
        return ret(cudaErrorInvalidValue);
    return ret_cu(cuDriverGetVersion(version));
}

RT_EXPORT cudaError_t cudaDeviceSynchronize(void)
{
    ENTER();
    return ret_cu(cuCtxSynchronize());
}

/* Both resets share this, as in the real runtime, where neither calls the other by its exported
 * name (so a hook on one does not see the other). */
static cudaError_t device_reset(void)
{
    int dev = 0;
    const cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess)
        return e;
    return ret_cu(cuDevicePrimaryCtxReset_v2(dev));
}

RT_EXPORT cudaError_t cudaDeviceReset(void)
{
    ENTER();
    return device_reset();
}

#if CUDART_VERSION >= 13000
cudaError_t cudaThreadExit(void); /* gone from the CUDA 13 headers; the CUDA 12 runtime has it */
#endif

/* The CUDA 12 runtime's older name for cudaDeviceReset. */
RT_EXPORT cudaError_t cudaThreadExit(void)
{
    ENTER();
    return device_reset();
}

RT_EXPORT cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
    ENTER();
    return ret_cu(cuMemGetInfo_v2(free_bytes, total));
}

/* ---- memory ---- */

RT_EXPORT cudaError_t cudaMalloc(void **ptr, size_t size)
{
    ENTER();
    if (!ptr)
        return ret(cudaErrorInvalidValue);
    if (size == 0) {
        *ptr = NULL;
        return cudaSuccess;
    }
    CUdeviceptr d = 0;
    const CUresult r = cuMemAlloc_v2(&d, size);
    if (r == CUDA_SUCCESS)
        *ptr = (void *)(uintptr_t)d;
    return ret_cu(r);
}

RT_EXPORT cudaError_t cudaFree(void *ptr)
{
    ENTER();
    if (!ptr)
        return cudaSuccess;
    return ret_cu(cuMemFree_v2((CUdeviceptr)(uintptr_t)ptr));
}

RT_EXPORT cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags)
{
    ENTER();
    const unsigned known = cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined;
    if (!ptr || (flags & ~known))
        return ret(cudaErrorInvalidValue);
    if (size == 0) {
        *ptr = NULL;
        return cudaSuccess;
    }
    return ret_cu(cuMemHostAlloc(ptr, size, flags));
}

RT_EXPORT cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

RT_EXPORT cudaError_t cudaFreeHost(void *ptr)
{
    ENTER();
    if (!ptr)
        return cudaSuccess;
    return ret_cu(cuMemFreeHost(ptr));
}

RT_EXPORT cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
    ENTER();
    return ret_cu(cuMemHostRegister_v2(ptr, size, flags));
}

RT_EXPORT cudaError_t cudaHostUnregister(void *ptr)
{
    ENTER();
    return ret_cu(cuMemHostUnregister(ptr));
}

RT_EXPORT cudaError_t cudaHostGetDevicePointer(void **device_ptr, void *host_ptr, unsigned int flags)
{
    ENTER();
    if (!device_ptr)
        return ret(cudaErrorInvalidValue);
    CUdeviceptr d = 0;
    const CUresult r = cuMemHostGetDevicePointer_v2(&d, host_ptr, flags);
    if (r == CUDA_SUCCESS)
        *device_ptr = (void *)(uintptr_t)d;
    return ret_cu(r);
}

RT_EXPORT cudaError_t cudaHostGetFlags(unsigned int *flags, void *host_ptr)
{
    ENTER();
    return ret_cu(cuMemHostGetFlags(flags, host_ptr));
}

RT_EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
    ENTER();
    if (!attributes)
        return ret(cudaErrorInvalidValue);
    CUmemorytype type = (CUmemorytype)0;
    int ordinal = -2;
    CUdeviceptr dptr = 0;
    void *hptr = NULL;
    CUpointer_attribute attrs[] = {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_HOST_POINTER,
    };
    void *data[] = {&type, &ordinal, &dptr, &hptr};
    const CUresult r = cuPointerGetAttributes(4, attrs, data, (CUdeviceptr)(uintptr_t)ptr);
    if (r != CUDA_SUCCESS)
        return ret_cu(r);
    memset(attributes, 0, sizeof(*attributes));
    if (type == CU_MEMORYTYPE_DEVICE) {
        attributes->type = cudaMemoryTypeDevice;
        attributes->device = ordinal;
        attributes->devicePointer = (void *)(uintptr_t)dptr;
    } else if (type == CU_MEMORYTYPE_HOST) {
        attributes->type = cudaMemoryTypeHost;
        attributes->device = ordinal;
        attributes->devicePointer = (void *)(uintptr_t)dptr;
        attributes->hostPointer = hptr;
    } else {
        attributes->type = cudaMemoryTypeUnregistered;
        attributes->device = -2;
        attributes->hostPointer = (void *)ptr;
    }
    return cudaSuccess;
}

/* True if ptr is device memory (false for pinned, registered and pageable host memory); *reachable
 * says whether the device can address it (device or pinned). */
static bool is_device(const void *ptr, bool *reachable)
{
    CUmemorytype type = (CUmemorytype)0;
    CUpointer_attribute a = CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
    void *data[] = {&type};
    if (cuPointerGetAttributes(1, &a, data, (CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS)
        type = (CUmemorytype)0;
    *reachable = type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_HOST;
    return type == CU_MEMORYTYPE_DEVICE;
}

/* The explicit H2D, D2H and D2D kinds must match the pointers (swapped arguments give
 * cudaErrorInvalidValue); host-to-host is not checked, as in CUDA 13; empty copies are no-ops. */
static cudaError_t check_kind(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    if ((unsigned)kind > (unsigned)cudaMemcpyDefault)
        return cudaErrorInvalidMemcpyDirection;
    if (count == 0)
        return cudaSuccess;
    bool dst_reach = false, src_reach = false;
    const bool dst_dev = is_device(dst, &dst_reach);
    const bool src_dev = is_device(src, &src_reach);
    switch (kind) {
    case cudaMemcpyHostToDevice: return !dst_reach || src_dev ? cudaErrorInvalidValue : cudaSuccess;
    case cudaMemcpyDeviceToHost: return !src_reach || dst_dev ? cudaErrorInvalidValue : cudaSuccess;
    case cudaMemcpyDeviceToDevice: return !src_reach || !dst_reach ? cudaErrorInvalidValue : cudaSuccess;
    default: return cudaSuccess;
    }
}

static cudaError_t memcpy_sync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, bool ptds)
{
    ENTER();
    const cudaError_t e = check_kind(dst, src, count, kind);
    if (e != cudaSuccess)
        return ret(e);
    const CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst, s = (CUdeviceptr)(uintptr_t)src;
    return ret_cu(ptds ? drv()->memcpy_ptds(d, s, count) : drv()->memcpy(d, s, count));
}

RT_EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    return memcpy_sync(dst, src, count, kind, false);
}

RT_EXPORT cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    return memcpy_sync(dst, src, count, kind, true);
}

static cudaError_t memcpy_async(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                cudaStream_t stream, bool ptsz)
{
    ENTER();
    const cudaError_t e = check_kind(dst, src, count, kind);
    if (e != cudaSuccess)
        return ret(e);
    const CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst, s = (CUdeviceptr)(uintptr_t)src;
    return ret_cu(ptsz ? drv()->memcpy_async_ptsz(d, s, count, stream)
                       : drv()->memcpy_async(d, s, count, stream));
}

RT_EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                      cudaStream_t stream)
{
    return memcpy_async(dst, src, count, kind, stream, false);
}

RT_EXPORT cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                           cudaStream_t stream)
{
    return memcpy_async(dst, src, count, kind, stream, true);
}

/* ---- pitched, 3D and batched copies and memsets, a row at a time ---- */

/* Rows of width bytes: height rows a slice, depth slices; consecutive rows pitch bytes apart and
 * slices slice bytes apart on either side.  src NULL: a memset of value.  The fake runs each row
 * through the 1D entry points in stream order (the whole range is checked first, as CUDA does). */
typedef struct RtRows {
    uintptr_t dst, src;
    size_t dpitch, spitch, dslice, sslice;
    size_t width, height, depth;
    int value;
} RtRows;

static bool reachable(uintptr_t p)
{
    bool reach = false;
    is_device((const void *)p, &reach);
    return reach;
}

static cudaError_t rows_run(const RtRows *r, enum cudaMemcpyKind kind, cudaStream_t stream, bool async,
                            bool per_thread)
{
    ENTER();
    if (!r->width || !r->height || !r->depth)
        return ret(cudaSuccess);
    if ((r->height > 1 && (r->dpitch < r->width || (r->src && r->spitch < r->width))) ||
        (r->depth > 1 &&
         (r->dslice < r->dpitch * r->height || (r->src && r->sslice < r->spitch * r->height))))
        return ret(cudaErrorInvalidPitchValue);
    const size_t dlast = (r->depth - 1) * r->dslice + (r->height - 1) * r->dpitch;
    const size_t slast = (r->depth - 1) * r->sslice + (r->height - 1) * r->spitch;
    if (r->src) {
        cudaError_t e = check_kind((void *)r->dst, (const void *)r->src, r->width, kind);
        if (e == cudaSuccess)
            e = check_kind((void *)(r->dst + dlast), (const void *)(r->src + slast), r->width, kind);
        if (e != cudaSuccess)
            return ret(e);
    } else if (!reachable(r->dst) || !reachable(r->dst + dlast)) {
        return ret(cudaErrorInvalidValue); /* memsets need device or pinned memory */
    }
    for (size_t z = 0; z < r->depth; z++) {
        for (size_t y = 0; y < r->height; y++) {
            const CUdeviceptr d = r->dst + z * r->dslice + y * r->dpitch;
            const CUdeviceptr s = r->src + z * r->sslice + y * r->spitch;
            CUresult c;
            if (!r->src)
                c = async ? (per_thread ? drv()->memset_d8_async_ptsz : drv()->memset_d8_async)(
                                d, (unsigned char)r->value, r->width, stream)
                          : (per_thread ? drv()->memset_d8_ptds
                                        : drv()->memset_d8)(d, (unsigned char)r->value, r->width);
            else
                c = async ? (per_thread ? drv()->memcpy_async_ptsz : drv()->memcpy_async)(d, s, r->width,
                                                                                          stream)
                          : (per_thread ? drv()->memcpy_ptds : drv()->memcpy)(d, s, r->width);
            if (c != CUDA_SUCCESS)
                return ret_cu(c);
        }
    }
    return ret(cudaSuccess);
}

static RtRows rows_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height)
{
    return (RtRows){.dst = (uintptr_t)dst,
                    .src = (uintptr_t)src,
                    .dpitch = dpitch,
                    .spitch = spitch,
                    .width = width,
                    .height = height,
                    .depth = 1};
}

RT_EXPORT cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                   size_t height, enum cudaMemcpyKind kind)
{
    const RtRows r = rows_2d(dst, dpitch, src, spitch, width, height);
    return rows_run(&r, kind, NULL, false, false);
}

RT_EXPORT cudaError_t cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src, size_t spitch,
                                        size_t width, size_t height, enum cudaMemcpyKind kind)
{
    const RtRows r = rows_2d(dst, dpitch, src, spitch, width, height);
    return rows_run(&r, kind, NULL, false, true);
}

RT_EXPORT cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                                        size_t width, size_t height, enum cudaMemcpyKind kind,
                                        cudaStream_t stream)
{
    const RtRows r = rows_2d(dst, dpitch, src, spitch, width, height);
    return rows_run(&r, kind, stream, true, false);
}

RT_EXPORT cudaError_t cudaMemcpy2DAsync_ptsz(void *dst, size_t dpitch, const void *src, size_t spitch,
                                             size_t width, size_t height, enum cudaMemcpyKind kind,
                                             cudaStream_t stream)
{
    const RtRows r = rows_2d(dst, dpitch, src, spitch, width, height);
    return rows_run(&r, kind, stream, true, true);
}

/* Pointer-to-pointer 3D copies (the fake has no arrays: cudaErrorInvalidValue). */
static cudaError_t memcpy_3d(const struct cudaMemcpy3DParms *p, cudaStream_t stream, bool async,
                             bool per_thread)
{
    if (!p || p->srcArray || p->dstArray || !p->srcPtr.ptr || !p->dstPtr.ptr)
        return ret(cudaErrorInvalidValue);
    const RtRows r = {
        .dst = (uintptr_t)p->dstPtr.ptr + p->dstPos.x + p->dstPos.y * p->dstPtr.pitch +
               p->dstPos.z * p->dstPtr.pitch * p->dstPtr.ysize,
        .src = (uintptr_t)p->srcPtr.ptr + p->srcPos.x + p->srcPos.y * p->srcPtr.pitch +
               p->srcPos.z * p->srcPtr.pitch * p->srcPtr.ysize,
        .dpitch = p->dstPtr.pitch,
        .spitch = p->srcPtr.pitch,
        .dslice = p->dstPtr.pitch * p->dstPtr.ysize,
        .sslice = p->srcPtr.pitch * p->srcPtr.ysize,
        .width = p->extent.width,
        .height = p->extent.height,
        .depth = p->extent.depth,
    };
    return rows_run(&r, p->kind, stream, async, per_thread);
}

RT_EXPORT cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms *p)
{
    return memcpy_3d(p, NULL, false, false);
}

RT_EXPORT cudaError_t cudaMemcpy3D_ptds(const struct cudaMemcpy3DParms *p)
{
    return memcpy_3d(p, NULL, false, true);
}

RT_EXPORT cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms *p, cudaStream_t stream)
{
    return memcpy_3d(p, stream, true, false);
}

RT_EXPORT cudaError_t cudaMemcpy3DAsync_ptsz(const struct cudaMemcpy3DParms *p, cudaStream_t stream)
{
    return memcpy_3d(p, stream, true, true);
}

static RtRows rows_memset(void *dst, size_t pitch, int value, size_t width, size_t height)
{
    return (RtRows){
        .dst = (uintptr_t)dst, .dpitch = pitch, .width = width, .height = height, .depth = 1, .value = value};
}

RT_EXPORT cudaError_t cudaMemset2D(void *dst, size_t pitch, int value, size_t width, size_t height)
{
    const RtRows r = rows_memset(dst, pitch, value, width, height);
    return rows_run(&r, cudaMemcpyDefault, NULL, false, false);
}

RT_EXPORT cudaError_t cudaMemset2D_ptds(void *dst, size_t pitch, int value, size_t width, size_t height)
{
    const RtRows r = rows_memset(dst, pitch, value, width, height);
    return rows_run(&r, cudaMemcpyDefault, NULL, false, true);
}

RT_EXPORT cudaError_t cudaMemset2DAsync(void *dst, size_t pitch, int value, size_t width, size_t height,
                                        cudaStream_t stream)
{
    const RtRows r = rows_memset(dst, pitch, value, width, height);
    return rows_run(&r, cudaMemcpyDefault, stream, true, false);
}

RT_EXPORT cudaError_t cudaMemset2DAsync_ptsz(void *dst, size_t pitch, int value, size_t width, size_t height,
                                             cudaStream_t stream)
{
    const RtRows r = rows_memset(dst, pitch, value, width, height);
    return rows_run(&r, cudaMemcpyDefault, stream, true, true);
}

static RtRows rows_memset_3d(struct cudaPitchedPtr p, int value, struct cudaExtent e)
{
    RtRows r = rows_memset(p.ptr, p.pitch, value, e.width, e.height);
    r.depth = e.depth;
    r.dslice = p.pitch * p.ysize;
    return r;
}

RT_EXPORT cudaError_t cudaMemset3D(struct cudaPitchedPtr p, int value, struct cudaExtent e)
{
    const RtRows r = rows_memset_3d(p, value, e);
    return rows_run(&r, cudaMemcpyDefault, NULL, false, false);
}

RT_EXPORT cudaError_t cudaMemset3D_ptds(struct cudaPitchedPtr p, int value, struct cudaExtent e)
{
    const RtRows r = rows_memset_3d(p, value, e);
    return rows_run(&r, cudaMemcpyDefault, NULL, false, true);
}

RT_EXPORT cudaError_t cudaMemset3DAsync(struct cudaPitchedPtr p, int value, struct cudaExtent e,
                                        cudaStream_t stream)
{
    const RtRows r = rows_memset_3d(p, value, e);
    return rows_run(&r, cudaMemcpyDefault, stream, true, false);
}

RT_EXPORT cudaError_t cudaMemset3DAsync_ptsz(struct cudaPitchedPtr p, int value, struct cudaExtent e,
                                             cudaStream_t stream)
{
    const RtRows r = rows_memset_3d(p, value, e);
    return rows_run(&r, cudaMemcpyDefault, stream, true, true);
}

/* Batches: every copy must be valid before any is enqueued; attributes are required and their
 * source access order must be given, as CUDA 13 checks. */
static cudaError_t batch_check_attrs(const struct cudaMemcpyAttributes *attrs, const size_t *idxs,
                                     size_t nattrs, size_t count)
{
    if (!attrs || !idxs || nattrs == 0 || nattrs > count || idxs[0] != 0)
        return cudaErrorInvalidValue;
    for (size_t i = 0; i < nattrs; i++)
        if ((i > 0 && idxs[i] <= idxs[i - 1]) || idxs[i] >= count ||
            attrs[i].srcAccessOrder == cudaMemcpySrcAccessOrderInvalid)
            return cudaErrorInvalidValue;
    return cudaSuccess;
}

static cudaError_t memcpy_batch(void *const *dsts, const void *const *srcs, const size_t *sizes, size_t count,
                                struct cudaMemcpyAttributes *attrs, size_t *idxs, size_t nattrs,
                                cudaStream_t stream, bool per_thread)
{
    ENTER();
    if (!dsts || !srcs || !sizes || count == 0)
        return ret(cudaErrorInvalidValue);
    cudaError_t e = batch_check_attrs(attrs, idxs, nattrs, count);
    for (size_t i = 0; e == cudaSuccess && i < count; i++)
        e = sizes[i] == 0 ? cudaErrorInvalidValue : check_kind(dsts[i], srcs[i], sizes[i], cudaMemcpyDefault);
    if (e != cudaSuccess)
        return ret(e);
    for (size_t i = 0; i < count; i++) {
        const RtRows r = rows_2d(dsts[i], 0, srcs[i], 0, sizes[i], 1);
        if ((e = rows_run(&r, cudaMemcpyDefault, stream, true, per_thread)) != cudaSuccess)
            return e;
    }
    return ret(cudaSuccess);
}

/* Either version's arguments (see runtime_version): 13.x passes the stream in a8; 12.x passes
 * failIdx in a8 (set to the failing copy, or SIZE_MAX) and the stream in a9. */
static cudaError_t memcpy_batch_any(void *const *dsts, const void *const *srcs, const size_t *sizes,
                                    size_t count, struct cudaMemcpyAttributes *attrs, size_t *idxs,
                                    size_t nattrs, uintptr_t a8, uintptr_t a9, bool per_thread)
{
    const bool v12 = runtime_version() / 1000 == 12;
    const cudaError_t e = memcpy_batch(dsts, srcs, sizes, count, attrs, idxs, nattrs,
                                       (cudaStream_t)(v12 ? a9 : a8), per_thread);
    if (v12 && a8)
        *(size_t *)a8 = SIZE_MAX;
    return e;
}

RT_EXPORT cudaError_t fake_batch(void *const *dsts, const void *const *srcs, const size_t *sizes,
                                 size_t count, struct cudaMemcpyAttributes *attrs, size_t *idxs,
                                 size_t nattrs, uintptr_t a8, uintptr_t a9) __asm__("cudaMemcpyBatchAsync");
RT_EXPORT cudaError_t fake_batch_ptsz(void *const *dsts, const void *const *srcs, const size_t *sizes,
                                      size_t count, struct cudaMemcpyAttributes *attrs, size_t *idxs,
                                      size_t nattrs, uintptr_t a8,
                                      uintptr_t a9) __asm__("cudaMemcpyBatchAsync_ptsz");

cudaError_t fake_batch(void *const *dsts, const void *const *srcs, const size_t *sizes, size_t count,
                       struct cudaMemcpyAttributes *attrs, size_t *idxs, size_t nattrs, uintptr_t a8,
                       uintptr_t a9)
{
    return memcpy_batch_any(dsts, srcs, sizes, count, attrs, idxs, nattrs, a8, a9, false);
}

cudaError_t fake_batch_ptsz(void *const *dsts, const void *const *srcs, const size_t *sizes, size_t count,
                            struct cudaMemcpyAttributes *attrs, size_t *idxs, size_t nattrs, uintptr_t a8,
                            uintptr_t a9)
{
    return memcpy_batch_any(dsts, srcs, sizes, count, attrs, idxs, nattrs, a8, a9, true);
}

/* 3D batches of pointer operands (rowLength and layerHeight in bytes; 0 takes the extent's). */
static RtRows batch3d_rows(const struct cudaMemcpy3DBatchOp *op)
{
    const size_t dpitch = op->dst.op.ptr.rowLength ? op->dst.op.ptr.rowLength : op->extent.width;
    const size_t spitch = op->src.op.ptr.rowLength ? op->src.op.ptr.rowLength : op->extent.width;
    const size_t drows = op->dst.op.ptr.layerHeight ? op->dst.op.ptr.layerHeight : op->extent.height;
    const size_t srows = op->src.op.ptr.layerHeight ? op->src.op.ptr.layerHeight : op->extent.height;
    return (RtRows){.dst = (uintptr_t)op->dst.op.ptr.ptr,
                    .src = (uintptr_t)op->src.op.ptr.ptr,
                    .dpitch = dpitch,
                    .spitch = spitch,
                    .dslice = dpitch * drows,
                    .sslice = spitch * srows,
                    .width = op->extent.width,
                    .height = op->extent.height,
                    .depth = op->extent.depth};
}

static cudaError_t memcpy_3d_batch(size_t nops, struct cudaMemcpy3DBatchOp *ops, unsigned long long flags,
                                   cudaStream_t stream, bool per_thread)
{
    ENTER();
    if (!ops || nops == 0 || flags != 0)
        return ret(cudaErrorInvalidValue);
    for (size_t i = 0; i < nops; i++)
        if (ops[i].src.type != cudaMemcpyOperandTypePointer ||
            ops[i].dst.type != cudaMemcpyOperandTypePointer || !ops[i].extent.width ||
            !ops[i].extent.height || !ops[i].extent.depth ||
            ops[i].srcAccessOrder == cudaMemcpySrcAccessOrderInvalid)
            return ret(cudaErrorInvalidValue);
    for (size_t i = 0; i < nops; i++) {
        const RtRows r = batch3d_rows(&ops[i]);
        const cudaError_t e = rows_run(&r, cudaMemcpyDefault, stream, true, per_thread);
        if (e != cudaSuccess)
            return e;
    }
    return ret(cudaSuccess);
}

/* 13.x: (nops, ops, flags, stream); 12.x: (nops, ops, failIdx, flags, stream). */
static cudaError_t memcpy_3d_batch_any(size_t nops, struct cudaMemcpy3DBatchOp *ops, uintptr_t a3,
                                       uintptr_t a4, uintptr_t a5, bool per_thread)
{
    const bool v12 = runtime_version() / 1000 == 12;
    const cudaError_t e =
        memcpy_3d_batch(nops, ops, v12 ? a4 : a3, (cudaStream_t)(v12 ? a5 : a4), per_thread);
    if (v12 && a3)
        *(size_t *)a3 = SIZE_MAX;
    return e;
}

RT_EXPORT cudaError_t fake_batch3d(size_t nops, struct cudaMemcpy3DBatchOp *ops, uintptr_t a3, uintptr_t a4,
                                   uintptr_t a5) __asm__("cudaMemcpy3DBatchAsync");
RT_EXPORT cudaError_t fake_batch3d_ptsz(size_t nops, struct cudaMemcpy3DBatchOp *ops, uintptr_t a3,
                                        uintptr_t a4, uintptr_t a5) __asm__("cudaMemcpy3DBatchAsync_ptsz");

cudaError_t fake_batch3d(size_t nops, struct cudaMemcpy3DBatchOp *ops, uintptr_t a3, uintptr_t a4,
                         uintptr_t a5)
{
    return memcpy_3d_batch_any(nops, ops, a3, a4, a5, false);
}

cudaError_t fake_batch3d_ptsz(size_t nops, struct cudaMemcpy3DBatchOp *ops, uintptr_t a3, uintptr_t a4,
                              uintptr_t a5)
{
    return memcpy_3d_batch_any(nops, ops, a3, a4, a5, true);
}

RT_EXPORT cudaError_t cudaMemset(void *dst, int value, size_t count)
{
    ENTER();
    return ret_cu(drv()->memset_d8((CUdeviceptr)(uintptr_t)dst, (unsigned char)value, count));
}

RT_EXPORT cudaError_t cudaMemset_ptds(void *dst, int value, size_t count)
{
    ENTER();
    return ret_cu(drv()->memset_d8_ptds((CUdeviceptr)(uintptr_t)dst, (unsigned char)value, count));
}

RT_EXPORT cudaError_t cudaMemsetAsync(void *dst, int value, size_t count, cudaStream_t stream)
{
    ENTER();
    return ret_cu(drv()->memset_d8_async((CUdeviceptr)(uintptr_t)dst, (unsigned char)value, count, stream));
}

RT_EXPORT cudaError_t cudaMemsetAsync_ptsz(void *dst, int value, size_t count, cudaStream_t stream)
{
    ENTER();
    return ret_cu(
        drv()->memset_d8_async_ptsz((CUdeviceptr)(uintptr_t)dst, (unsigned char)value, count, stream));
}

/* ---- streams ---- */

RT_EXPORT cudaError_t cudaStreamCreate(cudaStream_t *stream)
{
    ENTER();
    return ret_cu(cuStreamCreate(stream, CU_STREAM_DEFAULT));
}

RT_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags)
{
    ENTER();
    return ret_cu(cuStreamCreate(stream, flags));
}

RT_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *stream, unsigned int flags, int priority)
{
    ENTER();
    return ret_cu(cuStreamCreateWithPriority(stream, flags, priority));
}

RT_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    ENTER();
    return ret_cu(cuStreamDestroy_v2(stream));
}

RT_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    ENTER();
    return ret_cu(cuStreamSynchronize(stream));
}

RT_EXPORT cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream)
{
    ENTER();
    return ret_cu(cuStreamSynchronize_ptsz(stream));
}

RT_EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    ENTER();
    return ret_cu(cuStreamQuery(stream));
}

RT_EXPORT cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream)
{
    ENTER();
    return ret_cu(cuStreamQuery_ptsz(stream));
}

RT_EXPORT cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int *flags)
{
    ENTER();
    return ret_cu(cuStreamGetFlags(stream, flags));
}

RT_EXPORT cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t stream, unsigned int *flags)
{
    ENTER();
    return ret_cu(cuStreamGetFlags_ptsz(stream, flags));
}

RT_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    ENTER();
    return ret_cu(cuStreamWaitEvent(stream, event, flags));
}

RT_EXPORT cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    ENTER();
    return ret_cu(cuStreamWaitEvent_ptsz(stream, event, flags));
}

RT_EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *user_data)
{
    ENTER();
    return ret_cu(drv()->launch_host_func(stream, fn, user_data));
}

RT_EXPORT cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void *user_data)
{
    ENTER();
    return ret_cu(drv()->launch_host_func_ptsz(stream, fn, user_data));
}

/* The driver's host function runs the callback; the record carries what the callback is given. */
typedef struct RtCallback {
    cudaStreamCallback_t callback;
    cudaStream_t stream; /* as the application passed it */
    void *user_data;
} RtCallback;

static void CUDA_CB run_callback(void *arg)
{
    RtCallback *const rc = arg;
    rc->callback(rc->stream, cudaSuccess, rc->user_data);
    free(rc);
}

static cudaError_t stream_add_callback(cudaStream_t stream, cudaStreamCallback_t callback, void *user_data,
                                       unsigned int flags, bool per_thread_default)
{
    if (!callback || flags != 0)
        return ret(cudaErrorInvalidValue);
    RtCallback *const rc = malloc(sizeof(*rc));
    if (!rc)
        return ret(cudaErrorMemoryAllocation);
    *rc = (RtCallback){.callback = callback, .stream = stream, .user_data = user_data};
    const CUresult r = per_thread_default ? drv()->launch_host_func_ptsz(stream, run_callback, rc)
                                          : drv()->launch_host_func(stream, run_callback, rc);
    if (r != CUDA_SUCCESS)
        free(rc);
    return ret_cu(r);
}

RT_EXPORT cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback,
                                            void *user_data, unsigned int flags)
{
    ENTER();
    return stream_add_callback(stream, callback, user_data, flags, false);
}

RT_EXPORT cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream, cudaStreamCallback_t callback,
                                                 void *user_data, unsigned int flags)
{
    ENTER();
    return stream_add_callback(stream, callback, user_data, flags, true);
}

/* ---- events ---- */

RT_EXPORT cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    ENTER();
    return ret_cu(cuEventCreate(event, CU_EVENT_DEFAULT));
}

RT_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    ENTER();
    return ret_cu(cuEventCreate(event, flags));
}

RT_EXPORT cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    ENTER();
    return ret_cu(cuEventRecord(event, stream));
}

RT_EXPORT cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream)
{
    ENTER();
    return ret_cu(cuEventRecord_ptsz(event, stream));
}

RT_EXPORT cudaError_t cudaEventQuery(cudaEvent_t event)
{
    ENTER();
    return ret_cu(cuEventQuery(event));
}

RT_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    ENTER();
    return ret_cu(cuEventSynchronize(event));
}

RT_EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    ENTER();
    return ret_cu(cuEventElapsedTime_v2(ms, start, end));
}

RT_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    ENTER();
    return ret_cu(cuEventDestroy_v2(event));
}

/* ---- capture and graphs ---- */

RT_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    ENTER();
    return ret_cu(cuStreamBeginCapture_v2(stream, (CUstreamCaptureMode)mode));
}

RT_EXPORT cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    ENTER();
    return ret_cu(cuStreamBeginCapture_v2_ptsz(stream, (CUstreamCaptureMode)mode));
}

RT_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph)
{
    ENTER();
    return ret_cu(cuStreamEndCapture(stream, graph));
}

RT_EXPORT cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *graph)
{
    ENTER();
    return ret_cu(cuStreamEndCapture_ptsz(stream, graph));
}

static cudaError_t is_capturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status, bool ptsz)
{
    ENTER();
    if (!status)
        return ret(cudaErrorInvalidValue);
    CUstreamCaptureStatus s = CU_STREAM_CAPTURE_STATUS_NONE;
    const CUresult r = ptsz ? cuStreamIsCapturing_ptsz(stream, &s) : cuStreamIsCapturing(stream, &s);
    if (r == CUDA_SUCCESS)
        *status = (enum cudaStreamCaptureStatus)s;
    return ret_cu(r);
}

RT_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status)
{
    return is_capturing(stream, status, false);
}

RT_EXPORT cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream, enum cudaStreamCaptureStatus *status)
{
    return is_capturing(stream, status, true);
}

static cudaError_t capture_info(cudaStream_t stream, enum cudaStreamCaptureStatus *status,
                                unsigned long long *id, cudaGraph_t *graph, const cudaGraphNode_t **deps,
                                const cudaGraphEdgeData **edges, size_t *ndeps, bool ptsz)
{
    ENTER();
    if (!status)
        return ret(cudaErrorInvalidValue);
    CUstreamCaptureStatus s = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t cid = 0;
    const CUresult r = ptsz ? cuStreamGetCaptureInfo_v3_ptsz(stream, &s, &cid, graph, deps, NULL, ndeps)
                            : cuStreamGetCaptureInfo_v3(stream, &s, &cid, graph, deps, NULL, ndeps);
    if (r == CUDA_SUCCESS) {
        *status = (enum cudaStreamCaptureStatus)s;
        if (id)
            *id = cid;
        /* The fake records captures as a sequence: there is never edge data to report. */
        if (edges)
            *edges = NULL;
    }
    return ret_cu(r);
}

RT_EXPORT cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus *status,
                                               unsigned long long *id, cudaGraph_t *graph,
                                               const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges,
                                               size_t *ndeps)
{
    return capture_info(stream, status, id, graph, deps, edges, ndeps, false);
}

RT_EXPORT cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t stream, enum cudaStreamCaptureStatus *status,
                                                    unsigned long long *id, cudaGraph_t *graph,
                                                    const cudaGraphNode_t **deps,
                                                    const cudaGraphEdgeData **edges, size_t *ndeps)
{
    return capture_info(stream, status, id, graph, deps, edges, ndeps, true);
}

RT_EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
    ENTER();
    return ret_cu(cuThreadExchangeStreamCaptureMode((CUstreamCaptureMode *)mode));
}

/* Driver entry points by name, as the driver's cuGetProcAddress_v2 answers them. */
static cudaError_t entry_point(const char *symbol, void **fn, unsigned version, unsigned long long flags,
                               enum cudaDriverEntryPointQueryResult *status)
{
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    const CUresult r = drv()->get_proc_address(symbol, fn, (int)version, flags, &found);
    if (status)
        *status = (enum cudaDriverEntryPointQueryResult)found;
    return ret_cu(r);
}

#undef cudaGetDriverEntryPoint
#undef cudaGetDriverEntryPointByVersion
RT_EXPORT cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **fn, unsigned long long flags,
                                              enum cudaDriverEntryPointQueryResult *status)
{
    ENTER();
    return entry_point(symbol, fn, CUDART_VERSION, flags, status);
}

RT_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned int version,
                                                       unsigned long long flags,
                                                       enum cudaDriverEntryPointQueryResult *status)
{
    ENTER();
    return entry_point(symbol, fn, version, flags, status);
}

RT_EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags)
{
    ENTER();
    return ret_cu(drv()->graph_instantiate(exec, graph, flags));
}

RT_EXPORT cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t graph,
                                                    unsigned long long flags)
{
    ENTER();
    return ret_cu(drv()->graph_instantiate(exec, graph, flags));
}

/* The upload stream is not used: the fake's graphs need no upload. */
static cudaError_t instantiate_with_params(cudaGraphExec_t *exec, cudaGraph_t graph,
                                           cudaGraphInstantiateParams *params)
{
    if (!params)
        return cudaErrorInvalidValue;
    params->errNode_out = NULL;
    const cudaError_t err = ret_cu(drv()->graph_instantiate(exec, graph, params->flags));
    params->result_out = err == cudaSuccess ? cudaGraphInstantiateSuccess : cudaGraphInstantiateError;
    return err;
}

RT_EXPORT cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t *exec, cudaGraph_t graph,
                                                     cudaGraphInstantiateParams *params)
{
    ENTER();
    return instantiate_with_params(exec, graph, params);
}

RT_EXPORT cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t *exec, cudaGraph_t graph,
                                                          cudaGraphInstantiateParams *params)
{
    ENTER();
    return instantiate_with_params(exec, graph, params);
}

RT_EXPORT cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph,
                                          cudaGraphExecUpdateResultInfo *info)
{
    ENTER();
    CUgraphExecUpdateResultInfo cu_info;
    const cudaError_t err = ret_cu(drv()->graph_exec_update(exec, graph, info ? &cu_info : NULL));
    if (info) {
        info->result = (enum cudaGraphExecUpdateResult)cu_info.result;
        info->errorNode = NULL;
        info->errorFromNode = NULL;
    }
    return err;
}

RT_EXPORT cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t *node, cudaGraph_t graph,
                                                 const cudaGraphNode_t *deps, size_t ndeps, cudaGraph_t child)
{
    ENTER();
    return ret_cu(cuGraphAddChildGraphNode(node, graph, deps, ndeps, child));
}

RT_EXPORT cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *count)
{
    ENTER();
    return ret_cu(cuGraphGetNodes(graph, nodes, count));
}

/* A copy node's parameters, one row between pointers as the fake's graphs hold them. */
RT_EXPORT cudaError_t cudaGraphMemcpyNodeGetParams(cudaGraphNode_t node, struct cudaMemcpy3DParms *params)
{
    ENTER();
    if (!params)
        return cudaErrorInvalidValue;
    CUDA_MEMCPY3D c;
    const CUresult r = cuGraphMemcpyNodeGetParams(node, &c);
    if (r != CUDA_SUCCESS)
        return ret_cu(r);
    uint8_t *const src =
        (uint8_t *)(c.srcMemoryType == CU_MEMORYTYPE_HOST ? (uintptr_t)c.srcHost : (uintptr_t)c.srcDevice);
    uint8_t *const dst =
        (uint8_t *)(c.dstMemoryType == CU_MEMORYTYPE_HOST ? (uintptr_t)c.dstHost : (uintptr_t)c.dstDevice);
    memset(params, 0, sizeof(*params));
    params->srcPtr = (struct cudaPitchedPtr){
        .ptr = src + c.srcXInBytes, .pitch = c.WidthInBytes, .xsize = c.WidthInBytes, .ysize = 1};
    params->dstPtr = (struct cudaPitchedPtr){
        .ptr = dst + c.dstXInBytes, .pitch = c.WidthInBytes, .xsize = c.WidthInBytes, .ysize = 1};
    params->extent = (struct cudaExtent){.width = c.WidthInBytes, .height = 1, .depth = 1};
    params->kind = cudaMemcpyDefault;
    return cudaSuccess;
}

/* One-row copies and byte memsets, as the fake's graphs hold them. */
static cudaError_t exec_memcpy_1d(cudaGraphExec_t exec, cudaGraphNode_t node, void *dst, const void *src,
                                  size_t count)
{
    CUDA_MEMCPY3D p;
    memset(&p, 0, sizeof(p));
    p.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
    p.srcDevice = (CUdeviceptr)(uintptr_t)src;
    p.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
    p.dstDevice = (CUdeviceptr)(uintptr_t)dst;
    p.WidthInBytes = count;
    p.Height = 1;
    p.Depth = 1;
    return ret_cu(drv()->graph_exec_memcpy(exec, node, &p, NULL));
}

static cudaError_t exec_memset(cudaGraphExec_t exec, cudaGraphNode_t node, void *dst, size_t pitch,
                               unsigned int value, unsigned int element_size, size_t width, size_t height)
{
    CUDA_MEMSET_NODE_PARAMS p = {.dst = (CUdeviceptr)(uintptr_t)dst,
                                 .pitch = pitch,
                                 .value = value,
                                 .elementSize = element_size,
                                 .width = width,
                                 .height = height};
    return ret_cu(drv()->graph_exec_memset(exec, node, &p, NULL));
}

RT_EXPORT cudaError_t cudaGraphExecMemcpyNodeSetParams1D(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                         void *dst, const void *src, size_t count,
                                                         enum cudaMemcpyKind kind)
{
    ENTER();
    (void)kind;
    return exec_memcpy_1d(exec, node, dst, src, count);
}

RT_EXPORT cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                       const struct cudaMemsetParams *params)
{
    ENTER();
    if (!params)
        return cudaErrorInvalidValue;
    return exec_memset(exec, node, params->dst, params->pitch, params->value, params->elementSize,
                       params->width, params->height);
}

RT_EXPORT cudaError_t cudaGraphKernelNodeSetAttribute(cudaGraphNode_t node, cudaKernelNodeAttrID attr,
                                                      const cudaKernelNodeAttrValue *value)
{
    ENTER();
    return ret_cu(cuGraphKernelNodeSetAttribute((CUgraphNode)node, (CUkernelNodeAttrID)attr,
                                                (const CUkernelNodeAttrValue *)value));
}

RT_EXPORT cudaError_t cudaGraphKernelNodeGetAttribute(cudaGraphNode_t node, cudaKernelNodeAttrID attr,
                                                      cudaKernelNodeAttrValue *value)
{
    ENTER();
    return ret_cu(cuGraphKernelNodeGetAttribute((CUgraphNode)node, (CUkernelNodeAttrID)attr,
                                                (CUkernelNodeAttrValue *)value));
}

/* func is a kernel of a library (cudaLibraryGetKernel), as for cudaLaunchKernel. */
RT_EXPORT cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                       const struct cudaKernelNodeParams *params)
{
    ENTER();
    if (!params)
        return ret(cudaErrorInvalidValue);
    const CUDA_KERNEL_NODE_PARAMS p = {
        .func = (CUfunction)params->func,
        .gridDimX = params->gridDim.x,
        .gridDimY = params->gridDim.y,
        .gridDimZ = params->gridDim.z,
        .blockDimX = params->blockDim.x,
        .blockDimY = params->blockDim.y,
        .blockDimZ = params->blockDim.z,
        .sharedMemBytes = params->sharedMemBytes,
        .kernelParams = params->kernelParams,
        .extra = params->extra,
    };
    return ret_cu(drv()->graph_exec_kernel(exec, node, &p));
}

RT_EXPORT cudaError_t cudaGraphExecChildGraphNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                           cudaGraph_t child)
{
    ENTER();
    return ret_cu(drv()->graph_exec_child(exec, node, child));
}

/* Copies of one row between pointers, byte memsets and child graphs. */
RT_EXPORT cudaError_t cudaGraphExecNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                 struct cudaGraphNodeParams *params)
{
    ENTER();
    if (!params)
        return cudaErrorInvalidValue;
    switch (params->type) {
    case cudaGraphNodeTypeMemcpy: {
        const struct cudaMemcpy3DParms *const c = &params->memcpy.copyParams;
        if (c->srcArray || c->dstArray || c->extent.height > 1 || c->extent.depth > 1)
            return cudaErrorInvalidValue;
        return exec_memcpy_1d(exec, node, (uint8_t *)c->dstPtr.ptr + c->dstPos.x,
                              (const uint8_t *)c->srcPtr.ptr + c->srcPos.x, c->extent.width);
    }
    case cudaGraphNodeTypeMemset:
        return exec_memset(exec, node, params->memset.dst, params->memset.pitch, params->memset.value,
                           params->memset.elementSize, params->memset.width, params->memset.height);
    case cudaGraphNodeTypeGraph:
        return ret_cu(drv()->graph_exec_child(exec, node, params->graph.graph));
    default:
        return cudaErrorNotSupported;
    }
}

RT_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream)
{
    ENTER();
    return ret_cu(drv()->graph_launch(exec, stream));
}

RT_EXPORT cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t exec, cudaStream_t stream)
{
    ENTER();
    return ret_cu(drv()->graph_launch_ptsz(exec, stream));
}

RT_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    ENTER();
    return ret_cu(drv()->graph_exec_destroy(exec));
}

RT_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    ENTER();
    return ret_cu(cuGraphDestroy(graph));
}

/* ---- libraries and kernel launches ---- */

/* A library is a module and a kernel its function, as cudaLibraryLoadData and cudaLibraryGetKernel give
 * them; cudaLaunchKernel takes such a kernel (functions registered by nvcc's host stubs do not exist
 * here). */
RT_EXPORT cudaError_t cudaLibraryLoadData(cudaLibrary_t *library, const void *code,
                                          enum cudaJitOption *jit_options, void **jit_values,
                                          unsigned int njit, enum cudaLibraryOption *library_options,
                                          void **library_values, unsigned int nlibrary)
{
    (void)jit_options;
    (void)jit_values;
    (void)library_options;
    (void)library_values;
    if (!library || !code || (njit && (!jit_options || !jit_values)) ||
        (nlibrary && (!library_options || !library_values)))
        return ret(cudaErrorInvalidValue);
    ENTER();
    CUmodule m = NULL;
    const CUresult r = cuModuleLoadData(&m, code);
    if (r == CUDA_SUCCESS)
        *library = (cudaLibrary_t)m;
    return ret_cu(r);
}

RT_EXPORT cudaError_t cudaLibraryUnload(cudaLibrary_t library)
{
    ENTER();
    return ret_cu(cuModuleUnload((CUmodule)library));
}

RT_EXPORT cudaError_t cudaLibraryGetKernel(cudaKernel_t *kernel, cudaLibrary_t library, const char *name)
{
    if (!kernel || !name)
        return ret(cudaErrorInvalidValue);
    ENTER();
    CUfunction f = NULL;
    const CUresult r = cuModuleGetFunction(&f, (CUmodule)library, name);
    if (r == CUDA_SUCCESS)
        *kernel = (cudaKernel_t)f;
    return r == CUDA_ERROR_NOT_FOUND ? ret(cudaErrorSymbolNotFound) : ret_cu(r);
}

RT_EXPORT cudaError_t cudaFuncGetParamInfo(const void *func, size_t index, size_t *offset, size_t *size)
{
    ENTER();
    const CUresult r = cuFuncGetParamInfo((CUfunction)(uintptr_t)func, index, offset, size);
    return r == CUDA_ERROR_INVALID_HANDLE ? ret(cudaErrorInvalidDeviceFunction) : ret_cu(r);
}

static cudaError_t launch_kernel(bool ptsz, const void *func, dim3 grid, dim3 block, void **args,
                                 size_t shared, cudaStream_t stream)
{
    ENTER();
    if (shared > UINT32_MAX)
        return ret(cudaErrorInvalidValue);
    const CUfunction f = (CUfunction)(uintptr_t)func;
    const CUresult r = (ptsz ? drv()->launch_kernel_ptsz : drv()->launch_kernel)(
        f, grid.x, grid.y, grid.z, block.x, block.y, block.z, (unsigned)shared, stream, args, NULL);
    return r == CUDA_ERROR_INVALID_HANDLE ? ret(cudaErrorInvalidDeviceFunction) : ret_cu(r);
}

RT_EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shared,
                                       cudaStream_t stream)
{
    return launch_kernel(false, func, grid, block, args, shared, stream);
}

RT_EXPORT cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 grid, dim3 block, void **args,
                                            size_t shared, cudaStream_t stream)
{
    return launch_kernel(true, func, grid, block, args, shared, stream);
}

static cudaError_t launch_kernel_ex(bool ptsz, const cudaLaunchConfig_t *config, const void *func,
                                    void **args)
{
    if (!config || (config->numAttrs && !config->attrs))
        return ret(cudaErrorInvalidValue);
    return launch_kernel(ptsz, func, config->gridDim, config->blockDim, args, config->dynamicSmemBytes,
                         config->stream);
}

RT_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args)
{
    return launch_kernel_ex(false, config, func, args);
}

RT_EXPORT cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func,
                                               void **args)
{
    return launch_kernel_ex(true, config, func, args);
}
