#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# ibpshim: runs the example workloads under the shim and collects their JSON, one file per transfer path.
#
# usage: tools/run-workloads.sh [options] OUTDIR
#   --build DIR     build directory holding libibpshim.so (default build)
#   --lib PATH      the library to preload (default BUILD/libibpshim.so)
#   --quick         the demo sizes (256 MiB models and tables, fewer steps)
#   --paths "P..."  [transfer] path values to run under, each a full round (default "auto"; also dma,
#                   zerocopy)
#   --only "W..."   which workloads: offload (random init), offload-trained (trained-like init), table,
#                   lookup (the table read in chunks by a DLRM-like lookup), transient, streams (several
#                   streams at once) (default all six)
#   --table FILE    a real tensor file for stream_table.py and streams.py to tile (e.g.
#                   ../shared/data/ocr_det_all_f32.bin)
#   --weights PATH  a Llama-style checkpoint for offload_llm.py (both offload runs then use it)
#   --timeout S     seconds allowed per workload (default 600, quick 240)
#   --plot          also write PNG plots of the results into OUTDIR (tools/plot-scaling.py)
#
# OUTDIR gets, per path P: P.json ({"runs": [...]}: each workload's JSON with its exit status, run time
# and the shim's JSON transfer report) and P.log (everything the workloads printed); summary.txt holds
# the progress lines.  Both are rewritten after every workload, so a run cut short keeps what finished.
# A workload that fails or times out is recorded and the next one runs; the exit status is 1 if any
# failed, 77 if every one was skipped (no CUDA device), else 0.  IBPSHIM_* variables already set are
# passed on (IBPSHIM_POLICY_COMPRESSOR_THREADS defaults to 8 here); LD_LIBRARY_PATH must already reach
# the libraries the shim links (libinih, libunwind) where they are not installed.
set -u

build=build
lib=""
quick=0
paths="auto"
only="offload offload-trained table lookup transient streams"
table=""
weights=""
timeout_s=""
plot=0
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$2; shift 2 ;;
        --lib) lib=$2; shift 2 ;;
        --quick) quick=1; shift ;;
        --paths) paths=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        --table) table=$2; shift 2 ;;
        --weights) weights=$2; shift 2 ;;
        --timeout) timeout_s=$2; shift 2 ;;
        --plot) plot=1; shift ;;
        -h|--help) awk 'NR > 2 && /^#/ { sub(/^# ?/, ""); print; next } NR > 2 { exit }' "$0"; exit 0 ;;
        -*) echo "run-workloads: unknown option $1 (see --help)" >&2; exit 2 ;;
        *) [ -z "$out" ] || { echo "run-workloads: one OUTDIR only" >&2; exit 2; }; out=$1; shift ;;
    esac
