/*
** Issue 21, bugs 3 and 4, and the issue's "Also" items:
**   - shared cache: two connections on a database that does not exist yet
**     (and on one that does), a write on the first, a read on the second,
**     in both journal modes; each case runs in a child process with a
**     generous deadline, so a hang fails the test instead of ctest;
**   - WAL with locking_mode=EXCLUSIVE entered after the shared index exists
**     (the issue's sequence), exclusive before WAL, every checkpoint kind,
**     then a reopen in normal mode;
**   - sqlite3_backup from a source without the reserved bytes into a tde
**     database fails cleanly (nothing written), and VACUUM INTO a tde URI
**     is what works instead;
**   - page 1 kept per handle, and the other header slot's check, under
**     allocation failures: a failed check never passes silently.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>
#include "sqlite-tde.h"
#include "vfs/vfs_int.h"
#include "tdetest.h"

static int openCfg(const char *zPath, const char *zExtra, sqlite3 **pDb){
  char *zUri = sqlite3_mprintf("file:%s?vfs=tde&tde_config=%s%s", zPath, zCfg, zExtra ? zExtra : "");
  int rc;
  if( !zUri ){ *pDb = 0; return SQLITE_NOMEM; }
  rc = sqlite3_open_v2(zUri, pDb, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE|SQLITE_OPEN_URI, 0);
  sqlite3_free(zUri);
  return rc;
}

static sqlite3_int64 qint(sqlite3 *db, const char *zSql){
  sqlite3_stmt *p = 0;
  sqlite3_int64 v = -1;
  if( sqlite3_prepare_v2(db, zSql, -1, &p, 0)==SQLITE_OK && sqlite3_step(p)==SQLITE_ROW ){
    v = sqlite3_column_int64(p, 0);
  }
  sqlite3_finalize(p);
  return v;
}

/* ---- bug 3: shared cache ------------------------------------------------ */

/* The child's body: 0 on success, else a number naming the failed step
** (said on stderr). */
/* Shared cache and ATTACH of a new database on two connections: the
** reserve request the shim makes itself (no auto-extension reaches an
** ATTACH) while another connection shares the file. */
static int sharedAttachChild(const char *zPath, int bWal){
  char zMain[PATH_MAX + 8], zSql[4*PATH_MAX];
  sqlite3 *a = 0, *b = 0;
  char *zErr = 0;
  int rc;
  snprintf(zMain, sizeof(zMain), "%s-main", zPath);
  if( sqlite3_enable_shared_cache(1)!=SQLITE_OK ) return 21;
  if( openCfg(zMain, "&cache=shared", &a)!=SQLITE_OK ) return 22;
  if( openCfg(zMain, "&cache=shared", &b)!=SQLITE_OK ) return 23;
  snprintf(zSql, sizeof(zSql), "ATTACH 'file:%s?vfs=tde&cache=shared&tde_config=%s' AS aux", zPath, zCfg);
  if( sqlite3_exec(a, zSql, 0, 0, &zErr) ){ fprintf(stderr, "attach a: %s\n", zErr); return 24; }
  if( sqlite3_exec(b, zSql, 0, 0, &zErr) ){ fprintf(stderr, "attach b: %s\n", zErr); return 25; }
  if( bWal && sqlite3_exec(a, "PRAGMA aux.journal_mode=WAL", 0, 0, &zErr) ){ fprintf(stderr, "wal: %s\n", zErr); return 26; }
  rc = sqlite3_exec(a, "CREATE TABLE aux.abc(a,b,c); INSERT INTO aux.abc VALUES(1,2,3)", 0, 0, &zErr);
  if( rc ){ fprintf(stderr, "write: rc=%d %s\n", rc, zErr); return 27; }
  if( qint(b, "SELECT a+b+c FROM aux.abc")!=6 ){ fprintf(stderr, "read: %s\n", sqlite3_errmsg(b)); return 28; }
  sqlite3_close(b);
  sqlite3_close(a);
  sqlite3_enable_shared_cache(0);
  if( openCfg(zPath, 0, &a)!=SQLITE_OK ) return 29;
  if( qint(a, "SELECT count(*) FROM abc")!=1 || !integrityOk(a) ){ sqlite3_close(a); return 30; }
  sqlite3_close(a);
  removeDb(zMain);
  return 0;
}

