/*
** Helpers shared by the cmocka unit tests (test_splice.c, test_tamper.c,
** test_faults.c, test_malloc.c, test_vfs.c, test_leak.c): the scratch
** folder and its wallet, whole-file I/O, and opening and driving a
** database through tde.
**
** A header only, so tests/CMakeLists.txt keeps building one executable per
** test_*.c.  Every function is static inline: a test that does not call
** one gets no warning and no copy.  A file that includes it must not
** define these names itself.  Failures inside a test go through cmocka
** (fail_msg, assert_*); group setup helpers return -1 instead, as cmocka's
** group setup functions do.  Nothing prints except where a comment says
** so: the tests' output lines are compared between runs.
*/
#ifndef TDETEST_H
#define TDETEST_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>
#include "sqlite-tde.h"
#include "keys/layout.h"

/* The group's scratch folder (tdetestScratchMake) and the tde.conf of its
** wallet (tdetestWalletMake).  Paths go into URIs unescaped. */
static char zScratch[1024];
static char zCfg[PATH_MAX];

/* A wallet that opens without a password, with the cheapest KDF tde
** accepts: key derivation is not what these tests measure. */
#define TDETEST_WALLET_CONF \
  "keystore = wallet\nwallet = w.tdew\nwallet_kdf_t = 1\nwallet_kdf_m_kib = 8192\n"

/* ---- format-2 twins ------------------------------------------------------- */

/* New databases are format 3 by default (issue 24).  TDE_TEST_FORMAT=2
** (test code only; the shim never reads it) runs a suite on format 2:
** tests/CMakeLists.txt registers "<suite>.format2" twins with it.  New
** databases a suite makes in the current format (version 3 otherwise)
** are then version 2, through the library's test hook for the version of
** new databases (keys/keys.h); cases that ask for version 1 keep it.  The
** hook, not a format_version line in tde.conf: the configuration's line
** overrides the hook, also for those version-1 cases.  Scripts and tools
** that create databases through the CLI write the line instead
** (test_crash.sh). */
void tdeSetCreateVersion(int v);   /* keys/keys.h */

static inline int tdetestFormat(void){
  const char *z = getenv("TDE_TEST_FORMAT");
  return z && strcmp(z, "2")==0 ? 2 : 3;
}

/* The format version a case that says "v2" creates (3, or 2 in a twin):
** version 2's freshness rules, which version 3 keeps. */
static inline int tdetestNewFormat(void){
  return tdetestFormat();
}

/* Physical offset of page n of a database of page size P in the suite's
** current format (keys/layout.h: 8192 + (n-1)*P on version 2, among the
** map regions on version 3). */
static inline int64_t tdetestPageOff(uint32_t P, uint32_t n){
  TdeLayout L;
  L.version = tdetestFormat();
  L.pgsz = P;
  L.cursor = 0;
  return tdeLayoutPageOff(&L, n);
}

/* Does byte iOff of a database file of page size P lie in a page (not in
** the header region, nor, on version 3, in a map region)? */
static inline int tdetestInPage(uint32_t P, int64_t iOff){
  int64_t M, W;
  if( iOff < TDE_LAYOUT_HDR ) return 0;
  if( tdetestFormat()!=3 ) return 1;
  M = tdeLayoutRegionBytes(P);
  W = M + (int64_t)TDE_LAYOUT_K * P;
  return (iOff - TDE_LAYOUT_HDR) % W >= M;
}

/* Pages wholly inside a database file of n bytes, page size P. */
static inline uint32_t tdetestPagesIn(uint32_t P, int64_t n){
  TdeLayout L;
  L.version = tdetestFormat();
  L.pgsz = P;
  L.cursor = 0;
  return tdeLayoutWholePages(&L, n);
}

/* A case whose assertion holds only on format 2 (DB-tdemap, a page at
** 8192 + (n-1)*P written into a file) and that cannot pin its database to
** format 2 (tdeSetCreateVersion(2)) is skipped on format 3, that is in the
** plain run: the reason is printed, the case counts as skipped (cmocka),
** and the run exits with TDETEST_SKIP_RC (ctest SKIP_RETURN_CODE) when
** nothing failed, so that ctest counts it as skipped, never as passed; the
** format-2 twin runs it. */
#define TDETEST_SKIP_RC 77
static int nTdetestSkipped = 0;
#define tdetestSkipOnFormat3(zWhy) do{ \
  if( tdetestFormat()==3 ){ \
    printf("# SKIP on format 3: %s: %s\n", __func__, (zWhy)); \
    fflush(stdout); \
    nTdetestSkipped++; \
    skip(); \
  } \
}while(0)

