/*
** The WAL write path under the write patterns SQLite produces without
** POWERSAFE_OVERWRITE, and after a failed frame write.
**
**  - Sector padding: with journal_mode=WAL, synchronous=FULL and a device
**    that does not report SQLITE_IOCAP_POWERSAFE_OVERWRITE (URI psow=0, or
**    a VFS above tde reporting sector sizes 512, 4096, 65536 without it),
**    SQLite pads every commit to a sector boundary with copies of the
**    commit frame, and splits the frame that crosses the boundary into two
**    writes with a sync between them (walWriteToLog's iSyncPoint).  Each
**    page size 512, 1024, 4096, 65536: commits, a crash copy of db + wal
**    (+ page map) opened on its own (recovery), a checkpoint, more commits
**    and a reopen; content, integrity_check and tde_verify (the chained
**    frame MACs) every time.  The VFS above tde counts the split writes,
**    so the test knows it exercised them.
**
**  - A failed frame write: a VFS below tde ("r3flt", the default VFS
**    before tde registers on it) fails one WAL frame write with
**    SQLITE_FULL.  Only that statement fails: the next integrity_check,
**    the next writes and a reopen succeed and hold the right data.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>
#include "sqlite-tde.h"
#include "tdetest.h"
#include "stackvfs.h"

/* ---- the VFS below tde: one injected fault on a WAL frame write --------- */

typedef struct FltFile {
  sqlite3_file base;
  sqlite3_file *pReal;        /* the unix file, follows this struct */
  int bWal;
} FltFile;

static sqlite3_vfs *pUnixVfs;
static struct {
  int nCountdown;             /* WAL frame writes to let through first; -1: off */
  int rc;                     /* the error to inject */
  int nHit;                   /* faults injected */
  int nSyncCountdown;         /* WAL syncs to let through first; -1: off */
  int bAbove;                 /* nCountdown counts page writes above tde instead */
} flt = { -1, 0, 0, -1, 0 };

/* With bSpan set, at each WAL sync the highest byte written since the
** previous sync below tde (hiBelow) must be the one SQLite wrote above it
** (hiAbove, counted by the VFS above tde): the shim neither holds back
** bytes SQLite meant to be durable at that sync nor writes ahead of it. */
static int bSpan;
static sqlite3_int64 hiBelow, hiAbove;
static long nSpanSync, nSpanBad;

#define FLT_REAL(f) (((FltFile*)(f))->pReal)
static int fxClose(sqlite3_file *f){ return FLT_REAL(f)->pMethods->xClose(FLT_REAL(f)); }
static int fxRead(sqlite3_file *f, void *z, int n, sqlite3_int64 o){ return FLT_REAL(f)->pMethods->xRead(FLT_REAL(f), z, n, o); }
static int fxWrite(sqlite3_file *f, const void *z, int n, sqlite3_int64 o){
  FltFile *p = (FltFile*)f;
  if( p->bWal && o>=32 && n>24 && !flt.bAbove && flt.nCountdown>=0 && flt.nCountdown--==0 ){
    flt.nHit++;
    return flt.rc;            /* nothing written, as a full disk */
  }
  if( p->bWal && o+n>hiBelow ) hiBelow = o+n;
  return p->pReal->pMethods->xWrite(p->pReal, z, n, o);
}
static int fxTruncate(sqlite3_file *f, sqlite3_int64 s){ return FLT_REAL(f)->pMethods->xTruncate(FLT_REAL(f), s); }
static int fxSync(sqlite3_file *f, int fl){
  FltFile *p = (FltFile*)f;
  if( p->bWal && flt.nSyncCountdown>=0 && flt.nSyncCountdown--==0 ){
    flt.nHit++;
    return SQLITE_IOERR_FSYNC;
  }
  if( p->bWal && bSpan ){
    nSpanSync++;
    if( hiBelow!=hiAbove ){
      nSpanBad++;
      printf("# WAL sync: written below tde up to %lld, above up to %lld\n",
             (long long)hiBelow, (long long)hiAbove);
    }
  }
  if( p->bWal ) hiBelow = hiAbove = 0;
  return p->pReal->pMethods->xSync(p->pReal, fl);
}
static int fxFileSize(sqlite3_file *f, sqlite3_int64 *pS){ return FLT_REAL(f)->pMethods->xFileSize(FLT_REAL(f), pS); }
static int fxLock(sqlite3_file *f, int e){ return FLT_REAL(f)->pMethods->xLock(FLT_REAL(f), e); }
static int fxUnlock(sqlite3_file *f, int e){ return FLT_REAL(f)->pMethods->xUnlock(FLT_REAL(f), e); }
static int fxCheckReservedLock(sqlite3_file *f, int *pR){ return FLT_REAL(f)->pMethods->xCheckReservedLock(FLT_REAL(f), pR); }
static int fxFileControl(sqlite3_file *f, int op, void *pA){ return FLT_REAL(f)->pMethods->xFileControl(FLT_REAL(f), op, pA); }
static int fxSectorSize(sqlite3_file *f){ return FLT_REAL(f)->pMethods->xSectorSize(FLT_REAL(f)); }
static int fxDeviceCharacteristics(sqlite3_file *f){ return FLT_REAL(f)->pMethods->xDeviceCharacteristics(FLT_REAL(f)); }
static int fxShmMap(sqlite3_file *f, int i, int sz, int b, void volatile **pp){ return FLT_REAL(f)->pMethods->xShmMap(FLT_REAL(f), i, sz, b, pp); }
static int fxShmLock(sqlite3_file *f, int o, int n, int fl){ return FLT_REAL(f)->pMethods->xShmLock(FLT_REAL(f), o, n, fl); }
static void fxShmBarrier(sqlite3_file *f){ FLT_REAL(f)->pMethods->xShmBarrier(FLT_REAL(f)); }
static int fxShmUnmap(sqlite3_file *f, int d){ return FLT_REAL(f)->pMethods->xShmUnmap(FLT_REAL(f), d); }
static int fxFetch(sqlite3_file *f, sqlite3_int64 o, int n, void **pp){ return FLT_REAL(f)->pMethods->xFetch(FLT_REAL(f), o, n, pp); }
static int fxUnfetch(sqlite3_file *f, sqlite3_int64 o, void *pv){ return FLT_REAL(f)->pMethods->xUnfetch(FLT_REAL(f), o, pv); }

