#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# ibpshim: pinned regions copied on several CUDA streams at once, timed with the compressed path on and off.
"""Several streams copying at once: how the shim's path scales with concurrent copies.

--max-streams pinned regions of --mib MiB each hold bf16 weights (seeded, trained-like: each row normal
with its own std around 0.02) or the bytes of a tensor file (--table PATH, repeated).  A step with k
streams copies regions 0..k-1 to their GPU buffers, region i on stream i (one cudaMemcpyAsync each,
enqueued from one thread, as a data loader or an offloading runtime with several streams does), then
waits for all k streams.  For every k in --streams the step is timed with the compressed path on and
off (ibpshim_set_enabled) in alternating blocks; aggregate GB/s = k * region bytes / step time.

Every region's GPU buffer is poisoned before each step and compared bitwise afterwards with a copy of
the region made through pageable memory, which the shim never compresses."""
import argparse
import os
import sys
import time

import torch

import _ibpshim as ibp

NAME = "streams"
POISON = 0x5A

PROFILES = {
    "full": dict(mib=256.0, max_streams=8, streams="1,2,4,8", blocks=4, iters=4, warmup_timeout=90.0),
    "quick": dict(mib=64.0, max_streams=4, streams="1,2,4", blocks=2, iters=3, warmup_timeout=40.0),
}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="64 MiB regions, up to 4 streams (the demo)")
    ap.add_argument("--mib", type=float, help="MiB per region (default 256, quick 64)")
    ap.add_argument("--max-streams", type=int, help="regions and streams set up (default 8, quick 4)")
    ap.add_argument("--streams", help="comma-separated stream counts to time (default 1,2,4,8; quick 1,2,4)")
    ap.add_argument("--table", metavar="PATH", help="a tensor file whose bytes, repeated, fill the regions")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--blocks", type=int, help="timed blocks per side, alternating (default 4)")
    ap.add_argument("--iters", type=int, help="timed steps per block (default 4)")
    ap.add_argument("--warmup-timeout", type=float,
                    help="seconds to wait for the shim to compress the regions (default 90, quick 40)")
    ap.add_argument("--json", metavar="PATH", help="write the result here")
    args = ibp.parse_profiled(ap, argv, PROFILES)
    try:
        args.stream_counts = sorted({int(x) for x in args.streams.split(",") if x.strip()})
    except ValueError:
        ap.error("--streams takes comma-separated integers, e.g. 1,2,4")
    if args.mib <= 0 or args.max_streams < 1 or args.blocks < 1 or args.iters < 1:
        ap.error("--mib must be positive, --max-streams, --blocks and --iters at least 1")
    if not args.stream_counts or args.stream_counts[0] < 1 or args.stream_counts[-1] > args.max_streams:
        ap.error("--streams must name counts between 1 and --max-streams (%d)" % args.max_streams)
    return args


