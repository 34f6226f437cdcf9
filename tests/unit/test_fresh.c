/*
** Issue 14 (format version 2, freshness) tests.
**
** Stale but authentic data (docs/FORMAT.md "Format version 2"), each case
** run on a version-1 database (where the replay works: the test asserts
** the stale rows come back, as the issue reproduced) and on a version-2
** one (where it is refused with SQLITE_IOERR_AUTH and tde_last_error()
** naming the file), and each time the database opens cleanly once the
** stale file is moved aside:
**
**  - case 1: an old -wal copied back after later commits and checkpoints;
**  - case 2: frames of a rolled-back transaction written back over the
**    frames of the transaction that committed after it;
**  - case 4: the header region saved during a rekey put back after it
**    finished, with the pages from before the rekey (a version-1 database
**    is upgraded by the rekey, so it is refused too); and the header
**    region saved before a master-key rotation put back right after it,
**    before any write (the rotation sealed page 1 again).
**
** Upgrade: version-1 databases (made by this build's version-1 path, and
** by main's code at 0ad65da: tests/fixtures/v1-0ad65da) open, are moved to
** version 2 in place by tde_db_upgrade_to(db, "main", 2) (in the format-3
** twin too: these cases are about version 2; the move to 3 is
** test_r7_f3up's), verify, and then refuse a stale WAL like any version-2
** database; tde_status shows format_version and
** freshness.
**
** Nonce hardening (docs/FORMAT.md "Nonce uniqueness"):
**
**  - a child made by a raw clone() (no atfork handler runs) must not
**    continue its parent's sealing session: the getpid() check;
**  - session counters start at a random 64-bit value, never 0 in
**    practice, and a session ends after 2^32 seals;
**  - tde_status counts the sessions a connection's handles start under the
**    current data key (one per write transaction's journal in rollback
**    mode, one per WAL handle in WAL mode) against the 2^48 limit.
**
** Each assertion fails on the code before this change: it continued the
** session in a raw-clone child, started every counter at 0, and had no
** session count.
*/
#include "tdetest.h"

#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "tde_int.h"
#include "cipher/cipher.h"
#include "keys/keys.h"

#define NROW 600
#define PGSZ 4096
#include "freshtest.h"

static const uint8_t aTestDek[32] = {
  0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x00,
  0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10
};

static sqlite3_int64 queryInt64(sqlite3 *db, const char *zSql){
  sqlite3_stmt *p = 0;
  sqlite3_int64 v = -1;
  if( sqlite3_prepare_v2(db, zSql, -1, &p, 0)!=SQLITE_OK ) fail_msg("%s: %s", zSql, sqlite3_errmsg(db));
  if( sqlite3_step(p)==SQLITE_ROW && sqlite3_column_type(p, 0)!=SQLITE_NULL ) v = sqlite3_column_int64(p, 0);
  sqlite3_finalize(p);
  return v;
}

/* A child of clone() without CLONE_* sharing flags, made by the raw system
** call so glibc's fork handlers (pthread_atfork) never run in it. */
static pid_t rawClone(void){
  return (pid_t)syscall(SYS_clone, (unsigned long)SIGCHLD, 0UL, 0UL, 0UL, 0UL);
}

static void test_raw_clone_new_session(void **state){
  TdePageCipher *p = NULL;
  uint8_t data[32] = {0}, tBefore[TDE_TRAILER_SIZE], tChild[TDE_TRAILER_SIZE];
  uint8_t tParent[TDE_TRAILER_SIZE];
  int aPipe[2], status = 0;
  pid_t pid;
  (void)state;
  assert_int_equal(tdePageCipherNew(aTestDek, 1, &p), TDE_OK);
  assert_int_equal(tdePageSeal(p, NULL, 0, data, sizeof(data), data, tBefore), TDE_OK);
  assert_int_equal(pipe(aPipe), 0);
  pid = rawClone();
  assert_true(pid>=0);
  if( pid==0 ){
    uint8_t t[TDE_TRAILER_SIZE];
    int ok = tdePageSeal(p, NULL, 0, data, sizeof(data), data, t)==TDE_OK
          && write(aPipe[1], t, sizeof(t))==(ssize_t)sizeof(t);
    _exit(ok ? 0 : 1);
  }
  close(aPipe[1]);
  assert_int_equal(read(aPipe[0], tChild, sizeof(tChild)), (ssize_t)sizeof(tChild));
  close(aPipe[0]);
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status)==0);

  /* The child started its own session: another salt, another counter. */
  assert_memory_not_equal(tChild, tBefore, 12);
  assert_true(tdeGet64(tChild + 16)!=tdeGet64(tBefore + 16) + 1);
  /* The parent continues its own. */
  assert_int_equal(tdePageSeal(p, NULL, 0, data, sizeof(data), data, tParent), TDE_OK);
  assert_memory_equal(tParent, tBefore, 12);
  assert_int_equal(tdeGet64(tParent + 16), tdeGet64(tBefore + 16) + 1);
  assert_int_equal(tdePageCipherSessions(p), 1);
  tdePageCipherFree(p);
}

