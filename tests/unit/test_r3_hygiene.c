/*
** Issue 22, the contained items (3, 6, 7, 8) and two review items: what
** an attacker with write access to the files' folders (but no key) must
** not get from the keystore and configuration code.  Each test fails on
** the code before the fix (checked when it was written) and says why.
**
**  - wallet_kind_pinned (item 3): an auto-login wallet put where a password
**    configuration (password_file) expects a password wallet is refused,
**    naming what was found; so is one under password_env, and one under
**    wallet_seal = tpm2 (refused before any TPM is asked).
**    The right kinds still open: a password wallet with its password
**    file, an auto-login wallet with a plain configuration.  (A sealed
**    wallet under wallet_seal = tpm2 is test_wallet_tpm.py's, with swtpm.)
**  - code_files_trusted (item 6): a configuration naming helper programs
**    is refused at mode 0666, and at 0600 in a 0777 folder; a helper of
**    mode 0777, or in a 0777 folder, is refused at keystore open; each
**    message names the file and its mode; 0600/0700 files in 0700
**    folders open.
**  - parse_errors_silent (item 7): a password file given as the
**    configuration (base64 with '=' padding, "key=value"-looking text, a
**    key with capitals) gives errors with the line number only, through
**    the C API and SQL tde_keystore_open(); nothing of the line is echoed.
**  - unwrap_stderr_redacted (item 7): an unwrap helper that prints a data
**    key (base64 and hex) on stderr and fails: neither the error nor any
**    log line holds it.
**  - sql_last_error_set (item 8): after a failed SELECT
**    tde_keystore_open(...) on a fresh thread, SQL tde_last_error() names
**    the failure (it was NULL).
**  - audit_log_no_follow (item 8): audit_log is a symbolic link to a
**    victim file: nothing is appended to the victim.
**  - state_temp_exclusive (item 8): symbolic links planted at the names
**    tdeWriteFileAtomic's temporary file can take (the old pid name and
**    the new ones): the victim is untouched and the state is written.
**  - registry_reference (review): one thread acquires the keystore and
**    wraps/unwraps with it in a loop, another closes it in a loop: under
**    ASan no use after free (before the fix the close freed it in the
**    caller's hands); each acquire holds a reference the close respects.
**  - bypass_per_connection_map / _anchor (review): while tde_db_remap
**    (tde_db_reanchor) opens database A, the same thread opens database B
**    (from a hook in a VFS below tde, at A's open): B's missing page map
**    (B's anchor rollback) is still refused.  Before the fix the bypass was
**    per thread and B was served.  Map: WAL mode; anchor: rollback journal.
*/
#include "tdetest.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>

#include "tde_int.h"
#include "config.h"
#include "keystore/keystore.h"
#include "repl/repl.h"

/* ---- helpers ---------------------------------------------------------------- */

static void writeText(const char *zPath, const char *zText, mode_t mode){
  unlink(zPath);
  writeAll(zPath, zText, strlen(zText));
  assert_int_equal(chmod(zPath, mode), 0);
}

/* zScratch/zName into zOut, as a folder of mode `mode` (made if missing). */
static void dirAt(char *zOut, const char *zName, mode_t mode){
  pathOf(zOut, zName);
  mkdir(zOut, 0700);
  assert_int_equal(chmod(zOut, mode), 0);
}

/* Captured log lines (every level), for "never in the log" checks. */
static char zLogBuf[65536];
static size_t nLogBuf;
static void captureLog(void *pArg, int level, const char *zMsg){
  size_t n = strlen(zMsg);
  (void)pArg; (void)level;
  if( nLogBuf + n + 2 < sizeof(zLogBuf) ){
    memcpy(zLogBuf + nLogBuf, zMsg, n);
    nLogBuf += n;
    zLogBuf[nLogBuf++] = '\n';
    zLogBuf[nLogBuf] = 0;
  }
}
static void captureStart(void){ nLogBuf = 0; zLogBuf[0] = 0; tde_set_log(captureLog, 0); }
static void captureStop(void){ tde_set_log(quietLog, 0); }

