/*
** Red-team review of the WAL read-path caches of issue 26 (round 6):
** walOwnFrameHeader (a rewritten page's header fields from memory),
** walOwnTrailer (the trailer of the frame just loaded), the running
** checksum taken from SQLite's rewritten checksum field (iRunFrame), and
** walChainExtend's combined trailer + next header read.
**
** Each test makes another connection (or a fault injected below tde, or a
** savepoint rollback, or a WAL restart) change the WAL between this
** handle's writes, then checks: the data each connection reads, integrity,
** and a copy of the database and its WAL opened afresh (SQLite's recovery
** reads every frame and its checksum from frame 1): every commit is there.
** Below tde sits a VFS ("walrev-below") that can fail the N-th next WAL sync or
** a rewrite in place (8 + page bytes).
*/
#include "tdetest.h"

/* ---- the VFS below tde ----------------------------------------------------- */

typedef struct BelowFile {
  sqlite3_file base;
  sqlite3_file *pReal;
  int eKind;                  /* 1 main db, 2 WAL, 0 other */
} BelowFile;

static sqlite3_vfs *pBelowOrig;
static struct {
  sqlite3_int64 nMainReads, nWalReads, nWalWrites, nHdrWrites;
  int nFailSync;              /* the nFailSync-th next WAL sync fails */
  int nFailWrite;             /* the nFailWrite-th next rewrite in place (8 + page bytes) fails */
} bw;

#define BREAL(f) (((BelowFile*)(f))->pReal)

static int belowClose(sqlite3_file *f){ return BREAL(f)->pMethods->xClose(BREAL(f)); }
static int belowRead(sqlite3_file *f, void *z, int n, sqlite3_int64 o){
  BelowFile *p = (BelowFile*)f;
  if( p->eKind==1 ) bw.nMainReads++;
  if( p->eKind==2 ) bw.nWalReads++;
  return p->pReal->pMethods->xRead(p->pReal, z, n, o);
}
static int belowWrite(sqlite3_file *f, const void *z, int n, sqlite3_int64 o){
  BelowFile *p = (BelowFile*)f;
  if( p->eKind==2 ) bw.nWalWrites++;
  if( p->eKind==2 && n==24 ) bw.nHdrWrites++;
  if( p->eKind==2 && n==8+4096 && bw.nFailWrite>0 && --bw.nFailWrite==0 ) return SQLITE_IOERR_WRITE;
  return p->pReal->pMethods->xWrite(p->pReal, z, n, o);
}
static int belowTruncate(sqlite3_file *f, sqlite3_int64 n){ return BREAL(f)->pMethods->xTruncate(BREAL(f), n); }
static int belowSync(sqlite3_file *f, int fl){
  BelowFile *p = (BelowFile*)f;
  if( p->eKind==2 && bw.nFailSync>0 && --bw.nFailSync==0 ) return SQLITE_IOERR_FSYNC;
  return p->pReal->pMethods->xSync(p->pReal, fl);
}
static int belowFileSize(sqlite3_file *f, sqlite3_int64 *pn){ return BREAL(f)->pMethods->xFileSize(BREAL(f), pn); }
static int belowLock(sqlite3_file *f, int e){ return BREAL(f)->pMethods->xLock(BREAL(f), e); }
static int belowUnlock(sqlite3_file *f, int e){ return BREAL(f)->pMethods->xUnlock(BREAL(f), e); }
static int belowCheckReserved(sqlite3_file *f, int *pOut){
  return BREAL(f)->pMethods->xCheckReservedLock(BREAL(f), pOut);
}
static int belowFileControl(sqlite3_file *f, int op, void *pArg){
  return BREAL(f)->pMethods->xFileControl(BREAL(f), op, pArg);
}
static int belowSectorSize(sqlite3_file *f){ return BREAL(f)->pMethods->xSectorSize(BREAL(f)); }
static int belowDevChar(sqlite3_file *f){ return BREAL(f)->pMethods->xDeviceCharacteristics(BREAL(f)); }
static int belowShmMap(sqlite3_file *f, int i, int sz, int b, void volatile **pp){
  return BREAL(f)->pMethods->xShmMap(BREAL(f), i, sz, b, pp);
}
static int belowShmLock(sqlite3_file *f, int o, int n, int fl){ return BREAL(f)->pMethods->xShmLock(BREAL(f), o, n, fl); }
static void belowShmBarrier(sqlite3_file *f){ BREAL(f)->pMethods->xShmBarrier(BREAL(f)); }
static int belowShmUnmap(sqlite3_file *f, int d){ return BREAL(f)->pMethods->xShmUnmap(BREAL(f), d); }
static int belowFetch(sqlite3_file *f, sqlite3_int64 o, int n, void **pp){
  return BREAL(f)->pMethods->xFetch(BREAL(f), o, n, pp);
}
static int belowUnfetch(sqlite3_file *f, sqlite3_int64 o, void *pp){
  return BREAL(f)->pMethods->xUnfetch(BREAL(f), o, pp);
}

