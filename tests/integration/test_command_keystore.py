#!/usr/bin/python3
"""The command keystore (keystore = command) end to end, with the example
helpers of contrib/keystore-helpers/.

1. The openssl helper (the test oracle: real openssl, RSA-OAEP with the
   associated data as label), behind a recording wrapper: keystore create,
   status, list; a database written and read through the sqlite-tde shell;
   one unwrap per database open however many pages are read; the data key
   never in a helper's argv or environment, the password_env variable not
   in its environment, neither in the audit log; rotate-master-key; list;
   migrate-keystore to a wallet and back; a wrapped key refused for other
   associated data.
2. Bad helpers fail the open with a clear message and write nothing: one
   that crashes (SIGSEGV), prints junk, answers without
   the protocol version, returns a key of the wrong length, answers for
   another database, returns another database's key, exits 4, cannot be
   executed; a wrap helper that prints the key on stderr is redacted.  Each
   runs under a deadline of minutes, so the reason asserted is the helper's
   answer on any machine, however busy, never how fast Python or sh started.
   The deadline itself is tested apart, with a helper that really hangs
   (and leaves a child behind): killed, process group and all, with the
   timeout as the reason.
3. The Vault/OpenBao Transit and AWS KMS helpers against stand-in `vault`
   and `aws` executables on PATH that record and check the exact
   arguments and JSON (the real services were not available).

Environment: TDE_BUILD, TDE_SRC, TDE_TEST_TMP.  A missing tool fails.
"""
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

BUILD = os.environ.get("TDE_BUILD")
SRC = os.environ.get("TDE_SRC")
TMP = os.environ.get("TDE_TEST_TMP", "/tmp")
PY = "/usr/bin/python3"

failures = []