static int contains(const char *zHay, const char *zNeedle){
  return zHay && strstr(zHay, zNeedle)!=0;
}

/* ---- item 3: the wallet's kind is pinned by the configuration -------------- */

static void test_wallet_kind_pinned(void **state){
  char zDir[PATH_MAX], zPw[PATH_MAX], zConf[PATH_MAX], zId[TDE_KEYID_MAX+1];
  (void)state;
  dirAt(zDir, "kind", 0700);
  /* The attacker's auto-login wallet, where the password wallet belongs. */
  joinPath(zConf, zDir, "make.conf");
  writeText(zConf, "keystore = wallet\nwallet = app.wallet\n", 0600);
  assert_int_equal(tde_keystore_create(zConf, NULL, zId, sizeof(zId)), TDE_OK);
  joinPath(zPw, zDir, "wallet.pw");
  writeText(zPw, "tde-r3-kind-pw-5521\n", 0600);
  joinPath(zConf, zDir, "pw.conf");
  writeText(zConf, "keystore = wallet\nwallet = app.wallet\npassword_file = wallet.pw\n", 0600);
  assert_int_equal(tde_keystore_open(zConf, NULL), TDE_NOKEYSTORE);
  if( !contains(tde_last_error(), "auto-login") || !contains(tde_last_error(), "password_file")
   || !contains(tde_last_error(), "app.wallet") ){
    fail_msg("password configuration, auto-login wallet: %s", tde_last_error());
  }
  assert_null(tdeRegistryPeek(zConf));
  /* password_env pins it as well. */
  joinPath(zConf, zDir, "env.conf");
  writeText(zConf, "keystore = wallet\nwallet = app.wallet\npassword_env = TDE_R3_KIND_PW\n", 0600);
  setenv("TDE_R3_KIND_PW", "tde-r3-kind-pw-5521", 1);
  assert_int_equal(tde_keystore_open(zConf, NULL), TDE_NOKEYSTORE);
  unsetenv("TDE_R3_KIND_PW");
  assert_true(contains(tde_last_error(), "expects a password wallet (password_env)"));
  joinPath(zConf, zDir, "plain.conf");
  writeText(zConf, "keystore = wallet\nwallet = app.wallet\n", 0600);
  /* wallet_seal = tpm2: an unsealed wallet is refused before any TPM. */
  joinPath(zConf, zDir, "tpm.conf");
  writeText(zConf, "keystore = wallet\nwallet = app.wallet\nwallet_seal = tpm2\n"
            "wallet_tpm_tcti = swtpm:path=/nonexistent/tpm.sock\n", 0600);
  assert_int_equal(tde_keystore_open(zConf, NULL), TDE_NOKEYSTORE);
  if( !contains(tde_last_error(), "auto-login (unsealed)")
   || !contains(tde_last_error(), "wallet_seal = tpm2") ){
    fail_msg("tpm2 configuration, unsealed wallet: %s", tde_last_error());
  }
  /* The right kinds open. */
  joinPath(zConf, zDir, "plain.conf");
  assert_int_equal(tde_keystore_open(zConf, NULL), TDE_OK);
  assert_int_equal(tde_keystore_close(zConf), TDE_OK);
  joinPath(zConf, zDir, "pw2.conf");
  writeText(zConf, "keystore = wallet\nwallet = pw.wallet\npassword_file = wallet.pw\n"
            "wallet_kdf_t = 1\nwallet_kdf_m_kib = 8192\n", 0600);
  assert_int_equal(tde_keystore_create(zConf, NULL, zId, sizeof(zId)), TDE_OK);
  assert_int_equal(tde_keystore_open(zConf, NULL), TDE_OK);
  assert_int_equal(tde_keystore_close(zConf), TDE_OK);
  /* ... and the password wallet under the auto-login configuration's
  ** eyes is not an auto-login wallet: it needs its password. */
  joinPath(zConf, zDir, "pwplain.conf");
  writeText(zConf, "keystore = wallet\nwallet = pw.wallet\n", 0600);
  assert_int_equal(tde_keystore_open(zConf, NULL), TDE_BADPASSWORD);
}

