// SPDX-License-Identifier: MIT
// ibpshim: loading: every option through ini and environment, precedence, malformed files, lookup order.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

extern "C" {
#include "common/log.h"
#include "config/config.h"
}

extern char **environ;

namespace {

// Collects what the logger writes, so tests can count messages.
class LogCapture {
public:
    LogCapture() : fd_(memfd_create("ibp-config-log", MFD_CLOEXEC)) { ibp_log_set_fd(fd_); }
    ~LogCapture()
    {
        ibp_log_set_fd(2);
        close(fd_);
    }
    std::string text() const
    {
        std::string out;
        char buf[4096];
        ssize_t n;
        off_t off = 0;
        while ((n = pread(fd_, buf, sizeof(buf), off)) > 0) {
            out.append(buf, (size_t)n);
            off += n;
        }
        return out;
    }
    size_t count(const std::string &needle) const
    {
        const std::string all = text();
        size_t n = 0;
        for (size_t pos = all.find(needle); pos != std::string::npos; pos = all.find(needle, pos + 1))
            n++;
        return n;
    }
    size_t lines() const { return count("\n"); }

private:
    int fd_;
};

// Clears every IBPSHIM_ variable and the lookup inputs, and restores them afterwards.
class CleanEnv {
public:
    CleanEnv()
    {
        for (char **e = environ; *e; e++) {
            const std::string entry = *e;
            if (entry.rfind("IBPSHIM_", 0) == 0 || entry.rfind("XDG_CONFIG_HOME=", 0) == 0 ||
                entry.rfind("HOME=", 0) == 0)
                saved_.push_back(entry);
        }
        for (const std::string &entry : saved_)
            unsetenv(entry.substr(0, entry.find('=')).c_str());
    }
    ~CleanEnv()
    {
        std::vector<std::string> now;
        for (char **e = environ; *e; e++)
            if (!strncmp(*e, "IBPSHIM_", 8) || !strncmp(*e, "XDG_CONFIG_HOME=", 16) ||
                !strncmp(*e, "HOME=", 5))
                now.push_back(*e);
        for (const std::string &entry : now)
            unsetenv(entry.substr(0, entry.find('=')).c_str());
        for (const std::string &entry : saved_) {
            const size_t eq = entry.find('=');
            setenv(entry.substr(0, eq).c_str(), entry.substr(eq + 1).c_str(), 1);
        }
    }

private:
    std::vector<std::string> saved_;
};

class TempDir {
public:
    TempDir()
    {
        char tmpl[] = "/tmp/ibp-config-test-XXXXXX";
        path_ = mkdtemp(tmpl);
    }
    ~TempDir()
    {
        const int rc = std::system(("rm -rf '" + path_ + "'").c_str());
        (void)rc;
    }
    const std::string &path() const { return path_; }
    std::string write(const std::string &rel, const std::string &content) const
    {
        const std::string full = path_ + "/" + rel;
        for (size_t slash = full.find('/', path_.size() + 1); slash != std::string::npos;
             slash = full.find('/', slash + 1))
            mkdir(full.substr(0, slash).c_str(), 0755);
        std::ofstream(full, std::ios::binary) << content;
        return full;
    }

private:
    std::string path_;
};

struct Loaded {
    IbpConfig cfg;
    IbpConfigReport report;
};

Loaded parse_text(const std::string &text)
{
    Loaded l;
    memset(&l.report, 0, sizeof(l.report));
    ibp_config_defaults(&l.cfg);
    ibp_config_parse_buffer(&l.cfg, &l.report, "test.ini", text.data(), text.size());
    return l;
}

size_t index_of(const char *section, const char *key)
{
    const IbpConfigOption *o = ibp_config_option_find(section, key);
    EXPECT_NE(o, nullptr);
    return (size_t)(o - ibp_config_options());
}

const IbpConfigSource &source(const Loaded &l, const char *section, const char *key)
{
    return l.report.source[index_of(section, key)];
}

const char kEveryOption[] = "[shim]\n"
                            "enabled = false\n"
                            "log_level = debug\n"
                            "log_file = /var/log/ibp.log\n"
                            "[policy]\n"
                            "min_bytes = 16MiB\n"
                            "min_copies = 5\n"
                            "min_ratio = 0.5\n"
                            "max_shadow_bytes = 2GiB\n"
                            "tracking = mprotect\n"
                            "compressor_threads = 4\n"
                            "plan_reuse = -1\n"
                            "churn_limit = 0\n"
                            "churn_window = 250ms\n"
                            "track_shared = yes\n"
                            "track_write_combined = on\n"
                            "track_mapped = true\n"
                            "selector_flags = on\n"
                            "top_coded = yes\n"
                            "[transfer]\n"
                            "path = zerocopy\n"
                            "staging_bytes = 64MiB\n"
                            "block_bytes = 1MiB\n"
                            "max_sms = 8\n"
                            "staging_exhausted = raw\n"
                            "pipeline_chunk = 2MiB\n"
                            "pipeline_tail = 512KiB\n"
                            "pipeline_raw_tail = 3MiB\n"
                            "priority_decode = true\n"
                            "raw_in_order = no\n"
                            "raw_edges = off\n"
                            "edge_kernel = yes\n"
                            "[report]\n"
                            "path = /tmp/report.json\n"
                            "format = json\n"
                            "on_exit = 0\n"
                            "signal = SIGUSR2\n"
                            "interval = 2m\n"
                            "stack_depth = 16\n";

void expect_every_option_changed(const IbpConfig &cfg)
{
    EXPECT_FALSE(cfg.shim.enabled);
    EXPECT_EQ(cfg.shim.log_level, IBP_LOG_DEBUG);
    EXPECT_STREQ(cfg.shim.log_file, "/var/log/ibp.log");
    EXPECT_EQ(cfg.policy.min_bytes, 16u << 20);
    EXPECT_EQ(cfg.policy.min_copies, 5);
    EXPECT_DOUBLE_EQ(cfg.policy.min_ratio, 0.5);
    EXPECT_EQ(cfg.policy.max_shadow_bytes, 2ull << 30);
    EXPECT_EQ(cfg.policy.tracking, IBP_TRACKING_MPROTECT);
    EXPECT_EQ(cfg.policy.compressor_threads, 4);
    EXPECT_DOUBLE_EQ(cfg.policy.plan_reuse, -1.0);
    EXPECT_EQ(cfg.policy.churn_limit, 0);
    EXPECT_EQ(cfg.policy.churn_window_ns, 250000000u);
    EXPECT_TRUE(cfg.policy.track_shared);
    EXPECT_TRUE(cfg.policy.track_write_combined);
    EXPECT_TRUE(cfg.policy.track_mapped);
    EXPECT_EQ(cfg.policy.selector_flags, IBP_SELECTOR_FLAGS_ON);
    EXPECT_TRUE(cfg.policy.top_coded);
    EXPECT_EQ(cfg.transfer.path, IBP_TRANSFER_PATH_ZEROCOPY);
    EXPECT_EQ(cfg.transfer.staging_bytes, 64u << 20);
    EXPECT_EQ(cfg.transfer.block_bytes, 1u << 20);
    EXPECT_EQ(cfg.transfer.max_sms, 8);
    EXPECT_EQ(cfg.transfer.staging_exhausted, IBP_STAGING_EXHAUSTED_RAW);
    EXPECT_EQ(cfg.transfer.pipeline_chunk, 2u << 20);
    EXPECT_EQ(cfg.transfer.pipeline_tail, 512u << 10);
    EXPECT_EQ(cfg.transfer.pipeline_raw_tail, 3u << 20);
    EXPECT_TRUE(cfg.transfer.priority_decode);
    EXPECT_FALSE(cfg.transfer.raw_in_order);
    EXPECT_FALSE(cfg.transfer.raw_edges);
    EXPECT_TRUE(cfg.transfer.edge_kernel);
    EXPECT_STREQ(cfg.report.path, "/tmp/report.json");
    EXPECT_EQ(cfg.report.format, IBP_REPORT_FORMAT_JSON);
    EXPECT_FALSE(cfg.report.on_exit);
    EXPECT_EQ(cfg.report.signal_number, SIGUSR2);
    EXPECT_EQ(cfg.report.interval_ns, 120000000000u);
    EXPECT_EQ(cfg.report.stack_depth, 16);
}

TEST(ConfigIni, EveryOptionSetsItsField)
{
    LogCapture log;
    Loaded l = parse_text(kEveryOption);
    EXPECT_EQ(l.report.errors, 0u) << log.text();
    EXPECT_EQ(l.report.warnings, 0u);
    EXPECT_EQ(log.lines(), 0u) << log.text();
    expect_every_option_changed(l.cfg);
    EXPECT_STREQ(l.report.file, "test.ini");
    for (size_t i = 0; i < IBP_CONFIG_OPTION_COUNT; i++)
        EXPECT_EQ(l.report.source[i].origin, IBP_CONFIG_ORIGIN_FILE) << ibp_config_options()[i].key;
    EXPECT_EQ(source(l, "shim", "enabled").line, 2u);
    EXPECT_EQ(source(l, "report", "stack_depth").line, 39u);
}

TEST(ConfigEnv, EveryOptionThroughItsVariable)
{
    CleanEnv env;
    // Turn kEveryOption into IBPSHIM_<SECTION>_<KEY>=value.
    std::string section;
    size_t start = 0;
    const std::string text = kEveryOption;
    while (start < text.size()) {
        const size_t end = text.find('\n', start);
        const std::string line = text.substr(start, end - start);
        start = end + 1;
        if (line[0] == '[') {
            section = line.substr(1, line.size() - 2);
            continue;
        }
        const size_t eq = line.find(" = ");
        const IbpConfigOption *o = ibp_config_option_find(section.c_str(), line.substr(0, eq).c_str());
        ASSERT_NE(o, nullptr) << line;
        char name[96];
        ibp_config_env_name(o, name, sizeof(name));
        setenv(name, line.substr(eq + 3).c_str(), 1);
    }
    LogCapture log;
    IbpConfig cfg;
    IbpConfigReport report;
    ibp_config_load_lookup(&cfg, &report, nullptr);
    EXPECT_EQ(report.errors, 0u) << log.text();
    expect_every_option_changed(cfg);
    for (size_t i = 0; i < IBP_CONFIG_OPTION_COUNT; i++) {
        EXPECT_EQ(report.source[i].origin, IBP_CONFIG_ORIGIN_ENV);
        EXPECT_FALSE(report.source[i].env_alias);
    }
    char where[128];
    ibp_config_source_describe(&report, index_of("policy", "min_bytes"), where, sizeof(where));
    EXPECT_STREQ(where, "IBPSHIM_POLICY_MIN_BYTES");
}

TEST(ConfigEnv, PrecedenceEnvOverFileOverDefault)
{
    CleanEnv env;
    TempDir dir;
    const std::string file =
        dir.write("p.ini", "[policy]\nmin_bytes = 8MiB\nmin_copies = 3\n[shim]\nlog_level = info\n");
    setenv("IBPSHIM_CONFIG", file.c_str(), 1);
    setenv("IBPSHIM_POLICY_MIN_BYTES", "32M", 1);
    IbpConfig cfg;
    IbpConfigReport report;
    ibp_config_load_lookup(&cfg, &report, nullptr);
    EXPECT_EQ(report.errors, 0u);
    EXPECT_EQ(cfg.policy.min_bytes, 32u << 20);                 // env
    EXPECT_EQ(cfg.policy.min_copies, 3);                         // file
    EXPECT_EQ(cfg.policy.compressor_threads, 2);                 // default
    EXPECT_EQ(report.source[index_of("policy", "min_bytes")].origin, IBP_CONFIG_ORIGIN_ENV);
    EXPECT_EQ(report.source[index_of("policy", "min_copies")].origin, IBP_CONFIG_ORIGIN_FILE);
    EXPECT_EQ(report.source[index_of("policy", "min_copies")].line, 3u);
    EXPECT_EQ(report.source[index_of("policy", "compressor_threads")].origin, IBP_CONFIG_ORIGIN_DEFAULT);
    char where[IBP_CONFIG_STRING_MAX + 32];
    ibp_config_source_describe(&report, index_of("policy", "min_copies"), where, sizeof(where));
    EXPECT_EQ(std::string(where), file + ":3");
    ibp_config_source_describe(&report, index_of("policy", "compressor_threads"), where, sizeof(where));
    EXPECT_STREQ(where, "default");
    EXPECT_EQ(cfg.shim.log_level, IBP_LOG_INFO);

    // The alias overrides the file; the option's own variable overrides the alias.
    setenv("IBPSHIM_LOG_LEVEL", "error", 1);
    ibp_config_load_lookup(&cfg, &report, nullptr);
    EXPECT_EQ(cfg.shim.log_level, IBP_LOG_ERROR);
    EXPECT_TRUE(report.source[index_of("shim", "log_level")].env_alias);
    ibp_config_source_describe(&report, index_of("shim", "log_level"), where, sizeof(where));
    EXPECT_STREQ(where, "IBPSHIM_LOG_LEVEL");
    setenv("IBPSHIM_SHIM_LOG_LEVEL", "trace", 1);
    ibp_config_load_lookup(&cfg, &report, nullptr);
    EXPECT_EQ(cfg.shim.log_level, IBP_LOG_TRACE);
    EXPECT_FALSE(report.source[index_of("shim", "log_level")].env_alias);
}

TEST(ConfigEnv, BadValueKeepsFileValueAndNamesTheVariable)
{
    CleanEnv env;
    TempDir dir;
    setenv("IBPSHIM_CONFIG", dir.write("a.ini", "[report]\nstack_depth = 12\n").c_str(), 1);
    setenv("IBPSHIM_REPORT_STACK_DEPTH", "lots", 1);
    setenv("IBPSHIM_REPORT_STACKDEPTH", "3", 1);
    setenv("IBPSHIM_TEST_SOMETHING_ELSE", "1", 1); // not a config section: left alone
    LogCapture log;
    IbpConfig cfg;
    IbpConfigReport report;
    ibp_config_load_lookup(&cfg, &report, nullptr);
    EXPECT_EQ(cfg.report.stack_depth, 12);
    EXPECT_EQ(report.errors, 2u) << log.text();
    EXPECT_EQ(log.count("IBPSHIM_REPORT_STACK_DEPTH='lots'"), 1u) << log.text();
    EXPECT_EQ(log.count("keeping 12"), 1u) << log.text();
    EXPECT_EQ(log.count("IBPSHIM_REPORT_STACKDEPTH names no option"), 1u) << log.text();
    EXPECT_EQ(log.count("did you mean IBPSHIM_REPORT_STACK_DEPTH?"), 1u) << log.text();
    EXPECT_EQ(log.count("IBPSHIM_TEST_SOMETHING_ELSE"), 0u);
    EXPECT_EQ(log.lines(), 2u) << log.text();
}

TEST(ConfigIni, EachProblemReportedOnceAndTheRestApplies)
{
    LogCapture log;
    Loaded l = parse_text("orphan = 1\n"                    // 1 before any section
                          "[shim]\n"                        // 2
                          "enabled = maybe\n"               // 3 bad bool
                          "log_level = debug\n"             // 4 applies
                          "[policy\n"                       // 5 broken header
                          "min_bytes = 1\n"                 // 6 skipped quietly
                          "[policy]\n"                      // 7
                          "min_byte = 3\n"                  // 8 unknown key, close spelling
                          "min_bytes = 99999999999TiB\n"    // 9 overflow
                          "min_copies = 1.5\n"              // 10 not an int
                          "staging_bytes = 1M\n"            // 11 wrong section
                          "just some words\n"               // 12 no '='
                          "= 5\n"                           // 13 no key
                          "min_ratio =\n"                   // 14 empty
                          "compressor_threads = 3\n"        // 15 applies
                          "[nonsense]\n"                    // 16 unknown section
                          "path = dma\n"                    // 17 skipped quietly
                          "[transfer] trailing\n"           // 18 junk after header, section applies
                          "path = dma\n");                  // 19 applies
    const std::string all = log.text();
    EXPECT_EQ(l.report.errors, 12u) << all;
    EXPECT_EQ(log.lines(), 12u) << all;
    for (const char *expected :
         {"test.ini:1: key 'orphan' comes before any [section]", "test.ini:3: [shim] enabled = 'maybe'",
          "test.ini:5: section header '[policy' has no closing ']'",
          "test.ini:8: unknown key 'min_byte' in [policy]",
          "did you mean 'min_bytes'?", "test.ini:9: [policy] min_bytes = '99999999999TiB': out of range",
          "keeping 4MiB", "test.ini:10: [policy] min_copies = '1.5': not a whole number",
          "test.ini:11: unknown key 'staging_bytes' in [policy] (it belongs in [transfer])",
          "test.ini:12: expected 'key = value', found 'just some words'", "test.ini:13: missing key",
          "test.ini:14: [policy] min_ratio = '': empty value", "test.ini:16: unknown section [nonsense]",
          "test.ini:18: unexpected text 'trailing' after [transfer]"})
        EXPECT_EQ(log.count(expected), 1u) << expected << "\n" << all;
    EXPECT_EQ(log.count("test.ini:6:"), 0u);
    EXPECT_EQ(log.count("test.ini:17:"), 0u);
    EXPECT_EQ(l.cfg.shim.log_level, IBP_LOG_DEBUG);
    EXPECT_TRUE(l.cfg.shim.enabled);
    EXPECT_EQ(l.cfg.policy.min_bytes, 4u << 20);
    EXPECT_EQ(l.cfg.policy.compressor_threads, 3);
    EXPECT_EQ(l.cfg.transfer.path, IBP_TRANSFER_PATH_DMA);
    EXPECT_EQ(source(l, "transfer", "path").line, 19u);
    EXPECT_EQ(source(l, "policy", "min_bytes").origin, IBP_CONFIG_ORIGIN_DEFAULT);
}

TEST(ConfigIni, CommentsSpacesCaseAndQuotes)
{
    LogCapture log;
    Loaded l = parse_text("; leading comment\n"
                          "# hash comment\n"
                          "\n"
                          "   [ Policy ]   ; comment after header\n"
                          "\tMIN_BYTES\t=\t 8 MiB \t\n"
                          "    min_copies: 4   ; inline comment\n"
                          "churn_limit = 7 # hash is not an inline comment\n"
                          "[report]\n"
                          "path = \" /tmp/spaced name.json \"\n"
                          "[shim]\n"
                          "log_file = /tmp/a;b.log\n");
    EXPECT_EQ(l.cfg.policy.min_bytes, 8u << 20);
    EXPECT_EQ(l.cfg.policy.min_copies, 4);
    EXPECT_EQ(l.cfg.policy.churn_limit, 3) << "'7 # ...' is not an int";
    EXPECT_EQ(l.report.errors, 1u) << log.text();
    EXPECT_EQ(log.count("test.ini:7: [policy] churn_limit = '7 # hash is not an inline comment'"), 1u)
        << log.text();
    EXPECT_STREQ(l.cfg.report.path, " /tmp/spaced name.json ");
    EXPECT_STREQ(l.cfg.shim.log_file, "/tmp/a;b.log");
}

TEST(ConfigIni, EmptyValues)
{
    LogCapture log;
    Loaded l = parse_text("[shim]\nlog_file = x\nlog_file =\n[report]\nformat =\n");
    EXPECT_STREQ(l.cfg.shim.log_file, "") << "an empty string is a value";
    EXPECT_EQ(l.report.warnings, 1u);
    EXPECT_EQ(l.report.errors, 1u);
    EXPECT_EQ(log.count("test.ini:3: [shim] log_file was already set at line 2"), 1u) << log.text();
    EXPECT_EQ(log.count("test.ini:5: [report] format = '': empty value"), 1u) << log.text();
}

TEST(ConfigIni, DuplicateKeysLaterWins)
{
    LogCapture log;
    Loaded l = parse_text("[policy]\nmin_copies = 3\nmin_copies = 9\n[policy]\nMIN_COPIES = 6\n");
    EXPECT_EQ(l.cfg.policy.min_copies, 6);
    EXPECT_EQ(source(l, "policy", "min_copies").line, 5u);
    EXPECT_EQ(l.report.errors, 0u);
    EXPECT_EQ(l.report.warnings, 2u);
    EXPECT_EQ(log.count("was already set at line 2"), 1u) << log.text();
    EXPECT_EQ(log.count("was already set at line 3"), 1u) << log.text();
}

TEST(ConfigIni, CrlfBomAndMissingFinalNewline)
{
    LogCapture log;
    Loaded l = parse_text("\xef\xbb\xbf[policy]\r\nmin_copies = 4\r\n\r\n[report]\r\nformat = json");
    EXPECT_EQ(l.report.errors, 0u) << log.text();
    EXPECT_EQ(l.cfg.policy.min_copies, 4);
    EXPECT_EQ(l.cfg.report.format, IBP_REPORT_FORMAT_JSON);
    EXPECT_EQ(source(l, "report", "format").line, 5u);

    Loaded bare = parse_text("[report]\nstack_depth=3");
    EXPECT_EQ(bare.cfg.report.stack_depth, 3);
    Loaded empty = parse_text("");
    EXPECT_EQ(empty.report.errors, 0u);
}

TEST(ConfigIni, LongLinesAreReportedNotSplit)
{
    LogCapture log;
    const std::string long_value(10 * 1024, 'x');
    // If the long line were split, its tail "min_copies = 7" would apply as a line of its own.
    Loaded l = parse_text("[policy]\n"
                          "; " + long_value + "\n"
                          "churn_limit = " + long_value + " min_copies = 7\n"
                          "[" + long_value + "]\n"
                          "compressor_threads = 5\n"
                          "[shim]\n"
                          "log_file = " + std::string(180, 'f') + "\n");
    EXPECT_EQ(l.report.errors, 2u) << log.text();
    EXPECT_EQ(log.count("test.ini:3: line 'churn_limit = xxx"), 1u) << log.text();
    EXPECT_EQ(log.count("is longer than 199 characters"), 1u) << log.text();
    EXPECT_EQ(log.count("test.ini:4: unknown section"), 1u) << log.text();
    EXPECT_EQ(l.cfg.policy.min_copies, 2);
    EXPECT_EQ(l.cfg.policy.churn_limit, 3);
    EXPECT_EQ(l.cfg.policy.compressor_threads, 2);
    EXPECT_EQ(strlen(l.cfg.shim.log_file), 180u);
    // Messages stay one short line however long the input.
    for (size_t pos = 0, next; (next = log.text().find('\n', pos)) != std::string::npos; pos = next + 1)
        EXPECT_LT(next - pos, 400u);
}

TEST(ConfigIni, NulBytesAndControlCharacters)
{
    LogCapture log;
    const std::string text = std::string("[policy]\nmin_copies = 4\0 junk\n", 30) + "min_bytes = 1\x01k\n" +
                             "tracking = uffd\n";
    Loaded l = parse_text(text);
    EXPECT_EQ(l.report.errors, 2u) << log.text();
    EXPECT_EQ(log.count("test.ini:2: line contains a NUL byte"), 1u) << log.text();
    EXPECT_EQ(log.count("'1\\x01k'"), 1u) << log.text();
    EXPECT_EQ(l.cfg.policy.min_copies, 2);
    EXPECT_EQ(l.cfg.policy.tracking, IBP_TRACKING_UFFD);
}

TEST(ConfigIni, CrossCheckBlockAgainstStaging)
{
    LogCapture log;
    Loaded l = parse_text("[transfer]\nstaging_bytes = 2MiB\nblock_bytes = 4MiB\n");
    ibp_config_validate(&l.cfg, &l.report);
    EXPECT_EQ(l.cfg.transfer.block_bytes, 0u);
    EXPECT_EQ(l.cfg.transfer.staging_bytes, 2u << 20);
    EXPECT_EQ(l.report.errors, 1u);
    EXPECT_EQ(log.count("test.ini:3: [transfer] block_bytes = 4MiB is larger than staging_bytes = 2MiB"), 1u)
        << log.text();
    EXPECT_EQ(source(l, "transfer", "block_bytes").origin, IBP_CONFIG_ORIGIN_DEFAULT);
}

class ConfigLookup : public ::testing::Test {
protected:
    void SetUp() override
    {
        ASSERT_NE(getcwd(cwd_, sizeof(cwd_)), nullptr);
        ASSERT_EQ(chdir(work_.path().c_str()), 0);
        setenv("XDG_CONFIG_HOME", (home_.path() + "/xdg").c_str(), 1);
        setenv("HOME", home_.path().c_str(), 1);
        system_file_ = sys_.path() + "/ibpshim.ini";
    }
    void TearDown() override { ASSERT_EQ(chdir(cwd_), 0); }

