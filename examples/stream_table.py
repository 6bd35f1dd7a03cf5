#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# ibpshim: a pinned table streamed to the GPU in slices each epoch, timed with the compressed path on and off.
"""Table streaming (GNN features, DLRM embeddings) timed with and without the shim.

A table of --gib GiB (rows of --dim values of --dtype, float32 by default) lives in pinned host memory.  Every epoch copies all
of it to a table on the GPU in slices of about --slice-mib MiB, in a shuffled order, with slice
boundaries shifted by a random number of rows each epoch (so copies start and end at changing
offsets); one cudaMemcpyAsync per slice on a copy stream.  Between epochs --updates random rows are
rewritten in place (an SGD-like step; index assignment and numpy writes in turn), as training does.

Content: seeded random values (--init random: standard normal; --init trained-like: each row normal
with its own std around 0.02, log-normally spread), or the bytes of a real tensor file (--table PATH:
raw bytes, .npy, .pt or .safetensors) repeated to fill the table.  The result says which.

Checking: a reference table is built on the GPU from the same content through pageable memory, which
the shim never compresses, and receives the same row updates.  Before each epoch the GPU destination
is filled with a poison byte; after it, the destination is compared bitwise with the reference, so
every slice of every epoch is checked.

--access lookup is the DLRM-like pattern instead: each step draws a batch of --batch row indices
from a Zipf distribution (--zipf; the table ordered by popularity, hot rows first, as embedding
caches lay tables out; --spread scatters them over the table instead), copies
the chunks of --chunk-mib MiB that hold them (one cudaMemcpyAsync per chunk, as a chunk-granular
embedding cache fills), gathers the rows on the GPU and sums them into bags of --bag rows; the rows
updated between steps are rows of the last batch (sparse SGD).  The copied chunks and the gathered
rows are checked bitwise as in a scan.

Epochs are timed with the compressed path on and off (ibpshim_set_enabled) in alternating blocks after
a warm-up that lets the shim compress the table; medians are reported.  --trace DIR also profiles a few
epochs each way and splits their GPU time (DMA, decode, copy engine idle)."""
import argparse
import os
import sys
import time

import torch

import _ibpshim as ibp

NAME = "stream_table"
CHUNK = 64 << 20  # bytes generated at a time while filling the table
POISON = 0xA5
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

PROFILES = {
    "full": dict(gib=4.0, slice_mib=64.0, blocks=4, iters=3, warmup_timeout=90.0),
    "quick": dict(gib=0.25, slice_mib=16.0, blocks=4, iters=3, warmup_timeout=40.0),
}


class UsageError(Exception):
    pass


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a 256 MiB table and fewer epochs (the demo)")
    ap.add_argument("--gib", type=float, help="table size in GiB (default 4, quick 0.25)")
    ap.add_argument("--dim", type=int, default=128, help="values per row (default 128)")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="float32",
                    help="element type of the table; row updates are computed in it (default float32)")
    ap.add_argument("--slice-mib", type=float, help="slice size in MiB (default 64, quick 16)")
    ap.add_argument("--updates", type=int, default=64, help="rows rewritten between epochs (default 64)")
    ap.add_argument("--access", choices=("scan", "lookup"), default="scan",
                    help="scan: every slice each epoch; lookup: the chunks of a Zipf batch of rows")
    ap.add_argument("--batch", type=int, default=4096, help="lookup: row indices per step (default 4096)")
    ap.add_argument("--bag", type=int, default=32, help="lookup: rows summed per bag (default 32)")
    ap.add_argument("--zipf", type=float, default=1.2,
                    help="lookup: Zipf exponent of row popularity (default 1.2)")
    ap.add_argument("--chunk-mib", type=float, default=8.0, help="lookup: chunk size in MiB (default 8)")
    ap.add_argument("--spread", action="store_true",
                    help="lookup: hot rows scattered over the table, not first")
    ap.add_argument("--init", choices=("random", "trained-like"), default="random",
                    help="content when no --table is given (default random)")
    ap.add_argument("--table", metavar="PATH", help="a tensor file whose bytes, repeated, fill the table")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pause", type=float, default=0.0,
                    help="seconds between the row updates and the next epoch (default 0)")
    ap.add_argument("--blocks", type=int, help="timed blocks per side, alternating (default 4)")
    ap.add_argument("--iters", type=int, help="timed epochs per block (default 3)")
    ap.add_argument("--warmup-timeout", type=float,
                    help="seconds to wait for the shim to compress the table (default 90, quick 40)")
    ap.add_argument("--json", metavar="PATH", help="write the result here")
    ap.add_argument("--trace", metavar="DIR", help="profile a few epochs with the path on and off into DIR")
    args = ibp.parse_profiled(ap, argv, PROFILES)
    if args.gib <= 0 or args.slice_mib <= 0 or args.dim < 1:
        ap.error("--gib, --slice-mib and --dim must be positive")
    if args.updates < 0 or args.pause < 0 or args.blocks < 1 or args.iters < 1:
        ap.error("--updates and --pause must not be negative, --blocks and --iters at least 1")
    if args.batch < 1 or args.bag < 1 or args.zipf <= 0 or args.chunk_mib <= 0:
        ap.error("--batch, --bag, --zipf and --chunk-mib must be positive")
    return args


