/*
** Crash tests under locking_mode=EXCLUSIVE and shared cache, rollback
** journal and WAL (issue 21; bugs 3, 4, 5 were found by round trips in
** these modes, test_r3_lock.c and test_r3_journal.c).
**
** A VFS registered below tde counts every xWrite, xSync, xTruncate (on
** every file: database, journal, WAL, page map) and xDelete.  A workload
** runs once in this process to count those calls and record a checksum of
** the table after each step; then, for each crash point N (every call
** index, or a stratified sample with a fixed, printed seed when there are
** more than MAX_ALL), a child process runs the same workload and
** _exit()s inside the N-th call, before it reaches the file.  The parent
** reopens the files through tde, in normal and in exclusive locking mode
** (alternating which one recovers first), and checks:
**   - the open and the first read succeed (no authentication false alarm),
**   - PRAGMA integrity_check is ok,
**   - the content equals the state after the last step the child reported
**     finished, or after the one following it (synchronous=FULL: a
**     commit that returned is never lost),
**   - tde_verify passes and PRAGMA tde_status says auth_failures=0.
** Every failing crash point is printed ("# FAIL ...", with tde's last log
** line) and the test fails at the end: none is skipped.
**
** Run against SQLite 3.40 (system) and 3.53 (test_r3_crash_353).
*/
#include "tdetest.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <dirent.h>

#include "stackvfs.h"

#define DIE_CODE   42
#if defined(__SANITIZE_ADDRESS__)
/* Under AddressSanitizer every point costs about ten times as much: the
** normal build crashes at every call, this one at a fixed-seed sample. */
#define MAX_ALL    64
#define N_SAMPLE   64
#else
#define MAX_ALL    400          /* up to this many calls: crash at every one */
#define N_SAMPLE   48           /* else this many, one per stratum */
#endif
#define SEED       20261202u
#define MAX_STEP   32

/* ---- the VFS below tde: counts calls, dies at the chosen one -------------- */

static sqlite3_io_methods crashIo;
static long nCall;              /* xWrite/xSync/xTruncate/xDelete calls so far */
static long iDieAt = -1;        /* die inside this call (1-based); -1 never */
static int fdReport = -1;       /* the child reports through this pipe */

/* Kinds of file, for the summary of where the crashes landed. */
enum { K_DB, K_JOURNAL, K_WAL, K_MAP, K_OTHER, K_N };
static const char *azKind[K_N] = { "db", "journal", "wal", "map", "other" };
enum { OP_WRITE, OP_SYNC, OP_TRUNC, OP_DELETE, OP_N };
static const char *azOp[OP_N] = { "write", "sync", "truncate", "delete" };

typedef struct CrashFile {
  StackFile s;                  /* first: stackIo's methods see a StackFile */
  int eKind;
} CrashFile;

static int kindOf(const char *z){
  if( z==0 ) return K_OTHER;
  if( strstr(z, "-journal") ) return K_JOURNAL;
  if( strstr(z, "-wal") ) return K_WAL;
  if( strstr(z, "-tdemap") ) return K_MAP;
  if( strstr(z, "-") && strrchr(z, '-')>strrchr(z, '/') ) return K_OTHER;
  return K_DB;
}

/* One counted call; in a child at the chosen index, report where and die. */
static void tick(int eKind, int eOp){
  nCall++;
  if( iDieAt>=0 && nCall>=iDieAt ){
    unsigned char a[2] = { (unsigned char)('K'), (unsigned char)(eKind*OP_N + eOp) };
    if( fdReport>=0 && write(fdReport, a, 2)!=2 ) _exit(DIE_CODE+1);
    _exit(DIE_CODE);
  }
}

