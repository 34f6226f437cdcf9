/*
** I/O fault injection and power-loss simulation below the tde shim.
**
** A test VFS ("faultsim") is registered as the default before
** tde_register(), so tde sits on it and every byte tde reads or writes goes
** through it.  It does two things, after SQLite's src/test_vfs.c and the
** crash model of src/test6.c:
**
**  - Countdown faults: the Nth call of one kind (xRead, xWrite, xSync,
**    xTruncate, xLock, xFileSize) fails with SQLITE_IOERR_* (writes also
**    with SQLITE_FULL), once (transient) or from then on (persistent).
**    For every N over a small workload (open, read, one write transaction,
**    in WAL mode also a checkpoint) the test checks: the error reaches the
**    application; after the fault clears, the same connection and a fresh
**    one see the state before or after the transaction (after, if COMMIT
**    said OK) and never anything else; the database opens, passes
**    PRAGMA integrity_check and tde_verify().  A fault SQLite absorbs
**    without reporting it is counted ("masked") and must leave exactly
**    the state the application was told about.
**
**  - Power loss: while armed it keeps, per file of the database under test
**    (main file, -journal, -wal, -tdemap), the content at its last xSync.
**    The page map (DB-tdemap, format version 2 in WAL mode) is written
**    through the VFS below tde like the others, so a power loss drops its
**    unsynced writes the same way; an image without it would be refused.  Before
**    every write, truncate, sync and delete it can write a crash image:
**    "drop" (every file as of its last sync: everything written since is
**    lost) and, for a write crossing a 512-byte boundary, "torn" (all
**    writes so far on disk, this one only up to the boundary).  After each
**    operation completes a "post" image (files as of their last sync) must
**    hold that operation's result: what SQLite said was committed
**    survives.  Every image must open through tde, authenticate
**    (tde_verify), pass integrity_check and hold the state before or after
**    the operation that was running.  Operations: small and spilling
**    transactions, a delete, VACUUM (rollback mode) or checkpoints (WAL),
**    and a header rewrite (master-key rotation, tde_db_rewrap).
**
** Figures are printed as "# ..." lines.  Deletes are taken as durable at
** once (the directory is not modelled); -shm is not part of an image.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>
#include "sqlite-tde.h"
#include "tdetest.h"
#include "tde_int.h"      /* tdeFaultHook */

/* ---- helpers -------------------------------------------------------------- */

static int bPlain;               /* control runs: plain SQLite, no tde */

/* Through tde, or without it in the control runs.  SQLite result code. */
static int openDb(const char *zPath, sqlite3 **pDb){
  if( bPlain ) return sqlite3_open_v2(zPath, pDb, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE, 0);
  return openTdeCfg(zPath, zCfg, pDb);
}

/* FNV-1a over all rows of t and of sqlite_schema.  SQLite result code. */
static int contentSum(sqlite3 *db, uint64_t *pH){
  static const char *azSql[] = {
    "SELECT id, k, v FROM t ORDER BY id",
    "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY name",
  };
  uint64_t h = 0xcbf29ce484222325ULL;
  for(size_t q=0; q<sizeof(azSql)/sizeof(azSql[0]); q++){
    sqlite3_stmt *p = 0;
    int rc = sqlite3_prepare_v2(db, azSql[q], -1, &p, 0);
    if( rc ){ sqlite3_finalize(p); return rc; }
    while( (rc = sqlite3_step(p))==SQLITE_ROW ){
      for(int i=0; i<sqlite3_column_count(p); i++){
        const unsigned char *z = sqlite3_column_text(p, i);
        int n = sqlite3_column_bytes(p, i);
        h ^= (uint64_t)sqlite3_column_type(p, i); h *= 0x100000001b3ULL;
        h ^= (uint64_t)n; h *= 0x100000001b3ULL;
        for(int j=0; j<n; j++){ h ^= z[j]; h *= 0x100000001b3ULL; }
      }
      h ^= 0xff; h *= 0x100000001b3ULL;
    }
    rc = sqlite3_finalize(p) ? sqlite3_errcode(db) : (rc==SQLITE_DONE ? SQLITE_OK : rc);
    if( rc ) return rc;
  }
  *pH = h;
  return SQLITE_OK;
}

/* Outcomes of probeDb. */
#define PR_OK        0    /* opens, reads, integrity ok, tde_verify ok */
#define PR_FAIL      1    /* any failure except the two below */
#define PR_HDRSLOT   2    /* only tde_verify failed, on a header slot, and the
                          ** next write transaction rewrote it (verify passes after) */
#define PR_WALPAGE   3    /* only tde_verify failed, on a database page that a
                          ** checkpoint rewrites from the WAL (verify passes after) */

/* Open through tde, read everything, integrity_check, tde_verify.  PR_* and
** *pH (valid unless PR_FAIL); for failures a short description in zWhy. */
static int probeDb(const char *zPath, uint64_t *pH, char *zWhy, size_t nWhy){
  sqlite3 *db = 0;
  int64_t nChecked = 0, iBad = 0;
  int out = PR_OK;
  int rc = openDb(zPath, &db);
  zWhy[0] = 0;
  if( rc ){
    snprintf(zWhy, nWhy, "open: %s (%s)", sqlite3_errstr(rc), tde_last_error());
    sqlite3_close(db);
    return PR_FAIL;
  }
  rc = contentSum(db, pH);
  if( rc ){
    snprintf(zWhy, nWhy, "read: %s (%s)", sqlite3_errmsg(db), tde_last_error());
    sqlite3_close(db);
    return PR_FAIL;
  }
  if( !integrityOk(db) ){
    snprintf(zWhy, nWhy, "integrity_check failed");
    sqlite3_close(db);
    return PR_FAIL;
  }
  rc = bPlain ? TDE_OK : tde_verify(db, "main", &nChecked, &iBad, 0, 0);
  if( rc!=TDE_OK ){
    snprintf(zWhy, nWhy, "tde_verify: %s, bad %lld (%s)", tde_errstr(rc), (long long)iBad, tde_last_error());
    out = PR_FAIL;
    if( rc==TDE_AUTH && iBad<=TDE_VERIFY_HEADER_SLOT(0) ){
      /* A torn slot: the next write transaction must rewrite it. */
      if( sqlite3_exec(db, "BEGIN IMMEDIATE; CREATE TABLE tde_probe(x); DROP TABLE tde_probe; COMMIT",
                       0, 0, 0)==SQLITE_OK
       && tde_verify(db, "main", &nChecked, &iBad, 0, 0)==TDE_OK ){
        out = PR_HDRSLOT;
      }else{
        snprintf(zWhy, nWhy, "header slot still damaged after a write transaction: %s", tde_last_error());
      }
    }else if( rc==TDE_AUTH && iBad>0 ){
      if( sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", 0, 0, 0)==SQLITE_OK
       && tde_verify(db, "main", &nChecked, &iBad, 0, 0)==TDE_OK ){
        out = PR_WALPAGE;
      }
    }
  }
  if( sqlite3_close(db)!=SQLITE_OK ){
    snprintf(zWhy, nWhy, "close failed");
    return PR_FAIL;
  }
  return out;
}

