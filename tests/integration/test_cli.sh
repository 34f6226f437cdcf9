#!/usr/bin/env bash
# Integration test of the sqlite-tde command-line tool against the built
# binaries and the system sqlite3 shell.
#
# Environment (set by ctest): TDE_BUILD (build folder), TDE_SRC (repo root),
# TDE_TEST_TMP (scratch root; this script works in its own mktemp -d there).
# Every check prints what it verifies; the script exits 1 if any failed.
set -uo pipefail

TDE_BUILD=${TDE_BUILD:?set TDE_BUILD to the build folder}
TDE_TEST_TMP=${TDE_TEST_TMP:-/tmp}
CLI="$TDE_BUILD/sqlite-tde"
mkdir -p "$TDE_TEST_TMP"
WORK=$(mktemp -d "$TDE_TEST_TMP/test_cli.XXXXXX")
cd "$WORK"
echo "test_cli: working in $WORK"

# Under an ASan build (make test-asan), tde.so can only be loaded into the
# stock sqlite3 that `sqlite-tde shell` execs with the ASan runtime
# preloaded; sqlite3's own allocations are not ours to leak-check.
SHELL_ENV=()
ASAN_LIB=$(ldd "$TDE_BUILD/tde.so" 2>/dev/null | awk '/libasan/ {print $3}')
if [ -n "$ASAN_LIB" ]; then
  SHELL_ENV=(env LD_PRELOAD="$ASAN_LIB" ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0")
  echo "test_cli: ASan build: preloading $ASAN_LIB for the sqlite3 shell"
fi

NFAIL=0
NPASS=0
ok()   { NPASS=$((NPASS+1)); echo "  ok    $*"; }
bad()  { NFAIL=$((NFAIL+1)); echo "  FAIL  $*"; }
step() { echo; echo "== $*"; }

# run NAME CMD...: run CMD, keep stdout/stderr in out.txt/err.txt, status in RC.
run() {
  "$@" >out.txt 2>err.txt </dev/null
  RC=$?
}
# expect_rc WANT DESCRIPTION: compare the last RC.
expect_rc() {
  if [ "$RC" -eq "$1" ]; then ok "$2 (exit $RC)"
  else bad "$2: exit $RC, wanted $1"; sed 's/^/        | /' err.txt out.txt; fi
}
# expect_in FILE PATTERN DESCRIPTION: extended regex must match a line.
expect_in() {
  if grep -Eq -- "$2" "$1"; then ok "$3"
  else bad "$3: no /$2/ in $1"; sed 's/^/        | /' "$1"; fi
}
sha() { sha256sum "$1" | cut -d' ' -f1; }
no_temp_files() {
  if ls -a | grep -q '\.tmp-'; then bad "$1: temporary files left: $(ls -a | grep '\.tmp-' | tr '\n' ' ')"
  else ok "$1: no temporary files left"; fi
}

# ---------------------------------------------------------------------------
step "help and usage"
for args in "--help" "--version" "keystore --help" "keystore create --help" \
            "keystore status --help" "keystore list --help" "status --help" \
            "encrypt --help" "decrypt --help" "verify --help" "shell --help"; do
  # shellcheck disable=SC2086
  run "$CLI" $args
  expect_rc 0 "sqlite-tde $args"
done
expect_in out.txt 'usage: sqlite-tde' "shell --help prints a usage line"
run "$CLI" decrypt --help
expect_in out.txt '48 reserved bytes' "decrypt --help mentions the 48 reserved bytes"
run "$CLI" frobnicate
expect_rc 2 "unknown command"
expect_in err.txt 'usage:' "unknown command prints usage on stderr"
run "$CLI" --bogus status x.db
expect_rc 2 "unknown global option"
run "$CLI" encrypt --bogus a b
expect_rc 2 "unknown command option"
run "$CLI" encrypt onlyone.db
expect_rc 2 "missing argument"
run "$CLI" keystore create --password tde-test-pw-argv-3Hk9
expect_rc 2 "a password on argv is refused"

# ---------------------------------------------------------------------------
step "keystore create / status / list (auto-login wallet)"
cat > auto.conf <<EOF
keystore = wallet
wallet = auto.tdew
wallet_kdf_t = 1
wallet_kdf_m_kib = 8192
EOF
run "$CLI" --config auto.conf keystore create --auto-login
expect_rc 0 "keystore create --auto-login"
KEYID=$(head -n1 out.txt)
expect_in out.txt '^wallet-[0-9a-f]+$' "create prints the new master key id"
[ -f auto.tdew ] && ok "wallet file created" || bad "wallet file auto.tdew missing"
run "$CLI" --config auto.conf keystore create --auto-login
expect_rc 1 "creating it again is refused"
expect_in err.txt 'exists' "the refusal says the wallet exists"
run "$CLI" --config auto.conf keystore status
expect_rc 0 "keystore status"
expect_in out.txt '^type: wallet$' "status shows type wallet"
expect_in out.txt '^status: OPEN$' "status shows OPEN"
expect_in out.txt "^location: .*/auto\\.tdew$" "status shows the wallet location"
expect_in out.txt '^auto-login: yes$' "status shows auto-login yes"
expect_in out.txt "^current master key: $KEYID$" "status shows the current master key"
expect_in out.txt '^keys: 1$' "status shows one key"
run "$CLI" --config auto.conf keystore list
expect_rc 0 "keystore list"
expect_in out.txt "^$KEYID +[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z +ACTIVE$" \
  "list shows id, ISO-8601 UTC time and ACTIVE"
# --config after the command works too
run "$CLI" keystore status --config auto.conf
expect_rc 0 "--config after the command"

# ---------------------------------------------------------------------------
step "keystore create / status (password wallet via password_file)"
cat > pw.conf <<EOF
keystore = wallet
wallet = pw.tdew
password_file = pw.txt
wallet_kdf_t = 1
wallet_kdf_m_kib = 8192
EOF
printf 'correct horse battery staple' > pw.txt
chmod 600 pw.txt
run "$CLI" --config pw.conf keystore create
expect_rc 0 "keystore create with password_file"
run "$CLI" --config pw.conf keystore create --auto-login
expect_rc 1 "--auto-login with a password source is refused"
run "$CLI" --config pw.conf keystore status
expect_in out.txt '^status: OPEN$' "password wallet opens with password_file"
expect_in out.txt '^auto-login: no$' "password wallet is not auto-login"
run "$CLI" --config pw.conf keystore list
expect_rc 0 "keystore list (password wallet)"
expect_in out.txt 'ACTIVE$' "list shows an ACTIVE key"
printf 'keystore = wallet\nwallet = pw.tdew\n' > nosrc.conf
run "$CLI" --config nosrc.conf keystore status
expect_in out.txt '^status: CLOSED$' "without a password source the wallet is CLOSED"
run "$CLI" --config nosrc.conf keystore list
expect_rc 3 "list without a password and no terminal fails (no key)"
expect_in err.txt 'password_file|password_env' "and says how to supply the password"

# ---------------------------------------------------------------------------
step "encrypt a plaintext database made by stock sqlite3"
CANARY='Card 4111-1111-1111-1111 belongs to Alice'
sqlite3 plain.db "CREATE TABLE t(id INTEGER PRIMARY KEY, note TEXT);
  WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i<500)
  INSERT INTO t SELECT i, '$CANARY #' || i FROM n;
  CREATE INDEX t_note ON t(note);"
