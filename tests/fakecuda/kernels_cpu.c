/* SPDX-License-Identifier: MIT
 * ibpshim: CPU implementations of the project's CUDA kernels, looked up by name by the fake driver. */
#include "tests/fakecuda/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/format.h"
#include "codec/internal.h"
#include "ibpshim/codec.h"
#include "kernels/decode_abi.h"

/* ibp_k_selftest(uint32_t *out, uint32_t n, uint32_t seed): out[i] = (uint32_t)(i * 2654435761u) ^ seed
 * for every i < n, whatever the grid (the CUDA version strides over the grid). */
static CUresult k_selftest(const FakecudaGrid *grid, void *const *params)
{
    (void)grid;
    CUdeviceptr out;
    uint32_t n, seed;
    memcpy(&out, params[0], sizeof(out));
    memcpy(&n, params[1], sizeof(n));
    memcpy(&seed, params[2], sizeof(seed));
    if (n == 0)
        return CUDA_SUCCESS;
    uint32_t *const dst = fakecuda_mem_access((uintptr_t)out, (size_t)n * sizeof(uint32_t), false);
    if (!dst)
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    for (uint32_t i = 0; i < n; i++)
        dst[i] = (uint32_t)(i * 2654435761u) ^ seed;
    return CUDA_SUCCESS;
}

/* The fill kernels of the test programs and ibp-hookbench (tools/fill_kernel.h holds their PTX): words 32-bit
 * copies of value from dst on, into device memory or, through its unified address, pinned host memory, where
 * they land as the device's writes do (without a fault). */
static CUresult fill(uint64_t dst, uint32_t value, uint64_t words)
{
    if (!words)
        return CUDA_SUCCESS;
    const size_t n = (size_t)words * sizeof(uint32_t);
    uint8_t *const at = fakecuda_mem_access((uintptr_t)dst, n, false);
    if (!at)
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    uint32_t *const tmp = malloc(n);
    if (!tmp)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (uint64_t i = 0; i < words; i++)
        tmp[i] = value;
    fakecuda_dma_write(at, tmp, n);
    free(tmp);
    return CUDA_SUCCESS;
}

/* ibp_test_fill(uint32_t *dst, uint32_t value, uint64_t words) */
static CUresult k_test_fill(const FakecudaGrid *grid, void *const *params)
{
    (void)grid;
    uint64_t dst, words;
    uint32_t value;
    memcpy(&dst, params[0], sizeof(dst));
    memcpy(&value, params[1], sizeof(value));
    memcpy(&words, params[2], sizeof(words));
    return fill(dst, value, words);
}

/* ibp_test_fill_struct(struct {uint64_t tag; uint32_t *dst; uint32_t value; uint32_t words;}) */
static CUresult k_test_fill_struct(const FakecudaGrid *grid, void *const *params)
{
    (void)grid;
    uint64_t dst;
    uint32_t value, words;
    memcpy(&dst, (const char *)params[0] + 8, sizeof(dst));
    memcpy(&value, (const char *)params[0] + 16, sizeof(value));
    memcpy(&words, (const char *)params[0] + 20, sizeof(words));
    return fill(dst, value, words);
}

/* ibp_test_copy16(const void *src, void *dst, uint64_t vecs): 16-byte vectors from src (device or, by its
 * unified address, pinned host memory) to dst. */
static CUresult k_test_copy16(const FakecudaGrid *grid, void *const *params)
{
    (void)grid;
    uint64_t src, dst, vecs;
    memcpy(&src, params[0], sizeof(src));
    memcpy(&dst, params[1], sizeof(dst));
    memcpy(&vecs, params[2], sizeof(vecs));
    if (!vecs)
        return CUDA_SUCCESS;
    if (vecs > SIZE_MAX / 16 || (src | dst) % 16)
        return CUDA_ERROR_MISALIGNED_ADDRESS;
    const size_t n = (size_t)vecs * 16;
    const void *const from = fakecuda_mem_access((uintptr_t)src, n, false);
    void *const to = fakecuda_mem_access((uintptr_t)dst, n, false);
    if (!from || !to)
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    fakecuda_dma_write(to, from, n);
    return CUDA_SUCCESS;
}

