#!/usr/bin/env bash
# Secret hygiene of a running CLI (issue 7, item 7): `sqlite-tde shell` on
# an encrypted database with a password wallet whose password comes from
# password_file, left waiting on its standard input (a FIFO) after a query
# has made it load the keys.  While it waits:
#   - /proc/PID/limits shows "Max core file size 0 0";
#   - the process is not dumpable: files under /proc/PID belong to root
#     (the kernel's task_dump_owner for a non-dumpable process) and a
#     process of the same user cannot read /proc/PID/environ (ptrace
#     access check) -- both checked against a control process of the same
#     user that is dumpable, so the checks can fail;
#   - the password is in neither /proc/PID/cmdline nor /proc/PID/environ;
#   - as root: no copy of the password anywhere in the process's memory
#     (every readable mapping read through /proc/PID/mem).
# The shell is `sqlite3` exec'd by sqlite-tde, so the same PID runs both.
# A root run starts the CLI and the control as user nobody (setpriv):
# root's CAP_SYS_PTRACE would pass the same-user checks whatever the
# dumpable flag says, and root owns root's /proc/PID files anyway.
#
# Environment (set by ctest): TDE_BUILD, TDE_SRC, TDE_TEST_TMP.
set -uo pipefail

TDE_BUILD=${TDE_BUILD:?set TDE_BUILD to the build folder}
TDE_TEST_TMP=${TDE_TEST_TMP:-/tmp}
NFAIL=0
NPASS=0
ok()   { NPASS=$((NPASS+1)); echo "  ok    $*"; }
bad()  { NFAIL=$((NFAIL+1)); echo "  FAIL  $*"; }
step() { echo; echo "== $*"; }
need() { command -v "$1" >/dev/null || { echo "test_hygiene: FAIL: $1 is required and not installed"; exit 1; }; }
need sqlite3
need od
need /usr/bin/python3

mkdir -p "$TDE_TEST_TMP"
AS=()
if [ "$(id -u)" = 0 ]; then
  need setpriv
  # nobody must reach the files: a folder of its own outside the (0700)
  # test tree, with copies of the CLI and tde.so (found next to it).
  WORK=$(mktemp -d /tmp/tde-hygiene.XXXXXX)
  cp "$TDE_BUILD/sqlite-tde" "$TDE_BUILD/tde.so" "$WORK/"
  chown -R 65534:65534 "$WORK"
  AS=(setpriv --reuid=65534 --regid=65534 --clear-groups --)
  RUNAS="nobody (uid 65534)"
else
  WORK=$(mktemp -d "$TDE_TEST_TMP/test_hygiene.XXXXXX")
  cp "$TDE_BUILD/sqlite-tde" "$TDE_BUILD/tde.so" "$WORK/"
  RUNAS="$(id -un)"
fi
cd "$WORK" || exit 1
CLI="$WORK/sqlite-tde"
echo "test_hygiene: working in $WORK, processes run as $RUNAS"

PIDS=()
cleanup() {
  exec 3>&- 2>/dev/null
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
}
trap cleanup EXIT

