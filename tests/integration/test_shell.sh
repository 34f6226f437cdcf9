#!/usr/bin/env bash
# Round trip through the stock sqlite3 shell with the tde loadable
# extension, in WAL and DELETE journal modes: create an encrypted database,
# insert rows (overflow blobs included), update, delete, roll a
# transaction back, close; reopen in a new shell process and compare the
# content hash (the shell's sha3_query) with the same statements run on a
# plain in-memory database; integrity_check, tde_status, .dump, .backup
# and VACUUM INTO another encrypted file; the plain shell must not read
# the files.
#
# Environment (set by ctest): TDE_BUILD (build folder), TDE_TEST_TMP
# (scratch root; this script works in its own mktemp -d there).  Every
# check prints what it verifies; exit 1 if any failed.  A missing tool is
# a failure, never a skip.
set -uo pipefail

TDE_BUILD=${TDE_BUILD:?set TDE_BUILD to the build folder}
TDE_TEST_TMP=${TDE_TEST_TMP:-/tmp}
CLI="$TDE_BUILD/sqlite-tde"
EXT="$TDE_BUILD/tde"
SQLITE3=$(command -v sqlite3 || true)

NFAIL=0
NPASS=0
ok()   { NPASS=$((NPASS+1)); echo "  ok    $*"; }
bad()  { NFAIL=$((NFAIL+1)); echo "  FAIL  $*"; }
step() { echo; echo "== $*"; }

for f in "$SQLITE3" "$CLI" "$EXT.so"; do
  if [ -z "$f" ] || [ ! -e "$f" ]; then
    echo "FAIL: missing tool: ${f:-sqlite3 shell not on PATH}"; exit 1
  fi
done

mkdir -p "$TDE_TEST_TMP"
WORK=$(mktemp -d "$TDE_TEST_TMP/test_shell.XXXXXX")
chmod 700 "$WORK"
cd "$WORK" || exit 1
echo "test_shell: working in $WORK with $SQLITE3 ($("$SQLITE3" -version | cut -d' ' -f1))"

# Under an ASan build tde.so needs the ASan runtime preloaded into the shell.
SHELL_ENV=()
ASAN_LIB=$(ldd "$EXT.so" 2>/dev/null | awk '/libasan/ {print $3}')
if [ -n "$ASAN_LIB" ] && [ -z "${LD_PRELOAD:-}" ]; then   # ctest preloads it already
  SHELL_ENV=(env LD_PRELOAD="$ASAN_LIB" ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0")
fi

CFG="$WORK/tde.conf"
printf 'keystore = wallet\nwallet = w.tdew\nwallet_kdf_t = 1\nwallet_kdf_m_kib = 8192\n' >"$CFG"
if ! "$CLI" keystore create --auto-login --config "$CFG" >/dev/null 2>err.txt; then
  echo "FAIL: sqlite-tde keystore create:"; cat err.txt; exit 1
fi

uri() { echo "file:$WORK/$1?vfs=tde&tde_config=$CFG"; }

# tde_sql DB: run stdin through the shell on the encrypted database DB.
tde_sql() {
  "${SHELL_ENV[@]}" "$SQLITE3" -batch -bail -noheader -list \
    -cmd ".load $EXT" -cmd ".open '$(uri "$1")'" 2>&1
}
# ref_sql: the same through a plain in-memory database (the reference).
ref_sql() {
  "$SQLITE3" -batch -bail -noheader -list :memory: 2>&1
}

# The workload: deterministic (no random()), so the reference matches.
workload() {
  cat <<'EOF'
CREATE TABLE t(id INTEGER PRIMARY KEY, k INT, a TEXT, b BLOB);
CREATE INDEX t_k ON t(k);
BEGIN;
WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM s WHERE i<3000)
INSERT INTO t SELECT i, (i*7919) % 1000,
  printf('row %d %.*c', i, i % 120, char(97 + i % 26)),
  CASE WHEN i % 31 = 0 THEN CAST(printf('%.*c', 9000 + i, char(65 + i % 26)) AS BLOB)
       ELSE CAST(printf('%08x', i*2654435761 % 4294967296) AS BLOB) END
FROM s;
COMMIT;
UPDATE t SET a = a || '-upd', k = k + 1 WHERE id % 7 = 0;
DELETE FROM t WHERE id % 11 = 3;
BEGIN;
DELETE FROM t;
INSERT INTO t(id, k, a) VALUES(999999, 0, 'rolled back');
ROLLBACK;
PRAGMA cache_size=10;
BEGIN;
WITH RECURSIVE s(i) AS (SELECT 5000 UNION ALL SELECT i+1 FROM s WHERE i<6500)
INSERT INTO t SELECT i, i % 13, printf('late %d', i), zeroblob(i % 3000) FROM s;
UPDATE t SET b = b || b WHERE id % 62 = 0;
COMMIT;
EOF
}
HASH_SQL="SELECT hex(sha3_query('SELECT id, k, a, b FROM t ORDER BY id'));"

