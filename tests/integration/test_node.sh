#!/usr/bin/env bash
# The Node section that loads tde.so by path, run verbatim (issue 12): the
# ```js block under "## From Node" in docs/HOSTS.md (moved there from the
# README, whose Quick start uses the npm package) is taken as it stands, with only its
# placeholder paths replaced (/usr/local/lib/sqlite-tde/tde, /etc/sqlite-tde/tde.conf)
# and require('better-sqlite3') resolved to the pinned package in
# TDE_NPM_DIR (NODE_PATH).  Lines appended after it use the `db` it opens:
# a table written and read back, tde_status says encrypted.  Then the file
# must hold no plaintext and read back through `sqlite-tde shell`.
#
# Environment (set by ctest): TDE_BUILD, TDE_SRC, TDE_TEST_TMP,
# TDE_NPM_DIR.  A missing tool or a README without the block is a failure.
set -uo pipefail

TDE_BUILD=${TDE_BUILD:?set TDE_BUILD to the build folder}
TDE_SRC=${TDE_SRC:?set TDE_SRC to the source folder}
TDE_TEST_TMP=${TDE_TEST_TMP:-/tmp}
TDE_NPM_DIR=${TDE_NPM_DIR:-$TDE_BUILD/npm}
CLI="$TDE_BUILD/sqlite-tde"
EXT="$TDE_BUILD/tde"
NODE=$(command -v node || true)

for f in "$CLI" "$EXT.so" "$NODE" "$TDE_NPM_DIR/node/node_modules/better-sqlite3/package.json" "$TDE_SRC/docs/HOSTS.md"; do
  if [ -z "$f" ] || [ ! -e "$f" ]; then echo "FAIL: missing: ${f:-node not on PATH}"; exit 1; fi
done

mkdir -p "$TDE_TEST_TMP"
WORK=$(mktemp -d "$TDE_TEST_TMP/test_node.XXXXXX")
chmod 700 "$WORK"
cd "$WORK" || exit 1

cat > tde.conf <<EOF
keystore = wallet
wallet = $WORK/w.tdew
wallet_kdf_t = 1
wallet_kdf_m_kib = 8192
EOF
chmod 600 tde.conf
"$CLI" --config tde.conf keystore create --auto-login >/dev/null || { echo "FAIL: keystore create"; exit 1; }

# The block writes into the Quick start's notes table.
"$CLI" --config tde.conf shell app.db "CREATE TABLE notes(body TEXT);" >/dev/null \
  || { echo "FAIL: creating app.db's notes table"; exit 1; }

# The block: from the first ```js line after the Node heading to its ```.
awk '/^## From Node/{f=1} f&&/^```js$/{b=1; next} b&&/^```$/{exit} b{print}' "$TDE_SRC/docs/HOSTS.md" > readme.js
if [ ! -s readme.js ]; then echo "FAIL: no \`\`\`js block under '## From Node' in docs/HOSTS.md"; exit 1; fi
echo "README's Node section:"; sed 's/^/  | /' readme.js
grep -q "/usr/local/lib/sqlite-tde/tde" readme.js && grep -q "/etc/sqlite-tde/tde.conf" readme.js \
  || { echo "FAIL: the README block no longer has the placeholders this test replaces"; exit 1; }
{
  sed -e "s#/usr/local/lib/sqlite-tde/tde#$EXT#g" -e "s#/etc/sqlite-tde/tde.conf#$WORK/tde.conf#g" readme.js
  cat <<'EOF'
db.exec("CREATE TABLE t(x); INSERT INTO t VALUES('node-readme-secret')");
const got = db.prepare('SELECT x FROM t').pluck().get();
const enc = db.prepare("SELECT encrypted FROM tde_status WHERE schema='main'").pluck().get();
db.close();
console.log('row: ' + got + ', encrypted: ' + enc);
EOF
} > run.js

OUT=$(NODE_PATH="$TDE_NPM_DIR/node/node_modules" "$NODE" run.js 2>&1)
echo "$OUT"
NFAIL=0
grep -q "row: node-readme-secret, encrypted: 1" <<<"$OUT" && echo "  ok    the README's Node code opens an encrypted database" \
  || { echo "  FAIL  the README's Node code"; NFAIL=$((NFAIL+1)); }
if [ ! -s app.db ] || head -c 16 app.db | grep -q "SQLite format 3" || grep -q "node-readme-secret" app.db; then
  echo "  FAIL  app.db is missing or holds plaintext"; NFAIL=$((NFAIL+1))
else
  echo "  ok    app.db holds no plaintext"
fi
OUT=$("$CLI" --config tde.conf shell app.db "SELECT x FROM t;" 2>&1)
grep -q "node-readme-secret" <<<"$OUT" && echo "  ok    app.db reads back through sqlite-tde shell" \
  || { echo "  FAIL  sqlite-tde shell: $OUT"; NFAIL=$((NFAIL+1)); }
[ "$NFAIL" -eq 0 ]