static void fillSql(char *zSql, size_t nSql, int iFirst, int n, const char *zTag, int nPad){
  snprintf(zSql, nSql,
           "WITH RECURSIVE c(i) AS (SELECT %d UNION ALL SELECT i+1 FROM c WHERE i<%d) "
           "INSERT INTO t SELECT i, i*7919 %% 1000, printf('%s %%d %%.%dc', i, char(65 + i %% 26)) FROM c",
           iFirst, iFirst + n - 1, zTag, nPad);
}

/* ---- the fault / power-loss VFS ------------------------------------------- */

enum { FK_READ, FK_WRITE, FK_SYNC, FK_TRUNCATE, FK_LOCK, FK_FILESIZE, FK_N };
static const char *azFaultName[FK_N] = { "read", "write", "sync", "truncate", "lock", "file-size" };
static const int aFaultRc[FK_N] = { SQLITE_IOERR_READ, SQLITE_IOERR_WRITE, SQLITE_IOERR_FSYNC,
                                   SQLITE_IOERR_TRUNCATE, SQLITE_IOERR_LOCK, SQLITE_IOERR_FSTAT };

static struct {
  int eType;            /* kind armed, -1: none */
  int iCountdown;       /* the call that makes it reach 0 fails */
  int bPersist;         /* keep failing once fired */
  int rcWrite;          /* what a failed write returns */
  int bFired;
  int nFail;            /* calls failed */
  long aCalls[FK_N];     /* calls seen, every kind */
} flt = { -1, 0, 0, 0, 0, 0, {0} };

static void fltArm(int eType, int n, int bPersist, int rcWrite){
  flt.eType = eType;
  flt.iCountdown = n;
  flt.bPersist = bPersist;
  flt.rcWrite = rcWrite;
  flt.bFired = 0;
  flt.nFail = 0;
  memset(flt.aCalls, 0, sizeof(flt.aCalls));
}
static void fltClear(void){ flt.eType = -1; }

/* Does this call fail?  Returns the error code or SQLITE_OK. */
static int fltHit(int eType){
  flt.aCalls[eType]++;
  if( flt.eType!=eType ) return SQLITE_OK;
  if( flt.bFired ){
    if( !flt.bPersist ) return SQLITE_OK;
  }else if( --flt.iCountdown>0 ){
    return SQLITE_OK;
  }
  flt.bFired = 1;
  flt.nFail++;
  if( eType==FK_WRITE && flt.rcWrite ) return flt.rcWrite;
  return aFaultRc[eType];
}

/* Power-loss state: the durable content of each tracked file. */
#define T_MAIN 0
#define T_JOURNAL 1
#define T_WAL 2
#define T_MAP 3
#define T_NFILE 4
/* DB-tdemap is part of a WAL-mode database like DB-wal (docs/FORMAT.md
** "Page rollback: the page map"): images and restores carry it. */
static const char *azSuffix[T_NFILE] = { "", "-journal", "-wal", "-tdemap" };
typedef struct Durable { int bExists; unsigned char *a; size_t n; } Durable;

/* The files of a closed database, to restore before each run: the main
** file and, in WAL mode, DB-tdemap (a restore without it is refused). */
typedef struct DbImage { unsigned char *a[T_NFILE]; size_t n[T_NFILE]; } DbImage;
static void dbImageTake(const char *zPath, DbImage *p){
  char z[PATH_MAX+16];
  for(int i=0; i<T_NFILE; i++){
    snprintf(z, sizeof(z), "%s%s", zPath, azSuffix[i]);
    p->a[i] = readAll(z, &p->n[i]);
  }
  assert_non_null(p->a[T_MAIN]);
}
static void dbImageRestore(const char *zPath, const DbImage *p){
  char z[PATH_MAX+16];
  removeDb(zPath);
  for(int i=0; i<T_NFILE; i++){
    snprintf(z, sizeof(z), "%s%s", zPath, azSuffix[i]);
    if( p->a[i] ) writeAll(z, p->a[i], p->n[i]);
  }
}
static void dbImageFree(DbImage *p){
  for(int i=0; i<T_NFILE; i++){ free(p->a[i]); p->a[i] = 0; }
}
static struct {
  int bArmed;
  char zDb[PATH_MAX];          /* database under test */
  char zDir[PATH_MAX];         /* where images go */
  Durable aDur[T_NFILE];
  int bDirty;                  /* durable state changed since the last drop image */
  int iOp;                     /* workload operation running */
  int nImage;
  int nMutate;                 /* mutating calls seen while armed */
} pl;
#define MAX_IMAGES 4000
#define IMG_DROP 0
#define IMG_TORN 1
#define IMG_POST 2
static const char *azImgKind[3] = { "drop unsynced", "torn write", "after the operation" };
static struct { int kind; int iOp; char zWhat[64]; } aImg[MAX_IMAGES];

