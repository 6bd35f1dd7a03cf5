// SPDX-License-Identifier: MIT
// ibpshim: reports on a signal under load, at an interval, at exit, across fork, and signal chaining.
#include <gtest/gtest.h>

#include <jansson.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "schema_check.h"

extern "C" {
#include "report/ledger.h"
#include "report/report.h"
}

namespace
{

class TempDir
{
  public:
    TempDir()
    {
        char tmpl[] = "/tmp/ibp-report-test-XXXXXX";
        const char *dir = mkdtemp(tmpl);
        EXPECT_NE(dir, nullptr);
        path_ = dir ? dir : "/tmp";
    }
    ~TempDir()
    {
        EXPECT_EQ(system(("rm -rf '" + path_ + "'").c_str()), 0);
    }
    std::string file(const char *name) const
    {
        return path_ + "/" + name;
    }

  private:
    std::string path_;
};

bool wait_for(const std::function<bool()> &cond, int ms = 5000)
{
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (!cond()) {
        if (std::chrono::steady_clock::now() > deadline)
            return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return true;
}

std::string slurp(const std::string &path)
{
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

json_t *load_valid_report(const std::string &path)
{
    json_error_t err;
    json_t *doc = json_load_file(path.c_str(), JSON_REJECT_DUPLICATES, &err);
    EXPECT_NE(doc, nullptr) << path << ": " << err.text;
    if (!doc)
        return nullptr;
    const char *root = getenv("IBPSHIM_SOURCE_ROOT");
    json_t *schema =
        json_load_file((std::string(root ? root : ".") + "/docs/report.schema.json").c_str(), 0, &err);
    EXPECT_NE(schema, nullptr) << err.text;
    if (schema) {
        IbpSchemaCheck check(schema);
        for (const auto &e : check.validate(doc))
            ADD_FAILURE() << path << ": " << e;
        json_decref(schema);
    }
    return doc;
}

IbpReportOptions options(const TempDir &dir)
{
    IbpReportOptions o;
    ibp_report_options_default(&o);
    o.on_exit = 0;
    o.log_path = nullptr;
    static std::string path, log;
    path = dir.file("report.json");
    log = dir.file("report.log");
    o.path = path.c_str();
    o.log_path = log.c_str();
    return o;
}

// Threads that record copies until stopped.
class Load
{
  public:
    explicit Load(int threads)
    {
        static char buffers[16][256];
        for (int t = 0; t < threads; t++)
            workers_.emplace_back([this, t] {
                IbpLedgerRegion *r =
                    ibp_ledger_region_open(buffers[t], sizeof(buffers[t]), 0, IBP_SITE_UNKNOWN);
                while (!stop_.load(std::memory_order_relaxed)) {
                    ibp_ledger_copy(r, 256);
                    ibp_ledger_compressed(r, 200, 50);
                    ibp_ledger_raw(r, IBP_RAW_STALE, 56);
                    copies_.fetch_add(1, std::memory_order_relaxed);
                }
                ibp_ledger_region_close(&r);
            });
    }
    ~Load()
    {
        stop_ = true;
        for (auto &w : workers_)
            w.join();
    }
    uint64_t copies() const
    {
        return copies_.load();
    }

  private:
    std::atomic<bool> stop_{false};
    std::atomic<uint64_t> copies_{0};
    std::vector<std::thread> workers_;
};

std::atomic<int> app_handler_calls{0};
void app_handler(int)
{
    app_handler_calls++;
}

} // namespace

TEST(ReportStart, RejectsBadArgumentsAndDoubleStart)
{
    EXPECT_EQ(ibp_report_start(nullptr), -EINVAL);
    EXPECT_EQ(ibp_report_write(nullptr), -ENODEV);
    IbpReportOptions o;
    ibp_report_options_default(&o);
    o.signal_number = SIGINT;
    EXPECT_EQ(ibp_report_start(&o), -EINVAL);
    o.signal_number = 0;
    o.on_exit = 0;
    o.log_path = "/dev/null";
    ASSERT_EQ(ibp_report_start(&o), 0);
    EXPECT_EQ(ibp_report_start(&o), -EALREADY);
    EXPECT_EQ(ibp_report_write("request"), 0);
    ibp_report_stop();
    EXPECT_EQ(ibp_report_write(nullptr), -ENODEV);
    ibp_report_stop();
}

TEST(ReportSignal, DumpsUnderLoadProduceValidReports)
{
    TempDir dir;
    IbpReportOptions o = options(dir);
    o.signal_number = SIGUSR1;
    ASSERT_EQ(ibp_report_start(&o), 0);
    {
        Load load(6);
        uint64_t last_copies = 0, last_sequence = 0;
        for (int i = 0; i < 5; i++) {
            ASSERT_TRUE(wait_for([&] { return load.copies() > (uint64_t)(i + 1) * 1000; }));
            const uint64_t before = ibp_report_count();
            ASSERT_EQ(kill(getpid(), SIGUSR1), 0);
            ASSERT_TRUE(wait_for([&] { return ibp_report_count() > before; })) << "no report after SIGUSR1";
            json_t *doc = load_valid_report(o.path);
            ASSERT_NE(doc, nullptr);
            EXPECT_STREQ(json_string_value(json_object_get(doc, "reason")), "signal");
            const uint64_t seq = (uint64_t)json_integer_value(json_object_get(doc, "sequence"));
            const uint64_t copies =
                (uint64_t)json_integer_value(json_object_get(json_object_get(doc, "totals"), "copies"));
            EXPECT_GT(seq, last_sequence);
            EXPECT_GE(copies, last_copies);
            last_sequence = seq;
            last_copies = copies;
            json_decref(doc);
        }
    }
    ibp_report_stop();
    // The text summary of each signal dump went to the log file.
    const std::string log = slurp(dir.file("report.log"));
    EXPECT_NE(log.find("ibpshim: transfer report (signal #5"), std::string::npos) << log;
    // The handler is gone: the default action is back (ignore it for this check).
    struct sigaction current;
    ASSERT_EQ(sigaction(SIGUSR1, nullptr, &current), 0);
    EXPECT_EQ(current.sa_handler, SIG_DFL);
}

TEST(ReportSignal, ChainsToTheHandlerInstalledBefore)
{
    TempDir dir;
    struct sigaction app = {}, old;
    app.sa_handler = app_handler;
    sigemptyset(&app.sa_mask);
    ASSERT_EQ(sigaction(SIGUSR2, &app, &old), 0);
    app_handler_calls = 0;

    IbpReportOptions o = options(dir);
    o.signal_number = SIGUSR2;
    ASSERT_EQ(ibp_report_start(&o), 0);
    const uint64_t before = ibp_report_count();
    ASSERT_EQ(kill(getpid(), SIGUSR2), 0);
    ASSERT_TRUE(wait_for([&] { return ibp_report_count() > before; }));
    ASSERT_TRUE(wait_for([&] { return app_handler_calls.load() >= 1; }));
    EXPECT_EQ(app_handler_calls.load(), 1);
    ibp_report_stop();

    struct sigaction current;
    ASSERT_EQ(sigaction(SIGUSR2, nullptr, &current), 0);
    EXPECT_EQ(current.sa_handler, app_handler);
    ASSERT_EQ(sigaction(SIGUSR2, &old, nullptr), 0);
}

TEST(ReportSignal, ApplicationHandlerInstalledLaterKeepsItsSignal)
{
    TempDir dir;
    IbpReportOptions o = options(dir);
    o.signal_number = SIGUSR1;
    ASSERT_EQ(ibp_report_start(&o), 0);
    struct sigaction app = {}, ours;
    app.sa_handler = app_handler;
    sigemptyset(&app.sa_mask);
    ASSERT_EQ(sigaction(SIGUSR1, &app, &ours), 0);
    app_handler_calls = 0;
    const uint64_t before = ibp_report_count();
    ASSERT_EQ(kill(getpid(), SIGUSR1), 0);
    ASSERT_TRUE(wait_for([&] { return app_handler_calls.load() == 1; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(ibp_report_count(), before);
    ibp_report_stop();
    // Stopping leaves the application's handler alone.
    struct sigaction current;
    ASSERT_EQ(sigaction(SIGUSR1, nullptr, &current), 0);
    EXPECT_EQ(current.sa_handler, app_handler);
    signal(SIGUSR1, SIG_DFL);
}

TEST(ReportInterval, AppendsATimeSeriesToTheFileOnly)
{
    TempDir dir;
    IbpReportOptions o = options(dir);
    o.signal_number = 0;
    o.interval_ns = 20 * 1000 * 1000;
    const uint64_t before = ibp_report_count();
    ASSERT_EQ(ibp_report_start(&o), 0);
    {
        Load load(2);
        ASSERT_TRUE(wait_for([&] { return ibp_report_count() >= before + 4; }));
    }
    ASSERT_EQ(ibp_report_write(nullptr), 0);
    ibp_report_stop();
    json_t *doc = load_valid_report(o.path);
    ASSERT_NE(doc, nullptr);
    // The interval thread may replace the requested dump before it is stopped: either is the
    // latest full report.
    const std::string reason = json_string_value(json_object_get(doc, "reason"));
    EXPECT_TRUE(reason == "request" || reason == "interval") << reason;
    json_t *series = json_object_get(doc, "series");
    ASSERT_GE(json_array_size(series), 5u);
    uint64_t last_t = 0, last_req = 0;
    size_t i;
    json_t *p;
    json_array_foreach (series, i, p) {
        const uint64_t t = (uint64_t)json_integer_value(json_object_get(p, "elapsed_ns"));
        const uint64_t req = (uint64_t)json_integer_value(json_object_get(p, "requested_bytes"));
        EXPECT_GE(t, last_t);
        EXPECT_GE(req, last_req);
        last_t = t;
        last_req = req;
    }
    json_decref(doc);
    // Interval dumps went to the file; the log only has the requested one.
    const std::string log = slurp(dir.file("report.log"));
    EXPECT_EQ(log.find("(interval"), std::string::npos) << log;
    EXPECT_NE(log.find("(request"), std::string::npos) << log;
}

TEST(ReportExit, WritesOnceAndNeverInAForkedChild)
{
    TempDir dir;
    IbpReportOptions o = options(dir);
    o.on_exit = 1;
    o.log_format = IBP_REPORT_LOG_JSON;
    o.signal_number = SIGUSR1;
    ASSERT_EQ(ibp_report_start(&o), 0);
    ibp_ledger_copy_raw(nullptr, IBP_RAW_NOT_PINNED, 5);

    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        ibp_report_at_exit();
        const int write_rc = ibp_report_write(nullptr);
        // A signal in the child reaches the chained default only (ignored here), never the parent's thread.
        signal(SIGUSR1, SIG_IGN);
        _exit(write_rc == -ECHILD && access(o.path, F_OK) != 0 ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
    EXPECT_NE(access(o.path, F_OK), 0) << "the child wrote a report";

    const uint64_t before = ibp_report_count();
    ibp_report_at_exit();
    EXPECT_EQ(ibp_report_count(), before + 1);
    ibp_report_at_exit();
    EXPECT_EQ(ibp_report_count(), before + 1);
    json_t *doc = load_valid_report(o.path);
    ASSERT_NE(doc, nullptr);
    EXPECT_STREQ(json_string_value(json_object_get(doc, "reason")), "exit");
    json_decref(doc);
    // The log got the same report as JSON.
    json_t *logged = load_valid_report(dir.file("report.log"));
    EXPECT_NE(logged, nullptr);
    json_decref(logged);
    ibp_report_stop();
}

TEST(ReportExit, ProcessExitsPromptlyWithTheThreadBusy)
{
    TempDir dir;
    const std::string path = dir.file("exit.json");
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        IbpReportOptions o;
        ibp_report_options_default(&o);
        o.path = path.c_str();
        o.log_path = "/dev/null";
        o.interval_ns = 1000 * 1000;
        if (ibp_report_start(&o) != 0)
            _exit(3);
        atexit(ibp_report_at_exit);
        static Load *load = new Load(3);
        for (int i = 0; i < 20; i++) {
            kill(getpid(), SIGUSR1);
            usleep(2000);
        }
        (void)load; // still running: exit() must not wait for the workers or hang on the report thread
        exit(0);
    }
    int status = 0;
    pid_t done = 0;
    ASSERT_TRUE(wait_for([&] { return (done = waitpid(child, &status, WNOHANG)) == child; }, 20000))
        << "the process did not exit";
    ASSERT_TRUE(WIFEXITED(status)) << "signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 0);
    json_t *doc = load_valid_report(path);
    ASSERT_NE(doc, nullptr);
    EXPECT_STREQ(json_string_value(json_object_get(doc, "reason")), "exit");
    EXPECT_GT(json_array_size(json_object_get(doc, "series")), 2u);
    json_decref(doc);
}