WANT=$( (workload; echo "$HASH_SQL") | ref_sql)
(workload; echo ".dump") | ref_sql >dump-ref.sql
if [ ${#WANT} -lt 40 ]; then echo "FAIL: reference hash: $WANT"; exit 1; fi

for MODE in wal delete; do
  DB="shell-$MODE.db"
  step "journal_mode=$MODE"
  OUT=$( (echo "PRAGMA page_size=4096;"; echo "PRAGMA journal_mode=$MODE;"; workload; echo "$HASH_SQL") | tde_sql "$DB")
  RC=$?
  GOT=$(echo "$OUT" | tail -1)
  if [ $RC -eq 0 ] && [ "$(echo "$OUT" | head -1)" = "$MODE" ]; then ok "workload ran, journal_mode=$MODE"
  else bad "workload: exit $RC: $OUT"; fi
  if [ "$GOT" = "$WANT" ]; then ok "content hash before close matches the reference"
  else bad "content hash before close: $GOT, wanted $WANT"; fi
  for s in -wal -journal; do
    if [ -e "$DB$s" ]; then bad "$DB$s left after the shell exited"; else ok "no $s left"; fi
  done

  SIZE=$(stat -c %s "$DB")
  if [ "$SIZE" -gt 8192 ] && [ $(( (SIZE - 8192) % 4096 )) -eq 0 ]; then ok "file is header + whole pages ($SIZE bytes)"
  else bad "file size $SIZE is not 8192 + n*4096"; fi
  if grep -qa "SQLite format 3" "$DB"; then bad "plaintext SQLite header in $DB"; else ok "no plaintext header in the file"; fi
  if grep -qa "row 1 " "$DB"; then bad "plaintext row text in $DB"; else ok "no plaintext row text in the file"; fi

  # Reopen in a new process.
  OUT=$(printf '%s\nPRAGMA integrity_check;\nPRAGMA journal_mode;\nSELECT encrypted, cipher, page_size FROM tde_status WHERE schema = %s;\n' \
        "$HASH_SQL" "'main'" | tde_sql "$DB")
  if [ "$(echo "$OUT" | sed -n 1p)" = "$WANT" ]; then ok "content hash after reopen matches"
  else bad "content hash after reopen: $OUT"; fi
  if [ "$(echo "$OUT" | sed -n 2p)" = "ok" ]; then ok "integrity_check ok"
  else bad "integrity_check: $OUT"; fi
  if [ "$(echo "$OUT" | sed -n 3p)" = "$MODE" ]; then ok "journal_mode still $MODE"
  else bad "journal_mode after reopen: $(echo "$OUT" | sed -n 3p)"; fi
  if [ "$(echo "$OUT" | sed -n 4p)" = "1|aes-256-gcm|4096" ]; then ok "tde_status: encrypted, aes-256-gcm, 4096"
  else bad "tde_status: $(echo "$OUT" | sed -n 4p)"; fi

  # .dump through tde equals .dump of the reference (the shell's .dump
  # itself does not round-trip every value's type, so compare the text).
  echo ".dump" | tde_sql "$DB" >dump-tde.sql
  if cmp -s dump-tde.sql dump-ref.sql; then ok ".dump output equals the reference's ($(wc -l <dump-ref.sql) lines)"
  else bad ".dump output differs from the reference: $(diff dump-tde.sql dump-ref.sql | head -5)"; fi

  # .backup and VACUUM INTO other encrypted files.
  OUT=$(printf ".backup '%s'\nVACUUM INTO '%s';\n" "$(uri "$DB.bak")" "$(uri "$DB.vac")" | tde_sql "$DB")
  if [ -z "$OUT" ]; then ok ".backup and VACUUM INTO ran"; else bad ".backup / VACUUM INTO: $OUT"; fi
  for copy in "$DB.bak" "$DB.vac"; do
    OUT=$(printf '%s\nPRAGMA integrity_check;\n' "$HASH_SQL" | tde_sql "$copy")
    if [ "$OUT" = "$WANT"$'\n'"ok" ]; then ok "$copy reads back through tde"
    else bad "$copy: $OUT"; fi
    if grep -qa "SQLite format 3" "$copy"; then bad "plaintext header in $copy"; else ok "$copy has no plaintext header"; fi
  done

  # Without tde the files are not databases.
  OUT=$("$SQLITE3" -batch "file:$WORK/$DB?mode=ro" "SELECT count(*) FROM t;" 2>&1)
  if echo "$OUT" | grep -q "not a database"; then ok "the plain shell refuses the file"
  else bad "the plain shell: $OUT"; fi

  # The CLI authenticates every page.
  if "$CLI" --config "$CFG" verify "$DB" >out.txt 2>&1; then ok "sqlite-tde verify: $(cat out.txt)"
  else bad "sqlite-tde verify: $(cat out.txt)"; fi
done

echo
echo "test_shell: $NPASS passed, $NFAIL failed"
if [ "$NFAIL" -eq 0 ] && [ -z "${TDE_KEEP_SCRATCH:-}" ]; then rm -rf "$WORK"; fi
[ "$NFAIL" -eq 0 ]
