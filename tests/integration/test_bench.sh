#!/usr/bin/env bash
# Integration test of the benchmark kit: `sqlite-tde bench --quick` writes
# report.md, report.html and results.json, the JSON matches
# bench/results.schema.json, every run succeeded (each driver run verifies
# its own checksum), the reports hold their sections and the HTML loads
# nothing from the network.
#
# Environment (set by ctest): TDE_BUILD, TDE_SRC, TDE_TEST_TMP.
set -uo pipefail

TDE_BUILD=${TDE_BUILD:?set TDE_BUILD to the build folder}
TDE_SRC=${TDE_SRC:?set TDE_SRC to the repository root}
TDE_TEST_TMP=${TDE_TEST_TMP:-/tmp}
mkdir -p "$TDE_TEST_TMP"
WORK=$(mktemp -d "$TDE_TEST_TMP/test_bench.XXXXXX")
echo "test_bench: working in $WORK"

NFAIL=0
ok()  { echo "  ok    $*"; }
bad() { NFAIL=$((NFAIL+1)); echo "  FAIL  $*"; }

OUT="$WORK/out"
"$TDE_BUILD/sqlite-tde" bench --quick --repeats 2 --out "$OUT" </dev/null >"$WORK/stdout.txt" 2>"$WORK/stderr.txt"
RC=$?
if [ "$RC" = 0 ]; then ok "sqlite-tde bench --quick exits 0"; else
  bad "sqlite-tde bench --quick exited $RC"; tail -20 "$WORK/stderr.txt"; tail -20 "$WORK/stdout.txt"; fi
grep -q 'seed 20261130' "$WORK/stdout.txt" && ok "prints its seed" || bad "seed not printed"

for f in report.md report.html results.json; do
  if [ -s "$OUT/$f" ]; then ok "$f written"; else bad "$f missing or empty"; fi
done

if /usr/bin/python3 "$TDE_SRC/bench/check_results.py" "$OUT/results.json" "$TDE_SRC/bench/results.schema.json"; then
  ok "results.json matches bench/results.schema.json"
else
  bad "results.json does not match the schema"
fi

# Content: every live condition ran every workload, nothing failed, the
# deterministic checksums agree, plain and the auto-login wallet are there.
/usr/bin/python3 - "$OUT/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
errs = []
live = [c["name"] for c in r["conditions"] if not c["skipped"]]
# scripts/deps.sh installs SoftHSM, PyKMIP and libsqlcipher: every condition
# must run (a missing package fails here, loudly).
for need in ("plain", "wallet", "wallet-password", "pkcs11", "kmip", "sqlcipher"):
    if need not in live:
        errs.append("condition %s did not run" % need)
if r["failures"]:
    errs.append("%d failed runs: %s" % (len(r["failures"]), r["failures"][0]["error"][:200]))
if "MISMATCH" in r["checksums"]:
    errs.append(r["checksums"])
want = r["options"]["repeats"] * len(r["options"]["workloads"]) * len(live)
if len(r["observations"]) != want:
    errs.append("%d observations, expected %d" % (len(r["observations"]), want))
for c in r["conditions"]:
    if c["skipped"] and not c["skipped"].strip():
        errs.append("condition %s skipped without a reason" % c["name"])
if not any(t["status"] in ("met", "MISSED") for t in r["targets"]):
    errs.append("no target evaluated")
for e in errs:
    print("  FAIL  " + e)
print("  ok    results.json content: %d observations, conditions %s" % (len(r["observations"]), ", ".join(live)) if not errs else "")
sys.exit(1 if errs else 0)
PY
[ $? = 0 ] || NFAIL=$((NFAIL+1))

# The PyKMIP server the kmip condition started is gone (stopped by pid group).
# (procps tools hang with the sanitizer runtime preloaded: run them without.)
if env -u LD_PRELOAD pgrep -f "$OUT/work/kmip/pki/server.conf" >/dev/null; then
  bad "the bench left its PyKMIP server running"
  env -u LD_PRELOAD pkill -f "$OUT/work/kmip/pki/server.conf"
else ok "the bench stopped its PyKMIP server"; fi

for s in '## Environment' '## Headline' '## Targets' '## Limitations' '## Raw measurements'; do
  grep -q "^$s" "$OUT/report.md" && ok "report.md has $s" || bad "report.md lacks $s"
done
grep -q '<svg' "$OUT/report.html" && ok "report.html has inline SVG charts" || bad "no SVG in report.html"
if grep -Eq '(src|href)=["'\'']?(https?:)?//' "$OUT/report.html"; then bad "report.html loads from the network"; else ok "report.html is self-contained"; fi
[ -d "$OUT/work" ] && bad "scratch folder left behind" || ok "scratch folder removed"

if [ "$NFAIL" = 0 ]; then echo "test_bench: all passed"; rm -rf "$WORK"; exit 0; fi
echo "test_bench: $NFAIL failed"
exit 1
