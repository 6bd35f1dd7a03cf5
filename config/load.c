/* SPDX-License-Identifier: MIT
 * ibpshim: loading the configuration: file lookup, ini parsing with inih, IBPSHIM_* overrides, checks. */
#include "config/config.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* Before the first section header. */
#define SECTION_NONE (-1)
/* After a header that was already reported: its keys are skipped without further messages. */
#define SECTION_BAD (-2)

/* Values quoted in messages are cut to this many bytes. */
#define SHOWN_MAX 60

typedef struct IbpIniState {
    IbpConfig *cfg;
    IbpConfigReport *report;
    const char *name;
    const char *data;
    size_t size;
    size_t pos;
    unsigned lineno;
    int section; /* index of the section's first option, or SECTION_* */
    unsigned first_line[IBP_CONFIG_OPTION_COUNT]; /* where this document set each option; 0 = not yet */
} IbpIniState;

static bool is_space(char c)
{
    return isspace((unsigned char)c) != 0;
}

static const char *error_text(int err, char *buf, size_t len)
{
    return strerror_r(err, buf, len);
}

/* Copies at most SHOWN_MAX bytes of text, marking a cut with "...", and makes
 * control bytes visible so one message stays one line. */
static const char *shorten(const char *text, size_t len, char *buf, size_t buf_len)
{
    size_t out = 0;
    size_t i = 0;
    for (; i < len && i < SHOWN_MAX && out + 5 < buf_len; i++) {
        const unsigned char c = (unsigned char)text[i];
        if (c < 0x20 || c == 0x7f)
            out += (size_t)snprintf(buf + out, buf_len - out, "\\x%02x", c);
        else
            buf[out++] = (char)c;
    }
    if (i < len && out + 4 <= buf_len) {
        memcpy(buf + out, "...", 3);
        out += 3;
    }
    buf[out] = '\0';
    return buf;
}

static void note_error(IbpConfigReport *report)
{
    report->errors++;
}

static size_t section_names(char *buf, size_t len)
{
    const IbpConfigOption *const opts = ibp_config_options();
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < IBP_CONFIG_OPTION_COUNT; i++) {
        if (i > 0 && !strcmp(opts[i].section, opts[i - 1].section))
            continue;
        const int n = snprintf(buf + used, len - used, "%s[%s]", used ? ", " : "", opts[i].section);
        if (n < 0 || (size_t)n >= len - used)
            break;
        used += (size_t)n;
    }
    return used;
}

/* Levenshtein distance, capped: names longer than 63 bytes are never close. */
static unsigned edit_distance(const char *a, const char *b)
{
    const size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return 99;
    unsigned prev[64], cur[64];
    for (size_t j = 0; j <= lb; j++)
        prev[j] = (unsigned)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (unsigned)i;
        for (size_t j = 1; j <= lb; j++) {
            const bool differ = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            const unsigned sub = prev[j - 1] + differ;
            const unsigned del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, sizeof(unsigned) * (lb + 1));
    }
    return prev[lb];
}

/* The option an unknown key most likely meant: the same key in another
 * section, else a close spelling in this one; NULL when nothing is close. */
static const IbpConfigOption *closest_option(const char *section, const char *key)
{
    const IbpConfigOption *const opts = ibp_config_options();
    const IbpConfigOption *close = NULL;
    unsigned best = 3;
    for (size_t i = 0; i < IBP_CONFIG_OPTION_COUNT; i++) {
        if (strcasecmp(opts[i].section, section) != 0) {
            if (!strcasecmp(opts[i].key, key))
                return &opts[i];
            continue;
        }
        const unsigned d = edit_distance(opts[i].key, key);
        if (d < best) {
            best = d;
            close = &opts[i];
        }
    }
    return close;
}

