/*
** The WAL chain under a large transaction and under allocation failures
** (issue 21, bugs 7 and 9), counted, not timed.
**
**  - A writer reading back the frames its own open transaction spilled
**    (cache smaller than the transaction) pays one WAL read and one frame
**    MAC per page, however many frames the transaction holds: a counting
**    VFS below tde counts the WAL's reads, tdeWalMacCount() the MACs, per
**    lookup, at about 1,000 and about 8,000 frames.  (It re-walked the
**    chain from the WAL header on every such read.)
**  - What the shortcut must keep: an own frame altered on disk (a byte of
**    its page, or another own frame copied over it) is refused, never
**    served.
**  - Allocation failures (SQLite's allocator replaced, as test_malloc.c
**    does: the Nth sqlite3_malloc/realloc fails once) over a WAL workload
**    that opens a log with committed frames (recovery, chain verification),
**    spills a transaction and reads it back: for every N until no failure
**    fires, no statement ends in SQLITE_IOERR_AUTH or SQLITE_CORRUPT and
**    no log line calls it tampering; each failure is SQLITE_NOMEM; with
**    the fault cleared the database holds the state before or after the
**    transaction (after, if COMMIT said OK) and passes integrity_check.
*/
#include "tdetest.h"
#include "vfs/vfs_int.h"          /* tdeWalMacCount */

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the counting VFS (below tde): WAL reads ------------------------------- */

static sqlite3_vfs *pCntBelow;
static long nWalRead;

typedef struct CntFile {
  sqlite3_file base;
  sqlite3_file *pReal;
  int bWal;
} CntFile;

#define CNT_REAL(f) (((CntFile*)(f))->pReal)

static int cntClose(sqlite3_file *f){ return CNT_REAL(f)->pMethods->xClose(CNT_REAL(f)); }
static int cntRead(sqlite3_file *f, void *z, int n, sqlite3_int64 o){
  if( ((CntFile*)f)->bWal ) __atomic_fetch_add(&nWalRead, 1, __ATOMIC_RELAXED);
  return CNT_REAL(f)->pMethods->xRead(CNT_REAL(f), z, n, o);
}
static int cntWrite(sqlite3_file *f, const void *z, int n, sqlite3_int64 o){
  return CNT_REAL(f)->pMethods->xWrite(CNT_REAL(f), z, n, o);
}
static int cntTruncate(sqlite3_file *f, sqlite3_int64 n){ return CNT_REAL(f)->pMethods->xTruncate(CNT_REAL(f), n); }
static int cntSync(sqlite3_file *f, int fl){ return CNT_REAL(f)->pMethods->xSync(CNT_REAL(f), fl); }
static int cntFileSize(sqlite3_file *f, sqlite3_int64 *pn){ return CNT_REAL(f)->pMethods->xFileSize(CNT_REAL(f), pn); }
static int cntLock(sqlite3_file *f, int e){ return CNT_REAL(f)->pMethods->xLock(CNT_REAL(f), e); }
static int cntUnlock(sqlite3_file *f, int e){ return CNT_REAL(f)->pMethods->xUnlock(CNT_REAL(f), e); }
static int cntReserved(sqlite3_file *f, int *pr){ return CNT_REAL(f)->pMethods->xCheckReservedLock(CNT_REAL(f), pr); }
static int cntFcntl(sqlite3_file *f, int op, void *a){ return CNT_REAL(f)->pMethods->xFileControl(CNT_REAL(f), op, a); }
static int cntSector(sqlite3_file *f){ return CNT_REAL(f)->pMethods->xSectorSize(CNT_REAL(f)); }
static int cntDevChar(sqlite3_file *f){ return CNT_REAL(f)->pMethods->xDeviceCharacteristics(CNT_REAL(f)); }
static int cntShmMap(sqlite3_file *f, int i, int n, int b, void volatile **pp){
  return CNT_REAL(f)->pMethods->xShmMap(CNT_REAL(f), i, n, b, pp);
}
static int cntShmLock(sqlite3_file *f, int o, int n, int fl){ return CNT_REAL(f)->pMethods->xShmLock(CNT_REAL(f), o, n, fl); }
static void cntShmBarrier(sqlite3_file *f){ CNT_REAL(f)->pMethods->xShmBarrier(CNT_REAL(f)); }
static int cntShmUnmap(sqlite3_file *f, int d){ return CNT_REAL(f)->pMethods->xShmUnmap(CNT_REAL(f), d); }
static int cntFetch(sqlite3_file *f, sqlite3_int64 o, int n, void **pp){ return CNT_REAL(f)->pMethods->xFetch(CNT_REAL(f), o, n, pp); }
static int cntUnfetch(sqlite3_file *f, sqlite3_int64 o, void *pp){ return CNT_REAL(f)->pMethods->xUnfetch(CNT_REAL(f), o, pp); }