static void durableLoad(int i){
  char z[PATH_MAX+16];
  free(pl.aDur[i].a);
  snprintf(z, sizeof(z), "%s%s", pl.zDb, azSuffix[i]);
  pl.aDur[i].a = readAll(z, &pl.aDur[i].n);
  pl.aDur[i].bExists = pl.aDur[i].a!=0;
  pl.bDirty = 1;
}

static void imagePath(char *zOut, size_t nOut, int iImg, int iFile){
  snprintf(zOut, nOut, "%s/img%d.db%s", pl.zDir, iImg, azSuffix[iFile]);
}

static int imageBegin(int kind, const char *zWhat){
  if( pl.nImage>=MAX_IMAGES ) return -1;
  aImg[pl.nImage].kind = kind;
  aImg[pl.nImage].iOp = pl.iOp;
  snprintf(aImg[pl.nImage].zWhat, sizeof(aImg[0].zWhat), "%s", zWhat);
  return pl.nImage++;
}

/* Image of the durable state (files as of their last sync). */
static void imageDurable(int kind, const char *zWhat){
  int iImg;
  if( kind==IMG_DROP && !pl.bDirty ) return;
  iImg = imageBegin(kind, zWhat);
  if( iImg<0 ) return;
  for(int i=0; i<T_NFILE; i++){
    char z[PATH_MAX+64];
    imagePath(z, sizeof(z), iImg, i);
    unlink(z);
    if( pl.aDur[i].bExists ) writeAll(z, pl.aDur[i].a, pl.aDur[i].n);
  }
  if( kind==IMG_DROP ) pl.bDirty = 0;
}

/* Image of the files as they are on disk now. */
static void imageNow(int kind, const char *zWhat){
  int iImg = imageBegin(kind, zWhat);
  if( iImg<0 ) return;
  for(int i=0; i<T_NFILE; i++){
    char zFrom[PATH_MAX+16], zTo[PATH_MAX+64];
    unsigned char *a;
    size_t n;
    snprintf(zFrom, sizeof(zFrom), "%s%s", pl.zDb, azSuffix[i]);
    imagePath(zTo, sizeof(zTo), iImg, i);
    unlink(zTo);
    a = readAll(zFrom, &n);
    if( a ){ writeAll(zTo, a, n); free(a); }
  }
}

typedef struct FltFile {
  sqlite3_file base;
  sqlite3_file *pReal;
  int iTrack;                  /* T_* for a file of the database under test, else -1 */
} FltFile;
static sqlite3_vfs *pUnixVfs;

static void plBeforeMutate(FltFile *p, const char *zWhat){
  if( !pl.bArmed || p->iTrack<0 ) return;
  pl.nMutate++;
  imageDurable(IMG_DROP, zWhat);
}

static int fxClose(sqlite3_file *f){ FltFile *p = (FltFile*)f; return p->pReal->pMethods->xClose(p->pReal); }
static int fxRead(sqlite3_file *f, void *z, int n, sqlite3_int64 o){
  FltFile *p = (FltFile*)f;
  int rc = fltHit(FK_READ);
  if( rc ) return rc;
  return p->pReal->pMethods->xRead(p->pReal, z, n, o);
}
static int fxWrite(sqlite3_file *f, const void *z, int n, sqlite3_int64 o){
  FltFile *p = (FltFile*)f;
  int rc = fltHit(FK_WRITE);
  if( rc ) return rc;
  if( pl.bArmed && p->iTrack>=0 ){
    sqlite3_int64 cut = (o/512 + 1)*512;
    char zWhat[64];
    snprintf(zWhat, sizeof(zWhat), "%s write of %d bytes at %lld", azSuffix[p->iTrack][0] ? azSuffix[p->iTrack]+1 : "db",
             n, (long long)o);
    plBeforeMutate(p, zWhat);
    if( cut < o + n ){
      rc = p->pReal->pMethods->xWrite(p->pReal, z, (int)(cut - o), o);
      if( rc ) return rc;
      imageNow(IMG_TORN, zWhat);
    }
  }
  return p->pReal->pMethods->xWrite(p->pReal, z, n, o);
}
static int fxTruncate(sqlite3_file *f, sqlite3_int64 sz){
  FltFile *p = (FltFile*)f;
  int rc = fltHit(FK_TRUNCATE);
  if( rc ) return rc;
  plBeforeMutate(p, "truncate");
  return p->pReal->pMethods->xTruncate(p->pReal, sz);
}
static int fxSync(sqlite3_file *f, int fl){
  FltFile *p = (FltFile*)f;
  int rc = fltHit(FK_SYNC);
  if( rc ) return rc;
  (void)fl;
  plBeforeMutate(p, "sync");
  /* Durability is modelled here, so the real fsync is skipped: the tests
  ** run at memory speed and never depend on the disk's cache. */
  if( pl.bArmed && p->iTrack>=0 ) durableLoad(p->iTrack);
  return SQLITE_OK;
}
static int fxFileSize(sqlite3_file *f, sqlite3_int64 *pS){
  FltFile *p = (FltFile*)f;
  int rc = fltHit(FK_FILESIZE);
  if( rc ) return rc;
  return p->pReal->pMethods->xFileSize(p->pReal, pS);
}
static int fxLock(sqlite3_file *f, int e){
  FltFile *p = (FltFile*)f;
  int rc = fltHit(FK_LOCK);
  if( rc ) return rc;
  return p->pReal->pMethods->xLock(p->pReal, e);
}
static int fxUnlock(sqlite3_file *f, int e){ FltFile *p = (FltFile*)f; return p->pReal->pMethods->xUnlock(p->pReal, e); }
static int fxCheckReservedLock(sqlite3_file *f, int *pR){ FltFile *p = (FltFile*)f; return p->pReal->pMethods->xCheckReservedLock(p->pReal, pR); }
static int fxFileControl(sqlite3_file *f, int op, void *pA){ FltFile *p = (FltFile*)f; return p->pReal->pMethods->xFileControl(p->pReal, op, pA); }
static int fxSectorSize(sqlite3_file *f){ FltFile *p = (FltFile*)f; return p->pReal->pMethods->xSectorSize(p->pReal); }
static int fxDeviceCharacteristics(sqlite3_file *f){ FltFile *p = (FltFile*)f; return p->pReal->pMethods->xDeviceCharacteristics(p->pReal); }
static int fxShmMap(sqlite3_file *f, int i, int sz, int b, void volatile **pp){ FltFile *p = (FltFile*)f; return p->pReal->pMethods->xShmMap(p->pReal, i, sz, b, pp); }
static int fxShmLock(sqlite3_file *f, int o, int n, int fl){ FltFile *p = (FltFile*)f; return p->pReal->pMethods->xShmLock(p->pReal, o, n, fl); }
static void fxShmBarrier(sqlite3_file *f){ FltFile *p = (FltFile*)f; p->pReal->pMethods->xShmBarrier(p->pReal); }
static int fxShmUnmap(sqlite3_file *f, int d){ FltFile *p = (FltFile*)f; return p->pReal->pMethods->xShmUnmap(p->pReal, d); }
static int fxFetch(sqlite3_file *f, sqlite3_int64 o, int n, void **pp){ FltFile *p = (FltFile*)f; return p->pReal->pMethods->xFetch(p->pReal, o, n, pp); }
static int fxUnfetch(sqlite3_file *f, sqlite3_int64 o, void *pv){ FltFile *p = (FltFile*)f; return p->pReal->pMethods->xUnfetch(p->pReal, o, pv); }

