#!/usr/bin/env bash
# Integration test of the benchmark kit: `sqlite-tde bench --quick` runs
# every condition (the old and the two current peers included) in both
# journal modes (DELETE, then WAL) and writes report.md, report.html and
# results.json; the JSON matches bench/results.schema.json, every run
# succeeded (each driver run verifies its own checksum), every run carries
# its journal mode and its I/O counts (consistent with each other), the
# peers are labelled with their versions, stdout holds the headline table
# and one targets line, the reports hold their sections and the HTML loads
# nothing from the network.  A second, smaller run (WAL, insert only) runs
# the opt-in standby conditions: standby and standby-sync run over mutual
# TLS with signed records in their protection modes, and the report has
# their commit-latency and lag tables.  (The report's rendering:
# test_bench_report.sh.)
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

# --help lists every workload and every condition.
"$TDE_BUILD/sqlite-tde" bench --help >"$WORK/help.txt" 2>&1
MISSING=""
for w in insert delete-replenish cold-scan warm-scan bounce row-at-a-time tpcb-select tpcb-rw \
         vacuum update-all checkpoint update-rows delete-rows delete-spill suite commit-latency plain wallet wallet-password pkcs11 kmip \
         sqlcipher sqlcipher4 sqlite3mc standby standby-sync; do
  grep -qE "^  $w " "$WORK/help.txt" || MISSING="$MISSING $w"
done
[ -z "$MISSING" ] && ok "bench --help lists every workload and condition" || bad "bench --help lacks:$MISSING"

OUT="$WORK/out"
"$TDE_BUILD/sqlite-tde" bench --quick --repeats 2 --out "$OUT" </dev/null >"$WORK/stdout.txt" 2>"$WORK/stderr.txt"
RC=$?
if [ "$RC" = 0 ]; then ok "sqlite-tde bench --quick exits 0"; else
  bad "sqlite-tde bench --quick exited $RC"; tail -20 "$WORK/stderr.txt"; tail -20 "$WORK/stdout.txt"; fi
grep -q 'seed 20261130' "$WORK/stdout.txt" && ok "prints its seed" || bad "seed not printed"
grep -qE '^targets: [0-9]+ met, [0-9]+ missed, [0-9]+ undecided' "$WORK/stdout.txt" \
  && ok "prints the targets summary line" || bad "no targets summary line"
grep -qE '^vacuum +DELETE' "$WORK/stdout.txt" && grep -qE '^vacuum +WAL' "$WORK/stdout.txt" \
  && ok "prints the headline table, both journal modes" || bad "no headline table"
grep -qi 'target missed' "$WORK/stdout.txt" && bad "prints single targets on stdout" || ok "no per-target lines on stdout"

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
# scripts/deps.sh installs SoftHSM, PyKMIP and libsqlcipher, and caches the
# SQLCipher 4 and SQLite3MC amalgamations: every condition must run (a
# missing package fails here, loudly).
for need in ("plain", "wallet", "wallet-password", "pkcs11", "kmip", "sqlcipher", "sqlcipher4", "sqlite3mc"):
    if need not in live:
        errs.append("condition %s did not run: %s" % (need, [c["skipped"] for c in r["conditions"] if c["name"] == need]))
lab = {c["name"]: c["label"] for c in r["conditions"]}
for name, want in (("sqlcipher4", "SQLCipher 4.5.5"), ("sqlite3mc", "SQLite3 Multiple Ciphers"),
                   ("sqlcipher", "old peer")):
    if want not in lab.get(name, "") or "SQLite 3." not in lab.get(name, ""):
        errs.append("condition %s label %r lacks %r or its SQLite version" % (name, lab.get(name), want))
modes = [m["name"] for m in r["options"]["modes"]]
if modes != ["DELETE", "WAL"]:
    errs.append("journal modes %s, expected DELETE then WAL by default" % modes)
