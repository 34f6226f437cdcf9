#!/usr/bin/env bash
# PKCS#11 keystore end to end, through the sqlite-tde CLI and the stock
# sqlite3 shell, against a throwaway SoftHSM2 token in a test folder
# (its own softhsm2.conf; SOFTHSM2_CONF points there): keystore create /
# list / status, an encrypted database created and reopened in new
# processes, rotate-master-key, rekey, retirement, migration wallet ->
# pkcs11 -> wallet, wrong PIN, missing module, token and key label, the
# master key non-extractable on the token, and no PIN in the audit log.
set -euo pipefail
: "${TDE_BUILD:?}" "${TDE_TEST_TMP:?}"
CLI="$TDE_BUILD/sqlite-tde"
EXT="$TDE_BUILD/tde"
MODULE=/usr/lib/softhsm/libsofthsm2.so
mkdir -p "$TDE_TEST_TMP"
W=$(mktemp -d "$TDE_TEST_TMP/pkcs11.XXXXXX")
trap '[ -n "${KEEP:-}${TDE_KEEP_SCRATCH:-}" ] || rm -rf "$W"' EXIT
cd "$W"
fails=0
check(){ if eval "$2"; then echo "ok   - $1"; else echo "FAIL - $1"; fails=$((fails+1)); fi; }
sq(){ sqlite3 -cmd ".load $EXT" -cmd ".open 'file:$1?vfs=tde&tde_config=$2'" ":memory:" "${@:3}" 2>&1 | grep -v '^$' || true; }

for tool in softhsm2-util pkcs11-tool; do
  command -v $tool >/dev/null || { echo "FAIL - $tool missing (scripts/deps.sh installs softhsm2 and opensc)"; exit 1; }
done
[ -e "$MODULE" ] || { echo "FAIL - $MODULE missing (scripts/deps.sh installs softhsm2)"; exit 1; }

# --- a throwaway token -----------------------------------------------------------
mkdir tokens
printf 'directories.tokendir = %s/tokens\nobjectstore.backend = file\nlog.level = ERROR\n' "$W" > softhsm2.conf
export SOFTHSM2_CONF="$W/softhsm2.conf"
umask 077
printf '%s' 'so-8c1f2e' > so.pin
printf '%s\n' 'user-4b7d19' > user.pin
printf '%s\n' 'wrong-0000' > wrong.pin
chmod 600 so.pin user.pin wrong.pin
softhsm2-util --init-token --free --label tde-it --so-pin "$(cat so.pin)" --pin "$(head -1 user.pin)" >/dev/null

conf(){  # $1 file, then extra lines
  local f=$1; shift
  { printf 'keystore = pkcs11\npkcs11_module = %s\naudit_log = audit.log\n' "$MODULE"; printf '%s\n' "$@"; } > "$f"
}
conf p.conf 'pkcs11_token_label = tde-it' 'password_file = user.pin' 'pkcs11_key_label = it-master'

# --- create, list, status ------------------------------------------------------------
k1=$("$CLI" --config p.conf keystore create 2>/dev/null)
check "keystore create makes a master key labelled it-master-<time>" "[[ '$k1' == it-master-20* ]]"
check "a second create is refused" "! '$CLI' --config p.conf keystore create >/dev/null 2>&1"
check "keystore list shows it ACTIVE" "'$CLI' --config p.conf keystore list | grep '$k1' | grep -q ACTIVE"
check "keystore status: type pkcs11, OPEN, current key" \
  "'$CLI' --config p.conf keystore status | tr '\n' ' ' | grep -q 'type: pkcs11 status: OPEN .*current master key: $k1'"
check "the master key is sensitive, never extractable, encrypt/decrypt only (pkcs11-tool)" \
  "pkcs11-tool --module $MODULE --token-label tde-it --login --pin \"\$(head -1 user.pin)\" -O 2>/dev/null \
     | grep -A4 '$k1' | tr '\n' ' ' | grep -q 'Usage: *encrypt, decrypt .*Access: *sensitive, always sensitive, never extractable'"
