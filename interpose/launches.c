/* SPDX-License-Identifier: MIT
 * ibpshim: kernel launches whose arguments point into a registered region.  The kernel may write
 * the region through its unified address while it runs, and those writes land without a fault,
 * so the launch is noted as a device-to-host copy of the whole region would be: marked dirty now
 * and again once the stream has passed the kernel.  Only addresses held in the arguments
 * themselves are seen (a pointer the kernel loads from memory is not), and a kernel that only
 * reads the region costs it a recompression.  Parameter sizes come from the driver
 * (cuFuncGetParamInfo, CUDA 12.4 on), once per function; before that the arguments cannot be read,
 * which is said once. */
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "interpose/launches.h"
#include "interpose/real.h"
#include "interpose/router.h"
#include "policy/registry.h"

static int layouts_oom;
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(elt) (layouts_oom = 1)
#include <uthash.h>

/* Parameters past this many are not read (CUDA allows 32764 bytes of them, so at most that many
 * one-byte ones). */
#define IBP_ARGS_MAX_PARAMS 32768u
/* Addresses below this are never a registered region's (the first page and small integers). */
#define IBP_ARGS_MIN_ADDRESS ((uint64_t)1 << 16)

/* Whether launches need reading at all: the compressed path runs and some region is registered
 * (no lock, no lookup of the function otherwise). */
static int worth_reading(void)
{
    return ibp_router_compressing() && ibp_registry_count() > 0;
}

const IbpArgRegion *ibp_args_at(const IbpArgRegions *r, size_t i)
{
    return i < IBP_ARG_REGIONS_INLINE ? &r->inl[i] : &r->more[i - IBP_ARG_REGIONS_INLINE];
}

void ibp_args_release(IbpArgRegions *r)
{
    free(r->more);
    r->more = NULL;
    r->n = r->cap = 0;
}

static void add_region(IbpArgRegions *r, uintptr_t base, size_t size)
{
    for (size_t i = 0; i < r->n; i++)
        if (ibp_args_at(r, i)->base == base)
            return;
    if (r->n >= IBP_ARG_REGIONS_INLINE && r->n - IBP_ARG_REGIONS_INLINE == r->cap) {
        const size_t cap = r->cap ? 2 * r->cap : 8;
        IbpArgRegion *const more = realloc(r->more, cap * sizeof(*more));
        if (!more) {
            r->unread = 1;
            return;
        }
        r->more = more;
        r->cap = cap;
    }
    IbpArgRegion *const at =
        r->n < IBP_ARG_REGIONS_INLINE ? &r->inl[r->n] : &r->more[r->n - IBP_ARG_REGIONS_INLINE];
    *at = (IbpArgRegion){base, size};
    r->n++;
}

/* The words of a launch's arguments that could be addresses, looked up in the registry a batch at a
 * time (one read section each). */
#define IBP_ARGS_BATCH 128

typedef struct IbpArgWords {
    IbpArgRegions *r;
    size_t n;
    uint64_t word[IBP_ARGS_BATCH];
} IbpArgWords;

static void found(uintptr_t start, size_t size, void *arg)
{
    add_region(arg, start, size);
}

static void words_flush(IbpArgWords *w)
{
    ibp_registry_regions_at(w->word, w->n, found, w->r);
    w->n = 0;
}

/* Every 8-byte word of [p, p + n): pointers are 8-byte aligned within a parameter, and so within a
 * structure passed by value. */
static void read_words(IbpArgWords *w, const void *p, size_t n)
{
    for (size_t o = 0; o + sizeof(uint64_t) <= n; o += sizeof(uint64_t)) {
        uint64_t v;
        memcpy(&v, (const char *)p + o, sizeof(v));
        if (v < IBP_ARGS_MIN_ADDRESS)
            continue;
        if (w->n == IBP_ARGS_BATCH)
            words_flush(w);
        w->word[w->n++] = v;
    }
}

/* The driver's buffer form: CU_LAUNCH_PARAM_BUFFER_POINTER and _SIZE pairs up to
 * CU_LAUNCH_PARAM_END.  A list the driver would refuse is not read (the launch fails). */
