/*
** Format version 3 (issue 24), round 7: the gaps its suites' format-3
** twins and docs/FORMAT.md "Format version 3: Status" named, one case each
** (each failed before its fix):
**  - excl_fold_after_checkpoint: WAL mode with locking_mode=EXCLUSIVE (no
**    shared WAL index): a checkpoint that copies every frame folds the map
**    into the file, as with a shared index, so a copy of the database file
**    taken right after it (the connection still open) opens, reads the
**    current value and verifies, and the page holding the value put back
**    to its version of the previous checkpoint is refused.  Before: the
**    fold waited for the WAL's restart, truncation or close, and the old
**    page was accepted.
**  - torn_page1_hot_journal: rollback mode; a writer dies mid-transaction
**    after spilling pages (its journal hot, page 1 in it), and the
**    playback's rewrite of page 1 is torn (its first sector new, the rest
**    the old seal: neither authenticates).  The next open
**    plays the journal back: SQLite asks the file's size before it reads
**    page 1 whole, and on version 3 the size needs the page size, which
**    now comes from page 2 when page 1 does not authenticate.  Before: the
**    size failed ("page 1 failed authentication at every page size") and
**    the database could not be opened at all.
**  - shrink_waits_for_write_lock: a PASSIVE checkpoint that truncates the
**    file below a map region in force, while another connection holds the
**    WAL write lock, neither folds nor drops map pages (the file keeps the
**    region: the size rule counts no page in it); the next checkpoint
**    without the other writer folds and cuts the file to off(N) + P.
**    Before: the map pages were dropped by a header update made without
**    the lock (a race with the other connection's own header update).
** Against SQLite 3.40 (system) and 3.53 (test_r7_f3fix_353).
*/
#include "tdetest.h"

#include <fcntl.h>
#include <sys/wait.h>

#include "keys/keys.h"   /* freshtest.h's makeDb */

#define NROW 600
#define PGSZ 4096
#include "freshtest.h"

/* zScratch/tde-v3.conf: the group's wallet, format_version = 3. */
static char zCfg3[PATH_MAX];

static sqlite3 *openDb(const char *zDb){
  sqlite3 *db = 0;
  int rc = openTdeCfg(zDb, zCfg3, &db);
  if( rc!=SQLITE_OK ) fail_msg("open %s: %s", zDb, db ? sqlite3_errmsg(db) : "?");
  sqlite3_extended_result_codes(db, 1);
  return db;
}

static TdeLayout layoutV3(uint32_t P){
  TdeLayout L;
  L.version = 3;
  L.pgsz = P;
  L.cursor = 0;
  return L;
}

/* Page n (size P) of a version-3 file into / from a. */
static void pageIo(const char *zDb, uint32_t P, uint32_t n, unsigned char *a, int bWrite){
  TdeLayout L = layoutV3(P);
  int fd = open(zDb, bWrite ? O_WRONLY : O_RDONLY);
  assert_true(fd>=0);
  if( bWrite ) assert_int_equal(pwrite(fd, a, P, (off_t)tdeLayoutPageOff(&L, n)), (ssize_t)P);
  else assert_int_equal(pread(fd, a, P, (off_t)tdeLayoutPageOff(&L, n)), (ssize_t)P);
  assert_int_equal(close(fd), 0);
}

static int64_t fileBytes(const char *z){
  struct stat st;
  assert_int_equal(stat(z, &st), 0);
  return (int64_t)st.st_size;
}

/* PRAGMA wal_checkpoint(zMode) that must copy every frame. */
static void checkpointAll(sqlite3 *db, const char *zMode){
  char zSql[64];
  sqlite3_stmt *p = 0;
  snprintf(zSql, sizeof(zSql), "PRAGMA wal_checkpoint(%s)", zMode);
  assert_int_equal(sqlite3_prepare_v2(db, zSql, -1, &p, 0), SQLITE_OK);
  assert_int_equal(sqlite3_step(p), SQLITE_ROW);
  assert_int_equal(sqlite3_column_int(p, 0), 0);                             /* not busy */
  assert_int_equal(sqlite3_column_int(p, 1), sqlite3_column_int(p, 2));      /* every frame */
  sqlite3_finalize(p);
}

/* ---- the fold without a shared WAL index ------------------------------------ */

