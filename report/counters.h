/* SPDX-License-Identifier: MIT
 * ibpshim: per-kind call and byte counters of the interposed entry points. */
#ifndef IBP_REPORT_COUNTERS_H
#define IBP_REPORT_COUNTERS_H

#include <stddef.h>
#include <stdint.h>

#include "ibpshim/ibpshim.h"

/* Thread-safety: relaxed atomics; safe from any thread, never blocks, never allocates. */
void ibp_counters_add(IbpshimCallKind kind, uint64_t bytes);
void ibp_counters_reset(void);

/* Logs one line per kind that saw calls, at info level. */
void ibp_counters_log(void);

#endif /* IBP_REPORT_COUNTERS_H */
