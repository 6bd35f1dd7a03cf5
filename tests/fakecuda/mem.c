/* SPDX-License-Identifier: MIT
 * ibpshim: fake CUDA driver: device memory in a reserved address range, pinned and registered host
 * memory in a registry, pointer attributes. */
#include "tests/fakecuda/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Device addresses are carved from a PROT_NONE reservation and backed by separate host mappings, so
 * host code that dereferences a device pointer faults as it would with a real GPU. */
#define DEVICE_HINT ((void *)(uintptr_t)0x200000000000ull)
#define DEVICE_ALIGN 4096u
#define DEVICE_GUARD 4096u /* gap between allocations so small overruns hit no allocation */
#define DEVICE_FILL 0xA5   /* cuMemAlloc memory is not zeroed: make reads of it visible */

typedef struct Entry {
    uintptr_t base;
    size_t size;     /* as requested */
    size_t span;     /* address range taken (device) or mapping length (host alloc) */
    FakecudaMemKind kind;
    unsigned flags;
    int device;
    CUcontext ctx;   /* its owner (fakecuda_ctx_owner when it was made): dropped with it */
    void *backing;   /* device: where the bytes live */
} Entry;

static pthread_rwlock_t mem_lock = PTHREAD_RWLOCK_INITIALIZER;
static Entry *entries; /* sorted by base, ranges disjoint */
static size_t entry_count, entry_cap;

static pthread_once_t range_once = PTHREAD_ONCE_INIT;
static uintptr_t range_base;
static size_t range_size;

static void reserve_range(void)
{
    void *const p = mmap(DEVICE_HINT, FAKECUDA_DEVICE_BYTES, PROT_NONE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return;
    range_base = (uintptr_t)p;
    range_size = FAKECUDA_DEVICE_BYTES;
}

bool fakecuda_mem_in_device_range(uintptr_t p)
{
    pthread_once(&range_once, reserve_range);
    return range_size && p >= range_base && p - range_base < range_size;
}

static size_t page_round(size_t n)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (n + page - 1) / page * page;
}

