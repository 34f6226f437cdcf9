/*
** Format version 3 (docs/FORMAT.md "Format version 3: one file"), issue 24
** step 2: the layout of new databases created with format_version = 3.
** Page N of a version-3 file lies at
**   off(N) = 8192 + M*(1 + (N-1)/508) + (N-1)*P,  M = max(8192, P),
** written out here on its own (not taken from src/keys/layout.c), and the
** map region before each group of 508 pages holds only map slots.  For page sizes 1024, 4096 and 65536 (SQLite turns 512
** into 1024 when 48 bytes are reserved; test_r6_layout covers 512's
** arithmetic), in rollback (DELETE) and WAL journal mode:
**  - a new database passes 508 pages (three groups; 65536: two), its
**    tde_status says format_version 3, its rows read back after a reopen,
**    integrity_check and tde_verify pass;
**  - the raw file: its size is off(N) + P for SQLite's page_count N (after
**    a TRUNCATE checkpoint in WAL mode), page 1 lies at off(1) (16384 up
**    to 8192-byte pages), every map region is all zeros, and a sample of
**    pages (first and last of each group) is not;
**  - truncation: rows deleted and VACUUM: the file shrinks to off(N') + P
**    for the new page count, reads and checks pass again;
**  - a page moved: the bytes of a page of the second group copied over
**    another page's place are refused (SQLITE_IOERR_AUTH or
**    SQLITE_CORRUPT), so pages are really authenticated where the layout
**    puts them;
**  - a rekey (tde_db_rekey) of the version-3 database rewrites its pages
**    in place and the file keeps the layout;
**  - the map in the file (step 3): map regions hold zeros or map slots
**    naming their own map page, and no DB-tdemap is ever made; a WAL-mode
**    database, checkpointed and closed, copied byte for byte (main file
**    only) opens and verifies; one page of the copy put back to an older
**    authentic version is refused, "does not match the page map the
**    database file itself holds"; tde_db_remap (sqlite-tde remap) then
**    accepts the pages as they are and the map is built in the file again.
** A database without format_version is version 3 (the default since issue
** 24); one with format_version = 2 is version 2 (its page 1 at 8192).
** Against SQLite 3.40 (system) and 3.53 (test_r6_format3_353).
*/
#include "tdetest.h"

#include "tde_int.h"

#define K 508

/* zScratch/tde-v3.conf: the group's wallet, format_version = 3. */
static char zCfg3[PATH_MAX];
static char zCfg2[PATH_MAX];   /* the group's wallet, format_version = 2 */

static int64_t regionBytes(uint32_t P){
  return P>8192 ? P : 8192;
}

static int64_t specOff(uint32_t P, uint32_t N){
  return 8192 + regionBytes(P)*(1 + (int64_t)((N-1)/K)) + (int64_t)(N-1)*P;
}

static sqlite3 *openDb(const char *zDb, const char *zConfig){
  sqlite3 *db = 0;
  int rc = openTdeCfg(zDb, zConfig, &db);
  if( rc!=SQLITE_OK ) fail_msg("open %s: %s", zDb, db ? sqlite3_errmsg(db) : "?");
  sqlite3_extended_result_codes(db, 1);
  return db;
}

/* Rows 1..nRow of v = the id as a zero-padded string of nLen characters:
** every row names itself, so a page served from another place fails the
** check below. */
static void fillRows(sqlite3 *db, int nFrom, int nTo, int nLen){
  char *z = sqlite3_mprintf("WITH RECURSIVE c(i) AS (SELECT %d UNION ALL SELECT i+1 FROM c WHERE i<%d) "
                            "INSERT INTO t(id, v) SELECT i, printf('%%0%dd', i) FROM c", nFrom, nTo, nLen);
  exec(db, z);
  sqlite3_free(z);
}

