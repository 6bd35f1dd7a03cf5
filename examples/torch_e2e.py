#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# ibpshim: PyTorch programs as the shim meets them: weight offloading (>= 2 GiB of pinned fp32 and
# bf16 weights copied every step), slices of a pinned table, tensors changed in place between copies
# (indexing, add_, numpy writes, readinto from a file), reuse of pinned blocks by PyTorch's caching
# host allocator, and a transient batch buffer with new content every step. Every byte that arrives
# is compared with a copy made with the compressed path switched off (ibpshim_set_enabled(0)) in
# the same process; the weight loop is timed with the path on and off in the same process.
import argparse
import json
import os
import sys
import tempfile
import time

import torch

from _ibpshim import Shim, bits, fmt_split, profile_split, same, wait_compressed, warm_up


def plain_copy(shim, host):
    """The oracle: the same host bytes copied with the compressed path off."""
    with shim.path(False):
        ref = host.to("cuda", non_blocking=True)
        torch.cuda.synchronize()
    return ref


def timed(step, iters):
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def weight_offload(shim, gib, iters, res, trace=None):
    layers = 16
    per = int(gib * (1 << 30)) // layers
    gen = torch.Generator().manual_seed(1)
    weights = []
    for i in range(layers):
        dtype = torch.bfloat16 if i % 2 else torch.float32
        w = torch.empty(per // (2 if dtype == torch.bfloat16 else 4), dtype=dtype, pin_memory=True)
        w.copy_(torch.randn(w.numel(), generator=gen) * 0.02)
        weights.append(w)
    bufs = [torch.empty_like(w, device="cuda") for w in weights]
    refs = [plain_copy(shim, w) for w in weights]
    stream = torch.cuda.Stream()

    def step():
        with torch.cuda.stream(stream):
            for w, b in zip(weights, bufs):
                b.copy_(w, non_blocking=True)
        stream.synchronize()

    # The first timing starts as soon as anything went compressed (the compressor may still be building
    # the other layers' shadows); the second once two steps in a row carried the same compressed bytes.
    compressed = wait_compressed(shim, step, 60.0)[0]
    step()
    ok = all(same(b, r) for b, r in zip(bufs, refs))
    early = timed(step, iters)
    warm = warm_up(shim, step, 60.0)
    on = timed(step, iters)
    with shim.path(False):
        off = timed(step, iters)
    step()
    ok = ok and all(same(b, r) for b, r in zip(bufs, refs))
    total = sum(w.numel() * w.element_size() for w in weights)
    res["weight_offload"] = {
        "bytes": total, "compressed_seen": compressed, "steady": warm["steady"], "identical": ok,
        "step_s_shim_on_early": early, "step_s_shim_on": on, "step_s_shim_off": off,
        "gbps_on_early": total / early / 1e9, "gbps_on": total / on / 1e9, "gbps_off": total / off / 1e9,
        "speedup": off / on,
    }
    if trace:
        os.makedirs(trace, exist_ok=True)
        for on_ in (True, False):
            key = "weights_%s" % ("on" if on_ else "off")
            sp = profile_split(shim, step, on_, 3, os.path.join(trace, key + ".trace.json"))
            res["weight_offload"]["trace_" + key] = sp
            print("torch_e2e: trace %s: %s" % (key, fmt_split(sp)), file=sys.stderr)
    del weights, bufs, refs


def table_slices(shim, res):
    rows, cols = 1 << 20, 128  # 512 MiB of fp32
    table = torch.empty(rows, cols, dtype=torch.float32, pin_memory=True)
    table.copy_((torch.arange(rows * cols, dtype=torch.int64) % 977).view(rows, cols).to(torch.float32) * 0.5)
    ref = plain_copy(shim, table)
    gen = torch.Generator().manual_seed(2)
    ok = True
    for i in range(40):
        n = 8192 + int(torch.randint(0, 8192, (1,), generator=gen))
        s = int(torch.randint(0, rows - n, (1,), generator=gen))
        got = table[s:s + n].to("cuda", non_blocking=True)
        torch.cuda.synchronize()
        ok = ok and same(got, ref[s:s + n])
        if i == 20:
            table[s + 5:s + 9] = -1.0  # a write between slices
            ref = plain_copy(shim, table)
        time.sleep(0.02)
    res["table_slices"] = {"identical": ok}
    del table, ref


def in_place(shim, res):
    x = torch.empty(16 << 20, dtype=torch.float32, pin_memory=True)  # 64 MiB
    x.copy_(torch.linspace(-1, 1, x.numel()))
    wait_compressed(shim, lambda: (x.to("cuda", non_blocking=True), torch.cuda.synchronize()), 20.0)
    checks = {}

    def check(name):
        got = x.to("cuda", non_blocking=True)
        torch.cuda.synchronize()
        checks[name] = same(got, plain_copy(shim, x))
        time.sleep(0.15)  # let the compressor recompress what went stale
        got = x.to("cuda", non_blocking=True)
        torch.cuda.synchronize()
        checks[name] = checks[name] and same(got, plain_copy(shim, x))

    x[1000:2000] = 7.0
    check("index_assign")
    x.add_(0.5)
    check("add_")
    x.numpy()[123456:123999] = 3.25
    check("numpy_write")
    with tempfile.TemporaryFile() as f:
        f.write(os.urandom(1 << 20))
        f.seek(0)
        view = memoryview(x.numpy()).cast("B")
        f.readinto(view[4 << 20:5 << 20])
    check("readinto")
    res["in_place"] = checks
    del x


def block_reuse(shim, res):
    n = 32 << 20  # 128 MiB of fp32: a block PyTorch's pinned cache keeps after del
    a = torch.empty(n, dtype=torch.float32, pin_memory=True)
    a.fill_(1.5)
    wait_compressed(shim, lambda: (a.to("cuda", non_blocking=True), torch.cuda.synchronize()), 20.0)
    ptr = a.data_ptr()
    del a
    b = torch.empty(n, dtype=torch.float32, pin_memory=True)
    b.copy_(torch.arange(n, dtype=torch.float32))
    got = b.to("cuda", non_blocking=True)
    torch.cuda.synchronize()
    res["block_reuse"] = {"reused_block": b.data_ptr() == ptr, "identical": same(got, plain_copy(shim, b))}
    del b


def transient(steps, res):
    n = 64 << 20  # 256 MiB batch buffer, new content every step
    buf = torch.empty(n, dtype=torch.float32, pin_memory=True)
    dev = torch.empty(n, dtype=torch.float32, device="cuda")
    batches = [torch.randn(n) for _ in range(3)]
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        buf.copy_(batches[i % 3])
        dev.copy_(buf, non_blocking=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    ok = torch.equal(bits(dev.cpu()), bits(batches[(steps - 1) % 3]))
    res["transient"] = {"identical": ok, "mean_step_s": sum(times) / len(times),
                        "median_step_s": sorted(times)[len(times) // 2]}
    del buf, dev, batches


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=2.0, help="weights in the offload loop")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--transient-steps", type=int, default=30)
    ap.add_argument("--out", help="also write the JSON here")
    ap.add_argument("--trace", metavar="DIR", help="profile the weight loop (path on and off) into DIR")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_e2e: no CUDA device, skipped")
        return 77
    shim = Shim()
    res = {"shim": shim.present, "path": os.environ.get("IBPSHIM_TRANSFER_PATH", "auto"),
           "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
    weight_offload(shim, args.gib, args.iters, res, args.trace)
    table_slices(shim, res)
    in_place(shim, res)
    block_reuse(shim, res)
    transient(args.transient_steps, res)
    res["totals"] = shim.totals()
    ok = (res["weight_offload"]["identical"] and res["table_slices"]["identical"]
          and all(res["in_place"].values()) and res["block_reuse"]["identical"] and res["transient"]["identical"])
    res["all_identical"] = ok
    text = json.dumps(res, sort_keys=True)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
