#!/usr/bin/python3
"""TPM 2.0-sealed auto-login wallets (wallet_seal = tpm2) against swtpm.

Two software TPMs (swtpm, each in a scratch folder on a Unix socket,
stopped by pid) stand for two machines.  Checked:
  - keystore create makes a kind-3 wallet (only the sealed key in the
    file); status shows the TPM and policy; a database is written and
    reopened by Python's sqlite3 module with tde.so;
  - rotate-master-key, keystore list, migrate-keystore to the command
    keystore and back work with the sealed wallet;
  - the files copied to the "other machine" (second swtpm) are refused,
    naming the TPM;
  - an open database keeps working (reads, writes, a second connection, a
    new database) after its TPM goes away; a new open without the TPM fails
    with a clear error; with the TPM back it opens again;
  - keystore seal / unseal convert a plain auto-login wallet and back
    (a new wallet key each time, none left in the file, audited);
  - a PCR change (tpm2_pcrextend in the test, never in the library) makes
    a PCR-bound wallet refuse to open, naming the policy; a wallet sealed
    without PCRs still opens;
  - dictionary-attack lockout (max-tries 2 and wrong passwords against a
    DA-protected object, with tpm2-tools in the test): the wallet sealed
    without PCRs fails to open naming the lockout, nothing written; a
    PCR-bound wallet (not DA-checked) still opens; after
    tpm2_dictionarylockout --clear-lockout the wallet opens again.
Environment: TDE_BUILD, TDE_SRC, TDE_TEST_TMP.  A missing swtpm or
tpm2-tools fails the test.
"""
import os
import shutil
import signal
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
for tool in ("swtpm", "tpm2_pcrextend", "tpm2_dictionarylockout", "tpm2_unseal", "tpm2_getcap"):
    if shutil.which(tool) is None:
        die("missing tool: %s (scripts/deps.sh installs swtpm and tpm2-tools)" % tool)
os.makedirs(TMP, exist_ok=True)
W = tempfile.mkdtemp(prefix="tdetpm-", dir=TMP)
# The TCTI string is a path; keep it short (sun_path is 108 bytes).
SOCKDIR = tempfile.mkdtemp(prefix="tdetpm-", dir="/tmp")
ENV = dict(os.environ)
ENV.pop("TSS2_LOG", None)
# swtpm and tpm2-tools are not ours: under the ASan build's LD_PRELOAD they
# hang (as pgrep does), so they run without it.
TOOLENV = {k: v for k, v in ENV.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")}
tpms = {}


def tpm_start(name):
    state = os.path.join(W, "tpm-" + name)
    os.makedirs(state, exist_ok=True)
    sock = os.path.join(SOCKDIR, name + ".sock")
    for p in (sock, sock + ".ctrl"):
        if os.path.exists(p):
            os.unlink(p)
    log = open(os.path.join(state, "log"), "a")
    proc = subprocess.Popen(["swtpm", "socket", "--tpm2", "--tpmstate", "dir=" + state,
                             "--server", "type=unixio,path=" + sock,
                             "--ctrl", "type=unixio,path=" + sock + ".ctrl",
                             "--flags", "not-need-init,startup-clear"],
                            stdout=log, stderr=log, env=TOOLENV)
    for _ in range(3000):                           # up to 60 s on a busy machine
        if os.path.exists(sock):
            break
        time.sleep(0.02)
    tpms[name] = proc
    return "swtpm:path=" + sock


def tpm_stop(name):
    proc = tpms.pop(name, None)
    if proc is not None:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)
    return path


def tde(cfg, *args, stdin=None):
    p = subprocess.run([CLI, "--config", cfg] + list(args), input=stdin, text=True,
                       capture_output=True, env=ENV, timeout=120)
    return p.returncode, p.stdout, p.stderr


