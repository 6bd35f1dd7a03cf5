/* SPDX-License-Identifier: MIT
 * ibpshim: fake CUDA driver: modules resolve kernel names to CPU implementations; launches run them
 * on the stream's worker thread. */
#include "tests/fakecuda/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FATBIN_MAGIC 0xBA55ED50u /* fatbin header, little endian */
#define FATBIN_WRAPPER_MAGIC 0x466243B1u /* fatbin wrapper as emitted into host objects */
#define MAX_THREADS_PER_BLOCK 1024u
#define DEFAULT_DYNAMIC_SMEM (48u * 1024u)
#define OPTIN_DYNAMIC_SMEM (227u * 1024u)

struct CUfunc_st {
    const FakecudaKernel *kernel;
    CUmodule module;
    int max_dynamic_smem;
    struct CUfunc_st *next;
};

struct CUmod_st {
    CUfunction functions;
    struct CUmod_st *next;
};

static pthread_mutex_t modules_mu = PTHREAD_MUTEX_INITIALIZER;
static CUmodule all_modules;

static bool image_valid(const void *image)
{
    const unsigned char *const b = image;
    if (b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F')
        return true;
    /* PTX text, which the driver compiles (its kernels resolve by name here as any image's do). */
    const char *t = image;
    while (*t == ' ' || *t == '\t' || *t == '\n' || *t == '\r')
        t++;
    if (!strncmp(t, ".version", 8) || !strncmp(t, "//", 2))
        return true;
    uint32_t magic;
    memcpy(&magic, b, sizeof(magic));
    return magic == FATBIN_MAGIC || magic == FATBIN_WRAPPER_MAGIC;
}

FAKECUDA_EXPORT CUresult cuModuleLoadData(CUmodule *out, const void *image)
{
    int dev = 0;
    CUresult r = fakecuda_current_device(&dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || !image)
        return CUDA_ERROR_INVALID_VALUE;
    r = fakecuda_capture_check_unsafe();
    if (r != CUDA_SUCCESS)
        return r;
    if (!image_valid(image))
        return CUDA_ERROR_INVALID_IMAGE;
    const CUmodule m = calloc(1, sizeof(*m));
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&modules_mu);
    m->next = all_modules;
    all_modules = m;
    pthread_mutex_unlock(&modules_mu);
    *out = m;
    FAKECUDA_TRACE("cuModuleLoadData -> %p", (void *)m);
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuModuleLoadFatBinary(CUmodule *out, const void *image)
{
    return cuModuleLoadData(out, image);
}

FAKECUDA_EXPORT CUresult cuModuleUnload(CUmodule m)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    bool found = false;
    pthread_mutex_lock(&modules_mu);
    for (CUmodule *p = &all_modules; *p; p = &(*p)->next) {
        if (*p == m) {
            *p = m->next;
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&modules_mu);
    if (!found)
        return CUDA_ERROR_INVALID_HANDLE;
    /* Launches already queued hold their kernel by table pointer, so the module can go now. */
    while (m->functions) {
        const CUfunction f = m->functions;
        m->functions = f->next;
        free(f);
    }
    free(m);
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuModuleGetFunction(CUfunction *out, CUmodule m, const char *name)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || !name)
        return CUDA_ERROR_INVALID_VALUE;
    const FakecudaKernel *kernel = NULL;
    for (size_t i = 0; i < fakecuda_kernel_count; i++)
        if (!strcmp(fakecuda_kernels[i].name, name))
            kernel = &fakecuda_kernels[i];
    CUresult rc = CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&modules_mu);
    for (CUmodule p = all_modules; p; p = p->next) {
        if (p != m)
            continue;
        rc = CUDA_ERROR_NOT_FOUND;
        if (!kernel)
            break;
        CUfunction f = NULL;
        for (CUfunction q = m->functions; q; q = q->next)
            if (q->kernel == kernel)
                f = q;
        if (!f) {
            f = calloc(1, sizeof(*f));
            if (!f) {
                rc = CUDA_ERROR_OUT_OF_MEMORY;
                break;
            }
            f->kernel = kernel;
            f->module = m;
            f->max_dynamic_smem = (int)DEFAULT_DYNAMIC_SMEM;
            f->next = m->functions;
            m->functions = f;
        }
        *out = f;
        rc = CUDA_SUCCESS;
        break;
    }
    pthread_mutex_unlock(&modules_mu);
    FAKECUDA_TRACE("cuModuleGetFunction(%s) -> %d", name, (int)rc);
    return rc;
}

