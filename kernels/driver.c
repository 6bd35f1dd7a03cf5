/* SPDX-License-Identifier: MIT
 * ibpshim: the CUDA Driver API entry points the shim uses, loaded once from libcuda.so.1. */
#include "kernels/driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "common/log.h"

typedef CUresult (*IbpGetProcAddress)(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
                                      CUdriverProcAddressQueryResult *status);

static IbpDriver driver;
static const IbpDriver *driver_ready;
static char driver_why[256];
static pthread_once_t driver_once = PTHREAD_ONCE_INIT;

static void driver_load(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *err = dlerror();
        snprintf(driver_why, sizeof(driver_why), "cannot load libcuda.so.1: %s", err ? err : "unknown");
        goto fail;
    }
    const IbpGetProcAddress get_proc = (IbpGetProcAddress)dlsym(lib, "cuGetProcAddress_v2");
    if (!get_proc) {
        snprintf(driver_why, sizeof(driver_why), "libcuda.so.1 has no cuGetProcAddress_v2 (driver too old)");
        goto fail;
    }
#define IBP_DRIVER_LOAD(name, version)                                                             \
    do {                                                                                           \
        void *fn = NULL;                                                                           \
        CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;             \
        if (get_proc(#name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS    \
            || !fn) {                                                                              \
            snprintf(driver_why, sizeof(driver_why), "driver lacks %s for CUDA %d (status %d)", #name, \
                     version, (int)status);                                                        \
            goto fail;                                                                             \
        }                                                                                          \
        driver.name = (__typeof__(driver.name))fn;                                                 \
    } while (0);
    IBP_DRIVER_LIST(IBP_DRIVER_LOAD)
#undef IBP_DRIVER_LOAD

    CUresult res = driver.cuInit(0);
    if (res != CUDA_SUCCESS) {
        snprintf(driver_why, sizeof(driver_why), "cuInit failed: %s", ibp_driver_result_name(res));
        goto fail;
    }
    res = driver.cuDriverGetVersion(&driver.version);
    if (res != CUDA_SUCCESS) {
        snprintf(driver_why, sizeof(driver_why), "cuDriverGetVersion failed: %s", ibp_driver_result_name(res));
        goto fail;
    }
    driver_ready = &driver;
    IBP_DEBUG("CUDA driver %d.%d loaded", driver.version / 1000, driver.version % 1000 / 10);
    return;
fail:
    /* libcuda stays mapped if it was opened: the application is likely using it too. */
    IBP_DEBUG("compressed path unavailable: %s", driver_why);
}

const IbpDriver *ibp_driver_get(void)
{
    pthread_once(&driver_once, driver_load);
    return driver_ready;
}

IbpCaptureMode ibp_driver_capture_relax(const IbpDriver *drv)
{
    IbpCaptureMode m = {.saved = CU_STREAM_CAPTURE_MODE_RELAXED};
    m.relaxed = drv->cuThreadExchangeStreamCaptureMode(&m.saved) == CUDA_SUCCESS;
    return m;
}

void ibp_driver_capture_restore(const IbpDriver *drv, IbpCaptureMode mode)
{
    if (mode.relaxed)
        drv->cuThreadExchangeStreamCaptureMode(&mode.saved);
}

CUresult ibp_driver_event_query(const IbpDriver *drv, CUevent ev)
{
    const IbpCaptureMode mode = ibp_driver_capture_relax(drv);
    const CUresult res = drv->cuEventQuery(ev);
    ibp_driver_capture_restore(drv, mode);
    return res;
}

CUresult ibp_driver_event_sync(const IbpDriver *drv, CUevent ev)
{
    const IbpCaptureMode mode = ibp_driver_capture_relax(drv);
    const CUresult res = drv->cuEventSynchronize(ev);
    ibp_driver_capture_restore(drv, mode);
    return res;
}

CUresult ibp_driver_stream_sync(const IbpDriver *drv, CUstream stream)
{
    const IbpCaptureMode mode = ibp_driver_capture_relax(drv);
    const CUresult res = drv->cuStreamSynchronize(stream);
    ibp_driver_capture_restore(drv, mode);
    return res;
}

const char *ibp_driver_error(void)
{
    pthread_once(&driver_once, driver_load);
    return driver_why;
}

const char *ibp_driver_result_name(CUresult result)
{
    const char *name = NULL;
    if (driver_ready && driver_ready->cuGetErrorName(result, &name) == CUDA_SUCCESS && name)
        return name;
    switch (result) {
    case CUDA_SUCCESS:
        return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE:
        return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY:
        return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED:
        return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_NO_DEVICE:
        return "CUDA_ERROR_NO_DEVICE";
    default:
        return "CUDA error";
    }
}