/* Every row reads back as written: count, and each v names its id. */
static void checkRows(sqlite3 *db, int64_t nExpect){
  assert_int_equal(tdetestQueryInt(db, "SELECT count(*) FROM t"), nExpect);
  assert_int_equal(tdetestQueryInt(db, "SELECT count(*) FROM t WHERE CAST(v AS INTEGER)!=id"), 0);
  assert_true(integrityOk(db));
  {
    int64_t nChecked = 0, iBad = 0;
    int rc = tde_verify(db, "main", &nChecked, &iBad, 0, 0);
    if( rc!=TDE_OK ) fail_msg("tde_verify: %s (page %lld)", tde_last_error(), (long long)iBad);
    assert_true(nChecked>0);
  }
}

static int allZero(const unsigned char *a, int64_t n){
  for(int64_t i=0; i<n; i++) if( a[i] ) return 0;
  return 1;
}

static uint32_t get32(const unsigned char *a){
  return ((uint32_t)a[0]<<24) | ((uint32_t)a[1]<<16) | ((uint32_t)a[2]<<8) | a[3];
}

/* A map slot (4096 bytes of M/2) at a: zeros, or a map page naming
** itself g (fold generation >= 1, k = g, zero, zeros after 4096). */
static void checkSlot(const unsigned char *a, uint32_t P, uint32_t g){
  if( allZero(a, regionBytes(P)/2) ) return;
  if( get32(a)==0 && get32(a+4)==0 ) fail_msg("map slot of region %u has generation 0 (P=%u)", g, P);
  if( get32(a+8)!=g || get32(a+12)!=0 ) fail_msg("map slot of region %u names map page %u (P=%u)", g, get32(a+8), P);
  if( !allZero(a + 4096, regionBytes(P)/2 - 4096) ) fail_msg("map slot of region %u: bytes after 4096 (P=%u)", g, P);
}

/* The raw file holds N pages in version 3's layout: its size (off(N) + P,
** or the end of a map region after it that the map in force still
** names), page 1's place, regions holding map slots or zeros, sampled
** pages present; no DB-tdemap beside it. */
static void checkRaw(const char *zDb, uint32_t P, uint32_t N){
  size_t n = 0;
  unsigned char *a = readAll(zDb, &n);
  uint32_t nGroup = (N + K - 1)/K;
  int64_t W = regionBytes(P) + (int64_t)K*P;
  char zMap[PATH_MAX + 16];
  assert_non_null(a);
  if( (int64_t)n!=specOff(P, N) + P
   && !((int64_t)n > specOff(P, N) + P && ((int64_t)n - 8192) % W==regionBytes(P)) ){
    fail_msg("file of %zu bytes for %u pages of %u: off(N) + P is %lld", n, N, P, (long long)(specOff(P, N) + P));
  }
  assert_int_equal(specOff(P, 1), P<=8192 ? 16384 : 8192 + (int64_t)P);
  snprintf(zMap, sizeof(zMap), "%s-tdemap", zDb);
  assert_int_equal(access(zMap, F_OK), -1);
  for(uint32_t g=0; g<nGroup; g++){
    int64_t r = 8192 + (int64_t)g*W;
    assert_int_equal(r + regionBytes(P), specOff(P, g*K + 1));
    checkSlot(a + r, P, g);
    checkSlot(a + r + regionBytes(P)/2, P, g);
    if( allZero(a + specOff(P, g*K + 1), P) ) fail_msg("page %u is zero (P=%u)", g*K + 1, P);
    {
      uint32_t last = (g+1)*K < N ? (g+1)*K : N;
      if( allZero(a + specOff(P, last), P) ) fail_msg("page %u is zero (P=%u)", last, P);
    }
  }
  free(a);
}

/* Rows of nLen characters that give at least nPage pages of size P (no
** more than P / nLen of them fit on a page). */
static int rowsFor(uint32_t P, uint32_t nPage, int nLen){
  int perPage = (int)P / nLen;
  if( perPage<1 ) perPage = 1;
  return (int)(nPage + 20) * perPage;
}

