/* SPDX-License-Identifier: MIT
 * ibpshim: reading a transfer report for ibp-report: every field the viewer uses is checked, and a
 * report that lacks one, or holds one of the wrong type, is refused with the field's path. */
#include "tools/report_load.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The report schema's raw-byte reasons, in schema order. */
const char *const ibp_view_reason_names[IBP_VIEW_REASONS] = {
    "below_threshold", "not_pinned", "cold",  "stale",    "incompressible", "capturing",
    "churn",           "budget",     "error", "disabled", "slower",
};

/* Where a field lives, for error messages ("totals.raw_bytes.stale"), and where a failure goes. */
typedef struct IbpViewCtx {
    const IbpViewReport *report;
    char path[256];
    jmp_buf *fail;
    char *msg;
    size_t msg_len;
} IbpViewCtx;

static void fail(IbpViewCtx *ctx, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));

/* Ends the load with err and the message, made one line whatever the input held. */
static void fail(IbpViewCtx *ctx, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->msg, ctx->msg_len, fmt, ap);
    va_end(ap);
    for (char *p = ctx->msg; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    longjmp(*ctx->fail, -err);
}

static void bad_field(IbpViewCtx *ctx, const char *key, const char *what) __attribute__((noreturn));

static void bad_field(IbpViewCtx *ctx, const char *key, const char *what)
{
    fail(ctx, -EBADMSG, "%s: field %s%s%s: %s", ctx->report->file, ctx->path, ctx->path[0] ? "." : "", key,
         what);
}

/* obj's member key, which must be there. */
static json_t *present(IbpViewCtx *ctx, json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        bad_field(ctx, key, "missing");
    return v;
}

static json_t *member(IbpViewCtx *ctx, json_t *obj, const char *key, json_type type, const char *what)
{
    json_t *v = present(ctx, obj, key);
    if (json_typeof(v) != type)
        bad_field(ctx, key, what);
    return v;
}

