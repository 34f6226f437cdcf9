/*
** Fuzz target for page decryption (src/cipher/page.c: tdePageOpen) with
** fixed data keys.  A page that does not authenticate must never be
** returned: tdePageOpen must fail and leave the output wiped.
**
** The first input byte picks a mode; the rest is the data.
**   mode 0  arbitrary input: byte 1 is the AAD length, then the AAD, the
**           48-byte trailer (its key version forced to the cipher's, so
**           the tag check is reached), then the ciphertext.  Opening must
**           fail (forging an AES-GCM tag is not something a fuzzer does).
**   mode 1  a real sealed page: the data up to 4096 bytes is the
**           plaintext (page number AAD from its first bytes), sealed with
**           tdePageSeal; then the last 8 input bytes describe up to two
**           byte edits (offset, xor) of ciphertext+trailer+AAD.  With no
**           effective edit it must open to the same plaintext; with any
**           it must fail with TDE_AUTH or TDE_NOKEY and a wiped output.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sqlite-tde.h"
#include "tde_int.h"
#include "cipher/cipher.h"

int LLVMFuzzerTestOneInput(const uint8_t *aData, size_t nData);

/* Two ciphers under different data keys: pOpenOnly (mode 0) never seals
** anything, so no authentic page exists under its key and any success is
** a forgery; pCipher (mode 1) seals real pages, which the fuzzer can learn
** (it sees comparisons in instrumented code) and must not be able to
** replay into mode 0. */
static TdePageCipher *pCipher;
static TdePageCipher *pOpenOnly;

static void fuzzWiped(const uint8_t *a, size_t n){
  for(size_t i=0; i<n; i++) if( a[i] ) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *aData, size_t nData){
  static uint8_t aPt[65536], aCt[65536], aBuf[65536 + TDE_TRAILER_SIZE + 256];
  uint8_t trailer[TDE_TRAILER_SIZE];
  int rc;
  if( pCipher==0 ){
    uint8_t dek[32];
    for(int i=0; i<32; i++) dek[i] = (uint8_t)(0xA0 + i);
    if( tdePageCipherNew(dek, 7, &pCipher)!=TDE_OK ) abort();
    for(int i=0; i<32; i++) dek[i] = (uint8_t)(0x50 + 3*i);
    if( tdePageCipherNew(dek, 7, &pOpenOnly)!=TDE_OK ) abort();
  }
  if( nData<2 ) return 0;
  if( aData[0] % 2==0 ){
    size_t nAad = aData[1], nCt;
    const uint8_t *z = aData + 2;
    size_t n = nData - 2;
    if( n<nAad + TDE_TRAILER_SIZE ) return 0;
    nCt = n - nAad - TDE_TRAILER_SIZE;
    if( nCt>sizeof(aCt) ) return 0;
    memcpy(trailer, z + nAad, TDE_TRAILER_SIZE);
    trailer[40] = 0; trailer[41] = 0; trailer[42] = 0; trailer[43] = 7;   /* key version 7 */
    memcpy(aCt, z + nAad + TDE_TRAILER_SIZE, nCt);
    memset(aPt, 0x77, nCt);
    rc = tdePageOpen(pOpenOnly, nAad ? z : NULL, nAad, aCt, nCt, trailer, aPt);
    if( rc==TDE_OK ) abort();                  /* unauthenticated input accepted */
    fuzzWiped(aPt, nCt);
    /* In place, as the VFS does it (pt aliases ct). */
    rc = tdePageOpen(pOpenOnly, nAad ? z : NULL, nAad, aCt, nCt, trailer, aCt);
    if( rc==TDE_OK ) abort();
    fuzzWiped(aCt, nCt);
  }else{
    const uint8_t *z = aData + 1;
    size_t n = nData - 1, nPt, nAad = 4, nTot;
    uint8_t aad[4] = {0, 0, 0, 1};
    uint8_t edit[8];
    int bChanged = 0;
    memset(edit, 0, sizeof(edit));
    if( n>=8 ){ memcpy(edit, z + n - 8, 8); n -= 8; }
    nPt = n>4096 ? 4096 : n;
    if( nPt>=4 ) memcpy(aad, z, 4);
    if( tdePageSeal(pCipher, aad, nAad, z, nPt, aCt, trailer)!=TDE_OK ) abort();
    /* One buffer: ciphertext | trailer | aad, edited in place. */
    memcpy(aBuf, aCt, nPt);
    memcpy(aBuf + nPt, trailer, TDE_TRAILER_SIZE);
    memcpy(aBuf + nPt + TDE_TRAILER_SIZE, aad, nAad);
    nTot = nPt + TDE_TRAILER_SIZE + nAad;
    for(int k=0; k<2; k++){
      size_t iOff = (((size_t)edit[4*k] << 16) | ((size_t)edit[4*k+1] << 8) | edit[4*k+2]) % nTot;
      uint8_t x = edit[4*k+3];
      aBuf[iOff] ^= x;
    }
    bChanged = memcmp(aBuf, aCt, nPt)!=0 || memcmp(aBuf + nPt, trailer, TDE_TRAILER_SIZE)!=0
            || memcmp(aBuf + nPt + TDE_TRAILER_SIZE, aad, nAad)!=0;
    memset(aPt, 0x77, nPt);
    rc = tdePageOpen(pCipher, aBuf + nPt + TDE_TRAILER_SIZE, nAad, aBuf, nPt, aBuf + nPt, aPt);
    if( bChanged ){
      if( rc!=TDE_AUTH && rc!=TDE_NOKEY ) abort();
      fuzzWiped(aPt, nPt);
    }else{
      if( rc!=TDE_OK || memcmp(aPt, z, nPt)!=0 ) abort();
    }
  }
  return 0;
}

#include "fuzz_replay.h"
