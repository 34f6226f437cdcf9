#!/usr/bin/python3
"""sqlite-tde benchmark kit: the report writer.

    report.py RESULTS.json OUT_DIR     re-render report.md and report.html

Installed next to the orchestrator as sqlite_tde_bench_report.py; run.py
calls write_reports() after a run.  Both reports are built from the same
results dictionary (never one from the other), so the HTML holds no
Markdown.  The HTML is self-contained: inline SVG charts with axes, ticks,
gridlines and value labels at the bar ends, no script, nothing loaded from
the network.

One number format everywhere (num): thousands separators from 1,000 up,
three significant digits below; ratios with two decimals and a "x";
changes as whole percentages, or as an absolute difference in the metric's
unit where a percentage means nothing (ratios beyond 3x of a time).
Standard library only.
"""
import html
import json
import math
import os
import sys

HIGHER, LOWER = "higher", "lower"
PRIMARY = "wallet"                       # the sqlite-tde condition the summary speaks of
CHART_CONDITIONS = ["wallet", "sqlcipher4", "sqlite3mc"]
COLORS = {"plain": "#6b6b6b", "wallet": "#1f77b4", "wallet-password": "#2ca02c", "pkcs11": "#9467bd",
          "kmip": "#8c564b", "sqlcipher": "#e377c2", "sqlcipher4": "#d62728", "sqlite3mc": "#ff7f0e",
          "standby": "#17becf", "standby-sync": "#bcbd22", "archive": "#8c564b", "wallet-v1": "#aec7e8", "wallet-v2": "#c5b0d5", "wallet-v3": "#c49c94", "wallet-anchor": "#98df8a"}
MODE_TEXT = {"DELETE": "rollback journal (DELETE, SQLite's default)", "WAL": "WAL",
             "DELETE+cached": "rollback journal, everything cached"}
MODE_PHRASE = {"DELETE": "with the rollback journal (SQLite's default)", "WAL": "in WAL mode",
               "DELETE+cached": "with the rollback journal and everything cached"}


def phrase(mode):
    return MODE_PHRASE.get(mode, "in %s mode" % mode)


def and_join(parts):
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


# ---- numbers -----------------------------------------------------------------------------

def num(v):
    """The one number format: 56,421 / 123 / 12.3 / 1.23 / 0.0575."""
    if v is None or v != v:
        return "n/a"
    a = abs(v)
    if a >= 1000:
        return "{:,.0f}".format(v)
    if a >= 100:
        return "%.0f" % v
    if a == 0:
        return "0"
    d = max(0, 2 - int(math.floor(math.log10(a))))
    return "%.*f" % (d, v)


def ratio_text(r):
    """Ratios: two decimals (0.93x), or the number format from 100x up."""
    if r is None or r != r:
        return "n/a"
    return "%.2fx" % r if abs(r) < 100 else num(r) + "x"


def ci_text(r):
    if r.get("ci_low") is None:
        return ""
    return "[%.2f, %.2f]" % (r["ci_low"], r["ci_high"])


def absolute_change(r):
    """Use a difference in the unit instead of a percentage: always for the
    bounce (its targets are in ms), and for any time more than 3x plain's (a
    bounce of 0.2 ms against 160 ms is not a "penalty of 79,900 %")."""
    if r.get("ratio") is None:
        return False
    return r.get("metric") == "bounce_ms" or (r["unit"] in ("ms", "s", "s/scan") and r["ratio"] > 3)


def verdict_display(r):
    """The verdict, without a percentage where a percentage means nothing."""
    v = r.get("verdict", "n/a")
    if absolute_change(r):
        if v.startswith("penalty"):
            return "slower"
        if v.startswith("faster"):
            return "faster"
    return v


def change_text(r):
    """How a condition compares with plain, in words a DBA reads."""
    if r.get("ratio") is None:
        return "n/a"
    if r["condition"] == "plain":
        return "baseline"
    if absolute_change(r):
        return "%s%s %s, %s" % ("+" if r["diff"] >= 0 else "", num(r["diff"]), r["unit"].split("/")[0],
                                verdict_display(r))
    return verdict_display(r)


def goodness(r):
    """(speed relative to plain, low, high): higher is better for every metric."""
    if r.get("ratio") is None or not r["ratio"]:
        return (float("nan"),) * 3
    if r["better"] == HIGHER:
        return r["ratio"], r["ci_low"], r["ci_high"]
    return (1 / r["ratio"], 1 / r["ci_high"] if r["ci_high"] else float("nan"),
            1 / r["ci_low"] if r["ci_low"] else float("nan"))


# ---- shared content ----------------------------------------------------------------------

def index(res):
    return {(r["workload"], r["mode"], r["metric"], r["condition"]): r for r in res["summary"]}


def headline_metric(res, w):
    for r in res["summary"]:
        if r["workload"] == w and r["headline"]:
            return r["metric"]
    return None


def live_conditions(res):
    return [c["name"] for c in res["conditions"] if not c["skipped"]]


def modes(res):
    return [m["name"] for m in res["options"]["modes"]]


def not_applicable(res):
    """{(workload, mode): reason} of the workloads not run in a journal mode
    (a checkpoint exists in WAL mode only); the tables show "-" there."""
    return {(x["workload"], x["mode"]): x["reason"] for x in res["options"].get("not_applicable", [])}


NA = "-"


def target_counts(res):
    return {s: sum(1 for t in res["targets"] if t["status"] == s)
            for s in ("met", "missed", "undecided", "not measured")}


def is_quick(res):
    o = res["options"]
    return o["quick"] or o["seconds"] < 2 or o["repeats"] < 3


def quick_warning(res):
    o = res["options"]
    if not is_quick(res):
        return None
    return ("Quick run (%d repeats, %s s per timed workload, %s rows): these figures only show "
            "that the kit works. They are not a measurement of what encryption costs; do not "
            "quote them." % (o["repeats"], num(o["seconds"]), num(o["rows"])))


