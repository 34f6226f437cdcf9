/*
** Plaintext leak test: distinct canary strings go through every path SQLite
** writes -- main database pages, WAL frames, the rollback journal (DELETE
** and PERSIST), statement journals, temp tables, sorter spills, VACUUM's
** temp database, ephemeral tables and a multi-database commit's
** super-journal -- and no canary may reach any file.
**
** Three independent checks, so a gap in one cannot hide a leak:
**  1. A spy VFS registered BELOW tde (tde sits on whatever VFS is default
**     when tde_register runs) sees every byte tde writes to every file and
**     scans it.  It also counts bytes per file kind, so the test fails if a
**     path it claims to cover was never exercised.
**  2. While the workloads run (from a progress handler), every file open
**     in SQLITE_TMPDIR -- set to a test-owned folder before SQLite starts;
**     the unix VFS unlinks temp files at open -- is read through
**     /proc/self/fd, and the -journal file is copied; the test asserts it
**     captured temp files and journals with content.
**  3. At the end, every file left in the scratch and temp folders (db,
**     -wal, -shm, -journal) is scanned.  The -shm holds SQLite's plaintext
**     wal-index (page numbers and checksums): it must hold no canary.
** A positive control writes a canary through the spy without tde and
** checks that the detector fires.  The data must read back.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
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

static char zTmpDir[PATH_MAX];    /* SQLITE_TMPDIR */

/* ---- canaries ------------------------------------------------------------- */

enum { C_MAIN, C_WAL, C_JRNL, C_PERSIST, C_STMT, C_TEMPTBL, C_SORT, C_VACUUM, C_EPHEM,
       C_SUPER, C_CONTROL, C_N };
static const char *azCanary[C_N] = {
  "CANARY-MAINPAGE-q7Zt", "CANARY-WALFRAME-x2Lk", "CANARY-ROLLJRNL-m4Pv", "CANARY-PERSISTJ-c8Rw",
  "CANARY-STMTJRNL-b5Nd", "CANARY-TEMPTABL-h3Qs", "CANARY-SORTSPIL-k9Fe", "CANARY-VACUUMDB-u6Yj",
  "CANARY-EPHEMERL-t1Gh", "CANARY-SUPERJRN-w0Ea", "CANARY-CONTROL0-z5Vb",
};

/* File kinds by SQLITE_OPEN_* flag. */
enum { K_MAIN, K_WAL, K_JOURNAL, K_SUBJ, K_TEMPDB, K_TEMPJ, K_TRANS, K_SUPER, K_OTHER, K_N };
static const char *azKind[K_N] = { "main db", "wal", "main journal", "statement journal",
  "temp db", "temp journal/sorter", "transient db", "super-journal", "other" };
static int kindOf(int flags){
  if( flags & SQLITE_OPEN_MAIN_DB ) return K_MAIN;
  if( flags & SQLITE_OPEN_WAL ) return K_WAL;
  if( flags & SQLITE_OPEN_MAIN_JOURNAL ) return K_JOURNAL;
  if( flags & SQLITE_OPEN_SUBJOURNAL ) return K_SUBJ;
  if( flags & SQLITE_OPEN_TEMP_DB ) return K_TEMPDB;
  if( flags & SQLITE_OPEN_TEMP_JOURNAL ) return K_TEMPJ;
  if( flags & SQLITE_OPEN_TRANSIENT_DB ) return K_TRANS;
  if( flags & SQLITE_OPEN_SUPER_JOURNAL ) return K_SUPER;
  return K_OTHER;
}

typedef struct Leak { int iCanary; char zWhere[160]; } Leak;
static Leak aLeak[32];
static int nLeak;
static sqlite3_int64 aBytes[K_N];        /* bytes written per kind (spy) */
static int aCaptured[K_N];               /* open files of a kind read with content */
static int nProcCaptured;                /* files in SQLITE_TMPDIR read via /proc */
static sqlite3_int64 nProcBytes;

/* Scan a buffer for every canary (the first 12 bytes: a canary split
** across two writes still leaves whole copies elsewhere). */
static void scan(const unsigned char *a, size_t n, const char *zWhere){
  for(int c=0; c<C_N; c++){
    if( memmem(a, n, azCanary[c], 12) ){
      if( nLeak < (int)(sizeof(aLeak)/sizeof(aLeak[0])) ){
        aLeak[nLeak].iCanary = c;
        snprintf(aLeak[nLeak].zWhere, sizeof(aLeak[nLeak].zWhere), "%s", zWhere);
      }
      nLeak++;
    }
  }
}

/* ---- spy VFS below tde ---------------------------------------------------- */

typedef struct SpyFile SpyFile;
struct SpyFile {
  sqlite3_file base;
  sqlite3_file *pReal;
  int eKind;
  char zName[256];
  SpyFile *pNext;
};
static sqlite3_vfs *pUnix;
static SpyFile *pOpenFiles;

