/* SPDX-License-Identifier: MIT
 * ibpshim: the option table and the value syntax (sizes, durations, booleans, enums). */
#include "config/config.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

__extension__ typedef unsigned __int128 IbpU128;

static const IbpConfigEnumValue log_levels[] = {
    {"off", IBP_LOG_OFF, false},     {"error", IBP_LOG_ERROR, false}, {"warn", IBP_LOG_WARN, false},
    {"info", IBP_LOG_INFO, false},   {"debug", IBP_LOG_DEBUG, false}, {"trace", IBP_LOG_TRACE, false},
    /* The spellings common/log.c accepts for IBPSHIM_LOG_LEVEL, so both paths agree. */
    {"warning", IBP_LOG_WARN, true}, {"none", IBP_LOG_OFF, true},     {"quiet", IBP_LOG_OFF, true},
    {"0", IBP_LOG_ERROR, true},      {"1", IBP_LOG_WARN, true},       {"2", IBP_LOG_INFO, true},
    {"3", IBP_LOG_DEBUG, true},      {"4", IBP_LOG_TRACE, true},      {NULL, 0, false},
};

static const IbpConfigEnumValue trackings[] = {
    {"auto", IBP_TRACKING_AUTO, false},         {"uffd", IBP_TRACKING_UFFD, false},
    {"mprotect", IBP_TRACKING_MPROTECT, false}, {"none", IBP_TRACKING_NONE, false},
    {NULL, 0, false},
};

static const IbpConfigEnumValue selector_flag_modes[] = {
    {"auto", IBP_SELECTOR_FLAGS_AUTO, false}, {"on", IBP_SELECTOR_FLAGS_ON, false},
    {"off", IBP_SELECTOR_FLAGS_OFF, false},   {"true", IBP_SELECTOR_FLAGS_ON, true},
    {"yes", IBP_SELECTOR_FLAGS_ON, true},     {"1", IBP_SELECTOR_FLAGS_ON, true},
    {"false", IBP_SELECTOR_FLAGS_OFF, true},  {"no", IBP_SELECTOR_FLAGS_OFF, true},
    {"0", IBP_SELECTOR_FLAGS_OFF, true},      {NULL, 0, false},
};

static const IbpConfigEnumValue transfer_paths[] = {
    {"auto", IBP_TRANSFER_PATH_AUTO, false},
    {"dma", IBP_TRANSFER_PATH_DMA, false},
    {"zerocopy", IBP_TRANSFER_PATH_ZEROCOPY, false},
    {NULL, 0, false},
};

static const IbpConfigEnumValue staging_policies[] = {
    {"wait", IBP_STAGING_EXHAUSTED_WAIT, false},
    {"raw", IBP_STAGING_EXHAUSTED_RAW, false},
    {NULL, 0, false},
};

static const IbpConfigEnumValue report_formats[] = {
    {"text", IBP_REPORT_FORMAT_TEXT, false},
    {"json", IBP_REPORT_FORMAT_JSON, false},
    {NULL, 0, false},
};

static const IbpConfigEnumValue report_signals[] = {
    {"none", 0, false},       {"SIGUSR1", SIGUSR1, false}, {"SIGUSR2", SIGUSR2, false},
    {"USR1", SIGUSR1, true},  {"USR2", SIGUSR2, true},     {NULL, 0, false},
};

#define KIB (UINT64_C(1) << 10)
#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)
#define TIB (UINT64_C(1) << 40)
#define PIB (UINT64_C(1) << 50)
#define MSEC UINT64_C(1000000)
#define SEC UINT64_C(1000000000)
#define HOUR (3600 * SEC)

#define FIELD(f) offsetof(IbpConfig, f)
#define OPT_BOOL(s, k, f, def, h) {.section = s, .key = k, .type = IBP_CONFIG_BOOL, .offset = FIELD(f), \
                                   .default_text = def, .help = h}
#define OPT_INT(s, k, f, def, lo, hi, h) {.section = s, .key = k, .type = IBP_CONFIG_INT, \
                                          .offset = FIELD(f), .default_text = def, .int_min = lo, \
                                          .int_max = hi, .help = h}
