"""Shared pieces of the encrypted-standby integration tests
(test_standby*.py): a wallet configuration, the test certificates
(scripts/standby-certs.sh) and TLS contexts, the writer workload, process
control by pid, state-file readers, a fault-injecting proxy (terminating
TLS on both sides, so it can fault whole messages inside the
authenticated session), and the checks on a standby copy.  Real processes, real sockets (127.0.0.1 only),
the system SQLite through Python's sqlite3 module with tde.so loaded."""

import hashlib
import os
import random
import signal
import socket
import ssl
import sqlite3
import struct
import subprocess
import sys
import tempfile
import threading
import time

BUILD = os.environ.get("TDE_BUILD") or sys.exit("set TDE_BUILD")
TMP = os.environ.get("TDE_TEST_TMP", "/tmp")
CLI = os.path.join(BUILD, "sqlite-tde")
EXT = os.path.join(BUILD, "tde")
PY = "/usr/bin/python3"
CERTS_SH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "standby-certs.sh")
CERTS = None        # the folder certs() made: ca.crt, standby.*, primary.*, ship.conf, standby.conf

NFAIL = 0
NPASS = 0

# TDE_TEST_FORMAT=2: the format-2 twins (tests/CMakeLists.txt) create their
# databases as version 2 (make_config writes format_version = 2; without it
# new databases are version 3, the default), and start_ship checks that each
# primary it ships really is of that version, so a twin that silently ran
# the default fails.
FORMAT = os.environ.get("TDE_TEST_FORMAT", "")
FORMAT_CHECKED = set()


def ok(msg):
    global NPASS
    NPASS += 1
    print("  ok    " + msg, flush=True)


def bad(msg):
    global NFAIL
    NFAIL += 1
    print("  FAIL  " + msg, flush=True)


def check(cond, msg):
    (ok if cond else bad)(msg)
    return cond


def step(msg):
    print("\n== " + msg, flush=True)


def finish(name):
    if FORMAT and not FORMAT_CHECKED:
        bad("TDE_TEST_FORMAT=%s: no primary's format version was checked" % FORMAT)
    print("\n%s: %d passed, %d failed" % (name, NPASS, NFAIL), flush=True)
    sys.exit(1 if NFAIL else 0)


def workdir(name):
    os.makedirs(TMP, exist_ok=True)
    d = tempfile.mkdtemp(prefix=name + ".", dir=TMP)
    print("%s: working in %s" % (name, d), flush=True)
    return d


