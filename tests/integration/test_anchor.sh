#!/usr/bin/env bash
# External freshness anchors (issue 14 item 4, docs/FORMAT.md "External
# anchor"): whole-file rollback.  For each anchor store -- file:DIR,
# PKCS#11 (a data object on a throwaway SoftHSM2 token) and KMIP (a Secret
# Data object on a PyKMIP server on 127.0.0.1) -- and, for the
# file store, both journal modes: a backup of the whole database (the files
# after a clean close) is taken, later commits are made (interval 0), the
# backup is put back:
#   - with the anchor the open is refused with the message (both values,
#     the reanchor hint), and no file changes (database, anchor);
#   - the same restore without an anchor serves the old rows (the harm the
#     anchor prevents: this is what "failing on v1" means), and a
#     format-version-1 database with an anchor configured is not anchored;
#   - `sqlite-tde reanchor` then lets it open, the audit log records it.
# Also: an unreachable anchor store refuses the open with a clear message;
# a forged, edited or truncated anchor file is refused; the interval bounds
# the updates; the configuration keys are parsed strictly.  No PIN reaches
# a log (scan-secrets runs over the scratch files after make test).
#
# Environment (set by ctest): TDE_BUILD, TDE_SRC, TDE_TEST_TMP.
set -uo pipefail
TDE_BUILD=${TDE_BUILD:?set TDE_BUILD to the build folder}
TDE_SRC=${TDE_SRC:?set TDE_SRC to the repository root}
TDE_TEST_TMP=${TDE_TEST_TMP:-/tmp}
CLI="$TDE_BUILD/sqlite-tde"
EXT="$TDE_BUILD/tde"
MODULE=/usr/lib/softhsm/libsofthsm2.so
mkdir -p "$TDE_TEST_TMP"
W=$(mktemp -d "$TDE_TEST_TMP/test_anchor.XXXXXX")
# shellcheck source=kmip_server.sh
. "$TDE_SRC/tests/integration/kmip_server.sh"
cleanup(){
  set +e
  kmip_server_stop
  [ -n "${KEEP:-}${TDE_KEEP_SCRATCH:-}" ] || rm -rf "$W"   # kept: make test scans it for secrets
}
trap cleanup EXIT
cd "$W"
echo "test_anchor: working in $W"
umask 077

NFAIL=0
NPASS=0
ok()  { NPASS=$((NPASS+1)); echo "  ok    $*"; }
bad() { NFAIL=$((NFAIL+1)); echo "  FAIL  $*"; }
check() { if eval "$1"; then ok "$2"; else bad "$2"; fi; }

command -v sqlite3 >/dev/null || { echo "FAIL - sqlite3 shell missing"; exit 1; }
# sq DB CONF SQL: the stock sqlite3 shell through the tde VFS; the shim's
# log goes to stderr, which is kept with stdout.
sq(){ SQLITE_TDE_LOG=stderr sqlite3 -cmd ".load $EXT" -cmd ".open 'file:$1?vfs=tde&tde_config=$W/$2'" ":memory:" "$3" 2>&1; }
sums(){ sha256sum "$@" 2>/dev/null | awk '{print $1}' | tr '\n' ' '; }

mkdir -m 700 anchors
wallet_conf(){  # $1 file, then extra lines
  local f=$1; shift
  { printf 'keystore = wallet\nwallet = a.tdew\nwallet_kdf_t = 1\nwallet_kdf_m_kib = 8192\naudit_log = audit.log\n'
    printf '%s\n' "$@"; } > "$f"
}
wallet_conf plain.conf
wallet_conf file.conf 'freshness_anchor = file:anchors' 'freshness_anchor_interval = 0'
"$CLI" --config plain.conf keystore create --auto-login >/dev/null 2>&1 \
  || { echo "FAIL - keystore create"; exit 1; }