done
[ -n "$out" ] || { echo "run-workloads: give the folder for the results (see --help)" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
[ -n "$lib" ] || lib=$build/libibpshim.so
case "$lib" in /*) ;; *) lib=$(pwd)/$lib ;; esac
if [ ! -f "$lib" ]; then
    echo "run-workloads: $lib not found; build the shim first (meson setup build;" \
        "meson compile -C build)" >&2
    exit 2
fi
missing=$(ldd "$lib" 2>/dev/null | grep 'not found' | tr -s ' \t' ' ')
if [ -n "$missing" ]; then
    echo "run-workloads: $lib cannot be loaded here: $missing; point LD_LIBRARY_PATH at them" >&2
    exit 2
fi
for p in $paths; do
    case $p in
        auto|dma|zerocopy) ;;
        *) echo "run-workloads: unknown path $p (auto, dma, zerocopy)" >&2; exit 2 ;;
    esac
done
for w in $only; do
    case $w in
        offload|offload-trained|table|lookup|transient|streams) ;;
        *) echo "run-workloads: unknown workload $w (offload, offload-trained, table, lookup, transient," \
               "streams)" >&2
           exit 2 ;;
    esac
done
if [ -n "$table" ] && [ ! -f "$table" ]; then
    echo "run-workloads: --table $table: no such file" >&2
    exit 2
fi
if [ -n "$weights" ] && [ ! -e "$weights" ]; then
    echo "run-workloads: --weights $weights: no such file or folder" >&2
    exit 2
fi
# The workloads run from the repository root.
case "$table" in ""|/*) ;; *) table=$(pwd)/$table ;; esac
case "$weights" in ""|/*) ;; *) weights=$(pwd)/$weights ;; esac
py=${PYTHON:-python3}
if ! $py -c 'import torch' 2>/dev/null; then
    echo "run-workloads: $py cannot import torch" >&2
    exit 2
fi
[ -n "$timeout_s" ] || { [ "$quick" = 1 ] && timeout_s=240 || timeout_s=600; }
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ibp-workloads.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
export IBPSHIM_POLICY_COMPRESSOR_THREADS=${IBPSHIM_POLICY_COMPRESSOR_THREADS:-8}
export PYTHONUNBUFFERED=1

size_args=()
[ "$quick" = 1 ] && size_args=(--quick)
weight_args=()
[ -n "$weights" ] && weight_args=(--weights "$weights")
table_args=()
[ -n "$table" ] && table_args=(--table "$table")

summary=$out/summary.txt
say() { echo "$*"; echo "$*" >> "$summary"; }
: > "$summary"
torch_version=$($py -c 'import torch; print(torch.__version__)')
say "run-workloads: $(date -u +%Y-%m-%dT%H:%MZ) shim $lib, torch $torch_version,"
say "  $([ "$quick" = 1 ] && echo quick || echo full) sizes, paths: $paths, workloads: $only, results in $out"
say "  $(env | grep '^IBPSHIM_' | sort | tr '\n' ' ')"

# Adds one workload's JSON, exit status and shim report to OUTDIR/P.json.
merge() {
    $py - "$@" <<'PY'
import json, os, sys
merged, name, rc, secs, result, report = sys.argv[1:7]
try:
    with open(merged) as f:
        doc = json.load(f)
except (OSError, ValueError):
    doc = {"runs": []}
try:
    with open(result) as f:
        run = json.load(f)
except (OSError, ValueError) as e:
    run = {"workload": name.split()[0], "label": name, "error": "no result JSON (%s)" % e}
run["exit_status"], run["seconds"], run["run_name"] = int(rc), float(secs), name
# Processes the workload starts inherit the preload and the report path: keep the workload's own report.
pid = run.get("environment", {}).get("pid")
try:
    if os.path.getsize(report) > (1 << 20):
        run["shim_report"] = "larger than 1 MiB, not kept"
    else:
        with open(report) as f:
            rep = json.load(f)
        ok = pid is None or rep.get("pid") == pid
        run["shim_report"] = rep if ok else "written by process %s, not the workload's" % rep.get("pid")
except (OSError, ValueError):
    run["shim_report"] = None
doc["runs"].append(run)
with open(merged + ".tmp", "w") as f:
    json.dump(doc, f, indent=1, sort_keys=True)
    f.write("\n")
os.replace(merged + ".tmp", merged)
PY
}

total=0
failed=0
skipped=0
n_total=$(( $(wc -w <<< "$only") * $(wc -w <<< "$paths") ))
for p in $paths; do
    merged=$out/$p.json
    log=$out/$p.log
    rm -f "$merged"
    : > "$log"
    for w in $only; do
        total=$((total + 1))
        case $w in
            offload) name="offload_llm random"; cmd=(examples/offload_llm.py --init random) ;;
            offload-trained) name="offload_llm trained-like"
                             cmd=(examples/offload_llm.py --init trained-like) ;;
            table) name="stream_table"; cmd=(examples/stream_table.py) ;;
            lookup) name="stream_table lookup"; cmd=(examples/stream_table.py --access lookup) ;;
            transient) name="transient"; cmd=(examples/transient.py) ;;
            streams) name="streams"; cmd=(examples/streams.py) ;;
        esac
        case $w in
            offload*) extra=("${weight_args[@]}") ;;
            table|lookup|streams) extra=("${table_args[@]}") ;;
            *) extra=() ;;
        esac
        say "[$total/$n_total path=$p] $name ..."
        result=$tmp/result.json
        report=$tmp/report.json
        rm -f "$result" "$report"
        start=$(date +%s)
        echo "== path=$p $name: ${cmd[*]} ${size_args[*]} ${extra[*]}" >> "$log"
        # Only python gets the shim: a preloaded timeout would write its own report over python's.
        (cd "$root" && timeout --kill-after=15 "$timeout_s" env IBPSHIM_TRANSFER_PATH="$p" \
            IBPSHIM_REPORT_PATH="$report" LD_PRELOAD="$lib" \
            "$py" "${cmd[@]}" "${size_args[@]}" "${extra[@]}" --json "$result") \
            > "$tmp/stdout" 2> "$tmp/stderr"
        rc=$?
        secs=$(( $(date +%s) - start ))
        cat "$tmp/stdout" "$tmp/stderr" >> "$log"
        line=$(grep -m1 "^$(basename "${cmd[0]}" .py): " "$tmp/stdout")
        [ -n "$line" ] && say "  $line"
        case $rc in
            0) state="ok" ;;
            77) state="skipped (no CUDA device)"; skipped=$((skipped + 1)) ;;
            124|137) state="TIMED OUT after ${timeout_s} s"; failed=$((failed + 1)) ;;
            1) state="FAILED (a check failed or the limit was passed; see $p.log)"; failed=$((failed + 1)) ;;
            *) state="FAILED (exit status $rc; see $p.log)"; failed=$((failed + 1))
               grep -v '^ibpshim:' "$tmp/stderr" | tail -3 ;;
        esac
        say "  $state ($secs s)"
        merge "$merged" "$name" "$rc" "$secs" "$result" "$report" ||
            say "  could not add the result to $merged"
    done
done

if [ "$plot" = 1 ]; then
    say "plots:"
    $py "$root/tools/plot-scaling.py" "$out"/*.json -o "$out" > "$tmp/plot" 2>&1 || true
    grep '^wrote\|plot-scaling:' "$tmp/plot" | while read -r l; do say "  $l"; done
fi
say "run-workloads: $total run, $((total - failed - skipped)) ok, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] || exit 1
[ "$skipped" -lt "$total" ] || exit 77
exit 0