static uint64_t get_u64(IbpViewCtx *ctx, json_t *obj, const char *key)
{
    json_t *v = present(ctx, obj, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        bad_field(ctx, key, "expected a non-negative integer");
    return (uint64_t)json_integer_value(v);
}

static int64_t get_i64(IbpViewCtx *ctx, json_t *obj, const char *key)
{
    json_t *v = present(ctx, obj, key);
    if (!json_is_integer(v))
        bad_field(ctx, key, "expected an integer");
    return (int64_t)json_integer_value(v);
}

static double get_number(IbpViewCtx *ctx, json_t *obj, const char *key)
{
    json_t *v = present(ctx, obj, key);
    if (!json_is_number(v))
        bad_field(ctx, key, "expected a number");
    return json_number_value(v);
}

static const char *get_string(IbpViewCtx *ctx, json_t *obj, const char *key)
{
    return json_string_value(member(ctx, obj, key, JSON_STRING, "expected a string"));
}

static void ctx_enter(IbpViewCtx *ctx, const char *name)
{
    const size_t len = strlen(ctx->path);
    snprintf(ctx->path + len, sizeof(ctx->path) - len, "%s%s", len ? "." : "", name);
}

static void ctx_enter_index(IbpViewCtx *ctx, const char *name, size_t index)
{
    char part[64];
    snprintf(part, sizeof(part), "%s[%zu]", name, index);
    ctx_enter(ctx, part);
}

static void ctx_leave(IbpViewCtx *ctx, size_t len)
{
    ctx->path[len] = '\0';
}

static void read_counters(IbpViewCtx *ctx, json_t *obj, const char *key, IbpViewCounters *c)
{
    json_t *o = member(ctx, obj, key, JSON_OBJECT, "expected an object");
    const size_t len = strlen(ctx->path);
    ctx_enter(ctx, key);
    c->copies = get_u64(ctx, o, "copies");
    c->requested = get_u64(ctx, o, "requested_bytes");
    c->sent = get_u64(ctx, o, "sent_bytes");
    c->saved = get_i64(ctx, o, "saved_bytes");
    c->ratio = get_number(ctx, o, "ratio");
    c->compressed = get_u64(ctx, o, "compressed_bytes");
    c->compressed_wire = get_u64(ctx, o, "compressed_wire_bytes");
    c->compression_ratio = get_number(ctx, o, "compression_ratio");
    c->raw_total = get_u64(ctx, o, "raw_bytes_total");
    json_t *raw = member(ctx, o, "raw_bytes", JSON_OBJECT, "expected an object");
    const size_t raw_len = strlen(ctx->path);
    ctx_enter(ctx, "raw_bytes");
    for (int r = 0; r < (ctx->report->version >= 4 ? IBP_VIEW_REASONS : IBP_VIEW_REASONS_V3); r++)
        c->raw[r] = get_u64(ctx, raw, ibp_view_reason_names[r]);
    ctx_leave(ctx, raw_len);
    c->invalidations = get_u64(ctx, o, "invalidations");
    c->recompressions = get_u64(ctx, o, "recompressions");
    c->evictions = get_u64(ctx, o, "evictions");
    c->evicted_bytes = get_u64(ctx, o, "evicted_bytes");
    c->tracking_ns = get_u64(ctx, o, "tracking_ns");
    c->decode_ns = get_u64(ctx, o, "decode_ns");
    c->decoded_bytes = get_u64(ctx, o, "decoded_bytes");
    c->shadow_bytes = get_u64(ctx, o, "shadow_bytes");
    c->shadow_peak = get_u64(ctx, o, "shadow_peak_bytes");
    if (ctx->report->version >= 2) {
        c->plans = get_u64(ctx, o, "plans");
        c->plans_reused = get_u64(ctx, o, "plans_reused");
        c->plan_ns = get_u64(ctx, o, "plan_ns");
        c->builds = get_u64(ctx, o, "builds");
        c->build_ns = get_u64(ctx, o, "build_ns");
    }
    if (ctx->report->version >= 3) {
        c->routed = get_u64(ctx, o, "routed_copies");
        c->lookup_ns = get_u64(ctx, o, "lookup_ns");
        c->enqueue_ns = get_u64(ctx, o, "enqueue_ns");
        c->staging_wait_ns = get_u64(ctx, o, "staging_wait_ns");
        c->dma_ns = get_u64(ctx, o, "dma_ns");
        c->dma_bytes = get_u64(ctx, o, "dma_bytes");
    }
    c->time_saved_s = get_number(ctx, o, "time_saved_s");
    ctx_leave(ctx, len);
}

const char *ibp_view_base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static void append(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void append(char *buf, size_t size, const char *fmt, ...)
{
    const size_t len = strlen(buf);
    if (len + 1 >= size)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, size - len, fmt, ap);
    va_end(ap);
}

static void read_site(IbpViewCtx *ctx, json_t *obj, IbpViewSite *site)
{
    site->id = get_u64(ctx, obj, "id");
    site->regions = get_u64(ctx, obj, "regions");
    site->regions_live = get_u64(ctx, obj, "regions_live");
    json_t *frames = member(ctx, obj, "frames", JSON_ARRAY, "expected an array");
    site->label[0] = '\0';
    site->key[0] = '\0';
    const size_t len = strlen(ctx->path);
    for (size_t f = 0; f < json_array_size(frames); f++) {
        json_t *frame = json_array_get(frames, f);
        ctx_enter_index(ctx, "frames", f);
        if (!json_is_object(frame))
            bad_field(ctx, "", "expected an object");
        const char *address = get_string(ctx, frame, "address");
        const char *module = ibp_view_base_name(get_string(ctx, frame, "module"));
        const char *module_offset = get_string(ctx, frame, "module_offset");
        const char *symbol = get_string(ctx, frame, "symbol");
        const char *symbol_offset = get_string(ctx, frame, "symbol_offset");
        ctx_leave(ctx, len);
        if (f == 0) {
            if (symbol[0])
                snprintf(site->label, sizeof(site->label), "%s+%s (%s)", symbol, symbol_offset, module);
            else if (module[0])
                snprintf(site->label, sizeof(site->label), "%s+%s", module, module_offset);
            else
                snprintf(site->label, sizeof(site->label), "%s", address);
        }
        if (symbol[0])
            append(site->key, sizeof(site->key), "%s%s!%s+%s", f ? ";" : "", module, symbol, symbol_offset);
        else
            append(site->key, sizeof(site->key), "%s%s+%s", f ? ";" : "", module, module_offset);
    }
    if (!site->label[0]) {
        snprintf(site->label, sizeof(site->label), "unknown site");
        snprintf(site->key, sizeof(site->key), "unknown");
    }
    read_counters(ctx, obj, "counters", &site->c);
}

static void read_region(IbpViewCtx *ctx, json_t *obj, IbpViewRegion *region)
{
    region->id = get_u64(ctx, obj, "id");
    region->base = get_string(ctx, obj, "base");
    region->size = get_u64(ctx, obj, "size");
    region->site = get_u64(ctx, obj, "site");
    json_t *freed = present(ctx, obj, "freed");
    if (!json_is_boolean(freed))
        bad_field(ctx, "freed", "expected true or false");
    region->freed = json_is_true(freed);
    read_counters(ctx, obj, "counters", &region->c);
}

static void *alloc_array(IbpViewCtx *ctx, size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p)
        fail(ctx, -ENOMEM, "out of memory");
    return p;
}

static void read_site_item(IbpViewCtx *ctx, json_t *obj, void *item)
{
    read_site(ctx, obj, item);
}

static void read_region_item(IbpViewCtx *ctx, json_t *obj, void *item)
{
    read_region(ctx, obj, item);
}

static void read_sample_item(IbpViewCtx *ctx, json_t *obj, void *item)
{
    IbpViewSample *const sample = item;
    sample->elapsed_ns = get_u64(ctx, obj, "elapsed_ns");
    sample->requested = get_u64(ctx, obj, "requested_bytes");
    sample->sent = get_u64(ctx, obj, "sent_bytes");
}

/* The array `key` of root, each of its objects read by read into an item of `size` bytes: the
 * items go to *items (set before the first is read, so that a failure frees them) and their
 * number to *count. */
