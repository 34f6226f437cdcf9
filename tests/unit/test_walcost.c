/*
** What a WAL-mode transaction costs below the shim (issue 13, "nothing
** gets slower in WAL mode"), counted, not timed: a counting VFS sits
** between tde and the unix VFS and counts each file kind's reads, writes
** and syncs.  Each count is what a removed cost would bring back:
**
**  - the header check at the WAL write lock: one read of the main file per
**    transaction (it was four);
**  - a writer chaining a frame from the one it wrote before it under the
**    same write lock: no read of the WAL (it re-read the predecessor's MAC);
**  - a WAL restart: SQLite's own sync of the new WAL header is the one the
**    epoch update waits for (no second WAL sync), then the two header
**    slots' syncs;
**  - the sync-mode check: a connection that found no DB-tdeship-sync does
**    not look again for TDE_SYNC_RECHECK_US, and a shipper that creates
**    the file waits that long, so the next commit still waits for its
**    acknowledgement (here: none comes, so it waits for the timeout).
**
** And that the shortcuts keep what they must: a rekey by another
** connection is seen by an open one at its next write, in both journal
** modes (a write sealed with the removed key would fail integrity_check),
** and a transaction that spills and rolls back to a savepoint, so that
** SQLite rewrites its own frames, reads back intact from another
** connection.
*/
#include "tdetest.h"
#include "repl/repl.h"

#include <time.h>

/* ---- the counting VFS (below tde) --------------------------------------- */

enum { K_MAIN, K_WAL, K_OTHER, K_N };
/* nCreate: opens with SQLITE_OPEN_CREATE (the unix VFS then syncs the
** directory at the file's first sync, for a journal-type file). */
typedef struct CntCount { int nRead, nWrite, nSync, nCreate; } CntCount;
static CntCount aCnt[K_N];

typedef struct CntFile {
  sqlite3_file base;
  sqlite3_file *pReal;
  int eKind;
} CntFile;

static sqlite3_vfs *pCntOrig;

static int cntClose(sqlite3_file *f){
  CntFile *p = (CntFile*)f;
  int rc = p->pReal->pMethods->xClose(p->pReal);
  return rc;
}
static int cntRead(sqlite3_file *f, void *z, int n, sqlite3_int64 o){
  CntFile *p = (CntFile*)f;
  aCnt[p->eKind].nRead++;
  return p->pReal->pMethods->xRead(p->pReal, z, n, o);
}
static int cntWrite(sqlite3_file *f, const void *z, int n, sqlite3_int64 o){
  CntFile *p = (CntFile*)f;
  aCnt[p->eKind].nWrite++;
  return p->pReal->pMethods->xWrite(p->pReal, z, n, o);
}
static int cntTruncate(sqlite3_file *f, sqlite3_int64 n){
  return ((CntFile*)f)->pReal->pMethods->xTruncate(((CntFile*)f)->pReal, n);
}
static int cntSync(sqlite3_file *f, int flags){
  CntFile *p = (CntFile*)f;
  aCnt[p->eKind].nSync++;
  return p->pReal->pMethods->xSync(p->pReal, flags);
}
static int cntFileSize(sqlite3_file *f, sqlite3_int64 *pn){
  return ((CntFile*)f)->pReal->pMethods->xFileSize(((CntFile*)f)->pReal, pn);
}
static int cntLock(sqlite3_file *f, int e){
  return ((CntFile*)f)->pReal->pMethods->xLock(((CntFile*)f)->pReal, e);
}
static int cntUnlock(sqlite3_file *f, int e){
  return ((CntFile*)f)->pReal->pMethods->xUnlock(((CntFile*)f)->pReal, e);
}
static int cntCheckReserved(sqlite3_file *f, int *pOut){
  return ((CntFile*)f)->pReal->pMethods->xCheckReservedLock(((CntFile*)f)->pReal, pOut);
}
static int cntFileControl(sqlite3_file *f, int op, void *pArg){
  return ((CntFile*)f)->pReal->pMethods->xFileControl(((CntFile*)f)->pReal, op, pArg);
}
static int cntSectorSize(sqlite3_file *f){
  return ((CntFile*)f)->pReal->pMethods->xSectorSize(((CntFile*)f)->pReal);
}
static int cntDevChar(sqlite3_file *f){
  return ((CntFile*)f)->pReal->pMethods->xDeviceCharacteristics(((CntFile*)f)->pReal);
}
static int cntShmMap(sqlite3_file *f, int i, int sz, int b, void volatile **pp){
  return ((CntFile*)f)->pReal->pMethods->xShmMap(((CntFile*)f)->pReal, i, sz, b, pp);
}
static int cntShmLock(sqlite3_file *f, int o, int n, int flags){
  return ((CntFile*)f)->pReal->pMethods->xShmLock(((CntFile*)f)->pReal, o, n, flags);
}
static void cntShmBarrier(sqlite3_file *f){
  ((CntFile*)f)->pReal->pMethods->xShmBarrier(((CntFile*)f)->pReal);
}
static int cntShmUnmap(sqlite3_file *f, int d){
  return ((CntFile*)f)->pReal->pMethods->xShmUnmap(((CntFile*)f)->pReal, d);
}
static int cntFetch(sqlite3_file *f, sqlite3_int64 o, int n, void **pp){
  return ((CntFile*)f)->pReal->pMethods->xFetch(((CntFile*)f)->pReal, o, n, pp);
}
static int cntUnfetch(sqlite3_file *f, sqlite3_int64 o, void *p){
  return ((CntFile*)f)->pReal->pMethods->xUnfetch(((CntFile*)f)->pReal, o, p);
}

