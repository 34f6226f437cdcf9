"""sqlite-tde restore (issue 27, docs/ARCHIVE.md): rebuild an encrypted
database from the keyless S3 archive, verified, with no keystore.

A real primary (WAL mode, the tde VFS) runs a deterministic workload while
`sqlite-tde ship` captures its transactions into DB-tdeship; a plain SQLite
mirror runs the same workload in step and is snapshotted after every
transaction.  tests/tools/archive_mock makes archive objects from the real
spool and database file with the archive's codec (two base copies, segments
of 7 records), uploaded to the local Ceph S3 server (tests/lib/s3server.sh,
stopped by pid at the end).  Then, with HOME and the configuration pointing
nowhere (no wallet reachable):
  - restore latest equals the primary row for row, passes verify;
  - restore to several --to-seq points and one --to-time point, each equal
    to the mirror as it was then;
  - --list shows the history, both base copies and their ranges;
  - refused, with no output and no OUT.part: a segment edited (one byte),
    dropped (a gap), two segments swapped, a segment of another database
    and of another history (signed with the pinned key), objects signed by
    another key, the newer base replaced by the older one, a target before
    the oldest base or past the end, an existing output file.

Environment: TDE_BUILD, TDE_TEST_TMP (set by ctest)."""

import os
import random
import shutil
import sqlite3
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standby_common as C  # noqa: E402
from archive_common import clean_env, db_id, read_restored, rows, s3env, txn  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MOCK = os.path.join(C.BUILD, "archive_mock")
S3C = os.path.join(C.BUILD, "s3_client")
PREFIX = "arch/t1"
N_TXN = 90          # transactions 1..90; base copies after 30 and 60
SEG = 7             # records per segment


class S3:
    def __init__(self, d):
        self.d = d
        e = s3env(d)
        self.env = dict(os.environ, S3_ENDPOINT=e["S3_ENDPOINT"], S3_REGION=e["S3_REGION"],
                        S3_BUCKET=e["S3_BUCKET"], S3_CA_FILE=e["S3_CA_FILE"])

    def run(self, *args):
        r = subprocess.run([S3C, "--cred", os.path.join(self.d, "s3.env")] + list(args), env=self.env,
                           capture_output=True, text=True)
        if r.returncode != 0:
            C.bad("s3_client %s: %s" % (" ".join(args[:2]), r.stderr[-300:]))
        return r

    def put(self, key, path):
        self.run("put", key, path)

    def delete(self, key):
        self.run("delete", key)


def main():
    t_start = time.time()
    for tool in (MOCK, S3C):
        if not os.access(tool, os.X_OK):
            C.bad("%s not built (libcurl >= 7.85 missing?)" % tool)
            C.finish("test_restore")
    d = C.workdir("test_restore")
    cfg = C.make_config(d)
    usage_errors(d)
    srv = os.path.join(d, "s3")
    started = False
    ship = None
    try:
        C.step("the local S3 server")
        t0 = time.time()
        r = subprocess.run(["bash", os.path.join(ROOT, "tests/lib/s3server.sh"), "start", srv],
                           capture_output=True, text=True)
        started = os.path.isdir(os.path.join(srv, "run")) or r.returncode == 0
        if not C.check(r.returncode == 0, "s3server.sh start (%.1f s)" % (time.time() - t0)):
            print(r.stdout[-2000:], r.stderr[-2000:])
            return
        s3 = S3(srv)
        ctx = run_cases(d, cfg, srv, s3)
        second_history(d, cfg, srv, s3, *ctx)
        real_archiver(d, cfg, srv)
    finally:
        C.stop(ship)
        if started:
            subprocess.run(["bash", os.path.join(ROOT, "tests/lib/s3server.sh"), "stop", srv],
                           capture_output=True, text=True)
        print("test_restore: %.1f s in all" % (time.time() - t_start))
    if C.NFAIL == 0 and not os.environ.get("TDE_KEEP_SCRATCH"):
        shutil.rmtree(d, ignore_errors=True)
    C.finish("test_restore")


