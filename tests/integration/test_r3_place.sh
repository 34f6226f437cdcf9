#!/usr/bin/env bash
# The freshness anchor is bound to the database's place (issue 22 item 2,
# docs/FORMAT.md "External anchor", "The place").  The anchor record is
# looked up by the database id inside the file, so another database --
# a VACUUM INTO backup (which makes a new id) or another database of the
# same keystore -- put in app.db's place would open as "never anchored"
# and serve its old rows.  The store also keeps, per canonical path, the id
# it last anchored there: such a file is refused until an audited
# `sqlite-tde reanchor` accepts it.  Both journal modes.  Also: the same
# database at a new path opens (copies elsewhere are fine); a new database
# created where an anchored one was deleted is accepted and takes the
# place; a symbolic link to the place is the same place.
#
# Environment (set by ctest): TDE_BUILD, TDE_SRC, TDE_TEST_TMP.
set -uo pipefail
TDE_BUILD=${TDE_BUILD:?set TDE_BUILD to the build folder}
TDE_TEST_TMP=${TDE_TEST_TMP:-/tmp}
CLI="$TDE_BUILD/sqlite-tde"
EXT="$TDE_BUILD/tde"
mkdir -p "$TDE_TEST_TMP"
W=$(mktemp -d "$TDE_TEST_TMP/test_r3_place.XXXXXX")
cleanup(){ [ -n "${KEEP:-}${TDE_KEEP_SCRATCH:-}" ] || rm -rf "$W"; }
trap cleanup EXIT
cd "$W"
echo "test_r3_place: working in $W"
umask 077

NFAIL=0
NPASS=0
ok()  { NPASS=$((NPASS+1)); echo "  ok    $*"; }
bad() { NFAIL=$((NFAIL+1)); echo "  FAIL  $*"; }
check() { if eval "$1"; then ok "$2"; else bad "$2"; fi; }

command -v sqlite3 >/dev/null || { echo "FAIL - sqlite3 shell missing"; exit 1; }
sq(){ SQLITE_TDE_LOG=stderr sqlite3 -cmd ".load $EXT" -cmd ".open 'file:$1?vfs=tde&tde_config=$W/$2'" ":memory:" "$3" 2>&1; }
sums(){ sha256sum "$@" 2>/dev/null | awk '{print $1}' | tr '\n' ' '; }

mkdir -m 700 anchors
{ printf 'keystore = wallet\nwallet = a.tdew\nwallet_kdf_t = 1\nwallet_kdf_m_kib = 8192\naudit_log = audit.log\n'
  printf 'freshness_anchor = file:anchors\nfreshness_anchor_interval = 0\n'; } > file.conf
"$CLI" --config file.conf keystore create --auto-login >/dev/null 2>&1 \
  || { echo "FAIL - keystore create"; exit 1; }

place_case(){
  local mode=$1 db="app-$1.db" out rc before after
  echo "== journal_mode=$mode"
  sq "$db" file.conf "PRAGMA journal_mode=$mode; CREATE TABLE acct(id INTEGER PRIMARY KEY, balance INT);
    INSERT INTO acct(balance) VALUES(100);" >/dev/null
  # The README's backup recipe: VACUUM INTO through tde (a new database id).
  sq "$db" file.conf "VACUUM INTO 'file:$W/bak-$mode.db?vfs=tde&tde_config=$W/file.conf';" >/dev/null
  check '[ -s "bak-$mode.db" ]' "$mode: the VACUUM INTO backup exists"
  sq "$db" file.conf "UPDATE acct SET balance=-900;" >/dev/null
  check '[ "$(sq "$db" file.conf "SELECT balance FROM acct;")" = "-900" ]' "$mode: the later commit is there"
  # The attack: the backup put in app.db's place (the live database closed).
  rm -f "$db" "$db-wal" "$db-shm" "$db-journal" "$db-tdemap"
  cp -p "bak-$mode.db" "$db"
  before=$(sums "$db"* anchors/*)
  out=$(sq "$db" file.conf "SELECT balance FROM acct;")
  check '! grep -q "^-\?[0-9]" <<<"$out" && grep -q "another database is in this database.s place" <<<"$out" \
         && grep -q "sqlite-tde reanchor" <<<"$out" && grep -q "$db" <<<"$out"' \
    "$mode: the other database in its place is refused, naming the database and the fix ($(grep -o 'another database is in[^(]*' <<<"$out" | head -1))"
  "$CLI" --config file.conf verify "$db" > v.txt 2>&1
  rc=$?
  check '[ $rc -ne 0 ] && grep -q "another database is in this database.s place" v.txt' "$mode: verify refuses it too (exit $rc)"
  after=$(sums "$db"* anchors/*)
  check '[ "$before" = "$after" ]' "$mode: the refusal changed no file (database, anchor store)"
  check 'grep -q "\"op\":\"anchor_check\",\"outcome\":\"failure\".*'"$db"'" audit.log' "$mode: the refusal is in the audit log"
  # Restored on purpose: reanchor accepts it, audited; then it opens and is the place's database.
  "$CLI" --config file.conf reanchor "$db" > ra.txt 2>&1
  rc=$?
  check '[ $rc -eq 0 ] && grep -q "\"op\":\"reanchor\",\"outcome\":\"success\".*'"$db"'" audit.log' "$mode: reanchor accepts it, audited"
  check '[ "$(sq "$db" file.conf "SELECT balance FROM acct;")" = "100" ]' "$mode: after reanchor the restored backup opens"
  sq "$db" file.conf "UPDATE acct SET balance=7;" >/dev/null
  check '[ "$(sq "$db" file.conf "SELECT balance FROM acct;")" = "7" ]' "$mode: and takes writes"
}
place_case DELETE
place_case WAL

echo "== copies elsewhere, new databases, links"
sq orig.db file.conf "CREATE TABLE t(v); INSERT INTO t VALUES('orig');" >/dev/null
cp -p orig.db elsewhere.db
check '[ "$(sq elsewhere.db file.conf "SELECT v FROM t;")" = "orig" ]' "a copy of a database at a new path opens (no place record there)"
rm -f orig.db
sq orig.db file.conf "CREATE TABLE t(v); INSERT INTO t VALUES('new');" >/dev/null
check '[ "$(sq orig.db file.conf "SELECT v FROM t;")" = "new" ]' "a new database created where an anchored one was deleted opens and takes the place"
cp -p elsewhere.db other.db
ln -s "$W/orig.db" link.db
check '[ "$(sq link.db file.conf "SELECT v FROM t;")" = "new" ]' "a symbolic link to the place opens the place's database"
rm -f orig.db
cp -p other.db orig.db
out=$(sq link.db file.conf "SELECT v FROM t;")
check 'grep -q "another database is in this database.s place" <<<"$out"' "through the link, another database in the place is refused too"

echo
echo "test_r3_place: $NPASS passed, $NFAIL failed"
[ $NFAIL -eq 0 ]