SRC_SHA=$(sha plain.db)
run "$CLI" --config auto.conf encrypt plain.db enc.db
expect_rc 0 "encrypt plain.db enc.db"
[ "$(sha plain.db)" = "$SRC_SHA" ] && ok "SRC byte-identical after encrypt (sha256)" \
  || bad "SRC changed by encrypt"
if LC_ALL=C grep -a -q 'belongs to Alice' enc.db || strings enc.db | grep -q 'Alice'; then
  bad "plaintext canary found in enc.db"
else ok "no plaintext canary in enc.db (grep, strings)"; fi
if head -c 16 enc.db | grep -aq 'SQLite format 3'; then bad "enc.db starts with the SQLite header"
else ok "enc.db does not start with the plaintext SQLite header"; fi
run "${SHELL_ENV[@]}" "$CLI" --config auto.conf shell enc.db "SELECT count(*), max(id) FROM t;"
expect_in out.txt '^500\|500$' "rows present in the encrypted copy"
no_temp_files "after a successful encrypt"
ENC_SHA=$(sha enc.db)
run "$CLI" --config auto.conf encrypt plain.db enc.db
expect_rc 1 "encrypt refuses an existing DST"
expect_in err.txt 'exists' "the refusal says DST exists"
[ "$(sha enc.db)" = "$ENC_SHA" ] && ok "existing DST left untouched" || bad "existing DST modified"
run "$CLI" --config auto.conf encrypt missing.db enc2.db
expect_rc 1 "encrypt of a missing SRC fails"
[ -e enc2.db ] && bad "DST created although SRC is missing" || ok "no DST after the failure"
no_temp_files "after encrypt of a missing SRC"
run "$CLI" --config auto.conf encrypt enc.db enc3.db
expect_rc 1 "encrypt of an already encrypted SRC fails"
expect_in err.txt 'already encrypted' "and says it is already encrypted"
[ -e enc3.db ] && bad "DST created from an encrypted SRC" || ok "no DST after the failure"
no_temp_files "after encrypt of an encrypted SRC"
run "$CLI" --config auto.conf encrypt plain.db no/such/dir/x.db
expect_rc 1 "encrypt into a missing directory fails"
# A write failure in the middle of the copy: a file size limit (with
# SIGXFSZ ignored, writes past it fail with EFBIG).
sqlite3 big.db "CREATE TABLE b(x);
  WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i<5000)
  INSERT INTO b SELECT randomblob(200) FROM n;"
