/* SPDX-License-Identifier: MIT
 * ibpshim: the stand-alone file form (header, plan blob, block table with checksums, blocks). */
#include <errno.h>
#include <stdlib.h>

#include "codec/internal.h"

_Static_assert(sizeof(IbpFileHeader) == 64, "file header layout");
_Static_assert(sizeof(IbpFileBlock) == 16, "block table entry layout");
_Static_assert(sizeof(IbpBlockHeader) == IBP_BLOCK_HEADER_SIZE, "block header layout");
_Static_assert(sizeof(IbpPlanHeader) == 32, "plan header layout");

static uint32_t ibp_file_meta_crc(const IbpCodecKernels *k, const uint8_t *file, const IbpFileHeader *h)
{
    IbpFileHeader copy = *h;
    copy.meta_crc = 0;
    uint32_t crc = k->crc32c(0, &copy, sizeof(copy));
    crc = k->crc32c(crc, file + h->plan_off, h->plan_len);
    return k->crc32c(crc, file + h->table_off, (size_t)h->nblocks * sizeof(IbpFileBlock));
}

int ibp_codec_file_compress_with(const IbpCodecPlan *plan, const void *src, size_t len, unsigned threads,
                                 void **out, size_t *out_len)
{
    uint8_t *file = NULL;
    void **slots = NULL;
    size_t *comp = NULL;
    int rc = -ENOMEM;

    if (!plan || (!src && len) || !out || !out_len)
        return -EINVAL;
    const IbpCodecKernels *k = ibp_codec_kernels();
    const size_t bs = plan->block_size;
    const size_t nblocks = (len + bs - 1u) / bs;
    if (nblocks > UINT32_MAX)
        return -EINVAL;
    const size_t each = ibp_codec_bound_for(plan, len < bs ? len : bs);
    const size_t table_off = sizeof(IbpFileHeader) + plan->blob_len;
    const size_t data_off = table_off + nblocks * sizeof(IbpFileBlock);
    if (nblocks && each > (SIZE_MAX - data_off) / nblocks)
        return -EINVAL;
    file = malloc(data_off + nblocks * each);
    slots = malloc((nblocks ? nblocks : 1u) * sizeof(*slots));
    comp = malloc((nblocks ? nblocks : 1u) * sizeof(*comp));
    if (!file || !slots || !comp)
        goto fail;
    for (size_t i = 0; i < nblocks; i++)
        slots[i] = file + data_off + i * each;
    rc = ibp_codec_region_encode(plan, src, len, threads, slots, each, comp);
    if (rc)
        goto fail;

    /* Slots are in ascending order and blocks only shrink, so compacting front to back is safe. */
    IbpFileBlock *table = (IbpFileBlock *)(file + table_off);
    size_t pos = data_off;
    for (size_t i = 0; i < nblocks; i++) {
        const size_t n = len - i * bs < bs ? len - i * bs : bs;
        memmove(file + pos, slots[i], comp[i]);
        const IbpFileBlock e = {
            .offset = pos,
            .comp_len = (uint32_t)comp[i],
            .crc = k->crc32c(0, (const uint8_t *)src + i * bs, n),
        };
        memcpy(&table[i], &e, sizeof(e));
        pos += comp[i];
    }
    memcpy(file + sizeof(IbpFileHeader), plan->blob, plan->blob_len);
    IbpFileHeader h = {
        .magic = IBP_FILE_MAGIC,
        .version = IBP_FORMAT_VERSION,
        .header_size = sizeof(IbpFileHeader),
        .orig_len = len,
        .block_size = plan->block_size,
        .nblocks = (uint32_t)nblocks,
        .plan_off = sizeof(IbpFileHeader),
        .plan_len = (uint32_t)plan->blob_len,
        .table_off = table_off,
        .file_len = pos,
    };
    memcpy(file, &h, sizeof(h));
    h.meta_crc = ibp_file_meta_crc(k, file, &h);
    memcpy(file, &h, sizeof(h));
    uint8_t *shrunk = realloc(file, pos);
    *out = shrunk ? shrunk : file;
    *out_len = pos;
    file = NULL;
    rc = 0;
fail:
    free(file);
    free(slots);
    free(comp);
    return rc;
}

