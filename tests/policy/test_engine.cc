// SPDX-License-Identifier: MIT
// ibpshim: the policy engine end to end on the CPU: hotness, compression, staleness, device
// writes, churn and the shadow budget.  Every planned copy is decoded and compared with the
// source bytes at that moment.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

extern "C" {
#include "config/config.h"
#include "ibpshim/codec.h"
#include "policy/engine.h"
#include "policy/registry.h"
}

namespace {

struct Fence {
    std::atomic<int> done{0};
    std::atomic<int> released{0};
};

int t_alloc(void *, size_t size, void **host)
{
    *host = aligned_alloc(16, (size + 15) & ~(size_t)15);
    return *host ? 0 : -ENOMEM;
}
void t_free(void *, void *host, size_t)
{
    free(host);
}
int t_done(void *, void *f)
{
    return static_cast<Fence *>(f)->done.load();
}
void t_wait(void *, void *f)
{
    while (!static_cast<Fence *>(f)->done.load())
        std::this_thread::yield();
}
void t_release(void *, void *f)
{
    static_cast<Fence *>(f)->released.fetch_add(1);
}

constexpr size_t kMiB = 1u << 20;

void start_engine()
{
    IbpPolicyParams p = {};
    p.min_bytes = kMiB;
    p.min_copies = 2;
    p.min_ratio = 0.98;
    p.max_shadow_bytes = std::getenv("ENGINE_TEST_BUDGET") ? strtoull(std::getenv("ENGINE_TEST_BUDGET"), nullptr, 10)
                                                            : 0;
    p.tracking = std::getenv("ENGINE_TEST_MPROTECT") ? IBP_TRACK_MPROTECT : IBP_TRACK_AUTO;
    p.compressor_threads = 2;
    p.plan_reuse = 0.005; /* the configuration's default */
    p.churn_limit = 2;
    p.churn_window_ns = 10ull * 1000 * 1000 * 1000;
    p.block_bytes = 64 * 1024;
    // selector_flags = on or auto ([policy] selector_flags), else off
    const char *flags = std::getenv("ENGINE_TEST_SELECTOR_FLAGS");
    p.selector_flags = flags != nullptr;
    p.selector_flags_min_ratio = flags && !strcmp(flags, "auto") ? IBP_SELECTOR_FLAGS_AUTO_RATIO : 0.0;
    p.selector_flags_min_copy =
        flags && !strcmp(flags, "auto") ? 2 * kMiB : 0u; // the tests' regions are small
    p.min_run =
        std::getenv("ENGINE_TEST_MIN_RUN") ? strtoull(std::getenv("ENGINE_TEST_MIN_RUN"), nullptr, 10) : 0;
    p.manual = 1;
    p.ops = {t_alloc, t_free, t_done, t_wait, t_release, nullptr};
    const int err = ibp_policy_start(&p);
    ASSERT_TRUE(err == 0 || err == -EALREADY);
}

void fill_gaussian(uint8_t *p, size_t n, uint32_t seed, float scale = 0.02f)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.f, scale);
    for (size_t i = 0; i + 4 <= n; i += 4) {
        const float v = d(rng);
        memcpy(p + i, &v, 4);
    }
}

struct Region {
    explicit Region(size_t n, uint32_t seed) : size(n)
    {
        mem = static_cast<uint8_t *>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        fill_gaussian(mem, n, seed);
    }
    ~Region()
    {
        ibp_policy_on_free(mem);
        munmap(mem, size);
    }
    uint8_t *mem;
    size_t size;
};

// Plans a copy and checks the bytes a transfer would deliver.  Returns 1 when some of it went
// compressed.
int copy_and_check(const uint8_t *src, size_t n, IbpCopyWhy *why = nullptr, Fence *fence = nullptr)
{
    IbpCopyPlan plan;
    const int compressed = ibp_policy_plan_h2d(src, n, &plan);
    if (why)
        *why = plan.why;
    if (!compressed)
        return 0;
    std::vector<uint8_t> out(n);
    EXPECT_EQ(ibp_shadow_decode_pieces(plan.shadow, plan.pieces, (size_t)plan.npieces, out.data()), 0);
    EXPECT_EQ(plan.pieces[0].off, (size_t)(src - (const uint8_t *)plan.region_base));
    EXPECT_EQ(memcmp(out.data(), src, n), 0);
    ibp_policy_plan_end(&plan, fence);
    return 1;
}

// Plans a copy of [src, src + n) and says whether a compressed piece covers any of the region's
// bytes [lo, hi) (offsets in the region).
bool sends_compressed(const uint8_t *src, size_t n, size_t lo, size_t hi)
{
    IbpCopyPlan plan;
    bool hit = false;
    if (ibp_policy_plan_h2d(src, n, &plan) != 1)
        return false;
    for (int k = 0; k < plan.npieces; k++)
        hit = hit || (plan.pieces[k].kind == IBP_PIECE_COMPRESSED && plan.pieces[k].off < hi &&
                      lo < plan.pieces[k].off + plan.pieces[k].len);
    ibp_policy_plan_end(&plan, nullptr);
    return hit;
}

