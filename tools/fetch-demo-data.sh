#!/bin/sh
# SPDX-License-Identifier: MIT
# ibpshim: fetches the demo's default tensor from a Debian package: the handwritten digits features
# (1797 x 64 float64) that python3-sklearn ships as sklearn/datasets/data/digits.csv.gz
# (scikit-learn, BSD-3-Clause; the UCI optical recognition of handwritten digits data).  Prints
# the path of the raw little-endian file.  usage: tools/fetch-demo-data.sh [DIR]  (default build/demo-data)
set -eu
out=${1:-build/demo-data}
bin=$out/digits_1797x64_f64.bin
if [ -f "$bin" ]; then
    echo "$bin"
    exit 0
fi
mkdir -p "$out/deb"
if ! ls "$out"/deb/python3-sklearn_*.deb > /dev/null 2>&1; then
    echo "fetch-demo-data: downloading Debian's python3-sklearn (about 2 MB) for its digits data" >&2
    (cd "$out/deb" && apt-get download python3-sklearn > /dev/null) || {
        echo "fetch-demo-data: apt-get download python3-sklearn failed (run apt-get update first?)" >&2
        exit 1
    }
fi
rm -rf "$out/x"
dpkg -x "$out"/deb/python3-sklearn_*.deb "$out/x"
csv=$(find "$out/x" -name digits.csv.gz | head -1)
[ -n "$csv" ] || { echo "fetch-demo-data: digits.csv.gz not found in the package" >&2; exit 1; }
python3 - "$csv" "$bin" <<'PY'
import gzip, struct, sys
rows = [line.split(",") for line in gzip.open(sys.argv[1], "rt") if line.strip()]
vals = [float(v) for r in rows for v in r[:64]]   # 64 features; the 65th column is the label
if len(rows) != 1797 or len(vals) != 1797 * 64:
    sys.exit("fetch-demo-data: unexpected digits shape %d rows" % len(rows))
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack("<%dd" % len(vals), *vals))
PY
rm -rf "$out/x"
echo "$bin"
