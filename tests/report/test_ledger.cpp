// SPDX-License-Identifier: MIT
// ibpshim: the transfer ledger against known call sequences, under concurrency, and site capture.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "report/json.h"
#include "report/ledger.h"
#include "report/writer.h"
}

namespace
{

struct Snapshot {
    IbpLedgerSnapshot *s = nullptr;
    Snapshot()
    {
        EXPECT_EQ(ibp_ledger_snapshot(&s), 0);
    }
    ~Snapshot()
    {
        ibp_ledger_snapshot_free(&s);
    }
    const IbpLedgerRegionInfo *region(uint64_t id) const
    {
        for (size_t i = 0; i < s->region_count; i++)
            if (s->regions[i].id == id)
                return &s->regions[i];
        return nullptr;
    }
    const IbpLedgerSiteInfo *site(uint32_t id) const
    {
        for (size_t i = 0; i < s->site_count; i++)
            if (s->sites[i].id == id)
                return &s->sites[i];
        return nullptr;
    }
};

IbpLedgerRegionInfo read(const IbpLedgerRegion *r)
{
    IbpLedgerRegionInfo info;
    ibp_ledger_region_read(r, &info);
    return info;
}

} // namespace

TEST(Ledger, ReasonNamesAreStable)
{
    const char *expected[] = {"below_threshold", "not_pinned", "cold",   "stale", "incompressible",
                              "capturing",       "churn",      "budget", "error", "disabled", "slower"};
    ASSERT_EQ(sizeof(expected) / sizeof(expected[0]), (size_t)IBP_RAW_REASON_COUNT);
    for (int r = 0; r < IBP_RAW_REASON_COUNT; r++)
        EXPECT_STREQ(ibp_raw_reason_name((IbpRawReason)r), expected[r]);
    EXPECT_STREQ(ibp_raw_reason_name(IBP_RAW_REASON_COUNT), "?");
    EXPECT_STREQ(ibp_raw_reason_name((IbpRawReason)-1), "?");
}

TEST(Ledger, KnownCopySequence)
{
    static char buffer[4096];
    IbpLedgerRegion *r = ibp_ledger_region_open(buffer, sizeof(buffer), 3, IBP_SITE_UNKNOWN);
    ASSERT_NE(r, nullptr);
    // Copy 1: 1000 bytes, 800 compressed to 200, 150 stale, 50 in a tail below the threshold.
    ibp_ledger_copy(r, 1000);
    ibp_ledger_compressed(r, 800, 200);
    ibp_ledger_raw(r, IBP_RAW_STALE, 150);
    ibp_ledger_raw(r, IBP_RAW_BELOW_THRESHOLD, 50);
    // Copy 2: cold region, all raw.
    ibp_ledger_copy_raw(r, IBP_RAW_COLD, 4096);
    // Copy 3: capturing.
    ibp_ledger_copy_raw(r, IBP_RAW_CAPTURING, 10);
    // An out-of-range reason is counted as an error, not dropped.
    ibp_ledger_raw(r, (IbpRawReason)99, 7);

    const IbpLedgerRegionInfo info = read(r);
    EXPECT_EQ(info.base, (uintptr_t)buffer);
    EXPECT_EQ(info.size, sizeof(buffer));
    EXPECT_EQ(info.flags, 3u);
    EXPECT_EQ(info.site_id, IBP_SITE_UNKNOWN);
    EXPECT_FALSE(info.freed);
    EXPECT_EQ(info.totals.copies, 3u);
    EXPECT_EQ(info.totals.requested, 1000u + 4096u + 10u);
    EXPECT_EQ(info.totals.compressed_in, 800u);
    EXPECT_EQ(info.totals.compressed_out, 200u);
    EXPECT_EQ(info.totals.raw[IBP_RAW_STALE], 150u);
    EXPECT_EQ(info.totals.raw[IBP_RAW_BELOW_THRESHOLD], 50u);
    EXPECT_EQ(info.totals.raw[IBP_RAW_COLD], 4096u);
    EXPECT_EQ(info.totals.raw[IBP_RAW_CAPTURING], 10u);
    EXPECT_EQ(info.totals.raw[IBP_RAW_ERROR], 7u);
    EXPECT_EQ(info.totals.raw[IBP_RAW_NOT_PINNED], 0u);
    EXPECT_EQ(ibp_ledger_totals_raw(&info.totals), 150u + 50u + 4096u + 10u + 7u);
    EXPECT_EQ(ibp_ledger_totals_sent(&info.totals), 200u + 150u + 50u + 4096u + 10u + 7u);
    ibp_ledger_region_close(&r);
    EXPECT_EQ(r, nullptr);
    ibp_ledger_region_close(&r);
    ibp_ledger_region_close(nullptr);
}

