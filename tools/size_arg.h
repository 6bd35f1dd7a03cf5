/* SPDX-License-Identifier: MIT
 * ibpshim: sizes and counts on the command lines of the tools ("64M", "512K", "1.5G", "4096"). */
#ifndef IBP_TOOLS_SIZE_ARG_H
#define IBP_TOOLS_SIZE_ARG_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Bytes of a size: a number (decimal, fractions allowed) with an optional K, M or G suffix
 * (powers of 1024), which may be followed by "iB" or "B" as in the ini file ("64MiB").  Returns 0
 * with *bytes set, or -1 when s is anything else (no digits, another suffix, a sign, inf, nan). */
static inline int ibp_size_parse(const char *s, size_t *bytes)
{
    if (!s || !((*s >= '0' && *s <= '9') || *s == '.'))
        return -1;
    char *end = NULL;
    const double v = strtod(s, &end);
    if (end == s)
        return -1;
    double mult = 1.0;
    switch (*end) {
    case 'k':
    case 'K':
        mult = 1024.0;
        break;
    case 'm':
    case 'M':
        mult = 1048576.0;
        break;
    case 'g':
    case 'G':
        mult = 1073741824.0;
        break;
    default:
        break;
    }
    if (mult > 1.0) {
        end++;
        if (!strcmp(end, "iB") || !strcmp(end, "B"))
            end += strlen(end);
    }
    const double b = v * mult;
    if (*end || !(b >= 0.0) || b >= (double)(SIZE_MAX / 2))
        return -1;
    *bytes = (size_t)b;
    return 0;
}

/* ibp_size_parse's bytes, or 0 where s is not a size. */
static inline size_t ibp_size_arg(const char *s)
{
    size_t b = 0;
    return ibp_size_parse(s, &b) ? 0 : b;
}

/* A whole decimal number in [lo, hi]: 0 with *out set, or -1. */
static inline int ibp_count_parse(const char *s, long lo, long hi, long *out)
{
    if (!s || !*s)
        return -1;
    char *end = NULL;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

#endif /* IBP_TOOLS_SIZE_ARG_H */
