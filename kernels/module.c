/* SPDX-License-Identifier: MIT
 * ibpshim: the shim's kernels per CUDA context, loaded once from the embedded images. */
#include "kernels/module.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "kernels/decode_abi.h"
#include "kernels/driver.h"
#include "kernels/fatbins.h"

/* One entry per context the process ever copies on; 64 covers 8 GPUs with
 * several green/created contexts each.  Entries are never removed, so readers
 * need no lock: an entry is complete before the count that covers it is published. */
#define IBP_MODULE_MAX 64

static IbpModule modules[IBP_MODULE_MAX];
static _Atomic int module_count;
static pthread_mutex_t module_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const kernel_names[IBP_KERNEL_COUNT] = {
#define IBP_KERNEL_NAME(id, name, src) name,
    IBP_KERNEL_LIST(IBP_KERNEL_NAME)
#undef IBP_KERNEL_NAME
};

/* The image each kernel is looked up in (asking the others would return errors that tools such
 * as compute-sanitizer report against the host program). */
static const char *const kernel_sources[IBP_KERNEL_COUNT] = {
#define IBP_KERNEL_SOURCE(id, name, src) src,
    IBP_KERNEL_LIST(IBP_KERNEL_SOURCE)
#undef IBP_KERNEL_SOURCE
};

int ibp_kernels_built(void)
{
    return ibp_fatbin_count > 0;
}

static const IbpModule *module_find(CUcontext ctx)
{
    const int n = atomic_load_explicit(&module_count, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (modules[i].ctx == ctx)
            return &modules[i];
    return NULL;
}

/* Dynamic shared memory of ibp_k_decode_segp: a segment of words for each warp, as the other
 * segmented kernels' buffer. */
static unsigned segp_shared_bytes(unsigned word_size)
{
    return IBP_DECODE_SEGP_BYTES(word_size);
}

/* The predictor kernel fn's dynamic shared memory here: the most, for words from `widest` bytes
 * down to 2, of at most `cap` bytes that the device lets it take (set on fn); 0 for none. */
static unsigned segp_dynamic(const IbpDriver *drv, CUfunction fn, unsigned widest, unsigned cap)
{
    for (unsigned w = widest; w >= 2; w /= 2)
        if (segp_shared_bytes(w) <= cap &&
            drv->cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    (int)segp_shared_bytes(w)) == CUDA_SUCCESS)
            return segp_shared_bytes(w);
    return 0;
}

/* The segmented kernels of plans without predictors, [one column][8-byte words][offsets carried in
 * the launch]: their CTAs a multiprocessor (launch bounds) and the word sizes (each size's bit)
 * they can store their segments through shared memory for. */
typedef struct IbpSegKernel {
    IbpKernelId k;
    unsigned per_sm, via_words;
} IbpSegKernel;

#define SEG_KERNEL(K, PER_SM, VIA)                                                                           \
    {                                                                                                        \
        {K, PER_SM, VIA},                                                                                    \
        {                                                                                                    \
            K##_INL, PER_SM, VIA                                                                             \
        }                                                                                                    \
    }
static const IbpSegKernel seg_kernels[2][2][2] = {
    {SEG_KERNEL(IBP_KERNEL_DECODE_SEG, IBP_DECODE_SEG_CTAS_PER_SM, IBP_DECODE_SEG_VIA_WORDS),
     SEG_KERNEL(IBP_KERNEL_DECODE_SEGW8, IBP_DECODE_SEGW8_CTAS_PER_SM, IBP_DECODE_SEGW8_VIA_WORDS)},
    {SEG_KERNEL(IBP_KERNEL_DECODE_SEG1, IBP_DECODE_SEG1_CTAS_PER_SM, IBP_DECODE_SEG1_VIA_WORDS),
     SEG_KERNEL(IBP_KERNEL_DECODE_SEG1W8, IBP_DECODE_SEG1W8_CTAS_PER_SM, IBP_DECODE_SEG1W8_VIA_WORDS)}};
/* Several columns of 2- and 4-byte words and more than IBP_DECODE_PARTS_ENTRIES_MAX table entries:
 * the kernel whose table is sliced, [offsets carried in the launch]. */
static const IbpSegKernel segs_kernels[2] =
    SEG_KERNEL(IBP_KERNEL_DECODE_SEGS, IBP_DECODE_SEG_CTAS_PER_SM, IBP_DECODE_SEG_VIA_WORDS);
#undef SEG_KERNEL

