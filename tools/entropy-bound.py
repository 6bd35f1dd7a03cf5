#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# ibpshim: what a form that entropy-codes byte columns would compress a tensor file to.
#
# Reads each file as words of W bytes (from the name's dtype suffix, _f32, _bf16, _f64, _i32,
# _u8, or --word) cut into blocks of --block bytes, and prints, per file, the ratio (compressed /
# original bytes) of three forms whose coded bytes take their order-0 entropy within each block:
#   top     the word's most significant byte (sign and exponent bits of a float) coded, the
#           other bytes stored as they are;
#   all     every byte column coded;
#   file    every byte column coded with one table for the whole file (the manifest's
#           "byte-column entropy", no per-block overhead).
# "top" and "all" are also given with what such a block would carry beside its codes: a table
# of 256 frequencies of 12 bits a coded column, --lanes interleaved coder states of 4 bytes a
# coded column (the independent streams a GPU decodes in parallel) and a 64-byte header.  An
# entropy coder gets within a fraction of a percent of these sizes; invariant bit packing
# (docs/BENCHMARKS.md) gets what its masks and selectors allow.
#
#   tools/entropy-bound.py FILE... [--word W] [--block BYTES] [--lanes N] [--json]
import argparse
import json
import math
import os
import re
import sys
from collections import Counter

DTYPE_WORD = {"f64": 8, "i64": 8, "f32": 4, "i32": 4, "bf16": 2, "f16": 2, "i16": 2, "u8": 1, "i8": 1}


def entropy_bits(data):
    """Order-0 entropy of the bytes of data, in bits, summed over them."""
    n = len(data)
    if not n:
        return 0.0
    return -sum(c * math.log2(c / n) for c in Counter(data).values())


def word_size(path, asked):
    if asked:
        return asked
    m = re.search(r"_(f64|i64|f32|i32|bf16|f16|i16|u8|i8)(?:_|\.|$)", os.path.basename(path))
    if not m:
        sys.exit("entropy-bound: no dtype in the name of %s: give --word" % path)
    return DTYPE_WORD[m.group(1)]


def bound(path, w, block, lanes):
    with open(path, "rb") as f:
        data = f.read()
    data = data[: len(data) // w * w]
    n = len(data)
    if not n:
        sys.exit("entropy-bound: %s holds no whole word" % path)
    top = everything = 0.0
    blocks = 0
    for s in range(0, n, block):
        b = data[s:s + block]
        cols = [entropy_bits(b[c::w]) for c in range(w)]
        top += cols[w - 1] + 8 * (len(b) - len(b) // w)
        everything += sum(cols)
        blocks += 1
    whole = sum(entropy_bits(data[c::w]) for c in range(w))
    # beside the codes, in bits: per block a header, and per coded column a table and the states
    header, table, states = 64 * 8, 256 * 12, lanes * 32
    top_over = blocks * (header + table + states)
    all_over = blocks * (header + w * (table + states))
    bits = 8.0 * n
    return {
        "file": os.path.basename(path), "word": w, "block": block, "lanes": lanes, "bytes": n,
        "top": top / bits, "top_overhead": (top + top_over) / bits,
        "all": everything / bits, "all_overhead": (everything + all_over) / bits,
        "file_table": whole / bits,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--word", type=int, choices=[1, 2, 4, 8], help="word size (default: from the name)")
    ap.add_argument("--block", type=int, default=256 << 10, help="block bytes (default 256 KiB)")
    ap.add_argument("--lanes", type=int, default=128, help="coder states a coded column (default 128)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.block <= 0 or args.lanes <= 0:
        sys.exit("entropy-bound: --block and --lanes take a positive number")
    rows = []
    for path in args.files:
        w = word_size(path, args.word)
        if args.block % w:
            sys.exit("entropy-bound: --block must be a multiple of the word size %d" % w)
        rows.append(bound(path, w, args.block, args.lanes))
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print("| file | W | top coded | + overhead | all coded | + overhead | one table a file |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %d | %.4f | %.4f | %.4f | %.4f | %.4f |" % (
            r["file"], r["word"], r["top"], r["top_overhead"], r["all"], r["all_overhead"], r["file_table"]))


if __name__ == "__main__":
    main()