#define OPT_SIZE(s, k, f, def, lo, hi, h) {.section = s, .key = k, .type = IBP_CONFIG_SIZE, \
                                           .offset = FIELD(f), .default_text = def, .u64_min = lo, \
                                           .u64_max = hi, .help = h}
#define OPT_DURATION(s, k, f, def, lo, hi, h) {.section = s, .key = k, .type = IBP_CONFIG_DURATION, \
                                               .offset = FIELD(f), .default_text = def, .u64_min = lo, \
                                               .u64_max = hi, .help = h}
#define OPT_DOUBLE(s, k, f, def, lo, hi, h) {.section = s, .key = k, .type = IBP_CONFIG_DOUBLE, \
                                             .offset = FIELD(f), .default_text = def, .double_min = lo, \
                                             .double_max = hi, .help = h}
#define OPT_ENUM(s, k, f, def, v, h) {.section = s, .key = k, .type = IBP_CONFIG_ENUM, .offset = FIELD(f), \
                                      .default_text = def, .values = v, .help = h}
#define OPT_STRING(s, k, f, def, h) {.section = s, .key = k, .type = IBP_CONFIG_STRING, .offset = FIELD(f), \
                                     .default_text = def, .help = h}

static const IbpConfigOption options[IBP_CONFIG_OPTION_COUNT] = {
    OPT_BOOL("shim", "enabled", shim.enabled, "true",
             "false turns the shim into a pure pass-through without removing LD_PRELOAD."),
    OPT_ENUM("shim", "log_level", shim.log_level, "warn", log_levels,
             "Messages at this level and more severe are written; IBPSHIM_LOG_LEVEL is accepted too."),
    OPT_STRING("shim", "log_file", shim.log_file, "",
               "File the messages are appended to; empty means standard error."),

    OPT_SIZE("policy", "min_bytes", policy.min_bytes, "4MiB", 0, TIB,
             "Size threshold: pinned regions and copies smaller than this are never compressed."),
    OPT_INT("policy", "min_copies", policy.min_copies, "2", 1, 1000000,
            "Copies of a region before it is compressed (the first copies always go raw); only copies in a "
            "row that find the region's bytes unchanged (a sampled fingerprint) count, so a buffer given new "
            "content before every copy is never compressed or write-tracked."),
    OPT_DOUBLE("policy", "min_ratio", policy.min_ratio, "0.95", 0.0, 1.0,
               "Blocks and regions whose compressed/raw size is above this ratio stay raw."),
    OPT_SIZE("policy", "max_shadow_bytes", policy.max_shadow_bytes, "0", 0, PIB,
             "Bound on compressed shadow memory, least recently used regions evicted first; "
             "0 = auto, a quarter of physical RAM."),
    OPT_ENUM("policy", "tracking", policy.tracking, "auto", trackings,
             "Write tracking: auto picks uffd where the kernel supports it, else mprotect; none trusts the "
             "application never to modify a region after it was copied (flagged in every report)."),
    OPT_INT("policy", "compressor_threads", policy.compressor_threads, "2", 1, 256,
            "Background threads planning and compressing hot regions (regions planned side by side share "
            "them)."),
    OPT_DOUBLE("policy", "plan_reuse", policy.plan_reuse, "0.005", -1.0, 1.0,
               "A region reuses a plan kept from earlier regions of its allocation site (up to 4 a "
               "site) when that plan compresses the region's sample at most this much worse "
               "(compressed/original) than it compressed its own, instead of planning afresh; "
               "negative = always plan afresh."),
    OPT_INT("policy", "churn_limit", policy.churn_limit, "3", 0, 1000000,
            "A region rewritten within churn_window of being compressed this many times stops being "
            "tracked and goes raw from then on; 0 = never give up."),
    OPT_DURATION("policy", "churn_window", policy.churn_window_ns, "1s", MSEC, HOUR,
                 "How soon after compression a rewrite counts towards churn_limit."),
    OPT_BOOL("policy", "track_shared", policy.track_shared, "false",
             "Also compress regions the tracker cannot fully cover (shared or file-backed mappings), "
             "trusting that no other process writes them."),
    OPT_BOOL("policy", "track_write_combined", policy.track_write_combined, "false",
             "Also compress cudaHostAllocWriteCombined regions "
             "(CPU reads of them for compression are slow)."),
    OPT_BOOL("policy", "track_mapped", policy.track_mapped, "false",
             "Also compress regions allocated with cudaHostAllocMapped or registered with "
             "cudaHostRegisterMapped, trusting that no kernel writes them through their device pointer "
             "(such writes reach memory without a fault: no tracker sees them)."),

    OPT_ENUM("policy", "selector_flags", policy.selector_flags, "auto", selector_flag_modes,
             "Store a block's selectors in the flagged form (its columns' commonest selectors, then only "
             "the exceptions) where that is smaller: 0.7-23% smaller shadows and copies of five of six test "
             "tensors, for a pass that rewrites them on the GPU before each decode. auto: only for regions "
             "whose plan compresses them to a ratio of 0.5 or more, where the copy, not the decode, takes "
             "the time, and whose longest copy before compression was 64 MiB or more (weights: 64 and 256 "
             "MiB copies 0-3.4% faster, 4 MiB copies 4-7% slower); on: every region (well compressed "
             "tensors lose up to 11% at 64 MiB, more on short copies); off: none."),
    OPT_BOOL(
        "policy", "top_coded", policy.top_coded, "false",
        "Let a block take the top-byte coded form where that is smaller: each word's top byte (a float's "
        "sign and exponent) coded with rANS at its entropy, the other bytes as they are, decoded on the GPU "
        "by a kernel of its own. fp32 and bf16 weights compress 2-6% smaller; data with invariant bits "
        "(images, integers) keeps IBP's form."),

    OPT_ENUM("transfer", "path", transfer.path, "auto", transfer_paths,
             "How compressed data reaches the GPU: dma stages it in device memory, zerocopy lets the decode "
             "kernel read the pinned shadow directly, auto uses dma where measured faster than a plain copy "
             "and sends the rest raw."),
    OPT_SIZE("transfer", "staging_bytes", transfer.staging_bytes, "256MiB", MIB, TIB,
             "Device staging buffer per context for the dma path."),
    OPT_SIZE("transfer", "block_bytes", transfer.block_bytes, "0", 0, GIB,
             "Compression block size, the unit of random access and staleness; 0 = codec default. "
             "At most staging_bytes."),
    OPT_INT("transfer", "max_sms", transfer.max_sms, "0", 0, 4096,
            "Most streaming multiprocessors a decode kernel may occupy (one block of threads each); 0 = no "
            "limit."),
    OPT_ENUM("transfer", "staging_exhausted", transfer.staging_exhausted, "wait", staging_policies,
             "When the staging buffer is full: wait for earlier decodes to free it, or send the copy raw."),
    OPT_SIZE("transfer", "pipeline_chunk", transfer.pipeline_chunk, "16MiB", 0, GIB,
             "dma path: a compressed run of at least twice this is copied in chunks of an eighth of the run "
             "(at least this) on an internal stream while another decodes the chunk before, so a copy costs "
             "about the larger of DMA and decode instead of their sum; two chunks of staging per copy. A "
             "shorter run of at least this many original bytes and two pipeline_tail is pipelined too while "
             "no other compressed copy's decode is pending (copies back to back overlap anyway). "
             "0 = DMA, then decode."),
    OPT_SIZE("transfer", "pipeline_tail", transfer.pipeline_tail, "2MiB", 0, GIB,
             "dma path: the last chunks of a pipelined copy shrink down to about this many compressed bytes "
             "(each half of what is left once less than two chunks are; half this for runs compressed to "
             "less than 0.7 of their size, whose chunks hold more to decode), since the last chunk's decode "
             "is the part no DMA hides; each chunk more costs a copy start-up. 0 = chunks of equal size."),
    OPT_SIZE("transfer", "pipeline_raw_tail", transfer.pipeline_raw_tail, "0", 0, GIB,
             "dma path: a compressed run's last blocks, about this many original bytes, go as they are, a "
             "DMA after the run's, so that the decode of the run's end overlaps it instead of following "
             "every DMA; it costs what those blocks would have saved. Kept only while no other compressed "
             "copy's decode is pending (back to back, a copy's DMAs already overlap the decode before them), "
             "where the rest has as many blocks: on pipelined runs, and on shorter ones compressed to at "
             "least a quarter of their size (these then go as one or two chunks and the tail). A copy alone "
             "gains (1 MiB: 5-16 points of the ideal at 4-7 MiB, 1-2 at 64 MiB), copies in bursts lose (a "
             "table streamed in 4-64 MiB slices, 0-4%). 0 = none, as with pipeline_chunk = 0."),
    OPT_BOOL("transfer", "priority_decode", transfer.priority_decode, "false",
             "dma path: decode on an internal stream of the device's highest priority, joined to the copy's "
             "stream by events, so the GPU schedules the decode's thread blocks ahead of kernels of other "
             "streams that wait for free multiprocessors (a training step's compute while the next layer's "
             "weights arrive)."),
    OPT_BOOL(
        "transfer", "raw_in_order", transfer.raw_in_order, "true",
        "dma and auto paths: a copy of 64 KiB or more from pinned memory to the device that goes as it is "
        "(shorter than [policy] min_bytes, cold, judged slower) on a stream whose compressed copies "
        "sent their DMAs ahead on the shim's copy stream (one no other stream's copies share) goes on "
        "that copy stream too, after the stream's earlier work, so that the copy engine takes it in "
        "the stream's order; on the stream itself it was "
        "served only after every DMA queued ahead, and the decodes behind it waited with it (a table "
        "streamed in 4 MiB slices: 3-11 points of speedup with it; at 16-64 MiB no effect separated "
        "from the spread of single runs yet)."),
    OPT_BOOL(
        "transfer", "raw_edges", transfer.raw_edges, "true",
        "dma and auto paths: a copy that starts or ends inside a block, sent as one DMA and one decode, "
        "sends such an edge as it is where its bytes there are fewer than the block compressed, by at "
        "least 64 KiB (a table streamed in 4 MiB slices of fp32 weights sent 17 blocks compressed "
        "for 16 blocks' worth); the edges follow the run's DMA on the shim's copy stream, after the "
        "stream's earlier work (H100, tables streamed in 4 MiB slices: fp32 weights 1.2 points faster on "
        "average, 7 of 8 pairs ahead; bf16 weights and uint8 images 0-1.2; 16-64 MiB slices -1.1 to +2.1)."),
    OPT_BOOL("transfer", "edge_kernel", transfer.edge_kernel, "false",
             "with raw_edges: the edges that go as they are are written by a small kernel on the "
             "application's stream before the decode, reading the pinned source by its device address, "
             "instead of DMAs on the shim's copy stream that first wait for the application's stream (in a "
             "table streamed in 4 MiB slices the copy engine idled before such DMAs, 0.08-0.09 ms a step "
             "against 0.02); where the source has no device address or the launch fails, the DMAs. Off: "
             "on an H100, fp32 weights streamed in 4 MiB slices ran no faster with it (0.997-1.029 against "
             "1.014)."),

    OPT_STRING("report", "path", report.path, "",
               "Write the transfer report as JSON to this file as well; empty means no file."),
    OPT_ENUM("report", "format", report.format, "text", report_formats,
             "Format of the report written to the log."),
    OPT_BOOL("report", "on_exit", report.on_exit, "true", "Write the report when the process exits."),
    OPT_ENUM("report", "signal", report.signal_number, "SIGUSR1", report_signals,
             "Signal that makes the shim write the report; none installs no handler."),
    OPT_DURATION("report", "interval", report.interval_ns, "0", 0, 24 * HOUR,
                 "Also write the report periodically at this interval; 0 = off."),
    OPT_INT("report", "stack_depth", report.stack_depth, "8", 0, 64,
            "Frames recorded per allocation site; 0 = no backtraces."),
};

