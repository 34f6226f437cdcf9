#!/usr/bin/env bash
# scan-secrets.sh DIR...: fail if any password or PIN the test suite uses
# appears in a file under DIR... other than a password or PIN file.
#
# `make test` runs it after every ctest run over $(BUILD)/testtmp (the
# tests' scratch files: wallets, databases, audit logs, SoftHSM tokens,
# outputs kept by failing tests) and $(BUILD)/Testing (ctest's
# LastTest.log holds everything every test printed).  Every file is read
# whole as bytes (grep -a -F): wallets, databases and tokens are binary and
# encrypted, and must not hold a password either.
#
# Files allowed to hold a secret, by name: *.pw, *.pin, pw, pw.txt, pin
# (the password_file / PIN files the tests write on purpose).
#
# Output names the file and the secret's number and origin, never the
# secret.  Exit 0: nothing found; 1: a secret outside the allowed files;
# 2: usage error or a folder that does not exist.
set -uo pipefail

# Every password and PIN in tests/ (issue 7, item 7), with where it comes
# from.  Keep them distinctive ("tde-test-pw-..."): a generic word such as
# "secret" or "1234" cannot be grepped for.  Not listed: the one-letter
# passwords of test_config.c's newline-handling checks ("a", "b"), the
# empty password, and passwords drawn at random (test_hygiene.c and .sh,
# bench/run.py), whose fixed prefixes are listed instead.
SECRETS=()
ORIGIN=()
secret() { SECRETS+=("$1"); ORIGIN+=("$2"); }
secret 'tde-test-pw-7Qx2'              'test_wallet.c, test_audit.c'
secret 'tde-test-pw-horse-9Lm3'        'test_wallet.c'
secret 'tde-test-pw-whatever-3Jc5'     'test_wallet.c, ignored by an auto-login wallet'
secret 'tde-test-pw-right-2Vb8'        'test_wallet.c'
secret 'tde-test-pw-wrong-6Np1'        'test_wallet.c, wrong password'
secret 'tde-test-pw-reg-8Hs4'          'test_wallet.c, registry and password_env'
secret 'tde-test-pw-ignored-1Ty7'      'test_wallet.c'
secret 'tde-test-pw-env-5Wq9'          'test_config.c, password_env'
secret 's3cret'                        'test_config.c, password_file'
secret 'hunter2'                       'test_config.c (typed into a config), test_audit.c'
secret 'Tr0ub4dor&3-correct-horse'     'test_audit.c'
secret 'another-wrong-one-by-arg'      'test_audit.c'
secret 'tde-test-pin-user-4Fz6'        'test_pkcs11.c, user PIN'
secret 'tde-test-pin-so-8Rw3'          'test_pkcs11.c, SO PIN'
secret 'correct horse battery staple'  'test_cli.sh, test_lifecycle.sh'
secret 'tde-test-pw-wrong-5Rv2'        'test_cli.sh, wrong password_file'
secret 'tde-test-pw-argv-3Hk9'         'test_cli.sh, refused on the command line'
secret 'user-4b7d19'                   'test_pkcs11.sh, user PIN'
secret 'so-8c1f2e'                     'test_pkcs11.sh, SO PIN'
secret 'wrong-0000'                    'test_pkcs11.sh, wrong PIN'
secret 'tde-test-pin-user-9Dm4'        'test_kmip.sh, SoftHSM user PIN'
secret 'tde-test-pin-so-2Kx7'          'test_kmip.sh, SoftHSM SO PIN'
secret 'tde-test-pw-readme-4Gd8'       'test_readme.py, typed at prompts and piped to Python/Node'
secret 'tde-test-pw-pkg-right-7Qe2'    'test_packages.py, sqlite_tde.open_keystore()'
secret 'tde-test-pw-pkg-wrong-3Xr9'    'test_packages.py, wrong password'
secret 'tde-test-pw-sqlfn-3Rz8'        'test_keystore_sql.py, tde_keystore_open() and password_fd'
secret 'tde-test-pw-sqlfn-wrong-6Yb1'  'test_keystore_sql.py, wrong password'
secret 'tde-test-pw-passwd-one-2Qm7'   'test_passwd.py, first password'
secret 'tde-test-pw-passwd-two-8Lc4'   'test_passwd.py, second password'
secret 'tde-test-pw-passwd-three-5Vx1' 'test_passwd.py, third password (C API)'
secret 'tde-test-pw-passwd-bad-9Hd6'   'test_passwd.py, wrong password'
secret 'tde-test-pin-user-anc-7Kw2'     'test_anchor.sh, SoftHSM user PIN'
secret 'tde-test-pin-so-anc-3Jq8'       'test_anchor.sh, SoftHSM SO PIN'
secret 'tde-hyg-pw-'                   'test_hygiene.c, prefix of its random password'
secret 'tde-hyg-it-'                   'test_hygiene.sh, prefix of its random password'

allowed() {
  case "${1##*/}" in
    *.pw|*.pin|pw|pw.txt|pin) return 0;;
  esac
  return 1
}

if [ $# -eq 0 ]; then
  echo "usage: $0 DIR..." >&2
  exit 2
fi
for d in "$@"; do
  if [ ! -d "$d" ]; then
    echo "scan-secrets: FAIL: $d is not a folder (did the tests run?)" >&2
    exit 2
  fi
done

# The patterns go to grep through a pipe (printf is a builtin): never on a
# command line, and no pattern file inside the folders scanned.
patterns() { printf '%s\n' "${SECRETS[@]}"; }

NFILES=0
NBYTES=0
NALLOWED=0
NFOUND=0
while IFS= read -r -d '' f; do
  NFILES=$((NFILES+1))
  NBYTES=$((NBYTES + $(stat -c %s "$f" 2>/dev/null || echo 0)))
  grep -a -F -q -f <(patterns) -- "$f" 2>/dev/null || continue
  if allowed "$f"; then
    NALLOWED=$((NALLOWED+1))
    continue
  fi
  for i in "${!SECRETS[@]}"; do
    if grep -a -F -q -f <(printf '%s\n' "${SECRETS[$i]}") -- "$f"; then
      NFOUND=$((NFOUND+1))
      echo "scan-secrets: SECRET FOUND: $f holds test secret #$((i+1)) (${ORIGIN[$i]})" >&2
    fi
  done
done < <(find "$@" -type f -print0)

echo "scan-secrets: $NFILES files ($NBYTES bytes) in $*: ${#SECRETS[@]} test secrets," \
     "$NFOUND found outside password/PIN files ($NALLOWED password/PIN files hold one)"
if [ "$NFOUND" -ne 0 ]; then
  echo "scan-secrets: FAIL: test secrets leaked into the files above" >&2
  exit 1
fi
exit 0