static const sqlite3_io_methods cntIo = {
  3,               /* iVersion */
  cntClose,        /* xClose */
  cntRead,         /* xRead */
  cntWrite,        /* xWrite */
  cntTruncate,     /* xTruncate */
  cntSync,         /* xSync */
  cntFileSize,     /* xFileSize */
  cntLock,         /* xLock */
  cntUnlock,       /* xUnlock */
  cntReserved,     /* xCheckReservedLock */
  cntFcntl,        /* xFileControl */
  cntSector,       /* xSectorSize */
  cntDevChar,      /* xDeviceCharacteristics */
  cntShmMap,       /* xShmMap */
  cntShmLock,      /* xShmLock */
  cntShmBarrier,   /* xShmBarrier */
  cntShmUnmap,     /* xShmUnmap */
  cntFetch,        /* xFetch */
  cntUnfetch       /* xUnfetch */
};

static int cntOpen(sqlite3_vfs *v, const char *zName, sqlite3_file *f, int flags, int *pOut){
  CntFile *p = (CntFile*)f;
  int rc;
  (void)v;
  memset(p, 0, sizeof(*p));
  p->pReal = (sqlite3_file*)&p[1];
  p->bWal = (flags & SQLITE_OPEN_WAL)!=0;
  rc = pCntBelow->xOpen(pCntBelow, zName, p->pReal, flags, pOut);
  if( rc ){
    if( p->pReal->pMethods ) p->pReal->pMethods->xClose(p->pReal);
    f->pMethods = 0;
    return rc;
  }
  f->pMethods = &cntIo;
  return SQLITE_OK;
}
static int cntDelete(sqlite3_vfs *v, const char *z, int d){ (void)v; return pCntBelow->xDelete(pCntBelow, z, d); }
static int cntAccess(sqlite3_vfs *v, const char *z, int fl, int *pr){ (void)v; return pCntBelow->xAccess(pCntBelow, z, fl, pr); }
static int cntFull(sqlite3_vfs *v, const char *z, int n, char *zOut){ (void)v; return pCntBelow->xFullPathname(pCntBelow, z, n, zOut); }
static void *cntDlOpen(sqlite3_vfs *v, const char *z){ (void)v; return pCntBelow->xDlOpen(pCntBelow, z); }
static void cntDlError(sqlite3_vfs *v, int n, char *z){ (void)v; pCntBelow->xDlError(pCntBelow, n, z); }
static void (*cntDlSym(sqlite3_vfs *v, void *h, const char *z))(void){ (void)v; return pCntBelow->xDlSym(pCntBelow, h, z); }
static void cntDlClose(sqlite3_vfs *v, void *h){ (void)v; pCntBelow->xDlClose(pCntBelow, h); }
static int cntRandomness(sqlite3_vfs *v, int n, char *z){ (void)v; return pCntBelow->xRandomness(pCntBelow, n, z); }
static int cntSleep(sqlite3_vfs *v, int us){ (void)v; return pCntBelow->xSleep(pCntBelow, us); }
static int cntTime(sqlite3_vfs *v, double *pt){ (void)v; return pCntBelow->xCurrentTime(pCntBelow, pt); }
static int cntLastError(sqlite3_vfs *v, int n, char *z){ (void)v; return pCntBelow->xGetLastError(pCntBelow, n, z); }
static int cntTime64(sqlite3_vfs *v, sqlite3_int64 *pt){ (void)v; return pCntBelow->xCurrentTimeInt64(pCntBelow, pt); }

