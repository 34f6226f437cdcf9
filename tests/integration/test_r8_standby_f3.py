"""A standby of a format-3 database (issue 24, docs/FORMAT.md "Format
version 3: Standby"): a version-3 primary at 1024-byte pages with more than
two groups of 508 pages (map regions past the first group), a real shipper
and standby following it through inserts, deletes that shrink the file
across a map region (auto_vacuum), checkpoints that fold the map; the
standby's copy keeps version 3's layout (its pages at off(N), its size
off(n) + P), reads the primary's rows with the key, and after promotion
holds the primary's pages byte for byte (decrypted copies compared),
takes writes and verifies.  Then a version-2 primary followed by a
standby is upgraded in place (`sqlite-tde upgrade --to 3`, shipper
stopped): the shipper records a GAP, the standby takes a base copy and ends
on version 3 with the primary's rows.

Real processes only (sqlite-tde ship/standby, the system SQLite through
Python with tde.so).  Environment: TDE_BUILD, TDE_TEST_TMP (set by ctest)."""

import hashlib
import os
import shutil
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standby_common as C  # noqa: E402

P = 1024            # page size: a small file with several groups
K = 508             # data pages per group (FORMAT.md "Layout")
M = max(8192, P)    # bytes of one map region


def off(n):
    """Physical offset of page n in version 3 (FORMAT.md "Layout")."""
    return 8192 + M * (1 + (n - 1) // K) + (n - 1) * P


def header_layout(path):
    """(format version, upgrade cursor) of the slot in force, read raw (the
    valid slot with the larger sequence; FORMAT.md "Header slot")."""
    with open(path, "rb") as f:
        region = f.read(8192)
    best = None
    for i in range(2):
        s = region[i * 4096:(i + 1) * 4096]
        if len(s) < 4096 or s[:8] != b"SQLT-TDE" or hashlib.sha256(s[:4064]).digest() != s[4064:4096]:
            continue
        seq = struct.unpack(">Q", s[12:20])[0]
        if best is None or seq > best[0]:
            best = (seq, struct.unpack(">H", s[8:10])[0], struct.unpack(">Q", s[4000:4008])[0])
    return (best[1], best[2]) if best else (None, None)


def blob(i):
    return hashlib.sha256(b"r8-%d" % i).digest() * 28      # 896 bytes: about a page per row


def insert(db, lo, hi, per=50):
    for a in range(lo, hi, per):
        db.execute("BEGIN")
        for i in range(a, min(hi, a + per)):
            db.execute("INSERT INTO t(id, v, b) VALUES(?, ?, ?)", (i, "v%d" % i, blob(i)))
        db.execute("COMMIT")


def content(path, cfg):
    db = C.connect(path, cfg, ro=True)
    try:
        h = hashlib.sha256()
        n = 0
        for r in db.execute("SELECT id, v, b FROM t ORDER BY id"):
            h.update(b"%d|%s|" % (r[0], r[1].encode()) + r[2])
            n += 1
        return n, h.hexdigest()
    finally:
        db.close()


def page_count(path, cfg):
    db = C.connect(path, cfg)
    try:
        return db.execute("PRAGMA page_count").fetchone()[0]
    finally:
        db.close()


def follow(pdb, sdb, cfg, what):
    """Wait for the standby, then compare: rows through the key, version-3
    size rule, layout in the copy's header."""
    seq = C.wait_caught_up(pdb, sdb)
    if not C.check(seq is not None, "%s: the standby caught up (sequence %s)" % (what, seq)):
        return None
    n = page_count(pdb, cfg)
    size = os.path.getsize(sdb)
    C.check(size == off(n) + P, "%s: the copy's size %d is version 3's for the primary's %d pages (off(%d) + P = %d)"
            % (what, size, n, n, off(n) + P))
    C.check(header_layout(sdb) == (3, 0), "%s: the copy's header says version 3, no move (%s)" % (what, header_layout(sdb)))
    p, s = content(pdb, cfg), content(sdb, cfg)
    C.check(p == s, "%s: the standby reads the primary's rows with the key (%d rows, %s)" % (what, s[0], p == s))
    return n


def spool_records(db):
    """(sequence, kind, key signature) of each record of db's spool
    (FORMAT.md "Ship spool"): kind 1 TXN, 2 MARK, 3 GAP."""
    a = open(db + "-tdeship", "rb").read()
    out, o = [], 96
    while o + 96 <= len(a) and a[o:o + 8] == b"TDESREC1":
        n = struct.unpack(">I", a[o + 88:o + 92])[0]
        out.append((struct.unpack(">Q", a[o + 8:o + 16])[0], a[o + 16], struct.unpack(">I", a[o + 92:o + 96])[0]))
        o += 96 + n + 32
    return out


def main():
    d = C.workdir("test_r8_standby_f3")
    C.FORMAT = "3"                   # this test is format 3 whatever the environment says
    cfg = C.make_config(d)
    cfg2 = os.path.join(d, "tde2.conf")
    with open(cfg2, "w") as f:      # same wallet, version-2 databases
        f.write(open(cfg).read().replace("format_version = 3", "format_version = 2"))
    os.makedirs(os.path.join(d, "sb"))
    os.makedirs(os.path.join(d, "sb2"))
    pdb = os.path.join(d, "primary.db")
    sdb = os.path.join(d, "sb", "standby.db")
    sport = C.free_port()
    ship = sb = None
    try:
        C.step("a version-3 primary at %d-byte pages, 300 rows; standby and shipper: base copy" % P)
        db = C.connect(pdb, cfg)
        db.execute("PRAGMA page_size=%d" % P)
        db.execute("PRAGMA auto_vacuum=FULL")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT, b BLOB)")
        insert(db, 0, 300)
        sb = C.start_standby(d, sdb, sport, conf="insecure")
        ship = C.start_ship(d, pdb, cfg, [sport], conf="insecure")
        follow(pdb, sdb, cfg, "base copy")
        C.check("base copy applied" in open(os.path.join(d, "standby.log")).read(), "the standby took a base copy")

        C.step("inserts past two groups of %d pages (map regions 1 and 2), a checkpoint that folds" % K)
        insert(db, 300, 1300)
        n = follow(pdb, sdb, cfg, "1300 rows")
        C.check(n is not None and n > 2 * K, "the primary has %s pages, more than %d" % (n, 2 * K))
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        insert(db, 1300, 1400)
        follow(pdb, sdb, cfg, "after a TRUNCATE checkpoint and 100 rows")
        raw = 0
        with open(pdb, "rb") as fp, open(sdb, "rb") as fs:
            for pg in range(2, 200):
                fp.seek(off(pg))
                fs.seek(off(pg))
                raw += fp.read(P) == fs.read(P)
        C.check(raw >= 100, "pages checkpointed on the primary and shipped to the standby lie at the same "
                "version-3 offsets (%d of 198 ciphertexts equal)" % raw)

        C.step("deletes that shrink the file across map regions, checkpoints")
        big = n or 0
        db.execute("DELETE FROM t WHERE id >= 900")
        n = follow(pdb, sdb, cfg, "rows >= 900 deleted")
        C.check(n is not None and n < 2 * K < big, "the file shrank across region 2 (%s -> %s pages)" % (big, n))
        db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        db.execute("DELETE FROM t WHERE id >= 400")
        insert(db, 5000, 5020, per=5)
        db.execute("PRAGMA wal_checkpoint(RESTART)")
        n = follow(pdb, sdb, cfg, "rows >= 400 deleted, 20 added, checkpoints")
        C.check(n is not None and n < K, "the file shrank across region 1 (%s pages)" % n)
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.close()
        n = follow(pdb, sdb, cfg, "primary closed")
        C.stop(ship)
        C.stop(sb)
        ship = sb = None

        C.step("promotion, writes on the promoted copy, verify; its pages are the primary's")
        r = subprocess.run([C.CLI, "--config", cfg, "standby", "--promote", sdb], capture_output=True, text=True)
        C.check(r.returncode == 0 and "page map reset" in r.stdout,
                "promote (and remap): %s" % (r.stdout + r.stderr).strip()[:300])
        outs = []
        for name, src in (("p.plain", pdb), ("s.plain", sdb)):
            out = os.path.join(d, name)
            r = subprocess.run([C.CLI, "--config", cfg, "decrypt", src, out], capture_output=True, text=True)
            C.check(r.returncode == 0, "decrypt %s: %s" % (os.path.basename(src), (r.stdout + r.stderr).strip()[:200]))
            outs.append(open(out, "rb").read() if os.path.exists(out) else b"")
        C.check(outs[0] == outs[1] and len(outs[0]) >= (n or 1) * P,
                "the promoted copy's pages equal the primary's byte for byte, decrypted (%d and %d bytes)"
                % (len(outs[0]), len(outs[1])))
        db = C.connect(sdb, cfg)
        insert(db, 6000, 6700)
        db.execute("DELETE FROM t WHERE id BETWEEN 6100 AND 6200")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        insert(db, 7000, 7010, per=5)
        db.close()
        r = subprocess.run([C.CLI, "--config", cfg, "verify", sdb], capture_output=True, text=True)
        C.check(r.returncode == 0, "verify the promoted copy after writes: %s" % (r.stdout + r.stderr).strip()[-300:])
        r = subprocess.run([C.CLI, "--config", cfg, "status", sdb], capture_output=True, text=True)
        C.check("format_version: 3" in r.stdout and "page_map: on" in r.stdout,
                "the promoted copy is version 3 with its map on: %s" % " ".join(
                    ln for ln in r.stdout.splitlines() if ln.startswith(("format_version", "page_map"))))
        C.check(content(sdb, cfg)[0] == 400 + 20 + 700 - 101 + 10, "the promoted copy holds its rows (%d)"
                % content(sdb, cfg)[0])

        upgrade_while_following(d, cfg2, cfg)
    finally:
        C.stop(ship)
        C.stop(sb)
    if C.NFAIL == 0 and not os.environ.get("TDE_KEEP_SCRATCH"):
        shutil.rmtree(d, ignore_errors=True)
    C.finish("test_r8_standby_f3")


