/* SPDX-License-Identifier: MIT
 * ibpshim: when and where transfer reports are written: at exit, on a signal, at an interval. */
#include "report/report.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "report/ledger.h"
#include "report/writer.h"

/* Seconds the destructor waits for the report thread or a report in progress. */
#define IBP_REPORT_EXIT_WAIT_S 2

typedef struct IbpReportState {
    IbpReportOptions opts; /* strings owned */
    char *tmp_path;        /* opts.path + ".tmp.<pid>" */
    int started;
    int finished;
    pid_t owner;
    int thread_running;
    pthread_t thread;
    struct sigaction previous;
    int handler_installed;
    IbpReportSample *series;
    size_t series_count;
    uint64_t sequence;
} IbpReportState;

static IbpReportState state;
/* Serializes dumps and guards state.series and state.sequence; never taken by copies. */
static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;
/* Read by the signal handler; -1 when none. */
static _Atomic int wake_fd = -1;
static _Atomic pid_t handler_owner;
static _Atomic int thread_stopping;
static _Atomic uint64_t reports_written;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

void ibp_report_options_default(IbpReportOptions *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->log_format = IBP_REPORT_LOG_TEXT;
    opts->on_exit = 1;
    opts->signal_number = SIGUSR1;
    opts->stack_depth = 8;
    opts->pcie_gbps = IBP_REPORT_DEFAULT_PCIE_GBPS;
    opts->top_n = IBP_REPORT_DEFAULT_TOP;
}

uint64_t ibp_report_count(void)
{
    return atomic_load_explicit(&reports_written, memory_order_relaxed);
}

/* The child has no report thread; the counters it inherited are the parent's
 * to report.  The eventfd is the parent's too: drop our reference. */
static void report_fork_child(void)
{
    pthread_mutex_init(&write_lock, NULL);
    state.thread_running = 0;
    const int fd = atomic_exchange(&wake_fd, -1);
    if (fd >= 0)
        close(fd);
}

static void report_fork_init(void)
{
    pthread_atfork(NULL, NULL, report_fork_child);
}

/* Async-signal-safe: one write(2) to the eventfd, then the previous handler. */
static void report_on_signal(int sig, siginfo_t *info, void *ucontext)
{
    const int saved_errno = errno;
    const int fd = atomic_load_explicit(&wake_fd, memory_order_relaxed);
    if (fd >= 0 && getpid() == atomic_load_explicit(&handler_owner, memory_order_relaxed)) {
        const uint64_t one = 1;
        ssize_t ignored = write(fd, &one, sizeof(one));
        (void)ignored;
    }
    const struct sigaction *prev = &state.previous;
    if (prev->sa_flags & SA_SIGINFO) {
        if (prev->sa_sigaction)
            prev->sa_sigaction(sig, info, ucontext);
    } else if (prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN) {
        prev->sa_handler(sig);
    }
    errno = saved_errno;
}

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Appends the sample; when full, keeps every other one so that old history thins out. */
static void series_append(const IbpReportSample *sample)
{
    if (!state.series)
        return;
    if (state.series_count == IBP_REPORT_SERIES_MAX) {
        size_t kept = 0;
        for (size_t i = 0; i < state.series_count; i += 2)
            state.series[kept++] = state.series[i];
        state.series_count = kept;
    }
    state.series[state.series_count++] = *sample;
}

static int write_json_file(const IbpLedgerSnapshot *snap, const IbpReportMeta *meta)
{
    const int fd = open(state.tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    IbpOut out;
    ibp_out_init(&out, fd);
    int rc = ibp_report_format_json(&out, snap, meta);
    if (close(fd) < 0 && !rc)
        rc = -errno;
    if (!rc && rename(state.tmp_path, state.opts.path) < 0)
        rc = -errno;
    if (rc)
        unlink(state.tmp_path);
    return rc;
}

static int write_log(const IbpLedgerSnapshot *snap, const IbpReportMeta *meta)
{
    const char *log_path = state.opts.log_path;
    int fd = STDERR_FILENO;
    if (log_path) {
        fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0)
            return -errno;
    }
    IbpOut out;
    ibp_out_init(&out, fd);
    int rc;
    if (state.opts.log_format == IBP_REPORT_LOG_JSON)
        rc = ibp_report_format_json(&out, snap, meta);
    else
        rc = ibp_report_format_text(&out, snap, meta, state.opts.top_n);
    if (log_path && close(fd) < 0 && !rc)
        rc = -errno;
    return rc;
}