// Registers r as a pinned allocation, copies it twice (hot) and runs the compressor.
void register_and_compress(const Region &r)
{
    ASSERT_EQ(ibp_policy_on_alloc(r.mem, r.size, IBP_REGION_PINNED_ALLOC, 0, nullptr), 1);
    copy_and_check(r.mem, r.size);
    copy_and_check(r.mem, r.size);
    ibp_policy_run_pending();
}

TEST(Engine, BudgetEvictsLeastRecentlyUsed)
{
    if (!std::getenv("ENGINE_TEST_BUDGET"))
        GTEST_SKIP() << "runs in the policy_engine_budget registration (ENGINE_TEST_BUDGET set)";
    start_engine();
    Region a(2 * kMiB, 11), b(2 * kMiB, 12);
    ASSERT_EQ(ibp_policy_on_alloc(a.mem, a.size, IBP_REGION_PINNED_ALLOC, 0, nullptr), 1);
    ASSERT_EQ(ibp_policy_on_alloc(b.mem, b.size, IBP_REGION_PINNED_ALLOC, 0, nullptr), 1);
    copy_and_check(a.mem, a.size);
    copy_and_check(a.mem, a.size);
    ibp_policy_run_pending();
    EXPECT_EQ(copy_and_check(a.mem, a.size), 1);
    // b becomes hot after a was last used: compressing b must evict a.
    copy_and_check(b.mem, b.size);
    copy_and_check(b.mem, b.size);
    ibp_policy_run_pending();
    IbpCopyWhy why;
    EXPECT_EQ(copy_and_check(b.mem, b.size, &why), 1);
    EXPECT_EQ(copy_and_check(a.mem, a.size, &why), 0);
    EXPECT_EQ(why, IBP_COPY_BUDGET);
    IbpPolicyStats st;
    ibp_policy_stats(&st);
    EXPECT_GE(st.regions_evicted, 1u);
    EXPECT_LE(st.shadow_bytes, strtoull(std::getenv("ENGINE_TEST_BUDGET"), nullptr, 10));
}

TEST(Engine, SmallCopiesAndUnknownPointersGoRaw)
{
    start_engine();
    std::vector<uint8_t> heap(4 * kMiB);
    IbpCopyWhy why;
    EXPECT_EQ(copy_and_check(heap.data(), 4096, &why), 0);
    EXPECT_EQ(why, IBP_COPY_BELOW_THRESHOLD);
    EXPECT_EQ(copy_and_check(heap.data(), 2 * kMiB, &why), 0);
    EXPECT_EQ(why, IBP_COPY_NOT_TRACKED);
    EXPECT_STREQ(ibp_copy_why_name(IBP_COPY_NOT_TRACKED), "not_pinned");
    Region small(512 * 1024, 1);
    EXPECT_EQ(ibp_policy_on_alloc(small.mem, small.size, IBP_REGION_PINNED_ALLOC, 0, nullptr), 0);
}

TEST(Engine, HotRegionsCompressAndStayExact)
{
    start_engine();
    Region r(6 * kMiB + 4096, 2);
    ASSERT_EQ(ibp_policy_on_alloc(r.mem, r.size, IBP_REGION_PINNED_ALLOC, 0, nullptr), 1);
    IbpCopyWhy why;
    EXPECT_EQ(copy_and_check(r.mem, r.size, &why), 0);
    EXPECT_EQ(why, IBP_COPY_COLD);
    EXPECT_EQ(copy_and_check(r.mem, r.size, &why), 0); // second copy makes it hot
    EXPECT_GE(ibp_policy_run_pending(), 1);
    EXPECT_EQ(copy_and_check(r.mem, r.size, &why), 1);
    EXPECT_EQ(why, IBP_COPY_COMPRESSED);
    // A slice at an odd offset, then writes of every kind the application may do.
    EXPECT_EQ(copy_and_check(r.mem + 12345, 3 * kMiB + 7), 1);
    r.mem[100] = 1;
    memset(r.mem + 2 * kMiB, 7, 100000);
    EXPECT_EQ(copy_and_check(r.mem, r.size), 1);
    memset(r.mem + 3 * kMiB, 9, kMiB);
    EXPECT_EQ(copy_and_check(r.mem + 3 * kMiB, kMiB, &why), 0);
    EXPECT_EQ(why, IBP_COPY_STALE);
}