static int sharedCacheChild(const char *zPath, int bWal, int bExisting){
  sqlite3 *a = 0, *b = 0;
  char *zErr = 0;
  int rc;
  if( bExisting==2 ) return sharedAttachChild(zPath, bWal);
  if( bExisting ){
    sqlite3 *c = 0;
    if( openCfg(zPath, 0, &c)!=SQLITE_OK ) return 1;
    rc = sqlite3_exec(c, bWal ? "PRAGMA journal_mode=WAL; CREATE TABLE pre(x); INSERT INTO pre VALUES(7)"
                              : "CREATE TABLE pre(x); INSERT INTO pre VALUES(7)", 0, 0, &zErr);
    sqlite3_close(c);
    if( rc ){ fprintf(stderr, "pre: %s\n", zErr); return 2; }
  }
  if( sqlite3_enable_shared_cache(1)!=SQLITE_OK ) return 3;
  if( openCfg(zPath, "&cache=shared", &a)!=SQLITE_OK ) return 4;
  if( openCfg(zPath, "&cache=shared", &b)!=SQLITE_OK ) return 5;
  if( bWal && !bExisting ){
    rc = sqlite3_exec(a, "PRAGMA journal_mode=WAL", 0, 0, &zErr);
    if( rc ){ fprintf(stderr, "wal: %s\n", zErr); return 6; }
  }
  rc = sqlite3_exec(a, "CREATE TABLE abc(a,b,c); INSERT INTO abc VALUES(1,2,3)", 0, 0, &zErr);
  if( rc ){ fprintf(stderr, "write: rc=%d %s\n", rc, zErr); return 7; }
  if( qint(b, "SELECT a+b+c FROM abc")!=6 ){ fprintf(stderr, "read: %s\n", sqlite3_errmsg(b)); return 8; }
  if( bExisting && qint(b, "SELECT x FROM pre")!=7 ) return 9;
  sqlite3_close(b);
  sqlite3_close(a);
  sqlite3_enable_shared_cache(0);
  /* And without the shared cache: the data is there, encrypted. */
  if( openCfg(zPath, 0, &a)!=SQLITE_OK ) return 11;
  if( qint(a, "SELECT count(*) FROM abc")!=1 ){ sqlite3_close(a); return 12; }
  if( !integrityOk(a) ){ sqlite3_close(a); return 13; }
  sqlite3_close(a);
  {
    size_t n = 0;
    unsigned char *z = readAll(zPath, &n);
    if( !z || n<=TDE_HEADER_BYTES ) return 14;
    if( memcmp(z + TDE_HEADER_BYTES, "SQLite format 3", 15)==0 ){ free(z); return 15; }
    free(z);
  }
  return 0;
}

