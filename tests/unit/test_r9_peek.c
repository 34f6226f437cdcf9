/*
** SQLite's peek at the file header when it opens a database (CI failure of
** stop 33: it.test_concurrency.sh, rollback mode, under ASan).
**
** sqlite3_open_v2 reads the first 100 bytes of the database file before it
** takes any lock (btree.c, sqlite3PagerReadFileheader), only for a page
** size to start with; it reads page 1 again under its SHARED lock.  Another
** connection may be writing page 1 right then, so the peek can read a page
** that is half old, half new: it authenticates at no page size.  tde used
** to fail the open with SQLITE_IOERR ("page 1 failed authentication at
** every page size") and count an authentication failure; a plain SQLite
** database opens.  Now the peek answers "no header" (zeros, never the
** torn bytes) and the read under the lock decides.
**
** The race made exact: page 1 torn on disk while the open peeks, whole
** again (the writer done) before the first statement:
**  - the open succeeds; the rows, the page size and integrity_check come
**    out right; tde_status counts no authentication failure; at 4096- and
**    1024-byte pages (the second: the size found from page 1 under the
**    lock, not from the peek) and in rollback and WAL mode;
**  - page 1 still torn at the first statement (damage, not a race): the
**    open succeeds, the statement fails with an I/O error naming page 1's
**    authentication, the file is not changed, and once page 1 is put back
**    the database reads as before.
** Against SQLite 3.40 (system) and 3.53 (test_r9_peek_353).
*/
#include "tdetest.h"

/* A closed database of 300 rows at page size P in journal mode zMode; its
** bytes into *paImg (*pn bytes). */
static void makeDb(const char *zDb, uint32_t P, const char *zMode, unsigned char **paImg, size_t *pn){
  sqlite3 *db = 0;
  char zSql[256];
  removeDb(zDb);
  if( openTdeCfg(zDb, zCfg, &db)!=SQLITE_OK ) fail_msg("create %s: %s", zDb, sqlite3_errmsg(db));
  snprintf(zSql, sizeof(zSql), "PRAGMA page_size=%u; PRAGMA journal_mode=%s", P, zMode);
  exec(db, zSql);
  exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);"
           "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<300) "
           "INSERT INTO t SELECT i, printf('row %d %s', i, hex(randomblob(40))) FROM c;");
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  *paImg = readAll(zDb, pn);
}

/* The image with page 1 torn as a read racing its rewrite sees it: a part
** from another seal of the page (here: bytes flipped), the trailer old. */
static unsigned char *tornCopy(const unsigned char *aImg, size_t n, uint32_t P){
  unsigned char *a = malloc(n);
  int64_t off = tdetestPageOff(P, 1);
  assert_non_null(a);
  memcpy(a, aImg, n);
  assert_true(off + P <= (int64_t)n);
  for(uint32_t i=P/4; i<P/2; i++) a[off+i] ^= 0x5a;
  return a;
}

/* tde's log: the error-level lines joined (TDE_TEST_LOG=1 echoes all). */
static char zErrLog[4096];
static void captureLog(void *pArg, int level, const char *zMsg){
  quietLog(pArg, level, zMsg);
  if( level==TDE_LOG_ERROR && strlen(zErrLog) + strlen(zMsg) + 2 < sizeof(zErrLog) ){
    strcat(zErrLog, zMsg);
    strcat(zErrLog, "\n");
  }
}

