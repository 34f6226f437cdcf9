"""The archive's point-in-time and kill -9 proofs (issue 27), against the
local Ceph S3 server (tests/lib/s3server.sh, stopped by pid at the end,
also on failure), with `sqlite-tde archive` uploading small segments.

1. Restore to 20 random points in time.  A writer commits a deterministic
   workload (inserts, updates, deletes of varying sizes; every fifth
   transaction some hundreds of KiB, many WAL frames; checkpoints of every
   mode, PASSIVE, FULL, RESTART and TRUNCATE) into a wallet-encrypted WAL
   database while the archiver runs; a plain SQLite database (no tde)
   replays the same workload and its content is hashed after every
   transaction.

   What "the database as it was at T" means.  The archive does not know
   when a COMMIT returned: each spool record carries its *capture time*
   (FORMAT.md "Ship spool": when the shipper, or the VFS hook at a
   checkpoint, appended it), and `restore --to-time T` (restore.c rsPast,
   rsPlaceBase; ARCHIVE.md "Restore") takes the newest base copy captured
   at or before T, then applies records in sequence while their capture
   time is <= T and stops at the first one captured after T.  A
   transaction committed before T but captured after T is therefore not in
   the restore to T.  A capture never precedes the start of its
   transaction, but may follow its COMMIT by any delay on a loaded machine.
   So this test picks T only where both readings agree: for transaction k
   the window is (max(end of step k, capture time of k's record),
   start of transaction k+1), in whole milliseconds, open at both ends;
   the capture times are read from the segments in the bucket (the record
   headers, the same field the restore reads).  20 windows are drawn with a
   fixed seed (printed), T uniformly in each: the restore must equal the
   mirror after transaction k, which is both "the last transaction
   committed before T" and "the last one captured by T".  Transaction k is
   the k-th record with frames after the first base copy (the workload
   starts once that copy is in the bucket); the restored database's own
   counter row (meta.k) must agree.

2. kill -9 of the writer, 10 rounds (fixed seed): a child process commits
   small transactions (two rows each) and prints each id after COMMIT
   returned; SIGKILL at a random moment, then the next child.  The archiver
   keeps running.  After the rounds, one more writer commits and
   checkpoints (TRUNCATE: the hook puts everything in the spool), the
   archive's acknowledged sequence reaches the captured one: a restore to
   latest holds every printed id (and at most one unprinted id per round,
   the one being acknowledged when the kill came), both rows of each.

3. kill -9 of the archiver, 10 rounds (fixed seed) while a writer commits;
   restarted each time.  Before each kill the archiver's acknowledged
   sequence (peer0_acked_seq in DB-tdeship-state) is read; the bucket must
   then hold segments up to it, and no restarted archiver acknowledges
   less.  At the end a restore to latest holds every committed
   transaction, and the segments cover every sequence after the base copy
   exactly once (a sequence in two segments would have to hold identical
   records).

4. The archiver's crash between shipChainSave (DB-tdeship-chain names the
   next trim point, synced) and tdeSpoolTrim (src/repl/ship.c shipTrim),
   made deterministic by writing the chain file as shipChainSave would and
   leaving the spool untrimmed; the restarted archiver must go on with
   segments that continue the chain.

Each part checks the bucket: every object verifies with the primary's
public key (tests/tools/archive_check.c), the segments' records are
contiguous, and each segment's chain before and after is the chain
recomputed from the base copy over the records (what the restore joins).

A bug this test found (round 7, fixed in src/repl/ship.c shipChainBefore):
when a scan of the spool started at a record F that DB-tdeship-chain did
not name (F or F-1), the shipper gave F the history's anchor chain; the
archive signed segments with it, which verified alone but did not join,
and restore to latest was refused.  Part 4 hit it every time, part 3
sometimes (a kill -9 inside shipTrim, or a peer re-reading the spool while
a trim was under way).  A segment that does not join fails the test; the
failure says whether it has that signature (chain_breaks).

A second bug it found (round 8, fixed in src/repl/spool.c capLastFrame):
after a kill -9 of a writer between SQLite's WAL restart in the index and
its new WAL header, the shipper recorded that "the primary lost commits"
though nothing was lost, and the archive had no restorable point from that
GAP to the next base copy (9 of 10 rounds of part 2 under ASan).  Part 2
fails on any hole (test_r8_restart_gap.py makes that state exactly).

Prints its timings.  Environment: TDE_BUILD, TDE_TEST_TMP; TDE_PITR_ONLY
(e.g. "14") runs only those parts."""

import hashlib
import os
import random
import shutil
import sqlite3
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standby_common as C  # noqa: E402
from archive_common import db_id  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
S3SERVER = os.path.join(ROOT, "tests", "lib", "s3server.sh")
S3C = os.path.join(C.BUILD, "s3_client")
CHECK = os.path.join(C.BUILD, "archive_check")
MOCK = os.path.join(C.BUILD, "archive_mock")
SEED = 2727
N_TXN = 120
N_POINTS = 20
ROUNDS = 10
T0 = time.time()
REC_TXN, REC_GAP = 1, 3


# ---- the bucket ---------------------------------------------------------

def read_env(path):
    env = {}
    for line in open(path):
        k, _, v = line.rstrip("\n").partition("=")
        if k:
            env[k] = v
    return env


