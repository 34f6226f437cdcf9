#!/usr/bin/env bash
# Issue 24's "Done means", with real tools (task r8-flip): a database is one
# file again.  A WAL-mode database made with the stock sqlite3 shell through
# tde under a default configuration (no format_version: format 3), some
# writes, a checkpoint, closed; then:
#   - no -wal is left after the clean close, no DB-tdemap, no other side file;
#   - a `cp` of the database file alone opens in the sqlite3 shell and in
#     Node's better-sqlite3 (SQLite 3.53, TDE_NPM_DIR), and `sqlite-tde
#     verify` passes on it;
#   - one page of that copy replaced by the same page from an earlier `cp`
#     (an authentic, older version of it; offsets from docs/FORMAT.md
#     "Format version 3": page N at 8192 + M*(1 + (N-1)/508) + (N-1)*P,
#     M = max(8192, P)) is refused on read with format 3's message "does
#     not match the page map the database file itself holds", and by verify.
#
# Environment (set by ctest): TDE_BUILD, TDE_SRC, TDE_TEST_TMP, TDE_NPM_DIR.
# A missing tool is a failure.
set -uo pipefail

TDE_BUILD=${TDE_BUILD:?set TDE_BUILD to the build folder}
TDE_TEST_TMP=${TDE_TEST_TMP:-/tmp}
TDE_NPM_DIR=${TDE_NPM_DIR:-$TDE_BUILD/npm}
CLI="$TDE_BUILD/sqlite-tde"
EXT="$TDE_BUILD/tde"
SQLITE3=$(command -v sqlite3 || true)
NODE=$(command -v node || true)

for f in "$CLI" "$EXT.so" "$SQLITE3" "$NODE" "$TDE_NPM_DIR/node/node_modules/better-sqlite3/package.json"; do
  if [ -z "$f" ] || [ ! -e "$f" ]; then echo "FAIL: missing: ${f:-sqlite3 or node not on PATH}"; exit 1; fi
done

mkdir -p "$TDE_TEST_TMP"
WORK=$(mktemp -d "$TDE_TEST_TMP/test_r8_cp.XXXXXX")
chmod 700 "$WORK"
cd "$WORK" || exit 1
trap 'cd /; [ -z "${TDE_KEEP_SCRATCH:-}" ] && rm -rf "$WORK"' EXIT

# The default configuration: no format_version line.
cat > tde.conf <<EOF
keystore = wallet
wallet = $WORK/w.tdew
wallet_kdf_t = 1
wallet_kdf_m_kib = 8192
EOF
chmod 600 tde.conf
"$CLI" --config tde.conf keystore create --auto-login >/dev/null || { echo "FAIL: keystore create"; exit 1; }

NFAIL=0
ok(){ echo "  ok    $1"; }
bad(){ echo "  FAIL  $1"; NFAIL=$((NFAIL+1)); }
check(){ if eval "$1"; then ok "$2"; else bad "$2"; fi; }

# sqlite3 shell through tde on database $1, SQL on stdin after the .open.
shell(){
  { printf '.load %s\n.open %s\n' "$EXT" "'file:$1?vfs=tde&tde_config=$WORK/tde.conf'"; cat; } \
    | "$SQLITE3" -batch 2>&1
}

# 1200 rows of 1500 random bytes: about 600 pages of 4096 bytes, so that
# pages lie in the first and the second map region (508 pages each).
OUT=$(shell app.db <<'EOF'
PRAGMA journal_mode=WAL;
CREATE TABLE t(id INTEGER PRIMARY KEY, b BLOB);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<1200)
  INSERT INTO t SELECT i, randomblob(1500) FROM c;
UPDATE t SET b = randomblob(1500) WHERE id % 97 = 0;
PRAGMA wal_checkpoint(TRUNCATE);
SELECT 'format ' || format_version FROM tde_status WHERE schema='main';
SELECT 'pages ' || page_count FROM pragma_page_count;
EOF
)
echo "$OUT" | sed 's/^/  | /'
check 'grep -q "^format 3$" <<<"$OUT"' "a new database under the default configuration is format 3"
NPAGE=$(sed -n 's/^pages //p' <<<"$OUT")
check '[ -n "$NPAGE" ] && [ "$NPAGE" -gt 508 ]' "the database spans two map regions ($NPAGE pages)"
cp app.db early.db      # the earlier copy: its pages are older versions of app.db's

