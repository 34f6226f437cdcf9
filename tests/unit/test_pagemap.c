/*
** Issue 14 case 5: a database page rolled back to an older authentic
** version of itself, in WAL mode, and the page map that refuses it
** (docs/FORMAT.md "Page rollback: the page map"; the header's map root R,
** G and n in "Header slot, version 2").
**
** The attack in every case: a table acct whose one row (id 1) lives on
** its root page n > 2 (a one-row table's root is its only page; n read
** from sqlite_schema); value=999 is committed and checkpointed with
** TRUNCATE, and the stored bytes of page n (file offset 8192 +
** (n-1)*4096) are saved; then value=0 and more commits and checkpoints
** (TRUNCATE and RESTART); the database is closed and the saved bytes are
** put back over page n.  Each test has its own folder below the group's
** scratch folder.  What each asserts:
**
**  - case5_page_rollback_v1: under format_version = 1 the reopened
**    database reads value 999 and count(*) 1 from acct (the stale page
**    is authentic in version 1: the attack works there, as the issue
**    reproduced).
**  - case5_page_rollback_v2: the default version 2: the read fails with
**    SQLITE_IOERR_AUTH (the step's code and sqlite3_extended_errcode),
**    tde_last_error() (the SQL function) names the database, "page
**    map" and "page <n>", and so does an error log line; the database
**    file and DB-tdemap are byte-identical before and after the refused
**    session; with the current page n put back the database reads value
**    0 and integrity_check is ok.
**  - map_missing_v2: the same history without the rollback: DB-tdemap
**    exists; deleted, open + read fails with SQLITE_IOERR_AUTH and
**    tde_last_error() names DB-tdemap; put back, value 0 reads again.
**  - map_tampered_v2: one byte of page n's 8-byte tag entry flipped in
**    both slots of map page 0 (offsets 16 + 8*(n-1) and 4096 + that):
**    refused with SQLITE_IOERR_AUTH, tde_last_error() names DB-tdemap
**    and says "does not match the database header"; the untouched map
**    put back, value 0 reads again.
**  - no_false_refusals_v2: (a) a writer and readers on other connections
**    of the process: a reader whose read mark is in the WAL, a slot-0
**    reader begun after a full backfill (it reads pages the checkpoint
**    copied, not yet in the map), across a WAL restart, and a reader
**    begun on a partial backfill (half its pages from the WAL, half from
**    the file; each state checked by the checkpoints' log and
**    checkpointed columns); every re-read of the whole table inside a
**    snapshot succeeds with that snapshot's sums while the writer commits
**    to the same pages and runs PASSIVE checkpoints; once they end
**    wal_checkpoint(TRUNCATE) completes (busy 0, log 0) and a new
**    connection reads the final sums with integrity_check ok.  (b) A new
**    database of more than 508 pages (two map pages) goes through 50
**    cycles of random inserts, updates and deletes (fixed seed), a VACUUM
**    every tenth cycle, a spilled transaction rolled back just before the
**    checkpoint every seventh (frames past the last commit frame), then
**    wal_checkpoint RESTART and TRUNCATE alternately (a RESTART followed
**    by a commit, which restarts the log); after each a new connection
**    scans the whole table without error, its count and sums equal the
**    writer's, and integrity_check is ok.
**  - mode_switch_v2: WAL (map built) -> journal_mode=DELETE -> writes
**    to page n (outside the WAL) -> reopen, reads fine -> journal_mode=WAL
**    -> reopen and read before any checkpoint (an old root left in force
**    would refuse page n here) -> writes and checkpoints: all reads fine,
**    integrity_check ok; then the page rollback after at least one
**    TRUNCATE in WAL mode is refused as in case5_page_rollback_v2, and the
**    current page put back reads again.
**  - exclusive_mode_v2: PRAGMA locking_mode=EXCLUSIVE with WAL (no
**    shared WAL index): the history above, close, reopen exclusive: value
**    0 and integrity_check ok; the page rollback refused under an
**    exclusive and under a normal reopen; the current page back reads.
**
**  - long_reader_v2: a reader open across the writer's fold refuses the
**    page put back at the version it had read before (it reads the header
**    again when SQLite's WAL index shows a new generation).
**  - remap_v2: DB-tdemap deleted is refused until tde_db_remap (sqlite-tde
**    remap) accepts the pages; page_map reads "on", then "off", then "on"
**    again once a WAL restart rebuilt the map, which refuses the stale
**    page again; version 1 shows "off (format version 1)" and has nothing
**    to remap.
**
** The refusal tests fail on code without the page map; the version-1 test
** and the no-false-refusal tests pass there.
** Against SQLite 3.40 (system) and 3.53 (test_pagemap_353).
*/
#include "tdetest.h"

#include <fcntl.h>

#include "tde_int.h"
#include "keys/keys.h"   /* freshtest.h's makeDb */

#define NROW 600
#define PGSZ 4096
#include "freshtest.h"

#define HDRSZ 8192              /* the header region before page 1 */
#define MAP_PAGE 4096           /* a DB-tdemap slot */
#define MAP_ENTRIES 508         /* data pages per map page */

/* zScratch/tde-v1.conf: the group's wallet, format_version = 1. */
static char zCfgV1[PATH_MAX];

/* ---- helpers ---------------------------------------------------------------- */

/* A new folder zScratch/<zName>-XXXXXX and zDir/zName.db in it; the
** database is created in the suite's format (tdetest.h; a pin of an
** earlier case ends here). */
static void caseDb(const char *zName, char *zDb){
  char zDir[PATH_MAX], zFile[PATH_MAX];
  tdeSetCreateVersion(tdetestNewFormat());
  if( snprintf(zDir, sizeof(zDir), "%s/%s-XXXXXX", zScratch, zName)>=(int)sizeof(zDir) ){
    fail_msg("path too long");
  }
  if( mkdtemp(zDir)==0 ) fail_msg("mkdtemp %s", zDir);
  if( snprintf(zFile, sizeof(zFile), "%s.db", zName)>=(int)sizeof(zFile) ) fail_msg("name too long");
  joinPath(zDb, zDir, zFile);
}

