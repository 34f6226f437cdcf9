/*
** Tamper detection, exhaustively: flip one bit (xor 0x01) at every byte of
** every stored page and of every WAL frame of small encrypted databases,
** open the damaged copy through tde, read everything (with a checksum),
** run PRAGMA integrity_check and tde_verify().  The only acceptable
** outcomes are an error (any of them), or -- for a byte in the WAL's final
** frame only -- the exact state before the last transaction (SQLite takes
** a bad final frame for a torn write when it rebuilds the wal-index).
** Data returned without error that differs from the undamaged state, or
** equals it although a bit was flipped, is a failure.  Bits flipped in the
** active header slot must make the open fail.
**
** Page size: 1024, the smallest tde allows (SQLite raises 512 to 1024
** when more than 32 bytes per page are reserved).  Counts of every outcome
** are printed; the first offsets of each failing kind are listed.
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
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>
#include <openssl/sha.h>
#include "sqlite-tde.h"
#include "tdetest.h"

#define PGSZ 1024
#define WAL_HDR 32
#define FRAME_HDR 24
#define FRAME_SZ (FRAME_HDR + PGSZ)

/* ---- helpers -------------------------------------------------------------- */

static int groupSetup(void **state){
  (void)state;
  return tdetestGroupSetup("tdetamper", 0);
}

static int groupTeardown(void **state){
  (void)state;
  tdetestScratchRemove();
  return 0;
}

/* FNV-1a over all rows of t and of sqlite_schema.  SQLite result code. */
static int contentSum(sqlite3 *db, uint64_t *pH){
  static const char *azSql[] = {
    "SELECT id, k, v FROM t ORDER BY id",
    "SELECT type, name, tbl_name, rootpage, sql FROM sqlite_schema ORDER BY name",
  };
  uint64_t h = 0xcbf29ce484222325ULL;
  for(size_t q=0; q<sizeof(azSql)/sizeof(azSql[0]); q++){
    sqlite3_stmt *p = 0;
    int rc = sqlite3_prepare_v2(db, azSql[q], -1, &p, 0);
    if( rc ) return rc;
    while( (rc = sqlite3_step(p))==SQLITE_ROW ){
      for(int i=0; i<sqlite3_column_count(p); i++){
        const unsigned char *z = sqlite3_column_text(p, i);
        int n = sqlite3_column_bytes(p, i);
        h ^= (uint64_t)sqlite3_column_type(p, i); h *= 0x100000001b3ULL;
        h ^= (uint64_t)n; h *= 0x100000001b3ULL;
        for(int j=0; j<n; j++){ h ^= z[j]; h *= 0x100000001b3ULL; }
      }
      h ^= 0xff; h *= 0x100000001b3ULL;
    }
    rc = sqlite3_finalize(p) ? sqlite3_errcode(db) : (rc==SQLITE_DONE ? SQLITE_OK : rc);
    if( rc ) return rc;
  }
  *pH = h;
  return SQLITE_OK;
}

/* Outcomes of one probe. */
#define P_ERR_OPEN    0   /* sqlite3_open_v2 failed */
#define P_ERR_READ    1   /* reading the rows failed */
#define P_ERR_INTEG   2   /* integrity_check not ok (or failed) */
#define P_ERR_VERIFY  3   /* only tde_verify noticed */
#define P_OK          4   /* no error at all: *pH holds the content sum */
#define P_N           5
static const char *azOutcome[P_N] = { "open failed", "read failed", "integrity_check failed",
                                      "only tde_verify failed", "no error" };

static int probeRead;            /* the last probe read the rows: *pH valid */
static int probePlain;           /* control runs: open without tde */
static int probe(const char *zPath, uint64_t *pH){
  sqlite3 *db = 0;
  int rc, out;
  int64_t nChecked, iBad;
  probeRead = 0;
  rc = probePlain ? sqlite3_open_v2(zPath, &db, SQLITE_OPEN_READWRITE, 0) : openTdeCfg(zPath, zCfg, &db);
  if( rc ){ sqlite3_close(db); return P_ERR_OPEN; }
  /* Never checkpoint the damaged copy on close. */
  sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int*)0);
  rc = contentSum(db, pH);
  if( rc ){ out = P_ERR_READ; goto done; }
  probeRead = 1;
  if( !integrityOk(db) ){ out = P_ERR_INTEG; goto done; }
  rc = probePlain ? TDE_OK : tde_verify(db, "main", &nChecked, &iBad, 0, 0);
  out = rc==TDE_OK ? P_OK : P_ERR_VERIFY;
done:
  sqlite3_close(db);
  return out;
}

/* Tally of one region. */
typedef struct Tally {
  const char *zName;
  long n;                      /* positions checked */
  long aOut[P_N];              /* by outcome */
  long nSame;                  /* P_OK with the undamaged content: undetected */
  long nPrev;                  /* P_OK with the pre-last-transaction content */
  long nOther;                 /* P_OK with any other content */
  long aFirstBad[8];           /* first failing offsets */
  int nFirstBad;
  long nBad;                   /* failing positions */
  long nReadWrong;             /* rows read without error but wrong, caught later */
} Tally;

static void tallyBad(Tally *t, long iOff){
  t->nBad++;
  if( t->nFirstBad < 8 ) t->aFirstBad[t->nFirstBad++] = iOff;
}

static void tallyPrint(const Tally *t){
  printf("# %-34s %6ld positions:", t->zName, t->n);
  for(int i=0; i<P_N-1; i++) if( t->aOut[i] ) printf(" %s %ld;", azOutcome[i], t->aOut[i]);
  printf(" no error: %ld (undamaged content %ld, pre-last-transaction %ld, other content %ld)\n",
         t->aOut[P_OK], t->nSame, t->nPrev, t->nOther);
  if( t->nReadWrong ) printf("#   rows read back WRONG before a later check failed: %ld\n", t->nReadWrong);
  if( t->nFirstBad ){
    printf("#   %ld positions not handled safely; first offsets:", t->nBad);
    for(int i=0; i<t->nFirstBad; i++) printf(" %ld", t->aFirstBad[i]);
    printf("\n");
  }
}

/* Classify a P_OK probe. */
static void tallyOk(Tally *t, uint64_t h, uint64_t hNow, uint64_t hPrev){
  if( h==hNow ) t->nSame++;
  else if( h==hPrev ) t->nPrev++;
  else t->nOther++;
}


/* ---- crash simulator below tde ------------------------------------------- */

/*
** A pass-through VFS registered as the default before tde_register, so tde
** sits on it.  While armed, after every write, truncate or delete that
** touches the database under test (main file, -journal, -wal) it copies
** the files as they are: a crash image for "power lost right after this
** operation", everything earlier on disk in order.  A write that rewrites
** bytes already in the file and crosses a 512-byte boundary is also torn:
** the image is taken with only its part up to that boundary written (a
** sector write interrupted by power loss), then the write completes.
** Copies use plain syscalls, never SQLite.
*/
typedef struct CrashFile CrashFile;
struct CrashFile {
  sqlite3_file base;
  sqlite3_file *pReal;
  int bTracked;              /* main db, journal or WAL of the db under test */
};
static sqlite3_vfs *pUnixVfs;
static int crashArmed;
static char zCrashDb[PATH_MAX];       /* database under test */
static char zCrashDir[PATH_MAX];      /* where images go */
static int nCrashImage;
#define MAX_IMAGES 2000
static char aImageTorn[MAX_IMAGES];   /* 1: torn in-place write */
static char azImageWhat[MAX_IMAGES][64];

static void copyRaw(const char *zFrom, const char *zTo){
  int fi = open(zFrom, O_RDONLY), fo;
  char buf[65536];
  ssize_t n;
  unlink(zTo);
  if( fi<0 ) return;
  fo = open(zTo, O_WRONLY|O_CREAT|O_TRUNC, 0600);
  if( fo>=0 ){
    while( (n = read(fi, buf, sizeof(buf)))>0 ){
      if( write(fo, buf, (size_t)n)!=n ) break;
    }
    close(fo);
  }
  close(fi);
}

