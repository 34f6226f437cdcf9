"""A refusal that can be an attack never suggests the command that accepts
it (issue 22 item 4).

Format 2 (pinned: format 3 keeps the map in the database file, so it has no
side file to lose; test_r8_cp.sh): a WAL-mode database opened without its
DB-tdemap is refused: an innocent
copy made without the map and older pages put in with the map removed look
the same.  `sqlite-tde remap` accepts whatever pages the file holds, so the
message must not offer it as the fix: it says what was found, that nothing
was read or changed, to restore from one backup, and that remap would
accept a rollback too.  The old message ended "(or accept the pages as
they are: sqlite-tde remap)".

Environment: TDE_BUILD, TDE_TEST_TMP (set by ctest)."""

import os
import sqlite3
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standby_common as C  # noqa: E402


def main():
    d = C.workdir("test_r3_remapadvice")
    cfg = C.make_config(d, version=2)     # format 2: the map in DB-tdemap (format 3 has none)
    db = os.path.join(d, "app.db")
    c = C.connect(db, cfg)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute("CREATE TABLE t(x)")
    c.execute("INSERT INTO t VALUES(1)")
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.close()
    C.check(os.path.exists(db + "-tdemap"), "the page map exists after a TRUNCATE checkpoint")
    os.unlink(db + "-tdemap")
    try:
        r = C.connect(db, cfg)
        r.execute("SELECT count(*) FROM t").fetchone()
        r.close()
        refused = False
    except sqlite3.Error:
        refused = True
    msg = C.load_ext().execute("SELECT tde_last_error()").fetchone()[0] or ""
    C.check(refused, "the open without the map is refused")
    C.check("does not match the database header" in msg and "nothing was read or changed" in msg,
            "the message says what was found and that nothing changed: %s" % msg[:160])
    C.check("accept the pages as they are: sqlite-tde remap" not in msg,
            "remap is not offered as the fix")
    C.check("a rollback included" in msg and "from one backup" in msg,
            "it says remap would accept a rollback too, and to restore from one backup")
    C.finish("test_r3_remapadvice")


if __name__ == "__main__":
    main()
