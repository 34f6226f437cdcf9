#!/usr/bin/env bash
# Installs what sqlite-tde builds, demonstrates and tests with, by profile.
# Idempotent: does nothing when everything is present.  Needs root or sudo
# for the Debian packages.
#
#   scripts/deps.sh [--check] [PROFILE] [BUILD_DIR]
#
#   demo     what `make demo` needs: gcc, make, CMake, pkg-config, the
#            libraries sqlite-tde links (OpenSSL, libargon2, SQLite,
#            tpm2-tss), the sqlite3 shell and python3 (the short benchmark).
#            No npm, no test tools.
#   test     (the default, what `make test` needs) everything: the demo's
#            packages, cmocka, valgrind, the keystore back ends the tests
#            run (SoftHSM, PyKMIP, swtpm), clang for libFuzzer, chromium
#            for the report rendering check, the Debian packaging tools,
#            Node.js, and both npm folders.
#   bench    the demo's packages and what `make bench` compares against
#            (libsqlcipher, the SQLCipher 4 and SQLite3MC amalgamations,
#            SoftHSM, PyKMIP, swtpm).
#   package  the demo's packages and what `make deb` builds the packages
#            with (debhelper, dpkg-dev, fakeroot).
#
#   --check  print what the profile needs, why, and what is missing;
#            install nothing; exit 1 when something is missing.
#
# A first argument that is not a profile name is BUILD_DIR (the old
# `scripts/deps.sh BUILD_DIR`, profile test).
#
# 1. Debian packages (apt, --no-install-recommends).
# 2. npm packages (test and bench only), pinned by the lockfiles under
#    scripts/npm/ and cached in BUILD_DIR/npm (default: build/npm):
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

CHECK=0
if [ "${1:-}" = --check ]; then CHECK=1; shift; fi
PROFILE=test
case "${1:-}" in
  demo|test|bench|package) PROFILE=$1; shift ;;
  -*) echo "usage: scripts/deps.sh [--check] [demo|test|bench|package] [BUILD_DIR]" >&2; exit 2 ;;
esac
BUILD_DIR="${1:-$ROOT/build}"

# Package, the profiles that need it (besides test, which needs them all),
# and why.  "demo" means every profile: the others build the library too.
TABLE=(
  "gcc                 demo     the C compiler (with binutils: strings, which the demo greps files with)"
  "libc6-dev           demo     the C library's headers"
  "make                demo     runs the Makefile (make demo, make test)"
  "cmake               demo     configures the build"
  "pkg-config          demo     finds the libraries below for CMake"
  "libssl-dev          demo     OpenSSL 3: AES-256-GCM, HKDF, TLS (KMIP, standby)"
  "libargon2-dev       demo     Argon2id, the password wallet's key derivation"
  "libsqlite3-dev      demo     the system SQLite the library and tde.so are built against"
  "libtss2-dev         demo     tpm2-tss: TPM-sealed auto-login wallets (the library links it)"
  "sqlite3             demo     the stock sqlite3 shell the demo loads tde.so into"
  "python3             demo     the benchmark orchestrator (the demo runs a 1-second benchmark)"
  "openssl             bench    the openssl tool: KMIP and standby certificates, command-keystore helper"
  "libsqlcipher-dev    bench    SQLCipher 3, a benchmark peer"
  "softhsm2            bench    a PKCS#11 token for the pkcs11 keystore (tests, benchmark condition)"
  "python3-pykmip      bench    a KMIP server for the kmip keystore (tests, benchmark condition)"
  "swtpm               bench    a software TPM for the TPM wallet (tests, benchmark condition)"
  "swtpm-tools         bench    swtpm_setup, to make the software TPM's state"
  "tpm2-tools          bench    tpm2_* commands the TPM tests check the sealing with"
  "build-essential     test     the usual toolchain set (the demo needs only gcc, libc6-dev, make)"
  "libcmocka-dev       test     the unit tests' framework"
  "valgrind            test     memcheck runs of the unit tests and fuzz replays"
  "strace              test     test_lifecycle checks which files a command opens"
  "opensc              test     pkcs11-tool, the PKCS#11 tests' second opinion"
  "clang               test     libFuzzer builds of the parsers"
  "libclang-rt-14-dev  test     the libFuzzer runtime"
  "chromium            test     renders the benchmark report (test_bench_report)"
  "iproute2            test     ss: the KMIP and standby tests wait for listening ports"
  "universal-ctags     test     scripts/callgraph.py (lint.callgraph): functions and their lines for the call graph"
  "debhelper           package  builds the .deb packages (make deb, test_deb)"
  "dpkg-dev            package  dpkg-buildpackage"
  "fakeroot            package  dpkg-buildpackage without root"
  "ceph-mon            test     a Ceph monitor: the one-node S3 server of the archive tests (tests/lib/s3server.sh)"
  "ceph-osd            test     a Ceph OSD on memstore, the S3 server's storage"
  "radosgw             test     the RADOS gateway: the S3 endpoint the archive client is tested against"
  "ceph-common         test     ceph, ceph-authtool, monmaptool and radosgw-admin: the S3 server's set-up"
  "libcurl4-openssl-dev test    libcurl (OpenSSL, CURLOPT_AWS_SIGV4): the S3 client of the archive"
  "curl                test     the curl tool: the S3 server's script makes the test bucket with it"
  "python3-setuptools  test     builds the Python package's wheel offline (test_packages)"
  "python3-wheel       test     the wheel format for that build"
  "python3-venv        test     a fresh venv the wheel is installed into"
  "python3-pip         test     pip, which builds and installs the wheel from the file"
)
# Node.js and npm: any Node 20 (the machine's own, or Debian's packages).
command -v node >/dev/null 2>&1 \
  || TABLE+=("nodejs              bench    Node: the Node host tests; npm installs the pinned amalgamations")
command -v npm >/dev/null 2>&1 \
  || TABLE+=("npm                 bench    installs the pinned npm packages (scripts/npm/)")

wanted() {                      # wanted PROFILES-OF-PACKAGE
  case "$PROFILE:$1" in
    test:*|*:demo|bench:bench|package:package) return 0 ;;
  esac
  return 1
}

echo "deps: profile $PROFILE"
missing=()
for row in "${TABLE[@]}"; do
  read -r pkg prof why <<<"$row"
  wanted "$prof" || continue
  if dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    state=present
  else
    state=MISSING
    missing+=("$pkg")
  fi
  printf 'deps:   %-8s %-19s %s\n' "$state" "$pkg" "$why"
done
NPM=""
case "$PROFILE" in
  test)  NPM="node src" ;;
  bench) NPM="src" ;;
esac
for n in $NPM; do
  printf 'deps:   npm      %-19s %s\n' "$BUILD_DIR/npm/$n" \
    "$([ "$n" = node ] && echo "better-sqlite3 for the Node tests" \
       || echo "amalgamations: SQLite 3.53 (tests), SQLCipher 4 and SQLite3MC (benchmark)")"
done

if [ "$CHECK" = 1 ]; then
  if [ ${#missing[@]} -gt 0 ]; then
    echo "deps: missing for $PROFILE: ${missing[*]}"
    exit 1
  fi
  echo "deps: every Debian package of profile $PROFILE is installed"
  exit 0
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
[ -n "$NPM" ] || exit 0

mkdir -p "$BUILD_DIR"
BUILD_DIR="$(cd "$BUILD_DIR" && pwd)"
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
for n in $NPM; do
  case "$n" in
    node) npm_folder node ;;
    src)  npm_folder src --ignore-scripts ;;
  esac
done