(trap '' XFSZ; ulimit -f 256; "$CLI" --config auto.conf encrypt big.db bigenc.db) \
  >out.txt 2>err.txt </dev/null
RC=$?
expect_rc 1 "encrypt failing mid-copy (file size limit)"
[ -e bigenc.db ] && bad "DST created by a failed copy" || ok "no DST after the failed copy"
no_temp_files "after a copy that failed mid-way"

step "encrypt a WAL-mode database"
sqlite3 wal.db "PRAGMA journal_mode=WAL; CREATE TABLE w(x); INSERT INTO w VALUES('$CANARY');" >/dev/null
run "$CLI" --config auto.conf encrypt wal.db walenc.db
expect_rc 0 "encrypt a WAL-mode SRC"
run "${SHELL_ENV[@]}" "$CLI" --config auto.conf shell walenc.db "SELECT x FROM w;"
expect_in out.txt 'belongs to Alice' "WAL-mode SRC rows present in the copy"

# ---------------------------------------------------------------------------
step "decrypt back and compare with the original"
run "$CLI" --config auto.conf decrypt enc.db dec.db
expect_rc 0 "decrypt enc.db dec.db"
if diff <(sqlite3 plain.db .dump) <(sqlite3 dec.db .dump) >dump.diff; then
  ok "sqlite3 .dump of original and decrypted copy are identical"
else bad "dumps differ"; head -20 dump.diff; fi
[ "$(stat -c %a dec.db)" = 600 ] && ok "plaintext copy has mode 0600" \
  || bad "plaintext copy has mode $(stat -c %a dec.db)"
run "$CLI" --config auto.conf decrypt plain.db dec2.db
expect_rc 4 "decrypt of a plaintext SRC fails (not an encrypted database)"
expect_in err.txt 'plaintext' "and says it is plaintext"
no_temp_files "after decrypt of a plaintext SRC"
run "$CLI" --config auto.conf decrypt enc.db dec.db
expect_rc 1 "decrypt refuses an existing DST"

