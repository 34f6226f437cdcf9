/*
** Splicing authentic ciphertext (issue 7, item 4): nothing here is damaged
** the way test_tamper.c damages bytes; whole pages and WAL frames that
** authenticate somewhere are moved to where they do not belong:
**
**   swap      two pages of the database file exchanged; two WAL frames
**             exchanged
**   foreign   a page or a frame of another database, created under the
**             same keystore and master key (its own database id and data
**             key), put at the same position
**   fork      a page of a byte copy (cp) of the same database -- same id,
**             same data key -- put back at its own page number: an older
**             version of the page, or the version of a copy that diverged.
**             docs/FORMAT.md documents that format version 1 does not
**             detect this; the cases assert exactly what is read instead
**   old WAL   a frame of an earlier WAL generation (before a checkpoint
**             restarted the log) written back into the current one
**   rekey     a page or a frame sealed under a data-key version that a
**             finished tde_db_rekey removed
**
** DELETE and WAL journal modes, pages of 4096 bytes, and the same again
** at 1024.  Files are edited with plain I/O, never through SQLite.  Each
** case is opened by a fresh connection (in WAL mode SQLite then rebuilds
** its index from the log: recovery) and WAL cases also by a live
** connection whose index was built before the splice.  Every case names
** its expected outcome exactly: an error (and tde_verify naming the first
** spliced page or frame), the exact state before the last transaction (a
** bad final WAL frame taken for a torn write, docs/FORMAT.md "WAL file"),
** or, for the documented undetected cases, the exact content the spliced
** page held.  An older-generation WAL frame written back ends the log
** (documented; expectKnown); TDE_SPLICE_STRICT=1 makes it fail.  A summary
** line counts the cases.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>
#include "sqlite-tde.h"
#include "tdetest.h"

#define WAL_HDR    32
#define FRAME_HDR  24
#define NROW       400          /* rows of the base table: ~30 pages of 4096 */
#define MAX_FRAMES 2048

static uint32_t P;              /* page size of the current run */
static char zRun[32];           /* "delete 4096", for messages */

/* Summary: every case lands in exactly one of these. */
static long nCase, nDetected, nTorn, nUndetected, nFailed;
static int nFailHere;           /* failed checks in the current case */
static char zCase[320];         /* current case, for messages */

#define CHECK(cond, ...) do{ \
  if( !(cond) ){ \
    nFailHere++; \
    printf("#   FAIL [%s] %s: %s -- ", zRun, zCase, #cond); \
    printf(__VA_ARGS__); \
    printf("\n"); \
  } \
}while(0)

/* ---- files ---------------------------------------------------------------- */

/* Replace the bytes of an open file in place (same inode, so a live
** connection keeps reading this very file). */
static void overwriteInPlace(const char *zPath, const void *a, size_t n){
  int fd = open(zPath, O_WRONLY);
  assert_true(fd >= 0);
  assert_int_equal(pwrite(fd, a, n, 0), (ssize_t)n);
  assert_int_equal(ftruncate(fd, (off_t)n), 0);
  assert_int_equal(close(fd), 0);
}

/* A database and its WAL as bytes. */
typedef struct Img {
  unsigned char *aDb;
  size_t nDb;
  unsigned char *aWal;          /* NULL: no WAL file */
  size_t nWal;
  unsigned char *aMap;          /* DB-tdemap (format version 2, WAL mode); NULL: none */
  size_t nMap;
} Img;

static void imgFree(Img *p){
  free(p->aDb);
  free(p->aWal);
  free(p->aMap);
  memset(p, 0, sizeof(*p));
}

static void imgRead(Img *p, const char *zPath){
  char z[PATH_MAX+8];
  snprintf(z, sizeof(z), "%s-wal", zPath);
  p->aDb = readAll(zPath, &p->nDb);
  assert_non_null(p->aDb);
  p->aWal = readAll(z, &p->nWal);
  if( p->aWal && p->nWal==0 ){ free(p->aWal); p->aWal = 0; }
  snprintf(z, sizeof(z), "%s-tdemap", zPath);
  p->aMap = readAll(z, &p->nMap);
  if( p->aMap && p->nMap==0 ){ free(p->aMap); p->aMap = 0; }
}

static void imgWrite(const Img *p, const char *zPath){
  char z[PATH_MAX+8];
  removeDbFiles(zPath, 1);
  writeAll(zPath, p->aDb, p->nDb);
  if( p->aWal ){
    snprintf(z, sizeof(z), "%s-wal", zPath);
    writeAll(z, p->aWal, p->nWal);
  }
  if( p->aMap ){
    snprintf(z, sizeof(z), "%s-tdemap", zPath);
    writeAll(z, p->aMap, p->nMap);
  }
}

static void imgCopy(Img *pTo, const Img *pFrom){
  memset(pTo, 0, sizeof(*pTo));
  pTo->aDb = malloc(pFrom->nDb);
  assert_non_null(pTo->aDb);
  memcpy(pTo->aDb, pFrom->aDb, pFrom->nDb);
  pTo->nDb = pFrom->nDb;
  if( pFrom->aWal ){
    pTo->aWal = malloc(pFrom->nWal + 1);
    assert_non_null(pTo->aWal);
    memcpy(pTo->aWal, pFrom->aWal, pFrom->nWal);
    pTo->nWal = pFrom->nWal;
  }
  if( pFrom->aMap ){
    pTo->aMap = malloc(pFrom->nMap);
    assert_non_null(pTo->aMap);
    memcpy(pTo->aMap, pFrom->aMap, pFrom->nMap);
    pTo->nMap = pFrom->nMap;
  }
}

/* Page N at 8192 + (N-1)*P (version 3: through the layout, tdetest.h);
** WAL frame i at 32 + (i-1)*(24+P). */
static size_t pgOff(uint32_t n){ return (size_t)tdetestPageOff(P, n); }
static size_t frOff(uint32_t i){ return WAL_HDR + (size_t)(i-1)*(FRAME_HDR + P); }
static uint32_t nPagesOf(const Img *p){
  TdeLayout L = { tdetestFormat(), P, 0 };
  return tdeLayoutWholePages(&L, (int64_t)p->nDb);
}

static void swapBytes(unsigned char *a, size_t i, size_t j, size_t n){
  unsigned char *t = malloc(n);
  assert_non_null(t);
  memcpy(t, a+i, n);
  memmove(a+i, a+j, n);
  memcpy(a+j, t, n);
  free(t);
}

/* ---- SQLite ---------------------------------------------------------------- */

/* Through tde, with extended result codes: the cases name them exactly. */
static int openTdeExt(const char *zPath, sqlite3 **pDb){
  int rc = openTdeCfg(zPath, zCfg, pDb);
  if( rc==SQLITE_OK ) sqlite3_extended_result_codes(*pDb, 1);
  return rc;
}

static void execf(sqlite3 *db, const char *zFmt, ...){
  va_list ap;
  char *z;
  va_start(ap, zFmt);
  z = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  assert_non_null(z);
  execTagged(zRun, db, z);
  sqlite3_free(z);
}

static sqlite3_int64 queryInt(sqlite3 *db, const char *zSql){
  sqlite3_stmt *p = 0;
  sqlite3_int64 v = -1;
  if( sqlite3_prepare_v2(db, zSql, -1, &p, 0)==SQLITE_OK && sqlite3_step(p)==SQLITE_ROW ){
    v = sqlite3_column_int64(p, 0);
  }
  sqlite3_finalize(p);
  return v;
}

