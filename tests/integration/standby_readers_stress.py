"""Stress driver (not part of `make test`): primary writer, shipper,
standby and N readers of the standby copy in place, as test_standby.py's
reader step, for R rounds; prints each reader's errors (with
tde_last_error()) and inconsistencies.  Exit 1 if any reader saw one.

    TDE_BUILD=build /usr/bin/python3 tests/integration/standby_readers_stress.py ROUNDS READERS
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standby_common as C  # noqa: E402

READER_LOG = C.READER.replace(
    'print("error: %s" % e, file=sys.stderr)',
    'print("error: %s (tde_last_error: %s)" % (e, db.execute("SELECT tde_last_error()").fetchone()[0]), '
    'file=sys.stderr)')


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    nread = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    d = C.workdir("standby_readers_stress")
    cfg = C.make_config(d)
    C.certs(d)
    C.write_writer(d)
    with open(os.path.join(d, "reader.py"), "w") as f:
        f.write(READER_LOG)
    pdb = os.path.join(d, "primary.db")
    os.makedirs(os.path.join(d, "sb"))
    sdb = os.path.join(d, "sb", "standby.db")
    sport = C.free_port()
    C.run_writer(d, pdb, cfg, 50, seed=1)
    sb = C.start_standby(d, sdb, sport)
    time.sleep(0.3)
    ship = C.start_ship(d, pdb, cfg, [sport])
    C.check(C.wait_caught_up(pdb, sdb) is not None, "caught up after the base copy")
    total = {"reads": 0, "inconsistent": 0, "errors": 0}
    for rnd in range(rounds):
        stopfile = os.path.join(d, "readers.stop.%d" % rnd)
        readers = [C.start_reader(d, sdb, cfg, stopfile, rnd * 100 + i) for i in range(nread)]
        C.run_writer(d, pdb, cfg, 300, seed=10 + rnd)
        C.wait_caught_up(pdb, sdb)
        open(stopfile, "w").close()
        for i, r in enumerate(readers):
            out, _ = r.communicate(timeout=120)
            try:
                res = json.loads(out.strip().splitlines()[-1])
            except (ValueError, IndexError):
                res = {"reads": 0, "inconsistent": 0, "errors": 1}
            for k in total:
                total[k] += res.get(k, 0)
            err = open(os.path.join(d, "reader%d.err" % (rnd * 100 + i))).read()
            C.check(res.get("inconsistent", 1) == 0 and res.get("errors", 1) == 0,
                    "round %d reader %d: %s reads, %s inconsistent, %s errors%s" % (
                        rnd, i, res.get("reads"), res.get("inconsistent"), res.get("errors"),
                        ("\n" + err[-1500:]) if err.strip() else ""))
    print("total: %s" % total)
    C.stop(ship)
    C.stop(sb)
    C.finish("standby_readers_stress")


if __name__ == "__main__":
    main()
