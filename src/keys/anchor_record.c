/*
** Freshness anchor records: build, MAC, check, compare (keys/anchor_record.h,
** docs/FORMAT.md "External anchor").  The store that keeps them is
** reached through keystore/anchor_store.c; the VFS calls only this file.
*/
#include "tde_int.h"
#include "keys/anchor_record.h"
#include "cipher/cipher.h"

#include <stdio.h>

#define A_MAGIC   "TDEANC01"
#define A_DBID    8
#define A_COUNTER 24
#define A_EPOCH   32
#define A_SEQ     40
#define A_VERSION 48
#define A_ZERO    52
#define A_TIME    56
#define A_MAC     64

static const char zAnchorLabel[] = "sqlite-tde v2 anchor mac";

void tdeAnchorName(const uint8_t dbid[TDE_DBID_BYTES], char zName[TDE_ANCHOR_NAME_MAX]){
  char zHex[2*TDE_DBID_BYTES + 1];
  tdeDbidHex(dbid, zHex);
  snprintf(zName, TDE_ANCHOR_NAME_MAX, "sqlite-tde-anchor-%s", zHex);
}

/* HMAC-SHA256 of bytes [0, A_MAC) under HKDF(dek, label || dbid). */
static int anchorMac(const uint8_t *a, const uint8_t *aDek, uint8_t mac[32]){
  uint8_t info[sizeof(zAnchorLabel)-1 + TDE_DBID_BYTES];
  uint8_t key[32];
  const uint8_t *apPart[1] = { a };
  const size_t anPart[1] = { A_MAC };
  int rc;
  memcpy(info, zAnchorLabel, sizeof(zAnchorLabel)-1);
  memcpy(info+sizeof(zAnchorLabel)-1, a+A_DBID, TDE_DBID_BYTES);
  rc = tdeHkdf(aDek, 32, NULL, 0, info, sizeof(info), key, sizeof(key));
  if( rc==TDE_OK ) rc = tdeHmacSha256(key, sizeof(key), apPart, anPart, 1, mac);
  tdeWipe(key, sizeof(key));
  return rc;
}

int tdeAnchorIsStale(const TdeAnchorRec *r, uint64_t A, uint64_t L, uint64_t seq){
  if( A<r->A ) return 1;
  return A==r->A && (L<r->L || seq<r->seq);
}

int tdeAnchorFetch(const TdeConfig *cfg, TdeKeystore *ks, const uint8_t dbid[TDE_DBID_BYTES],
                   const uint8_t *(*xKey)(void *, uint32_t), void *pArg,
                   TdeAnchorRec *pRec, int *pbFound){
  char zName[TDE_ANCHOR_NAME_MAX];
  uint8_t a[TDE_ANCHOR_VALUE_MAX];
  uint8_t mac[32];
  const uint8_t *aDek;
  size_t n = 0;
  int rc, i;

  *pbFound = 0;
  memset(pRec, 0, sizeof(*pRec));
  tdeAnchorName(dbid, zName);
  rc = tdeAnchorStoreGet(cfg, ks, zName, a, sizeof(a), &n);
  if( rc==TDE_NOTFOUND ){ tdeErrClear(); return TDE_OK; }
  if( rc ) return rc;
  *pbFound = 1;
  if( n!=TDE_ANCHOR_REC_BYTES || memcmp(a, A_MAGIC, 8)!=0 ){
    return tdeErr(TDE_AUTH, "anchor record %s is not an anchor record (%zu bytes)", zName, n);
  }
  if( memcmp(a+A_DBID, dbid, TDE_DBID_BYTES)!=0 ){
    return tdeErr(TDE_AUTH, "anchor record %s names another database", zName);
  }
  for(i=A_ZERO; i<A_TIME; i++){
    if( a[i] ) return tdeErr(TDE_AUTH, "anchor record %s: non-zero reserved bytes", zName);
  }
  pRec->version = tdeGet32(a+A_VERSION);
  aDek = xKey(pArg, pRec->version);
  if( aDek==0 ){
    return tdeErr(TDE_AUTH, "anchor record %s is MACed by data-key version %u, which this "
                  "database does not hold (a forged record, or one older than a finished rekey)",
                  zName, pRec->version);
  }
  rc = anchorMac(a, aDek, mac);
  if( rc ) return rc;
  if( !tdeCtEqual(mac, a+A_MAC, 32) ){
    tdeWipe(mac, sizeof(mac));
    return tdeErr(TDE_AUTH, "anchor record %s does not authenticate: it was forged or "
                  "modified (or belongs to another copy of the keys)", zName);
  }
  tdeWipe(mac, sizeof(mac));
  memcpy(pRec->dbid, dbid, TDE_DBID_BYTES);
  pRec->A = tdeGet64(a+A_COUNTER);
  pRec->L = tdeGet64(a+A_EPOCH);
  pRec->seq = tdeGet64(a+A_SEQ);
  pRec->t = (int64_t)tdeGet64(a+A_TIME);
  return TDE_OK;
}

