/*
** Upgrade of a format-version-2 database to version 3 in place
** (docs/FORMAT.md "Upgrade from version 2"), for tde_db_upgrade_to() and
** `sqlite-tde upgrade --to 3`; a version-1 database goes to 2 first
** (upgrade.c).
**
** Every page moves to its version-3 place, from the last page down, in
** batches whose new places cover only old places of pages already moved;
** the header's upgrade cursor c records the first page moved (a page
** m >= c is at its new place), so the layout (keys/layout.c) finds every
** page at every instant and a crash at any point resumes.  Each batch is
** synced, then recorded by a full header update.  Then the map pages move
** from DB-tdemap into their regions (pagemap.c), c = 0, and DB-tdemap is
** deleted.  Under the EXCLUSIVE lock on the database file, taken without
** waiting: no other connection reads a page mid-move.  A writer that finds
** c != 0 finishes the move first (tdeUpgradeFinish, from vfs.c's
** write-lock check).  A rekey's finish runs the same move when the
** configuration's new databases are version 3 (tdeMainUpgradeAfterRekey,
** from tde_db_rekey).
**
** Above the page map in the order of src/db (it calls pagemap, rekey,
** upgrade, keyops, page1, dek, fileio; only src/vfs calls it).
**
** Must never: copy a page over one whose move is not recorded; copy
** anything that does not authenticate as the page it is taken for (an
** all-zero hole excepted); re-seal a page (the copy is verbatim: the
** associated data names page number and size, not the place).
*/
#include "vfs/vfs_int.h"

#include <stdio.h>

typedef struct MoveEdit {
  int bStart;                 /* version 2 -> 3 with the cursor */
  uint64_t c;                 /* the cursor to record */
  const TdeMapFields *pMap;   /* the map's fields (at c = 0), or NULL */
} MoveEdit;

static int editMove(TdeFile *p, TdeHeader *h, void *pArg){
  const MoveEdit *e = pArg;
  TDE_UNUSED(p);
  if( e->bStart ){
    if( h->version!=TDE_FORMAT_V2 ) return SQLITE_MISUSE;
    h->version = TDE_FORMAT_V3;
  }else if( h->version!=TDE_FORMAT_V3 || h->upgradeCursor==0 ){
    return SQLITE_MISUSE;
  }
  h->upgradeCursor = e->c;
  if( e->pMap ){
    memcpy(h->aMapRoot, e->pMap->aRoot, 16);
    h->mapGen = e->pMap->G;
    h->mapPages = e->pMap->n;
  }
  return SQLITE_OK;
}

/* Does aIn authenticate as page pgno?  1 yes, 0 no, < 0 an error (the
** negated SQLite code: the check could not be made).  aTmp: pgsz bytes,
** wiped. */
static int moveIsPage(TdeFile *p, const uint8_t *aIn, uint8_t *aTmp, uint32_t pgsz, uint32_t pgno){
  int rc = tdeOpenPageTo(p, aIn, aTmp, pgsz, pgno, 0);
  tdeWipe(aTmp, pgsz);
  if( rc==SQLITE_OK ) return 1;
  if( rc==SQLITE_IOERR_AUTH ) return 0;
  return -rc;
}

/* Pages from the old place of pgno to its new one: M/P * (1 + group). */
static uint32_t moveShift(uint32_t pgsz, uint32_t pgno){
  return (uint32_t)(tdeLayoutRegionBytes(pgsz) / pgsz) * (1 + (pgno - 1) / TDE_LAYOUT_K);
}

