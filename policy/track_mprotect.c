/* SPDX-License-Identifier: MIT
 * ibpshim: mprotect write tracking: read-only pages, a lock-free fault path, syscall targets. */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/mman.h>

#include "common/log.h"
#include "policy/track_internal.h"

_Atomic long ibp_mprot_active;
_Atomic bool ibp_mprot_ever;

/* Only its address is used: a per-thread identity that needs no syscall and
 * stays valid in a signal handler (initial-exec TLS never allocates). */
static __thread char lock_identity __attribute__((tls_model("initial-exec")));

/* Page-word locks order "set dirty bit, make page writable" (fault path)
 * against "clear dirty bit, make page read-only" (rearm): interleaving the two
 * could leave a writable page with a clear bit, i.e. a missed write.  A fault
 * nested on the thread that holds the lock (a signal handler writing to the
 * region while its own thread rearms) runs between two steps of the holder,
 * which is safe, so it proceeds without the lock instead of deadlocking.
 * Returns true if this call took the lock. */
static bool word_lock(IbpTracker *t, size_t w)
{
    const uintptr_t me = (uintptr_t)&lock_identity;
    unsigned spins = 0;
    for (;;) {
        uintptr_t cur = 0;
        if (atomic_compare_exchange_weak(&t->locks[w], &cur, me))
            return true;
        if (cur == me)
            return false;
        if (++spins > 64)
            sched_yield();
    }
}

static void word_unlock(IbpTracker *t, size_t w, bool taken)
{
    if (taken)
        atomic_store(&t->locks[w], 0);
}

void ibp_mprot_set_protected(IbpTracker *t, bool on)
{
    if (atomic_exchange(&t->protected_pages, on) != on)
        atomic_fetch_add(&ibp_mprot_active, on ? 1 : -1);
}

int ibp_mprot_prepare(IbpTracker *t)
{
    (void)t;
    atomic_store(&ibp_mprot_ever, true);
    return ibp_sigchain_install();
}

/* A handler that set its bit before the words were cleared may make its page
 * writable after the span was protected: that page then reads as written,
 * which is only conservative.  So the words need no lock here. */
int ibp_mprot_arm(IbpTracker *t)
{
    ibp_mprot_set_protected(t, true);
    for (size_t w = 0; w < t->nwords; w++)
        atomic_store(&t->dirty[w], 0);
    if (mprotect((void *)t->start, t->end - t->start, PROT_READ) != 0) {
        const int err = errno;
        if (mprotect((void *)t->start, t->end - t->start, PROT_READ | PROT_WRITE) == 0)
            ibp_mprot_set_protected(t, false);
        return -err;
    }
    return 0;
}

int ibp_mprot_disarm(IbpTracker *t)
{
    if (!atomic_load(&t->protected_pages))
        return 0;
    if (mprotect((void *)t->start, t->end - t->start, PROT_READ | PROT_WRITE) != 0)
        return -errno;
    ibp_mprot_set_protected(t, false);
    return 0;
}

/* Gives up on the region after an mprotect failure (typically ENOMEM once
 * per-page protections exceed vm.max_map_count): everything writable, every
 * query reports everything until the next arm.  Returns false if even that
 * failed. */
static bool give_up(IbpTracker *t)
{
    atomic_store(&t->failed, true);
    atomic_fetch_add(&t->errors, 1);
    return mprotect((void *)t->start, t->end - t->start, PROT_READ | PROT_WRITE) == 0;
}

void ibp_mprot_take(IbpTracker *t, size_t p0, size_t np, bool rearm, uint64_t *out)
{
    const size_t w0 = p0 / IBP_BITS_PER_WORD, w1 = (p0 + np - 1) / IBP_BITS_PER_WORD;
    for (size_t w = w0; w <= w1; w++) {
        const uint64_t m = ibp_track_word_mask(w, p0, np);
        if (!rearm) {
            ibp_track_out_or_word(out, w, p0, atomic_load(&t->dirty[w]) & m);
            continue;
        }
        const bool taken = word_lock(t, w);
        const uint64_t bits = atomic_fetch_and(&t->dirty[w], ~m) & m;
        uint64_t rest = bits;
        while (rest) {
            const unsigned b = (unsigned)__builtin_ctzll(rest);
            const uint64_t from_b = rest >> b;
            const unsigned run = from_b == ~0ull >> b ? IBP_BITS_PER_WORD - b
                                                        : (unsigned)__builtin_ctzll(~from_b);
            const uintptr_t addr = t->start + ((w * IBP_BITS_PER_WORD + b) << ibp_track_page_shift);
            if (mprotect((void *)addr, (size_t)run << ibp_track_page_shift, PROT_READ) != 0) {
                give_up(t);
                break;
            }
            rest = run + b >= IBP_BITS_PER_WORD ? 0 : rest & ~(((1ull << run) - 1) << b);
        }
        word_unlock(t, w, taken);
        ibp_track_out_or_word(out, w, p0, bits);
    }
}

