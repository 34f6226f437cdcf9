/*
** Rekey: re-encrypt every page of a database under a new data-key version
** (docs/FORMAT.md "Rekey").  Pages carry the version that sealed them, so
** the database stays readable throughout and an interrupted rekey simply
** continues where pages still carry the old version.
**
**   begin   (header update) a new random data key, version v+1, wrapped by
**           the keystore's current master key, becomes current: every
**           connection seals new pages with it from its next write
**           transaction on;
**   steps   under SQLite's write lock (and, in WAL mode, the checkpoint
**           lock), up to N pages still under an old version are read,
**           decrypted and sealed under v+1.  Crash safety: the old
**           ciphertext of the batch goes to DB-tderekey first and is
**           synced, then the pages are written and synced, then the
**           journal is emptied.  A page torn by a crash in between fails
**           authentication and is restored (or, until then, read) from the
**           journal copy;
**   finish  once no page of the file (and, in WAL mode, no frame: the
**           caller checkpoints first) uses an old version, the old
**           versions' wrappings are removed from the header.
**
** A rekey of a format-version-1 database also upgrades it to version 2
** (docs/FORMAT.md "Upgrade from version 1"): the begin writes version 2
** when the WAL holds no frame (always in rollback mode), else the finish
** does, after the caller emptied the WAL.  Audited as an upgrade.
**
** Must never: return a page that failed authentication; rewrite a page
** without its old ciphertext being durable in the journal first.
*/
#include "vfs/vfs_int.h"
#include "keystore/keystore.h"
#include "audit/audit.h"

#include <stdlib.h>

#define RJ_MAGIC   "TDERKJ02"
#define RJ_HDR     32      /* magic 8, dbid 16, page size 4, count 4 */
#define RJ_SUM     32      /* HMAC-SHA256 over everything before it */

/* The journal's MAC (docs/FORMAT.md "Rekey"): keyed by the current data
** key, so only a holder of the key can make a journal this database reads. */
static int rjMac(TdeFile *p, const uint8_t *a, size_t n, uint8_t out[32]){
  static const char zInfo[] = "sqlite-tde rekey journal";
  uint8_t key[32];
  const uint8_t *apPart[1];
  size_t anPart[1];
  int trc;
  if( !p->pDb->pKeys || !p->pDb->pKeys->aDek ) return TDE_NOKEY;
  trc = tdeHkdf(p->pDb->pKeys->aDek, 32, p->dbid, TDE_DBID_BYTES, (const uint8_t*)zInfo,
                sizeof(zInfo)-1, key, sizeof(key));
  apPart[0] = a;
  anPart[0] = n;
  if( trc==TDE_OK ) trc = tdeHmacSha256(key, sizeof(key), apPart, anPart, 1, out);
  tdeWipe(key, sizeof(key));
  return trc;
}

int tdeRekeyInProgress(const TdeDbKeys *k){
  for(int i=0; i<k->hdr.nEntry; i++){
    if( k->hdr.aEntry[i].version!=k->hdr.curVersion ) return 1;
  }
  return 0;
}

/* ---- the rekey journal ------------------------------------------------- */

typedef struct RekeyJournal {
  sqlite3_file *pFd;
  char *zPath;
} RekeyJournal;

static void rjClose(RekeyJournal *j){
  if( j->pFd ){
    if( j->pFd->pMethods ) j->pFd->pMethods->xClose(j->pFd);
    sqlite3_free(j->pFd);
  }
  sqlite3_free(j->zPath);
  j->pFd = 0;
  j->zPath = 0;
}

