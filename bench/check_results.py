#!/usr/bin/python3
"""Check a results.json against bench/results.schema.json.

    check_results.py RESULTS.json [SCHEMA.json]

A validator for the subset of JSON Schema the schema uses (type, enum,
required, properties, items), standard library only, plus the checks a
schema cannot say: every journal mode of options.modes has observations and
summary rows (unless no workload of the run applies to it: options.
not_applicable), no row is of a workload the run lists as not applicable in
its mode, and each row's journal and cache flag agree with its mode.
Prints every violation with its JSON path; exits 0 when there is none.
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


def check_modes(data, errs):
    modes = {m["name"]: m for m in data["options"]["modes"]}
    na = {(x["workload"], x["mode"]) for x in data["options"].get("not_applicable", [])}
    for what in ("observations", "summary"):
        seen = set()
        for i, r in enumerate(data[what]):
            m = modes.get(r["mode"])
            if m is None:
                errs.append("$.%s[%d]: mode %r not in options.modes" % (what, i, r["mode"]))
                continue
            seen.add(r["mode"])
            if (r["workload"], r["mode"]) in na:
                errs.append("$.%s[%d]: workload %s is listed as not applicable in mode %s"
                            % (what, i, r["workload"], r["mode"]))
            if r["journal"] != m["journal"] or r["cached"] != m["cached"]:
                errs.append("$.%s[%d]: journal %s / cached %s do not match mode %s"
                            % (what, i, r["journal"], r["cached"], r["mode"]))
        for name in modes:
            idle = all((w, name) in na for w in data["options"]["workloads"])
            if name not in seen and not idle:
                errs.append("$.%s: no row for journal mode %s" % (what, name))


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
    if not errs:
        check_modes(data, errs)
    for e in errs:
        print("schema: " + e)
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
