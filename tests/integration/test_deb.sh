#!/usr/bin/env bash
# The Debian packages (issue 16, item 2; split in issue 25): `make
# deb-files` (what `make deb` does after building) builds them with
# dpkg-buildpackage from TDE_BUILD, as Debian's own libraries are split:
#   libsqlite-tde0     the shared library alone (its SONAME in the name)
#   libsqlite-tde-dev  header, static library, the .so link, sqlite-tde.pc
#   sqlite-tde         the CLI and the loadable extension tde.so
# The test checks each package's metadata and that every file is in its
# package and in no other, unpacks them into a scratch root with dpkg -x
# (the machine's dpkg database and /usr are not touched), builds a C
# program against the unpacked -dev files with pkg-config and runs it with
# the unpacked shared library, and runs the unpacked sqlite-tde: --help,
# then a round trip (auto-login wallet, encrypt a plaintext database, read
# it through `sqlite-tde shell`, which must find the unpacked tde.so,
# verify, decrypt).
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
VER=$(dpkg-parsechangelog -l "$TDE_SRC/debian/changelog" -S Version)
declare -A DEB FILES
# Every file each package must hold (and no other package may).
FILES[libsqlite-tde0]="usr/lib/libsqlite-tde.so.0.1.0 usr/lib/libsqlite-tde.so.0"
FILES[libsqlite-tde-dev]="usr/include/sqlite-tde.h usr/lib/libsqlite-tde.a usr/lib/libsqlite-tde.so
                          usr/lib/pkgconfig/sqlite-tde.pc"