static const sqlite3_io_methods fltIoMethods = {
  3,                            /* iVersion */
  fxClose,                      /* xClose */
  fxRead,                       /* xRead */
  fxWrite,                      /* xWrite */
  fxTruncate,                   /* xTruncate */
  fxSync,                       /* xSync */
  fxFileSize,                   /* xFileSize */
  fxLock,                       /* xLock */
  fxUnlock,                     /* xUnlock */
  fxCheckReservedLock,          /* xCheckReservedLock */
  fxFileControl,                /* xFileControl */
  fxSectorSize,                 /* xSectorSize */
  fxDeviceCharacteristics,      /* xDeviceCharacteristics */
  fxShmMap,                     /* xShmMap */
  fxShmLock,                    /* xShmLock */
  fxShmBarrier,                 /* xShmBarrier */
  fxShmUnmap,                   /* xShmUnmap */
  fxFetch,                      /* xFetch */
  fxUnfetch                     /* xUnfetch */
};

static int trackOf(const char *zName, int flags){
  size_t n = strlen(pl.zDb);
  if( !zName || !pl.zDb[0] || strncmp(zName, pl.zDb, n)!=0 ) return -1;
  if( (flags & SQLITE_OPEN_MAIN_DB) && zName[n]==0 ) return T_MAIN;
  if( (flags & SQLITE_OPEN_MAIN_JOURNAL) && strcmp(zName+n, "-journal")==0 ) return T_JOURNAL;
  if( (flags & SQLITE_OPEN_WAL) && strcmp(zName+n, "-wal")==0 ) return T_WAL;
  /* tde opens the page map as a main journal (src/db/pagemap.c mapOpen). */
  if( (flags & SQLITE_OPEN_MAIN_JOURNAL) && strcmp(zName+n, "-tdemap")==0 ) return T_MAP;
  return -1;
}

static int fvOpen(sqlite3_vfs *v, const char *zName, sqlite3_file *f, int flags, int *pOut){
  FltFile *p = (FltFile*)f;
  int rc;
  (void)v;
  memset(p, 0, sizeof(*p));
  p->pReal = (sqlite3_file*)&p[1];
  rc = pUnixVfs->xOpen(pUnixVfs, zName, p->pReal, flags, pOut);
  if( rc ){ f->pMethods = 0; return rc; }
  p->iTrack = trackOf(zName, flags);
  f->pMethods = &fltIoMethods;
  return SQLITE_OK;
}
static int fvDelete(sqlite3_vfs *v, const char *z, int s){
  size_t n = strlen(pl.zDb);
  (void)v;
  if( pl.bArmed && pl.zDb[0] && strncmp(z, pl.zDb, n)==0 ){
    int rc;
    pl.nMutate++;
    imageDurable(IMG_DROP, "delete");
    rc = pUnixVfs->xDelete(pUnixVfs, z, 0);
    for(int i=1; i<T_NFILE; i++){
      if( strcmp(z+n, azSuffix[i])==0 ){ pl.aDur[i].bExists = 0; pl.bDirty = 1; }
    }
    return rc;
  }
  (void)s;
  return pUnixVfs->xDelete(pUnixVfs, z, 0);   /* no directory fsync: see fxSync */
}
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

static sqlite3_vfs faultVfs = {
  2, 0, 0, 0, "faultsim", 0,
  fvOpen, fvDelete, fvAccess, fvFullPathname, fvDlOpen, fvDlError, fvDlSym, fvDlClose,
  fvRandomness, fvSleep, fvCurrentTime, fvGetLastError, fvCurrentTimeInt64,
  0, 0, 0
};

/* ---- group setup ------------------------------------------------------------ */

static int groupSetup(void **state){
  (void)state;
  return tdetestGroupSetup("tdefaults", 1);
}

static int groupTeardown(void **state){
  (void)state;
  for(int i=0; i<T_NFILE; i++){ free(pl.aDur[i].a); pl.aDur[i].a = 0; }
  tdetestScratchRemove();
  return 0;
}

/* ---- fault injection -------------------------------------------------------- */

