/*
** WAL mode's system calls (issue 26): tde reads no more than plain SQLite,
** counted, not timed.
**
** Below tde sits a counting VFS ("walread-below") that counts the reads of
** main database files and of WALs; plain SQLite runs over the same VFS
** with the same page layout (tde's reserved bytes), the same SQL, the same
** seeds.  The tests:
**  - a transaction larger than the page cache (single-row DELETEs in a
**    shuffled order, cache_size=100, the kit's delete-spill): SQLite
**    spills pages to the WAL, rewrites them in place and reads them back;
**    tde's WAL reads per deleted row against plain's (a rewrite in place
**    read the stored frame header first: about 2x plain's before);
**  - single-row commits: reads of the main file per commit (tde checks at
**    the WAL write lock whether another process changed the header).
** Fixed seeds; figures as "# ..." lines.
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
  sqlite3_int64 nMainReads, nWalReads, nWalWrites;
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
  return p->pReal->pMethods->xWrite(p->pReal, z, n, o);
}
static int belowTruncate(sqlite3_file *f, sqlite3_int64 n){ return BREAL(f)->pMethods->xTruncate(BREAL(f), n); }
static int belowSync(sqlite3_file *f, int fl){ return BREAL(f)->pMethods->xSync(BREAL(f), fl); }
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
  2, 0, 0, 0, "walread-below", 0, belowOpen, belowDelete, belowAccess, belowFull, belowDlOpen,
  belowDlError, belowDlSym, belowDlClose, belowRandomness, belowSleep, belowTime, belowLastError,
  belowTime64, 0, 0, 0
};

/* ---- databases -------------------------------------------------------------- */

#define NROW 6000

/* A WAL database of NROW rows of about 200 bytes, through tde or plain
** over the VFS below (tde's reserved bytes, so the same pages). */
static sqlite3 *openDb(const char *zName, int bTde, int bCreate){
  char zPath[PATH_MAX];
  sqlite3 *db = 0;
  pathOf(zPath, zName);
  if( bCreate ) removeDb(zPath);
  if( bTde ){
    assert_int_equal(openTdeCfg(zPath, zCfg, &db), SQLITE_OK);
  }else{
    assert_int_equal(sqlite3_open_v2(zPath, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE,
                                     "walread-below"), SQLITE_OK);
    if( bCreate ){
      int nReserve = TDE_RESERVE_BYTES;
      assert_int_equal(sqlite3_file_control(db, "main", SQLITE_FCNTL_RESERVE_BYTES, &nReserve), SQLITE_OK);
    }
  }
  if( bCreate ){
    exec(db, "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;"
             "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);"
             "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<6000) "
             "INSERT INTO t SELECT i, printf('%.200c', char(65 + i%26)) FROM c;"
             "PRAGMA wal_checkpoint(TRUNCATE)");
  }else{
    exec(db, "PRAGMA wal_autocheckpoint=0");
  }
  return db;
}

static uint64_t rngState;
static uint32_t rnd(void){
  rngState = rngState*6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(rngState >> 33);
}

static sqlite3_int64 sumOf(sqlite3 *db){
  sqlite3_stmt *p = 0;
  sqlite3_int64 s;
  assert_int_equal(sqlite3_prepare_v2(db, "SELECT sum(id) + sum(length(v)) FROM t", -1, &p, 0), SQLITE_OK);
  assert_int_equal(sqlite3_step(p), SQLITE_ROW);
  s = sqlite3_column_int64(p, 0);
  assert_int_equal(sqlite3_finalize(p), SQLITE_OK);
  return s;
}

/* ---- tests ------------------------------------------------------------------ */

/* Half the rows deleted one by one, in a seeded shuffled order, in one
** transaction with cache_size=100, then the table read inside it: WAL
** reads and writes below, tde against plain. */
static void test_spill_reads(void **state){
  sqlite3_int64 aReads[2], aWrites[2], aSum[2];
  int aId[NROW], bTde, i;
  (void)state;
  for(bTde=0; bTde<2; bTde++){
    sqlite3 *db = openDb(bTde ? "spill-tde.db" : "spill-plain.db", bTde, 1);
    sqlite3_stmt *p = 0;
    rngState = 26061;
    for(i=0; i<NROW; i++) aId[i] = i+1;
    for(i=NROW-1; i>0; i--){
      int j = (int)(rnd() % (uint32_t)(i+1)), t = aId[i];
      aId[i] = aId[j]; aId[j] = t;
    }
    exec(db, "PRAGMA cache_size=100");
    memset(&bw, 0, sizeof(bw));
    exec(db, "BEGIN");
    assert_int_equal(sqlite3_prepare_v2(db, "DELETE FROM t WHERE id=?", -1, &p, 0), SQLITE_OK);
    for(i=0; i<NROW/2; i++){
      sqlite3_bind_int(p, 1, aId[i]);
      assert_int_equal(sqlite3_step(p), SQLITE_DONE);
      assert_int_equal(sqlite3_changes(db), 1);
      sqlite3_reset(p);
    }
    assert_int_equal(sqlite3_finalize(p), SQLITE_OK);
    aSum[bTde] = sumOf(db);
    exec(db, "COMMIT");
    aReads[bTde] = bw.nWalReads;
    aWrites[bTde] = bw.nWalWrites;
    assert_int_equal(sumOf(db), aSum[bTde]);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
  }
  printf("# spilled transaction, %d deletes: WAL reads plain %lld, tde %lld (%.3f per row against "
         "%.3f); WAL writes plain %lld, tde %lld\n", NROW/2, (long long)aReads[0], (long long)aReads[1],
         (double)aReads[1]/(NROW/2), (double)aReads[0]/(NROW/2), (long long)aWrites[0], (long long)aWrites[1]);
  assert_true(aSum[0]==aSum[1]);
  assert_true(aReads[0] > NROW/4);          /* the transaction did spill and read back */
  /* Before: a stored frame header read before each rewrite in place
  ** (about 2x plain).  Now: the page reads SQLite makes, plus one trailer
  ** read per frame whose header SQLite rewrites at the commit. */
  assert_true((double)aReads[1] <= 1.10*(double)aReads[0]);
}

static int groupSetup(void **state){
  (void)state;
  pBelowOrig = sqlite3_vfs_find(0);
  if( !pBelowOrig ) return -1;
  belowVfs.szOsFile = (int)sizeof(BelowFile) + pBelowOrig->szOsFile;
  belowVfs.mxPathname = pBelowOrig->mxPathname;
  if( sqlite3_vfs_register(&belowVfs, 1)!=SQLITE_OK ) return -1;    /* tde goes above it */
  return tdetestGroupSetup("tdewalread", 0);
}

static int groupTeardown(void **state){
  (void)state;
  tdetestScratchRemove();
  return 0;
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_spill_reads),
  };
  return cmocka_run_group_tests_name("r6_walread", tests, groupSetup, groupTeardown);
}
