#!/usr/bin/python3
"""The Python and npm packages as a user gets them, built and installed
offline from the repository, then the README's Quick start run with them.

  * python/build-wheel.sh builds the sqlite_tde wheel from python/ and the
    build's tde.so (Debian's setuptools and wheel, no build isolation, no
    index); the wheel must hold tde.so byte for byte;
  * /usr/bin/python3 -m venv makes a fresh virtual environment (no system
    site packages) and its pip installs the wheel from the file, --no-index;
  * npm/pack.sh packs the sqlite-tde npm package (npm pack); `npm install
    --offline` of the tarball into a scratch application folder;
    better-sqlite3 comes from TDE_NPM_DIR through NODE_PATH (no network);
  * the README's blocks then run as test_readme.py runs them, with the
    venv's python for the python blocks and the installed npm package for
    the node blocks (test_readme.run_docs(python=, node_path=)), and each
    host is checked to have used the installed package, not the sources;
  * sqlite_tde.open_keystore() with a wrong password is refused with the
    wallet's reason; the password is in neither the error nor any SQL
    statement, bound values expanded (sqlite3's trace callback: a
    password bound as a parameter would show there; the pipe does not).

Environment: TDE_BUILD, TDE_SRC, TDE_TEST_TMP, TDE_NPM_DIR (set by ctest).
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_readme as readme  # noqa: E402  (runs the README's blocks)

SRC = readme.SRC
BUILD = readme.BUILD
TMP = readme.TMP
TIMEOUT = 300
failed = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failed.append(what)
    return ok


def tool_env():
    """Builds and installs run uninstrumented: no sanitizer preload."""
    env = dict(os.environ)
    for k in ("LD_PRELOAD", "PYTHONPATH", "NODE_PATH"):
        env.pop(k, None)
    return env


def run(argv, cwd=None, env=None, stdin_text=None):
    p = subprocess.run(argv, cwd=cwd, env=env if env is not None else tool_env(),
                       input=stdin_text.encode() if stdin_text is not None else None,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=TIMEOUT)
    return p.returncode, p.stdout.decode(errors="replace")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    os.makedirs(TMP, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="packages-", dir=TMP)
    env = tool_env()
    env["TMPDIR"] = scratch
    so_hash = sha256(os.path.join(BUILD, "tde.so"))

    # The wheel.
    rc, out = run(["bash", os.path.join(SRC, "python", "build-wheel.sh"), BUILD,
                   os.path.join(scratch, "dist")], env=env)
    wheels = [l for l in out.split("\n") if l.endswith(".whl")]
    if not check(rc == 0 and len(wheels) == 1, "python/build-wheel.sh builds one wheel" + ("" if rc == 0 else ":\n" + out)):
        return finish(scratch)
    wheel = wheels[0]
    check(os.path.basename(wheel).startswith("sqlite_tde-0.1.0-py3-none-linux_"),
          "the wheel is tagged for this platform: " + os.path.basename(wheel))
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        inner = hashlib.sha256(z.read("sqlite_tde/tde.so")).hexdigest() if "sqlite_tde/tde.so" in names else None
    check(inner == so_hash, "the wheel bundles the build's tde.so byte for byte")
    check("sqlite_tde/__init__.py" in names, "the wheel holds the sqlite_tde package")

    # A fresh venv from Debian's python, the wheel installed from the file.
    venv = os.path.join(scratch, "venv")
    rc, out = run(["/usr/bin/python3", "-m", "venv", venv], env=env)
    if not check(rc == 0, "/usr/bin/python3 -m venv" + ("" if rc == 0 else ":\n" + out)):
        return finish(scratch)
    vpy = os.path.join(venv, "bin", "python")
    rc, out = run([vpy, "-m", "pip", "install", "--no-index", "--no-deps",
                   "--disable-pip-version-check", "--no-cache-dir", "-q", wheel], env=env)
    if not check(rc == 0, "pip install of the wheel into the venv" + ("" if rc == 0 else ":\n" + out)):
        return finish(scratch)
    rc, out = run([vpy, "-c", "import sqlite_tde; print(sqlite_tde.loadable_path())"], cwd=scratch, env=env)
    where = out.strip()
    check(rc == 0 and where.startswith(venv + "/") and os.path.isfile(where) and sha256(where) == so_hash,
          "the venv's sqlite_tde.loadable_path() is its installed tde.so: " + where)

    # The npm package: packed, then installed from the tarball.
    rc, out = run(["bash", os.path.join(SRC, "npm", "pack.sh"), BUILD, os.path.join(scratch, "npm-dist")], env=env)
    tgz = [l for l in out.split("\n") if l.endswith(".tgz")]
    if not check(rc == 0 and len(tgz) == 1, "npm/pack.sh packs one tarball" + ("" if rc == 0 else ":\n" + out)):
        return finish(scratch)
    app = os.path.join(scratch, "app")
    os.makedirs(app)
    with open(os.path.join(app, "package.json"), "w") as f:
        f.write('{"name": "readme-app", "version": "1.0.0", "private": true}\n')
    rc, out = run(["npm", "install", "--offline", "--no-audit", "--no-fund", "--ignore-scripts",
                   "--cache", os.path.join(scratch, "npm-cache"), tgz[0]], cwd=app, env=env)
    if not check(rc == 0, "npm install of the tarball" + ("" if rc == 0 else ":\n" + out)):
        return finish(scratch)
    modules = os.path.join(app, "node_modules")
    installed_so = os.path.join(modules, "sqlite-tde", "lib", "tde.so")
    check(os.path.isfile(installed_so) and sha256(installed_so) == so_hash,
          "node_modules/sqlite-tde/lib/tde.so is the build's tde.so")
    nenv = dict(env)
    nenv["NODE_PATH"] = os.pathsep.join([modules, os.path.join(readme.npm_dir(), "node", "node_modules")])
    rc, out = run(["node", "-e", "const t = require('sqlite-tde'); console.log(t.loadablePath());"
                   "console.log(require.resolve('better-sqlite3'))"], cwd=scratch, env=nenv)
    lines = out.strip().split("\n")
    check(rc == 0 and lines[0] == installed_so,
          "require('sqlite-tde').loadablePath() is the installed package's tde.so: " + lines[0])

    # The README, with the installed packages.
    before = len(readme.failures)
    ran = readme.run_docs(["README.md"], python=vpy, node_path=modules)
    check(len(readme.failures) == before and ran >= 10,
          "the README's %d blocks ran with the installed wheel and npm package" % ran)

    # open_keystore: a wrong password is refused with the reason, and is
    # never echoed.  (The README's blocks made the wallet under app.conf
    # with readme.PASSWORD; a fresh one here keeps this independent.)
    work = os.path.join(scratch, "wallet")
    os.makedirs(work)
    cfg = os.path.join(work, "w.conf")
    with open(cfg, "w") as f:
        f.write("keystore = wallet\nwallet = w.tdew\nwallet_kdf_t = 1\nwallet_kdf_m_kib = 8192\n")
    os.chmod(cfg, 0o600)
    good, bad = "tde-test-pw-pkg-right-7Qe2", "tde-test-pw-pkg-wrong-3Xr9"
    rc, out = readme.run_pty([os.path.join(BUILD, "sqlite-tde"), "--config", cfg, "keystore", "create"],
                             work, readme.host_env(), password=[good, good])
    if not check(rc == 0, "keystore create of a password wallet" + ("" if rc == 0 else ":\n" + out)):
        return finish(scratch)
    probe = ("import sqlite3, sys, sqlite_tde\n"
             "boot = sqlite3.connect(':memory:')\n"
             "sqlite_tde.load(boot)\n"
             "traced = []\n"
             "boot.set_trace_callback(traced.append)   # SQL with bound values expanded\n"
             "password = sys.stdin.readline().rstrip('\\n')\n"
             "try:\n"
             "    print('state', sqlite_tde.open_keystore(boot, sys.argv[1], password))\n"
             "except sqlite3.Error as e:\n"
             "    print('refused', type(e).__name__, e)\n"
             "print('statements', len(traced), 'with the password', sum(password in s for s in traced))\n")
    penv = readme.host_env()
    penv.pop("PYTHONPATH", None)
    p = subprocess.run([vpy, "-c", probe, cfg], cwd=work, env=penv, input=(bad + "\n").encode(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=TIMEOUT)
    out = p.stdout.decode(errors="replace")
    check(out.startswith("refused") and "password" in out and bad not in out,
          "open_keystore with a wrong password is refused with the reason: " + out.strip())
    check("statements 1 with the password 0" in out,
          "the password is in no SQL statement, bound values expanded (sqlite3 trace): " + out.strip().split("\n")[-1])
    p = subprocess.run([vpy, "-c", probe, cfg], cwd=work, env=penv, input=(good + "\n").encode(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=TIMEOUT)
    out = p.stdout.decode(errors="replace")
    check(out.startswith("state OPEN\n") and "statements 1 with the password 0" in out,
          "open_keystore with the right password, not in SQL: " + " / ".join(out.strip().split("\n")))
    return finish(scratch)


def finish(scratch):
    if readme.failures:
        failed.extend(readme.failures)
    print("%d failures" % len(failed))
    if failed:
        sys.exit(1)
    if os.environ.get("TDE_KEEP_SCRATCH") != "1":
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