static const sqlite3_io_methods cntIo = {
  3, cntClose, cntRead, cntWrite, cntTruncate, cntSync, cntFileSize, cntLock, cntUnlock,
  cntCheckReserved, cntFileControl, cntSectorSize, cntDevChar, cntShmMap, cntShmLock,
  cntShmBarrier, cntShmUnmap, cntFetch, cntUnfetch
};

static int cntOpen(sqlite3_vfs *v, const char *zName, sqlite3_file *f, int flags, int *pOut){
  CntFile *p = (CntFile*)f;
  int rc;
  (void)v;
  memset(p, 0, sizeof(*p));
  p->pReal = (sqlite3_file*)&p[1];
  p->eKind = (flags & SQLITE_OPEN_MAIN_DB) ? K_MAIN : (flags & SQLITE_OPEN_WAL) ? K_WAL : K_OTHER;
  if( flags & SQLITE_OPEN_CREATE ) aCnt[p->eKind].nCreate++;
  rc = pCntOrig->xOpen(pCntOrig, zName, p->pReal, flags, pOut);
  f->pMethods = rc==SQLITE_OK ? &cntIo : 0;
  return rc;
}
static int cntDelete(sqlite3_vfs *v, const char *z, int d){ (void)v; return pCntOrig->xDelete(pCntOrig, z, d); }
static int cntAccess(sqlite3_vfs *v, const char *z, int f, int *pOut){ (void)v; return pCntOrig->xAccess(pCntOrig, z, f, pOut); }
static int cntFull(sqlite3_vfs *v, const char *z, int n, char *zOut){ (void)v; return pCntOrig->xFullPathname(pCntOrig, z, n, zOut); }
static void *cntDlOpen(sqlite3_vfs *v, const char *z){ (void)v; return pCntOrig->xDlOpen(pCntOrig, z); }
static void cntDlError(sqlite3_vfs *v, int n, char *z){ (void)v; pCntOrig->xDlError(pCntOrig, n, z); }
static void (*cntDlSym(sqlite3_vfs *v, void *h, const char *z))(void){ (void)v; return pCntOrig->xDlSym(pCntOrig, h, z); }
static void cntDlClose(sqlite3_vfs *v, void *h){ (void)v; pCntOrig->xDlClose(pCntOrig, h); }
static int cntRandomness(sqlite3_vfs *v, int n, char *z){ (void)v; return pCntOrig->xRandomness(pCntOrig, n, z); }
static int cntSleep(sqlite3_vfs *v, int us){ (void)v; return pCntOrig->xSleep(pCntOrig, us); }
static int cntTime(sqlite3_vfs *v, double *p){ (void)v; return pCntOrig->xCurrentTime(pCntOrig, p); }
static int cntLastError(sqlite3_vfs *v, int n, char *z){ (void)v; return pCntOrig->xGetLastError(pCntOrig, n, z); }
static int cntTime64(sqlite3_vfs *v, sqlite3_int64 *p){ (void)v; return pCntOrig->xCurrentTimeInt64(pCntOrig, p); }

