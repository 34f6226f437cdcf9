"""Encrypted standby under attack (issue 15): each attack of the issue's
"Why" against `sqlite-tde standby --listen` is reproduced and refused at
the connection, handshake or record level; the standby keeps its copy
unchanged, keeps streaming from the real primary, logs the peer and the
reason, shows the refusal in --status, and ends with exactly the
primary's rows.

  first-peer takeover   a new standby: peers without a certificate, with one
                        of another CA, with the CA's certificate of another
                        name, with the standby's own (server) certificate,
                        in plaintext: all refused; the real primary is not
                        locked out.  A new standby that names no primary
                        does not start.
  hijack                the same peers while a session streams: refused,
                        the session is never replaced or interrupted.
  slow-loris            ten peers dribbling a byte a second (more than the
                        handshake slots), and one with the primary's own
                        certificate dribbling its hello: dropped at their
                        deadline while apply goes on.
  unauthenticated       a plaintext heartbeat claiming a far primary
  heartbeat             sequence: refused; the lag stays honest.
  replayed base copy,   in plaintext with the right database id: refused at
  forged header,        the handshake; from a peer with the primary's
  re-sequenced record   certificate: an older base copy makes the standby
                        'diverged' (no silent rewind, nothing acknowledged)
                        until the operator restarts it with --accept-rewind;
                        without the primary's signing key: a genuine old
                        record re-sequenced, heads signed by another key or
                        for another record, an unsigned heartbeat, a forged
                        base copy (another database, its id patched in):
                        none is logged, applied or acknowledged.
  on-path tampering     a proxy without keys flips bytes of the TLS stream:
                        TLS drops the connection, nothing is applied from it.
  second shipper        refused, naming the running one's pid.

Environment: TDE_BUILD, TDE_TEST_TMP (set by ctest)."""

import hashlib
import os
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standby_common as C  # noqa: E402


def status(db):
    r = subprocess.run([C.CLI, "standby", "--status", db], capture_output=True, text=True)
    return dict(line.split(": ", 1) for line in r.stdout.splitlines() if ": " in line)


def hello(dbid, history=b"\x07" * 16, last=1):
    return C.wire_msg(1, b"TDEWIRE1" + dbid + history + b"\0" * 32 + struct.pack(">Q", last))


def session(port, hello_msg, timeout=15):
    """A session as the primary opens one: (socket, type of the reply to the
    hello).  Retried while the standby is still closing the previous
    session (it answers a hello only when none is live)."""
    t0 = time.time()
    while True:
        s = C.connect_standby(port)
        try:
            s.sendall(hello_msg)
            t, _ = C.wire_recv(s)
        except OSError:
            t = None
        if t == 2 or time.time() - t0 > timeout:
            return s, t
        s.close()
        time.sleep(0.5)


def attempt(port, ctx=None, tls=True, payload=b"", timeout=8):
    """Connect as an attacker, send payload, return (local port, answer):
    the first message type the standby sent, or the error."""
    lport = None
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        lport = s.getsockname()[1]
        if tls:
            s = (ctx or C.tls_client()).wrap_socket(s, server_hostname="127.0.0.1")
        if payload:
            s.sendall(payload)
        t, _ = C.wire_recv(s)
        s.close()
        return lport, t
    except (OSError, ssl.SSLError) as e:
        return lport, "error: %s" % e.__class__.__name__


def refused_in_log(log, lport, timeout=5):
    """The standby's log line refusing the connection from lport."""
    t0 = time.time()
    key = "refusing the connection from 127.0.0.1:%d:" % lport
    while time.time() - t0 < timeout:
        for line in open(log).read().splitlines():
            if key in line:
                return line.split(key, 1)[1].strip()
        time.sleep(0.1)
    return None