int tdeAnchorPut(const TdeConfig *cfg, TdeKeystore *ks, const TdeAnchorRec *r, const uint8_t *aDek){
  char zName[TDE_ANCHOR_NAME_MAX];
  uint8_t a[TDE_ANCHOR_REC_BYTES];
  int rc;
  memset(a, 0, sizeof(a));
  memcpy(a, A_MAGIC, 8);
  memcpy(a+A_DBID, r->dbid, TDE_DBID_BYTES);
  tdePut64(a+A_COUNTER, r->A);
  tdePut64(a+A_EPOCH, r->L);
  tdePut64(a+A_SEQ, r->seq);
  tdePut32(a+A_VERSION, r->version);
  tdePut64(a+A_TIME, (uint64_t)r->t);
  rc = anchorMac(a, aDek, a+A_MAC);
  if( rc ) return rc;
  tdeAnchorName(r->dbid, zName);
  return tdeAnchorStoreSet(cfg, ks, zName, a, sizeof(a));
}

/* ---- place records -------------------------------------------------------- */

#define P_MAGIC   "TDEPLC01"
#define P_DBID    8
#define P_PATH    24        /* SHA-256 of the canonical path */
#define P_TIME    56
#define P_ZERO    64

/* "sqlite-tde-place-" and the first 16 bytes of SHA-256(zPlace) in hex. */
static int placeName(const char *zPlace, uint8_t aHash[32], char zName[TDE_ANCHOR_NAME_MAX]){
  char zHex[2*TDE_DBID_BYTES + 1];
  int rc = tdeSha256((const uint8_t *)zPlace, strlen(zPlace), aHash);
  if( rc ) return rc;
  tdeDbidHex(aHash, zHex);
  snprintf(zName, TDE_ANCHOR_NAME_MAX, "sqlite-tde-place-%s", zHex);
  return TDE_OK;
}

int tdePlaceFetch(const TdeConfig *cfg, TdeKeystore *ks, const char *zPlace,
                  uint8_t aDbid[TDE_DBID_BYTES], int *pbFound){
  char zName[TDE_ANCHOR_NAME_MAX];
  uint8_t a[TDE_ANCHOR_VALUE_MAX], aHash[32];
  size_t n = 0;
  int rc;
  *pbFound = 0;
  rc = placeName(zPlace, aHash, zName);
  if( rc ) return rc;
  rc = tdeAnchorStoreGet(cfg, ks, zName, a, sizeof(a), &n);
  if( rc==TDE_NOTFOUND ){ tdeErrClear(); return TDE_OK; }
  if( rc ) return rc;
  *pbFound = 1;
  if( n!=TDE_PLACE_REC_BYTES || memcmp(a, P_MAGIC, 8)!=0 || memcmp(a+P_PATH, aHash, 32)!=0 ){
    return tdeErr(TDE_AUTH, "anchor store entry %s is not the place record of %s", zName, zPlace);
  }
  for(int i=P_ZERO; i<TDE_PLACE_REC_BYTES; i++){
    if( a[i] ) return tdeErr(TDE_AUTH, "place record %s: non-zero reserved bytes", zName);
  }
  memcpy(aDbid, a+P_DBID, TDE_DBID_BYTES);
  return TDE_OK;
}

int tdePlacePut(const TdeConfig *cfg, TdeKeystore *ks, const char *zPlace,
                const uint8_t dbid[TDE_DBID_BYTES], int64_t t){
  char zName[TDE_ANCHOR_NAME_MAX];
  uint8_t a[TDE_PLACE_REC_BYTES];
  int rc;
  memset(a, 0, sizeof(a));
  memcpy(a, P_MAGIC, 8);
  memcpy(a+P_DBID, dbid, TDE_DBID_BYTES);
  rc = placeName(zPlace, a+P_PATH, zName);
  if( rc ) return rc;
  tdePut64(a+P_TIME, (uint64_t)t);
  return tdeAnchorStoreSet(cfg, ks, zName, a, sizeof(a));
}