/* Called with write_lock held. */
static int report_dump_locked(const char *reason)
{
    IbpLedgerSnapshot *snap = NULL;
    int rc = ibp_ledger_snapshot(&snap);
    if (rc)
        return rc;
    IbpReportSample sample;
    ibp_report_sample_of(snap, &sample);
    series_append(&sample);
    const IbpReportMeta meta = {
        .reason = reason,
        .sequence = ++state.sequence,
        .pid = (long)getpid(),
        .time_unix_ns = realtime_ns(),
        .pcie_gbps = state.opts.pcie_gbps,
        .series = state.series,
        .series_count = state.series_count,
    };
    /* The file carries the series; interval dumps go to the log only when there is no file. */
    const int to_file = state.opts.path != NULL;
    const int to_log = !to_file || strcmp(reason, "interval") != 0;
    if (to_file) {
        const int err = write_json_file(snap, &meta);
        if (err) {
            IBP_WARN("cannot write the report to %s: %s", state.opts.path, strerror(-err));
            rc = err;
        }
    }
    if (to_log) {
        const int err = write_log(snap, &meta);
        if (err && !rc)
            rc = err;
    }
    atomic_fetch_add_explicit(&reports_written, 1, memory_order_relaxed);
    ibp_ledger_snapshot_free(&snap);
    return rc;
}

static int report_dump(const char *reason)
{
    pthread_mutex_lock(&write_lock);
    const int rc = report_dump_locked(reason);
    pthread_mutex_unlock(&write_lock);
    return rc;
}

static uint64_t monotonic_ms(void)
{
    return ibp_monotonic_ns() / 1000000u;
}

static void *report_thread(void *arg)
{
    (void)arg;
    const int fd = atomic_load(&wake_fd);
    uint64_t interval_ms = state.opts.interval_ns / 1000000u;
    if (state.opts.interval_ns && !interval_ms)
        interval_ms = 1;
    uint64_t next = monotonic_ms() + interval_ms;
    while (!atomic_load(&thread_stopping)) {
        int timeout = -1;
        if (interval_ms) {
            const uint64_t now = monotonic_ms();
            const uint64_t wait = next > now ? next - now : 0;
            timeout = wait > INT32_MAX ? INT32_MAX : (int)wait;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        const int n = poll(&p, 1, timeout);
        if (atomic_load(&thread_stopping))
            break;
        if (n > 0) {
            uint64_t count;
            if (read(fd, &count, sizeof(count)) == (ssize_t)sizeof(count))
                report_dump("signal");
        } else if (n == 0) {
            report_dump("interval");
            const uint64_t now = monotonic_ms();
            next += interval_ms;
            if (next <= now)
                next = now + interval_ms;
        }
    }
    return NULL;
}

static void state_free(void)
{
    free((char *)state.opts.path);
    free((char *)state.opts.log_path);
    free(state.tmp_path);
    free(state.series);
    memset(&state, 0, sizeof(state));
}

static char *dup_or_null(const char *s)
{
    return s && s[0] ? strdup(s) : NULL;
}

static int start_thread(void)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    const int err = pthread_create(&state.thread, NULL, report_thread, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err)
        return -err;
    pthread_setname_np(state.thread, "ibpshim-report");
    state.thread_running = 1;
    return 0;
}

/* Waits up to IBP_REPORT_EXIT_WAIT_S; a thread stuck in a write is left detached. */
static void stop_thread(void)
{
    if (!state.thread_running)
        return;
    atomic_store(&thread_stopping, 1);
    const uint64_t one = 1;
    ssize_t ignored = write(atomic_load(&wake_fd), &one, sizeof(one));
    (void)ignored;
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += IBP_REPORT_EXIT_WAIT_S;
    if (pthread_timedjoin_np(state.thread, NULL, &deadline)) {
        IBP_WARN("report thread did not stop within %d s; leaving it", IBP_REPORT_EXIT_WAIT_S);
        pthread_detach(state.thread);
    }
    state.thread_running = 0;
}

static void restore_handler(void)
{
    if (!state.handler_installed)
        return;
    struct sigaction current;
    if (sigaction(state.opts.signal_number, NULL, &current) == 0 && (current.sa_flags & SA_SIGINFO) &&
        current.sa_sigaction == report_on_signal)
        sigaction(state.opts.signal_number, &state.previous, NULL);
    state.handler_installed = 0;
}

