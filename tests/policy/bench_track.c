/* SPDX-License-Identifier: MIT
 * ibpshim: microbenchmarks of write tracking (first write, scan per GiB) and registry lookups. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "policy/registry.h"
#include "policy/track.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

typedef struct BenchRegion {
    char *mem;
    size_t len;
    IbpRegion *region;
    IbpTracker *tracker;
} BenchRegion;

static int bench_open(BenchRegion *b, size_t len, IbpTrackBackend backend)
{
    b->len = len;
    b->mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b->mem == MAP_FAILED)
        return -errno;
    memset(b->mem, 1, len); /* populated, like pinned memory */
    const int64_t id = ibp_registry_add(b->mem, len, IBP_REGION_PINNED_ALLOC, 0, &b->region);
    if (id < 0)
        return (int)id;
    IbpTrackBackend got;
    const int rc = ibp_track_region(b->region, backend, &got);
    if (rc)
        return rc;
    b->tracker = ibp_region_tracker(b->region);
    return 0;
}

static void bench_close(BenchRegion *b)
{
    ibp_registry_remove(b->mem);
    ibp_region_put(&b->region);
    munmap(b->mem, b->len);
}

/* Cost of the first write to each page after arming: the fault (mprotect) or
 * the kernel's async write-protect resolution (uffd). */
static void first_write(IbpTrackBackend backend, size_t len, int reps)
{
    BenchRegion b;
    if (bench_open(&b, len, backend) != 0) {
        printf("first-write %-8s: unavailable\n", ibp_track_backend_name(backend));
        return;
    }
    const size_t ps = ibp_track_page_size(), np = len / ps;
    double v[16];
    for (int r = 0; r < reps; r++) {
        ibp_tracker_arm(b.tracker);
        const double t0 = now_s();
        for (size_t p = 0; p < np; p++)
            b.mem[p * ps] = (char)r;
        v[r] = (now_s() - t0) / (double)np * 1e9;
    }
    printf("first-write %-8s: %8.0f ns/page  (%zu pages, median of %d)\n", ibp_track_backend_name(backend),
           median(v, reps), np, reps);
    bench_close(&b);
}

/* Query with rearm over the whole region: clean (nothing written) and with
 * every 64th page written (reports and re-protects those). */
static void scan(IbpTrackBackend backend, size_t len, int reps)
{
    BenchRegion b;
    if (bench_open(&b, len, backend) != 0) {
        printf("scan        %-8s: unavailable\n", ibp_track_backend_name(backend));
        return;
    }
    const size_t ps = ibp_track_page_size(), np = len / ps;
    uint64_t *const bm = calloc(np / 64 + 1, sizeof *bm);
    double clean[16], sparse[16];
    ibp_tracker_arm(b.tracker);
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        const int64_t n0 = ibp_tracker_query(b.tracker, b.mem, len, IBP_TRACK_QUERY_REARM, bm, np);
        clean[r] = now_s() - t0;
        for (size_t p = 0; p < np; p += 64)
            b.mem[p * ps] = (char)r;
        t0 = now_s();
        const int64_t n1 = ibp_tracker_query(b.tracker, b.mem, len, IBP_TRACK_QUERY_REARM, bm, np);
        sparse[r] = now_s() - t0;
        if (n0 != 0 || n1 != (int64_t)((np + 63) / 64))
            printf("  unexpected counts %lld %lld\n", (long long)n0, (long long)n1);
    }
    const double gib = (double)len / (double)(1ull << 30);
    printf("scan        %-8s: %8.3f ms/GiB clean, %8.3f ms/GiB with 1/64 pages written (%zu MiB)\n",
           ibp_track_backend_name(backend), median(clean, reps) * 1e3 / gib, median(sparse, reps) * 1e3 / gib,
           len >> 20);
    free(bm);
    bench_close(&b);
}

static void lookups(int nregions, long iters)
{
    const uintptr_t lo = (uintptr_t)1 << 40;
    for (int i = 0; i < nregions; i++)
        ibp_registry_add((void *)(lo + (uintptr_t)i * 0x400000), 0x200000, 0, 0, NULL);
    uint64_t x = 88172645463325252ull;
    long hits = 0;
    double t0 = now_s();
    for (long i = 0; i < iters; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        IbpRegion *r;
        const uintptr_t a = lo + (uintptr_t)(x % (uint64_t)nregions) * 0x400000 + (x >> 40) % 0x100000;
        if (ibp_registry_lookup((void *)a, 4096, &r) == 0) {
            hits++;
            ibp_region_put(&r);
        }
    }
    const double hit_ns = (now_s() - t0) / (double)iters * 1e9;
    t0 = now_s();
    for (long i = 0; i < iters; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        IbpRegion *r;
        const uintptr_t a = lo + (uintptr_t)(x % (uint64_t)nregions) * 0x400000 + 0x300000;
        if (ibp_registry_lookup((void *)a, 64, &r) == 0)
            ibp_region_put(&r);
    }
    const double miss_ns = (now_s() - t0) / (double)iters * 1e9;
    printf("lookup      %5d regions: %6.1f ns hit (+ref/put), %6.1f ns miss  (%ld hits)\n", nregions, hit_ns,
           miss_ns, hits);
    for (int i = 0; i < nregions; i++)
        ibp_registry_remove((void *)(lo + (uintptr_t)i * 0x400000));
}

int main(int argc, char **argv)
{
    const size_t mib = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 1024;
    const size_t len = mib << 20;
    const char *why = NULL;
    const int uffd = ibp_track_uffd_available(&why);
    printf("ibpshim policy bench: region %zu MiB, page %zu B, uffd %s (%s)\n", mib, ibp_track_page_size(),
           uffd ? "available" : "unavailable", why);
    const size_t fw_len = len < (256u << 20) ? len : (256u << 20);
    first_write(IBP_TRACK_UFFD, fw_len, 5);
    first_write(IBP_TRACK_MPROTECT, fw_len, 5);
    scan(IBP_TRACK_UFFD, len, 5);
    scan(IBP_TRACK_MPROTECT, len, 5);
    lookups(16, 5000000);
    lookups(1024, 5000000);
    return 0;
}
