"""The shipper and the archiver hold no key (issue 27, docs/ARCHIVE.md "Keys
and credentials"): `sqlite-tde ship` and `sqlite-tde archive` run with no
keystore reachable while a writer commits, and the standby and the archive
still get every committed transaction.

Real processes: the writer (Python's sqlite3 with tde.so, the wallet
configuration), `sqlite-tde standby`, `sqlite-tde ship`, `sqlite-tde
archive` (to the local S3 server, tests/lib/s3server.sh) and `sqlite-tde
restore`.  The shipper and the archiver run under `strace -f -e
trace=openat` with HOME pointing nowhere, no SQLITE_TDE_* variable and no
--config, and the wallet moved away while they start and run:
  - the standby follows the writer (ship), then the archiver (with --to the
    same standby) uploads, and a restore to latest equals the primary row
    for row, as does the standby;
  - the writer is killed (kill -9) inside a transaction whose pages had
    spilled into the WAL; its -shm header is then damaged, as a writer
    killed while changing it leaves it: the archiver says it waits for a
    connection to recover the WAL index (log and status), the restarted
    writer recovers it and the archiver goes on with no GAP; the restore
    holds every committed row and none of the killed transaction;
  - neither process opened the wallet or the tde configuration (strace),
    their configuration files and environment hold no keystore line.

Environment: TDE_BUILD, TDE_TEST_TMP (set by ctest)."""

import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standby_common as C  # noqa: E402
from archive_common import db_id, read_restored, rows  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# The writer: transaction k inserts row k (archive_common.txn's shape);
# after each COMMIT returned, k goes to the progress file.  With the hang
# file present it opens a transaction, writes enough to spill pages into
# the WAL (a small cache), says so in the hang file and waits to be killed.
WRITER = r'''
import hashlib, os, sqlite3, sys, time
ext, path, cfg, progress, stop, hang = sys.argv[1:7]
b = sqlite3.connect(":memory:"); b.enable_load_extension(True); b.load_extension(ext)
db = sqlite3.connect("file:%s?vfs=tde&tde_config=%s" % (path, cfg), uri=True, isolation_level=None, timeout=60)
db.execute("PRAGMA journal_mode=WAL")
db.execute("PRAGMA synchronous=FULL")
db.execute("CREATE TABLE IF NOT EXISTS t(k INTEGER PRIMARY KEY, v TEXT, b BLOB)")
k = db.execute("SELECT coalesce(max(k), 0) FROM t").fetchone()[0]
while not os.path.exists(stop):
    if os.path.exists(hang):
        db.execute("PRAGMA cache_size=8")
        db.execute("BEGIN IMMEDIATE")
        for i in range(200):
            db.execute("INSERT INTO t VALUES(?, 'uncommitted', zeroblob(3000))", (10**9 + i,))
        open(hang, "w").write("in a transaction\n")
        time.sleep(3600)
    k += 1
    blob = hashlib.sha256(b"row-%d" % k).digest() * (200 if k % 10 == 0 else 4)
    db.execute("BEGIN")
    db.execute("INSERT INTO t(k, v, b) VALUES(?, ?, ?)", (k, "value %d" % (k * 7919 % 1000), blob))
    if k % 4 == 0:
        db.execute("UPDATE t SET v = v || '+' WHERE k = ?", (k // 2,))
    db.execute("COMMIT")
    with open(progress + ".tmp", "w") as f:
        f.write("%d\n" % k)
    os.replace(progress + ".tmp", progress)
    time.sleep(0.01)
db.close()
'''