/* main's exit code: cmocka's failure count, else TDETEST_SKIP_RC when a
** case was skipped on format 3. */
static inline int tdetestExit(int nFailed){
  if( nFailed ) return nFailed;
  return nTdetestSkipped ? TDETEST_SKIP_RC : 0;
}

/* ---- files ---------------------------------------------------------------- */

/* nftw callback: remove one entry (walked with FTW_DEPTH, children first). */
static inline int rmOne(const char *zPath, const struct stat *pSt, int flag, struct FTW *pFtw){
  (void)pSt; (void)flag; (void)pFtw;
  return remove(zPath);
}

/* zDir/zName into zOut (PATH_MAX bytes); fails the test if it does not fit. */
static inline void joinPath(char *zOut, const char *zDir, const char *zName){
  if( snprintf(zOut, PATH_MAX, "%s/%s", zDir, zName) >= PATH_MAX ) fail_msg("path too long");
}

/* zScratch/zName into zOut (PATH_MAX bytes). */
static inline void pathOf(char *zOut, const char *zName){
  joinPath(zOut, zScratch, zName);
}

/* Whole file into malloc'd memory (one spare byte at the end), *pn its
** size; the caller frees.  NULL and *pn 0 if it cannot be read. */
static inline unsigned char *readAll(const char *zPath, size_t *pn){
  FILE *f = fopen(zPath, "rb");
  unsigned char *a;
  long n;
  *pn = 0;
  if( !f ) return 0;
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  if( n<0 ){ fclose(f); return 0; }
  a = malloc((size_t)n + 1);
  if( a && n>0 && fread(a, 1, (size_t)n, f)!=(size_t)n ){ free(a); a = 0; }
  fclose(f);
  if( a ) *pn = (size_t)n;
  return a;
}