/* Async-signal-safe: no locks but the page-word spin, no allocation. */
int ibp_mprot_fault(uintptr_t addr)
{
    const unsigned tok = ibp_registry_read_enter();
    IbpTracker *const t = ibp_registry_tracker_at(addr);
    int ours = 0;
    if (t && t->backend == IBP_TRACK_MPROTECT) {
        ours = 1;
        const uintptr_t page = addr & ~(uintptr_t)(ibp_track_page - 1);
        const size_t p = (page - t->start) >> ibp_track_page_shift;
        const size_t w = p / IBP_BITS_PER_WORD;
        /* In a child made by a raw clone, a page-word lock may belong to a
         * thread that was not copied: the child only needs its page back. */
        if (ibp_track_forked_child()) {
            if (mprotect((void *)page, ibp_track_page, PROT_READ | PROT_WRITE) != 0)
                ours = 0;
            ibp_registry_read_exit(tok);
            return ours;
        }
        const bool taken = word_lock(t, w);
        /* A disarmed tracker's page can still fault if the write raced with
         * the disarm: making it writable is all that is left to do. */
        if (atomic_load(&t->armed))
            atomic_fetch_or(&t->dirty[w], 1ull << (p % IBP_BITS_PER_WORD));
        if (mprotect((void *)page, ibp_track_page, PROT_READ | PROT_WRITE) != 0 && !give_up(t))
            ours = 0;
        word_unlock(t, w, taken);
        atomic_fetch_add(&t->faults, 1);
    }
    ibp_registry_read_exit(tok);
    return ours;
}

typedef struct IbpKernelWrite {
    uintptr_t start;
    uintptr_t end;
} IbpKernelWrite;

static void unprotect_target(IbpTracker *t, void *arg)
{
    const IbpKernelWrite *const kw = arg;
    if (t->backend != IBP_TRACK_MPROTECT || !atomic_load(&t->protected_pages))
        return;
    const uintptr_t a = kw->start > t->start ? kw->start : t->start;
    const uintptr_t e = kw->end < t->end ? kw->end : t->end;
    if (a >= e)
        return;
    const size_t p0 = (a - t->start) >> ibp_track_page_shift;
    const size_t p1 = (e - 1 - t->start) >> ibp_track_page_shift;
    if (ibp_track_forked_child()) {
        mprotect((void *)(t->start + (p0 << ibp_track_page_shift)), (p1 - p0 + 1) << ibp_track_page_shift,
                 PROT_READ | PROT_WRITE);
        return;
    }
    const bool armed = atomic_load(&t->armed);
    for (size_t p = p0; p <= p1;) {
        const size_t w = p / IBP_BITS_PER_WORD;
        const size_t last = (w + 1) * IBP_BITS_PER_WORD - 1 < p1 ? (w + 1) * IBP_BITS_PER_WORD - 1 : p1;
        const bool taken = word_lock(t, w);
        if (armed)
            atomic_fetch_or(&t->dirty[w], ibp_track_word_mask(w, p, last - p + 1));
        if (mprotect((void *)(t->start + (p << ibp_track_page_shift)), (last - p + 1) << ibp_track_page_shift,
                     PROT_READ | PROT_WRITE) != 0)
            give_up(t);
        word_unlock(t, w, taken);
        p = last + 1;
    }
    atomic_fetch_add(&t->kernel_writes, 1);
}

void ibp_track_before_kernel_write(void *buf, size_t len)
{
    if (len == 0 || atomic_load_explicit(&ibp_mprot_active, memory_order_acquire) == 0)
        return;
    const uintptr_t a = (uintptr_t)buf;
    IbpKernelWrite kw = {a, len > UINTPTR_MAX - a ? UINTPTR_MAX : a + len};
    const unsigned tok = ibp_registry_read_enter();
    ibp_registry_trackers_in(a, len, unprotect_target, &kw);
    ibp_registry_read_exit(tok);
}

void ibp_track_before_kernel_write_iov(const struct iovec *iov, int iovcnt)
{
    if (!iov || atomic_load_explicit(&ibp_mprot_active, memory_order_acquire) == 0)
        return;
    for (int i = 0; i < iovcnt; i++)
        ibp_track_before_kernel_write(iov[i].iov_base, iov[i].iov_len);
}

/* The kernel writes the source address and the ancillary data, too. */
void ibp_track_before_kernel_write_msg(const struct msghdr *msg)
{
    if (!msg || atomic_load_explicit(&ibp_mprot_active, memory_order_acquire) == 0)
        return;
    ibp_track_before_kernel_write(msg->msg_name, msg->msg_namelen);
    ibp_track_before_kernel_write(msg->msg_control, msg->msg_controllen);
    ibp_track_before_kernel_write_iov(msg->msg_iov, (int)msg->msg_iovlen);
}
