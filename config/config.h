/* SPDX-License-Identifier: MIT
 * ibpshim: the option table, the typed configuration and its loader (ini file + IBPSHIM_* environment). */
#ifndef IBP_CONFIG_CONFIG_H
#define IBP_CONFIG_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/log.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Room for a string option, terminator included.  Strings are stored inline so
 * that a loaded configuration owns no heap memory. */
#define IBP_CONFIG_STRING_MAX 4096

/* The file the lookup tries last. */
#define IBP_CONFIG_SYSTEM_FILE "/etc/ibpshim.ini"

/* Files larger than this are refused as a whole: an ini of 24 options is a few KiB. */
#define IBP_CONFIG_FILE_MAX (1u << 20)

/* [policy] selector_flags: where plans write the flagged selector form (codec/FORMAT.md). */
typedef enum IbpSelectorFlags {
    IBP_SELECTOR_FLAGS_OFF = 0,
    IBP_SELECTOR_FLAGS_ON,
    IBP_SELECTOR_FLAGS_AUTO, /* for regions that compress to at least IBP_SELECTOR_FLAGS_AUTO_RATIO */
} IbpSelectorFlags;

/* Under selector_flags = auto, regions whose plan compresses them below this ratio (decoded
 * faster than the link delivers only without the rewrite pass) keep fixed-width selectors. */
#define IBP_SELECTOR_FLAGS_AUTO_RATIO 0.5
/* ...and so do regions whose longest copy before compression was shorter than this (a copy this
 * short waits more for the rewrite pass's launch than it saves in bytes). */
#define IBP_SELECTOR_FLAGS_AUTO_COPY_BYTES (64u << 20)

typedef enum IbpTracking {
    IBP_TRACKING_AUTO = 0,
    IBP_TRACKING_UFFD,
    IBP_TRACKING_MPROTECT,
    IBP_TRACKING_NONE, /* the user promises tracked regions never change after their first copy */
} IbpTracking;

typedef enum IbpTransferPath {
    IBP_TRANSFER_PATH_AUTO = 0,
    IBP_TRANSFER_PATH_DMA,
    IBP_TRANSFER_PATH_ZEROCOPY,
} IbpTransferPath;

typedef enum IbpStagingExhausted {
    IBP_STAGING_EXHAUSTED_WAIT = 0,
    IBP_STAGING_EXHAUSTED_RAW,
} IbpStagingExhausted;

typedef enum IbpReportFormat {
    IBP_REPORT_FORMAT_TEXT = 0,
    IBP_REPORT_FORMAT_JSON,
} IbpReportFormat;

/* Every option, typed.  Sizes are bytes, durations nanoseconds; the option
 * table in config.c maps each field to its ini key and environment variable. */
typedef struct IbpConfig {
    struct {
        bool enabled;
        IbpLogLevel log_level;
        char log_file[IBP_CONFIG_STRING_MAX]; /* "" = standard error */
    } shim;
    struct {
        uint64_t min_bytes;
        int min_copies;
        double min_ratio;
        uint64_t max_shadow_bytes; /* 0 = auto, see ibp_config_shadow_budget() */
        IbpTracking tracking;
        int compressor_threads;
        double plan_reuse; /* < 0: plan every region afresh */
        int churn_limit; /* 0 = never stop tracking a region */
        uint64_t churn_window_ns;
        bool track_shared;
        bool track_write_combined;
        bool track_mapped;
        IbpSelectorFlags selector_flags;
        bool top_coded;
    } policy;
    struct {
        IbpTransferPath path;
        uint64_t staging_bytes;
        uint64_t block_bytes; /* 0 = codec default */
        int max_sms;          /* 0 = no limit */
        IbpStagingExhausted staging_exhausted;
        uint64_t pipeline_chunk; /* 0 = no pipelining */
        uint64_t pipeline_tail;  /* 0 = chunks of equal size */
        uint64_t pipeline_raw_tail; /* 0 = none */
        bool priority_decode;    /* decode on an internal stream of the highest priority */
        bool raw_in_order;       /* copies that go as they are follow compressed copies' DMAs */
        bool raw_edges;          /* clipped edges of serial runs as they are where fewer bytes */
        bool edge_kernel;        /* those edges written by a kernel on the application's stream */
    } transfer;
    struct {
        char path[IBP_CONFIG_STRING_MAX]; /* "" = no JSON file */
        IbpReportFormat format;
        bool on_exit;
        int signal_number; /* 0 = none, else SIGUSR1 or SIGUSR2 */
        uint64_t interval_ns; /* 0 = no periodic report */
        int stack_depth;
    } report;
} IbpConfig;

