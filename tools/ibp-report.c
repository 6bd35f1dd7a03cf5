/* SPDX-License-Identifier: MIT
 * ibpshim: ibp-report, the viewer of transfer reports: tables, an SVG chart and run-to-run diffs. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/report_load.h"

#define IBP_VIEW_EXIT_ERROR 2

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* One line, whatever the input held. */
    for (char *p = msg; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    fprintf(stderr, "ibp-report: %s\n", msg);
    exit(IBP_VIEW_EXIT_ERROR);
}

static void *alloc_array(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p)
        die("out of memory");
    return p;
}

static void load_or_die(IbpViewReport *r, const char *file)
{
    char msg[1024];
    if (ibp_view_load_file(r, file, msg, sizeof(msg)))
        die("%s", msg);
}

/* ---- formatting ---- */

static const char *fmt_bytes(char *buf, size_t len, double bytes)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    const int negative = bytes < 0;
    double v = negative ? -bytes : bytes;
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%s%.0f B", negative ? "-" : "", v);
    else
        snprintf(buf, len, "%s%.2f %s", negative ? "-" : "", v, units[u]);
    return buf;
}

/* Axis labels: "2 GiB", "1.5 GiB", no trailing zeros. */
static const char *fmt_tick(char *buf, size_t len, double bytes)
{
    fmt_bytes(buf, len, bytes);
    char *space = strchr(buf, ' ');
    char *dot = strchr(buf, '.');
    if (space && dot && dot < space) {
        char *end = space;
        while (end[-1] == '0')
            end--;
        if (end[-1] == '.')
            end--;
        memmove(end, space, strlen(space) + 1);
    }
    return buf;
}

static const char *fmt_delta_bytes(char *buf, size_t len, double delta)
{
    char tmp[24];
    fmt_bytes(tmp, sizeof(tmp), delta);
    snprintf(buf, len, "%s%s", delta > 0 ? "+" : "", tmp);
    return buf;
}

static double ratio_of(uint64_t num, uint64_t den)
{
    return den ? (double)num / (double)den : 0.0;
}

typedef struct IbpViewRank {
    double key;
    size_t index;
} IbpViewRank;

