/*
** The shipper's keyless lock (walock.h): SQLite's WAL locks taken on the
** WAL index itself, through the VFS below the tde VFS, so that the shipper
** and the archiver never open the database through tde, never read a page
** and never hold a key (docs/ARCHIVE.md "Keys and credentials").
**
** The protocol is SQLite's own (walformat.html): a connection holds a
** SHARED lock on the database file while it has it open (so the last
** connection to close, which deletes -wal and -shm, is never one while
** the shipper has them mapped); the WAL write lock is slot 0 of the WAL
** index, the checkpoint lock slot 1; the WAL index header is two copies
** of 48 bytes with a checksum, trusted only when both copies agree, it is
** initialised and its checksum verifies.  Anything else needs SQLite's
** recovery, which reads pages and so needs the key: the shipper waits for
** a connection of the application to do it.
**
** Must never: create the database or its -shm, run recovery, write to the
** WAL index, or wait (every lock is tried once; the caller decides when
** to try again).
*/
#include "repl/walock.h"

#include <string.h>

#define WALOCK_REGION       32768     /* one region of the WAL index */
#define WALOCK_VERSION      3007000   /* iVersion of the WAL index header */
#define WALOCK_WRITE        0         /* slot of the WAL write lock */
#define WALOCK_CKPT         1         /* slot of the checkpoint lock */

/* The header's copies agree, it is initialised, of the known version and
** its checksum (SQLite's WAL checksum over bytes [0,40) in native byte
** order, stored at 40) verifies. */
static int walockHeaderOk(const uint8_t *a){
  uint32_t x[10], c[2], v, s0 = 0, s1 = 0;
  if( memcmp(a, a+48, 48)!=0 || a[12]==0 ) return 0;
  memcpy(&v, a, 4);
  if( v!=WALOCK_VERSION ) return 0;
  memcpy(x, a, 40);
  for(int i=0; i<10; i+=2){
    s0 += x[i] + s1;
    s1 += x[i+1] + s0;
  }
  memcpy(c, a+40, 8);
  return s0==c[0] && s1==c[1];
}

int tdeWalLockOpen(TdeWalLock *pLock, const char *zDb){
  sqlite3_vfs *pTde = sqlite3_vfs_find(TDE_VFS_NAME);
  char *zWal = sqlite3_mprintf("%s-wal", zDb), *zJrnl = sqlite3_mprintf("%s-journal", zDb);
  int flagsOut = 0, rc = TDE_OK, src;
  memset(pLock, 0, sizeof(*pLock));
  pLock->pVfs = pTde && pTde->pAppData ? (sqlite3_vfs*)pTde->pAppData : sqlite3_vfs_find(0);
  /* The name laid out SQLite's way, as shipWalOpen's: a VFS below may call
  ** sqlite3_uri_parameter() on it; the unix VFS keeps the pointer. */
  if( zWal && zJrnl ) pLock->zBlock = sqlite3_create_filename(zDb, zJrnl, zWal, 0, 0);
  sqlite3_free(zWal);
  sqlite3_free(zJrnl);
  if( !pLock->pVfs ) return tdeErr(TDE_ERROR, "no VFS below tde");
  if( !pLock->zBlock ) return TDE_NOMEM;
  pLock->pFile = sqlite3_malloc(pLock->pVfs->szOsFile);
  if( !pLock->pFile ){ rc = TDE_NOMEM; goto done; }
  memset(pLock->pFile, 0, (size_t)pLock->pVfs->szOsFile);
  src = pLock->pVfs->xOpen(pLock->pVfs, pLock->zBlock, pLock->pFile,
                           SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_READWRITE, &flagsOut);
  if( src!=SQLITE_OK ){
    rc = tdeErr(TDE_IO, "%s: cannot open: %s", zDb, sqlite3_errstr(src));
  }else if( pLock->pFile->pMethods->iVersion<2 || !pLock->pFile->pMethods->xShmMap ){
    rc = tdeErr(TDE_UNSUPPORTED, "%s: the VFS below tde has no shared memory (WAL index)", zDb);
  }
done:
  if( rc ) tdeWalLockClose(pLock);
  return rc;
}

/* The database file's lock, raised one step at a time as SQLite does. */
static int walockDbLock(TdeWalLock *pLock, int eLock){
  sqlite3_file *f = pLock->pFile;
  while( pLock->eDbLock<eLock ){
    int eNext = pLock->eDbLock==SQLITE_LOCK_NONE ? SQLITE_LOCK_SHARED
              : pLock->eDbLock==SQLITE_LOCK_SHARED ? SQLITE_LOCK_RESERVED : SQLITE_LOCK_EXCLUSIVE;
    int rc = f->pMethods->xLock(f, eNext);
    if( rc!=SQLITE_OK ) return rc;
    pLock->eDbLock = eNext;
  }
  return SQLITE_OK;
}

