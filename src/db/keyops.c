/*
** Key operations on an open database that rewrite only its header:
** master-key rotation (re-wrap the data key under the keystore's current
** master key) and keystore migration (add, later keep only, wrappings by
** another keystore).  The data key never changes here, so pages, WAL
** frames and other connections are unaffected; the header is O(1) in the
** size of the database.
**
** Every update runs under SQLite's write lock (the caller's BEGIN
** IMMEDIATE, or the write transaction that opened a journal or wrote a
** WAL frame), which serialises header writers across processes.  The
** update re-reads the header from disk (another process may have changed
** it), writes the new header into the slot not in force, syncs, then
** copies it into the other slot and syncs again (docs/FORMAT.md).
**
** The generic header writer: it writes the header region and nothing
** else -- no page, no journal.  A caller that needs page 1 sealed again
** after its update (rotation, migration: api.c) does that itself
** (tdeJournalResealPage1), so this file calls only down (dek, fileio).
*/
#include "vfs/vfs_int.h"
#include "keystore/keystore.h"
#include "audit/audit.h"
#include "config.h"

/* Drop entries i for which xDrop says so. */
static void keyringFilter(TdeHeader *h, int (*xDrop)(const TdeWrapEntry*, void*), void *pArg){
  int j = 0;
  for(int i=0; i<h->nEntry; i++){
    if( !xDrop(&h->aEntry[i], pArg) ){
      if( j!=i ) h->aEntry[j] = h->aEntry[i];
      j++;
    }
  }
  for(int i=j; i<h->nEntry; i++) tdeWipe(&h->aEntry[i], sizeof(h->aEntry[i]));
  h->nEntry = j;
}

/* The header update's key (tdeHdrRead): the data key this handle holds,
** which must still be the header's current one. */
static int updateKey(TdeFile *p, const TdeHeader *pHdr, void *pArg, uint8_t *aDek){
  (void)pArg;
  if( pHdr->curVersion!=p->pDb->pKeys->hdr.curVersion ){
    return tdeErr(TDE_UNSUPPORTED, "the data key changed under this connection (a rekey); reopen it");
  }
  memcpy(aDek, p->pDb->pKeys->aDek, 32);
  return TDE_OK;
}

/*
** The header update: re-read, check, edit, seal, write both slots (the
** one not in force first), syncing after each (tdeHdrWrite).  bEpoch (a
** version-2 epoch update, docs/FORMAT.md "Epoch updates"): the sequence
** number stays, and only the last 512-byte sector of each slot changes
** (log epoch, WAL salts, MAC, checksum), so each write is one aligned
** sector that a power loss cannot tear; a slot whose other bytes differ
** (after a torn update or damage) is written whole.
*/
static int headerUpdate(TdeFile *p, TdeHeaderEdit xEdit, void *pArg, int bEpoch){
  TdeDbKeys *k = p->pDb->pKeys;
  TdeHdrRead r;
  TdeHeader *pCur = 0;
  int rc = SQLITE_OK, trc;

  if( !k ) return SQLITE_MISUSE;
  if( p->bReadOnly ) return SQLITE_READONLY;
  memset(&r, 0, sizeof(r));
  pCur = sqlite3_malloc(sizeof(*pCur));
  if( !pCur ){ rc = SQLITE_NOMEM; goto done; }
  r.nRead = TDE_HEADER_BYTES;
  r.aDbid = k->hdr.dbid;
  r.xKey = updateKey;
  r.pHdr = pCur;
  rc = tdeHdrRead(p, &r, &trc);
  if( rc ) goto done;
  if( trc ){ rc = tdeSqliteRc(trc); goto done; }
  if( !bEpoch ) pCur->seq++;
  rc = xEdit(p, pCur, pArg);
  if( rc ) goto done;
  /* The MAC is keyed by the new header's current data key (a rekey's
  ** edit adds that version to k before returning). */
  {
    const TdeDekVer *d = tdeKeysFind(k, pCur->curVersion);
    if( !d ){ rc = SQLITE_ERROR; goto done; }
    rc = tdeHdrWrite(p, &r, pCur, d->aDek, bEpoch);
    if( rc ) goto done;
  }
  k->hdr = *pCur;
  k->iSlot = 1 - r.iSlot;
  k->bSlotDamaged = 0;
  {
    /* Forget versions no longer listed, unwrap new ones, alias the current
    ** one.  If that fails (no memory, keystore), the new header is durable
    ** but this handle's keys do not match it: mark the header held here
    ** as older than any on disk (sequence and epoch 0), so the next lock
    ** reads it again, and report the failure -- never carry on sealing
    ** with keys the header does not name. */
    int trcKeys = tdeKeysUnlockAll(k);
    if( trcKeys ){
      tdeLog(TDE_LOG_ERROR, "%s: header written, but its keys could not be loaded: %s",
             p->zName ? p->zName : "", tde_last_error());
      rc = tdeSqliteRc(trcKeys);
      k->hdr.seq = 0;
      k->hdr.logEpoch = 0;
      goto done_keep;
    }
  }
  tdeKeysNoteMasterKey(k);
  tdeKeysCheckStale(k);

done:
  if( rc ){
    /* Forget any data-key version the edit added for a header that did not
    ** become durable (a retried rekey must not reuse it). */
    tdeKeysUnlockAll(k);
    tdeErrClear();
  }
done_keep:
  if( pCur ){ tdeWipe(pCur, sizeof(*pCur)); sqlite3_free(pCur); }
  tdeHdrReadDone(&r);
  return rc;
}

