// SPDX-License-Identifier: MIT
// ibpshim: the logger's levels, format, truncation, warning cap and re-entrancy.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <string>

extern "C" {
#include "common/log.h"
}

namespace {

class LogCapture {
public:
    LogCapture()
    {
        EXPECT_EQ(pipe2(fds_, O_NONBLOCK), 0);
        ibp_log_set_fd(fds_[1]);
    }
    ~LogCapture()
    {
        ibp_log_set_fd(2);
        close(fds_[0]);
        close(fds_[1]);
    }
    std::string take()
    {
        std::string out;
        char buf[4096];
        ssize_t n;
        while ((n = read(fds_[0], buf, sizeof(buf))) > 0)
            out.append(buf, (size_t)n);
        return out;
    }

private:
    int fds_[2];
};

TEST(Log, ParsesLevels)
{
    EXPECT_EQ(ibp_log_level_parse("error"), IBP_LOG_ERROR);
    EXPECT_EQ(ibp_log_level_parse("WARN"), IBP_LOG_WARN);
    EXPECT_EQ(ibp_log_level_parse("warning"), IBP_LOG_WARN);
    EXPECT_EQ(ibp_log_level_parse("Info"), IBP_LOG_INFO);
    EXPECT_EQ(ibp_log_level_parse("debug"), IBP_LOG_DEBUG);
    EXPECT_EQ(ibp_log_level_parse("trace"), IBP_LOG_TRACE);
    EXPECT_EQ(ibp_log_level_parse("off"), IBP_LOG_OFF);
    EXPECT_EQ(ibp_log_level_parse("3"), IBP_LOG_DEBUG);
    EXPECT_EQ(ibp_log_level_parse("5"), -EINVAL);
    EXPECT_EQ(ibp_log_level_parse(""), -EINVAL);
    EXPECT_EQ(ibp_log_level_parse(nullptr), -EINVAL);
    EXPECT_EQ(ibp_log_level_parse("loud"), -EINVAL);
    EXPECT_STREQ(ibp_log_level_name(IBP_LOG_INFO), "info");
    EXPECT_STREQ(ibp_log_level_name(IBP_LOG_OFF), "off");
}

TEST(Log, PrefixesAndFiltersByLevel)
{
    LogCapture cap;
    ibp_log_set_level(IBP_LOG_INFO);
    IBP_INFO("hello %d", 42);
    IBP_DEBUG("hidden %d", 1);
    EXPECT_EQ(cap.take(), "ibpshim: info: hello 42\n");
    ibp_log_set_level(IBP_LOG_OFF);
    IBP_ERROR("not even errors");
    EXPECT_EQ(cap.take(), "");
    ibp_log_set_level(IBP_LOG_WARN);
}

TEST(Log, TruncatesLongMessagesToOneLine)
{
    LogCapture cap;
    ibp_log_set_level(IBP_LOG_INFO);
    const std::string big(5000, 'x');
    IBP_INFO("%s", big.c_str());
    const std::string out = cap.take();
    EXPECT_LE(out.size(), 1024u);
    EXPECT_EQ(out.rfind("ibpshim: info: xxx", 0), 0u);
    EXPECT_EQ(out.back(), '\n');
    EXPECT_EQ(out.find('\n'), out.size() - 1);
    ibp_log_set_level(IBP_LOG_WARN);
}

TEST(Log, SignalSafeWriter)
{
    LogCapture cap;
    ibp_log_signal_safe("fault handled");
    EXPECT_EQ(cap.take(), "ibpshim: fault handled\n");
}

TEST(Log, PreservesErrno)
{
    LogCapture cap;
    ibp_log_set_level(IBP_LOG_INFO);
    errno = ERANGE;
    IBP_INFO("x");
    EXPECT_EQ(errno, ERANGE);
    ibp_log_set_level(IBP_LOG_WARN);
}

// Last in this file: it exhausts the process-wide warning budget.
TEST(Log, CapsWarnings)
{
    LogCapture cap;
    ibp_log_set_level(IBP_LOG_WARN);
    for (int i = 0; i < IBP_LOG_WARN_CAP + 50; i++)
        IBP_WARN("warning %d", i);
    const std::string out = cap.take();
    size_t lines = 0;
    for (char c : out)
        lines += c == '\n';
    EXPECT_EQ(lines, (size_t)IBP_LOG_WARN_CAP);
    EXPECT_NE(out.find("further warnings are suppressed"), std::string::npos);
}

} // namespace
