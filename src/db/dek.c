/*
** Data keys of an open database, by version, and the choice of cipher for
** a page, block or frame.  A database normally has one data-key version;
** during a rekey it has two (pages carry the version that sealed them in
** their trailer), so every handle opens pages with the version the trailer
** names and seals with the header's current version.
**
** When a trailer names a version this process does not know, or at the
** start of a write transaction (a lock taken), the header is read again:
** another process may have started or finished a rekey.
**
** Key bytes live only in secure memory; nothing here writes a file.
*/
#include "vfs/vfs_int.h"
#include "keystore/keystore.h"

const TdeDekVer *tdeKeysFind(const TdeDbKeys *k, uint32_t version){
  for(int i=0; i<k->nVer; i++){
    if( k->aVer[i].version==version ) return &k->aVer[i];
  }
  return 0;
}

static void dekFree(TdeDekVer *d){
  tdeHmacFree(d->pWalHmac);
  d->pWalHmac = 0;
  tdeSecureFree(d->aDek, 32);
  tdeSecureFree(d->aWalMac, 32);
  d->aDek = d->aWalMac = 0;
  d->version = 0;
}

void tdeKeysFreeVersions(TdeDbKeys *k){
  for(int i=0; i<k->nVer; i++) dekFree(&k->aVer[i]);
  k->nVer = 0;
  k->aDek = k->aWalMac = 0;
}

/* Point the current-version aliases at the header's current version. */
void tdeKeysAlias(TdeDbKeys *k){
  const TdeDekVer *d = tdeKeysFind(k, k->hdr.curVersion);
  k->aDek = d ? d->aDek : 0;
  k->aWalMac = d ? d->aWalMac : 0;
}

/* Add (a copy of) data key `version`, with the WAL MAC key derived from it. */
int tdeKeysAddVersion(TdeDbKeys *k, uint32_t version, const uint8_t *aDek){
  static const char zInfo[] = "sqlite-tde v1 wal mac";
  uint8_t info[sizeof(zInfo)-1 + TDE_DBID_BYTES];
  TdeDekVer *d;
  int trc;
  {
    const TdeDekVer *dOld = tdeKeysFind(k, version);
    if( dOld ){
      if( !tdeCtEqual(dOld->aDek, aDek, 32) ){
        return tdeErr(TDE_ERROR, "data-key version %u is already held with other key bytes", version);
      }
      tdeKeysAlias(k);
      return TDE_OK;
    }
  }
  if( k->nVer>=TDE_MAX_VERSIONS ) return tdeErr(TDE_RANGE, "too many data-key versions");
  d = &k->aVer[k->nVer];
  d->aDek = tdeSecureAlloc(32);
  d->aWalMac = tdeSecureAlloc(32);
  if( !d->aDek || !d->aWalMac ){ dekFree(d); return TDE_NOMEM; }
  memcpy(d->aDek, aDek, 32);
  memcpy(info, zInfo, sizeof(zInfo)-1);
  memcpy(info+sizeof(zInfo)-1, k->hdr.dbid, TDE_DBID_BYTES);
  trc = tdeHkdf(d->aDek, 32, NULL, 0, info, sizeof(info), d->aWalMac, 32);
  if( trc==TDE_OK ) trc = tdeHmacNew(d->aWalMac, 32, &d->pWalHmac);
  if( trc ){ dekFree(d); return trc; }
  d->version = version;
  k->nVer++;
  tdeKeysAlias(k);
  return TDE_OK;
}

/* Forget data-key versions the header no longer lists (a finished rekey),
** so a long-running process never runs out of version slots. */
static void keysPrune(TdeDbKeys *k){
  int j = 0;
  for(int i=0; i<k->nVer; i++){
    int bListed = k->aVer[i].version==k->hdr.curVersion;
    for(int e=0; e<k->hdr.nEntry && !bListed; e++){
      bListed = k->hdr.aEntry[e].version==k->aVer[i].version;
    }
    if( bListed ){
      if( j!=i ){ k->aVer[j] = k->aVer[i]; memset(&k->aVer[i], 0, sizeof(k->aVer[i])); }
      j++;
    }else{
      dekFree(&k->aVer[i]);
    }
  }
  k->nVer = j;
}