def usage_errors(d):
    C.step("bad command lines (exit 2, nothing written)")
    env = os.path.join(d, "fake.env")
    with open(env, "w") as f:
        f.write("S3_ENDPOINT=https://127.0.0.1:1\nS3_BUCKET=b\nS3_REGION=r\n")
    base = [C.CLI, "restore", "--s3", env, "--db-id", "ab" * 16]
    for args, what in ((["out.db"], "no --pubkey"),
                       (["--pubkey", "p.pem", "--to-time", "yesterday", "out.db"], "a time that does not parse"),
                       (["--pubkey", "p.pem", "--to-time", "2026-12-03T12:00:00+02:00", "out.db"], "a time not in UTC"),
                       (["--pubkey", "p.pem", "--to-seq", "5", "--to-time", "5", "out.db"], "two targets"),
                       (["--pubkey", "p.pem", "--to-seq", "-1", "out.db"], "a negative sequence"),
                       (["--pubkey", "p.pem", "--list", "out.db"], "--list with an output"),
                       (["--pubkey", "p.pem"], "no output"),
                       (["--pubkey", "p.pem", "--db-id", "xyz", "out.db"], "a database id that is not hex")):
        r = subprocess.run(base + args, capture_output=True, text=True, cwd=d)
        C.check(r.returncode == 2 and not os.path.exists(os.path.join(d, "out.db")),
                "%s: exit %d: %s" % (what, r.returncode, r.stderr.strip().splitlines()[0][:120] if r.stderr else ""))


def make_primary(d, cfg):
    """The primary, its shipper, the workload and the mirror.  Returns
    (db path, snapshots by transaction, sequence of each transaction,
    capture time by sequence, base sequences)."""
    pdb = os.path.join(d, "primary.db")
    db = C.connect(pdb, cfg)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT, b BLOB)")
    mirror = sqlite3.connect(":memory:", isolation_level=None)
    mirror.execute("CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT, b BLOB)")
    snaps = {0: rows(mirror)}
    ship = C.start_ship(d, pdb, cfg, [C.free_port()], conf="insecure")
    t0 = time.time()
    while time.time() - t0 < 120 and not dump(pdb):
        time.sleep(0.1)
    C.check(bool(dump(pdb)), "the shipper started the spool")
    signkey = os.path.join(d, "sign.pem")
    objs = os.path.join(d, "objs")
    bases = []
    for k in range(1, N_TXN + 1):
        txn(db, k)
        txn(mirror, k)
        snaps[k] = rows(mirror)
        if k in (30, 60):
            while db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] != 0:
                time.sleep(0.05)
            out = subprocess.run([MOCK, "base", pdb, signkey, objs, PREFIX], capture_output=True, text=True)
            C.check(out.returncode == 0, "base copy after transaction %d: %s" % (k, (out.stdout + out.stderr).strip()))
            bases.append((k, out.stdout.strip()))
    # every transaction captured: one TXN record each, after the first GAP
    t0 = time.time()
    while time.time() - t0 < 120 and sum(1 for r in dump(pdb) if r[1] == "TXN") < N_TXN:
        time.sleep(0.1)
    C.stop(ship)
    # The last close may append too (format 3: the fold of its checkpoint
    # changes the header region, a header-only record): close first, so
    # that the records dumped are all the archive will hold.
    db.close()
    recs = dump(pdb)
    txns = [r for r in recs if r[1] == "TXN" and r[2] > 0]
    # A TXN record without frames carries only a changed header region
    # (FORMAT.md "Ship spool"): it changes no row.
    C.check(len(txns) == N_TXN and recs[0][1] == "GAP" and all(r[1] == "TXN" for r in recs[1:])
            and [r[0] for r in recs] == list(range(1, len(recs) + 1)),
            "the spool holds a GAP, then one TXN record with frames per transaction (%d records, %d with "
            "frames, the rest header regions only)" % (len(recs), len(txns)))
    seq_of = {i + 1: r[0] for i, r in enumerate(txns)}
    tcap = {r[0]: r[3] for r in recs}
    for k, name in bases:
        s = int(name[-21:-5], 16)
        C.check(seq_of[k] <= s < seq_of[k + 1],
                "base after transaction %d is at sequence %d (that transaction, or a header-only record after "
                "it): %s" % (k, s, name))
    return pdb, snaps, seq_of, tcap, bases


def dump(pdb):
    if not os.path.exists(pdb + "-tdeship"):
        return []
    r = subprocess.run([MOCK, "dump", pdb], capture_output=True, text=True)
    out = []
    for line in r.stdout.splitlines():
        s, kind, nf, t = line.split()
        out.append((int(s), kind, int(nf), int(t)))
    return out


