"""Retention of the keyless archive (issue 27, docs/ARCHIVE.md "Retention")
against the local Ceph S3 server (tests/lib/s3server.sh, stopped by pid at
the end, also on failure).

A real primary (WAL, the tde VFS) commits a deterministic workload while
`sqlite-tde archive` uploads it with a base copy every 1.5 s (several base
copies and segments); a plain SQLite mirror runs the same workload and is
snapshotted after every transaction.  Then:
  - `archive --prune --retain-bases 2 --dry-run` lists exactly the objects
    the rule lets go and deletes nothing;
  - `--retain-age 1d` (a window covering every point) deletes nothing;
  - `--retain-bases 2` leaves exactly the expected set (the two newest base
    copies, the segments whose last sequence is not below the older of
    them), writes one archive_prune audit line;
  - `restore --list` shows the two kept points; a restore to the oldest
    kept point and to latest (no keystore reachable) each equal the mirror
    then; a restore to a pruned point is refused, nothing written;
  - the archiver's own retention (`--retain-bases 2`) after a new base copy;
  - a new history (a new spool): the old one goes whole once the new one
    holds two base copies.

Environment: TDE_BUILD, TDE_TEST_TMP (set by ctest)."""

import os
import shutil
import sqlite3
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standby_common as C  # noqa: E402
from archive_common import clean_env, db_id, read_restored, rows, s3env  # noqa: E402
import archive_common as A  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
S3C = os.path.join(C.BUILD, "s3_client")
PREFIX = "arch/retain"


