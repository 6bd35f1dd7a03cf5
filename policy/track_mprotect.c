/* SPDX-License-Identifier: MIT
 * ibpshim: mprotect write tracking: read-only pages, a lock-free fault path, syscall targets. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>
#include <stdatomic.h>
#include <sys/mman.h>

#include "common/log.h"
#include "policy/track_internal.h"

_Atomic long ibp_mprot_active;
_Atomic bool ibp_mprot_ever;

/* Only its address is used: a per-thread identity that needs no syscall and
 * stays valid in a signal handler (initial-exec TLS never allocates). */
static __thread char lock_identity __attribute__((tls_model("initial-exec")));
/* Page-word locks this thread holds or is taking, counted before each attempt: a fault nested
 * in such a thread (a signal handler writing the region) sees it non-zero. */
static __thread unsigned held_words __attribute__((tls_model("initial-exec")));
/* held_words changes are kept on their side of the lock's atomics for a handler on this thread. */
#define HELD_FENCE() atomic_signal_fence(memory_order_seq_cst)

typedef enum WordLock {
    LOCK_TAKEN, /* this call took it */
    LOCK_OURS,  /* this thread holds it already (a nested fault) */
    LOCK_BUSY,  /* another thread holds it, and the caller may not wait */
} WordLock;

/* Page-word locks order "set dirty bit, make page writable" (fault path)
 * against "clear dirty bit, make page read-only" (rearm): interleaving the two
 * could leave a writable page with a clear bit, i.e. a missed write.  A fault
 * nested on the thread that holds the lock (a signal handler writing to the
 * region while its own thread rearms) runs between two steps of the holder,
 * which is safe, so it proceeds without the lock.  A fault nested in a thread
 * that holds or takes another word lock must not wait for this one (its holder
 * may be taking every lock and waiting for that thread's): `wait` false. */
static WordLock word_lock(IbpTracker *t, size_t w, bool wait)
{
    const uintptr_t me = (uintptr_t)&lock_identity;
    unsigned spins = 0;
    held_words++;
    HELD_FENCE();
    for (;;) {
        uintptr_t cur = 0;
        if (atomic_compare_exchange_weak(&t->locks[w], &cur, me))
            return LOCK_TAKEN;
        if (cur == me || (cur && !wait)) {
            HELD_FENCE();
            held_words--;
            return cur == me ? LOCK_OURS : LOCK_BUSY;
        }
        if (++spins > 64)
            sched_yield();
    }
}

static void word_unlock(IbpTracker *t, size_t w, WordLock how)
{
    if (how == LOCK_TAKEN) {
        atomic_store(&t->locks[w], 0);
        HELD_FENCE();
        held_words--;
    }
}

/* Every page-word lock of t, in order, for an arm or a disarm (normal context, op_mutex held). */
static void lock_all(IbpTracker *t)
{
    for (size_t w = 0; w < t->nwords; w++)
        word_lock(t, w, true);
}

static void unlock_all(IbpTracker *t)
{
    for (size_t w = 0; w < t->nwords; w++)
        word_unlock(t, w, LOCK_TAKEN);
}

/* Pages made writable one by one, all trackers together, against their budget (0: not read yet). */
static _Atomic long writable_total;
static _Atomic long writable_budget;

void ibp_mprot_set_budget(long pages)
{
    atomic_store(&writable_budget, pages > 0 ? pages : 1);
}

static void budget_init(void)
{
    long max_maps = 65530; /* the kernel's default */
    const int fd = open("/proc/sys/vm/max_map_count", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        char buf[32];
        const ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n > 0) {
            buf[n] = '\0';
            const long v = strtol(buf, NULL, 10);
            if (v > 0)
                max_maps = v;
        }
    }
    long expect = 0;
    atomic_compare_exchange_strong(&writable_budget, &expect, max_maps / 4 > 0 ? max_maps / 4 : 1);
}

/* Runs of writable pages within one word (a run across words counts once a word: an
 * overestimate, by at most a run a word). */
static long word_runs(uint64_t x)
{
    return __builtin_popcountll(x & ~(x << 1));
}

