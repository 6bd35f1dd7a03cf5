#!/bin/sh
# SPDX-License-Identifier: MIT
# ibpshim: installs the Debian/Ubuntu packages the build and tests need (apt-get as root or through
# sudo); without either, prints the exact command and fails.
set -eu

pkgs="gcc g++ meson ninja-build pkg-config python3 git binutils libinih-dev uthash-dev libunwind-dev \
libgtest-dev libjansson-dev python3-jsonschema"

missing=""
for p in $pkgs; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
if [ -n "$missing" ]; then
    echo "ibpshim: installing Debian packages:$missing"
    if [ "$(id -u)" = 0 ]; then
        SUDO=""
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO="sudo"
    else
        echo "ibpshim: need root to install packages; run:" >&2
        echo "  sudo apt-get update && sudo apt-get install -y$missing" >&2
        exit 1
    fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi

# The CUDA headers come with the CUDA toolkit (nvcc also builds the decode kernels).  Debian ships
# them in nvidia-cuda-dev (non-free); the toolkit under /usr/local/cuda is preferred.
cuda_root=${CUDA_PATH:-/usr/local/cuda}
if [ ! -f "$cuda_root/include/cuda.h" ] && [ ! -f /usr/include/cuda.h ]; then
    echo "ibpshim: CUDA headers (cuda.h) not found. Install the CUDA toolkit (nvcc) under $cuda_root," >&2
    echo "  set CUDA_PATH to its root, or on Debian/Ubuntu with non-free enabled:" >&2
    echo "  sudo apt-get install -y nvidia-cuda-dev nvidia-cuda-toolkit" >&2
    exit 1
fi