static int rank_compare(const void *a, const void *b)
{
    const IbpViewRank *x = a, *y = b;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static IbpViewRank *rank_sites(const IbpViewReport *r, int by_requested)
{
    IbpViewRank *ranks = alloc_array(r->site_count, sizeof(*ranks));
    for (size_t i = 0; i < r->site_count; i++) {
        ranks[i].key = by_requested ? (double)r->sites[i].c.requested : (double)r->sites[i].c.saved;
        ranks[i].index = i;
    }
    qsort(ranks, r->site_count, sizeof(*ranks), rank_compare);
    return ranks;
}

static IbpViewRank *rank_regions(const IbpViewReport *r)
{
    IbpViewRank *ranks = alloc_array(r->region_count, sizeof(*ranks));
    for (size_t i = 0; i < r->region_count; i++) {
        ranks[i].key = (double)r->regions[i].c.saved;
        ranks[i].index = i;
    }
    qsort(ranks, r->region_count, sizeof(*ranks), rank_compare);
    return ranks;
}

/* ---- the table ---- */

static void print_table(const IbpViewReport *r, size_t top)
{
    const IbpViewCounters *t = &r->totals;
    char a[32], b[32], c[32];
    printf("ibpshim transfer report: %s\n", r->file);
    printf("  %s, %s, pid %" PRIu64 ", reason %s, report #%" PRIu64 ", after %.3f s\n\n", r->schema,
           r->generator, r->pid, r->reason, r->sequence, (double)r->elapsed_ns / 1e9);

    printf("Totals\n");
    printf("  %-16s %14" PRIu64 "\n", "copies", t->copies);
    printf("  %-16s %14s\n", "requested", fmt_bytes(a, sizeof(a), (double)t->requested));
    printf("  %-16s %14s  (%.2fx)\n", "sent over PCIe", fmt_bytes(a, sizeof(a), (double)t->sent), t->ratio);
    printf("  %-16s %14s  est. %.4f s at %.1f GB/s\n", "saved", fmt_bytes(a, sizeof(a), (double)t->saved),
           t->time_saved_s, r->pcie_gbps);
    printf("  %-16s %14s  -> %s (%.2fx)\n", "compressed", fmt_bytes(a, sizeof(a), (double)t->compressed),
           fmt_bytes(b, sizeof(b), (double)t->compressed_wire), t->compression_ratio);
    printf("  %-16s %14s\n", "raw", fmt_bytes(a, sizeof(a), (double)t->raw_total));
    printf("  %-16s %14" PRIu64 "  copies, %s\n", "untracked", r->untracked.copies,
           fmt_bytes(a, sizeof(a), (double)r->untracked.requested));
    printf("  %-16s %14s  peak %s, %" PRIu64 " evictions (%s)\n", "shadow held",
           fmt_bytes(a, sizeof(a), (double)t->shadow_bytes), fmt_bytes(b, sizeof(b), (double)t->shadow_peak),
           t->evictions, fmt_bytes(c, sizeof(c), (double)t->evicted_bytes));
    printf("  %-16s %14" PRIu64 "  blocks, %" PRIu64 " recompressed\n", "invalidated", t->invalidations,
           t->recompressions);
    printf("  %-16s %11.3f ms\n", "write tracking", (double)t->tracking_ns / 1e6);
    if (t->routed)
        printf("  %-16s %11.1f us  lookup %.1f us (tracking included) + enqueue %.1f us (staging waits "
               "%.1f us), %" PRIu64 " copies\n",
               "host per copy", (double)(t->lookup_ns + t->enqueue_ns) / 1e3 / (double)t->routed,
               (double)t->lookup_ns / 1e3 / (double)t->routed, (double)t->enqueue_ns / 1e3 / (double)t->routed,
               (double)t->staging_wait_ns / 1e3 / (double)t->routed, t->routed);
    if (t->dma_ns)
        printf("  %-16s %11.3f ms  (%.1f GB/s)\n", "compressed DMA", (double)t->dma_ns / 1e6,
               (double)t->dma_bytes / (double)t->dma_ns);
    if (t->decode_ns)
        printf("  %-16s %11.3f ms  (%.1f GB/s)\n", "decode", (double)t->decode_ns / 1e6,
               (double)t->decoded_bytes / (double)t->decode_ns);
    else
        printf("  %-16s %14s\n", "decode", "not measured");
    if (r->version >= 2) {
        printf("  %-16s %11.3f ms  %" PRIu64 " plans, %" PRIu64 " reused\n", "planning",
               (double)t->plan_ns / 1e6, t->plans, t->plans_reused);
        printf("  %-16s %11.3f ms  %" PRIu64 " builds\n", "shadow builds", (double)t->build_ns / 1e6,
               t->builds);
    }

    printf("\nRaw bytes by reason\n");
    printf("  %-16s %14s %8s\n", "reason", "bytes", "share");
    int any = 0;
    for (int i = 0; i < IBP_VIEW_REASONS; i++) {
        if (!t->raw[i])
            continue;
        printf("  %-16s %14s %7.1f%%\n", ibp_view_reason_names[i], fmt_bytes(a, sizeof(a), (double)t->raw[i]),
               100.0 * ratio_of(t->raw[i], t->raw_total));
        any = 1;
    }
    if (!any)
        printf("  (none)\n");

    printf("\nTop sites by bytes saved\n");
    printf("  %5s %9s %8s %12s %12s %12s %7s  %s\n", "site", "regions", "copies", "requested", "sent",
           "saved", "ratio", "location");
    IbpViewRank *sr = rank_sites(r, 0);
    for (size_t i = 0; i < r->site_count && i < top; i++) {
        const IbpViewSite *s = &r->sites[sr[i].index];
        char regions[32];
        snprintf(regions, sizeof(regions), "%" PRIu64 "/%" PRIu64, s->regions_live, s->regions);
        printf("  %5" PRIu64 " %9s %8" PRIu64 " %12s %12s %12s %6.2fx  %s\n", s->id, regions, s->c.copies,
               fmt_bytes(a, sizeof(a), (double)s->c.requested), fmt_bytes(b, sizeof(b), (double)s->c.sent),
               fmt_bytes(c, sizeof(c), (double)s->c.saved), s->c.ratio, s->label);
    }
    if (!r->site_count)
        printf("  (none)\n");
    free(sr);

    printf("\nTop regions by bytes saved\n");
    printf("  %6s %5s %12s %8s %12s %12s %12s %7s  %s\n", "region", "site", "size", "copies", "requested",
           "sent", "saved", "ratio", "state");
    IbpViewRank *rr = rank_regions(r);
    char size[32];
    for (size_t i = 0; i < r->region_count && i < top; i++) {
        const IbpViewRegion *g = &r->regions[rr[i].index];
        printf("  %6" PRIu64 " %5" PRIu64 " %12s %8" PRIu64 " %12s %12s %12s %6.2fx  %s\n", g->id, g->site,
               fmt_bytes(size, sizeof(size), (double)g->size), g->c.copies,
               fmt_bytes(a, sizeof(a), (double)g->c.requested), fmt_bytes(b, sizeof(b), (double)g->c.sent),
               fmt_bytes(c, sizeof(c), (double)g->c.saved), g->c.ratio, g->freed ? "freed" : "live");
    }
    if (!r->region_count)
        printf("  (none)\n");
    if (r->regions_merged)
        printf("  (%" PRIu64 " older freed regions are counted in their sites only)\n", r->regions_merged);
    free(rr);
}

static json_t *json_u64(uint64_t v)
{
    return json_integer((json_int_t)v);
}

static json_t *summary_entry(const char *what, uint64_t id, const char *label, const IbpViewCounters *c)
{
    json_t *o = json_object();
    json_object_set_new(o, what, json_u64(id));
    if (label)
        json_object_set_new(o, "label", json_string(label));
    json_object_set_new(o, "copies", json_u64(c->copies));
    json_object_set_new(o, "requested_bytes", json_u64(c->requested));
    json_object_set_new(o, "sent_bytes", json_u64(c->sent));
    json_object_set_new(o, "saved_bytes", json_integer(c->saved));
    json_object_set_new(o, "ratio", json_real(c->ratio));
    return o;
}

static void print_json(json_t *doc)
{
    char *text = json_dumps(doc, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
    if (!text)
        die("out of memory");
    printf("%s\n", text);
    free(text);
    json_decref(doc);
}

static void print_table_json(const IbpViewReport *r, size_t top)
{
    const IbpViewCounters *t = &r->totals;
    json_t *doc = json_object();
    json_object_set_new(doc, "file", json_string(r->file));
    json_object_set_new(doc, "totals", summary_entry("reports", r->sequence, NULL, t));
    json_object_del(json_object_get(doc, "totals"), "reports");
    json_object_set_new(json_object_get(doc, "totals"), "time_saved_s", json_real(t->time_saved_s));
    json_t *raw = json_array();
    for (int i = 0; i < IBP_VIEW_REASONS; i++) {
        if (!t->raw[i])
            continue;
        json_t *e = json_object();
        json_object_set_new(e, "reason", json_string(ibp_view_reason_names[i]));
        json_object_set_new(e, "bytes", json_u64(t->raw[i]));
        json_object_set_new(e, "share", json_real(ratio_of(t->raw[i], t->raw_total)));
        json_array_append_new(raw, e);
    }
    json_object_set_new(doc, "raw_bytes", raw);
    json_t *sites = json_array();
    IbpViewRank *sr = rank_sites(r, 0);
    for (size_t i = 0; i < r->site_count && i < top; i++) {
        const IbpViewSite *s = &r->sites[sr[i].index];
        json_array_append_new(sites, summary_entry("site", s->id, s->label, &s->c));
    }
    free(sr);
    json_object_set_new(doc, "top_sites", sites);
    json_t *regions = json_array();
    IbpViewRank *rr = rank_regions(r);
    for (size_t i = 0; i < r->region_count && i < top; i++) {
        const IbpViewRegion *g = &r->regions[rr[i].index];
        json_t *e = summary_entry("region", g->id, NULL, &g->c);
        json_object_set_new(e, "site", json_u64(g->site));
        json_object_set_new(e, "freed", json_boolean(g->freed));
        json_array_append_new(regions, e);
    }
    free(rr);
    json_object_set_new(doc, "top_regions", regions);
    print_json(doc);
}

/* ---- diff ---- */

typedef struct IbpViewMetric {
    const char *name;
    double a;
    double b;
    int bytes; /* 1: format as bytes, 0: as a count, 2: as a ratio, 3: as seconds */
} IbpViewMetric;

static size_t diff_metrics(const IbpViewReport *a, const IbpViewReport *b, IbpViewMetric *m)
{
    size_t n = 0;
    const IbpViewCounters *x = &a->totals, *y = &b->totals;
    m[n++] = (IbpViewMetric){"copies", (double)x->copies, (double)y->copies, 0};
    m[n++] = (IbpViewMetric){"requested", (double)x->requested, (double)y->requested, 1};
    m[n++] = (IbpViewMetric){"sent", (double)x->sent, (double)y->sent, 1};
    m[n++] = (IbpViewMetric){"saved", (double)x->saved, (double)y->saved, 1};
    m[n++] = (IbpViewMetric){"ratio", x->ratio, y->ratio, 2};
    m[n++] = (IbpViewMetric){"compressed", (double)x->compressed, (double)y->compressed, 1};
    m[n++] = (IbpViewMetric){"compressed_wire", (double)x->compressed_wire, (double)y->compressed_wire, 1};
    m[n++] = (IbpViewMetric){"raw", (double)x->raw_total, (double)y->raw_total, 1};
    for (int i = 0; i < IBP_VIEW_REASONS; i++)
        if (x->raw[i] || y->raw[i])
            m[n++] = (IbpViewMetric){ibp_view_reason_names[i], (double)x->raw[i], (double)y->raw[i], 1};
    m[n++] = (IbpViewMetric){"shadow_peak", (double)x->shadow_peak, (double)y->shadow_peak, 1};
    m[n++] = (IbpViewMetric){"evicted", (double)x->evicted_bytes, (double)y->evicted_bytes, 1};
    m[n++] = (IbpViewMetric){"time_saved_s", x->time_saved_s, y->time_saved_s, 3};
    return n;
}

static const char *fmt_metric(char *buf, size_t len, double v, int kind, int delta)
{
    const char *sign = delta && v > 0 ? "+" : "";
    switch (kind) {
    case 1:
        return delta ? fmt_delta_bytes(buf, len, v) : fmt_bytes(buf, len, v);
    case 2:
        snprintf(buf, len, "%s%.2fx", sign, v);
        return buf;
    case 3:
        snprintf(buf, len, "%s%.4f s", sign, v);
        return buf;
    default:
        snprintf(buf, len, "%s%.0f", sign, v);
        return buf;
    }
}

typedef struct IbpViewPair {
    const IbpViewSite *a;
    const IbpViewSite *b;
    double delta; /* saved b - saved a */
} IbpViewPair;

static int pair_compare(const void *x, const void *y)
{
    const IbpViewPair *p = x, *q = y;
    const double dp = p->delta < 0 ? -p->delta : p->delta;
    const double dq = q->delta < 0 ? -q->delta : q->delta;
    if (dp != dq)
        return dp > dq ? -1 : 1;
    const char *kp = p->a ? p->a->key : p->b->key;
    const char *kq = q->a ? q->a->key : q->b->key;
    return strcmp(kp, kq);
}

/* Sites of both runs matched by their frame key (module, symbol, offsets: no addresses, which ASLR moves). */
static IbpViewPair *pair_sites(const IbpViewReport *a, const IbpViewReport *b, size_t *count)
{
    IbpViewPair *pairs = alloc_array(a->site_count + b->site_count, sizeof(*pairs));
    size_t n = 0;
    for (size_t i = 0; i < a->site_count; i++)
        pairs[n++] = (IbpViewPair){&a->sites[i], NULL, 0};
    for (size_t j = 0; j < b->site_count; j++) {
        size_t i = 0;
        while (i < n && !(pairs[i].a && !pairs[i].b && strcmp(pairs[i].a->key, b->sites[j].key) == 0))
            i++;
        if (i < n)
            pairs[i].b = &b->sites[j];
        else
            pairs[n++] = (IbpViewPair){NULL, &b->sites[j], 0};
    }
    for (size_t i = 0; i < n; i++)
        pairs[i].delta =
            (pairs[i].b ? (double)pairs[i].b->c.saved : 0) - (pairs[i].a ? (double)pairs[i].a->c.saved : 0);
    qsort(pairs, n, sizeof(*pairs), pair_compare);
    *count = n;
    return pairs;
}

static void print_diff(const IbpViewReport *a, const IbpViewReport *b, size_t top)
{
    IbpViewMetric m[32];
    const size_t n = diff_metrics(a, b, m);
    char x[32], y[32], d[32];
    printf("ibpshim transfer report diff\n  A: %s\n  B: %s\n\n", a->file, b->file);
    printf("Totals\n  %-16s %14s %14s %14s\n", "", "A", "B", "B - A");
    for (size_t i = 0; i < n; i++)
        printf("  %-16s %14s %14s %14s\n", m[i].name, fmt_metric(x, sizeof(x), m[i].a, m[i].bytes, 0),
               fmt_metric(y, sizeof(y), m[i].b, m[i].bytes, 0),
               fmt_metric(d, sizeof(d), m[i].b - m[i].a, m[i].bytes, 1));
    size_t count;
    IbpViewPair *pairs = pair_sites(a, b, &count);
    printf("\nSites by change in bytes saved\n  %12s %12s %12s  %s\n", "saved A", "saved B", "B - A",
           "location");
    for (size_t i = 0; i < count && i < top; i++) {
        const IbpViewPair *p = &pairs[i];
        printf("  %12s %12s %12s  %s\n", p->a ? fmt_bytes(x, sizeof(x), (double)p->a->c.saved) : "-",
               p->b ? fmt_bytes(y, sizeof(y), (double)p->b->c.saved) : "-",
               fmt_delta_bytes(d, sizeof(d), p->delta), p->a ? p->a->label : p->b->label);
    }
    if (!count)
        printf("  (none)\n");
    free(pairs);
}

static void print_diff_json(const IbpViewReport *a, const IbpViewReport *b, size_t top)
{
    IbpViewMetric m[32];
    const size_t n = diff_metrics(a, b, m);
    json_t *doc = json_object();
    json_object_set_new(doc, "a", json_string(a->file));
    json_object_set_new(doc, "b", json_string(b->file));
    json_t *totals = json_object();
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_object();
        const int integral = m[i].bytes == 0 || m[i].bytes == 1;
        json_object_set_new(e, "a", integral ? json_integer((json_int_t)m[i].a) : json_real(m[i].a));
        json_object_set_new(e, "b", integral ? json_integer((json_int_t)m[i].b) : json_real(m[i].b));
        json_object_set_new(
            e, "delta", integral ? json_integer((json_int_t)(m[i].b - m[i].a)) : json_real(m[i].b - m[i].a));
        json_object_set_new(totals, m[i].name, e);
    }
    json_object_set_new(doc, "totals", totals);
    size_t count;
    IbpViewPair *pairs = pair_sites(a, b, &count);
    json_t *sites = json_array();
    for (size_t i = 0; i < count && i < top; i++) {
        const IbpViewPair *p = &pairs[i];
        json_t *e = json_object();
        json_object_set_new(e, "key", json_string(p->a ? p->a->key : p->b->key));
        json_object_set_new(e, "label", json_string(p->a ? p->a->label : p->b->label));
        json_object_set_new(e, "saved_a", p->a ? json_integer(p->a->c.saved) : json_null());
        json_object_set_new(e, "saved_b", p->b ? json_integer(p->b->c.saved) : json_null());
        json_object_set_new(e, "delta", json_integer((json_int_t)p->delta));
        json_array_append_new(sites, e);
    }
    free(pairs);
    json_object_set_new(doc, "sites", sites);
    print_json(doc);
}

/* ---- SVG ---- */

static void svg_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '&':
            fputs("&amp;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default:
            fputc(*s, f);
        }
    }
}