/* Unwrap every data-key version the header lists and this process does
** not hold yet.  The current version must unwrap; an older one that does
** not is logged (its pages will fail to open). */
int tdeKeysUnlockAll(TdeDbKeys *k){
  uint8_t *aDek = tdeSecureAlloc(32);
  int trc = TDE_OK;
  if( !aDek ) return TDE_NOMEM;
  keysPrune(k);
  for(int i=0; i<k->hdr.nEntry && trc==TDE_OK; i++){
    uint32_t v = k->hdr.aEntry[i].version;
    int rc;
    if( tdeKeysFind(k, v) ) continue;
    rc = tdeKeyringUnlock(k->pKs, &k->hdr, v, aDek);
    if( rc==TDE_OK ){
      trc = tdeKeysAddVersion(k, v, aDek);
    }else if( v==k->hdr.curVersion ){
      trc = rc;
    }else{
      tdeLog(TDE_LOG_WARNING, "data-key version %u cannot be unwrapped: %s", v, tde_last_error());
    }
  }
  if( trc==TDE_OK && !tdeKeysFind(k, k->hdr.curVersion) ){
    trc = tdeErr(TDE_NOKEY, "the header lists no wrapping of the current data-key version %u",
                 k->hdr.curVersion);
  }
  tdeSecureFree(aDek, 32);
  tdeKeysAlias(k);
  return trc;
}

/* The keys a handle uses: its own (main) or its database's. */
static TdeDbKeys *fileKeys(TdeFile *p){
  if( p->eKind==TDE_KIND_MAIN ) return p->pDb->pKeys;
  if( p->pMain ) return p->pMain->pDb->pKeys;
  return 0;
}

/*
** The cipher that seals with the current data key, NULL on failure with
** *pRc the tde_rc (never an older key's cipher: a failure to make the new
** one is an error, not a reason to keep sealing with the old key).
*/
TdePageCipher *tdeCipherForSeal(TdeFile *p, int *pRc){
  TdeDbKeys *k = fileKeys(p);
  *pRc = TDE_OK;
  if( k && k->aDek && p->pCipher && tdePageCipherVersion(p->pCipher)!=k->hdr.curVersion ){
    TdePageCipher *pNew = 0;
    *pRc = tdePageCipherNew(k->aDek, k->hdr.curVersion, &pNew);
    if( *pRc ) return 0;
    tdePageCipherFree(p->pCipher);
    p->pCipher = pNew;
  }
  if( !p->pCipher ) *pRc = TDE_NOKEY;
  return p->pCipher;
}

/*
** The cipher that opens pages of data-key version `version`, NULL with
** *pRc TDE_NOKEY when the database has no such version (the page is not
** authentic), or the tde_rc of a failure to find out (reading the header
** again, memory): that is an error, never an authentication failure.
*/
TdePageCipher *tdeCipherForOpen(TdeFile *p, uint32_t version, int *pRc){
  TdeDbKeys *k;
  const TdeDekVer *d;
  int iSlot = -1;
  *pRc = TDE_OK;
  if( p->pCipher && tdePageCipherVersion(p->pCipher)==version ) return p->pCipher;
  for(int i=0; i<TDE_MAX_VERSIONS; i++){
    if( p->apVer[i] && tdePageCipherVersion(p->apVer[i])==version ) return p->apVer[i];
    if( !p->apVer[i] && iSlot<0 ) iSlot = i;
  }
  k = fileKeys(p);
  if( !k ){ *pRc = TDE_NOKEY; return 0; }
  d = tdeKeysFind(k, version);
  if( !d ){
    /* Another process may have started a rekey: read the header again. */
    TdeFile *pMain = p->eKind==TDE_KIND_MAIN ? p : p->pMain;
    if( pMain ){
      int rc = tdeMainRefresh(pMain);
      if( rc==SQLITE_NOMEM ){ *pRc = TDE_NOMEM; return 0; }
      if( (rc&0xff)==SQLITE_IOERR ){ *pRc = TDE_IO; return 0; }
      if( rc==SQLITE_OK ) d = tdeKeysFind(k, version);
    }
    if( !d ){ *pRc = TDE_NOKEY; return 0; }
  }
  if( iSlot<0 ){
    tdePageCipherFree(p->apVer[0]);
    p->apVer[0] = 0;
    iSlot = 0;
  }
  *pRc = tdePageCipherNew(d->aDek, version, &p->apVer[iSlot]);
  if( *pRc ) return 0;
  return p->apVer[iSlot];
}

