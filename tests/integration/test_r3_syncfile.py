"""A forged DB-tdeship-sync never blocks a commit (issue 22, item 5).

Protection mode sync makes a commit wait for a standby's acknowledgement
while a shipper in sync mode runs.  Anyone who can write the database's
folder can create DB-tdeship-sync, so the file alone must prove nothing:
the shim waits only while a live process (the shipper) holds an OFD write
lock on it, only while the path still names that file, and never longer
than the largest timeout the configuration accepts.

Each case commits one row in a child process and requires the commit to
return.  The deadlines here are generous (minutes, for a loaded machine)
and only decide whether a commit hung: before the fix a forged file naming
a running pid and a timeout of 0xFFFFFFFF ms blocked the commit for 49
days, and a FIFO at that path blocked the open forever.

Environment: TDE_BUILD, TDE_TEST_TMP (set by ctest)."""

import os
import signal
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standby_common as C  # noqa: E402

# Linux fcntl commands for open-file-description locks, and struct flock on
# x86_64/aarch64 (short type, short whence, off_t start, off_t len, pid_t pid).
F_OFD_SETLK = 37
F_WRLCK = 1
FLOCK = "hh4xqqi4x"

COMMIT = r'''
import sqlite3, sys
b = sqlite3.connect(":memory:"); b.enable_load_extension(True); b.load_extension(sys.argv[1])
db = sqlite3.connect("file:%s?vfs=tde&tde_config=%s" % (sys.argv[2], sys.argv[3]), uri=True,
                     isolation_level=None, timeout=30)
print("ready", flush=True)
sys.stdin.readline()
db.execute("BEGIN IMMEDIATE")
db.execute("INSERT INTO s(v) VALUES('after the forged file')")
db.execute("COMMIT")
print("committed", flush=True)
'''

HOLD = r'''
import fcntl, os, struct, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.fcntl(fd, %d, struct.pack("%s", %d, 0, 0, 0, 0))
print("locked", flush=True)
time.sleep(3600)
''' % (F_OFD_SETLK, FLOCK, F_WRLCK)


def sync_bytes(timeout_ms, pid):
    """A DB-tdeship-sync as a shipper in sync mode writes it, nothing
    acknowledged yet (docs/FORMAT.md)."""
    return b"TDESYNC1" + struct.pack(">IIII", 1, timeout_ms, pid, 0) + b"\0" * 8 + struct.pack(">II", 0, 0)


def start_commit(d, db, cfg):
    script = os.path.join(d, "commit.py")
    with open(script, "w") as f:
        f.write(COMMIT)
    p = subprocess.Popen([C.PY, script, C.EXT, db, cfg], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    if p.stdout.readline().strip() != "ready":
        raise RuntimeError("the committing child did not start")
    return p


def commit_returns(p, deadline_s):
    """Let the child commit; True if COMMIT returned within deadline_s (a
    hang guard sized for a loaded machine, not a measurement)."""
    p.stdin.write("go\n")
    p.stdin.flush()
    try:
        out, _ = p.communicate(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        return False
    return p.returncode == 0 and "committed" in out


def wait_then_end(p, xEnd, deadline_s=120):
    """Let the child commit, give it a second to start waiting, then run
    xEnd (what must end the wait).  (waited, returned): the child was still
    in its commit after that second, and COMMIT returned once xEnd ran
    (deadline_s is a hang guard)."""
    p.stdin.write("go\n")
    p.stdin.flush()
    time.sleep(1)
    waited = p.poll() is None
    xEnd()
    try:
        out, _ = p.communicate(timeout=deadline_s)
        returned = p.returncode == 0 and "committed" in out
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        returned = False
    return waited, returned


def kill_holder(h):
    h.send_signal(signal.SIGKILL)
    h.wait()


def count(db, cfg):
    c = C.connect(db, cfg)
    n = c.execute("SELECT count(*) FROM s").fetchone()[0]
    c.close()
    return n


def start_holder(d, path):
    script = os.path.join(d, "hold.py")
    with open(script, "w") as f:
        f.write(HOLD)
    h = subprocess.Popen([C.PY, script, path], stdout=subprocess.PIPE, text=True)
    if h.stdout.readline().strip() != "locked":
        raise RuntimeError("the lock holder did not start")
    return h


def main():
    d = C.workdir("test_r3_syncfile")
    cfg = C.make_config(d)
    db = os.path.join(d, "app.db")
    sync = db + "-tdeship-sync"
    c = C.connect(db, cfg)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute("CREATE TABLE s(n INTEGER PRIMARY KEY, v TEXT)")
    c.close()
    n = 0

    C.step("a forged file (a running pid, timeout 0xFFFFFFFF ms, no lock held): the commit does not wait")
    with open(sync, "wb") as f:
        f.write(sync_bytes(0xFFFFFFFF, os.getpid()))
    p = start_commit(d, db, cfg)
    C.check(commit_returns(p, 120), "the commit returned")
    n += 1
    C.check(count(db, cfg) == n, "the row is there")

    C.step("a FIFO at DB-tdeship-sync: the commit does not block on its open")
    os.unlink(sync)
    os.mkfifo(sync)
    p = start_commit(d, db, cfg)
    C.check(commit_returns(p, 120), "the commit returned")
    n += 1
    C.check(count(db, cfg) == n, "the row is there")
    os.unlink(sync)

    C.step("a symbolic link to a locked sync file: not followed, the commit does not wait")
    real = os.path.join(d, "elsewhere")
    with open(real, "wb") as f:
        f.write(sync_bytes(0xFFFFFFFF, os.getpid()))
    h = start_holder(d, real)
    os.symlink(real, sync)
    p = start_commit(d, db, cfg)
    C.check(commit_returns(p, 120), "the commit returned")
    n += 1
    kill_holder(h)
    os.unlink(sync)

    C.step("a live lock holder, then the file removed: the waiting commit returns")
    with open(sync, "wb") as f:
        f.write(sync_bytes(0xFFFFFFFF, os.getpid()))
    h = start_holder(d, sync)
    p = start_commit(d, db, cfg)
    waited, returned = wait_then_end(p, lambda: os.unlink(sync))
    C.check(waited, "while a process held the lock, the commit waited (sync mode is honoured)")
    C.check(returned, "removing the file ended the wait")
    n += 1
    kill_holder(h)

    C.step("a live lock holder that dies: the waiting commit returns")
    with open(sync, "wb") as f:
        f.write(sync_bytes(0xFFFFFFFF, os.getpid()))
    h = start_holder(d, sync)
    p = start_commit(d, db, cfg)
    waited, returned = wait_then_end(p, lambda: kill_holder(h))
    C.check(waited, "while the holder lived, the commit waited")
    C.check(returned, "the holder's death ended the wait")
    n += 1
    C.check(count(db, cfg) == n, "every committed row is there (%d)" % n)
    os.unlink(sync)
    C.finish("test_r3_syncfile")


if __name__ == "__main__":
    main()
