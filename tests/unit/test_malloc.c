/*
** Allocation failures through tde, after SQLite's test/malloc_common.tcl:
** SQLite's allocator is replaced (SQLITE_CONFIG_MALLOC) by one that fails
** the Nth sqlite3_malloc/sqlite3_realloc -- once (transient) or from then
** on (persistent) -- and a small workload runs for every N until it no
** longer reaches the Nth allocation.  tde allocates through sqlite3_malloc
** too (header buffers, file objects, WAL and journal state), so its
** allocations are failed along with SQLite's; its OpenSSL, Argon2 and
** keystore allocations (malloc, mmap) are not.
**
** Workloads: open an existing encrypted database and run one write
** transaction and a full read (rollback and WAL mode); create a new
** encrypted database (header, data key, first pages).  For every N:
** no crash (the ASan run of the suite adds use-after-free, double free and
** leaks at exit); every failing call returns an error, and which ones are
** not SQLITE_NOMEM is counted and printed; once every connection is closed
** sqlite3_memory_used() is back at its baseline (no leak through SQLite's
** allocator); and with the fault cleared the database opens, passes
** integrity_check and tde_verify(), and holds the state before or after
** the transaction (after, if COMMIT said OK).
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

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

/* ---- the failing allocator ------------------------------------------------- */

static sqlite3_mem_methods memOrig;
static struct {
  int bArmed;
  int iCountdown;
  int bPersist;
  int bFired;
  long nCalls;
} mf;

static int mfFail(void){
  if( !mf.bArmed ) return 0;
  mf.nCalls++;
  if( mf.bFired ) return mf.bPersist;
  if( --mf.iCountdown>0 ) return 0;
  mf.bFired = 1;
  return 1;
}
static void *mfMalloc(int n){ return mfFail() ? 0 : memOrig.xMalloc(n); }
static void *mfRealloc(void *p, int n){ return mfFail() ? 0 : memOrig.xRealloc(p, n); }
static void mfFree(void *p){ memOrig.xFree(p); }
static int mfSize(void *p){ return memOrig.xSize(p); }
static int mfRoundup(int n){ return memOrig.xRoundup(n); }
static int mfInit(void *p){ return memOrig.xInit(p); }
static void mfShutdown(void *p){ memOrig.xShutdown(p); }
static sqlite3_mem_methods memFault = {
  mfMalloc, mfFree, mfRealloc, mfSize, mfRoundup, mfInit, mfShutdown, 0
};

static void mfArm(int n, int bPersist){
  mf.iCountdown = n;
  mf.bPersist = bPersist;
  mf.bFired = 0;
  mf.nCalls = 0;
  mf.bArmed = 1;
}

/* ---- helpers -------------------------------------------------------------- */

/* FNV-1a over the rows of t and u and the schema; SQLite result code.
** A missing table counts as empty. */
static int contentSum(sqlite3 *db, uint64_t *pH){
  static const char *azSql[] = {
    "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY name",
    "SELECT id, k, v FROM t ORDER BY id",
    "SELECT a, b FROM u ORDER BY a",
  };
  uint64_t h = 0xcbf29ce484222325ULL;
  for(size_t q=0; q<sizeof(azSql)/sizeof(azSql[0]); q++){
    sqlite3_stmt *p = 0;
    int rc = sqlite3_prepare_v2(db, azSql[q], -1, &p, 0);
    if( rc==SQLITE_ERROR && q>0 ){ sqlite3_finalize(p); continue; }   /* no such table */
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
    rc = sqlite3_finalize(p) ? sqlite3_extended_errcode(db) : (rc==SQLITE_DONE ? SQLITE_OK : rc);
    if( rc ) return rc;
  }
  *pH = h;
  return SQLITE_OK;
}

static int groupSetup(void **state){
  (void)state;
  /* The keystore stays open: the workloads fail SQLite allocations, and
  ** opening a wallet allocates none. */
  return tdetestGroupSetup("tdemalloc", 1);
}

