#!/usr/bin/python3
"""sqlite-tde benchmark kit: orchestrator and report writer.

Installed next to the driver as sqlite-tde-bench.py; `sqlite-tde bench ARGS`
and `sqlite-tde-bench ARGS` run it.  It sets up every condition in a scratch
folder (keystores, the sqlcipher key), builds each condition's data set once
with the same seed, then runs the workloads round robin: per repeat and
workload the conditions run in an order shuffled with the printed seed, each
run in a fresh driver process on a fresh copy of its data set.  It writes
results.json (every raw observation), report.md and a self-contained
report.html (inline SVG, no network) into the output folder.

Standard library only (Debian's /usr/bin/python3).  It never reads or prints
key material: the wallet password and the sqlcipher passphrase are random,
written to 0600 files in the scratch folder, and handed over by file name.
"""
import argparse
import datetime
import html
import json
import os
import platform
import random
import secrets
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import time

SCHEMA_VERSION = 1
HERE = os.path.dirname(os.path.abspath(__file__))

# workload -> list of (metric, label, unit, better); the first is the headline.
HIGHER, LOWER = "higher", "lower"
METRICS = {
    "insert": [("rows_per_s", "insert throughput", "rows/s", HIGHER),
               ("commit_ms_p50", "insert commit p50", "ms", LOWER)],
    "delete-replenish": [("rows_per_s", "delete-replenish throughput", "rows/s", HIGHER),
                         ("commit_ms_mean", "delete-replenish commit mean", "ms", LOWER),
                         ("commit_ms_p50", "delete-replenish commit p50", "ms", LOWER),
                         ("commit_ms_p99", "delete-replenish commit p99", "ms", LOWER)],
    "cold-scan": [("s_per_scan", "cold full scan", "s/scan", LOWER)],
    "warm-scan": [("s_per_scan", "warm full scan", "s/scan", LOWER)],
    "bounce": [("bounce_ms", "bounce (open+key unwrap+first query)", "ms", LOWER)],
    "row-at-a-time": [("rows_per_s", "row-at-a-time (both phases)", "rows/s", HIGHER),
                      ("insert_rows_per_s", "row-at-a-time inserts", "rows/s", HIGHER),
                      ("delete_rows_per_s", "row-at-a-time deletes", "rows/s", HIGHER)],
    "tpcb-select": [("tps", "tpcb select-only", "tps", HIGHER),
                    ("lat_ms_p50", "tpcb select-only latency p50", "ms", LOWER)],
    "tpcb-rw": [("tps", "tpcb read/write", "tps", HIGHER),
                ("lat_ms_p50", "tpcb read/write latency p50", "ms", LOWER),
                ("lat_ms_p99", "tpcb read/write latency p99", "ms", LOWER)],
}
BASE_WORKLOADS = ["insert", "delete-replenish", "cold-scan", "warm-scan", "bounce",
                  "row-at-a-time", "tpcb-select", "tpcb-rw"]
# Workloads whose checksum must be the same in every run of every condition.
DETERMINISTIC = {"delete-replenish", "cold-scan", "warm-scan", "bounce", "row-at-a-time"}
ALL_CONDITIONS = ["plain", "wallet", "wallet-password", "pkcs11", "kmip", "sqlcipher"]
# Run only when named in --conditions: the auto-login wallet with a standby
# attached on 127.0.0.1 (sqlite-tde ship + standby), its lag sampled.
EXTRA_CONDITIONS = ["standby", "tpm2", "command"]
TDE_CONDITIONS = ["wallet", "wallet-password", "pkcs11", "kmip", "tpm2", "command"]
# Throughput workloads of the ">= 0.97" target.
THROUGHPUT_TARGET = ["insert", "delete-replenish", "row-at-a-time", "tpcb-select", "tpcb-rw"]
BOUNCE_TARGET_MS = {"wallet": 2.0, "pkcs11": 10.0, "kmip": 50.0}


def base_of(workload):
    for b in ("tpcb-select", "tpcb-rw"):
        if workload.startswith(b + "-t"):
            return b
    return workload


def progress(msg):
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K" + msg)
    else:
        sys.stderr.write(msg + "\n")
    sys.stderr.flush()


# ---- conditions ---------------------------------------------------------------

class Condition:
    def __init__(self, name):
        self.name = name
        self.config = None     # tde configuration
        self.keyfile = None    # sqlcipher passphrase file
        self.env = {}
        self.driver = None
        self.skip = None       # reason, when skipped
        self.label = name
        self.dataset = None
        self.standby = False   # run with a shipper and a standby attached

    def driver_args(self):
        a = []
        if self.config:
            a += ["--config", self.config]
        if self.keyfile:
            a += ["--keyfile", self.keyfile]
        return a


