/* SPDX-License-Identifier: MIT
 * ibpshim: whole-region encode on several threads and random-access decode of byte ranges. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "codec/internal.h"

typedef struct IbpEncodeJob {
    const IbpCodecPlan *plan;
    const IbpCodecKernels *kernels;
    const uint8_t *src;
    size_t len;
    size_t nblocks;
    void *const *dst;
    size_t cap_each;
    size_t *comp_lens;
    size_t next; /* atomic: next block to take */
    int error;   /* atomic: first error */
} IbpEncodeJob;

static void *ibp_encode_worker(void *arg)
{
    IbpEncodeJob *job = arg;
    const size_t bs = job->plan->block_size;
    for (;;) {
        const size_t i = __atomic_fetch_add(&job->next, 1, __ATOMIC_RELAXED);
        if (i >= job->nblocks || __atomic_load_n(&job->error, __ATOMIC_RELAXED))
            break;
        const size_t off = i * bs;
        const size_t n = job->len - off < bs ? job->len - off : bs;
        const uint32_t phase = (uint32_t)((off / job->plan->word_size) % job->plan->columns);
        const int rc = ibp_block_encode_any(job->kernels, job->plan, job->src + off, (uint32_t)n, phase,
                                            job->dst[i], job->cap_each, &job->comp_lens[i]);
        if (rc) {
            int expected = 0;
            __atomic_compare_exchange_n(&job->error, &expected, rc, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
        }
    }
    return NULL;
}

int ibp_codec_region_encode(const IbpCodecPlan *plan, const void *src, size_t len, unsigned threads,
                            void *const *dst, size_t cap_each, size_t *comp_lens)
{
    pthread_t tid[64];
    unsigned started = 0;

    if (!plan || (!src && len) || (!dst && len) || (!comp_lens && len))
        return -EINVAL;
    if (cap_each < ibp_codec_bound_for(plan, len < plan->block_size ? len : plan->block_size))
        return -ENOSPC;
    IbpEncodeJob job = {
        .plan = plan,
        .kernels = ibp_codec_kernels(),
        .src = src,
        .len = len,
        .nblocks = (len + plan->block_size - 1u) / plan->block_size,
        .dst = dst,
        .cap_each = cap_each,
        .comp_lens = comp_lens,
    };
    if (threads > 64u)
        threads = 64u;
    if (threads > job.nblocks)
        threads = (unsigned)job.nblocks;
    /* The calling thread works too; a thread that fails to start only lowers the parallelism. */
    for (unsigned t = 1; t < threads; t++) {
        if (pthread_create(&tid[started], NULL, ibp_encode_worker, &job) == 0)
            started++;
    }
    ibp_encode_worker(&job);
    for (unsigned t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
    return job.error;
}

int ibp_codec_region_decode_range(const IbpCodecPlan *plan, const void *const *blocks,
                                  const size_t *comp_lens, size_t region_len, size_t off, size_t len,
                                  void *dst)
{
    uint8_t *scratch = NULL;
    int rc = 0;

    if (!plan || (len && (!blocks || !comp_lens || !dst)) || off > region_len || len > region_len - off)
        return -EINVAL;
    const IbpCodecKernels *k = ibp_codec_kernels();
    const size_t bs = plan->block_size;
    uint8_t *out = dst;
    size_t pos = off;
    while (pos < off + len) {
        const size_t i = pos / bs;
        const size_t boff = i * bs;
        const uint32_t blen = (uint32_t)(region_len - boff < bs ? region_len - boff : bs);
        const size_t in_blk = pos - boff;
        const size_t end = off + len - boff < blen ? off + len - boff : blen;
        if (in_blk == 0) {
            /* Decoding writes the block's prefix in order, so it can go straight to dst. */
            rc = ibp_block_decode_any(k, plan, blocks[i], comp_lens[i], blen, out, (uint32_t)end);
        } else {
            /* Predictors read earlier words of the block: decode the prefix aside, then copy. */
            if (!scratch) {
                scratch = malloc(bs);
                if (!scratch) {
                    rc = -ENOMEM;
                    goto fail;
                }
            }
            rc = ibp_block_decode_any(k, plan, blocks[i], comp_lens[i], blen, scratch, (uint32_t)end);
            if (!rc)
                memcpy(out, scratch + in_blk, end - in_blk);
        }
        if (rc)
            goto fail;
        out += end - in_blk;
        pos = boff + end;
    }
fail:
    free(scratch);
    return rc;
}
