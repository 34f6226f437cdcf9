"""Encrypted standby under faults (issue 8): while a writer commits
numbered transactions (with checkpoints of every mode), kill -9 the
writer, the shipper and the standby at random and restart them, cut the
TCP path, and make a proxy drop, duplicate, reorder and corrupt messages.
Then: lag back to zero and the standby holds exactly the primary's rows;
and a failover (standby killed mid-stream, then promoted) holds numbered
rows contiguous from 1, at least up to the last acknowledged transaction,
integrity_check ok, writable.

Environment: TDE_BUILD, TDE_TEST_TMP (set by ctest).  TDE_STANDBY_SECONDS
sets the length of the fault phase (default 20)."""

import os
import random
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standby_common as C  # noqa: E402


def snapshot(sdb, d, name, cfg):
    """A copy of the standby file, remapped: its header names the primary's
    page map, which a standby never receives (README "Standby")."""
    dst = os.path.join(d, name)
    for suffix in ("", "-wal", "-shm", "-tdemap"):
        if os.path.exists(dst + suffix):
            os.unlink(dst + suffix)
    shutil.copyfile(sdb, dst)
    r = subprocess.run([C.CLI, "--config", cfg, "remap", dst], capture_output=True, text=True)
    C.check(r.returncode == 0, "sqlite-tde remap on a copy of the standby: %s" % (r.stdout + r.stderr).strip())
    return dst


