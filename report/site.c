/* SPDX-License-Identifier: MIT
 * ibpshim: allocation sites: native backtraces deduplicated by their frame addresses. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ibp_build_config.h"
#include "report/ledger.h"
#include "report/ledger_internal.h"

#if IBP_HAVE_UNWIND
#define UNW_LOCAL_ONLY
#include <libunwind.h>
#else
#include <execinfo.h>
#endif

static int site_oom;
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(elt) (site_oom = 1)
#include <uthash.h>

typedef struct IbpSite {
    UT_hash_handle hh;
    uint32_t id;
    int depth;
    uintptr_t frames[]; /* the hash key */
} IbpSite;

/* Frames of the unwinder's own that precede the caller of ibp_site_capture(). */
#define IBP_SITE_SELF_FRAMES 1
#define IBP_SITE_MAX_SKIP 16

static pthread_mutex_t site_lock = PTHREAD_MUTEX_INITIALIZER;
static IbpSite *site_table;
static IbpSite **site_by_id; /* [id - 1] */
static uint32_t site_cap;
static _Atomic uint32_t site_n;
static _Atomic int site_depth = 8;

void ibp_site_set_depth(int depth)
{
    if (depth < 0)
        depth = 0;
    if (depth > IBP_SITE_MAX_DEPTH)
        depth = IBP_SITE_MAX_DEPTH;
    atomic_store_explicit(&site_depth, depth, memory_order_relaxed);
}

/* Inlined so that the number of frames of our own (IBP_SITE_SELF_FRAMES) holds at any optimisation level. */
static inline __attribute__((always_inline)) int site_unwind(void **raw, int max)
{
#if IBP_HAVE_UNWIND
    return unw_backtrace(raw, max);
#else
    return backtrace(raw, max);
#endif
}

static uint32_t site_insert(const uintptr_t *frames, int depth)
{
    const size_t key_len = (size_t)depth * sizeof(uintptr_t);
    IbpSite *site = NULL;
    uint32_t id = IBP_SITE_UNKNOWN;

    pthread_mutex_lock(&site_lock);
    HASH_FIND(hh, site_table, frames, key_len, site);
    if (site) {
        id = site->id;
        goto out;
    }
    const uint32_t n = atomic_load_explicit(&site_n, memory_order_relaxed);
    if (n == site_cap) {
        const uint32_t cap = site_cap ? site_cap * 2 : 64;
        IbpSite **grown = realloc(site_by_id, cap * sizeof(*grown));
        if (!grown)
            goto out;
        site_by_id = grown;
        site_cap = cap;
    }
    site = malloc(sizeof(*site) + key_len);
    if (!site)
        goto out;
    memset(site, 0, sizeof(*site));
    site->id = n + 1;
    site->depth = depth;
    memcpy(site->frames, frames, key_len);
    site_oom = 0;
    HASH_ADD_KEYPTR(hh, site_table, site->frames, key_len, site);
    if (site_oom) {
        free(site);
        goto out;
    }
    site_by_id[n] = site;
    atomic_store_explicit(&site_n, n + 1, memory_order_release);
    id = site->id;
out:
    pthread_mutex_unlock(&site_lock);
    return id;
}

__attribute__((noinline)) uint32_t ibp_site_capture(int skip_frames)
{
    const int depth = atomic_load_explicit(&site_depth, memory_order_relaxed);
    if (depth <= 0)
        return IBP_SITE_UNKNOWN;
    if (skip_frames < 0)
        skip_frames = 0;
    if (skip_frames > IBP_SITE_MAX_SKIP)
        skip_frames = IBP_SITE_MAX_SKIP;

    void *raw[IBP_SITE_SELF_FRAMES + IBP_SITE_MAX_SKIP + IBP_SITE_MAX_DEPTH];
    const int first = IBP_SITE_SELF_FRAMES + skip_frames;
    const int got = site_unwind(raw, first + depth);
    if (got <= first)
        return IBP_SITE_UNKNOWN;
    uintptr_t frames[IBP_SITE_MAX_DEPTH];
    const int n = got - first;
    for (int i = 0; i < n; i++)
        frames[i] = (uintptr_t)raw[first + i];
    return site_insert(frames, n);
}

uint32_t ibp_site_count(void)
{
    return atomic_load_explicit(&site_n, memory_order_acquire);
}

int ibp_site_frames(uint32_t id, uintptr_t *frames, int max)
{
    if (id == IBP_SITE_UNKNOWN)
        return 0;
    int depth = -ENOENT;
    pthread_mutex_lock(&site_lock);
    if (id <= atomic_load_explicit(&site_n, memory_order_relaxed)) {
        const IbpSite *site = site_by_id[id - 1];
        depth = site->depth;
        const int n = depth < max ? depth : max;
        if (n > 0)
            memcpy(frames, site->frames, (size_t)n * sizeof(uintptr_t));
    }
    pthread_mutex_unlock(&site_lock);
    return depth;
}

void ibp_site_lock_for_fork(void)
{
    pthread_mutex_lock(&site_lock);
}

void ibp_site_unlock_after_fork(void)
{
    pthread_mutex_unlock(&site_lock);
}
