/*
** Format 3's loose ends (issue 24, docs/FORMAT.md "Upgrade from version 2"):
**  - a rekey's finish moves a version-2 database to version 3 when the
**    configuration's new databases are version 3 (`format_version = 3`):
**    WAL and rollback mode; after it the database is version 3 with the
**    cursor 0, data key version 2, DB-tdemap gone, rows as before,
**    integrity_check and tde_verify pass, the audit log has the upgrade; in
**    WAL mode a page rolled back to an older authentic version is refused
**    (once a fold built the map); a rekey under a version-2 configuration
**    leaves version 2; another connection open keeps the move from
**    starting, the rekey still succeeds and the audit says the move is
**    left for `sqlite-tde upgrade`, which then does it;
**  - the move after a rekey stopped by the fault point after a batch, or
**    its process killed mid-move (SIGKILL while the fault point holds it
**    after a batch), resumes: tde_db_upgrade_to or the next writer
**    finishes it;
**  - tde_status (table and PRAGMA) shows the cursor as upgrade_cursor: 0
**    on version 2 and after the move, c in 2..N mid-move;
**  - a DB-tdemap put beside a version-3 database (c = 0) is left by a
**    read-only open, deleted by a read-write one and audited once; the
**    rows read either way (it is never read).
** Against SQLite 3.40 (system) and 3.53 (test_r8_v3bits_353).
*/
#include "tdetest.h"

#include "tde_int.h"

#include <signal.h>
#include <sys/wait.h>

#define K 508

/* zScratch/tde-v2.conf and tde-v3.conf: the group's wallet with
** format_version = 2 or 3, both with the audit log v3bits-audit.log. */
static char zCfg2[PATH_MAX], zCfg3[PATH_MAX], zAudit[PATH_MAX];

/* Page n's offset in a version-3 file of page size P (FORMAT.md). */
static int64_t specOff(uint32_t P, uint32_t N){
  int64_t M = P>8192 ? P : 8192;
  return 8192 + M*(1 + (int64_t)((N-1)/K)) + (int64_t)(N-1)*P;
}

static sqlite3 *openDbCfg(const char *zDb, const char *zConfig){
  sqlite3 *db = 0;
  if( openTdeCfg(zDb, zConfig, &db)!=SQLITE_OK ) fail_msg("open %s: %s", zDb, db ? sqlite3_errmsg(db) : "?");
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, 5000);
  return db;
}

static int64_t formatOf(sqlite3 *db){
  return tdetestQueryInt(db, "SELECT format_version FROM tde_status WHERE schema='main'");
}

