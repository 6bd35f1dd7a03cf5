/* SPDX-License-Identifier: MIT
 * ibpshim: a device reset in the middle of a run.  A region's copies go compressed; then the
 * application resets the device (cudaDeviceReset, or the driver's cuDevicePrimaryCtxReset by
 * symbol, or the CUDA 12 runtime's cudaThreadExit), which destroys every allocation of its primary context:
 * the application's pinned memory's registration, and the shadows, staging and streams the shim keeps there.
 * The application goes on: it writes other bytes into the same memory and registers it again.  Every copy of
 * it must deliver them, with no fault, and none may go compressed, since the shim stops its compressed path
 * before the reset.  Argument: "runtime", "driver" or "thread-exit" (by symbol, skipped where the runtime has
 * none). */
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include <cuda.h>

#include "tests/preload/preload_check.h"

typedef CUresult (*PrimaryResetFn)(CUdevice dev);
typedef cudaError_t (*ThreadExitFn)(void);

/* dl_iterate_phdr: 1 for a loaded libcudart that defines cudaThreadExit. */
static int runtime_has_thread_exit(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    (void)arg;
    if (!info->dlpi_name || !strstr(info->dlpi_name, "libcudart"))
        return 0;
    void *const h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
    const int has = h && dlsym(h, "cudaThreadExit") != NULL;
    if (h)
        dlclose(h);
    return has;
}

int main(int argc, char **argv)
{
    CHECK(argc == 2 &&
              (!strcmp(argv[1], "runtime") || !strcmp(argv[1], "driver") || !strcmp(argv[1], "thread-exit")),
          "usage: device_reset runtime|driver|thread-exit");
    const PreloadTotalsFn totals = preload_compression_or_skip("device_reset", 1);
    const size_t n = (size_t)4 << 20;
    uint8_t *const host = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(host != MAP_FAILED, "mmap");
    preload_fill_weights(host, n);
    PreloadTrip t;
    preload_trip_register(&t, host, n);
    preload_wait_compressed("device_reset", "the region", totals, preload_trip, &t);
    free(t.back);
    if (!strcmp(argv[1], "runtime")) {
        CHECK_CUDA(cudaDeviceReset());
    } else if (!strcmp(argv[1], "thread-exit")) {
        /* The shim exports the name whatever the runtime: the runtime's own must exist. */
        if (!dl_iterate_phdr(runtime_has_thread_exit, NULL)) {
            printf("device_reset: skipped (the runtime loaded has no cudaThreadExit)\n");
            return 77;
        }
        const ThreadExitFn thread_exit = (ThreadExitFn)dlsym(RTLD_DEFAULT, "cudaThreadExit");
        CHECK(thread_exit != NULL, "cudaThreadExit not found");
        CHECK_CUDA(thread_exit());
    } else {
        int dev = 0;
        CHECK_CUDA(cudaGetDevice(&dev));
        const PrimaryResetFn reset = (PrimaryResetFn)dlsym(RTLD_DEFAULT, "cuDevicePrimaryCtxReset_v2");
        CHECK(reset != NULL, "cuDevicePrimaryCtxReset_v2 not found");
        CHECK(reset((CUdevice)dev) == CUDA_SUCCESS, "cuDevicePrimaryCtxReset_v2 failed");
    }
    IbpshimTransferTotals a;
    CHECK(totals(&a) == 0, "totals");
    /* The registration, stream and buffers are gone with the context; the memory is the
     * application's still. */
    const int copies = preload_trips_after_loss(totals, &a, &t, host, n, "the reset");
    preload_trip_unregister(&t);
    munmap(host, n);
    printf("device_reset: ok (%s: %d copies after the reset checked)\n", argv[1], copies);
    return 0;
}
