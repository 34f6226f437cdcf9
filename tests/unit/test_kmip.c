/*
** Unit tests for the KMIP keystore provider (src/keystore/kmip/).
**
** Always: configuration errors (server lists, ports, prefixes, switches,
** missing keys and files) come back as TDE_CONFIG naming the key.
**
** With KMIP_TEST_CONF set (tests/integration/test_kmip.sh sets it and runs
** this binary against a live PyKMIP server): wrap/unwrap round trips, the
** blob layout iv(12) || ct || tag(16), a changed AAD / IV / ciphertext /
** tag refused with TDE_AUTH, a key id of another keystore refused, key
** rotation, four threads unwrapping through the one shared connection,
** a forked child that opens its own connection while the parent keeps
** using its own, and -- with KMIP_TEST_CONF_GET (kmip_allow_get = yes) --
** that a blob the server wrapped unwraps with the key fetched by Get, the
** same format both ways.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tde_int.h"
#include "config.h"
#include "keystore/keystore.h"
#include "cipher/cipher.h"

extern const tde_keystore_methods tdeKmipMethods;

static const tde_keystore_methods *M = &tdeKmipMethods;

static int parseErr(const char *zText, const char *zWant){
  TdeConfig *pCfg = 0;
  TdeKeystore *pKs = 0;
  int rc = tdeConfigParse(zText, "test.conf", "/tmp", &pCfg);
  if( rc==TDE_OK ){
    rc = M->xOpen(pCfg, 0, &pKs);
    if( pKs ) M->xClose(pKs);
  }
  if( zWant && strstr(tde_last_error(), zWant)==0 ){
    fail_msg("expected '%s' in: %s", zWant, tde_last_error());
  }
  tdeConfigFree(pCfg);
  return rc;
}

#define BASE "keystore = kmip\nkmip_ca = /nonexistent/ca.pem\n" \
             "kmip_client_cert = /nonexistent/c.pem\nkmip_client_key = /nonexistent/c.key\n"

static void test_config_errors(void **state){
  (void)state;
  assert_int_equal(parseErr("keystore = kmip\n", "kmip_servers"), TDE_CONFIG);
  assert_int_equal(parseErr(BASE "kmip_servers = ,\n", "kmip_servers"), TDE_CONFIG);
  assert_int_equal(parseErr(BASE "kmip_servers = host:0\n", "kmip_servers"), TDE_CONFIG);
  assert_int_equal(parseErr(BASE "kmip_servers = host:65536\n", "kmip_servers"), TDE_CONFIG);
  assert_int_equal(parseErr(BASE "kmip_servers = host:12x\n", "kmip_servers"), TDE_CONFIG);
  assert_int_equal(parseErr(BASE "kmip_servers = [::1\n", "kmip_servers"), TDE_CONFIG);
  assert_int_equal(parseErr(BASE "kmip_servers = a,b,c,d,e,f,g,h,i\n", "more than 8"), TDE_CONFIG);
  assert_int_equal(parseErr(BASE "kmip_servers = h\nkmip_port = 0\n", "kmip_port"), TDE_CONFIG);
  assert_int_equal(parseErr(BASE "kmip_servers = h\nkmip_connect_timeout = 0\n",
                            "kmip_connect_timeout"), TDE_CONFIG);
  assert_int_equal(parseErr(BASE "kmip_servers = h\nkmip_request_timeout = 99999999999\n",
                            "kmip_request_timeout"), TDE_CONFIG);
  assert_int_equal(parseErr(BASE "kmip_servers = h\nkmip_key_prefix = a/b\n",
                            "kmip_key_prefix"), TDE_CONFIG);
  assert_int_equal(parseErr(BASE "kmip_servers = h\nkmip_allow_get = maybe\n",
                            "kmip_allow_get"), TDE_CONFIG);
  assert_int_equal(parseErr("keystore = kmip\nkmip_servers = h\n", "kmip_ca"), TDE_CONFIG);
  assert_int_equal(parseErr(BASE "kmip_servers = h, [::1]:5696\n", "CA file"), TDE_CONFIG);
  /* Secrets never go in the configuration. */
  assert_int_equal(parseErr(BASE "kmip_servers = h\nkmip_password = x\n", "secrets"), TDE_CONFIG);
}

