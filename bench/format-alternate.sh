#!/bin/bash
# After bench/format-counts.sh (same OUT): alternating runs of the kit's driver, format 2 and 3 (same data set), for medians.
B=$(realpath ${BUILD:-build}); W=${OUT:-/tmp/tde-format-counts}
COMMON="--seed 1 --rows 200000 --scale 1 --synchronous NORMAL --page-size 4096 --cache-size -65536 --rat-rows 10000 --txn-rows 25000 --suite-rows 20000 --lat-txns 1000"
for i in $(seq 1 ${N:-9}); do
  for v in 2 3; do
    cd $W/v$v
    for w in ${WL:-checkpoint warm-scan insert}; do
      cp base.db run.db; rm -f run.db-*
      $B/sqlite-tde-bench driver --op run --db run.db --seconds 2 $COMMON --journal WAL --workload $w --config tde.conf > a-$w-${TAG:-}$i.json
    done
  done
done