// A copy whose compressed pieces all went raw as slower than a plain copy: the next
// IBP_POLICY_SLOWER_SKIP copies pass without a plan (no write-tracking query), and the one after
// is planned and marked to be timed.  Writes made while copies pass unplanned are still seen.
TEST(Engine, CopiesMeasuredSlowerPassUnplannedThenProbe)
{
    start_engine();
    Region r(2 * kMiB, 21);
    register_and_compress(r);
    IbpCopyPlan plan;
    ASSERT_EQ(ibp_policy_plan_h2d(r.mem, r.size, &plan), 1);
    EXPECT_EQ(plan.probe, 0);
    plan.slower = 1; // as the sender reports it
    ibp_policy_plan_end(&plan, nullptr);
    for (unsigned i = 0; i < IBP_POLICY_SLOWER_SKIP; i++) {
        if (i == 3)
            memset(r.mem + kMiB, 5, 4096); // written while nothing queries the tracker
        EXPECT_EQ(ibp_policy_plan_h2d(r.mem, r.size, &plan), 0) << "copy " << i;
        EXPECT_EQ(plan.why, IBP_COPY_SLOWER);
    }
    EXPECT_STREQ(ibp_copy_why_name(IBP_COPY_SLOWER), "slower");
    ASSERT_EQ(ibp_policy_plan_h2d(r.mem, r.size, &plan), 1);
    EXPECT_EQ(plan.probe, 1);
    bool stale_piece = false;
    for (int k = 0; k < plan.npieces; k++)
        stale_piece = stale_piece || (plan.pieces[k].kind == IBP_PIECE_RAW && plan.pieces[k].off <= kMiB &&
                                      kMiB < plan.pieces[k].off + plan.pieces[k].len);
    EXPECT_TRUE(stale_piece) << "the write made while copies passed unplanned was not seen";
    ibp_policy_plan_end(&plan, nullptr); // went compressed: no more skipping
    EXPECT_EQ(copy_and_check(r.mem, r.size), 1);
    ASSERT_EQ(ibp_policy_plan_h2d(r.mem, r.size, &plan), 1);
    EXPECT_EQ(plan.probe, 0);
    ibp_policy_plan_end(&plan, nullptr);
}

// Whether the plan of the region holding src writes flagged selectors; -1 when nothing of it goes
// compressed.
int plans_flagged_selectors(const uint8_t *src, size_t n)
{
    IbpCopyPlan plan;
    if (ibp_policy_plan_h2d(src, n, &plan) != 1)
        return -1;
    IbpCodecPlanInfo info;
    ibp_codec_plan_info(ibp_shadow_codec_plan(plan.shadow), &info);
    ibp_policy_plan_end(&plan, nullptr);
    return info.selector_flags;
}

TEST(Engine, SelectorFlagsWhereTheCopyTakesTheTime)
{
    const char *mode = std::getenv("ENGINE_TEST_SELECTOR_FLAGS");
    if (!mode)
        GTEST_SKIP() << "run with ENGINE_TEST_SELECTOR_FLAGS=on or auto";
    start_engine();
    // Weights (ratio near 0.8) and small counts (int32 below 64, ratio near 0.2).
    Region weights(2 * kMiB, 11), counts(2 * kMiB, 12);
    std::mt19937 rng(5);
    for (size_t i = 0; i + 4 <= counts.size; i += 4) {
        const int32_t v = (int32_t)(rng() % 64);
        memcpy(counts.mem + i, &v, 4);
    }
    // And weights only ever copied a MiB at a time.
    Region pieces(4 * kMiB, 13);
    register_and_compress(weights);
    register_and_compress(counts);
    ASSERT_EQ(ibp_policy_on_alloc(pieces.mem, pieces.size, IBP_REGION_PINNED_ALLOC, 0, nullptr), 1);
    copy_and_check(pieces.mem, kMiB);
    copy_and_check(pieces.mem + kMiB, kMiB);
    ibp_policy_run_pending();
    EXPECT_EQ(copy_and_check(weights.mem, weights.size), 1);
    EXPECT_EQ(copy_and_check(counts.mem, counts.size), 1);
    EXPECT_EQ(copy_and_check(pieces.mem + 2 * kMiB, kMiB), 1);
    EXPECT_EQ(plans_flagged_selectors(weights.mem, weights.size), 1);
    const int on = strcmp(mode, "auto") != 0;
    // auto: the decode of a well compressed region is what the copy waits for; no rewrite pass
    EXPECT_EQ(plans_flagged_selectors(counts.mem, counts.size), on) << mode;
    // auto: short copies wait for the rewrite pass's launch more than they gain in bytes
    EXPECT_EQ(plans_flagged_selectors(pieces.mem, kMiB), on) << mode;
}

TEST(Engine, DeviceWritesKeepBlocksStaleUntilTheyLand)
{
    start_engine();
    Region r(4 * kMiB, 3);
    ASSERT_NO_FATAL_FAILURE(register_and_compress(r));
    Fence d2h;
    ibp_policy_on_d2h(r.mem + kMiB, kMiB, &d2h);
    IbpCopyWhy why;
    // While the copy is in flight the recompressor may not make those blocks valid.
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    ibp_policy_run_pending();
    ibp_policy_run_pending();
    EXPECT_EQ(copy_and_check(r.mem + kMiB, kMiB, &why), 0);
    EXPECT_EQ(why, IBP_COPY_STALE);
    // The "DMA" lands, behind the tracker's back (as a device write does).
    d2h.done = 1;
    EXPECT_EQ(copy_and_check(r.mem + kMiB, kMiB, &why), 0);
    EXPECT_EQ(d2h.released.load(), 1);
    EXPECT_EQ(copy_and_check(r.mem, r.size), 1);
}