/* Open DB-tderekey; bCreate 0: SQLITE_CANTOPEN if it does not exist. */
static int rjOpen(TdeFile *p, int bCreate, RekeyJournal *j){
  sqlite3_vfs *pOrig = (sqlite3_vfs*)tdeVfs.pAppData;
  int bExists = 0, rc, outFlags = 0;
  memset(j, 0, sizeof(*j));
  if( !p->zName ) return SQLITE_CANTOPEN;
  j->zPath = sqlite3_mprintf("%s-tderekey", p->zName);
  if( !j->zPath ) return SQLITE_NOMEM;
  if( !bCreate ){
    rc = pOrig->xAccess(pOrig, j->zPath, SQLITE_ACCESS_EXISTS, &bExists);
    if( rc || !bExists ){ rjClose(j); return SQLITE_CANTOPEN; }
  }
  j->pFd = sqlite3_malloc(pOrig->szOsFile);
  if( !j->pFd ){ rjClose(j); return SQLITE_NOMEM; }
  memset(j->pFd, 0, (size_t)pOrig->szOsFile);
  rc = pOrig->xOpen(pOrig, j->zPath, j->pFd,
                    SQLITE_OPEN_READWRITE|(bCreate ? SQLITE_OPEN_CREATE : 0)|SQLITE_OPEN_MAIN_JOURNAL,
                    &outFlags);
  if( rc ){ rjClose(j); return rc; }
  return SQLITE_OK;
}

/* Read and check the whole journal into *paBuf (sqlite3_malloc'd); 0
** entries if empty or torn (a torn journal means the pages were not
** written yet: nothing to restore). */
static int rjLoad(TdeFile *p, RekeyJournal *j, uint8_t **paBuf, uint32_t *pnEntry, uint32_t *pPgsz){
  sqlite3_int64 sz = 0;
  uint8_t *a = 0, sum[32];
  uint32_t n, pgsz;
  int rc;
  *paBuf = 0;
  *pnEntry = 0;
  rc = j->pFd->pMethods->xFileSize(j->pFd, &sz);
  if( rc ) return rc;
  if( sz < RJ_HDR + RJ_SUM || sz > (sqlite3_int64)1<<31 ) return SQLITE_OK;
  a = sqlite3_malloc64((sqlite3_uint64)sz);
  if( !a ) return SQLITE_NOMEM;
  for(sqlite3_int64 off=0; rc==SQLITE_OK && off<sz; off+=65536){
    int nPiece = (int)(sz-off < 65536 ? sz-off : 65536);
    rc = j->pFd->pMethods->xRead(j->pFd, a+off, nPiece, off);
  }
  if( rc ){ sqlite3_free(a); return rc==SQLITE_IOERR_SHORT_READ ? SQLITE_OK : rc; }
  n = tdeGet32(a+28);
  pgsz = tdeGet32(a+24);
  if( memcmp(a, RJ_MAGIC, 8)!=0 || memcmp(a+8, p->dbid, TDE_DBID_BYTES)!=0 || !tdeValidPgsz(pgsz)
   || (sqlite3_int64)RJ_HDR + (sqlite3_int64)n*(4+pgsz) + RJ_SUM != sz
   || rjMac(p, a, (size_t)sz - RJ_SUM, sum)!=TDE_OK || !tdeCtEqual(sum, a + sz - RJ_SUM, RJ_SUM) ){
    sqlite3_free(a);
    return SQLITE_OK;
  }
  *paBuf = a;
  *pnEntry = n;
  *pPgsz = pgsz;
  return SQLITE_OK;
}

