/* SPDX-License-Identifier: MIT
 * ibpshim: time to build a region's shadow (plan + encode with the compressor's threads + publish)
 * and to plan a copy of it (tracker query + pieces), on float32 weights.  The slab comes from
 * aligned_alloc here (the shim's is pinned), so publishing includes its page faults. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "ibpshim/codec.h"
#include "policy/registry.h"
#include "policy/shadow.h"
#include "policy/track.h"
#include "tests/policy/bench_util.h"

int main(int argc, char **argv)
{
    const size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 256;
    const size_t n = mib << 20;
    uint8_t *mem = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return 1;
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < n; i += 4) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        const float v = (float)(((double)(x >> 11) / 9007199254740992.0 - 0.5) * 0.1);
        memcpy(mem + i, &v, 4);
    }
    const IbpShadowOps ops = bench_ops;
    IbpRegion *region = NULL;
    if (ibp_registry_add(mem, n, IBP_REGION_PINNED_ALLOC, 0, &region) < 0 ||
        ibp_track_region(region, IBP_TRACK_AUTO, NULL))
        return 1;
    IbpTracker *tracker = ibp_region_tracker(region);
    printf("shadow build of %zu MiB of float32 weights (backend %s, codec %s)\n", mib,
           ibp_track_backend_name(ibp_tracker_backend(tracker)), ibp_codec_backend());
    /* Each thread count twice: the second build reuses the staging buffer the first one kept. */
    for (unsigned run = 0; run < 4; run++) {
        const unsigned threads = 1u + run / 2u;
        ibp_tracker_arm(tracker);
        const double t0 = now_s();
        IbpCodecPlan *plan = NULL;
        IbpShadow *sh = NULL;
        double ratio = 0;
        const IbpCodecPlanOptions opts = {.threads = threads}; /* as the engine plans */
        if (ibp_codec_plan_create(mem, n, &opts, &plan) || ibp_shadow_create(&ops, mem, n, &plan, &sh))
            return 1;
        const double t1 = now_s();
        if (ibp_shadow_build(sh, tracker, threads, 0.98, &ratio))
            return 1;
        const double t2 = now_s();
        IbpPiece pieces[64];
        uint64_t ticket = 0;
        const double t3 = now_s();
        const int np = ibp_shadow_plan(sh, tracker, 0, n, 0, pieces, 64, &ticket);
        const double t4 = now_s();
        if (np > 0)
            ibp_shadow_plan_end(sh, ticket, NULL);
        printf("  %u thread(s), %s staging: plan %.1f ms, encode+publish %.1f ms = %.2f GB/s, ratio %.4f; "
               "planning a copy of all of it %.3f ms (%d piece(s))\n",
               threads, run ? "kept" : "fresh", (t1 - t0) * 1e3, (t2 - t1) * 1e3, (double)n / (t2 - t1) / 1e9,
               ratio, (t4 - t3) * 1e3, np);
        ibp_shadow_destroy(&sh);
    }
    ibp_region_put(&region);
    ibp_registry_remove(mem);
    munmap(mem, n);
    return 0;
}