void tdeCiphersFree(TdeFile *p){
  tdePageCipherFree(p->pCipher);
  p->pCipher = 0;
  for(int i=0; i<TDE_MAX_VERSIONS; i++){
    tdePageCipherFree(p->apVer[i]);
    p->apVer[i] = 0;
  }
}

/* Seal / open with the version-appropriate cipher. */
int tdeSeal(TdeFile *p, const uint8_t *aad, size_t nAad, const uint8_t *pt, size_t n,
            uint8_t *ct, uint8_t *trailer){
  int trc;
  TdePageCipher *c = tdeCipherForSeal(p, &trc);
  TdeDbKeys *k = fileKeys(p);
  uint64_t nBefore;
  int rc;
  if( !c ) return trc;
  /* Version 2: the page records the header sequence it was sealed under
  ** (docs/FORMAT.md "Pages, version 2"). */
  tdePageCipherSetReserved(c, k && k->hdr.version>=TDE_FORMAT_V2 ? (uint32_t)k->hdr.seq : 0);
  /* ... and, sealed by a main handle, its rollback journal's binding id
  ** ("Rollback journal, version 2"; WAL handles set their frame index). */
  if( p->eKind==TDE_KIND_MAIN ) tdePageCipherSetIvHigh(c, p->pDb->jrnlBind);
  nBefore = tdePageCipherSessions(c);
  rc = tdePageSeal(c, aad, nAad, pt, n, ct, trailer);
  if( k && tdePageCipherSessions(c)!=nBefore ){
    /* Sessions under the current data key, for tde_status (the nonce bound
    ** of docs/FORMAT.md counts sessions). */
    if( k->nSessionsVersion!=tdePageCipherVersion(c) ){
      k->nSessionsVersion = tdePageCipherVersion(c);
      k->nSessions = 0;
    }
    k->nSessions += tdePageCipherSessions(c) - nBefore;
  }
  return rc;
}

int tdeOpen(TdeFile *p, const uint8_t *aad, size_t nAad, const uint8_t *ct, size_t n,
            const uint8_t *trailer, uint8_t *pt){
  int trc;
  TdePageCipher *c = tdeCipherForOpen(p, tdeTrailerVersion(trailer), &trc);
  TdeDbKeys *k = fileKeys(p);
  uint32_t q = tdeGet32(trailer + 44);
  int rc;
  if( !c ){
    memset(pt, 0, n);
    return trc;
  }
  rc = tdePageOpen(c, aad, nAad, ct, n, trailer, pt);
  if( rc==TDE_OK && k && q>(uint32_t)k->hdr.seq ){
    /* Sealed under a newer header than ours: another connection may have
    ** advanced it; if the header on disk is older still, it was put back.
    ** Under a version-1 header too: version-1 code seals q = 0, so q > 0
    ** there means a version-2 header sealed it -- the version-1 header was
    ** put back after an upgrade (which would switch every check off). */
    TdeFile *m = p->eKind==TDE_KIND_MAIN ? p : p->pMain;
    if( m && tdeMainRefresh(m)!=SQLITE_OK ) tdeErrClear();
    if( q>(uint32_t)k->hdr.seq ){
      if( m ) m->pDb->bHdrRolledBack = 1;
      tdeWipe(pt, n);
      rc = tdeErr(TDE_AUTH, "%s: a page was sealed under header sequence %u but the header is at %llu: "
                  "the header region was rolled back (put the current header back, or restore the "
                  "whole database from one backup)", m && m->zName ? m->zName : "database",
                  q, (unsigned long long)k->hdr.seq);
      tdeLog(TDE_LOG_ERROR, "%s", tde_last_error());
    }
  }
  return rc;
}

