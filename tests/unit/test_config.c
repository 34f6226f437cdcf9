/*
** Unit tests for the configuration parser (src/config.c): syntax, key
** validation against the provider, error messages naming file and line,
** path resolution, and the two password sources.  Scratch files live in a
** mkdtemp directory under $TDE_TEST_TMP (default /tmp), removed at the end.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* tde_int.h first: keystore.h uses TDE_KEYID_MAX from sqlite-tde.h. */
#include "tde_int.h"
#include "config.h"
#include "keystore/keystore.h"
#include "cipher/cipher.h"

static char zScratch[1024];      /* short enough that joined paths fit PATH_MAX */

static int rmOne(const char *zPath, const struct stat *pSt, int flag, struct FTW *pFtw){
  (void)pSt; (void)flag; (void)pFtw;
  return remove(zPath);
}

static int setupScratch(void **state){
  const char *zTmp = getenv("TDE_TEST_TMP");
  (void)state;
  if( zTmp==0 || zTmp[0]==0 ) zTmp = "/tmp";
  mkdir(zTmp, 0700);                     /* may exist already */
  snprintf(zScratch, sizeof(zScratch), "%s/tdecfg-XXXXXX", zTmp);
  if( mkdtemp(zScratch)==0 ) return -1;
  return 0;
}

static int teardownScratch(void **state){
  (void)state;
  /* TDE_KEEP_SCRATCH: kept for scripts/scan-secrets.sh (make test). */
  if( getenv("TDE_KEEP_SCRATCH")==0 ) nftw(zScratch, rmOne, 16, FTW_DEPTH | FTW_PHYS);
  return 0;
}

/* Write zText to zScratch/zName with mode, path into zOut. */
static void writeFile(const char *zName, const char *zText, mode_t mode, char *zOut){
  char zPath[PATH_MAX];
  FILE *f;
  snprintf(zPath, sizeof(zPath), "%s/%s", zScratch, zName);
  unlink(zPath);
  f = fopen(zPath, "w");
  assert_non_null(f);
  assert_int_equal(fputs(zText, f) >= 0, 1);
  assert_int_equal(fclose(f), 0);
  assert_int_equal(chmod(zPath, mode), 0);
  if( zOut ) strcpy(zOut, zPath);
}

/* Load zText as tde.conf; return rc, leave config in *pp. */
static int loadText(const char *zText, TdeConfig **pp){
  char zPath[PATH_MAX];
  writeFile("tde.conf", zText, 0600, zPath);
  return tdeConfigLoad(zPath, pp);
}

static void expectError(const char *zText, int rcWant, const char *zNeedle){
  TdeConfig *p = (TdeConfig *)1;
  int rc = loadText(zText, &p);
  if( rc!=rcWant || strstr(tde_last_error(), zNeedle)==0 ){
    fail_msg("rc=%d (want %d) message \"%s\" (want \"%s\")",
             rc, rcWant, tde_last_error(), zNeedle);
  }
  assert_null(p);
  /* The file is named in every line-level message. */
  assert_non_null(strstr(tde_last_error(), "tde.conf"));
}

static void test_good_file(void **state){
  TdeConfig *p = 0;
  char zBuf[PATH_MAX], zWant[PATH_MAX];
  (void)state;
  assert_int_equal(loadText(
      "# sqlite-tde configuration\n"
      "keystore = wallet\n"
      "wallet   =   keys/prod.wallet  \n"
      "audit_log=/var/log/tde.log\n"
      "wallet_kdf_t = 1\n", &p), TDE_OK);
  assert_non_null(p);
  assert_int_equal(p->nEntry, 4);
  assert_string_equal(tdeConfigGet(p, "keystore"), "wallet");
  assert_string_equal(tdeConfigGet(p, "wallet"), "keys/prod.wallet");
  assert_string_equal(tdeConfigGet(p, "audit_log"), "/var/log/tde.log");
  assert_null(tdeConfigGet(p, "password_file"));
  assert_int_equal(p->aEntry[1].iLine, 3);
  assert_string_equal(p->zDir, zScratch);
  snprintf(zWant, sizeof(zWant), "%s/tde.conf", zScratch);
  assert_string_equal(p->zPath, zWant);

  /* Relative value resolved against the config's directory; absolute kept. */
  assert_int_equal(tdeConfigPath(p, "wallet", zBuf, sizeof(zBuf)), TDE_OK);
  snprintf(zWant, sizeof(zWant), "%s/keys/prod.wallet", zScratch);
  assert_string_equal(zBuf, zWant);
  assert_int_equal(tdeConfigPath(p, "audit_log", zBuf, sizeof(zBuf)), TDE_OK);
  assert_string_equal(zBuf, "/var/log/tde.log");
  assert_int_equal(tdeConfigPath(p, "password_file", zBuf, sizeof(zBuf)), TDE_NOTFOUND);
  assert_int_equal(tdeConfigPath(p, "wallet", zBuf, 8), TDE_RANGE);
  tdeConfigFree(p);
}

