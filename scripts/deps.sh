#!/usr/bin/env bash
# Installs the Debian packages sqlite-tde builds and tests with.
# Idempotent: does nothing when everything is present. Needs root or sudo.
set -euo pipefail
PKGS=(build-essential cmake pkg-config libsqlite3-dev sqlite3 libssl-dev openssl
      libargon2-dev libcmocka-dev python3 valgrind strace
      softhsm2 opensc python3-pykmip libsqlcipher-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
echo "deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