/* Base database for the fault workload; its raw bytes in *pa. */
static void faultBase(const char *zPath, int bWal, DbImage *pBase, uint64_t *phPre){
  sqlite3 *db = 0;
  char zSql[512];
  removeDb(zPath);
  assert_int_equal(openDb(zPath, &db), SQLITE_OK);
  exec(db, "PRAGMA page_size=1024");
  exec(db, "PRAGMA auto_vacuum=INCREMENTAL");     /* so the workload truncates */
  exec(db, bWal ? "PRAGMA journal_mode=WAL" : "PRAGMA journal_mode=DELETE");
  exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, k INT, v TEXT)");
  exec(db, "CREATE INDEX t_k ON t(k)");
  fillSql(zSql, sizeof(zSql), 1, 30, "base", 300);
  exec(db, zSql);
  if( bWal ) exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  assert_int_equal(contentSum(db, phPre), SQLITE_OK);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  dbImageTake(zPath, pBase);
  /* The base is version 2: in WAL mode it has its page map; version 3
  ** keeps the map in the database file, and no DB-tdemap exists. */
  if( bWal && !bPlain && tdetestFormat()==2 ) assert_non_null(pBase->a[T_MAP]);
  if( tdetestFormat()==3 ) assert_null(pBase->a[T_MAP]);
}

static const char zFaultTx[] =
  "BEGIN;"
  "UPDATE t SET v = printf('upd %d %.300c', id, 'u') WHERE id % 2 = 0;"
  "INSERT INTO t SELECT id + 1000, k, printf('new %d %.500c', id, 'n') FROM t WHERE id <= 12;"
  "DELETE FROM t WHERE id % 5 = 0 OR id BETWEEN 20 AND 29;"
  "COMMIT";

typedef struct FaultRun {
  int bSawError;         /* some step returned an error */
  int bCommitOk;         /* COMMIT succeeded */
  int bOpened;
} FaultRun;

/* The workload; leaves the connection open in *pDb (or NULL). */
static void faultWorkload(const char *zPath, int bWal, sqlite3 **pDb, FaultRun *r){
  sqlite3 *db = 0;
  uint64_t h;
  int rc;
  memset(r, 0, sizeof(*r));
  *pDb = 0;
  rc = openDb(zPath, &db);
  if( rc ){ r->bSawError = 1; sqlite3_close(db); return; }
  r->bOpened = 1;
  *pDb = db;
  /* spill: journal mid-transaction.  The pragma reads the schema, so it
  ** can be the statement that reports a fault. */
  if( sqlite3_exec(db, "PRAGMA cache_size=4", 0, 0, 0) ) r->bSawError = 1;
  if( contentSum(db, &h) ) r->bSawError = 1;
  rc = sqlite3_exec(db, zFaultTx, 0, 0, 0);
  if( rc ) r->bSawError = 1; else r->bCommitOk = 1;
  /* Give back the freed pages: the file shrinks (xTruncate). */
  if( r->bCommitOk && sqlite3_exec(db, "PRAGMA incremental_vacuum", 0, 0, 0) ) r->bSawError = 1;
  if( bWal ){
    if( sqlite3_exec(db, "PRAGMA wal_checkpoint(FULL)", 0, 0, 0) ) r->bSawError = 1;
    else{
      /* The pragma reports a failed checkpoint in its first column. */
      sqlite3_stmt *p = 0;
      if( sqlite3_prepare_v2(db, "PRAGMA wal_checkpoint(PASSIVE)", -1, &p, 0)==SQLITE_OK ){
        if( sqlite3_step(p)!=SQLITE_ROW || sqlite3_column_int(p, 0)!=0 ) r->bSawError = 1;
      }else{
        r->bSawError = 1;
      }
      if( sqlite3_finalize(p) ) r->bSawError = 1;
    }
  }
}

typedef struct FaultTally {
  long nPoints;          /* fault points run (fault fired) */
  long nReported;        /* error reached the application */
  long nMasked;          /* fired, nothing reported, state correct */
  long nPre, nPost;      /* state after recovery */
  long nSameConnErr;     /* the faulted connection errs after the fault cleared */
  long nBad;             /* failures */
} FaultTally;

static long nFaultBadTotal;

/*
** Crash states that tde_verify() reports although SQLite and tde recover
** from them with all data intact (verify is conservative: damage on disk
** never passes unseen, even where nothing will read it) --
**   PR_HDRSLOT  the header slot being rewritten was torn by the power loss
**               (the other slot is valid and the database opens); probeDb
**               checked that the next write transaction rewrote it;
**   PR_WALPAGE  a database page torn during a checkpoint whose newer copy
**               is still in the WAL; probeDb checked that a checkpoint
**               rewrote it.
** They are counted and printed.  TDE_FAULTS_STRICT=1 makes them failures
** (for work on a verify that tells them from damage).
*/
static long nKnownHdrSlot, nKnownWalPage;
static void knownIssue(int out, const char *zWhere, int n, const char *zWhy){
  long *pn = out==PR_HDRSLOT ? &nKnownHdrSlot : &nKnownWalPage;
  (*pn)++;
  if( *pn<=3 ) printf("#   repaired (%s) at %s %d: %s\n",
                      out==PR_HDRSLOT ? "verify flagged a torn header slot; the next write rewrote it"
                                      : "verify flagged a page the WAL still covers; a checkpoint rewrote it",
                      zWhere, n, zWhy);
}
static int strictMode(void){
  const char *z = getenv("TDE_FAULTS_STRICT");
  return z && z[0]=='1';
}

static void faultReportBad(FaultTally *t, const char *zKind, int n, const char *zWhat){
  t->nBad++;
  nFaultBadTotal++;
  if( t->nBad<=5 ) printf("#   FAIL %s fault at call %d: %s\n", zKind, n, zWhat);
}