PYCODE = r'''
import sqlite3, sys
ext, db, cfg = sys.argv[1:4]
c = sqlite3.connect(":memory:"); c.enable_load_extension(True); c.load_extension(ext); c.close()
def open_db(path):
    return sqlite3.connect("file:%s?vfs=tde&tde_config=%s" % (path, cfg), uri=True)
con = open_db(db)
for line in sys.stdin:
    cmd = line.strip()
    try:
        if cmd.startswith("sql "):
            print(repr(con.execute(cmd[4:]).fetchall())); con.commit()
        elif cmd.startswith("newconn "):
            c2 = open_db(cmd[8:]); c2.execute("CREATE TABLE IF NOT EXISTS t(x)")
            c2.execute("INSERT INTO t VALUES(1)"); c2.commit()
            print(repr(c2.execute("SELECT count(*) FROM t").fetchall())); c2.close()
        elif cmd == "quit":
            break
    except Exception as e:
        print("ERROR %s" % e)
    sys.stdout.flush()
'''


def py_once(cfg, db, query):
    p = subprocess.run([PY, "-c", PYCODE, os.path.join(BUILD, "tde"), db, cfg],
                       input="sql %s\nquit\n" % query, text=True, capture_output=True,
                       env=ENV, timeout=120)
    return p.returncode, p.stdout.strip(), p.stderr


def conf(name, tcti, extra):
    return write(os.path.join(W, name),
                 "keystore = wallet\nwallet = w.wallet\naudit_log = audit.log\n"
                 "wallet_tpm_tcti = %s\n%s" % (tcti, extra))


def wallet_kind(path):
    with open(path, "rb") as f:
        return f.read(11)[10]


