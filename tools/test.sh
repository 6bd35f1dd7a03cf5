#!/bin/sh
# SPDX-License-Identifier: MIT
# ibpshim: installs dependencies, builds into ./build and runs every test suite but the long
# stress run; ends with "N passed, N failed, N skipped".  Extra arguments go to meson setup.
set -eu
cd "$(dirname "$0")/.."
tools/install-deps.sh
build=${IBPSHIM_BUILD:-build}
if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$@"
elif [ $# -gt 0 ]; then
    meson setup --reconfigure "$build" "$@"
fi
meson compile -C "$build"
status=0
meson test -C "$build" --no-suite stress --print-errorlogs --num-processes 2 || status=$?
python3 tools/test-summary.py "$build/meson-logs/testlog.json"
exit $status
