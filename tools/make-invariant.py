#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# ibpshim: writes synthetic tensors whose invariance (and so IBP ratio) is set by hand.
"""Synthetic data for the scaling benchmarks: 32-bit words whose low V bits are random and whose
other bits are one fixed pattern (a few words in a thousand, `--noise`, are random throughout,
so the codec's whole-word path is taken too).  IBP then stores about V + 1 bits of each 32, a
compressed fraction of about (V + 1) / 32; V = 32 is incompressible.

  tools/make-invariant.py OUT --variant-bits V [--bytes N] [--noise P] [--seed S]
  tools/make-invariant.py DIR --sweep        one file a fraction 0.1 .. 1.0: DIR/inv-vNN.bin

Prints one line per file: name, variant bits, the fraction expected."""
import argparse
import os
import sys

import numpy as np


def make(path, variant_bits, nbytes, noise, seed):
    rng = np.random.default_rng(seed)
    n = nbytes // 4
    mask = (1 << variant_bits) - 1 if variant_bits < 32 else 0xFFFFFFFF
    fixed = np.uint32(0x3F8A5000) & np.uint32(~mask & 0xFFFFFFFF)
    words = rng.integers(0, 1 << 32, size=n, dtype=np.uint64).astype(np.uint32)
    words = (words & np.uint32(mask)) | fixed
    if noise > 0:
        hit = rng.random(n) < noise
        words[hit] = rng.integers(0, 1 << 32, size=int(hit.sum()), dtype=np.uint64).astype(np.uint32)
    with open(path, "wb") as f:
        f.write(words.astype("<u4").tobytes())
    print(f"{path} variant_bits={variant_bits} expected_fraction={min(1.0, (variant_bits + 1) / 32):.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="output file, or a folder with --sweep")
    ap.add_argument("--variant-bits", type=int, default=8, help="random low bits of each 32-bit word (0-32)")
    ap.add_argument("--bytes", type=int, default=4 << 20, help="file size (default 4 MiB; ibp-bench tiles it)")
    ap.add_argument("--noise", type=float, default=0.001, help="fraction of words random throughout")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sweep", action="store_true", help="files for fractions 0.1, 0.2 .. 1.0")
    a = ap.parse_args()
    if not 0 <= a.variant_bits <= 32:
        sys.exit("make-invariant: --variant-bits must be 0..32")
    if a.bytes < 4:
        sys.exit("make-invariant: --bytes must be at least 4")
    if not a.sweep:
        make(a.out, a.variant_bits, a.bytes, a.noise, a.seed)
        return
    os.makedirs(a.out, exist_ok=True)
    for tenth in range(1, 11):
        v = 32 if tenth == 10 else round(tenth * 3.2) - 1
        make(os.path.join(a.out, f"inv-v{v:02d}.bin"), v, a.bytes, a.noise, a.seed + tenth)


if __name__ == "__main__":
    main()