int tdeMainHeaderUpdate(TdeFile *p, TdeHeaderEdit xEdit, void *pArg){
  return headerUpdate(p, xEdit, pArg, 0);
}

/* ---- version-2 epoch updates ------------------------------------------- */

typedef struct EpochCtx {
  uint64_t logEpoch;         /* the new L */
  const uint8_t *aSalt;      /* WAL salts bound to it, NULL for a journal */
} EpochCtx;

static int editEpoch(TdeFile *p, TdeHeader *h, void *pArg){
  EpochCtx *c = pArg;
  if( h->version<TDE_FORMAT_V2 ) return SQLITE_MISUSE;
  if( c->logEpoch!=h->logEpoch+1 ){
    tdeErr(TDE_FORMAT, "log epoch moved under the write lock (%llu, expected %llu)",
           (unsigned long long)h->logEpoch, (unsigned long long)c->logEpoch-1);
    tdeLog(TDE_LOG_ERROR, "%s: %s", p->zName ? p->zName : "", tde_last_error());
    return SQLITE_IOERR_AUTH;
  }
  h->logEpoch = c->logEpoch;
  if( c->aSalt ) memcpy(h->aWalSalt, c->aSalt, 8);
  else memset(h->aWalSalt, 0, 8);
  return SQLITE_OK;
}

int tdeMainEpochUpdate(TdeFile *p, uint64_t logEpoch, const uint8_t *aSalt){
  EpochCtx c;
  c.logEpoch = logEpoch;
  c.aSalt = aSalt;
  return headerUpdate(p, editEpoch, &c, 1);   /* sequence unchanged, epoch + 1 */
}

int tdeMainFreshnessUpdate(TdeFile *p, TdeHeaderEdit xEdit, void *pArg){
  return headerUpdate(p, xEdit, pArg, 1);    /* sequence unchanged */
}

/* ---- rotation ----------------------------------------------------------- */

typedef struct RewrapCtx {
  uint8_t ksType;
  const char *zKeep;         /* master key id to keep */
} RewrapCtx;

static int dropOtherSameKeystore(const TdeWrapEntry *e, void *pArg){
  RewrapCtx *c = pArg;
  return e->ksType==c->ksType && strcmp(e->zKeyId, c->zKeep)!=0;
}

/*
** Re-wrap the current data key under the keystore's current master key and
** drop the wrappings by this keystore's other (older) master keys.
** Wrappings by other keystores (a migration in progress) stay.
*/
int tdeEditRewrap(TdeFile *p, TdeHeader *h, void *pArg){
  TdeDbKeys *k = p->pDb->pKeys;
  char zCur[TDE_KEYID_MAX+1];
  RewrapCtx c;
  int trc;
  TDE_UNUSED(pArg);
  trc = k->pKs->pMethods->xCurrentKey(k->pKs, zCur, sizeof(zCur));
  if( trc==TDE_OK ) trc = tdeKeyringAddWrap(k->pKs, h, h->curVersion, k->aDek, zCur);
  if( trc ) return tdeSqliteRc(trc);
  c.ksType = k->pKs->pMethods->typeId;
  c.zKeep = zCur;
  keyringFilter(h, dropOtherSameKeystore, &c);
  return SQLITE_OK;
}