/* Run the case in a child; the parent waits up to 60 s (a loaded 2-core
** machine finishes it in well under a second), then kills it. */
static void sharedCacheCase(int bWal, int bExisting){
  char zPath[PATH_MAX], zName[64];
  pid_t pid;
  int status = 0, bDone = 0;
  snprintf(zName, sizeof(zName), "shared-%s-%d.db", bWal ? "wal" : "delete", bExisting);
  pathOf(zPath, zName);
  removeDb(zPath);
  fflush(stdout); fflush(stderr);
  pid = fork();
  assert_true(pid>=0);
  if( pid==0 ) _exit(sharedCacheChild(zPath, bWal, bExisting));
  for(int i=0; i<600 && !bDone; i++){
    pid_t r = waitpid(pid, &status, WNOHANG);
    assert_true(r>=0);
    if( r==pid ) bDone = 1;
    else usleep(100000);
  }
  if( !bDone ){
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    fail_msg("shared cache, %s, %s database: no answer after 60 s (a hang)",
             bWal ? "WAL" : "rollback", bExisting==2 ? "attached new" : bExisting ? "existing" : "new");
  }
  if( !WIFEXITED(status) || WEXITSTATUS(status)!=0 ){
    fail_msg("shared cache, %s, %s database: child failed (exit %d, signal %d)",
             bWal ? "WAL" : "rollback", bExisting==2 ? "attached new" : bExisting ? "existing" : "new",
             WIFEXITED(status) ? WEXITSTATUS(status) : -1, WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  }
  removeDb(zPath);
}

static void test_shared_cache_new_rollback(void **state){ (void)state; sharedCacheCase(0, 0); }
static void test_shared_cache_new_wal(void **state){ (void)state; sharedCacheCase(1, 0); }
static void test_shared_cache_existing_rollback(void **state){ (void)state; sharedCacheCase(0, 1); }
static void test_shared_cache_existing_wal(void **state){ (void)state; sharedCacheCase(1, 1); }
static void test_shared_cache_attach_rollback(void **state){ (void)state; sharedCacheCase(0, 2); }
static void test_shared_cache_attach_wal(void **state){ (void)state; sharedCacheCase(1, 2); }

/* ---- bug 4: WAL with locking_mode=EXCLUSIVE ------------------------------ */

static void reopenCheck(const char *zPath, const char *zWhat, sqlite3_int64 nT2){
  sqlite3 *db = 0;
  assert_int_equal(openCfg(zPath, 0, &db), SQLITE_OK);
  {
    sqlite3_int64 n = qint(db, "SELECT count(*) FROM t2");
    if( n!=nT2 ) fail_msg("[%s] reopened: t2 has %lld rows, expected %lld: %s", zWhat,
                          (long long)n, (long long)nT2, sqlite3_errmsg(db));
  }
  assert_int_equal(qint(db, "SELECT count(*) FROM t1"), 0);
  if( !integrityOk(db) ) fail_msg("[%s] integrity check after reopen", zWhat);
  /* A write in normal mode, then once more from scratch. */
  execTagged(zWhat, db, "INSERT INTO t2 VALUES(5,6)");
  sqlite3_close(db);
  assert_int_equal(openCfg(zPath, 0, &db), SQLITE_OK);
  assert_int_equal(qint(db, "SELECT count(*) FROM t2"), nT2 + 1);
  sqlite3_close(db);
}

/* The issue's sequence. */
static void test_wal_exclusive_issue(void **state){
  char zPath[PATH_MAX];
  sqlite3 *db = 0;
  (void)state;
  pathOf(zPath, "walx-issue.db");
  removeDb(zPath);
  assert_int_equal(openCfg(zPath, 0, &db), SQLITE_OK);
  exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE t1(a,b); PRAGMA locking_mode=exclusive; "
           "CREATE TABLE t2(a,b); PRAGMA wal_checkpoint; INSERT INTO t2 VALUES(3,4);");
  sqlite3_close(db);
  reopenCheck(zPath, "issue", 1);
  removeDb(zPath);
}

/* Every checkpoint kind, exclusive mode entered after the shared index
** exists or before WAL, several writes between checkpoints. */
static void test_wal_exclusive_checkpoints(void **state){
  static const char *const azCkpt[] = { "PASSIVE", "FULL", "RESTART", "TRUNCATE" };
  (void)state;
  for(int bBefore=0; bBefore<2; bBefore++){
    for(size_t k=0; k<TDE_ARRAY_SIZE(azCkpt); k++){
      char zPath[PATH_MAX], zSql[256], zWhat[64];
      sqlite3 *db = 0;
      snprintf(zWhat, sizeof(zWhat), "%s %s", bBefore ? "exclusive-first" : "wal-first", azCkpt[k]);
      pathOf(zPath, "walx-ckpt.db");
      removeDb(zPath);
      assert_int_equal(openCfg(zPath, 0, &db), SQLITE_OK);
      if( bBefore ){
        execTagged(zWhat, db, "PRAGMA locking_mode=exclusive; PRAGMA journal_mode=WAL; CREATE TABLE t1(a,b)");
      }else{
        execTagged(zWhat, db, "PRAGMA journal_mode=WAL; CREATE TABLE t1(a,b); PRAGMA locking_mode=exclusive");
      }
      execTagged(zWhat, db, "CREATE TABLE t2(a,b)");
      snprintf(zSql, sizeof(zSql), "PRAGMA wal_checkpoint(%s)", azCkpt[k]);
      execTagged(zWhat, db, zSql);
      execTagged(zWhat, db, "INSERT INTO t2 VALUES(3,4)");
      execTagged(zWhat, db, "CREATE INDEX t2a ON t2(a); INSERT INTO t2 SELECT a+1, b FROM t2");
      execTagged(zWhat, db, zSql);
      execTagged(zWhat, db, "INSERT INTO t2 VALUES(9,9)");
      execTagged(zWhat, db, zSql);
      execTagged(zWhat, db, "DELETE FROM t2 WHERE a=4");
      assert_int_equal(qint(db, "SELECT count(*) FROM t2"), 2);
      sqlite3_close(db);
      reopenCheck(zPath, zWhat, 2);
      removeDb(zPath);
    }
  }
}

