/* SPDX-License-Identifier: MIT
 * ibpshim: the report formats: JSON (schema ibpshim-report/4) and the text summary. */
#ifndef IBP_REPORT_WRITER_H
#define IBP_REPORT_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "report/json.h"
#include "report/ledger.h"

#define IBP_REPORT_SCHEMA "ibpshim-report/4"

/* One point of the time series: cumulative process totals at a dump. */
typedef struct IbpReportSample {
    uint64_t elapsed_ns;
    uint64_t copies;
    uint64_t requested;
    uint64_t sent;
    uint64_t compressed_in;
    uint64_t shadow_bytes;
} IbpReportSample;

/* What a report says beside the ledger. */
typedef struct IbpReportMeta {
    const char *reason; /* "exit", "signal", "interval" or "request" */
    uint64_t sequence;  /* 1 for the first report of the process */
    long pid;
    uint64_t time_unix_ns;
    double pcie_gbps; /* for the estimated time saved */
    const IbpReportSample *series;
    size_t series_count;
} IbpReportMeta;

/* The sample a snapshot contributes to the series. */
void ibp_report_sample_of(const IbpLedgerSnapshot *snap, IbpReportSample *out);

/* Writes the report as one JSON document (docs/REPORT.md), resolving site
 * frames with dladdr.  Returns 0 or the first write error (negative errno).
 * Thread-safety: reentrant; not async-signal-safe. */
int ibp_report_format_json(IbpOut *out, const IbpLedgerSnapshot *snap, const IbpReportMeta *meta);

/* Writes the text summary, every line prefixed "ibpshim: ", with the top
 * top_n sites and regions by bytes saved.  Same contract as above. */
int ibp_report_format_text(IbpOut *out, const IbpLedgerSnapshot *snap, const IbpReportMeta *meta, int top_n);

#endif /* IBP_REPORT_WRITER_H */