static void test_unknown_key(void **state){
  (void)state;
  expectError("keystore = wallet\nwallet = w\nwalet = x\n", TDE_CONFIG,
              "tde.conf:3: unknown key (known: wallet,");
  /* Keys of another provider are unknown too; upper case is not a key. */
  expectError("keystore = wallet\nwallet = w\n\nWallet = x\n", TDE_CONFIG,
              "tde.conf:4: invalid key before '='");
  /* A password typed into the config is rejected without echoing it. */
  {
    TdeConfig *p = 0;
    assert_int_equal(loadText("keystore = wallet\nwallet = w\npassword = hunter2\n", &p),
                     TDE_CONFIG);
    assert_non_null(strstr(tde_last_error(), ":3: unknown key (secrets never go"));
    assert_null(strstr(tde_last_error(), "hunter2"));
    assert_int_equal(loadText("keystore = wallet\nhunter2\n", &p), TDE_CONFIG);
    assert_non_null(strstr(tde_last_error(), ":2: expected 'key = value'"));
    assert_null(strstr(tde_last_error(), "hunter2"));
  }
}

static void test_missing_value(void **state){
  (void)state;
  expectError("keystore = wallet\nwallet =   \n", TDE_CONFIG,
              "tde.conf:2: missing value after '='");
  expectError("keystore = wallet\n = w\n", TDE_CONFIG, "tde.conf:2: missing key");
}

static void test_duplicate_key(void **state){
  (void)state;
  expectError("keystore = wallet\nwallet = a\n# again\nwallet = b\n", TDE_CONFIG,
              "tde.conf:4: duplicate key (first set on line 2)");
}

static void test_missing_keystore(void **state){
  (void)state;
  expectError("wallet = a\n", TDE_CONFIG, "missing required key 'keystore'");
  expectError("", TDE_CONFIG, "missing required key 'keystore'");
}

static void test_unknown_provider(void **state){
  (void)state;
  expectError("# hsm\n\nkeystore = hsm9000\n", TDE_CONFIG,
              "tde.conf:3: unknown keystore 'hsm9000'");
  assert_non_null(strstr(tde_last_error(), "wallet"));   /* lists the known ones */
}

static void test_comments_blank_crlf(void **state){
  TdeConfig *p = 0;
  (void)state;
  assert_int_equal(loadText(
      "\xEF\xBB\xBF# comment with = sign\r\n"
      "   \t\r\n"
      "   # indented comment\r\n"
      "keystore=wallet\r\n"
      "\n"
      "wallet = a#b.wallet    # trailing comment = with an equals sign\r\n"
      "audit_log = /x", &p), TDE_OK);          /* no final newline */
  assert_int_equal(p->nEntry, 3);
  assert_string_equal(tdeConfigGet(p, "wallet"), "a#b.wallet");   /* '#' inside a value stays */
  assert_string_equal(tdeConfigGet(p, "audit_log"), "/x");
  assert_int_equal(p->aEntry[0].iLine, 4);
  assert_int_equal(p->aEntry[1].iLine, 6);
  assert_int_equal(p->aEntry[2].iLine, 7);
  tdeConfigFree(p);
}

/* The README's own lines: a comment after a value, after a tab, and a
** value that is only a comment is a missing value. */
static void test_trailing_comments(void **state){
  TdeConfig *p = 0;
  (void)state;
  assert_int_equal(loadText(
      "keystore = wallet\t# the provider\n"
      "wallet = /var/lib/myapp/tde.wallet        # relative paths: relative to this file\n"
      "password_file = /etc/sqlite-tde/wallet.pw # or password_env = NAME\n", &p), TDE_OK);
  assert_string_equal(tdeConfigGet(p, "keystore"), "wallet");
  assert_string_equal(tdeConfigGet(p, "wallet"), "/var/lib/myapp/tde.wallet");
  assert_string_equal(tdeConfigGet(p, "password_file"), "/etc/sqlite-tde/wallet.pw");
  tdeConfigFree(p);
  expectError("keystore = wallet\nwallet = # only a comment\n", TDE_CONFIG,
              "tde.conf:2: missing value after '='");
  expectError("keystore = wallet # comment\nwallet # = x\n", TDE_CONFIG,
              "tde.conf:2: expected 'key = value'");
}

