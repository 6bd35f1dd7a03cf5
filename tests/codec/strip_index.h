/* SPDX-License-Identifier: MIT
 * ibpshim tests: a block as format version 1 wrote it, for the tests that check that such blocks
 * (no group index) still decode, on the CPU and on the GPU. */
#ifndef IBP_TESTS_STRIP_INDEX_H
#define IBP_TESTS_STRIP_INDEX_H

#include <stdint.h>
#include <string.h>

#include "codec/format.h"

/* Takes the group index out of the block at blk in place (its sections move down, its offsets and
 * length shrink, the INDEXED flag goes) and returns the block's length; a block without an index
 * is left as it is. */
static inline uint32_t ibp_test_strip_index(uint8_t *blk)
{
    IbpBlockHeader h;
    memcpy(&h, blk, sizeof(h));
    if (!(h.flags & IBP_BLOCK_INDEXED))
        return h.comp_len;
    const uint32_t cut = h.rowflag_off - IBP_BLOCK_HEADER_SIZE;
    memmove(blk + IBP_BLOCK_HEADER_SIZE, blk + IBP_BLOCK_HEADER_SIZE + cut,
            h.comp_len - IBP_BLOCK_HEADER_SIZE - cut);
    h.flags = 0;
    h.comp_len -= cut;
    h.rowflag_off -= cut;
    h.payload_off -= cut;
    h.sel_off -= cut;
    h.tail_off -= cut;
    memcpy(blk, &h, sizeof(h));
    return h.comp_len;
}

#endif /* IBP_TESTS_STRIP_INDEX_H */