TEST(Ledger, EventsAndShadowGauges)
{
    static char buffer[64];
    IbpLedgerRegion *r = ibp_ledger_region_open(buffer, sizeof(buffer), 0, IBP_SITE_UNKNOWN);
    ASSERT_NE(r, nullptr);
    Snapshot before;
    ibp_ledger_invalidated(r, 5);
    ibp_ledger_invalidated(r, 2);
    ibp_ledger_recompressed(r, 4);
    ibp_ledger_tracking_ns(r, 1500);
    ibp_ledger_decoded(r, 1 << 20, 20000);
    ibp_ledger_shadow(r, 100);
    ibp_ledger_shadow(r, 50);
    ibp_ledger_shadow(r, -120);
    ibp_ledger_shadow(r, 30);
    ibp_ledger_evicted(r, 20);
    ibp_ledger_planned(r, 3000, 0);
    ibp_ledger_planned(r, 40, 1);
    ibp_ledger_built(r, 90000);

    IbpLedgerRegionInfo info = read(r);
    EXPECT_EQ(info.totals.invalidations, 7u);
    EXPECT_EQ(info.totals.recompressions, 4u);
    EXPECT_EQ(info.totals.tracking_ns, 1500u);
    EXPECT_EQ(info.totals.decoded_bytes, 1u << 20);
    EXPECT_EQ(info.totals.decode_ns, 20000u);
    EXPECT_EQ(info.totals.shadow_bytes, 40u);
    EXPECT_EQ(info.totals.shadow_peak, 150u);
    EXPECT_EQ(info.totals.evictions, 1u);
    EXPECT_EQ(info.totals.evicted_bytes, 20u);
    EXPECT_EQ(info.totals.plans, 2u);
    EXPECT_EQ(info.totals.plans_reused, 1u);
    EXPECT_EQ(info.totals.plan_ns, 3040u);
    EXPECT_EQ(info.totals.builds, 1u);
    EXPECT_EQ(info.totals.build_ns, 90000u);
    {
        Snapshot after;
        EXPECT_EQ(after.s->total.shadow_bytes, before.s->total.shadow_bytes + 40);
        EXPECT_GE(after.s->total.shadow_peak, before.s->total.shadow_bytes + 150);
        EXPECT_EQ(after.s->total.invalidations, before.s->total.invalidations + 7);
        EXPECT_EQ(after.s->total.plans, before.s->total.plans + 2);
        EXPECT_EQ(after.s->total.build_ns, before.s->total.build_ns + 90000);
    }
    // Closing releases what the region still held; its peak and totals stay.
    const uint64_t id = info.id;
    ibp_ledger_region_close(&r);
    Snapshot closed;
    EXPECT_EQ(closed.s->total.shadow_bytes, before.s->total.shadow_bytes);
    const IbpLedgerRegionInfo *freed = closed.region(id);
    ASSERT_NE(freed, nullptr);
    EXPECT_TRUE(freed->freed);
    EXPECT_GE(freed->closed_ns, freed->opened_ns);
    EXPECT_EQ(freed->totals.shadow_bytes, 0u);
    EXPECT_EQ(freed->totals.shadow_peak, 150u);
    EXPECT_EQ(freed->totals.invalidations, 7u);
}