/* 1, 2 or 5 times a power of ten, the smallest such value not below raw. */
static double nice_decimal(double raw)
{
    double p = 1;
    while (p * 10 <= raw)
        p *= 10;
    while (p > raw && p > 1e-6)
        p /= 10;
    const double m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

/* A tick step for bytes: a nice decimal number of the binary unit that max is shown in, about max / 5. */
static double nice_step(double max)
{
    if (max <= 0)
        return 1;
    double unit = 1;
    while (max / unit >= 1024.0)
        unit *= 1024.0;
    const double step = nice_decimal(max / unit / 5.0) * unit;
    return step < 1 ? 1 : step;
}

static void label_clip(char *dst, size_t size, const char *src, size_t max_chars)
{
    const size_t n = strlen(src);
    if (n <= max_chars || max_chars < 4)
        snprintf(dst, size, "%s", src);
    else
        snprintf(dst, size, "%.*s...", (int)(max_chars - 3), src);
}

#define SVG_W 960
#define SVG_LEFT 330
#define SVG_RIGHT 110
#define SVG_ROW 46
#define SVG_REQ_COLOR "#9ecae1"
#define SVG_SENT_COLOR "#08519c"

static int svg_sites(FILE *f, const IbpViewReport *r, size_t top, int y0)
{
    IbpViewRank *rank = rank_sites(r, 1);
    const size_t n = r->site_count < top ? r->site_count : top;
    double max = 1;
    for (size_t i = 0; i < n; i++)
        if ((double)r->sites[rank[i].index].c.requested > max)
            max = (double)r->sites[rank[i].index].c.requested;
    const double step = nice_step(max);
    double axis = step;
    while (axis < max)
        axis += step;
    const double plot_w = SVG_W - SVG_LEFT - SVG_RIGHT;
    char a[32];

    fprintf(f, "<text x=\"20\" y=\"%d\" class=\"title\">Requested vs sent bytes per allocation site</text>\n",
            y0 + 24);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"14\" fill=\"" SVG_REQ_COLOR "\"/>\n", SVG_LEFT,
            y0 + 36);
    fprintf(f, "<text x=\"%d\" y=\"%d\">requested</text>\n", SVG_LEFT + 20, y0 + 48);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"14\" fill=\"" SVG_SENT_COLOR "\"/>\n",
            SVG_LEFT + 120, y0 + 36);
    fprintf(f, "<text x=\"%d\" y=\"%d\">sent over PCIe</text>\n", SVG_LEFT + 140, y0 + 48);
    const int top_y = y0 + 64;
    const int bottom_y = top_y + (int)(n ? n : 1) * SVG_ROW;
    for (double v = 0; v <= axis + step / 2; v += step) {
        const double x = SVG_LEFT + plot_w * v / axis;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" class=\"grid\"/>\n", x, top_y, x,
                bottom_y);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"tick\" text-anchor=\"middle\">%s</text>\n", x,
                bottom_y + 16, fmt_tick(a, sizeof(a), v));
    }
    if (!n)
        fprintf(f, "<text x=\"%d\" y=\"%d\">no allocation sites in this report</text>\n", SVG_LEFT + 10,
                top_y + 28);
    for (size_t i = 0; i < n; i++) {
        const IbpViewSite *s = &r->sites[rank[i].index];
        const int y = top_y + (int)i * SVG_ROW;
        char label[64], full[IBP_VIEW_LABEL_MAX + 32];
        snprintf(full, sizeof(full), "#%" PRIu64 " %s", s->id, s->label);
        label_clip(label, sizeof(label), full, 40);
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", SVG_LEFT - 8, y + 27);
        svg_text(f, label);
        fprintf(f, "</text>\n");
        const double wr = plot_w * (double)s->c.requested / axis;
        const double ws = plot_w * (double)s->c.sent / axis;
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"17\" fill=\"" SVG_REQ_COLOR "\"/>\n",
                SVG_LEFT, y + 5, wr);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"value\">%s</text>\n", SVG_LEFT + wr + 5, y + 18,
                fmt_bytes(a, sizeof(a), (double)s->c.requested));
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"17\" fill=\"" SVG_SENT_COLOR "\"/>\n",
                SVG_LEFT, y + 23, ws);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"value\">%s (%.2fx)</text>\n", SVG_LEFT + ws + 5, y + 36,
                fmt_bytes(a, sizeof(a), (double)s->c.sent), s->c.ratio);
    }
    free(rank);
    return bottom_y + 30;
}