static const sqlite3_io_methods fltIo = {
  3,                          /* iVersion */
  fxClose,                    /* xClose */
  fxRead,                     /* xRead */
  fxWrite,                    /* xWrite */
  fxTruncate,                 /* xTruncate */
  fxSync,                     /* xSync */
  fxFileSize,                 /* xFileSize */
  fxLock,                     /* xLock */
  fxUnlock,                   /* xUnlock */
  fxCheckReservedLock,        /* xCheckReservedLock */
  fxFileControl,              /* xFileControl */
  fxSectorSize,               /* xSectorSize */
  fxDeviceCharacteristics,    /* xDeviceCharacteristics */
  fxShmMap,                   /* xShmMap */
  fxShmLock,                  /* xShmLock */
  fxShmBarrier,               /* xShmBarrier */
  fxShmUnmap,                 /* xShmUnmap */
  fxFetch,                    /* xFetch */
  fxUnfetch                   /* xUnfetch */
};

static int fvOpen(sqlite3_vfs *v, const char *zName, sqlite3_file *f, int flags, int *pOut){
  FltFile *p = (FltFile*)f;
  int rc;
  (void)v;
  memset(p, 0, sizeof(*p));
  p->pReal = (sqlite3_file*)&p[1];
  rc = pUnixVfs->xOpen(pUnixVfs, zName, p->pReal, flags, pOut);
  if( rc ){
    if( p->pReal->pMethods ) p->pReal->pMethods->xClose(p->pReal);
    f->pMethods = 0;
    return rc;
  }
  p->bWal = (flags & SQLITE_OPEN_WAL)!=0;
  f->pMethods = &fltIo;
  return SQLITE_OK;
}
static int fvDelete(sqlite3_vfs *v, const char *z, int s){ (void)v; return pUnixVfs->xDelete(pUnixVfs, z, s); }
static int fvAccess(sqlite3_vfs *v, const char *z, int f, int *r){ (void)v; return pUnixVfs->xAccess(pUnixVfs, z, f, r); }
static int fvFullPathname(sqlite3_vfs *v, const char *z, int n, char *o){ (void)v; return pUnixVfs->xFullPathname(pUnixVfs, z, n, o); }
static void *fvDlOpen(sqlite3_vfs *v, const char *z){ (void)v; return pUnixVfs->xDlOpen(pUnixVfs, z); }
static void fvDlError(sqlite3_vfs *v, int n, char *z){ (void)v; pUnixVfs->xDlError(pUnixVfs, n, z); }
static void (*fvDlSym(sqlite3_vfs *v, void *p, const char *z))(void){ (void)v; return pUnixVfs->xDlSym(pUnixVfs, p, z); }
static void fvDlClose(sqlite3_vfs *v, void *p){ (void)v; pUnixVfs->xDlClose(pUnixVfs, p); }
static int fvRandomness(sqlite3_vfs *v, int n, char *z){ (void)v; return pUnixVfs->xRandomness(pUnixVfs, n, z); }
static int fvSleep(sqlite3_vfs *v, int n){ (void)v; return pUnixVfs->xSleep(pUnixVfs, n); }
static int fvCurrentTime(sqlite3_vfs *v, double *p){ (void)v; return pUnixVfs->xCurrentTime(pUnixVfs, p); }
static int fvGetLastError(sqlite3_vfs *v, int n, char *z){ (void)v; return pUnixVfs->xGetLastError(pUnixVfs, n, z); }
static int fvCurrentTimeInt64(sqlite3_vfs *v, sqlite3_int64 *p){ (void)v; return pUnixVfs->xCurrentTimeInt64(pUnixVfs, p); }

