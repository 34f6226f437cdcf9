/*
** Unit tests for the PKCS#11 keystore provider (src/keystore/pkcs11.c)
** against a throwaway SoftHSM2 token made in a scratch folder under
** $TDE_TEST_TMP (its own softhsm2.conf, SOFTHSM2_CONF pointing there):
** a module initialised by someone else (never finalised by us), the
** master key's attributes and CKA_VALUE refused by the token, keystore
** create / exists, wrap and unwrap (tampering and wrong aad refused),
** rotation and retirement, wrong PIN, missing module, token and key
** label, 8 threads x 20 database opens, fork (child uses the keystore,
** parent keeps working), and a count of token calls proving none happen
** per page or per transaction.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tde_int.h"
#include "config.h"
#include "keystore/keystore.h"
#include "cipher/cipher.h"

#define SOFTHSM_MODULE "/usr/lib/softhsm/libsofthsm2.so"
#define USER_PIN "tde-test-pin-user-4Fz6"   /* distinctive: scripts/scan-secrets.sh */
#define SO_PIN   "tde-test-pin-so-8Rw3"

/* Defined in src/keystore/pkcs11.c, test-only. */
uint64_t tdePkcs11CallCount(void);

static char zScratch[1024];
static char zConf[PATH_MAX];         /* the good configuration */

static int rmOne(const char *zPath, const struct stat *pSt, int flag, struct FTW *pFtw){
  (void)pSt; (void)flag; (void)pFtw;
  return remove(zPath);
}

static void scratchPath(const char *zName, char *zOut){
  snprintf(zOut, PATH_MAX, "%s/%s", zScratch, zName);
}

static void writeFile(const char *zName, const char *zText, mode_t mode){
  char zPath[PATH_MAX];
  int fd;
  scratchPath(zName, zPath);
  unlink(zPath);
  fd = open(zPath, O_WRONLY|O_CREAT|O_TRUNC, mode);
  assert_true(fd>=0);
  assert_int_equal(write(fd, zText, strlen(zText)), (ssize_t)strlen(zText));
  close(fd);
}

/* A configuration zName for token zToken with PIN file zPinFile and an
** optional key label. */
static void writeConf(const char *zName, const char *zModule, const char *zToken,
                      const char *zPinFile, const char *zKeyLabel){
  char zText[3*PATH_MAX];
  int n = snprintf(zText, sizeof(zText), "keystore = pkcs11\npkcs11_module = %s\n"
                   "pkcs11_token_label = %s\npassword_file = %s\naudit_log = audit.log\n",
                   zModule, zToken, zPinFile);
  if( zKeyLabel ) snprintf(zText+n, sizeof(zText)-(size_t)n, "pkcs11_key_label = %s\n", zKeyLabel);
  writeFile(zName, zText, 0600);
}

static int setupScratch(void **state){
  const char *zTmp = getenv("TDE_TEST_TMP");
  char zCmd[PATH_MAX*2], zPath[PATH_MAX], zText[PATH_MAX+128];
  FILE *f;
  (void)state;
  if( zTmp==0 || zTmp[0]==0 ) zTmp = "/tmp";
  mkdir(zTmp, 0700);
  snprintf(zScratch, sizeof(zScratch), "%s/tdep11-XXXXXX", zTmp);
  if( mkdtemp(zScratch)==0 ) return -1;
  scratchPath("tokens", zPath);
  if( mkdir(zPath, 0700)!=0 ) return -1;
  snprintf(zText, sizeof(zText), "directories.tokendir = %s\nobjectstore.backend = file\n"
           "log.level = ERROR\n", zPath);
  scratchPath("softhsm2.conf", zPath);
  f = fopen(zPath, "w");
  if( f==0 ) return -1;
  fputs(zText, f);
  fclose(f);
  setenv("SOFTHSM2_CONF", zPath, 1);
  /* PINs of a throwaway token; softhsm2-util takes them only as arguments. */
  snprintf(zCmd, sizeof(zCmd), "softhsm2-util --init-token --free --label unit --so-pin %s "
           "--pin %s >/dev/null", SO_PIN, USER_PIN);
  if( system(zCmd)!=0 ) return -1;
  writeFile("pin", USER_PIN "\n", 0600);
  writeFile("badpin", "00000000\n", 0600);
  writeConf("p.conf", SOFTHSM_MODULE, "unit", "pin", 0);
  scratchPath("p.conf", zConf);
  if( tde_register(0)!=TDE_OK ) return -1;
  return 0;
}

static int teardownScratch(void **state){
  (void)state;
  /* TDE_KEEP_SCRATCH: kept for scripts/scan-secrets.sh (make test). */
  if( getenv("TDE_KEEP_SCRATCH")==0 ) nftw(zScratch, rmOne, 16, FTW_DEPTH | FTW_PHYS);
  return 0;
}

