/*
** Unit tests for freshness anchor records (src/keys/anchor_record.c) and the
** file:DIR anchor store (src/keystore/anchor_store.c), docs/FORMAT.md "External
** anchor": a record written and read back; every byte of a stored record
** changed is refused (MAC, magic, database id, reserved bytes); a wrong
** data key, a version the caller does not hold, a short or long record;
** the staleness rule; the directory rules (missing, not a directory,
** group/world writable) and the written file (0600, no temporary file
** left); the configuration keys parsed strictly and resolved.  Scratch
** files live in a mkdtemp directory under $TDE_TEST_TMP.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tde_int.h"
#include "config.h"
#include "keystore/keystore.h"
#include "keys/anchor_record.h"
#include "cipher/cipher.h"

static char zScratch[1024];
static char zAnchorDir[1100];
static const uint8_t aDbid[16] = { 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 };
static uint8_t aDek[32], aDek2[32];

static int rmOne(const char *zPath, const struct stat *pSt, int flag, struct FTW *pFtw){
  (void)pSt; (void)flag; (void)pFtw;
  return remove(zPath);
}

static int setupScratch(void **state){
  const char *zTmp = getenv("TDE_TEST_TMP");
  (void)state;
  if( zTmp==0 || zTmp[0]==0 ) zTmp = "/tmp";
  mkdir(zTmp, 0700);
  snprintf(zScratch, sizeof(zScratch), "%s/tdeanc-XXXXXX", zTmp);
  if( mkdtemp(zScratch)==0 ) return -1;
  snprintf(zAnchorDir, sizeof(zAnchorDir), "%s/anchors", zScratch);
  if( mkdir(zAnchorDir, 0700)!=0 ) return -1;
  for(int i=0; i<32; i++){ aDek[i] = (uint8_t)(0x40+i); aDek2[i] = (uint8_t)(0x80+i); }
  return 0;
}

static int teardownScratch(void **state){
  (void)state;
  if( getenv("TDE_KEEP_SCRATCH")==0 ) nftw(zScratch, rmOne, 16, FTW_DEPTH | FTW_PHYS);
  return 0;
}

/* A configuration naming the file store in zScratch/anchors. */
static TdeConfig *fileConfig(void){
  TdeConfig *p = 0;
  int rc = tdeConfigParse("keystore = wallet\nwallet = w.tdew\nfreshness_anchor = file:anchors\n"
                          "freshness_anchor_interval = 7\n", "t.conf", zScratch, &p);
  if( rc ) fail_msg("config: %s", tde_last_error());
  return p;
}

/* xKey: version 1 is aDek, version 2 aDek2, others not held. */
static const uint8_t *testKey(void *pArg, uint32_t v){
  (void)pArg;
  return v==1 ? aDek : v==2 ? aDek2 : 0;
}

static void recordPath(char *z, size_t n){
  char zName[TDE_ANCHOR_NAME_MAX];
  tdeAnchorName(aDbid, zName);
  if( (size_t)snprintf(z, n, "%s/%s", zAnchorDir, zName)>=n ) fail_msg("path too long");
}

static void putRecord(uint64_t A, uint32_t version){
  TdeConfig *cfg = fileConfig();
  TdeAnchorRec r;
  memset(&r, 0, sizeof(r));
  memcpy(r.dbid, aDbid, 16);
  r.A = A; r.L = 9; r.seq = 4; r.version = version; r.t = 1700000000;
  assert_int_equal(tdeAnchorPut(cfg, 0, &r, version==2 ? aDek2 : aDek), TDE_OK);
  tdeConfigFree(cfg);
}

static int fetch(TdeAnchorRec *r, int *pbFound){
  TdeConfig *cfg = fileConfig();
  int rc = tdeAnchorFetch(cfg, 0, aDbid, testKey, 0, r, pbFound);
  tdeConfigFree(cfg);
  return rc;
}