/*
** Copy pages b down to a from their version-2 places to their version-3
** places (FORMAT.md step 2).  A page whose new place already
** authenticates as it is skipped (moved before a crash, or before the
** header in force was written); one whose old place does not is an error
** that stops the move: the header may come from an earlier point of it,
** and its old place may hold another page's new copy.  An all-zero old
** place (a hole beyond the committed size) is copied as it is.  *pbWrote
** set if anything was written.  aBuf: 3 * pgsz bytes.
*/
static int moveBatch(TdeFile *p, uint32_t a, uint32_t b, uint8_t *aBuf, int *pbWrote){
  uint32_t pgsz = p->pDb->pgsz;
  TdeLayout L2 = { TDE_FORMAT_V2, pgsz, 0 }, L3 = { TDE_FORMAT_V3, pgsz, 0 };
  uint8_t *aOld = aBuf, *aNew = aBuf + pgsz, *aTmp = aBuf + 2*(size_t)pgsz;
  for(uint32_t m=b; m>=a; m--){
    int bShort = 0, rc, iIs;
    rc = tdeRealRead(p, aNew, (int)pgsz, tdeLayoutPageOff(&L3, m), &bShort);
    if( rc ) return rc;
    iIs = bShort ? 0 : moveIsPage(p, aNew, aTmp, pgsz, m);
    if( iIs<0 ) return -iIs;
    if( iIs ) continue;
    rc = tdeRealRead(p, aOld, (int)pgsz, tdeLayoutPageOff(&L2, m), &bShort);
    if( rc ) return rc;
    iIs = bShort ? 0 : moveIsPage(p, aOld, aTmp, pgsz, m);
    if( iIs<0 ) return -iIs;
    if( !iIs && (bShort || !tdePageIsZero(aOld, pgsz)) ){
      tdeErr(TDE_AUTH, "%s: upgrade: page %u authenticates neither at its version-3 place nor at "
             "its version-2 place (the header region was put back from an earlier point of the "
             "move, or the file was changed); the move stopped, nothing more was written",
             p->zName ? p->zName : "", m);
      tdeLog(TDE_LOG_ERROR, "%s", tde_last_error());
      return SQLITE_IOERR_AUTH;
    }
    rc = p->pReal->pMethods->xWrite(p->pReal, aOld, (int)pgsz, tdeLayoutPageOff(&L3, m));
    if( rc ) return rc;
    *pbWrote = 1;
    if( m==1 ) break;
  }
  return SQLITE_OK;
}

/* The move from the header's cursor down, then the map (FORMAT.md steps
** 2 and 3).  Header at version 3 with c != 0; caller holds EXCLUSIVE. */
static int moveRun(TdeFile *p){
  uint32_t pgsz = p->pDb->pgsz;
  uint64_t c = p->pDb->pKeys->hdr.upgradeCursor;
  TdeLayout L3 = { TDE_FORMAT_V3, pgsz, 0 };
  TdeMapFields map;
  MoveEdit e = { 0, 0, 0 };
  sqlite3_int64 sz = 0;
  uint8_t *aBuf;
  int rc;
  if( c>(uint64_t)UINT32_MAX + 1 ) return SQLITE_CORRUPT;
  aBuf = sqlite3_malloc64(3*(sqlite3_uint64)pgsz);
  if( !aBuf ) return SQLITE_NOMEM;
  rc = tdeMapCheckSource(p);         /* DB-tdemap as the header names it, before any write */
  while( rc==SQLITE_OK && c>1 ){
    uint32_t b = (uint32_t)(c - 1), a = b;
    int bWrote = 0;
    /* The batch: the new place of each of its pages covers only old
    ** places of pages > b, already moved (a + shift(a) > b). */
    while( a>1 && (uint64_t)(a - 1) + moveShift(pgsz, a - 1) > b ) a--;
    rc = moveBatch(p, a, b, aBuf, &bWrote);
    if( rc==SQLITE_OK && bWrote ){
      rc = p->pReal->pMethods->xSync(p->pReal, SQLITE_SYNC_NORMAL);
      e.c = a;
      if( rc==SQLITE_OK ) rc = tdeMainHeaderUpdate(p, editMove, &e);
    }
    c = a;
    if( rc==SQLITE_OK && tdeFaultHook && tdeFaultHook(TDE_FAULT_UPGRADE_BATCH) ){
      tdeErr(TDE_IO, "upgrade: stopped after a batch (test fault)");
      rc = SQLITE_IOERR;
    }
  }
  sqlite3_free(aBuf);
  if( rc ) return rc;
  /* Every page at its new place (c = 1, or a header in force from an
  ** earlier point whose batches were all found moved: the map stays
  ** DB-tdemap's while c != 0, and no reader runs under our lock). */
  rc = p->pReal->pMethods->xFileSize(p->pReal, &sz);
  if( rc==SQLITE_OK ) rc = tdeMapIntoFile(p, (uint32_t)(tdeLayoutSqliteSize(&L3, sz) / pgsz), &map);
  e.c = 0;
  e.pMap = &map;
  if( rc==SQLITE_OK ) rc = tdeMainHeaderUpdate(p, editMove, &e);
  if( rc==SQLITE_OK ){
    tdeMapFree(p);
    rc = tdeMapRemoveFile(p, 0);
  }
  return rc;
}

