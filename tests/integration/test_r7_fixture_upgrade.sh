#!/usr/bin/env bash
# The format-version-2 fixtures written by main at 08272f4
# (tests/fixtures/v2-08272f4: fix2.db rollback mode, fixwal2.db +
# fixwal2.db-tdemap WAL mode, two map groups) upgraded in place to format
# version 3 (`sqlite-tde upgrade --to 3`, docs/FORMAT.md "Upgrade from
# version 2"): status says version 3, `verify`, integrity_check and the
# fixture's row counts and lengths pass, DB-tdemap is gone, an audit line
# `upgrade` names 2 -> 3; a second run changes nothing; a `cp` of the
# upgraded WAL database alone opens and verifies, and a page of it rolled
# back (after a write and a checkpoint) is refused against the map the file
# holds.  Plain `upgrade` (no --to) goes to 3 as well, and leaves a
# version-2 database at 2 under format_version = 2.
#
# Environment (set by ctest): TDE_BUILD, TDE_SRC, TDE_TEST_TMP.
set -uo pipefail

. "${TDE_SRC:?set TDE_SRC to the repository root}/tests/lib/fixture_v2.sh" test_r7_fixture_upgrade
printf 'audit_log = %s/audit.log\n' "$WORK" >> tde.conf

# Without --to: the configured version; under format_version = 2, nothing moves.
cp tde.conf tde-v2.conf && echo "format_version = 2" >> tde-v2.conf
"$CLI" --config "$WORK/tde-v2.conf" upgrade fix2.db > up0.txt 2>&1
check 'grep -q "already format version 2" up0.txt' "fix2.db: plain upgrade under format_version = 2 leaves version 2 ($(head -1 up0.txt))"

# Plain upgrade under the default configuration goes to 3 (fix2.db), as
# --to 3 does (fixwal2.db).
declare -A ROWS=( [fix2.db]="150 46692" [fixwal2.db]="1500 468607" )
declare -A HOW=( [fix2.db]="" [fixwal2.db]="--to 3" )
for db in fix2.db fixwal2.db; do
  "$CLI" --config "$CFG" upgrade ${HOW[$db]} "$db" > up.txt 2>&1
  RC=$?
  check '[ $RC -eq 0 ] && grep -q "upgraded to format version 3" up.txt' "$db: upgrade ${HOW[$db]:-(plain)} ($(head -1 up.txt))"
  check '[ ! -e "$db-tdemap" ]' "$db: no DB-tdemap after the upgrade"
  "$CLI" --config "$CFG" status "$db" > st.txt 2>&1
  check 'grep -q "^format_version: 3$" st.txt' "$db: status says format version 3"
  "$CLI" --config "$CFG" verify "$db" > vf.txt 2>&1
  check '[ $? -eq 0 ]' "$db: verify OK ($(head -1 vf.txt))"
  check '[ "$(q $db "PRAGMA integrity_check")" = "ok" ]' "$db: integrity_check ok"
  check '[ "$(q $db "SELECT count(*) || \" \" || sum(length(v)) FROM t")" = "${ROWS[$db]}" ]' \
        "$db: the rows read back (${ROWS[$db]})"
  "$CLI" --config "$CFG" upgrade --to 3 "$db" > up2.txt 2>&1
  check 'grep -q "already format version 3" up2.txt' "$db: a second run changes nothing"
done
grep -q "^page_map: on$" st.txt && ok "fixwal2.db: its page map is in force" || bad "fixwal2.db: page map not in force"
check '[ "$(grep -c "\"upgrade\"" audit.log)" -ge 2 ] && grep -q "2 -> 3" audit.log' "the audit log has the upgrades, 2 -> 3"

# The upgraded WAL database copied alone (no -wal, no DB-tdemap) opens.
rm -f fixwal2.db-wal fixwal2.db-shm
cp fixwal2.db copy.db
check '[ "$(q copy.db "SELECT count(*) || \" \" || sum(length(v)) FROM t")" = "1500 468607" ]' "copy.db: the cp alone opens, rows read back"
"$CLI" --config "$CFG" verify copy.db > vfc.txt 2>&1
check '[ $? -eq 0 ]' "copy.db: verify OK ($(head -1 vfc.txt))"