static void walockDbUnlock(TdeWalLock *pLock, int eLock){
  if( pLock->eDbLock>eLock ){
    pLock->pFile->pMethods->xUnlock(pLock->pFile, eLock);
    pLock->eDbLock = eLock;
  }
}

/* Whether file zName of the database exists in the VFS below; with
** piSize, its size (0 when absent). */
static int walockExists(TdeWalLock *pLock, const char *zName, sqlite3_int64 *piSize){
  sqlite3_vfs *pVfs = pLock->pVfs;
  int bExists = 0, flagsOut = 0;
  if( piSize ) *piSize = 0;
  if( !zName || pVfs->xAccess(pVfs, zName, SQLITE_ACCESS_EXISTS, &bExists)!=SQLITE_OK || !bExists ) return 0;
  if( piSize ){
    sqlite3_file *f = sqlite3_malloc(pVfs->szOsFile);
    if( !f ) return 1;
    memset(f, 0, (size_t)pVfs->szOsFile);
    if( pVfs->xOpen(pVfs, zName, f, SQLITE_OPEN_WAL | SQLITE_OPEN_READONLY, &flagsOut)==SQLITE_OK ){
      if( f->pMethods->xFileSize(f, piSize)!=SQLITE_OK ) *piSize = 0;
    }
    if( f->pMethods ) f->pMethods->xClose(f);
    sqlite3_free(f);
  }
  return 1;
}

/*
** Region 0 of the WAL index, mapped once it exists (never created: a
** missing -shm is not opened, and bExtend 0 never grows an empty one),
** under the database file's SHARED lock, kept from then on as SQLite's
** connections keep theirs.
*/
static int walockMap(TdeWalLock *pLock, int *peWait){
  sqlite3_file *f = pLock->pFile;
  void volatile *pMap = 0;
  int rc;
  if( pLock->pShm ) return TDE_OK;
  rc = walockDbLock(pLock, SQLITE_LOCK_SHARED);
  if( rc==SQLITE_BUSY ){ *peWait = TDE_WALOCK_BUSY; return TDE_LOCKED; }
  if( rc ) return tdeErr(TDE_IO, "%s: cannot lock: %s", pLock->zBlock, sqlite3_errstr(rc));
  if( !pLock->bShmOpen ){
    char *zShm = sqlite3_mprintf("%s-shm", pLock->zBlock);
    int bExists = walockExists(pLock, zShm, 0);
    sqlite3_free(zShm);
    if( !bExists ){
      walockDbUnlock(pLock, SQLITE_LOCK_NONE);   /* a database not in WAL mode: never block its writers */
      return TDE_OK;
    }
  }
  rc = f->pMethods->xShmMap(f, 0, WALOCK_REGION, 0, &pMap);
  if( rc==SQLITE_OK ) pLock->bShmOpen = 1;
  if( rc==SQLITE_OK && !pMap ){
    /* Empty: not kept open, or the last connection's close could delete
    ** the file under us and a later one make another. */
    f->pMethods->xShmUnmap(f, 0);
    pLock->bShmOpen = 0;
  }
  if( !pMap ) walockDbUnlock(pLock, SQLITE_LOCK_NONE);
  if( rc==SQLITE_BUSY ){ *peWait = TDE_WALOCK_BUSY; return TDE_LOCKED; }
  if( rc ) return tdeErr(TDE_IO, "%s-shm: cannot map the WAL index: %s", pLock->zBlock, sqlite3_errstr(rc));
  pLock->pShm = pMap;
  return TDE_OK;
}