static int module_load(const IbpDriver *drv, CUcontext ctx, IbpModule *mod)
{
    CUresult res;
    CUmodule images[8] = {0};
    size_t loaded = 0;
    if (ibp_fatbin_count > sizeof(images) / sizeof(images[0]))
        return -ENOSPC;
    mod->ctx = ctx;
    IBP_CU_CHECK_GOTO(res, drv->cuCtxGetDevice(&mod->device), fail);
    IBP_CU_CHECK_GOTO(res, drv->cuDeviceGetAttribute(&mod->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                                     mod->device), fail);
    IBP_CU_CHECK_GOTO(res, drv->cuDeviceGetAttribute(&mod->max_threads_per_block,
                                                     CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, mod->device),
                      fail);
    for (; loaded < ibp_fatbin_count; loaded++)
        IBP_CU_CHECK_GOTO(res, drv->cuModuleLoadData(&images[loaded], ibp_fatbins[loaded].data), fail);
    for (int k = 0; k < IBP_KERNEL_COUNT; k++) {
        mod->fn[k] = NULL;
        for (size_t i = 0; i < loaded && !mod->fn[k]; i++)
            if (!strcmp(ibp_fatbins[i].name, kernel_sources[k]) &&
                drv->cuModuleGetFunction(&mod->fn[k], images[i], kernel_names[k]) != CUDA_SUCCESS)
                mod->fn[k] = NULL;
        if (!mod->fn[k]) {
            IBP_WARN("no embedded image defines kernel %s; compressed path off for this context",
                     kernel_names[k]);
            res = CUDA_ERROR_NOT_FOUND;
            goto fail;
        }
    }
    /* The predictor decode keeps its segments' words in dynamic shared memory beyond the 48 KiB a
     * kernel gets without asking: for 8-byte words where the device allows, else for narrower
     * ones; plans it cannot take decode a CTA per block. */
    mod->segp_max_dynamic = segp_dynamic(drv, mod->fn[IBP_KERNEL_DECODE_SEGP], 8, UINT_MAX);
    /* Its sliced-table twin decodes 2- and 4-byte words. */
    mod->segps_max_dynamic = segp_dynamic(drv, mod->fn[IBP_KERNEL_DECODE_SEGPS], 4, mod->segp_max_dynamic);
    if (mod->segp_max_dynamic < segp_shared_bytes(8))
        IBP_DEBUG(
            "device %d allows the predictor decode %u bytes of dynamic shared memory: wider plans decode "
            "a CTA per block",
            (int)mod->device, mod->segp_max_dynamic);
    /* The segmented kernels without predictors store their segments through shared memory, for a
     * word size, where the device holds as many CTAs a multiprocessor with it as their launch
     * bounds ask (sm_90 has 228 KiB a multiprocessor: one column of 4-byte words at four CTAs does
     * not fit; 8.x devices have 100-164 KiB); elsewhere they store from the lanes' runs. */
    for (unsigned i = 0; i < 10; i++) {
        const IbpSegKernel *sk = i < 8 ? &seg_kernels[i / 4][i / 2 % 2][i % 2] : &segs_kernels[i - 8];
        const unsigned widest = sk->via_words & 8u ? 8u : sk->via_words & 4u ? 4u : 2u;
        mod->via_words[sk->k] = 0;
        if (!sk->via_words ||
            drv->cuFuncSetAttribute(mod->fn[sk->k], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    (int)IBP_DECODE_VIA_BYTES(widest)) != CUDA_SUCCESS)
            continue;
        for (unsigned w = 2; w <= widest; w *= 2) {
            int ctas = 0;
            if ((sk->via_words & w) &&
                drv->cuOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, mod->fn[sk->k], IBP_DECODE_THREADS,
                                                                 IBP_DECODE_VIA_BYTES(w)) == CUDA_SUCCESS &&
                ctas >= (int)sk->per_sm)
                mod->via_words[sk->k] |= (unsigned char)w;
        }
    }
    IBP_DEBUG("kernels loaded for context %p (device %d, %d SMs)", (void *)ctx, (int)mod->device,
              mod->sm_count);
    return 0;
fail:
    while (loaded > 0)
        drv->cuModuleUnload(images[--loaded]);
    return res == CUDA_ERROR_NOT_FOUND ? -ENOENT : -EIO;
}

