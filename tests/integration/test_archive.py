"""sqlite-tde archive (docs/ARCHIVE.md) against a real S3 server: the
one-node Ceph cluster and RADOS gateway of tests/lib/s3server.sh, started in
a scratch folder and stopped by pid at the end (also on failure).

A wallet-encrypted WAL database, a writer committing rows that carry a
canary string, and the archiver (`sqlite-tde archive`) reaching the bucket
through a TCP relay this test can cut.  Checks: objects appear under the
documented names; every object, read back with the object codec
(tests/tools/archive_check.c), verifies with the primary's public key;
kill -9 of the archiver mid-run and a restart lose and duplicate nothing
(the segments cover every sequence after the first base copy exactly once
and continue each other's chain); with the bucket unreachable commits go
on, `archive --status` and the audit log say so, and uploads resume when
it is back; no object holds the canary, a piece of the wallet, or the S3
secret; tde.so does not link libcurl.  Prints its timings."""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from standby_common import (BUILD, CLI, bad, check, connect, finish, kill9, make_config, ok, read_state, step,
                            stop, workdir)

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
S3SERVER = os.path.join(ROOT, "tests", "lib", "s3server.sh")
S3C = os.path.join(BUILD, "s3_client")
CHECK = os.path.join(BUILD, "archive_check")
PREFIX = "arch/t1"
CANARY = b"CANARY-7f3a9c-archive"
T0 = time.time()


# ---- a relay to the S3 server that the test can cut -----------------------

class Relay:
    def __init__(self, target_port):
        self.target = target_port
        self.port = None
        self.lsock = None
        self.conns = []
        self.mu = threading.Lock()
        self.up = False

    def start(self):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port or 0))
        s.listen(64)
        self.port = s.getsockname()[1]
        self.lsock = s
        self.up = True
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def _accept(self, s):
        while True:
            try:
                c, _ = s.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                c.close()
                continue
            with self.mu:
                self.conns += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        for x in (a, b):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        """Unreachable: no listener, every open connection reset."""
        self.up = False
        try:
            self.lsock.shutdown(socket.SHUT_RDWR)     # wakes the accepting thread (a close alone does not)
        except OSError:
            pass
        self.lsock.close()
        with self.mu:
            for c in self.conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                    c.close()
                except OSError:
                    pass
            self.conns = []


# ---- helpers ----------------------------------------------------------------

def read_env(path):
    env = {}
    for line in open(path):
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            env[k] = v
    return env


def s3(d, *args):
    e = dict(os.environ)
    s3env = read_env(os.path.join(d, "server", "s3.env"))
    for k in ("S3_ENDPOINT", "S3_REGION", "S3_BUCKET", "S3_CA_FILE"):
        e[k] = s3env[k]
    return subprocess.run([S3C, "--cred", os.path.join(d, "server", "s3.env")] + list(args),
                          capture_output=True, text=True, env=e, timeout=120)


def list_objects(d, prefix=PREFIX + "/"):
    r = s3(d, "list", prefix)
    if r.returncode != 0:
        return None
    return [line.split()[0] for line in r.stdout.splitlines() if not line.startswith("count ")]


def status(d, db):
    r = subprocess.run([CLI, "archive", "--status", db], capture_output=True, text=True, timeout=60)
    out = {}
    for line in r.stdout.splitlines():
        if ": " in line:
            k, v = line.split(": ", 1)
            out[k] = v
    return out


def wait_for(cond, limit, what):
    t = time.time()
    while time.time() - t < limit:
        v = cond()
        if v:
            return v
        time.sleep(0.3)
    bad("timed out (%d s) waiting for %s" % (limit, what))
    return None


class Writer:
    """Commits one row per transaction (with the canary) until stopped;
    records every commit's latency."""

    def __init__(self, db, cfg):
        self.db, self.cfg = db, cfg
        self.n = 0
        self.lat = []
        self.stopping = False
        self.err = None
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        try:
            c = connect(self.db, self.cfg)
            while not self.stopping:
                t = time.time()
                c.execute("INSERT INTO t(v) VALUES (?)", ((CANARY + b" %d " % self.n + b"x" * 300).decode(),))
                self.lat.append((t, time.time() - t))
                self.n += 1
                time.sleep(0.01)
            c.close()
        except Exception as e:          # noqa: BLE001 (reported by the test)
            self.err = repr(e)

    def stop(self):
        self.stopping = True
        self.t.join(60)