static void crashSnapshot(int bTorn, const char *zWhat){
  /* The database's files: in WAL mode (format 2) its page map too. */
  static const char *azSuffix[] = { "", "-journal", "-wal", "-tdemap" };
  if( nCrashImage>=MAX_IMAGES ) return;
  for(int i=0; i<4; i++){
    char zFrom[PATH_MAX+16], zTo[PATH_MAX+64];
    snprintf(zFrom, sizeof(zFrom), "%s%s", zCrashDb, azSuffix[i]);
    if( snprintf(zTo, sizeof(zTo), "%s/img%d.db%s", zCrashDir, nCrashImage, azSuffix[i]) >= (int)sizeof(zTo) ) return;
    copyRaw(zFrom, zTo);
  }
  if( getenv("TDE_TEST_LOG") ) fprintf(stderr, "image %d: %s\n", nCrashImage, zWhat);
  aImageTorn[nCrashImage] = (char)bTorn;
  snprintf(azImageWhat[nCrashImage], sizeof(azImageWhat[0]), "%s", zWhat);
  nCrashImage++;
}

static int crClose(sqlite3_file *f){ CrashFile *p = (CrashFile*)f; return p->pReal->pMethods->xClose(p->pReal); }
static int crRead(sqlite3_file *f, void *z, int n, sqlite3_int64 o){ CrashFile *p = (CrashFile*)f; return p->pReal->pMethods->xRead(p->pReal, z, n, o); }
static int crWrite(sqlite3_file *f, const void *z, int n, sqlite3_int64 o){
  CrashFile *p = (CrashFile*)f;
  int rc;
  char zWhat[64];
  if( crashArmed && p->bTracked ){
    sqlite3_int64 sz = 0;
    p->pReal->pMethods->xFileSize(p->pReal, &sz);
    if( o < sz ){
      sqlite3_int64 cut = (o/512 + 1)*512;
      if( cut < o + n ){
        rc = p->pReal->pMethods->xWrite(p->pReal, z, (int)(cut - o), o);
        if( rc ) return rc;
        snprintf(zWhat, sizeof(zWhat), "torn rewrite of %d bytes at %lld", n, (long long)o);
        crashSnapshot(1, zWhat);
      }
    }
  }
  rc = p->pReal->pMethods->xWrite(p->pReal, z, n, o);
  if( crashArmed && p->bTracked && rc==SQLITE_OK ){
    snprintf(zWhat, sizeof(zWhat), "after a write of %d bytes at %lld", n, (long long)o);
    crashSnapshot(0, zWhat);
  }
  return rc;
}
static int crTruncate(sqlite3_file *f, sqlite3_int64 sz){
  CrashFile *p = (CrashFile*)f;
  int rc = p->pReal->pMethods->xTruncate(p->pReal, sz);
  if( crashArmed && p->bTracked && rc==SQLITE_OK ) crashSnapshot(0, "after a truncate");
  return rc;
}
static int crSync(sqlite3_file *f, int fl){ CrashFile *p = (CrashFile*)f; return p->pReal->pMethods->xSync(p->pReal, fl); }
static int crFileSize(sqlite3_file *f, sqlite3_int64 *pS){ CrashFile *p = (CrashFile*)f; return p->pReal->pMethods->xFileSize(p->pReal, pS); }
static int crLock(sqlite3_file *f, int e){ CrashFile *p = (CrashFile*)f; return p->pReal->pMethods->xLock(p->pReal, e); }
static int crUnlock(sqlite3_file *f, int e){ CrashFile *p = (CrashFile*)f; return p->pReal->pMethods->xUnlock(p->pReal, e); }
static int crCheckReservedLock(sqlite3_file *f, int *pR){ CrashFile *p = (CrashFile*)f; return p->pReal->pMethods->xCheckReservedLock(p->pReal, pR); }
static int crFileControl(sqlite3_file *f, int op, void *pA){ CrashFile *p = (CrashFile*)f; return p->pReal->pMethods->xFileControl(p->pReal, op, pA); }
static int crSectorSize(sqlite3_file *f){ CrashFile *p = (CrashFile*)f; return p->pReal->pMethods->xSectorSize(p->pReal); }
static int crDeviceCharacteristics(sqlite3_file *f){ CrashFile *p = (CrashFile*)f; return p->pReal->pMethods->xDeviceCharacteristics(p->pReal); }
static int crShmMap(sqlite3_file *f, int i, int sz, int b, void volatile **pp){ CrashFile *p = (CrashFile*)f; return p->pReal->pMethods->xShmMap(p->pReal, i, sz, b, pp); }
static int crShmLock(sqlite3_file *f, int o, int n, int fl){ CrashFile *p = (CrashFile*)f; return p->pReal->pMethods->xShmLock(p->pReal, o, n, fl); }
static void crShmBarrier(sqlite3_file *f){ CrashFile *p = (CrashFile*)f; p->pReal->pMethods->xShmBarrier(p->pReal); }
static int crShmUnmap(sqlite3_file *f, int d){ CrashFile *p = (CrashFile*)f; return p->pReal->pMethods->xShmUnmap(p->pReal, d); }
static int crFetch(sqlite3_file *f, sqlite3_int64 o, int n, void **pp){ CrashFile *p = (CrashFile*)f; return p->pReal->pMethods->xFetch(p->pReal, o, n, pp); }
static int crUnfetch(sqlite3_file *f, sqlite3_int64 o, void *pv){ CrashFile *p = (CrashFile*)f; return p->pReal->pMethods->xUnfetch(p->pReal, o, pv); }

static const sqlite3_io_methods crashIoMethods = {
  3,                            /* iVersion */
  crClose,                      /* xClose */
  crRead,                       /* xRead */
  crWrite,                      /* xWrite */
  crTruncate,                   /* xTruncate */
  crSync,                       /* xSync */
  crFileSize,                   /* xFileSize */
  crLock,                       /* xLock */
  crUnlock,                     /* xUnlock */
  crCheckReservedLock,          /* xCheckReservedLock */
  crFileControl,                /* xFileControl */
  crSectorSize,                 /* xSectorSize */
  crDeviceCharacteristics,      /* xDeviceCharacteristics */
  crShmMap,                     /* xShmMap */
  crShmLock,                    /* xShmLock */
  crShmBarrier,                 /* xShmBarrier */
  crShmUnmap,                   /* xShmUnmap */
  crFetch,                      /* xFetch */
  crUnfetch                     /* xUnfetch */
};