/* FNV-1a over every row of t read through the table, through the index
** t_k, and over sqlite_schema: one sum per query into aPart (if not NULL),
** and one over the three into *pH.  Extended result code. */
static int contentSum(sqlite3 *db, uint64_t *pH, uint64_t *aPart){
  static const char *azSql[3] = {
    "SELECT id, k, v FROM t ORDER BY id",
    "SELECT k, id FROM t INDEXED BY t_k ORDER BY k, id",
    "SELECT type, name, tbl_name, rootpage, sql FROM sqlite_schema ORDER BY name",
  };
  uint64_t h = 0xcbf29ce484222325ULL;
  for(int q=0; q<3; q++){
    sqlite3_stmt *p = 0;
    uint64_t hq = 0xcbf29ce484222325ULL;
    int rc = sqlite3_prepare_v2(db, azSql[q], -1, &p, 0);
    if( rc ) return sqlite3_extended_errcode(db);
    while( (rc = sqlite3_step(p))==SQLITE_ROW ){
      for(int i=0; i<sqlite3_column_count(p); i++){
        const unsigned char *z = sqlite3_column_text(p, i);
        int n = sqlite3_column_bytes(p, i);
        hq ^= (uint64_t)sqlite3_column_type(p, i); hq *= 0x100000001b3ULL;
        hq ^= (uint64_t)n; hq *= 0x100000001b3ULL;
        for(int j=0; j<n; j++){ hq ^= z[j]; hq *= 0x100000001b3ULL; }
      }
      hq ^= 0xff; hq *= 0x100000001b3ULL;
    }
    if( rc!=SQLITE_DONE ){ rc = sqlite3_extended_errcode(db); sqlite3_finalize(p); return rc; }
    if( sqlite3_finalize(p) ) return sqlite3_extended_errcode(db);
    if( aPart ) aPart[q] = hq;
    for(int j=0; j<8; j++){ h ^= (hq >> (8*j)) & 0xff; h *= 0x100000001b3ULL; }
  }
  *pH = h;
  return SQLITE_OK;
}

/* What one connection sees. */
typedef struct Outcome {
  int rcOpen;                   /* sqlite3_open_v2 (extended code) */
  char zOpenErr[128];
  int rcRead;                   /* contentSum (extended code) */
  uint64_t h;                   /* content, when rcRead==SQLITE_OK */
  uint64_t aPart[3];            /* ... read through t, through t_k, sqlite_schema */
  int rcInteg;                  /* PRAGMA integrity_check statement (extended code) */
  int bIntegOk;                 /* ... and it said "ok" */
  char zInteg[96];              /* its first line */
  int rcVerify;                 /* tde_verify */
  int64_t iBad;
} Outcome;

static void probeDb(sqlite3 *db, Outcome *o){
  sqlite3_stmt *p = 0;
  int64_t nChecked = 0;
  memset(o, 0, sizeof(*o));
  o->rcRead = contentSum(db, &o->h, o->aPart);
  o->rcInteg = sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &p, 0);
  if( o->rcInteg==SQLITE_OK ){
    int rc = sqlite3_step(p);
    if( rc==SQLITE_ROW ){
      o->bIntegOk = strcmp((const char*)sqlite3_column_text(p, 0), "ok")==0;
      snprintf(o->zInteg, sizeof(o->zInteg), "%s", (const char*)sqlite3_column_text(p, 0));
      while( (rc = sqlite3_step(p))==SQLITE_ROW ){}
    }
    o->rcInteg = rc==SQLITE_DONE ? SQLITE_OK : sqlite3_extended_errcode(db);
    if( o->rcInteg ) o->bIntegOk = 0;
  }else{
    o->rcInteg = sqlite3_extended_errcode(db);
  }
  sqlite3_finalize(p);
  o->rcVerify = tde_verify(db, "main", &nChecked, &o->iBad, 0, 0);
}

/* A fresh connection: in WAL mode SQLite runs recovery (no -shm). */
static void probeFresh(const char *zPath, Outcome *o){
  sqlite3 *db = 0;
  char z[PATH_MAX+8];
  snprintf(z, sizeof(z), "%s-shm", zPath);
  unlink(z);
  memset(o, 0, sizeof(*o));
  o->rcOpen = openTdeExt(zPath, &db);
  if( o->rcOpen ){
    o->rcOpen = sqlite3_extended_errcode(db);
    snprintf(o->zOpenErr, sizeof(o->zOpenErr), "%s", sqlite3_errmsg(db));
    o->rcRead = o->rcInteg = o->rcVerify = -1;
    sqlite3_close(db);
    return;
  }
  /* Never checkpoint a spliced WAL into the database on close. */
  sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int*)0);
  probeDb(db, o);
  sqlite3_close(db);
}

/*
** A live connection: opens the authentic files (pGood), builds its WAL
** index from them reading only page 1 and the schema, then the WAL is
** replaced in place by the spliced one (pBad) and everything is read.
*/
static void probeLive(const char *zPath, const Img *pGood, const Img *pBad, Outcome *o){
  sqlite3 *db = 0;
  char z[PATH_MAX+8];
  imgWrite(pGood, zPath);
  assert_int_equal(openTdeExt(zPath, &db), SQLITE_OK);
  sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int*)0);
  assert_true(queryInt(db, "SELECT count(*) FROM sqlite_schema") >= 2);
  snprintf(z, sizeof(z), "%s-wal", zPath);
  overwriteInPlace(z, pBad->aWal, pBad->nWal);
  probeDb(db, o);
  sqlite3_close(db);
}

/* tde_verify alone, fresh connection; -1 and *prcOpen if the open fails. */
static int verifyOnly(const char *zPath, int64_t *piBad, int *prcOpen){
  sqlite3 *db = 0;
  int64_t nChecked = 0;
  int rc;
  *piBad = 0;
  *prcOpen = openTdeExt(zPath, &db);
  if( *prcOpen ){ *prcOpen = sqlite3_extended_errcode(db); sqlite3_close(db); return -1; }
  sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int*)0);
  rc = tde_verify(db, "main", &nChecked, piBad, 0, 0);
  sqlite3_close(db);
  return rc;
}

static const char *codeName(int rc){
  static char z[64];
  if( rc==-1 ) return "open failed";
  if( rc==SQLITE_IOERR_AUTH ) return "SQLITE_IOERR_AUTH";
  snprintf(z, sizeof(z), "%s (%d)", sqlite3_errstr(rc), rc);
  return z;
}

static void describe(const char *zWho, const Outcome *o, const uint64_t *aH, int nH){
  printf("#     %-6s read: ", zWho);
  if( o->rcOpen ){ printf("open failed: %s (%s)\n", codeName(o->rcOpen), o->zOpenErr); return; }
  if( o->rcRead ) printf("%s", codeName(o->rcRead));
  else{
    int i;
    for(i=0; i<nH && aH[i]!=o->h; i++){}
    if( i<nH ) printf("state %d", i); else printf("OTHER CONTENT");
  }
  if( o->rcInteg ) printf("; integrity_check: %s", codeName(o->rcInteg));
  else printf("; integrity_check: %s%s%s", o->bIntegOk ? "ok" : "\"", o->bIntegOk ? "" : o->zInteg,
              o->bIntegOk ? "" : "\"");
  printf("; tde_verify: ");
  if( o->rcVerify==TDE_OK ) printf("ok\n");
  else if( o->iBad>0 ) printf("%s, page %lld\n", tde_errstr(o->rcVerify), (long long)o->iBad);
  else if( o->iBad==TDE_VERIFY_WAL_HEADER ) printf("%s, WAL header\n", tde_errstr(o->rcVerify));
  else if( o->iBad<0 && o->iBad>-1000 ) printf("%s, WAL frame %lld\n", tde_errstr(o->rcVerify), (long long)(-1 - o->iBad));
  else printf("%s, %lld\n", tde_errstr(o->rcVerify), (long long)o->iBad);
}

/* ---- case bookkeeping ------------------------------------------------------ */

#define KIND_DETECTED    1      /* an error */
#define KIND_TORN        2      /* exact state before the last transaction */
#define KIND_UNDETECTED  3      /* documented: exact older content, no error */
#define KIND_KNOWN       4      /* documented: an older-generation frame ends the log (expectKnown) */

static long nKnown;
static int bStrict;             /* TDE_SPLICE_STRICT=1: known issues fail */

