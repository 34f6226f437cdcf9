#!/usr/bin/python3
"""Render a benchmark report.html in headless Chromium and check it.

    bench_render.py REPORT.html SCREENSHOT.png SCRATCH_DIR

Runs Debian's chromium twice with a new, empty profile in SCRATCH_DIR: once
with --dump-dom (console messages logged to stderr), once with
--screenshot.  Fails (exit 1, one line per problem) when Chromium is
missing or fails, when the page logged anything to the console (the report
has no script, so any console line is an error: a script error, a resource
that did not load), when the rendered DOM has no chart, or when a chart
lacks its axis label, tick labels, gridlines or value labels.  Used by
test_bench_report.sh (which also feeds it a broken page to show that the
check can fail).
"""
import html.parser
import os
import subprocess
import sys

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


class Charts(html.parser.HTMLParser):
    """Collects, per <svg class="chart">, the classes of its elements and the
    text of its axis labels."""

    def __init__(self):
        super().__init__()
        self.charts = []
        self.cur = None
        self.text_class = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = a.get("class", "")
        if tag == "svg" and "chart" in cls.split():
            self.cur = {"classes": {}, "axis_text": [], "title": a.get("aria-label", "")}
            self.charts.append(self.cur)
        elif self.cur is not None:
            for c in cls.split():
                self.cur["classes"][c] = self.cur["classes"].get(c, 0) + 1
            self.text_class = cls if tag == "text" else None

    def handle_endtag(self, tag):
        if tag == "svg":
            self.cur = None
        self.text_class = None

    def handle_data(self, data):
        if self.cur is not None and self.text_class == "axis-label" and data.strip():
            self.cur["axis_text"].append(data.strip())


def chromium(args, scratch, timeout=120):
    profile = os.path.join(scratch, "profile-%d" % len(os.listdir(scratch)))
    os.makedirs(profile)
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)       # the sanitizer runtime is not Chromium's business
    return subprocess.run([CHROMIUM] + FLAGS + ["--user-data-dir=" + profile] + args,
                          capture_output=True, text=True, timeout=timeout, env=env)


def check(report, png, scratch):
    errs = []
    if not os.access(CHROMIUM, os.X_OK):
        return ["%s is missing (scripts/deps.sh installs Debian's chromium)" % CHROMIUM]
    url = "file://" + os.path.abspath(report)
    p = chromium(["--enable-logging=stderr", "--v=0", "--dump-dom", url], scratch)
    if p.returncode != 0:
        errs.append("chromium --dump-dom exited %d: %s" % (p.returncode, p.stderr.strip()[-300:]))
    console = [l for l in p.stderr.splitlines() if ":CONSOLE" in l]
    for l in console:
        errs.append("console: " + l.split("]", 1)[-1].strip()[:300])
    parser = Charts()
    parser.feed(p.stdout)
    if not parser.charts:
        errs.append("the rendered page holds no chart")
    for i, c in enumerate(parser.charts):
        name = "chart %d (%s)" % (i + 1, c["title"][:60])
        if not c["axis_text"]:
            errs.append("%s has no axis label" % name)
        for cls, least in (("tick-label", 2), ("grid", 2), ("tick", 2), ("axis", 1), ("value", 1)):
            if c["classes"].get(cls, 0) < least:
                errs.append("%s has %d %s elements, expected at least %d" % (
                    name, c["classes"].get(cls, 0), cls, least))
    p = chromium(["--window-size=1400,3000", "--screenshot=" + os.path.abspath(png), url], scratch)
    if p.returncode != 0:
        errs.append("chromium --screenshot exited %d: %s" % (p.returncode, p.stderr.strip()[-300:]))
    try:
        with open(png, "rb") as f:
            head = f.read(8)
        if head != b"\x89PNG\r\n\x1a\n" or os.path.getsize(png) < 10000:
            errs.append("%s is not a PNG of a rendered page (%d bytes)" % (png, os.path.getsize(png)))
    except OSError as ex:
        errs.append("no screenshot: %s" % ex)
    return errs, len(parser.charts)


def main(argv):
    if len(argv) != 4:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    os.makedirs(argv[3], exist_ok=True)
    res = check(argv[1], argv[2], argv[3])
    if isinstance(res, list):
        errs, n = res, 0
    else:
        errs, n = res
    for e in errs:
        print("render: " + e)
    if not errs:
        print("render: %d charts, each with axis label, ticks and gridlines; no console message; "
              "screenshot %s" % (n, argv[2]))
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
