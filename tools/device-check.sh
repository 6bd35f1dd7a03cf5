#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# ibpshim: on a GPU machine, builds the project, runs the preload and gpu suites, the PyTorch
# pass-through check and the hook benchmark, and prints a short table last.
#
# usage: tools/device-check.sh [--debs DIR] [--build DIR] [--logs DIR]
#   --debs DIR  Debian .deb files of missing build dependencies (uthash-dev, libinih-dev, libinih1,
#               libunwind-dev, libunwind8, libgtest-dev, libjansson-dev, libjansson4, pkgconf...),
#               unpacked into a private prefix
#   --build DIR build directory (default build-device)
#   --logs DIR  where full logs go (default $OUT when set, else ./device-logs)
#   --data DIR  the real tensors (default ../shared/data); the decode benchmark tiles them
#   --bench-bytes N  size of the tiles the decode benchmark times (default 512 MiB)
#   --no-bench  skip the decode benchmark and the hook benchmark
#   --e2e       run examples/torch_e2e.py without the shim, under it (path auto and dma) and with
#               PyTorch's cudaHostRegister pinned allocator
#   --e2e-modes "M..."  which of plain, auto, dma, register to run (default all four)
#   --no-tests  skip the meson suites and the PyTorch pass-through check
set -uo pipefail

debs=""
build=build-device
data=../shared/data
bench_bytes=$((512 << 20))
bench=1
e2e=0
tests=1
e2e_modes="plain auto dma register"
logs=${OUT:-./device-logs}
while [ $# -gt 0 ]; do
    case "$1" in
        --debs) debs=$2; shift 2 ;;
        --build) build=$2; shift 2 ;;
        --logs) logs=$2; shift 2 ;;
        --data) data=$2; shift 2 ;;
        --bench-bytes) bench_bytes=$2; shift 2 ;;
        --no-bench) bench=0; shift ;;
        --e2e) e2e=1; shift ;;
        --e2e-modes) e2e_modes=$2; shift 2 ;;
        --no-tests) tests=0; shift ;;
        *) echo "device-check: unknown argument $1" >&2; exit 2 ;;
    esac
done
mkdir -p "$logs"
declare -a rows=()
row() { rows+=("$(printf '%-34s %s' "$1" "$2")"); }

