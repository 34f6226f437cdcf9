"""Protection mode sync (issue 15): a commit on the primary returns only once
a standby has acknowledged it.  Each round: a writer commits one numbered
row with `ship --sync` running, prints once COMMIT returned, and the writer
and the shipper (the whole primary) are killed with SIGKILL at once; a copy
of the standby is promoted and must hold that row.  Then the fallback: with
the standby gone, a commit returns after repl_sync_timeout_ms, the shipper
says "sync degraded" (--status, tde_status, audit log) and later commits
do not wait; once the standby is back, sync again.

Environment: TDE_BUILD, TDE_TEST_TMP (set by ctest); TDE_SYNC_ROUNDS
(default 100)."""

import os
import shutil
import signal
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standby_common as C  # noqa: E402

ONE = r'''
import sqlite3, sys, time
b = sqlite3.connect(":memory:"); b.enable_load_extension(True); b.load_extension(sys.argv[1])
db = sqlite3.connect("file:%s?vfs=tde&tde_config=%s" % (sys.argv[2], sys.argv[3]), uri=True, isolation_level=None, timeout=30)
db.execute("PRAGMA synchronous=FULL")
n = int(sys.argv[4])
sys.stdin.readline()                      # go
t0 = time.time()
db.execute("BEGIN IMMEDIATE")
db.execute("INSERT INTO s VALUES(?, 'sync round')", (n,))
db.execute("COMMIT")
print("committed %d %.6f" % (n, time.time() - t0), flush=True)
time.sleep(60)
'''


# One commit after the fallback (argv: tde.so, database, configuration, row id).
NEXT = r'''
import sqlite3, sys
b = sqlite3.connect(":memory:"); b.enable_load_extension(True); b.load_extension(sys.argv[1])
db = sqlite3.connect("file:%s?vfs=tde&tde_config=%s" % (sys.argv[2], sys.argv[3]), uri=True, isolation_level=None, timeout=30)
db.execute("INSERT INTO s VALUES(?, 'async')", (int(sys.argv[4]),))
db.close()
print("committed")
'''


def status(db):
    r = subprocess.run([C.CLI, "standby", "--status", db], capture_output=True, text=True)
    return dict(line.split(": ", 1) for line in r.stdout.splitlines() if ": " in line)