static const sqlite3_io_methods belowIo = {
  3, belowClose, belowRead, belowWrite, belowTruncate, belowSync, belowFileSize, belowLock,
  belowUnlock, belowCheckReserved, belowFileControl, belowSectorSize, belowDevChar, belowShmMap,
  belowShmLock, belowShmBarrier, belowShmUnmap, belowFetch, belowUnfetch
};

static int belowOpen(sqlite3_vfs *v, const char *zName, sqlite3_file *f, int flags, int *pOut){
  BelowFile *p = (BelowFile*)f;
  int rc;
  (void)v;
  memset(p, 0, sizeof(*p));
  p->pReal = (sqlite3_file*)&p[1];
  p->eKind = (flags & SQLITE_OPEN_MAIN_DB) ? 1 : (flags & SQLITE_OPEN_WAL) ? 2 : 0;
  rc = pBelowOrig->xOpen(pBelowOrig, zName, p->pReal, flags, pOut);
  f->pMethods = rc==SQLITE_OK ? &belowIo : 0;
  return rc;
}
static int belowDelete(sqlite3_vfs *v, const char *z, int d){ (void)v; return pBelowOrig->xDelete(pBelowOrig, z, d); }
static int belowAccess(sqlite3_vfs *v, const char *z, int fl, int *pOut){
  (void)v; return pBelowOrig->xAccess(pBelowOrig, z, fl, pOut);
}
static int belowFull(sqlite3_vfs *v, const char *z, int n, char *zOut){
  (void)v; return pBelowOrig->xFullPathname(pBelowOrig, z, n, zOut);
}
static void *belowDlOpen(sqlite3_vfs *v, const char *z){ (void)v; return pBelowOrig->xDlOpen(pBelowOrig, z); }
static void belowDlError(sqlite3_vfs *v, int n, char *z){ (void)v; pBelowOrig->xDlError(pBelowOrig, n, z); }
static void (*belowDlSym(sqlite3_vfs *v, void *h, const char *z))(void){
  (void)v; return pBelowOrig->xDlSym(pBelowOrig, h, z);
}
static void belowDlClose(sqlite3_vfs *v, void *h){ (void)v; pBelowOrig->xDlClose(pBelowOrig, h); }
static int belowRandomness(sqlite3_vfs *v, int n, char *z){ (void)v; return pBelowOrig->xRandomness(pBelowOrig, n, z); }
static int belowSleep(sqlite3_vfs *v, int us){ (void)v; return pBelowOrig->xSleep(pBelowOrig, us); }
static int belowTime(sqlite3_vfs *v, double *pT){ (void)v; return pBelowOrig->xCurrentTime(pBelowOrig, pT); }
static int belowLastError(sqlite3_vfs *v, int n, char *z){ (void)v; return pBelowOrig->xGetLastError(pBelowOrig, n, z); }
static int belowTime64(sqlite3_vfs *v, sqlite3_int64 *pT){ (void)v; return pBelowOrig->xCurrentTimeInt64(pBelowOrig, pT); }

static sqlite3_vfs belowVfs = {
  2, 0, 0, 0, "walrev-below", 0, belowOpen, belowDelete, belowAccess, belowFull, belowDlOpen,
  belowDlError, belowDlSym, belowDlClose, belowRandomness, belowSleep, belowTime, belowLastError,
  belowTime64, 0, 0, 0
};