# ---------------------------------------------------------------------------
step "status"
run "$CLI" --config auto.conf status enc.db
expect_rc 0 "status enc.db"
expect_in out.txt '^cipher: aes-256-gcm$' "status shows aes-256-gcm"
expect_in out.txt '^schema: main$' "status shows the main schema"
expect_in out.txt "^master_key: $KEYID$" "status shows the master key id"
grep -Eq 'NULL|^schema: temp$|^shipped_seq' out.txt && bad "compact status shows NULLs, temp or replication columns" \
  || ok "compact status: no NULL, no temp block, no replication columns"
expect_in out.txt '^page_map: off$' "status shows page_map (off: a rollback-journal database)"
[ "$(wc -l < out.txt)" -le 15 ] && ok "compact status: $(wc -l < out.txt) lines" || bad "compact status: $(wc -l < out.txt) lines"
run "$CLI" --config auto.conf status --all enc.db
expect_rc 0 "status --all"
expect_in out.txt '^shipped_seq: NULL$' "status --all shows every column, NULL ones too"
expect_in out.txt '^schema: temp$' "status --all shows the temp schema"
: > empty.db
run "$CLI" --config auto.conf status empty.db
expect_rc 4 "status of a 0-byte file fails"
expect_in err.txt 'empty' "and says it is empty"
run "$CLI" --config auto.conf status missing.db
expect_rc 1 "status of a missing database fails"
[ -e missing.db ] && bad "status created missing.db" || ok "status did not create a file"

# ---------------------------------------------------------------------------
step "verify, and tamper detection"
run "$CLI" --config auto.conf verify enc.db
expect_rc 0 "verify enc.db"
expect_in out.txt 'OK, [0-9]+ pages' "verify prints pages checked"
# enc.db is format 3 (the default): page N lies at 8192 + M*(1 + (N-1)/508)
# + (N-1)*P (docs/FORMAT.md "Format version 3"), M = 8192 at P = 4096.
run "$CLI" --config auto.conf status enc.db
expect_in out.txt '^format_version: 3$' "enc.db is format 3"
PAGE1=$((8192 + 8192)); PAGE2=$((PAGE1 + 4096))
cp enc.db tampered.db
# One bit in the middle of page 2.
python3 - "$PAGE2" <<'EOF'
import sys
at = int(sys.argv[1]) + 100
with open("tampered.db", "r+b") as f:
    f.seek(at)
    b = f.read(1)
    f.seek(at)
    f.write(bytes([b[0] ^ 0x01]))
EOF
run "$CLI" --config auto.conf verify tampered.db
expect_rc 4 "verify of a tampered file fails (damaged)"
expect_in err.txt 'page 2' "verify names page 2"
flip() {  # flip one bit of file $1 at offset $2
  python3 -c "
import sys
with open(sys.argv[1], 'r+b') as f:
    f.seek(int(sys.argv[2])); b = f.read(1); f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 1]))
" "$1" "$2"
}
cp enc.db tampered1.db
flip tampered1.db $((PAGE1 + 200))
run "$CLI" --config auto.conf verify tampered1.db
expect_rc 4 "verify with page 1 tampered fails (damaged)"
expect_in err.txt 'page 1' "and names page 1"

step "verify with a WAL"
# Snapshot the database and its WAL while a shell still has it open (the
# WAL is checkpointed away when the last connection closes).  A WAL-mode
# database is {DB, DB-wal, DB-tdemap} (docs/FORMAT.md, the page map): the
# header names the map, so the snapshot carries it when there is one.
printf '%s\n' "PRAGMA journal_mode=WAL;" "CREATE TABLE t(x);" \
  "INSERT INTO t VALUES(1),(2);" "INSERT INTO t VALUES(3);" \
  ".system cp wal1.db walsnap.db; cp wal1.db-wal walsnap.db-wal; if [ -e wal1.db-tdemap ]; then cp wal1.db-tdemap walsnap.db-tdemap; fi" \
  | "${SHELL_ENV[@]}" "$CLI" --config auto.conf shell wal1.db >/dev/null 2>err.txt