int ibp_report_start(const IbpReportOptions *opts)
{
    if (!opts)
        return -EINVAL;
    if (opts->signal_number && opts->signal_number != SIGUSR1 && opts->signal_number != SIGUSR2)
        return -EINVAL;
    pthread_once(&fork_once, report_fork_init);
    pthread_mutex_lock(&write_lock);
    int rc = -EALREADY;
    if (state.started)
        goto out;
    state.opts = *opts;
    state.opts.path = dup_or_null(opts->path);
    state.opts.log_path = dup_or_null(opts->log_path);
    if (state.opts.pcie_gbps <= 0)
        state.opts.pcie_gbps = IBP_REPORT_DEFAULT_PCIE_GBPS;
    if (state.opts.top_n <= 0)
        state.opts.top_n = IBP_REPORT_DEFAULT_TOP;
    state.series = calloc(IBP_REPORT_SERIES_MAX, sizeof(*state.series));
    rc = -ENOMEM;
    if ((opts->path && opts->path[0] && !state.opts.path) ||
        (opts->log_path && opts->log_path[0] && !state.opts.log_path) || !state.series)
        goto fail;
    if (state.opts.path) {
        const size_t len = strlen(state.opts.path) + 32;
        state.tmp_path = malloc(len);
        if (!state.tmp_path)
            goto fail;
        snprintf(state.tmp_path, len, "%s.tmp.%ld", state.opts.path, (long)getpid());
    }
    ibp_site_set_depth(opts->stack_depth);
    state.owner = getpid();
    if (opts->signal_number || opts->interval_ns) {
        const int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (fd < 0) {
            rc = -errno;
            goto fail;
        }
        atomic_store(&wake_fd, fd);
        atomic_store(&thread_stopping, 0);
        rc = start_thread();
        if (rc)
            goto fail;
    }
    if (opts->signal_number) {
        struct sigaction action;
        memset(&action, 0, sizeof(action));
        action.sa_sigaction = report_on_signal;
        action.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&action.sa_mask);
        atomic_store(&handler_owner, state.owner);
        if (sigaction(opts->signal_number, &action, &state.previous) < 0) {
            rc = -errno;
            goto fail;
        }
        state.handler_installed = 1;
    }
    state.started = 1;
    rc = 0;
    goto out;

fail:
    /* The thread may be waiting for write_lock to serve an early interval: let it go first. */
    pthread_mutex_unlock(&write_lock);
    stop_thread();
    pthread_mutex_lock(&write_lock);
    {
        const int fd = atomic_exchange(&wake_fd, -1);
        if (fd >= 0)
            close(fd);
    }
    state_free();
out:
    pthread_mutex_unlock(&write_lock);
    return rc;
}

int ibp_report_write(const char *reason)
{
    pthread_mutex_lock(&write_lock);
    int rc;
    if (!state.started)
        rc = -ENODEV;
    else if (getpid() != state.owner)
        rc = -ECHILD;
    else
        rc = report_dump_locked(reason ? reason : "request");
    pthread_mutex_unlock(&write_lock);
    return rc;
}

static int lock_with_deadline(void)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += IBP_REPORT_EXIT_WAIT_S;
    return pthread_mutex_timedlock(&write_lock, &deadline);
}

static void report_shutdown(int final_report)
{
    if (lock_with_deadline()) {
        IBP_WARN("a report is still being written; skipping the exit report");
        return;
    }
    const int active = state.started && !state.finished && getpid() == state.owner;
    if (active)
        state.finished = 1;
    pthread_mutex_unlock(&write_lock);
    if (!active)
        return;
    /* Outside the lock: the thread may be finishing a dump. */
    stop_thread();
    if (lock_with_deadline()) {
        IBP_WARN("a report is still being written; skipping the exit report");
        return;
    }
    if (final_report && state.opts.on_exit)
        report_dump_locked("exit");
    restore_handler();
    pthread_mutex_unlock(&write_lock);
}

void ibp_report_at_exit(void)
{
    report_shutdown(1);
}

void ibp_report_stop(void)
{
    pthread_once(&fork_once, report_fork_init);
    report_shutdown(0);
    if (lock_with_deadline())
        return;
    if (state.started && state.finished && getpid() == state.owner) {
        const int fd = atomic_exchange(&wake_fd, -1);
        if (fd >= 0)
            close(fd);
        state_free();
    }
    pthread_mutex_unlock(&write_lock);
}