/* Every fault point of one kind: N = 1, 2, ... until the workload runs
** without reaching the Nth call. */
static void faultKind(const char *zPath, int bWal, const DbImage *pBase,
                      uint64_t hPre, uint64_t hPost, int eType, int bPersist, int rcWrite){
  FaultTally t;
  char zKind[64];
  memset(&t, 0, sizeof(t));
  snprintf(zKind, sizeof(zKind), "%s%s %s", azFaultName[eType], rcWrite==SQLITE_FULL ? " (FULL)" : "",
           bPersist ? "persistent" : "transient");
  for(int n=1; n<100000; n++){
    sqlite3 *db = 0;
    FaultRun r;
    uint64_t h = 0;
    char zWhy[256];
    int bFired, out;
    dbImageRestore(zPath, pBase);
    fltArm(eType, n, bPersist, rcWrite);
    faultWorkload(zPath, bWal, &db, &r);
    bFired = flt.bFired;
    fltClear();
    if( !bFired ){
      if( db ) sqlite3_close(db);
      break;
    }
    t.nPoints++;
    if( r.bSawError ) t.nReported++;
    /* The fault has cleared: the same connection sees a committed state. */
    if( db ){
      int rc;
      sqlite3_exec(db, "ROLLBACK", 0, 0, 0);
      rc = contentSum(db, &h);
      if( rc ) t.nSameConnErr++;
      else if( !(h==hPost || (h==hPre && !r.bCommitOk)) ){
        faultReportBad(&t, zKind, n, h==hPre ? "same connection lost a committed transaction"
                                               : "same connection reads wrong data");
      }
      if( sqlite3_close(db)!=SQLITE_OK ) faultReportBad(&t, zKind, n, "close failed");
    }
    /* A fresh connection: recovery, integrity, authentication, content. */
    out = probeDb(zPath, &h, zWhy, sizeof(zWhy));
    if( out==PR_FAIL ){
      faultReportBad(&t, zKind, n, zWhy);
      continue;
    }
    if( out!=PR_OK ) knownIssue(out, zKind, n, zWhy);
    if( h==hPost ) t.nPost++;
    else if( h==hPre && !r.bCommitOk ) t.nPre++;
    else{
      faultReportBad(&t, zKind, n, h==hPre ? "a transaction reported committed is lost" : "wrong data");
      continue;
    }
    if( !r.bSawError ){
      t.nMasked++;
      if( getenv("TDE_TEST_LOG") ) printf("#   %s fault at call %d absorbed\n", zKind, n);
    }
  }
  printf("# fault %s%-6s %-26s %4ld points: reported %ld, absorbed by SQLite %ld; "
         "after recovery: before-state %ld, after-state %ld; faulted connection erred afterwards %ld; FAILURES %ld\n",
         bPlain ? "CONTROL (plain SQLite, no tde) " : "", bWal ? "WAL" : "DELETE", zKind, t.nPoints, t.nReported, t.nMasked, t.nPre, t.nPost,
         t.nSameConnErr, t.nBad);
}

static void faultMode(int bWal){
  char zPath[PATH_MAX];
  DbImage base;
  uint64_t hPre = 0, hPost = 0;
  sqlite3 *db = 0;
  FaultRun r;
  long aCalls[FK_N];
  long nBefore = nFaultBadTotal;
  pathOf(zPath, bWal ? "fault-wal.db" : "fault-delete.db");
  faultBase(zPath, bWal, &base, &hPre);

  /* Dry run: the expected result and the calls of each kind. */
  fltArm(-1, 0, 0, 0);
  faultWorkload(zPath, bWal, &db, &r);
  memcpy(aCalls, flt.aCalls, sizeof(aCalls));
  assert_true(r.bCommitOk && !r.bSawError);
  assert_int_equal(contentSum(db, &hPost), SQLITE_OK);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  assert_true(hPre!=hPost);
  printf("# fault workload, journal_mode=%s: calls per kind:", bWal ? "WAL" : "DELETE");
  for(int i=0; i<FK_N; i++) printf(" %s %ld;", azFaultName[i], aCalls[i]);
  printf("\n");

  for(int e=0; e<FK_N; e++){
    for(int bPersist=0; bPersist<2; bPersist++){
      faultKind(zPath, bWal, &base, hPre, hPost, e, bPersist, 0);
      if( e==FK_WRITE ) faultKind(zPath, bWal, &base, hPre, hPost, e, bPersist, SQLITE_FULL);
    }
  }
  dbImageFree(&base);
  removeDb(zPath);
  if( strictMode() && (nKnownHdrSlot || nKnownWalPage) ){
    fail_msg("TDE_FAULTS_STRICT: %ld known-issue outcomes", nKnownHdrSlot + nKnownWalPage);
  }
  if( nFaultBadTotal!=nBefore ){
    fail_msg("%ld fault points (journal_mode=%s) left a wrong or unopenable database",
             nFaultBadTotal - nBefore, bWal ? "WAL" : "DELETE");
  }
}

/* ---- faults inside the shim (issue 12, item 3) ------------------------------ */

/*
** The shim's own calls, failed through its fault hook (tdeFaultHook,
** tde_int.h): its reads of the header, of pages, of the journal and of the
** WAL, and its secure key memory.  A VFS below tde cannot single these out,
** and SQLite never sees them as its own calls, so nothing in SQLite may
** absorb them: every one that fires must reach the application (no
** "absorbed" outcomes here), and the database must afterwards hold the
** state before or after the transaction (after, if COMMIT said OK).
*/
static struct { int eSite; int iCountdown; int nFired; } sf;
static int shimFault(int eSite){
  if( eSite!=sf.eSite || sf.iCountdown<=0 ) return 0;
  if( --sf.iCountdown>0 ) return 0;
  sf.nFired++;
  return 1;
}