static int crashWrite(sqlite3_file *p, const void *z, int n, sqlite3_int64 o){
  tick(((CrashFile*)p)->eKind, OP_WRITE);
  return stackWrite(p, z, n, o);
}
static int crashSync(sqlite3_file *p, int f){
  tick(((CrashFile*)p)->eKind, OP_SYNC);
  return stackSync(p, f);
}
static int crashTruncate(sqlite3_file *p, sqlite3_int64 n){
  tick(((CrashFile*)p)->eKind, OP_TRUNC);
  return stackTruncate(p, n);
}
/* stackOpen's shape, with the file below after the whole CrashFile. */
static int crashOpen(sqlite3_vfs *v, const char *zName, sqlite3_file *pFile, int flags, int *pOut){
  CrashFile *p = (CrashFile*)pFile;
  int rc;
  memset(p, 0, sizeof(*p));
  p->s.pReal = (sqlite3_file*)&p[1];
  rc = STACK_BELOW(v)->xOpen(STACK_BELOW(v), zName, p->s.pReal, flags, pOut);
  if( rc ){
    if( p->s.pReal->pMethods ) p->s.pReal->pMethods->xClose(p->s.pReal);
    pFile->pMethods = 0;
    return rc;
  }
  p->eKind = kindOf(zName);
  pFile->pMethods = &crashIo;
  return SQLITE_OK;
}
static int crashDelete(sqlite3_vfs *v, const char *z, int bSync){
  tick(kindOf(z), OP_DELETE);
  return stackDelete(v, z, bSync);
}

/* ---- the workloads --------------------------------------------------------- */

typedef struct Workload {
  const char *zName;
  int bShared;                  /* two connections, cache=shared */
  const char *zSetup;           /* pragmas, run first on connection A */
  const char **azStep;          /* steps, each a whole transaction or pragma */
} Workload;

#define ROWS40 "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<40)"
#define ROWS200 "WITH RECURSIVE c(i) AS (SELECT 41 UNION ALL SELECT i+1 FROM c WHERE i<240)"

static const char *azRollback[] = {
  "CREATE TABLE t(a INTEGER PRIMARY KEY, v TEXT)",
  ROWS40 " INSERT INTO t SELECT i, printf('%.200c-%d', 'a', i) FROM c",
  "BEGIN; UPDATE t SET v=v||'x'; DELETE FROM t WHERE a%3=0; ROLLBACK",
  /* spills: 200 rows of 400 bytes under cache_size=10 */
  "BEGIN; " ROWS200 " INSERT INTO t SELECT i, printf('%.400c-%d', 'b', i) FROM c;"
  " UPDATE t SET v=upper(v) WHERE a<=40; COMMIT",
  "DELETE FROM t WHERE a%5=0",
  "BEGIN; UPDATE t SET v=printf('%.300c-%d', 'z', a) WHERE a%2=0; ROLLBACK",
  "UPDATE t SET v=substr(v, 1, 50) WHERE a>200",
  0
};

static const char *azWal[] = {
  "CREATE TABLE t(a INTEGER PRIMARY KEY, v TEXT)",
  ROWS40 " INSERT INTO t SELECT i, printf('%.200c-%d', 'a', i) FROM c",
  "PRAGMA wal_checkpoint(PASSIVE)",
  "BEGIN; UPDATE t SET v=v||'x'; DELETE FROM t WHERE a%3=0; ROLLBACK",
  "BEGIN; " ROWS200 " INSERT INTO t SELECT i, printf('%.400c-%d', 'b', i) FROM c;"
  " UPDATE t SET v=upper(v) WHERE a<=40; COMMIT",
  "PRAGMA wal_checkpoint(TRUNCATE)",
  "DELETE FROM t WHERE a%5=0",
  "PRAGMA wal_checkpoint(PASSIVE)",
  "UPDATE t SET v=substr(v, 1, 50) WHERE a>200",
  "PRAGMA wal_checkpoint(TRUNCATE)",
  "UPDATE t SET v=v||'y' WHERE a<20",
  0
};

#define COMMON "PRAGMA synchronous=FULL; PRAGMA cache_size=10;"

