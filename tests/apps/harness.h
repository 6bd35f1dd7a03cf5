/* SPDX-License-Identifier: MIT
 * ibpshim: helpers shared by the harness apps: argument parsing, data patterns, byte checks. */
#ifndef IBP_TESTS_APPS_HARNESS_H
#define IBP_TESTS_APPS_HARNESS_H

#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Exit codes: 0 every byte arrived, 1 a mismatch or a failed call, 77 no device (test skipped). */
#define APP_EXIT_OK 0
#define APP_EXIT_FAIL 1
#define APP_EXIT_SKIP 77

static const char *app_name = "app";

#define APP_CHECK(call)                                                                             \
    do {                                                                                            \
        const cudaError_t app_err = (call);                                                         \
        if (app_err != cudaSuccess) {                                                               \
            fprintf(stderr, "%s: FAIL: %s at %s:%d returned %s (%s)\n", app_name, #call, __FILE__,  \
                    __LINE__, cudaGetErrorName(app_err), cudaGetErrorString(app_err));              \
            exit(APP_EXIT_FAIL);                                                                    \
        }                                                                                           \
    } while (0)

static inline void app_fail(const char *what)
{
    fprintf(stderr, "%s: FAIL: %s\n", app_name, what);
    exit(APP_EXIT_FAIL);
}

/* Parses "[bytes [iterations]]" and exits 77 when there is no device.  Defaults stay CI-sized. */
static inline void app_start(const char *name, int argc, char **argv, size_t *bytes, int *iterations)
{
    app_name = name;
    if (argc > 1) {
        char *end = NULL;
        const unsigned long long v = strtoull(argv[1], &end, 0);
        if (*end != '\0' || v < 64) {
            fprintf(stderr, "usage: %s [bytes >= 64 [iterations >= 1]]\n", name);
            exit(APP_EXIT_FAIL);
        }
        *bytes = (size_t)v;
    }
    if (argc > 2) {
        char *end = NULL;
        const long v = strtol(argv[2], &end, 0);
        if (*end != '\0' || v < 1) {
            fprintf(stderr, "usage: %s [bytes >= 64 [iterations >= 1]]\n", name);
            exit(APP_EXIT_FAIL);
        }
        *iterations = (int)v;
    }
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || (e == cudaSuccess && count == 0)) {
        printf("%s: SKIP: no CUDA device (%s)\n", name, cudaGetErrorName(e));
        exit(APP_EXIT_SKIP);
    }
    APP_CHECK(e);
}

static inline uint64_t app_next(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    return x;
}

/* Fills n bytes with data like a training tensor: 4 KiB runs of float32 values in [1, 2) (the
 * invariant bits a compressor can find) alternating with runs of random bytes; the tail may be odd. */
static inline void app_fill(void *dst, size_t n, uint64_t seed)
{
    uint8_t *const p = dst;
    uint64_t state = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    for (size_t i = 0; i < n; i += 4) {
        const uint64_t r = app_next(&state);
        uint32_t w = (uint32_t)r;
        if ((i / 4096) % 2 == 0)
            w = 0x3F800000u | (w & 0x007FFFFFu);
        const size_t k = n - i < 4 ? n - i : 4;
        memcpy(p + i, &w, k);
    }
}

/* Returns 0 if got equals want, else reports the first differing byte and the count and returns 1. */
static inline int app_compare(const void *got, const void *want, size_t n, const char *what)
{
    const uint8_t *const g = got, *const w = want;
    if (!memcmp(g, w, n))
        return 0;
    size_t first = n, count = 0;
    for (size_t i = 0; i < n; i++) {
        if (g[i] != w[i]) {
            if (first == n)
                first = i;
            count++;
        }
    }
    fprintf(stderr, "%s: FAIL: %s: %zu of %zu bytes differ, first at offset %zu (got 0x%02x, want 0x%02x)\n",
            app_name, what, count, n, first, g[first], w[first]);
    return 1;
}

#endif /* IBP_TESTS_APPS_HARNESS_H */