const IbpConfigOption *ibp_config_options(void)
{
    return options;
}

const IbpConfigOption *ibp_config_option_find(const char *section, const char *key)
{
    for (size_t i = 0; i < IBP_CONFIG_OPTION_COUNT; i++)
        if (!strcasecmp(options[i].section, section) && !strcasecmp(options[i].key, key))
            return &options[i];
    return NULL;
}

int ibp_config_env_name(const IbpConfigOption *opt, char *buf, size_t len)
{
    const int n = snprintf(buf, len, "IBPSHIM_%s_%s", opt->section, opt->key);
    if (n < 0 || (size_t)n >= len)
        return -ENOSPC;
    for (char *p = buf; *p; p++)
        *p = (char)toupper((unsigned char)*p);
    return 0;
}

static void set_why(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void set_why(char *why, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
}

/* An unsigned decimal "123", "1.5" or ".5", read exactly: the value is
 * whole + frac_num / frac_den.  Fraction digits past the 18th are dropped,
 * which rounds towards zero like every other fraction here. */
typedef struct IbpDecimal {
    uint64_t whole;
    uint64_t frac_num;
    uint64_t frac_den;
} IbpDecimal;

static int decimal_parse(const char **text, IbpDecimal *out)
{
    const char *p = *text;
    int digits = 0;
    out->whole = 0;
    out->frac_num = 0;
    out->frac_den = 1;
    for (; isdigit((unsigned char)*p); p++, digits++) {
        if (__builtin_mul_overflow(out->whole, 10, &out->whole) ||
            __builtin_add_overflow(out->whole, (uint64_t)(*p - '0'), &out->whole))
            return -ERANGE;
    }
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p))
            return -EINVAL;
        for (int kept = 0; isdigit((unsigned char)*p); p++, digits++) {
            if (kept < 18) {
                out->frac_num = out->frac_num * 10 + (uint64_t)(*p - '0');
                out->frac_den *= 10;
                kept++;
            }
        }
    }
    if (digits == 0)
        return -EINVAL;
    *text = p;
    return 0;
}

