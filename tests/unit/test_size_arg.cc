// SPDX-License-Identifier: MIT
// Sizes and counts on the tools' command lines (tools/size_arg.h): what is one, what is refused.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>

#include "tools/size_arg.h"

namespace
{

size_t parsed(const char *s)
{
    size_t b = 12345;
    EXPECT_EQ(ibp_size_parse(s, &b), 0) << s;
    return b;
}

TEST(SizeArg, SuffixesArePowersOf1024)
{
    EXPECT_EQ(parsed("4096"), 4096u);
    EXPECT_EQ(parsed("0"), 0u);
    EXPECT_EQ(parsed("512K"), 512u << 10);
    EXPECT_EQ(parsed("512k"), 512u << 10);
    EXPECT_EQ(parsed("64M"), 64u << 20);
    EXPECT_EQ(parsed("64MiB"), 64u << 20);
    EXPECT_EQ(parsed("64MB"), 64u << 20);
    EXPECT_EQ(parsed("1.5G"), 3ull << 29);
    EXPECT_EQ(parsed(".5K"), 512u);
    EXPECT_EQ(ibp_size_arg("6M"), 6u << 20);
}

TEST(SizeArg, AnythingElseIsRefusedAndLeavesTheOutputAlone)
{
    for (const char *bad : {"", "x", "6x", "6Mx", "6MiBs", "-1", "+1", " 1", "1 ", "nan", "inf", "K", "1e400",
                            "99999999999G"}) {
        size_t b = 777;
        EXPECT_EQ(ibp_size_parse(bad, &b), -1) << bad;
        EXPECT_EQ(b, 777u) << bad;
        EXPECT_EQ(ibp_size_arg(bad), 0u) << bad;
    }
    size_t b = 0;
    EXPECT_EQ(ibp_size_parse(nullptr, &b), -1);
}

TEST(CountArg, WholeNumbersInRange)
{
    long v = -7;
    EXPECT_EQ(ibp_count_parse("3", 1, 64, &v), 0);
    EXPECT_EQ(v, 3);
    EXPECT_EQ(ibp_count_parse("64", 1, 64, &v), 0);
    EXPECT_EQ(v, 64);
    EXPECT_EQ(ibp_count_parse("-2", -5, 5, &v), 0);
    EXPECT_EQ(v, -2);
    for (const char *bad : {"", "0", "65", "3x", "x", "1.5", "99999999999999999999999"}) {
        long w = 42;
        EXPECT_EQ(ibp_count_parse(bad, 1, 64, &w), -1) << bad;
        EXPECT_EQ(w, 42) << bad;
    }
}

} // namespace