static void runLayout(uint32_t P, const char *zMode){
  char zDb[PATH_MAX], zSql[128];
  int nLen = (int)P/4 > 1000 ? 1000 : (int)P/4;
  uint32_t nWant = P>=65536 ? K + 60 : 2*K + 60;
  int nRow = rowsFor(P, nWant, nLen);
  int64_t N, N2;
  sqlite3 *db;
  snprintf(zSql, sizeof(zSql), "f3-%u-%s.db", P, zMode);
  pathOf(zDb, zSql);
  removeDb(zDb);
  db = openDb(zDb, zCfg3);
  snprintf(zSql, sizeof(zSql), "PRAGMA page_size=%u; PRAGMA journal_mode=%s;", P, zMode);
  exec(db, zSql);
  exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)");
  exec(db, "BEGIN");
  fillRows(db, 1, nRow, nLen);
  exec(db, "COMMIT");
  assert_int_equal(tdetestQueryInt(db, "SELECT format_version FROM tde_status WHERE schema='main'"), 3);
  N = tdetestQueryInt(db, "PRAGMA page_count");
  if( N <= (int64_t)nWant - 40 ) fail_msg("P=%u: %lld pages (page_size %lld), wanted %u", P, (long long)N, (long long)tdetestQueryInt(db, "PRAGMA page_size"), nWant);
  if( strcmp(zMode, "WAL")==0 ) exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  sqlite3_close(db);
  checkRaw(zDb, P, (uint32_t)N);

  db = openDb(zDb, zCfg3);
  checkRows(db, nRow);
  /* Truncation: two thirds of the rows go, VACUUM shrinks the file. */
  snprintf(zSql, sizeof(zSql), "DELETE FROM t WHERE id %% 3 != 0");
  exec(db, zSql);
  exec(db, "VACUUM");
  N2 = tdetestQueryInt(db, "PRAGMA page_count");
  assert_true(N2 < N);
  checkRows(db, nRow/3);
  if( strcmp(zMode, "WAL")==0 ) exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  sqlite3_close(db);
  checkRaw(zDb, P, (uint32_t)N2);
  /* Grow again past the group boundary, in several transactions. */
  db = openDb(zDb, zCfg3);
  for(int i=0; i<4; i++){
    int nFrom = nRow + 1 + i*(nRow/4), nTo = nRow + (i+1)*(nRow/4);
    fillRows(db, nFrom, nTo, nLen);
  }
  checkRows(db, nRow/3 + 4*(nRow/4));
  N = tdetestQueryInt(db, "PRAGMA page_count");
  if( strcmp(zMode, "WAL")==0 ) exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  sqlite3_close(db);
  checkRaw(zDb, P, (uint32_t)N);
  removeDb(zDb);
}

static void test_layout_1024_delete(void **state){ (void)state; runLayout(1024, "DELETE"); }
static void test_layout_1024_wal(void **state){ (void)state; runLayout(1024, "WAL"); }
static void test_layout_4096_delete(void **state){ (void)state; runLayout(4096, "DELETE"); }
static void test_layout_4096_wal(void **state){ (void)state; runLayout(4096, "WAL"); }
static void test_layout_65536_delete(void **state){ (void)state; runLayout(65536, "DELETE"); }
static void test_layout_65536_wal(void **state){ (void)state; runLayout(65536, "WAL"); }