/* ---- item 6: files that choose code run with the keys ---------------------- */

/* A helper that answers nothing useful: the open with command_key_id runs
** no helper, so only its existence and modes matter here. */
#define HELPER_TEXT "#!/bin/sh\ncat >/dev/null\nexit 1\n"

static void commandConf(const char *zConf, const char *zHelper, mode_t mode){
  char zText[2*PATH_MAX + 200];
  snprintf(zText, sizeof(zText), "keystore = command\nwrap_command = %s\nunwrap_command = %s\n"
           "command_key_id = k1\n", zHelper, zHelper);
  writeText(zConf, zText, mode);
}

static void test_code_files_trusted(void **state){
  char zOpen[PATH_MAX], zLoose[PATH_MAX], zConf[PATH_MAX], zHelper[PATH_MAX];
  TdeConfig *p = 0;
  (void)state;
  dirAt(zOpen, "trusted", 0700);
  dirAt(zLoose, "loose", 0700);
  joinPath(zHelper, zOpen, "helper");
  writeText(zHelper, HELPER_TEXT, 0700);

  /* The configuration, 0666 in a 0777 folder. */
  assert_int_equal(chmod(zLoose, 0777), 0);
  joinPath(zConf, zLoose, "tde.conf");
  commandConf(zConf, zHelper, 0666);
  assert_int_equal(tdeConfigLoad(zConf, &p), TDE_CONFIG);
  assert_null(p);
  if( !contains(tde_last_error(), zConf) || !contains(tde_last_error(), "0666") ){
    fail_msg("config 0666: %s", tde_last_error());
  }
  assert_int_equal(tde_keystore_open(zConf, NULL), TDE_CONFIG);
  /* 0600, but in a folder anyone can write (and so swap it). */
  assert_int_equal(chmod(zConf, 0600), 0);
  assert_int_equal(tdeConfigLoad(zConf, &p), TDE_CONFIG);
  if( !contains(tde_last_error(), zLoose) || !contains(tde_last_error(), "0777") ){
    fail_msg("config in a 0777 folder: %s", tde_last_error());
  }
  /* A wallet configuration names no code: its folder is its own business. */
  joinPath(zConf, zLoose, "wallet.conf");
  writeText(zConf, "keystore = wallet\nwallet = w\n", 0644);
  assert_int_equal(tdeConfigLoad(zConf, &p), TDE_OK);
  tdeConfigFree(p);
  p = 0;
  assert_int_equal(chmod(zLoose, 0700), 0);

  /* The helper, 0777. */
  joinPath(zConf, zOpen, "cmd.conf");
  commandConf(zConf, zHelper, 0600);
  assert_int_equal(chmod(zHelper, 0777), 0);
  assert_int_equal(tde_keystore_open(zConf, NULL), TDE_NOKEYSTORE);
  if( !contains(tde_last_error(), zHelper) || !contains(tde_last_error(), "0777") ){
    fail_msg("helper 0777: %s", tde_last_error());
  }
  assert_null(tdeRegistryPeek(zConf));
  /* The helper 0700, in a 0777 folder. */
  joinPath(zHelper, zLoose, "helper");
  writeText(zHelper, HELPER_TEXT, 0700);
  assert_int_equal(chmod(zLoose, 0777), 0);
  commandConf(zConf, zHelper, 0600);
  assert_int_equal(tde_keystore_open(zConf, NULL), TDE_NOKEYSTORE);
  if( !contains(tde_last_error(), zLoose) || !contains(tde_last_error(), "0777") ){
    fail_msg("helper in a 0777 folder: %s", tde_last_error());
  }
  assert_int_equal(chmod(zLoose, 0700), 0);
  /* Modes as they should be: the keystore opens. */
  joinPath(zHelper, zOpen, "helper");
  assert_int_equal(chmod(zHelper, 0700), 0);
  commandConf(zConf, zHelper, 0600);
  if( tde_keystore_open(zConf, NULL)!=TDE_OK ) fail_msg("good modes: %s", tde_last_error());
  assert_int_equal(tde_keystore_close(zConf), TDE_OK);
}