static int spyClose(sqlite3_file *pFile){
  SpyFile *p = (SpyFile*)pFile, **pp;
  for(pp=&pOpenFiles; *pp; pp=&(*pp)->pNext){ if( *pp==p ){ *pp = p->pNext; break; } }
  return p->pReal->pMethods->xClose(p->pReal);
}
static int spyRead(sqlite3_file *pFile, void *z, int n, sqlite3_int64 o){
  SpyFile *p = (SpyFile*)pFile;
  return p->pReal->pMethods->xRead(p->pReal, z, n, o);
}
static int spyWrite(sqlite3_file *pFile, const void *z, int n, sqlite3_int64 o){
  SpyFile *p = (SpyFile*)pFile;
  char zWhere[160];
  if( snprintf(zWhere, sizeof(zWhere), "write of %d bytes at %lld to %s %s", n, (long long)o,
               azKind[p->eKind], p->zName) >= (int)sizeof(zWhere) ){
    zWhere[sizeof(zWhere)-1] = 0;      /* a long name is cut short */
  }
  scan(z, (size_t)n, zWhere);
  aBytes[p->eKind] += n;
  return p->pReal->pMethods->xWrite(p->pReal, z, n, o);
}
static int spyTruncate(sqlite3_file *pFile, sqlite3_int64 s){
  SpyFile *p = (SpyFile*)pFile; return p->pReal->pMethods->xTruncate(p->pReal, s);
}
static int spySync(sqlite3_file *pFile, int f){
  SpyFile *p = (SpyFile*)pFile; return p->pReal->pMethods->xSync(p->pReal, f);
}
static int spyFileSize(sqlite3_file *pFile, sqlite3_int64 *pS){
  SpyFile *p = (SpyFile*)pFile; return p->pReal->pMethods->xFileSize(p->pReal, pS);
}
static int spyLock(sqlite3_file *pFile, int e){
  SpyFile *p = (SpyFile*)pFile; return p->pReal->pMethods->xLock(p->pReal, e);
}
static int spyUnlock(sqlite3_file *pFile, int e){
  SpyFile *p = (SpyFile*)pFile; return p->pReal->pMethods->xUnlock(p->pReal, e);
}
static int spyCheckReservedLock(sqlite3_file *pFile, int *pR){
  SpyFile *p = (SpyFile*)pFile; return p->pReal->pMethods->xCheckReservedLock(p->pReal, pR);
}
static int spyFileControl(sqlite3_file *pFile, int op, void *pArg){
  SpyFile *p = (SpyFile*)pFile; return p->pReal->pMethods->xFileControl(p->pReal, op, pArg);
}
static int spySectorSize(sqlite3_file *pFile){
  SpyFile *p = (SpyFile*)pFile; return p->pReal->pMethods->xSectorSize(p->pReal);
}
static int spyDeviceCharacteristics(sqlite3_file *pFile){
  SpyFile *p = (SpyFile*)pFile; return p->pReal->pMethods->xDeviceCharacteristics(p->pReal);
}
static int spyShmMap(sqlite3_file *pFile, int i, int sz, int b, void volatile **pp){
  SpyFile *p = (SpyFile*)pFile; return p->pReal->pMethods->xShmMap(p->pReal, i, sz, b, pp);
}
static int spyShmLock(sqlite3_file *pFile, int o, int n, int f){
  SpyFile *p = (SpyFile*)pFile; return p->pReal->pMethods->xShmLock(p->pReal, o, n, f);
}
static void spyShmBarrier(sqlite3_file *pFile){
  SpyFile *p = (SpyFile*)pFile; p->pReal->pMethods->xShmBarrier(p->pReal);
}
static int spyShmUnmap(sqlite3_file *pFile, int d){
  SpyFile *p = (SpyFile*)pFile; return p->pReal->pMethods->xShmUnmap(p->pReal, d);
}
static int spyFetch(sqlite3_file *pFile, sqlite3_int64 o, int n, void **pp){
  SpyFile *p = (SpyFile*)pFile; return p->pReal->pMethods->xFetch(p->pReal, o, n, pp);
}
static int spyUnfetch(sqlite3_file *pFile, sqlite3_int64 o, void *pv){
  SpyFile *p = (SpyFile*)pFile; return p->pReal->pMethods->xUnfetch(p->pReal, o, pv);
}