int ibp_codec_file_compress(const void *src, size_t len, const IbpCodecPlanOptions *opts, unsigned threads,
                            void **out, size_t *out_len)
{
    IbpCodecPlan *plan = NULL;
    IbpCodecPlanOptions o = {0};
    if (opts)
        o = *opts;
    if (!o.threads)
        o.threads = threads; /* the planner's threads too, unless opts names them */
    int rc = ibp_codec_plan_create(src, len, &o, &plan);
    if (rc)
        return rc;
    rc = ibp_codec_file_compress_with(plan, src, len, threads, out, out_len);
    ibp_codec_plan_destroy(&plan);
    return rc;
}

/* Checks everything about the header, plan and table that does not need the blocks. */
static int ibp_file_check(const uint8_t *file, size_t len, IbpFileHeader *h)
{
    if (len < sizeof(*h))
        return -EBADMSG;
    memcpy(h, file, sizeof(*h));
    if (h->magic != IBP_FILE_MAGIC || h->version < IBP_FORMAT_VERSION_MIN ||
        h->version > IBP_FORMAT_VERSION || h->header_size != sizeof(*h) || h->plan_off != sizeof(*h) ||
        h->file_len > len || h->reserved || h->reserved2 || h->block_size < IBP_MIN_BLOCK_SIZE ||
        h->block_size > IBP_MAX_BLOCK_SIZE || (uint64_t)h->plan_off + h->plan_len != h->table_off ||
        h->table_off + (uint64_t)h->nblocks * sizeof(IbpFileBlock) > h->file_len ||
        (h->orig_len + h->block_size - 1u) / h->block_size != h->nblocks)
        return -EBADMSG;
    if (ibp_file_meta_crc(ibp_codec_kernels(), file, h) != h->meta_crc)
        return -EBADMSG;
    return 0;
}

int ibp_codec_file_orig_len(const void *file, size_t len, uint64_t *orig_len)
{
    IbpFileHeader h;
    if (!file || !orig_len)
        return -EINVAL;
    const int rc = ibp_file_check(file, len, &h);
    if (!rc)
        *orig_len = h.orig_len;
    return rc;
}

int ibp_codec_file_decompress(const void *file, size_t len, void *dst, size_t dst_cap)
{
    const uint8_t *f = file;
    IbpFileHeader h;
    IbpCodecPlan *plan = NULL;

    if (!file || (!dst && dst_cap))
        return -EINVAL;
    int rc = ibp_file_check(f, len, &h);
    if (rc)
        return rc;
    if (h.orig_len > dst_cap)
        return -ENOSPC;
    rc = ibp_codec_plan_from_blob(f + h.plan_off, h.plan_len, &plan);
    if (rc)
        return rc;
    rc = -EBADMSG;
    if (plan->block_size != h.block_size || plan->blob_len != h.plan_len)
        goto fail;
    const IbpCodecKernels *k = ibp_codec_kernels();
    const uint64_t data_off = h.table_off + (uint64_t)h.nblocks * sizeof(IbpFileBlock);
    for (uint32_t i = 0; i < h.nblocks; i++) {
        IbpFileBlock e;
        memcpy(&e, f + h.table_off + (uint64_t)i * sizeof(e), sizeof(e));
        const uint64_t boff = (uint64_t)i * h.block_size;
        const uint32_t n = (uint32_t)(h.orig_len - boff < h.block_size ? h.orig_len - boff : h.block_size);
        rc = -EBADMSG;
        if (e.offset < data_off || e.offset % IBP_ALIGN || e.offset > h.file_len ||
            e.comp_len > h.file_len - e.offset)
            goto fail;
        rc = ibp_block_decode_any(k, plan, f + e.offset, e.comp_len, n, (uint8_t *)dst + boff, n);
        if (rc)
            goto fail;
        rc = -EBADMSG;
        if (k->crc32c(0, (const uint8_t *)dst + boff, n) != e.crc)
            goto fail;
    }
    rc = 0;
fail:
    ibp_codec_plan_destroy(&plan);
    return rc;
}