static int svg_series(FILE *f, const IbpViewReport *r, int y0)
{
    const IbpViewSample *s = r->series;
    const size_t n = r->sample_count;
    double max = 1, tmax = 0;
    for (size_t i = 0; i < n; i++) {
        if ((double)s[i].requested > max)
            max = (double)s[i].requested;
        if ((double)s[i].elapsed_ns / 1e9 > tmax)
            tmax = (double)s[i].elapsed_ns / 1e9;
    }
    if (tmax <= 0)
        tmax = 1;
    const double step = nice_step(max);
    double axis = step;
    while (axis < max)
        axis += step;
    const double ts = nice_decimal(tmax / 5.0);
    double taxis = ts;
    while (taxis < tmax)
        taxis += ts;
    const int left = SVG_LEFT, top_y = y0 + 50, h = 220;
    const double w = SVG_W - SVG_LEFT - SVG_RIGHT;
    char a[32];

    fprintf(f, "<text x=\"20\" y=\"%d\" class=\"title\">Cumulative bytes over time (%zu reports)</text>\n",
            y0 + 24, n);
    for (double v = 0; v <= axis + step / 2; v += step) {
        const double y = top_y + h - h * v / axis;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>\n", left, y,
                left + w, y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">%s</text>\n", left - 8,
                y + 4, fmt_tick(a, sizeof(a), v));
    }
    for (double t = 0; t <= taxis + ts / 2; t += ts) {
        const double x = left + w * t / taxis;
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"tick\" text-anchor=\"middle\">%g s</text>\n", x,
                top_y + h + 16, t);
    }
    const char *colors[2] = {SVG_REQ_COLOR, SVG_SENT_COLOR};
    const char *names[2] = {"requested", "sent over PCIe"};
    for (int line = 0; line < 2; line++) {
        /* Counters start at zero when the ledger starts. */
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"3\" points=\"%d,%d", colors[line],
                left, top_y + h);
        for (size_t i = 0; i < n; i++) {
            const double v = line ? (double)s[i].sent : (double)s[i].requested;
            fprintf(f, " %.1f,%.1f", left + w * ((double)s[i].elapsed_ns / 1e9) / taxis,
                    top_y + h - h * v / axis);
        }
        fprintf(f, "\"/>\n");
        const double last = line ? (double)s[n - 1].sent : (double)s[n - 1].requested;
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"value\">%s</text>\n",
                left + w * ((double)s[n - 1].elapsed_ns / 1e9) / taxis + 6, top_y + h - h * last / axis + 4,
                names[line]);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"tick\" text-anchor=\"middle\">time since start</text>\n",
            left + w / 2, top_y + h + 34);
    return top_y + h + 50;
}