# A random password, so it is in no file of the source tree or the build.
PW="tde-hyg-it-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
[ ${#PW} -eq 43 ] || { echo "test_hygiene: FAIL: could not make a password"; exit 1; }
asuser() { "${AS[@]}" "$@"; }
# Never on a command line, not even of a helper: printf is a builtin, and
# greps below take the password from the file (-f hyg.pw).
printf '%s\n' "$PW" | asuser sh -c 'umask 077; cat > hyg.pw'
printf 'keystore = wallet\nwallet = hyg.tdew\npassword_file = hyg.pw\nwallet_kdf_t = 1\nwallet_kdf_m_kib = 8192\naudit_log = audit.log\n' \
  | asuser sh -c 'umask 077; cat > tde.conf'

step "setup: password wallet (password_file) and an encrypted database"
if asuser "$CLI" --config tde.conf keystore create >out.txt 2>err.txt </dev/null; then
  ok "keystore create"
else
  bad "keystore create"; sed 's/^/        | /' err.txt
fi
if asuser "$CLI" --config tde.conf shell hyg.db "CREATE TABLE t(x); INSERT INTO t VALUES('hyg-row-canary-Zq81');" \
     >out.txt 2>err.txt </dev/null; then
  ok "database created through sqlite-tde shell"
else
  bad "database created through sqlite-tde shell"; sed 's/^/        | /' err.txt
fi

step "sqlite-tde shell waiting on stdin with the keys loaded"
rm -f in.fifo; asuser mkfifo in.fifo
# Not through the asuser function: $! must be the process that execs
# setpriv, sqlite-tde and then sqlite3, not a forked bash.
"${AS[@]}" "$CLI" --config tde.conf shell hyg.db <in.fifo >shell.out 2>shell.err &
PID=$!
PIDS+=("$PID")
exec 3>in.fifo
echo "SELECT 'rows=' || count(*) FROM t;" >&3
for _ in $(seq 1 1200); do                 # up to 120 s: a busy machine, an ASan build
  grep -q '^rows=1$' shell.out 2>/dev/null && break
  sleep 0.1
done
if grep -q '^rows=1$' shell.out; then ok "the shell (pid $PID) answered a query: keys loaded"
else bad "the shell did not answer"; sed 's/^/        | /' shell.err shell.out; fi
EXE=$(readlink "/proc/$PID/exe" 2>/dev/null)
case "$EXE" in
  */sqlite3*) ok "pid $PID now runs $EXE (exec'd by sqlite-tde)";;
  *) bad "pid $PID runs '$EXE', not sqlite3";;
esac
grep -q 'tde\.so' "/proc/$PID/maps" 2>/dev/null && ok "tde.so is loaded in it" || bad "tde.so not loaded"

# A control process of the same user that is dumpable.
"${AS[@]}" sleep 300 &
CPID=$!
PIDS+=("$CPID")
sleep 0.2

step "core dumps"
if grep -Eq '^Max core file size +0 +0 ' "/proc/$PID/limits"; then
  ok "shell: $(grep '^Max core file size' "/proc/$PID/limits" | tr -s ' ')"
else
  bad "shell: $(grep '^Max core file size' "/proc/$PID/limits" | tr -s ' '), wanted 0 0"
fi
if grep -Eq '^Max core file size +0 +0 ' "/proc/$CPID/limits"; then
  echo "  note  the control also has core size 0 (limit inherited from this environment)"
fi

step "not dumpable (PR_SET_DUMPABLE 0), against a dumpable control"
OWN=$(stat -c %u "/proc/$PID/status")
COWN=$(stat -c %u "/proc/$CPID/status")
WANT=$("${AS[@]}" id -u)
if [ "$COWN" = "$WANT" ]; then ok "control: /proc/$CPID/status belongs to uid $COWN (dumpable)"
else bad "control: /proc/$CPID/status belongs to uid $COWN, expected $WANT: the check cannot tell"; fi
if [ "$OWN" = 0 ] && [ "$WANT" != 0 ]; then ok "shell: /proc/$PID/status belongs to root (not dumpable)"
else bad "shell: /proc/$PID/status belongs to uid $OWN: the process is dumpable"; fi
if asuser head -c1 "/proc/$CPID/environ" >/dev/null 2>&1; then ok "control: its user can read /proc/$CPID/environ"
else bad "control: its user cannot read /proc/$CPID/environ: the check cannot tell"; fi
if asuser head -c1 "/proc/$PID/environ" >/dev/null 2>&1; then
  bad "shell: a process of the same user can read /proc/$PID/environ (dumpable, ptrace allowed)"
else
  ok "shell: a process of the same user cannot read /proc/$PID/environ (ptrace access refused)"
fi

