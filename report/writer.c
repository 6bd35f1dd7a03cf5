/* SPDX-License-Identifier: MIT
 * ibpshim: the report formats: JSON (schema ibpshim-report/4) and the text summary. */
#include "report/writer.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ibp_build_config.h"

#define IBP_NAME_MAX 512

typedef struct IbpFrameName {
    char module[IBP_NAME_MAX]; /* "" when unknown */
    uint64_t module_offset;
    char symbol[IBP_NAME_MAX]; /* "" when unknown */
    uint64_t symbol_offset;
} IbpFrameName;

static void copy_name(char *dst, const char *src)
{
    const size_t n = src ? strnlen(src, IBP_NAME_MAX - 1) : 0;
    memcpy(dst, src ? src : "", n);
    dst[n] = '\0';
}

/* Frames are return addresses: look up addr - 1 so that a call ending a function resolves to it. */
static void frame_resolve(uintptr_t addr, IbpFrameName *name)
{
    Dl_info info;
    memset(name, 0, sizeof(*name));
    if (!addr || !dladdr((void *)(addr - 1), &info))
        return;
    copy_name(name->module, info.dli_fname);
    /* The main program is named as it was invoked (maybe relative to a directory since left). */
    if (name->module[0] != '/') {
        const ssize_t n = readlink("/proc/self/exe", name->module, sizeof(name->module) - 1);
        name->module[n > 0 ? n : 0] = '\0';
    }
    name->module_offset = addr - (uintptr_t)info.dli_fbase;
    if (info.dli_sname && info.dli_saddr) {
        copy_name(name->symbol, info.dli_sname);
        name->symbol_offset = addr - (uintptr_t)info.dli_saddr;
    }
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* "symbol+0x1c (libfoo.so)", "libfoo.so+0x1234" or "0x7f..."; "unknown site" for no frames. */
static void site_label(const IbpLedgerSiteInfo *site, char *buf, size_t len)
{
    if (site->depth <= 0) {
        snprintf(buf, len, "unknown site");
        return;
    }
    IbpFrameName name;
    frame_resolve(site->frames[0], &name);
    if (name.symbol[0])
        snprintf(buf, len, "%s+0x%" PRIx64 " (%s)", name.symbol, name.symbol_offset, base_name(name.module));
    else if (name.module[0])
        snprintf(buf, len, "%s+0x%" PRIx64, base_name(name.module), name.module_offset);
    else
        snprintf(buf, len, "0x%" PRIxPTR, site->frames[0]);
}

static int64_t saved_bytes(const IbpLedgerTotals *t)
{
    return (int64_t)(t->requested - ibp_ledger_totals_sent(t));
}

static double ratio(uint64_t num, uint64_t den)
{
    return den ? (double)num / (double)den : 0.0;
}

static double time_saved_s(const IbpLedgerTotals *t, double gbps)
{
    return gbps > 0 ? (double)saved_bytes(t) / (gbps * 1e9) : 0.0;
}

void ibp_report_sample_of(const IbpLedgerSnapshot *snap, IbpReportSample *out)
{
    out->elapsed_ns = snap->elapsed_ns;
    out->copies = snap->total.copies;
    out->requested = snap->total.requested;
    out->sent = ibp_ledger_totals_sent(&snap->total);
    out->compressed_in = snap->total.compressed_in;
    out->shadow_bytes = snap->total.shadow_bytes;
}

static void json_counters(IbpJson *j, const char *key, const IbpLedgerTotals *t, double gbps)
{
    const uint64_t sent = ibp_ledger_totals_sent(t);
    ibp_json_object_begin(j, key, 0);
    ibp_json_uint(j, "copies", t->copies);
    ibp_json_uint(j, "requested_bytes", t->requested);
    ibp_json_uint(j, "sent_bytes", sent);
    ibp_json_int(j, "saved_bytes", saved_bytes(t));
    ibp_json_double(j, "ratio", ratio(t->requested, sent));
    ibp_json_uint(j, "compressed_bytes", t->compressed_in);
    ibp_json_uint(j, "compressed_wire_bytes", t->compressed_out);
    ibp_json_double(j, "compression_ratio", ratio(t->compressed_in, t->compressed_out));
    ibp_json_uint(j, "raw_bytes_total", ibp_ledger_totals_raw(t));
    ibp_json_object_begin(j, "raw_bytes", 1);
    for (int r = 0; r < IBP_RAW_REASON_COUNT; r++)
        ibp_json_uint(j, ibp_raw_reason_name((IbpRawReason)r), t->raw[r]);
    ibp_json_object_end(j);
    ibp_json_uint(j, "invalidations", t->invalidations);
    ibp_json_uint(j, "recompressions", t->recompressions);
    ibp_json_uint(j, "evictions", t->evictions);
    ibp_json_uint(j, "evicted_bytes", t->evicted_bytes);
    ibp_json_uint(j, "tracking_ns", t->tracking_ns);
    ibp_json_uint(j, "routed_copies", t->routed);
    ibp_json_uint(j, "lookup_ns", t->lookup_ns);
    ibp_json_uint(j, "enqueue_ns", t->enqueue_ns);
    ibp_json_uint(j, "staging_wait_ns", t->staging_wait_ns);
    ibp_json_uint(j, "dma_ns", t->dma_ns);
    ibp_json_uint(j, "dma_bytes", t->dma_bytes);
    ibp_json_uint(j, "decode_ns", t->decode_ns);
    ibp_json_uint(j, "decoded_bytes", t->decoded_bytes);
    ibp_json_uint(j, "plans", t->plans);
    ibp_json_uint(j, "plans_reused", t->plans_reused);
    ibp_json_uint(j, "plan_ns", t->plan_ns);
    ibp_json_uint(j, "builds", t->builds);
    ibp_json_uint(j, "build_ns", t->build_ns);
    ibp_json_uint(j, "shadow_bytes", t->shadow_bytes);
    ibp_json_uint(j, "shadow_peak_bytes", t->shadow_peak);
    ibp_json_double_places(j, "time_saved_s", time_saved_s(t, gbps), 9);
    ibp_json_object_end(j);
}

static void json_site(IbpJson *j, const IbpLedgerSiteInfo *site, double gbps)
{
    ibp_json_object_begin(j, NULL, 0);
    ibp_json_uint(j, "id", site->id);
    ibp_json_uint(j, "regions", site->regions);
    ibp_json_uint(j, "regions_live", site->regions_live);
    ibp_json_array_begin(j, "frames", 0);
    for (int f = 0; f < site->depth; f++) {
        IbpFrameName name;
        frame_resolve(site->frames[f], &name);
        ibp_json_object_begin(j, NULL, 1);
        ibp_json_hex(j, "address", site->frames[f]);
        ibp_json_string(j, "module", name.module);
        ibp_json_hex(j, "module_offset", name.module_offset);
        ibp_json_string(j, "symbol", name.symbol);
        ibp_json_hex(j, "symbol_offset", name.symbol_offset);
        ibp_json_object_end(j);
    }
    ibp_json_array_end(j);
    json_counters(j, "counters", &site->totals, gbps);
    ibp_json_object_end(j);
}

static void json_region(IbpJson *j, const IbpLedgerRegionInfo *r, double gbps)
{
    ibp_json_object_begin(j, NULL, 0);
    ibp_json_uint(j, "id", r->id);
    ibp_json_hex(j, "base", r->base);
    ibp_json_uint(j, "size", r->size);
    ibp_json_uint(j, "flags", r->flags);
    ibp_json_uint(j, "site", r->site_id);
    ibp_json_bool(j, "freed", r->freed);
    ibp_json_uint(j, "opened_ns", r->opened_ns);
    ibp_json_uint(j, "closed_ns", r->closed_ns);
    json_counters(j, "counters", &r->totals, gbps);
    ibp_json_object_end(j);
}

int ibp_report_format_json(IbpOut *out, const IbpLedgerSnapshot *snap, const IbpReportMeta *meta)
{
    IbpJson j;
    ibp_json_init(&j, out);
    ibp_json_object_begin(&j, NULL, 0);
    ibp_json_string(&j, "schema", IBP_REPORT_SCHEMA);
    ibp_json_string(&j, "generator", "ibpshim " IBP_VERSION);
    ibp_json_int(&j, "pid", meta->pid);
    ibp_json_string(&j, "reason", meta->reason);
    ibp_json_uint(&j, "sequence", meta->sequence);
    ibp_json_uint(&j, "time_unix_ns", meta->time_unix_ns);
    ibp_json_uint(&j, "elapsed_ns", snap->elapsed_ns);
    ibp_json_double(&j, "pcie_gbps", meta->pcie_gbps);
    json_counters(&j, "totals", &snap->total, meta->pcie_gbps);
    json_counters(&j, "untracked", &snap->untracked, meta->pcie_gbps);
    ibp_json_uint(&j, "regions_merged", snap->regions_merged);
    ibp_json_array_begin(&j, "sites", 0);
    for (size_t s = 0; s < snap->site_count; s++)
        json_site(&j, &snap->sites[s], meta->pcie_gbps);
    ibp_json_array_end(&j);
    ibp_json_array_begin(&j, "regions", 0);
    for (size_t r = 0; r < snap->region_count; r++)
        json_region(&j, &snap->regions[r], meta->pcie_gbps);
    ibp_json_array_end(&j);
    ibp_json_array_begin(&j, "series", 0);
    for (size_t i = 0; i < meta->series_count; i++) {
        const IbpReportSample *p = &meta->series[i];
        ibp_json_object_begin(&j, NULL, 1);
        ibp_json_uint(&j, "elapsed_ns", p->elapsed_ns);
        ibp_json_uint(&j, "copies", p->copies);
        ibp_json_uint(&j, "requested_bytes", p->requested);
        ibp_json_uint(&j, "sent_bytes", p->sent);
        ibp_json_uint(&j, "compressed_bytes", p->compressed_in);
        ibp_json_uint(&j, "shadow_bytes", p->shadow_bytes);
        ibp_json_object_end(&j);
    }
    ibp_json_array_end(&j);
    ibp_json_object_end(&j);
    return ibp_out_flush(out);
}

static const char *fmt_bytes(char *buf, size_t len, uint64_t bytes)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    char num[32];
    ibp_format_double(num, sizeof(num), v, u ? 2 : 0);
    snprintf(buf, len, "%s %s", num, units[u]);
    return buf;
}