static void test_excl_fold_after_checkpoint(void **state){
  char zDb[PATH_MAX], zCopy[PATH_MAX], zBad[PATH_MAX];
  unsigned char aStale[PGSZ], aCur[PGSZ];
  sqlite3 *db, *dbCopy;
  sqlite3_int64 v = -1, iPg = 0;
  (void)state;
  pathOf(zDb, "excl.db");
  pathOf(zCopy, "excl-copy.db");
  pathOf(zBad, "excl-bad.db");
  removeDb(zDb);
  removeDb(zCopy);
  removeDb(zBad);
  db = openDb(zDb);
  exec(db, "PRAGMA page_size=4096; PRAGMA journal_mode=WAL; PRAGMA locking_mode=EXCLUSIVE;"
           "PRAGMA wal_autocheckpoint=0;"
           "CREATE TABLE filler(id INTEGER PRIMARY KEY, pad TEXT);"
           "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<40)"
           " INSERT INTO filler SELECT i, printf('%.1500c', 'f') FROM c;"
           "CREATE TABLE acct(id INTEGER PRIMARY KEY, value INT);"
           "INSERT INTO acct VALUES(1, 999);");
  assert_int_equal(stepInt(db, "SELECT rootpage FROM sqlite_schema WHERE name='acct'", &iPg), SQLITE_OK);
  checkpointAll(db, "PASSIVE");
  pageIo(zDb, PGSZ, (uint32_t)iPg, aStale, 0);          /* value 999, in the file */
  exec(db, "UPDATE acct SET value=0 WHERE id=1");
  checkpointAll(db, "PASSIVE");
  pageIo(zDb, PGSZ, (uint32_t)iPg, aCur, 0);
  assert_memory_not_equal(aStale, aCur, PGSZ);

  /* The database file alone, copied while the connection stays open. */
  fileCopy(zDb, zCopy);
  fileCopy(zDb, zBad);
  pageIo(zBad, PGSZ, (uint32_t)iPg, aStale, 1);
  dbCopy = openDb(zCopy);
  assert_int_equal(stepInt(dbCopy, "SELECT value FROM acct WHERE id=1", &v), SQLITE_OK);
  assert_int_equal(v, 0);
  assert_true(integrityOk(dbCopy));
  assert_int_equal(tde_verify(dbCopy, "main", 0, 0, 0, 0), TDE_OK);
  assert_int_equal(sqlite3_close(dbCopy), SQLITE_OK);
  dbCopy = openDb(zBad);
  v = -1;
  if( stepInt(dbCopy, "SELECT value FROM acct WHERE id=1", &v)==SQLITE_OK ){
    fail_msg("the page of the previous checkpoint was accepted in the copy (value %lld): "
             "the checkpoint did not fold the map", (long long)v);
  }
  assert_int_equal(sqlite3_extended_errcode(dbCopy), SQLITE_IOERR_AUTH);
  assert_int_equal(sqlite3_close(dbCopy), SQLITE_OK);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* ---- a torn page 1 with a hot journal --------------------------------------- */

static void test_torn_page1_hot_journal(void **state){
  enum { P = 1024 };
  char zDb[PATH_MAX], zJ[PATH_MAX], zRec[PATH_MAX], zRecJ[PATH_MAX];
  unsigned char aPage[P], aRec[P];
  sqlite3 *db;
  sqlite3_int64 v = 0;
  pid_t pid;
  int status = 0;
  (void)state;
  pathOf(zDb, "torn1.db");
  sidePath(zJ, zDb, "-journal");
  pathOf(zRec, "torn1-rec.db");
  sidePath(zRecJ, zRec, "-journal");
  removeDb(zDb);
  removeDb(zRec);
  db = openDb(zDb);
  exec(db, "PRAGMA page_size=1024; PRAGMA journal_mode=DELETE;"
           "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);"
           "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<200)"
           " INSERT INTO t SELECT i, printf('T0 %04d %.300c', i, 'a') FROM c;");
  assert_int_equal(sqlite3_close(db), SQLITE_OK);

  /* A writer that spills (its journal synced, pages written) and dies. */
  fflush(stdout);
  pid = fork();
  assert_true(pid>=0);
  if( pid==0 ){
    sqlite3 *dbw = 0;
    if( openTdeCfg(zDb, zCfg3, &dbw)!=SQLITE_OK ) _exit(2);
    if( sqlite3_exec(dbw, "PRAGMA cache_size=1; BEGIN;"
                          "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<300)"
                          " INSERT INTO t SELECT 1000 + i, printf('T1 %04d %.600c', i, 'b') FROM c;"
                          "UPDATE t SET v = printf('T1 %04d %.300c', id, 'c') WHERE id <= 200;",
                          0, 0, 0)!=SQLITE_OK ) _exit(3);
    _exit(0);                                   /* no COMMIT, no close */
  }
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status)==0);
  assert_true(fileExists(zJ));

  /* The playback's own rewrite of page 1 torn after its first sector: a
  ** copy recovers (page 1 sealed again), its first 512 bytes over the
  ** original's (redteam's construction in test_redteam_fresh.c). */
  fileCopy(zDb, zRec);
  fileCopy(zJ, zRecJ);
  assert_int_equal(openAndCount(zRec, "T0", &v), SQLITE_OK);
  assert_int_equal(v, 200);
  pageIo(zRec, P, 1, aRec, 0);
  pageIo(zDb, P, 1, aPage, 0);
  assert_memory_not_equal(aRec, aPage, P);
  memcpy(aPage, aRec, 512);
  pageIo(zDb, P, 1, aPage, 1);

  v = 0;
  assert_int_equal(openAndCount(zDb, "T0", &v), SQLITE_OK);
  assert_int_equal(v, 200);
  assert_false(fileExists(zJ));
  db = openDb(zDb);
  assert_int_equal(stepInt(db, "SELECT count(*) FROM t", &v), SQLITE_OK);
  assert_int_equal(v, 200);
  assert_true(integrityOk(db));
  assert_int_equal(tde_verify(db, "main", 0, 0, 0, 0), TDE_OK);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* ---- a map shrink under the WAL write lock ---------------------------------- */

