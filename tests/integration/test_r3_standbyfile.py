"""A forged DB-tdestandby beside a primary switches no check off (issue 22
item 1).

The standby state file has no key: anyone who can write the database's
folder can write a valid one naming the database id (plaintext at header
offset 20).  It used to make the shim treat the primary as a standby copy:
page map and anchor off, the -wal hidden (page 1 shown in rollback mode),
writes refused with advice to promote, which then made a rollback
permanent.  A state file now counts only in a directory the configuration
declares with standby_copies (the configuration is a file the holder of
the database folder cannot write); next to any other database a valid state
file naming it refuses the open (SQLITE_AUTH), naming the file, and writes
nothing.  A standby copy in a declared directory still opens read-only.

Both journal modes.  Environment: TDE_BUILD, TDE_TEST_TMP (set by ctest)."""

import hashlib
import os
import sqlite3
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standby_common as C  # noqa: E402


def forge_state(db, seq=1):
    """A state file with a valid checksum naming db's id: all the attacker
    needs is the id, plaintext in the header."""
    with open(db, "rb") as f:
        f.seek(20)
        dbid = f.read(16)
    body = ("sqlite-tde-standby 1\ndatabase_id=%s\napplied_seq=%d\nreceived_seq=%d\nstate=streaming\n"
            % (dbid.hex(), seq, seq)).encode()
    with open(db + "-tdestandby", "wb") as f:
        f.write(body + b"sha256=" + hashlib.sha256(body).hexdigest().encode() + b"\n")


def sums(paths):
    out = {}
    for p in paths:
        if os.path.exists(p):
            out[p] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def main():
    d = C.workdir("test_r3_standbyfile")
    cfg = C.make_config(d)            # declares standby_copies = sb (and sb2..sb4)
    for mode in ("DELETE", "WAL"):
        C.step("journal_mode=%s: a forged state file next to the primary" % mode)
        db = os.path.join(d, "app-%s.db" % mode)
        c = C.connect(db, cfg)
        c.execute("PRAGMA journal_mode=%s" % mode)
        c.execute("CREATE TABLE acct(id INTEGER PRIMARY KEY, bal INT)")
        c.execute("INSERT INTO acct VALUES(1, 100)")
        if mode == "WAL":
            hold = C.connect(db, cfg)          # keeps the -wal: the newest commit lives there
            hold.execute("SELECT count(*) FROM acct").fetchone()
            c.execute("PRAGMA wal_autocheckpoint=0")
        c.execute("UPDATE acct SET bal=-900 WHERE id=1")
        c.close()
        forge_state(db)
        files = [db, db + "-wal", db + "-shm", db + "-journal"]
        before = sums(files)
        try:
            r = C.connect(db, cfg)
            got = r.execute("SELECT bal FROM acct").fetchone()[0]
            r.close()
            err = ""
        except sqlite3.Error as e:
            got, err = None, str(e)
        C.check(got is None, "%s: the open is refused (got %r, %s)" % (mode, got, err or "no error"))
        C.check(got != 100, "%s: the -wal is not hidden, no older row is served" % mode)
        st = subprocess.run([C.CLI, "--config", cfg, "status", db], capture_output=True, text=True)
        C.check(st.returncode != 0 and "tdestandby" in st.stderr and "standby_copies" in st.stderr,
                "%s: sqlite-tde status refuses it, naming the file and the setting: %s"
                % (mode, st.stderr.strip()[:200]))
        C.check("page_map: off (standby copy)" not in st.stdout and "anchor: off" not in st.stdout,
                "%s: no check is reported off" % mode)
        after = sums(files)
        C.check(before == after, "%s: the refusal wrote nothing" % mode)
        os.unlink(db + "-tdestandby")
        r = C.connect(db, cfg)
        C.check(r.execute("SELECT bal FROM acct").fetchone()[0] == -900,
                "%s: without the forged file the newest commit reads back" % mode)
        r.execute("INSERT INTO acct VALUES(2, 1)")
        r.close()
        if mode == "WAL":
            hold.close()

    C.step("a copy in a declared standby_copies directory is a standby copy: read-only")
    os.makedirs(os.path.join(d, "sb"), exist_ok=True)
    sdb = os.path.join(d, "sb", "copy.db")
    c = C.connect(sdb, cfg)
    c.execute("CREATE TABLE t(x)")
    c.execute("INSERT INTO t VALUES(1)")
    c.close()
    forge_state(sdb)
    r = C.connect(sdb, cfg)
    C.check(r.execute("SELECT count(*) FROM t").fetchone()[0] == 1, "it reads")
    try:
        r.execute("INSERT INTO t VALUES(2)")
        wrote = True
    except sqlite3.Error as e:
        wrote = "readonly" in str(e).lower()
        wrote = not wrote
    r.close()
    C.check(not wrote, "writes are refused (read-only)")
    st = subprocess.run([C.CLI, "--config", cfg, "status", sdb], capture_output=True, text=True)
    C.check(st.returncode == 0 and "standby copy" in st.stdout, "status shows a standby copy")

    C.step("a symbolic link into the declared directory from elsewhere: the place is the real one")
    os.symlink(sdb, os.path.join(d, "link.db"))
    r = C.connect(os.path.join(d, "link.db"), cfg)
    C.check(r.execute("SELECT count(*) FROM t").fetchone()[0] == 1, "it reads through the link")
    r.close()
    C.finish("test_r3_standbyfile")


if __name__ == "__main__":
    main()