/* 64 sessions: counter starts are random (pairwise distinct, none 0), the
** IV's top 32 bits are 0 in format version 1, salts pairwise distinct. */
static void test_random_counter_start(void **state){
  enum { N = 64 };
  uint8_t aT[N][TDE_TRAILER_SIZE];
  uint8_t data[16] = {0};
  (void)state;
  for(int i=0; i<N; i++){
    TdePageCipher *p = NULL;
    assert_int_equal(tdePageCipherNew(aTestDek, 1, &p), TDE_OK);
    assert_int_equal(tdePageSeal(p, NULL, 0, data, sizeof(data), data, aT[i]), TDE_OK);
    tdePageCipherFree(p);
    assert_int_equal(tdeGet32(aT[i] + 12), 0);
    assert_true(tdeGet64(aT[i] + 16)!=0);
    for(int j=0; j<i; j++){
      assert_memory_not_equal(aT[i], aT[j], 12);
      assert_true(tdeGet64(aT[i] + 16)!=tdeGet64(aT[j] + 16));
    }
  }
}

/* After 2^32 seals a session ends: the next seal has a new salt and a new
** random counter start, and still opens. */
static void test_session_cap(void **state){
  TdePageCipher *p = NULL;
  uint8_t data[40], t1[TDE_TRAILER_SIZE], t2[TDE_TRAILER_SIZE], t3[TDE_TRAILER_SIZE], out[40];
  (void)state;
  memset(data, 0x5a, sizeof(data));
  assert_int_equal(tdePageCipherNew(aTestDek, 1, &p), TDE_OK);
  assert_int_equal(tdePageSeal(p, NULL, 0, data, sizeof(data), out, t1), TDE_OK);
  tdePageCipherAgeSession(p, ((uint64_t)1 << 32) - 1);
  assert_int_equal(tdePageSeal(p, NULL, 0, data, sizeof(data), out, t2), TDE_OK);
  assert_memory_equal(t1, t2, 12);                       /* seal 2^32: same session */
  assert_int_equal(tdePageCipherSessions(p), 1);
  assert_int_equal(tdePageSeal(p, NULL, 0, data, sizeof(data), out, t3), TDE_OK);
  assert_memory_not_equal(t3, t2, 12);                   /* seal 2^32 + 1: a new one */
  assert_true(tdeGet64(t3 + 16)!=tdeGet64(t2 + 16) + 1);
  assert_int_equal(tdePageCipherSessions(p), 2);
  {
    uint8_t back[40];
    assert_int_equal(tdePageOpen(p, NULL, 0, out, sizeof(data), t3, back), TDE_OK);
    assert_memory_equal(back, data, sizeof(data));
  }
  tdePageCipherFree(p);
}

/* tde_status: sessions counted as FORMAT.md's bound counts them. */
static void test_status_sessions(void **state){
  char zDb[PATH_MAX];
  sqlite3 *db = 0;
  sqlite3_int64 n0, n1;
  (void)state;

  /* Rollback mode: the journal seals in the connection's main-handle
  ** session, so write transactions start no new session. */
  pathOf(zDb, "sessions-delete.db");
  removeDb(zDb);
  assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
  exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b BLOB);"
           "INSERT INTO t VALUES(1, randomblob(3000)), (2, randomblob(3000));");
  assert_int_equal(queryInt64(db, "SELECT nonce_session_limit FROM tde_status WHERE schema='main'"),
                   (sqlite3_int64)1 << 48);
  n0 = queryInt64(db, "SELECT nonce_sessions FROM tde_status WHERE schema='main'");
  assert_true(n0>=1);
  for(int i=0; i<5; i++) exec(db, "UPDATE t SET b=randomblob(3000) WHERE a=1");
  n1 = queryInt64(db, "SELECT nonce_sessions FROM tde_status WHERE schema='main'");
  assert_int_equal(n1 - n0, 0);
  {
    /* The PRAGMA says the same. */
    sqlite3_stmt *p = 0;
    char zWant[64];
    snprintf(zWant, sizeof(zWant), "nonce_sessions=%lld nonce_session_limit=%lld",
             (long long)n1, (long long)1 << 48);
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA tde_status", -1, &p, 0), SQLITE_OK);
    assert_int_equal(sqlite3_step(p), SQLITE_ROW);
    assert_non_null(strstr((const char*)sqlite3_column_text(p, 0), zWant));
    sqlite3_finalize(p);
  }
  sqlite3_close(db);

  /* WAL mode: the WAL handle's session lasts; transactions add none. */
  pathOf(zDb, "sessions-wal.db");
  removeDb(zDb);
  assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
  exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE t(a INTEGER PRIMARY KEY, b BLOB);"
           "INSERT INTO t VALUES(1, randomblob(3000));");
  n0 = queryInt64(db, "SELECT nonce_sessions FROM tde_status WHERE schema='main'");
  assert_true(n0>=1);
  for(int i=0; i<5; i++) exec(db, "UPDATE t SET b=randomblob(3000) WHERE a=1");
  n1 = queryInt64(db, "SELECT nonce_sessions FROM tde_status WHERE schema='main'");
  assert_int_equal(n1, n0);
  sqlite3_close(db);
}

