/*
** Unit tests for the software wallet provider (src/keystore/wallet.c) and
** the keystore registry (src/keystore/registry.c): create/open for both
** wallet kinds, wrap/unwrap, wrong and missing passwords, damaged files
** (every truncation, a bit flip in every byte), rotation including two
** handles rotating the same file, retirement (also seen by and merged
** with a second handle), and registry sharing.  Argon2id runs
** with t=1, m=8192 KiB so the suite stays fast.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* tde_int.h first: keystore.h uses TDE_KEYID_MAX from sqlite-tde.h. */
#include "tde_int.h"
#include "config.h"
#include "keystore/keystore.h"
#include "cipher/cipher.h"

static char zScratch[1024];      /* short enough that joined paths fit PATH_MAX */
static const tde_keystore_methods *pW = &tdeWalletMethods;

static int rmOne(const char *zPath, const struct stat *pSt, int flag, struct FTW *pFtw){
  (void)pSt; (void)flag; (void)pFtw;
  return remove(zPath);
}

/* ERROR-level log lines (secure-memory misuse, for one) fail the suite. */
static int nErrorLog;
static char zFirstErrorLog[512];
static void countErrorLog(void *pArg, int level, const char *zMsg){
  (void)pArg;
  if( level==TDE_LOG_ERROR && nErrorLog++==0 ){
    snprintf(zFirstErrorLog, sizeof(zFirstErrorLog), "%s", zMsg);
  }
}

static int setupScratch(void **state){
  const char *zTmp = getenv("TDE_TEST_TMP");
  (void)state;
  tde_set_log(countErrorLog, 0);
  if( zTmp==0 || zTmp[0]==0 ) zTmp = "/tmp";
  mkdir(zTmp, 0700);
  snprintf(zScratch, sizeof(zScratch), "%s/tdewal-XXXXXX", zTmp);
  if( mkdtemp(zScratch)==0 ) return -1;
  return 0;
}

static int teardownScratch(void **state){
  (void)state;
  /* TDE_KEEP_SCRATCH: kept for scripts/scan-secrets.sh (make test). */
  if( getenv("TDE_KEEP_SCRATCH")==0 ) nftw(zScratch, rmOne, 16, FTW_DEPTH | FTW_PHYS);
  return 0;
}

static void scratchPath(const char *zName, char *zOut){
  snprintf(zOut, PATH_MAX, "%s/%s", zScratch, zName);
}

static void writeText(const char *zName, const char *zText, mode_t mode){
  char zPath[PATH_MAX];
  FILE *f;
  scratchPath(zName, zPath);
  unlink(zPath);
  f = fopen(zPath, "w");
  assert_non_null(f);
  assert_true(fputs(zText, f) >= 0);
  assert_int_equal(fclose(f), 0);
  assert_int_equal(chmod(zPath, mode), 0);
}

/* Write <zName>.conf for wallet file zWallet (plus extra lines) and load it. */
static TdeConfig *makeConfig(const char *zName, const char *zWallet, const char *zExtra){
  char zText[1024], zFile[256], zPath[PATH_MAX];
  TdeConfig *p = 0;
  snprintf(zText, sizeof(zText),
           "keystore = wallet\nwallet = %s\nwallet_kdf_t = 1\nwallet_kdf_m_kib = 8192\n%s",
           zWallet, zExtra ? zExtra : "");
  snprintf(zFile, sizeof(zFile), "%s.conf", zName);
  writeText(zFile, zText, 0600);
  scratchPath(zFile, zPath);
  if( tdeConfigLoad(zPath, &p)!=TDE_OK ) fail_msg("config: %s", tde_last_error());
  return p;
}