/* ---- direct access to SoftHSM, as another part of the process would ------ */

typedef unsigned long UL;
typedef struct { UL type; void *pValue; UL ulValueLen; } Attr;
typedef struct { void *a, *b, *c, *d; UL flags; void *r; } InitArgs;
/* CK_FUNCTION_LIST: a version, then the functions in the spec's order. */
typedef struct { unsigned char v[2]; void (*f[68])(void); } FnList;
enum { F_INITIALIZE=0, F_FINALIZE=1, F_GETSLOTLIST=4, F_GETTOKENINFO=6, F_OPENSESSION=12,
       F_CLOSESESSION=13, F_LOGIN=18, F_GETATTRIBUTEVALUE=24, F_FINDOBJECTSINIT=26,
       F_FINDOBJECTS=27, F_FINDOBJECTSFINAL=28 };
typedef UL (*FnInit)(void *);
typedef UL (*FnSlots)(unsigned char, UL *, UL *);
typedef UL (*FnTokInfo)(UL, unsigned char *);
typedef UL (*FnOpen)(UL, UL, void *, void *, UL *);
typedef UL (*FnClose)(UL);
typedef UL (*FnLogin)(UL, UL, unsigned char *, UL);
typedef UL (*FnAttr)(UL, UL, Attr *, UL);
typedef UL (*FnFindInit)(UL, Attr *, UL);
typedef UL (*FnFind)(UL, UL *, UL, UL *);
typedef UL (*FnFinal)(UL);

/* Open a logged-in session on token "unit" through the module's own
** function list; returns the session, *ppF the list. */
static UL directSession(FnList **ppF, UL *pInitRv){
  void *pLib = dlopen(SOFTHSM_MODULE, RTLD_NOW|RTLD_LOCAL);
  UL (*xGet)(FnList **);
  FnList *pF = 0;
  InitArgs args = {0, 0, 0, 0, 2 /* CKF_OS_LOCKING_OK */, 0};
  UL aSlot[16], nSlot = 16, i, hSess = 0;
  unsigned char aInfo[512];
  assert_non_null(pLib);
  *(void **)(&xGet) = dlsym(pLib, "C_GetFunctionList");
  assert_non_null(xGet);
  assert_int_equal(xGet(&pF), 0);
  *pInitRv = ((FnInit)pF->f[F_INITIALIZE])(&args);
  assert_true(*pInitRv==0 || *pInitRv==0x191);
  assert_int_equal(((FnSlots)pF->f[F_GETSLOTLIST])(1, aSlot, &nSlot), 0);
  for(i=0; i<nSlot; i++){
    assert_int_equal(((FnTokInfo)pF->f[F_GETTOKENINFO])(aSlot[i], aInfo), 0);
    if( memcmp(aInfo, "unit ", 5)==0 ) break;
  }
  assert_true(i<nSlot);
  assert_int_equal(((FnOpen)pF->f[F_OPENSESSION])(aSlot[i], 6, 0, 0, &hSess), 0);
  {
    UL rv = ((FnLogin)pF->f[F_LOGIN])(hSess, 1, (unsigned char *)USER_PIN, sizeof(USER_PIN)-1);
    assert_true(rv==0 || rv==0x100);
  }
  *ppF = pF;
  return hSess;           /* pLib stays open: unloading would drop SoftHSM's state */
}

/* Handle of the object labelled zLabel, or 0. */
static UL directFind(FnList *pF, UL hSess, const char *zLabel){
  Attr a = { 3 /* CKA_LABEL */, (void *)zLabel, strlen(zLabel) };
  UL h = 0, n = 0;
  assert_int_equal(((FnFindInit)pF->f[F_FINDOBJECTSINIT])(hSess, &a, 1), 0);
  assert_int_equal(((FnFind)pF->f[F_FINDOBJECTS])(hSess, &h, 1, &n), 0);
  assert_int_equal(((FnFinal)pF->f[F_FINDOBJECTSFINAL])(hSess), 0);
  return n==1 ? h : 0;
}