static sqlite3_vfs fltVfs = {
  2, 0, 0, 0, "r3flt", 0,
  fvOpen, fvDelete, fvAccess, fvFullPathname, fvDlOpen, fvDlError, fvDlSym, fvDlClose,
  fvRandomness, fvSleep, fvCurrentTime, fvGetLastError, fvCurrentTimeInt64,
  0, 0, 0
};

/* ---- the VFS above tde: sector size, no POWERSAFE_OVERWRITE --------------- */

static int nSector;           /* reported sector size; 0: forward both methods */
static long nSplit;           /* WAL writes that are a piece of a header or page */
static long nWalWrite;
static long nHdrPiece;        /* ... of them a piece of a frame header */
static long nHdrSync;         /* WAL syncs right after a whole frame header */
static int bLastHdr;          /* the last WAL write was a whole frame header */
static int bTamperPiece;      /* alter byte 50 of pieces of 200 bytes or more */
static long nTampered;
static int nPgsz;             /* page size of the database under test */
static sqlite3_io_methods sectIo;      /* other files */
static sqlite3_io_methods sectWalIo;   /* the WAL: its writes counted */

static int sectSectorSize(sqlite3_file *p){
  return nSector ? nSector : stackSectorSize(p);
}
static int sectDevChar(sqlite3_file *p){
  int f = stackDevChar(p);
  return nSector ? (f & ~SQLITE_IOCAP_POWERSAFE_OVERWRITE) : f;
}
static int sectWrite(sqlite3_file *p, const void *z, int n, sqlite3_int64 o){
  if( flt.bAbove && o>=32 && n>24 && flt.nCountdown>=0 && flt.nCountdown--==0 ){
    flt.nHit++;
    return flt.rc;            /* tde never sees this page write */
  }
  if( nPgsz && o>=32 ){
    nWalWrite++;
    if( n!=24 && n!=nPgsz ) nSplit++;
    if( n<24 ) nHdrPiece++;
  }
  bLastHdr = n==24;
  if( o+n>hiAbove ) hiAbove = o+n;
  if( bTamperPiece && nPgsz && o>=32 && n!=24 && n!=nPgsz && n>=200 ){
    unsigned char *a = malloc((size_t)n);
    int rc;
    assert_non_null(a);
    memcpy(a, z, (size_t)n);
    a[50] ^= 1;
    nTampered++;
    rc = stackWrite(p, a, n, o);
    free(a);
    return rc;
  }
  return stackWrite(p, z, n, o);
}
static int sectSync(sqlite3_file *p, int f){
  if( bLastHdr && nPgsz ) nHdrSync++;
  bLastHdr = 0;
  return stackSync(p, f);
}
static int sectOpen(sqlite3_vfs *v, const char *zName, sqlite3_file *pFile, int flags, int *pOut){
  int rc = stackOpen(v, zName, pFile, flags, pOut);
  /* SQLite takes POWERSAFE_OVERWRITE from the main file, the sector size
  ** from the WAL. */
  if( rc==SQLITE_OK ) pFile->pMethods = (flags & SQLITE_OPEN_WAL) ? &sectWalIo : &sectIo;
  return rc;
}

/* ---- helpers -------------------------------------------------------------- */

