/*
** Header slots and keyring: encode, decode, pick the newest valid slot,
** create and unlock data keys through a keystore.  Byte layout is
** docs/FORMAT.md "Header slot"; this file follows it exactly.
**
** Never reads or writes files; never returns an unwrapped data key except
** into the caller's secure buffer; wipes every temporary secret.
*/
#include "tde_int.h"
#include "keys/keys.h"
#include "cipher/cipher.h"

#include <stdio.h>

/* Slot layout offsets. */
#define H_MAGIC     0     /* 8 bytes "SQLT-TDE" */
#define H_VERSION   8     /* u16 format version */
#define H_SLOTSZ    10    /* u16 slot size */
#define H_SEQ       12    /* u64 sequence */
#define H_DBID      20    /* 16 bytes */
#define H_CIPHER    36    /* u16 */
#define H_RESERVE   38    /* u16 */
#define H_CURVER    40    /* u32 */
#define H_FLAGS     44    /* u32 */
#define H_NENTRY    48    /* u16 */
#define H_ENTRIES   50
#define H_FRESH     3968  /* version 2: the freshness area starts here */
#define H_LOGEPOCH  3968  /* u64 log epoch L */
#define H_WALSALT   3976  /* 8 bytes: WAL salts bound to L */
#define H_MAPROOT   3984  /* 16 bytes: page-map root */
#define H_UPCURSOR  4000  /* u64 upgrade cursor */
#define H_ANCHOR    4008  /* u64 anchor counter A (docs/FORMAT.md "External anchor") */
#define H_MAPGEN    4016  /* u64 G: fold generation of the page map in force */
#define H_MAPPAGES  4024  /* u32 n: map pages in force */
#define H_FRESH_END 4028  /* zero from here to H_MAC */
#define H_MAC       (TDE_SLOT_SIZE - 64)   /* HMAC-SHA256 over [0, H_MAC) */
#define H_SUM       (TDE_SLOT_SIZE - 32)   /* SHA-256 over [0, H_SUM) */

static const char zWrapLabel[] = "sqlite-tde v1 dek";   /* 17 bytes */
static const char zMacLabel[]  = "sqlite-tde v1 header mac";

void tdeDbidHex(const uint8_t dbid[16], char *z){
  static const char hex[] = "0123456789abcdef";
  for(int i=0; i<16; i++){ z[2*i] = hex[dbid[i]>>4]; z[2*i+1] = hex[dbid[i]&15]; }
  z[32] = 0;
}

void tdeWrapAad(const uint8_t dbid[16], uint32_t version, uint8_t out[TDE_WRAP_AAD_BYTES]){
  memcpy(out, zWrapLabel, 17);
  memcpy(out+17, dbid, TDE_DBID_BYTES);
  tdePut32(out+17+TDE_DBID_BYTES, version);
}

int tdeHeaderMacKey(const uint8_t dek[32], const uint8_t dbid[16], uint8_t out[32]){
  uint8_t info[sizeof(zMacLabel)-1 + TDE_DBID_BYTES];
  memcpy(info, zMacLabel, sizeof(zMacLabel)-1);
  memcpy(info+sizeof(zMacLabel)-1, dbid, TDE_DBID_BYTES);
  return tdeHkdf(dek, 32, NULL, 0, info, sizeof(info), out, 32);
}

#include <stdatomic.h>
static atomic_int createVersion = TDE_FORMAT_V3;
int tdeCreateVersion(void){ return atomic_load(&createVersion); }
void tdeSetCreateVersion(int v){
  atomic_store(&createVersion, v==TDE_FORMAT_V1 || v==TDE_FORMAT_V2 ? v : TDE_FORMAT_V3);
}