    // Each candidate file sets stack_depth to its own number.
    int load_depth()
    {
        ibp_config_load_lookup(&cfg_, &report_, system_file_.c_str());
        return cfg_.report.stack_depth;
    }

    CleanEnv env_;
    TempDir work_, home_, sys_, named_;
    std::string system_file_;
    char cwd_[4096];
    IbpConfig cfg_;
    IbpConfigReport report_;
};

TEST_F(ConfigLookup, FirstExistingFileWins)
{
    EXPECT_EQ(load_depth(), 8);
    EXPECT_STREQ(report_.file, "");

    sys_.write("ibpshim.ini", "[report]\nstack_depth = 4\n");
    EXPECT_EQ(load_depth(), 4);
    EXPECT_EQ(report_.file, system_file_);

    home_.write(".config/ibpshim/ibpshim.ini", "[report]\nstack_depth = 3\n");
    EXPECT_EQ(load_depth(), 4) << "XDG_CONFIG_HOME is set, so ~/.config is not looked at";
    unsetenv("XDG_CONFIG_HOME");
    EXPECT_EQ(load_depth(), 3);
    setenv("XDG_CONFIG_HOME", "relative/dir", 1);
    EXPECT_EQ(load_depth(), 3) << "a relative XDG_CONFIG_HOME is ignored";
    setenv("XDG_CONFIG_HOME", (home_.path() + "/xdg").c_str(), 1);
    home_.write("xdg/ibpshim/ibpshim.ini", "[report]\nstack_depth = 2\n");
    EXPECT_EQ(load_depth(), 2);

    work_.write("ibpshim.ini", "[report]\nstack_depth = 1\n");
    EXPECT_EQ(load_depth(), 1);
    EXPECT_STREQ(report_.file, "./ibpshim.ini");

    setenv("IBPSHIM_CONFIG", named_.write("named.ini", "[report]\nstack_depth = 0\n").c_str(), 1);
    EXPECT_EQ(load_depth(), 0);
    setenv("IBPSHIM_CONFIG", "", 1);
    EXPECT_EQ(load_depth(), 1) << "an empty IBPSHIM_CONFIG counts as unset";
    EXPECT_EQ(report_.errors, 0u);
}

TEST_F(ConfigLookup, MissingNamedFileIsOneErrorAndStopsTheLookup)
{
    work_.write("ibpshim.ini", "[report]\nstack_depth = 1\n");
    const std::string missing = named_.path() + "/missing.ini";
    setenv("IBPSHIM_CONFIG", missing.c_str(), 1);
    setenv("IBPSHIM_REPORT_FORMAT", "json", 1);
    LogCapture log;
    EXPECT_EQ(load_depth(), 8);
    EXPECT_EQ(cfg_.report.format, IBP_REPORT_FORMAT_JSON) << "environment still applies";
    EXPECT_EQ(report_.errors, 1u);
    EXPECT_EQ(log.lines(), 1u) << log.text();
    EXPECT_EQ(log.count(missing + " (named by IBPSHIM_CONFIG): cannot read it"), 1u) << log.text();
}

TEST_F(ConfigLookup, UnreadableCandidatesAreErrorsNotSkipped)
{
    LogCapture log;
    mkdir((work_.path() + "/ibpshim.ini").c_str(), 0755); // exists, but a directory
    sys_.write("ibpshim.ini", "[report]\nstack_depth = 4\n");
    EXPECT_EQ(load_depth(), 8);
    EXPECT_EQ(report_.errors, 1u);
    EXPECT_EQ(log.count("./ibpshim.ini: cannot read it"), 1u) << log.text();
}

TEST_F(ConfigLookup, OversizedFileIsRefused)
{
    LogCapture log;
    setenv("IBPSHIM_CONFIG", named_.write("big.ini", std::string(IBP_CONFIG_FILE_MAX + 1, ';')).c_str(), 1);
    EXPECT_EQ(load_depth(), 8);
    EXPECT_EQ(report_.errors, 1u);
    EXPECT_EQ(log.count("larger than"), 1u) << log.text();
    EXPECT_EQ(ibp_config_parse_file(&cfg_, &report_, (named_.path() + "/big.ini").c_str()), -EFBIG);

    setenv("IBPSHIM_CONFIG", named_.write("edge.ini", std::string(IBP_CONFIG_FILE_MAX, ';')).c_str(), 1);
    load_depth();
    EXPECT_EQ(report_.errors, 0u) << "exactly the limit is accepted";
}

TEST_F(ConfigLookup, LoadPrintsEachErrorOncePerLoad)
{
    setenv("IBPSHIM_CONFIG", named_.write("bad.ini", "[policy]\nmin_bytes = lots\n[bogus]\n").c_str(), 1);
    LogCapture log;
    load_depth();
    EXPECT_EQ(log.count("min_bytes = 'lots'"), 1u) << log.text();
    EXPECT_EQ(log.count("unknown section [bogus]"), 1u) << log.text();
    EXPECT_EQ(log.lines(), 2u) << log.text();
    load_depth();
    EXPECT_EQ(log.lines(), 4u) << "a second load reports again, once";
}

} // namespace
