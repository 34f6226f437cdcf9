#!/usr/bin/python3
"""Keys from every host (issue 16, item 3): a password wallet opened at run
time with SELECT tde_keystore_open(config, password), from Python (this
process, /usr/bin/python3's sqlite3 module) and from Node (better-sqlite3
from TDE_NPM_DIR); password_fd; and `sqlite-tde shell` with a typed password
and with password_env.

Asserts: before the call an encrypted database does not open; a wrong
password fails with SQLITE_AUTH and a message naming the wallet, never
the password; the right one returns 'OPEN' and databases then open, write
and read; a view or trigger cannot call it (DIRECTONLY); password_fd reads
an inherited pipe, and a closed descriptor fails clearly; the shell asks
on a terminal and reads the rows, and with password_env the sqlite3 child
has the variable neither in its environment nor the password on its
command line, nor any copy of it (plain or hex) in its memory while it
waits (run as root); tde_keystore_open_fd() reads a pipe.
"""
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_readme as readme  # noqa: E402  (pty runner, build paths)

BUILD, TMP = readme.BUILD, readme.TMP
PW = "tde-test-pw-sqlfn-3Rz8"
WRONG = "tde-test-pw-sqlfn-wrong-6Yb1"
failures = []


def check(cond, msg):
    print(("ok   " if cond else "FAIL ") + msg, flush=True)
    if not cond:
        failures.append(msg)
    return cond


def write(path, text, mode=0o600):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def run(argv, **kw):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120, **kw)
    return p.returncode, p.stdout.decode(errors="replace")


def scan_memory(pid, needles):
    """Occurrences of each needle in the readable, resident mappings of pid
    (mappings above 1 GiB -- the ASan shadow -- skipped, as test_hygiene.sh
    does)."""
    regions, cur = [], None
    with open("/proc/%d/smaps" % pid) as smaps:
        for line in smaps:
            m = re.match(r"([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$", line)
            if m:
                cur = [int(m.group(1), 16), int(m.group(2), 16), m.group(3), m.group(4), 0]
                regions.append(cur)
            elif line.startswith("Rss:") and cur:
                cur[4] = int(line.split()[1])
    counts = [0] * len(needles)
    with open("/proc/%d/mem" % pid, "rb", buffering=0) as mem:
        for a, b, perm, name, rss in regions:
            if perm[0] != "r" or name.startswith("[vvar") or name == "[vsyscall]" or rss == 0 \
               or b - a > (1 << 30):
                continue
            try:
                mem.seek(a)
                data = mem.read(b - a)
            except OSError:
                continue
            for i, x in enumerate(needles):
                counts[i] += data.count(x)
    return counts


