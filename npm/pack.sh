#!/usr/bin/env bash
# Packs the sqlite-tde npm package from this folder and BUILD/tde.so,
# offline (npm pack reads only these files; the package has no
# dependencies).
#
#   npm/pack.sh [BUILD_DIR [OUT_DIR]]     (defaults: build, BUILD_DIR/npm-dist)
#
# The folder is copied to a scratch folder with lib/tde.so, so the source
# tree is not changed.  Prints the tarball's path.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
BUILD_DIR="$(cd "${1:-$HERE/../build}" && pwd)"
OUT_DIR="${2:-$BUILD_DIR/npm-dist}"

[ -f "$BUILD_DIR/tde.so" ] || { echo "pack: $BUILD_DIR/tde.so missing (cmake --build $BUILD_DIR --target tde)" >&2; exit 1; }
mkdir -p "$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
STAGE="$(mktemp -d "${TMPDIR:-/tmp}/sqlite-tde-npm.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT
cp "$HERE/package.json" "$HERE/index.js" "$HERE/index.d.ts" "$HERE/README.md" "$STAGE/"
cp "$HERE/../LICENSE" "$STAGE/LICENSE"
mkdir "$STAGE/lib"
install -m 755 "$BUILD_DIR/tde.so" "$STAGE/lib/tde.so"
rm -f "$OUT_DIR"/sqlite-tde-*.tgz
(cd "$STAGE" && npm pack --offline --ignore-scripts --silent --pack-destination "$OUT_DIR" >/dev/null)
ls "$OUT_DIR"/sqlite-tde-*.tgz
