// SPDX-License-Identifier: MIT
// ibpshim: ibp-report against golden outputs, malformed and truncated inputs.
// Usage: test_report_tool TOOL GOLDEN_DIR [gtest flags]; IBP_UPDATE_GOLDEN=1 rewrites the golden files.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace
{

std::string tool_path;
std::string golden_dir;
std::string work_dir;

struct Result {
    int status = -1; // exit code, or 128 + signal
    std::string out;
    std::string err;
};

std::string slurp(const std::string &path)
{
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

void spit(const std::string &path, const std::string &data)
{
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << data;
}

// Runs ibp-report with args in directory cwd.
Result run(const std::vector<std::string> &args, const std::string &cwd)
{
    const std::string out_path = work_dir + "/stdout", err_path = work_dir + "/stderr";
    const pid_t pid = fork();
    if (pid == 0) {
        const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (out < 0 || err < 0 || chdir(cwd.c_str()) != 0)
            _exit(120);
        dup2(out, 1);
        dup2(err, 2);
        std::vector<char *> argv;
        argv.push_back(const_cast<char *>(tool_path.c_str()));
        for (const auto &a : args)
            argv.push_back(const_cast<char *>(a.c_str()));
        argv.push_back(nullptr);
        execv(tool_path.c_str(), argv.data());
        _exit(121);
    }
    Result r;
    int status = 0;
    EXPECT_EQ(waitpid(pid, &status, 0), pid);
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = slurp(out_path);
    r.err = slurp(err_path);
    return r;
}

void expect_golden(const std::string &name, const std::string &actual)
{
    const std::string path = golden_dir + "/" + name;
    if (getenv("IBP_UPDATE_GOLDEN")) {
        spit(path, actual);
        return;
    }
    const std::string expected = slurp(path);
    ASSERT_FALSE(expected.empty()) << path << " is missing (IBP_UPDATE_GOLDEN=1 writes it)";
    if (expected != actual) {
        spit(work_dir + "/" + name, actual);
        ADD_FAILURE() << name << " differs from the golden file; got " << work_dir << "/" << name;
    }
}

// A failure is one line on stderr starting "ibp-report: ", nothing on stdout, exit status 2.
void expect_clean_error(const Result &r, const std::string &what)
{
    EXPECT_EQ(r.status, 2) << what << ": " << r.err;
    EXPECT_EQ(r.out, "") << what;
    EXPECT_EQ(r.err.rfind("ibp-report: ", 0), 0u) << what << ": " << r.err;
    ASSERT_FALSE(r.err.empty()) << what;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << what << ": " << r.err;
}

} // namespace

TEST(ReportTool, TableMatchesGolden)
{
    const Result r = run({"run-a.json"}, golden_dir);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.err, "");
    expect_golden("run-a.table.txt", r.out);
}

TEST(ReportTool, TableJsonMatchesGolden)
{
    const Result r = run({"--json", "--top", "3", "run-a.json"}, golden_dir);
    ASSERT_EQ(r.status, 0) << r.err;
    expect_golden("run-a.table.json", r.out);
}