/* ---- stale WAL (cases 1 and 2) --------------------------------------------- */

static void dbSide(char *zOut, const char *zDb, const char *zSuffix){
  if( snprintf(zOut, PATH_MAX, "%s%s", zDb, zSuffix)>=PATH_MAX ) fail_msg("path too long");
}

/* A connection that leaves -wal in place when it closes. */
static void closeKeepWal(sqlite3 *db){
  sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int*)0);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/*
** Case 1.  The -wal holding balance=999 is saved; later commits set it to
** 0, checkpoints restart the log; the old -wal is copied back and -shm
** removed.  bV2 0: the old balance reads again (the attack works on
** version 1).  bV2 1: refused, naming the WAL; moved aside, the database
** opens at its last checkpoint with balance 0.
*/
static void oldWalCase(int bV2){
  char zDb[PATH_MAX], zWal[PATH_MAX], zShm[PATH_MAX], zSaved[PATH_MAX];
  sqlite3 *db = 0;
  sqlite3_int64 v = 0;
  int rc;
  tdeSetCreateVersion(bV2 ? tdetestNewFormat() : TDE_FORMAT_V1);
  pathOf(zDb, bV2 ? "oldwal-v2.db" : "oldwal-v1.db");
  dbSide(zWal, zDb, "-wal");
  dbSide(zShm, zDb, "-shm");
  dbSide(zSaved, zDb, "-wal.saved");
  removeDb(zDb);
  assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
  exec(db, "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;"
           "CREATE TABLE acct(id INTEGER PRIMARY KEY, balance INT);"
           "INSERT INTO acct VALUES(1, 999);");
  fileCopy(zWal, zSaved);                        /* the attacker's copy */
  exec(db, "UPDATE acct SET balance=0 WHERE id=1; INSERT INTO acct VALUES(2, 5);");
  exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  exec(db, "INSERT INTO acct VALUES(3, 7)");     /* a new generation */
  exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  assert_int_equal(sqlite3_close(db), SQLITE_OK);

  fileCopy(zSaved, zWal);
  unlink(zShm);
  assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
  sqlite3_extended_result_codes(db, 1);
  rc = stepInt(db, "SELECT balance FROM acct WHERE id=1", &v);
  if( !bV2 ){
    assert_int_equal(rc, SQLITE_OK);
    assert_int_equal(v, 999);                    /* stale, and authentic in version 1 */
    assert_int_equal(stepInt(db, "SELECT count(*) FROM acct", &v), SQLITE_OK);
    assert_int_equal(v, 1);                      /* the later rows are gone */
    closeKeepWal(db);
    tdeSetCreateVersion(tdetestNewFormat());
    return;
  }
  assert_int_equal(rc, SQLITE_IOERR_AUTH);
  assert_int_equal(sqlite3_extended_errcode(db), SQLITE_IOERR_AUTH);
  assert_non_null(strstr(tde_last_error(), zWal));
  assert_non_null(strstr(tde_last_error(), "older state"));
  assert_non_null(strstr(tde_last_error(), "move it aside"));
  closeKeepWal(db);
  {
    size_t n1 = 0, n2 = 0;       /* the refusal modified nothing */
    unsigned char *a1 = readAll(zWal, &n1), *a2 = readAll(zSaved, &n2);
    assert_true(a1 && a2 && n1==n2 && memcmp(a1, a2, n1)==0);
    free(a1); free(a2);
  }
  /* What to do: move it aside; the database opens at its last checkpoint. */
  assert_int_equal(rename(zWal, zSaved), 0);
  unlink(zShm);
  assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
  assert_int_equal(stepInt(db, "SELECT balance FROM acct WHERE id=1", &v), SQLITE_OK);
  assert_int_equal(v, 0);
  assert_int_equal(stepInt(db, "SELECT count(*) FROM acct", &v), SQLITE_OK);
  assert_int_equal(v, 3);
  assert_true(integrityOk(db));
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

static void test_case1_old_wal_v1(void **state){ (void)state; oldWalCase(0); }
static void test_case1_old_wal_v2(void **state){ (void)state; oldWalCase(1); }

#define FRAME_BYTES(P) (24 + (P))

/*
** Case 2.  T2 spills many frames and is rolled back; T3 commits over the
** same frames and beyond.  T2's frames are written back at their own
** indices and -shm removed.  Version 1: T2's values read as committed.
** Version 2: refused (the chain breaks at the first T3 frame after the
** splice while T3's commit frame still authenticates).
*/
static void splicedFramesCase(int bV2){
  char zDb[PATH_MAX], zWal[PATH_MAX], zShm[PATH_MAX];
  unsigned char *aT2 = 0, *aT3 = 0;
  size_t nT1 = 0, nT2 = 0, nT3 = 0;
  sqlite3 *db = 0;
  sqlite3_int64 v = 0;
  const size_t P = 4096;
  int rc;
  tdeSetCreateVersion(bV2 ? tdetestNewFormat() : TDE_FORMAT_V1);
  pathOf(zDb, bV2 ? "splice-v2.db" : "splice-v1.db");
  dbSide(zWal, zDb, "-wal");
  dbSide(zShm, zDb, "-shm");
  removeDb(zDb);
  assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
  exec(db, "PRAGMA page_size=4096; PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;"
           "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);"
           "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<600)"
           " INSERT INTO t SELECT i, printf('T1 %d %.900c', i, 'a') FROM c;");
  exec(db, "PRAGMA wal_checkpoint(TRUNCATE); INSERT INTO t VALUES(1000, 'T1 1000');");
  free(readAll(zWal, &nT1));
  assert_true(nT1>32);                           /* T2 and T3 share the generation */
  exec(db, "PRAGMA cache_size=4; BEGIN;"
           "UPDATE t SET v=printf('T2 %d %.900c', id, 'b') WHERE id<=300;");
  exec(db, "ROLLBACK");
  aT2 = readAll(zWal, &nT2);
  exec(db, "UPDATE t SET v=printf('T3 %d %.900c', id, 'c')");
  closeKeepWal(db);
  aT3 = readAll(zWal, &nT3);
  assert_non_null(aT2);
  assert_non_null(aT3);
  assert_true(nT2>nT1 + 10*FRAME_BYTES(P));      /* T2 spilled */
  assert_true(nT3>nT2);                          /* T3 goes past T2's frames */
  memcpy(aT3 + nT1, aT2 + nT1, nT2 - nT1);       /* T2's frames at their own indices */
  writeAll(zWal, aT3, nT3);
  unlink(zShm);

  assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
  sqlite3_extended_result_codes(db, 1);
  rc = stepInt(db, "SELECT count(*) FROM t WHERE v LIKE 'T2 %'", &v);
  if( !bV2 ){
    assert_int_equal(rc, SQLITE_OK);
    assert_true(v>0);                            /* T2's values appear committed */
    closeKeepWal(db);
  }else{
    assert_int_equal(rc, SQLITE_IOERR_AUTH);
    assert_non_null(strstr(tde_last_error(), zWal));
    closeKeepWal(db);
    {
      size_t n = 0;              /* the refusal modified nothing */
      unsigned char *a = readAll(zWal, &n);
      assert_true(a && n==nT3 && memcmp(a, aT3, n)==0);
      free(a);
    }
    /* Moved aside: the database opens at its last checkpoint (T1). */
    unlink(zWal);
    unlink(zShm);
    assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
    assert_int_equal(stepInt(db, "SELECT count(*) FROM t WHERE v LIKE 'T1 %'", &v), SQLITE_OK);
    assert_int_equal(v, 600);
    assert_true(integrityOk(db));
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
  }
  free(aT2);
  free(aT3);
  tdeSetCreateVersion(tdetestNewFormat());
}

static void test_case2_spliced_frames_v1(void **state){ (void)state; splicedFramesCase(0); }
static void test_case2_spliced_frames_v2(void **state){ (void)state; splicedFramesCase(1); }

/* ---- upgrade from version 1 (item 6) --------------------------------------- */

static void statusFormat(sqlite3 *db, sqlite3_int64 *piVersion, char *zFresh, size_t nFresh){
  sqlite3_stmt *p = 0;
  *piVersion = -1;
  zFresh[0] = 0;
  assert_int_equal(sqlite3_prepare_v2(db, "SELECT format_version, freshness FROM tde_status WHERE schema='main'",
                                      -1, &p, 0), SQLITE_OK);
  assert_int_equal(sqlite3_step(p), SQLITE_ROW);
  *piVersion = sqlite3_column_int64(p, 0);
  snprintf(zFresh, nFresh, "%s", sqlite3_column_text(p, 1) ? (const char*)sqlite3_column_text(p, 1) : "");
  sqlite3_finalize(p);
}

/* Upgrade zDb (version 1, open through zConfig) in place and check it. */
static void upgradeAndCheck(const char *zDb, const char *zConfig, sqlite3_int64 nRows, const char *zSumSql,
                            sqlite3_int64 iSum){
  sqlite3 *db = 0;
  sqlite3_int64 v = 0;
  int64_t nChecked = 0, iBad = 0;
  char zFresh[8];
  assert_int_equal(openTdeCfg(zDb, zConfig, &db), SQLITE_OK);
  statusFormat(db, &v, zFresh, sizeof(zFresh));
  assert_int_equal(v, 1);
  assert_string_equal(zFresh, "off");
  assert_int_equal(tde_db_upgrade_to(db, "main", 2), TDE_OK);
  statusFormat(db, &v, zFresh, sizeof(zFresh));
  assert_int_equal(v, 2);
  assert_string_equal(zFresh, "on");
  assert_int_equal(tde_db_upgrade_to(db, "main", 2), TDE_OK);            /* again: nothing to do */
  assert_int_equal(stepInt(db, "SELECT count(*) FROM t", &v), SQLITE_OK);
  assert_int_equal(v, nRows);
  assert_int_equal(stepInt(db, zSumSql, &v), SQLITE_OK);
  assert_int_equal(v, iSum);
  assert_true(integrityOk(db));
  assert_int_equal(tde_verify(db, "main", &nChecked, &iBad, 0, 0), TDE_OK);
  assert_true(nChecked>0);
  /* It keeps working as version 2, and across a reopen. */
  exec(db, "INSERT INTO t(id, v) VALUES(100000, 'after the upgrade')");
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  assert_int_equal(openTdeCfg(zDb, zConfig, &db), SQLITE_OK);
  statusFormat(db, &v, zFresh, sizeof(zFresh));
  assert_int_equal(v, 2);
  assert_int_equal(stepInt(db, "SELECT count(*) FROM t", &v), SQLITE_OK);
  assert_int_equal(v, nRows + 1);
  assert_true(integrityOk(db));
  assert_int_equal(tde_verify(db, "main", &nChecked, &iBad, 0, 0), TDE_OK);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* A version-1 database (WAL mode, frames not yet checkpointed) made by
** this build's version-1 path: upgraded in place; then an old -wal put
** back is refused as on a database created as version 2. */
static void test_upgrade_v1_wal(void **state){
  char zDb[PATH_MAX], zWal[PATH_MAX], zShm[PATH_MAX], zSaved[PATH_MAX];
  sqlite3 *db = 0;
  sqlite3_int64 v = 0;
  (void)state;
  tdeSetCreateVersion(TDE_FORMAT_V1);
  pathOf(zDb, "upgrade-wal.db");
  dbSide(zWal, zDb, "-wal");
  dbSide(zShm, zDb, "-shm");
  dbSide(zSaved, zDb, "-wal.saved");
  removeDb(zDb);
  assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
  exec(db, "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;"
           "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);"
           "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<200)"
           " INSERT INTO t SELECT i, printf('row %d', i) FROM c;");
  closeKeepWal(db);                              /* frames left in the version-1 WAL */
  tdeSetCreateVersion(tdetestNewFormat());
  upgradeAndCheck(zDb, zCfg, 200, "SELECT sum(id) FROM t WHERE id<=200", 200*201/2);

  /* Freshness is on now: the case-1 replay is refused. */
  assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
  exec(db, "PRAGMA wal_autocheckpoint=0; UPDATE t SET v='old' WHERE id=1;");
  fileCopy(zWal, zSaved);
  exec(db, "UPDATE t SET v='new' WHERE id=1; PRAGMA wal_checkpoint(TRUNCATE);"
           "INSERT INTO t(id, v) VALUES(100001, 'x'); PRAGMA wal_checkpoint(TRUNCATE);");
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  fileCopy(zSaved, zWal);
  unlink(zShm);
  assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
  sqlite3_extended_result_codes(db, 1);
  assert_int_equal(stepInt(db, "SELECT count(*) FROM t WHERE v='old'", &v), SQLITE_IOERR_AUTH);
  closeKeepWal(db);
}

/* Rollback-journal mode: the same, without a WAL. */
static void test_upgrade_v1_delete(void **state){
  char zDb[PATH_MAX];
  sqlite3 *db = 0;
  (void)state;
  tdeSetCreateVersion(TDE_FORMAT_V1);
  pathOf(zDb, "upgrade-delete.db");
  removeDb(zDb);
  assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
  exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);"
           "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<300)"
           " INSERT INTO t SELECT i, printf('row %d %.500c', i, 'r') FROM c;");
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  tdeSetCreateVersion(tdetestNewFormat());
  upgradeAndCheck(zDb, zCfg, 300, "SELECT sum(id) FROM t WHERE id<=300", 300*301/2);
}