[ -s walsnap.db-wal ] && ok "WAL snapshot taken" || { bad "no WAL snapshot"; cat err.txt; }
cp walsnap.db waltamper.db
cp walsnap.db-wal waltamper.db-wal
[ ! -e walsnap.db-tdemap ] || cp walsnap.db-tdemap waltamper.db-tdemap
run "$CLI" --config auto.conf verify walsnap.db
expect_rc 0 "verify a database with a WAL"
expect_in out.txt 'OK, ([4-9]|[1-9][0-9]+) pages/frames' "pages and WAL frames are counted"
# Frame 2's page data: 32-byte WAL header, 24 + 4096 bytes per frame.
flip waltamper.db-wal $((32 + 4120 + 24 + 100))
run "$CLI" --config auto.conf verify waltamper.db
expect_rc 4 "verify with a tampered WAL frame fails (damaged)"
expect_in err.txt 'frame 2' "and names WAL frame 2"

# ---------------------------------------------------------------------------
step "wrong password"
run "$CLI" --config pw.conf encrypt plain.db pwenc.db
expect_rc 0 "encrypt with the password wallet"
WALLET_SHA=$(sha pw.tdew)
printf 'tde-test-pw-wrong-5Rv2' > pw.txt
run "$CLI" --config pw.conf verify pwenc.db
expect_rc 3 "verify with a wrong password_file fails (no key)"
expect_in err.txt '[Pp]assword' "the message mentions the password"
run "$CLI" --config pw.conf keystore list
expect_rc 3 "keystore list with a wrong password fails (no key)"
expect_in err.txt '[Pp]assword' "the message mentions the password"
run "${SHELL_ENV[@]}" "$CLI" --config pw.conf shell pwenc.db "SELECT 1;"
expect_rc 3 "shell with a wrong password fails (no key)"
[ "$(sha pw.tdew)" = "$WALLET_SHA" ] && ok "wallet file unchanged" || bad "wallet file changed"
printf 'correct horse battery staple' > pw.txt
run "$CLI" --config pw.conf verify pwenc.db
expect_rc 0 "verify with the right password again"
printf 'keystore = wallet\nwallet = pw.tdew\npassword_env = TDE_TEST_PW\n' > env.conf
run env TDE_TEST_PW='correct horse battery staple' "$CLI" --config env.conf verify pwenc.db
expect_rc 0 "password_env supplies the password"
run env -u TDE_TEST_PW "$CLI" --config env.conf verify pwenc.db
expect_rc 3 "password_env unset fails (no key)"
expect_in err.txt 'TDE_TEST_PW' "and names the variable"
run "${SHELL_ENV[@]}" "$CLI" --config nosrc.conf shell pwenc.db "SELECT 1;"
expect_rc 3 "shell refuses when no terminal can be asked for the password"
expect_in err.txt 'password_file' "and explains password_file/password_env"

# ---------------------------------------------------------------------------
step "validation before change, exit codes"
NKEYS=$("$CLI" --config auto.conf keystore list | grep -c ACTIVE)
run "$CLI" --config auto.conf rotate-master-key enc.db nosuch.db
expect_rc 1 "rotate-master-key with a missing file fails"
expect_in err.txt 'nothing changed' "and says nothing changed"
[ "$("$CLI" --config auto.conf keystore list | grep -c ACTIVE)" = "$NKEYS" ] \
  && ok "no new master key for a typo" || bad "rotate created a key although a file is missing"
: > leftover.db
run "$CLI" --config auto.conf rotate-master-key leftover.db
expect_rc 4 "rotate-master-key of a 0-byte leftover fails"
[ ! -s leftover.db ] && ok "the 0-byte file stays empty" || bad "the 0-byte file became a database"
[ "$("$CLI" --config auto.conf keystore list | grep -c ACTIVE)" = "$NKEYS" ] \
  && ok "still no new master key" || bad "rotate created a key for a 0-byte file"
