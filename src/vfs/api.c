/*
** Registration of the tde VFS, the loadable-extension entry point, the
** per-connection set-up (reserved bytes for new databases, status table),
** and tde_verify().
**
** New databases need TDE_RESERVE_BYTES reserved at the end of every page
** before SQLite writes page 1.  The auto-extension asks for them for the
** main database of every connection as it opens, outside any VFS method
** (SQLITE_FCNTL_RESERVE_BYTES only applies while the database is empty, so
** it is harmless on existing ones); the VFS asks only for the databases no
** hook reaches (ATTACH, VACUUM INTO, a connection with no auto-extension:
** vfs.c, tdeMainRequestReserve), and SELECT tde_reserve('schema') stays
** for compatibility.  A page 1 without them is refused -- nothing is ever
** written in plaintext.
*/
#include "vfs/vfs_int.h"
#include "keystore/keystore.h"
#include "audit/audit.h"
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>

SQLITE_EXTENSION_INIT1

static int tdeRegistered;

/* Runs for every new connection (auto-extension). */
/* Runs for every new connection (auto-extension), outside any VFS method:
** the reserve request for the main database (directly on tde or under a
** VFS stacked above it), so the VFS need not make it (vfs.c,
** tdeMainRequestReserve). */
static int tdeConnInit(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi){
  TdeFile *p = tdeMainOfDb(db, "main");
  TDE_UNUSED(pzErrMsg); TDE_UNUSED(pApi);
  if( p ){
    int n = TDE_RESERVE_BYTES;
    if( sqlite3_file_control(db, "main", SQLITE_FCNTL_RESERVE_BYTES, &n)==SQLITE_OK ){
      tdeMainReserveDone(p);
    }
  }
  return tdeStatusRegister(db);
}

int tde_register(int makeDefault){
  sqlite3_mutex *pMutex;
  int rc = SQLITE_OK;
#ifdef SQLITE_CORE
  rc = sqlite3_initialize();
  if( rc ) return TDE_ERROR;
#endif
  pMutex = sqlite3_mutex_alloc(SQLITE_MUTEX_STATIC_VFS1);
  sqlite3_mutex_enter(pMutex);
  if( !tdeRegistered ){
    sqlite3_vfs *pOrig = sqlite3_vfs_find(0);
    if( !pOrig || pOrig==&tdeVfs ){
      rc = SQLITE_ERROR;
    }else{
      tdeVfs.pAppData = pOrig;
      tdeVfs.iVersion = pOrig->iVersion < 3 ? pOrig->iVersion : 3;
      tdeVfs.szOsFile = pOrig->szOsFile + (int)sizeof(TdeFile);
      tdeVfs.mxPathname = pOrig->mxPathname;
      tdeRegistered = 1;
    }
  }
  /* Every call makes the state whole again: sqlite3_shutdown() clears the
  ** auto-extensions and sqlite3_initialize() makes the unix VFS the default
  ** again.  Both calls below do nothing when already done (the auto-
  ** extension list holds each entry once; registering a registered VFS only
  ** moves it).  New databases get their reserved bytes without the
  ** auto-extension too (vfs.c, tdeMainRequestReserve); it adds the SQL
  ** functions and the tde_status table to each connection. */
  if( rc==SQLITE_OK && (makeDefault || sqlite3_vfs_find(TDE_VFS_NAME)!=&tdeVfs) ){
    rc = sqlite3_vfs_register(&tdeVfs, makeDefault);
  }
  if( rc==SQLITE_OK ) rc = sqlite3_auto_extension((void(*)(void))tdeConnInit);
  sqlite3_mutex_leave(pMutex);
  if( rc ) return tdeErr(TDE_ERROR, "cannot register the tde VFS (SQLite error %d)", rc);
  return TDE_OK;
}

