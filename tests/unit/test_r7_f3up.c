/*
** The in-place upgrade from format version 2 to 3 (issue 24, docs/FORMAT.md
** "Upgrade from version 2"): tde_db_upgrade_to(db, schema, 3).
**  - rollback (DELETE) and WAL mode, 1024- and 4096-byte pages, databases
**    across map groups: after the upgrade the rows equal the original's
**    row for row (a digest of every row), integrity_check and tde_verify
**    pass, tde_status says version 3, DB-tdemap is gone, page 1 and the
**    last page lie at version 3's places (the formula written out here);
**    in WAL mode the file copied alone opens and verifies, and a page of
**    the copy put back to an older authentic version is refused;
**  - resumable: the move stopped after k batches (the test fault point
**    TDE_FAULT_UPGRADE_BATCH, in a child process) for several k; a reader
**    in rollback mode reads every row mid-move; then a fresh process
**    finishes it, by tde_db_upgrade_to again or by the next writer (an
**    INSERT), and the result is as above;
**  - crash-safe: 20 rounds of a child doing the upgrade (slowed per batch)
**    killed with SIGKILL at a random point (fixed, printed seed), then
**    finished and checked;
**  - a header region put back from an earlier point of the move, after the
**    move finished (WAL mode: its DB-tdemap is gone), is refused by the
**    next connection and by the upgrade, and the file is not written.
** Against SQLite 3.40 (system) and 3.53 (test_r7_f3up_353).
*/
#include "tdetest.h"

#include "tde_int.h"

#include <signal.h>
#include <sys/wait.h>

#define K 508

static int64_t specOff(uint32_t P, uint32_t N){
  int64_t M = P>8192 ? P : 8192;
  return 8192 + M*(1 + (int64_t)((N-1)/K)) + (int64_t)(N-1)*P;
}

static sqlite3 *openDb(const char *zDb){
  sqlite3 *db = 0;
  if( openTdeCfg(zDb, zCfg, &db)!=SQLITE_OK ) fail_msg("open %s: %s", zDb, db ? sqlite3_errmsg(db) : "?");
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, 5000);
  return db;
}

/* FNV-1a over every row (id, v) in id order; -1 if a read failed. */
static int64_t rowDigest(sqlite3 *db){
  sqlite3_stmt *p = 0;
  uint64_t h = 1469598103934665603ull;
  int rc;
  if( sqlite3_prepare_v2(db, "SELECT id, v FROM t ORDER BY id", -1, &p, 0)!=SQLITE_OK ) return -1;
  while( (rc = sqlite3_step(p))==SQLITE_ROW ){
    int64_t id = sqlite3_column_int64(p, 0);
    const unsigned char *z = sqlite3_column_text(p, 1);
    int n = sqlite3_column_bytes(p, 1);
    for(int i=0; i<8; i++){ h ^= (uint8_t)(id >> (8*i)); h *= 1099511628211ull; }
    for(int i=0; i<n; i++){ h ^= z[i]; h *= 1099511628211ull; }
  }
  sqlite3_finalize(p);
  return rc==SQLITE_DONE ? (int64_t)(h >> 1) : -1;
}

/* A version-2 database zDb of about nPage pages of pgsz in zMode, its
** rows' digest into *pDigest, closed (WAL: checkpointed, TRUNCATE). */
static void makeV2(const char *zDb, uint32_t pgsz, const char *zMode, int nPage, int64_t *pDigest){
  sqlite3 *db;
  char *z;
  int nRow = nPage * (int)(pgsz / 256);
  removeDb(zDb);
  db = openDb(zDb);
  z = sqlite3_mprintf("PRAGMA page_size=%u; PRAGMA journal_mode=%s; CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);"
                      "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<%d) "
                      "INSERT INTO t(id, v) SELECT i, printf('%%0200d', i) FROM c;", pgsz, zMode, nRow);
  exec(db, z);
  sqlite3_free(z);
  exec(db, "UPDATE t SET v = v || 'u' WHERE id % 7 = 0");
  if( strcmp(zMode, "WAL")==0 ) exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  *pDigest = rowDigest(db);
  assert_true(*pDigest>=0);
  assert_int_equal(tdetestQueryInt(db, "SELECT format_version FROM tde_status WHERE schema='main'"), 2);
  sqlite3_close(db);
}