/* whole * unit + frac * unit, rounded down; -ERANGE past UINT64_MAX. */
static int decimal_scale(const IbpDecimal *d, uint64_t unit, uint64_t *out)
{
    const IbpU128 total = (IbpU128)d->whole * unit + (IbpU128)d->frac_num * unit / d->frac_den;
    if (total > UINT64_MAX)
        return -ERANGE;
    *out = (uint64_t)total;
    return 0;
}

typedef struct IbpUnit {
    const char *name;
    uint64_t scale;
} IbpUnit;

/* Case-insensitive.  Single letters are binary because "4k" for 4096 is what
 * memory sizes mean in dd, sort and most tools; "kB"/"MB" follow SI. */
static const IbpUnit size_units[] = {
    {"", 1},
    {"b", 1},
    {"k", KIB},
    {"kib", KIB},
    {"kb", 1000},
    {"m", MIB},
    {"mib", MIB},
    {"mb", 1000 * 1000},
    {"g", GIB},
    {"gib", GIB},
    {"gb", 1000 * 1000 * 1000},
    {"t", TIB},
    {"tib", TIB},
    {"tb", UINT64_C(1000000000000)},
    {"p", PIB},
    {"pib", PIB},
    {"pb", UINT64_C(1000000000000000)},
    {NULL, 0},
};

