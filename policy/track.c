/* SPDX-License-Identifier: MIT
 * ibpshim: write tracking front end: backend choice, queries, fork handling. */
#include "policy/track.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/log.h"
#include "policy/track_internal.h"

size_t ibp_track_page;
unsigned ibp_track_page_shift;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_result;
static _Atomic pid_t owner_pid;
static _Atomic bool forked_child;
static int uffd_ok;
static const char *uffd_why = "not probed";

static void prepare_fork(void)
{
    ibp_registry_lock();
}

static void parent_after_fork(void)
{
    ibp_registry_unlock();
}

/* The child is single-threaded here and holds the registry mutex.  It never
 * takes the compressed path, so tracking there only has to stay harmless:
 * make every page writable again (no fault costs in, say, a data-loader
 * worker) and make every query report everything. */
static void child_tracker(IbpTracker *t, void *arg)
{
    (void)arg;
    atomic_store(&t->armed, false);
    if (t->backend == IBP_TRACK_MPROTECT && atomic_load(&t->protected_pages) &&
        mprotect((void *)t->start, t->end - t->start, PROT_READ | PROT_WRITE) == 0)
        ibp_mprot_set_protected(t, false);
}

static void child_after_fork(void)
{
    atomic_store(&forked_child, true);
    ibp_registry_foreach_tracker_locked(child_tracker, NULL);
    ibp_uffd_forget_in_child();
    ibp_registry_child_after_fork();
}

static void track_init_once(void)
{
    const long ps = sysconf(_SC_PAGESIZE);
    ibp_track_page = ps > 0 ? (size_t)ps : 4096;
    ibp_track_page_shift = (unsigned)__builtin_ctzl(ibp_track_page);
    atomic_store(&owner_pid, getpid());
    const int rc = pthread_atfork(prepare_fork, parent_after_fork, child_after_fork);
    if (rc != 0) {
        init_result = -rc;
        return;
    }
    uffd_ok = ibp_uffd_probe(&uffd_why);
    IBP_DEBUG("write tracking: uffd %s (%s)", uffd_ok ? "available" : "unavailable", uffd_why);
}

int ibp_track_init(void)
{
    pthread_once(&init_once, track_init_once);
    return init_result;
}

int ibp_track_uffd_available(const char **why)
{
    ibp_track_init();
    if (why)
        *why = uffd_why;
    return uffd_ok;
}

/* getpid() also catches children made by a raw clone that skipped the fork
 * handlers.  Async-signal-safe. */
int ibp_track_forked_child(void)
{
    if (atomic_load(&forked_child))
        return 1;
    const pid_t owner = atomic_load(&owner_pid);
    return owner != 0 && getpid() != owner;
}

size_t ibp_track_page_size(void)
{
    ibp_track_init();
    return ibp_track_page;
}

int ibp_track_backend_parse(const char *text)
{
    static const char *const names[] = {"auto", "uffd", "mprotect", "none"};
    if (!text)
        return -EINVAL;
    for (int i = 0; i < 4; i++)
        if (!strcasecmp(text, names[i]))
            return i;
    return -EINVAL;
}

const char *ibp_track_backend_name(IbpTrackBackend backend)
{
    switch (backend) {
    case IBP_TRACK_AUTO:
        return "auto";
    case IBP_TRACK_UFFD:
        return "uffd";
    case IBP_TRACK_MPROTECT:
        return "mprotect";
    case IBP_TRACK_NONE:
        return "none";
    }
    return "?";
}

void ibp_bitmap_set_range(uint64_t *bitmap, size_t from, size_t count)
{
    while (count) {
        const size_t w = from / IBP_BITS_PER_WORD;
        const unsigned b = (unsigned)(from % IBP_BITS_PER_WORD);
        const size_t n = count < IBP_BITS_PER_WORD - b ? count : IBP_BITS_PER_WORD - b;
        const uint64_t mask = n == IBP_BITS_PER_WORD ? ~0ull : ((1ull << n) - 1) << b;
        bitmap[w] |= mask;
        from += n;
        count -= n;
    }
}

uint64_t ibp_track_word_mask(size_t w, size_t p0, size_t np)
{
    const size_t lo = w * IBP_BITS_PER_WORD;
    const size_t from = p0 > lo ? p0 - lo : 0;
    const size_t to = p0 + np - lo < IBP_BITS_PER_WORD ? p0 + np - lo : IBP_BITS_PER_WORD;
    const uint64_t hi_mask = to == IBP_BITS_PER_WORD ? ~0ull : (1ull << to) - 1;
    return hi_mask & ~((1ull << from) - 1);
}

