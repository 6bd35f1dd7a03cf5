#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# ibpshim: a pinned batch buffer with new content every step: what the shim costs where it cannot help.
"""What the shim costs a program that writes a fresh batch into its pinned buffer every step.

Every step writes one of --batches pregenerated random batches (a different one from the step before)
into the same pinned buffer of --mib MiB, then copies the buffer to the GPU (cudaMemcpyAsync on a
stream) and waits.  Every received batch is compared bitwise with a copy of it kept on the GPU.

Three sides are timed in rotating blocks after a warm-up: this process with the shim's compressed path
on, the same with it off (ibpshim_set_enabled(0): the router's cost; write tracking stays armed), and a
child process started without the shim in LD_PRELOAD (everything the shim adds, tracking included),
which waits on a pipe while the parent runs.  The overhead is median(on) / median(off or no shim) - 1,
for the whole step and for the copy alone.  The verdict (and the exit status) is on against off, which
share a process; against the child it is reported beside it, since two processes can differ by a few
percent on their own (where their pinned pages landed, for one)."""
import argparse
import json
import os
import subprocess
import sys
import time

# The baseline process waits on a pipe while this one runs: threads that spin after their work (libgomp's
# default) would steal the cores of the side being timed.  Both processes run with the same setting.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

import _ibpshim as ibp  # noqa: E402

NAME = "transient"

# Steps of one side spread by a fifth and more (page placement, other threads), so a median of 16
# cannot resolve the 2% limit: the quick run times 48 steps a side, the full one 80.
PROFILES = {
    "full": dict(mib=256.0, blocks=10, iters=8, warmup=10),
    "quick": dict(mib=64.0, blocks=8, iters=6, warmup=8),
}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a 64 MiB buffer and fewer steps (the demo)")
    ap.add_argument("--mib", type=float, help="batch buffer size in MiB (default 256, quick 64)")
    ap.add_argument("--batches", type=int, default=4,
                    help="distinct random batches cycled through (default 4)")
    ap.add_argument("--blocks", type=int,
                    help="rounds of blocks, one block per side each (default 10, quick 8)")
    ap.add_argument("--iters", type=int, help="timed steps per block (default 8, quick 6)")
    ap.add_argument("--warmup", type=int, help="untimed steps first, per process (default 10, quick 8)")
    ap.add_argument("--limit", type=float, default=2.0,
                    help="largest acceptable overhead in percent (default 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-baseline-process", action="store_true",
                    help="skip the child process without the shim; compare the path on and off only")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json", metavar="PATH", help="write the result here")
    args = ibp.parse_profiled(ap, argv, PROFILES)
    if args.mib <= 0 or args.batches < 2 or args.blocks < 1 or args.iters < 1 or args.warmup < 0:
        ap.error("--mib must be positive, --batches at least 2, --blocks and --iters at least 1")
    return args


class Transient:
    def __init__(self, args, dev):
        n = max(1, int(args.mib * (1 << 20)) // 4)
        gen = torch.Generator().manual_seed(args.seed)
        self.batches = [torch.randn(n, generator=gen) for _ in range(args.batches)]  # pageable
        self.refs = [b.to(dev) for b in self.batches]  # pageable copies: never compressed
        self.buf = ibp.pinned_empty(n, torch.float32)
        self.dst = torch.empty(n, dtype=torch.float32, device=dev)
        self.stream = torch.cuda.Stream()
        self.nbytes = n * 4
        self.i = 0
        self.copy_s = 0.0
        self.bad = 0
        torch.cuda.synchronize()

    def step(self):
        self.buf.copy_(self.batches[self.i % len(self.batches)])
        t0 = time.perf_counter()
        with torch.cuda.stream(self.stream):
            self.dst.copy_(self.buf, non_blocking=True)
        self.stream.synchronize()
        self.copy_s = time.perf_counter() - t0

    def check(self):
        if not torch.equal(self.dst.view(torch.int32), self.refs[self.i % len(self.refs)].view(torch.int32)):
            self.bad += 1
        self.i += 1

    def run(self, n):
        times, copies = [], []
        for _ in range(n):
            t0 = time.perf_counter()
            self.step()
            times.append(time.perf_counter() - t0)
            copies.append(self.copy_s)
            self.check()
        return times, copies


def child_main(args):
    """The baseline side: the same steps in a process without the shim, a block at a time on request."""
    w = Transient(args, ibp.cuda_device())
    print(json.dumps({"ready": True, "shim_preloaded": ibp.Shim().present}), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] != "run":
            break
        times, copies = w.run(int(cmd[1]))
        print(json.dumps({"times": times, "copies": copies, "bad": w.bad}), flush=True)
    return 0


def preload_without_shim(env):
    """The environment minus the shim's entry in LD_PRELOAD (other preloads stay)."""
    env = dict(env)
    keep = [p for p in env.get("LD_PRELOAD", "").replace(" ", ":").split(":")
            if p and "ibpshim" not in os.path.basename(p)]
    if keep:
        env["LD_PRELOAD"] = ":".join(keep)
    else:
        env.pop("LD_PRELOAD", None)
    return env


class Baseline:
    """The child process; every failure turns into a message and the run goes on without it."""

    def __init__(self, args):
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--mib", str(args.mib),
               "--batches", str(args.batches), "--seed", str(args.seed)]
        self.error = None
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=preload_without_shim(os.environ))
        hello = self._read()
        if hello and hello.get("shim_preloaded"):
            self.error = "the child process still has the shim preloaded"

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            self.error = "the baseline process ended (exit status %s)" % self.proc.poll()
            return None
        try:
            return json.loads(line)
        except ValueError:
            self.error = "the baseline process wrote %r" % line[:200]
            return None

    def run(self, n):
        if self.error:
            return None
        try:
            self.proc.stdin.write("run %d\n" % n)
            self.proc.stdin.flush()
        except OSError as e:
            self.error = "cannot talk to the baseline process: %s" % e
            return None
        return self._read()

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


