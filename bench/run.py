#!/usr/bin/python3
"""sqlite-tde benchmark kit: orchestrator.

Installed next to the driver as sqlite-tde-bench.py; `sqlite-tde bench ARGS`
and `sqlite-tde-bench ARGS` run it.  It sets up every condition in a scratch
folder (keystores, the peers' passphrase), builds each condition's data set
once with the same seed in rollback mode (a copy converted for WAL), then
runs the workloads round robin: per repeat, journal mode and workload the
conditions run in an order shuffled with the printed seed, each run in a
fresh driver process on a fresh copy of its data set.  It computes the
statistics and the targets, writes results.json (every raw observation) and
has report.py (installed as sqlite_tde_bench_report.py) write report.md and
a self-contained report.html into the output folder.  On stdout: the
options, the headline table and one line counting the targets.

Standard library only (Debian's /usr/bin/python3).  It never reads or prints
key material: the wallet password and the sqlcipher passphrase are random,
written to 0600 files in the scratch folder, and handed over by file name.
"""
import argparse
import datetime
import glob
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

SCHEMA_VERSION = 2
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
try:
    import sqlite_tde_bench_report as report    # installed name, next to this file
except ImportError:
    import report                               # bench/report.py in the source tree

# workload -> list of (metric, label, unit, better); the first is the headline.
HIGHER, LOWER = "higher", "lower"
METRICS = {
    "insert": [("rows_per_s", "insert throughput", "rows/s", HIGHER),
               ("commit_ms_p50", "insert commit p50", "ms", LOWER),
               ("commit_ms_p99", "insert commit p99", "ms", LOWER)],
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
    "vacuum": [("vacuum_s", "VACUUM of the whole file", "s", LOWER)],
    "update-all": [("update_s", "one UPDATE of every row of t2", "s", LOWER)],
    "checkpoint": [("checkpoint_s", "wal_checkpoint(TRUNCATE) of an UPDATE of every row of t2", "s", LOWER),
                   ("mb_per_s", "checkpoint throughput (WAL frames copied)", "MB/s", HIGHER),
                   ("frames", "WAL frames checkpointed", "frames", LOWER)],
    "update-rows": [("rows_per_s", "single-row UPDATEs, a transaction each", "rows/s", HIGHER),
                    ("txn_ms_p50", "single-row UPDATE transaction p50", "ms", LOWER)],
    "delete-spill": [("rows_per_s", "single-row DELETEs in one transaction, cache spilled", "rows/s", HIGHER),
                     ("txn_s", "the delete-spill transaction", "s", LOWER)],
    "delete-rows": [("rows_per_s", "single-row DELETEs, a transaction each", "rows/s", HIGHER),
                    ("txn_ms_p50", "single-row DELETE transaction p50", "ms", LOWER)],
    "suite": [("suite_s", "broad SQL suite: total time of its tests", "s", LOWER)],
    "commit-latency": [("commit_normal_ms_p50", "single-row transaction p50, synchronous=NORMAL", "ms", LOWER),
                       ("commit_normal_ms_p99", "single-row transaction p99, synchronous=NORMAL", "ms", LOWER),
                       ("commit_full_ms_p50", "single-row transaction p50, synchronous=FULL", "ms", LOWER),
                       ("commit_full_ms_p99", "single-row transaction p99, synchronous=FULL", "ms", LOWER)],
}
# What each workload does, for --help and the report.
DESCRIPTIONS = {
    "insert": "500-row batches into t1, one commit per batch, for --seconds",
    "delete-replenish": "delete 1,000 consecutive rows of t1 and insert them again, per transaction",
    "cold-scan": "full scan of t1 on a new connection after dropping the OS cache",
    "warm-scan": "full scan of t1 on a new connection, OS cache warm",
    "bounce": "keystore close, open, key unwrap, first query, close",
    "row-at-a-time": "--rat-rows single-row inserts, then as many deletes by a non-indexed column",
    "tpcb-select": "pgbench select-only transactions, --threads threads",
    "tpcb-rw": "pgbench TPC-B-like read/write transactions, --threads threads",
    "vacuum": "VACUUM of the whole data set (about 50 MB at the default sizes)",
    "update-all": "one UPDATE of every row of t2 (--txn-rows rows, default 25,000)",
    "checkpoint": "WAL only: wal_checkpoint(TRUNCATE) after an untimed UPDATE of every row of t2",
    "update-rows": "single-row UPDATEs of t2 by key, each its own transaction, up to --txn-rows or --seconds",
    "delete-rows": "single-row DELETEs from t2 by key, each its own transaction, up to --txn-rows or --seconds",
    "delete-spill": "single-row DELETEs of half of t2 by key in ONE transaction, cache_size=100 (SQLite "
                    "spills pages and reads them back), then t2 read inside the transaction, COMMIT",
    "suite": "the broad SQL suite: 27 small tests over one data set of --suite-rows rows (inserts "
             "ordered, scattered and by text key, indexes, point and range queries, joins, updates and "
             "deletes by key and by range, one transaction larger than the cache, ANALYZE, VACUUM), "
             "each timed and checksummed, bytes written per test",
    "commit-latency": "WAL only: --lat-txns single-row INSERT transactions with synchronous=NORMAL, "
                      "then as many with synchronous=FULL: p50 and p99 of each",
}
# Per-run I/O of the timed part, per unit of work (see "I/O accounting" in
# bench.c): derived from the driver's counters by io_per_op().
IO_METRICS = [("wchar_per_op", "bytes written (wchar)", "B/op", LOWER),
              ("write_bytes_per_op", "bytes to storage (write_bytes)", "B/op", LOWER),
              ("pwrites_per_op", "pwrite calls", "1/op", LOWER),
              ("preads_per_op", "pread calls", "1/op", LOWER),
              ("journal_bytes_per_op", "rollback journal bytes written", "B/op", LOWER),
              ("wal_bytes_per_op", "WAL bytes written", "B/op", LOWER),
              ("map_bytes_per_op", "page map (DB-tdemap) bytes written", "B/op", LOWER)]
# The unit of work of each workload's io_ops.
OP_UNIT = {"insert": "row", "delete-replenish": "row", "cold-scan": "scan", "warm-scan": "scan",
           "bounce": "open", "row-at-a-time": "row", "tpcb-select": "txn", "tpcb-rw": "txn",
           "vacuum": "VACUUM", "update-all": "row", "checkpoint": "checkpoint", "update-rows": "row",
           "delete-rows": "row", "delete-spill": "row", "suite": "suite run", "commit-latency": "txn"}
BASE_WORKLOADS = ["insert", "delete-replenish", "cold-scan", "warm-scan", "bounce",
                  "row-at-a-time", "tpcb-select", "tpcb-rw", "vacuum", "update-all",
                  "checkpoint", "update-rows", "delete-rows", "delete-spill", "suite",
                  "commit-latency"]
# Workloads whose checksum must be the same in every run of every condition.
DETERMINISTIC = {"delete-replenish", "cold-scan", "warm-scan", "bounce", "row-at-a-time",
                 "vacuum", "update-all", "checkpoint", "delete-spill", "suite", "commit-latency"}
WRITE_WORKLOADS = {"insert", "delete-replenish", "row-at-a-time", "tpcb-rw", "vacuum",
                   "update-all", "checkpoint", "update-rows", "delete-rows", "delete-spill", "suite",
                   "commit-latency"}
# Workloads that exist in some journal modes only: not run elsewhere, listed
# in results.json (options.not_applicable) and shown as "-" in the reports.
# A checkpoint is a WAL operation (a rollback journal has none).
JOURNALS_OF = {"checkpoint": ("WAL",), "commit-latency": ("WAL",)}
ALL_CONDITIONS = ["plain", "wallet", "wallet-password", "pkcs11", "kmip", "sqlcipher",
                  "sqlcipher4", "sqlite3mc"]