static void caseBegin(const char *zFmt, ...){
  va_list ap;
  va_start(ap, zFmt);
  vsnprintf(zCase, sizeof(zCase), zFmt, ap);
  va_end(ap);
  nFailHere = 0;
  nCase++;
  printf("# [%s] %s\n", zRun, zCase);
}

static void caseEnd(int eKind){
  if( nFailHere ){ nFailed++; return; }
  if( eKind==KIND_DETECTED ) nDetected++;
  else if( eKind==KIND_TORN ) nTorn++;
  else if( eKind==KIND_KNOWN ) nKnown++;
  else nUndetected++;
}

/* The splice must make every read fail with the shim's authentication
** error, never return rows, and tde_verify must name iBad.  Page 1 too:
** SQLite's peek at the file header when it opens (no lock held) gets "no
** header" from the shim, and page 1 fails at the first read under the
** lock (docs/FORMAT.md, error mapping), so the open succeeds. */
static void expectError(const Outcome *o, int64_t iBad){
  CHECK(o->rcOpen==SQLITE_OK, "open gave %s", codeName(o->rcOpen));
  CHECK(o->rcRead==SQLITE_IOERR_AUTH, "reading the rows gave %s", codeName(o->rcRead));
  CHECK(o->rcInteg!=SQLITE_OK || !o->bIntegOk, "integrity_check said ok");
  CHECK(o->rcVerify==TDE_AUTH, "tde_verify returned %d", o->rcVerify);
  CHECK(o->iBad==iBad, "tde_verify named %lld, expected %lld", (long long)o->iBad, (long long)iBad);
}

/* No error at all, and exactly the state h. */
static void expectState(const Outcome *o, uint64_t h, int bIntegOk){
  CHECK(o->rcRead==SQLITE_OK, "reading the rows gave %s", codeName(o->rcRead));
  CHECK(o->rcRead!=SQLITE_OK || o->h==h, "rows differ from the expected state");
  CHECK(o->rcInteg==SQLITE_OK, "integrity_check failed to run: %s", codeName(o->rcInteg));
  CHECK(o->bIntegOk==bIntegOk, "integrity_check said %s", o->bIntegOk ? "ok" : "not ok");
  CHECK(o->rcVerify==TDE_OK, "tde_verify returned %d (bad %lld)", o->rcVerify, (long long)o->iBad);
}

/*
** tde_verify names the spliced pages one by one: it reports the lowest,
** and after that page is restored from pGood, the next; with all restored
** the file verifies and reads back as pGood's state hGood.
*/
static void expectVerifyNames(const char *zPath, const Img *pGood, const uint32_t *aPg, int nPg,
                              uint64_t hGood){
  uint32_t a[8];
  Outcome o;
  assert_true(nPg <= 8);
  memcpy(a, aPg, sizeof(a[0]) * (size_t)nPg);
  for(int i=0; i<nPg; i++){             /* tiny sort */
    for(int j=i+1; j<nPg; j++) if( a[j]<a[i] ){ uint32_t t = a[i]; a[i] = a[j]; a[j] = t; }
  }
  for(int i=0; i<nPg; i++){
    int64_t iBad = 0;
    int rcOpen = 0;
    int rc = verifyOnly(zPath, &iBad, &rcOpen);
    int fd;
    CHECK(rc!=-1, "the open failed: %s", codeName(rcOpen));
    CHECK(rc==TDE_AUTH && iBad==(int64_t)a[i], "tde_verify gave %d naming %lld, expected page %u",
          rc, (long long)iBad, a[i]);
    fd = open(zPath, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, pGood->aDb + pgOff(a[i]), P, (off_t)pgOff(a[i])), (ssize_t)P);
    close(fd);
  }
  probeFresh(zPath, &o);
  CHECK(o.rcRead==SQLITE_OK && o.h==hGood && o.rcVerify==TDE_OK,
        "with the spliced pages restored the file does not read back intact");
}

/* ---- databases ------------------------------------------------------------- */

static const char *zTableSql =
  "CREATE TABLE t(id INTEGER PRIMARY KEY, k INT, v TEXT);"
  "CREATE INDEX t_k ON t(k);";

/* A new database of NROW rows in journal mode zMode, closed cleanly (in
** WAL mode checkpointed: no WAL left). */
static void buildDb(const char *zPath, const char *zMode, Img *pOut, uint64_t *pH){
  sqlite3 *db = 0;
  removeDbFiles(zPath, 1);
  assert_int_equal(openTdeExt(zPath, &db), SQLITE_OK);
  execf(db, "PRAGMA page_size=%u", P);
  execf(db, "PRAGMA journal_mode=%s", zMode);
  execTagged(zRun, db, zTableSql);
  execf(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<%d) "
            "INSERT INTO t SELECT i, i*7919 %% 1000, printf('row %%04d %%.240c', i, char(65 + i %% 26)) FROM c",
        NROW);
  assert_int_equal(queryInt(db, "PRAGMA page_size"), P);
  assert_int_equal(contentSum(db, pH, 0), SQLITE_OK);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  imgRead(pOut, zPath);
  assert_null(pOut->aWal);
  assert_int_equal((pOut->nDb - TDE_HEADER_BYTES) % P, 0);
}

/* Copy pFrom to zPath, run zSql there (then in WAL mode checkpoint the log
** away), close; the result into pOut, its content into *pH. */
static void mutate(const char *zPath, const Img *pFrom, const char *zSql, Img *pOut, uint64_t *pH){
  sqlite3 *db = 0;
  imgWrite(pFrom, zPath);
  assert_int_equal(openTdeExt(zPath, &db), SQLITE_OK);
  execTagged(zRun, db, zSql);
  assert_int_equal(contentSum(db, pH, 0), SQLITE_OK);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  imgRead(pOut, zPath);
  assert_null(pOut->aWal);
}