int tdeHeaderEncode(const TdeHeader *p, const uint8_t macKey[32], uint8_t *a){
  size_t off = H_ENTRIES;
  uint16_t version = p->version ? p->version : TDE_FORMAT_V1;
  size_t nKeyring = version>=TDE_FORMAT_V2 ? H_FRESH : H_MAC;   /* keyring must end here */
  int rc;
  if( version<TDE_FORMAT_V1 || version>TDE_FORMAT_V3 ) return tdeErr(TDE_RANGE, "header: bad format version");
  memset(a, 0, TDE_SLOT_SIZE);
  memcpy(a+H_MAGIC, TDE_HDR_MAGIC, 8);
  tdePut16(a+H_VERSION, version);
  tdePut16(a+H_SLOTSZ, TDE_SLOT_SIZE);
  tdePut64(a+H_SEQ, p->seq);
  memcpy(a+H_DBID, p->dbid, TDE_DBID_BYTES);
  tdePut16(a+H_CIPHER, p->cipher);
  tdePut16(a+H_RESERVE, p->reserve);
  tdePut32(a+H_CURVER, p->curVersion);
  tdePut32(a+H_FLAGS, p->flags);
  if( p->nEntry<0 || p->nEntry>TDE_MAX_ENTRIES ) return tdeErr(TDE_RANGE, "header: too many keyring entries");
  tdePut16(a+H_NENTRY, (uint16_t)p->nEntry);
  for(int i=0; i<p->nEntry; i++){
    const TdeWrapEntry *e = &p->aEntry[i];
    size_t nId = strlen(e->zKeyId);
    size_t len = 2 + 4 + 1 + 1 + 1 + nId + 2 + e->nBlob;
    if( nId>TDE_KEYID_MAX || nId>255 || e->nBlob>TDE_WRAP_MAX ) return tdeErr(TDE_RANGE, "header: entry too large");
    if( off+len > nKeyring ) return tdeErr(TDE_RANGE, "header: keyring does not fit in a %d-byte slot", TDE_SLOT_SIZE);
    tdePut16(a+off, (uint16_t)len);
    tdePut32(a+off+2, e->version);
    a[off+6] = e->ksType;
    a[off+7] = e->mech;
    a[off+8] = (uint8_t)nId;
    memcpy(a+off+9, e->zKeyId, nId);
    tdePut16(a+off+9+nId, e->nBlob);
    memcpy(a+off+11+nId, e->aBlob, e->nBlob);
    off += len;
  }
  if( version>=TDE_FORMAT_V2 ){
    tdePut64(a+H_LOGEPOCH, p->logEpoch);
    memcpy(a+H_WALSALT, p->aWalSalt, 8);
    memcpy(a+H_MAPROOT, p->aMapRoot, 16);
    tdePut64(a+H_UPCURSOR, p->upgradeCursor);
    tdePut64(a+H_ANCHOR, p->anchorCounter);
    tdePut64(a+H_MAPGEN, p->mapGen);
    tdePut32(a+H_MAPPAGES, p->mapPages);
  }
  {
    const uint8_t *apPart[1] = { a };
    const size_t anPart[1] = { H_MAC };
    rc = tdeHmacSha256(macKey, 32, apPart, anPart, 1, a+H_MAC);
    if( rc ) return rc;
  }
  return tdeSha256(a, H_SUM, a+H_SUM);
}