PEER_CONDITIONS = ["sqlcipher", "sqlcipher4", "sqlite3mc"]
CONDITION_HELP = {
    "plain": "stock SQLite, unix VFS: the baseline",
    "wallet": "sqlite-tde, auto-login wallet",
    "wallet-password": "sqlite-tde, password wallet (password_file, default Argon2id cost)",
    "pkcs11": "sqlite-tde, PKCS#11 keystore on a SoftHSM token the kit creates",
    "kmip": "sqlite-tde, KMIP keystore on a PyKMIP server the kit starts (mutual TLS)",
    "sqlcipher": "old peer: Debian's SQLCipher 3.4.1 (SQLite 3.15.2)",
    "sqlcipher4": "current peer: SQLCipher 4 amalgamation, OpenSSL libcrypto",
    "sqlite3mc": "current peer: SQLite3 Multiple Ciphers amalgamation, its default cipher",
    "standby": "auto-login wallet with sqlite-tde ship to a standby on 127.0.0.1, mutual TLS and "
               "signed records (scripts/standby-certs.sh), async (WAL only)",
    "standby-sync": "the same in protection mode sync (ship --sync): each commit waits for the "
                    "standby's acknowledgement (WAL only)",
    "archive": "auto-login wallet with sqlite-tde archive to a local S3 server the kit starts "
               "(tests/lib/s3server.sh: Ceph's RADOS gateway on 127.0.0.1), signed objects, default "
               "segments; its cost and its upload bytes per transaction (WAL only)",
    "tpm2": "sqlite-tde, auto-login wallet sealed by a swtpm the kit starts (PCR 7 policy)",
    "command": "sqlite-tde, keystore = command with the openssl example helper",
    "wallet-v1": "sqlite-tde, auto-login wallet, databases in format version 1 (format_version = 1): "
                 "beside wallet, the cost of version 2's freshness checks",
    "wallet-anchor": "sqlite-tde, auto-login wallet with freshness_anchor = file:DIR (default interval "
                     "60 s): beside wallet, the cost of the external anchor",
}
# Journal modes: JOURNAL or JOURNAL+cached (cache_size large enough for the
# whole data set); DELETE, SQLite's default, first.
DEFAULT_MODES = "DELETE,WAL"
# Run only when named in --conditions: the auto-login wallet with a standby
# attached on 127.0.0.1 (sqlite-tde ship + standby over mutual TLS with
# signed records; standby-sync in protection mode sync), its lag sampled.
EXTRA_CONDITIONS = ["standby", "standby-sync", "archive", "tpm2", "command", "wallet-v1", "wallet-anchor"]
STANDBY_CONDITIONS = ["standby", "standby-sync"]
TDE_CONDITIONS = ["wallet", "wallet-password", "pkcs11", "kmip", "tpm2", "command", "wallet-v1",
                  "wallet-anchor"]
# Throughput workloads of the ">= 0.97" target (encryption overhead, WAL).
THROUGHPUT_TARGET = ["insert", "delete-replenish", "row-at-a-time", "tpcb-select", "tpcb-rw"]
BOUNCE_TARGET_MS = {"wallet": 2.0, "pkcs11": 10.0, "kmip": 50.0}


def applicable(workload, mode):
    """Whether workload runs in journal mode mode (JOURNALS_OF)."""
    return mode["journal"] in JOURNALS_OF.get(base_of(workload), (mode["journal"],))


def not_applicable(workloads, modes):
    """The (workload, mode) pairs that are not run, for results.json."""
    return [{"workload": w, "mode": m["name"],
             "reason": "%s only" % " or ".join(JOURNALS_OF[base_of(w)])}
            for m in modes for w in workloads if not applicable(w, m)]


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
        self.sync = False      # ... in protection mode sync (ship --sync)
        self.repl = None       # folder of the replication certificates and configurations
        self.archive = None    # archive: {"s3env", "sign_key", "s3_client"} once its S3 server runs
        self.wal_only = False  # runs in the WAL modes only (shipping needs WAL)

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