static void test_parse_from_memory(void **state){
  TdeConfig *p = 0;
  char zBuf[PATH_MAX];
  (void)state;
  assert_int_equal(tdeConfigParse("keystore = wallet\nwallet = w.wallet\n",
                                  "mem.conf", "/srv/tde", &p), TDE_OK);
  assert_int_equal(tdeConfigPath(p, "wallet", zBuf, sizeof(zBuf)), TDE_OK);
  assert_string_equal(zBuf, "/srv/tde/w.wallet");
  tdeConfigFree(p);
  p = 0;
  assert_int_equal(tdeConfigParse("keystore = wallet\nx = 1\n", "mem.conf", "/", &p),
                   TDE_CONFIG);
  assert_non_null(strstr(tde_last_error(), "mem.conf:2: unknown key (known: "));
  assert_null(p);
  /* More entries than the table holds. */
  {
    char zBig[4096];
    size_t n = 0;
    int i;
    n += (size_t)snprintf(zBig+n, sizeof(zBig)-n, "keystore = wallet\n");
    for(i=0; i<TDE_CONFIG_MAX_ENTRIES; i++){
      n += (size_t)snprintf(zBig+n, sizeof(zBig)-n, "k%d = v\n", i);
    }
    assert_int_equal(tdeConfigParse(zBig, "big.conf", "/", &p), TDE_CONFIG);
    assert_non_null(strstr(tde_last_error(), "too many entries"));
  }
}

static void test_locate(void **state){
  char zOut[PATH_MAX], zWant[PATH_MAX], zOld[PATH_MAX];
  (void)state;
  assert_non_null(getcwd(zOld, sizeof(zOld)));

  /* Explicit relative path, existing file: realpath of it. */
  writeFile("tde.conf", "keystore = wallet\n", 0600, 0);
  assert_int_equal(chdir(zScratch), 0);
  assert_int_equal(tdeConfigLocate("tde.conf", zOut, sizeof(zOut)), TDE_OK);
  {
    char *zReal = realpath(zScratch, 0);
    snprintf(zWant, sizeof(zWant), "%s/tde.conf", zReal);
    free(zReal);
  }
  assert_string_equal(zOut, zWant);
  /* Relative, missing: joined to the working directory. */
  assert_int_equal(tdeConfigLocate("sub/none.conf", zOut, sizeof(zOut)), TDE_OK);
  assert_int_equal(zOut[0], '/');
  assert_non_null(strstr(zOut, "/sub/none.conf"));

  /* Environment, then the default. */
  setenv("SQLITE_TDE_CONFIG", "/nonexistent/env.conf", 1);
  assert_int_equal(tdeConfigLocate(0, zOut, sizeof(zOut)), TDE_OK);
  assert_string_equal(zOut, "/nonexistent/env.conf");
  assert_int_equal(tdeConfigLocate("/explicit.conf", zOut, sizeof(zOut)), TDE_OK);
  assert_string_equal(zOut, "/explicit.conf");
  unsetenv("SQLITE_TDE_CONFIG");
  assert_int_equal(tdeConfigLocate(0, zOut, sizeof(zOut)), TDE_OK);
  assert_string_equal(zOut, "/etc/sqlite-tde/tde.conf");
  assert_int_equal(tdeConfigLocate("/explicit.conf", zOut, 4), TDE_RANGE);

  /* Loading a relative path records the absolute one. */
  {
    TdeConfig *p = 0;
    writeFile("rel.conf", "keystore = wallet\nwallet = w\n", 0600, 0);
    assert_int_equal(tdeConfigLoad("rel.conf", &p), TDE_OK);
    assert_int_equal(p->zPath[0], '/');
    assert_int_equal(p->zDir[0], '/');
    assert_int_equal(tdeConfigPath(p, "wallet", zOut, sizeof(zOut)), TDE_OK);
    snprintf(zWant, sizeof(zWant), "%s/w", p->zDir);
    assert_string_equal(zOut, zWant);
    tdeConfigFree(p);
  }
  assert_int_equal(chdir(zOld), 0);

  /* A missing file is a configuration error naming it. */
  {
    TdeConfig *p = 0;
    assert_int_equal(tdeConfigLoad("/nonexistent/tde.conf", &p), TDE_CONFIG);
    assert_non_null(strstr(tde_last_error(), "/nonexistent/tde.conf"));
    assert_null(p);
  }
}

