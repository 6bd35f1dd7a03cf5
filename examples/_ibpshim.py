# SPDX-License-Identifier: MIT
# ibpshim: what the examples share: the shim's switch and totals, bitwise checks, on/off timing, JSON.
import contextlib
import ctypes
import json
import os
import platform
import statistics
import time

try:
    import torch
except ImportError:  # the trace split (tools/trace-split.py) needs only the standard library
    torch = None


class Shim:
    """The shim's run-time switch and totals (include/ibpshim/ibpshim.h), or no-ops when the shim is not
    preloaded: a program then runs both sides of a comparison on the plain path."""

    class Totals(ctypes.Structure):
        _fields_ = [(name, ctypes.c_uint64) for name in
                    ("copies", "requested", "sent", "compressed_in", "compressed_out")]

    def __init__(self):
        lib = ctypes.CDLL(None)
        self.set_enabled = getattr(lib, "ibpshim_set_enabled", None)
        self.totals_fn = getattr(lib, "ibpshim_transfer_totals", None)
        self.version_fn = getattr(lib, "ibpshim_version", None)
        self.built_fn = getattr(lib, "ibpshim_compression_built", None)
        if self.set_enabled:
            self.set_enabled.argtypes = [ctypes.c_int]
            self.set_enabled.restype = ctypes.c_int
        if self.totals_fn:
            self.totals_fn.argtypes = [ctypes.POINTER(Shim.Totals)]
            self.totals_fn.restype = ctypes.c_int
        if self.version_fn:
            self.version_fn.restype = ctypes.c_char_p
        if self.built_fn:
            self.built_fn.restype = ctypes.c_int

    @property
    def present(self):
        return self.set_enabled is not None

    def version(self):
        return self.version_fn().decode() if self.version_fn else None

    def compression_built(self):
        return bool(self.built_fn()) if self.built_fn else False

    def enable(self, on):
        """Switches the compressed path; returns the previous setting, or None without the shim."""
        return self.set_enabled(1 if on else 0) if self.set_enabled else None

    @contextlib.contextmanager
    def path(self, on):
        prev = self.enable(on)
        try:
            yield
        finally:
            if prev is not None:
                self.enable(prev)

    def totals(self):
        t = Shim.Totals()
        if self.totals_fn:
            self.totals_fn(ctypes.byref(t))
        return {name: getattr(t, name) for name, _ in Shim.Totals._fields_}

    def describe(self):
        return {"preloaded": self.present, "version": self.version(),
                "compression_built": self.compression_built()}


def totals_delta(before, after):
    return {k: after[k] - before[k] for k in after}


def totals_add(a, b):
    return {k: a.get(k, 0) + b.get(k, 0) for k in b}


def cuda_device():
    """The device the workloads run on (one place to change it when checking their logic elsewhere)."""
    return torch.device("cuda")


def pinned_empty(shape, dtype):
    """Page-locked host memory from PyTorch's caching host allocator (cudaHostAlloc, or cudaHostRegister
    with PYTORCH_CUDA_ALLOC_CONF=pinned_use_cuda_host_register:True): what the shim registers."""
    return torch.empty(shape, dtype=dtype, pin_memory=True)


def bits(t):
    """A tensor's bytes as integers, so comparisons are bitwise (NaN, -0.0)."""
    return t.contiguous().view(torch.uint8)


