#!/bin/bash
# Format 3 against format 2, load-independent counts: database size, and the
# system calls of the kit's checkpoint and warm-scan workloads (strace -c).
set -e
B=$(realpath ${BUILD:-build}); W=${OUT:-/tmp/tde-format-counts}
COMMON="--seed 1 --rows 200000 --scale 1 --synchronous NORMAL --page-size 4096 --cache-size -65536 --rat-rows 10000 --txn-rows 25000 --suite-rows 20000 --lat-txns 1000"
for v in 2 3; do
  d=$W/v$v; rm -rf $d; mkdir -p $d; cd $d
  printf 'keystore = wallet\nwallet = %s/w.tdew\nformat_version = %s\n' $d $v > tde.conf; chmod 600 tde.conf
  $B/sqlite-tde --config tde.conf keystore create --auto-login >/dev/null
  $B/sqlite-tde-bench driver --op build --db base.db $COMMON --journal DELETE --config tde.conf >/dev/null
  echo "v$v base.db bytes: $(stat -c %s base.db)  side files: $(ls base.db-* 2>/dev/null | tr '\n' ' ')"
  for w in checkpoint warm-scan; do
    cp base.db run.db; rm -f run.db-*
    strace -f -c -e trace=fsync,fdatasync,pread64,pwrite64 -o st-$w.txt \
      $B/sqlite-tde-bench driver --op run --db run.db --seconds 2 $COMMON --journal WAL --workload $w --config tde.conf > out-$w.json
    echo "v$v $w: $(python3 -c "import json,sys; r=json.load(open('out-$w.json')); print({k:r[k] for k in r if k in ('n','ops','count','iterations','units','seconds')})" 2>/dev/null)"
    grep -E "fsync|fdatasync|pread64|pwrite64" st-$w.txt | awk '{print "   ", $NF, $(NF-1) (NF==6? " errors "$5:"")}'
  done
done