/* ---- item 7: parse errors, unwrap stderr ----------------------------------- */

static void test_parse_errors_silent(void **state){
  static const struct { const char *zText; const char *zSecret; const char *zWant; } aCase[] = {
    { "c2VjcmV0cGFzc3dvcmQ=\n", "c2VjcmV0cGFzc3dvcmQ", ":1: invalid key" },
    { "q2vjcmv0cgfzc3dvcmqx=\n", "q2vjcmv0cgfzc3dvcmqx", ":1: missing value" },
    { "q2vjcmv0cgfzc3dvcmqy==\n", "q2vjcmv0cgfzc3dvcmqy", "missing required key" },
    { "keystore = wallet\nwallet = w\nmysecretpass = hunter2\n", "mysecretpass", ":3: unknown key" },
    { "keystore = wallet\nwallet = w\nsupersecret=value\n", "supersecret", ":3: unknown key" },
    { "Tr0ub4dor=3x\n", "Tr0ub4dor", ":1: invalid key" },
    { "keystore = wallet\nwallet = w\nabcpass = 1\nabcpass = 2\n", "abcpass", ":4: duplicate key" },
    { "keystore = wallet\nwallet = w\nwallet = x\n", "wallet = x", ":3: duplicate key" },
  };
  char zConf[PATH_MAX], zSql[PATH_MAX + 64];
  sqlite3 *db = 0;
  (void)state;
  pathOf(zConf, "wallet.pw");
  for(size_t i=0; i<TDE_ARRAY_SIZE(aCase); i++){
    TdeConfig *p = 0;
    char *zErr = 0;
    writeText(zConf, aCase[i].zText, 0600);
    captureStart();
    assert_int_equal(tdeConfigLoad(zConf, &p), TDE_CONFIG);
    if( contains(tde_last_error(), aCase[i].zSecret) || !contains(tde_last_error(), aCase[i].zWant) ){
      captureStop();
      fail_msg("case %zu: %s", i, tde_last_error());
    }
    /* Through SQL: the error text, the SQL tde_last_error(), the log. */
    assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
    snprintf(zSql, sizeof(zSql), "SELECT tde_keystore_open('%s')", zConf);
    assert_int_not_equal(sqlite3_exec(db, zSql, 0, 0, &zErr), SQLITE_OK);
    captureStop();
    if( !zErr || contains(zErr, aCase[i].zSecret) || !contains(zErr, aCase[i].zWant)
     || contains(zLogBuf, aCase[i].zSecret) ){
      fail_msg("case %zu via SQL: %s / log %s", i, zErr ? zErr : "(none)", zLogBuf);
    }
    sqlite3_free(zErr);
    sqlite3_close(db);
  }
}

/* The key the helper prints: base64 of 32 bytes, and its hex. */
#define LEAK_B64 "q8XzT1mVb0r2Jk9wQ4sD7yHn3LcE6uAi5pRoGf0tZxI="
#define LEAK_HEX "abc5f34f5995b46af6264f7043cb03ef21e7dcb713bae02e7a51a819f2d679c"