int tdeHeaderDecode(const uint8_t *a, TdeHeader *p){
  uint8_t sum[32];
  size_t off = H_ENTRIES;
  size_t nKeyring;
  uint16_t version;
  int rc;
  if( memcmp(a+H_MAGIC, TDE_HDR_MAGIC, 8)!=0 ) return tdeErr(TDE_FORMAT, "header slot: bad magic");
  rc = tdeSha256(a, H_SUM, sum);
  if( rc ) return rc;
  if( !tdeCtEqual(sum, a+H_SUM, 32) ) return tdeErr(TDE_FORMAT, "header slot: checksum mismatch");
  version = tdeGet16(a+H_VERSION);
  if( version<TDE_FORMAT_V1 || version>TDE_FORMAT_V3 ){
    return tdeErr(TDE_FORMAT, "header slot: format version %u not supported (this build reads 1 to %d)",
                  version, TDE_FORMAT_V3);
  }
  nKeyring = version>=TDE_FORMAT_V2 ? H_FRESH : H_MAC;
  if( tdeGet16(a+H_SLOTSZ)!=TDE_SLOT_SIZE ) return tdeErr(TDE_FORMAT, "header slot: bad slot size");
  memset(p, 0, sizeof(*p));
  p->seq = tdeGet64(a+H_SEQ);
  memcpy(p->dbid, a+H_DBID, TDE_DBID_BYTES);
  p->cipher = tdeGet16(a+H_CIPHER);
  p->reserve = tdeGet16(a+H_RESERVE);
  p->curVersion = tdeGet32(a+H_CURVER);
  p->flags = tdeGet32(a+H_FLAGS);
  p->version = version;
  if( version>=TDE_FORMAT_V2 ){
    p->logEpoch = tdeGet64(a+H_LOGEPOCH);
    memcpy(p->aWalSalt, a+H_WALSALT, 8);
    memcpy(p->aMapRoot, a+H_MAPROOT, 16);
    p->upgradeCursor = tdeGet64(a+H_UPCURSOR);
    p->anchorCounter = tdeGet64(a+H_ANCHOR);
    p->mapGen = tdeGet64(a+H_MAPGEN);
    p->mapPages = tdeGet32(a+H_MAPPAGES);
    for(size_t i=H_FRESH_END; i<H_MAC; i++){
      if( a[i] ) return tdeErr(TDE_FORMAT, "header slot: non-zero reserved bytes in the freshness area");
    }
  }
  /* No flag is defined: a flag this build does not know may change how the
  ** slot is to be read, so the slot is refused rather than read without it. */
  if( p->flags!=0 ) return tdeErr(TDE_FORMAT, "header slot: flags 0x%08x not supported (this build knows none)", p->flags);
  if( p->cipher!=TDE_CIPHER_AES256GCM_V1 ) return tdeErr(TDE_FORMAT, "header slot: cipher %u not supported", p->cipher);
  if( p->reserve!=TDE_RESERVE_BYTES ) return tdeErr(TDE_FORMAT, "header slot: reserve %u not supported", p->reserve);
  p->nEntry = tdeGet16(a+H_NENTRY);
  if( p->nEntry>TDE_MAX_ENTRIES ) return tdeErr(TDE_FORMAT, "header slot: %d keyring entries (max %d)", p->nEntry, TDE_MAX_ENTRIES);
  for(int i=0; i<p->nEntry; i++){
    TdeWrapEntry *e = &p->aEntry[i];
    size_t len, nId, nBlob;
    if( off+11 > nKeyring ) return tdeErr(TDE_FORMAT, "header slot: keyring entry %d truncated", i);
    len = tdeGet16(a+off);
    nId = a[off+8];
    if( len<11 || off+len>nKeyring || 11+nId>len || nId>TDE_KEYID_MAX ){
      return tdeErr(TDE_FORMAT, "header slot: keyring entry %d malformed", i);
    }
    nBlob = tdeGet16(a+off+9+nId);
    if( 11+nId+nBlob!=len || nBlob>TDE_WRAP_MAX ) return tdeErr(TDE_FORMAT, "header slot: keyring entry %d malformed", i);
    e->version = tdeGet32(a+off+2);
    e->ksType = a[off+6];
    e->mech = a[off+7];
    memcpy(e->zKeyId, a+off+9, nId);
    e->zKeyId[nId] = 0;
    if( strlen(e->zKeyId)!=nId ) return tdeErr(TDE_FORMAT, "header slot: keyring entry %d has a NUL in its key id", i);
    e->nBlob = (uint16_t)nBlob;
    memcpy(e->aBlob, a+off+11+nId, nBlob);
    off += len;
  }
  for(size_t i=off; i<nKeyring; i++){
    if( a[i] ) return tdeErr(TDE_FORMAT, "header slot: non-zero bytes after the keyring");
  }
  return TDE_OK;
}