/* Create or replace zPath with n bytes of a (a may be NULL if n is 0). */
static inline void writeAll(const char *zPath, const void *a, size_t n){
  FILE *f = fopen(zPath, "wb");
  assert_non_null(f);
  if( n ) assert_int_equal(fwrite(a, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

/* Unlink zPath with zSuffix appended, unless the name would not fit. */
static inline void unlinkSuffixed(const char *zPath, const char *zSuffix){
  char z[PATH_MAX+16];
  if( snprintf(z, sizeof(z), "%s%s", zPath, zSuffix) < (int)sizeof(z) ) unlink(z);
}

/* Unlink a database and its -journal, -wal and -shm; with bRekey also its
** -tderekey (the batch journal of tde_db_rekey).  Missing files are fine. */
static inline void removeDbFiles(const char *zPath, int bRekey){
  unlink(zPath);
  unlinkSuffixed(zPath, "-journal");
  unlinkSuffixed(zPath, "-wal");
  unlinkSuffixed(zPath, "-shm");
  unlinkSuffixed(zPath, "-tdemap");
  if( bRekey ) unlinkSuffixed(zPath, "-tderekey");
}

static inline void removeDb(const char *zPath){
  removeDbFiles(zPath, 0);
}

/* ---- SQLite through tde ---------------------------------------------------- */

/* tde log callback: silent unless TDE_TEST_LOG is set, then to stderr. */
static inline void quietLog(void *pArg, int level, const char *zMsg){
  (void)pArg;
  if( getenv("TDE_TEST_LOG") ) fprintf(stderr, "tde log %d: %s\n", level, zMsg);
}

/* Open (creating) zPath through tde with configuration zConfig.  SQLite
** result code; *pDb is set even on failure (close it), and is NULL when
** the URI could not be allocated (SQLITE_NOMEM, under test_malloc.c). */
/* The VFS openTdeCfg names: "tde", or a VFS a test stacked above it. */
static const char *zTdetestVfs = "tde";

static inline int openTdeCfg(const char *zPath, const char *zConfig, sqlite3 **pDb){
  char *zUri = sqlite3_mprintf("file:%s?vfs=%s&tde_config=%s", zPath, zTdetestVfs, zConfig);
  int rc;
  if( zUri==0 ){ *pDb = 0; return SQLITE_NOMEM; }
  rc = sqlite3_open_v2(zUri, pDb, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE|SQLITE_OPEN_URI, 0);
  sqlite3_free(zUri);
  return rc;
}

/* Run zSql; on error fail the test with the SQL and SQLite's message,
** after "[zTag] " if zTag is not NULL. */
static inline void execTagged(const char *zTag, sqlite3 *db, const char *zSql){
  char *zErr = 0;
  if( sqlite3_exec(db, zSql, 0, 0, &zErr)==SQLITE_OK ) return;
  if( zTag ) fail_msg("[%s] %s: %s", zTag, zSql, zErr);
  else fail_msg("%s: %s", zSql, zErr);
}

static inline void exec(sqlite3 *db, const char *zSql){
  execTagged(0, db, zSql);
}

/* The first column of zSql's first row as an integer; a statement that
** fails or returns no row fails the test with SQLite's message. */
static inline int64_t tdetestQueryInt(sqlite3 *db, const char *zSql){
  sqlite3_stmt *p = 0;
  int64_t v = -1;
  if( sqlite3_prepare_v2(db, zSql, -1, &p, 0)!=SQLITE_OK ) fail_msg("%s: %s", zSql, sqlite3_errmsg(db));
  if( sqlite3_step(p)==SQLITE_ROW ) v = sqlite3_column_int64(p, 0);
  else fail_msg("%s: %s", zSql, sqlite3_errmsg(db));
  sqlite3_finalize(p);
  return v;
}

/* PRAGMA integrity_check said "ok" (and the statement ran cleanly). */
static inline int integrityOk(sqlite3 *db){
  sqlite3_stmt *p = 0;
  int bOk = 0;
  if( sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &p, 0)==SQLITE_OK
   && sqlite3_step(p)==SQLITE_ROW ){
    const unsigned char *z = sqlite3_column_text(p, 0);
    bOk = z && strcmp((const char*)z, "ok")==0;
  }
  if( sqlite3_finalize(p) ) bOk = 0;
  return bOk;
}

/* ---- the scratch folder and its wallet ------------------------------------- */

/* umask 077, then a new folder $TDE_TEST_TMP/<zPrefix>-XXXXXX (/tmp if
** unset) into zScratch.  0, or -1 with errno from mkdtemp. */
static inline int tdetestScratchMake(const char *zPrefix){
  const char *zTmp = getenv("TDE_TEST_TMP");
  umask(077);
  if( zTmp==0 || zTmp[0]==0 ) zTmp = "/tmp";
  mkdir(zTmp, 0700);
  snprintf(zScratch, sizeof(zScratch), "%s/%s-XXXXXX", zTmp, zPrefix);
  return mkdtemp(zScratch)==0 ? -1 : 0;
}

/* zScratch/tde.conf (TDETEST_WALLET_CONF) into zCfg, and its wallet with
** a new master key.  tde must be registered.  0 or -1 (said on stderr). */
static inline int tdetestWalletMake(void){
  char zId[TDE_KEYID_MAX+1];
  FILE *f;
  snprintf(zCfg, sizeof(zCfg), "%s/tde.conf", zScratch);
  f = fopen(zCfg, "w");
  if( !f ) return -1;
  fputs(TDETEST_WALLET_CONF, f);
  fclose(f);
  if( tde_keystore_create(zCfg, NULL, zId, sizeof(zId))!=TDE_OK ){
    fprintf(stderr, "tde_keystore_create: %s\n", tde_last_error());
    return -1;
  }
  return 0;
}

/* The usual group setup: scratch folder <zPrefix>-XXXXXX, tde registered
** (not as the default VFS) with quietLog, the wallet, with bOpen the
** keystore left open (tde_keystore_open), then the line "# scratch DIR".
** 0 or -1. */
static inline int tdetestGroupSetup(const char *zPrefix, int bOpen){
  if( tdetestScratchMake(zPrefix) ) return -1;
  if( strpbrk(zScratch, "?#%&=")!=0 ) return -1;   /* URIs are unescaped */
  if( tde_register(0)!=TDE_OK ) return -1;
  tde_set_log(quietLog, 0);
  tdeSetCreateVersion(tdetestNewFormat());
  if( tdetestFormat()==2 ) printf("# format 2 (TDE_TEST_FORMAT=2)\n");
  if( tdetestWalletMake() ) return -1;
  if( bOpen && tde_keystore_open(zCfg, NULL)!=TDE_OK ) return -1;
  printf("# scratch %s\n", zScratch);
  return 0;
}

/* Remove the scratch folder and all below it, unless TDE_KEEP_SCRATCH is
** set (to look at the files after a failure). */
static inline void tdetestScratchRemove(void){
  if( getenv("TDE_KEEP_SCRATCH")==0 ) nftw(zScratch, rmOne, 16, FTW_DEPTH | FTW_PHYS);
}

#endif /* TDETEST_H */