def check(cond, what):
    print(("ok     " if cond else "FAILED ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def die(msg):
    print("FAILED " + msg, flush=True)
    sys.exit(1)


if not BUILD or not SRC:
    die("TDE_BUILD and TDE_SRC must be set")
CLI = os.path.join(BUILD, "sqlite-tde")
HELPERS = os.path.join(SRC, "contrib", "keystore-helpers")
for tool in (CLI, shutil.which("openssl") or "/nonexistent/openssl", PY):
    if not os.access(tool, os.X_OK):
        die("missing tool: %s" % tool)
os.makedirs(TMP, exist_ok=True)
W = tempfile.mkdtemp(prefix="tdecmd-", dir=TMP)
REC = os.path.join(W, "rec")
os.makedirs(REC)
PW = "pw-must-never-reach-a-helper-7781"
ENV = dict(os.environ, TDE_CMD_TEST_PW=PW)


def write(path, text, mode=0o600):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


def tde(cfg, *args, stdin=None, env=None):
    p = subprocess.run([CLI, "--config", cfg] + list(args), input=stdin, text=True,
                       capture_output=True, env=env or ENV, timeout=120)
    return p.returncode, p.stdout, p.stderr


def sql(cfg, db, text):
    return tde(cfg, "shell", db, stdin=text)


def py_read(cfg, db, query):
    """One connection in a fresh Python process (Debian's sqlite3 module
    with tde.so); returns (rc, rows as text, stderr)."""
    code = ("import sqlite3,sys\n"
            "c=sqlite3.connect(':memory:'); c.enable_load_extension(True)\n"
            "c.load_extension(sys.argv[1]); c.close()\n"
            "db=sqlite3.connect('file:%s?vfs=tde&tde_config=%s' % (sys.argv[2], sys.argv[3]), uri=True)\n"
            "db.execute('PRAGMA cache_size=4')\n"
            "print(db.execute(sys.argv[4]).fetchall())\n")
    p = subprocess.run([PY, "-c", code, os.path.join(BUILD, "tde"), db, cfg, query],
                       capture_output=True, text=True, env=ENV, timeout=120)
    return p.returncode, p.stdout.strip(), p.stderr


def digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def records(op=None):
    out = []
    for name in sorted(os.listdir(REC)):
        with open(os.path.join(REC, name)) as f:
            r = json.load(f)
        if op is None or r["request"].get("op") == op:
            out.append(r)
    return out


def clear_records():
    for name in os.listdir(REC):
        os.unlink(os.path.join(REC, name))


# A wrapper that records what a helper receives (argv, environment, the
# request), then runs the real helper with the same stdin.
RECORDER = write(os.path.join(W, "record.py"), r'''
import json, os, subprocess, sys, time
rec, helper = sys.argv[1], sys.argv[2:]
data = sys.stdin.buffer.read()
name = os.path.join(rec, "%.6f-%d.json" % (time.time(), os.getpid()))
with open(name, "w") as f:
    json.dump({"argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd(),
               "request": json.loads(data)}, f)
p = subprocess.run(helper, input=data)
sys.exit(p.returncode)
''')

OSSL = os.path.join(HELPERS, "tde-openssl-helper")
GOOD = "%s %s %s %s %s --dir keys" % (PY, RECORDER, REC, PY, OSSL)


# Helpers start Python (twice, with the recorder) and openssl: on a loaded
# machine that takes seconds, so every configuration but the hang test's
# gives them minutes (the default is 10 s).
SLOW_OK = "command_timeout_ms = 180000\n"


def command_conf(name, wrap=GOOD, unwrap=GOOD, extra=SLOW_OK):
    return write(os.path.join(W, name),
                 "keystore = command\n"
                 "wrap_command = %s\n"
                 "unwrap_command = %s\n"
                 "new_key_command = %s\n"
                 "list_keys_command = %s\n"
                 "password_env = TDE_CMD_TEST_PW\n"
                 "audit_log = audit.log\n%s" % (wrap, unwrap, GOOD, GOOD, extra))


# ---- 1. the openssl helper ----------------------------------------------------
CFG = command_conf("tde.conf")
rc, out, err = tde(CFG, "keystore", "create")
check(rc == 0 and out.strip().startswith("ossl-"), "keystore create prints the first key id (%s)" % err.strip())
KEY1 = out.strip()
check(os.path.isfile(os.path.join(W, "keys", KEY1 + ".pem")),
      "the helper ran in the configuration's folder (keys/ made there)")
rc, out, err = tde(CFG, "keystore", "create")
check(rc != 0 and "already lists" in err, "a second keystore create is refused: " + err.strip())
rc, out, err = tde(CFG, "keystore", "status")
check(rc == 0 and "type: command" in out and "status: OPEN" in out
      and ("current master key: " + KEY1) in out, "keystore status: command, OPEN, current key")
rc, out, err = tde(CFG, "keystore", "list")
check(rc == 0 and KEY1 in out and "ACTIVE" in out, "keystore list shows the key")

DB = os.path.join(W, "a.db")
rows = "".join("INSERT INTO t VALUES(%d, randomblob(900));\n" % i for i in range(400))
rc, out, err = sql(CFG, DB, "PRAGMA page_size=1024; CREATE TABLE t(i INTEGER PRIMARY KEY, b);\n"
                   "BEGIN;\n" + rows + "COMMIT;\nSELECT count(*) FROM t;\n")
check(rc == 0 and out.strip() == "400", "database written through the command keystore (%s)" % err.strip())
with open(DB, "rb") as f:
    check(not f.read(16).startswith(b"SQLite format 3"), "the file is not plaintext SQLite")

clear_records()
rc, out, err = py_read(CFG, DB, "SELECT count(*), sum(length(b)) FROM t")
check(rc == 0 and out == "[(400, 360000)]", "reopened by one Python connection, every page read (%s)" % err.strip())
n_unwrap = len(records("unwrap"))
n_wrap = len(records("wrap"))
n_pages = os.path.getsize(DB) // 1024
check(n_unwrap == 1 and n_wrap == 0,
      "one unwrap per database open, none per page (%d unwrap, %d wrap, ~%d pages read)"
      % (n_unwrap, n_wrap, n_pages))
req = records("unwrap")[0]["request"]
aad = base64.b64decode(req["aad"])
check(aad[:17] == b"sqlite-tde v1 dek" and len(aad) == 37 and req["db_id"] == aad[17:33].hex()
      and req["key_version"] == int.from_bytes(aad[33:], "big") and req["protocol"] == 1,
      "unwrap request: protocol 1, aad = label || db id || version, db_id and key_version decoded")
rc, out, err = tde(CFG, "status", "--all", DB)
check(("database_id: " + req["db_id"]) in out, "the request's db_id is the database's id")

# Secrets: the data key (from the recorded wrap requests) never in argv or
# the environment of any helper run, and the password variable not passed.
clear_records()
rc, out, err = tde(CFG, "rotate-master-key", DB)
check(rc == 0 and "new master key" in out, "rotate-master-key (%s)" % err.strip())
KEY2 = [l.split()[-1] for l in out.splitlines() if l.startswith("new master key")][0]
wraps = records("wrap")
check(len(wraps) == 1 and wraps[0]["request"]["key_id"] == KEY2, "rotation wrapped once, under the new key")
dek64 = wraps[0]["request"]["key"]
dek = base64.b64decode(dek64)
check(len(dek) == 32, "the wrap request carries a 32-byte data key")
leak = []
for r in records():
    blob = json.dumps(r["argv"]) + json.dumps(r["env"])
    for needle in (dek64, dek.hex(), PW):
        if needle in blob:
            leak.append((r["request"]["op"], needle[:6]))
    if "TDE_CMD_TEST_PW" in r["env"]:
        leak.append((r["request"]["op"], "password_env variable"))
check(not leak and len(records()) >= 3, "no data key or password in any helper's argv or environment %s" % leak)
with open(os.path.join(W, "audit.log")) as f:
    audit = f.read()
check(dek64 not in audit and dek.hex() not in audit and PW not in audit
      and '"keystore":"command"' in audit and '"op":"master_key_rotate"' in audit,
      "the audit log records command keystore operations, no key or password")
rc, out, err = tde(CFG, "keystore", "list")
check(rc == 0 and KEY1 in out and KEY2 in out, "keystore list shows both keys")
rc, out, err = sql(CFG, DB, "SELECT count(*) FROM t;\n")
check(rc == 0 and out.strip() == "400", "readable after rotation")
rc, out, err = tde(CFG, "status", "--all", DB)
check(("master_keys: command:" + KEY2) in out, "status names the new master key")

# Migration to a wallet and back.
WCFG = write(os.path.join(W, "wallet.conf"), "keystore = wallet\nwallet = w.wallet\naudit_log = audit.log\n")
rc, out, err = tde(WCFG, "keystore", "create", "--auto-login")
check(rc == 0, "wallet created")
rc, out, err = tde(CFG, "migrate-keystore", "--to", WCFG, "--drop-old", DB)
check(rc == 0, "migrate-keystore command -> wallet (%s)" % err.strip())
rc, out, err = sql(WCFG, DB, "SELECT count(*) FROM t;\n")
check(rc == 0 and out.strip() == "400", "readable with the wallet after migration")
rc, out, err = sql(CFG, DB, "SELECT count(*) FROM t;\n")
check(rc != 0, "no longer opens with the command keystore after --drop-old")
rc, out, err = tde(WCFG, "migrate-keystore", "--to", CFG, "--drop-old", DB)
check(rc == 0, "migrate-keystore wallet -> command (%s)" % err.strip())
rc, out, err = sql(CFG, DB, "SELECT count(*) FROM t;\n")
check(rc == 0 and out.strip() == "400", "readable with the command keystore after migrating back")
rc, out, err = tde(CFG, "status", "--all", DB)
check("master_keys: command:" in out and "wallet:" not in out, "only the command wrapping is left")

# The oracle binds the associated data: a blob for one aad does not unwrap
# for another (exit 4).
wr = subprocess.run([PY, OSSL, "--dir", os.path.join(W, "keys")], capture_output=True,
                    input=json.dumps({"protocol": 1, "op": "wrap", "key_id": KEY2,
                                      "aad": base64.b64encode(b"A" * 37).decode(),
                                      "key": base64.b64encode(b"k" * 32).decode()}).encode())
blob = json.loads(wr.stdout)["wrapped"]
uw = subprocess.run([PY, OSSL, "--dir", os.path.join(W, "keys")], capture_output=True,
                    input=json.dumps({"protocol": 1, "op": "unwrap", "key_id": KEY2, "wrapped": blob,
                                      "aad": base64.b64encode(b"B" * 37).decode()}).encode())
check(wr.returncode == 0 and uw.returncode == 4 and uw.stdout == b"",
      "openssl helper: the wrapped key does not unwrap for other associated data (exit 4)")

# ---- 2. bad helpers --------------------------------------------------------------
BAD = os.path.join(W, "bad")
os.makedirs(BAD)
# DEK and blob of database A, for the helpers that answer for the wrong database.
clear_records()
sql(CFG, DB, "SELECT 1;\n")
A_REQ = records("unwrap")[0]["request"]
A_KEY = subprocess.run([PY, OSSL, "--dir", os.path.join(W, "keys")], capture_output=True,
                       input=json.dumps(A_REQ).encode())
A_KEY = json.loads(A_KEY.stdout)["key"]
DB2 = os.path.join(W, "b.db")
rc, out, err = sql(CFG, DB2, "CREATE TABLE t(x); INSERT INTO t VALUES('b');\n")
check(rc == 0, "second database b.db")

bad_helpers = {
    # (without the ASan build's LD_PRELOAD, whose handler turns SIGSEGV into an abort)
    "crash": ("#!/bin/sh\ncat >/dev/null\nexec env -u LD_PRELOAD /bin/sh -c 'kill -SEGV $$'\n",
              "killed by signal 11"),
    "junk": ("#!/bin/sh\ncat >/dev/null\necho 'hello, this is not JSON'\n", "did not answer with one JSON object"),
    "noproto": ("#!/bin/sh\ncat >/dev/null\necho '{\"key\":\"%s\"}'\n" % A_KEY, "without \"protocol\": 1"),
    "short": ("#!/bin/sh\ncat >/dev/null\necho '{\"protocol\":1,\"key\":\"%s\"}'\n"
              % base64.b64encode(b"x" * 16).decode(), "returned a 16-byte key, expected 32"),
    "otherdb": ("#!/bin/sh\ncat >/dev/null\necho '{\"protocol\":1,\"key\":\"%s\",\"db_id\":\"%s\"}'\n"
                % (A_KEY, A_REQ["db_id"]), "answered for another database"),
    "wrongkey": ("#!/bin/sh\ncat >/dev/null\necho '{\"protocol\":1,\"key\":\"%s\"}'\n" % A_KEY,
                 "not an sqlite-tde encrypted database, or damaged"),
    "exit4": ("#!/bin/sh\ncat >/dev/null\necho 'decrypt: bad tag' >&2\nexit 4\n",
              "failed (exit code 4: wrapped key does not authenticate): decrypt: bad tag"),
    "noexec": (None, "cannot execute"),
    "dupkey": ("#!/bin/sh\ncat >/dev/null\necho '{\"protocol\":1,\"key\":\"%s\",\"key\":\"%s\"}'\n"
               % (A_KEY, A_KEY), "without a valid \"key\""),
    "trailing": ("#!/bin/sh\ncat >/dev/null\necho '{\"protocol\":1,\"key\":\"%s\"} x'\n" % A_KEY,
                 "did not answer with one JSON object"),
    "notb64": ("#!/bin/sh\ncat >/dev/null\necho '{\"protocol\":1,\"key\":\"%s!\"}'\n" % A_KEY[:-1],
               "without a valid \"key\""),
    "errmember": ("#!/bin/sh\ncat >/dev/null\necho '{\"protocol\":1,\"error\":\"no\",\"key\":\"%s\"}'\n"
                  % A_KEY, "answered with an error but exit code 0"),
    "huge": ("#!/bin/sh\ncat >/dev/null\nhead -c 200000 /dev/zero | tr '\\0' ' '\necho '{\"protocol\":1}'\n",
             "wrote more than 65536 bytes"),
}
for name, (script, want) in bad_helpers.items():
    path = os.path.join(BAD, name)
    if script is not None:
        write(path, script, 0o700)
    else:
        write(path, "#!/bin/sh\nexit 0\n", 0o600)      # not executable
    cfg = command_conf("bad-%s.conf" % name, unwrap=path)
    before = digest(DB2)
    rc, out, err = sql(cfg, DB2, "SELECT * FROM t;\n")
    ok = rc != 0 and want in err
    check(ok and out.strip() != "b", "%s helper fails the open: %s" % (name, " / ".join(err.strip().splitlines())[:300]))
    check(digest(DB2) == before and not os.path.exists(DB2 + "-journal")
          and not os.path.exists(DB2 + "-wal"), "%s helper: nothing written" % name)


# The deadline: a helper that really hangs, with a child of its own, under
# a deadline of seconds (the reason is the timeout whatever the machine's
# speed: the helper never answers).  Killed with its process group: nothing
# of it is left running, long before it would have finished.  The deadline
# covers every helper of the keystore, so this one runs no other helper at
# the open: a fixed key id (no list_keys_command), and the unwrap is the
# hanging helper's.
MARK = "613.%d" % os.getpid()                     # sleep's argument, to find it in /proc


def hang_alive():
    alive = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
            with open("/proc/%s/stat" % pid) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if MARK.encode() in argv and state != "Z":
            alive.append(pid)
    return alive


STARTED = os.path.join(BAD, "hang.started")
path = write(os.path.join(BAD, "hang"), "#!/bin/sh\nsleep %s &\ntouch %s\nexec sleep %s\n"
             % (MARK, STARTED, MARK), 0o700)
cfg = write(os.path.join(W, "bad-hang.conf"),
            "keystore = command\nwrap_command = %s\nunwrap_command = %s\ncommand_key_id = %s\n"
            "command_timeout_ms = 5000\n" % (GOOD, path, KEY2))
before = digest(DB2)
t0 = time.monotonic()
rc, out, err = sql(cfg, DB2, "SELECT * FROM t;\n")
took = time.monotonic() - t0
check(rc != 0 and ("unwrap helper %s did not finish within 5000 ms and was killed" % path) in err
      and out.strip() != "b",
      "hang helper fails the open at its deadline: %s" % " / ".join(err.strip().splitlines())[:300])
check(digest(DB2) == before and not os.path.exists(DB2 + "-journal")
      and not os.path.exists(DB2 + "-wal"), "hang helper: nothing written")
check(took < 300, "hang: the open returned in %.1f s, not after the helper's %s s" % (took, MARK))
left = hang_alive()
if os.path.exists(STARTED):
    check(not left, "hang: no process of the helper left running (its child too) %s" % left)
else:
    print("not checked: no process left (the helper had not started within 5 s)", flush=True)
for pid in left:
    os.kill(int(pid), 9)
rc, out, err = sql(CFG, DB2, "SELECT * FROM t;\n")
check(rc == 0 and out.strip() == "b", "b.db still opens with the good helper")

# A wrap helper that prints the key it was given on stderr: redacted.
leaky = write(os.path.join(BAD, "leaky"),
              "#!/usr/bin/python3\nimport json,sys\nr=json.load(sys.stdin)\n"
              "open(%r,'w').write(r.get('key'))\n"
              "sys.stderr.write('oops key=%%s\\n' %% r.get('key'))\nsys.exit(1)\n"
              % os.path.join(BAD, "leaked.txt"), 0o700)
cfg = command_conf("leaky.conf", wrap=leaky)
clear_records()
rc, out, err = tde(cfg, "rotate-master-key", DB2)
check(rc != 0 and "oops key=[redacted]" in err and "exit code 1" in err
      and open(os.path.join(BAD, "leaked.txt")).read() not in err,
      "a failing wrap fails rotation, its stderr is logged redacted: " + " / ".join(err.strip().splitlines())[:300])
rc, out, err = sql(CFG, DB2, "SELECT * FROM t;\n")
check(rc == 0 and out.strip() == "b", "b.db unharmed by the failed rotation")

# Configuration errors name the problem.
for text, want in (("keystore = command\nunwrap_command = x\nlist_keys_command = x\n", "needs wrap_command"),
                   ("keystore = command\nwrap_command = x\nunwrap_command = x\n", "exactly one of"),
                   ("keystore = command\nwrap_command = x\nunwrap_command = x\ncommand_key_id = k\n"
                    "command_timeout_ms = 0\n", "command_timeout_ms must be"),
                   ("keystore = command\nwrap_command = x\nunwrap_command = x\ncommand_key_id = k\n"
                    "new_key_command = x\n", "new_key_command needs list_keys_command"),
                   ("keystore = command\nwrap_command = x\nunwrap_command = x\ncommand_key_id = k\n"
                    "wallet = w\n", "unknown key (known: wrap_command")):
    cfg = write(os.path.join(W, "badcfg.conf"), text)
    rc, out, err = tde(cfg, "keystore", "status")
    check(want in err or want in out, "config check: %s" % want)

# ---- 3. Vault/OpenBao Transit and AWS KMS helpers against stand-ins -------------
BIN = os.path.join(W, "bin")
os.makedirs(BIN)
STATE = os.path.join(W, "standin")
os.makedirs(STATE)
# The stand-ins log argv and stdin, keep state in a JSON file, and refuse
# a decrypt whose context differs from the encrypt's, as the services do.
STANDIN_COMMON = r'''
import base64, json, os, sys, uuid
STATE = os.path.join(%r, NAME + ".json")
LOG = os.path.join(%r, NAME + ".log")
st = json.load(open(STATE)) if os.path.exists(STATE) else {"keys": {}, "blobs": {}}
data = sys.stdin.buffer.read() if not sys.stdin.isatty() else b""
with open(LOG, "a") as f:
    f.write(json.dumps({"argv": sys.argv[1:], "stdin": base64.b64encode(data).decode()}) + "\n")
def save():
    json.dump(st, open(STATE, "w"))
def fail(msg):
    sys.stderr.write(msg + "\n"); sys.exit(2)
''' % (STATE, STATE)
write(os.path.join(BIN, "vault"), "#!/usr/bin/python3\nNAME='vault'\n" + STANDIN_COMMON + r'''
a = sys.argv[1:]
if a[:2] == ["list", "-format=json"] and a[2] == "transit/keys" and len(a) == 3:
    if not st["keys"]: fail("No value found at transit/keys")
    print(json.dumps(sorted(st["keys"])))
elif a[:2] == ["write", "-format=json"] and a[2].startswith("transit/keys/") and a[3:] == ["type=aes256-gcm96", "derived=true"]:
    st["keys"][a[2][len("transit/keys/"):]] = {"derived": True}; save(); print("{}")
elif a[:2] == ["write", "-format=json"] and a[2].startswith("transit/encrypt/") and a[3:] == ["-"]:
    req = json.loads(data); k = a[2][len("transit/encrypt/"):]
    if k not in st["keys"]: fail("encryption key not found")
    if sorted(req) != ["context", "plaintext"]: fail("unexpected fields %r" % sorted(req))
    base64.b64decode(req["plaintext"], validate=True); base64.b64decode(req["context"], validate=True)
    tok = "vault:v1:" + base64.b64encode(uuid.uuid4().bytes * 3).decode()
    st["blobs"][tok] = [k, req["plaintext"], req["context"]]; save()
    print(json.dumps({"data": {"ciphertext": tok, "key_version": 1}}))
elif a[:2] == ["write", "-format=json"] and a[2].startswith("transit/decrypt/") and a[3:] == ["-"]:
    req = json.loads(data); k = a[2][len("transit/decrypt/"):]
    if sorted(req) != ["ciphertext", "context"]: fail("unexpected fields %r" % sorted(req))
    b = st["blobs"].get(req["ciphertext"])
    if not b or b[0] != k or b[2] != req["context"]: fail("Error writing data: cipher: message authentication failed")
    print(json.dumps({"data": {"plaintext": b[1]}}))
else:
    fail("stand-in vault: unexpected arguments %r" % a)
''', 0o700)
write(os.path.join(BIN, "aws"), "#!/usr/bin/python3\nNAME='aws'\n" + STANDIN_COMMON + r'''
a = sys.argv[1:]
def ctx(s):
    return dict(p.split("=", 1) for p in s.split(","))
if a[:2] == ["kms", "create-key"] and a[2] == "--description" and a[4:] == ["--output", "json"]:
    kid = str(uuid.uuid4()); st["keys"][kid] = {}; save()
    print(json.dumps({"KeyMetadata": {"KeyId": kid, "Arn": "arn:aws:kms:xx:0:key/" + kid}}))
elif a[:2] == ["kms", "create-alias"] and a[2] == "--alias-name" and a[4] == "--target-key-id" and len(a) == 6:
    if a[5] not in st["keys"]: fail("NotFoundException")
    st.setdefault("aliases", {})[a[3]] = a[5]; save()
elif a == ["kms", "list-aliases", "--output", "json"]:
    print(json.dumps({"Aliases": [{"AliasName": n, "TargetKeyId": k} for n, k in st.get("aliases", {}).items()]
                      + [{"AliasName": "alias/aws/ebs"}]}))
elif a[:3] == ["kms", "encrypt", "--key-id"] and a[4:] == ["--plaintext", "fileb:///dev/stdin", "--encryption-context", a[7], "--output", "json"]:
    if a[3] not in st.get("aliases", {}): fail("NotFoundException")
    c = ctx(a[7]); tok = base64.b64encode(uuid.uuid4().bytes * 10).decode()
    st["blobs"][tok] = [a[3], base64.b64encode(data).decode(), c]; save()
    print(json.dumps({"CiphertextBlob": tok, "KeyId": st["aliases"][a[3]]}))
elif a[:3] == ["kms", "decrypt", "--key-id"] and a[4:] == ["--ciphertext-blob", "fileb:///dev/stdin", "--encryption-context", a[7], "--output", "json"]:
    b = st["blobs"].get(base64.b64encode(data).decode())
    if not b or b[0] != a[3] or b[2] != ctx(a[7]): fail("An error occurred (InvalidCiphertextException)")
    print(json.dumps({"Plaintext": b[1], "KeyId": a[3]}))
else:
    fail("stand-in aws: unexpected arguments %r" % a)
''', 0o700)
SENV = dict(ENV, PATH=BIN + ":" + os.environ.get("PATH", "/usr/bin:/bin"))


def standin_log(name):
    with open(os.path.join(STATE, name + ".log")) as f:
        return [json.loads(l) for l in f]


for svc, helper in (("vault", "tde-vault-transit-helper"), ("aws", "tde-aws-kms-helper")):
    cmd = "%s %s" % (PY, os.path.join(HELPERS, helper))
    cfg = write(os.path.join(W, "%s.conf" % svc),
                "keystore = command\nwrap_command = %s\nunwrap_command = %s\n"
                "new_key_command = %s\nlist_keys_command = %s\naudit_log = audit-%s.log\n%s"
                % (cmd, cmd, cmd, cmd, svc, SLOW_OK))
    rc, out, err = tde(cfg, "keystore", "create", env=SENV)
    key = out.strip()
    check(rc == 0 and key.startswith("tde-" if svc == "vault" else "alias/tde-"),
          "%s: keystore create through the stand-in (%s %s)" % (svc, key, err.strip()))
    db = os.path.join(W, "%s.db" % svc)
    rc, out, err = tde(cfg, "shell", db, stdin="CREATE TABLE t(x); INSERT INTO t VALUES('%s');\n" % svc,
                       env=SENV)
    rc, out, err = tde(cfg, "shell", db, stdin="SELECT x FROM t;\n", env=SENV)
    check(rc == 0 and out.strip() == svc, "%s: database written and reopened (%s)" % (svc, err.strip()))
    if rc != 0:
        continue
    rc, out, err = tde(cfg, "status", "--all", db, env=SENV)
    dbid = [l.split()[-1] for l in out.splitlines() if l.startswith("database_id:")][0]
    aad = b"sqlite-tde v1 dek" + bytes.fromhex(dbid) + (1).to_bytes(4, "big")
    log = standin_log(svc)
    if svc == "vault":
        enc = [l for l in log if l["argv"][:3] == ["write", "-format=json", "transit/encrypt/" + key]]
        dec = [l for l in log if l["argv"][:3] == ["write", "-format=json", "transit/decrypt/" + key]]
        body = [json.loads(base64.b64decode(l["stdin"])) for l in enc]
        check(any(l["argv"] == ["write", "-format=json", "transit/keys/" + key, "type=aes256-gcm96",
                                "derived=true"] for l in log), "vault: key created derived, exact arguments")
        check(enc and all(l["argv"][3:] == ["-"] for l in enc + dec),
              "vault: encrypt/decrypt read their request from stdin ('-' the only data argument)")
        check(any(b["context"] == base64.b64encode(aad).decode() for b in body),
              "vault: context = base64 of the associated data (label, db id, version)")
        dek64 = body[-1]["plaintext"]
    else:
        enc = [l for l in log if l["argv"][:2] == ["kms", "encrypt"]]
        dec = [l for l in log if l["argv"][:2] == ["kms", "decrypt"]]
        want = "db_id=%s,key_version=1" % dbid
        check(any(l["argv"] == ["kms", "encrypt", "--key-id", key, "--plaintext", "fileb:///dev/stdin",
                                "--encryption-context", want, "--output", "json"] for l in enc),
              "aws: kms encrypt with the exact arguments and encryption context " + want)
        check(any(l["argv"] == ["kms", "decrypt", "--key-id", key, "--ciphertext-blob", "fileb:///dev/stdin",
                                "--encryption-context", want, "--output", "json"] for l in dec),
              "aws: kms decrypt with the same context")
        dek64 = enc[-1]["stdin"]
    check(len(base64.b64decode(dek64)) == 32 and dec, "%s: the data key went on stdin (32 bytes)" % svc)
    check(not any(dek64 in json.dumps(l["argv"]) or base64.b64decode(dek64).hex() in json.dumps(l["argv"])
                  for l in log), "%s: the data key is in no argument" % svc)
    rc, out, err = tde(cfg, "rotate-master-key", db, env=SENV)
    rc2, out2, err2 = tde(cfg, "keystore", "list", env=SENV)
    check(rc == 0 and rc2 == 0 and len([l for l in out2.splitlines() if "ACTIVE" in l]) == 2,
          "%s: rotate-master-key, list shows two keys (%s)" % (svc, err.strip()))
    rc, out, err = tde(cfg, "shell", db, stdin="SELECT x FROM t;\n", env=SENV)
    check(rc == 0 and out.strip() == svc, "%s: readable after rotation" % svc)
    # The blob of this database refused for another database's context.
    rq = {"protocol": 1, "op": "unwrap", "key_id": key, "db_id": "00" * 16, "key_version": 1,
          "aad": base64.b64encode(b"sqlite-tde v1 dek" + bytes(16) + (1).to_bytes(4, "big")).decode()}
    if svc == "vault":
        ct = json.loads(base64.b64decode(dec[-1]["stdin"]))["ciphertext"]
        rq["wrapped"] = base64.b64encode(ct.encode()).decode()
    else:
        rq["wrapped"] = dec[-1]["stdin"]
    p = subprocess.run([PY, os.path.join(HELPERS, helper)], input=json.dumps(rq).encode(),
                       capture_output=True, env=SENV)
    check(p.returncode == 4 and p.stdout == b"", "%s: unwrap for another database refused (exit 4)" % svc)
    rc, out, err = tde(cfg, "migrate-keystore", "--to", CFG, "--drop-old", db, env=SENV)
    rc2, out2, err2 = sql(CFG, db, "SELECT x FROM t;\n")
    check(rc == 0 and rc2 == 0 and out2.strip() == svc, "%s: migrate-keystore to the openssl helper" % svc)

if failures:
    print("%d FAILED" % len(failures))
    sys.exit(1)
print("all passed")
if not os.environ.get("TDE_KEEP_SCRATCH"):
    shutil.rmtree(W, ignore_errors=True)
