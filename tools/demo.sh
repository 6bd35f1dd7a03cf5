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
app=$build/tests/preload/passthrough
cuda_lib=${CUDA_PATH:-/usr/local/cuda}/lib64
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
    echo "== Running the same program against the fake CUDA runtime in $build/tests/fakecuda,"
    echo "== to show which calls the shim intercepts; nothing here touches a GPU."
    LD_LIBRARY_PATH=$build/tests/fakecuda "$build/tools/ibp-run" --log-level info -- "$app"
fi