static void test_unwrap_stderr_redacted(void **state){
  char zDir[PATH_MAX], zHelper[PATH_MAX], zConf[PATH_MAX];
  TdeKeystore *pKs = 0;
  uint8_t aBlob[48], aAad[37], aDek[32];
  int rc;
  (void)state;
  dirAt(zDir, "unwrap", 0700);
  joinPath(zHelper, zDir, "leaky");
  writeText(zHelper, "#!/bin/sh\ncat >/dev/null\necho \"unwrapped key=" LEAK_B64 "\" >&2\n"
            "echo \"hex " LEAK_HEX " done\" >&2\nexit 1\n", 0700);
  joinPath(zConf, zDir, "tde.conf");
  commandConf(zConf, zHelper, 0600);
  assert_int_equal(tdeRegistryAcquire(zConf, 0, &pKs, 0), TDE_OK);
  memset(aBlob, 7, sizeof(aBlob));
  memset(aAad, 1, sizeof(aAad));
  captureStart();
  rc = pKs->pMethods->xUnwrap(pKs, "k1", TDE_MECH_EXTERNAL, aBlob, sizeof(aBlob),
                              aAad, sizeof(aAad), aDek, sizeof(aDek));
  captureStop();
  tdeRegistryRelease(pKs);
  assert_int_not_equal(rc, TDE_OK);
  if( contains(tde_last_error(), "q8XzT1mVb0r2Jk9w") || contains(zLogBuf, "q8XzT1mVb0r2Jk9w")
   || contains(tde_last_error(), "5995b46af6264f70") || contains(zLogBuf, "5995b46af6264f70") ){
    fail_msg("the key reached the error or the log: %s / %s", tde_last_error(), zLogBuf);
  }
  /* Redacted, not dropped: the rest of the line is there. */
  assert_true(contains(tde_last_error(), "unwrapped key=[redacted]"));
  assert_true(contains(zLogBuf, "hex [redacted] done"));
  assert_int_equal(tde_keystore_close(zConf), TDE_OK);
}

/* ---- item 8: SQL tde_last_error, O_NOFOLLOW, O_EXCL --------------------------- */

static void *sqlLastErrorThread(void *pArg){
  char *zOut = pArg;
  sqlite3 *db = 0;
  sqlite3_stmt *p = 0;
  zOut[0] = 0;
  if( sqlite3_open(":memory:", &db)!=SQLITE_OK ) return 0;
  sqlite3_exec(db, "SELECT tde_keystore_open('/nonexistent-r3/tde-r3.conf')", 0, 0, 0);
  if( sqlite3_prepare_v2(db, "SELECT tde_last_error()", -1, &p, 0)==SQLITE_OK
   && sqlite3_step(p)==SQLITE_ROW && sqlite3_column_type(p, 0)==SQLITE_TEXT ){
    snprintf(zOut, 1024, "%s", (const char*)sqlite3_column_text(p, 0));
  }
  sqlite3_finalize(p);
  sqlite3_close(db);
  return 0;
}

static void test_sql_last_error_set(void **state){
  char zOut[1024];
  pthread_t t;
  (void)state;
  /* A new thread: no earlier failure of this process is in its slot. */
  assert_int_equal(pthread_create(&t, 0, sqlLastErrorThread, zOut), 0);
  assert_int_equal(pthread_join(t, 0), 0);
  if( !contains(zOut, "tde_keystore_open") || !contains(zOut, "tde-r3.conf") ){
    fail_msg("SQL tde_last_error() after a failed tde_keystore_open: '%s'", zOut);
  }
}

static void test_audit_log_no_follow(void **state){
  char zDir[PATH_MAX], zVictim[PATH_MAX], zLink[PATH_MAX], zConf[PATH_MAX], zId[TDE_KEYID_MAX+1];
  unsigned char *a;
  size_t n = 0;
  (void)state;
  dirAt(zDir, "audit", 0700);
  joinPath(zVictim, zDir, "victim.txt");
  writeText(zVictim, "VICTIM\n", 0600);
  joinPath(zLink, zDir, "audit.log");
  unlink(zLink);
  assert_int_equal(symlink(zVictim, zLink), 0);
  joinPath(zConf, zDir, "tde.conf");
  writeText(zConf, "keystore = wallet\nwallet = w.wallet\naudit_log = audit.log\n", 0600);
  tde_keystore_create(zConf, NULL, zId, sizeof(zId));
  tde_keystore_open(zConf, NULL);
  tde_keystore_close(zConf);
  a = readAll(zVictim, &n);
  assert_non_null(a);
  if( n!=7 || memcmp(a, "VICTIM\n", 7)!=0 ) fail_msg("the victim grew to %zu bytes", n);
  free(a);
}