def real_archiver(d, cfg, srv):
    """The same restore from what `sqlite-tde archive` uploaded while a
    workload committed (its own prefix): latest and a point in the middle,
    each equal to the mirror after the transaction its newest row names."""
    C.step("restore from the real archiver's objects (sqlite-tde archive)")
    adb = os.path.join(d, "archived.db")
    db = C.connect(adb, cfg)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT, b BLOB)")
    mirror = sqlite3.connect(":memory:", isolation_level=None)
    mirror.execute("CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT, b BLOB)")
    snaps = {0: rows(mirror)}
    log = open(os.path.join(d, "archiver.log"), "ab")
    a = subprocess.Popen([C.CLI, "archive", "--s3", os.path.join(srv, "s3.env"), "--prefix",
                          "arch/real", "--sign-key", os.path.join(d, "sign.pem"), "--segment-txns", "8",
                          "--segment-ms", "300", "--cycle-ms", "20", adb], stdout=log, stderr=log)
    try:
        for k in range(1, 41):
            txn(db, k)
            txn(mirror, k)
            snaps[k] = rows(mirror)
            time.sleep(0.02)
        db.close()
        dbid = None
        t0 = time.time()
        last = max(r[0] for r in dump(adb))
        while time.time() - t0 < 180:
            dbid = dbid or db_id(adb)
            r, _ = restore(d, srv, dbid, ["--list"], None, prefix="arch/real")
            if r.returncode == 0 and ("..%d " % last) in r.stdout:
                break
            time.sleep(0.5)
        C.check(("..%d " % last) in r.stdout, "the archiver uploaded up to sequence %d: %s" % (last, r.stdout.strip()[-300:]))
    finally:
        C.stop(a)
    for what, args in (("latest", []), ("--to-seq %d" % (last - 12), ["--to-seq", str(last - 12)])):
        o = os.path.join(d, "real-%s.db" % what.replace(" ", "").replace("-", ""))
        r, secs = restore(d, srv, dbid, args, o, prefix="arch/real")
        if not C.check(r.returncode == 0, "restore %s from the archiver's objects (%.2f s): %s"
                       % (what, secs, (r.stdout + r.stderr).strip()[:200])):
            continue
        got, ic = read_restored(cfg, o)
        k = max((row[0] for row in got), default=0)
        C.check(got == snaps[k] and ic == "ok" and (k == 40 if what == "latest" else 0 < k < 40),
                "%s equals the workload after transaction %d (%d rows), integrity ok" % (what, k, len(got)))


def restore(d, srv, dbid, args, out, pubkey=None, prefix=PREFIX):
    """sqlite-tde restore with no keystore reachable: HOME and the
    configuration point nowhere."""
    env = clean_env(d)
    cmd = [C.CLI, "restore", "--s3", os.path.join(srv, "s3.env"), "--db-id", dbid, "--prefix", prefix,
           "--pubkey", pubkey or os.path.join(d, "pub.pem")] + list(args) + ([out] if out else [])
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=d)
    return r, time.time() - t0


def refused(d, srv, dbid, what, args=(), pubkey=None, want_rc=None, word=None):
    out = os.path.join(d, "refused.db")
    r, _ = restore(d, srv, dbid, args, out, pubkey)
    msg = (r.stdout + r.stderr).strip().replace("\n", " | ")
    C.check(r.returncode != 0 and (want_rc is None or r.returncode == want_rc)
            and not os.path.exists(out) and not os.path.exists(out + ".part")
            and not os.path.exists(out + ".part-base")
            and (word is None or word in msg),
            "%s: refused (exit %d), nothing written: %s" % (what, r.returncode, msg[:240]))