/*
** Put back every page the journal holds whose copy in the database no
** longer authenticates (torn by a crash in the middle of a batch), then
** empty the journal.  Caller holds the write lock.
*/
int tdeRekeyRecover(TdeFile *p){
  RekeyJournal j;
  uint8_t *a = 0, *aPage = 0;
  uint32_t n = 0, pgsz = 0, nRestored = 0;
  int rc = rjOpen(p, 0, &j);
  if( rc==SQLITE_CANTOPEN ) return SQLITE_OK;
  if( rc ) return rc;
  rc = rjLoad(p, &j, &a, &n, &pgsz);
  if( rc==SQLITE_OK && n>0 ) aPage = sqlite3_malloc((int)pgsz);
  if( rc==SQLITE_OK && n>0 && !aPage ) rc = SQLITE_NOMEM;
  for(uint32_t i=0; rc==SQLITE_OK && i<n; i++){
    const uint8_t *e = a + RJ_HDR + (size_t)i*(4+pgsz);
    uint32_t pgno = tdeGet32(e);
    int bShort = 0;
    rc = tdeRealRead(p, aPage, (int)pgsz, tdeMainPageOff(p, pgsz, pgno), &bShort);
    if( rc ) break;
    if( bShort ) continue;      /* the file no longer reaches it (truncated since) */
    if( tdeOpenPage(p, aPage, pgsz, pgno, 0)==SQLITE_OK ) continue;   /* intact */
    memcpy(aPage, e+4, pgsz);
    if( tdeOpenPage(p, aPage, pgsz, pgno, 0)!=SQLITE_OK ) continue;
    rc = p->pReal->pMethods->xWrite(p->pReal, e+4, (int)pgsz, tdeMainPageOff(p, pgsz, pgno));
    nRestored++;
  }
  if( rc==SQLITE_OK && nRestored ) rc = p->pReal->pMethods->xSync(p->pReal, SQLITE_SYNC_NORMAL);
  if( rc==SQLITE_OK ) rc = j.pFd->pMethods->xTruncate(j.pFd, 0);
  if( rc==SQLITE_OK ) rc = j.pFd->pMethods->xSync(j.pFd, SQLITE_SYNC_NORMAL);
  if( nRestored ){
    tdeLog(TDE_LOG_WARNING, "%s: restored %u page(s) torn by an interrupted rekey", p->zName, nRestored);
  }
  if( aPage ){ tdeWipe(aPage, pgsz); sqlite3_free(aPage); }
  sqlite3_free(a);
  rjClose(&j);
  return rc;
}

/* The rescue hook (xPageRescue, hooks.c): a page that fails
** authentication may be torn by an interrupted rekey: if the rekey journal
** holds its old copy, decrypt that into aOut and its stored tag into aTag
** (the caller checks it against the page map like any page's). */
static int rekeyRescue(TdeFile *p, uint32_t pgno, uint32_t pgsz, uint8_t *aOut, uint8_t aTag[16]){
  RekeyJournal j;
  uint8_t *a = 0;
  uint32_t n = 0, jPgsz = 0;
  int rc, found = SQLITE_IOERR_AUTH;
  /* Only while a rekey runs (or was interrupted), and for page 1 after its
  ** finish (page 1 is sealed again then, through the journal): otherwise
  ** a -tderekey file is no business of a failing page. */
  if( !p->pDb->pKeys || (!tdeRekeyInProgress(p->pDb->pKeys) && pgno!=1) ) return SQLITE_IOERR_AUTH;
  rc = rjOpen(p, 0, &j);
  if( rc ) return SQLITE_IOERR_AUTH;
  if( rjLoad(p, &j, &a, &n, &jPgsz)==SQLITE_OK && jPgsz==pgsz ){
    for(uint32_t i=0; i<n; i++){
      const uint8_t *e = a + RJ_HDR + (size_t)i*(4+pgsz);
      if( tdeGet32(e)!=pgno ) continue;
      memcpy(aOut, e+4, pgsz);
      memcpy(aTag, aOut + pgsz - 24, 16);     /* for the page-map check, as for any page */
      found = tdeOpenPage(p, aOut, pgsz, pgno, 0);   /* the caller reports a failure */
      break;
    }
  }
  sqlite3_free(a);
  rjClose(&j);
  return found;
}

const TdeMainHook tdeRekeyHook = {
  "rekey",
  0,                          /* xLoaded */
  0,                          /* xWriteLock */
  0,                          /* xWriteEnd */
  0,                          /* xBeforeKeyDrop */
  rekeyRescue,                /* xPageRescue */
  0,                          /* xWalLock */
  0,                          /* xWalEnd */
  0,                          /* xPageCheck */
  0,                          /* xWriteOutsideWal */
  0,                          /* xWalFold */
};

/* ---- begin / step / finish ---------------------------------------------- */

typedef struct BeginCtx {
  uint8_t *aDek;
  int bUpgrade;          /* also move a version-1 header to version 2 */
  int bUpgraded;         /* ... the edit did */
} BeginCtx;