/* A bare number is seconds. */
static const IbpUnit duration_units[] = {
    {"", SEC},   {"ns", 1},      {"us", 1000}, {"ms", MSEC},  {"s", SEC},     {"sec", SEC},
    {"m", 60 * SEC}, {"min", 60 * SEC}, {"h", HOUR}, {NULL, 0},
};

static int unit_parse(const IbpDecimal *d, const char *suffix, const IbpUnit *units, uint64_t *out)
{
    while (*suffix == ' ' || *suffix == '\t')
        suffix++;
    for (const IbpUnit *u = units; u->name; u++)
        if (!strcasecmp(suffix, u->name))
            return decimal_scale(d, u->scale, out);
    return -EINVAL;
}

static size_t unit_format(uint64_t v, const IbpUnit *units, const char *const *names, size_t count, char *buf,
                          size_t len)
{
    size_t best = 0;
    for (size_t i = 0; i < count; i++)
        if (v != 0 && v % units[i].scale == 0 && units[i].scale > units[best].scale)
            best = i;
    const int n = snprintf(buf, len, "%llu%s", (unsigned long long)(v / units[best].scale), names[best]);
    return n < 0 ? 0 : ((size_t)n < len ? (size_t)n : len - 1);
}

size_t ibp_config_size_format(uint64_t bytes, char *buf, size_t len)
{
    /* Binary units first so that a value that is both (e.g. 0) prefers the plain form and
     * 4194304 prints as 4MiB, not as bytes. */
    static const IbpUnit units[] = {{"", 1},   {"", KIB}, {"", MIB}, {"", GIB}, {"", TIB}, {"", PIB},
                                    {"", 1000}, {"", 1000000}, {"", 1000000000},
                                    {"", UINT64_C(1000000000000)}, {"", UINT64_C(1000000000000000)}};
    static const char *const names[] = {"", "KiB", "MiB", "GiB", "TiB", "PiB", "kB", "MB", "GB", "TB", "PB"};
    return unit_format(bytes, units, names, sizeof(units) / sizeof(units[0]), buf, len);
}