def pct(a, b):
    return None if not a or not b else 100.0 * (a / b - 1.0)


def main(argv=None):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        return ibp.no_cuda(NAME)
    if args.child:
        return child_main(args)
    shim = ibp.Shim()
    w = Transient(args, ibp.cuda_device())
    base = None if args.no_baseline_process else Baseline(args)

    warm_on, _ = w.run(args.warmup)
    warm_none = None
    if base:
        r = base.run(args.warmup)
        warm_none = r["times"] if r else None
    times = {k: [] for k in ("on", "off", "none")}
    copies = {k: [] for k in times}
    totals = {"on": None, "off": None}
    rotation = ["on", "off", "none"] if base else ["on", "off"]
    child_bad = 0
    for b in range(args.blocks):
        k = b % len(rotation)
        for side in rotation[k:] + rotation[:k]:
            if side == "none":
                r = base.run(args.iters + 1)
                if r:
                    times["none"] += r["times"][1:]
                    copies["none"] += r["copies"][1:]
                    child_bad = r["bad"]
                continue
            with shim.path(side == "on"):
                w.run(1)  # settle after the switch
                before = shim.totals()
                t, c = w.run(args.iters)
                d = ibp.totals_delta(before, shim.totals())
            times[side] += t
            copies[side] += c
            totals[side] = ibp.totals_add(totals[side] or {}, d)
    if base:
        base.close()
    all_totals = shim.totals()

    med = {k: ibp.median(v) for k, v in times.items()}
    cmed = {k: ibp.median(v) for k, v in copies.items()}
    if shim.present:
        r = ibp.ratios(w.nbytes * len(times["on"]), totals["on"], all_totals)
    else:
        r = ibp.ratios(0, None, None)
    over_off, over_none = pct(med["on"], med["off"]), pct(med["on"], med["none"])
    within = over_off is not None and over_off < args.limit
    identical = w.bad == 0 and child_bad == 0
    res = {
        "workload": NAME, "label": NAME, "args": vars(args), "quick": args.quick, "batch_bytes": w.nbytes,
        "content": {"source": "seeded random init", "init": "standard normal", "batches": args.batches,
                    "seed": args.seed},
        "step_s_on": med["on"], "step_s_off": med["off"], "step_s_no_shim": med["none"],
        "copy_s_on": cmed["on"], "copy_s_off": cmed["off"], "copy_s_no_shim": cmed["none"],
        "overhead_pct_vs_off": over_off, "overhead_pct_vs_no_shim": over_none,
        "copy_overhead_pct_vs_off": pct(cmed["on"], cmed["off"]),
        "copy_overhead_pct_vs_no_shim": pct(cmed["on"], cmed["none"]),
        "limit_pct": args.limit, "within_limit": within,
        "within_limit_vs_no_shim": None if over_none is None else over_none < args.limit,
        "speedup": med["off"] / med["on"] if med["on"] else None,
        "times_on": times["on"], "times_off": times["off"], "times_no_shim": times["none"],
        "warmup_times_on": warm_on, "warmup_times_no_shim": warm_none,
        "baseline_process": None if args.no_baseline_process else (base.error or "ok"),
        "totals_on": totals["on"], "totals_off": totals["off"], "totals": all_totals,
        "bad_steps": w.bad, "bad_steps_no_shim": child_bad, "identical": identical,
        "environment": ibp.environment(shim),
    }
    res.update(r)
    print("%s: %.0f MiB batch, new content every step: step on %.2f ms off %.2f ms no-shim %s overhead=%s "
          "(vs off) %s (vs no shim), copy alone %s/%s, limit %.1f%% (vs off): %s speedup=%s ideal=%s "
          "sent=%s; %s; shim %s" % (
              NAME, w.nbytes / 2**20, med["on"] * 1e3, med["off"] * 1e3,
              "n/a" if med["none"] is None else "%.2f ms" % (med["none"] * 1e3),
              signed(over_off), signed(over_none), signed(res["copy_overhead_pct_vs_off"]),
              signed(res["copy_overhead_pct_vs_no_shim"]), args.limit, "PASS" if within else "OVER",
              ibp.fmt_ratio(res["speedup"], 3), ibp.fmt_ratio(r["ideal"]),
              "n/a" if r["wire_ratio"] is None else "%.1f%%" % (100 * r["wire_ratio"]),
              "every batch identical" if identical else "BATCHES DIFFER (%d + %d steps)" % (w.bad, child_bad),
              "preloaded" if shim.present else "NOT preloaded (control run)"))
    if base and base.error:
        print("%s: no baseline process: %s" % (NAME, base.error), file=sys.stderr)
    ibp.write_json(args.json, res)
    return 0 if identical and within else 1


def signed(x):
    return "n/a" if x is None else "%+.2f%%" % x


if __name__ == "__main__":
    with torch.inference_mode():
        sys.exit(main())