/* caseDb, the database pinned to format 2: a case about DB-tdemap, which
** version 3 does not have (the map lies in the database file). */
static void caseDbV2(const char *zName, char *zDb){
  caseDb(zName, zDb);
  tdeSetCreateVersion(2);
}

/* Open zDb through tde under zConfig, extended result codes on. */
static sqlite3 *openDb(const char *zDb, const char *zConfig){
  sqlite3 *db = 0;
  int rc = openTdeCfg(zDb, zConfig, &db);
  if( rc!=SQLITE_OK ) fail_msg("open %s: %d %s", zDb, rc, db ? sqlite3_errmsg(db) : "");
  sqlite3_extended_result_codes(db, 1);
  return db;
}

/* PRAGMA wal_checkpoint(zMode); its busy, log and checkpointed columns
** into aRes (may be NULL).  Fails the test on an error. */
static void checkpoint(sqlite3 *db, const char *zMode, int *aRes){
  char zSql[64];
  sqlite3_stmt *p = 0;
  int rc;
  snprintf(zSql, sizeof(zSql), "PRAGMA wal_checkpoint(%s)", zMode);
  if( sqlite3_prepare_v2(db, zSql, -1, &p, 0)!=SQLITE_OK ) fail_msg("%s: %s", zSql, sqlite3_errmsg(db));
  rc = sqlite3_step(p);
  if( rc!=SQLITE_ROW ){
    sqlite3_finalize(p);
    fail_msg("%s: %d %s (%s)", zSql, rc, sqlite3_errmsg(db), tde_last_error());
  }
  if( aRes ) for(int i=0; i<3; i++) aRes[i] = sqlite3_column_int(p, i);
  sqlite3_finalize(p);
}

/* A TRUNCATE checkpoint that must complete: nothing left in the WAL. */
static void checkpointTruncate(sqlite3 *db){
  int aRes[3];
  checkpoint(db, "TRUNCATE", aRes);
  assert_int_equal(aRes[0], 0);
  assert_int_equal(aRes[1], 0);
}

/* Page n's offset in the file open as fd: its layout from the format
** version its header region names (bytes 8..9, big-endian; version 3's
** pages lie among map regions, keys/layout.h). */
static off_t pageOffIn(int fd, int iPg){
  unsigned char aV[2];
  TdeLayout L;
  assert_int_equal(pread(fd, aV, 2, 8), 2);
  L.version = (aV[0]<<8) | aV[1];
  L.pgsz = PGSZ;
  L.cursor = 0;
  return (off_t)tdeLayoutPageOff(&L, (uint32_t)iPg);
}

/* Page n's stored bytes (PGSZ) of zDb into / from a. */
static void pageRead(const char *zDb, int iPg, unsigned char *a){
  int fd = open(zDb, O_RDONLY);
  assert_true(fd>=0);
  assert_int_equal(pread(fd, a, PGSZ, pageOffIn(fd, iPg)), PGSZ);
  close(fd);
}
static void pageWrite(const char *zDb, int iPg, const unsigned char *a){
  int fd = open(zDb, O_RDWR);
  assert_true(fd>=0);
  assert_int_equal(pwrite(fd, a, PGSZ, pageOffIn(fd, iPg)), PGSZ);
  assert_int_equal(close(fd), 0);
}

/* Open zDb (with bExcl in locking_mode=EXCLUSIVE) and read acct's row 1:
** the read's extended result code, *pv the value.  Closes. */
static int readValue(const char *zDb, const char *zConfig, int bExcl, sqlite3_int64 *pv){
  sqlite3 *db = 0;
  int rc = openTdeCfg(zDb, zConfig, &db);
  *pv = -1;
  if( rc==SQLITE_OK ){
    sqlite3_extended_result_codes(db, 1);
    if( bExcl ) exec(db, "PRAGMA locking_mode=EXCLUSIVE");
    rc = stepInt(db, "SELECT value FROM acct WHERE id=1", pv);
  }
  sqlite3_close(db);
  return rc;
}

/* The text of SELECT tde_last_error() on db (after a failed read there:
** the schema is on page 1, so the statement needs no page that failed),
** malloc'd; the caller frees.  If the statement cannot run (the failure
** was the schema's), the C tde_last_error(). */
static char *lastErrorSql(sqlite3 *db){
  sqlite3_stmt *p = 0;
  char *z = 0;
  if( sqlite3_prepare_v2(db, "SELECT tde_last_error()", -1, &p, 0)==SQLITE_OK
   && sqlite3_step(p)==SQLITE_ROW ){
    const char *zT = (const char*)sqlite3_column_text(p, 0);
    z = strdup(zT ? zT : "");
  }
  sqlite3_finalize(p);
  if( z==0 ) z = strdup(tde_last_error());
  assert_non_null(z);
  return z;
}

/* Buffers a test holds across calls that may fail: a failure longjmps
** out of the test, so they are freed by the next heldFree() (each test
** calls it when done, the group teardown after the last) instead. */
static void *apHeld[4];
static void heldFree(void){
  for(size_t i=0; i<sizeof(apHeld)/sizeof(apHeld[0]); i++){ free(apHeld[i]); apHeld[i] = 0; }
}
static unsigned char *hold(unsigned char *a){
  for(size_t i=0; i<sizeof(apHeld)/sizeof(apHeld[0]); i++){
    if( apHeld[i]==0 ){ apHeld[i] = a; return a; }
  }
  fail_msg("hold: no free slot");
  return a;
}