static sqlite3_vfs cntVfs = {
  2, 0, 0, 0, "walcost-count", 0, cntOpen, cntDelete, cntAccess, cntFull, cntDlOpen, cntDlError,
  cntDlSym, cntDlClose, cntRandomness, cntSleep, cntTime, cntLastError, cntTime64, 0, 0, 0
};

static void cntReset(void){ memset(aCnt, 0, sizeof(aCnt)); }

/* ---- helpers ------------------------------------------------------------- */

static sqlite3 *openWal(const char *zName, const char *zMode){
  char zPath[PATH_MAX];
  sqlite3 *db = 0;
  char zSql[96];
  pathOf(zPath, zName);
  assert_int_equal(openTdeCfg(zPath, zCfg, &db), SQLITE_OK);
  snprintf(zSql, sizeof(zSql), "PRAGMA journal_mode=%s; PRAGMA synchronous=NORMAL", zMode);
  exec(db, zSql);
  sqlite3_busy_timeout(db, 10000);
  return db;
}

static int64_t one(sqlite3 *db, const char *zSql){
  sqlite3_stmt *p = 0;
  int64_t v = -1;
  assert_int_equal(sqlite3_prepare_v2(db, zSql, -1, &p, 0), SQLITE_OK);
  if( sqlite3_step(p)==SQLITE_ROW ) v = sqlite3_column_int64(p, 0);
  assert_int_equal(sqlite3_finalize(p), SQLITE_OK);
  return v;
}

static double nowSec(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec/1e9;
}

/* A table of n rows of 200 bytes, then the WAL emptied (a TRUNCATE
** checkpoint: the next write transaction restarts it). */
static sqlite3 *makeDb(const char *zName, int n){
  char zPath[PATH_MAX];
  sqlite3 *db;
  char zSql[160];
  pathOf(zPath, zName);
  removeDb(zPath);
  db = openWal(zName, "WAL");
  exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, a INTEGER, b TEXT)");
  snprintf(zSql, sizeof(zSql), "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<%d) "
           "INSERT INTO t SELECT i, i, printf('%%.200c', 'x') FROM c", n);
  exec(db, zSql);
  exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  return db;
}

/* ---- counts ---------------------------------------------------------------- */