/* ---- live server ------------------------------------------------------- */

static TdeConfig *pLiveCfg;
static TdeKeystore *pLive;

static int liveSetup(void **state){
  const char *z = getenv("KMIP_TEST_CONF");
  char zKey[TDE_KEYID_MAX + 1];
  (void)state;
  if( z==0 ) return 0;
  if( tdeConfigLoad(z, &pLiveCfg)!=TDE_OK ){
    fprintf(stderr, "config: %s\n", tde_last_error());
    return -1;
  }
  /* First run creates the keystore; later runs find it. */
  if( M->xCreate(pLiveCfg, 0, zKey, sizeof(zKey))!=TDE_OK && tde_last_error()[0]
   && strstr(tde_last_error(), "already holds")==0 ){
    fprintf(stderr, "create: %s\n", tde_last_error());
    return -1;
  }
  if( M->xOpen(pLiveCfg, 0, &pLive)!=TDE_OK ){
    fprintf(stderr, "open: %s\n", tde_last_error());
    return -1;
  }
  return 0;
}

static int liveTeardown(void **state){
  (void)state;
  if( pLive ) M->xClose(pLive);
  tdeConfigFree(pLiveCfg);
  pLive = 0;
  pLiveCfg = 0;
  return 0;
}

#define SKIP_IF_OFFLINE() do{ if( pLive==0 ){ skip(); } }while(0)

static const uint8_t aAad[] = "header bytes bound to the wrapping";

static void wrapOne(TdeKeystore *pKs, const char *zKey, const uint8_t *aDek,
                    uint8_t *aBlob, size_t *pnBlob){
  uint8_t mech = 0;
  int rc = M->xWrap(pKs, zKey, aDek, 32, aAad, sizeof(aAad), aBlob, TDE_WRAP_MAX, pnBlob, &mech);
  if( rc ) fail_msg("wrap: %s", tde_last_error());
  assert_int_equal(*pnBlob, 12 + 32 + 16);
  assert_int_equal(mech, TDE_MECH_AES256_GCM);
}

static void test_live_roundtrip(void **state){
  char zKey[TDE_KEYID_MAX + 1];
  uint8_t aDek[32], aOut[32], aBlob[TDE_WRAP_MAX], aBad[TDE_WRAP_MAX];
  size_t nBlob, i;
  int rc;
  (void)state;
  SKIP_IF_OFFLINE();
  assert_int_equal(M->xCurrentKey(pLive, zKey, sizeof(zKey)), TDE_OK);
  assert_true(strncmp(zKey, "unit-test-", 10)==0);
  assert_int_equal(M->xHasKey(pLive, zKey), 1);
  assert_int_equal(M->xHasKey(pLive, "unit-test-00000000000000000000000000000000"), 0);
  assert_int_equal(M->xHasKey(pLive, "other-prefix-1"), 0);
  tdeRandom(aDek, sizeof(aDek));
  wrapOne(pLive, zKey, aDek, aBlob, &nBlob);
  assert_memory_not_equal(aBlob+12, aDek, 32);
  rc = M->xUnwrap(pLive, zKey, TDE_MECH_AES256_GCM, aBlob, nBlob, aAad, sizeof(aAad), aOut, 32);
  if( rc ) fail_msg("unwrap: %s", tde_last_error());
  assert_memory_equal(aOut, aDek, 32);

  /* Another AAD, and every region of the blob changed: TDE_AUTH, output wiped. */
  memset(aOut, 0xAA, sizeof(aOut));
  rc = M->xUnwrap(pLive, zKey, TDE_MECH_AES256_GCM, aBlob, nBlob, aAad, sizeof(aAad)-1, aOut, 32);
  if( rc!=TDE_AUTH ) fail_msg("changed AAD: rc %d: %s", rc, tde_last_error());
  assert_non_null(strstr(tde_last_error(), "does not authenticate"));
  for(i=0; i<32; i++) assert_int_equal(aOut[i], 0);
  {
    static const size_t aOfs[] = {0, 11, 12, 43, 44, 59};
    for(i=0; i<TDE_ARRAY_SIZE(aOfs); i++){
      memcpy(aBad, aBlob, nBlob);
      aBad[aOfs[i]] ^= 0x01;
      assert_int_equal(M->xUnwrap(pLive, zKey, TDE_MECH_AES256_GCM, aBad, nBlob,
                                  aAad, sizeof(aAad), aOut, 32), TDE_AUTH);
    }
  }
  /* Wrong length, wrong mechanism, unknown key. */
  assert_int_equal(M->xUnwrap(pLive, zKey, TDE_MECH_AES256_GCM, aBlob, nBlob-1,
                              aAad, sizeof(aAad), aOut, 32), TDE_FORMAT);
  assert_int_equal(M->xUnwrap(pLive, zKey, TDE_MECH_AES_KWP, aBlob, nBlob,
                              aAad, sizeof(aAad), aOut, 32), TDE_UNSUPPORTED);
  assert_int_equal(M->xUnwrap(pLive, "unit-test-00000000000000000000000000000000",
                              TDE_MECH_AES256_GCM, aBlob, nBlob, aAad, sizeof(aAad), aOut, 32),
                   TDE_NOKEY);
  /* Retirement belongs to the key manager. */
  assert_int_equal(M->xRetire(pLive, zKey), TDE_UNSUPPORTED);
}

