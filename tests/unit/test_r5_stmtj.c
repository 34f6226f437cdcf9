/*
** The held block of temporary files (src/vfs/blockfile.c, issue 26 item 1):
** a statement journal appends 4-byte page numbers and P-byte pages, so
** nearly every write ends inside a 4096-byte block; tde keeps that block
** in memory and seals it once, when SQLite moves past it.
**
** Below tde sits a test VFS ("stmtj-below") that counts the bytes written
** to temp files and can fail their writes (the Nth write, with
** SQLITE_FULL, once or from then on).  The tests:
**  - SQLite's statement-journal pattern (4+P records, appended, rewritten
**    from offset 0 as SQLite reuses an on-disk sub-journal, truncated,
**    synced) and random writes, straight through tde's xOpen, against a
**    reference copy in memory after every call;
**  - the bytes a spilled statement journal costs, tde against plain SQLite
**    over the same VFS below (each block sealed once: about 1.01x);
**  - write faults below: the failing call reports it, the bytes read back
**    are the reference's, the next flush after the fault clears writes
**    them; and a statement rolled back after SQLITE_FULL (its journal read
**    back through tde) leaves the transaction's other changes and nothing
**    of the statement.
** Fixed seeds; figures as "# ..." lines.  With STMTJ_TRACE set, the
** bytes test lists each statement-journal write below on stderr.
*/
#include "tdetest.h"

/* ---- the VFS below tde ----------------------------------------------------- */

typedef struct BelowFile {
  sqlite3_file base;
  sqlite3_file *pReal;
  int bTemp;                  /* not a main db, main journal or WAL */
  int bSub;                   /* opened as a statement journal */
} BelowFile;

static sqlite3_vfs *pBelowOrig;
static int bTrace;
static struct {
  sqlite3_int64 nSubBytes, nSubWrites;    /* written to statement journals */
  sqlite3_int64 nTempBytes;               /* written to any temp file */
  sqlite3_int64 nSubReads;                /* reads of statement journals */
  int iFailIn;                /* >0: the Nth temp-file write from now fails */
  int bPersist;               /* ... and every one after it, until cleared */
  int bFailing;
  int nFailed;
} bw;

static void belowArm(int iN, int bPersist){
  bw.iFailIn = iN;
  bw.bPersist = bPersist;
  bw.bFailing = 0;
  bw.nFailed = 0;
}
static void belowClear(void){ bw.iFailIn = 0; bw.bFailing = 0; }

#define BREAL(f) (((BelowFile*)(f))->pReal)

static int belowClose(sqlite3_file *f){ return BREAL(f)->pMethods->xClose(BREAL(f)); }
static int belowRead(sqlite3_file *f, void *z, int n, sqlite3_int64 o){
  if( ((BelowFile*)f)->bSub ) bw.nSubReads++;
  return BREAL(f)->pMethods->xRead(BREAL(f), z, n, o);
}
static int belowWrite(sqlite3_file *f, const void *z, int n, sqlite3_int64 o){
  BelowFile *p = (BelowFile*)f;
  if( p->bTemp ){
    if( bw.bFailing || (bw.iFailIn>0 && --bw.iFailIn==0) ){
      bw.bFailing = bw.bPersist;
      bw.nFailed++;
      return SQLITE_FULL;
    }
    bw.nTempBytes += n;
    if( p->bSub && bTrace ) fprintf(stderr, "W %d @%lld\n", n, (long long)o);
    if( p->bSub ){ bw.nSubBytes += n; bw.nSubWrites++; }
  }
  return p->pReal->pMethods->xWrite(p->pReal, z, n, o);
}
static int belowTruncate(sqlite3_file *f, sqlite3_int64 n){ return BREAL(f)->pMethods->xTruncate(BREAL(f), n); }
static int belowSync(sqlite3_file *f, int fl){ return BREAL(f)->pMethods->xSync(BREAL(f), fl); }
static int belowFileSize(sqlite3_file *f, sqlite3_int64 *pn){ return BREAL(f)->pMethods->xFileSize(BREAL(f), pn); }
static int belowLock(sqlite3_file *f, int e){ return BREAL(f)->pMethods->xLock(BREAL(f), e); }
static int belowUnlock(sqlite3_file *f, int e){ return BREAL(f)->pMethods->xUnlock(BREAL(f), e); }
static int belowCheckReserved(sqlite3_file *f, int *pOut){
  return BREAL(f)->pMethods->xCheckReservedLock(BREAL(f), pOut);
}
static int belowFileControl(sqlite3_file *f, int op, void *pArg){
  return BREAL(f)->pMethods->xFileControl(BREAL(f), op, pArg);
}
static int belowSectorSize(sqlite3_file *f){ return BREAL(f)->pMethods->xSectorSize(BREAL(f)); }
static int belowDevChar(sqlite3_file *f){ return BREAL(f)->pMethods->xDeviceCharacteristics(BREAL(f)); }
static int belowShmMap(sqlite3_file *f, int i, int sz, int b, void volatile **pp){
  return BREAL(f)->pMethods->xShmMap(BREAL(f), i, sz, b, pp);
}
static int belowShmLock(sqlite3_file *f, int o, int n, int fl){ return BREAL(f)->pMethods->xShmLock(BREAL(f), o, n, fl); }
static void belowShmBarrier(sqlite3_file *f){ BREAL(f)->pMethods->xShmBarrier(BREAL(f)); }
static int belowShmUnmap(sqlite3_file *f, int d){ return BREAL(f)->pMethods->xShmUnmap(BREAL(f), d); }
static int belowFetch(sqlite3_file *f, sqlite3_int64 o, int n, void **pp){
  return BREAL(f)->pMethods->xFetch(BREAL(f), o, n, pp);
}
static int belowUnfetch(sqlite3_file *f, sqlite3_int64 o, void *pp){
  return BREAL(f)->pMethods->xUnfetch(BREAL(f), o, pp);
}