static int openVia(const char *zVfs, const char *zPath, const char *zExtra, sqlite3 **pDb){
  char *zUri = sqlite3_mprintf("file:%s?vfs=%s&tde_config=%s%s", zPath, zVfs, zCfg, zExtra);
  int rc;
  if( !zUri ) return SQLITE_NOMEM;
  rc = sqlite3_open_v2(zUri, pDb, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE|SQLITE_OPEN_URI, 0);
  sqlite3_free(zUri);
  return rc;
}

/* Rows id 1..n hold v = printf('%d:', id) followed by id*37 % 1500
** letters: the content is a function of n alone, checked row by row. */
#define ROW_EXPR(id) "printf('%d:%.*c', " id ", (" id ")*37 % 1500, 'a' + (" id ") % 26)"
/* The same inside an sqlite3_mprintf format. */
#define ROW_FMT(id) "printf('%%d:%%.*c', " id ", (" id ")*37 %% 1500, 'a' + (" id ") %% 26)"

static void insertRows(const char *zTag, sqlite3 *db, int iFirst, int iLast){
  char *zSql = sqlite3_mprintf(
    "WITH RECURSIVE c(i) AS (SELECT %d UNION ALL SELECT i+1 FROM c WHERE i<%d) "
    "INSERT INTO t(id, v) SELECT i, " ROW_FMT("i") " FROM c", iFirst, iLast);
  assert_non_null(zSql);
  execTagged(zTag, db, zSql);
  sqlite3_free(zSql);
}

/* The database holds rows 1..n exactly, passes integrity_check and
** tde_verify (database pages and the WAL's chained frame MACs). */
static void checkDb(const char *zTag, sqlite3 *db, int n){
  int64_t nChecked = 0, iBad = 0;
  sqlite3_int64 nRow = tdetestQueryInt(db, "SELECT count(*) FROM t");
  sqlite3_int64 nWrong = tdetestQueryInt(db, "SELECT count(*) FROM t WHERE v IS NOT " ROW_EXPR("id"));
  sqlite3_int64 iMax = tdetestQueryInt(db, "SELECT coalesce(max(id), 0) FROM t");
  if( nRow!=n || nWrong!=0 || iMax!=n ){
    fail_msg("[%s] %lld rows (max id %lld, %lld wrong), expected %d", zTag, (long long)nRow,
             (long long)iMax, (long long)nWrong, n);
  }
  if( !integrityOk(db) ) fail_msg("[%s] integrity_check failed", zTag);
  if( tde_verify(db, "main", &nChecked, &iBad, 0, 0)!=TDE_OK ){
    fail_msg("[%s] tde_verify: %s (bad %lld)", zTag, tde_last_error(), (long long)iBad);
  }
}

static void copyFile(const char *zFrom, const char *zTo){
  size_t n = 0;
  unsigned char *a = readAll(zFrom, &n);
  if( a ) writeAll(zTo, a, n);
  else unlink(zTo);
  free(a);
}

/* db, -wal and -tdemap of zFrom as zTo (as a power loss right now leaves
** them with synchronous=FULL: every commit synced); no -shm. */
static void crashCopy(const char *zFrom, const char *zTo){
  static const char *azSfx[] = { "", "-wal", "-tdemap" };
  char zA[PATH_MAX+16], zB[PATH_MAX+16];
  removeDb(zTo);
  for(size_t i=0; i<sizeof(azSfx)/sizeof(azSfx[0]); i++){
    snprintf(zA, sizeof(zA), "%s%s", zFrom, azSfx[i]);
    snprintf(zB, sizeof(zB), "%s%s", zTo, azSfx[i]);
    copyFile(zA, zB);
  }
}

/* ---- sector padding and split frames ------------------------------------ */