/*
** Runs first, before the provider ever touched the module: the test
** initialises SoftHSM itself, the keystore is created and closed through
** the provider (which sees CKR_CRYPTOKI_ALREADY_INITIALIZED and must not
** finalise), then the test's own session still works and shows the new
** key's attributes: CKA_VALUE is refused (CKR_ATTRIBUTE_SENSITIVE).
*/
static void test_foreign_init_and_key_attributes(void **state){
  FnList *pF;
  UL initRv, hSess, hKey;
  char zKeyId[TDE_KEYID_MAX+1];
  unsigned char aVal[64];
  unsigned char bSens = 0, bExtr = 1, bNever = 0, bSign = 1, bVerify = 1, bDerive = 1;
  unsigned char bEnc = 0, bDec = 0, bWrap = 1, bPriv = 0;
  UL nLen = 0;
  (void)state;

  hSess = directSession(&pF, &initRv);
  assert_int_equal(initRv, 0);         /* we were first */
  assert_int_equal(tde_keystore_create(zConf, 0, zKeyId, sizeof(zKeyId)), TDE_OK);
  assert_true(strncmp(zKeyId, "sqlite-tde-master-", 18)==0);
  assert_int_equal(tde_keystore_open(zConf, 0), TDE_OK);
  assert_int_equal(tde_keystore_close(zConf), TDE_OK);

  /* Our session survived the provider's close: it did not C_Finalize. */
  hKey = directFind(pF, hSess, zKeyId);
  assert_true(hKey!=0);
  {
    Attr a = { 0x11 /* CKA_VALUE */, aVal, sizeof(aVal) };
    UL rv = ((FnAttr)pF->f[F_GETATTRIBUTEVALUE])(hSess, hKey, &a, 1);
    assert_int_equal(rv, 0x11 /* CKR_ATTRIBUTE_SENSITIVE */);
    assert_true(a.ulValueLen==(UL)-1);  /* CK_UNAVAILABLE_INFORMATION */
  }
  {
    Attr a[] = {
      { 0x103, &bSens, 1 }, { 0x162, &bExtr, 1 }, { 0x164, &bNever, 1 },
      { 0x108, &bSign, 1 }, { 0x10A, &bVerify, 1 }, { 0x10C, &bDerive, 1 },
      { 0x104, &bEnc, 1 }, { 0x105, &bDec, 1 }, { 0x106, &bWrap, 1 },
      { 0x002, &bPriv, 1 }, { 0x161, &nLen, sizeof(nLen) },
    };
    assert_int_equal(((FnAttr)pF->f[F_GETATTRIBUTEVALUE])(hSess, hKey, a, 11), 0);
  }
  assert_int_equal(bSens, 1);
  assert_int_equal(bExtr, 0);
  assert_int_equal(bNever, 1);
  assert_int_equal(bSign, 0);
  assert_int_equal(bVerify, 0);
  assert_int_equal(bDerive, 0);
  assert_int_equal(bEnc, 1);
  assert_int_equal(bDec, 1);
  assert_int_equal(bWrap, 0);
  assert_int_equal(bPriv, 1);
  assert_int_equal(nLen, 32);
  assert_int_equal(((FnClose)pF->f[F_CLOSESESSION])(hSess), 0);
  assert_int_equal(((FnInit)pF->f[F_FINALIZE])(0), 0);
}

static void test_create_exists(void **state){
  char zKeyId[TDE_KEYID_MAX+1];
  (void)state;
  assert_int_equal(tde_keystore_create(zConf, 0, zKeyId, sizeof(zKeyId)), TDE_EXISTS);
  assert_non_null(strstr(tde_last_error(), "already holds master keys"));
}

static void test_wrap_unwrap(void **state){
  TdeKeystore *pKs;
  char zKeyId[TDE_KEYID_MAX+1];
  uint8_t aDek[32], aBack[32], aAad[37], aBlob[TDE_WRAP_MAX];
  size_t nBlob = 0;
  uint8_t mech = 0;
  (void)state;
  assert_int_equal(tdeRegistryAcquire(zConf, 0, &pKs, 0), TDE_OK);
  assert_int_equal(pKs->pMethods->typeId, TDE_KS_PKCS11);
  assert_int_equal(pKs->pMethods->xCurrentKey(pKs, zKeyId, sizeof(zKeyId)), TDE_OK);
  assert_int_equal(tdeRandom(aDek, sizeof(aDek)), TDE_OK);
  assert_int_equal(tdeRandom(aAad, sizeof(aAad)), TDE_OK);
  assert_int_equal(pKs->pMethods->xWrap(pKs, zKeyId, aDek, 32, aAad, sizeof(aAad),
                                        aBlob, sizeof(aBlob), &nBlob, &mech), TDE_OK);
  assert_int_equal(nBlob, 12+32+16);
  assert_int_equal(mech, TDE_MECH_AES256_GCM);
  assert_int_equal(pKs->pMethods->xUnwrap(pKs, zKeyId, mech, aBlob, nBlob, aAad, sizeof(aAad),
                                          aBack, 32), TDE_OK);
  assert_memory_equal(aDek, aBack, 32);
  /* A flipped bit anywhere, or other associated data, does not unwrap. */
  for(size_t i=0; i<nBlob; i+=7){
    aBlob[i] ^= 1;
    assert_int_equal(pKs->pMethods->xUnwrap(pKs, zKeyId, mech, aBlob, nBlob, aAad,
                                            sizeof(aAad), aBack, 32), TDE_AUTH);
    aBlob[i] ^= 1;
  }
  aAad[0] ^= 1;
  assert_int_equal(pKs->pMethods->xUnwrap(pKs, zKeyId, mech, aBlob, nBlob, aAad, sizeof(aAad),
                                          aBack, 32), TDE_AUTH);
  aAad[0] ^= 1;
  assert_int_equal(pKs->pMethods->xUnwrap(pKs, "sqlite-tde-master-19990101T000000.000000Z", mech,
                                          aBlob, nBlob, aAad, sizeof(aAad), aBack, 32), TDE_NOKEY);
  assert_int_equal(pKs->pMethods->xUnwrap(pKs, zKeyId, TDE_MECH_AES_KWP, aBlob, nBlob, aAad,
                                          sizeof(aAad), aBack, 32), TDE_UNSUPPORTED);
  tdeRegistryRelease(pKs);
}