# A page rolled back in the copy: rows changed and checkpointed, one
# changed page put back from before (authentic, older than the map says).
rm -f copy.db-wal copy.db-shm
cp copy.db before.db
check '[ "$(q copy.db "UPDATE t SET v=v||\"z\" WHERE id%100=0; PRAGMA wal_checkpoint(TRUNCATE); SELECT count(*) FROM t WHERE v LIKE \"%z\"")" = "0|0|0
15" ]' "copy.db: 15 rows updated and checkpointed"
PS=1024
OFF=$(/usr/bin/python3 -c '
import sys
a=open(sys.argv[1],"rb").read(); b=open(sys.argv[2],"rb").read()
ps=1024; M=8192; K=508
off=lambda n: 8192 + M*(1+(n-1)//K) + (n-1)*ps
d=[off(n) for n in range(2, 593) if off(n)+ps<=min(len(a),len(b)) and a[off(n):off(n)+ps]!=b[off(n):off(n)+ps]]
print(d[len(d)//2] if d else 0)' before.db copy.db)
if [ "$OFF" -gt 0 ]; then
  env -u LD_PRELOAD dd if=before.db of=copy.db bs=$PS skip=$((OFF/PS)) seek=$((OFF/PS)) \
      count=1 conv=notrunc status=none || bad "copy.db: could not put the older page back"
  "$CLI" --config "$CFG" verify copy.db > vfr.txt 2>&1
  RC=$?
  check '[ $RC -ne 0 ] && grep -qi "page map the database file itself holds" vfr.txt' \
        "copy.db: the older page at offset $OFF is refused ($(grep -i -m1 "page" vfr.txt | cut -c1-120))"
else
  bad "copy.db: the write changed no page"
fi

# A version-1 database (tests/fixtures/v1-0ad65da, WAL mode with frames in
# its -wal, and rollback mode) goes to 2 first, then to 3, in one run.
mkdir v1 && cd v1
for f in fix.db fixwal.db fixwal.db-wal tde.conf w.tdew; do
  cp "$TDE_SRC/tests/fixtures/v1-0ad65da/$f" . || { echo "FAIL: missing fixture $f"; exit 1; }
done
chmod 600 ./*
printf 'audit_log = %s/v1/audit.log\n' "$WORK" >> tde.conf
CFG1="$WORK/v1/tde.conf"
for db in fix.db fixwal.db; do
  "$CLI" --config "$CFG1" upgrade --to 3 "$db" > up.txt 2>&1
  RC=$?
  check '[ $RC -eq 0 ] && grep -q "upgraded to format version 3" up.txt' "v1 $db: upgrade --to 3 ($(head -1 up.txt))"
  "$CLI" --config "$CFG1" status "$db" > st.txt 2>&1
  check 'grep -q "^format_version: 3$" st.txt' "v1 $db: status says format version 3"
  "$CLI" --config "$CFG1" verify "$db" > vf.txt 2>&1
  check '[ $? -eq 0 ]' "v1 $db: verify OK ($(head -1 vf.txt))"
  N=$("$CLI" --config "$CFG1" shell "$db" "SELECT count(*) || ' ' || sum(id) FROM t WHERE v LIKE 'fixture %'; PRAGMA integrity_check;" 2>/dev/null)
  check '[ "$N" = "150 11325
ok" ]' "v1 $db: the 150 rows read back, integrity_check ok"
  check '[ "$(grep "'"$db"'" audit.log | grep -c "1 -> 2")" = 1 ] && [ "$(grep "'"$db"'" audit.log | grep -c "2 -> 3")" = 1 ]' "v1 $db: audited 1 -> 2 and 2 -> 3"
done
cd "$WORK"

echo "test_r7_fixture_upgrade: $NPASS passed, $NFAIL failed"
[ $NFAIL -eq 0 ]