/* Re-wrap the data key under the keystore's current master key (header
** only) and leave one audit line zOp; zDetail on success, the error
** otherwise.  Used by rotation (tde_db_rewrap) and by the re-wrap at the
** first write after a rotation. */
int tdeMainRewrapAudited(TdeFile *p, const char *zOp, const char *zDetail){
  char zOld[TDE_KEYID_MAX+1];
  TdeAuditRec r;
  int rc;
  memcpy(zOld, p->pDb->pKeys->zMasterKey, sizeof(zOld));
  rc = tdeMainHeaderUpdate(p, tdeEditRewrap, 0);
  tdeAuditInit(&r, zOp);
  r.bFailure = rc!=SQLITE_OK;
  r.zDbPath = p->zName;
  r.aDbid = p->pDb->pKeys->hdr.dbid;
  r.zKeystore = p->pDb->pKeys->pKs->pMethods->zName;
  r.zKeyId = zOld[0] ? zOld : 0;
  r.zNewKeyId = rc==SQLITE_OK ? p->pDb->pKeys->zMasterKey : 0;
  r.keyVersion = p->pDb->pKeys->hdr.curVersion;
  r.zDetail = rc==SQLITE_OK ? zDetail : tde_last_error();
  tdeAudit(p->pDb->pKeys->pCfg, &r);
  return rc;
}

/* A re-wrap left behind by a master-key rotation.  Not fatal for the
** write when it fails: the old wrapping still works. */
static void tdeMainRewrap(TdeFile *p){
  int rc = tdeMainRewrapAudited(p, "header_rewrap",
                                "re-wrapped at the first write after a master-key rotation");
  if( rc ){
    tdeLog(TDE_LOG_WARNING, "%s: could not re-wrap the data key under the current master key "
           "(SQLite error %d); will retry", p->zName ? p->zName : "", rc);
    p->pDb->pKeys->bStaleWrap = 0;   /* do not retry on every write of this connection */
  }
}

/* Leaves the header exactly as it is (a new sequence number, both slots
** rewritten). */
static int editNothing(TdeFile *p, TdeHeader *h, void *pArg){
  TDE_UNUSED(p); TDE_UNUSED(h); TDE_UNUSED(pArg);
  return SQLITE_OK;
}

/* Rewrite the header slot that failed its checksum when the file was
** opened: a crash during a header update tears the slot being written,
** and until it is rewritten `verify` reports it.  Any header update
** rewrites both slots; skip it when another connection already did. */
static void tdeMainRepairSlot(TdeFile *p){
  TdeDbKeys *k = p->pDb->pKeys;
  uint8_t *aRegion = sqlite3_malloc(TDE_HEADER_BYTES);
  TdeHeader *pTmp = sqlite3_malloc(sizeof(*pTmp));
  int iBad = -1, bShort = 0, rc;
  if( !aRegion || !pTmp ) goto done;       /* try again at the next write */
  rc = tdeRealRead(p, aRegion, TDE_HEADER_BYTES, 0, &bShort);
  if( rc || bShort ) goto done;
  for(int i=0; i<2; i++){
    if( tdeHeaderDecode(aRegion + i*TDE_SLOT_SIZE, pTmp)!=TDE_OK ) iBad = i;
  }
  tdeErrClear();
  k->bSlotDamaged = 0;
  if( iBad<0 ) goto done;
  rc = tdeMainHeaderUpdate(p, editNothing, 0);
  {
    TdeAuditRec r;
    tdeAuditInit(&r, "header_repair");
    r.bFailure = rc!=SQLITE_OK;
    r.zDbPath = p->zName;
    r.aDbid = k->hdr.dbid;
    r.keyVersion = k->hdr.curVersion;
    r.zDetail = rc==SQLITE_OK ? "rewrote a header slot that failed its checksum "
                                "(a header update interrupted by a crash, or damage)"
                              : tde_last_error();
    tdeAudit(k->pCfg, &r);
  }
  if( rc ){
    tdeLog(TDE_LOG_WARNING, "%s: could not rewrite damaged header slot %d (SQLite error %d)",
           p->zName ? p->zName : "", iBad, rc);
  }else{
    tdeLog(TDE_LOG_WARNING, "%s: rewrote damaged header slot %d", p->zName ? p->zName : "", iBad);
  }
done:
  if( pTmp ){ tdeWipe(pTmp, sizeof(*pTmp)); sqlite3_free(pTmp); }
  sqlite3_free(aRegion);
}

