// SPDX-License-Identifier: MIT
// ibpshim: the public ibp-config API: docs/CONFIG.md in sync, defaults that read back, --check, --show.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

extern "C" {
#include "common/log.h"
#include "config/config.h"
#include "ibpshim/config.h"
}

namespace {

template <typename Write>
std::string capture(Write write)
{
    char *buf = nullptr;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    EXPECT_NE(out, nullptr);
    EXPECT_EQ(write(out), 0);
    fclose(out);
    std::string text(buf, len);
    free(buf);
    return text;
}

TEST(ConfigDocs, CommittedDocsMatchTheTable)
{
    const char *root = getenv("IBPSHIM_SOURCE_ROOT");
    if (!root)
        GTEST_SKIP() << "IBPSHIM_SOURCE_ROOT is not set (run through meson test)";
    const std::string path = std::string(root) + "/docs/CONFIG.md";
    std::ifstream in(path, std::ios::binary);
    ASSERT_TRUE(in.good()) << path << " is missing: run ibp-config --dump-docs > docs/CONFIG.md";
    std::stringstream committed;
    committed << in.rdbuf();
    const std::string generated = capture([](FILE *out) { return ibpshim_config_write_docs(out); });
    EXPECT_TRUE(committed.str() == generated)
        << "docs/CONFIG.md is out of date with the option table: run ibp-config --dump-docs > docs/CONFIG.md";
}

TEST(ConfigDocs, EveryOptionAndVariableIsDocumented)
{
    const std::string docs = capture([](FILE *out) { return ibpshim_config_write_docs(out); });
    const IbpConfigOption *opts = ibp_config_options();
    for (size_t i = 0; i < IBP_CONFIG_OPTION_COUNT; i++) {
        char env[96];
        ibp_config_env_name(&opts[i], env, sizeof(env));
        EXPECT_NE(docs.find("| `" + std::string(opts[i].key) + "` |"), std::string::npos) << opts[i].key;
        EXPECT_NE(docs.find(env), std::string::npos) << env;
        EXPECT_NE(docs.find(opts[i].help), std::string::npos) << opts[i].key;
    }
    EXPECT_NE(docs.find("### [transfer]"), std::string::npos);
    EXPECT_NE(docs.find("IBPSHIM_LOG_LEVEL"), std::string::npos);
    EXPECT_NE(docs.find("`4k` = `4KiB` = 4096"), std::string::npos);
    // Style rules for committed files: no tabs, no trailing blanks.
    EXPECT_EQ(docs.find('\t'), std::string::npos);
    EXPECT_EQ(docs.find(" \n"), std::string::npos);
}

TEST(ConfigDefaults, DumpReadsBackAsTheDefaults)
{
    const std::string text = capture([](FILE *out) { return ibpshim_config_write_defaults(out); });
    EXPECT_EQ(text.find(" \n"), std::string::npos);
    IbpConfig parsed, defaults;
    IbpConfigReport report;
    memset(&report, 0, sizeof(report));
    ibp_config_defaults(&parsed);
    parsed.policy.min_copies = 99; // must be set back by the file
    ibp_config_parse_buffer(&parsed, &report, "defaults.ini", text.data(), text.size());
    ibp_config_defaults(&defaults);
    EXPECT_EQ(report.errors, 0u);
    EXPECT_EQ(report.warnings, 0u);
    EXPECT_EQ(memcmp(&parsed, &defaults, sizeof(parsed)), 0);
    for (size_t i = 0; i < IBP_CONFIG_OPTION_COUNT; i++)
        EXPECT_EQ(report.source[i].origin, IBP_CONFIG_ORIGIN_FILE) << ibp_config_options()[i].key;
}

class ConfigTool : public ::testing::Test {
protected:
    void SetUp() override
    {
        char tmpl[] = "/tmp/ibp-config-tool-XXXXXX";
        const int fd = mkstemp(tmpl);
        ASSERT_GE(fd, 0);
        close(fd);
        path_ = tmpl;
        log_fd_ = memfd_create("ibp-config-log", MFD_CLOEXEC);
        ibp_log_set_fd(log_fd_);
    }
    void TearDown() override
    {
        ibp_log_set_fd(2);
        close(log_fd_);
        unlink(path_.c_str());
    }
    void write(const std::string &text) { std::ofstream(path_, std::ios::binary) << text; }
    std::string log() const
    {
        char buf[8192];
        const ssize_t n = pread(log_fd_, buf, sizeof(buf), 0);
        return std::string(buf, n > 0 ? (size_t)n : 0);
    }