def wait_streaming(pdb, pid, timeout=20):
    """This shipper (its pid: not the state a killed one left) streams, caught
    up, with its DB-tdeship-sync in place."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        sh = C.read_state(pdb + "-tdeship-state")
        try:
            sy = open(pdb + "-tdeship-sync", "rb").read()
        except OSError:
            sy = b""
        if (sh.get("pid") == str(pid) and sh.get("peer0_state") == "streaming"
                and sh.get("peer0_acked_seq") == sh.get("captured_seq")
                and len(sy) >= 20 and struct.unpack(">I", sy[16:20])[0] == pid):
            return True
        time.sleep(0.02)
    return False


def main():
    rounds = int(os.environ.get("TDE_SYNC_ROUNDS", "100"))
    d = C.workdir("test_standby_sync")
    cfg = C.make_config(d)
    certs = C.certs(d)
    C.write_writer(d)
    pdb = os.path.join(d, "primary.db")
    os.makedirs(os.path.join(d, "sb"))
    sdb = os.path.join(d, "sb", "standby.db")
    sport = C.free_port()
    one = os.path.join(d, "one.py")
    with open(one, "w") as f:
        f.write(ONE)
    C.run_writer(d, pdb, cfg, 10, seed=1)
    db = C.connect(pdb, cfg)
    db.execute("CREATE TABLE s(n INTEGER PRIMARY KEY, v TEXT)")
    db.close()
    sconf = os.path.join(certs, "ship-sync.conf")
    with open(sconf, "w") as f:
        f.write(open(os.path.join(certs, "ship.conf")).read() + "repl_sync_timeout_ms = 1500\n")

    C.step("%d rounds: commit one row in sync mode, SIGKILL the writer and the shipper at once, "
           "promote a copy of the standby: the row is there" % rounds)
    sb = C.start_standby(d, sdb, sport)
    missing = []
    lat = []
    t_start = time.time()
    for n in range(1, rounds + 1):
        ship = C.start_ship(d, pdb, cfg, [sport], conf=sconf, extra=["--sync"], cycle=50)
        if not wait_streaming(pdb, ship.pid):
            C.bad("round %d: the shipper did not connect: %s" % (n, open(os.path.join(d, "ship.log")).read()[-300:]))
            break
        w = subprocess.Popen([C.PY, one, C.EXT, pdb, cfg, str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=open(os.path.join(d, "one.err"), "a"), text=True)
        w.stdin.write("go\n")
        w.stdin.flush()
        line = w.stdout.readline()
        os.kill(w.pid, signal.SIGKILL)          # the primary dies right after COMMIT returned
        os.kill(ship.pid, signal.SIGKILL)
        w.wait()
        ship.wait()
        if not line.startswith("committed"):
            C.bad("round %d: no commit: %s" % (n, open(os.path.join(d, "one.err")).read()[-300:]))
            break
        lat.append(float(line.split()[2]))
        # Failover: promote a copy of the standby as it is now.
        cp = os.path.join(d, "fo")
        shutil.rmtree(cp, ignore_errors=True)
        os.makedirs(cp)
        for suffix in ("", "-tdestandby", "-tdestandby-log"):
            if os.path.exists(sdb + suffix):
                shutil.copyfile(sdb + suffix, os.path.join(cp, "f.db" + suffix))
        r = subprocess.run([C.CLI, "--config", cfg, "standby", "--promote", os.path.join(cp, "f.db")],
                           capture_output=True, text=True)
        if r.returncode != 0:
            C.bad("round %d: promotion failed: %s" % (n, r.stderr.strip()))
            break
        fdb = C.connect(os.path.join(cp, "f.db"), cfg)
        got = fdb.execute("SELECT count(*) FROM s WHERE n=?", (n,)).fetchone()[0]
        fdb.close()
        if got != 1:
            missing.append(n)
    lat.sort()
    C.check(len(lat) == rounds and not missing,
            "%d of %d committed rows were on the promoted standby (missing: %s); %.1f s" % (
                len(lat) - len(missing), rounds, missing[:10], time.time() - t_start))
    if lat:
        print("        commit latency in sync mode over %d rounds (one process, loaded machine, not a benchmark): "
              "median %.1f ms, max %.1f ms" % (len(lat), lat[len(lat) // 2] * 1000, lat[-1] * 1000))

    C.step("the standby goes away: the commit returns after the timeout, then async, audited; back to sync after")
    ship = C.start_ship(d, pdb, cfg, [sport], conf=sconf, extra=["--sync"], cycle=50)
    C.check(wait_streaming(pdb, ship.pid), "streaming")
    C.stop(sb)
    w = subprocess.Popen([C.PY, one, C.EXT, pdb, cfg, str(rounds + 1)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    w.stdin.write("go\n")
    w.stdin.flush()
    line = w.stdout.readline()
    w.kill()
    w.wait()
    t1 = float(line.split()[2]) if line.startswith("committed") else -1
    C.check(t1 >= 1.2, "a commit with no standby returned after the timeout (%.2f s, timeout 1.5 s)" % t1)
    t0 = time.time()
    while time.time() - t0 < 10 and status(pdb).get("state") != "sync degraded":
        time.sleep(0.1)
    st = status(pdb)
    C.check(st.get("state") == "sync degraded" and "degraded to async" in st.get("note", ""),
            "--status on the primary: %s; %s" % (st.get("state"), st.get("note", "")[:100]))
    db = C.connect(pdb, cfg)
    row = db.execute("SELECT repl_state FROM tde_status").fetchone()
    db.close()
    # The next commit, in a child whose tde log goes to stderr: a commit that
    # waited (no standby is there to acknowledge) ends at the deadline and
    # logs it, so its absence -- not a time -- shows it did not wait.
    r = subprocess.run([C.PY, "-c", NEXT, C.EXT, pdb, cfg, str(rounds + 2)], capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, SQLITE_TDE_LOG="stderr"))
    C.check(row[0] == "sync degraded" and r.returncode == 0 and "committed" in r.stdout
            and "no standby acknowledged" not in r.stderr,
            "tde_status says %s; the next commit did not wait (%s)" % (row[0], (r.stderr.strip() or "no log line")[:200]))
    audit = open(pdb + "-tdeship-audit").read()
    C.check("repl_sync_degraded" in audit, "the audit log records the fallback")
    sb = C.start_standby(d, sdb, sport)
    t0 = time.time()
    while time.time() - t0 < 20 and ("repl_sync_restored" not in open(pdb + "-tdeship-audit").read()
                                     or status(pdb).get("state") != "running"):
        time.sleep(0.1)
    C.check("repl_sync_restored" in open(pdb + "-tdeship-audit").read() and status(pdb).get("state") == "running",
            "the standby back: sync again (audited), state %s" % status(pdb).get("state"))
    C.stop(ship)
    C.check(not os.path.exists(pdb + "-tdeship-sync"), "a stopped shipper removes DB-tdeship-sync (writers do not wait)")
    C.stop(sb)
    C.finish("test_standby_sync")


if __name__ == "__main__":
    main()