// A device write's fence is kept until a plan sees it land; many in flight at once (a batch of
// copies into one buffer) must neither block the caller nor lose one.
TEST(Engine, ManyDeviceWritesInFlightNeverBlock)
{
    start_engine();
    Region r(4 * kMiB, 31);
    ASSERT_NO_FATAL_FAILURE(register_and_compress(r));
    constexpr int kWrites = 200;
    std::vector<Fence> fences(kWrites);
    // Half land at once (their entries are dropped when room is needed), half stay in flight.
    for (int i = 0; i < kWrites; i += 2)
        fences[i].done = 1;
    std::atomic<bool> returned{false};
    std::thread writer([&] {
        for (int i = 0; i < kWrites; i++)
            ibp_policy_on_d2h(r.mem + (size_t)i * 4096, 100, &fences[i]);
        returned = true;
    });
    for (int ms = 0; ms < 5000 && !returned; ms++)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const bool blocked = !returned;
    if (blocked)
        for (auto &f : fences) // unblock it before failing
            f.done = 1;
    writer.join();
    ASSERT_FALSE(blocked) << "noting device writes waited for earlier ones to land";
    // Every byte under a write still in flight goes raw.
    for (int i = 1; i < kWrites; i += 2)
        EXPECT_FALSE(sends_compressed(r.mem, r.size, (size_t)i * 4096, (size_t)i * 4096 + 100))
            << "write " << i << " in flight, yet its bytes went compressed";
    for (auto &f : fences)
        f.done = 1;
    copy_and_check(r.mem, r.size);
    for (int i = 0; i < kWrites; i++)
        EXPECT_EQ(fences[i].released.load(), 1) << "fence " << i;
}

// One device write across more than 64 adjacent regions reaches every one of them.
TEST(Engine, ADeviceWriteAcrossManyRegionsMarksThemAll)
{
    start_engine();
    constexpr int kRegions = 70;
    const size_t each = kMiB;
    Region all(kRegions * each, 32);
    for (int i = 0; i < kRegions; i++) {
        uint8_t *const p = all.mem + (size_t)i * each;
        ASSERT_EQ(ibp_policy_on_alloc(p, each, IBP_REGION_PINNED_ALLOC, 0, nullptr), 1);
        copy_and_check(p, each);
        copy_and_check(p, each);
    }
    while (ibp_policy_run_pending() > 0) {
    }
    for (int i = 0; i < kRegions; i++)
        ASSERT_EQ(copy_and_check(all.mem + (size_t)i * each, each), 1) << "region " << i << " not compressed";
    Fence landed;
    landed.done = 1;
    // From the middle of the first region to the middle of the last (the "DMA" writes nothing:
    // what is checked is that every region takes those bytes as stale).
    ibp_policy_on_d2h(all.mem + each / 2, (kRegions - 1) * each, &landed);
    for (int i = 0; i < kRegions; i++) {
        const size_t lo = i == 0 ? each / 2 : 0, hi = i == kRegions - 1 ? each / 2 : each;
        EXPECT_FALSE(sends_compressed(all.mem + (size_t)i * each, each, lo, hi))
            << "region " << i << " would send its old bytes";
    }
    EXPECT_EQ(landed.released.load(), 1);
    for (int i = 1; i < kRegions; i++)
        ibp_policy_on_free(all.mem + (size_t)i * each); // the first goes with `all`
}

TEST(Engine, FencesOfCopiesAreReleasedOnFree)
{
    start_engine();
    Fence f;
    {
        Region r(2 * kMiB, 4);
        ASSERT_EQ(ibp_policy_on_alloc(r.mem, r.size, IBP_REGION_PINNED_ALLOC, 0, nullptr), 1);
        copy_and_check(r.mem, r.size);
        copy_and_check(r.mem, r.size);
        ibp_policy_run_pending();
        ASSERT_EQ(copy_and_check(r.mem, r.size, nullptr, &f), 1);
        f.done = 1; // the free below waits for it
    }
    EXPECT_EQ(f.released.load(), 1);
}

TEST(Engine, ChurningRegionsStopBeingTracked)
{
    start_engine();
    Region r(2 * kMiB, 5);
    ASSERT_NO_FATAL_FAILURE(register_and_compress(r));
    IbpCopyWhy why = IBP_COPY_COMPRESSED;
    for (int round = 0; round < 4 && why != IBP_COPY_CHURN; round++) {
        fill_gaussian(r.mem, r.size / 2, 100 + round); // a recycled batch buffer: new data, same kind
        copy_and_check(r.mem, r.size, &why);
        ibp_policy_run_pending(); // counts the rewrite
        std::this_thread::sleep_for(std::chrono::milliseconds(110));
        ibp_policy_run_pending(); // stable again: recompress
        copy_and_check(r.mem, r.size, &why);
    }
    EXPECT_EQ(why, IBP_COPY_CHURN);
    IbpPolicyStats st;
    ibp_policy_stats(&st);
    EXPECT_GE(st.regions_churned, 1u);
}

TEST(Engine, TablesWithAFewRowsUpdatedStayCompressed)
{
    start_engine();
    Region r(2 * kMiB, 6);
    ASSERT_NO_FATAL_FAILURE(register_and_compress(r));
    IbpPolicyStats before;
    ibp_policy_stats(&before);
    for (int round = 0; round < 5; round++) {
        // An embedding table between epochs: a few rows of one block rewritten, soon after the
        // last (re)compression, every epoch.
        fill_gaussian(r.mem + (size_t)round * 300 * 1024, 512, 200 + round);
        IbpCopyWhy why = IBP_COPY_COMPRESSED;
        EXPECT_EQ(copy_and_check(r.mem, r.size, &why), 1) << "round " << round << ", why " << why;
        ibp_policy_run_pending();
        std::this_thread::sleep_for(std::chrono::milliseconds(110));
        ibp_policy_run_pending(); // stable again: recompress
        EXPECT_EQ(copy_and_check(r.mem, r.size, &why), 1) << "round " << round << ", why " << why;
    }
    IbpPolicyStats after;
    ibp_policy_stats(&after);
    EXPECT_EQ(after.regions_churned, before.regions_churned);
}