/* Page kinds from dbstat: 'L' leaf of t, 'I' interior of t, 'K' page of
** index t_k, 'S' sqlite_schema, '?' anything else. */
static void pageKinds(const char *zPath, char *aKind, uint32_t nPage){
  sqlite3 *db = 0;
  sqlite3_stmt *p = 0;
  memset(aKind, '?', nPage + 1);
  assert_int_equal(openTdeExt(zPath, &db), SQLITE_OK);
  if( sqlite3_prepare_v2(db, "SELECT pageno, name, pagetype FROM dbstat", -1, &p, 0) ){
    fail_msg("dbstat is needed to find the pages of t (SQLITE_ENABLE_DBSTAT_VTAB): %s", sqlite3_errmsg(db));
  }
  while( sqlite3_step(p)==SQLITE_ROW ){
    sqlite3_int64 pg = sqlite3_column_int64(p, 0);
    const char *zName = (const char*)sqlite3_column_text(p, 1);
    const char *zType = (const char*)sqlite3_column_text(p, 2);
    char c = '?';
    if( pg<1 || pg>(sqlite3_int64)nPage ) continue;
    if( strcmp(zName, "t")==0 ) c = strcmp(zType, "leaf")==0 ? 'L' : strcmp(zType, "internal")==0 ? 'I' : '?';
    else if( strcmp(zName, "t_k")==0 ) c = 'K';
    else if( strcmp(zName, "sqlite_schema")==0 ) c = 'S';
    aKind[pg] = c;
  }
  assert_int_equal(sqlite3_finalize(p), SQLITE_OK);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* Pages (other than page 1, which a commit in rollback mode always
** changes: the file change counter) whose stored bytes differ. */
static int diffPages(const Img *a, const Img *b, uint32_t *aOut, int nMax, int *pbPage1){
  int n = 0;
  uint32_t nPage = nPagesOf(a);
  assert_int_equal(a->nDb, b->nDb);
  *pbPage1 = memcmp(a->aDb + pgOff(1), b->aDb + pgOff(1), P)!=0;
  for(uint32_t pg=2; pg<=nPage; pg++){
    if( memcmp(a->aDb + pgOff(pg), b->aDb + pgOff(pg), P)!=0 ){
      if( n<nMax ) aOut[n] = pg;
      n++;
    }
  }
  return n;
}

/* Database id of the header in force (both slots hold it). */
static const unsigned char *dbidOf(const Img *p){ return p->aDb + 20; }

/* Data-key versions in header slot s: current one and each keyring entry's. */
static void headerVersions(const Img *p, int s, uint32_t *pCur, uint32_t *aVer, int *pn){
  const unsigned char *h = p->aDb + 4096*s;
  size_t off = 50;
  int n = (h[48]<<8) | h[49];
  *pCur = ((uint32_t)h[40]<<24) | ((uint32_t)h[41]<<16) | ((uint32_t)h[42]<<8) | h[43];
  assert_true(n <= 16);
  for(int i=0; i<n; i++){
    int len = (h[off]<<8) | h[off+1];
    aVer[i] = ((uint32_t)h[off+2]<<24) | ((uint32_t)h[off+3]<<16) | ((uint32_t)h[off+4]<<8) | h[off+5];
    off += (size_t)len;
    assert_true(len > 0 && off < 4032);
  }
  *pn = n;
}

/* ---- cases on database pages ----------------------------------------------- */

/* Swap pages a and b of pBase (content hBase): an error, verify names both. */
static void caseSwap(const char *zDst, const Img *pBase, uint64_t hBase, uint32_t a, uint32_t b,
                     const char *zWhat){
  Img w;
  Outcome o;
  uint32_t aPg[2] = { a, b };
  caseBegin("swap pages %u and %u (%s)", a, b, zWhat);
  imgCopy(&w, pBase);
  swapBytes(w.aDb, pgOff(a), pgOff(b), P);
  imgWrite(&w, zDst);
  probeFresh(zDst, &o);
  describe("fresh", &o, &hBase, 1);
  expectError(&o, a<b ? a : b);
  expectVerifyNames(zDst, pBase, aPg, 2, hBase);
  imgFree(&w);
  caseEnd(KIND_DETECTED);
}

/* Page pg of another database (pOther) at the same position. */
static void caseForeign(const char *zDst, const Img *pBase, uint64_t hBase, const Img *pOther,
                        uint32_t pg, const char *zWhat){
  Img w;
  Outcome o;
  caseBegin("page %u (%s) from another database under the same master key", pg, zWhat);
  imgCopy(&w, pBase);
  memcpy(w.aDb + pgOff(pg), pOther->aDb + pgOff(pg), P);
  imgWrite(&w, zDst);
  probeFresh(zDst, &o);
  describe("fresh", &o, &hBase, 1);
  expectError(&o, pg);
  expectVerifyNames(zDst, pBase, &pg, 1, hBase);
  imgFree(&w);
  caseEnd(KIND_DETECTED);
}

/*
** Fork.  zSql changes the database after a byte copy was taken (pBase is
** that copy).  bOlderIntoNew: the copy's leaf (the older version) goes
** back into the changed database; else the changed copy's leaf goes into
** the unchanged original.  The statement must change exactly one leaf of
** t (plus, for a DELETE, the index page holding the row's entry; plus
** page 1 in rollback mode: the change counter).  No error anywhere, and
** reading t gives exactly the rows of the leaf version spliced in (with
** every other row, identical in both, as it was), reading through the
** index gives exactly the index of the receiving file: never a mix
** within a page, never an error.
*/
static void caseFork(const char *zDir, const char *zDst, const Img *pBase,
                     const char *zSql, int bOlderIntoNew, int bIntegOk, const char *zWhat){
  char zMut[PATH_MAX];
  Img m, w;
  uint64_t hMut = 0;
  uint32_t aDiff[8], leaf = 0;
  int nDiff, bPage1, nLeaf = 0, nIdx = 0;
  char *aKind;
  Outcome o, oBase, oMut;
  const Outcome *pSrc, *pDst;
  /* Version 2 in WAL mode (DB-tdemap), version 3 in WAL mode (the map in
  ** the file): detected by the page map. */
  int bMap = pBase->aMap!=0 || (tdetestFormat()==3 && strncmp(zRun, "wal", 3)==0);
  caseBegin("fork: %s (%s: a page rolled back to another version of itself)", zWhat,
            bMap ? "detected by the page map" : "DOCUMENTED UNDETECTED in rollback-journal mode");
  joinPath(zMut, zDir, "fork-mutated.db");
  mutate(zMut, pBase, zSql, &m, &hMut);
  probeFresh(zMut, &oMut);
  imgWrite(pBase, zDst);
  probeFresh(zDst, &oBase);
  assert_int_equal(oMut.rcRead, SQLITE_OK);
  assert_int_equal(oBase.rcRead, SQLITE_OK);
  assert_true(oMut.h==hMut);
  assert_true(oMut.aPart[0]!=oBase.aPart[0]);      /* the rows of t changed */
  aKind = malloc(nPagesOf(pBase) + 2);
  assert_non_null(aKind);
  pageKinds(zDst, aKind, nPagesOf(pBase));
  nDiff = diffPages(pBase, &m, aDiff, 8, &bPage1);
  for(int i=0; i<nDiff && i<8; i++){
    if( aKind[aDiff[i]]=='L' ){ nLeaf++; leaf = aDiff[i]; }
    else if( aKind[aDiff[i]]=='K' ) nIdx++;
  }
  printf("#     pages changed after the copy: leaf %u of t, %d index page(s), page 1 %s\n",
         leaf, nIdx, bPage1 ? "too (change counter)" : "unchanged");
  CHECK(nLeaf==1 && nLeaf + nIdx==nDiff, "construction: the statement must change one leaf of t "
        "(and index pages), it changed %d pages", nDiff);
  if( nLeaf==1 ){
    uint64_t aH[2];
    if( bOlderIntoNew ){
      imgCopy(&w, &m);
      memcpy(w.aDb + pgOff(leaf), pBase->aDb + pgOff(leaf), P);
      pSrc = &oBase; pDst = &oMut;
    }else{
      imgCopy(&w, pBase);
      memcpy(w.aDb + pgOff(leaf), m.aDb + pgOff(leaf), P);
      pSrc = &oMut; pDst = &oBase;
    }
    imgWrite(&w, zDst);
    probeFresh(zDst, &o);
    aH[0] = oBase.h; aH[1] = oMut.h;
    describe("fresh", &o, aH, 2);
    if( bMap ){
      /* Format version 2 in WAL mode: the page map names the version the
      ** file must hold (docs/FORMAT.md "Page rollback: the page map"). */
      CHECK(o.rcOpen!=SQLITE_OK || o.rcRead==SQLITE_IOERR_AUTH,
            "with the page map, reading gave %s, not SQLITE_IOERR_AUTH", codeName(o.rcRead));
      imgFree(&w);
      free(aKind);
      imgFree(&m);
      caseEnd(KIND_DETECTED);
      return;
    }
    if( o.rcRead==SQLITE_OK ){
      printf("#     (state 0: the copy, state 1: after the statement) rows of t read as state %s, "
             "through the index as state %s\n",
             o.aPart[0]==oBase.aPart[0] ? "0" : o.aPart[0]==oMut.aPart[0] ? "1" : "OTHER",
             o.aPart[1]==oBase.aPart[1] && o.aPart[1]==oMut.aPart[1] ? "0 = 1" :
             o.aPart[1]==oBase.aPart[1] ? "0" : o.aPart[1]==oMut.aPart[1] ? "1" : "OTHER");
    }
    CHECK(o.rcOpen==SQLITE_OK && o.rcRead==SQLITE_OK, "reading gave %s", codeName(o.rcRead));
    CHECK(o.rcRead!=SQLITE_OK || o.aPart[0]==pSrc->aPart[0],
          "the rows of t are not exactly those of the spliced leaf version");
    CHECK(o.rcRead!=SQLITE_OK || o.aPart[1]==pDst->aPart[1],
          "reading through the index does not give the receiving file's index");
    CHECK(o.rcRead!=SQLITE_OK || o.aPart[2]==oBase.aPart[2], "the schema differs");
    CHECK(o.rcInteg==SQLITE_OK && o.bIntegOk==bIntegOk, "integrity_check: %s",
          o.rcInteg ? codeName(o.rcInteg) : o.bIntegOk ? "ok" : "not ok");
    CHECK(o.rcVerify==TDE_OK, "tde_verify returned %d (bad %lld)", o.rcVerify, (long long)o.iBad);
    imgFree(&w);
  }
  free(aKind);
  imgFree(&m);
  caseEnd(KIND_UNDETECTED);
}

/*
** Rekey: a page sealed under data-key version 1 written back after
** tde_db_rekey finished (version 2 current, version 1 removed from the
** header): an error.
*/
static void caseRekey(const char *zDir, const char *zDst, const Img *pBase, uint32_t pg){
  char zR[PATH_MAX];
  sqlite3 *db = 0;
  Img r, w;
  uint64_t hR = 0;
  uint32_t cur, aVer[16];
  int nVer, rc, nSame = 0;
  Outcome o;
  caseBegin("page %u sealed under data-key version 1, written back after a finished rekey", pg);
  joinPath(zR, zDir, "rekey.db");
  imgWrite(pBase, zR);
  assert_int_equal(openTdeExt(zR, &db), SQLITE_OK);
  rc = tde_db_rekey(db, "main", 8, 0, 0);
  CHECK(rc==TDE_OK, "tde_db_rekey: %s", tde_last_error());
  CHECK(queryInt(db, "SELECT data_key_version FROM tde_status WHERE schema='main'")==2,
        "data-key version after the rekey is not 2");
  CHECK(queryInt(db, "SELECT rekey_in_progress FROM tde_status WHERE schema='main'")==0,
        "rekey still in progress");
  assert_int_equal(contentSum(db, &hR, 0), SQLITE_OK);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  imgRead(&r, zR);
  CHECK(r.aWal==0, "a WAL is left after the rekey");
  for(int s=0; s<2; s++){
    headerVersions(&r, s, &cur, aVer, &nVer);
    CHECK(cur==2 && nVer>=1, "header slot %d: current version %u, %d entries", s, cur, nVer);
    for(int i=0; i<nVer; i++) CHECK(aVer[i]==2, "header slot %d still wraps version %u", s, aVer[i]);
  }
  for(uint32_t i=1; i<=nPagesOf(&r); i++){
    if( memcmp(r.aDb + pgOff(i), pBase->aDb + pgOff(i), P)==0 ) nSame++;
  }
  CHECK(nSame==0, "%d pages were not rewritten by the rekey", nSame);
  imgCopy(&w, &r);
  memcpy(w.aDb + pgOff(pg), pBase->aDb + pgOff(pg), P);
  imgWrite(&w, zDst);
  probeFresh(zDst, &o);
  describe("fresh", &o, &hR, 1);
  expectError(&o, pg);
  expectVerifyNames(zDst, &r, &pg, 1, hR);
  imgFree(&w);
  imgFree(&r);
  caseEnd(KIND_DETECTED);
}

static void runPages(const char *zMode, uint32_t pgsz){
  char zDir[PATH_MAX], zBase[PATH_MAX], zOther[PATH_MAX], zDst[PATH_MAX];
  Img base, other;
  uint64_t hBase = 0, hOther = 0;
  char *aKind;
  uint32_t nPage, aLeaf[512], nLeaf = 0, idxPg = 0;
  Outcome o;
  int nFailBefore = (int)nFailed;
  P = pgsz;
  snprintf(zRun, sizeof(zRun), "%s %u", zMode, pgsz);
  snprintf(zDir, sizeof(zDir), "%s/%s-%u", zScratch, zMode, pgsz);
  mkdir(zDir, 0700);
  joinPath(zBase, zDir, "base.db");
  joinPath(zOther, zDir, "other.db");
  joinPath(zDst, zDir, "spliced.db");

  /* Two databases made the same way, independently: same content and
  ** layout, different database ids and data keys. */
  buildDb(zBase, zMode, &base, &hBase);
  buildDb(zOther, zMode, &other, &hOther);
  assert_true(hBase==hOther);
  assert_int_equal(base.nDb, other.nDb);
  assert_true(memcmp(dbidOf(&base), dbidOf(&other), 16)!=0);
  nPage = nPagesOf(&base);
  aKind = malloc(nPage + 2);
  assert_non_null(aKind);
  pageKinds(zBase, aKind, nPage);
  for(uint32_t pg=1; pg<=nPage; pg++){
    if( aKind[pg]=='L' && nLeaf<512 ) aLeaf[nLeaf++] = pg;
    if( aKind[pg]=='K' && !idxPg ) idxPg = pg;
  }
  printf("# [%s] database: %u pages of %u bytes (%u leaves of t, first index page %u)\n",
         zRun, nPage, P, nLeaf, idxPg);
  assert_true(nLeaf >= 8);
  assert_true(idxPg > 0);

  /* Control: the unspliced copy reads back and verifies. */
  imgWrite(&base, zDst);
  probeFresh(zDst, &o);
  assert_int_equal(o.rcRead, SQLITE_OK);
  assert_true(o.h==hBase);
  assert_true(o.bIntegOk);
  assert_int_equal(o.rcVerify, TDE_OK);

  /* 1. Pages swapped. */
  caseSwap(zDst, &base, hBase, aLeaf[1], aLeaf[nLeaf-2], "two leaves of t");
  caseSwap(zDst, &base, hBase, aLeaf[nLeaf/2], idxPg, "a leaf of t and a page of index t_k");
  caseSwap(zDst, &base, hBase, aLeaf[nLeaf/2], aLeaf[nLeaf/2 + 1], "neighbouring leaves of t");
  caseSwap(zDst, &base, hBase, 1, 2, "page 1 and page 2");

  /* 2. Pages of another database under the same master key. */
  caseForeign(zDst, &base, hBase, &other, aLeaf[3], "a leaf of t");
  caseForeign(zDst, &base, hBase, &other, idxPg, "index t_k");
  caseForeign(zDst, &base, hBase, &other, 1, "page 1");

  /* 3. Forks: same database id, same data key. */
  caseFork(zDir, zDst, &base,
           "UPDATE t SET v = printf('upd %04d %.240c', id, 'z') WHERE id = 200", 1, 1,
           "older version of a leaf of t (one row updated in place after the copy, "
           "row count unchanged) written back");
  caseFork(zDir, zDst, &base,
           "DELETE FROM t WHERE id = 250", 1, 0,
           "older version of a leaf of t (one row deleted after the copy) written back, "
           "index page left as it is: integrity_check reports the row missing from the index");
  caseFork(zDir, zDst, &base,
           "UPDATE t SET v = printf('cpy %04d %.240c', id, 'y') WHERE id = 120", 0, 1,
           "leaf of t from a cp of the database that then diverged, put into the unchanged original");

  /* 5. A page of a removed data-key version. */
  caseRekey(zDir, zDst, &base, aLeaf[2]);

  free(aKind);
  imgFree(&base);
  imgFree(&other);
  if( (int)nFailed > nFailBefore ) fail_msg("[%s] %ld case(s) failed (see FAIL lines)", zRun, nFailed - nFailBefore);
}

static void test_pages_delete_4096(void **s){ (void)s; runPages("delete", 4096); }
static void test_pages_wal_4096(void **s){ (void)s; runPages("wal", 4096); }
static void test_pages_delete_1024(void **s){ (void)s; runPages("delete", 1024); }
static void test_pages_wal_1024(void **s){ (void)s; runPages("wal", 1024); }

/* ---- cases on WAL frames --------------------------------------------------- */

/* One frame of the current WAL generation. */
typedef struct Frame {
  uint32_t pgno;
  int bCommit;
  int iTx;                      /* 1-based transaction of the generation */
  int bNewest;                  /* no later frame holds the same page */
} Frame;

static uint32_t get32(const unsigned char *a){
  return ((uint32_t)a[0]<<24) | ((uint32_t)a[1]<<16) | ((uint32_t)a[2]<<8) | a[3];
}

/* Frames of the WAL's current generation (salts equal the header's). */
static uint32_t parseWal(const Img *p, Frame *aF){
  uint32_t n = 0, nAll;
  int iTx = 1;
  assert_non_null(p->aWal);
  assert_int_equal((p->nWal - WAL_HDR) % (FRAME_HDR + P), 0);
  assert_int_equal(get32(p->aWal + 8), P);
  nAll = (uint32_t)((p->nWal - WAL_HDR) / (FRAME_HDR + P));
  for(uint32_t i=1; i<=nAll && i<MAX_FRAMES; i++){
    const unsigned char *h = p->aWal + frOff(i);
    if( memcmp(h+8, p->aWal+16, 8)!=0 ) break;
    aF[i].pgno = get32(h);
    aF[i].bCommit = get32(h+4)!=0;
    aF[i].iTx = iTx;
    if( aF[i].bCommit ) iTx++;
    n = i;
  }
  for(uint32_t i=1; i<=n; i++){
    aF[i].bNewest = 1;
    for(uint32_t j=i+1; j<=n; j++) if( aF[j].pgno==aF[i].pgno ) aF[i].bNewest = 0;
  }
  return n;
}

/* First frame of transaction iTx that is the newest copy of its page and
** (bCommit 0) not its commit frame, (bCommit 1) its commit frame, or
** (bCommit -1) any; and whose page is not page 1. */
static uint32_t pickFrame(const Frame *aF, uint32_t n, int iTx, int bCommit, int bNewest){
  for(uint32_t i=1; i<=n; i++){
    if( aF[i].iTx!=iTx || aF[i].pgno==1 ) continue;
    if( bNewest && !aF[i].bNewest ) continue;
    if( bCommit>=0 && aF[i].bCommit!=bCommit ) continue;
    return i;
  }
  return 0;
}

#define NTX 4                   /* transactions in the WAL's current generation */

/*
** The WAL database: NROW rows checkpointed; a first WAL generation of two
** transactions (kept as *pGenA); a checkpoint that copies it all, so that
** the next write restarts the log (new salts, frames from 1 again); then
** NTX transactions of several frames each, left in the WAL.  aH[0] is the
** state before them, aH[i] after transaction i.
*/
static void buildWal(const char *zPath, Img *pOut, uint64_t *aH, Img *pGenA){
  sqlite3 *db = 0;
  char zWal[PATH_MAX+8];
  static const char *azTx[NTX] = {
    "UPDATE t SET v = printf('tx1 %04d %.240c', id, 'a') WHERE id BETWEEN 10 AND 40",
    "INSERT INTO t SELECT 1000 + id, id, printf('tx2 %04d %.240c', id, 'b') FROM t WHERE id <= 15",
    "UPDATE t SET v = printf('tx3 %04d %.240c', id, 'c') WHERE id BETWEEN 150 AND 190",
    "UPDATE t SET k = k + 1, v = printf('tx4 %04d %.240c', id, 'd') WHERE id BETWEEN 300 AND 340",
  };
  snprintf(zWal, sizeof(zWal), "%s-wal", zPath);
  removeDbFiles(zPath, 1);
  assert_int_equal(openTdeExt(zPath, &db), SQLITE_OK);
  execf(db, "PRAGMA page_size=%u", P);
  execTagged(zRun, db, "PRAGMA journal_mode=WAL");
  execTagged(zRun, db, "PRAGMA wal_autocheckpoint=0");
  execTagged(zRun, db, zTableSql);
  execf(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<%d) "
            "INSERT INTO t SELECT i, i*7919 %% 1000, printf('row %%04d %%.240c', i, char(65 + i %% 26)) FROM c",
        NROW);
  execTagged(zRun, db, "PRAGMA wal_checkpoint(TRUNCATE)");
  /* Generation A. */
  execTagged(zRun, db, "UPDATE t SET v = printf('genA %04d %.239c', id, 'g') WHERE id BETWEEN 1 AND 60");
  execTagged(zRun, db, "UPDATE t SET v = printf('genA %04d %.239c', id, 'h') WHERE id BETWEEN 200 AND 260");
  memset(pGenA, 0, sizeof(*pGenA));
  pGenA->aWal = readAll(zWal, &pGenA->nWal);
  assert_non_null(pGenA->aWal);
  {
    int nLog = -1, nCkpt = -1;
    assert_int_equal(sqlite3_wal_checkpoint_v2(db, "main", SQLITE_CHECKPOINT_PASSIVE, &nLog, &nCkpt),
                     SQLITE_OK);
    assert_true(nLog > 0 && nCkpt==nLog);
  }
  assert_int_equal(contentSum(db, &aH[0], 0), SQLITE_OK);
  for(int i=0; i<NTX; i++){
    execTagged(zRun, db, azTx[i]);
    assert_int_equal(contentSum(db, &aH[i+1], 0), SQLITE_OK);
  }
  sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int*)0);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  imgRead(pOut, zPath);
  assert_non_null(pOut->aWal);
  /* The log really restarted: new salts. */
  assert_true(memcmp(pOut->aWal + 16, pGenA->aWal + 16, 8)!=0);
}

