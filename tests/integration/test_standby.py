"""Encrypted standby, end to end (issue 8): base copy and streaming with
checkpoints of every mode and a journal_size_limit, lag back to zero,
exact rows and `sqlite-tde verify` on the standby, no plaintext in any
standby file, a shipper restarted (resumes, no new base copy), WAL frames
discarded while the shipper is down (saved by the VFS hook), a standby of
another database refused, promotion to a writable primary.

Environment: TDE_BUILD, TDE_TEST_TMP (set by ctest)."""

import hashlib
import json
import os
import shutil
import signal
import sqlite3
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standby_common as C  # noqa: E402


def standby_snapshot(sdb, d, name, cfg):
    """A private copy of the standby file to open with the key.  Its header
    is the primary's and names the primary's page map (DB-tdemap), which a
    standby never receives: the copy is refused until `sqlite-tde remap`
    accepts its pages, as the README says for a backup taken on a standby."""
    dst = os.path.join(d, name)
    for suffix in ("", "-wal", "-shm", "-tdemap"):
        if os.path.exists(dst + suffix):
            os.unlink(dst + suffix)
    shutil.copyfile(sdb, dst)
    r = subprocess.run([C.CLI, "--config", cfg, "remap", dst], capture_output=True, text=True)
    C.check(r.returncode == 0, "sqlite-tde remap on a copy of the standby: %s" % (r.stdout + r.stderr).strip())
    return dst


HOLDER = r"""
import sqlite3, sys, time
b = sqlite3.connect(":memory:"); b.enable_load_extension(True); b.load_extension(sys.argv[1])
db = sqlite3.connect("file:%s?vfs=tde&tde_config=%s" % (sys.argv[2], sys.argv[3]), uri=True)
db.execute("SELECT count(*) FROM t").fetchall()
print("open", flush=True)
time.sleep(600)
"""


def status(db):
    r = subprocess.run([C.CLI, "standby", "--status", db], capture_output=True, text=True)
    return dict(line.split(": ", 1) for line in r.stdout.splitlines() if ": " in line)


