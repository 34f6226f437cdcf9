#!/usr/bin/python3
"""Round trip through Python's sqlite3 module (Debian's Python, whose module
uses the system libsqlite3) with the tde loadable extension.

For WAL and DELETE journal modes at page sizes 1024 and 8192: create an
encrypted database, executemany rows (text, blobs larger than a page,
floats, NULLs), update, delete, roll a transaction back, close, reopen and
compare every row with what Python remembers, then PRAGMA integrity_check,
tde_status, and `sqlite-tde verify`.  The files must not carry the
plaintext SQLite header, and the plain sqlite3 module must not read them.

Environment: TDE_BUILD (build folder with tde.so and sqlite-tde),
TDE_TEST_TMP (scratch root).  Exits non-zero on failure; a missing tool is
a failure, never a skip.
"""
import hashlib
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile

SEED = 20240611
BUILD = os.environ.get("TDE_BUILD")
TMP = os.environ.get("TDE_TEST_TMP", "/tmp")

failures = []


def check(cond, what):
    print(("ok     " if cond else "FAILED ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def die(msg):
    print("FAILED " + msg, flush=True)
    sys.exit(1)


def digest(rows):
    h = hashlib.sha256()
    for row in rows:
        h.update(repr(row).encode())
    return h.hexdigest()


def make_rows(rng, first, n, pgsz):
    rows = []
    for i in range(first, first + n):
        text = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(rng.randint(0, 150)))
        if i % 23 == 0:
            blob = rng.randbytes(pgsz + rng.randint(1, 2 * pgsz))   # overflow pages
        else:
            blob = rng.randbytes(rng.randint(0, 120))
        num = None if i % 17 == 0 else rng.random() * 1e6
        rows.append((i, text, blob, num))
    return rows


def uri(path, cfg):
    return "file:%s?vfs=tde&tde_config=%s" % (path, cfg)


def round_trip(work, cfg, mode, pgsz, rng):
    path = os.path.join(work, "py-%s-%d.db" % (mode, pgsz))
    print("# journal_mode=%s page_size=%d" % (mode, pgsz), flush=True)
    con = sqlite3.connect(uri(path, cfg), uri=True, isolation_level=None)
    con.execute("PRAGMA page_size=%d" % pgsz)
    got = con.execute("PRAGMA journal_mode=%s" % mode).fetchone()[0]
    check(got == mode, "journal_mode=%s accepted (got %s)" % (mode, got))
    con.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, txt TEXT, blb BLOB, num REAL)")
    con.execute("CREATE INDEX t_num ON t(num)")
    expect = {}

    rows = make_rows(rng, 1, 2500, pgsz)
    con.execute("BEGIN")
    con.executemany("INSERT INTO t VALUES(?, ?, ?, ?)", rows)
    con.execute("COMMIT")
    for r in rows:
        expect[r[0]] = r

    # Updates and deletes, mirrored in Python.
    upd = [(r[1] + "-u", r[0]) for r in rows if r[0] % 7 == 0]
    con.executemany("UPDATE t SET txt = ? WHERE id = ?", upd)
    for txt, i in upd:
        expect[i] = (i, txt, expect[i][2], expect[i][3])
    dels = [(i,) for i in list(expect) if i % 11 == 5]
    con.executemany("DELETE FROM t WHERE id = ?", dels)
    for (i,) in dels:
        del expect[i]

    # A transaction rolled back changes nothing.
    con.execute("BEGIN")
    con.execute("DELETE FROM t WHERE id % 2 = 0")
    con.executemany("INSERT INTO t VALUES(?, ?, ?, ?)", make_rows(rng, 100000, 300, pgsz))
    con.execute("ROLLBACK")

    # A transaction that spills the cache, committed.
    con.execute("PRAGMA cache_size=10")
    more = make_rows(rng, 5000, 800, pgsz)
    con.execute("BEGIN")
    con.executemany("INSERT INTO t VALUES(?, ?, ?, ?)", more)
    con.execute("COMMIT")
    for r in more:
        expect[r[0]] = r
    want = digest(sorted(expect.values()))
    check(digest(con.execute("SELECT id, txt, blb, num FROM t ORDER BY id")) == want,
          "content before close (%s/%d)" % (mode, pgsz))
    con.close()

    for suffix in ("-wal", "-journal"):
        check(not os.path.exists(path + suffix), "no %s left after close" % suffix)
    with open(path, "rb") as f:
        data = f.read()
    check(len(data) > 8192 and (len(data) - 8192) % pgsz == 0,
          "file is header region + whole pages (%d bytes)" % len(data))
    check(b"SQLite format 3\0" not in data, "no plaintext SQLite header in the file")

    # Reopen and compare.
    con = sqlite3.connect(uri(path, cfg), uri=True, isolation_level=None)
    check(con.execute("PRAGMA page_size").fetchone()[0] == pgsz, "page size %d after reopen" % pgsz)
    check(con.execute("PRAGMA journal_mode").fetchone()[0] == mode, "journal mode %s after reopen" % mode)
    check(digest(con.execute("SELECT id, txt, blb, num FROM t ORDER BY id")) == want,
          "content after reopen (%s/%d, %d rows)" % (mode, pgsz, len(expect)))
    ic = con.execute("PRAGMA integrity_check").fetchall()
    check(ic == [("ok",)], "integrity_check: %s" % ic[:3])
    st = con.execute("PRAGMA tde_status").fetchone()[0]
    check("encrypted=1" in st and ("page_size=%d " % pgsz) in st, "tde_status: %s" % st)
    enc = con.execute("SELECT encrypted, cipher FROM tde_status WHERE schema='main'").fetchone()
    check(enc == (1, "aes-256-gcm"), "tde_status table: %s" % (enc,))
    con.close()

    # The plain module cannot read it.
    try:
        plain = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
        plain.execute("SELECT count(*) FROM t").fetchone()
        check(False, "plain sqlite3 must not read the encrypted file")
    except sqlite3.DatabaseError as e:
        check("not a database" in str(e), "plain sqlite3 refuses the file: %s" % e)

    # The CLI verifies every page.
    cli = os.path.join(BUILD, "sqlite-tde")
    r = subprocess.run([cli, "--config", cfg, "verify", path], capture_output=True, text=True)
    check(r.returncode == 0, "sqlite-tde verify: rc=%d %s%s" % (r.returncode, r.stdout.strip(), r.stderr.strip()))


