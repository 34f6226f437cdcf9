#!/usr/bin/env bash
# The benchmark report a DBA reads: a short `sqlite-tde bench --quick` run
# (plain, the auto-login wallet and SQLCipher 4; rollback, WAL
# and rollback with everything cached; 3 repeats so that the intervals are
# real), then
#   - the verdict rules: "no measurable penalty" only for a narrow interval
#     (the 0.42x-with-a-wide-interval case is "undecided"), one number format,
#     milliseconds instead of absurd percentages;
#   - stdout: the headline table and one "targets: N met, M missed, K
#     undecided" line, no per-target lines;
#   - report.md and report.html: the quick-run warning and the summary at
#     the top, no internal jargon, no literal Markdown in the HTML;
#   - report.html rendered in headless Chromium (bench_render.py): no console
#     message, every chart with axis label, ticks, gridlines and value
#     labels; the screenshot is kept as $TDE_BUILD/bench-report.png;
#   - the render check itself fails on a broken page.
#
# Environment (set by ctest): TDE_BUILD, TDE_SRC, TDE_TEST_TMP.
set -uo pipefail

TDE_BUILD=${TDE_BUILD:?set TDE_BUILD to the build folder}
TDE_SRC=${TDE_SRC:?set TDE_SRC to the repository root}
TDE_TEST_TMP=${TDE_TEST_TMP:-/tmp}
mkdir -p "$TDE_TEST_TMP"
WORK=$(mktemp -d "$TDE_TEST_TMP/test_bench_report.XXXXXX")
echo "test_bench_report: working in $WORK"

NFAIL=0
ok()  { echo "  ok    $*"; }
bad() { NFAIL=$((NFAIL+1)); echo "  FAIL  $*"; }

# 1. The rules, on constructed figures.
if /usr/bin/python3 - "$TDE_SRC/bench" <<'PY'
import importlib.util, sys
sys.path.insert(0, sys.argv[1])
spec = importlib.util.spec_from_file_location("run", sys.argv[1] + "/run.py")
run = importlib.util.module_from_spec(spec); spec.loader.exec_module(run)
import report
H, L = run.HIGHER, run.LOWER
cases = [
    (run.verdict(0.42, 0.20, 1.30, H, 5), "undecided"),            # wide interval: not "no penalty"
    (run.verdict(1.00, 0.97, 1.04, H, 5), "no measurable penalty"),
    (run.verdict(1.00, 0.90, 1.04, H, 5), "undecided"),
    (run.verdict(0.80, 0.70, 0.90, H, 5), "penalty 20 %"),
    (run.verdict(1.25, 1.10, 1.40, L, 5), "penalty 20 %"),          # in speed terms: 0.80x
    (run.verdict(0.80, 0.70, 0.90, L, 5), "faster 25 %"),
    (run.verdict(1.00, 0.99, 1.01, H, 2), "undecided"),             # under 3 runs
    (run.judge(0.95, 1.10, 0.90, H), "met"), (run.judge(0.50, 0.85, 0.90, H), "missed"),
    (run.judge(0.80, 1.10, 0.90, H), "undecided"),
    (report.num(374046.4), "374,046"), (report.num(0.05745), "0.0575"), (report.num(12.34), "12.3"),
    (report.num(2.378), "2.38"), (report.ratio_text(0.934), "0.93x"), (report.ratio_text(3740.4), "3,740x"),
]
bounce = {"condition": "wallet-password", "unit": "ms", "ratio": 700.7, "diff": 161.7,
          "verdict": "penalty 69966 %", "better": L}
cases.append((report.change_text(bounce), "+162 ms, slower"))
bad = [(got, want) for got, want in cases if got != want]
for got, want in bad:
    print("  FAIL  rule: got %r, want %r" % (got, want))
sys.exit(1 if bad else 0)
PY
then ok "verdict, target and number-format rules"; else NFAIL=$((NFAIL+1)); fi

# 2. A short run.
OUT="$WORK/out"
"$TDE_BUILD/sqlite-tde" bench --quick --repeats 3 --cached --conditions plain,wallet,sqlcipher4 \
    --workloads insert,bounce,update-rows --out "$OUT" </dev/null >"$WORK/stdout.txt" 2>"$WORK/stderr.txt"
RC=$?
if [ "$RC" = 0 ]; then ok "sqlite-tde bench --quick --cached exits 0"; else
  bad "sqlite-tde bench exited $RC"; tail -20 "$WORK/stderr.txt"; fi
N=$(grep -cE '^targets: [0-9]+ met, [0-9]+ missed, [0-9]+ undecided' "$WORK/stdout.txt")
[ "$N" = 1 ] && ok "stdout: one targets summary line" || bad "stdout: $N targets summary lines"
grep -qi 'target missed' "$WORK/stdout.txt" && bad "stdout lists single targets" || ok "stdout lists no single target"
grep -qE '^update-rows +DELETE\+cached' "$WORK/stdout.txt" && grep -qE '^insert +WAL' "$WORK/stdout.txt" \
  && ok "stdout: headline table with every journal mode" || { bad "stdout: no headline table"; cat "$WORK/stdout.txt"; }