if [ -n "$debs" ]; then
    prefix=/tmp/ibpshim-deps
    rm -rf "$prefix" && mkdir -p "$prefix"
    for deb in "$debs"/*.deb; do dpkg -x "$deb" "$prefix"; done
    # Debian's .pc files name /usr; point them at the private prefix.
    find "$prefix" -name '*.pc' -exec sed -i "s#=/usr#=$prefix/usr#g" {} +
    multiarch=$prefix/usr/lib/x86_64-linux-gnu
    export PKG_CONFIG_PATH=$multiarch/pkgconfig:$prefix/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
    export CPATH=$prefix/usr/include${CPATH:+:$CPATH}
    export LIBRARY_PATH=$multiarch${LIBRARY_PATH:+:$LIBRARY_PATH}
    export LD_LIBRARY_PATH=$multiarch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    if ! command -v pkg-config >/dev/null && [ -x "$prefix/usr/bin/pkgconf" ]; then
        ln -sf "$prefix/usr/bin/pkgconf" "$prefix/usr/bin/pkg-config"
        export PATH=$prefix/usr/bin:$PATH
    fi
fi

nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader \
    > "$logs/gpu.txt" 2>&1
row "GPU" "$(head -1 "$logs/gpu.txt")"
rm -f "$logs/gpu.txt"

arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
start=$(date +%s)
# The suites read the tensors from --data (meson's test environment sets IBPSHIM_TEST_DATA);
# --reconfigure applies that to a build directory kept from an earlier run.
data_abs=$(cd "$data" 2>/dev/null && pwd || echo "$data")
reconfigure=""
[ ! -f "$build/meson-private/coredata.dat" ] || reconfigure=--reconfigure
if meson setup $reconfigure "$build" -Dkernel_arch="${arch:-90}" -Dwerror=true -Dtest_data="$data_abs" \
       > "$logs/build.log" 2>&1 &&
   meson compile -C "$build" >> "$logs/build.log" 2>&1; then
    row "build" "ok ($(( $(date +%s) - start )) s, kernel_arch=${arch:-90})"
else
    row "build" "FAILED (see build.log)"
    tail -30 "$logs/build.log"
    printf '%s\n' "${rows[@]}"
    exit 1
fi

export IBPSHIM_TEST_DATA=$(cd "$data" 2>/dev/null && pwd)
lib=$(pwd)/$build/libibpshim.so
py=${PYTHON:-python3}
suites="unit preload apps gpu"
[ "$tests" = 1 ] || suites=""
for suite in $suites; do
    meson test -C "$build" --suite "$suite" --print-errorlogs > "$logs/test-$suite.log" 2>&1
    summary=$(grep -E '^(Ok|Fail|Skipped|Timeout):' "$logs/test-$suite.log" | tr -s ' ' | tr '\n' ' ')
    row "meson test --suite $suite" "$summary"
done
# The decode check runs with the suites; its timing part only with the benchmarks.
if [ -n "$suites" ]; then
    cat "$logs"/test-*.log > "$logs/tests.log" && rm -f "$logs"/test-*.log
    [ "$bench" = 1 ] || bench_bytes=0
    "$build/tests/gpu/gpu_decode_check" "$bench_bytes" > "$logs/decode.log" 2>&1
    row "decode check" "$(tail -1 "$logs/decode.log")"
fi
[ -z "$suites" ] || row "kernel selftest" "$(grep -h -E '^device [0-9]+:' "$build/meson-logs/testlog.txt" | head -1)"

if [ "$tests" = 1 ] && $py -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    $py examples/torch_passthrough.py > "$logs/torch-plain.json" 2> "$logs/torch.log"
    IBPSHIM_LOG_LEVEL=info LD_PRELOAD=$lib $py examples/torch_passthrough.py \
        > "$logs/torch-shim.json" 2>> "$logs/torch.log"
    PYTORCH_CUDA_ALLOC_CONF=pinned_use_cuda_host_register:True IBPSHIM_LOG_LEVEL=info LD_PRELOAD=$lib \
        $py examples/torch_passthrough.py > "$logs/torch-shim-register.json" 2>> "$logs/torch.log"
    verdict=$($py - "$logs" <<'PY'
import json, sys
d = sys.argv[1]
load = lambda n: json.load(open("%s/%s" % (d, n)))
plain, shim, reg = load("torch-plain.json"), load("torch-shim.json"), load("torch-shim-register.json")
same = plain["results"] == shim["results"] == reg["results"]
counts = shim["shim"] or {}
rc = reg["shim"] or {}
print("%s; shim saw %s; register mode saw cudaHostRegister=%d" % (
    "identical" if same else "DIFFERENT",
    ", ".join("%s=%d" % (k, v["calls"]) for k, v in sorted(counts.items())),
    rc.get("cudaHostRegister", {}).get("calls", 0)))
PY
)
    row "PyTorch with/without shim" "$verdict"
    row "PyTorch bytes (shim report)" "$(grep -m1 -E 'sent|saved' "$logs/torch.log" | cut -c1-120)"
    cat "$logs"/torch-*.json >> "$logs/torch.log" && rm -f "$logs"/torch-*.json
else
    row "PyTorch" "not available"
fi

if [ "$e2e" = 1 ]; then
    : > "$logs/e2e.log"
    for mode in $e2e_modes; do
        case $mode in
            plain) env_args="" ;;
            auto) env_args="LD_PRELOAD=$lib IBPSHIM_POLICY_COMPRESSOR_THREADS=8" ;;
            dma) env_args="LD_PRELOAD=$lib IBPSHIM_POLICY_COMPRESSOR_THREADS=8 IBPSHIM_TRANSFER_PATH=dma" ;;
            register) env_args="LD_PRELOAD=$lib IBPSHIM_POLICY_COMPRESSOR_THREADS=8
                PYTORCH_CUDA_ALLOC_CONF=pinned_use_cuda_host_register:True" ;;
        esac
        echo "== $mode" >> "$logs/e2e.log"
        # shellcheck disable=SC2086
        env $env_args $py examples/torch_e2e.py --out "$logs/e2e-$mode.json" >> "$logs/e2e.log" 2>&1
        row "torch_e2e $mode" "$($py - "$logs/e2e-$mode.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print("no result (%s)" % e); sys.exit()
w, t = r["weight_offload"], r["totals"]
print("identical=%s offload %.1f GB/s on (%.1f before steady), %.1f off (x%.3f) transient %.1f ms/step "
      "sent %.0f%% of %.1f GiB" % (
    r["all_identical"], w["gbps_on"], w.get("gbps_on_early", 0.0), w["gbps_off"], w["speedup"], r["transient"]["mean_step_s"] * 1e3,
    100.0 * t["sent"] / max(t["requested"], 1), t["requested"] / 2**30))
PY
)"
    done
    cat "$logs"/e2e-*.json >> "$logs/e2e.log" 2>/dev/null && rm -f "$logs"/e2e-*.json
fi

[ "$bench" = 1 ] || { printf '%s\n' "${rows[@]}" | tee "$logs/summary.txt"; exit 0; }
for f in "$data"/*.bin; do
    [ -f "$f" ] || continue
    "$build/tools/ibp-bench" "$f" --size "$bench_bytes" >> "$logs/decode.log" 2>&1
    row "ibp-bench $(basename "$f" .bin)" "$(tail -12 "$logs/decode.log" | grep 'DMA + decode, pipelined' | tr -s ' ')"
done
LD_PRELOAD=$lib "$build/tools/ibp-hookbench" --calls 200000 > "$logs/hookbench.txt" 2>&1
LD_PRELOAD=$lib "$build/tools/ibp-hookbench" --calls 200000 --json >> "$logs/hookbench.txt" 2>&1
row "hook overhead (200k calls)" "$(grep 'added by the hook' "$logs/hookbench.txt" | sed 's/^ *//')"
for call in d2h memset drv-d2h drv-memset relaxed-query launch drv-launch; do
    LD_PRELOAD=$lib "$build/tools/ibp-hookbench" --calls 200000 --call $call --json >> "$logs/hookbench.txt" 2>&1
    row "hook overhead, $call (200k calls)" "$(tail -1 "$logs/hookbench.txt" | grep -o '"added_ns": [-0-9.]*')"