static sqlite3_vfs cntVfs = {
  2, 0, 0, 0, "r3walchain-count", 0, cntOpen, cntDelete, cntAccess, cntFull, cntDlOpen, cntDlError,
  cntDlSym, cntDlClose, cntRandomness, cntSleep, cntTime, cntLastError, cntTime64, 0, 0, 0
};

/* ---- the failing allocator (armed only in the allocation test) ------------- */

#include "mallocfault.h"       /* the failing allocator (armed only in this test) */

/* ---- the log: lines that call something tampering ------------------------- */

static int nTamperLines;
static char zFirstTamper[512];

static void tamperLog(void *pArg, int level, const char *zMsg){
  (void)pArg;
  if( getenv("TDE_TEST_LOG") ) fprintf(stderr, "tde log %d: %s\n", level, zMsg);
  if( strstr(zMsg, "spliced") || strstr(zMsg, "not part of an authentic") || strstr(zMsg, "tampered") ){
    if( nTamperLines++==0 ) snprintf(zFirstTamper, sizeof(zFirstTamper), "%s", zMsg);
  }
}

/* ---- helpers ---------------------------------------------------------------- */

static int64_t one(sqlite3 *db, const char *zSql){
  sqlite3_stmt *p = 0;
  int64_t v = -1;
  assert_int_equal(sqlite3_prepare_v2(db, zSql, -1, &p, 0), SQLITE_OK);
  if( sqlite3_step(p)==SQLITE_ROW ) v = sqlite3_column_int64(p, 0);
  assert_int_equal(sqlite3_finalize(p), SQLITE_OK);
  return v;
}

static sqlite3_int64 fileSize(const char *zPath){
  struct stat st;
  return stat(zPath, &st)==0 ? (sqlite3_int64)st.st_size : -1;
}

/* A WAL database of 1 KiB pages, cache of 10 pages, no automatic
** checkpoint, table t(x) empty. */
static sqlite3 *openSpill(const char *zName, char *zPath){
  sqlite3 *db = 0;
  pathOf(zPath, zName);
  removeDb(zPath);
  assert_int_equal(openTdeCfg(zPath, zCfg, &db), SQLITE_OK);
  sqlite3_extended_result_codes(db, 1);
  exec(db, "PRAGMA page_size=1024; PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;"
           "PRAGMA cache_size=10; CREATE TABLE t(x)");
  return db;
}

/* Grow the open transaction to at least nFrame frames in the WAL (rows of
** 400 random bytes: about two a page). */
static void growTo(sqlite3 *db, const char *zPath, long nFrame){
  char zWal[PATH_MAX+8];
  snprintf(zWal, sizeof(zWal), "%s-wal", zPath);
  while( (fileSize(zWal) - 32) / (1024 + 24) < nFrame ){
    exec(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<500) "
             "INSERT INTO t SELECT randomblob(400) FROM c");
  }
}

/* Per lookup of a random row of the open transaction: WAL reads below tde
** and frame MACs computed.  Fixed seed. */
static void lookupCost(sqlite3 *db, double *pRead, double *pMac){
  int64_t nRow = one(db, "SELECT max(rowid) FROM t");
  sqlite3_stmt *p = 0;
  uint64_t r = 20261202;
  long r0, nLook = 200;
  uint64_t m0;
  assert_int_equal(sqlite3_prepare_v2(db, "SELECT length(x) FROM t WHERE rowid=?", -1, &p, 0), SQLITE_OK);
  r0 = nWalRead;
  m0 = tdeWalMacCount();
  for(long i=0; i<nLook; i++){
    r = r*6364136223846793005ULL + 1442695040888963407ULL;
    sqlite3_bind_int64(p, 1, 1 + (int64_t)((r >> 33) % (uint64_t)nRow));
    assert_int_equal(sqlite3_step(p), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(p, 0), 400);
    sqlite3_reset(p);
  }
  assert_int_equal(sqlite3_finalize(p), SQLITE_OK);
  *pRead = (double)(nWalRead - r0) / (double)nLook;
  *pMac = (double)(tdeWalMacCount() - m0) / (double)nLook;
}