/* Exclusive mode left again (locking_mode=normal) while the log lives on,
** then another connection. */
static void test_wal_exclusive_then_normal(void **state){
  char zPath[PATH_MAX];
  sqlite3 *db = 0, *db2 = 0;
  (void)state;
  pathOf(zPath, "walx-normal.db");
  removeDb(zPath);
  assert_int_equal(openCfg(zPath, 0, &db), SQLITE_OK);
  exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE t1(a,b); PRAGMA locking_mode=exclusive; "
           "CREATE TABLE t2(a,b); PRAGMA wal_checkpoint; INSERT INTO t2 VALUES(3,4);");
  exec(db, "PRAGMA locking_mode=normal; SELECT count(*) FROM t2");
  exec(db, "INSERT INTO t2 VALUES(4,5); PRAGMA wal_checkpoint(RESTART); INSERT INTO t2 VALUES(6,7)");
  assert_int_equal(openCfg(zPath, 0, &db2), SQLITE_OK);
  assert_int_equal(qint(db2, "SELECT count(*) FROM t2"), 3);
  sqlite3_close(db2);
  sqlite3_close(db);
  reopenCheck(zPath, "exclusive-then-normal", 3);
  removeDb(zPath);
}

/* ---- Also: sqlite3_backup into a tde database --------------------------- */

/* A source without 48 reserved bytes cannot be backed up into a tde
** database (SQLite's backup copies pages as they are, reserve included):
** the step fails, nothing is written in plaintext, the destination stays
** usable.  VACUUM INTO a tde URI copies it instead. */
static void test_backup_from_plain_source(void **state){
  char zDst[PATH_MAX], zDst2[PATH_MAX], zSql[3*PATH_MAX];
  sqlite3 *src = 0, *dst = 0;
  sqlite3_backup *pB;
  int rc;
  (void)state;
  pathOf(zDst, "backup-dst.db");
  pathOf(zDst2, "vacuum-into.db");
  removeDb(zDst);
  removeDb(zDst2);
  /* URI filenames on: VACUUM INTO takes a URI only then (Debian's SQLite
  ** enables them at build time, 3.53's default does not). */
  assert_int_equal(sqlite3_open_v2(":memory:", &src, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE|SQLITE_OPEN_URI, 0),
                   SQLITE_OK);
  exec(src, "CREATE TABLE t(a); INSERT INTO t VALUES('backup-secret')");
  assert_int_equal(openCfg(zDst, 0, &dst), SQLITE_OK);
  pB = sqlite3_backup_init(dst, "main", src, "main");
  assert_non_null(pB);
  rc = sqlite3_backup_step(pB, -1);
  sqlite3_backup_finish(pB);
  printf("# backup from :memory: into tde: rc=%d\n", rc);
  assert_int_equal(rc, SQLITE_IOERR_WRITE);
  sqlite3_close(dst);
  {
    size_t n = 0;
    unsigned char *z = readAll(zDst, &n);
    for(size_t i=0; z && i+13<=n; i++){
      if( memcmp(z+i, "backup-secret", 13)==0 ) fail_msg("plaintext in the backup destination");
    }
    free(z);
  }
  /* The same from a plaintext file. */
  {
    char zPlain[PATH_MAX];
    sqlite3 *plain = 0;
    pathOf(zPlain, "plain-src.db");
    removeDb(zPlain);
    assert_int_equal(sqlite3_open_v2(zPlain, &plain, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE, "unix"), SQLITE_OK);
    exec(plain, "CREATE TABLE t(a); INSERT INTO t VALUES('backup-secret')");
    assert_int_equal(openCfg(zDst, 0, &dst), SQLITE_OK);
    pB = sqlite3_backup_init(dst, "main", plain, "main");
    assert_non_null(pB);
    rc = sqlite3_backup_step(pB, -1);
    sqlite3_backup_finish(pB);
    printf("# backup from a plaintext file into tde: rc=%d\n", rc);
    assert_int_equal(rc, SQLITE_IOERR_WRITE);
    sqlite3_close(dst);
    sqlite3_close(plain);
    removeDb(zPlain);
  }
  /* What to use instead: VACUUM INTO a tde URI. */
  snprintf(zSql, sizeof(zSql), "VACUUM INTO 'file:%s?vfs=tde&tde_config=%s'", zDst2, zCfg);
  exec(src, zSql);
  sqlite3_close(src);
  assert_int_equal(openCfg(zDst2, 0, &dst), SQLITE_OK);
  assert_int_equal(qint(dst, "SELECT count(*) FROM t WHERE a='backup-secret'"), 1);
  assert_true(integrityOk(dst));
  /* And a tde source backs up into a tde destination page by page. */
  assert_int_equal(openCfg(zDst, 0, &src), SQLITE_OK);
  pB = sqlite3_backup_init(src, "main", dst, "main");
  assert_non_null(pB);
  assert_int_equal(sqlite3_backup_step(pB, -1), SQLITE_DONE);
  assert_int_equal(sqlite3_backup_finish(pB), SQLITE_OK);
  assert_int_equal(qint(src, "SELECT count(*) FROM t WHERE a='backup-secret'"), 1);
  sqlite3_close(src);
  sqlite3_close(dst);
  removeDb(zDst);
  removeDb(zDst2);
}

