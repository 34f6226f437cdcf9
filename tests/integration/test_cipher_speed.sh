#!/usr/bin/env bash
# sqlite-tde-cipher-speed (bench/cipher_speed.c) runs and reports every
# case: the shim's page seal and open (which must round-trip, or the tool
# exits 1), AES-256-GCM with a reused and a new context, ChaCha20-Poly1305,
# AES-256-CTR and the WAL frame HMAC, each a positive time per page for
# every page size.  Not timed: no assertion depends on how fast anything ran.
# Environment (set by ctest): TDE_BUILD.
set -uo pipefail
TDE_BUILD=${TDE_BUILD:?set TDE_BUILD to the build folder}
out=$("$TDE_BUILD/sqlite-tde-cipher-speed" --pages 50 --repeats 1) || { echo "FAIL: the tool failed"; exit 1; }
echo "$out"
fail=0
for c in tde-seal tde-open gcm-reuse gcm-new chacha-reuse ctr-reuse; do
  if ! echo "$out" | awk -v c="$c" '$1==c && NF==4 && $2>0 && $3>0 && $4>0 {ok=1} END {exit !ok}'; then
    echo "FAIL: no positive figures for $c at 1024, 4096 and 65536 bytes"; fail=1
  fi
done
echo "$out" | awk '$1=="hmac-sha256" && $2>0 {ok=1} END {exit !ok}' || { echo "FAIL: no HMAC figure"; fail=1; }
echo "$out" | grep -q "^# OpenSSL 3" || { echo "FAIL: the OpenSSL version is not named"; fail=1; }
"$TDE_BUILD/sqlite-tde-cipher-speed" --pages 0 >/dev/null 2>&1 && { echo "FAIL: --pages 0 accepted"; fail=1; }
[ $fail -eq 0 ] && echo "test_cipher_speed: ok"
exit $fail