static int editBegin(TdeFile *p, TdeHeader *h, void *pArg){
  BeginCtx *c = pArg;
  TdeDbKeys *k = p->pDb->pKeys;
  char zCur[TDE_KEYID_MAX+1];
  uint32_t vNew = 0;
  int trc;
  for(int i=0; i<h->nEntry; i++){
    const TdeWrapEntry *e = &h->aEntry[i];
    if( e->version>vNew ) vNew = e->version;
    if( e->ksType!=k->pKs->pMethods->typeId || !k->pKs->pMethods->xHasKey(k->pKs, e->zKeyId) ){
      tdeErr(TDE_UNSUPPORTED, "the data key is also wrapped by master key %s of another keystore "
             "(a keystore migration in progress): finish it (migrate-keystore --drop-old) before a rekey",
             e->zKeyId);
      return SQLITE_ERROR;
    }
  }
  vNew++;
  trc = tdeRandom(c->aDek, 32);
  if( trc==TDE_OK ) trc = k->pKs->pMethods->xCurrentKey(k->pKs, zCur, sizeof(zCur));
  if( trc==TDE_OK ) trc = tdeKeyringAddWrap(k->pKs, h, vNew, c->aDek, zCur);
  if( trc==TDE_OK ) trc = tdeKeysAddVersion(k, vNew, c->aDek);
  if( trc ) return tdeSqliteRc(trc);
  h->curVersion = vNew;
  /* The rekey rewrites pages outside the WAL: no page map until the first
  ** fold after it (docs/FORMAT.md "Building the map"). */
  memset(h->aMapRoot, 0, sizeof(h->aMapRoot));
  h->mapPages = 0;
  if( c->bUpgrade && h->version<TDE_FORMAT_V2 ){
    tdeUpgradeEdit(h);
    c->bUpgraded = 1;
  }
  return SQLITE_OK;
}

int tdeMainRekeyBegin(TdeFile *p){
  BeginCtx c;
  int rc;
  uint32_t vOld = p->pDb->pKeys->hdr.curVersion;
  if( tdeRekeyInProgress(p->pDb->pKeys) ) return SQLITE_OK;
  c.aDek = tdeSecureAlloc(32);
  if( !c.aDek ) return SQLITE_NOMEM;
  c.bUpgrade = p->pDb->pKeys->hdr.version<TDE_FORMAT_V2 && tdeUpgradeWalEmpty(p);
  c.bUpgraded = 0;
  rc = tdeMainHeaderUpdate(p, editBegin, &c);
  tdeSecureFree(c.aDek, 32);
  if( c.bUpgraded ){
    tdeUpgradeAudit(p, rc, "format version 1 -> 2 (freshness checks on) at the begin of a rekey");
  }
  {
    TdeAuditRec r;
    tdeAuditInit(&r, "rekey_start");
    r.bFailure = rc!=SQLITE_OK;
    r.zDbPath = p->zName;
    r.aDbid = p->pDb->pKeys->hdr.dbid;
    r.zKeystore = p->pDb->pKeys->pKs->pMethods->zName;
    r.zKeyId = p->pDb->pKeys->zMasterKey[0] ? p->pDb->pKeys->zMasterKey : 0;
    r.keyVersion = vOld;
    r.newKeyVersion = rc==SQLITE_OK ? p->pDb->pKeys->hdr.curVersion : 0;
    r.zDetail = rc ? tde_last_error() : "new data key; pages are re-encrypted in steps";
    tdeAudit(p->pDb->pKeys->pCfg, &r);
  }
  p->pDb->pKeys->iRekeyCursor = 1;
  return rc;
}

/* Number of whole pages in the file. */
static sqlite3_int64 filePages(TdeFile *p, uint32_t pgsz){
  sqlite3_int64 sz = 0;
  TdeLayout L = tdeMainLayout(p, pgsz);
  if( p->pReal->pMethods->xFileSize(p->pReal, &sz) ) return 0;
  return tdeLayoutWholePages(&L, sz);
}

static int allZero(const uint8_t *a, uint32_t n){
  uint32_t i;
  for(i=0; i<n && a[i]==0; i++){}
  return i==n;
}