run "$CLI" --config auto.conf rotate-master-key plain.db
expect_rc 4 "rotate-master-key of a plaintext database fails"
run "$CLI" --config auto.conf rekey leftover.db
expect_rc 4 "rekey of a 0-byte file fails"
[ ! -s leftover.db ] && ok "rekey left it empty" || bad "rekey turned it into a database"
run "$CLI" --config auto.conf migrate-keystore --to auto.conf enc.db nosuch.db
expect_rc 1 "migrate-keystore with a missing file fails, changing nothing"
printf 'keystore = wallet\nwallet = gone.tdew\n' > gone.conf
run "$CLI" --config gone.conf keystore status
expect_rc 3 "keystore status of a missing wallet exits 3"
expect_in out.txt '^status: NOT_AVAILABLE$' "and shows NOT_AVAILABLE"
run "$CLI" --help
expect_in out.txt '^  3  no key' "--help documents exit code 3"
expect_in out.txt '^  4  damaged' "--help documents exit code 4"

# ---------------------------------------------------------------------------
step "shell"
OUT=$(echo "SELECT count(*) FROM t;" | "${SHELL_ENV[@]}" "$CLI" --config auto.conf shell enc.db 2>err.txt)
[ "$OUT" = 500 ] && ok "SQL on stdin: count is 500" || { bad "SQL on stdin gave '$OUT'"; cat err.txt; }
run "${SHELL_ENV[@]}" "$CLI" --config auto.conf shell enc.db -cmd "SELECT 'via-cmd';" "SELECT count(*) FROM t;"
expect_in out.txt '^via-cmd$' "extra -cmd passed to sqlite3"
expect_in out.txt '^500$' "positional SQL passed to sqlite3"
ls | grep -q 'SELECT' && bad "a file named after the SQL was created" \
  || ok "no file named after the SQL argument"
run "${SHELL_ENV[@]}" "$CLI" --config auto.conf shell plain.db "SELECT 1;"
expect_rc 4 "shell refuses a plaintext database"
expect_in err.txt 'plaintext' "with a message about plaintext"

step "a bare or foreign DB-tdestandby does not make a primary read-only"
run "${SHELL_ENV[@]}" "$CLI" --config auto.conf shell sb.db "CREATE TABLE t(x); INSERT INTO t VALUES(1);"
expect_rc 0 "sb.db created"
: > sb.db-tdestandby
run "${SHELL_ENV[@]}" env SQLITE_TDE_LOG=stderr "$CLI" --config auto.conf shell sb.db "INSERT INTO t VALUES(2);"
expect_rc 0 "an empty sb.db-tdestandby: still writable"
expect_in err.txt 'ignoring .*sb.db-tdestandby' "with a warning naming the file"
printf 'sqlite-tde standby state 1\ndatabase_id=00000000000000000000000000000000\n' > sb.db-tdestandby
run "${SHELL_ENV[@]}" "$CLI" --config auto.conf shell sb.db "INSERT INTO t VALUES(3); SELECT count(*) FROM t;"
expect_rc 0 "a forged sb.db-tdestandby (no valid checksum, another id): still writable"
expect_in out.txt '^3$' "all three rows written"
rm -f sb.db-tdestandby

step "a FIFO where a configuration, wallet or password file should be is refused at once"
# Opening a FIFO for reading blocks until a writer comes: each must fail
# within the timeout with "not a regular file", not hang.
mkfifo fifo.conf fifo.wallet fifo.pw
printf 'keystore = wallet\nwallet = fifo.wallet\n' > fw.conf; chmod 600 fw.conf
printf 'keystore = wallet\nwallet = auto.wallet\npassword_file = fifo.pw\n' > fp.conf; chmod 600 fp.conf
for c in fifo.conf fw.conf fp.conf; do
  run timeout 20 "$CLI" --config "$c" keystore status
  if [ "$RC" -eq 124 ]; then
    bad "$c: keystore status hung on a FIFO"
  else
    expect_in err.txt 'not a regular file' "$c: refused (rc $RC) naming a non-regular file"
  fi
done

# ---------------------------------------------------------------------------
echo
echo "test_cli: $NPASS passed, $NFAIL failed"
if [ "$NFAIL" -ne 0 ]; then
  echo "test_cli: scratch folder kept: $WORK"
  exit 1
fi
cd / && { [ -n "${TDE_KEEP_SCRATCH:-}" ] || rm -rf "$WORK"; }
exit 0