/* Fresh connection, and live connection, on one spliced WAL. */
static void probeWal(const char *zDst, const Img *pGood, const Img *pBad,
                     Outcome *pFresh, Outcome *pLive, const uint64_t *aH, int nH){
  imgWrite(pBad, zDst);
  probeFresh(zDst, pFresh);
  describe("fresh", pFresh, aH, nH);
  probeLive(zDst, pGood, pBad, pLive);
  describe("live", pLive, aH, nH);
}

/* Live connection: its index lists the spliced frame, and reads of frame
** pages are strict: an error (never other rows), verify names frame iBad. */
static void expectLiveError(const Outcome *o, uint32_t iBad){
  CHECK(o->rcRead!=SQLITE_OK || o->rcInteg!=SQLITE_OK, "the live connection read everything without an error");
  CHECK(o->rcRead==SQLITE_OK || o->rcRead==SQLITE_IOERR_AUTH, "live read gave %s", codeName(o->rcRead));
  CHECK(o->rcInteg==SQLITE_OK || o->rcInteg==SQLITE_IOERR_AUTH, "live integrity_check gave %s", codeName(o->rcInteg));
  CHECK(o->rcVerify==TDE_AUTH && o->iBad==TDE_VERIFY_WAL_FRAME(iBad), "live tde_verify gave %d naming %lld, "
        "expected WAL frame %u", o->rcVerify, (long long)o->iBad, iBad);
}