int tdeHeaderCheckMac(const uint8_t *a, const uint8_t macKey[32]){
  uint8_t mac[32];
  const uint8_t *apPart[1] = { a };
  const size_t anPart[1] = { H_MAC };
  int rc = tdeHmacSha256(macKey, 32, apPart, anPart, 1, mac);
  if( rc ) return rc;
  rc = tdeCtEqual(mac, a+H_MAC, 32) ? TDE_OK : tdeErr(TDE_AUTH, "header MAC does not verify: header tampered with");
  tdeWipe(mac, sizeof(mac));
  return rc;
}

/* Version 2: epoch, page-map and anchor updates keep the sequence number
** and each advance one counter of the freshness area (copying the others),
** so on equal sequence numbers the larger (L, G, A) is the newer. */
int tdeHeaderNewer(const TdeHeader *a, const TdeHeader *b){
  if( a->seq!=b->seq ) return a->seq > b->seq;
  if( a->version<TDE_FORMAT_V2 || b->version<TDE_FORMAT_V2 ) return 0;
  if( a->logEpoch!=b->logEpoch ) return a->logEpoch > b->logEpoch;
  if( a->mapGen!=b->mapGen ) return a->mapGen > b->mapGen;
  return a->anchorCounter > b->anchorCounter;
}

int tdeHeaderPick(const uint8_t *aRegion, size_t nRegion, TdeHeader *p, int *piSlot){
  TdeHeader *tmp;
  int best = -1;
  int rc = TDE_OK;
  if( nRegion>=16 && memcmp(aRegion, "SQLite format 3", 16)==0 ){
    return tdeErr(TDE_PLAINTEXT, "this is a plaintext SQLite database; convert it with `sqlite-tde encrypt`");
  }
  tmp = sqlite3_malloc(sizeof(*tmp));
  if( !tmp ) return TDE_NOMEM;
  for(int i=0; i<2; i++){
    if( nRegion < (size_t)(i+1)*TDE_SLOT_SIZE ) break;
    if( tdeHeaderDecode(aRegion + i*TDE_SLOT_SIZE, tmp)!=TDE_OK ) continue;
    if( best<0 || tdeHeaderNewer(tmp, p) ){
      memcpy(p, tmp, sizeof(*tmp));
      best = i;
    }
  }
  sqlite3_free(tmp);
  if( best<0 ){
    rc = tdeErr(TDE_FORMAT, "no valid sqlite-tde header (not an encrypted database, or both header slots damaged)");
  }else{
    tdeErrClear();
    *piSlot = best;
  }
  return rc;
}

int tdeHeaderLayout(const uint8_t *aRegion, size_t nRegion, uint32_t pgsz, TdeLayout *pL){
  TdeHeader *h = sqlite3_malloc(sizeof(*h));
  int iSlot = 0, rc;
  if( !h ) return TDE_NOMEM;
  rc = tdeHeaderPick(aRegion, nRegion, h, &iSlot);
  if( rc==TDE_OK ){
    pL->version = h->version ? h->version : TDE_FORMAT_V1;
    pL->pgsz = pgsz;
    pL->cursor = h->upgradeCursor;
  }
  sqlite3_free(h);
  return rc;
}

