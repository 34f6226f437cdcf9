#!/usr/bin/env bash
# Error reasons in every host, and no plaintext copies by accident (issue
# 12, items 8 and 9).  In the stock sqlite3 shell, Debian's Python and Node
# (better-sqlite3, its own SQLite 3.53), each loading tde.so:
#   - a missing wallet and a tampered page fail with SQLite's generic text,
#     and SELECT tde_last_error() then names the file, the page and the
#     cause;
#   - a failed open of a new database leaves no file behind;
#   - SQLITE_TDE_LOG=stderr sends the log to stderr;
# and in `sqlite-tde shell`: .backup FILE, .save FILE and VACUUM INTO 'name'
# write encrypted copies (tde is the shell's default VFS there).
#
# Environment (set by ctest): TDE_BUILD, TDE_TEST_TMP, TDE_NPM_DIR (npm
# packages, default TDE_BUILD/npm).  A missing tool is a failure.
set -uo pipefail

TDE_BUILD=${TDE_BUILD:?set TDE_BUILD to the build folder}
TDE_TEST_TMP=${TDE_TEST_TMP:-/tmp}
TDE_NPM_DIR=${TDE_NPM_DIR:-$TDE_BUILD/npm}
CLI="$TDE_BUILD/sqlite-tde"
EXT="$TDE_BUILD/tde"
SQLITE3=$(command -v sqlite3 || true)
NODE=$(command -v node || true)
BSQL="$TDE_NPM_DIR/node/node_modules/better-sqlite3"

NFAIL=0
NPASS=0
ok()   { NPASS=$((NPASS+1)); echo "  ok    $*"; }
bad()  { NFAIL=$((NFAIL+1)); echo "  FAIL  $*"; }
step() { echo; echo "== $*"; }
has()  { if grep -q -- "$2" <<<"$1"; then ok "$3"; else bad "$3 (got: $1)"; fi; }

for f in "$SQLITE3" "$CLI" "$EXT.so" /usr/bin/python3 "$NODE" "$BSQL/package.json"; do
  if [ -z "$f" ] || [ ! -e "$f" ]; then
    echo "FAIL: missing tool: ${f:-sqlite3 shell or node not on PATH}"; exit 1
  fi
done

mkdir -p "$TDE_TEST_TMP"
WORK=$(mktemp -d "$TDE_TEST_TMP/test_reasons.XXXXXX")
chmod 700 "$WORK"
cd "$WORK" || exit 1
echo "test_reasons: working in $WORK"

cat > tde.conf <<EOF
keystore = wallet
wallet = $WORK/w.tdew
wallet_kdf_t = 1
wallet_kdf_m_kib = 8192
EOF
chmod 600 tde.conf
"$CLI" --config tde.conf keystore create --auto-login >/dev/null || { echo "FAIL: keystore create"; exit 1; }
MISSING="$WORK/no-such-dir/tde.conf"

# A database with a page to tamper with: page 2 (the table's root) at
# 8192 + 8192 + 4096 in the file (format 3, the default: page N at
# 8192 + M*(1 + (N-1)/508) + (N-1)*P, M = 8192); flip a byte in its ciphertext.
"$CLI" --config tde.conf shell tampered.db "CREATE TABLE t(x); INSERT INTO t VALUES('reason-test');" >/dev/null
# dd is a tool here, not a host under test: no sanitizer runtime for it
# (the ASan build preloads one into every process, and dd trips it).
OFS=$((8192 + 8192 + 4096 + 100))
BEFORE=$(od -An -tx1 -j $OFS -N1 tampered.db)
if [ "$BEFORE" = " 5a" ]; then NEW='\xa5'; else NEW='\x5a'; fi
printf "$NEW" | env -u LD_PRELOAD dd of=tampered.db bs=1 seek=$OFS conv=notrunc status=none
AFTER=$(od -An -tx1 -j $OFS -N1 tampered.db)
[ "$BEFORE" != "$AFTER" ] || { echo "FAIL: could not tamper with tampered.db"; exit 1; }

step "sqlite3 shell"
OUT=$("$SQLITE3" :memory: 2>&1 <<EOF
.load $EXT
ATTACH 'file:$WORK/new-shell.db?vfs=tde&tde_config=$MISSING' AS x;
SELECT 'reason: ' || tde_last_error();
EOF
)
has "$OUT" "unable to open database.*(23)" "shell: a missing configuration fails with SQLite's text (SQLITE_AUTH, 23)"
has "$OUT" "reason: .*new-shell.db.*tde.conf" "shell: tde_last_error() names the file and the missing configuration"
if [ -e new-shell.db ]; then bad "shell: the failed open left new-shell.db behind"; else ok "shell: no file left by the failed open"; fi
OUT=$("$SQLITE3" :memory: 2>&1 <<EOF
.load $EXT
ATTACH 'file:$WORK/tampered.db?vfs=tde&tde_config=$WORK/tde.conf' AS d;
SELECT * FROM d.t;
SELECT 'reason: ' || tde_last_error();
EOF
)
has "$OUT" "disk I/O error" "shell: a tampered page fails with SQLite's text"
has "$OUT" "reason: .*tampered.db.*page 2 failed authentication" "shell: tde_last_error() names file, page and cause"
ERR=$(SQLITE_TDE_LOG=stderr "$SQLITE3" :memory: 2>&1 >/dev/null <<EOF
.load $EXT
ATTACH 'file:$WORK/tampered.db?vfs=tde&tde_config=$WORK/tde.conf' AS d;
SELECT * FROM d.t;
EOF
)
has "$ERR" "sqlite-tde: error: .*page 2 failed authentication" "shell: SQLITE_TDE_LOG=stderr logs the reason to stderr"