static const char *key_hint(const char *section, const char *key, char *buf, size_t len)
{
    const IbpConfigOption *const close = closest_option(section, key);
    buf[0] = '\0';
    if (close && strcasecmp(close->section, section) != 0)
        snprintf(buf, len, " (it belongs in [%s])", close->section);
    else if (close)
        snprintf(buf, len, " (did you mean '%s'?)", close->key);
    return buf;
}

static const char *env_hint(const char *section, const char *key, char *buf, size_t len)
{
    const IbpConfigOption *const close = closest_option(section, key);
    char name[96];
    buf[0] = '\0';
    if (close && ibp_config_env_name(close, name, sizeof(name)) == 0)
        snprintf(buf, len, " (did you mean %s?)", name);
    return buf;
}

static void section_line(IbpIniState *st, const char *line, size_t len)
{
    const IbpConfigOption *const opts = ibp_config_options();
    char shown[SHOWN_MAX * 4 + 8];
    const char *const close = memchr(line, ']', len);
    if (!close) {
        note_error(st->report);
        IBP_ERROR("%s:%u: section header '%s' has no closing ']'; keys up to the next header are ignored",
                  st->name, st->lineno, shorten(line, len, shown, sizeof(shown)));
        st->section = SECTION_BAD;
        return;
    }
    const char *name = line + 1;
    size_t name_len = (size_t)(close - name);
    while (name_len > 0 && is_space(*name)) {
        name++;
        name_len--;
    }
    while (name_len > 0 && is_space(name[name_len - 1]))
        name_len--;

    st->section = SECTION_BAD;
    for (size_t i = 0; i < IBP_CONFIG_OPTION_COUNT; i++) {
        if (strlen(opts[i].section) == name_len && !strncasecmp(opts[i].section, name, name_len)) {
            st->section = (int)i;
            break;
        }
    }
    if (st->section == SECTION_BAD) {
        char known[128];
        section_names(known, sizeof(known));
        note_error(st->report);
        IBP_ERROR("%s:%u: unknown section [%s] (known: %s); its keys are ignored", st->name, st->lineno,
                  shorten(name, name_len, shown, sizeof(shown)), known);
        return;
    }

    const char *rest = close + 1;
    size_t rest_len = len - (size_t)(rest - line);
    while (rest_len > 0 && is_space(*rest)) {
        rest++;
        rest_len--;
    }
    if (rest_len > 0 && *rest != ';' && *rest != '#') {
        note_error(st->report);
        IBP_ERROR("%s:%u: unexpected text '%s' after [%s]; ignored", st->name, st->lineno,
                  shorten(rest, rest_len, shown, sizeof(shown)), opts[st->section].section);
    }
}

/* inih's line reader.  Feeding inih line by line lets us count lines
 * ourselves and catch what inih would reject without a callback (no '=',
 * broken headers, over-long lines), so each problem gets its own message.
 * Everything but key lines is handed over blank; key lines go without their
 * indentation, which turns off inih's multi-line continuation. */
