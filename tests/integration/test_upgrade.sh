#!/usr/bin/env bash
# `sqlite-tde upgrade` (issue 14): a format-version-1 database written by
# main's code at 0ad65da (tests/fixtures/v1-0ad65da, with its wallet) is
# moved to version 2 by the CLI, audited; running it again changes nothing;
# status shows the format; verify and the system sqlite3 shell read it.
#
# Environment (set by ctest): TDE_BUILD, TDE_SRC, TDE_TEST_TMP.
set -uo pipefail

TDE_BUILD=${TDE_BUILD:?set TDE_BUILD to the build folder}
TDE_SRC=${TDE_SRC:?set TDE_SRC to the repository root}
TDE_TEST_TMP=${TDE_TEST_TMP:-/tmp}
CLI="$TDE_BUILD/sqlite-tde"
mkdir -p "$TDE_TEST_TMP"
WORK=$(mktemp -d "$TDE_TEST_TMP/test_upgrade.XXXXXX")
cd "$WORK"
echo "test_upgrade: working in $WORK"

NFAIL=0
NPASS=0
ok()  { NPASS=$((NPASS+1)); echo "  ok    $*"; }
bad() { NFAIL=$((NFAIL+1)); echo "  FAIL  $*"; }
check() { if eval "$1"; then ok "$2"; else bad "$2"; fi; }

for f in fix.db fixwal.db fixwal.db-wal tde.conf w.tdew; do
  cp "$TDE_SRC/tests/fixtures/v1-0ad65da/$f" . || { echo "missing fixture $f"; exit 1; }
done
chmod 600 ./*
echo "audit_log = $WORK/audit.log" >> tde.conf
# pinned: this test is about the upgrade from version 1 to 2, where plain
# `upgrade` stops under format_version = 2 (it goes on to 3 by default)
echo "format_version = 2" >> tde.conf
CFG="$WORK/tde.conf"

for db in fix.db fixwal.db; do
  echo "== $db"
  "$CLI" --config "$CFG" status "$db" > st1.txt 2>&1
  check 'grep -q "^format_version: 1$" st1.txt && grep -q "^freshness: off$" st1.txt' "$db: status says version 1, freshness off"
  "$CLI" --config "$CFG" upgrade "$db" > up1.txt 2>&1
  RC=$?
  check '[ $RC -eq 0 ] && grep -q "upgraded to format version 2" up1.txt' "$db: upgrade succeeds ($(head -1 up1.txt))"
  "$CLI" --config "$CFG" upgrade "$db" > up2.txt 2>&1
  RC=$?
  check '[ $RC -eq 0 ] && grep -q "already format version 2" up2.txt' "$db: a second upgrade changes nothing"
  "$CLI" --config "$CFG" status "$db" > st2.txt 2>&1
  check 'grep -q "^format_version: 2$" st2.txt && grep -q "^freshness: on$" st2.txt' "$db: status says version 2, freshness on"
  "$CLI" --config "$CFG" verify "$db" > vf.txt 2>&1
  RC=$?
  check '[ $RC -eq 0 ]' "$db: verify OK ($(head -1 vf.txt))"
  N=$("$CLI" --config "$CFG" shell "$db" "SELECT count(*) || ' ' || sum(id) FROM t WHERE v LIKE 'fixture %';" 2>/dev/null)
  check '[ "$N" = "150 11325" ]' "$db: the 150 fixture rows read back through the sqlite3 shell ($N)"
  check '[ "$(grep -c "\"op\":\"upgrade\",\"outcome\":\"success\".*'"$db"'" audit.log)" = 1 ]' "$db: one audit line for the upgrade"
done

# A rekey also upgrades (docs/FORMAT.md "Upgrade from version 1"): in
# rollback mode its begin writes version 2; with frames in the version-1
# WAL its finish does, after the rekey emptied the WAL.
cp "$TDE_SRC/tests/fixtures/v1-0ad65da/fix.db" rk.db
cp "$TDE_SRC/tests/fixtures/v1-0ad65da/fixwal.db" rkwal.db
cp "$TDE_SRC/tests/fixtures/v1-0ad65da/fixwal.db-wal" rkwal.db-wal
chmod 600 rk.db rkwal.db rkwal.db-wal
for db in rk.db rkwal.db; do
  echo "== rekey $db"
  "$CLI" --config "$CFG" status "$db" > st1.txt 2>&1
  check 'grep -q "^format_version: 1$" st1.txt' "$db: version 1 before the rekey"
  "$CLI" --config "$CFG" rekey "$db" > rk.txt 2>&1
  RC=$?
  check '[ $RC -eq 0 ]' "rekey $db succeeds ($(tail -1 rk.txt))"
  "$CLI" --config "$CFG" status "$db" > st2.txt 2>&1
  check 'grep -q "^format_version: 2$" st2.txt && grep -q "^freshness: on$" st2.txt' "$db: version 2, freshness on after the rekey"
  "$CLI" --config "$CFG" verify "$db" > vf.txt 2>&1
  RC=$?
  check '[ $RC -eq 0 ]' "$db: verify OK after the rekey ($(head -1 vf.txt))"
  N=$("$CLI" --config "$CFG" shell "$db" "SELECT count(*) || ' ' || sum(id) FROM t WHERE v LIKE 'fixture %';" 2>/dev/null)
  check '[ "$N" = "150 11325" ]' "$db: the 150 fixture rows read back ($N)"
  check '[ "$(grep "\"op\":\"upgrade\",\"outcome\":\"success\"" audit.log | grep "'"$db"'" | grep -c "of a rekey")" = 1 ]' "$db: one audit line for the upgrade by the rekey"
  check '[ "$(grep "\"op\":\"rekey_end\",\"outcome\":\"success\"" audit.log | grep -c "'"$db"'")" = 1 ]' "$db: the rekey finished (audit rekey_end)"
done

# Downgrade: the version-1 header region saved before an upgrade, put back
# after a commit under version 2, must not turn the checks off (pages
# sealed since carry the newer header's sequence number).
echo "== downgrade"
cp "$TDE_SRC/tests/fixtures/v1-0ad65da/fix.db" dg.db
chmod 600 dg.db
cp dg.db dg-v1.db
"$CLI" --config "$CFG" upgrade dg.db > /dev/null 2>&1
"$CLI" --config "$CFG" shell dg.db "UPDATE t SET v = v || ' after the upgrade' WHERE id = 1;" > /dev/null 2>&1
dd if=dg-v1.db of=dg.db bs=8192 count=1 conv=notrunc status=none
"$CLI" --config "$CFG" shell dg.db "SELECT count(*) FROM t;" > dg.txt 2>&1
RC=$?
check '[ $RC -ne 0 ] && grep -q "header region was rolled back" dg.txt' \
  "a version-1 header put back after the upgrade is refused ($(grep -o "sealed under header sequence [0-9]* but the header is at [0-9]*" dg.txt | head -1))"

echo
echo "test_upgrade: $NPASS passed, $NFAIL failed"
[ "$NFAIL" -eq 0 ]