def start_archiver(d, db, cfg, log, extra=()):
    f = open(os.path.join(d, log), "ab")
    return subprocess.Popen([CLI, "archive", "--s3", os.path.join(d, "arch.env"),
                             "--prefix", PREFIX, "--sign-key", os.path.join(d, "sign.pem"),
                             "--segment-txns", "25", "--segment-ms", "400", "--cycle-ms", "20", "--max-spool", "1048576"] + list(extra) + [db],
                            stdout=f, stderr=f)


NAME = re.compile(r"^%s/[0-9a-f]{32}/[0-9a-f]{32}/(base/[0-9a-f]{16}\.base|seg/[0-9a-f]{16}-[0-9a-f]{16}\.seg)$"
                  % re.escape(PREFIX))


def check_bucket(d, captured, secrets, nbases):
    """Every object read back and verified; segments cover every sequence
    after the first base copy up to `captured` once, chained."""
    keys = list_objects(d) or []
    check(keys and all(NAME.match(k) for k in keys), "%d objects, all named as docs/ARCHIVE.md says" % len(keys))
    out = os.path.join(d, "objects")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    files = []
    for i, k in enumerate(keys):
        p = os.path.join(out, "%04d" % i)
        r = s3(d, "get", k, p)
        if r.returncode != 0:
            bad("get %s: %s" % (k, r.stderr))
        files.append(p)
    r = subprocess.run([CHECK, os.path.join(d, "pub.pem")] + files, capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, "every object verifies with the primary's public key (object codec)%s"
          % ("" if r.returncode == 0 else ": " + r.stdout[-800:]))
    bases, segs = [], []
    for line in r.stdout.splitlines():
        w = line.split()
        if w[0] == "base":
            bases.append((w[1], int(w[2]), w[4]))
        elif w[0] == "seg":
            segs.append((w[1], int(w[2]), int(w[3]), int(w[4]), w[5], w[6]))
    hists = {b[0] for b in bases}
    check(len(hists) == 1 and len(bases) >= nbases, "one history, %d base copies (want %d or more)" % (len(bases),
                                                                                                   nbases))
    segs.sort(key=lambda s: s[1])
    base0 = min(b[1] for b in bases) if bases else 0
    chain_at = {b[1]: b[2] for b in bases}
    nxt, good, jumps = base0 + 1, True, 0
    for s in segs:
        if s[1] > nxt and s[1] - 1 in chain_at and chain_at[s[1] - 1] == s[4]:
            nxt = s[1]          # the archive continues after a base copy (the spool was trimmed past it)
            jumps += 1
        if s[1] != nxt or s[3] != s[2] - s[1] + 1:
            bad("segment %d..%d where %d was expected (lost or duplicated records)" % (s[1], s[2], nxt))
            good = False
            break
        want = chain_at.get(s[1] - 1)
        if want != s[4]:
            bad("segment %d..%d does not continue the chain before it" % (s[1], s[2]))
            good = False
        chain_at[s[2]] = s[5]
        nxt = s[2] + 1
    if good:
        ok("segments cover %d..%d exactly once, each continuing the chain of the base copy or segment before it "
       "(%d segments)" % (base0 + 1, nxt - 1, len(segs)))
    check(jumps == 1, "the segments start again after a base copy once (the long outage), not after the "
          "periodic ones (%d)" % jumps)
    check(nxt - 1 >= captured, "the bucket holds up to sequence %d (captured %d)" % (nxt - 1, captured))
    blobs = [open(p, "rb").read() for p in files]
    for name, needle in secrets:
        hit = [i for i, b in enumerate(blobs) if needle in b]
        check(not hit, "no object holds %s" % name)


