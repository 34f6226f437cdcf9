#!/usr/bin/env bash
# Format-version-2 databases written by main's code at 08272f4
# (tests/fixtures/v2-08272f4, with its wallet), the format of every
# database created before format 3: this build opens them, reads every row,
# passes integrity_check and `sqlite-tde verify`, and finds a rolled-back
# page of the WAL-mode one (checked against its DB-tdemap) and refuses it.
# A write in WAL mode and a checkpoint keep it verifiable.
#
# Environment (set by ctest): TDE_BUILD, TDE_SRC, TDE_TEST_TMP.
set -uo pipefail

. "${TDE_SRC:?set TDE_SRC to the repository root}/tests/lib/fixture_v2.sh" test_fixture_v2

check '[ "$(q fix2.db "SELECT count(*) || \" \" || sum(length(v)) FROM t")" = "150 46692" ]' \
      "fix2.db: the 150 rows read back"
check '[ "$(q fixwal2.db "SELECT count(*) || \" \" || sum(length(v)) FROM t")" = "1500 468607" ]' \
      "fixwal2.db: the 1,500 rows read back"
for db in fix2.db fixwal2.db; do
  check '[ "$(q $db "PRAGMA integrity_check")" = "ok" ]' "$db: integrity_check ok"
  "$CLI" --config "$CFG" status "$db" > st.txt 2>&1
  check 'grep -q "^format_version: 2$" st.txt' "$db: status says format version 2"
  "$CLI" --config "$CFG" verify "$db" > vf.txt 2>&1
  RC=$?
  check '[ $RC -eq 0 ]' "$db: verify OK ($(head -1 vf.txt))"
done
grep -q "^page_map: on$" st.txt && ok "fixwal2.db: its page map is in force" || bad "fixwal2.db: page map not in force"

# A write and a checkpoint keep the WAL-mode fixture verifiable.
check '[ "$(q fixwal2.db "UPDATE t SET v=v||\"z\" WHERE id%100=0; PRAGMA wal_checkpoint(TRUNCATE); SELECT count(*) FROM t WHERE v LIKE \"%z\"")" = "0|0|0
15" ]' "fixwal2.db: 15 rows updated and checkpointed"
"$CLI" --config "$CFG" verify fixwal2.db > vf2.txt 2>&1
check '[ $? -eq 0 ]' "fixwal2.db: verify OK after the write ($(head -1 vf2.txt))"

# A page rolled back: a page the write above changed is replaced by its
# older copy from the fixture (authentic, but older than the map's tag).
PS=1024
PG=$(/usr/bin/python3 -c '
import sys
a=open(sys.argv[1],"rb").read(); b=open(sys.argv[2],"rb").read()
ps=1024; n=(min(len(a),len(b))-8192)//ps
d=[g+1 for g in range(1,n) if a[8192+g*ps:8192+(g+1)*ps]!=b[8192+g*ps:8192+(g+1)*ps]]
print(d[len(d)//2] if d else 0)' "$FIX/fixwal2.db" fixwal2.db)
if [ "$PG" -gt 1 ]; then
  OFF=$((8192 + (PG-1)*PS))
  # dd without the sanitizer runtimes the ASan suite preloads (its
  # aligned_alloc trips them); the copy must succeed or the test fails.
  env -u LD_PRELOAD dd if="$FIX/fixwal2.db" of=fixwal2.db bs=$PS skip=$((OFF/PS)) seek=$((OFF/PS)) \
      count=1 conv=notrunc status=none || { bad "fixwal2.db: could not put the older page back"; }
  "$CLI" --config "$CFG" verify fixwal2.db > vf3.txt 2>&1
  RC=$?
  check '[ $RC -ne 0 ] && grep -qi "page map" vf3.txt' "fixwal2.db: the older page $PG is refused by verify ($(grep -i -m1 "page" vf3.txt))"
  OUT=$(q fixwal2.db "SELECT count(*) FROM t WHERE v LIKE \"%z\"")
  check '[ "$OUT" != "15" ]' "fixwal2.db: and by a query (${OUT%%$'\n'*})"
else
  bad "fixwal2.db: the write changed no page after page 1"
fi

echo "test_fixture_v2: $NPASS passed, $NFAIL failed"
[ $NFAIL -eq 0 ]