/*
** Read the header again if another process changed it (a rotation,
** migration or rekey).  Cheap when nothing changed: two 8-byte reads of
** the slots' sequence numbers.
*/
int tdeMainRefreshIfChanged(TdeFile *p){
  uint8_t a[8], b[8];
  int bShortA = 1, bShortB = 1;
  if( !p->pDb->pKeys ) return SQLITE_OK;
  {
    int rc = tdeRealRead(p, a, 8, 12, &bShortA);
    if( rc==SQLITE_OK ) rc = tdeRealRead(p, b, 8, TDE_SLOT_SIZE+12, &bShortB);
    if( rc ) return rc;   /* the caller fails the lock: never write with a header we could not check */
  }
  if( (!bShortA && tdeGet64(a)>p->pDb->pKeys->hdr.seq) || (!bShortB && tdeGet64(b)>p->pDb->pKeys->hdr.seq) ){
    return tdeMainRefresh(p);
  }
  if( p->pDb->pKeys->hdr.version>=TDE_FORMAT_V2 ){
    /* Version 2 freshness updates keep the sequence: compare the log
    ** epoch, the page-map generation and the anchor counter (docs/FORMAT.md
    ** "Header slot, version 2", offsets 3968, 4016, 4008). */
    uint8_t fa[56], fb[56];
    const TdeHeader *h = &p->pDb->pKeys->hdr;
    int rc = tdeRealRead(p, fa, 56, 3968, &bShortA);
    if( rc==SQLITE_OK ) rc = tdeRealRead(p, fb, 56, TDE_SLOT_SIZE+3968, &bShortB);
    if( rc ) return rc;
    for(int i=0; i<2; i++){
      const uint8_t *f = i ? fb : fa;
      uint64_t L, A, G;
      if( i ? bShortB : bShortA ) continue;
      L = tdeGet64(f); A = tdeGet64(f+40); G = tdeGet64(f+48);
      if( L>h->logEpoch || (L==h->logEpoch && (G>h->mapGen || (G==h->mapGen && A>h->anchorCounter))) ){
        return tdeMainRefresh(p);
      }
    }
  }
  return SQLITE_OK;
}

/* Returned by refreshKey: the header on disk is not newer than the one
** held (never go back; version 2: nor to an older freshness area). */
#define REFRESH_UNCHANGED (-1)

/* The refresh's key (tdeHdrRead): the keystore unwraps the new header's
** current data key, so its MAC is checked before anything of it is
** installed; an unchanged header stops before the keystore is asked. */
static int refreshKey(TdeFile *p, const TdeHeader *pHdr, void *pArg, uint8_t *aDek){
  (void)pArg;
  if( !tdeHeaderNewer(pHdr, &p->pDb->pKeys->hdr) ) return REFRESH_UNCHANGED;
  return tdeKeyringUnlock(p->pDb->pKeys->pKs, pHdr, pHdr->curVersion, aDek);
}