/* ---- bug 7: reading back own spilled frames costs O(1) --------------------- */

static void test_own_spilled_read_cost(void **state){
  char zPath[PATH_MAX];
  sqlite3 *db = openSpill("cost.db", zPath);
  double aRead[2], aMac[2];
  static const long anFrame[2] = { 1000, 8000 };
  (void)state;
  exec(db, "BEGIN");
  for(int i=0; i<2; i++){
    growTo(db, zPath, anFrame[i]);
    lookupCost(db, &aRead[i], &aMac[i]);
    printf("# own open transaction of >= %ld frames: %.2f WAL reads, %.2f frame MACs per lookup\n",
           anFrame[i], aRead[i], aMac[i]);
  }
  /* A lookup descends three levels (root, interior, leaf): at most that
  ** many pages from the WAL, each one read and one MAC, whatever the size
  ** (the re-walk cost thousands of each). */
  assert_true(aRead[0] > 0.5);                  /* the lookups did read own frames */
  assert_true(aRead[1] <= 4.0 && aMac[1] <= 4.0);
  assert_true(aRead[1] <= aRead[0] + 1.0 && aMac[1] <= aMac[0] + 1.0);
  exec(db, "COMMIT");
  assert_true(one(db, "SELECT count(*) FROM t") >= 2*anFrame[1] - 1000);
  assert_true(integrityOk(db));
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  removeDb(zPath);
}

/* ---- what the shortcut keeps: an altered own frame is refused --------------- */

/* Frame idx (1-based) of the WAL at zWal, 1 KiB pages: header and page. */
static void frameRead(const char *zWal, long idx, uint8_t *a){
  int fd = open(zWal, O_RDONLY);
  assert_true(fd>=0);
  assert_int_equal(pread(fd, a, 1024+24, 32 + (off_t)(idx-1)*(1024+24)), 1024+24);
  close(fd);
}
static void frameWrite(const char *zWal, long idx, const uint8_t *a, int n, int iOff){
  int fd = open(zWal, O_RDWR);
  assert_true(fd>=0);
  assert_int_equal(pwrite(fd, a, (size_t)n, 32 + (off_t)(idx-1)*(1024+24) + iOff), n);
  close(fd);
}

/* Read all of t inside the open transaction: SQLite result code. */
static int scanRc(sqlite3 *db){
  sqlite3_stmt *p = 0;
  int rc = sqlite3_prepare_v2(db, "SELECT sum(length(x)) FROM t", -1, &p, 0);
  if( rc==SQLITE_OK ){
    rc = sqlite3_step(p);
    if( rc==SQLITE_ROW ) rc = SQLITE_OK;
  }
  if( sqlite3_finalize(p)!=SQLITE_OK && rc==SQLITE_OK ) rc = sqlite3_extended_errcode(db);
  return rc==SQLITE_OK ? rc : sqlite3_extended_errcode(db);
}

static void ownFrameAltered(int bCopy){
  char zPath[PATH_MAX], zWal[PATH_MAX+8];
  sqlite3 *db = openSpill(bCopy ? "copy.db" : "flip.db", zPath);
  uint8_t aFrame[1024+24], aOther[1024+24];
  long nFrame, k;
  int rc;
  snprintf(zWal, sizeof(zWal), "%s-wal", zPath);
  exec(db, "INSERT INTO t VALUES('committed')");
  exec(db, "BEGIN");
  growTo(db, zPath, 600);
  assert_int_equal(scanRc(db), SQLITE_OK);     /* the same read works untouched */
  nFrame = (fileSize(zWal) - 32) / (1024 + 24);
  /* A frame of the open transaction, well before its last one (whose
  ** header tde may still hold). */
  k = nFrame / 2;
  frameRead(zWal, k, aFrame);
  if( bCopy ){
    /* Another own frame, as this handle wrote it, copied over it. */
    frameRead(zWal, k-1, aOther);
    assert_true(memcmp(aFrame, aOther, 4)!=0);   /* another page */
    frameWrite(zWal, k, aOther, 1024+24, 0);
  }else{
    aFrame[24 + 100] ^= 0x01;                     /* one bit of its page */
    frameWrite(zWal, k, aFrame + 24 + 100, 1, 24 + 100);
  }
  nTamperLines = 0;
  rc = scanRc(db);
  printf("# own frame %ld of %ld %s: the scan says %s (%d)\n", k, nFrame,
         bCopy ? "overwritten by another own frame" : "with one bit flipped", sqlite3_errstr(rc), rc);
  assert_true(rc==SQLITE_IOERR_AUTH || (rc & 0xff)==SQLITE_CORRUPT);
  sqlite3_exec(db, "ROLLBACK", 0, 0, 0);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  /* The committed state is untouched. */
  assert_int_equal(openTdeCfg(zPath, zCfg, &db), SQLITE_OK);
  assert_int_equal(one(db, "SELECT count(*) FROM t"), 1);
  assert_true(integrityOk(db));
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  removeDb(zPath);
}
static void test_own_frame_bit_flipped(void **state){ (void)state; ownFrameAltered(0); }
static void test_own_frame_copied_over(void **state){ (void)state; ownFrameAltered(1); }