/* Copies the function's settings out under the lock; false if f is not a live function. */
static bool function_get(CUfunction f, const FakecudaKernel **kernel, int *max_dynamic_smem)
{
    bool found = false;
    pthread_mutex_lock(&modules_mu);
    for (CUmodule m = all_modules; m && !found; m = m->next) {
        for (CUfunction q = m->functions; q; q = q->next) {
            if (q == f) {
                *kernel = q->kernel;
                *max_dynamic_smem = q->max_dynamic_smem;
                found = true;
                break;
            }
        }
    }
    pthread_mutex_unlock(&modules_mu);
    return found;
}

FAKECUDA_EXPORT CUresult cuFuncGetAttribute(int *value, CUfunction_attribute attr, CUfunction f)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    const FakecudaKernel *kernel = NULL;
    int max_dyn = 0;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    if (!function_get(f, &kernel, &max_dyn))
        return CUDA_ERROR_INVALID_HANDLE;
    switch (attr) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = (int)MAX_THREADS_PER_BLOCK; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *value = 0; break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *value = 0; break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *value = 0; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *value = 32; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *value = 90; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *value = 90; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *value = max_dyn; break;
    default:
        if ((int)attr < 0 || attr >= CU_FUNC_ATTRIBUTE_MAX)
            return CUDA_ERROR_INVALID_VALUE;
        *value = 0;
        break;
    }
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute attr, int value)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    FAKECUDA_RETURN_IF_INJECTED("cuFuncSetAttribute");
    if (attr == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
        if (value < 0 || (unsigned)value > OPTIN_DYNAMIC_SMEM)
            return CUDA_ERROR_INVALID_VALUE;
    } else if (attr != CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUresult rc = CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&modules_mu);
    for (CUmodule m = all_modules; m; m = m->next) {
        for (CUfunction q = m->functions; q; q = q->next) {
            if (q == f) {
                if (attr == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
                    q->max_dynamic_smem = value;
                rc = CUDA_SUCCESS;
            }
        }
    }
    pthread_mutex_unlock(&modules_mu);
    return rc;
}

FAKECUDA_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, CUfunction f, int block_size,
                                                                     size_t dynamic_smem)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    FAKECUDA_RETURN_IF_INJECTED("cuOccupancyMaxActiveBlocksPerMultiprocessor");
    const FakecudaKernel *kernel = NULL;
    int max_dyn = 0;
    if (!blocks || block_size <= 0 || (unsigned)block_size > MAX_THREADS_PER_BLOCK)
        return CUDA_ERROR_INVALID_VALUE;
    if (!function_get(f, &kernel, &max_dyn))
        return CUDA_ERROR_INVALID_HANDLE;
    const int warps = (block_size + 31) / 32;
    int n = 64 / warps; /* 2048 threads per SM */
    if (n > 32)
        n = 32;
    const size_t per_block = dynamic_smem + 1024; /* the driver reserves 1 KiB per block */
    const int by_smem = (int)((228u * 1024u) / per_block);
    if (by_smem < n)
        n = by_smem;
    *blocks = n;
    return CUDA_SUCCESS;
}

/* The last kernel launched (of any thread), its grid's x dimension and its dynamic shared memory,
 * for fakecuda_last_launch; and each kernel's last grid, for fakecuda_kernel_grid (kernel names
 * are the table's, compared by address). */
static pthread_mutex_t last_mu = PTHREAD_MUTEX_INITIALIZER;
static const char *last_name;
static unsigned last_grid_x, last_shared;
#define GRIDS_KEPT 64
static struct {
    const char *name;
    unsigned grid_x;
} grids[GRIDS_KEPT];

FAKECUDA_EXPORT int fakecuda_kernel_grid(const char *name, unsigned *grid_x)
{
    int found = 0;
    pthread_mutex_lock(&last_mu);
    for (int i = 0; i < GRIDS_KEPT && grids[i].name && !found; i++)
        if (!strcmp(grids[i].name, name)) {
            *grid_x = grids[i].grid_x;
            found = 1;
        }
    pthread_mutex_unlock(&last_mu);
    return found;
}

FAKECUDA_EXPORT int fakecuda_last_launch(char *name, size_t len, unsigned *grid_x, unsigned *shared_bytes)
{
    pthread_mutex_lock(&last_mu);
    const int any = last_name != NULL;
    if (name && len)
        snprintf(name, len, "%s", any ? last_name : "");
    if (grid_x)
        *grid_x = any ? last_grid_x : 0;
    if (shared_bytes)
        *shared_bytes = any ? last_shared : 0;
    pthread_mutex_unlock(&last_mu);
    return any;
}

/* Parameter i's offset in the device-side layout: each at its natural alignment, 8 at most. */
static size_t param_offset(const FakecudaKernel *kernel, unsigned i)
{
    size_t off = 0;
    for (unsigned j = 0;; j++) {
        const size_t size = kernel->param_sizes[j];
        const size_t align = size >= 8 ? 8 : size >= 4 ? 4 : size >= 2 ? 2 : 1;
        off = (off + align - 1) & ~(align - 1);
        if (j == i)
            return off;
        off += size;
    }
}

