/* SPDX-License-Identifier: MIT
 * ibpshim: write tracking of registered regions (userfaultfd async write-protect, mprotect, none). */
#ifndef IBP_POLICY_TRACK_H
#define IBP_POLICY_TRACK_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "policy/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum IbpTrackBackend {
    IBP_TRACK_AUTO = 0, /* uffd where the kernel lets us register the region, else mprotect */
    IBP_TRACK_UFFD,     /* userfaultfd async write-protect + PAGEMAP_SCAN (Linux >= 6.7) */
    IBP_TRACK_MPROTECT, /* read-only pages + SIGSEGV handler */
    IBP_TRACK_NONE,     /* never reports host writes: the user promises there are none */
} IbpTrackBackend;

/* Returns the backend for "auto", "uffd", "mprotect", "none", or -EINVAL. */
int ibp_track_backend_parse(const char *text);
const char *ibp_track_backend_name(IbpTrackBackend backend);

/* One-time process set-up (fork handlers, page size, uffd probe).  Called by
 * every function below that needs it; idempotent and thread-safe.  Returns 0
 * or -errno from pthread_atfork. */
int ibp_track_init(void);

/* 1 if userfaultfd async write-protect and PAGEMAP_SCAN work in this process;
 * 0 otherwise, with a one-line reason in *why (static storage). */
int ibp_track_uffd_available(const char **why);

/* 1 in a process created by fork() (or a raw clone) after tracking started:
 * every query there reports every page written, so the compressed path is
 * never taken in a child. */
int ibp_track_forked_child(void);

/* Creates the region's tracker and attaches it (the region owns it from then
 * on).  The tracker covers every page that touches the region: a write to a
 * partial first or last page counts as a write to the region.  It starts
 * disarmed: queries report everything written until ibp_tracker_arm().
 * `want` AUTO tries uffd and falls back to mprotect for this region.
 * *got (if non-NULL) receives the backend in use.
 * Returns 0, -EBUSY (already tracked, or a page shared with another tracked
 * region), -ENOENT (region removed), -ENOTSUP (the backend cannot track this
 * mapping, e.g. uffd registration refused), -ENOMEM. */
int ibp_track_region(IbpRegion *region, IbpTrackBackend want, IbpTrackBackend *got);

/* Stops tracking for good (churn, untrackable): disarms, unpublishes the span
 * and waits out the fault path.  The tracker stays owned by the region and
 * keeps answering "everything written".  Returns 0 or -ENOENT. */
int ibp_track_region_stop(IbpRegion *region);

/* Flags for ibp_tracker_query(). */
#define IBP_TRACK_QUERY_REARM 1u

typedef struct IbpTrackStats {
    IbpTrackBackend backend;
    int armed;
    uint64_t arms;
    uint64_t queries;
    uint64_t faults;              /* mprotect: write faults absorbed; uffd: 0 (the kernel resolves them) */
    uint64_t kernel_writes;       /* mprotect: syscall targets unprotected before the call */
    uint64_t pages_dirty_total;   /* sum of the dirty counts of all rearming queries */
    uint64_t pages_dirty_last;    /* dirty count of the last rearming query */
    uint64_t errors;              /* backend failures that made the tracker report everything */
} IbpTrackStats;

/* Write-protects every page and forgets earlier writes.  Returns 0,
 * -ESTALE (region removed), -ECHILD (in a forked child), or -errno from the
 * backend (the tracker then stays disarmed). */
int ibp_tracker_arm(IbpTracker *tracker);

/* Which pages of [addr, addr + len) were written since they were armed.  Bit i
 * of bitmap (64-bit words, little-endian bit order) stands for the page that
 * starts at (addr rounded down to a page) + i * page size; nbits must cover
 * every page the range touches.  With IBP_TRACK_QUERY_REARM the reported pages
 * are write-protected again in the same step, so a write that lands after
 * the query is reported by the next one.  A disarmed, failed or forked tracker
 * reports every page.  Returns the number of pages reported, or -EINVAL (range
 * outside the region's span, bitmap too small).
 *
 * The compressor's flow: arm, encode a block, query the block's pages with
 * REARM: any page reported means a write raced with encoding, discard it. */
int64_t ibp_tracker_query(IbpTracker *tracker, const void *addr, size_t len, unsigned flags,
                          uint64_t *bitmap, size_t nbits);

/* Records writes the tracker cannot see: device-to-host copies.  A DMA write
 * lands after the call that enqueued it, so the caller must mark the range at
 * call time and again once the copy has completed.  Async-signal-safe. */
void ibp_tracker_mark_dirty(IbpTracker *tracker, const void *addr, size_t len);

/* Removes every write protection; queries report everything until re-armed.
 * Returns 0 or -errno. */
int ibp_tracker_disarm(IbpTracker *tracker);

/* Used by the registry when the region is removed: disarm for good. */
void ibp_tracker_retire(IbpTracker *tracker);

/* Frees a tracker that is no longer published.  NULLs *tracker. */
void ibp_tracker_destroy(IbpTracker **tracker);

IbpTrackBackend ibp_tracker_backend(const IbpTracker *tracker);
void ibp_tracker_stats(const IbpTracker *tracker, IbpTrackStats *out);
/* Page span covered, [start, end). */
void ibp_tracker_span(const IbpTracker *tracker, uintptr_t *start, uintptr_t *end);
size_t ibp_track_page_size(void);

/* --- Entry points of the exported libc forwarders (interpose/posix.c). --- */

/* The kernel answers a read() into a read-only page with EFAULT instead of a
 * fault: before such a call, unprotect and mark dirty the tracked pages the
 * call may write, and pin them (a rearm leaves them writable and dirty) until
 * ibp_track_after_kernel_write(), called once the call has returned, whatever
 * it returned.  pins starts zeroed; it may be NULL (no pin).  One atomic load
 * when no mprotect tracker exists.  Async-signal-safe. */
typedef struct IbpTrackPins {
    uint64_t mask; /* the pin slots held */
} IbpTrackPins;
void ibp_track_before_kernel_write(void *buf, size_t len, IbpTrackPins *pins);
void ibp_track_before_kernel_write_iov(const struct iovec *iov, int iovcnt, IbpTrackPins *pins);
void ibp_track_before_kernel_write_msg(const struct msghdr *msg, IbpTrackPins *pins);
void ibp_track_after_kernel_write(IbpTrackPins *pins);

/* sigaction()/signal() for SIGSEGV once the tracker's handler is installed:
 * the application's handler is recorded as the one faults that are not ours
 * chain to, and the application sees its own previous handler.  Every other
 * signal (and SIGSEGV before the handler is installed) goes to libc. */
int ibp_track_sigaction(int sig, const struct sigaction *act, struct sigaction *oldact);
sighandler_t ibp_track_signal(int sig, sighandler_t handler);

#ifdef __cplusplus
}
#endif

#endif /* IBP_POLICY_TRACK_H */
