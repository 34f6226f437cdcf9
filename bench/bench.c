/*
** sqlite-tde-bench: the benchmark driver.  One process runs one workload
** once under one condition and prints one JSON object on stdout; the
** orchestrator (bench/run.py, installed next to this program as
** sqlite-tde-bench.py) builds the data sets, copies them per run,
** interleaves the conditions and writes the reports.
**
**   sqlite-tde-bench driver --op build|run --workload W --db PATH
**       [--config CFG | --plain | --keyfile F] [--seconds S] [--seed N]
**       [--rows N] [--scale N] [--threads N] [--journal MODE]
**       [--synchronous MODE] [--page-size N] [--cache-size N] [--rat-rows N]
**   sqlite-tde-bench [report options]   runs sqlite-tde-bench.py next to it
**
** Modelled on SQLite's test/speedtest1.c: fixed, printed PRNG seeds, every
** value derived from (seed, row id) so that each condition builds the same
** logical data, and a checksum of everything read, verified against the
** value the generator predicts, so that a fast wrong answer fails the run.
**
** The same source builds sqlite-tde-bench-sqlcipher against Debian's
** libsqlcipher (-DBENCH_SQLCIPHER): the peer condition.  That binary never
** links the tde library (both export SQLite's symbols).
**
** It must never report a figure from a run whose checksum did not verify:
** it exits 1 with a message instead.
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>
#ifndef BENCH_SQLCIPHER
#  include <openssl/crypto.h>
#  include "sqlite-tde.h"
#endif

/* ---- options ------------------------------------------------------------- */

typedef struct Opt {
  const char *zOp;          /* build | run */
  const char *zWorkload;
  const char *zDb;
  const char *zConfig;      /* tde configuration (NULL: plain or sqlcipher) */
  const char *zKeyFile;     /* sqlcipher: file with the passphrase */
  double rSeconds;          /* duration of timed workloads */
  uint64_t iSeed;
  int64_t nRows;            /* rows of t1 in the data set */
  int nScale;               /* tpcb scale: 100,000 accounts each */
  int nThreads;
  int nRatRows;             /* row-at-a-time: rows inserted then deleted */
  const char *zJournal;
  const char *zSync;
  int nPageSize;
  int nCacheSize;
} Opt;

static Opt g = {
  "run", "insert", 0, 0, 0, 2.0, 20261130, 200000, 1, 1, 10000,
  "WAL", "NORMAL", 4096, -2000
};
#ifdef BENCH_SQLCIPHER
static char g_zKey[256];     /* sqlcipher passphrase */
#endif

