#!/usr/bin/env python3
"""The C sources' call graph between files: circles and long functions.

    scripts/callgraph.py [--max-vfs N] [--max N] [--allow FILE] [SRC_DIR]

Functions are found with Universal Ctags (name, file, first and last line);
a call is a function name followed by "(" inside another function's body,
comments and strings removed.  A call from file A to a function defined in
file B (and in no other file) is an edge A -> B; a static function is an
edge only inside its own file.  The script prints every strongly connected
set of two or more files (a circle of calls between files), then the
same between folders (a file in a subfolder counts with its parent: kmip/
is part of keystore/; a file directly in SRC_DIR is a node of its own),
then every
function longer than --max lines (default 150; --max-vfs, default 100, for
the shim: src/vfs and src/db), and exits 1 if it found either.  It reads files, changes nothing.

--allow FILE names what is still allowed while the refactoring of issue 23
goes on, one per line ("circle FILE FILE ..." or "folders DIR DIR ..." with
every member, or
"function NAME FILE"; # starts a comment).  An allowed finding does not
fail; an allowance that finds nothing fails too, so the list only shrinks
and always says what is left.  make test runs it (tests/CMakeLists.txt,
lint.callgraph) with scripts/callgraph-allow.txt: a new circle or a new
long function fails the suite.
"""
import os
import re
import subprocess
import sys
from collections import defaultdict


def functions(files):
    out = subprocess.run(["ctags", "--fields=+neKZS", "--c-kinds=f", "-o", "-"] + files,
                         capture_output=True, text=True, check=True).stdout
    funcs = []
    for line in out.splitlines():
        parts = line.split("\t")
        name, path = parts[0], parts[1]
        f = {"name": name, "file": path, "static": False}
        for p in parts[3:]:
            if p.startswith("line:"):
                f["line"] = int(p[5:])
            elif p.startswith("end:"):
                f["end"] = int(p[4:])
            elif p == "file:":
                f["static"] = True
        if "line" in f and "end" in f:
            funcs.append(f)
    return funcs


def strip(text):
    """Comments, strings and character constants replaced by spaces (line
    structure kept)."""
    pat = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
    return pat.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def sccs(nodes, edges):
    """Tarjan's strongly connected components."""
    index, low, onstack, stack, out = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        onstack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in onstack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                onstack.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def report_circles(what, kind, comps, edges, edge_text, allow, used):
    """Print the circles (strongly connected sets of two or more) among
    comps with the edges inside each; 1 if one is not allowed ("KIND
    MEMBER ..." in the allowance list), else 0.  Marks allowances used."""
    bad = 0
    circles = [c for c in comps if len(c) > 1]
    print("circles of calls between %s: %d" % (what, len(circles)))
    for c in circles:
        members = sorted(c)
        key = (kind,) + tuple(members)
        if key in allow:
            used.add(key)
        else:
            bad = 1
        print("  circle of %d: %s%s" % (len(members), ", ".join(members),
                                       " (allowed)" if key in allow else ""))
        for a in members:
            for b in sorted(edges[a]):
                if b in c:
                    print("    %s" % edge_text(a, b))
    return bad


def main():
    args = sys.argv[1:]
    max_all, max_vfs = 150, 100
    allow = set()
    while args and args[0].startswith("--"):
        if args[0] == "--max":
            max_all = int(args[1]); args = args[2:]
        elif args[0] == "--max-vfs":
            max_vfs = int(args[1]); args = args[2:]
        elif args[0] == "--allow":
            allow = read_allow(args[1]); args = args[2:]
        else:
            sys.exit(__doc__)
    root = args[0] if args else "src"
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".c"))
    funcs = functions(files)
    defined = defaultdict(set)          # name -> files defining it (non-static)
    for f in funcs:
        if not f["static"]:
            defined[f["name"]].add(f["file"])
    statics = defaultdict(set)
    for f in funcs:
        if f["static"]:
            statics[f["file"]].add(f["name"])
    call = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(")
    edges = defaultdict(set)
    why = {}
    for path in files:
        lines = strip(open(path, errors="replace").read()).split("\n")
        for f in (g for g in funcs if g["file"] == path):
            body = "\n".join(lines[f["line"] - 1:f["end"]])
            for name in set(call.findall(body)):
                if name in statics[path]:
                    continue
                owners = defined.get(name, ())
                if len(owners) == 1:
                    target = next(iter(owners))
                    if target != path:
                        edges[path].add(target)
                        why.setdefault((path, target), "%s -> %s" % (f["name"], name))
    used = set()
    bad = report_circles("files", "circle", sccs(set(files), edges), edges,
                         lambda a, b: "%s -> %s (%s)" % (a, b, why[(a, b)]), allow, used)
    # The same between folders: a call from a file in folder A to one in
    # folder B is an edge A -> B; a circle of folders breaks the layering
    # the tree's folders show (vfs above db above keys above keystore above cipher).
    def folder(path):
        rel = os.path.relpath(os.path.dirname(path), root)
        return os.path.join(root, rel.split(os.sep)[0]) if rel != "." else path
    fedges = defaultdict(set)
    fwhy = {}
    for a in edges:
        for b in edges[a]:
            fa, fb = folder(a), folder(b)
            if fa != fb:
                fedges[fa].add(fb)
                fwhy.setdefault((fa, fb), "%s -> %s (%s)" % (a, b, why[(a, b)]))
    folders = set(folder(f) for f in files)
    bad |= report_circles("folders", "folders", sccs(folders, fedges), fedges,
                          lambda a, b: fwhy[(a, b)], allow, used)
    longs = []
    for f in funcs:
        n = f["end"] - f["line"] + 1
        shim = any(f["file"].startswith(os.path.join(root, d) + os.sep) for d in ("vfs", "db"))
        limit = max_vfs if shim else max_all
        if n > limit:
            longs.append((n, f["name"], f["file"], f["line"], limit))
    print("functions over the limit: %d" % len(longs))
    for n, name, path, line, limit in sorted(longs, reverse=True):
        key = ("function", name, path)
        if key in allow:
            used.add(key)
        else:
            bad = 1
        print("  %4d lines (limit %d) %s %s:%d%s" % (n, limit, name, path, line,
                                                   " (allowed)" if key in allow else ""))
    for key in sorted(allow - used):
        bad = 1
        print("stale allowance (nothing found; remove it): %s" % " ".join(key))
    return bad


def read_allow(path):
    out = set()
    for raw in open(path):
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        if words[0] in ("circle", "folders") and len(words) > 2:
            out.add((words[0],) + tuple(sorted(words[1:])))
        elif words[0] == "function" and len(words) == 3:
            out.add(tuple(words))
        else:
            sys.exit("%s: cannot read line: %s" % (path, raw.rstrip()))
    return out


if __name__ == "__main__":
    sys.exit(main())