static void read_array(IbpViewCtx *ctx, json_t *root, const char *key, size_t size,
                       void (*read)(IbpViewCtx *, json_t *, void *), void **items, size_t *count)
{
    json_t *array = member(ctx, root, key, JSON_ARRAY, "expected an array");
    *count = json_array_size(array);
    unsigned char *const out = alloc_array(ctx, *count, size);
    *items = out;
    for (size_t i = 0; i < *count; i++) {
        ctx_enter_index(ctx, key, i);
        json_t *obj = json_array_get(array, i);
        if (!json_is_object(obj))
            fail(ctx, -EBADMSG, "%s: field %s: expected an object", ctx->report->file, ctx->path);
        read(ctx, obj, out + i * size);
        ctx_leave(ctx, 0);
    }
}

/* Reads r->root (already parsed) into r; fails through ctx. */
static void read_report(IbpViewCtx *ctx, IbpViewReport *r)
{
    const char *const file = r->file;
    if (!json_is_object(r->root))
        fail(ctx, -EBADMSG, "%s: not an ibpshim report (the document is not an object)", file);
    json_t *schema = json_object_get(r->root, "schema");
    if (!schema)
        fail(ctx, -EBADMSG, "%s: not an ibpshim report (no \"schema\" field)", file);
    const char *name = json_is_string(schema) ? json_string_value(schema) : NULL;
    r->version = !name                               ? 0
                 : !strcmp(name, IBP_VIEW_SCHEMA)    ? 4
                 : !strcmp(name, IBP_VIEW_SCHEMA_V3) ? 3
                 : !strcmp(name, IBP_VIEW_SCHEMA_V2) ? 2
                 : !strcmp(name, IBP_VIEW_SCHEMA_V1) ? 1
                                                     : 0;
    if (!r->version)
        fail(ctx, -EBADMSG, "%s: unsupported schema %s (this ibp-report reads %s, %s, %s and %s)", file,
             name ? name : "(not a string)", IBP_VIEW_SCHEMA_V1, IBP_VIEW_SCHEMA_V2, IBP_VIEW_SCHEMA_V3,
             IBP_VIEW_SCHEMA);
    r->schema = name;

    r->generator = get_string(ctx, r->root, "generator");
    r->reason = get_string(ctx, r->root, "reason");
    r->pid = get_u64(ctx, r->root, "pid");
    r->sequence = get_u64(ctx, r->root, "sequence");
    r->elapsed_ns = get_u64(ctx, r->root, "elapsed_ns");
    r->pcie_gbps = get_number(ctx, r->root, "pcie_gbps");
    read_counters(ctx, r->root, "totals", &r->totals);
    read_counters(ctx, r->root, "untracked", &r->untracked);
    r->regions_merged = get_u64(ctx, r->root, "regions_merged");

    read_array(ctx, r->root, "sites", sizeof(*r->sites), read_site_item, (void **)&r->sites, &r->site_count);
    read_array(ctx, r->root, "regions", sizeof(*r->regions), read_region_item, (void **)&r->regions,
               &r->region_count);
    read_array(ctx, r->root, "series", sizeof(*r->series), read_sample_item, (void **)&r->series,
               &r->sample_count);
}

void ibp_view_free(IbpViewReport *r)
{
    free(r->sites);
    free(r->regions);
    free(r->series);
    json_decref(r->root);
    memset(r, 0, sizeof(*r));
}

/* Parses the document with load (a file or a buffer), then reads it into *r. */
static int load(IbpViewReport *r, const char *name, FILE *f, const void *data, size_t len, char *msg,
                size_t msg_len)
{
    memset(r, 0, sizeof(*r));
    r->file = name;
    jmp_buf failed;
    IbpViewCtx ctx = {.report = r, .fail = &failed, .msg = msg, .msg_len = msg_len};
    switch (setjmp(failed)) { /* longjmp's value: the error, positive */
    case 0:
        break;
    case ENOMEM:
        ibp_view_free(r);
        return -ENOMEM;
    default:
        ibp_view_free(r);
        return -EBADMSG;
    }
    json_error_t jerr;
    r->root = f ? json_loadf(f, JSON_REJECT_DUPLICATES, &jerr)
                : json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!r->root)
        fail(&ctx, -EBADMSG, "%s:%d:%d: invalid JSON: %s", name, jerr.line, jerr.column, jerr.text);
    read_report(&ctx, r);
    return 0;
}

int ibp_view_load_file(IbpViewReport *r, const char *file, char *msg, size_t msg_len)
{
    FILE *f = fopen(file, "rb");
    if (!f) {
        const int err = errno;
        memset(r, 0, sizeof(*r));
        snprintf(msg, msg_len, "%s: cannot open: %s", file, strerror(err));
        return -err;
    }
    const int ret = load(r, file, f, NULL, 0, msg, msg_len);
    fclose(f);
    return ret;
}

int ibp_view_load_buffer(IbpViewReport *r, const char *name, const void *data, size_t len, char *msg,
                         size_t msg_len)
{
    return load(r, name, NULL, data, len, msg, msg_len);
}
