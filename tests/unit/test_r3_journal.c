/*
** Rollback journals as SQLite uses them beyond the common path:
**
**  - Multi-database commits (a super-journal): the process dies at
**    SQLite's commit point, the super-journal's unlink().  A child process
**    runs a transaction over `main` and an ATTACHed `aux` and _exit()s
**    inside the unlink (a VFS below tde); the parent reopens the files and
**    both databases must be rolled back, as plain SQLite does (the same
**    scenario without tde is the control).  While `main` plays back its
**    journal, SQLite opens aux's journal with SQLITE_OPEN_SUPER_JOURNAL to
**    read its super-journal pointer: tde must show SQLite its own format.
**    Both orders: aux attached after main's playback, and before it.
**  - Journal sector sizes below 512: a VFS stacked above tde reports a
**    small sector and no SQLITE_IOCAP_POWERSAFE_OVERWRITE, so SQLite
**    writes journal headers of that size.  Sectors from 256 bytes are
**    supported (round trips, rollback, hot-journal recovery); smaller
**    ones are refused before anything is written, with a log line.
**  - locking_mode=EXCLUSIVE with a rollback journal: SQLite keeps the
**    journal and zeroes its header after each transaction; reads after a
**    ROLLBACK, and crash images of such a journal.
**
** The VFS below tde (the default when tde is registered) forwards to
** "unix" and, when armed, ends the process in the super-journal's
** deletion.  Run against SQLite 3.40 (system) and 3.53 (test_r3_journal_353).
*/
#include "tdetest.h"

#include <sys/wait.h>
#include <dirent.h>

#include "tde_int.h"
#include "keys/keys.h"
#include "stackvfs.h"

#define NROW 600
#define PGSZ 4096
#include "freshtest.h"

#define DIE_CODE 42

/* ---- the VFS below tde: dies at the super-journal's deletion -------------- */

static sqlite3_vfs *pUnix;
static sqlite3_vfs belowVfs;
static int bDieAtSuper;             /* set only in a child process */

static int belowDelete(sqlite3_vfs *v, const char *z, int bSync){
  (void)v;
  if( bDieAtSuper && z && strstr(z, "-mj") ) _exit(DIE_CODE);
  return pUnix->xDelete(pUnix, z, bSync);
}

/* ---- the VFS above tde: a small sector, no POWERSAFE_OVERWRITE ------------ */

static int smallSector = 128;
static sqlite3_io_methods smallIo;

static int smallSectorSize(sqlite3_file *p){ (void)p; return smallSector; }
static int smallDevChar(sqlite3_file *p){
  return stackDevChar(p) & ~SQLITE_IOCAP_POWERSAFE_OVERWRITE;
}
static int smallOpen(sqlite3_vfs *v, const char *zName, sqlite3_file *pFile, int flags, int *pOut){
  int rc = stackOpen(v, zName, pFile, flags, pOut);
  if( rc==SQLITE_OK ) pFile->pMethods = &smallIo;
  return rc;
}

/* ---- helpers ------------------------------------------------------------- */

static sqlite3_int64 oneInt(sqlite3 *db, const char *zSql){
  sqlite3_int64 v = -1;
  int rc = stepInt(db, zSql, &v);
  if( rc ) fail_msg("%s: %s", zSql, sqlite3_errmsg(db));
  return v;
}

static int openMode(int bTde, const char *zDb, sqlite3 **pDb){
  if( bTde ) return openTdeCfg(zDb, zCfg, pDb);
  return sqlite3_open_v2(zDb, pDb, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE|SQLITE_OPEN_URI, 0);
}

static void attachAux(int bTde, sqlite3 *db, const char *zAux){
  char *zSql = bTde
    ? sqlite3_mprintf("ATTACH 'file:%s?vfs=tde&tde_config=%s' AS aux", zAux, zCfg)
    : sqlite3_mprintf("ATTACH 'file:%s' AS aux", zAux);
  assert_non_null(zSql);
  exec(db, zSql);
  sqlite3_free(zSql);
}

/* A super-journal (a name with "-mj") in zScratch. */
static int superJournalExists(void){
  DIR *d = opendir(zScratch);
  struct dirent *e;
  int bFound = 0;
  assert_non_null(d);
  while( (e = readdir(d))!=0 ) if( strstr(e->d_name, "-mj") ) bFound = 1;
  closedir(d);
  return bFound;
}

