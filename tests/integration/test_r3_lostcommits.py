"""A primary that lost commits and wrote past the old end again is never
spliced onto its old history (issue 22 item 9).

The spool's capture position is (WAL salts, last frame).  A power loss under
synchronous=NORMAL can take the last commits of a WAL generation away; the
primary then writes new commits into the same generation, at the same frame
indexes.  If the new history reaches past the old capture position before
the shipper's next capture, the old check (WAL index end < captured
position) sees nothing: the capture went on from the old position and
shipped the tail of the new history as if it continued the old one, and a
standby that had the lost commits applied that tail on top of them (a
corrupted copy).  The capture now compares the frame at the captured
position with the one it captured there (its stored header, whose checksum
covers every frame before it) and records a GAP with the "lost commits"
flag, so standbys take a base copy.

The window is forced, not waited for: after the files are put back, one
transaction larger than the lost ones is committed before the shipper
starts again.  Each round then reads the spool: a GAP with the rewind flag
must follow the old records, and no TXN record may continue the old
position.  TDE_LOST_ROUNDS rounds (default 50).

Environment: TDE_BUILD, TDE_TEST_TMP (set by ctest)."""

import os
import shutil
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standby_common as C  # noqa: E402

HOLDER = r"""
import sqlite3, sys, time
b = sqlite3.connect(":memory:"); b.enable_load_extension(True); b.load_extension(sys.argv[1])
db = sqlite3.connect("file:%s?vfs=tde&tde_config=%s" % (sys.argv[2], sys.argv[3]), uri=True)
db.execute("SELECT count(*) FROM t").fetchall()
print("open", flush=True)
time.sleep(3600)
"""

# n commits of one small row each, or (big) one transaction of many rows;
# no checkpoint: the WAL generation stays the same.
WRITE = r"""
import sqlite3, sys
b = sqlite3.connect(":memory:"); b.enable_load_extension(True); b.load_extension(sys.argv[1])
db = sqlite3.connect("file:%s?vfs=tde&tde_config=%s" % (sys.argv[2], sys.argv[3]), uri=True,
                     isolation_level=None, timeout=30)
db.execute("PRAGMA wal_autocheckpoint=0")
db.execute("PRAGMA synchronous=NORMAL")
n, big, tag = int(sys.argv[4]), sys.argv[5] == "big", sys.argv[6]
if big:
    db.execute("BEGIN")
    db.executemany("INSERT INTO t(v) VALUES(?)", [("%s-%d-" % (tag, i) + "y" * 900,) for i in range(n)])
    db.execute("COMMIT")
else:
    for i in range(n):
        db.execute("INSERT INTO t(v) VALUES(?)", ("%s-%d" % (tag, i),))
"""


def spool_records(path):
    """(seq, kind, flags, salt, iFirst, iLast) of every record (FORMAT.md "Ship spool")."""
    out = []
    data = open(path, "rb").read()
    off = 96
    while off + 96 <= len(data):
        h = data[off:off + 96]
        if h[:8] != b"TDESREC1":
            break
        seq = struct.unpack(">Q", h[8:16])[0]
        kind, flags = h[16], h[17]
        salt = h[24:32]
        i_first, i_last = struct.unpack(">II", h[36:44])
        plen = struct.unpack(">I", h[88:92])[0]
        out.append((seq, kind, flags, salt, i_first, i_last))
        off += 96 + plen + 32
    return out