void ibp_track_out_or_word(uint64_t *out, size_t w, size_t p0, uint64_t bits)
{
    if (!bits)
        return;
    const size_t lo = w * IBP_BITS_PER_WORD;
    if (lo < p0) {
        out[0] |= bits >> (p0 - lo);
        return;
    }
    const size_t off = lo - p0;
    const unsigned sh = (unsigned)(off % IBP_BITS_PER_WORD);
    out[off / IBP_BITS_PER_WORD] |= bits << sh;
    if (sh && (bits >> (IBP_BITS_PER_WORD - sh)))
        out[off / IBP_BITS_PER_WORD + 1] |= bits >> (IBP_BITS_PER_WORD - sh);
}

void ibp_track_take_soft(IbpTracker *t, size_t p0, size_t np, bool rearm, uint64_t *out)
{
    const size_t w0 = p0 / IBP_BITS_PER_WORD, w1 = (p0 + np - 1) / IBP_BITS_PER_WORD;
    for (size_t w = w0; w <= w1; w++) {
        const uint64_t m = ibp_track_word_mask(w, p0, np);
        const uint64_t bits = rearm ? atomic_fetch_and(&t->dirty[w], ~m) : atomic_load(&t->dirty[w]);
        ibp_track_out_or_word(out, w, p0, bits & m);
    }
}

static IbpTracker *tracker_new(IbpTrackBackend backend, uintptr_t start, uintptr_t end)
{
    IbpTracker *const t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->backend = backend;
    t->start = start;
    t->end = end;
    t->npages = (end - start) >> ibp_track_page_shift;
    t->nwords = (t->npages + IBP_BITS_PER_WORD - 1) / IBP_BITS_PER_WORD;
    t->dirty = calloc(t->nwords, sizeof *t->dirty);
    if (backend == IBP_TRACK_MPROTECT) {
        t->locks = calloc(t->nwords, sizeof *t->locks);
        t->wbits = calloc(t->nwords, sizeof *t->wbits);
    }
    if (!t->dirty || (backend == IBP_TRACK_MPROTECT && (!t->locks || !t->wbits))) {
        free(t->dirty);
        free(t->locks);
        free(t->wbits);
        free(t);
        return NULL;
    }
    pthread_mutex_init(&t->op_mutex, NULL);
    return t;
}

static void tracker_free(IbpTracker *t)
{
    if (!ibp_track_forked_child())
        pthread_mutex_destroy(&t->op_mutex);
    free(t->dirty);
    free(t->locks);
    free(t->wbits);
    free(t);
}

int ibp_track_region(IbpRegion *region, IbpTrackBackend want, IbpTrackBackend *got)
{
    IbpTracker *t = NULL;
    int ret = ibp_track_init();
    if (ret)
        return ret;
    if (ibp_region_tracker(region))
        return -EBUSY;
    const uintptr_t base = ibp_region_base(region);
    const uintptr_t start = base & ~(uintptr_t)(ibp_track_page - 1);
    const uintptr_t last = (base + ibp_region_size(region) - 1) & ~(uintptr_t)(ibp_track_page - 1);
    const uintptr_t end = last + ibp_track_page;

    IbpTrackBackend backend = want;
    if (want == IBP_TRACK_AUTO)
        backend = uffd_ok ? IBP_TRACK_UFFD : IBP_TRACK_MPROTECT;
    if (backend == IBP_TRACK_UFFD && !uffd_ok)
        return -ENOTSUP;
    t = tracker_new(backend, start, end);
    if (!t)
        return -ENOMEM;
    if (backend == IBP_TRACK_UFFD) {
        ret = ibp_uffd_register(t);
        if (ret == -ENOTSUP && want == IBP_TRACK_AUTO) {
            IBP_DEBUG("region %llu: uffd refused the mapping, using mprotect",
                      (unsigned long long)ibp_region_id(region));
            tracker_free(t);
            backend = IBP_TRACK_MPROTECT;
            t = tracker_new(backend, start, end);
            if (!t)
                return -ENOMEM;
            ret = 0;
        }
        if (ret)
            goto fail;
    }
    if (backend == IBP_TRACK_MPROTECT) {
        ret = ibp_mprot_prepare(t);
        if (ret)
            goto fail;
    }
    if (backend == IBP_TRACK_NONE)
        IBP_WARN("region %llu: write tracking is OFF (backend none): host writes after compression "
                 "will be sent stale; only correct if the application never rewrites it",
                 (unsigned long long)ibp_region_id(region));
    ret = ibp_registry_attach_tracker(region, t, start, end);
    if (ret)
        goto fail;
    if (got)
        *got = backend;
    return 0;

fail:
    if (t->uffd_registered)
        ibp_uffd_unregister(t);
    tracker_free(t);
    return ret;
}

