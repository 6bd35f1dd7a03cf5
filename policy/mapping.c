/* SPDX-License-Identifier: MIT
 * ibpshim: whether write tracking can see every write to a range of this process's memory. */
#include "policy/mapping.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Names /proc/self/maps gives mappings that hold anonymous memory.  Not hugetlb memory
 * (/anon_hugepage): a write-protecting page scan backs out of a huge page only partly inside
 * the range it asks about, so a query of part of such a region could not be answered. */
static int anonymous_name(const char *name)
{
    return !name[0] || !strcmp(name, "[heap]") || !strncmp(name, "[stack", 6) || !strncmp(name, "[anon:", 6);
}

int ibp_mapping_private_anon(uintptr_t base, size_t size, char *why, size_t why_len)
{
    FILE *maps = fopen("/proc/self/maps", "re");
    if (!maps)
        return -errno;
    const uintptr_t end = base + size;
    uintptr_t covered = base;
    int result = 1;
    char line[4352];
    while (covered < end && fgets(line, sizeof(line), maps)) {
        uintptr_t lo, hi;
        char perms[8] = "";
        int name_at = 0;
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s %*s %*s %*s %n", &lo, &hi, perms, &name_at) < 3)
            continue;
        if (hi <= covered || lo >= end)
            continue;
        if (lo > covered)
            break; /* a hole: part of the range is not mapped */
        char *name = line + name_at;
        name[strcspn(name, "\n")] = '\0';
        if (perms[3] != 'p' || !anonymous_name(name)) {
            snprintf(why, why_len, "%s mapping %s",
                     perms[3] == 's'                        ? "shared"
                     : !strncmp(name, "/anon_hugepage", 14) ? "hugetlb"
                                                            : "file-backed",
                     name[0] ? name : "(anonymous)");
            result = 0;
            break;
        }
        covered = hi;
    }
    fclose(maps);
    if (result == 1 && covered < end) {
        snprintf(why, why_len, "not fully mapped");
        return -EFAULT;
    }
    return result;
}