static const sqlite3_io_methods spyIoMethods = {
  3,                            /* iVersion */
  spyClose,                     /* xClose */
  spyRead,                      /* xRead */
  spyWrite,                     /* xWrite */
  spyTruncate,                  /* xTruncate */
  spySync,                      /* xSync */
  spyFileSize,                  /* xFileSize */
  spyLock,                      /* xLock */
  spyUnlock,                    /* xUnlock */
  spyCheckReservedLock,         /* xCheckReservedLock */
  spyFileControl,               /* xFileControl */
  spySectorSize,                /* xSectorSize */
  spyDeviceCharacteristics,     /* xDeviceCharacteristics */
  spyShmMap,                    /* xShmMap */
  spyShmLock,                   /* xShmLock */
  spyShmBarrier,                /* xShmBarrier */
  spyShmUnmap,                  /* xShmUnmap */
  spyFetch,                     /* xFetch */
  spyUnfetch                    /* xUnfetch */
};

static int spyOpen(sqlite3_vfs *pVfs, const char *zName, sqlite3_file *pFile, int flags, int *pOut){
  SpyFile *p = (SpyFile*)pFile;
  int rc;
  (void)pVfs;
  memset(p, 0, sizeof(*p));
  p->pReal = (sqlite3_file*)&p[1];
  p->eKind = kindOf(flags);
  snprintf(p->zName, sizeof(p->zName), "%s", zName ? zName : "(temp)");
  rc = pUnix->xOpen(pUnix, zName, p->pReal, flags, pOut);
  if( rc ){ pFile->pMethods = 0; return rc; }
  pFile->pMethods = &spyIoMethods;
  p->pNext = pOpenFiles;
  pOpenFiles = p;
  return SQLITE_OK;
}
static int spyDelete(sqlite3_vfs *v, const char *z, int s){ (void)v; return pUnix->xDelete(pUnix, z, s); }
static int spyAccess(sqlite3_vfs *v, const char *z, int f, int *r){ (void)v; return pUnix->xAccess(pUnix, z, f, r); }
static int spyFullPathname(sqlite3_vfs *v, const char *z, int n, char *o){ (void)v; return pUnix->xFullPathname(pUnix, z, n, o); }
static void *spyDlOpen(sqlite3_vfs *v, const char *z){ (void)v; return pUnix->xDlOpen(pUnix, z); }
static void spyDlError(sqlite3_vfs *v, int n, char *z){ (void)v; pUnix->xDlError(pUnix, n, z); }
static void (*spyDlSym(sqlite3_vfs *v, void *p, const char *z))(void){ (void)v; return pUnix->xDlSym(pUnix, p, z); }
static void spyDlClose(sqlite3_vfs *v, void *p){ (void)v; pUnix->xDlClose(pUnix, p); }
static int spyRandomness(sqlite3_vfs *v, int n, char *z){ (void)v; return pUnix->xRandomness(pUnix, n, z); }
static int spySleep(sqlite3_vfs *v, int n){ (void)v; return pUnix->xSleep(pUnix, n); }
static int spyCurrentTime(sqlite3_vfs *v, double *p){ (void)v; return pUnix->xCurrentTime(pUnix, p); }
static int spyGetLastError(sqlite3_vfs *v, int n, char *z){ (void)v; return pUnix->xGetLastError(pUnix, n, z); }
static int spyCurrentTimeInt64(sqlite3_vfs *v, sqlite3_int64 *p){ (void)v; return pUnix->xCurrentTimeInt64(pUnix, p); }

static sqlite3_vfs spyVfs = {
  2, 0, 0, 0, "spy", 0,
  spyOpen, spyDelete, spyAccess, spyFullPathname, spyDlOpen, spyDlError, spyDlSym, spyDlClose,
  spyRandomness, spySleep, spyCurrentTime, spyGetLastError, spyCurrentTimeInt64,
  0, 0, 0
};

/* ---- capture while open --------------------------------------------------- */

/* Read every open journal/temp file through the file below tde, and every
** file in SQLITE_TMPDIR through /proc/self/fd; scan them. */
static void captureOpenFiles(void){
  for(SpyFile *p=pOpenFiles; p; p=p->pNext){
    sqlite3_int64 sz = 0;
    unsigned char *a;
    char zWhere[300];
    if( p->eKind==K_MAIN || p->eKind==K_WAL ) continue;   /* scanned at the end */
    if( p->pReal->pMethods->xFileSize(p->pReal, &sz) || sz<=0 ) continue;
    a = malloc((size_t)sz);
    if( !a ) continue;
    if( p->pReal->pMethods->xRead(p->pReal, a, (int)sz, 0)==SQLITE_OK ){
      snprintf(zWhere, sizeof(zWhere), "open %s %s (%lld bytes) read while in use", azKind[p->eKind], p->zName, (long long)sz);
      scan(a, (size_t)sz, zWhere);
      aCaptured[p->eKind]++;
    }
    free(a);
  }
  {
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    size_t nDir = strlen(zTmpDir);
    if( !d ) return;
    while( (e = readdir(d))!=0 ){
      char zLink[PATH_MAX], zFd[300];
      ssize_t n;
      if( e->d_name[0]=='.' ) continue;
      snprintf(zFd, sizeof(zFd), "/proc/self/fd/%s", e->d_name);
      n = readlink(zFd, zLink, sizeof(zLink)-1);
      if( n<=0 ) continue;
      zLink[n] = 0;
      if( strncmp(zLink, zTmpDir, nDir)==0 && zLink[nDir]=='/' ){
        int fd = open(zFd, O_RDONLY);
        unsigned char *a;
        struct stat st;
        if( fd<0 ) continue;
        if( fstat(fd, &st)==0 && st.st_size>0 && (a = malloc((size_t)st.st_size))!=0 ){
          ssize_t got = pread(fd, a, (size_t)st.st_size, 0);
          if( got>0 ){
            char zWhere[PATH_MAX+64];
            snprintf(zWhere, sizeof(zWhere), "temp file %s via /proc while open", zLink);
            scan(a, (size_t)got, zWhere);
            nProcCaptured++;
            nProcBytes += got;
          }
          free(a);
        }
        close(fd);
      }
    }
    closedir(d);
  }
}

