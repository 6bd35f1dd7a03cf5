#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# ibpshim: reproduces the codec ratio and speed tables of docs/BENCHMARKS.md.
"""Usage: codec-table.py IBP_PACK DATA_DIR [--threads N] [--no-zipnn] [--no-bench]

Runs `ibp-pack check --json` (ratio with every byte of metadata counted, round trip verified)
and `ibp-pack bench --json` on every tensor listed in DATA_DIR/MANIFEST.md, measures ZipNN on
the same bytes when the `zipnn` package is importable, and prints Markdown tables next to the
MANIFEST's reference-IBP, zstd -1 and byte-column entropy columns.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

ZIPNN_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


def read_manifest(data_dir):
    rows = []
    with open(os.path.join(data_dir, "MANIFEST.md"), encoding="utf-8") as f:
        for line in f:
            if not line.startswith("| ") or ".bin" not in line:
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows.append({"file": cells[0], "dtype": cells[1], "ref_ibp": float(cells[5]),
                         "zstd1": float(cells[6]), "entropy": float(cells[7])})
    return rows


def ibp_pack_json(ibp_pack, args):
    out = subprocess.run([ibp_pack] + args + ["--json"], check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def zipnn_ratio(path, dtype):
    """ZipNN ratio and whether its decompression gave the same bytes; None where it has no mode
    for the dtype (it handles float32, bfloat16 and float16 only)."""
    if dtype not in ZIPNN_DTYPES:
        return None
    import warnings
    warnings.filterwarnings("ignore")
    from zipnn import ZipNN
    data = open(path, "rb").read()
    packed = ZipNN(input_format="byte", bytearray_dtype=ZIPNN_DTYPES[dtype]).compress(data)
    back = ZipNN(input_format="byte", bytearray_dtype=ZIPNN_DTYPES[dtype]).decompress(packed)
    return len(packed) / len(data), bytes(back) == data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ibp_pack")
    ap.add_argument("data_dir")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--no-zipnn", action="store_true")
    ap.add_argument("--no-bench", action="store_true")
    a = ap.parse_args()

    rows = read_manifest(a.data_dir)
    have_zipnn = False
    if not a.no_zipnn:
        try:
            import zipnn  # noqa: F401
            have_zipnn = True
        except ImportError:
            print("zipnn not importable: its column is left out", file=sys.stderr)

    print("| file | dtype | ibp-pack | ref IBP | ibp / ref | zstd -1 | byte-col entropy | ZipNN |")
    print("|---|---|---|---|---|---|---|---|")
    log_sum = 0.0
    for r in rows:
        path = os.path.join(a.data_dir, r["file"])
        res = ibp_pack_json(a.ibp_pack, ["check", path, "--threads", str(a.threads)])[0]
        if not res["ok"]:
            sys.exit(f"{r['file']}: round trip failed")
        ratio = res["ratio"]
        log_sum += math.log(ratio / r["ref_ibp"])
        z = "n/a (no mode for this dtype)"
        if have_zipnn:
            zr = zipnn_ratio(path, r["dtype"])
            if zr is not None:
                z = f"{zr[0]:.4f}" + ("" if zr[1] else " (decompressed bytes differ)")
        elif not a.no_zipnn:
            z = "not measured"
        print(f"| {r['file']} | {r['dtype']} | {ratio:.4f} | {r['ref_ibp']:.3f} | "
              f"{ratio / r['ref_ibp']:.3f} | {r['zstd1']:.3f} | {r['entropy']:.3f} | {z} |")
    print(f"\nGeometric mean of ibp-pack / reference IBP: {math.exp(log_sum / len(rows)):.4f}\n")

    if a.no_bench:
        return
    print(f"| file | plan | plan ms 1 thread | plan ms {a.threads} threads | reuse check ms | encode 1 thread | "
          f"encode {a.threads} threads | decode 1 thread | decode {a.threads} threads | reference decode 1 thread |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        path = os.path.join(a.data_dir, r["file"])
        plan = ibp_pack_json(a.ibp_pack, ["plan", path])[0]["plan"]
        b = ibp_pack_json(a.ibp_pack, ["bench", path, "--threads", str(a.threads)])[0]
        shape = f"W={plan['word_size']} C={plan['columns']} R={plan['row_words']} K={plan['mask_sets']}"
        xf = plan["zigzag_columns"] + plan["delta_columns"] + plan["xor_columns"]
        if xf:
            shape += f" xf={plan['delta_columns']}d/{plan['xor_columns']}x/{plan['zigzag_columns']}z"
        print(f"| {r['file']} | {shape} | {b['plan_ms_1t']:.1f} | {b['plan_ms_nt']:.1f} | {b['judge_ms']:.2f} | "
              f"{b['encode_gbps_1t']:.2f} | "
              f"{b['encode_gbps_nt']:.2f} | {b['decode_gbps_1t']:.2f} | {b['decode_gbps_nt']:.2f} | "
              f"{b['decode_reference_gbps_1t']:.2f} |")
        time.sleep(0.2)
    print(f"\nGB/s of original bytes; SIMD backend: {b['backend']}.")


if __name__ == "__main__":
    main()