static char *ini_next_line(char *str, int num, void *stream)
{
    IbpIniState *const st = stream;
    if (st->pos >= st->size)
        return NULL;
    const char *line = st->data + st->pos;
    const char *const nl = memchr(line, '\n', st->size - st->pos);
    size_t len = nl ? (size_t)(nl - line) : st->size - st->pos;
    st->pos += nl ? len + 1 : len;
    st->lineno++;
    str[0] = '\0';

    if (st->lineno == 1 && len >= 3 && !memcmp(line, "\xef\xbb\xbf", 3)) {
        line += 3;
        len -= 3;
    }
    while (len > 0 && is_space(*line)) {
        line++;
        len--;
    }
    while (len > 0 && is_space(line[len - 1]))
        len--;
    if (len == 0 || *line == ';' || *line == '#')
        return str;

    char shown[SHOWN_MAX * 4 + 8];
    if (memchr(line, '\0', len)) {
        note_error(st->report);
        IBP_ERROR("%s:%u: line contains a NUL byte; ignored", st->name, st->lineno);
        if (*line == '[')
            st->section = SECTION_BAD;
        return str;
    }
    if (*line == '[') {
        section_line(st, line, len);
        return str;
    }
    if (len >= (size_t)num) {
        note_error(st->report);
        IBP_ERROR("%s:%u: line '%s' is longer than %d characters; ignored (long values can be set through "
                  "the environment)",
                  st->name, st->lineno, shorten(line, len, shown, sizeof(shown)), num - 1);
        return str;
    }
    /* Mirrors inih: the first '=' or ':' splits the line unless a ';' after white space starts a comment. */
    for (size_t i = 0; i < len; i++) {
        if (line[i] == '=' || line[i] == ':') {
            memcpy(str, line, len);
            str[len] = '\0';
            return str;
        }
        if (line[i] == ';' && i > 0 && is_space(line[i - 1]))
            break;
    }
    note_error(st->report);
    IBP_ERROR("%s:%u: expected 'key = value', found '%s'; ignored", st->name, st->lineno,
              shorten(line, len, shown, sizeof(shown)));
    return str;
}

static int ini_on_value(void *user, const char *section, const char *key, const char *value)
{
    IbpIniState *const st = user;
    const IbpConfigOption *const opts = ibp_config_options();
    char shown[SHOWN_MAX * 4 + 8];
    (void)section; /* the reader tracks sections itself, including broken headers */

    if (st->section == SECTION_BAD)
        return 1;
    if (!*key) {
        note_error(st->report);
        IBP_ERROR("%s:%u: missing key before '='; ignored", st->name, st->lineno);
        return 1;
    }
    if (st->section == SECTION_NONE) {
        char hint[160] = "";
        for (size_t i = 0; i < IBP_CONFIG_OPTION_COUNT; i++) {
            if (!strcasecmp(opts[i].key, key)) {
                snprintf(hint, sizeof(hint), " (it belongs in [%s])", opts[i].section);
                break;
            }
        }
        note_error(st->report);
        IBP_ERROR("%s:%u: key '%s' comes before any [section]%s; ignored", st->name, st->lineno,
                  shorten(key, strlen(key), shown, sizeof(shown)), hint);
        return 1;
    }
    const char *const sec = opts[st->section].section;
    const IbpConfigOption *const opt = ibp_config_option_find(sec, key);
    if (!opt) {
        char hint[160];
        note_error(st->report);
        IBP_ERROR("%s:%u: unknown key '%s' in [%s]%s; ignored", st->name, st->lineno,
                  shorten(key, strlen(key), shown, sizeof(shown)), sec,
                  key_hint(sec, key, hint, sizeof(hint)));
        return 1;
    }
    const size_t index = (size_t)(opt - opts);
    if (st->first_line[index]) {
        st->report->warnings++;
        IBP_WARN("%s:%u: [%s] %s was already set at line %u; the later value wins", st->name, st->lineno,
                 opt->section, opt->key, st->first_line[index]);
    }
    st->first_line[index] = st->lineno;

    IbpConfigValue parsed;
    char why[192];
    if (ibp_config_value_parse(opt, value, &parsed, why, sizeof(why)) < 0) {
        char keep[IBP_CONFIG_STRING_MAX + 3];
        ibp_config_value_format(opt, st->cfg, keep, sizeof(keep));
        char kept[SHOWN_MAX * 4 + 8];
        note_error(st->report);
        IBP_ERROR("%s:%u: [%s] %s = '%s': %s; keeping %s", st->name, st->lineno, opt->section, opt->key,
                  shorten(value, strlen(value), shown, sizeof(shown)), why,
                  shorten(keep, strlen(keep), kept, sizeof(kept)));
        return 1;
    }
    ibp_config_value_store(opt, &parsed, st->cfg);
    st->report->source[index] = (IbpConfigSource){.origin = IBP_CONFIG_ORIGIN_FILE, .line = st->lineno};
    return 1;
}