static int crOpen(sqlite3_vfs *v, const char *zName, sqlite3_file *f, int flags, int *pOut){
  CrashFile *p = (CrashFile*)f;
  int rc;
  (void)v;
  memset(p, 0, sizeof(*p));
  p->pReal = (sqlite3_file*)&p[1];
  rc = pUnixVfs->xOpen(pUnixVfs, zName, p->pReal, flags, pOut);
  if( rc ){ f->pMethods = 0; return rc; }
  p->bTracked = zName && zCrashDb[0] && strncmp(zName, zCrashDb, strlen(zCrashDb))==0
             && (flags & (SQLITE_OPEN_MAIN_DB|SQLITE_OPEN_MAIN_JOURNAL|SQLITE_OPEN_WAL))!=0;
  f->pMethods = &crashIoMethods;
  return SQLITE_OK;
}
static int crashExitAfterSuper;       /* _exit right after a super-journal is deleted */
static int crDelete(sqlite3_vfs *v, const char *z, int s){
  int rc;
  (void)v;
  rc = pUnixVfs->xDelete(pUnixVfs, z, s);
  if( crashExitAfterSuper && strstr(z, "-mj") ) _exit(0);
  if( crashArmed && zCrashDb[0] && strncmp(z, zCrashDb, strlen(zCrashDb))==0 ) crashSnapshot(0, "after a delete");
  return rc;
}
static int crAccess(sqlite3_vfs *v, const char *z, int f, int *r){ (void)v; return pUnixVfs->xAccess(pUnixVfs, z, f, r); }
static int crFullPathname(sqlite3_vfs *v, const char *z, int n, char *o){ (void)v; return pUnixVfs->xFullPathname(pUnixVfs, z, n, o); }
static void *crDlOpen(sqlite3_vfs *v, const char *z){ (void)v; return pUnixVfs->xDlOpen(pUnixVfs, z); }
static void crDlError(sqlite3_vfs *v, int n, char *z){ (void)v; pUnixVfs->xDlError(pUnixVfs, n, z); }
static void (*crDlSym(sqlite3_vfs *v, void *p, const char *z))(void){ (void)v; return pUnixVfs->xDlSym(pUnixVfs, p, z); }
static void crDlClose(sqlite3_vfs *v, void *p){ (void)v; pUnixVfs->xDlClose(pUnixVfs, p); }
static int crRandomness(sqlite3_vfs *v, int n, char *z){ (void)v; return pUnixVfs->xRandomness(pUnixVfs, n, z); }
static int crSleep(sqlite3_vfs *v, int n){ (void)v; return pUnixVfs->xSleep(pUnixVfs, n); }
static int crCurrentTime(sqlite3_vfs *v, double *p){ (void)v; return pUnixVfs->xCurrentTime(pUnixVfs, p); }
static int crGetLastError(sqlite3_vfs *v, int n, char *z){ (void)v; return pUnixVfs->xGetLastError(pUnixVfs, n, z); }
static int crCurrentTimeInt64(sqlite3_vfs *v, sqlite3_int64 *p){ (void)v; return pUnixVfs->xCurrentTimeInt64(pUnixVfs, p); }

static sqlite3_vfs crashVfs = {
  2, 0, 0, 0, "crashsim", 0,
  crOpen, crDelete, crAccess, crFullPathname, crDlOpen, crDlError, crDlSym, crDlClose,
  crRandomness, crSleep, crCurrentTime, crGetLastError, crCurrentTimeInt64,
  0, 0, 0
};

/* ---- rollback mode -------------------------------------------------------- */

static void fillTable(sqlite3 *db, int iFirst, int n, const char *zTag){
  char zSql[256];
  for(int i=iFirst; i<iFirst+n; i++){
    snprintf(zSql, sizeof(zSql),
             "INSERT INTO t(id, k, v) VALUES(%d, %d, printf('%s-%%04d-%%.40c', %d, char(97 + %d %% 26)))",
             i, i*7919 % 1000, zTag, i, i);
    exec(db, zSql);
  }
}

static void test_tamper_rollback(void **state){
  char zSrc[PATH_MAX], zDst[PATH_MAX];
  sqlite3 *db = 0;
  unsigned char *a, *b;
  size_t n;
  uint64_t hGood = 0, h;
  Tally pages = { "rollback db: page bytes", 0, {0}, 0, 0, 0, {0}, 0, 0, 0 };
  Tally hdr = { "header: slot 0 damaged", 0, {0}, 0, 0, 0, {0}, 0, 0, 0 };
  Tally hdr1 = { "header: slot 1 damaged", 0, {0}, 0, 0, 0, {0}, 0, 0, 0 };
  Tally hdrBoth = { "header: both slots damaged", 0, {0}, 0, 0, 0, {0}, 0, 0, 0 };
  Tally hdrForged = { "header: slot 0 forged (checksum ok)", 0, {0}, 0, 0, 0, {0}, 0, 0, 0 };
  (void)state;
  pathOf(zSrc, "rb-src.db");
  pathOf(zDst, "rb-damaged.db");
  removeDb(zSrc);
  assert_int_equal(openTdeCfg(zSrc, zCfg, &db), SQLITE_OK);
  exec(db, "PRAGMA page_size=1024");
  exec(db, "PRAGMA journal_mode=DELETE");
  exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, k INT, v TEXT)");
  exec(db, "CREATE INDEX t_k ON t(k)");
  exec(db, "BEGIN");
  fillTable(db, 1, 40, "row");
  exec(db, "COMMIT");
  assert_int_equal(contentSum(db, &hGood), SQLITE_OK);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);

  a = readAll(zSrc, &n);
  assert_non_null(a);
  assert_true(tdetestPagesIn(PGSZ, (int64_t)n) >= 4);
  printf("# rollback-mode database: %u pages of %d bytes\n", tdetestPagesIn(PGSZ, (int64_t)n), PGSZ);
  b = malloc(n);
  assert_non_null(b);

  /* The undamaged copy reads back (else every flip would "pass"). */
  removeDb(zDst);
  writeAll(zDst, a, n);
  assert_int_equal(probe(zDst, &h), P_OK);
  assert_true(h==hGood);

  /* Every byte of every page (version 3: not the map regions, whose
  ** slots are not in force in rollback mode). */
  for(size_t i=TDE_HEADER_BYTES; i<n; i++){
    int out;
    if( !tdetestInPage(PGSZ, (int64_t)i) ) continue;
    memcpy(b, a, n);
    b[i] ^= 0x01;
    removeDb(zDst);
    writeAll(zDst, b, n);
    out = probe(zDst, &h);
    pages.n++;
    pages.aOut[out]++;
    if( out==P_OK ){ tallyOk(&pages, h, hGood, 0); tallyBad(&pages, (long)i); }
    else if( probeRead && h!=hGood ){ pages.nReadWrong++; tallyBad(&pages, (long)i); }
  }
  /* Header slots.  New databases carry the same header in both slots
  ** (docs/FORMAT.md): a slot whose checksum fails is ignored and the other
  ** one used, so damage to ONE slot may open normally -- but then the data
  ** must be the undamaged data and tde_verify must report the damage.
  ** The same byte damaged in both slots must fail the open.  A slot
  ** forged with a recomputed checksum (an attacker's edit) must never be
  ** used: open fails, or the other slot is used and verify reports it. */
  for(int iCase=0; iCase<4; iCase++){
    Tally *t = iCase==0 ? &hdr : iCase==1 ? &hdr1 : iCase==2 ? &hdrBoth : &hdrForged;
    size_t iEnd = iCase==3 ? 4032 : 4096;          /* forged: fields under the MAC */
    for(size_t i=0; i<iEnd; i++){
      int out;
      memcpy(b, a, n);
      if( iCase!=1 ) b[i] ^= 0x01;
      if( iCase==1 || iCase==2 ) b[4096+i] ^= 0x01;
      if( iCase==3 ) SHA256(b, 4064, b+4064);
      removeDb(zDst);
      writeAll(zDst, b, n);
      out = probe(zDst, &h);
      t->n++;
      t->aOut[out]++;
      if( probeRead && h!=hGood ){ t->nOther++; tallyBad(t, (long)i); continue; }
      if( out==P_OK ){ tallyOk(t, h, hGood, 0); tallyBad(t, (long)i); }
      else if( iCase==2 && out!=P_ERR_OPEN ) tallyBad(t, (long)i);
    }
  }
  tallyPrint(&pages);
  tallyPrint(&hdr);
  tallyPrint(&hdr1);
  tallyPrint(&hdrBoth);
  tallyPrint(&hdrForged);
  free(a);
  free(b);
  removeDb(zDst);
  if( pages.nBad ) fail_msg("%ld flipped page bytes went undetected or returned wrong rows", pages.nBad);
  {
    long nBad = hdr.nBad + hdr1.nBad + hdrBoth.nBad + hdrForged.nBad;
    if( nBad ) fail_msg("damaged header slots were not handled safely (see counts above)");
  }
}

/* ---- WAL mode ------------------------------------------------------------- */