def summary_sentences(res):
    S = index(res)
    out = []
    live = live_conditions(res)
    if PRIMARY in live:
        parts = []
        for mn in modes(res):
            gs = []
            for w in res["options"]["workloads"]:
                m = headline_metric(res, w)
                r = S.get((w, mn, m, PRIMARY))
                if r and not w.startswith("bounce") and r.get("ratio"):
                    g = goodness(r)[0]
                    if g == g and g > 0:
                        gs.append(g)
            if gs:
                gm = math.exp(sum(math.log(g) for g in gs) / len(gs))
                parts.append("%s %s" % (ratio_text(gm), phrase(mn)))
        if parts:
            out.append("Speed of sqlite-tde with an auto-login wallet relative to plain SQLite: %s "
                       "(geometric mean over the workloads, bounce excluded; 1.00x = as fast as plain)."
                       % and_join(parts))
        byt = []
        for mn in modes(res):
            rs = [S.get((w, mn, "wchar_per_op", PRIMARY)) for w in res["options"]["workloads"]]
            rs = [r for r in rs if r and r.get("ratio") and r["ratio"] > 0
                  and S.get((r["workload"], mn, "wchar_per_op", "plain"), {}).get("median", 0) > 0]
            if rs:
                gm = math.exp(sum(math.log(r["ratio"]) for r in rs) / len(rs))
                byt.append("%s %s" % (ratio_text(gm), phrase(mn)))
        if byt:
            out.append("Bytes it wrote for the same work relative to plain: %s." % and_join(byt))
    n = target_counts(res)
    out.append("Targets: %d met, %d missed, %d undecided (the 95%% interval straddles the target)%s."
               % (n["met"], n["missed"], n["undecided"],
                  ", %d not measured" % n["not measured"] if n["not measured"] else ""))
    if res["failures"]:
        out.append("%d runs FAILED (see Limitations)." % len(res["failures"]))
    return out


def verdict_rows(res):
    """The verdict table: per workload, the primary condition against plain
    in each mode: speed, verdict and bytes written."""
    S = index(res)
    na = not_applicable(res)
    rows = []
    for w in res["options"]["workloads"]:
        m = headline_metric(res, w)
        cells = []
        for mn in modes(res):
            r = S.get((w, mn, m, PRIMARY))
            b = S.get((w, mn, "wchar_per_op", PRIMARY))
            if (w, mn) in na:
                cells.append((NA, NA, NA))
                continue
            if not r:
                cells.append(("n/a", "", "n/a"))
                continue
            if absolute_change(r):
                speed = "%s%s %s" % ("+" if r["diff"] >= 0 else "", num(r["diff"]), r["unit"])
            else:
                speed = "%s [%.2f, %.2f]" % (ratio_text(goodness(r)[0]), goodness(r)[1], goodness(r)[2])
            cells.append((speed, verdict_display(r), ratio_text(b["ratio"]) if b and b.get("ratio") else "n/a"))
        rows.append((w, cells))
    return rows


# The I/O table's metrics and headings (run.py IO_METRICS).
IO_COLUMNS = ["wchar_per_op", "write_bytes_per_op", "pwrites_per_op", "preads_per_op",
              "journal_bytes_per_op", "wal_bytes_per_op", "map_bytes_per_op"]
IO_HEAD = ["workload", "mode", "condition", "bytes written (wchar)", "bytes to storage",
           "pwrites", "preads", "journal bytes", "WAL bytes", "page map bytes"]


def na_text(res):
    """The note on the "-" cells: which workload was not run where, and why."""
    by = {}
    for (w, mn), why in not_applicable(res).items():
        by.setdefault((w, why), []).append(mn)
    if not by:
        return None
    return "%s: not applicable (%s)." % (NA, "; ".join(
        "%s is %s, not run %s" % (w, why, and_join([phrase(m) for m in ms]))
        for (w, why), ms in sorted(by.items())))


def per_condition_rows(res, io=False):
    S = index(res)
    rows = []
    for mn in modes(res):
        for w in res["options"]["workloads"]:
            ms = [headline_metric(res, w)] if not io else IO_COLUMNS
            for c in live_conditions(res):
                rr = [S.get((w, mn, m, c)) for m in ms]
                if any(rr):
                    rows.append((w, mn, c, rr))
    return rows


STANDBY_HEAD = ["repeat", "mode", "workload", "condition", "transport / mode", "rows/s",
                "lag max (txn / bytes / s)", "lag at end (txn / bytes / s)", "caught up after (s)",
                "ship lock mean / max (ms)"]
STANDBY_TEXT = ("Conditions standby and standby-sync: a shipper (50 ms capture cycles) and a standby "
                "on 127.0.0.1 attached during the run, over mutual TLS with an Ed25519-signed record "
                "chain (set up by scripts/standby-certs.sh); standby-sync in protection mode sync, "
                "where a commit returns only once the standby acknowledged it (a run in which sync "
                "fell back to async counts as failed). Lag = captured on the primary but not yet "
                "acknowledged (applied) by the standby, sampled every 50 ms from the shipper's state "
                "file.")


STANDBY_LAT_METRICS = ["commit_ms_p50", "commit_ms_p99", "lat_ms_p50", "lat_ms_p99"]
STANDBY_LAT_HEAD = ["workload", "mode", "metric", "wallet (ms)", "standby, async (ms)", "standby-sync (ms)"]
STANDBY_LAT_TEXT = ("Commit latency of the standby conditions against the auto-login wallet alone "
                    "(the same keystore without a standby): medians over runs of each run's "
                    "percentile; in brackets the ratio of medians to wallet.  insert: the COMMIT of "
                    "a 500-row batch; tpcb-rw: a whole transaction.")