/* One database through VFS zVfs (with URI extra zExtra): page size pgsz,
** WAL, synchronous=FULL; commits, a crash copy, a checkpoint, a reopen. */
static void padRun(const char *zVfs, const char *zExtra, int pgsz){
  char zPath[PATH_MAX], zCrash[PATH_MAX], zTag[96];
  sqlite3 *db = 0;
  char *zSql;
  int n = 0;
  snprintf(zTag, sizeof(zTag), "%s%s sector %d page %d", zVfs, zExtra, nSector, pgsz);
  pathOf(zPath, "pad.db");
  pathOf(zCrash, "padcrash.db");
  removeDb(zPath);
  nPgsz = pgsz;
  assert_int_equal(openVia(zVfs, zPath, zExtra, &db), SQLITE_OK);
  zSql = sqlite3_mprintf("PRAGMA page_size=%d; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                         "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)", pgsz);
  execTagged(zTag, db, zSql);
  sqlite3_free(zSql);
  assert_int_equal(tdetestQueryInt(db, "PRAGMA page_size"), pgsz);
  /* Commits of one row (one or two frames) to many pages. */
  bSpan = 1;
  nSpanBad = 0;
  for(int k=0; k<7; k++){
    int m = k<3 ? 1 : 1 + k*9;
    insertRows(zTag, db, n+1, n+m);
    n += m;
  }
  bSpan = 0;
  assert_int_equal(nSpanBad, 0);
  assert_true(nSpanSync > 0);
  execTagged(zTag, db, "UPDATE t SET v = v WHERE id % 3 = 0");
  checkDb(zTag, db, n);

  /* A power loss now: the copy recovers every commit from the WAL. */
  crashCopy(zPath, zCrash);
  {
    sqlite3 *db2 = 0;
    char zTag2[128];
    snprintf(zTag2, sizeof(zTag2), "%s crash copy", zTag);
    assert_int_equal(openVia(zVfs, zCrash, zExtra, &db2), SQLITE_OK);
    checkDb(zTag2, db2, n);
    insertRows(zTag2, db2, n+1, n+2);
    checkDb(zTag2, db2, n+2);
    assert_int_equal(sqlite3_close(db2), SQLITE_OK);
  }

  /* A checkpoint, then commits into the restarted log, then a reopen. */
  execTagged(zTag, db, "PRAGMA wal_checkpoint(PASSIVE)");
  checkDb(zTag, db, n);
  for(int k=0; k<3; k++){
    insertRows(zTag, db, n+1, n+1+k*5);
    n += 1 + k*5;
  }
  execTagged(zTag, db, "PRAGMA wal_checkpoint(RESTART)");
  insertRows(zTag, db, n+1, n+3);
  n += 3;
  checkDb(zTag, db, n);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  assert_int_equal(openVia(zVfs, zPath, zExtra, &db), SQLITE_OK);
  checkDb(zTag, db, n);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  nPgsz = 0;
  removeDb(zPath);
  removeDb(zCrash);
}

/* 512 is not among them: tde turns a requested 512 into 1024 (SQLite keeps
** 480 usable bytes, tde reserves 48; test_fidelity checks it). */
static const int aPgsz[] = { 1024, 4096, 65536 };

/* URI psow=0 on the unix VFS below tde (its sector size, 4096). */
static void test_psow0_uri(void **s){
  (void)s;
  nSector = 0;
  for(size_t i=0; i<sizeof(aPgsz)/sizeof(aPgsz[0]); i++){
    long nBefore = nSplit;
    padRun("r3sect", "&psow=0", aPgsz[i]);
    printf("# psow=0 page %d: %ld split writes\n", aPgsz[i], nSplit - nBefore);
    assert_true(nSplit > nBefore);
  }
}

/* A VFS above tde reporting sector sizes 512, 4096, 65536 without
** POWERSAFE_OVERWRITE. */
static void test_sector_stack(void **s){
  static const int aSector[] = { 512, 4096, 65536 };
  (void)s;
  for(size_t j=0; j<sizeof(aSector)/sizeof(aSector[0]); j++){
    for(size_t i=0; i<sizeof(aPgsz)/sizeof(aPgsz[0]); i++){
      long nBefore = nSplit;
      nSector = aSector[j];
      padRun("r3sect", "", aPgsz[i]);
      printf("# sector %d page %d: %ld split writes\n", aSector[j], aPgsz[i], nSplit - nBefore);
      assert_true(nSplit > nBefore);
    }
  }
  nSector = 0;
}