static void test_tamper_wal(void **state){
  char zSrc[PATH_MAX], zDst[PATH_MAX], zSrcWal[PATH_MAX+8], zDstWal[PATH_MAX+8];
  sqlite3 *db = 0;
  unsigned char *aDb, *aWal, *b;
  size_t nDb, nWal;
  uint64_t hState[4], h;
  uint32_t nFrame, iLastTxFirst = 0;
  Tally frames = { "WAL: frames before the last", 0, {0}, 0, 0, 0, {0}, 0, 0, 0 };
  Tally lastTx = { "WAL: last transaction, not final", 0, {0}, 0, 0, 0, {0}, 0, 0, 0 };
  Tally last = { "WAL: final frame", 0, {0}, 0, 0, 0, {0}, 0, 0, 0 };
  Tally walHdr = { "WAL: header", 0, {0}, 0, 0, 0, {0}, 0, 0, 0 };
  Tally dbPages = { "WAL db: database file page bytes", 0, {0}, 0, 0, 0, {0}, 0, 0, 0 };
  long nSaltBad = 0;
  (void)state;
  pathOf(zSrc, "wal-src.db");
  pathOf(zDst, "wal-damaged.db");
  snprintf(zSrcWal, sizeof(zSrcWal), "%s-wal", zSrc);
  snprintf(zDstWal, sizeof(zDstWal), "%s-wal", zDst);
  removeDb(zSrc);

  /* Base state checkpointed into the database file, then three
  ** transactions left in the WAL (several frames each). */
  assert_int_equal(openTdeCfg(zSrc, zCfg, &db), SQLITE_OK);
  exec(db, "PRAGMA page_size=1024");
  exec(db, "PRAGMA journal_mode=WAL");
  exec(db, "PRAGMA wal_autocheckpoint=0");
  exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, k INT, v TEXT)");
  exec(db, "CREATE INDEX t_k ON t(k)");
  exec(db, "BEGIN");
  fillTable(db, 1, 30, "base");
  exec(db, "COMMIT");
  exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  assert_int_equal(contentSum(db, &hState[0]), SQLITE_OK);
  exec(db, "BEGIN");
  fillTable(db, 100, 12, "tx1");
  exec(db, "COMMIT");
  assert_int_equal(contentSum(db, &hState[1]), SQLITE_OK);
  exec(db, "UPDATE t SET v = v || '-tx2', k = k + 1 WHERE id % 3 = 0");
  assert_int_equal(contentSum(db, &hState[2]), SQLITE_OK);
  {
    /* The last transaction: remember where its frames start. */
    sqlite3_int64 szBefore;
    struct stat st;
    assert_int_equal(stat(zSrcWal, &st), 0);
    szBefore = st.st_size;
    iLastTxFirst = (uint32_t)((szBefore - WAL_HDR) / FRAME_SZ) + 1;
  }
  exec(db, "BEGIN; DELETE FROM t WHERE id IN (2, 101); UPDATE t SET v = 'tx3 ' || v WHERE id % 7 = 0; COMMIT");
  assert_int_equal(contentSum(db, &hState[3]), SQLITE_OK);

  aDb = readAll(zSrc, &nDb);
  aWal = readAll(zSrcWal, &nWal);
  assert_non_null(aDb);
  assert_non_null(aWal);
  sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int*)0);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  assert_int_equal((nWal - WAL_HDR) % FRAME_SZ, 0);
  nFrame = (uint32_t)((nWal - WAL_HDR) / FRAME_SZ);
  printf("# WAL database: %zu database pages, %u frames (last transaction: frames %u..%u)\n",
         (nDb - TDE_HEADER_BYTES)/PGSZ, nFrame, iLastTxFirst, nFrame);
  assert_true(nFrame >= 6);
  assert_true(nFrame - iLastTxFirst >= 1);       /* the last transaction has 2+ frames */

  /* The undamaged copy gives the final state. */
  removeDb(zDst);
  writeAll(zDst, aDb, nDb);
  writeAll(zDstWal, aWal, nWal);
  assert_int_equal(probe(zDst, &h), P_OK);
  assert_true(h==hState[3]);

  b = malloc(nWal > nDb ? nWal : nDb);
  assert_non_null(b);
  for(size_t i=0; i<nWal; i++){
    int out;
    uint32_t iFrame = i<WAL_HDR ? 0 : (uint32_t)((i - WAL_HDR) / FRAME_SZ) + 1;
    size_t iIn = i<WAL_HDR ? i : (i - WAL_HDR) % FRAME_SZ;
    Tally *t = iFrame==0 ? &walHdr : iFrame==nFrame ? &last : iFrame>=iLastTxFirst ? &lastTx : &frames;
    memcpy(b, aWal, nWal);
    b[i] ^= 0x01;
    removeDb(zDst);
    writeAll(zDst, aDb, nDb);
    writeAll(zDstWal, b, nWal);
    out = probe(zDst, &h);
    t->n++;
    t->aOut[out]++;
    if( out==P_OK ){
      tallyOk(t, h, hState[3], hState[2]);
      if( !(t==&last && h==hState[2]) ){
        tallyBad(t, (long)i);
        if( iFrame>0 && iIn>=8 && iIn<16 ) nSaltBad++;
      }
    }else if( probeRead && h!=hState[3] && !(t==&last && h==hState[2]) ){
      /* Rows came back wrong; a later check failed, but a reader that
      ** stops at SELECT would have used them. */
      t->nReadWrong++;
      tallyBad(t, (long)i);
    }
  }
  for(size_t i=TDE_HEADER_BYTES; i<nDb; i++){
    int out;
    if( !tdetestInPage(PGSZ, (int64_t)i) ) continue;   /* version 3: pages only */
    memcpy(b, aDb, nDb);
    b[i] ^= 0x01;
    removeDb(zDst);
    writeAll(zDst, b, nDb);
    writeAll(zDstWal, aWal, nWal);
    out = probe(zDst, &h);
    dbPages.n++;
    dbPages.aOut[out]++;
    if( out==P_OK ){ tallyOk(&dbPages, h, hState[3], hState[2]); tallyBad(&dbPages, (long)i); }
    else if( probeRead && h!=hState[3] ){ dbPages.nReadWrong++; tallyBad(&dbPages, (long)i); }
  }
  tallyPrint(&walHdr);
  tallyPrint(&frames);
  tallyPrint(&lastTx);
  tallyPrint(&last);
  tallyPrint(&dbPages);
  if( nSaltBad ) printf("#   of the undetected WAL flips, %ld are in a frame header's salt field (bytes 8..15)\n", nSaltBad);
  free(aDb);
  free(aWal);
  free(b);
  removeDb(zDst);
  {
    long nBad = walHdr.nBad + frames.nBad + lastTx.nBad + last.nBad + dbPages.nBad;
    if( nBad ) fail_msg("%ld flipped WAL/database bytes were not detected (see counts above)", nBad);
  }
}

/* ---- hot rollback journal ------------------------------------------------- */

