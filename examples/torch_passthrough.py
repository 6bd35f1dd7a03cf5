#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# ibpshim: exercises every way PyTorch moves pinned host memory to the GPU and prints a digest of
# what arrived, so a run under the shim can be compared byte for byte with a run without it.
import argparse
import ctypes
import hashlib
import json
import os
import sys
import time

import torch


def shim_counts():
    """The shim's per-kind counters when it is preloaded, else None."""
    try:
        lib = ctypes.CDLL(None)
        fn = lib.ibpshim_call_counts
    except AttributeError:
        return None

    class Count(ctypes.Structure):
        _fields_ = [("calls", ctypes.c_uint64), ("bytes", ctypes.c_uint64)]

    name = lib.ibpshim_call_kind_name
    name.restype = ctypes.c_char_p
    arr = (Count * 32)()
    fn.restype = ctypes.c_size_t
    n = fn(arr, 32)
    return {name(k).decode(): {"calls": arr[k].calls, "bytes": arr[k].bytes} for k in range(n) if arr[k].calls}


def digest(t):
    return hashlib.sha256(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=64, help="size of each pinned tensor")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--pause", type=float, default=0.3,
                    help="seconds between rounds, so a background compressor can finish")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_passthrough: no CUDA device, skipped")
        return 77
    g = torch.Generator().manual_seed(1234)
    n = args.mib * (1 << 20) // 4
    results = {}
    weights = torch.randn(n, generator=g, dtype=torch.float32).pin_memory()
    bf16 = torch.randn(n, generator=g, dtype=torch.float32).to(torch.bfloat16).pin_memory()
    table = torch.randint(0, 1 << 20, (n // 4, 4), generator=g, dtype=torch.int32).pin_memory()
    for r in range(args.rounds):
        a = weights.to("cuda", non_blocking=True)
        b = bf16.to("cuda", non_blocking=True)
        c = table[r * 1000:(r + 1) * 1000 + 4097].to("cuda", non_blocking=True)
        torch.cuda.synchronize()
        results["round%d" % r] = [digest(a), digest(b), digest(c)]
        if r % 2:
            weights.add_(1.0)  # in-place host write between copies
        time.sleep(args.pause)
    d = torch.arange(12345, dtype=torch.int64).pin_memory().cuda()
    torch.cuda.synchronize()
    results["cuda()"] = digest(d)
    out = {"results": results,
           "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
           "shim": shim_counts()}
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