# rollback_case NAME CONF PLAIN_CONF JOURNAL_MODE KIND: the whole-file
# rollback scenario; PLAIN_CONF is the same keystore without an anchor.
rollback_case(){
  local name=$1 conf=$2 plain=$3 mode=$4 kind=$5 db="$1.db" out rc before after
  echo "== $name: $conf, journal_mode=$mode"
  sq "$db" "$conf" "PRAGMA journal_mode=$mode; CREATE TABLE acct(id INTEGER PRIMARY KEY, balance INT);
    WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<200)
    INSERT INTO acct(balance) SELECT 999 FROM c;" >/dev/null
  sq "$db" "$conf" "UPDATE acct SET balance=998 WHERE id=1;" >/dev/null
  mkdir -p "bak-$name"
  cp -p "$db"* "bak-$name/"
  # Later commits, each one past the interval (0): the anchor moves on.
  sq "$db" "$conf" "UPDATE acct SET balance=0;" >/dev/null
  sq "$db" "$conf" "INSERT INTO acct(balance) VALUES(5);" >/dev/null
  check '[ "$(sq "$db" "$conf" "SELECT sum(balance), count(*) FROM acct;")" = "5|201" ]' \
    "$name: the later commits are there"
  # Put the whole backup back: database and whatever journal state it had.
  rm -f "$db" "$db-wal" "$db-shm" "$db-journal"
  cp -p "bak-$name/"* .
  before=$(sums "$db"* anchors/* 2>/dev/null)
  out=$(sq "$db" "$conf" "SELECT sum(balance) FROM acct;")
  check '! grep -q "^[0-9]" <<<"$out" && grep -q "older than its freshness anchor" <<<"$out" \
         && grep -q "sqlite-tde reanchor" <<<"$out" && grep -q "anchor A=[0-9]* L=[0-9]* seq=[0-9]*" <<<"$out" \
         && grep -q "file A=[0-9]* L=[0-9]* seq=[0-9]*" <<<"$out" && grep -q "$db" <<<"$out"' \
    "$name: the restored copy is refused, naming the database, both values and the fix"
  "$CLI" --config "$conf" status "$db" > st.txt 2>&1
  rc=$?
  check '[ $rc -ne 0 ] && grep -q "older than its freshness anchor" st.txt' "$name: sqlite-tde status refuses it too (exit $rc)"
  after=$(sums "$db"* anchors/* 2>/dev/null)
  check '[ "$before" = "$after" ]' "$name: the refusal changed no file (database, journal state, anchor)"
  check 'grep -q "\"op\":\"anchor_check\",\"outcome\":\"failure\".*'"$db"'" audit.log' "$name: the refusal is in the audit log"
  # Without the anchor the same restore opens and serves the old rows.
  check '[ "$(sq "$db" "$plain" "SELECT sum(balance) FROM acct;")" = "$((999*199+998))" ]' \
    "$name: without an anchor the restored copy opens and serves the old rows (undetected rollback)"
  # Restored on purpose: reanchor, then it opens.
  "$CLI" --config "$conf" reanchor "$db" > ra.txt 2>&1
  rc=$?
  check '[ $rc -eq 0 ] && grep -q "re-anchored" ra.txt' "$name: sqlite-tde reanchor succeeds ($(head -1 ra.txt))"
  check 'grep -q "\"op\":\"reanchor\",\"outcome\":\"success\".*'"$db"'" audit.log' "$name: reanchor is in the audit log"
  check '[ "$(sq "$db" "$conf" "SELECT sum(balance), count(*) FROM acct;")" = "$((999*199+998))|200" ]' \
    "$name: after reanchor the restored state opens"
  "$CLI" --config "$conf" status "$db" > st.txt 2>&1
  check 'grep -q "^anchor: $kind$" st.txt && grep -q "^anchor_counter: [1-9]" st.txt && grep -q "^anchor_updated: 20[0-9-]*T[0-9:]*Z$" st.txt' \
    "$name: status shows the anchor kind and counter ($(grep '^anchor' st.txt | tr '\n' ' '))"
  check '"$CLI" --config "$conf" verify "$db" >/dev/null 2>&1' "$name: verify passes"
}

rollback_case delete file.conf plain.conf DELETE file
rollback_case wal file.conf plain.conf WAL file

# --- the interval bounds updates ------------------------------------------------
echo "== interval"
wallet_conf slow.conf 'freshness_anchor = file:anchors' 'freshness_anchor_interval = 3600'
sq iv.db slow.conf "CREATE TABLE t(v); INSERT INTO t VALUES(1);" >/dev/null
sq iv.db slow.conf "INSERT INTO t VALUES(2);" >/dev/null      # first write of this connection: anchors
a1=$(sums anchors/*)
c1=$("$CLI" --config slow.conf status iv.db | awk '/^anchor_counter:/{print $2}')
sq iv.db slow.conf "INSERT INTO t VALUES(3); INSERT INTO t VALUES(4); INSERT INTO t VALUES(5);" >/dev/null
c2=$("$CLI" --config slow.conf status iv.db | awk '/^anchor_counter:/{print $2}')
check '[ "$c1" -ge 1 ] && [ "$c2" = "$((c1+1))" ]' \
  "with interval 3600 three commits on one connection advance the anchor once ($c1 -> $c2)"
check '[ "$a1" != "$(sums anchors/*)" ]' "... and the anchor record follows the header"

# --- a rekey moves the record to the new data key --------------------------------
echo "== rekey"
v0=$("$CLI" --config file.conf status delete.db | awk '/^data_key_version:/{print $2}')
"$CLI" --config file.conf rekey --step 8 delete.db > rk.txt 2>&1
v1=$("$CLI" --config file.conf status delete.db | awk '/^data_key_version:/{print $2}')
check '[ "$v1" = "$((v0+1))" ] && "$CLI" --config file.conf status delete.db | grep -q "^rekey_in_progress: 0$"' \
  "rekey with an anchor configured makes a new data key and finishes ($v0 -> $v1)"
check '[ "$(sq delete.db file.conf "SELECT count(*) FROM acct;")" = 200 ]' \
  "after the rekey (the old data key removed) the anchor record still authenticates: it opens"

# --- forged, edited, truncated anchor file --------------------------------------
echo "== forged anchor"
sq forge.db file.conf "CREATE TABLE t(v); INSERT INTO t VALUES('x');" >/dev/null
sq forge.db file.conf "INSERT INTO t VALUES('y');" >/dev/null
DBID=$("$CLI" --config file.conf status --all forge.db | awk '/^database_id:/{print $2; exit}')
AF="anchors/sqlite-tde-anchor-$DBID"
check '[ -f "$AF" ] && [ "$(stat -c %a "$AF")" = 600 ] && [ "$(stat -c %s "$AF")" = 96 ]' \
  "the anchor file is named by the database id, 96 bytes, mode 0600"
cp -p "$AF" good.anchor
# Lower the recorded counter to 0 (bytes 24..31) keeping the old MAC: forged.
printf '\000\000\000\000\000\000\000\000' | env -u LD_PRELOAD dd of="$AF" bs=1 seek=24 conv=notrunc status=none   # dd is not ours: no ASan preload
out=$(sq forge.db file.conf "SELECT count(*) FROM t;")
check 'grep -q "does not authenticate" <<<"$out" && ! grep -q "^2$" <<<"$out"' "an edited anchor record is refused (MAC)"
head -c 50 good.anchor > "$AF"
out=$(sq forge.db file.conf "SELECT count(*) FROM t;")
check 'grep -q "not an anchor record" <<<"$out"' "a truncated anchor record is refused"
cp -p "anchors/sqlite-tde-anchor-$(ls anchors | grep -v "$DBID" | head -1 | sed 's/sqlite-tde-anchor-//')" "$AF"
out=$(sq forge.db file.conf "SELECT count(*) FROM t;")
check 'grep -q "names another database" <<<"$out"' "another database's anchor record is refused"
rm -f "$AF"
out=$(sq forge.db file.conf "SELECT count(*) FROM t;")
check 'grep -q "holds no record" <<<"$out"' "a deleted anchor record is refused for an anchored database"
cp -p good.anchor "$AF"
check '[ "$(sq forge.db file.conf "SELECT count(*) FROM t;")" = 2 ]' "the good record put back opens it"

# --- unreachable store ----------------------------------------------------------
echo "== unreachable"
mv anchors anchors.away
out=$(sq forge.db file.conf "SELECT count(*) FROM t;")
check 'grep -q "cannot be checked" <<<"$out" && grep -q "cannot be reached" <<<"$out" && ! grep -q "^2$" <<<"$out"' \
  "an anchor directory that cannot be reached refuses the open with a clear message"
mv anchors.away anchors
chmod 777 anchors
out=$(sq forge.db file.conf "SELECT count(*) FROM t;")
check 'grep -q "not writable by group or others" <<<"$out"' "a group/world-writable anchor directory is refused"
chmod 700 anchors
check '[ "$(sq forge.db file.conf "SELECT count(*) FROM t;")" = 2 ]' "back in place, it opens"

# --- strict configuration -------------------------------------------------------
echo "== configuration"
badconf(){  # $1 label, $2 expected message, then lines
  local label=$1 msg=$2; shift 2
  wallet_conf bad.conf "$@"
  "$CLI" --config bad.conf status forge.db > bad.txt 2>&1
  local rc=$?
  check '[ $rc -ne 0 ] && grep -q "$msg" bad.txt' "config: $label is refused ($(grep -o 'bad.conf:[0-9]*: .\{0,60\}' bad.txt | head -1))"
}
badconf "an unknown kind" "freshness_anchor must be" 'freshness_anchor = tpm'
badconf "file: without a directory" "needs a directory" 'freshness_anchor = file:'
badconf "pkcs11 with a wallet keystore" "needs keystore = pkcs11" 'freshness_anchor = pkcs11'
badconf "kmip with a wallet keystore" "needs keystore = kmip" 'freshness_anchor = kmip'
badconf "a non-numeric interval" "whole number of seconds" 'freshness_anchor = file:anchors' 'freshness_anchor_interval = 1m'
badconf "an interval without an anchor" "without freshness_anchor" 'freshness_anchor_interval = 5'

# --- format version 1: not anchored ---------------------------------------------
echo "== format version 1"
for f in fix.db tde.conf w.tdew; do cp "$TDE_SRC/tests/fixtures/v1-0ad65da/$f" "v1-$f"; done
sed -i "s#w.tdew#$W/v1-w.tdew#" v1-tde.conf
printf 'audit_log = %s/audit.log\nfreshness_anchor = file:%s/anchors\nfreshness_anchor_interval = 0\n' "$W" "$W" >> v1-tde.conf
chmod 600 v1-*
n0=$(sq v1-fix.db v1-tde.conf "SELECT count(*) FROM t;" | tail -1)
cp -p v1-fix.db v1-bak.db
sq v1-fix.db v1-tde.conf "DELETE FROM t WHERE id%2=0;" >/dev/null
check '[ "$(sq v1-fix.db v1-tde.conf "SELECT count(*) FROM t;" | tail -1)" -lt "$n0" ]' "v1: rows deleted"
cp -p v1-bak.db v1-fix.db
out=$(sq v1-fix.db v1-tde.conf "SELECT count(*) FROM t;")
check '[ "$(tail -1 <<<"$out")" = "$n0" ] && grep -q "format version 1" <<<"$out"' \
  "v1: the restored copy opens with the old rows (v1 cannot be anchored; the log says so)"
"$CLI" --config v1-tde.conf status v1-fix.db > st.txt 2>&1
check 'grep -q "^anchor: off (format version 1)$" st.txt' "v1: status says the anchor is off (format version 1)"
out=$("$CLI" --config v1-tde.conf reanchor v1-fix.db 2>&1)
check '[ $? -ne 0 ] && grep -q "upgrade" <<<"$out"' "v1: reanchor refuses and points to upgrade"

# --- PKCS#11: a data object on a SoftHSM2 token --------------------------------
echo "== pkcs11"
if ! command -v softhsm2-util >/dev/null || [ ! -e "$MODULE" ]; then
  bad "softhsm2 missing (scripts/deps.sh installs softhsm2)"
else
  mkdir tokens
  printf 'directories.tokendir = %s/tokens\nobjectstore.backend = file\nlog.level = ERROR\n' "$W" > softhsm2.conf
  export SOFTHSM2_CONF="$W/softhsm2.conf"
  printf '%s\n' 'tde-test-pin-user-anc-7Kw2' > user.pin
  # softhsm2-util takes the PINs only as arguments (as in test_pkcs11.sh);
  # sqlite-tde itself reads the PIN from user.pin.
  softhsm2-util --init-token --free --label tde-anc --so-pin 'tde-test-pin-so-anc-3Jq8' \
    --pin "$(head -1 user.pin)" >/dev/null
  p11conf(){
    local f=$1; shift
    { printf 'keystore = pkcs11\npkcs11_module = %s\npkcs11_token_label = tde-anc\n' "$MODULE"
      printf 'pkcs11_key_label = anc-master\npassword_file = user.pin\naudit_log = audit.log\n'
      printf '%s\n' "$@"; } > "$f"
  }
  p11conf p11plain.conf
  p11conf p11.conf 'freshness_anchor = pkcs11' 'freshness_anchor_interval = 0'
  "$CLI" --config p11plain.conf keystore create >/dev/null 2>&1 || bad "pkcs11 keystore create"
  nfiles=$(ls anchors | wc -l)
  rollback_case p11 p11.conf p11plain.conf DELETE pkcs11
  check '[ "$(ls anchors | wc -l)" = "$nfiles" ]' "pkcs11: no anchor file was written (the record is on the token)"
  check '! grep -aq "tde-test-pin-user-anc-7Kw2" audit.log' "pkcs11: the PIN is not in the audit log"
fi

# --- KMIP: a Secret Data object on a PyKMIP server ------------------------------
echo "== kmip"
if ! kmip_certs "$W/pki" || ! kmip_server_start "$W/pki"; then
  bad "PyKMIP server did not start (scripts/deps.sh installs python3-pykmip)"
else
  KPORT=$KMIP_PORT
  kconf(){
    local f=$1; shift
    { printf 'keystore = kmip\nkmip_servers = 127.0.0.1:%s\nkmip_ca = pki/ca.pem\n' "$KPORT"
      printf 'kmip_client_cert = pki/client.pem\nkmip_client_key = pki/client.key\n'
      printf 'kmip_connect_timeout = 2\nkmip_request_timeout = 5\naudit_log = audit.log\n'
      printf '%s\n' "$@"; } > "$f"
  }
  kconf kplain.conf
  kconf kmip.conf 'freshness_anchor = kmip' 'freshness_anchor_interval = 0'
  "$CLI" --config kplain.conf keystore create --auto-login >/dev/null 2>&1 || bad "kmip keystore create"
  nfiles=$(ls anchors | wc -l)
  rollback_case kmip kmip.conf kplain.conf WAL kmip
  check '[ "$(ls anchors | wc -l)" = "$nfiles" ]' "kmip: no anchor file was written (the record is on the key manager)"
  nsec=$(env -u LD_PRELOAD /usr/bin/python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT count(*) FROM secret_data_objects s JOIN managed_objects m ON m.uid=s.uid").fetchone()[0])' "$W/pki/pykmip.db" 2>&1)
  # One object per name: the anchor record and the place record (FORMAT.md "The place").
  check '[ "$nsec" = 2 ]' "kmip: each update destroyed the older anchor object: one Secret Data object per name is left, the anchor record and the place record ($nsec)"
  # The key manager down at open: the open is refused, not let through.
  kmip_server_stop
  out=$(sq kmip.db kmip.conf "SELECT count(*) FROM acct;")
  check '! grep -q "^[0-9]" <<<"$out" && grep -qi "kmip\|key manager\|connect" <<<"$out"' \
    "kmip: with the key manager down the open is refused ($(tail -1 <<<"$out" | cut -c1-90))"
fi

echo
echo "test_anchor: $NPASS passed, $NFAIL failed"
[ "$NFAIL" -eq 0 ]
