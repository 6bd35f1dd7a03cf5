/* SPDX-License-Identifier: MIT
 * ibpshim: harness app: pinned and registered buffers are freed and allocated again (often at the
 * same address) with new contents; what arrives must always be the new contents. */
#include "tests/apps/harness.h"

static unsigned long long bytes;

static int send_twice(const uint8_t *host, void *dev, uint8_t *back, size_t n, cudaStream_t s, const char *what)
{
    int bad = 0;
    for (int k = 0; k < 2 && !bad; k++) {
        APP_CHECK(cudaMemcpyAsync(dev, host, n, cudaMemcpyHostToDevice, s));
        APP_CHECK(cudaMemcpyAsync(back, dev, n, cudaMemcpyDeviceToHost, s));
        APP_CHECK(cudaStreamSynchronize(s));
        bytes += n;
        bad |= app_compare(back, host, n, what);
    }
    return bad;
}

int main(int argc, char **argv)
{
    size_t n = 4u << 20;
    int iterations = 4;
    app_start("free_realloc", argc, argv, &n, &iterations);
    cudaStream_t s;
    uint8_t *back = NULL;
    APP_CHECK(cudaStreamCreate(&s));
    APP_CHECK(cudaMallocHost((void **)&back, n + 4096));
    int bad = 0, reused = 0;
    void *last_pinned = NULL;
    char what[96];
    for (int it = 0; it < iterations && !bad; it++) {
        /* Same size every other round so the allocator can hand the same range back. */
        const size_t size = it % 2 ? n : n - 4096 + (size_t)it;
        uint8_t *pinned = NULL;
        void *dev = NULL;
        APP_CHECK(cudaHostAlloc((void **)&pinned, size, cudaHostAllocDefault));
        APP_CHECK(cudaMalloc(&dev, size));
        reused += pinned == last_pinned;
        last_pinned = pinned;
        app_fill(pinned, size, 5000 + (uint64_t)it);
        snprintf(what, sizeof(what), "cudaHostAlloc round %d", it);
        bad |= send_twice(pinned, dev, back, size, s, what);
        APP_CHECK(cudaFreeHost(pinned));

        /* malloc + register + unregister + free, then again with other contents. */
        for (int k = 0; k < 2 && !bad; k++) {
            uint8_t *plain = malloc(size);
            if (!plain)
                app_fail("out of host memory");
            app_fill(plain, size, 7000 + (uint64_t)(it * 2 + k));
            APP_CHECK(cudaHostRegister(plain, size, cudaHostRegisterDefault));
            snprintf(what, sizeof(what), "registered round %d.%d", it, k);
            bad |= send_twice(plain, dev, back, size, s, what);
            APP_CHECK(cudaHostUnregister(plain));
            free(plain);
        }
        APP_CHECK(cudaFree(dev));
    }
    APP_CHECK(cudaFreeHost(back));
    APP_CHECK(cudaStreamDestroy(s));
    if (bad)
        return APP_EXIT_FAIL;
    printf("free_realloc: OK %d rounds, %zu bytes, %d pinned addresses reused, %llu bytes checked\n", iterations,
           n, reused, bytes);
    return APP_EXIT_OK;
}
