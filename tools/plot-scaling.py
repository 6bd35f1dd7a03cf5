#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# ibpshim: turns the JSON of ibp-bench and of the example workloads into PNG plots and text tables.
"""Plots from the JSON the project's benchmarks write.

Inputs (files or folders; a folder means its *.json, *.jsonl and *.log files): a file may hold one
JSON value, or one JSON object per line among other text (lines not starting with '{' are skipped,
so logs that mix text and `ibp-bench --json` lines can be given as they are).  An object with a
"runs" list (tools/run-workloads.sh) or a JSON list stands for each of its elements.

Records are recognised by their fields:
  ibp-bench --json    file, bytes, ratio, raw_gbps, dma_decode_gbps, pipelined_gbps, zerocopy_gbps,
                      decode_gbps (GB/s of original bytes)
  workloads           workload, label, speedup, ideal, ideal_codec, times_on, times_off
                      (examples/offload_llm.py, stream_table.py, transient.py)

Plots written to --out (default .):
  bench-size.png      GB/s against copy size, one panel per input file, one line per path
                      (needs ibp-bench run at two sizes or more: --size 1M ... 8G)
  bench-ratio.png     speedup over the plain copy against the compression ratio, with the ideal
                      1/ratio (needs two ratios or more: files of different invariance)
  workloads.png       speedup and ideal speedup of each workload run, grouped by transfer path
  workloads-steps.png step times with the path on and off, each run scaled by its median off
Any other plot: --x FIELD --y FIELD[,FIELD...] [--group FIELD] over every record that has those
fields (dotted names reach into nested objects, e.g. copy_only.gbps_on), written to --name.png.

A text table of everything plotted is printed too; without matplotlib only the tables are printed
and the exit status is 3.

Examples:
  for s in 1M 4M 16M 64M 256M 1G 4G 8G; do
      build/tools/ibp-bench ../shared/data/ocr_rec_all_bf16.bin --size $s --json; done > bench.jsonl
  tools/plot-scaling.py bench.jsonl results/ -o plots
  tools/plot-scaling.py chunks.jsonl --x chunk --y pipelined_gbps --group file --logx --name chunks
  tools/plot-scaling.py results/ --x table.bytes --y gbps_on,gbps_off --group label --logx --name table"""
import argparse
import json
import os
import statistics
import sys

BENCH_PATHS = (("raw_gbps", "plain pinned copy"), ("dma_decode_gbps", "DMA + decode"),
               ("pipelined_gbps", "DMA + decode, pipelined"), ("zerocopy_gbps", "zero-copy decode"))


def read_records(paths):
    """All JSON objects in the inputs, each with '_source' set; and messages about what was skipped."""
    records, notes = [], []
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p)
                            if f.endswith((".json", ".jsonl", ".log")))
        else:
            files.append(p)
    for f in files:
        try:
            with open(f, errors="replace") as fh:
                text = fh.read()
        except OSError as e:
            notes.append("cannot read %s: %s" % (f, e.strerror))
            continue
        try:
            values = [json.loads(text)]
        except ValueError:
            values, bad = [], 0
            for line in text.splitlines():
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    values.append(json.loads(line))
                except ValueError:
                    bad += 1
            if bad:
                notes.append("%s: skipped %d line(s) that start like JSON but do not parse" % (f, bad))
        found = 0
        for v in values:
            for rec in expand(v):
                rec["_source"] = f
                records.append(rec)
                found += 1
        if not found:
            notes.append("%s: no JSON objects found" % f)
    return records, notes


def expand(v):
    if isinstance(v, list):
        return [r for x in v for r in expand(x)]
    if isinstance(v, dict) and isinstance(v.get("runs"), list):
        return [r for x in v["runs"] for r in expand(x)]
    return [v] if isinstance(v, dict) else []


def field(rec, name):
    for part in name.split("."):
        if not isinstance(rec, dict) or part not in rec:
            return None
        rec = rec[part]
    return rec


def is_bench(r):
    return all(isinstance(r.get(k), (int, float)) for k in ("bytes", "ratio", "raw_gbps"))


def is_workload(r):
    return isinstance(r.get("workload"), str) and "speedup" in r