typedef enum IbpConfigType {
    IBP_CONFIG_BOOL = 0,
    IBP_CONFIG_INT,
    IBP_CONFIG_SIZE,
    IBP_CONFIG_DOUBLE,
    IBP_CONFIG_ENUM,
    IBP_CONFIG_STRING,
    IBP_CONFIG_DURATION,
} IbpConfigType;

/* One accepted spelling of an enum option.  Aliases parse but are never printed. */
typedef struct IbpConfigEnumValue {
    const char *name;
    int value;
    bool alias;
} IbpConfigEnumValue;

/* One row of the option table.  Defaults are text in the option's own syntax,
 * so docs show them as a user would write them and they pass the same parser.
 * Only the range fields of the option's type are meaningful. */
typedef struct IbpConfigOption {
    const char *section;
    const char *key;
    IbpConfigType type;
    size_t offset; /* into IbpConfig */
    const char *default_text;
    int64_t int_min, int_max;    /* IBP_CONFIG_INT */
    uint64_t u64_min, u64_max;   /* IBP_CONFIG_SIZE (bytes), IBP_CONFIG_DURATION (ns) */
    double double_min, double_max;
    const IbpConfigEnumValue *values; /* IBP_CONFIG_ENUM, ended by a NULL name */
    const char *help;
} IbpConfigOption;

#define IBP_CONFIG_OPTION_COUNT 35

/* The table, IBP_CONFIG_OPTION_COUNT rows grouped by section in file order. */
const IbpConfigOption *ibp_config_options(void);

/* Returns the row for section/key (case-insensitive), or NULL. */
const IbpConfigOption *ibp_config_option_find(const char *section, const char *key);

/* Writes the option's environment variable name, IBPSHIM_<SECTION>_<KEY>, into
 * buf.  Returns 0, or -ENOSPC when it does not fit. */
int ibp_config_env_name(const IbpConfigOption *opt, char *buf, size_t len);

/* A parsed value, before it is stored into an IbpConfig. */
typedef struct IbpConfigValue {
    int64_t i;  /* INT, BOOL (0/1), ENUM */
    uint64_t u; /* SIZE, DURATION */
    double d;
    char s[IBP_CONFIG_STRING_MAX];
} IbpConfigValue;

/* Parses text (surrounding white space ignored, one pair of enclosing double
 * quotes removed) as a value of opt, range included.  On failure writes a
 * one-line reason into why (without the key or the text) and returns -EINVAL
 * (malformed) or -ERANGE (out of range or overflow).  Thread-safety: pure. */
int ibp_config_value_parse(const IbpConfigOption *opt, const char *text, IbpConfigValue *out, char *why,
                           size_t why_len);

void ibp_config_value_store(const IbpConfigOption *opt, const IbpConfigValue *value, IbpConfig *cfg);

/* Formats the option's current value in cfg so that ibp_config_value_parse()
 * reads it back unchanged: sizes in the largest exact unit (4MiB), durations
 * likewise (250ms), booleans as true/false, enums by their first name.  Returns
 * the length written, truncated to len - 1 (strings up to IBP_CONFIG_STRING_MAX
 * + 2 bytes need a buffer of IBP_CONFIG_STRING_MAX + 3). */
size_t ibp_config_value_format(const IbpConfigOption *opt, const IbpConfig *cfg, char *buf, size_t len);

/* Formats a bare size or duration the same way (used for ranges in docs and messages). */
size_t ibp_config_size_format(uint64_t bytes, char *buf, size_t len);
size_t ibp_config_duration_format(uint64_t ns, char *buf, size_t len);

/* Fills cfg with every option's default. */
void ibp_config_defaults(IbpConfig *cfg);