def make_impostor(certs):
    """A certificate of the same CA with another name (clientAuth)."""
    run = lambda *a: subprocess.run(list(a), cwd=certs, check=True, capture_output=True)  # noqa: E731
    run("openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "impostor.key")
    run("openssl", "req", "-new", "-key", "impostor.key", "-subj", "/CN=impostor", "-out", "impostor.csr")
    with open(os.path.join(certs, "impostor.ext"), "w") as f:
        f.write("subjectAltName=DNS:impostor\nextendedKeyUsage=clientAuth\n")
    run("openssl", "x509", "-req", "-in", "impostor.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "1", "-extfile", "impostor.ext", "-out", "impostor.crt")


def attackers(certs, rogue):
    """(what, connect kwargs) for every peer that must not get in."""
    nocert = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    nocert.load_verify_locations(os.path.join(certs, "ca.crt"))
    other_ca = C.tls_client("primary", folder=rogue, ca=os.path.join(certs, "ca.crt"))
    return [
        ("no client certificate", dict(ctx=nocert)),
        ("a certificate named 'primary' from another CA", dict(ctx=other_ca)),
        ("a certificate of the CA with another name", dict(ctx=C.tls_client("impostor", folder=certs))),
        ("the standby's own (server) certificate", dict(ctx=C.tls_client("standby", folder=certs))),
        ("plaintext", dict(tls=False)),
    ]


def main():
    d = C.workdir("test_standby_attacks")
    cfg = C.make_config(d)
    certs = C.certs(d)
    rogue = C.certs(d, "rogue")
    make_impostor(certs)
    # The standby's handshake and hello deadline: short, so the slow peers
    # below are dropped within the test.
    sconf = os.path.join(certs, "standby-fast.conf")
    with open(sconf, "w") as f:
        f.write(open(os.path.join(certs, "standby.conf")).read() + "repl_timeout_ms = 2500\n")
    C.write_writer(d)
    pdb = os.path.join(d, "primary.db")
    os.makedirs(os.path.join(d, "sb"))
    sdb = os.path.join(d, "sb", "standby.db")
    slog = os.path.join(d, "standby.log")
    sport = C.free_port()
    C.run_writer(d, pdb, cfg, 40, seed=1)
    dbid = open(pdb, "rb").read()[20:36]

    C.step("a new standby that names no primary does not start")
    bare = os.path.join(d, "bare.conf")
    with open(bare, "w") as f:
        f.write("repl_ca = %s/ca.crt\nrepl_cert = %s/standby.crt\nrepl_key = %s/standby.key\n" % (certs, certs, certs))
    r = subprocess.run([C.CLI, "standby", "--listen", "127.0.0.1:%d" % C.free_port(), "--repl-config", bare,
                        os.path.join(d, "sb", "other.db")], capture_output=True, text=True, timeout=30)
    C.check(r.returncode == 1 and "must name its primary" in r.stderr, "refused: %s" % r.stderr.strip()[:160])

    C.step("first-peer takeover: a new standby refuses every peer but its primary")
    sb = C.start_standby(d, sdb, sport, conf=sconf)
    time.sleep(0.5)
    for what, kw in attackers(certs, rogue):
        lport, got = attempt(sport, payload=hello(dbid), **kw)
        why = refused_in_log(slog, lport) if lport else None
        C.check(got != 2 and why is not None and not os.path.exists(sdb + "-tdestandby"),
                "%s: no HELLO_OK (%s), no copy, logged with its address: %s" % (what, got, why))
    ship = C.start_ship(d, pdb, cfg, [sport])
    seq = C.wait_caught_up(pdb, sdb)
    C.check(seq is not None, "the real primary is not locked out: base copy, caught up at %s" % seq)

    C.step("hijack: the same peers while the session streams, plus plaintext replays with the real database id")
    writer = C.start_writer(d, pdb, cfg, 5)
    time.sleep(1.0)
    a0 = int(C.read_state(sdb + "-tdestandby")["applied_seq"])
    base = open(pdb, "rb").read()
    plain = [
        ("a replayed base copy", hello(dbid, last=1 << 40) +
         C.wire_msg(7, struct.pack(">Q", a0 + 100) + b"\x07" * 16 + struct.pack(">QQ", len(base), 0) + b"\0" * 8) +
         C.wire_msg(8, struct.pack(">Q", 0) + base) + C.wire_msg(9, hashlib.sha256(base).digest())),
        ("a re-sequenced record", hello(dbid, last=1 << 40) +
         C.wire_msg(4, C.craft_rec(a0 + 50, [(2, 5, b"\xAB" * 4096)], 4096))),
        ("an unauthenticated heartbeat", C.wire_msg(10, struct.pack(">QQQQ", 1 << 30, int(time.time() * 1000),
                                                                     int(time.time() * 1000), 1 << 40))),
    ]
    nlost = open(os.path.join(d, "ship.log")).read().count("connection lost")
    for what, kw in attackers(certs, rogue):
        lport, got = attempt(sport, payload=hello(dbid, last=1 << 40), **kw)
        why = refused_in_log(slog, lport) if lport else None
        C.check(got != 2 and why is not None, "%s: refused (%s): %s" % (what, got, why))
    for what, data in plain:
        lport, got = attempt(sport, tls=False, payload=data)
        why = refused_in_log(slog, lport) if lport else None
        C.check(got != 2 and why is not None, "%s in plaintext: refused at the handshake (%s): %s" % (what, got, why))
    time.sleep(1.0)
    st = C.read_state(sdb + "-tdestandby")
    a1 = int(st["applied_seq"])
    C.check(a1 > a0, "apply went on during the attempts (%d -> %d)" % (a0, a1))
    C.check(int(st.get("primary_seq", 0)) < (1 << 30), "the unauthenticated heartbeat's sequence was not taken (%s)"
            % st.get("primary_seq"))
    C.check(open(os.path.join(d, "ship.log")).read().count("connection lost") == nlost,
            "the real session was never interrupted or replaced")
    sst = status(sdb)
    C.check(sst.get("state") == "streaming" and "refused 127.0.0.1:" in sst.get("note", ""),
            "--status: streaming, and shows the last refusal: %s" % sst.get("note", "")[:160])

    C.step("slow-loris: ten peers dribbling a byte a second, one authenticated peer dribbling its hello")
    stop = threading.Event()
    slow_ports = []

    def dribble(authenticated):
        try:
            s = socket.create_connection(("127.0.0.1", sport), timeout=30)
            slow_ports.append(s.getsockname()[1])
            if authenticated:
                s = C.tls_client().wrap_socket(s, server_hostname="127.0.0.1")
                data = hello(dbid, last=1 << 40)
            else:
                data = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64
            for i in range(len(data)):
                if stop.is_set():
                    break
                s.send(data[i:i + 1])
                time.sleep(1.0)
            s.close()
        except (OSError, ssl.SSLError):
            pass
    th = [threading.Thread(target=dribble, args=(i == 0,), daemon=True) for i in range(11)]
    a0 = int(C.read_state(sdb + "-tdestandby")["applied_seq"])
    t0 = time.time()
    for t in th:
        t.start()
    samples = []
    while time.time() - t0 < 5:
        time.sleep(0.5)
        samples.append(int(C.read_state(sdb + "-tdestandby").get("applied_seq", 0)))
    stop.set()
    C.check(len(set(samples)) >= 5 and samples[-1] > a0,
            "apply kept going while they dribbled (%d distinct applied sequences in 5 s, %d -> %d)" % (
                len(set(samples)), a0, samples[-1]))
    log = open(slog).read()
    C.check("TLS handshake timed out" in log and "no hello" in log,
            "the slow peers were dropped at their deadline (handshake timed out; authenticated one: no hello)")
    C.check(open(os.path.join(d, "ship.log")).read().count("connection lost") == nlost,
            "the real session was never interrupted")

    C.step("on-path tampering: a proxy without keys flips a byte of the TLS stream")
    C.kill9(writer)
    C.check(C.wait_caught_up(pdb, sdb) is not None, "caught up")
    pport = C.free_port()
    proxy = C.Proxy(pport, sport, tls=False, raw=True)
    flips = {"n": 0}
    orig = proxy._fault

    def flip(msg, out):
        # no message framing is visible: flip a byte of what passes
        if proxy.mode == "corrupt" and len(msg) > 40:
            m = bytearray(msg)
            m[len(m) // 2] ^= 0x01
            flips["n"] += 1
            return out + bytes(m)
        return out + msg
    proxy._fault = flip
    C.stop(ship)
    ship = C.start_ship(d, pdb, cfg, [pport], log="ship2.log", conf=os.path.join(certs, "ship.conf"))
    del orig
    C.check(C.wait_caught_up(pdb, sdb) is not None, "streams through the proxy")
    proxy.mode = "corrupt"
    C.run_writer(d, pdb, cfg, 20, seed=7)
    time.sleep(1.5)
    proxy.mode = "pass"
    C.run_writer(d, pdb, cfg, 5, seed=8)
    seq = C.wait_caught_up(pdb, sdb, timeout=300)
    C.check(flips["n"] > 0 and seq is not None,
            "%d chunks flipped; caught up afterwards at %s" % (flips["n"], seq))
    s2 = open(os.path.join(d, "ship2.log")).read()
    C.check("connection lost" in s2 and ("TLS" in s2 or "closed" in s2),
            "TLS dropped the tampered connection: %s" % [ln for ln in s2.splitlines() if "connection lost" in ln][:1])
    pr, sr = C.rows(pdb, cfg), C.rows(sdb, cfg)
    C.check(sr[0] == pr[0] and sr[1] == pr[1] and sr[3] == "ok",
            "the standby holds exactly the primary's %d rows after the tampering" % len(pr[0]))

    C.step("a second shipper on the same database is refused, naming the running one's pid")
    spool0 = os.path.getsize(pdb + "-tdeship")
    r = subprocess.run([C.CLI, "ship", "--to", "127.0.0.1:%d" % sport, "--repl-config",
                        os.path.join(certs, "ship.conf"), pdb], capture_output=True, text=True, timeout=30)
    C.check(r.returncode == 1 and ("pid %d" % ship.pid) in r.stderr,
            "refused: %s" % r.stderr.strip().splitlines()[-1:])
    C.check(os.path.getsize(pdb + "-tdeship") >= spool0 and not [f for f in os.listdir(d) if "tdeship-base" in f],
            "the spool is untouched, no temporary file of the second one is left")

    C.step("an authenticated peer sends an older base copy: 'diverged', nothing acknowledged, until --accept-rewind")
    C.stop(ship)
    proxy.close()
    st = C.read_state(sdb + "-tdestandby")
    hist, applied = bytes.fromhex(st["history"]), int(st["applied_seq"])
    sum0 = hashlib.sha256(open(sdb, "rb").read()).hexdigest()
    s, t = session(sport, hello(dbid, hist, applied))
    try:            # the standby may refuse and close before it has read all of it
        s.sendall(C.wire_msg(7, struct.pack(">Q", 1) + hist + struct.pack(">QQ", len(base), 0) + b"\0" * 8))
        s.sendall(C.wire_msg(8, struct.pack(">Q", 0) + base) + C.wire_msg(9, hashlib.sha256(base).digest()))
    except OSError:
        pass
    got = []
    while True:
        t2, _ = C.wire_recv(s)
        if t2 is None:
            break
        got.append(t2)
    s.close()
    t0 = time.time()
    while True:
        sst = status(sdb)
        if sst.get("state") == "diverged" or time.time() - t0 > 10:
            break
        time.sleep(0.2)
    C.check(t == 2 and 5 not in got and sst.get("state") == "diverged" and "older" in sst.get("note", ""),
            "refused, not acknowledged (%s), --status: %s, %s" % (got, sst.get("state"), sst.get("note", "")[:120]))
    C.check(hashlib.sha256(open(sdb, "rb").read()).hexdigest() == sum0 and
            C.read_state(sdb + "-tdestandby")["applied_seq"] == str(applied), "the copy is unchanged")
    db = C.connect(sdb, cfg)
    n = db.execute("SELECT count(*) FROM t").fetchone()[0]
    row = db.execute("SELECT repl_state FROM tde_status").fetchone()
    db.close()
    C.check(n > 0 and row[0] == "diverged", "the copy still serves reads (%d rows); tde_status says %s" % (n, row[0]))
    ship = C.start_ship(d, pdb, cfg, [sport])
    time.sleep(2.0)
    C.check("diverged" in open(os.path.join(d, "ship.log")).read() and
            C.read_state(sdb + "-tdestandby")["applied_seq"] == str(applied),
            "the real primary is refused too while diverged (nothing applied)")
    C.stop(sb)
    sb = C.start_standby(d, sdb, sport, conf=sconf, extra=["--accept-rewind"])
    C.run_writer(d, pdb, cfg, 5, seed=9)
    seq = C.wait_caught_up(pdb, sdb)
    audit = open(sdb + "-tdestandby-audit").read()
    C.check(seq is not None and status(sdb).get("state") == "streaming" and "standby_accept_rewind" in audit,
            "after --accept-rewind (audited) the primary streams again (sequence %s)" % seq)

    C.step("an authenticated TLS peer without the signing key: re-sequenced record, forged heads and "
           "heartbeat, forged base copy")
    C.stop(ship)
    # The baseline below is taken once the standby is idle: everything it
    # received applied, and its copy unchanged for a second.
    t0, prev = time.time(), None
    while time.time() - t0 < 20:
        st = C.read_state(sdb + "-tdestandby")
        cur = (st.get("applied_seq"), st.get("received_seq"), hashlib.sha256(open(sdb, "rb").read()).hexdigest())
        if cur[0] == cur[1] and cur == prev:
            break
        prev = cur
        time.sleep(1.0)
    rogue_key = os.path.join(d, "rogue-sign.key")
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", rogue_key], check=True, capture_output=True)
    st = C.read_state(sdb + "-tdestandby")
    hist, applied, chain = bytes.fromhex(st["history"]), int(st["applied_seq"]), bytes.fromhex(st["chain"])
    sum0 = hashlib.sha256(open(sdb, "rb").read()).hexdigest()
    # A genuine old record of the primary's spool, re-sequenced as the next
    # one (its checksum recomputed, as an attacker can).
    sp = open(pdb + "-tdeship", "rb").read()
    off = 96
    old = None
    while off + 96 <= len(sp):
        n = struct.unpack(">I", sp[off + 88:off + 92])[0]
        if sp[off + 16] == 1 and struct.unpack(">I", sp[off + 44:off + 48])[0] > 0:
            old = sp[off:off + 96 + n + 32]
            break
        off += 96 + n + 32
    body = bytearray(old[:-32])
    body[8:16] = struct.pack(">Q", applied + 1)
    reseq = bytes(body) + hashlib.sha256(bytes(body)).digest()
    cases = [
        ("a re-sequenced record with no signed head", [C.wire_msg(4, reseq)], None),
        ("a re-sequenced record with a head signed by another key",
         [C.wire_msg(4, reseq), C.head_msg(dbid, hist, applied + 1, C.chain_next(chain, reseq), rogue_key)],
         "does not verify"),
        ("a re-sequenced record under a head the primary signed for another record",
         [C.wire_msg(4, reseq), C.head_msg(dbid, hist, applied + 1, hashlib.sha256(b"other").digest())],
         "record chain mismatch"),
        ("an unsigned heartbeat claiming a far primary sequence",
         [C.wire_msg(10, struct.pack(">QQQQ", 1 << 30, 0, 0, 0))], None),
    ]
    sblog = sdb + "-tdestandby-log"
    for what, msgs, word in cases:
        n0 = open(slog).read().count(word) if word else 0
        # The genuine record the forgery is made from may still be in the
        # log (it is trimmed after apply): count, do not look for it.
        nrec0 = open(sblog, "rb").read().count(reseq[100:200]) if os.path.exists(sblog) else 0
        s, t = session(sport, hello(dbid, hist, applied + 1))
        try:
            for m in msgs:
                s.sendall(m)
        except OSError:
            pass
        s.settimeout(1.5)
        got = []
        try:
            while True:
                t2, _ = C.wire_recv(s)
                if t2 is None:
                    break
                got.append(t2)
        except OSError:
            pass
        s.close()
        time.sleep(0.3)
        t0 = time.time()
        while word and open(slog).read().count(word) <= n0 and time.time() - t0 < 10:
            time.sleep(0.2)
        st2 = C.read_state(sdb + "-tdestandby")
        why = [w for w, bad in (
            ("hello reply %s" % t, t != 2), ("acknowledged: %s" % got, 5 in got),
            ("applied_seq %s, was %s" % (st2.get("applied_seq"), applied), st2.get("applied_seq") != str(applied)),
            ("primary_seq %s" % st2.get("primary_seq"), int(st2.get("primary_seq", 0)) >= (1 << 30)),
            ("the copy changed", hashlib.sha256(open(sdb, "rb").read()).hexdigest() != sum0),
            ("the record was added to the standby's log",
             (open(sblog, "rb").read().count(reseq[100:200]) if os.path.exists(sblog) else 0) > nrec0),
            ("'%s' not logged" % word, word is not None and open(slog).read().count(word) <= n0)) if bad]
        C.check(not why, "%s: not applied, not logged, not acknowledged, lag not taken%s%s" % (
            what, "; logged '%s'" % word if word else "", "" if not why else " -- " + "; ".join(why)))
    os.makedirs(os.path.join(d, "sb4"))
    sdb4 = os.path.join(d, "sb4", "standby.db")
    sport4 = C.free_port()
    sb4 = C.start_standby(d, sdb4, sport4, log="standby4.log")
    time.sleep(0.5)
    other = os.path.join(d, "other.db")
    C.run_writer(d, other, cfg, 3, seed=3)
    forged = bytearray(open(other, "rb").read())
    forged[20:36] = dbid
    for what, key, word in [("unsigned", False, "unsigned base copy"),
                            ("signed by another key", rogue_key, "does not verify")]:
        got = C.fake_base(sport4, dbid, bytes(forged), key=key)
        time.sleep(0.3)
        C.check(5 not in got and not os.path.exists(sdb4 + "-tdestandby") and word in open(os.path.join(d, "standby4.log")).read(),
                "a forged base copy (another database, its id patched in), %s: refused (%s), nothing installed" % (what, got))
    C.stop(sb4)
    ship = C.start_ship(d, pdb, cfg, [sport])
    C.run_writer(d, pdb, cfg, 5, seed=12)
    C.check(C.wait_caught_up(pdb, sdb) is not None, "the real primary streams on")

    C.step("the standby's rows equal the primary's")
    pr, sr = C.rows(pdb, cfg), C.rows(sdb, cfg)
    C.check(sr[0] == pr[0] and sr[1] == pr[1] and sr[2] == 10000 and sr[3] == "ok",
            "exactly the primary's %d rows, balances %s, integrity %s" % (len(pr[0]), sr[2], sr[3]))
    C.stop(ship)
    C.stop(sb)
    C.finish("test_standby_attacks")


if __name__ == "__main__":
    main()