static void test_state_temp_exclusive(void **state){
  char zDir[PATH_MAX], zVictim[PATH_MAX], zState[PATH_MAX], zTmp[PATH_MAX + 64];
  unsigned char *a;
  size_t n = 0;
  (void)state;
  dirAt(zDir, "state", 0700);
  joinPath(zVictim, zDir, "victim.txt");
  writeText(zVictim, "VICTIM\n", 0600);
  joinPath(zState, zDir, "app.db-tdestandby");
  /* The name before the fix, and the first names after it. */
  snprintf(zTmp, sizeof(zTmp), "%s.tmp%d", zState, (int)getpid());
  assert_int_equal(symlink(zVictim, zTmp), 0);
  for(int i=1; i<=64; i++){
    snprintf(zTmp, sizeof(zTmp), "%s.tmp%d.%d", zState, (int)getpid(), i);
    assert_int_equal(symlink(zVictim, zTmp), 0);
  }
  assert_int_equal(tdeWriteFileAtomic(zState, "state-1\n", 8, 0), TDE_OK);
  a = readAll(zVictim, &n);
  assert_non_null(a);
  if( n!=7 || memcmp(a, "VICTIM\n", 7)!=0 ) fail_msg("the victim was written (%zu bytes)", n);
  free(a);
  a = readAll(zState, &n);
  assert_non_null(a);
  assert_true(n==8 && memcmp(a, "state-1\n", 8)==0);
  free(a);
}

/* ---- review: the registry's reference --------------------------------------- */

static volatile int bRegStop;
static char zRegConf[PATH_MAX];

static void *regUser(void *pArg){
  long *pn = pArg;
  for(int i=0; i<400 && !bRegStop; i++){
    TdeKeystore *pKs = 0;
    char zKeyId[TDE_KEYID_MAX+1];
    uint8_t aDek[32], aBack[32], aBlob[TDE_WRAP_MAX], mech = 0;
    size_t nBlob = 0;
    if( tdeRegistryAcquire(zRegConf, 0, &pKs, 0)!=TDE_OK ) continue;
    memset(aDek, i, sizeof(aDek));
    if( pKs->pMethods->xCurrentKey(pKs, zKeyId, sizeof(zKeyId))==TDE_OK
     && pKs->pMethods->xWrap(pKs, zKeyId, aDek, 32, (const uint8_t*)"aad", 3,
                             aBlob, sizeof(aBlob), &nBlob, &mech)==TDE_OK
     && pKs->pMethods->xUnwrap(pKs, zKeyId, mech, aBlob, nBlob, (const uint8_t*)"aad", 3,
                               aBack, 32)==TDE_OK
     && memcmp(aDek, aBack, 32)==0 ){
      (*pn)++;
    }
    tdeRegistryRelease(pKs);
  }
  return 0;
}

static void *regCloser(void *pArg){
  long *pn = pArg;
  while( !bRegStop ){
    if( tdeRegistryClose(zRegConf)==TDE_OK ) (*pn)++;
  }
  return 0;
}

static void test_registry_reference(void **state){
  char zDir[PATH_MAX], zId[TDE_KEYID_MAX+1];
  pthread_t tUser, tCloser;
  long nRound = 0, nClosed = 0;
  (void)state;
  dirAt(zDir, "registry", 0700);
  joinPath(zRegConf, zDir, "tde.conf");
  writeText(zRegConf, "keystore = wallet\nwallet = w.wallet\n", 0600);
  assert_int_equal(tde_keystore_create(zRegConf, NULL, zId, sizeof(zId)), TDE_OK);
  bRegStop = 0;
  assert_int_equal(pthread_create(&tCloser, 0, regCloser, &nClosed), 0);
  assert_int_equal(pthread_create(&tUser, 0, regUser, &nRound), 0);
  assert_int_equal(pthread_join(tUser, 0), 0);
  bRegStop = 1;
  assert_int_equal(pthread_join(tCloser, 0), 0);
  printf("# registry: %ld good rounds, %ld closes\n", nRound, nClosed);
  assert_true(nRound>0);
  /* Every round gave its reference back: the close is not refused. */
  tde_keystore_open(zRegConf, NULL);
  assert_int_equal(tde_keystore_close(zRegConf), TDE_OK);
}

