#!/usr/bin/python3
"""`sqlite-tde keystore passwd` and tde_keystore_passwd() (issue 16, item 4).

On a password wallet (created at a pseudo-terminal prompt) holding the
master key of an encrypted database, asserts:
  * a wrong current password and a mistyped repeat change nothing (the file
    is byte for byte the same) and exit non-zero;
  * passwd with --kdf-t 2 --kdf-m 16384: exit 0; the file has a new salt
    and t=2, m=16384 (docs/WALLET.md offsets 20, 24, 32); the old password
    then fails (SQLITE_AUTH, "password incorrect"), the new one opens the
    wallet and the database reads its rows; an audit line keystore_passwd
    with outcome ok and the new cost, and no password in the audit log;
  * the C API through the shared library (ctypes on libsqlite-tde.so):
    tde_keystore_passwd(cfg, old, new, 0, 0) keeps t/m, changes the salt,
    and again only the new password opens; a wrong old password returns
    TDE_BADPASSWORD (5); an auto-login wallet returns TDE_UNSUPPORTED (11).
"""
import ctypes
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_readme as readme  # noqa: E402

BUILD, TMP = readme.BUILD, readme.TMP
PW1 = "tde-test-pw-passwd-one-2Qm7"
PW2 = "tde-test-pw-passwd-two-8Lc4"
PW3 = "tde-test-pw-passwd-three-5Vx1"
BAD = "tde-test-pw-passwd-bad-9Hd6"
failures = []


def check(cond, msg):
    print(("ok   " if cond else "FAIL ") + msg, flush=True)
    if not cond:
        failures.append(msg)
    return cond


def kdf(path):
    with open(path, "rb") as f:
        a = f.read(48)
    t, m, p = struct.unpack(">III", a[20:32])
    return t, m, a[32:48]


OPEN_PY = r"""
import sqlite3, sys
cfg, pw, ext, db = sys.argv[1:5]
b = sqlite3.connect(':memory:'); b.enable_load_extension(True); b.load_extension(ext)
try:
    b.execute('SELECT tde_keystore_open(?, ?)', (cfg, pw)).fetchone()
except sqlite3.DatabaseError as e:
    print('refused:', e); sys.exit(3)
d = sqlite3.connect('file:%s?vfs=tde&tde_config=%s' % (db, cfg), uri=True)
d.execute('CREATE TABLE IF NOT EXISTS t(x)')
with d:
    d.execute("INSERT INTO t VALUES ('row')")
print('rows', d.execute('SELECT count(*) FROM t').fetchone()[0])
"""


def try_open(w, cfg, pw):
    p = subprocess.run(["/usr/bin/python3", "-c", OPEN_PY, cfg, pw, os.path.join(BUILD, "tde"),
                        os.path.join(w, "app.db")], cwd=w, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=120)
    return p.returncode, p.stdout.decode(errors="replace")