/* ---- Also: allocations the shim must not treat as optional --------------- */

#include "mallocfault.h"       /* the failing allocator (armed only in this test) */

/* Install or remove the failing allocator (SQLite re-initialised, tde
** registered again: sqlite3_shutdown() drops its auto-extension). */
static int bFaultInstalled;
static void mfInstall(int bOn){
  mf.bArmed = 0;
  assert_int_equal(sqlite3_shutdown(), SQLITE_OK);
  if( bOn ){
    assert_int_equal(sqlite3_config(SQLITE_CONFIG_GETMALLOC, &memOrig), SQLITE_OK);
    assert_int_equal(sqlite3_config(SQLITE_CONFIG_MALLOC, &memFault), SQLITE_OK);
  }else{
    assert_int_equal(sqlite3_config(SQLITE_CONFIG_MALLOC, &memOrig), SQLITE_OK);
  }
  bFaultInstalled = bOn;
  assert_int_equal(sqlite3_initialize(), SQLITE_OK);
  assert_int_equal(tde_register(0), TDE_OK);
}
/* Teardown: a failed test leaves no failing allocator behind. */
static int mfTeardown(void **state){
  (void)state;
  tde_set_log(quietLog, 0);
  if( bFaultInstalled ) mfInstall(0);
  return 0;
}

static int nSlotWarnings;
static void slotLog(void *pArg, int level, const char *zMsg){
  (void)pArg; (void)level;
  if( strstr(zMsg, "header slot") && strstr(zMsg, "is damaged") ) nSlotWarnings++;
}

