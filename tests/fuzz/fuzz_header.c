/*
** Fuzz target for the header slot parser (src/keys/header.c:
** tdeHeaderDecode, tdeHeaderPick).
**
** The first input byte picks a mode; the rest is the data.
**   mode 0  the data is a header region as read from a file (any length up
**           to two slots): tdeHeaderPick must not crash or over-read.
**   mode 1  the data is copied over one slot whose magic, version, slot
**           size and SHA-256 checksum are then made right (a fuzzer cannot
**           forge a checksum), so the keyring parser is reached; the slot
**           goes into position (byte1 & 1) of a region whose other slot is
**           zero.  Whatever tdeHeaderDecode accepts must re-encode to the
**           same bytes before the MAC (it accepts only canonical slots),
**           and tdeHeaderPick must pick that slot.
** Invariants broken call abort().  Build: see fuzz_replay.h and
** tests/CMakeLists.txt (replay main with gcc, libFuzzer with clang).
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sqlite-tde.h"
#include "tde_int.h"
#include "keys/keys.h"
#include "cipher/cipher.h"

int LLVMFuzzerTestOneInput(const uint8_t *aData, size_t nData);

#define FZ_MAC (TDE_SLOT_SIZE - 64)     /* docs/FORMAT.md: MAC, then checksum */
#define FZ_SUM (TDE_SLOT_SIZE - 32)

static void fuzzCheckHeader(const TdeHeader *p){
  if( p->nEntry<0 || p->nEntry>TDE_MAX_ENTRIES ) abort();
  for(int i=0; i<p->nEntry; i++){
    if( strlen(p->aEntry[i].zKeyId)>TDE_KEYID_MAX ) abort();
    if( p->aEntry[i].nBlob>TDE_WRAP_MAX ) abort();
  }
  if( p->cipher!=TDE_CIPHER_AES256GCM_V1 || p->reserve!=TDE_RESERVE_BYTES ) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *aData, size_t nData){
  static uint8_t aRegion[TDE_HEADER_BYTES];
  static uint8_t aRe[TDE_SLOT_SIZE];
  static TdeHeader hdr, hdr2;
  uint8_t mode;
  int iSlot = -1, rc;
  if( nData<1 ) return 0;
  mode = aData[0] % 2;
  aData++; nData--;
  if( mode==0 ){
    uint8_t *a;
    if( nData>TDE_HEADER_BYTES ) nData = TDE_HEADER_BYTES;
    a = malloc(nData ? nData : 1);       /* exact size: ASan sees over-reads */
    if( !a ) return 0;
    if( nData ) memcpy(a, aData, nData);
    rc = tdeHeaderPick(a, nData, &hdr, &iSlot);
    if( rc==TDE_OK ){
      if( iSlot<0 || iSlot>1 || nData<(size_t)(iSlot+1)*TDE_SLOT_SIZE ) abort();
      fuzzCheckHeader(&hdr);
    }else if( rc!=TDE_FORMAT && rc!=TDE_PLAINTEXT && rc!=TDE_NOMEM ){
      abort();
    }
    free(a);
  }else{
    int iPos = nData>0 ? (aData[0] & 1) : 0;
    uint8_t *aSlot = aRegion + iPos*TDE_SLOT_SIZE;
    uint8_t macKey[32];
    memset(aRegion, 0, sizeof(aRegion));
    if( nData>0 ){ aData++; nData--; }
    if( nData>FZ_SUM ) nData = FZ_SUM;
    memcpy(aSlot, aData, nData);
    memcpy(aSlot, TDE_HDR_MAGIC, 8);
    tdePut16(aSlot+8, TDE_FORMAT_VERSION);
    tdePut16(aSlot+10, TDE_SLOT_SIZE);
    if( tdeSha256(aSlot, FZ_SUM, aSlot+FZ_SUM)!=TDE_OK ) abort();
    rc = tdeHeaderDecode(aSlot, &hdr);
    if( rc==TDE_OK ){
      fuzzCheckHeader(&hdr);
      memset(macKey, 0x5a, sizeof(macKey));
      if( tdeHeaderEncode(&hdr, macKey, aRe)!=TDE_OK ) abort();
      if( memcmp(aRe, aSlot, FZ_MAC)!=0 ) abort();          /* canonical only */
      if( tdeHeaderDecode(aRe, &hdr2)!=TDE_OK ) abort();
      if( tdeHeaderCheckMac(aRe, macKey)!=TDE_OK ) abort();
      rc = tdeHeaderPick(aRegion, sizeof(aRegion), &hdr2, &iSlot);
      if( rc!=TDE_OK || iSlot!=iPos || hdr2.seq!=hdr.seq || hdr2.nEntry!=hdr.nEntry ) abort();
    }else if( rc!=TDE_FORMAT ){
      abort();
    }else if( tdeHeaderPick(aRegion, sizeof(aRegion), &hdr2, &iSlot)!=TDE_FORMAT ){
      abort();                                              /* no valid slot at all */
    }
  }
  return 0;
}

#include "fuzz_replay.h"
