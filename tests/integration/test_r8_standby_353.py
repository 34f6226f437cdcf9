"""The standby follows a primary written by SQLite 3.53 (round 8, issue 24:
the standby suites on both SQLite versions).

The shipper, the standby and the test's own readers link the system SQLite
(3.40); here the application that writes the primary is Node's
better-sqlite3 12.11 (SQLite 3.53's amalgamation) with tde.so loaded as its
default VFS, creating a database of the default format (3) in WAL mode.
Its transactions, checkpoints (RESTART, TRUNCATE) and its last close are
shipped by a keyless `sqlite-tde ship` to a `sqlite-tde standby`; the
standby's copy must hold exactly the primary's rows, be format 3, and pass
`verify` after promotion.  A missing node or package is a failure.
"""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standby_common as C  # noqa: E402

NODE_WRITER = r'''
process.env.SQLITE_TDE_DEFAULT_VFS = '1';
process.env.SQLITE_TDE_CONFIG = process.argv[3];
const Database = require('better-sqlite3');
new Database(':memory:').loadExtension(process.argv[4]);
const db = new Database(process.argv[2]);
db.pragma('journal_mode = WAL');
db.exec('CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v TEXT)');
const ins = db.prepare('INSERT INTO t(id, v) VALUES(?, ?)');
const del = db.prepare('DELETE FROM t WHERE id % 7 = ?');
for (let i = 0; i < 600; i++) {
  db.transaction(() => { ins.run(i, 'n'.repeat(100 + (i * 37) % 900)); })();
  if (i % 150 === 149) db.pragma('wal_checkpoint(' + (i % 300 === 299 ? 'TRUNCATE' : 'RESTART') + ')');
}
db.transaction(() => { del.run(3); })();
console.log(db.prepare('SELECT sqlite_version() AS v').get().v + ' ' +
            db.prepare('SELECT count(*) AS n FROM t').get().n);
db.close();
'''


def main():
    d = C.workdir("r8_standby_353")
    npm = os.environ.get("TDE_NPM_DIR") or os.path.join(C.BUILD, "npm")
    node_modules = os.path.join(npm, "node", "node_modules")
    node = subprocess.run(["sh", "-c", "command -v node"], capture_output=True, text=True).stdout.strip()
    if not node or not os.path.exists(os.path.join(node_modules, "better-sqlite3", "package.json")):
        C.bad("node or the pinned better-sqlite3 is missing (node=%r, %s)" % (node, node_modules))
        C.finish("test_r8_standby_353")
    cfg = C.make_config(d)
    db_path = os.path.join(d, "p.db")
    os.makedirs(os.path.join(d, "sb"))
    sb_path = os.path.join(d, "sb", "copy.db")
    # The database exists in WAL mode before the shipper starts (it ships
    # an existing WAL-mode database); Node then writes everything else.
    db = C.connect(db_path, cfg)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
    db.close()
    C.check(C.format_version(db_path, cfg) == "3", "the primary is format version 3 (the default)")
    port = C.free_port()
    sb = C.start_standby(d, sb_path, port, conf="insecure")
    ship = C.start_ship(d, db_path, cfg, [port], conf="insecure")
    try:
        js = os.path.join(d, "writer.js")
        open(js, "w").write(NODE_WRITER)
        r = subprocess.run([node, js, db_path, cfg, os.path.join(C.BUILD, "tde")], capture_output=True, text=True,
                           timeout=600, env=dict(os.environ, NODE_PATH=node_modules))
        out = (r.stdout + r.stderr).strip()
        C.check(r.returncode == 0 and out.startswith("3.53."), "Node (SQLite %s) wrote the primary" % out[:200])
        C.check(C.wait_caught_up(db_path, sb_path) is not None, "the standby caught up")
    finally:
        C.stop(ship)
        C.stop(sb)
    log = open(os.path.join(d, "ship.log")).read()
    C.check("need a base copy" not in log, "no GAP on the way")
    want = [tuple(x) for x in C.connect(db_path, cfg).execute("SELECT id, v FROM t ORDER BY id")]
    got = [tuple(x) for x in C.connect(sb_path, cfg, ro=True).execute("SELECT id, v FROM t ORDER BY id")]
    C.check(len(want) > 500 and got == want, "the standby's copy holds the primary's %d rows (%d)" % (len(want), len(got)))
    C.check(C.format_version(sb_path, cfg) == "3", "the standby's copy is format version 3")
    r = subprocess.run([C.CLI, "--config", cfg, "standby", "--promote", sb_path], capture_output=True, text=True,
                       timeout=300)
    C.check(r.returncode == 0, "promoted: %s" % (r.stdout + r.stderr).strip()[:200])
    r = subprocess.run([C.CLI, "--config", cfg, "verify", sb_path], capture_output=True, text=True, timeout=300)
    C.check(r.returncode == 0, "verify of the promoted copy: %s" % (r.stdout + r.stderr).strip()[:200])
    C.finish("test_r8_standby_353")


if __name__ == "__main__":
    main()
