/* SPDX-License-Identifier: MIT
 * ibpshim: harness app: repeated async H2D copies of pinned buffers, whole and partial, with host
 * writes between them; every byte is read back and checked. */
#include "tests/apps/harness.h"

/* Mirrors what the device buffer must hold after the copies issued so far. */
typedef struct Run {
    uint8_t *host;   /* pinned source */
    uint8_t *model;  /* expected device contents */
    uint8_t *back;   /* pinned read-back */
    void *dev;
    size_t n;
    cudaStream_t stream;
    unsigned long long copies, bytes;
} Run;

static void h2d(Run *r, size_t dst_off, size_t src_off, size_t len, enum cudaMemcpyKind kind)
{
    APP_CHECK(cudaMemcpyAsync((uint8_t *)r->dev + dst_off, r->host + src_off, len, kind, r->stream));
    memcpy(r->model + dst_off, r->host + src_off, len);
    r->copies++;
    r->bytes += len;
}

static int verify(Run *r, const char *what)
{
    APP_CHECK(cudaMemcpyAsync(r->back, r->dev, r->n, cudaMemcpyDeviceToHost, r->stream));
    APP_CHECK(cudaStreamSynchronize(r->stream));
    return app_compare(r->back, r->model, r->n, what);
}

static int run_loop(Run *r, int iterations, uint64_t seed)
{
    uint64_t state = seed | 1;
    app_fill(r->host, r->n, seed);
    for (int it = 0; it < iterations; it++) {
        char what[96];
        /* The same, unchanged buffer again: the case a compressing copy path caches. */
        h2d(r, 0, 0, r->n, it % 2 ? cudaMemcpyDefault : cudaMemcpyHostToDevice);
        snprintf(what, sizeof(what), "iteration %d whole buffer", it);
        if (verify(r, what))
            return 1;

        /* Host writes to a few ranges (the stream is idle: verify synchronized it), then queue
         * partial copies at odd offsets, some landing at a different device offset, before one sync. */
        for (int k = 0; k < 5; k++) {
            const size_t off = (size_t)(app_next(&state) % r->n) | 1;
            const size_t max = r->n - off;
            const size_t len = max ? 1 + (size_t)(app_next(&state) % (max < 70000 ? max : 70000)) : 0;
            if (!len)
                continue;
            app_fill(r->host + off, len, app_next(&state));
            h2d(r, off, off, len, k % 2 ? cudaMemcpyDefault : cudaMemcpyHostToDevice);
        }
        const size_t len = r->n / 3 + 1;
        const size_t dst = r->n - len - 3, src = 5;
        h2d(r, dst, src, len, cudaMemcpyHostToDevice);
        h2d(r, 1, 0, 1, cudaMemcpyHostToDevice);
        snprintf(what, sizeof(what), "iteration %d partial copies", it);
        if (verify(r, what))
            return 1;

        /* A write to one byte in every page between two whole copies. */
        for (size_t off = (size_t)it; off < r->n; off += 4096)
            r->host[off] ^= 0x5a;
    }
    return 0;
}

static int run_with(const char *label, int use_host_alloc, unsigned flags, size_t n, int iterations,
                    uint64_t seed, unsigned long long *copies, unsigned long long *bytes)
{
    Run r = {.n = n};
    if (use_host_alloc)
        APP_CHECK(cudaHostAlloc((void **)&r.host, n, flags));
    else
        APP_CHECK(cudaMallocHost((void **)&r.host, n));
    APP_CHECK(cudaMallocHost((void **)&r.back, n));
    APP_CHECK(cudaMalloc(&r.dev, n));
    APP_CHECK(cudaStreamCreate(&r.stream));
    r.model = malloc(n);
    if (!r.model)
        app_fail("out of host memory");
    /* Device memory starts undefined: make it defined in the model and on the device. */
    memset(r.model, 0, n);
    APP_CHECK(cudaMemset(r.dev, 0, n));
    const int bad = run_loop(&r, iterations, seed);
    if (bad)
        fprintf(stderr, "%s: with %s\n", app_name, label);
    *copies += r.copies;
    *bytes += r.bytes;
    free(r.model);
    APP_CHECK(cudaStreamDestroy(r.stream));
    APP_CHECK(cudaFree(r.dev));
    APP_CHECK(cudaFreeHost(r.back));
    APP_CHECK(cudaFreeHost(r.host));
    return bad;
}

int main(int argc, char **argv)
{
    size_t n = 4u << 20;
    int iterations = 4;
    app_start("copy_loop", argc, argv, &n, &iterations);
    unsigned long long copies = 0, bytes = 0;
    int bad = 0;
    bad |= run_with("cudaMallocHost", 0, 0, n, iterations, 11, &copies, &bytes);
    bad |= run_with("cudaHostAlloc(Default)", 1, cudaHostAllocDefault, n + 13, iterations, 12, &copies, &bytes);
    bad |= run_with("cudaHostAlloc(Portable|Mapped)", 1, cudaHostAllocPortable | cudaHostAllocMapped, n - 5,
                    iterations, 13, &copies, &bytes);
    if (bad)
        return APP_EXIT_FAIL;
    printf("copy_loop: OK %d iterations x 3 allocators, %zu bytes, %llu H2D copies, %llu bytes checked\n",
           iterations, n, copies, bytes);
    return APP_EXIT_OK;
}
