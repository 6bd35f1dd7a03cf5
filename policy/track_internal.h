/* SPDX-License-Identifier: MIT
 * ibpshim: tracker state shared by the write-tracking backends. */
#ifndef IBP_POLICY_TRACK_INTERNAL_H
#define IBP_POLICY_TRACK_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "policy/track.h"

#define IBP_BITS_PER_WORD 64u

struct IbpTracker {
    IbpTrackBackend backend;
    uintptr_t start; /* page-aligned span [start, end) */
    uintptr_t end;
    size_t npages;
    size_t nwords;
    /* Serialises arm, query, disarm and retire; never taken on the fault path. */
    pthread_mutex_t op_mutex;
    _Atomic bool armed;
    /* mprotect: some page of the span may be read-only (set before protecting,
     * cleared after the last unprotect), so the syscall hook knows when to act. */
    _Atomic bool protected_pages;
    _Atomic bool retired;
    _Atomic bool failed;
    /* mprotect: give-ups and unlocked unprotects in progress; a query that finds one counts the
     * tracker failed (it may be between making the span writable and setting `failed`). */
    _Atomic int unlocking;
    bool uffd_registered; /* under op_mutex */
    /* Writes the page tables cannot show: mprotect faults, syscall targets,
     * marks for device-to-host copies.  One bit per page. */
    _Atomic uint64_t *dirty;
    /* mprotect: one lock per bitmap word (64 pages), holding the owner's
     * identity so a signal handler nested on the owning thread can proceed. */
    _Atomic uintptr_t *locks;
    _Atomic uint64_t arms;
    _Atomic uint64_t queries;
    _Atomic uint64_t faults;
    _Atomic uint64_t kernel_writes;
    _Atomic uint64_t pages_dirty_total;
    _Atomic uint64_t pages_dirty_last;
    _Atomic uint64_t errors;
    /* mprotect: pages made writable one by one since the last arm, one bit a page, under the
     * word locks; and the runs of them, counted word by word (see ibp_mprot_set_budget). */
    _Atomic uint64_t *wbits;
    _Atomic long writable;
};

extern size_t ibp_track_page;
extern unsigned ibp_track_page_shift;

/* Sets bits [from, from + count) of a plain output bitmap. */
void ibp_bitmap_set_range(uint64_t *bitmap, size_t from, size_t count);

/* --- uffd backend (track_uffd.c) --- */

/* Opens and checks userfaultfd and /proc/self/pagemap once.  Returns 1 if usable. */
int ibp_uffd_probe(const char **why);
/* Registers the span for write-protect tracking.  -ENOTSUP where the kernel refuses the mapping. */
int ibp_uffd_register(IbpTracker *t);
void ibp_uffd_unregister(IbpTracker *t);
/* Write-protects (wp) or unprotects the whole span. */
int ibp_uffd_protect(IbpTracker *t, bool wp);
/* Sets in out (bit 0 = page first) the pages of [first, last] the kernel saw
 * written, re-protecting them when rearm.  Returns 0 or -errno. */
int ibp_uffd_scan(IbpTracker *t, uintptr_t first, uintptr_t last, bool rearm, uint64_t *out);
/* In a forked child: the descriptors still point at the parent's memory. */
void ibp_uffd_forget_in_child(void);

/* --- mprotect backend (track_mprotect.c) --- */

int ibp_mprot_prepare(IbpTracker *t);
int ibp_mprot_arm(IbpTracker *t);
int ibp_mprot_disarm(IbpTracker *t);
/* Takes the dirty bits of pages [p0, p0 + np) of the span into out and, when
 * rearm, read-protects those pages again. */
void ibp_mprot_take(IbpTracker *t, size_t p0, size_t np, bool rearm, uint64_t *out);
/* The fault path: returns 1 if addr is a tracked page (now writable, marked). */
int ibp_mprot_fault(uintptr_t addr);
/* Most pages all mprotect trackers together may make writable one by one (each splits its
 * mapping in up to three, and past vm.max_map_count mappings the application's own mmap() fails):
 * past it, a tracker that makes one more writable gives up until re-armed (its span writable
 * whole).  A quarter of vm.max_map_count unless set; for tests. */
void ibp_mprot_set_budget(long pages);
/* Number of mprotect trackers that may have read-only pages (the syscall hook's fast check). */
extern _Atomic long ibp_mprot_active;
/* Set once any mprotect tracker has existed: a fault on a page that was just
 * unprotected may still arrive after its tracker has gone. */
extern _Atomic bool ibp_mprot_ever;

/* Records whether some page of an mprotect tracker may be read-only, keeping
 * ibp_mprot_active in step. */
void ibp_mprot_set_protected(IbpTracker *t, bool on);

/* Mask of the bits of tracker word w that fall in pages [p0, p0 + np). */
uint64_t ibp_track_word_mask(size_t w, size_t p0, size_t np);
/* ORs bits of tracker word w (pages w * 64 + b) into out at bit (page - p0). */
void ibp_track_out_or_word(uint64_t *out, size_t w, size_t p0, uint64_t bits);

/* Takes (exchange with 0 when rearm) dirty bits of pages [p0, p0 + np) into out. */
void ibp_track_take_soft(IbpTracker *t, size_t p0, size_t np, bool rearm, uint64_t *out);

/* --- SIGSEGV chaining (sigchain.c) --- */

/* Installs the fault handler first in the chain (once).  Returns 0 or -errno. */
int ibp_sigchain_install(void);

#endif /* IBP_POLICY_TRACK_INTERNAL_H */