FILES[sqlite-tde]="usr/bin/sqlite-tde usr/lib/sqlite-tde/tde.so"
n=$(ls "$TDE_BUILD"/deb/*.deb | wc -l)
[ "$n" = 3 ] && ok "three packages built" || bad "$n packages built: $(ls "$TDE_BUILD"/deb/*.deb)"
for p in libsqlite-tde0 libsqlite-tde-dev sqlite-tde; do
  DEB[$p]=$(ls "$TDE_BUILD"/deb/${p}_"$VER"_*.deb 2>/dev/null || true)
  if [ -z "${DEB[$p]}" ]; then bad "no package $p"; echo "$fails failures"; exit 1; fi
  ok "built $(basename "${DEB[$p]}")"
  [ "$(dpkg-deb -f "${DEB[$p]}" Package)" = "$p" ] && ok "$p: Package field" || bad "$p: Package field"
done
depends() { dpkg-deb -f "${DEB[$1]}" Depends; }
for d in libssl3 libsqlite3-0 libargon2-1 libtss2-esys; do
  grep -q "$d" <<<"$(depends libsqlite-tde0)" && ok "libsqlite-tde0 depends on $d" \
    || bad "libsqlite-tde0 Depends lacks $d: $(depends libsqlite-tde0)"
done
for d in "libsqlite-tde0 (= $VER)" libsqlite3-dev libssl-dev libargon2-dev libtss2-dev; do
  grep -qF "$d" <<<"$(depends libsqlite-tde-dev)" && ok "libsqlite-tde-dev depends on $d" \
    || bad "libsqlite-tde-dev Depends lacks $d: $(depends libsqlite-tde-dev)"
done
for d in libssl3 libsqlite3-0 libargon2-1 sqlite3; do
  grep -q "$d" <<<"$(depends sqlite-tde)" && ok "sqlite-tde depends on $d" \
    || bad "sqlite-tde Depends lacks $d: $(depends sqlite-tde)"
done
# The library package registers the SONAME (shlibs) and runs ldconfig.
dpkg-deb -e "${DEB[libsqlite-tde0]}" "$W/ctl"
grep -q '^libsqlite-tde 0 libsqlite-tde0' "$W/ctl/shlibs" 2>/dev/null && ok "libsqlite-tde0: shlibs names the SONAME" \
  || bad "libsqlite-tde0 shlibs: $(cat "$W/ctl/shlibs" 2>&1)"
grep -q ldconfig "$W/ctl/triggers" 2>/dev/null && ok "libsqlite-tde0: ldconfig trigger" \
  || bad "libsqlite-tde0: no ldconfig trigger"

# Each file in its package and in no other; nothing else but folders and docs.
for p in libsqlite-tde0 libsqlite-tde-dev sqlite-tde; do
  dpkg-deb -c "${DEB[$p]}" | awk '$1 !~ /^d/ {print $6}' | sed 's|^\./||' | grep -v '^usr/share/doc/' | sort > "$W/$p.list"
done
for p in libsqlite-tde0 libsqlite-tde-dev sqlite-tde; do
  for f in ${FILES[$p]}; do
    where=$(grep -lx "$f" "$W"/*.list | xargs -r -n1 basename | sed 's/\.list$//' | tr '\n' ' ')
    [ "$where" = "$p " ] && ok "/$f in $p only" || bad "/$f in: ${where:-no package} (want $p)"
  done
  extra=$(grep -vxF -f <(tr ' ' '\n' <<<"${FILES[$p]}" | sed '/^$/d') "$W/$p.list" || true)
  [ -z "$extra" ] && ok "$p holds nothing else" || bad "$p also holds: $extra"
done

R=$W/root
for p in libsqlite-tde0 libsqlite-tde-dev sqlite-tde; do dpkg -x "${DEB[$p]}" "$R"; done
grep -qx 'prefix=/usr' "$R/usr/lib/pkgconfig/sqlite-tde.pc" && ok "sqlite-tde.pc: prefix=/usr" \
  || bad "sqlite-tde.pc prefix: $(grep prefix= "$R/usr/lib/pkgconfig/sqlite-tde.pc")"
[ "$(readlink "$R/usr/lib/libsqlite-tde.so")" = libsqlite-tde.so.0 ] \
  && ok "the -dev link libsqlite-tde.so -> libsqlite-tde.so.0" \
  || bad "libsqlite-tde.so links to '$(readlink "$R/usr/lib/libsqlite-tde.so")'"

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

# libsqlite-tde-dev: a C program built with the unpacked header and .pc
# (pkg-config through the scratch root), linked with the unpacked shared
# library, reads enc.db through the tde VFS.
cat > app.c <<'EOF'
#include <sqlite-tde.h>
#include <sqlite3.h>
#include <stdio.h>
int main(void){
  sqlite3 *db = 0;
  sqlite3_stmt *st = 0;
  int rc = tde_register(0);
  if( rc!=0 ){ printf("tde_register: %s\n", tde_errstr(rc)); return 1; }
  rc = sqlite3_open_v2("file:enc.db?vfs=tde&tde_config=tde.conf", &db,
                       SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, 0);
  if( rc==SQLITE_OK ) rc = sqlite3_prepare_v2(db, "SELECT x FROM t", -1, &st, 0);
  if( rc==SQLITE_OK && sqlite3_step(st)==SQLITE_ROW ){
    printf("%s %s\n", tde_version(), (const char *)sqlite3_column_text(st, 0));
  }else{
    printf("read failed: %s\n", sqlite3_errmsg(db));
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return 0;
}
EOF
SAN=()
if grep -q '^TDE_SANITIZE:BOOL=ON$' "$TDE_BUILD/CMakeCache.txt"; then SAN=(-fsanitize=address,undefined); fi
if flags=$(env -u LD_PRELOAD PKG_CONFIG_SYSROOT_DIR="$R" PKG_CONFIG_PATH="$R/usr/lib/pkgconfig" \
           pkg-config --cflags --libs sqlite-tde); then
  ok "pkg-config --cflags --libs sqlite-tde: $flags"
else
  bad "pkg-config found no sqlite-tde in the unpacked -dev package"
fi
# shellcheck disable=SC2086
if env -u LD_PRELOAD cc app.c -o app $flags "${SAN[@]}" >"$W/cc.txt" 2>&1; then
  ok "cc app.c \$(pkg-config --cflags --libs sqlite-tde) against the unpacked packages"
  readelf -d app | grep -q 'NEEDED.*libsqlite-tde.so.0' && ok "app needs libsqlite-tde.so.0" \
    || bad "app does not need libsqlite-tde.so.0"
  got=$(LD_LIBRARY_PATH="$R/usr/lib" ./app 2>&1 || true)
  grep -qx '[0-9][0-9.]* deb round trip' <<<"$got" && ok "app reads enc.db through libsqlite-tde.so.0: $got" \
    || bad "app: $got"
  got=$(env -u LD_PRELOAD LD_LIBRARY_PATH="$R/usr/lib" ldd ./app | grep libsqlite-tde || true)
  grep -q "$R/usr/lib/libsqlite-tde.so.0" <<<"$got" && ok "app ran with the unpacked library" \
    || bad "app found libsqlite-tde elsewhere: $got"
else
  bad "cc against the unpacked -dev package: $(cat "$W/cc.txt")"
fi

echo "$fails failures"
[ "$fails" = 0 ] || exit 1
[ "${TDE_KEEP_SCRATCH:-}" = 1 ] || rm -rf "$W"