/* A database whose second header slot is damaged opens from the good one
** and says so (the next write transaction rewrites the slot).  With every
** sqlite3_malloc failed in turn: an open and read that succeed have said
** so too -- the check of the other slot never passes silently because its
** buffer could not be had. */
static void test_other_slot_check_under_malloc_faults(void **state){
  char zPath[PATH_MAX];
  sqlite3 *db = 0;
  unsigned char *a;
  size_t n = 0;
  int nOk = 0, nFail = 0, N;
  (void)state;
  pathOf(zPath, "slot.db");
  removeDb(zPath);
  assert_int_equal(openCfg(zPath, 0, &db), SQLITE_OK);
  exec(db, "CREATE TABLE t(a); INSERT INTO t VALUES('slot')");
  sqlite3_close(db);
  a = readAll(zPath, &n);
  assert_non_null(a);
  assert_true(n > TDE_HEADER_BYTES);
  a[TDE_SLOT_SIZE + 200] ^= 0x5a;          /* inside slot 1's fields: its digest fails */
  writeAll(zPath, a, n);
  free(a);

  mfInstall(1);
  tde_set_log(slotLog, 0);
  for(N=1; N<5000; N++){
    int rc, bOk;
    nSlotWarnings = 0;
    mf.iCountdown = N; mf.bFired = 0; mf.bArmed = 1;
    rc = openCfg(zPath, 0, &db);
    bOk = rc==SQLITE_OK && qint(db, "SELECT count(*) FROM t WHERE a='slot'")==1;
    mf.bArmed = 0;
    sqlite3_close(db);
    db = 0;
    if( bOk ){
      nOk++;
      if( nSlotWarnings==0 ) fail_msg("malloc %d failed: the open succeeded without checking the other header slot", N);
    }else{
      nFail++;
    }
    if( !mf.bFired ) break;                 /* past the last allocation */
  }
  tde_set_log(quietLog, 0);
  printf("# %d allocations: %d opens succeeded (each reported the damaged slot), %d failed\n", N, nOk, nFail);
  assert_true(N<5000);
  assert_true(nFail>0);
  mfInstall(0);
  /* Without faults: the damaged slot is reported, and rewritten by a write. */
  nSlotWarnings = 0;
  tde_set_log(slotLog, 0);
  assert_int_equal(openCfg(zPath, 0, &db), SQLITE_OK);
  exec(db, "INSERT INTO t VALUES('repair')");
  sqlite3_close(db);
  assert_true(nSlotWarnings>0);
  nSlotWarnings = 0;
  assert_int_equal(openCfg(zPath, 0, &db), SQLITE_OK);
  assert_int_equal(qint(db, "SELECT count(*) FROM t"), 2);
  sqlite3_close(db);
  tde_set_log(quietLog, 0);
  assert_int_equal(nSlotWarnings, 0);
  removeDb(zPath);
}

/* Page 1 kept per handle is optional by construction (page1.c): with its
** allocation failed, every partial read of page 1 reads and authenticates
** the whole page, so a page 1 changed on disk behind the handle is still
** refused.  Checked here with the copy's allocation failed at every N. */
static void test_page1_copy_under_malloc_faults(void **state){
  char zPath[PATH_MAX];
  sqlite3 *db = 0;
  int N, nOk = 0;
  (void)state;
  pathOf(zPath, "page1.db");
  removeDb(zPath);
  assert_int_equal(openCfg(zPath, 0, &db), SQLITE_OK);
  exec(db, "CREATE TABLE t(a); INSERT INTO t VALUES('p1')");
  sqlite3_close(db);
  mfInstall(1);
  for(N=1; N<5000; N++){
    int rc;
    mf.iCountdown = N; mf.bFired = 0; mf.bArmed = 1;
    rc = openCfg(zPath, 0, &db);
    if( rc==SQLITE_OK ){
      sqlite3_int64 v = qint(db, "SELECT count(*) FROM t");
      mf.bArmed = 0;
      if( v==1 ){
        /* Whatever was kept, a second read in a new transaction agrees. */
        nOk++;
        if( qint(db, "SELECT count(*) FROM t WHERE a='p1'")!=1 ) fail_msg("malloc %d: second read", N);
      }
    }
    mf.bArmed = 0;
    sqlite3_close(db);
    db = 0;
    if( !mf.bFired ) break;
  }
  printf("# page 1 copy: %d allocations, %d opens read back\n", N, nOk);
  assert_true(N<5000);
  assert_true(nOk>0);
  mfInstall(0);
  removeDb(zPath);
}

static int groupSetup(void **state){
  (void)state;
  return tdetestGroupSetup("r3lock", 0);
}
static int groupTeardown(void **state){
  (void)state;
  tdetestScratchRemove();
  return 0;
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_shared_cache_new_rollback),
    cmocka_unit_test(test_shared_cache_new_wal),
    cmocka_unit_test(test_shared_cache_existing_rollback),
    cmocka_unit_test(test_shared_cache_existing_wal),
    cmocka_unit_test(test_shared_cache_attach_rollback),
    cmocka_unit_test(test_shared_cache_attach_wal),
    cmocka_unit_test(test_wal_exclusive_issue),
    cmocka_unit_test(test_wal_exclusive_checkpoints),
    cmocka_unit_test(test_wal_exclusive_then_normal),
    cmocka_unit_test(test_backup_from_plain_source),
    cmocka_unit_test_teardown(test_other_slot_check_under_malloc_faults, mfTeardown),
    cmocka_unit_test_teardown(test_page1_copy_under_malloc_faults, mfTeardown),
  };
  return cmocka_run_group_tests_name("r3_lock", tests, groupSetup, groupTeardown);
}