def main():
    os.makedirs(TMP, exist_ok=True)
    w = tempfile.mkdtemp(prefix="ksql-", dir=TMP)
    cli = os.path.join(BUILD, "sqlite-tde")
    # The wallet is made with a password_file config; the application's
    # config names the same wallet and no password source.
    write(os.path.join(w, "make.pw"), PW + "\n")
    write(os.path.join(w, "make.conf"), "keystore = wallet\nwallet = app.wallet\npassword_file = make.pw\n")
    app_conf = os.path.join(w, "app.conf")
    write(app_conf, "keystore = wallet\nwallet = app.wallet   # the application supplies the password\n")
    rc, out = run([cli, "--config", os.path.join(w, "make.conf"), "keystore", "create"], cwd=w)
    check(rc == 0, "wallet created" + ("" if rc == 0 else ": " + out))
    db_path = os.path.join(w, "app.db")
    uri = "file:%s?vfs=tde&tde_config=%s" % (db_path, app_conf)

    # ---- Python, in this process ------------------------------------------
    boot = sqlite3.connect(":memory:")
    boot.enable_load_extension(True)
    boot.load_extension(os.path.join(BUILD, "tde"))
    try:
        sqlite3.connect(uri, uri=True).execute("CREATE TABLE t(x)")
        check(False, "Python: a database opens before the keystore is open")
    except sqlite3.DatabaseError as e:
        check("authoriz" in str(e), "Python: no keystore yet: %s" % e)
    try:
        boot.execute("SELECT tde_keystore_open(?, ?)", (app_conf, WRONG)).fetchone()
        check(False, "Python: a wrong password is accepted")
    except sqlite3.DatabaseError as e:
        msg = str(e)
        check("tde_keystore_open" in msg and WRONG not in msg and PW not in msg,
              "Python: wrong password refused: %s" % msg)
        code = getattr(e, "sqlite_errorcode", None)
        if code is not None:
            check(code == 23, "Python: the error code is SQLITE_AUTH (23): %s" % code)
    # A view stored in a database file (TEMP views are the application's own).
    boot.execute("ATTACH ? AS aux", (os.path.join(w, "views.db"),))
    boot.execute("CREATE VIEW aux.v AS SELECT tde_keystore_open('%s', 'x') AS r" % app_conf)
    try:
        boot.execute("SELECT * FROM v").fetchone()
        check(False, "Python: a view may call tde_keystore_open")
    except sqlite3.DatabaseError as e:
        check("unsafe" in str(e) or "prohibited" in str(e), "Python: not from a view: %s" % e)
    r = boot.execute("SELECT tde_keystore_open(?, ?)", (app_conf, PW)).fetchone()[0]
    check(r == "OPEN", "Python: right password: %r" % r)
    db = sqlite3.connect(uri, uri=True)
    db.execute("CREATE TABLE t(x)")
    with db:
        db.execute("INSERT INTO t VALUES ('python row')")
    check(db.execute("SELECT x FROM t").fetchall() == [("python row",)], "Python: write and read")
    db.close()

    # ---- Node ----------------------------------------------------------------
    node = shutil.which("node")
    if check(node is not None, "node installed"):
        js = r"""
process.env.SQLITE_TDE_DEFAULT_VFS = '1';
process.env.SQLITE_TDE_CONFIG = process.argv[1];
const Database = require('better-sqlite3');
const [cfg, dbPath, pw, wrong] = process.argv.slice(1);
const boot = new Database(':memory:');
boot.loadExtension(process.argv[5]);
try { new Database(dbPath).prepare('SELECT count(*) FROM t').get(); console.log('OPENED-EARLY'); }
catch (e) { console.log('before: ' + e.code); }
try { boot.prepare('SELECT tde_keystore_open(?, ?)').pluck().get(cfg, wrong); console.log('WRONG-ACCEPTED'); }
catch (e) { console.log('wrong: ' + e.code + ' ' + (e.message.includes(wrong) ? 'LEAK' : 'clean')); }
console.log('open: ' + boot.prepare('SELECT tde_keystore_open(?, ?)').pluck().get(cfg, pw));
const db = new Database(dbPath);
db.prepare("INSERT INTO t VALUES ('node row')").run();
console.log('rows: ' + db.prepare('SELECT count(*) FROM t').pluck().get());
"""
        env = dict(os.environ)
        env["NODE_PATH"] = os.path.join(readme.npm_dir(), "node", "node_modules")
        rc, out = run([node, "-e", js, app_conf, db_path, PW, WRONG, os.path.join(BUILD, "tde")],
                      env=env, cwd=w)
        check(rc == 0, "Node ran" + ("" if rc == 0 else ": " + out))
        check("before: SQLITE_AUTH" in out, "Node: no keystore yet -> SQLITE_AUTH")
        check("wrong: SQLITE_AUTH clean" in out, "Node: wrong password -> SQLITE_AUTH, not echoed")
        check("open: OPEN" in out and "rows: 2" in out, "Node: right password, write and read")
        check(PW not in out, "Node: password not printed")

    # ---- password_fd ----------------------------------------------------------
    fd_conf = os.path.join(w, "fd.conf")
    write(fd_conf, "keystore = wallet\nwallet = app.wallet\npassword_fd = 7\n")
    child = ("import sqlite3,sys\n"
             "b=sqlite3.connect(':memory:'); b.enable_load_extension(True); b.load_extension(sys.argv[1])\n"
             "d=sqlite3.connect('file:app.db?vfs=tde&tde_config=fd.conf', uri=True)\n"
             "print('rows', d.execute('SELECT count(*) FROM t').fetchone()[0])\n")
    r_fd, w_fd = os.pipe()
    os.write(w_fd, (PW + "\n").encode())
    os.close(w_fd)
    if r_fd != 7:
        os.dup2(r_fd, 7)
        os.close(r_fd)
    p = subprocess.run(["/usr/bin/python3", "-c", child, os.path.join(BUILD, "tde")], cwd=w,
                       pass_fds=(7,), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    os.close(7)
    out = p.stdout.decode(errors="replace")
    check(p.returncode == 0 and "rows 2" in out, "password_fd 7: opens from the pipe: " + out.strip())
    rc, out = run([cli, "--config", fd_conf, "keystore", "status"], cwd=w)
    check("password_fd 7 is not open" in out, "password_fd without the descriptor: " + out.strip())

    # ---- sqlite-tde shell: typed password, and password_env -------------------
    env = readme.host_env()
    rc, out = readme.run_pty([cli, "--config", app_conf, "shell", db_path, "SELECT count(*) FROM t"], w, env,
                             password=PW)
    check(rc == 0 and re.search(r"^2\r?$", out, re.M) is not None and PW not in out,
          "shell asks for the password on a terminal and reads the rows: " + out.replace(PW, "<pw>").strip())
    env_conf = os.path.join(w, "env.conf")
    write(env_conf, "keystore = wallet\nwallet = app.wallet\npassword_env = TDE_SQLFN_PW\n")
    env = dict(os.environ)
    env["TDE_SQLFN_PW"] = PW
    probe = ".system echo env:$(env | grep -c TDE_SQLFN_PW); tr '\\000' ' ' < /proc/$PPID/cmdline > cmdline.txt"
    rc, out = run([cli, "--config", env_conf, "shell", db_path, "SELECT count(*) FROM t", probe], env=env, cwd=w)
    check(rc == 0 and "2" in out.split("\n"), "password_env: the shell reads the rows: %r" % out)
    check("env:0" in out, "password_env: the variable is not in the child's environment")
    with open(os.path.join(w, "cmdline.txt")) as f:
        cmdline = f.read()
    check("sqlite3" in cmdline and PW not in cmdline and PW.encode().hex() not in cmdline,
          "password_env: the password is not on the child's command line")
    check(PW not in out, "password_env: password not printed")

    # tde_keystore_open_fd from Python: the password through a pipe.
    r_fd, w_fd = os.pipe()
    os.write(w_fd, (PW + "\n").encode())
    os.close(w_fd)
    child = ("import sqlite3,sys\n"
             "b=sqlite3.connect(':memory:'); b.enable_load_extension(True); b.load_extension(sys.argv[1])\n"
             "print(b.execute('SELECT tde_keystore_open_fd(?, ?)', (sys.argv[2], int(sys.argv[3]))).fetchone()[0])\n"
             "d=sqlite3.connect('file:app.db?vfs=tde&tde_config=' + sys.argv[2], uri=True)\n"
             "print('rows', d.execute('SELECT count(*) FROM t').fetchone()[0])\n")
    p = subprocess.run(["/usr/bin/python3", "-c", child, os.path.join(BUILD, "tde"), app_conf, str(r_fd)],
                       cwd=w, pass_fds=(r_fd,), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    os.close(r_fd)
    out = p.stdout.decode(errors="replace")
    check(p.returncode == 0 and "OPEN" in out and "rows 2" in out, "tde_keystore_open_fd from a pipe: " + out.strip())

    # While the shell (password from password_env, handed over by pipe)
    # waits on its input: no copy of the password, plain or hex, in its
    # memory (root only: /proc/PID/mem of another process).
    if os.geteuid() == 0:
        fifo = os.path.join(w, "in.fifo")
        os.mkfifo(fifo)
        env = dict(os.environ)
        env["TDE_SQLFN_PW"] = PW
        outf = open(os.path.join(w, "shell.out"), "w")
        proc = subprocess.Popen([cli, "--config", env_conf, "shell", db_path], stdin=subprocess.PIPE,
                                stdout=outf, stderr=subprocess.STDOUT, env=env, cwd=w)
        proc.stdin.write(b"SELECT 'ready', count(*), group_concat(x) FROM t;\n")
        proc.stdin.flush()
        for _ in range(2400):                       # up to 120 s on a busy machine
            with open(os.path.join(w, "shell.out")) as f:
                if "ready|2" in f.read():
                    break
            time.sleep(0.05)
        n_pw, n_hex, n_row = scan_memory(proc.pid, [PW.encode(), PW.encode().hex().encode(), b"python row"])
        found = n_pw + n_hex
        check(n_row >= 1, "control: the scan finds a decrypted row in the shell's memory (%d)" % n_row)
        proc.stdin.close()
        proc.wait(timeout=30)
        outf.close()
        with open(os.path.join(w, "shell.out")) as f:
            check("ready|2" in f.read(), "shell waiting on stdin has read the rows")
        check(found == 0, "no copy of the password in the waiting shell's memory (%d found)" % found)

    print("%d failures" % len(failures))
    if failures:
        sys.exit(1)
    if os.environ.get("TDE_KEEP_SCRATCH") != "1":
        shutil.rmtree(w, ignore_errors=True)


if __name__ == "__main__":
    main()