static void runs_add(IbpTracker *t, long n)
{
    if (n) {
        atomic_fetch_add(&t->writable, n);
        atomic_fetch_add(&writable_total, n);
    }
}

/* Pages `set` of word w made writable one by one, pages `clear` read-only again.  Keeps the count
 * of runs, the mappings they may have split; exact whoever else updates the word meanwhile. */
static void wbits_update(IbpTracker *t, size_t w, uint64_t set, uint64_t clear)
{
    uint64_t old = atomic_load(&t->wbits[w]);
    while (!atomic_compare_exchange_weak(&t->wbits[w], &old, (old | set) & ~clear)) {
    }
    runs_add(t, word_runs((old | set) & ~clear) - word_runs(old));
}

/* The span is one protection again, writable or not. */
static void wbits_clear_all(IbpTracker *t)
{
    long n = 0;
    for (size_t w = 0; w < t->nwords; w++)
        n += word_runs(atomic_exchange(&t->wbits[w], 0));
    runs_add(t, -n);
}

static bool over_budget(void)
{
    return atomic_load(&writable_total) > atomic_load(&writable_budget);
}

/* Syscall targets pinned writable while the kernel may write them (between
 * ibp_track_before_kernel_write and ibp_track_after_kernel_write): a rearm
 * leaves their pages writable and dirty, since one protected under the kernel's
 * copy would fail the application's read() with EFAULT.  Claimed lock-free (the
 * hooked calls may run in signal handlers): a slot's range is stored after its
 * bit is set and cleared before it is released; a rearm reads them under the
 * page-word lock, which the hook takes after storing its range. */
#define IBP_PIN_SLOTS 64
static _Atomic uint64_t pin_used;
static _Atomic uintptr_t pin_lo[IBP_PIN_SLOTS], pin_hi[IBP_PIN_SLOTS];

static int pin_claim(uintptr_t lo, uintptr_t hi)
{
    uint64_t used = atomic_load(&pin_used);
    for (;;) {
        if (used == ~0ull)
            return -1;
        const int s = __builtin_ctzll(~used);
        if (atomic_compare_exchange_weak(&pin_used, &used, used | 1ull << s)) {
            atomic_store(&pin_lo[s], lo);
            atomic_store(&pin_hi[s], hi);
            return s;
        }
    }
}

static void pin_release(int s)
{
    atomic_store(&pin_hi[s], 0);
    atomic_store(&pin_lo[s], 0);
    atomic_fetch_and(&pin_used, ~(1ull << s));
}

/* The pages of word w of t that a pinned range touches. */
static uint64_t pinned_mask(const IbpTracker *t, size_t w)
{
    uint64_t used = atomic_load(&pin_used), mask = 0;
    const uintptr_t w_lo = t->start + ((w * IBP_BITS_PER_WORD) << ibp_track_page_shift);
    while (used) {
        const int s = __builtin_ctzll(used);
        used &= used - 1;
        const uintptr_t hi = atomic_load(&pin_hi[s]), lo = atomic_load(&pin_lo[s]);
        if (hi <= lo || hi <= w_lo || lo >= t->end)
            continue;
        const uintptr_t a = lo > w_lo ? lo : w_lo;
        const size_t p0 = (a - t->start) >> ibp_track_page_shift;
        const size_t p1 = ((hi < t->end ? hi : t->end) - 1 - t->start) >> ibp_track_page_shift;
        if (p0 / IBP_BITS_PER_WORD != w)
            continue;
        const size_t last = p1 / IBP_BITS_PER_WORD == w ? p1 : (w + 1) * IBP_BITS_PER_WORD - 1;
        mask |= ibp_track_word_mask(w, p0, last - p0 + 1);
    }
    return mask;
}

/* Makes the pinned pages of word w writable and dirty again (after a span-wide protect). */
static void pinned_restore(IbpTracker *t, size_t w)
{
    uint64_t rest = pinned_mask(t, w);
    if (!rest)
        return;
    atomic_fetch_or(&t->dirty[w], rest);
    wbits_update(t, w, rest, 0);
    while (rest) {
        const unsigned b = (unsigned)__builtin_ctzll(rest);
        const uintptr_t addr = t->start + ((w * IBP_BITS_PER_WORD + b) << ibp_track_page_shift);
        if (mprotect((void *)addr, ibp_track_page, PROT_READ | PROT_WRITE) != 0)
            atomic_store(&t->failed, true);
        rest &= rest - 1;
    }
}