static int groupTeardown(void **state){
  (void)state;
  tde_keystore_close(zCfg);
  tdetestScratchRemove();
  return 0;
}

/* ---- workloads ---------------------------------------------------------------- */

#define W_OPEN_DELETE 0
#define W_OPEN_WAL    1
#define W_CREATE      2
static const char *azWorkload[3] = {
  "open + write transaction + read, journal_mode=DELETE",
  "open + write transaction + read, journal_mode=WAL",
  "create a new encrypted database",
};

static const char zTx[] =
  "BEGIN;"
  "CREATE TABLE u(a INTEGER PRIMARY KEY, b TEXT);"
  "INSERT INTO u SELECT id, printf('u %d %.200c', id, 'u') FROM t WHERE id <= 20;"
  "UPDATE t SET v = printf('upd %d %.300c', id, 'x') WHERE id % 2 = 0;"
  "INSERT INTO t SELECT id + 100, k, v FROM t WHERE id <= 8;"
  "COMMIT";

typedef struct Run {
  int bSawError;
  int bCommitOk;
  int nOtherErr;          /* errors that were not SQLITE_NOMEM */
  int rcOther;            /* the last of them (extended code) */
} Run;

static void noteRc(Run *r, int rc){
  if( rc==SQLITE_OK ) return;
  r->bSawError = 1;
  if( (rc & 0xff)!=SQLITE_NOMEM && rc!=SQLITE_IOERR_NOMEM ){ r->nOtherErr++; r->rcOther = rc; }
}

static void workload(int w, const char *zPath, Run *r){
  sqlite3 *db = 0;
  uint64_t h;
  int rc;
  memset(r, 0, sizeof(*r));
  rc = openTdeCfg(zPath, zCfg, &db);
  if( rc ){
    noteRc(r, db ? sqlite3_extended_errcode(db) : rc);
    mf.bArmed = 0;
    sqlite3_close(db);
    return;
  }
  sqlite3_extended_result_codes(db, 1);
  if( w==W_CREATE ){
    rc = sqlite3_exec(db, "PRAGMA page_size=1024;"
                          "BEGIN;"
                          "CREATE TABLE t(id INTEGER PRIMARY KEY, k INT, v TEXT);"
                          "INSERT INTO t VALUES(1, 1, 'one'), (2, 2, printf('%.900c', 'two'));"
                          "COMMIT", 0, 0, 0);
  }else{
    rc = sqlite3_exec(db, zTx, 0, 0, 0);
  }
  noteRc(r, rc ? sqlite3_extended_errcode(db) : rc);
  if( rc==SQLITE_OK ) r->bCommitOk = 1;
  rc = contentSum(db, &h);
  noteRc(r, rc);
  mf.bArmed = 0;
  sqlite3_exec(db, "ROLLBACK", 0, 0, 0);
  if( sqlite3_close(db)!=SQLITE_OK ) fail_msg("sqlite3_close failed after an allocation failure");
}

/* After the fault: open, integrity, verify, content.  0 and *pH on success. */
static int check(const char *zPath, uint64_t *pH, char *zWhy, size_t nWhy){
  sqlite3 *db = 0;
  int64_t nChecked = 0, iBad = 0;
  int rc = openTdeCfg(zPath, zCfg, &db);
  if( rc ){ snprintf(zWhy, nWhy, "open: %s (%s)", sqlite3_errstr(rc), tde_last_error()); sqlite3_close(db); return 1; }
  rc = contentSum(db, pH);
  if( rc ){ snprintf(zWhy, nWhy, "read: %s", sqlite3_errmsg(db)); sqlite3_close(db); return 1; }
  if( !integrityOk(db) ){ snprintf(zWhy, nWhy, "integrity_check failed"); sqlite3_close(db); return 1; }
  rc = tde_verify(db, "main", &nChecked, &iBad, 0, 0);
  if( rc ){ snprintf(zWhy, nWhy, "tde_verify: %s (%s)", tde_errstr(rc), tde_last_error()); sqlite3_close(db); return 1; }
  sqlite3_close(db);
  return 0;
}