def write_private(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def run_cli(cli, config, args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([cli, "--config", config] + args, capture_output=True, text=True,
                       env=e, timeout=300)
    return p.returncode, (p.stdout + p.stderr).strip()


# Services the conditions started (stopped by main, whatever happens).
SERVICES = []

# Debian's python3-pykmip lives in the system Python, whatever python3 runs us.
KMIP_PY = "/usr/bin/python3"


def env_without_preload():
    # Under the sanitizer build the tests preload the ASan runtime; the
    # tools and servers the kit starts are not ours to instrument.
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    return e


def kmip_certs(d):
    """Throwaway CA, server certificate (CN and SAN 127.0.0.1) and client
    certificate (clientAuth) in d, with the openssl command line tool."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def ossl(args):
        p = subprocess.run(["openssl"] + args, cwd=d, capture_output=True, text=True, timeout=60,
                           env=env_without_preload())
        if p.returncode != 0:
            raise RuntimeError("openssl %s: %s" % (args[0], (p.stdout + p.stderr).strip()[-300:]))

    ossl(["req", "-x509"] + ec + ["-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
                                 "-subj", "/CN=tde-bench-ca",
                                 "-addext", "basicConstraints=critical,CA:TRUE",
                                 "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
    for who, ext in (("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
                     ("client", "extendedKeyUsage=clientAuth\n")):
        with open(os.path.join(d, who + ".ext"), "w") as f:
            f.write(ext + "basicConstraints=CA:FALSE\n")
        cn = "127.0.0.1" if who == "server" else "tde-bench-client"
        ossl(["req"] + ec + ["-keyout", who + ".key", "-out", who + ".csr", "-subj", "/CN=" + cn])
        ossl(["x509", "-req", "-in", who + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
              "-CAcreateserial", "-days", "2", "-extfile", who + ".ext", "-out", who + ".pem"])
    for f in ("ca.key", "server.key", "client.key"):
        os.chmod(os.path.join(d, f), 0o600)


def kmip_start(d):
    """A PyKMIP server on a free loopback port, its database, certificates
    and logs in d; returns the port once it accepts TLS connections.  It runs
    in its own session (PyKMIP forks per connection): kmip_stop kills the
    whole process group."""
    kmip_certs(d)
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        port = so.getsockname()[1]
    os.makedirs(os.path.join(d, "policies"), exist_ok=True)
    with open(os.path.join(d, "server.conf"), "w") as f:
        f.write("[server]\nhostname=127.0.0.1\nport=%d\ncertificate_path=%s/server.pem\n"
                "key_path=%s/server.key\nca_path=%s/ca.pem\nauth_suite=TLS1.2\n"
                "policy_path=%s/policies\nenable_tls_client_auth=True\nlogging_level=WARNING\n"
                "database_path=%s/pykmip.db\n" % (port, d, d, d, d, d))
    env = env_without_preload()
    out = open(os.path.join(d, "server.out"), "w")
    proc = subprocess.Popen([KMIP_PY, "-m", "kmip.services.server.server", "-f",
                             os.path.join(d, "server.conf"), "-l", os.path.join(d, "server.log")],
                            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                            env=env, start_new_session=True)
    out.close()
    SERVICES.append(lambda: kmip_stop(proc))
    ctx = ssl.create_default_context(cafile=os.path.join(d, "ca.pem"))
    ctx.load_cert_chain(os.path.join(d, "client.pem"), os.path.join(d, "client.key"))
    for _ in range(150):
        if proc.poll() is not None:
            with open(os.path.join(d, "server.out")) as f:
                raise RuntimeError("PyKMIP server exited: %s" % f.read().strip()[-300:])
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as so:
                with ctx.wrap_socket(so, server_hostname="127.0.0.1"):
                    return port
        except (OSError, ssl.SSLError):
            time.sleep(0.1)
    raise RuntimeError("PyKMIP server did not accept TLS connections in 15 s")


def kmip_stop(proc):
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def setup_condition(name, work, opt):
    c = Condition(name)
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    cli = os.path.join(opt.build, "sqlite-tde")
    c.driver = os.path.join(opt.build, "sqlite-tde-bench")
    if name == "plain":
        c.label = "plain (stock unix VFS)"
        return c
    if name == "sqlcipher":
        c.driver = os.path.join(opt.build, "sqlite-tde-bench-sqlcipher")
        if not os.access(c.driver, os.X_OK):
            c.skip = ("sqlite-tde-bench-sqlcipher not built (install libsqlcipher-dev "
                      "and re-run cmake)")
            return c
        c.keyfile = os.path.join(d, "passphrase")
        write_private(c.keyfile, secrets.token_hex(32) + "\n")
        try:
            v = json.loads(subprocess.run([c.driver, "driver", "--op", "versions"],
                                          capture_output=True, text=True, timeout=60).stdout)
            c.label = "sqlcipher %s (SQLite %s)" % (v.get("sqlcipher", "?"), v.get("sqlite", "?"))
            c.versions = v
        except (ValueError, subprocess.SubprocessError) as ex:
            c.skip = "sqlcipher driver does not run: %s" % ex
        return c
    c.config = os.path.join(d, "tde.conf")
    user_cfg = {"pkcs11": opt.pkcs11_config, "kmip": opt.kmip_config}.get(name)
    if user_cfg:
        c.config = os.path.abspath(user_cfg)
        c.label = "%s (%s)" % (name, c.config)
        rc, out = run_cli(cli, c.config, ["keystore", "status"])
        if rc != 0:
            c.skip = "keystore status failed for %s: %s" % (c.config, out[-300:])
        return c
    if name in ("wallet", "standby"):
        write_private(c.config, "keystore = wallet\nwallet = wallet.tdew\n")
        rc, out = run_cli(cli, c.config, ["keystore", "create", "--auto-login"])
        c.label = "wallet (auto-login)"
        if name == "standby":
            c.standby = True
            c.label = "standby (auto-login wallet; sqlite-tde ship to a standby on 127.0.0.1, 50 ms cycles)"
            if opt.journal.upper() != "WAL":
                c.skip = "shipping needs journal_mode WAL (--journal %s)" % opt.journal
    elif name == "wallet-password":
        write_private(os.path.join(d, "wallet.pw"), secrets.token_urlsafe(24) + "\n")
        write_private(c.config, "keystore = wallet\nwallet = wallet.tdew\npassword_file = wallet.pw\n")
        rc, out = run_cli(cli, c.config, ["keystore", "create"])
        c.label = "wallet-password (password_file, default Argon2id cost)"
    elif name == "pkcs11":
        # SoftHSM token in the scratch folder; the configuration keys follow
        # the pkcs11 provider's README section (tried, never assumed).
        module = next((m for m in ("/usr/lib/softhsm/libsofthsm2.so",
                                   "/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so")
                       if os.path.exists(m)), None)
        if module is None or shutil.which("softhsm2-util") is None:
            c.skip = "SoftHSM (softhsm2) is not installed"
            return c
        tokdir = os.path.join(d, "tokens")
        os.makedirs(tokdir, exist_ok=True)
        conf = os.path.join(d, "softhsm2.conf")
        write_private(conf, "directories.tokendir = %s\nobjectstore.backend = file\n" % tokdir)
        c.env = {"SOFTHSM2_CONF": conf}
        pin = secrets.token_hex(8)
        write_private(os.path.join(d, "pin"), pin + "\n")
        e = dict(os.environ, **c.env)
        p = subprocess.run(["softhsm2-util", "--init-token", "--free", "--label", "tdebench",
                            "--pin", pin, "--so-pin", secrets.token_hex(8)],
                           capture_output=True, text=True, env=e, timeout=60)
        if p.returncode != 0:
            c.skip = "softhsm2-util --init-token failed: %s" % (p.stdout + p.stderr).strip()[-300:]
            return c
        write_private(c.config, "keystore = pkcs11\npkcs11_module = %s\n"
                      "pkcs11_token_label = tdebench\npkcs11_key_label = tdebench\n"
                      "password_file = pin\n" % module)
        rc, out = run_cli(cli, c.config, ["keystore", "create"], c.env)
        c.label = "pkcs11 (SoftHSM %s)" % module
    elif name == "kmip":
        # PyKMIP on 127.0.0.1 in the scratch folder, mutual TLS with
        # throwaway certificates; stopped by main.
        p = subprocess.run([KMIP_PY, "-c", "import kmip.services.server"], capture_output=True,
                           timeout=60, env=env_without_preload())
        if p.returncode != 0:
            c.skip = "python3-pykmip is not installed (%s cannot import kmip)" % KMIP_PY
            return c
        pki = os.path.join(d, "pki")
        os.makedirs(pki, exist_ok=True)
        try:
            port = kmip_start(pki)
        except (RuntimeError, OSError, subprocess.SubprocessError) as ex:
            c.skip = "could not start a PyKMIP server: %s" % ex
            return c
        write_private(c.config, "keystore = kmip\nkmip_servers = 127.0.0.1:%d\nkmip_ca = %s/ca.pem\n"
                      "kmip_client_cert = %s/client.pem\nkmip_client_key = %s/client.key\n"
                      % (port, pki, pki, pki))
        # The client certificate is the credential: no password to ask for.
        rc, out = run_cli(cli, c.config, ["keystore", "create", "--auto-login"])
        c.label = "kmip (PyKMIP on 127.0.0.1:%d, TLS 1.2, client certificate)" % port
    elif name == "tpm2":
        # Auto-login wallet sealed by swtpm (Unix socket under /tmp: short
        # path), PCR 7 policy; swtpm stopped by main.
        if shutil.which("swtpm") is None:
            c.skip = "swtpm is not installed"
            return c
        st = os.path.join("/tmp", "tdebench-tpm-%d-%s" % (os.getpid(), secrets.token_hex(4)))
        os.makedirs(st)
        proc = subprocess.Popen(["swtpm", "socket", "--tpm2", "--tpmstate", "dir=" + st,
                                 "--server", "type=unixio,path=%s/sock" % st,
                                 "--ctrl", "type=unixio,path=%s/sock.ctrl" % st,
                                 "--flags", "not-need-init,startup-clear"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=env_without_preload())

        def tpm_stop(proc=proc, st=st):
            proc.terminate()
            proc.wait(timeout=10)
            shutil.rmtree(st, ignore_errors=True)
        SERVICES.append(tpm_stop)
        for _ in range(250):
            if os.path.exists(os.path.join(st, "sock")):
                break
            time.sleep(0.02)
        write_private(c.config, "keystore = wallet\nwallet = wallet.tdew\nwallet_seal = tpm2\n"
                      "wallet_tpm_pcrs = 7\nwallet_tpm_tcti = swtpm:path=%s/sock\n" % st)
        rc, out = run_cli(cli, c.config, ["keystore", "create", "--auto-login"])
        c.label = "tpm2 (auto-login wallet sealed by swtpm, PCR 7 policy)"
    elif name == "command":
        # keystore = command with the openssl example helper (the source
        # tree is found through the build folder's CMake cache).
        src = None
        try:
            with open(os.path.join(opt.build, "CMakeCache.txt")) as f:
                for line in f:
                    if line.startswith("CMAKE_HOME_DIRECTORY:"):
                        src = line.split("=", 1)[1].strip()
        except OSError:
            pass
        helper = os.path.join(src or "/nonexistent", "contrib", "keystore-helpers", "tde-openssl-helper")
        if not os.path.isfile(helper):
            c.skip = "contrib/keystore-helpers/tde-openssl-helper not found next to the build"
            return c
        h = "/usr/bin/python3 %s --dir keys" % helper
        write_private(c.config, "keystore = command\nwrap_command = %s\nunwrap_command = %s\n"
                      "new_key_command = %s\nlist_keys_command = %s\n" % (h, h, h, h))
        rc, out = run_cli(cli, c.config, ["keystore", "create"])
        c.label = "command (openssl helper: Python + openssl pkeyutl, RSA-2048 OAEP)"
    else:
        c.skip = "unknown condition"
        return c
    if rc != 0:
        c.skip = "`keystore = %s` could not be created with the tools present: %s" % (
            "wallet" if name.startswith("wallet") else name, out.splitlines()[-1][:300] if out else "")
    return c


# ---- driver runs -------------------------------------------------------------------

def common_args(opt):
    return ["--seed", str(opt.seed), "--rows", str(opt.rows), "--scale", str(opt.scale),
            "--journal", opt.journal, "--synchronous", opt.synchronous,
            "--page-size", str(opt.page_size), "--cache-size", str(opt.cache_size),
            "--rat-rows", str(opt.rat_rows)]


def call_driver(c, args, timeout):
    e = dict(os.environ)
    e.update(c.env)
    p = subprocess.run([c.driver, "driver"] + args + c.driver_args(), capture_output=True,
                       text=True, env=e, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError((p.stderr or p.stdout).strip()[-500:] or "exit %d" % p.returncode)
    return json.loads(p.stdout.strip().splitlines()[-1])


def remove_db(path):
    for s in ("", "-wal", "-shm", "-journal"):
        try:
            os.unlink(path + s)
        except FileNotFoundError:
            pass


def read_state(path):
    """A state file of the standby feature (docs/FORMAT.md): {} if absent or torn."""
    import hashlib
    try:
        data = open(path, "rb").read()
    except OSError:
        return {}
    i = data.find(b"\nsha256=")
    if i < 0 or hashlib.sha256(data[:i + 1]).hexdigest().encode() != data[i + 8:i + 72]:
        return {}
    return dict(l.split("=", 1) for l in data[:i].decode().split("\n")[1:] if "=" in l)


def ship_lag(run_db):
    """(transactions, bytes, seconds) the standby has not acknowledged, or None."""
    st = read_state(run_db + "-tdeship-state")
    if not st or "peer0_acked_seq" not in st:
        return None
    txn = max(0, int(st["captured_seq"]) - int(st["peer0_acked_seq"]))
    sec = (int(st["captured_ms"]) - int(st["peer0_acked_capture_ms"])) / 1000.0 if txn else 0.0
    return txn, int(st["peer0_lag_bytes"]), max(0.0, sec)


def standby_start(c, opt, work, run_db):
    """Standby and shipper for one run; returns (procs, standby folder) once
    the standby holds the base copy."""
    d = os.path.join(work, c.name, "standby")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    cli = os.path.join(opt.build, "sqlite-tde")
    log = open(os.path.join(d, "log"), "a")
    procs = [subprocess.Popen([cli, "standby", "--listen", "127.0.0.1:%d" % port, os.path.join(d, "s.db")],
                              stdout=subprocess.DEVNULL, stderr=log, env=env_without_preload())]
    time.sleep(0.2)
    procs.append(subprocess.Popen([cli, "--config", c.config, "ship", "--cycle-ms", "50", "--to",
                                   "127.0.0.1:%d" % port, run_db], stdout=subprocess.DEVNULL,
                                  stderr=log, env=env_without_preload()))
    t0 = time.time()
    while time.time() - t0 < 300:
        lag = ship_lag(run_db)
        if lag is not None and lag[0] == 0 and read_state(os.path.join(d, "s.db-tdestandby")):
            return procs, d
        if any(p.poll() is not None for p in procs):
            break
        time.sleep(0.1)
    standby_stop(procs)
    raise RuntimeError("the standby did not take its base copy: %s" % open(os.path.join(d, "log")).read()[-300:])


def standby_stop(procs):
    for p in reversed(procs):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def run_one(c, workload, opt, work):
    run_db = os.path.join(work, c.name, "run.db")
    remove_db(run_db)
    shutil.copyfile(c.dataset, run_db)
    if c.standby:
        return run_one_standby(c, workload, opt, work, run_db)
    return run_one_driver(c, workload, opt, work, run_db)


def run_one_standby(c, workload, opt, work, run_db):
    """The driver run with a standby attached: lag sampled every 50 ms while
    it runs, at its end, and the time until the standby caught up."""
    procs, d = standby_start(c, opt, work, run_db)
    samples, stop = [], []

    def sample():
        while not stop:
            lag = ship_lag(run_db)
            if lag is not None:
                samples.append(lag)
            time.sleep(0.05)
    import threading
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    try:
        r = run_one_driver(c, workload, opt, work, run_db, keep=True)
        t_end = time.time()
        stop.append(1)
        th.join()
        # the last sample (the shipper writes its state every 200 ms)
        end = samples[-1] if samples else (ship_lag(run_db) or (0, 0, 0.0))
        caught = None
        while time.time() - t_end < 120:
            lag = ship_lag(run_db)
            if lag is not None and lag[0] == 0:
                caught = time.time() - t_end
                break
            time.sleep(0.05)
        r["standby_lag_txn_max"] = max([x[0] for x in samples] or [0])
        r["standby_lag_bytes_max"] = max([x[1] for x in samples] or [0])
        r["standby_lag_s_max"] = round(max([x[2] for x in samples] or [0.0]), 3)
        r["standby_lag_txn_end"], r["standby_lag_bytes_end"], r["standby_lag_s_end"] = end[0], end[1], round(end[2], 3)
        r["standby_catchup_s"] = round(caught, 3) if caught is not None else None
        r["standby_lag_samples"] = len(samples)
        st = read_state(run_db + "-tdeship-state")
        r["ship_lock_ms_avg"] = float(st.get("capture_lock_ms_avg", "nan"))
        r["ship_lock_ms_max"] = float(st.get("capture_lock_ms_max", "nan"))
        if caught is None:
            raise RuntimeError("the standby did not catch up within 120 s (lag %s)" % (ship_lag(run_db),))
        return r
    finally:
        stop.append(1)
        standby_stop(procs)
        shutil.rmtree(d, ignore_errors=True)
        remove_db(run_db)
        for sfx in ("-tdeship", "-tdeship-state"):
            try:
                os.unlink(run_db + sfx)
            except FileNotFoundError:
                pass


def run_one_driver(c, workload, opt, work, run_db, keep=False):
    args = ["--op", "run", "--db", run_db, "--seconds", str(opt.seconds)] + common_args(opt)
    b = base_of(workload)
    args += ["--workload", b]
    if b != workload:
        args += ["--threads", workload.rsplit("-t", 1)[1]]
    t0 = time.time()
    r = call_driver(c, args, timeout=max(600, opt.seconds * 60))
    r["wall_s"] = round(time.time() - t0, 3)
    if not keep:
        remove_db(run_db)
    return r


# ---- statistics ---------------------------------------------------------------------

def median(xs):
    return statistics.median(xs) if xs else float("nan")


def bootstrap_ratio(xs, ys, rng, n=2000):
    """95% CI of median(xs)/median(ys), resampling runs with replacement."""
    if not xs or not ys or median(ys) == 0:
        return (float("nan"), float("nan"))
    rs = []
    for _ in range(n):
        a = [xs[rng.randrange(len(xs))] for _ in xs]
        b = [ys[rng.randrange(len(ys))] for _ in ys]
        mb = statistics.median(b)
        if mb:
            rs.append(statistics.median(a) / mb)
    rs.sort()
    return (rs[int(0.025 * (len(rs) - 1))], rs[int(0.975 * (len(rs) - 1))])


def verdict(ratio, lo, hi, better):
    if ratio != ratio:
        return "n/a"
    if better == HIGHER:
        if hi >= 1.0:
            return "no measurable penalty"
        return "penalty %.1f %%" % ((1 - ratio) * 100)
    if lo <= 1.0:
        return "no measurable penalty"
    return "penalty %.1f %%" % ((ratio - 1) * 100)


def analyse(obs, conds, workloads, opt):
    rng = random.Random(opt.seed ^ 0xB007)
    vals = {}
    for o in obs:
        if "error" in o:
            continue
        for m, _, _, _ in METRICS[base_of(o["workload"])]:
            if m in o["result"]:
                vals.setdefault((o["workload"], m, o["condition"]), []).append(o["result"][m])
        vals.setdefault((o["workload"], "maxrss_kib", o["condition"]), []).append(
            o["result"].get("maxrss_kib", 0))
        if o["result"].get("shared_clean_kib", -1) >= 0:
            vals.setdefault((o["workload"], "shared_clean_kib", o["condition"]), []).append(
                o["result"]["shared_clean_kib"])
    rows = []
    for w in workloads:
        for m, label, unit, better in METRICS[base_of(w)]:
            base = vals.get((w, m, "plain"), [])
            for c in conds:
                xs = vals.get((w, m, c.name), [])
                if not xs:
                    continue
                r = {"workload": w, "metric": m, "label": label, "unit": unit, "better": better,
                     "condition": c.name, "n": len(xs), "median": median(xs), "min": min(xs),
                     "max": max(xs), "headline": m == METRICS[base_of(w)][0][0]}
                if c.name != "plain" and base:
                    r["ratio"] = median(xs) / median(base) if median(base) else float("nan")
                    r["ci_low"], r["ci_high"] = bootstrap_ratio(xs, base, rng)
                    r["verdict"] = verdict(r["ratio"], r["ci_low"], r["ci_high"], better)
                    if min(len(xs), len(base)) < 3:
                        r["verdict"] += " (under 3 runs: no real interval)"
                    # performance index: plain = 100, higher is better
                    r["index"] = 100 * (r["ratio"] if better == HIGHER else
                                        (1 / r["ratio"] if r["ratio"] else float("nan")))
                elif c.name == "plain":
                    r["ratio"], r["ci_low"], r["ci_high"], r["verdict"], r["index"] = 1.0, 1.0, 1.0, "baseline", 100.0
                rows.append(r)
    return rows, vals


def targets(rows, vals, conds, workloads, opt):
    """Each target of issue 6, per condition: met / missed / not measured."""
    rng = random.Random(opt.seed ^ 0x7A6E7)
    by = {(r["workload"], r["metric"], r["condition"]): r for r in rows}
    names = [c.name for c in conds if not c.skip]
    out = []

    def add(target, cond, w, figure, met):
        out.append({"target": target, "condition": cond, "workload": w, "figure": figure,
                    "status": "not measured" if met is None else ("met" if met else "MISSED")})
    for cn in [n for n in TDE_CONDITIONS if n in names]:
        for w in workloads:
            b = base_of(w)
            if b in THROUGHPUT_TARGET:
                m = METRICS[b][0][0]
                r = by.get((w, m, cn))
                if r and "ratio" in r:
                    add("throughput ratio >= 0.97", cn, w, "%.3f [%.3f, %.3f]" % (
                        r["ratio"], r["ci_low"], r["ci_high"]), r["ratio"] >= 0.97)
            for m in ("commit_ms_p50", "lat_ms_p50"):
                if b in ("insert", "delete-replenish", "tpcb-rw") and (w, m, cn) in by:
                    r = by[(w, m, cn)]
                    add("commit latency p50 ratio <= 1.03", cn, w, "%.3f [%.3f, %.3f]" % (
                        r["ratio"], r["ci_low"], r["ci_high"]), r["ratio"] <= 1.03)
            for wl, lim in (("cold-scan", 1.10), ("warm-scan", 1.30)):
                if w == wl and (w, "s_per_scan", cn) in by:
                    r = by[(w, "s_per_scan", cn)]
                    add("%s time ratio <= %.2f" % (wl, lim), cn, w, "%.3f [%.3f, %.3f]" % (
                        r["ratio"], r["ci_low"], r["ci_high"]), r["ratio"] <= lim)
        if "bounce" in workloads and ("bounce", "bounce_ms", cn) in by and \
                ("bounce", "bounce_ms", "plain") in by:
            d = by[("bounce", "bounce_ms", cn)]["median"] - by[("bounce", "bounce_ms", "plain")]["median"]
            lim = BOUNCE_TARGET_MS.get(cn)
            add(("bounce adds <= %g ms" % lim) if lim is not None else
                "bounce: no target (password KDF by design)" if cn == "wallet-password"
                else "bounce: no target set", cn, "bounce",
                "+%.3f ms" % d, None if lim is None else d <= lim)
        # peak resident memory
        worst, worst_w, worst_sh = None, None, None
        for w in workloads:
            a, p = vals.get((w, "maxrss_kib", cn)), vals.get((w, "maxrss_kib", "plain"))
            if a and p:
                d = median(a) - median(p)
                if worst is None or d > worst:
                    worst, worst_w = d, w
                    sa, sp = vals.get((w, "shared_clean_kib", cn)), vals.get((w, "shared_clean_kib", "plain"))
                    worst_sh = median(sa) - median(sp) if sa and sp else None
        if worst is not None:
            # Judged on the peak RSS as measured; the share of it that is
            # library code mapped read-only (shared with every process using
            # libcrypto) is shown, not subtracted.
            add("peak RSS within 2 MiB of plain", cn, worst_w,
                "+%.0f KiB (worst workload)%s" % (
                    worst, "" if worst_sh is None else
                    "; shared clean pages (library code) at the end of the run +%.0f KiB" % worst_sh),
                worst <= 2048)
    # keystore location makes no difference: other keystores vs the auto-login wallet
    if "wallet" in names:
        for cn in [n for n in ("wallet-password", "pkcs11", "kmip") if n in names]:
            for w in workloads:
                b = base_of(w)
                if b not in THROUGHPUT_TARGET:
                    continue
                m = METRICS[b][0][0]
                xs, ys = vals.get((w, m, cn)), vals.get((w, m, "wallet"))
                if xs and ys:
                    lo, hi = bootstrap_ratio(xs, ys, rng)
                    add("keystore location: no difference beyond noise (vs wallet)", cn, w,
                        "%.3f [%.3f, %.3f]" % (median(xs) / median(ys), lo, hi), lo <= 1.0 <= hi)
    # faster than the sqlcipher peer on every workload
    if "sqlcipher" in names:
        for cn in [n for n in TDE_CONDITIONS if n in names]:
            for w in workloads:
                m, _, _, better = METRICS[base_of(w)][0]
                a, s = by.get((w, m, cn)), by.get((w, m, "sqlcipher"))
                if a and s:
                    faster = a["median"] > s["median"] if better == HIGHER else a["median"] < s["median"]
                    add("faster than sqlcipher", cn, w, "%.4g vs %.4g %s" % (
                        a["median"], s["median"], METRICS[base_of(w)][0][2]), faster)
    return out


# ---- environment ---------------------------------------------------------------------

def environment(opt, conds):
    env = {"cpu_model": "?", "aes_ni": False, "cores": os.cpu_count(), "kernel": platform.release(),
           "python": platform.python_version(),
           "load_average_start": opt.load_start, "load_average_end": "%.2f %.2f %.2f" % os.getloadavg()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and env["cpu_model"] == "?":
                    env["cpu_model"] = line.split(":", 1)[1].strip()
                if line.startswith("flags") and " aes" in line.split(":", 1)[1] + " ":
                    env["aes_ni"] = " aes " in " " + line.split(":", 1)[1] + " "
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            env["mem_total"] = f.readline().split(":", 1)[1].strip()
    except OSError:
        pass
    p = subprocess.run(["stat", "-f", "-c", "%T", opt.out], capture_output=True, text=True)
    env["filesystem"] = p.stdout.strip() or "?"
    p = subprocess.run(["df", "-P", opt.out], capture_output=True, text=True)
    env["device"] = p.stdout.splitlines()[-1].split()[0] if p.returncode == 0 else "?"
    v = json.loads(subprocess.run([os.path.join(opt.build, "sqlite-tde-bench"), "driver", "--op",
                                   "versions"], capture_output=True, text=True).stdout)
    env["sqlite"] = v.get("sqlite")
    env["sqlite_tde"] = v.get("sqlite_tde")
    env["openssl"] = v.get("openssl")
    for c in conds:
        if c.name == "sqlcipher" and getattr(c, "versions", None):
            env["sqlcipher"] = c.versions.get("sqlcipher")
            env["sqlcipher_sqlite"] = c.versions.get("sqlite")
    try:
        env["git_commit"] = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                                           capture_output=True, text=True).stdout.strip() or None
    except OSError:
        env["git_commit"] = None
    return env


# ---- reports -----------------------------------------------------------------------------

def fmt(v):
    if v is None or v != v:
        return "n/a"
    a = abs(v)
    if a >= 1000:
        return "{:,.0f}".format(v)
    if a >= 10:
        return "%.1f" % v
    if a >= 0.1:
        return "%.3f" % v
    return "%.4g" % v


def limitations(res):
    o, env, lim = res["options"], res["environment"], []
    lim.append("%d repeats per condition and workload, %.3g s per timed workload; the ratios' "
               "95%% intervals are bootstrap intervals over those runs only (runs on one machine, "
               "one day)." % (o["repeats"], o["seconds"]))
    if o["seconds"] < 10:
        lim.append("Short runs: below 10 s per workload, SQLite's checkpoints and the OS's "
                   "write-back may fall inside some runs and not others; use --seconds 10 or "
                   "300 (the Oracle report's duration) for a steadier figure.")
    fsname = env.get("filesystem", "?")
    lim.append("Output folder on file system %s (%s). Cold scans drop the OS cache with "
               "fsync + posix_fadvise(POSIX_FADV_DONTNEED) on the database files; a hypervisor "
               "or disk cache below the guest is not dropped." % (fsname, env.get("device", "?")))
    if fsname in ("tmpfs", "ramfs"):
        lim.append("The output folder is in memory (tmpfs): cold-scan equals warm-scan.")
    by = {(r["workload"], r["metric"], r["condition"]): r for r in res["summary"]}
    c, w = by.get(("cold-scan", "s_per_scan", "plain")), by.get(("warm-scan", "s_per_scan", "plain"))
    if c and w and c["median"] < 1.5 * w["median"]:
        lim.append("Plain cold scans took %s s against %s s warm: the storage below the guest "
                   "is fast or cached, so cold-scan mostly measures CPU cost here, not disk "
                   "reads." % (fmt(c["median"]), fmt(w["median"])))
    lim.append("Bounce is measured in one process: before each observation the driver calls "
               "tde_keystore_close() so that the open pays the keystore open and the data-key "
               "unwrap again; process start and library loading are not included. "
               "wallet-password pays Argon2id at its default cost on every bounce, by design.")
    lim.append("Data set: %d rows in t1 (about %d MB with its index) and pgbench scale %d; "
               "the cache size is %d (SQLite's PRAGMA cache_size); the tpcb data fits the OS "
               "cache." % (o["rows"], o["rows"] * 160 // 1000000, o["scale"], o["cache_size"]))
    for c in res["conditions"]:
        if c["skipped"]:
            lim.append("Condition %s not measured: %s" % (c["name"], c["skipped"]))
    if env.get("sqlcipher"):
        lim.append("The sqlcipher peer is Debian's libsqlcipher %s with its own SQLite %s "
                   "(plain and sqlite-tde use SQLite %s): part of any difference is SQLite's "
                   "version. It runs with its defaults (AES-256-CBC, HMAC-SHA1, PBKDF2 for "
                   "the passphrase) and PRAGMA key with a random passphrase."
                   % (env["sqlcipher"], env.get("sqlcipher_sqlite"), env.get("sqlite")))
    if res["failures"]:
        lim.append("%d runs failed (listed under raw measurements); their conditions have "
                   "fewer observations." % len(res["failures"]))
    try:
        la = float(env.get("load_average_end", "0").split()[1])
    except (ValueError, IndexError):
        la = 0.0
    if la > 0.5 * (env.get("cores") or 1):
        lim.append("The machine was not idle: 5-minute load average %s at the end on %s cores "
                   "(other processes competed for the CPU). Interleaving spreads that noise over "
                   "all conditions, but it widens the intervals." % (env.get("load_average_end"), env.get("cores")))
    lim.append("Checksums: %s." % res["checksums"])
    return lim


def headline_rows(res):
    return [r for r in res["summary"] if r["headline"] or r["metric"] in ("commit_ms_p50",)]


def md_report(res):
    o, env = res["options"], res["environment"]
    L = ["# sqlite-tde benchmark report", "",
         "Generated %s by `%s`." % (res["generated"], res["command"]), "",
         "## Environment", "",
         "| | |", "|---|---|"]
    for k in ("cpu_model", "aes_ni", "cores", "mem_total", "load_average_start", "load_average_end",
              "kernel", "filesystem", "device",
              "openssl", "sqlite", "sqlite_tde", "sqlcipher", "sqlcipher_sqlite", "git_commit"):
        if k in env:
            L.append("| %s | %s |" % (k, env[k]))
    L += ["", "## Method", "",
          "Seed %d (data, workloads and the shuffled run order; bootstrap seed derived from it). "
          "%d repeats; per repeat and workload the conditions run in a shuffled order; every run "
          "is a new process on a fresh copy of its condition's data set (built once with the same "
          "seed). journal_mode=%s, synchronous=%s, page_size=%d, cache_size=%d, %.3g s per timed "
          "workload, t1 rows %d, tpcb scale %d, row-at-a-time rows %d, tpcb threads %s."
          % (o["seed"], o["repeats"], o["journal"], o["synchronous"], o["page_size"],
             o["cache_size"], o["seconds"], o["rows"], o["scale"], o["rat_rows"], o["threads"]),
          "", "Conditions:", ""]
    for c in res["conditions"]:
        L.append("- **%s**: %s" % (c["name"], ("skipped: " + c["skipped"]) if c["skipped"] else c["label"]))
    live = [c["name"] for c in res["conditions"] if not c["skipped"] and c["name"] != "plain"]
    S = {(r["workload"], r["metric"], r["condition"]): r for r in res["summary"]}
    L += ["", "## Headline", "",
          "Median over runs per condition; in brackets the ratio to plain and its 95% bootstrap "
          "interval; a verdict when the interval excludes no penalty.", "",
          "| workload | figure | plain | " + " | ".join(live) + " |",
          "|---|---|---:|" + "---|" * len(live)]
    for r in headline_rows(res):
        if r["condition"] != "plain":
            continue
        cells = []
        for cn in live:
            y = S.get((r["workload"], r["metric"], cn))
            if not y or "ratio" not in y:
                cells.append("n/a")
                continue
            cells.append("%s (%.2f [%.2f, %.2f])%s" % (
                fmt(y["median"]), y["ratio"], y["ci_low"], y["ci_high"],
                "" if y["verdict"].startswith("no measurable") else " " + y["verdict"]))
        L.append("| %s | %s (%s, %s is better) | %s | %s |" % (
            r["workload"], r["metric"], r["unit"], r["better"], fmt(r["median"]), " | ".join(cells)))
    L += ["", "### Per condition", "",
          "Median (min-max) over runs; ratio = condition / plain with its 95% bootstrap interval.", "",
          "| workload | metric | condition | median | min | max | ratio [95% CI] | verdict |",
          "|---|---|---|---:|---:|---:|---|---|"]
    for r in headline_rows(res):
        L.append("| %s | %s (%s, %s is better) | %s | %s | %s | %s | %s | %s |" % (
            r["workload"], r["metric"], r["unit"], r["better"], r["condition"], fmt(r["median"]),
            fmt(r["min"]), fmt(r["max"]),
            "%.3f [%.3f, %.3f]" % (r["ratio"], r["ci_low"], r["ci_high"]) if "ratio" in r else "n/a",
            r.get("verdict", "n/a")))
    L += ["", "## Targets (issue 6)", "", "| target | condition | workload | figure | status |",
          "|---|---|---|---|---|"]
    for t in res["targets"]:
        L.append("| %s | %s | %s | %s | %s |" % (t["target"], t["condition"], t["workload"],
                                                  t["figure"], t["status"]))
    L += ["", "## All figures", "", "| workload | metric | condition | n | median | min | max | ratio [95% CI] | index (plain=100) | verdict |",
          "|---|---|---|---:|---:|---:|---:|---|---:|---|"]
    for r in res["summary"]:
        L.append("| %s | %s | %s | %d | %s | %s | %s | %s | %s | %s |" % (
            r["workload"], r["metric"], r["condition"], r["n"], fmt(r["median"]), fmt(r["min"]),
            fmt(r["max"]),
            "%.3f [%.3f, %.3f]" % (r["ratio"], r["ci_low"], r["ci_high"]) if "ratio" in r else "n/a",
            fmt(r.get("index")), r.get("verdict", "n/a")))
    sb = [ob for ob in res["observations"] if "result" in ob and "standby_lag_txn_max" in ob["result"]]
    if sb:
        L += ["", "## Standby lag", "",
              "Condition standby: a shipper (50 ms capture cycles) and a standby on 127.0.0.1 attached "
              "during the run; lag = captured on the primary but not yet acknowledged (applied) by the "
              "standby, sampled every 50 ms from the shipper's state file.", "",
              "| repeat | workload | rows/s | lag max (txn / bytes / s) | lag at end (txn / bytes / s) | "
              "caught up after | ship lock mean / max ms |", "|---:|---|---:|---|---|---:|---|"]
        for ob in sb:
            q = ob["result"]
            L.append("| %d | %s | %s | %d / %d / %.3f | %d / %d / %.3f | %s s | %.3f / %.3f |" % (
                ob["repeat"], ob["workload"], fmt(q.get("rows_per_s")), q["standby_lag_txn_max"],
                q["standby_lag_bytes_max"], q["standby_lag_s_max"], q["standby_lag_txn_end"],
                q["standby_lag_bytes_end"], q["standby_lag_s_end"], fmt(q["standby_catchup_s"]),
                q["ship_lock_ms_avg"], q["ship_lock_ms_max"]))
    L += ["", "## Limitations", ""] + ["- " + x for x in res["limitations"]]
    L += ["", "## Raw measurements", "",
          "Every observation, with its per-operation samples, is in results.json.", "",
          "| # | repeat | workload | condition | headline | maxrss KiB | checksum |", "|---:|---:|---|---|---:|---:|---|"]
    for i, ob in enumerate(res["observations"]):
        m = METRICS[base_of(ob["workload"])][0][0]
        if "error" in ob:
            L.append("| %d | %d | %s | %s | FAILED: %s | | |" % (i + 1, ob["repeat"], ob["workload"],
                     ob["condition"], ob["error"].replace("|", "/").replace("\n", " ")[:200]))
        else:
            L.append("| %d | %d | %s | %s | %s %s | %s | %s |" % (
                i + 1, ob["repeat"], ob["workload"], ob["condition"], fmt(ob["result"].get(m)),
                METRICS[base_of(ob["workload"])][0][2], ob["result"].get("maxrss_kib"),
                ob["result"].get("checksum")))
    return "\n".join(L) + "\n"


COLORS = {"plain": "#777777", "wallet": "#1f77b4", "wallet-password": "#2ca02c", "pkcs11": "#9467bd",
          "kmip": "#8c564b", "sqlcipher": "#d62728"}


def svg_bars(title, items, unit):
    """Horizontal bars: items = [(label, condition, median, min, max)]."""
    if not items:
        return ""
    h, top, lw, bw = 18, 26, 260, 360
    vmax = max(max(i[4], i[2]) for i in items) or 1
    H = top + h * len(items) + 10
    s = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">'
         % (lw + bw + 110, H), '<text x="4" y="14" font-weight="bold">%s (%s)</text>' % (html.escape(title), html.escape(unit))]
    for k, (label, cond, med, lo, hi) in enumerate(items):
        y = top + k * h
        w = bw * med / vmax
        s.append('<text x="%d" y="%d" text-anchor="end">%s</text>' % (lw - 4, y + 12, html.escape(label)))
        s.append('<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>' % (lw, y + 2, w, h - 5, COLORS.get(cond, "#444")))
        s.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="black"/>' % (
            lw + bw * lo / vmax, lw + bw * hi / vmax, y + h // 2, y + h // 2))
        s.append('<text x="%.1f" y="%d">%s</text>' % (lw + max(w, bw * hi / vmax) + 4, y + 12, fmt(med)))
    s.append("</svg>")
    return "\n".join(s)


def svg_diverging(title, items, center, unit):
    """items = [(label, cond, value, lo, hi)] around center (0 % or index 100)."""
    if not items:
        return ""
    h, top, lw, bw = 18, 26, 300, 420
    span = max([abs(v - center) for i in items for v in i[2:5] if v == v] + [1e-9]) * 1.1
    H = top + h * len(items) + 10
    cx = lw + bw / 2
    s = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">'
         % (lw + bw + 80, H), '<text x="4" y="14" font-weight="bold">%s</text>' % html.escape(title),
         '<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#999"/>' % (cx, cx, top, H - 6)]
    for k, (label, cond, v, lo, hi) in enumerate(items):
        if v != v:
            continue
        y = top + k * h
        x = cx + (v - center) / span * bw / 2
        s.append('<text x="%d" y="%d" text-anchor="end">%s</text>' % (lw - 4, y + 12, html.escape(label)))
        s.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>' % (
            min(x, cx), y + 2, abs(x - cx), h - 5, COLORS.get(cond, "#444")))
        if lo == lo and hi == hi:
            s.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="black"/>' % (
                cx + (lo - center) / span * bw / 2, cx + (hi - center) / span * bw / 2, y + h // 2, y + h // 2))
        s.append('<text x="%d" y="%d">%s%s</text>' % (lw + bw + 4, y + 12, fmt(v), unit))
    s.append("</svg>")
    return "\n".join(s)


def html_report(res, md):
    rows = res["summary"]
    parts = []
    dml = [w for w in res["options"]["workloads"] if base_of(w) in THROUGHPUT_TARGET]
    lat = [w for w in res["options"]["workloads"] if base_of(w) not in THROUGHPUT_TARGET]
    parts.append("<h2>DML throughput</h2>")
    for w in dml:
        r0 = [r for r in rows if r["workload"] == w and r["headline"]]
        if r0:
            parts.append(svg_bars(w + ": " + r0[0]["label"], [(r["condition"], r["condition"], r["median"], r["min"], r["max"]) for r in r0], r0[0]["unit"]))
    parts.append("<h2>Latency and restart</h2>")
    for w in dml + lat:
        for r0 in [[r for r in rows if r["workload"] == w and r["metric"] == m]
                   for m in ("commit_ms_p50", "lat_ms_p50", "s_per_scan", "bounce_ms")]:
            if r0:
                parts.append(svg_bars(w + ": " + r0[0]["label"], [(r["condition"], r["condition"], r["median"], r["min"], r["max"]) for r in r0], r0[0]["unit"]))
    heads = [r for r in rows if r["headline"] and r["condition"] != "plain" and "ratio" in r]
    rel = []
    for r in heads:
        sgn = 1 if r["better"] == HIGHER else -1
        # performance change in %: positive = faster than plain
        conv = (lambda x: (x - 1) * 100) if sgn > 0 else (lambda x: (1 / x - 1) * 100 if x else float("nan"))
        lo, hi = sorted([conv(r["ci_low"]), conv(r["ci_high"])])
        rel.append(("%s / %s" % (r["workload"], r["condition"]), r["condition"], conv(r["ratio"]), lo, hi))
    parts.append("<h2>Relative change against plain</h2><p>Performance change in % (positive: faster "
                 "than plain), whiskers: 95% bootstrap interval.</p>")
    parts.append(svg_diverging("performance change vs plain", rel, 0.0, " %"))
    parts.append("<h2>Performance index (plain = 100)</h2>")
    parts.append(svg_diverging("performance index", [("%s / %s" % (r["workload"], r["condition"]), r["condition"],
                                                      r.get("index", float("nan")), float("nan"), float("nan")) for r in heads], 100.0, ""))
    body = "\n".join(parts)
    md_html = md_to_html(md)
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>sqlite-tde benchmark report</title>"
            "<style>body{font-family:sans-serif;max-width:1200px;margin:1em auto;padding:0 1em}"
            "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px}"
            "td{text-align:right}td:first-child{text-align:left}svg{display:block;margin:6px 0}</style>"
            "</head><body>\n" + md_html.replace("<!--CHARTS-->", body) + "\n</body></html>\n")


def md_to_html(md):
    """Just enough Markdown for our own report: headings, tables, lists, paragraphs."""
    out, table = [], False
    for line in md.splitlines():
        esc = html.escape(line)
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if all(set(c) <= set("-:") for c in cells):
                continue
            if not table:
                out.append("<table>")
                table = True
                out.append("<tr>" + "".join("<th>%s</th>" % html.escape(c) for c in cells) + "</tr>")
            else:
                out.append("<tr>" + "".join("<td>%s</td>" % html.escape(c).replace("**", "") for c in cells) + "</tr>")
            continue
        if table:
            out.append("</table>")
            table = False
        if line.startswith("## "):
            if line[3:] == "Targets (issue 6)":
                out.append("<h2>Charts</h2><!--CHARTS-->")
            out.append("<h2>%s</h2>" % html.escape(line[3:]))
        elif line.startswith("# "):
            out.append("<h1>%s</h1>" % html.escape(line[2:]))
        elif line.startswith("- "):
            out.append("<li>%s</li>" % esc[2:].replace("**", ""))
        elif line.strip():
            out.append("<p>%s</p>" % esc.replace("`", ""))
    if table:
        out.append("</table>")
    return "\n".join(out)


def no_nan(x):
    """JSON has no NaN: undefined figures become null."""
    if isinstance(x, float) and x != x:
        return None
    if isinstance(x, dict):
        return {k: no_nan(v) for k, v in x.items()}
    if isinstance(x, list):
        return [no_nan(v) for v in x]
    return x


# ---- main ------------------------------------------------------------------------------------

def main(argv):
    try:
        return bench_main(argv)
    finally:
        for stop in SERVICES:
            stop()


def bench_main(argv):
    ap = argparse.ArgumentParser(prog="sqlite-tde bench",
                                 description="Benchmark sqlite-tde against plain SQLite and peers; "
                                             "writes report.md, report.html and results.json.")
    ap.add_argument("--out", default="bench-out", help="output folder (default bench-out)")
    ap.add_argument("--build", default=HERE, help="folder with sqlite-tde, sqlite-tde-bench[-sqlcipher]")
    ap.add_argument("--quick", action="store_true", help="smallest run (tests, demo): seconds 0.2, "
                    "2 repeats, 5,000 rows, 500 row-at-a-time rows, threads 1,2")
    ap.add_argument("--seconds", type=float, default=2.0, help="duration of each timed workload (default 2; 10 or 300 for a steadier figure)")
    ap.add_argument("--repeats", type=int, default=5, help="runs per condition and workload (default 5)")
    ap.add_argument("--seed", type=int, default=20261130, help="seed of data, workloads and run order")
    ap.add_argument("--rows", type=int, default=200000, help="rows of the scan/DML table t1 (default 200,000)")
    ap.add_argument("--scale", type=int, default=1, help="tpcb scale factor (100,000 accounts each)")
    ap.add_argument("--threads", default="1,2,4", help="tpcb thread counts (default 1,2,4)")
    ap.add_argument("--rat-rows", type=int, default=10000, help="row-at-a-time rows (default 10,000)")
    ap.add_argument("--journal", default="WAL", help="journal_mode (default WAL)")
    ap.add_argument("--synchronous", default="NORMAL", help="synchronous (default NORMAL)")
    ap.add_argument("--page-size", type=int, default=4096)
    ap.add_argument("--cache-size", type=int, default=-65536, help="PRAGMA cache_size (default -65536: 64 MiB, so that the tpcb data fits SQLite's cache as the targets assume)")
    ap.add_argument("--conditions", default=",".join(ALL_CONDITIONS),
                    help="comma-separated (default %s; also: %s)" % (",".join(ALL_CONDITIONS), ",".join(EXTRA_CONDITIONS)))
    ap.add_argument("--workloads", default=",".join(BASE_WORKLOADS))
    ap.add_argument("--pkcs11-config", help="use this existing pkcs11 tde configuration")
    ap.add_argument("--kmip-config", help="use this existing kmip tde configuration")
    opt = ap.parse_args(argv)
    if opt.quick:
        for k, v in (("seconds", 0.2), ("repeats", 2), ("rows", 5000), ("rat_rows", 500)):
            if getattr(opt, k) == ap.get_default(k):
                setattr(opt, k, v)
        if opt.threads == ap.get_default("threads"):
            opt.threads = "1,2"
    if opt.repeats < 1:
        ap.error("--repeats must be >= 1")
    opt.load_start = "%.2f %.2f %.2f" % os.getloadavg()
    opt.build = os.path.abspath(opt.build)
    opt.out = os.path.abspath(opt.out)
    os.makedirs(opt.out, exist_ok=True)
    work = os.path.join(opt.out, "work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    workloads = []
    for w in opt.workloads.split(","):
        if w in ("tpcb-select", "tpcb-rw"):
            workloads += ["%s-t%s" % (w, t) for t in opt.threads.split(",")]
        elif w in METRICS or base_of(w) in METRICS:
            workloads.append(w)
        else:
            ap.error("unknown workload %s" % w)
    names = opt.conditions.split(",")
    if "plain" not in names:
        names.insert(0, "plain")
    print("sqlite-tde bench: seed %d, %d repeats, %.3g s per workload, rows %d, scale %d, "
          "journal_mode=%s synchronous=%s page_size=%d cache_size=%d" % (
              opt.seed, opt.repeats, opt.seconds, opt.rows, opt.scale, opt.journal,
              opt.synchronous, opt.page_size, opt.cache_size), flush=True)
    conds = []
    for n in names:
        if n not in ALL_CONDITIONS + EXTRA_CONDITIONS:
            ap.error("unknown condition %s" % n)
        c = setup_condition(n, work, opt)
        print("  condition %-16s %s" % (n, ("SKIPPED: " + c.skip) if c.skip else c.label), flush=True)
        conds.append(c)
    live = [c for c in conds if not c.skip]
    # one data set per condition, same seed: identical logical content
    for c in live:
        c.dataset = os.path.join(work, c.name, "data.db")
        progress("building data set for %s" % c.name)
        try:
            call_driver(c, ["--op", "build", "--db", c.dataset] + common_args(opt), timeout=3600)
        except (RuntimeError, subprocess.SubprocessError, ValueError) as ex:
            c.skip = "data set build failed: %s" % ex
    live = [c for c in live if not c.skip]
    obs, failures = [], []
    total = opt.repeats * len(workloads) * len(live)
    rng = random.Random(opt.seed)
    k, t_start = 0, time.time()
    for rep in range(opt.repeats):
        for w in workloads:
            order = list(live)
            rng.shuffle(order)
            for pos, c in enumerate(order):
                k += 1
                eta = (time.time() - t_start) / max(k - 1, 1) * (total - k + 1) if k > 1 else 0
                progress("[%d/%d] repeat %d/%d  %-18s %-16s  eta %ds" % (
                    k, total, rep + 1, opt.repeats, w, c.name, eta))
                ob = {"repeat": rep + 1, "workload": w, "condition": c.name, "position": pos}
                try:
                    ob["result"] = run_one(c, w, opt, work)
                except (RuntimeError, subprocess.SubprocessError, ValueError, OSError) as ex:
                    ob["error"] = str(ex)
                    failures.append(ob)
                obs.append(ob)
    progress("done in %.0f s\n" % (time.time() - t_start))
    # checksums of deterministic workloads agree across every run and condition
    bad = []
    for w in workloads:
        if base_of(w) in DETERMINISTIC:
            sums = {o["result"].get("checksum") for o in obs if o["workload"] == w and "result" in o}
            if len(sums) > 1:
                bad.append(w)
    checks = ("all checksums verified in the driver; deterministic workloads (%s) agree across "
              "every run and condition" % ", ".join(sorted(DETERMINISTIC)) if not bad else
              "MISMATCH between conditions in %s" % ", ".join(bad))
    summary, vals = analyse(obs, live, workloads, opt)
    res = {
        "schema_version": SCHEMA_VERSION,
        "generated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "command": "sqlite-tde bench " + " ".join(argv),
        "options": {"seed": opt.seed, "repeats": opt.repeats, "seconds": opt.seconds,
                    "rows": opt.rows, "scale": opt.scale, "threads": opt.threads,
                    "rat_rows": opt.rat_rows, "journal": opt.journal, "synchronous": opt.synchronous,
                    "page_size": opt.page_size, "cache_size": opt.cache_size,
                    "workloads": workloads, "quick": opt.quick},
        "environment": environment(opt, conds),
        "conditions": [{"name": c.name, "label": c.label, "skipped": c.skip} for c in conds],
        "checksums": checks,
        "observations": obs,
        "failures": [{"repeat": f["repeat"], "workload": f["workload"], "condition": f["condition"],
                      "error": f["error"]} for f in failures],
        "summary": summary,
    }
    res["targets"] = targets(summary, vals, live, workloads, opt)
    res["limitations"] = limitations(res)
    md = md_report(res)
    with open(os.path.join(opt.out, "results.json"), "w") as f:
        json.dump(no_nan(res), f, indent=1, allow_nan=False)
    with open(os.path.join(opt.out, "report.md"), "w") as f:
        f.write(md)
    with open(os.path.join(opt.out, "report.html"), "w") as f:
        f.write(html_report(res, md))
    shutil.rmtree(work, ignore_errors=True)
    print("sqlite-tde bench: wrote %s/report.md, report.html, results.json" % opt.out)
    for t in res["targets"]:
        if t["status"] == "MISSED":
            print("  target missed: %s, %s, %s: %s" % (t["target"], t["condition"], t["workload"], t["figure"]))
    if failures or bad:
        print("sqlite-tde bench: %d runs failed%s" % (len(failures), ", checksum mismatch" if bad else ""),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
