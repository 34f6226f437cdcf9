#!/usr/bin/python3
"""Check a results.json against bench/results.schema.json.

    check_results.py RESULTS.json [SCHEMA.json]

A validator for the subset of JSON Schema the schema uses (type, enum,
required, properties, items), standard library only.  Prints every
violation with its JSON path; exits 0 when there is none.
"""
import json
import os
import sys

TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def is_type(v, t):
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    return isinstance(v, TYPES[t])


def check(v, s, path, errs):
    t = s.get("type")
    if t is not None:
        ts = t if isinstance(t, list) else [t]
        if not any(is_type(v, x) for x in ts):
            errs.append("%s: expected %s, got %s" % (path, "/".join(ts), type(v).__name__))
            return
    if "enum" in s and v not in s["enum"]:
        errs.append("%s: %r not one of %r" % (path, v, s["enum"]))
    if isinstance(v, dict):
        for k in s.get("required", []):
            if k not in v:
                errs.append("%s: missing %s" % (path, k))
        for k, sub in s.get("properties", {}).items():
            if k in v:
                check(v[k], sub, path + "." + k, errs)
    if isinstance(v, list) and "items" in s:
        for i, x in enumerate(v):
            check(x, s["items"], "%s[%d]" % (path, i), errs)


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    schema_path = argv[2] if len(argv) > 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                             "results.schema.json")
    with open(argv[1]) as f:
        data = json.load(f)
    with open(schema_path) as f:
        schema = json.load(f)
    errs = []
    check(data, schema, "$", errs)
    for e in errs:
        print("schema: " + e)
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