# More writes, in a later WAL generation, a checkpoint, closed.
OUT=$(shell app.db <<'EOF'
UPDATE t SET b = randomblob(1500) WHERE id IN (3, 600, 1150);
INSERT INTO t VALUES(1201, randomblob(1500));
PRAGMA wal_checkpoint(TRUNCATE);
SELECT 'rows ' || count(*) FROM t;
EOF
)
check 'grep -q "^rows 1201$" <<<"$OUT"' "the writes committed (1201 rows)"
check '[ ! -e app.db-wal ]' "no app.db-wal after the clean close"
check '[ ! -e app.db-tdemap ]' "no app.db-tdemap (the page map lies in the database file)"
SIDE=$(ls -A | grep '^app\.db.' || true)
check '[ -z "$SIDE" ]' "no other side file beside app.db${SIDE:+ (found: $SIDE)}"

# The copy: the database file alone.
cp app.db copy.db
OUT=$(shell copy.db <<'EOF'
SELECT 'rows ' || count(*) || ' ' || sum(length(b)) FROM t;
PRAGMA integrity_check;
EOF
)
check 'grep -q "^rows 1201 1801500$" <<<"$OUT" && grep -q "^ok$" <<<"$OUT"' "the copy opens and reads in the sqlite3 shell ($("$SQLITE3" --version | cut -d" " -f1))"
cat > read.js <<EOF
process.env.SQLITE_TDE_DEFAULT_VFS = '1';
process.env.SQLITE_TDE_CONFIG = '$WORK/tde.conf';
const Database = require('better-sqlite3');
new Database(':memory:').loadExtension('$EXT');
const db = new Database('$WORK/copy.db');
const r = db.prepare('SELECT count(*) AS n, sum(length(b)) AS s FROM t').get();
const v = db.prepare('SELECT sqlite_version() AS v').get().v;
const f = db.prepare("SELECT format_version AS f FROM tde_status WHERE schema='main'").get().f;
db.close();
console.log('node rows ' + r.n + ' ' + r.s + ' format ' + f + ' sqlite ' + v);
EOF
OUT=$(NODE_PATH="$TDE_NPM_DIR/node/node_modules" "$NODE" read.js 2>&1)
echo "  | $OUT"
check 'grep -q "^node rows 1201 1801500 format 3 sqlite 3\.5" <<<"$OUT"' "the copy opens and reads in Node's better-sqlite3"
OUT=$("$CLI" --config tde.conf verify copy.db 2>&1); RC=$?
check '[ $RC -eq 0 ] && grep -q "copy.db: OK" <<<"$OUT"' "sqlite-tde verify passes on the copy ($OUT)"
check '[ ! -e copy.db-tdemap ]' "no copy.db-tdemap made by opening the copy"

# One page of the copy rolled back to its version in the earlier copy: the
# highest-numbered page whose stored bytes differ between the two (a page
# the later writes changed; every page is re-sealed with a fresh nonce).
P=4096; M=8192
off(){ echo $(( 8192 + M * (1 + ($1 - 1) / 508) + ($1 - 1) * P )); }
N=0
for ((n=NPAGE; n>1; n--)); do
  o=$(off $n)
  if ! cmp -s <(tail -c +$((o + 1)) copy.db | head -c $P) <(tail -c +$((o + 1)) early.db | head -c $P); then N=$n; break; fi
done
check '[ "$N" -gt 1 ]' "a page the later writes changed: page $N at offset $(off $N)"
o=$(off $N)
# Both copies hold an authentic page N there (same key, same database): the
# old one is a rollback, not damage.
cp copy.db rolled.db
dd if=early.db of=rolled.db bs=$P skip=$((o / P)) seek=$((o / P)) count=1 conv=notrunc status=none
check '! cmp -s rolled.db copy.db' "page $N of the copy replaced by the earlier copy's"
OUT=$(shell rolled.db <<'EOF'
SELECT 'rows ' || count(*) || ' ' || sum(length(b)) FROM t;
SELECT 'reason: ' || tde_last_error();
EOF
)
echo "$OUT" | sed 's/^/  | /'
check '! grep -q "^rows " <<<"$OUT"' "the rolled-back page is never served"
check 'grep -q "reason: .*page $N does not match the page map the database file itself holds" <<<"$OUT"' \
  "refused with format 3's message, naming page $N"
OUT=$("$CLI" --config tde.conf verify rolled.db 2>&1); RC=$?
check '[ $RC -ne 0 ]' "sqlite-tde verify refuses the rolled-back copy (exit $RC)"
check 'cmp -s rolled.db <(cat copy.db | head -c $o; tail -c +$((o + 1)) early.db | head -c $P; tail -c +$((o + P + 1)) copy.db)' \
  "the refusals changed nothing in the file"

echo "test_r8_cp: $NFAIL failure(s)"
[ "$NFAIL" -eq 0 ]