/* Page a (of the second group) copied over page b's place: refused. */
static void test_page_moved(void **state){
  char zDb[PATH_MAX];
  const uint32_t P = 4096, a = K + 3, b = K + 7;
  unsigned char *aFile;
  size_t n = 0;
  sqlite3 *db;
  sqlite3_stmt *pStmt = 0;
  int rc;
  (void)state;
  pathOf(zDb, "f3-moved.db");
  removeDb(zDb);
  db = openDb(zDb, zCfg3);
  exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)");
  fillRows(db, 1, rowsFor(P, K + 40, 1000), 1000);
  sqlite3_close(db);
  aFile = readAll(zDb, &n);
  assert_non_null(aFile);
  assert_true((int64_t)n >= specOff(P, b) + P);
  memcpy(aFile + specOff(P, b), aFile + specOff(P, a), P);
  writeAll(zDb, aFile, n);
  free(aFile);
  db = openDb(zDb, zCfg3);
  rc = sqlite3_prepare_v2(db, "SELECT count(*), sum(length(v)) FROM t", -1, &pStmt, 0);
  if( rc==SQLITE_OK ){
    while( (rc = sqlite3_step(pStmt))==SQLITE_ROW ){}
    sqlite3_finalize(pStmt);
  }
  assert_true(rc==SQLITE_IOERR_AUTH || (rc & 0xff)==SQLITE_CORRUPT);
  sqlite3_close(db);
  removeDb(zDb);
}

/* tde_db_rekey rewrites every page where the layout puts it. */
static void test_rekey_v3(void **state){
  char zDb[PATH_MAX];
  const uint32_t P = 4096;
  int nRow = rowsFor(P, K + 40, 1000);
  sqlite3 *db;
  int64_t N;
  (void)state;
  pathOf(zDb, "f3-rekey.db");
  removeDb(zDb);
  db = openDb(zDb, zCfg3);
  exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)");
  fillRows(db, 1, nRow, 1000);
  assert_int_equal(tde_db_rekey(db, "main", 100, 0, 0), TDE_OK);
  checkRows(db, nRow);
  N = tdetestQueryInt(db, "PRAGMA page_count");
  sqlite3_close(db);
  checkRaw(zDb, P, (uint32_t)N);
  db = openDb(zDb, zCfg3);
  checkRows(db, nRow);
  sqlite3_close(db);
  removeDb(zDb);
}

/* Read acct's value on zDb: SQLite's code of the read, *pv the value. */
static int readValue(const char *zDb, int64_t *pv){
  sqlite3 *db = 0;
  sqlite3_stmt *p = 0;
  int rc = openTdeCfg(zDb, zCfg3, &db);
  *pv = -1;
  if( rc==SQLITE_OK ){
    sqlite3_extended_result_codes(db, 1);
    rc = sqlite3_prepare_v2(db, "SELECT value FROM acct WHERE id=1", -1, &p, 0);
  }
  if( rc==SQLITE_OK ){
    rc = sqlite3_step(p);
    if( rc==SQLITE_ROW ){ *pv = sqlite3_column_int64(p, 0); rc = SQLITE_OK; }
    else rc = sqlite3_extended_errcode(db);
  }
  sqlite3_finalize(p);
  sqlite3_close(db);
  return rc;
}

