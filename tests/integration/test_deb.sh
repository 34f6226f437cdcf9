#!/usr/bin/env bash
# The Debian package (issue 16, item 2): `make deb-files` (what `make deb`
# does after building) builds it with dpkg-buildpackage from TDE_BUILD; the
# test checks its metadata, unpacks it into a scratch root with dpkg -x
# (the machine's dpkg database and /usr are not touched), and runs the
# unpacked sqlite-tde: --help, then a round trip (auto-login wallet,
# encrypt a plaintext database, read it through `sqlite-tde shell`, which
# must find the unpacked tde.so, verify, decrypt).
set -euo pipefail
: "${TDE_BUILD:?}" "${TDE_SRC:?}" "${TDE_TEST_TMP:?}"
for t in dpkg-buildpackage dh dpkg-deb sqlite3; do
  command -v "$t" >/dev/null || { echo "FAIL: $t not installed (scripts/deps.sh installs it)"; exit 1; }
done
mkdir -p "$TDE_TEST_TMP"
W=$(mktemp -d "$TDE_TEST_TMP/deb-XXXXXX")
fails=0
ok()   { echo "ok   $*"; }
bad()  { echo "FAIL $*"; fails=$((fails+1)); }

# The package tools are not under test: no sanitizer preload for them.
if ! env -u LD_PRELOAD make --no-print-directory -C "$TDE_SRC" deb-files BUILD="$TDE_BUILD" >"$W/make.log" 2>&1; then
  cat "$W/make.log"; echo "FAIL make deb-files"; exit 1
fi
DEB=$(ls "$TDE_BUILD"/deb/sqlite-tde_*_*.deb)
ok "built $(basename "$DEB")"
info=$(dpkg-deb -f "$DEB" Package Version Depends)
grep -q '^Package: sqlite-tde$' <<<"$info" && ok "Package: sqlite-tde" || bad "Package field: $info"
for d in libssl3 libsqlite3-0 libargon2-1 sqlite3; do
  grep -q "Depends:.*$d" <<<"$info" && ok "Depends on $d" || bad "Depends lacks $d: $info"
done

R=$W/root
dpkg -x "$DEB" "$R"
for f in usr/bin/sqlite-tde usr/lib/sqlite-tde/tde.so usr/lib/libsqlite-tde.so.0.1.0 \
         usr/lib/libsqlite-tde.a usr/include/sqlite-tde.h usr/lib/pkgconfig/sqlite-tde.pc; do
  [ -f "$R/$f" ] && ok "has /$f" || bad "missing /$f"
done
grep -qx 'prefix=/usr' "$R/usr/lib/pkgconfig/sqlite-tde.pc" && ok "sqlite-tde.pc: prefix=/usr" \
  || bad "sqlite-tde.pc prefix: $(grep prefix= "$R/usr/lib/pkgconfig/sqlite-tde.pc")"

CLI=$R/usr/bin/sqlite-tde
unset SQLITE_TDE_EXTENSION SQLITE_TDE_CONFIG
if "$CLI" --help >"$W/help.txt" 2>&1 && grep -q 'keystore create' "$W/help.txt"; then
  ok "sqlite-tde --help"
else
  bad "sqlite-tde --help: $(cat "$W/help.txt")"
fi

cd "$W"
printf 'keystore = wallet\nwallet = %s/tde.wallet   # auto-login\n' "$W" > tde.conf
chmod 600 tde.conf
sqlite3 plain.db "CREATE TABLE t(x); INSERT INTO t VALUES('deb round trip')"
step() { local what=$1; shift; if "$@" >"$W/out.txt" 2>&1; then ok "$what"; else bad "$what: $(cat "$W/out.txt")"; fi; }
step "keystore create --auto-login" "$CLI" --config tde.conf keystore create --auto-login
step "encrypt" "$CLI" --config tde.conf encrypt plain.db enc.db
got=$("$CLI" --config tde.conf shell enc.db "SELECT x FROM t" 2>&1 || true)
[ "$got" = "deb round trip" ] && ok "shell reads the row through the unpacked tde.so" || bad "shell: $got"
step "verify" "$CLI" --config tde.conf verify enc.db
if LC_ALL=C grep -a -q 'deb round trip' enc.db; then bad "enc.db holds the plaintext"; else ok "enc.db is ciphertext"; fi
step "decrypt" "$CLI" --config tde.conf decrypt enc.db back.db
got=$(sqlite3 back.db "SELECT x FROM t")
[ "$got" = "deb round trip" ] && ok "decrypted copy reads back" || bad "decrypted: $got"

echo "$fails failures"
[ "$fails" = 0 ] || exit 1
[ "${TDE_KEEP_SCRATCH:-}" = 1 ] || rm -rf "$W"