/* Many one-row commits, so that the padding copy crossing a sector
** boundary is cut inside its header and right after it, not only inside
** its page (the cut falls at 32 + i*(page+24) mod sector). */
static void test_split_header(void **s){
  static const int aSector[] = { 512, 4096 };
  (void)s;
  for(size_t j=0; j<sizeof(aSector)/sizeof(aSector[0]); j++){
    char zPath[PATH_MAX], zCrash[PATH_MAX], zTag[64];
    sqlite3 *db = 0;
    long nHdrBefore = nHdrPiece, nSyncBefore = nHdrSync;
    int n = 0;
    nSector = aSector[j];
    nPgsz = 1024;
    snprintf(zTag, sizeof(zTag), "header cut, sector %d", nSector);
    pathOf(zPath, "hdrcut.db");
    pathOf(zCrash, "hdrcutcrash.db");
    removeDb(zPath);
    assert_int_equal(openVia("r3sect", zPath, "", &db), SQLITE_OK);
    execTagged(zTag, db, "PRAGMA page_size=1024; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                         "PRAGMA wal_autocheckpoint=0; CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)");
    bSpan = 1;
    nSpanBad = 0;
    for(int k=0; k<160; k++){
      insertRows(zTag, db, n+1, n+1);
      n++;
    }
    bSpan = 0;
    assert_int_equal(nSpanBad, 0);
    assert_true(nSpanSync > 0);
    checkDb(zTag, db, n);
    crashCopy(zPath, zCrash);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    assert_int_equal(openVia("r3sect", zCrash, "", &db), SQLITE_OK);
    checkDb(zTag, db, n);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    printf("# sector %d: %ld header pieces, %ld syncs after a header\n", nSector,
           nHdrPiece - nHdrBefore, nHdrSync - nSyncBefore);
    assert_true(nHdrPiece > nHdrBefore);
    assert_true(nHdrSync > nSyncBefore);
    removeDb(zPath);
    removeDb(zCrash);
  }
  nSector = 0;
  nPgsz = 0;
}

/* locking_mode=EXCLUSIVE (no shared index, no lock calls between
** transactions): a transaction that spills and rolls back leaves frames
** this handle wrote, at the indices the next commits and their padding
** copies take again. */
static void test_exclusive_rollback_padded(void **s){
  static const int aSector[] = { 512, 4096 };
  (void)s;
  for(size_t j=0; j<sizeof(aSector)/sizeof(aSector[0]); j++){
    char zPath[PATH_MAX], zCrash[PATH_MAX], zTag[64];
    sqlite3 *db = 0;
    long nBefore = nSplit;
    int n = 0;
    nSector = aSector[j];
    nPgsz = 1024;
    snprintf(zTag, sizeof(zTag), "exclusive sector %d", nSector);
    pathOf(zPath, "excl.db");
    pathOf(zCrash, "exclcrash.db");
    removeDb(zPath);
    assert_int_equal(openVia("r3sect", zPath, "", &db), SQLITE_OK);
    execTagged(zTag, db, "PRAGMA page_size=1024; PRAGMA locking_mode=EXCLUSIVE; PRAGMA journal_mode=WAL;"
                         "PRAGMA synchronous=FULL; PRAGMA cache_size=2;"
                         "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)");
    for(int k=0; k<4; k++){
      insertRows(zTag, db, n+1, n+2);
      n += 2;
      execTagged(zTag, db, "BEGIN");
      insertRows(zTag, db, n+1, n+40);         /* spills frames */
      execTagged(zTag, db, "ROLLBACK");
      insertRows(zTag, db, n+1, n+1);
      n += 1;
      checkDb(zTag, db, n);
    }
    crashCopy(zPath, zCrash);
    execTagged(zTag, db, "PRAGMA wal_checkpoint(TRUNCATE)");
    insertRows(zTag, db, n+1, n+3);
    n += 3;
    checkDb(zTag, db, n);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    assert_int_equal(openVia("r3sect", zPath, "", &db), SQLITE_OK);
    checkDb(zTag, db, n);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    assert_int_equal(openVia("r3sect", zCrash, "", &db), SQLITE_OK);
    checkDb(zTag, db, n-3);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    assert_true(nSplit > nBefore);
    removeDb(zPath);
    removeDb(zCrash);
  }
  nSector = 0;
  nPgsz = 0;
}

/* A piece that is not what the frame it continues (or copies) holds is
** refused: an I/O error for that commit and a log line, nothing of it
** written; the connection goes on. */
static int nRefusedLog;
static void refusedLog(void *pArg, int level, const char *zMsg){
  (void)pArg; (void)level;
  if( strstr(zMsg, "refused") ) nRefusedLog++;
}

