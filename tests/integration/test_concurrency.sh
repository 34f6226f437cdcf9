#!/usr/bin/env bash
# Concurrency (issue 7, item 5).  NPROC processes x NTHREADS threads of
# tests/tools/conc_worker, each thread with its own connection, read and
# write one encrypted database for a bounded time, in WAL mode and in
# rollback (DELETE) mode.  Only SQLITE_BUSY is allowed (retried); every
# read transaction checks that count(rows) equals the sum of the owners'
# accounts in its snapshot; at the end every owner must hold exactly the
# rows it inserted minus those it deleted, and PRAGMA integrity_check,
# tde_verify() and `sqlite-tde verify` must pass.
#
#   make test:   3 processes x 3 threads, 10 s per mode
#   make stress: TDE_STRESS=1, 4 x 4, 120 s per mode
#   TDE_CONC_SECONDS, TDE_CONC_PROCS, TDE_CONC_THREADS, TDE_CONC_SEED override.
set -euo pipefail
: "${TDE_BUILD:?}" "${TDE_TEST_TMP:?}"
CLI="$TDE_BUILD/sqlite-tde"
WORKER="$TDE_BUILD/conc_worker"
mkdir -p "$TDE_TEST_TMP"
W=$(mktemp -d "$TDE_TEST_TMP/conc.XXXXXX")
trap 'rm -rf "$W"' EXIT
cd "$W"

if [ "${TDE_STRESS:-0}" = 1 ]; then
  SECONDS_PER_MODE=${TDE_CONC_SECONDS:-120}; NPROC=${TDE_CONC_PROCS:-4}; NTHREADS=${TDE_CONC_THREADS:-4}
else
  SECONDS_PER_MODE=${TDE_CONC_SECONDS:-10}; NPROC=${TDE_CONC_PROCS:-3}; NTHREADS=${TDE_CONC_THREADS:-3}
fi
SEED=${TDE_CONC_SEED:-20261130}
echo "concurrency test: seed $SEED, $NPROC processes x $NTHREADS threads, ${SECONDS_PER_MODE} s per mode"

printf 'keystore = wallet\nwallet = w.tdew\n' > tde.conf
chmod 600 tde.conf
"$CLI" --config tde.conf keystore create --auto-login >/dev/null 2>&1

fails=0
run_mode(){  # $1 journal mode
  local journal=$1 db="conc-$1.db" p pids=() bad=0
  rm -f "$db" "$db-wal" "$db-shm" "$db-journal" run.*
  "$WORKER" init "$db" tde.conf "$journal" "$NPROC" "$NTHREADS"
  for p in $(seq 1 "$NPROC"); do
    "$WORKER" run "$db" tde.conf "$p" "$NTHREADS" "$SECONDS_PER_MODE" "$((SEED + p))" > "run.$p" 2> "err.$p" &
    pids+=($!)
  done
  for p in $(seq 1 "$NPROC"); do
    if ! wait "${pids[$((p-1))]}"; then
      echo "FAIL - $journal: process $p: $(cat "err.$p")"; bad=1
    fi
  done
  cat run.* > all
  local ops
  ops=$(awk '{i+=$4; d+=$6; r+=$8; w+=$10; b+=$12} END{printf "%d inserted, %d deleted, %d read transactions, %d write transactions, %d busy retries", i, d, r, w, b}' all)
  if [ "$bad" = 0 ]; then
    local out
    if ! out=$(awk '{print $2, $4 - $6}' all | "$WORKER" check "$db" tde.conf 2>&1); then
      echo "FAIL - $journal: $out"; bad=1
    elif ! "$CLI" --config tde.conf verify "$db" > vout 2>&1; then
      echo "FAIL - $journal: sqlite-tde verify: $(cat vout)"; bad=1
    fi
  fi
  printf '%-4s %-6s %d s, %d x %d connections: %s; final %s\n' "$([ $bad = 0 ] && echo ok || echo FAIL)" \
    "$journal" "$SECONDS_PER_MODE" "$NPROC" "$NTHREADS" "$ops" "${out:-(not checked)}"
  fails=$((fails + bad))
}

run_mode wal
run_mode delete
[ "$fails" -eq 0 ] || { echo "concurrency test: FAILED (seed $SEED)"; exit 1; }
echo "concurrency test: ok"