def keyless_env(d):
    """No keystore reachable: no SQLITE_TDE_* variable, HOME nowhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLITE_TDE") and not k.startswith("AWS_")}
    env["HOME"] = os.path.join(d, "nohome")
    return env


def progress(d):
    try:
        return int(open(os.path.join(d, "progress")).read())
    except (OSError, ValueError):
        return 0


def start_writer(d, pdb, cfg):
    for f in ("stop", "hang"):
        if os.path.exists(os.path.join(d, f)):
            os.unlink(os.path.join(d, f))
    return subprocess.Popen([C.PY, os.path.join(d, "kwriter.py"), C.EXT, pdb, cfg, os.path.join(d, "progress"),
                             os.path.join(d, "stop"), os.path.join(d, "hang")],
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "writer.err"), "a"))


def wait_for(cond, limit=180):
    t0 = time.time()
    while time.time() - t0 < limit:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def traced(d, name, args):
    """`sqlite-tde ARGS` under strace (openat of every thread), keyless."""
    log = open(os.path.join(d, name + ".log"), "a")
    return subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=openat", "-o", os.path.join(d, name + ".strace"),
                             C.CLI] + args, stdout=log, stderr=log, env=keyless_env(d))


def traced_pid(p):
    """The pid of the sqlite-tde process strace runs."""
    def child():
        try:
            with open("/proc/%d/task/%d/children" % (p.pid, p.pid)) as f:
                return [int(x) for x in f.read().split()]
        except OSError:
            return []
    wait_for(lambda: child(), 30)
    kids = child()
    return kids[0] if kids else None


def stop_traced(p, pid):
    """SIGTERM to sqlite-tde itself (strace detaches on its own SIGTERM)."""
    if pid:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        if pid:
            os.kill(pid, signal.SIGKILL)
        C.kill9(p)


def check_keyless(d, name, pid, conf_files, cfg):
    """Its environment and configuration files hold no keystore; it opened
    neither the wallet nor the tde configuration."""
    env = open("/proc/%d/environ" % pid, "rb").read().split(b"\0") if pid and os.path.exists("/proc/%d" % pid) else []
    C.check(env and not [e for e in env if e.startswith(b"SQLITE_TDE")],
            "%s: its environment (%d variables) names no tde configuration" % (name, len(env)))
    for f in conf_files:
        text = open(f).read()
        C.check(not [ln for ln in text.splitlines() if ln.split("=")[0].strip() in ("keystore", "wallet", "kmip_server",
                                                                                    "pkcs11_module")],
                "%s: %s holds no keystore line" % (name, os.path.basename(f)))
    trace = open(os.path.join(d, name + ".strace")).read()
    opened = [ln for ln in trace.splitlines() if "openat(" in ln]
    C.check(any("-tdeship" in ln for ln in opened),
            "%s: strace saw its opens (%d, the spool among them)" % (name, len(opened)))
    bad = [ln for ln in opened if "wallet" in ln or os.path.basename(cfg) in ln or "/etc/sqlite-tde" in ln]
    C.check(not bad, "%s opened no wallet and no tde configuration: %s" % (name, bad[:2]))


def main():
    signal.signal(signal.SIGTERM, lambda *a: sys.exit("stopped by SIGTERM"))   # the finally below runs
    if not shutil.which("strace"):
        C.bad("strace not installed (Debian package strace)")
        C.finish("test_r8_keyless")
    d = C.workdir("test_r8_keyless")
    cfg = C.make_config(d)
    certs = C.certs(d)
    os.makedirs(os.path.join(d, "sb"))
    os.makedirs(os.path.join(d, "away"))
    os.makedirs(os.path.join(d, "nohome"))
    with open(os.path.join(d, "kwriter.py"), "w") as f:
        f.write(WRITER)
    # The signing key: repl_sign_key of ship.conf, for the archive too.
    subprocess.run(["openssl", "pkey", "-in", os.path.join(certs, "sign.key"), "-pubout", "-out",
                    os.path.join(d, "pub.pem")], check=True)
    pdb = os.path.join(d, "primary.db")
    sdb = os.path.join(d, "sb", "standby.db")
    sport = C.free_port()
    wallet = os.path.join(d, "tde.wallet")
    away = os.path.join(d, "away", "tde.wallet")
    srv = os.path.join(d, "s3")
    started = False
    writer = standby = ship = arch = None
    try:
        C.step("the local S3 server, a writer committing, the wallet moved away")
        r = subprocess.run(["bash", os.path.join(ROOT, "tests/lib/s3server.sh"), "start", srv],
                           capture_output=True, text=True)
        started = os.path.isdir(os.path.join(srv, "run")) or r.returncode == 0
        if not C.check(r.returncode == 0, "s3server.sh start"):
            print(r.stdout[-2000:], r.stderr[-2000:])
            return
        writer = start_writer(d, pdb, cfg)
        C.check(wait_for(lambda: progress(d) >= 10), "the writer committed %d transactions" % progress(d))
        os.rename(wallet, away)
        C.check(not os.path.exists(wallet), "the wallet is away (the writer keeps its key in memory)")

        C.step("sqlite-tde ship, no keystore: the standby follows")
        standby = C.start_standby(d, sdb, sport)
        ship = traced(d, "ship", ["ship", "--cycle-ms", "20", "--repl-config", os.path.join(certs, "ship.conf"),
                                  "--to", "127.0.0.1:%d" % sport, pdb])
        ship_pid = traced_pid(ship)
        k0 = progress(d)
        C.check(wait_for(lambda: progress(d) >= k0 + 30 and C.read_state(sdb + "-tdestandby") is not None
                         and int(C.read_state(sdb + "-tdestandby").get("applied_seq", 0) or 0) > 5),
                "the standby applies while the writer commits (writer at %d)" % progress(d))
        check_keyless(d, "ship", ship_pid, [os.path.join(certs, "ship.conf")], cfg)
        stop_traced(ship, ship_pid)
        ship = None

        C.step("sqlite-tde archive (and the standby), no keystore; kill -9 of the writer in a transaction")
        arch = traced(d, "archive", ["archive", "--s3", os.path.join(srv, "s3.env"), "--prefix", "keyless",
                                     "--segment-txns", "8",
                                     "--segment-ms", "300", "--cycle-ms", "20", "--to", "127.0.0.1:%d" % sport,
                                     "--repl-config", os.path.join(certs, "ship.conf"), pdb])
        arch_pid = traced_pid(arch)
        k1 = progress(d)
        C.check(wait_for(lambda: progress(d) >= k1 + 30), "the writer goes on committing (at %d)" % progress(d))
        open(os.path.join(d, "hang"), "w").close()
        C.check(wait_for(lambda: open(os.path.join(d, "hang")).read() != ""),
                "the writer is inside a transaction whose pages spilled into the WAL")
        killed_at = progress(d)
        C.kill9(writer)
        writer = None
        wal = os.path.getsize(pdb + "-wal") if os.path.exists(pdb + "-wal") else 0
        C.check(wal > 200 * 3000, "the killed transaction left %d bytes of WAL" % wal)
        # A writer killed while changing the WAL index leaves its two header
        # copies different: the archiver must not trust it (no key to recover).
        with open(pdb + "-shm", "r+b") as f:
            f.seek(16)
            b = f.read(1)
            f.seek(16)
            f.write(bytes([b[0] ^ 0x55]))
        alog = os.path.join(d, "archive.log")
        want = "waiting for a connection to recover the WAL index"
        C.check(wait_for(lambda: want in open(alog).read(), 60), "the archiver's log: '%s'" % want)
        # The state file follows the log within a state-writing period
        # (0.2 s); ask until it says so, or give up after the bound.
        def status():
            return subprocess.run([C.CLI, "archive", "--status", pdb], capture_output=True, text=True,
                                  env=keyless_env(d)).stdout
        C.check(wait_for(lambda: want in status(), 60), "archive --status says it: %s" % status().strip().splitlines()[-1:])

        C.step("the writer restarted (wallet back) recovers the WAL; the archive goes on")
        os.rename(away, wallet)
        writer = start_writer(d, pdb, cfg)
        C.check(wait_for(lambda: progress(d) >= killed_at + 30), "the restarted writer commits (at %d)" % progress(d))
        open(os.path.join(d, "stop"), "w").close()
        writer.wait(timeout=120)
        writer = None
        last_k = progress(d)
        C.check(wait_for(lambda: "the WAL index is there" in open(alog).read(), 30),
                "the archiver says the WAL index is back")
        seq = C.wait_caught_up(pdb, sdb)
        C.check(seq is not None, "the standby caught up (sequence %s)" % seq)
        dbid = db_id(pdb)
        listed = ""
        t0 = time.time()
        while seq and time.time() - t0 < 180:
            r = subprocess.run([C.CLI, "restore", "--s3", os.path.join(srv, "s3.env"), "--db-id", dbid, "--prefix",
                                "keyless", "--pubkey", os.path.join(d, "pub.pem"), "--list"],
                               capture_output=True, text=True, env=keyless_env(d))
            listed = r.stdout
            if ("..%d " % seq) in listed:
                break
            time.sleep(0.5)
        C.check(seq and ("..%d " % seq) in listed, "the archive holds up to sequence %s: %s"
                % (seq, listed.strip()[-200:]))
        alog_text = open(alog).read()
        C.check("recording a gap" not in alog_text and alog_text.count("base copy at sequence") == 1,
                "no GAP: the archiver uploaded one base copy only (%d)" % alog_text.count("base copy at sequence"))
        C.check(open(os.path.join(d, "standby.log")).read().count("base copy applied") == 1,
                "no GAP: the standby applied one base copy only")
        check_keyless(d, "archive", arch_pid, [os.path.join(srv, "s3.env"), os.path.join(certs, "ship.conf")], cfg)
        stop_traced(arch, arch_pid)
        arch = None
        C.stop(standby)
        standby = None

        C.step("the restore to latest, the standby and the primary hold the same rows")
        out = os.path.join(d, "restored.db")
        r = subprocess.run([C.CLI, "restore", "--s3", os.path.join(srv, "s3.env"), "--db-id", dbid, "--prefix",
                            "keyless", "--pubkey", os.path.join(d, "pub.pem"), out],
                           capture_output=True, text=True, env=keyless_env(d))
        C.check(r.returncode == 0, "restore latest with no keystore: %s" % (r.stdout + r.stderr).strip()[:200])
        db = C.connect(pdb, cfg)
        want_rows = rows(db)
        db.close()
        got, ic = read_restored(cfg, out) if r.returncode == 0 else ([], "")
        ks = [row[0] for row in want_rows]
        C.check(ks == list(range(1, last_k + 1)), "the primary holds rows 1..%d, none of the killed transaction"
                % last_k)
        C.check(got == want_rows and ic == "ok", "the restore equals the primary (%d rows), integrity %s"
                % (len(got), ic))
        sb = C.connect(sdb, cfg, ro=True)
        sb_rows = rows(sb)
        sb.close()
        C.check(sb_rows == want_rows, "the standby equals the primary (%d rows)" % len(sb_rows))
    finally:
        for p, pid in ((ship, None), (arch, None)):
            if p:
                stop_traced(p, traced_pid(p))
        C.kill9(writer)
        C.stop(standby)
        if os.path.exists(away) and not os.path.exists(wallet):
            os.rename(away, wallet)
        if started:
            subprocess.run(["bash", os.path.join(ROOT, "tests/lib/s3server.sh"), "stop", srv],
                           capture_output=True, text=True)
    if C.NFAIL == 0 and not os.environ.get("TDE_KEEP_SCRATCH"):
        shutil.rmtree(d, ignore_errors=True)
    C.finish("test_r8_keyless")


if __name__ == "__main__":
    main()