static void test_piece_refused(void **s){
  char zPath[PATH_MAX];
  sqlite3 *db = 0;
  int rc = SQLITE_OK, n = 0;
  (void)s;
  nSector = 512;
  nPgsz = 1024;
  pathOf(zPath, "refuse.db");
  removeDb(zPath);
  assert_int_equal(openVia("r3sect", zPath, "", &db), SQLITE_OK);
  execTagged("refuse", db, "PRAGMA page_size=1024; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                           "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)");
  insertRows("refuse", db, 1, 5);
  n = 5;
  nRefusedLog = 0;
  tde_set_log(refusedLog, 0);
  bTamperPiece = 1;
  nTampered = 0;
  for(int k=0; k<20 && nTampered==0; k++){
    char *zSql = sqlite3_mprintf("INSERT INTO t(id, v) VALUES(%d, " ROW_FMT("%d") ")", n+1, n+1);
    rc = sqlite3_exec(db, zSql, 0, 0, 0);
    sqlite3_free(zSql);
    if( rc==SQLITE_OK ) n++;
  }
  bTamperPiece = 0;
  tde_set_log(quietLog, 0);
  assert_true(nTampered > 0);
  assert_int_equal(rc, SQLITE_IOERR);
  assert_int_equal(nRefusedLog, 1);
  /* The next statements work; the frames of the refused commit are
  ** written over by the next one, so a reopen sees what the connection saw. */
  checkDb("refuse", db, n);
  insertRows("refuse", db, n+1, n+2);
  n += 2;
  checkDb("refuse", db, n);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  assert_int_equal(openVia("r3sect", zPath, "", &db), SQLITE_OK);
  checkDb("refuse reopened", db, n);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  removeDb(zPath);
  nSector = 0;
  nPgsz = 0;
}

/* ---- a failed frame write ------------------------------------------------- */

/* For each N: the Nth WAL frame write of a transaction fails with rc; the
** statement fails with rc, nothing else does. */
static void fullRun(const char *zVfs, const char *zExtra, const char *zPragma, int rcInject){
  char zPath[PATH_MAX], zTag[96];
  int nHitBefore = flt.nHit;
  pathOf(zPath, "full.db");
  for(int iFault=0; iFault<12; iFault++){
    sqlite3 *db = 0;
    int n = 20, rc;
    snprintf(zTag, sizeof(zTag), "%s%s%s sector %d fault %d rc %d", zVfs, zExtra, zPragma, nSector, iFault,
             rcInject);
    removeDb(zPath);
    nPgsz = 1024;
    assert_int_equal(openVia(zVfs, zPath, zExtra, &db), SQLITE_OK);
    execTagged(zTag, db, zPragma);
    execTagged(zTag, db, "PRAGMA page_size=1024; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                         "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)");
    insertRows(zTag, db, 1, n);
    flt.rc = rcInject;
    flt.nCountdown = iFault;
    {
      char *zSql = sqlite3_mprintf(
        "WITH RECURSIVE c(i) AS (SELECT %d UNION ALL SELECT i+1 FROM c WHERE i<%d) "
        "INSERT INTO t(id, v) SELECT i, " ROW_FMT("i") " FROM c", n+1, n+6);
      rc = sqlite3_exec(db, zSql, 0, 0, 0);
      sqlite3_free(zSql);
    }
    if( flt.nCountdown>=0 ){
      /* The transaction wrote fewer frames than iFault: no fault. */
      flt.nCountdown = -1;
      assert_int_equal(rc, SQLITE_OK);
      assert_true(iFault>0);
      assert_int_equal(sqlite3_close(db), SQLITE_OK);
      break;
    }
    if( rc!=(rcInject & 0xff) ) fail_msg("[%s] the insert returned %d (%s)", zTag, rc, sqlite3_errmsg(db));
    /* The next statements work, on the state before the failed one. */
    checkDb(zTag, db, n);
    insertRows(zTag, db, n+1, n+4);
    n += 4;
    checkDb(zTag, db, n);
    insertRows(zTag, db, n+1, n+1);
    n += 1;
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    assert_int_equal(openVia(zVfs, zPath, zExtra, &db), SQLITE_OK);
    checkDb(zTag, db, n);
    execTagged(zTag, db, "PRAGMA wal_checkpoint(TRUNCATE)");
    checkDb(zTag, db, n);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
  }
  nPgsz = 0;
  assert_true(flt.nHit > nHitBefore + 1);
  removeDb(zPath);
}

