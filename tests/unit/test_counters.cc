// SPDX-License-Identifier: MIT
// ibpshim: per-kind counters from many threads, and the public snapshot API.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

extern "C" {
#include "report/counters.h"
}

TEST(Counters, SumsAcrossThreads)
{
    ibp_counters_reset();
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; t++)
        threads.emplace_back([] {
            for (int i = 0; i < 10000; i++)
                ibp_counters_add(IBPSHIM_CALL_MEMCPY_ASYNC_H2D, 3);
        });
    for (auto &t : threads)
        t.join();
    IbpshimCallCount counts[IBPSHIM_CALL_KIND_COUNT];
    ASSERT_EQ(ibpshim_call_counts(counts, IBPSHIM_CALL_KIND_COUNT), (size_t)IBPSHIM_CALL_KIND_COUNT);
    EXPECT_EQ(counts[IBPSHIM_CALL_MEMCPY_ASYNC_H2D].calls, 80000u);
    EXPECT_EQ(counts[IBPSHIM_CALL_MEMCPY_ASYNC_H2D].bytes, 240000u);
    EXPECT_EQ(counts[IBPSHIM_CALL_MEMCPY_H2D].calls, 0u);
}

TEST(Counters, RejectsBadKindsAndClipsSnapshots)
{
    ibp_counters_reset();
    ibp_counters_add((IbpshimCallKind)IBPSHIM_CALL_KIND_COUNT, 5);
    ibp_counters_add((IbpshimCallKind)-1, 5);
    IbpshimCallCount counts[IBPSHIM_CALL_KIND_COUNT + 4] = {};
    EXPECT_EQ(ibpshim_call_counts(counts, IBPSHIM_CALL_KIND_COUNT + 4), (size_t)IBPSHIM_CALL_KIND_COUNT);
    for (const auto &c : counts)
        EXPECT_EQ(c.calls, 0u);
    EXPECT_EQ(ibpshim_call_counts(nullptr, 3), 0u);
    EXPECT_EQ(ibpshim_call_counts(counts, 2), 2u);
}

TEST(Counters, NamesEveryKind)
{
    for (int k = 0; k < IBPSHIM_CALL_KIND_COUNT; k++) {
        const char *name = ibpshim_call_kind_name((IbpshimCallKind)k);
        ASSERT_NE(name, nullptr);
        EXPECT_STRNE(name, "?");
        EXPECT_EQ(std::string(name).rfind("cuda", 0), 0u);
    }
    EXPECT_STREQ(ibpshim_call_kind_name(IBPSHIM_CALL_KIND_COUNT), "?");
}
