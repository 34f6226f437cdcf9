#!/usr/bin/env bash
# The benchmark kit's opt-in condition archive (issue 27): `sqlite-tde bench
# --quick --conditions archive` (WAL; insert and commit-latency) starts a
# local S3 server (tests/lib/s3server.sh), runs sqlite-tde archive beside
# each run (with the auto-login wallet alone as the comparison), and the
# report holds the archive's cost (throughput and commit latency against
# wallet) and its upload table (bytes per transaction against the WAL's).
# Checks: every run succeeded (each driver run verifies its own checksum),
# every archive run's segments hold its transactions, results.json matches
# the schema, both report tables are there, and no archiver or Ceph daemon
# of the kit is left running.
#
# Environment (set by ctest): TDE_BUILD, TDE_SRC, TDE_TEST_TMP.
set -uo pipefail

TDE_BUILD=${TDE_BUILD:?set TDE_BUILD to the build folder}
TDE_SRC=${TDE_SRC:?set TDE_SRC to the repository root}
TDE_TEST_TMP=${TDE_TEST_TMP:-/tmp}
mkdir -p "$TDE_TEST_TMP"
WORK=$(mktemp -d "$TDE_TEST_TMP/test_bench_archive.XXXXXX")
echo "test_bench_archive: working in $WORK"

NFAIL=0
ok()  { echo "  ok    $*"; }
bad() { NFAIL=$((NFAIL+1)); echo "  FAIL  $*"; }

"$TDE_BUILD/sqlite-tde" bench --help >"$WORK/help.txt" 2>&1
grep -qE '^ +archive +.*\(only when named\)' "$WORK/help.txt" \
  && ok "--help lists archive (only when named)" || bad "--help does not list the archive condition"

OUT="$WORK/out"
"$TDE_BUILD/sqlite-tde" bench --quick --journal WAL --conditions archive --workloads insert,commit-latency \
  --out "$OUT" </dev/null >"$WORK/stdout.txt" 2>"$WORK/stderr.txt"
RC=$?
if [ "$RC" = 0 ]; then ok "sqlite-tde bench --quick --conditions archive exits 0"; else
  bad "sqlite-tde bench --conditions archive exited $RC"; tail -20 "$WORK/stderr.txt"; fi
if /usr/bin/python3 "$TDE_SRC/bench/check_results.py" "$OUT/results.json" "$TDE_SRC/bench/results.schema.json"; then
  ok "results.json matches bench/results.schema.json"
else
  bad "results.json does not match the schema"
fi
/usr/bin/python3 - "$OUT/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
errs = []
conds = {c["name"]: c for c in r["conditions"]}
for need in ("wallet", "archive"):
    if need not in conds or conds[need]["skipped"]:
        errs.append("condition %s did not run: %s" % (need, conds.get(need, {}).get("skipped")))
failed = [(o["condition"], o["workload"], o.get("error")) for o in r["observations"] if "result" not in o]
if failed:
    errs.append("failed runs (a checksum that disagrees fails its run): %s" % failed)
arch = [o for o in r["observations"] if o["condition"] == "archive"]
want = r["options"]["repeats"] * 2
if len(arch) != want:
    errs.append("%d archive runs, want %d" % (len(arch), want))
for o in arch:
    q = o.get("result") or {}
    if not q.get("archive_txns") or not q.get("archive_segments") or not q.get("archive_upload_bytes_per_txn"):
        errs.append("%s run %d: no archived transactions or segments: %s" % (
            o["workload"], o["repeat"], {k: v for k, v in q.items() if k.startswith("archive_")}))
    elif q.get("archive_catchup_s") is None:
        errs.append("%s run %d: the archive did not catch up" % (o["workload"], o["repeat"]))
    elif not q.get("archive_wal_bytes_per_txn"):
        errs.append("%s run %d: no WAL bytes per transaction" % (o["workload"], o["repeat"]))
for m in ("rows_per_s", "commit_normal_ms_p99"):
    if not any(s["condition"] == "archive" and s["metric"] == m for s in r["summary"]):
        errs.append("no %s of condition archive in the summary" % m)
for e in errs:
    print("  FAIL  " + e)
if not errs:
    print("  ok    archive ran beside wallet: %s" % ", ".join(
        "%s %s B/txn uploaded vs %s B/txn WAL" % (o["workload"], o["result"]["archive_upload_bytes_per_txn"],
                                                o["result"]["archive_wal_bytes_per_txn"]) for o in arch))
sys.exit(1 if errs else 0)
PY
[ $? = 0 ] || NFAIL=$((NFAIL+1))
for s in '## Archive cost' '## Archive upload'; do
  grep -q "^$s" "$OUT/report.md" && ok "report.md has $s" || bad "report.md lacks $s"
done
grep -q '<h2>Archive upload</h2>' "$OUT/report.html" && ok "report.html has the archive table" \
  || bad "report.html lacks the archive table"
if env -u LD_PRELOAD pgrep -f "$OUT/work" >/dev/null; then
  bad "the bench left an archiver or an S3 server daemon running"
  env -u LD_PRELOAD pgrep -af "$OUT/work"
else ok "the bench stopped its archivers and its S3 server"; fi
[ -d "$OUT/work" ] && bad "scratch folder left behind" || ok "scratch folder removed"

if [ "$NFAIL" = 0 ]; then echo "test_bench_archive: all passed"; rm -rf "$WORK"; exit 0; fi
echo "test_bench_archive: $NFAIL failed"
exit 1
