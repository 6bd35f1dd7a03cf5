/* SPDX-License-Identifier: MIT
 * ibpshim: process-wide start-up and shut-down of the shim. */
#include "interpose/shim.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include "common/log.h"
#include "ibp_build_config.h"
#include "ibpshim/ibpshim.h"
#include "interpose/router.h"
#include "report/counters.h"
#include "report/ledger.h"
#include "report/report.h"

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static IbpConfig shim_config;
static IbpConfigReport shim_config_report;

/* The log file is opened once and kept for the life of the process. */
static void open_log_file(const char *path)
{
    if (!path[0])
        return;
    const int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        IBP_ERROR("cannot open log file %s; logging to standard error", path);
        return;
    }
    ibp_log_set_fd(fd);
}

static void shim_init_once(void)
{
    /* Errors in the configuration itself are reported at the default level. */
    ibp_config_load(&shim_config, &shim_config_report);
    ibp_log_set_level(shim_config.shim.log_level);
    open_log_file(shim_config.shim.log_file);
    if (!shim_config.shim.enabled) {
        IBP_INFO("disabled by configuration ([shim] enabled = false): every call is forwarded unchanged");
        return;
    }
    IbpReportOptions ro;
    ibp_report_options_default(&ro);
    ro.path = shim_config.report.path;
    ro.log_format = (IbpReportLogFormat)shim_config.report.format;
    ro.log_path = shim_config.shim.log_file;
    ro.on_exit = shim_config.report.on_exit;
    ro.signal_number = shim_config.report.signal_number;
    ro.interval_ns = shim_config.report.interval_ns;
    ro.stack_depth = shim_config.report.stack_depth;
    const int err = ibp_report_start(&ro);
    if (err)
        IBP_WARN("transfer reports are off (%d)", err);
    ibp_router_start(&shim_config);
    IBP_DEBUG("libibpshim %s loaded (compressed path %s)", IBP_VERSION,
              IBP_HAVE_KERNELS ? "built" : "not built: library compiled without decode kernels");
}

void ibp_shim_init(void)
{
    pthread_once(&init_once, shim_init_once);
}

const IbpConfig *ibp_shim_config(void)
{
    ibp_shim_init();
    return &shim_config;
}

__attribute__((constructor)) static void shim_constructor(void)
{
    ibp_shim_init();
}

static int cuda_calls_seen(void)
{
    IbpshimCallCount c[IBPSHIM_CALL_KIND_COUNT];
    const size_t n = ibpshim_call_counts(c, IBPSHIM_CALL_KIND_COUNT);
    for (size_t k = 0; k < n; k++)
        if (c[k].calls)
            return 1;
    return 0;
}

/* A process that made no CUDA call the shim intercepts (a shell or a launcher that inherited
 * LD_PRELOAD) writes no exit report: it would replace the report of the program it ran.  One
 * that never copied from a tracked region gets none either unless a JSON report was asked for:
 * the shim stays silent in programs it does not help. */
static int exit_report_wanted(void)
{
    if (!cuda_calls_seen())
        return 0;
    if (shim_config.report.path[0])
        return 1;
    IbpLedgerSnapshot *snap = NULL;
    if (ibp_ledger_snapshot(&snap))
        return 0;
    const int any = snap->total.copies > 0;
    ibp_ledger_snapshot_free(&snap);
    return any;
}

__attribute__((destructor)) static void shim_destructor(void)
{
    ibp_router_stop();
    if (exit_report_wanted())
        ibp_report_at_exit();
    else
        ibp_report_stop();
    ibp_counters_log();
}

__attribute__((visibility("default"))) const char *ibpshim_version(void)
{
    return IBP_VERSION;
}

__attribute__((visibility("default"))) int ibpshim_transfer_totals(IbpshimTransferTotals *out)
{
    IbpLedgerSnapshot *snap = NULL;
    const int err = ibp_ledger_snapshot(&snap);
    if (err)
        return err;
    out->copies = snap->total.copies;
    out->requested = snap->total.requested;
    out->sent = ibp_ledger_totals_sent(&snap->total);
    out->compressed_in = snap->total.compressed_in;
    out->compressed_out = snap->total.compressed_out;
    ibp_ledger_snapshot_free(&snap);
    return 0;
}

__attribute__((visibility("default"))) int ibpshim_report_now(void)
{
    return ibp_report_write("request");
}

__attribute__((visibility("default"))) int ibpshim_compression_built(void)
{
    return IBP_HAVE_KERNELS;
}
