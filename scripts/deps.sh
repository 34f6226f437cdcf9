#!/usr/bin/env bash
# Installs what sqlite-tde builds and tests with.  Idempotent: does nothing
# when everything is present.  Needs root or sudo for the Debian packages.
#
#   scripts/deps.sh [BUILD_DIR]
#
# 1. Debian packages (apt).
# 2. npm packages, pinned by the lockfiles under scripts/npm/ and cached in
#    BUILD_DIR/npm (default: build/npm):
#      BUILD_DIR/npm/node  better-sqlite3, built from source against the
#                          machine's Node headers (the Node host of the tests)
#      BUILD_DIR/npm/src   amalgamation sources only (--ignore-scripts): a
#                          current SQLite (inside better-sqlite3) for the
#                          test driver, SQLCipher 4 and SQLite3 Multiple
#                          Ciphers for the benchmark peers
#    A folder is installed again only when its lockfile changed.
# Nothing else is downloaded.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD_DIR="${1:-$ROOT/build}"
mkdir -p "$BUILD_DIR"
BUILD_DIR="$(cd "$BUILD_DIR" && pwd)"

PKGS=(build-essential cmake pkg-config libsqlite3-dev sqlite3 libssl-dev openssl
      libargon2-dev libcmocka-dev python3 valgrind strace
      softhsm2 opensc python3-pykmip libsqlcipher-dev
      clang libclang-rt-14-dev
      swtpm swtpm-tools libtss2-dev tpm2-tools
      python3-setuptools python3-wheel python3-venv python3-pip
      chromium debhelper dpkg-dev fakeroot iproute2)
# Node.js and npm: any Node 20 (the machine's own, or Debian's packages).
command -v node >/dev/null 2>&1 || PKGS+=(nodejs)
command -v npm >/dev/null 2>&1 || PKGS+=(npm)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# npm folders: install from the pinned lockfile when it changed.  Two
# processes (make test's two builds) may race: a lock per folder.
npm_folder() {
  local name="$1"; shift
  local src="$ROOT/scripts/npm/$name" dst="$BUILD_DIR/npm/$name"
  local stamp="$dst/.lock.sha256" want
  want="$(sha256sum "$src/package-lock.json" | cut -d' ' -f1)"
  mkdir -p "$dst"
  (
    flock 9
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -d "$dst/node_modules" ]; then
      exit 0
    fi
    echo "deps: npm ci in $dst"
    cp "$src/package.json" "$src/package-lock.json" "$dst/"
    rm -rf "$dst/node_modules"
    # Debian's (or the machine's) Node headers: node-gyp must not download any.
    (cd "$dst" && npm_config_nodedir="${npm_config_nodedir:-/usr}" \
       npm ci --no-audit --no-fund --loglevel=error "$@")
    echo "$want" > "$stamp"
  ) 9>"$dst/.lock"
}
npm_folder node
npm_folder src --ignore-scripts
