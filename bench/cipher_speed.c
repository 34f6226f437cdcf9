/*
** sqlite-tde-cipher-speed: what the AEAD itself costs per page on this
** machine, the figures behind docs/PERFORMANCE.md "The AEAD".
**
**   sqlite-tde-cipher-speed [--pages N] [--repeats R]
**
** For page sizes 1024, 4096 and 65536 it times N seals of one page (with
** the 44-byte associated data of a page trailer) and prints, per case, the
** median of R runs in microseconds per page:
**   tde-seal, tde-open  the shim's own page cipher (src/cipher/page.c: one
**                       keyed AES-256-GCM context reused per session)
**   gcm-reuse           AES-256-GCM, one context, a new IV per page
**   gcm-new             AES-256-GCM, a new keyed context per page
**   chacha-reuse        ChaCha20-Poly1305, one context, a new IV per page
**   ctr-reuse           AES-256-CTR alone (no authentication: the share of
**                       GCM's cost that is GHASH)
** and HMAC-SHA256 of a 104-byte WAL frame MAC message (keyed context
** re-initialised per MAC, as src/cipher/aead.c does).
**
** Every figure is a time, so it depends on the machine's load: the output
** names the load average.  Not a test: nothing here asserts a speed.
*/
#include "tde_int.h"
#include "cipher/cipher.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_PAGE 65536
#define AAD_BYTES 44

static double nowSec(void){
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void die(const char *z){
  fprintf(stderr, "sqlite-tde-cipher-speed: %s\n", z);
  exit(1);
}

static int cmpDouble(const void *a, const void *b){
  double x = *(const double*)a, y = *(const double*)b;
  return x<y ? -1 : x>y;
}

static uint8_t aPage[MAX_PAGE], aOut[MAX_PAGE], aAad[AAD_BYTES];

/* One run of an EVP AEAD or CTR over nPages pages of nPage bytes; returns
** microseconds per page.  bNew: a new keyed context per page. */
static double evpRun(const char *zAlg, int bAead, int bNew, int nPage, int nPages){
  static const uint8_t aKey[32] = {7};
  uint8_t aIv[16] = {0}, aTag[16];
  EVP_CIPHER *pAlg = EVP_CIPHER_fetch(NULL, zAlg, NULL);
  EVP_CIPHER_CTX *pCtx = EVP_CIPHER_CTX_new();
  int n = 0;
  double t0;
  if( !pAlg || !pCtx || EVP_EncryptInit_ex(pCtx, pAlg, NULL, aKey, NULL)!=1 ) die(zAlg);
  t0 = nowSec();
  for(int i=0; i<nPages; i++){
    memcpy(aIv + 4, &i, sizeof(i));
    if( bNew ){
      EVP_CIPHER_CTX_free(pCtx);
      pCtx = EVP_CIPHER_CTX_new();
      if( !pCtx || EVP_EncryptInit_ex(pCtx, pAlg, NULL, aKey, aIv)!=1 ) die(zAlg);
    }else if( EVP_EncryptInit_ex(pCtx, NULL, NULL, NULL, aIv)!=1 ){
      die(zAlg);
    }
    if( (bAead && EVP_EncryptUpdate(pCtx, NULL, &n, aAad, AAD_BYTES)!=1)
     || EVP_EncryptUpdate(pCtx, aOut, &n, aPage, nPage)!=1
     || EVP_EncryptFinal_ex(pCtx, aOut + n, &n)!=1
     || (bAead && EVP_CIPHER_CTX_ctrl(pCtx, EVP_CTRL_AEAD_GET_TAG, 16, aTag)!=1) ){
      die(zAlg);
    }
  }
  t0 = (nowSec() - t0) * 1e6 / nPages;
  EVP_CIPHER_CTX_free(pCtx);
  EVP_CIPHER_free(pAlg);
  return t0;
}

/* The shim's page cipher: seals (bOpen 0) or opens (bOpen 1). */
static double tdeRun(int bOpen, int nPage, int nPages){
  static const uint8_t aDek[32] = {9};
  uint8_t aTrl[TDE_TRAILER_SIZE];
  TdePageCipher *p = NULL;
  double t0;
  int n = nPage - TDE_TRAILER_SIZE;
  if( tdePageCipherNew(aDek, 1, &p)!=TDE_OK ) die("tdePageCipherNew");
  if( tdePageSeal(p, aAad, AAD_BYTES, aPage, (size_t)n, aOut, aTrl)!=TDE_OK ) die("seal");
  t0 = nowSec();
  for(int i=0; i<nPages; i++){
    int rc = bOpen ? tdePageOpen(p, aAad, AAD_BYTES, aOut, (size_t)n, aTrl, aPage)
                   : tdePageSeal(p, aAad, AAD_BYTES, aPage, (size_t)n, aOut, aTrl);
    if( rc!=TDE_OK ) die(bOpen ? "open" : "seal");
    if( bOpen ) memcpy(aPage, aOut, (size_t)n);   /* the open wrote plaintext over the page */
  }
  t0 = (nowSec() - t0) * 1e6 / nPages;
  tdePageCipherFree(p);
  return t0;
}

static double hmacRun(int nMacs){
  static const uint8_t aKey[32] = {5};
  uint8_t aMsg[104] = {1}, aMac[32];
  size_t n = 0;
  EVP_MAC *pMac = EVP_MAC_fetch(NULL, "HMAC", NULL);
  EVP_MAC_CTX *pCtx = pMac ? EVP_MAC_CTX_new(pMac) : NULL;
  OSSL_PARAM aParam[2];
  double t0;
  aParam[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char*)"SHA256", 0);
  aParam[1] = OSSL_PARAM_construct_end();
  if( !pCtx || EVP_MAC_init(pCtx, aKey, sizeof(aKey), aParam)!=1 ) die("HMAC");
  t0 = nowSec();
  for(int i=0; i<nMacs; i++){
    aMsg[0] = (uint8_t)i;
    if( EVP_MAC_init(pCtx, NULL, 0, NULL)!=1 || EVP_MAC_update(pCtx, aMsg, sizeof(aMsg))!=1
     || EVP_MAC_final(pCtx, aMac, &n, sizeof(aMac))!=1 ) die("HMAC");
  }
  t0 = (nowSec() - t0) * 1e6 / nMacs;
  EVP_MAC_CTX_free(pCtx);
  EVP_MAC_free(pMac);
  return t0;
}