static void test_live_rotation(void **state){
  char zOld[TDE_KEYID_MAX + 1], zNew[TDE_KEYID_MAX + 1], zCur[TDE_KEYID_MAX + 1];
  uint8_t aDek[32], aOut[32], aBlob[TDE_WRAP_MAX];
  size_t nBlob;
  (void)state;
  SKIP_IF_OFFLINE();
  assert_int_equal(M->xCurrentKey(pLive, zOld, sizeof(zOld)), TDE_OK);
  tdeRandom(aDek, sizeof(aDek));
  wrapOne(pLive, zOld, aDek, aBlob, &nBlob);
  if( M->xNewKey(pLive, zNew, sizeof(zNew)) ) fail_msg("new key: %s", tde_last_error());
  assert_string_not_equal(zOld, zNew);
  assert_int_equal(M->xCurrentKey(pLive, zCur, sizeof(zCur)), TDE_OK);
  assert_string_equal(zCur, zNew);
  /* The old key still unwraps what it wrapped. */
  assert_int_equal(M->xUnwrap(pLive, zOld, TDE_MECH_AES256_GCM, aBlob, nBlob,
                              aAad, sizeof(aAad), aOut, 32), TDE_OK);
  assert_memory_equal(aOut, aDek, 32);
  /* A second handle (another process would do the same) sees the new key. */
  {
    TdeKeystore *p2 = 0;
    assert_int_equal(M->xOpen(pLiveCfg, 0, &p2), TDE_OK);
    assert_int_equal(M->xCurrentKey(p2, zCur, sizeof(zCur)), TDE_OK);
    assert_string_equal(zCur, zNew);
    assert_int_equal(M->xUnwrap(p2, zOld, TDE_MECH_AES256_GCM, aBlob, nBlob,
                                aAad, sizeof(aAad), aOut, 32), TDE_OK);
    M->xClose(p2);
  }
}

typedef struct ThreadArg {
  const char *zKey;
  const uint8_t *aBlob;
  size_t nBlob;
  const uint8_t *aDek;
  int nFail;
} ThreadArg;

static void *unwrapThread(void *pArg){
  ThreadArg *a = pArg;
  int i;
  for(i=0; i<10; i++){
    uint8_t aOut[32];
    if( M->xUnwrap(pLive, a->zKey, TDE_MECH_AES256_GCM, a->aBlob, a->nBlob,
                   aAad, sizeof(aAad), aOut, 32)!=TDE_OK || memcmp(aOut, a->aDek, 32)!=0 ){
      a->nFail++;
    }
  }
  return 0;
}

