#!/usr/bin/env bash
# The benchmark kit's breadth workloads, run very briefly (not timed: no
# assertion here depends on how fast anything ran):
#   - the broad SQL suite (workload suite) in DELETE, WAL and DELETE with
#     everything cached, and commit-latency (WAL only), for plain SQLite,
#     the auto-login wallet and the two current peers where their drivers
#     are built;
#   - every suite test ran in every run, and its checksum is the same for
#     every condition, journal mode and run (recomputed here from the raw
#     observations, not taken from the kit's own verdict); the kit's
#     mismatch check flags a test whose checksum was altered;
#   - the transaction larger than the cache (test 310) spilled pages in
#     every run, which is what makes it the test of a transaction that
#     reads back its own spilled pages;
#   - commit-latency has its p50 and p99 with synchronous=NORMAL and FULL,
#     in WAL only, and its targets;
#   - report.md and report.html hold the suite table, the commit latency
#     table and the five worst tests of each condition and mode, and those
#     five are the five highest time ratios of results.json.
#
# Environment (set by ctest): TDE_BUILD, TDE_SRC, TDE_TEST_TMP.
set -uo pipefail

TDE_BUILD=${TDE_BUILD:?set TDE_BUILD to the build folder}
TDE_SRC=${TDE_SRC:?set TDE_SRC to the repository root}
TDE_TEST_TMP=${TDE_TEST_TMP:-/tmp}
mkdir -p "$TDE_TEST_TMP"
WORK=$(mktemp -d "$TDE_TEST_TMP/test_bench_suite.XXXXXX")
echo "test_bench_suite: working in $WORK"

NFAIL=0
ok()  { echo "  ok    $*"; }
bad() { NFAIL=$((NFAIL+1)); echo "  FAIL  $*"; }

CONDS=plain,wallet
for p in sqlcipher4 sqlite3mc; do
  [ -x "$TDE_BUILD/sqlite-tde-bench-$p" ] && CONDS="$CONDS,$p"
done

# 2,000 suite rows: still a short run, but enough that test 310's
# transaction outgrows its 10-page cache.
OUT="$WORK/out"
"$TDE_BUILD/sqlite-tde" bench --quick --repeats 1 --journal DELETE,WAL --cached --suite-rows 2000 \
    --lat-txns 10 --conditions "$CONDS" --workloads suite,commit-latency --out "$OUT" \
    </dev/null >"$WORK/stdout.txt" 2>"$WORK/stderr.txt"
RC=$?
if [ "$RC" = 0 ]; then ok "sqlite-tde bench --workloads suite,commit-latency ($CONDS) exits 0"; else
  bad "sqlite-tde bench exited $RC"; tail -20 "$WORK/stderr.txt"; tail -20 "$WORK/stdout.txt"; fi
grep -qE '^suite +DELETE\+cached' "$WORK/stdout.txt" && grep -qE '^commit-latency +WAL' "$WORK/stdout.txt" \
  && ok "stdout: headline rows of suite and commit-latency" || { bad "stdout: no suite or commit-latency row"; cat "$WORK/stdout.txt"; }
if /usr/bin/python3 "$TDE_SRC/bench/check_results.py" "$OUT/results.json" "$TDE_SRC/bench/results.schema.json"; then
  ok "results.json matches bench/results.schema.json"
else
  bad "results.json does not match the schema"
fi

/usr/bin/python3 - "$OUT" "$TDE_SRC/bench" "$CONDS" <<'PY'
import importlib.util, json, re, sys
out, src, conds = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
sys.path.insert(0, src)
spec = importlib.util.spec_from_file_location("run", src + "/run.py")
run = importlib.util.module_from_spec(spec); spec.loader.exec_module(run)
r = json.load(open(out + "/results.json"))
md = open(out + "/report.md").read()
h = open(out + "/report.html").read()
errs = []
live = [c["name"] for c in r["conditions"] if not c["skipped"]]
for need in conds:
    if need not in live:
        errs.append("condition %s did not run: %s" % (need, [c["skipped"] for c in r["conditions"] if c["name"] == need]))
if r["failures"]:
    errs.append("failed runs: %s" % [f["error"][:200] for f in r["failures"]])
modes = [m["name"] for m in r["options"]["modes"]]
if modes != ["DELETE", "WAL", "DELETE+cached"]:
    errs.append("modes %s" % modes)

# 1. The suite: every test in every run, one checksum per test everywhere.
suite = [o for o in r["observations"] if o["workload"] == "suite" and "result" in o]
ids = [t["id"] for t in (r.get("suite") or {}).get("tests", [])]
if len(ids) < 25:
    errs.append("results.json lists %d suite tests" % len(ids))
if len(suite) != len(live) * len(modes):
    errs.append("%d suite runs, expected %d" % (len(suite), len(live) * len(modes)))
sums = {}
for o in suite:
    got = [t["id"] for t in o["result"]["tests"]]
    if got != ids:
        errs.append("%s %s ran tests %s" % (o["condition"], o["mode"], got))
    for t in o["result"]["tests"]:
        sums.setdefault(t["id"], {})[(o["condition"], o["mode"])] = t["checksum"]
        if t["id"] == "310" and t["cache_spills"] == 0:     # -1: the driver's SQLite cannot count
            errs.append("%s %s: test 310 did not spill its cache" % (o["condition"], o["mode"]))
