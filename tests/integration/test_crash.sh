#!/usr/bin/env bash
# Crash consistency (issue 7, item 1).  tests/tools/crash_writer commits
# numbered transactions (synchronous=FULL, some large enough to spill the
# page cache into the database file before COMMIT) and logs "C k" after
# each COMMIT returns; it dies by SIGKILL at a random moment: 7 cycles in 8
# from its own interval timer 0..MAXDELAY ms after its database is open
# (so the moment falls into the transaction stream even where start-up is
# slow, as under ASan), 1 in 8 from this script 0..MAXDELAY ms after start
# (start-up, journal or WAL recovery included).  Then a fresh process opens the database through tde (recovering
# the hot journal or WAL), runs PRAGMA integrity_check and tde_verify(),
# and checks that every transaction the writer saw committed is present,
# whole, and nothing else (crash_writer check); `sqlite-tde verify` runs on
# the recovered file as well.  Modes: rollback journal (DELETE), WAL, and
# WAL with checkpoints (wal_autocheckpoint=8 plus an explicit
# wal_checkpoint(TRUNCATE) every 3 transactions), at page sizes 1024 and
# 4096 (and 8192 under TDE_STRESS=1).
#
#   make test:   TDE_CRASH_CYCLES cycles per mode (default 200; 50 in the
#                ASan build, whose processes start ten times slower)
#   make stress: TDE_STRESS=1, 5000 cycles per mode
#   TDE_CRASH_SEED=N replays a kill schedule (the seed is printed).
#   TDE_CRASH_WRITER=PATH: another writer build (ctest runs
#   crash_writer_353, linked to SQLite 3.53.2, as it.test_crash.sh.sqlite-3.53).
set -euo pipefail
: "${TDE_BUILD:?}" "${TDE_TEST_TMP:?}"
CLI="$TDE_BUILD/sqlite-tde"
WRITER="${TDE_CRASH_WRITER:-$TDE_BUILD/crash_writer}"   # crash_writer_353: against SQLite 3.53.2
mkdir -p "$TDE_TEST_TMP"
W=$(mktemp -d "$TDE_TEST_TMP/crash.XXXXXX")
trap 'rm -rf "$W"' EXIT
cd "$W"

if [ "${TDE_STRESS:-0}" = 1 ]; then
  CYCLES=${TDE_CRASH_CYCLES:-5000}; PAGES="1024 4096 8192"
elif ldd "$WRITER" | grep -q libasan; then
  CYCLES=${TDE_CRASH_CYCLES:-50}; PAGES="1024 4096"
else
  CYCLES=${TDE_CRASH_CYCLES:-200}; PAGES="1024 4096"
fi
SEED=${TDE_CRASH_SEED:-20261130}
MAXDELAY_MS=${TDE_CRASH_MAXDELAY_MS:-40}
echo "crash test: seed $SEED, $CYCLES cycles per mode, kill delay 0..${MAXDELAY_MS} ms"

printf 'keystore = wallet\nwallet = w.tdew\n' > tde.conf
# New databases are version 3 (the default); TDE_TEST_FORMAT=2: the
# format-2 twin (tests/CMakeLists.txt) creates its databases as version 2.
FORMAT=3
if [ "${TDE_TEST_FORMAT:-}" = 2 ]; then
  FORMAT=2
  echo 'format_version = 2' >> tde.conf
  echo "crash test: format 2 (TDE_TEST_FORMAT=2)"
fi
chmod 600 tde.conf
"$CLI" --config tde.conf keystore create --auto-login >/dev/null 2>&1

fails=0; xfails=0; total_cycles=0; total_mid=0; total_ckpt=0; total_tx=0; total_checks=0
# One cycle: start the writer on $db, have it killed after $delay us (by
# this script when $outside is 1, by its own timer otherwise), check.  Sets
# $out (the checker's figures) and $why; returns 1 when a check failed.
cycle(){  # $1 journal $2 page $3 ckpt $4 seed $5 floor
  if [ "$outside" = 1 ]; then
    "$WRITER" run "$db" tde.conf "$1" "$2" "$3" "$4" > log 2> err &
    local pid=$!
    sleep "$(printf '%d.%06d' $((delay / 1000000)) $((delay % 1000000)))"
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  else
    # (a subshell, so that bash's "Killed" notice goes to /dev/null)
    ( timeout -s KILL 60 "$WRITER" run "$db" tde.conf "$1" "$2" "$3" "$4" 0 "$delay" > log 2> err; true ) 2>/dev/null
  fi
  out=; why=
  if [ -s err ]; then why="writer failed: $(cat err)"; return 1; fi
  if ! out=$("$WRITER" check "$db" tde.conf "$4" log "$5" 2> cerr); then why="$out $(cat cerr)"; return 1; fi
  if ! "$CLI" --config tde.conf verify "$db" > vout 2>&1; then why="sqlite-tde verify: $(cat vout)"; return 1; fi
  return 0
}