int ibp_track_region_stop(IbpRegion *region)
{
    IbpTracker *const t = ibp_region_tracker(region);
    if (!t)
        return -ENOENT;
    ibp_tracker_disarm(t);
    return ibp_registry_detach_tracker(region);
}

IbpTrackBackend ibp_tracker_backend(const IbpTracker *tracker)
{
    return tracker->backend;
}

void ibp_tracker_span(const IbpTracker *tracker, uintptr_t *start, uintptr_t *end)
{
    *start = tracker->start;
    *end = tracker->end;
}

void ibp_tracker_stats(const IbpTracker *tracker, IbpTrackStats *out)
{
    IbpTracker *const t = (IbpTracker *)tracker;
    out->backend = t->backend;
    out->armed = atomic_load(&t->armed) && !atomic_load(&t->failed);
    out->arms = atomic_load(&t->arms);
    out->queries = atomic_load(&t->queries);
    out->faults = atomic_load(&t->faults);
    out->kernel_writes = atomic_load(&t->kernel_writes);
    out->pages_dirty_total = atomic_load(&t->pages_dirty_total);
    out->pages_dirty_last = atomic_load(&t->pages_dirty_last);
    out->errors = atomic_load(&t->errors);
}

int ibp_tracker_arm(IbpTracker *t)
{
    if (ibp_track_forked_child())
        return -ECHILD;
    int ret = 0;
    pthread_mutex_lock(&t->op_mutex);
    if (atomic_load(&t->retired)) {
        ret = -ESTALE;
        goto out;
    }
    /* Armed before the pages are protected: a fault in between must already
     * record its page, or the write it lets through would be missed. */
    atomic_store(&t->failed, false);
    atomic_store(&t->armed, true);
    switch (t->backend) {
    case IBP_TRACK_UFFD:
        if (!t->uffd_registered)
            ret = ibp_uffd_register(t);
        for (size_t w = 0; ret == 0 && w < t->nwords; w++)
            atomic_store(&t->dirty[w], 0);
        if (ret == 0)
            ret = ibp_uffd_protect(t, true);
        break;
    case IBP_TRACK_MPROTECT:
        ret = ibp_mprot_arm(t);
        break;
    case IBP_TRACK_NONE:
    case IBP_TRACK_AUTO:
        for (size_t w = 0; w < t->nwords; w++)
            atomic_store(&t->dirty[w], 0);
        break;
    }
    if (ret == 0) {
        atomic_fetch_add(&t->arms, 1);
    } else {
        atomic_store(&t->armed, false);
        atomic_fetch_add(&t->errors, 1);
        IBP_WARN("write tracking: arming %s tracker over [%#lx, %#lx) failed: %s",
                 ibp_track_backend_name(t->backend), (unsigned long)t->start, (unsigned long)t->end,
                 strerror(-ret));
    }
out:
    pthread_mutex_unlock(&t->op_mutex);
    return ret;
}

static int disarm_locked(IbpTracker *t)
{
    atomic_store(&t->armed, false);
    switch (t->backend) {
    case IBP_TRACK_UFFD:
        if (t->uffd_registered)
            ibp_uffd_unregister(t);
        return 0;
    case IBP_TRACK_MPROTECT:
        return ibp_mprot_disarm(t);
    case IBP_TRACK_NONE:
    case IBP_TRACK_AUTO:
        return 0;
    }
    return 0;
}

int ibp_tracker_disarm(IbpTracker *t)
{
    if (ibp_track_forked_child()) {
        atomic_store(&t->armed, false);
        return 0;
    }
    pthread_mutex_lock(&t->op_mutex);
    const int ret = disarm_locked(t);
    pthread_mutex_unlock(&t->op_mutex);
    return ret;
}

void ibp_tracker_retire(IbpTracker *t)
{
    if (ibp_track_forked_child()) {
        atomic_store(&t->retired, true);
        atomic_store(&t->armed, false);
        return;
    }
    pthread_mutex_lock(&t->op_mutex);
    atomic_store(&t->retired, true);
    disarm_locked(t);
    pthread_mutex_unlock(&t->op_mutex);
}