static void write_svg(const IbpViewReport *r, const char *out, size_t top)
{
    FILE *f = fopen(out, "w");
    if (!f)
        die("%s: cannot write: %s", out, strerror(errno));
    const size_t n = r->site_count < top ? r->site_count : top;
    int height = 64 + (int)(n ? n : 1) * SVG_ROW + 30 + 60;
    if (r->sample_count >= 2)
        height += 50 + 220 + 50;
    char a[32], b[32];
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"13\">\n",
            SVG_W, height, SVG_W, height);
    fprintf(f, "<style>.title{font-size:16px;font-weight:bold}.tick{font-size:11px;fill:#444}"
               ".value{font-size:11px;fill:#222}.grid{stroke:#ddd;stroke-width:1}</style>\n");
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"20\" y=\"28\" class=\"title\">ibpshim transfer report: ");
    svg_text(f, ibp_view_base_name(r->file));
    fprintf(f, "</text>\n");
    fprintf(
        f, "<text x=\"20\" y=\"48\">requested %s, sent %s (%.2fx), saved about %.4f s at %.1f GB/s</text>\n",
        fmt_bytes(a, sizeof(a), (double)r->totals.requested), fmt_bytes(b, sizeof(b), (double)r->totals.sent),
        r->totals.ratio, r->totals.time_saved_s, r->pcie_gbps);
    int y = svg_sites(f, r, top, 60);
    if (r->sample_count >= 2)
        y = svg_series(f, r, y);
    (void)y;
    fprintf(f, "</svg>\n");
    if (fclose(f) != 0)
        die("%s: cannot write: %s", out, strerror(errno));
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ibp-report [--top N] [--json] FILE.json\n"
            "       ibp-report [--top N] --svg OUT.svg FILE.json\n"
            "       ibp-report [--top N] [--json] --diff A.json B.json\n"
            "Reads transfer reports written by libibpshim.so (schemas " IBP_VIEW_SCHEMA_V1
            ", " IBP_VIEW_SCHEMA_V2 ", " IBP_VIEW_SCHEMA_V3 " and " IBP_VIEW_SCHEMA ").\n"
            "  --top N     rows per table and sites in the chart (default 10)\n"
            "  --json      machine-readable output instead of tables\n"
            "  --svg OUT   write a chart of requested vs sent bytes per site (and over time)\n"
            "  --diff      compare two reports: totals and per-site changes\n"
            "Exit status: 0 on success, 2 on a usage error or an unreadable, malformed or foreign file.\n");
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"top", required_argument, NULL, 't'}, {"json", no_argument, NULL, 'j'},
        {"svg", required_argument, NULL, 's'}, {"diff", no_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'},      {NULL, 0, NULL, 0},
    };
    size_t top = 10;
    int as_json = 0, diff = 0;
    const char *svg = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "t:js:dh", longopts, NULL)) != -1) {
        switch (c) {
        case 't': {
            char *end;
            errno = 0;
            const long v = strtol(optarg, &end, 10);
            if (errno || *end || v < 1 || v > 100000)
                die("--top: expected a number from 1 to 100000, got '%s'", optarg);
            top = (size_t)v;
            break;
        }
        case 'j':
            as_json = 1;
            break;
        case 's':
            svg = optarg;
            break;
        case 'd':
            diff = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return IBP_VIEW_EXIT_ERROR;
        }
    }
    const int files = argc - optind;
    if (diff ? files != 2 : files != 1) {
        usage(stderr);
        return IBP_VIEW_EXIT_ERROR;
    }
    if (diff && svg)
        die("--svg and --diff cannot be combined");
    if (diff) {
        IbpViewReport a, b;
        load_or_die(&a, argv[optind]);
        load_or_die(&b, argv[optind + 1]);
        if (as_json)
            print_diff_json(&a, &b, top);
        else
            print_diff(&a, &b, top);
        ibp_view_free(&a);
        ibp_view_free(&b);
    } else {
        IbpViewReport r;
        load_or_die(&r, argv[optind]);
        if (svg)
            write_svg(&r, svg, top);
        else if (as_json)
            print_table_json(&r, top);
        else
            print_table(&r, top);
        ibp_view_free(&r);
    }
    if (fflush(stdout) != 0)
        die("cannot write the output: %s", strerror(errno));
    return 0;
}