static const sqlite3_io_methods belowIo = {
  3, belowClose, belowRead, belowWrite, belowTruncate, belowSync, belowFileSize, belowLock,
  belowUnlock, belowCheckReserved, belowFileControl, belowSectorSize, belowDevChar, belowShmMap,
  belowShmLock, belowShmBarrier, belowShmUnmap, belowFetch, belowUnfetch
};

static int belowOpen(sqlite3_vfs *v, const char *zName, sqlite3_file *f, int flags, int *pOut){
  BelowFile *p = (BelowFile*)f;
  int rc;
  (void)v;
  memset(p, 0, sizeof(*p));
  p->pReal = (sqlite3_file*)&p[1];
  p->bTemp = (flags & (SQLITE_OPEN_MAIN_DB|SQLITE_OPEN_MAIN_JOURNAL|SQLITE_OPEN_WAL))==0;
  p->bSub = (flags & SQLITE_OPEN_SUBJOURNAL)!=0;
  rc = pBelowOrig->xOpen(pBelowOrig, zName, p->pReal, flags, pOut);
  f->pMethods = rc==SQLITE_OK ? &belowIo : 0;
  return rc;
}
static int belowDelete(sqlite3_vfs *v, const char *z, int d){ (void)v; return pBelowOrig->xDelete(pBelowOrig, z, d); }
static int belowAccess(sqlite3_vfs *v, const char *z, int fl, int *pOut){
  (void)v; return pBelowOrig->xAccess(pBelowOrig, z, fl, pOut);
}
static int belowFull(sqlite3_vfs *v, const char *z, int n, char *zOut){
  (void)v; return pBelowOrig->xFullPathname(pBelowOrig, z, n, zOut);
}
static void *belowDlOpen(sqlite3_vfs *v, const char *z){ (void)v; return pBelowOrig->xDlOpen(pBelowOrig, z); }
static void belowDlError(sqlite3_vfs *v, int n, char *z){ (void)v; pBelowOrig->xDlError(pBelowOrig, n, z); }
static void (*belowDlSym(sqlite3_vfs *v, void *h, const char *z))(void){
  (void)v; return pBelowOrig->xDlSym(pBelowOrig, h, z);
}
static void belowDlClose(sqlite3_vfs *v, void *h){ (void)v; pBelowOrig->xDlClose(pBelowOrig, h); }
static int belowRandomness(sqlite3_vfs *v, int n, char *z){ (void)v; return pBelowOrig->xRandomness(pBelowOrig, n, z); }
static int belowSleep(sqlite3_vfs *v, int us){ (void)v; return pBelowOrig->xSleep(pBelowOrig, us); }
static int belowTime(sqlite3_vfs *v, double *pT){ (void)v; return pBelowOrig->xCurrentTime(pBelowOrig, pT); }
static int belowLastError(sqlite3_vfs *v, int n, char *z){ (void)v; return pBelowOrig->xGetLastError(pBelowOrig, n, z); }
static int belowTime64(sqlite3_vfs *v, sqlite3_int64 *pT){ (void)v; return pBelowOrig->xCurrentTimeInt64(pBelowOrig, pT); }

