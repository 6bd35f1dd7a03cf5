/* SPDX-License-Identifier: MIT
 * ibpshim: a buffered fd writer and a small JSON emitter on top of it (no allocation). */
#ifndef IBP_REPORT_JSON_H
#define IBP_REPORT_JSON_H

#include <stddef.h>
#include <stdint.h>

#define IBP_OUT_BUFFER 8192
#define IBP_JSON_MAX_DEPTH 16

/* Output to a file descriptor through a fixed buffer.  The first write error
 * sticks: later writes are dropped and ibp_out_flush() returns it.  The caller
 * owns fd.  Thread-safety: one writer per IbpOut. */
typedef struct IbpOut {
    int fd;
    int error; /* 0 or a negative errno */
    size_t len;
    char buf[IBP_OUT_BUFFER];
} IbpOut;

void ibp_out_init(IbpOut *out, int fd);
void ibp_out_write(IbpOut *out, const char *data, size_t len);
void ibp_out_puts(IbpOut *out, const char *text);
/* Formats into a 1 KiB stack buffer; longer output is truncated. */
void ibp_out_printf(IbpOut *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Writes what is buffered.  Returns 0 or the first error (negative errno). */
int ibp_out_flush(IbpOut *out);

/* Formats value with at most decimals (0 to 9) digits after the point, trailing
 * zeros dropped but one kept ("2.5", "3.0"), independent of the locale;
 * non-finite values print as 0 and magnitudes are clamped below 1e19 / 10^decimals.  Returns the length
 * (truncated to len - 1). */
size_t ibp_format_double(char *buf, size_t len, double value, int decimals);

/* JSON: containers nest up to IBP_JSON_MAX_DEPTH; members inside an object
 * take a key, elements of an array and the top-level value take NULL.  Output
 * is indented by two spaces per level, except inside containers opened with
 * one_line != 0, which stay on one line.  Strings are escaped; bytes that are
 * not valid UTF-8 become U+FFFD so that the document always parses.
 * Doubles are written by ibp_format_double() with 6 decimals. */
typedef struct IbpJson {
    IbpOut *out;
    int depth;
    unsigned char count[IBP_JSON_MAX_DEPTH]; /* members written so far, saturating */
    unsigned char one_line[IBP_JSON_MAX_DEPTH];
} IbpJson;

void ibp_json_init(IbpJson *json, IbpOut *out);
void ibp_json_object_begin(IbpJson *json, const char *key, int one_line);
void ibp_json_object_end(IbpJson *json);
void ibp_json_array_begin(IbpJson *json, const char *key, int one_line);
void ibp_json_array_end(IbpJson *json);
void ibp_json_string(IbpJson *json, const char *key, const char *value);
void ibp_json_uint(IbpJson *json, const char *key, uint64_t value);
void ibp_json_int(IbpJson *json, const char *key, int64_t value);
void ibp_json_double(IbpJson *json, const char *key, double value);
/* With decimals (0 to 9) digits after the point instead of 6. */
void ibp_json_double_places(IbpJson *json, const char *key, double value, int decimals);
void ibp_json_bool(IbpJson *json, const char *key, int value);
/* value as "0x..." lower-case hex. */
void ibp_json_hex(IbpJson *json, const char *key, uint64_t value);

#endif /* IBP_REPORT_JSON_H */