static int nProgress;
static int onProgress(void *pArg){
  (void)pArg;
  if( (nProgress++ % 4)==0 ) captureOpenFiles();
  return 0;
}

/* ---- helpers -------------------------------------------------------------- */

/* Scan one file on disk; returns its size (-1 if absent). */
static long scanFile(const char *zPath, const char *zWhy){
  size_t n;
  unsigned char *a = readAll(zPath, &n);
  char zWhere[PATH_MAX+80];
  if( !a ) return -1;
  snprintf(zWhere, sizeof(zWhere), "file %s (%s)", zPath, zWhy);
  scan(a, n, zWhere);
  free(a);
  return (long)n;
}

static int scanTreeOne(const char *zPath, const struct stat *pSt, int flag, struct FTW *pFtw){
  (void)pFtw;
  if( flag==FTW_F && pSt->st_size>0 ) scanFile(zPath, "left on disk");
  return 0;
}

static sqlite3 *openTde(const char *zPath){
  sqlite3 *db = 0;
  char *zUri = sqlite3_mprintf("file:%s?vfs=tde&tde_config=%s", zPath, zCfg);
  int rc = sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE|SQLITE_OPEN_URI, 0);
  sqlite3_free(zUri);
  if( rc ) fail_msg("open %s: %d", zPath, rc);
  sqlite3_progress_handler(db, 20000, onProgress, 0);
  return db;
}

#define EXEC(db, ...) execAt(__LINE__, db, __VA_ARGS__)
static void execAt(int iLine, sqlite3 *db, const char *zFmt, ...){
  va_list ap;
  char *zSql, *zErr = 0;
  va_start(ap, zFmt);
  zSql = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  if( sqlite3_exec(db, zSql, 0, 0, &zErr) ){
    print_error("line %d: %.200s -> %s\n", iLine, zSql, zErr);
    sqlite3_free(zErr);
    sqlite3_free(zSql);
    fail();
  }
  sqlite3_free(zSql);
}

#define QINT(db, ...) qintAt(__LINE__, db, __VA_ARGS__)
static sqlite3_int64 qintAt(int iLine, sqlite3 *db, const char *zFmt, ...){
  va_list ap;
  char *zSql;
  sqlite3_stmt *p = 0;
  sqlite3_int64 v = 0;
  int rc;
  va_start(ap, zFmt);
  zSql = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  rc = sqlite3_prepare_v2(db, zSql, -1, &p, 0);
  if( rc==SQLITE_OK && (rc = sqlite3_step(p))==SQLITE_ROW ){ v = sqlite3_column_int64(p, 0); rc = SQLITE_OK; }
  sqlite3_finalize(p);
  if( rc ){ print_error("line %d: %s -> %s\n", iLine, zSql, sqlite3_errmsg(db)); sqlite3_free(zSql); fail(); }
  sqlite3_free(zSql);
  return v;
}

/* Rows whose text carries canary c: "<canary> #<i> <filler>", n rows of
** about nLen bytes, ids from iFirst. */
static void insertCanary(sqlite3 *db, const char *zTable, int c, int iFirst, int n, int nLen){
  EXEC(db, "WITH RECURSIVE s(i) AS (SELECT %d UNION ALL SELECT i+1 FROM s WHERE i<%d) "
           "INSERT INTO %s(id, a) SELECT i, printf('%%s #%%d %%.*c', %Q, i, %d, char(65 + (i*7) %% 26)) FROM s",
           iFirst, iFirst+n-1, zTable, azCanary[c], nLen);
}

/* Scratch and tde are set up in main (before SQLite starts); here the
** wallet. */
static int groupSetup(void **state){
  (void)state;
  return tdetestWalletMake();
}

static int groupTeardown(void **state){
  (void)state;
  tdetestScratchRemove();
  return 0;
}