/* No WAL index: with TDE_WALOCK_DBFILE and no WAL content, the database
** file's EXCLUSIVE lock (no connection has it open, none can open it
** meanwhile, so the file is the whole database). */
static int walockNoIndex(TdeWalLock *pLock, unsigned flags, int *peWait){
  sqlite3_int64 nWal = 0;
  int rc;
  if( !walockExists(pLock, sqlite3_filename_wal(pLock->zBlock), &nWal) ) nWal = 0;
  *peWait = nWal>TDE_WAL_HDR ? TDE_WALOCK_RECOVER : TDE_WALOCK_NOINDEX;
  if( !(flags & TDE_WALOCK_DBFILE) || nWal>TDE_WAL_HDR ) return TDE_LOCKED;
  rc = walockDbLock(pLock, SQLITE_LOCK_EXCLUSIVE);
  if( rc==SQLITE_OK ){
    /* Again under the lock (a connection may have come and gone); a -shm
    ** left now is stale, as SQLite's next connection will find it. */
    sqlite3_int64 nJrnl = 0;
    if( !walockExists(pLock, sqlite3_filename_wal(pLock->zBlock), &nWal) ) nWal = 0;
    /* A rollback journal with content: a hot one (the file is not whole). */
    if( !walockExists(pLock, sqlite3_filename_journal(pLock->zBlock), &nJrnl) ) nJrnl = 0;
    if( nWal<=TDE_WAL_HDR && nJrnl==0 ){
      *peWait = 0;
      return TDE_OK;
    }
    *peWait = nWal>TDE_WAL_HDR ? TDE_WALOCK_RECOVER : TDE_WALOCK_NOINDEX;
  }
  walockDbUnlock(pLock, SQLITE_LOCK_NONE);
  if( rc!=SQLITE_OK && rc!=SQLITE_BUSY ) return tdeErr(TDE_IO, "%s: cannot lock: %s", pLock->zBlock, sqlite3_errstr(rc));
  if( rc==SQLITE_BUSY ) *peWait = TDE_WALOCK_BUSY;
  return TDE_LOCKED;
}

int tdeWalLockTake(TdeWalLock *pLock, unsigned flags, TdeWalEnd *pEnd, int *peWait){
  sqlite3_file *f = pLock->pFile;
  uint8_t a[96];
  int rc;
  memset(pEnd, 0, sizeof(*pEnd));
  *peWait = 0;
  if( !f ) return tdeErr(TDE_MISUSE, "WAL lock not open");
  rc = walockMap(pLock, peWait);
  if( rc ) return rc;
  if( !pLock->pShm ) return walockNoIndex(pLock, flags, peWait);
  rc = f->pMethods->xShmLock(f, WALOCK_WRITE, 1, SQLITE_SHM_LOCK | SQLITE_SHM_EXCLUSIVE);
  if( rc==SQLITE_OK ){
    pLock->nShmHeld = 1;
    if( flags & TDE_WALOCK_CKPT ){
      rc = f->pMethods->xShmLock(f, WALOCK_CKPT, 1, SQLITE_SHM_LOCK | SQLITE_SHM_EXCLUSIVE);
      if( rc==SQLITE_OK ) pLock->nShmHeld = 2;
    }
  }
  if( rc!=SQLITE_OK ){
    tdeWalLockRelease(pLock);
    if( rc==SQLITE_BUSY ){ *peWait = TDE_WALOCK_BUSY; return TDE_LOCKED; }
    return tdeErr(TDE_IO, "%s-shm: cannot lock the WAL index: %s", pLock->zBlock, sqlite3_errstr(rc));
  }
  /* Under the write lock no writer changes the header (recovery too holds
  ** that lock), so a header that does not verify is a crashed writer's. */
  for(int i=0; i<96; i++) a[i] = ((const volatile uint8_t*)pLock->pShm)[i];
  if( !walockHeaderOk(a) ){
    tdeWalLockRelease(pLock);
    *peWait = TDE_WALOCK_RECOVER;
    return TDE_LOCKED;
  }
  memcpy(&pEnd->mxFrame, a+16, 4);
  memcpy(pEnd->aSalt, a+32, 8);
  pEnd->bKnown = 1;
  return TDE_OK;
}

void tdeWalLockRelease(TdeWalLock *pLock){
  sqlite3_file *f = pLock->pFile;
  if( !f ) return;
  if( pLock->nShmHeld ){
    f->pMethods->xShmLock(f, WALOCK_WRITE, pLock->nShmHeld, SQLITE_SHM_UNLOCK | SQLITE_SHM_EXCLUSIVE);
    pLock->nShmHeld = 0;
  }
  /* The SHARED lock stays while the index is mapped. */
  walockDbUnlock(pLock, pLock->pShm ? SQLITE_LOCK_SHARED : SQLITE_LOCK_NONE);
}

void tdeWalLockClose(TdeWalLock *pLock){
  if( pLock->pFile ){
    tdeWalLockRelease(pLock);
    if( pLock->bShmOpen ) pLock->pFile->pMethods->xShmUnmap(pLock->pFile, 0);
    walockDbUnlock(pLock, SQLITE_LOCK_NONE);
    if( pLock->pFile->pMethods ) pLock->pFile->pMethods->xClose(pLock->pFile);
    sqlite3_free(pLock->pFile);
  }
  sqlite3_free_filename(pLock->zBlock);
  memset(pLock, 0, sizeof(*pLock));
}
