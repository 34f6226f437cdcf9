/*
** conc_worker: the worker and the checker of the concurrency test
** (tests/integration/test_concurrency.sh).
**
**   conc_worker init  DB CFG JOURNAL NPROC NTHREADS
**   conc_worker run   DB CFG PROC NTHREADS SECONDS SEED
**   conc_worker check DB CFG          (expected "owner net" lines on stdin)
**
** init creates the schema: rows(id, owner, v) and acct(owner, n) where
** acct.n is, by construction, the number of rows an owner holds, with one
** account per owner (PROC 1..NPROC, thread 0..NTHREADS-1).
**
** run starts NTHREADS threads, each with its own connection (busy_timeout
** 200 ms), owner id PROC*100+thread, mixing for SECONDS:
**   read    BEGIN; count(rows) must equal sum(acct.n) in one snapshot; COMMIT
**   insert  BEGIN IMMEDIATE; 1..5 rows (1 in 16: 60 rows of 1 KiB); acct += n
**   delete  BEGIN IMMEDIATE; up to 4 of its own rows; acct -= changes()
**   update  BEGIN IMMEDIATE; rewrite the blobs of up to 3 of its own rows
**   ckpt    PRAGMA wal_checkpoint(PASSIVE) (WAL only, now and then)
** After each transaction a thread sleeps 0..1 ms, so that SQLite's polling
** busy handler lets every connection in (without it, one connection of a
** process can starve the others in rollback mode, which proves nothing).
** SQLITE_BUSY (any extended code of it) is the only error allowed: a busy
** statement rolls the transaction back and retries it, a busy COMMIT is
** retried as it stands.  Any other error, or a snapshot whose count
** disagrees, exits 1.  Counts only what COMMIT confirmed; prints one line
** per thread: "owner O ins I del D reads R writes W busy B".
**
** check runs PRAGMA integrity_check and tde_verify(), then compares, for
** every owner, the rows it holds and acct.n with the net count the script
** summed from the run lines; prints the totals; exit 1 on any mismatch.
*/
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>
#include "sqlite-tde.h"

static void die(const char *zFmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *zFmt, ...){
  va_list ap;
  fprintf(stderr, "conc_worker: ");
  va_start(ap, zFmt);
  vfprintf(stderr, zFmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  fflush(stderr);
  /* _exit, not exit: the other threads are still inside SQLite and
  ** OpenSSL, and exit's handlers (OpenSSL's cleanup) would free what they
  ** use under them (a crash that hides this message's cause). */
  _exit(1);
}

static sqlite3 *openDb(const char *zDb, const char *zCfg){
  char *zUri = sqlite3_mprintf("file:%s?vfs=tde&tde_config=%s", zDb, zCfg);
  sqlite3 *db = 0;
  int rc;
  if( zUri == 0 ) die("out of memory");
  rc = sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI, 0);
  sqlite3_free(zUri);
  if( rc != SQLITE_OK ) die("open %s: %s (%s)", zDb, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc), tde_last_error());
  return db;
}

static int isBusy(int rc){ return (rc & 0xff) == SQLITE_BUSY; }

typedef struct Worker {
  pthread_t tid;
  const char *zDb, *zCfg;
  int iOwner;
  double rDeadline;
  uint64_t iRand;
  int64_t nIns, nDel, nReads, nWrites, nBusy;
} Worker;