TDE_API int sqlite3_tde_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi){
  const char *zDefault = getenv("SQLITE_TDE_DEFAULT_VFS");
  const char *zNoDump = getenv("SQLITE_TDE_NODUMP");
  int rc;
  SQLITE_EXTENSION_INIT2(pApi);
  /* SQLITE_TDE_NODUMP=1: make the host process non-dumpable before any key
  ** is loaded -- no core dump, no ptrace or /proc/PID/mem by processes of
  ** the same user.  `sqlite-tde shell` sets it: execve() resets the CLI's
  ** own PR_SET_DUMPABLE in the sqlite3 process it becomes.  Refused load
  ** if it cannot be done: the caller asked for it. */
  if( zNoDump && zNoDump[0]=='1' && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)!=0 ){
    if( pzErrMsg ){
      *pzErrMsg = sqlite3_mprintf("SQLITE_TDE_NODUMP: cannot make the process non-dumpable (errno %d)",
                                  errno);
    }
    return SQLITE_ERROR;
  }
  rc = tde_register(zDefault && zDefault[0]=='1');
  if( rc ){
    if( pzErrMsg ) *pzErrMsg = sqlite3_mprintf("%s", tde_last_error());
    return SQLITE_ERROR;
  }
  rc = tdeStatusRegister(db);
  if( rc ) return rc;
  return SQLITE_OK_LOAD_PERMANENTLY;
}

static int tdeInList(const uint32_t *a, uint32_t n, uint32_t v){
  for(uint32_t i=0; i<n; i++) if( a[i]==v ) return 1;
  return 0;
}

/*
** The number of valid WAL frames according to SQLite's WAL index (the
** -shm file), read from the index header as the WAL format documents it:
** mxFrame is the 32-bit native-order integer at offset 16.  The caller
** holds a read transaction, so the index is current; the shim remembers
** where SQLite mapped it.  0 when there is no shared index
** (locking_mode=EXCLUSIVE keeps it in the heap).
*/
static uint32_t tdeWalIndexMxFrame(TdeFile *pMain){
  uint32_t mx = 0;
  if( !pMain->pDb->pShm0 ) return 0;
  memcpy(&mx, (const void*)((const volatile uint8_t*)pMain->pDb->pShm0 + 16), sizeof(mx));
  return mx;
}

/* nBackfill from the WAL index's checkpoint information (native-order
** 32-bit integer at offset 96, after the two 48-byte header copies):
** frames above it have not been copied into the database yet. */
static uint32_t tdeWalIndexBackfill(TdeFile *pMain){
  uint32_t n = 0;
  if( !pMain->pDb->pShm0 ) return 0;
  memcpy(&n, (const void*)((const volatile uint8_t*)pMain->pDb->pShm0 + 96), sizeof(n));
  return n;
}

/* PRAGMA schema.zName as an integer, -1 if it fails. */
static sqlite3_int64 tdePragmaInt(sqlite3 *db, const char *zSchema, const char *zName){
  sqlite3_stmt *pStmt = 0;
  sqlite3_int64 v = -1;
  char *zSql = sqlite3_mprintf("PRAGMA \"%w\".%s", zSchema, zName);
  if( zSql && sqlite3_prepare_v2(db, zSql, -1, &pStmt, 0)==SQLITE_OK && sqlite3_step(pStmt)==SQLITE_ROW ){
    v = sqlite3_column_int64(pStmt, 0);
  }
  sqlite3_finalize(pStmt);
  sqlite3_free(zSql);
  return v;
}

/*
** tde_verify's stages, each returning a tde_rc: the header (keys, page
** size, header slots), the size (no page partly present), the pages (each
** authenticated, holes excepted), the WAL (its frames).  *pBadPage names
** what failed (see tde.h).
*/