static sqlite3_vfs belowVfs = {
  2, 0, 0, 0, "stmtj-below", 0, belowOpen, belowDelete, belowAccess, belowFull, belowDlOpen,
  belowDlError, belowDlSym, belowDlClose, belowRandomness, belowSleep, belowTime, belowLastError,
  belowTime64, 0, 0, 0
};

/* ---- a temp file through tde, and its reference ------------------------------ */

#define REF_MAX (1<<20)

typedef struct Tmp {
  sqlite3_file *f;            /* tde's file (tde's szOsFile bytes) */
  unsigned char *aRef;        /* REF_MAX bytes: what the file must hold */
  sqlite3_int64 nRef;         /* its size */
  unsigned char *aGot;        /* REF_MAX bytes of scratch */
  unsigned char aLast[70000]; /* the last write's bytes, offset and size */
  sqlite3_int64 iLast;
  int nLast;
} Tmp;

static uint64_t rngState;
static uint32_t rnd(void){
  rngState = rngState*6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(rngState >> 33);
}

static void tmpOpen(Tmp *t, int flags){
  sqlite3_vfs *v = sqlite3_vfs_find("tde");
  int outFlags = 0;
  assert_non_null(v);
  memset(t, 0, sizeof(*t));
  t->f = calloc(1, (size_t)v->szOsFile);
  t->aRef = calloc(1, REF_MAX);
  t->aGot = calloc(1, REF_MAX);
  assert_true(t->f && t->aRef && t->aGot);
  t->nRef = 0;
  assert_int_equal(v->xOpen(v, 0, t->f, flags | SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
                            | SQLITE_OPEN_EXCLUSIVE | SQLITE_OPEN_DELETEONCLOSE, &outFlags), SQLITE_OK);
}

static int tmpClose(Tmp *t){
  int rc = t->f->pMethods ? t->f->pMethods->xClose(t->f) : SQLITE_OK;
  free(t->f); free(t->aRef); free(t->aGot);
  t->f = 0; t->aRef = t->aGot = 0;
  return rc;
}

/* Write n bytes of a fresh pattern at iOfst, to the file and the reference. */
static int tmpWrite(Tmp *t, int n, sqlite3_int64 iOfst){
  unsigned char *a = t->aLast;
  int i, rc;
  assert_true(n<=(int)sizeof(t->aLast) && iOfst+n<=REF_MAX);
  t->iLast = iOfst;
  t->nLast = n;
  for(i=0; i<n; i++) a[i] = (unsigned char)(rnd() | 1);
  rc = t->f->pMethods->xWrite(t->f, a, n, iOfst);
  if( rc==SQLITE_OK ){
    memcpy(t->aRef+iOfst, a, (size_t)n);
    if( iOfst+n>t->nRef ) t->nRef = iOfst+n;
  }
  return rc;
}

/* The file's size and every byte of it (and some past its end) read back
** as the reference has them, in reads of rnd() sizes. */
static void tmpCheck(Tmp *t){
  sqlite3_int64 sz = -1, off = 0, nRead = t->nRef + 100;
  assert_int_equal(t->f->pMethods->xFileSize(t->f, &sz), SQLITE_OK);
  assert_int_equal(sz, t->nRef);
  while( off<nRead ){
    int n = 1 + (int)(rnd() % 9000);
    int rc;
    if( rnd()%4==0 ) n = 4;
    memset(t->aGot, 0xAA, (size_t)n);
    rc = t->f->pMethods->xRead(t->f, t->aGot, n, off);
    if( off+n<=t->nRef ){
      assert_int_equal(rc, SQLITE_OK);
    }else{
      int i;
      assert_true(rc==SQLITE_OK || rc==SQLITE_IOERR_SHORT_READ);
      for(i=(int)(t->nRef>off ? t->nRef-off : 0); i<n; i++) assert_int_equal(t->aGot[i], 0);
      n = (int)(t->nRef>off ? t->nRef-off : 0);
    }
    if( n>0 ) assert_memory_equal(t->aGot, t->aRef+off, (size_t)n);
    off += n>0 ? n : 1;
  }
}