static void peekHeals(uint32_t P, const char *zMode){
  char zDb[PATH_MAX];
  unsigned char *aImg = 0, *aTorn;
  size_t n = 0;
  sqlite3 *db = 0;
  int rc;
  pathOf(zDb, "peek.db");
  makeDb(zDb, P, zMode, &aImg, &n);
  aTorn = tornCopy(aImg, n, P);
  writeAll(zDb, aTorn, n);
  zErrLog[0] = 0;
  tde_set_log(captureLog, 0);
  rc = openTdeCfg(zDb, zCfg, &db);
  tde_set_log(quietLog, 0);
  if( zErrLog[0] ) fail_msg("[%u %s] the peek logged an error: %s", P, zMode, zErrLog);
  if( rc!=SQLITE_OK ) fail_msg("[%u %s] the open refused a torn page 1 it only peeks at: %s (%s)",
                               P, zMode, sqlite3_errmsg(db), tde_last_error());
  writeAll(zDb, aImg, n);                     /* the writer finished page 1 */
  assert_int_equal(tdetestQueryInt(db, "SELECT count(*) FROM t"), 300);
  assert_int_equal(tdetestQueryInt(db, "SELECT sum(a) FROM t"), 300*301/2);
  assert_int_equal(tdetestQueryInt(db, "PRAGMA page_size"), P);
  assert_true(integrityOk(db));
  assert_int_equal(tdetestQueryInt(db, "SELECT auth_failures FROM tde_status WHERE schema='main'"), 0);
  exec(db, "INSERT INTO t(b) VALUES('after')");
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  free(aTorn);
  free(aImg);
  removeDb(zDb);
}

static void test_peek_torn_4096_delete(void **state){ (void)state; peekHeals(4096, "delete"); }
static void test_peek_torn_1024_delete(void **state){ (void)state; peekHeals(1024, "delete"); }
static void test_peek_torn_4096_wal(void **state){ (void)state; peekHeals(4096, "wal"); }
static void test_peek_torn_1024_wal(void **state){ (void)state; peekHeals(1024, "wal"); }

static void test_peek_damage_fails_later(void **state){
  char zDb[PATH_MAX];
  unsigned char *aImg = 0, *aTorn, *aAfter;
  size_t n = 0, nAfter = 0;
  sqlite3 *db = 0;
  sqlite3_stmt *pStmt = 0;
  int rc;
  (void)state;
  pathOf(zDb, "peek.db");
  makeDb(zDb, 4096, "delete", &aImg, &n);
  aTorn = tornCopy(aImg, n, 4096);
  writeAll(zDb, aTorn, n);
  zErrLog[0] = 0;
  tde_set_log(captureLog, 0);
  rc = openTdeCfg(zDb, zCfg, &db);
  if( rc!=SQLITE_OK ) fail_msg("open: %s (%s)", sqlite3_errmsg(db), tde_last_error());
  sqlite3_extended_result_codes(db, 1);
  rc = sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &pStmt, 0);
  if( rc==SQLITE_OK ) rc = sqlite3_step(pStmt);
  sqlite3_finalize(pStmt);
  tde_set_log(quietLog, 0);
  if( (rc & 0xff)!=SQLITE_IOERR ) fail_msg("a damaged page 1 read: rc %d (%s), not an I/O error", rc, sqlite3_errmsg(db));
  if( !strstr(zErrLog, "page 1 failed authentication") ){
    fail_msg("the log's errors do not name page 1's authentication: %s", zErrLog);
  }
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  aAfter = readAll(zDb, &nAfter);
  assert_int_equal(nAfter, n);
  assert_memory_equal(aAfter, aTorn, n);      /* nothing written */
  free(aAfter);
  writeAll(zDb, aImg, n);
  rc = openTdeCfg(zDb, zCfg, &db);
  if( rc!=SQLITE_OK ) fail_msg("reopen: %s", sqlite3_errmsg(db));
  assert_int_equal(tdetestQueryInt(db, "SELECT count(*) FROM t"), 300);
  assert_true(integrityOk(db));
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  free(aTorn);
  free(aImg);
  removeDb(zDb);
}

static int groupSetup(void **state){
  (void)state;
  return tdetestGroupSetup("r9-peek", 0);
}

static int groupTeardown(void **state){
  (void)state;
  tdetestScratchRemove();
  return 0;
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_peek_torn_4096_delete),
    cmocka_unit_test(test_peek_torn_1024_delete),
    cmocka_unit_test(test_peek_torn_4096_wal),
    cmocka_unit_test(test_peek_torn_1024_wal),
    cmocka_unit_test(test_peek_damage_fails_later),
  };
  return cmocka_run_group_tests_name("r9_peek", tests, groupSetup, groupTeardown);
}