static void test_password_file(void **state){
  TdeConfig *p = 0;
  char *zPw = 0;
  size_t nPw = 0;
  (void)state;
  writeFile("pw", "s3cret pass\n", 0600, 0);
  assert_int_equal(loadText("keystore = wallet\nwallet = w\npassword_file = pw\n", &p), TDE_OK);
  assert_int_equal(tdeConfigPassword(p, &zPw, &nPw), TDE_OK);
  assert_int_equal(nPw, 11);
  assert_string_equal(zPw, "s3cret pass");
  tdeSecureFree(zPw, nPw+1);

  /* Only one trailing newline goes; CRLF counts as one. */
  writeFile("pw", "a\n\n", 0400, 0);
  assert_int_equal(tdeConfigPassword(p, &zPw, &nPw), TDE_OK);
  assert_int_equal(nPw, 2);
  assert_memory_equal(zPw, "a\n", 3);
  tdeSecureFree(zPw, nPw+1);
  writeFile("pw", "b\r\n", 0600, 0);
  assert_int_equal(tdeConfigPassword(p, &zPw, &nPw), TDE_OK);
  assert_string_equal(zPw, "b");
  tdeSecureFree(zPw, nPw+1);

  /* Readable by group or others: refused, with the mode in the message. */
  writeFile("pw", "s3cret\n", 0644, 0);
  zPw = (char *)1;
  assert_int_equal(tdeConfigPassword(p, &zPw, &nPw), TDE_CONFIG);
  assert_null(zPw);
  assert_non_null(strstr(tde_last_error(), "0644"));
  assert_non_null(strstr(tde_last_error(), "/pw"));
  assert_null(strstr(tde_last_error(), "s3cret"));
  writeFile("pw", "s3cret\n", 0640, 0);
  assert_int_equal(tdeConfigPassword(p, &zPw, &nPw), TDE_CONFIG);

  /* Empty and missing files are errors too. */
  writeFile("pw", "\n", 0600, 0);
  assert_int_equal(tdeConfigPassword(p, &zPw, &nPw), TDE_CONFIG);
  assert_non_null(strstr(tde_last_error(), "empty"));
  {
    char zPath[PATH_MAX];
    snprintf(zPath, sizeof(zPath), "%s/pw", zScratch);
    unlink(zPath);
  }
  assert_int_equal(tdeConfigPassword(p, &zPw, &nPw), TDE_CONFIG);
  tdeConfigFree(p);
}

/* A pipe holding z[n], its write end closed: what password_fd and SQL
** tde_keystore_open_fd() read. */
static int pipeWith(const char *z, size_t n){
  int a[2];
  if( pipe(a)!=0 ) return -1;
  if( write(a[1], z, n)!=(ssize_t)n ){ close(a[0]); close(a[1]); return -1; }
  close(a[1]);
  return a[0];
}

/* The one password reader behind password_file, password_fd and
** tde_keystore_open_fd(): the same rules whatever the source. */
static void test_password_read(void **state){
  char zLong[TDE_PASSWORD_MAX + 1];
  char *zPw = 0;
  size_t nPw = 0;
  int fd;
  (void)state;

  fd = pipeWith("pw\r\n", 4);
  assert_true(fd>=0);
  assert_int_equal(tdePasswordRead(fd, &zPw, &nPw), TDE_PWREAD_OK);
  assert_int_equal(nPw, 2);
  assert_string_equal(zPw, "pw");
  tdeSecureFree(zPw, nPw+1);
  /* Read once: a second read finds nothing. */
  zPw = (char *)1;
  assert_int_equal(tdePasswordRead(fd, &zPw, &nPw), TDE_PWREAD_EMPTY);
  assert_null(zPw);
  close(fd);

  fd = pipeWith("a\0b\n", 4);
  assert_int_equal(tdePasswordRead(fd, &zPw, &nPw), TDE_PWREAD_NUL);
  assert_null(zPw);
  close(fd);

  memset(zLong, 'x', sizeof(zLong));
  fd = pipeWith(zLong, sizeof(zLong));
  assert_int_equal(tdePasswordRead(fd, &zPw, &nPw), TDE_PWREAD_LONG);
  assert_null(zPw);
  close(fd);
  fd = pipeWith(zLong, TDE_PASSWORD_MAX);
  assert_int_equal(tdePasswordRead(fd, &zPw, &nPw), TDE_PWREAD_OK);
  assert_int_equal(nPw, TDE_PASSWORD_MAX);
  tdeSecureFree(zPw, nPw+1);

  /* A read that fails keeps its errno for the caller's message. */
  close(fd);
  assert_int_equal(tdePasswordRead(fd, &zPw, &nPw), TDE_PWREAD_IO);
  assert_int_equal(errno, EBADF);
  assert_null(zPw);
}