step "the password is not in the command line, environment or memory"
HAVE_ENV=0
if tr '\0' '\n' <"/proc/$PID/cmdline" | grep -qF -f hyg.pw; then bad "password in /proc/$PID/cmdline"
else ok "not in /proc/$PID/cmdline ($(tr '\0' ' ' <"/proc/$PID/cmdline" | cut -c1-60)...)"; fi
if [ "$(id -u)" = 0 ]; then
  HAVE_ENV=1
  if grep -aqF -f hyg.pw "/proc/$PID/environ"; then bad "password in /proc/$PID/environ"
  else ok "not in /proc/$PID/environ ($(tr '\0' '\n' <"/proc/$PID/environ" | wc -l) variables)"; fi
  # Every readable mapping, through /proc/PID/mem (root may read a
  # non-dumpable process).  Mappings above 1 GiB (the ASan shadow) and
  # those with nothing resident are skipped and counted.
  SCAN=$(/usr/bin/python3 - "$PID" <<'EOF'
import re, sys
pid = sys.argv[1]
pw = open("hyg.pw", "rb").read().strip()
halves = [pw[11:27], pw[27:43]]          # the random part, in two halves
regions, cur = [], None
for line in open(f"/proc/{pid}/smaps"):
    m = re.match(r"([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$", line)
    if m:
        cur = [int(m.group(1), 16), int(m.group(2), 16), m.group(3), m.group(4), 0]
        regions.append(cur)
    elif line.startswith("Rss:") and cur:
        cur[4] = int(line.split()[1])
canary = b"hyg-row-canary-Zq81"          # a row: plaintext in the page cache
nread = nbytes = nskip = nhit = ncanary = 0
with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
    for a, b, perm, name, rss in regions:
        if perm[0] != "r" or name.startswith("[vvar") or name == "[vsyscall]" \
           or rss == 0 or b - a > (1 << 30):
            nskip += 1
            continue
        try:
            mem.seek(a)
            data = mem.read(b - a)
        except OSError:
            nskip += 1
            continue
        nread += 1
        nbytes += len(data)
        nhit += sum(data.count(h) for h in halves)
        ncanary += data.count(canary)
print(nread, nbytes, nskip, nhit, ncanary)
EOF
)
  read -r NREAD NBYTES NSKIP NHIT NCANARY <<<"$SCAN"
  if [ "${NCANARY:-0}" -ge 1 ]; then ok "control: the scan finds a decrypted row ($NCANARY copies)"
  else bad "control: the scan does not find the decrypted row: '$SCAN'"; fi
  if [ "${NREAD:-0}" -gt 10 ] && [ "${NBYTES:-0}" -gt 1000000 ] && [ "${NHIT:-1}" = 0 ]; then
    ok "memory of the waiting shell: $NREAD mappings, $NBYTES bytes read ($NSKIP skipped), 0 copies of the password"
  else
    bad "memory of the waiting shell: '$SCAN' (mappings, bytes, skipped, password halves, canaries)"
  fi
else
  echo "  SKIP  /proc/$PID/environ and memory: not readable without root (counted neither passed nor failed)"
fi

echo ".quit" >&3
exec 3>&-
if wait "$PID"; then ok "the shell exits cleanly"; else bad "the shell exited with $?"; fi
kill "$CPID" 2>/dev/null

step "the password in no file but the password file"
NFILES=0
NFOUND=0
for f in $(ls -A); do
  [ -f "$f" ] || continue
  case "$f" in hyg.pw) continue;; esac
  NFILES=$((NFILES+1))
  if grep -aqF -f hyg.pw "$f"; then bad "password found in $f"; NFOUND=$((NFOUND+1)); fi
done
[ "$NFOUND" = 0 ] && ok "in none of $NFILES files (outputs, audit log, wallet, database, config)"

echo
echo "test_hygiene: $NPASS passed, $NFAIL failed$([ "$HAVE_ENV" = 1 ] || echo ', 2 skipped (not root)')"
trap - EXIT
cleanup
if [ "$NFAIL" -ne 0 ]; then
  echo "test_hygiene: scratch folder kept: $WORK"
  exit 1
fi
cd / && rm -rf "$WORK"
exit 0