/* ---- review: the remap / reanchor bypass is per connection ----------------- */

/*
** A VFS below tde (registered as the default before tde, so tde's "orig"
** VFS is this one): forwards to unix, and when armed runs xHook once at
** the open of a main database whose name ends in zHookName -- inside
** tde_db_remap / tde_db_reanchor's own open, on the same thread.
*/
static sqlite3_vfs hookVfs;
static sqlite3_vfs *pUnixVfs;
static const char *zHookName;
static void (*xHook)(void);

static int hookOpen(sqlite3_vfs *pVfs, const char *zName, sqlite3_file *pFile,
                    int flags, int *pOutFlags){
  (void)pVfs;
  if( xHook && zName && (flags & SQLITE_OPEN_MAIN_DB) ){
    size_t n = strlen(zName), k = strlen(zHookName);
    if( n>=k && strcmp(zName+n-k, zHookName)==0 ){
      void (*x)(void) = xHook;
      xHook = 0;
      x();
    }
  }
  return pUnixVfs->xOpen(pUnixVfs, zName, pFile, flags, pOutFlags);
}

static char zDbB[PATH_MAX];
static char zConfB[PATH_MAX];
static int rcHookOpenB, rcHookReadB, bHookRan;

/* Open B through tde and read its table: the result codes. */
static void hookReadB(void){
  sqlite3 *db = 0;
  bHookRan = 1;
  rcHookOpenB = openTdeCfg(zDbB, zConfB, &db);
  rcHookReadB = -1;
  if( rcHookOpenB==SQLITE_OK ){
    sqlite3_extended_result_codes(db, 1);
    rcHookReadB = sqlite3_exec(db, "SELECT sum(length(v)) FROM t", 0, 0, 0);
  }
  sqlite3_close(db);
}