// Bytes of [src, src + n) a copy planned now would send compressed (the plan is ended at once).
size_t compressed_bytes(const uint8_t *src, size_t n)
{
    IbpCopyPlan plan;
    if (!ibp_policy_plan_h2d(src, n, &plan))
        return 0;
    size_t bytes = 0;
    for (int i = 0; i < plan.npieces; i++)
        bytes += plan.pieces[i].kind == IBP_PIECE_COMPRESSED ? plan.pieces[i].len : 0;
    ibp_policy_plan_end(&plan, nullptr);
    return bytes;
}

// A table streamed in slices without pause, a row written before every epoch and each epoch's
// transfers still in flight when the next is planned: the region is never quiet, yet each
// written block comes back compressed once it was left alone for a while.
TEST(Engine, StreamedTablesGetTheirRowsBackWhileCopied)
{
    start_engine();
    const size_t bs = 64 * 1024, nblocks = 64, slices = 4;
    std::vector<std::unique_ptr<Fence>> in_flight; // outlives the region, whose free waits for them
    Region r(nblocks * bs, 8);
    ASSERT_NO_FATAL_FAILURE(register_and_compress(r));
    ASSERT_EQ(compressed_bytes(r.mem, r.size), r.size);
    std::mt19937 rng(3);
    const auto t0 = std::chrono::steady_clock::now();
    int epochs = 0;
    while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(900)) {
        fill_gaussian(r.mem + (rng() % nblocks) * bs + 4096, 512, 300 + epochs);
        std::vector<std::unique_ptr<Fence>> now;
        for (size_t k = 0; k < slices; k++) {
            now.emplace_back(new Fence);
            const size_t len = r.size / slices;
            copy_and_check(r.mem + k * len, len, nullptr, now.back().get());
        }
        for (auto &f : in_flight)
            f->done = 1; // the last epoch's transfers land while this one's are enqueued
        ibp_policy_run_pending();
        for (auto &f : now)
            in_flight.push_back(std::move(f));
        epochs++;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (auto &f : in_flight)
        f->done = 1;
    // About 70 ms of written blocks (50 ms untouched, one pass of the compressor) may be stale.
    const size_t got = compressed_bytes(r.mem, r.size);
    EXPECT_GE(got, r.size * 3 / 4) << epochs << " epochs, " << got / bs << " of " << nblocks << " blocks compressed";
}

// Starts the engine and registers r as a pinned allocation; returns the statistics before.
IbpPolicyStats start_with_region(const Region &r)
{
    start_engine();
    IbpPolicyStats before;
    ibp_policy_stats(&before);
    EXPECT_EQ(ibp_policy_on_alloc(r.mem, r.size, IBP_REGION_PINNED_ALLOC, 0, nullptr), 1);
    return before;
}

// r was not compressed since `before` and its writes were never tracked.
void expect_never_compressed(const Region &r, const IbpPolicyStats &before)
{
    IbpPolicyStats after;
    ibp_policy_stats(&after);
    EXPECT_EQ(after.regions_compressed, before.regions_compressed);
    IbpRegion *region = nullptr;
    ASSERT_EQ(ibp_registry_lookup(r.mem, r.size, &region), 0);
    EXPECT_EQ(ibp_region_tracker(region), nullptr); // never armed
    ibp_region_put(&region);
}

TEST(Engine, BuffersGivenNewContentBeforeEveryCopyStayCold)
{
    // A batch buffer refilled before every copy from the start is never compressed, so it is never
    // write-tracked either; once its content stops changing it is.
    Region r(2 * kMiB, 13);
    const IbpPolicyStats before = start_with_region(r);
    for (uint32_t step = 0; step < 6; step++) {
        fill_gaussian(r.mem, r.size, 400 + step);
        IbpCopyWhy why;
        EXPECT_EQ(copy_and_check(r.mem, r.size, &why), 0);
        EXPECT_EQ(why, IBP_COPY_COLD);
        ibp_policy_run_pending();
    }
    expect_never_compressed(r, before);
    // Left alone, it becomes hot and compressed; the copies between fingerprints (at most 64,
    // fewer here) delay that, never what arrives.
    int copies = 0;
    while (copies < 80 && !copy_and_check(r.mem, r.size)) {
        ibp_policy_run_pending();
        copies++;
    }
    EXPECT_LT(copies, 80);
    EXPECT_EQ(copy_and_check(r.mem, r.size), 1);
}