/* ---- bug 9: allocation failures are never tampering ------------------------- */

/* Order-independent content of t: count and a sum of hashes.  SQLite
** result code. */
static int content(sqlite3 *db, int64_t *pn, int64_t *pSum){
  sqlite3_stmt *p = 0;
  int rc = sqlite3_prepare_v2(db, "SELECT count(*), total(id*7 + length(v)) FROM t", -1, &p, 0);
  if( rc ) return sqlite3_extended_errcode(db);
  rc = sqlite3_step(p);
  if( rc==SQLITE_ROW ){
    *pn = sqlite3_column_int64(p, 0);
    *pSum = (int64_t)sqlite3_column_double(p, 1);
    rc = SQLITE_OK;
  }else{
    rc = sqlite3_extended_errcode(db);
  }
  sqlite3_finalize(p);
  return rc;
}

typedef struct Outcome {
  int bCommitOk;
  int nError;           /* statements that failed */
  int nAuth;            /* of them: SQLITE_IOERR_AUTH or SQLITE_CORRUPT */
  int nOther;           /* of them: neither that nor SQLITE_NOMEM */
  int rcOther;
  int bWrongRead;       /* a read that succeeded returned wrong content */
} Outcome;

static void noteRc(Outcome *o, int rc){
  if( rc==SQLITE_OK ) return;
  o->nError++;
  if( rc==SQLITE_IOERR_AUTH || (rc & 0xff)==SQLITE_CORRUPT ) o->nAuth++;
  else if( (rc & 0xff)!=SQLITE_NOMEM && rc!=SQLITE_IOERR_NOMEM ){ o->nOther++; o->rcOther = rc; }
}

static int execRc(sqlite3 *db, const char *zSql){
  return sqlite3_exec(db, zSql, 0, 0, 0)==SQLITE_OK ? SQLITE_OK : sqlite3_extended_errcode(db);
}

/* The workload under the failing allocator: open the copy (a log with
** committed frames: recovery, then the chain), read it all, one
** transaction that spills and reads its own frames back, commit. */
static void faultWorkload(const char *zPath, int64_t nPre, int64_t sumPre, Outcome *o){
  sqlite3 *db = 0;
  int64_t n = 0, sum = 0;
  int rc;
  memset(o, 0, sizeof(*o));
  rc = openTdeCfg(zPath, zCfg, &db);
  if( rc ){
    noteRc(o, db ? sqlite3_extended_errcode(db) : rc);
    mf.bArmed = 0;
    sqlite3_close(db);
    return;
  }
  sqlite3_extended_result_codes(db, 1);
  rc = execRc(db, "PRAGMA cache_size=10");
  noteRc(o, rc);
  rc = content(db, &n, &sum);
  noteRc(o, rc);
  if( rc==SQLITE_OK && (n!=nPre || sum!=sumPre) ) o->bWrongRead = 1;
  rc = execRc(db, "BEGIN");
  if( rc==SQLITE_OK ) rc = execRc(db, "INSERT INTO t SELECT id+1000, printf('%.300c', 'n') FROM t WHERE id<=60");
  if( rc==SQLITE_OK ) rc = execRc(db, "UPDATE t SET v=v||'x' WHERE id%3=0");
  if( rc==SQLITE_OK ){
    rc = content(db, &n, &sum);
    if( rc==SQLITE_OK && n!=nPre+60 ) o->bWrongRead = 1;
  }
  if( rc==SQLITE_OK ){
    rc = execRc(db, "COMMIT");
    if( rc==SQLITE_OK ) o->bCommitOk = 1;
  }
  noteRc(o, rc);
  mf.bArmed = 0;
  sqlite3_exec(db, "ROLLBACK", 0, 0, 0);
  if( sqlite3_close(db)!=SQLITE_OK ) fail_msg("sqlite3_close failed after an allocation failure");
}