/* z mentions "page <iPg>" as a whole number. */
static int mentionsPage(const char *z, int iPg){
  char zPg[32];
  size_t n = (size_t)snprintf(zPg, sizeof(zPg), "page %d", iPg);
  for(const char *p = strstr(z, zPg); p; p = strstr(p + 1, zPg)){
    if( p[n]<'0' || p[n]>'9' ) return 1;
  }
  return 0;
}

/* zPath's bytes equal a[0..n) (a NULL: zPath does not exist). */
static int fileIs(const char *zPath, const unsigned char *a, size_t n){
  size_t nNow = 0;
  unsigned char *aNow = readAll(zPath, &nNow);
  int bSame = (a==0) ? (aNow==0 && !fileExists(zPath)) : (aNow && nNow==n && memcmp(aNow, a, n)==0);
  free(aNow);
  return bSame;
}

/* The table filler (about 20 pages of two rows each) and then acct with
** its one row (1, 1): acct's root page, returned, is its only page and
** lies beyond filler's pages. */
static int makeTables(sqlite3 *db){
  sqlite3_int64 n = 0;
  exec(db, "CREATE TABLE filler(id INTEGER PRIMARY KEY, pad TEXT);"
           "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<40)"
           " INSERT INTO filler SELECT i, printf('%.1500c', 'f') FROM c;"
           "CREATE TABLE acct(id INTEGER PRIMARY KEY, value INT);"
           "INSERT INTO acct VALUES(1, 1);");
  assert_int_equal(stepInt(db, "SELECT rootpage FROM sqlite_schema WHERE name='acct'", &n), SQLITE_OK);
  assert_true(n>2 && n<=MAP_ENTRIES);      /* not page 1 or 2; in map page 0 */
  return (int)n;
}

/*
** The attacked history on a new database zDb (zConfig picks the format;
** bExcl: locking_mode=EXCLUSIVE): value=999 checkpointed with TRUNCATE,
** page n saved into aStale; value=0 and later commits with TRUNCATE and
** RESTART checkpoints; closed; page n as it is now into aCur.  Returns n.
*/
static int attackedHistory(const char *zDb, const char *zConfig, int bExcl,
                           unsigned char *aStale, unsigned char *aCur){
  sqlite3 *db = openDb(zDb, zConfig);
  sqlite3_int64 v = 0;
  int iPg;
  if( bExcl ) exec(db, "PRAGMA locking_mode=EXCLUSIVE");
  exec(db, "PRAGMA page_size=4096; PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;");
  iPg = makeTables(db);
  checkpointTruncate(db);                   /* version 2: the map is built here */
  exec(db, "UPDATE acct SET value=999 WHERE id=1");
  checkpointTruncate(db);
  pageRead(zDb, iPg, aStale);               /* the attacker's copy */
  exec(db, "UPDATE acct SET value=0 WHERE id=1");
  checkpointTruncate(db);
  exec(db, "INSERT INTO acct VALUES(2, 5); UPDATE filler SET pad=printf('%.1500c', 'g') WHERE id<=10;");
  checkpointTruncate(db);
  exec(db, "UPDATE filler SET pad=printf('%.1500c', 'h') WHERE id>30");
  checkpoint(db, "RESTART", 0);
  exec(db, "UPDATE filler SET pad=printf('%.1500c', 'i') WHERE id=20");   /* restarts the log */
  checkpointTruncate(db);
  assert_int_equal(stepInt(db, "SELECT value FROM acct WHERE id=1", &v), SQLITE_OK);
  assert_int_equal(v, 0);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  pageRead(zDb, iPg, aCur);
  assert_memory_not_equal(aStale, aCur, PGSZ);
  return iPg;
}