TEST(ReportTool, SvgMatchesGolden)
{
    for (const char *run_name : {"run-a", "run-b"}) {
        const std::string svg = work_dir + "/" + run_name + ".svg";
        const Result r = run({"--svg", svg, std::string(run_name) + ".json"}, golden_dir);
        ASSERT_EQ(r.status, 0) << r.err;
        EXPECT_EQ(r.out, "");
        const std::string text = slurp(svg);
        EXPECT_EQ(text.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
        EXPECT_NE(text.find("</svg>\n"), std::string::npos);
        expect_golden(std::string(run_name) + ".svg", text);
    }
}

TEST(ReportTool, DiffMatchesGolden)
{
    const Result r = run({"--diff", "run-a.json", "run-b.json"}, golden_dir);
    ASSERT_EQ(r.status, 0) << r.err;
    expect_golden("a-b.diff.txt", r.out);
    const Result j = run({"--json", "--diff", "run-a.json", "run-b.json"}, golden_dir);
    ASSERT_EQ(j.status, 0) << j.err;
    expect_golden("a-b.diff.json", j.out);
    // A run against itself changes nothing.
    const Result same = run({"--diff", "run-a.json", "run-a.json"}, golden_dir);
    ASSERT_EQ(same.status, 0);
    for (size_t i = 0; i + 2 < same.out.size(); i++)
        EXPECT_FALSE(same.out[i] == ' ' && (same.out[i + 1] == '+' || same.out[i + 1] == '-') &&
                     isdigit((unsigned char)same.out[i + 2]))
            << same.out.substr(i, 20);
}

TEST(ReportTool, UsageErrors)
{
    expect_clean_error(run({"--top", "0", "run-a.json"}, golden_dir), "--top 0");
    expect_clean_error(run({"--svg", "x.svg", "--diff", "run-a.json", "run-b.json"}, golden_dir), "svg+diff");
    const Result none = run({}, golden_dir);
    EXPECT_EQ(none.status, 2);
    EXPECT_NE(none.err.find("usage:"), std::string::npos);
    const Result help = run({"--help"}, golden_dir);
    EXPECT_EQ(help.status, 0);
    EXPECT_NE(help.out.find("--diff"), std::string::npos);
    expect_clean_error(run({"--svg", "/nonexistent/dir/x.svg", "run-a.json"}, golden_dir), "unwritable svg");
}

// run-a.json (schema 4) as an older schema had it: schema 3 without the "slower" raw bytes (the
// last member of each raw_bytes object), schema 2 also without the router's host times and the
// measured DMAs, schema 1 also without the compressor counters.
static std::string as_schema(const std::string &v4, int version)
{
    std::string out;
    size_t start = 0;
    while (start < v4.size()) {
        size_t end = v4.find('\n', start);
        end = end == std::string::npos ? v4.size() : end + 1;
        const std::string line = v4.substr(start, end - start);
        start = end;
        if (version < 4 && line.find("\"slower\":") != std::string::npos) {
            const size_t comma = out.rfind(',');
            out.erase(comma, 1); // the member before it is now the last
            continue;
        }
        bool drop = false;
        for (const char *key :
             {"\"routed_copies\":", "\"lookup_ns\":", "\"enqueue_ns\":", "\"staging_wait_ns\":", "\"dma_ns\":",
              "\"dma_bytes\":"})
            drop |= version < 3 && line.find(key) != std::string::npos;
        for (const char *key :
             {"\"plans\":", "\"plans_reused\":", "\"plan_ns\":", "\"builds\":", "\"build_ns\":"})
            drop |= version < 2 && line.find(key) != std::string::npos;
        if (!drop)
            out += line;
    }
    const std::string v = "\"ibpshim-report/4\"";
    return out.replace(out.find(v), v.size(), "\"ibpshim-report/" + std::to_string(version) + "\"");
}

// Reads run-a.json rewritten to an older schema and returns the tool's output; the same document
// claiming the next schema lacks that schema's fields (`missing`) and must be refused cleanly.
static std::string read_as_schema(int version, const std::string &missing)
{
    const std::string doc = as_schema(slurp(golden_dir + "/run-a.json"), version);
    const std::string path = work_dir + "/run-a-v" + std::to_string(version) + ".json";
    spit(path, doc);
    const Result r = run({path}, work_dir);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("ibpshim-report/" + std::to_string(version)), std::string::npos) << r.out;
    std::string claims_next = doc;
    const std::string v = "\"ibpshim-report/" + std::to_string(version) + "\"";
    spit(path, claims_next.replace(claims_next.find(v), v.size(),
                                   "\"ibpshim-report/" + std::to_string(version + 1) + "\""));
    expect_clean_error(run({path}, work_dir), "schema " + std::to_string(version + 1) + " without " + missing);
    return r.out;
}

TEST(ReportTool, ReadsSchema3WithoutTheSlowerBytes)
{
    const std::string out = read_as_schema(3, "the slower bytes");
    EXPECT_NE(out.find("host per copy"), std::string::npos) << out;
}

TEST(ReportTool, ReadsSchema2WithoutTheRouterTimes)
{
    const std::string out = read_as_schema(2, "the router times");
    EXPECT_NE(out.find("shadow builds"), std::string::npos) << out;
    EXPECT_EQ(out.find("host per copy"), std::string::npos) << out;
}

TEST(ReportTool, ReadsSchema1WithoutTheCompressorCounters)
{
    const std::string out = read_as_schema(1, "the compressor counters");
    EXPECT_EQ(out.find("shadow builds"), std::string::npos) << out;
    EXPECT_EQ(out.find("host per copy"), std::string::npos) << out;
}

