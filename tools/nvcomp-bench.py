#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# ibpshim: nvCOMP's GPU codecs on the real tensors, timed the way ibp-bench times the shim.
"""Usage: nvcomp-bench.py [FILE...] [--size BYTES[,BYTES...]] [--iters N] [--json PATH]
                       [--ibp-json FILE...] [--quick] [--all] [--codecs LIST] [--best-by KEY]

For every raw tensor file (dtype from the file name: ..._f32_..., _bf16, _u8, _i32, _f64; or
FILE:DTYPE), tiled by whole repeats up to each --size exactly as ibp-bench tiles it (so both see
the same bytes), and for every nvCOMP codec (Bitcomp, Cascaded, ANS, LZ4, GDeflate), measures on
the GPU in one process with CUDA events, warm-up and the median of --iters runs:

  ratio        compressed bytes (nvCOMP's native format, its headers included) / original bytes
  decode       decode alone, device to device, GB/s of original bytes
  DMA+decode   pinned host compressed bytes copied to the device (one non_blocking copy), then
               decoded, on one stream: original bytes / total time
  pipelined    the same in independently compressed pieces (--piece, default 8 MiB like
               ibp-bench's chunks): the copy of piece k+1 overlaps the decode of piece k on a
               second stream
  raw H2D      a plain pinned copy of the original bytes, timed in the same run

Device buffers rotate over enough copies to exceed the L2 cache. Each configuration's decode is
checked byte for byte against the original once (output poisoned first) in both paths.

Each codec runs at its library defaults (Codec(algorithm=X), input given as bytes) and at a set
of per-dtype candidate settings (data types, algorithm variants, bitshuffle, Cascaded modes,
then chunk sizes and the execution policy on the winner); "best" is the verified candidate
with the highest effective H2D throughput (max of DMA+decode and pipelined; --best-by changes
that). --all prints every candidate. --ibp-json merges ibp-bench --json output (one object per
line) into the same table. Progress goes to stderr, the Markdown table to stdout.

Needs PyTorch with CUDA, numpy and the nvidia-nvcomp-cu13 + nvidia-libnvcomp-cu13 wheels
(import nvidia.nvcomp). Exits 2 without a CUDA device or on bad arguments. The six tensors at
256 MiB with --iters 10 take about 3.5 minutes on an H200 (--quick: 35 s); time grows with the
size and the iterations, so run 1 GiB tiles a few files at a time.
"""
import argparse
import glob
import json
import math
import os
import re
import statistics
import sys
import time

PROG = "nvcomp-bench"
MIB = 1 << 20
CODECS = ("Bitcomp", "Cascaded", "ANS", "LZ4", "GDeflate")

# dtype name -> (bytes per element, kind): f float, bf bfloat16, i signed, u unsigned
DTYPES = {
    "float64": (8, "f"), "float32": (4, "f"), "float16": (2, "f"), "bfloat16": (2, "bf"),
    "int64": (8, "i"), "uint64": (8, "u"), "int32": (4, "i"), "uint32": (4, "u"),
    "int16": (2, "i"), "uint16": (2, "u"), "int8": (1, "i"), "uint8": (1, "u"),
}
DTYPE_TOKENS = {
    "f64": "float64", "fp64": "float64", "float64": "float64",
    "f32": "float32", "fp32": "float32", "float32": "float32",
    "f16": "float16", "fp16": "float16", "float16": "float16",
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "i64": "int64", "int64": "int64", "u64": "uint64", "uint64": "uint64",
    "i32": "int32", "int32": "int32", "u32": "uint32", "uint32": "uint32",
    "i16": "int16", "int16": "int16", "u16": "uint16", "uint16": "uint16",
    "i8": "int8", "int8": "int8", "u8": "uint8", "uint8": "uint8",
}


def log(msg):
    print("%s: %s" % (PROG, msg), file=sys.stderr, flush=True)


def fail(msg, code=2):
    log(msg)
    sys.exit(code)


