/* SPDX-License-Identifier: MIT
 * ibpshim tests: a block as format version 1 (no group index) or 2 (no carries) wrote it, for the
 * tests that check that such blocks still decode, on the CPU and on the GPU. */
#ifndef IBP_TESTS_STRIP_INDEX_H
#define IBP_TESTS_STRIP_INDEX_H

#include <stdint.h>
#include <string.h>

#include "codec/format.h"

/* Cuts a block's sections between its first `keep` bytes after the header and its row flags, in
 * place (the sections after move down, its offsets and length shrink) and sets its layout flags. */
static inline uint32_t ibp_test_strip_sections(uint8_t *blk, uint32_t keep, uint32_t flags)
{
    IbpBlockHeader h;
    memcpy(&h, blk, sizeof(h));
    if (!(h.flags & IBP_BLOCK_INDEXED))
        return h.comp_len;
    const uint32_t cut = h.rowflag_off - IBP_BLOCK_HEADER_SIZE - keep;
    memmove(blk + IBP_BLOCK_HEADER_SIZE + keep, blk + IBP_BLOCK_HEADER_SIZE + keep + cut,
            h.comp_len - IBP_BLOCK_HEADER_SIZE - keep - cut);
    h.flags = flags | (h.flags & IBP_BLOCK_SELFLAGS); /* the selectors' form stays */
    h.comp_len -= cut;
    h.rowflag_off -= cut;
    h.payload_off -= cut;
    h.sel_off -= cut;
    h.tail_off -= cut;
    memcpy(blk, &h, sizeof(h));
    return h.comp_len;
}

/* Takes the group index and its carries out of the block at blk in place (its sections move down,
 * its offsets and length shrink, the INDEXED and CARRIES flags go) and returns the block's length;
 * a block without an index is left as it is. */
static inline uint32_t ibp_test_strip_index(uint8_t *blk)
{
    return ibp_test_strip_sections(blk, 0, 0);
}

/* Takes only the carries out (a block as format version 2 wrote it); word_size: the plan's. */
static inline uint32_t ibp_test_strip_carries(uint8_t *blk, uint32_t word_size)
{
    IbpBlockHeader h;
    memcpy(&h, blk, sizeof(h));
    return ibp_test_strip_sections(blk, ibp_fmt_index_len(h.orig_len / word_size), IBP_BLOCK_INDEXED);
}

#endif /* IBP_TESTS_STRIP_INDEX_H */
