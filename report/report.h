/* SPDX-License-Identifier: MIT
 * ibpshim: when and where transfer reports are written: at exit, on a signal, at an interval. */
#ifndef IBP_REPORT_REPORT_H
#define IBP_REPORT_REPORT_H

#include <stdint.h>

/* What goes to the log destination (the JSON file always gets JSON). */
typedef enum IbpReportLogFormat {
    IBP_REPORT_LOG_TEXT = 0,
    IBP_REPORT_LOG_JSON = 1,
} IbpReportLogFormat;

#define IBP_REPORT_DEFAULT_PCIE_GBPS 55.5
#define IBP_REPORT_DEFAULT_TOP 10
/* Samples kept for the time series; when full, every other old sample is dropped. */
#define IBP_REPORT_SERIES_MAX 512

typedef struct IbpReportOptions {
    const char *path;              /* JSON report, replaced atomically at every dump; NULL or "" = none */
    IbpReportLogFormat log_format; /* the report written to the log destination */
    const char *log_path;          /* log destination, opened for append at each dump; NULL or "" = stderr */
    int on_exit;                   /* write a report from ibp_report_at_exit() */
    int signal_number;             /* 0 = no handler, else SIGUSR1 or SIGUSR2 */
    uint64_t interval_ns;          /* 0 = no periodic report */
    int stack_depth;               /* frames per allocation site, 0 to IBP_SITE_MAX_DEPTH */
    double pcie_gbps;              /* for the estimated time saved; <= 0 means the default */
    int top_n;                     /* sites and regions listed in the text summary; <= 0 means the default */
} IbpReportOptions;

/* Defaults: no JSON file, text to stderr, on_exit, SIGUSR1, no interval,
 * depth 8, IBP_REPORT_DEFAULT_PCIE_GBPS, IBP_REPORT_DEFAULT_TOP. */
void ibp_report_options_default(IbpReportOptions *opts);

/* Starts reporting with opts (strings are copied).  Sets the site depth;
 * with a signal or an interval, creates the report thread (all signals
 * blocked in it) and, for a signal, installs a handler that only writes to an
 * eventfd and then calls the handler that was installed before it.  A handler
 * the application installs later replaces ours: the application keeps its
 * signal and reports then come only at exit and at the interval.
 * Returns 0; -EALREADY when started; -EINVAL for a bad signal or NULL opts;
 * -ENOMEM; or the negative errno of eventfd, pthread_create or sigaction
 * (nothing is left installed then).  Thread-safety: call from one thread
 * (library constructor or first hook), not concurrently with _stop. */
int ibp_report_start(const IbpReportOptions *opts);

/* Writes a report now from the calling thread with the given reason
 * ("request" when NULL): the JSON file when a path is set, and the log.
 * Returns 0, -ENODEV when not started, -ECHILD in a child forked after start
 * (reports belong to the process that started them), or the first I/O error.
 * Reports are serialized; a copy is never blocked. */
int ibp_report_write(const char *reason);

/* For the library destructor: stops the thread (waits up to 2 s), writes the
 * "exit" report when on_exit is set, restores the signal handler if ours is
 * still installed.  Does nothing when not started, in a forked child, or the
 * second time.  Never blocks for more than a few seconds. */
void ibp_report_at_exit(void);

/* Like ibp_report_at_exit() without the report; afterwards _start may be called
 * again (tests).  The ledger keeps its counters. */
void ibp_report_stop(void);

/* Reports written since the process started (any reason). */
uint64_t ibp_report_count(void);

#endif /* IBP_REPORT_REPORT_H */