def main():
    os.makedirs(TMP, exist_ok=True)
    w = tempfile.mkdtemp(prefix="passwd-", dir=TMP)
    cli = os.path.join(BUILD, "sqlite-tde")
    cfg = os.path.join(w, "tde.conf")
    wallet = os.path.join(w, "tde.wallet")
    audit = os.path.join(w, "audit.log")
    with open(cfg, "w") as f:
        f.write("keystore = wallet\nwallet = tde.wallet\nwallet_kdf_t = 1\nwallet_kdf_m_kib = 8192\n"
                "audit_log = audit.log\n")
    os.chmod(cfg, 0o600)
    env = readme.host_env()
    rc, out = readme.run_pty([cli, "--config", cfg, "keystore", "create"], w, env, password=[PW1, PW1])
    check(rc == 0, "wallet created at the prompt" + ("" if rc == 0 else ": " + out))
    rc, out = try_open(w, cfg, PW1)
    check(rc == 0 and "rows 1" in out, "database written with the first password: " + out.strip())
    t0, m0, salt0 = kdf(wallet)
    check((t0, m0) == (1, 8192), "created with t=1 m=8192")

    with open(wallet, "rb") as f:
        before = f.read()
    rc, out = readme.run_pty([cli, "--config", cfg, "keystore", "passwd"], w, env, password=[BAD, PW2, PW2])
    with open(wallet, "rb") as f:
        same = f.read() == before
    check(rc != 0 and "password incorrect" in out and same, "wrong current password: refused, file unchanged")
    rc, out = readme.run_pty([cli, "--config", cfg, "keystore", "passwd"], w, env, password=[PW1, PW2, PW3])
    with open(wallet, "rb") as f:
        same = f.read() == before
    check(rc != 0 and "do not match" in out and same, "mistyped repeat: refused, file unchanged" + ("" if same else "") + (" " + out if rc == 0 or "do not match" not in out else ""))

    rc, out = readme.run_pty([cli, "--config", cfg, "keystore", "passwd", "--kdf-t", "2", "--kdf-m", "16384"],
                             w, env, password=[PW1, PW2, PW2])
    check(rc == 0 and "password changed" in out, "keystore passwd --kdf-t 2 --kdf-m 16384" +
          ("" if rc == 0 else ": " + out))
    t1, m1, salt1 = kdf(wallet)
    check((t1, m1) == (2, 16384) and salt1 != salt0, "new cost t=2 m=16384 and a new salt")
    check(os.stat(wallet).st_mode & 0o777 == 0o600, "wallet mode still 0600")
    rc, out = try_open(w, cfg, PW1)
    check(rc == 3 and "password incorrect" in out, "old password fails: " + out.strip())
    rc, out = try_open(w, cfg, PW2)
    check(rc == 0 and "rows 2" in out, "new password opens the wallet and the database: " + out.strip())
    with open(audit) as f:
        log = f.read()
    lines = [json.loads(l) for l in log.splitlines() if l.strip()]
    ok_lines = [l for l in lines if l.get("op") == "keystore_passwd" and l.get("outcome") == "success"]
    check(len(ok_lines) == 1 and "t=2 m=16384" in json.dumps(ok_lines[0]),
          "audit: one successful keystore_passwd with the new cost")
    check(any(l.get("op") == "keystore_passwd" and l.get("outcome") == "failure" for l in lines),
          "audit: the refused attempt is recorded too")
    check(all(p not in log for p in (PW1, PW2, PW3, BAD)), "audit log holds no password")

    # The C API, through the shared library.
    lib = ctypes.CDLL(os.path.join(BUILD, "libsqlite-tde.so"))
    fn = lib.tde_keystore_passwd
    fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint32]
    fn.restype = ctypes.c_int
    check(fn(cfg.encode(), BAD.encode(), PW3.encode(), 0, 0) == 5, "C API: wrong old password -> TDE_BADPASSWORD")
    check(fn(cfg.encode(), PW2.encode(), PW3.encode(), 0, 0) == 0, "C API: tde_keystore_passwd -> TDE_OK")
    t2, m2, salt2 = kdf(wallet)
    check((t2, m2) == (2, 16384) and salt2 not in (salt0, salt1), "C API: cost kept, new salt")
    rc, out = try_open(w, cfg, PW2)
    check(rc == 3, "C API: the previous password fails")
    rc, out = try_open(w, cfg, PW3)
    check(rc == 0 and "rows 3" in out, "C API: the new password opens: " + out.strip())
    auto = os.path.join(w, "auto.conf")
    with open(auto, "w") as f:
        f.write("keystore = wallet\nwallet = auto.wallet\n")
    subprocess.run([cli, "--config", auto, "keystore", "create", "--auto-login"], cwd=w,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    check(fn(auto.encode(), b"x", PW3.encode(), 0, 0) == 11, "C API: auto-login wallet -> TDE_UNSUPPORTED")

    print("%d failures" % len(failures))
    if failures:
        sys.exit(1)
    if os.environ.get("TDE_KEEP_SCRATCH") != "1":
        shutil.rmtree(w, ignore_errors=True)


if __name__ == "__main__":
    main()