static int countKeys(void *pArg, const char *zKeyId, int64_t created, const char *zStatus){
  int *an = pArg;
  (void)zKeyId;
  assert_true(created > 1700000000);
  if( strcmp(zStatus, "ACTIVE")==0 ) an[0]++; else an[1]++;
  return 0;
}

static void test_rotate_retire(void **state){
  TdeKeystore *pKs;
  char zOld[TDE_KEYID_MAX+1], zNew[TDE_KEYID_MAX+1], zNewer[TDE_KEYID_MAX+1], zCur[TDE_KEYID_MAX+1];
  uint8_t aDek[32], aBack[32], aAad[8] = {1,2,3,4,5,6,7,8}, aBlob[TDE_WRAP_MAX];
  size_t nBlob = 0;
  uint8_t mech = 0;
  int an[2] = {0, 0};
  (void)state;
  assert_int_equal(tdeRegistryAcquire(zConf, 0, &pKs, 0), TDE_OK);
  assert_int_equal(pKs->pMethods->xCurrentKey(pKs, zOld, sizeof(zOld)), TDE_OK);
  assert_int_equal(tdeRandom(aDek, sizeof(aDek)), TDE_OK);
  assert_int_equal(pKs->pMethods->xWrap(pKs, zOld, aDek, 32, aAad, sizeof(aAad),
                                        aBlob, sizeof(aBlob), &nBlob, &mech), TDE_OK);
  /* Two rotations in quick succession: each new key becomes current. */
  assert_int_equal(tde_keystore_new_key(zConf, zNew, sizeof(zNew)), TDE_OK);
  assert_int_equal(pKs->pMethods->xCurrentKey(pKs, zCur, sizeof(zCur)), TDE_OK);
  assert_string_equal(zCur, zNew);
  assert_int_equal(tde_keystore_new_key(zConf, zNewer, sizeof(zNewer)), TDE_OK);
  assert_int_equal(pKs->pMethods->xCurrentKey(pKs, zCur, sizeof(zCur)), TDE_OK);
  assert_string_equal(zCur, zNewer);
  assert_true(strcmp(zOld, zNew)<0 && strcmp(zNew, zNewer)<0);

  assert_int_equal(tde_keystore_retire(zConf, zNewer), TDE_MISUSE);
  assert_int_equal(tde_keystore_retire(zConf, "sqlite-tde-master-nope"), TDE_NOKEY);
  assert_int_equal(tde_keystore_retire(zConf, zOld), TDE_OK);
  assert_int_equal(tde_keystore_retire(zConf, zOld), TDE_OK);     /* idempotent */
  /* Retired: the token refuses to encrypt with it; old wrappings unwrap. */
  assert_int_equal(pKs->pMethods->xWrap(pKs, zOld, aDek, 32, aAad, sizeof(aAad),
                                        aBlob+100, sizeof(aBlob)-100, &nBlob, &mech), TDE_NOKEY);
  nBlob = 60;
  assert_int_equal(pKs->pMethods->xUnwrap(pKs, zOld, TDE_MECH_AES256_GCM, aBlob, nBlob, aAad,
                                          sizeof(aAad), aBack, 32), TDE_OK);
  assert_memory_equal(aDek, aBack, 32);
  assert_int_equal(tde_keystore_list(zConf, countKeys, an), TDE_OK);
  assert_int_equal(an[0], 2);
  assert_int_equal(an[1], 1);
  tdeRegistryRelease(pKs);
}

static void test_wrong_pin(void **state){
  char zPath[PATH_MAX];
  (void)state;
  /* PKCS#11 login state is per process and token: while another keystore
  ** of this token is open, C_Login answers CKR_USER_ALREADY_LOGGED_IN
  ** without looking at the PIN.  Close them so the PIN is checked. */
  assert_int_equal(tde_keystore_close(zConf), TDE_OK);
  writeConf("badpin.conf", SOFTHSM_MODULE, "unit", "badpin", 0);
  scratchPath("badpin.conf", zPath);
  assert_int_equal(tde_keystore_open(zPath, 0), TDE_BADPASSWORD);
  assert_non_null(strstr(tde_last_error(), "PIN incorrect"));
  assert_null(strstr(tde_last_error(), "00000000"));
  /* The right PIN passed explicitly works with the same configuration. */
  assert_int_equal(tde_keystore_open(zPath, USER_PIN), TDE_OK);
  assert_int_equal(tde_keystore_close(zPath), TDE_OK);
}