void ibp_mprot_set_protected(IbpTracker *t, bool on)
{
    if (atomic_exchange(&t->protected_pages, on) != on)
        atomic_fetch_add(&ibp_mprot_active, on ? 1 : -1);
}

int ibp_mprot_prepare(IbpTracker *t)
{
    (void)t;
    budget_init();
    atomic_store(&ibp_mprot_ever, true);
    return ibp_sigchain_install();
}

/* Every page-word lock is held while the words are cleared and the span
 * protected: a fault handler (or a syscall hook) that set its bit before the
 * clear would otherwise make its page writable after the protect, leaving a
 * writable page with a clear bit, whose writes no query reports.  Pinned
 * syscall targets stay writable and dirty. */
int ibp_mprot_arm(IbpTracker *t)
{
    ibp_mprot_set_protected(t, true);
    lock_all(t);
    /* Before the protect: a give_up() unprotects the span before it sets the flag, so either
     * this protect comes after its unprotect, or its flag after this store (see give_up). */
    atomic_store(&t->failed, false);
    for (size_t w = 0; w < t->nwords; w++)
        atomic_store(&t->dirty[w], 0);
    wbits_clear_all(t);
    int ret = 0;
    if (mprotect((void *)t->start, t->end - t->start, PROT_READ) != 0) {
        ret = -errno;
        if (mprotect((void *)t->start, t->end - t->start, PROT_READ | PROT_WRITE) == 0)
            ibp_mprot_set_protected(t, false);
    } else if (atomic_load(&pin_used)) {
        for (size_t w = 0; w < t->nwords; w++)
            pinned_restore(t, w);
    }
    unlock_all(t);
    return ret;
}

int ibp_mprot_disarm(IbpTracker *t)
{
    if (!atomic_load(&t->protected_pages))
        return 0;
    lock_all(t);
    const int ret = mprotect((void *)t->start, t->end - t->start, PROT_READ | PROT_WRITE) != 0 ? -errno : 0;
    if (ret == 0)
        wbits_clear_all(t);
    unlock_all(t);
    if (ret == 0)
        ibp_mprot_set_protected(t, false);
    return ret;
}

/* Makes [addr, addr + len) writable without a page-word lock and fails the tracker.  Against a
 * query (op_mutex), `unlocking` covers the unprotect: one that finds it counts the tracker failed.
 * Against an arm (which clears the flag before it protects), the flag is set both before and
 * after the unprotect: an arm between the two ends with the flag set again, one after the second
 * protected after the unprotect.  Returns whether the unprotect worked. */
static bool unprotect_failing(IbpTracker *t, uintptr_t addr, size_t len)
{
    atomic_fetch_add(&t->unlocking, 1);
    atomic_store(&t->failed, true);
    const bool ok = mprotect((void *)addr, len, PROT_READ | PROT_WRITE) == 0;
    atomic_store(&t->failed, true);
    atomic_fetch_sub(&t->unlocking, 1);
    atomic_fetch_add(&t->errors, 1);
    return ok;
}

/* Gives up on the region after an mprotect failure (typically ENOMEM) or past the budget:
 * everything writable, every query reports everything until the next arm.  Takes no lock (it
 * runs in the fault path, nested or not).  Returns false if the unprotect failed. */
static bool give_up(IbpTracker *t)
{
    if (!unprotect_failing(t, t->start, t->end - t->start))
        return false;
    wbits_clear_all(t);
    return true;
}

/* A fault or syscall hook nested in a thread that holds or takes another word lock found this
 * word held elsewhere: its pages are marked and made writable without the lock, and the tracker
 * fails until the next arm. */
static bool unprotect_unlocked(IbpTracker *t, size_t w, uint64_t mask, uintptr_t addr, size_t len)
{
    atomic_fetch_or(&t->dirty[w], mask);
    return unprotect_failing(t, addr, len) || give_up(t);
}

