#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# ibpshim: the workloads' trace split (examples/_ibpshim.py, tools/trace-split.py) on a made-up trace.
"""Two steps of a made-up torch.profiler trace with known spans: 2 MiB transfers alone and under a
decode, a plan upload, gaps between steps.  Checks every number split_trace derives from them and
that tools/trace-split.py prints them and refuses an unreadable file.  Needs nothing but Python."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "examples"))
import _ibpshim as ibp  # noqa: E402

MIB = 1 << 20


def ev(cat, name, ts, dur, nbytes=None):
    e = {"cat": cat, "name": name, "ts": ts, "dur": dur}
    if nbytes is not None:
        e["args"] = {"bytes": nbytes}
    return e


def main():
    h2d = "Memcpy HtoD (Pinned -> Device)"
    events = []
    for base in (0.0, 1000.0):  # two steps, 1000 us apart; each spans 300 us of transfers
        events += [
            ev("gpu_memcpy", h2d, base, 40.0, 2 * MIB),           # alone: 2 MiB in 40 us
            ev("gpu_memcpy", h2d, base + 50.0, 1.0, 96),          # a small copy: not a run
            ev("gpu_memcpy", h2d, base + 100.0, 50.0, 2 * MIB),   # under the decode below
            ev("kernel", "ibp_k_decode_seg1", base + 100.0, 50.0),
            ev("kernel", "other_kernel", base + 200.0, 100.0),
        ]
    failures = 0

    def check(cond, what):
        nonlocal failures
        if not cond:
            failures += 1
            print("FAIL: %s" % what)

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.trace.json")
        with open(path, "w") as f:
            json.dump({"traceEvents": events}, f)
        sp = ibp.split_trace(path, 2)
        close = lambda a, b: a is not None and abs(a - b) < 1e-6  # noqa: E731
        check(close(sp["window_ms"], 1.3 / 2), "window over the whole stretch: %r" % sp["window_ms"])
        check(close(sp["h2d_ms"], 0.091), "DMA busy per step: %r" % sp["h2d_ms"])
        check(sp["h2d_copies"] == 3, "copies per step: %r" % sp["h2d_copies"])
        check(close(sp["decode_under_dma_ms"], 0.05), "decode under DMA: %r" % sp["decode_under_dma_ms"])
        check(close(sp["h2d_gbps_alone"], 2 * MIB / 40e3), "alone: %r" % sp["h2d_gbps_alone"])
        check(close(sp["h2d_gbps_under_decode"], 2 * MIB / 50e3),
              "under decode: %r" % sp["h2d_gbps_under_decode"])
        per = ibp.split_trace(path, 2, per_step=True)
        check(close(per["window_ms"], 0.15), "per-step window (transfers and decodes): %r" % per["window_ms"])
        tool = os.path.join(ROOT, "tools", "trace-split.py")
        out = subprocess.run([sys.executable, tool, "--steps", "2", path], capture_output=True, text=True)
        check(out.returncode == 0 and "52.4 GB/s alone, 41.9 under a decode" in out.stdout,
              "trace-split.py output: %r %r" % (out.stdout, out.stderr))
        bad = os.path.join(d, "bad.json")
        with open(bad, "w") as f:
            f.write("{not json")
        out = subprocess.run([sys.executable, tool, bad], capture_output=True, text=True)
        check(out.returncode == 1 and "cannot read" in out.stderr, "a damaged trace: %r" % out.stderr)
    print("trace split: %s" % ("ok" if not failures else "%d failures" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
