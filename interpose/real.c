/* SPDX-License-Identifier: MIT
 * ibpshim: resolution of the real CUDA runtime entry points behind the hooks. */
#include "interpose/real.h"

#include <dlfcn.h>
#include <link.h>
#include <stdatomic.h>
#include <string.h>

#include "common/log.h"

static const char *const real_names[IBP_REAL_COUNT] = {
#define IBP_REAL_NAME(name, ret, params) #name,
    IBP_REAL_CUDART_LIST(IBP_REAL_NAME)
#undef IBP_REAL_NAME
};

static _Atomic(void *) real_cache[IBP_REAL_COUNT];
static atomic_flag real_missing_logged[IBP_REAL_COUNT];

/* Any address inside libibpshim.so identifies our own object. */
static int is_ours(const void *fn)
{
    Dl_info self, other;
    if (!dladdr((const void *)&ibp_real_resolve, &self) || !dladdr(fn, &other))
        return 0;
    return self.dli_fbase == other.dli_fbase;
}

typedef struct IbpLibSearch {
    const char *lib; /* the library's file name up to its version, "libcudart.so" */
    const char *symbol;
    void *found;
} IbpLibSearch;

static int basename_is(const char *path, const char *lib)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    return strncmp(base, lib, strlen(lib)) == 0;
}

/* RTLD_NEXT only sees the global scope; PyTorch-style loaders map libcudart
 * RTLD_LOCAL, and libcudart maps libcuda so.  Find the library among the loaded objects and ask
 * it directly; RTLD_NOLOAD guarantees we never load one the application did not. */
static int search_loaded(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    IbpLibSearch *search = data;
    if (!info->dlpi_name || !info->dlpi_name[0] || !basename_is(info->dlpi_name, search->lib))
        return 0;
    void *handle = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
    if (!handle)
        return 0;
    void *fn = dlsym(handle, search->symbol);
    dlclose(handle);
    if (!fn || is_ours(fn))
        return 0;
    search->found = fn;
    return 1;
}

static void *resolve_in(const char *lib, const char *name)
{
    void *fn = dlsym(RTLD_NEXT, name);
    if (fn && !is_ours(fn))
        return fn;
    IbpLibSearch search = {.lib = lib, .symbol = name, .found = NULL};
    dl_iterate_phdr(search_loaded, &search);
    return search.found;
}

int ibp_real_in_library(const void *addr, const char *lib)
{
    Dl_info info;
    return addr && dladdr(addr, &info) && info.dli_fname && basename_is(info.dli_fname, lib);
}

void *ibp_real_resolve(const char *name)
{
    return resolve_in("libcudart.so", name);
}

void *ibp_real_resolve_driver(const char *name)
{
    return resolve_in("libcuda.so", name);
}

void *ibp_real_get(IbpRealId id)
{
    if ((unsigned)id >= IBP_REAL_COUNT)
        return NULL;
    void *fn = atomic_load_explicit(&real_cache[id], memory_order_acquire);
    if (fn)
        return fn;
    fn = ibp_real_resolve(real_names[id]);
    if (!fn) {
        if (!atomic_flag_test_and_set(&real_missing_logged[id]))
            IBP_ERROR("%s: no CUDA runtime (libcudart) defines it in this process; returning "
                      "cudaErrorSharedObjectSymbolNotFound", real_names[id]);
        return NULL;
    }
    /* Racing first callers resolve the same address; whichever store lands is right. */
    atomic_store_explicit(&real_cache[id], fn, memory_order_release);
    return fn;
}