/* ---- databases -------------------------------------------------------------- */

#define NROW 6000
#define PGSZ 4096

/* Connection to zName through tde over the VFS below (bCreate: NROW rows
** of 200 bytes, checkpointed); WAL, no automatic checkpoint,
** synchronous=FULL (a sync at each commit), a small cache (spills). */
static sqlite3 *openDb(const char *zName, int bCreate){
  char zPath[PATH_MAX];
  sqlite3 *db = 0;
  pathOf(zPath, zName);
  if( bCreate ) removeDb(zPath);
  assert_int_equal(openTdeCfg(zPath, zCfg, &db), SQLITE_OK);
  if( bCreate ){
    exec(db, "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;"
             "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);"
             "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<6000) "
             "INSERT INTO t SELECT i, printf('%.200c', 'A') FROM c;"
             "PRAGMA wal_checkpoint(TRUNCATE)");
  }
  exec(db, "PRAGMA wal_autocheckpoint=0; PRAGMA synchronous=FULL; PRAGMA cache_size=40");
  return db;
}

/* sum(id * code of v's letter) + count: which letter each row holds. */
static sqlite3_int64 sumOf(sqlite3 *db){
  sqlite3_stmt *p = 0;
  sqlite3_int64 s;
  assert_int_equal(sqlite3_prepare_v2(db, "SELECT sum(id*unicode(v)) + count(*) FROM t", -1, &p, 0),
                   SQLITE_OK);
  assert_int_equal(sqlite3_step(p), SQLITE_ROW);
  s = sqlite3_column_int64(p, 0);
  assert_int_equal(sqlite3_finalize(p), SQLITE_OK);
  return s;
}

/* The sum when rows 1..nTo hold letter c and the rest letter d. */
static sqlite3_int64 sumWant(int nTo, int c, int d){
  sqlite3_int64 a = (sqlite3_int64)nTo*(nTo+1)/2, all = (sqlite3_int64)NROW*(NROW+1)/2;
  return a*c + (all - a)*d + NROW;
}

/* One transaction updating rows in a scattered order (spills with
** cache_size=40, SQLite rewrites frames in place): rows 1..nTo to letter
** c.  The SQLite result code of the COMMIT (or of the statement). */
static int spillUpdate(sqlite3 *db, int nTo, int c){
  char *zSql = sqlite3_mprintf(
      "BEGIN; UPDATE t SET v=printf('%%.200c', char(%d)) WHERE id<=%d AND id%%7=0;"
      "UPDATE t SET v=printf('%%.200c', char(%d)) WHERE id<=%d AND id%%7<>0;"
      "UPDATE t SET v=printf('%%.200c', char(%d)) WHERE id<=%d AND id%%3=0; COMMIT",
      c, nTo, c, nTo, c, nTo);
  int rc = sqlite3_exec(db, zSql, 0, 0, 0);
  sqlite3_free(zSql);
  if( !sqlite3_get_autocommit(db) ) sqlite3_exec(db, "ROLLBACK", 0, 0, 0);
  return rc;
}

static sqlite3_int64 walFrames(const char *zName){
  char zPath[PATH_MAX], zWal[PATH_MAX+8];
  struct stat st;
  pathOf(zPath, zName);
  snprintf(zWal, sizeof(zWal), "%s-wal", zPath);
  if( stat(zWal, &st) ) return -1;
  return (st.st_size - 32) / (24 + PGSZ);
}

/* A copy of zName and its WAL as they are now, opened afresh (SQLite
** recovers the WAL index from the WAL, frame by frame): its sum, after
** an integrity check. */
static sqlite3_int64 recoveredSumCut(const char *zName, sqlite3_int64 nWalKeep){
  char zPath[PATH_MAX], zCopy[PATH_MAX], zA[PATH_MAX+16], zB[PATH_MAX+16];
  unsigned char *a;
  size_t n = 0;
  sqlite3 *db = 0;
  sqlite3_int64 s;
  pathOf(zPath, zName);
  pathOf(zCopy, "recovered.db");
  removeDb(zCopy);
  a = readAll(zPath, &n);
  assert_non_null(a);
  writeAll(zCopy, a, n);
  free(a);
  for(int i=0; i<2; i++){
    const char *zSuf = i ? "-tdemap" : "-wal";   /* the page map goes with them */
    snprintf(zA, sizeof(zA), "%s%s", zPath, zSuf);
    snprintf(zB, sizeof(zB), "%s%s", zCopy, zSuf);
    a = readAll(zA, &n);
    if( i==0 && nWalKeep>=0 && (size_t)nWalKeep<n ) n = (size_t)nWalKeep;
    if( a ) writeAll(zB, a, n);
    free(a);
  }
  assert_int_equal(openTdeCfg(zCopy, zCfg, &db), SQLITE_OK);
  assert_true(integrityOk(db));
  s = sumOf(db);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  return s;
}