/* Header work due at a write transaction (the caller holds SQLite's write
** lock): a flag test when nothing is due.  Never fails the write. */
int tdeMainHeaderDue(TdeFile *p){
  if( !p->pDb->pKeys || p->bReadOnly ) return SQLITE_OK;
  if( p->pDb->pKeys->bStaleWrap ) tdeMainRewrap(p);        /* rewrites both slots too */
  if( p->pDb->pKeys->bSlotDamaged ) tdeMainRepairSlot(p);
  return SQLITE_OK;
}

/* ---- keystore migration -------------------------------------------------- */

typedef struct MigrateCtx {
  TdeKeystore *pNew;
  int bDropOthers;
} MigrateCtx;

static int dropNotInNew(const TdeWrapEntry *e, void *pArg){
  MigrateCtx *c = pArg;
  return !(e->ksType==c->pNew->pMethods->typeId && c->pNew->pMethods->xHasKey(c->pNew, e->zKeyId));
}

static int editMigrate(TdeFile *p, TdeHeader *h, void *pArg){
  MigrateCtx *c = pArg;
  char zCur[TDE_KEYID_MAX+1];
  int trc = c->pNew->pMethods->xCurrentKey(c->pNew, zCur, sizeof(zCur));
  if( trc==TDE_OK ) trc = tdeKeyringAddWrap(c->pNew, h, h->curVersion, p->pDb->pKeys->aDek, zCur);
  if( trc ) return tdeSqliteRc(trc);
  if( c->bDropOthers ) keyringFilter(h, dropNotInNew, c);
  return SQLITE_OK;
}

/* Do two configurations write to the same audit log? */
static int sameAuditLog(const TdeConfig *a, const TdeConfig *b){
  char zA[PATH_MAX], zB[PATH_MAX];
  if( !a || !b ) return 0;
  if( tdeConfigPath(a, "audit_log", zA, sizeof(zA))!=TDE_OK ){ tdeErrClear(); return 0; }
  if( tdeConfigPath(b, "audit_log", zB, sizeof(zB))!=TDE_OK ){ tdeErrClear(); return 0; }
  return strcmp(zA, zB)==0;
}

int tdeMainMigrate(TdeFile *p, TdeKeystore *pNew, const TdeConfig *pNewCfg, int bDropOthers){
  MigrateCtx c;
  int rc;
  c.pNew = pNew;
  c.bDropOthers = bDropOthers;
  rc = tdeMainHeaderUpdate(p, editMigrate, &c);
  {
    TdeAuditRec r;
    char zCur[TDE_KEYID_MAX+1];
    zCur[0] = 0;
    if( pNew->pMethods->xCurrentKey(pNew, zCur, sizeof(zCur))!=TDE_OK ) zCur[0] = 0;
    tdeAuditInit(&r, bDropOthers ? "keystore_drop" : "keystore_migrate");
    r.bFailure = rc!=SQLITE_OK;
    r.zDbPath = p->zName;
    r.aDbid = p->pDb->pKeys->hdr.dbid;
    r.zKeystore = pNew->pMethods->zName;
    r.zKeyId = p->pDb->pKeys->zMasterKey[0] ? p->pDb->pKeys->zMasterKey : 0;
    r.zNewKeyId = zCur[0] ? zCur : 0;
    r.keyVersion = p->pDb->pKeys->hdr.curVersion;
    r.zDetail = rc ? tde_last_error() : (bDropOthers ? "kept only the wrappings of the new keystore"
                                                     : "added a wrapping under the new keystore");
    tdeAudit(p->pDb->pKeys->pCfg, &r);
    if( pNewCfg!=p->pDb->pKeys->pCfg && !sameAuditLog(pNewCfg, p->pDb->pKeys->pCfg) ) tdeAudit(pNewCfg, &r);
  }
  return rc;
}