static const char *fmt_signed_bytes(char *buf, size_t len, int64_t bytes)
{
    if (bytes >= 0)
        return fmt_bytes(buf, len, (uint64_t)bytes);
    char tmp[32];
    fmt_bytes(tmp, sizeof(tmp), (uint64_t)0 - (uint64_t)bytes);
    snprintf(buf, len, "-%s", tmp);
    return buf;
}

static const char *fmt_num(char *buf, size_t len, double v, int decimals)
{
    ibp_format_double(buf, len, v, decimals);
    return buf;
}

typedef struct IbpRank {
    int64_t saved;
    size_t index;
} IbpRank;

/* Most saved first; ties by index so that output is deterministic. */
static int rank_compare(const void *a, const void *b)
{
    const IbpRank *x = a, *y = b;
    if (x->saved != y->saved)
        return x->saved > y->saved ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static IbpRank *rank_by_saved(const IbpLedgerTotals *first, size_t stride, size_t count)
{
    IbpRank *ranks = malloc((count ? count : 1) * sizeof(*ranks));
    if (!ranks)
        return NULL;
    for (size_t i = 0; i < count; i++) {
        const IbpLedgerTotals *t = (const IbpLedgerTotals *)((const char *)first + i * stride);
        ranks[i].saved = saved_bytes(t);
        ranks[i].index = i;
    }
    qsort(ranks, count, sizeof(*ranks), rank_compare);
    return ranks;
}

static void text_totals(IbpOut *out, const IbpLedgerSnapshot *snap, const IbpReportMeta *meta)
{
    const IbpLedgerTotals *t = &snap->total;
    char a[40], b[40], c[40], d[40];
    ibp_out_printf(out, "ibpshim: transfer report (%s #%" PRIu64 ", pid %ld, %s s)\n", meta->reason,
                   meta->sequence, meta->pid, fmt_num(d, sizeof(d), (double)snap->elapsed_ns / 1e9, 3));
    ibp_out_printf(out, "ibpshim:   requested %s in %" PRIu64 " copies, sent %s (%sx)\n",
                   fmt_bytes(a, sizeof(a), t->requested), t->copies,
                   fmt_bytes(b, sizeof(b), ibp_ledger_totals_sent(t)),
                   fmt_num(c, sizeof(c), ratio(t->requested, ibp_ledger_totals_sent(t)), 2));
    ibp_out_printf(out, "ibpshim:   saved %s, about %s s at %s GB/s\n",
                   fmt_signed_bytes(a, sizeof(a), saved_bytes(t)),
                   fmt_num(b, sizeof(b), time_saved_s(t, meta->pcie_gbps), 4),
                   fmt_num(c, sizeof(c), meta->pcie_gbps, 1));
    ibp_out_printf(out, "ibpshim:   compressed %s -> %s (%sx), raw %s\n",
                   fmt_bytes(a, sizeof(a), t->compressed_in), fmt_bytes(b, sizeof(b), t->compressed_out),
                   fmt_num(c, sizeof(c), ratio(t->compressed_in, t->compressed_out), 2),
                   fmt_bytes(d, sizeof(d), ibp_ledger_totals_raw(t)));
    for (int r = 0; r < IBP_RAW_REASON_COUNT; r++)
        if (t->raw[r])
            ibp_out_printf(out, "ibpshim:     raw %-16s %s\n", ibp_raw_reason_name((IbpRawReason)r),
                           fmt_bytes(a, sizeof(a), t->raw[r]));
    ibp_out_printf(out, "ibpshim:   shadow held %s (peak %s), %" PRIu64 " evictions (%s)\n",
                   fmt_bytes(a, sizeof(a), t->shadow_bytes), fmt_bytes(b, sizeof(b), t->shadow_peak),
                   t->evictions, fmt_bytes(c, sizeof(c), t->evicted_bytes));
    ibp_out_printf(out,
                   "ibpshim:   %" PRIu64 " blocks invalidated, %" PRIu64 " recompressed; tracking %s ms, "
                   "decode %s ms\n",
                   t->invalidations, t->recompressions,
                   fmt_num(a, sizeof(a), (double)t->tracking_ns / 1e6, 3),
                   fmt_num(b, sizeof(b), (double)t->decode_ns / 1e6, 3));
    if (t->routed)
        ibp_out_printf(out,
                       "ibpshim:   per routed copy (%" PRIu64
                       "): lookup %s us, enqueue %s us (staging waits %s us) on the host\n",
                       t->routed, fmt_num(a, sizeof(a), (double)t->lookup_ns / 1e3 / (double)t->routed, 1),
                       fmt_num(b, sizeof(b), (double)t->enqueue_ns / 1e3 / (double)t->routed, 1),
                       fmt_num(c, sizeof(c), (double)t->staging_wait_ns / 1e3 / (double)t->routed, 1));
    if (t->dma_ns && t->decode_ns)
        ibp_out_printf(out, "ibpshim:   measured on the device: DMA %s GB/s, decode %s GB/s of output\n",
                       fmt_num(a, sizeof(a), (double)t->dma_bytes / (double)t->dma_ns, 1),
                       fmt_num(b, sizeof(b), (double)t->decoded_bytes / (double)t->decode_ns, 1));
    ibp_out_printf(out,
                   "ibpshim:   compressor: %" PRIu64 " plans (%" PRIu64 " reused) in %s ms, %" PRIu64
                   " builds in %s ms\n",
                   t->plans, t->plans_reused, fmt_num(a, sizeof(a), (double)t->plan_ns / 1e6, 3), t->builds,
                   fmt_num(b, sizeof(b), (double)t->build_ns / 1e6, 3));
    ibp_out_printf(out, "ibpshim:   untracked: %" PRIu64 " copies, %s\n", snap->untracked.copies,
                   fmt_bytes(a, sizeof(a), snap->untracked.requested));
}

int ibp_report_format_text(IbpOut *out, const IbpLedgerSnapshot *snap, const IbpReportMeta *meta, int top_n)
{
    char a[40], b[40], c[40];
    text_totals(out, snap, meta);

    IbpRank *sites = rank_by_saved(snap->site_count ? &snap->sites[0].totals : NULL, sizeof(snap->sites[0]),
                                   snap->site_count);
    IbpRank *regions = rank_by_saved(snap->region_count ? &snap->regions[0].totals : NULL,
                                     sizeof(snap->regions[0]), snap->region_count);
    if (!sites || !regions) {
        free(sites);
        free(regions);
        ibp_out_flush(out);
        return -ENOMEM;
    }
    if (snap->site_count)
        ibp_out_printf(out, "ibpshim:   top sites by bytes saved:\n");
    for (size_t i = 0; i < snap->site_count && i < (size_t)top_n; i++) {
        const IbpLedgerSiteInfo *s = &snap->sites[sites[i].index];
        char label[2 * IBP_NAME_MAX + 64];
        site_label(s, label, sizeof(label));
        ibp_out_printf(
            out, "ibpshim:     site %" PRIu32 ": saved %s of %s (%sx), %" PRIu64 " regions: %s\n", s->id,
            fmt_signed_bytes(a, sizeof(a), sites[i].saved), fmt_bytes(b, sizeof(b), s->totals.requested),
            fmt_num(c, sizeof(c), ratio(s->totals.requested, ibp_ledger_totals_sent(&s->totals)), 2),
            s->regions, label);
    }
    if (snap->region_count)
        ibp_out_printf(out, "ibpshim:   top regions by bytes saved:\n");
    for (size_t i = 0; i < snap->region_count && i < (size_t)top_n; i++) {
        const IbpLedgerRegionInfo *r = &snap->regions[regions[i].index];
        char size[40];
        ibp_out_printf(
            out,
            "ibpshim:     region %" PRIu64 " (%s at 0x%" PRIxPTR ", site %" PRIu32 "%s): saved %s of %s "
            "(%sx)\n",
            r->id, fmt_bytes(size, sizeof(size), r->size), r->base, r->site_id, r->freed ? ", freed" : "",
            fmt_signed_bytes(a, sizeof(a), regions[i].saved), fmt_bytes(b, sizeof(b), r->totals.requested),
            fmt_num(c, sizeof(c), ratio(r->totals.requested, ibp_ledger_totals_sent(&r->totals)), 2));
    }
    free(sites);
    free(regions);
    return ibp_out_flush(out);
}