def standby_latency_rows(res):
    """Per workload, mode and commit-latency metric: wallet, standby and
    standby-sync medians, the standby ones with their ratio to wallet."""
    S = index(res)
    live = live_conditions(res)
    if not any(c in live for c in ("standby", "standby-sync")):
        return []
    rows = []
    for mn in modes(res):
        for w in res["options"]["workloads"]:
            for m in STANDBY_LAT_METRICS:
                base = S.get((w, mn, m, "wallet"))
                cells = []
                for c in ("standby", "standby-sync"):
                    r = S.get((w, mn, m, c))
                    if not r:
                        cells.append("n/a")
                    elif base and base["median"]:
                        cells.append("%s (%sx)" % (num(r["median"]), num(r["median"] / base["median"])))
                    else:
                        cells.append(num(r["median"]))
                if cells != ["n/a", "n/a"]:
                    rows.append((w, mn, m, num(base["median"]) if base else "n/a", cells[0], cells[1]))
    return rows


def standby_rows(res):
    rows = []
    for ob in res["observations"]:
        q = ob.get("result") or {}
        if "standby_lag_txn_max" not in q:
            continue
        rows.append((ob["repeat"], ob["mode"], ob["workload"], ob["condition"],
                     "%s / %s" % (q.get("standby_transport", "?"), q.get("standby_mode", "?")),
                     num(q.get("rows_per_s")),
                     "%d / %d / %s" % (q["standby_lag_txn_max"], q["standby_lag_bytes_max"], num(q["standby_lag_s_max"])),
                     "%d / %d / %s" % (q["standby_lag_txn_end"], q["standby_lag_bytes_end"], num(q["standby_lag_s_end"])),
                     num(q.get("standby_catchup_s")),
                     "%s / %s" % (num(q.get("ship_lock_ms_avg")), num(q.get("ship_lock_ms_max")))))
    return rows


ARCHIVE_COST_HEAD = ["workload", "mode", "metric", "wallet", "archive", "archive / wallet"]
ARCHIVE_COST_TEXT = ("Condition archive: the auto-login wallet with sqlite-tde archive attached (50 ms "
                     "capture cycles, default segments: 1000 transactions, 16 MiB or 10 s), uploading "
                     "Ed25519-signed objects over TLS to a local S3 server (Ceph's RADOS gateway on "
                     "127.0.0.1, tests/lib/s3server.sh), against the wallet alone: medians over runs, "
                     "the ratio of medians.")
ARCHIVE_HEAD = ["repeat", "mode", "workload", "rows/s", "transactions", "segments",
                "upload bytes / txn", "WAL bytes / txn", "upload / WAL", "base copy (bytes)",
                "lag max (txn / bytes / s)", "caught up after (s)", "ship lock mean / max (ms)"]
ARCHIVE_TEXT = ("Per run of condition archive: the transactions the archiver captured during the run, "
                "the segments the bucket then held for them (each run archives to a folder of its "
                "own, after a base copy of the data set), the segments' bytes per transaction "
                "(object headers, records and signed heads) against the WAL bytes per transaction "
                "the driver wrote (its VFS counters), the lag (captured but not yet in the bucket, "
                "sampled every 50 ms from the shipper's state file) and the time after the run until "
                "the bucket held every transaction.")


def archive_cost_rows(res):
    """Every summary metric of condition archive beside wallet's."""
    S = index(res)
    if "archive" not in live_conditions(res):
        return []
    rows = []
    for mn in modes(res):
        for w in res["options"]["workloads"]:
            for (w2, mn2, m, c), r in S.items():
                if (w2, mn2, c) != (w, mn, "archive"):
                    continue
                base = S.get((w, mn, m, "wallet"))
                ratio = r["median"] / base["median"] if base and base["median"] else None
                rows.append((w, mn, m, num(base["median"]) if base else "n/a", num(r["median"]),
                             "%sx" % num(ratio) if ratio is not None else "n/a"))
    return rows


def archive_rows(res):
    rows = []
    for ob in res["observations"]:
        q = ob.get("result") or {}
        if "archive_txns" not in q:
            continue
        up, wal = q.get("archive_upload_bytes_per_txn"), q.get("archive_wal_bytes_per_txn")
        rows.append((ob["repeat"], ob["mode"], ob["workload"], num(q.get("rows_per_s")),
                     str(q["archive_txns"]), str(q["archive_segments"]), num(up), num(wal),
                     num(up / wal) if up and wal else "n/a", num(q.get("archive_base_bytes")),
                     "%d / %d / %s" % (q["archive_lag_txn_max"], q["archive_lag_bytes_max"],
                                       num(q["archive_lag_s_max"])),
                     num(q.get("archive_catchup_s")),
                     "%s / %s" % (num(q.get("ship_lock_ms_avg")), num(q.get("ship_lock_ms_max")))))
    return rows


# ---- the broad SQL suite and commit latency ----------------------------------------------

SUITE_TEXT = ("The broad SQL suite: small tests run in order over one data set (--suite-rows rows per "
              "table) in a database of their own, each timed and checksummed (every condition must "
              "return the same checksum per test). Time ratio = median over repeats of the ratio to "
              "plain within one repeat (runs of a repeat are interleaved); bytes = bytes written by "
              "the test, every file kind, ratio of medians to plain. Tests that take under a "
              "millisecond have noisy ratios.")
WORST_TEXT = ("Per condition and journal mode, the five suite tests with the highest time ratio to "
              "plain, with their bytes-written ratio.")
LATENCY_TEXT = ("Single-row INSERT transactions in WAL mode (--lat-txns each with synchronous=NORMAL, "
                "then FULL), each statement timed with its commit; automatic checkpoints stay on "
                "(SQLite's 1,000 pages), so p99 includes the commits that ran one. Medians over runs "
                "of each run's percentile; in brackets the ratio of medians to plain.")