def file_bytes(path):
    """The bytes of a tensor file as a flat uint8 tensor, and what they are."""
    if not os.path.isfile(path):
        raise UsageError("%s: no such file" % path)
    low = path.lower()
    try:
        if low.endswith(".npy"):
            import numpy as np
            arr = np.ascontiguousarray(np.load(path, allow_pickle=False))
            data = torch.from_numpy(arr.view(np.uint8).reshape(-1).copy())
            what = "npy %s %s" % (arr.dtype, arr.shape)
        elif low.endswith((".pt", ".pth", ".safetensors")):
            if low.endswith(".safetensors"):
                from safetensors.torch import load_file
                obj = load_file(path, device="cpu")
            else:
                obj = torch.load(path, map_location="cpu", weights_only=True)
            if torch.is_tensor(obj):
                tensors = [obj]
            elif isinstance(obj, dict):
                tensors = [v for _, v in sorted(obj.items()) if torch.is_tensor(v)]
            else:
                tensors = []
            if not tensors:
                raise UsageError("%s holds no tensors" % path)
            data = torch.cat([t.detach().contiguous().view(-1).view(torch.uint8) for t in tensors])
            what = "%d tensors (%s)" % (len(tensors), ", ".join(sorted({str(t.dtype) for t in tensors})))
        else:
            with open(path, "rb") as f:
                data, what = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8), "raw bytes"
    except UsageError:
        raise
    except Exception as e:  # unreadable, damaged, or not what its name says
        raise UsageError("cannot read %s: %s" % (path, str(e).strip().splitlines()[0]))
    if data.numel() == 0:
        raise UsageError("%s is empty" % path)
    return data, what