def listing(srv):
    """The keys under PREFIX/, or None when the listing failed."""
    e = s3env(srv)
    env = dict(os.environ, S3_ENDPOINT=e["S3_ENDPOINT"], S3_REGION=e["S3_REGION"], S3_BUCKET=e["S3_BUCKET"],
               S3_CA_FILE=e["S3_CA_FILE"])
    r = subprocess.run([S3C, "--cred", os.path.join(srv, "s3.env"), "list", PREFIX + "/"], env=env,
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        C.bad("s3_client list: %s" % r.stderr[-300:])
        return None
    return sorted(line.split()[0] for line in r.stdout.splitlines() if not line.startswith("count "))


def bases_of(keys):
    return sorted((int(k[-21:-5], 16), k) for k in keys if k.endswith(".base"))


def segs_of(keys):
    return sorted((int(k[-37:-21], 16), int(k[-20:-4], 16), k) for k in keys if k.endswith(".seg"))


def expected(keys, n):
    """What --retain-bases n keeps of one history: the n newest base copies
    and every segment whose last sequence is not below the oldest of them."""
    bases = bases_of(keys)
    keep = bases[-n:]
    s_keep = keep[0][0]
    return sorted([k for _, k in keep] + [k for _, last, k in segs_of(keys) if last >= s_keep]), s_keep


def prune(d, srv, args):
    r = subprocess.run([C.CLI, "archive", "--prune", "--s3", os.path.join(srv, "s3.env"), "--prefix", PREFIX]
                       + list(args), capture_output=True, text=True, env=clean_env(d), timeout=600)
    return r


def restore(d, srv, dbid, args, out):
    cmd = [C.CLI, "restore", "--s3", os.path.join(srv, "s3.env"), "--db-id", dbid, "--prefix", PREFIX,
           "--pubkey", os.path.join(d, "pub.pem")] + list(args) + ([out] if out else [])
    return subprocess.run(cmd, capture_output=True, text=True, env=clean_env(d), cwd=d, timeout=600)


def start_archiver(d, srv, cfg, db, extra=()):
    log = open(os.path.join(d, "archiver.log"), "ab")
    return subprocess.Popen([C.CLI, "archive", "--s3", os.path.join(srv, "s3.env"), "--prefix",
                             PREFIX, "--sign-key", os.path.join(d, "sign.pem"), "--segment-txns", "5",
                             "--segment-ms", "300", "--cycle-ms", "20", "--base-every-ms", "1500"] + list(extra)
                            + [db], stdout=log, stderr=log)


def spool_last(db):
    """The newest sequence the shipper captured (its state file)."""
    st = C.read_state(db + "-tdeship-state") if os.path.exists(db + "-tdeship-state") else {}
    return int(st.get("captured_seq", "0") or 0)


def workload(db, mirror, snaps, k0, k1, pause):
    for k in range(k0, k1):
        A.txn(db, k, big=100)
        A.txn(mirror, k, big=100)
        snaps[k] = rows(mirror)
        time.sleep(pause)


def caught_up(srv, db, limit=180):
    """Wait until the bucket's segments reach what the shipper captured."""
    t0 = time.time()
    while time.time() - t0 < limit:
        want = spool_last(db)
        keys = listing(srv) or []
        top = max([last for _, last, _ in segs_of(keys)] + [s for s, _ in bases_of(keys)] + [0])
        if want and top >= want:
            return keys
        time.sleep(0.5)
    C.bad("the archive did not catch up with the spool (%d) in %d s" % (spool_last(db), limit))
    return listing(srv) or []


def main():
    t_start = time.time()
    if not os.access(S3C, os.X_OK):
        C.bad("%s not built (libcurl >= 7.85 missing?)" % S3C)
        C.finish("test_archive_retain")
    d = C.workdir("test_archive_retain")
    srv = os.path.join(d, "s3")
    started = False
    procs = []
    try:
        C.step("the local S3 server")
        t0 = time.time()
        r = subprocess.run(["bash", os.path.join(ROOT, "tests/lib/s3server.sh"), "start", srv],
                           capture_output=True, text=True)
        started = os.path.isdir(os.path.join(srv, "run")) or r.returncode == 0
        if not C.check(r.returncode == 0, "s3server.sh start (%.1f s)" % (time.time() - t0)):
            print(r.stdout[-2000:], r.stderr[-2000:])
            return
        run(d, srv, procs)
    finally:
        for p in procs:
            C.stop(p)
        if started:
            subprocess.run(["bash", os.path.join(ROOT, "tests/lib/s3server.sh"), "stop", srv],
                           capture_output=True, text=True)
        print("test_archive_retain: %.1f s in all" % (time.time() - t_start))
    if C.NFAIL == 0 and not os.environ.get("TDE_KEEP_SCRATCH"):
        shutil.rmtree(d, ignore_errors=True)
    C.finish("test_archive_retain")


def run(d, srv, procs):
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", os.path.join(d, "sign.pem")], check=True,
                   capture_output=True)
    os.chmod(os.path.join(d, "sign.pem"), 0o600)
    subprocess.run(["openssl", "pkey", "-in", os.path.join(d, "sign.pem"), "-pubout", "-out",
                    os.path.join(d, "pub.pem")], check=True, capture_output=True)
    cfg = C.make_config(d)

    C.step("a primary archived with a base copy every 1.5 s; the plain SQLite mirror")
    pdb = os.path.join(d, "primary.db")
    db = C.connect(pdb, cfg)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT, b BLOB)")
    mirror = sqlite3.connect(":memory:", isolation_level=None)
    mirror.execute("CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT, b BLOB)")
    snaps = {0: rows(mirror)}
    a = start_archiver(d, srv, cfg, pdb)
    procs.append(a)
    k = 1
    t0 = time.time()
    while time.time() - t0 < 240 and (k < 60 or len(bases_of(listing(srv) or [])) < 4):
        workload(db, mirror, snaps, k, k + 10, 0.05)
        k += 10
    keys = caught_up(srv, pdb)
    C.stop(a)
    keys = listing(srv) or []
    bases = bases_of(keys)
    dbid = db_id(pdb)
    C.check(len(bases) >= 4 and len(segs_of(keys)) >= 6, "%d transactions: %d base copies at %s, %d segments"
            % (k - 1, len(bases), [s for s, _ in bases], len(segs_of(keys))))
    want, s_keep = expected(keys, 2)
    gone = sorted(set(keys) - set(want))
    C.check(len(gone) >= 3, "--retain-bases 2 should delete %d objects (keeps from the base at %d)"
            % (len(gone), s_keep))

    C.step("--prune --dry-run lists what would go, deletes nothing")
    r = prune(d, srv, ["--retain-bases", "2", "--dry-run", "--db-id", dbid])
    listed = sorted(line.split()[-1] for line in r.stdout.splitlines() if line.startswith("would delete "))
    C.check(r.returncode == 0 and listed == gone, "the dry run lists exactly the %d objects the rule lets go: %s"
            % (len(gone), (r.stdout + r.stderr).strip().splitlines()[-1:]))
    C.check(listing(srv) == keys, "the dry run deleted nothing (%d objects)" % len(keys))
    audit = pdb + "-tdeship-audit"
    n_audit = open(audit).read().count("archive_prune") if os.path.exists(audit) else 0

    C.step("--retain-age with a window covering every point keeps everything")
    r = prune(d, srv, ["--retain-age", "1d", pdb])
    C.check(r.returncode == 0 and listing(srv) == keys and "0 object(s)" in r.stdout,
            "--retain-age 1d: nothing deleted: %s" % (r.stdout + r.stderr).strip()[-200:])
    r = prune(d, srv, ["--retain-age", "1d", "--retain-bases", "2", "--dry-run", pdb])
    C.check(r.returncode == 0 and "would delete" not in r.stdout,
            "--retain-age 1d with --retain-bases 2: what either rule keeps stays (nothing would go)")

    C.step("--prune --retain-bases 2 (the database id from the header, no key)")
    r = prune(d, srv, ["--retain-bases", "2", pdb])
    left = listing(srv)
    C.check(r.returncode == 0 and left == want, "the objects left are exactly the expected %d (kept from the base "
            "at %d): %s" % (len(want), s_keep, (r.stdout + r.stderr).strip().splitlines()[-1:]))
    if left != want:
        print("  left but not expected: %s\n  expected but gone: %s" % (sorted(set(left or []) - set(want)),
                                                                      sorted(set(want) - set(left or []))))
    text = open(audit).read() if os.path.exists(audit) else ""
    C.check(text.count("archive_prune") == n_audit + 1, "one archive_prune line in the audit log: %s"
            % [line for line in text.splitlines() if "archive_prune" in line][-1:])
    r = prune(d, srv, ["--retain-bases", "2", pdb])
    C.check(r.returncode == 0 and listing(srv) == want, "a second prune deletes nothing more")

    C.step("restore --list, to the oldest kept point, to latest; a pruned point refused")
    r = restore(d, srv, dbid, ["--list"], None)
    C.check(r.returncode == 0 and r.stdout.count("restorable to sequences") == 2
            and ("base %d " % s_keep) in r.stdout, "--list shows the two kept base copies:\n%s" % r.stdout.strip())
    s_next = bases_of(want)[-1][0] - 1
    points = (("the oldest kept point (--to-seq %d)" % s_keep, ["--to-seq", str(s_keep)]),
              ("the point before the newest kept base (--to-seq %d: the oldest kept base and the segments "
               "after it)" % s_next, ["--to-seq", str(s_next)]),
              ("latest", []))
    for i, (what, args) in enumerate(points):
        o = os.path.join(d, "r%d.db" % i)
        r = restore(d, srv, dbid, args, o)
        if not C.check(r.returncode == 0, "restore %s: %s" % (what, (r.stdout + r.stderr).strip()[:200])):
            continue
        got, ic = read_restored(cfg, o)
        kk = max((row[0] for row in got), default=0)
        C.check(got == snaps[kk] and ic == "ok" and (kk == k - 1 if not args else 0 < kk < k - 1),
                "%s equals the mirror after transaction %d (%d rows), integrity ok" % (what, kk, len(got)))
    o = os.path.join(d, "pruned.db")
    r = restore(d, srv, dbid, ["--to-seq", str(bases[0][0])], o)
    C.check(r.returncode != 0 and "oldest base copy" in r.stderr and not os.path.exists(o)
            and not os.path.exists(o + ".part"), "a restore to a pruned point (--to-seq %d) is refused, nothing "
            "written: %s" % (bases[0][0], r.stderr.strip()[:200]))

    C.step("the archiver's own retention (--retain-bases 2) after a new base copy")
    newest = bases_of(want)[-1][0]
    n_audit = open(audit).read().count("archive_prune")
    a = start_archiver(d, srv, cfg, pdb, ["--retain-bases", "2"])
    procs.append(a)
    t0 = time.time()
    while time.time() - t0 < 240:
        workload(db, mirror, snaps, k, k + 10, 0.05)
        k += 10
        b = bases_of(listing(srv) or [])
        if len([s for s, _ in b if s > newest]) >= 2 and open(audit).read().count("archive_prune") > n_audit:
            break
    keys = caught_up(srv, pdb)
    C.stop(a)
    db.close()
    keys = listing(srv) or []
    b = bases_of(keys)
    want2, s_keep2 = expected(keys, 2)
    C.check(len(b) == 2 and b[0][0] > newest, "the archiver kept its two newest base copies (%s), all older ones "
            "gone" % [s for s, _ in b])
    C.check(keys == want2, "no segment below the oldest kept base (%d) is left: %d objects" % (s_keep2, len(keys)))
    text = open(audit).read()
    C.check(text.count("archive_prune") > n_audit, "the archiver wrote archive_prune audit lines: %s"
            % [line for line in text.splitlines() if "archive_prune" in line][-1:])
    o = os.path.join(d, "after.db")
    r = restore(d, srv, dbid, [], o)
    if C.check(r.returncode == 0, "restore latest after the archiver's retention: %s" % r.stdout.strip()[:200]):
        got, ic = read_restored(cfg, o)
        C.check(got == snaps[k - 1] and ic == "ok", "it equals the mirror after transaction %d" % (k - 1))
    k = new_history(d, srv, cfg, pdb, mirror, snaps, k, keys, procs)