try:
    TA = tpm_start("a")
    TB = tpm_start("b")
    CFG = conf("tde.conf", TA, "wallet_seal = tpm2\nwallet_tpm_pcrs = 7\n")
    WALLET = os.path.join(W, "w.wallet")

    rc, out, err = tde(CFG, "keystore", "create", "--auto-login")
    check(rc == 0 and out.startswith("wallet-"), "keystore create: sealed wallet (%s)" % err.strip())
    check(wallet_kind(WALLET) == 3, "the wallet file is kind 3 (TPM-sealed)")
    rc, out, err = tde(CFG, "keystore", "status")
    check(rc == 0 and "status: OPEN" in out and "auto-login: yes" in out
          and "sealed: TPM 2.0" in out and "policy PCR 7 (sha256)" in out,
          "keystore status names the TPM and the policy")
    DB = os.path.join(W, "a.db")
    rc, out, err = py_once(CFG, DB, "SELECT 1")
    rc, out, err = tde(CFG, "shell", DB, stdin="CREATE TABLE t(x); INSERT INTO t VALUES('sealed');\n")
    rc, out, err = py_once(CFG, DB, "SELECT x FROM t")
    check(rc == 0 and out == "[('sealed',)]", "database written and reopened with the sealed wallet (%s)" % err.strip())

    # Lifecycle with the sealed wallet.
    rc, out, err = tde(CFG, "rotate-master-key", DB)
    check(rc == 0 and "new master key" in out, "rotate-master-key with a sealed wallet (%s)" % err.strip())
    check(wallet_kind(WALLET) == 3, "the rewritten wallet is still sealed")
    rc, out, err = tde(CFG, "keystore", "list")
    check(rc == 0 and out.count("ACTIVE") == 2, "keystore list: two keys")
    rc, out, err = py_once(CFG, DB, "SELECT x FROM t")
    check(rc == 0 and out == "[('sealed',)]", "reopened after rotation")
    KEYS = os.path.join(W, "keys")
    H = "%s %s --dir %s" % (PY, os.path.join(SRC, "contrib", "keystore-helpers", "tde-openssl-helper"), KEYS)
    CCFG = write(os.path.join(W, "cmd.conf"), "keystore = command\nwrap_command = %s\nunwrap_command = %s\n"
                 "new_key_command = %s\nlist_keys_command = %s\n" % (H, H, H, H))
    rc, out, err = tde(CCFG, "keystore", "create")
    rc1, out1, err1 = tde(CFG, "migrate-keystore", "--to", CCFG, "--drop-old", DB)
    rc2, out2, err2 = tde(CCFG, "migrate-keystore", "--to", CFG, "--drop-old", DB)
    rc3, out3, err3 = py_once(CFG, DB, "SELECT x FROM t")
    check(rc == 0 and rc1 == 0 and rc2 == 0 and rc3 == 0 and out3 == "[('sealed',)]",
          "migrate-keystore sealed wallet -> command -> sealed wallet (%s%s)" % (err1.strip(), err2.strip()))

    # The other machine: the same files, another TPM.
    OTHER = os.path.join(W, "other")
    os.makedirs(OTHER)
    for f in ("w.wallet", "a.db"):
        shutil.copy2(os.path.join(W, f), os.path.join(OTHER, f))
    OCFG = write(os.path.join(OTHER, "tde.conf"), "keystore = wallet\nwallet = w.wallet\n"
                 "wallet_seal = tpm2\nwallet_tpm_pcrs = 7\nwallet_tpm_tcti = %s\n" % TB)
    rc, out, err = py_once(OCFG, os.path.join(OTHER, "a.db"), "SELECT x FROM t")
    rc2, out2, err2 = tde(OCFG, "keystore", "status")
    check(rc != 0 or "ERROR" in out, "a copy on another machine does not open")
    check("not sealed by this TPM" in err2 and TB in err2,
          "... the reason names the TPM: " + err2.strip().splitlines()[-1][:200])

    # The TPM goes away while a database is open: it keeps working.
    p = subprocess.Popen([PY, "-c", PYCODE, os.path.join(BUILD, "tde"), DB, CFG],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=ENV)
    p.stdin.write("sql SELECT count(*) FROM t\n")
    p.stdin.flush()
    first = p.stdout.readline().strip()
    tpm_stop("a")
    answers = []
    for cmd in ("sql INSERT INTO t VALUES('after')", "sql SELECT count(*) FROM t",
                "newconn " + DB, "newconn " + os.path.join(W, "new.db")):
        p.stdin.write(cmd + "\n")
        p.stdin.flush()
        answers.append(p.stdout.readline().strip())
    p.stdin.write("quit\n")
    p.stdin.flush()
    p.wait(timeout=60)
    check(first == "[(1,)]" and answers[1] == "[(2,)]" and answers[2] == "[(3,)]"
          and answers[3] == "[(1,)]" and p.returncode == 0,
          "after the TPM went away: writes, reads, a second connection and a new database work %s"
          % answers)

    # TPM absent at open: a clear error, nothing written.
    with open(DB, "rb") as f:
        before = f.read()
    rc, out, err = py_once(CFG, DB, "SELECT x FROM t")
    rc2, out2, err2 = tde(CFG, "keystore", "status")
    with open(DB, "rb") as f:
        after = f.read()
    check((rc != 0 or "ERROR" in out) and before == after, "TPM absent at open: the open fails, nothing written")
    check("TPM not reachable" in err2 and TA in err2, "... with a clear error: " + err2.strip().splitlines()[-1][:200])

    # The TPM is back (its state persisted): the wallet opens again.
    TA = tpm_start("a")
    rc, out, err = py_once(CFG, DB, "SELECT count(*) FROM t")
    check(rc == 0 and out == "[(3,)]", "the TPM back: opens again (%s)" % err.strip())

    # Conversion of a plain auto-login wallet, and back.
    CONV = os.path.join(W, "conv")
    os.makedirs(CONV)
    PCFG = write(os.path.join(CONV, "plain.conf"), "keystore = wallet\nwallet = w.wallet\naudit_log = audit.log\n")
    SCFG = write(os.path.join(CONV, "sealed.conf"), "keystore = wallet\nwallet = w.wallet\naudit_log = audit.log\n"
                 "wallet_seal = tpm2\nwallet_tpm_tcti = %s\n" % TA)
    CW = os.path.join(CONV, "w.wallet")
    CDB = os.path.join(CONV, "c.db")
    rc, out, err = tde(PCFG, "keystore", "create", "--auto-login")
    rc, out, err = tde(PCFG, "shell", CDB, stdin="CREATE TABLE t(x); INSERT INTO t VALUES('conv');\n")
    with open(CW, "rb") as f:
        plain = f.read()
    rc, out, err = tde(PCFG, "keystore", "seal")
    check(rc != 0 and "wallet_seal = tpm2" in err, "seal without wallet_seal = tpm2 in the configuration is refused")
    check(open(CW, "rb").read() == plain, "... and the wallet is unchanged")
    rc, out, err = tde(SCFG, "keystore", "seal")
    with open(CW, "rb") as f:
        sealed = f.read()
    check(rc == 0 and wallet_kind(CW) == 3 and plain[16:48] not in sealed,
          "keystore seal: kind 3, the old wallet key is not in the file (%s)" % err.strip())
    rc, out, err = tde(SCFG, "keystore", "seal")
    check(rc != 0 and "already sealed" in err, "sealing twice is refused")
    rc, out, err = tde(SCFG, "shell", CDB, stdin="SELECT x FROM t;\n")
    check(rc == 0 and out.strip() == "conv", "the database opens with the sealed wallet")
    rc, out, err = tde(SCFG, "keystore", "unseal")
    with open(CW, "rb") as f:
        unsealed = f.read()
    check(rc == 0 and wallet_kind(CW) == 2 and unsealed[16:48] != plain[16:48],
          "keystore unseal: back to kind 2, with a new wallet key (%s)" % err.strip())
    rc, out, err = tde(PCFG, "shell", CDB, stdin="SELECT x FROM t;\n")
    check(rc == 0 and out.strip() == "conv", "the database opens with the unsealed wallet")
    with open(os.path.join(CONV, "audit.log")) as f:
        audit = f.read()
    check('"op":"keystore_seal","outcome":"success"' in audit
          and '"op":"keystore_unseal","outcome":"success"' in audit
          and '"op":"keystore_seal","outcome":"failure"' in audit,
          "seal and unseal are audited (successes and the refusal)")
    check(not any(n.startswith("w.wallet.tmp-") for n in os.listdir(CONV)), "no temporary wallet left")

    # A wallet sealed without PCRs (machine only), for the PCR change below.
    NP = os.path.join(W, "nopcr")
    os.makedirs(NP)
    NCFG = write(os.path.join(NP, "tde.conf"), "keystore = wallet\nwallet = w.wallet\n"
                 "wallet_seal = tpm2\nwallet_tpm_tcti = %s\n" % TA)
    rc, out, err = tde(NCFG, "keystore", "create", "--auto-login")
    check(rc == 0, "a wallet sealed without a PCR policy")

    # A persistent parent key (wallet_tpm_parent), made with tpm2-tools here.
    e = dict(TOOLENV, TPM2TOOLS_TCTI=TA)
    PP = os.path.join(W, "persist")
    os.makedirs(PP)
    x1 = subprocess.run(["tpm2_createprimary", "-C", "o", "-g", "sha256", "-G", "ecc",
                         "-c", os.path.join(PP, "prim.ctx")], env=e, capture_output=True, text=True, timeout=60)
    x2 = subprocess.run(["tpm2_evictcontrol", "-C", "o", "-c", os.path.join(PP, "prim.ctx"), "0x81000101"],
                        env=e, capture_output=True, text=True, timeout=60)
    # tpm2-tools leave their transient objects loaded (no resource manager)
    x4 = subprocess.run(["tpm2_flushcontext", "-t"], env=e, capture_output=True, text=True, timeout=60)
    check(x1.returncode == 0 and x2.returncode == 0 and x4.returncode == 0,
          "persistent primary 0x81000101 made (%s%s%s)" % (x1.stderr.strip(), x2.stderr.strip(),
                                                         x4.stderr.strip()))
    PPCFG = write(os.path.join(PP, "tde.conf"), "keystore = wallet\nwallet = w.wallet\nwallet_seal = tpm2\n"
                  "wallet_tpm_parent = 0x81000101\nwallet_tpm_tcti = %s\n" % TA)
    rc, out, err = tde(PPCFG, "keystore", "create", "--auto-login")
    rc2, out2, err2 = tde(PPCFG, "keystore", "status")
    check(rc == 0 and "status: OPEN" in out2 and "parent persistent key 0x81000101" in out2,
          "a wallet sealed under the persistent parent opens (%s)" % err.strip())
    x3 = subprocess.run(["tpm2_evictcontrol", "-C", "o", "-c", "0x81000101"], env=e,
                        capture_output=True, text=True, timeout=60)
    rc, out, err = tde(PPCFG, "keystore", "status")
    check(x3.returncode == 0 and "status: OPEN" not in out and "persistent parent key" in err,
          "... and is refused once that key is evicted: " + (err.strip().splitlines() or ["?"])[-1][:200])

    # PCR 7 changes: the PCR-bound wallet refuses, the other still opens.
    x = subprocess.run(["tpm2_pcrextend", "7:sha256=" + "11" * 32], env=e, capture_output=True,
                       text=True, timeout=60)
    check(x.returncode == 0, "PCR 7 extended in swtpm (%s)" % x.stderr.strip())
    rc, out, err = py_once(CFG, DB, "SELECT count(*) FROM t")
    rc2, out2, err2 = tde(CFG, "keystore", "status")
    check((rc != 0 or "ERROR" in out) and "PCR policy does not match" in err2 and "PCR 7" in err2,
          "after a PCR change the wallet refuses, naming the policy: " + err2.strip().splitlines()[-1][:200])
    rc, out, err = tde(NCFG, "keystore", "status")
    check(rc == 0 and "status: OPEN" in out, "the wallet sealed without PCRs still opens")

    # Dictionary-attack lockout.  Only a DA-protected authorization is
    # refused in lockout: the wallet sealed without PCRs is unsealed in an
    # HMAC session with its (empty) auth value, and its object has no noDA,
    # so its Unseal is refused; the owner-hierarchy primary (noDA) and a
    # PCR-bound wallet (a policy session without PolicyAuthValue) are not
    # DA-checked, so a PCR-bound wallet still opens.  tpm2-tools in the test
    # put swtpm in lockout: max-tries 2 with a long recovery time, then wrong
    # passwords against a DA-protected sealed object made here for the
    # purpose (passwords from files, not argv).
    NDB = os.path.join(NP, "n.db")
    rc, out, err = tde(NCFG, "shell", NDB, stdin="CREATE TABLE t(x); INSERT INTO t VALUES('nopcr');\n")
    check(rc == 0, "a database with the wallet sealed without PCRs (%s)" % err.strip())
    LP = os.path.join(W, "lockpcr")
    os.makedirs(LP)
    LPCFG = write(os.path.join(LP, "tde.conf"), "keystore = wallet\nwallet = w.wallet\n"
                  "wallet_seal = tpm2\nwallet_tpm_pcrs = 7\nwallet_tpm_tcti = %s\n" % TA)
    rc, out, err = tde(LPCFG, "keystore", "create", "--auto-login")
    check(rc == 0, "a wallet sealed to the current PCR 7 (%s)" % err.strip())
    DA = os.path.join(W, "da")
    os.makedirs(DA)
    daf = {n: os.path.join(DA, n) for n in ("prim.ctx", "obj.pub", "obj.priv", "obj.ctx")}
    write(os.path.join(DA, "good"), "da-bait-right")
    write(os.path.join(DA, "bad"), "da-bait-wrong")
    write(os.path.join(DA, "data"), "not a secret")

    def tool(*args):
        return subprocess.run(list(args), env=e, capture_output=True, text=True, timeout=60)

    def tpm_var():
        x = tool("tpm2_getcap", "properties-variable")
        return x.returncode, x.stdout

    def in_lockout():
        rcv, text = tpm_var()
        lines = [l.split(":")[1].strip() for l in text.splitlines() if l.strip().startswith("inLockout:")]
        return lines[0] if rcv == 0 and len(lines) == 1 else "?"

    steps = [tool("tpm2_dictionarylockout", "-s", "-n", "2", "-t", "600", "-l", "600"),
             tool("tpm2_createprimary", "-C", "o", "-c", daf["prim.ctx"]),
             tool("tpm2_flushcontext", "-t"),
             tool("tpm2_create", "-C", daf["prim.ctx"], "-p", "file:" + os.path.join(DA, "good"),
                  "-a", "fixedtpm|fixedparent|userwithauth", "-i", os.path.join(DA, "data"),
                  "-u", daf["obj.pub"], "-r", daf["obj.priv"]),
             tool("tpm2_flushcontext", "-t"),
             tool("tpm2_load", "-C", daf["prim.ctx"], "-u", daf["obj.pub"], "-r", daf["obj.priv"],
                  "-c", daf["obj.ctx"]),
             tool("tpm2_flushcontext", "-t")]
    check(all(x.returncode == 0 for x in steps) and in_lockout() == "0",
          "max-tries 2 set, a DA-protected bait object made, not in lockout yet (%s)"
          % " ".join(x.stderr.strip() for x in steps)[:300])
    tries = []
    for _ in range(3):
        x = tool("tpm2_unseal", "-c", daf["obj.ctx"], "-p", "file:" + os.path.join(DA, "bad"))
        tries.append(x)
        tool("tpm2_flushcontext", "-t")
    check(all(x.returncode != 0 for x in tries) and "0x98E" in tries[0].stderr
          and "0x98E" in tries[1].stderr and "0x921" in tries[2].stderr and in_lockout() == "1",
          "two wrong passwords count as DA failures, the third try is refused with "
          "TPM_RC_LOCKOUT, and the TPM reports inLockout")

    def snapshot(folder):
        d = {}
        for n in sorted(os.listdir(folder)):
            with open(os.path.join(folder, n), "rb") as f:
                d[n] = f.read()
        return d

    before = snapshot(NP)
    rc, out, err = py_once(NCFG, NDB, "SELECT x FROM t")
    rc2, out2, err2 = tde(NCFG, "keystore", "status")
    rc3, out3, err3 = tde(NCFG, "shell", NDB, stdin="INSERT INTO t VALUES('locked');\n")
    after = snapshot(NP)
    check((rc != 0 or "ERROR" in out) and rc2 != 0 and "status: OPEN" not in out2 and rc3 != 0,
          "in lockout the wallet sealed without PCRs does not open (module, status, shell)")
    check("dictionary-attack lockout" in err2 and TA in err2 and "dictionary-attack lockout" in err3,
          "... the reason names the lockout and the TPM: ..." + (err2.strip().splitlines() or ["?"])[-1][-200:])
    check(before == after, "... and nothing is written (the folder's files and bytes are unchanged)")
    rc, out, err = tde(LPCFG, "keystore", "status")
    check(rc == 0 and "status: OPEN" in out,
          "in lockout a PCR-bound wallet still opens (its policy session is not DA-checked) (%s)"
          % err.strip()[:200])
    x = tool("tpm2_dictionarylockout", "-c")
    check(x.returncode == 0 and in_lockout() == "0", "lockout cleared with the lockout hierarchy (%s)"
          % x.stderr.strip())
    rc, out, err = py_once(NCFG, NDB, "SELECT x FROM t")
    check(rc == 0 and out == "[('nopcr',)]", "after the lockout is cleared the wallet opens again (%s)"
          % err.strip())

    # Configuration values are checked.
    for text, want in (("wallet_seal = tpm3\n", "wallet_seal must be"),
                       ("wallet_seal = tpm2\nwallet_tpm_pcrs = 7,24\n", "wallet_tpm_pcrs must be"),
                       ("wallet_seal = tpm2\nwallet_tpm_parent = 0x1234\n", "wallet_tpm_parent must be"),
                       ("wallet_tpm_pcrs = 7\n", "needs wallet_seal = tpm2")):
        bad = write(os.path.join(W, "bad.conf"), "keystore = wallet\nwallet = x.wallet\n" + text)
        rc, out, err = tde(bad, "keystore", "status")
        check(want in err or want in out, "config check: " + want)
finally:
    for name in list(tpms):
        tpm_stop(name)
    shutil.rmtree(SOCKDIR, ignore_errors=True)

if failures:
    print("%d FAILED" % len(failures))
    sys.exit(1)
print("all passed")
if not os.environ.get("TDE_KEEP_SCRATCH"):
    shutil.rmtree(W, ignore_errors=True)
