#!/bin/sh
# SPDX-License-Identifier: MIT
# ibpshim: the demo.  Installs dependencies, builds, fetches the default tensor (Debian's
# scikit-learn digits features, see tools/fetch-demo-data.sh) and shows what the shim does with it.
# On a GPU machine: a pinned table of that tensor streamed to the GPU under the shim (time with the
# compressed path on and off, every slice checked, the transfer report), and ibp-bench on it.
# Without a GPU: says so, shows the codec's view of the tensor (what would be sent), and runs a
# CUDA program under the shim against the fake CUDA runtime the tests use, so the interception
# and the report are visible.  usage: tools/demo.sh [TENSOR_FILE]
set -eu
cd "$(dirname "$0")/.."
tools/install-deps.sh
build=${IBPSHIM_BUILD:-build}
[ -f "$build/build.ninja" ] || meson setup "$build"
meson compile -C "$build"
tensor=${1:-$(tools/fetch-demo-data.sh "$build/demo-data")}
echo "== tensor: $tensor"
"$build/tools/ibp-pack" plan "$tensor"
cuda_lib=${CUDA_PATH:-/usr/local/cuda}/lib64
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "== GPU found: $(nvidia-smi -L | head -1)"
    export LD_LIBRARY_PATH=$cuda_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    echo "== ibp-bench: the compressed path against a plain pinned copy, 256 MiB of the tensor"
    "$build/tools/ibp-bench" "$tensor" --size 256M
    if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
        echo "== PyTorch: a pinned table of the tensor streamed to the GPU each epoch, under the shim"
        IBPSHIM_TRANSFER_PATH=${IBPSHIM_TRANSFER_PATH:-dma} "$build/tools/ibp-run" --log-level info -- \
            python3 examples/stream_table.py --quick --table "$tensor"
    else
        echo "== PyTorch with CUDA not found: the table workload (examples/stream_table.py) is skipped"
    fi
else
    echo "== No GPU on this machine (nvidia-smi finds none): nothing here touches a GPU and no time"
    echo "== is saved. What the shim would send for this tensor (the codec round trip, every byte checked):"
    "$build/tools/ibp-pack" check "$tensor"
    echo "== A CUDA program under the shim, against the fake CUDA runtime in $build/tests/fakecuda (its"
    echo "== decode kernel is the CPU codec), with the compressed path forced: copies of a pinned 6 MiB"
    echo "== region of float weights with every kind of write in between, each byte checked, then the"
    echo "== transfer report."
    IBPSHIM_POLICY_MIN_BYTES=1MiB IBPSHIM_POLICY_MIN_COPIES=2 LD_LIBRARY_PATH=$build/tests/fakecuda \
        IBPSHIM_TRANSFER_PATH=dma "$build/tools/ibp-run" --log-level info -- "$build/tests/preload/compressed"
fi
