#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# ibpshim: what the selectors of an ibp-pack file cost against their entropy.
#
# A packed row stores a selector per word (1 bit with one mask set, else 2): which mask set the
# word matched, or 0 for a word stored whole (codec/FORMAT.md).  This reads every packed block's
# selector stream and prints, per file, how often each selector value occurs, its entropy over
# the whole file and per column (the value's entropy given the word's column), and what coding
# the selectors at those entropies would take off the file's ratio (compressed / original size).
# Two forms a warp can decode are counted too: "plane", a bit a word saying whether it took its
# column's commonest value, the other words' values at a fixed width after; and "flags", a bit
# for every 8 words of a block's selectors saying all 8 took it, the plane's bits only for the
# other groups.
#
#   tools/selector-stats.py FILE.ibp...  [--json]
import argparse
import json
import math
import struct
import sys
from collections import Counter

FILE_MAGIC = 0x46504249  # "IBPF"
BLOCK_RAW = 0x1


def entropy(counts):
    total = sum(counts.values())
    return -sum(v / total * math.log2(v / total) for v in counts.values() if v) if total else 0.0


def stats(path):
    data = open(path, 'rb').read()
    magic, _, _, orig_len, _, nblocks, plan_off, _, table_off, _ = struct.unpack_from('<IHHQIIIIQQ', data, 0)
    if magic != FILE_MAGIC:
        raise ValueError('%s: not an ibp-pack file' % path)
    word, nsets = struct.unpack_from('<BB', data, plan_off + 6)
    columns, row_words = struct.unpack_from('<II', data, plan_off + 8)
    sel_bits = 1 if nsets == 1 else 2
    overall, per_column = Counter(), [Counter() for _ in range(columns)]
    blocks = []  # each packed block's selectors in order, as (column, value)
    for b in range(nblocks):
        offset, _, _ = struct.unpack_from('<QII', data, table_off + 16 * b)
        blen, _, flags, phase, rowflag_off, _, sel_off, _ = struct.unpack_from('<8I', data, offset)
        if flags & BLOCK_RAW:
            continue
        words = blen // word
        sels = []
        for r in range((words + row_words - 1) // row_words):
            if not (data[offset + rowflag_off + r // 8] >> (r % 8)) & 1:
                continue
            for j in range(r * row_words, min(words, (r + 1) * row_words)):
                bit = len(sels) * sel_bits
                v = (data[offset + sel_off + bit // 8] >> (bit % 8)) & ((1 << sel_bits) - 1)
                col = (phase + j) % columns
                overall[v] += 1
                per_column[col][v] += 1
                sels.append((col, v))
        blocks.append(sels)
    n = sum(overall.values())
    h = entropy(overall)
    h_col = sum(sum(c.values()) * entropy(c) for c in per_column) / n if n else 0.0
    # The forms a warp can decode, each column's commonest value first: a plane bit a word, the
    # others' values after it in ceil(log2(K)) bits (K: the values besides the commonest); with
    # flags, a bit a group of 8 and plane bits only for groups not all commonest.
    common = [max(c, key=c.get) if c else 0 for c in per_column]
    rest_bits = math.ceil(math.log2(nsets)) if nsets > 1 else 0
    others = sum(sum(c.values()) - c[common[i]] for i, c in enumerate(per_column))
    plane_bits = n + rest_bits * others
    flag_bits = rest_bits * others
    for sels in blocks:
        for g in range(0, len(sels), 8):
            group = sels[g:g + 8]
            flag_bits += 1 + (0 if all(v == common[c] for c, v in group) else len(group))
    orig_bits = 8 * orig_len if orig_len else 1
    return {
        'file': path,
        'word_size': word,
        'mask_sets': nsets,
        'columns': columns,
        'ratio': len(data) / orig_len if orig_len else 0.0,
        'selectors': n,
        'selector_bits': sel_bits,
        'histogram': {str(v): overall[v] for v in sorted(overall)},
        'entropy_bits': h,
        'entropy_bits_per_column': h_col,
        'plane_bits': plane_bits / n if n else 0.0,
        'flags_bits': flag_bits / n if n else 0.0,
        'ratio_saved_at_entropy': n * (sel_bits - h) / orig_bits,
        'ratio_saved_at_column_entropy': n * (sel_bits - h_col) / orig_bits,
        'ratio_saved_plane': (n * sel_bits - plane_bits) / orig_bits,
        'ratio_saved_flags': (n * sel_bits - flag_bits) / orig_bits,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument('files', nargs='+')
    ap.add_argument('--json', action='store_true')
    args = ap.parse_args()
    rows = [stats(f) for f in args.files]
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return
    print('| file | W | K | C | ratio | selectors (value: share) | bits | entropy | given the column | '
          'plane | flags | off the ratio: entropy | given the column | plane | flags |')
    print('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|')
    for r in rows:
        shares = ', '.join('%s: %.3f' % (v, c / r['selectors']) for v, c in r['histogram'].items())
        print('| %s | %d | %d | %d | %.4f | %s | %d | %.2f | %.2f | %.2f | %.2f | %.4f | %.4f | %.4f | %.4f |' %
              (r['file'].rsplit('/', 1)[-1], r['word_size'], r['mask_sets'], r['columns'], r['ratio'], shares,
               r['selector_bits'], r['entropy_bits'], r['entropy_bits_per_column'], r['plane_bits'],
               r['flags_bits'], r['ratio_saved_at_entropy'], r['ratio_saved_at_column_entropy'],
               r['ratio_saved_plane'], r['ratio_saved_flags']))


if __name__ == '__main__':
    main()
