/* SPDX-License-Identifier: MIT
 * ibpshim: logging into a fixed stack buffer, one write(2) per message. */
#include "common/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define IBP_LOG_LINE_MAX 1024

static _Atomic int log_level = IBP_LOG_WARN;
static _Atomic int log_fd = 2;
static _Atomic unsigned warn_count;
static _Thread_local int in_log;

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

const char *ibp_log_level_name(IbpLogLevel level)
{
    if (level == IBP_LOG_OFF)
        return "off";
    if (level < IBP_LOG_ERROR || level > IBP_LOG_TRACE)
        return "?";
    return level_names[level];
}

int ibp_log_level_parse(const char *text)
{
    if (!text || !*text)
        return -EINVAL;
    if (text[0] >= '0' && text[0] <= '4' && text[1] == '\0')
        return text[0] - '0';
    if (!strcasecmp(text, "off") || !strcasecmp(text, "none") || !strcasecmp(text, "quiet"))
        return IBP_LOG_OFF;
    if (!strcasecmp(text, "warning"))
        return IBP_LOG_WARN;
    for (int i = IBP_LOG_ERROR; i <= IBP_LOG_TRACE; i++)
        if (!strcasecmp(text, level_names[i]))
            return i;
    return -EINVAL;
}

void ibp_log_set_level(IbpLogLevel level)
{
    atomic_store(&log_level, (int)level);
}

IbpLogLevel ibp_log_get_level(void)
{
    return (IbpLogLevel)atomic_load_explicit(&log_level, memory_order_relaxed);
}

void ibp_log_set_fd(int fd)
{
    atomic_store(&log_fd, fd);
}

static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static void read_env_level(void)
{
    const char *text = getenv("IBPSHIM_LOG_LEVEL");
    if (!text)
        return;
    const int level = ibp_log_level_parse(text);
    if (level == -EINVAL) {
        ibp_log(IBP_LOG_WARN, "IBPSHIM_LOG_LEVEL=%s is not a level (off, error, warn, info, debug, trace); keeping %s",
                text, ibp_log_level_name(ibp_log_get_level()));
        return;
    }
    ibp_log_set_level((IbpLogLevel)level);
}

void ibp_log_init_from_env(void)
{
    pthread_once(&env_once, read_env_level);
}

static void write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        const ssize_t n = write(fd, buf, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        buf += n;
        len -= (size_t)n;
    }
}

void ibp_log_v(IbpLogLevel level, const char *fmt, va_list ap)
{
    if (!IBP_LOG_ENABLED(level) || in_log)
        return;
    in_log = 1;
    const int saved_errno = errno;
    char line[IBP_LOG_LINE_MAX];
    int len = snprintf(line, sizeof(line), "ibpshim: %s: ", ibp_log_level_name(level));
    if (len < 0)
        len = 0;
    const int body = vsnprintf(line + len, sizeof(line) - (size_t)len, fmt, ap);
    if (body > 0)
        len += body;
    if (len > (int)sizeof(line) - 1)
        len = (int)sizeof(line) - 1;
    line[len++] = '\n';
    write_all(atomic_load(&log_fd), line, (size_t)len);
    errno = saved_errno;
    in_log = 0;
}

void ibp_log(IbpLogLevel level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ibp_log_v(level, fmt, ap);
    va_end(ap);
}

void ibp_log_signal_safe(const char *text)
{
    static const char prefix[] = "ibpshim: ";
    const int fd = atomic_load(&log_fd);
    write_all(fd, prefix, sizeof(prefix) - 1);
    write_all(fd, text, strlen(text));
    write_all(fd, "\n", 1);
}

int ibp_log_warn_allowed(void)
{
    const unsigned n = atomic_fetch_add(&warn_count, 1) + 1;
    if (n < IBP_LOG_WARN_CAP)
        return 1;
    if (n == IBP_LOG_WARN_CAP)
        ibp_log(IBP_LOG_WARN, "%d warnings so far; further warnings are suppressed", IBP_LOG_WARN_CAP);
    return 0;
}