static void test_missing_module(void **state){
  char zPath[PATH_MAX], zMod[PATH_MAX];
  (void)state;
  scratchPath("no-such-module.so", zMod);
  writeConf("nomod.conf", zMod, "unit", "pin", 0);
  scratchPath("nomod.conf", zPath);
  assert_int_equal(tde_keystore_open(zPath, 0), TDE_NOKEYSTORE);
  assert_non_null(strstr(tde_last_error(), zMod));
  assert_non_null(strstr(tde_last_error(), "cannot load"));
  /* A file that is not a PKCS#11 module. */
  writeConf("notmod.conf", "/lib/x86_64-linux-gnu/libz.so.1", "unit", "pin", 0);
  scratchPath("notmod.conf", zPath);
  if( access("/lib/x86_64-linux-gnu/libz.so.1", R_OK)==0 ){
    assert_int_equal(tde_keystore_open(zPath, 0), TDE_NOKEYSTORE);
    assert_non_null(strstr(tde_last_error(), "C_GetFunctionList"));
  }
}

static void test_missing_token(void **state){
  char zPath[PATH_MAX];
  (void)state;
  writeConf("notok.conf", SOFTHSM_MODULE, "no-such-token", "pin", 0);
  scratchPath("notok.conf", zPath);
  assert_int_equal(tde_keystore_open(zPath, 0), TDE_NOKEYSTORE);
  assert_non_null(strstr(tde_last_error(), "no token labelled 'no-such-token'"));
}

static int openDb(const char *zName, const char *zCfg, sqlite3 **pDb){
  char zPath[PATH_MAX];
  char *zUri;
  int rc;
  scratchPath(zName, zPath);
  zUri = sqlite3_mprintf("file:%s?vfs=tde&tde_config=%s", zPath, zCfg);
  rc = sqlite3_open_v2(zUri, pDb, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE|SQLITE_OPEN_URI, 0);
  sqlite3_free(zUri);
  /* test_fork's parent writes while its child reads the same file. */
  if( rc==SQLITE_OK ) sqlite3_busy_timeout(*pDb, 10000);
  return rc;
}

static void exec(sqlite3 *db, const char *zSql){
  char *zErr = 0;
  int rc = sqlite3_exec(db, zSql, 0, 0, &zErr);
  if( rc!=SQLITE_OK ) fail_msg("%s: %s (%s)", zSql, zErr ? zErr : "?", tde_last_error());
}

static int64_t count(sqlite3 *db, const char *zSql){
  sqlite3_stmt *pStmt = 0;
  int64_t n = -1;
  if( sqlite3_prepare_v2(db, zSql, -1, &pStmt, 0)==SQLITE_OK && sqlite3_step(pStmt)==SQLITE_ROW ){
    n = sqlite3_column_int64(pStmt, 0);
  }
  sqlite3_finalize(pStmt);
  return n;
}

static void test_missing_key_label(void **state){
  char zPath[PATH_MAX], zKeyId[TDE_KEYID_MAX+1];
  sqlite3 *db = 0;
  (void)state;
  assert_int_equal(openDb("label.db", zConf, &db), SQLITE_OK);
  exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES(1);");
  sqlite3_close(db);
  writeConf("nolabel.conf", SOFTHSM_MODULE, "unit", "pin", "no-such-label");
  scratchPath("nolabel.conf", zPath);
  assert_int_equal(tde_keystore_open(zPath, 0), TDE_OK);   /* the token is there */
  {
    tde_keystore_info info = { .nSize = sizeof(tde_keystore_info) };
    assert_int_equal(tde_keystore_status(zPath, &info), TDE_OK);
    assert_string_equal(info.zStatus, "OPEN_NO_MASTER_KEY");
    assert_int_equal(info.nKeys, 0);
  }
  db = 0;
  assert_int_not_equal(openDb("label.db", zPath, &db), SQLITE_OK);
  sqlite3_close(db);
  {
    TdeKeystore *pKs;
    assert_int_equal(tdeRegistryAcquire(zPath, 0, &pKs, 0), TDE_OK);
    assert_int_equal(pKs->pMethods->xCurrentKey(pKs, zKeyId, sizeof(zKeyId)), TDE_NOKEY);
    assert_non_null(strstr(tde_last_error(), "no-such-label"));
    tdeRegistryRelease(pKs);
  }
}

