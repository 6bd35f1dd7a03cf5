#!/bin/sh
# SPDX-License-Identifier: MIT
# ibpshim: installs dependencies, builds, and runs a CUDA program under the shim with the
# intercepted calls printed.  Without a GPU it says so and runs the same program against the fake
# CUDA runtime the tests use, so the interception itself is still visible.
set -eu
cd "$(dirname "$0")/.."
tools/install-deps.sh
build=${IBPSHIM_BUILD:-build}
[ -f "$build/build.ninja" ] || meson setup "$build"
meson compile -C "$build"
# The demo program copies a pinned 6 MiB region of float weights again and again, with every kind
# of write in between, and checks each byte that arrives; the shim's transfer report follows.
app=$build/tests/preload/compressed
cuda_lib=${CUDA_PATH:-/usr/local/cuda}/lib64
export IBPSHIM_POLICY_MIN_BYTES=1MiB IBPSHIM_POLICY_MIN_COPIES=2
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "== GPU found: $(nvidia-smi -L | head -1)"
    echo "== running $app under the shim against the real CUDA runtime"
    LD_LIBRARY_PATH=$cuda_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
        "$build/tools/ibp-run" --log-level info -- "$app"
    if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
        echo "== PyTorch under the shim"
        "$build/tools/ibp-run" --log-level info -- python3 examples/torch_passthrough.py --mib 16
    fi
else
    echo "== No GPU on this machine (nvidia-smi finds none)."
    echo "== Running the same program against the fake CUDA runtime in $build/tests/fakecuda (its"
    echo "== decode kernel is the CPU codec), with the compressed path forced, to show what the shim"
    echo "== would send; nothing here touches a GPU and no time is saved."
    LD_LIBRARY_PATH=$build/tests/fakecuda IBPSHIM_TRANSFER_PATH=dma "$build/tools/ibp-run" --log-level info -- "$app"
fi