static void shimFaults(int bWal){
  static const struct { int eSite; const char *zName; } aSite[] = {
    { TDE_FAULT_READ_HEADER,  "header read" },
    { TDE_FAULT_READ_PAGE,    "page read" },
    { TDE_FAULT_READ_JOURNAL, "journal read" },
    { TDE_FAULT_READ_WAL,     "WAL read" },
    { TDE_FAULT_ALLOC_SECURE, "key memory" },
  };
  char zPath[PATH_MAX];
  DbImage base;
  uint64_t hPre = 0, hPost = 0;
  sqlite3 *db = 0;
  FaultRun r;
  long nBad = 0;
  pathOf(zPath, bWal ? "shimfault-wal.db" : "shimfault-delete.db");
  faultBase(zPath, bWal, &base, &hPre);
  faultWorkload(zPath, bWal, &db, &r);
  assert_true(r.bCommitOk && !r.bSawError);
  assert_int_equal(contentSum(db, &hPost), SQLITE_OK);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  for(size_t k=0; k<sizeof(aSite)/sizeof(aSite[0]); k++){
    long nPoints = 0, nReported = 0, nPre = 0, nPost = 0, nAtClose = 0, nAbsorbed = 0;
    for(int n=1; n<5000; n++){
      uint64_t h = 0;
      char zWhy[256];
      int out, nFiredWork;
      dbImageRestore(zPath, &base);
      sf.eSite = aSite[k].eSite;
      sf.iCountdown = n;
      sf.nFired = 0;
      tdeFaultHook = shimFault;
      faultWorkload(zPath, bWal, &db, &r);
      nFiredWork = sf.nFired;
      /* sqlite3_close() reports nothing by design (a failed lock there
      ** only skips the last checkpoint): faults that fire only there are
      ** counted apart; the state must still be right. */
      if( db ){ sqlite3_exec(db, "ROLLBACK", 0, 0, 0); sqlite3_close(db); }
      tdeFaultHook = 0;
      if( !sf.nFired ) break;
      nPoints++;
      if( !nFiredWork ) nAtClose++;
      else if( r.bSawError ) nReported++;
      else if( aSite[k].eSite==TDE_FAULT_READ_PAGE ){
        /* A page read is SQLite's own read passed through, and SQLite
        ** absorbs a few of those by design (see the CONTROL run above). */
        nAbsorbed++;
      }else if( nBad++<5 ){
        printf("#   FAIL %s fault at call %d: absorbed, the application was not told\n", aSite[k].zName, n);
      }
      out = probeDb(zPath, &h, zWhy, sizeof(zWhy));
      if( out==PR_FAIL ){
        if( nBad++<5 ) printf("#   FAIL %s fault at call %d: %s\n", aSite[k].zName, n, zWhy);
        continue;
      }
      if( h==hPost ) nPost++;
      else if( h==hPre && !r.bCommitOk ) nPre++;
      else if( nBad++<5 ) printf("#   FAIL %s fault at call %d: wrong data\n", aSite[k].zName, n);
    }
    printf("# shim fault %-6s %-13s %4ld points: reported %ld, only in sqlite3_close %ld, "
           "absorbed by SQLite %ld; after recovery: before-state %ld, after-state %ld\n",
           bWal ? "WAL" : "DELETE", aSite[k].zName, nPoints, nReported, nAtClose, nAbsorbed, nPre, nPost);
  }
  dbImageFree(&base);
  removeDb(zPath);
  if( nBad ) fail_msg("%ld shim fault points were absorbed or left a wrong database", nBad);
}
static void test_shim_faults_delete(void **s){ (void)s; shimFaults(0); }
static void test_shim_faults_wal(void **s){ (void)s; shimFaults(1); }

/* Control: the same runs on plain SQLite, to tell SQLite's own absorbed
** faults from tde's.  Failures here would mean the harness is unfair. */
static void test_faults_control(void **s){
  (void)s;
  bPlain = 1;
  faultMode(0);
  faultMode(1);
  bPlain = 0;
}
static void test_faults_delete(void **s){ (void)s; faultMode(0); }
static void test_faults_wal(void **s){ (void)s; faultMode(1); }

/* ---- power loss --------------------------------------------------------------- */

#define OP_REWRAP "rewrap"
static const char *azOpsDelete[] = {
  "INSERT INTO t SELECT id + 500, k, printf('small %d', id) FROM t WHERE id <= 5",
  "BEGIN; UPDATE t SET v = printf('spill %d %.700c', id, 'z'); UPDATE t SET k = k + 1;"
    " INSERT INTO t VALUES(1000, 0, printf('%.3000c', 'n')); COMMIT",
  "DELETE FROM t WHERE id % 3 = 0",
  "VACUUM",
  OP_REWRAP,
  "INSERT INTO t VALUES(2000, 1, 'last')",
};
static const char *azOpsWal[] = {
  "INSERT INTO t SELECT id + 500, k, printf('small %d', id) FROM t WHERE id <= 5",
  "BEGIN; UPDATE t SET v = printf('spill %d %.700c', id, 'z'); UPDATE t SET k = k + 1;"
    " INSERT INTO t VALUES(1000, 0, printf('%.3000c', 'n')); COMMIT",
  "PRAGMA wal_checkpoint(TRUNCATE)",
  "DELETE FROM t WHERE id % 3 = 0",
  OP_REWRAP,
  "PRAGMA wal_checkpoint(TRUNCATE)",
  "INSERT INTO t VALUES(2000, 1, 'last')",
};

static void runOp(sqlite3 *db, const char *zOp){
  if( strcmp(zOp, OP_REWRAP)==0 ){
    char zId[TDE_KEYID_MAX+1];
    assert_int_equal(tde_keystore_new_key(zCfg, zId, sizeof(zId)), TDE_OK);
    if( tde_db_rewrap(db, "main")!=TDE_OK ) fail_msg("tde_db_rewrap: %s", tde_last_error());
  }else{
    exec(db, zOp);
  }
}

