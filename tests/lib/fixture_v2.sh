# Sourced by the tests of the format-version-2 fixtures written by main at
# 08272f4 (tests/fixtures/v2-08272f4): a scratch folder named after the
# test ($1) holding a copy of the fixtures and their wallet, the counters
# and check helpers, CFG and q (a query through the CLI's shell).
# Environment (set by ctest): TDE_BUILD, TDE_SRC, TDE_TEST_TMP.
TDE_BUILD=${TDE_BUILD:?set TDE_BUILD to the build folder}
TDE_SRC=${TDE_SRC:?set TDE_SRC to the repository root}
TDE_TEST_TMP=${TDE_TEST_TMP:-/tmp}
CLI="$TDE_BUILD/sqlite-tde"
FIX="$TDE_SRC/tests/fixtures/v2-08272f4"
mkdir -p "$TDE_TEST_TMP"
WORK=$(mktemp -d "$TDE_TEST_TMP/$1.XXXXXX")
cd "$WORK" || exit 1
echo "$1: working in $WORK"

NFAIL=0
NPASS=0
ok()  { NPASS=$((NPASS+1)); echo "  ok    $*"; }
bad() { NFAIL=$((NFAIL+1)); echo "  FAIL  $*"; }
check() { if eval "$1"; then ok "$2"; else bad "$2"; fi; }

for f in fix2.db fixwal2.db fixwal2.db-tdemap tde.conf w.tdew; do
  cp "$FIX/$f" . || { echo "FAIL: missing fixture $f"; exit 1; }
done
chmod 600 ./*
CFG="$WORK/tde.conf"
q() { "$CLI" --config "$CFG" shell "$1" "$2" 2>&1; }