/*
** After the last write failed: SQLite takes the bytes it covered as
** undefined, but each must read back as it was before or as written,
** never anything else, and the size must lie between the old size and the
** write's end.  The reference takes what the file now shows.
*/
static void tmpSettle(Tmp *t){
  sqlite3_int64 sz = -1, iEnd = t->iLast + t->nLast;
  int i, rc;
  assert_int_equal(t->f->pMethods->xFileSize(t->f, &sz), SQLITE_OK);
  assert_true(sz>=t->nRef && sz<=(iEnd>t->nRef ? iEnd : t->nRef));
  rc = t->f->pMethods->xRead(t->f, t->aGot, t->nLast, t->iLast);
  assert_true(rc==SQLITE_OK || rc==SQLITE_IOERR_SHORT_READ);
  for(i=0; i<t->nLast; i++){
    assert_true(t->aGot[i]==t->aLast[i] || t->aGot[i]==t->aRef[t->iLast+i]);
  }
  memcpy(t->aRef + t->iLast, t->aGot, (size_t)t->nLast);
  if( sz<iEnd ) memset(t->aRef + sz, 0, (size_t)(iEnd - sz));
  t->nRef = sz;
}

static void tmpTruncate(Tmp *t, sqlite3_int64 n){
  assert_int_equal(t->f->pMethods->xTruncate(t->f, n), SQLITE_OK);
  if( n<t->nRef ) memset(t->aRef+n, 0, (size_t)(t->nRef-n));
  t->nRef = n;
}

/* nRec statement-journal records of 4+P bytes from record iFirst on. */
static void stmtRecords(Tmp *t, int P, int iFirst, int nRec, int bCheckEach){
  int i;
  for(i=iFirst; i<iFirst+nRec; i++){
    sqlite3_int64 off = (sqlite3_int64)i*(4+P);
    assert_int_equal(tmpWrite(t, 4, off), SQLITE_OK);
    assert_int_equal(tmpWrite(t, P, off+4), SQLITE_OK);
    if( bCheckEach && i%7==3 ) tmpCheck(t);
  }
}

/* ---- tests ------------------------------------------------------------------ */

/* The pattern SQLite writes, for page sizes 512 to 65536: appended and
** checked as it grows, reused from offset 0 (SQLite rewrites an on-disk
** sub-journal in place for the next statement), truncated, synced. */
static void test_stmt_pattern(void **state){
  static const int aP[] = { 512, 1024, 4096, 8192, 65536 };
  size_t k;
  (void)state;
  rngState = 26001;
  for(k=0; k<sizeof(aP)/sizeof(aP[0]); k++){
    Tmp t;
    int P = aP[k], nRec = P>=65536 ? 6 : 40;
    tmpOpen(&t, SQLITE_OPEN_SUBJOURNAL);
    stmtRecords(&t, P, 0, nRec, 1);
    tmpCheck(&t);
    stmtRecords(&t, P, 0, nRec/2, 1);          /* the next statement, in place */
    tmpCheck(&t);
    stmtRecords(&t, P, nRec, 3, 0);            /* ... and past the old end */
    tmpCheck(&t);
    assert_int_equal(t.f->pMethods->xSync(t.f, SQLITE_SYNC_NORMAL), SQLITE_OK);
    tmpCheck(&t);
    tmpTruncate(&t, (sqlite3_int64)(nRec/3)*(4+P) + 4);   /* inside a record */
    tmpCheck(&t);
    stmtRecords(&t, P, nRec/3, 5, 1);
    tmpTruncate(&t, 0);
    tmpCheck(&t);
    stmtRecords(&t, P, 0, 9, 1);
    tmpCheck(&t);
    assert_int_equal(tmpClose(&t), SQLITE_OK);
  }
}