for o in r["observations"]:
    q = o.get("result")
    if not q:
        continue
    where = "%s/%s/%s" % (o["workload"], o["mode"], o["condition"])
    if q["io_ops"] <= 0:
        errs.append("%s: io_ops %s" % (where, q["io_ops"]))
    # the unix VFS makes one pwrite per xWrite: the syscall bytes cover the VFS bytes
    if q["io_wchar"] >= 0 and q["io_wchar"] < q["vfs_write_bytes"]:
        errs.append("%s: wchar %d < VFS bytes written %d" % (where, q["io_wchar"], q["vfs_write_bytes"]))
    if o["workload"] == "checkpoint":
        # WAL only; the timed part copies frames into the database, syncs it
        # and truncates the WAL; sqlite-tde also folds its page map there
        if o["journal"] != "WAL":
            errs.append("%s: checkpoint ran outside WAL mode" % where)
        if q["vfs_db_write_bytes"] <= 0 or q["vfs_syncs"] < 1 or q["frames"] <= 0 or q["checkpoint_s"] <= 0:
            errs.append("%s: db bytes %s, syncs %s, frames %s, checkpoint_s %s" % (
                where, q["vfs_db_write_bytes"], q["vfs_syncs"], q["frames"], q["checkpoint_s"]))
        # format 3 (the default since issue 24) keeps its page map in the
        # database file: no DB-tdemap is written (format 2's kit runs counted it)
        if o["condition"] == "wallet" and q.get("vfs_map_write_bytes", 0) != 0:
            errs.append("%s: page map (DB-tdemap) bytes written on format 3" % where)
        if o["condition"] == "plain" and q.get("vfs_map_write_bytes", 0) != 0:
            errs.append("%s: page map bytes counted for plain SQLite" % where)
    if o["workload"] in ("insert", "update-all", "update-rows", "delete-rows", "delete-spill", "vacuum"):
        kind = "vfs_journal_write_bytes" if o["journal"] == "DELETE" else "vfs_wal_write_bytes"
        if q[kind] <= 0 or q["vfs_writes"] <= 0:
            errs.append("%s: no %s counted" % (where, kind))
        if o["journal"] == "WAL" and q["vfs_journal_write_bytes"] != 0:
            errs.append("%s: rollback journal bytes in WAL mode" % where)
if r["failures"]:
    errs.append("%d failed runs: %s" % (len(r["failures"]), r["failures"][0]["error"][:200]))
if "MISMATCH" in r["checksums"]:
    errs.append(r["checksums"])
# every workload in every mode, but those not applicable there (checkpoint
# and commit-latency: WAL only)
na = {(x["workload"], x["mode"]) for x in r["options"].get("not_applicable", [])}
if na != {("checkpoint", "DELETE"), ("commit-latency", "DELETE")}:
    errs.append("not applicable %s, expected checkpoint and commit-latency in DELETE only" % sorted(na))
want = r["options"]["repeats"] * len(live) * sum(
    1 for w in r["options"]["workloads"] for m in modes if (w, m) not in na)
if len(r["observations"]) != want:
    errs.append("%d observations, expected %d" % (len(r["observations"]), want))
if not any(o["workload"] == "checkpoint" and "result" in o for o in r["observations"]):
    errs.append("no checkpoint observation")
for c in r["conditions"]:
    if c["skipped"] and not c["skipped"].strip():
        errs.append("condition %s skipped without a reason" % c["name"])
if not r["targets"] or any(t["status"] not in ("met", "missed", "undecided", "not measured") for t in r["targets"]):
    errs.append("targets missing or with an unknown status")
if not any(s["metric"] == "wchar_per_op" and s["condition"] == "wallet" and s.get("ratio") for s in r["summary"]):
    errs.append("no bytes-written ratio for wallet")
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

for s in '## Verdicts' '## Targets' '## Headline figures' '## Bytes and I/O' '## Environment' '## Limitations' '## Raw measurements'; do
  grep -q "^$s" "$OUT/report.md" && ok "report.md has $s" || bad "report.md lacks $s"
done
grep -qE '^\| checkpoint \| - \| - \| - \| [0-9+]' "$OUT/report.md" \
  && ok "report.md: checkpoint shown as - with the rollback journal, measured in WAL" \
  || bad "report.md: no checkpoint verdict row with - for DELETE"
