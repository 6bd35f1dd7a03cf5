// SPDX-License-Identifier: MIT
// ibpshim: the option table and the value syntax: sizes, durations, booleans, numbers, enums, strings.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <string>

extern "C" {
#include "config/config.h"
#include "interpose/pipe_chunks.h"
}

namespace {

const IbpConfigOption *opt(const char *section, const char *key)
{
    const IbpConfigOption *o = ibp_config_option_find(section, key);
    EXPECT_NE(o, nullptr) << section << "." << key;
    return o;
}

struct Parsed {
    int rc;
    IbpConfigValue value;
    char why[256];
};

Parsed parse(const IbpConfigOption *o, const char *text)
{
    Parsed p{};
    p.rc = ibp_config_value_parse(o, text, &p.value, p.why, sizeof(p.why));
    return p;
}

uint64_t size_of(const char *text)
{
    Parsed p = parse(opt("policy", "max_shadow_bytes"), text);
    EXPECT_EQ(p.rc, 0) << text << ": " << p.why;
    return p.value.u;
}

uint64_t ns_of(const char *text)
{
    Parsed p = parse(opt("report", "interval"), text);
    EXPECT_EQ(p.rc, 0) << text << ": " << p.why;
    return p.value.u;
}

std::string format(const IbpConfigOption *o, const IbpConfig &cfg)
{
    char buf[IBP_CONFIG_STRING_MAX + 3];
    ibp_config_value_format(o, &cfg, buf, sizeof(buf));
    return buf;
}

TEST(ConfigTable, NamesAreUniqueAndDocumented)
{
    const IbpConfigOption *opts = ibp_config_options();
    std::set<std::string> names, envs, offsets;
    for (size_t i = 0; i < IBP_CONFIG_OPTION_COUNT; i++) {
        const IbpConfigOption &o = opts[i];
        EXPECT_TRUE(names.insert(std::string(o.section) + "." + o.key).second) << o.key;
        char env[96];
        ASSERT_EQ(ibp_config_env_name(&o, env, sizeof(env)), 0);
        EXPECT_TRUE(envs.insert(env).second) << env;
        EXPECT_TRUE(offsets.insert(std::to_string(o.offset)).second) << o.key << " shares a field";
        ASSERT_NE(o.help, nullptr);
        EXPECT_GT(strlen(o.help), 10u) << o.key;
        EXPECT_EQ(strchr(o.help, '\n'), nullptr) << o.key;
        EXPECT_EQ(ibp_config_option_find(o.section, o.key), &o);
        if (o.type == IBP_CONFIG_ENUM) {
            ASSERT_NE(o.values, nullptr) << o.key;
        }
        // Sections are contiguous, so every writer emits each header once.
        for (size_t j = 0; j + 1 < i; j++) {
            if (!strcmp(opts[j].section, o.section)) {
                EXPECT_STREQ(opts[i - 1].section, o.section) << o.key;
            }
        }
    }
    EXPECT_EQ(ibp_config_option_find("POLICY", "Min_Bytes"), ibp_config_option_find("policy", "min_bytes"));
    EXPECT_EQ(ibp_config_option_find("policy", "nope"), nullptr);
    char small[8];
    EXPECT_EQ(ibp_config_env_name(opt("policy", "min_bytes"), small, sizeof(small)), -ENOSPC);
}

TEST(ConfigTable, DefaultsParseAndMatchTheIssue)
{
    IbpConfig cfg;
    ibp_config_defaults(&cfg);
    EXPECT_TRUE(cfg.shim.enabled);
    EXPECT_EQ(cfg.shim.log_level, IBP_LOG_WARN);
    EXPECT_STREQ(cfg.shim.log_file, "");
    EXPECT_EQ(cfg.policy.min_bytes, 4u << 20);
    EXPECT_EQ(cfg.policy.min_copies, 2);
    EXPECT_DOUBLE_EQ(cfg.policy.min_ratio, 0.95);
    EXPECT_EQ(cfg.policy.max_shadow_bytes, 0u);
    EXPECT_EQ(cfg.policy.tracking, IBP_TRACKING_AUTO);
    EXPECT_EQ(cfg.policy.compressor_threads, 2);
    EXPECT_EQ(cfg.policy.churn_limit, 3);
    EXPECT_EQ(cfg.policy.churn_window_ns, 1000000000u);
    EXPECT_FALSE(cfg.policy.track_shared);
    EXPECT_FALSE(cfg.policy.track_write_combined);
    EXPECT_FALSE(cfg.policy.track_mapped);
    EXPECT_EQ(cfg.policy.selector_flags, IBP_SELECTOR_FLAGS_AUTO);
    EXPECT_EQ(cfg.transfer.path, IBP_TRANSFER_PATH_AUTO);
    EXPECT_EQ(cfg.transfer.staging_bytes, 256u << 20);
    EXPECT_EQ(cfg.transfer.block_bytes, 0u);
    EXPECT_EQ(cfg.transfer.max_sms, 0);
    EXPECT_EQ(cfg.transfer.staging_exhausted, IBP_STAGING_EXHAUSTED_WAIT);
    EXPECT_EQ(cfg.transfer.pipeline_chunk, 16u << 20);
    EXPECT_EQ(cfg.transfer.pipeline_chunk, IBP_PIPE_CHUNK_DEFAULT); // ibp-bench's default too
    EXPECT_EQ(cfg.transfer.pipeline_tail, 2u << 20);
    EXPECT_EQ(cfg.transfer.pipeline_raw_tail, 0u);
    EXPECT_EQ(cfg.transfer.pipeline_raw_tail, IBP_PIPE_RAW_TAIL_DEFAULT); // ibp-bench's --shim-raw-tail too
    EXPECT_FALSE(cfg.transfer.priority_decode);
    EXPECT_STREQ(cfg.report.path, "");
    EXPECT_EQ(cfg.report.format, IBP_REPORT_FORMAT_TEXT);
    EXPECT_TRUE(cfg.report.on_exit);
    EXPECT_EQ(cfg.report.signal_number, SIGUSR1);
    EXPECT_EQ(cfg.report.interval_ns, 0u);
    EXPECT_EQ(cfg.report.stack_depth, 8);
}

TEST(ConfigValues, SizesBinaryAndDecimal)
{
    EXPECT_EQ(size_of("0"), 0u);
    EXPECT_EQ(size_of("4096"), 4096u);
    EXPECT_EQ(size_of("17B"), 17u);
    EXPECT_EQ(size_of("4k"), 4096u);
    EXPECT_EQ(size_of("4K"), 4096u);
    EXPECT_EQ(size_of("4KiB"), 4096u);
    EXPECT_EQ(size_of("4kB"), 4000u);
    EXPECT_EQ(size_of("4KB"), 4000u);
    EXPECT_EQ(size_of("4MiB"), 4u << 20);
    EXPECT_EQ(size_of("4 MiB"), 4u << 20);
    EXPECT_EQ(size_of("4mib"), 4u << 20);
    EXPECT_EQ(size_of("4M"), 4u << 20);
    EXPECT_EQ(size_of("1.5GB"), 1500000000u);
    EXPECT_EQ(size_of("1.5GiB"), 1610612736u);
    EXPECT_EQ(size_of(".5k"), 512u);
    EXPECT_EQ(size_of("0.1KiB"), 102u); // 102.4 rounds down
    EXPECT_EQ(size_of("2T"), 2ull << 40);
    EXPECT_EQ(size_of("3TB"), 3000000000000ull);
    EXPECT_EQ(size_of("1P"), 1ull << 50);
    EXPECT_EQ(size_of("1PB"), 1000000000000000ull);
    EXPECT_EQ(size_of("  8M  "), 8u << 20);
    EXPECT_EQ(size_of("\"8M\""), 8u << 20);
    EXPECT_EQ(size_of("1.0000000000000000000000001k"), 1024u);
}

TEST(ConfigValues, SizesRejected)
{
    const IbpConfigOption *o = opt("policy", "max_shadow_bytes");
    for (const char *bad : {"", "  ", "k", "4x", "4 MiBs", "0x10", "1e6", "4..5k", "1.", "4MiB 2", "four"}) {
        Parsed p = parse(o, bad);
        EXPECT_EQ(p.rc, -EINVAL) << "'" << bad << "'";
        EXPECT_NE(p.why[0], '\0');
    }
    Parsed neg = parse(o, "-4k");
    EXPECT_EQ(neg.rc, -ERANGE);
    EXPECT_NE(strstr(neg.why, "negative"), nullptr) << neg.why;
    for (const char *big : {"99999999999TiB", "18446744073709551616", "99999999999999999999999", "2P"}) {
        Parsed p = parse(o, big);
        EXPECT_EQ(p.rc, -ERANGE) << big;
        EXPECT_NE(strstr(p.why, "range"), nullptr) << p.why;
    }
    // Ranges are inclusive.
    EXPECT_EQ(parse(o, "1P").rc, 0);
    EXPECT_EQ(parse(opt("transfer", "staging_bytes"), "1MiB").rc, 0);
    EXPECT_EQ(parse(opt("transfer", "staging_bytes"), "1048575").rc, -ERANGE);
}

TEST(ConfigValues, Durations)
{
    EXPECT_EQ(ns_of("0"), 0u);
    EXPECT_EQ(ns_of("250ms"), 250000000u);
    EXPECT_EQ(ns_of("2s"), 2000000000u);
    EXPECT_EQ(ns_of("2"), 2000000000u);
    EXPECT_EQ(ns_of("1.5s"), 1500000000u);
    EXPECT_EQ(ns_of("1m"), 60000000000u);
    EXPECT_EQ(ns_of("1min"), 60000000000u);
    EXPECT_EQ(ns_of("2h"), 7200000000000u);
    EXPECT_EQ(ns_of("10us"), 10000u);
    EXPECT_EQ(ns_of("7ns"), 7u);
    EXPECT_EQ(ns_of("250 MS"), 250000000u);
    const IbpConfigOption *o = opt("report", "interval");
    EXPECT_EQ(parse(o, "1d").rc, -EINVAL);
    EXPECT_EQ(parse(o, "-1s").rc, -ERANGE);
    EXPECT_EQ(parse(o, "25h").rc, -ERANGE);
    EXPECT_EQ(parse(opt("policy", "churn_window"), "0").rc, -ERANGE); // at least 1ms
    EXPECT_EQ(parse(opt("policy", "churn_window"), "1ms").rc, 0);
}

TEST(ConfigValues, Booleans)
{
    const IbpConfigOption *o = opt("shim", "enabled");
    for (const char *yes : {"1", "true", "TRUE", "yes", "Yes", "on", " on "}) {
        Parsed p = parse(o, yes);
        EXPECT_EQ(p.rc, 0) << yes;
        EXPECT_EQ(p.value.i, 1) << yes;
    }
    for (const char *no : {"0", "false", "no", "OFF"}) {
        Parsed p = parse(o, no);
        EXPECT_EQ(p.rc, 0) << no;
        EXPECT_EQ(p.value.i, 0) << no;
    }
    for (const char *bad : {"", "2", "y", "enable", "truee"})
        EXPECT_EQ(parse(o, bad).rc, -EINVAL) << bad;
}

TEST(ConfigValues, Integers)
{
    const IbpConfigOption *o = opt("report", "stack_depth");
    EXPECT_EQ(parse(o, "0").value.i, 0);
    EXPECT_EQ(parse(o, "64").value.i, 64);
    EXPECT_EQ(parse(o, "+7").value.i, 7);
    EXPECT_EQ(parse(o, "65").rc, -ERANGE);
    EXPECT_EQ(parse(o, "-1").rc, -ERANGE);
    EXPECT_EQ(parse(o, "99999999999999999999999").rc, -ERANGE);
    for (const char *bad : {"1.5", "", "8 frames", "0x8", "-", "8k"})
        EXPECT_EQ(parse(o, bad).rc, -EINVAL) << bad;
    EXPECT_EQ(parse(opt("policy", "min_copies"), "0").rc, -ERANGE);
}

TEST(ConfigValues, DoublesAreLocaleFree)
{
    const IbpConfigOption *o = opt("policy", "min_ratio");
    EXPECT_DOUBLE_EQ(parse(o, "0.95").value.d, 0.95);
    EXPECT_DOUBLE_EQ(parse(o, "1").value.d, 1.0);
    EXPECT_DOUBLE_EQ(parse(o, "0").value.d, 0.0);
    EXPECT_DOUBLE_EQ(parse(o, ".5").value.d, 0.5);
    EXPECT_EQ(parse(o, "1.0000001").rc, -ERANGE);
    EXPECT_EQ(parse(o, "-0.1").rc, -ERANGE);
    for (const char *bad : {"0,95", "nan", "inf", "1e-1", "95%", ""})
        EXPECT_EQ(parse(o, bad).rc, -EINVAL) << bad;
}

TEST(ConfigValues, EnumsAndAliases)
{
    const IbpConfigOption *level = opt("shim", "log_level");
    EXPECT_EQ(parse(level, "off").value.i, IBP_LOG_OFF);
    EXPECT_EQ(parse(level, "TRACE").value.i, IBP_LOG_TRACE);
    EXPECT_EQ(parse(level, "warning").value.i, IBP_LOG_WARN);
    EXPECT_EQ(parse(level, "3").value.i, IBP_LOG_DEBUG);
    Parsed bad = parse(level, "loud");
    EXPECT_EQ(bad.rc, -EINVAL);
    EXPECT_NE(strstr(bad.why, "off, error, warn, info, debug, trace"), nullptr) << bad.why;
    EXPECT_EQ(strstr(bad.why, "warning"), nullptr) << "aliases are not advertised";

    EXPECT_EQ(parse(opt("report", "signal"), "sigusr2").value.i, SIGUSR2);
    EXPECT_EQ(parse(opt("report", "signal"), "none").value.i, 0);
    EXPECT_EQ(parse(opt("report", "signal"), "SIGINT").rc, -EINVAL);
    EXPECT_EQ(parse(opt("policy", "tracking"), "mprotect").value.i, IBP_TRACKING_MPROTECT);
    EXPECT_EQ(parse(opt("transfer", "path"), "ZeroCopy").value.i, IBP_TRANSFER_PATH_ZEROCOPY);
    EXPECT_EQ(parse(opt("transfer", "staging_exhausted"), "raw").value.i, IBP_STAGING_EXHAUSTED_RAW);
    EXPECT_EQ(parse(opt("report", "format"), "json").value.i, IBP_REPORT_FORMAT_JSON);

    // selector_flags was a boolean: its spellings still mean on and off
    const IbpConfigOption *flags = opt("policy", "selector_flags");
    EXPECT_EQ(parse(flags, "auto").value.i, IBP_SELECTOR_FLAGS_AUTO);
    EXPECT_EQ(parse(flags, "true").value.i, IBP_SELECTOR_FLAGS_ON);
    EXPECT_EQ(parse(flags, "No").value.i, IBP_SELECTOR_FLAGS_OFF);
    EXPECT_EQ(parse(flags, "0").value.i, IBP_SELECTOR_FLAGS_OFF);
    Parsed half = parse(flags, "sometimes");
    EXPECT_EQ(half.rc, -EINVAL);
    EXPECT_NE(strstr(half.why, "auto, on, off"), nullptr) << half.why;
}

TEST(ConfigValues, StringsKeepInnerTextAndDropOneQuotePair)
{
    const IbpConfigOption *o = opt("report", "path");
    EXPECT_STREQ(parse(o, "").value.s, "");
    EXPECT_STREQ(parse(o, "  /tmp/r.json ").value.s, "/tmp/r.json");
    EXPECT_STREQ(parse(o, "\" /tmp/a b \"").value.s, " /tmp/a b ");
    EXPECT_STREQ(parse(o, "\"\"x\"\"").value.s, "\"x\"");
    EXPECT_STREQ(parse(o, "\"").value.s, "\"");
    std::string long_text(IBP_CONFIG_STRING_MAX, 'a');
    EXPECT_EQ(parse(o, long_text.c_str()).rc, -ERANGE);
    long_text.resize(IBP_CONFIG_STRING_MAX - 1);
    EXPECT_EQ(parse(o, long_text.c_str()).rc, 0);
}

TEST(ConfigValues, FormatPicksExactUnits)
{
    char buf[64];
    ibp_config_size_format(4u << 20, buf, sizeof(buf));
    EXPECT_STREQ(buf, "4MiB");
    ibp_config_size_format(1500000000u, buf, sizeof(buf));
    EXPECT_STREQ(buf, "1500MB");
    ibp_config_size_format(4097, buf, sizeof(buf));
    EXPECT_STREQ(buf, "4097");
    ibp_config_size_format(0, buf, sizeof(buf));
    EXPECT_STREQ(buf, "0");
    ibp_config_size_format(UINT64_MAX, buf, sizeof(buf));
    EXPECT_STREQ(buf, "18446744073709551615");
    ibp_config_duration_format(250000000u, buf, sizeof(buf));
    EXPECT_STREQ(buf, "250ms");
    ibp_config_duration_format(90000000000u, buf, sizeof(buf));
    EXPECT_STREQ(buf, "90s");
    ibp_config_duration_format(0, buf, sizeof(buf));
    EXPECT_STREQ(buf, "0");
    char tiny[4];
    EXPECT_EQ(ibp_config_size_format(123456, tiny, sizeof(tiny)), 3u);
    EXPECT_STREQ(tiny, "123");
}

// Every accepted value of every option formats to text that parses back to the same value.
TEST(ConfigValues, FormatParseRoundTrip)
{
    const IbpConfigOption *opts = ibp_config_options();
    const char *samples[] = {"0",    "1",      "2",     "7",         "64",        "0.5",   "0.123456789",
                             "4k",   "1.5GB",  "3TiB",  "1P",        "4097",      "250ms", "1.5s",
                             "59s",  "2h",     "on",    "off",       "json",      "raw",   "SIGUSR2",
                             "usr1", "debug",  "2",     "\" a b \"", "\"\"q\"\"", "x;y",   "1000000",
                             "1ms",  "999999", "1MiB",  "1TiB",      "1.000000001", "0.999999999"};
    unsigned checked = 0;
    for (size_t i = 0; i < IBP_CONFIG_OPTION_COUNT; i++) {
        for (const char *text : samples) {
            Parsed p = parse(&opts[i], text);
            if (p.rc != 0)
                continue;
            IbpConfig a, b;
            ibp_config_defaults(&a);
            ibp_config_value_store(&opts[i], &p.value, &a);
            const std::string shown = format(&opts[i], a);
            Parsed again = parse(&opts[i], shown.c_str());
            ASSERT_EQ(again.rc, 0) << opts[i].key << " '" << text << "' -> '" << shown << "': " << again.why;
            b = a;
            ibp_config_value_store(&opts[i], &again.value, &b);
            EXPECT_EQ(format(&opts[i], b), shown) << opts[i].key;
            EXPECT_EQ(memcmp(&a, &b, sizeof(a)), 0) << opts[i].key << " '" << text << "'";
            checked++;
        }
    }
    EXPECT_GT(checked, 150u);
}

TEST(ConfigValues, ShadowBudgetAuto)
{
    IbpConfig cfg;
    ibp_config_defaults(&cfg);
    const uint64_t pages = (uint64_t)sysconf(_SC_PHYS_PAGES), page = (uint64_t)sysconf(_SC_PAGESIZE);
    EXPECT_EQ(ibp_config_shadow_budget(&cfg), pages * page / 4);
    cfg.policy.max_shadow_bytes = 12345;
    EXPECT_EQ(ibp_config_shadow_budget(&cfg), 12345u);
}

} // namespace