/* ibp_k_copy_edges(IbpEdgeArgs a): edge e from a.src[e], pinned host memory by its unified address, to
 * a.dst[e], where the grid has a CTA for it (CTA i takes edge i % 2; any number covers an edge). */
static CUresult k_copy_edges(const FakecudaGrid *grid, void *const *params)
{
    IbpEdgeArgs a;
    memcpy(&a, params[0], sizeof(a));
    if (grid->block[0] < 16)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned e = 0; e < 2 && e < grid->grid[0]; e++) {
        if (!a.len[e])
            continue;
        if (a.len[e] > SIZE_MAX)
            return CUDA_ERROR_ILLEGAL_ADDRESS;
        const void *const from = fakecuda_mem_access((uintptr_t)a.src[e], (size_t)a.len[e], false);
        void *const to = fakecuda_mem_access((uintptr_t)a.dst[e], (size_t)a.len[e], false);
        if (!from || !to)
            return CUDA_ERROR_ILLEGAL_ADDRESS;
        fakecuda_dma_write(to, from, (size_t)a.len[e]);
    }
    return CUDA_SUCCESS;
}

typedef struct Run {
    IbpDecodeArgs a;
    const IbpPlanHeader *ph;
    const void *blob;
    const uint64_t *offs;
    uint64_t *inline_offs; /* the offsets the arguments carried (inline_offsets), owned */
    uint8_t *dst;
} Run;

static void run_close(Run *r)
{
    free(r->inline_offs);
    r->inline_offs = NULL;
}

