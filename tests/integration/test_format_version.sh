#!/usr/bin/env bash
# `format_version` in the configuration: new databases are created in
# format 1 when it says 1 (status shows version 1, freshness off; the
# database works and verifies; `sqlite-tde upgrade` moves it to 2), in
# format 2 when it says 2, in format 3 by default (issue 24), and any
# other value is refused
# with the file and line, creating nothing.
#
# Environment (set by ctest): TDE_BUILD, TDE_TEST_TMP.
set -uo pipefail

TDE_BUILD=${TDE_BUILD:?set TDE_BUILD to the build folder}
TDE_TEST_TMP=${TDE_TEST_TMP:-/tmp}
CLI="$TDE_BUILD/sqlite-tde"
mkdir -p "$TDE_TEST_TMP"
WORK=$(mktemp -d "$TDE_TEST_TMP/test_format_version.XXXXXX")
cd "$WORK"
echo "test_format_version: working in $WORK"

NFAIL=0
NPASS=0
ok()  { NPASS=$((NPASS+1)); echo "  ok    $*"; }
bad() { NFAIL=$((NFAIL+1)); echo "  FAIL  $*"; }
check() { if eval "$1"; then ok "$2"; else bad "$2"; fi; }

printf 'keystore = wallet\nwallet = w.tdew\n' > base.conf
chmod 600 base.conf
"$CLI" --config "$WORK/base.conf" keystore create --auto-login > /dev/null 2>&1 || { echo "keystore create failed"; exit 1; }
for v in 1 2 default; do
  cp base.conf "v$v.conf"
  [ "$v" != default ] && echo "format_version = $v" >> "v$v.conf"
  want=$v; [ "$v" = default ] && want=3
  fresh=on; [ "$want" = 1 ] && fresh=off
  "$CLI" --config "$WORK/v$v.conf" shell "v$v.db" \
    "CREATE TABLE t(x); INSERT INTO t SELECT value FROM generate_series(1,500); SELECT count(*) FROM t;" \
    > out.txt 2>&1
  check 'grep -q "^500$" out.txt' "format_version $v: the database is created and used ($(tail -1 out.txt))"
  "$CLI" --config "$WORK/v$v.conf" status "v$v.db" > st.txt 2>&1
  check 'grep -q "^format_version: $want$" st.txt && grep -q "^freshness: $fresh$" st.txt' \
    "format_version $v: status says version $want, freshness $fresh"
  "$CLI" --config "$WORK/v$v.conf" verify "v$v.db" > vf.txt 2>&1
  RC=$?
  check '[ $RC -eq 0 ]' "format_version $v: verify OK"
done
"$CLI" --config "$WORK/v1.conf" upgrade v1.db > up.txt 2>&1
RC=$?
"$CLI" --config "$WORK/v1.conf" status v1.db > st.txt 2>&1
check '[ $RC -eq 0 ] && grep -q "^format_version: 2$" st.txt' "a format-1 database made this way upgrades to 2"
# Under the default configuration plain `upgrade` goes on to format 3.
"$CLI" --config "$WORK/base.conf" upgrade v1.db > up.txt 2>&1
RC=$?
"$CLI" --config "$WORK/base.conf" status v1.db > st.txt 2>&1
check '[ $RC -eq 0 ] && grep -q "^format_version: 3$" st.txt' "plain upgrade under the default configuration goes to 3 ($(tail -1 up.txt))"
"$CLI" --config "$WORK/base.conf" verify v1.db > vf.txt 2>&1
RC=$?
check '[ $RC -eq 0 ]' "and the upgraded database verifies"

cp base.conf bad.conf
echo "format_version = 4" >> bad.conf
"$CLI" --config "$WORK/bad.conf" shell bad.db "CREATE TABLE t(x);" > bad.txt 2>&1
RC=$?
check '[ $RC -ne 0 ] && grep -q "bad.conf:3: format_version must be 1, 2 or 3" bad.txt' \
  "format_version = 4 is refused with file and line ($(grep -o "format_version must.*" bad.txt | head -1))"
check '[ ! -s bad.db ]' "and nothing was written to bad.db"

echo
echo "test_format_version: $NPASS passed, $NFAIL failed"
[ "$NFAIL" -eq 0 ]