/*
** A crash image with a hot journal: a forked child spills an uncommitted
** transaction into the database file and dies.  Damage to the journal
** must never produce anything but an error or the exact committed state:
** one bit flipped at sampled offsets of every stored block (512-byte
** plaintext + 48-byte trailer: data, salt, IV, tag, version, reserved).
** The journal is also cut at every block boundary and in the middle of
** every block; those outcomes are counted and reported (see below).
*/
static void test_tamper_hot_journal(void **state){
  char zSrc[PATH_MAX], zDst[PATH_MAX], zSrcJ[PATH_MAX+16], zDstJ[PATH_MAX+16];
  sqlite3 *db = 0;
  unsigned char *aDb, *aJ, *b;
  size_t nDb, nJ, nBlock;
  uint64_t hGood = 0, hNew = 0, h;
  pid_t pid;
  int st = 0;
  static const int aSample[] = { 0, 1, 3, 4, 100, 255, 256, 400, 508, 511,
                                 512, 523, 524, 535, 536, 551, 552, 555, 556, 559 };
  Tally flips = { "hot journal: bit flips (sampled)", 0, {0}, 0, 0, 0, {0}, 0, 0, 0 };
  Tally cuts = { "hot journal: truncated", 0, {0}, 0, 0, 0, {0}, 0, 0, 0 };
  (void)state;
  pathOf(zSrc, "hj-src.db");
  pathOf(zDst, "hj-damaged.db");
  snprintf(zSrcJ, sizeof(zSrcJ), "%s-journal", zSrc);
  snprintf(zDstJ, sizeof(zDstJ), "%s-journal", zDst);
  removeDb(zSrc);
  assert_int_equal(openTdeCfg(zSrc, zCfg, &db), SQLITE_OK);
  exec(db, "PRAGMA page_size=1024");
  exec(db, "PRAGMA journal_mode=DELETE");
  exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, k INT, v TEXT)");
  exec(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<30) "
           "INSERT INTO t SELECT i, i, printf('committed %d %.800c', i, char(65 + i % 26)) FROM c");
  assert_int_equal(contentSum(db, &hGood), SQLITE_OK);
  /* What the uncommitted transaction would look like, for the report. */
  exec(db, "BEGIN; UPDATE t SET v = printf('uncommitted %d %.800c', id, 'z')");
  assert_int_equal(contentSum(db, &hNew), SQLITE_OK);
  exec(db, "ROLLBACK");
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  fflush(stdout);
  pid = fork();
  assert_true(pid >= 0);
  if( pid==0 ){
    sqlite3 *c = 0;
    if( openTdeCfg(zSrc, zCfg, &c) ) _exit(2);
    if( sqlite3_exec(c, "PRAGMA cache_size=1; BEGIN; UPDATE t SET v = printf('uncommitted %d %.800c', id, 'z')",
                     0, 0, 0) ) _exit(3);
    _exit(0);
  }
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st)==0);
  aDb = readAll(zSrc, &nDb);
  aJ = readAll(zSrcJ, &nJ);
  assert_non_null(aDb);
  assert_non_null(aJ);
  nBlock = (nJ + 559) / 560;
  printf("# hot journal: %zu bytes (%zu stored blocks), database %zu bytes\n", nJ, nBlock, nDb);
  assert_true(nBlock >= 8);

  /* The undamaged crash image rolls back to the committed state; make
  ** sure the database file really holds uncommitted pages (else the test
  ** proves nothing). */
  removeDb(zDst);
  writeAll(zDst, aDb, nDb);
  {
    sqlite3 *c = 0;
    uint64_t hRaw = 0;
    char *zUri = sqlite3_mprintf("file:%s?vfs=tde&tde_config=%s", zDst, zCfg);
    int rc = sqlite3_open_v2(zUri, &c, SQLITE_OPEN_READONLY|SQLITE_OPEN_URI, 0);
    sqlite3_free(zUri);
    if( rc==SQLITE_OK ) rc = contentSum(c, &hRaw);
    sqlite3_close(c);
    /* Without its journal the file is a mix: an error or not hGood. */
    assert_true(rc!=SQLITE_OK || hRaw!=hGood);
  }
  removeDb(zDst);
  writeAll(zDst, aDb, nDb);
  writeAll(zDstJ, aJ, nJ);
  assert_int_equal(probe(zDst, &h), P_OK);
  assert_true(h==hGood);

  b = malloc(nJ);
  assert_non_null(b);
  for(size_t iBlk=0; iBlk<nBlock; iBlk++){
    for(size_t k=0; k<sizeof(aSample)/sizeof(aSample[0]); k++){
      size_t i = iBlk*560 + (size_t)aSample[k];
      int out;
      if( i>=nJ ) continue;
      memcpy(b, aJ, nJ);
      b[i] ^= 0x01;
      removeDb(zDst);
      writeAll(zDst, aDb, nDb);
      writeAll(zDstJ, b, nJ);
      out = probe(zDst, &h);
      flips.n++;
      flips.aOut[out]++;
      if( probeRead && h!=hGood ){
        if( out==P_OK ) tallyOk(&flips, h, hGood, hNew); else flips.nReadWrong++;
        tallyBad(&flips, (long)i);
      }else if( out==P_OK ){
        tallyOk(&flips, h, hGood, hNew);   /* rolled back correctly despite the flip */
      }
    }
  }
  for(size_t iBlk=1; iBlk<=nBlock; iBlk++){
    for(int half=0; half<2; half++){
      size_t nCut = iBlk*560 - (half ? 280 : 0);
      int out;
      if( nCut>=nJ ) continue;
      removeDb(zDst);
      writeAll(zDst, aDb, nDb);
      writeAll(zDstJ, aJ, nCut);
      out = probe(zDst, &h);
      cuts.n++;
      cuts.aOut[out]++;
      if( probeRead && h!=hGood ){
        if( out==P_OK ) tallyOk(&cuts, h, hGood, hNew); else cuts.nReadWrong++;
        tallyBad(&cuts, (long)nCut);
      }else if( out==P_OK ){
        tallyOk(&cuts, h, hGood, hNew);
      }
    }
  }
  tallyPrint(&flips);
  tallyPrint(&cuts);
  printf("#   (for these tallies \"undamaged content\" is the committed state: a correct rollback)\n");
  free(aDb);
  free(aJ);
  free(b);
  removeDb(zDst);
  /* A journal cut at a block boundary is played back as far as it goes:
  ** the database is left a mix of committed and uncommitted pages, each
  ** authentic.  That is the same class as deleting the hot journal, which
  ** no per-file check can notice, so cuts are reported, not failed. */
  if( cuts.nBad ){
    printf("#   LIMITATION: %ld truncations of the hot journal left a mix of committed and "
           "uncommitted pages without an error\n", cuts.nBad);
  }
  if( flips.nBad ){
    fail_msg("a damaged hot journal gave rows other than the committed state (%ld flips)", flips.nBad);
  }
}

/* ---- the journal format: plain size, records, header slots ---------------- */

/*
** The same crash image with a hot journal as above, made through tde or
** (bTde = 0) by plain SQLite with the same 48 reserved bytes per page, so
** both pagers lay the journal out identically.  Returns the files' bytes.
*/
static void hotJournalImage(const char *zName, int bTde, unsigned char **paDb, size_t *pnDb,
                            unsigned char **paJ, size_t *pnJ, uint64_t *phGood){
  char zDb[PATH_MAX], zJ[PATH_MAX+16];
  sqlite3 *db = 0;
  pid_t pid;
  int st = 0;
  pathOf(zDb, zName);
  snprintf(zJ, sizeof(zJ), "%s-journal", zDb);
  removeDb(zDb);
  if( bTde ){
    assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
  }else{
    int nReserve = 48;
    assert_int_equal(sqlite3_open_v2(zDb, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE, "unix"), SQLITE_OK);
    exec(db, "PRAGMA page_size=1024");
    assert_int_equal(sqlite3_file_control(db, "main", SQLITE_FCNTL_RESERVE_BYTES, &nReserve), SQLITE_OK);
  }
  exec(db, "PRAGMA page_size=1024");
  exec(db, "PRAGMA journal_mode=DELETE");
  exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, k INT, v TEXT)");
  exec(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<30) "
           "INSERT INTO t SELECT i, i, printf('committed %d %.800c', i, char(65 + i % 26)) FROM c");
  assert_int_equal(contentSum(db, phGood), SQLITE_OK);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  fflush(stdout);
  pid = fork();
  assert_true(pid >= 0);
  if( pid==0 ){
    sqlite3 *c = 0;
    if( bTde ? openTdeCfg(zDb, zCfg, &c) : sqlite3_open_v2(zDb, &c, SQLITE_OPEN_READWRITE, "unix") ) _exit(2);
    if( sqlite3_exec(c, "PRAGMA cache_size=1; BEGIN; UPDATE t SET v = printf('uncommitted %d %.800c', id, 'z')",
                     0, 0, 0) ) _exit(3);
    _exit(0);
  }
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st)==0);
  *paDb = readAll(zDb, pnDb);
  *paJ = readAll(zJ, pnJ);
  assert_non_null(*paDb);
  assert_non_null(*paJ);
  removeDb(zDb);
}

