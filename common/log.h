/* SPDX-License-Identifier: MIT
 * ibpshim: logging that never allocates and never re-enters CUDA or the hooks. */
#ifndef IBP_COMMON_LOG_H
#define IBP_COMMON_LOG_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Levels are ordered by how often messages fire: error and warn are rare and
 * always actionable; info is once per run (start-up, exit counts); debug is per
 * region; trace is per copy. */
typedef enum IbpLogLevel {
    IBP_LOG_OFF = -1,
    IBP_LOG_ERROR = 0,
    IBP_LOG_WARN = 1,
    IBP_LOG_INFO = 2,
    IBP_LOG_DEBUG = 3,
    IBP_LOG_TRACE = 4,
} IbpLogLevel;

/* Parses "off", "error", "warn"/"warning", "info", "debug", "trace" or a digit
 * 0-4, case-insensitive.  Returns the level, or -EINVAL. */
int ibp_log_level_parse(const char *text);

const char *ibp_log_level_name(IbpLogLevel level);

/* Thread-safety: the level and the output fd are atomics; set them at any time. */
void ibp_log_set_level(IbpLogLevel level);
IbpLogLevel ibp_log_get_level(void);

/* Messages go to fd (default 2).  The caller keeps ownership of fd. */
void ibp_log_set_fd(int fd);

/* Reads IBPSHIM_LOG_LEVEL once.  Safe to call from any thread, any number of times. */
void ibp_log_init_from_env(void);

/* Formats "ibpshim: <level>: <message>\n" into a fixed stack buffer and writes
 * it with one write(2).  Messages longer than the buffer are truncated.  A
 * message logged while the same thread is already logging is dropped.  Not
 * async-signal-safe: use ibp_log_signal_safe() from signal handlers. */
void ibp_log(IbpLogLevel level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ibp_log_v(IbpLogLevel level, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* Writes "ibpshim: " + text + "\n" with write(2) only; async-signal-safe. */
void ibp_log_signal_safe(const char *text);

/* Warnings are capped per process: after IBP_LOG_WARN_CAP warnings one line
 * says further warnings are suppressed.  Returns 1 if the caller may warn. */
#define IBP_LOG_WARN_CAP 100
int ibp_log_warn_allowed(void);

#define IBP_LOG_ENABLED(level) ((int)(level) <= (int)ibp_log_get_level())

#define IBP_ERROR(...) ibp_log(IBP_LOG_ERROR, __VA_ARGS__)
#define IBP_WARN(...)                                                                               \
    do {                                                                                            \
        if (IBP_LOG_ENABLED(IBP_LOG_WARN) && ibp_log_warn_allowed())                                \
            ibp_log(IBP_LOG_WARN, __VA_ARGS__);                                                     \
    } while (0)
#define IBP_INFO(...)                                                                               \
    do {                                                                                            \
        if (IBP_LOG_ENABLED(IBP_LOG_INFO))                                                          \
            ibp_log(IBP_LOG_INFO, __VA_ARGS__);                                                     \
    } while (0)
#define IBP_DEBUG(...)                                                                              \
    do {                                                                                            \
        if (IBP_LOG_ENABLED(IBP_LOG_DEBUG))                                                         \
            ibp_log(IBP_LOG_DEBUG, __VA_ARGS__);                                                    \
    } while (0)
#define IBP_TRACE(...)                                                                              \
    do {                                                                                            \
        if (IBP_LOG_ENABLED(IBP_LOG_TRACE))                                                         \
            ibp_log(IBP_LOG_TRACE, __VA_ARGS__);                                                    \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif /* IBP_COMMON_LOG_H */