/* Header: keys loaded, the page size known, the header slots checked.
** *pbNothing: nothing to check (an empty database, or no complete page 1
** on disk yet). */
static int verifyHeader(TdeFile *p, sqlite3_int64 nPageSize, const char *zSchema, int64_t *pBadPage,
                        int *pbNothing){
  int iBadSlot = -1, trc;
  int rc = tdeMainEnsureKeys(p, 0);
  *pbNothing = 0;
  if( rc ) return tdeErr(TDE_ERROR, "cannot read the header of '%s' (SQLite error %d)", zSchema, rc);
  if( !p->pDb->pKeys ){ *pbNothing = 1; return TDE_OK; }
  if( !p->pDb->pgsz ){
    if( tdeValidPgsz(nPageSize) ){
      p->pDb->pgsz = (uint32_t)nPageSize;
    }else{
      if( tdeScratch(p)!=SQLITE_OK ) return TDE_NOMEM;
      rc = tdeMainDiscoverPgsz(p);
      if( rc==SQLITE_IOERR_AUTH ){
        if( pBadPage ) *pBadPage = 1;
        return tdeErr(TDE_AUTH, "page 1 failed authentication");
      }
      if( rc ){ *pbNothing = 1; return TDE_OK; }
    }
  }
  trc = tdeMainCheckHeader(p, &iBadSlot);
  if( trc && pBadPage && iBadSlot>=0 ) *pBadPage = TDE_VERIFY_HEADER_SLOT(iBadSlot);
  return trc;
}

/* Size: the number of pages, and no bytes past the last whole page (a
** page cut short by a truncated file, or junk appended: SQLite never
** writes part of a page). */
static int verifySize(TdeFile *p, const char *zSchema, sqlite3_int64 *pnPage, int64_t *pBadPage){
  sqlite3_int64 sz = 0, nPage = 0, nExtra;
  TdeLayout L = tdeMainLayout(p, p->pDb->pgsz);
  int rc = tdeMainPageCount(p, &nPage);
  if( rc==SQLITE_OK ) rc = p->pReal->pMethods->xFileSize(p->pReal, &sz);
  if( rc ) return tdeErr(TDE_IO, "cannot read the size of '%s' (SQLite error %d)", zSchema, rc);
  *pnPage = nPage;
  nExtra = sz - tdeLayoutPhysSize(&L, nPage*p->pDb->pgsz);
  if( nExtra>0 && sz<=tdeMapKeepBytes(p) ) nExtra = 0;   /* version 3: the map's last regions */
  if( nExtra>0 ){
    if( pBadPage ) *pBadPage = nPage+1;
    return tdeErr(TDE_AUTH, "page %lld is only partly present (%lld of %u bytes: the file was "
                  "truncated, or has junk appended after its last page)", (long long)(nPage+1),
                  (long long)nExtra, p->pDb->pgsz);
  }
  return TDE_OK;
}

/* The pages a WAL frame not yet checkpointed holds newer (*paPgno
** sqlite3_malloc'd, 0 without a WAL). */
static int verifyWalPages(TdeFile *p, uint32_t **paPgno, uint32_t *pnPgno){
  uint32_t mx, nBackfill;
  int rc;
  if( !p->pDb->pWalFile ) return TDE_OK;
  mx = tdeWalIndexMxFrame(p);
  nBackfill = tdeWalIndexBackfill(p);
  if( nBackfill>=mx ) return TDE_OK;
  rc = tdeWalPageList(p->pDb->pWalFile, nBackfill+1, mx, paPgno, pnPgno);
  if( rc ) return tdeErr(TDE_IO, "reading the WAL's page list failed (SQLite error %d)", rc);
  return TDE_OK;
}