/* A version-1 database made by main's code (commit 0ad65da, fixture in
** tests/fixtures/v1-0ad65da with its wallet): opens, upgrades, verifies;
** in WAL mode with its frames still in the version-1 WAL. */
static void test_upgrade_fixture(void **state){
  static const char *azFile[] = { "fix.db", "fixwal.db", "fixwal.db-wal", "tde.conf", "w.tdew" };
  char zSrc[PATH_MAX], zDir[PATH_MAX], zFrom[PATH_MAX], zTo[PATH_MAX], zFixCfg[PATH_MAX];
  char *zSlash;
  (void)state;
  snprintf(zSrc, sizeof(zSrc), "%s", __FILE__);          /* .../tests/unit/test_fresh.c */
  zSlash = strrchr(zSrc, '/');
  assert_non_null(zSlash);
  *zSlash = 0;
  zSlash = strrchr(zSrc, '/');
  assert_non_null(zSlash);
  *zSlash = 0;                                         /* .../tests */
  pathOf(zDir, "fixture-v1");
  mkdir(zDir, 0700);
  for(size_t i=0; i<sizeof(azFile)/sizeof(azFile[0]); i++){
    if( snprintf(zFrom, sizeof(zFrom), "%.3000s/fixtures/v1-0ad65da/%.64s", zSrc, azFile[i])>=(int)sizeof(zFrom) ){
      fail_msg("path too long");
    }
    joinPath(zTo, zDir, azFile[i]);
    fileCopy(zFrom, zTo);
    chmod(zTo, 0600);
  }
  joinPath(zFixCfg, zDir, "tde.conf");
  joinPath(zTo, zDir, "fix.db");
  upgradeAndCheck(zTo, zFixCfg, 150, "SELECT sum(id) FROM t WHERE v LIKE 'fixture %'", 150*151/2);
  joinPath(zTo, zDir, "fixwal.db");
  upgradeAndCheck(zTo, zFixCfg, 150, "SELECT sum(id) FROM t WHERE v LIKE 'fixture %'", 150*151/2);
}