static void fillDb(const char *zDb, const char *zConf, int bWal, int nRow, int bTruncate){
  sqlite3 *db = 0;
  char zSql[200];
  assert_int_equal(openTdeCfg(zDb, zConf, &db), SQLITE_OK);
  if( bWal ) exec(db, "PRAGMA journal_mode=WAL");
  exec(db, "CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, v TEXT)");
  snprintf(zSql, sizeof(zSql), "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c "
           "WHERE i<%d) INSERT INTO t(v) SELECT printf('%%0300d', i) FROM c", nRow);
  exec(db, zSql);
  if( bTruncate ) exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

static void test_bypass_per_connection_map(void **state){
  char zDir[PATH_MAX], zDbA[PATH_MAX], zMapB[PATH_MAX + 16];
  (void)state;
  tdeSetCreateVersion(2);                 /* pinned: a case about DB-tdemap (format 2) */
  dirAt(zDir, "bypass-map", 0700);
  joinPath(zDbA, zDir, "a.db");
  joinPath(zDbB, zDir, "b.db");
  snprintf(zConfB, sizeof(zConfB), "%s", zCfg);
  fillDb(zDbA, zCfg, 1, 50, 1);
  fillDb(zDbB, zCfg, 1, 50, 1);
  fillDb(zDbB, zCfg, 1, 50, 1);          /* a second generation: the map is in force */
  snprintf(zMapB, sizeof(zMapB), "%s-tdemap", zDbB);
  assert_int_equal(access(zMapB, F_OK), 0);
  assert_int_equal(unlink(zMapB), 0);
  /* Alone, B is refused. */
  hookReadB();
  assert_int_equal(rcHookReadB, SQLITE_IOERR_AUTH);
  /* During A's remap, on the same thread: still refused. */
  bHookRan = 0;
  zHookName = "/a.db";
  xHook = hookReadB;
  if( tde_db_remap(zDbA, zCfg)!=TDE_OK ) fail_msg("remap A: %s", tde_last_error());
  xHook = 0;
  assert_true(bHookRan);
  if( rcHookOpenB==SQLITE_OK && rcHookReadB==SQLITE_OK ){
    fail_msg("B (page map missing) was served while A was remapped on this thread");
  }
  assert_int_equal(rcHookReadB, SQLITE_IOERR_AUTH);
  assert_int_not_equal(access(zMapB, F_OK), 0);   /* nothing written for B */
  tdeSetCreateVersion(tdetestNewFormat());
}

static void test_bypass_per_connection_anchor(void **state){
  char zDir[PATH_MAX], zAnc[PATH_MAX], zDbA[PATH_MAX], zText[PATH_MAX + 200];
  unsigned char *aOld;
  size_t nOld = 0;
  unsigned long long nA = 0, nB = 0;
  (void)state;
  dirAt(zDir, "bypass-anchor", 0700);
  dirAt(zAnc, "bypass-anchor/anchors", 0700);
  joinPath(zConfB, zDir, "tde.conf");
  snprintf(zText, sizeof(zText), "keystore = wallet\nwallet = %s/w.tdew\n"
           "freshness_anchor = file:anchors\nfreshness_anchor_interval = 0\n", zScratch);
  writeText(zConfB, zText, 0600);
  joinPath(zDbA, zDir, "a.db");
  joinPath(zDbB, zDir, "b.db");
  fillDb(zDbA, zConfB, 0, 10, 0);
  fillDb(zDbB, zConfB, 0, 10, 0);
  aOld = readAll(zDbB, &nOld);             /* a `cp` copy of B */
  assert_non_null(aOld);
  fillDb(zDbB, zConfB, 0, 10, 0);
  writeAll(zDbB, aOld, nOld);              /* B rolled back */
  free(aOld);
  hookReadB();
  assert_true(rcHookOpenB!=SQLITE_OK || rcHookReadB!=SQLITE_OK);
  bHookRan = 0;
  zHookName = "/a.db";
  xHook = hookReadB;
  if( tde_db_reanchor(zDbA, zConfB, &nA, &nB)!=TDE_OK ) fail_msg("reanchor A: %s", tde_last_error());
  xHook = 0;
  assert_true(bHookRan);
  if( rcHookOpenB==SQLITE_OK && rcHookReadB==SQLITE_OK ){
    fail_msg("B (rolled back) was served while A was reanchored on this thread");
  }
}

/* ---- main -------------------------------------------------------------------- */

static int groupSetup(void **state){
  (void)state;
  /* The hook VFS first, as the default: tde stacks on it. */
  pUnixVfs = sqlite3_vfs_find("unix");
  if( !pUnixVfs ) return -1;
  hookVfs = *pUnixVfs;
  hookVfs.zName = "r3hook";
  hookVfs.xOpen = hookOpen;
  if( sqlite3_vfs_register(&hookVfs, 1)!=SQLITE_OK ) return -1;
  return tdetestGroupSetup("r3hyg", 1);
}

static int groupTeardown(void **state){
  (void)state;
  tdetestScratchRemove();
  return 0;
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_wallet_kind_pinned),
    cmocka_unit_test(test_code_files_trusted),
    cmocka_unit_test(test_parse_errors_silent),
    cmocka_unit_test(test_unwrap_stderr_redacted),
    cmocka_unit_test(test_sql_last_error_set),
    cmocka_unit_test(test_audit_log_no_follow),
    cmocka_unit_test(test_state_temp_exclusive),
    cmocka_unit_test(test_registry_reference),
    cmocka_unit_test(test_bypass_per_connection_map),
    cmocka_unit_test(test_bypass_per_connection_anchor),
  };
  /* R3_ONLY=test_name (a glob) runs that test alone. */
  if( getenv("R3_ONLY") ) cmocka_set_test_filter(getenv("R3_ONLY"));
  return cmocka_run_group_tests(tests, groupSetup, groupTeardown);
}