static void removeSuperJournals(void){
  DIR *d = opendir(zScratch);
  struct dirent *e;
  char z[PATH_MAX];
  assert_non_null(d);
  while( (e = readdir(d))!=0 ){
    if( strstr(e->d_name, "-mj") ){ pathOf(z, e->d_name); unlink(z); }
  }
  closedir(d);
}

/* ---- bug: atomicity across ATTACHed databases at the commit point --------- */

static void superCase(int bTde, const char *zMode, int bAttachFirst){
  char zMain[PATH_MAX], zAux[PATH_MAX], zSql[256];
  sqlite3 *db = 0;
  pid_t pid;
  int status = 0;
  sqlite3_int64 sumMain, sumAux;

  pathOf(zMain, "super-main.db");
  pathOf(zAux, "super-aux.db");
  removeDb(zMain);
  removeDb(zAux);
  removeSuperJournals();
  assert_int_equal(openMode(bTde, zMain, &db), SQLITE_OK);
  attachAux(bTde, db, zAux);
  snprintf(zSql, sizeof(zSql), "PRAGMA main.journal_mode=%s; PRAGMA aux.journal_mode=%s;", zMode, zMode);
  exec(db, zSql);
  exec(db, "CREATE TABLE main.t(x); CREATE TABLE aux.t(x);"
           "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<200)"
           " INSERT INTO main.t SELECT i FROM c;"
           "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<200)"
           " INSERT INTO aux.t SELECT i FROM c;");
  sumMain = oneInt(db, "SELECT sum(x) FROM main.t");
  sumAux = oneInt(db, "SELECT sum(x) FROM aux.t");
  assert_int_equal(sqlite3_close(db), SQLITE_OK);

  pid = fork();
  assert_true(pid>=0);
  if( pid==0 ){
    sqlite3 *dbc = 0;
    if( openMode(bTde, zMain, &dbc) ) _exit(2);
    attachAux(bTde, dbc, zAux);
    if( sqlite3_exec(dbc, zSql, 0, 0, 0) ) _exit(3);
    if( sqlite3_exec(dbc, "BEGIN; UPDATE main.t SET x=x+1000; UPDATE aux.t SET x=x+1000;", 0, 0, 0) ) _exit(4);
    bDieAtSuper = 1;
    sqlite3_exec(dbc, "COMMIT", 0, 0, 0);
    _exit(5);                                  /* the commit point was not reached */
  }
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), DIE_CODE);
  assert_true(superJournalExists());

  /* Reopen: main's hot journal is played back at its first read. */
  assert_int_equal(openMode(bTde, zMain, &db), SQLITE_OK);
  if( bAttachFirst ) attachAux(bTde, db, zAux);
  assert_int_equal(oneInt(db, "SELECT sum(x) FROM main.t"), sumMain);
  if( !bAttachFirst ) attachAux(bTde, db, zAux);
  assert_int_equal(oneInt(db, "SELECT sum(x) FROM aux.t"), sumAux);
  assert_true(integrityOk(db));
  exec(db, "PRAGMA aux.integrity_check");
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  assert_false(superJournalExists());
  removeDb(zMain);
  removeDb(zAux);
}

static void superModes(int bTde){
  static const char *azMode[] = { "DELETE", "TRUNCATE", "PERSIST" };
  for(int m=0; m<3; m++){
    superCase(bTde, azMode[m], 0);
    superCase(bTde, azMode[m], 1);
  }
}
static void test_super_plain(void **s){ (void)s; superModes(0); }
static void test_super_tde(void **s){ (void)s; superModes(1); }

/* ---- bug: locking_mode=EXCLUSIVE with a rollback journal ----------------- */