LATENCY_HEAD = ["condition", "p50 NORMAL (ms)", "p99 NORMAL (ms)", "p50 FULL (ms)", "p99 FULL (ms)"]


def suite_conditions(res):
    """The conditions the suite tables show beside plain: the auto-login
    wallet and the current peers, or what ran instead."""
    live = [c for c in live_conditions(res) if c != "plain"]
    show = [c for c in ("wallet", "sqlcipher4", "sqlite3mc") if c in live]
    return show or live[:3]


def suite_head(res):
    head = ["test", "what", "mode", "plain (s)", "plain bytes"]
    for c in suite_conditions(res):
        head += ["%s: time" % c, "%s: bytes" % c]
    return head


def suite_rows(res):
    """Per suite test and mode: plain's median time and bytes, each shown
    condition's time and bytes ratios to plain."""
    su = res.get("suite")
    if not su:
        return []
    by = {(r["mode"], r["test"], r["condition"]): r for r in su["rows"]}
    rows = []
    for mn in modes(res):
        for t in su["tests"]:
            p = by.get((mn, t["id"], "plain"))
            if not p:
                continue
            row = [t["id"], t["name"], mn, num(p["median_s"]), num(p["write_bytes"])]
            for c in suite_conditions(res):
                r = by.get((mn, t["id"], c))
                row += [ratio_text(r.get("ratio")) if r else "n/a",
                        ratio_text(r.get("bytes_ratio")) if r else "n/a"]
            rows.append(row)
    return rows


def worst_rows(res):
    """(mode, condition, rank, test, what, time ratio, bytes ratio) of the
    five worst tests of every condition that is not plain."""
    su = res.get("suite")
    rows = []
    for w in (su or {}).get("worst", []):
        for i, t in enumerate(w["tests"]):
            rows.append((w["mode"], w["condition"], i + 1, t["test"], t["name"], ratio_text(t["ratio"]),
                         ratio_text(t.get("bytes_ratio"))))
    return rows


def latency_rows(res):
    S = index(res)
    rows = []
    for mn in modes(res):
        for c in live_conditions(res):
            cells = []
            for m in ("commit_normal_ms_p50", "commit_normal_ms_p99", "commit_full_ms_p50", "commit_full_ms_p99"):
                r = S.get(("commit-latency", mn, m, c))
                if not r:
                    cells.append("n/a")
                elif c == "plain":
                    cells.append(num(r["median"]))
                else:
                    cells.append("%s (%s)" % (num(r["median"]), ratio_text(r.get("ratio"))))
            if cells != ["n/a"] * 4:
                rows.append(["%s, %s" % (c, mn)] + cells)
    return rows


def conditions_text(res):
    return [(c["name"], ("not measured: " + c["skipped"]) if c["skipped"] else c["label"])
            for c in res["conditions"]]


def method_text(res):
    o = res["options"]
    return ("Seed %d for the data, the workloads and the shuffled run order (the bootstrap seed "
            "is derived from it). %d repeats; per repeat, journal mode and workload the conditions "
            "run in a shuffled order; every run is a new process on a fresh copy of its "
            "condition's data set, built once with the seed in rollback mode (a copy converted "
            "for WAL). Journal modes %s; synchronous=%s, page_size=%d, cache_size=%d (modes marked "
            "everything cached: %d); %s s per timed workload; t1 rows %s, t2 rows %s, tpcb scale %d, "
            "row-at-a-time rows %s, tpcb threads %s. Ratios are condition / plain of the medians, "
            "with 95%% bootstrap intervals over the runs. A verdict says \"no measurable "
            "penalty\" only when that interval lies within 5 %% of no change; an interval that "
            "includes no change but is wider is \"undecided\". Penalties and gains are in "
            "terms of speed: a time twice plain's is a 50 %% penalty, like a throughput of "
            "0.50x. A target is met or missed only "
            "when the whole interval is on one side of it. Bytes and I/O calls are per unit of "
            "work (row, transaction, scan, open, checkpoint) of the timed part, so that time-bounded "
            "workloads compare fairly."
            % (o["seed"], o["repeats"], ", ".join(modes(res)), o["synchronous"], o["page_size"],
               o["cache_size"], o.get("cache_size_cached", 0), num(o["seconds"]), num(o["rows"]),
               num(o.get("txn_rows", 0)), o["scale"], num(o["rat_rows"]), o["threads"]))


ENV_KEYS = [("cpu_model", "CPU"), ("aes_ni", "AES-NI"), ("cores", "cores"), ("mem_total", "memory"),
            ("load_average_start", "load average at start"), ("load_average_end", "load average at end"),
            ("kernel", "kernel"), ("filesystem", "file system"), ("device", "device"),
            ("openssl", "OpenSSL"), ("sqlite", "SQLite (plain and sqlite-tde)"), ("sqlite_tde", "sqlite-tde"),
            ("sqlcipher4", "SQLCipher 4 peer"), ("sqlcipher4_sqlite", "its SQLite"),
            ("sqlite3mc", "SQLite3 Multiple Ciphers peer"), ("sqlite3mc_sqlite", "its SQLite"),
            ("sqlcipher", "old SQLCipher peer"), ("sqlcipher_sqlite", "its SQLite"),
            ("git_commit", "git commit")]