/* password_fd through the configuration: the reader's verdicts become
** TDE_BADPASSWORD (nothing given) or TDE_CONFIG (too long). */
static void test_password_fd(void **state){
  TdeConfig *p = 0;
  char zText[128];
  char *zPw = 0;
  size_t nPw = 0;
  int fd = pipeWith("s3cret\n", 7);
  (void)state;
  assert_true(fd>=0);
  snprintf(zText, sizeof(zText), "keystore = wallet\nwallet = w\npassword_fd = %d\n", fd);
  assert_int_equal(loadText(zText, &p), TDE_OK);
  assert_int_equal(tdeConfigPassword(p, &zPw, &nPw), TDE_OK);
  assert_string_equal(zPw, "s3cret");
  tdeSecureFree(zPw, nPw+1);
  assert_int_equal(tdeConfigPassword(p, &zPw, &nPw), TDE_BADPASSWORD);
  assert_null(zPw);
  assert_non_null(strstr(tde_last_error(), "already read"));
  close(fd);
  tdeConfigFree(p);
}

static void test_password_env(void **state){
  TdeConfig *p = 0;
  char *zPw = 0;
  size_t nPw = 0;
  (void)state;
  assert_int_equal(loadText("keystore = wallet\nwallet = w\npassword_env = TDE_TEST_PW\n", &p),
                   TDE_OK);
  setenv("TDE_TEST_PW", "tde-test-pw-env-5Wq9", 1);
  assert_int_equal(tdeConfigPassword(p, &zPw, &nPw), TDE_OK);
  assert_int_equal(nPw, 20);
  assert_string_equal(zPw, "tde-test-pw-env-5Wq9");
  tdeSecureFree(zPw, nPw+1);
  /* Unset or empty: no password for this process, named in the message. */
  unsetenv("TDE_TEST_PW");
  assert_int_equal(tdeConfigPassword(p, &zPw, &nPw), TDE_BADPASSWORD);
  assert_non_null(strstr(tde_last_error(), "TDE_TEST_PW"));
  assert_null(zPw);
  setenv("TDE_TEST_PW", "", 1);
  assert_int_equal(tdeConfigPassword(p, &zPw, &nPw), TDE_BADPASSWORD);
  unsetenv("TDE_TEST_PW");
  tdeConfigFree(p);

  /* No source: TDE_NOTFOUND. */
  assert_int_equal(loadText("keystore = wallet\nwallet = w\n", &p), TDE_OK);
  assert_int_equal(tdeConfigPassword(p, &zPw, &nPw), TDE_NOTFOUND);
  tdeConfigFree(p);

  /* Two sources conflict. */
  expectError("keystore = wallet\npassword_file = pw\npassword_env = X\n", TDE_CONFIG,
              "tde.conf:3: 'password_env' conflicts with 'password_file' on line 2");
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_good_file),
    cmocka_unit_test(test_unknown_key),
    cmocka_unit_test(test_missing_value),
    cmocka_unit_test(test_duplicate_key),
    cmocka_unit_test(test_missing_keystore),
    cmocka_unit_test(test_unknown_provider),
    cmocka_unit_test(test_comments_blank_crlf),
    cmocka_unit_test(test_trailing_comments),
    cmocka_unit_test(test_parse_from_memory),
    cmocka_unit_test(test_locate),
    cmocka_unit_test(test_password_file),
    cmocka_unit_test(test_password_read),
    cmocka_unit_test(test_password_fd),
    cmocka_unit_test(test_password_env),
  };
  return cmocka_run_group_tests(tests, setupScratch, teardownScratch);
}