def parse_size(text):
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMgG]?)(i?[bB])?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError("bad size %r (e.g. 64M, 256M, 1G)" % text)
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]
    value = int(float(m.group(1)) * scale)
    if value <= 0:
        raise argparse.ArgumentTypeError("size must be positive: %r" % text)
    return value


def parse_sizes(text):
    return [parse_size(t) for t in text.split(",") if t.strip()]


def dtype_of(path):
    """FILE:DTYPE, else the first dtype token of the file name, else None."""
    base = os.path.basename(path)
    stem = re.sub(r"\.(bin|raw|dat)$", "", base)
    for tok in re.split(r"[_.\-]", stem.lower()):
        if tok in DTYPE_TOKENS:
            return DTYPE_TOKENS[tok]
    return None


def split_file_arg(arg):
    """'path:dtype' -> (path, dtype); a plain path -> (path, dtype from its name)."""
    if ":" in arg and not os.path.exists(arg):
        path, _, dt = arg.rpartition(":")
        dt = DTYPE_TOKENS.get(dt.lower(), dt.lower())
        if dt not in DTYPES:
            raise ValueError("%s: unknown dtype %r (one of %s)" % (path, dt, ", ".join(sorted(DTYPES))))
        return path, dt
    return arg, dtype_of(arg)


def mib(n):
    return n / MIB


def fmt_size(n):
    if n % (1 << 30) == 0:
        return "%d GiB" % (n >> 30)
    if n % MIB == 0:
        return "%d MiB" % (n >> 20)
    return "%.1f MiB" % mib(n)


# ---------------------------------------------------------------------------------------------
# Candidate settings


def typestr(kind, size):
    return ("|" if size == 1 else "<") + kind + str(size)


def settings_text(kwargs):
    if not kwargs:
        return "defaults"
    parts = []
    for k, v in kwargs.items():
        if k == "fine_grained_encodings":
            names = [n for n, bit in (("DELTA", 1), ("RLE", 2), ("FOR", 4)) if int(v) & bit]
            v = "+".join(names) or "NONE"
        elif hasattr(v, "name"):
            v = v.name
        parts.append("%s=%s" % (k, v))
    return " ".join(parts)


def settings_json(kwargs):
    return {k: (v.name if hasattr(v, "name") else v) for k, v in kwargs.items()}


def candidates(nv, codec, dtype):
    """Per-dtype settings worth trying, the library defaults first. Data types are nvCOMP's
    array-protocol strings; the input is always handed over as bytes, so a data type only says how
    the codec should read them (bf16 has no nvCOMP type: it goes as 16-bit integers, and as IEEE
    half where the codec has a float-specific path; the bit patterns are kept either way)."""
    size, kind = DTYPES[dtype]
    signed, unsigned = typestr("i", size), typestr("u", size)
    flt = typestr("f", size) if kind in ("f", "bf") and size >= 2 else None
    out = [{}]
    if codec == "Bitcomp":
        for dt in [t for t in (flt, signed, unsigned) if t]:
            for algo in (0, 1):
                out.append({"data_type": dt, "algorithm_type": algo})
    elif codec == "Cascaded":
        # Cascaded reads integers only; floats go as their bit patterns.
        for dt in (unsigned, signed):
            out.append({"data_type": dt})
            out.append({"data_type": dt, "compression_level": 9})
            if size >= 4:
                out.append({"data_type": dt, "mode": nv.CascadedMode.SYMMETRIC,
                            "fine_grained_encodings": int(nv.DELTA) | int(nv.RLE) | int(nv.FOR)})
    elif codec == "ANS":
        if flt and size in (2, 4):
            out.append({"data_type": flt})
    elif codec == "LZ4":
        # LZ4 takes element types up to 4 bytes ("Illegal data type" for 8).
        lz4_type = typestr("u", min(size, 4))
        modes = [nv.NVCOMP_BITSHUFFLE_MSB_FIRST, nv.NVCOMP_BITSHUFFLE_LSB_FIRST]
        if size > 1:
            modes.insert(0, nv.NVCOMP_BITSHUFFLE_NONE)
        for mode in modes:
            out.append({"data_type": lz4_type, "bitshuffle_mode": mode})
    elif codec == "GDeflate":
        for level in (0, 2, 4, 5):
            out.append({"algorithm_type": level})
    return out