static void reportLeaks(const char *zPhase){
  for(int i=0; i<nLeak && i<(int)(sizeof(aLeak)/sizeof(aLeak[0])); i++){
    print_error("LEAK (%s): %s found in %s\n", zPhase, azCanary[aLeak[i].iCanary], aLeak[i].zWhere);
  }
}

/* ---- the tests ------------------------------------------------------------ */

/* The detector itself: a canary written through the spy without tde. */
static void test_positive_control(void **state){
  char zPath[PATH_MAX];
  sqlite3 *db = 0;
  (void)state;
  pathOf(zPath, "control-plain.db");
  printf("# positive control: a canary written without tde is detected\n");
  assert_int_equal(sqlite3_open_v2(zPath, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE, "spy"), SQLITE_OK);
  EXEC(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT)");
  insertCanary(db, "t", C_CONTROL, 1, 10, 50);
  sqlite3_close(db);
  assert_true(nLeak > 0);
  assert_int_equal(aLeak[0].iCanary, C_CONTROL);
  unlink(zPath);
  nLeak = 0;
  memset(aBytes, 0, sizeof(aBytes));
}

static void test_no_plaintext_anywhere(void **state){
  char zMain[PATH_MAX], zJ[PATH_MAX], zP[PATH_MAX], zA[PATH_MAX], zB[PATH_MAX], z[PATH_MAX+16];
  sqlite3 *db, *db2;
  sqlite3_int64 nJournalCopied = 0, nPersistLeft = 0, nBefore;
  long nWal, nShm;
  (void)state;
  pathOf(zMain, "leak-main.db");
  pathOf(zJ, "leak-journal.db");
  pathOf(zP, "leak-persist.db");
  pathOf(zA, "leak-a.db");
  pathOf(zB, "leak-b.db");

  /* 1. Main pages and WAL frames; a second connection keeps the WAL. */
  printf("# main database pages and WAL frames\n");
  db = openTde(zMain);
  EXEC(db, "PRAGMA page_size=1024; PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0");
  EXEC(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT)");
  insertCanary(db, "t", C_MAIN, 1, 2000, 100);
  EXEC(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  insertCanary(db, "t", C_WAL, 10001, 500, 100);
  db2 = openTde(zMain);
  assert_int_equal(QINT(db2, "SELECT count(*) FROM t"), 2500);
  snprintf(z, sizeof(z), "%s-wal", zMain);
  nWal = scanFile(z, "-wal while open");
  assert_true(nWal > 32 + 50*(24+1024));
  snprintf(z, sizeof(z), "%s-shm", zMain);
  nShm = scanFile(z, "-shm while open");
  assert_true(nShm > 0);
  scanFile(zMain, "db while open");
  assert_true(aBytes[K_MAIN] > 2000*100 && aBytes[K_WAL] > 500*100);

  /* 2. Rollback journal (DELETE): copy the -journal while the
  ** transaction is open. */
  printf("# rollback journal, DELETE mode, copied while the transaction is open\n");
  {
    sqlite3 *dj = openTde(zJ);
    size_t n;
    unsigned char *a;
    EXEC(dj, "PRAGMA journal_mode=DELETE");
    EXEC(dj, "CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT)");
    insertCanary(dj, "t", C_JRNL, 1, 1500, 100);
    nBefore = aBytes[K_JOURNAL];
    EXEC(dj, "BEGIN");
    EXEC(dj, "UPDATE t SET a = 'replaced ' || id");
    snprintf(z, sizeof(z), "%s-journal", zJ);
    a = readAll(z, &n);
    assert_non_null(a);
    scan(a, n, "-journal copied while its transaction was open");
    nJournalCopied = (sqlite3_int64)n;
    {
      /* docs/FORMAT.md "Rollback journal": the header sector (512 bytes
      ** here) is sealed -- SQLite's magic and checksum nonce never appear --
      ** and each record is page number || sealed page || checksum field,
      ** where the page number is stored as is and the checksum field is the
      ** first 4 bytes of the record's GCM tag, never SQLite's checksum (a
      ** sum of plaintext bytes). */
      sqlite3_int64 P = QINT(dj, "PRAGMA page_size"), nPage = QINT(dj, "PRAGMA page_count");
      int nRec = 0;
      assert_null(memmem(a, n, "\xd9\xd5\x05\xf9\x20\xa1\x63\xd7", 8));
      for(size_t r=512; r + (size_t)P + 8 <= n; r += (size_t)P + 8){
        uint32_t pgno = ((uint32_t)a[r]<<24) | ((uint32_t)a[r+1]<<16) | ((uint32_t)a[r+2]<<8) | a[r+3];
        assert_true(pgno>=1 && pgno<=(uint32_t)nPage);
        assert_memory_equal(a + r + 4 + P, a + r + 4 + P - 48 + 24, 4);
        nRec++;
      }
      printf("#   -journal: %d records (page %lld bytes); page numbers as is, checksum fields = tag prefixes\n",
             nRec, (long long)P);
      assert_true(nRec >= 30);
      assert_true((n - 512) % (size_t)(P + 8) == 0);
    }
    free(a);
    captureOpenFiles();
    EXEC(dj, "ROLLBACK");
    assert_int_equal(QINT(dj, "SELECT count(*) FROM t WHERE a LIKE 'CANARY-ROLLJRNL-%%'"), 1500);
    sqlite3_close(dj);
    assert_true(nJournalCopied > 1500*100);
    assert_true(aBytes[K_JOURNAL] - nBefore > 1500*100);
  }

  /* 3. PERSIST: the journal stays after commit. */
  printf("# rollback journal, PERSIST mode, leftover file\n");
  {
    sqlite3 *dp = openTde(zP);
    EXEC(dp, "PRAGMA journal_mode=PERSIST");
    EXEC(dp, "CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT)");
    insertCanary(dp, "t", C_PERSIST, 1, 800, 100);
    EXEC(dp, "UPDATE t SET a = 'replaced ' || id");
    sqlite3_close(dp);
    snprintf(z, sizeof(z), "%s-journal", zP);
    nPersistLeft = scanFile(z, "PERSIST journal left after commit");
    assert_true(nPersistLeft > 800*100);
  }

  /* 4. Statement journal: a statement that fails late inside a
  ** transaction, its undo records well over the 64 KiB kept in memory. */
  printf("# statement journal (spilled) and savepoints\n");
  EXEC(db, "PRAGMA temp_store=FILE");
  EXEC(db, "CREATE TABLE s(id INTEGER PRIMARY KEY, u INT UNIQUE, a TEXT)");
  EXEC(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<3000) "
           "INSERT INTO s SELECT i, i, printf('%%s #%%d %%.150c', %Q, i, 'x') FROM c", azCanary[C_STMT]);
  nBefore = aBytes[K_SUBJ];
  EXEC(db, "BEGIN");
  EXEC(db, "UPDATE s SET a = a || '.'");
  EXEC(db, "SAVEPOINT sp");
  EXEC(db, "UPDATE s SET a = upper(a)");
  EXEC(db, "ROLLBACK TO sp");
  assert_int_not_equal(sqlite3_exec(db, "UPDATE s SET a = a || '!', u = CASE WHEN id = 2900 THEN 5 ELSE u END",
                                    0, 0, 0), SQLITE_OK);
  EXEC(db, "RELEASE sp");
  EXEC(db, "COMMIT");
  assert_true(aBytes[K_SUBJ] - nBefore > 65536);
  assert_int_equal(QINT(db, "SELECT count(*) FROM s WHERE a LIKE 'CANARY-STMTJRNL-%%.'"), 3000);

  /* 5. Temp table, spilled out of a 10-page cache. */
  printf("# temp table\n");
  EXEC(db, "PRAGMA temp.cache_size=10");
  nBefore = aBytes[K_TEMPDB];
  EXEC(db, "CREATE TEMP TABLE tt(id INTEGER PRIMARY KEY, a TEXT)");
  insertCanary(db, "temp.tt", C_TEMPTBL, 1, 3000, 200);
  EXEC(db, "BEGIN; UPDATE tt SET a = a || '+'; ROLLBACK");
  captureOpenFiles();
  assert_int_equal(QINT(db, "SELECT count(*) FROM tt WHERE a LIKE 'CANARY-TEMPTABL-%%'"), 3000);
  assert_true(aBytes[K_TEMPDB] - nBefore > 3000*200);

  /* 6. Sorter spill: ORDER BY a non-indexed column over ~4 MB. */
  printf("# sorter spill\n");
  EXEC(db, "CREATE TABLE big(id INTEGER PRIMARY KEY, a TEXT)");
  insertCanary(db, "big", C_SORT, 1, 20000, 200);
  EXEC(db, "PRAGMA cache_size=10");
  nBefore = aBytes[K_TEMPJ];
  {
    sqlite3_stmt *p = 0;
    int nRow = 0, rc;
    char zPrev[400] = "";
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT a FROM big ORDER BY substr(a, 30), id", -1, &p, 0), SQLITE_OK);
    while( (rc = sqlite3_step(p))==SQLITE_ROW ){
      const char *zRow = (const char*)sqlite3_column_text(p, 0);
      assert_non_null(strstr(zRow, azCanary[C_SORT]));
      assert_true(strcmp(zRow+29, zPrev) >= 0 || nRow==0);
      snprintf(zPrev, sizeof(zPrev), "%s", zRow+29);
      nRow++;
    }
    assert_int_equal(rc, SQLITE_DONE);
    sqlite3_finalize(p);
    assert_int_equal(nRow, 20000);
  }
  assert_true(aBytes[K_TEMPJ] - nBefore > 1000000);

  /* 7. Ephemeral tables (DISTINCT, materialized subquery). */
  printf("# ephemeral tables\n");
  EXEC(db, "CREATE TABLE eph(id INTEGER PRIMARY KEY, a TEXT)");
  insertCanary(db, "eph", C_EPHEM, 1, 8000, 300);
  assert_int_equal(QINT(db, "SELECT count(*) FROM (SELECT DISTINCT a FROM eph)"), 8000);
  assert_int_equal(QINT(db, "WITH m AS MATERIALIZED (SELECT a, id FROM eph ORDER BY a) "
                            "SELECT count(*) FROM m WHERE a LIKE 'CANARY-EPHEMERL-%%'"), 8000);

  /* 8. VACUUM (its temp database), in rollback mode so the pages go back
  ** through the main file too. */
  printf("# VACUUM\n");
  EXEC(db, "PRAGMA cache_size=10");     /* VACUUM's temp db spills to its file */
  EXEC(db, "DROP TABLE big");
  EXEC(db, "DROP TABLE eph");
  EXEC(db, "CREATE TABLE v(id INTEGER PRIMARY KEY, a TEXT)");
  insertCanary(db, "v", C_VACUUM, 1, 3000, 150);
  sqlite3_close(db2);
  db2 = 0;
  EXEC(db, "PRAGMA journal_mode=DELETE");
  nBefore = aBytes[K_TEMPDB];
  EXEC(db, "VACUUM");
  assert_true(aBytes[K_TEMPDB] - nBefore > 3000*150);
  assert_int_equal(QINT(db, "SELECT count(*) FROM v WHERE a LIKE 'CANARY-VACUUMDB-%%'"), 3000);

  /* 9. A multi-database commit (super-journal: file names only). */
  printf("# multi-database commit\n");
  {
    sqlite3 *da = openTde(zA);
    EXEC(da, "PRAGMA journal_mode=DELETE");
    EXEC(da, "CREATE TABLE x(id INTEGER PRIMARY KEY, a TEXT)");
    EXEC(da, "ATTACH 'file:%q?vfs=tde&tde_config=%q' AS b", zB, zCfg);
    assert_int_equal(QINT(da, "SELECT tde_reserve('b')"), TDE_RESERVE_BYTES);
    EXEC(da, "CREATE TABLE b.y(id INTEGER PRIMARY KEY, a TEXT)");
    nBefore = aBytes[K_SUPER];
    EXEC(da, "BEGIN");
    insertCanary(da, "main.x", C_SUPER, 1, 200, 100);
    insertCanary(da, "b.y", C_SUPER, 1, 200, 100);
    EXEC(da, "COMMIT");
    assert_true(aBytes[K_SUPER] - nBefore > 0);
    assert_int_equal(QINT(da, "SELECT (SELECT count(*) FROM x) + (SELECT count(*) FROM b.y)"), 400);
    sqlite3_close(da);
  }

  /* Everything reads back after closing and reopening. */
  sqlite3_close(db);
  db = openTde(zMain);
  assert_int_equal(QINT(db, "SELECT count(*) FROM t WHERE a LIKE 'CANARY-MAINPAGE-%%'"), 2000);
  assert_int_equal(QINT(db, "SELECT count(*) FROM t WHERE a LIKE 'CANARY-WALFRAME-%%'"), 500);
  assert_int_equal(QINT(db, "SELECT count(*) FROM v"), 3000);
  assert_int_equal(QINT(db, "SELECT count(*) FROM sqlite_temp_schema"), 0);
  sqlite3_close(db);

  /* Everything left on disk. */
  nftw(zScratch, scanTreeOne, 16, FTW_PHYS);
  nftw(zTmpDir, scanTreeOne, 16, FTW_PHYS);

  printf("# bytes written per kind (seen below tde):");
  for(int k=0; k<K_N; k++) if( aBytes[k] ) printf(" %s %lld;", azKind[k], (long long)aBytes[k]);
  printf("\n# read while open:");
  for(int k=0; k<K_N; k++) if( aCaptured[k] ) printf(" %s x%d;", azKind[k], aCaptured[k]);
  printf(" files in SQLITE_TMPDIR via /proc: %d (%lld bytes); -journal copied: %lld bytes; PERSIST journal left: %lld bytes\n",
         nProcCaptured, (long long)nProcBytes, (long long)nJournalCopied, (long long)nPersistLeft);
  printf("# canary occurrences found: %d\n", nLeak);
  reportLeaks("all paths");
  assert_int_equal(nLeak, 0);

  /* The test proves something only if these paths were really used and
  ** captured while their files were open. */
  assert_true(aCaptured[K_JOURNAL] > 0);
  assert_true(aCaptured[K_SUBJ] + aCaptured[K_TEMPDB] + aCaptured[K_TEMPJ] > 0);
  assert_true(aCaptured[K_TEMPJ] > 0);     /* sorter */
  assert_true(aCaptured[K_TEMPDB] > 0);    /* temp table / VACUUM */
  assert_true(nProcCaptured > 0);
}

