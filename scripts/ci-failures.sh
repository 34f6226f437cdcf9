#!/usr/bin/env bash
# After a failed ctest run: print, last, the checks that failed in each
# failing test (lines a test prints as "FAIL", sanitizer reports, asserts),
# so a CI log cut to its tail still names what went wrong.
# Usage: scripts/ci-failures.sh BUILD_DIR
log="$1/Testing/Temporary/LastTest.log"
[ -f "$log" ] || exit 0
echo "== failed checks (from $log)"
awk '
  /^[0-9]+\/[0-9]+ Test: / { t = $3; next }
  /^Test Failed|^Test Passed/ { next }
  /(^|[[:space:]])FAIL[[:space:]:]|ERROR: AddressSanitizer|runtime error:|Assertion .* failed|Traceback|^[A-Za-z]*Error: / {
    if (n[t]++ < 8) printf "%s: %s\n", t, substr($0, 1, 300)
  }' "$log"