def same(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(bits(a), bits(b))


def median(xs):
    return statistics.median(xs) if xs else None


def wait_compressed(shim, step, seconds, pause=0.25):
    """Runs step() until the shim reports bytes through the compressed path or `seconds` pass.
    Returns (compressed_seen, steps_run, seconds_waited)."""
    t0 = time.perf_counter()
    if not shim.present or not shim.compression_built():
        step()
        return False, 1, time.perf_counter() - t0
    start = shim.totals()["compressed_in"]
    n = 0
    while True:
        step()
        n += 1
        if shim.totals()["compressed_in"] > start:
            return True, n, time.perf_counter() - t0
        if time.perf_counter() - t0 >= seconds:
            return False, n, time.perf_counter() - t0
        time.sleep(pause)


def warm_up(shim, step, seconds, pause=0.25):
    """Runs step() until the compressed path carries the same bytes (within 1%) in two steps in a row,
    i.e. the background compressor has caught up, or until `seconds` pass in all."""
    t0 = time.perf_counter()
    seen, n, _ = wait_compressed(shim, step, seconds, pause)
    steady, per_step = False, []
    while seen and time.perf_counter() - t0 < seconds:
        before = shim.totals()["compressed_in"]
        step()
        n += 1
        per_step.append(shim.totals()["compressed_in"] - before)
        if len(per_step) >= 2 and abs(per_step[-1] - per_step[-2]) <= 0.01 * max(per_step[-2:]):
            steady = True
            break
        time.sleep(pause)
    return {"compressed_seen": seen, "steady": steady, "steps": n, "seconds": time.perf_counter() - t0,
            "compressed_bytes_per_step": per_step}


def ab_order(blocks):
    """on, off, off, on, on, off, ...: each side runs first as often as second, so drift and the
    cost of switching fall on both alike."""
    order = []
    for b in range(blocks):
        order += [True, False] if b % 2 == 0 else [False, True]
    return order


def run_ab(shim, step, blocks, iters, before=None, after=None, settle=1):
    """Times step() with the compressed path on and off in alternating blocks of `iters` steps.
    step() must return only once its work on the device is finished.  before(i, on) and after(i, on)
    run around every timed step, outside the timing (updates, poisoning, checks); `settle` untimed
    steps follow each switch.  Returns per side: step times and the shim's totals over the timed
    steps."""
    res = {True: {"times": [], "totals": None}, False: {"times": [], "totals": None}}
    i = 0
    for on in ab_order(blocks):
        with shim.path(on):
            for _ in range(settle):
                if before:
                    before(i, on)
                step()
                if after:
                    after(i, on)
                i += 1
            for _ in range(iters):
                if before:
                    before(i, on)
                t_before = shim.totals()
                t0 = time.perf_counter()
                step()
                dt = time.perf_counter() - t0
                d = totals_delta(t_before, shim.totals())
                res[on]["times"].append(dt)
                res[on]["totals"] = totals_add(res[on]["totals"] or {}, d)
                if after:
                    after(i, on)
                i += 1
    return {"on": res[True], "off": res[False]}


def ratios(workload_bytes, on_totals, all_totals):
    """Wire and codec ratios and the ideal speedups they imply.

    wire_ratio: bytes that crossed PCIe / bytes the workload copied, over the timed steps with the path
    on (copies the shim did not plan count as sent whole); ideal = 1 / wire_ratio, the speedup if a
    step's time were its bytes on the wire.  codec_ratio: compressed / original size of what went
    through the compressed path in the whole run (None when nothing did); ideal_codec = 1 / codec_ratio,
    the ideal had every byte gone compressed at that ratio."""
    out = {"wire_ratio": None, "ideal": None, "codec_ratio": None, "ideal_codec": None}
    if on_totals is not None and workload_bytes > 0:
        unplanned = max(workload_bytes - on_totals["requested"], 0)
        wire = (on_totals["sent"] + unplanned) / workload_bytes
        out["wire_ratio"] = wire
        out["ideal"] = 1.0 / wire if wire > 0 else None
    if all_totals and all_totals["compressed_in"] > 0:
        out["codec_ratio"] = all_totals["compressed_out"] / all_totals["compressed_in"]
        if out["codec_ratio"] > 0:
            out["ideal_codec"] = 1.0 / out["codec_ratio"]
    return out


def summarize_ab(ab, workload_bytes_per_step, shim_totals_all, shim_present=True):
    """Medians, speedup (median off / median on) and the ideal speedups of run_ab's result (None
    without the shim: there is no ratio to speak of)."""
    on, off = median(ab["on"]["times"]), median(ab["off"]["times"])
    on_steps = len(ab["on"]["times"])
    if shim_present:
        r = ratios(workload_bytes_per_step * on_steps, ab["on"]["totals"], shim_totals_all)
    else:
        r = ratios(0, None, None)
    out = {"step_s_on": on, "step_s_off": off, "speedup": off / on if on else None,
           "times_on": ab["on"]["times"], "times_off": ab["off"]["times"],
           "totals_on": ab["on"]["totals"], "totals_off": ab["off"]["totals"]}
    out.update(r)
    out["fraction_of_ideal"] = (out["speedup"] / out["ideal"]
                                if out["speedup"] and out["ideal"] else None)
    return out


SETTINGS_VARS = ("LD_PRELOAD", "PYTORCH_CUDA_ALLOC_CONF", "CUBLAS_WORKSPACE_CONFIG", "OMP_WAIT_POLICY")


def environment(shim):
    """What a result depends on besides its arguments."""
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith("IBPSHIM_") or k in SETTINGS_VARS}
    dev = None
    if torch.cuda.is_available():
        dev = torch.cuda.get_device_name(0)
    return {"shim": shim.describe(), "env": env, "torch": torch.__version__,
            "python": platform.python_version(), "device": dev, "host": platform.node(), "pid": os.getpid(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def _union(spans):
    """Total length of the union of (start, end) spans."""
    total, end = 0.0, None
    for a, b in sorted(spans):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def _overlap(xs, ys):
    """Length of the intersection of the unions of two span lists."""
    return _union(xs) + _union(ys) - _union(xs + ys)


def _step_spans(spans, steps):
    """The spans cut into `steps` groups at the steps - 1 widest gaps between them (steps with host
    work and a device sync in between); returns the summed extent of the groups."""
    spans = sorted(spans)
    if not spans:
        return 0.0
    gaps, end = [], spans[0][1]  # end: the latest end among the spans so far
    for i in range(len(spans) - 1):
        end = max(end, spans[i][1])
        gaps.append((spans[i + 1][0] - end, i))
    gaps.sort(reverse=True)
    cuts = sorted(i for _, i in gaps[:max(steps - 1, 0)])
    total, first = 0.0, 0
    for c in cuts + [len(spans) - 1]:
        group = spans[first:c + 1]
        total += max(b for _, b in group) - group[0][0]
        first = c + 1
    return total


def split_trace(path, steps, per_step=False):
    """Where the GPU time of a profiled stretch went, per step, from a chrome trace written by
    torch.profiler: host-to-device DMA (every copy engine transfer from host memory), the shim's decode
    kernels (ibp_k_*), other kernels, and how much of the DMA the decodes hid.  The window is the whole
    stretch, or with per_step the sum of each step's extent of transfers and decodes (steps separated
    by host work that is not to count, found as the widest gaps)."""
    with open(path) as f:
        events = json.load(f).get("traceEvents", [])
    h2d, dec, other, h2d_bytes, n_h2d, n_dec = [], [], [], 0, 0, 0
    big = []  # (span, bytes) of transfers of 1 MiB or more
    for e in events:
        cat, name = e.get("cat", ""), e.get("name", "")
        if cat not in ("kernel", "gpu_memcpy", "gpu_memset") or "dur" not in e:
            continue
        span = (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        if cat == "gpu_memcpy" and "HtoD" in name:
            h2d.append(span)
            nbytes = int((e.get("args") or {}).get("bytes", 0) or 0)
            h2d_bytes += nbytes
            n_h2d += 1
            if nbytes >= 1 << 20:
                big.append((span, nbytes))
        elif cat == "kernel" and "ibp_k_" in name:
            dec.append(span)
            n_dec += 1
        else:
            other.append(span)
    everything = h2d + dec + other
    if not everything:
        return None
    window = max(b for _, b in everything) - min(a for a, _ in everything)
    if per_step:
        window = _step_spans(h2d + dec, steps)
    busy = _union(h2d)
    ms = 1e-3 / steps  # trace times are microseconds

    def rate(pairs):  # GB/s over the transfers' own durations
        t = sum(b - a for (a, b), _ in pairs)
        return sum(n for _, n in pairs) / (t * 1e3) if t > 0 else None

    # Transfers a decode overlaps for at least a fifth of their time, against those it does not touch
    # (under 5%): how much the decodes slow the DMA down.
    share = [(x, _overlap([x[0]], dec) / (x[0][1] - x[0][0])) for x in big if x[0][1] > x[0][0]]
    return {
        "steps": steps, "window_ms": window * ms,
        "h2d_ms": busy * ms, "h2d_copies": n_h2d / steps, "h2d_bytes": h2d_bytes / steps,
        "h2d_gbps_busy": h2d_bytes / (busy * 1e3) if busy else None,
        "decode_ms": _union(dec) * ms, "decode_launches": n_dec / steps,
        "decode_under_dma_ms": _overlap(dec, h2d) * ms,
        "other_kernels_ms": _union(other) * ms,
        "copy_engine_idle_ms": (window - busy) * ms,
        "h2d_gbps_alone": rate([x for x, f in share if f < 0.05]),
        "h2d_gbps_under_decode": rate([x for x, f in share if f >= 0.2]),
    }


def profile_split(shim, fn, on, steps, path, before=None, after=None):
    """Runs fn() `steps` times under torch.profiler (CUDA activity only) with the compressed path on or
    off, writes the chrome trace to path and returns split_trace() of it.  before(i, on) and
    after(i, on) run around each step as in run_ab; with them the window counts each step's
    transfers only (split_trace per_step)."""
    from torch.profiler import ProfilerActivity, profile
    with shim.path(on):
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i in range(steps):
                if before:
                    before(1000 + i, on)
                fn()
                if after:
                    after(1000 + i, on)
            torch.cuda.synchronize()
    prof.export_chrome_trace(path)
    return split_trace(path, steps, per_step=before is not None or after is not None)


def fmt_split(sp):
    if not sp:
        return "no GPU activity traced"
    alone, under = sp.get("h2d_gbps_alone"), sp.get("h2d_gbps_under_decode")
    return ("window %.2f ms/step: DMA %.2f ms (%.0f copies, %.1f GB/s while busy; runs of 1 MiB+ %s GB/s "
            "alone, %s under a decode), decode %.2f ms (%.0f launches, %.2f ms under DMA), other kernels "
            "%.2f ms, copy engine idle %.2f ms" % (
                sp["window_ms"], sp["h2d_ms"], sp["h2d_copies"], sp["h2d_gbps_busy"] or 0.0,
                fmt_ratio(alone, 1), fmt_ratio(under, 1), sp["decode_ms"], sp["decode_launches"],
                sp["decode_under_dma_ms"],
                sp["other_kernels_ms"], sp["copy_engine_idle_ms"]))


def fmt_ratio(x, digits=2):
    return "n/a" if x is None else "%.*f" % (digits, x)


def parse_profiled(ap, argv, profiles):
    """Parses argv and fills every option left unset from profiles["quick"] or profiles["full"]."""
    args = ap.parse_args(argv)
    prof = profiles["quick" if args.quick else "full"]
    for key, val in prof.items():
        if getattr(args, key) is None:
            setattr(args, key, val)
    return args


def write_json(path, obj):
    """Writes obj to path (if given); failures are reported, not raised: the summary line is already out."""
    if not path:
        return True
    try:
        with open(path, "w") as f:
            json.dump(obj, f, indent=1, sort_keys=True)
            f.write("\n")
        return True
    except OSError as e:
        print("cannot write %s: %s" % (path, e))
        return False


def no_cuda(name):
    print("%s: no CUDA device visible to PyTorch, skipped" % name)
    return 77