static void copyFile(const char *zFrom, const char *zTo){
  size_t n = 0;
  unsigned char *a = readAll(zFrom, &n);
  if( !a ){ unlink(zTo); return; }
  writeAll(zTo, a, n);
  free(a);
}

/* A database and its DB-tdemap copied (a missing one removed). */
static void copyDb(const char *zFrom, const char *zTo){
  char a[PATH_MAX + 16], b[PATH_MAX + 16];
  removeDb(zTo);
  copyFile(zFrom, zTo);
  snprintf(a, sizeof(a), "%s-tdemap", zFrom);
  snprintf(b, sizeof(b), "%s-tdemap", zTo);
  if( access(a, F_OK)==0 ) copyFile(a, b);
}

static int upgradeTo3(const char *zDb){
  sqlite3 *db = openDb(zDb);
  int trc = tde_db_upgrade_to(db, "main", 3);
  sqlite3_close(db);
  return trc;
}

/* The upgraded database: version 3, no DB-tdemap, page 1 and page N at
** version 3's places (the file ends with page N), rows as before,
** integrity_check and tde_verify. */
static void checkUpgraded(const char *zDb, uint32_t pgsz, int64_t digest){
  char zMap[PATH_MAX + 16];
  sqlite3 *db = openDb(zDb);
  int64_t nPage = tdetestQueryInt(db, "PRAGMA page_count"), nChecked = 0, iBad = 0;
  size_t n = 0;
  unsigned char *a;
  assert_int_equal(tdetestQueryInt(db, "SELECT format_version FROM tde_status WHERE schema='main'"), 3);
  assert_int_equal(rowDigest(db), digest);
  assert_true(integrityOk(db));
  if( tde_verify(db, "main", &nChecked, &iBad, 0, 0)!=TDE_OK ) fail_msg("tde_verify: %s", tde_last_error());
  assert_true(nChecked>=nPage);
  sqlite3_close(db);
  snprintf(zMap, sizeof(zMap), "%s-tdemap", zDb);
  assert_int_equal(access(zMap, F_OK), -1);
  a = readAll(zDb, &n);
  assert_non_null(a);
  if( (int64_t)n<specOff(pgsz, (uint32_t)nPage) + pgsz ){
    fail_msg("%s: %zu bytes, page %lld ends at %lld", zDb, n, (long long)nPage,
             (long long)(specOff(pgsz, (uint32_t)nPage) + pgsz));
  }
  assert_int_equal(specOff(pgsz, 1), pgsz<=8192 ? 16384 : 8192 + (int64_t)pgsz);
  free(a);
}

/* WAL mode: the file alone opens and verifies; a page of it rolled back
** to its older authentic version is refused. */
static void checkCopyAndRollback(const char *zDb, uint32_t pgsz, int64_t digest){
  char zCopy[PATH_MAX], zOld[PATH_MAX];
  sqlite3 *db;
  size_t nOld = 0, nNew = 0;
  unsigned char *aOld, *aNew;
  int64_t iPg = 0, nPage;
  int rc;
  pathOf(zCopy, "copy.db");
  pathOf(zOld, "old.db");
  removeDb(zCopy);
  copyFile(zDb, zCopy);
  checkUpgraded(zCopy, pgsz, digest);
  /* An older version of some page: change rows, checkpoint, compare. */
  copyFile(zCopy, zOld);
  db = openDb(zCopy);
  exec(db, "UPDATE t SET v = v || 'x' WHERE id % 97 = 0; PRAGMA wal_checkpoint(TRUNCATE)");
  nPage = tdetestQueryInt(db, "PRAGMA page_count");
  sqlite3_close(db);
  aOld = readAll(zOld, &nOld);
  aNew = readAll(zCopy, &nNew);
  assert_non_null(aOld);
  assert_non_null(aNew);
  for(int64_t pg=nPage/2; pg<=nPage && !iPg; pg++){
    int64_t o = specOff(pgsz, (uint32_t)pg);
    if( o + pgsz<=(int64_t)nOld && memcmp(aOld + o, aNew + o, pgsz)!=0 ) iPg = pg;
  }
  if( !iPg ) fail_msg("no page changed in the second half");
  memcpy(aNew + specOff(pgsz, (uint32_t)iPg), aOld + specOff(pgsz, (uint32_t)iPg), pgsz);
  writeAll(zCopy, aNew, nNew);
  free(aOld);
  free(aNew);
  db = openDb(zCopy);
  rc = sqlite3_exec(db, "SELECT count(*) FROM t WHERE v LIKE '%x'", 0, 0, 0);
  assert_int_not_equal(rc, SQLITE_OK);
  if( !strstr(tde_last_error(), "page map") ) fail_msg("refusal: %s", tde_last_error());
  sqlite3_close(db);
  removeDb(zCopy);
  removeDb(zOld);
}