def run_cases(d, cfg, srv, s3):
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", os.path.join(d, "sign.pem")], check=True)
    os.chmod(os.path.join(d, "sign.pem"), 0o600)
    subprocess.run(["openssl", "pkey", "-in", os.path.join(d, "sign.pem"), "-pubout", "-out",
                    os.path.join(d, "pub.pem")], check=True)
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", os.path.join(d, "other.pem")], check=True)
    os.chmod(os.path.join(d, "other.pem"), 0o600)
    subprocess.run(["openssl", "pkey", "-in", os.path.join(d, "other.pem"), "-pubout", "-out",
                    os.path.join(d, "otherpub.pem")], check=True)

    C.step("a primary, its spool, the mirror; archive objects from them")
    pdb, snaps, seq_of, tcap, bases = make_primary(d, cfg)
    objs = os.path.join(d, "objs")
    out = subprocess.run([MOCK, "segs", pdb, os.path.join(d, "sign.pem"), str(SEG), objs, PREFIX],
                         capture_output=True, text=True)
    segs = out.stdout.split()
    C.check(out.returncode == 0 and len(segs) >= 10, "%d segments of %d records" % (len(segs), SEG))
    names = [b[1] for b in bases] + segs
    t0 = time.time()
    for n in names:
        s3.put(n, os.path.join(objs, n))
    print("  uploaded %d objects in %.1f s" % (len(names), time.time() - t0))
    dbid = names[0].split("/")[-4]
    hist = names[0].split("/")[-3]
    seq_last = max(tcap)
    framed = sorted(seq_of.values())

    def k_of(s):
        """The workload's transactions a restore to sequence s holds."""
        return sum(1 for q in framed if q <= s)

    C.step("restore latest, no keystore reachable")
    rout = os.path.join(d, "latest.db")
    r, secs = restore(d, srv, dbid, [], rout)
    C.check(r.returncode == 0 and os.path.exists(rout) and not os.path.exists(rout + ".part"),
            "restore latest (%.2f s): %s" % (secs, (r.stdout + r.stderr).strip()[:300]))
    if os.path.exists(rout):
        got, ic = read_restored(cfg, rout)
        prim = C.connect(pdb, cfg)
        want = rows(prim)
        prim.close()
        C.check(got == want and got == snaps[N_TXN] and ic == "ok",
                "the restored database equals the primary row for row (%d rows), integrity ok" % len(want))
        v = subprocess.run([C.CLI, "--config", cfg, "verify", rout], capture_output=True, text=True)
        C.check(v.returncode == 0, "sqlite-tde verify on the restored database: %s" % v.stdout.strip()[-200:])
    C.check("sequence %d " % seq_last in r.stdout, "it says which sequence it restored (%d)" % seq_last)

    C.step("restore to several sequences and a time, each equal to the mirror then")
    b1 = int(bases[0][1][-21:-5], 16)
    points = [b1, b1 + 1, b1 + SEG, seq_of[45], seq_of[60], seq_of[60] + 3, seq_of[77], seq_last - 1, seq_last]
    rng = random.Random(27)
    extra = sorted(rng.sample(range(b1, seq_last + 1), 10))
    print("  10 more points, seed 27: %s" % extra)
    for s in sorted(set(points + extra)):
        o = os.path.join(d, "seq%d.db" % s)
        r, secs = restore(d, srv, dbid, ["--to-seq", str(s)], o)
        if not C.check(r.returncode == 0, "restore --to-seq %d (%.2f s): %s" % (s, secs, (r.stdout + r.stderr).strip()[:200])):
            continue
        got, ic = read_restored(cfg, o)
        C.check(got == snaps[k_of(s)] and ic == "ok", "--to-seq %d equals the workload after transaction %d (%d rows)"
                % (s, k_of(s), len(got)))
    s = seq_of[52]
    t_iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(tcap[s] // 1000)) + ".%03dZ" % (tcap[s] % 1000)
    want_seq = max(q for q in tcap if tcap[q] <= tcap[s])
    for label, arg in (("ISO 8601 " + t_iso, t_iso), ("epoch ms", str(tcap[s]))):
        o = os.path.join(d, "time%d.db" % len(arg))
        r, secs = restore(d, srv, dbid, ["--to-time", arg], o)
        if C.check(r.returncode == 0, "restore --to-time %s (%.2f s)" % (label, secs)):
            got, ic = read_restored(cfg, o)
            C.check(got == snaps[k_of(want_seq)], "--to-time %s equals the workload after transaction %d"
                    % (label, k_of(want_seq)))

    C.step("--list")
    r, _ = restore(d, srv, dbid, ["--list"], None)
    C.check(r.returncode == 0 and ("history %s" % hist) in r.stdout and r.stdout.count("restorable to sequences") == 2
            and ("%d..%d" % (int(bases[1][1][-21:-5], 16), seq_last)) in r.stdout,
            "--list shows the history and both base copies with their ranges:\n%s" % r.stdout.strip())

    C.step("refused, nothing written")
    # helpers: the object holding sequence s
    seg_of = lambda s: next(n for n in segs if int(n[-37:-21], 16) <= s <= int(n[-20:-4], 16))  # noqa: E731
    orig = lambda n: os.path.join(objs, n)  # noqa: E731
    victim = seg_of(seq_of[70])
    tmp = os.path.join(d, "tampered")

    data = bytearray(open(orig(victim), "rb").read())
    data[len(data) // 2] ^= 0x01
    open(tmp, "wb").write(data)
    s3.put(victim, tmp)
    refused(d, srv, dbid, "a segment with one byte changed", want_rc=4)
    s3.put(victim, orig(victim))

    s3.delete(victim)
    refused(d, srv, dbid, "a segment dropped (latest)", word="gap")
    refused(d, srv, dbid, "a segment dropped (--to-seq past it)", ["--to-seq", str(seq_of[75])], word="gap")
    o = os.path.join(d, "beforegap.db")
    r, _ = restore(d, srv, dbid, ["--to-seq", str(seq_of[62])], o)
    C.check(r.returncode == 0, "a restore to a point before the dropped segment still works")
    s3.put(victim, orig(victim))

    a, b = seg_of(seq_of[63]), seg_of(seq_of[72])
    s3.put(a, orig(b))
    s3.put(b, orig(a))
    refused(d, srv, dbid, "two segments swapped (reordered)", want_rc=4)
    s3.put(a, orig(a))
    s3.put(b, orig(b))

    for what, fake_db, fake_hist in (("another database", "ab" * 16, hist), ("another history", dbid, "cd" * 16)):
        subprocess.run([MOCK, "reseal", orig(victim), os.path.join(d, "sign.pem"), fake_db, fake_hist, tmp], check=True)
        s3.put(victim, tmp)
        refused(d, srv, dbid, "a segment of %s (signed with the pinned key) in its place" % what, want_rc=4)
    s3.put(victim, orig(victim))

    oth = os.path.join(d, "objs-other")
    subprocess.run([MOCK, "segs", pdb, os.path.join(d, "other.pem"), str(SEG), oth, PREFIX],
                   check=True, capture_output=True)
    s3.put(victim, os.path.join(oth, victim))
    refused(d, srv, dbid, "a segment signed by another key", want_rc=4)
    s3.put(victim, orig(victim))
    refused(d, srv, dbid, "every object verified with a key that is not the primary's",
            pubkey=os.path.join(d, "otherpub.pem"), want_rc=4)

    base1, base2 = bases[0][1], bases[1][1]
    s3.put(base2, orig(base1))
    refused(d, srv, dbid, "the newer base copy replaced by the older one", want_rc=4)
    s3.put(base2, orig(base2))
    refused(d, srv, dbid, "a target before the oldest base copy", ["--to-seq", str(seq_of[10])], word="oldest base")
    refused(d, srv, dbid, "a target past the end of the archive", ["--to-seq", str(seq_last + 5)], word="past the end")
    refused(d, srv, dbid, "a time before the oldest base copy", ["--to-time", str(tcap[seq_of[5]])], word="oldest base")
    ex = os.path.join(d, "exists.db")
    open(ex, "wb").write(b"keep me")
    r, _ = restore(d, srv, dbid, [], ex)
    C.check(r.returncode != 0 and open(ex, "rb").read() == b"keep me" and not os.path.exists(ex + ".part"),
            "an existing output file is not overwritten: %s" % (r.stderr.strip()[:160]))
    r, _ = restore(d, srv, "00" * 16, [], os.path.join(d, "none.db"))
    C.check(r.returncode != 0 and not os.path.exists(os.path.join(d, "none.db")),
            "a database the archive does not hold: %s" % r.stderr.strip()[:160])
    interrupted(d, cfg, srv, dbid, snaps[N_TXN])
    return pdb, snaps, dbid, hist, tcap, k_of


def interrupted(d, cfg, srv, dbid, want):
    """SIGTERM at several moments of a restore: afterwards either OUT is the
    whole restore (it finished first) or nothing is there, never OUT.part."""
    C.step("a restore interrupted by SIGTERM leaves nothing half-written")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLITE_TDE")}
    env["HOME"] = os.path.join(d, "nohome")
    outcomes = []
    for i, delay in enumerate((0.0, 0.03, 0.06, 0.1, 0.15, 0.25)):
        o = os.path.join(d, "sig%d.db" % i)
        p = subprocess.Popen([C.CLI, "restore", "--s3", os.path.join(srv, "s3.env"), "--db-id", dbid, "--prefix",
                              PREFIX, "--pubkey", os.path.join(d, "pub.pem"), o], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        p.terminate()
        rc = p.wait(60)
        left = [x for x in (o + ".part", o + ".part-base") if os.path.exists(x)]
        whole = os.path.exists(o) and read_restored(cfg, o)[0] == want
        outcomes.append("%s:%s" % (rc, "whole" if whole else ("absent" if not os.path.exists(o) else "BAD")))
        C.check(not left and (whole or (not os.path.exists(o) and rc != 0)),
                "SIGTERM after %.2f s: exit %d, %s" % (delay, rc, "OUT whole" if whole else "nothing written"
                                                       if not left and not os.path.exists(o) else "left %s" % left))


def second_history(d, cfg, srv, s3, pdb, snaps, dbid, hist, tcap, k_of):
    """A new spool (its history id is new) for the same database: latest and
    --to-time pick the history by the capture times of its records; a bare
    --to-seq is ambiguous and refused; --history names one."""
    C.step("a second history of the same database")
    os.rename(pdb + "-tdeship", pdb + "-tdeship.first")
    db = C.connect(pdb, cfg)
    mirror = sqlite3.connect(":memory:", isolation_level=None)
    mirror.execute("CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT, b BLOB)")
    for k in range(1, N_TXN + 1):
        txn(mirror, k)
    ship = C.start_ship(d, pdb, cfg, [C.free_port()], conf="insecure")
    t0 = time.time()
    while time.time() - t0 < 120 and not dump(pdb):
        time.sleep(0.1)
    objs = os.path.join(d, "objs2")
    names = []
    for k in range(N_TXN + 1, N_TXN + 16):
        txn(db, k)
        txn(mirror, k)
        snaps[k] = rows(mirror)
        if k == N_TXN + 5:
            while db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] != 0:
                time.sleep(0.05)
            out = subprocess.run([MOCK, "base", pdb, os.path.join(d, "sign.pem"), objs, PREFIX],
                                 capture_output=True, text=True)
            names += out.stdout.split()
    t0 = time.time()
    while time.time() - t0 < 120 and sum(1 for r in dump(pdb) if r[2] > 0) < 15:
        time.sleep(0.1)
    C.stop(ship)
    db.close()
    out = subprocess.run([MOCK, "segs", pdb, os.path.join(d, "sign.pem"), str(SEG), objs, PREFIX],
                         capture_output=True, text=True)
    names += out.stdout.split()
    hist2 = names[0].split("/")[-3]
    C.check(len(names) >= 3 and hist2 != hist, "objects of a new history %s: %d" % (hist2, len(names)))
    for n in names:
        s3.put(n, os.path.join(objs, n))
    o = os.path.join(d, "h2-latest.db")
    r, _ = restore(d, srv, dbid, [], o)
    if C.check(r.returncode == 0 and hist2 in r.stdout, "latest picks the newer history: %s" % (r.stdout + r.stderr)[:200]):
        got, ic = read_restored(cfg, o)
        C.check(got == snaps[N_TXN + 15], "it equals the workload after transaction %d" % (N_TXN + 15))
    s = sorted(tcap)[len(tcap) // 2]
    o = os.path.join(d, "h2-time.db")
    r, _ = restore(d, srv, dbid, ["--to-time", str(tcap[s])], o)
    if C.check(r.returncode == 0 and hist in r.stdout, "--to-time in the first history's span picks it"):
        got, ic = read_restored(cfg, o)
        want = max(q for q in tcap if tcap[q] <= tcap[s])
        C.check(got == snaps[k_of(want)], "it equals the workload after transaction %d" % k_of(want))
    refused(d, srv, dbid, "a bare --to-seq with two histories", ["--to-seq", str(s)], word="--history")
    o = os.path.join(d, "h1-seq.db")
    r, _ = restore(d, srv, dbid, ["--history", hist, "--to-seq", str(s)], o)
    if C.check(r.returncode == 0, "--history names the first: --to-seq %d" % s):
        got, ic = read_restored(cfg, o)
        C.check(got == snaps[k_of(s)], "it equals the workload after transaction %d" % k_of(s))
    r, _ = restore(d, srv, dbid, ["--list"], None)
    C.check(r.returncode == 0 and hist in r.stdout and hist2 in r.stdout, "--list shows both histories")


if __name__ == "__main__":
    main()