static void copyFile(const char *zFrom, const char *zTo){
  size_t n = 0;
  unsigned char *a = readAll(zFrom, &n);
  unlink(zTo);
  if( a ){ writeAll(zTo, a, n); free(a); }
}

static void test_malloc_never_tamper(void **state){
  char zBase[PATH_MAX], zPath[PATH_MAX], zFrom[PATH_MAX+16], zTo[PATH_MAX+16];
  static const char *azSuffix[] = { "", "-wal", "-tdemap" };
  sqlite3 *db = 0;
  int64_t nPre = 0, sumPre = 0, nPost = 0, sumPost = 0, n, sum;
  long nPoints = 0, nNomem = 0, nAbsorbed = 0, nBefore = 0, nAfter = 0, nBad = 0;
  (void)state;
  pathOf(zBase, "mbase.db");
  pathOf(zPath, "mrun.db");
  removeDb(zBase);
  /* The base: a WAL with three committed transactions (no checkpoint),
  ** copied while the connection that wrote it is still open, so that the
  ** log stays. */
  assert_int_equal(openTdeCfg(zBase, zCfg, &db), SQLITE_OK);
  exec(db, "PRAGMA page_size=1024; PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;"
           "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)");
  exec(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<40) "
           "INSERT INTO t SELECT i, printf('%.200c', 'a') FROM c");
  exec(db, "UPDATE t SET v=printf('%.250c', 'b') WHERE id%2=0");
  exec(db, "WITH RECURSIVE c(i) AS (SELECT 41 UNION ALL SELECT i+1 FROM c WHERE i<80) "
           "INSERT INTO t SELECT i, printf('%.100c', 'c') FROM c");
  assert_int_equal(content(db, &nPre, &sumPre), SQLITE_OK);
  for(int i=0; i<3; i++){
    snprintf(zFrom, sizeof(zFrom), "%s%s", zBase, azSuffix[i]);
    snprintf(zTo, sizeof(zTo), "%s%s.keep", zBase, azSuffix[i]);
    copyFile(zFrom, zTo);
  }
  snprintf(zFrom, sizeof(zFrom), "%s-wal.keep", zBase);
  assert_true(fileSize(zFrom) > 32 + 3*(1024+24));
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  tde_set_log(tamperLog, 0);

  /* iN 0: a dry run (no failure) for the state after; then each N. */
  for(int iN=0; iN<1000000; iN++){
    Outcome o;
    int bFired;
    char zWhy[200] = "";
    removeDb(zPath);
    for(int i=0; i<3; i++){
      snprintf(zFrom, sizeof(zFrom), "%s%s.keep", zBase, azSuffix[i]);
      snprintf(zTo, sizeof(zTo), "%s%s", zPath, azSuffix[i]);
      copyFile(zFrom, zTo);
    }
    nTamperLines = 0;
    mf.iCountdown = iN==0 ? 1000000000 : iN;
    mf.bFired = 0;
    mf.nCalls = 0;
    mf.bArmed = 1;
    faultWorkload(zPath, nPre, sumPre, &o);
    mf.bArmed = 0;
    bFired = mf.bFired;
    if( iN==1 ) assert_true(bFired);
    if( !bFired ){
      /* A run without a failure: the state after. */
      assert_true(o.bCommitOk && o.nError==0 && !o.bWrongRead && nTamperLines==0);
      assert_int_equal(openTdeCfg(zPath, zCfg, &db), SQLITE_OK);
      assert_int_equal(content(db, &n, &sum), SQLITE_OK);
      assert_int_equal(sqlite3_close(db), SQLITE_OK);
      if( iN==0 ){ nPost = n; sumPost = sum; continue; }
      assert_true(n==nPost && sum==sumPost);
      break;
    }
    nPoints++;
    if( o.nError==0 ) nAbsorbed++;
    else if( o.nAuth==0 && o.nOther==0 ) nNomem++;
    if( o.nAuth ) snprintf(zWhy, sizeof(zWhy), "a statement said SQLITE_IOERR_AUTH or SQLITE_CORRUPT");
    else if( nTamperLines ) snprintf(zWhy, sizeof(zWhy), "log: %.150s", zFirstTamper);
    else if( o.nOther ) snprintf(zWhy, sizeof(zWhy), "an error other than SQLITE_NOMEM: %s (%d)",
                                 sqlite3_errstr(o.rcOther), o.rcOther);
    else if( o.bWrongRead ) snprintf(zWhy, sizeof(zWhy), "a read returned wrong content");
    else{
      /* With the fault cleared: the state before or after, intact. */
      int rc = openTdeCfg(zPath, zCfg, &db);
      if( rc==SQLITE_OK ) rc = content(db, &n, &sum);
      if( rc ) snprintf(zWhy, sizeof(zWhy), "afterwards: %s", sqlite3_errstr(rc));
      else if( !integrityOk(db) ) snprintf(zWhy, sizeof(zWhy), "afterwards: integrity_check failed");
      else if( n==nPre && sum==sumPre && !o.bCommitOk ) nBefore++;
      else if( n==nPost && sum==sumPost ) nAfter++;
      else snprintf(zWhy, sizeof(zWhy), "afterwards: %s", n==nPre ? "a committed transaction lost" : "wrong data");
      sqlite3_close(db);
      db = 0;
    }
    if( zWhy[0] ){
      nBad++;
      if( nBad<=5 ) printf("#   FAIL allocation %d: %s\n", iN, zWhy);
    }
  }
  tde_set_log(quietLog, 0);
  printf("# %ld failure points: SQLITE_NOMEM %ld, absorbed %ld; afterwards before-state %ld, "
         "after-state %ld; FAILURES %ld\n", nPoints, nNomem, nAbsorbed, nBefore, nAfter, nBad);
  assert_true(nPost==nPre+60);
  removeDb(zPath);
  removeDb(zBase);
  if( nBad ) fail_msg("%ld allocation-failure points were reported as tampering or left a wrong database", nBad);
}