/* ---- header rollback after a rekey (case 4) --------------------------------- */

/* The refusals below are logged: captureLog and zLogSeen (freshtest.h). */

static unsigned char aSavedHeader[8192];
static int bHeaderSaved;
static char zRekeyDb[PATH_MAX];

/* Rekey progress: the attacker copies the header region mid-rekey. */
static int saveHeaderProgress(void *pArg, int64_t nDone, int64_t nTotal){
  (void)pArg; (void)nTotal;
  if( !bHeaderSaved && nDone>0 ){
    size_t n = 0;
    unsigned char *a = readAll(zRekeyDb, &n);
    if( a && n>=sizeof(aSavedHeader) ){
      memcpy(aSavedHeader, a, sizeof(aSavedHeader));
      bHeaderSaved = 1;
    }
    free(a);
  }
  return 0;
}

/*
** Case 4.  Pages from before a rekey and the header region saved during it
** are put back after it finished.  Version 1 once let the old data key
** back and the old pages read as valid; now a rekey of a version-1
** database upgrades it (its begin writes version 2), so bV2 0 checks that
** the rekey upgraded it and that the same replay is then refused as for a
** database created as version 2.  Version 2: page 1 (sealed again at the
** finish) carries a newer header sequence than the header put back: the
** database refuses to open, naming the rollback; with the current header
** back it opens again.
*/
static void headerRollbackCase(int bV2){
  char zDb[PATH_MAX];
  unsigned char *aBefore = 0, *aNow = 0, aCurHeader[8192];
  size_t nBefore = 0, nNow = 0;
  sqlite3 *db = 0;
  sqlite3_int64 v = 0;
  int rc, nFormat;
  tdeSetCreateVersion(bV2 ? tdetestNewFormat() : TDE_FORMAT_V1);
  pathOf(zDb, bV2 ? "hdrroll-v2.db" : "hdrroll-v1.db");
  snprintf(zRekeyDb, sizeof(zRekeyDb), "%s", zDb);
  removeDb(zDb);
  removeDbFiles(zDb, 1);
  assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
  exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);"
           "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<200)"
           " INSERT INTO t SELECT i, printf('before %d %.300c', i, 'b') FROM c;");
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  aBefore = readAll(zDb, &nBefore);               /* pages under data key 1 */
  assert_non_null(aBefore);
  assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
  exec(db, "UPDATE t SET v=printf('after %d %.300c', id, 'a')");
  bHeaderSaved = 0;
  assert_int_equal(tde_db_rekey(db, "main", 4, saveHeaderProgress, 0), TDE_OK);
  assert_true(bHeaderSaved);
  assert_int_equal(stepInt(db, "SELECT count(*) FROM t WHERE v LIKE 'after %'", &v), SQLITE_OK);
  assert_int_equal(v, 200);
  nFormat = bV2 ? tdetestNewFormat() : 2;
  assert_int_equal(queryInt64(db, "SELECT format_version FROM tde_status WHERE schema='main'"), nFormat);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  bV2 = 1;                                      /* (a version-1 database is one now) */

  /* The attack: the header region saved mid-rekey, and every page but 1
  ** from before the rekey. */
  aNow = readAll(zDb, &nNow);
  assert_non_null(aNow);
  assert_true(nNow==nBefore);
  memcpy(aCurHeader, aNow, sizeof(aCurHeader));
  memcpy(aNow, aSavedHeader, sizeof(aSavedHeader));
  {
    size_t off2 = nFormat==3 ? (size_t)tdetestPageOff(4096, 2) : 8192 + 4096;   /* page 2 on */
    memcpy(aNow + off2, aBefore + off2, nNow - off2);
  }
  writeAll(zDb, aNow, nNow);

  zLogSeen[0] = 0;
  tde_set_log(captureLog, 0);
  rc = openTdeCfg(zDb, zCfg, &db);
  if( rc==SQLITE_OK ){
    sqlite3_extended_result_codes(db, 1);
    rc = stepInt(db, "SELECT count(*) FROM t WHERE v LIKE 'before %'", &v);
  }
  if( !bV2 ){
    assert_int_equal(rc, SQLITE_OK);
    assert_true(v>0);                            /* stale pages under the retired key */
  }else{
    assert_int_equal(rc & 0xff, SQLITE_IOERR);       /* SQLITE_IOERR_AUTH once extended codes are on */
    if( rc!=SQLITE_IOERR_AUTH ) assert_int_equal(sqlite3_extended_errcode(db), SQLITE_IOERR_AUTH);
    /* The log names the file and what was stale (tde_last_error() then
    ** holds the page-size search's summary: see the report). */
    assert_non_null(strstr(zLogSeen, "the header region was rolled back"));
    assert_non_null(strstr(zLogSeen, zDb));
  }
  sqlite3_close(db);
  tde_set_log(quietLog, 0);
  if( bV2 ){
    /* The current header back: the open works again, and the pages from
    ** before the rekey fail as they do in version 1 (their key is gone). */
    memcpy(aNow, aCurHeader, sizeof(aCurHeader));
    writeAll(zDb, aNow, nNow);
    assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
    sqlite3_extended_result_codes(db, 1);
    assert_int_equal(stepInt(db, "SELECT count(*) FROM sqlite_schema", &v), SQLITE_OK);
    assert_int_equal(v, 1);
    assert_int_equal(stepInt(db, "SELECT count(*) FROM t WHERE v LIKE 'before %'", &v), SQLITE_IOERR_AUTH);
    sqlite3_close(db);
  }
  free(aBefore);
  free(aNow);
  tdeSetCreateVersion(tdetestNewFormat());
}