static uint32_t get32(const unsigned char *a){
  return ((uint32_t)a[0]<<24) | ((uint32_t)a[1]<<16) | ((uint32_t)a[2]<<8) | a[3];
}

/* Probe the tde image with journal aJ (nJ bytes). */
static int probeJournal(const unsigned char *aDb, size_t nDb, const unsigned char *aJ, size_t nJ,
                        uint64_t *pH){
  char zDst[PATH_MAX], zDstJ[PATH_MAX+16];
  pathOf(zDst, "jf-damaged.db");
  snprintf(zDstJ, sizeof(zDstJ), "%s-journal", zDst);
  removeDb(zDst);
  writeAll(zDst, aDb, nDb);
  writeAll(zDstJ, aJ, nJ);
  return probe(zDst, pH);
}

/*
** docs/FORMAT.md "Rollback journal": the journal is exactly as long as
** plain SQLite's for the same transaction, records lie where SQLite put
** them with the page number as is and the tag prefix in the checksum
** field, and every damage to a record or to the header is an error or
** leaves the correct rollback -- never other rows.
*/
static void test_tamper_journal_format(void **state){
  unsigned char *aDb, *aJ, *aPDb, *aPJ, *b;
  size_t nDb, nJ, nPDb, nPJ;
  uint64_t hGood = 0, hPlain = 0, h;
  long aRec[512];
  int nRec = 0, nSeg = 0, nDetected = 0, nCases = 0;
  uint32_t H, P;
  (void)state;
  hotJournalImage("jf-tde.db", 1, &aDb, &nDb, &aJ, &nJ, &hGood);
  hotJournalImage("jf-plain.db", 0, &aPDb, &nPDb, &aPJ, &nPJ, &hPlain);
  printf("# hot journal of the same transaction: plain SQLite %zu bytes, tde %zu bytes\n", nPJ, nJ);
  assert_true(nJ==nPJ);
  assert_true(hGood==hPlain);

  /* The record layout, from plain SQLite's journal (plaintext headers). */
  H = get32(aPJ+20);
  P = get32(aPJ+24);
  assert_int_equal(P, 1024);
  for(size_t hOff=0; hOff+H<=nPJ && memcmp(aPJ+hOff, "\xd9\xd5\x05\xf9\x20\xa1\x63\xd7", 8)==0; ){
    uint32_t n = get32(aPJ+hOff+8);
    size_t end;
    assert_true(n!=0xffffffffu);
    for(uint32_t k=0; k<n && nRec<512; k++){
      long r = (long)(hOff + H + k*(P+8));
      aRec[nRec++] = r;
      /* The page number is stored as is; the checksum field is the tag
      ** prefix, never SQLite's checksum. */
      assert_true(memcmp(aJ+r, aPJ+r, 4)==0);
      assert_true(memcmp(aJ+r+4+P, aJ+r+4+P-48+24, 4)==0);
    }
    nSeg++;
    end = hOff + H + (size_t)n*(P+8);
    hOff = ((end-1)/H + 1)*H;
  }
  printf("# plain layout: sector %u, page %u, %d hot segments, %d records\n", H, P, nSeg, nRec);
  assert_true(nRec >= 8);
  assert_true(nSeg >= 2);
  /* The plain SQLite journal magic never appears: headers are sealed. */
  for(size_t i=0; i+8<=nJ; i++) assert_true(memcmp(aJ+i, "\xd9\xd5\x05\xf9\x20\xa1\x63\xd7", 8)!=0);

  /* The undamaged image rolls back. */
  assert_int_equal(probeJournal(aDb, nDb, aJ, nJ, &h), P_OK);
  assert_true(h==hGood);

  b = malloc(nJ);
  assert_non_null(b);
  /* A flipped byte in any part of a record, and a record moved: errors. */
  for(int iRec=0; iRec<nRec; iRec += (iRec<4 ? 1 : 7)){
    static const int aPart[] = { 3, 4, 500, 4+1024-49, 4+1024-44, 4+1024-44+12, 4+1024-44+24,
                                 4+1024-44+40, 4+1024-1, 4+1024, 4+1024+3 };
    for(size_t k=0; k<sizeof(aPart)/sizeof(aPart[0]); k++){
      int out;
      memcpy(b, aJ, nJ);
      b[aRec[iRec] + aPart[k]] ^= 0x10;
      out = probeJournal(aDb, nDb, b, nJ, &h);
      nCases++;
      if( out==P_OK ) fail_msg("record at %ld, byte %d flipped: no error", aRec[iRec], aPart[k]);
      nDetected++;
    }
  }
  for(int iRec=0; iRec+1<nRec; iRec += 5){
    int out;
    memcpy(b, aJ, nJ);
    if( aRec[iRec+1]!=aRec[iRec]+(long)(P+8) ) continue;
    memcpy(b+aRec[iRec], aJ+aRec[iRec+1], P+8);
    memcpy(b+aRec[iRec+1], aJ+aRec[iRec], P+8);
    out = probeJournal(aDb, nDb, b, nJ, &h);
    nCases++;
    if( out==P_OK ) fail_msg("records at %ld and %ld swapped: no error", aRec[iRec], aRec[iRec+1]);
    nDetected++;
  }
  printf("# journal records: %d damaged or moved, %d detected\n", nCases, nDetected);

  /* Header 0: slot 0 holds the first version (not hot), slot 1 the record
  ** count (hot).  Damage to the older slot changes nothing; damage to the
  ** newer one, or slot 0 copied over it, or a torn rewrite of it, is an
  ** error (a hot version may have been destroyed). */
  {
    static const struct { const char *zWhat; int iOff; int eKind; } aCase[] = {
      { "slot 0 flipped", 10, 0 },
      { "slot 0 trailer flipped", 64+30, 0 },
      { "slot 1 flipped", 112+10, 1 },
      { "slot 1 trailer flipped", 112+64+30, 1 },
      { "slot 0 copied over slot 1", 0, 2 },
      { "slot 1 rewrite torn (second half old zeros)", 112+56, 3 },
      { "slot 1 rewrite torn (first half only garbage)", 112, 4 },
      { "padding byte flipped", 300, 0 },
    };
    for(size_t i=0; i<sizeof(aCase)/sizeof(aCase[0]); i++){
      int out;
      memcpy(b, aJ, nJ);
      switch( aCase[i].eKind ){
        case 0: case 1: b[aCase[i].iOff] ^= 0x01; break;
        case 2: memcpy(b+112, aJ, 112); break;
        case 3: memset(b+aCase[i].iOff, 0, 56); break;
        case 4: for(int k=0; k<56; k++) b[aCase[i].iOff+k] = (unsigned char)(k*37+1); break;
      }
      out = probeJournal(aDb, nDb, b, nJ, &h);
      printf("# journal header %-46s %s%s\n", aCase[i].zWhat, azOutcome[out],
             out==P_OK ? (h==hGood ? " (correct rollback)" : " (WRONG ROWS)") : "");
      if( out==P_OK && h!=hGood ) fail_msg("journal header %s: wrong rows", aCase[i].zWhat);
      if( aCase[i].eKind>=1 && out==P_OK ) fail_msg("journal header %s: no error", aCase[i].zWhat);
      if( aCase[i].eKind==0 && out!=P_OK ) fail_msg("journal header %s: %s", aCase[i].zWhat, azOutcome[out]);
    }
  }
  free(b);
  free(aDb); free(aJ); free(aPDb); free(aPJ);
}