def transfer_path(r):
    env = field(r, "environment.env") or {}
    if not field(r, "environment.shim.preloaded"):
        return "no shim"
    return env.get("IBPSHIM_TRANSFER_PATH", "auto")


def size_text(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return "%.4g %s" % (n / div, unit)
    return "%d B" % n


def num(x, fmt="%.3f"):
    return "-" if x is None else fmt % x


def print_table(title, header, rows):
    if not rows:
        return
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    print("== %s" % title)
    for row in [header] + rows:
        print("  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths)))


def bench_tables(bench):
    rows = [[os.path.basename(str(r.get("file", "?"))), size_text(r["bytes"]), num(r["ratio"], "%.4f")] +
            [num(r.get(k), "%.1f") for k, _ in BENCH_PATHS] + [num(r.get("decode_gbps"), "%.1f"),
                                                               num(1.0 / r["ratio"] if r["ratio"] else None)]
            for r in sorted(bench, key=lambda r: (str(r.get("file")), r["bytes"]))]
    header = ["file", "size", "ratio", "raw", "dma+decode", "pipelined", "zero-copy", "decode", "ideal"]
    print_table("ibp-bench (GB/s of original bytes)", header, rows)


def workload_tables(work):
    rows = [[r.get("label", r["workload"]), transfer_path(r), num(r.get("speedup")), num(r.get("ideal")),
             num(r.get("ideal_codec")), num(r.get("fraction_of_ideal")),
             num(r.get("step_s_on") and r["step_s_on"] * 1e3, "%.2f"),
             num(r.get("step_s_off") and r["step_s_off"] * 1e3, "%.2f"), str(r.get("identical"))]
            for r in work]
    print_table("workloads", ["run", "path", "speedup", "ideal", "ideal_codec", "of ideal", "on ms", "off ms",
                              "identical"], rows)


def plot_bench_size(plt, bench, out):
    by_file = {}
    for r in bench:
        by_file.setdefault(os.path.basename(str(r.get("file", "?"))), []).append(r)
    by_file = {k: sorted(v, key=lambda r: r["bytes"]) for k, v in by_file.items()
               if len({r["bytes"] for r in v}) >= 2}
    if not by_file:
        return None
    n = len(by_file)
    cols = min(n, 3)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.8 * rows), squeeze=False)
    for ax, (name, rs) in zip(axes.flat, sorted(by_file.items())):
        x = [r["bytes"] for r in rs]
        for key, label in BENCH_PATHS:
            y = [r.get(key) for r in rs]
            if any(v is not None for v in y):
                ax.plot(x, y, marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("copy size (bytes)")
        ax.set_ylabel("GB/s of original bytes")
        ax.set_title("%s (ratio %.3f)" % (name, rs[-1]["ratio"]), fontsize=9)
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    return save(plt, fig, out, "bench-size.png")


def plot_bench_ratio(plt, bench, out):
    if len({round(r["ratio"], 4) for r in bench}) < 2:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for key, label in BENCH_PATHS[1:]:
        pts = sorted((r["ratio"], r[key] / r["raw_gbps"]) for r in bench if r.get(key) and r["raw_gbps"])
        if pts:
            ax.plot(*zip(*pts), marker="o", linestyle="none", label=label)
    lo, hi = min(r["ratio"] for r in bench), max(r["ratio"] for r in bench)
    xs = [lo + (hi - lo) * i / 50 for i in range(51)]
    ax.plot(xs, [1.0 / x for x in xs], color="gray", linestyle="--", label="ideal 1/ratio")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("compressed / original size")
    ax.set_ylabel("speedup over the plain copy")
    ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return save(plt, fig, out, "bench-ratio.png")


def plot_workloads(plt, work, out):
    if not work:
        return []
    labels = ["%s\n[%s]" % (r.get("label", r["workload"]), transfer_path(r)) for r in work]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.4 * len(work)), 4.5))
    width = 0.27
    xs = range(len(work))
    for j, (key, label) in enumerate((("speedup", "measured"), ("ideal", "ideal (bytes sent)"),
                                      ("ideal_codec", "ideal (codec ratio)"))):
        ax.bar([x + (j - 1) * width for x in xs], [r.get(key) or 0 for r in work], width, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("speedup (time off / time on)")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    written = [save(plt, fig, out, "workloads.png")]
    timed = [(lab, r) for lab, r in zip(labels, work) if r.get("times_on") and r.get("times_off")]
    if timed:
        fig, ax = plt.subplots(figsize=(max(6.0, 1.0 * len(timed) * 2), 5.0))
        data, ticks = [], []
        for lab, r in timed:
            base = statistics.median(r["times_off"])
            data += [[t / base for t in r["times_on"]], [t / base for t in r["times_off"]]]
            name = lab.replace("\n", " ")
            ticks += [name + " on", name + " off"]
        ax.boxplot(data)
        ax.set_xticks(range(1, len(ticks) + 1))
        ax.set_xticklabels(ticks, fontsize=7, rotation=30, ha="right")
        ax.set_ylabel("step time / median with the path off")
        ax.grid(True, axis="y", alpha=0.3)
        written.append(save(plt, fig, out, "workloads-steps.png"))
    return written


def plot_generic(plt, records, args):
    ys = [y for y in args.y.split(",") if y]
    pts = {}
    for r in records:
        x = field(r, args.x)
        if not isinstance(x, (int, float)):
            continue
        g = str(field(r, args.group)) if args.group else None
        for y in ys:
            v = field(r, y)
            if isinstance(v, (int, float)):
                key = "%s %s" % (g, y) if g and len(ys) > 1 else (g or y)
                pts.setdefault(key, []).append((x, v))
    rows = [[k, num(x, "%.6g"), num(v, "%.6g")] for k, p in sorted(pts.items()) for x, v in sorted(p)]
    print_table("%s against %s" % (args.y, args.x), ["series", args.x, "value"], rows)
    if not pts or plt is None:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for k, p in sorted(pts.items()):
        ax.plot(*zip(*sorted(p)), marker="o", label=k)
    if args.logx:
        ax.set_xscale("log", base=2)
    if args.logy:
        ax.set_yscale("log")
    ax.set_xlabel(args.x)
    ax.set_ylabel(args.y)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return save(plt, fig, args.out, args.name + ".png")


def save(plt, fig, out, name):
    path = os.path.join(out, name)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", metavar="FILE|DIR")
    ap.add_argument("-o", "--out", default=".", help="folder for the PNG files (created if missing)")
    ap.add_argument("--x", help="generic plot: the x field")
    ap.add_argument("--y", help="generic plot: y fields, comma-separated")
    ap.add_argument("--group", help="generic plot: one line per value of this field")
    ap.add_argument("--logx", action="store_true", help="generic plot: log2 x axis")
    ap.add_argument("--logy", action="store_true", help="generic plot: log y axis")
    ap.add_argument("--name", default="plot", help="generic plot: file name without .png (default plot)")
    args = ap.parse_args(argv)
    if bool(args.x) != bool(args.y):
        ap.error("--x and --y go together")
    records, notes = read_records(args.inputs)
    for n in notes:
        print("plot-scaling: %s" % n, file=sys.stderr)
    bench = [r for r in records if is_bench(r)]
    work = [r for r in records if is_workload(r)]
    if not args.x and not bench and not work:
        print("plot-scaling: no ibp-bench or workload records in the inputs", file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        plt, missing = None, str(e)
    bench_tables(bench)
    workload_tables(work)
    if plt is None:
        if args.x:
            plot_generic(None, records, args)
        print("plot-scaling: matplotlib is not importable (%s), so no PNG was written; the tables above hold "
              "the data. Install it with 'apt-get install python3-matplotlib' or 'pip install matplotlib'."
              % missing, file=sys.stderr)
        return 3
    os.makedirs(args.out, exist_ok=True)
    written = [plot_generic(plt, records, args)] if args.x else []
    written += [plot_bench_size(plt, bench, args.out), plot_bench_ratio(plt, bench, args.out)]
    written += plot_workloads(plt, work, args.out)
    written = [w for w in written if w]
    for w in written:
        print("wrote %s" % w)
    if not written:
        print("plot-scaling: nothing to plot (ibp-bench needs two sizes or two ratios for its plots)",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
