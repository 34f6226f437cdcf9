/*
** crash_writer: the writer and the checker of the crash-consistency test
** (tests/integration/test_crash.sh).
**
**   crash_writer run   DB CFG JOURNAL PAGESIZE CKPT SEED [NMAX [KILL_US]]
**   crash_writer check DB CFG SEED LOG FLOOR
**
** run: opens DB through the tde VFS (synchronous=FULL, a tiny page cache so
** that large transactions spill dirty pages into the database file before
** COMMIT) and commits numbered transactions 1, 2, 3, ... (continuing after
** the highest one already in the database) until it is killed, or until it
** has committed NMAX of them when NMAX > 0.  KILL_US > 0 arms a timer
** when the database is open and set up: KILL_US microseconds later its
** signal handler sends SIGKILL to the process, wherever the writer is.
** The script uses it so that kill moments fall into the transaction
** stream whatever the process start-up costs (ASan builds start slowly);
** it also kills writers from outside at random moments, start-up included.  Before
** each BEGIN it writes "B k" to stdout, after COMMIT returns "C k"; around
** an explicit PRAGMA wal_checkpoint(TRUNCATE) (CKPT > 0: every CKPT
** transactions, also wal_autocheckpoint=8) "K k" and "k k".  Each line is
** one write(2) to stdout (a file): a completed write survives SIGKILL in
** the page cache, so the log is exactly what the writer saw committed.
**
** Transaction k, with h = mix(SEED, k), does all of this or none of it:
**   INSERT t(seq=k, touched=0, m=m(k))
**   INSERT m(k) rows p(k, j, v=k*1000+j, b=randomblob(len(k,j)))
**          (1 in 8 transactions is large: 150..299 rows of up to 1 KiB)
**   UPDATE t SET touched=k for three earlier seq numbers drawn from h
**   DELETE FROM p WHERE k = k-KEEP   (the database stays small)
**   UPDATE ledger SET last=k, cnt=cnt+1, total=total+k
**
** check: opens DB through tde (recovering a hot journal or WAL), runs
** PRAGMA integrity_check, recomputes what transactions 1..L must have left
** (L = highest seq present) and compares every table exactly, runs
** tde_verify() on the database and its WAL, and compares L with the log
** and FLOOR (the L the previous check found): L == max(FLOOR, last "C"),
** except that when the writer died between "B k" and the return of that
** COMMIT, L is k-1 or k.  Prints one line of figures; exit 0 when all
** hold, 1 otherwise (with the reason on stderr).
**
** Never prints key material; fixed seeds only (the script prints them).
*/
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <sqlite3.h>
#include "sqlite-tde.h"

#define KEEP 40                 /* p rows kept for the last KEEP transactions */
#define NTOUCH 3                /* earlier t rows each transaction updates */