static void test_case4_header_rollback_v1_rekey_upgrades(void **state){ (void)state; headerRollbackCase(0); }
static void test_case4_header_rollback_v2(void **state){ (void)state; headerRollbackCase(1); }

/*
** Case 4 after a master-key rotation (and the same for a keystore
** migration: one header update each): the header region saved before the
** rotation -- which still wraps the data key under the old master key --
** put back after it, before any write.  Version 2: the rotation sealed
** page 1 again under the new header sequence, so the open refuses the
** old header.  Version 1: nothing records it; the old header is used.
*/
static void rotationRollbackCase(int bV2){
  char zDb[PATH_MAX], zId[TDE_KEYID_MAX+1];
  unsigned char aOld[8192], aCur[8192], *a;
  size_t n = 0;
  sqlite3 *db = 0;
  sqlite3_int64 v = 0;
  int rc;
  tdeSetCreateVersion(bV2 ? tdetestNewFormat() : TDE_FORMAT_V1);
  pathOf(zDb, bV2 ? "rotroll-v2.db" : "rotroll-v1.db");
  removeDbFiles(zDb, 1);
  assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
  exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);"
           "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<50)"
           " INSERT INTO t SELECT i, printf('row %d', i) FROM c;");
  a = readAll(zDb, &n);
  assert_true(a && n>sizeof(aOld));
  memcpy(aOld, a, sizeof(aOld));                 /* the attacker's copy of the header */
  free(a);
  assert_int_equal(tde_keystore_new_key(zCfg, zId, sizeof(zId)), TDE_OK);
  assert_int_equal(tde_db_rewrap(db, "main"), TDE_OK);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  {
    char zJ[PATH_MAX+16];
    snprintf(zJ, sizeof(zJ), "%s-tderekey", zDb);
    assert_int_equal(access(zJ, F_OK), -1);      /* no rekey journal, */
    snprintf(zJ, sizeof(zJ), "%s-journal", zDb);
    assert_int_equal(access(zJ, F_OK), -1);      /* and the re-seal's journal is gone */
  }

  a = readAll(zDb, &n);
  assert_non_null(a);
  memcpy(aCur, a, sizeof(aCur));
  memcpy(a, aOld, sizeof(aOld));                 /* put back, before any write */
  writeAll(zDb, a, n);
  zLogSeen[0] = 0;
  tde_set_log(captureLog, 0);
  rc = openTdeCfg(zDb, zCfg, &db);
  if( rc==SQLITE_OK ){
    sqlite3_extended_result_codes(db, 1);
    rc = stepInt(db, "SELECT count(*) FROM t", &v);
  }
  sqlite3_close(db);
  tde_set_log(quietLog, 0);
  if( !bV2 ){
    assert_int_equal(rc, SQLITE_OK);             /* the old header is in force again */
    assert_int_equal(v, 50);
  }else{
    assert_int_equal(rc & 0xff, SQLITE_IOERR);
    assert_non_null(strstr(zLogSeen, "the header region was rolled back"));
    assert_non_null(strstr(zLogSeen, zDb));
    /* The current header back: it opens again. */
    memcpy(a, aCur, sizeof(aCur));
    writeAll(zDb, a, n);
    assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
    assert_int_equal(stepInt(db, "SELECT count(*) FROM t", &v), SQLITE_OK);
    assert_int_equal(v, 50);
    assert_true(integrityOk(db));
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
  }
  free(a);
  tdeSetCreateVersion(tdetestNewFormat());
}