def content_chunks(args, nbytes, pattern):
    """(offset, pageable uint8 tensor) pieces of the table's content, in order."""
    dtype = DTYPES[args.dtype]
    esize = torch.empty(0, dtype=dtype).element_size()
    row = args.dim * esize
    off = 0
    while off < nbytes:
        n = min(CHUNK - CHUNK % row, nbytes - off)
        if pattern is not None:
            start = off % pattern.numel()
            reps = -(-(start + n) // pattern.numel())
            yield off, pattern.repeat(reps)[start:start + n]
        else:
            gen = torch.Generator().manual_seed(args.seed * 1000003 + off // CHUNK)
            vals = torch.randn(n // esize, generator=gen)
            if args.init == "trained-like":
                rows = vals.view(-1, args.dim)
                rows.mul_(torch.randn(rows.shape[0], 1, generator=gen).mul_(0.5).exp_().mul_(0.02))
            yield off, vals.to(dtype).view(torch.uint8)
        off += n


class Table:
    def __init__(self, args, dev, pattern):
        self.dtype = DTYPES[args.dtype]
        esize = torch.empty(0, dtype=self.dtype).element_size()
        self.rows = max(1, int(args.gib * (1 << 30)) // (args.dim * esize))
        self.dim = args.dim
        self.host = ibp.pinned_empty((self.rows, args.dim), self.dtype)
        self.dst = torch.empty((self.rows, args.dim), dtype=self.dtype, device=dev)
        self.ref = torch.empty_like(self.dst)
        self.nbytes = self.rows * args.dim * esize
        hb, rb = self.host.view(-1).view(torch.uint8), self.ref.view(-1).view(torch.uint8)
        for off, chunk in content_chunks(args, self.nbytes, pattern):
            hb[off:off + chunk.numel()].copy_(chunk)
            rb[off:off + chunk.numel()].copy_(chunk.to(dev))  # pageable: never compressed
        torch.cuda.synchronize()
        self.dev = dev
        self.stream = torch.cuda.Stream()
        self.slice_rows = max(1, int(args.slice_mib * (1 << 20)) // (args.dim * esize))
        self.gen = torch.Generator().manual_seed(args.seed + 7)
        self.updates = args.updates
        self.pause = args.pause
        self.slices = []
        self.mismatches = []
        self.epochs = 0
        self.rows_updated = 0
        self.lookup = args.access == "lookup"
        self.batch_rows = None  # lookup: this step's row indices (CPU) and on the device
        self.batch_dev = None
        self.bags = None
        if self.lookup:
            self.batch, self.bag = args.batch - args.batch % args.bag or args.bag, args.bag
            self.chunk_rows = max(1, int(args.chunk_mib * (1 << 20)) // (args.dim * esize))
            ranks = torch.arange(1, self.rows + 1, dtype=torch.float64)
            cdf = ranks.pow(-args.zipf).cumsum(0)
            self.cdf = cdf.div_(cdf[-1].item())
            self.hot = (torch.randperm(self.rows, generator=torch.Generator().manual_seed(args.seed + 11))
                        if args.spread else torch.arange(self.rows))
            self.seed = args.seed
            self.steps_drawn = {True: 0, False: 0}
            self.step_bytes = {True: [], False: []}

    def plan(self, on=True):
        """This epoch's slices: boundaries shifted by a random phase, in a shuffled order.  Lookup: the
        chunks holding a Zipf batch of rows, in address order; the k-th step with the path on and the
        k-th with it off draw the same batch."""
        if self.lookup:
            k = self.steps_drawn[on]
            self.steps_drawn[on] += 1
            gen = torch.Generator().manual_seed(self.seed * 7919 + 104729 * k)
            ranks = torch.searchsorted(self.cdf, torch.rand(self.batch, generator=gen, dtype=torch.float64))
            self.batch_rows = self.hot[ranks.clamp_(max=self.rows - 1)]
            self.batch_dev = self.batch_rows.to(self.dev)
            chunks = torch.unique(self.batch_rows // self.chunk_rows).tolist()
            self.slices = [(c * self.chunk_rows, min((c + 1) * self.chunk_rows, self.rows)) for c in chunks]
            row_bytes = self.host.element_size() * self.dim
            self.step_bytes[on].append(sum(b - a for a, b in self.slices) * row_bytes)
            return
        phase = int(torch.randint(0, self.slice_rows, (1,), generator=self.gen))
        cuts = [0] + list(range(phase or self.slice_rows, self.rows, self.slice_rows)) + [self.rows]
        pieces = [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]
        order = torch.randperm(len(pieces), generator=self.gen).tolist()
        self.slices = [pieces[i] for i in order]

    def update_rows(self, i):
        """Rewrites a few rows in place, host and reference alike (index assignment or numpy in turn)."""
        if not self.updates:
            return
        if self.batch_rows is not None:  # sparse SGD: rows the last batch looked up
            looked = self.batch_rows.unique()
            rows = looked[torch.randperm(looked.numel(), generator=self.gen)[:self.updates]].sort().values
        else:
            rows = torch.randint(0, self.rows, (self.updates,), generator=self.gen).unique()
        noise = torch.randn(rows.numel(), self.dim, generator=self.gen).mul_(1e-3)
        vals = self.host[rows].float().mul_(0.999).add_(noise).to(self.dtype)
        if i % 2:
            # numpy has no bf16: write the rows' bits through integer views of the same width
            ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[vals.element_size()]
            self.host.view(ints).numpy()[rows.numpy()] = vals.view(ints).numpy()
        else:
            self.host[rows] = vals
        self.ref[rows.to(self.dev)] = vals.to(self.dev)
        self.rows_updated += rows.numel()

    def before(self, i, on, update=True):
        if update:
            self.update_rows(i)
            if self.pause:
                time.sleep(self.pause)
        self.plan(on)
        self.dst.view(-1).view(torch.uint8).fill_(POISON)
        torch.cuda.synchronize()

    def epoch(self):
        with torch.cuda.stream(self.stream):
            for a, b in self.slices:
                self.dst[a:b].copy_(self.host[a:b], non_blocking=True)
            if self.lookup:
                self.bags = self.bags_of(self.dst)
        self.stream.synchronize()

    def bags_of(self, table):
        """Embedding bags: the batch's rows of `table` gathered and summed, bag rows at a time."""
        return table.index_select(0, self.batch_dev).float().view(-1, self.bag, self.dim).sum(1)

    def check(self, i, on):
        self.epochs += 1
        if self.lookup:
            want_bags = self.bags_of(self.ref)
            bad = [(a, b) for a, b in self.slices if not torch.equal(self.dst[a:b], self.ref[a:b])]
            bags_same = torch.equal(self.bags.view(torch.int32), want_bags.view(torch.int32))
            if bad or not bags_same:
                self.mismatches.append({"epoch": i, "path_on": on, "slices": len(bad), "first": bad[:5],
                                        "bags_differ": not bags_same})
            return
        got, want = self.dst.view(-1).view(torch.uint8), self.ref.view(-1).view(torch.uint8)
        if torch.equal(got, want):
            return
        words = (got.view(self.rows, -1), want.view(self.rows, -1))
        bad = [(a, b) for a, b in self.slices if not torch.equal(words[0][a:b], words[1][a:b])]
        self.mismatches.append({"epoch": i, "path_on": on, "slices": len(bad), "first": bad[:5]})


def main(argv=None):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        return ibp.no_cuda(NAME)
    dev = ibp.cuda_device()
    shim = ibp.Shim()
    t0 = time.perf_counter()
    pattern, content = None, None
    if args.table:
        try:
            pattern, what = file_bytes(args.table)
        except UsageError as e:
            print("%s: %s" % (NAME, e), file=sys.stderr)
            return 2
        content = {"source": "file", "path": os.path.abspath(args.table), "what": what,
                   "file_bytes": pattern.numel(), "tiled": True}
    else:
        content = {"source": "seeded random init", "init": args.init, "seed": args.seed}
    t = Table(args, dev, pattern)
    setup_s = time.perf_counter() - t0

    def warm_epoch():
        t.before(-1, True, update=False)
        t.epoch()
        t.check(-1, True)

    warm = ibp.warm_up(shim, warm_epoch, args.warmup_timeout)
    for i in range(3):  # with updates, so path = auto measures what the timed epochs will see
        t.before(-2 - i, True)
        t.epoch()
        t.check(-2 - i, True)
    if t.lookup:  # the timed steps of each side draw the same batches, in the same order
        t.steps_drawn = {True: 0, False: 0}
        t.step_bytes = {True: [], False: []}
    ab = ibp.run_ab(shim, t.epoch, args.blocks, args.iters, before=t.before, after=t.check)
    # Bytes a step copies: the table in a scan; in a lookup the mean over the timed blocks' steps.
    step_bytes = t.nbytes
    if t.lookup:
        drawn = t.step_bytes[True] + t.step_bytes[False]
        step_bytes = sum(drawn) / len(drawn)
    traces = {}
    if args.trace:
        os.makedirs(args.trace, exist_ok=True)
        for on in (True, False):
            key = "epoch_%s" % ("on" if on else "off")
            traces[key] = ibp.profile_split(shim, t.epoch, on, args.iters,
                                            os.path.join(args.trace, "%s.trace.json" % key))
            # As timed: rows updated, the destination poisoned and the device synced before each.
            key = "timed_%s" % ("on" if on else "off")
            traces[key] = ibp.profile_split(shim, t.epoch, on, args.iters,
                                            os.path.join(args.trace, "%s.trace.json" % key),
                                            before=t.before, after=t.check)
        t.before(-99, True, update=False)  # the traced epochs' bytes are checked too
        t.epoch()
        t.check(-99, True)
    totals = shim.totals()
    s = ibp.summarize_ab(ab, step_bytes, totals, shim.present)
    identical = not t.mismatches
    res = {
        "workload": NAME, "label": "%s %s" % (NAME, content.get("init") or os.path.basename(args.table)),
        "content": content, "args": vars(args), "quick": args.quick,
        "table": {"bytes": t.nbytes, "rows": t.rows, "dim": t.dim, "dtype": args.dtype,
                  "slice_rows": t.slice_rows, "slices_per_epoch": len(t.slices)},
        "access": args.access, "bytes_per_step": step_bytes,
        "setup_s": setup_s, "compressed_seen": warm["compressed_seen"], "warmup": warm,
        "gbps_on": step_bytes / s["step_s_on"] / 1e9, "gbps_off": step_bytes / s["step_s_off"] / 1e9,
        "epochs_checked": t.epochs, "rows_updated": t.rows_updated, "mismatches": t.mismatches[:20],
        "identical": identical, "totals": totals, "environment": ibp.environment(shim), "traces": traces,
    }
    res.update(s)
    if t.lookup:
        pattern_text = ("lookup: batches of %d rows (Zipf %.2f, bags of %d) need %.0f MiB a step in chunks of "
                        "%.0f MiB" % (t.batch, args.zipf, t.bag, step_bytes / 2**20, args.chunk_mib))
    else:
        pattern_text = "%d slices of ~%.0f MiB per epoch in shuffled order" % (len(t.slices), args.slice_mib)
    print("%s: %.2f GiB %s table (%s), %s, %d rows updated "
          "between epochs: on %.1f ms (%.1f GB/s) off %.1f ms (%.1f GB/s) speedup=%s ideal=%s ideal_codec=%s "
          "sent=%s; %s; shim %s" % (
              NAME, t.nbytes / 2**30, args.dtype, content_text(content), pattern_text, args.updates,
              s["step_s_on"] * 1e3, res["gbps_on"], s["step_s_off"] * 1e3, res["gbps_off"],
              ibp.fmt_ratio(s["speedup"], 3), ibp.fmt_ratio(s["ideal"]), ibp.fmt_ratio(s["ideal_codec"]),
              "n/a" if s["wire_ratio"] is None else "%.1f%%" % (100 * s["wire_ratio"]),
              "every slice identical (%d epochs)" % t.epochs if identical
              else "SLICES DIFFER in %d of %d epochs" % (len(t.mismatches), t.epochs),
              "preloaded" if shim.present else "NOT preloaded (control run)"))
    for key, sp in traces.items():
        print("%s: trace %s: %s" % (NAME, key, ibp.fmt_split(sp)))
    ibp.write_json(args.json, res)
    return 0 if identical else 1


def content_text(c):
    if c["source"] == "file":
        name = os.path.basename(c["path"])
        return "%s tiled from %s, %.1f MiB" % (c["what"], name, c["file_bytes"] / 2**20)
    return "%s init, seed %d" % (c["init"], c["seed"])


if __name__ == "__main__":
    with torch.inference_mode():
        sys.exit(main())