/* ---- many threads opening databases at once --------------------------------- */

#define N_THREADS 8
#define N_OPENS   20

typedef struct ThreadArg { int iThread; int nOk; char zErr[256]; } ThreadArg;

static void *openLoop(void *pArg){
  ThreadArg *a = pArg;
  char zName[64];
  int i;
  for(i=0; i<N_OPENS; i++){
    sqlite3 *db = 0;
    char *zErr = 0;
    /* Half the opens create a database (wrap), half reopen one (unwrap). */
    snprintf(zName, sizeof(zName), "thr-%d-%d.db", a->iThread, i/2);
    if( openDb(zName, zConf, &db)==SQLITE_OK
     && sqlite3_exec(db, "CREATE TABLE IF NOT EXISTS t(x); INSERT INTO t VALUES(1);", 0, 0, &zErr)==SQLITE_OK ){
      a->nOk++;
    }else if( a->zErr[0]==0 ){
      snprintf(a->zErr, sizeof(a->zErr), "%s / %s", zErr ? zErr : sqlite3_errmsg(db), tde_last_error());
    }
    sqlite3_free(zErr);
    sqlite3_close(db);
  }
  return 0;
}

static void test_threads(void **state){
  pthread_t aThr[N_THREADS];
  ThreadArg aArg[N_THREADS];
  uint64_t n0 = tdePkcs11CallCount();
  int i, nOk = 0;
  (void)state;
  /* Start from a closed keystore so the first opens race for it too. */
  tde_keystore_close(zConf);
  tdeErrClear();
  memset(aArg, 0, sizeof(aArg));
  for(i=0; i<N_THREADS; i++){
    aArg[i].iThread = i;
    assert_int_equal(pthread_create(&aThr[i], 0, openLoop, &aArg[i]), 0);
  }
  for(i=0; i<N_THREADS; i++){
    pthread_join(aThr[i], 0);
    if( aArg[i].zErr[0] ) print_message("thread %d: %s\n", i, aArg[i].zErr);
    nOk += aArg[i].nOk;
  }
  print_message("     %d threads x %d opens: %d succeeded, %llu token calls\n", N_THREADS,
                N_OPENS, nOk, (unsigned long long)(tdePkcs11CallCount()-n0));
  assert_int_equal(nOk, N_THREADS*N_OPENS);
}

/* ---- no token call per page or per transaction ------------------------------- */

static void test_call_count(void **state){
  sqlite3 *db = 0, *db2 = 0;
  uint64_t n0, n1, n2, n3;
  int i;
  (void)state;
  assert_int_equal(openDb("count.db", zConf, &db), SQLITE_OK);
  exec(db, "PRAGMA cache_size=10; CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);");
  n0 = tdePkcs11CallCount();
  for(i=0; i<1000; i++){
    exec(db, "BEGIN; INSERT INTO t(v) VALUES(randomblob(2000)); COMMIT;");
  }
  assert_int_equal(count(db, "SELECT count(*) FROM t"), 1000);
  assert_int_equal(count(db, "SELECT sum(length(v)) FROM t"), 2000000);   /* ~500+ pages read */
  n1 = tdePkcs11CallCount();
  print_message("     token calls for 1000 write transactions and a full scan: %llu\n",
                (unsigned long long)(n1-n0));
  assert_int_equal(n1-n0, 0);
  /* A second connection: one unwrap at open, then nothing. */
  assert_int_equal(openDb("count.db", zConf, &db2), SQLITE_OK);
  assert_int_equal(count(db2, "SELECT count(*) FROM t"), 1000);
  n2 = tdePkcs11CallCount();
  for(i=0; i<1000; i++) exec(db2, "BEGIN; UPDATE t SET v=randomblob(10) WHERE id=1; COMMIT;");
  assert_int_equal(count(db2, "SELECT sum(length(v)) FROM t"), 999*2000 + 10);
  n3 = tdePkcs11CallCount();
  print_message("     token calls to open a database: %llu; for 1000 more transactions: %llu\n",
                (unsigned long long)(n2-n1), (unsigned long long)(n3-n2));
  assert_true(n2-n1 > 0 && n2-n1 < 40);
  assert_int_equal(n3-n2, 0);
  sqlite3_close(db2);
  sqlite3_close(db);
}

/* ---- fork: the child uses the keystore, the parent keeps working -------------- */