int ibp_module_get(CUcontext ctx, const IbpModule **out)
{
    const IbpModule *found = module_find(ctx);
    if (found) {
        *out = found;
        return 0;
    }
    if (!ibp_kernels_built())
        return -ENOTSUP;
    const IbpDriver *drv = ibp_driver_get();
    if (!drv)
        return -ENODEV;
    int err = 0;
    pthread_mutex_lock(&module_lock);
    found = module_find(ctx);
    if (!found) {
        const int n = atomic_load_explicit(&module_count, memory_order_relaxed);
        if (n == IBP_MODULE_MAX) {
            err = -ENOSPC;
        } else {
            const IbpCaptureMode mode = ibp_driver_capture_relax(drv);
            err = module_load(drv, ctx, &modules[n]);
            ibp_driver_capture_restore(drv, mode);
            if (!err) {
                found = &modules[n];
                atomic_store_explicit(&module_count, n + 1, memory_order_release);
            }
        }
    }
    pthread_mutex_unlock(&module_lock);
    if (found)
        *out = found;
    return err;
}

int ibp_kernel_launch(const IbpModule *mod, IbpKernelId kernel, unsigned grid, unsigned block,
                      unsigned shared_bytes, CUstream stream, void **params)
{
    const IbpDriver *drv = ibp_driver_get();
    if (!drv || (unsigned)kernel >= IBP_KERNEL_COUNT)
        return -EINVAL;
    CUresult res;
    IBP_CU_CHECK_GOTO(res, drv->cuLaunchKernel(mod->fn[kernel], grid, 1, 1, block, 1, 1, shared_bytes, stream,
                                               params, NULL), fail);
    return 0;
fail:
    return -EIO;
}

static unsigned grid_cap(uint64_t want, unsigned max_ctas)
{
    const uint64_t cap = max_ctas && max_ctas < 65535u ? max_ctas : 65535u;
    return (unsigned)(want < cap ? (want ? want : 1) : cap);
}

/* CTAs of the device at once for a kernel of `per_sm` CTAs a multiprocessor, within max_ctas. */
static unsigned resident_cap(const IbpModule *mod, unsigned per_sm, unsigned max_ctas)
{
    const unsigned resident = mod->sm_count > 0 ? (unsigned)mod->sm_count * per_sm : 0u;
    return resident && (!max_ctas || resident < max_ctas) ? resident : max_ctas;
}

size_t ibp_decode_scratch_bytes(const IbpModule *mod)
{
    /* A record per CTA of the largest grid of a kernel of several columns. */
    unsigned per_sm = IBP_DECODE_SEGP_CTAS_PER_SM;
    per_sm = IBP_DECODE_SEG_CTAS_PER_SM > per_sm ? IBP_DECODE_SEG_CTAS_PER_SM : per_sm;
    per_sm = IBP_DECODE_SEGW8_CTAS_PER_SM > per_sm ? IBP_DECODE_SEGW8_CTAS_PER_SM : per_sm;
    return (size_t)ibp_decode_scratch_size(resident_cap(mod, per_sm, 0));
}

/* The run's top-coded blocks (and with IBP_DECODE_TOP_ONLY its raw ones): a CTA per block, no more
 * than the device holds at once. */
static int launch_top(const IbpModule *mod, const IbpDecodeArgs *a, unsigned flags, unsigned max_ctas,
                      CUstream stream)
{
    IbpDecodeArgs args = *a;
    void *params[] = {&args};
    args.flags = flags & IBP_DECODE_TOP_ONLY ? IBP_DECODE_ARG_TOP_RAW : 0u;
    const unsigned resident = resident_cap(mod, IBP_DECODE_TOP_CTAS_PER_SM, max_ctas);
    return ibp_kernel_launch(mod, IBP_KERNEL_DECODE_TOP, grid_cap(args.nblocks, resident), IBP_DECODE_THREADS,
                             0, stream, params);
}