size_t ibp_config_duration_format(uint64_t ns, char *buf, size_t len)
{
    static const IbpUnit units[] = {{"", 1}, {"", 1000}, {"", MSEC}, {"", SEC}, {"", 60 * SEC}, {"", HOUR}};
    static const char *const names[] = {"ns", "us", "ms", "s", "m", "h"};
    if (ns == 0) {
        const int n = snprintf(buf, len, "0");
        return n < 0 ? 0 : ((size_t)n < len ? (size_t)n : len - 1);
    }
    return unit_format(ns, units, names, sizeof(units) / sizeof(units[0]), buf, len);
}

static int bool_parse(const char *text, int64_t *out)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (!strcasecmp(text, yes[i])) {
            *out = 1;
            return 0;
        }
        if (!strcasecmp(text, no[i])) {
            *out = 0;
            return 0;
        }
    }
    return -EINVAL;
}

static int int_parse(const char *text, int64_t *out)
{
    const char *p = text;
    const bool negative = *p == '-';
    if (*p == '-' || *p == '+')
        p++;
    if (!isdigit((unsigned char)*p))
        return -EINVAL;
    uint64_t mag = 0;
    for (; isdigit((unsigned char)*p); p++) {
        if (__builtin_mul_overflow(mag, 10, &mag) || __builtin_add_overflow(mag, (uint64_t)(*p - '0'), &mag))
            return -ERANGE;
    }
    if (*p)
        return -EINVAL;
    if (mag > (uint64_t)INT64_MAX + (negative ? 1 : 0))
        return -ERANGE;
    *out = negative ? (int64_t)(0 - mag) : (int64_t)mag;
    return 0;
}

/* Locale-independent on purpose: the shim may load after the application has
 * called setlocale(), and "0,95" must not silently become 0. */
static int double_parse(const char *text, double *out)
{
    const char *p = text;
    const bool negative = *p == '-';
    if (*p == '-' || *p == '+')
        p++;
    IbpDecimal d;
    int rc = decimal_parse(&p, &d);
    if (rc < 0)
        return rc;
    if (*p)
        return -EINVAL;
    /* Nine fraction digits are plenty for a ratio and keep format/parse exact. */
    while (d.frac_den > 1000000000) {
        d.frac_num /= 10;
        d.frac_den /= 10;
    }
    const double v = (double)d.whole + (double)d.frac_num / (double)d.frac_den;
    *out = negative ? -v : v;
    return 0;
}

static size_t double_format(double v, char *buf, size_t len)
{
    const bool negative = v < 0;
    const double mag = negative ? -v : v;
    int n;
    if (mag >= 1e9) {
        n = snprintf(buf, len, "%s%.0f", negative ? "-" : "", mag);
    } else {
        const unsigned long long scaled = (unsigned long long)(mag * 1e9 + 0.5);
        char frac[16];
        snprintf(frac, sizeof(frac), "%09llu", scaled % 1000000000ULL);
        size_t flen = strlen(frac);
        while (flen > 0 && frac[flen - 1] == '0')
            frac[--flen] = '\0';
        n = snprintf(buf, len, "%s%llu%s%s", negative && scaled ? "-" : "", scaled / 1000000000ULL,
                     flen ? "." : "", frac);
    }
    return n < 0 ? 0 : ((size_t)n < len ? (size_t)n : len - 1);
}

