/* SPDX-License-Identifier: MIT
 * ibpshim: ordered records of the shim's own events and what a completed one says of the rest. */
#include "kernels/order.h"

#include <pthread.h>

/* The newest completed record seen per stream, a small table indexed by the stream's id: an
 * entry may be taken over by another stream, which only costs queries. */
#define IBP_ORDER_STREAMS 64

typedef struct IbpOrderDone {
    unsigned long long stream;
    uint64_t seq;
} IbpOrderDone;

static pthread_mutex_t record_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t record_seq;
static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static IbpOrderDone done[IBP_ORDER_STREAMS];

CUresult ibp_order_record(const IbpDriver *drv, CUevent ev, CUstream stream, IbpOrderMark *mark)
{
    unsigned long long id = 0;
    /* In relaxed mode, as the shim's other calls that are not the application's: whatever the
     * driver counts as unsafe while another thread captures must not invalidate that capture. */
    const IbpCaptureMode mode = ibp_driver_capture_relax(drv);
    if (drv->cuStreamGetId(stream, &id) != CUDA_SUCCESS)
        id = 0;
    ibp_driver_capture_restore(drv, mode);
    /* Held across the record: the driver takes the records of one stream in the order of the
     * calls, so the numbers follow the stream's order only if no other thread's record can come
     * between a call and its number. */
    pthread_mutex_lock(&record_lock);
    const CUresult res = drv->cuEventRecord(ev, stream);
    const uint64_t seq = ++record_seq;
    pthread_mutex_unlock(&record_lock);
    *mark = res == CUDA_SUCCESS ? (IbpOrderMark){.stream = id, .seq = seq} : (IbpOrderMark){0, 0};
    return res;
}

int ibp_order_known_done(IbpOrderMark mark)
{
    if (!mark.stream)
        return 0;
    pthread_mutex_lock(&done_lock);
    const IbpOrderDone *d = &done[mark.stream % IBP_ORDER_STREAMS];
    const int known = d->stream == mark.stream && d->seq >= mark.seq;
    pthread_mutex_unlock(&done_lock);
    return known;
}

static void note_done(IbpOrderMark mark)
{
    if (!mark.stream)
        return;
    pthread_mutex_lock(&done_lock);
    IbpOrderDone *d = &done[mark.stream % IBP_ORDER_STREAMS];
    if (d->stream != mark.stream || d->seq < mark.seq)
        *d = (IbpOrderDone){.stream = mark.stream, .seq = mark.seq};
    pthread_mutex_unlock(&done_lock);
}

CUresult ibp_order_query(const IbpDriver *drv, CUevent ev, IbpOrderMark mark)
{
    if (ibp_order_known_done(mark))
        return CUDA_SUCCESS;
    const CUresult res = ibp_driver_event_query(drv, ev);
    if (res == CUDA_SUCCESS)
        note_done(mark);
    return res;
}
