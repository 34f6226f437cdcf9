#!/usr/bin/env bash
# sqlite-tde demo: encryption end to end, for a newcomer to read.
#
#   scripts/demo.sh [BUILD_DIR]      (make demo runs: scripts/demo.sh build)
#
# Works in demo/ under the repository root (deleted and recreated each run;
# .gitignore ignores it).  Uses build/sqlite-tde, build/tde.so and the stock
# sqlite3 shell.  Fails if the secret text is ever found in a file on disk.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
DEMO=demo
SECRET='Card 4111-1111-1111-1111 belongs to Alice'
URI="file:$DEMO/app.db?vfs=tde&tde_config=$DEMO/tde.conf"

BOLD='' PLAIN=''
if [ -t 1 ]; then BOLD=$'\033[1m' PLAIN=$'\033[0m'; fi
NSTEP=0
step() {
  NSTEP=$((NSTEP+1))
  printf '\n%s== Step %d: %s%s\n' "$BOLD" "$NSTEP" "$1" "$PLAIN"
}
# Print a command, then run it.
show() {
  printf '$ %s\n' "$*"
  "$@"
}

# The stock sqlite3 shell with the extension loaded and the database opened
# through the tde VFS; SQL comes on stdin.
tde_sqlite3() {
  sqlite3 -bail -cmd ".load $EXT" -cmd ".open '$URI'" "$@"
}

# Look for the secret in every file of the demo folder with grep and
# strings; print the result per file; exit 1 if it is anywhere.
check_no_plaintext() {
  local f n_grep n_strings found=0
  echo "Searching every file in $DEMO/ for \"belongs to Alice\":"
  for f in "$DEMO"/*; do
    n_grep=$(LC_ALL=C grep -a -c 'belongs to Alice' "$f" || true)
    n_strings=$(strings "$f" | grep -c 'Alice' || true)
    printf '  %-22s %8d bytes   grep -c: %s   strings|grep -c: %s\n' \
      "$f" "$(stat -c %s "$f")" "$n_grep" "$n_strings"
    if [ "$n_grep" != 0 ] || [ "$n_strings" != 0 ]; then found=1; fi
  done
  if [ "$found" = 1 ]; then
    echo "  RESULT: PLAINTEXT FOUND ON DISK -- encryption failed"
    return 1
  fi
  echo "  RESULT: no trace of the secret in any file"
}

# Internal: the check alone, run by the sqlite3 shell's .system in step 3.
if [ "${1:-}" = --check-plaintext ]; then
  check_no_plaintext
  exit
fi

BUILD=$(cd "${1:-build}" && pwd)
CLI="$BUILD/sqlite-tde"
EXT="$BUILD/tde"                       # sqlite3's .load adds the .so
for f in "$CLI" "$EXT.so"; do
  [ -e "$f" ] || { echo "demo: $f not found; build first (make build)" >&2; exit 1; }
done
command -v sqlite3 >/dev/null || { echo "demo: the sqlite3 shell is not installed" >&2; exit 1; }

# ---------------------------------------------------------------------------
step "Fresh scratch folder $DEMO/"
rm -rf "$DEMO"
mkdir "$DEMO"
echo "(re)created $ROOT/$DEMO"

step "A configuration and an auto-login wallet holding the master key"
cat > "$DEMO/tde.conf" <<EOF
# Which keystore holds the master keys.  Relative paths are relative to
# this file's folder.
keystore = wallet
wallet = wallet.tdew
EOF
echo "$DEMO/tde.conf:"
sed 's/^/    /' "$DEMO/tde.conf"
show "$CLI" --config "$DEMO/tde.conf" keystore create --auto-login
show "$CLI" --config "$DEMO/tde.conf" keystore status

step "Create an encrypted database with the stock sqlite3 shell (WAL mode)"
echo "\$ sqlite3 -cmd \".load $EXT\" -cmd \".open '$URI'\" <<SQL"
SQL="PRAGMA journal_mode=WAL;
CREATE TABLE cards(id INTEGER PRIMARY KEY, note TEXT);
INSERT INTO cards(note) VALUES ('$SECRET'),
  ('Card 5500-0000-0000-0004 belongs to Bob'),
  ('Card 3400-0000-0000-009 belongs to Carol');"
echo "$SQL" | sed 's/^/    /'
echo "    .print While the shell still has the database open (rows in the WAL):"
echo "    .system ls -l $DEMO"
echo "    .system bash scripts/demo.sh --check-plaintext"
echo "SQL"
# Before the shell exits (and checkpoints), look at the files from inside
# it with .system: the new rows are in the WAL file at that moment.
OUT=$( { echo "$SQL"
         echo ".print"
         echo ".print While the shell still has the database open (rows in the WAL):"
         echo ".system ls -l $DEMO"
         echo ".system bash scripts/demo.sh --check-plaintext"; } | tde_sqlite3 -batch | grep -v '^wal$' )
echo "$OUT"
grep -q 'RESULT: no trace' <<<"$OUT" || { echo "demo: plaintext check failed" >&2; exit 1; }

step "After the shell exited: is the secret anywhere on disk?"
ls -l "$DEMO"
check_no_plaintext

step "Read the rows back through the extension"
echo "\$ sqlite3 -cmd \".load $EXT\" -cmd \".open '$URI'\" <<< 'SELECT * FROM cards;'"
echo ".mode box
SELECT * FROM cards;" | tde_sqlite3

step "Encryption status as SQL sees it: SELECT * FROM tde_status"
echo ".mode line
SELECT * FROM tde_status;" | tde_sqlite3

step "The same through the command-line tool"
show "$CLI" --config "$DEMO/tde.conf" status "$DEMO/app.db"
show "$CLI" --config "$DEMO/tde.conf" verify "$DEMO/app.db"

step "The stock sqlite3 WITHOUT the extension cannot read the file"
echo "\$ sqlite3 -readonly $DEMO/app.db 'SELECT * FROM cards;'"
set +e
OUT=$(sqlite3 -readonly "$DEMO/app.db" 'SELECT * FROM cards;' 2>&1)
RC=$?
set -e
echo "$OUT" | sed 's/^/    /'
echo "    (exit status $RC)"
if [ "$RC" = 0 ] || ! grep -q 'file is not a database' <<<"$OUT"; then
  echo "demo: expected 'file is not a database' from plain sqlite3" >&2
  exit 1
fi

step "What encryption costs: a very short benchmark (make bench runs the full one)"
show "$CLI" bench --quick --repeats 1 --seconds 0.3 --conditions plain,wallet \
  --workloads insert,warm-scan,bounce --out "$DEMO/bench"
echo "Headline (median over runs; ratio = wallet / plain with a 95% bootstrap interval):"
sed -n '/^## Headline/,/^### Per condition/p' "$DEMO/bench/report.md" | grep '^|'
echo "(full report: $DEMO/bench/report.html; docs/PERFORMANCE.md explains the method)"

printf '\n%sDemo complete:%s the data is readable only through sqlite-tde with the key.\n' "$BOLD" "$PLAIN"