def wait_spool(pdb, pred, timeout=120):
    """Poll the spool until pred(records) holds (a hang guard sized for a
    loaded machine: it decides nothing but "the shipper never captured")."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            recs = spool_records(pdb + "-tdeship")
        except OSError:
            recs = []
        if pred(recs):
            return True
        time.sleep(0.05)
    return False


def ntxn(recs):
    return sum(1 for r in recs if r[1] == 1)


def main():
    rounds = int(os.environ.get("TDE_LOST_ROUNDS", "50"))
    d = C.workdir("test_r3_lostcommits")
    cfg = C.make_config(d)
    pdb = os.path.join(d, "primary.db")
    w = os.path.join(d, "write.py")
    hscript = os.path.join(d, "hold.py")
    with open(w, "w") as f:
        f.write(WRITE)
    with open(hscript, "w") as f:
        f.write(HOLDER)
    db = C.connect(pdb, cfg)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
    db.close()
    port = C.free_port()      # nobody listens: the shipper captures and retries the standby

    def write(n, big=False, tag="r"):
        r = subprocess.run([C.PY, w, C.EXT, pdb, cfg, str(n), "big" if big else "small", tag],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            C.bad("writer failed: %s" % r.stderr[-1000:])

    def hold():
        h = subprocess.Popen([C.PY, hscript, C.EXT, pdb, cfg], stdout=subprocess.PIPE, text=True)
        h.stdout.readline()
        return h

    nmerged = ngap = nlog = 0
    log = os.path.join(d, "ship.log")
    for k in range(rounds):
        h = hold()
        n0 = ntxn(spool_records(pdb + "-tdeship")) if os.path.exists(pdb + "-tdeship") else 0
        ship = C.start_ship(d, pdb, cfg, [port], conf="insecure", cycle=20)
        write(4, tag="a%d" % k)
        ok1 = wait_spool(pdb, lambda recs: ntxn(recs) >= n0 + 4)
        # The state on disk; then commits that a power loss will take away.
        shutil.copyfile(pdb, pdb + ".disk")
        shutil.copyfile(pdb + "-wal", pdb + "-wal.disk")
        write(10, tag="lost%d" % k)
        ok2 = wait_spool(pdb, lambda recs: ntxn(recs) >= n0 + 14)
        recs = spool_records(pdb + "-tdeship")
        old_end = [r for r in recs if r[1] == 1][-1]
        C.stop(ship)
        C.kill9(h)                                   # no clean close: the WAL stays
        os.replace(pdb + ".disk", pdb)
        os.replace(pdb + "-wal.disk", pdb + "-wal")
        os.unlink(pdb + "-shm")
        # The window, forced: past the old end before any capture.
        h = hold()
        write(120, big=True, tag="new%d" % k)
        nlog0 = open(log).read().count("lost commits")
        ship = C.start_ship(d, pdb, cfg, [port], conf="insecure", cycle=20)
        ok3 = wait_spool(pdb, lambda recs: any(r[0] > old_end[0] and r[1] != 2 for r in recs))
        C.stop(ship)
        after = [r for r in spool_records(pdb + "-tdeship") if r[0] > old_end[0] and r[1] != 2]
        gap = bool(after) and after[0][1] == 3 and (after[0][2] & 4) != 0
        merged = any(r[1] == 1 and r[3] == old_end[3] and r[4] == old_end[5] + 1 for r in after)
        ngap += gap
        nmerged += merged
        nlog += open(log).read().count("lost commits") > nlog0
        if not (ok1 and ok2 and ok3):
            C.bad("round %d: the shipper did not capture in time (%s %s %s)" % (k, ok1, ok2, ok3))
        # Next round: a new WAL generation (the holder's close checkpoints and removes the WAL).
        C.kill9(h)
        c = C.connect(pdb, cfg)
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        c.close()
    C.check(nmerged == 0, "no round spliced the new history onto the old one (%d of %d merged)" % (nmerged, rounds))
    C.check(ngap == rounds, "every round recorded a GAP with the lost-commits flag right after the old records "
            "(%d of %d)" % (ngap, rounds))
    C.check(nlog == rounds, "the shipper logged 'lost commits' in every round (%d of %d)" % (nlog, rounds))
    c = C.connect(pdb, cfg)
    C.check(c.execute("PRAGMA integrity_check").fetchone()[0] == "ok", "the primary is intact")
    c.close()
    C.finish("test_r3_lostcommits")


if __name__ == "__main__":
    main()