for tid, by in sorted(sums.items()):
    if len(set(by.values())) != 1:
        errs.append("test %s: checksums differ: %s" % (tid, by))
    for c in conds:
        for m in modes:
            if (c, m) not in by:
                errs.append("test %s: no checksum for %s in %s" % (tid, c, m))
if "MISMATCH" in r["checksums"]:
    errs.append(r["checksums"])
# the kit's own check flags an altered checksum
obs = json.loads(json.dumps(r["observations"]))
for o in obs:
    if o["workload"] == "suite" and o["condition"] == "wallet" and o["mode"] == "WAL":
        o["result"]["tests"][5]["checksum"] = "0" * 16
        break
if run.suite_mismatches(obs) != [ids[5]]:
    errs.append("suite_mismatches did not flag the altered test %s: %s" % (ids[5], run.suite_mismatches(obs)))
if run.suite_mismatches(r["observations"]):
    errs.append("suite_mismatches on the real results: %s" % run.suite_mismatches(r["observations"]))

# 2. Per-test rows: a time ratio and a bytes ratio for every condition and mode.
rows = r["suite"]["rows"]
for c in conds:
    for m in modes:
        mine = [x for x in rows if x["condition"] == c and x["mode"] == m]
        if [x["test"] for x in mine] != ids:
            errs.append("suite rows of %s %s: %s" % (c, m, [x["test"] for x in mine]))
        if c != "plain" and any(x["ratio"] is None or x["bytes_ratio"] is None for x in mine):
            errs.append("suite rows of %s %s without a time or bytes ratio" % (c, m))
if not any(x["write_bytes"] > 0 for x in rows if x["test"] == "100"):
    errs.append("test 100 (inserts) wrote no bytes")

# 3. The five worst tests: the five highest ratios, named in both reports.
for m in modes:
    for c in [x for x in conds if x != "plain"]:
        w = [x for x in r["suite"]["worst"] if x["mode"] == m and x["condition"] == c]
        if len(w) != 1 or len(w[0]["tests"]) != 5:
            errs.append("worst tests of %s %s: %s" % (c, m, w))
            continue
        ranked = sorted((x for x in rows if x["condition"] == c and x["mode"] == m),
                        key=lambda x: -x["ratio"])[:5]
        if [x["ratio"] for x in ranked] != [x["ratio"] for x in w[0]["tests"]]:
            errs.append("worst tests of %s %s are not the five highest ratios" % (c, m))
        for rank, t in enumerate(w[0]["tests"], 1):
            pat = r"^\| %s \| %s \| %d \| %s \| " % (re.escape(m), re.escape(c), rank, t["test"])
            if not re.search(pat, md, re.M):
                errs.append("report.md does not name worst test %d of %s %s (%s)" % (rank, c, m, t["test"]))
for s in ("## Broad SQL suite", "## Five worst suite tests", "## Commit latency"):
    if not re.search("^" + s + "$", md, re.M):
        errs.append("report.md lacks %s" % s)
for s in ("<h2>Broad SQL suite</h2>", "<h2>Five worst suite tests</h2>", "<h2>Commit latency</h2>"):
    if s not in h:
        errs.append("report.html lacks %s" % s)

# 4. Commit latency: WAL only, four percentiles per run, their targets.
lat = [o for o in r["observations"] if o["workload"] == "commit-latency"]
if sorted({o["mode"] for o in lat}) != ["WAL"] or len(lat) != len(live):
    errs.append("commit-latency runs: %s" % [(o["condition"], o["mode"]) for o in lat])
keys = ["commit_normal_ms_p50", "commit_normal_ms_p99", "commit_full_ms_p50", "commit_full_ms_p99"]
for o in lat:
    q = o.get("result") or {}
    if any(not q.get(k) or q[k] <= 0 for k in keys) or q.get("txns") != 2 * r["options"]["lat_txns"]:
        errs.append("commit-latency %s: %s" % (o["condition"], {k: q.get(k) for k in keys + ["txns"]}))
    if q.get("commit_normal_ms_p99", 0) < q.get("commit_normal_ms_p50", 1) or \
       q.get("commit_full_ms_p99", 0) < q.get("commit_full_ms_p50", 1):
        errs.append("commit-latency %s: p99 below p50" % o["condition"])
if len({o["result"]["checksum"] for o in lat if "result" in o}) != 1:
    errs.append("commit-latency checksums differ between conditions")
tg = [t for t in r["targets"] if t["group"] == "commit latency (WAL)" and t["condition"] == "wallet"]
if sorted(t["target"].split()[0] for t in tg) != sorted(keys):
    errs.append("commit latency targets for wallet: %s" % [t["target"] for t in tg])
if not [t for t in r["targets"] if t["group"] == "broad SQL suite" and t["condition"] == "wallet"]:
    errs.append("no broad SQL suite target for wallet")
if not re.search(r"^\| wallet, WAL \| [0-9.,]+ \(", md, re.M):
    errs.append("report.md: no commit latency row for wallet")
for e in errs:
    print("  FAIL  " + e)
print("  ok    %d suite tests agree across %s in %s; five worst named; commit latency in WAL"
      % (len(ids), ", ".join(live), ", ".join(modes)) if not errs else "")
sys.exit(1 if errs else 0)
PY
[ $? = 0 ] || NFAIL=$((NFAIL+1))
[ -d "$OUT/work" ] && bad "scratch folder left behind" || ok "scratch folder removed"

if [ "$NFAIL" = 0 ]; then echo "test_bench_suite: all passed"; rm -rf "$WORK"; exit 0; fi
echo "test_bench_suite: $NFAIL failed"
exit 1
