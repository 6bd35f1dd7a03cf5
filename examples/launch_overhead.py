#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# ibpshim: what PyTorch's kernel launches cost under the shim, which reads each launch's arguments
# while a pinned region is registered.
"""Times PyTorch operations that are one small kernel launch each, on the CPU side.

A pinned host tensor of --region-mib MiB is made first (PyTorch pins it with cudaHostAlloc, so
under the shim it is a registered region and every launch has its arguments read). Then --ops
in-place additions on a small GPU tensor (one elementwise kernel each, whose arguments are
PyTorch's TensorIterator structures) are issued back to back and the wall time per operation is
taken, --repeats times; the median is printed as one JSON line. Run it with and without
LD_PRELOAD=libibpshim.so, alternating, to see what the hook adds per launch."""
import argparse
import json
import statistics
import time

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", type=int, default=20000, help="operations timed per repeat (default 20000)")
    ap.add_argument("--repeats", type=int, default=7, help="timed repeats; the median is printed (default 7)")
    ap.add_argument("--region-mib", type=int, default=64, help="pinned host tensor made first, MiB (0: none)")
    ap.add_argument("--label", default="", help="a name carried into the output")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"label": args.label, "skipped": "no CUDA device"}))
        return 77
    pinned = None
    if args.region_mib:
        pinned = torch.empty(args.region_mib << 20, dtype=torch.uint8).pin_memory()
        pinned.fill_(1)
    x = torch.zeros(256, device="cuda")
    for _ in range(1000):  # warm-up: lazy module loads, the shim's first look at each kernel
        x.add_(1.0)
    torch.cuda.synchronize()
    per_op = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        for _ in range(args.ops):
            x.add_(1.0)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        per_op.append((t1 - t0) / args.ops * 1e9)
    expect = 1000 + args.ops * args.repeats
    ok = bool(torch.all(x == expect).item())
    print(json.dumps({"label": args.label, "region_mib": args.region_mib, "ops": args.ops,
                      "median_ns_per_op": round(statistics.median(per_op), 1),
                      "min_ns_per_op": round(min(per_op), 1), "result_ok": ok,
                      "pinned": pinned is not None}))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