typedef enum IbpConfigOrigin {
    IBP_CONFIG_ORIGIN_DEFAULT = 0,
    IBP_CONFIG_ORIGIN_FILE,
    IBP_CONFIG_ORIGIN_ENV,
} IbpConfigOrigin;

typedef struct IbpConfigSource {
    IbpConfigOrigin origin;
    unsigned line;   /* IBP_CONFIG_ORIGIN_FILE: 1-based line in IbpConfigReport.file */
    bool env_alias;  /* IBP_CONFIG_ORIGIN_ENV: set through IBPSHIM_LOG_LEVEL, not the option's own name */
} IbpConfigSource;

/* What a load did: the file it read, how many problems it reported, and where
 * each option's value came from (indexed like ibp_config_options()). */
typedef struct IbpConfigReport {
    char file[IBP_CONFIG_STRING_MAX]; /* "" when no file was read */
    unsigned errors;
    unsigned warnings;
    IbpConfigSource source[IBP_CONFIG_OPTION_COUNT];
} IbpConfigReport;

/* Describes where option index's value came from: "default", "FILE:LINE" or
 * the environment variable's name.  Returns the length written, truncated to len - 1. */
size_t ibp_config_source_describe(const IbpConfigReport *report, size_t index, char *buf, size_t len);

/* Loads the configuration the shim runs with: defaults, then the first file
 * that exists among $IBPSHIM_CONFIG (when set and non-empty; a named file that
 * cannot be read is an error and nothing else is looked up), ./ibpshim.ini,
 * $XDG_CONFIG_HOME/ibpshim/ibpshim.ini (or ~/.config/ibpshim/ibpshim.ini),
 * IBP_CONFIG_SYSTEM_FILE; then IBPSHIM_<SECTION>_<KEY> environment overrides
 * (and IBPSHIM_LOG_LEVEL for shim.log_level); then cross-option checks.
 *
 * Every problem is logged once, as an error (malformed line, unknown section
 * or key, bad or out-of-range value, unreadable file) or a warning (a key set
 * twice), naming file:line or the variable and the key; the offending entry
 * keeps its previous value and everything else still applies.  The result is
 * always a usable configuration.  Never aborts or exits; allocates only while
 * it runs (to read the file) and keeps nothing; safe before main().
 * report may be NULL.  Thread-safety: reads the environment; call it from one
 * thread at a time (the shim calls it once, under pthread_once). */
void ibp_config_load(IbpConfig *cfg, IbpConfigReport *report);

/* As ibp_config_load(), with system_file in place of IBP_CONFIG_SYSTEM_FILE
 * (NULL skips that step).  Lets tests exercise the whole lookup. */
void ibp_config_load_lookup(IbpConfig *cfg, IbpConfigReport *report, const char *system_file);

/* Applies one ini document of size bytes (any bytes; not NUL-terminated) on
 * top of cfg, naming it name in messages and in report->file.  Counts and
 * sources accumulate into report.  Does not look at the environment. */
void ibp_config_parse_buffer(IbpConfig *cfg, IbpConfigReport *report, const char *name, const char *data,
                             size_t size);

/* Reads path and applies it like ibp_config_parse_buffer().  Returns 0, or
 * -errno when the file cannot be opened or read (-EFBIG above
 * IBP_CONFIG_FILE_MAX); that failure is logged and counted as an error. */
int ibp_config_parse_file(IbpConfig *cfg, IbpConfigReport *report, const char *path);

/* Applies IBPSHIM_* environment overrides and reports IBPSHIM_<SECTION>_*
 * variables that name no option. */
void ibp_config_apply_env(IbpConfig *cfg, IbpConfigReport *report);

/* Cross-option checks (transfer.block_bytes <= transfer.staging_bytes); a
 * failing option goes back to its default. */
void ibp_config_validate(IbpConfig *cfg, IbpConfigReport *report);

/* policy.max_shadow_bytes resolved: the configured value, or for 0 (auto) a
 * quarter of physical memory (256 MiB when that cannot be read). */
uint64_t ibp_config_shadow_budget(const IbpConfig *cfg);

#ifdef __cplusplus
}
#endif

#endif /* IBP_CONFIG_CONFIG_H */