static void test_shrink_waits_for_write_lock(void **state){
  enum { P = 1024 };
  char zDb[PATH_MAX];
  TdeLayout L = layoutV3(P);
  sqlite3 *db, *db2;
  sqlite3_int64 nPage = 0, v = 0;
  int64_t regionEnd1 = tdeLayoutMapOff(&L, 1, 0) + tdeLayoutRegionBytes(P);
  (void)state;
  pathOf(zDb, "shrink.db");
  removeDb(zDb);
  db = openDb(zDb);
  exec(db, "PRAGMA page_size=1024; PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;"
           "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);"
           "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<700)"
           " INSERT INTO t SELECT i, printf('%.800c', 'a') FROM c;");
  checkpointAll(db, "TRUNCATE");                 /* folded: two map pages */
  assert_int_equal(stepInt(db, "PRAGMA page_count", &nPage), SQLITE_OK);
  assert_true(nPage > TDE_LAYOUT_K);
  exec(db, "DELETE FROM t WHERE id > 100; VACUUM;");
  assert_int_equal(stepInt(db, "PRAGMA page_count", &nPage), SQLITE_OK);
  assert_true(nPage < TDE_LAYOUT_K);

  /* Another connection holds the WAL write lock during a PASSIVE checkpoint. */
  db2 = openDb(zDb);
  exec(db2, "BEGIN IMMEDIATE");
  checkpointAll(db, "PASSIVE");
  if( fileBytes(zDb) < regionEnd1 ){
    fail_msg("the checkpoint dropped map page 1 without the WAL write lock (file %lld bytes, "
             "region 1 ends at %lld)", (long long)fileBytes(zDb), (long long)regionEnd1);
  }
  exec(db2, "ROLLBACK");
  assert_int_equal(stepInt(db2, "SELECT count(*) FROM t", &v), SQLITE_OK);
  assert_int_equal(v, 100);
  assert_int_equal(sqlite3_close(db2), SQLITE_OK);

  /* Without it, the next checkpoint folds and cuts the file. */
  exec(db, "UPDATE t SET v = 'b' WHERE id = 1");
  checkpointAll(db, "PASSIVE");
  assert_int_equal(stepInt(db, "PRAGMA page_count", &nPage), SQLITE_OK);
  assert_int_equal(fileBytes(zDb), tdeLayoutPageOff(&L, (uint32_t)nPage) + P);
  assert_true(integrityOk(db));
  assert_int_equal(tde_verify(db, "main", 0, 0, 0, 0), TDE_OK);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  db = openDb(zDb);
  assert_int_equal(stepInt(db, "SELECT count(*) FROM t", &v), SQLITE_OK);
  assert_int_equal(v, 100);
  assert_int_equal(tde_verify(db, "main", 0, 0, 0, 0), TDE_OK);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

static int groupSetup(void **state){
  FILE *f;
  (void)state;
  if( tdetestGroupSetup("r7_f3fix", 1) ) return -1;
  if( snprintf(zCfg3, sizeof(zCfg3), "%s/tde-v3.conf", zScratch)>=(int)sizeof(zCfg3) ) return -1;
  f = fopen(zCfg3, "w");
  if( !f ) return -1;
  fputs(TDETEST_WALLET_CONF "format_version = 3\n", f);
  fclose(f);
  return 0;
}

static int groupTeardown(void **state){
  (void)state;
  tdetestScratchRemove();
  return 0;
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_excl_fold_after_checkpoint),
    cmocka_unit_test(test_torn_page1_hot_journal),
    cmocka_unit_test(test_shrink_waits_for_write_lock),
  };
  return cmocka_run_group_tests_name("r7_f3fix", tests, groupSetup, groupTeardown);
}