def main():
    if not BUILD:
        die("TDE_BUILD is not set")
    ext = os.path.join(BUILD, "tde.so")
    cli = os.path.join(BUILD, "sqlite-tde")
    for tool in (ext, cli):
        if not os.path.exists(tool):
            die("missing %s (build first)" % tool)
    os.makedirs(TMP, exist_ok=True)
    work = tempfile.mkdtemp(prefix="tdepy-", dir=TMP)
    os.chmod(work, 0o700)
    print("# scratch %s, seed %d, Python sqlite3 %s (SQLite %s)" % (work, SEED, sqlite3.version, sqlite3.sqlite_version))
    rng = random.Random(SEED)

    cfg = os.path.join(work, "tde.conf")
    with open(cfg, "w") as f:
        f.write("keystore = wallet\nwallet = w.tdew\nwallet_kdf_t = 1\nwallet_kdf_m_kib = 8192\n")
    r = subprocess.run([cli, "keystore", "create", "--auto-login", "--config", cfg],
                       capture_output=True, text=True)
    if r.returncode != 0:
        die("sqlite-tde keystore create: rc=%d %s %s" % (r.returncode, r.stdout, r.stderr))

    # Load the extension once: it registers the tde VFS process-wide.
    con0 = sqlite3.connect(":memory:")
    con0.enable_load_extension(True)
    con0.load_extension(os.path.join(BUILD, "tde"))
    check(con0.execute("SELECT tde_version()").fetchone()[0] != "", "extension loaded")

    for mode in ("wal", "delete"):
        for pgsz in (1024, 8192):
            round_trip(work, cfg, mode, pgsz, rng)

    # Wrong keystore: a second wallet cannot open the first one's database.
    cfg2 = os.path.join(work, "other", "tde.conf")
    os.makedirs(os.path.dirname(cfg2), mode=0o700)
    with open(cfg2, "w") as f:
        f.write("keystore = wallet\nwallet = w.tdew\nwallet_kdf_t = 1\nwallet_kdf_m_kib = 8192\n")
    r = subprocess.run([cli, "keystore", "create", "--auto-login", "--config", cfg2], capture_output=True, text=True)
    if r.returncode != 0:
        die("second keystore: %s" % r.stderr)
    path = os.path.join(work, "py-wal-1024.db")
    try:
        con = sqlite3.connect(uri(path, cfg2), uri=True)
        con.execute("SELECT count(*) FROM t").fetchone()
        check(False, "another wallet must not open the database")
    except sqlite3.DatabaseError as e:
        check(True, "another wallet is refused: %s" % e)

    # A host that cannot pass vfs=: SQLITE_TDE_DEFAULT_VFS=1 makes tde the
    # default VFS when the extension loads, SQLITE_TDE_CONFIG names the
    # keystore; plain file names then create encrypted databases.
    path = os.path.join(work, "py-default-vfs.db")
    child = r"""
import os, sqlite3, sys
con0 = sqlite3.connect(":memory:")
con0.enable_load_extension(True)
con0.load_extension(os.path.join(os.environ["TDE_BUILD"], "tde"))
path = sys.argv[1]
con = sqlite3.connect(path)
con.execute("PRAGMA journal_mode=WAL")
con.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, txt TEXT, blb BLOB)")
con.executemany("INSERT INTO t VALUES(?, ?, ?)", [(i, "row %d" % i, bytes([i % 256]) * (i * 37 % 9000)) for i in range(1, 801)])
con.commit()
con.close()
con = sqlite3.connect(path)
print(con.execute("SELECT encrypted FROM tde_status WHERE schema='main'").fetchone()[0])
print(con.execute("SELECT count(*), sum(length(blb)) FROM t").fetchone())
print(con.execute("PRAGMA integrity_check").fetchone()[0])
"""
    env = dict(os.environ, SQLITE_TDE_DEFAULT_VFS="1", SQLITE_TDE_CONFIG=cfg)
    r = subprocess.run([sys.executable, "-c", child, path], capture_output=True, text=True, env=env)
    want_sum = sum(i * 37 % 9000 for i in range(1, 801))
    check(r.returncode == 0 and r.stdout.split("\n")[:3] == ["1", "(800, %d)" % want_sum, "ok"],
          "SQLITE_TDE_DEFAULT_VFS=1 host: plain file name gives an encrypted database (%s%s)"
          % (r.stdout.strip().replace("\n", " | "), r.stderr.strip()))
    with open(path, "rb") as f:
        head = f.read(16)
    check(head != b"SQLite format 3\0", "the default-VFS database file is not plaintext")
    r = subprocess.run([cli, "--config", cfg, "verify", path], capture_output=True, text=True)
    check(r.returncode == 0, "sqlite-tde verify on it: %s%s" % (r.stdout.strip(), r.stderr.strip()))

    con0.close()
    if failures:
        print("%d check(s) failed" % len(failures))
        sys.exit(1)
    if not os.environ.get("TDE_KEEP_SCRATCH"):
        shutil.rmtree(work)
    print("all checks passed")


if __name__ == "__main__":
    main()