/* Pages, one: page i read from the file, authenticated and checked for
** freshness as a read would be (the page map).  *pbHole: an
** all-zero page never written: beyond the database's size (with
** SQLITE_FCNTL_CHUNK_SIZE the file is zero-padded past the last page), or
** in WAL mode a page whose newest version is still in a frame not yet
** checkpointed (bNewer: a checkpoint may write page N+1 before page N).
** Any other all-zero page is damage, as it is for SQLite's reads (the
** hole rule, tdePageIsHole, with SQLite's page count as the size). */
static int verifyPage(TdeFile *p, uint8_t *aPage, sqlite3_int64 i, sqlite3_int64 nPageCount,
                      int bNewer, int64_t *pBadPage, int *pbHole){
  uint8_t aTag[16];
  int bShort = 0;
  int rc = tdeRealRead(p, aPage, (int)p->pDb->pgsz, tdeMainPageOff(p, p->pDb->pgsz, (uint32_t)i), &bShort);
  if( rc==SQLITE_OK && bShort ) rc = SQLITE_IOERR_SHORT_READ;
  *pbHole = rc==SQLITE_OK && tdePageIsZero(aPage, p->pDb->pgsz)
         && tdePageIsHole((uint32_t)i, nPageCount>=0 && nPageCount<UINT32_MAX ? (uint32_t)nPageCount : UINT32_MAX, bNewer);
  if( *pbHole ) return TDE_OK;
  if( rc==SQLITE_OK ) memcpy(aTag, aPage + p->pDb->pgsz - 24, 16);   /* the trailer's tag */
  if( rc==SQLITE_OK ) rc = tdeOpenPage(p, aPage, p->pDb->pgsz, (uint32_t)i, 0);
  /* Fresh as well as authentic: the check SQLite's reads get (the page
  ** map of version 2), for a page whose newest copy is in the file. */
  if( rc==SQLITE_OK && !bNewer ){
    rc = tdeMainCheckPage(p, (uint32_t)i, aTag, aPage, (int)p->pDb->pgsz);
    if( rc==SQLITE_IOERR_AUTH ){
      if( pBadPage ) *pBadPage = i;
      return TDE_AUTH;   /* the check's own message (tde_last_error) says why */
    }
  }
  if( rc==SQLITE_IOERR_AUTH ) tdeAuthFail(p, (uint32_t)i, 0, -1);   /* logged below */
  if( rc==SQLITE_IOERR_AUTH && bNewer ){
    /* Still a failure (damage must never pass unseen, and a bit flip
    ** here looks like a torn write), but say what it means: a WAL
    ** frame not yet checkpointed holds a newer copy, SQLite reads that
    ** one, and the next checkpoint overwrites this one -- after a
    ** crash during a checkpoint this is expected (recovery restarts
    ** the checkpoint, so every frame counts again). */
    if( pBadPage ) *pBadPage = i;
    return tdeErr(TDE_AUTH, "page %lld failed authentication in the database file, but a WAL "
                  "frame not yet checkpointed holds a newer copy (harmless: SQLite reads that one; "
                  "after a crash during a checkpoint this is expected -- run PRAGMA wal_checkpoint "
                  "and verify again)", (long long)i);
  }
  if( rc==SQLITE_IOERR_AUTH ){
    tdeLog(TDE_LOG_ERROR, "%s: database page %lld failed authentication",
           p->zName ? p->zName : "", (long long)i);
    if( pBadPage ) *pBadPage = i;
    return tdeErr(TDE_AUTH, "page %lld failed authentication", (long long)i);
  }
  if( rc ) return tdeErr(TDE_IO, "reading page %lld failed (SQLite error %d)", (long long)i, rc);
  return TDE_OK;
}

/* Pages: 1..nPage but the lock-byte page, which SQLite never writes. */
static int verifyPages(TdeFile *p, sqlite3_int64 nPage, sqlite3_int64 nPageCount,
                       const uint32_t *aWalPg, uint32_t nWalPg, int64_t *pnChecked,
                       int64_t *pBadPage, tde_progress_fn xProgress, void *pArg){
  sqlite3_int64 i, iLockPage = (sqlite3_int64)(0x40000000 / p->pDb->pgsz) + 1;
  uint8_t *aPage = sqlite3_malloc((int)p->pDb->pgsz);
  int trc = TDE_OK, bHole = 0;
  if( !aPage ) return TDE_NOMEM;
  for(i=1; i<=nPage && trc==TDE_OK; i++){
    if( i==iLockPage ) continue;
    trc = verifyPage(p, aPage, i, nPageCount, tdeInList(aWalPg, nWalPg, (uint32_t)i), pBadPage, &bHole);
    if( trc || bHole ) continue;
    if( pnChecked ) (*pnChecked)++;
    if( xProgress && (i%256==0 || i==nPage) && xProgress(pArg, i, nPage) ){
      trc = tdeErr(TDE_ERROR, "verify interrupted");
    }
  }
  tdeWipe(aPage, p->pDb->pgsz);
  sqlite3_free(aPage);
  return trc;
}