def wait_state(db, want, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        st = status(db)
        if st.get("state") == want:
            return st
        time.sleep(0.2)
    return status(db)


def accept_rewind(d, sb, sdb, sport, what, word):
    """The standby refused a primary that goes back (diverged); the operator
    restarts it with --accept-rewind.  Returns the new standby process."""
    applied = C.read_state(sdb + "-tdestandby").get("applied_seq")
    sum0 = hashlib.sha256(open(sdb, "rb").read()).hexdigest()
    st = wait_state(sdb, "diverged")
    C.check(st.get("state") == "diverged" and word in st.get("note", ""),
            "%s: the standby refuses it as diverged, no silent rewind: %s" % (what, st.get("note", "")[:200]))
    time.sleep(0.5)
    C.check(C.read_state(sdb + "-tdestandby").get("applied_seq") == applied and
            hashlib.sha256(open(sdb, "rb").read()).hexdigest() == sum0,
            "%s: the copy is unchanged at sequence %s" % (what, applied))
    C.stop(sb)
    sb = C.start_standby(d, sdb, sport)
    time.sleep(1.0)
    C.check(status(sdb).get("state") == "diverged", "%s: a restart without --accept-rewind stays diverged" % what)
    C.stop(sb)
    audit = sdb + "-tdestandby-audit"
    n0 = open(audit).read().count("standby_rewind_accepted") if os.path.exists(audit) else 0
    sb = C.start_standby(d, sdb, sport, extra=["--accept-rewind"])
    return sb, audit, n0


def compare(pdb, sdb, cfg, d, what):
    pr = C.rows(pdb, cfg)
    sr = C.rows(sdb, cfg)
    C.check(sr[3] == "ok", "%s: integrity_check on the standby copy: %s" % (what, sr[3]))
    C.check(sr[0] == pr[0] and sr[1] == pr[1],
            "%s: standby holds exactly the primary's %d rows (%d on standby)" % (what, len(pr[0]), len(sr[0])))
    C.check(sr[2] == 10000, "%s: balances sum to 10000 on the standby (%s)" % (what, sr[2]))
    return pr, sr


def main():
    d = C.workdir("test_standby")
    cfg = C.make_config(d)
    certs = C.certs(d)
    C.write_writer(d)
    pdb = os.path.join(d, "primary.db")
    os.makedirs(os.path.join(d, "sb"))
    sdb = os.path.join(d, "sb", "standby.db")
    sport = C.free_port()

    C.step("bad input gets a clear error")
    rdb = os.path.join(d, "rollback.db")
    db = C.connect(rdb, cfg)
    db.execute("CREATE TABLE t(x)")
    db.close()
    shc = ["--repl-config", os.path.join(certs, "ship.conf")]
    sbc = ["--repl-config", os.path.join(certs, "standby.conf")]
    loose = os.path.join(d, "loose")
    shutil.copytree(certs, loose)
    os.chmod(os.path.join(loose, "primary.key"), 0o644)
    with open(os.path.join(d, "typo.conf"), "w") as f:
        f.write("repl_ca = %s/ca.crt\nrepl_certs = x\n" % certs)
    for args, want, what in (
            (["ship", "--to", "nohostport"] + shc + [rdb], "expected HOST:PORT", "a bad --to address"),
            (["standby", "--listen", "127.0.0.1:%d" % C.free_port()] + sbc + [rdb], "not a standby copy",
             "a standby on an existing ordinary database"),
            (["standby", "--promote", rdb], "not a standby copy", "promoting an ordinary database"),
            (["standby", "--listen", "127.0.0.1:99999"] + sbc + [os.path.join(d, "x.db")], "bad port", "a bad --listen port"),
            (["ship", "--to", "127.0.0.1:1", "--repl-config", os.path.join(loose, "ship.conf"), rdb],
             "chmod 600", "a TLS key file readable by others"),
            (["standby", "--listen", "127.0.0.1:%d" % C.free_port(), "--repl-config", os.path.join(d, "typo.conf"),
              os.path.join(d, "x.db")], "unknown key (known: repl_ca", "a misspelt key in the replication configuration")):
        r = subprocess.run([C.CLI] + args, capture_output=True, text=True, timeout=30)
        C.check(r.returncode == 1 and want in r.stderr, "%s: exit %d, %s" % (what, r.returncode, r.stderr.strip()[:160]))
    for cmd in (["ship", "--to", "127.0.0.1:1", rdb],
                ["standby", "--listen", "127.0.0.1:%d" % C.free_port(), os.path.join(d, "x.db")]):
        r = subprocess.run([C.CLI] + cmd, capture_output=True, text=True, timeout=30)
        C.check(r.returncode != 0 and "--insecure-no-tls" in r.stderr,
                "%s without TLS configuration nor --insecure-no-tls is refused: %s" % (cmd[0], r.stderr.strip().splitlines()[:1]))
    C.check(not [f for f in os.listdir(d) if "-tdeship" in f or "-tdestandby" in f],
            "none of them left a spool, state, log or lock file")
    # Not in WAL mode: the shipper, which has no key to read the journal
    # mode with, finds no WAL index and says so in its log and status.
    nlog = os.path.join(d, "nowal.log")
    p = subprocess.Popen([C.CLI, "ship", "--to", "127.0.0.1:1"] + shc + [rdb], stdout=subprocess.DEVNULL,
                         stderr=open(nlog, "w"))
    want = "no WAL index: is the database in WAL mode (PRAGMA journal_mode=WAL)?"
    t0 = time.time()
    while time.time() - t0 < 120 and want not in open(nlog).read() and p.poll() is None:
        time.sleep(0.1)
    st = subprocess.run([C.CLI, "ship", "--status", rdb], capture_output=True, text=True)
    C.stop(p)
    C.check(want in open(nlog).read() and want in st.stdout,
            "a primary not in WAL mode: the log and the status say '%s'" % want)

    C.step("primary with 50 transactions, standby, shipper: base copy")
    C.run_writer(d, pdb, cfg, 50, seed=1)
    sb = C.start_standby(d, sdb, sport)
    time.sleep(0.3)
    ship = C.start_ship(d, pdb, cfg, [sport])
    seq = C.wait_caught_up(pdb, sdb)
    C.check(seq is not None, "standby caught up after the base copy (sequence %s)" % seq)
    log = open(os.path.join(d, "standby.log")).read()
    C.check("base copy applied" in log, "the standby started from a base copy")

    C.step("430 transactions with PASSIVE/FULL/RESTART/TRUNCATE checkpoints, journal_size_limit; "
           "two readers on the standby")
    stopfile = os.path.join(d, "readers.stop")
    readers = [C.start_reader(d, sdb, cfg, stopfile, i) for i in range(2)]
    t0 = time.time()
    C.run_writer(d, pdb, cfg, 400, seed=2)
    C.run_writer(d, pdb, cfg, 30, seed=5, pins=0.0)   # transfers only: page 1 unchanged
    seq = C.wait_caught_up(pdb, sdb)
    C.check(seq is not None, "lag back to zero after the workload (sequence %s, %.1f s)" % (seq, time.time() - t0))
    open(stopfile, "w").close()
    nprimary = [len(C.rows(pdb, cfg)[0]), C.accounts(pdb, cfg)]
    for i, r in enumerate(readers):
        out, _ = r.communicate(timeout=60)
        try:
            res = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            res = {}
        C.check(res.get("reads", 0) > 0 and res.get("inconsistent", 1) == 0 and res.get("errors", 1) == 0,
                "reader %d on the standby during apply: %s reads, %s inconsistent, %s errors" % (
                    i, res.get("reads"), res.get("inconsistent"), res.get("errors")))
        C.check(res.get("distinct", 0) > 1 and res.get("last") == nprimary,
                "reader %d saw the standby advance (%s states), its last read equals the primary's rows and "
                "balances (%s)" % (i, res.get("distinct"), res.get("last") == nprimary))
    C.check(not [f for f in os.listdir(os.path.join(d, "sb")) if f.endswith(("-wal", "-shm", "-journal"))],
            "readers created no -wal, -shm or -journal next to the standby")
    db = C.connect(sdb, cfg)
    try:
        db.execute("INSERT INTO t VALUES(999999, 'no')")
        C.bad("a write on the standby was accepted")
    except sqlite3.Error as e:
        C.check("readonly" in str(e), "a write on the standby fails: %s" % e)
    db.close()
    compare(pdb, sdb, cfg, d, "read in place with the key")
    sh = shutil.which("sqlite3")
    if sh:
        r = subprocess.run([sh, "-batch", "-noheader", "-cmd", ".load " + C.EXT, "-cmd",
                            ".open 'file:%s?vfs=tde&tde_config=%s'" % (sdb, cfg)],
                           input="SELECT count(*) FROM t;\nPRAGMA journal_mode;\nINSERT INTO t VALUES(-1,'x');\n",
                           capture_output=True, text=True, timeout=60)
        lines = r.stdout.split()
        C.check(lines[:2] == [str(nprimary[0]), "delete"] and "readonly" in r.stderr,
                "the sqlite3 shell reads the standby (%s rows, journal_mode %s) and cannot write it: %s" % (
                    lines[:1], lines[1:2], r.stderr.strip()[:120]))
    sh = C.read_state(pdb + "-tdeship-state")
    print("        capture lock held: max %s ms, mean %s ms over %s cycles" % (
        sh.get("capture_lock_ms_max"), sh.get("capture_lock_ms_avg"), sh.get("capture_cycles")))
    snap = standby_snapshot(sdb, d, "snap1.db", cfg)
    compare(pdb, snap, cfg, d, "after streaming")
    r = subprocess.run([C.CLI, "--config", cfg, "verify", snap], capture_output=True, text=True)
    C.check(r.returncode == 0, "sqlite-tde verify passes on the standby copy: %s" % r.stdout.strip())
    files = [os.path.join(d, "sb", f) for f in os.listdir(os.path.join(d, "sb"))]
    C.check(not C.no_plaintext(files), "canary absent from every standby file (%s)" % ", ".join(sorted(os.path.basename(f) for f in files)))
    r = subprocess.run([C.CLI, "--config", cfg, "verify", sdb], capture_output=True, text=True)
    C.check(r.returncode == 0, "sqlite-tde verify on the standby in place: %s" % (r.stdout + r.stderr).strip())
    C.check(not C.no_plaintext([pdb + "-tdeship"]), "canary absent from the ship spool")
    db = C.connect(snap, cfg)
    n = db.execute("SELECT count(*) FROM t WHERE v LIKE 'CANARY-7f3a-%'").fetchone()[0]
    db.close()
    C.check(n > 0, "the canary is there in the rows read with the key (%d rows)" % n)

    C.step("monitoring: sqlite-tde standby --status and tde_status on both sides")
    st = status(sdb)
    C.check(st.get("role") == "standby" and st.get("applied_seq") == str(seq) and st.get("apply_lag_txn") == "0"
            and st.get("transport_lag_txn") == "0", "standby --status: %s" % st)
    pt = status(pdb)
    C.check(pt.get("role") == "primary" and pt.get("acked_seq") == str(seq) and pt.get("transport_lag_txn") == "0",
            "primary --status: %s" % pt)
    db = C.connect(sdb, cfg)
    row = db.execute("SELECT role, applied_seq, received_seq, apply_lag_txn, transport_lag_txn, repl_state "
                     "FROM tde_status").fetchone()
    prag = db.execute("PRAGMA tde_status").fetchone()[0]
    db.close()
    C.check(row == ("standby", seq, seq, 0, 0, "streaming"), "tde_status on the standby (with the key): %s" % (row,))
    C.check("role=standby" in prag and "applied_seq=%d" % seq in prag, "PRAGMA tde_status names the role")
    db = C.connect(pdb, cfg)
    row = db.execute("SELECT role, acked_seq, transport_lag_txn, peer FROM tde_status").fetchone()
    db.close()
    C.check(row[0] == "primary" and row[1] == seq and row[2] == 0 and "streaming" in row[3],
            "tde_status on the primary: %s" % (row,))
    os.kill(ship.pid, signal.SIGSTOP)               # a primary that hangs: no heartbeat
    time.sleep(2.5)                                 # the standby calls it silent after 2 s
    sst = wait_state(sdb, "silent")
    silent = sst.get("state")
    C.check("primary silent for" in sst.get("note", "") and sst.get("transport_lag_txn") == "-1",
            "a silent primary: lag shown unknown (-1), not 0; note: %s" % sst.get("note"))
    os.kill(ship.pid, signal.SIGCONT)
    again = wait_state(sdb, "streaming").get("state")
    C.check(silent == "silent" and again == "streaming",
            "standby --status says 'silent' without a heartbeat (was %s), 'streaming' again after (%s)" % (silent, again))
    C.stop(sb)
    C.run_writer(d, pdb, cfg, 60, seed=6)
    t0 = time.time()
    while True:                                     # the shipper notices the standby is gone
        pt = status(pdb)
        if int(pt.get("transport_lag_txn", 0)) >= 60 or time.time() - t0 > 20:
            break
        time.sleep(0.2)
    C.check(int(pt.get("transport_lag_txn", 0)) >= 60 and int(pt.get("transport_lag_bytes", 0)) > 0
            and float(pt.get("transport_lag_seconds", 0)) > 0,
            "standby down: the primary shows the lag (%s txn, %s bytes, %s s)" % (
                pt.get("transport_lag_txn"), pt.get("transport_lag_bytes"), pt.get("transport_lag_seconds")))
    sb = C.start_standby(d, sdb, sport)
    seq = C.wait_caught_up(pdb, sdb)
    pt = status(pdb)
    C.check(seq is not None and pt.get("transport_lag_txn") == "0" and pt.get("transport_lag_bytes") == "0",
            "standby restarted: lag back to zero (sequence %s)" % seq)

    C.step("shipper stopped and restarted: resumes where the standby is")
    C.stop(ship)
    C.run_writer(d, pdb, cfg, 60, seed=3)
    ship = C.start_ship(d, pdb, cfg, [sport])
    seq = C.wait_caught_up(pdb, sdb)
    C.check(seq is not None, "caught up after the shipper restart (sequence %s)" % seq)
    log = open(os.path.join(d, "standby.log")).read()
    C.check(log.count("base copy applied") == 1, "no second base copy was needed")

    C.step("two standbys: a second one joins (base copy) while the first keeps streaming")
    os.makedirs(os.path.join(d, "sb2"))
    sdb2 = os.path.join(d, "sb2", "standby.db")
    sport2 = C.free_port()
    sb2 = C.start_standby(d, sdb2, sport2, log="standby2.log")
    C.stop(ship)
    ship = C.start_ship(d, pdb, cfg, [sport, sport2])
    C.run_writer(d, pdb, cfg, 40, seed=10)
    s1, s2 = C.wait_caught_up(pdb, sdb), C.wait_caught_up(pdb, sdb2)
    C.check(s1 is not None and s1 == s2, "both standbys caught up (sequences %s, %s)" % (s1, s2))
    compare(pdb, sdb2, cfg, d, "second standby")
    pt = status(pdb)
    C.check(pt.get("peer", "").count("streaming") == 2, "the primary's status lists both: %s" % pt.get("peer"))
    C.stop(ship)
    C.stop(sb2)
    ship = C.start_ship(d, pdb, cfg, [sport])

    C.step("WAL deleted at the last close while the shipper is down: frames saved by the VFS hook")
    C.stop(ship)
    C.run_writer(d, pdb, cfg, 40, seed=4)   # exits: last connection, checkpoint, WAL deleted
    C.check(not os.path.exists(pdb + "-wal"), "the primary's WAL was deleted at the last close")
    ship = C.start_ship(d, pdb, cfg, [sport])
    seq = C.wait_caught_up(pdb, sdb)
    C.check(seq is not None, "caught up (sequence %s)" % seq)
    log = open(os.path.join(d, "standby.log")).read()
    C.check(log.count("base copy applied") == 1, "still no second base copy (no frame was lost)")
    compare(pdb, standby_snapshot(sdb, d, "snap2.db", cfg), cfg, d, "after the WAL deletion")

    C.step("a damaged ship spool never fails the primary's writes or checkpoints; the standby takes a base copy")
    C.stop(ship)
    with open(pdb + "-tdeship", "wb") as f:
        f.write(b"garbage" * 50)                    # damaged: no valid spool header
    nbase = open(os.path.join(d, "standby.log")).read().count("base copy applied")
    db = C.connect(pdb, cfg)
    errs = []
    nid = db.execute("SELECT max(id) FROM t").fetchone()[0]
    for i, ck in enumerate(["TRUNCATE", "RESTART", "TRUNCATE", "PASSIVE"]):
        for k in range(3):
            nid += 1
            try:
                db.execute("INSERT INTO t VALUES(?, 'written while the spool is damaged')", (nid,))
            except sqlite3.Error as e:
                errs.append("insert: %s" % e)
                nid -= 1
        try:
            res = db.execute("PRAGMA wal_checkpoint(%s)" % ck).fetchall()
            if res[0][0] != 0:
                errs.append("checkpoint %s busy: %s" % (ck, res))
        except sqlite3.Error as e:
            errs.append("checkpoint %s: %s" % (ck, e))
    db.close()
    C.check(not errs, "inserts and TRUNCATE/RESTART checkpoints succeed: %s" % (errs[:3] or "no error"))
    ship = C.start_ship(d, pdb, cfg, [sport])
    sb, audit, n0 = accept_rewind(d, sb, sdb, sport, "a new spool (another history)", "another history")
    seq = C.wait_caught_up(pdb, sdb)
    C.check(seq is not None, "caught up (sequence %s)" % seq)
    C.check(open(os.path.join(d, "standby.log")).read().count("base copy applied") > nbase,
            "the standby took a base copy (the spool lost the frames) once the operator accepted it")
    C.check(os.path.exists(audit) and open(audit).read().count("standby_rewind_accepted") > n0,
            "the accepted rewind is in the standby's audit log")
    C.check("starting a new spool" in open(os.path.join(d, "ship.log")).read(),
            "the shipper set the damaged spool aside and started a new one")
    compare(pdb, sdb, cfg, d, "after the damaged spool")

    C.step("a transaction larger than a record (limit lowered for the test): a GAP, a base copy, "
           "and the transactions after it still ship")
    C.stop(ship)
    ship = C.start_ship(d, pdb, cfg, [sport], env={"TDE_SHIP_MAX_RECORD": "300000"})
    C.check(C.wait_caught_up(pdb, sdb) is not None, "caught up")
    nbase = open(os.path.join(d, "standby.log")).read().count("base copy applied")
    # The shipper must capture the large transaction (its lowered record
    # limit is the point), not the writer's own hook, which captures at a WAL
    # restart or at the last close's checkpoint and deletion (without that
    # limit).  So no checkpoint here (one that copied every frame would let
    # the next commit restart the WAL), and a second connection stays open
    # until the standby caught up: the writer's close is then not the last
    # (the keyless shipper keeps the database open only once it has mapped
    # the WAL index, which on a loaded machine may come after this step).
    holder = C.connect(pdb, cfg)
    holder.execute("SELECT count(*) FROM t").fetchone()
    db = C.connect(pdb, cfg)
    db.execute("PRAGMA wal_autocheckpoint=0")
    nid = db.execute("SELECT max(id) FROM t").fetchone()[0]
    db.execute("BEGIN")
    for k in range(12):                             # about 1.2 MB of pages in one transaction
        nid += 1
        db.execute("INSERT INTO t VALUES(?, ?)", (nid, os.urandom(50000).hex()))
    db.execute("COMMIT")
    for k in range(3):                              # small ones right after it
        nid += 1
        db.execute("INSERT INTO t VALUES(?, 'after the large one')", (nid,))
    db.close()
    seq = C.wait_caught_up(pdb, sdb)
    holder.close()
    slog = open(os.path.join(d, "standby.log")).read()
    C.check(seq is not None and "larger than a record" in open(os.path.join(d, "ship.log")).read(),
            "the shipper recorded a GAP for the large transaction (sequence %s)" % seq)
    C.check(slog.count("base copy applied") > nbase, "the standby took a base copy")
    C.check("too large" not in open(os.path.join(d, "ship.log")).read(), "no record was too large to read")
    compare(pdb, sdb, cfg, d, "after the large transaction")
    nbase = slog.count("base copy applied")
    C.run_writer(d, pdb, cfg, 20, seed=15)
    C.check(C.wait_caught_up(pdb, sdb) is not None and
            open(os.path.join(d, "standby.log")).read().count("base copy applied") == nbase,
            "small transactions then stream with no further base copy")
    C.stop(ship)
    ship = C.start_ship(d, pdb, cfg, [sport])

    C.step("master-key rotation on the primary: the new header region reaches the standby")
    r = subprocess.run([C.CLI, "--config", cfg, "rotate-master-key", pdb], capture_output=True, text=True)
    C.check(r.returncode == 0, "sqlite-tde rotate-master-key: %s" % (r.stdout + r.stderr).strip().replace("\n", " | ")[-200:])
    C.run_writer(d, pdb, cfg, 5, seed=8)
    seq = C.wait_caught_up(pdb, sdb)
    with open(pdb, "rb") as f:
        ph = f.read(8192)
    with open(sdb, "rb") as f:
        sh_ = f.read(8192)
    C.check(seq is not None and ph == sh_, "the standby's 8 KiB header region equals the primary's (sequence %s)" % seq)
    compare(pdb, sdb, cfg, d, "after the rotation")

    C.step("rekey on the primary (pages rewritten outside the WAL): the standby takes a base copy")
    nbase = open(os.path.join(d, "standby.log")).read().count("base copy applied")
    r = subprocess.run([C.CLI, "--config", cfg, "rekey", pdb], capture_output=True, text=True)
    C.check(r.returncode == 0, "sqlite-tde rekey on the primary: %s" % (r.stdout + r.stderr).strip().replace("\n", " | ")[-200:])
    C.run_writer(d, pdb, cfg, 20, seed=7)
    seq = C.wait_caught_up(pdb, sdb)
    C.check(seq is not None, "caught up after the rekey (sequence %s)" % seq)
    log = open(os.path.join(d, "standby.log")).read()
    C.check(log.count("base copy applied") > nbase, "the standby took a base copy after the rekey")
    r = subprocess.run([C.CLI, "--config", cfg, "verify", sdb], capture_output=True, text=True)
    C.check(r.returncode == 0, "verify on the standby after the rekey: %s" % (r.stdout + r.stderr).strip())
    compare(pdb, sdb, cfg, d, "after the rekey")

    C.step("a standby of another database is refused")
    odb = os.path.join(d, "other.db")
    C.run_writer(d, odb, cfg, 5, seed=9)
    before = C.read_state(sdb + "-tdestandby").get("applied_seq")
    other = C.start_ship(d, odb, cfg, [sport], log="other.log")
    t0 = time.time()
    while time.time() - t0 < 20 and not ("refused" in open(os.path.join(d, "other.log")).read() and
                                         "refusing the primary" in open(os.path.join(d, "standby.log")).read()):
        time.sleep(0.2)
    C.stop(other)
    olog = open(os.path.join(d, "other.log")).read()
    slog = open(os.path.join(d, "standby.log")).read()
    C.check("refused" in olog and "holds database" in olog,
            "the other primary is told: %s" % ([line for line in olog.splitlines() if "refused" in line][:1]))
    C.check("refusing the primary" in slog, "the standby logs the refusal")
    C.check(C.read_state(sdb + "-tdestandby").get("applied_seq") == before, "nothing was applied from it")
    seq = C.wait_caught_up(pdb, sdb)
    C.check(seq is not None, "the real primary still streams (sequence %s)" % seq)

    C.step("a fake primary of the same database sends crafted records: each is rejected whole")
    C.run_writer(d, pdb, cfg, 3, seed=10)
    C.check(C.wait_caught_up(pdb, sdb) is not None, "caught up")
    C.stop(ship)
    st = C.read_state(sdb + "-tdestandby")
    C.check(st.get("page_size") == "4096", "the standby knows its copy's page size: %s" % st.get("page_size"))
    dbid = bytes.fromhex(st["database_id"])
    hist = bytes.fromhex(st["history"])
    last = int(st["applied_seq"]) + 5
    size0 = os.path.getsize(sdb)
    sum0 = hashlib.sha256(open(sdb, "rb").read()).hexdigest()
    foreign = open(odb, "rb").read()[:8192]         # a valid header region of another database
    P = b"\xAB" * 4096
    cases = [
        ("page number far beyond the database", "page number",
         lambda a: [C.craft_rec(a + 1, [(0xFFFFFFF0, 0, P), (1, 5, P)], 4096)]),
        ("database size at commit huge", "database size",
         lambda a: [C.craft_rec(a + 1, [(2, 0xFFFFFFF0, P)], 4096)]),
        ("page size other than the copy's", "page size",
         lambda a: [C.craft_rec(a + 1, [(3, 0, P[:512]), (9, 9, P[:512])], 512)]),
        ("no commit frame", "not a commit frame",
         lambda a: [C.craft_rec(a + 1, [(2, 0, P)], 4096)]),
        ("a commit frame before the last", "is a commit frame",
         lambda a: [C.craft_rec(a + 1, [(2, 3, P), (3, 3, P)], 4096)]),
        ("page number 0 after a good frame", "page number 0",
         lambda a: [C.craft_rec(a + 1, [(2, 0, P), (0, 5, P)], 4096)]),
        ("frame salts differ within the record", "salts",
         lambda a: [C.craft_rec(a + 1, [(2, 0, P, b"\1" * 8), (3, 5, P)], 4096)]),
        ("a header region that does not parse", "does not parse",
         lambda a: [C.craft_rec(a + 1, [], 0, flags=1, hdr=b"\xEE" * 8192)]),
        ("the header region of another database", "another database",
         lambda a: [C.craft_rec(a + 1, [], 0, flags=1, hdr=foreign)]),
    ]
    for what, word, make in cases:
        nrej = open(os.path.join(d, "standby.log")).read().count("rejecting transaction")
        got = C.fake_primary(sport, dbid, make, history=hist, last=last, chain=bytes.fromhex(st["chain"]))
        time.sleep(0.2)
        slog = open(os.path.join(d, "standby.log")).read()
        lines = [ln for ln in slog.splitlines() if "rejecting transaction" in ln]
        C.check(5 not in got and len(lines) > nrej and word in lines[-1] and
                os.path.getsize(sdb) == size0 and
                hashlib.sha256(open(sdb, "rb").read()).hexdigest() == sum0 and
                b"\xAB" * 4096 not in open(sdb + "-tdestandby-log", "rb").read() and
                C.read_state(sdb + "-tdestandby").get("applied_seq") == st["applied_seq"],
                "%s: not acknowledged (%s), not logged, copy unchanged (%d bytes), error: %s" % (
                    what, got, os.path.getsize(sdb), lines[-1].split(": ", 2)[-1] if lines else None))
    ship = C.start_ship(d, pdb, cfg, [sport])
    C.run_writer(d, pdb, cfg, 5, seed=14)
    C.check(C.wait_caught_up(pdb, sdb) is not None, "the real primary streams again")
    compare(pdb, sdb, cfg, d, "after the crafted records")

    C.step("a fake primary offers a new standby a bad base copy: refused, nothing installed")
    os.makedirs(os.path.join(d, "sb3"))
    sdb3 = os.path.join(d, "sb3", "standby.db")
    sport3 = C.free_port()
    sb3 = C.start_standby(d, sdb3, sport3, log="standby3.log")
    time.sleep(0.5)
    pregion = open(pdb, "rb").read()[:8192]
    for what, data in [("an empty base copy", b""),
                       ("a base copy with a header region that does not parse", b"X" * 8192 + b"P" * 16384),
                       ("a base copy of another database", foreign + b"P" * 16384)]:
        got = C.fake_base(sport3, dbid, data)
        time.sleep(0.2)
        C.check(5 not in got and not os.path.exists(sdb3 + "-tdestandby") and
                (not os.path.exists(sdb3) or os.path.getsize(sdb3) == 0),
                "%s: not acknowledged (%s), no copy installed: %s" % (
                    what, got, [ln for ln in open(os.path.join(d, "standby3.log")).read().splitlines()
                                if "refusing a base copy" in ln][-1:]))
    got = C.fake_base(sport3, dbid, pregion + b"P" * 16384)
    time.sleep(0.2)
    C.check(5 in got and os.path.exists(sdb3 + "-tdestandby"),
            "a base copy whose header names the hello's database is installed (%s)" % got)
    C.stop(sb3)

    C.step("a fake standby acknowledges far more than it was sent: the shipper counts only what it sent")
    import socket
    import threading
    lst = socket.socket()
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind(("127.0.0.1", 0))
    lst.listen(2)
    fport = lst.getsockname()[1]
    seen = []

    def fake_standby():
        c, _ = lst.accept()
        c.settimeout(20)
        c = C.tls_server("standby").wrap_socket(c, server_side=True)
        t, b = C.wire_recv(c)                       # HELLO
        c.sendall(C.wire_msg(2, struct.pack(">Q", 0) + b"\0" + b"\0" * 16))   # no copy
        while True:
            t, b = C.wire_recv(c)
            seen.append(t)
            if t is None or t == 9:
                break
        c.sendall(C.wire_msg(5, struct.pack(">Q", 1 << 40)))                  # ACK beyond anything
        c.sendall(C.wire_msg(6, struct.pack(">Q", 1 << 41)))                  # RESEND beyond too
        t0 = time.time()
        while time.time() - t0 < 2.5 and C.wire_recv(c)[0] is not None:
            pass
        c.close()
    th = threading.Thread(target=fake_standby, daemon=True)
    th.start()
    C.stop(ship)
    ship = C.start_ship(d, pdb, cfg, [sport, fport])
    # The last writer left a WAL the stopped shipper kept (its SHARED lock):
    # the application's next connection recovers its index, which the
    # keyless shipper cannot (docs/ARCHIVE.md "Keys and credentials").
    C.accounts(pdb, cfg)
    th.join(30)
    time.sleep(0.5)
    sh = C.read_state(pdb + "-tdeship-state")
    C.check(9 in seen and int(sh.get("peer1_acked_seq", 1 << 40)) <= int(sh.get("captured_seq", 0)),
            "peer acknowledged %s, captured %s" % (sh.get("peer1_acked_seq"), sh.get("captured_seq")))
    C.stop(ship)
    lst.close()
    ship = C.start_ship(d, pdb, cfg, [sport])
    C.check(C.wait_caught_up(pdb, sdb) is not None, "the real standby streams")

    C.step("the primary loses its last commits (a power loss under synchronous=NORMAL, simulated): "
           "the standby, which has them, starts over from a base copy")
    hold = subprocess.Popen([C.PY, "-c", HOLDER, C.EXT, pdb, cfg], stdout=subprocess.PIPE, text=True)
    hold.stdout.readline()
    C.run_writer(d, pdb, cfg, 5, seed=11)
    C.check(C.wait_caught_up(pdb, sdb) is not None, "caught up")
    shutil.copyfile(pdb, pdb + ".disk")
    shutil.copyfile(pdb + "-wal", pdb + "-wal.disk")
    C.run_writer(d, pdb, cfg, 10, seed=12)          # these never reach the disk
    ahead = C.wait_caught_up(pdb, sdb)
    C.stop(ship)
    C.kill9(hold)                                   # no clean close: the WAL stays
    os.replace(pdb + ".disk", pdb)
    os.replace(pdb + "-wal.disk", pdb + "-wal")
    os.unlink(pdb + "-shm")
    nbase = open(os.path.join(d, "standby.log")).read().count("base copy applied")
    # The window forced (issue 22 item 9): before the shipper captures
    # again, one transaction takes the WAL past the old capture position,
    # so only the frame there tells the two histories apart.
    # The connection stays open until the shipper has captured, so the WAL
    # is not checkpointed away at its close and the shipper's capture is
    # the one that meets the two histories.
    past = C.connect(pdb, cfg)
    past.execute("BEGIN")
    past.executemany("INSERT INTO t(v) VALUES(?)", [("past the old end %d " % i + "z" * 900,) for i in range(200)])
    past.execute("COMMIT")
    nlost = open(os.path.join(d, "ship.log")).read().count("lost commits")
    ship = C.start_ship(d, pdb, cfg, [sport])
    t0 = time.time()            # its first capture meets the two histories (a hang guard, not a measure)
    while time.time() - t0 < 120 and open(os.path.join(d, "ship.log")).read().count("lost commits") == nlost:
        time.sleep(0.05)
    C.run_writer(d, pdb, cfg, 15, seed=13)          # other commits where the lost ones were
    sb, audit, n0 = accept_rewind(d, sb, sdb, sport, "a primary that lost commits the standby has", "lost transactions")
    seq = C.wait_caught_up(pdb, sdb)
    past.close()
    C.check(seq is not None and open(os.path.join(d, "ship.log")).read().count("lost commits") > nlost,
            "the shipper noticed the WAL went back (standby was at %s; now %s)" % (ahead, seq))
    C.check(open(audit).read().count("standby_rewind_accepted") > n0, "the accepted rewind is audited")
    C.check(open(os.path.join(d, "standby.log")).read().count("base copy applied") > nbase,
            "the standby took a base copy")
    compare(pdb, sdb, cfg, d, "after the primary lost commits")

    C.step("promote")
    C.stop(ship)
    r = subprocess.run([C.CLI, "standby", "--promote", sdb], capture_output=True, text=True)
    C.check(r.returncode != 0 and "running" in r.stderr, "promotion refused while the standby runs: %s" % r.stderr.strip())
    C.stop(sb)
    # A damaged redo log (a record never acknowledged as applied) must not
    # block a restart or the failover.
    applied = int(C.read_state(sdb + "-tdestandby")["applied_seq"])
    badrec = C.craft_rec(applied + 1, [(2, 0, P), (0, 5, P)], 4096)
    with open(sdb + "-tdestandby-log", "wb") as f:
        f.write(badrec)
    nlog = open(os.path.join(d, "standby.log")).read().count("discarding the redo log")
    sb = C.start_standby(d, sdb, sport)
    t0 = time.time()
    while time.time() - t0 < 10 and C.read_state(sdb + "-tdestandby").get("state") != "waiting":
        time.sleep(0.1)
    slog = open(os.path.join(d, "standby.log")).read()
    C.check(sb.poll() is None and slog.count("discarding the redo log") > nlog and
            C.read_state(sdb + "-tdestandby").get("applied_seq") == str(applied),
            "a restart with a bad record in the redo log discards it and runs at %d: %s" % (
                applied, [ln for ln in slog.splitlines() if "discarding" in ln][-1:]))
    C.stop(sb)
    with open(sdb + "-tdestandby-log", "wb") as f:
        f.write(badrec + C.craft_rec(applied + 2, [(1, 5, P)], 4096)[:-1] + b"\0")
    # With the configuration (the keystore reachable): the promotion also
    # resets the page map the primary's header names (README "Standby").
    r = subprocess.run([C.CLI, "--config", cfg, "standby", "--promote", sdb], capture_output=True, text=True)
    C.check(r.returncode == 0 and "page map reset" in r.stdout,
            "the promotion resets the page map: %s" % (r.stdout + r.stderr).strip().replace("\n", " | "))
    C.check(r.returncode == 0 and "discarding the redo log" in r.stderr,
            "promoted past a bad redo log record: %s" % (r.stdout + r.stderr).strip().replace("\n", " | "))
    C.check(r.returncode == 0, "promoted: %s" % (r.stdout + r.stderr).strip().replace("\n", " | "))
    C.check(not os.path.exists(sdb + "-tdestandby"), "the standby state file is gone")
    compare(pdb, sdb, cfg, d, "promoted")
    db = C.connect(sdb, cfg)
    db.execute("INSERT INTO t VALUES(1000000, 'written on the promoted standby')")
    mode = db.execute("PRAGMA journal_mode").fetchone()[0]
    db.close()
    C.check(mode == "wal", "the promoted database is in WAL mode and writable")
    r = subprocess.run([C.CLI, "--config", cfg, "verify", sdb], capture_output=True, text=True)
    C.check(r.returncode == 0, "sqlite-tde verify on the promoted database: %s" % r.stdout.strip())
    C.step("benchmark kit: condition standby")
    out = os.path.join(d, "bench")
    r = subprocess.run([C.CLI, "bench", "--quick", "--repeats", "1", "--conditions", "standby",
                        "--workloads", "insert,delete-replenish", "--out", out],
                       capture_output=True, text=True, timeout=300)
    C.check(r.returncode == 0, "sqlite-tde bench --conditions standby: exit %d %s" % (r.returncode, r.stderr[-300:]))
    try:
        res = json.load(open(os.path.join(out, "results.json")))
    except (OSError, ValueError):
        res = {"observations": []}
    sbo = [o for o in res["observations"] if o["condition"] == "standby" and "result" in o]
    C.check(len(sbo) == 2 and all(o["result"].get("standby_catchup_s") is not None and
                                  o["result"].get("standby_lag_samples", 0) > 0 for o in sbo),
            "both workloads ran with the standby attached, lag sampled, caught up: %s" % [
                (o["workload"], o["result"].get("rows_per_s"), o["result"].get("standby_lag_txn_max"),
                 o["result"].get("standby_catchup_s")) for o in sbo])
    C.check("## Standby lag" in open(os.path.join(out, "report.md")).read(), "report.md has the standby lag table")
    C.finish("test_standby")


if __name__ == "__main__":
    main()