int tdeKeyringAddWrap(TdeKeystore *ks, TdeHeader *p, uint32_t version,
                      const uint8_t *aDek, const char *zKeyId){
  uint8_t aad[TDE_WRAP_AAD_BYTES];
  TdeWrapEntry e;
  size_t nOut = 0;
  int rc, i;
  memset(&e, 0, sizeof(e));
  if( strlen(zKeyId)>TDE_KEYID_MAX ) return tdeErr(TDE_RANGE, "master key id too long");
  tdeWrapAad(p->dbid, version, aad);
  rc = ks->pMethods->xWrap(ks, zKeyId, aDek, 32, aad, sizeof(aad), e.aBlob, sizeof(e.aBlob), &nOut, &e.mech);
  if( rc ) return rc;
  e.version = version;
  e.ksType = ks->pMethods->typeId;
  e.nBlob = (uint16_t)nOut;
  memcpy(e.zKeyId, zKeyId, strlen(zKeyId)+1);
  for(i=0; i<p->nEntry; i++){
    if( p->aEntry[i].version==version && strcmp(p->aEntry[i].zKeyId, zKeyId)==0 ) break;
  }
  if( i==p->nEntry ){
    if( p->nEntry>=TDE_MAX_ENTRIES ) return tdeErr(TDE_RANGE, "keyring full (%d entries)", TDE_MAX_ENTRIES);
    p->nEntry++;
  }
  p->aEntry[i] = e;
  return TDE_OK;
}

int tdeKeyringCreate(TdeKeystore *ks, TdeHeader *p, uint8_t *aDek){
  char zKeyId[TDE_KEYID_MAX+1];
  int rc;
  memset(p, 0, sizeof(*p));
  p->seq = 1;
  p->version = (uint16_t)tdeCreateVersion();
  if( p->version>=TDE_FORMAT_V2 ) p->logEpoch = 1;
  p->cipher = TDE_CIPHER_AES256GCM_V1;
  p->reserve = TDE_RESERVE_BYTES;
  p->curVersion = 1;
  rc = tdeRandom(p->dbid, sizeof(p->dbid));
  if( rc==TDE_OK ) rc = tdeRandom(aDek, 32);
  if( rc==TDE_OK ) rc = ks->pMethods->xCurrentKey(ks, zKeyId, sizeof(zKeyId));
  if( rc==TDE_OK ) rc = tdeKeyringAddWrap(ks, p, 1, aDek, zKeyId);
  if( rc ) tdeWipe(aDek, 32);
  return rc;
}

int tdeKeyringUnlock(TdeKeystore *ks, const TdeHeader *p, uint32_t version, uint8_t *aDek){
  uint8_t aad[TDE_WRAP_AAD_BYTES];
  char zIds[512];
  size_t nIds = 0;
  int rc = TDE_NOKEY;
  int nTried = 0;
  char zDb[33];
  zIds[0] = 0;
  tdeWrapAad(p->dbid, version, aad);
  for(int i=0; i<p->nEntry; i++){
    const TdeWrapEntry *e = &p->aEntry[i];
    if( e->version!=version ) continue;
    if( nIds+strlen(e->zKeyId)+3 < sizeof(zIds) ){
      nIds += (size_t)snprintf(zIds+nIds, sizeof(zIds)-nIds, "%s%s", nIds ? ", " : "", e->zKeyId);
    }
    if( e->ksType!=ks->pMethods->typeId ) continue;
    if( !ks->pMethods->xHasKey(ks, e->zKeyId) ) continue;
    nTried++;
    rc = ks->pMethods->xUnwrap(ks, e->zKeyId, e->mech, e->aBlob, e->nBlob, aad, sizeof(aad), aDek, 32);
    if( rc==TDE_OK ) return TDE_OK;
  }
  tdeDbidHex(p->dbid, zDb);
  if( nTried==0 ){
    return tdeErr(TDE_NOKEY, "database %s: data key v%u is wrapped by master key(s) [%s], none of which is in the %s keystore",
                  zDb, version, zIds[0] ? zIds : "none", ks->pMethods->zName);
  }
  return tdeErr(rc==TDE_AUTH ? TDE_AUTH : rc,
                "database %s: data key v%u did not unwrap with master key(s) [%s]: wrapped key damaged or tampered with",
                zDb, version, zIds);
}