def make_config(d, version=None):
    """A wallet configuration in d; version: the format_version of new
    databases (default TDE_TEST_FORMAT, else the library's default, 3)."""
    version = version or FORMAT
    cfg = os.path.join(d, "tde.conf")
    with open(cfg, "w") as f:
        # The folders the tests keep standby copies in (README "Standby"):
        # a -tdestandby file counts only there.
        f.write("keystore = wallet\nwallet = %s/tde.wallet\nstandby_copies = sb:sb2:sb3:sb4\n" % d)
        if version:
            f.write("format_version = %s\n" % version)
    subprocess.run([CLI, "--config", cfg, "keystore", "create", "--auto-login"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return cfg


_boot = None


def load_ext():
    global _boot
    if _boot is None:
        _boot = sqlite3.connect(":memory:")
        _boot.enable_load_extension(True)
        _boot.load_extension(EXT)
    return _boot


def connect(path, cfg, ro=False):
    load_ext()
    uri = "file:%s?vfs=tde&tde_config=%s%s" % (path, cfg, "&mode=ro" if ro else "")
    db = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=30)
    return db


def certs(d, sub="certs", host="127.0.0.1", primary="primary"):
    """Make the throwaway CA and certificates with the helper script; the
    first call's folder becomes the default of start_ship/start_standby."""
    global CERTS
    c = os.path.join(d, sub)
    r = subprocess.run(["sh", CERTS_SH, c, host, primary], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("standby-certs.sh failed: %s" % r.stderr)
    if CERTS is None:
        CERTS = c
    return c


def tls_client(name="primary", folder=None, ca=None):
    """A client context presenting folder/name.crt (the primary's, by default)."""
    f = folder or CERTS
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(ca or os.path.join(f, "ca.crt"))
    if name:
        ctx.load_cert_chain(os.path.join(f, name + ".crt"), os.path.join(f, name + ".key"))
    return ctx


def tls_server(name="standby", folder=None):
    """A server context presenting folder/name.crt, requiring a client certificate."""
    f = folder or CERTS
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_verify_locations(os.path.join(f, "ca.crt"))
    ctx.load_cert_chain(os.path.join(f, name + ".crt"), os.path.join(f, name + ".key"))
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def connect_standby(port, timeout=10, ctx=None, tls=True):
    """A connection to a standby as the primary would open it (TLS with the
    primary's certificate unless tls is False or ctx says otherwise)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    if not tls:
        return s
    return (ctx or tls_client()).wrap_socket(s, server_hostname="127.0.0.1")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


# ---- the writer ----------------------------------------------------------

WRITER = r'''
import sqlite3, sys, time, random
ext, path, cfg, n, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
pins = float(sys.argv[6]) if len(sys.argv) > 6 else 0.5   # share of transactions that insert a row
b = sqlite3.connect(":memory:"); b.enable_load_extension(True); b.load_extension(ext)
db = sqlite3.connect("file:%s?vfs=tde&tde_config=%s" % (path, cfg), uri=True, isolation_level=None, timeout=30)
db.execute("PRAGMA journal_mode=WAL")
db.execute("PRAGMA synchronous=FULL")
db.execute("PRAGMA journal_size_limit=65536")
db.execute("CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v TEXT)")
db.execute("CREATE TABLE IF NOT EXISTS acct(id INTEGER PRIMARY KEY, bal INTEGER)")
if db.execute("SELECT count(*) FROM acct").fetchone()[0] == 0:
    db.execute("BEGIN"); db.executemany("INSERT INTO acct VALUES(?,1000)", [(i,) for i in range(10)]); db.execute("COMMIT")
rnd = random.Random(seed)
modes = ["PASSIVE", "FULL", "RESTART", "TRUNCATE"]
i = 0
nid = db.execute("SELECT coalesce(max(id),0) FROM t").fetchone()[0]
end = n if n > 0 else 1 << 60
while i < end:
    i += 1
    db.execute("BEGIN IMMEDIATE")
    # Half the transactions only move money: they leave page 1 as it is,
    # so a standby reader sees them only through the change counter.
    if rnd.random() < pins:
        nid += 1
        db.execute("INSERT INTO t VALUES(?,?)", (nid, "CANARY-7f3a-%d-" % nid + "x" * rnd.randint(10, 3000)))
    a, c = rnd.randrange(10), rnd.randrange(10)
    amt = rnd.randint(1, 50)
    db.execute("UPDATE acct SET bal=bal-? WHERE id=?", (amt, a))
    db.execute("UPDATE acct SET bal=bal+? WHERE id=?", (amt, c))
    db.execute("COMMIT")
    if i % 37 == 0:
        db.execute("PRAGMA wal_checkpoint(%s)" % modes[(i // 37) % 4]).fetchall()
    if n <= 0:
        time.sleep(rnd.random() * 0.004)
print(i, flush=True)
'''


READER = r'''
import sqlite3, sys, os, time, json
ext, path, cfg, stopfile = sys.argv[1:5]
b = sqlite3.connect(":memory:"); b.enable_load_extension(True); b.load_extension(ext)
db = sqlite3.connect("file:%s?vfs=tde&tde_config=%s" % (path, cfg), uri=True, isolation_level=None, timeout=60)
n = bad = errs = 0
seen = set()
last = None
while True:
    stopping = os.path.exists(stopfile)
    try:
        db.execute("BEGIN")
        bal = db.execute("SELECT sum(bal) FROM acct").fetchone()[0]
        cnt, mx, mn = db.execute("SELECT count(*), coalesce(max(id),0), coalesce(min(id),1) FROM t").fetchone()
        acct = "|".join(str(r[0]) for r in db.execute("SELECT bal FROM acct ORDER BY id"))
        db.execute("COMMIT")
        n += 1
        seen.add((cnt, acct))
        last = [cnt, acct]
        if bal != 10000 or cnt != mx or mn != 1:
            bad += 1
            print("inconsistent: bal=%s count=%s max=%s min=%s" % (bal, cnt, mx, mn), file=sys.stderr)
    except sqlite3.Error as e:
        errs += 1
        print("error: %s" % e, file=sys.stderr)
        try:
            db.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        time.sleep(0.01)
    if stopping:
        break
print(json.dumps({"reads": n, "inconsistent": bad, "errors": errs, "distinct": len(seen), "last": last}))
'''


def start_reader(d, db, cfg, stopfile, i):
    p = os.path.join(d, "reader.py")
    if not os.path.exists(p):
        with open(p, "w") as f:
            f.write(READER)
    return subprocess.Popen([PY, p, EXT, db, cfg, stopfile], stdout=subprocess.PIPE,
                            stderr=open(os.path.join(d, "reader%d.err" % i), "w"), text=True)


def write_writer(d):
    p = os.path.join(d, "writer.py")
    with open(p, "w") as f:
        f.write(WRITER)
    return p


def run_writer(d, db, cfg, n, seed=1, pins=0.5):
    r = subprocess.run([PY, os.path.join(d, "writer.py"), EXT, db, cfg, str(n), str(seed), str(pins)],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        bad("writer failed: %s" % r.stderr[-2000:])
    return r


def start_writer(d, db, cfg, seed):
    return subprocess.Popen([PY, os.path.join(d, "writer.py"), EXT, db, cfg, "0", str(seed)],
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "writer.err"), "a"))


def start_standby(d, db, port, log="standby.log", conf=None, extra=()):
    """conf: a replication configuration (default CERTS/standby.conf), or
    "insecure" for --insecure-no-tls."""
    tls = ["--insecure-no-tls"] if conf == "insecure" else ["--repl-config", conf or os.path.join(CERTS, "standby.conf")]
    p = subprocess.Popen([CLI, "standby", "--listen", "127.0.0.1:%d" % port] + tls + list(extra) + [db],
                         stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, log), "a"))
    wait_listening(p, port)
    return p


def wait_listening(p, port, limit=300):
    """Until process p listens on 127.0.0.1:port (ss, no connection made: a
    probe would be a peer in the standby's log) or has ended.  A loaded
    machine (ASan, busy loops beside the suite) may take seconds to start
    it; no test decides anything by how long this took."""
    t0 = time.time()
    while p.poll() is None and time.time() - t0 < limit:
        out = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True, check=True).stdout
        if any(f.endswith(":%d" % port) for ln in out.splitlines() for f in ln.split()[3:4]):
            return
        time.sleep(0.05)


def format_version(db, cfg):
    """The format version `sqlite-tde status` reports for db ("" if none)."""
    r = subprocess.run([CLI, "--config", cfg, "status", db], capture_output=True, text=True, timeout=120)
    for ln in r.stdout.splitlines():
        if ln.startswith("format_version: "):
            return ln.split(": ", 1)[1].strip()
    return ""


def check_format(db, cfg):
    """Under TDE_TEST_FORMAT, db must be of that format version (once per db)."""
    if FORMAT and db not in FORMAT_CHECKED and os.path.exists(db):
        FORMAT_CHECKED.add(db)
        v = format_version(db, cfg)
        check(v == FORMAT, "TDE_TEST_FORMAT=%s: the primary %s is format version %s" % (FORMAT, os.path.basename(db), v))


def start_ship(d, db, cfg, ports, log="ship.log", cycle=20, env=None, conf=None, extra=()):
    """`sqlite-tde ship`; cfg is not passed: the shipper needs no keystore
    (it is used only to check the primary's format under TDE_TEST_FORMAT)."""
    check_format(db, cfg)
    tls = ["--insecure-no-tls"] if conf == "insecure" else ["--repl-config", conf or os.path.join(CERTS, "ship.conf")]
    args = [CLI, "ship", "--cycle-ms", str(cycle)] + tls + list(extra)
    for p in ports:
        args += ["--to", "127.0.0.1:%d" % p]
    return subprocess.Popen(args + [db], stdout=subprocess.DEVNULL,
                            stderr=open(os.path.join(d, log), "a"),
                            env=dict(os.environ, **env) if env else None)


def kill9(p):
    if p and p.poll() is None:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()


def stop(p):
    if p and p.poll() is None:
        os.kill(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            kill9(p)


def read_state(path):
    """key=value state file, checksum verified; {} if missing or damaged."""
    try:
        data = open(path, "rb").read()
    except OSError:
        return {}
    i = data.find(b"\nsha256=")
    if i < 0 or hashlib.sha256(data[:i + 1]).hexdigest().encode() != data[i + 8:i + 72]:
        return {}
    out = {}
    for line in data[:i].decode().split("\n")[1:]:
        if "=" in line:
            k, v = line.split("=", 1)
            out[k] = v
    return out


# ---- a fake primary (crafted records, test_standby.py) ------------------

def wire_msg(t, body):
    h = bytes([t]) + struct.pack(">I", len(body))
    return h + body + hashlib.sha256(h + body).digest()


def wire_recv(s):
    """(type, body) of the next message, (None, None) if the peer closed."""
    def need(n):
        b = b""
        while len(b) < n:
            try:
                c = s.recv(n - len(b))
            except OSError:
                return None
            if not c:
                return None
            b += c
        return b
    h = need(5)
    if h is None:
        return None, None
    n = struct.unpack(">I", h[1:5])[0]
    b = need(n + 32)
    return (None, None) if b is None else (h[0], b[:n])


def craft_rec(seq, frames, pgsz, flags=0, hdr=b"", kind=1, salt=b"\0" * 8):
    """A spool record with a valid checksum.  frames: (pgno, commit, data)
    or (pgno, commit, data, salt)."""
    payload = hdr
    for f in frames:
        payload += struct.pack(">II", f[0], f[1]) + (f[3] if len(f) > 3 else salt) + b"\0" * 8 + f[2]
    h = bytearray(96)
    h[0:8] = b"TDESREC1"
    h[8:16] = struct.pack(">Q", seq)
    h[16] = kind
    h[17] = flags
    h[20:24] = struct.pack(">I", pgsz)
    h[24:32] = salt
    h[44:48] = struct.pack(">I", len(frames))
    h[48:56] = struct.pack(">Q", int(time.time() * 1000))
    h[88:92] = struct.pack(">I", len(payload))
    r = bytes(h) + payload
    return r + hashlib.sha256(r).digest()


def sign(data, key=None):
    """Ed25519 signature of data with key (default CERTS/sign.key), by the
    openssl command."""
    # a file: openssl 3.0 needs the size of a one-shot (Ed25519) input
    with tempfile.NamedTemporaryFile(dir=TMP) as f:
        f.write(data)
        f.flush()
        r = subprocess.run(["openssl", "pkeyutl", "-sign", "-rawin", "-inkey", key or os.path.join(CERTS, "sign.key"),
                            "-in", f.name], capture_output=True, check=True)
    return r.stdout


def chain_next(prev, rec):
    """The record chain after rec (a whole spool record) from prev."""
    return hashlib.sha256(b"TDECHN1\0" + prev + rec[-32:]).digest()


def head_msg(dbid, history, seq, chain, key=None):
    """A HEAD message (type 11): the signed chain head."""
    body = b"TDEHEAD1" + dbid + history + struct.pack(">Q", seq) + chain + struct.pack(">Q", int(time.time() * 1000))
    return wire_msg(11, body + sign(body, key))


def fake_primary(port, dbid, make_recs, timeout=10, ctx=None, history=b"\x07" * 16, last=1, chain=None, key=None):
    """Say hello as database dbid (bytes), send the records make_recs(applied)
    returns, and report what the standby answered: a list of message types
    until it closed the connection (or timeout).  Over TLS with the
    primary's certificate (ctx): crafted messages inside an authenticated
    session."""
    s = connect_standby(port, timeout, ctx)
    s.sendall(wire_msg(1, b"TDEWIRE1" + dbid + history + b"\0" * 32 + struct.pack(">Q", last)))
    t, b = wire_recv(s)
    if t != 2:
        s.close()
        return ["no HELLO_OK: %s" % t]
    applied = struct.unpack(">Q", b[:8])[0]
    recs = make_recs(applied)
    for r in recs:
        s.sendall(wire_msg(4, r))
    if chain is not None and recs:
        # Sign the head of what was sent (a test double holding the key):
        # the standby then validates the records themselves.
        c = chain
        for r in recs:
            c = chain_next(c, r)
        s.sendall(head_msg(dbid, history, applied + len(recs), c, key))
    got = []
    while True:
        t, b = wire_recv(s)
        if t is None:
            break
        got.append(t)
    s.close()
    return got


def fake_base(port, dbid, data, timeout=10, ctx=None, key=None):
    """Say hello as database dbid to a standby with no copy and send data as
    its base copy; the message types the standby answered until it closed."""
    s = connect_standby(port, timeout, ctx)
    s.sendall(wire_msg(1, b"TDEWIRE1" + dbid + b"\x07" * 16 + b"\0" * 32 + struct.pack(">Q", 1)))
    t, b = wire_recv(s)
    if t != 2:
        s.close()
        return ["no HELLO_OK: %s" % t]
    s.sendall(wire_msg(7, struct.pack(">Q", 1) + b"\x07" * 16 + struct.pack(">QQ", len(data), 0) + b"\0" * 8))
    if data:
        s.sendall(wire_msg(8, struct.pack(">Q", 0) + data))
    digest = hashlib.sha256(data).digest()
    if key is False:
        s.sendall(wire_msg(9, digest))            # unsigned
    else:
        chain = b"\x11" * 32
        signed = (b"TDEBASE1" + dbid + b"\x07" * 16 + struct.pack(">QQ", 1, len(data)) + digest + chain +
                  struct.pack(">Q", 0))
        s.sendall(wire_msg(9, digest + chain + sign(signed, key)))
    got = []
    while True:
        t, b = wire_recv(s)
        if t is None:
            break
        got.append(t)
    s.close()
    return got


def wait_caught_up(primary, standby, timeout=300):
    """Wait until the standby applied everything the shipper captured, and
    the shipper has run a cycle after the workload.  Returns the seq, or
    None after timeout seconds.  It returns as soon as the standby caught
    up: the bound only ends a wait that would never succeed, and is sized
    for a loaded 2-core machine under ASan (a 60 s bound failed there once
    after the fault injection, whose reconnections back off)."""
    t0 = time.time()
    last = None
    while time.time() - t0 < timeout:
        sh = read_state(primary + "-tdeship-state")
        sb = read_state(standby + "-tdestandby")
        if sh and sb and int(sh.get("updated_ms", 0)) > (t0 * 1000 + 300):
            cap, app = int(sh["captured_seq"]), int(sb.get("applied_seq", -1))
            if cap == app:
                if last == cap:
                    return cap
                last = cap
        time.sleep(0.3)
    return None


def accounts(path, cfg):
    db = connect(path, cfg)
    try:
        return "|".join(str(r[0]) for r in db.execute("SELECT bal FROM acct ORDER BY id"))
    finally:
        db.close()


def rows(path, cfg):
    db = connect(path, cfg)
    try:
        ids = [r[0] for r in db.execute("SELECT id FROM t ORDER BY id")]
        h = hashlib.sha256()
        for r in db.execute("SELECT id, v FROM t ORDER BY id"):
            h.update(("%d|%s\n" % r).encode())
        bal = db.execute("SELECT sum(bal) FROM acct").fetchone()[0]
        integ = db.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        db.close()
    return ids, h.hexdigest(), bal, integ


def no_plaintext(files, canary=b"CANARY-7f3a"):
    hits = []
    for f in files:
        try:
            if canary in open(f, "rb").read():
                hits.append(f)
        except OSError:
            pass
    return hits


# ---- a TCP proxy that can misbehave ---------------------------------------

class Proxy:
    """Forwards 127.0.0.1:listen -> 127.0.0.1:target.  In the primary ->
    standby direction it parses the wire messages (type, length, body,
    SHA-256) and, by mode, cuts connections, drops, duplicates, reorders
    or corrupts TXN messages (type 4)."""

    def __init__(self, listen, target, seed=7, tls=True, raw=False):
        self.listen, self.target = listen, target
        self.raw = raw      # no framing: each chunk read goes to _fault whole
        # TLS on both legs: the standby's certificate towards the shipper,
        # the primary's towards the standby (a test double holding both).
        self.tls = (tls_server("standby"), tls_client("primary")) if tls else None
        self.mode = "pass"
        self.last_mode = "pass"     # the first TXN in a new mode always gets the fault
        self.rnd = random.Random(seed)
        self.counts = {"drop": 0, "dup": 0, "reorder": 0, "corrupt": 0, "cut": 0}
        self.conns = []
        self.lock = threading.Lock()
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", listen))
        self.srv.listen(8)
        self.alive = True
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self):
        with self.lock:
            for c in self.conns:
                for s in c:
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    s.close()
            self.conns = []
            self.counts["cut"] += 1

    def close(self):
        self.alive = False
        self.cut()
        self.srv.close()

    def _accept(self):
        while self.alive:
            try:
                a, _ = self.srv.accept()
            except OSError:
                return
            try:
                if self.tls:
                    a.settimeout(10)
                    a = self.tls[0].wrap_socket(a, server_side=True)
                b = socket.create_connection(("127.0.0.1", self.target), timeout=5)
                if self.tls:
                    b = self.tls[1].wrap_socket(b, server_hostname="127.0.0.1")
            except (OSError, ssl.SSLError):
                a.close()
                continue
            with self.lock:
                self.conns.append((a, b))
            # One thread per connection pair: an SSL object is never used by
            # two threads at once.
            threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _close(*socks):
        # shutdown first: close() alone does not wake a select() on the
        # same socket in another thread
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except (OSError, ValueError):
                pass
            try:
                s.close()
            except OSError:
                pass

    @staticmethod
    def _read(s):
        """Bytes available now (b"" if none), None if the peer closed."""
        out = b""
        while True:
            try:
                d = s.recv(65536)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                return out
            if not d:
                return out if out else None
            out += d
            if not (isinstance(s, ssl.SSLSocket) and s.pending()):
                return out

    @staticmethod
    def _write(s, buf):
        try:
            n = s.send(buf)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
            return buf
        return buf[n:]

    def _fault(self, msg, out):
        """One whole message from the shipper: forwarded, or faulted by mode."""
        h = msg[:5]
        n = len(msg) - 37
        mode = self.mode
        force = mode != self.last_mode
        if h[0] == 4:
            self.last_mode = mode
        if h[0] != 4 or mode == "pass" or (not force and self.rnd.random() > 0.1):
            if self.held:
                out += msg + self.held
                self.held = None
            else:
                out += msg
            return out
        self.counts[mode] += 1
        if mode == "drop":
            return out
        if mode == "dup":
            out += msg + msg
        elif mode == "reorder":
            if self.held:
                out += msg + self.held
                self.held = None
            else:
                self.held = msg
        elif mode == "corrupt":
            m = bytearray(msg)
            m[5 + self.rnd.randrange(max(n, 1))] ^= 0x40
            out += bytes(m)
        return out

    def _pump(self, a, b):
        import select
        a.setblocking(False)
        b.setblocking(False)
        self.held = None
        up = b""            # from the shipper, not yet a whole message
        to_b = b""
        to_a = b""
        try:
            while True:
                ready = [s for s in (a, b) if isinstance(s, ssl.SSLSocket) and s.pending()]
                if not ready:
                    ready, wr, _ = select.select([a, b], [s for s, o in ((a, to_a), (b, to_b)) if o], [], 1.0)
                else:
                    wr = []
                for s in ready:
                    d = self._read(s)
                    if d is None:
                        raise OSError("closed")
                    if s is a and self.raw:
                        to_b = self._fault(d, to_b)
                    elif s is a:
                        up += d
                        while len(up) >= 5:
                            n = struct.unpack(">I", up[1:5])[0]
                            if len(up) < n + 37:
                                break
                            to_b = self._fault(up[:n + 37], to_b)
                            up = up[n + 37:]
                    else:
                        to_a += d
                for s in wr:
                    if s is a:
                        to_a = self._write(a, to_a)
                    else:
                        to_b = self._write(b, to_b)
                if to_b and b not in wr:
                    to_b = self._write(b, to_b)
                if to_a and a not in wr:
                    to_a = self._write(a, to_a)
        except (OSError, ValueError, ssl.SSLError):
            pass
        self._close(a, b)