static void baseDb(int w, const char *zPath){
  sqlite3 *db = 0;
  removeDb(zPath);
  if( w==W_CREATE ) return;
  assert_int_equal(openTdeCfg(zPath, zCfg, &db), SQLITE_OK);
  exec(db, "PRAGMA page_size=1024");
  exec(db, w==W_OPEN_WAL ? "PRAGMA journal_mode=WAL" : "PRAGMA journal_mode=DELETE");
  exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, k INT, v TEXT)");
  exec(db, "CREATE INDEX t_k ON t(k)");
  exec(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<30) "
           "INSERT INTO t SELECT i, i*7919 % 1000, printf('base %d %.200c', i, char(65 + i % 26)) FROM c");
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

static void mallocWorkload(int w){
  char zPath[PATH_MAX];
  unsigned char *aBase = 0, *aMap = 0;    /* the database; in WAL mode its page map */
  size_t nBase = 0, nMap = 0;
  char zMap[PATH_MAX+16];
  uint64_t hPre = 0, hPost = 0, h;
  sqlite3_int64 nBaseline;
  long nCalls;
  long nBad = 0;
  Run r;
  char zWhy[256];
  const char *zStrict = getenv("TDE_FAULTS_STRICT");
  int strict = zStrict && zStrict[0]=='1';
  snprintf(zPath, sizeof(zPath), "%s/malloc-%d.db", zScratch, w);
  baseDb(w, zPath);
  if( w!=W_CREATE ){
    aBase = readAll(zPath, &nBase);
    assert_non_null(aBase);
    snprintf(zMap, sizeof(zMap), "%s-tdemap", zPath);
    aMap = readAll(zMap, &nMap);
    assert_int_equal(check(zPath, &hPre, zWhy, sizeof(zWhy)), 0);
  }else{
    sqlite3 *db = 0;          /* the state of "no database yet": empty */
    assert_int_equal(sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE, 0), SQLITE_OK);
    assert_int_equal(contentSum(db, &hPre), SQLITE_OK);
    sqlite3_close(db);
  }

  /* Dry run, unarmed: the result and the allocation count; then the
  ** baseline of SQLite's memory in use with no connection open. */
  mfArm(1000000000, 0);
  workload(w, zPath, &r);
  nCalls = mf.nCalls;
  assert_true(r.bCommitOk && !r.bSawError);
  assert_int_equal(check(zPath, &hPost, zWhy, sizeof(zWhy)), 0);
  assert_true(hPre!=hPost);
  nBaseline = sqlite3_memory_used();

  for(int bPersist=0; bPersist<2; bPersist++){
    long nPoints = 0, nNomem = 0, nOther = 0, nMasked = 0, nPre = 0, nPost = 0, nLeak = 0, nFail = 0;
    long nHdrOnly = 0;
    int rcOtherFirst = 0;
    /* TDE_MALLOC_POINT=N runs only that point (with TDE_KEEP_SCRATCH=1 and
    ** TDE_TEST_LOG=1: to study one failure). */
    const char *zOnly = getenv("TDE_MALLOC_POINT");
    int nOnly = zOnly ? atoi(zOnly) : 0;
    for(int n=nOnly ? nOnly : 1; n<1000000; n++){
      int bFired;
      if( nOnly && n>nOnly ) break;
      removeDb(zPath);
      if( aBase ) writeAll(zPath, aBase, nBase);
      if( aMap ) writeAll(zMap, aMap, nMap);
      mfArm(n, bPersist);
      workload(w, zPath, &r);
      bFired = mf.bFired;
      mf.bArmed = 0;
      if( !bFired ) break;
      nPoints++;
      if( sqlite3_memory_used()!=nBaseline ){
        nLeak++;
        if( nLeak<=3 ) printf("#   FAIL allocation %d (%s): %lld bytes still in use after close\n", n,
                              bPersist ? "persistent" : "transient",
                              (long long)(sqlite3_memory_used() - nBaseline));
      }
      if( !r.bSawError ) nMasked++;
      else if( r.nOtherErr ){
        nOther++;
        if( rcOtherFirst==0 ) rcOtherFirst = r.rcOther;
        if( nOther<=3 ) printf("#   allocation %d (%s): an error other than SQLITE_NOMEM: %s (%d)\n", n,
                               bPersist ? "persistent" : "transient", sqlite3_errstr(r.rcOther), r.rcOther);
      }else nNomem++;
      {
        struct stat st;
        if( w==W_CREATE && (stat(zPath, &st)!=0 || st.st_size==0) ){
          nPre++;               /* never created: nothing to check */
          continue;
        }
        if( w==W_CREATE && st.st_size==TDE_HEADER_BYTES && check(zPath, &h, zWhy, sizeof(zWhy)) ){
          /* KNOWN BUG (reported): the failure struck after tde wrote and
          ** synced the header and before SQLite wrote page 1; a file
          ** holding only a header never opens again (page 1 "fails
          ** authentication").  A crash at that instant does the same. */
          nHdrOnly++;
          if( nHdrOnly==1 ) printf("#   KNOWN BUG at allocation %d (%s): a header-only file does not open: %s\n",
                                   n, bPersist ? "persistent" : "transient", zWhy);
          continue;
        }
      }
      if( check(zPath, &h, zWhy, sizeof(zWhy)) ){
        nFail++;
        if( nFail<=5 ) printf("#   FAIL allocation %d (%s): %s\n", n, bPersist ? "persistent" : "transient", zWhy);
      }else if( h==hPost ) nPost++;
      else if( h==hPre && !r.bCommitOk ) nPre++;
      else{
        nFail++;
        if( nFail<=5 ) printf("#   FAIL allocation %d (%s): %s\n", n, bPersist ? "persistent" : "transient",
                              h==hPre ? "committed transaction lost" : "wrong data");
      }
    }
    printf("# malloc %-55s %-10s %5ld points (of %ld allocations): SQLITE_NOMEM %ld, other error %ld, "
           "absorbed %ld; after: before-state %ld, after-state %ld; leaks %ld; FAILURES %ld\n",
           azWorkload[w], bPersist ? "persistent" : "transient", nPoints, nCalls, nNomem, nOther, nMasked,
           nPre, nPost, nLeak, nFail);
    if( nHdrOnly ){
      printf("#   KNOWN BUG: %ld points left a header-only database that no longer opens%s\n", nHdrOnly,
             strict ? "" : " (TDE_FAULTS_STRICT=1 makes this a failure)");
      if( strict ) nBad += nHdrOnly;
    }
    nBad += nLeak + nFail;
  }
  free(aBase);
  free(aMap);
  if( getenv("TDE_MALLOC_POINT")==0 ) removeDb(zPath);
  if( nBad ) fail_msg("%ld allocation-failure points (%s) leaked or left a wrong database", nBad, azWorkload[w]);
}

static void test_malloc_open_delete(void **s){ (void)s; mallocWorkload(W_OPEN_DELETE); }
static void test_malloc_open_wal(void **s){ (void)s; mallocWorkload(W_OPEN_WAL); }
static void test_malloc_create(void **s){ (void)s; mallocWorkload(W_CREATE); }

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_malloc_open_delete),
    cmocka_unit_test(test_malloc_open_wal),
    cmocka_unit_test(test_malloc_create),
  };
  /* Default allocator first (GETMALLOC is only filled in by an
  ** initialisation), then ours in front of it. */
  if( sqlite3_initialize() ) return 1;
  if( sqlite3_shutdown() ) return 1;
  if( sqlite3_config(SQLITE_CONFIG_GETMALLOC, &memOrig) ) return 1;
  if( memOrig.xMalloc==0 ) return 1;
  if( sqlite3_config(SQLITE_CONFIG_MALLOC, &memFault) ) return 1;
  if( sqlite3_initialize() ) return 1;
  return cmocka_run_group_tests_name("malloc", tests, groupSetup, groupTeardown);
}