static double now(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rnd(Worker *w){   /* xorshift64* */
  w->iRand ^= w->iRand >> 12; w->iRand ^= w->iRand << 25; w->iRand ^= w->iRand >> 27;
  return w->iRand * 0x2545F4914F6CDD1Dull;
}

/* Run one statement to completion.  Returns SQLITE_OK or a busy code; any
** other failure ends the process. */
static int run(Worker *w, sqlite3 *db, const char *zSql, int64_t *pnOut){
  sqlite3_stmt *p = 0;
  int rc = sqlite3_prepare_v2(db, zSql, -1, &p, 0);
  if( rc == SQLITE_OK ){
    while( (rc = sqlite3_step(p)) == SQLITE_ROW ){
      if( pnOut ) *pnOut = sqlite3_column_int64(p, 0);
    }
    if( rc == SQLITE_DONE ) rc = SQLITE_OK;
  }
  sqlite3_finalize(p);
  if( rc == SQLITE_OK || isBusy(rc) ){
    if( rc != SQLITE_OK ) w->nBusy++;
    return rc;
  }
  die("owner %d: %s: %s (rc %d, %s)", w->iOwner, zSql, sqlite3_errmsg(db), rc, tde_last_error());
}

/* COMMIT, retried while busy (the transaction stays open meanwhile). */
static void commit(Worker *w, sqlite3 *db){
  while( isBusy(run(w, db, "COMMIT", 0)) ){}
}

static void rollback(Worker *w, sqlite3 *db){
  if( !sqlite3_get_autocommit(db) ){
    int rc = sqlite3_exec(db, "ROLLBACK", 0, 0, 0);
    if( rc != SQLITE_OK && !isBusy(rc) ) die("owner %d: ROLLBACK: %s", w->iOwner, sqlite3_errmsg(db));
  }
}

static void *workerMain(void *pArg){
  Worker *w = pArg;
  sqlite3 *db = openDb(w->zDb, w->zCfg);
  char zSql[256];
  int bWal;
  int64_t v = 0;
  sqlite3_busy_timeout(db, 200);
  while( isBusy(run(w, db, "PRAGMA journal_mode", 0)) ){}
  {
    sqlite3_stmt *p = 0;
    sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &p, 0);
    bWal = sqlite3_step(p) == SQLITE_ROW && strcmp((const char *)sqlite3_column_text(p, 0), "wal") == 0;
    sqlite3_finalize(p);
  }
  run(w, db, "PRAGMA cache_size=20", 0);
  while( now() < w->rDeadline ){
    unsigned op = (unsigned)(rnd(w) % 16);
    usleep((useconds_t)(rnd(w) % 1000));
    if( op < 6 ){                                   /* read */
      int64_t nRows = -1, nSum = -2;
      if( run(w, db, "BEGIN", 0) != SQLITE_OK
       || run(w, db, "SELECT count(*) FROM rows", &nRows) != SQLITE_OK
       || run(w, db, "SELECT coalesce(sum(n),0) FROM acct", &nSum) != SQLITE_OK ){
        rollback(w, db);
        continue;
      }
      commit(w, db);
      if( nRows != nSum ) die("owner %d: snapshot holds %" PRId64 " rows, accounts say %" PRId64, w->iOwner, nRows, nSum);
      w->nReads++;
      continue;
    }
    if( op == 15 && bWal ){
      if( run(w, db, "PRAGMA wal_checkpoint(PASSIVE)", 0) == SQLITE_OK ) w->nWrites++;
      continue;
    }
    if( run(w, db, "BEGIN IMMEDIATE", 0) != SQLITE_OK ) continue;
    if( op < 11 ){                                  /* insert */
      int big = (rnd(w) % 16) == 0;
      int n = big ? 60 : 1 + (int)(rnd(w) % 5);
      snprintf(zSql, sizeof zSql,
        "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<%d)"
        " INSERT INTO rows(owner, v) SELECT %d, randomblob(%d) FROM c", n, w->iOwner, big ? 1024 : 64);
      if( run(w, db, zSql, 0) != SQLITE_OK ){ rollback(w, db); continue; }
      snprintf(zSql, sizeof zSql, "UPDATE acct SET n=n+%d WHERE owner=%d", n, w->iOwner);
      if( run(w, db, zSql, 0) != SQLITE_OK ){ rollback(w, db); continue; }
      commit(w, db);
      w->nIns += n;
    }else if( op < 14 ){                            /* delete */
      int64_t n;
      snprintf(zSql, sizeof zSql,
        "DELETE FROM rows WHERE id IN (SELECT id FROM rows WHERE owner=%d ORDER BY random() LIMIT %d)",
        w->iOwner, 1 + (int)(rnd(w) % 4));
      if( run(w, db, zSql, 0) != SQLITE_OK ){ rollback(w, db); continue; }
      n = sqlite3_changes(db);
      snprintf(zSql, sizeof zSql, "UPDATE acct SET n=n-%" PRId64 " WHERE owner=%d", n, w->iOwner);
      if( run(w, db, zSql, 0) != SQLITE_OK ){ rollback(w, db); continue; }
      commit(w, db);
      w->nDel += n;
    }else{                                          /* update */
      snprintf(zSql, sizeof zSql,
        "UPDATE rows SET v=randomblob(length(v)) WHERE id IN"
        " (SELECT id FROM rows WHERE owner=%d ORDER BY random() LIMIT 3)", w->iOwner);
      if( run(w, db, zSql, 0) != SQLITE_OK ){ rollback(w, db); continue; }
      commit(w, db);
    }
    w->nWrites++;
  }
  (void)v;
  if( sqlite3_close(db) != SQLITE_OK ) die("owner %d: close: %s", w->iOwner, sqlite3_errmsg(db));
  return 0;
}