int tdeMainRefresh(TdeFile *p){
  TdeDbKeys *k = p->pDb->pKeys;
  TdeHdrRead r;
  TdeHeader *pHdr;
  int rc = SQLITE_OK, trc;
  if( !k ) return SQLITE_OK;
  memset(&r, 0, sizeof(r));
  pHdr = sqlite3_malloc(sizeof(*pHdr));
  if( !pHdr ){ rc = SQLITE_NOMEM; goto done; }
  r.nRead = TDE_HEADER_BYTES;
  r.aDbid = k->hdr.dbid;
  r.xKey = refreshKey;
  r.pHdr = pHdr;
  rc = tdeHdrRead(p, &r, &trc);
  if( rc || trc==REFRESH_UNCHANGED ) goto done;
  if( trc==TDE_OK ){
    TdeHeader save = k->hdr;
    k->hdr = *pHdr;
    trc = tdeKeysUnlockAll(k);
    if( trc ){
      k->hdr = save;
      tdeKeysUnlockAll(k);
    }else{
      k->iSlot = r.iSlot;
      tdeKeysNoteMasterKey(k);
      tdeKeysCheckStale(k);
    }
    tdeWipe(&save, sizeof(save));
  }
  if( trc ){
    tdeLog(TDE_LOG_ERROR, "%s: re-reading the header failed: %s", p->zName ? p->zName : "", tde_last_error());
    rc = tdeSqliteRc(trc);
  }
done:
  if( pHdr ){ tdeWipe(pHdr, sizeof(*pHdr)); sqlite3_free(pHdr); }
  tdeHdrReadDone(&r);
  return rc;
}

/* ---- pages: associated data, seal, open -------------------------------- */

/* A short display name for log messages. */
static const char *dekFileName(TdeFile *p){
  return p->zName ? p->zName : "(temp file)";
}

void tdePageAad(const uint8_t dbid[16], uint32_t pgno, uint32_t pgsz, uint8_t *aad){
  aad[0] = 'P';
  memcpy(aad+1, dbid, TDE_DBID_BYTES);
  tdePut32(aad+1+TDE_DBID_BYTES, pgno);
  tdePut32(aad+5+TDE_DBID_BYTES, pgsz);
}

int tdeSealPage(TdeFile *p, const uint8_t *aPlain, uint32_t pgsz, uint32_t pgno, uint8_t *aOut){
  uint8_t aad[TDE_PAGE_AAD_BYTES];
  uint32_t n = pgsz - TDE_TRAILER_SIZE;
  int rc;
  tdePageAad(p->dbid, pgno, pgsz, aad);
  rc = tdeSeal(p, aad, sizeof(aad), aPlain, n, aOut, aOut+n);
  if( rc ){
    tdeLog(TDE_LOG_ERROR, "%s: sealing page %u failed: %s", dekFileName(p), pgno, tde_last_error());
    return rc==TDE_NOMEM ? SQLITE_NOMEM : SQLITE_IOERR_WRITE;
  }
  return SQLITE_OK;
}

int tdeOpenPage(TdeFile *p, uint8_t *aPage, uint32_t pgsz, uint32_t pgno, int64_t *pvNoKey){
  return tdeOpenPageTo(p, aPage, aPage, pgsz, pgno, pvNoKey);
}

int tdeOpenPageTo(TdeFile *p, const uint8_t *aIn, uint8_t *aOut, uint32_t pgsz, uint32_t pgno, int64_t *pvNoKey){
  uint8_t aad[TDE_PAGE_AAD_BYTES];
  uint8_t trailer[TDE_TRAILER_SIZE];
  uint32_t n = pgsz - TDE_TRAILER_SIZE;
  int rc;
  if( pvNoKey ) *pvNoKey = -1;
  tdePageAad(p->dbid, pgno, pgsz, aad);
  memcpy(trailer, aIn+n, TDE_TRAILER_SIZE);
  rc = tdeOpen(p, aad, sizeof(aad), aIn, n, trailer, aOut);
  memset(aOut+n, 0, TDE_TRAILER_SIZE);
  if( rc && rc!=TDE_AUTH && rc!=TDE_NOKEY ){
    /* Could not check the page (memory, the header re-read, OpenSSL): an
    ** error of its own, never taken for a damaged page. */
    tdeWipe(aOut, pgsz);
    tdeLog(TDE_LOG_ERROR, "%s: page %u could not be checked: %s", dekFileName(p), pgno,
           tde_last_error()[0] ? tde_last_error() : tde_errstr(rc));
    return rc==TDE_NOMEM ? SQLITE_NOMEM : SQLITE_IOERR_READ;
  }
  if( rc ){
    tdeWipe(aOut, pgsz);
    if( pvNoKey && rc==TDE_NOKEY ) *pvNoKey = tdeTrailerVersion(trailer);
    return SQLITE_IOERR_AUTH;
  }
  return SQLITE_OK;
}