step "Python (Debian's sqlite3 module)"
OUT=$(/usr/bin/python3 - "$EXT" "$WORK" "$MISSING" 2>&1 <<'EOF'
import sqlite3, sys, os
ext, work, missing = sys.argv[1:4]
boot = sqlite3.connect(":memory:")
boot.enable_load_extension(True)
boot.load_extension(ext)
def reason():
    return boot.execute("SELECT tde_last_error()").fetchone()[0]
try:
    db = sqlite3.connect(f"file:{work}/new-py.db?vfs=tde&tde_config={missing}", uri=True)
    db.execute("CREATE TABLE t(x)")
    print("opened?!")
except sqlite3.Error as e:
    print("error:", e)
    print("reason:", reason())
print("left:", os.path.exists(f"{work}/new-py.db"))
try:
    db = sqlite3.connect(f"file:{work}/tampered.db?vfs=tde&tde_config={work}/tde.conf", uri=True)
    print(db.execute("SELECT * FROM t").fetchall())
except sqlite3.Error as e:
    print("error:", e)
    print("reason:", reason())
EOF
)
has "$OUT" "error: authorization denied" "python: a missing configuration fails with SQLite's text"
has "$OUT" "reason: .*new-py.db.*tde.conf" "python: tde_last_error() names the file and the missing configuration"
has "$OUT" "left: False" "python: no file left by the failed open"
has "$OUT" "error: disk I/O error" "python: a tampered page fails with SQLite's text"
has "$OUT" "reason: .*tampered.db.*page 2 failed authentication" "python: tde_last_error() names file, page and cause"

step "Node (better-sqlite3, SQLite $(cd "$BSQL" && "$NODE" -e "console.log(new (require('.'))(':memory:').prepare('select sqlite_version()').pluck().get())" 2>&1))"
OUT=$(NODE_PATH="$TDE_NPM_DIR/node/node_modules" "$NODE" - "$EXT" "$WORK" "$MISSING" 2>&1 <<'EOF'
const [ext, work, missing] = process.argv.slice(2);
process.env.SQLITE_TDE_DEFAULT_VFS = '1';
process.env.SQLITE_TDE_CONFIG = missing;
const fs = require('fs');
const Database = require('better-sqlite3');
const boot = new Database(':memory:');
boot.loadExtension(ext);
const reason = () => boot.prepare('SELECT tde_last_error()').pluck().get();
try {
  const db = new Database(work + '/new-node.db');
  db.exec('CREATE TABLE t(x)');
  console.log('opened?!');
} catch (e) {
  console.log('error: ' + e.message);
  console.log('reason: ' + reason());
}
console.log('left: ' + fs.existsSync(work + '/new-node.db'));
process.env.SQLITE_TDE_CONFIG = work + '/tde.conf';
try {
  const db = new Database(work + '/tampered.db');
  console.log(db.prepare('SELECT * FROM t').all());
} catch (e) {
  console.log('error: ' + e.message);
  console.log('reason: ' + reason());
}
EOF
)
has "$OUT" "error: authorization denied" "node: a missing configuration fails with SQLite's text"
has "$OUT" "reason: .*new-node.db.*tde.conf" "node: tde_last_error() names the file and the missing configuration"
has "$OUT" "left: false" "node: no file left by the failed open"
has "$OUT" "error: disk I/O error" "node: a tampered page fails with SQLite's text"
has "$OUT" "reason: .*tampered.db.*page 2 failed authentication" "node: tde_last_error() names file, page and cause"

step "sqlite-tde shell: copies are encrypted"
"$CLI" --config tde.conf shell s.db >/dev/null 2>&1 <<EOF
CREATE TABLE t(x); INSERT INTO t VALUES('copy-secret-text');
.backup s-backup.db
.save s-save.db
VACUUM INTO 's-vacuum.db';
EOF
for f in s.db s-backup.db s-save.db s-vacuum.db; do
  if [ ! -s "$f" ]; then bad "$f was not written"; continue; fi
  if head -c 16 "$f" | grep -q "SQLite format 3" || grep -q "copy-secret-text" "$f"; then
    bad "$f holds plaintext"
  else
    ok "$f is encrypted"
  fi
done
OUT=$("$CLI" --config tde.conf shell s-backup.db "SELECT x FROM t;" 2>&1)
has "$OUT" "copy-secret-text" "the .backup copy opens through tde and holds the row"

echo
echo "test_reasons: $NPASS passed, $NFAIL failed"
[ "$NFAIL" -eq 0 ]