static void read_extra(IbpArgWords *w, void *const *extra)
{
    const void *buf = NULL;
    const size_t *size = NULL;
    for (unsigned i = 0; i < 64 && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
            buf = extra[i + 1];
        else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
            size = extra[i + 1];
    }
    if (buf && size)
        read_words(w, buf, *size);
}

/* ---- Parameter sizes, kept per function ---- */

typedef CUresult (*CuParamInfoFn)(void *f, size_t index, size_t *offset, size_t *size);
typedef cudaError_t (*FuncBySymbolFn)(cudaFunction_t *f, const void *symbol);

static _Atomic(void *) cu_func_info, cu_kernel_info, func_by_symbol, cu_func_name, cu_kernel_name;
static atomic_int resolved_once;

/* Racing first callers resolve the same addresses; whichever stores land are right. */
static void resolve_into(_Atomic(void *) *cache, void *(*resolve)(const char *), const char *name)
{
    void *const fn = resolve(name);
    if (fn)
        atomic_store_explicit(cache, fn, memory_order_release);
}

static void resolve_all(void)
{
    if (atomic_load_explicit(&resolved_once, memory_order_acquire))
        return;
    resolve_into(&cu_func_info, ibp_real_resolve_driver, "cuFuncGetParamInfo");
    resolve_into(&cu_kernel_info, ibp_real_resolve_driver, "cuKernelGetParamInfo");
    resolve_into(&func_by_symbol, ibp_real_resolve, "cudaGetFuncBySymbol");
    resolve_into(&cu_func_name, ibp_real_resolve_driver, "cuFuncGetName");
    resolve_into(&cu_kernel_name, ibp_real_resolve_driver, "cuKernelGetName");
    atomic_store_explicit(&resolved_once, 1, memory_order_release);
}

/* One function's parameter sizes, in order. */
typedef struct IbpLayout {
    UT_hash_handle hh;
    const void *func; /* the key */
    void *handle;     /* what the driver was asked: a CUfunction, or a CUkernel when kernel */
    int kernel;
    int said; /* a launch of it pointed into a region, and the log said so */
    size_t n;
    uint32_t size[];
} IbpLayout;

static pthread_mutex_t layouts_mu = PTHREAD_MUTEX_INITIALIZER;
static IbpLayout *layouts; /* under layouts_mu */

/* The sizes of func's parameters, asked of the driver: a runtime host stub (an address in a loaded
 * object other than CUDA's) through its CUfunction (cudaGetFuncBySymbol), a cudaKernel_t as the CUkernel it
 * is, a driver handle as a CUfunction and, refused as one, as a CUkernel.  The driver answers an index past
 * the last parameter with an error, which ends the list (and touches no runtime state, where
 * cudaFuncGetParamInfo would leave its error as the application's last).  NULL when the driver
 * cannot say (before CUDA 12.4) or out of memory. */