/* The run's packed and raw blocks (ibp_decode_launch, its arguments checked). */
static int launch_packed(const IbpModule *mod, const IbpDecodeArgs *a, unsigned word_size, unsigned columns,
                         unsigned nsets, unsigned flags, unsigned max_ctas, CUstream stream)
{
    IbpDecodeArgs args = *a;
    void *params[] = {&args};
    if (!(flags & IBP_DECODE_SELFLAGS))
        args.selx = 0;
    const int pred = (flags & IBP_DECODE_PRED) != 0;
    const int scratch = args.scratch && !(args.scratch & 7u) && mod->sm_count > 0;
    const int segp = pred && scratch && columns <= IBP_DECODE_PRED_MAX_COLUMNS &&
                     segp_shared_bytes(word_size) <= mod->segp_max_dynamic;
    args.flags = 0;
    if (flags & IBP_DECODE_SELFLAGS) {
        /* A CTA per share of a block rewrites flagged selectors, no more than the device holds at once. */
        const unsigned resident = resident_cap(mod, IBP_DECODE_UNFLAG_CTAS_PER_SM, max_ctas);
        args.unflag_words = ibp_decode_unflag_words(word_size, args.block_size, args.nblocks, resident);
        const uint64_t ctas =
            (uint64_t)args.nblocks * ibp_decode_unflag_shares(word_size, args.block_size, args.unflag_words);
        if (ibp_kernel_launch(mod, IBP_KERNEL_DECODE_UNFLAG, grid_cap(ctas, resident), IBP_DECODE_THREADS, 0,
                              stream, params))
            return -EIO;
    }
    if ((flags & IBP_DECODE_BLOCK) || (pred && !segp))
        return ibp_kernel_launch(mod, IBP_KERNEL_DECODE, grid_cap(args.nblocks, max_ctas), IBP_DECODE_THREADS, 0,
                                 stream, params);
    /* A CTA per group of a block's segments (as many as it has warps), no more CTAs than fit on
     * the device at once (the kernels' launch bounds): each then takes a contiguous share of the
     * groups, and its set-up (the plan's mask table, the bits of its first block's earlier
     * segments) is paid once for them.  The scratch holds a record per CTA. */
    const unsigned warps = IBP_DECODE_THREADS / 32;
    const uint64_t per_block = (ibp_decode_segments(word_size, args.block_size) + warps - 1) / warps;
    const uint64_t groups = (uint64_t)args.nblocks * per_block;
    /* 8-byte words have kernels of their own; plans of many entries keep their table sliced */
    const int sliced = word_size < 8 && (uint64_t)(nsets + 1u) * columns > IBP_DECODE_PARTS_ENTRIES_MAX;
    const int inl = args.inline_offsets != 0;
    const IbpSegKernel *const sk =
        columns > 1 && sliced ? &segs_kernels[inl] : &seg_kernels[columns == 1][word_size == 8][inl];
    const unsigned per_sm = segp ? IBP_DECODE_SEGP_CTAS_PER_SM : sk->per_sm;
    const unsigned resident = resident_cap(mod, per_sm, max_ctas);
    /* The kernels of several columns and the predictor kernel take their groups in as few rounds
     * as the device holds CTAs for, and then with as few CTAs as those rounds need: a grid of
     * every CTA it holds leaves a few CTAs a round more than the rest where the groups are not a
     * multiple of it, and those of the first round slower for sharing their multiprocessors with
     * more (the predictor kernel: 512 groups on 396 CTAs decoded 12% slower than on 264).  The
     * one-column kernels measured no better so. */
    const uint64_t rounds = (columns > 1 || segp) && resident ? (groups + resident - 1) / resident : 1;
    const unsigned grid = grid_cap(rounds > 1 ? (groups + rounds - 1) / rounds : groups, resident);
    int err = 0;
    /* Shares shorter than a quarter of a block of version-1 blocks (no group index): most CTAs
     * start well inside a block, where counting the block's earlier segments would cost more than
     * decoding their own; a pass counts each share's last part once instead. */
    if (columns > 1 && scratch && !(flags & IBP_DECODE_INDEXED) && groups * 4 < (uint64_t)grid * per_block) {
        err = ibp_kernel_launch(mod, IBP_KERNEL_DECODE_COUNT, grid, IBP_DECODE_THREADS, 0, stream, params);
        args.flags |= IBP_DECODE_ARG_COUNTED;
    }
    if (!err && segp) {
        /* Blocks with the group index and its carries decode exactly from any group: no fix-up. */
        const int segps = sliced && segp_shared_bytes(word_size) <= mod->segps_max_dynamic;
        err = ibp_kernel_launch(mod, segps ? IBP_KERNEL_DECODE_SEGPS : IBP_KERNEL_DECODE_SEGP, grid,
                                IBP_DECODE_THREADS, segp_shared_bytes(word_size), stream, params);
        return err || (flags & IBP_DECODE_INDEXED) ? err
                                                   : ibp_kernel_launch(mod, IBP_KERNEL_DECODE_FIX, grid,
                                                                       IBP_DECODE_THREADS, 0, stream, params);
    }
    const unsigned via = mod->via_words[sk->k] & word_size ? IBP_DECODE_VIA_BYTES(word_size) : 0;
    return err ? err : ibp_kernel_launch(mod, sk->k, grid, IBP_DECODE_THREADS, via, stream, params);
}

