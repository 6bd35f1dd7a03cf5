/* SPDX-License-Identifier: MIT
 * ibpshim: a device reset in the middle of a run.  A region's copies go compressed; then the
 * application resets the device (cudaDeviceReset, or the driver's cuDevicePrimaryCtxReset by
 * symbol), which destroys every allocation of its primary context: the application's pinned
 * memory's registration, and the shadows, staging and streams the shim keeps there.  The
 * application goes on: it writes other bytes into the same memory and registers it again.  Every
 * copy of it must deliver them, with no fault, and none may go compressed, since the shim stops
 * its compressed path before the reset.  Argument: "runtime" or "driver". */
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include <cuda.h>

#include "tests/preload/preload_check.h"

typedef CUresult (*PrimaryResetFn)(CUdevice dev);

/* A stream, a device buffer and a buffer for the way back around the registered region. */
static void trip_open(PreloadTrip *t, uint8_t *host, size_t n)
{
    *t = (PreloadTrip){.w = {.host = host, .n = n}};
    CHECK_CUDA(cudaHostRegister(host, n, cudaHostRegisterDefault));
    CHECK_CUDA(cudaStreamCreate(&t->w.s));
    CHECK_CUDA(cudaMalloc(&t->dev, n));
    t->back = malloc(n);
    CHECK(t->back != NULL, "malloc");
}

int main(int argc, char **argv)
{
    CHECK(argc == 2 && (!strcmp(argv[1], "runtime") || !strcmp(argv[1], "driver")),
          "usage: device_reset runtime|driver");
    const PreloadTotalsFn totals = preload_compression_or_skip("device_reset", 1);
    const size_t n = (size_t)4 << 20;
    uint8_t *const host = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(host != MAP_FAILED, "mmap");
    preload_fill_weights(host, n);
    PreloadTrip t;
    trip_open(&t, host, n);
    preload_wait_compressed("device_reset", "the region", totals, preload_trip, &t);
    free(t.back);
    if (!strcmp(argv[1], "runtime")) {
        CHECK_CUDA(cudaDeviceReset());
    } else {
        int dev = 0;
        CHECK_CUDA(cudaGetDevice(&dev));
        const PrimaryResetFn reset = (PrimaryResetFn)dlsym(RTLD_DEFAULT, "cuDevicePrimaryCtxReset_v2");
        CHECK(reset != NULL, "cuDevicePrimaryCtxReset_v2 not found");
        CHECK(reset((CUdevice)dev) == CUDA_SUCCESS, "cuDevicePrimaryCtxReset_v2 failed");
    }
    IbpshimTransferTotals a, b;
    CHECK(totals(&a) == 0, "totals");
    /* The registration, stream and buffers are gone with the context; the memory is the
     * application's still.  It takes other weights (twice the old ones) and is registered again. */
    for (size_t i = 0; i + 4 <= n; i += 4) {
        float v;
        memcpy(&v, host + i, 4);
        v *= 2.0f;
        memcpy(host + i, &v, 4);
    }
    trip_open(&t, host, n);
    /* More copies, and more time, than the compressor took to take the region up before. */
    const double until = preload_now() + 1.0;
    int copies = 0;
    while (copies < 20 || preload_now() < until) {
        preload_trip(&t);
        copies++;
        usleep(10000);
    }
    CHECK(totals(&b) == 0, "totals");
    CHECK(b.compressed_in == a.compressed_in, "%llu bytes went compressed after the reset",
          (unsigned long long)(b.compressed_in - a.compressed_in));
    CHECK_CUDA(cudaFree(t.dev));
    CHECK_CUDA(cudaStreamDestroy(t.w.s));
    CHECK_CUDA(cudaHostUnregister(host));
    free(t.back);
    munmap(host, n);
    printf("device_reset: ok (%s: %d copies after the reset checked)\n", argv[1], copies);
    return 0;
}