static const char *enum_names(const IbpConfigEnumValue *values, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (const IbpConfigEnumValue *v = values; v->name; v++) {
        if (v->alias)
            continue;
        const int n = snprintf(buf + used, len - used, "%s%s", used ? ", " : "", v->name);
        if (n < 0 || (size_t)n >= len - used)
            break;
        used += (size_t)n;
    }
    return buf;
}

static bool is_space(char c)
{
    return isspace((unsigned char)c) != 0;
}

int ibp_config_value_parse(const IbpConfigOption *opt, const char *text, IbpConfigValue *out, char *why,
                           size_t why_len)
{
    size_t len = strlen(text);
    while (len > 0 && is_space(*text)) {
        text++;
        len--;
    }
    while (len > 0 && is_space(text[len - 1]))
        len--;
    if (len >= 2 && text[0] == '"' && text[len - 1] == '"') {
        text++;
        len -= 2;
    }
    if (len >= sizeof(out->s)) {
        set_why(why, why_len, "longer than %zu bytes", sizeof(out->s) - 1);
        return -ERANGE;
    }
    memcpy(out->s, text, len);
    out->s[len] = '\0';
    const char *const s = out->s;
    char buf[96];
    int rc;

    if (opt->type != IBP_CONFIG_STRING && len == 0) {
        set_why(why, why_len, "empty value");
        return -EINVAL;
    }
    switch (opt->type) {
    case IBP_CONFIG_BOOL:
        if (bool_parse(s, &out->i) < 0) {
            set_why(why, why_len, "not a boolean (1/0, true/false, yes/no, on/off)");
            return -EINVAL;
        }
        return 0;
    case IBP_CONFIG_INT:
        rc = int_parse(s, &out->i);
        if (rc == -EINVAL) {
            set_why(why, why_len, "not a whole number");
            return rc;
        }
        if (rc < 0 || out->i < opt->int_min || out->i > opt->int_max) {
            set_why(why, why_len, "out of range [%lld, %lld]", (long long)opt->int_min,
                    (long long)opt->int_max);
            return -ERANGE;
        }
        return 0;
    case IBP_CONFIG_DOUBLE:
        rc = double_parse(s, &out->d);
        if (rc == -EINVAL) {
            set_why(why, why_len, "not a decimal number like 0.95");
            return rc;
        }
        if (rc < 0 || !(out->d >= opt->double_min && out->d <= opt->double_max)) {
            char lo[32], hi[32];
            double_format(opt->double_min, lo, sizeof(lo));
            double_format(opt->double_max, hi, sizeof(hi));
            set_why(why, why_len, "out of range [%s, %s]", lo, hi);
            return -ERANGE;
        }
        return 0;
    case IBP_CONFIG_SIZE:
    case IBP_CONFIG_DURATION: {
        const bool size = opt->type == IBP_CONFIG_SIZE;
        const char *p = s;
        IbpDecimal d;
        if (*p == '-') {
            set_why(why, why_len, "negative %s", size ? "size" : "duration");
            return -ERANGE;
        }
        rc = decimal_parse(&p, &d);
        if (rc == 0)
            rc = unit_parse(&d, p, size ? size_units : duration_units, &out->u);
        if (rc == -EINVAL) {
            set_why(why, why_len, "%s",
                    size ? "not a size: a number with an optional unit B, k/KiB, M/MiB, G/GiB, T/TiB, P/PiB "
                           "(x1024) or kB, MB, GB, TB, PB (x1000)"
                         : "not a duration: a number with a unit ns, us, ms, s, m (minutes) or h");
            return rc;
        }
        if (rc < 0 || out->u < opt->u64_min || out->u > opt->u64_max) {
            char lo[32], hi[32];
            if (size) {
                ibp_config_size_format(opt->u64_min, lo, sizeof(lo));
                ibp_config_size_format(opt->u64_max, hi, sizeof(hi));
            } else {
                ibp_config_duration_format(opt->u64_min, lo, sizeof(lo));
                ibp_config_duration_format(opt->u64_max, hi, sizeof(hi));
            }
            set_why(why, why_len, "out of range [%s, %s]", lo, hi);
            return -ERANGE;
        }
        return 0;
    }
    case IBP_CONFIG_ENUM:
        for (const IbpConfigEnumValue *v = opt->values; v->name; v++) {
            if (!strcasecmp(s, v->name)) {
                out->i = v->value;
                return 0;
            }
        }
        set_why(why, why_len, "not one of %s", enum_names(opt->values, buf, sizeof(buf)));
        return -EINVAL;
    case IBP_CONFIG_STRING:
        return 0;
    }
    assert(!"unknown option type");
    return -EINVAL;
}

