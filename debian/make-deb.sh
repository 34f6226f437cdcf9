#!/usr/bin/env bash
# make-deb.sh BUILD: build the Debian package from the build folder BUILD
# with dpkg-buildpackage (debhelper), into BUILD/deb/.  dpkg-buildpackage
# writes its results next to the source tree, so it runs on a copy of
# debian/ in BUILD/deb/src: nothing is written outside BUILD.
set -euo pipefail
BUILD=${1:?usage: debian/make-deb.sh BUILD}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
for f in sqlite-tde tde.so libsqlite-tde.a; do
  [ -e "$BUILD/$f" ] || { echo "make-deb: $BUILD/$f missing: run make build first" >&2; exit 1; }
done
OUT=$BUILD/deb
rm -rf "$OUT"
mkdir -p "$OUT/src"
cp -r "$ROOT/debian" "$OUT/src/debian"
rm -f "$OUT/src/debian/make-deb.sh"
cd "$OUT/src"
TDE_BUILD=$BUILD dpkg-buildpackage -b -us -uc >"$OUT/build.log" 2>&1 || {
  cat "$OUT/build.log" >&2
  echo "make-deb: dpkg-buildpackage failed (log: $OUT/build.log)" >&2
  exit 1
}
ls "$OUT"/*.deb
