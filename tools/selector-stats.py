#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# ibpshim: what the selectors of an ibp-pack file cost against their entropy.
#
# A packed row stores a selector per word (1 bit with one mask set, else 2): which mask set the
# word matched, or 0 for a word stored whole (codec/FORMAT.md).  This reads every packed block's
# selector stream and prints, per file, how often each selector value occurs, its entropy over
# the whole file and per column (the value's entropy given the word's column), and what coding
# the selectors at those entropies would take off the file's ratio (compressed / original size).
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
    for b in range(nblocks):
        offset, _, _ = struct.unpack_from('<QII', data, table_off + 16 * b)
        blen, _, flags, phase, rowflag_off, _, sel_off, _ = struct.unpack_from('<8I', data, offset)
        if flags & BLOCK_RAW:
            continue
        words = blen // word
        k = 0  # selectors read so far
        for r in range((words + row_words - 1) // row_words):
            if not (data[offset + rowflag_off + r // 8] >> (r % 8)) & 1:
                continue
            for j in range(r * row_words, min(words, (r + 1) * row_words)):
                bit = k * sel_bits
                v = (data[offset + sel_off + bit // 8] >> (bit % 8)) & ((1 << sel_bits) - 1)
                overall[v] += 1
                per_column[(phase + j) % columns][v] += 1
                k += 1
    n = sum(overall.values())
    h = entropy(overall)
    h_col = sum(sum(c.values()) * entropy(c) for c in per_column) / n if n else 0.0
    file_ratio = len(data) / orig_len if orig_len else 0.0
    saved = lambda bits: n * (sel_bits - bits) / 8 / orig_len if orig_len else 0.0  # noqa: E731
    return {
        'file': path,
        'word_size': word,
        'mask_sets': nsets,
        'columns': columns,
        'ratio': file_ratio,
        'selectors': n,
        'selector_bits': sel_bits,
        'histogram': {str(v): overall[v] for v in sorted(overall)},
        'entropy_bits': h,
        'entropy_bits_per_column': h_col,
        'ratio_saved_at_entropy': saved(h),
        'ratio_saved_at_column_entropy': saved(h_col),
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
    print('| file | W | K | C | ratio | selectors (value: share) | bits | entropy | per column | '
          'off the ratio at entropy | per column |')
    print('|---|---|---|---|---|---|---|---|---|---|---|')
    for r in rows:
        shares = ', '.join('%s: %.3f' % (v, c / r['selectors']) for v, c in r['histogram'].items())
        print('| %s | %d | %d | %d | %.4f | %s | %d | %.2f | %.2f | %.4f | %.4f |' %
              (r['file'].rsplit('/', 1)[-1], r['word_size'], r['mask_sets'], r['columns'], r['ratio'], shares,
               r['selector_bits'], r['entropy_bits'], r['entropy_bits_per_column'], r['ratio_saved_at_entropy'],
               r['ratio_saved_at_column_entropy']))


if __name__ == '__main__':
    main()