/*
** docs/FORMAT.md "Temporary files": a temp file whose first write is a page
** is sealed by page, so with 1 KiB pages the sorter, the temp database and
** VACUUM write about what plain SQLite writes (4 KiB blocks wrote about 3x).
** The same workload through tde and plain SQLite (48 reserved bytes per
** page, both on the spy); bytes written to temp files compared.
*/
static sqlite3_int64 tempBytes(void){
  return aBytes[K_TEMPDB] + aBytes[K_TEMPJ] + aBytes[K_TRANS];
}
static void test_temp_bytes_by_page(void **state){
  sqlite3_int64 anTemp[2] = { 0, 0 };
  (void)state;
  for(int bTde=0; bTde<2; bTde++){
    char zPath[PATH_MAX];
    sqlite3 *db = 0;
    sqlite3_stmt *p = 0;
    sqlite3_int64 nStart;
    int nRow = 0;
    pathOf(zPath, bTde ? "tb-tde.db" : "tb-plain.db");
    if( bTde ){
      db = openTde(zPath);
      EXEC(db, "PRAGMA page_size=1024");
    }else{
      int nReserve = 48;
      assert_int_equal(sqlite3_open_v2(zPath, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE, "spy"), SQLITE_OK);
      EXEC(db, "PRAGMA page_size=1024");
      assert_int_equal(sqlite3_file_control(db, "main", SQLITE_FCNTL_RESERVE_BYTES, &nReserve), SQLITE_OK);
    }
    EXEC(db, "PRAGMA journal_mode=DELETE");
    EXEC(db, "CREATE TABLE big(id INTEGER PRIMARY KEY, a TEXT)");
    EXEC(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<20000) "
             "INSERT INTO big SELECT i, printf('%%08x %%.90c', (i*2654435761) %% 4294967296, char(65 + i %% 26)) FROM c");
    EXEC(db, "PRAGMA cache_size=10; PRAGMA temp_store=FILE; PRAGMA temp.cache_size=10");
    nStart = tempBytes();
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT a FROM big ORDER BY a", -1, &p, 0), SQLITE_OK);
    while( sqlite3_step(p)==SQLITE_ROW ) nRow++;
    assert_int_equal(sqlite3_finalize(p), SQLITE_OK);
    assert_int_equal(nRow, 20000);
    EXEC(db, "CREATE TEMP TABLE tt AS SELECT * FROM big");
    EXEC(db, "VACUUM");
    anTemp[bTde] = tempBytes() - nStart;
    sqlite3_close(db);
  }
  printf("# temp files, page size 1024 (sorter, temp table, VACUUM): plain SQLite %lld bytes, tde %lld (%.3fx)\n",
         (long long)anTemp[0], (long long)anTemp[1], (double)anTemp[1] / (double)anTemp[0]);
  assert_true(anTemp[0] > 2000000);
  assert_true(anTemp[1] <= anTemp[0] + anTemp[0] / 10);
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_positive_control),
    cmocka_unit_test(test_no_plaintext_anywhere),
    cmocka_unit_test(test_temp_bytes_by_page),
  };
  if( tdetestScratchMake("tdeleak") ){ perror("mkdtemp"); return 1; }
  if( realpath(zScratch, zTmpDir)==0 ){ perror("realpath"); return 1; }
  if( snprintf(zScratch, sizeof(zScratch), "%s", zTmpDir) >= (int)sizeof(zScratch) ) return 1;
  if( snprintf(zTmpDir, sizeof(zTmpDir), "%s/sqlite-tmp", zScratch) >= (int)sizeof(zTmpDir) ) return 1;
  if( mkdir(zTmpDir, 0700) ){ perror("mkdir"); return 1; }
  /* Before SQLite initialises: the unix VFS reads it once. */
  setenv("SQLITE_TMPDIR", zTmpDir, 1);
  printf("# scratch %s, SQLITE_TMPDIR %s\n", zScratch, zTmpDir);

  /* The spy goes below tde: register it as the default first. */
  if( sqlite3_initialize() ) return 1;
  pUnix = sqlite3_vfs_find("unix");
  if( !pUnix ) return 1;
  spyVfs.szOsFile = (int)sizeof(SpyFile) + pUnix->szOsFile;
  spyVfs.mxPathname = pUnix->mxPathname;
  if( sqlite3_vfs_register(&spyVfs, 1) ) return 1;
  if( tde_register(0)!=TDE_OK ) return 1;
  return cmocka_run_group_tests_name("leak", tests, groupSetup, groupTeardown);
}