check "reading its value is refused by the token (CKR_ATTRIBUTE_SENSITIVE)" \
  "! pkcs11-tool --module $MODULE --token-label tde-it --login --pin \"\$(head -1 user.pin)\" \
     --read-object --type secrkey --label '$k1' >/dev/null 2>&1"

# --- encrypted database through the shell, reopened in new processes -----------------------
sq app.db p.conf "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);
  WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<2000)
  INSERT INTO t(v) SELECT 'row ' || i FROM c;" >/dev/null
check "the database file holds no plaintext" "! grep -q 'row 1999' app.db"
check "reopened in a new process" "[ \"\$(sq app.db p.conf 'SELECT count(*) FROM t;')\" = 2000 ]"
check "status names the pkcs11 master key" "'$CLI' --config p.conf status app.db | grep -q '^master_key: $k1'"
check "verify" "'$CLI' --config p.conf verify app.db >/dev/null"

# --- rotation, rekey, retirement -------------------------------------------------------------
k2=$("$CLI" --config p.conf rotate-master-key app.db 2>/dev/null | awk '/new master key/{print $4}')
check "rotate-master-key makes a new token key ($k2)" "[[ '$k2' == it-master-20* ]] && [ '$k2' != '$k1' ]"
check "the database is wrapped by the new key" "'$CLI' --config p.conf status app.db | grep -q '^master_key: $k2'"
check "rotated database reads back" "[ \"\$(sq app.db p.conf 'SELECT count(*) FROM t;')\" = 2000 ]"
v1=$("$CLI" --config p.conf status app.db | awk '/^data_key_version: [0-9]/{print $2}')
"$CLI" --config p.conf rekey --step 16 app.db >/dev/null 2>&1
v2=$("$CLI" --config p.conf status app.db | awk '/^data_key_version: [0-9]/{print $2}')
check "rekey makes a new data key ($v1 -> $v2)" "[ '$v2' = \$(( $v1 + 1 )) ]"
check "rekey keeps every row" "[ \"\$(sq app.db p.conf 'SELECT count(*), sum(length(v)) FROM t;')\" = \"\$(sqlite3 :memory: \"WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<2000) SELECT count(*), sum(length('row ' || i)) FROM c;\")\" ]"
check "verify after rekey" "'$CLI' --config p.conf verify app.db >/dev/null"
check "retiring the current key is refused" "! '$CLI' --config p.conf keystore retire '$k2' >/dev/null 2>&1"
check "retiring the old key works" "'$CLI' --config p.conf keystore retire '$k1' >/dev/null 2>&1"
check "list shows it RETIRED" "'$CLI' --config p.conf keystore list | grep '$k1' | grep -q RETIRED"
check "the token marks it: CKA_ENCRYPT false (usage decrypt only)" \
  "pkcs11-tool --module $MODULE --token-label tde-it --login --pin \"\$(head -1 user.pin)\" -O 2>/dev/null \
     | grep -A4 '$k1' | grep -q 'Usage: *decrypt$'"

