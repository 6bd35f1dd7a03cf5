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

typedef struct IbpCudartSearch {
    const char *symbol;
    void *found;
} IbpCudartSearch;

static int basename_is_cudart(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    return strncmp(base, "libcudart.so", strlen("libcudart.so")) == 0;
}

/* RTLD_NEXT only sees the global scope; PyTorch-style loaders map libcudart
 * RTLD_LOCAL.  Find it among the loaded objects and ask it directly;
 * RTLD_NOLOAD guarantees we never load a runtime the application did not. */
static int search_loaded_cudart(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    IbpCudartSearch *search = data;
    if (!info->dlpi_name || !info->dlpi_name[0] || !basename_is_cudart(info->dlpi_name))
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

void *ibp_real_resolve(const char *name)
{
    void *fn = dlsym(RTLD_NEXT, name);
    if (fn && !is_ours(fn))
        return fn;
    IbpCudartSearch search = {.symbol = name, .found = NULL};
    dl_iterate_phdr(search_loaded_cudart, &search);
    return search.found;
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