/* Past the budget, the tracker that holds runs of its own gives up (its mappings merge). */
static void check_budget(IbpTracker *t)
{
    if (over_budget() && atomic_load(&t->writable) > 0)
        give_up(t);
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
        const WordLock taken = word_lock(t, w, true);
        /* Pinned pages are reported written and stay so: the kernel may still write them. */
        const uint64_t pinned = pinned_mask(t, w) & m;
        const uint64_t bits = atomic_fetch_and(&t->dirty[w], ~(m & ~pinned)) & m;
        /* A tracker that gave up reports everything and leaves its span writable whole. */
        const uint64_t protect = atomic_load(&t->failed) ? 0 : bits & ~pinned;
        uint64_t rest = protect;
        bool failed_now = false;
        while (rest) {
            const unsigned b = (unsigned)__builtin_ctzll(rest);
            const uint64_t from_b = rest >> b;
            const unsigned run = from_b == ~0ull >> b ? IBP_BITS_PER_WORD - b
                                                        : (unsigned)__builtin_ctzll(~from_b);
            const uintptr_t addr = t->start + ((w * IBP_BITS_PER_WORD + b) << ibp_track_page_shift);
            if (mprotect((void *)addr, (size_t)run << ibp_track_page_shift, PROT_READ) != 0) {
                failed_now = true;
                break;
            }
            rest = run + b >= IBP_BITS_PER_WORD ? 0 : rest & ~(((1ull << run) - 1) << b);
        }
        /* An unlocked unprotect (a nested syscall hook's pinned target, say) may have come before
         * this protect: once it is seen, what this protected is made writable again. */
        const uint64_t done = protect & ~rest;
        if (done && (atomic_load(&t->failed) || atomic_load(&t->unlocking))) {
            for (uint64_t r = done; r; r &= r - 1) {
                const uintptr_t addr =
                    t->start + ((w * IBP_BITS_PER_WORD + (unsigned)__builtin_ctzll(r)) << ibp_track_page_shift);
                mprotect((void *)addr, ibp_track_page, PROT_READ | PROT_WRITE);
            }
        } else {
            wbits_update(t, w, 0, done);
        }
        word_unlock(t, w, taken);
        if (failed_now)
            give_up(t);
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
        const WordLock taken = word_lock(t, w, held_words == 0);
        if (taken == LOCK_BUSY) {
            if (!unprotect_unlocked(t, w, 1ull << (p % IBP_BITS_PER_WORD), page, ibp_track_page))
                ours = 0;
            atomic_fetch_add(&t->faults, 1);
            ibp_registry_read_exit(tok);
            return ours;
        }
        /* A disarmed tracker's page can still fault if the write raced with
         * the disarm: making it writable is all that is left to do. */
        const bool armed = atomic_load(&t->armed);
        if (armed)
            atomic_fetch_or(&t->dirty[w], 1ull << (p % IBP_BITS_PER_WORD));
        const bool bad = mprotect((void *)page, ibp_track_page, PROT_READ | PROT_WRITE) != 0;
        if (armed && !bad)
            wbits_update(t, w, 1ull << (p % IBP_BITS_PER_WORD), 0);
        word_unlock(t, w, taken);
        if (bad && !give_up(t))
            ours = 0;
        check_budget(t);
        atomic_fetch_add(&t->faults, 1);
    }
    ibp_registry_read_exit(tok);
    return ours;
}

typedef struct IbpKernelWrite {
    uintptr_t start;
    uintptr_t end;
    IbpTrackPins *pins; /* NULL: no pin */
    bool pinned;        /* a slot was claimed for [start, end) */
} IbpKernelWrite;

