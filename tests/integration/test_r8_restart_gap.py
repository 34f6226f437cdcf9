"""A WAL restart whose writer died before it wrote the new WAL header is
not a loss of commits (round 8; the false "the primary lost commits" of
test_archive_pitr part 2 and test_standby_faults).

SQLite restarts the WAL only after a checkpoint copied every frame into the
database: the restart first writes the WAL index (new salts, mxFrame 0,
nothing backfilled) and writes the new WAL header with the first frame of
the next transaction.  A writer killed between the two leaves the index of
the next generation beside a -wal that still holds the old, fully copied
one.  The shipper's capture then found no WAL index of the file's
generation, scanned the file from the frame after its capture position,
found nothing, and took "nothing" for "the WAL ends at frame 0": it
recorded that the primary lost commits (a GAP; standbys and the archive
need a base copy) and captured the old generation's frames again, in a
loop every few cycles until a writer came back.  Under ASan's timing a
kill -9 of a writer landed in that window in most rounds of
test_archive_pitr part 2.

The test makes that state exactly, without a timing race: a shipper and a
standby follow a WAL-mode primary; a checkpoint (RESTART) copies every
frame; then a separate process, holding SQLite's WAL write lock (byte 120
of the -shm) as a writer would, writes the index a restart writes
(SQLite's walRestartHdr: salt-1 + 1, a new salt-2, mxFrame 0, iChange + 1,
checksum, both copies; nBackfill 0, read marks reset) and exits without
touching the -wal.  Checked: the shipper records no GAP while the state
lasts (many capture cycles), the next writer's transactions (the new
generation) ship without a GAP or a second base copy, and the standby's
copy equals the primary.  Before the fix the first check failed.
"""

import os
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standby_common as C  # noqa: E402

# The restart's index, written by a separate process: the lock it takes
# (fcntl on the -shm, as the unix VFS does) must not be one of the test
# process's own, whose close would drop its SQLite connection's locks.
RESTART = r'''
import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX, 1, 120)          # WAL_WRITE_LOCK
h = bytearray(os.pread(fd, 136, 0))
assert h[0:48] == h[48:96] and h[12] == 1, "the WAL index header is not valid"
hdr = h[0:48]
struct.pack_into("<I", hdr, 8, (struct.unpack_from("<I", hdr, 8)[0] + 1) & 0xffffffff)   # iChange
struct.pack_into("<I", hdr, 16, 0)                                                        # mxFrame
salt1 = (struct.unpack_from(">I", hdr, 32)[0] + 1) & 0xffffffff
hdr[32:36] = struct.pack(">I", salt1)
hdr[36:40] = os.urandom(4)
s1 = s2 = 0
for i in range(0, 40, 8):
    x0, x1 = struct.unpack_from("<II", hdr, i)
    s1 = (s1 + x0 + s2) & 0xffffffff
    s2 = (s2 + x1 + s1) & 0xffffffff
struct.pack_into("<II", hdr, 40, s1, s2)
os.pwrite(fd, bytes(hdr), 48)
os.pwrite(fd, bytes(hdr), 0)
os.pwrite(fd, struct.pack("<I", 0), 96)                                                               # nBackfill
os.pwrite(fd, struct.pack("<IIII", 0, 0xffffffff, 0xffffffff, 0xffffffff), 104)                       # aReadMark[1..4]
os.pwrite(fd, struct.pack("<I", 0), 128)                                                               # nBackfillAttempted
print(bytes(hdr[32:40]).hex())
fcntl.lockf(fd, fcntl.LOCK_UN, 1, 120)
'''


def wal_salts(path):
    with open(path, "rb") as f:
        b = f.read(32)
    return b[16:24].hex() if len(b) == 32 else None


def gaps(log):
    text = open(log).read()
    return [ln for ln in text.splitlines() if "lost commits" in ln or "discarded" in ln or "need a base copy" in ln]


