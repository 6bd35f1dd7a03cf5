/* SPDX-License-Identifier: MIT
 * ibpshim: CPU implementations of the project's CUDA kernels, looked up by name by the fake driver. */
#include "tests/fakecuda/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/format.h"
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

/* Segments holding a packed block's words. */
static uint32_t segments_used(const IbpPlanHeader *ph, const IbpBlockHeader *h)
{
    return (h->orig_len / ph->word_size + IBP_DECODE_SEG_WORDS - 1) / IBP_DECODE_SEG_WORDS;
}

/* Field sizes as the format defines them: the index entry (first selector, payload bits) of every
 * IBP_DECODE_SEG_WORDS-word segment of a packed block, into sel[] and bit[] (nseg each).
 * Returns -1 when the block's sections are inconsistent. */
static int index_block(const IbpPlanHeader *ph, const uint8_t *blob, const uint8_t *blk, size_t comp_len,
                       uint32_t nseg, uint32_t *sel, uint32_t *bit)
{
    IbpBlockHeader h;
    memcpy(&h, blk, sizeof(h));
    const uint32_t w = ph->word_size, c = ph->columns, r = ph->row_words, sb = ph->nsets > 1 ? 2 : 1;
    const uint32_t nwords = h.orig_len / w;
    if (h.tail_off > comp_len || h.sel_off > h.tail_off || h.rowflag_off + (nwords / r + 8) / 8 > comp_len ||
        segments_used(ph, &h) > nseg)
        return -1;
    const uint8_t *flags = blk + h.rowflag_off, *selectors = blk + h.sel_off;
    uint64_t selidx = 0;
    for (uint32_t j = 0; j < nwords; j++) {
        if (j % IBP_DECODE_SEG_WORDS == 0) {
            sel[j / IBP_DECODE_SEG_WORDS] = (uint32_t)selidx;
            bit[j / IBP_DECODE_SEG_WORDS] = 0;
        }
        const uint32_t row = j / r, col = (uint32_t)(((uint64_t)h.col_phase + j) % c);
        uint32_t s = 0;
        if ((flags[row / 8] >> (row % 8)) & 1) {
            const uint64_t pos = selidx++ * sb;
            if (h.sel_off + pos / 8 >= h.tail_off)
                return -1;
            s = (selectors[pos / 8] >> (pos % 8)) & (sb == 1 ? 1u : 3u);
        }
        uint32_t size = 8 * w;
        if (s) {
            uint64_t mask = 0;
            memcpy(&mask, blob + ph->mask_off + ((size_t)(s - 1) * c + col) * 2 * w, w);
            size -= (uint32_t)__builtin_popcountll(mask);
        }
        bit[j / IBP_DECODE_SEG_WORDS] += size;
    }
    return 0;
}

typedef struct Run {
    IbpDecodeArgs a;
    const IbpPlanHeader *ph;
    const void *blob;
    const uint64_t *offs;
    uint8_t *dst;
} Run;

