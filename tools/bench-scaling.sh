#!/bin/bash
# SPDX-License-Identifier: MIT
# ibpshim: the scaling benchmarks on a GPU machine: ibp-bench over copy sizes 1 MiB .. 8 GiB of
# one tensor and over compressed fractions 0.1 .. 1.0 (tools/make-invariant.py), as JSON lines,
# then the plots and tables of tools/plot-scaling.py where matplotlib is there.
#
#   tools/bench-scaling.sh BUILD_DIR TENSOR OUT_DIR [--sizes "1M 4M ..."] [--iters N]
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: tools/bench-scaling.sh BUILD_DIR TENSOR OUT_DIR [--sizes LIST] [--iters N]" >&2; exit 2; }
build=$1 tensor=$2 out=$3
shift 3
sizes="1M 4M 16M 64M 256M 1G 4G 8G"
iters=9
while [ $# -gt 0 ]; do
    case $1 in
        --sizes) sizes=$2; shift 2 ;;
        --iters) iters=$2; shift 2 ;;
        *) echo "bench-scaling: unknown option $1" >&2; exit 2 ;;
    esac
done
here=$(cd "$(dirname "$0")" && pwd)
bench=$build/tools/ibp-bench
[ -x "$bench" ] || { echo "bench-scaling: $bench not built" >&2; exit 1; }
mkdir -p "$out"
: > "$out/size.jsonl"
for s in $sizes; do
    echo "bench-scaling: $(basename "$tensor") at $s" >&2
    "$bench" "$tensor" --size "$s" --iters "$iters" --json >> "$out/size.jsonl"
done
python3 "$here/make-invariant.py" "$out/inv" --sweep >&2
: > "$out/ratio.jsonl"
for f in "$out"/inv/inv-v*.bin; do
    echo "bench-scaling: $(basename "$f") at 256M" >&2
    "$bench" "$f" --size 256M --iters "$iters" --json >> "$out/ratio.jsonl"
done
rm -rf "$out/inv"
python3 "$here/plot-scaling.py" "$out/size.jsonl" "$out/ratio.jsonl" -o "$out" || true