static IbpLayout *layout_new(IbpArgsApi api, const void *func)
{
    resolve_all();
    const CuParamInfoFn finfo = (CuParamInfoFn)atomic_load_explicit(&cu_func_info, memory_order_acquire);
    const CuParamInfoFn kinfo = (CuParamInfoFn)atomic_load_explicit(&cu_kernel_info, memory_order_acquire);
    void *handle = (void *)(uintptr_t)func;
    CuParamInfoFn info = finfo;
    if (api == IBP_ARGS_RUNTIME) {
        Dl_info dl;
        /* A kernel handle is the driver's memory (its heap, or libcuda's or libcudart's data), a
         * host stub the code of the object that launches it. */
        if (dladdr(func, &dl) && dl.dli_fbase && !ibp_real_in_library(func, "libcuda.so") &&
            !ibp_real_in_library(func, "libcudart.so")) {
            const FuncBySymbolFn by_symbol =
                (FuncBySymbolFn)atomic_load_explicit(&func_by_symbol, memory_order_acquire);
            cudaFunction_t f = NULL;
            if (!by_symbol || by_symbol(&f, func) != cudaSuccess || !f)
                return NULL;
            handle = (void *)f;
        } else {
            info = kinfo;
        }
    }
    size_t n = 0, cap = 16, offset, size;
    IbpLayout *l = malloc(sizeof(*l) + cap * sizeof(l->size[0]));
    if (!l || !info) {
        free(l);
        return NULL;
    }
    for (;; n++) {
        CUresult res = info(handle, n, &offset, &size);
        if (res == CUDA_ERROR_INVALID_HANDLE && n == 0 && api == IBP_ARGS_DRIVER && kinfo && info != kinfo) {
            info = kinfo;
            res = info(handle, n, &offset, &size);
        }
        if (res != CUDA_SUCCESS || n >= IBP_ARGS_MAX_PARAMS)
            break;
        if (n == cap) {
            cap *= 2;
            IbpLayout *const bigger = realloc(l, sizeof(*l) + cap * sizeof(l->size[0]));
            if (!bigger) {
                free(l);
                return NULL;
            }
            l = bigger;
        }
        l->size[n] = size > UINT32_MAX ? UINT32_MAX : (uint32_t)size;
    }
    l->func = func;
    l->handle = handle;
    l->kernel = info == kinfo;
    l->said = 0;
    l->n = n;
    return l;
}

void ibp_args_forget_layouts(void)
{
    pthread_mutex_lock(&layouts_mu);
    IbpLayout *l, *tmp;
    HASH_ITER(hh, layouts, l, tmp)
    {
        HASH_DEL(layouts, l);
        free(l);
    }
    pthread_mutex_unlock(&layouts_mu);
}

static void read_params(IbpArgWords *w, const IbpLayout *l, void *const *params)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->size[i] >= sizeof(uint64_t) && params[i])
            read_words(w, params[i], l->size[i]);
}

/* The first launch of a kernel found pointing into a region is said at info level, with the
 * kernel's name (CUDA 12.3's cuFuncGetName or cuKernelGetName): its copies going raw is otherwise
 * only "stale" in the report. */
typedef CUresult (*CuNameFn)(const char **name, void *handle);

static void say_kernel(void *handle, int kernel, const IbpArgRegions *r)
{
    const CuNameFn get =
        (CuNameFn)atomic_load_explicit(kernel ? &cu_kernel_name : &cu_func_name, memory_order_acquire);
    const char *name = NULL;
    if (!get || get(&name, handle) != CUDA_SUCCESS)
        name = NULL;
    const IbpArgRegion *const g = ibp_args_at(r, 0);
    IBP_INFO("kernel %s takes an address inside the registered region at %p (%zu bytes): each of its "
             "launches counts as a device write of the region, whose copies go raw until it is "
             "compressed again",
             name ? name : "(unnamed)", (void *)g->base, g->size);
}

/* Reads params by l's sizes, looks the words up; whether this is the first of l's launches to point
 * into a region (which then sets l->said). */
static int read_by(IbpArgWords *w, IbpLayout *l, void *const *params)
{
    read_params(w, l, params);
    words_flush(w);
    const int first = w->r->n && !l->said;
    l->said |= first;
    return first;
}

void ibp_args_read(IbpArgRegions *r, IbpArgsApi api, const void *func, void *const *params,
                   void *const *extra)
{
    if (!worth_reading())
        return;
    IbpArgWords w; /* not zeroed: its 1 KiB of words are written before they are read */
    w.r = r;
    w.n = 0;
    if (extra) {
        read_extra(&w, extra);
        words_flush(&w);
        return;
    }
    if (!params || !func)
        return;
    IbpLayout *l = NULL;
    void *handle = NULL;
    int kernel = 0, say = 0;
    pthread_mutex_lock(&layouts_mu);
    HASH_FIND_PTR(layouts, &func, l);
    if (l && (say = read_by(&w, l, params))) {
        handle = l->handle;
        kernel = l->kernel;
    }
    pthread_mutex_unlock(&layouts_mu);
    if (!l) {
        /* Asked outside the lock (the driver may load the module first). */
        IbpLayout *const fresh = layout_new(api, func);
        if (!fresh) {
            r->unread = 1;
            return;
        }
        say = read_by(&w, fresh, params);
        handle = fresh->handle;
        kernel = fresh->kernel;
        pthread_mutex_lock(&layouts_mu);
        HASH_FIND_PTR(layouts, &func, l);
        layouts_oom = 0;
        if (!l)
            HASH_ADD_PTR(layouts, func, fresh);
        const int kept = !l && !layouts_oom;
        pthread_mutex_unlock(&layouts_mu);
        if (!kept)
            free(fresh);
    }
    if (say)
        say_kernel(handle, kernel, r);
}

