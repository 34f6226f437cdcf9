#!/usr/bin/python3
"""Run every code block of README.md and of the guides in docs/ verbatim,
so the documentation cannot rot.

Every fenced block of README.md and of each guide in GUIDES must be
preceded by a marker line

    <!-- test: KIND [ARG] [expect="TEXT"]... -->

and is run, README first, then the guides in GUIDES order, each file top to
bottom, in one scratch folder (the working directory of every block; a
guide's blocks find what the README's made):

  skip REASON not run (a block that needs hardware, e.g. a PKCS#11 token);
              listed in the output
  file PATH   the block is written to PATH (mode 0600)
  sh          bash -e -o pipefail, under a pseudo-terminal; a prompt ending
              in "password: " is answered with the test password
  sqlite3     the "$ " line is the command, the "sqlite> " lines its
              standard input; every other line of the block must appear in
              its output
  c FILE      written to FILE, compiled against the build folder's library
              (-lsqlite-tde), and run
  python      /usr/bin/python3 (stdin: the test password), with the
              sqlite_tde package of python/ and the build's tde.so on
              PYTHONPATH
  node        node with better-sqlite3 from TDE_NPM_DIR and the sqlite-tde
              package of npm/ with the build's tde.so on NODE_PATH (stdin:
              the password)

(test_packages.py runs the README again with the built wheel installed in
a venv and the packed npm tarball installed: run_docs(python=, node_path=).)

A block that uses $S3ENV (README "Archive and point-in-time restore")
gets in its environment the path of the s3.env file of a local S3 server
(tests/lib/s3server.sh: Ceph's RADOS gateway on 127.0.0.1), started in the
scratch folder before the first block and stopped by pid at the end, also
on failure; a block that starts a process in the background leaves its pid
in a file NAME.pid of the scratch folder, and any still running at the end
is stopped (SIGTERM) before the server.

expect="TEXT" must appear in the block's output.  The only change made to a
block is the README's documented path rule: /etc/sqlite-tde/ and
/var/lib/myapp/ and /var/backups/ become folders of the scratch folder, /usr/local/lib/sqlite-tde/
and /usr/local/bin/ the build folder (which is first on PATH).  Any
failure, a missing marker, an unknown kind or a missing tool fails the test.

Environment: TDE_BUILD, TDE_SRC, TDE_TEST_TMP (set by ctest).
"""
import os
import pty
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import termios
import time

SRC = os.environ.get("TDE_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("TDE_BUILD") or os.path.join(SRC, "build")
TMP = os.environ.get("TDE_TEST_TMP") or tempfile.gettempdir()
PASSWORD = "tde-test-pw-readme-4Gd8"
TIMEOUT = 120

GUIDES = ["docs/INSTALL.md", "docs/HOSTS.md", "docs/OPERATIONS.md", "docs/KEYSTORES.md",
          "docs/CONFIGURATION.md", "docs/CLI.md", "docs/STANDBY.md", "docs/THREAT-MODEL.md",
          "docs/RELIABILITY.md", "docs/TESTING.md",
          # the packages' own READMEs (PyPI's and npm's page)
          "python/README.md", "npm/README.md"]
# Fewest blocks each file must have (a file that lost its blocks fails).
LEAST = {"README.md": 10, "docs/HOSTS.md": 4, "docs/OPERATIONS.md": 4, "docs/KEYSTORES.md": 5,
         "docs/STANDBY.md": 3}

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg, flush=True)


def sections(text, heading):
    """Lines of README.md from `## heading` to the next level-2 heading,
    with their 1-based line numbers."""
    lines = text.split("\n")
    out, inside, fence = [], False, False
    for i, line in enumerate(lines, 1):
        if line.startswith("```"):
            fence = not fence
        if not fence and line.startswith("## "):
            inside = line[3:].strip() == heading
            continue
        if inside:
            out.append((i, line))
    return out


def numbered_lines(text):
    """Every line of a file with its 1-based number."""
    return list(enumerate(text.split("\n"), 1))


def blocks(numbered):
    """(line, marker, body) for every fenced block; marker None if absent."""
    res = []
    i = 0
    while i < len(numbered):
        n, line = numbered[i]
        if line.startswith("```"):
            j = i - 1
            while j >= 0 and numbered[j][1].strip() == "":
                j -= 1
            marker = None
            if j >= 0:
                m = re.fullmatch(r"\s*<!--\s*test:\s*(.*?)\s*-->\s*", numbered[j][1])
                if m:
                    marker = m.group(1)
            body = []
            i += 1
            while i < len(numbered) and not numbered[i][1].startswith("```"):
                body.append(numbered[i][1])
                i += 1
            res.append((n, marker, "\n".join(body) + "\n"))
        i += 1
    return res