class S3:
    def __init__(self, srv):
        self.cred = os.path.join(srv, "s3.env")
        e = read_env(self.cred)
        self.env = dict(os.environ, S3_ENDPOINT=e["S3_ENDPOINT"], S3_REGION=e["S3_REGION"],
                        S3_BUCKET=e["S3_BUCKET"], S3_CA_FILE=e["S3_CA_FILE"])

    def run(self, *args):
        return subprocess.run([S3C, "--cred", self.cred] + list(args), env=self.env, capture_output=True,
                              text=True, timeout=120)

    def keys(self, prefix):
        r = self.run("list", prefix + "/")
        if r.returncode != 0:
            C.bad("s3_client list %s: %s" % (prefix, r.stderr[-300:]))
            return []
        return [line.split()[0] for line in r.stdout.splitlines() if line and not line.startswith("count ")]

    def get(self, key, path):
        r = self.run("get", key, path)
        if r.returncode != 0:
            C.bad("s3_client get %s: %s" % (key, r.stderr[-300:]))
        return r.returncode == 0


def seg_range(key):
    """(first, last) of a segment's name, None for a base copy."""
    if "/seg/" not in key:
        return None
    f, _, l = key.rsplit("/", 1)[1][:-4].partition("-")
    return int(f, 16), int(l, 16)


def highest_seg(s3, prefix):
    r = [seg_range(k) for k in s3.keys(prefix)]
    return max((x[1] for x in r if x), default=0)


def parse_segment(data):
    """The records of a segment object (ARCHIVE.md "Objects", FORMAT.md
    "Ship spool"): [(seq, kind, nframes, capture ms, record bytes)]."""
    if data[:8] != b"TDEASEG1":
        return None
    first, last = struct.unpack(">QQ", data[40:56])
    nrec = struct.unpack(">Q", data[88:96])[0]
    recs, off, end = [], 128, 128 + nrec
    while off < end:
        seq, = struct.unpack(">Q", data[off + 8:off + 16])
        kind = data[off + 16]
        nframe, tcap = struct.unpack(">IQ", data[off + 44:off + 56])
        plen, = struct.unpack(">I", data[off + 88:off + 92])
        n = 96 + plen + 32
        recs.append((seq, kind, nframe, tcap, data[off:off + n]))
        off += n
    if off != end or not recs or recs[0][0] != first or recs[-1][0] != last:
        return None
    return recs


def read_bucket(s3, d, prefix, pub):
    """Every object downloaded and verified with the public key; checks that
    the segments cover every sequence after the first base copy exactly once
    (overlaps only with identical records).  Returns a dict: bases [(seq,
    capture ms)], recs {seq: (seq, kind, nframes, capture ms, bytes)}, segs
    [(first, last)], unjoined: the segments whose chain before or after is
    not the chain recomputed from the base copy over the records (the
    restore refuses those: "does not continue the chain"), hist."""
    res = {"bases": [], "recs": {}, "segs": [], "unjoined": [], "hist": None, "chains": {}}
    keys = s3.keys(prefix)
    out = os.path.join(d, "objects-" + prefix.replace("/", "_"))
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    files = []
    for i, k in enumerate(keys):
        p = os.path.join(out, "%04d" % i)
        if s3.get(k, p):
            files.append((k, p))
    r = subprocess.run([CHECK, pub] + [p for _, p in files], capture_output=True, text=True, timeout=300)
    C.check(r.returncode == 0 and len(files) == len(keys) and len(keys) > 1,
            "%s: %d objects, each verifies with the primary's public key%s"
            % (prefix, len(keys), "" if r.returncode == 0 else ": " + r.stdout[-600:]))
    chains, base_chain = res["chains"], {}
    for line in r.stdout.splitlines():
        w = line.split()
        if w[0] == "seg":
            chains[(int(w[2]), int(w[3]))] = (w[5], w[6])
        elif w[0] == "base":
            base_chain[int(w[2])] = bytes.fromhex(w[4])
    hists = {line.split()[1] for line in r.stdout.splitlines() if line.startswith(("base ", "seg "))}
    C.check(len(hists) == 1, "%s: one history (%s)" % (prefix, ", ".join(sorted(hists))))
    res["hist"] = bytes.fromhex(sorted(hists)[0]) if hists else None
    bases, recs, segs, dup, bad_overlap = res["bases"], res["recs"], res["segs"], 0, []
    for k, p in files:
        data = open(p, "rb").read()
        if data[:8] == b"TDEABAS1":
            bases.append((struct.unpack(">Q", data[40:48])[0], struct.unpack(">Q", data[56:64])[0]))
            continue
        rs = parse_segment(data)
        if rs is None or (rs[0][0], rs[-1][0]) != seg_range(k):
            C.bad("%s: segment %s does not parse as ARCHIVE.md says" % (prefix, k))
            continue
        segs.append(seg_range(k))
        for rec in rs:
            if rec[0] in recs:
                dup += 1
                if recs[rec[0]][4] != rec[4]:
                    bad_overlap.append(rec[0])
            recs[rec[0]] = rec
    bases.sort()
    segs.sort()
    if not bases:
        C.bad("%s: no base copy" % prefix)
        return res
    b0 = bases[0][0]
    missing, s = [], b0 + 1
    top = max(recs, default=b0)
    while s <= top:
        if s not in recs and not (s - 1 in base_chain and s + 1 in recs):
            missing.append(s)
        s += 1
    overl = sum(1 for a, b in zip(segs, segs[1:]) if b[0] <= a[1])
    C.check(not missing and not bad_overlap,
            "%s: %d segments cover sequences %d..%d without a gap (%d base copies at %s; %d overlapping "
            "segment pairs, %d sequences held twice, all identical)%s"
            % (prefix, len(segs), b0 + 1, top, len(bases), [b[0] for b in bases], overl, dup,
               "" if not missing else "; MISSING %s" % missing[:20]
               if not bad_overlap else "; DIFFERING %s" % bad_overlap[:20]))
    chain = dict(base_chain)
    for q in range(b0 + 1, top + 1):
        if q in recs and q - 1 in chain:
            chain[q] = C.chain_next(chain[q - 1], recs[q][4])
        if q in base_chain:
            chain[q] = base_chain[q]
    for (f, l), (cb, ca) in sorted(chains.items()):
        if chain.get(f - 1, b"").hex() != cb or chain.get(l, b"").hex() != ca:
            res["unjoined"].append((f, l))
    return res