TEST(Ledger, UntrackedCopiesCountInProcessTotalsOnly)
{
    Snapshot before;
    ibp_ledger_copy_raw(nullptr, IBP_RAW_NOT_PINNED, 333);
    ibp_ledger_copy(nullptr, 100);
    ibp_ledger_raw(nullptr, IBP_RAW_DISABLED, 100);
    ibp_ledger_tracking_ns(nullptr, 9);
    Snapshot after;
    EXPECT_EQ(after.s->untracked.copies, before.s->untracked.copies + 2);
    EXPECT_EQ(after.s->untracked.requested, before.s->untracked.requested + 433);
    EXPECT_EQ(after.s->untracked.raw[IBP_RAW_NOT_PINNED], before.s->untracked.raw[IBP_RAW_NOT_PINNED] + 333);
    EXPECT_EQ(after.s->untracked.raw[IBP_RAW_DISABLED], before.s->untracked.raw[IBP_RAW_DISABLED] + 100);
    EXPECT_EQ(after.s->total.copies, before.s->total.copies + 2);
    EXPECT_EQ(after.s->total.tracking_ns, before.s->total.tracking_ns + 9);
    EXPECT_EQ(after.s->region_count, before.s->region_count);
}

TEST(Ledger, FreedRegionsBeyondTheLimitMergeIntoTheirSite)
{
    const uint32_t site = ibp_site_capture(0);
    ASSERT_NE(site, IBP_SITE_UNKNOWN);
    Snapshot before;
    const IbpLedgerSiteInfo *site_before = before.site(site);
    const uint64_t site_copies_before = site_before ? site_before->totals.copies : 0;
    const int extra = 10;
    static char buffer[16];
    for (int i = 0; i < IBP_LEDGER_FREED_KEEP + extra; i++) {
        IbpLedgerRegion *r = ibp_ledger_region_open(buffer, sizeof(buffer), 0, site);
        ASSERT_NE(r, nullptr);
        ibp_ledger_copy(r, 16);
        ibp_ledger_compressed(r, 16, 4);
        ibp_ledger_region_close(&r);
    }
    Snapshot after;
    EXPECT_GE(after.s->regions_merged, before.s->regions_merged + extra);
    const IbpLedgerSiteInfo *s = after.site(site);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->totals.copies, site_copies_before + IBP_LEDGER_FREED_KEEP + extra);
    EXPECT_EQ(s->regions_live, 0u);
    EXPECT_GE(s->regions, (uint64_t)IBP_LEDGER_FREED_KEEP + extra);
    EXPECT_EQ(after.s->total.copies, before.s->total.copies + IBP_LEDGER_FREED_KEEP + extra);
    EXPECT_EQ(after.s->total.compressed_out,
              before.s->total.compressed_out + 4u * (IBP_LEDGER_FREED_KEEP + extra));
    size_t freed_listed = 0;
    for (size_t i = 0; i < after.s->region_count; i++)
        freed_listed += after.s->regions[i].freed;
    EXPECT_LE(freed_listed, (size_t)IBP_LEDGER_FREED_KEEP);
}

