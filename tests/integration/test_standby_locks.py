"""A reader of a standby copy keeps its read lock (the standby's apply
waits for it) and never keeps a cache across a change it cannot see.

The shim used to open and close a second descriptor of the database
(tdeStandbyIsCopy) at every read of page 1's header and at every open.
Closing any descriptor of a file drops every POSIX lock the process holds
on it, so a reader lost its SHARED lock just after SQLite took it: the
applier (`sqlite-tde standby`, which waits for the SHARED range) then
wrote pages under a live read transaction and the reader saw "database
disk image is malformed".  Deterministic checks, real SQLite through
Python's sqlite3 module with tde loaded, the locks probed from another
process with fcntl:

- a read transaction on the copy holds the SHARED range (a write lock on
  it from another process is refused), also after a second connection of
  the same process opened the copy and ran its own transaction;
- PRAGMA data_version: unchanged while applied_seq is, changed when it
  changes, changed at every transaction while the state file is damaged;
- a base copy renamed over the copy: an open handle fails its next read
  (it would read the old file for ever), a new connection reads the new.

Environment: TDE_BUILD, TDE_TEST_TMP (set by ctest)."""

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standby_common as C  # noqa: E402

# SQLite's unix VFS lock bytes (rollback mode).
PENDING = 0x40000000
SHARED_FIRST = PENDING + 2
SHARED_SIZE = 510

PROBE = r'''
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, int(sys.argv[3]), int(sys.argv[2]), 0)
except OSError:
    print("held")
else:
    print("free")
'''


def shared_held(db):
    """Another process cannot write-lock the SHARED range: a reader holds it."""
    r = subprocess.run([C.PY, "-c", PROBE, db, str(SHARED_FIRST), str(SHARED_SIZE)],
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        C.bad("lock probe failed: %s" % r.stderr[-1000:])
    return r.stdout.strip() == "held"


def write_state(db, dbid, seq):
    body = "sqlite-tde-standby 1\ndatabase_id=%s\napplied_seq=%d\nreceived_seq=%d\nstate=streaming\n" % (
        dbid.hex(), seq, seq)
    data = body.encode()
    data += b"sha256=" + hashlib.sha256(data).hexdigest().encode() + b"\n"
    tmp = db + "-tdestandby.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.rename(tmp, db + "-tdestandby")


def data_version(db):
    db.execute("BEGIN")
    v = db.execute("PRAGMA data_version").fetchone()[0]
    db.execute("SELECT count(*) FROM t").fetchone()
    db.execute("COMMIT")
    return v


def main():
    d = C.workdir("test_standby_locks")
    cfg = C.make_config(d)
    os.makedirs(os.path.join(d, "sb"))
    path = os.path.join(d, "sb", "copy.db")
    w = C.connect(path, cfg)
    w.execute("CREATE TABLE t(x)")
    w.execute("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i<200) "
              "INSERT INTO t SELECT randomblob(300) FROM n")
    w.close()
    with open(path, "rb") as f:
        f.seek(20)
        dbid = f.read(16)
    write_state(path, dbid, 7)

    C.step("a read transaction on the standby copy holds SHARED")
    r1 = C.connect(path, cfg)
    C.check(r1.execute("SELECT count(*) FROM t").fetchone()[0] == 200, "the copy reads, 200 rows")
    C.check(not shared_held(path), "no lock between transactions")
    r1.execute("BEGIN")
    r1.execute("SELECT count(*) FROM t").fetchone()
    C.check(shared_held(path), "SHARED range held by the open read transaction "
            "(another process cannot write-lock it)")

    C.step("a second connection of the same process opens the copy and reads")
    r2 = C.connect(path, cfg)
    C.check(r2.execute("SELECT count(*) FROM t").fetchone()[0] == 200, "second connection reads, 200 rows")
    C.check(shared_held(path), "first connection's SHARED still held after the second opened and read")
    r2.close()
    C.check(shared_held(path), "first connection's SHARED still held after the second closed")
    r1.execute("COMMIT")
    C.check(not shared_held(path), "released at COMMIT")

    C.step("the change counter follows applied_seq; a damaged state file keeps no cache")
    v1 = data_version(r1)
    v2 = data_version(r1)
    C.check(v1 == v2, "data_version unchanged while applied_seq is (%d, %d)" % (v1, v2))
    write_state(path, dbid, 8)
    v3 = data_version(r1)
    C.check(v3 != v2, "data_version changed with applied_seq 7 -> 8 (%d, %d)" % (v2, v3))
    with open(path + "-tdestandby", "r+b") as f:
        f.seek(5)
        f.write(b"X")
    v4 = data_version(r1)
    v5 = data_version(r1)
    C.check(v4 != v3 and v5 != v4, "damaged state file: data_version changes at every transaction "
            "(%d, %d, %d)" % (v3, v4, v5))
    C.check(r1.execute("SELECT count(*) FROM t").fetchone()[0] == 200, "still reads, 200 rows")

    C.step("a base copy replaces the file: an open handle fails, it never reads the old file")
    write_state(path, dbid, 9)
    base = os.path.join(d, "base.db")
    shutil.copyfile(path, base)
    b = C.connect(base, cfg)
    b.execute("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i<50) "
              "INSERT INTO t SELECT randomblob(300) FROM n")
    b.close()
    os.rename(base, path)
    write_state(path, dbid, 10)
    try:
        n = r1.execute("SELECT count(*) FROM t").fetchone()[0]
        C.bad("the handle of the replaced file still reads (%d rows, the new file has 250)" % n)
    except sqlite3.Error as e:
        why = C.load_ext().execute("SELECT tde_last_error()").fetchone()[0] or ""
        C.check("disk I/O error" in str(e) and "was replaced" in why,
                "the handle of the replaced file fails: %s (%s)" % (e, why))
    r1.close()
    r3 = C.connect(path, cfg)
    C.check(r3.execute("SELECT count(*) FROM t").fetchone()[0] == 250, "reopened, it reads the new file (250 rows)")
    r3.close()
    C.finish("test_standby_locks")


if __name__ == "__main__":
    main()
