/* SPDX-License-Identifier: MIT
 * ibpshim: how long the compressor takes to compress many hot regions of one allocation site, as a
 * framework's pinned blocks of weights are: N regions of M MiB of float32 weights (each its own
 * values, all of one kind), each copied twice, then compressor passes until every one is
 * compressed.  PLAN_REUSE as [policy] plan_reuse: negative plans every region afresh.
 * Usage: bench_policy_engine [REGIONS [MIB [THREADS [PLAN_REUSE]]]] */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "policy/engine.h"
#include "tests/policy/bench_util.h"

/* Gaussian-like weights of scale 0.05 (sum of uniforms), a different stream per region. */
static void fill_weights(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = 0x9e3779b97f4a7c15ull ^ (seed * 0xbf58476d1ce4e5b9ull);
    for (size_t i = 0; i + 4 <= n; i += 4) {
        double s = 0;
        for (int k = 0; k < 4; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            s += (double)(x >> 11) / 9007199254740992.0;
        }
        const float v = (float)((s - 2.0) * 0.0866);
        memcpy(p + i, &v, 4);
    }
}

static int all_compressed(uint8_t **mem, int n, size_t size)
{
    for (int i = 0; i < n; i++) {
        IbpCopyPlan plan;
        const int c = ibp_policy_plan_h2d(mem[i], size, &plan);
        if (c)
            ibp_policy_plan_end(&plan, NULL);
        if (!c)
            return 0;
    }
    return 1;
}

int main(int argc, char **argv)
{
    const int regions = argc > 1 ? atoi(argv[1]) : 16;
    const size_t mib = argc > 2 ? strtoul(argv[2], NULL, 10) : 64;
    const unsigned threads = argc > 3 ? (unsigned)atoi(argv[3]) : 2u;
    const double plan_reuse = argc > 4 ? atof(argv[4]) : 0.005;
    const size_t size = mib << 20;
    if (regions < 1 || regions > 256 || !mib || !threads)
        return 2;
    printf("%d regions of %zu MiB of float32 weights from one allocation site, %u compressor threads, "
           "plan_reuse %g\n",
           regions, mib, threads, plan_reuse);
    {
        const IbpPolicyParams p = {
            .min_bytes = 1u << 20,
            .min_copies = 2,
            .min_ratio = 0.95,
            .tracking = IBP_TRACK_AUTO,
            .compressor_threads = threads,
            .plan_reuse = plan_reuse,
            .churn_limit = 3,
            .churn_window_ns = 10000000000ull,
            .manual = 1,
            .ops = bench_ops,
        };
        if (ibp_policy_start(&p))
            return 1;
        uint8_t **mem = calloc((size_t)regions, sizeof(*mem));
        for (int i = 0; i < regions; i++) {
            mem[i] = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (mem[i] == MAP_FAILED)
                return 1;
            fill_weights(mem[i], size, (uint64_t)(i + 1) * 7919u);
            if (ibp_policy_on_alloc(mem[i], size, IBP_REGION_PINNED_ALLOC, 0x5eed, NULL) != 1)
                return 1;
            for (int c = 0; c < 2; c++)
                (void)all_compressed(&mem[i], 1, size); /* copies that make it hot */
        }
        IbpPolicyStats before;
        ibp_policy_stats(&before);
        const double t0 = now_s();
        int passes = 0;
        while (!all_compressed(mem, regions, size) && passes < 100000) {
            ibp_policy_run_pending();
            passes++;
        }
        const double secs = now_s() - t0;
        IbpPolicyStats after;
        ibp_policy_stats(&after);
        printf("  all compressed in %.3f s (%.2f GB/s of regions), shadows %.4f of the regions, %llu plans "
               "made, "
               "%llu reused, %d passes\n",
               secs, (double)size * regions / secs / 1e9,
               (double)after.shadow_bytes / ((double)size * regions),
               (unsigned long long)(after.plans_made - before.plans_made),
               (unsigned long long)(after.plans_reused - before.plans_reused), passes);
        for (int i = 0; i < regions; i++) {
            ibp_policy_on_free(mem[i]);
            munmap(mem[i], size);
        }
        free(mem);
        ibp_policy_stop();
    }
    return 0;
}