TEST(Engine, BuffersCyclingThroughAFewBatchesStayCold)
{
    // A batch buffer given one of three batches before every copy (never the one of the copy
    // before): fingerprints taken copies apart match now and then; that never makes it hot.
    Region r(2 * kMiB, 17);
    const IbpPolicyStats before = start_with_region(r);
    std::vector<std::vector<uint8_t>> batches(3);
    for (size_t b = 0; b < batches.size(); b++) {
        fill_gaussian(r.mem, r.size, 500 + (uint32_t)b);
        batches[b].assign(r.mem, r.mem + r.size);
    }
    uint32_t x = 12345, last = 0;
    for (uint32_t step = 0; step < 400; step++) {
        x = x * 1103515245u + 12345u;
        const uint32_t b = (last + 1 + (x >> 16) % 2) % 3;
        last = b;
        std::memcpy(r.mem, batches[b].data(), r.size);
        IbpCopyWhy why;
        ASSERT_EQ(copy_and_check(r.mem, r.size, &why), 0) << "step " << step;
        ASSERT_EQ(why, IBP_COPY_COLD) << "step " << step;
        ibp_policy_run_pending();
    }
    expect_never_compressed(r, before);
}

TEST(Engine, RegionsRewrittenBeforeEveryCopyStopBeingTracked)
{
    // A batch buffer refilled before each copy, faster than the region can stay unwritten long
    // enough to be recompressed: every copy pays a tracker query and sends nothing compressed.
    // After churn_limit such copies in a row the region is no longer tracked.
    start_engine();
    Region r(2 * kMiB, 11);
    ASSERT_NO_FATAL_FAILURE(register_and_compress(r));
    ASSERT_EQ(copy_and_check(r.mem, r.size), 1);
    IbpCopyWhy why = IBP_COPY_COMPRESSED;
    int copies = 0;
    for (uint32_t step = 0; step < 8 && why != IBP_COPY_CHURN; step++, copies++) {
        fill_gaussian(r.mem, r.size, 200 + step); // same kind of data: it would fit the plan
        EXPECT_EQ(copy_and_check(r.mem, r.size, &why), 0);
        ibp_policy_run_pending();
    }
    EXPECT_EQ(why, IBP_COPY_CHURN);
    EXPECT_LE(copies, 3); // churn_limit (2) rewritten copies, then one that finds it untracked
    // A region written once and then copied again and again keeps being compressed.
    Region w(2 * kMiB, 12);
    ASSERT_NO_FATAL_FAILURE(register_and_compress(w));
    fill_gaussian(w.mem, w.size, 300);
    for (int i = 0; i < 4; i++) {
        copy_and_check(w.mem, w.size, &why);
        ibp_policy_run_pending();
    }
    EXPECT_EQ(why, IBP_COPY_STALE);
    std::this_thread::sleep_for(std::chrono::milliseconds(110));
    ibp_policy_run_pending(); // stable: recompressed
    EXPECT_EQ(copy_and_check(w.mem, w.size, &why), 1);
}

TEST(Engine, RegionsRewrittenDuringEveryBuildStopBeingTracked)
{
    // A transient batch buffer: the application writes new content all the time, of a scale the
    // last plan does not fit, so every build finds its blocks stale when it ends and none can be
    // recompressed.  Without counting that as churn the region would be planned and rebuilt
    // forever, costing CPU and never a compressed copy.
    start_engine();
    Region r(4 * kMiB, 6);
    ASSERT_EQ(ibp_policy_on_alloc(r.mem, r.size, IBP_REGION_PINNED_ALLOC, 0, nullptr), 1);
    copy_and_check(r.mem, r.size);
    copy_and_check(r.mem, r.size);
    std::atomic<bool> stop{false};
    std::thread writer([&] {
        for (uint32_t seed = 1000; !stop.load(); seed++)
            fill_gaussian(r.mem, r.size, seed, seed % 2 ? 0.02f : 3e4f);
    });
    IbpCopyWhy why = IBP_COPY_COLD;
    for (int pass = 0; pass < 40 && why != IBP_COPY_CHURN; pass++) {
        ibp_policy_run_pending();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        IbpCopyPlan plan;
        if (ibp_policy_plan_h2d(r.mem, r.size, &plan))
            ibp_policy_plan_end(&plan, nullptr);
        why = plan.why;
    }
    stop = true;
    writer.join();
    EXPECT_EQ(why, IBP_COPY_CHURN);
    IbpPolicyStats st;
    ibp_policy_stats(&st);
    EXPECT_GE(st.regions_churned, 1u);
}

TEST(Engine, ContentThatOutgrowsThePlanIsRebuilt)
{
    start_engine();
    Region r(2 * kMiB, 8);
    ASSERT_NO_FATAL_FAILURE(register_and_compress(r));
    // Small integers instead of floats: the old masks fit none of the new words.
    for (size_t i = 0; i < r.size; i += 4) {
        const uint32_t v = (uint32_t)(i % 97);
        memcpy(r.mem + i, &v, 4);
    }
    IbpCopyWhy why;
    EXPECT_EQ(copy_and_check(r.mem, r.size, &why), 0);
    EXPECT_EQ(why, IBP_COPY_STALE);
    ibp_policy_run_pending();
    std::this_thread::sleep_for(std::chrono::milliseconds(110));
    ibp_policy_run_pending(); // recompression fails for every block: rebuild
    ibp_policy_run_pending(); // the rebuild
    EXPECT_EQ(copy_and_check(r.mem, r.size, &why), 1);
}

