#!/usr/bin/env bash
# Builds the sqlite_tde wheel from this folder and BUILD/tde.so, offline:
# Debian's setuptools and wheel, no build isolation, nothing downloaded.
#
#   python/build-wheel.sh [BUILD_DIR [OUT_DIR]]     (defaults: build, BUILD_DIR/python-dist)
#
# The package folder is copied to a scratch folder first, so the source
# tree gets no build/ or *.egg-info.  Prints the wheel's path.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
BUILD_DIR="$(cd "${1:-$HERE/../build}" && pwd)"
OUT_DIR="${2:-$BUILD_DIR/python-dist}"
PYTHON="${PYTHON:-/usr/bin/python3}"

[ -f "$BUILD_DIR/tde.so" ] || { echo "build-wheel: $BUILD_DIR/tde.so missing (cmake --build $BUILD_DIR --target tde)" >&2; exit 1; }
mkdir -p "$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
STAGE="$(mktemp -d "${TMPDIR:-/tmp}/sqlite-tde-wheel.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT
cp -r "$HERE/pyproject.toml" "$HERE/setup.py" "$HERE/README.md" "$HERE/sqlite_tde" "$STAGE/"
cp "$HERE/../LICENSE" "$STAGE/LICENSE"
install -m 755 "$BUILD_DIR/tde.so" "$STAGE/sqlite_tde/tde.so"
rm -f "$OUT_DIR"/sqlite_tde-*.whl
(cd "$STAGE" && "$PYTHON" -m pip wheel --no-build-isolation --no-deps --no-index --no-cache-dir -q -w "$OUT_DIR" . >&2)
ls "$OUT_DIR"/sqlite_tde-*.whl