static void exclusiveCase(const char *zMode){
  char zDb[PATH_MAX], zImg[PATH_MAX], zJ[PATH_MAX], zImgJ[PATH_MAX], zSql[128];
  sqlite3 *db = 0, *db2 = 0;
  pathOf(zDb, "excl.db");
  pathOf(zImg, "excl-img.db");
  sidePath(zJ, zDb, "-journal");
  sidePath(zImgJ, zImg, "-journal");
  removeDb(zDb);
  removeDb(zImg);
  assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
  sqlite3_extended_result_codes(db, 1);
  snprintf(zSql, sizeof(zSql), "PRAGMA journal_mode=%s", zMode);
  exec(db, zSql);
  /* The sequence. */
  exec(db, "CREATE TABLE abc(a,b,c); PRAGMA locking_mode=exclusive;"
           "INSERT INTO abc VALUES(1,2,3); BEGIN; UPDATE abc SET a=9; ROLLBACK;");
  assert_int_equal(oneInt(db, "SELECT a FROM abc"), 1);
  assert_int_equal(oneInt(db, "SELECT count(*) FROM abc"), 1);
  /* More transactions on the kept journal. */
  exec(db, "BEGIN; UPDATE abc SET a=7; COMMIT; BEGIN; UPDATE abc SET b=8; ROLLBACK;");
  assert_int_equal(oneInt(db, "SELECT a*100+b FROM abc"), 702);
  exec(db, "INSERT INTO abc SELECT a+1,b,c FROM abc; INSERT INTO abc SELECT a+2,b,c FROM abc;");
  assert_int_equal(oneInt(db, "SELECT count(*) FROM abc"), 4);
  assert_true(integrityOk(db));

  /* A crash image with the journal as a ROLLBACK left it: no transaction. */
  exec(db, "BEGIN; UPDATE abc SET a=a+50; ROLLBACK;");
  fileCopy(zDb, zImg);
  if( fileExists(zJ) ) fileCopy(zJ, zImgJ);
  assert_int_equal(openTdeCfg(zImg, zCfg, &db2), SQLITE_OK);
  assert_int_equal(oneInt(db2, "SELECT sum(a) FROM abc"), 7+8+9+10);
  assert_true(integrityOk(db2));
  assert_int_equal(sqlite3_close(db2), SQLITE_OK);
  removeDb(zImg);

  /* A crash image in the middle of a transaction that spilled: hot. */
  exec(db, "PRAGMA cache_size=10; CREATE TABLE big(v);"
           "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<300)"
           " INSERT INTO big SELECT printf('%.500c', 'a') FROM c;");
  exec(db, "BEGIN; UPDATE big SET v=printf('%.500c', 'b'); UPDATE abc SET a=a+50;");
  fileCopy(zDb, zImg);
  assert_true(fileExists(zJ));
  fileCopy(zJ, zImgJ);
  exec(db, "ROLLBACK");
  assert_int_equal(oneInt(db, "SELECT sum(a) FROM abc"), 7+8+9+10);
  assert_int_equal(oneInt(db, "SELECT count(*) FROM big WHERE v LIKE 'a%'"), 300);
  assert_int_equal(openTdeCfg(zImg, zCfg, &db2), SQLITE_OK);
  assert_int_equal(oneInt(db2, "SELECT sum(a) FROM abc"), 7+8+9+10);
  assert_int_equal(oneInt(db2, "SELECT count(*) FROM big WHERE v LIKE 'a%'"), 300);
  assert_true(integrityOk(db2));
  assert_int_equal(sqlite3_close(db2), SQLITE_OK);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  removeDb(zImg);
  removeDb(zDb);
}

static void test_exclusive_delete(void **s){ (void)s; exclusiveCase("DELETE"); }
static void test_exclusive_persist(void **s){ (void)s; exclusiveCase("PERSIST"); }
static void test_exclusive_truncate(void **s){ (void)s; exclusiveCase("TRUNCATE"); }

/* ---- bug: journal sector sizes below 512 ---------------------------------- */

/* Through the small-sector VFS above tde. */
static int openSmall(const char *zDb, sqlite3 **pDb){
  const char *zSave = zTdetestVfs;
  int rc;
  zTdetestVfs = "r3-small";
  rc = openTdeCfg(zDb, zCfg, pDb);
  zTdetestVfs = zSave;
  return rc;
}