static void test_live_threads_and_fork(void **state){
  char zKey[TDE_KEYID_MAX + 1];
  uint8_t aDek[32], aOut[32], aBlob[TDE_WRAP_MAX];
  size_t nBlob;
  pthread_t aTid[4];
  ThreadArg aArg[4];
  int i, status;
  pid_t pid;
  (void)state;
  SKIP_IF_OFFLINE();
  assert_int_equal(M->xCurrentKey(pLive, zKey, sizeof(zKey)), TDE_OK);
  tdeRandom(aDek, sizeof(aDek));
  wrapOne(pLive, zKey, aDek, aBlob, &nBlob);
  for(i=0; i<4; i++){
    aArg[i].zKey = zKey; aArg[i].aBlob = aBlob; aArg[i].nBlob = nBlob;
    aArg[i].aDek = aDek; aArg[i].nFail = 0;
    assert_int_equal(pthread_create(&aTid[i], 0, unwrapThread, &aArg[i]), 0);
  }
  for(i=0; i<4; i++){
    pthread_join(aTid[i], 0);
    assert_int_equal(aArg[i].nFail, 0);
  }
  /* The child must not write into the parent's TLS stream: it opens its
  ** own; the parent's connection keeps working afterwards. */
  pid = fork();
  assert_true(pid>=0);
  if( pid==0 ){
    uint8_t aChild[32];
    int rc = M->xUnwrap(pLive, zKey, TDE_MECH_AES256_GCM, aBlob, nBlob,
                        aAad, sizeof(aAad), aChild, 32);
    _exit(rc==TDE_OK && memcmp(aChild, aDek, 32)==0 ? 0 : 1);
  }
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status)==0);
  assert_int_equal(M->xUnwrap(pLive, zKey, TDE_MECH_AES256_GCM, aBlob, nBlob,
                              aAad, sizeof(aAad), aOut, 32), TDE_OK);
  assert_memory_equal(aOut, aDek, 32);
}

/* A blob the server wrapped unwraps locally with the key Get fetched (and
** the other way round): one format, whichever side does the GCM. */
static void test_live_allow_get(void **state){
  const char *z = getenv("KMIP_TEST_CONF_GET");
  TdeConfig *pCfg = 0;
  TdeKeystore *pGet = 0;
  char zKey[TDE_KEYID_MAX + 1], zLoc[512];
  uint8_t aDek[32], aOut[32], aBlob[TDE_WRAP_MAX];
  size_t nBlob;
  int bAuto = 0;
  (void)state;
  SKIP_IF_OFFLINE();
  if( z==0 ) skip();
  assert_int_equal(tdeConfigLoad(z, &pCfg), TDE_OK);
  if( M->xOpen(pCfg, 0, &pGet) ) fail_msg("open: %s", tde_last_error());
  assert_int_equal(M->xDescribe(pGet, zLoc, sizeof(zLoc), &bAuto), TDE_OK);
  assert_non_null(strstr(zLoc, "allow_get"));
  assert_int_equal(M->xCurrentKey(pLive, zKey, sizeof(zKey)), TDE_OK);
  tdeRandom(aDek, sizeof(aDek));
  wrapOne(pLive, zKey, aDek, aBlob, &nBlob);
  assert_int_equal(M->xUnwrap(pGet, zKey, TDE_MECH_AES256_GCM, aBlob, nBlob,
                              aAad, sizeof(aAad), aOut, 32), TDE_OK);
  assert_memory_equal(aOut, aDek, 32);
  wrapOne(pGet, zKey, aDek, aBlob, &nBlob);
  assert_int_equal(M->xUnwrap(pLive, zKey, TDE_MECH_AES256_GCM, aBlob, nBlob,
                              aAad, sizeof(aAad), aOut, 32), TDE_OK);
  assert_memory_equal(aOut, aDek, 32);
  M->xClose(pGet);
  tdeConfigFree(pCfg);
}

int main(void){
  const struct CMUnitTest offline[] = {
    cmocka_unit_test(test_config_errors),
  };
  const struct CMUnitTest live[] = {
    cmocka_unit_test(test_live_roundtrip),
    cmocka_unit_test(test_live_rotation),
    cmocka_unit_test(test_live_threads_and_fork),
    cmocka_unit_test(test_live_allow_get),
  };
  int rc = cmocka_run_group_tests_name("kmip offline", offline, 0, 0);
  if( getenv("KMIP_TEST_CONF") ){
    rc |= cmocka_run_group_tests_name("kmip live", live, liveSetup, liveTeardown);
  }
  return rc;
}