def tweaks(nv, codec):
    """Groups of options tried one group at a time on the winner so far. nvCOMP decodes a chunk
    per warp or block, so smaller chunks mean more parallel work per piece (the pipelined path
    decodes 8 MiB at a time) and larger ones a better ratio; GDeflate's chunks stop at 64 KiB."""
    chunks = [16 << 10, 32 << 10] + ([] if codec == "GDeflate" else [256 << 10])
    return [[{"uncomp_chunk_size": c} for c in chunks],
            [{"execution_policy": nv.ExecutionPolicy.LATENCY}]]


# ---------------------------------------------------------------------------------------------
# ibp-bench rows


def load_ibp_json(paths):
    """ibp-bench --json prints one object per line; a file may also hold a JSON list."""
    rows = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            fail("cannot read --ibp-json %s: %s" % (path, e))
        objs = []
        stripped = text.strip()
        if stripped.startswith("["):
            try:
                objs = json.loads(stripped)
            except ValueError as e:
                fail("%s: not JSON: %s" % (path, e))
        else:
            for n, line in enumerate(text.splitlines(), 1):
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    objs.append(json.loads(line))
                except ValueError as e:
                    fail("%s:%d: not JSON: %s" % (path, n, e))
        for o in objs:
            if not isinstance(o, dict) or "file" not in o or "bytes" not in o:
                fail("%s: an object without 'file' and 'bytes' is not ibp-bench output" % path)
            pipe = o.get("pipelined_gbps")
            serial = o.get("dma_decode_gbps")
            rows.append({
                "source": "ibp-bench", "file": os.path.basename(o["file"]), "dtype": dtype_of(o["file"]),
                "bytes": int(o["bytes"]), "codec": "ibpshim", "settings": "auto",
                "roles": ["ibp"], "ratio": o.get("ratio"), "compressed": o.get("compressed"),
                "decode_gbps": o.get("decode_gbps"), "dma_decode_gbps": serial,
                "pipelined_gbps": pipe, "zerocopy_gbps": o.get("zerocopy_gbps"),
                "raw_gbps": o.get("raw_gbps"), "verified": o.get("verified"),
                "device": o.get("device"),
            })
    return rows


# ---------------------------------------------------------------------------------------------
# GPU part