static void test_fork(void **state){
  sqlite3 *db = 0;
  pid_t pid;
  int status = -1;
  (void)state;
  assert_int_equal(openDb("fork-parent.db", zConf, &db), SQLITE_OK);
  exec(db, "CREATE TABLE IF NOT EXISTS t(x); INSERT INTO t VALUES(1);");
  pid = fork();
  assert_true(pid>=0);
  if( pid==0 ){
    /* Child: the inherited keystore handle belongs to the parent's
    ** session; it must re-initialise, log in and work on its own. */
    sqlite3 *c = 0, *c2 = 0;
    char zKeyId[TDE_KEYID_MAX+1];
    int ok = openDb("fork-child.db", zConf, &c)==SQLITE_OK
          && sqlite3_exec(c, "CREATE TABLE t(x); INSERT INTO t VALUES(2);", 0, 0, 0)==SQLITE_OK
          && openDb("fork-parent.db", zConf, &c2)==SQLITE_OK
          && count(c2, "SELECT count(*) FROM t")>=1
          && tde_keystore_new_key(zConf, zKeyId, sizeof(zKeyId))==TDE_OK;
    if( !ok ) fprintf(stderr, "child: %s (SQLite: %s)\n", tde_last_error(),
                      c2 ? sqlite3_errmsg(c2) : c ? sqlite3_errmsg(c) : "no connection");
    sqlite3_close(c2);
    sqlite3_close(c);
    _exit(ok ? 0 : 1);
  }
  /* The parent keeps working meanwhile and after. */
  exec(db, "INSERT INTO t VALUES(3);");
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  exec(db, "INSERT INTO t VALUES(4);");
  sqlite3_close(db);
  db = 0;
  /* The parent's keystore session still works: reopen both databases. */
  assert_int_equal(openDb("fork-child.db", zConf, &db), SQLITE_OK);
  assert_int_equal(count(db, "SELECT x FROM t"), 2);
  sqlite3_close(db);
  db = 0;
  assert_int_equal(openDb("fork-parent.db", zConf, &db), SQLITE_OK);
  assert_true(count(db, "SELECT count(*) FROM t") >= 3);
  sqlite3_close(db);
}

/* ---- interposing on the module: size answers and a token that goes away ----
** The provider calls through SoftHSM's own function list (the same
** instance this test gets from C_GetFunctionList), so replacing entries of
** that table in place intercepts its calls. */

enum { F_ENCRYPT=30, F_DECRYPTINIT=33 };
typedef UL (*FnCrypt)(UL, unsigned char *, UL, unsigned char *, UL *);
typedef UL (*FnCryptInit)(UL, void *, UL);
static FnList *pHsm;
static FnCrypt xRealEncrypt;
static FnSlots xRealSlots;
static FnCryptInit xRealDecryptInit;
static int nShortAnswers;

static FnList *hsmList(void){
  if( pHsm==0 ){
    void *pLib = dlopen(SOFTHSM_MODULE, RTLD_NOW|RTLD_LOCAL);   /* kept open */
    UL (*xGet)(FnList **);
    assert_non_null(pLib);
    *(void **)(&xGet) = dlsym(pLib, "C_GetFunctionList");
    assert_int_equal(xGet(&pHsm), 0);
  }
  return pHsm;
}

static void hsmWritable(void){
  long nPage = sysconf(_SC_PAGESIZE);
  uintptr_t a = (uintptr_t)hsmList() & ~(uintptr_t)(nPage-1);
  assert_int_equal(mprotect((void *)a, (size_t)nPage*2, PROT_READ|PROT_WRITE), 0);
}

/* The real C_Encrypt, but the output buffer is said to be 1 byte long:
** SoftHSM answers CKR_BUFFER_TOO_SMALL and keeps the operation active. */
static UL shortEncrypt(UL h, unsigned char *pIn, UL nIn, unsigned char *pOut, UL *pnOut){
  if( pOut ){
    UL n = 1;
    UL rv = xRealEncrypt(h, pIn, nIn, pOut, &n);
    nShortAnswers++;
    *pnOut = n;
    return rv;
  }
  return xRealEncrypt(h, pIn, nIn, pOut, pnOut);
}

/* A size answer larger than any wrapped key. */
static UL hugeEncrypt(UL h, unsigned char *pIn, UL nIn, unsigned char *pOut, UL *pnOut){
  UL rv = xRealEncrypt(h, pIn, nIn, pOut, pnOut);
  if( pOut==0 && rv==0 ){ *pnOut = 1u<<20; nShortAnswers++; }
  return rv;
}

