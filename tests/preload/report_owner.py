#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# ibpshim: a launcher that inherited LD_PRELOAD and ran a CUDA program (as timeout(1) does; it exits
# through exit() after its child) leaves that program's exit report in place: it made no CUDA call
# itself, so it writes none over it.
# Usage: report_owner.py SHIM LAUNCHER PROGRAM
import json
import os
import subprocess
import sys
import tempfile


def main(shim, launcher, program):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "report.json")
        env = dict(os.environ, LD_PRELOAD=shim, IBPSHIM_REPORT_PATH=path)
        proc = subprocess.Popen([launcher, program], env=env)
        if proc.wait() != 0:
            print("report_owner: %s failed (%d)" % (program, proc.returncode))
            return 1
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            print("report_owner: no readable report at %s: %s" % (path, e))
            return 1
        calls = doc.get("totals", {}).get("copies", 0)
        if doc.get("pid") == proc.pid:
            print("report_owner: the report is the launcher's (pid %d), not the program's" % proc.pid)
            return 1
        print("report_owner: ok (report of pid %s, %d planned copies; the launcher was pid %d)" % (
            doc.get("pid"), calls, proc.pid))
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3]))