static void runUpgrade(uint32_t pgsz, const char *zMode, int nPage){
  char zDb[PATH_MAX];
  int64_t digest = 0;
  pathOf(zDb, "up.db");
  makeV2(zDb, pgsz, zMode, nPage, &digest);
  if( upgradeTo3(zDb)!=TDE_OK ) fail_msg("upgrade (%u, %s): %s", pgsz, zMode, tde_last_error());
  checkUpgraded(zDb, pgsz, digest);
  /* Again: nothing to do. */
  assert_int_equal(upgradeTo3(zDb), TDE_OK);
  checkUpgraded(zDb, pgsz, digest);
  if( strcmp(zMode, "WAL")==0 ) checkCopyAndRollback(zDb, pgsz, digest);
  removeDb(zDb);
}

static void test_upgrade_1024_wal(void **state){ (void)state; runUpgrade(1024, "WAL", 1100); }
static void test_upgrade_1024_delete(void **state){ (void)state; runUpgrade(1024, "DELETE", 700); }
static void test_upgrade_4096_wal(void **state){ (void)state; runUpgrade(4096, "WAL", 560); }
static void test_upgrade_4096_delete(void **state){ (void)state; runUpgrade(4096, "DELETE", 300); }

/* ---- stops, resumes and crashes -------------------------------------------- */

static int nBatchLeft;        /* the fault point fires when it reaches 0 */
static int nBatchSleepUs;     /* or, with nBatchLeft < 0, sleeps per batch */
static int batchFault(int eSite){
  if( eSite!=TDE_FAULT_UPGRADE_BATCH ) return 0;
  if( nBatchLeft<0 ){ if( nBatchSleepUs ) usleep((useconds_t)nBatchSleepUs); return 0; }
  return --nBatchLeft<=0;
}

/* In a child process: the upgrade, stopped by the fault point after k
** batches (k < 0: slowed, to be killed).  The child's exit status: 0 if
** it stopped (or finished) as told. */
static pid_t childUpgrade(const char *zDb, int k, int nSleepUs){
  pid_t pid = fork();
  if( pid==0 ){
    int trc;
    nBatchLeft = k;
    nBatchSleepUs = nSleepUs;
    tdeFaultHook = batchFault;
    trc = upgradeTo3(zDb);
    _exit(k>0 ? (trc!=TDE_OK ? 0 : 3) : (trc==TDE_OK ? 0 : 4));
  }
  return pid;
}

static void waitChild(pid_t pid, int bKilled){
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  if( !bKilled && !(WIFEXITED(st) && WEXITSTATUS(st)==0) ) fail_msg("child status %d", st);
}

/* The next writer finishes a move: one row added (and removed again so
** the digest holds). */
static void finishByWriter(const char *zDb){
  sqlite3 *db = openDb(zDb);
  int rc = sqlite3_exec(db, "INSERT INTO t(id, v) VALUES(-1, 'w'); DELETE FROM t WHERE id=-1", 0, 0, 0);
  if( rc ) fail_msg("writer: %s (%s)", sqlite3_errmsg(db), tde_last_error());
  sqlite3_close(db);
}