/* Fresh connection: recovery refuses the log. */
static void expectFreshError(const Outcome *o, uint32_t iBad){
  CHECK(o->rcRead==SQLITE_IOERR_AUTH, "fresh read gave %s", codeName(o->rcRead));
  CHECK(o->rcInteg!=SQLITE_OK || !o->bIntegOk, "fresh integrity_check said ok");
  CHECK(o->rcVerify==TDE_AUTH && o->iBad==TDE_VERIFY_WAL_FRAME(iBad), "fresh tde_verify gave %d naming %lld, "
        "expected WAL frame %u", o->rcVerify, (long long)o->iBad, iBad);
}

/*
** Documented limitation (docs/FORMAT.md, "WAL file"), counted and reported;
** TDE_SPLICE_STRICT=1 makes it fail.  An authentic frame of an older WAL
** generation ends the log wherever it stands, as in SQLite without tde:
** a log reused after a restart legitimately holds such frames after its
** end, and with synchronous=NORMAL a power loss can keep a later frame but
** not the new frame over an old one, so treating it as tampering would
** make such a database unopenable.  Recovery drops every transaction from
** that frame on: the rows read are exactly an earlier committed state
** (hEarlier) -- never other data -- the effect of cutting the WAL short
** there, which no format can detect.
*/
static void expectKnown(const Outcome *pFresh, uint64_t hEarlier, uint32_t iBad){
  if( bStrict ){
    expectFreshError(pFresh, iBad);
  }else{
    expectState(pFresh, hEarlier, 1);
    if( nFailHere==0 ) printf("#     documented: committed transactions dropped without an error "
                              "(TDE_SPLICE_STRICT=1 to fail)\n");
  }
}