/*
** The copy a user makes (issue 24, "Done means"): a WAL-mode database
** whose map has two map pages, checkpointed and closed, copied byte for
** byte (the main file only, as cp would: there is no other) opens, reads
** the current value, passes integrity_check and tde_verify; the same copy
** with the one page of acct put back from an earlier checkpoint (an older
** authentic version of that page) is refused with SQLITE_IOERR_AUTH and
** the message that the file's pages do not match its own map.
*/
static void test_copy_and_rollback(void **state){
  char zDb[PATH_MAX], zCopy[PATH_MAX], zSide[PATH_MAX + 16];
  const uint32_t P = 4096;
  unsigned char *aFile, aOld[4096];
  size_t n = 0;
  int64_t iPg, v;
  sqlite3 *db;
  (void)state;
  pathOf(zDb, "f3-cp.db");
  pathOf(zCopy, "f3-cp-copy.db");
  removeDb(zDb);
  removeDb(zCopy);
  db = openDb(zDb, zCfg3);
  exec(db, "PRAGMA journal_mode=WAL");
  exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)");
  exec(db, "CREATE TABLE acct(id INTEGER PRIMARY KEY, value INT)");
  exec(db, "INSERT INTO acct VALUES(1, 999)");
  fillRows(db, 1, rowsFor(P, K + 40, 1000), 1000);
  exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");     /* the map is built, in the file */
  iPg = tdetestQueryInt(db, "SELECT rootpage FROM sqlite_schema WHERE name='acct'");
  sqlite3_close(db);
  aFile = readAll(zDb, &n);
  assert_non_null(aFile);
  memcpy(aOld, aFile + specOff(P, (uint32_t)iPg), P);
  free(aFile);

  db = openDb(zDb, zCfg3);
  exec(db, "UPDATE acct SET value=0 WHERE id=1");
  fillRows(db, 100000, 100100, 1000);
  exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  exec(db, "UPDATE t SET v=printf('%01000d', id) WHERE id<50");
  sqlite3_close(db);                               /* checkpoint, WAL deleted, map folded */
  snprintf(zSide, sizeof(zSide), "%s-wal", zDb);
  assert_int_equal(access(zSide, F_OK), -1);
  snprintf(zSide, sizeof(zSide), "%s-tdemap", zDb);
  assert_int_equal(access(zSide, F_OK), -1);

  aFile = readAll(zDb, &n);                        /* cp zDb zCopy */
  assert_non_null(aFile);
  assert_memory_not_equal(aFile + specOff(P, (uint32_t)iPg), aOld, P);
  writeAll(zCopy, aFile, n);
  assert_int_equal(readValue(zCopy, &v), SQLITE_OK);
  assert_int_equal(v, 0);
  db = openDb(zCopy, zCfg3);
  assert_int_equal(tdetestQueryInt(db, "SELECT page_map='on' FROM tde_status WHERE schema='main'"), 1);
  checkRows(db, rowsFor(P, K + 40, 1000) + 101);
  sqlite3_close(db);

  memcpy(aFile + specOff(P, (uint32_t)iPg), aOld, P);   /* one page rolled back */
  writeAll(zCopy, aFile, n);
  free(aFile);
  assert_int_equal(readValue(zCopy, &v), SQLITE_IOERR_AUTH);
  if( !strstr(tde_last_error(), "does not match the page map the database file itself holds")
   || !strstr(tde_last_error(), "remap") ){
    fail_msg("refusal says: %s", tde_last_error());
  }
  assert_int_equal(access(zSide, F_OK), -1);
  /* remap accepts the pages as they are (the rollback included), as the
  ** message says; the map is built again in the file, no side file. */
  assert_int_equal(tde_db_remap(zCopy, zCfg3), TDE_OK);
  assert_int_equal(readValue(zCopy, &v), SQLITE_OK);
  assert_int_equal(v, 999);
  db = openDb(zCopy, zCfg3);
  exec(db, "UPDATE acct SET value=5 WHERE id=1");
  exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  assert_int_equal(tdetestQueryInt(db, "SELECT page_map='on' FROM tde_status WHERE schema='main'"), 1);
  checkRows(db, rowsFor(P, K + 40, 1000) + 101);
  sqlite3_close(db);
  snprintf(zSide, sizeof(zSide), "%s-tdemap", zCopy);
  assert_int_equal(access(zSide, F_OK), -1);
  removeDb(zDb);
  removeDb(zCopy);
}

