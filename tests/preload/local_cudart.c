/* SPDX-License-Identifier: MIT
 * ibpshim: the shim finds libcudart when it was loaded RTLD_LOCAL (not visible to RTLD_NEXT). */
#include <dlfcn.h>
#include <stdio.h>

#include "ibpshim/ibpshim.h"

typedef int (*CoreFn)(size_t n);
typedef size_t (*CountsFn)(IbpshimCallCount *out, size_t n);

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH/liblocal_cudart_core.so\n", argv[0]);
        return 2;
    }
    const CountsFn counts = (CountsFn)dlsym(RTLD_DEFAULT, "ibpshim_call_counts");
    if (!counts) {
        fprintf(stderr, "local_cudart: libibpshim.so is not preloaded\n");
        return 1;
    }
    void *core = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!core) {
        fprintf(stderr, "local_cudart: %s\n", dlerror());
        return 1;
    }
    if (dlsym(RTLD_DEFAULT, "cudaGetDeviceCount")) {
        fprintf(stderr, "local_cudart: libcudart is globally visible; the test would prove nothing\n");
        return 1;
    }
    typedef int (*CountFn)(void);
    const CountFn device_count = (CountFn)dlsym(core, "core_device_count");
    if (device_count && device_count() == 0) {
        printf("local_cudart: no CUDA device, skipped\n");
        return 77;
    }
    const CoreFn round_trip = (CoreFn)dlsym(core, "core_round_trip");
    if (!round_trip) {
        fprintf(stderr, "local_cudart: %s\n", dlerror());
        return 1;
    }
    if (round_trip(65537) != 0) {
        fprintf(stderr, "local_cudart: bytes differ after the round trip\n");
        return 1;
    }
    IbpshimCallCount c[IBPSHIM_CALL_KIND_COUNT];
    counts(c, IBPSHIM_CALL_KIND_COUNT);
    if (c[IBPSHIM_CALL_HOST_ALLOC].calls != 1 || c[IBPSHIM_CALL_MEMCPY_ASYNC_H2D].calls != 1 ||
        c[IBPSHIM_CALL_MEMCPY_D2H].calls != 1 || c[IBPSHIM_CALL_FREE_HOST].calls != 1) {
        fprintf(stderr, "local_cudart: calls from the RTLD_LOCAL library were not all intercepted\n");
        return 1;
    }
    printf("local_cudart: ok (hooks reached a libcudart loaded RTLD_LOCAL)\n");
    return 0;
}
