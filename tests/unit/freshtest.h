/*
** Helpers shared by the freshness tests (test_fresh.c, test_fresh_journal.c,
** test_redteam_fresh.c, test_pagemap.c): file copies and comparisons,
** one-value queries, the capture of tde's error log lines, and the 600-row
** version-1 or version-2 test database.  Include after tdetest.h, with
** NROW and PGSZ defined.
*/
#ifndef TDE_FRESHTEST_H
#define TDE_FRESHTEST_H

static inline void fileCopy(const char *zFrom, const char *zTo){
  size_t n = 0;
  unsigned char *a = readAll(zFrom, &n);
  assert_non_null(a);
  writeAll(zTo, a, n);
  free(a);
}

static inline void sidePath(char *zOut, const char *zDb, const char *zSuffix){
  if( snprintf(zOut, PATH_MAX, "%s%s", zDb, zSuffix)>=PATH_MAX ) fail_msg("path too long");
}

/* First column of the first row of zSql; SQLite's result code of the whole
** statement (SQLITE_DONE becomes SQLITE_OK). */
static inline int stepInt(sqlite3 *db, const char *zSql, sqlite3_int64 *pv){
  sqlite3_stmt *p = 0;
  int rc = sqlite3_prepare_v2(db, zSql, -1, &p, 0);
  *pv = -1;
  if( rc==SQLITE_OK ){
    rc = sqlite3_step(p);
    if( rc==SQLITE_ROW ){ *pv = sqlite3_column_int64(p, 0); rc = SQLITE_OK; }
    else if( rc==SQLITE_DONE ) rc = SQLITE_OK;
  }
  sqlite3_finalize(p);
  return rc;
}

static inline sqlite3_int64 countLike(sqlite3 *db, const char *zPrefix){
  char zSql[128];
  sqlite3_int64 v = -1;
  snprintf(zSql, sizeof(zSql), "SELECT count(*) FROM t WHERE v LIKE '%s %%'", zPrefix);
  assert_int_equal(stepInt(db, zSql, &v), SQLITE_OK);
  return v;
}

static inline int sameFile(const char *zA, const char *zB){
  size_t nA = 0, nB = 0;
  unsigned char *a = readAll(zA, &nA), *b = readAll(zB, &nB);
  int bSame = a && b && nA==nB && memcmp(a, b, nA)==0;
  free(a);
  free(b);
  return bSame;
}

static inline int fileExists(const char *z){
  return access(z, F_OK)==0;
}

/* tde's error log lines while a case runs (a refusal must be logged):
** clear zLogSeen, tde_set_log(captureLog, 0), and tde_set_log(quietLog, 0)
** after.  Lines beyond the buffer are dropped. */
static char zLogSeen[8192];
static inline void captureLog(void *pArg, int level, const char *zMsg){
  size_t n = strlen(zLogSeen), m = strlen(zMsg);
  if( level==TDE_LOG_ERROR && n + m + 2 < sizeof(zLogSeen) ){
    memcpy(zLogSeen + n, zMsg, m);
    zLogSeen[n + m] = '\n';
    zLogSeen[n + m + 1] = 0;
  }
  quietLog(pArg, level, zMsg);
}

/* A database of NROW rows "T0 <id> ..." (about 150 pages), rollback mode. */
static inline void makeDb(const char *zDb, int bV2){
  sqlite3 *db = 0;
  tdeSetCreateVersion(bV2 ? tdetestNewFormat() : TDE_FORMAT_V1);
  removeDb(zDb);
  assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
  exec(db, "PRAGMA page_size=4096; PRAGMA journal_mode=DELETE;"
           "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);"
           "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<600)"
           " INSERT INTO t SELECT i, printf('T0 %04d %.900c', i, 'a') FROM c;");
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  tdeSetCreateVersion(tdetestNewFormat());
}

/* Open zDb and read it: the hot journal is played back or refused. */
static inline int openAndCount(const char *zDb, const char *zPrefix, sqlite3_int64 *pn){
  sqlite3 *db = 0;
  char zSql[128];
  int rc = openTdeCfg(zDb, zCfg, &db);
  if( rc==SQLITE_OK ){
    sqlite3_extended_result_codes(db, 1);
    snprintf(zSql, sizeof(zSql), "SELECT count(*) FROM t WHERE v LIKE '%s %%'", zPrefix);
    rc = stepInt(db, zSql, pn);
  }
  sqlite3_close(db);
  return rc;
}

#endif
