#!/bin/sh
# SPDX-License-Identifier: MIT
# ibpshim: runs a test program against the real CUDA libraries: the toolkit's lib folder first and
# the fake's folder (which meson puts on LD_LIBRARY_PATH for programs linked with it) removed, so
# that neither libcudart.so.13 nor libcuda.so.1 can come from the fake.
# usage: real_cuda.sh CUDA_LIB_DIR [--preload LIB] PROGRAM [ARGS...]
set -eu
real=$1
shift
if [ "${1:-}" = "--preload" ]; then
    export LD_PRELOAD="$2"
    shift 2
fi
rest=$(printf '%s' "${LD_LIBRARY_PATH:-}" | tr ':' '\n' | grep -v '/tests/fakecuda/*$' | paste -sd: -)
export LD_LIBRARY_PATH="$real${rest:+:$rest}"
exec "$@"