done
# The host time of a compressed copy of a whole 32 MiB region, against the same copy raw: every
# copy compressed (path = dma), and as auto sends them (where it measures the compressed path
# slower than a plain copy, most go raw without a plan).
for path in dma auto; do
    LD_PRELOAD=$lib IBPSHIM_POLICY_MIN_BYTES=1MiB IBPSHIM_POLICY_MIN_COPIES=2 IBPSHIM_TRANSFER_PATH=$path \
        "$build/tools/ibp-hookbench" --calls 1000 --call h2d-region --json >> "$logs/hookbench.txt" 2>&1
    row "host time, h2d-region, path = $path (1000 copies)" \
        "$(tail -1 "$logs/hookbench.txt" | grep -o '"added_ns": [-0-9.]*')"
done
# The launch hooks read every launch's arguments while a region is registered.
for call in launch drv-launch; do
    LD_PRELOAD=$lib IBPSHIM_POLICY_MIN_BYTES=1MiB "$build/tools/ibp-hookbench" --calls 200000 --call $call \
        --region $((64 << 20)) --json >> "$logs/hookbench.txt" 2>&1
    row "hook overhead, $call, a region (200k)" "$(tail -1 "$logs/hookbench.txt" | grep -o '"added_ns": [-0-9.]*')"
done
"$build/tools/ibp-hookbench" --calls 100000 > "$logs/hookbench-noshim.txt" 2>&1
row "same, without the shim (noise)" "$(grep 'added by the hook' "$logs/hookbench-noshim.txt" | sed 's/^ *//')"
cat "$logs/hookbench-noshim.txt" >> "$logs/hookbench.txt" && rm -f "$logs/hookbench-noshim.txt"

{
    echo
    echo "== ibpshim device check $(date -u +%Y-%m-%dT%H:%MZ) =="
    printf '%s\n' "${rows[@]}"
} | tee "$logs/summary.txt"