/* The rekey journal holding the old ciphertext of nBatch pages (aOld,
** page numbers aPgno), MACed, written and synced: before any of them is
** rewritten (tdeMainRekeyStep). */
static int rjWriteBatch(TdeFile *p, RekeyJournal *j, const uint8_t *aOld, const uint32_t *aPgno,
                        int nBatch, uint32_t pgsz){
  sqlite3_int64 nJ = RJ_HDR + (sqlite3_int64)nBatch*(4+pgsz) + RJ_SUM;
  uint8_t *aJ = sqlite3_malloc64((sqlite3_uint64)nJ);
  int rc;
  if( !aJ ) return SQLITE_NOMEM;
  memcpy(aJ, RJ_MAGIC, 8);
  memcpy(aJ+8, p->dbid, TDE_DBID_BYTES);
  tdePut32(aJ+24, pgsz);
  tdePut32(aJ+28, (uint32_t)nBatch);
  for(int i=0; i<nBatch; i++){
    uint8_t *e = aJ + RJ_HDR + (size_t)i*(4+pgsz);
    tdePut32(e, aPgno[i]);
    memcpy(e+4, aOld + (size_t)i*pgsz, pgsz);
  }
  rc = rjMac(p, aJ, (size_t)nJ - RJ_SUM, aJ + nJ - RJ_SUM) ? SQLITE_IOERR : SQLITE_OK;
  if( rc==SQLITE_OK ) rc = j->pFd->pMethods->xTruncate(j->pFd, 0);
  /* In pieces of at most 64 KiB: VFSes (unix among them) take no more
  ** in one write, as SQLite never asks them to. */
  for(sqlite3_int64 off=0; rc==SQLITE_OK && off<nJ; off+=65536){
    int n = (int)(nJ-off < 65536 ? nJ-off : 65536);
    rc = j->pFd->pMethods->xWrite(j->pFd, aJ+off, n, off);
  }
  if( rc==SQLITE_OK ) rc = j->pFd->pMethods->xSync(j->pFd, SQLITE_SYNC_NORMAL);
  sqlite3_free(aJ);
  return rc;
}