def limitations(res):
    o, env, lim = res["options"], res["environment"], []
    q = quick_warning(res)
    if q:
        lim.append(q)
    lim.append("%d repeats per condition, workload and mode, %s s per timed workload; the 95%% "
               "intervals are bootstrap intervals over those runs only (one machine, one day)."
               % (o["repeats"], num(o["seconds"])))
    if o["seconds"] < 10:
        lim.append("Short runs: below 10 s per workload, checkpoints and the OS's write-back may "
                   "fall inside some runs and not others; use --seconds 10 or more for steadier figures.")
    fsname = env.get("filesystem", "?")
    lim.append("Output folder on file system %s (%s). Cold scans drop the OS cache with fsync + "
               "posix_fadvise(POSIX_FADV_DONTNEED); a hypervisor or disk cache below the guest is "
               "not dropped. write_bytes counts what the kernel sent to storage while the run "
               "lasted: write-back after the run is not in it (wchar, the bytes passed to write "
               "calls, is exact)." % (fsname, env.get("device", "?")))
    if fsname in ("tmpfs", "ramfs"):
        lim.append("The output folder is in memory (tmpfs): cold-scan equals warm-scan and write_bytes is 0.")
    if any(m["cached"] for m in o["modes"]) and o.get("cache_size_cached") == o["cache_size"]:
        lim.append("cache_size %d already holds twice this data set: the modes with and without "
                   "everything cached ran with the same cache here." % o["cache_size"])
    elif o["cache_size"] != -2000:
        lim.append("cache_size %d is not SQLite's default (-2000, 2 MiB): with --cache-size -2000 "
                   "the modes without +cached measure what an application that never sets it "
                   "gets." % o["cache_size"])
    lim.append("Bounce is measured in one process: the driver closes the keystore before each "
               "observation so that the open pays the keystore open and the key unwrap again; "
               "process start is not included. wallet-password pays Argon2id on every bounce, by "
               "design; the SQLCipher peers pay PBKDF2 of the passphrase.")
    lim.append("The peers run on their own SQLite versions (see Environment): part of any "
               "difference against them is SQLite's version. The old SQLCipher peer is a decade "
               "old and is kept only for comparison with earlier reports. The SQLCipher 4 peer is "
               "built with SQLITE_TEMP_STORE=2 (temporary tables in memory) as its documentation "
               "asks; plain and sqlite-tde keep temporary files on disk.")
    t = na_text(res)
    if t:
        lim.append("Not every workload runs in every journal mode; " + t)
    for c in res["conditions"]:
        if c["skipped"]:
            lim.append("Condition %s not measured: %s" % (c["name"], c["skipped"]))
    if res["failures"]:
        lim.append("%d runs failed (listed under raw measurements); their conditions have fewer "
                   "observations." % len(res["failures"]))
    try:
        la = float(env.get("load_average_end", "0").split()[1])
    except (ValueError, IndexError):
        la = 0.0
    if la > 0.5 * (env.get("cores") or 1):
        lim.append("The machine was not idle: 5-minute load average %s at the end on %s cores. "
                   "Interleaving spreads that noise over all conditions, but it widens the intervals."
                   % (env.get("load_average_end"), env.get("cores")))
    lim.append("Checksums: %s." % res["checksums"])
    return lim


# ---- Markdown --------------------------------------------------------------------------------

def md_table(head, rows, align=None):
    L = ["| " + " | ".join(head) + " |",
         "|" + "|".join(align or ["---"] * len(head)) + "|"]
    for r in rows:
        L.append("| " + " | ".join(str(x).replace("|", "/") for x in r) + " |")
    return L


def md_report(res):
    L = ["# sqlite-tde benchmark report", ""]
    q = quick_warning(res)
    if q:
        L += ["> **Warning.** " + q, ""]
    L += [" ".join(summary_sentences(res)), ""]
    L += ["Generated %s by `%s`; load average %s at the start, %s at the end." % (
        res["generated"], res["command"], res["environment"].get("load_average_start"),
        res["environment"].get("load_average_end")), ""]
    L += ["## Verdicts", "",
          "sqlite-tde (auto-login wallet) against plain SQLite: speed relative to plain (1.00x = "
          "as fast, higher is better) with its 95% interval, the verdict, and bytes written "
          "relative to plain.", ""]
    head = ["workload"]
    for mn in modes(res):
        head += ["%s: speed" % mn, "%s: verdict" % mn, "%s: bytes" % mn]
    rows = []
    for w, cells in verdict_rows(res):
        row = [w]
        for c in cells:
            row += list(c)
        rows.append(row)
    L += md_table(head, rows) + [""]
    if na_text(res):
        L += [na_text(res), ""]
    L += ["## Targets", ""]
    n = target_counts(res)
    L += ["%d met, %d missed, %d undecided, %d not measured." % (
        n["met"], n["missed"], n["undecided"], n["not measured"]), ""]
    L += md_table(["group", "target", "condition", "workload", "mode", "figure", "status"],
                  [(t.get("group", ""), t["target"], t["condition"], t["workload"], t.get("mode", ""),
                    t["figure"], t["status"]) for t in res["targets"]]) + [""]
    L += ["## Headline figures per condition", "",
          "Median (min to max) over runs; change against plain with its 95% interval.", ""]
    rows = []
    for w, mn, c, (r,) in per_condition_rows(res):
        rows.append((w, mn, c, "%s %s" % (num(r["median"]), r["unit"]), "%s to %s" % (num(r["min"]), num(r["max"])),
                     "%s %s" % (ratio_text(r.get("ratio")), ci_text(r)), change_text(r)))
    L += md_table(["workload", "mode", "condition", "median", "range", "ratio to plain", "verdict"], rows) + [""]
    L += ["## Bytes and I/O calls per unit of work", "",
          "Medians per unit of work of the timed part (see Method); in brackets the ratio to plain.", ""]
    rows = []
    for w, mn, c, rr in per_condition_rows(res, io=True):
        cells = []
        for r in rr:
            cells.append("n/a" if not r else "%s (%s)" % (num(r["median"]), ratio_text(r.get("ratio"))))
        rows.append([w, mn, c] + cells)
    L += md_table(IO_HEAD, rows) + [""]
    if suite_rows(res):
        L += ["## Broad SQL suite", "", SUITE_TEXT, ""] + md_table(suite_head(res), suite_rows(res)) + [""]
        L += ["## Five worst suite tests", "", WORST_TEXT, ""]
        L += md_table(["mode", "condition", "rank", "test", "what", "time ratio", "bytes ratio"],
                      worst_rows(res)) + [""]
    if latency_rows(res):
        L += ["## Commit latency", "", LATENCY_TEXT, ""] + md_table(LATENCY_HEAD, latency_rows(res)) + [""]
    sl = standby_latency_rows(res)
    if sl:
        L += ["## Standby commit latency", "", STANDBY_LAT_TEXT, ""] + md_table(STANDBY_LAT_HEAD, sl) + [""]
    sb = standby_rows(res)
    if sb:
        L += ["## Standby lag", "", STANDBY_TEXT, ""] + md_table(STANDBY_HEAD, sb) + [""]
    ac = archive_cost_rows(res)
    if ac:
        L += ["## Archive cost", "", ARCHIVE_COST_TEXT, ""] + md_table(ARCHIVE_COST_HEAD, ac) + [""]
    ar = archive_rows(res)
    if ar:
        L += ["## Archive upload", "", ARCHIVE_TEXT, ""] + md_table(ARCHIVE_HEAD, ar) + [""]
    L += ["## Method", "", method_text(res), "", "Conditions:", ""]
    L += ["- %s: %s" % c for c in conditions_text(res)]
    L += ["", "## Environment", ""]
    env = res["environment"]
    L += md_table(["", ""], [(lab, env[k]) for k, lab in ENV_KEYS if k in env and env[k] is not None]) + [""]
    L += ["## Limitations", ""] + ["- " + x for x in res["limitations"]]
    L += ["", "## Raw measurements", "", "Every observation, with its per-operation samples, is in results.json.", ""]
    rows = []
    for i, ob in enumerate(res["observations"]):
        if "error" in ob:
            rows.append((i + 1, ob["repeat"], ob["mode"], ob["workload"], ob["condition"],
                         "FAILED: " + ob["error"].replace("\n", " ")[:200], "", ""))
        else:
            m = headline_metric(res, ob["workload"])
            rows.append((i + 1, ob["repeat"], ob["mode"], ob["workload"], ob["condition"],
                         num(ob["result"].get(m)), num(ob["result"].get("io_wchar")),
                         ob["result"].get("checksum")))
    L += md_table(["#", "repeat", "mode", "workload", "condition", "headline", "bytes written", "checksum"], rows)
    return "\n".join(L) + "\n"