// Rewrites every 64 KiB block of `blocks` with weights a million times larger: their exponent
// bits are not the ones the plan's masks keep, so they no longer fit their slots, yet a plan made
// for both kinds still compresses every block.
void write_misfits(uint8_t *mem, const std::vector<size_t> &blocks)
{
    for (const size_t b : blocks) {
        fill_gaussian(mem + b * 64 * 1024, 64 * 1024, (uint32_t)(1000 + b));
        for (size_t i = 0; i < 64 * 1024; i += 4) {
            float v;
            memcpy(&v, mem + b * 64 * 1024 + i, 4);
            v *= 1048576.0f;
            memcpy(mem + b * 64 * 1024 + i, &v, 4);
        }
    }
}

// A third of the blocks rewritten so that none fits its slot: under half the region is stale,
// but no run of valid blocks is min_run long any more, so nothing could go compressed again
// until a rebuild.
TEST(Engine, MisfitsThatBreakEveryRunAreRebuilt)
{
    if (!std::getenv("ENGINE_TEST_MIN_RUN"))
        GTEST_SKIP() << "runs in the policy_engine_min_run registration (ENGINE_TEST_MIN_RUN set)";
    start_engine();
    Region r(2 * kMiB, 11);
    ASSERT_NO_FATAL_FAILURE(register_and_compress(r));
    IbpCopyWhy why;
    ASSERT_EQ(copy_and_check(r.mem, r.size, &why), 1);
    IbpPolicyStats before;
    ibp_policy_stats(&before);
    std::vector<size_t> blocks;
    for (size_t b = 2; b < 32; b += 3)
        blocks.push_back(b);
    write_misfits(r.mem, blocks);
    EXPECT_EQ(copy_and_check(r.mem, r.size, &why), 0);
    ibp_policy_run_pending(); // sees the writes
    std::this_thread::sleep_for(std::chrono::milliseconds(110));
    ibp_policy_run_pending(); // recompression: every stale block is too big for its slot: rebuild
    ibp_policy_run_pending(); // the rebuild
    EXPECT_EQ(copy_and_check(r.mem, r.size, &why), 1);
    IbpPolicyStats after;
    ibp_policy_stats(&after);
    EXPECT_EQ(after.regions_compressed, before.regions_compressed + 1);
}

// One misfit block in the middle leaves long runs on both sides: no rebuild, the rest of the
// region still goes compressed, and the block is not re-encoded at every tick.
TEST(Engine, OneMisfitKeepsThePlan)
{
    if (!std::getenv("ENGINE_TEST_MIN_RUN"))
        GTEST_SKIP() << "runs in the policy_engine_min_run registration (ENGINE_TEST_MIN_RUN set)";
    start_engine();
    Region r(2 * kMiB, 12);
    ASSERT_NO_FATAL_FAILURE(register_and_compress(r));
    IbpCopyWhy why;
    ASSERT_EQ(copy_and_check(r.mem, r.size, &why), 1);
    IbpPolicyStats before;
    ibp_policy_stats(&before);
    write_misfits(r.mem, {16});
    EXPECT_EQ(copy_and_check(r.mem, r.size, &why), 1);
    ibp_policy_run_pending();
    std::this_thread::sleep_for(std::chrono::milliseconds(110));
    for (int i = 0; i < 3; i++)
        ibp_policy_run_pending();
    IbpPolicyStats after;
    ibp_policy_stats(&after);
    EXPECT_EQ(after.regions_compressed, before.regions_compressed);
    EXPECT_EQ(copy_and_check(r.mem, r.size, &why), 1);
}

TEST(Engine, SharedAndFileMappingsAreNeverCompressed)
{
    start_engine();
    const size_t n = 2 * kMiB;
    // Shared memory: another process (or a second mapping) could write it unseen.
    auto *shared = static_cast<uint8_t *>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(shared, MAP_FAILED);
    memset(shared, 0, n);
    ASSERT_EQ(ibp_policy_on_alloc(shared, n, IBP_REGION_REGISTERED, 0, nullptr), 1);
    // A private mapping of a file: pages not yet copied show the file's later changes.
    FILE *f = tmpfile();
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(ftruncate(fileno(f), (off_t)n), 0);
    auto *file = static_cast<uint8_t *>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE, fileno(f), 0));
    ASSERT_NE(file, MAP_FAILED);
    ASSERT_EQ(ibp_policy_on_alloc(file, n, IBP_REGION_REGISTERED, 0, nullptr), 1);
    // Private anonymous memory registered the same way is fine.
    Region ok(n, 13);
    ASSERT_EQ(ibp_policy_on_alloc(ok.mem, ok.size, IBP_REGION_REGISTERED, 0, nullptr), 1);
    for (int i = 0; i < 3; i++) {
        copy_and_check(shared, n);
        copy_and_check(file, n);
        copy_and_check(ok.mem, ok.size);
    }
    ibp_policy_run_pending();
    IbpCopyWhy why;
    EXPECT_EQ(copy_and_check(shared, n, &why), 0);
    EXPECT_EQ(why, IBP_COPY_UNTRACKABLE);
    EXPECT_EQ(copy_and_check(file, n, &why), 0);
    EXPECT_EQ(why, IBP_COPY_UNTRACKABLE);
    EXPECT_EQ(copy_and_check(ok.mem, ok.size, &why), 1);
    ibp_policy_on_free(shared);
    ibp_policy_on_free(file);
    munmap(shared, n);
    munmap(file, n);
    fclose(f);
}