def substitute(text, scratch):
    rules = [
        ("/etc/sqlite-tde", os.path.join(scratch, "etc/sqlite-tde")),
        ("/var/lib/myapp", os.path.join(scratch, "var/lib/myapp")),
        ("/var/backups", os.path.join(scratch, "var/backups")),
        ("/usr/local/lib/sqlite-tde", BUILD),
        ("/usr/local/bin", BUILD),
    ]
    for a, b in rules:
        # The folder itself or anything in it, never a longer name.
        text = re.sub(re.escape(a) + r"(?=/|\b|$)(?![\w.-])", b.replace("\\", "\\\\"), text)
    return text


def host_env():
    env = dict(os.environ)
    env["PATH"] = BUILD + os.pathsep + env.get("PATH", "")
    env.pop("SQLITE_TDE_CONFIG", None)
    return env


def run_pty(argv, cwd, env, password=PASSWORD):
    """Run argv on a new pseudo-terminal; answer password prompts (with
    password, or with the items of a list in turn).
    Returns (exit status, output)."""
    answers = list(password) if isinstance(password, (list, tuple)) else None
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.chdir(cwd)
            os.execvpe(argv[0], argv, env)
        finally:
            os._exit(127)
    out = b""
    answered = 0
    while True:
        r, _, _ = select.select([fd], [], [], TIMEOUT)
        if not r:
            os.kill(pid, 9)
            out += b"\n[timed out]\n"
            break
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
        if re.search(rb"password: $", out[-200:], re.I) and out.count(b"assword: ") > answered:
            answered = out.count(b"assword: ")
            # Answer only once echo is off: the prompt is printed first,
            # and tcsetattr(TCSAFLUSH) would discard an early answer.
            for _ in range(6000):                # up to 60 s on a busy machine
                if not termios.tcgetattr(fd)[3] & termios.ECHO:
                    break
                time.sleep(0.01)
            if answers is None:
                reply = password
            elif answers:
                reply = answers.pop(0)
            else:
                reply = ""
            os.write(fd, reply.encode() + b"\n")
    os.close(fd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


def run_plain(argv, cwd, env, stdin_text):
    env = dict(env)
    # A host that starts outside ctest must not find a terminal to prompt on.
    p = subprocess.run(argv, cwd=cwd, env=env, input=stdin_text.encode(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=TIMEOUT, start_new_session=True)
    return p.returncode, p.stdout.decode(errors="replace")


def sanitize_flags():
    cache = os.path.join(BUILD, "CMakeCache.txt")
    try:
        with open(cache) as f:
            if re.search(r"^TDE_SANITIZE:BOOL=ON$", f.read(), re.M):
                return ["-fsanitize=address,undefined"]
    except OSError:
        pass
    return []


def npm_dir():
    cache = os.path.join(BUILD, "CMakeCache.txt")
    with open(cache) as f:
        m = re.search(r"^TDE_NPM_DIR:PATH=(.*)$", f.read(), re.M)
    return m.group(1) if m else os.path.join(BUILD, "npm")


def stage_packages(scratch):
    """The Python and npm packages as their sources stand, with the build's
    tde.so, outside the blocks' view: (PYTHONPATH entry, NODE_PATH entry)."""
    stage = os.path.join(scratch, ".packages")
    pkg = os.path.join(stage, "python", "sqlite_tde")
    os.makedirs(pkg)
    shutil.copy(os.path.join(SRC, "python", "sqlite_tde", "__init__.py"), pkg)
    shutil.copy(os.path.join(BUILD, "tde.so"), pkg)
    npm = os.path.join(stage, "node", "sqlite-tde")
    os.makedirs(os.path.join(npm, "lib"))
    for f in ("package.json", "index.js"):
        shutil.copy(os.path.join(SRC, "npm", f), npm)
    shutil.copy(os.path.join(BUILD, "tde.so"), os.path.join(npm, "lib"))
    return os.path.join(stage, "python"), os.path.join(stage, "node")


def run_block(n, kind, args, body, scratch, env, where="README.md", python=None, node_path=None):
    """Returns the block's output, or None after reporting a failure."""
    where = "%s:%d (%s)" % (where, n, kind)
    if kind == "file":
        path = substitute(args[0], scratch)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(body)
        return ""
    if kind == "sh":
        script = os.path.join(scratch, "block-%d.sh" % n)
        with open(script, "w") as f:
            f.write(body)
        rc, out = run_pty(["bash", "-e", "-o", "pipefail", script], scratch, env)
    elif kind == "sqlite3":
        lines = body.rstrip("\n").split("\n")
        if not lines or not lines[0].startswith("$ "):
            fail(where + ": the first line must be '$ COMMAND'")
            return None
        argv = shlex.split(lines[0][2:])
        sql = "".join(l[len("sqlite> "):] + "\n" for l in lines[1:] if l.startswith("sqlite> "))
        rc, out = run_plain(argv, scratch, env, sql)
        for l in lines[1:]:
            if not l.startswith("sqlite> ") and l.strip() and l not in out.split("\n"):
                fail(where + ": output line %r not printed; got:\n%s" % (l, out))
                return None
    elif kind == "c":
        src = os.path.join(scratch, args[0])
        with open(src, "w") as f:
            f.write(body)
        exe = os.path.join(scratch, "readme-c-app")
        cenv = dict(env)
        cenv.pop("LD_PRELOAD", None)
        cmd = (["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", src, "-o", exe,
                "-I" + os.path.join(SRC, "include"), "-L" + BUILD, "-Wl,-rpath," + BUILD,
                "-lsqlite-tde", "-lsqlite3"] + sanitize_flags())
        p = subprocess.run(cmd, cwd=scratch, env=cenv, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=TIMEOUT)
        if p.returncode != 0:
            fail(where + ": does not compile:\n" + p.stdout.decode(errors="replace"))
            return None
        rc, out = run_plain([exe], scratch, env, "")
    elif kind == "python":
        penv = dict(env)
        if python is None:
            python = "/usr/bin/python3"
        rc, out = run_plain([python, "-c", body], scratch, penv, PASSWORD + "\n")
    elif kind == "node":
        node = shutil.which("node")
        if not node:
            fail(where + ": node not found (scripts/deps.sh installs nodejs)")
            return None
        nenv = dict(env)
        nenv["NODE_PATH"] = os.pathsep.join([os.path.join(npm_dir(), "node", "node_modules")]
                                            + ([node_path] if node_path else []))
        rc, out = run_plain([node, "-e", body], scratch, nenv, PASSWORD + "\n")
    else:
        fail(where + ": unknown test kind %r" % kind)
        return None
    if rc != 0:
        fail(where + ": exit status %d; output:\n%s" % (rc, out))
        return None
    return out


def s3server(action, folder):
    """tests/lib/s3server.sh start|stop FOLDER: (exit status, output)."""
    p = subprocess.run(["bash", os.path.join(SRC, "tests", "lib", "s3server.sh"), action, folder],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    return p.returncode, p.stdout.decode(errors="replace")


def stop_background(scratch):
    """SIGTERM to the processes whose pids blocks left in scratch/*.pid
    (only those still running a sqlite-tde command); waits up to 30 s."""
    pids = []
    for f in os.listdir(scratch):
        if not f.endswith(".pid"):
            continue
        try:
            pid = int(open(os.path.join(scratch, f)).read().split()[0])
            with open("/proc/%d/cmdline" % pid, "rb") as c:
                if b"sqlite-tde" not in c.read():
                    continue
            os.kill(pid, signal.SIGTERM)
            pids.append(pid)
        except (OSError, ValueError, IndexError):
            continue
    t0 = time.time()
    for pid in pids:
        while time.time() - t0 < 30 and os.path.exists("/proc/%d" % pid):
            time.sleep(0.1)
        if os.path.exists("/proc/%d" % pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def run_docs(docs=None, python=None, node_path=None):
    """Run every block of docs (default README.md and GUIDES) in one
    scratch folder.  python: the interpreter for python blocks (default
    /usr/bin/python3 with the staged package); node_path: a NODE_PATH entry
    holding sqlite-tde (default the staged package).  Returns the number
    of blocks run; failures are in `failures`."""
    docs = docs or ["README.md"] + GUIDES
    os.makedirs(TMP, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="readme-", dir=TMP)
    env = host_env()
    if python is None or node_path is None:
        pypath, nodepath = stage_packages(scratch)
        if python is None:
            env["PYTHONPATH"] = pypath + ((os.pathsep + env["PYTHONPATH"]) if env.get("PYTHONPATH") else "")
        node_path = node_path or nodepath
    ran = 0
    skipped = []
    found_in = []
    for doc in docs:
        try:
            with open(os.path.join(SRC, doc)) as f:
                found_in.append((doc, blocks(numbered_lines(f.read()))))
        except OSError as e:
            fail("%s: %s" % (doc, e))
    s3dir = None
    if any("$S3ENV" in body or "${S3ENV" in body for _, found in found_in for _, marker, body in found
           if marker and not marker.startswith("skip")):
        s3dir = os.path.join(scratch, ".s3server")
        t0 = time.time()
        rc, out = s3server("start", s3dir)
        if rc != 0:
            fail("tests/lib/s3server.sh start (for the blocks that use $S3ENV): exit %d:\n%s" % (rc, out[-2000:]))
        else:
            print("local S3 server for $S3ENV: %.1f s to start" % (time.time() - t0), flush=True)
        env["S3ENV"] = os.path.join(s3dir, "s3.env")
    try:
        ran += run_found(found_in, scratch, env, skipped, python, node_path)
    finally:
        stop_background(scratch)
        if s3dir and os.path.isdir(os.path.join(s3dir, "run")):
            rc, out = s3server("stop", s3dir)
            if rc != 0:
                fail("tests/lib/s3server.sh stop: exit %d:\n%s" % (rc, out[-1000:]))
    print("%d blocks run, %d not run (skip), %d failures" % (ran, len(skipped), len(failures)))
    if not failures and os.environ.get("TDE_KEEP_SCRATCH") != "1":
        shutil.rmtree(scratch, ignore_errors=True)
    return ran


def pin_ledger_v2(scratch, env):
    """The README's archive database, ledger.db, made first as format 2
    with the README's own configuration plus format_version = 2: the
    archiver (the shipper) refuses a format-3 database.  The block's own
    `sqlite-tde shell ledger.db ...` then opens it as it is.
    # pinned to 2 until r8-standby (standby on format 3) lands"""
    if os.path.exists(os.path.join(scratch, "ledger.db")):
        return
    etc = os.path.join(scratch, "etc/sqlite-tde")
    pinned = os.path.join(etc, "tde-pinned-v2.conf")
    with open(os.path.join(etc, "tde.conf")) as f:
        text = f.read()
    fd = os.open(pinned, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\nformat_version = 2\n")
    rc, out = run_plain([os.path.join(BUILD, "sqlite-tde"), "--config", pinned, "shell", "ledger.db",
                         "PRAGMA journal_mode=WAL"], scratch, env, "")
    if rc != 0:
        fail("making ledger.db as format 2 (pinned until r8-standby): exit %d: %s" % (rc, out[-1000:]))


def run_found(found_in, scratch, env, skipped, python, node_path):
    """Run the blocks of every (doc, blocks) pair in turn; returns how many ran."""
    ran = 0
    for doc, found in found_in:
        if len(found) < LEAST.get(doc, 0):
            fail("%s: only %d code blocks found" % (doc, len(found)))
        for n, marker, body in found:
            if marker is None:
                fail("%s:%d: code block without a '<!-- test: KIND -->' marker" % (doc, n))
                continue
            try:
                words = shlex.split(marker)
            except ValueError as e:
                fail("%s:%d: bad marker %r: %s" % (doc, n, marker, e))
                continue
            if not words:
                fail("%s:%d: empty marker" % (doc, n))
                continue
            kind = words[0]
            if kind == "skip":
                skipped.append((doc, n))
                print("not run: %s:%d (%s)" % (doc, n, " ".join(words[1:]) or "no reason given"), flush=True)
                if len(words) < 2:
                    fail("%s:%d: skip needs a reason" % (doc, n))
                continue
            args = [w for w in words[1:] if not w.startswith("expect=")]
            expects = [w[len("expect="):] for w in words[1:] if w.startswith("expect=")]
            body = substitute(body, scratch)
            if "$S3ENV" in body and "ledger.db" in body:
                pin_ledger_v2(scratch, env)   # pinned to 2 until r8-standby (standby on format 3) lands
            out = run_block(n, kind, args, body, scratch, env, doc, python, node_path)
            if out is None:
                continue
            for e in expects:
                if e not in out:
                    fail("%s:%d (%s): expected %r in the output:\n%s" % (doc, n, kind, e, out))
            if PASSWORD in out:
                fail("%s:%d (%s): the test password appeared in the output" % (doc, n, kind))
            ran += 1
            print("ok   %s:%d %s%s" % (doc, n, kind, (" " + args[0]) if args else ""), flush=True)
    return ran


def main():
    run_docs()
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
