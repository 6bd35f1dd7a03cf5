/* SPDX-License-Identifier: MIT
 * ibpshim: a buffered fd writer and a small JSON emitter on top of it (no allocation). */
#include "report/json.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void ibp_out_init(IbpOut *out, int fd)
{
    out->fd = fd;
    out->error = 0;
    out->len = 0;
}

static void out_drain(IbpOut *out, const char *data, size_t len)
{
    while (len && !out->error) {
        const ssize_t n = write(out->fd, data, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            out->error = -errno;
            return;
        }
        data += n;
        len -= (size_t)n;
    }
}

int ibp_out_flush(IbpOut *out)
{
    out_drain(out, out->buf, out->len);
    out->len = 0;
    return out->error;
}

void ibp_out_write(IbpOut *out, const char *data, size_t len)
{
    if (out->error)
        return;
    if (out->len + len > sizeof(out->buf)) {
        ibp_out_flush(out);
        if (len > sizeof(out->buf)) {
            out_drain(out, data, len);
            return;
        }
    }
    memcpy(out->buf + out->len, data, len);
    out->len += len;
}

void ibp_out_puts(IbpOut *out, const char *text)
{
    ibp_out_write(out, text, strlen(text));
}

void ibp_out_printf(IbpOut *out, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n > 0)
        ibp_out_write(out, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

size_t ibp_format_double(char *buf, size_t len, double value, int decimals)
{
    assert(decimals >= 0 && decimals <= 9);
    if (!isfinite(value))
        value = 0;
    const int negative = value < 0;
    double magnitude = negative ? -value : value;
    uint64_t scale = 1;
    for (int i = 0; i < decimals; i++)
        scale *= 10;
    /* Keeps magnitude * scale within uint64_t. */
    const double limit = 1e19 / (double)scale - 1.0;
    if (magnitude > limit)
        magnitude = limit;
    const uint64_t scaled = (uint64_t)(magnitude * (double)scale + 0.5);
    uint64_t whole = scaled / scale;
    uint64_t frac = scaled % scale;
    int digits = decimals;
    while (digits > 1 && frac % 10 == 0) {
        frac /= 10;
        digits--;
    }
    int n;
    if (digits == 0)
        n = snprintf(buf, len, "%s%" PRIu64, negative && whole ? "-" : "", whole);
    else
        n = snprintf(buf, len, "%s%" PRIu64 ".%0*" PRIu64, negative && scaled ? "-" : "", whole, digits,
                     frac);
    return n > 0 ? (size_t)n : 0;
}

void ibp_json_init(IbpJson *json, IbpOut *out)
{
    memset(json, 0, sizeof(*json));
    json->out = out;
}

/* Length of the valid UTF-8 sequence at s (1 to 4), or 0 if the bytes are not one. */
static size_t utf8_sequence(const unsigned char *s)
{
    const unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t n;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        if (c == 0xe0)
            lo = 0xa0; /* overlong */
        else if (c == 0xed)
            hi = 0x9f; /* surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
    } else {
        return 0;
    }
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return n;
}

static void json_escaped(IbpOut *out, const char *text)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)text;
    ibp_out_write(out, "\"", 1);
    while (*s) {
        const unsigned char c = *s;
        if (c == '"' || c == '\\') {
            const char esc[2] = {'\\', (char)c};
            ibp_out_write(out, esc, 2);
            s++;
        } else if (c < 0x20) {
            const char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            ibp_out_write(out, esc, 6);
            s++;
        } else {
            const size_t n = utf8_sequence(s);
            if (n) {
                ibp_out_write(out, (const char *)s, n);
                s += n;
            } else {
                ibp_out_write(out, "\\ufffd", 6);
                s++;
            }
        }
    }
    ibp_out_write(out, "\"", 1);
}

/* Separator, line break and indentation before a member, then its key. */
static void json_member(IbpJson *json, const char *key)
{
    const int d = json->depth;
    if (d > 0) {
        if (json->count[d - 1])
            ibp_out_write(json->out, json->one_line[d - 1] ? ", " : ",", json->one_line[d - 1] ? 2 : 1);
        if (!json->one_line[d - 1]) {
            ibp_out_write(json->out, "\n", 1);
            for (int i = 0; i < d; i++)
                ibp_out_write(json->out, "  ", 2);
        }
        if (json->count[d - 1] < UINT8_MAX)
            json->count[d - 1]++;
    }
    if (key) {
        json_escaped(json->out, key);
        ibp_out_write(json->out, ": ", 2);
    }
}

static void json_open(IbpJson *json, const char *key, int one_line, char bracket)
{
    assert(json->depth < IBP_JSON_MAX_DEPTH);
    json_member(json, key);
    ibp_out_write(json->out, &bracket, 1);
    const int outer_inline = json->depth > 0 && json->one_line[json->depth - 1];
    json->count[json->depth] = 0;
    json->one_line[json->depth] = (unsigned char)(one_line || outer_inline);
    json->depth++;
}

static void json_close(IbpJson *json, char bracket)
{
    assert(json->depth > 0);
    json->depth--;
    const int d = json->depth;
    if (json->count[d] && !json->one_line[d]) {
        ibp_out_write(json->out, "\n", 1);
        for (int i = 0; i < d; i++)
            ibp_out_write(json->out, "  ", 2);
    }
    ibp_out_write(json->out, &bracket, 1);
    if (d == 0)
        ibp_out_write(json->out, "\n", 1);
}

void ibp_json_object_begin(IbpJson *json, const char *key, int one_line)
{
    json_open(json, key, one_line, '{');
}

void ibp_json_object_end(IbpJson *json)
{
    json_close(json, '}');
}

void ibp_json_array_begin(IbpJson *json, const char *key, int one_line)
{
    json_open(json, key, one_line, '[');
}

void ibp_json_array_end(IbpJson *json)
{
    json_close(json, ']');
}

void ibp_json_string(IbpJson *json, const char *key, const char *value)
{
    json_member(json, key);
    json_escaped(json->out, value ? value : "");
}

void ibp_json_uint(IbpJson *json, const char *key, uint64_t value)
{
    json_member(json, key);
    ibp_out_printf(json->out, "%" PRIu64, value);
}

void ibp_json_int(IbpJson *json, const char *key, int64_t value)
{
    json_member(json, key);
    ibp_out_printf(json->out, "%" PRId64, value);
}

void ibp_json_double(IbpJson *json, const char *key, double value)
{
    ibp_json_double_places(json, key, value, 6);
}

void ibp_json_double_places(IbpJson *json, const char *key, double value, int decimals)
{
    json_member(json, key);
    char text[48];
    ibp_format_double(text, sizeof(text), value, decimals);
    ibp_out_puts(json->out, text);
}

void ibp_json_bool(IbpJson *json, const char *key, int value)
{
    json_member(json, key);
    ibp_out_puts(json->out, value ? "true" : "false");
}

void ibp_json_hex(IbpJson *json, const char *key, uint64_t value)
{
    json_member(json, key);
    ibp_out_printf(json->out, "\"0x%" PRIx64 "\"", value);
}