static const Workload aWork[] = {
  { "excl-delete",   0, "PRAGMA journal_mode=DELETE; PRAGMA locking_mode=EXCLUSIVE;" COMMON, azRollback },
  { "excl-truncate", 0, "PRAGMA journal_mode=TRUNCATE; PRAGMA locking_mode=EXCLUSIVE;" COMMON, azRollback },
  { "excl-persist",  0, "PRAGMA journal_mode=PERSIST; PRAGMA locking_mode=EXCLUSIVE;" COMMON, azRollback },
  { "wal-then-excl", 0, "PRAGMA journal_mode=WAL; PRAGMA locking_mode=EXCLUSIVE;" COMMON, azWal },
  { "excl-then-wal", 0, "PRAGMA locking_mode=EXCLUSIVE; PRAGMA journal_mode=WAL;" COMMON, azWal },
  { "shared-delete", 1, "PRAGMA journal_mode=DELETE;" COMMON, azRollback },
  { "shared-wal",    1, "PRAGMA journal_mode=WAL;" COMMON, azWal },
};

/* ---- helpers ---------------------------------------------------------------- */

static char zLastLog[1024];
static long nLogLines;

static void crashLog(void *pArg, int level, const char *zMsg){
  (void)pArg;
  nLogLines++;
  snprintf(zLastLog, sizeof(zLastLog), "%d: %s", level, zMsg ? zMsg : "");
  if( getenv("TDE_TEST_LOG") ) fprintf(stderr, "tde log %d: %s\n", level, zMsg);
}

/* Remove zScratch/crash.db and every side file of it. */
static void removeCrashFiles(void){
  DIR *d = opendir(zScratch);
  struct dirent *e;
  char z[PATH_MAX];
  assert_non_null(d);
  while( (e = readdir(d))!=0 ){
    if( strncmp(e->d_name, "crash.db", 8)==0 ){ pathOf(z, e->d_name); unlink(z); }
  }
  closedir(d);
}

static int openConn(const char *zDb, int bShared, sqlite3 **pDb){
  char *zUri = sqlite3_mprintf("file:%s?vfs=tde&tde_config=%s%s", zDb, zCfg,
                               bShared ? "&cache=shared" : "");
  int rc;
  if( zUri==0 ){ *pDb = 0; return SQLITE_NOMEM; }
  rc = sqlite3_open_v2(zUri, pDb, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE|SQLITE_OPEN_URI, 0);
  sqlite3_free(zUri);
  if( *pDb ) sqlite3_extended_result_codes(*pDb, 1);
  return rc;
}

/* FNV-1a over the table's rows in key order into *pCks; 1 when there is no
** table yet.  SQLite result code. */
static int tableChecksum(sqlite3 *db, sqlite3_uint64 *pCks){
  sqlite3_stmt *p = 0;
  sqlite3_uint64 h = 14695981039346656037ull;
  int rc = sqlite3_prepare_v2(db, "SELECT a, v FROM t ORDER BY a", -1, &p, 0);
  *pCks = 0;
  if( rc==SQLITE_ERROR && strstr(sqlite3_errmsg(db), "no such table") ){
    *pCks = 1;
    return SQLITE_OK;
  }
  if( rc ) return rc;
  while( (rc = sqlite3_step(p))==SQLITE_ROW ){
    sqlite3_int64 a = sqlite3_column_int64(p, 0);
    const unsigned char *z = sqlite3_column_text(p, 1);
    int n = sqlite3_column_bytes(p, 1);
    for(int i=0; i<8; i++){ h ^= (unsigned char)(a>>(8*i)); h *= 1099511628211ull; }
    for(int i=0; i<n; i++){ h ^= z[i]; h *= 1099511628211ull; }
    h ^= 0xff; h *= 1099511628211ull;
  }
  if( rc==SQLITE_DONE ) rc = SQLITE_OK;
  if( sqlite3_finalize(p) && rc==SQLITE_OK ) rc = SQLITE_ERROR;
  *pCks = h;
  return rc;
}

