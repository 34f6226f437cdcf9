#!/bin/bash
# lint.callgraph's own test: scripts/callgraph.py passes the tree as it is,
# and fails (exit 1, naming what it found) on a copy of src/ with a circle
# of calls planted between two files, one between two folders, and a long
# function in src/vfs.  Without this, a script that found nothing would keep
# lint.callgraph green forever.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cg="/usr/bin/python3 $root/scripts/callgraph.py"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
check(){ # name, expected rc, expected text, tree
  out=$($cg "$4" 2>&1); rc=$?
  if [ "$rc" != "$2" ] || ! grep -q -- "$3" <<<"$out"; then
    echo "FAIL $1: rc $rc (want $2), no '$3' in:"; echo "$out"; fail=1
  else echo "ok   $1"; fi
}
check "tree as it is" 0 "circles of calls between files: 0" "$root/src"

cp -r "$root/src" "$tmp/a"
# a one-line function in fileio.c (the lowest file of src/vfs) calling the
# VFS object's file: fileio (src/db) -> vfs.c (src/vfs) -> ... -> fileio
printf '\nvoid tdeTestUp(void){ tdeMainReserveDone(0); }\n' >> "$tmp/a/db/fileio.c"
check "file circle" 1 "fileio.c -> .*vfs.c (tdeTestUp -> tdeMainReserveDone)" "$tmp/a"
check "folder circle (db calling vfs)" 1 "circles of calls between folders: 1" "$tmp/a"

cp -r "$root/src" "$tmp/b"
# cipher/ (below keystore/) calling the public keystore API
printf '\nint tdeTestUp2(void){\n  return tde_keystore_close(0);\n}\n' >> "$tmp/b/cipher/secmem.c"
check "folder circle" 1 "circles of calls between folders: 1" "$tmp/b"

cp -r "$root/src" "$tmp/c"
{ printf '\nint tdeTestLong(int x){\n'; for i in $(seq 1 100); do printf '  x += %d;\n' "$i"; done
  printf '  return x;\n}\n'; } >> "$tmp/c/db/hooks.c"
check "long function" 1 "tdeTestLong" "$tmp/c"
exit $fail