/* The next statement rewrites the on-disk sub-journal from offset 0:
** every block it enters already exists, and each is covered from its
** start before it is sealed, so none is read (decrypted) below; a write
** into the middle of a stored block, then a read of the whole file, still
** merges the stored bytes (checked against the reference). */
static void test_rewrite_reads_nothing(void **state){
  static const int aP[] = { 1024, 4096, 8192 };
  size_t k;
  (void)state;
  rngState = 26003;
  for(k=0; k<sizeof(aP)/sizeof(aP[0]); k++){
    Tmp t;
    int P = aP[k];
    sqlite3_int64 nReads;
    tmpOpen(&t, SQLITE_OPEN_SUBJOURNAL);
    stmtRecords(&t, P, 0, 30, 0);
    assert_int_equal(t.f->pMethods->xSync(t.f, SQLITE_SYNC_NORMAL), SQLITE_OK);
    nReads = bw.nSubReads;
    stmtRecords(&t, P, 0, 20, 0);            /* the next statement, in place */
    print_message("# P=%d: rewrite of 20 records read the file below %lld times\n",
                  P, (long long)(bw.nSubReads - nReads));
    assert_int_equal(bw.nSubReads - nReads, 0);
    tmpCheck(&t);
    assert_int_equal(tmpWrite(&t, 10, 5*4096 + 100), SQLITE_OK);    /* inside a stored block */
    assert_int_equal(tmpWrite(&t, 10, 5*4096 + 3000), SQLITE_OK);   /* not adjacent: merges */
    tmpCheck(&t);
    assert_int_equal(tmpWrite(&t, 10, 9*4096 + 7), SQLITE_OK);
    assert_int_equal(t.f->pMethods->xSync(t.f, SQLITE_SYNC_NORMAL), SQLITE_OK);
    tmpCheck(&t);
    assert_int_equal(tmpClose(&t), SQLITE_OK);
  }
}

/* Random writes (overlapping, past the end leaving holes, within one
** block) and truncations on files of 4096-byte blocks and of page-sized
** blocks (first write a 1024-byte page), each call checked. */
static void test_random_writes(void **state){
  int iFile;
  (void)state;
  rngState = 26002;
  for(iFile=0; iFile<4; iFile++){
    Tmp t;
    int i;
    tmpOpen(&t, iFile%2 ? SQLITE_OPEN_TEMP_DB : SQLITE_OPEN_SUBJOURNAL);
    if( iFile>=2 ) assert_int_equal(tmpWrite(&t, 1024, 0), SQLITE_OK);
    for(i=0; i<300; i++){
      uint32_t r = rnd() % 100;
      sqlite3_int64 off;
      int n;
      if( r<50 ){                 /* near the end */
        off = t.nRef - (t.nRef ? (sqlite3_int64)(rnd() % (uint32_t)(t.nRef<6000 ? t.nRef : 6000)) : 0);
        n = 1 + (int)(rnd() % 5000);
      }else if( r<85 ){           /* anywhere, small */
        off = (sqlite3_int64)(rnd() % (uint32_t)(t.nRef + 9000));
        n = 1 + (int)(rnd() % 300);
      }else if( r<95 ){           /* whole aligned blocks */
        off = (sqlite3_int64)(rnd() % 40) * 1024;
        n = 1024 * (1 + (int)(rnd() % 5));
      }else{
        tmpTruncate(&t, t.nRef ? (sqlite3_int64)(rnd() % (uint32_t)t.nRef) : 0);
        tmpCheck(&t);
        continue;
      }
      if( off+n>REF_MAX/2 ) continue;
      assert_int_equal(tmpWrite(&t, n, off), SQLITE_OK);
      if( i%5==0 ) tmpCheck(&t);
    }
    tmpCheck(&t);
    assert_int_equal(tmpClose(&t), SQLITE_OK);
  }
}

/* Write faults below: a failing write, sync or truncate reports the error;
** what reads back is the reference (the held block stays in memory); after
** the fault clears the next flush succeeds and the bytes are on disk. */
static void test_write_faults(void **state){
  int iN;
  (void)state;
  for(iN=1; iN<=12; iN++){
    int bPersist;
    for(bPersist=0; bPersist<2; bPersist++){
      Tmp t;
      int i, nErr = 0, P = 4096;
      rngState = 26003 + (uint64_t)iN;
      tmpOpen(&t, SQLITE_OPEN_SUBJOURNAL);
      stmtRecords(&t, P, 0, 3, 0);
      belowArm(iN, bPersist);
      for(i=3; i<12; i++){
        sqlite3_int64 off = (sqlite3_int64)i*(4+P);
        int rc = tmpWrite(&t, 4, off);
        if( rc==SQLITE_OK ) rc = tmpWrite(&t, P, off+4);
        if( rc ){
          assert_int_equal(rc, SQLITE_FULL);
          nErr++;
          tmpSettle(&t);
          break;
        }
      }
      if( nErr==0 ){
        int rc = t.f->pMethods->xSync(t.f, SQLITE_SYNC_NORMAL);
        if( rc ){ assert_int_equal(rc, SQLITE_FULL); nErr++; }
      }
      tmpCheck(&t);               /* from memory and disk: the reference */
      if( bw.nFailed ) assert_true(nErr>0);     /* never swallowed */
      belowClear();
      assert_int_equal(t.f->pMethods->xSync(t.f, SQLITE_SYNC_NORMAL), SQLITE_OK);
      tmpCheck(&t);
      /* On disk alone: truncating to the size flushes nothing more, and a
      ** fresh look at every block must authenticate. */
      tmpTruncate(&t, t.nRef);
      tmpCheck(&t);
      assert_int_equal(tmpClose(&t), SQLITE_OK);
    }
  }
}

