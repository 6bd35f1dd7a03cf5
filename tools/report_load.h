/* SPDX-License-Identifier: MIT
 * ibpshim: reading a transfer report (JSON, schemas 1 to 4) for ibp-report and its fuzz target. */
#ifndef IBP_TOOLS_REPORT_LOAD_H
#define IBP_TOOLS_REPORT_LOAD_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* Reports of schema 1 lack the compressor counters (plans, builds), 2 has them; 3 adds the router's
 * host times and the measured DMAs. */
#define IBP_VIEW_SCHEMA "ibpshim-report/4"
#define IBP_VIEW_SCHEMA_V3 "ibpshim-report/3"
#define IBP_VIEW_SCHEMA_V2 "ibpshim-report/2"
#define IBP_VIEW_SCHEMA_V1 "ibpshim-report/1"
#define IBP_VIEW_REASONS 11
/* Reasons older schemas lack (read as 0 from them): "slower" came with /4. */
#define IBP_VIEW_REASONS_V3 10
#define IBP_VIEW_LABEL_MAX 160
#define IBP_VIEW_KEY_MAX 2048

/* The report schema's raw-byte reasons, in schema order. */
extern const char *const ibp_view_reason_names[IBP_VIEW_REASONS];

typedef struct IbpViewCounters {
    uint64_t copies;
    uint64_t requested;
    uint64_t sent;
    int64_t saved;
    double ratio;
    uint64_t compressed;
    uint64_t compressed_wire;
    double compression_ratio;
    uint64_t raw_total;
    uint64_t raw[IBP_VIEW_REASONS];
    uint64_t invalidations;
    uint64_t recompressions;
    uint64_t evictions;
    uint64_t evicted_bytes;
    uint64_t tracking_ns;
    uint64_t routed; /* schema 3 */
    uint64_t lookup_ns;
    uint64_t enqueue_ns;
    uint64_t staging_wait_ns;
    uint64_t dma_ns;
    uint64_t dma_bytes;
    uint64_t decode_ns;
    uint64_t decoded_bytes;
    uint64_t shadow_bytes;
    uint64_t shadow_peak;
    uint64_t plans; /* schema 2 */
    uint64_t plans_reused;
    uint64_t plan_ns;
    uint64_t builds;
    uint64_t build_ns;
    double time_saved_s;
} IbpViewCounters;

typedef struct IbpViewSite {
    uint64_t id;
    uint64_t regions;
    uint64_t regions_live;
    IbpViewCounters c;
    char label[IBP_VIEW_LABEL_MAX];
    char key[IBP_VIEW_KEY_MAX]; /* frames without addresses: matches a site across runs */
} IbpViewSite;

typedef struct IbpViewRegion {
    uint64_t id;
    const char *base;
    uint64_t size;
    uint64_t site;
    int freed;
    IbpViewCounters c;
} IbpViewRegion;

typedef struct IbpViewSample {
    uint64_t elapsed_ns;
    uint64_t requested;
    uint64_t sent;
} IbpViewSample;

typedef struct IbpViewReport {
    const char *file;
    json_t *root; /* owns the strings below */
    const char *schema;
    int version; /* 1 or 2 */
    const char *generator;
    const char *reason;
    uint64_t pid;
    uint64_t sequence;
    uint64_t elapsed_ns;
    double pcie_gbps;
    IbpViewCounters totals;
    IbpViewCounters untracked;
    uint64_t regions_merged;
    size_t site_count;
    IbpViewSite *sites;
    size_t region_count;
    IbpViewRegion *regions;
    size_t sample_count;
    IbpViewSample *series;
} IbpViewReport;

/* Reads the report in file (ibp_view_load_file) or in the len bytes at data, named name in
 * messages (ibp_view_load_buffer), into *r, checking every field the viewer uses.  Returns 0, or
 * -EBADMSG (a malformed report, or one of another schema), -ENOMEM or fopen's negative errno (the
 * file cannot be opened) with a one-line message in msg; *r then holds nothing to free.  Strings in *r live
 * until ibp_view_free(r). */
int ibp_view_load_file(IbpViewReport *r, const char *file, char *msg, size_t msg_len);
int ibp_view_load_buffer(IbpViewReport *r, const char *name, const void *data, size_t len, char *msg,
                         size_t msg_len);
void ibp_view_free(IbpViewReport *r);

/* The last part of a path (what follows its last '/'). */
const char *ibp_view_base_name(const char *path);

#endif /* IBP_TOOLS_REPORT_LOAD_H */