/* 200 single-row transactions in one WAL generation (no restart, no
** checkpoint: 200 frames): one main-file read each (the header check; it
** made four), and
** no read of the WAL (every page is in SQLite's cache; a frame's MAC chains
** from the one this connection wrote before it). */
static void test_commit_counts(void **state){
  sqlite3 *db = makeDb("counts.db", 2000);
  (void)state;
  exec(db, "UPDATE t SET a=a+1 WHERE id=1");     /* the restart, not counted */
  cntReset();
  for(int i=0; i<200; i++){
    char zSql[64];
    snprintf(zSql, sizeof(zSql), "UPDATE t SET a=a+1 WHERE id=%d", 1 + (i*37)%2000);
    exec(db, zSql);
  }
  printf("# 200 single-row WAL transactions: main reads %d, WAL reads %d, WAL writes %d, syncs %d+%d\n",
         aCnt[K_MAIN].nRead, aCnt[K_WAL].nRead, aCnt[K_WAL].nWrite, aCnt[K_MAIN].nSync, aCnt[K_WAL].nSync);
  /* one read each; the first also re-reads the header (4 reads), which the
  ** epoch update of the restart before changed */
  assert_true(aCnt[K_MAIN].nRead <= 200 + 4);
  assert_int_equal(aCnt[K_WAL].nRead, 0);
  assert_int_equal(aCnt[K_WAL].nWrite, 200);      /* one write per frame: header and page together */
  assert_int_equal(aCnt[K_MAIN].nSync + aCnt[K_WAL].nSync, 0);

  /* One transaction of many frames (a 300-row UPDATE, about 20 pages):
  ** still no WAL read. */
  cntReset();
  exec(db, "UPDATE t SET b=printf('%.200c', 'y') WHERE id<=300");
  printf("# one 300-row transaction: main reads %d, WAL reads %d, WAL writes %d\n",
         aCnt[K_MAIN].nRead, aCnt[K_WAL].nRead, aCnt[K_WAL].nWrite);
  assert_true(aCnt[K_WAL].nWrite >= 10);
  assert_int_equal(aCnt[K_WAL].nRead, 0);
  assert_true(aCnt[K_MAIN].nRead <= 1);
  assert_true(integrityOk(db));
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* A restart (the first write transaction after a TRUNCATE checkpoint):
** SQLite's sync of the new WAL header is the only WAL sync, and the epoch
** update syncs the main file twice (its two header slots). */
static void test_restart_syncs(void **state){
  sqlite3 *db = makeDb("restart.db", 100);
  (void)state;
  for(int i=0; i<3; i++){
    int nWal, nMain;
    cntReset();
    exec(db, "UPDATE t SET a=a+1 WHERE id=7");
    nWal = aCnt[K_WAL].nSync;
    nMain = aCnt[K_MAIN].nSync;
    printf("# restart %d: WAL syncs %d, main-file syncs %d\n", i, nWal, nMain);
    assert_int_equal(nWal, 1);
    assert_int_equal(nMain, 2);
    exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  }
  assert_int_equal(one(db, "SELECT a FROM t WHERE id=7"), 7 + 3);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  /* The epochs written are the ones the next open checks the WAL against. */
  db = openWal("restart.db", "WAL");
  assert_int_equal(one(db, "SELECT a FROM t WHERE id=7"), 7 + 3);
  assert_true(integrityOk(db));
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* synchronous=OFF: SQLite does not sync the new header, so the shim does
** before the first frame (one WAL sync, then the two slots). */
static void test_restart_syncs_off(void **state){
  sqlite3 *db = makeDb("restart-off.db", 100);
  (void)state;
  exec(db, "PRAGMA synchronous=OFF");
  cntReset();
  exec(db, "UPDATE t SET a=a+1 WHERE id=7");
  printf("# restart, synchronous=OFF: WAL syncs %d, main-file syncs %d\n", aCnt[K_WAL].nSync, aCnt[K_MAIN].nSync);
  assert_int_equal(aCnt[K_WAL].nSync, 1);
  assert_int_equal(aCnt[K_MAIN].nSync, 2);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  db = openWal("restart-off.db", "WAL");
  assert_int_equal(one(db, "SELECT a FROM t WHERE id=7"), 8);
  assert_true(integrityOk(db));
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/*
** The page map's fold (docs/FORMAT.md "Folding"): a TRUNCATE checkpoint
** after a one-row UPDATE, counted below tde, in format version 2 and in
** version 1 (no map).  Version 2 adds one write of the changed map page and
** one fsync of DB-tdemap (the VFS's "other" files) and the freshness
** update's two syncs of the main file; nothing else.
*/
static void foldCounts(const char *zName, const char *zConfig, CntCount *aOut){
  char zPath[PATH_MAX];
  sqlite3 *db = 0;
  pathOf(zPath, zName);
  removeDb(zPath);
  assert_int_equal(openTdeCfg(zPath, zConfig, &db), SQLITE_OK);
  exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL");
  exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, a INTEGER, b TEXT)");
  exec(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<100) "
           "INSERT INTO t SELECT i, i, printf('%.200c', 'x') FROM c");
  exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  exec(db, "UPDATE t SET a=a+1 WHERE id=7");
  exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");          /* the map built (v2) */
  exec(db, "UPDATE t SET a=a+1 WHERE id=7");
  cntReset();
  exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");          /* one map page changes */
  memcpy(aOut, aCnt, sizeof(aCnt));
  assert_int_equal(one(db, "SELECT a FROM t WHERE id=7"), 9);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}
static void test_fold_counts(void **state){
  char zV1[PATH_MAX], zV2[PATH_MAX];
  CntCount a1[K_N], a2[K_N];
  FILE *f;
  (void)state;
  pathOf(zV1, "v1.conf");
  f = fopen(zV1, "w");
  assert_non_null(f);
  fputs(TDETEST_WALLET_CONF "format_version = 1\n", f);
  assert_int_equal(fclose(f), 0);
  pathOf(zV2, "v2.conf");        /* pinned: version 2's DB-tdemap costs */
  f = fopen(zV2, "w");
  assert_non_null(f);
  fputs(TDETEST_WALLET_CONF "format_version = 2\n", f);
  assert_int_equal(fclose(f), 0);
  foldCounts("fold-v1.db", zV1, a1);
  foldCounts("fold-v2.db", zV2, a2);
  printf("# TRUNCATE checkpoint of a one-row UPDATE: version 1: main writes %d syncs %d, other writes %d "
         "syncs %d; version 2: main writes %d syncs %d, other (DB-tdemap) writes %d syncs %d\n",
         a1[K_MAIN].nWrite, a1[K_MAIN].nSync, a1[K_OTHER].nWrite, a1[K_OTHER].nSync,
         a2[K_MAIN].nWrite, a2[K_MAIN].nSync, a2[K_OTHER].nWrite, a2[K_OTHER].nSync);
  assert_int_equal(a2[K_OTHER].nWrite - a1[K_OTHER].nWrite, 1);
  assert_int_equal(a2[K_OTHER].nSync - a1[K_OTHER].nSync, 1);
  assert_int_equal(a2[K_MAIN].nSync - a1[K_MAIN].nSync, 2);
  assert_int_equal(a2[K_MAIN].nWrite - a1[K_MAIN].nWrite, 2);   /* one sector per header slot */
  /* The fold opens the existing DB-tdemap without creating it: no
  ** directory sync per fold (there was one before 2026-12-03). */
  assert_int_equal(a2[K_OTHER].nCreate, 0);
}

/* ---- what the shortcuts must keep ------------------------------------------- */

/* A rekey by another connection while this one stays open: its next write
** must seal under the new data key (the old one is gone from the header
** when the rekey finishes, so a page sealed with it fails integrity_check
** and tde_verify). */
static void rekeySeenIn(const char *zMode){
  char zName[32];
  sqlite3 *a, *b;
  int64_t nChecked = 0, iBad = 0;
  snprintf(zName, sizeof(zName), "rekey-%s.db", zMode);
  a = makeDb(zName, 500);
  if( strcmp(zMode, "WAL")!=0 ){
    char zSql[64];
    snprintf(zSql, sizeof(zSql), "PRAGMA journal_mode=%s", zMode);
    exec(a, zSql);
  }
  b = openWal(zName, zMode);
  for(int i=0; i<3; i++){
    exec(a, "UPDATE t SET a=a+1 WHERE id<=50");
    assert_int_equal(tde_db_rekey(b, "main", 16, 0, 0), TDE_OK);
    exec(a, "UPDATE t SET a=a+1 WHERE id>450");
    exec(a, "INSERT INTO t(a,b) VALUES(-1, 'after a rekey')");
  }
  assert_int_equal(sqlite3_close(b), SQLITE_OK);
  assert_int_equal(sqlite3_close(a), SQLITE_OK);
  a = openWal(zName, zMode);
  assert_true(integrityOk(a));
  assert_int_equal(one(a, "SELECT count(*) FROM t"), 503);
  assert_int_equal(one(a, "SELECT sum(a) FROM t WHERE id<=500"), 500*501/2 + 3*50 + 3*50);
  assert_int_equal(tde_verify(a, "main", &nChecked, &iBad, 0, 0), TDE_OK);
  assert_int_equal(iBad, 0);
  assert_int_equal(sqlite3_close(a), SQLITE_OK);
}
static void test_rekey_seen_wal(void **state){ (void)state; rekeySeenIn("WAL"); }
static void test_rekey_seen_delete(void **state){ (void)state; rekeySeenIn("DELETE"); }

/* A transaction that spills (tiny cache) and rolls back to a savepoint, so
** SQLite rewrites frames of its own open transaction in place and then
** their checksums, read back by another connection. */
static void test_own_frames_rewritten(void **state){
  sqlite3 *a = makeDb("spill.db", 3000), *b;
  (void)state;
  exec(a, "PRAGMA cache_size=8");
  exec(a, "BEGIN");
  exec(a, "UPDATE t SET b=printf('%.200c', 'p') WHERE id<=1500");
  exec(a, "SAVEPOINT s1");
  exec(a, "UPDATE t SET b=printf('%.200c', 'q') WHERE id>1000");
  exec(a, "ROLLBACK TO s1");
  exec(a, "UPDATE t SET a=-a WHERE id%7=0");
  exec(a, "COMMIT");
  b = openWal("spill.db", "WAL");
  assert_int_equal(one(b, "SELECT count(*) FROM t WHERE b=printf('%.200c', 'p')"), 1500);
  assert_int_equal(one(b, "SELECT count(*) FROM t WHERE b=printf('%.200c', 'q')"), 0);
  assert_int_equal(one(b, "SELECT count(*) FROM t WHERE a<0"), 3000/7);
  assert_true(integrityOk(b));
  assert_int_equal(sqlite3_close(b), SQLITE_OK);
  assert_int_equal(sqlite3_close(a), SQLITE_OK);
}

/* The sync-mode check: after a commit that found no DB-tdeship-sync, a
** shipper creates it (tdeSyncCreate, as `ship --sync` does at its start);
** the very next commit must wait for an acknowledgement, which never comes
** here, so it returns after the file's timeout.  With the file gone again
** commits do not wait.  The timeout is 3 s and "did not wait" means under
** half of it: a commit on a busy machine (fsyncs queued behind other
** builds) may take far longer than on an idle one, and must not decide. */
static void test_sync_file_seen_at_once(void **state){
  char zPath[PATH_MAX];
  sqlite3 *db = makeDb("sync.db", 100);
  int fd = -1;
  double t0, tWait, tNoWait;
  (void)state;
  pathOf(zPath, "sync.db");
  exec(db, "UPDATE t SET a=a+1 WHERE id=1");     /* no file: remembered */
  assert_int_equal(tdeSyncCreate(zPath, 3000, &fd), TDE_OK);
  t0 = nowSec();
  exec(db, "UPDATE t SET a=a+1 WHERE id=2");
  tWait = nowSec() - t0;
  tdeSyncRemove(zPath, fd);
  t0 = nowSec();
  exec(db, "UPDATE t SET a=a+1 WHERE id=3");
  tNoWait = nowSec() - t0;
  printf("# commit with DB-tdeship-sync just created waited %.3f s (timeout 3 s); without it %.3f s\n",
         tWait, tNoWait);
  assert_true(tWait >= 2.95);
  assert_true(tNoWait < 1.5);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

static int groupSetup(void **state){
  (void)state;
  pCntOrig = sqlite3_vfs_find(0);
  if( !pCntOrig ) return -1;
  cntVfs.szOsFile = (int)sizeof(CntFile) + pCntOrig->szOsFile;
  cntVfs.mxPathname = pCntOrig->mxPathname;
  if( sqlite3_vfs_register(&cntVfs, 1)!=SQLITE_OK ) return -1;    /* tde goes above it */
  return tdetestGroupSetup("tdewalcost", 0);
}

static int groupTeardown(void **state){
  (void)state;
  tdetestScratchRemove();
  return 0;
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_commit_counts),
    cmocka_unit_test(test_restart_syncs),
    cmocka_unit_test(test_restart_syncs_off),
    cmocka_unit_test(test_fold_counts),
    cmocka_unit_test(test_rekey_seen_wal),
    cmocka_unit_test(test_rekey_seen_delete),
    cmocka_unit_test(test_own_frames_rewritten),
    cmocka_unit_test(test_sync_file_seen_at_once),
  };
  return cmocka_run_group_tests_name("walcost", tests, groupSetup, groupTeardown);
}