# --- migration wallet -> pkcs11 -> wallet --------------------------------------------------
printf 'keystore = wallet\nwallet = w.tdew\naudit_log = audit.log\n' > w.conf
"$CLI" --config w.conf keystore create --auto-login >/dev/null 2>&1
sq mig.db w.conf "CREATE TABLE t(x); INSERT INTO t VALUES('migrated');" >/dev/null
"$CLI" --config w.conf migrate-keystore --to p.conf mig.db >/dev/null 2>&1
check "after migrate to pkcs11 both keystores open the database (wallet)" "[ \"\$(sq mig.db w.conf 'SELECT x FROM t;')\" = migrated ]"
check "after migrate to pkcs11 both keystores open the database (pkcs11)" "[ \"\$(sq mig.db p.conf 'SELECT x FROM t;')\" = migrated ]"
"$CLI" --config p.conf migrate-keystore --to p.conf --drop-old mig.db >/dev/null 2>&1
check "after --drop-old the wallet no longer opens it" "! '$CLI' --config w.conf status mig.db >/dev/null 2>&1"
check "only the token opens it" "'$CLI' --config p.conf verify mig.db >/dev/null"
"$CLI" --config p.conf migrate-keystore --to w.conf --drop-old mig.db >/dev/null 2>&1
check "and back: the wallet opens it" "[ \"\$(sq mig.db w.conf 'SELECT x FROM t;')\" = migrated ]"
check "and the token no longer does" "! '$CLI' --config p.conf status mig.db >/dev/null 2>&1"

# --- failures name their cause ----------------------------------------------------------
conf bad.conf 'pkcs11_token_label = tde-it' 'password_file = wrong.pin' 'pkcs11_key_label = it-master'
out=$(sq app.db bad.conf 'SELECT count(*) FROM t;'; "$CLI" --config bad.conf keystore status 2>&1 || true)
check "wrong PIN: the open fails and says so" "grep -q 'PIN incorrect' <<<\"\$out\" && ! grep -q '^2000$' <<<\"\$out\""
check "the wrong PIN itself is never printed" "! grep -q 'wrong-0000' <<<\"\$out\""
conf nomod.conf 'pkcs11_token_label = tde-it' 'password_file = user.pin' 'pkcs11_key_label = it-master'
sed -i "s#$MODULE#$W/no-such-pkcs11.so#" nomod.conf
out=$("$CLI" --config nomod.conf status app.db 2>&1 || true)
check "missing module: fails naming the path" "grep -q 'pkcs11 module $W/no-such-pkcs11.so: cannot load' <<<\"\$out\""
conf notok.conf 'pkcs11_token_label = no-such-token' 'password_file = user.pin'
out=$("$CLI" --config notok.conf status app.db 2>&1 || true)
check "missing token: fails naming the label" "grep -q \"no token labelled 'no-such-token'\" <<<\"\$out\""
conf nolab.conf 'pkcs11_token_label = tde-it' 'password_file = user.pin' 'pkcs11_key_label = other-label'
out=$("$CLI" --config nolab.conf status app.db 2>&1 || true)
check "missing key label: the database does not open, naming its master key" "grep -q \"none of which is in the pkcs11 keystore\" <<<\"\$out\""
check "missing key label: status says no master key" "'$CLI' --config nolab.conf keystore status 2>/dev/null | grep -q 'status: OPEN_NO_MASTER_KEY'"
start=$(date +%s%N)
for i in 1 2 3; do sq app.db nomod.conf 'SELECT 1;' >/dev/null; done
ms=$(( ($(date +%s%N) - start) / 1000000 ))
check "failed opens return quickly (3 in ${ms} ms)" "[ $ms -lt 10000 ]"

# --- audit trail -------------------------------------------------------------------------
check "audit: keystore_create, master_key_create and master_key_retire by pkcs11" \
  "grep -q '\"op\":\"keystore_create\",\"outcome\":\"success\".*\"keystore\":\"pkcs11\"' audit.log \
   && grep -q '\"op\":\"master_key_create\".*\"keystore\":\"pkcs11\".*\"key_id\":\"$k2\"' audit.log \
   && grep -q '\"op\":\"master_key_retire\".*\"keystore\":\"pkcs11\".*\"key_id\":\"$k1\"' audit.log"
check "audit: the failed open is recorded" "grep -q '\"op\":\"keystore_open\",\"outcome\":\"failure\".*PIN incorrect' audit.log"
check "audit: no PIN in the log" "! grep -q -e user-4b7d19 -e wrong-0000 -e so-8c1f2e audit.log"

echo "$fails failure(s)"
[ $fails -eq 0 ]