/* The EXCLUSIVE lock on the database file for the move, taken without
** waiting below SQLite (in WAL mode SQLite holds only SHARED, and every
** other connection too: EXCLUSIVE means no other is open).  *pbDrop: drop
** back to SHARED after (WAL mode); in rollback mode SQLite's end of the
** transaction releases it. */
static int moveLock(TdeFile *p, int *pbDrop){
  int rc;
  *pbDrop = 0;
  if( p->pDb->eLockHeld>=SQLITE_LOCK_EXCLUSIVE ) return SQLITE_OK;
  rc = p->pReal->pMethods->xLock(p->pReal, SQLITE_LOCK_EXCLUSIVE);
  if( rc==SQLITE_OK ){
    *pbDrop = p->pDb->eLockHeld<=SQLITE_LOCK_SHARED;
    return SQLITE_OK;
  }
  if( p->pDb->eLockHeld<=SQLITE_LOCK_SHARED ) p->pReal->pMethods->xUnlock(p->pReal, SQLITE_LOCK_SHARED);
  if( rc==SQLITE_BUSY ){
    tdeErr(TDE_LOCKED, "%s: upgrade: other connections have the database open; the move to "
           "format version 3 needs it alone: nothing was changed, try again",
           p->zName ? p->zName : "");
  }
  return rc;
}

/* Move a version-2 database, or finish a version-3 header's move. */
static int upgradeMove(TdeFile *p, int *pbDone){
  TdeDbKeys *k = p->pDb->pKeys;
  int rc, bDrop = 0, bRun = 0, bStart = k->hdr.version==TDE_FORMAT_V2;
  if( tdeRekeyInProgress(k) ){
    tdeErr(TDE_ERROR, "%s: a rekey is in progress: finish it (`sqlite-tde rekey`) before the upgrade",
           p->zName ? p->zName : "");
    return SQLITE_ERROR;
  }
  if( !tdeUpgradeWalEmpty(p) ){
    tdeErr(TDE_LOCKED, "%s: the WAL still holds frames (a reader or a writer kept it from being "
           "emptied); nothing was changed, try again", p->zName ? p->zName : "");
    return SQLITE_BUSY;
  }
  if( !p->pDb->pgsz ){
    rc = tdeScratch(p);
    if( rc==SQLITE_OK ) rc = tdeMainDiscoverPgsz(p);
    if( rc==SQLITE_IOERR_SHORT_READ ){
      tdeErr(TDE_ERROR, "%s: upgrade: the database has no page yet; nothing to move",
             p->zName ? p->zName : "");
      return SQLITE_ERROR;
    }
    if( rc ) return rc;
  }
  rc = moveLock(p, &bDrop);
  if( rc ) return rc;
  rc = tdeMainRefreshIfChanged(p);
  if( rc==SQLITE_OK && bStart ){
    if( k->hdr.version!=TDE_FORMAT_V2 ){
      bStart = 0;                      /* another connection started it meanwhile */
    }else{
      TdeLayout L2 = { TDE_FORMAT_V2, p->pDb->pgsz, 0 };
      sqlite3_int64 sz = 0;
      MoveEdit e = { 1, 0, 0 };
      rc = tdeMapCheckSource(p);       /* nothing written unless DB-tdemap verifies */
      if( rc==SQLITE_OK ) rc = p->pReal->pMethods->xFileSize(p->pReal, &sz);
      e.c = (uint64_t)(tdeLayoutSqliteSize(&L2, sz) / p->pDb->pgsz) + 1;
      if( rc==SQLITE_OK ) rc = tdeMainHeaderUpdate(p, editMove, &e);
    }
  }
  bRun = rc==SQLITE_OK && k->hdr.version==TDE_FORMAT_V3 && k->hdr.upgradeCursor;
  if( bRun ) rc = moveRun(p);
  tdePage1Forget(p);
  if( bDrop ) p->pReal->pMethods->xUnlock(p->pReal, SQLITE_LOCK_SHARED);
  if( bStart || bRun || rc ){       /* else another connection finished it meanwhile */
    tdeUpgradeAudit(p, rc, bStart ? "format version 2 -> 3 (the page map inside the database file); "
                    "pages moved" : "format version 2 -> 3: an interrupted move finished");
  }
  if( rc==SQLITE_OK && (bStart || bRun) ) *pbDone = 1;
  return rc;
}