enum { C_TDE_SEAL, C_TDE_OPEN, C_GCM_REUSE, C_GCM_NEW, C_CHACHA, C_CTR, C_N };
static const char *const azCase[C_N] = {
  "tde-seal", "tde-open", "gcm-reuse", "gcm-new", "chacha-reuse", "ctr-reuse"
};

static double runCase(int c, int nPage, int nPages){
  switch( c ){
    case C_TDE_SEAL:  return tdeRun(0, nPage, nPages);
    case C_TDE_OPEN:  return tdeRun(1, nPage, nPages);
    case C_GCM_REUSE: return evpRun("AES-256-GCM", 1, 0, nPage, nPages);
    case C_GCM_NEW:   return evpRun("AES-256-GCM", 1, 1, nPage, nPages);
    case C_CHACHA:    return evpRun("ChaCha20-Poly1305", 1, 0, nPage, nPages);
    default:          return evpRun("AES-256-CTR", 0, 0, nPage, nPages);
  }
}

int main(int argc, char **argv){
  static const int aSize[] = { 1024, 4096, 65536 };
  int nPages = 20000, nRep = 5;
  double aT[64], aLoad[3] = {0, 0, 0};
  for(int i=1; i<argc; i++){
    if( strcmp(argv[i], "--pages")==0 && i+1<argc ) nPages = atoi(argv[++i]);
    else if( strcmp(argv[i], "--repeats")==0 && i+1<argc ) nRep = atoi(argv[++i]);
    else die("usage: sqlite-tde-cipher-speed [--pages N] [--repeats R]");
  }
  if( nPages<1 || nRep<1 || nRep>64 ) die("--pages >= 1, --repeats 1..64");
  if( getloadavg(aLoad, 3)<0 ) aLoad[0] = -1;
  printf("# %s; %d pages per run, median of %d runs; load average %.2f %.2f %.2f\n",
         OpenSSL_version(OPENSSL_VERSION), nPages, nRep, aLoad[0], aLoad[1], aLoad[2]);
  printf("%-14s %10s %10s %10s\n", "us per page", "1024", "4096", "65536");
  for(int c=0; c<C_N; c++){
    printf("%-14s", azCase[c]);
    for(int s=0; s<3; s++){
      int n = aSize[s]==65536 ? nPages/16 + 1 : nPages;
      for(int r=0; r<nRep; r++) aT[r] = runCase(c, aSize[s], n);
      qsort(aT, (size_t)nRep, sizeof(double), cmpDouble);
      printf(" %10.3f", aT[nRep/2]);
    }
    printf("\n");
  }
  for(int r=0; r<nRep; r++) aT[r] = hmacRun(nPages);
  qsort(aT, (size_t)nRep, sizeof(double), cmpDouble);
  printf("%-14s %10.3f us per 104-byte WAL frame MAC message\n", "hmac-sha256", aT[nRep/2]);
  return 0;
}