void ibp_config_parse_buffer(IbpConfig *cfg, IbpConfigReport *report, const char *name, const char *data,
                             size_t size)
{
    IbpIniState st = {
        .cfg = cfg,
        .report = report,
        .name = name,
        .data = data,
        .size = size,
        .section = SECTION_NONE,
    };
    snprintf(report->file, sizeof(report->file), "%s", name);
    const int rc = ini_parse_stream(ini_next_line, &st, ini_on_value, &st);
    if (rc != 0) {
        /* The reader hands inih only lines it accepts, so this means the two disagree. */
        note_error(report);
        IBP_ERROR("%s:%d: the ini parser rejected this line; ignored", name, rc);
    }
}

/* Reads a whole file (regular or not, e.g. a pipe) of at most IBP_CONFIG_FILE_MAX bytes. */
static int read_file(const char *path, char **out, size_t *out_size)
{
    size_t cap = 4096, size = 0;
    char *buf = NULL;
    int rc;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    buf = malloc(cap);
    if (!buf) {
        rc = -ENOMEM;
        goto fail;
    }
    for (;;) {
        if (size == cap) {
            /* One byte past the limit is room enough to tell "exactly the limit" from "more". */
            if (cap > IBP_CONFIG_FILE_MAX) {
                rc = -EFBIG;
                goto fail;
            }
            const size_t next = cap * 2 > IBP_CONFIG_FILE_MAX ? IBP_CONFIG_FILE_MAX + 1 : cap * 2;
            char *const grown = realloc(buf, next);
            if (!grown) {
                rc = -ENOMEM;
                goto fail;
            }
            buf = grown;
            cap = next;
        }
        const ssize_t n = read(fd, buf + size, cap - size);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            goto fail;
        }
        if (n == 0)
            break;
        size += (size_t)n;
    }
    if (size > IBP_CONFIG_FILE_MAX) {
        rc = -EFBIG;
        goto fail;
    }
    close(fd);
    *out = buf;
    *out_size = size;
    return 0;
fail:
    free(buf);
    close(fd);
    return rc;
}

/* what names the source of the path in the message ("" or " (named by IBPSHIM_CONFIG)").
 * A missing file is reported only when missing_is_error. */
static int parse_path(IbpConfig *cfg, IbpConfigReport *report, const char *path, const char *what,
                      bool missing_is_error)
{
    char *data = NULL;
    size_t size = 0;
    const int rc = read_file(path, &data, &size);
    if (rc < 0) {
        if ((rc == -ENOENT || rc == -ENOTDIR) && !missing_is_error)
            return rc;
        char eb[128];
        note_error(report);
        if (rc == -EFBIG)
            IBP_ERROR("%s%s: larger than %u bytes, not a configuration file; "
                      "using defaults and the environment",
                      path, what, IBP_CONFIG_FILE_MAX);
        else
            IBP_ERROR("%s%s: cannot read it (%s); using defaults and the environment", path, what,
                      error_text(-rc, eb, sizeof(eb)));
        return rc;
    }
    ibp_config_parse_buffer(cfg, report, path, data, size);
    free(data);
    return 0;
}

int ibp_config_parse_file(IbpConfig *cfg, IbpConfigReport *report, const char *path)
{
    return parse_path(cfg, report, path, "", true);
}

