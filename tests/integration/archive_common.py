"""Helpers shared by the archive's integration tests (test_restore.py,
test_archive_retain.py, test_archive_pitr.py): the deterministic workload
and its rows, the S3 server's settings, the database id, an environment
with no keystore reachable, and reading a restored copy."""

import hashlib
import os
import subprocess

import standby_common as C


def txn(db, k, big=200):
    """Transaction k of the workload, the same on the primary and its plain
    SQLite mirror (every tenth row's blob is `big` times 32 bytes)."""
    blob = hashlib.sha256(b"row-%d" % k).digest() * (big if k % 10 == 0 else 4)
    db.execute("BEGIN")
    db.execute("INSERT INTO t(k, v, b) VALUES(?, ?, ?)", (k, "value %d" % (k * 7919 % 1000), blob))
    if k % 4 == 0:
        db.execute("UPDATE t SET v = v || '+' WHERE k = ?", (k // 2,))
    if k % 7 == 0:
        db.execute("DELETE FROM t WHERE k = ?", (k - 5,))
    db.execute("COMMIT")


def rows(db):
    return db.execute("SELECT k, v, hex(b) FROM t ORDER BY k").fetchall()


def s3env(srv):
    """The S3 server's settings (tests/lib/s3server.sh writes srv/s3.env)."""
    env = {}
    for line in open(os.path.join(srv, "s3.env")):
        k, _, v = line.rstrip("\n").partition("=")
        env[k] = v
    return env


def db_id(path):
    """The database id: plaintext at offset 20 of the header (FORMAT.md)."""
    with open(path, "rb") as f:
        f.seek(20)
        return f.read(16).hex()


def clean_env(d):
    """No keystore reachable: HOME and the configuration point nowhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLITE_TDE") and not k.startswith("AWS_")}
    env["HOME"] = os.path.join(d, "nohome")
    env["SQLITE_TDE_CONFIG"] = os.path.join(d, "nohome", "none.conf")
    return env


def read_restored(cfg, out):
    """Rows and integrity_check of a restored database: its header names the
    primary's page map, which the archive does not hold, so `sqlite-tde
    remap` (with the key) accepts its pages first, as for a standby's copy."""
    r = subprocess.run([C.CLI, "--config", cfg, "remap", out], capture_output=True, text=True)
    C.check(r.returncode == 0, "remap %s: %s" % (os.path.basename(out), (r.stdout + r.stderr).strip()[:300]))
    db = C.connect(out, cfg)
    try:
        return rows(db), db.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        db.close()