static int groupSetup(void **state){
  (void)state;
  pCntBelow = sqlite3_vfs_find(0);
  if( !pCntBelow ) return -1;
  cntVfs.szOsFile = (int)sizeof(CntFile) + pCntBelow->szOsFile;
  cntVfs.mxPathname = pCntBelow->mxPathname;
  if( sqlite3_vfs_register(&cntVfs, 1)!=SQLITE_OK ) return -1;    /* tde goes above it */
  /* The keystore stays open: the allocation test fails SQLite's
  ** allocations, and opening a wallet allocates none. */
  return tdetestGroupSetup("tder3walchain", 1);
}

static int groupTeardown(void **state){
  (void)state;
  tde_keystore_close(zCfg);
  tdetestScratchRemove();
  return 0;
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_own_spilled_read_cost),
    cmocka_unit_test(test_own_frame_bit_flipped),
    cmocka_unit_test(test_own_frame_copied_over),
    cmocka_unit_test(test_malloc_never_tamper),
  };
  /* The default allocator first (GETMALLOC is only filled in by an
  ** initialisation), then the failing one in front of it, unarmed. */
  if( sqlite3_initialize() ) return 1;
  if( sqlite3_shutdown() ) return 1;
  if( sqlite3_config(SQLITE_CONFIG_GETMALLOC, &memOrig) ) return 1;
  if( memOrig.xMalloc==0 ) return 1;
  if( sqlite3_config(SQLITE_CONFIG_MALLOC, &memFault) ) return 1;
  if( sqlite3_initialize() ) return 1;
  return cmocka_run_group_tests_name("r3_walchain", tests, groupSetup, groupTeardown);
}