/* Only once unpublished: the fault path can no longer reach it. */
void ibp_tracker_destroy(IbpTracker **tracker)
{
    if (!tracker || !*tracker)
        return;
    IbpTracker *const t = *tracker;
    *tracker = NULL;
    tracker_free(t);
}

static size_t count_bits(const uint64_t *bm, size_t nbits)
{
    size_t n = 0;
    for (size_t i = 0; i < nbits / IBP_BITS_PER_WORD; i++)
        n += (size_t)__builtin_popcountll(bm[i]);
    if (nbits % IBP_BITS_PER_WORD)
        n += (size_t)__builtin_popcountll(bm[nbits / IBP_BITS_PER_WORD] &
                                          ((1ull << (nbits % IBP_BITS_PER_WORD)) - 1));
    return n;
}

int64_t ibp_tracker_query(IbpTracker *t, const void *addr, size_t len, unsigned flags, uint64_t *bitmap,
                          size_t nbits)
{
    if (len == 0)
        return 0;
    const uintptr_t a = (uintptr_t)addr;
    if (a < t->start || len > t->end - a)
        return -EINVAL;
    const uintptr_t first = a & ~(uintptr_t)(ibp_track_page - 1);
    const uintptr_t last = (a + len - 1) & ~(uintptr_t)(ibp_track_page - 1);
    const size_t np = ((last - first) >> ibp_track_page_shift) + 1;
    if (nbits < np)
        return -EINVAL;
    memset(bitmap, 0, (np + IBP_BITS_PER_WORD - 1) / IBP_BITS_PER_WORD * sizeof *bitmap);
    const size_t p0 = (first - t->start) >> ibp_track_page_shift;
    const bool rearm = (flags & IBP_TRACK_QUERY_REARM) != 0;

    if (ibp_track_forked_child()) {
        ibp_bitmap_set_range(bitmap, 0, np);
        return (int64_t)np;
    }
    pthread_mutex_lock(&t->op_mutex);
    atomic_fetch_add(&t->queries, 1);
    if (!atomic_load(&t->armed) || atomic_load(&t->failed)) {
        pthread_mutex_unlock(&t->op_mutex);
        ibp_bitmap_set_range(bitmap, 0, np);
        return (int64_t)np;
    }
    switch (t->backend) {
    case IBP_TRACK_UFFD: {
        const int rc = ibp_uffd_scan(t, first, last, rearm, bitmap);
        if (rc) {
            /* Typically the mapping was replaced behind our back (its
             * registration is gone): nothing about its pages can be trusted. */
            atomic_store(&t->failed, true);
            atomic_fetch_add(&t->errors, 1);
            IBP_WARN("write tracking: PAGEMAP_SCAN over [%#lx, %#lx] failed (%s): reporting all pages "
                     "written",
                     (unsigned long)first, (unsigned long)last, strerror(-rc));
            ibp_bitmap_set_range(bitmap, 0, np);
        }
        ibp_track_take_soft(t, p0, np, rearm, bitmap);
        break;
    }
    case IBP_TRACK_MPROTECT:
        ibp_mprot_take(t, p0, np, rearm, bitmap);
        if (atomic_load(&t->failed) || atomic_load(&t->unlocking))
            ibp_bitmap_set_range(bitmap, 0, np);
        break;
    case IBP_TRACK_NONE:
    case IBP_TRACK_AUTO:
        ibp_track_take_soft(t, p0, np, rearm, bitmap);
        break;
    }
    pthread_mutex_unlock(&t->op_mutex);
    const size_t n = count_bits(bitmap, np);
    if (rearm) {
        atomic_fetch_add(&t->pages_dirty_total, n);
        atomic_store(&t->pages_dirty_last, n);
    }
    return (int64_t)n;
}

void ibp_tracker_mark_dirty(IbpTracker *t, const void *addr, size_t len)
{
    if (len == 0)
        return;
    uintptr_t a = (uintptr_t)addr;
    uintptr_t e = len > UINTPTR_MAX - a ? UINTPTR_MAX : a + len;
    if (a < t->start)
        a = t->start;
    if (e > t->end)
        e = t->end;
    if (a >= e)
        return;
    const size_t p0 = (a - t->start) >> ibp_track_page_shift;
    const size_t p1 = (e - 1 - t->start) >> ibp_track_page_shift;
    for (size_t p = p0; p <= p1;) {
        const size_t w = p / IBP_BITS_PER_WORD;
        const size_t np = p1 - p + 1;
        atomic_fetch_or(&t->dirty[w], ibp_track_word_mask(w, p, np));
        p = (w + 1) * IBP_BITS_PER_WORD;
    }
}