/* WAL: the frames of the current generation, as SQLite's index counts them. */
static int verifyWal(TdeFile *p, int64_t *pnChecked, int64_t *pBadPage){
  sqlite3_int64 nFrames = 0, iBad = 0;
  int rc;
  if( !p->pDb->pWalFile ) return TDE_OK;
  rc = tdeWalVerify(p->pDb->pWalFile, tdeWalIndexMxFrame(p), &nFrames, &iBad);
  if( pnChecked ) *pnChecked += nFrames;
  if( rc==SQLITE_IOERR_AUTH ){
    if( pBadPage ) *pBadPage = iBad<0 ? TDE_VERIFY_WAL_HEADER : TDE_VERIFY_WAL_FRAME(iBad);
    return tdeErr(TDE_AUTH, "WAL %s %lld failed authentication",
                  iBad<0 ? "header" : "frame", (long long)(iBad<0 ? 0 : iBad));
  }
  if( rc ) return tdeErr(TDE_IO, "reading the WAL failed (SQLite error %d)", rc);
  return TDE_OK;
}

int tde_verify(sqlite3 *db, const char *zSchema, int64_t *pnChecked, int64_t *pBadPage,
               tde_progress_fn xProgress, void *pArg){
  sqlite3_file *pFile = 0;
  TdeFile *p;
  sqlite3_int64 nPage = 0, nPageCount, nPageSize;
  uint32_t *aWalPg = 0, nWalPg = 0;
  int rc, trc, bNothing = 0;

  if( pnChecked ) *pnChecked = 0;
  if( pBadPage ) *pBadPage = 0;
  if( !zSchema ) zSchema = "main";
  if( sqlite3_file_control(db, zSchema, SQLITE_FCNTL_FILE_POINTER, &pFile)!=SQLITE_OK || !pFile ){
    return tdeErr(TDE_NOTFOUND, "no database '%s'", zSchema);
  }
  p = tdeMainOfDb(db, zSchema);
  if( !p ){
    return tdeErr(TDE_PLAINTEXT, "database '%s' is not opened through the tde VFS", zSchema);
  }
  /* Hold a read transaction so no writer changes pages under us, and ask
  ** SQLite for the page size and count (page 1 may live only in the WAL). */
  rc = sqlite3_exec(db, "BEGIN", 0, 0, 0);
  if( rc ) return tdeErr(TDE_ERROR, "cannot begin a read transaction: %s", sqlite3_errmsg(db));
  nPageCount = tdePragmaInt(db, zSchema, "page_count");
  nPageSize = tdePragmaInt(db, zSchema, "page_size");
  trc = verifyHeader(p, nPageSize, zSchema, pBadPage, &bNothing);
  if( trc==TDE_OK && !bNothing ) trc = verifySize(p, zSchema, &nPage, pBadPage);
  if( trc==TDE_OK && !bNothing ) trc = verifyWalPages(p, &aWalPg, &nWalPg);
  if( trc==TDE_OK && !bNothing ){
    trc = verifyPages(p, nPage, nPageCount, aWalPg, nWalPg, pnChecked, pBadPage, xProgress, pArg);
  }
  if( trc==TDE_OK && !bNothing ) trc = verifyWal(p, pnChecked, pBadPage);
  sqlite3_free(aWalPg);
  sqlite3_exec(db, "COMMIT", 0, 0, 0);
  return trc;
}