/* tde_status's upgrade cursor, from the table and from the PRAGMA's text
** (both must agree). */
static int64_t cursorOf(sqlite3 *db){
  int64_t c = tdetestQueryInt(db, "SELECT upgrade_cursor FROM tde_status WHERE schema='main'");
  sqlite3_stmt *p = 0;
  char zWant[64];
  const char *z;
  if( sqlite3_prepare_v2(db, "PRAGMA tde_status", -1, &p, 0)!=SQLITE_OK ) fail_msg("pragma: %s", sqlite3_errmsg(db));
  assert_int_equal(sqlite3_step(p), SQLITE_ROW);
  z = (const char*)sqlite3_column_text(p, 0);
  snprintf(zWant, sizeof(zWant), " upgrade_cursor=%lld ", (long long)c);
  if( !z || !strstr(z, zWant) ) fail_msg("PRAGMA tde_status without '%s': %s", zWant, z ? z : "NULL");
  sqlite3_finalize(p);
  return c;
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

static int mapExists(const char *zDb){
  char zMap[PATH_MAX + 16];
  snprintf(zMap, sizeof(zMap), "%s-tdemap", zDb);
  return access(zMap, F_OK)==0;
}

/* A version-2 database of about nPage pages of pgsz in zMode (made under
** tde-v2.conf), its rows' digest into *pDigest, closed (WAL: checkpointed,
** TRUNCATE, its DB-tdemap there). */
static void makeV2(const char *zDb, uint32_t pgsz, const char *zMode, int nPage, int64_t *pDigest){
  sqlite3 *db;
  char *z;
  int nRow = nPage * (int)(pgsz / 256);
  removeDb(zDb);
  db = openDbCfg(zDb, zCfg2);
  z = sqlite3_mprintf("PRAGMA page_size=%u; PRAGMA journal_mode=%s; CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);"
                      "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<%d) "
                      "INSERT INTO t(id, v) SELECT i, printf('%%0200d', i) FROM c;", pgsz, zMode, nRow);
  exec(db, z);
  sqlite3_free(z);
  exec(db, "UPDATE t SET v = v || 'u' WHERE id % 7 = 0");
  if( strcmp(zMode, "WAL")==0 ) exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  *pDigest = rowDigest(db);
  assert_true(*pDigest>=0);
  assert_int_equal(formatOf(db), 2);
  assert_int_equal(cursorOf(db), 0);
  sqlite3_close(db);
  if( strcmp(zMode, "WAL")==0 ) assert_true(mapExists(zDb));
}

static void copyFile(const char *zFrom, const char *zTo){
  size_t n = 0;
  unsigned char *a = readAll(zFrom, &n);
  if( !a ){ unlink(zTo); return; }
  writeAll(zTo, a, n);
  free(a);
}

/* The rekey on its own connection under zConfig: TDE_OK expected. */
static void rekeyWith(const char *zDb, const char *zConfig){
  sqlite3 *db = openDbCfg(zDb, zConfig);
  if( tde_db_rekey(db, "main", 64, 0, 0)!=TDE_OK ) fail_msg("rekey: %s", tde_last_error());
  sqlite3_close(db);
}

/* The moved database: version 3, key version iKeyVersion, no DB-tdemap,
** the file reaches page N's version-3 place, rows as before,
** integrity_check and tde_verify. */
static void checkV3(const char *zDb, uint32_t pgsz, int64_t digest, int iKeyVersion){
  sqlite3 *db = openDbCfg(zDb, zCfg3);
  int64_t nPage = tdetestQueryInt(db, "PRAGMA page_count"), nChecked = 0, iBad = 0;
  struct stat st;
  assert_int_equal(formatOf(db), 3);
  assert_int_equal(cursorOf(db), 0);
  assert_int_equal(tdetestQueryInt(db, "SELECT data_key_version FROM tde_status WHERE schema='main'"), iKeyVersion);
  assert_int_equal(rowDigest(db), digest);
  assert_true(integrityOk(db));
  if( tde_verify(db, "main", &nChecked, &iBad, 0, 0)!=TDE_OK ) fail_msg("tde_verify: %s", tde_last_error());
  assert_true(nChecked>=nPage);
  sqlite3_close(db);
  assert_false(mapExists(zDb));
  assert_int_equal(stat(zDb, &st), 0);
  if( st.st_size<specOff(pgsz, (uint32_t)nPage) + pgsz ){
    fail_msg("%s: %lld bytes, page %lld ends at %lld", zDb, (long long)st.st_size, (long long)nPage,
             (long long)(specOff(pgsz, (uint32_t)nPage) + pgsz));
  }
}

/* The audit log holds a line with both zA and zB: 1, else 0. */
static int auditHas(const char *zA, const char *zB){
  FILE *f = fopen(zAudit, "r");
  char zLine[8192];
  int bFound = 0;
  if( !f ) return 0;
  while( !bFound && fgets(zLine, sizeof(zLine), f) ){
    bFound = strstr(zLine, zA)!=0 && (!zB || strstr(zLine, zB)!=0);
  }
  fclose(f);
  return bFound;
}

/* Lines of the audit log that hold zA. */
static int auditCount(const char *zA){
  FILE *f = fopen(zAudit, "r");
  char zLine[8192];
  int n = 0;
  if( !f ) return 0;
  while( fgets(zLine, sizeof(zLine), f) ) n += strstr(zLine, zA)!=0;
  fclose(f);
  return n;
}

/* WAL mode, version 3 after the rekey: once a fold built the map, a page
** put back to an older authentic version is refused. */
static void checkRollbackRefused(const char *zDb, uint32_t pgsz){
  char zOld[PATH_MAX];
  sqlite3 *db;
  size_t nOld = 0, nNew = 0;
  unsigned char *aOld, *aNew;
  int64_t iPg = 0, nPage;
  int rc;
  pathOf(zOld, "old.db");
  db = openDbCfg(zDb, zCfg3);
  exec(db, "UPDATE t SET v = v || 'a' WHERE id % 89 = 0; PRAGMA wal_checkpoint(TRUNCATE);"
           "UPDATE t SET v = v || 'b' WHERE id % 83 = 0; PRAGMA wal_checkpoint(TRUNCATE)");
  sqlite3_close(db);
  copyFile(zDb, zOld);
  db = openDbCfg(zDb, zCfg3);
  exec(db, "UPDATE t SET v = v || 'x' WHERE id % 97 = 0; PRAGMA wal_checkpoint(TRUNCATE)");
  nPage = tdetestQueryInt(db, "PRAGMA page_count");
  sqlite3_close(db);
  aOld = readAll(zOld, &nOld);
  aNew = readAll(zDb, &nNew);
  assert_non_null(aOld);
  assert_non_null(aNew);
  for(int64_t pg=nPage/2; pg<=nPage && !iPg; pg++){
    int64_t o = specOff(pgsz, (uint32_t)pg);
    if( o + pgsz<=(int64_t)nOld && memcmp(aOld + o, aNew + o, pgsz)!=0 ) iPg = pg;
  }
  if( !iPg ) fail_msg("no page changed in the second half");
  memcpy(aNew + specOff(pgsz, (uint32_t)iPg), aOld + specOff(pgsz, (uint32_t)iPg), pgsz);
  writeAll(zDb, aNew, nNew);
  free(aOld);
  free(aNew);
  db = openDbCfg(zDb, zCfg3);
  rc = sqlite3_exec(db, "SELECT count(*) FROM t WHERE v LIKE '%x'", 0, 0, 0);
  assert_int_not_equal(rc, SQLITE_OK);
  if( !strstr(tde_last_error(), "page map") ) fail_msg("refusal: %s", tde_last_error());
  sqlite3_close(db);
  removeDb(zOld);
}

/* ---- 1. the rekey's finish upgrades ----------------------------------------- */

static void runRekeyUpgrades(uint32_t pgsz, const char *zMode, int nPage){
  char zDb[PATH_MAX];
  int64_t digest = 0;
  int nUpgrade;
  pathOf(zDb, "rk.db");
  makeV2(zDb, pgsz, zMode, nPage, &digest);
  nUpgrade = auditCount("format version 2 -> 3 (the page map inside the database file)");
  rekeyWith(zDb, zCfg3);
  checkV3(zDb, pgsz, digest, 2);
  assert_int_equal(auditCount("format version 2 -> 3 (the page map inside the database file)"), nUpgrade + 1);
  if( strcmp(zMode, "WAL")==0 ) checkRollbackRefused(zDb, pgsz);
  removeDb(zDb);
}

static void test_rekey_upgrades_wal(void **state){ (void)state; runRekeyUpgrades(1024, "WAL", 700); }
static void test_rekey_upgrades_delete(void **state){ (void)state; runRekeyUpgrades(4096, "DELETE", 300); }

/* A version-2 configuration: the rekey leaves version 2 (and DB-tdemap). */
static void test_rekey_v2_config_stays(void **state){
  char zDb[PATH_MAX];
  int64_t digest = 0;
  sqlite3 *db;
  (void)state;
  pathOf(zDb, "rk2.db");
  makeV2(zDb, 1024, "WAL", 300, &digest);
  rekeyWith(zDb, zCfg2);
  db = openDbCfg(zDb, zCfg2);
  assert_int_equal(formatOf(db), 2);
  assert_int_equal(tdetestQueryInt(db, "SELECT data_key_version FROM tde_status WHERE schema='main'"), 2);
  assert_int_equal(rowDigest(db), digest);
  sqlite3_close(db);
  removeDb(zDb);
}

/* Another connection open (WAL mode: it holds SHARED): the rekey finishes,
** the move is left for the upgrade, said in the audit log; then the
** upgrade does it. */
static void test_rekey_upgrade_left(void **state){
  char zDb[PATH_MAX];
  int64_t digest = 0;
  sqlite3 *db, *dbOther;
  int nLeft = auditCount("left for `sqlite-tde upgrade`");
  (void)state;
  pathOf(zDb, "left.db");
  makeV2(zDb, 1024, "WAL", 300, &digest);
  dbOther = openDbCfg(zDb, zCfg3);
  assert_int_equal(rowDigest(dbOther), digest);
  rekeyWith(zDb, zCfg3);
  assert_int_equal(formatOf(dbOther), 2);
  assert_int_equal(tdetestQueryInt(dbOther, "SELECT data_key_version FROM tde_status WHERE schema='main'"), 2);
  assert_int_equal(rowDigest(dbOther), digest);
  sqlite3_close(dbOther);
  assert_int_equal(auditCount("left for `sqlite-tde upgrade`"), nLeft + 1);
  assert_true(auditHas("left for `sqlite-tde upgrade`", "\"op\":\"upgrade\""));
  db = openDbCfg(zDb, zCfg3);
  if( tde_db_upgrade_to(db, "main", 3)!=TDE_OK ) fail_msg("upgrade: %s", tde_last_error());
  sqlite3_close(db);
  checkV3(zDb, 1024, digest, 2);
  removeDb(zDb);
}

/* ---- the move after a rekey, stopped and resumed ----------------------------- */

static int nBatchLeft;        /* the fault point fires when it reaches 0 */
static int fdHeld = -1;       /* >= 0: instead, say so on this pipe and wait to be killed */
static int batchFault(int eSite){
  if( eSite!=TDE_FAULT_UPGRADE_BATCH ) return 0;
  if( --nBatchLeft>0 ) return 0;
  if( fdHeld>=0 ){
    if( write(fdHeld, "h", 1)!=1 ) _exit(7);
    for(;;) pause();
  }
  return 1;
}

/* In a child process: the rekey under tde-v3.conf, its move stopped by
** the fault point after k batches (fd >= 0: held there to be killed).
** The child's exit status: 0 if the rekey succeeded. */
static pid_t childRekey(const char *zDb, int k, int fd){
  pid_t pid;
  fflush(stdout);                /* not printed twice */
  pid = fork();
  if( pid==0 ){
    sqlite3 *db = 0;
    int trc;
    nBatchLeft = k;
    fdHeld = fd;
    tdeFaultHook = batchFault;
    if( openTdeCfg(zDb, zCfg3, &db)!=SQLITE_OK ) _exit(5);
    trc = tde_db_rekey(db, "main", 64, 0, 0);
    if( trc==TDE_OK ){
      /* The rekey's connection sees the move stopped: c in 2..N. */
      sqlite3_stmt *p = 0;
      int64_t c = -1, nPage = 0;
      if( sqlite3_prepare_v2(db, "SELECT upgrade_cursor, pages FROM tde_status WHERE schema='main'", -1, &p, 0)==SQLITE_OK
       && sqlite3_step(p)==SQLITE_ROW ){
        c = sqlite3_column_int64(p, 0);
        nPage = sqlite3_column_int64(p, 1);
      }
      sqlite3_finalize(p);
      printf("# child: upgrade_cursor %lld of %lld pages\n", (long long)c, (long long)nPage);
      fflush(stdout);
      if( c<2 || c>nPage ) trc = -1;
    }
    sqlite3_close(db);
    _exit(trc==TDE_OK ? 0 : 4);
  }
  return pid;
}

/* The next writer finishes a move: one row added and removed again. */
static void finishByWriter(const char *zDb){
  sqlite3 *db = openDbCfg(zDb, zCfg3);
  int rc = sqlite3_exec(db, "INSERT INTO t(id, v) VALUES(-1, 'w'); DELETE FROM t WHERE id=-1", 0, 0, 0);
  if( rc ) fail_msg("writer: %s (%s)", sqlite3_errmsg(db), tde_last_error());
  sqlite3_close(db);
}

/* Mid-move: version 3 with the cursor c in 2..N (page 1 moves last),
** shown by tde_status; the rekey done (key version 2).  In WAL mode the
** open's WAL recovery takes the write lock, which finishes the move first
** (c = 0 then): the cursor mid-move is checked in the child instead. */
static void checkMidMove(const char *zDb, int bWal){
  sqlite3 *db = openDbCfg(zDb, zCfg3);
  int64_t c = cursorOf(db);
  assert_int_equal(formatOf(db), 3);
  if( !bWal && (c<2 || c>tdetestQueryInt(db, "PRAGMA page_count")) ) fail_msg("upgrade_cursor %lld mid-move", (long long)c);
  printf("# mid-move: upgrade_cursor %lld\n", (long long)c);
  assert_int_equal(tdetestQueryInt(db, "SELECT data_key_version FROM tde_status WHERE schema='main'"), 2);
  sqlite3_close(db);
}

static void runRekeyResume(const char *zMode){
  static const int aK[] = { 1, 5, 20 };
  char zDb[PATH_MAX];
  int64_t digest = 0;
  pathOf(zDb, "rkres.db");
  for(size_t i=0; i<sizeof(aK)/sizeof(aK[0]); i++){
    int st = 0, bKill = i==1, aPipe[2] = { -1, -1 };
    pid_t pid;
    makeV2(zDb, 1024, zMode, 700, &digest);
    if( bKill ) assert_int_equal(pipe(aPipe), 0);
    pid = childRekey(zDb, aK[i], bKill ? aPipe[1] : -1);
    if( bKill ){
      char c = 0;
      assert_int_equal(read(aPipe[0], &c, 1), 1);
      kill(pid, SIGKILL);
      close(aPipe[0]);
      close(aPipe[1]);
    }
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if( !bKill && !(WIFEXITED(st) && WEXITSTATUS(st)==0) ) fail_msg("rekey child: status %d", st);
    checkMidMove(zDb, strcmp(zMode, "WAL")==0);
    if( i % 2 ){
      finishByWriter(zDb);
    }else{
      sqlite3 *db = openDbCfg(zDb, zCfg3);
      if( tde_db_upgrade_to(db, "main", 3)!=TDE_OK ) fail_msg("resume after %d: %s", aK[i], tde_last_error());
      sqlite3_close(db);
    }
    checkV3(zDb, 1024, digest, 2);
  }
  removeDb(zDb);
}

static void test_rekey_resume_wal(void **state){ (void)state; runRekeyResume("WAL"); }
static void test_rekey_resume_delete(void **state){ (void)state; runRekeyResume("DELETE"); }

/* ---- 3. a leftover DB-tdemap ---------------------------------------------------- */

static int openReadOnly(const char *zDb, sqlite3 **pDb){
  char *zUri = sqlite3_mprintf("file:%s?vfs=tde&tde_config=%s", zDb, zCfg3);
  int rc = sqlite3_open_v2(zUri, pDb, SQLITE_OPEN_READONLY|SQLITE_OPEN_URI, 0);
  sqlite3_free(zUri);
  return rc;
}

#define LEFTOVER "a leftover page map of format version 2 removed"

/* A version-3 database (made under tde-v3.conf) with a DB-tdemap put
** beside it (bytes no map holds: read, it would be refused): a read-only
** open reads every row and leaves it; a read-write open reads every row,
** deletes it and says so once in the audit log; the next open finds none
** and writes no line. */
static void runLeftover(const char *zMode){
  char zDb[PATH_MAX], zMap[PATH_MAX + 16];
  unsigned char aJunk[4096];
  int64_t digest;
  int nAudit = auditCount(LEFTOVER);
  sqlite3 *db;
  char *z;
  pathOf(zDb, "left3.db");
  removeDb(zDb);
  db = openDbCfg(zDb, zCfg3);
  z = sqlite3_mprintf("PRAGMA journal_mode=%s; CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);"
                      "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<2000) "
                      "INSERT INTO t(id, v) SELECT i, printf('%%0200d', i) FROM c;", zMode);
  exec(db, z);
  sqlite3_free(z);
  assert_int_equal(formatOf(db), 3);
  assert_int_equal(cursorOf(db), 0);
  digest = rowDigest(db);
  assert_true(digest>=0);
  sqlite3_close(db);
  assert_false(mapExists(zDb));
  for(size_t i=0; i<sizeof(aJunk); i++) aJunk[i] = (unsigned char)(i*7 + 3);
  snprintf(zMap, sizeof(zMap), "%s-tdemap", zDb);
  writeAll(zMap, aJunk, sizeof(aJunk));

  /* Read-only: read, not deleted, no audit line. */
  db = 0;
  if( openReadOnly(zDb, &db)!=SQLITE_OK ) fail_msg("read-only open: %s", db ? sqlite3_errmsg(db) : "?");
  assert_int_equal(rowDigest(db), digest);
  sqlite3_close(db);
  assert_true(mapExists(zDb));
  assert_int_equal(auditCount(LEFTOVER), nAudit);

  /* Read-write: deleted at the open (before any write), audited. */
  db = openDbCfg(zDb, zCfg3);
  assert_int_equal(rowDigest(db), digest);
  assert_false(mapExists(zDb));
  sqlite3_close(db);
  assert_int_equal(auditCount(LEFTOVER), nAudit + 1);
  assert_true(auditHas(LEFTOVER, "\"op\":\"upgrade\""));

  /* Once: the next open finds nothing to remove. */
  db = openDbCfg(zDb, zCfg3);
  assert_int_equal(rowDigest(db), digest);
  assert_true(integrityOk(db));
  sqlite3_close(db);
  assert_int_equal(auditCount(LEFTOVER), nAudit + 1);
  removeDb(zDb);
}

static void test_leftover_map_delete(void **state){ (void)state; runLeftover("DELETE"); }
static void test_leftover_map_wal(void **state){ (void)state; runLeftover("WAL"); }

/* ---- setup -------------------------------------------------------------------- */

static int writeConf(char *zPath, size_t nPath, const char *zName, const char *zExtra){
  FILE *f;
  if( snprintf(zPath, nPath, "%s/%s", zScratch, zName)>=(int)nPath ) return -1;
  f = fopen(zPath, "w");
  if( !f ) return -1;
  fprintf(f, "%s%saudit_log = v3bits-audit.log\n", TDETEST_WALLET_CONF, zExtra);
  fclose(f);
  return 0;
}

static int groupSetup(void **state){
  (void)state;
  if( tdetestGroupSetup("r8_v3bits", 1) ) return -1;
  tdeSetCreateVersion(2);    /* the configurations say which version */
  if( writeConf(zCfg2, sizeof(zCfg2), "tde-v2.conf", "format_version = 2\n") ) return -1;
  if( writeConf(zCfg3, sizeof(zCfg3), "tde-v3.conf", "format_version = 3\n") ) return -1;
  if( snprintf(zAudit, sizeof(zAudit), "%s/v3bits-audit.log", zScratch)>=(int)sizeof(zAudit) ) return -1;
  return 0;
}

static int groupTeardown(void **state){
  (void)state;
  tdetestScratchRemove();
  return 0;
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_rekey_upgrades_wal),
    cmocka_unit_test(test_rekey_upgrades_delete),
    cmocka_unit_test(test_rekey_v2_config_stays),
    cmocka_unit_test(test_rekey_upgrade_left),
    cmocka_unit_test(test_rekey_resume_wal),
    cmocka_unit_test(test_rekey_resume_delete),
    cmocka_unit_test(test_leftover_map_delete),
    cmocka_unit_test(test_leftover_map_wal),
  };
  return cmocka_run_group_tests_name("r8_v3bits", tests, groupSetup, groupTeardown);
}