def main():
    d = C.workdir("r8_restart_gap")
    cfg = C.make_config(d)
    db_path = os.path.join(d, "p.db")
    os.makedirs(os.path.join(d, "sb"))
    sb_path = os.path.join(d, "sb", "copy.db")
    writer = C.connect(db_path, cfg)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
    port = C.free_port()
    sb = C.start_standby(d, sb_path, port, conf="insecure")
    ship = C.start_ship(d, db_path, cfg, [port], conf="insecure")
    log = os.path.join(d, "ship.log")
    try:
        C.step("1. a standby follows 40 transactions; a RESTART checkpoint copies every frame")
        for i in range(40):
            writer.execute("INSERT INTO t(id, v) VALUES(?, ?)", (i, "row %d " % i * 20))
        C.check(C.wait_caught_up(db_path, sb_path) is not None, "the standby caught up")
        busy, nlog, nckpt = writer.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
        C.check(busy == 0 and nlog > 0 and nlog == nckpt, "the checkpoint copied every frame (%d of %d)" % (nckpt, nlog))
        C.check(C.wait_caught_up(db_path, sb_path) is not None, "the standby caught up after the checkpoint")
        base_copies = open(os.path.join(d, "ship.log")).read().count("sending a base copy")

        C.step("2. the index of a restart whose writer died before the new WAL header")
        old = wal_salts(db_path + "-wal")
        r = subprocess.run([C.PY, "-c", RESTART, db_path + "-shm"], capture_output=True, text=True, timeout=300)
        C.check(r.returncode == 0, "the restart's index written: %s" % (r.stdout + r.stderr).strip()[:200])
        new = r.stdout.strip()
        C.check(old and new and old != new and wal_salts(db_path + "-wal") == old,
                "the index names the next generation (%s), the -wal still the old one (%s)" % (new, old))
        # Many capture cycles (20 ms each) in that state, however slow the
        # machine: until the shipper's state file was rewritten 5 times.
        seen, t0 = set(), time.time()
        while len(seen) < 5 and time.time() - t0 < 300:
            st = C.read_state(db_path + "-tdeship-state")
            if st:
                seen.add(st.get("updated_ms"))
            time.sleep(0.25)
        C.check(len(seen) >= 5, "the shipper ran through the state (%d state updates)" % len(seen))
        C.check(not gaps(log), "no GAP while the index is a generation ahead of the -wal: %s" % gaps(log)[:2])

        C.step("3. the next writer's transactions, in the new generation")
        for i in range(40, 70):
            writer.execute("INSERT INTO t(id, v) VALUES(?, ?)", (i, "row %d " % i * 20))
        # (Its salts are the index's, or fresh random ones when the writing
        # connection itself never counted a checkpoint: SQLite's nCkpt 0.)
        now = wal_salts(db_path + "-wal")
        with open(db_path + "-shm", "rb") as f:
            idx = f.read(40)[32:40].hex()
        C.check(now not in (None, old) and now == idx, "the -wal now holds the index's new generation (%s)" % now)
        C.check(C.wait_caught_up(db_path, sb_path) is not None, "the standby caught up")
        C.check(not gaps(log), "no GAP for the new generation either: %s" % gaps(log)[:2])
        C.check(open(log).read().count("sending a base copy") == base_copies,
                "no further base copy was sent (%d in all)" % base_copies)
    finally:
        C.stop(ship)
        C.stop(sb)
    writer.close()
    want = [r[0] for r in C.connect(db_path, cfg).execute("SELECT id FROM t ORDER BY id")]
    got = [r[0] for r in C.connect(sb_path, cfg, ro=True).execute("SELECT id FROM t ORDER BY id")]
    C.check(want == list(range(70)) and got == want, "the standby's copy holds the primary's 70 rows (%d)" % len(got))
    C.finish("test_r8_restart_gap")


if __name__ == "__main__":
    main()