/*
** One step: rewrite up to nMax pages that still carry an old version,
** scanning on from the cursor (wrapping around once).  *pbClean is set
** when a whole pass over the file found no such page.  Caller holds the
** write lock -- EXCLUSIVE in rollback mode, the WAL write and checkpoint
** locks in WAL mode -- so nothing else writes the file.
*/
int tdeMainRekeyStep(TdeFile *p, int nMax, sqlite3_int64 *pnRewritten,
                     sqlite3_int64 *pnPages, int *pbClean){
  TdeDbKeys *k = p->pDb->pKeys;
  uint32_t pgsz = p->pDb->pgsz, target = k->hdr.curVersion;
  sqlite3_int64 nPages, iPg, nScanned = 0;
  uint8_t *aOld = 0, *aNew = 0, *aTmp = 0;
  uint32_t *aPgno = 0;
  int nBatch = 0, rc;
  RekeyJournal j;

  memset(&j, 0, sizeof(j));
  *pnRewritten = 0;
  *pbClean = 0;
  rc = tdeRekeyRecover(p);
  if( rc ) return rc;
  if( !pgsz ){
    rc = tdeScratch(p);
    if( rc==SQLITE_OK ) rc = tdeMainDiscoverPgsz(p);
    if( rc ) return rc;
    pgsz = p->pDb->pgsz;
  }
  nPages = filePages(p, pgsz);
  *pnPages = nPages;
  if( nMax<1 ) nMax = 1;
  aOld = sqlite3_malloc64((sqlite3_uint64)nMax * pgsz);
  aNew = sqlite3_malloc64((sqlite3_uint64)nMax * pgsz);
  aTmp = sqlite3_malloc((int)pgsz);
  aPgno = sqlite3_malloc64(sizeof(uint32_t) * (sqlite3_uint64)nMax);
  if( !aOld || !aNew || !aTmp || !aPgno ){ rc = SQLITE_NOMEM; goto done; }
  if( k->iRekeyCursor<1 || k->iRekeyCursor>nPages ) k->iRekeyCursor = 1;
  iPg = k->iRekeyCursor;
  while( nScanned<nPages && nBatch<nMax ){
    uint8_t *aPage = aOld + (size_t)nBatch*pgsz;
    int bShort;
    uint32_t v;
    rc = tdeRealRead(p, aPage, (int)pgsz, tdeMainPageOff(p, pgsz, (uint32_t)iPg), &bShort);
    if( rc ) goto done;
    nScanned++;
    v = tdeTrailerVersion(aPage + pgsz - TDE_TRAILER_SIZE);
    if( !bShort && v!=target && !allZero(aPage, pgsz) ){
      memcpy(aTmp, aPage, pgsz);
      int64_t vNoKey = -1;
      rc = tdeOpenPage(p, aTmp, pgsz, (uint32_t)iPg, &vNoKey);
      if( rc==SQLITE_IOERR_AUTH ) tdeAuthFail(p, (uint32_t)iPg, "database", vNoKey);
      if( rc ) goto done;          /* a damaged page: stop, change nothing */
      rc = tdeSealPage(p, aTmp, pgsz, (uint32_t)iPg, aNew + (size_t)nBatch*pgsz);
      if( rc ) goto done;
      aPgno[nBatch++] = (uint32_t)iPg;
    }
    iPg = iPg>=nPages ? 1 : iPg+1;
  }
  k->iRekeyCursor = (uint32_t)iPg;
  if( nBatch==0 ){
    *pbClean = nScanned>=nPages;
    goto done;
  }

  /* 1. Old ciphertext to the journal, durable. */
  rc = rjOpen(p, 1, &j);
  if( rc==SQLITE_OK ) rc = rjWriteBatch(p, &j, aOld, aPgno, nBatch, pgsz);
  if( rc ) goto done;
  /* 2. New pages, durable.  3. Empty the journal. */
  for(int i=0; rc==SQLITE_OK && i<nBatch; i++){
    rc = p->pReal->pMethods->xWrite(p->pReal, aNew + (size_t)i*pgsz, (int)pgsz,
                                    tdeMainPageOff(p, pgsz, aPgno[i]));
  }
  if( rc==SQLITE_OK ) rc = p->pReal->pMethods->xSync(p->pReal, SQLITE_SYNC_NORMAL);
  if( rc==SQLITE_OK ) rc = j.pFd->pMethods->xTruncate(j.pFd, 0);
  if( rc==SQLITE_OK ) rc = j.pFd->pMethods->xSync(j.pFd, SQLITE_SYNC_NORMAL);
  if( rc==SQLITE_OK ) *pnRewritten = nBatch;

done:
  rjClose(&j);
  if( aOld ){ sqlite3_free(aOld); }
  if( aNew ){ sqlite3_free(aNew); }
  if( aTmp ){ tdeWipe(aTmp, pgsz); sqlite3_free(aTmp); }
  sqlite3_free(aPgno);
  return rc;
}

static int dropOldVersions(const TdeWrapEntry *e, void *pArg){
  return e->version!=*(const uint32_t*)pArg;
}

typedef struct FinishCtx {
  int bUpgrade;          /* a version-1 header: move it to version 2 */
  int bUpgraded;
} FinishCtx;

static int editFinish(TdeFile *p, TdeHeader *h, void *pArg){
  FinishCtx *c = pArg;
  uint32_t cur = h->curVersion;
  int j = 0;
  TDE_UNUSED(p);
  if( c->bUpgrade && h->version<TDE_FORMAT_V2 ){
    tdeUpgradeEdit(h);
    c->bUpgraded = 1;
  }
  for(int i=0; i<h->nEntry; i++){
    if( !dropOldVersions(&h->aEntry[i], &cur) ){
      if( j!=i ) h->aEntry[j] = h->aEntry[i];
      j++;
    }
  }
  for(int i=j; i<h->nEntry; i++) tdeWipe(&h->aEntry[i], sizeof(h->aEntry[i]));
  h->nEntry = j;
  return SQLITE_OK;
}