static void runResume(uint32_t pgsz, const char *zMode, int nPage){
  static const int aK[] = { 1, 2, 7, 30, 60 };
  char zTpl[PATH_MAX], zDb[PATH_MAX];
  int64_t digest = 0;
  pathOf(zTpl, "tpl.db");
  pathOf(zDb, "res.db");
  makeV2(zTpl, pgsz, zMode, nPage, &digest);
  for(size_t i=0; i<sizeof(aK)/sizeof(aK[0]); i++){
    copyDb(zTpl, zDb);
    waitChild(childUpgrade(zDb, aK[i], 0), 0);
    if( strcmp(zMode, "DELETE")==0 ){
      /* A reader mid-move finds every row where the cursor says. */
      sqlite3 *db = openDb(zDb);
      assert_int_equal(rowDigest(db), digest);
      sqlite3_close(db);
    }
    if( i % 2 ){
      finishByWriter(zDb);
    }else if( upgradeTo3(zDb)!=TDE_OK ){
      fail_msg("resume after %d batches: %s", aK[i], tde_last_error());
    }
    checkUpgraded(zDb, pgsz, digest);
  }
  removeDb(zDb);
  removeDb(zTpl);
}

static void test_resume_wal(void **state){ (void)state; runResume(1024, "WAL", 700); }
static void test_resume_delete(void **state){ (void)state; runResume(4096, "DELETE", 560); }

static void test_crash(void **state){
  char zTpl[2][PATH_MAX], zDb[PATH_MAX];
  int64_t digest[2] = { 0, 0 };
  unsigned seed = 24007;
  int nMid = 0;
  (void)state;
  printf("# crash rounds, seed %u\n", seed);
  pathOf(zTpl[0], "crash-wal.db");
  pathOf(zTpl[1], "crash-del.db");
  pathOf(zDb, "crash.db");
  makeV2(zTpl[0], 1024, "WAL", 700, &digest[0]);
  makeV2(zTpl[1], 1024, "DELETE", 700, &digest[1]);
  for(int r=0; r<20; r++){
    pid_t pid;
    useconds_t us;
    seed = seed*1103515245u + 12345u;
    us = (useconds_t)((seed >> 8) % 400000u);
    copyDb(zTpl[r % 2], zDb);
    pid = childUpgrade(zDb, -1, 1000);
    usleep(us);
    kill(pid, SIGKILL);
    waitChild(pid, 1);
    if( r % 2==0 ){
      /* WAL mode: mid-move if the file grew and DB-tdemap is still there. */
      char zMap[PATH_MAX + 16];
      struct stat st, st0;
      snprintf(zMap, sizeof(zMap), "%s-tdemap", zDb);
      if( access(zMap, F_OK)==0 && stat(zDb, &st)==0 && stat(zTpl[0], &st0)==0 && st.st_size>st0.st_size ) nMid++;
    }
    if( r % 4 < 2 ){
      if( upgradeTo3(zDb)!=TDE_OK ) fail_msg("round %d (%u us): %s", r, (unsigned)us, tde_last_error());
    }else{
      finishByWriter(zDb);
    }
    checkUpgraded(zDb, 1024, digest[r % 2]);
  }
  printf("# %d of 10 WAL-mode rounds were killed mid-move\n", nMid);
  removeDb(zDb);
  removeDb(zTpl[0]);
  removeDb(zTpl[1]);
}

/* A header region from an earlier point of the move put back after it
** finished: refused, and the file is not written. */
static void test_stale_header(void **state){
  char zDb[PATH_MAX];
  unsigned char *aHdr, *aAfter, *aFinal;
  size_t nHdr = 0, nAfter = 0, nFinal = 0;
  int64_t digest = 0;
  sqlite3 *db;
  int rc;
  (void)state;
  pathOf(zDb, "stale.db");
  makeV2(zDb, 1024, "WAL", 700, &digest);
  waitChild(childUpgrade(zDb, 5, 0), 0);
  aHdr = readAll(zDb, &nHdr);
  assert_non_null(aHdr);
  assert_int_equal(upgradeTo3(zDb), TDE_OK);
  checkUpgraded(zDb, 1024, digest);
  aAfter = readAll(zDb, &nAfter);
  assert_non_null(aAfter);
  memcpy(aAfter, aHdr, 8192);
  writeAll(zDb, aAfter, nAfter);
  /* Refused at the open or at the first read. */
  rc = openTdeCfg(zDb, zCfg, &db);
  if( rc==SQLITE_OK ) rc = sqlite3_exec(db, "SELECT count(*) FROM t", 0, 0, 0);
  assert_int_not_equal(rc, SQLITE_OK);
  printf("# put back: %s\n", tde_last_error());
  sqlite3_close(db);
  rc = openTdeCfg(zDb, zCfg, &db);
  if( rc==SQLITE_OK ) rc = tde_db_upgrade_to(db, "main", 3);
  assert_int_not_equal(rc, SQLITE_OK);
  sqlite3_close(db);
  aFinal = readAll(zDb, &nFinal);
  assert_non_null(aFinal);
  assert_int_equal(nFinal, nAfter);
  assert_memory_equal(aFinal, aAfter, nAfter);
  free(aHdr);
  free(aAfter);
  free(aFinal);
  removeDb(zDb);
}