# One mode over an existing database: $1 journal mode, $2 page size, $3
# explicit checkpoint interval (0 = none).  The database is created and its
# first transaction committed first (no kill); then CYCLES kill cycles.
run_mode(){
  local journal=$1 page=$2 ckpt=$3 name="$1-$2"
  [ "$ckpt" = 0 ] || name="$name-ckpt$ckpt"
  local db="$name.db" i L=1 state mid=0 inckpt=0 idle=0 checks=0 bad=0 delay out why outside
  local seed=$(( (SEED + page * 7 + ckpt * 13 + ${#journal}) % 1000000007 ))
  RANDOM=$seed
  rm -f "$db" "$db-wal" "$db-shm" "$db-journal"
  "$WRITER" run "$db" tde.conf "$journal" "$page" "$ckpt" "$seed" 1 > log
  for i in $(seq 1 "$CYCLES"); do
    delay=$(( (RANDOM * 32768 + RANDOM) % (MAXDELAY_MS * 1000 + 1) ))
    outside=$(( RANDOM % 8 == 0 ))
    if ! cycle "$journal" "$page" "$ckpt" "$seed" "$L"; then
      echo "FAIL - $name cycle $i (delay $delay us, outside $outside): $why"
      mkdir -p "$TDE_TEST_TMP/crash-fail"; cp "$db"* log "$TDE_TEST_TMP/crash-fail/" 2>/dev/null || true
      bad=1; break
    fi
    L=${out#L=}; L=${L%% *}
    state=${out#*state=}; state=${state%% *}
    case $state in
      B) mid=$((mid+1)) ;;
      K) inckpt=$((inckpt+1)) ;;
      *) idle=$((idle+1)) ;;
    esac
    checks=$((checks + L))
  done
  local done_cycles=$(( bad ? i - 1 : CYCLES ))
  # The run is on the format it says (3, or 2 in the format-2 twin).
  if [ $bad = 0 ] &&
     ! "$CLI" --config tde.conf status "$db" 2>&1 | grep -q "^format_version: $FORMAT\$"; then
    echo "FAIL - $name: the database is not format $FORMAT"; bad=1
  fi
  printf '%-4s %-16s cycles %5d  killed: mid-transaction %5d, in explicit checkpoint %4d, between/at startup %4d;  transactions committed %6d, transaction checks %8d\n' \
    "$([ $bad = 0 ] && echo ok || echo FAIL)" "$name" "$done_cycles" "$mid" "$inckpt" "$idle" "$L" "$checks"
  fails=$((fails + bad)); total_cycles=$((total_cycles + done_cycles)); total_mid=$((total_mid + mid))
  total_ckpt=$((total_ckpt + inckpt)); total_tx=$((total_tx + L)); total_checks=$((total_checks + checks))
  rm -f "$db" "$db-wal" "$db-shm" "$db-journal"
}

# Kills while a new database is being created (header, first page, journal
# mode switch, schema): every cycle starts from no file at all.
# KNOWN LIBRARY BUG (reported with issue 7): a kill inside the first
# transaction leaves the 8 KiB header and a hot journal; rolling it back
# leaves a header-only file, and from then on every open fails with
# SQLITE_IOERR ("page 1 failed authentication at every page size") where
# SQLite would see an empty database.  Counted as an expected failure here
# so that `make test` stays green; TDE_CRASH_STRICT=1 (set by make stress)
# makes it fail the run.  When it starts passing the script says so.
create_mode(){  # $1 journal mode, $2 page size
  local journal=$1 page=$2 name="create-$1-$2" db="create.db" i bad=0 delay out why first= outside
  local seed=$(( (SEED + page * 11 + ${#journal}) % 1000000007 ))
  RANDOM=$seed
  for i in $(seq 1 "$CREATE_CYCLES"); do
    rm -f "$db" "$db-wal" "$db-shm" "$db-journal"
    delay=$(( (RANDOM * 32768 + RANDOM) % 20001 )); outside=1
    if ! cycle "$journal" "$page" 0 "$seed" 0; then
      bad=$((bad+1)); [ -n "$first" ] || first="cycle $i (delay $delay us): $why"
    fi
  done
  if [ "$bad" = 0 ]; then
    printf 'ok   %-16s cycles %5d  (known bug no longer reproduces: make this mode strict)\n' "$name" "$CREATE_CYCLES"
  else
    printf 'XFAIL %-15s cycles %5d  %d left a database that cannot be opened; first: %s\n' "$name" "$CREATE_CYCLES" "$bad" "$first"
    xfails=$((xfails+1))
  fi
  total_cycles=$((total_cycles + CREATE_CYCLES - bad))
  rm -f "$db" "$db-wal" "$db-shm" "$db-journal"
}

CREATE_CYCLES=$(( CYCLES >= 4 ? CYCLES / 4 : 1 ))
for page in $PAGES; do
  run_mode delete "$page" 0
  run_mode wal "$page" 0
  run_mode wal "$page" 3
done
create_mode delete 4096
create_mode wal 4096
echo "crash totals: $total_cycles kill -9 cycles survived, $total_mid killed mid-transaction, $total_ckpt in an explicit checkpoint; $total_tx transactions committed, $total_checks transaction checks (each committed transaction re-checked after every later crash), $fails failing mode(s), $xfails known-bug mode(s)"
if [ "$xfails" -gt 0 ] && [ "${TDE_CRASH_STRICT:-0}" = 1 ]; then fails=$((fails + xfails)); fi
[ "$fails" -eq 0 ] || { echo "crash test: FAILED; replay with TDE_CRASH_SEED=$SEED"; exit 1; }
echo "crash test: ok"