static size_t params_bytes(const FakecudaKernel *kernel)
{
    if (!kernel->param_count)
        return 0;
    const unsigned last = kernel->param_count - 1;
    return param_offset(kernel, last) + kernel->param_sizes[last];
}

FAKECUDA_EXPORT CUresult cuFuncGetParamInfo(CUfunction f, size_t index, size_t *offset, size_t *size)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    const FakecudaKernel *kernel = NULL;
    int max_dyn = 0;
    if (!function_get(f, &kernel, &max_dyn))
        return CUDA_ERROR_INVALID_HANDLE;
    if (!offset || !size || index >= kernel->param_count)
        return CUDA_ERROR_INVALID_VALUE;
    *offset = param_offset(kernel, (unsigned)index);
    *size = kernel->param_sizes[index];
    return CUDA_SUCCESS;
}

/* The kernel's name, as its image names it. */
FAKECUDA_EXPORT CUresult cuFuncGetName(const char **name, CUfunction f)
{
    const CUresult r = fakecuda_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    const FakecudaKernel *kernel = NULL;
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    if (!fakecuda_function_kernel(f, &kernel))
        return CUDA_ERROR_INVALID_HANDLE;
    *name = kernel->name;
    return CUDA_SUCCESS;
}

FAKECUDA_EXPORT CUresult cuKernelGetName(const char **name, CUkernel kernel)
{
    return cuFuncGetName(name, (CUfunction)kernel);
}

/* Libraries are modules here, and their kernels functions (the driver takes a CUkernel wherever it
 * takes a CUfunction). */
FAKECUDA_EXPORT CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jit_options,
                                           void **jit_values, unsigned int njit, CUlibraryOption *options,
                                           void **values, unsigned int noptions)
{
    (void)jit_options;
    (void)jit_values;
    (void)options;
    (void)values;
    if (!library || (njit && (!jit_options || !jit_values)) || (noptions && (!options || !values)))
        return CUDA_ERROR_INVALID_VALUE;
    CUmodule m = NULL;
    const CUresult r = cuModuleLoadData(&m, code);
    if (r == CUDA_SUCCESS)
        *library = (CUlibrary)m;
    return r;
}

FAKECUDA_EXPORT CUresult cuLibraryUnload(CUlibrary library)
{
    return cuModuleUnload((CUmodule)library);
}

FAKECUDA_EXPORT CUresult cuLibraryGetKernel(CUkernel *kernel, CUlibrary library, const char *name)
{
    if (!kernel)
        return CUDA_ERROR_INVALID_VALUE;
    CUfunction f = NULL;
    const CUresult r = cuModuleGetFunction(&f, (CUmodule)library, name);
    if (r == CUDA_SUCCESS)
        *kernel = (CUkernel)f;
    return r;
}

FAKECUDA_EXPORT CUresult cuKernelGetParamInfo(CUkernel kernel, size_t index, size_t *offset, size_t *size)
{
    return cuFuncGetParamInfo((CUfunction)kernel, index, offset, size);
}

/* The driver's buffer form of the arguments: one pointer to each parameter inside it, or NULL with
 * *bad set when the list is malformed or the buffer is not the kernel's parameter size. */
static void **params_from_extra(const FakecudaKernel *kernel, void **extra, void **store, bool *bad)
{
    const char *buf = NULL;
    const size_t *size = NULL;
    unsigned i = 0;
    for (; i < 64 && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
            buf = extra[i + 1];
        else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
            size = extra[i + 1];
        else
            break;
    }
    *bad = i >= 64 || extra[i] != CU_LAUNCH_PARAM_END || !buf || !size || *size != params_bytes(kernel);
    if (*bad)
        return NULL;
    for (unsigned j = 0; j < kernel->param_count; j++)
        store[j] = (void *)(buf + param_offset(kernel, j));
    return store;
}

CUresult fakecuda_kernel_args(const FakecudaKernel *kernel, void *const *params, FakecudaOp *op)
{
    size_t total = 0;
    for (unsigned i = 0; i < kernel->param_count; i++)
        total += (kernel->param_sizes[i] + 7) & ~(size_t)7;
    op->u.kernel.blob = malloc(total ? total : 1);
    op->u.kernel.params = calloc(kernel->param_count ? kernel->param_count : 1, sizeof(void *));
    if (!op->u.kernel.blob || !op->u.kernel.params)
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t off = 0;
    for (unsigned i = 0; i < kernel->param_count; i++) {
        if (!params[i])
            return CUDA_ERROR_INVALID_VALUE;
        op->u.kernel.params[i] = (char *)op->u.kernel.blob + off;
        memcpy(op->u.kernel.params[i], params[i], kernel->param_sizes[i]);
        off += (kernel->param_sizes[i] + 7) & ~(size_t)7;
    }
    return CUDA_SUCCESS;
}

