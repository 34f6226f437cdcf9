#!/usr/bin/env bash
# A one-node S3 server for the tests: a Ceph monitor, one OSD on memstore and
# the RADOS gateway (radosgw, beast frontend) on 127.0.0.1, everything under
# one scratch folder.  Debian 12's radosgw, ceph-mon, ceph-osd, ceph-common.
#
#   tests/lib/s3server.sh start DIR    prints how long the start took
#   tests/lib/s3server.sh stop DIR     kills the daemons by pid, waits for them
#
# After start, DIR/s3.env (mode 0600) holds, as KEY=VALUE lines:
#   S3_ENDPOINT        https://127.0.0.1:PORT (TLS, certificate DIR/tls/ca.pem)
#   S3_HTTP_ENDPOINT   http://127.0.0.1:PORT (plain HTTP, for diagnosis only)
#   S3_CA_FILE         DIR/tls/ca.pem
#   S3_REGION          the gateway's zonegroup (default)
#   S3_BUCKET          a bucket made for the tests
#   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY   the S3 user's keys
# The secret key is made by radosgw-admin and travels only through files
# (s3.env, curl's config on its stdin): never through a command line.
#
# Never touches /etc/ceph, /var/lib/ceph or systemd: every daemon gets -c
# DIR/ceph.conf, and the config points every path (data, keyrings, logs,
# sockets, pid files) into DIR.  cephx authentication throughout.
#
# Readiness is polled; a wait ends early only when the daemon it waits for
# has died (then its log's tail is printed).  The bounds are generous for a
# loaded 2-core machine.
set -euo pipefail
# The server is not the code under test: under the sanitizer suite the
# tests' environment preloads the ASan runtime, which Ceph (tcmalloc) must
# not get.
unset LD_PRELOAD ASAN_OPTIONS UBSAN_OPTIONS

WAIT_S=${S3SERVER_WAIT_S:-300}

STARTING=0
# A failed start stops what it had started (by pid) before it exits.
die() {
  echo "s3server: $*" >&2
  if [ "$STARTING" = 1 ] && [ -d "$D/run" ]; then STARTING=0; stop >&2; fi
  exit 1
}