static void putFrame(Img *pTo, uint32_t iTo, const unsigned char *aFrame){
  size_t off = frOff(iTo);
  if( off + FRAME_HDR + P > pTo->nWal ){
    pTo->aWal = realloc(pTo->aWal, off + FRAME_HDR + P);
    assert_non_null(pTo->aWal);
    memset(pTo->aWal + pTo->nWal, 0, off + FRAME_HDR + P - pTo->nWal);
    pTo->nWal = off + FRAME_HDR + P;
  }
  memcpy(pTo->aWal + off, aFrame, FRAME_HDR + P);
}

static void runFrames(uint32_t pgsz){
  char zDir[PATH_MAX], zBase[PATH_MAX], zOther[PATH_MAX], zDst[PATH_MAX];
  Img img, other, genA, otherGenA, w;
  uint64_t aH[NTX+1], aHo[NTX+1];
  Frame aF[MAX_FRAMES], aFo[MAX_FRAMES];
  uint32_t nF, nFo, aFirst[NTX+2];
  Outcome of, ol;
  int nFailBefore = (int)nFailed;
  P = pgsz;
  snprintf(zRun, sizeof(zRun), "wal frames %u", pgsz);
  snprintf(zDir, sizeof(zDir), "%s/frames-%u", zScratch, pgsz);
  mkdir(zDir, 0700);
  joinPath(zBase, zDir, "base.db");
  joinPath(zOther, zDir, "other.db");
  joinPath(zDst, zDir, "spliced.db");
  buildWal(zBase, &img, aH, &genA);
  buildWal(zOther, &other, aHo, &otherGenA);
  nF = parseWal(&img, aF);
  nFo = parseWal(&other, aFo);
  printf("# [%s] WAL: %u frames in %d transactions (", zRun, nF, aF[nF].iTx);
  for(int t=1; t<=NTX; t++){
    aFirst[t] = 0;
    for(uint32_t i=nF; i>=1; i--) if( aF[i].iTx==t ) aFirst[t] = i;
    printf("%s%u", t>1 ? ", " : "", aFirst[t]);
  }
  aFirst[NTX+1] = nF + 1;
  printf(" first), older generation kept: %zu frames\n", (genA.nWal - WAL_HDR)/(FRAME_HDR + P));
  assert_int_equal(aF[nF].iTx, NTX);
  assert_true(aF[nF].bCommit);
  for(int t=1; t<=NTX; t++) assert_true(aFirst[t+1] - aFirst[t] >= 3);   /* 3+ frames each */
  assert_true(nFo==nF);
  assert_true(memcmp(aF + 1, aFo + 1, sizeof(aF[0]) * nF)==0);         /* same layout */
  assert_true(aH[NTX]==aHo[NTX]);

  /* Controls: the unspliced WAL reads back as the final state. */
  probeWal(zDst, &img, &img, &of, &ol, aH, NTX + 1);
  assert_int_equal(of.rcRead, SQLITE_OK);
  assert_true(of.h==aH[NTX] && of.bIntegOk && of.rcVerify==TDE_OK);
  assert_int_equal(ol.rcRead, SQLITE_OK);
  assert_true(ol.h==aH[NTX] && ol.bIntegOk && ol.rcVerify==TDE_OK);

  /* 4a. Two frames of different committed transactions swapped. */
  {
    uint32_t i = pickFrame(aF, nF, 1, 0, 1), j = pickFrame(aF, nF, 3, 0, 1);
    caseBegin("swap WAL frames %u (transaction 1) and %u (transaction 3)", i, j);
    assert_true(i && j);
    imgCopy(&w, &img);
    swapBytes(w.aWal, frOff(i), frOff(j), FRAME_HDR + P);
    probeWal(zDst, &img, &w, &of, &ol, aH, NTX + 1);
    expectFreshError(&of, i);
    expectLiveError(&ol, i);
    imgFree(&w);
    caseEnd(KIND_DETECTED);
  }
  /* 4a'. A non-commit frame of the last transaction swapped with its
  ** commit frame: no authentic commit frame follows the first bad one, so
  ** recovery takes it for a torn write and drops the last transaction. */
  {
    uint32_t i = pickFrame(aF, nF, NTX, 0, 1);
    caseBegin("swap WAL frames %u and %u (the last transaction's commit frame)", i, nF);
    imgCopy(&w, &img);
    swapBytes(w.aWal, frOff(i), frOff(nF), FRAME_HDR + P);
    probeWal(zDst, &img, &w, &of, &ol, aH, NTX + 1);
    expectState(&of, aH[NTX-1], 1);
    expectLiveError(&ol, i);
    imgFree(&w);
    caseEnd(KIND_TORN);
  }
  /* 4b. A frame of another database's WAL at the same index. */
  {
    uint32_t i = pickFrame(aF, nF, 2, 0, 1);
    caseBegin("WAL frame %u (transaction 2) from another database's WAL under the same master key", i);
    imgCopy(&w, &img);
    putFrame(&w, i, other.aWal + frOff(i));
    probeWal(zDst, &img, &w, &of, &ol, aH, NTX + 1);
    expectFreshError(&of, i);
    expectLiveError(&ol, i);
    imgFree(&w);
    caseEnd(KIND_DETECTED);
  }
  {
    uint32_t i = pickFrame(aF, nF, 2, 0, 1);
    caseBegin("WAL frame %u: page bytes only from another database's WAL (frame header kept)", i);
    imgCopy(&w, &img);
    memcpy(w.aWal + frOff(i) + FRAME_HDR, other.aWal + frOff(i) + FRAME_HDR, P);
    probeWal(zDst, &img, &w, &of, &ol, aH, NTX + 1);
    expectFreshError(&of, i);
    expectLiveError(&ol, i);
    imgFree(&w);
    caseEnd(KIND_DETECTED);
  }
  {
    caseBegin("last WAL frame %u (commit frame) from another database's WAL", nF);
    imgCopy(&w, &img);
    putFrame(&w, nF, other.aWal + frOff(nF));
    probeWal(zDst, &img, &w, &of, &ol, aH, NTX + 1);
    expectState(&of, aH[NTX-1], 1);
    expectLiveError(&ol, nF);
    imgFree(&w);
    caseEnd(KIND_TORN);
  }
  /* 4c. Frames of the older generation written back at later indexes. */
  {
    uint32_t m = pickFrame(aF, nF, 3, 0, 1);
    caseBegin("older-generation WAL frame 1 written back at index %u (transaction 3)", m);
    imgCopy(&w, &img);
    putFrame(&w, m, genA.aWal + frOff(1));
    probeWal(zDst, &img, &w, &of, &ol, aH, NTX + 1);
    expectFreshError(&of, m);
    expectLiveError(&ol, m);
    imgFree(&w);
    caseEnd(KIND_DETECTED);
  }
  {
    uint32_t k = (uint32_t)((genA.nWal - WAL_HDR)/(FRAME_HDR + P));
    uint32_t m = aFirst[NTX];
    caseBegin("older-generation WAL frame %u (its commit frame) written back at index %u "
              "(first frame of the last transaction, whose commit frame follows intact)", k, m);
    imgCopy(&w, &img);
    putFrame(&w, m, genA.aWal + frOff(k));
    probeWal(zDst, &img, &w, &of, &ol, aH, NTX + 1);
    expectFreshError(&of, m);
    expectLiveError(&ol, m);
    imgFree(&w);
    caseEnd(KIND_DETECTED);
  }
  {
    uint32_t k = (uint32_t)((genA.nWal - WAL_HDR)/(FRAME_HDR + P));
    caseBegin("older-generation WAL frame %u (its commit frame) written back at index %u "
              "(the last transaction's commit frame)", k, nF);
    imgCopy(&w, &img);
    putFrame(&w, nF, genA.aWal + frOff(k));
    probeWal(zDst, &img, &w, &of, &ol, aH, NTX + 1);
    expectState(&of, aH[NTX-1], 1);
    expectLiveError(&ol, nF);
    imgFree(&w);
    caseEnd(KIND_TORN);
  }
  /* Frames that fail authentication back to back, with authentic commit
  ** frames after them: tampering, an error (docs/FORMAT.md, "WAL file"). */
  {
    uint32_t i = aFirst[NTX];
    caseBegin("swap WAL frames %u and %u (last transaction, its commit frame %u intact)", i, i+1, nF);
    imgCopy(&w, &img);
    swapBytes(w.aWal, frOff(i), frOff(i+1), FRAME_HDR + P);
    probeWal(zDst, &img, &w, &of, &ol, aH, NTX + 1);
    expectFreshError(&of, i);
    expectLiveError(&ol, i);
    imgFree(&w);
    caseEnd(KIND_DETECTED);
  }
  {
    uint32_t i = aFirst[2] - 1;
    caseBegin("swap WAL frames %u (commit frame of transaction 1) and %u (transactions 2..%d follow)",
              i, i+1, NTX);
    imgCopy(&w, &img);
    swapBytes(w.aWal, frOff(i), frOff(i+1), FRAME_HDR + P);
    probeWal(zDst, &img, &w, &of, &ol, aH, NTX + 1);
    expectFreshError(&of, i);
    expectLiveError(&ol, i);
    imgFree(&w);
    caseEnd(KIND_DETECTED);
  }
  {
    /* Not a splice: the same rule met by plain damage, one bit in each of
    ** two neighbouring frames (one damaged disk block can span both). */
    uint32_t i = aFirst[2] - 1;
    caseBegin("one bit flipped in each of WAL frames %u (commit frame of transaction 1) and %u", i, i+1);
    imgCopy(&w, &img);
    w.aWal[frOff(i) + FRAME_HDR + 100] ^= 0x01;
    w.aWal[frOff(i+1) + FRAME_HDR + 100] ^= 0x01;
    probeWal(zDst, &img, &w, &of, &ol, aH, NTX + 1);
    expectFreshError(&of, i);
    expectLiveError(&ol, i);
    imgFree(&w);
    caseEnd(KIND_DETECTED);
  }
  /* Documented (see expectKnown): an authentic frame of the older
  ** generation at its own index ends the log there, as in SQLite. */
  {
    uint32_t m = pickFrame(aF, nF, 2, 0, 1);
    assert_true(frOff(m) + FRAME_HDR + P <= genA.nWal);
    caseBegin("older-generation WAL frame %u written back at its own index (transaction 2)", m);
    imgCopy(&w, &img);
    putFrame(&w, m, genA.aWal + frOff(m));
    probeWal(zDst, &img, &w, &of, &ol, aH, NTX + 1);
    expectKnown(&of, aH[1], m);
    expectLiveError(&ol, m);
    imgFree(&w);
    caseEnd(bStrict ? KIND_DETECTED : KIND_KNOWN);
  }
  {
    caseBegin("older-generation WAL frame 1 appended after the last frame (index %u)", nF + 1);
    imgCopy(&w, &img);
    putFrame(&w, nF + 1, genA.aWal + frOff(1));
    probeWal(zDst, &img, &w, &of, &ol, aH, NTX + 1);
    /* Not part of any committed transaction: everything committed stays. */
    expectState(&of, aH[NTX], 1);
    expectState(&ol, aH[NTX], 1);
    imgFree(&w);
    caseEnd(KIND_TORN);
  }

  /* 5. A frame sealed under data-key version 1 written back after a
  ** finished rekey (which checkpointed the WAL away and removed version
  ** 1), into the WAL of a transaction sealed under version 2. */
  {
    char zR[PATH_MAX];
    sqlite3 *db = 0;
    Img r;
    uint64_t aHr[2];
    Frame aFr[MAX_FRAMES];
    uint32_t nFr;
    int rc;
    joinPath(zR, zDir, "rekey.db");
    caseBegin("WAL frame 1 sealed under data-key version 1 written back after a finished rekey");
    imgWrite(&img, zR);
    assert_int_equal(openTdeExt(zR, &db), SQLITE_OK);
    rc = tde_db_rekey(db, "main", 16, 0, 0);
    CHECK(rc==TDE_OK, "tde_db_rekey: %s", tde_last_error());
    CHECK(queryInt(db, "SELECT data_key_version FROM tde_status WHERE schema='main'")==2,
          "data-key version after the rekey is not 2");
    CHECK(queryInt(db, "SELECT rekey_in_progress FROM tde_status WHERE schema='main'")==0,
          "rekey still in progress");
    execTagged(zRun, db, "PRAGMA wal_autocheckpoint=0");
    assert_int_equal(contentSum(db, &aHr[0], 0), SQLITE_OK);
    CHECK(aHr[0]==aH[NTX], "the rekey changed the content");
    execTagged(zRun, db, "UPDATE t SET v = printf('rk %04d %.241c', id, 'r') WHERE id BETWEEN 50 AND 90");
    assert_int_equal(contentSum(db, &aHr[1], 0), SQLITE_OK);
    sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int*)0);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    imgRead(&r, zR);
    nFr = parseWal(&r, aFr);
    assert_true(nFr >= 3 && !aFr[1].bCommit);
    /* Every frame now carries version 2 in its page trailer (P-8). */
    for(uint32_t i=1; i<=nFr; i++) CHECK(get32(r.aWal + frOff(i) + FRAME_HDR + P - 8)==2,
                                          "frame %u is not under version 2", i);
    CHECK(get32(img.aWal + frOff(1) + FRAME_HDR + P - 8)==1, "the old frame is not under version 1");
    imgCopy(&w, &r);
    putFrame(&w, 1, img.aWal + frOff(1));
    probeWal(zDst, &r, &w, &of, &ol, aHr, 2);
    expectFreshError(&of, 1);
    expectLiveError(&ol, 1);
    imgFree(&w);
    imgFree(&r);
    caseEnd(KIND_DETECTED);
  }

  imgFree(&img);
  imgFree(&other);
  imgFree(&genA);
  imgFree(&otherGenA);
  if( (int)nFailed > nFailBefore ) fail_msg("[%s] %ld case(s) failed (see FAIL lines)", zRun, nFailed - nFailBefore);
}