# ---- SVG charts ---------------------------------------------------------------------------

def nice_ticks(vmax, n=6):
    """0 .. >= vmax in 1/2/5 x 10^k steps."""
    if vmax <= 0 or vmax != vmax:
        vmax = 1.0
    raw = vmax / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    ticks, k = [], 0
    while True:
        t = k * step
        ticks.append(t)
        if t >= vmax * 0.9999:
            return ticks
        k += 1


def svg_bars(title, axis_label, items, ref=None, ref_label=None, fmt=num):
    """A horizontal bar chart, full width (viewBox, width 100 %).

    items = [(label, condition, value, lo, hi)] (lo/hi: whisker, or None).
    x axis from 0 with ticks, vertical gridlines, the axis label below it,
    value labels (fmt) at the bar ends; ref draws a dashed reference line.
    The axis reaches the longest whisker but at most 1.5 times the longest
    bar: a longer whisker ends in an arrowhead at the edge."""
    items = [i for i in items if i[2] is not None and i[2] == i[2]]
    if not items:
        return ""
    W, lw, rw, top, bh = 1000, 290, 70, 30, 18
    vbar = max([i[2] for i in items] + ([ref] if ref else []))
    vmax = min(max([vbar] + [i[4] for i in items if i[4] is not None and i[4] == i[4]]), 1.5 * vbar)
    ticks = nice_ticks(vmax)
    xmax = ticks[-1] or 1.0
    pw = W - lw - rw
    H = top + bh * len(items) + 50

    def X(v):
        return lw + pw * max(0.0, min(v, xmax)) / xmax

    s = ['<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="100%%" '
         'preserveAspectRatio="xMinYMin meet" role="img" aria-label="%s">' % (W, H, html.escape(title)),
         '<text class="title" x="0" y="16" font-weight="bold" font-size="14">%s</text>' % html.escape(title)]
    y0, y1 = top, top + bh * len(items)
    for t in ticks:
        s.append('<line class="grid" x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#ddd"/>' % (X(t), X(t), y0, y1))
        s.append('<line class="tick" x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#333"/>' % (X(t), X(t), y1, y1 + 5))
        s.append('<text class="tick-label" x="%.1f" y="%d" text-anchor="middle" font-size="11">%s</text>'
                 % (X(t), y1 + 17, html.escape(fmt(t))))
    s.append('<line class="axis" x1="%d" x2="%d" y1="%d" y2="%d" stroke="#333"/>' % (lw, lw + pw, y1, y1))
    s.append('<line class="axis" x1="%d" x2="%d" y1="%d" y2="%d" stroke="#333"/>' % (lw, lw, y0, y1))
    s.append('<text class="axis-label" x="%.1f" y="%d" text-anchor="middle" font-size="12">%s</text>'
             % (lw + pw / 2, y1 + 36, html.escape(axis_label)))
    for k, (label, cond, v, lo, hi) in enumerate(items):
        y = top + k * bh
        s.append('<text class="bar-label" x="%d" y="%d" text-anchor="end" font-size="11">%s</text>'
                 % (lw - 6, y + 13, html.escape(label)))
        s.append('<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"><title>%s: %s</title></rect>' % (
            lw, y + 3, max(X(v) - lw, 0.5), bh - 6, COLORS.get(cond, "#444"), html.escape(label), num(v)))
        if lo is not None and hi is not None and lo == lo and hi == hi:
            s.append('<line class="whisker" x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#000"/>'
                     % (X(lo), X(hi), y + bh // 2, y + bh // 2))
            if hi > xmax:
                xe, ym = X(hi), y + bh // 2
                s.append('<path class="clipped" d="M%.1f %d l-7 -4 v8 z" fill="#000"><title>interval '
                         'reaches %s</title></path>' % (xe, ym, html.escape(fmt(hi))))
        # the value at the bar's end, on a white halo over the whisker
        s.append('<text class="value" x="%.1f" y="%d" font-size="11" stroke="#fff" stroke-width="3" '
                 'paint-order="stroke">%s</text>' % (X(v) + 4, y + 13, html.escape(fmt(v))))
    if ref:
        s.append('<line class="ref" x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#000" stroke-dasharray="4 3"/>'
                 % (X(ref), X(ref), y0 - 4, y1))
        if ref_label:
            s.append('<text x="%.1f" y="%d" font-size="11" text-anchor="middle">%s</text>'
                     % (X(ref), y0 - 6, html.escape(ref_label)))
    s.append("</svg>")
    return "\n".join(s)


def charts(res):
    S = index(res)
    live = live_conditions(res)
    shown = [c for c in CHART_CONDITIONS if c in live]
    out = []
    for mn in modes(res):
        items = []
        for w in res["options"]["workloads"]:
            if w.startswith("bounce"):
                continue
            m = headline_metric(res, w)
            for c in shown:
                r = S.get((w, mn, m, c))
                if r and r.get("ratio"):
                    g, lo, hi = goodness(r)
                    items.append(("%s, %s" % (w, c), c, g, lo, hi))
        out.append(("Speed relative to plain SQLite, %s" % MODE_TEXT.get(mn, mn),
                    svg_bars("Speed relative to plain SQLite: %s" % MODE_TEXT.get(mn, mn),
                             "speed relative to plain (1.00 = as fast as plain; higher is better; "
                             "whiskers: 95% interval)", items, ref=1.0, ref_label="plain", fmt=ratio_text)))
        items = []
        for w in res["options"]["workloads"]:
            for c in shown:
                r = S.get((w, mn, "wchar_per_op", c))
                p = S.get((w, mn, "wchar_per_op", "plain"))
                if r and p and p["median"] > 0 and r.get("ratio"):
                    items.append(("%s, %s" % (w, c), c, r["ratio"], r["ci_low"], r["ci_high"]))
        out.append(("Bytes written relative to plain, %s" % MODE_TEXT.get(mn, mn),
                    svg_bars("Bytes written relative to plain SQLite: %s" % MODE_TEXT.get(mn, mn),
                             "bytes written per unit of work relative to plain (1.00 = the same; "
                             "lower is better)", items, ref=1.0, ref_label="plain", fmt=ratio_text)))
    for w in res["options"]["workloads"]:
        m = headline_metric(res, w)
        items, unit, better, label = [], "", HIGHER, w
        for mn in modes(res):
            for c in live:
                r = S.get((w, mn, m, c))
                if r:
                    unit, better, label = r["unit"], r["better"], r["label"]
                    items.append(("%s, %s" % (c, mn), c, r["median"], r["min"], r["max"]))
        out.append(("%s" % w, svg_bars("%s: %s" % (w, label), "%s (%s is better; whiskers: min to max "
                                       "over runs)" % (unit, better), items)))
    return out


# ---- HTML -----------------------------------------------------------------------------------

CSS = ("body{font-family:sans-serif;max-width:1400px;margin:1em auto;padding:0 1em;color:#222}"
       "table{border-collapse:collapse;font-size:13px;margin:0.5em 0}"
       "td,th{border:1px solid #ccc;padding:2px 6px;vertical-align:top}"
       "th{background:#f2f2f2}td{text-align:right}td.l{text-align:left}"
       ".warning{border:2px solid #c00;background:#fff3f3;padding:0.6em 1em;font-weight:bold}"
       ".summary{font-size:16px}.met{color:#070}.missed{color:#b00;font-weight:bold}"
       ".undecided{color:#a60}svg.chart{display:block;margin:10px 0 24px 0}")


def h_table(head, rows, left=1):
    e = html.escape
    out = ["<table><tr>" + "".join("<th>%s</th>" % e(str(h)) for h in head) + "</tr>"]
    for r in rows:
        cells = []
        for i, x in enumerate(r):
            cls = ' class="l"' if i < left else ""
            if isinstance(x, tuple):          # (text, css class)
                cells.append('<td class="%s%s">%s</td>' % ("l " if i < left else "", x[1], e(str(x[0]))))
            else:
                cells.append("<td%s>%s</td>" % (cls, e(str(x))))
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def verdict_class(v):
    if v.startswith("penalty") or v in ("missed", "slower"):
        return "missed"
    if v in ("undecided",):
        return "undecided"
    if v.startswith("faster") or v.startswith("no measurable") or v == "met":
        return "met"
    return ""


def html_report(res):
    e = html.escape
    P = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
         "<title>sqlite-tde benchmark report</title><style>%s</style></head><body>" % CSS,
         "<h1>sqlite-tde benchmark report</h1>"]
    q = quick_warning(res)
    if q:
        P.append('<p class="warning">Warning: %s</p>' % e(q))
    P.append('<p class="summary">%s</p>' % e(" ".join(summary_sentences(res))))
    env = res["environment"]
    P.append("<p>Generated %s by <code>%s</code>; load average %s at the start, %s at the end.</p>" % (
        e(res["generated"]), e(res["command"]), e(str(env.get("load_average_start"))),
        e(str(env.get("load_average_end")))))
    P.append("<h2>Verdicts</h2><p>sqlite-tde (auto-login wallet) against plain SQLite: speed "
             "relative to plain (1.00x = as fast, higher is better) with its 95% interval, the "
             "verdict, and bytes written relative to plain.</p>")
    head = ["workload"]
    for mn in modes(res):
        head += ["%s: speed" % mn, "%s: verdict" % mn, "%s: bytes written" % mn]
    rows = []
    for w, cells in verdict_rows(res):
        row = [w]
        for sp, v, b in cells:
            row += [sp, (v, verdict_class(v)), b]
        rows.append(row)
    P.append(h_table(head, rows))
    if na_text(res):
        P.append("<p>%s</p>" % e(na_text(res)))
    n = target_counts(res)
    P.append("<h2>Targets</h2><p>%d met, %d missed, %d undecided, %d not measured. A target is met or "
             "missed only when the whole 95%% interval is on one side of it.</p>" % (
                 n["met"], n["missed"], n["undecided"], n["not measured"]))
    order = {"missed": 0, "undecided": 1, "met": 2, "not measured": 3}
    P.append(h_table(["group", "target", "condition", "workload", "mode", "figure", "status"],
                     [(t.get("group", ""), t["target"], t["condition"], t["workload"], t.get("mode", ""),
                       t["figure"], (t["status"], verdict_class(t["status"])))
                      for t in sorted(res["targets"], key=lambda t: order.get(t["status"], 9))], left=6))
    P.append("<h2>Charts</h2>")
    for title, svg in charts(res):
        if svg:
            P.append(svg)
    P.append("<h2>Headline figures per condition</h2><p>Median (min to max) over runs; change "
             "against plain with its 95% interval.</p>")
    rows = []
    for w, mn, c, (r,) in per_condition_rows(res):
        v = change_text(r)
        rows.append((w, mn, c, "%s %s" % (num(r["median"]), r["unit"]),
                     "%s to %s" % (num(r["min"]), num(r["max"])),
                     "%s %s" % (ratio_text(r.get("ratio")), ci_text(r)), (v, verdict_class(v.split(", ")[-1]))))
    P.append(h_table(["workload", "mode", "condition", "median", "range", "ratio to plain", "verdict"], rows, left=3))
    P.append("<h2>Bytes and I/O calls per unit of work</h2><p>Medians per unit of work of the timed "
             "part; in brackets the ratio to plain.</p>")
    rows = []
    for w, mn, c, rr in per_condition_rows(res, io=True):
        rows.append([w, mn, c] + ["n/a" if not r else "%s (%s)" % (num(r["median"]), ratio_text(r.get("ratio")))
                                  for r in rr])
    P.append(h_table(IO_HEAD, rows, left=3))
    if suite_rows(res):
        P.append("<h2>Broad SQL suite</h2><p>%s</p>" % e(SUITE_TEXT))
        P.append(h_table(suite_head(res), suite_rows(res), left=3))
        P.append("<h2>Five worst suite tests</h2><p>%s</p>" % e(WORST_TEXT))
        P.append(h_table(["mode", "condition", "rank", "test", "what", "time ratio", "bytes ratio"],
                         worst_rows(res), left=5))
    if latency_rows(res):
        P.append("<h2>Commit latency</h2><p>%s</p>" % e(LATENCY_TEXT))
        P.append(h_table(LATENCY_HEAD, latency_rows(res), left=1))
    sl = standby_latency_rows(res)
    if sl:
        P.append("<h2>Standby commit latency</h2><p>%s</p>" % e(STANDBY_LAT_TEXT))
        P.append(h_table(STANDBY_LAT_HEAD, sl, left=3))
    sb = standby_rows(res)
    if sb:
        P.append("<h2>Standby lag</h2><p>%s</p>" % e(STANDBY_TEXT))
        P.append(h_table(STANDBY_HEAD, sb, left=5))
    ac = archive_cost_rows(res)
    if ac:
        P.append("<h2>Archive cost</h2><p>%s</p>" % e(ARCHIVE_COST_TEXT))
        P.append(h_table(ARCHIVE_COST_HEAD, ac, left=3))
    ar = archive_rows(res)
    if ar:
        P.append("<h2>Archive upload</h2><p>%s</p>" % e(ARCHIVE_TEXT))
        P.append(h_table(ARCHIVE_HEAD, ar, left=3))
    P.append("<h2>Method</h2><p>%s</p><h3>Conditions</h3><ul>%s</ul>" % (
        e(method_text(res)), "".join("<li><b>%s</b>: %s</li>" % (e(a), e(b)) for a, b in conditions_text(res))))
    P.append("<h2>Environment</h2>")
    P.append(h_table(["", ""], [(lab, env[k]) for k, lab in ENV_KEYS if k in env and env[k] is not None]))
    P.append("<h2>Limitations</h2><ul>%s</ul>" % "".join("<li>%s</li>" % e(x) for x in res["limitations"]))
    rows = []
    for i, ob in enumerate(res["observations"]):
        if "error" in ob:
            rows.append((i + 1, ob["repeat"], ob["mode"], ob["workload"], ob["condition"],
                         ("FAILED: " + ob["error"][:200], "missed"), "", ""))
        else:
            m = headline_metric(res, ob["workload"])
            rows.append((i + 1, ob["repeat"], ob["mode"], ob["workload"], ob["condition"],
                         num(ob["result"].get(m)), num(ob["result"].get("io_wchar")), ob["result"].get("checksum")))
    P.append("<h2>Raw measurements</h2><details><summary>%d observations (every sample is in "
             "results.json)</summary>%s</details>" % (
                 len(rows), h_table(["#", "repeat", "mode", "workload", "condition", "headline",
                                     "bytes written", "checksum"], rows, left=0)))
    P.append("</body></html>")
    return "\n".join(P) + "\n"


def write_reports(res, out):
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(md_report(res))
    with open(os.path.join(out, "report.html"), "w") as f:
        f.write(html_report(res))


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        res = json.load(f)
    os.makedirs(argv[2], exist_ok=True)
    write_reports(res, argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