static uint64_t mix(uint64_t x){   /* splitmix64 finaliser */
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
static uint64_t txHash(uint64_t iSeed, int64_t k){ return mix(iSeed ^ mix((uint64_t)k)); }

/* Rows of p transaction k inserts. */
static int txRows(uint64_t iSeed, int64_t k){
  uint64_t h = txHash(iSeed, k);
  if( (h & 7) == 0 ) return 150 + (int)((h >> 3) % 150);
  return 1 + (int)((h >> 3) % 8);
}
/* Blob length of row j of transaction k. */
static int txLen(uint64_t iSeed, int64_t k, int j){
  uint64_t h = mix(txHash(iSeed, k) + (uint64_t)j + 1);
  int big = (txHash(iSeed, k) & 7) == 0;
  return 1 + (int)(h % (big ? 1024u : 300u));   /* randomblob(0) gives 1 byte */
}
/* The i-th earlier seq transaction k touches (k > 1). */
static int64_t txTouch(uint64_t iSeed, int64_t k, int i){
  uint64_t h = mix(txHash(iSeed, k) + 1000u + (uint64_t)i);
  return 1 + (int64_t)(h % (uint64_t)(k - 1));
}

static void die(const char *zFmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *zFmt, ...){
  va_list ap;
  fprintf(stderr, "crash_writer: ");
  va_start(ap, zFmt);
  vfprintf(stderr, zFmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(1);
}

static void logLine(const char *zTag, int64_t k){
  char z[64];
  int n = snprintf(z, sizeof z, "%s %" PRId64 "\n", zTag, k);
  if( write(1, z, (size_t)n) != (ssize_t)n ) die("log write: %s", strerror(errno));
}

static void onAlarm(int sig){
  (void)sig;
  kill(getpid(), SIGKILL);
}

static void armKill(int64_t nMicros){
  struct itimerval t;
  memset(&t, 0, sizeof t);
  t.it_value.tv_sec = (time_t)(nMicros / 1000000);
  t.it_value.tv_usec = (suseconds_t)(nMicros % 1000000);
  signal(SIGALRM, onAlarm);
  if( setitimer(ITIMER_REAL, &t, 0) != 0 ) die("setitimer: %s", strerror(errno));
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

static void exec(sqlite3 *db, const char *zSql){
  char *zErr = 0;
  if( sqlite3_exec(db, zSql, 0, 0, &zErr) != SQLITE_OK ){
    die("%s: %s (%s)", zSql, zErr ? zErr : "?", tde_last_error());
  }
}

static sqlite3_stmt *prep(sqlite3 *db, const char *zSql){
  sqlite3_stmt *p = 0;
  if( sqlite3_prepare_v2(db, zSql, -1, &p, 0) != SQLITE_OK ) die("prepare %s: %s", zSql, sqlite3_errmsg(db));
  return p;
}

static void step(sqlite3 *db, sqlite3_stmt *p){
  int rc = sqlite3_step(p);
  if( rc != SQLITE_DONE && rc != SQLITE_ROW ) die("%s: %s (%s)", sqlite3_sql(p), sqlite3_errmsg(db), tde_last_error());
  sqlite3_reset(p);
}

static int64_t queryInt(sqlite3 *db, const char *zSql){
  sqlite3_stmt *p = prep(db, zSql);
  int64_t v = 0;
  int rc = sqlite3_step(p);
  if( rc == SQLITE_ROW ) v = sqlite3_column_int64(p, 0);
  else if( rc != SQLITE_DONE ) die("%s: %s", zSql, sqlite3_errmsg(db));
  sqlite3_finalize(p);
  return v;
}

static const char zSchema[] =
  "CREATE TABLE IF NOT EXISTS t(seq INTEGER PRIMARY KEY, touched INTEGER NOT NULL, m INTEGER NOT NULL);"
  "CREATE TABLE IF NOT EXISTS p(k INTEGER NOT NULL, j INTEGER NOT NULL, v INTEGER NOT NULL, b BLOB,"
  "  PRIMARY KEY(k, j));"
  "CREATE TABLE IF NOT EXISTS ledger(id INTEGER PRIMARY KEY, last INTEGER, cnt INTEGER, total INTEGER);"
  "INSERT OR IGNORE INTO ledger VALUES(1, 0, 0, 0);";

static int cmdRun(int argc, char **argv){
  const char *zDb, *zCfg, *zJournal;
  int nPage, nCkpt;
  int64_t nMax, nKillUs;
  uint64_t iSeed;
  sqlite3 *db;
  sqlite3_stmt *pInsT, *pInsP, *pTouch, *pDel, *pLedger;
  char zSql[128];
  int64_t k;

  if( argc < 8 || argc > 10 ) die("usage: crash_writer run DB CFG JOURNAL PAGESIZE CKPT SEED [NMAX [KILL_US]]");
  nMax = argc >= 9 ? strtoll(argv[8], 0, 10) : 0;
  nKillUs = argc >= 10 ? strtoll(argv[9], 0, 10) : 0;
  zDb = argv[2]; zCfg = argv[3]; zJournal = argv[4];
  nPage = atoi(argv[5]); nCkpt = atoi(argv[6]);
  iSeed = strtoull(argv[7], 0, 10);

  db = openDb(zDb, zCfg);
  snprintf(zSql, sizeof zSql, "PRAGMA page_size=%d", nPage);
  exec(db, zSql);
  snprintf(zSql, sizeof zSql, "PRAGMA journal_mode=%s", zJournal);
  exec(db, zSql);
  exec(db, "PRAGMA synchronous=FULL; PRAGMA cache_size=10; PRAGMA cache_spill=ON");
  if( nCkpt > 0 ) exec(db, "PRAGMA wal_autocheckpoint=8");
  exec(db, "BEGIN IMMEDIATE");
  exec(db, zSchema);
  exec(db, "COMMIT");
  if( queryInt(db, "PRAGMA page_size") != nPage ) die("page size is not %d", nPage);

  pInsT = prep(db, "INSERT INTO t(seq, touched, m) VALUES(?1, 0, ?2)");
  pInsP = prep(db, "INSERT INTO p(k, j, v, b) VALUES(?1, ?2, ?1*1000+?2, randomblob(?3))");
  pTouch = prep(db, "UPDATE t SET touched=?2 WHERE seq=?1");
  pDel = prep(db, "DELETE FROM p WHERE k=?1");
  pLedger = prep(db, "UPDATE ledger SET last=?1, cnt=cnt+1, total=total+?1 WHERE id=1");

  k = queryInt(db, "SELECT coalesce(max(seq), 0) FROM t") + 1;
  if( nKillUs > 0 ) armKill(nKillUs);
  if( nMax > 0 ) nMax += k - 1;
  for(; k < INT32_MAX && (nMax <= 0 || k <= nMax); k++){
    int m = txRows(iSeed, k), j, i;
    logLine("B", k);
    exec(db, "BEGIN");
    sqlite3_bind_int64(pInsT, 1, k);
    sqlite3_bind_int(pInsT, 2, m);
    step(db, pInsT);
    for(j = 0; j < m; j++){
      sqlite3_bind_int64(pInsP, 1, k);
      sqlite3_bind_int(pInsP, 2, j);
      sqlite3_bind_int(pInsP, 3, txLen(iSeed, k, j));
      step(db, pInsP);
    }
    for(i = 0; k > 1 && i < NTOUCH; i++){
      sqlite3_bind_int64(pTouch, 1, txTouch(iSeed, k, i));
      sqlite3_bind_int64(pTouch, 2, k);
      step(db, pTouch);
    }
    if( k > KEEP ){
      sqlite3_bind_int64(pDel, 1, k - KEEP);
      step(db, pDel);
    }
    sqlite3_bind_int64(pLedger, 1, k);
    step(db, pLedger);
    exec(db, "COMMIT");
    logLine("C", k);
    if( nCkpt > 0 && k % nCkpt == 0 ){
      logLine("K", k);
      exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
      logLine("k", k);
    }
  }
  sqlite3_finalize(pInsT); sqlite3_finalize(pInsP); sqlite3_finalize(pTouch);
  sqlite3_finalize(pDel); sqlite3_finalize(pLedger);
  sqlite3_close(db);
  return 0;
}

/* Last lines of the writer's log: the last "C" number and what the writer
** was doing when it died (B: in a transaction, K: in an explicit
** checkpoint, C or k: between transactions, "": before its first). */
static void readLog(const char *zLog, int64_t *pnCommitted, int64_t *pnBegun, char *pcState){
  FILE *f = fopen(zLog, "r");
  char zLine[128];
  *pnCommitted = -1;
  *pnBegun = -1;
  *pcState = 0;
  if( f == 0 ) die("open %s: %s", zLog, strerror(errno));
  while( fgets(zLine, sizeof zLine, f) ){
    char c;
    long long v;
    if( strchr(zLine, '\n') == 0 ) break;          /* cannot happen: one write(2) per line */
    if( sscanf(zLine, "%c %lld", &c, &v) != 2 ) die("bad log line: %s", zLine);
    if( c == 'C' ) *pnCommitted = v;
    if( c == 'B' ) *pnBegun = v;
    *pcState = c;
  }
  fclose(f);
}

static int g_nFail = 0;
static void fail(const char *zFmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *zFmt, ...){
  va_list ap;
  fprintf(stderr, "crash_writer check: FAIL: ");
  va_start(ap, zFmt);
  vfprintf(stderr, zFmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  g_nFail++;
}

static int cmdCheck(int argc, char **argv){
  const char *zDb, *zCfg, *zLog;
  uint64_t iSeed;
  sqlite3 *db;
  sqlite3_stmt *p;
  int64_t L, nCommitted, nBegun, nFloor, nChecked = 0, iBad = 0, k, nRows;
  int64_t *aTouched;
  char cState;
  int rc;

  if( argc != 7 ) die("usage: crash_writer check DB CFG SEED LOG FLOOR");
  zDb = argv[2]; zCfg = argv[3]; iSeed = strtoull(argv[4], 0, 10); zLog = argv[5];
  nFloor = strtoll(argv[6], 0, 10);
  readLog(zLog, &nCommitted, &nBegun, &cState);
  if( nCommitted < nFloor ) nCommitted = nFloor;

  db = openDb(zDb, zCfg);
  p = prep(db, "PRAGMA integrity_check");
  while( (rc = sqlite3_step(p)) == SQLITE_ROW ){
    const char *z = (const char *)sqlite3_column_text(p, 0);
    if( z == 0 || strcmp(z, "ok") != 0 ) fail("integrity_check: %s", z ? z : "NULL");
  }
  if( rc != SQLITE_DONE ) fail("integrity_check: %s (%s)", sqlite3_errmsg(db), tde_last_error());
  sqlite3_finalize(p);

  /* A database killed before its schema committed has no tables yet. */
  if( queryInt(db, "SELECT count(*) FROM sqlite_schema WHERE name IN ('t','p','ledger')") != 3 ){
    if( nCommitted > 0 ) fail("schema missing although the writer committed %" PRId64, nCommitted);
    L = 0;
  }else{
    int64_t nT, minT, maxT;
    L = queryInt(db, "SELECT coalesce(max(seq), 0) FROM t");
    nT = queryInt(db, "SELECT count(*) FROM t");
    minT = queryInt(db, "SELECT coalesce(min(seq), 0) FROM t");
    maxT = L;
    if( nT != L || (L > 0 && minT != 1) || maxT != L ){
      fail("t holds %" PRId64 " rows, seq %" PRId64 "..%" PRId64 ": not exactly 1..L", nT, minT, maxT);
    }
    if( queryInt(db, "SELECT last FROM ledger WHERE id=1") != L
     || queryInt(db, "SELECT cnt FROM ledger WHERE id=1") != L
     || queryInt(db, "SELECT total FROM ledger WHERE id=1") != L * (L + 1) / 2 ){
      fail("ledger does not match L=%" PRId64, L);
    }
    /* m column and p rows of the last KEEP transactions. */
    p = prep(db, "SELECT seq, touched, m FROM t ORDER BY seq");
    aTouched = calloc((size_t)L + 2, sizeof(int64_t));
    if( aTouched == 0 ) die("out of memory");
    for(k = 2; k <= L; k++){
      int i;
      for(i = 0; i < NTOUCH; i++) aTouched[txTouch(iSeed, k, i)] = k;
    }
    while( sqlite3_step(p) == SQLITE_ROW ){
      int64_t s = sqlite3_column_int64(p, 0);
      if( s < 1 || s > L ) continue;
      if( sqlite3_column_int64(p, 1) != aTouched[s] ){
        fail("t[%" PRId64 "].touched = %" PRId64 ", expected %" PRId64, s, (int64_t)sqlite3_column_int64(p, 1), aTouched[s]);
      }
      if( sqlite3_column_int64(p, 2) != txRows(iSeed, s) ) fail("t[%" PRId64 "].m wrong", s);
    }
    sqlite3_finalize(p);
    free(aTouched);
    nRows = 0;
    p = prep(db, "SELECT k, count(*), sum(v), sum(length(b)) FROM p GROUP BY k ORDER BY k");
    k = L > KEEP ? L - KEEP + 1 : 1;
    while( sqlite3_step(p) == SQLITE_ROW ){
      int64_t kk = sqlite3_column_int64(p, 0);
      int m, j;
      int64_t sumV = 0, sumLen = 0;
      if( kk != k ){ fail("p holds rows of transaction %" PRId64 ", expected %" PRId64, kk, k); break; }
      m = txRows(iSeed, k);
      for(j = 0; j < m; j++){ sumV += k * 1000 + j; sumLen += txLen(iSeed, k, j); }
      if( sqlite3_column_int64(p, 1) != m || sqlite3_column_int64(p, 2) != sumV
       || sqlite3_column_int64(p, 3) != sumLen ){
        fail("p rows of transaction %" PRId64 " differ from what it wrote", k);
      }
      nRows += m;
      k++;
    }
    sqlite3_finalize(p);
    if( k != L + 1 ) fail("p lacks rows of transactions %" PRId64 "..%" PRId64, k, L);
  }

  /* What the writer saw committed must be there; at most the one
  ** transaction it was inside may have committed too. */
  if( cState == 'B' && nBegun != nCommitted + 1 ) fail("log: began %" PRId64 " after %" PRId64, nBegun, nCommitted);
  if( L < nCommitted ) fail("LOST: %" PRId64 " transactions were committed, database holds %" PRId64, nCommitted, L);
  if( cState == 'B' ? L > nCommitted + 1 : L > nCommitted ){
    fail("database holds %" PRId64 " transactions, at most %" PRId64 " were committed", L, nCommitted + (cState == 'B'));
  }

  rc = tde_verify(db, "main", &nChecked, &iBad, 0, 0);
  if( rc != TDE_OK ){
    fail("tde_verify: %s, first damage at %" PRId64 " (%s)", tde_errstr(rc), iBad, tde_last_error());
  }
  if( sqlite3_close(db) != SQLITE_OK ) fail("close: %s", sqlite3_errmsg(db));
  printf("L=%" PRId64 " committed=%" PRId64 " state=%c checked=%" PRId64 " %s\n",
         L, nCommitted, cState ? cState : '-', nChecked, g_nFail ? "FAIL" : "ok");
  return g_nFail ? 1 : 0;
}

int main(int argc, char **argv){
  int rc = tde_register(0);
  if( rc != TDE_OK ) die("tde_register: %s", tde_errstr(rc));
  if( argc >= 2 && strcmp(argv[1], "run") == 0 ) return cmdRun(argc, argv);
  if( argc >= 2 && strcmp(argv[1], "check") == 0 ) return cmdCheck(argc, argv);
  die("usage: crash_writer run|check ...");
}
