#!/bin/sh
# SPDX-License-Identifier: MIT
# ibpshim: compute-sanitizer's memcheck over one decode of each segmented kernel on the real
# tensors: ibp-bench at 4 MiB, one timed run of every path, each decode verified (fp32 weights:
# one column of 8-byte words stored through shared memory; bf16: one column of 4-byte words;
# uint8 images and float64 features: several columns; int32 triples: predictors); then racecheck
# and synccheck over the fp32 weights, the bf16 weights and the float64 features, whose kernels
# store through a buffer in shared memory; then all three over the fp32 and bf16 weights
# top-byte coded (ibp_k_decode_top, its slot table in shared memory).  Fails on any
# error a tool reports; exits 77 (skipped) without compute-sanitizer, a GPU or the tensors.
# usage: memcheck.sh CUDA_ROOT IBP_BENCH, run through real_cuda.sh (the real driver, never the fake's)
set -u
root=$1
bench=$2
san=$(command -v compute-sanitizer || true)
[ -n "$san" ] || [ ! -x "$root/bin/compute-sanitizer" ] || san=$root/bin/compute-sanitizer
if [ -z "$san" ]; then
    echo "memcheck skipped: no compute-sanitizer on PATH or in $root/bin"
    exit 77
fi
data=${IBPSHIM_TEST_DATA:-}
files="ocr_det_all_f32 ocr_rec_all_bf16 fashion_mnist_5000x784_u8 digits_1797x64_f64 movielens_100004x3_i32"
first=
for f in $files; do
    [ -f "$data/$f.bin" ] && { first=$data/$f.bin; break; }
done
if [ -z "$first" ]; then
    echo "memcheck skipped: real tensors absent (set IBPSHIM_TEST_DATA to the data folder)"
    exit 77
fi
"$bench" "$first" --size 1M --iters 1 > /dev/null 2>&1
rc=$?
if [ "$rc" = 77 ]; then
    echo "memcheck skipped: no CUDA driver or GPU"
    exit 77
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=0
# check TOOL FILE [ARGS...]: one sanitizer run of ibp-bench over FILE.
check() {
    tool=$1
    f=$2
    shift 2
    if "$san" --tool "$tool" --error-exitcode 99 "$bench" "$data/$f.bin" --size 4M --iters 1 "$@" > "$log" 2>&1; then
        echo "$tool: $f $*: $(grep -m1 'SUMMARY' "$log")"
    else
        echo "$tool: $f $*: FAILED (exit $?)"
        tail -40 "$log"
        failed=1
    fi
}
for f in $files; do
    [ -f "$data/$f.bin" ] && check memcheck "$f"
done
for f in ocr_det_all_f32 ocr_rec_all_bf16 digits_1797x64_f64; do
    if [ -f "$data/$f.bin" ]; then
        check racecheck "$f"
        check synccheck "$f"
    fi
done
# The weights top-byte coded: ibp_k_decode_top, its slot table in shared memory.
for f in ocr_det_all_f32 ocr_rec_all_bf16; do
    if [ -f "$data/$f.bin" ]; then
        check memcheck "$f" --top-coded
        check racecheck "$f" --top-coded
        check synccheck "$f" --top-coded
    fi
done
exit $failed