void ibp_config_value_store(const IbpConfigOption *opt, const IbpConfigValue *value, IbpConfig *cfg)
{
    void *const field = (char *)cfg + opt->offset;
    switch (opt->type) {
    case IBP_CONFIG_BOOL:
        *(bool *)field = value->i != 0;
        break;
    case IBP_CONFIG_INT:
    case IBP_CONFIG_ENUM:
        *(int *)field = (int)value->i;
        break;
    case IBP_CONFIG_SIZE:
    case IBP_CONFIG_DURATION:
        *(uint64_t *)field = value->u;
        break;
    case IBP_CONFIG_DOUBLE:
        *(double *)field = value->d;
        break;
    case IBP_CONFIG_STRING:
        memcpy(field, value->s, strlen(value->s) + 1);
        break;
    }
}

size_t ibp_config_value_format(const IbpConfigOption *opt, const IbpConfig *cfg, char *buf, size_t len)
{
    const void *const field = (const char *)cfg + opt->offset;
    int n = 0;
    assert(len > 0);
    switch (opt->type) {
    case IBP_CONFIG_BOOL:
        n = snprintf(buf, len, "%s", *(const bool *)field ? "true" : "false");
        break;
    case IBP_CONFIG_INT:
        n = snprintf(buf, len, "%d", *(const int *)field);
        break;
    case IBP_CONFIG_SIZE:
        return ibp_config_size_format(*(const uint64_t *)field, buf, len);
    case IBP_CONFIG_DURATION:
        return ibp_config_duration_format(*(const uint64_t *)field, buf, len);
    case IBP_CONFIG_DOUBLE:
        return double_format(*(const double *)field, buf, len);
    case IBP_CONFIG_ENUM: {
        const int v = *(const int *)field;
        n = snprintf(buf, len, "%d", v);
        for (const IbpConfigEnumValue *e = opt->values; e->name; e++) {
            if (e->value == v) {
                n = snprintf(buf, len, "%s", e->name);
                break;
            }
        }
        break;
    }
    case IBP_CONFIG_STRING: {
        /* Quote exactly when parsing would otherwise strip or unquote something. */
        const char *s = field;
        const size_t slen = strlen(s);
        const bool quote = slen > 0 && (is_space(s[0]) || is_space(s[slen - 1]) ||
                                        (slen >= 2 && s[0] == '"' && s[slen - 1] == '"'));
        n = snprintf(buf, len, quote ? "\"%s\"" : "%s", s);
        break;
    }
    }
    return n < 0 ? 0 : ((size_t)n < len ? (size_t)n : len - 1);
}

void ibp_config_defaults(IbpConfig *cfg)
{
    IbpConfigValue value;
    static_assert(sizeof(IbpTracking) == sizeof(int) && sizeof(IbpTransferPath) == sizeof(int) &&
                      sizeof(IbpStagingExhausted) == sizeof(int) && sizeof(IbpReportFormat) == sizeof(int) &&
                      sizeof(IbpLogLevel) == sizeof(int) && sizeof(IbpSelectorFlags) == sizeof(int),
                  "enum options are stored through int");
    memset(cfg, 0, sizeof(*cfg));
    for (size_t i = 0; i < IBP_CONFIG_OPTION_COUNT; i++) {
        char why[160];
        const int rc = ibp_config_value_parse(&options[i], options[i].default_text, &value, why, sizeof(why));
        assert(rc == 0 && "every default passes its own option's parser");
        (void)rc;
        ibp_config_value_store(&options[i], &value, cfg);
    }
}