static void test_case4_after_rotation_v1(void **state){ (void)state; rotationRollbackCase(0); }
static void test_case4_after_rotation_v2(void **state){ (void)state; rotationRollbackCase(1); }

static int groupSetup(void **state){
  (void)state;
  return tdetestGroupSetup("tdefresh", 0);
}

static int groupTeardown(void **state){
  (void)state;
  tdetestScratchRemove();
  return 0;
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_raw_clone_new_session),
    cmocka_unit_test(test_random_counter_start),
    cmocka_unit_test(test_session_cap),
    cmocka_unit_test(test_status_sessions),
    cmocka_unit_test(test_case1_old_wal_v1),
    cmocka_unit_test(test_case1_old_wal_v2),
    cmocka_unit_test(test_case2_spliced_frames_v1),
    cmocka_unit_test(test_case2_spliced_frames_v2),
    cmocka_unit_test(test_upgrade_v1_wal),
    cmocka_unit_test(test_upgrade_v1_delete),
    cmocka_unit_test(test_upgrade_fixture),
    cmocka_unit_test(test_case4_header_rollback_v1_rekey_upgrades),
    cmocka_unit_test(test_case4_header_rollback_v2),
    cmocka_unit_test(test_case4_after_rotation_v1),
    cmocka_unit_test(test_case4_after_rotation_v2),
  };
  return tdetestExit(cmocka_run_group_tests_name("fresh", tests, groupSetup, groupTeardown));
}