/* Index of the last entry with base <= p, or entry_count when none.  Caller holds mem_lock. */
static size_t find_floor(uintptr_t p)
{
    size_t lo = 0, hi = entry_count;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (entries[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo == 0 ? entry_count : lo - 1;
}

/* The entry containing p, or NULL.  Caller holds mem_lock. */
static const Entry *find_containing(uintptr_t p)
{
    const size_t i = find_floor(p);
    if (i == entry_count)
        return NULL;
    const Entry *const e = &entries[i];
    return p - e->base < e->size ? e : NULL;
}

/* Inserts e keeping the order.  Caller holds mem_lock for writing. */
static int insert_entry(const Entry *e)
{
    if (entry_count == entry_cap) {
        const size_t cap = entry_cap ? entry_cap * 2 : 64;
        Entry *const grown = realloc(entries, cap * sizeof(*grown));
        if (!grown)
            return -ENOMEM;
        entries = grown;
        entry_cap = cap;
    }
    size_t at = entry_count;
    while (at > 0 && entries[at - 1].base > e->base)
        at--;
    memmove(&entries[at + 1], &entries[at], (entry_count - at) * sizeof(*entries));
    entries[at] = *e;
    entry_count++;
    return 0;
}

static void remove_entry(size_t i)
{
    memmove(&entries[i], &entries[i + 1], (entry_count - i - 1) * sizeof(*entries));
    entry_count--;
}

void fakecuda_mem_lookup(uintptr_t p, FakecudaPtrInfo *out)
{
    memset(out, 0, sizeof(*out));
    out->device = -1;
    pthread_rwlock_rdlock(&mem_lock);
    const Entry *const e = find_containing(p);
    if (e) {
        out->kind = e->kind;
        out->base = e->base;
        out->size = e->size;
        out->flags = e->flags;
        out->device = e->device;
    }
    pthread_rwlock_unlock(&mem_lock);
    if (!e && fakecuda_mem_in_device_range(p))
        out->kind = FAKECUDA_MEM_DEVICE;
}

void *fakecuda_mem_access(uintptr_t p, size_t n, bool allow_pageable)
{
    if (n > UINTPTR_MAX - p)
        return NULL;
    void *result = NULL;
    pthread_rwlock_rdlock(&mem_lock);
    const Entry *const e = find_containing(p);
    if (e) {
        if (p + n <= e->base + e->size)
            result = e->kind == FAKECUDA_MEM_DEVICE ? (char *)e->backing + (p - e->base) : (void *)p;
    } else if (allow_pageable && !fakecuda_mem_in_device_range(p)) {
        result = (void *)p;
    }
    pthread_rwlock_unlock(&mem_lock);
    return result;
}

/* ---- device memory ---- */

static CUresult device_alloc(int device, size_t n, uintptr_t *out)
{
    pthread_once(&range_once, reserve_range);
    if (!range_size)
        return CUDA_ERROR_OUT_OF_MEMORY;
    const size_t span = (n + DEVICE_ALIGN - 1) / DEVICE_ALIGN * DEVICE_ALIGN;
    if (span < n || span > range_size)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *const backing = mmap(NULL, page_round(span), PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (backing == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(backing, DEVICE_FILL, n);

    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_rwlock_wrlock(&mem_lock);
    /* First fit over the device entries, which lie in the range in address order. */
    uintptr_t cursor = range_base + DEVICE_GUARD;
    for (size_t i = 0; i < entry_count; i++) {
        const Entry *const e = &entries[i];
        if (e->kind != FAKECUDA_MEM_DEVICE)
            continue;
        if (e->base >= cursor && e->base - cursor >= span + DEVICE_GUARD)
            break;
        cursor = e->base + e->span + DEVICE_GUARD;
    }
    if (cursor + span <= range_base + range_size) {
        const Entry e = {
            .base = cursor,
            .size = n,
            .span = span,
            .kind = FAKECUDA_MEM_DEVICE,
            .device = device,
            .ctx = fakecuda_ctx_owner(),
            .backing = backing,
        };
        if (insert_entry(&e) == 0) {
            *out = cursor;
            r = CUDA_SUCCESS;
        }
    }
    pthread_rwlock_unlock(&mem_lock);
    if (r != CUDA_SUCCESS)
        munmap(backing, page_round(span));
    else
        atomic_fetch_add(&fakecuda_counters.device_allocs, 1);
    return r;
}

FAKECUDA_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    int dev = 0;
    CUresult r = fakecuda_current_device(&dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!dptr || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    r = fakecuda_capture_check_unsafe();
    if (r != CUDA_SUCCESS)
        return r;
    FAKECUDA_RETURN_IF_INJECTED("cuMemAlloc");
    uintptr_t p = 0;
    r = device_alloc(dev, bytesize, &p);
    if (r == CUDA_SUCCESS)
        *dptr = (CUdeviceptr)p;
    FAKECUDA_TRACE("cuMemAlloc(%zu) -> %d %#lx", bytesize, (int)r, (unsigned long)p);
    return r;
}

/* Removes the entry whose base is exactly p and whose kind is kind; fills *removed.  Work queued on
 * any stream is drained first: freeing is synchronizing, as in CUDA. */
static CUresult release_entry(uintptr_t p, FakecudaMemKind kind, Entry *removed)
{
    CUresult r = fakecuda_capture_check_unsafe();
    if (r != CUDA_SUCCESS)
        return r;
    pthread_rwlock_rdlock(&mem_lock);
    const Entry *const e = find_containing(p);
    const bool ok = e && e->base == p && e->kind == kind;
    const bool interior = e && e->base != p && e->kind == kind;
    pthread_rwlock_unlock(&mem_lock);
    /* An interior pointer of a registered range is an invalid value; anything else unregistered. */
    if (!ok)
        return kind == FAKECUDA_MEM_REGISTERED && !interior ? CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
                                                            : CUDA_ERROR_INVALID_VALUE;
    (void)fakecuda_device_sync(-1);
    r = kind == FAKECUDA_MEM_REGISTERED ? CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED : CUDA_ERROR_INVALID_VALUE;
    pthread_rwlock_wrlock(&mem_lock);
    const size_t i = find_floor(p);
    if (i < entry_count && entries[i].base == p && entries[i].kind == kind) {
        *removed = entries[i];
        remove_entry(i);
        r = CUDA_SUCCESS;
    }
    pthread_rwlock_unlock(&mem_lock);
    return r;
}

FAKECUDA_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    int dev = 0;
    CUresult r = fakecuda_current_device(&dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!dptr)
        return CUDA_SUCCESS;
    Entry e;
    r = release_entry((uintptr_t)dptr, FAKECUDA_MEM_DEVICE, &e);
    if (r == CUDA_SUCCESS)
        munmap(e.backing, page_round(e.span));
    FAKECUDA_TRACE("cuMemFree(%#lx) -> %d", (unsigned long)dptr, (int)r);
    return r;
}

FAKECUDA_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    int dev = 0;
    const CUresult r = fakecuda_current_device(&dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!free_bytes || !total)
        return CUDA_ERROR_INVALID_VALUE;
    size_t used = 0;
    pthread_rwlock_rdlock(&mem_lock);
    for (size_t i = 0; i < entry_count; i++)
        if (entries[i].kind == FAKECUDA_MEM_DEVICE)
            used += entries[i].span + DEVICE_GUARD;
    pthread_rwlock_unlock(&mem_lock);
    *total = (size_t)FAKECUDA_DEVICE_BYTES;
    *free_bytes = used < *total ? *total - used : 0;
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    int dev = 0;
    const CUresult r = fakecuda_current_device(&dev);
    if (r != CUDA_SUCCESS)
        return r;
    FakecudaPtrInfo info;
    fakecuda_mem_lookup((uintptr_t)dptr, &info);
    if (info.kind == FAKECUDA_MEM_PAGEABLE || info.size == 0)
        return CUDA_ERROR_NOT_FOUND;
    if (pbase)
        *pbase = (CUdeviceptr)info.base;
    if (psize)
        *psize = info.size;
    return CUDA_SUCCESS;
}

/* cuDevicePrimaryCtxReset, cuCtxDestroy: once the device's queued work has drained, every
 * allocation that belongs to the context (made while it was current, or, for a primary context,
 * while a green context's converted context of its device was current: fakecuda_ctx_owner) goes
 * with it: pinned host memory unmapped (so that a later read of it faults, as it may with a real
 * driver), registrations dropped (the memory itself stays the application's), device memory
 * freed. */
void fakecuda_mem_drop_context(CUcontext ctx)
{
    (void)fakecuda_device_sync(ctx->device);
    pthread_rwlock_wrlock(&mem_lock);
    size_t kept = 0;
    for (size_t i = 0; i < entry_count; i++) {
        const Entry e = entries[i];
        if (e.ctx != ctx) {
            entries[kept++] = e;
        } else if (e.kind == FAKECUDA_MEM_HOST_ALLOC) {
            munmap((void *)e.base, e.span);
        } else if (e.kind == FAKECUDA_MEM_DEVICE) {
            munmap(e.backing, page_round(e.span));
        }
    }
    entry_count = kept;
    pthread_rwlock_unlock(&mem_lock);
}

/* ---- pinned host memory ---- */

static CUresult host_alloc(void **pp, size_t n, unsigned flags)
{
    int dev = 0;
    CUresult r = fakecuda_current_device(&dev);
    if (r != CUDA_SUCCESS)
        return r;
    const unsigned known = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
    if (!pp || n == 0 || (flags & ~known))
        return CUDA_ERROR_INVALID_VALUE;
    r = fakecuda_capture_check_unsafe();
    if (r != CUDA_SUCCESS)
        return r;
    const size_t span = page_round(n);
    void *const p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    const Entry e = {
        .base = (uintptr_t)p,
        .size = n,
        .span = span,
        .kind = FAKECUDA_MEM_HOST_ALLOC,
        .flags = flags,
        .device = dev,
        .ctx = fakecuda_ctx_owner(),
    };
    pthread_rwlock_wrlock(&mem_lock);
    const int err = insert_entry(&e);
    pthread_rwlock_unlock(&mem_lock);
    if (err) {
        munmap(p, span);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    atomic_fetch_add(&fakecuda_counters.host_allocs, 1);
    *pp = p;
    FAKECUDA_TRACE("cuMemHostAlloc(%zu, flags=%#x) -> %p", n, flags, p);
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags)
{
    return host_alloc(pp, bytesize, flags);
}

FAKECUDA_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return host_alloc(pp, bytesize, 0);
}

FAKECUDA_EXPORT CUresult cuMemFreeHost(void *p)
{
    int dev = 0;
    CUresult r = fakecuda_current_device(&dev);
    if (r != CUDA_SUCCESS)
        return r;
    Entry e;
    r = release_entry((uintptr_t)p, FAKECUDA_MEM_HOST_ALLOC, &e);
    if (r == CUDA_SUCCESS)
        munmap((void *)e.base, e.span);
    FAKECUDA_TRACE("cuMemFreeHost(%p) -> %d", p, (int)r);
    return r;
}

/* True if every page of [p, p + n) is mapped. */
static bool host_range_mapped(uintptr_t p, size_t n)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t start = p & ~(page - 1);
    return msync((void *)start, p + n - start, MS_ASYNC) == 0;
}

FAKECUDA_EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int flags)
{
    int dev = 0;
    CUresult r = fakecuda_current_device(&dev);
    if (r != CUDA_SUCCESS)
        return r;
    const unsigned known = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                           CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
    const uintptr_t base = (uintptr_t)p;
    if (!p || bytesize == 0 || (flags & ~known) || bytesize > UINTPTR_MAX - base)
        return CUDA_ERROR_INVALID_VALUE;
    if (fakecuda_mem_in_device_range(base) || fakecuda_mem_in_device_range(base + bytesize - 1))
        return CUDA_ERROR_INVALID_VALUE;
    if (!host_range_mapped(base, bytesize))
        return CUDA_ERROR_INVALID_VALUE;
    r = fakecuda_capture_check_unsafe();
    if (r != CUDA_SUCCESS)
        return r;
    const Entry e = {
        .base = base,
        .size = bytesize,
        .span = bytesize,
        .kind = FAKECUDA_MEM_REGISTERED,
        .flags = flags,
        .device = dev,
        .ctx = fakecuda_ctx_owner(),
    };
    pthread_rwlock_wrlock(&mem_lock);
    /* Overlap: the entry at or below base reaches past it, or the next one starts before the end. */
    const size_t i = find_floor(base);
    const size_t next = i == entry_count ? 0 : i + 1;
    const Entry *hit = NULL;
    if (i != entry_count && entries[i].base + entries[i].size > base)
        hit = &entries[i];
    else if (next < entry_count && entries[next].base < base + bytesize)
        hit = &entries[next];
    /* CUDA refuses overlap with a registered range as already registered, with cudaHostAlloc
     * memory as an invalid value. */
    if (hit)
        r = hit->kind == FAKECUDA_MEM_REGISTERED ? CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
                                                 : CUDA_ERROR_INVALID_VALUE;
    else if (insert_entry(&e) != 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_rwlock_unlock(&mem_lock);
    if (r == CUDA_SUCCESS)
        atomic_fetch_add(&fakecuda_counters.host_registers, 1);
    FAKECUDA_TRACE("cuMemHostRegister(%p, %zu, flags=%#x) -> %d", p, bytesize, flags, (int)r);
    return r;
}

FAKECUDA_EXPORT CUresult cuMemHostUnregister(void *p)
{
    int dev = 0;
    CUresult r = fakecuda_current_device(&dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    Entry e;
    r = release_entry((uintptr_t)p, FAKECUDA_MEM_REGISTERED, &e);
    FAKECUDA_TRACE("cuMemHostUnregister(%p) -> %d", p, (int)r);
    return r;
}

FAKECUDA_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int flags)
{
    int dev = 0;
    const CUresult r = fakecuda_current_device(&dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pdptr || !p || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    FakecudaPtrInfo info;
    fakecuda_mem_lookup((uintptr_t)p, &info);
    if (info.kind != FAKECUDA_MEM_HOST_ALLOC && info.kind != FAKECUDA_MEM_REGISTERED)
        return CUDA_ERROR_INVALID_VALUE;
    /* Unified addressing: the device sees mapped host memory at the host address. */
    *pdptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuMemHostGetFlags(unsigned int *flags, void *p)
{
    int dev = 0;
    const CUresult r = fakecuda_current_device(&dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    FakecudaPtrInfo info;
    fakecuda_mem_lookup((uintptr_t)p, &info);
    if (info.kind != FAKECUDA_MEM_HOST_ALLOC)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = info.flags;
    return CUDA_SUCCESS;
}

/* ---- pointer attributes ---- */

/* Fills one attribute of a known pointer.  Returns CUDA_ERROR_INVALID_VALUE for attributes that do
 * not apply, CUDA_ERROR_NOT_SUPPORTED for ones the fake does not model. */
static CUresult pointer_attribute(void *data, CUpointer_attribute attr, uintptr_t p,
                                  const FakecudaPtrInfo *info)
{
    const bool known = info->kind != FAKECUDA_MEM_PAGEABLE && info->size > 0;
    const bool device = info->kind == FAKECUDA_MEM_DEVICE;
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        if (!known)
            return CUDA_ERROR_INVALID_VALUE;
        *(CUcontext *)data = &fakecuda_g.ctx[info->device];
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        if (!known)
            return CUDA_ERROR_INVALID_VALUE;
        *(CUmemorytype *)data = device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        if (!known)
            return CUDA_ERROR_INVALID_VALUE;
        *(CUdeviceptr *)data = (CUdeviceptr)p;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (!known || device)
            return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = (void *)p;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        if (!known)
            return CUDA_ERROR_INVALID_VALUE;
        *(int *)data = 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        if (!known)
            return CUDA_ERROR_INVALID_VALUE;
        *(int *)data = info->device;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        if (!known)
            return CUDA_ERROR_INVALID_VALUE;
        *(CUdeviceptr *)data = (CUdeviceptr)info->base;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        if (!known)
            return CUDA_ERROR_INVALID_VALUE;
        *(size_t *)data = info->size;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        if (!known)
            return CUDA_ERROR_INVALID_VALUE;
        *(int *)data = 1;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        if (!known)
            return CUDA_ERROR_INVALID_VALUE;
        *(int *)data = 0;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
}

FAKECUDA_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    FakecudaPtrInfo info;
    fakecuda_mem_lookup((uintptr_t)ptr, &info);
    const CUresult rc = pointer_attribute(data, attr, (uintptr_t)ptr, &info);
    return rc == CUDA_ERROR_NOT_SUPPORTED ? CUDA_ERROR_INVALID_VALUE : rc;
}

/* The plural form succeeds for unknown host memory and leaves neutral values (memory type 0, NULL
 * pointers, ordinal -2), as the driver does. */
FAKECUDA_EXPORT CUresult cuPointerGetAttributes(unsigned int count, CUpointer_attribute *attrs, void **data,
                                                CUdeviceptr ptr)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (count && (!attrs || !data))
        return CUDA_ERROR_INVALID_VALUE;
    FakecudaPtrInfo info;
    fakecuda_mem_lookup((uintptr_t)ptr, &info);
    const bool known = info.kind != FAKECUDA_MEM_PAGEABLE && info.size > 0;
    for (unsigned i = 0; i < count; i++) {
        if (!data[i])
            return CUDA_ERROR_INVALID_VALUE;
        if (known) {
            const CUresult rc = pointer_attribute(data[i], attrs[i], (uintptr_t)ptr, &info);
            if (rc == CUDA_ERROR_NOT_SUPPORTED)
                return CUDA_ERROR_INVALID_VALUE;
            if (rc == CUDA_SUCCESS)
                continue;
        }
        switch (attrs[i]) {
        case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data[i] = NULL; break;
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(CUmemorytype *)data[i] = (CUmemorytype)0; break;
        case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data[i] = 0; break;
        case CU_POINTER_ATTRIBUTE_HOST_POINTER: *(void **)data[i] = NULL; break;
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data[i] = -2; break;
        case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data[i] = 0; break;
        case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        case CU_POINTER_ATTRIBUTE_MAPPED:
        case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: *(int *)data[i] = 0; break;
        default: return CUDA_ERROR_INVALID_VALUE;
        }
    }
    return CUDA_SUCCESS;
}