    std::string path_;
    int log_fd_ = -1;
};

TEST_F(ConfigTool, CheckCountsErrorsAndWarnings)
{
    write("[policy]\nmin_bytes = 4MiB\nmin_bytes = 8MiB\nmin_ratio = 2\n[report]\nformat = xml\n");
    IbpshimConfigCounts counts = {99, 99};
    EXPECT_EQ(ibpshim_config_check_file(path_.c_str(), &counts), 0);
    EXPECT_EQ(counts.errors, 2u);
    EXPECT_EQ(counts.warnings, 1u);
    EXPECT_NE(log().find(path_ + ":4: [policy] min_ratio = '2': out of range [0, 1]"), std::string::npos)
        << log();
    EXPECT_NE(log().find(path_ + ":6: [report] format = 'xml': not one of text, json"), std::string::npos)
        << log();

    write("[policy]\nmin_bytes = 4MiB\n");
    EXPECT_EQ(ibpshim_config_check_file(path_.c_str(), &counts), 0);
    EXPECT_EQ(counts.errors, 0u);
    EXPECT_EQ(counts.warnings, 0u);

    EXPECT_EQ(ibpshim_config_check_file("/nonexistent/ibpshim.ini", &counts), -ENOENT);
    EXPECT_EQ(counts.errors, 1u);
}

TEST_F(ConfigTool, ShowNamesWhereEachValueCameFrom)
{
    write("[policy]\n\nmin_copies = 5\n");
    setenv("IBPSHIM_CONFIG", path_.c_str(), 1);
    setenv("IBPSHIM_TRANSFER_MAX_SMS", "16", 1);
    IbpshimConfigCounts counts = {99, 99};
    const std::string text =
        capture([&counts](FILE *out) { return ibpshim_config_write_effective(out, &counts); });
    unsetenv("IBPSHIM_CONFIG");
    unsetenv("IBPSHIM_TRANSFER_MAX_SMS");
    EXPECT_EQ(counts.errors, 0u);
    EXPECT_NE(text.find("; file: " + path_ + "\n"), std::string::npos) << text;
    EXPECT_NE(text.find("min_copies = 5"), std::string::npos) << text;
    EXPECT_NE(text.find("; " + path_ + ":3\n"), std::string::npos) << text;
    EXPECT_NE(text.find("max_sms = 16"), std::string::npos) << text;
    EXPECT_NE(text.find("; IBPSHIM_TRANSFER_MAX_SMS\n"), std::string::npos) << text;
    EXPECT_NE(text.find("min_bytes = 4MiB"), std::string::npos) << text;

    // The listing is itself a valid ini file that reproduces the values.
    IbpConfig parsed;
    IbpConfigReport report;
    memset(&report, 0, sizeof(report));
    ibp_config_defaults(&parsed);
    ibp_config_parse_buffer(&parsed, &report, "show.ini", text.data(), text.size());
    EXPECT_EQ(report.errors, 0u) << log();
    EXPECT_EQ(parsed.policy.min_copies, 5);
    EXPECT_EQ(parsed.transfer.max_sms, 16);
}

TEST_F(ConfigTool, WriteErrorsAreReported)
{
    FILE *full = fopen("/dev/full", "w");
    if (!full)
        GTEST_SKIP() << "/dev/full is not available";
    EXPECT_EQ(ibpshim_config_write_docs(full), -EIO);
    fclose(full);
}

} // namespace