/* A kept (not DELETEONCLOSE) temp file: a failed write of the held block at
** close is reported by xClose. */
static void test_close_reports(void **state){
  sqlite3_vfs *v = sqlite3_vfs_find("tde");
  char zPath[PATH_MAX];
  sqlite3_file *f;
  unsigned char a[100];
  int outFlags = 0;
  (void)state;
  assert_non_null(v);
  pathOf(zPath, "kept.tmp");
  f = calloc(1, (size_t)v->szOsFile);
  assert_non_null(f);
  memset(a, 7, sizeof(a));
  assert_int_equal(v->xOpen(v, zPath, f, SQLITE_OPEN_TEMP_JOURNAL | SQLITE_OPEN_READWRITE
                            | SQLITE_OPEN_CREATE, &outFlags), SQLITE_OK);
  assert_int_equal(f->pMethods->xWrite(f, a, (int)sizeof(a), 0), SQLITE_OK);
  belowArm(1, 1);
  assert_int_equal(f->pMethods->xClose(f), SQLITE_FULL);
  belowClear();
  free(f);
  unlink(zPath);
}

/* ---- SQL: bytes and a statement rolled back ----------------------------------- */

static sqlite3 *openDb(const char *zName, int bTde){
  char zPath[PATH_MAX];
  sqlite3 *db = 0;
  pathOf(zPath, zName);
  removeDb(zPath);
  if( bTde ){
    assert_int_equal(openTdeCfg(zPath, zCfg, &db), SQLITE_OK);
  }else{
    int nReserve = TDE_RESERVE_BYTES;   /* the same pages as tde's, so the same journal */
    assert_int_equal(sqlite3_open_v2(zPath, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE,
                                     "stmtj-below"), SQLITE_OK);
    assert_int_equal(sqlite3_file_control(db, "main", SQLITE_FCNTL_RESERVE_BYTES, &nReserve), SQLITE_OK);
  }
  exec(db, "PRAGMA temp_store=FILE; PRAGMA cache_size=-8192;"
           "CREATE TABLE t(id INTEGER PRIMARY KEY, a INTEGER UNIQUE, b TEXT);"
           "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<3000) "
           "INSERT INTO t SELECT i, i, printf('%.300c', 'x') FROM c;"
           "CREATE TABLE mark(x)");
  return db;
}

/* An UPDATE of every row in a transaction: a statement journal of about
** 1.5 MB, spilled to a file.  Bytes written to it below tde against plain
** SQLite's over the same VFS. */
static void test_stmt_bytes(void **state){
  sqlite3_int64 nPlain = 0, nTde = 0, nPlainW = 0, nTdeW = 0;
  sqlite3 *db;
  int bTde;
  (void)state;
  for(bTde=0; bTde<2; bTde++){
    db = openDb(bTde ? "bytes-tde.db" : "bytes-plain.db", bTde);
    bw.nSubBytes = bw.nSubWrites = 0;
    bTrace = getenv("STMTJ_TRACE")!=0;
    exec(db, "BEGIN; INSERT INTO mark VALUES(1); UPDATE t SET a=-a, b=printf('%.300c', 'y'); "
             "UPDATE t SET a=-a; COMMIT");
    bTrace = 0;
    if( bTde ){ nTde = bw.nSubBytes; nTdeW = bw.nSubWrites; }
    else{ nPlain = bw.nSubBytes; nPlainW = bw.nSubWrites; }
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
  }
  printf("# statement journal bytes written: plain %lld in %lld writes, tde %lld in %lld writes (%.3fx)\n",
         (long long)nPlain, (long long)nPlainW, (long long)nTde, (long long)nTdeW,
         nPlain ? (double)nTde/(double)nPlain : 0.0);
  assert_true(nPlain > 1000000);     /* the journal did spill to a file */
  /* Each 4096-byte block sealed once: 4144/4096 = 1.012x. */
  assert_true((double)nTde <= 1.03*(double)nPlain);
}

