#!/bin/sh
# Throwaway certificates for a test setup of the encrypted standby
# (README "Standby"): a CA, the standby's server certificate and the
# primary's client certificate, with openssl, plus the two replication
# configuration files.  Not for production: the CA key sits next to them.
#
#   scripts/standby-certs.sh DIR [STANDBY_HOST] [PRIMARY_NAME]
#
# STANDBY_HOST (default 127.0.0.1) is the name or IP address the shipper's
# --to uses; PRIMARY_NAME (default primary) the name in the primary's
# certificate, which the standby checks.  Writes DIR/ca.crt, ca.key,
# standby.crt/.key, primary.crt/.key (keys mode 0600), the primary's
# Ed25519 record-signing key sign.key (0600) and its public key sign.pub,
# ship.conf and standby.conf, and prints the SHA-256 pins of the TLS keys.
set -eu
dir=${1:?usage: standby-certs.sh DIR [STANDBY_HOST] [PRIMARY_NAME]}
host=${2:-127.0.0.1}
prim=${3:-primary}
umask 077
mkdir -p "$dir"
cd "$dir"
case $host in
  *[!0-9.]*) case $host in *:*) san="IP:$host" ;; *) san="DNS:$host" ;; esac ;;
  *) san="IP:$host" ;;
esac
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
key ca.key
openssl req -x509 -new -key ca.key -out ca.crt -days 30 -subj "/CN=sqlite-tde standby test CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
leaf() {   # name CN SAN EKU
  key "$1.key"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$2" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nsubjectAltName=%s\nextendedKeyUsage=%s\n' \
    "$3" "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
    -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
leaf standby "$host" "$san" serverAuth
leaf primary "$prim" "DNS:$prim" clientAuth
rm -f ca.srl
openssl genpkey -algorithm ed25519 -out sign.key 2>/dev/null
openssl pkey -in sign.key -pubout -out sign.pub
chmod 644 ca.crt standby.crt primary.crt sign.pub
pin() { openssl pkey -in "$1" -pubout -outform DER | openssl dgst -sha256 -r | cut -d' ' -f1; }
cat > ship.conf <<CONF
# sqlite-tde ship --repl-config ship.conf (the primary side)
repl_ca = ca.crt
repl_cert = primary.crt
repl_key = primary.key
repl_peer_pubkey_sha256 = $(pin standby.key)
repl_sign_key = sign.key
CONF
cat > standby.conf <<CONF
# sqlite-tde standby --repl-config standby.conf
repl_ca = ca.crt
repl_cert = standby.crt
repl_key = standby.key
repl_peer_name = $prim
repl_peer_pubkey_sha256 = $(pin primary.key)
repl_primary_pubkey = sign.pub
CONF
chmod 644 ship.conf standby.conf
echo "standby public key SHA-256: $(pin standby.key)"
echo "primary public key SHA-256: $(pin primary.key)"