PHASES=""
phase() {                       # phase NAME: the seconds since the last phase
  local now=$EPOCHREALTIME
  PHASES+=" $1 $(python3 -c "print('%.1f' % ($now - $T_PHASE))")s"
  T_PHASE=$now
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# alive NAME: the daemon whose pid is in DIR/run/NAME.pid still runs
alive() {
  local pf="$D/run/$1.pid"
  [ -s "$pf" ] && kill -0 "$(cat "$pf")" 2>/dev/null
}

# wait_for NAME WHAT CMD...: polls CMD until it succeeds; gives up when the
# daemon NAME died or after WAIT_S seconds
wait_for() {
  local name=$1 what=$2; shift 2
  local t0=$SECONDS
  until "$@" >/dev/null 2>&1; do
    if ! alive "$name"; then
      echo "s3server: $name died while waiting for $what; its log ends:" >&2
      tail -n 30 "$D/log/$name.log" >&2 2>/dev/null || true
      tail -n 10 "$D/log/$name.out" >&2 2>/dev/null || true
      die "$name died"
    fi
    [ $((SECONDS - t0)) -lt "$WAIT_S" ] || die "no $what after ${WAIT_S}s"
    sleep 0.5
  done
}

# spawn NAME CMD...: starts a daemon in the foreground of its own session,
# records its pid in DIR/run/NAME.pid
spawn() {
  local name=$1; shift
  setsid "$@" </dev/null >"$D/log/$name.out" 2>&1 &
  echo $! >"$D/run/$name.pid"
}

cephc() { timeout 120 ceph -c "$D/ceph.conf" --connect-timeout 60 "$@"; }

start() {
  local t0 fsid monport httpport tlsport
  t0=$EPOCHREALTIME
  T_PHASE=$t0
  for t in ceph ceph-mon ceph-osd radosgw radosgw-admin ceph-authtool monmaptool openssl curl python3; do
    command -v "$t" >/dev/null || die "$t is missing (scripts/deps.sh test installs it)"
  done
  [ ! -e "$D/run" ] || die "$D is in use (stop it first or pick a new folder)"
  mkdir -p "$D"/{run,log,mon,osd,rgw,tls,asok}
  chmod 700 "$D"
  STARTING=1
  fsid=$(python3 -c 'import uuid; print(uuid.uuid4())')
  monport=$(free_port); httpport=$(free_port); tlsport=$(free_port)

  # A certificate for 127.0.0.1, signed by a CA made here
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=sqlite-tde test S3 CA" -keyout "$D/tls/ca.key" -out "$D/tls/ca.pem" \
    >/dev/null 2>&1 || die "openssl: cannot make the CA"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj "/CN=127.0.0.1" -keyout "$D/tls/server.key" -out "$D/tls/server.csr" \
    >/dev/null 2>&1 || die "openssl: cannot make the server key"
  printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' \
    >"$D/tls/ext.cnf"
  openssl x509 -req -in "$D/tls/server.csr" -CA "$D/tls/ca.pem" -CAkey "$D/tls/ca.key" \
    -CAcreateserial -days 2 -extfile "$D/tls/ext.cnf" -out "$D/tls/server.pem" \
    >/dev/null 2>&1 || die "openssl: cannot sign the server certificate"
  chmod 600 "$D"/tls/*.key

  cat >"$D/ceph.conf" <<CONF
[global]
fsid = $fsid
mon_host = v2:127.0.0.1:$monport
ms_bind_msgr1 = false
ms_bind_msgr2 = true
ms_bind_ipv6 = false
public_addr = 127.0.0.1
cluster_addr = 127.0.0.1
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
keyring = $D/keyring
run_dir = $D/run
admin_socket = $D/asok/\$name.asok
pid_file = $D/run/\$name.daemon.pid
log_file = $D/log/\$name.log
log_to_stderr = false
err_to_stderr = true
log_to_syslog = false
crash_dir = $D/crash
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 1
osd_pool_default_pgp_num = 1
osd_crush_chooseleaf_type = 0
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
mon_max_pg_per_osd = 1000
[mon]
mon_data = $D/mon/\$name
mon_cluster_log_file = $D/log/cluster.log
# one node: no need to batch proposals for a second (every pool the gateway
# makes would wait for it)
paxos_propose_interval = 0.05
[osd]
osd_data = $D/osd/\$name
keyring = $D/osd/\$name/keyring
osd_objectstore = memstore
memstore_device_bytes = 1073741824
osd_max_object_name_len = 460
osd_max_object_namespace_len = 64
[client.rgw.a]
keyring = $D/rgw/keyring
rgw_data = $D/rgw
rgw_frontends = beast endpoint=127.0.0.1:$httpport ssl_endpoint=127.0.0.1:$tlsport ssl_certificate=$D/tls/server.pem ssl_private_key=$D/tls/server.key
rgw_enable_usage_log = false
CONF

  # Monitor
  ceph-authtool --create-keyring "$D/mon.keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  ceph-authtool --create-keyring "$D/keyring" --gen-key -n client.admin \
    --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' >/dev/null
  ceph-authtool "$D/mon.keyring" --import-keyring "$D/keyring" >/dev/null
  monmaptool --create --addv a "[v2:127.0.0.1:$monport]" --fsid "$fsid" "$D/monmap" >/dev/null
  ceph-mon -c "$D/ceph.conf" --mkfs -i a --monmap "$D/monmap" --keyring "$D/mon.keyring" \
    >"$D/log/mkfs-mon.out" 2>&1 || { cat "$D/log/mkfs-mon.out" >&2; die "ceph-mon --mkfs failed"; }
  spawn mon.a ceph-mon -c "$D/ceph.conf" -f -i a
  wait_for mon.a "monitor quorum" cephc mon stat
  phase mon

  # One OSD on memstore
  local osduuid osdid
  osduuid=$(python3 -c 'import uuid; print(uuid.uuid4())')
  osdid=$(cephc osd create "$osduuid" 2>/dev/null)
  [ "$osdid" = 0 ] || die "unexpected OSD id '$osdid'"
  mkdir -p "$D/osd/osd.0"
  ceph-osd -c "$D/ceph.conf" --no-mon-config -i 0 --mkfs --mkkey --osd-uuid "$osduuid" \
    >"$D/log/mkfs-osd.out" 2>&1 || { cat "$D/log/mkfs-osd.out" >&2; die "ceph-osd --mkfs failed"; }
  cephc auth add osd.0 osd 'allow *' mon 'allow profile osd' -i "$D/osd/osd.0/keyring" >/dev/null 2>&1
  spawn osd.0 ceph-osd -c "$D/ceph.conf" -f -i 0
  wait_for osd.0 "OSD up" osd_up
  phase osd

  # RADOS gateway
  cephc auth get-or-create client.rgw.a mon 'allow rw' osd 'allow rwx' -o "$D/rgw/keyring" >/dev/null
  spawn client.rgw.a radosgw -c "$D/ceph.conf" -f -n client.rgw.a
  wait_for client.rgw.a "the gateway on 127.0.0.1:$httpport" \
    curl -sf -o /dev/null "http://127.0.0.1:$httpport/"
  phase radosgw

  # The S3 user: radosgw-admin makes the keys; they reach only files
  local user_json="$D/rgw/user.json"
  ( umask 077
    radosgw-admin -c "$D/ceph.conf" -n client.admin user create --uid=tde-test \
      --display-name="sqlite-tde tests" >"$user_json" 2>"$D/log/radosgw-admin.out" ) \
    || { cat "$D/log/radosgw-admin.out" >&2; die "radosgw-admin user create failed"; }
  ( umask 077
    python3 - "$user_json" "$D/s3.env" "$httpport" "$tlsport" "$D/tls/ca.pem" <<'PY'
import json, sys
src, dst, http, tls, ca = sys.argv[1:]
k = json.load(open(src))["keys"][0]
with open(dst, "w") as f:
    f.write(f"S3_ENDPOINT=https://127.0.0.1:{tls}\n"
            f"S3_HTTP_ENDPOINT=http://127.0.0.1:{http}\n"
            f"S3_CA_FILE={ca}\n"
            "S3_REGION=default\n"
            "S3_BUCKET=tde-test\n"
            f"AWS_ACCESS_KEY_ID={k['access_key']}\n"
            f"AWS_SECRET_ACCESS_KEY={k['secret_key']}\n")
PY
  ) || die "cannot write s3.env"
  rm -f "$user_json"
  chmod 600 "$D/s3.env"

  # The bucket, with curl's SigV4 over TLS; the keys go in a config on stdin
  wait_for client.rgw.a "the gateway on TLS" make_bucket
  phase user+bucket
  STARTING=0

  printf 's3server: started in %s s (%s) (https://127.0.0.1:%s, http://127.0.0.1:%s, %s)\n' \
    "$(python3 -c "print('%.1f' % ($EPOCHREALTIME - $t0))")" "${PHASES# }" "$tlsport" "$httpport" "$D"
}

osd_up() { cephc osd stat -f json | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["num_up_osds"] >= 1 else 1)'; }

# curl 7.88 signs the payload's hash only when given this header (RGW needs it)
EMPTY_SHA256=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
make_bucket() {
  local endpoint ca bucket
  endpoint=$(sed -n 's/^S3_ENDPOINT=//p' "$D/s3.env")
  ca=$(sed -n 's/^S3_CA_FILE=//p' "$D/s3.env")
  bucket=$(sed -n 's/^S3_BUCKET=//p' "$D/s3.env")
  python3 - "$D/s3.env" <<'PY' | curl -sS -f -K - --cacert "$ca" --aws-sigv4 "aws:amz:default:s3" \
      -H "x-amz-content-sha256: $EMPTY_SHA256" -X PUT -o /dev/null "$endpoint/$bucket"
import sys
env = dict(l.rstrip("\n").split("=", 1) for l in open(sys.argv[1]) if "=" in l)
print('user = "%s:%s"' % (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]))
PY
}

stop() {
  local name pid n
  [ -d "$D/run" ] || die "$D holds no server"
  # the gateway first, then the OSD, the monitor last
  for name in client.rgw.a osd.0 mon.a; do
    [ -s "$D/run/$name.pid" ] || continue
    pid=$(cat "$D/run/$name.pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      n=0
      while kill -0 "$pid" 2>/dev/null && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
      if kill -0 "$pid" 2>/dev/null; then
        echo "s3server: $name ($pid) ignored SIGTERM for 60 s: SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
        while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
      fi
    fi
    rm -f "$D/run/$name.pid"
  done
  echo "s3server: stopped ($D)"
}

[ $# -eq 2 ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }
mkdir -p "$2"
D=$(cd "$2" && pwd)
case "$1" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