class Gpu:
    """PyTorch and nvCOMP, imported only once arguments are known to be good."""

    def __init__(self, args):
        try:
            import numpy
            import torch
        except ImportError as e:
            fail("needs PyTorch and numpy (%s)" % e)
        if not torch.cuda.is_available():
            fail("no CUDA device")
        try:
            import nvidia.nvcomp as nv
        except ImportError as e:
            fail("cannot import nvidia.nvcomp (%s): install the nvidia-nvcomp-cu13 and "
                 "nvidia-libnvcomp-cu13 wheels and put them on PYTHONPATH" % e)
        self.np, self.torch, self.nv = numpy, torch, nv
        torch.cuda.set_device(args.device)
        props = torch.cuda.get_device_properties(args.device)
        self.name = props.name
        self.l2 = int(getattr(props, "L2_cache_size", 0) or 60 * MIB)
        self.S = torch.cuda.Stream()   # nvCOMP's stream: decodes, serial paths
        self.C = torch.cuda.Stream()   # copies of the pipelined path
        self.sptr = int(self.S.cuda_stream)
        if args.allocator == "torch":
            # nvCOMP's scratch memory from PyTorch's caching allocator, on the stream nvCOMP names,
            # so that no cudaMalloc/cudaFree lands inside a timed decode.
            nv.set_device_allocator(self.alloc)
        self.cycles_per_ms = self.calibrate_sleep()

    def alloc(self, nbytes, stream):
        torch = self.torch
        ptr = int(stream.ptr)
        ts = torch.cuda.ExternalStream(ptr) if ptr and not stream.is_special else torch.cuda.current_stream()
        with torch.cuda.stream(ts):
            t = torch.empty(max(int(nbytes), 1), dtype=torch.uint8, device="cuda")
        return TorchBlock(t)

    def calibrate_sleep(self):
        """Clock cycles per millisecond of torch.cuda._sleep, to hold a stream while the host
        queues a timed batch (so host-side call overhead stays out of the events)."""
        torch = self.torch
        if not hasattr(torch.cuda, "_sleep"):
            return 0
        with torch.cuda.stream(self.S):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(1000)
            a.record()
            torch.cuda._sleep(20_000_000)
            b.record()
        b.synchronize()
        ms = a.elapsed_time(b)
        return 20_000_000 / ms if ms > 0 else 0

    def hold(self, ms):
        if self.cycles_per_ms and ms > 0:
            with self.torch.cuda.stream(self.S):
                self.torch.cuda._sleep(int(min(ms, 500.0) * self.cycles_per_ms))

    def as_array(self, t):
        return self.nv.as_array(t, cuda_stream=self.sptr)

    def timed(self, launch, iters, warmup):
        """Median milliseconds of launch(i, start, end), which records start and end itself.
        Returns (median ms, host-bound flag)."""
        torch = self.torch
        t0 = time.perf_counter()
        for i in range(warmup):
            launch(i, None, None)
        host_ms = (time.perf_counter() - t0) * 1e3 / max(warmup, 1)
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(iters)]
        self.hold(1.5 * host_ms * iters + 1.0)
        t0 = time.perf_counter()
        for i, (a, b) in enumerate(ev):
            launch(warmup + i, a, b)
        queued_ms = (time.perf_counter() - t0) * 1e3
        torch.cuda.synchronize()
        ms = sorted(a.elapsed_time(b) for a, b in ev)
        gpu_ms = ev[0][0].elapsed_time(ev[-1][1])
        # If the host took longer to queue the batch than the held stream plus the GPU work, the
        # GPU waited for the host and the events may include that wait.
        host_bound = not self.cycles_per_ms or queued_ms > gpu_ms + 1.5 * host_ms * iters + 1.0
        return statistics.median(ms), host_bound


class TorchBlock:
    """What nvCOMP's allocator hook expects: an object with .ptr that frees on deletion."""

    def __init__(self, t):
        self.t = t
        self.ptr = t.data_ptr()