static sqlite3_int64 recoveredSum(const char *zName){
  return recoveredSumCut(zName, -1);
}

/* The running checksum after frame k as db's WAL handle answers SQLite's
** 8-byte read of it (what walRewriteChecksums reads first). */
static void ckAfter(sqlite3 *db, sqlite3_int64 k, unsigned char *a8){
  sqlite3_file *pWal = 0;
  assert_int_equal(sqlite3_file_control(db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &pWal), SQLITE_OK);
  assert_non_null(pWal);
  assert_non_null(pWal->pMethods);
  assert_int_equal(pWal->pMethods->xRead(pWal, a8, 8, 32 + (k-1)*(24+PGSZ) + 16), SQLITE_OK);
}

/* ---- tests ------------------------------------------------------------------ */

/* The running checksum this handle keeps (iRunFrame) after a commit whose
** sync failed, past the rewrite of its checksums: another connection then
** commits the same frames with other content (same generation), and this
** handle commits a spilled transaction after them.  Every commit must be
** in the recovered copy. */
static void test_runck_other_writer(void **state){
  sqlite3 *dbA, *dbB, *dbC;
  sqlite3_int64 nK, nK2;
  unsigned char aA[8], aC[8];
  int bStale;
  (void)state;
  dbA = openDb("runck.db", 1);
  dbB = openDb("runck.db", 0);
  exec(dbA, "CREATE TABLE u(x); INSERT INTO u VALUES(1)");   /* the WAL header */
  bw.nFailSync = 1;                     /* the commit's sync, after the checksums' rewrite */
  bw.nHdrWrites = 0;
  assert_int_not_equal(spillUpdate(dbA, NROW, 'a'), SQLITE_OK);
  printf("# failed commit: %lld frame headers rewritten alone\n", (long long)bw.nHdrWrites);
  assert_true(bw.nHdrWrites > 50);      /* SQLite rewrote the checksums before the sync */
  assert_int_equal(bw.nFailSync, 0);
  nK = walFrames("runck.db");
  assert_true(nK > 50);                 /* it did spill */
  assert_int_equal(sumOf(dbA), sumWant(NROW, 'A', 'A'));
  assert_int_equal(spillUpdate(dbB, NROW, 'b'), SQLITE_OK);
  nK2 = walFrames("runck.db");
  dbC = openDb("runck.db", 0);
  assert_int_equal(sumOf(dbC), sumWant(NROW, 'b', 'b'));
  assert_int_equal(sumOf(dbA), sumWant(NROW, 'b', 'b'));
  /* The frame before the commit frame: the last whose checksum field the
  ** failed commit rewrote after reading it whole (its commit frame, appended
  ** after the first rewrite, carries zero salts and reads as no frame). */
  ckAfter(dbA, nK-1, aA);
  ckAfter(dbC, nK-1, aC);
  bStale = memcmp(aA, aC, 8)!=0;
  printf("# frames: failed commit %lld, the other connection's commit %lld; checksum after frame "
         "%lld as the failed writer's handle answers it %s a fresh handle's\n", (long long)nK,
         (long long)nK2, (long long)nK-1, bStale ? "DIFFERS from" : "equals");
  /* Stale before the fix: the failed writer's cached running checksum
  ** (iRunFrame) outlived its write lock. */
  assert_false(bStale);
  assert_int_equal(spillUpdate(dbA, NROW/2, 'c'), SQLITE_OK);
  assert_int_equal(sumOf(dbA), sumWant(NROW/2, 'c', 'b'));
  assert_int_equal(sumOf(dbB), sumWant(NROW/2, 'c', 'b'));
  assert_int_equal(sumOf(dbC), sumWant(NROW/2, 'c', 'b'));
  assert_int_equal(spillUpdate(dbB, NROW/3, 'd'), SQLITE_OK);
  assert_int_equal(sumOf(dbA), sumWant(NROW/3, 'd', 'c') - sumWant(NROW/2, 'c', 'c') + sumWant(NROW/2, 'c', 'b'));
  assert_true(integrityOk(dbA));
  assert_int_equal(recoveredSum("runck.db"), sumOf(dbB));
  assert_int_equal(sqlite3_close(dbC), SQLITE_OK);
  assert_int_equal(sqlite3_close(dbB), SQLITE_OK);
  assert_int_equal(sqlite3_close(dbA), SQLITE_OK);
}