/*
** Page (or frame page) pgno failed to open (SQLITE_IOERR_AUTH from
** tdeOpenPage*) and the caller decided that is damage, not a probe's
** wrong guess: count it (tde_status auth_failures) and, when zWhat names
** what it is ("database", "WAL frame"), log it.  vNoKey: what the open
** said of the trailer's data-key version (-1: the tag did not match).
*/
void tdeAuthFail(TdeFile *p, uint32_t pgno, const char *zWhat, int64_t vNoKey){
  p->nAuthFail++;
  if( zWhat && vNoKey>=0 ){
    tdeLog(TDE_LOG_ERROR, "%s: %s page %u failed authentication (its trailer names "
           "data-key version %u, which this database does not have: damaged or not a page)",
           dekFileName(p), zWhat, pgno, (uint32_t)vNoKey);
  }else if( zWhat ){
    tdeLog(TDE_LOG_ERROR, "%s: %s page %u failed authentication (tampered with, damaged, "
           "or moved from another position or database)", dekFileName(p), zWhat, pgno);
  }
}

/* All pgsz bytes of aPage zero: the page reads as SQLite's hole would. */
int tdePageIsZero(const uint8_t *aPage, uint32_t pgsz){
  uint32_t i;
  for(i=0; i<pgsz && aPage[i]==0; i++){}
  return i==pgsz;
}

/*
** The hole rule: is page pgno, read as all zeros (tdePageIsZero) from
** inside the database file, a page SQLite never wrote?  Only if
**   - pgno is beyond nCommitted, the database size in pages committed
**     before the write that extended the file (a spilled transaction, or
**     SQLITE_FCNTL_CHUNK_SIZE padding); UINT32_MAX when not known, so no
**     page is beyond it; or
**   - bNewer: a WAL frame not yet checkpointed holds a newer copy of the
**     page (a checkpoint may write page N+1 before page N).  Only for a
**     check that returns no page data (tde_verify): a read serving SQLite
**     passes 0, as SQLite may be reading the file's copy.
** Any other all-zero page is damage.  Used by the main database's read
** (vfs.c) and by tde_verify (api.c), each with its own nCommitted.
*/
int tdePageIsHole(uint32_t pgno, uint32_t nCommitted, int bNewer){
  return pgno>nCommitted || bNewer;
}

/* Which master key (of the header entries for the current version) the
** keystore holds: recorded for status. */
void tdeKeysNoteMasterKey(TdeDbKeys *k){
  k->zMasterKey[0] = 0;
  for(int i=0; i<k->hdr.nEntry; i++){
    TdeWrapEntry *e = &k->hdr.aEntry[i];
    if( e->version==k->hdr.curVersion && e->ksType==k->pKs->pMethods->typeId
     && k->pKs->pMethods->xHasKey(k->pKs, e->zKeyId) ){
      memcpy(k->zMasterKey, e->zKeyId, strlen(e->zKeyId)+1);
      return;
    }
  }
}

/* Does the keystore's current master key already wrap the current data
** key?  If not, the next write transaction re-wraps it. */
void tdeKeysCheckStale(TdeDbKeys *k){
  char zCur[TDE_KEYID_MAX+1];
  k->bStaleWrap = 0;
  if( !k->pKs || k->pKs->pMethods->xCurrentKey(k->pKs, zCur, sizeof(zCur))!=TDE_OK ){
    tdeErrClear();
    return;
  }
  for(int i=0; i<k->hdr.nEntry; i++){
    const TdeWrapEntry *e = &k->hdr.aEntry[i];
    if( e->version==k->hdr.curVersion && e->ksType==k->pKs->pMethods->typeId
     && strcmp(e->zKeyId, zCur)==0 ){
      return;
    }
  }
  k->bStaleWrap = 1;
}