/* Run workload w on zDb.  aCks[i+1] gets the checksum after step i (aCks[0]
** the empty state) when aCks is not NULL.  With fd>=0 (a child), each step
** done is reported as the bytes 'S', i.  0, or 1 + the failing step
** (setup: 1). */
static int runWorkload(const Workload *w, const char *zDb, sqlite3_uint64 *aCks, int fd){
  sqlite3 *dbA = 0, *dbB = 0;
  sqlite3_uint64 cks;
  int iFail = 0;
  if( aCks ) aCks[0] = 1;
  if( openConn(zDb, w->bShared, &dbA) ){ iFail = 1; goto done; }
  if( w->bShared && openConn(zDb, 1, &dbB) ){ iFail = 1; goto done; }
  if( sqlite3_exec(dbA, w->zSetup, 0, 0, 0) ){ iFail = 1; goto done; }
  for(int i=0; w->azStep[i]; i++){
    if( sqlite3_exec(dbA, w->azStep[i], 0, 0, 0) ){ iFail = 2 + i; goto done; }
    if( fd>=0 ){
      unsigned char a[2] = { 'S', (unsigned char)i };
      if( write(fd, a, 2)!=2 ){ iFail = 2 + i; goto done; }
    }
    /* the same reads in the counting run and in the child */
    if( tableChecksum(dbA, &cks) ){ iFail = 2 + i; goto done; }
    if( aCks ) aCks[i+1] = cks;
    if( dbB ){
      sqlite3_uint64 cksB;
      if( tableChecksum(dbB, &cksB) || cksB!=cks ){ iFail = 2 + i; goto done; }
    }
  }
done:
  if( dbB && sqlite3_close(dbB) && !iFail ) iFail = 100;
  if( dbA && sqlite3_close(dbA) && !iFail ) iFail = 100;
  return iFail;
}

/* Reopen zDb after a crash (in exclusive locking mode with bExcl) and
** check it.  0 and *pCks the recovered content, or 1 with zWhy said. */
static int reopenCheck(const char *zDb, int bExcl, sqlite3_uint64 *pCks, char *zWhy, size_t nWhy){
  sqlite3 *db = 0;
  int rc, bBad = 1;
  int64_t nChecked = 0, iBad = 0;
  zWhy[0] = 0;
  rc = openConn(zDb, 0, &db);
  if( rc ){ snprintf(zWhy, nWhy, "open: %d %s", rc, db ? sqlite3_errmsg(db) : "-"); goto done; }
  if( bExcl && (rc = sqlite3_exec(db, "PRAGMA locking_mode=EXCLUSIVE", 0, 0, 0))!=0 ){
    snprintf(zWhy, nWhy, "locking_mode: %d %s", rc, sqlite3_errmsg(db));
    goto done;
  }
  if( (rc = tableChecksum(db, pCks))!=0 ){
    snprintf(zWhy, nWhy, "first read: %d %s", rc, sqlite3_errmsg(db));
    goto done;
  }
  if( !integrityOk(db) ){ snprintf(zWhy, nWhy, "integrity_check: %s", sqlite3_errmsg(db)); goto done; }
  if( !bExcl ){
    rc = tde_verify(db, "main", &nChecked, &iBad, 0, 0);
    if( rc!=TDE_OK ){
      snprintf(zWhy, nWhy, "tde_verify: %d bad %lld (%s)", rc, (long long)iBad, tde_last_error());
      goto done;
    }
  }
  {
    sqlite3_stmt *p = 0;
    const unsigned char *z = 0;
    int bOk = 0;
    if( sqlite3_prepare_v2(db, "PRAGMA tde_status", -1, &p, 0)==SQLITE_OK
     && sqlite3_step(p)==SQLITE_ROW ){
      z = sqlite3_column_text(p, 0);
      bOk = z && strstr((const char*)z, " auth_failures=0 ")!=0;
      if( !bOk ) snprintf(zWhy, nWhy, "tde_status: %s", z ? (const char*)z : "(null)");
    }else{
      snprintf(zWhy, nWhy, "tde_status: %s", sqlite3_errmsg(db));
    }
    sqlite3_finalize(p);
    if( !bOk ) goto done;
  }
  bBad = 0;
done:
  if( db && sqlite3_close(db) && !bBad ){ snprintf(zWhy, nWhy, "close"); bBad = 1; }
  return bBad;
}