/*
** A hot journal left by the previous journal format (tests/fixtures/
** journal-prev, made at commit 0ad65da) is played back once: the database
** opens to its committed rows; the same journal with one byte flipped in a
** block is an error, never other rows.
*/
static void copyFixture(const char *zDir, const char *zName, const char *zTo, const unsigned char *aFlip,
                        size_t iFlip, size_t iFlip2){
  char zFrom[PATH_MAX+64];
  unsigned char *a;
  size_t n;
  snprintf(zFrom, sizeof(zFrom), "%s/%s", zDir, zName);
  a = readAll(zFrom, &n);
  assert_non_null(a);
  if( aFlip ){ a[iFlip] ^= *aFlip; a[iFlip2] ^= *aFlip; }
  writeAll(zTo, a, n);
  chmod(zTo, 0600);
  free(a);
}

static void test_journal_previous_format(void **state){
  char zDir[PATH_MAX], zCfgPrev[PATH_MAX+64], zDb[PATH_MAX+96], zJ[PATH_MAX+112], zW[PATH_MAX+96];
  char *z;
  (void)state;
  snprintf(zDir, sizeof(zDir), "%s", __FILE__);
  z = strrchr(zDir, '/');
  assert_non_null(z);
  snprintf(z, sizeof(zDir) - (size_t)(z - zDir), "/../fixtures/journal-prev");
  for(int iCase=0; iCase<3; iCase++){
    static const unsigned char flip = 0x04;
    sqlite3 *db = 0;
    char *zUri;
    int rc, nCommitted = -1, bOk = 0, bJournalGone;
    struct stat sb;
    snprintf(zCfgPrev, sizeof(zCfgPrev), "%s/prev%d", zScratch, iCase);
    mkdir(zCfgPrev, 0700);
    snprintf(zW, sizeof(zW), "%s/w.tdew", zCfgPrev);
    snprintf(zDb, sizeof(zDb), "%s/old.db", zCfgPrev);
    snprintf(zJ, sizeof(zJ), "%s-journal", zDb);
    copyFixture(zDir, "w.tdew", zW, 0, 0, 0);
    copyFixture(zDir, "old.db", zDb, 0, 0, 0);
    /* 0: as left; 1: a byte of both slots of block 9 (inside the second
    ** record SQLite plays back) flipped; 2: one byte of one slot of block 9
    ** flipped (it may be the older or an erased slot). */
    copyFixture(zDir, "old.db-journal", zJ, iCase ? &flip : 0, 9*1152 + 100,
                iCase==1 ? 9*1152 + 576 + 100 : 9*1152 + 100);
    snprintf(zCfgPrev + strlen(zCfgPrev), sizeof(zCfgPrev) - strlen(zCfgPrev), "/tde.conf");
    copyFixture(zDir, "tde.conf", zCfgPrev, 0, 0, 0);
    zUri = sqlite3_mprintf("file:%s?vfs=tde&tde_config=%s", zDb, zCfgPrev);
    rc = sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI, 0);
    sqlite3_free(zUri);
    if( rc==SQLITE_OK ){
      sqlite3_stmt *p = 0;
      rc = sqlite3_prepare_v2(db, "SELECT count(*) FROM t WHERE v LIKE 'committed %'", -1, &p, 0);
      if( rc==SQLITE_OK ){
        if( sqlite3_step(p)==SQLITE_ROW ) nCommitted = sqlite3_column_int(p, 0);
        rc = sqlite3_finalize(p);
      }
      if( rc==SQLITE_OK ) bOk = integrityOk(db);
    }
    sqlite3_close(db);
    bJournalGone = stat(zJ, &sb)!=0 || sb.st_size==0;
    printf("# previous-format hot journal%s: rc=%d, committed rows %d, integrity %s, journal %s\n",
           iCase==0 ? "" : iCase==1 ? ", block 9 damaged in both slots" : ", block 9 damaged in one slot",
           rc, nCommitted, bOk ? "ok" : "not ok", bJournalGone ? "gone" : "left");
    if( iCase==0 ){
      assert_int_equal(rc, SQLITE_OK);
      assert_int_equal(nCommitted, 30);
      assert_true(bOk);
      assert_true(bJournalGone);
    }else if( iCase==1 ){
      /* Block 9 has no valid slot: damage, an error. */
      assert_true(rc!=SQLITE_OK);
      assert_false(bJournalGone);
    }else{
      /* One slot damaged: the other still plays back, or an error. */
      assert_true(rc!=SQLITE_OK || (nCommitted==30 && bOk));
    }
  }
}


/*
** A multi-database commit that dies right after deleting its super-journal
** (SQLite's commit point): both main journals are still hot and name the
** deleted super-journal in their super-journal records, so SQLite must
** not play them back -- the shim has to hand the (authenticated) record
** back exactly.  Then the same with one record damaged: never other rows
** than the committed or the previous state in that database.
*/
static void test_journal_super_record(void **state){
  char zA[PATH_MAX], zB[PATH_MAX], zAJ[PATH_MAX+16], zBJ[PATH_MAX+16];
  (void)state;
  pathOf(zA, "sj-a.db");
  pathOf(zB, "sj-b.db");
  snprintf(zAJ, sizeof(zAJ), "%s-journal", zA);
  snprintf(zBJ, sizeof(zBJ), "%s-journal", zB);
  for(int iCase=0; iCase<2; iCase++){
    sqlite3 *db = 0;
    pid_t pid;
    int st = 0;
    sqlite3_int64 nA = -1, nB = -1;
    struct stat sb;
    size_t nJ;
    unsigned char *aJ;
    removeDb(zA);
    removeDb(zB);
    for(int i=0; i<2; i++){
      assert_int_equal(openTdeCfg(i ? zB : zA, zCfg, &db), SQLITE_OK);
      exec(db, "PRAGMA page_size=1024; PRAGMA journal_mode=DELETE");
      exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)");
      exec(db, "INSERT INTO t VALUES(1, 'before')");
      assert_int_equal(sqlite3_close(db), SQLITE_OK);
    }
    fflush(stdout);
    pid = fork();
    assert_true(pid>=0);
    if( pid==0 ){
      sqlite3 *c = 0;
      char *zSql = sqlite3_mprintf("ATTACH 'file:%q?vfs=tde&tde_config=%q' AS b", zB, zCfg);
      if( openTdeCfg(zA, zCfg, &c) || sqlite3_exec(c, zSql, 0, 0, 0) ) _exit(2);
      crashExitAfterSuper = 1;
      sqlite3_exec(c, "BEGIN; INSERT INTO main.t VALUES(2, 'committed'); INSERT INTO b.t VALUES(2, 'committed');"
                      "UPDATE main.t SET v='changed' WHERE id=1; UPDATE b.t SET v='changed' WHERE id=1; COMMIT", 0, 0, 0);
      _exit(3);
    }
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st)==0);
    assert_int_equal(stat(zAJ, &sb), 0);
    assert_true(sb.st_size > 0);
    assert_int_equal(stat(zBJ, &sb), 0);
    assert_true(sb.st_size > 0);
    if( iCase==1 ){
      /* A byte of the super-journal name in A's record (the end of the file). */
      aJ = readAll(zAJ, &nJ);
      assert_non_null(aJ);
      aJ[nJ - 20] ^= 0x01;
      writeAll(zAJ, aJ, nJ);
      free(aJ);
    }
    for(int i=0; i<2; i++){
      sqlite3_int64 n = -1;
      if( openTdeCfg(i ? zB : zA, zCfg, &db)==SQLITE_OK ){
        sqlite3_stmt *p = 0;
        if( sqlite3_prepare_v2(db, "SELECT count(*) FROM t WHERE v IN ('committed','changed')", -1, &p, 0)==SQLITE_OK
         && sqlite3_step(p)==SQLITE_ROW ){
          n = sqlite3_column_int64(p, 0);
        }
        sqlite3_finalize(p);
        if( n>=0 && !integrityOk(db) ) n = -2;
      }
      sqlite3_close(db);
      if( i ) nB = n; else nA = n;
    }
    printf("# multi-database commit killed after its super-journal was deleted%s: "
           "committed rows in a %lld, in b %lld\n", iCase ? ", a's record damaged" : "",
           (long long)nA, (long long)nB);
    assert_true(nB==2);
    if( iCase==0 ) assert_true(nA==2);
    else assert_true(nA==2 || nA==0 || nA==-1);
  }
}