def upgrade_while_following(d, cfg2, cfg):
    C.step("a version-2 primary with a standby, upgraded to version 3 (shipper stopped): GAP, base copy")
    pdb = os.path.join(d, "v2.db")
    sdb = os.path.join(d, "sb2", "standby.db")
    sport = C.free_port()
    db = C.connect(pdb, cfg2)
    db.execute("PRAGMA page_size=%d" % P)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT, b BLOB)")
    insert(db, 0, 700)
    db.close()
    C.check(header_layout(pdb) == (2, 0), "the primary is version 2 (%s)" % (header_layout(pdb),))
    sb = C.start_standby(d, sdb, sport, log="standby2.log", conf="insecure")
    C.FORMAT_CHECKED.add(pdb)        # version 2 on purpose (checked above)
    ship = C.start_ship(d, pdb, cfg2, [sport], log="ship2.log", conf="insecure")
    try:
        seq = C.wait_caught_up(pdb, sdb)
        C.check(seq is not None and header_layout(sdb) == (2, 0),
                "the standby follows the version-2 primary (sequence %s, %s)" % (seq, header_layout(sdb)))
        db = C.connect(pdb, cfg2)
        insert(db, 700, 800)
        db.close()
        C.check(C.wait_caught_up(pdb, sdb) is not None, "and its next transactions")
        C.stop(ship)
        last = spool_records(pdb)[-1]
        r = subprocess.run([C.CLI, "--config", cfg2, "upgrade", "--to", "3", pdb], capture_output=True, text=True)
        ulog = r.stderr
        C.check(r.returncode == 0 and header_layout(pdb) == (3, 0),
                "upgrade --to 3 with the shipper stopped: %s (%s)" % ((r.stdout + r.stderr).strip()[:200],
                                                                     header_layout(pdb)))
        ship = C.start_ship(d, pdb, cfg2, [sport], log="ship2.log", conf="insecure")
        db = C.connect(pdb, cfg2)
        insert(db, 800, 1200)
        db.execute("DELETE FROM t WHERE id BETWEEN 100 AND 300")
        db.close()
        seq = C.wait_caught_up(pdb, sdb)
        C.check(seq is not None, "the standby caught up after the upgrade (sequence %s)" % seq)
        # The VFS hook of the upgrade's own connection (its last close
        # deletes the WAL) or the restarted shipper captures the new header
        # region: a record with another key signature, then a GAP.
        recs = [x for x in spool_records(pdb) if x[0] > last[0]]
        i = next((j for j, x in enumerate(recs) if x[2] not in (0, last[2])), None)
        C.check(i is not None and any(x[1] == 3 and x[0] == recs[i][0] + 1 for x in recs[i:]),
                "the spool has a GAP right after the header region with the new layout (%s)" % recs[:6])
        slog = open(os.path.join(d, "ship2.log")).read() + ulog
        C.check("layout changed" in slog, "the layout change is logged: %s" % [
            ln[-120:] for ln in slog.splitlines() if "changed" in ln][:2])
        C.check(open(os.path.join(d, "standby2.log")).read().count("base copy applied") >= 2,
                "the standby took a second base copy")
        C.check(header_layout(sdb) == (3, 0), "the standby's copy ends on version 3 (%s)" % (header_layout(sdb),))
        n = page_count(pdb, cfg2)
        C.check(os.path.getsize(sdb) == off(n) + P, "the copy's size %d is version 3's for %d pages (%d)"
                % (os.path.getsize(sdb), n, off(n) + P))
        p, s = content(pdb, cfg2), content(sdb, cfg2)
        C.check(p == s, "the standby reads the upgraded primary's rows (%d rows, %s)" % (s[0], p == s))
    finally:
        C.stop(ship)
        C.stop(sb)
    r = subprocess.run([C.CLI, "--config", cfg, "standby", "--promote", sdb], capture_output=True, text=True)
    C.check(r.returncode == 0, "promote the upgraded standby: %s" % (r.stdout + r.stderr).strip()[:200])
    r = subprocess.run([C.CLI, "--config", cfg, "verify", sdb], capture_output=True, text=True)
    C.check(r.returncode == 0, "verify it: %s" % (r.stdout + r.stderr).strip()[-200:])


if __name__ == "__main__":
    main()
