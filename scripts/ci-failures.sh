#!/usr/bin/env bash
# After a failed ctest run: print, last, the checks that failed in each
# failing test (lines a test prints as "FAIL", sanitizer reports, asserts,
# tracebacks and the lines after them), so a CI log cut to its tail still
# names what went wrong.
# Usage: scripts/ci-failures.sh BUILD_DIR
log="$1/Testing/Temporary/LastTest.log"
failed="$1/Testing/Temporary/LastTestsFailed.log"
[ -f "$log" ] || exit 0
echo "== failed checks (from $log)"
awk -v failed="$failed" '
  BEGIN { while ((getline line < failed) > 0) { sub(/^[0-9]+:/, "", line); bad[line] = 1 } }
  /^[0-9]+\/[0-9]+ Test: / { t = $3; tail = 0; next }
  !(t in bad) { next }
  tail > 0 { if (n[t]++ < 24) printf "%s: %s\n", t, substr($0, 1, 300); tail--; next }
  /(^|[[:space:]])FAIL[[:space:]:]|ERROR: AddressSanitizer|runtime error:|Assertion .* failed|^Traceback/ {
    if (n[t]++ < 12) printf "%s: %s\n", t, substr($0, 1, 300)
    if ($0 ~ /^Traceback|ERROR: AddressSanitizer/) tail = 20
  }' "$log"
