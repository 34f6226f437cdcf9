/*
** Fuzz target for the wallet file parser (src/keystore/wallet.c).  Its
** parser is static, so the target goes through the public path: the input
** becomes a wallet file, and tde_keystore_open() opens it through a
** configuration naming it (keystore = wallet); an accepted wallet is
** listed, described and closed again.
**
** The first input byte picks a mode; the rest is the data.
**   mode 0  the data is the whole wallet file.  Opened without a password,
**           so a password wallet stops before Argon2id (its cost comes
**           from the file: up to 1 GiB and 64 passes, by design).
**   mode 1  the data is the plaintext key list; the target seals it into
**           a valid auto-login wallet (docs/WALLET.md: header, HKDF check
**           value, AES-256-GCM payload under a fixed wallet key), so the
**           key-list parser behind the authentication tag is reached.
** Invariants: a refusal is one of the documented codes and says why; an
** accepted wallet lists exactly as many keys as its status reports, each
** with a printable id of at most TDE_KEYID_MAX bytes.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <unistd.h>
#include <sys/stat.h>

#include "sqlite-tde.h"
#include "tde_int.h"
#include "cipher/cipher.h"

int LLVMFuzzerTestOneInput(const uint8_t *aData, size_t nData);

static char zDir[PATH_MAX - 64], zCfgPath[PATH_MAX], zWalletPath[PATH_MAX];

static void fuzzCleanup(void){
  if( zDir[0] ){
    unlink(zWalletPath);
    unlink(zCfgPath);
    rmdir(zDir);
  }
}

static void fuzzSetup(void){
  const char *zTmp = getenv("TDE_TEST_TMP");
  FILE *f;
  if( zDir[0] ) return;
  umask(077);
  if( zTmp==0 || zTmp[0]==0 ) zTmp = "/tmp";
  mkdir(zTmp, 0700);
  snprintf(zDir, sizeof(zDir), "%s/fuzzwallet-XXXXXX", zTmp);
  if( mkdtemp(zDir)==0 ) abort();
  snprintf(zCfgPath, sizeof(zCfgPath), "%s/tde.conf", zDir);
  snprintf(zWalletPath, sizeof(zWalletPath), "%s/w.tdew", zDir);
  f = fopen(zCfgPath, "w");
  if( !f ) abort();
  fprintf(f, "keystore = wallet\nwallet = w.tdew\n");
  fclose(f);
  atexit(fuzzCleanup);
}

static int fuzzListCb(void *pArg, const char *zKeyId, int64_t created, const char *zStatus){
  size_t n = strlen(zKeyId);
  (void)created;
  if( n==0 || n>TDE_KEYID_MAX ) abort();
  for(size_t i=0; i<n; i++) if( zKeyId[i]<0x21 || zKeyId[i]>0x7e ) abort();
  if( strcmp(zStatus, "ACTIVE")!=0 && strcmp(zStatus, "RETIRED")!=0 ) abort();
  (*(int*)pArg)++;
  return 0;
}

/* Seal a key list into an auto-login wallet image (docs/WALLET.md). */
static uint8_t *fuzzSeal(const uint8_t *aPt, size_t nPt, size_t *pn){
  static const char zCheck[] = "sqlite-tde wallet check v1";
  static const char zPayload[] = "sqlite-tde wallet payload v1";
  uint8_t aW[32], aEnc[32];
  size_t n = 64 + 12 + nPt + 16;
  uint8_t *a = calloc(1, n);
  if( !a ) return 0;
  for(int i=0; i<32; i++) aW[i] = (uint8_t)(0x11 * (i % 15) + 3);
  memcpy(a, "SQLTDEWL", 8);
  tdePut16(a+8, 1);
  a[10] = 2;                                  /* auto-login */
  a[11] = 0;
  tdePut32(a+12, (uint32_t)nPt);
  memcpy(a+16, aW, 32);
  if( tdeHkdf(aW, 32, 0, 0, (const uint8_t*)zCheck, sizeof(zCheck)-1, a+48, 16)!=TDE_OK
   || tdeHkdf(aW, 32, 0, 0, (const uint8_t*)zPayload, sizeof(zPayload)-1, aEnc, 32)!=TDE_OK ) abort();
  memset(a+64, 0x42, 12);                     /* fixed IV: a test image, never a real wallet */
  if( tdeGcmSeal(aEnc, a+64, 12, a, 64, aPt, nPt, a+76, a+76+nPt)!=TDE_OK ) abort();
  *pn = n;
  return a;
}

int LLVMFuzzerTestOneInput(const uint8_t *aData, size_t nData){
  const uint8_t *aFile;
  uint8_t *aSealed = 0;
  size_t nFile;
  FILE *f;
  int rc;
  fuzzSetup();
  if( nData<1 || nData>1000000 ) return 0;
  if( aData[0] % 2==0 ){
    aFile = aData + 1;
    nFile = nData - 1;
  }else{
    aSealed = fuzzSeal(aData + 1, nData - 1, &nFile);
    if( !aSealed ) return 0;
    aFile = aSealed;
  }
  f = fopen(zWalletPath, "wb");
  if( !f ) abort();
  if( nFile && fwrite(aFile, 1, nFile, f)!=nFile ) abort();
  if( fclose(f)!=0 ) abort();
  free(aSealed);

  rc = tde_keystore_open(zCfgPath, NULL);
  if( getenv("TDE_FUZZ_VERBOSE") ) fprintf(stderr, "open: %d %s\n", rc, rc ? tde_last_error() : "");
  if( rc==TDE_OK ){
    tde_keystore_info info = { .nSize = sizeof(tde_keystore_info) };
    int nListed = 0;
    if( tde_keystore_status(zCfgPath, &info)!=TDE_OK ) abort();
    if( tde_keystore_list(zCfgPath, fuzzListCb, &nListed)!=TDE_OK ) abort();
    if( nListed!=info.nKeys || !info.bAutoLogin ) abort();
    if( tde_keystore_close(zCfgPath)!=TDE_OK ) abort();
  }else{
    if( rc!=TDE_FORMAT && rc!=TDE_BADPASSWORD && rc!=TDE_NOKEYSTORE && rc!=TDE_NOMEM && rc!=TDE_IO ){
      abort();
    }
    if( tde_last_error()[0]==0 ) abort();
  }
  return 0;
}

#include "fuzz_replay.h"