def region_content(args, i, nbytes):
    """Pageable uint8 content of region i."""
    if args.table:
        with open(args.table, "rb") as f:
            data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
        if data.numel() == 0:
            raise ValueError("%s is empty" % args.table)
        start = (i * 4099) % data.numel()  # each region starts elsewhere in the file
        reps = -(-(start + nbytes) // data.numel())
        return data.repeat(reps)[start:start + nbytes]
    gen = torch.Generator().manual_seed(args.seed * 1009 + i)
    rows = torch.randn(nbytes // 2 // 1024, 1024, generator=gen)
    rows.mul_(torch.randn(rows.shape[0], 1, generator=gen).mul_(0.5).exp_().mul_(0.02))
    out = torch.zeros(nbytes, dtype=torch.uint8)
    flat = rows.to(torch.bfloat16).view(-1).view(torch.uint8)
    out[:flat.numel()].copy_(flat)
    return out


class Streams:
    def __init__(self, args, dev):
        self.nbytes = int(args.mib * (1 << 20)) // 4096 * 4096
        self.hosts, self.dsts, self.refs, self.streams = [], [], [], []
        for i in range(args.max_streams):
            content = region_content(args, i, self.nbytes)
            host = ibp.pinned_empty(self.nbytes, torch.uint8)
            host.copy_(content)
            self.hosts.append(host)
            self.refs.append(content.to(dev))  # pageable: never compressed
            self.dsts.append(torch.empty(self.nbytes, dtype=torch.uint8, device=dev))
            self.streams.append(torch.cuda.Stream())
        torch.cuda.synchronize()
        self.k = args.max_streams
        self.bad = []
        self.steps_checked = 0

    def poison(self, *_):
        for d in self.dsts[:self.k]:
            d.fill_(POISON)
        torch.cuda.synchronize()

    def step(self):
        for i in range(self.k):
            with torch.cuda.stream(self.streams[i]):
                self.dsts[i].copy_(self.hosts[i], non_blocking=True)
        for s in self.streams[:self.k]:
            s.synchronize()

    def check(self, i, on):
        self.steps_checked += 1
        for r in range(self.k):
            if not torch.equal(self.dsts[r], self.refs[r]):
                self.bad.append({"step": i, "path_on": on, "streams": self.k, "region": r})


def main(argv=None):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        return ibp.no_cuda(NAME)
    if args.table and not os.path.isfile(args.table):
        print("%s: %s: no such file" % (NAME, args.table), file=sys.stderr)
        return 2
    shim = ibp.Shim()
    t0 = time.perf_counter()
    w = Streams(args, ibp.cuda_device())
    setup_s = time.perf_counter() - t0

    def warm_step():
        w.poison()
        w.step()
        w.check(-1, True)

    warm = ibp.warm_up(shim, warm_step, args.warmup_timeout)
    rows = []
    for k in args.stream_counts:
        w.k = k
        ab = ibp.run_ab(shim, w.step, args.blocks, args.iters, before=w.poison, after=w.check)
        s = ibp.summarize_ab(ab, k * w.nbytes, shim.totals(), shim.present)
        row = {"streams": k, "bytes_per_step": k * w.nbytes,
               "gbps_on": k * w.nbytes / s["step_s_on"] / 1e9, "gbps_off": k * w.nbytes / s["step_s_off"] / 1e9}
        row.update({key: s[key] for key in ("step_s_on", "step_s_off", "speedup", "ideal", "ideal_codec",
                                            "wire_ratio", "fraction_of_ideal", "totals_on")})
        rows.append(row)
    identical = not w.bad
    content = ("raw bytes of %s" % os.path.basename(args.table) if args.table
               else "bf16 trained-like init, seed %d" % args.seed)
    res = {"workload": NAME, "label": "%s %s" % (NAME, os.path.basename(args.table) if args.table else "bf16"),
           "content": content, "args": {k: v for k, v in vars(args).items()}, "quick": args.quick,
           "region_bytes": w.nbytes, "setup_s": setup_s, "compressed_seen": warm["compressed_seen"],
           "warmup": warm, "rows": rows, "steps_checked": w.steps_checked, "mismatches": w.bad[:20],
           "identical": identical, "totals": shim.totals(), "environment": ibp.environment(shim)}
    best = max(rows, key=lambda r: r["speedup"] or 0.0)
    print("%s: %d regions of %.0f MiB (%s), one stream each: %s; %s; shim %s" % (
        NAME, args.max_streams, w.nbytes / 2**20, content,
        ", ".join("%d streams %.1f/%.1f GB/s x%s (ideal %s)" % (
            r["streams"], r["gbps_on"], r["gbps_off"], ibp.fmt_ratio(r["speedup"], 3), ibp.fmt_ratio(r["ideal"]))
                  for r in rows),
        "every copy identical (%d steps)" % w.steps_checked if identical
        else "COPIES DIFFER in %d checks" % len(w.bad),
        "preloaded" if shim.present else "NOT preloaded (control run)"))
    res["best_speedup"] = best["speedup"]
    ibp.write_json(args.json, res)
    return 0 if identical else 1


if __name__ == "__main__":
    with torch.inference_mode():
        sys.exit(main())
