/* SPDX-License-Identifier: MIT
 * ibpshim: the shim's own events, recorded in an order known per stream, so that one completed
 * event answers for every earlier one on its stream. */
#ifndef IBP_KERNELS_ORDER_H
#define IBP_KERNELS_ORDER_H

#include <cuda.h>
#include <stdint.h>

#include "kernels/driver.h"

/* Where a record stands on its stream: the stream's id (cuStreamGetId, never reused in a
 * process; 0 when unknown) and a number that grows with every ordered record of the process. */
typedef struct IbpOrderMark {
    unsigned long long stream;
    uint64_t seq;
} IbpOrderMark;

/* cuEventRecord(ev, stream) under a lock that puts the records of all threads in one order, so
 * that on one stream a larger seq was recorded later.  Streams of a capture must not be given
 * (their records do not complete).  *mark is {0, 0} when the record failed. */
CUresult ibp_order_record(const IbpDriver *drv, CUevent ev, CUstream stream, IbpOrderMark *mark);

/* Whether ev, recorded with `mark`, has completed: CUDA_SUCCESS without asking the driver when a
 * later record on its stream was seen complete, else ibp_driver_event_query(); a completion seen
 * is kept for the stream.  A query of an event still pending flushes the driver's queue and costs
 * the thread a microsecond or more; a first query of a completed one a few hundred ns. */
CUresult ibp_order_query(const IbpDriver *drv, CUevent ev, IbpOrderMark mark);

/* Whether a record at or after `mark` on its stream was seen complete (no driver call). */
int ibp_order_known_done(IbpOrderMark mark);

#endif /* IBP_KERNELS_ORDER_H */