/* Two connections take turns with spilled transactions, one rolling back
** (its frames beyond the committed end are overwritten by the other's),
** then a restart between (checkpoint TRUNCATE by the other), then a
** rewrite in place failed below tde. */
static void test_turns(void **state){
  sqlite3 *dbA, *dbB;
  sqlite3_int64 want;
  (void)state;
  dbA = openDb("turns.db", 1);
  dbB = openDb("turns.db", 0);
  /* A's transaction rolled back: its frames are overwritten by B's. */
  exec(dbA, "BEGIN; UPDATE t SET v=printf('%.200c', 'x') WHERE id%2=0");
  exec(dbA, "UPDATE t SET v=printf('%.200c', 'y') WHERE id%3=0; ROLLBACK");
  assert_int_equal(spillUpdate(dbB, NROW, 'b'), SQLITE_OK);
  assert_int_equal(spillUpdate(dbA, NROW/2, 'c'), SQLITE_OK);
  want = sumWant(NROW/2, 'c', 'b');
  assert_int_equal(sumOf(dbB), want);
  assert_int_equal(recoveredSum("turns.db"), want);
  /* A restart between: B checkpoints and truncates; A writes again. */
  exec(dbB, "PRAGMA wal_checkpoint(TRUNCATE)");
  assert_int_equal(spillUpdate(dbA, NROW, 'd'), SQLITE_OK);
  assert_int_equal(spillUpdate(dbB, NROW/2, 'e'), SQLITE_OK);
  assert_int_equal(spillUpdate(dbA, NROW/3, 'f'), SQLITE_OK);
  want = sumOf(dbA);
  assert_int_equal(sumOf(dbB), want);
  assert_int_equal(recoveredSum("turns.db"), want);
  /* A rewrite in place fails below tde: A's transaction fails; B writes the
  ** same frames; A writes again. */
  for(int iFail=1; iFail<=3; iFail++){
    bw.nFailWrite = iFail*5;
    assert_int_not_equal(spillUpdate(dbA, NROW, 'g'), SQLITE_OK);
    assert_int_equal(bw.nFailWrite, 0);           /* the fault was hit */
    assert_int_equal(spillUpdate(dbB, NROW, (int)('h' + iFail)), SQLITE_OK);
    assert_int_equal(spillUpdate(dbA, NROW/2, (int)('p' + iFail)), SQLITE_OK);
    want = sumWant(NROW/2, 'p' + iFail, 'h' + iFail);
    assert_int_equal(sumOf(dbA), want);
    assert_int_equal(sumOf(dbB), want);
    assert_int_equal(recoveredSum("turns.db"), want);
  }
  assert_true(integrityOk(dbB));
  assert_int_equal(sqlite3_close(dbB), SQLITE_OK);
  assert_int_equal(sqlite3_close(dbA), SQLITE_OK);
}

