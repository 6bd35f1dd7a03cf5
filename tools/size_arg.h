/* SPDX-License-Identifier: MIT
 * ibpshim: sizes on the command lines of the tools ("64M", "512K", "1.5G", "4096"). */
#ifndef IBP_TOOLS_SIZE_ARG_H
#define IBP_TOOLS_SIZE_ARG_H

#include <stddef.h>
#include <stdlib.h>

/* Bytes of a size with an optional K, M or G suffix (powers of 1024); 0 for none or a negative. */
static inline size_t ibp_size_arg(const char *s)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (end && (*end == 'k' || *end == 'K'))
        v *= 1024.0;
    else if (end && (*end == 'm' || *end == 'M'))
        v *= 1048576.0;
    else if (end && (*end == 'g' || *end == 'G'))
        v *= 1073741824.0;
    return v > 0 ? (size_t)v : 0;
}

#endif /* IBP_TOOLS_SIZE_ARG_H */