bool fakecuda_function_kernel(CUfunction f, const FakecudaKernel **kernel)
{
    int max_dyn = 0;
    return function_get(f, kernel, &max_dyn);
}

static CUresult launch(CUfunction f, const unsigned grid[3], const unsigned block[3], unsigned smem,
                       CUstream handle, void **params, void **extra, bool per_thread_default)
{
    FAKECUDA_RETURN_IF_INJECTED("cuLaunchKernel");
    CUstream s = NULL;
    CUresult r = fakecuda_stream_get(handle, per_thread_default, &s);
    if (r != CUDA_SUCCESS)
        return r;
    const FakecudaKernel *kernel = NULL;
    int max_dyn = 0;
    FakecudaOp *op = NULL;
    if (!function_get(f, &kernel, &max_dyn)) {
        r = CUDA_ERROR_INVALID_HANDLE;
        goto done;
    }
    void *from_extra[FAKECUDA_KERNEL_MAX_PARAMS];
    bool bad_extra = false;
    if (extra && params)
        bad_extra = true;
    else if (extra)
        params = params_from_extra(kernel, extra, from_extra, &bad_extra);
    const uint64_t threads = (uint64_t)block[0] * block[1] * block[2];
    if (bad_extra || !grid[0] || !grid[1] || !grid[2] || !block[0] || !block[1] || !block[2] ||
        block[2] > 64 || grid[1] > 65535 || grid[2] > 65535 || (kernel->param_count && !params)) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    if (threads > MAX_THREADS_PER_BLOCK || smem > (unsigned)max_dyn) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto done;
    }
    op = fakecuda_op_new(FAKECUDA_OP_KERNEL);
    if (!op) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    op->u.kernel.kernel = kernel;
    op->u.kernel.func = f;
    memcpy(op->u.kernel.grid, grid, sizeof(op->u.kernel.grid));
    memcpy(op->u.kernel.block, block, sizeof(op->u.kernel.block));
    op->u.kernel.shared_bytes = smem;
    /* Arguments are copied at launch, as the driver does: params may point at the caller's stack. */
    r = fakecuda_kernel_args(kernel, params, op);
    if (r != CUDA_SUCCESS)
        goto done;
    FAKECUDA_TRACE("cuLaunchKernel(%s, grid=%ux%ux%u, block=%ux%ux%u, smem=%u, stream=%p)", kernel->name,
                   grid[0], grid[1], grid[2], block[0], block[1], block[2], smem, (void *)handle);
    r = fakecuda_stream_submit(s, op);
    op = NULL;
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&last_mu);
        last_name = kernel->name;
        last_grid_x = grid[0];
        last_shared = smem;
        for (int i = 0; i < GRIDS_KEPT; i++)
            if (!grids[i].name || grids[i].name == kernel->name) {
                grids[i].name = kernel->name;
                grids[i].grid_x = grid[0];
                break;
            }
        pthread_mutex_unlock(&last_mu);
    }
done:
    fakecuda_op_free(op);
    fakecuda_stream_unref(s);
    return r;
}

FAKECUDA_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,
                                        CUstream stream, void **params, void **extra)
{
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    return launch(f, grid, block, smem, stream, params, extra, false);
}

FAKECUDA_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                             unsigned int bx, unsigned int by, unsigned int bz,
                                             unsigned int smem, CUstream stream, void **params, void **extra)
{
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    return launch(f, grid, block, smem, stream, params, extra, true);
}

static CUresult launch_ex(const CUlaunchConfig *config, CUfunction f, void **params, void **extra,
                          bool per_thread_default)
{
    if (!config || (config->numAttrs && !config->attrs))
        return CUDA_ERROR_INVALID_VALUE;
    const unsigned grid[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
    const unsigned block[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
    return launch(f, grid, block, config->sharedMemBytes, config->hStream, params, extra, per_thread_default);
}

FAKECUDA_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params,
                                          void **extra)
{
    return launch_ex(config, f, params, extra, false);
}

FAKECUDA_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params,
                                               void **extra)
{
    return launch_ex(config, f, params, extra, true);
}

CUresult fakecuda_kernel_run(const FakecudaOp *op)
{
    FakecudaGrid g;
    memcpy(g.grid, op->u.kernel.grid, sizeof(g.grid));
    memcpy(g.block, op->u.kernel.block, sizeof(g.block));
    g.shared_bytes = op->u.kernel.shared_bytes;
    return op->u.kernel.kernel->fn(&g, op->u.kernel.params);
}