static void test_round_trip(void **state){
  TdeAnchorRec r;
  struct stat st;
  char zPath[PATH_MAX];
  int bFound = 1;
  DIR *d;
  struct dirent *e;
  int nFiles = 0;
  (void)state;
  recordPath(zPath, sizeof(zPath));
  unlink(zPath);
  assert_int_equal(fetch(&r, &bFound), TDE_OK);
  assert_int_equal(bFound, 0);                       /* none yet */
  putRecord(5, 1);
  assert_int_equal(fetch(&r, &bFound), TDE_OK);
  assert_int_equal(bFound, 1);
  assert_true(r.A==5 && r.L==9 && r.seq==4 && r.version==1 && r.t==1700000000);
  assert_memory_equal(r.dbid, aDbid, 16);
  assert_int_equal(stat(zPath, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  assert_int_equal((int)st.st_size, TDE_ANCHOR_REC_BYTES);
  d = opendir(zAnchorDir);
  assert_non_null(d);
  while( (e = readdir(d))!=0 ) if( e->d_name[0]!='.' || strlen(e->d_name)>2 ) nFiles++;
  closedir(d);
  assert_int_equal(nFiles, 1);                       /* no temporary file left */
  putRecord(6, 2);                                   /* replaced, now MACed by version 2 */
  assert_int_equal(fetch(&r, &bFound), TDE_OK);
  assert_true(r.A==6 && r.version==2);
}

static void test_every_byte(void **state){
  char zPath[PATH_MAX];
  uint8_t aGood[TDE_ANCHOR_REC_BYTES], a[TDE_ANCHOR_REC_BYTES];
  TdeAnchorRec r;
  int bFound, i, nRefused = 0;
  FILE *f;
  (void)state;
  putRecord(11, 1);
  recordPath(zPath, sizeof(zPath));
  f = fopen(zPath, "rb");
  assert_non_null(f);
  assert_int_equal(fread(aGood, 1, sizeof(aGood), f), sizeof(aGood));
  fclose(f);
  for(i=0; i<TDE_ANCHOR_REC_BYTES; i++){
    memcpy(a, aGood, sizeof(a));
    a[i] ^= 0x01;
    f = fopen(zPath, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(a, 1, sizeof(a), f), sizeof(a));
    fclose(f);
    if( fetch(&r, &bFound)==TDE_AUTH ) nRefused++;
    else fail_msg("byte %d changed: not refused", i);
  }
  assert_int_equal(nRefused, TDE_ANCHOR_REC_BYTES);
  /* Short and long records. */
  for(int n=0; n<2; n++){
    f = fopen(zPath, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(aGood, 1, n ? 50 : sizeof(aGood), f), n ? 50u : sizeof(aGood));
    if( !n ) assert_int_equal(fwrite("x", 1, 1, f), 1);
    fclose(f);
    assert_int_equal(fetch(&r, &bFound), TDE_AUTH);
    assert_non_null(strstr(tde_last_error(), "not an anchor record"));
  }
}

static void test_wrong_key(void **state){
  TdeAnchorRec r;
  int bFound;
  TdeConfig *cfg = fileConfig();
  (void)state;
  memset(&r, 0, sizeof(r));
  memcpy(r.dbid, aDbid, 16);
  r.A = 3; r.version = 1;
  /* Claims version 1 but is MACed with another key: refused. */
  assert_int_equal(tdeAnchorPut(cfg, 0, &r, aDek2), TDE_OK);
  assert_int_equal(fetch(&r, &bFound), TDE_AUTH);
  assert_non_null(strstr(tde_last_error(), "does not authenticate"));
  /* A version the database does not hold. */
  memset(&r, 0, sizeof(r));
  memcpy(r.dbid, aDbid, 16);
  r.A = 3; r.version = 7;
  assert_int_equal(tdeAnchorPut(cfg, 0, &r, aDek), TDE_OK);
  assert_int_equal(fetch(&r, &bFound), TDE_AUTH);
  assert_non_null(strstr(tde_last_error(), "does not hold"));
  tdeConfigFree(cfg);
}

static void test_stale_rule(void **state){
  TdeAnchorRec r;
  (void)state;
  memset(&r, 0, sizeof(r));
  r.A = 5; r.L = 10; r.seq = 3;
  assert_int_equal(tdeAnchorIsStale(&r, 4, 99, 99), 1);   /* older counter */
  assert_int_equal(tdeAnchorIsStale(&r, 5, 9, 3), 1);     /* same counter, older epoch */
  assert_int_equal(tdeAnchorIsStale(&r, 5, 10, 2), 1);    /* same counter, older sequence */
  assert_int_equal(tdeAnchorIsStale(&r, 5, 10, 3), 0);    /* the same state */
  assert_int_equal(tdeAnchorIsStale(&r, 5, 12, 3), 0);    /* newer epoch (restarts since) */
  assert_int_equal(tdeAnchorIsStale(&r, 6, 1, 1), 0);     /* newer counter (crash before the store write) */
}

static void test_directory_rules(void **state){
  TdeAnchorRec r;
  int bFound;
  char zMoved[PATH_MAX];
  (void)state;
  putRecord(2, 1);
  assert_int_equal(chmod(zAnchorDir, 0770), 0);
  assert_int_equal(fetch(&r, &bFound), TDE_NOKEYSTORE);
  assert_non_null(strstr(tde_last_error(), "not writable by group or others"));
  assert_int_equal(chmod(zAnchorDir, 0700), 0);
  snprintf(zMoved, sizeof(zMoved), "%s/moved", zScratch);
  assert_int_equal(rename(zAnchorDir, zMoved), 0);
  assert_int_equal(fetch(&r, &bFound), TDE_NOKEYSTORE);
  assert_non_null(strstr(tde_last_error(), "cannot be reached"));
  {
    FILE *f = fopen(zAnchorDir, "w");           /* a file where the directory should be */
    assert_non_null(f);
    fclose(f);
    assert_int_equal(fetch(&r, &bFound), TDE_NOKEYSTORE);
    assert_non_null(strstr(tde_last_error(), "not a directory"));
    unlink(zAnchorDir);
  }
  assert_int_equal(rename(zMoved, zAnchorDir), 0);
  assert_int_equal(fetch(&r, &bFound), TDE_OK);
  assert_int_equal(bFound, 1);
}

static void expectConfigError(const char *zText, const char *zNeedle){
  TdeConfig *p = 0;
  int rc = tdeConfigParse(zText, "bad.conf", zScratch, &p);
  if( rc!=TDE_CONFIG || strstr(tde_last_error(), zNeedle)==0 ){
    fail_msg("rc=%d message \"%s\" (want \"%s\")", rc, tde_last_error(), zNeedle);
  }
  assert_null(p);
}

static void test_config(void **state){
  TdeConfig *p;
  char zDir[PATH_MAX], zWant[PATH_MAX];
  long long n = -1;
  int eKind = -1;
  (void)state;
  p = fileConfig();
  assert_int_equal(tdeConfigAnchor(p, &eKind, zDir, sizeof(zDir), &n), TDE_OK);
  snprintf(zWant, sizeof(zWant), "%s/anchors", zScratch);
  assert_int_equal(eKind, TDE_ANCHOR_FILE);
  assert_string_equal(zDir, zWant);                 /* relative to the configuration */
  assert_int_equal(n, 7);
  tdeConfigFree(p);
  p = 0;
  assert_int_equal(tdeConfigParse("keystore = wallet\nwallet = w\n", "t.conf", zScratch, &p), TDE_OK);
  assert_int_equal(tdeConfigAnchor(p, &eKind, zDir, sizeof(zDir), &n), TDE_OK);
  assert_int_equal(eKind, TDE_ANCHOR_NONE);
  assert_int_equal(n, TDE_ANCHOR_INTERVAL_DEFAULT);
  tdeConfigFree(p);
  expectConfigError("keystore = wallet\nwallet = w\nfreshness_anchor = disk\n", "bad.conf:3: freshness_anchor must be");
  expectConfigError("keystore = wallet\nwallet = w\nfreshness_anchor = file:\n", "needs a directory");
  expectConfigError("keystore = wallet\nwallet = w\nfreshness_anchor = pkcs11\n", "needs keystore = pkcs11");
  expectConfigError("keystore = wallet\nwallet = w\nfreshness_anchor = kmip\n", "needs keystore = kmip");
  expectConfigError("keystore = wallet\nwallet = w\nfreshness_anchor = file:/x\nfreshness_anchor_interval = -1\n",
                    "bad.conf:4: freshness_anchor_interval must be");
  expectConfigError("keystore = wallet\nwallet = w\nfreshness_anchor = file:/x\nfreshness_anchor_interval = 31536001\n",
                    "freshness_anchor_interval must be");
  expectConfigError("keystore = wallet\nwallet = w\nfreshness_anchor = file:/x\nfreshness_anchor_interval = 10s\n",
                    "freshness_anchor_interval must be");
  expectConfigError("keystore = wallet\nwallet = w\nfreshness_anchor_interval = 10\n", "without freshness_anchor");
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_round_trip),
    cmocka_unit_test(test_every_byte),
    cmocka_unit_test(test_wrong_key),
    cmocka_unit_test(test_stale_rule),
    cmocka_unit_test(test_directory_rules),
    cmocka_unit_test(test_config),
  };
  return cmocka_run_group_tests(tests, setupScratch, teardownScratch);
}
