# PyKMIP test server for the KMIP keystore tests.  Source this file, then:
#
#   kmip_certs DIR          throwaway CA, server certificate (CN and SAN
#                           127.0.0.1), client certificate (CN tde-client,
#                           extendedKeyUsage clientAuth), and for negative
#                           tests a second CA with a client certificate it
#                           signed (rogue-*) and an expired server
#                           certificate (expired-server.pem, key server.key).
#   kmip_server_start DIR [PORT]
#                           write DIR/server.conf (sqlite db in DIR, TLS 1.2,
#                           client auth on, empty policy folder) and start
#                           /usr/bin/python3 -m kmip.services.server on
#                           127.0.0.1 on a free port; waits until it accepts
#                           TLS connections; sets KMIP_PORT and KMIP_PID.
#                           PORT restarts it where it was (keys persist in
#                           DIR/pykmip.db).
#   kmip_server_stop        stop it and its children by its pid, which is
#                           also its process group id (call it from a trap).
#
# Safe under set -e.  Not a test by itself (ctest runs
# tests/integration/test_*.sh only).
# Only the Debian python (/usr/bin/python3) has python3-pykmip.

# Under the sanitizer build ctest preloads the ASan runtime into every host;
# the server and helpers are not ours to instrument.
KMIP_PY="env -u LD_PRELOAD /usr/bin/python3"
KMIP_PID=
KMIP_PORT=

kmip_certs() {
  local d=$1
  mkdir -p "$d"
  (
    cd "$d" || exit 1
    local ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    openssl req -x509 $ec -keyout ca.key -out ca.pem -days 2 -subj "/CN=tde-test-ca" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    openssl req $ec -keyout server.key -out server.csr -subj "/CN=127.0.0.1" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' > server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
      -extfile server.ext -out server.pem 2>/dev/null
    # The same server identity, expired yesterday.
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days -1 \
      -extfile server.ext -out expired-server.pem 2>/dev/null
    openssl req $ec -keyout client.key -out client.csr -subj "/CN=tde-client" 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n' > client.ext
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
      -extfile client.ext -out client.pem 2>/dev/null
    # A client certificate from a CA the server does not trust.
    openssl req -x509 $ec -keyout rogue-ca.key -out rogue-ca.pem -days 2 -subj "/CN=rogue-ca" \
      -addext "basicConstraints=critical,CA:TRUE" 2>/dev/null
    openssl req $ec -keyout rogue-client.key -out rogue-client.csr -subj "/CN=tde-client" 2>/dev/null
    openssl x509 -req -in rogue-client.csr -CA rogue-ca.pem -CAkey rogue-ca.key -CAcreateserial \
      -days 2 -extfile client.ext -out rogue-client.pem 2>/dev/null
    chmod 600 ./*.key
    rm -f ./*.csr ./*.srl
  ) || return 1
  [ -s "$d/server.pem" ] && [ -s "$d/client.pem" ] && [ -s "$d/rogue-client.pem" ] \
    && [ -s "$d/expired-server.pem" ]
}

# A TCP port nothing listens on right now.
kmip_free_port() {
  $KMIP_PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

kmip_server_start() {
  local d=$1 i
  KMIP_PORT=${2:-$(kmip_free_port)}
  mkdir -p "$d/policies"
  cat > "$d/server.conf" <<EOF
[server]
hostname=127.0.0.1
port=$KMIP_PORT
certificate_path=$d/server.pem
key_path=$d/server.key
ca_path=$d/ca.pem
auth_suite=TLS1.2
policy_path=$d/policies
enable_tls_client_auth=True
logging_level=INFO
database_path=$d/pykmip.db
EOF
  # Own session and process group: PyKMIP forks a process per connection,
  # and stopping must reach those too (kill -- -PGID), or they would keep
  # the test's output pipe open.
  env -u LD_PRELOAD setsid /usr/bin/python3 -m kmip.services.server.server -f "$d/server.conf" -l "$d/server.log" \
    >"$d/server.out" 2>&1 </dev/null &
  KMIP_PID=$!
  for i in $(seq 1 600); do            # PyKMIP starts slowly on a busy machine
    if ! kill -0 "$KMIP_PID" 2>/dev/null; then
      echo "kmip_server_start: PyKMIP server exited:" >&2
      tail -20 "$d/server.out" "$d/server.log" >&2 2>/dev/null
      KMIP_PID=
      return 1
    fi
    if env -u LD_PRELOAD openssl s_client -connect "127.0.0.1:$KMIP_PORT" -CAfile "$d/ca.pem" \
         -cert "$d/client.pem" -key "$d/client.key" -verify_return_error \
         </dev/null >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.1
  done
  echo "kmip_server_start: server did not accept connections in 10 s" >&2
  kmip_server_stop
  return 1
}

# Stop the server and the processes it forked: its process group, whose id
# is its pid (setsid above).
kmip_server_stop() {
  if [ -n "$KMIP_PID" ]; then
    kill -- "-$KMIP_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 -- "-$KMIP_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 -- "-$KMIP_PID" 2>/dev/null || true
    wait "$KMIP_PID" 2>/dev/null || true
    KMIP_PID=
  fi
  return 0
}