static CUresult run_open(void *const *params, Run *r)
{
    memcpy(&r->a, params[0], sizeof(r->a));
    r->ph = fakecuda_mem_access((uintptr_t)r->a.plan, sizeof(IbpPlanHeader), false);
    if (!r->ph)
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    r->blob = fakecuda_mem_access((uintptr_t)r->a.plan, r->ph->blob_len, false);
    r->offs = fakecuda_mem_access((uintptr_t)r->a.offsets, ((size_t)r->a.nblocks + 1) * 8, false);
    r->dst = r->a.len ? fakecuda_mem_access((uintptr_t)r->a.dst, r->a.len, false) : NULL;
    if (!r->blob || !r->offs || (r->a.len && !r->dst))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
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

/* The index scratch of a run, or NULL when it is not device memory of the right size. */
static uint32_t *run_index(const Run *r, uint32_t *nseg)
{
    *nseg = ibp_decode_segments(r->ph->word_size, r->a.block_size);
    const uint64_t n = ibp_decode_index_bytes(r->ph->word_size, r->a.block_size, r->a.nblocks);
    return n ? fakecuda_mem_access((uintptr_t)r->a.index, n, false) : NULL;
}

/* ibp_k_decode(IbpDecodeArgs a): the CPU codec decodes each block of the run and the bytes
 * [a.skip, a.skip + a.len) of the run land at a.dst, exactly what the CUDA kernel writes.
 * ibp_k_decode_seg does the same after checking that ibp_k_index left the index of every block
 * in a.index, as its CUDA version reads it.  ibp_k_decode_fused needs no index. */
static CUresult decode_run(void *const *params, bool check_index)
{
    Run r;
    CUresult res = run_open(params, &r);
    if (res != CUDA_SUCCESS)
        return res;
    const IbpDecodeArgs a = r.a;
    uint32_t nseg = 0, *index = NULL;
    if (check_index && !(index = run_index(&r, &nseg)))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    IbpCodecPlan *plan = NULL;
    if (ibp_codec_plan_from_blob(r.blob, r.ph->blob_len, &plan))
        return CUDA_ERROR_INVALID_VALUE;
    uint8_t *tmp = malloc(a.block_size ? a.block_size : 1);
    uint32_t *want = check_index ? malloc((size_t)nseg * 2 * sizeof(uint32_t)) : NULL;
    res = tmp && (!check_index || want) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    for (uint32_t b = 0; b < a.nblocks && res == CUDA_SUCCESS; b++) {
        size_t comp_len = 0;
        IbpBlockHeader h;
        const uint8_t *blk = run_block(&r, b, &comp_len, &h);
        if (!blk) {
            res = CUDA_ERROR_ILLEGAL_ADDRESS;
            break;
        }
        if (h.orig_len > a.block_size ||
            ibp_codec_block_decode(plan, blk, comp_len, h.orig_len, tmp, h.orig_len)) {
            res = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        if (check_index && !(h.flags & IBP_BLOCK_RAW)) {
            const uint32_t used = segments_used(r.ph, &h);
            const uint32_t *got = index + (size_t)b * nseg * 2;
            if (index_block(r.ph, r.blob, blk, comp_len, nseg, want, want + nseg)) {
                res = CUDA_ERROR_INVALID_VALUE;
                break;
            }
            for (uint32_t s = 0; s < used; s++)
                if (got[2 * s] != want[s] || got[2 * s + 1] != want[nseg + s]) {
                    fprintf(stderr, "fakecuda: ibp_k_decode_seg: block %u segment %u: index (%u, %u), expected "
                            "(%u, %u)\n", b, s, got[2 * s], got[2 * s + 1], want[s], want[nseg + s]);
                    res = CUDA_ERROR_INVALID_VALUE;
                    break;
                }
        }
        /* Block b covers run bytes [b * block_size, b * block_size + orig_len). */
        const uint64_t start = (uint64_t)b * a.block_size;
        const uint64_t lo = start > a.skip ? start : a.skip;
        const uint64_t end = start + h.orig_len < a.skip + a.len ? start + h.orig_len : a.skip + a.len;
        if (res == CUDA_SUCCESS && end > lo)
            memcpy(r.dst + (lo - a.skip), tmp + (lo - start), end - lo);
    }
    free(want);
    free(tmp);
    ibp_codec_plan_destroy(&plan);
    return res;
}

static CUresult k_decode(const FakecudaGrid *grid, void *const *params)
{
    (void)grid;
    return decode_run(params, false);
}

static CUresult k_decode_seg(const FakecudaGrid *grid, void *const *params)
{
    (void)grid;
    return decode_run(params, true);
}

/* ibp_k_index(IbpDecodeArgs a): writes the segment index of every packed block of the run. */
static CUresult k_index(const FakecudaGrid *grid, void *const *params)
{
    (void)grid;
    Run r;
    CUresult res = run_open(params, &r);
    if (res != CUDA_SUCCESS)
        return res;
    uint32_t nseg = 0, *index = run_index(&r, &nseg);
    if (!index)
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    uint32_t *tmp = malloc((size_t)nseg * 2 * sizeof(uint32_t));
    if (!tmp)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (uint32_t b = 0; b < r.a.nblocks && res == CUDA_SUCCESS; b++) {
        size_t comp_len = 0;
        IbpBlockHeader h;
        const uint8_t *blk = run_block(&r, b, &comp_len, &h);
        if (!blk) {
            res = CUDA_ERROR_ILLEGAL_ADDRESS;
            break;
        }
        if (h.flags & IBP_BLOCK_RAW)
            continue;
        if (index_block(r.ph, r.blob, blk, comp_len, nseg, tmp, tmp + nseg)) {
            res = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        const uint32_t used = segments_used(r.ph, &h);
        for (uint32_t s = 0; s < used; s++) {
            index[((size_t)b * nseg + s) * 2] = tmp[s];
            index[((size_t)b * nseg + s) * 2 + 1] = tmp[nseg + s];
        }
    }
    free(tmp);
    return res;
}

const FakecudaKernel fakecuda_kernels[] = {
    FAKECUDA_KERNEL(ibp_k_selftest, k_selftest, sizeof(CUdeviceptr), sizeof(uint32_t), sizeof(uint32_t)),
    FAKECUDA_KERNEL(ibp_k_decode, k_decode, sizeof(IbpDecodeArgs)),
    FAKECUDA_KERNEL(ibp_k_index, k_index, sizeof(IbpDecodeArgs)),
    FAKECUDA_KERNEL(ibp_k_decode_seg, k_decode_seg, sizeof(IbpDecodeArgs)),
    FAKECUDA_KERNEL(ibp_k_decode_fused, k_decode, sizeof(IbpDecodeArgs)),
};

const size_t fakecuda_kernel_count = sizeof(fakecuda_kernels) / sizeof(fakecuda_kernels[0]);