/*
** Page n of zDb rolled back to aStale is refused (version 2): the read's
** code, tde_last_error(), the log line; the database and its
** map unchanged by the refused session; aCur put back reads value 0.
*/
static void expectRollbackRefused(const char *zDb, int iPg, int bExcl,
                                  const unsigned char *aStale, const unsigned char *aCur){
  char zMap[PATH_MAX];
  unsigned char *aDb, *aMap;
  size_t nDb = 0, nMap = 0;
  sqlite3 *db = 0;
  sqlite3_int64 v = 0;
  char *zErr = 0;
  int rc;

  sidePath(zMap, zDb, "-tdemap");
  pageWrite(zDb, iPg, aStale);
  heldFree();
  aDb = hold(readAll(zDb, &nDb));
  aMap = hold(readAll(zMap, &nMap));
  assert_non_null(aDb);

  zLogSeen[0] = 0;
  tde_set_log(captureLog, 0);
  db = openDb(zDb, zCfg);
  if( bExcl ) exec(db, "PRAGMA locking_mode=EXCLUSIVE");
  rc = stepInt(db, "SELECT value FROM acct WHERE id=1", &v);
  if( rc==SQLITE_OK ){
    fail_msg("page %d rolled back was accepted (value %lld)", iPg, (long long)v);
  }
  assert_int_equal(rc, SQLITE_IOERR_AUTH);
  assert_int_equal(sqlite3_extended_errcode(db), SQLITE_IOERR_AUTH);
  zErr = lastErrorSql(db);
  if( !strstr(zErr, "page map") || !mentionsPage(zErr, iPg) || !strstr(zErr, zDb) ){
    fail_msg("tde_last_error() (page %d): %s", iPg, zErr);
  }
  /* The log line too, and it is this refusal's (tde_last_error() may still
  ** hold an earlier one's text if this one set none). */
  if( !strstr(zLogSeen, "page map") || !mentionsPage(zLogSeen, iPg) || !strstr(zLogSeen, zDb) ){
    fail_msg("log (page %d): %s", iPg, zLogSeen);
  }
  free(zErr);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  tde_set_log(quietLog, 0);

  /* The refusal wrote nothing: no repair, no new map, no header update. */
  assert_true(fileIs(zDb, aDb, nDb));        /* version 3: the map is in it */
  assert_true(fileIs(zMap, aMap, nMap));     /* version 3: none, nor made */
  heldFree();

  /* The current page back: it reads again. */
  pageWrite(zDb, iPg, aCur);
  assert_int_equal(readValue(zDb, zCfg, bExcl, &v), SQLITE_OK);
  assert_int_equal(v, 0);
  db = openDb(zDb, zCfg);
  assert_true(integrityOk(db));
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* ---- case 5: one page rolled back ------------------------------------------- */

/* zDb, opened under zConfig, is of format version iVersion. */
static void assertFormat(const char *zDb, const char *zConfig, sqlite3_int64 iVersion){
  sqlite3 *db = openDb(zDb, zConfig);
  sqlite3_int64 v = 0;
  assert_int_equal(stepInt(db, "SELECT format_version FROM tde_status WHERE schema='main'", &v), SQLITE_OK);
  assert_int_equal(v, iVersion);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

static void test_case5_page_rollback_v1(void **state){
  char zDb[PATH_MAX];
  unsigned char aStale[PGSZ], aCur[PGSZ];
  sqlite3 *db = 0;
  sqlite3_int64 v = 0;
  int iPg;
  (void)state;
  caseDb("rollback-v1", zDb);
  iPg = attackedHistory(zDb, zCfgV1, 0, aStale, aCur);
  assertFormat(zDb, zCfgV1, 1);

  pageWrite(zDb, iPg, aStale);
  db = openDb(zDb, zCfgV1);
  assert_int_equal(stepInt(db, "SELECT value FROM acct WHERE id=1", &v), SQLITE_OK);
  assert_int_equal(v, 999);                  /* stale, and authentic in version 1 */
  assert_int_equal(stepInt(db, "SELECT count(*) FROM acct", &v), SQLITE_OK);
  assert_int_equal(v, 1);                    /* row 2, committed later, is gone */
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

static void test_case5_page_rollback_v2(void **state){
  char zDb[PATH_MAX];
  unsigned char aStale[PGSZ], aCur[PGSZ];
  int iPg;
  (void)state;
  caseDb("rollback-v2", zDb);
  iPg = attackedHistory(zDb, zCfg, 0, aStale, aCur);
  assertFormat(zDb, zCfg, tdetestNewFormat());
  expectRollbackRefused(zDb, iPg, 0, aStale, aCur);
}

/* ---- the map itself: missing, tampered -------------------------------------- */

/* Open zDb and read acct under zCfg, expecting a refusal that names the
** map: SQLITE_IOERR_AUTH (whether the open or the read refuses), and
** tde_last_error() naming zMap and, if not NULL, containing zAlso. */
static void expectMapRefused(const char *zDb, const char *zMap, const char *zAlso){
  sqlite3 *db = 0;
  sqlite3_int64 v = 0;
  char *zErr;
  int rc = openTdeCfg(zDb, zCfg, &db);
  if( rc==SQLITE_OK ){
    sqlite3_extended_result_codes(db, 1);
    rc = stepInt(db, "SELECT value FROM acct WHERE id=1", &v);
  }
  if( rc==SQLITE_OK ) fail_msg("read with a bad %s was accepted (value %lld)", zMap, (long long)v);
  assert_int_equal(rc & 0xff, SQLITE_IOERR);
  assert_int_equal(sqlite3_extended_errcode(db), SQLITE_IOERR_AUTH);
  zErr = lastErrorSql(db);
  if( !strstr(zErr, zMap) || (zAlso && !strstr(zErr, zAlso)) ) fail_msg("tde_last_error(): %s", zErr);
  free(zErr);
  sqlite3_close(db);
}

static void test_map_missing_v2(void **state){
  char zDb[PATH_MAX], zMap[PATH_MAX];
  unsigned char aStale[PGSZ], aCur[PGSZ], *aMap = 0;
  size_t nMap = 0;
  sqlite3_int64 v = 0;
  (void)state;
  heldFree();
  caseDbV2("map-missing", zDb);
  sidePath(zMap, zDb, "-tdemap");
  attackedHistory(zDb, zCfg, 0, aStale, aCur);
  aMap = hold(readAll(zMap, &nMap));
  if( aMap==0 ) fail_msg("%s was not written", zMap);
  assert_true(nMap>=MAP_PAGE && nMap%MAP_PAGE==0);
  assert_int_equal(unlink(zMap), 0);
  expectMapRefused(zDb, zMap, 0);
  assert_false(fileExists(zMap));            /* the refusal built no new map */
  writeAll(zMap, aMap, nMap);
  assert_int_equal(readValue(zDb, zCfg, 0, &v), SQLITE_OK);
  assert_int_equal(v, 0);
  heldFree();
}

static void test_map_tampered_v2(void **state){
  char zDb[PATH_MAX], zMap[PATH_MAX];
  unsigned char aStale[PGSZ], aCur[PGSZ], *aMap = 0, *aBad = 0;
  size_t nMap = 0, iEntry;
  sqlite3_int64 v = 0;
  int iPg;
  (void)state;
  heldFree();
  caseDbV2("map-tampered", zDb);
  sidePath(zMap, zDb, "-tdemap");
  iPg = attackedHistory(zDb, zCfg, 0, aStale, aCur);
  aMap = hold(readAll(zMap, &nMap));
  if( aMap==0 ) fail_msg("%s was not written", zMap);
  assert_true(nMap>=2*MAP_PAGE);             /* both slots of map page 0 written */
  aBad = hold(malloc(nMap));
  assert_non_null(aBad);
  memcpy(aBad, aMap, nMap);
  iEntry = 16 + 8*(size_t)(iPg - 1);
  aBad[iEntry + 3] ^= 0x40;                  /* slot 0 */
  aBad[MAP_PAGE + iEntry + 3] ^= 0x40;       /* slot 1 */
  writeAll(zMap, aBad, nMap);
  expectMapRefused(zDb, zMap, "does not match the database header");
  assert_true(fileIs(zMap, aBad, nMap));     /* not repaired behind our back */
  writeAll(zMap, aMap, nMap);
  assert_int_equal(readValue(zDb, zCfg, 0, &v), SQLITE_OK);
  assert_int_equal(v, 0);
  heldFree();
}

/* ---- no false refusals ------------------------------------------------------ */

/* count(*), sum(v) and sum(length(pad)) of t on db: SQLite's code. */
static int scanT(sqlite3 *db, sqlite3_int64 *aOut){
  sqlite3_stmt *p = 0;
  int rc = sqlite3_prepare_v2(db, "SELECT count(*), sum(v), sum(length(pad)) FROM t", -1, &p, 0);
  aOut[0] = aOut[1] = aOut[2] = -1;
  if( rc==SQLITE_OK ){
    rc = sqlite3_step(p);
    if( rc==SQLITE_ROW ){
      for(int i=0; i<3; i++) aOut[i] = sqlite3_column_int64(p, i);
      rc = SQLITE_OK;
    }
  }
  sqlite3_finalize(p);
  return rc;
}

/* A scan of t on db that must succeed and match aWant (3 values). */
static void scanEquals(const char *zTag, sqlite3 *db, const sqlite3_int64 *aWant){
  sqlite3_int64 a[3];
  int rc = scanT(db, a);
  if( rc!=SQLITE_OK ) fail_msg("[%s] scan: %d %s (%s)", zTag, rc, sqlite3_errmsg(db), tde_last_error());
  if( a[0]!=aWant[0] || a[1]!=aWant[1] || a[2]!=aWant[2] ){
    fail_msg("[%s] scan %lld/%lld/%lld, want %lld/%lld/%lld", zTag, (long long)a[0], (long long)a[1],
             (long long)a[2], (long long)aWant[0], (long long)aWant[1], (long long)aWant[2]);
  }
}

/* A reader connection: small cache, so re-reads inside a snapshot go to
** the WAL or the database file rather than the page cache. */
static sqlite3 *openReader(const char *zDb){
  sqlite3 *db = openDb(zDb, zCfg);
  exec(db, "PRAGMA cache_size=4; PRAGMA wal_autocheckpoint=0;");
  return db;
}

/* BEGIN and a first scan on r: the snapshot's sums into aSnap. */
static void beginSnapshot(sqlite3 *r, sqlite3_int64 *aSnap){
  int rc;
  exec(r, "BEGIN");
  rc = scanT(r, aSnap);
  if( rc!=SQLITE_OK ) fail_msg("snapshot scan: %d %s (%s)", rc, sqlite3_errmsg(r), tde_last_error());
}

/* Every row of t updated (v+1, pad in another letter): every page. */
static void updateAll(sqlite3 *w, const char *zWhere){
  char zSql[256];
  snprintf(zSql, sizeof(zSql), "UPDATE t SET v=v+1, pad=printf('%%.900c', char(65 + (v+1)%%26)) %s", zWhere);
  exec(w, zSql);
}

/* A fresh connection scans t with no error, with the writer's sums, and
** integrity_check is ok. */
static void freshScanMatches(const char *zTag, const char *zDb, sqlite3 *w){
  sqlite3_int64 aW[3];
  sqlite3 *db;
  assert_int_equal(scanT(w, aW), SQLITE_OK);
  db = openDb(zDb, zCfg);
  scanEquals(zTag, db, aW);
  if( !integrityOk(db) ) fail_msg("[%s] integrity_check (%s)", zTag, tde_last_error());
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* (a) readers in the same process hold snapshots across commits and
** checkpoints of the pages they read.  The checkpoints' log and
** checkpointed columns show that each reader is in the state named. */
static void readersAcrossCheckpoints(void){
  char zDb[PATH_MAX];
  sqlite3 *w, *r1, *r2;
  sqlite3_int64 aSnap1[3], aSnap2[3];
  int aRes[3], nOne;
  caseDb("readers", zDb);
  w = openDb(zDb, zCfg);
  exec(w, "PRAGMA page_size=4096; PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;"
          "CREATE TABLE t(id INTEGER PRIMARY KEY, v INT, pad TEXT);"
          "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<400)"
          " INSERT INTO t SELECT i, 0, printf('%.900c', 'A') FROM c;");
  checkpointTruncate(w);
  checkpointTruncate(w);                     /* a map in force, if there is one */
  r1 = openReader(zDb);
  r2 = openReader(zDb);

  /* A reader whose mark is in the WAL; the checkpoint stops at it. */
  updateAll(w, "");
  beginSnapshot(r1, aSnap1);
  updateAll(w, "");
  checkpoint(w, "PASSIVE", aRes);            /* backfills up to r1's mark */
  assert_true(aRes[2]>0 && aRes[2]<aRes[1]);
  scanEquals("r1 after passive", r1, aSnap1);
  updateAll(w, "WHERE id%2=0");
  checkpoint(w, "PASSIVE", 0);
  updateAll(w, "");
  scanEquals("r1 after more", r1, aSnap1);
  exec(r1, "COMMIT");
  checkpointTruncate(w);
  freshScanMatches("after r1", zDb, w);

  /* A slot-0 reader (the WAL wholly backfilled when it began): it reads
  ** from the file the pages the checkpoint just copied, before any fold;
  ** the writer's next commit restarts the log (a fold) under it. */
  updateAll(w, "");
  checkpoint(w, "PASSIVE", aRes);
  assert_int_equal(aRes[0], 0);
  assert_true(aRes[1]>0 && aRes[2]==aRes[1]);
  nOne = aRes[1];                            /* frames of one updateAll */
  beginSnapshot(r1, aSnap1);
  scanEquals("slot-0 reader", r1, aSnap1);
  updateAll(w, "");                          /* restarts the WAL */
  checkpoint(w, "PASSIVE", aRes);            /* may not copy under it */
  assert_true(aRes[1]<=nOne + 2);            /* the log was restarted */
  scanEquals("slot-0 after restart", r1, aSnap1);
  updateAll(w, "WHERE id<=200");
  checkpoint(w, "PASSIVE", 0);
  scanEquals("slot-0 after more", r1, aSnap1);
  exec(r1, "COMMIT");
  freshScanMatches("after slot-0", zDb, w);

  /* A reader begun on a partial backfill: pages the second half of t
  ** lies on come from the file (copied from frames at or below the
  ** backfill), the first half from the WAL. */
  checkpointTruncate(w);
  updateAll(w, "");
  beginSnapshot(r2, aSnap2);                 /* holds the backfill at this commit */
  updateAll(w, "WHERE id<=200");
  checkpoint(w, "PASSIVE", aRes);            /* nBackfill = r2's mark < mxFrame */
  assert_true(aRes[2]>0 && aRes[2]<aRes[1]);
  beginSnapshot(r1, aSnap1);
  scanEquals("r2 partial", r2, aSnap2);
  exec(r2, "COMMIT");
  updateAll(w, "");
  checkpoint(w, "PASSIVE", 0);               /* up to r1's mark */
  scanEquals("r1 partial", r1, aSnap1);
  updateAll(w, "WHERE id>300");
  checkpoint(w, "RESTART", aRes);
  assert_int_equal(aRes[0], 1);              /* r1 still reads the WAL */
  scanEquals("r1 after restart attempt", r1, aSnap1);
  exec(r1, "COMMIT");

  checkpointTruncate(w);
  freshScanMatches("end", zDb, w);
  assert_int_equal(sqlite3_close(r1), SQLITE_OK);
  assert_int_equal(sqlite3_close(r2), SQLITE_OK);
  assert_int_equal(sqlite3_close(w), SQLITE_OK);
  {
    sqlite3_int64 aNow[3];
    sqlite3 *db = openDb(zDb, zCfg);          /* and after the last close */
    assert_int_equal(scanT(db, aNow), SQLITE_OK);
    assert_int_equal(aNow[0], 400);
    assert_true(integrityOk(db));
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
  }
}

/* A fixed-seed generator (xorshift64*): the same cycles every run. */
static uint64_t iRand = 0x9e3779b97f4a7c15ULL;
static unsigned rnd(unsigned n){
  iRand ^= iRand >> 12;
  iRand ^= iRand << 25;
  iRand ^= iRand >> 27;
  return (unsigned)((iRand * 0x2545f4914f6cdd1dULL) >> 33) % n;
}

/* (b) 50 cycles of random writes and checkpoints, each verified by a new
** connection. */
static void randomCycles(void){
  char zDb[PATH_MAX], zSql[256], zTag[32];
  sqlite3 *w;
  sqlite3_int64 nPg = 0;
  caseDb("cycles", zDb);
  iRand = 0x9e3779b97f4a7c15ULL;
  w = openDb(zDb, zCfg);
  exec(w, "PRAGMA page_size=4096; PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;"
          "CREATE TABLE t(id INTEGER PRIMARY KEY, v INT, pad TEXT);"
          "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<2200)"
          " INSERT INTO t SELECT i, i, printf('%.900c', 'a') FROM c;");
  assert_int_equal(stepInt(w, "PRAGMA page_count", &nPg), SQLITE_OK);
  assert_true(nPg>MAP_ENTRIES);              /* map pages 0 and 1 */
  for(int iCycle=0; iCycle<50; iCycle++){
    unsigned nIns = 5 + rnd(30), nUpd = 5 + rnd(30);
    snprintf(zTag, sizeof(zTag), "cycle %d", iCycle);
    exec(w, "BEGIN");
    for(unsigned i=0; i<nIns; i++){
      snprintf(zSql, sizeof(zSql), "INSERT INTO t(v, pad) VALUES(%u, printf('%%.%uc', 'n'))",
               rnd(1000), 10 + rnd(3000));
      execTagged(zTag, w, zSql);
    }
    for(unsigned i=0; i<nUpd; i++){
      snprintf(zSql, sizeof(zSql), "UPDATE t SET v=v+%u, pad=printf('%%.%uc', 'u') WHERE id=%u",
               1 + rnd(9), 10 + rnd(1500), 1 + rnd(2400));
      execTagged(zTag, w, zSql);
    }
    if( rnd(3)==0 ){
      snprintf(zSql, sizeof(zSql), "DELETE FROM t WHERE id%%37=%u", rnd(37));
      execTagged(zTag, w, zSql);
    }
    exec(w, "COMMIT");
    if( iCycle%10==9 ){
      /* The database shrinks: map entries beyond its size go to zero. */
      execTagged(zTag, w, "DELETE FROM t WHERE id%5=0; VACUUM;");
    }
    if( iCycle%7==6 ){
      /* Frames past the last commit frame: a fold must not take them. */
      execTagged(zTag, w, "PRAGMA cache_size=4; BEGIN;"
                          "UPDATE t SET pad=printf('%.800c', 'r') WHERE id%3=0;");
      execTagged(zTag, w, "ROLLBACK; PRAGMA cache_size=-2000;");
    }
    if( iCycle%2 ){
      int aRes[3];
      checkpoint(w, "RESTART", aRes);
      assert_int_equal(aRes[0], 0);
      assert_int_equal(aRes[2], aRes[1]);
      freshScanMatches(zTag, zDb, w);        /* backfilled, not yet restarted */
      execTagged(zTag, w, "UPDATE t SET v=v+1 WHERE id=(SELECT max(id) FROM t)");   /* restarts */
    }else{
      checkpointTruncate(w);
    }
    freshScanMatches(zTag, zDb, w);
    if( !integrityOk(w) ) fail_msg("[%s] integrity_check on the writer (%s)", zTag, tde_last_error());
  }
  assert_int_equal(sqlite3_close(w), SQLITE_OK);
  {
    sqlite3 *db = openDb(zDb, zCfg);
    assert_true(integrityOk(db));
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
  }
}

static void test_no_false_refusals_v2(void **state){
  (void)state;
  readersAcrossCheckpoints();
  randomCycles();
}

/* ---- journal mode switches and exclusive locking ---------------------------- */

static void test_mode_switch_v2(void **state){
  char zDb[PATH_MAX];
  unsigned char aStale[PGSZ], aCur[PGSZ];
  sqlite3 *db;
  sqlite3_int64 v = 0;
  int iPg;
  (void)state;
  caseDb("mode-switch", zDb);
  db = openDb(zDb, zCfg);
  exec(db, "PRAGMA page_size=4096; PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;");
  iPg = makeTables(db);
  checkpointTruncate(db);
  exec(db, "UPDATE acct SET value=50 WHERE id=1");
  checkpointTruncate(db);                    /* a map in force */

  /* Rollback mode: page n rewritten in place, outside the WAL. */
  exec(db, "PRAGMA journal_mode=DELETE");
  exec(db, "UPDATE acct SET value=111 WHERE id=1; UPDATE filler SET pad=printf('%.1500c', 'd') WHERE id<=20;");
  exec(db, "UPDATE acct SET value=value+1 WHERE id=1");
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  assert_int_equal(readValue(zDb, zCfg, 0, &v), SQLITE_OK);
  assert_int_equal(v, 112);

  /* Back to WAL: before any checkpoint, page n is the rollback-mode one;
  ** a map root left in force would refuse it. */
  db = openDb(zDb, zCfg);
  exec(db, "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;");
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  assert_int_equal(readValue(zDb, zCfg, 0, &v), SQLITE_OK);
  assert_int_equal(v, 112);
  db = openDb(zDb, zCfg);
  exec(db, "PRAGMA wal_autocheckpoint=0");
  assert_true(integrityOk(db));
  exec(db, "UPDATE filler SET pad=printf('%.1500c', 'w') WHERE id>20");
  checkpoint(db, "PASSIVE", 0);
  exec(db, "UPDATE acct SET value=999 WHERE id=1");
  checkpointTruncate(db);                    /* the map built again */
  pageRead(zDb, iPg, aStale);
  exec(db, "UPDATE acct SET value=0 WHERE id=1");
  checkpoint(db, "RESTART", 0);
  exec(db, "UPDATE filler SET pad=printf('%.1500c', 'x') WHERE id=1");
  checkpointTruncate(db);
  assert_true(integrityOk(db));
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  assert_int_equal(readValue(zDb, zCfg, 0, &v), SQLITE_OK);
  assert_int_equal(v, 0);
  db = openDb(zDb, zCfg);
  assert_int_equal(stepInt(db, "SELECT count(*) FROM filler WHERE pad LIKE 'x%'", &v), SQLITE_OK);
  assert_int_equal(v, 1);
  assert_true(integrityOk(db));
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  pageRead(zDb, iPg, aCur);
  assert_memory_not_equal(aStale, aCur, PGSZ);

  expectRollbackRefused(zDb, iPg, 0, aStale, aCur);
}

static void test_exclusive_mode_v2(void **state){
  char zDb[PATH_MAX];
  unsigned char aStale[PGSZ], aCur[PGSZ];
  sqlite3 *db;
  sqlite3_int64 v = 0;
  int iPg;
  (void)state;
  caseDb("exclusive", zDb);
  iPg = attackedHistory(zDb, zCfg, 1, aStale, aCur);
  assert_int_equal(readValue(zDb, zCfg, 1, &v), SQLITE_OK);
  assert_int_equal(v, 0);
  db = openDb(zDb, zCfg);
  exec(db, "PRAGMA locking_mode=EXCLUSIVE");
  assert_true(integrityOk(db));
  assert_int_equal(stepInt(db, "SELECT count(*) FROM acct", &v), SQLITE_OK);
  assert_int_equal(v, 2);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);

  expectRollbackRefused(zDb, iPg, 1, aStale, aCur);   /* exclusive reopen */
  expectRollbackRefused(zDb, iPg, 0, aStale, aCur);   /* normal reopen */
}

/* ---- the group --------------------------------------------------------------- */

/*
** A reader that stays open across the fold: it read page n (and loaded the
** map) while value was 999; the writer (another connection) sets 0 and
** folds with a TRUNCATE checkpoint; page n's old bytes are put back; the
** reader's next read transaction must refuse them (it reads the header
** again when SQLite's index shows a new WAL generation), not accept them
** against the map it loaded before.
*/
static void test_long_reader_v2(void **state){
  char zDb[PATH_MAX];
  unsigned char aOld[PGSZ];
  sqlite3 *r, *w;
  sqlite3_int64 v = 0;
  int iPg, rc;
  (void)state;
  caseDb("long-reader", zDb);
  w = openDb(zDb, zCfg);
  exec(w, "PRAGMA page_size=4096; PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;");
  iPg = makeTables(w);
  exec(w, "UPDATE acct SET value=999 WHERE id=1");
  checkpointTruncate(w);
  exec(w, "UPDATE filler SET pad=pad WHERE id=1");
  checkpointTruncate(w);                    /* the map holds value 999's page */
  pageRead(zDb, iPg, aOld);
  r = openDb(zDb, zCfg);
  assert_int_equal(stepInt(r, "SELECT value FROM acct WHERE id=1", &v), SQLITE_OK);
  assert_int_equal(v, 999);
  exec(w, "UPDATE acct SET value=0 WHERE id=1");
  checkpointTruncate(w);                    /* folded: the map holds value 0's page */
  exec(w, "UPDATE filler SET pad=pad WHERE id=2");   /* a new generation, not touching page n */
  pageWrite(zDb, iPg, aOld);
  rc = stepInt(r, "SELECT value FROM acct WHERE id=1", &v);
  if( rc==SQLITE_OK ) fail_msg("an open reader accepted page %d rolled back (value %lld)", iPg, (long long)v);
  assert_int_equal(rc, SQLITE_IOERR_AUTH);
  assert_int_equal(sqlite3_close(r), SQLITE_OK);
  assert_int_equal(sqlite3_close(w), SQLITE_OK);
}

/* The page_map column of tde_status for zDb under zConfig. */
static void pageMapStatus(const char *zDb, const char *zConfig, char *zOut, size_t nOut){
  sqlite3 *db = openDb(zDb, zConfig);
  sqlite3_stmt *p = 0;
  zOut[0] = 0;
  assert_int_equal(sqlite3_prepare_v2(db, "SELECT page_map FROM tde_status WHERE schema='main'", -1, &p, 0), SQLITE_OK);
  assert_int_equal(sqlite3_step(p), SQLITE_ROW);
  snprintf(zOut, nOut, "%s", sqlite3_column_text(p, 0) ? (const char*)sqlite3_column_text(p, 0) : "NULL");
  sqlite3_finalize(p);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/*
** remap: the map deleted (a file copy made without it, a promoted
** standby) is refused until tde_db_remap accepts the pages as they are;
** then the database reads, page_map says "off" until the next WAL restart
** builds the map again ("on"), and a page rollback after that is refused
** again.  tde_status.page_map is "off (format version 1)" on version 1.
*/
static void test_remap_v2(void **state){
  char zDb[PATH_MAX], zMap[PATH_MAX], zV1[PATH_MAX], zSt[64];
  unsigned char aStale[PGSZ], aCur[PGSZ];
  sqlite3 *db;
  sqlite3_int64 v = 0;
  int iPg;
  (void)state;
  heldFree();
  caseDbV2("remap", zDb);
  sidePath(zMap, zDb, "-tdemap");
  iPg = attackedHistory(zDb, zCfg, 0, aStale, aCur);
  pageMapStatus(zDb, zCfg, zSt, sizeof(zSt));
  assert_string_equal(zSt, "on");
  assert_int_equal(unlink(zMap), 0);
  expectMapRefused(zDb, zMap, 0);
  assert_int_equal(tde_db_remap(zDb, zCfg), TDE_OK);
  assert_int_equal(readValue(zDb, zCfg, 0, &v), SQLITE_OK);
  assert_int_equal(v, 0);
  pageMapStatus(zDb, zCfg, zSt, sizeof(zSt));
  assert_string_equal(zSt, "off");
  /* A write and a TRUNCATE checkpoint: the map is built again. */
  db = openDb(zDb, zCfg);
  exec(db, "UPDATE acct SET value=value WHERE id=1");
  checkpointTruncate(db);
  exec(db, "INSERT INTO acct(id, value) VALUES(77, 7)");
  checkpointTruncate(db);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  assert_true(fileExists(zMap));
  pageMapStatus(zDb, zCfg, zSt, sizeof(zSt));
  assert_string_equal(zSt, "on");
  /* ... and protects again: the stale page (older than the rebuilt map);
  ** the page as it is now is the current one. */
  pageRead(zDb, iPg, aCur);
  expectRollbackRefused(zDb, iPg, 0, aStale, aCur);
  /* Version 1 has no map. */
  caseDb("remap-v1", zV1);
  db = openDb(zV1, zCfgV1);
  exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE t(a); INSERT INTO t VALUES(1)");
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  pageMapStatus(zV1, zCfgV1, zSt, sizeof(zSt));
  assert_string_equal(zSt, "off (format version 1)");
  assert_int_not_equal(tde_db_remap(zV1, zCfgV1), TDE_OK);
  heldFree();
}

static int groupSetup(void **state){
  FILE *f;
  (void)state;
  if( tdetestGroupSetup("tdepagemap", 0) ) return -1;
  snprintf(zCfgV1, sizeof(zCfgV1), "%s/tde-v1.conf", zScratch);
  f = fopen(zCfgV1, "w");
  if( !f ) return -1;
  fputs(TDETEST_WALLET_CONF "format_version = 1\n", f);
  return fclose(f)==0 ? 0 : -1;
}

static int groupTeardown(void **state){
  (void)state;
  heldFree();
  tdetestScratchRemove();
  return 0;
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_case5_page_rollback_v1),
    cmocka_unit_test(test_case5_page_rollback_v2),
    cmocka_unit_test(test_map_missing_v2),
    cmocka_unit_test(test_map_tampered_v2),
    cmocka_unit_test(test_no_false_refusals_v2),
    cmocka_unit_test(test_mode_switch_v2),
    cmocka_unit_test(test_exclusive_mode_v2),
    cmocka_unit_test(test_remap_v2),
    cmocka_unit_test(test_long_reader_v2),
  };
  return tdetestExit(cmocka_run_group_tests_name("pagemap", tests, groupSetup, groupTeardown));
}