/* ---- After a launch ---- */

static atomic_flag unread_said = ATOMIC_FLAG_INIT;

void ibp_args_noted(IbpStreamApi api, IbpArgRegions *r, cudaStream_t stream, int launched)
{
    if (r->unread && !atomic_flag_test_and_set(&unread_said))
        IBP_WARN(
            "a kernel's arguments could not be read (a driver before CUDA 12.4 has no parameter sizes, "
            "or out of memory): a kernel that writes a compressed region through its address is not seen");
    for (size_t i = 0; launched && i < r->n; i++) {
        const IbpArgRegion *const g = ibp_args_at(r, i);
        ibp_router_enqueued_write(api, (void *)g->base, g->size, cudaMemcpyDeviceToHost, stream);
    }
    ibp_args_release(r);
}

/* ---- The runtime's launches ---- */

cudaError_t ibp_route_launch_kernel(IbpStreamApi api, int cooperative, const void *func, dim3 grid,
                                    dim3 block, void **args, size_t shared, cudaStream_t stream)
{
    const IbpReal_cudaLaunchKernel real =
        cooperative ? (api == IBP_STREAM_API_PER_THREAD ? IBP_REAL(cudaLaunchCooperativeKernel_ptsz)
                                                        : IBP_REAL(cudaLaunchCooperativeKernel))
                    : (api == IBP_STREAM_API_PER_THREAD ? IBP_REAL(cudaLaunchKernel_ptsz)
                                                        : IBP_REAL(cudaLaunchKernel));
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    IbpArgRegions r = {0};
    ibp_args_read(&r, IBP_ARGS_RUNTIME, func, args, NULL);
    const cudaError_t ret = real(func, grid, block, args, shared, stream);
    ibp_args_noted(api, &r, stream, ret == cudaSuccess);
    return ret;
}

cudaError_t ibp_route_launch_kernel_ex(IbpStreamApi api, const cudaLaunchConfig_t *config, const void *func,
                                       void **args)
{
    const IbpReal_cudaLaunchKernelExC real =
        api == IBP_STREAM_API_PER_THREAD ? IBP_REAL(cudaLaunchKernelExC_ptsz) : IBP_REAL(cudaLaunchKernelExC);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    if (!config)
        return real(config, func, args);
    IbpArgRegions r = {0};
    ibp_args_read(&r, IBP_ARGS_RUNTIME, func, args, NULL);
    const cudaError_t ret = real(config, func, args);
    ibp_args_noted(api, &r, config->stream, ret == cudaSuccess);
    return ret;
}

/* Unloads: the parameter sizes kept are dropped before and after (a host stub of an unloaded
 * object, or a kernel handle, may name another kernel from then on). */
cudaError_t ibp_route_library_unload(cudaLibrary_t library)
{
    const IbpReal_cudaLibraryUnload real = IBP_REAL(cudaLibraryUnload);
    if (!real)
        return IBP_REAL_MISSING_ERROR;
    ibp_args_forget_layouts();
    const cudaError_t ret = real(library);
    ibp_args_forget_layouts();
    return ret;
}

void ibp_route_unregister_fat_binary(void **handle)
{
    const IbpReal___cudaUnregisterFatBinary real = IBP_REAL(__cudaUnregisterFatBinary);
    ibp_args_forget_layouts();
    if (real)
        real(handle);
    ibp_args_forget_layouts();
}
