#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# ibpshim: tools/entropy-bound.py on made-up files whose byte-column entropies are known.
"""Three files of 4-byte words in 4 KiB blocks: every word the same (no entropy anywhere), a top
byte taking two values equally often under random low bytes (1 bit of 8 in the top byte), and a
top byte that changes from block to block but is constant within each (0 bits a block, 2 bits
with one table for the file).  Checks each ratio and overhead the tool prints against the sizes
worked out by hand, and that it refuses a file with no dtype in its name.  Needs nothing but
Python."""
import json
import os
import random
import subprocess
import sys
import tempfile

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TOOL = os.path.join(ROOT, "tools", "entropy-bound.py")
BLOCK = 4096
WORDS = 64 * BLOCK // 4  # 64 blocks


def run(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)


def near(a, b, tol, what):
    if abs(a - b) > tol:
        sys.exit("entropy-bound check: %s is %.6f, expected %.6f" % (what, a, b))


def main():
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as d:
        same = os.path.join(d, "same_f32.bin")
        with open(same, "wb") as f:
            f.write(bytes([1, 2, 3, 4]) * WORDS)
        coin = os.path.join(d, "coin_f32.bin")
        with open(coin, "wb") as f:
            f.write(bytes(b for _ in range(WORDS) for b in (*rng.randbytes(3), 0x3f + (rng.random() < 0.5))))
        steps = os.path.join(d, "steps_f32.bin")
        with open(steps, "wb") as f:
            for blk in range(64):
                f.write(bytes([0, 0, 0, 0x40 + blk % 4]) * (BLOCK // 4))
        out = run(same, coin, steps, "--block", str(BLOCK), "--lanes", "8", "--json")
        if out.returncode:
            sys.exit("entropy-bound check: the tool failed: " + out.stderr)
        rows = {r["file"]: r for r in json.loads(out.stdout)}
        bits = 8.0 * WORDS * 4
        top_over = 64 * (64 * 8 + 256 * 12 + 8 * 32) / bits  # a header, a table and 8 states a block
        all_over = 64 * (64 * 8 + 4 * (256 * 12 + 8 * 32)) / bits
        # every word the same: nothing to code, the three low bytes of "top" stored as they are
        r = rows["same_f32.bin"]
        near(r["top"], 0.75, 1e-9, "same: top")
        near(r["all"], 0.0, 1e-9, "same: all")
        near(r["file_table"], 0.0, 1e-9, "same: one table")
        near(r["top_overhead"], 0.75 + top_over, 1e-9, "same: top + overhead")
        near(r["all_overhead"], all_over, 1e-9, "same: all + overhead")
        # a fair coin in the top byte: 1 bit of its 8, the random low bytes close to 8 bits each
        r = rows["coin_f32.bin"]
        near(r["top"], (24 + 1) / 32, 0.002, "coin: top")
        near(r["file_table"], (24 + 1) / 32, 0.002, "coin: one table")
        # a top byte constant within each block, four values over the file
        r = rows["steps_f32.bin"]
        near(r["top"], 0.75, 1e-9, "steps: top")
        near(r["all"], 0.0, 1e-9, "steps: all")
        near(r["file_table"], 2 / 32, 1e-9, "steps: one table")
        text = run(same, "--block", str(BLOCK))
        if text.returncode or "| same_f32.bin | 4 | 0.7500 |" not in text.stdout:
            sys.exit("entropy-bound check: the table lacks the file's row:\n" + text.stdout + text.stderr)
        bare = os.path.join(d, "weights.bin")
        with open(bare, "wb") as f:
            f.write(b"\0" * 16)
        refused = run(bare)
        if refused.returncode == 0 or "give --word" not in refused.stderr:
            sys.exit("entropy-bound check: a file with no dtype in its name was not refused")
    print("entropy-bound check: ok (3 files, 13 values)")


if __name__ == "__main__":
    main()