/*
** Version 2, after the finish's header update (sequence s): seal page 1
** again, so it records s and a header region saved before the finish --
** which would bring the old data key back -- is refused when SQLite reads
** page 1 (docs/FORMAT.md "Header rollback after a rekey").  Crash-safe as
** a step: the old ciphertext goes to DB-tderekey and is synced first (a
** page 1 torn by a crash is then read from there, rekeyRescue, until
** SQLite writes page 1 again; the next rekey's first step empties the
** journal, tdeRekeyRecover).  The caller holds
** the write lock, and in WAL mode the checkpoint lock.  (Rotation and
** migration re-seal page 1 under a rollback journal instead: journal.c.)
*/
static int rekeyResealPage1(TdeFile *p){
  uint32_t pgsz = p->pDb->pgsz;
  uint8_t *aOld = 0, *aNew = 0, *aJ = 0;
  RekeyJournal j;
  int64_t vNoKey = -1;
  int bShort = 0, rc;
  memset(&j, 0, sizeof(j));
  if( p->pDb->pKeys->hdr.version<TDE_FORMAT_V2 || !tdeValidPgsz(pgsz) ) return SQLITE_OK;
  aOld = sqlite3_malloc((int)pgsz);
  aNew = sqlite3_malloc((int)pgsz);
  aJ = sqlite3_malloc((int)(RJ_HDR + 4 + pgsz + RJ_SUM));
  if( !aOld || !aNew || !aJ ){ rc = SQLITE_NOMEM; goto done; }
  rc = tdeRealRead(p, aOld, (int)pgsz, tdeMainPageOff(p, pgsz, 1), &bShort);
  if( rc || bShort || allZero(aOld, pgsz) ) goto done;     /* no page 1 on disk */
  memcpy(aNew, aOld, pgsz);
  rc = tdeOpenPage(p, aNew, pgsz, 1, &vNoKey);
  if( rc==SQLITE_IOERR_AUTH ) tdeAuthFail(p, 1, "database", vNoKey);
  if( rc==SQLITE_OK ) rc = tdeSealPage(p, aNew, pgsz, 1, aNew);
  if( rc ) goto done;
  memcpy(aJ, RJ_MAGIC, 8);
  memcpy(aJ+8, p->dbid, TDE_DBID_BYTES);
  tdePut32(aJ+24, pgsz);
  tdePut32(aJ+28, 1);
  tdePut32(aJ+RJ_HDR, 1);
  memcpy(aJ+RJ_HDR+4, aOld, pgsz);
  /* Keyed like every rekey journal (an unkeyed checksum here made the copy
  ** one that recovery ignores). */
  rc = rjMac(p, aJ, RJ_HDR + 4 + pgsz, aJ + RJ_HDR + 4 + pgsz) ? SQLITE_IOERR : SQLITE_OK;
  if( rc==SQLITE_OK ) rc = rjOpen(p, 1, &j);
  if( rc==SQLITE_OK ) rc = j.pFd->pMethods->xTruncate(j.pFd, 0);
  for(sqlite3_int64 off=0, nJ=RJ_HDR + 4 + pgsz + RJ_SUM; rc==SQLITE_OK && off<nJ; off+=65536){
    rc = j.pFd->pMethods->xWrite(j.pFd, aJ+off, (int)(nJ-off < 65536 ? nJ-off : 65536), off);
  }
  if( rc==SQLITE_OK ) rc = j.pFd->pMethods->xSync(j.pFd, SQLITE_SYNC_NORMAL);
  if( rc==SQLITE_OK ) rc = p->pReal->pMethods->xWrite(p->pReal, aNew, (int)pgsz, tdeMainPageOff(p, pgsz, 1));
  if( rc==SQLITE_OK ) rc = p->pReal->pMethods->xSync(p->pReal, SQLITE_SYNC_NORMAL);
  if( rc==SQLITE_OK ) rc = j.pFd->pMethods->xTruncate(j.pFd, 0);
  if( rc==SQLITE_OK ) rc = j.pFd->pMethods->xSync(j.pFd, SQLITE_SYNC_NORMAL);
done:
  rjClose(&j);
  if( aNew ){ tdeWipe(aNew, pgsz); sqlite3_free(aNew); }
  sqlite3_free(aOld);
  sqlite3_free(aJ);
  return rc;
}