static int cmdInit(int argc, char **argv){
  sqlite3 *db;
  char *zSql;
  char *zErr = 0;
  int nProc, nThread, i, j;
  if( argc != 7 ) die("usage: conc_worker init DB CFG JOURNAL NPROC NTHREADS");
  nProc = atoi(argv[5]); nThread = atoi(argv[6]);
  db = openDb(argv[2], argv[3]);
  zSql = sqlite3_mprintf(
    "PRAGMA journal_mode=%s;"
    "CREATE TABLE rows(id INTEGER PRIMARY KEY, owner INTEGER NOT NULL, v BLOB);"
    "CREATE INDEX rows_owner ON rows(owner);"
    "CREATE TABLE acct(owner INTEGER PRIMARY KEY, n INTEGER NOT NULL);", argv[4]);
  if( sqlite3_exec(db, zSql, 0, 0, &zErr) != SQLITE_OK ) die("init: %s", zErr);
  sqlite3_free(zSql);
  for(i = 1; i <= nProc; i++){
    for(j = 0; j < nThread; j++){
      zSql = sqlite3_mprintf("INSERT INTO acct VALUES(%d, 0)", i * 100 + j);
      if( sqlite3_exec(db, zSql, 0, 0, &zErr) != SQLITE_OK ) die("init: %s", zErr);
      sqlite3_free(zSql);
    }
  }
  sqlite3_close(db);
  return 0;
}

static int cmdRun(int argc, char **argv){
  int iProc, nThread, i;
  double rSeconds;
  uint64_t iSeed;
  Worker *a;
  double rDeadline;
  if( argc != 8 ) die("usage: conc_worker run DB CFG PROC NTHREADS SECONDS SEED");
  iProc = atoi(argv[4]); nThread = atoi(argv[5]); rSeconds = atof(argv[6]);
  iSeed = strtoull(argv[7], 0, 10);
  if( nThread < 1 || nThread > 64 ) die("1..64 threads");
  a = calloc((size_t)nThread, sizeof *a);
  if( a == 0 ) die("out of memory");
  rDeadline = now() + rSeconds;
  for(i = 0; i < nThread; i++){
    a[i].zDb = argv[2]; a[i].zCfg = argv[3];
    a[i].iOwner = iProc * 100 + i;
    a[i].rDeadline = rDeadline;
    a[i].iRand = (iSeed * 1000003u + (uint64_t)a[i].iOwner) | 1u;
    if( pthread_create(&a[i].tid, 0, workerMain, &a[i]) != 0 ) die("pthread_create");
  }
  for(i = 0; i < nThread; i++) pthread_join(a[i].tid, 0);
  for(i = 0; i < nThread; i++){
    printf("owner %d ins %" PRId64 " del %" PRId64 " reads %" PRId64 " writes %" PRId64 " busy %" PRId64 "\n",
           a[i].iOwner, a[i].nIns, a[i].nDel, a[i].nReads, a[i].nWrites, a[i].nBusy);
  }
  free(a);
  return 0;
}