/*
** Run xOp on the main file of schema zSchema inside a write transaction
** (BEGIN IMMEDIATE), which serialises it with every writer -- and so with
** every other header update -- in all processes.  Refused with TDE_LOCKED
** when another connection is writing and the busy timeout runs out.
*/
static int tdeUnderWriteLock(sqlite3 *db, const char *zSchema,
                             int (*xOp)(TdeFile*, void*), void *pArg){
  sqlite3_file *pFile = 0;
  TdeFile *p;
  int rc, trc = TDE_OK;
  if( !zSchema ) zSchema = "main";
  if( sqlite3_file_control(db, zSchema, SQLITE_FCNTL_FILE_POINTER, &pFile)!=SQLITE_OK || !pFile ){
    return tdeErr(TDE_NOTFOUND, "no database '%s'", zSchema);
  }
  p = tdeMainOfDb(db, zSchema);
  if( !p ){
    return tdeErr(TDE_PLAINTEXT, "database '%s' is not opened through the tde VFS", zSchema);
  }
  if( !sqlite3_get_autocommit(db) ){
    return tdeErr(TDE_MISUSE, "a transaction is open on this connection; commit it first");
  }
  rc = sqlite3_exec(db, "BEGIN IMMEDIATE", 0, 0, 0);
  if( rc==SQLITE_BUSY || rc==SQLITE_LOCKED ){
    return tdeErr(TDE_LOCKED, "another connection is writing '%s'; nothing was changed, try again",
                  sqlite3_db_filename(db, zSchema));
  }
  if( rc ) return tdeErr(TDE_ERROR, "cannot begin a write transaction: %s", sqlite3_errmsg(db));
  rc = tdeMainEnsureKeys(p, 0);
  if( rc==SQLITE_OK && !p->pDb->pKeys ) rc = tdeMainEnsureKeys(p, 1);
  if( rc ){
    trc = tdeErr(TDE_ERROR, "cannot load the keys of '%s' (SQLite error %d)", zSchema, rc);
  }else{
    tdeErrClear();
    rc = xOp(p, pArg);
    if( rc ){
      trc = tde_last_error()[0] ? TDE_ERROR : tdeErr(TDE_ERROR, "header update failed (SQLite error %d)", rc);
      if( rc==SQLITE_BUSY ) trc = tdeErr(TDE_LOCKED, "another connection holds the database; try again");
      if( rc==SQLITE_AUTH ) trc = TDE_NOKEY;
    }
  }
  sqlite3_exec(db, trc ? "ROLLBACK" : "COMMIT", 0, 0, 0);
  return trc;
}

/* Rotation and migration write the header (keyops.c), then seal page 1
** again under a hot journal (journal.c), so the old header region put
** back is refused at the open. */
static int opRewrap(TdeFile *p, void *pArg){
  int rc;
  TDE_UNUSED(pArg);
  rc = tdeMainRewrapAudited(p, "master_key_rotate", "data key re-wrapped; header only");
  if( rc==SQLITE_OK ) tdeJournalResealPage1(p);
  return rc;
}

int tde_db_rewrap(sqlite3 *db, const char *zSchema){
  return tdeUnderWriteLock(db, zSchema, opRewrap, 0);
}

typedef struct MigrateArg { TdeKeystore *pKs; const TdeConfig *pCfg; int bDrop; } MigrateArg;
static int opMigrate(TdeFile *p, void *pArg){
  MigrateArg *a = pArg;
  int rc = tdeMainMigrate(p, a->pKs, a->pCfg, a->bDrop);
  if( rc==SQLITE_OK ) tdeJournalResealPage1(p);
  return rc;
}

int tde_db_migrate(sqlite3 *db, const char *zSchema, const char *zNewConfig, int bDropOld){
  char zPath[PATH_MAX];
  MigrateArg a;
  int trc = tdeConfigLocate(zNewConfig, zPath, sizeof(zPath));
  if( trc ) return trc;
  trc = tdeRegistryAcquire(zPath, NULL, &a.pKs, &a.pCfg);
  if( trc ) return trc;
  a.bDrop = bDropOld;
  trc = tdeUnderWriteLock(db, zSchema, opMigrate, &a);
  tdeRegistryRelease(a.pKs);
  return trc;
}

static int opRekeyBegin(TdeFile *p, void *pArg){
  TDE_UNUSED(pArg);
  return tdeMainRekeyBegin(p);
}

/*
** Take what a rekey step needs: a write transaction, upgraded to EXCLUSIVE
** in rollback mode (no reader sees a page mid-rewrite), plus the checkpoint
** lock in WAL mode (no checkpoint writes pages meanwhile).  SQLITE_BUSY if
** another connection holds them.
*/
static int rekeyLock(sqlite3 *db, const char *zSchema, TdeFile *p, int *pbWal){
  int rc = sqlite3_exec(db, "BEGIN IMMEDIATE", 0, 0, 0);
  TDE_UNUSED(zSchema);
  if( rc ) return rc;
  *pbWal = p->pDb->pWalFile!=0;
  if( !*pbWal ){
    sqlite3_exec(db, "COMMIT", 0, 0, 0);
    return sqlite3_exec(db, "BEGIN EXCLUSIVE", 0, 0, 0);
  }
  rc = p->pReal->pMethods->xShmLock(p->pReal, 1, 1, SQLITE_SHM_LOCK|SQLITE_SHM_EXCLUSIVE);
  if( rc ) sqlite3_exec(db, "COMMIT", 0, 0, 0);
  return rc;
}

