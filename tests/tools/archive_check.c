/*
** Reads archive objects back with the object codec (src/archive/object.h),
** for tests/integration/test_archive.py: every file given is checked whole
** against the primary's public key (base copies: signature, size, SHA-256
** of the copy; segments: records in sequence, chain, signed head) and
** described on one line:
**
**   base HISTID SEQ SIZE CHAIN
**   seg HISTID FIRST LAST RECORDS CHAIN_BEFORE CHAIN_AFTER
**   bad FILE: WHY
**
**   archive_check PUBKEY.pem FILE...      exit 0 when every file checks
*/
#include "archive/object.h"

#include <stdio.h>
#include <stdlib.h>

#include <openssl/evp.h>

static int readFile(const char *zPath, uint8_t **pp, size_t *pn){
  FILE *f = fopen(zPath, "rb");
  long n;
  if( !f ) return -1;
  if( fseek(f, 0, SEEK_END)!=0 || (n = ftell(f))<0 || fseek(f, 0, SEEK_SET)!=0 ){ fclose(f); return -1; }
  *pp = malloc((size_t)n + 1);
  *pn = (size_t)n;
  if( !*pp || fread(*pp, 1, (size_t)n, f)!=(size_t)n ){ fclose(f); free(*pp); return -1; }
  fclose(f);
  return 0;
}

static int checkOne(EVP_PKEY *k, const char *zPath){
  uint8_t *a = 0, aChain[32];
  size_t n = 0;
  char zH[33], zC1[65], zC2[65];
  int rc;
  if( readFile(zPath, &a, &n) ){ printf("bad %s: cannot read\n", zPath); return 1; }
  if( n>=8 && memcmp(a, TDE_ARCH_BASE_MAGIC, 8)==0 ){
    TdeArchBase b;
    rc = tdeArchBaseCheck(a, n, &k, 1, 0, 0, &b);
    if( rc==TDE_OK ){
      tdeHex(b.aHistory, 16, zH);
      tdeHex(b.aChain, 32, zC1);
      printf("base %s %llu %llu %s\n", zH, (unsigned long long)b.seq, (unsigned long long)b.size, zC1);
    }
  }else{
    TdeArchSeg h;
    rc = tdeArchSegCheck(a, n, &k, 1, 0, 0, 0, &h, aChain);
    if( rc==TDE_OK ){
      size_t iOff = 0, nRec;
      int nSeen = 0;
      TdeRec r;
      const uint8_t *pRec;
      while( tdeArchSegNext(a, n, &iOff, &r, &pRec, &nRec)==TDE_OK ) nSeen++;
      tdeHex(h.aHistory, 16, zH);
      tdeHex(h.aChainBefore, 32, zC1);
      tdeHex(aChain, 32, zC2);
      printf("seg %s %llu %llu %d %s %s\n", zH, (unsigned long long)h.first, (unsigned long long)h.last, nSeen,
             zC1, zC2);
    }
  }
  if( rc ) printf("bad %s: %s\n", zPath, tde_last_error());
  free(a);
  return rc ? 1 : 0;
}

int main(int argc, char **argv){
  EVP_PKEY *k = 0;
  int nBad = 0;
  if( argc<2 ){ fprintf(stderr, "usage: archive_check PUBKEY.pem FILE...\n"); return 2; }
  if( tdePubKeyLoad(argv[1], &k) ){ fprintf(stderr, "archive_check: %s\n", tde_last_error()); return 2; }
  for(int i=2; i<argc; i++) nBad += checkOne(k, argv[i]);
  EVP_PKEY_free(k);
  return nBad ? 1 : 0;
}