/* SQLITE_FULL on the Nth statement-journal write: SQLite rolls back the
** statement only, reading its journal back through tde, and the
** transaction goes on.  The database holds the transaction's other
** changes and either all of the UPDATE or none of it. */
static void test_stmt_rollback_fault(void **state){
  static const int aN[] = { 1, 2, 5, 30, 150, 249, 300 };
  size_t k;
  (void)state;
  for(k=0; k<sizeof(aN)/sizeof(aN[0]); k++){
    sqlite3 *db = openDb("fault.db", 1);
    char *zErr = 0;
    int rc;
    /* Pages changed before the statement go to its journal (SQLite takes
    ** the others back from the main journal). */
    exec(db, "BEGIN; INSERT INTO mark VALUES(1); UPDATE t SET b=printf('%.300c', 'z')");
    belowArm(aN[k], 1);
    bw.nSubBytes = 0;
    rc = sqlite3_exec(db, "UPDATE t SET a=-a, b=printf('%.300c', 'y')", 0, 0, &zErr);
    belowClear();
    sqlite3_free(zErr);
    printf("# fault at statement-journal write %d: UPDATE rc %d, %d writes failed, %lld bytes written\n",
           aN[k], rc, bw.nFailed, (long long)bw.nSubBytes);
    assert_true(rc==SQLITE_OK || rc==SQLITE_FULL);
    if( bw.nFailed ) assert_int_equal(rc, SQLITE_FULL);
    assert_int_equal(sqlite3_get_autocommit(db), 0);    /* the transaction goes on */
    exec(db, "COMMIT");
    assert_true(integrityOk(db));
    {
      sqlite3_stmt *p = 0;
      assert_int_equal(sqlite3_prepare_v2(db, "SELECT (SELECT count(*) FROM mark), "
        "(SELECT count(*) FROM t WHERE a<0 AND b=printf('%.300c', 'y')), "
        "(SELECT count(*) FROM t WHERE a>0 AND b=printf('%.300c', 'z'))", -1, &p, 0), SQLITE_OK);
      assert_int_equal(sqlite3_step(p), SQLITE_ROW);
      assert_int_equal(sqlite3_column_int(p, 0), 1);
      if( rc==SQLITE_OK ){
        assert_int_equal(sqlite3_column_int(p, 1), 3000);
      }else{
        assert_int_equal(sqlite3_column_int(p, 2), 3000);
      }
      assert_int_equal(sqlite3_finalize(p), SQLITE_OK);
    }
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
  }
}

/* Each test starts with no fault armed and the counts at zero (a failed
** test may have left a fault armed). */
static int testSetup(void **state){
  (void)state;
  memset(&bw, 0, sizeof(bw));
  bTrace = 0;
  return 0;
}

static int groupSetup(void **state){
  (void)state;
  pBelowOrig = sqlite3_vfs_find(0);
  if( !pBelowOrig ) return -1;
  belowVfs.szOsFile = (int)sizeof(BelowFile) + pBelowOrig->szOsFile;
  belowVfs.mxPathname = pBelowOrig->mxPathname;
  if( sqlite3_vfs_register(&belowVfs, 1)!=SQLITE_OK ) return -1;    /* tde goes above it */
  return tdetestGroupSetup("tdestmtj", 0);
}

static int groupTeardown(void **state){
  (void)state;
  tdetestScratchRemove();
  return 0;
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup(test_stmt_pattern, testSetup),
    cmocka_unit_test_setup(test_random_writes, testSetup),
    cmocka_unit_test_setup(test_rewrite_reads_nothing, testSetup),
    cmocka_unit_test_setup(test_write_faults, testSetup),
    cmocka_unit_test_setup(test_close_reports, testSetup),
    cmocka_unit_test_setup(test_stmt_bytes, testSetup),
    cmocka_unit_test_setup(test_stmt_rollback_fault, testSetup),
  };
  return cmocka_run_group_tests_name("r5_stmtj", tests, groupSetup, groupTeardown);
}