/* The sync of a restarted WAL's header fails: the log epoch update that
** waits for it is not done later by a statement that holds no write lock
** (another connection may have restarted the log and moved the epoch
** meanwhile).  A restarts and fails; B (bOther) or A restarts and
** commits; A reads. */
static void headerSyncFails(int bOther){
  char zPath[PATH_MAX];
  sqlite3 *dbA = 0, *dbB = 0;
  int rc, nHit = flt.nHit;
  nSector = 0;
  pathOf(zPath, "hdrsync.db");
  removeDb(zPath);
  assert_int_equal(openVia("tde", zPath, "", &dbA), SQLITE_OK);
  execTagged("A", dbA, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                       "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)");
  insertRows("A", dbA, 1, 10);
  assert_int_equal(openVia("tde", zPath, "", &dbB), SQLITE_OK);
  execTagged("B", dbB, "PRAGMA synchronous=FULL");
  checkDb("B", dbB, 10);
  execTagged("A", dbA, "PRAGMA wal_checkpoint(TRUNCATE)");
  flt.nSyncCountdown = 0;             /* the sync of A's new WAL header */
  rc = sqlite3_exec(dbA, "INSERT INTO t(id, v) VALUES(11, 'x')", 0, 0, 0);
  flt.nSyncCountdown = -1;
  assert_int_equal(flt.nHit, nHit + 1);
  assert_int_equal(rc, SQLITE_IOERR);
  insertRows(bOther ? "B" : "A", bOther ? dbB : dbA, 11, 14);
  checkDb("B", dbB, 14);
  checkDb("A", dbA, 14);
  insertRows("A", dbA, 15, 16);
  checkDb("B", dbB, 16);
  assert_int_equal(sqlite3_close(dbB), SQLITE_OK);
  assert_int_equal(sqlite3_close(dbA), SQLITE_OK);
  assert_int_equal(openVia("tde", zPath, "", &dbA), SQLITE_OK);
  checkDb("reopened", dbA, 16);
  assert_int_equal(sqlite3_close(dbA), SQLITE_OK);
  removeDb(zPath);
}

static void test_header_sync_fails(void **s){
  (void)s;
  headerSyncFails(1);
  headerSyncFails(0);
}

static void test_full_wal_write(void **s){
  (void)s;
  nSector = 0;
  fullRun("tde", "", "", SQLITE_FULL);
  fullRun("tde", "", "", SQLITE_IOERR_WRITE);
  fullRun("tde", "", "PRAGMA locking_mode=EXCLUSIVE", SQLITE_FULL);
}

/* The failed page write is refused above tde: the frame header tde holds
** never gets its page. */
static void test_full_above(void **s){
  (void)s;
  nSector = 0;
  flt.bAbove = 1;
  fullRun("r3sect", "", "", SQLITE_FULL);
  nSector = 512;
  fullRun("r3sect", "", "", SQLITE_FULL);
  flt.bAbove = 0;
  nSector = 0;
}

/* The same where the failed write is a padding frame or a piece of one. */
static void test_full_wal_write_padded(void **s){
  (void)s;
  nSector = 512;
  fullRun("r3sect", "", "", SQLITE_FULL);
  fullRun("r3sect", "", "PRAGMA locking_mode=EXCLUSIVE", SQLITE_FULL);
  nSector = 4096;
  fullRun("r3sect", "", "", SQLITE_FULL);
  nSector = 0;
}

/* ---- group ---------------------------------------------------------------- */

static int groupSetup(void **state){
  (void)state;
  if( tdetestGroupSetup("tdewalwrite", 1) ) return -1;
  if( stackVfsRegister("r3sect", "tde") ) return -1;
  stackVfs.xOpen = sectOpen;
  sectIo = stackIo;
  sectIo.xSectorSize = sectSectorSize;
  sectIo.xDeviceCharacteristics = sectDevChar;
  sectWalIo = sectIo;
  sectWalIo.xWrite = sectWrite;
  sectWalIo.xSync = sectSync;
  return 0;
}

static int groupTeardown(void **state){
  (void)state;
  tdetestScratchRemove();
  return 0;
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_psow0_uri),
    cmocka_unit_test(test_sector_stack),
    cmocka_unit_test(test_split_header),
    cmocka_unit_test(test_exclusive_rollback_padded),
    cmocka_unit_test(test_piece_refused),
    cmocka_unit_test(test_full_wal_write),
    cmocka_unit_test(test_full_wal_write_padded),
    cmocka_unit_test(test_full_above),
    cmocka_unit_test(test_header_sync_fails),
  };
  /* The fault VFS goes below tde: the default before tde_register. */
  if( sqlite3_initialize() ) return 1;
  pUnixVfs = sqlite3_vfs_find("unix");
  if( !pUnixVfs ) return 1;
  fltVfs.szOsFile = (int)sizeof(FltFile) + pUnixVfs->szOsFile;
  fltVfs.mxPathname = pUnixVfs->mxPathname;
  if( sqlite3_vfs_register(&fltVfs, 1) ) return 1;
  return cmocka_run_group_tests_name("r3_walwrite", tests, groupSetup, groupTeardown);
}
