#!/bin/bash
# The archive's S3 client (src/archive/s3.c) against a real S3 server: the
# one-node Ceph cluster and RADOS gateway of tests/lib/s3server.sh, started
# here in a scratch folder and stopped by pid at the end, also on failure.
# Round trips of put/get/head/list/delete, a listing of more than 1000 keys
# (continuation tokens), a 16 MiB object, a wrong secret, an unknown bucket,
# TLS against a wrong CA, a credentials file others can read, a body damaged
# on the way (refused by the server through the headers the client sends),
# the strict XML reader on malformed pages, and the secret key in no output
# or log.  Prints the server's start-up time and the test's total time.
set -u
T0=$EPOCHREALTIME
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${TDE_BUILD:-$root/build}
C=$build/s3_client
[ -x "$C" ] || { echo "FAIL: $C not built (libcurl >= 7.85 missing?)"; exit 1; }
tmp=$(mktemp -d "${TDE_TEST_TMP:-/tmp}/s3client.XXXXXX" 2>/dev/null || mktemp -d)
D=$tmp/server
O=$tmp/out                     # every output of the client, for the secret scan
mkdir -p "$O"
cleanup() {
  [ -d "$D/run" ] && bash "$root/tests/lib/s3server.sh" stop "$D" >/dev/null
  rm -f "$tmp"/big*              # 16 MiB of random bytes each: nothing to inspect or scan
  if [ "${fail:-1}" != 0 ]; then echo "kept for inspection: $tmp"
  elif [ -z "${TDE_KEEP_SCRATCH:-}" ]; then rm -rf "$tmp"   # kept: make test scans it for secrets
  fi
}
trap cleanup EXIT
trap "exit 1" INT TERM HUP
fail=0
n=0
ok()  { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
# run NAME WANT-RC [ARGS...]: the client with the server's settings; its
# stdout and stderr are kept in $O/NAME.out / .err
run() {
  local name=$1 want=$2; shift 2
  n=$((n + 1))
  "$C" --cred "$D/s3.env" "$@" >"$O/$name.out" 2>"$O/$name.err"
  local rc=$?
  if [ "$rc" != "$want" ]; then
    bad "$name: exit $rc, want $want: $(head -c 400 "$O/$name.err")"
    return 1
  fi
  return 0
}

start_out=$(bash "$root/tests/lib/s3server.sh" start "$D" 2>&1)
rc=$?
echo "$start_out"
[ $rc = 0 ] || { bad "the S3 server did not start"; exit 1; }
[ "$(stat -c %a "$D/s3.env")" = 600 ] && ok "s3.env is mode 600" || bad "s3.env mode $(stat -c %a "$D/s3.env")"
export S3_ENDPOINT S3_REGION S3_BUCKET S3_CA_FILE
S3_ENDPOINT=$(sed -n 's/^S3_ENDPOINT=//p' "$D/s3.env")
S3_REGION=$(sed -n 's/^S3_REGION=//p' "$D/s3.env")
S3_BUCKET=$(sed -n 's/^S3_BUCKET=//p' "$D/s3.env")
S3_CA_FILE=$(sed -n 's/^S3_CA_FILE=//p' "$D/s3.env")
SECRET=$(sed -n 's/^AWS_SECRET_ACCESS_KEY=//p' "$D/s3.env")
[ ${#SECRET} -ge 20 ] || bad "no secret key in s3.env"
# the secret as a grep pattern file: never on a command line, here either
( umask 077; printf '%s\n' "$SECRET" >"$tmp/secret.pat" )

# --- round trips of a small object --------------------------------------
head -c 100000 /dev/urandom >"$tmp/small"
run put-small 0 put db1/h1/seg/0000000000000001-0000000000000004.seg "$tmp/small" \
  && run get-small 0 get db1/h1/seg/0000000000000001-0000000000000004.seg "$tmp/small.mem" \
  && cmp -s "$tmp/small" "$tmp/small.mem" && ok "put, get to memory: same bytes" || bad "small round trip"
run getfd-small 0 getfd db1/h1/seg/0000000000000001-0000000000000004.seg "$tmp/small.fd" \
  && cmp -s "$tmp/small" "$tmp/small.fd" && ok "get to a file descriptor: same bytes" || bad "getfd"
run head-small 0 head db1/h1/seg/0000000000000001-0000000000000004.seg \
  && [ "$(cat "$O/head-small.out")" = "100000 $(md5sum <"$tmp/small" | cut -c1-32)" ] \
  && ok "head: size and MD5 ETag" || bad "head: $(cat "$O/head-small.out")"
# the same key again replaces the object whole (idempotent put)
head -c 5000 /dev/urandom >"$tmp/small2"
run put-again 0 put db1/h1/seg/0000000000000001-0000000000000004.seg "$tmp/small2" \
  && run get-again 0 get db1/h1/seg/0000000000000001-0000000000000004.seg "$tmp/small2.mem" \
  && cmp -s "$tmp/small2" "$tmp/small2.mem" && ok "put again replaces the object" || bad "put again"
run get-bound 14 get db1/h1/seg/0000000000000001-0000000000000004.seg "$tmp/x" 4999 \
  && grep -q "larger than the 4999 bytes allowed" "$O/get-bound.err" \
  && ok "get over the size bound refused (TDE_RANGE)" || bad "size bound"
# credentials from the environment instead of a file
if (export AWS_ACCESS_KEY_ID=$(sed -n 's/^AWS_ACCESS_KEY_ID=//p' "$D/s3.env")
    export AWS_SECRET_ACCESS_KEY=$SECRET
    "$C" head db1/h1/seg/0000000000000001-0000000000000004.seg >"$O/env.out" 2>"$O/env.err"); then
  ok "credentials from the environment"
else
  bad "credentials from the environment: $(cat "$O/env.err")"
fi
(unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY; "$C" head x >"$O/noenv.out" 2>"$O/noenv.err")
[ $? = 8 ] && grep -q "AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY not set" "$O/noenv.err" \
  && ok "no credentials: a clear error" || bad "no credentials: $(cat "$O/noenv.err")"
run badkey 14 put "../etc/passwd" "$tmp/small" && ok "a key with '..' refused before any request" || true

# --- a listing of more than 1000 keys (continuation tokens) -------------
t=$EPOCHREALTIME
run putmany 0 putmany many/k 1100 || true
run list-many 0 list many/ || true
lines=$(grep -c '^many/k' "$O/list-many.out")
if [ "$lines" = 1100 ] && grep -qx 'count 1100' "$O/list-many.out" \
   && [ "$(grep '^many/k' "$O/list-many.out" | cut -d' ' -f1 | sort -u | wc -l)" = 1100 ] \
   && diff <(grep '^many/k' "$O/list-many.out" | cut -d' ' -f1) \
           <(for i in $(seq 0 1099); do printf 'many/k%06d\n' "$i"; done) >/dev/null; then
  ok "list of 1100 keys: every key once, in order"
else
  bad "list of 1100 keys: $lines lines"
fi
# the gateway saw a second page asked for with the token of the first
grep -q 'continuation-token=' "$D/log/client.rgw.a.log" \
  && ok "the listing used a continuation token" || bad "no continuation token in the gateway's log"
run list-none 0 list nothing-here/ && grep -qx 'count 0' "$O/list-none.out" \
  && ok "list of an empty prefix" || bad "empty list"
printf '  (1100 puts and the listing: %.1f s)\n' "$(python3 -c "print($EPOCHREALTIME - $t)")"

# --- a 16 MiB object -----------------------------------------------------
head -c $((16 << 20)) /dev/urandom >"$tmp/big"
run put-big 0 put db1/h1/base/0000000000000004.base "$tmp/big" \
  && run get-big 0 get db1/h1/base/0000000000000004.base "$tmp/big.mem" $((16 << 20)) \
  && cmp -s "$tmp/big" "$tmp/big.mem" && ok "16 MiB: put, get to memory" || bad "16 MiB to memory"
run getfd-big 0 getfd db1/h1/base/0000000000000004.base "$tmp/big.fd" \
  && cmp -s "$tmp/big" "$tmp/big.fd" && ok "16 MiB: get to a file descriptor" || bad "16 MiB getfd"
run head-big 0 head db1/h1/base/0000000000000004.base \
  && [ "$(cut -d' ' -f1 "$O/head-big.out")" = $((16 << 20)) ] && ok "16 MiB: head" || bad "16 MiB head"

# --- delete --------------------------------------------------------------
run delete-big 0 delete db1/h1/base/0000000000000004.base \
  && run head-deleted 16 head db1/h1/base/0000000000000004.base \
  && grep -q "HTTP 404" "$O/head-deleted.err" && ok "delete, then head: 404 (TDE_NOTFOUND)" || bad "delete"
run get-deleted 16 get db1/h1/base/0000000000000004.base "$tmp/x" \
  && grep -q "HTTP 404 NoSuchKey" "$O/get-deleted.err" && ok "get of a deleted key: NoSuchKey" || bad "get deleted"
run delete-absent 0 delete db1/h1/base/0000000000000004.base && ok "delete of an absent key succeeds" || true
run deleteall 0 deleteall many/ && grep -qx 'deleted 1100' "$O/deleteall.out" \
  && run list-after 0 list many/ && grep -qx 'count 0' "$O/list-after.out" \
  && ok "1100 keys deleted, none listed" || bad "deleteall"

# --- errors --------------------------------------------------------------
# the same file with the secret's last character changed (and that wrong
# secret as a pattern file, for the scan of the error message)
( umask 077; python3 - "$D/s3.env" "$tmp/wrong.env" "$tmp/wrong.pat" <<'PY'
import sys
out, pat = [], None
for line in open(sys.argv[1]):
    if line.startswith("AWS_SECRET_ACCESS_KEY="):
        v = line.rstrip("\n").split("=", 1)[1]
        pat = v[:-1] + ("A" if v[-1] != "A" else "B")
        line = "AWS_SECRET_ACCESS_KEY=" + pat + "\n"
    out.append(line)
open(sys.argv[2], "w").write("".join(out))
open(sys.argv[3], "w").write(pat + "\n")
PY
)
"$C" --cred "$tmp/wrong.env" get db1/h1/seg/0000000000000001-0000000000000004.seg "$tmp/x" \
  >"$O/wrong.out" 2>"$O/wrong.err"
rc=$?
[ $rc = 4 ] && grep -q "HTTP 403 SignatureDoesNotMatch" "$O/wrong.err" \
  && ok "a wrong secret: refused, HTTP 403 SignatureDoesNotMatch (TDE_AUTH)" || bad "wrong secret: rc $rc $(cat "$O/wrong.err")"
grep -qF -f "$tmp/wrong.pat" "$O/wrong.err" "$O/wrong.out" && bad "the wrong secret is in the error message"
run nobucket 16 --bucket no-such-bucket get k "$tmp/x" \
  && grep -q "S3 GET no-such-bucket/k: HTTP 404 NoSuchBucket" "$O/nobucket.err" \
  && ok "an unknown bucket: NoSuchBucket" || bad "unknown bucket: $(cat "$O/nobucket.err")"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj "/CN=other CA" \
  -keyout "$tmp/other.key" -out "$tmp/other.pem" >/dev/null 2>&1
run wrongca 3 --ca "$tmp/other.pem" head db1/h1/seg/0000000000000001-0000000000000004.seg \
  && grep -qi "certificate" "$O/wrongca.err" && ok "TLS with a wrong CA refused: $(cut -c1-120 "$O/wrongca.err")" \
  || bad "wrong CA: $(cat "$O/wrongca.err")"
run systemca 3 --ca none head db1/h1/seg/0000000000000001-0000000000000004.seg \
  && grep -qi "certificate" "$O/systemca.err" && ok "TLS against the system CAs refused" || bad "system CAs"
cp "$D/s3.env" "$tmp/open.env"; chmod 644 "$tmp/open.env"
"$C" --cred "$tmp/open.env" head x >"$O/open.out" 2>"$O/open.err"
[ $? = 8 ] && grep -q "accessible by group or others" "$O/open.err" \
  && ok "a credentials file others can read is refused" || bad "mode check: $(cat "$O/open.err")"
SQLITE_TDE_LOG=stderr "$C" --cred "$D/s3.env" --endpoint https://127.0.0.1:1 head x >"$O/refused.out" 2>"$O/refused.err"
[ $? = 3 ] && grep -q "try 3 of 4" "$O/refused.err" && grep -q "Couldn't connect" "$O/refused.err" \
  && ok "connection refused: 4 tries with backoff, then curl's error" || bad "retries: $(cat "$O/refused.err")"

# --- which answers are tried again ----------------------------------------
# A stand-in on plain HTTP that answers with a fixed status, counting the
# requests: the client's retry rule, not S3 (the real server cannot be made
# to fail on cue).  503 twice then 200: three requests, success; 400 and 403:
# one request each.
cat >"$tmp/flaky.py" <<'PY'
import http.server, sys
plan = [int(x) for x in sys.argv[2].split(",")]
count = open(sys.argv[3], "w")
class H(http.server.BaseHTTPRequestHandler):
    def do_HEAD(self):
        code = plan.pop(0) if len(plan) > 1 else plan[0]
        count.write("%d\n" % code); count.flush()
        self.send_response(code)
        self.send_header("Content-Length", "0" if code >= 300 else "7")
        self.end_headers()
    def log_message(self, *a): pass
srv = http.server.HTTPServer(("127.0.0.1", 0), H)
open(sys.argv[1], "w").write(str(srv.server_address[1]))
srv.serve_forever()
PY
flaky() {  # flaky NAME PLAN WANT-RC WANT-REQUESTS
  rm -f "$tmp/flaky.port"
  python3 "$tmp/flaky.py" "$tmp/flaky.port" "$2" "$tmp/flaky.$1" &
  local pid=$! k=0
  while [ ! -s "$tmp/flaky.port" ] && [ $k -lt 600 ]; do sleep 0.1; k=$((k + 1)); done
  "$C" --cred "$D/s3.env" --endpoint "http://127.0.0.1:$(cat "$tmp/flaky.port")" head k \
    >"$O/flaky-$1.out" 2>"$O/flaky-$1.err"
  local rc=$?
  kill "$pid"; wait "$pid" 2>/dev/null
  local reqs
  reqs=$(wc -l <"$tmp/flaky.$1")
  [ "$rc" = "$3" ] && [ "$reqs" = "$4" ] && ok "HTTP $2: exit $rc after $reqs request(s)" \
    || bad "HTTP $2: exit $rc after $reqs request(s), want $3 after $4: $(cat "$O/flaky-$1.err")"
}
flaky 503 503,503,200 0 3
flaky 500 500 3 4
flaky 400 400 3 1
flaky 403 403 4 1

# --- a body damaged on the way is refused by the server ------------------
# (the headers the client sends: the signed SHA-256 and Content-MD5; curl
# sends a body that does not match them, as a corrupted upload would be)
# curl is not under test: no sanitizer runtime preloaded into it (the ASan
# suite's environment deadlocked it in a futex)
nosan() { env -u LD_PRELOAD -u ASAN_OPTIONS -u UBSAN_OPTIONS "$@"; }
curlcfg() { printf 'user = "%s:%s"\n' "$(sed -n 's/^AWS_ACCESS_KEY_ID=//p' "$D/s3.env")" "$SECRET"; }
printf 'the real body' >"$tmp/body"
sha_other=$(printf 'another body!' | sha256sum | cut -c1-64)
code=$(curlcfg | nosan curl -sS -K - --cacert "$S3_CA_FILE" --aws-sigv4 "aws:amz:$S3_REGION:s3" \
  -H "x-amz-content-sha256: $sha_other" -T "$tmp/body" -o "$O/damaged-sha.body" -w '%{http_code}' \
  "$S3_ENDPOINT/$S3_BUCKET/damaged-sha")
[ "$code" = 400 ] && grep -q XAmzContentSHA256Mismatch "$O/damaged-sha.body" \
  && ok "a body not matching its signed SHA-256: 400 XAmzContentSHA256Mismatch" || bad "sha mismatch: $code"
sha_real=$(sha256sum <"$tmp/body" | cut -c1-64)
md5_other=$(printf 'another body!' | openssl dgst -md5 -binary | base64)
code=$(curlcfg | nosan curl -sS -K - --cacert "$S3_CA_FILE" --aws-sigv4 "aws:amz:$S3_REGION:s3" \
  -H "x-amz-content-sha256: $sha_real" -H "Content-MD5: $md5_other" -T "$tmp/body" \
  -o "$O/damaged-md5.body" -w '%{http_code}' "$S3_ENDPOINT/$S3_BUCKET/damaged-md5")
[ "$code" = 400 ] && grep -q BadDigest "$O/damaged-md5.body" \
  && ok "a body not matching its Content-MD5: 400 BadDigest" || bad "md5 mismatch: $code"
run damaged-none 16 head damaged-sha && run damaged-none2 16 head damaged-md5 \
  && ok "neither damaged body was stored" || bad "a damaged body was stored"

# --- the strict XML reader -----------------------------------------------
x='<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
good="$x<Name>b</Name><Prefix>p/</Prefix><KeyCount>2</KeyCount><IsTruncated>true</IsTruncated>\
<NextContinuationToken>a+b/c=</NextContinuationToken><Contents><Key>p/a&amp;b</Key><Size>5</Size>\
<Owner><ID>x</ID></Owner><ETag>&quot;00ff&quot;</ETag></Contents><Contents><Key>p/&#x41;</Key>\
<Size>0</Size></Contents></ListBucketResult>"
printf '%s' "$good" >"$tmp/good.xml"
"$C" parse "$tmp/good.xml" p/ >"$O/parse-good.out" 2>&1 \
  && [ "$(cat "$O/parse-good.out")" = "$(printf 'p/a&b 5\np/A 0\ncount 2 token %s' "'a+b/c='")" ] \
  && ok "XML: a page with entities, nested and unknown elements" || bad "XML good page: $(cat "$O/parse-good.out")"
i=0
for page in "$x<IsTruncated>false</IsTruncated>" \
            "$x<IsTruncated>true</IsTruncated></ListBucketResult>" \
            "$x<IsTruncated>maybe</IsTruncated></ListBucketResult>" \
            "$x</ListBucketResult>" \
            "$x<IsTruncated>false</IsTruncated><Contents><Size>1</Size></Contents></ListBucketResult>" \
            "$x<IsTruncated>false</IsTruncated><Contents><Key>q/x</Key><Size>1</Size></Contents></ListBucketResult>" \
            "$x<IsTruncated>false</IsTruncated><Contents><Key>p/x</Key><Size>-1</Size></Contents></ListBucketResult>" \
            "$x<IsTruncated>false</IsTruncated><Contents><Key>p/&bogus;</Key><Size>1</Size></Contents></ListBucketResult>" \
            "$x<IsTruncated>false</IsTruncated><Contents><Key>p/x</Key><Size>1</Size></Contentz></ListBucketResult>" \
            "$x<IsTruncated>false</IsTruncated><!-- c --></ListBucketResult>" \
            "$x<IsTruncated>false</IsTruncated></ListBucketResult x=\"1\">" \
            "$x<IsTruncated>false</IsTruncated></ListBucketResult>trailing" \
            "<Error><Code>AccessDenied</Code></Error>"; do
  i=$((i + 1))
  printf '%s' "$page" >"$tmp/bad$i.xml"
  "$C" parse "$tmp/bad$i.xml" p/ >"$O/parse-bad$i.out" 2>&1
  rc=$?
  [ $rc = 3 ] && grep -q "not a ListObjectsV2 result" "$O/parse-bad$i.out" || bad "XML malformed page $i accepted (rc $rc)"
done
ok "XML: $i malformed pages refused"

# --- the secret in no output and no log ------------------------------------
# (s3.env is the one file meant to hold it)
grep -qF -f "$tmp/secret.pat" "$D/s3.env" || bad "the scan finds the secret not even in s3.env"
hits=$(grep -rlF -f "$tmp/secret.pat" "$O" "$D/log" "$D/run" "$D/rgw" 2>/dev/null)
[ -z "$hits" ] && ok "the secret key is in none of $(ls "$O" | wc -l) outputs and $(ls "$D/log" | wc -l) server logs" \
  || bad "the secret key appears in: $hits"
grep -qF -f "$tmp/secret.pat" <<<"$start_out" && bad "the secret key is in the server's start output"

pids=$(cat "$D"/run/{mon.a,osd.0,client.rgw.a}.pid)
bash "$root/tests/lib/s3server.sh" stop "$D" >"$O/stop.out" 2>&1 || bad "stop failed"
for f in "$D"/run/{mon.a,osd.0,client.rgw.a}.pid; do [ -e "$f" ] && bad "pid file $f left after stop"; done
for p in $pids; do kill -0 "$p" 2>/dev/null && bad "daemon $p still runs after stop"; done
[ $fail = 0 ] && ok "server stopped, no daemon left"
printf 'test_s3_client: %d client runs; server %s; total %.1f s\n' "$n" \
  "$(grep -o 'started in [0-9.]* s' <<<"$start_out")" "$(python3 -c "print($EPOCHREALTIME - $T0)")"
exit $fail
