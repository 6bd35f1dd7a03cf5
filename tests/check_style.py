#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# ibpshim: tracked text files have no tabs, no trailing whitespace and a final newline.
import subprocess
import sys

SKIP_SUFFIXES = (".bin", ".png", ".fatbin", ".ibp", ".gz", ".svg")
TAB_OK = ("Makefile",)


def main(root):
    files = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True, check=True).stdout
    problems = 0
    checked = 0
    for name in filter(None, files.decode().split("\0")):
        if name.endswith(SKIP_SUFFIXES) or "/corpus/" in name:
            continue
        try:
            data = open("%s/%s" % (root, name), "rb").read()
        except FileNotFoundError:
            continue
        if b"\0" in data:
            continue
        checked += 1
        text = data.decode("utf-8", "replace")
        if text and not text.endswith("\n"):
            print("%s: no newline at end of file" % name)
            problems += 1
        for lineno, line in enumerate(text.split("\n"), 1):
            if "\t" in line and not name.endswith(TAB_OK):
                print("%s:%d: tab" % (name, lineno))
                problems += 1
            if line.rstrip(" \r") != line:
                print("%s:%d: trailing whitespace" % (name, lineno))
                problems += 1
    print("%d files checked, %d problems" % (checked, problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