/* ---- crash images ----------------------------------------------------------- */

/*
** Power loss at every step of a transaction: the crash simulator takes an
** image after every write/truncate/delete of the database's files, and a
** torn image of every write that rewrites bytes already on disk.  SQLite
** guarantees that each image opens to the state before or after the
** transaction; through tde it must too (an error is a database lost to a
** crash).  Rollback mode (spilling transaction: several journal segments)
** and WAL (spilling transaction that rewrites frames in place).
*/
static void crashImages(const char *zMode, int bTde){
  char zName[64];
  sqlite3 *db = 0;
  uint64_t hPre = 0, hPost = 0, h;
  long nTorn = 0, nAfter = 0, nPre = 0, nPost = 0, nErr = 0, nWrong = 0, nErrTorn = 0;
  int aFirstBad[8], nFirstBad = 0;
  snprintf(zName, sizeof(zName), "crash-%s-%d.db", zMode, bTde);
  pathOf(zCrashDb, zName);
  removeDb(zCrashDb);
  snprintf(zName, sizeof(zName), "crash-%s-%d-img", zMode, bTde);
  pathOf(zCrashDir, zName);
  mkdir(zCrashDir, 0700);
  nCrashImage = 0;
  probePlain = !bTde;
  if( bTde ) assert_int_equal(openTdeCfg(zCrashDb, zCfg, &db), SQLITE_OK);
  else assert_int_equal(sqlite3_open_v2(zCrashDb, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE, 0), SQLITE_OK);
  exec(db, "PRAGMA page_size=1024");
  if( strcmp(zMode, "wal")==0 ){
    exec(db, "PRAGMA journal_mode=WAL");
    exec(db, "PRAGMA wal_autocheckpoint=0");
  }else{
    exec(db, "PRAGMA journal_mode=DELETE");
  }
  exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, k INT, v TEXT)");
  exec(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<40) "
           "INSERT INTO t SELECT i, i, printf('before %d %.700c', i, char(65 + i % 26)) FROM c");
  if( strcmp(zMode, "wal")==0 ) exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  assert_int_equal(contentSum(db, &hPre), SQLITE_OK);
  exec(db, "PRAGMA cache_size=1");
  crashArmed = 1;
  exec(db, "BEGIN;"
           "UPDATE t SET v = printf('after %d %.700c', id, 'z');"
           "UPDATE t SET k = k + 1;"
           "INSERT INTO t VALUES(1000, 0, printf('%.3000c', 'n'));"
           "COMMIT");
  crashArmed = 0;
  assert_int_equal(contentSum(db, &hPost), SQLITE_OK);
  sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int*)0);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  assert_true(hPre!=hPost);

  for(int i=0; i<nCrashImage; i++){
    char zImg[PATH_MAX+64], zShm[PATH_MAX+80];
    int out;
    snprintf(zImg, sizeof(zImg), "%s/img%d.db", zCrashDir, i);
    snprintf(zShm, sizeof(zShm), "%s-shm", zImg);
    unlink(zShm);
    out = probe(zImg, &h);
    if( aImageTorn[i] ) nTorn++; else nAfter++;
    if( out==P_OK && h==hPre ) nPre++;
    else if( out==P_OK && h==hPost ) nPost++;
    else{
      if( out==P_OK || (probeRead && h!=hPre && h!=hPost) ) nWrong++;
      else{ nErr++; if( aImageTorn[i] ) nErrTorn++; }
      if( nFirstBad<8 ) aFirstBad[nFirstBad++] = i;
    }
  }
  probePlain = 0;
  printf("# crash images, %s, journal_mode=%s: %d images (%ld after an operation, %ld torn in-place rewrites): "
         "state before %ld, state after %ld, error %ld (%ld of them torn), wrong data %ld\n",
         bTde ? "through tde" : "CONTROL: plain SQLite, no tde", zMode, nCrashImage, nAfter, nTorn, nPre, nPost, nErr, nErrTorn, nWrong);
  for(int i=0; i<nFirstBad; i++){
    printf("#   image %d (%s) does not open to a committed state\n", aFirstBad[i], azImageWhat[aFirstBad[i]]);
  }
  assert_true(nCrashImage > 20);
  if( nErr || nWrong ){
    fail_msg("%ld of %d crash images (%s, journal_mode=%s) are unopenable or wrong", nErr + nWrong, nCrashImage,
             bTde ? "tde" : "plain SQLite", zMode);
  }
}
/* Controls: the simulator is fair -- plain SQLite survives every image. */
/* tde_verify in WAL mode: an all-zero page inside the database's size is
** damage unless a frame not yet checkpointed holds that page (it used to
** skip every all-zero page in WAL mode). */
static void test_verify_zero_page_wal(void **state){
  char zDb[PATH_MAX];
  sqlite3 *db = 0;
  int64_t nChecked = 0, iBad = 0;
  int fd;
  (void)state;
  pathOf(zDb, "vz.db");
  removeDb(zDb);
  assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
  exec(db, "PRAGMA page_size=1024");
  exec(db, "PRAGMA journal_mode=WAL");
  exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, k INT, v TEXT)");
  exec(db, "BEGIN");
  fillTable(db, 1, 60, "base");
  exec(db, "COMMIT");
  exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  assert_int_equal(tde_verify(db, "main", &nChecked, &iBad, 0, 0), TDE_OK);
  assert_true(nChecked >= 4);
  /* Zero page 3 of the checkpointed file (header region 8 KiB first). */
  fd = open(zDb, O_WRONLY);
  assert_true(fd >= 0);
  {
    static const unsigned char aZero[PGSZ];
    assert_int_equal(pwrite(fd, aZero, PGSZ, (off_t)tdetestPageOff(PGSZ, 3)), PGSZ);
  }
  close(fd);
  assert_int_equal(tde_verify(db, "main", &nChecked, &iBad, 0, 0), TDE_AUTH);
  assert_int_equal(iBad, 3);
  /* And so does a new connection (no page of it is in the WAL). */
  sqlite3_close(db);
  db = 0;
  assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
  sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int*)0);
  assert_int_equal(tde_verify(db, "main", &nChecked, &iBad, 0, 0), TDE_AUTH);
  assert_int_equal(iBad, 3);
  sqlite3_close(db);
}

static void test_crash_images_control(void **s){ (void)s; crashImages("delete", 0); crashImages("wal", 0); }
static void test_crash_images_delete(void **s){ (void)s; crashImages("delete", 1); }
static void test_crash_images_wal(void **s){ (void)s; crashImages("wal", 1); }

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_tamper_rollback),
    cmocka_unit_test(test_tamper_wal),
    cmocka_unit_test(test_tamper_hot_journal),
    cmocka_unit_test(test_tamper_journal_format),
    cmocka_unit_test(test_journal_previous_format),
    cmocka_unit_test(test_journal_super_record),
    cmocka_unit_test(test_verify_zero_page_wal),
    cmocka_unit_test(test_crash_images_control),
    cmocka_unit_test(test_crash_images_delete),
    cmocka_unit_test(test_crash_images_wal),
  };
  /* The crash simulator goes below tde: default before tde_register. */
  if( sqlite3_initialize() ) return 1;
  pUnixVfs = sqlite3_vfs_find("unix");
  if( !pUnixVfs ) return 1;
  crashVfs.szOsFile = (int)sizeof(CrashFile) + pUnixVfs->szOsFile;
  crashVfs.mxPathname = pUnixVfs->mxPathname;
  if( sqlite3_vfs_register(&crashVfs, 1) ) return 1;
  return tdetestExit(cmocka_run_group_tests_name("tamper", tests, groupSetup, groupTeardown));
}