/* Small fixed-seed generator (the points are printed). */
static unsigned int uRand = SEED;
static unsigned int nextRand(void){
  uRand = uRand*1103515245u + 12345u;
  return (uRand>>8) & 0xffffff;
}

/* ---- the crash loop ---------------------------------------------------------- */

static void crashWorkload(const Workload *w){
  char zDb[PATH_MAX];
  sqlite3_uint64 aCks[MAX_STEP+1];
  long nTotal, aPoint[MAX_ALL>N_SAMPLE ? MAX_ALL : N_SAMPLE];
  int nPoint = 0, nStep = 0, nFail = 0, nFinished = 0;
  int aWhere[K_N*OP_N];
  int iStateMin = MAX_STEP, iStateMax = -1;

  memset(aWhere, 0, sizeof(aWhere));
  while( w->azStep[nStep] ) nStep++;
  assert_true(nStep<MAX_STEP);
  pathOf(zDb, "crash.db");

  /* The counting run, in this process. */
  removeCrashFiles();
  nCall = 0;
  iDieAt = -1;
  assert_int_equal(runWorkload(w, zDb, aCks, -1), 0);
  nTotal = nCall;
  assert_true(nTotal>0);

  if( nTotal<=MAX_ALL ){
    for(long i=1; i<=nTotal; i++) aPoint[nPoint++] = i;
  }else{
    for(int s=0; s<N_SAMPLE; s++){
      long lo = 1 + (nTotal*s)/N_SAMPLE, hi = (nTotal*(s+1))/N_SAMPLE;
      if( hi<lo ) hi = lo;
      aPoint[nPoint++] = lo + (long)(nextRand() % (unsigned)(hi-lo+1));
    }
  }
  printf("# %s: %ld counted calls, %d crash points%s (seed %u)\n", w->zName, nTotal, nPoint,
         nTotal<=MAX_ALL ? " (all)" : " (one per stratum)", SEED);

  for(int k=0; k<nPoint; k++){
    int aFd[2], status = 0, iLast = -1, eWhere = -1, bBad = 0;
    pid_t pid;
    unsigned char a[2];
    char zWhy[512] = "";
    sqlite3_uint64 cks1 = 0, cks2 = 0;

    removeCrashFiles();
    assert_int_equal(pipe(aFd), 0);
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    assert_true(pid>=0);
    if( pid==0 ){
      int iFail;
      close(aFd[0]);
      fdReport = aFd[1];
      nCall = 0;
      iDieAt = aPoint[k];
      iFail = runWorkload(w, zDb, 0, aFd[1]);
      _exit(iFail ? 10 + iFail : 0);
    }
    close(aFd[1]);
    while( read(aFd[0], a, 2)==2 ){
      if( a[0]=='S' ) iLast = a[1];
      else if( a[0]=='K' ) eWhere = a[1];
    }
    close(aFd[0]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if( WEXITSTATUS(status)==0 ) nFinished++;
    else if( WEXITSTATUS(status)!=DIE_CODE ){
      printf("# FAIL %s point %ld: the child's workload failed (exit %d)\n",
             w->zName, aPoint[k], WEXITSTATUS(status));
      nFail++;
      continue;
    }
    if( eWhere>=0 && eWhere<K_N*OP_N ) aWhere[eWhere]++;

    /* Recover: first in exclusive mode on odd points, in normal mode on even. */
    zLastLog[0] = 0;
    nLogLines = 0;
    {
      int bExclFirst = k & 1;
      bBad = reopenCheck(zDb, bExclFirst, &cks1, zWhy, sizeof(zWhy));
      if( !bBad ){
        bBad = reopenCheck(zDb, !bExclFirst, &cks2, zWhy, sizeof(zWhy));
        if( !bBad && cks2!=cks1 ){ snprintf(zWhy, sizeof(zWhy), "content changed between reopens"); bBad = 1; }
      }
      if( !bBad ){
        /* the state after step iLast, or after the step the crash was in */
        int iState = -2;
        if( cks1==aCks[iLast+1] ) iState = iLast;
        else if( iLast+1<nStep && cks1==aCks[iLast+2] ) iState = iLast+1;
        if( iState==-2 ){
          for(int j=0; j<=nStep; j++) if( cks1==aCks[j] ){ iState = j-1; break; }
          snprintf(zWhy, sizeof(zWhy), "content is the state after step %d, the child finished step %d%s",
                   iState, iLast, iState==-2 ? " (no known state)" : " (a committed step lost)");
          bBad = 1;
        }else{
          if( iState<iStateMin ) iStateMin = iState;
          if( iState>iStateMax ) iStateMax = iState;
        }
      }
    }
    if( bBad ){
      nFail++;
      printf("# FAIL %s point %ld/%ld (in %s %s, after step %d): %s; tde log (%ld lines): %s\n",
             w->zName, aPoint[k], nTotal,
             eWhere>=0 ? azKind[eWhere/OP_N] : "-", eWhere>=0 ? azOp[eWhere%OP_N] : "-",
             iLast, zWhy, nLogLines, zLastLog[0] ? zLastLog : "-");
    }
  }
  printf("# %s: crashes in", w->zName);
  for(int i=0; i<K_N*OP_N; i++){
    if( aWhere[i] ) printf(" %s-%s=%d", azKind[i/OP_N], azOp[i%OP_N], aWhere[i]);
  }
  printf("; recovered states %d..%d of %d steps; %d ran to the end; %d failed\n",
         iStateMin, iStateMax, nStep, nFinished, nFail);
  removeCrashFiles();
  assert_int_equal(nFail, 0);
}

static void test_excl_delete(void **s){ (void)s; crashWorkload(&aWork[0]); }
static void test_excl_truncate(void **s){ (void)s; crashWorkload(&aWork[1]); }
static void test_excl_persist(void **s){ (void)s; crashWorkload(&aWork[2]); }
static void test_wal_then_excl(void **s){ (void)s; crashWorkload(&aWork[3]); }
static void test_excl_then_wal(void **s){ (void)s; crashWorkload(&aWork[4]); }
static void test_shared_delete(void **s){ (void)s; crashWorkload(&aWork[5]); }
static void test_shared_wal(void **s){ (void)s; crashWorkload(&aWork[6]); }

static int groupTeardown(void **state){
  (void)state;
  tdetestScratchRemove();
  return 0;
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_excl_delete),
    cmocka_unit_test(test_excl_truncate),
    cmocka_unit_test(test_excl_persist),
    cmocka_unit_test(test_wal_then_excl),
    cmocka_unit_test(test_excl_then_wal),
    cmocka_unit_test(test_shared_delete),
    cmocka_unit_test(test_shared_wal),
  };
  if( sqlite3_initialize() ) return 1;
  /* The counting VFS below tde: the default when tde registers. */
  if( stackVfsRegister("r3-crash-below", "unix") ) return 1;
  stackVfs.szOsFile = (int)sizeof(CrashFile) + sqlite3_vfs_find("unix")->szOsFile;
  stackVfs.xOpen = crashOpen;
  stackVfs.xDelete = crashDelete;
  if( sqlite3_vfs_register(&stackVfs, 1) ) return 1;
  crashIo = stackIo;
  crashIo.xWrite = crashWrite;
  crashIo.xSync = crashSync;
  crashIo.xTruncate = crashTruncate;
  if( tdetestGroupSetup("r3_crash", 1) ) return 1;
  tde_set_log(crashLog, 0);
  printf("# crash points: seed %u\n", SEED);
  return tdetestExit(cmocka_run_group_tests_name("r3_crash", tests, 0, groupTeardown));
}