def main():
    d = workdir("archive")
    srv = os.path.join(d, "server")
    timings = {}
    t = time.time()
    r = subprocess.run(["bash", S3SERVER, "start", srv], capture_output=True, text=True)
    print(r.stdout + r.stderr, flush=True)
    if r.returncode != 0:
        bad("the S3 server did not start")
        finish("test_archive")
    timings["s3 server start"] = time.time() - t
    procs = []
    try:
        run(d, srv, procs, timings)
    finally:
        for p in procs:
            kill9(p)
        subprocess.run(["bash", S3SERVER, "stop", srv], capture_output=True)
    for k, v in timings.items():
        print("timing: %s %.1f s" % (k, v))
    print("timing: total %.1f s" % (time.time() - T0))
    import standby_common
    if standby_common.NFAIL == 0 and not os.environ.get("TDE_KEEP_SCRATCH"):
        shutil.rmtree(d, ignore_errors=True)
    elif standby_common.NFAIL:
        print("kept for inspection: %s" % d)
    finish("test_archive")


def run(d, srv, procs, timings):
    step("set-up: wallet, WAL database, signing key, relay to the S3 server")
    env = read_env(os.path.join(srv, "s3.env"))
    tls_port = int(env["S3_ENDPOINT"].rsplit(":", 1)[1])
    relay = Relay(tls_port)
    relay.start()
    with open(os.path.join(d, "arch.env"), "w") as f:
        os.chmod(f.name, 0o600)
        for k, v in env.items():
            if k == "S3_ENDPOINT":
                v = "https://127.0.0.1:%d" % relay.port
            f.write("%s=%s\n" % (k, v))
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", os.path.join(d, "sign.pem")], check=True,
                   capture_output=True)
    os.chmod(os.path.join(d, "sign.pem"), 0o600)
    subprocess.run(["openssl", "pkey", "-in", os.path.join(d, "sign.pem"), "-pubout", "-out",
                    os.path.join(d, "pub.pem")], check=True, capture_output=True)
    cfg = make_config(d)
    db = os.path.join(d, "app.db")
    c = connect(db, cfg)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
    c.close()
    ldd = subprocess.run(["ldd", os.path.join(BUILD, "tde.so")], capture_output=True, text=True).stdout
    check("libcurl" not in ldd, "tde.so does not link libcurl")

    step("refusals: a world-readable S3 file, no signing key")
    loose = os.path.join(d, "loose.env")
    shutil.copy(os.path.join(d, "arch.env"), loose)
    os.chmod(loose, 0o644)
    r = subprocess.run([CLI, "archive", "--s3", loose, "--sign-key", os.path.join(d, "sign.pem"), db],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode != 0 and "chmod 600" in r.stderr, "an S3 file others can read is refused")
    r = subprocess.run([CLI, "archive", "--s3", os.path.join(d, "arch.env"), db],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 or "signed" in r.stderr, "no signing key: refused")
    check(env["AWS_SECRET_ACCESS_KEY"] not in r.stderr, "no secret in the error")

    step("archive while a writer commits")
    w = Writer(db, cfg)
    t = time.time()
    a = start_archiver(d, db, cfg, "archive.log")
    procs.append(a)
    keys = wait_for(lambda: [k for k in (list_objects(d) or []) if "/seg/" in k], 120, "a first segment")
    timings["first segment"] = time.time() - t
    check(keys and any("/base/" in k for k in list_objects(d)), "a base copy and segments appear")

    step("kill -9 of the archiver mid-run, then a restart")
    wait_for(lambda: len([k for k in (list_objects(d) or []) if "/seg/" in k]) >= 3, 120, "three segments")
    kill9(a)
    n_at_kill = w.n
    time.sleep(1.0)
    a = start_archiver(d, db, cfg, "archive.log")
    procs.append(a)
    wait_for(lambda: w.n > n_at_kill + 50, 60, "commits after the restart")

    step("the bucket unreachable while commits go on")
    wait_for(lambda: status(d, db).get("state") == "running", 60, "the archiver running")
    relay.cut()
    t_cut = time.time()
    n_cut = w.n
    st = wait_for(lambda: (lambda s: s if "unreachable" in s.get("note", "") else None)(status(d, db)), 60,
                  "the status to say unreachable")
    if st:
        ok("status while cut: peer %s; note: %s" % (st.get("peer"), st.get("note", "")[:160]))
        check(int(st.get("transport_lag_txn", "0")) > 0, "the status shows the lag: %s txn, %s bytes, %s s" % (
            st.get("transport_lag_txn"), st.get("transport_lag_bytes"), st.get("transport_lag_seconds")))
    time.sleep(3)
    during = [lat for (t0, lat) in w.lat if t0 >= t_cut]
    check(w.n > n_cut + 20, "commits went on while the bucket was unreachable (%d)" % (w.n - n_cut))
    check(during and max(during) < 5.0, "no commit waited for the bucket (slowest %.3f s)" %
          (max(during) if during else -1))
    audit = open(db + "-tdeship-audit").read() if os.path.exists(db + "-tdeship-audit") else ""
    check("archive_unreachable" in audit, "the audit log says the bucket is unreachable")
    relay.start()
    t_back = time.time()
    wait_for(lambda: status(d, db).get("peer", "").find("streaming") >= 0, 120, "uploads to resume")
    timings["resume after the bucket came back"] = time.time() - t_back
    check("archive_restored" in open(db + "-tdeship-audit").read(), "the audit log says it is back")

    step("a long outage: the spool reaches its bound, the archive is left behind and takes a new base copy")
    spool = db + "-tdeship"
    relay.cut()
    t = time.time()
    sizes = []

    def trimmed():
        sizes.append(os.path.getsize(spool))
        return b"trimming it past" in open(os.path.join(d, "archive.log"), "rb").read()
    check(wait_for(trimmed, 300, "the shipper to trim past the archive"), "the shipper trimmed the spool past the "
          "unreachable archive (largest spool seen %.1f MiB)" % (max(sizes) / 2**20))
    check(max(sizes) < 9 * 2**20, "the spool stayed bounded")
    check(w.err is None and w.n > 0, "commits went on")
    relay.start()
    wait_for(lambda: len([k for k in (list_objects(d) or []) if "/base/" in k]) == 2, 120, "a second base copy")
    timings["long outage"] = time.time() - t

    step("a new base copy after --base-every-bytes of segments; the segments go on through it")
    stop(a)
    check(a.returncode == 0, "the archiver stops cleanly on SIGTERM (exit %s)" % a.returncode)
    a = start_archiver(d, db, cfg, "archive.log", ["--base-every-bytes", "150000"])
    procs.append(a)
    t = time.time()
    wait_for(lambda: len([k for k in (list_objects(d) or []) if "/base/" in k]) >= 4, 120, "two periodic base copies")
    timings["two periodic base copies"] = time.time() - t

    step("stop the writer; everything captured reaches the bucket")
    w.stop()
    check(w.err is None, "the writer saw no error (%s)" % w.err)
    st = read_state(db + "-tdeship-state")
    t = time.time()
    wait_for(lambda: (lambda s: int(s.get("transport_lag_txn", "-1")) == 0)(status(d, db)), 120,
             "the archive to catch up")
    timings["catch up"] = time.time() - t
    st = read_state(db + "-tdeship-state")
    captured = int(st.get("captured_seq", "0"))
    stop(a)
    check(a.returncode == 0, "the archiver stops cleanly on SIGTERM (exit %s)" % a.returncode)
    r = subprocess.run([CLI, "ship", "--status", db], capture_output=True, text=True, timeout=60)
    check("role: primary" in r.stdout and "(streaming,acked=%d)" % captured in r.stdout,
          "ship --status shows the archive as a peer with its archived sequence: %s" %
          " / ".join(r.stdout.splitlines()[:4]))

    step("the bucket read back with the object codec")
    wallet = open(os.path.join(d, "tde.wallet"), "rb").read()
    secrets = [("the canary", CANARY), ("the S3 secret", env["AWS_SECRET_ACCESS_KEY"].encode())]
    secrets += [("wallet bytes %d..%d" % (i, i + 32), wallet[i:i + 32]) for i in range(0, len(wallet) - 32, 32)
                if len(set(wallet[i:i + 32])) > 8]
    check_bucket(d, captured, secrets, 4)
    log = open(os.path.join(d, "archive.log"), "rb").read()
    check(env["AWS_SECRET_ACCESS_KEY"].encode() not in log, "no secret in the archiver's log")
    print("commits: %d; captured sequence %d" % (w.n, captured))


if __name__ == "__main__":
    main()