/* A savepoint rolled back inside a spilled transaction (SQLite writes the
** frames after the savepoint again), then more rewrites in place, one
** commit; a second connection reads it, and the recovered copy. */
static void test_savepoint(void **state){
  sqlite3 *dbA, *dbB;
  sqlite3_int64 want = sumWant(NROW/2, 'k', 'j');
  (void)state;
  dbA = openDb("svpt.db", 1);
  dbB = openDb("svpt.db", 0);
  exec(dbA, "BEGIN; UPDATE t SET v=printf('%.200c', 'j');"
            "SAVEPOINT s1; UPDATE t SET v=printf('%.200c', 'x') WHERE id%2=1;"
            "UPDATE t SET v=printf('%.200c', 'y') WHERE id%5=1; ROLLBACK TO s1;"
            "UPDATE t SET v=printf('%.200c', 'k') WHERE id<=3000 AND id%2=0;"
            "SAVEPOINT s2; UPDATE t SET v=printf('%.200c', 'z') WHERE id%3=1; ROLLBACK TO s2; RELEASE s2;"
            "UPDATE t SET v=printf('%.200c', 'k') WHERE id<=3000; RELEASE s1; COMMIT");
  assert_int_equal(sumOf(dbA), want);
  assert_int_equal(sumOf(dbB), want);
  assert_int_equal(recoveredSum("svpt.db"), want);
  assert_int_equal(sqlite3_close(dbB), SQLITE_OK);
  assert_int_equal(sqlite3_close(dbA), SQLITE_OK);
}

/* walChainExtend's read of a frame's trailer with the next frame's header:
** a reader's chain up to the committed end while another connection's
** spilled transaction has frames beyond it (the header read past mxFrame
** is not used), and at the end of the file (short: the trailer alone);
** a copy whose WAL ends inside the header after the last commit. */
static void test_chain_boundary(void **state){
  sqlite3 *dbA, *dbC;
  sqlite3_int64 nK;
  (void)state;
  dbA = openDb("bound.db", 1);
  assert_int_equal(spillUpdate(dbA, NROW/2, 'b'), SQLITE_OK);
  nK = walFrames("bound.db");
  dbC = openDb("bound.db", 0);
  assert_int_equal(sumOf(dbC), sumWant(NROW/2, 'b', 'A'));       /* the chain to the end of the file */
  assert_int_equal(sqlite3_close(dbC), SQLITE_OK);
  exec(dbA, "BEGIN; UPDATE t SET v=printf('%.200c', 'c'); UPDATE t SET v=printf('%.200c', 'd') WHERE id%2=0");
  assert_true(walFrames("bound.db") > nK + 50);                    /* spilled beyond the committed end */
  dbC = openDb("bound.db", 0);
  assert_int_equal(sumOf(dbC), sumWant(NROW/2, 'b', 'A'));
  assert_true(integrityOk(dbC));
  for(int iCut=0; iCut<3; iCut++){
    static const int aKeep[] = { 0, 10, 24 + 4096 - 1 };
    assert_int_equal(recoveredSumCut("bound.db", 32 + nK*(24+PGSZ) + aKeep[iCut]), sumWant(NROW/2, 'b', 'A'));
  }
  exec(dbA, "COMMIT");
  {
    sqlite3_int64 nEven = (sqlite3_int64)(NROW/2)*(NROW/2 + 1), all = (sqlite3_int64)NROW*(NROW+1)/2;
    assert_int_equal(sumOf(dbC), (all - nEven)*'c' + nEven*'d' + NROW);   /* odd ids c, even d */
  }
  assert_true(integrityOk(dbC));
  assert_int_equal(sqlite3_close(dbC), SQLITE_OK);
  assert_int_equal(sqlite3_close(dbA), SQLITE_OK);
}

static int groupSetup(void **state){
  (void)state;
  pBelowOrig = sqlite3_vfs_find(0);
  if( !pBelowOrig ) return -1;
  belowVfs.szOsFile = (int)sizeof(BelowFile) + pBelowOrig->szOsFile;
  belowVfs.mxPathname = pBelowOrig->mxPathname;
  if( sqlite3_vfs_register(&belowVfs, 1)!=SQLITE_OK ) return -1;    /* tde goes above it */
  return tdetestGroupSetup("tdewalrev", 0);
}

static int groupTeardown(void **state){
  (void)state;
  tdetestScratchRemove();
  return 0;
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_runck_other_writer),
    cmocka_unit_test(test_turns),
    cmocka_unit_test(test_savepoint),
    cmocka_unit_test(test_chain_boundary),
  };
  return cmocka_run_group_tests_name("r6_walrev", tests, groupSetup, groupTeardown);
}
