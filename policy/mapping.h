/* SPDX-License-Identifier: MIT
 * ibpshim: whether write tracking can see every write to a range of this process's memory. */
#ifndef IBP_POLICY_MAPPING_H
#define IBP_POLICY_MAPPING_H

#include <stddef.h>
#include <stdint.h>

/* 1 when every page of [base, base + size) is private anonymous memory (the heap, the stack,
 * anonymous or anonymous huge-page mappings): only this process's own writes can change it, and
 * those the tracker sees.  0 when some part is a shared mapping or backed by a file (another
 * process or a second mapping could write it unseen), with the mapping's description in why.
 * -errno when /proc/self/maps cannot be read or the range is not fully mapped.  Thread-safety:
 * any thread; reads /proc/self/maps, so not for hot paths. */
int ibp_mapping_private_anon(uintptr_t base, size_t size, char *why, size_t why_len);

#endif /* IBP_POLICY_MAPPING_H */