TEST(ReportTool, MalformedInputsFailCleanly)
{
    const std::string good = slurp(golden_dir + "/run-a.json");
    ASSERT_FALSE(good.empty());
    auto replaced = [&](const std::string &from, const std::string &to) {
        std::string s = good;
        const size_t at = s.find(from);
        EXPECT_NE(at, std::string::npos) << from;
        return s.replace(at, from.size(), to);
    };
    const struct {
        const char *name;
        std::string text;
        const char *message;
    } cases[] = {
        {"empty", "", "invalid JSON"},
        {"garbage",
         "\x7f"
         "ELF\x01\x02",
         "invalid JSON"},
        {"array", "[1, 2, 3]\n", "not an ibpshim report"},
        {"no-schema", "{\"totals\": {}}\n", "no \"schema\""},
        {"wrong-schema", replaced("ibpshim-report/4", "ibpshim-report/9"),
         "unsupported schema ibpshim-report/9"},
        {"schema-type", replaced("\"ibpshim-report/4\"", "1"), "unsupported schema"},
        {"missing-field", replaced("\"regions_merged\"", "\"regions_mergedX\""),
         "field regions_merged: missing"},
        {"string-number", replaced("\"copies\": 7900", "\"copies\": \"7900\""), "field totals.copies"},
        {"negative", replaced("\"stale\": 335544320", "\"stale\": -1"), "field totals.raw_bytes.stale"},
        {"frame-type", replaced("\"symbol\": \"kv_offload_alloc\"", "\"symbol\": 5"),
         "field sites[1].frames[0].symbol"},
        {"freed-type", replaced("\"freed\": true", "\"freed\": 1"), "field regions[4].freed"},
        {"duplicate-key", replaced("\"pid\": 4242", "\"pid\": 4242, \"pid\": 1"), "invalid JSON"},
        {"nested-garbage", replaced("\"sites\": [", "\"sites\": [7, "), "sites[0]: expected an object"},
    };
    for (const auto &c : cases) {
        const std::string path = work_dir + "/" + c.name + ".json";
        spit(path, c.text);
        const Result r = run({path}, work_dir);
        expect_clean_error(r, c.name);
        EXPECT_NE(r.err.find(c.message), std::string::npos) << c.name << ": " << r.err;
    }
    const Result missing = run({"/nonexistent/report.json"}, work_dir);
    expect_clean_error(missing, "missing file");
    EXPECT_NE(missing.err.find("cannot open"), std::string::npos);
    const Result dir = run({"."}, work_dir);
    expect_clean_error(dir, "directory");
    const Result diff_bad = run({"--diff", golden_dir + "/run-a.json", "/nonexistent/b.json"}, work_dir);
    expect_clean_error(diff_bad, "diff with a missing file");
}

// Every truncation of a valid report, and random byte damage, fails cleanly or succeeds: never a crash.
TEST(ReportTool, TruncatedAndDamagedFilesNeverCrash)
{
    const std::string good = slurp(golden_dir + "/run-a.json");
    ASSERT_GT(good.size(), 1000u);
    const std::string path = work_dir + "/cut.json";
    std::vector<size_t> lengths;
    for (size_t n = 0; n < good.size(); n += 61)
        lengths.push_back(n);
    for (size_t n = good.size() - 40; n < good.size(); n++)
        lengths.push_back(n);
    int failures = 0;
    for (const size_t n : lengths) {
        spit(path, good.substr(0, n));
        const Result r = run({path}, work_dir);
        // Only the whole document (or it without its final newline) is a report.
        if (n + 1 >= good.size()) {
            EXPECT_EQ(r.status, 0) << n << ": " << r.err;
            continue;
        }
        if (r.status != 2 || r.err.find('\n') != r.err.size() - 1)
            failures++;
        EXPECT_EQ(r.status, 2) << "cut at " << n << ": " << r.err;
    }
    EXPECT_EQ(failures, 0);

    std::mt19937 rng(20260501);
    for (int i = 0; i < 120; i++) {
        std::string damaged = good;
        const int flips = 1 + (int)(rng() % 4);
        for (int f = 0; f < flips; f++)
            damaged[rng() % damaged.size()] = (char)(rng() & 0xff);
        spit(path, damaged);
        for (const char *mode : {"", "--svg"}) {
            std::vector<std::string> args;
            if (mode[0])
                args = {"--svg", work_dir + "/damaged.svg", path};
            else
                args = {path};
            const Result r = run(args, work_dir);
            EXPECT_TRUE(r.status == 0 || r.status == 2)
                << "damage " << i << " status " << r.status << ": " << r.err;
            if (r.status == 2) {
                EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
            }
        }
    }
}

int main(int argc, char **argv)
{
    ::testing::InitGoogleTest(&argc, argv);
    if (argc != 3) {
        fprintf(stderr, "usage: %s TOOL GOLDEN_DIR\n", argv[0]);
        return 2;
    }
    tool_path = argv[1];
    golden_dir = argv[2];
    char tmpl[] = "/tmp/ibp-report-tool-XXXXXX";
    if (!mkdtemp(tmpl))
        return 2;
    work_dir = tmpl;
    const int rc = RUN_ALL_TESTS();
    if (rc == 0 && system(("rm -rf '" + work_dir + "'").c_str()) != 0)
        return 1;
    return rc;
}