int ibp_decode_launch(const IbpModule *mod, const IbpDecodeArgs *a, unsigned word_size, unsigned columns,
                      unsigned nsets, unsigned flags, unsigned max_ctas, CUstream stream)
{
    if ((word_size != 2 && word_size != 4 && word_size != 8) || /* each kernel decodes only these */
        (a->comp & 15u) || /* the kernels stage sections with 16-byte copies */
        (a->inline_offsets && a->nblocks + 1u > IBP_DECODE_INLINE_OFFSETS))
        return -EINVAL;
    if ((flags & IBP_DECODE_SELFLAGS) && (!a->selx || (a->selx & 15u)))
        return -EINVAL;
    if (flags & IBP_DECODE_TOP_ONLY)
        return launch_top(mod, a, flags, max_ctas, stream);
    const int err = launch_packed(mod, a, word_size, columns, nsets, flags, max_ctas, stream);
    return err || !(flags & IBP_DECODE_TOPCODED) ? err : launch_top(mod, a, flags, max_ctas, stream);
}

int ibp_kernels_selftest(int ordinal, uint32_t n, char *why, size_t why_len)
{
    const IbpDriver *drv = ibp_driver_get();
    if (!drv) {
        snprintf(why, why_len, "%s", ibp_driver_error());
        return -ENODEV;
    }
    if (!ibp_kernels_built()) {
        snprintf(why, why_len, "library built without kernels");
        return -ENOTSUP;
    }
    CUresult res = CUDA_SUCCESS;
    CUdevice dev;
    CUcontext ctx = NULL;
    CUdeviceptr out = 0;
    uint32_t *host = NULL;
    const IbpModule *mod = NULL;
    int pushed = 0, err = -EIO;
    const uint32_t seed = 0x5eed1234u ^ n;
    IBP_CU_CHECK_GOTO(res, drv->cuDeviceGet(&dev, ordinal), fail);
    IBP_CU_CHECK_GOTO(res, drv->cuDevicePrimaryCtxRetain(&ctx, dev), fail);
    IBP_CU_CHECK_GOTO(res, drv->cuCtxPushCurrent(ctx), fail);
    pushed = 1;
    err = ibp_module_get(ctx, &mod);
    if (err) {
        snprintf(why, why_len, "loading the embedded kernels failed (%d)", err);
        goto cleanup;
    }
    err = -EIO;
    host = malloc((size_t)n * sizeof(*host) + 1);
    if (!host) {
        err = -ENOMEM;
        snprintf(why, why_len, "out of host memory");
        goto cleanup;
    }
    IBP_CU_CHECK_GOTO(res, drv->cuMemAlloc(&out, (size_t)n * sizeof(uint32_t) + 1), fail);
    /* Poison first so a launch that writes nothing cannot pass. */
    IBP_CU_CHECK_GOTO(res, drv->cuMemsetD8(out, 0xab, (size_t)n * sizeof(uint32_t)), fail);
    void *params[] = {&out, &n, (void *)&seed};
    const unsigned block = 256;
    const unsigned grid = (unsigned)mod->sm_count * 4;
    if (ibp_kernel_launch(mod, IBP_KERNEL_SELFTEST, grid, block, 0, NULL, params))
        goto fail;
    IBP_CU_CHECK_GOTO(res, drv->cuCtxSynchronize(), fail);
    IBP_CU_CHECK_GOTO(res, drv->cuMemcpyDtoH(host, out, (size_t)n * sizeof(uint32_t)), fail);
    err = 0;
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t want = (uint32_t)(i * 2654435761u) ^ seed;
        if (host[i] != want) {
            snprintf(why, why_len, "word %u is 0x%08x, expected 0x%08x", i, host[i], want);
            err = -EBADMSG;
            break;
        }
    }
    if (!err)
        snprintf(why, why_len, "ok: %u words on device %d (%d SMs)", n, ordinal, mod->sm_count);
    goto cleanup;
fail:
    snprintf(why, why_len, "driver call failed: %s", ibp_driver_result_name(res));
cleanup:
    if (out)
        drv->cuMemFree(out);
    free(host);
    if (pushed)
        drv->cuCtxPopCurrent(&ctx);
    if (ctx)
        drv->cuDevicePrimaryCtxRelease(dev);
    return err;
}