static void powerLoss(int bWal){
  const char **azOp = bWal ? azOpsWal : azOpsDelete;
  int nOp = bWal ? (int)(sizeof(azOpsWal)/sizeof(azOpsWal[0])) : (int)(sizeof(azOpsDelete)/sizeof(azOpsDelete[0]));
  char zPath[PATH_MAX], zSql[512];
  uint64_t aState[16];
  DbImage base;
  sqlite3 *db = 0;
  long aKind[3] = {0, 0, 0}, nPre = 0, nPost = 0, nBad = 0, nHdr = 0, nWalPage = 0;
  pathOf(zPath, bWal ? "pl-wal.db" : "pl-delete.db");
  removeDb(zPath);
  assert_int_equal(openDb(zPath, &db), SQLITE_OK);
  exec(db, "PRAGMA page_size=1024");
  exec(db, bWal ? "PRAGMA journal_mode=WAL" : "PRAGMA journal_mode=DELETE");
  exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, k INT, v TEXT)");
  exec(db, "CREATE INDEX t_k ON t(k)");
  fillSql(zSql, sizeof(zSql), 1, 40, "before", 700);
  exec(db, zSql);
  if( bWal ) exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  dbImageTake(zPath, &base);
  if( bWal && tdetestFormat()==2 ) assert_non_null(base.a[T_MAP]);
  if( tdetestFormat()==3 ) assert_null(base.a[T_MAP]);   /* the map in the file */

  /* Dry run: the state after each operation. */
  assert_int_equal(openDb(zPath, &db), SQLITE_OK);
  assert_int_equal(contentSum(db, &aState[0]), SQLITE_OK);
  for(int i=0; i<nOp; i++){
    runOp(db, azOp[i]);
    assert_int_equal(contentSum(db, &aState[i+1]), SQLITE_OK);
  }
  assert_int_equal(sqlite3_close(db), SQLITE_OK);

  /* The recorded run. */
  dbImageRestore(zPath, &base);
  snprintf(pl.zDb, sizeof(pl.zDb), "%s", zPath);
  pathOf(pl.zDir, bWal ? "pl-wal-img" : "pl-delete-img");
  mkdir(pl.zDir, 0700);
  pl.nImage = 0;
  pl.nMutate = 0;
  for(int i=0; i<T_NFILE; i++) durableLoad(i);
  pl.bArmed = 1;
  pl.iOp = 0;
  assert_int_equal(openDb(zPath, &db), SQLITE_OK);
  exec(db, "PRAGMA synchronous=FULL");
  exec(db, "PRAGMA cache_size=2");
  for(int i=0; i<nOp; i++){
    pl.iOp = i;
    runOp(db, azOp[i]);
    imageDurable(IMG_POST, "after the operation returned");
  }
  pl.bArmed = 0;
  sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int*)0);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  pl.zDb[0] = 0;

  for(int k=0; k<pl.nImage; k++){
    char zImg[PATH_MAX+64], zWhy[256];
    uint64_t h = 0;
    int iOp = aImg[k].iOp;
    int bOk, out;
    imagePath(zImg, sizeof(zImg), k, 0);
    aKind[aImg[k].kind]++;
    out = probeDb(zImg, &h, zWhy, sizeof(zWhy));
    if( out==PR_FAIL ){
      bOk = 0;
    }else if( h==aState[iOp+1] ){
      bOk = 1; nPost++;
    }else if( h==aState[iOp] && aImg[k].kind!=IMG_POST ){
      bOk = 1; nPre++;
    }else{
      bOk = 0;
      snprintf(zWhy, sizeof(zWhy), "%s", h==aState[iOp] ? "committed operation lost" : "wrong data");
    }
    if( bOk && out!=PR_OK ){
      if( out==PR_HDRSLOT ) nHdr++; else nWalPage++;
      knownIssue(out, aImg[k].zWhat, k, zWhy);
    }
    if( !bOk ){
      nBad++;
      if( nBad<=8 ) printf("#   FAIL image %d (%s, operation %d \"%.40s\", %s): %s\n", k, azImgKind[aImg[k].kind],
                           iOp, azOp[iOp], aImg[k].zWhat, zWhy);
    }
    removeDb(zImg);
  }
  printf("# power loss, journal_mode=%s: %d operations, %d mutating calls, %d images "
         "(drop-unsynced %ld, torn write %ld, after-operation %ld): state before %ld, after %ld, FAILURES %ld\n",
         bWal ? "WAL" : "DELETE", nOp, pl.nMutate, pl.nImage, aKind[IMG_DROP], aKind[IMG_TORN], aKind[IMG_POST],
         nPre, nPost, nBad);
  printf("#   of those in the right state, tde_verify reported TDE_AUTH for %ld with a torn header slot "
         "and %ld with a torn page the WAL still covers (each repaired: the next write, a checkpoint)\n", nHdr, nWalPage);
  dbImageFree(&base);
  removeDb(zPath);
  assert_true(pl.nImage > 50);
  assert_true(pl.nImage < MAX_IMAGES);
  if( strictMode() && (nHdr || nWalPage) ){
    fail_msg("TDE_FAULTS_STRICT: tde_verify rejected %ld recoverable power-loss images", nHdr + nWalPage);
  }
  if( nBad ) fail_msg("%ld of %d power-loss images (journal_mode=%s) unopenable or wrong", nBad, pl.nImage,
                      bWal ? "WAL" : "DELETE");
}

static void test_power_loss_delete(void **s){ (void)s; powerLoss(0); }
static void test_power_loss_wal(void **s){ (void)s; powerLoss(1); }

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_faults_control),
    cmocka_unit_test(test_faults_delete),
    cmocka_unit_test(test_faults_wal),
    cmocka_unit_test(test_power_loss_delete),
    cmocka_unit_test(test_power_loss_wal),
    cmocka_unit_test(test_shim_faults_delete),
    cmocka_unit_test(test_shim_faults_wal),
  };
  /* The fault VFS goes below tde: default before tde_register. */
  if( sqlite3_initialize() ) return 1;
  pUnixVfs = sqlite3_vfs_find("unix");
  if( !pUnixVfs ) return 1;
  faultVfs.szOsFile = (int)sizeof(FltFile) + pUnixVfs->szOsFile;
  faultVfs.mxPathname = pUnixVfs->mxPathname;
  if( sqlite3_vfs_register(&faultVfs, 1) ) return 1;
  return tdetestExit(cmocka_run_group_tests_name("faults", tests, groupSetup, groupTeardown));
}