def anchored_at(res, f):
    """The bug signature of the unjoined segment starting at f: its chain
    before is the history's anchor at F-1 (src/repl/sign.c tdeChainAnchor)
    chained over the records F..f-1, for some F after the base copy, i.e.
    the shipper took a scan's first record F for the history's start.
    Returns F or None."""
    cb = bytes.fromhex(res["chains"][next(k for k in res["chains"] if k[0] == f)][0])
    b0 = res["bases"][0][0] if res["bases"] else 0
    for F in range(f, max(b0, f - 400), -1):
        c = hashlib.sha256(b"TDECHN1 anchor\0" + res["hist"] + struct.pack(">Q", F - 1)).digest()
        for q in range(F, f):
            c = C.chain_next(c, res["recs"][q][4])
        if c == cb:
            return F
    return None


# ---- the databases -------------------------------------------------------

def content_hash(db):
    h = hashlib.sha256()
    for k, v, b in db.execute("SELECT k, v, b FROM t ORDER BY k"):
        h.update(b"%d|%s|%d|" % (k, v.encode(), len(b)) + b)
    h.update(b"meta %r" % db.execute("SELECT k FROM meta").fetchall())
    return h.hexdigest()


def restore(d, s3srv, dbid, prefix, args, out):
    """sqlite-tde restore with no keystore reachable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQLITE_TDE") and not k.startswith("AWS_")}
    env["HOME"] = os.path.join(d, "nohome")
    env["SQLITE_TDE_CONFIG"] = os.path.join(d, "nohome", "none.conf")
    cmd = [C.CLI, "restore", "--s3", os.path.join(s3srv, "s3.env"), "--db-id", dbid, "--prefix", prefix,
           "--pubkey", os.path.join(d, "pub.pem")] + list(args) + ([out] if out else [])
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=d, timeout=300)


def open_restored(cfg, out):
    """The restored header names the primary's page map: remap (with the
    key) first, as for a standby's copy."""
    r = subprocess.run([C.CLI, "--config", cfg, "remap", out], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        C.bad("remap %s: %s" % (out, (r.stdout + r.stderr).strip()[:300]))
        return None
    return C.connect(out, cfg)


def start_archiver(d, s3srv, db, cfg, prefix, log):
    f = open(os.path.join(d, log), "ab")
    return subprocess.Popen([C.CLI, "archive", "--s3", os.path.join(s3srv, "s3.env"),
                             "--prefix", prefix, "--sign-key", os.path.join(d, "sign.pem"),
                             "--segment-txns", "6", "--segment-ms", "250", "--cycle-ms", "20", db],
                            stdout=f, stderr=f)


def wait_for(cond, limit, what):
    """A bounded wait: it ends early only when cond holds."""
    t = time.time()
    while time.time() - t < limit:
        v = cond()
        if v:
            return v
        time.sleep(0.2)
    C.bad("timed out (%d s) waiting for %s" % (limit, what))
    return None


def spool_end(db):
    """The newest record's sequence: the state file's captured sequence,
    once the shipper has seen what a checkpoint's hook appended."""
    st = C.read_state(db + "-tdeship-state")
    return int(st.get("captured_seq", "0") or 0), int(st.get("peer0_acked_seq", "0") or 0)


def settle(db, archiver, what):
    """Wait until the archive acknowledged everything captured and the
    capture stands still (two reads 0.6 s apart): then the bucket holds
    every record the spool had."""
    last = [None]

    def done():
        if archiver.poll() is not None:
            C.bad("the archiver exited (%s) while %s" % (archiver.returncode, what))
            return True
        cap, ack = spool_end(db)
        now = (cap, ack)
        ok = cap > 0 and ack == cap and last[0] == now
        last[0] = now
        return ok
    t = time.time()
    while time.time() - t < 120:
        if done():
            return spool_end(db)
        time.sleep(0.6)
    C.bad("timed out waiting for the archive to catch up (%s): %s" % (what, spool_end(db)))
    return spool_end(db)


# ---- 1. twenty points in time -------------------------------------------

def workload_step(db, rng, k):
    """Transaction k (deterministic from rng's state); returns the
    checkpoint mode to run after it, or None."""
    kind = k % 5
    db.execute("BEGIN")
    if kind == 0:                                       # large: many WAL frames
        for j in range(rng.randint(40, 100)):
            db.execute("INSERT INTO t(v, b) VALUES(?, ?)", ("big %d.%d" % (k, j), rng.randbytes(rng.randint(1000, 4000))))
    elif kind in (1, 3):                                # a few small inserts
        for j in range(rng.randint(1, 8)):
            db.execute("INSERT INTO t(v, b) VALUES(?, ?)", ("row %d.%d" % (k, j), rng.randbytes(rng.randint(10, 400))))
    elif kind == 2:                                     # updates of a range
        lo = rng.randint(1, 40 * k)
        db.execute("UPDATE t SET v = v || ?, b = substr(b, 1, ?) WHERE k BETWEEN ? AND ?",
                   ("+%d" % k, rng.randint(5, 900), lo, lo + rng.randint(0, 60)))
    else:                                               # deletes of a range
        lo = rng.randint(1, 40 * k)
        db.execute("DELETE FROM t WHERE k BETWEEN ? AND ?", (lo, lo + rng.randint(0, 30)))
    db.execute("UPDATE meta SET k = ?", (k,))
    db.execute("COMMIT")
    modes = {7: "PASSIVE", 5: "FULL", 3: "RESTART", 2: "TRUNCATE"}
    for m in (7, 5, 3, 2):
        if k % (m * 4 + 1) == 0:
            return modes[m]
    return None


def make_schema(db):
    db.execute("CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT, b BLOB)")
    db.execute("CREATE TABLE meta(k INTEGER)")
    db.execute("INSERT INTO meta VALUES(0)")


def points_in_time(d, s3srv, s3, cfg):
    C.step("1. restore to %d random points in time (seed %d), each equal to a plain SQLite replay" % (N_POINTS, SEED))
    prefix = "pitr/time"
    pdb = os.path.join(d, "pitr.db")
    db = C.connect(pdb, cfg)
    db.execute("PRAGMA journal_mode=WAL")
    make_schema(db)
    mirror = sqlite3.connect(":memory:", isolation_level=None)
    make_schema(mirror)
    hashes = {0: content_hash(mirror)}
    a = start_archiver(d, s3srv, pdb, cfg, prefix, "pitr-archive.log")
    try:
        wait_for(lambda: any("/base/" in k for k in s3.keys(prefix)), 120, "the first base copy")
        time.sleep(0.1)
        rng_w, rng_m = random.Random(SEED), random.Random(SEED)
        pause = random.Random(SEED + 1)
        begin, end = {}, {0: time.time()}
        modes_run = set()
        t_work = time.time()
        for k in range(1, N_TXN + 1):
            time.sleep(pause.uniform(0.01, 0.04))
            begin[k] = time.time()
            mode = workload_step(db, rng_w, k)
            workload_step(mirror, rng_m, k)
            if mode:
                db.execute("PRAGMA wal_checkpoint(%s)" % mode).fetchall()
                modes_run.add(mode)
            end[k] = time.time()
            hashes[k] = content_hash(mirror)
        t_work = time.time() - t_work
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        db.close()
        C.check(modes_run == {"PASSIVE", "FULL", "RESTART", "TRUNCATE"},
                "%d transactions in %.1f s, checkpoints of every mode run between them (%s)"
                % (N_TXN, t_work, ", ".join(sorted(modes_run))))
        settle(pdb, a, "the workload")
    finally:
        C.stop(a)
    C.check(a.returncode == 0, "the archiver stops cleanly on SIGTERM (exit %s)" % a.returncode)
    res = read_bucket(s3, d, prefix, os.path.join(d, "pub.pem"))
    bases, recs = res["bases"], res["recs"]
    C.check(not res["unjoined"], "each segment continues the chain of the base copy and the segments before it%s"
            % ("" if not res["unjoined"] else ": NOT %s" % res["unjoined"][:10]))
    if not bases:
        return
    b0, b0_cap = bases[0]
    after = [recs[s] for s in sorted(recs) if s > b0]
    framed = [r for r in after if r[1] == REC_TXN and r[2] > 0]
    C.check(len(framed) == N_TXN and not any(r[1] == REC_GAP for r in after),
            "after the base copy at %d: %d records, %d with frames (one per transaction; the rest header regions "
            "after checkpoints), no GAP" % (b0, len(after), len(framed)))
    caps = [r[3] for r in after]
    C.check(all(x <= y for x, y in zip(caps, caps[1:])), "capture times never go back along the sequence")
    if len(framed) != N_TXN:
        return
    tcap = {k + 1: r[3] for k, r in enumerate(framed)}
    lag = [tcap[k] - end[k] * 1000 for k in tcap]
    print("  capture after the end of the step: min %.0f ms, max %.0f ms; %d transactions captured only after "
          "the next one began" % (min(lag), max(lag), sum(1 for k in range(1, N_TXN) if tcap[k] >= begin[k + 1] * 1000)))
    windows = []
    for k in range(0, N_TXN):
        lo = max(int(end[k] * 1000), tcap.get(k, b0_cap)) + 1
        hi = int(begin[k + 1] * 1000) - 1
        if lo <= hi:
            windows.append((k, lo, hi))
    rng = random.Random(SEED)
    C.check(len(windows) >= N_POINTS, "%d of %d gaps between transactions hold a time after the commit and the "
            "capture and before the next BEGIN" % (len(windows), N_TXN))
    picks = sorted(rng.sample(windows, min(N_POINTS, len(windows))))
    times = [(k, rng.randint(lo, hi)) for k, lo, hi in picks]
    print("  seed %d; points (transaction, T ms): %s" % (SEED, times))
    dbid = db_id(pdb)
    good = 0
    t_r = time.time()
    for i, (k, t_ms) in enumerate(times):
        if i % 2:
            arg = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t_ms // 1000)) + ".%03dZ" % (t_ms % 1000)
        else:
            arg = str(t_ms)
        o = os.path.join(d, "pitr-%d.db" % i)
        r = restore(d, s3srv, dbid, prefix, ["--to-time", arg], o)
        if not C.check(r.returncode == 0, "restore --to-time %s: %s" % (arg, (r.stdout + r.stderr).strip()[:200])):
            continue
        rdb = open_restored(cfg, o)
        if rdb is None:
            continue
        got_k = rdb.execute("SELECT k FROM meta").fetchone()[0]
        h = content_hash(rdb)
        ic = rdb.execute("PRAGMA integrity_check").fetchone()[0]
        rdb.close()
        if C.check(got_k == k and h == hashes[k] and ic == "ok",
                   "--to-time %s (%d ms after transaction %d ended, %d ms before %d began) equals the mirror after "
                   "transaction %d%s" % (arg, t_ms - int(end[k] * 1000), k, int(begin[k + 1] * 1000) - t_ms, k + 1,
                                         k, "" if got_k == k else " (it holds transaction %d's counter)" % got_k)):
            good += 1
        os.unlink(o)
    print("  %d restores in %.1f s" % (len(times), time.time() - t_r))
    C.check(good == N_POINTS, "%d of %d points in time restored exactly" % (good, N_POINTS))
    r = restore(d, s3srv, dbid, prefix, [], os.path.join(d, "pitr-latest.db"))
    if C.check(r.returncode == 0, "restore latest"):
        rdb = open_restored(cfg, os.path.join(d, "pitr-latest.db"))
        if rdb is not None:
            C.check(content_hash(rdb) == hashes[N_TXN], "latest equals the mirror after transaction %d" % N_TXN)
            rdb.close()


# ---- 2 and 3: kill -9 ----------------------------------------------------

WRITER = r'''
import os, sys, time
sys.path.insert(0, %(dir)r)
import standby_common as C
db = C.connect(sys.argv[1], sys.argv[2])
i, stopfile, pause, size = int(sys.argv[3]), sys.argv[4], float(sys.argv[5]), int(sys.argv[6])
while not os.path.exists(stopfile):
    i += 1
    db.execute("BEGIN")
    db.execute("INSERT INTO w(id, v) VALUES(?, ?)", (i, os.urandom(size + i %% 700)))
    db.execute("INSERT INTO w2(id, v) VALUES(?, ?)", (i, "second row of %%d" %% i))
    db.execute("COMMIT")
    sys.stdout.write("%%d\n" %% i)
    sys.stdout.flush()
    if i %% 23 == 0:
        db.execute("PRAGMA wal_checkpoint(%%s)" %% ("TRUNCATE" if i %% 2 else "RESTART")).fetchall()
    time.sleep(pause)
db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
db.close()
'''


def start_writer(d, db, cfg, first, stopfile, pause=0.004, size=200):
    path = os.path.join(d, "writer.py")
    if not os.path.exists(path):
        open(path, "w").write(WRITER % {"dir": os.path.dirname(os.path.abspath(__file__))})
    out = os.path.join(d, "writer-%d.out" % first)
    p = subprocess.Popen([C.PY, path, db, cfg, str(first), stopfile, str(pause), str(size)], stdout=open(out, "wb"),
                         stderr=open(os.path.join(d, "writer.err"), "ab"))
    p.out = out
    return p


def printed(p):
    """Ids the (finished) writer printed whole: a line the kill cut is not one."""
    data = open(p.out, "rb").read().decode(errors="replace")
    return [int(x) for x in data.split("\n")[:-1] if x.strip()]


def kill_db(d, cfg, name):
    db_path = os.path.join(d, name)
    db = C.connect(db_path, cfg)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE w(id INTEGER PRIMARY KEY, v BLOB)")
    db.execute("CREATE TABLE w2(id INTEGER PRIMARY KEY, v TEXT)")
    db.close()
    return db_path


def restored_ids(d, s3srv, cfg, db_path, prefix, out):
    r = restore(d, s3srv, db_id(db_path), prefix, [], os.path.join(d, out))
    if not C.check(r.returncode == 0, "restore latest: %s" % (r.stdout + r.stderr).strip()[:200]):
        return None, None
    rdb = open_restored(cfg, os.path.join(d, out))
    if rdb is None:
        return None, None
    ids = {x[0] for x in rdb.execute("SELECT id FROM w")}
    ids2 = {x[0] for x in rdb.execute("SELECT id FROM w2")}
    ic = rdb.execute("PRAGMA integrity_check").fetchone()[0]
    rdb.close()
    C.check(ids == ids2 and ic == "ok", "both rows of every transaction, integrity ok (%d transactions)" % len(ids))
    return ids, r.stdout


def kill_writer(d, s3srv, s3, cfg):
    C.step("2. kill -9 of the writer, %d rounds (seed %d); the archiver keeps running" % (ROUNDS, SEED + 2))
    prefix = "pitr/killwriter"
    db_path = kill_db(d, cfg, "kw.db")
    stopfile = os.path.join(d, "kw.stop")
    a = start_archiver(d, s3srv, db_path, cfg, prefix, "kw-archive.log")
    rng = random.Random(SEED + 2)
    acked, unprinted_ok = [], set()
    try:
        wait_for(lambda: any("/base/" in k for k in s3.keys(prefix)), 120, "the first base copy")
        for rnd in range(ROUNDS):
            first = (rnd + 1) * 100000
            w = start_writer(d, db_path, cfg, first, stopfile)
            delay = rng.uniform(0.3, 1.5)
            time.sleep(delay)
            C.kill9(w)
            ids = printed(w)
            acked += ids
            unprinted_ok.add((max(ids) if ids else first) + 1)
            print("  round %d: killed after %.2f s, %d transactions printed" % (rnd, delay, len(ids)))
        open(stopfile, "w").close()
        w = start_writer(d, db_path, cfg, (ROUNDS + 1) * 100000, stopfile + ".never")
        wait_for(lambda: len(open(w.out, "rb").read().split(b"\n")) > 5 or w.poll() is not None, 60,
                 "the last writer's first commits")
        open(stopfile + ".never", "w").close()
        w.wait(120)
        final = printed(w)
        C.check(w.returncode == 0 and final, "a writer after the kills commits (%d) and checkpoints" % len(final))
        acked += final
        cap, ack = settle(db_path, a, "after the writer's kills")
        C.check(a.poll() is None, "the archiver ran through the writer's kills (acknowledged %d of %d captured)"
                % (ack, cap))
    finally:
        C.stop(a)
    res = read_bucket(s3, d, prefix, os.path.join(d, "pub.pem"))
    C.check(not res["unjoined"], "each segment continues the chain of the base copy and the segments before it%s"
            % ("" if not res["unjoined"] else ": NOT %s" % res["unjoined"][:10]))
    ids, _ = restored_ids(d, s3srv, cfg, db_path, prefix, "kw-latest.db")
    if ids is None:
        return
    missing = sorted(set(acked) - ids)
    extra = sorted(ids - set(acked))
    C.check(not missing, "every one of the %d printed transactions is in the restore to latest%s"
            % (len(acked), "" if not missing else ": MISSING %s" % missing[:20]))
    C.check(set(extra) <= unprinted_ok, "the restore holds %d transactions committed but not printed before the "
            "kill (each the one after a round's last printed id): %s" % (len(extra), extra))


def chain_vs_spool(db_path):
    """(sequence DB-tdeship-chain names, the spool's first sequence): after
    a completed trim the first is the second minus one."""
    st = C.read_state(db_path + "-tdeship-chain")
    r = subprocess.run([MOCK, "dump", db_path], capture_output=True, text=True, timeout=60)
    first = r.stdout.split()[0] if r.returncode == 0 and r.stdout.strip() else "?"
    return st.get("seq", "none"), first


def kill_archiver(d, s3srv, s3, cfg):
    C.step("3. kill -9 of the archiver, %d rounds (seed %d), restarted each time while a writer commits"
           % (ROUNDS, SEED + 3))
    prefix = "pitr/killarchiver"
    db_path = kill_db(d, cfg, "ka.db")
    stopfile = os.path.join(d, "ka.stop")
    rng = random.Random(SEED + 3)
    a = start_archiver(d, s3srv, db_path, cfg, prefix, "ka-archive.log")
    w = None
    try:
        wait_for(lambda: any("/base/" in k for k in s3.keys(prefix)), 120, "the first base copy")
        w = start_writer(d, db_path, cfg, 0, stopfile, pause=0.015)
        prev_ack, regress, behind, windows = 0, [], [], []
        for rnd in range(ROUNDS):
            delay = rng.uniform(0.4, 2.0)
            time.sleep(delay)
            _, ack = spool_end(db_path)
            C.kill9(a)
            top = highest_seg(s3, prefix)
            windows.append(chain_vs_spool(db_path))
            if top < ack:
                behind.append((rnd, ack, top))
            if ack < prev_ack:
                regress.append((rnd, prev_ack, ack))
            print("  round %d: killed after %.2f s; acknowledged %d, the bucket's segments reach %d; "
                  "DB-tdeship-chain at %s, the spool from %s" % (rnd, delay, ack, top, windows[-1][0], windows[-1][1]))
            prev_ack = max(prev_ack, ack)
            a = start_archiver(d, s3srv, db_path, cfg, prefix, "ka-archive.log")
            # the state file is the restarted archiver's once it names its pid
            st = wait_for(lambda: (lambda s: s if s.get("pid") == str(a.pid) and
                                   int(s.get("peer0_acked_seq", "0") or 0) >= prev_ack else None)(
                C.read_state(db_path + "-tdeship-state")) or a.poll() is not None, 60,
                "the restarted archiver to acknowledge at least %d" % prev_ack)
            if not isinstance(st, dict):
                regress.append((rnd, prev_ack, spool_end(db_path)[1]))
        C.check(not behind, "at every kill the bucket held every sequence the archiver had acknowledged%s"
                % ("" if not behind else ": %s" % behind))
        C.check(not regress, "no restarted archiver acknowledged less than the one before it%s"
                % ("" if not regress else ": %s" % regress))
        open(stopfile, "w").close()
        w.wait(120)
        ids_w = printed(w)
        C.check(w.returncode == 0 and len(ids_w) > 50, "the writer committed %d transactions meanwhile" % len(ids_w))
        cap, ack = settle(db_path, a, "after the archiver's kills")
        C.check(ack == cap and cap > 0, "the last archiver caught up: acknowledged %d of %d captured" % (ack, cap))
    finally:
        if w is not None:
            C.kill9(w)
        C.stop(a)
    final_restore(d, s3srv, s3, cfg, db_path, prefix, ids_w, cap, windows)


def final_restore(d, s3srv, s3, cfg, db_path, prefix, ids_w, cap, windows):
    """The bucket read back, then a restore to latest holding exactly the
    committed transactions ids_w (or, with the known chain bug, refused at
    the first segment that does not join, and a restore before it holding a
    prefix of them)."""
    res = read_bucket(s3, d, prefix, os.path.join(d, "pub.pem"))
    recs = res["recs"]
    C.check(max(recs, default=0) >= cap, "the bucket holds up to sequence %d (captured %d)" % (max(recs, default=0), cap))
    if res["unjoined"]:
        chain_breaks(res, windows)
        first = res["unjoined"][0][0]
        out = os.path.join(d, os.path.basename(db_path) + "-latest.db")
        r = restore(d, s3srv, db_id(db_path), prefix, [], out)
        msg = (r.stdout + r.stderr).strip()
        C.check(r.returncode != 0 and "does not continue the chain" in msg and not os.path.exists(out)
                and not os.path.exists(out + ".part"),
                "restore latest is refused at the first segment that does not join (%d), nothing written: %s"
                % (first, msg[-200:]))
        r = restore(d, s3srv, db_id(db_path), prefix, ["--to-seq", str(first - 1)], os.path.join(d, os.path.basename(db_path) + "-prefix.db"))
        if C.check(r.returncode == 0, "restore --to-seq %d, before it: %s" % (first - 1, (r.stdout + r.stderr).strip()[:200])):
            rdb = open_restored(cfg, os.path.join(d, os.path.basename(db_path) + "-prefix.db"))
            if rdb is not None:
                ids = {x[0] for x in rdb.execute("SELECT id FROM w")}
                ids2 = {x[0] for x in rdb.execute("SELECT id FROM w2")}
                rdb.close()
                C.check(ids and ids == ids2 and ids == {x for x in ids_w if x <= max(ids)},
                        "it holds every committed transaction up to id %d, both rows of each" % max(ids or [0]))
        return
    ids, _ = restored_ids(d, s3srv, cfg, db_path, prefix, os.path.basename(db_path) + "-latest.db")
    if ids is not None:
        missing = sorted(set(ids_w) - ids)
        C.check(not missing and ids == set(ids_w), "the restore to latest holds exactly the %d committed "
                "transactions%s" % (len(ids_w), "" if not missing else ": MISSING %s" % missing[:20]))


def chain_breaks(res, windows):
    """Segments that verify alone but do not join: a failure.  Each point
    where the chain breaks is matched against the signature of the bug
    this test found in round 7 (the shipper gave a scan's first record F,
    following a trimmed part of the spool, the history's anchor chain), so
    the message says whether that bug is back."""
    segs = sorted(res["chains"])
    breaks = [res["unjoined"][0]] + [b for a, b in zip(segs, segs[1:])
                                     if res["chains"][a][1] != res["chains"][b][0] and b != res["unjoined"][0]]
    found = []
    for f, l in breaks:
        found.append((f, anchored_at(res, f)))
    explained = all(F is not None for _, F in found)
    text = ("%d segments (from %d) do not continue the chain from the base copy: breaks at %s, each (segment "
            "start, F) the anchor chain from the scan's first record F (src/repl/ship.c shipChainRec falls back to "
            "tdeChainAnchor); chain file vs spool start at each kill: %s"
            % (len(res["unjoined"]), res["unjoined"][0][0], found, windows))
    C.bad(("the round-7 anchor-chain bug is back: " if explained else "chain break: ") + text)


def chain_file(db_path, hist, seq, chain):
    """DB-tdeship-chain as shipChainSave writes it (tdeKvWrite: a magic
    line, KEY=VALUE lines, sha256= of what precedes it)."""
    body = b"sqlite-tde-chain 1\nhistory=%s\nseq=%d\nchain=%s\n" % (hist.hex().encode(), seq, chain.hex().encode())
    tmp = db_path + "-tdeship-chain.tmp"
    with open(tmp, "wb") as f:
        f.write(body + b"sha256=" + hashlib.sha256(body).hexdigest().encode() + b"\n")
    os.rename(tmp, db_path + "-tdeship-chain")


def crash_between_save_and_trim(d, s3srv, s3, cfg):
    """The state a kill -9 leaves between shipChainSave (DB-tdeship-chain
    names the new trim point, synced) and tdeSpoolTrim in shipTrim
    (src/repl/ship.c), made deterministic: the archiver stopped after a trim,
    the chain file then rewritten as shipChainSave would for a trim at the
    archived sequence X (its true chain, from the bucket), the spool left
    untrimmed.  A restarted archiver must go on with segments that continue
    the chain."""
    C.step("4. the archiver's crash between saving the chain and trimming the spool (deterministic)")
    prefix = "pitr/chainwindow"
    db_path = kill_db(d, cfg, "kc.db")
    stopfile = os.path.join(d, "kc.stop")
    a = start_archiver(d, s3srv, db_path, cfg, prefix, "kc-archive.log")
    w = None
    try:
        wait_for(lambda: any("/base/" in k for k in s3.keys(prefix)), 120, "the first base copy")
        w = start_writer(d, db_path, cfg, 0, stopfile, size=20000)       # the spool trims past 8 MiB
        wait_for(lambda: os.path.exists(db_path + "-tdeship-chain") or w.poll() is not None, 120,
                 "a first trim of the spool (DB-tdeship-chain)")
        open(stopfile, "w").close()
        w.wait(120)
        ids_w = printed(w)
        settle(db_path, a, "the first writer")
    finally:
        if w is not None:
            C.kill9(w)
        C.stop(a)
    before = chain_vs_spool(db_path)
    res = read_bucket(s3, d, prefix, os.path.join(d, "pub.pem"))
    x = max((l for _, l in res["chains"]), default=0)
    if not C.check(x > int(before[1] if before[1] != "?" else 0) and res["hist"] and not res["unjoined"],
                   "after a trim (chain file at %s, the spool from %s) the bucket holds up to %d, chained"
                   % (before[0], before[1], x)):
        return
    chain_file(db_path, res["hist"], x, bytes.fromhex(next(v[1] for k, v in res["chains"].items() if k[1] == x)))
    after = chain_vs_spool(db_path)
    print("  DB-tdeship-chain rewritten at %s (its true chain), the spool still from %s" % after, flush=True)
    stopfile2 = stopfile + "2"
    a = start_archiver(d, s3srv, db_path, cfg, prefix, "kc-archive.log")
    w = None
    try:
        w = start_writer(d, db_path, cfg, 100000, stopfile2)
        wait_for(lambda: len(open(w.out, "rb").read().split(b"\n")) > 60 or w.poll() is not None, 60,
                 "60 commits after the restart")
        open(stopfile2, "w").close()
        w.wait(120)
        ids_w += printed(w)
        cap, _ = settle(db_path, a, "the second writer")
    finally:
        if w is not None:
            C.kill9(w)
        C.stop(a)
    final_restore(d, s3srv, s3, cfg, db_path, prefix, ids_w, cap, [before, after])


def main():
    for tool in (S3C, CHECK, MOCK):
        if not os.access(tool, os.X_OK):
            C.bad("%s not built (libcurl >= 7.85 missing?)" % tool)
            C.finish("test_archive_pitr")
    d = C.workdir("archive_pitr")
    srv = os.path.join(d, "s3")
    timings = {}
    t = time.time()
    r = subprocess.run(["bash", S3SERVER, "start", srv], capture_output=True, text=True)
    started = os.path.isdir(os.path.join(srv, "run")) or r.returncode == 0
    try:
        if not C.check(r.returncode == 0, "s3server.sh start (%.1f s)" % (time.time() - t)):
            print(r.stdout[-2000:], r.stderr[-2000:])
            return
        timings["s3 server start"] = time.time() - t
        subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", os.path.join(d, "sign.pem")],
                       check=True, capture_output=True)
        os.chmod(os.path.join(d, "sign.pem"), 0o600)
        subprocess.run(["openssl", "pkey", "-in", os.path.join(d, "sign.pem"), "-pubout", "-out",
                        os.path.join(d, "pub.pem")], check=True, capture_output=True)
        cfg = C.make_config(d)
        s3 = S3(srv)
        only = os.environ.get("TDE_PITR_ONLY", "1234")       # for a quicker rerun of one part
        for i, (name, fn) in enumerate((("points in time", points_in_time), ("kill -9 of the writer", kill_writer),
                         ("kill -9 of the archiver", kill_archiver),
                         ("a crash between the chain save and the trim", crash_between_save_and_trim))):
            if str(i + 1) not in only:
                continue
            t = time.time()
            fn(d, srv, s3, cfg)
            timings[name] = time.time() - t
    finally:
        if started:
            subprocess.run(["bash", S3SERVER, "stop", srv], capture_output=True, text=True)
        for k, v in timings.items():
            print("timing: %s %.1f s" % (k, v))
        print("timing: total %.1f s" % (time.time() - T0))
    if C.NFAIL == 0 and not os.environ.get("TDE_KEEP_SCRATCH"):
        shutil.rmtree(d, ignore_errors=True)
    C.finish("test_archive_pitr")


if __name__ == "__main__":
    main()