/*
** The fold at SQLITE_FCNTL_CKPT_DONE: a WAL database whose map is in force
** (a TRUNCATE checkpoint built it), then changed and checkpointed with
** PASSIVE (every frame backfilled, the WAL left in place) while its
** connection stays open: the main file copied alone at that moment opens
** with the new value and verifies (without the fold its pages would be
** newer than its map, and refused).
*/
static void test_ckpt_done_fold(void **state){
  char zDb[PATH_MAX], zCopy[PATH_MAX];
  const uint32_t P = 4096;
  unsigned char *aFile;
  size_t n = 0;
  int64_t v;
  sqlite3 *db;
  (void)state;
  pathOf(zDb, "f3-ckpt.db");
  pathOf(zCopy, "f3-ckpt-copy.db");
  removeDb(zDb);
  removeDb(zCopy);
  db = openDb(zDb, zCfg3);
  exec(db, "PRAGMA journal_mode=WAL");
  exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)");
  exec(db, "CREATE TABLE acct(id INTEGER PRIMARY KEY, value INT)");
  exec(db, "INSERT INTO acct VALUES(1, 999)");
  fillRows(db, 1, rowsFor(P, K + 40, 1000), 1000);
  exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");     /* the map is built */
  exec(db, "UPDATE acct SET value=7 WHERE id=1");
  exec(db, "UPDATE t SET v=printf('%01000d', id) WHERE id<30");
  assert_int_equal(tdetestQueryInt(db, "PRAGMA wal_checkpoint(PASSIVE)"), 0);
  aFile = readAll(zDb, &n);                        /* cp while the connection is open */
  assert_non_null(aFile);
  writeAll(zCopy, aFile, n);
  free(aFile);
  assert_int_equal(readValue(zCopy, &v), SQLITE_OK);
  assert_int_equal(v, 7);
  {
    sqlite3 *c = openDb(zCopy, zCfg3);
    checkRows(c, rowsFor(P, K + 40, 1000));
    sqlite3_close(c);
  }
  sqlite3_close(db);
  removeDb(zDb);
  removeDb(zCopy);
}

/* Without format_version new databases are version 3 (issue 24): page 1
** at off(1) = 16384 at 4096-byte pages, the region at 8192 SQLite never
** sees; format_version = 2 keeps version 2: page 1 at 8192. */
static void test_default_v3(void **state){
  char zDb[PATH_MAX];
  unsigned char *a;
  size_t n = 0;
  sqlite3 *db;
  (void)state;
  for(int iV=3; iV>=2; iV--){
    pathOf(zDb, iV==3 ? "f3-default.db" : "f3-pinned2.db");
    removeDb(zDb);
    db = openDb(zDb, iV==3 ? zCfg : zCfg2);
    exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)");
    fillRows(db, 1, 100, 100);
    assert_int_equal(tdetestQueryInt(db, "SELECT format_version FROM tde_status WHERE schema='main'"), iV);
    {
      int64_t N = tdetestQueryInt(db, "PRAGMA page_count");
      int64_t iPage1 = iV==3 ? 8192 + 8192 : 8192;
      sqlite3_close(db);
      a = readAll(zDb, &n);
      assert_non_null(a);
      assert_true(N < K);
      assert_int_equal((int64_t)n, iPage1 + N*4096);
      assert_false(allZero(a + iPage1, 4096));
      free(a);
    }
    removeDb(zDb);
  }
}

static int groupSetup(void **state){
  FILE *f;
  (void)state;
  if( tdetestGroupSetup("test_r6_format3", 1) ) return -1;
  snprintf(zCfg3, sizeof(zCfg3), "%s/tde-v3.conf", zScratch);
  f = fopen(zCfg3, "w");
  if( !f ) return -1;
  fprintf(f, "%sformat_version = 3\n", TDETEST_WALLET_CONF);
  fclose(f);
  snprintf(zCfg2, sizeof(zCfg2), "%s/tde-v2.conf", zScratch);
  f = fopen(zCfg2, "w");
  if( !f ) return -1;
  fprintf(f, "%sformat_version = 2\n", TDETEST_WALLET_CONF);
  fclose(f);
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
    cmocka_unit_test(test_default_v3),
    cmocka_unit_test(test_layout_1024_delete),
    cmocka_unit_test(test_layout_1024_wal),
    cmocka_unit_test(test_layout_4096_delete),
    cmocka_unit_test(test_layout_4096_wal),
    cmocka_unit_test(test_layout_65536_delete),
    cmocka_unit_test(test_layout_65536_wal),
    cmocka_unit_test(test_page_moved),
    cmocka_unit_test(test_rekey_v3),
    cmocka_unit_test(test_copy_and_rollback),
    cmocka_unit_test(test_ckpt_done_fold),
  };
  return cmocka_run_group_tests(tests, groupSetup, groupTeardown);
}