int tdeMainRekeyFinish(TdeFile *p){
  FinishCtx c;
  int rc;
  c.bUpgrade = p->pDb->pKeys->hdr.version<TDE_FORMAT_V2 && tdeUpgradeWalEmpty(p);
  c.bUpgraded = 0;
  rc = tdeMainHookBeforeKeyDrop(p);   /* the anchor: a record MACed by the key kept */
  if( rc==SQLITE_OK ) rc = tdeMainHeaderUpdate(p, editFinish, &c);
  if( c.bUpgraded ){
    tdeUpgradeAudit(p, rc, "format version 1 -> 2 (freshness checks on) at the finish of a rekey");
  }else if( rc==SQLITE_OK && p->pDb->pKeys->hdr.version<TDE_FORMAT_V2 ){
    tdeLog(TDE_LOG_WARNING, "%s: rekey finished, but the WAL held frames, so the database stays "
           "at format version 1: run `sqlite-tde upgrade`", p->zName ? p->zName : "");
  }
  if( rc==SQLITE_OK && rekeyResealPage1(p)!=SQLITE_OK ){
    /* The rekey itself is done and durable; only the early detection of a
    ** header put back waits for the next write of page 1. */
    tdeLog(TDE_LOG_WARNING, "%s: rekey finished, but page 1 could not be sealed again: %s",
           p->zName ? p->zName : "", tde_last_error());
  }
  if( rc==SQLITE_OK && p->zName ){
    sqlite3_vfs *pOrig = (sqlite3_vfs*)tdeVfs.pAppData;
    char *zJ = sqlite3_mprintf("%s-tderekey", p->zName);
    if( zJ ){ pOrig->xDelete(pOrig, zJ, 0); sqlite3_free(zJ); }
  }
  TdeAuditRec r;
  tdeAuditInit(&r, "rekey_end");
  r.bFailure = rc!=SQLITE_OK;
  r.zDbPath = p->zName;
  r.aDbid = p->pDb->pKeys->hdr.dbid;
  r.zKeystore = p->pDb->pKeys->pKs->pMethods->zName;
  r.zKeyId = p->pDb->pKeys->zMasterKey[0] ? p->pDb->pKeys->zMasterKey : 0;
  r.keyVersion = p->pDb->pKeys->hdr.curVersion;
  r.zDetail = rc ? tde_last_error() : "every page under the new data key; old versions removed";
  tdeAudit(p->pDb->pKeys->pCfg, &r);
  return rc;
}

/* Count pages by data-key version (reads every page's trailer). */
int tdeMainCountVersions(TdeFile *p, uint32_t *aVersion, sqlite3_int64 *anPages, int nMax, int *pnFound){
  uint8_t aTrailer[TDE_TRAILER_SIZE];
  sqlite3_int64 nPages;
  int nFound = 0, rc = SQLITE_OK;
  *pnFound = 0;
  if( !p->pDb->pKeys || !p->pDb->pgsz ) return SQLITE_OK;
  nPages = filePages(p, p->pDb->pgsz);
  for(sqlite3_int64 i=1; i<=nPages; i++){
    int bShort, f;
    uint32_t v;
    rc = tdeRealRead(p, aTrailer, TDE_TRAILER_SIZE,
                     tdeMainPageOff(p, p->pDb->pgsz, (uint32_t)i) + p->pDb->pgsz - TDE_TRAILER_SIZE, &bShort);
    if( rc ) break;
    if( bShort || allZero(aTrailer, TDE_TRAILER_SIZE) ) continue;
    v = tdeTrailerVersion(aTrailer);
    for(f=0; f<nFound && aVersion[f]!=v; f++){}
    if( f==nFound ){
      if( nFound==nMax ) continue;
      aVersion[f] = v;
      anPages[f] = 0;
      nFound++;
    }
    anPages[f]++;
  }
  *pnFound = nFound;
  return rc;
}