TEST(Ledger, ExactTotalsWhileReportsAreWritten)
{
    constexpr int threads = 8, copies = 20000;
    static char buffers[threads][64];
    Snapshot before;
    IbpLedgerRegion *shared = ibp_ledger_region_open(buffers, sizeof(buffers), 0, IBP_SITE_UNKNOWN);
    ASSERT_NE(shared, nullptr);
    std::atomic<bool> done{false};
    std::atomic<int> reports{0};
    const int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    ASSERT_GE(null_fd, 0);
    std::thread writer([&] {
        while (!done.load()) {
            IbpLedgerSnapshot *snap = nullptr;
            ASSERT_EQ(ibp_ledger_snapshot(&snap), 0);
            IbpReportMeta meta = {};
            meta.reason = "request";
            meta.sequence = 1;
            meta.pcie_gbps = 55.5;
            IbpOut out;
            ibp_out_init(&out, null_fd);
            EXPECT_EQ(ibp_report_format_json(&out, snap, &meta), 0);
            ibp_out_init(&out, null_fd);
            EXPECT_EQ(ibp_report_format_text(&out, snap, &meta, 5), 0);
            ibp_ledger_snapshot_free(&snap);
            reports++;
        }
    });
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; t++)
        workers.emplace_back([&, t] {
            IbpLedgerRegion *own =
                ibp_ledger_region_open(buffers[t], sizeof(buffers[t]), 0, IBP_SITE_UNKNOWN);
            for (int i = 0; i < copies; i++) {
                IbpLedgerRegion *r = (i & 1) ? own : shared;
                ibp_ledger_copy(r, 100);
                ibp_ledger_compressed(r, 60, 20);
                ibp_ledger_raw(r, IBP_RAW_STALE, 40);
                ibp_ledger_shadow(r, 8);
                if (i % 1000 == 0) {
                    IbpLedgerRegion *tmp = ibp_ledger_region_open(buffers[t], 1, 0, IBP_SITE_UNKNOWN);
                    ibp_ledger_copy_raw(tmp, IBP_RAW_CHURN, 1);
                    ibp_ledger_region_close(&tmp);
                }
            }
            ibp_ledger_region_close(&own);
        });
    for (auto &w : workers)
        w.join();
    while (reports.load() < 3)
        std::this_thread::yield();
    done = true;
    writer.join();
    close(null_fd);

    const IbpLedgerRegionInfo info = read(shared);
    EXPECT_EQ(info.totals.copies, (uint64_t)threads * copies / 2);
    EXPECT_EQ(info.totals.requested, 100ull * threads * copies / 2);
    EXPECT_EQ(info.totals.shadow_bytes, 8ull * threads * copies / 2);
    Snapshot after;
    const uint64_t churn_copies = threads * (copies / 1000);
    EXPECT_EQ(after.s->total.copies - before.s->total.copies, (uint64_t)threads * copies + churn_copies);
    EXPECT_EQ(after.s->total.requested - before.s->total.requested, 100ull * threads * copies + churn_copies);
    EXPECT_EQ(after.s->total.compressed_out - before.s->total.compressed_out, 20ull * threads * copies);
    EXPECT_EQ(after.s->total.raw[IBP_RAW_STALE] - before.s->total.raw[IBP_RAW_STALE],
              40ull * threads * copies);
    EXPECT_EQ(after.s->total.raw[IBP_RAW_CHURN] - before.s->total.raw[IBP_RAW_CHURN], churn_copies);
    ibp_ledger_region_close(&shared);
}

// ---- sites ----

extern "C" __attribute__((noinline, visibility("default"))) uint32_t ibp_test_site_a(void)
{
    const uint32_t id = ibp_site_capture(0);
    __asm__ volatile("" ::: "memory"); // keeps the call from becoming a tail call
    return id;
}

extern "C" __attribute__((noinline, visibility("default"))) uint32_t ibp_test_site_b(void)
{
    const uint32_t id = ibp_site_capture(0);
    __asm__ volatile("" ::: "memory");
    return id;
}

// A hook-like wrapper: skip 1 so that frame 0 lies in whoever called it.
extern "C" __attribute__((noinline, visibility("default"))) uint32_t ibp_test_hook(void)
{
    const uint32_t id = ibp_site_capture(1);
    __asm__ volatile("" ::: "memory");
    return id;
}

extern "C" __attribute__((noinline, visibility("default"))) uint32_t ibp_test_hook_caller(void)
{
    const uint32_t id = ibp_test_hook();
    __asm__ volatile("" ::: "memory");
    return id;
}

static std::string symbol_of(uint32_t site)
{
    uintptr_t frames[IBP_SITE_MAX_DEPTH];
    const int n = ibp_site_frames(site, frames, IBP_SITE_MAX_DEPTH);
    if (n <= 0)
        return "";
    Dl_info info;
    if (!dladdr((void *)(frames[0] - 1), &info) || !info.dli_sname)
        return "?";
    return info.dli_sname;
}