static CUresult run_open(void *const *params, Run *r)
{
    memcpy(&r->a, params[0], sizeof(r->a));
    r->ph = fakecuda_mem_access((uintptr_t)r->a.plan, sizeof(IbpPlanHeader), false);
    if (!r->ph)
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    r->blob = fakecuda_mem_access((uintptr_t)r->a.plan, r->ph->blob_len, false);
    r->inline_offs = NULL;
    if (r->a.inline_offsets) {
        /* The kernels read rel[] for every block of the run: more than the array holds is a
         * launcher's bug the GPU would turn into garbage. */
        if (r->a.nblocks + 1u > IBP_DECODE_INLINE_OFFSETS)
            return CUDA_ERROR_INVALID_VALUE;
        r->inline_offs = malloc(((size_t)r->a.nblocks + 1) * sizeof(uint64_t));
        if (!r->inline_offs)
            return CUDA_ERROR_OUT_OF_MEMORY;
        for (uint32_t i = 0; i <= r->a.nblocks; i++)
            r->inline_offs[i] = r->a.rel[i];
        r->offs = r->inline_offs;
    } else {
        r->offs = fakecuda_mem_access((uintptr_t)r->a.offsets, ((size_t)r->a.nblocks + 1) * 8, false);
    }
    r->dst = r->a.len ? fakecuda_mem_access((uintptr_t)r->a.dst, r->a.len, false) : NULL;
    if (!r->blob || !r->offs || (r->a.len && !r->dst)) {
        run_close(r);
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    return CUDA_SUCCESS;
}

/* Block b of the run and its header, or NULL when it is not device memory. */
static const uint8_t *run_block(const Run *r, uint32_t b, size_t *comp_len, IbpBlockHeader *h)
{
    *comp_len = r->offs[b + 1] - r->offs[b];
    const uint8_t *blk = fakecuda_mem_access((uintptr_t)(r->a.comp + (r->offs[b] - r->offs[0])), *comp_len, false);
    if (!blk || *comp_len < sizeof(IbpBlockHeader))
        return NULL;
    memcpy(h, blk, sizeof(*h));
    return blk;
}

/* Block b of the run (flagged selectors, at blk) with its selector section in the fixed-width form,
 * allocated in *out, and that section's place in it; CUDA_ERROR_INVALID_VALUE when malformed. */
static CUresult unflagged(const IbpCodecPlan *plan, const uint8_t *blk, size_t comp_len, uint32_t orig_len,
                          uint8_t **out, size_t *out_len, IbpBlockHeader *h)
{
    if (ibp_selflags_unflag(plan, blk, comp_len, orig_len, out, out_len))
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(h, *out, sizeof(*h));
    return CUDA_SUCCESS;
}

/* The selectors ibp_k_decode_unflag leaves for block b in a.selx, or NULL when a.selx is not
 * device memory of a stride for each block of the run. */
static uint8_t *selx_of(const Run *r, uint32_t b, uint32_t word_size)
{
    const uint32_t stride = ibp_decode_selx_stride(word_size, r->a.block_size);
    uint8_t *const all =
        r->a.selx
            ? fakecuda_mem_access((uintptr_t)r->a.selx,
                                  ibp_decode_selx_bytes(word_size, r->a.block_size, r->a.nblocks), false)
            : NULL;
    return all ? all + (size_t)b * stride : NULL;
}

/* As the CUDA kernels decode a block of flagged selectors: with the selectors found in a.selx,
 * wherever they came from. */
static CUresult decode_flagged(const Run *r, const IbpCodecPlan *plan, uint32_t b, const uint8_t *blk,
                               size_t comp_len, uint32_t orig_len, uint8_t *dst)
{
    uint8_t *fixed = NULL;
    size_t fixed_len = 0;
    IbpBlockHeader h;
    CUresult res = unflagged(plan, blk, comp_len, orig_len, &fixed, &fixed_len, &h);
    if (res != CUDA_SUCCESS)
        return res;
    const uint8_t *sel = selx_of(r, b, r->ph->word_size);
    if (!sel)
        res = CUDA_ERROR_ILLEGAL_ADDRESS;
    else
        memcpy(fixed + h.sel_off, sel, h.tail_off - h.sel_off);
    if (res == CUDA_SUCCESS && ibp_codec_block_decode(plan, fixed, fixed_len, orig_len, dst, orig_len))
        res = CUDA_ERROR_INVALID_VALUE;
    free(fixed);
    return res;
}

/* What a kernel does with block b of the run (at blk, comp_len bytes, header h). */
typedef CUresult (*BlockFn)(const Run *r, const IbpCodecPlan *plan, uint32_t b, const uint8_t *blk,
                            size_t comp_len, const IbpBlockHeader *h, void *ctx);

/* Opens the run of a launch's IbpDecodeArgs and its plan, and calls fn for each block in order
 * until one fails. */
static CUresult each_block(void *const *params, BlockFn fn, void *ctx)
{
    Run r;
    CUresult res = run_open(params, &r);
    if (res != CUDA_SUCCESS)
        return res;
    IbpCodecPlan *plan = NULL;
    if (ibp_codec_plan_from_blob(r.blob, r.ph->blob_len, &plan)) {
        run_close(&r);
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (uint32_t b = 0; b < r.a.nblocks && res == CUDA_SUCCESS; b++) {
        size_t comp_len = 0;
        IbpBlockHeader h;
        const uint8_t *blk = run_block(&r, b, &comp_len, &h);
        res = blk ? fn(&r, plan, b, blk, comp_len, &h, ctx) : CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    ibp_codec_plan_destroy(&plan);
    run_close(&r);
    return res;
}

/* ibp_k_decode_unflag (IbpDecodeArgs a): each flagged block's selectors in the fixed-width form at
 * a.selx + b * ibp_decode_selx_stride(), zeros after them. */
static CUresult unflag_block(const Run *r, const IbpCodecPlan *plan, uint32_t b, const uint8_t *blk,
                             size_t comp_len, const IbpBlockHeader *h, void *ctx)
{
    (void)ctx;
    if (!ibp_fmt_selflags(h->flags))
        return CUDA_SUCCESS;
    const uint32_t w = r->ph->word_size;
    uint8_t *fixed = NULL, *sel = selx_of(r, b, w);
    size_t fixed_len = 0;
    IbpBlockHeader fh;
    const CUresult res =
        !sel ? CUDA_ERROR_ILLEGAL_ADDRESS
             : unflagged(plan, blk, comp_len, h->orig_len < r->a.block_size ? h->orig_len : r->a.block_size,
                         &fixed, &fixed_len, &fh);
    if (res == CUDA_SUCCESS) {
        memset(sel, 0, ibp_decode_selx_stride(w, r->a.block_size));
        memcpy(sel, fixed + fh.sel_off, fh.tail_off - fh.sel_off);
    }
    free(fixed);
    return res;
}

static CUresult k_unflag(const FakecudaGrid *grid, void *const *params)
{
    (void)grid;
    return each_block(params, unflag_block, NULL);
}

/* Lands block b's orig_len decoded bytes (at tmp) where the launch wants them: block b covers run
 * bytes [b * block_size, b * block_size + orig_len), and bytes [a.skip, a.skip + a.len) of the
 * run go to a.dst. */
static void land(const Run *r, uint32_t b, uint32_t orig_len, const uint8_t *tmp)
{
    const IbpDecodeArgs *a = &r->a;
    const uint64_t start = (uint64_t)b * a->block_size;
    const uint64_t lo = start > a->skip ? start : a->skip;
    const uint64_t end = start + orig_len < a->skip + a->len ? start + orig_len : a->skip + a->len;
    if (end > lo)
        memcpy(r->dst + (lo - a->skip), tmp + (lo - start), end - lo);
}

/* ibp_k_decode, ibp_k_decode_seg(s), ibp_k_decode_seg1(w8) and ibp_k_decode_segp(s) (IbpDecodeArgs a): the
 * CPU codec decodes each block of the run (into ctx, a block's room) and the bytes
 * [a.skip, a.skip + a.len) of the run land at a.dst, exactly what the CUDA kernels write
 * (ibp_k_decode_segp(s) with ibp_k_decode_fix after it). */
static CUresult decode_block(const Run *r, const IbpCodecPlan *plan, uint32_t b, const uint8_t *blk,
                             size_t comp_len, const IbpBlockHeader *h, void *ctx)
{
    const IbpDecodeArgs *a = &r->a;
    uint8_t *tmp = ctx;
    if (h->orig_len > a->block_size)
        return CUDA_ERROR_INVALID_VALUE;
    if (h->flags & IBP_BLOCK_TOPCODED) /* ibp_k_decode_top's: these kernels leave its bytes alone */
        return CUDA_SUCCESS;
    const CUresult res = ibp_fmt_selflags(h->flags)
                             ? decode_flagged(r, plan, b, blk, comp_len, h->orig_len, tmp)
                         : ibp_codec_block_decode(plan, blk, comp_len, h->orig_len, tmp, h->orig_len)
                             ? CUDA_ERROR_INVALID_VALUE
                             : CUDA_SUCCESS;
    if (res == CUDA_SUCCESS)
        land(r, b, h->orig_len, tmp);
    return res;
}

/* ibp_k_decode_top (IbpDecodeArgs a): the run's top-coded blocks, and with IBP_DECODE_ARG_TOP_RAW
 * its raw ones, decoded by the CPU codec and landed as decode_block() lands them.  A packed block
 * in a run launched with IBP_DECODE_ARG_TOP_RAW fails the launch: no kernel would write its bytes
 * on a GPU. */
static CUresult decode_top_block(const Run *r, const IbpCodecPlan *plan, uint32_t b, const uint8_t *blk,
                                 size_t comp_len, const IbpBlockHeader *h, void *ctx)
{
    uint8_t *tmp = ctx;
    const int top_raw = (r->a.flags & IBP_DECODE_ARG_TOP_RAW) != 0;
    if (h->orig_len > r->a.block_size || (top_raw && !(h->flags & (IBP_BLOCK_TOPCODED | IBP_BLOCK_RAW))))
        return CUDA_ERROR_INVALID_VALUE;
    if (!(h->flags & IBP_BLOCK_TOPCODED) && !(top_raw && (h->flags & IBP_BLOCK_RAW)))
        return CUDA_SUCCESS;
    if (ibp_codec_block_decode(plan, blk, comp_len, h->orig_len, tmp, h->orig_len))
        return CUDA_ERROR_INVALID_VALUE;
    land(r, b, h->orig_len, tmp);
    return CUDA_SUCCESS;
}

/* Calls fn for each block of the launch's run with a block's room for it to decode into. */
static CUresult each_block_decoded(void *const *params, BlockFn fn)
{
    IbpDecodeArgs a;
    memcpy(&a, params[0], sizeof(a));
    uint8_t *tmp = malloc(a.block_size ? a.block_size : 1);
    if (!tmp)
        return CUDA_ERROR_OUT_OF_MEMORY;
    const CUresult res = each_block(params, fn, tmp);
    free(tmp);
    return res;
}

static CUresult k_decode(const FakecudaGrid *grid, void *const *params)
{
    (void)grid;
    return each_block_decoded(params, decode_block);
}

static CUresult k_decode_top(const FakecudaGrid *grid, void *const *params)
{
    (void)grid;
    return each_block_decoded(params, decode_top_block);
}

/* ibp_k_decode_count and ibp_k_decode_fix (IbpDecodeArgs a): on the GPU they leave in a.scratch
 * the bits of each CTA's share and apply the carries ibp_k_decode_segp left there; the CPU decode
 * kernels write the final bytes without them, so only the arguments are checked as the GPU would
 * touch them (a record per CTA of the grid). */
static CUresult k_decode_scratch_pass(const FakecudaGrid *grid, void *const *params)
{
    Run r;
    const CUresult res = run_open(params, &r);
    if (res != CUDA_SUCCESS)
        return res;
    const uint64_t need = ibp_decode_scratch_size(grid->grid[0]);
    run_close(&r);
    return fakecuda_mem_access((uintptr_t)r.a.scratch, need, false) ? CUDA_SUCCESS
                                                                    : CUDA_ERROR_ILLEGAL_ADDRESS;
}

const FakecudaKernel fakecuda_kernels[] = {
    FAKECUDA_KERNEL(ibp_k_selftest, k_selftest, sizeof(CUdeviceptr), sizeof(uint32_t), sizeof(uint32_t)),
    FAKECUDA_KERNEL(ibp_k_decode, k_decode, sizeof(IbpDecodeArgs)),
    FAKECUDA_KERNEL(ibp_k_decode_seg, k_decode, sizeof(IbpDecodeArgs)),
    FAKECUDA_KERNEL(ibp_k_decode_seg1, k_decode, sizeof(IbpDecodeArgs)),
    FAKECUDA_KERNEL(ibp_k_decode_seg_inl, k_decode, sizeof(IbpDecodeArgs)),
    FAKECUDA_KERNEL(ibp_k_decode_segs, k_decode, sizeof(IbpDecodeArgs)),
    FAKECUDA_KERNEL(ibp_k_decode_segs_inl, k_decode, sizeof(IbpDecodeArgs)),
    FAKECUDA_KERNEL(ibp_k_decode_seg1_inl, k_decode, sizeof(IbpDecodeArgs)),
    FAKECUDA_KERNEL(ibp_k_decode_seg1w8, k_decode, sizeof(IbpDecodeArgs)),
    FAKECUDA_KERNEL(ibp_k_decode_seg1w8_inl, k_decode, sizeof(IbpDecodeArgs)),
    FAKECUDA_KERNEL(ibp_k_decode_segw8, k_decode, sizeof(IbpDecodeArgs)),
    FAKECUDA_KERNEL(ibp_k_decode_segw8_inl, k_decode, sizeof(IbpDecodeArgs)),
    FAKECUDA_KERNEL(ibp_k_decode_segp, k_decode, sizeof(IbpDecodeArgs)),
    FAKECUDA_KERNEL(ibp_k_decode_segps, k_decode, sizeof(IbpDecodeArgs)),
    FAKECUDA_KERNEL(ibp_k_decode_fix, k_decode_scratch_pass, sizeof(IbpDecodeArgs)),
    FAKECUDA_KERNEL(ibp_k_decode_count, k_decode_scratch_pass, sizeof(IbpDecodeArgs)),
    FAKECUDA_KERNEL(ibp_k_decode_unflag, k_unflag, sizeof(IbpDecodeArgs)),
    FAKECUDA_KERNEL(ibp_k_decode_top, k_decode_top, sizeof(IbpDecodeArgs)),
    FAKECUDA_KERNEL(ibp_k_copy_edges, k_copy_edges, sizeof(IbpEdgeArgs)),
    FAKECUDA_KERNEL(ibp_test_fill, k_test_fill, sizeof(uint64_t), sizeof(uint32_t), sizeof(uint64_t)),
    FAKECUDA_KERNEL(ibp_test_fill_struct, k_test_fill_struct, 24),
    FAKECUDA_KERNEL(ibp_test_copy16, k_test_copy16, sizeof(uint64_t), sizeof(uint64_t), sizeof(uint64_t)),
};

const size_t fakecuda_kernel_count = sizeof(fakecuda_kernels) / sizeof(fakecuda_kernels[0]);