static void rekeyUnlock(sqlite3 *db, TdeFile *p, int bWal){
  if( bWal ) p->pReal->pMethods->xShmLock(p->pReal, 1, 1, SQLITE_SHM_UNLOCK|SQLITE_SHM_EXCLUSIVE);
  sqlite3_exec(db, "COMMIT", 0, 0, 0);
}

/* iTo 0: the version new databases get under the database's own
** configuration (vfs.c tdeNewFormatVersion: 3 unless it says 1 or 2),
** at least 2. */
typedef struct UpgradeArg { int iTo; int bDone; } UpgradeArg;
static int opUpgrade(TdeFile *p, void *pArg){
  UpgradeArg *a = pArg;
  int iTo = a->iTo;
  if( iTo==0 ){
    iTo = tdeNewFormatVersion(p->pDb->pKeys ? p->pDb->pKeys->pCfg : 0);
    if( iTo<TDE_FORMAT_V2 ) iTo = TDE_FORMAT_V2;
  }
  return tdeMainUpgrade(p, iTo, &a->bDone);
}

static int upgradeTo(sqlite3 *db, const char *zSchema, int iVersion);

int tde_db_upgrade(sqlite3 *db, const char *zSchema){
  return upgradeTo(db, zSchema, 0);
}

int tde_db_upgrade_to(sqlite3 *db, const char *zSchema, int iVersion){
  if( iVersion!=2 && iVersion!=3 ) return tdeErr(TDE_MISUSE, "upgrade: format version %d: 2 or 3", iVersion);
  return upgradeTo(db, zSchema, iVersion);
}

static int upgradeTo(sqlite3 *db, const char *zSchema, int iVersion){
  int nLog = -1, nCkpt = -1, trc = TDE_OK, rc;
  UpgradeArg a;
  a.iTo = iVersion;
  a.bDone = 0;
  if( !zSchema ) zSchema = "main";
  if( !sqlite3_get_autocommit(db) ){
    return tdeErr(TDE_MISUSE, "a transaction is open on this connection; commit it first");
  }
  /* Version-1 WAL frames are not chained: empty the WAL first (a no-op
  ** in rollback-journal mode). */
  for(int nTry=0; nTry<100; nTry++){
    rc = sqlite3_wal_checkpoint_v2(db, zSchema, SQLITE_CHECKPOINT_TRUNCATE, &nLog, &nCkpt);
    if( rc==SQLITE_OK ) trc = tdeUnderWriteLock(db, zSchema, opUpgrade, &a);
    if( rc==SQLITE_OK && trc!=TDE_LOCKED ) break;
    sqlite3_sleep(50);
  }
  if( rc!=SQLITE_OK && rc!=SQLITE_BUSY ){
    return tdeErr(TDE_ERROR, "upgrade: checkpoint failed: %s", sqlite3_errmsg(db));
  }
  if( rc==SQLITE_BUSY ){
    return tdeErr(TDE_LOCKED, "upgrade: readers keep the WAL from being emptied; nothing was changed, try again");
  }
  return trc;
}