def main():
    seed = int(os.environ.get("TDE_STANDBY_SEED", "20261130"))
    seconds = float(os.environ.get("TDE_STANDBY_SECONDS", "20"))
    rnd = random.Random(seed)
    d = C.workdir("test_standby_faults")
    print("seed %d, fault phase %.0f s" % (seed, seconds))
    cfg = C.make_config(d)
    C.certs(d)
    C.write_writer(d)
    pdb = os.path.join(d, "primary.db")
    os.makedirs(os.path.join(d, "sb"))
    sdb = os.path.join(d, "sb", "standby.db")
    sport, pport = C.free_port(), C.free_port()

    C.step("set up: primary, standby behind a proxy, shipper")
    C.run_writer(d, pdb, cfg, 30, seed=1)
    sb = C.start_standby(d, sdb, sport)
    proxy = C.Proxy(pport, sport, seed=seed)
    ship = C.start_ship(d, pdb, cfg, [pport])
    C.check(C.wait_caught_up(pdb, sdb) is not None, "standby caught up")

    C.step("faults for %.0f s while the writer commits" % seconds)
    wseed = 100
    writer = C.start_writer(d, pdb, cfg, wseed)
    counts = {}
    t_end = time.time() + seconds
    actions = ["corrupt", "drop", "kill_writer", "dup", "kill_ship", "reorder", "kill_standby", "cut"]
    i = 0
    while time.time() < t_end:
        # every action at least once, then at random
        a = actions[i] if i < len(actions) else rnd.choice(actions)
        i += 1
        counts[a] = counts.get(a, 0) + 1
        if a == "kill_writer":
            C.kill9(writer)
            wseed += 1
            writer = C.start_writer(d, pdb, cfg, wseed)
        elif a == "kill_ship":
            C.kill9(ship)
            time.sleep(rnd.random() * 0.3)
            ship = C.start_ship(d, pdb, cfg, [pport])
        elif a == "kill_standby":
            C.kill9(sb)
            time.sleep(rnd.random() * 0.3)
            sb = C.start_standby(d, sdb, sport)
        elif a == "cut":
            proxy.cut()
        else:
            proxy.mode = a
        time.sleep(0.8 + rnd.random() * 1.0)
        proxy.mode = "pass"
    # Every message fault at least once, whatever the timing was (a loaded
    # machine may have let a window pass without a transaction).
    for m in ("corrupt", "drop", "dup", "reorder"):
        t0 = time.time()
        proxy.mode = m
        while proxy.counts[m] == 0 and time.time() - t0 < 20:
            time.sleep(0.05)
        time.sleep(0.3)
        proxy.mode = "pass"
        time.sleep(0.3)
    print("        actions: %s" % ", ".join("%s %d" % kv for kv in sorted(counts.items())))
    print("        proxy: %s" % ", ".join("%s %d" % kv for kv in sorted(proxy.counts.items())))
    C.kill9(writer)     # the primary's writer dies mid-transaction too
    C.check(all(proxy.counts[m] > 0 for m in ("drop", "dup", "reorder", "corrupt")),
            "the proxy dropped, duplicated, reordered and corrupted messages: %s" % proxy.counts)

    C.step("after the faults")
    seq = C.wait_caught_up(pdb, sdb, timeout=300)
    C.check(seq is not None, "lag back to zero (sequence %s)" % seq)
    slog = open(os.path.join(d, "standby.log")).read()
    C.check("asking to resend" in slog, "the standby noticed a gap and asked to resend (dropped/reordered messages)")
    C.check("checksum" in slog, "a corrupted message was detected and the connection dropped")
    C.check("already applied" in slog, "a duplicate was acknowledged again and ignored")
    C.check("re-applied" in slog or counts.get("kill_standby", 0) > 0,
            "standby restarts: %d (re-applied logged transactions %d times)" % (
                counts.get("kill_standby", 0), slog.count("re-applied")))
    pr = C.rows(pdb, cfg)
    sr = C.rows(snapshot(sdb, d, "snap.db", cfg), cfg)
    C.check(pr[0] == list(range(1, len(pr[0]) + 1)), "the primary holds rows 1..%d" % len(pr[0]))
    C.check(sr[0] == pr[0] and sr[1] == pr[1], "the standby holds exactly the primary's %d rows" % len(pr[0]))
    C.check(sr[2] == 10000 and sr[3] == "ok", "balances %s, integrity_check %s on the standby" % (sr[2], sr[3]))
    files = [os.path.join(d, "sb", f) for f in os.listdir(os.path.join(d, "sb"))]
    C.check(not C.no_plaintext(files), "canary absent from every standby file")

    C.step("failover: the standby dies mid-stream, then is promoted")
    writer = C.start_writer(d, pdb, cfg, 999)
    time.sleep(2.0)
    C.kill9(sb)
    acked = int(C.read_state(pdb + "-tdeship-state").get("peer0_acked_seq", "0"))
    applied = int(C.read_state(sdb + "-tdestandby").get("applied_seq", "-1"))
    time.sleep(0.5)
    C.kill9(writer)
    C.stop(ship)
    proxy.close()
    C.check(applied >= acked, "the standby's recorded sequence %d >= the last acknowledged %d" % (applied, acked))
    r = subprocess.run([C.CLI, "--config", cfg, "standby", "--promote", sdb], capture_output=True, text=True)
    C.check(r.returncode == 0, "promoted: %s" % (r.stdout + r.stderr).strip().replace("\n", " | "))
    ids, _, bal, integ = C.rows(sdb, cfg)
    pids = C.rows(pdb, cfg)[0]
    n = len(ids)
    C.check(ids == list(range(1, n + 1)), "the promoted database holds rows 1..%d, contiguous" % n)
    C.check(n <= len(pids) and ids == pids[:n], "they are the primary's first %d of %d rows" % (n, len(pids)))
    C.check(bal == 10000 and integ == "ok", "balances %s, integrity_check %s" % (bal, integ))
    db = C.connect(sdb, cfg)
    db.execute("INSERT INTO t VALUES(?, 'after failover')", (n + 1,))
    db.close()
    C.check(C.rows(sdb, cfg)[0][-1] == n + 1, "the promoted database is writable")
    r = subprocess.run([C.CLI, "--config", cfg, "verify", sdb], capture_output=True, text=True)
    C.check(r.returncode == 0, "sqlite-tde verify: %s" % r.stdout.strip())
    C.finish("test_standby_faults")


if __name__ == "__main__":
    main()
