/* SPDX-License-Identifier: MIT
 * ibpshim: fake CUDA driver: cuGetProcAddress resolves base names to the newest implemented version. */
#include "tests/fakecuda/internal.h"

#include <string.h>

typedef struct ProcEntry {
    const char *name;
    int since;      /* first CUDA version (1000 * major + 10 * minor) that maps the name here */
    void *fn;
    void *fn_ptsz;  /* per-thread default stream flavour, or NULL when the call takes no stream */
} ProcEntry;

/* Function pointers go through void * as dlsym's do (POSIX guarantees the round trip). */
#define F(fn) ((void *)(fn))
#define ENTRY(name, since, fn) {name, since, F(fn), NULL}
#define ENTRY_PT(name, since, fn, pt) {name, since, F(fn), F(pt)}

static const ProcEntry table[] = {
    ENTRY("cuInit", 2000, cuInit),
    ENTRY("cuDriverGetVersion", 2020, cuDriverGetVersion),
    ENTRY("cuGetErrorString", 6000, cuGetErrorString),
    ENTRY("cuGetErrorName", 6000, cuGetErrorName),
    ENTRY("cuGetProcAddress", 12000, cuGetProcAddress_v2),
    ENTRY("cuDeviceGet", 2000, cuDeviceGet),
    ENTRY("cuDeviceGetCount", 2000, cuDeviceGetCount),
    ENTRY("cuDeviceGetName", 2000, cuDeviceGetName),
    ENTRY("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    ENTRY("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    ENTRY("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    ENTRY("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    ENTRY("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    ENTRY("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
    ENTRY("cuCtxCreate", 3020, cuCtxCreate_v2),
    ENTRY("cuCtxCreate", 12050, cuCtxCreate_v4),
    ENTRY("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    ENTRY("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    ENTRY("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    ENTRY("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    ENTRY("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    ENTRY("cuCtxGetDevice", 2000, cuCtxGetDevice),
    ENTRY("cuCtxSynchronize", 2000, cuCtxSynchronize),
    ENTRY("cuDeviceGetDevResource", 12040, cuDeviceGetDevResource),
    ENTRY("cuDevResourceGenerateDesc", 12040, cuDevResourceGenerateDesc),
    ENTRY("cuGreenCtxCreate", 12040, cuGreenCtxCreate),
    ENTRY("cuCtxFromGreenCtx", 12040, cuCtxFromGreenCtx),
    ENTRY("cuGreenCtxDestroy", 12040, cuGreenCtxDestroy),
    ENTRY("cuModuleLoadData", 2000, cuModuleLoadData),
    ENTRY("cuModuleLoadFatBinary", 2000, cuModuleLoadFatBinary),
    ENTRY("cuModuleUnload", 2000, cuModuleUnload),
    ENTRY("cuModuleGetFunction", 2000, cuModuleGetFunction),
    ENTRY("cuFuncGetAttribute", 2020, cuFuncGetAttribute),
    ENTRY("cuFuncSetAttribute", 9000, cuFuncSetAttribute),
    ENTRY("cuOccupancyMaxActiveBlocksPerMultiprocessor", 6050, cuOccupancyMaxActiveBlocksPerMultiprocessor),
    ENTRY_PT("cuLaunchKernel", 4000, cuLaunchKernel, cuLaunchKernel_ptsz),
    ENTRY_PT("cuLaunchKernelEx", 11060, cuLaunchKernelEx, cuLaunchKernelEx_ptsz),
    ENTRY("cuFuncGetParamInfo", 12040, cuFuncGetParamInfo),
    ENTRY("cuKernelGetParamInfo", 12040, cuKernelGetParamInfo),
    ENTRY("cuFuncGetName", 12030, cuFuncGetName),
    ENTRY("cuKernelGetName", 12030, cuKernelGetName),
    ENTRY("cuLibraryLoadData", 12000, cuLibraryLoadData),
    ENTRY("cuLibraryUnload", 12000, cuLibraryUnload),
    ENTRY("cuLibraryGetKernel", 12000, cuLibraryGetKernel),
    ENTRY_PT("cuLaunchHostFunc", 10000, cuLaunchHostFunc, cuLaunchHostFunc_ptsz),
    ENTRY_PT("cuStreamAddCallback", 5000, cuStreamAddCallback, cuStreamAddCallback_ptsz),
    ENTRY("cuMemAlloc", 3020, cuMemAlloc_v2),
    ENTRY("cuMemFree", 3020, cuMemFree_v2),
    ENTRY("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    ENTRY("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    ENTRY("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    ENTRY("cuMemFreeHost", 2000, cuMemFreeHost),
    ENTRY("cuMemHostAlloc", 2020, cuMemHostAlloc),
    ENTRY("cuMemHostRegister", 6050, cuMemHostRegister_v2),
    ENTRY("cuMemHostUnregister", 4000, cuMemHostUnregister),
    ENTRY("cuMemHostGetDevicePointer", 3020, cuMemHostGetDevicePointer_v2),
    ENTRY("cuMemHostGetFlags", 2030, cuMemHostGetFlags),
    ENTRY_PT("cuMemcpy", 4000, cuMemcpy, cuMemcpy_ptds),
    ENTRY_PT("cuMemcpyAsync", 4000, cuMemcpyAsync, cuMemcpyAsync_ptsz),
    ENTRY_PT("cuMemcpyBatchAsync", 12080, cuMemcpyBatchAsync, cuMemcpyBatchAsync_ptsz),
    ENTRY_PT("cuMemcpyBatchAsync", 13000, cuMemcpyBatchAsync_v2, cuMemcpyBatchAsync_v2_ptsz),
    ENTRY_PT("cuMemcpy3DBatchAsync", 12080, cuMemcpy3DBatchAsync, cuMemcpy3DBatchAsync_ptsz),
    ENTRY_PT("cuMemcpy3DBatchAsync", 13000, cuMemcpy3DBatchAsync_v2, cuMemcpy3DBatchAsync_v2_ptsz),
    ENTRY_PT("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds),
    ENTRY_PT("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds),
    ENTRY_PT("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds),
    ENTRY_PT("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz),
    ENTRY_PT("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz),
    ENTRY_PT("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz),
    ENTRY_PT("cuMemsetD8", 3020, cuMemsetD8_v2, cuMemsetD8_v2_ptds),
    ENTRY_PT("cuMemsetD8Async", 3020, cuMemsetD8Async, cuMemsetD8Async_ptsz),
    ENTRY_PT("cuStreamWriteValue32", 8000, cuStreamWriteValue32, cuStreamWriteValue32_ptsz),
    ENTRY_PT("cuStreamWriteValue32", 12000, cuStreamWriteValue32_v2, cuStreamWriteValue32_v2_ptsz),
    ENTRY_PT("cuStreamWriteValue64", 8000, cuStreamWriteValue64, cuStreamWriteValue64_ptsz),
    ENTRY_PT("cuStreamWriteValue64", 12000, cuStreamWriteValue64_v2, cuStreamWriteValue64_v2_ptsz),
    ENTRY_PT("cuStreamBatchMemOp", 8000, cuStreamBatchMemOp, cuStreamBatchMemOp_ptsz),
    ENTRY_PT("cuStreamBatchMemOp", 12000, cuStreamBatchMemOp_v2, cuStreamBatchMemOp_v2_ptsz),
    ENTRY("cuStreamCreate", 2000, cuStreamCreate),
    ENTRY("cuStreamCreateWithPriority", 5050, cuStreamCreateWithPriority),
    ENTRY("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    ENTRY_PT("cuStreamSynchronize", 2000, cuStreamSynchronize, cuStreamSynchronize_ptsz),
    ENTRY_PT("cuStreamQuery", 2000, cuStreamQuery, cuStreamQuery_ptsz),
    ENTRY_PT("cuStreamWaitEvent", 3020, cuStreamWaitEvent, cuStreamWaitEvent_ptsz),
    ENTRY_PT("cuStreamGetFlags", 5050, cuStreamGetFlags, cuStreamGetFlags_ptsz),
    ENTRY_PT("cuStreamGetCtx", 9020, cuStreamGetCtx, cuStreamGetCtx_ptsz),
    ENTRY_PT("cuStreamGetId", 12000, cuStreamGetId, cuStreamGetId_ptsz),
    ENTRY_PT("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz),
    ENTRY("cuThreadExchangeStreamCaptureMode", 10010, cuThreadExchangeStreamCaptureMode),
    ENTRY_PT("cuStreamEndCapture", 10000, cuStreamEndCapture, cuStreamEndCapture_ptsz),
    ENTRY_PT("cuStreamIsCapturing", 10000, cuStreamIsCapturing, cuStreamIsCapturing_ptsz),
    ENTRY_PT("cuStreamGetCaptureInfo", 10010, cuStreamGetCaptureInfo, cuStreamGetCaptureInfo_ptsz),
    ENTRY_PT("cuStreamGetCaptureInfo", 11030, cuStreamGetCaptureInfo_v2, cuStreamGetCaptureInfo_v2_ptsz),
    ENTRY_PT("cuStreamGetCaptureInfo", 12030, cuStreamGetCaptureInfo_v3, cuStreamGetCaptureInfo_v3_ptsz),
    ENTRY("cuEventCreate", 2000, cuEventCreate),
    ENTRY_PT("cuEventRecord", 2000, cuEventRecord, cuEventRecord_ptsz),
    ENTRY("cuEventQuery", 2000, cuEventQuery),
    ENTRY("cuEventSynchronize", 2000, cuEventSynchronize),
    ENTRY("cuEventDestroy", 4000, cuEventDestroy_v2),
    ENTRY("cuEventElapsedTime", 2000, cuEventElapsedTime),
    ENTRY("cuEventElapsedTime", 12080, cuEventElapsedTime_v2),
    ENTRY("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
    ENTRY("cuPointerGetAttributes", 7000, cuPointerGetAttributes),
    ENTRY("cuGraphInstantiate", 10000, cuGraphInstantiate),
    ENTRY("cuGraphInstantiate", 11000, cuGraphInstantiate_v2),
    ENTRY("cuGraphInstantiateWithFlags", 11040, cuGraphInstantiateWithFlags),
    ENTRY_PT("cuGraphInstantiateWithParams", 12000, cuGraphInstantiateWithParams,
             cuGraphInstantiateWithParams_ptsz),
    ENTRY_PT("cuGraphLaunch", 10000, cuGraphLaunch, cuGraphLaunch_ptsz),
    ENTRY("cuGraphExecDestroy", 10000, cuGraphExecDestroy),
    ENTRY("cuGraphDestroy", 10000, cuGraphDestroy),
    ENTRY("cuGraphGetNodes", 10000, cuGraphGetNodes),
    ENTRY("cuGraphNodeGetType", 10000, cuGraphNodeGetType),
    ENTRY("cuGraphChildGraphNodeGetGraph", 10000, cuGraphChildGraphNodeGetGraph),
    ENTRY("cuGraphAddChildGraphNode", 10000, cuGraphAddChildGraphNode),
    ENTRY("cuGraphMemcpyNodeGetParams", 10000, cuGraphMemcpyNodeGetParams),
    ENTRY("cuGraphMemsetNodeGetParams", 10000, cuGraphMemsetNodeGetParams),
    ENTRY("cuGraphBatchMemOpNodeGetParams", 11070, cuGraphBatchMemOpNodeGetParams),
    ENTRY("cuGraphKernelNodeGetParams", 12000, cuGraphKernelNodeGetParams_v2),
    ENTRY("cuGraphKernelNodeGetAttribute", 11000, cuGraphKernelNodeGetAttribute),
    ENTRY("cuGraphKernelNodeSetAttribute", 11000, cuGraphKernelNodeSetAttribute),
    ENTRY("cuGraphExecKernelNodeSetParams", 12000, cuGraphExecKernelNodeSetParams_v2),
    ENTRY("cuGraphExecBatchMemOpNodeSetParams", 11070, cuGraphExecBatchMemOpNodeSetParams),
    ENTRY("cuGraphExecUpdate", 10020, cuGraphExecUpdate),
    ENTRY("cuGraphExecUpdate", 12000, cuGraphExecUpdate_v2),
    ENTRY("cuGraphExecChildGraphNodeSetParams", 11010, cuGraphExecChildGraphNodeSetParams),
    ENTRY("cuGraphExecNodeSetParams", 12020, cuGraphExecNodeSetParams),
    ENTRY("cuGraphExecMemcpyNodeSetParams", 10020, cuGraphExecMemcpyNodeSetParams),
    ENTRY("cuGraphExecMemsetNodeSetParams", 10020, cuGraphExecMemsetNodeSetParams),
};

static CUresult lookup(const char *symbol, void **pfn, int version, cuuint64_t flags,
                       CUdriverProcAddressQueryResult *status)
{
    const cuuint64_t known = CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    if (!symbol || !pfn || version <= 0 || (flags & ~known))
        return CUDA_ERROR_INVALID_VALUE;
    const ProcEntry *best = NULL;
    bool named = false;
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        if (strcmp(table[i].name, symbol))
            continue;
        named = true;
        if (table[i].since <= version && (!best || table[i].since > best->since))
            best = &table[i];
    }
    *pfn = NULL;
    if (!best) {
        if (status)
            *status = named ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        FAKECUDA_TRACE("cuGetProcAddress(%s, %d) -> not found", symbol, version);
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && best->fn_ptsz ? best->fn_ptsz : best->fn;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                             CUdriverProcAddressQueryResult *status)
{
    return lookup(symbol, pfn, version, flags, status);
}

FAKECUDA_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    return lookup(symbol, pfn, version, flags, NULL);
}