L=$(wc -l <"$WORK/stdout.txt")
[ "$L" -le 25 ] && ok "stdout: $L lines" || bad "stdout: $L lines (details belong in the report)"

# 3. Report content.
if /usr/bin/python3 - "$OUT" <<'PY'
import json, re, sys
out = sys.argv[1]
r = json.load(open(out + "/results.json"))
h = open(out + "/report.html").read()
md = open(out + "/report.md").read()
errs = []
body = h.split("<body>", 1)[1]
first_h2 = body.find("<h2>")
if body.find('class="warning"') < 0 or body.find('class="warning"') > first_h2:
    errs.append("html: the quick-run warning is not above the first section")
if body.find('class="summary"') < 0 or body.find('class="summary"') > first_h2:
    errs.append("html: no summary sentence above the first section")
if "Targets:" not in body[:first_h2]:
    errs.append("html: the summary does not count the targets")
if body.find("<h2>Verdicts</h2>") < 0 or body.find("<h2>Verdicts</h2>") > body.find("<h2>Charts</h2>"):
    errs.append("html: the verdict table is not the first section")
mdtop = md[:md.find("\n## ")]
if "Warning" not in mdtop or "Targets:" not in mdtop:
    errs.append("md: warning or summary missing above the first section")
for name, text in (("html", h), ("md", md)):
    for pat in (r"issue[ #-]?\d", r"seed 00\d", r"\bseed 003\b"):
        if re.search(pat, text, re.I):
            errs.append("%s: internal jargon %r" % (name, re.search(pat, text, re.I).group(0)))
text = re.sub(r"<[^>]+>", " ", h)
for pat in ("**", "##", "`", "|---", "| ---"):
    if pat in text:
        errs.append("html: literal Markdown %r in the text" % pat)
if not re.search(r"\d{5,} ?%", text) is None:
    errs.append("html: a percentage of 5 digits or more: %s" % re.search(r"\d{5,} ?%", text).group(0))
modes = [m["name"] for m in r["options"]["modes"]]
if modes != ["DELETE", "WAL", "DELETE+cached"]:
    errs.append("modes %s" % modes)
for s in r["summary"]:
    v = s.get("verdict", "")
    if v == "no measurable penalty" and not (s["ci_low"] >= 0.95 and s["ci_high"] <= 1.05):
        errs.append("'no measurable penalty' with interval [%s, %s]" % (s["ci_low"], s["ci_high"]))
for o in r["observations"]:
    if "result" in o and o["cached"] and o["cache_size"] != r["options"]["cache_size_cached"]:
        errs.append("cached run with cache_size %s" % o["cache_size"])
if not r["options"]["cache_size_cached"] <= r["options"]["cache_size"] < 0:
    errs.append("everything cached (%d) is smaller than the default cache (%d)" % (
        r["options"]["cache_size_cached"], r["options"]["cache_size"]))
if not any(t["target"].startswith("everything cached") and t["status"] != "not measured" for t in r["targets"]):
    errs.append("no 'everything cached' target judged")
for e in errs:
    print("  FAIL  " + e)
sys.exit(1 if errs else 0)
PY
then ok "report: warning and summary on top, verdict table first, no jargon, no Markdown in HTML, narrow-interval verdicts"
else NFAIL=$((NFAIL+1)); fi

# 4. Rendered in Chromium; the screenshot stays in the build folder.
PNG="$TDE_BUILD/bench-report.png"
if /usr/bin/python3 "$TDE_SRC/tests/integration/bench_render.py" "$OUT/report.html" "$PNG" "$WORK/chromium"; then
  ok "report.html renders in Chromium with axes (screenshot $PNG)"
else bad "report.html does not render cleanly"; fi
printf '<html><body><p>x</p><script>throw new Error("deliberate")</script></body></html>' >"$WORK/broken.html"
if /usr/bin/python3 "$TDE_SRC/tests/integration/bench_render.py" "$WORK/broken.html" "$WORK/broken.png" "$WORK/chromium" >"$WORK/broken.txt"; then
  bad "the render check passed a page with a script error and no chart"
elif grep -q 'deliberate' "$WORK/broken.txt" && grep -q 'no chart' "$WORK/broken.txt"; then
  ok "the render check fails a broken page (console error, no chart)"
else bad "the render check failed a broken page for the wrong reason: $(cat "$WORK/broken.txt")"; fi

if [ "$NFAIL" = 0 ]; then echo "test_bench_report: all passed"; rm -rf "$WORK"; exit 0; fi
echo "test_bench_report: $NFAIL failed"
exit 1