/* Another process's connection, open across the upgrade: in rollback mode
** idle between its read transactions (the upgrade runs, and its next read
** finds every row through the new header); in WAL mode it holds SHARED
** all along, so the upgrade is refused (TDE_LOCKED, nothing changed) until
** it closes. */
static void runOtherConnection(const char *zMode){
  char zDb[PATH_MAX];
  int64_t digest = 0;
  int aGo[2], aReady[2], st = 0, bWal = strcmp(zMode, "WAL")==0;
  pid_t pid;
  char c = 0;
  pathOf(zDb, "other.db");
  makeV2(zDb, 4096, zMode, 600, &digest);
  assert_int_equal(pipe(aGo), 0);
  assert_int_equal(pipe(aReady), 0);
  pid = fork();
  if( pid==0 ){
    sqlite3 *db = 0;
    int64_t d1, d2;
    openTdeCfg(zDb, zCfg, &db);
    d1 = rowDigest(db);
    if( write(aReady[1], "r", 1)!=1 || read(aGo[0], &c, 1)!=1 ) _exit(6);
    d2 = rowDigest(db);
    if( d2!=digest ) fprintf(stderr, "other connection: %s / %s\n", sqlite3_errmsg(db), tde_last_error());
    sqlite3_close(db);
    _exit(d1==digest && d2==digest ? 0 : 5);
  }
  assert_int_equal(read(aReady[0], &c, 1), 1);
  if( bWal ){
    assert_int_equal(upgradeTo3(zDb), TDE_LOCKED);
    {
      sqlite3 *db = openDb(zDb);
      assert_int_equal(tdetestQueryInt(db, "SELECT format_version FROM tde_status WHERE schema='main'"), 2);
      sqlite3_close(db);
    }
  }else if( upgradeTo3(zDb)!=TDE_OK ){
    fail_msg("upgrade beside an idle connection: %s", tde_last_error());
  }
  assert_int_equal(write(aGo[1], "g", 1), 1);
  assert_int_equal(waitpid(pid, &st, 0), pid);
  if( !(WIFEXITED(st) && WEXITSTATUS(st)==0) ) fail_msg("the other connection (%s): status %d", zMode, st);
  if( bWal && upgradeTo3(zDb)!=TDE_OK ) fail_msg("upgrade after the other closed: %s", tde_last_error());
  checkUpgraded(zDb, 4096, digest);
  close(aGo[0]); close(aGo[1]); close(aReady[0]); close(aReady[1]);
  removeDb(zDb);
}

static void test_other_delete(void **state){ (void)state; runOtherConnection("DELETE"); }
static void test_other_wal(void **state){ (void)state; runOtherConnection("WAL"); }

static int groupSetup(void **state){
  (void)state;
  if( tdetestGroupSetup("test_r7_f3up", 1) ) return -1;
  tdeSetCreateVersion(2);   /* pinned: the suite upgrades version-2 databases */
  return 0;
}

static int groupTeardown(void **state){
  (void)state;
  tde_keystore_close(zCfg);
  tdetestScratchRemove();
  return 0;
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_upgrade_1024_wal),
    cmocka_unit_test(test_upgrade_1024_delete),
    cmocka_unit_test(test_upgrade_4096_wal),
    cmocka_unit_test(test_upgrade_4096_delete),
    cmocka_unit_test(test_resume_wal),
    cmocka_unit_test(test_resume_delete),
    cmocka_unit_test(test_stale_header),
    cmocka_unit_test(test_other_delete),
    cmocka_unit_test(test_other_wal),
    cmocka_unit_test(test_crash),
  };
  return cmocka_run_group_tests(tests, groupSetup, groupTeardown);
}