class Tile:
    """One file tiled to one size: pinned host and device copies of the original bytes."""

    def __init__(self, gpu, path, dtype, size, data):
        np, torch = gpu.np, gpu.torch
        self.path, self.dtype = path, dtype
        self.file = os.path.basename(path)
        reps = -(-size // len(data)) if size > len(data) else 1
        self.nbytes = reps * len(data)
        self.host = torch.empty(self.nbytes, dtype=torch.uint8, pin_memory=True)
        self.host.copy_(torch.from_numpy(np.tile(data, reps)))
        with torch.cuda.stream(gpu.S):
            self.dev = self.host.to("cuda", non_blocking=True)
        gpu.S.synchronize()
        # Copies of everything a timed loop touches, enough of them to exceed L2 three times over.
        self.rot = max(2, math.ceil(3 * gpu.l2 / self.nbytes))
        with torch.cuda.stream(gpu.S):
            self.outs = [torch.empty(self.nbytes, dtype=torch.uint8, device="cuda") for _ in range(self.rot)]


def bench_raw(gpu, tile, args):
    torch, S = gpu.torch, gpu.S

    def launch(i, a, b):
        with torch.cuda.stream(S):
            if a:
                a.record()
            tile.outs[i % tile.rot].copy_(tile.host, non_blocking=True)
            if b:
                b.record()

    ms, _ = gpu.timed(launch, args.iters, args.warmup)
    return gbps(tile.nbytes, ms)


def gbps(nbytes, ms):
    return nbytes / (ms * 1e6) if ms > 0 else 0.0


def bench_config(gpu, tile, codec_name, kwargs, args):
    """One codec configuration on one tile; raises on any failure or a wrong decode."""
    codec = gpu.nv.Codec(algorithm=codec_name, cuda_stream=gpu.sptr, **kwargs)
    row = bench_whole(gpu, tile, codec, args)
    host_bound = row.pop("host_bound")
    if 0 < args.piece < tile.nbytes:
        row.update(bench_pipelined(gpu, tile, codec, args))
        host_bound = host_bound or row.pop("host_bound")
    if host_bound:
        row["note"] = "host-bound timing"
    return row


def bench_whole(gpu, tile, codec, args):
    """The tile as one compressed buffer: ratio, decode alone, DMA then decode."""
    torch, S = gpu.torch, gpu.S
    n, rot = tile.nbytes, tile.rot
    with torch.cuda.stream(S):
        ccfg = codec.compression_config(n)
        enc = codec.encode(gpu.as_array(tile.dev), compression_config=ccfg)
        S.synchronize()
        clen = int(enc.buffer_size)
        comp0 = torch.as_tensor(enc, device="cuda").view(torch.uint8).reshape(-1)[:clen].clone()
        del enc
        if comp0.numel() != clen:
            raise RuntimeError("encoded array holds %d bytes, reports %d" % (comp0.numel(), clen))
        dcfg = codec.decompression_config(ccfg)
        comps = [comp0] + [comp0.clone() for _ in range(rot - 1)]
        comp_arrs = [gpu.as_array(c) for c in comps]
        out_arrs = [gpu.as_array(o) for o in tile.outs]
        host_comp = torch.empty(clen, dtype=torch.uint8, pin_memory=True)
        host_comp.copy_(comp0)
        tile.outs[0].fill_(0xA5)
        codec.decode(comp_arrs[0], out=out_arrs[0], decompression_config=dcfg)
        S.synchronize()
        if not torch.equal(tile.outs[0], tile.dev):
            raise RuntimeError("decode differs from the original")

    def dec(i, a, b):
        r = i % rot
        if a:
            a.record(S)
        codec.decode(comp_arrs[r], out=out_arrs[r], decompression_config=dcfg)
        if b:
            b.record(S)

    def dma(i, a, b):
        r = i % rot
        with torch.cuda.stream(S):
            if a:
                a.record()
            comps[r].copy_(host_comp, non_blocking=True)
            codec.decode(comp_arrs[r], out=out_arrs[r], decompression_config=dcfg)
            if b:
                b.record()

    dec_ms, hb1 = gpu.timed(dec, args.iters, args.warmup)
    dma_ms, hb2 = gpu.timed(dma, args.iters, args.warmup)
    return {"ratio": clen / n, "compressed": clen, "decode_gbps": gbps(n, dec_ms),
            "dma_decode_gbps": gbps(n, dma_ms), "host_bound": hb1 or hb2}


def bench_pipelined(gpu, tile, codec, args):
    """Independently compressed pieces; the copy of one overlaps the decode of the one before."""
    torch, S, C = gpu.torch, gpu.S, gpu.C
    n, rot = tile.nbytes, tile.rot
    align = 256
    piece = max(args.piece - args.piece % DTYPES[tile.dtype][0], DTYPES[tile.dtype][0])
    spans = [(off, min(piece, n - off)) for off in range(0, n, piece)]
    ccfgs, dcfgs = {}, {}
    for _, ln in spans:
        if ln not in ccfgs:
            ccfgs[ln] = codec.compression_config(ln)
            dcfgs[ln] = codec.decompression_config(ccfgs[ln])
    with torch.cuda.stream(S):
        encs = [codec.encode(gpu.as_array(tile.dev[off:off + ln]), compression_config=ccfgs[ln])
                for off, ln in spans]
        S.synchronize()
        sizes = [int(e.buffer_size) for e in encs]
        offs, at = [], 0
        for s in sizes:
            offs.append(at)
            at += -(-s // align) * align
        packed = torch.empty(at, dtype=torch.uint8, device="cuda")
        for e, o, s in zip(encs, offs, sizes):
            packed[o:o + s].copy_(torch.as_tensor(e, device="cuda").view(torch.uint8).reshape(-1)[:s])
        S.synchronize()
        del encs
        host = torch.empty(at, dtype=torch.uint8, pin_memory=True)
        host.copy_(packed)
        devs = [packed] + [packed.clone() for _ in range(rot - 1)]
        # Views and their nvCOMP wrappers are made once, outside the timed loop.
        src = [[gpu.as_array(d[o:o + s]) for o, s in zip(offs, sizes)] for d in devs]
        dst = [[gpu.as_array(out[off:off + ln]) for off, ln in spans] for out in tile.outs]
    ready = [torch.cuda.Event() for _ in spans]

    def pipe(i, a, b):
        r = i % rot
        C.wait_stream(S)
        if a:
            a.record(C)
        for k, (off, ln) in enumerate(spans):
            o, s = offs[k], sizes[k]
            with torch.cuda.stream(C):
                devs[r][o:o + s].copy_(host[o:o + s], non_blocking=True)
                ready[k].record(C)
            S.wait_event(ready[k])
            codec.decode(src[r][k], out=dst[r][k], decompression_config=dcfgs[ln])
        if b:
            b.record(S)

    with torch.cuda.stream(S):
        tile.outs[0].fill_(0xA5)
    pipe(0, None, None)
    S.synchronize()
    if not torch.equal(tile.outs[0], tile.dev):
        raise RuntimeError("pipelined decode differs from the original")
    ms, hb = gpu.timed(pipe, args.iters, args.warmup)
    return {"pipelined_gbps": gbps(n, ms), "pipelined_ratio": sum(sizes) / n, "pieces": len(spans),
            "host_bound": hb}


def context_broken(gpu):
    try:
        gpu.torch.cuda.synchronize()
        return False
    except Exception:  # noqa: BLE001 - any CUDA error here means the context is gone
        return True


def effective(row):
    """The best host-to-device path of a row (ibp-bench rows also have zero-copy)."""
    vals = [v for v in (row.get("dma_decode_gbps"), row.get("pipelined_gbps"), row.get("zerocopy_gbps")) if v]
    return max(vals) if vals else 0.0


def pick_best(rows, key):
    ok = [r for r in rows if r.get("verified")]
    if not ok:
        return None
    if key == "ratio":
        return min(ok, key=lambda r: r["ratio"])
    if key == "decode":
        return max(ok, key=lambda r: r["decode_gbps"])
    return max(ok, key=effective)


def run_codec(gpu, tile, codec_name, args, raw, results, step):
    nv = gpu.nv
    tried = []

    def one(kwargs):
        step[0] += 1
        label = settings_text(kwargs)
        base = {"source": "nvcomp", "file": tile.file, "dtype": tile.dtype, "bytes": tile.nbytes,
                "codec": codec_name, "settings": label, "kwargs": settings_json(kwargs), "roles": [],
                "raw_gbps": raw}
        t0 = time.perf_counter()
        try:
            base.update(bench_config(gpu, tile, codec_name, kwargs, args))
            base["verified"] = True
            log("[%d] %s %s %s %s: ratio %.4f, decode %.1f GB/s, DMA+decode %.1f, pipelined %s (%.1f s)" % (
                step[0], tile.file, fmt_size(tile.nbytes), codec_name, label, base["ratio"],
                base["decode_gbps"], base["dma_decode_gbps"],
                "%.1f" % base["pipelined_gbps"] if base.get("pipelined_gbps") else "-",
                time.perf_counter() - t0))
        except Exception as e:  # noqa: BLE001 - every failure is reported and the run goes on
            reason = " ".join(str(e).split()) or type(e).__name__
            base.update(verified=False, error="%s: %s" % (type(e).__name__, reason))
            log("[%d] %s %s %s %s: failed: %s" % (step[0], tile.file, fmt_size(tile.nbytes), codec_name,
                                                   label, base["error"]))
            if context_broken(gpu):
                results.append(base)
                raise SystemExit("%s: the CUDA context is broken after %s %s; stopping" % (
                    PROG, codec_name, label))
        tried.append(base)
        results.append(base)
        return base

    cands = candidates(nv, codec_name, tile.dtype) if args.tune else [{}]
    for kwargs in cands:
        one(kwargs)
    tried[0]["roles"].append("default")
    if not args.tune:
        return
    kwargs_of = {id(row): kw for row, kw in zip(tried, cands)}
    best = pick_best(tried, args.best_by)
    if best is None:
        return
    for group in tweaks(nv, codec_name):
        base = kwargs_of[id(best)]
        for extra in group:
            kw = dict(base, **extra)
            kwargs_of[id(one(kw))] = kw
        best = pick_best(tried, args.best_by)
    best["roles"].append("best")


# ---------------------------------------------------------------------------------------------
# Output


def cell(v, fmt="%.1f"):
    return fmt % v if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"


def table(rows, show_all):
    order = {c: i for i, c in enumerate(("ibpshim",) + CODECS)}
    shown = [r for r in rows if show_all or r["roles"]]
    shown.sort(key=lambda r: (r["bytes"], r["file"], order.get(r["codec"], 99),
                              0 if "default" in r["roles"] else 1))
    lines = ["| file | dtype | MiB | codec | settings | role | ratio | decode GB/s | DMA+decode GB/s "
             "| pipelined GB/s | zero-copy GB/s | raw H2D GB/s | best / raw | ideal 1/ratio |",
             "|" + "---|" * 14]
    for r in shown:
        if r.get("error"):
            lines.append("| %s | %s | %.0f | %s | %s | failed | %s |%s" % (
                r["file"], r["dtype"], mib(r["bytes"]), r["codec"], r["settings"],
                r["error"].replace("|", "/")[:120], " |" * 7))
            continue
        eff, raw = effective(r), r.get("raw_gbps")
        role = "+".join(r["roles"]) or "candidate"
        if r.get("verified") is False:
            role += " (WRONG)"
        if r.get("note"):
            role += " (%s)" % r["note"]
        lines.append("| %s | %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["file"], r["dtype"] or "?", mib(r["bytes"]), r["codec"], r["settings"], role,
            cell(r.get("ratio"), "%.4f"), cell(r.get("decode_gbps")), cell(r.get("dma_decode_gbps")),
            cell(r.get("pipelined_gbps")), cell(r.get("zerocopy_gbps")), cell(raw),
            cell(eff / raw if eff and raw else None, "%.3f"),
            cell(1.0 / r["ratio"] if r.get("ratio") else None, "%.3f")))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", metavar="FILE[:DTYPE]",
                    help="raw tensor files (default: every .bin in $IBPSHIM_TEST_DATA or ../shared/data)")
    ap.add_argument("--size", type=parse_sizes, action="append", metavar="BYTES[,BYTES]",
                    help="tile size(s), K/M/G suffixes, repeatable (default 256M)")
    ap.add_argument("--iters", type=int, default=20, help="timed runs per measurement (median; default 20)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed runs first (default 3)")
    ap.add_argument("--piece", type=parse_size, default=8 * MIB,
                    help="piece size of the pipelined path, 0 to skip it (default 8M)")
    ap.add_argument("--codecs", default=",".join(CODECS), help="comma list (default all: %(default)s)")
    ap.add_argument("--best-by", choices=("h2d", "ratio", "decode"), default="h2d",
                    help="how 'best' is chosen among verified candidates (default h2d: effective H2D)")
    ap.add_argument("--no-tune", dest="tune", action="store_false", help="library defaults only")
    ap.add_argument("--all", action="store_true",
                    help="print every candidate and failure, not only default/best")
    ap.add_argument("--quick", action="store_true", help="64 MiB tiles only, 5 iterations, 1 warm-up")
    ap.add_argument("--json", metavar="PATH", help="write every row (and every failure) as JSON")
    ap.add_argument("--ibp-json", nargs="+", default=[], metavar="FILE",
                    help="ibp-bench --json output to merge into the table")
    ap.add_argument("--allocator", choices=("torch", "nvcomp"), default="torch",
                    help="nvCOMP's device scratch memory: PyTorch's caching allocator (default) "
                    "or nvCOMP's own")
    ap.add_argument("--device", type=int, default=0)
    args = ap.parse_args(argv)

    sizes = [s for group in (args.size or [[256 * MIB]]) for s in group]
    if args.quick:
        sizes, args.iters, args.warmup = [64 * MIB], min(args.iters, 5), min(args.warmup, 1)
    if args.iters < 1 or args.warmup < 0:
        fail("--iters must be >= 1 and --warmup >= 0")
    codecs = [c.strip() for c in args.codecs.split(",") if c.strip()]
    canon = {c.lower(): c for c in CODECS}
    bad = [c for c in codecs if c.lower() not in canon]
    if bad:
        fail("unknown codec(s) %s; known: %s" % (", ".join(bad), ", ".join(CODECS)))
    codecs = [canon[c.lower()] for c in codecs]

    file_args = args.files
    if not file_args:
        here = os.path.dirname(os.path.abspath(__file__))
        data = os.environ.get("IBPSHIM_TEST_DATA") or os.path.join(here, "..", "..", "shared", "data")
        file_args = sorted(glob.glob(os.path.join(data, "*.bin")))
        if not file_args:
            fail("no FILE given and no .bin files in %s" % os.path.normpath(data))
    files = []
    for arg in file_args:
        try:
            path, dt = split_file_arg(arg)
        except ValueError as e:
            fail(str(e))
        if not os.path.isfile(path):
            fail("%s: no such file" % path)
        if dt is None:
            fail("%s: no dtype in the file name; give it as %s:DTYPE (%s)" % (
                path, path, ", ".join(sorted(DTYPES))))
        files.append((path, dt))
    ibp_rows = load_ibp_json(args.ibp_json)

    gpu = Gpu(args)
    results = []
    step = [0]
    info = {"tool": PROG, "device": gpu.name, "torch": gpu.torch.__version__,
            "nvcomp": getattr(gpu.nv, "__version__", "?"), "iters": args.iters, "warmup": args.warmup,
            "piece": args.piece, "best_by": args.best_by, "allocator": args.allocator, "l2_bytes": gpu.l2}
    log("%s, L2 %d MiB, torch %s, nvCOMP %s; %d file(s) x %d size(s) x %d codec(s)" % (
        gpu.name, gpu.l2 >> 20, info["torch"], info["nvcomp"], len(files), len(sizes), len(codecs)))
    stopped = None

    def save():
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(dict(info, rows=ibp_rows + results, stopped=stopped), f, indent=1)
                f.write("\n")

    try:
        for size in sizes:
            for path, dt in files:
                data = gpu.np.fromfile(path, dtype=gpu.np.uint8)
                if len(data) == 0:
                    log("%s: empty, skipped" % path)
                    continue
                if len(data) % DTYPES[dt][0]:
                    log("%s: %d bytes is not a whole number of %s elements" % (path, len(data), dt))
                try:
                    tile = Tile(gpu, path, dt, size, data)
                    raw = bench_raw(gpu, tile, args)
                except Exception as e:  # noqa: BLE001 - e.g. out of memory for this size
                    log("%s at %s: cannot set up: %s" % (path, fmt_size(size), " ".join(str(e).split())))
                    if context_broken(gpu):
                        raise SystemExit("%s: the CUDA context is broken; stopping" % PROG)
                    continue
                log("%s: %s tiles (x%d rotation), raw pinned H2D %.1f GB/s" % (
                    tile.file, fmt_size(tile.nbytes), tile.rot, raw))
                for codec in codecs:
                    run_codec(gpu, tile, codec, args, raw, results, step)
                del tile
                gpu.torch.cuda.empty_cache()
                save()
    except SystemExit as e:
        stopped = str(e)
    print(table(ibp_rows + results, args.all))
    save()
    if stopped:
        log(stopped)
        return 1
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # With nvCOMP 6.0's and PyTorch's CUDA state both alive, interpreter teardown crashed once
    # (SIGSEGV, H100, 1 GiB tiles) after every result had been printed and saved: leave without it.
    os._exit(code)