static void unprotect_target(IbpTracker *t, void *arg)
{
    IbpKernelWrite *const kw = arg;
    if (t->backend != IBP_TRACK_MPROTECT)
        return;
    const uintptr_t a = kw->start > t->start ? kw->start : t->start;
    const uintptr_t e = kw->end < t->end ? kw->end : t->end;
    if (a >= e)
        return;
    /* Pinned first, whether or not the tracker is armed now (an arm during the call must leave
     * the target writable), then unprotected: see pin_claim.  Only targets inside a tracker take
     * a slot, one a target.  Without a free slot a target is only unprotected, as before pins. */
    if (kw->pins && !kw->pinned) {
        const int slot = pin_claim(kw->start, kw->end);
        if (slot >= 0) {
            kw->pins->mask |= 1ull << slot;
            kw->pinned = true;
        }
    }
    if (!atomic_load(&t->protected_pages))
        return;
    const size_t p0 = (a - t->start) >> ibp_track_page_shift;
    const size_t p1 = (e - 1 - t->start) >> ibp_track_page_shift;
    if (ibp_track_forked_child()) {
        mprotect((void *)(t->start + (p0 << ibp_track_page_shift)), (p1 - p0 + 1) << ibp_track_page_shift,
                 PROT_READ | PROT_WRITE);
        return;
    }
    for (size_t p = p0; p <= p1;) {
        const size_t w = p / IBP_BITS_PER_WORD;
        const size_t last = (w + 1) * IBP_BITS_PER_WORD - 1 < p1 ? (w + 1) * IBP_BITS_PER_WORD - 1 : p1;
        const uint64_t mask = ibp_track_word_mask(w, p, last - p + 1);
        const WordLock taken = word_lock(t, w, held_words == 0);
        if (taken == LOCK_BUSY) {
            unprotect_unlocked(t, w, mask, t->start + (p << ibp_track_page_shift),
                               (last - p + 1) << ibp_track_page_shift);
            p = last + 1;
            continue;
        }
        /* Read under the lock: an arm between a read outside it and this unprotect would
         * leave the page writable with its bit clear. */
        const bool armed = atomic_load(&t->armed);
        if (armed)
            atomic_fetch_or(&t->dirty[w], mask);
        const bool bad = mprotect((void *)(t->start + (p << ibp_track_page_shift)),
                                  (last - p + 1) << ibp_track_page_shift, PROT_READ | PROT_WRITE) != 0;
        if (armed && !bad)
            wbits_update(t, w, mask, 0);
        word_unlock(t, w, taken);
        if (bad)
            give_up(t);
        p = last + 1;
    }
    check_budget(t);
    atomic_fetch_add(&t->kernel_writes, 1);
}

/* Whether any mprotect tracker has existed: a target of a tracker not armed yet is pinned too,
 * since an arm may come while the kernel writes it. */
static bool mprotect_used(void)
{
    return atomic_load_explicit(&ibp_mprot_ever, memory_order_acquire);
}

void ibp_track_before_kernel_write(void *buf, size_t len, IbpTrackPins *pins)
{
    if (len == 0 || !mprotect_used())
        return;
    const int saved = errno; /* a failed mprotect here is not the call's to report */
    const uintptr_t a = (uintptr_t)buf;
    IbpKernelWrite kw = {.start = a, .end = len > UINTPTR_MAX - a ? UINTPTR_MAX : a + len, .pins = pins};
    const unsigned tok = ibp_registry_read_enter();
    ibp_registry_trackers_in(a, len, unprotect_target, &kw);
    ibp_registry_read_exit(tok);
    errno = saved;
}

void ibp_track_before_kernel_write_iov(const struct iovec *iov, int iovcnt, IbpTrackPins *pins)
{
    if (!iov || !mprotect_used())
        return;
    for (int i = 0; i < iovcnt; i++)
        ibp_track_before_kernel_write(iov[i].iov_base, iov[i].iov_len, pins);
}

/* The kernel writes the source address and the ancillary data, too. */
void ibp_track_before_kernel_write_msg(const struct msghdr *msg, IbpTrackPins *pins)
{
    if (!msg || !mprotect_used())
        return;
    ibp_track_before_kernel_write(msg->msg_name, msg->msg_namelen, pins);
    ibp_track_before_kernel_write(msg->msg_control, msg->msg_controllen, pins);
    ibp_track_before_kernel_write_iov(msg->msg_iov, (int)msg->msg_iovlen, pins);
}

void ibp_track_after_kernel_write(IbpTrackPins *pins)
{
    for (uint64_t m = pins->mask; m; m &= m - 1)
        pin_release(__builtin_ctzll(m));
    pins->mask = 0;
}