static int cmdCheck(int argc, char **argv){
  sqlite3 *db;
  sqlite3_stmt *p;
  int nFail = 0, rc, iOwner;
  long long nNet;
  int64_t nChecked = 0, iBad = 0, nTotal = 0, nOwners = 0;
  if( argc != 4 ) die("usage: conc_worker check DB CFG < expected");
  db = openDb(argv[2], argv[3]);
  sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &p, 0);
  while( (rc = sqlite3_step(p)) == SQLITE_ROW ){
    const char *z = (const char *)sqlite3_column_text(p, 0);
    if( z == 0 || strcmp(z, "ok") != 0 ){ fprintf(stderr, "FAIL: integrity_check: %s\n", z ? z : "NULL"); nFail++; }
  }
  if( rc != SQLITE_DONE ){ fprintf(stderr, "FAIL: integrity_check: %s\n", sqlite3_errmsg(db)); nFail++; }
  sqlite3_finalize(p);
  while( scanf("%d %lld", &iOwner, &nNet) == 2 ){
    int64_t nHeld = -1, nAcct = -1;
    sqlite3_prepare_v2(db, "SELECT (SELECT count(*) FROM rows WHERE owner=?1),"
                           " (SELECT n FROM acct WHERE owner=?1)", -1, &p, 0);
    sqlite3_bind_int(p, 1, iOwner);
    if( sqlite3_step(p) == SQLITE_ROW ){
      nHeld = sqlite3_column_int64(p, 0);
      nAcct = sqlite3_column_type(p, 1) == SQLITE_NULL ? -1 : sqlite3_column_int64(p, 1);
    }
    sqlite3_finalize(p);
    if( nHeld != nNet || nAcct != nNet ){
      fprintf(stderr, "FAIL: owner %d: inserted-deleted = %lld, rows held %" PRId64 ", account %" PRId64 "\n",
              iOwner, nNet, nHeld, nAcct);
      nFail++;
    }
    nTotal += nNet;
    nOwners++;
  }
  sqlite3_prepare_v2(db, "SELECT (SELECT count(*) FROM rows), (SELECT count(*) FROM acct)", -1, &p, 0);
  if( sqlite3_step(p) != SQLITE_ROW || sqlite3_column_int64(p, 0) != nTotal || sqlite3_column_int64(p, 1) != nOwners ){
    fprintf(stderr, "FAIL: database holds %lld rows of %lld owners, expected %" PRId64 " of %" PRId64 "\n",
            sqlite3_column_int64(p, 0), sqlite3_column_int64(p, 1), nTotal, nOwners);
    nFail++;
  }
  sqlite3_finalize(p);
  rc = tde_verify(db, "main", &nChecked, &iBad, 0, 0);
  if( rc != TDE_OK ){
    fprintf(stderr, "FAIL: tde_verify: %s at %" PRId64 " (%s)\n", tde_errstr(rc), iBad, tde_last_error());
    nFail++;
  }
  sqlite3_close(db);
  printf("rows %" PRId64 " owners %" PRId64 " pages+frames verified %" PRId64 " %s\n",
         nTotal, nOwners, nChecked, nFail ? "FAIL" : "ok");
  return nFail ? 1 : 0;
}

int main(int argc, char **argv){
  int rc = tde_register(0);
  if( rc != TDE_OK ) die("tde_register: %s", tde_errstr(rc));
  if( argc >= 2 && strcmp(argv[1], "init") == 0 ) return cmdInit(argc, argv);
  if( argc >= 2 && strcmp(argv[1], "run") == 0 ) return cmdRun(argc, argv);
  if( argc >= 2 && strcmp(argv[1], "check") == 0 ) return cmdCheck(argc, argv);
  die("usage: conc_worker init|run|check ...");
}