def source_tree(opt):
    """The source tree of this kit: the build folder's CMake cache names it;
    else the folder above bench/ when run from the source tree; or None."""
    try:
        with open(os.path.join(opt.build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("CMAKE_HOME_DIRECTORY:"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    up = os.path.dirname(HERE)
    return up if os.path.isfile(os.path.join(up, "bench", "run.py")) else None


def standby_certs(c, d, opt):
    """The replication set-up a user makes (README "Standby"): a throwaway
    CA, both certificates, the record-signing key, ship.conf and
    standby.conf, by scripts/standby-certs.sh in d/repl (standby host
    127.0.0.1, primary named "primary").  Sets c.skip when it cannot."""
    script = os.path.join(source_tree(opt) or "/nonexistent", "scripts", "standby-certs.sh")
    if not os.path.isfile(script):
        c.skip = "scripts/standby-certs.sh not found next to the build"
        return
    c.repl = os.path.join(d, "repl")
    p = subprocess.run(["sh", script, c.repl, "127.0.0.1", "primary"], capture_output=True, text=True,
                       timeout=120, env=env_without_preload())
    if p.returncode != 0:
        c.skip = "scripts/standby-certs.sh failed: %s" % (p.stdout + p.stderr).strip()[-300:]


def s3server(opt, action, folder):
    """tests/lib/s3server.sh start|stop FOLDER of this kit's source tree."""
    script = os.path.join(source_tree(opt) or "/nonexistent", "tests", "lib", "s3server.sh")
    p = subprocess.run(["bash", script, action, folder], capture_output=True, text=True, timeout=900,
                       env=env_without_preload())
    return p.returncode, (p.stdout + p.stderr).strip()


def archive_setup(c, d, opt):
    """The archive's bucket: a local S3 server (tests/lib/s3server.sh, Ceph's
    RADOS gateway on 127.0.0.1; stopped by main) and the Ed25519 key the
    archiver signs with.  Sets c.skip when it cannot."""
    missing = [t for t in ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin") if shutil.which(t) is None]
    script = os.path.join(source_tree(opt) or "/nonexistent", "tests", "lib", "s3server.sh")
    s3c = os.path.join(opt.build, "s3_client")
    cli = os.path.join(opt.build, "sqlite-tde")
    if missing:
        c.skip = "Ceph is not installed (%s missing): no local S3 server" % ", ".join(missing)
        return
    if not os.path.isfile(script):
        c.skip = "tests/lib/s3server.sh not found next to the build"
        return
    if not os.access(s3c, os.X_OK):
        c.skip = "s3_client (the tests' S3 tool, to count the bucket's bytes) not built"
        return
    p = subprocess.run([cli, "archive", "--help"], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        c.skip = "this sqlite-tde has no archive command (built without libcurl >= 7.85)"
        return
    folder = os.path.join(d, "s3")
    t0 = time.time()
    rc, out = s3server(opt, "start", folder)
    if os.path.isdir(os.path.join(folder, "run")):
        SERVICES.append(lambda: s3server(opt, "stop", folder))
    if rc != 0:
        c.skip = "tests/lib/s3server.sh start failed: %s" % out[-300:]
        return
    key = os.path.join(d, "archive-sign.key")
    p = subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", key], capture_output=True,
                       text=True, timeout=60, env=env_without_preload())
    if p.returncode != 0:
        c.skip = "openssl genpkey ed25519 failed: %s" % (p.stdout + p.stderr).strip()[-300:]
        return
    os.chmod(key, 0o600)
    c.archive = {"s3env": os.path.join(folder, "s3.env"), "sign_key": key, "s3_client": s3c, "runs": 0,
                 "server_start_s": round(time.time() - t0, 1)}


def setup_condition(name, work, opt):
    c = Condition(name)
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    cli = os.path.join(opt.build, "sqlite-tde")
    c.driver = os.path.join(opt.build, "sqlite-tde-bench")
    if name == "plain":
        c.label = "plain (stock unix VFS)"
        return c
    if name in PEER_CONDITIONS:
        c.driver = os.path.join(opt.build, "sqlite-tde-bench-" + name)
        if not os.access(c.driver, os.X_OK):
            c.skip = "%s not built (%s; re-run cmake)" % (
                os.path.basename(c.driver),
                "install libsqlcipher-dev" if name == "sqlcipher" else
                "scripts/deps.sh caches its amalgamation in TDE_NPM_DIR")
            return c
        c.keyfile = os.path.join(d, "passphrase")
        write_private(c.keyfile, secrets.token_hex(32) + "\n")
        try:
            v = json.loads(subprocess.run([c.driver, "driver", "--op", "versions"],
                                          capture_output=True, text=True, timeout=60).stdout)
        except (ValueError, subprocess.SubprocessError) as ex:
            c.skip = "%s driver does not run: %s" % (name, ex)
            return c
        c.versions = v
        if name == "sqlite3mc":
            c.label = "%s on SQLite %s, cipher %s (its default), PRAGMA key" % (
                v.get("sqlite3mc", "?"), v.get("sqlite", "?"), v.get("cipher", "?"))
        else:
            c.label = "SQLCipher %s on SQLite %s%s, its defaults, PRAGMA key" % (
                v.get("sqlcipher", "?"), v.get("sqlite", "?"),
                ", crypto %s %s" % (v.get("crypto_provider", ""), v["crypto"]) if v.get("crypto") else "")
            if name == "sqlcipher":
                c.label = "old peer (a decade old): " + c.label
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
    if name in ["wallet", "archive"] + STANDBY_CONDITIONS:
        # pinned to 2 until r8-standby (standby on format 3) lands: the
        # shipper and the archiver refuse a format-3 database
        write_private(c.config, "keystore = wallet\nwallet = wallet.tdew\n"
                      + ("format_version = 2\n" if name != "wallet" else ""))
        rc, out = run_cli(cli, c.config, ["keystore", "create", "--auto-login"])
        c.label = "wallet (auto-login)"
        if name == "archive":
            c.wal_only = True
            c.label = ("archive (auto-login wallet; sqlite-tde archive to a local S3 server, Ceph's RADOS "
                       "gateway on 127.0.0.1 over TLS (tests/lib/s3server.sh); Ed25519-signed base copy "
                       "and segments, default segment bounds (1000 transactions, 16 MiB, 10 s); 50 ms "
                       "capture cycles; WAL modes only)")
            if not any(m["journal"] == "WAL" for m in opt.modes):
                c.skip = "the archive needs journal_mode WAL (--journal %s)" % opt.journal
            elif rc == 0:
                archive_setup(c, d, opt)
        if name in STANDBY_CONDITIONS:
            # Shipping needs WAL: the conditions run in the WAL modes only.
            c.standby = True
            c.wal_only = True
            c.sync = name == "standby-sync"
            c.label = ("%s (auto-login wallet; sqlite-tde ship to a standby on 127.0.0.1 over mutual "
                       "TLS, Ed25519-signed record chain, certificates by scripts/standby-certs.sh; "
                       "%s; 50 ms cycles; WAL modes only)" % (
                           name, "protection mode sync (ship --sync): a commit returns once the "
                           "standby acknowledged it, default repl_sync_timeout_ms" if c.sync else
                           "protection mode async (the default)"))
            if not any(m["journal"] == "WAL" for m in opt.modes):
                c.skip = "shipping needs journal_mode WAL (--journal %s)" % opt.journal
            else:
                standby_certs(c, d, opt)
    elif name == "wallet-v1":
        write_private(c.config, "keystore = wallet\nwallet = wallet.tdew\nformat_version = 1\n")
        rc, out = run_cli(cli, c.config, ["keystore", "create", "--auto-login"])
        c.label = "wallet-v1 (auto-login; format version 1: no freshness checks)"
    elif name == "wallet-anchor":
        adir = os.path.join(d, "anchors")
        os.makedirs(adir, mode=0o700, exist_ok=True)
        os.chmod(adir, 0o700)
        write_private(c.config, "keystore = wallet\nwallet = wallet.tdew\nfreshness_anchor = file:%s\n" % adir)
        rc, out = run_cli(cli, c.config, ["keystore", "create", "--auto-login"])
        c.label = "wallet-anchor (auto-login; freshness_anchor = file:DIR, interval 60 s)"
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
        src = source_tree(opt)
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

def common_args(opt, mode):
    return ["--seed", str(opt.seed), "--rows", str(opt.rows), "--scale", str(opt.scale),
            "--journal", mode["journal"], "--synchronous", opt.synchronous,
            "--page-size", str(opt.page_size), "--cache-size", str(mode_cache(opt, mode)),
            "--rat-rows", str(opt.rat_rows), "--txn-rows", str(opt.txn_rows),
            "--suite-rows", str(opt.suite_rows), "--lat-txns", str(opt.lat_txns)] + \
        (["--min-obs", "2"] if opt.quick else [])


def parse_modes(spec):
    """"DELETE,WAL,DELETE+cached" -> [{"name", "journal", "cached"}]."""
    out = []
    for m in spec.split(","):
        j, _, extra = m.strip().partition("+")
        j = j.upper()
        if j not in ("DELETE", "WAL", "TRUNCATE", "PERSIST") or extra not in ("", "cached"):
            raise ValueError("journal mode %r: use DELETE, WAL, TRUNCATE or PERSIST, optionally "
                             "with +cached" % m)
        out.append({"name": j + ("+cached" if extra else ""), "journal": j, "cached": bool(extra)})
    return out


def mode_cache(opt, mode):
    """cache_size of a mode: --cache-size, or large enough for the whole data set."""
    return opt.cache_all if mode["cached"] else opt.cache_size


def call_driver(c, args, timeout):
    e = dict(os.environ)
    e.update(c.env)
    p = subprocess.run([c.driver, "driver"] + args + c.driver_args(), capture_output=True,
                       text=True, env=e, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError((p.stderr or p.stdout).strip()[-500:] or "exit %d" % p.returncode)
    return json.loads(p.stdout.strip().splitlines()[-1])


def remove_db(path):
    for s in ("", "-wal", "-shm", "-journal", "-tdemap"):
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
    # As a user sets it up (README "Standby"): mutual TLS and signed
    # records, the configurations standby-certs.sh wrote; the standby names
    # its primary by the pin of the primary's TLS key.
    procs = [subprocess.Popen([cli, "standby", "--listen", "127.0.0.1:%d" % port, "--repl-config",
                               os.path.join(c.repl, "standby.conf"), os.path.join(d, "s.db")],
                              stdout=subprocess.DEVNULL, stderr=log, env=env_without_preload())]
    time.sleep(0.2)
    procs.append(subprocess.Popen([cli, "--config", c.config, "ship", "--cycle-ms", "50", "--to",
                                   "127.0.0.1:%d" % port, "--repl-config", os.path.join(c.repl, "ship.conf")]
                                  + (["--sync"] if c.sync else []) + [run_db], stdout=subprocess.DEVNULL,
                                  stderr=log, env=env_without_preload()))
    log.close()
    t0 = time.time()
    while time.time() - t0 < 300:
        lag = ship_lag(run_db)
        if lag is not None and lag[0] == 0 and read_state(os.path.join(d, "s.db-tdestandby")) \
                and standby_ready(c, run_db, procs[1].pid):
            return procs, d
        if any(p.poll() is not None for p in procs):
            break
        time.sleep(0.1)
    standby_stop(procs)
    raise RuntimeError("the standby did not take its base copy: %s" % open(os.path.join(d, "log")).read()[-300:])


def standby_ready(c, run_db, pid):
    """This shipper streams over TLS in the condition's mode; in sync mode
    its DB-tdeship-sync (docs/FORMAT.md) is in place, so the first commit
    of the run already waits."""
    st = read_state(run_db + "-tdeship-state")
    if st.get("pid") != str(pid) or st.get("peer0_state") != "streaming" or st.get("transport") != "tls":
        return False
    if not c.sync:
        return st.get("mode") == "async"
    try:
        with open(run_db + "-tdeship-sync", "rb") as f:
            sy = f.read(40)
    except OSError:
        return False
    return st.get("mode") == "sync" and st.get("sync_state") == "ok" and len(sy) >= 20 \
        and int.from_bytes(sy[16:20], "big") == pid


def sync_degraded(run_db):
    """How often the shipper fell back to async (repl_sync_degraded lines of
    its audit log DB-tdeship-audit)."""
    try:
        with open(run_db + "-tdeship-audit") as f:
            return sum(1 for line in f if "repl_sync_degraded" in line)
    except OSError:
        return 0


def standby_stop(procs):
    for p in reversed(procs):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


# The files of a closed database (docs/FORMAT.md): the database and, for
# sqlite-tde in WAL mode, its page map DB-tdemap, which the header names: a
# copy without it is refused ("DB-tdemap does not match the database header").
DB_FILE_SET = ("", "-tdemap")


def copy_db(src, dst):
    """Copy a closed database's file set; returns the files written."""
    out = []
    for s in DB_FILE_SET:
        if os.path.exists(src + s):
            shutil.copyfile(src + s, dst + s)
            out.append(dst + s)
        elif s:
            try:
                os.unlink(dst + s)
            except FileNotFoundError:
                pass
    return out


def copy_synced(src, dst):
    """Copy the data set and fsync the copy before the run: otherwise the
    first fsync of the database inside the timed part writes the whole
    copy out, and which condition pays for it depends on when each one
    first syncs the database (WAL mode: plain SQLite at its first
    checkpoint, sqlite-tde at the first WAL restart's header update)."""
    for f in copy_db(src, dst):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def run_one(c, workload, mode, opt, work):
    run_db = os.path.join(work, c.name, "run.db")
    remove_db(run_db)
    copy_synced(c.datasets[mode["journal"]], run_db)
    if c.name == "wallet-anchor":
        # Every run starts from a copy of one data set: to the anchor that
        # is a restore of an older file, which it refuses until re-anchored
        # (outside the timed part, as an operator would after a restore).
        rc, out = run_cli(os.path.join(opt.build, "sqlite-tde"), c.config, ["reanchor", run_db])
        if rc != 0:
            raise RuntimeError("sqlite-tde reanchor failed: %s" % out[-300:])
    if c.standby:
        return run_one_standby(c, workload, mode, opt, work, run_db)
    if c.archive:
        return run_one_archive(c, workload, mode, opt, work, run_db)
    return run_one_driver(c, workload, mode, opt, work, run_db)


def run_one_standby(c, workload, mode, opt, work, run_db):
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
        r = run_one_driver(c, workload, mode, opt, work, run_db, keep=True)
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
        r["standby_transport"] = st.get("transport")
        r["standby_mode"] = st.get("mode")
        r["standby_sync_degraded"] = sync_degraded(run_db)
        if caught is None:
            raise RuntimeError("the standby did not catch up within 120 s (lag %s)" % (ship_lag(run_db),))
        if r["standby_transport"] != "tls" or r["standby_mode"] != ("sync" if c.sync else "async"):
            raise RuntimeError("the shipper ran transport %s, mode %s" % (r["standby_transport"], r["standby_mode"]))
        if r["standby_sync_degraded"]:
            # Some commits returned after the timeout without an
            # acknowledgement: these are not sync figures.
            raise RuntimeError("sync mode degraded to async %d times during the run (no acknowledgement "
                               "within repl_sync_timeout_ms)" % r["standby_sync_degraded"])
        return r
    finally:
        stop.append(1)
        standby_stop(procs)
        shutil.rmtree(d, ignore_errors=True)
        remove_db(run_db)
        for f in glob.glob(glob.escape(run_db) + "-tdeship*"):
            try:
                os.unlink(f)
            except FileNotFoundError:
                pass


def archive_objects(c, prefix):
    """(segment bytes, segments, base bytes, bases) under prefix in the bucket."""
    env = env_without_preload()
    s3 = dict(l.rstrip("\n").split("=", 1) for l in open(c.archive["s3env"]) if "=" in l)
    for k in ("S3_ENDPOINT", "S3_REGION", "S3_BUCKET", "S3_CA_FILE"):
        env[k] = s3[k]
    p = subprocess.run([c.archive["s3_client"], "--cred", c.archive["s3env"], "list", prefix + "/"],
                       capture_output=True, text=True, timeout=300, env=env)
    if p.returncode != 0:
        raise RuntimeError("s3_client list %s: %s" % (prefix, (p.stdout + p.stderr).strip()[-300:]))
    seg = [0, 0]
    base = [0, 0]
    for line in p.stdout.splitlines():
        w = line.split()
        if len(w) == 2 and w[0].endswith(".seg"):
            seg[0] += int(w[1])
            seg[1] += 1
        elif len(w) == 2 and w[0].endswith(".base"):
            base[0] += int(w[1])
            base[1] += 1
    return seg[0], seg[1], base[0], base[1]


def run_one_archive(c, workload, mode, opt, work, run_db):
    """The driver run with sqlite-tde archive attached (a folder of the
    bucket per run): lag sampled every 50 ms, the time until the bucket held
    every transaction, and the bucket's bytes per archived transaction
    against the WAL bytes the driver wrote."""
    c.archive["runs"] += 1
    prefix = "bench/%d" % c.archive["runs"]
    d = os.path.join(work, c.name, "archiver")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    cli = os.path.join(opt.build, "sqlite-tde")
    log = open(os.path.join(d, "log"), "a")
    proc = subprocess.Popen([cli, "--config", c.config, "archive", "--s3", c.archive["s3env"], "--sign-key",
                             c.archive["sign_key"], "--prefix", prefix, "--cycle-ms", "50", run_db],
                            stdout=subprocess.DEVNULL, stderr=log, env=env_without_preload())
    log.close()
    samples, stop = [], []
    try:
        t0 = time.time()
        while True:
            st = read_state(run_db + "-tdeship-state")
            lag = ship_lag(run_db)
            if st.get("pid") == str(proc.pid) and st.get("peer0_kind") == "archive" and lag is not None \
                    and lag[0] == 0 and int(st.get("peer0_acked_seq", "0")) > 0:
                break
            if proc.poll() is not None or time.time() - t0 > 300:
                raise RuntimeError("the archiver did not upload its base copy: %s"
                                   % open(os.path.join(d, "log")).read()[-300:])
            time.sleep(0.1)
        seq0 = int(st["captured_seq"])

        def sample():
            while not stop:
                lag = ship_lag(run_db)
                if lag is not None:
                    samples.append(lag)
                time.sleep(0.05)
        import threading
        th = threading.Thread(target=sample, daemon=True)
        th.start()
        r = run_one_driver(c, workload, mode, opt, work, run_db, keep=True)
        t_end = time.time()
        stop.append(1)
        th.join()
        end = samples[-1] if samples else (ship_lag(run_db) or (0, 0, 0.0))
        # Caught up: a state written after the run (so after its last
        # capture) that shows nothing left to upload.
        caught = None
        while time.time() - t_end < 120:
            st = read_state(run_db + "-tdeship-state")
            lag = ship_lag(run_db)
            if lag is not None and lag[0] == 0 and int(st.get("updated_ms", "0")) > (t_end + 0.3) * 1000:
                caught = time.time() - t_end
                break
            time.sleep(0.05)
        if caught is None:
            raise RuntimeError("the archive did not catch up within 120 s (lag %s)" % (ship_lag(run_db),))
        txns = int(st["captured_seq"]) - seq0
        standby_stop([proc])
        seg_bytes, nseg, base_bytes, nbase = archive_objects(c, prefix)
        r["archive_lag_txn_max"] = max([x[0] for x in samples] or [0])
        r["archive_lag_bytes_max"] = max([x[1] for x in samples] or [0])
        r["archive_lag_s_max"] = round(max([x[2] for x in samples] or [0.0]), 3)
        r["archive_lag_txn_end"], r["archive_lag_bytes_end"], r["archive_lag_s_end"] = end[0], end[1], round(end[2], 3)
        r["archive_catchup_s"] = round(caught, 3)
        r["archive_txns"] = txns
        r["archive_segments"], r["archive_segment_bytes"] = nseg, seg_bytes
        r["archive_bases"], r["archive_base_bytes"] = nbase, base_bytes
        r["archive_upload_bytes_per_txn"] = round(seg_bytes / txns, 1) if txns else None
        wal = r.get("vfs_wal_write_bytes")
        r["archive_wal_bytes_per_txn"] = round(wal / txns, 1) if txns and wal is not None else None
        r["ship_lock_ms_avg"] = float(st.get("capture_lock_ms_avg", "nan"))
        r["ship_lock_ms_max"] = float(st.get("capture_lock_ms_max", "nan"))
        if txns <= 0 or nseg == 0:
            raise RuntimeError("the archive holds no segment of the run (%d transactions captured)" % txns)
        return r
    finally:
        stop.append(1)
        standby_stop([proc])
        shutil.rmtree(d, ignore_errors=True)
        remove_db(run_db)
        for f in glob.glob(glob.escape(run_db) + "-tdeship*"):
            try:
                os.unlink(f)
            except FileNotFoundError:
                pass


def run_one_driver(c, workload, mode, opt, work, run_db, keep=False):
    args = ["--op", "run", "--db", run_db, "--seconds", str(opt.seconds)] + common_args(opt, mode)
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


def bootstrap(xs, ys, rng, f, n=2000):
    """95% interval of f(median(xs), median(ys)), resampling runs with replacement."""
    if not xs or not ys:
        return (float("nan"), float("nan"))
    rs = []
    for _ in range(n):
        a = statistics.median([xs[rng.randrange(len(xs))] for _ in xs])
        b = statistics.median([ys[rng.randrange(len(ys))] for _ in ys])
        v = f(a, b)
        if v == v:
            rs.append(v)
    if not rs:
        return (float("nan"), float("nan"))
    rs.sort()
    return (rs[int(0.025 * (len(rs) - 1))], rs[int(0.975 * (len(rs) - 1))])


def ratio_of(a, b):
    return a / b if b else float("nan")


def bootstrap_ratio(xs, ys, rng, n=2000):
    """95% CI of median(xs)/median(ys)."""
    return bootstrap(xs, ys, rng, ratio_of, n)


# An interval counts as "narrow enough" to call a difference absent when it
# lies within +-5 % of no change; anything wider that still includes 1 is
# undecided.
NARROW = 0.05


def verdict(ratio, lo, hi, better, n):
    """Verdict of a ratio condition/plain with its 95% interval.

    "penalty X %" / "faster X %" when the interval excludes no change, X
    always in terms of speed (a time 2x plain's is a 50 % penalty, as a
    throughput of 0.5x is), so that it reads with the speed figures;
    "no measurable penalty" only when it includes no change and lies within
    +-5 % of it; otherwise "undecided".  Under 3 runs per side there is no
    real interval: always undecided."""
    if ratio != ratio or lo != lo or hi != hi:
        return "n/a"
    if n < 3:
        return "undecided"
    good_lo, good_hi = (lo, hi) if better == HIGHER else (1 / hi if hi else float("inf"),
                                                          1 / lo if lo else float("inf"))
    speed = ratio if better == HIGHER else (1 / ratio if ratio else float("inf"))
    pct = (1 - speed) * 100
    if good_hi < 1.0:
        return "penalty %.0f %%" % pct
    if good_lo > 1.0:
        return "faster %.0f %%" % -pct
    if lo >= 1 - NARROW and hi <= 1 + NARROW:
        return "no measurable penalty"
    return "undecided"


def io_per_op(r):
    """The per-unit-of-work I/O figures of one run (IO_METRICS)."""
    ops = r.get("io_ops") or 0
    if ops <= 0:
        return {}
    out = {}
    if r.get("io_wchar", -1) >= 0:
        out["wchar_per_op"] = r["io_wchar"] / ops
        out["write_bytes_per_op"] = r["io_write_bytes"] / ops
    if "vfs_writes" in r:
        out["pwrites_per_op"] = r["vfs_writes"] / ops
        out["preads_per_op"] = r["vfs_reads"] / ops
        out["journal_bytes_per_op"] = r["vfs_journal_write_bytes"] / ops
        out["wal_bytes_per_op"] = r["vfs_wal_write_bytes"] / ops
    if "vfs_map_write_bytes" in r:
        out["map_bytes_per_op"] = r["vfs_map_write_bytes"] / ops
    return out


def metrics_of(workload):
    return METRICS[base_of(workload)] + IO_METRICS


def analyse(obs, conds, workloads, modes, opt):
    """Summary rows: per workload, mode, metric and condition."""
    rng = random.Random(opt.seed ^ 0xB007)
    vals = {}
    for o in obs:
        if "error" in o:
            continue
        res = dict(o["result"])
        res.update(io_per_op(res))
        k = (o["workload"], o["mode"])
        for m, _, _, _ in metrics_of(o["workload"]):
            if m in res:
                vals.setdefault(k + (m, o["condition"]), []).append(res[m])
        vals.setdefault(k + ("maxrss_kib", o["condition"]), []).append(res.get("maxrss_kib", 0))
        if res.get("shared_clean_kib", -1) >= 0:
            vals.setdefault(k + ("shared_clean_kib", o["condition"]), []).append(res["shared_clean_kib"])
    rows = []
    for mode in modes:
        for w in workloads:
            for m, label, unit, better in metrics_of(w):
                base = vals.get((w, mode["name"], m, "plain"), [])
                for c in conds:
                    xs = vals.get((w, mode["name"], m, c.name), [])
                    if not xs:
                        continue
                    r = {"workload": w, "mode": mode["name"], "journal": mode["journal"],
                         "cached": mode["cached"], "metric": m, "label": label, "unit": unit,
                         "better": better, "condition": c.name, "n": len(xs), "median": median(xs),
                         "min": min(xs), "max": max(xs),
                         "headline": m == METRICS[base_of(w)][0][0], "io": m in dict((x[0], 1) for x in IO_METRICS)}
                    if c.name != "plain" and base:
                        r["ratio"] = ratio_of(median(xs), median(base))
                        r["ci_low"], r["ci_high"] = bootstrap_ratio(xs, base, rng)
                        r["diff"] = median(xs) - median(base)
                        # the difference's interval serves time figures (bounce); the I/O
                        # figures are judged on ratios only
                        r["diff_low"], r["diff_high"] = (float("nan"), float("nan")) if r["io"] else \
                            bootstrap(xs, base, rng, lambda a, b: a - b)
                        r["verdict"] = verdict(r["ratio"], r["ci_low"], r["ci_high"], better,
                                               min(len(xs), len(base)))
                        r["index"] = 100 * (r["ratio"] if better == HIGHER else
                                            (1 / r["ratio"] if r["ratio"] else float("nan")))
                    elif c.name == "plain":
                        r.update({"ratio": 1.0, "ci_low": 1.0, "ci_high": 1.0, "diff": 0.0,
                                  "diff_low": 0.0, "diff_high": 0.0, "verdict": "baseline",
                                  "index": 100.0})
                    rows.append(r)
    return rows, vals


def judge(lo, hi, limit, better):
    """met / missed / undecided: a target is met when the whole 95% interval
    meets it, missed when the whole interval misses it."""
    if lo != lo or hi != hi:
        return None
    if better == HIGHER:
        return "met" if lo >= limit else ("missed" if hi < limit else "undecided")
    return "met" if hi <= limit else ("missed" if lo > limit else "undecided")


def targets(rows, vals, conds, workloads, modes, opt):
    """Every target, per condition and mode: met / missed / undecided / not measured."""
    rng = random.Random(opt.seed ^ 0x7A6E7)
    by = {(r["workload"], r["mode"], r["metric"], r["condition"]): r for r in rows}
    names = [c.name for c in conds if not c.skip]
    mnames = [m["name"] for m in modes]
    out = []

    def jd(lo, hi, limit, better):
        # under 3 runs per side the bootstrap interval is no real interval
        return "undecided" if opt.repeats < 3 and lo == lo else judge(lo, hi, limit, better)

    def add(group, target, cond, w, mode, figure, status):
        out.append({"group": group, "target": target, "condition": cond, "workload": w,
                    "mode": mode, "figure": figure, "status": status or "not measured"})

    def ci(r):
        return "%.2f [%.2f, %.2f]" % (r["ratio"], r["ci_low"], r["ci_high"])

    # 1. Rollback journal at plain SQLite's cost (wallet; the journal format
    #    does not depend on where the key is kept).
    G1 = "rollback journal at plain cost"
    if "wallet" in names:
        for mode in [m for m in modes if m["journal"] == "DELETE" and not m["cached"]]:
            for w in workloads:
                b = base_of(w)
                m, _, _, better = METRICS[b][0]
                r = by.get((w, mode["name"], m, "wallet"))
                if not r or b == "bounce":
                    continue
                if b in ("vacuum", "update-all"):
                    add(G1, "time ratio <= 1.30", "wallet", w, mode["name"], ci(r),
                        jd(r["ci_low"], r["ci_high"], 1.30, LOWER))
                elif better == HIGHER:
                    add(G1, "throughput ratio >= 0.90", "wallet", w, mode["name"], ci(r),
                        jd(r["ci_low"], r["ci_high"], 0.90, HIGHER))
                else:
                    add(G1, "throughput ratio >= 0.90 (time ratio <= 1.11)", "wallet", w,
                        mode["name"], ci(r), jd(r["ci_low"], r["ci_high"], 1 / 0.90, LOWER))
        for mode in [m for m in modes if not m["cached"]]:
            for w in workloads:
                r = by.get((w, mode["name"], "wchar_per_op", "wallet"))
                p = by.get((w, mode["name"], "wchar_per_op", "plain"))
                if r and p and p["median"] > 0:
                    add(G1, "bytes written <= 1.05x plain", "wallet", w, mode["name"], ci(r),
                        jd(r["ci_low"], r["ci_high"], 1.05, LOWER))
                r = by.get((w, mode["name"], "journal_bytes_per_op", "wallet"))
                p = by.get((w, mode["name"], "journal_bytes_per_op", "plain"))
                if mode["journal"] == "DELETE" and r and p and p["median"] > 0:
                    lo, hi = r["ci_low"], r["ci_high"]
                    st = ("undecided" if opt.repeats < 3 else "met" if lo >= 0.99 and hi <= 1.01 else
                          "missed" if lo > 1.01 or hi < 0.99 else "undecided")
                    add(G1, "journal bytes equal to plain's (within 1 %)", "wallet", w,
                        mode["name"], ci(r), st)
        if not any(m["journal"] == "DELETE" and m["cached"] for m in modes):
            add(G1, "everything cached: ahead of SQLCipher 4", "wallet", "write workloads",
                "DELETE+cached", "not run (add --cached)", None)
        if "sqlcipher4" in names:
            for mode in [m for m in modes if m["journal"] == "DELETE" and m["cached"]]:
                for w in workloads:
                    if base_of(w) not in WRITE_WORKLOADS:
                        continue
                    m, _, unit, better = METRICS[base_of(w)][0]
                    xs = vals.get((w, mode["name"], m, "wallet"))
                    ys = vals.get((w, mode["name"], m, "sqlcipher4"))
                    if xs and ys:
                        lo, hi = bootstrap_ratio(xs, ys, rng)
                        rr = ratio_of(median(xs), median(ys))
                        add(G1, "everything cached: ahead of SQLCipher 4", "wallet", w,
                            mode["name"], "%.2f [%.2f, %.2f] (wallet / sqlcipher4, %s)" % (
                                rr, lo, hi, unit), jd(lo, hi, 1.0, better))
    # 2. Encryption overhead targets, set for WAL mode, per keystore.
    G2 = "encryption overhead (WAL)"
    wal = [m for m in modes if m["journal"] == "WAL" and not m["cached"]]
    for mode in wal:
        mn = mode["name"]
        for cn in [n for n in TDE_CONDITIONS if n in names]:
            for w in workloads:
                b = base_of(w)
                if b in THROUGHPUT_TARGET:
                    r = by.get((w, mn, METRICS[b][0][0], cn))
                    if r and "ratio" in r:
                        add(G2, "throughput ratio >= 0.97", cn, w, mn, ci(r),
                            jd(r["ci_low"], r["ci_high"], 0.97, HIGHER))
                for m in ("commit_ms_p50", "lat_ms_p50"):
                    r = by.get((w, mn, m, cn))
                    if b in ("insert", "delete-replenish", "tpcb-rw") and r:
                        add(G2, "commit latency p50 ratio <= 1.03", cn, w, mn, ci(r),
                            jd(r["ci_low"], r["ci_high"], 1.03, LOWER))
                for wl, lim in (("cold-scan", 1.10), ("warm-scan", 1.30)):
                    r = by.get((w, mn, "s_per_scan", cn))
                    if w == wl and r:
                        add(G2, "%s time ratio <= %.2f" % (wl, lim), cn, w, mn, ci(r),
                            jd(r["ci_low"], r["ci_high"], lim, LOWER))
            r = by.get(("bounce", mn, "bounce_ms", cn))
            if r and "diff" in r:
                lim = BOUNCE_TARGET_MS.get(cn)
                add(G2, ("bounce adds <= %g ms" % lim) if lim is not None else
                    ("bounce: no target (password KDF by design)" if cn == "wallet-password"
                     else "bounce: no target set"), cn, "bounce", mn,
                    "%+.2f ms [%+.2f, %+.2f]" % (r["diff"], r["diff_low"], r["diff_high"]),
                    None if lim is None else jd(r["diff_low"], r["diff_high"], lim, LOWER))
            worst, worst_w, worst_sh = None, None, None
            for w in workloads:
                a, p = vals.get((w, mn, "maxrss_kib", cn)), vals.get((w, mn, "maxrss_kib", "plain"))
                if a and p:
                    d = median(a) - median(p)
                    if worst is None or d > worst:
                        worst, worst_w = d, w
                        sa = vals.get((w, mn, "shared_clean_kib", cn))
                        sp = vals.get((w, mn, "shared_clean_kib", "plain"))
                        worst_sh = median(sa) - median(sp) if sa and sp else None
            if worst is not None:
                # Judged on the peak RSS as measured (the figure is exact, no
                # interval); the share that is library code mapped read-only
                # is shown, not subtracted.
                add(G2, "peak RSS within 2 MiB of plain", cn, worst_w, mn,
                    "%+.0f KiB (worst workload)%s" % (
                        worst, "" if worst_sh is None else
                        "; shared clean pages (library code) %+.0f KiB" % worst_sh),
                    "met" if worst <= 2048 else "missed")
        if "wallet" in names:
            for cn in [n for n in ("wallet-password", "pkcs11", "kmip") if n in names]:
                for w in workloads:
                    b = base_of(w)
                    if b not in THROUGHPUT_TARGET:
                        continue
                    m = METRICS[b][0][0]
                    xs, ys = vals.get((w, mn, m, cn)), vals.get((w, mn, m, "wallet"))
                    if xs and ys:
                        lo, hi = bootstrap_ratio(xs, ys, rng)
                        st = ("undecided" if min(len(xs), len(ys)) < 3 else
                              "met" if lo <= 1.0 <= hi else "missed")
                        add(G2, "keystore location: no difference beyond noise (vs wallet)", cn, w,
                            mn, "%.2f [%.2f, %.2f]" % (ratio_of(median(xs), median(ys)), lo, hi), st)
        for peer in [p for p in ("sqlcipher4",) if p in names]:
            for cn in [n for n in ("wallet",) if n in names]:
                for w in workloads:
                    m, _, unit, better = METRICS[base_of(w)][0]
                    xs, ys = vals.get((w, mn, m, cn)), vals.get((w, mn, m, peer))
                    if xs and ys:
                        lo, hi = bootstrap_ratio(xs, ys, rng)
                        add(G2, "faster than %s" % peer, cn, w, mn, "%.3g [%.3g, %.3g] (%s / %s, %s)" % (
                            ratio_of(median(xs), median(ys)), lo, hi, cn, peer, unit),
                            jd(lo, hi, 1.0, better))
    if opt.baseline:
        out += baseline_targets(rows, opt, wal)
    elif wal:
        add("encryption overhead (WAL)", "nothing slower in WAL mode than the baseline run", "wallet",
            "all", wal[0]["name"], "no --baseline results.json given", None)
    return out


# ---- the broad SQL suite -----------------------------------------------------------

def suite_mismatches(obs):
    """Suite test ids whose checksum is not the same in every run of every
    condition and journal mode (each test's result depends on the seed and
    --suite-rows only)."""
    sums = {}
    for o in obs:
        if o["workload"] == "suite" and "result" in o:
            for t in o["result"].get("tests", []):
                sums.setdefault(t["id"], set()).add(t["checksum"])
    return sorted(t for t, v in sums.items() if len(v) > 1)


def suite_analysis(obs, conds, modes):
    """Per suite test, mode and condition: median time, the median of the
    per-repeat ratios to plain (runs of one repeat are interleaved, so a
    ratio within a repeat pairs runs made under the same load), median
    bytes written and their ratio to plain; per condition and mode the
    five tests with the worst time ratio.  None when the suite did not run."""
    runs = {}
    names = {}
    for o in obs:
        if o["workload"] != "suite" or "result" not in o:
            continue
        for t in o["result"].get("tests", []):
            names.setdefault(t["id"], t["name"])
            runs.setdefault((o["mode"], t["id"], o["condition"]), {})[o["repeat"]] = t
    if not runs:
        return None
    tests = sorted(names)
    rows, worst = [], []
    for mode in modes:
        mn = mode["name"]
        for c in conds:
            crow = []
            for tid in tests:
                mine = runs.get((mn, tid, c.name), {})
                base = runs.get((mn, tid, "plain"), {})
                if not mine:
                    continue
                r = {"mode": mn, "test": tid, "name": names[tid], "condition": c.name, "n": len(mine),
                     "median_s": median([t["s"] for t in mine.values()]),
                     "write_bytes": median([t["write_bytes"] for t in mine.values()]),
                     "syncs": median([t["syncs"] for t in mine.values()]),
                     "checksum": sorted(t["checksum"] for t in mine.values())[0]}
                if c.name == "plain":
                    r.update({"ratio": 1.0, "ratio_min": 1.0, "ratio_max": 1.0, "bytes_ratio": 1.0})
                else:
                    rs = [mine[k]["s"] / base[k]["s"] for k in mine if k in base and base[k]["s"] > 0]
                    pb = median([t["write_bytes"] for t in base.values()]) if base else float("nan")
                    r["ratio"] = median(rs)
                    r["ratio_min"] = min(rs) if rs else float("nan")
                    r["ratio_max"] = max(rs) if rs else float("nan")
                    r["bytes_ratio"] = r["write_bytes"] / pb if pb and pb == pb else \
                        (1.0 if pb == 0 and r["write_bytes"] == 0 else float("nan"))
                    crow.append(r)
                rows.append(r)
            if crow:
                ranked = sorted((r for r in crow if r["ratio"] == r["ratio"]), key=lambda r: -r["ratio"])
                worst.append({"mode": mn, "condition": c.name,
                              "tests": [{"test": r["test"], "name": r["name"], "ratio": r["ratio"],
                                         "bytes_ratio": r["bytes_ratio"], "median_s": r["median_s"]}
                                        for r in ranked[:5]]})
    return {"tests": [{"id": t, "name": names[t]} for t in tests], "rows": rows, "worst": worst}


SUITE_LIMIT = 1.10          # issue: no suite test and no commit latency beyond 1.10x plain


def suite_targets(summary, suite, conds, opt):
    """The breadth targets, per sqlite-tde condition and mode: every suite
    test within 1.10x plain (judged on the worst test's median per-repeat
    ratio), the suite's total time within 1.10x plain (its 95% interval),
    and in WAL mode the commit latency p50 and p99 with synchronous=NORMAL
    and FULL within 1.10x plain."""
    out = []
    names = [c.name for c in conds if c.name in TDE_CONDITIONS]
    by = {(r["workload"], r["mode"], r["metric"], r["condition"]): r for r in summary}
    few = opt.repeats < 3

    def ci(r):
        return "%.2f [%.2f, %.2f]" % (r["ratio"], r["ci_low"], r["ci_high"])

    for w in (suite or {}).get("worst", []):
        if w["condition"] not in names or not w["tests"]:
            continue
        t = w["tests"][0]
        st = "undecided" if few else ("met" if t["ratio"] <= SUITE_LIMIT else "missed")
        out.append({"group": "broad SQL suite", "target": "every suite test <= %.2fx plain's time" % SUITE_LIMIT,
                    "condition": w["condition"], "workload": "suite", "mode": w["mode"],
                    "figure": "worst: test %s (%s) %.2fx" % (t["test"], t["name"], t["ratio"]), "status": st})
    for (wl, mn, m, cn), r in sorted(by.items()):
        if cn not in names or r.get("ratio") is None:
            continue
        if wl == "suite" and m == "suite_s":
            out.append({"group": "broad SQL suite", "target": "suite total time <= %.2fx plain" % SUITE_LIMIT,
                        "condition": cn, "workload": wl, "mode": mn, "figure": ci(r),
                        "status": ("undecided" if few else judge(r["ci_low"], r["ci_high"], SUITE_LIMIT, LOWER))
                        or "not measured"})
        if wl == "commit-latency" and m in dict((x[0], 1) for x in METRICS["commit-latency"]):
            out.append({"group": "commit latency (WAL)", "target": "%s ratio <= %.2f" % (m, SUITE_LIMIT),
                        "condition": cn, "workload": wl, "mode": mn, "figure": ci(r),
                        "status": ("undecided" if few else judge(r["ci_low"], r["ci_high"], SUITE_LIMIT, LOWER))
                        or "not measured"})
    return out


def baseline_targets(rows, opt, wal):
    """Nothing slower in WAL mode: the wallet/plain ratio of each headline
    figure against the same figure in an earlier results.json."""
    out = []
    try:
        with open(opt.baseline) as f:
            old = json.load(f)
    except (OSError, ValueError) as ex:
        return [{"group": "encryption overhead (WAL)", "target": "nothing slower in WAL mode than the baseline run",
                 "condition": "wallet", "workload": "all", "mode": "WAL",
                 "figure": "cannot read %s: %s" % (opt.baseline, ex), "status": "not measured"}]
    prev = {}
    for r in old.get("summary", []):
        if r.get("condition") == "wallet" and r.get("headline") and r.get("ratio") is not None \
                and r.get("mode", old.get("options", {}).get("journal")) == "WAL":
            prev[r["workload"]] = r
    for mode in wal:
        for r in rows:
            if r["mode"] != mode["name"] or r["condition"] != "wallet" or not r["headline"]:
                continue
            p = prev.get(r["workload"])
            if not p:
                continue
            g_new = r["ratio"] if r["better"] == HIGHER else 1 / r["ratio"]
            g_lo = r["ci_low"] if r["better"] == HIGHER else 1 / r["ci_high"]
            g_hi = r["ci_high"] if r["better"] == HIGHER else 1 / r["ci_low"]
            g_old = p["ratio"] if r["better"] == HIGHER else 1 / p["ratio"]
            st = ("undecided" if opt.repeats < 3 else
                  "met" if g_lo >= g_old else ("missed" if g_hi < g_old else "undecided"))
            out.append({"group": "encryption overhead (WAL)",
                        "target": "nothing slower in WAL mode than the baseline run",
                        "condition": "wallet", "workload": r["workload"], "mode": mode["name"],
                        "figure": "%.2f [%.2f, %.2f] against %.2f before (relative speed)" % (
                            g_new, g_lo, g_hi, g_old), "status": st})
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
        v = getattr(c, "versions", None)
        if c.name in PEER_CONDITIONS and v:
            env[c.name] = v.get("sqlite3mc" if c.name == "sqlite3mc" else "sqlcipher")
            env[c.name + "_sqlite"] = v.get("sqlite")
    try:
        env["git_commit"] = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                                           capture_output=True, text=True).stdout.strip() or None
    except OSError:
        env["git_commit"] = None
    return env


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
        stop_services()


def stop_services():
    while SERVICES:
        SERVICES.pop()()


def help_epilog():
    L = ["workloads (--workloads, comma-separated; default all):"]
    for w in BASE_WORKLOADS:
        L.append("  %-17s %s" % (w, DESCRIPTIONS[w]))
    L += ["", "conditions (--conditions; plain always runs):"]
    for c in ALL_CONDITIONS + EXTRA_CONDITIONS:
        L.append("  %-17s %s%s" % (c, CONDITION_HELP[c], " (only when named)" if c in EXTRA_CONDITIONS else ""))
    L += ["", "journal modes (--journal, default %s): DELETE (SQLite's default), WAL, TRUNCATE," % DEFAULT_MODES,
          "  PERSIST; MODE+cached runs MODE with cache_size large enough for the whole data set",
          "  (--cached adds DELETE+cached).",
          "", "stdout: the headline table and one line 'targets: N met, M missed, K undecided';",
          "every figure, target and limitation is in report.md / report.html / results.json."]
    return "\n".join(L)


def stdout_table(res):
    """The headline table for the terminal: wallet (and the peers) against
    plain, per workload and journal mode."""
    live = [c["name"] for c in res["conditions"] if not c["skipped"] and c["name"] != "plain"]
    show = [c for c in ("wallet", "sqlcipher4", "sqlite3mc") if c in live] or live[:3]
    S = {(r["workload"], r["mode"], r["metric"], r["condition"]): r for r in res["summary"]}
    modes = [m["name"] for m in res["options"]["modes"]]
    head = "%-17s %-14s %14s" % ("workload", "mode", "plain") + "".join(" %22s" % c for c in show)
    L = ["speed relative to plain (1.00x = as fast; higher is better), or the time added:",
         head, "-" * len(head)]
    for w in res["options"]["workloads"]:
        m, _, unit, _ = METRICS[base_of(w)][0]
        for mn in modes:
            p = S.get((w, mn, m, "plain"))
            if not p:
                continue
            cells = []
            for c in show:
                r = S.get((w, mn, m, c))
                if not r or r.get("ratio") is None:
                    cells.append(" %22s" % "n/a")
                elif report.absolute_change(r):
                    cells.append(" %22s" % ("%+.3g %s %s" % (r["diff"], unit, short_verdict(r["verdict"]))))
                else:
                    cells.append(" %22s" % ("%.2fx %s" % (report.goodness(r)[0], short_verdict(r["verdict"]))))
            L.append("%-17s %-14s %14s" % (w, mn, report.num(p["median"]) + " " + unit)
                     + "".join(cells))
    return "\n".join(L)


def short_verdict(v):
    """One word per verdict for the terminal (the report gives the figures)."""
    if v.startswith("penalty"):
        return "slower"
    if v.startswith("faster"):
        return "faster"
    return {"no measurable penalty": "same", "baseline": ""}.get(v, v)


def bench_main(argv):
    ap = argparse.ArgumentParser(prog="sqlite-tde bench",
                                 description="Benchmark sqlite-tde against plain SQLite and peers; "
                                             "writes report.md, report.html and results.json.",
                                 epilog=help_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench-out", help="output folder (default bench-out)")
    ap.add_argument("--build", default=HERE, help="folder with sqlite-tde and the sqlite-tde-bench* drivers")
    ap.add_argument("--quick", action="store_true", help="smallest run (tests, demo): seconds 0.1, "
                    "2 repeats, 5,000 rows, 300 row-at-a-time and t2 rows, 500 suite rows, 20 "
                    "commit-latency transactions, threads 1, at least 2 "
                    "scans and bounces per run (not 3 and 5); figures only show that the kit works")
    ap.add_argument("--seconds", type=float, default=2.0, help="duration of each timed workload (default 2; 10 or 300 for a steadier figure)")
    ap.add_argument("--repeats", type=int, default=5, help="runs per condition, workload and mode (default 5)")
    ap.add_argument("--seed", type=int, default=20261130, help="seed of data, workloads and run order")
    ap.add_argument("--rows", type=int, default=200000, help="rows of the scan/DML table t1 (default 200,000)")
    ap.add_argument("--scale", type=int, default=1, help="tpcb scale factor (100,000 accounts each)")
    ap.add_argument("--threads", default="1,2,4", help="tpcb thread counts (default 1,2,4)")
    ap.add_argument("--rat-rows", type=int, default=10000, help="row-at-a-time rows (default 10,000)")
    ap.add_argument("--txn-rows", type=int, default=25000, help="rows of t2 for update-all, update-rows, "
                    "delete-rows and delete-spill (default 25,000)")
    ap.add_argument("--suite-rows", type=int, default=20000, help="rows of each table of the broad SQL "
                    "suite (default 20,000)")
    ap.add_argument("--lat-txns", type=int, default=1000, help="commit-latency: transactions per "
                    "synchronous setting (default 1,000)")
    ap.add_argument("--journal", default=DEFAULT_MODES, help="journal modes, comma-separated, run in "
                    "this order (default %s)" % DEFAULT_MODES)
    ap.add_argument("--cached", action="store_true", help="also run DELETE+cached: rollback mode with "
                    "cache_size large enough for the whole data set (same as adding it to --journal)")
    ap.add_argument("--synchronous", default="NORMAL", help="synchronous (default NORMAL)")
    ap.add_argument("--page-size", type=int, default=4096)
    ap.add_argument("--cache-size", type=int, default=-65536, help="PRAGMA cache_size of the modes without "
                    "+cached (default -65536: 64 MiB; SQLite's own default is -2000)")
    ap.add_argument("--conditions", default=",".join(ALL_CONDITIONS),
                    help="comma-separated (default %s; also: %s)" % (",".join(ALL_CONDITIONS), ",".join(EXTRA_CONDITIONS)))
    ap.add_argument("--workloads", default=",".join(BASE_WORKLOADS))
    ap.add_argument("--baseline", help="an earlier results.json: judge 'nothing slower in WAL mode' against it")
    ap.add_argument("--pkcs11-config", help="use this existing pkcs11 tde configuration")
    ap.add_argument("--kmip-config", help="use this existing kmip tde configuration")
    opt = ap.parse_args(argv)
    if opt.quick:
        for k, v in (("seconds", 0.1), ("repeats", 2), ("rows", 5000), ("rat_rows", 300),
                     ("txn_rows", 300), ("suite_rows", 500), ("lat_txns", 20)):
            if getattr(opt, k) == ap.get_default(k):
                setattr(opt, k, v)
        if opt.threads == ap.get_default("threads"):
            opt.threads = "1"
    if opt.repeats < 1:
        ap.error("--repeats must be >= 1")
    if opt.suite_rows < 20 or opt.lat_txns < 1:
        ap.error("--suite-rows must be >= 20 and --lat-txns >= 1")
    if opt.cached and "DELETE+cached" not in opt.journal.split(","):
        opt.journal += ",DELETE+cached"
    try:
        opt.modes = parse_modes(opt.journal)
    except ValueError as ex:
        ap.error(str(ex))
    if len({m["name"] for m in opt.modes}) != len(opt.modes):
        ap.error("--journal names a mode twice")
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
            ap.error("unknown workload %s (see --help)" % w)
    names = opt.conditions.split(",")
    if "plain" not in names:
        names.insert(0, "plain")
    if "archive" in names and "wallet" not in names:
        names.insert(names.index("archive"), "wallet")     # the archive's cost is against wallet
    for n in names:
        if n not in ALL_CONDITIONS + EXTRA_CONDITIONS:
            ap.error("unknown condition %s (see --help)" % n)
    print("sqlite-tde bench: seed %d, %d repeats, %.3g s per timed workload, rows %d, t2 rows %d, "
          "scale %d, journal modes %s, synchronous=%s page_size=%d cache_size=%d" % (
              opt.seed, opt.repeats, opt.seconds, opt.rows, opt.txn_rows, opt.scale,
              ",".join(m["name"] for m in opt.modes), opt.synchronous, opt.page_size,
              opt.cache_size), flush=True)
    conds = []
    for n in names:
        c = setup_condition(n, work, opt)
        progress("  condition %-16s %s" % (n, ("SKIPPED: " + c.skip) if c.skip else c.label))
        conds.append(c)
    live = [c for c in conds if not c.skip]
    # One data set per condition, same seed: identical logical content.  It
    # is built in rollback mode; a copy converted by the driver serves WAL.
    journals = []
    for m in opt.modes:
        if m["journal"] not in journals:
            journals.append(m["journal"])
    for c in live:
        c.datasets = {}
        d = os.path.join(work, c.name)
        progress("building data set for %s" % c.name)
        try:
            base = os.path.join(d, "data-DELETE.db")
            call_driver(c, ["--op", "build", "--db", base] + common_args(opt, {"journal": "DELETE", "cached": False}),
                        timeout=3600)
            for j in journals:
                if j == "DELETE":
                    c.datasets[j] = base
                    continue
                c.datasets[j] = os.path.join(d, "data-%s.db" % j)
                copy_db(base, c.datasets[j])
                call_driver(c, ["--op", "convert", "--db", c.datasets[j]] +
                            common_args(opt, {"journal": j, "cached": False}), timeout=600)
        except (RuntimeError, subprocess.SubprocessError, ValueError, OSError) as ex:
            c.skip = "data set build failed: %s" % ex
    live = [c for c in live if not c.skip]
    # "everything cached": one cache_size for every condition, twice the
    # largest data set (VACUUM rewrites every page) in KiB, and never less
    # than the default modes' cache.
    sizes = [os.path.getsize(p) for c in live for p in c.datasets.values()]
    kib_default = -opt.cache_size if opt.cache_size < 0 else opt.cache_size * opt.page_size // 1024
    opt.cache_all = -max(2 * max(sizes + [0]) // 1024 + 16384, kib_default)
    obs, failures = [], []
    total = opt.repeats * sum(
        1 for c in live for m in opt.modes for w in workloads
        if not (c.wal_only and m["journal"] != "WAL") and applicable(w, m))
    rng = random.Random(opt.seed)
    k, t_start = 0, time.time()
    for rep in range(opt.repeats):
        for mode in opt.modes:
            for w in workloads:
                if not applicable(w, mode):
                    continue
                order = [c for c in live if not (c.wal_only and mode["journal"] != "WAL")]
                rng.shuffle(order)
                for pos, c in enumerate(order):
                    k += 1
                    eta = (time.time() - t_start) / max(k - 1, 1) * (total - k + 1) if k > 1 else 0
                    progress("[%d/%d] repeat %d/%d  %-13s %-18s %-16s  eta %ds" % (
                        k, total, rep + 1, opt.repeats, mode["name"], w, c.name, eta))
                    ob = {"repeat": rep + 1, "workload": w, "mode": mode["name"],
                          "journal": mode["journal"], "cached": mode["cached"],
                          "cache_size": mode_cache(opt, mode), "condition": c.name, "position": pos}
                    try:
                        ob["result"] = run_one(c, w, mode, opt, work)
                    except (RuntimeError, subprocess.SubprocessError, ValueError, OSError) as ex:
                        ob["error"] = str(ex)
                        failures.append(ob)
                    obs.append(ob)
    progress("done in %.0f s\n" % (time.time() - t_start))
    # checksums of deterministic workloads agree across every run, mode and condition
    bad = []
    for w in workloads:
        if base_of(w) in DETERMINISTIC:
            sums = {o["result"].get("checksum") for o in obs if o["workload"] == w and "result" in o}
            if len(sums) > 1:
                bad.append(w)
    bad += ["suite test %s" % t for t in suite_mismatches(obs)]
    checks = ("all checksums verified in the driver; deterministic workloads (%s) agree across "
              "every run, journal mode and condition" % ", ".join(sorted(DETERMINISTIC)) if not bad else
              "MISMATCH between conditions in %s" % ", ".join(bad))
    summary, vals = analyse(obs, live, workloads, opt.modes, opt)
    suite = suite_analysis(obs, live, opt.modes)
    res = {
        "schema_version": SCHEMA_VERSION,
        "generated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "command": "sqlite-tde bench " + " ".join(argv),
        "options": {"seed": opt.seed, "repeats": opt.repeats, "seconds": opt.seconds,
                    "rows": opt.rows, "scale": opt.scale, "threads": opt.threads,
                    "rat_rows": opt.rat_rows, "txn_rows": opt.txn_rows, "suite_rows": opt.suite_rows,
                    "lat_txns": opt.lat_txns, "journal": opt.journal,
                    "modes": opt.modes, "synchronous": opt.synchronous,
                    "page_size": opt.page_size, "cache_size": opt.cache_size,
                    "cache_size_cached": opt.cache_all, "workloads": workloads, "quick": opt.quick,
                    "baseline": opt.baseline, "not_applicable": not_applicable(workloads, opt.modes)},
        "environment": environment(opt, conds),
        "conditions": [{"name": c.name, "label": c.label, "skipped": c.skip} for c in conds],
        "checksums": checks,
        "observations": obs,
        "failures": [{"repeat": f["repeat"], "workload": f["workload"], "mode": f["mode"],
                      "condition": f["condition"], "error": f["error"]} for f in failures],
        "summary": summary,
    }
    if suite:
        res["suite"] = suite
    res["targets"] = targets(summary, vals, live, workloads, opt.modes, opt) + \
        suite_targets(summary, suite, live, opt)
    res["limitations"] = report.limitations(res)
    res = no_nan(res)
    with open(os.path.join(opt.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1, allow_nan=False)
    report.write_reports(res, opt.out)
    stop_services()     # before the scratch folder goes: the S3 server's pid files are there
    shutil.rmtree(work, ignore_errors=True)
    print(stdout_table(res))
    n = {s: sum(1 for t in res["targets"] if t["status"] == s) for s in ("met", "missed", "undecided")}
    print("targets: %d met, %d missed, %d undecided (details: %s/report.html)" % (
        n["met"], n["missed"], n["undecided"], opt.out))
    if opt.quick or opt.seconds < 2 or opt.repeats < 3:
        print("quick run: figures show that the kit works, not what encryption costs")
    if failures or bad:
        print("sqlite-tde bench: %d runs failed%s" % (len(failures), ", checksum mismatch" if bad else ""),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