static void smallSupportedCase(int nSector, const char *zMode){
  char zDb[PATH_MAX], zImg[PATH_MAX], zJ[PATH_MAX], zImgJ[PATH_MAX], zSql[128];
  sqlite3 *db = 0, *db2 = 0;
  smallSector = nSector;
  pathOf(zDb, "small.db");
  pathOf(zImg, "small-img.db");
  sidePath(zJ, zDb, "-journal");
  sidePath(zImgJ, zImg, "-journal");
  removeDb(zDb);
  removeDb(zImg);
  assert_int_equal(openSmall(zDb, &db), SQLITE_OK);
  snprintf(zSql, sizeof(zSql), "PRAGMA page_size=512; PRAGMA journal_mode=%s;", zMode);
  exec(db, zSql);
  exec(db, "CREATE TABLE t(v);"
           "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<400)"
           " INSERT INTO t SELECT printf('%.100c', 'a') FROM c;");
  exec(db, "BEGIN; UPDATE t SET v=printf('%.100c', 'z'); ROLLBACK;");
  assert_int_equal(oneInt(db, "SELECT count(*) FROM t WHERE v LIKE 'a%'"), 400);
  /* A transaction that spills, copied while its journal is hot. */
  exec(db, "PRAGMA cache_size=10; BEGIN; UPDATE t SET v=printf('%.100c', 'b');");
  assert_true(fileExists(zJ));
  fileCopy(zDb, zImg);
  fileCopy(zJ, zImgJ);
  exec(db, "COMMIT");
  assert_int_equal(oneInt(db, "SELECT count(*) FROM t WHERE v LIKE 'b%'"), 400);
  assert_true(integrityOk(db));
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  assert_int_equal(openSmall(zImg, &db2), SQLITE_OK);
  assert_int_equal(oneInt(db2, "SELECT count(*) FROM t WHERE v LIKE 'a%'"), 400);
  assert_true(integrityOk(db2));
  assert_int_equal(sqlite3_close(db2), SQLITE_OK);
  removeDb(zImg);
  removeDb(zDb);
}

static void smallRefusedCase(int nSector){
  char zDb[PATH_MAX], zSql[128];
  sqlite3 *db = 0;
  size_t n0 = 0, n1 = 0;
  unsigned char *a0, *a1;
  int rc;
  smallSector = 512;
  pathOf(zDb, "small-refused.db");
  removeDb(zDb);
  /* Created through the same stack with a 512-byte sector. */
  assert_int_equal(openSmall(zDb, &db), SQLITE_OK);
  exec(db, "PRAGMA page_size=512; CREATE TABLE t(v); INSERT INTO t VALUES('x');");
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  a0 = readAll(zDb, &n0);
  smallSector = nSector;
  zLogSeen[0] = 0;
  tde_set_log(captureLog, 0);
  assert_int_equal(openSmall(zDb, &db), SQLITE_OK);
  sqlite3_extended_result_codes(db, 1);
  rc = sqlite3_exec(db, "INSERT INTO t VALUES('y')", 0, 0, 0);
  tde_set_log(quietLog, 0);
  snprintf(zSql, sizeof(zSql), "sector size %d", nSector);
  assert_int_not_equal(rc, SQLITE_OK);
  assert_non_null(strstr(zLogSeen, zSql));
  assert_int_equal(oneInt(db, "SELECT count(*) FROM t"), 1);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  a1 = readAll(zDb, &n1);
  assert_true(a0 && a1 && n0==n1 && memcmp(a0, a1, n0)==0);
  free(a0);
  free(a1);
  removeDb(zDb);
}

static void test_small_sector_256(void **s){
  (void)s;
  smallSupportedCase(256, "DELETE");
  smallSupportedCase(256, "TRUNCATE");
  smallSupportedCase(256, "PERSIST");
}
static void test_small_sector_refused(void **s){
  (void)s;
  smallRefusedCase(128);
  smallRefusedCase(32);
  smallRefusedCase(200);
}

static int groupSetup(void **state){
  (void)state;
  return tdetestGroupSetup("r3_journal", 1);
}

static int groupTeardown(void **state){
  (void)state;
  tdetestScratchRemove();
  return 0;
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_exclusive_delete),
    cmocka_unit_test(test_exclusive_persist),
    cmocka_unit_test(test_exclusive_truncate),
    cmocka_unit_test(test_small_sector_256),
    cmocka_unit_test(test_small_sector_refused),
    cmocka_unit_test(test_super_plain),
    cmocka_unit_test(test_super_tde),
  };
  if( sqlite3_initialize() ) return 1;
  pUnix = sqlite3_vfs_find("unix");
  if( !pUnix ) return 1;
  belowVfs = *pUnix;
  belowVfs.zName = "r3-below";
  belowVfs.pNext = 0;
  belowVfs.xDelete = belowDelete;
  if( sqlite3_vfs_register(&belowVfs, 1) ) return 1;
  if( groupSetup(0) ) return 1;
  /* The small-sector VFS above tde. */
  if( stackVfsRegister("r3-small", "tde") ) return 1;
  stackVfs.xOpen = smallOpen;
  smallIo = stackIo;
  smallIo.xSectorSize = smallSectorSize;
  smallIo.xDeviceCharacteristics = smallDevChar;
  return cmocka_run_group_tests_name("r3_journal", tests, 0, groupTeardown);
}
