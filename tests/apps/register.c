/* SPDX-License-Identifier: MIT
 * ibpshim: harness app: malloc'd memory pinned with cudaHostRegister (aligned and not), copied
 * repeatedly, rewritten, unregistered and copied again as pageable memory. */
#include "tests/apps/harness.h"

static unsigned long long copies, bytes;

static int round_trip(uint8_t *host, void *dev, uint8_t *back, size_t n, cudaStream_t s, const char *what)
{
    APP_CHECK(cudaMemcpyAsync(dev, host, n, cudaMemcpyHostToDevice, s));
    APP_CHECK(cudaMemcpyAsync(back, dev, n, cudaMemcpyDeviceToHost, s));
    APP_CHECK(cudaStreamSynchronize(s));
    copies++;
    bytes += n;
    return app_compare(back, host, n, what);
}

/* Registers [base + offset, + n) with flags and runs the copy loop over it. */
static int run_case(uint8_t *base, size_t offset, size_t n, unsigned flags, int iterations, uint64_t seed)
{
    uint8_t *const host = base + offset;
    uint8_t *back = NULL;
    void *dev = NULL;
    cudaStream_t s;
    int bad = 0;
    char what[128];
    APP_CHECK(cudaHostRegister(host, n, flags));
    if (flags & cudaHostRegisterMapped) {
        void *mapped = NULL;
        APP_CHECK(cudaHostGetDevicePointer(&mapped, host, 0));
        if (!mapped)
            app_fail("cudaHostGetDevicePointer returned NULL for mapped registered memory");
    }
    APP_CHECK(cudaMallocHost((void **)&back, n));
    APP_CHECK(cudaMalloc(&dev, n));
    APP_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    app_fill(host, n, seed);
    for (int it = 0; it < iterations && !bad; it++) {
        snprintf(what, sizeof(what), "registered at offset %zu flags %#x iteration %d", offset, flags, it);
        bad |= round_trip(host, dev, back, n, s, what);
        /* Rewrite a stripe, as a reused staging buffer would be. */
        const size_t off = (size_t)it * 8191 % n, len = n - off < 100000 ? n - off : 100000;
        app_fill(host + off, len, seed + (uint64_t)it + 1);
    }
    APP_CHECK(cudaHostUnregister(host));
    /* The same bytes, now pageable, must still arrive. */
    app_fill(host, n / 2, seed ^ 0xabcdef);
    snprintf(what, sizeof(what), "after cudaHostUnregister at offset %zu", offset);
    bad |= round_trip(host, dev, back, n, s, what);
    APP_CHECK(cudaStreamDestroy(s));
    APP_CHECK(cudaFree(dev));
    APP_CHECK(cudaFreeHost(back));
    return bad;
}

int main(int argc, char **argv)
{
    size_t n = 4u << 20;
    int iterations = 4;
    app_start("register", argc, argv, &n, &iterations);
    int bad = 0;

    uint8_t *plain = malloc(n + 64);
    if (!plain)
        app_fail("out of host memory");
    bad |= run_case(plain, 0, n, cudaHostRegisterDefault, iterations, 21);
    bad |= run_case(plain, 3, n - 7, cudaHostRegisterPortable, iterations, 22); /* not page aligned */
    free(plain);

    void *aligned = NULL;
    if (posix_memalign(&aligned, 4096, n))
        app_fail("posix_memalign failed");
    bad |= run_case(aligned, 0, n, cudaHostRegisterPortable | cudaHostRegisterMapped, iterations, 23);
    /* Registering the same memory twice is refused, and unregistering it twice too. */
    APP_CHECK(cudaHostRegister(aligned, n, cudaHostRegisterDefault));
    if (cudaHostRegister((uint8_t *)aligned + 4096, 4096, 0) != cudaErrorHostMemoryAlreadyRegistered)
        app_fail("overlapping cudaHostRegister was not refused with cudaErrorHostMemoryAlreadyRegistered");
    APP_CHECK(cudaHostUnregister(aligned));
    if (cudaHostUnregister(aligned) != cudaErrorHostMemoryNotRegistered)
        app_fail("second cudaHostUnregister was not refused with cudaErrorHostMemoryNotRegistered");
    (void)cudaGetLastError();
    free(aligned);

    if (bad)
        return APP_EXIT_FAIL;
    printf("register: OK %d iterations x 3 registrations, %zu bytes, %llu round trips, %llu bytes checked\n",
           iterations, n, copies, bytes);
    return APP_EXIT_OK;
}