def new_history(d, srv, cfg, pdb, mirror, snaps, k, old_keys, procs):
    """A new spool (a new history id): the archiver's own --retain-bases 2
    deletes the old history whole once the new one holds two base copies."""
    C.step("a new history: the old one goes whole once the new one holds 2 base copies")
    hist = lambda key: key.split("/")[-3]  # noqa: E731
    h_old = {hist(x) for x in old_keys}
    os.rename(pdb + "-tdeship", pdb + "-tdeship.old")
    db = C.connect(pdb, cfg)
    a = start_archiver(d, srv, cfg, pdb, ["--retain-bases", "2"])
    procs.append(a)
    t0 = time.time()
    keys = []
    while time.time() - t0 < 240:
        workload(db, mirror, snaps, k, k + 10, 0.05)
        k += 10
        keys = listing(srv) or []
        if not {hist(x) for x in keys} & h_old:
            break
    caught_up(srv, pdb)
    C.stop(a)
    db.close()
    keys = listing(srv) or []
    hists = {hist(x) for x in keys}
    C.check(len(hists) == 1 and not hists & h_old and len(bases_of(keys)) == 2,
            "only the new history is left (%s), with 2 base copies; the old one (%s) went whole"
            % (sorted(hists), sorted(h_old)))
    o = os.path.join(d, "newhist.db")
    r = restore(d, srv, db_id(pdb), [], o)
    if C.check(r.returncode == 0, "restore latest: %s" % r.stdout.strip()[:200]):
        got, ic = read_restored(cfg, o)
        C.check(got == snaps[k - 1] and ic == "ok", "it equals the mirror after transaction %d" % (k - 1))
    return k


if __name__ == "__main__":
    main()