static void lookup_and_parse(IbpConfig *cfg, IbpConfigReport *report, const char *system_file)
{
    const char *const named = getenv("IBPSHIM_CONFIG");
    if (named && *named) {
        parse_path(cfg, report, named, " (named by IBPSHIM_CONFIG)", true);
        return;
    }
    char user_file[IBP_CONFIG_STRING_MAX] = "";
    const char *const xdg = getenv("XDG_CONFIG_HOME");
    const char *const home = getenv("HOME");
    int n = -1;
    /* The XDG spec says a relative XDG_CONFIG_HOME is invalid and to be ignored. */
    if (xdg && xdg[0] == '/')
        n = snprintf(user_file, sizeof(user_file), "%s/ibpshim/ibpshim.ini", xdg);
    else if (home && *home)
        n = snprintf(user_file, sizeof(user_file), "%s/.config/ibpshim/ibpshim.ini", home);
    if (n < 0 || (size_t)n >= sizeof(user_file))
        user_file[0] = '\0';

    const char *const candidates[] = {"./ibpshim.ini", user_file, system_file};
    for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++) {
        if (!candidates[i] || !*candidates[i])
            continue;
        const int rc = parse_path(cfg, report, candidates[i], "", false);
        if (rc != -ENOENT && rc != -ENOTDIR)
            return;
    }
}

void ibp_config_apply_env(IbpConfig *cfg, IbpConfigReport *report)
{
    const IbpConfigOption *const opts = ibp_config_options();
    char shown[SHOWN_MAX * 4 + 8];
    for (size_t i = 0; i < IBP_CONFIG_OPTION_COUNT; i++) {
        char name[96];
        const int rc = ibp_config_env_name(&opts[i], name, sizeof(name));
        assert(rc == 0);
        (void)rc;
        const char *text = getenv(name);
        bool alias = false;
        if (!text && !strcmp(opts[i].section, "shim") && !strcmp(opts[i].key, "log_level")) {
            text = getenv("IBPSHIM_LOG_LEVEL");
            alias = true;
            snprintf(name, sizeof(name), "IBPSHIM_LOG_LEVEL");
        }
        if (!text)
            continue;
        IbpConfigValue parsed;
        char why[192];
        if (ibp_config_value_parse(&opts[i], text, &parsed, why, sizeof(why)) < 0) {
            char keep[IBP_CONFIG_STRING_MAX + 3];
            char kept[SHOWN_MAX * 4 + 8];
            ibp_config_value_format(&opts[i], cfg, keep, sizeof(keep));
            note_error(report);
            IBP_ERROR("%s='%s' ([%s] %s): %s; keeping %s", name,
                      shorten(text, strlen(text), shown, sizeof(shown)), opts[i].section, opts[i].key, why,
                      shorten(keep, strlen(keep), kept, sizeof(kept)));
            continue;
        }
        ibp_config_value_store(&opts[i], &parsed, cfg);
        report->source[i] = (IbpConfigSource){.origin = IBP_CONFIG_ORIGIN_ENV, .env_alias = alias};
    }

    /* A misspelt override would otherwise be silently ignored.  Only our own
     * IBPSHIM_<SECTION>_ namespaces are checked: other IBPSHIM_ variables may
     * belong to other parts of the shim. */
    for (char **env = environ; env && *env; env++) {
        const char *const entry = *env;
        if (strncmp(entry, "IBPSHIM_", 8) != 0)
            continue;
        const char *const eq = strchr(entry, '=');
        const size_t name_len = eq ? (size_t)(eq - entry) : strlen(entry);
        const IbpConfigOption *section = NULL;
        bool known = false;
        for (size_t i = 0; i < IBP_CONFIG_OPTION_COUNT && !known; i++) {
            char name[96];
            ibp_config_env_name(&opts[i], name, sizeof(name));
            const size_t prefix = 8 + strlen(opts[i].section) + 1;
            if (name_len > prefix && !strncmp(entry, name, prefix)) {
                section = &opts[i];
                known = strlen(name) == name_len && !strncmp(entry, name, name_len);
            }
        }
        if (!section || known)
            continue;
        char key[96];
        const size_t prefix = 8 + strlen(section->section) + 1;
        snprintf(key, sizeof(key), "%.*s", (int)(name_len - prefix), entry + prefix);
        char hint[160];
        env_hint(section->section, key, hint, sizeof(hint));
        note_error(report);
        IBP_ERROR("environment: %s names no option of [%s]%s; ignored",
                  shorten(entry, name_len, shown, sizeof(shown)), section->section, hint);
    }
}

