#!/usr/bin/python3
"""`make install` like a -dev package (issue 16, item 2).

Runs `make install-files` (what `make install` does after building) into a
scratch DESTDIR with PREFIX=/usr/local, then checks:
  * the files: CLI, tde.so, libsqlite-tde.so -> .so.0 -> .so.0.1.0 with
    SONAME libsqlite-tde.so.0, the static library, the header, the .pc;
  * sqlite-tde.pc says prefix=/usr/local, and a second install with
    another PREFIX says that prefix;
  * the README's C example (its `<!-- test: c ... -->` block, paths by the
    README's rule) builds with `cc app.c $(pkg-config --cflags --libs
    sqlite-tde)` and nothing else, needs libsqlite-tde.so.0, and runs;
  * `pkg-config --static` gives a line that links the static library
    (-lssl included): the same program with -l:libsqlite-tde.a (as the
    README shows), and fully `-static` where every dependency has a static
    library (normal build; otherwise printed as not run, with why); each
    runs;
  * the installed CLI finds the installed tde.so (`sqlite-tde shell`).
pkg-config sees the staged files through PKG_CONFIG_SYSROOT_DIR.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_readme as readme  # noqa: E402  (README parsing and the path rule)

SRC, BUILD, TMP = readme.SRC, readme.BUILD, readme.TMP
failures = []


def check(cond, msg):
    print(("ok   " if cond else "FAIL ") + msg, flush=True)
    if not cond:
        failures.append(msg)
    return cond


def run(argv, env=None, cwd=None):
    p = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=300)
    return p.returncode, p.stdout.decode(errors="replace")


def tool_env():
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)          # the compiler and make are not under test
    return env


def install(destdir, prefix):
    rc, out = run(["make", "--no-print-directory", "-C", SRC, "install-files", "BUILD=" + BUILD,
                   "DESTDIR=" + destdir, "PREFIX=" + prefix], env=tool_env())
    check(rc == 0, "make install-files DESTDIR=... PREFIX=%s%s" % (prefix, "" if rc == 0 else "\n" + out))


def main():
    os.makedirs(TMP, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="install-", dir=TMP)
    dest = os.path.join(scratch, "root")
    install(dest, "/usr/local")
    root = dest + "/usr/local"
    for f in ["bin/sqlite-tde", "lib/sqlite-tde/tde.so", "lib/libsqlite-tde.a", "lib/libsqlite-tde.so.0.1.0",
              "include/sqlite-tde.h", "lib/pkgconfig/sqlite-tde.pc"]:
        check(os.path.isfile(os.path.join(root, f)), "installed " + f)
    check(os.readlink(root + "/lib/libsqlite-tde.so") == "libsqlite-tde.so.0", "libsqlite-tde.so -> .so.0")
    check(os.readlink(root + "/lib/libsqlite-tde.so.0") == "libsqlite-tde.so.0.1.0", ".so.0 -> .so.0.1.0")
    rc, out = run(["readelf", "-d", root + "/lib/libsqlite-tde.so.0.1.0"])
    check("Library soname: [libsqlite-tde.so.0]" in out, "SONAME libsqlite-tde.so.0")
    with open(root + "/lib/pkgconfig/sqlite-tde.pc") as f:
        pc = f.read()
    check(re.search(r"^prefix=/usr/local$", pc, re.M) is not None, "sqlite-tde.pc: prefix=/usr/local")

    other = os.path.join(scratch, "other")
    install(other, "/opt/tde-test")
    try:
        with open(other + "/opt/tde-test/lib/pkgconfig/sqlite-tde.pc") as f:
            check(re.search(r"^prefix=/opt/tde-test$", f.read(), re.M) is not None,
                  "PREFIX=/opt/tde-test: sqlite-tde.pc says prefix=/opt/tde-test")
    except OSError as e:
        check(False, "PREFIX=/opt/tde-test: %s" % e)

    # A keystore and a database with the installed CLI (and its tde.so).
    work = os.path.join(scratch, "work")
    os.makedirs(work)
    cfg_dir = os.path.join(work, "etc/sqlite-tde")
    os.makedirs(cfg_dir)
    os.makedirs(os.path.join(work, "var/lib/myapp"))
    cfg = os.path.join(cfg_dir, "tde.conf")
    with open(cfg, "w") as f:
        f.write("keystore = wallet\nwallet = %s/var/lib/myapp/tde.wallet   # auto-login\n" % work)
    os.chmod(cfg, 0o600)
    cli = root + "/bin/sqlite-tde"
    env = dict(os.environ)
    env.pop("SQLITE_TDE_EXTENSION", None)
    rc, out = run([cli, "--config", cfg, "keystore", "create", "--auto-login"], env=env, cwd=work)
    check(rc == 0, "installed CLI: keystore create" + ("" if rc == 0 else "\n" + out))
    rc, out = run([cli, "--config", cfg, "shell", "app.db", "CREATE TABLE notes(x)"], env=env, cwd=work)
    check(rc == 0, "installed CLI: shell finds the installed tde.so" + ("" if rc == 0 else "\n" + out))

    # The README's C example, verbatim but for the path rule.
    with open(os.path.join(SRC, "README.md")) as f:
        found = readme.blocks(readme.sections(f.read(), "Quick start"))
    cblocks = [b for (_, m, b) in found if m and m.split()[0] == "c"]
    if not check(len(cblocks) == 1, "README has one C example"):
        return finish(scratch)
    app = os.path.join(work, "app.c")
    with open(app, "w") as f:
        f.write(readme.substitute(cblocks[0], work))

    penv = tool_env()
    penv["PKG_CONFIG_SYSROOT_DIR"] = dest
    penv["PKG_CONFIG_PATH"] = root + "/lib/pkgconfig"
    rc, flags = run(["pkg-config", "--cflags", "--libs", "sqlite-tde"], env=penv)
    check(rc == 0 and "-lsqlite-tde" in flags, "pkg-config --cflags --libs sqlite-tde: " + flags.strip())
    rc, sflags = run(["pkg-config", "--static", "--cflags", "--libs", "sqlite-tde"], env=penv)
    check(rc == 0 and "-lssl" in sflags.split() and "-lcrypto" in sflags.split()
          and "-largon2" in sflags.split(), "pkg-config --static has -lssl -lcrypto -largon2: " + sflags.strip())
    san = readme.sanitize_flags()

    runs = [("shared", ["cc", app, "-o", work + "/app-shared"] + flags.split() + san, "/app-shared")]
    # The static library with the --static line's dependencies, shared system libraries.
    semi = [w.replace("-lsqlite-tde", "-l:libsqlite-tde.a") for w in sflags.split()]
    runs.append(("static library", ["cc", app, "-o", work + "/app-static-lib"] + semi + san, "/app-static-lib"))
    # Fully static only where every dependency has a static library (not
    # under the sanitizers, whose runtimes are shared).
    missing = []
    for w in sflags.split():
        if w.startswith("-l") and not w.startswith("-lsqlite-tde"):
            rc, path = run(["cc", "-print-file-name=lib%s.a" % w[2:]], env=tool_env())
            if not os.path.isabs(path.strip()):
                missing.append(w)
    if san or missing:
        print("not run: cc -static (%s)" % ("sanitizer build" if san else
              "no static library for " + " ".join(sorted(set(missing)))), flush=True)
    else:
        runs.append(("-static", ["cc", "-static", app, "-o", work + "/app-static"] + sflags.split(),
                     "/app-static"))
    n = 0
    for what, cmd, exe in runs:
        rc, out = run(cmd, env=penv, cwd=work)
        if not check(rc == 0, "cc (%s) links" % what + ("" if rc == 0 else ":\n" + " ".join(cmd) + "\n" + out)):
            continue
        rc, needed = run(["readelf", "-d", work + exe])
        has_so = "libsqlite-tde.so.0" in needed
        check(has_so == (what == "shared"), "%s: %s libsqlite-tde.so.0" % (what, "needs" if has_so else "does not need"))
        renv = dict(os.environ)
        renv["LD_LIBRARY_PATH"] = root + "/lib"
        rc, out = run([work + exe], env=renv, cwd=work)
        n += 1
        check(rc == 0 and ("notes: %d" % n) in out, "%s program runs: %s" % (what, out.strip()))
    finish(scratch)


def finish(scratch):
    print("%d failures" % len(failures))
    if failures:
        sys.exit(1)
    if os.environ.get("TDE_KEEP_SCRATCH") != "1":
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
