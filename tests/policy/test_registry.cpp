/* SPDX-License-Identifier: MIT
 * ibpshim: region registry tests: containment, overlap, references, sites, concurrent lookups. */
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <iterator>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "policy/registry.h"

namespace {

/* Fake addresses: the registry never dereferences region memory. */
const void *at(uintptr_t a)
{
    return reinterpret_cast<const void *>(a);
}

struct RegistryTest : ::testing::Test {
    std::vector<uintptr_t> bases;
    int64_t add(uintptr_t base, size_t size, uint64_t site = 0)
    {
        const int64_t id = ibp_registry_add(at(base), size, IBP_REGION_PINNED_ALLOC, site, nullptr);
        if (id > 0)
            bases.push_back(base);
        return id;
    }
    void TearDown() override
    {
        for (uintptr_t b : bases)
            ibp_registry_remove(at(b));
        EXPECT_EQ(ibp_registry_count(), 0u);
    }
};

bool contains(const void *p, size_t len, uint64_t *id = nullptr)
{
    IbpRegion *r = nullptr;
    if (ibp_registry_lookup(p, len, &r) != 0)
        return false;
    if (id)
        *id = ibp_region_id(r);
    ibp_region_put(&r);
    EXPECT_EQ(r, nullptr) << "put must NULL the caller's pointer";
    return true;
}

TEST_F(RegistryTest, LookupNeedsFullContainment)
{
    const int64_t id = add(0x100000, 0x3000);
    ASSERT_GT(id, 0);
    uint64_t got = 0;
    EXPECT_TRUE(contains(at(0x100000), 0x3000, &got));
    EXPECT_EQ(got, (uint64_t)id);
    EXPECT_TRUE(contains(at(0x100000), 0));
    EXPECT_TRUE(contains(at(0x102fff), 1));
    EXPECT_TRUE(contains(at(0x101234), 0x100));
    EXPECT_FALSE(contains(at(0x100000), 0x3001));
    EXPECT_FALSE(contains(at(0x0fffff), 1));
    EXPECT_FALSE(contains(at(0x0fffff), 2));
    EXPECT_FALSE(contains(at(0x103000), 0));
    EXPECT_FALSE(contains(at(UINTPTR_MAX - 4), 100)) << "wrapping ranges are never contained";
}

/* Many addresses in one read section: each inside a region reports that region's bounds, those
 * between, before and after regions nothing. */
TEST_F(RegistryTest, RegionsAtReportsEachAddressInARegion)
{
    std::vector<std::pair<uintptr_t, size_t>> got;
    auto collect = [](uintptr_t start, size_t size, void *arg) {
        static_cast<std::vector<std::pair<uintptr_t, size_t>> *>(arg)->emplace_back(start, size);
    };
    const uint64_t none[] = {0x100000};
    ibp_registry_regions_at(none, 1, collect, &got);
    EXPECT_TRUE(got.empty()) << "nothing registered";
    ASSERT_GT(add(0x100000, 0x3000), 0);
    ASSERT_GT(add(0x200000, 0x1000), 0);
    const uint64_t addrs[] = {0xfffff, 0x100000, 0x102fff, 0x103000, 0x1fffff, 0x200800, 0x201000, 0};
    ibp_registry_regions_at(addrs, std::size(addrs), collect, &got);
    const std::vector<std::pair<uintptr_t, size_t>> want = {
        {0x100000, 0x3000}, {0x100000, 0x3000}, {0x200000, 0x1000}};
    EXPECT_EQ(got, want);
    got.clear();
    ibp_registry_regions_at(addrs, 0, collect, &got);
    EXPECT_TRUE(got.empty());
}

TEST_F(RegistryTest, OverlapsSeesAnyByteInARegion)
{
    ASSERT_GT(add(0x500000, 0x1000), 0);
    EXPECT_TRUE(ibp_registry_overlaps(at(0x500000), 1));
    EXPECT_TRUE(ibp_registry_overlaps(at(0x4fffff), 2)) << "last byte inside";
    EXPECT_TRUE(ibp_registry_overlaps(at(0x500fff), 100)) << "first byte inside";
    EXPECT_TRUE(ibp_registry_overlaps(at(0x400000), 0x200000)) << "the whole region between the ends";
    EXPECT_FALSE(ibp_registry_overlaps(at(0x4ff000), 0x1000)) << "ends where the region starts";
    EXPECT_FALSE(ibp_registry_overlaps(at(0x501000), 0x1000)) << "starts where the region ends";
    EXPECT_FALSE(ibp_registry_overlaps(at(0x500000), 0)) << "an empty range touches nothing";
    EXPECT_TRUE(ibp_registry_overlaps(at(0x100), SIZE_MAX)) << "a range past the address space";
    EXPECT_FALSE(ibp_registry_overlaps(at(UINTPTR_MAX - 10), SIZE_MAX));
}

TEST_F(RegistryTest, OverlapsAreRefusedAdjacentIsFine)
{
    ASSERT_GT(add(0x200000, 0x1000), 0);
    EXPECT_EQ(add(0x200000, 0x1000), -EEXIST);
    EXPECT_EQ(add(0x1ff000, 0x1001), -EEXIST);
    EXPECT_EQ(add(0x200fff, 0x10), -EEXIST);
    EXPECT_EQ(add(0x1f0000, 0x20000), -EEXIST);
    EXPECT_GT(add(0x201000, 0x1000), 0);
    EXPECT_GT(add(0x1ff000, 0x1000), 0);
    EXPECT_EQ(add(0x300000, 0), -EINVAL);
    EXPECT_EQ(add(UINTPTR_MAX - 10, 100), -EINVAL);
    EXPECT_EQ(ibp_registry_count(), 3u);
    EXPECT_EQ(ibp_registry_remove(at(0x200800)), -ENOENT) << "remove needs the exact base";
    EXPECT_EQ(ibp_registry_remove(at(0x900000)), -ENOENT);
}

int fini_calls;
void count_fini(void *data)
{
    fini_calls++;
    EXPECT_EQ(data, &fini_calls);
}

TEST_F(RegistryTest, ReferencesOutliveRemoval)
{
    IbpRegion *r = nullptr;
    const uint32_t flags = IBP_REGION_REGISTERED | IBP_REGION_MAPPED;
    const int64_t id = ibp_registry_add(at(0x400000), 0x10000, flags, 77, &r);
    ASSERT_GT(id, 0);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(ibp_region_attach_data(r, &fini_calls, count_fini), 0);
    EXPECT_EQ(ibp_region_attach_data(r, &fini_calls, count_fini), -EBUSY);
    EXPECT_EQ(ibp_region_data(r), &fini_calls);
    fini_calls = 0;
    IbpRegion *by_id = nullptr;
    ASSERT_EQ(ibp_registry_get((uint64_t)id, &by_id), 0);
    EXPECT_EQ(by_id, r);
    ibp_region_put(&by_id);

    EXPECT_EQ(ibp_region_state(r), IBP_REGION_RAW);
    EXPECT_EQ(ibp_region_set_state(r, IBP_REGION_RAW, IBP_REGION_HOT), 1);
    EXPECT_EQ(ibp_region_set_state(r, IBP_REGION_RAW, IBP_REGION_COMPRESSING), 0);
    ASSERT_EQ(ibp_registry_remove(at(0x400000)), 0);
    EXPECT_FALSE(contains(at(0x400000), 1));
    EXPECT_EQ(ibp_registry_get((uint64_t)id, &by_id), -ENOENT);
    /* Still readable through the reference. */
    EXPECT_EQ(ibp_region_state(r), IBP_REGION_DEAD);
    EXPECT_EQ(ibp_region_set_state(r, IBP_REGION_DEAD, IBP_REGION_RAW), 0);
    EXPECT_EQ(ibp_region_set_state(r, IBP_REGION_HOT, IBP_REGION_RAW), 0);
    IbpRegionInfo info;
    ibp_region_info(r, &info);
    EXPECT_EQ(info.base, 0x400000u);
    EXPECT_EQ(info.size, 0x10000u);
    EXPECT_EQ(info.flags, flags);
    EXPECT_EQ(info.site, 77u);
    EXPECT_EQ(fini_calls, 0);
    ibp_region_put(&r);
    EXPECT_EQ(fini_calls, 1) << "data is freed with the last reference";
    EXPECT_STREQ(ibp_region_state_name(IBP_REGION_COMPRESSED), "compressed");
}

TEST_F(RegistryTest, SitesCountRegionsBytesAndChurn)
{
    const uint64_t site = 0xabcdef;
    ASSERT_GT(add(0x500000, 0x1000, site), 0);
    ASSERT_GT(add(0x510000, 0x3000, site), 0);
    ASSERT_EQ(ibp_registry_remove(at(0x500000)), 0);
    ibp_registry_site_note_churn(site);
    IbpSiteStats st;
    ASSERT_EQ(ibp_registry_site_stats(site, &st), 0);
    EXPECT_EQ(st.regions_added, 2u);
    EXPECT_EQ(st.regions_live, 1u);
    EXPECT_EQ(st.bytes_added, 0x4000u);
    EXPECT_EQ(st.churned, 1u);
    EXPECT_EQ(ibp_registry_site_stats(0x123456789, &st), -ENOENT);
}

int collect(const IbpRegionInfo *info, void *arg)
{
    static_cast<std::vector<uintptr_t> *>(arg)->push_back(info->base);
    return 0;
}

int stop_at_second(const IbpRegionInfo *info, void *arg)
{
    (void)info;
    return ++*static_cast<int *>(arg) == 2 ? 42 : 0;
}

TEST_F(RegistryTest, ForeachVisitsInAddressOrder)
{
    for (uintptr_t b : {0x900000u, 0x700000u, 0x800000u})
        ASSERT_GT(add(b, 0x1000), 0);
    std::vector<uintptr_t> seen;
    EXPECT_EQ(ibp_registry_foreach(collect, &seen), 0);
    EXPECT_EQ(seen, (std::vector<uintptr_t>{0x700000, 0x800000, 0x900000}));
    int n = 0;
    EXPECT_EQ(ibp_registry_foreach(stop_at_second, &n), 42);
}

/* Random adds and removes against a std::map model; every lookup must agree. */
TEST_F(RegistryTest, MatchesAModelUnderRandomOperations)
{
    std::mt19937_64 rng(99);
    std::map<uintptr_t, size_t> model;
    const uintptr_t lo = 0x10000000;
    for (int op = 0; op < 20000; op++) {
        const uintptr_t a = lo + (rng() % 4096) * 16 + rng() % 16;
        const size_t len = 1 + rng() % 300;
        switch (rng() % 3) {
        case 0: {
            auto it = model.upper_bound(a);
            bool overlap = it != model.end() && it->first < a + len;
            if (it != model.begin()) {
                --it;
                overlap = overlap || it->first + it->second > a;
            }
            const int64_t rc = ibp_registry_add(at(a), len, 0, 0, nullptr);
            ASSERT_EQ(rc > 0, !overlap) << "add " << a << "+" << len;
            if (overlap)
                ASSERT_EQ(rc, -EEXIST);
            else
                model[a] = len;
            break;
        }
        case 1: {
            if (model.empty())
                break;
            auto it = model.lower_bound(a);
            if (it == model.end())
                it = model.begin();
            ASSERT_EQ(ibp_registry_remove(at(it->first)), 0);
            model.erase(it);
            break;
        }
        default: {
            auto it = model.upper_bound(a);
            bool in = false;
            if (it != model.begin()) {
                --it;
                in = a + len <= it->first + it->second;
            }
            ASSERT_EQ(contains(at(a), len), in) << "lookup " << a << "+" << len;
            /* A wider range, which may hold whole regions between its ends. */
            const size_t wide = len * (1 + rng() % 64);
            auto first = model.lower_bound(a);
            bool touches = first != model.end() && first->first < a + wide;
            if (first != model.begin())
                touches = touches || std::prev(first)->first + std::prev(first)->second > a;
            ASSERT_EQ(ibp_registry_overlaps(at(a), wide) != 0, touches) << "overlaps " << a << "+" << wide;
        }
        }
    }
    ASSERT_EQ(ibp_registry_count(), model.size());
    for (auto &kv : model)
        bases.push_back(kv.first);
}

/* Lookups never lock: readers race with writers that keep swapping snapshots.
 * A found region must contain the pointer and be readable (ASan checks that
 * no reader touches a freed snapshot or region). */
TEST_F(RegistryTest, LookupsRaceWithAddAndRemove)
{
    const uintptr_t lo = 0x40000000;
    const int slots = 64;
    std::atomic<bool> stop{false};
    std::atomic<long> found{0};
    std::vector<std::thread> readers;
    for (int k = 0; k < 3; k++)
        readers.emplace_back([&, k] {
            std::mt19937_64 rng(k);
            long n = 0;
            while (!stop.load(std::memory_order_relaxed)) {
                const uintptr_t a = lo + (rng() % slots) * 0x10000 + rng() % 0x10000;
                IbpRegion *r = nullptr;
                if (ibp_registry_lookup(at(a), 8, &r) == 0) {
                    const uintptr_t b = ibp_region_base(r);
                    if (a < b || a + 8 > b + ibp_region_size(r))
                        ADD_FAILURE() << "lookup returned a region not containing the pointer";
                    ibp_region_put(&r);
                    n++;
                }
            }
            found += n;
        });
    std::mt19937_64 rng(5);
    std::vector<bool> live(slots, false);
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
    for (int op = 0; op < 20000 || std::chrono::steady_clock::now() < until; op++) {
        const int s = (int)(rng() % slots);
        const uintptr_t b = lo + (uintptr_t)s * 0x10000;
        if (live[s]) {
            ASSERT_EQ(ibp_registry_remove(at(b)), 0);
        } else {
            ASSERT_GT(ibp_registry_add(at(b), 0x8000 + rng() % 0x8000, 0, 0, nullptr), 0);
        }
        live[s] = !live[s];
    }
    stop = true;
    for (auto &t : readers)
        t.join();
    for (int s = 0; s < slots; s++)
        if (live[s])
            bases.push_back(lo + (uintptr_t)s * 0x10000);
    EXPECT_GT(found.load(), 0);
}

/* A read section pins its snapshot: a remove must wait for it. */
TEST_F(RegistryTest, RemoveWaitsForReaders)
{
    ASSERT_GT(ibp_registry_add(at(0x600000), 0x1000, 0, 0, nullptr), 0);
    const unsigned tok = ibp_registry_read_enter();
    std::atomic<bool> done{false};
    std::thread remover([&] {
        ibp_registry_remove(at(0x600000));
        done = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(done.load()) << "remove returned while a reader could still see the region";
    ibp_registry_read_exit(tok);
    remover.join();
    EXPECT_TRUE(done.load());
    /* Nested sections on one thread. */
    const unsigned t1 = ibp_registry_read_enter();
    const unsigned t2 = ibp_registry_read_enter();
    ibp_registry_read_exit(t2);
    ibp_registry_read_exit(t1);
}

} // namespace
