#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# ibpshim: reads meson's testlog.json files and prints "N passed, N failed, N skipped".
import json
import sys


def main(paths):
    passed = failed = skipped = 0
    for path in paths:
        try:
            f = open(path)
        except OSError:
            print("no test log at %s: counted as one failure" % path)
            failed += 1
            continue
        with f:
            for line in f:
                if not line.strip():
                    continue
                result = json.loads(line)["result"]
                if result in ("OK", "EXPECTEDFAIL"):
                    passed += 1
                elif result == "SKIP":
                    skipped += 1
                else:
                    failed += 1
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
