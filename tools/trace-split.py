#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# ibpshim: where the GPU time of saved torch.profiler traces went (the workloads' --trace files).
"""Prints, for each chrome trace written by a workload's --trace (e.g. stream_table.py's
epoch_on.trace.json), the split of its GPU time per step: DMA, decode, copy engine idle, and how fast
transfers of 1 MiB or more moved alone and under a decode kernel.  --steps: the steps the trace holds
(the workloads trace --iters of them, 3 by default)."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import _ibpshim as ibp  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("traces", nargs="+", metavar="TRACE")
    ap.add_argument("--steps", type=int, default=3, help="steps in each trace (default 3)")
    ap.add_argument("--per-step", action="store_true",
                    help="window = each step's extent of transfers (traces with host work between steps)")
    ap.add_argument("--json", action="store_true", help="one JSON object per trace")
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    rc = 0
    for path in args.traces:
        try:
            sp = ibp.split_trace(path, args.steps, per_step=args.per_step)
        except (OSError, ValueError) as e:
            print("%s: cannot read: %s" % (path, e), file=sys.stderr)
            rc = 1
            continue
        if args.json:
            print(json.dumps({"trace": path, "split": sp}, sort_keys=True))
        else:
            print("%s: %s" % (path, ibp.fmt_split(sp)))
    return rc


if __name__ == "__main__":
    sys.exit(main())