static void test_frames_4096(void **s){ (void)s; runFrames(4096); }
static void test_frames_1024(void **s){ (void)s; runFrames(1024); }

/* ---- setup ------------------------------------------------------------------ */

static int groupSetup(void **state){
  (void)state;
  return tdetestGroupSetup("tdesplice", 0);
}

static int groupTeardown(void **state){
  (void)state;
  printf("# splice summary: %ld cases: %ld detected (error), %ld torn WAL tail (exact state before "
         "the transaction of the bad frame), %ld documented-undetected (exact content of the spliced page "
         "version), %ld older-generation frames ending the log (documented, see expectKnown), "
         "%ld failed\n", nCase, nDetected, nTorn, nUndetected, nKnown, nFailed);
  tdetestScratchRemove();
  return 0;
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_pages_delete_4096),
    cmocka_unit_test(test_pages_wal_4096),
    cmocka_unit_test(test_pages_delete_1024),
    cmocka_unit_test(test_pages_wal_1024),
    cmocka_unit_test(test_frames_4096),
    cmocka_unit_test(test_frames_1024),
  };
  bStrict = getenv("TDE_SPLICE_STRICT")!=0 && strcmp(getenv("TDE_SPLICE_STRICT"), "0")!=0;
  return tdetestExit(cmocka_run_group_tests_name("splice", tests, groupSetup, groupTeardown));
}