static void die(const char *zFmt, ...) __attribute__((format(printf,1,2), noreturn));
static void die(const char *zFmt, ...){
  va_list ap;
  fprintf(stderr, "sqlite-tde-bench: ");
  va_start(ap, zFmt);
  vfprintf(stderr, zFmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  exit(1);
}

/* ---- PRNG and generated values ------------------------------------------- */

static uint64_t splitmix(uint64_t x){
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
typedef struct Rng { uint64_t s; } Rng;
static uint64_t rngNext(Rng *p){ p->s += 0x9e3779b97f4a7c15ULL; return splitmix(p->s); }

/* Column a of t1 row id. */
static int64_t valA(int64_t id){ return (int64_t)(splitmix(g.iSeed ^ (uint64_t)id) % 1000000007ULL); }
/* Column b of t1 row id: 100 printable bytes into z (nul-terminated). */
static void valB(int64_t id, char *z){
  uint64_t x = splitmix(g.iSeed + 7 * (uint64_t)id);
  int i;
  for(i=0; i<100; i++){
    if( (i & 7)==0 ) x = splitmix(x);
    z[i] = (char)('a' + (x >> ((i & 7) * 8)) % 26);
  }
  z[100] = 0;
}
/* FNV-1a over bytes, folded into a running checksum. */
static uint64_t fnv(uint64_t h, const void *p, size_t n){
  const unsigned char *a = p;
  size_t i;
  for(i=0; i<n; i++){ h ^= a[i]; h *= 0x100000001b3ULL; }
  return h;
}
/* Order-independent row checksum: sum of a per-row hash. */
static uint64_t rowHash(int64_t id, int64_t a, const char *zB, size_t nB){
  uint64_t h = fnv(0xcbf29ce484222325ULL, &id, sizeof(id));
  h = fnv(h, &a, sizeof(a));
  return fnv(h, zB, nB);
}
static uint64_t expectedRow(int64_t id){
  char z[101];
  valB(id, z);
  return rowHash(id, valA(id), z, 100);
}

/* ---- time and statistics ------------------------------------------------- */

static double now(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct Samples { double *a; size_t n, nAlloc; } Samples;
static void samplesAdd(Samples *p, double v){
  if( p->n==p->nAlloc ){
    p->nAlloc = p->nAlloc ? p->nAlloc * 2 : 1024;
    p->a = realloc(p->a, p->nAlloc * sizeof(double));
    if( !p->a ) die("out of memory");
  }
  p->a[p->n++] = v;
}
static int cmpDouble(const void *x, const void *y){
  double a = *(const double*)x, b = *(const double*)y;
  return a<b ? -1 : a>b;
}
static double pct(Samples *p, double q){
  size_t i;
  if( p->n==0 ) return 0;
  qsort(p->a, p->n, sizeof(double), cmpDouble);
  i = (size_t)(q * (double)(p->n - 1) + 0.5);
  return p->a[i];
}
static double mean(const Samples *p){
  double s = 0;
  size_t i;
  for(i=0; i<p->n; i++) s += p->a[i];
  return p->n ? s / (double)p->n : 0;
}

/* ---- JSON output ----------------------------------------------------------- */

static int g_nOut = 0;
static void outBegin(void){ printf("{"); }
static void outNum(const char *zKey, double v){
  printf("%s\"%s\":%.9g", g_nOut++ ? "," : "", zKey, isfinite(v) ? v : 0.0);
}
static void outStr(const char *zKey, const char *zVal){
  const char *z;
  printf("%s\"%s\":\"", g_nOut++ ? "," : "", zKey);
  for(z=zVal; *z; z++){
    if( *z=='"' || *z=='\\' ) putchar('\\');
    if( (unsigned char)*z < 0x20 ) continue;
    putchar(*z);
  }
  putchar('"');
}
static void outU64(const char *zKey, uint64_t v){
  char z[32];
  snprintf(z, sizeof(z), "%016llx", (unsigned long long)v);
  outStr(zKey, z);
}
static void outSamples(const char *zKey, const Samples *p, size_t nMax){
  size_t i, n = p->n < nMax ? p->n : nMax;
  printf("%s\"%s\":[", g_nOut++ ? "," : "", zKey);
  for(i=0; i<n; i++) printf("%s%.6g", i ? "," : "", p->a[i]);
  printf("]");
}
/* Resident pages shared with other processes and never written (library
** code: most of what loading OpenSSL's provider adds), from
** /proc/self/smaps_rollup; -1 where that file does not exist. */
static double sharedCleanKib(void){
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  char zLine[256];
  double v = -1;
  if( !f ) return v;
  while( fgets(zLine, sizeof(zLine), f) ){
    if( strncmp(zLine, "Shared_Clean:", 13)==0 ){ v = strtod(zLine+13, 0); break; }
  }
  fclose(f);
  return v;
}

static void outEnd(void){
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  outNum("maxrss_kib", (double)ru.ru_maxrss);
  outNum("shared_clean_kib", sharedCleanKib());
  printf("}\n");
  fflush(stdout);
}

/* ---- database helpers ------------------------------------------------------ */

static void check(sqlite3 *db, int rc, const char *zWhat){
  if( rc!=SQLITE_OK && rc!=SQLITE_DONE && rc!=SQLITE_ROW ){
    die("%s: %s (rc=%d)", zWhat, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc), rc);
  }
}
static void exec(sqlite3 *db, const char *zSql){
  char *zErr = 0;
  int rc = sqlite3_exec(db, zSql, 0, 0, &zErr);
  if( rc!=SQLITE_OK ) die("%s: %s", zSql, zErr ? zErr : sqlite3_errstr(rc));
}
static sqlite3_stmt *prep(sqlite3 *db, const char *zSql){
  sqlite3_stmt *p = 0;
  check(db, sqlite3_prepare_v2(db, zSql, -1, &p, 0), zSql);
  return p;
}
static int64_t one(sqlite3 *db, const char *zSql){
  sqlite3_stmt *p = prep(db, zSql);
  int64_t v = 0;
  if( sqlite3_step(p)==SQLITE_ROW ) v = sqlite3_column_int64(p, 0);
  check(db, sqlite3_finalize(p), zSql);
  return v;
}
static void stepDone(sqlite3 *db, sqlite3_stmt *p, const char *zWhat){
  int rc = sqlite3_step(p);
  if( rc!=SQLITE_DONE && rc!=SQLITE_ROW ) die("%s: %s", zWhat, sqlite3_errmsg(db));
  sqlite3_reset(p);
}

/* Open the database for this condition and apply the printed pragmas. */
static sqlite3 *openDb(const char *zPath, int bCreate){
  sqlite3 *db = 0;
  char zUri[PATH_MAX * 2 + 64];
  char zSql[512];
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_URI | (bCreate ? SQLITE_OPEN_CREATE : 0);
  int rc;
#ifndef BENCH_SQLCIPHER
  if( g.zConfig ){
    snprintf(zUri, sizeof(zUri), "file:%s?vfs=tde&tde_config=%s", zPath, g.zConfig);
  }else
#endif
  {
    snprintf(zUri, sizeof(zUri), "file:%s", zPath);
  }
  rc = sqlite3_open_v2(zUri, &db, flags, 0);
  if( rc!=SQLITE_OK ) die("open %s: %s", zPath, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  sqlite3_busy_timeout(db, 10000);
#ifdef BENCH_SQLCIPHER
  {
    char *z = sqlite3_mprintf("PRAGMA key = %Q", g_zKey);
    exec(db, z);
    sqlite3_free(z);
  }
#endif
#ifdef BENCH_SQLCIPHER
  /* SQLCipher ties the page size to its cipher page size (default 1024 in
  ** 3.x): set it on every open, or the file does not decode. */
  snprintf(zSql, sizeof(zSql), "PRAGMA cipher_page_size=%d", g.nPageSize);
  exec(db, zSql);
#else
  if( bCreate ){
    snprintf(zSql, sizeof(zSql), "PRAGMA page_size=%d", g.nPageSize);
    exec(db, zSql);
  }
#endif
  snprintf(zSql, sizeof(zSql), "PRAGMA cache_size=%d; PRAGMA synchronous=%s;",
           g.nCacheSize, g.zSync);
  exec(db, zSql);
  snprintf(zSql, sizeof(zSql), "PRAGMA journal_mode=%s", g.zJournal);
  exec(db, zSql);
  return db;
}

/* Close and (for tde) forget the process's open keystore, so that the next
** open pays the keystore open and the data-key unwrap again. */
static void forgetKeystore(void){
#ifndef BENCH_SQLCIPHER
  if( g.zConfig ) (void)tde_keystore_close(g.zConfig);
#endif
}

/* fsync then POSIX_FADV_DONTNEED: drop the OS cache for one file. */
static void dropOsCache(const char *zPath){
  int fd = open(zPath, O_RDONLY);
  if( fd<0 ) return;                 /* -wal may not exist */
  (void)fdatasync(fd);
  (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}
static void dropOsCacheDb(const char *zDb){
  char z[PATH_MAX + 8];
  dropOsCache(zDb);
  snprintf(z, sizeof(z), "%s-wal", zDb); dropOsCache(z);
  snprintf(z, sizeof(z), "%s-journal", zDb); dropOsCache(z);
}

/* ---- data set --------------------------------------------------------------- */

static void insertT1Range(sqlite3 *db, sqlite3_stmt *pIns, int64_t iFirst, int64_t n){
  char z[101];
  int64_t id;
  for(id=iFirst; id<iFirst+n; id++){
    valB(id, z);
    sqlite3_bind_int64(pIns, 1, id);
    sqlite3_bind_int64(pIns, 2, valA(id));
    sqlite3_bind_text(pIns, 3, z, 100, SQLITE_TRANSIENT);
    stepDone(db, pIns, "insert t1");
  }
}

static int64_t accountBalance0(int64_t aid){ return (int64_t)(splitmix(g.iSeed * 31 + (uint64_t)aid) % 10000); }

/* t1: nRows rows (dml, scans, bounce); pgbench tables at scale nScale. */
static void buildDataSet(void){
  sqlite3 *db;
  sqlite3_stmt *p;
  int64_t id, n;
  char zFiller[85];
  unlink(g.zDb);
  db = openDb(g.zDb, 1);
  exec(db, "CREATE TABLE t1(id INTEGER PRIMARY KEY, a INTEGER NOT NULL, b TEXT NOT NULL);"
           "CREATE INDEX t1a ON t1(a);"
           "CREATE TABLE pgbench_branches(bid INTEGER PRIMARY KEY, bbalance INTEGER, filler TEXT);"
           "CREATE TABLE pgbench_tellers(tid INTEGER PRIMARY KEY, bid INTEGER, tbalance INTEGER, filler TEXT);"
           "CREATE TABLE pgbench_accounts(aid INTEGER PRIMARY KEY, bid INTEGER, abalance INTEGER, filler TEXT);"
           "CREATE TABLE pgbench_history(tid INTEGER, bid INTEGER, aid INTEGER, delta INTEGER, mtime INTEGER, filler TEXT);");
  exec(db, "BEGIN");
  p = prep(db, "INSERT INTO t1(id,a,b) VALUES(?,?,?)");
  for(id=1; id<=g.nRows; id+=10000){
    n = g.nRows - id + 1 < 10000 ? g.nRows - id + 1 : 10000;
    insertT1Range(db, p, id, n);
  }
  sqlite3_finalize(p);
  memset(zFiller, ' ', 84); zFiller[84] = 0;
  p = prep(db, "INSERT INTO pgbench_branches VALUES(?,0,NULL)");
  for(id=1; id<=g.nScale; id++){ sqlite3_bind_int64(p, 1, id); stepDone(db, p, "branches"); }
  sqlite3_finalize(p);
  p = prep(db, "INSERT INTO pgbench_tellers VALUES(?,?,0,NULL)");
  for(id=1; id<=10*(int64_t)g.nScale; id++){
    sqlite3_bind_int64(p, 1, id); sqlite3_bind_int64(p, 2, (id-1)/10+1);
    stepDone(db, p, "tellers");
  }
  sqlite3_finalize(p);
  /* abalance starts at a generated value (pgbench uses 0) so that the
  ** select-only checksum proves the right rows were read; the branch and
  ** teller balances stay 0 and the history empty. */
  p = prep(db, "INSERT INTO pgbench_accounts VALUES(?,?,?,?)");
  for(id=1; id<=100000*(int64_t)g.nScale; id++){
    sqlite3_bind_int64(p, 1, id); sqlite3_bind_int64(p, 2, (id-1)/100000+1);
    sqlite3_bind_int64(p, 3, accountBalance0(id));
    sqlite3_bind_text(p, 4, zFiller, 84, SQLITE_STATIC);
    stepDone(db, p, "accounts");
  }
  sqlite3_finalize(p);
  exec(db, "COMMIT");
  if( sqlite3_stricmp(g.zJournal, "WAL")==0 ) exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  check(db, sqlite3_close(db), "close");
  outBegin();
  outStr("op", "build");
  outNum("rows", (double)g.nRows);
  outNum("scale", g.nScale);
  outEnd();
}

/* ---- workloads ---------------------------------------------------------------- */

/* insert: 500-row batches, one commit per batch, new ids past the data set. */
static void wInsert(void){
  sqlite3 *db = openDb(g.zDb, 0);
  sqlite3_stmt *pIns = prep(db, "INSERT INTO t1(id,a,b) VALUES(?,?,?)");
  sqlite3_stmt *pSum;
  Samples lat = {0};
  int64_t iNext = g.nRows + 1, nDone = 0, id;
  uint64_t sumExp = 0, sumGot = 0;
  double t0 = now(), t, tEnd;
  do{
    exec(db, "BEGIN");
    insertT1Range(db, pIns, iNext, 500);
    t = now();
    exec(db, "COMMIT");
    samplesAdd(&lat, (now() - t) * 1000);
    iNext += 500;
    nDone += 500;
  }while( now() - t0 < g.rSeconds );
  tEnd = now();
  sqlite3_finalize(pIns);
  /* checksum: every inserted row read back */
  for(id=g.nRows+1; id<iNext; id++) sumExp += expectedRow(id);
  pSum = prep(db, "SELECT id,a,b FROM t1 WHERE id>?");
  sqlite3_bind_int64(pSum, 1, g.nRows);
  while( sqlite3_step(pSum)==SQLITE_ROW ){
    sumGot += rowHash(sqlite3_column_int64(pSum, 0), sqlite3_column_int64(pSum, 1),
                      (const char*)sqlite3_column_text(pSum, 2), (size_t)sqlite3_column_bytes(pSum, 2));
  }
  check(db, sqlite3_finalize(pSum), "checksum");
  if( sumGot!=sumExp ) die("insert: checksum mismatch (%016llx != %016llx)",
                           (unsigned long long)sumGot, (unsigned long long)sumExp);
  check(db, sqlite3_close(db), "close");
  outBegin();
  outNum("rows_per_s", (double)nDone / (tEnd - t0));
  outNum("rows", (double)nDone);
  outNum("elapsed_s", tEnd - t0);
  outNum("commit_ms_mean", mean(&lat));
  outNum("commit_ms_p50", pct(&lat, 0.5));
  outNum("commit_ms_p99", pct(&lat, 0.99));
  outU64("checksum", sumGot);
  outSamples("commit_ms", &lat, 2000);
  outEnd();
}

/* delete-replenish: per transaction delete 1,000 consecutive rows and
** insert them again (same ids and values): the table keeps its size. */
static void wDeleteReplenish(void){
  sqlite3 *db = openDb(g.zDb, 0);
  sqlite3_stmt *pIns = prep(db, "INSERT INTO t1(id,a,b) VALUES(?,?,?)");
  sqlite3_stmt *pDel = prep(db, "DELETE FROM t1 WHERE id>=? AND id<?");
  sqlite3_stmt *pSum;
  Samples lat = {0}, txn = {0};
  Rng rng = { g.iSeed ^ 0xde1e7e };
  int64_t nDone = 0, i0, nChk = 0;
  uint64_t sumGot = 0, sumExp = 0;
  double t0 = now(), tA, t, tEnd;
  if( g.nRows < 1000 ) die("delete-replenish needs --rows >= 1000");
  do{
    i0 = 1 + (int64_t)(rngNext(&rng) % (uint64_t)(g.nRows - 999));
    tA = now();
    exec(db, "BEGIN");
    sqlite3_bind_int64(pDel, 1, i0);
    sqlite3_bind_int64(pDel, 2, i0 + 1000);
    stepDone(db, pDel, "delete");
    if( sqlite3_changes(db)!=1000 ) die("delete-replenish: deleted %d rows, not 1000", sqlite3_changes(db));
    insertT1Range(db, pIns, i0, 1000);
    t = now();
    exec(db, "COMMIT");
    samplesAdd(&lat, (now() - t) * 1000);
    samplesAdd(&txn, (now() - tA) * 1000);
    nDone += 1000;
  }while( now() - t0 < g.rSeconds );
  tEnd = now();
  sqlite3_finalize(pIns);
  sqlite3_finalize(pDel);
  /* checksum: the whole table is as built */
  pSum = prep(db, "SELECT id,a,b FROM t1");
  while( sqlite3_step(pSum)==SQLITE_ROW ){
    int64_t id = sqlite3_column_int64(pSum, 0);
    sumGot += rowHash(id, sqlite3_column_int64(pSum, 1),
                      (const char*)sqlite3_column_text(pSum, 2), (size_t)sqlite3_column_bytes(pSum, 2));
    sumExp += expectedRow(id);
    nChk++;
  }
  check(db, sqlite3_finalize(pSum), "checksum");
  if( sumGot!=sumExp || nChk!=g.nRows ) die("delete-replenish: checksum mismatch");
  check(db, sqlite3_close(db), "close");
  outBegin();
  outNum("rows_per_s", (double)nDone / (tEnd - t0));
  outNum("rows", (double)nDone);
  outNum("elapsed_s", tEnd - t0);
  outNum("commit_ms_mean", mean(&lat));
  outNum("commit_ms_p50", pct(&lat, 0.5));
  outNum("commit_ms_p99", pct(&lat, 0.99));
  outNum("txn_ms_p50", pct(&txn, 0.5));
  outU64("checksum", sumGot);
  outSamples("commit_ms", &lat, 2000);
  outEnd();
}

/* One full scan of t1 on a new connection, parsing every row. */
static double scanOnce(int bCold, uint64_t *pSum, int64_t *pnRow){
  sqlite3 *db;
  sqlite3_stmt *p;
  double t0;
  if( bCold ) dropOsCacheDb(g.zDb);
  /* The new connection (empty SQLite cache) and its key set-up are not
  ** timed: sqlcipher derives its key from the passphrase here, which is
  ** the bounce workload's business, not the scan's. */
  db = openDb(g.zDb, 0);
  (void)one(db, "SELECT count(*) FROM sqlite_master");
  t0 = now();
  p = prep(db, "SELECT id,a,b FROM t1");
  *pSum = 0; *pnRow = 0;
  while( sqlite3_step(p)==SQLITE_ROW ){
    *pSum += rowHash(sqlite3_column_int64(p, 0), sqlite3_column_int64(p, 1),
                     (const char*)sqlite3_column_text(p, 2), (size_t)sqlite3_column_bytes(p, 2));
    (*pnRow)++;
  }
  check(db, sqlite3_finalize(p), "scan");
  t0 = now() - t0;
  check(db, sqlite3_close(db), "close");
  return t0;
}

static void wScan(int bCold){
  Samples s = {0};
  uint64_t sum = 0, sumExp = 0;
  int64_t nRow = 0, id;
  double t0 = now();
  for(id=1; id<=g.nRows; id++) sumExp += expectedRow(id);
  if( !bCold ){ double x = scanOnce(0, &sum, &nRow); (void)x; }   /* warm the OS cache */
  t0 = now();
  do{
    samplesAdd(&s, scanOnce(bCold, &sum, &nRow));
    if( sum!=sumExp || nRow!=g.nRows ) die("scan: checksum mismatch (%lld rows)", (long long)nRow);
  }while( now() - t0 < g.rSeconds || s.n < 3 );
  outBegin();
  outNum("s_per_scan", pct(&s, 0.5));
  outNum("scans", (double)s.n);
  outNum("mb_per_s", (double)g.nRows * 120 / 1e6 / pct(&s, 0.5));
  outU64("checksum", sum);
  outSamples("scan_s", &s, 2000);
  outEnd();
}

/* bounce: close, open (keystore open and data-key unwrap included:
** tde_keystore_close() before each observation), first query. */
static void wBounce(void){
  Samples s = {0};
  uint64_t sum = 0;
  char z[101];
  double t0 = now(), t;
  valB(1, z);
  do{
    sqlite3 *db;
    sqlite3_stmt *p;
    forgetKeystore();
    t = now();
    db = openDb(g.zDb, 0);
    p = prep(db, "SELECT b FROM t1 WHERE id=1");
    if( sqlite3_step(p)!=SQLITE_ROW ) die("bounce: first query: %s", sqlite3_errmsg(db));
    if( memcmp(sqlite3_column_text(p, 0), z, 100)!=0 ) die("bounce: wrong row");
    sum = fnv(0xcbf29ce484222325ULL, sqlite3_column_text(p, 0), 100);
    sqlite3_finalize(p);
    check(db, sqlite3_close(db), "close");
    samplesAdd(&s, (now() - t) * 1000);
  }while( (now() - t0 < g.rSeconds || s.n < 5) && s.n < 500 );
  outBegin();
  outNum("bounce_ms", pct(&s, 0.5));
  outNum("bounce_ms_min", pct(&s, 0.0));
  outNum("observations", (double)s.n);
  outU64("checksum", sum);
  outSamples("bounce_obs_ms", &s, 500);
  outEnd();
}

/* row-at-a-time (seed 003): nRatRows single-row inserts, then as many
** deletes by a non-indexed predicate (name = 'eygle'||i), one commit each
** phase, as in the PL/SQL loops of the seed. */
static void wRowAtATime(void){
  sqlite3 *db = openDb(g.zDb, 0);
  sqlite3_stmt *pIns, *pDel;
  char z[32];
  int i, nDel = 0;
  double t0, t1, t2, tc;
  exec(db, "CREATE TABLE rat(id INTEGER, name TEXT)");
  pIns = prep(db, "INSERT INTO rat VALUES(?,?)");
  pDel = prep(db, "DELETE FROM rat WHERE name=?");
  t0 = now();
  exec(db, "BEGIN");
  for(i=1; i<=g.nRatRows; i++){
    int n = snprintf(z, sizeof(z), "eygle%d", i);
    sqlite3_bind_int(pIns, 1, i);
    sqlite3_bind_text(pIns, 2, z, n, SQLITE_STATIC);
    stepDone(db, pIns, "rat insert");
  }
  exec(db, "COMMIT");
  t1 = now();
  /* the count is not timed against either phase */
  if( one(db, "SELECT count(*) FROM rat")!=g.nRatRows ) die("row-at-a-time: insert count");
  tc = now() - t1;
  exec(db, "BEGIN");
  for(i=1; i<=g.nRatRows; i++){
    int n = snprintf(z, sizeof(z), "eygle%d", i);
    sqlite3_bind_text(pDel, 1, z, n, SQLITE_STATIC);
    stepDone(db, pDel, "rat delete");
    nDel += sqlite3_changes(db);
  }
  exec(db, "COMMIT");
  t2 = now() - tc;
  if( nDel!=g.nRatRows || one(db, "SELECT count(*) FROM rat")!=0 ) die("row-at-a-time: delete count");
  sqlite3_finalize(pIns);
  sqlite3_finalize(pDel);
  check(db, sqlite3_close(db), "close");
  outBegin();
  outNum("rows_per_s", 2.0 * g.nRatRows / ((t2 - t1) + (t1 - t0)));
  outNum("insert_rows_per_s", g.nRatRows / (t1 - t0));
  outNum("delete_rows_per_s", g.nRatRows / (t2 - t1));
  outNum("insert_s", t1 - t0);
  outNum("delete_s", t2 - t1);
  outU64("checksum", (uint64_t)nDel * 1000003ULL + (uint64_t)g.nRatRows);
  outEnd();
}

/* tpcb: pgbench's TPC-B-like transaction (rw) or its select-only
** variant, nThreads threads with a connection each. */
typedef struct Worker {
  int iThread, bRw;
  int64_t nTx, nBad;
  int64_t sumDelta;
  uint64_t sumRead;
  Samples lat;
  pthread_t tid;
} Worker;
/* Threads open their connections (keystore, key derivation) before the
** clock starts; the main thread sets the stop time after the barrier. */
static pthread_barrier_t g_barrier;
static volatile double g_tStop;

static void *tpcbThread(void *pArg){
  Worker *w = pArg;
  sqlite3 *db = openDb(g.zDb, 0);
  Rng rng = { g.iSeed * 1315423911ULL + (uint64_t)w->iThread };
  int64_t nAcc = 100000 * (int64_t)g.nScale;
  sqlite3_stmt *pSel = prep(db, "SELECT abalance FROM pgbench_accounts WHERE aid=?");
  sqlite3_stmt *pUa = 0, *pUt = 0, *pUb = 0, *pIh = 0;
  if( w->bRw ){
    pUa = prep(db, "UPDATE pgbench_accounts SET abalance=abalance+? WHERE aid=?");
    pUt = prep(db, "UPDATE pgbench_tellers SET tbalance=tbalance+? WHERE tid=?");
    pUb = prep(db, "UPDATE pgbench_branches SET bbalance=bbalance+? WHERE bid=?");
    pIh = prep(db, "INSERT INTO pgbench_history(tid,bid,aid,delta,mtime,filler) VALUES(?,?,?,?,?,NULL)");
  }
  (void)one(db, "SELECT count(*) FROM sqlite_master");
  pthread_barrier_wait(&g_barrier);
  pthread_barrier_wait(&g_barrier);
  while( now() < g_tStop ){
    int64_t aid = 1 + (int64_t)(rngNext(&rng) % (uint64_t)nAcc);
    int64_t bid = 1 + (int64_t)(rngNext(&rng) % (uint64_t)g.nScale);
    int64_t tid = 1 + (int64_t)(rngNext(&rng) % (uint64_t)(10 * g.nScale));
    int64_t delta = (int64_t)(rngNext(&rng) % 10001) - 5000;
    double t = now();
    if( w->bRw ){
      exec(db, "BEGIN IMMEDIATE");
      sqlite3_bind_int64(pUa, 1, delta); sqlite3_bind_int64(pUa, 2, aid); stepDone(db, pUa, "ua");
    }
    sqlite3_bind_int64(pSel, 1, aid);
    if( sqlite3_step(pSel)!=SQLITE_ROW ) die("tpcb: select: %s", sqlite3_errmsg(db));
    w->sumRead += (uint64_t)sqlite3_column_int64(pSel, 0);
    if( !w->bRw && sqlite3_column_int64(pSel, 0)!=accountBalance0(aid) ) w->nBad++;
    sqlite3_reset(pSel);
    if( w->bRw ){
      sqlite3_bind_int64(pUt, 1, delta); sqlite3_bind_int64(pUt, 2, tid); stepDone(db, pUt, "ut");
      sqlite3_bind_int64(pUb, 1, delta); sqlite3_bind_int64(pUb, 2, bid); stepDone(db, pUb, "ub");
      sqlite3_bind_int64(pIh, 1, tid); sqlite3_bind_int64(pIh, 2, bid);
      sqlite3_bind_int64(pIh, 3, aid); sqlite3_bind_int64(pIh, 4, delta);
      sqlite3_bind_int64(pIh, 5, (int64_t)w->nTx); stepDone(db, pIh, "ih");
      exec(db, "COMMIT");
      w->sumDelta += delta;
    }
    samplesAdd(&w->lat, (now() - t) * 1000);
    w->nTx++;
  }
  sqlite3_finalize(pSel);
  sqlite3_finalize(pUa); sqlite3_finalize(pUt); sqlite3_finalize(pUb); sqlite3_finalize(pIh);
  check(db, sqlite3_close(db), "close");
  return 0;
}

static void wTpcb(int bRw){
  Worker *aW = calloc((size_t)g.nThreads, sizeof(Worker));
  Samples all = {0};
  int64_t nTx = 0, sumDelta = 0, nBad = 0;
  uint64_t sumRead = 0;
  double t0, t1;
  int i;
  size_t k;
  if( !aW ) die("out of memory");
  pthread_barrier_init(&g_barrier, 0, (unsigned)g.nThreads + 1);
  for(i=0; i<g.nThreads; i++){
    aW[i].iThread = i; aW[i].bRw = bRw;
    if( pthread_create(&aW[i].tid, 0, tpcbThread, &aW[i]) ) die("pthread_create");
  }
  pthread_barrier_wait(&g_barrier);      /* every connection is open */
  t0 = now();
  g_tStop = t0 + g.rSeconds;
  pthread_barrier_wait(&g_barrier);      /* go */
  for(i=0; i<g.nThreads; i++){
    pthread_join(aW[i].tid, 0);
    nTx += aW[i].nTx; sumDelta += aW[i].sumDelta; nBad += aW[i].nBad; sumRead += aW[i].sumRead;
    for(k=0; k<aW[i].lat.n; k++) samplesAdd(&all, aW[i].lat.a[k]);
    free(aW[i].lat.a);
  }
  t1 = now();
  free(aW);
  if( nBad ) die("tpcb: %lld reads returned a wrong balance", (long long)nBad);
  if( bRw ){
    sqlite3 *db = openDb(g.zDb, 0);
    int64_t a = one(db, "SELECT sum(abalance) FROM pgbench_accounts");
    int64_t b = one(db, "SELECT sum(bbalance) FROM pgbench_branches");
    int64_t t = one(db, "SELECT sum(tbalance) FROM pgbench_tellers");
    int64_t h = one(db, "SELECT sum(delta) FROM pgbench_history");
    int64_t n = one(db, "SELECT count(*) FROM pgbench_history");
    int64_t a0 = 0, aid;
    for(aid=1; aid<=100000*(int64_t)g.nScale; aid++) a0 += accountBalance0(aid);
    check(db, sqlite3_close(db), "close");
    if( a - a0!=sumDelta || b!=sumDelta || t!=sumDelta || h!=sumDelta || n!=nTx ){
      die("tpcb: balances do not add up (history %lld rows, %lld transactions)",
          (long long)n, (long long)nTx);
    }
  }
  outBegin();
  outNum("tps", (double)nTx / (t1 - t0));
  outNum("transactions", (double)nTx);
  outNum("threads", g.nThreads);
  outNum("lat_ms_mean", mean(&all));
  outNum("lat_ms_p50", pct(&all, 0.5));
  outNum("lat_ms_p99", pct(&all, 0.99));
  outU64("checksum", sumRead ^ (uint64_t)sumDelta);
  outEnd();
}

/* ---- main ------------------------------------------------------------------------ */

#ifdef BENCH_SQLCIPHER
static void readKeyFile(void){
  FILE *f = fopen(g.zKeyFile, "r");
  size_t n;
  if( !f ) die("%s: %s", g.zKeyFile, strerror(errno));
  n = fread(g_zKey, 1, sizeof(g_zKey) - 1, f);
  fclose(f);
  while( n>0 && (g_zKey[n-1]=='\n' || g_zKey[n-1]=='\r') ) n--;
  g_zKey[n] = 0;
  if( n==0 ) die("%s: empty key file", g.zKeyFile);
}
#endif

static void versions(void){
  outBegin();
  outStr("op", "versions");
  outStr("sqlite", sqlite3_libversion());
#ifdef BENCH_SQLCIPHER
  {
    sqlite3 *db = 0;
    sqlite3_stmt *p;
    sqlite3_open(":memory:", &db);
    p = prep(db, "PRAGMA cipher_version");
    outStr("sqlcipher", sqlite3_step(p)==SQLITE_ROW ? (const char*)sqlite3_column_text(p, 0) : "?");
    sqlite3_finalize(p);
    sqlite3_close(db);
  }
#else
  outStr("sqlite_tde", tde_version());
  outStr("openssl", OpenSSL_version(OPENSSL_VERSION));
#endif
  outEnd();
}

static int driver(int argc, char **argv){
  int i;
  for(i=0; i<argc; i++){
    const char *z = argv[i];
    const char *v = i+1<argc ? argv[i+1] : 0;
#define ARG(name) (strcmp(z, name)==0 && v && (i++, 1))
    if( ARG("--op") ) g.zOp = v;
    else if( ARG("--workload") ) g.zWorkload = v;
    else if( ARG("--db") ) g.zDb = v;
    else if( ARG("--config") ) g.zConfig = v;
    else if( ARG("--keyfile") ) g.zKeyFile = v;
    else if( ARG("--seconds") ) g.rSeconds = atof(v);
    else if( ARG("--seed") ) g.iSeed = strtoull(v, 0, 10);
    else if( ARG("--rows") ) g.nRows = atoll(v);
    else if( ARG("--scale") ) g.nScale = atoi(v);
    else if( ARG("--threads") ) g.nThreads = atoi(v);
    else if( ARG("--rat-rows") ) g.nRatRows = atoi(v);
    else if( ARG("--journal") ) g.zJournal = v;
    else if( ARG("--synchronous") ) g.zSync = v;
    else if( ARG("--page-size") ) g.nPageSize = atoi(v);
    else if( ARG("--cache-size") ) g.nCacheSize = atoi(v);
    else if( strcmp(z, "--plain")==0 ) g.zConfig = 0;
    else die("unknown or incomplete option %s", z);
#undef ARG
  }
  if( strcmp(g.zOp, "versions")==0 ){ versions(); return 0; }
  if( !g.zDb ) die("--db is required");
  if( g.nRows < 1 || g.nScale < 1 || g.nThreads < 1 || g.nRatRows < 1 ) die("sizes must be >= 1");
#ifdef BENCH_SQLCIPHER
  if( !g.zKeyFile ) die("--keyfile is required for sqlcipher");
  readKeyFile();
#else
  if( g.zKeyFile ) die("--keyfile: only the sqlcipher driver takes a key");
  tde_register(0);
#endif
  if( strcmp(g.zOp, "build")==0 ){ buildDataSet(); return 0; }
  if( strcmp(g.zOp, "run")!=0 ) die("--op build|run|versions");
  if( strcmp(g.zWorkload, "insert")==0 ) wInsert();
  else if( strcmp(g.zWorkload, "delete-replenish")==0 ) wDeleteReplenish();
  else if( strcmp(g.zWorkload, "cold-scan")==0 ) wScan(1);
  else if( strcmp(g.zWorkload, "warm-scan")==0 ) wScan(0);
  else if( strcmp(g.zWorkload, "bounce")==0 ) wBounce();
  else if( strcmp(g.zWorkload, "row-at-a-time")==0 ) wRowAtATime();
  else if( strcmp(g.zWorkload, "tpcb-select")==0 ) wTpcb(0);
  else if( strcmp(g.zWorkload, "tpcb-rw")==0 ) wTpcb(1);
  else die("unknown workload %s", g.zWorkload);
  return 0;
}

/* Without "driver": run the orchestrator installed next to this program. */
int main(int argc, char **argv){
  char zExe[PATH_MAX], zPy[PATH_MAX + 32];
  ssize_t n;
  char *zSlash;
  char **azArg;
  int i;
  if( argc>1 && strcmp(argv[1], "driver")==0 ) return driver(argc - 2, argv + 2);
  n = readlink("/proc/self/exe", zExe, sizeof(zExe) - 1);
  if( n<0 ) die("cannot find this program: %s", strerror(errno));
  zExe[n] = 0;
  zSlash = strrchr(zExe, '/');
  if( zSlash ) *zSlash = 0;
  snprintf(zPy, sizeof(zPy), "%s/sqlite-tde-bench.py", zExe);
  azArg = calloc((size_t)argc + 3, sizeof(char*));
  if( !azArg ) die("out of memory");
  azArg[0] = (char*)"python3";
  azArg[1] = zPy;
  for(i=1; i<argc; i++) azArg[i+1] = argv[i];
  execv("/usr/bin/python3", azArg);
  die("cannot run /usr/bin/python3 %s: %s", zPy, strerror(errno));
}
