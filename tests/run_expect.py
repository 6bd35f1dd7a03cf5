#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# ibpshim: runs a command and checks its exit status and what it printed.
import argparse
import os
import re
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--status", type=int, default=0, help="expected exit status")
    ap.add_argument("--stderr", action="append", default=[], help="regex that must match stderr")
    ap.add_argument("--stdout", action="append", default=[], help="regex that must match stdout")
    ap.add_argument("--once", action="append", default=[], help="regex that must match stderr exactly once")
    ap.add_argument("--not-stderr", action="append", default=[], help="regex that must not match stderr")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="set for the command only (LD_PRELOAD here would also load into this script)")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
    env = dict(os.environ)
    for item in args.env:
        key, _, value = item.partition("=")
        env[key] = value
    proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    failures = []
    if proc.returncode == 77 and args.status != 77:
        return 77
    if proc.returncode != args.status:
        failures.append("exit status %d, expected %d" % (proc.returncode, args.status))
    for pat in args.stderr:
        if not re.search(pat, proc.stderr, re.M):
            failures.append("stderr lacks /%s/" % pat)
    for pat in args.stdout:
        if not re.search(pat, proc.stdout, re.M):
            failures.append("stdout lacks /%s/" % pat)
    for pat in args.once:
        n = len(re.findall(pat, proc.stderr, re.M))
        if n != 1:
            failures.append("stderr has /%s/ %d times, expected once" % (pat, n))
    for pat in args.not_stderr:
        if re.search(pat, proc.stderr, re.M):
            failures.append("stderr has /%s/" % pat)
    for f in failures:
        sys.stderr.write("run_expect: %s\n" % f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