size_t ibp_config_source_describe(const IbpConfigReport *report, size_t index, char *buf, size_t len)
{
    const IbpConfigOption *const opt = &ibp_config_options()[index];
    const IbpConfigSource *const src = &report->source[index];
    int n = 0;
    assert(index < IBP_CONFIG_OPTION_COUNT && len > 0);
    switch (src->origin) {
    case IBP_CONFIG_ORIGIN_DEFAULT:
        n = snprintf(buf, len, "default");
        break;
    case IBP_CONFIG_ORIGIN_FILE:
        n = snprintf(buf, len, "%s:%u", report->file, src->line);
        break;
    case IBP_CONFIG_ORIGIN_ENV:
        if (src->env_alias) {
            n = snprintf(buf, len, "IBPSHIM_LOG_LEVEL");
        } else {
            if (ibp_config_env_name(opt, buf, len) < 0)
                buf[0] = '\0';
            n = (int)strlen(buf);
        }
        break;
    }
    return n < 0 ? 0 : ((size_t)n < len ? (size_t)n : len - 1);
}

void ibp_config_validate(IbpConfig *cfg, IbpConfigReport *report)
{
    if (cfg->transfer.block_bytes > cfg->transfer.staging_bytes) {
        const IbpConfigOption *const block = ibp_config_option_find("transfer", "block_bytes");
        const IbpConfigOption *const staging = ibp_config_option_find("transfer", "staging_bytes");
        const size_t bi = (size_t)(block - ibp_config_options());
        const size_t si = (size_t)(staging - ibp_config_options());
        char bv[32], sv[32], bs[IBP_CONFIG_STRING_MAX + 32], ss[IBP_CONFIG_STRING_MAX + 32];
        ibp_config_size_format(cfg->transfer.block_bytes, bv, sizeof(bv));
        ibp_config_size_format(cfg->transfer.staging_bytes, sv, sizeof(sv));
        ibp_config_source_describe(report, bi, bs, sizeof(bs));
        ibp_config_source_describe(report, si, ss, sizeof(ss));
        note_error(report);
        IBP_ERROR("%s: [transfer] block_bytes = %s is larger than staging_bytes = %s (%s); "
                  "using block_bytes = %s",
                  bs, bv, sv, ss, block->default_text);
        IbpConfigValue value;
        char why[160];
        const int rc = ibp_config_value_parse(block, block->default_text, &value, why, sizeof(why));
        assert(rc == 0);
        (void)rc;
        ibp_config_value_store(block, &value, cfg);
        report->source[bi] = (IbpConfigSource){.origin = IBP_CONFIG_ORIGIN_DEFAULT};
    }
}

void ibp_config_load_lookup(IbpConfig *cfg, IbpConfigReport *report, const char *system_file)
{
    IbpConfigReport local;
    if (!report)
        report = &local;
    memset(report, 0, sizeof(*report));
    ibp_config_defaults(cfg);
    lookup_and_parse(cfg, report, system_file);
    ibp_config_apply_env(cfg, report);
    ibp_config_validate(cfg, report);
    IBP_INFO("configuration: %s, %u error(s), %u warning(s)", report->file[0] ? report->file : "no file",
             report->errors, report->warnings);
}

void ibp_config_load(IbpConfig *cfg, IbpConfigReport *report)
{
    ibp_config_load_lookup(cfg, report, IBP_CONFIG_SYSTEM_FILE);
}

uint64_t ibp_config_shadow_budget(const IbpConfig *cfg)
{
    if (cfg->policy.max_shadow_bytes)
        return cfg->policy.max_shadow_bytes;
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page_size = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page_size <= 0)
        return UINT64_C(256) << 20;
    return (uint64_t)pages * (uint64_t)page_size / 4;
}
