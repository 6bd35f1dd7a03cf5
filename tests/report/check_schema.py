#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# ibpshim: validates reports against docs/report.schema.json with the jsonschema package (skips without it).
# Usage: check_schema.py SCHEMA EMITTER FILE...  (EMITTER --emit-report OUT writes a fresh report)
import json
import os
import subprocess
import sys
import tempfile


def main(schema_path, emitter, files):
    try:
        import jsonschema
    except ImportError:
        print("SKIP: python3-jsonschema is not installed")
        return 77
    with open(schema_path) as f:
        schema = json.load(f)
    validator = jsonschema.Draft202012Validator(schema)
    validator.check_schema(schema)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = os.path.join(tmp, "fresh.json")
        subprocess.run([emitter, "--emit-report", fresh], check=True)
        problems = 0
        for path in [fresh] + files:
            with open(path) as f:
                doc = json.load(f)
            errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
            for e in errors:
                print("%s: %s: %s" % (os.path.basename(path), "/".join(map(str, e.path)), e.message))
            problems += len(errors)
            # The schema must also reject what it should: a report without its totals.
            del doc["totals"]
            if validator.is_valid(doc):
                print("%s: still valid without totals" % path)
                problems += 1
    print("%d files checked, %d problems" % (len(files) + 1, problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