static uint8_t *readAll(const char *zPath, size_t *pn){
  FILE *f = fopen(zPath, "rb");
  uint8_t *a;
  long n;
  assert_non_null(f);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  n = ftell(f);
  assert_true(n >= 0);
  rewind(f);
  a = malloc((size_t)n + 1);
  assert_non_null(a);
  assert_int_equal(fread(a, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *pn = (size_t)n;
  return a;
}

static void writeAll(const char *zPath, const uint8_t *a, size_t n){
  FILE *f = fopen(zPath, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(a, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

static void expectRc(int rc, int want){
  if( rc!=want ) fail_msg("rc=%d (want %d): %s", rc, want, tde_last_error());
}

/* Wrap a fixed DEK under zKeyId, unwrap it again, compare. */
static void roundTrip(TdeKeystore *ks, const char *zKeyId, uint8_t *aBlob, size_t *pnBlob){
  uint8_t dek[32], out[32], blob[TDE_WRAP_MAX];
  size_t nBlob = 0;
  uint8_t mech = 0;
  int i;
  for(i=0; i<32; i++) dek[i] = (uint8_t)(i*7+1);
  expectRc(ks->pMethods->xWrap(ks, zKeyId, dek, 32, (const uint8_t *)"db-header", 9,
                               blob, sizeof(blob), &nBlob, &mech), TDE_OK);
  assert_int_equal(nBlob, 12+32+16);
  assert_int_equal(mech, TDE_MECH_AES256_GCM);
  expectRc(ks->pMethods->xUnwrap(ks, zKeyId, mech, blob, nBlob,
                                 (const uint8_t *)"db-header", 9, out, 32), TDE_OK);
  assert_memory_equal(dek, out, 32);
  if( aBlob ){
    memcpy(aBlob, blob, nBlob);
    *pnBlob = nBlob;
  }
}

static int countKey(void *pArg, const TdeKeyInfo *pInfo){
  int *pn = (int *)pArg;
  assert_int_equal(pInfo->bRetired, 0);
  assert_true(pInfo->created > 1600000000);
  assert_int_equal(strncmp(pInfo->zId, "wallet-", 7), 0);
  (*pn)++;
  return 0;
}

static void test_password_wallet(void **state){
  TdeConfig *cfg = makeConfig("pw", "pw.wallet", 0);
  TdeKeystore *ks = 0;
  char zId[TDE_KEYID_MAX+1], zCur[TDE_KEYID_MAX+1], zLoc[PATH_MAX], zPath[PATH_MAX];
  int bAuto = -1, n = 0;
  struct stat st;
  (void)state;

  expectRc(pW->xCreate(cfg, "tde-test-pw-horse-9Lm3", zId, sizeof(zId)), TDE_OK);
  assert_int_equal(strlen(zId), 39);
  assert_int_equal(strncmp(zId, "wallet-", 7), 0);
  scratchPath("pw.wallet", zPath);
  assert_int_equal(stat(zPath, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);

  expectRc(pW->xOpen(cfg, "tde-test-pw-horse-9Lm3", &ks), TDE_OK);
  expectRc(pW->xDescribe(ks, zLoc, sizeof(zLoc), &bAuto), TDE_OK);
  assert_string_equal(zLoc, zPath);
  assert_int_equal(bAuto, 0);
  expectRc(pW->xDescribe(ks, zLoc, 4, &bAuto), TDE_RANGE);
  expectRc(pW->xCurrentKey(ks, zCur, sizeof(zCur)), TDE_OK);
  assert_string_equal(zCur, zId);
  assert_int_equal(pW->xHasKey(ks, zId), 1);
  assert_int_equal(pW->xHasKey(ks, "wallet-00000000000000000000000000000000"), 0);
  expectRc(pW->xList(ks, countKey, &n), TDE_OK);
  assert_int_equal(n, 1);
  roundTrip(ks, zId, 0, 0);

  /* Unknown key id, small buffers, wrong mechanism, wrong length. */
  {
    uint8_t dek[32] = {1}, blob[TDE_WRAP_MAX], out[32];
    size_t nBlob = 0;
    uint8_t mech = 0;
    expectRc(pW->xWrap(ks, "wallet-nope", dek, 32, 0, 0, blob, sizeof(blob), &nBlob, &mech),
             TDE_NOKEY);
    expectRc(pW->xWrap(ks, zId, dek, 32, 0, 0, blob, 59, &nBlob, &mech), TDE_RANGE);
    expectRc(pW->xWrap(ks, zId, dek, 32, 0, 0, blob, sizeof(blob), &nBlob, &mech), TDE_OK);
    expectRc(pW->xUnwrap(ks, zId, TDE_MECH_AES_KWP, blob, nBlob, 0, 0, out, 32),
             TDE_UNSUPPORTED);
    expectRc(pW->xUnwrap(ks, zId, mech, blob, nBlob-1, 0, 0, out, 32), TDE_FORMAT);
    expectRc(pW->xUnwrap(ks, zId, mech, blob, nBlob, 0, 0, out, 31), TDE_FORMAT);
    expectRc(pW->xUnwrap(ks, "wallet-nope", mech, blob, nBlob, 0, 0, out, 32), TDE_NOKEY);
    expectRc(pW->xUnwrap(ks, zId, mech, blob, nBlob, 0, 0, out, 32), TDE_OK);
    assert_memory_equal(out, dek, 32);
  }
  pW->xClose(ks);
  tdeConfigFree(cfg);
}

static void test_autologin_wallet(void **state){
  TdeConfig *cfg = makeConfig("al", "al.wallet", 0);
  TdeKeystore *ks = 0;
  char zId[TDE_KEYID_MAX+1], zCur[TDE_KEYID_MAX+1], zPath[PATH_MAX];
  int bAuto = 0;
  struct stat st;
  (void)state;

  expectRc(pW->xCreate(cfg, 0, zId, sizeof(zId)), TDE_OK);
  scratchPath("al.wallet", zPath);
  assert_int_equal(stat(zPath, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  expectRc(pW->xOpen(cfg, 0, &ks), TDE_OK);
  expectRc(pW->xDescribe(ks, 0, 0, &bAuto), TDE_OK);
  assert_int_equal(bAuto, 1);
  expectRc(pW->xCurrentKey(ks, zCur, sizeof(zCur)), TDE_OK);
  assert_string_equal(zCur, zId);
  roundTrip(ks, zId, 0, 0);
  pW->xClose(ks);
  /* A password given to an auto-login wallet is not needed, and ignored. */
  expectRc(pW->xOpen(cfg, "tde-test-pw-whatever-3Jc5", &ks), TDE_OK);
  roundTrip(ks, zId, 0, 0);
  pW->xClose(ks);
  /* Accessible by group or others: refused (docs/WALLET.md) with an error
  ** naming the file, the mode and the fix, and nothing opened; 0600 opens. */
  for(int i=0; i<4; i++){
    static const mode_t aMode[4] = { 0644, 0640, 0604, 0600 };
    assert_int_equal(chmod(zPath, aMode[i]), 0);
    ks = (TdeKeystore *)1;
    if( aMode[i]==0600 ){
      expectRc(pW->xOpen(cfg, 0, &ks), TDE_OK);
      pW->xClose(ks);
    }else{
      char zMode[8];
      const char *zErr;
      snprintf(zMode, sizeof(zMode), "%04o", (unsigned)aMode[i]);
      expectRc(pW->xOpen(cfg, 0, &ks), TDE_NOKEYSTORE);
      assert_null(ks);
      zErr = tde_last_error();
      assert_non_null(strstr(zErr, "accessible by group or others"));
      assert_non_null(strstr(zErr, zMode));
      assert_non_null(strstr(zErr, zPath));
      assert_non_null(strstr(zErr, "chmod 600"));
    }
  }
  tde_set_log(countErrorLog, 0);
  tdeConfigFree(cfg);
}

static void test_wrong_password(void **state){
  TdeConfig *cfg = makeConfig("wp", "wp.wallet", 0);
  TdeKeystore *ks = (TdeKeystore *)1;
  char zId[TDE_KEYID_MAX+1], zPath[PATH_MAX], zWant[PATH_MAX+256];
  uint8_t *aBefore, *aAfter;
  size_t nBefore, nAfter;
  struct stat st1, st2;
  (void)state;

  expectRc(pW->xCreate(cfg, "tde-test-pw-right-2Vb8", zId, sizeof(zId)), TDE_OK);
  scratchPath("wp.wallet", zPath);
  aBefore = readAll(zPath, &nBefore);
  assert_int_equal(stat(zPath, &st1), 0);

  expectRc(pW->xOpen(cfg, "tde-test-pw-wrong-6Np1", &ks), TDE_BADPASSWORD);
  assert_null(ks);
  snprintf(zWant, sizeof(zWant), "wallet %s: password incorrect", zPath);
  assert_string_equal(tde_last_error(), zWant);

  /* No password at all: a message saying what to do. */
  expectRc(pW->xOpen(cfg, 0, &ks), TDE_BADPASSWORD);
  snprintf(zWant, sizeof(zWant), "wallet %s needs a password (set password_file or "
           "password_env in the config, or pass one)", zPath);
  assert_string_equal(tde_last_error(), zWant);

  aAfter = readAll(zPath, &nAfter);
  assert_int_equal(stat(zPath, &st2), 0);
  assert_int_equal(nAfter, nBefore);
  assert_memory_equal(aAfter, aBefore, nBefore);
  assert_int_equal(st1.st_ino, st2.st_ino);
  free(aBefore);
  free(aAfter);

  /* Empty password never makes a wallet. */
  {
    TdeConfig *cfg2 = makeConfig("wp2", "wp2.wallet", 0);
    expectRc(pW->xCreate(cfg2, "", zId, sizeof(zId)), TDE_BADPASSWORD);
    tdeConfigFree(cfg2);
  }
  tdeConfigFree(cfg);
}

static void test_missing_wallet(void **state){
  TdeConfig *cfg = makeConfig("mw", "nowhere/none.wallet", 0);
  TdeKeystore *ks = (TdeKeystore *)1;
  char zPath[PATH_MAX], zWant[PATH_MAX+256], zId[TDE_KEYID_MAX+1];
  (void)state;
  scratchPath("nowhere/none.wallet", zPath);
  expectRc(pW->xOpen(cfg, "tde-test-pw-7Qx2", &ks), TDE_NOKEYSTORE);
  assert_null(ks);
  snprintf(zWant, sizeof(zWant), "wallet %s: not found", zPath);
  assert_string_equal(tde_last_error(), zWant);
  /* Creating into a missing directory fails and leaves nothing behind. */
  assert_int_not_equal(pW->xCreate(cfg, 0, zId, sizeof(zId)), TDE_OK);
  tdeConfigFree(cfg);

  /* A config without the wallet key. */
  {
    TdeConfig *p = 0;
    expectRc(tdeConfigParse("keystore = wallet\n", "x.conf", zScratch, &p), TDE_OK);
    expectRc(pW->xOpen(p, 0, &ks), TDE_CONFIG);
    assert_non_null(strstr(tde_last_error(), "'wallet'"));
    tdeConfigFree(p);
  }
  /* Bad KDF overrides are configuration errors naming the line. */
  {
    TdeConfig *p = 0;
    expectRc(tdeConfigParse("keystore = wallet\nwallet = w\nwallet_kdf_m_kib = 1024\n",
                            "x.conf", zScratch, &p), TDE_OK);
    expectRc(pW->xCreate(p, "tde-test-pw-7Qx2", zId, sizeof(zId)), TDE_CONFIG);
    assert_non_null(strstr(tde_last_error(), "x.conf:3: wallet_kdf_m_kib"));
    tdeConfigFree(p);
    expectRc(tdeConfigParse("keystore = wallet\nwallet = w\nwallet_kdf_t = 0x1\n",
                            "x.conf", zScratch, &p), TDE_OK);
    expectRc(pW->xCreate(p, "tde-test-pw-7Qx2", zId, sizeof(zId)), TDE_CONFIG);
    assert_non_null(strstr(tde_last_error(), "x.conf:3: wallet_kdf_t"));
    tdeConfigFree(p);
  }
}

static void test_create_refuses_overwrite(void **state){
  TdeConfig *cfg = makeConfig("ow", "ow.wallet", 0);
  char zId[TDE_KEYID_MAX+1], zId2[TDE_KEYID_MAX+1], zPath[PATH_MAX];
  uint8_t *aBefore, *aAfter;
  size_t nBefore, nAfter;
  (void)state;
  expectRc(pW->xCreate(cfg, "tde-test-pw-7Qx2", zId, sizeof(zId)), TDE_OK);
  scratchPath("ow.wallet", zPath);
  aBefore = readAll(zPath, &nBefore);
  expectRc(pW->xCreate(cfg, "tde-test-pw-7Qx2", zId2, sizeof(zId2)), TDE_EXISTS);
  expectRc(pW->xCreate(cfg, 0, zId2, sizeof(zId2)), TDE_EXISTS);
  aAfter = readAll(zPath, &nAfter);
  assert_int_equal(nAfter, nBefore);
  assert_memory_equal(aAfter, aBefore, nBefore);
  free(aBefore);
  free(aAfter);
  /* Any existing file counts, even one that is not a wallet. */
  tdeConfigFree(cfg);
  writeText("junk", "x", 0600);
  cfg = makeConfig("ow2", "junk", 0);
  expectRc(pW->xCreate(cfg, "tde-test-pw-7Qx2", zId2, sizeof(zId2)), TDE_EXISTS);
  expectRc(pW->xCreate(cfg, "tde-test-pw-7Qx2", zId2, 10), TDE_RANGE);
  tdeConfigFree(cfg);
}

/* Open a damaged copy: must fail with one of the two allowed codes. */
static int expectDamaged(TdeConfig *cfg, const char *zPw, const char *zWhat, size_t i){
  TdeKeystore *ks = 0;
  int rc = pW->xOpen(cfg, zPw, &ks);
  if( rc==TDE_OK ){
    pW->xClose(ks);
    fail_msg("%s at %zu: damaged wallet opened", zWhat, i);
  }
  if( rc!=TDE_FORMAT && rc!=TDE_BADPASSWORD ){
    fail_msg("%s at %zu: rc=%d %s", zWhat, i, rc, tde_last_error());
  }
  assert_null(ks);
  return rc;
}

static void damageAll(const char *zName, const char *zPw){
  TdeConfig *cfg = makeConfig(zName, "d.wallet", 0);
  char zId[TDE_KEYID_MAX+1], zPath[PATH_MAX];
  uint8_t *aGood, *aBad;
  size_t nGood, i;
  int nFormat = 0;

  /* Each test gets its own directory so the wallet name can be fixed. */
  expectRc(pW->xCreate(cfg, zPw, zId, sizeof(zId)), TDE_OK);
  scratchPath("d.wallet", zPath);
  aGood = readAll(zPath, &nGood);
  aBad = malloc(nGood);
  assert_non_null(aBad);

  for(i=0; i<nGood; i++){                  /* every truncation */
    writeAll(zPath, aGood, i);
    expectDamaged(cfg, zPw, "truncated", i);
  }
  for(i=0; i<nGood; i++){                  /* one flipped bit in every byte */
    memcpy(aBad, aGood, nGood);
    aBad[i] ^= 0x01;
    writeAll(zPath, aBad, nGood);
    if( expectDamaged(cfg, zPw, "bit flip", i)==TDE_FORMAT ) nFormat++;
  }
  /* Damage past the key check is reported as damage, not as a password. */
  assert_true(nFormat > (int)nGood/2);
  /* One byte too many. */
  memcpy(aBad, aGood, nGood);
  writeAll(zPath, aGood, nGood);
  {
    FILE *f = fopen(zPath, "ab");
    assert_non_null(f);
    fputc(0, f);
    fclose(f);
  }
  expectDamaged(cfg, zPw, "appended", nGood);
  /* The intact file still opens. */
  writeAll(zPath, aGood, nGood);
  {
    TdeKeystore *ks = 0;
    expectRc(pW->xOpen(cfg, zPw, &ks), TDE_OK);
    roundTrip(ks, zId, 0, 0);
    pW->xClose(ks);
  }
  unlink(zPath);
  free(aGood);
  free(aBad);
  tdeConfigFree(cfg);
}

static void test_damaged_password_wallet(void **state){
  (void)state;
  damageAll("dp", "tde-test-pw-7Qx2");
}

static void test_damaged_autologin_wallet(void **state){
  (void)state;
  damageAll("da", 0);
}

static void test_not_a_wallet(void **state){
  TdeConfig *cfg = makeConfig("naw", "naw.wallet", 0);
  TdeKeystore *ks = 0;
  (void)state;
  writeText("naw.wallet", "SQLite format 3\n this is not a wallet at all, not at all.....\n"
            "............................................................\n", 0600);
  expectRc(pW->xOpen(cfg, "tde-test-pw-7Qx2", &ks), TDE_FORMAT);
  assert_non_null(strstr(tde_last_error(), "naw.wallet"));
  writeText("naw.wallet", "", 0600);
  expectRc(pW->xOpen(cfg, "tde-test-pw-7Qx2", &ks), TDE_FORMAT);
  tdeConfigFree(cfg);
}

static void test_new_key(void **state){
  TdeConfig *cfg = makeConfig("nk", "nk.wallet", 0);
  TdeKeystore *ks = 0;
  char zOld[TDE_KEYID_MAX+1], zNew[TDE_KEYID_MAX+1], zCur[TDE_KEYID_MAX+1];
  char zPath[PATH_MAX];
  uint8_t blob[TDE_WRAP_MAX], out[32];
  size_t nBlob = 0;
  int n = 0;
  struct stat st;
  (void)state;

  expectRc(pW->xCreate(cfg, "tde-test-pw-7Qx2", zOld, sizeof(zOld)), TDE_OK);
  expectRc(pW->xOpen(cfg, "tde-test-pw-7Qx2", &ks), TDE_OK);
  roundTrip(ks, zOld, blob, &nBlob);
  expectRc(pW->xNewKey(ks, zNew, 8), TDE_RANGE);
  expectRc(pW->xNewKey(ks, zNew, sizeof(zNew)), TDE_OK);
  assert_string_not_equal(zNew, zOld);
  expectRc(pW->xCurrentKey(ks, zCur, sizeof(zCur)), TDE_OK);
  assert_string_equal(zCur, zNew);
  /* The old key still unwraps what it wrapped; the new one round-trips. */
  expectRc(pW->xUnwrap(ks, zOld, TDE_MECH_AES256_GCM, blob, nBlob,
                       (const uint8_t *)"db-header", 9, out, 32), TDE_OK);
  roundTrip(ks, zNew, 0, 0);
  pW->xClose(ks);

  /* The rewrite is on disk, still 0600, no temporary files left. */
  scratchPath("nk.wallet", zPath);
  assert_int_equal(stat(zPath, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  expectRc(pW->xOpen(cfg, "tde-test-pw-7Qx2", &ks), TDE_OK);
  expectRc(pW->xCurrentKey(ks, zCur, sizeof(zCur)), TDE_OK);
  assert_string_equal(zCur, zNew);
  expectRc(pW->xList(ks, countKey, &n), TDE_OK);
  assert_int_equal(n, 2);
  expectRc(pW->xUnwrap(ks, zOld, TDE_MECH_AES256_GCM, blob, nBlob,
                       (const uint8_t *)"db-header", 9, out, 32), TDE_OK);
  pW->xClose(ks);
  {
    char zCmd[PATH_MAX+64];
    snprintf(zCmd, sizeof(zCmd), "ls %s | grep -q tmp-", zScratch);
    assert_int_not_equal(system(zCmd), 0);
  }
  tdeConfigFree(cfg);
}

/* Two handles on one wallet (as two processes would have) both rotate:
** neither new key may be lost, and each handle finds the other's key. */
static void test_concurrent_rotation(void **state){
  TdeConfig *cfg = makeConfig("cr", "cr.wallet", 0);
  TdeKeystore *a = 0, *b = 0, *c = 0;
  char zFirst[TDE_KEYID_MAX+1], zA[TDE_KEYID_MAX+1], zB[TDE_KEYID_MAX+1];
  uint8_t blob[TDE_WRAP_MAX], out[32];
  size_t nBlob = 0;
  int n = 0;
  (void)state;

  expectRc(pW->xCreate(cfg, 0, zFirst, sizeof(zFirst)), TDE_OK);
  expectRc(pW->xOpen(cfg, 0, &a), TDE_OK);
  expectRc(pW->xOpen(cfg, 0, &b), TDE_OK);
  expectRc(pW->xNewKey(a, zA, sizeof(zA)), TDE_OK);
  roundTrip(a, zA, blob, &nBlob);
  /* b has not seen zA yet, but finds it on a miss. */
  assert_int_equal(pW->xHasKey(b, zA), 1);
  expectRc(pW->xUnwrap(b, zA, TDE_MECH_AES256_GCM, blob, nBlob,
                       (const uint8_t *)"db-header", 9, out, 32), TDE_OK);
  expectRc(pW->xNewKey(b, zB, sizeof(zB)), TDE_OK);
  pW->xClose(a);
  pW->xClose(b);

  expectRc(pW->xOpen(cfg, 0, &c), TDE_OK);
  expectRc(pW->xList(c, countKey, &n), TDE_OK);
  assert_int_equal(n, 3);
  assert_int_equal(pW->xHasKey(c, zFirst), 1);
  assert_int_equal(pW->xHasKey(c, zA), 1);
  assert_int_equal(pW->xHasKey(c, zB), 1);
  pW->xClose(c);
  tdeConfigFree(cfg);
}

/* Real processes rotating one wallet at once: the directory lock and the
** re-read before each rewrite must keep every key (1 + N*K in the end). */
static void test_multiprocess_rotation(void **state){
  enum { N_PROC = 4, N_ROT = 5 };
  TdeConfig *cfg = makeConfig("mp", "mp.wallet", 0);
  TdeKeystore *ks = 0;
  char zId[TDE_KEYID_MAX+1];
  pid_t aPid[N_PROC];
  int i, n = 0;
  (void)state;
  expectRc(pW->xCreate(cfg, "tde-test-pw-7Qx2", zId, sizeof(zId)), TDE_OK);
  for(i=0; i<N_PROC; i++){
    aPid[i] = fork();
    assert_true(aPid[i] >= 0);
    if( aPid[i]==0 ){
      TdeKeystore *k = 0;
      char zNew[TDE_KEYID_MAX+1];
      int j;
      if( pW->xOpen(cfg, "tde-test-pw-7Qx2", &k)!=TDE_OK ) _exit(2);
      for(j=0; j<N_ROT; j++){
        if( pW->xNewKey(k, zNew, sizeof(zNew))!=TDE_OK ) _exit(3);
      }
      pW->xClose(k);
      _exit(0);
    }
  }
  for(i=0; i<N_PROC; i++){
    int status = -1;
    assert_int_equal(waitpid(aPid[i], &status, 0), aPid[i]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
  }
  expectRc(pW->xOpen(cfg, "tde-test-pw-7Qx2", &ks), TDE_OK);
  expectRc(pW->xList(ks, countKey, &n), TDE_OK);
  assert_int_equal(n, 1 + N_PROC*N_ROT);
  assert_int_equal(pW->xHasKey(ks, zId), 1);
  pW->xClose(ks);
  tdeConfigFree(cfg);
}

/* Status of key zKeyId in a listing: 0 active, 1 retired, -1 absent. */
typedef struct RetiredCtx { const char *zKeyId; int bRetired; int n; } RetiredCtx;
static int findRetired(void *pArg, const TdeKeyInfo *pInfo){
  RetiredCtx *p = pArg;
  p->n++;
  if( strcmp(pInfo->zId, p->zKeyId)==0 ) p->bRetired = pInfo->bRetired;
  return 0;
}
static int keyStatus(TdeKeystore *ks, const char *zKeyId, int *pnKey){
  RetiredCtx c;
  c.zKeyId = zKeyId;
  c.bRetired = -1;
  c.n = 0;
  expectRc(pW->xList(ks, findRetired, &c), TDE_OK);
  if( pnKey ) *pnKey = c.n;
  return c.bRetired;
}

/* Retirement: the current key is refused, an old key is retired on disk
** (still unwraps, never wraps, never current again), retiring twice is a
** no-op, unknown ids are TDE_NOKEY, and a second handle (another process)
** sees the retirement at its next wrap, listing or current-key query. */
static void test_retire(void **state){
  TdeConfig *cfg = makeConfig("rt", "rt.wallet", 0);
  TdeKeystore *a = 0, *b = 0, *c = 0;
  char zOld[TDE_KEYID_MAX+1], zNew[TDE_KEYID_MAX+1], zCur[TDE_KEYID_MAX+1];
  char zPath[PATH_MAX];
  uint8_t dek[32] = {7}, blob[TDE_WRAP_MAX], blob2[TDE_WRAP_MAX], out[32];
  size_t nBlob = 0, nBlob2 = 0;
  uint8_t mech = 0;
  int nKey = 0;
  struct stat st;
  (void)state;

  assert_non_null(pW->xRetire);
  expectRc(pW->xCreate(cfg, 0, zOld, sizeof(zOld)), TDE_OK);
  expectRc(pW->xOpen(cfg, 0, &a), TDE_OK);
  expectRc(pW->xOpen(cfg, 0, &b), TDE_OK);
  roundTrip(b, zOld, blob, &nBlob);

  /* The only key is current: refused, clearly, and nothing changes. */
  expectRc(pW->xRetire(a, zOld), TDE_MISUSE);
  assert_non_null(strstr(tde_last_error(), "current key"));
  assert_int_equal(keyStatus(a, zOld, 0), 0);
  expectRc(pW->xRetire(a, "wallet-00000000000000000000000000000000"), TDE_NOKEY);
  expectRc(pW->xRetire(a, ""), TDE_MISUSE);
  expectRc(pW->xRetire(a, 0), TDE_MISUSE);

  expectRc(pW->xNewKey(a, zNew, sizeof(zNew)), TDE_OK);
  expectRc(pW->xRetire(a, zNew), TDE_MISUSE);
  expectRc(pW->xRetire(a, zOld), TDE_OK);
  assert_int_equal(keyStatus(a, zOld, &nKey), 1);
  assert_int_equal(nKey, 2);
  assert_int_equal(keyStatus(a, zNew, 0), 0);
  expectRc(pW->xCurrentKey(a, zCur, sizeof(zCur)), TDE_OK);
  assert_string_equal(zCur, zNew);
  expectRc(pW->xWrap(a, zOld, dek, 32, 0, 0, blob2, sizeof(blob2), &nBlob2, &mech), TDE_NOKEY);
  assert_non_null(strstr(tde_last_error(), "retired"));
  expectRc(pW->xUnwrap(a, zOld, TDE_MECH_AES256_GCM, blob, nBlob,
                       (const uint8_t *)"db-header", 9, out, 32), TDE_OK);
  assert_int_equal(pW->xHasKey(a, zOld), 1);
  expectRc(pW->xRetire(a, zOld), TDE_OK);                 /* again: no-op */
  roundTrip(a, zNew, 0, 0);

  /* b opened before any of this: it must not wrap with the retired key,
  ** and it reports the new current key. */
  expectRc(pW->xWrap(b, zOld, dek, 32, 0, 0, blob2, sizeof(blob2), &nBlob2, &mech), TDE_NOKEY);
  expectRc(pW->xCurrentKey(b, zCur, sizeof(zCur)), TDE_OK);
  assert_string_equal(zCur, zNew);
  assert_int_equal(keyStatus(b, zOld, 0), 1);
  expectRc(pW->xUnwrap(b, zOld, TDE_MECH_AES256_GCM, blob, nBlob,
                       (const uint8_t *)"db-header", 9, out, 32), TDE_OK);
  pW->xClose(a);
  pW->xClose(b);

  /* On disk, 0600, and a fresh open agrees. */
  scratchPath("rt.wallet", zPath);
  assert_int_equal(stat(zPath, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  expectRc(pW->xOpen(cfg, 0, &c), TDE_OK);
  assert_int_equal(keyStatus(c, zOld, 0), 1);
  expectRc(pW->xCurrentKey(c, zCur, sizeof(zCur)), TDE_OK);
  assert_string_equal(zCur, zNew);
  expectRc(pW->xUnwrap(c, zOld, TDE_MECH_AES256_GCM, blob, nBlob,
                       (const uint8_t *)"db-header", 9, out, 32), TDE_OK);
  pW->xClose(c);
  tdeConfigFree(cfg);
}

/* Two handles: one adds a key while the other retires an old one; both
** changes survive whichever rewrite comes last. */
static void test_retire_merge(void **state){
  TdeConfig *cfg = makeConfig("rm", "rm.wallet", 0);
  TdeKeystore *a = 0, *b = 0, *c = 0;
  char zK1[TDE_KEYID_MAX+1], zK2[TDE_KEYID_MAX+1], zK3[TDE_KEYID_MAX+1];
  char zCur[TDE_KEYID_MAX+1];
  int nKey = 0;
  (void)state;

  expectRc(pW->xCreate(cfg, "tde-test-pw-7Qx2", zK1, sizeof(zK1)), TDE_OK);
  expectRc(pW->xOpen(cfg, "tde-test-pw-7Qx2", &a), TDE_OK);
  expectRc(pW->xOpen(cfg, "tde-test-pw-7Qx2", &b), TDE_OK);
  expectRc(pW->xNewKey(a, zK2, sizeof(zK2)), TDE_OK);
  /* b has not seen zK2, yet retiring zK1 is allowed: the reload under the
  ** lock shows zK1 is no longer current. */
  expectRc(pW->xRetire(b, zK1), TDE_OK);
  expectRc(pW->xNewKey(a, zK3, sizeof(zK3)), TDE_OK);   /* a merges b's retirement */
  pW->xClose(a);
  pW->xClose(b);
  expectRc(pW->xOpen(cfg, "tde-test-pw-7Qx2", &c), TDE_OK);
  assert_int_equal(keyStatus(c, zK1, &nKey), 1);
  assert_int_equal(nKey, 3);
  assert_int_equal(keyStatus(c, zK2, 0), 0);
  assert_int_equal(keyStatus(c, zK3, 0), 0);
  expectRc(pW->xCurrentKey(c, zCur, sizeof(zCur)), TDE_OK);
  assert_string_equal(zCur, zK3);
  pW->xClose(c);
  tdeConfigFree(cfg);
}

static void test_wrong_aad(void **state){
  TdeConfig *cfg = makeConfig("aad", "aad.wallet", 0);
  TdeKeystore *ks = 0;
  char zId[TDE_KEYID_MAX+1];
  uint8_t dek[32], blob[TDE_WRAP_MAX], out[32];
  size_t nBlob = 0;
  uint8_t mech = 0;
  (void)state;
  memset(dek, 0xA5, sizeof(dek));
  expectRc(pW->xCreate(cfg, 0, zId, sizeof(zId)), TDE_OK);
  expectRc(pW->xOpen(cfg, 0, &ks), TDE_OK);
  expectRc(pW->xWrap(ks, zId, dek, 32, (const uint8_t *)"file A", 6,
                     blob, sizeof(blob), &nBlob, &mech), TDE_OK);
  memset(out, 0x55, sizeof(out));
  expectRc(pW->xUnwrap(ks, zId, mech, blob, nBlob, (const uint8_t *)"file B", 6, out, 32),
           TDE_AUTH);
  {
    uint8_t zero[32] = {0};
    assert_memory_equal(out, zero, 32);      /* failed output is wiped */
  }
  expectRc(pW->xUnwrap(ks, zId, mech, blob, nBlob, 0, 0, out, 32), TDE_AUTH);
  blob[20] ^= 1;
  expectRc(pW->xUnwrap(ks, zId, mech, blob, nBlob, (const uint8_t *)"file A", 6, out, 32),
           TDE_AUTH);
  blob[20] ^= 1;
  expectRc(pW->xUnwrap(ks, zId, mech, blob, nBlob, (const uint8_t *)"file A", 6, out, 32),
           TDE_OK);
  assert_memory_equal(out, dek, 32);
  pW->xClose(ks);
  tdeConfigFree(cfg);
}

/* Several threads wrapping and unwrapping on one handle while one rotates. */
typedef struct ThreadArg { TdeKeystore *ks; char zId[TDE_KEYID_MAX+1]; int nFail; } ThreadArg;

static void *threadMain(void *pArg){
  ThreadArg *t = (ThreadArg *)pArg;
  int i;
  for(i=0; i<200; i++){
    uint8_t dek[32], blob[TDE_WRAP_MAX], out[32];
    size_t nBlob = 0;
    uint8_t mech = 0;
    memset(dek, i, sizeof(dek));
    if( t->ks->pMethods->xWrap(t->ks, t->zId, dek, 32, 0, 0, blob, sizeof(blob),
                               &nBlob, &mech)!=TDE_OK
     || t->ks->pMethods->xUnwrap(t->ks, t->zId, mech, blob, nBlob, 0, 0, out, 32)!=TDE_OK
     || memcmp(out, dek, 32)!=0 ){
      t->nFail++;
    }
  }
  return 0;
}

static void test_threads(void **state){
  TdeConfig *cfg = makeConfig("th", "th.wallet", 0);
  TdeKeystore *ks = 0;
  ThreadArg aArg[4];
  pthread_t aTh[4];
  char zId[TDE_KEYID_MAX+1], zNew[TDE_KEYID_MAX+1];
  int i;
  (void)state;
  expectRc(pW->xCreate(cfg, 0, zId, sizeof(zId)), TDE_OK);
  expectRc(pW->xOpen(cfg, 0, &ks), TDE_OK);
  for(i=0; i<4; i++){
    aArg[i].ks = ks;
    memcpy(aArg[i].zId, zId, sizeof(zId));
    aArg[i].nFail = 0;
    assert_int_equal(pthread_create(&aTh[i], 0, threadMain, &aArg[i]), 0);
  }
  for(i=0; i<3; i++) expectRc(pW->xNewKey(ks, zNew, sizeof(zNew)), TDE_OK);
  for(i=0; i<4; i++){
    assert_int_equal(pthread_join(aTh[i], 0), 0);
    assert_int_equal(aArg[i].nFail, 0);
  }
  pW->xClose(ks);
  tdeConfigFree(cfg);
}

static void test_registry(void **state){
  TdeConfig *cfg = makeConfig("reg", "reg.wallet", "password_env = TDE_TEST_WALLET_PW\n");
  TdeKeystore *ks1 = 0, *ks2 = 0, *ks3 = 0;
  const TdeConfig *pCfg = 0;
  char zConf[PATH_MAX], zId[TDE_KEYID_MAX+1], zOld[PATH_MAX];
  (void)state;
  expectRc(pW->xCreate(cfg, "tde-test-pw-reg-8Hs4", zId, sizeof(zId)), TDE_OK);
  tdeConfigFree(cfg);
  scratchPath("reg.conf", zConf);

  /* No password anywhere: the wallet's message, and nothing cached. */
  unsetenv("TDE_TEST_WALLET_PW");
  expectRc(tdeRegistryAcquire(zConf, 0, &ks1, 0), TDE_BADPASSWORD);
  assert_non_null(strstr(tde_last_error(), "TDE_TEST_WALLET_PW"));
  assert_null(ks1);
  expectRc(tdeRegistryAcquire(zConf, "tde-test-pw-wrong-6Np1", &ks1, 0), TDE_BADPASSWORD);
  assert_null(tdeRegistryPeek(zConf));

  /* Password from the environment the config names. */
  setenv("TDE_TEST_WALLET_PW", "tde-test-pw-reg-8Hs4", 1);
  expectRc(tdeRegistryAcquire(zConf, 0, &ks1, &pCfg), TDE_OK);
  assert_non_null(ks1);
  assert_non_null(pCfg);
  assert_string_equal(tdeConfigGet(pCfg, "keystore"), "wallet");
  unsetenv("TDE_TEST_WALLET_PW");
  /* Second acquire: same handle, no password needed, even spelled relative. */
  expectRc(tdeRegistryAcquire(zConf, 0, &ks2, 0), TDE_OK);
  assert_ptr_equal(ks1, ks2);
  assert_non_null(getcwd(zOld, sizeof(zOld)));
  assert_int_equal(chdir(zScratch), 0);
  expectRc(tdeRegistryAcquire("./reg.conf", "tde-test-pw-ignored-1Ty7", &ks3, 0), TDE_OK);
  assert_ptr_equal(ks1, ks3);
  assert_ptr_equal(tdeRegistryPeek("reg.conf"), ks1);
  assert_int_equal(chdir(zOld), 0);
  roundTrip(ks1, zId, 0, 0);
  /* Each acquire holds a reference: the close waits for all three. */
  expectRc(tdeRegistryClose(zConf), TDE_LOCKED);
  tdeRegistryRelease(ks1);
  tdeRegistryRelease(ks2);
  tdeRegistryRelease(ks3);

  expectRc(tdeRegistryClose(zConf), TDE_OK);
  assert_null(tdeRegistryPeek(zConf));
  expectRc(tdeRegistryClose(zConf), TDE_NOTFOUND);

  /* Explicit password works too, and a bad config is not cached. */
  expectRc(tdeRegistryAcquire(zConf, "tde-test-pw-reg-8Hs4", &ks1, 0), TDE_OK);
  tdeRegistryRelease(ks1);
  expectRc(tdeRegistryClose(zConf), TDE_OK);
  writeText("bad.conf", "keystore = wallet\nwalet = x\n", 0600);
  scratchPath("bad.conf", zConf);
  expectRc(tdeRegistryAcquire(zConf, 0, &ks1, 0), TDE_CONFIG);
  assert_non_null(strstr(tde_last_error(), "bad.conf:2: unknown key (known: "));
  assert_null(tdeRegistryPeek(zConf));
  /* Provider lookup. */
  assert_ptr_equal(tdeKeystoreByName("wallet"), &tdeWalletMethods);
  assert_ptr_equal(tdeKeystoreByType(TDE_KS_WALLET), &tdeWalletMethods);
  assert_null(tdeKeystoreByName("pkcs12"));
  assert_null(tdeKeystoreByType(0));
}

static void test_no_error_logs(void **state){
  (void)state;
  if( nErrorLog ) fail_msg("%d error log lines, first: %s", nErrorLog, zFirstErrorLog);
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_password_wallet),
    cmocka_unit_test(test_autologin_wallet),
    cmocka_unit_test(test_wrong_password),
    cmocka_unit_test(test_missing_wallet),
    cmocka_unit_test(test_create_refuses_overwrite),
    cmocka_unit_test(test_damaged_password_wallet),
    cmocka_unit_test(test_damaged_autologin_wallet),
    cmocka_unit_test(test_not_a_wallet),
    cmocka_unit_test(test_new_key),
    cmocka_unit_test(test_concurrent_rotation),
    cmocka_unit_test(test_multiprocess_rotation),
    cmocka_unit_test(test_retire),
    cmocka_unit_test(test_retire_merge),
    cmocka_unit_test(test_wrong_aad),
    cmocka_unit_test(test_threads),
    cmocka_unit_test(test_registry),
    cmocka_unit_test(test_no_error_logs),       /* keep last */
  };
  return cmocka_run_group_tests(tests, setupScratch, teardownScratch);
}