grep -q '<svg' "$OUT/report.html" && ok "report.html has inline SVG charts" || bad "no SVG in report.html"
if grep -Eq '(src|href)=["'\'']?(https?:)?//' "$OUT/report.html"; then bad "report.html loads from the network"; else ok "report.html is self-contained"; fi
[ -d "$OUT/work" ] && bad "scratch folder left behind" || ok "scratch folder removed"

# The standby conditions (only when named; WAL only): a shipper and a
# standby over mutual TLS with signed records, async and sync.
SOUT="$WORK/out-standby"
"$TDE_BUILD/sqlite-tde" bench --quick --repeats 2 --journal WAL --workloads insert \
  --conditions standby,standby-sync --out "$SOUT" </dev/null >"$WORK/stdout-standby.txt" 2>"$WORK/stderr-standby.txt"
RC=$?
if [ "$RC" = 0 ]; then ok "sqlite-tde bench --conditions standby,standby-sync exits 0"; else
  bad "sqlite-tde bench --conditions standby,standby-sync exited $RC"; tail -20 "$WORK/stderr-standby.txt"; fi
if /usr/bin/python3 "$TDE_SRC/bench/check_results.py" "$SOUT/results.json" "$TDE_SRC/bench/results.schema.json"; then
  ok "standby results.json matches bench/results.schema.json"
else
  bad "standby results.json does not match the schema"
fi
/usr/bin/python3 - "$SOUT/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
errs = []
live = [c["name"] for c in r["conditions"] if not c["skipped"]]
lab = {c["name"]: c["label"] for c in r["conditions"]}
for name, mode in (("standby", "async"), ("standby-sync", "sync")):
    if name not in live:
        errs.append("condition %s did not run: %s" % (name, [c["skipped"] for c in r["conditions"] if c["name"] == name]))
        continue
    if "mutual TLS" not in lab[name] or "protection mode " + mode not in lab[name]:
        errs.append("condition %s label %r does not say mutual TLS and protection mode %s" % (name, lab[name], mode))
    obs = [o for o in r["observations"] if o["condition"] == name]
    if len(obs) != r["options"]["repeats"] or any("result" not in o for o in obs):
        errs.append("condition %s: %d observations, failures %s" % (name, len(obs), [o.get("error") for o in obs]))
    for o in obs:
        q = o.get("result") or {}
        if (q.get("standby_transport"), q.get("standby_mode"), q.get("standby_sync_degraded")) != ("tls", mode, 0):
            errs.append("%s run %d: transport %s, mode %s, degraded %s (want tls, %s, 0)" % (
                name, o["repeat"], q.get("standby_transport"), q.get("standby_mode"),
                q.get("standby_sync_degraded"), mode))
        if q.get("standby_catchup_s") is None:
            errs.append("%s run %d: the standby did not catch up" % (name, o["repeat"]))
if not any(s["condition"] == "standby-sync" and s["metric"] == "commit_ms_p99" for s in r["summary"]):
    errs.append("no insert commit p99 for standby-sync in the summary")
for e in errs:
    print("  FAIL  " + e)
print("  ok    standby conditions ran over TLS in their modes: %s" % ", ".join(live) if not errs else "")
sys.exit(1 if errs else 0)
PY
[ $? = 0 ] || NFAIL=$((NFAIL+1))
for s in '## Standby commit latency' '## Standby lag'; do
  grep -q "^$s" "$SOUT/report.md" && ok "standby report.md has $s" || bad "standby report.md lacks $s"
done
if env -u LD_PRELOAD pgrep -f "$SOUT/work" >/dev/null; then
  bad "the bench left a shipper or standby running"
  env -u LD_PRELOAD pgrep -af "$SOUT/work"
else ok "the bench stopped its shippers and standbys"; fi
[ -d "$SOUT/work" ] && bad "standby scratch folder left behind" || ok "standby scratch folder removed"

if [ "$NFAIL" = 0 ]; then echo "test_bench: all passed"; rm -rf "$WORK"; exit 0; fi
echo "test_bench: $NFAIL failed"
exit 1