static void test_buffer_too_small(void **state){
  TdeKeystore *pKs;
  char zKeyId[TDE_KEYID_MAX+1];
  uint8_t aDek[32] = {7}, aBack[32], aAad[4] = {1,2,3,4}, aBlob[TDE_WRAP_MAX];
  size_t nBlob = 0;
  uint8_t mech = 0;
  FnList *pF = hsmList();
  (void)state;
  assert_int_equal(tdeRegistryAcquire(zConf, 0, &pKs, 0), TDE_OK);
  assert_int_equal(pKs->pMethods->xCurrentKey(pKs, zKeyId, sizeof(zKeyId)), TDE_OK);
  hsmWritable();
  xRealEncrypt = (FnCrypt)pF->f[F_ENCRYPT];
  for(int i=0; i<2; i++){
    nShortAnswers = 0;
    pF->f[F_ENCRYPT] = (void (*)(void))(i==0 ? shortEncrypt : hugeEncrypt);
    assert_int_not_equal(pKs->pMethods->xWrap(pKs, zKeyId, aDek, 32, aAad, sizeof(aAad),
                                              aBlob, sizeof(aBlob), &nBlob, &mech), TDE_OK);
    assert_int_equal(nShortAnswers, 1);
    pF->f[F_ENCRYPT] = (void (*)(void))xRealEncrypt;
    /* No operation was left active: the next wrap on the keystore works
    ** (C_EncryptInit would answer CKR_OPERATION_ACTIVE otherwise). */
    assert_int_equal(pKs->pMethods->xWrap(pKs, zKeyId, aDek, 32, aAad, sizeof(aAad),
                                          aBlob, sizeof(aBlob), &nBlob, &mech), TDE_OK);
    assert_int_equal(pKs->pMethods->xUnwrap(pKs, zKeyId, mech, aBlob, nBlob, aAad,
                                            sizeof(aAad), aBack, 32), TDE_OK);
    assert_memory_equal(aDek, aBack, 32);
  }
  tdeRegistryRelease(pKs);
}

/* The token is gone: no slot shows it, and the session answers
** CKR_DEVICE_REMOVED. */
static UL goneSlots(unsigned char bPresent, UL *aSlot, UL *pn){
  (void)bPresent; (void)aSlot;
  *pn = 0;
  return 0;
}
static UL goneDecryptInit(UL h, void *pMech, UL hKey){
  (void)h; (void)pMech; (void)hKey;
  return 0x32;            /* CKR_DEVICE_REMOVED */
}

static void test_token_lost(void **state){
  sqlite3 *db = 0, *db2 = 0;
  FnList *pF = hsmList();
  int rc;
  (void)state;
  assert_int_equal(openDb("lost-a.db", zConf, &db), SQLITE_OK);
  exec(db, "CREATE TABLE IF NOT EXISTS t(x); INSERT INTO t VALUES(1);");
  assert_int_equal(openDb("lost-b.db", zConf, &db2), SQLITE_OK);
  exec(db2, "CREATE TABLE IF NOT EXISTS t(x); INSERT INTO t VALUES(1);");
  sqlite3_close(db2);
  db2 = 0;

  hsmWritable();
  xRealSlots = (FnSlots)pF->f[F_GETSLOTLIST];
  xRealDecryptInit = (FnCryptInit)pF->f[F_DECRYPTINIT];
  pF->f[F_GETSLOTLIST] = (void (*)(void))goneSlots;
  pF->f[F_DECRYPTINIT] = (void (*)(void))goneDecryptInit;
  /* The open database keeps working on its cached data key. */
  exec(db, "INSERT INTO t VALUES(2); INSERT INTO t VALUES(3);");
  assert_int_equal(count(db, "SELECT count(*) FROM t"), 3);
  /* The next open fails, naming the cause. */
  rc = openDb("lost-b.db", zConf, &db2);
  if( rc==SQLITE_OK ) rc = sqlite3_exec(db2, "SELECT * FROM t", 0, 0, 0);
  assert_int_not_equal(rc, SQLITE_OK);
  sqlite3_close(db2);
  db2 = 0;
  pF->f[F_GETSLOTLIST] = (void (*)(void))xRealSlots;
  pF->f[F_DECRYPTINIT] = (void (*)(void))xRealDecryptInit;
  /* The token is back: the provider reconnects and logs in again. */
  assert_int_equal(openDb("lost-b.db", zConf, &db2), SQLITE_OK);
  assert_int_equal(count(db2, "SELECT count(*) FROM t"), 1);
  sqlite3_close(db2);
  assert_int_equal(count(db, "SELECT count(*) FROM t"), 3);
  sqlite3_close(db);
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_foreign_init_and_key_attributes),   /* keep first */
    cmocka_unit_test(test_create_exists),
    cmocka_unit_test(test_wrap_unwrap),
    cmocka_unit_test(test_rotate_retire),
    cmocka_unit_test(test_wrong_pin),
    cmocka_unit_test(test_missing_module),
    cmocka_unit_test(test_missing_token),
    cmocka_unit_test(test_missing_key_label),
    cmocka_unit_test(test_threads),
    cmocka_unit_test(test_call_count),
    cmocka_unit_test(test_fork),
    cmocka_unit_test(test_buffer_too_small),
    cmocka_unit_test(test_token_lost),
  };
  int rc = cmocka_run_group_tests(tests, setupScratch, teardownScratch);
  tde_keystore_close(zConf);
  return rc;
}