// Pinned mapped by name (cudaHostAllocMapped, cudaHostRegisterMapped): kernels may write it through
// its device pointer, unseen, so it stays raw unless track_mapped says otherwise (off here).
TEST(Engine, MappedRegionsAreNeverCompressed)
{
    start_engine();
    Region alloc(2 * kMiB, 21), registered(2 * kMiB, 22), plain(2 * kMiB, 23);
    ASSERT_EQ(
        ibp_policy_on_alloc(alloc.mem, alloc.size, IBP_REGION_PINNED_ALLOC | IBP_REGION_MAPPED, 0, nullptr),
        1);
    ASSERT_EQ(ibp_policy_on_alloc(registered.mem, registered.size, IBP_REGION_REGISTERED | IBP_REGION_MAPPED,
                                  0, nullptr),
              1);
    ASSERT_EQ(
        ibp_policy_on_alloc(plain.mem, plain.size, IBP_REGION_PINNED_ALLOC | IBP_REGION_PORTABLE, 0, nullptr),
        1);
    for (int i = 0; i < 3; i++) {
        copy_and_check(alloc.mem, alloc.size);
        copy_and_check(registered.mem, registered.size);
        copy_and_check(plain.mem, plain.size);
    }
    ibp_policy_run_pending();
    IbpCopyWhy why;
    EXPECT_EQ(copy_and_check(alloc.mem, alloc.size, &why), 0);
    EXPECT_EQ(why, IBP_COPY_UNTRACKABLE);
    EXPECT_EQ(copy_and_check(registered.mem, registered.size, &why), 0);
    EXPECT_EQ(why, IBP_COPY_UNTRACKABLE);
    EXPECT_EQ(copy_and_check(plain.mem, plain.size, &why), 1);
}

// Regions of one allocation site: the second holds the same kind of floats and gets the first's
// plan without a search; the third holds small integers, which that plan does not fit, and is
// planned afresh; after it, integers and floats each find their plan among the site's.  Every
// copy is still checked byte for byte.
TEST(Engine, RegionsOfOneSiteReuseItsPlanWhereItFits)
{
    start_engine();
    IbpPolicyStats before;
    ibp_policy_stats(&before);
    const uint64_t site = 0x517e;
    Region a(4 * kMiB, 21), b(4 * kMiB, 22), c(4 * kMiB, 23), d(4 * kMiB, 24), e(4 * kMiB, 25);
    for (Region *r : {&c, &d})
        for (size_t i = 0; i < r->size; i += 4) {
            const uint32_t v = (uint32_t)(i % 97);
            memcpy(r->mem + i, &v, 4);
        }
    for (Region *r : {&a, &b, &c, &d, &e}) {
        ASSERT_EQ(ibp_policy_on_alloc(r->mem, r->size, IBP_REGION_PINNED_ALLOC, site, nullptr), 1);
        copy_and_check(r->mem, r->size);
        copy_and_check(r->mem, r->size);
        ibp_policy_run_pending();
        EXPECT_EQ(copy_and_check(r->mem, r->size), 1);
    }
    IbpPolicyStats after;
    ibp_policy_stats(&after);
    EXPECT_EQ(after.plans_made - before.plans_made, 2u);
    EXPECT_EQ(after.plans_reused - before.plans_reused, 3u);
}

TEST(Engine, RandomDataIsLeftRaw)
{
    start_engine();
    Region r(2 * kMiB, 6);
    std::mt19937_64 rng(9);
    for (size_t i = 0; i < r.size; i += 8) {
        const uint64_t v = rng();
        memcpy(r.mem + i, &v, 8);
    }
    ASSERT_NO_FATAL_FAILURE(register_and_compress(r));
    IbpCopyWhy why;
    EXPECT_EQ(copy_and_check(r.mem, r.size, &why), 0);
    EXPECT_EQ(why, IBP_COPY_INCOMPRESSIBLE);
}

TEST(Engine, ThreadsCopyingWhileTheCompressorRuns)
{
    start_engine();
    Region r(8 * kMiB, 7);
    ASSERT_EQ(ibp_policy_on_alloc(r.mem, r.size, IBP_REGION_PINNED_ALLOC, 0, nullptr), 1);
    std::atomic<int> stop{0};
    std::thread comp([&] {
        while (!stop)
            ibp_policy_run_pending();
    });
    std::vector<std::thread> copiers;
    for (int t = 0; t < 3; t++)
        copiers.emplace_back([&, t] {
            std::mt19937_64 rng(t);
            for (int i = 0; i < 60; i++) {
                const size_t off = rng() % (r.size - 1);
                copy_and_check(r.mem + off, 1 + rng() % (r.size - off));
            }
        });
    for (auto &c : copiers)
        c.join();
    stop = 1;
    comp.join();
}

} // namespace