int tde_db_rekey(sqlite3 *db, const char *zSchema, int nPagesPerStep,
                 tde_progress_fn xProgress, void *pArg){
  TdeFile *p;
  sqlite3_int64 nDone = 0, nPages = 0;
  int trc, rc, bClean = 0, bFinished = 0, nBusy = 0;
  if( !zSchema ) zSchema = "main";
  if( nPagesPerStep<1 ) nPagesPerStep = 1024;
  trc = tdeUnderWriteLock(db, zSchema, opRekeyBegin, 0);
  if( trc ) return trc;
  p = tdeMainOfDb(db, zSchema);
  if( !p ) return tdeErr(TDE_PLAINTEXT, "database '%s' is not opened through the tde VFS", zSchema);

  /* Steps, each a short locked transaction (see rekeyLock); the last one,
  ** after a pass found nothing left (and in WAL mode the WAL was emptied),
  ** confirms that under the lock and removes the old key. */
  while( !bFinished ){
    sqlite3_int64 n = 0;
    int bWal = 0;
    rc = rekeyLock(db, zSchema, p, &bWal);
    if( rc==SQLITE_BUSY ){ if( ++nBusy>100 ) break; sqlite3_sleep(50); continue; }
    if( rc ) return tdeErr(TDE_ERROR, "rekey: cannot lock the database: %s", sqlite3_errmsg(db));
    rc = tdeMainRefreshIfChanged(p);
    if( rc==SQLITE_OK && bClean ){
      /* Confirm under the lock: a full pass must find nothing. */
      p->pDb->pKeys->iRekeyCursor = 1;
      for(int bPass=0; rc==SQLITE_OK && !bPass; ){
        rc = tdeMainRekeyStep(p, nPagesPerStep, &n, &nPages, &bPass);
        nDone += n;
        if( n>0 ){ bPass = 0; p->pDb->pKeys->iRekeyCursor = 1; }
      }
      if( rc==SQLITE_OK ) rc = tdeMainRekeyFinish(p);
      if( rc==SQLITE_OK ) bFinished = 1;
      /* The rekey is done: then the move to format version 3 if the
      ** configuration asks for it (its outcome audited and logged; the
      ** rekey succeeds whatever it is). */
      if( rc==SQLITE_OK && tdeNewFormatVersion(p->pDb->pKeys->pCfg)>=TDE_FORMAT_V3 ){
        tdeMainUpgradeAfterRekey(p);
        tdeErrClear();
      }
    }else if( rc==SQLITE_OK ){
      rc = tdeMainRekeyStep(p, nPagesPerStep, &n, &nPages, &bClean);
    }
    /* The detail before the unlock, whose anchor tick may clear it. */
    char zDetail[512];
    snprintf(zDetail, sizeof(zDetail), "%s", rc ? tde_last_error() : "");
    rekeyUnlock(db, p, bWal);
    if( rc ){
      return tdeErr(rc==SQLITE_IOERR_AUTH ? TDE_AUTH : TDE_IO,
                    "rekey step failed (SQLite error %d)%s%s", rc, zDetail[0] ? ": " : "", zDetail);
    }
    nBusy = 0;
    nDone += n;
    if( n>0 && nDone%(sqlite3_int64)(16*nPagesPerStep) < n ){
      TdeAuditRec r;
      tdeAuditInit(&r, "rekey_progress");
      r.zDbPath = p->zName;
      r.aDbid = p->pDb->pKeys->hdr.dbid;
      r.keyVersion = p->pDb->pKeys->hdr.curVersion;
      r.nPages = nDone;
      tdeAudit(p->pDb->pKeys->pCfg, &r);
    }
    if( xProgress && !bFinished && xProgress(pArg, nDone < nPages ? nDone : nPages, nPages) ){
      return tdeErr(TDE_ERROR, "rekey interrupted after %lld pages; run it again to continue",
                    (long long)nDone);
    }
    if( bClean && !bFinished && bWal ){
      /* WAL frames may still hold pages under the old version: copy them
      ** into the database (re-sealed) and empty the WAL, then confirm. */
      int nLog = -1, nCkpt = -1;
      rc = sqlite3_wal_checkpoint_v2(db, zSchema, SQLITE_CHECKPOINT_TRUNCATE, &nLog, &nCkpt);
      if( rc!=SQLITE_OK || nLog!=0 ){
        if( ++nBusy>100 ) break;
        sqlite3_sleep(50);
        bClean = 0;
        continue;
      }
    }
  }
  if( !bFinished ){
    return tdeErr(TDE_LOCKED, "rekey paused after %lld pages: the database stayed busy "
                  "(readers holding the WAL, or writers); run it again to continue", (long long)nDone);
  }
  if( xProgress ) xProgress(pArg, nPages, nPages);
  return TDE_OK;
}