// Captures n times through one call instruction: the same call path each time.
static std::vector<uint32_t> capture_repeatedly(uint32_t (*capture)(void), int n)
{
    std::vector<uint32_t> ids;
    for (int i = 0; i < n; i++)
        ids.push_back(capture());
    return ids;
}

TEST(Sites, TwoCallSitesTwoIdsSameSiteSameId)
{
    ibp_site_set_depth(8);
    const std::vector<uint32_t> a = capture_repeatedly(ibp_test_site_a, 100);
    const uint32_t count = ibp_site_count();
    const std::vector<uint32_t> b = capture_repeatedly(ibp_test_site_b, 100);
    ASSERT_NE(a[0], IBP_SITE_UNKNOWN);
    ASSERT_NE(b[0], IBP_SITE_UNKNOWN);
    EXPECT_NE(a[0], b[0]);
    for (int i = 1; i < 100; i++) {
        EXPECT_EQ(a[i], a[0]);
        EXPECT_EQ(b[i], b[0]);
    }
    EXPECT_EQ(ibp_site_count(), count + 1);
    EXPECT_EQ(symbol_of(a[0]), "ibp_test_site_a");
    EXPECT_EQ(symbol_of(b[0]), "ibp_test_site_b");
    EXPECT_EQ(symbol_of(ibp_test_hook_caller()), "ibp_test_hook_caller");
}

TEST(Sites, ConcurrentCapturesAreStablePerCallPath)
{
    ibp_site_set_depth(8);
    const uint32_t a = capture_repeatedly(ibp_test_site_a, 1)[0];
    std::vector<std::thread> threads;
    std::atomic<int> mismatches{0};
    for (int t = 0; t < 6; t++)
        threads.emplace_back([&] {
            const std::vector<uint32_t> ids = capture_repeatedly(ibp_test_site_b, 2000);
            for (const uint32_t id : ids)
                if (id != ids[0] || id == IBP_SITE_UNKNOWN || id == a)
                    mismatches++;
        });
    for (auto &t : threads)
        t.join();
    EXPECT_EQ(mismatches.load(), 0);
}

TEST(Sites, DepthBoundsAndUnknownSite)
{
    ibp_site_set_depth(0);
    EXPECT_EQ(ibp_test_site_a(), IBP_SITE_UNKNOWN);
    ibp_site_set_depth(2);
    const uint32_t shallow = ibp_test_site_a();
    ASSERT_NE(shallow, IBP_SITE_UNKNOWN);
    uintptr_t frames[IBP_SITE_MAX_DEPTH];
    EXPECT_LE(ibp_site_frames(shallow, frames, IBP_SITE_MAX_DEPTH), 2);
    EXPECT_GE(ibp_site_frames(shallow, frames, IBP_SITE_MAX_DEPTH), 1);
    ibp_site_set_depth(1000);
    const uint32_t deep = ibp_test_site_a();
    EXPECT_NE(deep, shallow);
    EXPECT_LE(ibp_site_frames(deep, frames, IBP_SITE_MAX_DEPTH), IBP_SITE_MAX_DEPTH);
    ibp_site_set_depth(8);
    EXPECT_EQ(ibp_site_frames(IBP_SITE_UNKNOWN, frames, IBP_SITE_MAX_DEPTH), 0);
    EXPECT_EQ(ibp_site_frames(ibp_site_count() + 1, frames, IBP_SITE_MAX_DEPTH), -ENOENT);
    // A region given an id that was never handed out lands on the unknown site.
    static char buffer[8];
    IbpLedgerRegion *r = ibp_ledger_region_open(buffer, sizeof(buffer), 0, ibp_site_count() + 100);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(read(r).site_id, IBP_SITE_UNKNOWN);
    ibp_ledger_region_close(&r);
}