/* The rescue hook (xPageRescue, hooks.c): a connection that read the
** header before another process moved the pages (in rollback mode it
** holds no lock between read transactions) looks for a page at its old
** place, and it fails.  If the header on disk now names another layout
** (format version or cursor), it is adopted and the page read where it
** lies now; the caller's checks (the page map's) still run. */
static int moveRescue(TdeFile *p, uint32_t pgno, uint32_t pgsz, uint8_t *aOut, uint8_t aTag[16]){
  TdeLayout L0, L1;
  int bShort = 0, rc;
  if( !p->pDb->pKeys ) return SQLITE_IOERR_AUTH;
  L0 = tdeMainLayout(p, pgsz);
  if( tdeMainRefreshIfChanged(p)!=SQLITE_OK ) return SQLITE_IOERR_AUTH;
  L1 = tdeMainLayout(p, pgsz);
  if( L1.version==L0.version && L1.cursor==L0.cursor ) return SQLITE_IOERR_AUTH;
  rc = tdeRealRead(p, aOut, (int)pgsz, tdeLayoutPageOff(&L1, pgno), &bShort);
  if( rc || bShort ) return SQLITE_IOERR_AUTH;
  memcpy(aTag, aOut + pgsz - 24, 16);        /* for the page-map check, as for any page */
  return tdeOpenPage(p, aOut, pgsz, pgno, 0);
}

/* The load hook (xLoaded, hooks.c): a version-3 header with c = 0 never
** reads DB-tdemap; one left beside it (a crash between the move's last
** header update and the deletion, or a file put there) is deleted by a
** read-write open, audited once (the next open finds none); a read-only
** open or a standby's copy leaves it.  Never refuses the open: a file that
** cannot be deleted is still never read. */
static int upgradeLoaded(TdeFile *p, int bNew){
  const TdeDbKeys *k = p->pDb->pKeys;
  int bRemoved = 0;
  if( bNew || !k || p->bReadOnly || p->pDb->repl.bStandby ) return SQLITE_OK;
  if( k->hdr.version!=TDE_FORMAT_V3 || k->hdr.upgradeCursor!=0 ) return SQLITE_OK;
  if( tdeMapRemoveFile(p, &bRemoved)==SQLITE_OK && bRemoved ){
    tdeUpgradeAudit(p, SQLITE_OK, "a leftover page map of format version 2 removed");
  }
  return SQLITE_OK;
}

const TdeMainHook tdeUpgradeHook = {
  "upgrade",
  upgradeLoaded,              /* xLoaded */
  0,                          /* xWriteLock */
  0,                          /* xWriteEnd */
  0,                          /* xBeforeKeyDrop */
  moveRescue,                 /* xPageRescue */
  0,                          /* xWalLock */
  0,                          /* xWalEnd */
  0,                          /* xPageCheck */
  0,                          /* xWriteOutsideWal */
  0,                          /* xWalFold */
};

int tdeUpgradeFinish(TdeFile *p){
  int bDone = 0;
  const TdeDbKeys *k = p->pDb->pKeys;
  if( !k || k->hdr.version!=TDE_FORMAT_V3 || k->hdr.upgradeCursor==0 ) return SQLITE_OK;
  if( p->bReadOnly || p->pDb->repl.bStandby ) return SQLITE_READONLY;
  return upgradeMove(p, &bDone);
}

int tdeMainUpgrade(TdeFile *p, int iTo, int *pbDone){
  int rc = tdeMainUpgradeV2(p, pbDone);
  if( rc || iTo<TDE_FORMAT_V3 ) return rc;
  if( p->pDb->pKeys->hdr.version==TDE_FORMAT_V3 && p->pDb->pKeys->hdr.upgradeCursor==0 ) return SQLITE_OK;
  return upgradeMove(p, pbDone);
}

int tdeMainUpgradeAfterRekey(TdeFile *p){
  int bDone = 0, rc;
  const TdeDbKeys *k = p->pDb->pKeys;
  if( !k || (k->hdr.version==TDE_FORMAT_V3 && k->hdr.upgradeCursor==0) ) return SQLITE_OK;
  rc = tdeMainUpgrade(p, TDE_FORMAT_V3, &bDone);
  if( rc==SQLITE_BUSY ){
    /* Nothing moved (the lock, or WAL frames, kept it from starting): said
    ** here, as upgradeMove audits only a move it began. */
    char zWhy[256];
    snprintf(zWhy, sizeof(zWhy), "%s", tde_last_error());
    tdeErr(TDE_LOCKED, "%s: the rekey finished, but the move to format version 3 is left for "
           "`sqlite-tde upgrade`: %s", p->zName ? p->zName : "", zWhy);
    tdeUpgradeAudit(p, rc, 0);
  }
  if( rc ){
    tdeLog(TDE_LOG_WARNING, "%s: rekey finished; format version 3 not reached: %s",
           p->zName ? p->zName : "", tde_last_error());
  }
  return rc;
}
