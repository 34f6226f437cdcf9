/*
** sqlite-tde-bench: the benchmark driver.  One process runs one workload
** once under one condition and prints one JSON object on stdout; the
** orchestrator (bench/run.py, installed next to this program as
** sqlite-tde-bench.py) builds the data sets, copies them per run,
** interleaves the conditions and writes the reports.
**
**   sqlite-tde-bench driver --op build|convert|run|versions --workload W --db PATH
**       [--config CFG | --plain | --keyfile F] [--seconds S] [--seed N]
**       [--rows N] [--scale N] [--threads N] [--journal MODE]
**       [--synchronous MODE] [--page-size N] [--cache-size N] [--rat-rows N]
**       [--txn-rows N] [--min-obs N] [--suite-rows N] [--lat-txns N]
**   sqlite-tde-bench [report options]   runs sqlite-tde-bench.py next to it
**
** Modelled on SQLite's test/speedtest1.c: fixed, printed PRNG seeds, every
** value derived from (seed, row id) so that each condition builds the same
** logical data, and a checksum of everything read, verified against the
** value the generator predicts, so that a fast wrong answer fails the run.
**
** The same source builds the peer drivers (-DBENCH_SQLCIPHER): against
** Debian's libsqlcipher 3 (sqlite-tde-bench-sqlcipher), the SQLCipher 4
** amalgamation (sqlite-tde-bench-sqlcipher4) and the SQLite3 Multiple
** Ciphers amalgamation (sqlite-tde-bench-sqlite3mc, also -DBENCH_SQLITE3MC).
** A peer binary never links the tde library (both export SQLite's symbols).
**
** Every run counts its I/O around the timed part (see "I/O accounting").
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
#include <sys/stat.h>
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
  int nTxnRows;             /* rows of t2: update-all, checkpoint, update-rows, delete-rows */
  int nMinObs;              /* least scans / bounces per run (0: 3 scans, 5 bounces) */
  int64_t nSuiteRows;       /* suite: rows of its tables */
  int nLatTxns;             /* commit-latency: transactions per synchronous setting */
} Opt;

static Opt g = {
  "run", "insert", 0, 0, 0, 2.0, 20261130, 200000, 1, 1, 10000,
  "WAL", "NORMAL", 4096, -2000, 25000, 0, 20000, 1000
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

static void outIo(void);
static void outEnd(void){
  struct rusage ru;
  outIo();
  getrusage(RUSAGE_SELF, &ru);
  outNum("maxrss_kib", (double)ru.ru_maxrss);
  outNum("shared_clean_kib", sharedCleanKib());
  printf("}\n");
  fflush(stdout);
}

/* ---- I/O accounting ------------------------------------------------------- */

/*
** Two views of what a run writes, both taken around the timed part only:
**
** 1. /proc/self/io of the driver process (all threads): wchar/rchar (bytes
**    passed to write/read-family system calls), syscw/syscr (how many such
**    calls) and write_bytes/read_bytes (what reached the block layer; 0 on
**    tmpfs, and write_bytes counts page-cache write-back, which may happen
**    after the run).
**
** 2. A counting VFS ("benchcount") that the driver registers as the default
**    VFS before anything else, so it sits at the bottom of every stack: tde
**    registers over it, SQLCipher's codec sits in the pager above it, and
**    SQLite3 Multiple Ciphers' VFS is created over it.  It counts xRead and
**    xWrite calls and bytes per file kind (database, rollback journal, WAL,
**    sqlite-tde's page map DB-tdemap, temporary files), which the unix VFS
**    turns into one pread/pwrite each.
**
** Why a counting shim and not `strace -c`: strace stops the process at
** every system call, which changes the timing it is supposed to explain, so
** it would need a second, untimed run per observation (twice the run time,
** and a second run that may not do the same work as the timed one when the
** workload is bounded by time).  The shim costs one indirect call and two
** relaxed atomic additions per I/O, the same in every condition, and counts
** exactly the run that is timed.  What it cannot see -- fstat, fsync's
** cost, shm page mapping -- is what /proc/self/io and the time show.
*/
enum { IO_DB, IO_JOURNAL, IO_WAL, IO_TEMP, IO_MAP, IO_NKIND };
static const char *const g_azIoKind[IO_NKIND] = { "db", "journal", "wal", "temp", "map" };
typedef struct IoCounts {
  uint64_t nWrite[IO_NKIND], nWriteByte[IO_NKIND];
  uint64_t nRead[IO_NKIND], nReadByte[IO_NKIND];
  uint64_t nSync;
} IoCounts;
static IoCounts g_cnt;                 /* updated with relaxed atomics */

typedef struct IoSnap {
  IoCounts vfs;
  double aProc[6];                     /* rchar wchar syscr syscw read_bytes write_bytes */
  int bProc;                           /* /proc/self/io was readable */
} IoSnap;
static const char *const g_azProcIo[6] = {
  "rchar", "wchar", "syscr", "syscw", "read_bytes", "write_bytes"
};
static IoSnap g_io0, g_ioDelta;
static int g_bIoDone = 0;              /* g_ioDelta holds the timed part */
static double g_nIoOps = 0;            /* units of work in the timed part */

typedef struct CntFile {
  sqlite3_file base;                   /* first: SQLite's view */
  int iKind;                           /* IO_* */
  /* the real file follows (szOsFile = real + sizeof(CntFile)) */
} CntFile;
#define CNT_REAL(p) ((sqlite3_file*)(((CntFile*)(p)) + 1))
static sqlite3_vfs *g_pCntRoot = 0;    /* the VFS below: unix */

static void cntAdd(uint64_t *p, uint64_t n){ __atomic_fetch_add(p, n, __ATOMIC_RELAXED); }

static int cntClose(sqlite3_file *pFile);
static int cntRead(sqlite3_file *pFile, void *zBuf, int iAmt, sqlite3_int64 iOfst);
static int cntWrite(sqlite3_file *pFile, const void *zBuf, int iAmt, sqlite3_int64 iOfst);
static int cntTruncate(sqlite3_file *pFile, sqlite3_int64 size);
static int cntSync(sqlite3_file *pFile, int flags);
static int cntFileSize(sqlite3_file *pFile, sqlite3_int64 *pSize);
static int cntLock(sqlite3_file *pFile, int eLock);
static int cntUnlock(sqlite3_file *pFile, int eLock);
static int cntCheckReservedLock(sqlite3_file *pFile, int *pResOut);
static int cntFileControl(sqlite3_file *pFile, int op, void *pArg);
static int cntSectorSize(sqlite3_file *pFile);
static int cntDeviceCharacteristics(sqlite3_file *pFile);
static int cntShmMap(sqlite3_file *pFile, int iPg, int pgsz, int bExtend, void volatile **pp);
static int cntShmLock(sqlite3_file *pFile, int offset, int n, int flags);
static void cntShmBarrier(sqlite3_file *pFile);
static int cntShmUnmap(sqlite3_file *pFile, int deleteFlag);
static int cntFetch(sqlite3_file *pFile, sqlite3_int64 iOfst, int iAmt, void **pp);
static int cntUnfetch(sqlite3_file *pFile, sqlite3_int64 iOfst, void *p);

static const sqlite3_io_methods g_cntIo = {
  3,                          /* iVersion */
  cntClose,                   /* xClose */
  cntRead,                    /* xRead */
  cntWrite,                   /* xWrite */
  cntTruncate,                /* xTruncate */
  cntSync,                    /* xSync */
  cntFileSize,                /* xFileSize */
  cntLock,                    /* xLock */
  cntUnlock,                  /* xUnlock */
  cntCheckReservedLock,       /* xCheckReservedLock */
  cntFileControl,             /* xFileControl */
  cntSectorSize,              /* xSectorSize */
  cntDeviceCharacteristics,   /* xDeviceCharacteristics */
  cntShmMap,                  /* xShmMap */
  cntShmLock,                 /* xShmLock */
  cntShmBarrier,              /* xShmBarrier */
  cntShmUnmap,                /* xShmUnmap */
  cntFetch,                   /* xFetch */
  cntUnfetch                  /* xUnfetch */
};

static int cntClose(sqlite3_file *pFile){
  sqlite3_file *r = CNT_REAL(pFile);
  return r->pMethods ? r->pMethods->xClose(r) : SQLITE_OK;
}
static int cntRead(sqlite3_file *pFile, void *zBuf, int iAmt, sqlite3_int64 iOfst){
  CntFile *p = (CntFile*)pFile;
  cntAdd(&g_cnt.nRead[p->iKind], 1);
  cntAdd(&g_cnt.nReadByte[p->iKind], (uint64_t)iAmt);
  return CNT_REAL(pFile)->pMethods->xRead(CNT_REAL(pFile), zBuf, iAmt, iOfst);
}
static int cntWrite(sqlite3_file *pFile, const void *zBuf, int iAmt, sqlite3_int64 iOfst){
  CntFile *p = (CntFile*)pFile;
  cntAdd(&g_cnt.nWrite[p->iKind], 1);
  cntAdd(&g_cnt.nWriteByte[p->iKind], (uint64_t)iAmt);
  return CNT_REAL(pFile)->pMethods->xWrite(CNT_REAL(pFile), zBuf, iAmt, iOfst);
}
static int cntTruncate(sqlite3_file *pFile, sqlite3_int64 size){
  return CNT_REAL(pFile)->pMethods->xTruncate(CNT_REAL(pFile), size);
}
static int cntSync(sqlite3_file *pFile, int flags){
  cntAdd(&g_cnt.nSync, 1);
  return CNT_REAL(pFile)->pMethods->xSync(CNT_REAL(pFile), flags);
}
static int cntFileSize(sqlite3_file *pFile, sqlite3_int64 *pSize){
  return CNT_REAL(pFile)->pMethods->xFileSize(CNT_REAL(pFile), pSize);
}
static int cntLock(sqlite3_file *pFile, int eLock){
  return CNT_REAL(pFile)->pMethods->xLock(CNT_REAL(pFile), eLock);
}
static int cntUnlock(sqlite3_file *pFile, int eLock){
  return CNT_REAL(pFile)->pMethods->xUnlock(CNT_REAL(pFile), eLock);
}
static int cntCheckReservedLock(sqlite3_file *pFile, int *pResOut){
  return CNT_REAL(pFile)->pMethods->xCheckReservedLock(CNT_REAL(pFile), pResOut);
}
static int cntFileControl(sqlite3_file *pFile, int op, void *pArg){
  return CNT_REAL(pFile)->pMethods->xFileControl(CNT_REAL(pFile), op, pArg);
}
static int cntSectorSize(sqlite3_file *pFile){
  return CNT_REAL(pFile)->pMethods->xSectorSize(CNT_REAL(pFile));
}
static int cntDeviceCharacteristics(sqlite3_file *pFile){
  return CNT_REAL(pFile)->pMethods->xDeviceCharacteristics(CNT_REAL(pFile));
}
static int cntShmMap(sqlite3_file *pFile, int iPg, int pgsz, int bExtend, void volatile **pp){
  sqlite3_file *r = CNT_REAL(pFile);
  if( r->pMethods->iVersion<2 || !r->pMethods->xShmMap ) return SQLITE_IOERR_SHMMAP;
  return r->pMethods->xShmMap(r, iPg, pgsz, bExtend, pp);
}
static int cntShmLock(sqlite3_file *pFile, int offset, int n, int flags){
  return CNT_REAL(pFile)->pMethods->xShmLock(CNT_REAL(pFile), offset, n, flags);
}
static void cntShmBarrier(sqlite3_file *pFile){
  CNT_REAL(pFile)->pMethods->xShmBarrier(CNT_REAL(pFile));
}
static int cntShmUnmap(sqlite3_file *pFile, int deleteFlag){
  sqlite3_file *r = CNT_REAL(pFile);
  if( r->pMethods->iVersion<2 || !r->pMethods->xShmUnmap ) return SQLITE_OK;
  return r->pMethods->xShmUnmap(r, deleteFlag);
}
static int cntFetch(sqlite3_file *pFile, sqlite3_int64 iOfst, int iAmt, void **pp){
  sqlite3_file *r = CNT_REAL(pFile);
  if( r->pMethods->iVersion<3 || !r->pMethods->xFetch ){ *pp = 0; return SQLITE_OK; }
  return r->pMethods->xFetch(r, iOfst, iAmt, pp);
}
static int cntUnfetch(sqlite3_file *pFile, sqlite3_int64 iOfst, void *p){
  sqlite3_file *r = CNT_REAL(pFile);
  if( r->pMethods->iVersion<3 || !r->pMethods->xUnfetch ) return SQLITE_OK;
  return r->pMethods->xUnfetch(r, iOfst, p);
}

/* DB-tdemap, sqlite-tde's page map (docs/FORMAT.md): the shim opens it
** with SQLITE_OPEN_MAIN_JOURNAL, so only its name tells it from a rollback
** journal, whose bytes it must not inflate (in WAL mode there is none). */
static int isMapFile(const char *zName){
  size_t n = zName ? strlen(zName) : 0;
  return n>=7 && strcmp(zName + n - 7, "-tdemap")==0;
}
static int cntOpen(sqlite3_vfs *pVfs, const char *zName, sqlite3_file *pFile, int flags, int *pOutFlags){
  CntFile *p = (CntFile*)pFile;
  sqlite3_file *r = CNT_REAL(pFile);
  int rc;
  (void)pVfs;
  if( isMapFile(zName) ) p->iKind = IO_MAP;
  else if( flags & SQLITE_OPEN_MAIN_DB ) p->iKind = IO_DB;
  /* 0x4000: SQLITE_OPEN_SUPER_JOURNAL (MASTER_JOURNAL in SQLCipher 3's headers) */
  else if( flags & (SQLITE_OPEN_MAIN_JOURNAL|0x00004000) ) p->iKind = IO_JOURNAL;
  else if( flags & SQLITE_OPEN_WAL ) p->iKind = IO_WAL;
  else p->iKind = IO_TEMP;     /* temp db and journal, transient db, statement journal */
  memset(r, 0, (size_t)g_pCntRoot->szOsFile);
  rc = g_pCntRoot->xOpen(g_pCntRoot, zName, r, flags, pOutFlags);
  p->base.pMethods = r->pMethods ? &g_cntIo : 0;
  return rc;
}
static int cntDelete(sqlite3_vfs *v, const char *z, int s){ (void)v; return g_pCntRoot->xDelete(g_pCntRoot, z, s); }
static int cntAccess(sqlite3_vfs *v, const char *z, int f, int *o){ (void)v; return g_pCntRoot->xAccess(g_pCntRoot, z, f, o); }
static int cntFullPathname(sqlite3_vfs *v, const char *z, int n, char *o){ (void)v; return g_pCntRoot->xFullPathname(g_pCntRoot, z, n, o); }
static void *cntDlOpen(sqlite3_vfs *v, const char *z){ (void)v; return g_pCntRoot->xDlOpen(g_pCntRoot, z); }
static void cntDlError(sqlite3_vfs *v, int n, char *z){ (void)v; g_pCntRoot->xDlError(g_pCntRoot, n, z); }
static void (*cntDlSym(sqlite3_vfs *v, void *p, const char *z))(void){ (void)v; return g_pCntRoot->xDlSym(g_pCntRoot, p, z); }
static void cntDlClose(sqlite3_vfs *v, void *p){ (void)v; g_pCntRoot->xDlClose(g_pCntRoot, p); }
static int cntRandomness(sqlite3_vfs *v, int n, char *z){ (void)v; return g_pCntRoot->xRandomness(g_pCntRoot, n, z); }
static int cntSleep(sqlite3_vfs *v, int n){ (void)v; return g_pCntRoot->xSleep(g_pCntRoot, n); }
static int cntCurrentTime(sqlite3_vfs *v, double *p){ (void)v; return g_pCntRoot->xCurrentTime(g_pCntRoot, p); }
static int cntGetLastError(sqlite3_vfs *v, int n, char *z){ (void)v; return g_pCntRoot->xGetLastError(g_pCntRoot, n, z); }
static int cntCurrentTimeInt64(sqlite3_vfs *v, sqlite3_int64 *p){ (void)v; return g_pCntRoot->xCurrentTimeInt64(g_pCntRoot, p); }

static sqlite3_vfs g_cntVfs = {
  2, 0, 0, 0, "benchcount", 0,
  cntOpen, cntDelete, cntAccess, cntFullPathname,
  cntDlOpen, cntDlError, cntDlSym, cntDlClose,
  cntRandomness, cntSleep, cntCurrentTime, cntGetLastError,
  cntCurrentTimeInt64, 0, 0, 0
};

/* Register the counting VFS over the current default (unix), as the new
** default when makeDefault. */
static void cntRegister(int makeDefault){
  int rc;
  /* "unix" by name: SQLite3 Multiple Ciphers makes its own VFS the
  ** default at initialisation, and the counter must sit below it. */
  g_pCntRoot = sqlite3_vfs_find("unix");
  if( !g_pCntRoot ) die("no unix VFS");
  g_cntVfs.szOsFile = (int)sizeof(CntFile) + g_pCntRoot->szOsFile;
  g_cntVfs.mxPathname = g_pCntRoot->mxPathname;
  rc = sqlite3_vfs_register(&g_cntVfs, makeDefault);
  if( rc!=SQLITE_OK ) die("registering the counting VFS: %s", sqlite3_errstr(rc));
}

static void ioSnap(IoSnap *p){
  FILE *f = fopen("/proc/self/io", "r");
  char zLine[128];
  int k;
  memset(p, 0, sizeof(*p));
  for(k=0; k<IO_NKIND; k++){
    p->vfs.nWrite[k] = __atomic_load_n(&g_cnt.nWrite[k], __ATOMIC_RELAXED);
    p->vfs.nWriteByte[k] = __atomic_load_n(&g_cnt.nWriteByte[k], __ATOMIC_RELAXED);
    p->vfs.nRead[k] = __atomic_load_n(&g_cnt.nRead[k], __ATOMIC_RELAXED);
    p->vfs.nReadByte[k] = __atomic_load_n(&g_cnt.nReadByte[k], __ATOMIC_RELAXED);
  }
  p->vfs.nSync = __atomic_load_n(&g_cnt.nSync, __ATOMIC_RELAXED);
  if( !f ) return;
  while( fgets(zLine, sizeof(zLine), f) ){
    for(k=0; k<6; k++){
      size_t n = strlen(g_azProcIo[k]);
      if( strncmp(zLine, g_azProcIo[k], n)==0 && zLine[n]==':' ){
        p->aProc[k] = strtod(zLine + n + 1, 0);
        p->bProc = 1;
      }
    }
  }
  fclose(f);
}
/* Start of the timed part. */
static void ioStart(void){ ioSnap(&g_io0); }
/* End of the timed part: nOps units of work were done in it (rows,
** transactions, scans, observations), so that time-bounded workloads can
** be compared per unit of work. */
static void ioStop(double nOps){
  IoSnap s;
  int k;
  ioSnap(&s);
  for(k=0; k<IO_NKIND; k++){
    g_ioDelta.vfs.nWrite[k] = s.vfs.nWrite[k] - g_io0.vfs.nWrite[k];
    g_ioDelta.vfs.nWriteByte[k] = s.vfs.nWriteByte[k] - g_io0.vfs.nWriteByte[k];
    g_ioDelta.vfs.nRead[k] = s.vfs.nRead[k] - g_io0.vfs.nRead[k];
    g_ioDelta.vfs.nReadByte[k] = s.vfs.nReadByte[k] - g_io0.vfs.nReadByte[k];
  }
  g_ioDelta.vfs.nSync = s.vfs.nSync - g_io0.vfs.nSync;
  for(k=0; k<6; k++) g_ioDelta.aProc[k] = s.aProc[k] - g_io0.aProc[k];
  g_ioDelta.bProc = s.bProc && g_io0.bProc;
  g_nIoOps = nOps;
  g_bIoDone = 1;
}

/* The timed part's I/O in the run's JSON object (nothing when the
** workload did not call ioStop). */
static void outIo(void){
  uint64_t nW = 0, nWB = 0, nR = 0, nRB = 0;
  char zKey[64];
  int k;
  if( !g_bIoDone ) return;
  for(k=0; k<IO_NKIND; k++){
    nW += g_ioDelta.vfs.nWrite[k]; nWB += g_ioDelta.vfs.nWriteByte[k];
    nR += g_ioDelta.vfs.nRead[k]; nRB += g_ioDelta.vfs.nReadByte[k];
    snprintf(zKey, sizeof(zKey), "vfs_%s_writes", g_azIoKind[k]);
    outNum(zKey, (double)g_ioDelta.vfs.nWrite[k]);
    snprintf(zKey, sizeof(zKey), "vfs_%s_write_bytes", g_azIoKind[k]);
    outNum(zKey, (double)g_ioDelta.vfs.nWriteByte[k]);
    snprintf(zKey, sizeof(zKey), "vfs_%s_reads", g_azIoKind[k]);
    outNum(zKey, (double)g_ioDelta.vfs.nRead[k]);
  }
  outNum("vfs_writes", (double)nW);
  outNum("vfs_write_bytes", (double)nWB);
  outNum("vfs_reads", (double)nR);
  outNum("vfs_read_bytes", (double)nRB);
  outNum("vfs_syncs", (double)g_ioDelta.vfs.nSync);
  for(k=0; k<6; k++){
    snprintf(zKey, sizeof(zKey), "io_%s", g_azProcIo[k]);
    outNum(zKey, g_ioDelta.bProc ? g_ioDelta.aProc[k] : -1.0);
  }
  outNum("io_ops", g_nIoOps);
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
#if defined(BENCH_SQLCIPHER) && !defined(BENCH_SQLITE3MC)
  /* SQLCipher ties the page size to its cipher page size (default 1024 in
  ** 3.x, 4096 in 4.x): set it on every open, or the file does not decode. */
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
  snprintf(z, sizeof(z), "%s-tdemap", zDb); dropOsCache(z);   /* sqlite-tde's page map */
}

#define T2_BASE 1000000000000LL   /* t2 row id uses generator id T2_BASE + id */

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
           "CREATE TABLE pgbench_history(tid INTEGER, bid INTEGER, aid INTEGER, delta INTEGER, mtime INTEGER, filler TEXT);"
           "CREATE TABLE t2(id INTEGER PRIMARY KEY, a INTEGER NOT NULL, b TEXT NOT NULL);");
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
  /* t2: the table of the update and delete workloads */
  p = prep(db, "INSERT INTO t2(id,a,b) VALUES(?,?,?)");
  for(id=1; id<=g.nTxnRows; id++){
    char z[101];
    valB(T2_BASE + id, z);
    sqlite3_bind_int64(p, 1, id);
    sqlite3_bind_int64(p, 2, valA(T2_BASE + id));
    sqlite3_bind_text(p, 3, z, 100, SQLITE_TRANSIENT);
    stepDone(db, p, "insert t2");
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

/* Switch a built data set (a copy) to --journal: the orchestrator builds
** each data set once in rollback mode and converts a copy for WAL. */
static void convertDataSet(void){
  sqlite3 *db = openDb(g.zDb, 0);
  (void)one(db, "SELECT count(*) FROM t1");
  if( sqlite3_stricmp(g.zJournal, "WAL")==0 ) exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  check(db, sqlite3_close(db), "close");
  outBegin();
  outStr("op", "convert");
  outStr("journal", g.zJournal);
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
  double t0, t, tEnd;
  ioStart();
  t0 = now();
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
  ioStop((double)nDone);
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
  double t0, tA, t, tEnd;
  if( g.nRows < 1000 ) die("delete-replenish needs --rows >= 1000");
  ioStart();
  t0 = now();
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
  ioStop((double)nDone);
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
  ioStart();
  t0 = now();
  do{
    samplesAdd(&s, scanOnce(bCold, &sum, &nRow));
    if( sum!=sumExp || nRow!=g.nRows ) die("scan: checksum mismatch (%lld rows)", (long long)nRow);
  }while( now() - t0 < g.rSeconds || s.n < (size_t)(g.nMinObs ? g.nMinObs : 3) );
  ioStop((double)s.n);
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
  ioStart();
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
  }while( (now() - t0 < g.rSeconds || s.n < (size_t)(g.nMinObs ? g.nMinObs : 5)) && s.n < 500 );
  ioStop((double)s.n);
  outBegin();
  outNum("bounce_ms", pct(&s, 0.5));
  outNum("bounce_ms_min", pct(&s, 0.0));
  outNum("observations", (double)s.n);
  outU64("checksum", sum);
  outSamples("bounce_obs_ms", &s, 500);
  outEnd();
}

/* row-at-a-time (the Oracle column-encryption test): nRatRows single-row inserts, then as many
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
  ioStart();
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
  ioStop(2.0 * g.nRatRows);
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
  /* at least one transaction per thread, however late the thread starts
  ** (a loaded machine can hold it past the stop time): a run never reports
  ** 0 tps */
  do{
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
  }while( now() < g_tStop );
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
  ioStart();
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
  ioStop((double)nTx);
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

/* ---- write-heavy workloads on t2 and the whole file -------------------------- */

/* t2 row id holds valA(T2_BASE + id), valB(T2_BASE + id): its own values,
** from the same generator as t1. */

/* The checksum t2 row id must give after a workload added da to a and,
** when bRot, rotated b left by one character. */
static uint64_t expectedT2(int64_t id, int64_t da, int bRot){
  char z[101], r[101];
  valB(T2_BASE + id, z);
  if( bRot ){
    memcpy(r, z + 1, 99);
    r[99] = z[0];
    r[100] = 0;
    memcpy(z, r, sizeof(z));
  }
  return rowHash(id, valA(T2_BASE + id) + da, z, 100);
}

/* Sum of row hashes of table zTab (t1 or t2) and its row count. */
static uint64_t sumTable(sqlite3 *db, const char *zTab, int64_t *pnRow){
  char zSql[64];
  sqlite3_stmt *p;
  uint64_t sum = 0;
  snprintf(zSql, sizeof(zSql), "SELECT id,a,b FROM %s", zTab);
  p = prep(db, zSql);
  *pnRow = 0;
  while( sqlite3_step(p)==SQLITE_ROW ){
    sum += rowHash(sqlite3_column_int64(p, 0), sqlite3_column_int64(p, 1),
                   (const char*)sqlite3_column_text(p, 2), (size_t)sqlite3_column_bytes(p, 2));
    (*pnRow)++;
  }
  check(db, sqlite3_finalize(p), zSql);
  return sum;
}

/* Verify t2 against what the workload should have left; die otherwise. */
static uint64_t checkT2(sqlite3 *db, int64_t da, int bRot, const char *zWho){
  int64_t n = 0, id;
  uint64_t got = sumTable(db, "t2", &n), want = 0;
  for(id=1; id<=g.nTxnRows; id++) want += expectedT2(id, da, bRot);
  if( n!=g.nTxnRows || got!=want ){
    die("%s: checksum mismatch in t2 (%lld rows, %016llx != %016llx)", zWho, (long long)n,
        (unsigned long long)got, (unsigned long long)want);
  }
  return got;
}

/* The ids 1..nTxnRows in an order shuffled with the seed (Fisher-Yates). */
static int64_t *shuffledIds(uint64_t iSalt){
  int64_t *a = malloc(sizeof(int64_t) * (size_t)g.nTxnRows);
  Rng rng = { g.iSeed ^ iSalt };
  int64_t i;
  if( !a ) die("out of memory");
  for(i=0; i<g.nTxnRows; i++) a[i] = i + 1;
  for(i=g.nTxnRows-1; i>0; i--){
    int64_t j = (int64_t)(rngNext(&rng) % (uint64_t)(i + 1)), t = a[i];
    a[i] = a[j]; a[j] = t;
  }
  return a;
}

/* vacuum: VACUUM of the whole data set (t1, its index, t2 and the pgbench
** tables: about 50 MB at the default sizes); afterwards t1 and t2 must
** hold exactly what was built and PRAGMA quick_check must say ok. */
static void wVacuum(void){
  sqlite3 *db = openDb(g.zDb, 0);
  int64_t nPage = one(db, "PRAGMA page_count"), nPgsz = one(db, "PRAGMA page_size");
  int64_t n = 0, id;
  uint64_t sum1, sum1Exp = 0, sum2;
  double t0, t1;
  sqlite3_stmt *p;
  ioStart();
  t0 = now();
  exec(db, "VACUUM");
  t1 = now();
  ioStop(1);
  sum1 = sumTable(db, "t1", &n);
  for(id=1; id<=g.nRows; id++) sum1Exp += expectedRow(id);
  if( n!=g.nRows || sum1!=sum1Exp ) die("vacuum: checksum mismatch in t1");
  sum2 = checkT2(db, 0, 0, "vacuum");
  p = prep(db, "PRAGMA quick_check");
  if( sqlite3_step(p)!=SQLITE_ROW || strcmp((const char*)sqlite3_column_text(p, 0), "ok")!=0 ){
    die("vacuum: quick_check: %s", sqlite3_column_text(p, 0) ? (const char*)sqlite3_column_text(p, 0) : sqlite3_errmsg(db));
  }
  check(db, sqlite3_finalize(p), "quick_check");
  check(db, sqlite3_close(db), "close");
  outBegin();
  outNum("vacuum_s", t1 - t0);
  outNum("db_mb", (double)(nPage * nPgsz) / 1e6);
  outNum("mb_per_s", (double)(nPage * nPgsz) / 1e6 / (t1 - t0));
  outU64("checksum", sum1 ^ sum2);
  outEnd();
}

/* update-all: one UPDATE of every row of t2 (a+1, b rotated), one
** transaction. */
static void wUpdateAll(void){
  sqlite3 *db = openDb(g.zDb, 0);
  double t0, t1;
  uint64_t sum;
  int nChange;
  (void)one(db, "SELECT count(*) FROM sqlite_master");
  ioStart();
  t0 = now();
  exec(db, "UPDATE t2 SET a=a+1, b=substr(b,2)||substr(b,1,1)");
  nChange = sqlite3_changes(db);
  t1 = now();
  ioStop((double)g.nTxnRows);
  if( nChange!=g.nTxnRows ) die("update-all: %d rows changed, not %d", nChange, g.nTxnRows);
  sum = checkT2(db, 1, 1, "update-all");
  check(db, sqlite3_close(db), "close");
  outBegin();
  outNum("update_s", t1 - t0);
  outNum("rows", (double)g.nTxnRows);
  outU64("checksum", sum);
  outEnd();
}

/* The WAL hook of the checkpoint workload: records how many frames the
** log holds after each commit and checkpoints nothing (it replaces the
** automatic checkpoint, which wal_autocheckpoint=0 has already turned off). */
static int walFrames(void *pArg, sqlite3 *db, const char *zDbName, int nFrame){
  (void)db; (void)zDbName;
  *(int*)pArg = nFrame;
  return SQLITE_OK;
}

/* checkpoint (WAL mode only): with automatic checkpoints off, one UPDATE
** of every row of t2 as update-all does (untimed) leaves about all of t2's
** pages in the WAL; the timed part is PRAGMA wal_checkpoint(TRUNCATE): it
** copies every frame into the database, syncs it and truncates the WAL --
** the end of a WAL generation, where sqlite-tde folds its page map into
** DB-tdemap (docs/FORMAT.md, "Page rollback: the page map").  Afterwards
** the result row must say not busy with every frame checkpointed, the WAL
** must be empty, and t2, read back by a new connection (from the database
** file, not this connection's cache), must hold what update-all leaves. */
static void wCheckpoint(void){
  sqlite3 *db;
  sqlite3_stmt *p;
  char zWal[PATH_MAX + 8];
  struct stat st;
  int64_t nPgsz, nLog, nCkpt, bBusy;
  int nFrame = 0, nChange, rc;
  double t0, t1;
  uint64_t sum;
  if( sqlite3_stricmp(g.zJournal, "WAL")!=0 ) die("checkpoint: WAL mode only (--journal WAL)");
  db = openDb(g.zDb, 0);
  exec(db, "PRAGMA wal_autocheckpoint=0");
  sqlite3_wal_hook(db, walFrames, &nFrame);
  nPgsz = one(db, "PRAGMA page_size");
  exec(db, "UPDATE t2 SET a=a+1, b=substr(b,2)||substr(b,1,1)");
  nChange = sqlite3_changes(db);
  if( nChange!=g.nTxnRows ) die("checkpoint: %d rows changed, not %d", nChange, g.nTxnRows);
  if( nFrame<=0 ) die("checkpoint: the UPDATE left no frame in the WAL");
  p = prep(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  ioStart();
  t0 = now();
  rc = sqlite3_step(p);
  t1 = now();
  ioStop(1);
  if( rc!=SQLITE_ROW ) die("checkpoint: wal_checkpoint(TRUNCATE): %s", sqlite3_errmsg(db));
  bBusy = sqlite3_column_int64(p, 0);
  nLog = sqlite3_column_int64(p, 1);
  nCkpt = sqlite3_column_int64(p, 2);
  check(db, sqlite3_finalize(p), "wal_checkpoint(TRUNCATE)");
  if( bBusy!=0 || nLog!=nCkpt ){
    die("checkpoint: wal_checkpoint(TRUNCATE) returned busy=%lld log=%lld checkpointed=%lld",
        (long long)bBusy, (long long)nLog, (long long)nCkpt);
  }
  snprintf(zWal, sizeof(zWal), "%s-wal", g.zDb);
  if( stat(zWal, &st)==0 && st.st_size!=0 ){
    die("checkpoint: %s holds %lld bytes after wal_checkpoint(TRUNCATE)", zWal, (long long)st.st_size);
  }
  check(db, sqlite3_close(db), "close");
  db = openDb(g.zDb, 0);
  sum = checkT2(db, 1, 1, "checkpoint");
  check(db, sqlite3_close(db), "close");
  outBegin();
  outNum("checkpoint_s", t1 - t0);
  outNum("frames", nFrame);
  outNum("wal_mb", (double)nFrame * (double)nPgsz / 1e6);
  outNum("mb_per_s", (double)nFrame * (double)nPgsz / 1e6 / (t1 - t0));
  outU64("checksum", sum);
  outEnd();
}

/* update-rows / delete-rows: single-row statements on t2 by primary key
** in a shuffled order, each in its own (autocommit) transaction, until all
** nTxnRows rows are done or --seconds have passed (each transaction syncs:
** 25,000 of them take minutes on a slow disk).  Afterwards exactly the
** rows done must show the change and no other row. */
static void wRowTxns(int bDelete){
  sqlite3 *db = openDb(g.zDb, 0);
  sqlite3_stmt *p = prep(db, bDelete ? "DELETE FROM t2 WHERE id=?" : "UPDATE t2 SET a=a+1 WHERE id=?");
  int64_t *aId = shuffledIds(bDelete ? 0xde1e7eULL : 0x0dda7eULL);
  const char *zWho = bDelete ? "delete-rows" : "update-rows";
  Samples lat = {0};
  uint64_t sum = 0xcbf29ce484222325ULL;
  double t0, t1, t;
  int64_t i, nDone;
  (void)one(db, "SELECT count(*) FROM sqlite_master");
  ioStart();
  t0 = now();
  for(nDone=0; nDone<g.nTxnRows && (nDone==0 || now() - t0 < g.rSeconds); nDone++){
    t = now();
    sqlite3_bind_int64(p, 1, aId[nDone]);
    stepDone(db, p, zWho);
    if( sqlite3_changes(db)!=1 ){
      die("%s: id %lld: %d rows changed", zWho, (long long)aId[nDone], sqlite3_changes(db));
    }
    samplesAdd(&lat, (now() - t) * 1000);
  }
  t1 = now();
  ioStop((double)nDone);
  check(db, sqlite3_finalize(p), zWho);
  {
    /* what t2 must hold now: the rows done changed (or gone), the rest as built */
    char *aDone = calloc((size_t)g.nTxnRows + 1, 1);
    int64_t nRow = 0, nWant = 0;
    uint64_t got, want = 0;
    if( !aDone ) die("out of memory");
    for(i=0; i<nDone; i++) aDone[aId[i]] = 1;
    for(i=1; i<=g.nTxnRows; i++){
      if( bDelete && aDone[i] ) continue;
      want += expectedT2(i, aDone[i] ? 1 : 0, 0);
      nWant++;
    }
    got = sumTable(db, "t2", &nRow);
    free(aDone);
    if( nRow!=nWant || got!=want ) die("%s: checksum mismatch in t2 (%lld rows, %lld expected)",
                                       zWho, (long long)nRow, (long long)nWant);
    sum = got;
  }
  free(aId);
  check(db, sqlite3_close(db), "close");
  outBegin();
  outNum("rows_per_s", (double)nDone / (t1 - t0));
  outNum("rows", (double)nDone);
  outNum("elapsed_s", t1 - t0);
  outNum("txn_ms_p50", pct(&lat, 0.5));
  outNum("txn_ms_p99", pct(&lat, 0.99));
  outU64("checksum", sum);
  outEnd();
  free(lat.a);
}

/* delete-spill: single-row DELETEs from t2 by key in a shuffled order,
** half of its rows, all in ONE transaction with cache_size=100 pages (less
** than the transaction touches at the default sizes): SQLite spills dirty
** pages to the log (WAL) or the database file (rollback journal) and
** reads them back, each page many times, as SQLite's own speedtest1 does
** with its 25,000 DELETEs in one transaction.  Timed: BEGIN, the DELETEs,
** a read of all of t2 inside the transaction (the rows left, most pages
** read back from what was spilled), COMMIT.  The read must sum to the
** rows not deleted, and so must t2 after the commit. */
static void wDeleteSpill(void){
  sqlite3 *db = openDb(g.zDb, 0);
  sqlite3_stmt *p = prep(db, "DELETE FROM t2 WHERE id=?");
  int64_t *aId = shuffledIds(0x5b111eULL);
  int64_t nDel = (g.nTxnRows + 1) / 2, i, nRow = 0, nWant = 0;
  char *aDone = calloc((size_t)g.nTxnRows + 1, 1);
  uint64_t inTxn, got, want = 0;
  double t0, t1;
  if( !aDone ) die("out of memory");
  exec(db, "PRAGMA cache_size=100");
  (void)one(db, "SELECT count(*) FROM sqlite_master");
  ioStart();
  t0 = now();
  exec(db, "BEGIN");
  for(i=0; i<nDel; i++){
    sqlite3_bind_int64(p, 1, aId[i]);
    stepDone(db, p, "delete-spill");
    if( sqlite3_changes(db)!=1 ){
      die("delete-spill: id %lld: %d rows changed", (long long)aId[i], sqlite3_changes(db));
    }
    aDone[aId[i]] = 1;
  }
  inTxn = sumTable(db, "t2", &nRow);
  exec(db, "COMMIT");
  t1 = now();
  ioStop((double)nDel);
  check(db, sqlite3_finalize(p), "delete-spill");
  for(i=1; i<=g.nTxnRows; i++){
    if( aDone[i] ) continue;
    want += expectedT2(i, 0, 0);
    nWant++;
  }
  if( nRow!=nWant || inTxn!=want ){
    die("delete-spill: checksum mismatch in t2 inside the transaction (%lld rows, %lld expected)",
        (long long)nRow, (long long)nWant);
  }
  got = sumTable(db, "t2", &nRow);
  if( nRow!=nWant || got!=want ){
    die("delete-spill: checksum mismatch in t2 after the commit (%lld rows, %lld expected)",
        (long long)nRow, (long long)nWant);
  }
  free(aDone);
  free(aId);
  check(db, sqlite3_close(db), "close");
  outBegin();
  outNum("rows_per_s", (double)nDel / (t1 - t0));
  outNum("rows", (double)nDel);
  outNum("txn_s", t1 - t0);
  outU64("checksum", got);
  outEnd();
}

/* ---- the broad SQL suite ------------------------------------------------------- */

/*
** suite: many small tests over one data set of --suite-rows rows, in the
** spirit of SQLite's test/speedtest1.c but the kit's own tests, so that a
** regression confined to one kind of statement (the quadratic re-scan of
** a transaction's own spilled WAL frames was one) shows as one test's
** ratio instead of vanishing in a few headline workloads.  The tests run
** in order in a database of their own next to --db (<db>-suite.db, created
** by the first test and removed at the end), with the run's journal mode,
** synchronous and cache_size.  Per test: wall time, bytes the counting VFS
** saw written (every file kind), syncs, the pages SQLite spilled from its
** cache inside a transaction (SQLITE_DBSTATUS_CACHE_SPILL), and a checksum of everything the
** test's statements returned; the checksums depend on the seed and the
** size only, so every condition must report the same ones.  Only SQL that
** SQLite 3.15 (the old SQLCipher peer) knows.
*/

typedef struct SuiteCtx {
  sqlite3 *db;
  int64_t n;                           /* --suite-rows */
  uint64_t h;                          /* the running test's checksum */
} SuiteCtx;

/* A word of 4 to 11 lower-case letters for value v: text keys and text
** columns that sort differently from the numbers they came from. */
static int suiteWord(uint64_t v, char *z){
  uint64_t x = splitmix(g.iSeed ^ (v * 0x2545f4914f6cdd1dULL));
  int i, n = 4 + (int)(x % 8);
  for(i=0; i<n; i++){
    x = splitmix(x);
    z[i] = (char)('a' + x % 26);
  }
  z[n] = 0;
  return n;
}
/* A permutation of 1..n (the "unordered" key order), fixed by the seed. */
static int64_t suitePerm(int64_t i, int64_t n){
  /* i*p mod n for p prime to n, offset: a bijection of 0..n-1 */
  int64_t p = 7919, a, b, t;
  for(;;){                             /* p prime to n */
    for(a=p, b=n; b; t=a%b, a=b, b=t){}
    if( a==1 ) break;
    p += 2;
  }
  return ((i - 1) * p + (int64_t)(g.iSeed % (uint64_t)n)) % n + 1;
}
static void suiteFold(SuiteCtx *p, sqlite3_stmt *pStmt){
  int i, nCol = sqlite3_column_count(pStmt);
  for(i=0; i<nCol; i++){
    switch( sqlite3_column_type(pStmt, i) ){
      case SQLITE_INTEGER: {
        int64_t v = sqlite3_column_int64(pStmt, i);
        p->h = fnv(p->h, &v, sizeof(v));
        break;
      }
      case SQLITE_NULL: p->h = fnv(p->h, "N", 1); break;
      default: {
        const unsigned char *z = sqlite3_column_text(pStmt, i);
        p->h = fnv(p->h, z, (size_t)sqlite3_column_bytes(pStmt, i));
        break;
      }
    }
  }
}
/* Run zSql (one statement) and fold every row it returns into the checksum. */
static void suiteQuery(SuiteCtx *p, const char *zSql){
  sqlite3_stmt *pStmt = prep(p->db, zSql);
  int rc;
  while( (rc = sqlite3_step(pStmt))==SQLITE_ROW ) suiteFold(p, pStmt);
  if( rc!=SQLITE_DONE ) die("suite: %s: %s", zSql, sqlite3_errmsg(p->db));
  check(p->db, sqlite3_finalize(pStmt), zSql);
}
/* Run zSql and fold the number of rows it changed. */
static void suiteExec(SuiteCtx *p, const char *zSql){
  int64_t n;
  exec(p->db, zSql);
  n = sqlite3_changes(p->db);
  p->h = fnv(p->h, &n, sizeof(n));
}
/* Step a prepared statement with one integer parameter (or a text one
** when zText), fold its rows and its change count. */
static void suiteStep(SuiteCtx *p, sqlite3_stmt *pStmt, int64_t v, const char *zText){
  int rc;
  int64_t n;
  if( zText ) sqlite3_bind_text(pStmt, 1, zText, -1, SQLITE_TRANSIENT);
  else sqlite3_bind_int64(pStmt, 1, v);
  while( (rc = sqlite3_step(pStmt))==SQLITE_ROW ) suiteFold(p, pStmt);
  if( rc!=SQLITE_DONE ) die("suite: %s: %s", sqlite3_sql(pStmt), sqlite3_errmsg(p->db));
  n = sqlite3_changes(p->db);
  p->h = fnv(p->h, &n, sizeof(n));
  sqlite3_reset(pStmt);
}
/* s1: n rows in key order, one transaction. */
static void stInsertOrdered(SuiteCtx *p){
  sqlite3_stmt *pIns;
  char z[16];
  int64_t i;
  exec(p->db, "CREATE TABLE s1(id INTEGER PRIMARY KEY, a INTEGER NOT NULL, w TEXT NOT NULL, c INTEGER)");
  pIns = prep(p->db, "INSERT INTO s1 VALUES(?1, ?2, ?3, ?1 % 97)");
  exec(p->db, "BEGIN");
  for(i=1; i<=p->n; i++){
    sqlite3_bind_int64(pIns, 1, i);
    sqlite3_bind_int64(pIns, 2, (int64_t)(splitmix(g.iSeed + (uint64_t)i) % 1000000));
    sqlite3_bind_text(pIns, 3, z, suiteWord((uint64_t)i, z), SQLITE_TRANSIENT);
    stepDone(p->db, pIns, "suite s1");
  }
  exec(p->db, "COMMIT");
  check(p->db, sqlite3_finalize(pIns), "suite s1");
  suiteQuery(p, "SELECT count(*), sum(a), sum(length(w)) FROM s1");
}
/* s2: n rows in a scattered key order, one transaction. */
static void stInsertUnordered(SuiteCtx *p){
  sqlite3_stmt *pIns;
  char z[16];
  int64_t i, k;
  exec(p->db, "CREATE TABLE s2(id INTEGER PRIMARY KEY, a INTEGER NOT NULL, w TEXT NOT NULL, c INTEGER)");
  pIns = prep(p->db, "INSERT INTO s2 VALUES(?1, ?2, ?3, ?1 % 89)");
  exec(p->db, "BEGIN");
  for(i=1; i<=p->n; i++){
    k = suitePerm(i, p->n);
    sqlite3_bind_int64(pIns, 1, k);
    sqlite3_bind_int64(pIns, 2, (int64_t)(splitmix(g.iSeed * 3 + (uint64_t)k) % 1000000));
    sqlite3_bind_text(pIns, 3, z, suiteWord((uint64_t)k + 17, z), SQLITE_TRANSIENT);
    stepDone(p->db, pIns, "suite s2");
  }
  exec(p->db, "COMMIT");
  check(p->db, sqlite3_finalize(pIns), "suite s2");
  suiteQuery(p, "SELECT count(*), sum(a), max(id) FROM s2");
}
/* s3: text primary key (an index), keys in no particular order. */
static void stInsertText(SuiteCtx *p){
  sqlite3_stmt *pIns;
  char z[48], zW[16];
  int64_t i;
  exec(p->db, "CREATE TABLE s3(k TEXT PRIMARY KEY, id INTEGER NOT NULL, v TEXT)");
  pIns = prep(p->db, "INSERT INTO s3 VALUES(?1, ?2, ?3)");
  exec(p->db, "BEGIN");
  for(i=1; i<=p->n; i++){
    int n;
    suiteWord((uint64_t)i * 5, zW);
    n = snprintf(z, sizeof(z), "%s-%lld", zW, (long long)i);
    sqlite3_bind_text(pIns, 1, z, n, SQLITE_TRANSIENT);
    sqlite3_bind_int64(pIns, 2, i);
    sqlite3_bind_text(pIns, 3, zW, -1, SQLITE_TRANSIENT);
    stepDone(p->db, pIns, "suite s3");
  }
  exec(p->db, "COMMIT");
  check(p->db, sqlite3_finalize(pIns), "suite s3");
  suiteQuery(p, "SELECT count(*), min(k), max(k) FROM s3");
}
/* s4: n/100 rows, each INSERT its own transaction (a commit each: in
** rollback mode a sync each, so fewer rows than the other tests). */
static void stInsertSmallTxns(SuiteCtx *p){
  sqlite3_stmt *pIns;
  int64_t i, m = p->n / 100 + 1;
  exec(p->db, "CREATE TABLE s4(id INTEGER PRIMARY KEY, a INTEGER, w TEXT)");
  pIns = prep(p->db, "INSERT INTO s4 VALUES(?1, ?1 * 7, printf('row %d', ?1))");
  for(i=1; i<=m; i++) suiteStep(p, pIns, suitePerm(i, m), 0);
  check(p->db, sqlite3_finalize(pIns), "suite s4");
  suiteQuery(p, "SELECT count(*), sum(a) FROM s4");
}
static void stIndexNumeric(SuiteCtx *p){
  exec(p->db, "CREATE INDEX s1a ON s1(a)");
  suiteQuery(p, "SELECT a FROM s1 ORDER BY a LIMIT 5");
}
static void stIndexText(SuiteCtx *p){
  exec(p->db, "CREATE INDEX s2w ON s2(w, a)");
  suiteQuery(p, "SELECT w, a FROM s2 ORDER BY w, a LIMIT 5");
}
/* Point queries by integer key, in scattered order. */
static void stSelectByKey(SuiteCtx *p){
  sqlite3_stmt *pSel = prep(p->db, "SELECT a, w FROM s2 WHERE id=?1");
  int64_t i, m = p->n / 2;
  for(i=1; i<=m; i++) suiteStep(p, pSel, suitePerm(i * 3, p->n), 0);
  check(p->db, sqlite3_finalize(pSel), "suite select by key");
}
/* Point queries by text key. */
static void stSelectByText(SuiteCtx *p){
  sqlite3_stmt *pSel = prep(p->db, "SELECT id, v FROM s3 WHERE k=?1");
  char z[48], zW[16];
  int64_t i, k, m = p->n / 2;
  for(i=1; i<=m; i++){
    k = suitePerm(i * 5, p->n);
    suiteWord((uint64_t)k * 5, zW);
    snprintf(z, sizeof(z), "%s-%lld", zW, (long long)k);
    suiteStep(p, pSel, 0, z);
  }
  check(p->db, sqlite3_finalize(pSel), "suite select by text");
}
/* Range queries on an indexed numeric column. */
static void stSelectRange(SuiteCtx *p){
  sqlite3_stmt *pSel = prep(p->db, "SELECT count(*), sum(c) FROM s1 WHERE a BETWEEN ?1 AND ?1 + 5000");
  int64_t i;
  for(i=0; i<200; i++) suiteStep(p, pSel, (int64_t)(splitmix(g.iSeed + 99 + (uint64_t)i) % 995000), 0);
  check(p->db, sqlite3_finalize(pSel), "suite select range");
}
/* Full scans with a LIKE and a GROUP BY (no index helps). */
static void stScanLike(SuiteCtx *p){
  suiteQuery(p, "SELECT count(*), sum(a) FROM s1 WHERE w LIKE '%qu%'");
  suiteQuery(p, "SELECT count(*) FROM s3 WHERE v LIKE 'b%' AND k LIKE '%7'");
}
static void stGroupBy(SuiteCtx *p){
  suiteQuery(p, "SELECT c, count(*), sum(a), min(w) FROM s1 GROUP BY c ORDER BY c");
  suiteQuery(p, "SELECT length(w), count(*) FROM s2 GROUP BY 1 ORDER BY 1");
}
static void stOrderBy(SuiteCtx *p){
  suiteQuery(p, "SELECT id, c FROM s2 ORDER BY c DESC, w, id LIMIT 50");
}
/* Joins: both sides on the integer key; one side's key looked up from the
** other's column; a text IN (subquery). */
static void stJoinKey(SuiteCtx *p){
  suiteQuery(p, "SELECT count(*), sum(s1.a - s2.a), sum(s1.c * s2.c) FROM s1 JOIN s2 ON s1.id=s2.id");
}
static void stJoinIndex(SuiteCtx *p){
  suiteQuery(p, "SELECT s2.c, count(*), sum(s3.id) FROM s3 JOIN s2 ON s2.id=s3.id "
                "WHERE s2.a < 300000 GROUP BY s2.c ORDER BY s2.c");
  suiteQuery(p, "SELECT count(*) FROM s2 WHERE w IN (SELECT v FROM s3 WHERE id % 10 = 3)");
}
/* Updates: by key (many statements, one transaction), by range, all rows. */
/* One statement by key for a quarter of the rows, in one transaction, keys
** in the order suitePerm(i * nStride) gives; then zQuery's checksum. */
static void suiteByKey(SuiteCtx *p, const char *zSql, int64_t nStride, const char *zWhat,
                       const char *zQuery){
  sqlite3_stmt *pStmt = prep(p->db, zSql);
  int64_t i, m = p->n / 4;
  exec(p->db, "BEGIN");
  for(i=1; i<=m; i++) suiteStep(p, pStmt, suitePerm(i * nStride, p->n), 0);
  exec(p->db, "COMMIT");
  check(p->db, sqlite3_finalize(pStmt), zWhat);
  suiteQuery(p, zQuery);
}
static void stUpdateByKey(SuiteCtx *p){
  suiteByKey(p, "UPDATE s1 SET a=a+1, c=c+1 WHERE id=?1", 7, "suite update by key",
             "SELECT sum(a), sum(c) FROM s1");
}
static void stUpdateByRange(SuiteCtx *p){
  sqlite3_stmt *pUpd = prep(p->db, "UPDATE s1 SET w=w || 'x' WHERE a BETWEEN ?1 AND ?1 + 2000");
  int64_t i;
  exec(p->db, "BEGIN");
  for(i=0; i<100; i++) suiteStep(p, pUpd, (int64_t)(splitmix(g.iSeed + 7 + (uint64_t)i) % 998000), 0);
  exec(p->db, "COMMIT");
  check(p->db, sqlite3_finalize(pUpd), "suite update by range");
  suiteQuery(p, "SELECT sum(length(w)) FROM s1");
}
static void stUpdateAllText(SuiteCtx *p){
  suiteExec(p, "UPDATE s2 SET w=substr(w,2) || substr(w,1,1), a=a/2");
  suiteQuery(p, "SELECT w, count(*) FROM s2 GROUP BY w ORDER BY count(*) DESC, w LIMIT 5");
}
static void stUpdateText(SuiteCtx *p){
  suiteExec(p, "UPDATE s3 SET v=upper(v) WHERE k >= 'g' AND k < 'p'");
  suiteQuery(p, "SELECT count(*) FROM s3 WHERE v >= 'A' AND v < 'a'");
}
/* INSERT ... SELECT of a whole table into a new one. */
static void stInsertSelect(SuiteCtx *p){
  exec(p->db, "CREATE TABLE s5(id INTEGER PRIMARY KEY, a INTEGER, w TEXT, c INTEGER)");
  suiteExec(p, "INSERT INTO s5 SELECT id + 0, a, w, c FROM s2 ORDER BY w, id");
  suiteQuery(p, "SELECT count(*), sum(a) FROM s5");
}
/* Deletes by key (one transaction) and by range. */
static void stDeleteByKey(SuiteCtx *p){
  suiteByKey(p, "DELETE FROM s5 WHERE id=?1", 11, "suite delete by key", "SELECT count(*), sum(a) FROM s5");
}
static void stDeleteByRange(SuiteCtx *p){
  suiteExec(p, "DELETE FROM s1 WHERE a BETWEEN 100000 AND 250000");
  suiteExec(p, "DELETE FROM s3 WHERE k >= 'c' AND k < 'e'");
  suiteQuery(p, "SELECT count(*), sum(a) FROM s1");
}
/* ONE transaction far larger than the page cache (cache_size=10 pages for
** this test only, whatever the mode): single-row DELETEs of half of s2 by
** key in scattered order, then s2 read back inside the transaction, so
** that SQLite spills dirty pages and reads its own spilled pages back --
** the pattern of the quadratic WAL bug. */
static void stBigTxn(SuiteCtx *p){
  sqlite3_stmt *pDel = prep(p->db, "DELETE FROM s2 WHERE id=?1");
  char zSql[64];
  int64_t i, m = p->n / 2;
  exec(p->db, "PRAGMA cache_size=10");
  exec(p->db, "BEGIN");
  for(i=1; i<=m; i++) suiteStep(p, pDel, suitePerm(i * 2, p->n), 0);
  suiteQuery(p, "SELECT count(*), sum(a), sum(length(w)) FROM s2");
  exec(p->db, "COMMIT");
  check(p->db, sqlite3_finalize(pDel), "suite big transaction");
  snprintf(zSql, sizeof(zSql), "PRAGMA cache_size=%d", g.nCacheSize);
  exec(p->db, zSql);
}
static void stDropIndex(SuiteCtx *p){
  exec(p->db, "DROP INDEX s2w");
  exec(p->db, "CREATE INDEX s2c ON s2(c, a)");
  suiteQuery(p, "SELECT c, count(*) FROM s2 WHERE c < 10 GROUP BY c ORDER BY c");
}
static void stAnalyze(SuiteCtx *p){
  exec(p->db, "ANALYZE");
  /* what ANALYZE wrote depends on the SQLite version: fold a query's
  ** result, not the statistics */
  suiteQuery(p, "SELECT count(*), sum(c) FROM s1 WHERE a > 500000 AND c = 3");
}
static void stVacuum(SuiteCtx *p){
  exec(p->db, "VACUUM");
  suiteQuery(p, "SELECT count(*), sum(a), sum(length(w)) FROM s2");
}
static void stIntegrity(SuiteCtx *p){
  suiteQuery(p, "PRAGMA integrity_check");
}
static void stDropTables(SuiteCtx *p){
  exec(p->db, "DROP TABLE s5");
  exec(p->db, "DROP TABLE s4");
  suiteQuery(p, "SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 's%' ORDER BY name");
}

typedef struct SuiteTest {
  const char *zId;                     /* stable: reports compare tests by id */
  const char *zName;
  void (*xRun)(SuiteCtx*);
} SuiteTest;
static const SuiteTest g_aSuite[] = {
  { "100", "INSERTs in key order, one transaction (N rows)", stInsertOrdered },
  { "110", "INSERTs in scattered key order, one transaction (N rows)", stInsertUnordered },
  { "120", "INSERTs with a text primary key, one transaction (N rows)", stInsertText },
  { "130", "INSERTs, a transaction each (N/100 rows)", stInsertSmallTxns },
  { "140", "CREATE INDEX on an integer column", stIndexNumeric },
  { "150", "CREATE INDEX on a text column", stIndexText },
  { "160", "SELECT by integer key (N/2 statements)", stSelectByKey },
  { "170", "SELECT by text key (N/2 statements)", stSelectByText },
  { "180", "SELECT of 200 ranges of an indexed column", stSelectRange },
  { "190", "full scans with LIKE", stScanLike },
  { "200", "GROUP BY over whole tables", stGroupBy },
  { "210", "ORDER BY a column without index, LIMIT", stOrderBy },
  { "220", "join on the integer key", stJoinKey },
  { "230", "join through an index, IN (subquery)", stJoinIndex },
  { "240", "UPDATEs by key, one transaction (N/4 statements)", stUpdateByKey },
  { "250", "UPDATEs of 100 ranges of an indexed column", stUpdateByRange },
  { "260", "UPDATE of every row (text and numbers)", stUpdateAllText },
  { "270", "UPDATE of a range of text keys", stUpdateText },
  { "280", "INSERT ... SELECT of a whole table", stInsertSelect },
  { "290", "DELETEs by key, one transaction (N/4 statements)", stDeleteByKey },
  { "300", "DELETEs of ranges (integer and text)", stDeleteByRange },
  { "310", "DELETEs by key in ONE transaction larger than the cache (cache_size=10)", stBigTxn },
  { "320", "DROP INDEX, CREATE INDEX", stDropIndex },
  { "330", "ANALYZE", stAnalyze },
  { "340", "VACUUM", stVacuum },
  { "350", "PRAGMA integrity_check", stIntegrity },
  { "360", "DROP TABLE", stDropTables },
};
#define SUITE_NTEST ((int)(sizeof(g_aSuite) / sizeof(g_aSuite[0])))

static uint64_t suiteBytesWritten(void){
  uint64_t n = 0;
  int k;
  for(k=0; k<IO_NKIND; k++) n += __atomic_load_n(&g_cnt.nWriteByte[k], __ATOMIC_RELAXED);
  return n;
}
static void suiteRemove(const char *zPath){
  static const char *const azSuffix[] = { "", "-wal", "-shm", "-journal", "-tdemap" };
  char z[PATH_MAX + 16];
  size_t i;
  for(i=0; i<sizeof(azSuffix)/sizeof(azSuffix[0]); i++){
    snprintf(z, sizeof(z), "%s%s", zPath, azSuffix[i]);
    (void)unlink(z);
  }
}

/* Pages spilled from the cache so far (-1: SQLite before 3.22 cannot say). */
static int suiteSpills(sqlite3 *db){
#ifdef SQLITE_DBSTATUS_CACHE_SPILL
  int nCur = 0, nHi = 0;
  if( sqlite3_db_status(db, SQLITE_DBSTATUS_CACHE_SPILL, &nCur, &nHi, 0)==SQLITE_OK ) return nCur;
#else
  (void)db;
#endif
  return -1;
}

static void wSuite(void){
  char zPath[PATH_MAX + 16];
  SuiteCtx ctx;
  double aS[SUITE_NTEST], t0, tAll, tEnd;
  uint64_t aBytes[SUITE_NTEST], aSync[SUITE_NTEST], aSum[SUITE_NTEST], nB, nSync;
  int aSpill[SUITE_NTEST], nSpill, nSpill0;
  int i;
  snprintf(zPath, sizeof(zPath), "%s-suite.db", g.zDb);
  suiteRemove(zPath);
  memset(&ctx, 0, sizeof(ctx));
  ctx.n = g.nSuiteRows;
  ctx.db = openDb(zPath, 1);
  ioStart();
  tAll = now();
  for(i=0; i<SUITE_NTEST; i++){
    ctx.h = 0xcbf29ce484222325ULL;
    nB = suiteBytesWritten();
    nSync = __atomic_load_n(&g_cnt.nSync, __ATOMIC_RELAXED);
    nSpill0 = suiteSpills(ctx.db);
    t0 = now();
    g_aSuite[i].xRun(&ctx);
    aS[i] = now() - t0;
    nSpill = suiteSpills(ctx.db);
    aSpill[i] = nSpill0<0 ? -1 : nSpill - nSpill0;
    aBytes[i] = suiteBytesWritten() - nB;
    aSync[i] = __atomic_load_n(&g_cnt.nSync, __ATOMIC_RELAXED) - nSync;
    aSum[i] = ctx.h;
  }
  tEnd = now();
  ioStop(1);
  check(ctx.db, sqlite3_close(ctx.db), "close");
  suiteRemove(zPath);
  outBegin();
  outNum("suite_s", tEnd - tAll);
  outNum("suite_rows", (double)g.nSuiteRows);
  {
    uint64_t h = 0xcbf29ce484222325ULL;
    for(i=0; i<SUITE_NTEST; i++) h = fnv(h, &aSum[i], sizeof(aSum[i]));
    outU64("checksum", h);
  }
  /* one object per test inside the run's object: the comma counter
  ** restarts in each and is set again for the keys outEnd adds */
  printf(",\"tests\":[");
  for(i=0; i<SUITE_NTEST; i++){
    g_nOut = 0;
    printf("%s{", i ? "," : "");
    outStr("id", g_aSuite[i].zId);
    outStr("name", g_aSuite[i].zName);
    outNum("s", aS[i]);
    outNum("write_bytes", (double)aBytes[i]);
    outNum("syncs", (double)aSync[i]);
    outNum("cache_spills", aSpill[i]);
    outU64("checksum", aSum[i]);
    printf("}");
  }
  printf("]");
  g_nOut = 1;
  outEnd();
}

/* ---- commit latency ---------------------------------------------------------------- */

/* commit-latency (WAL mode only): --lat-txns single-row INSERTs into t1
** past the data set, each its own transaction, first with
** synchronous=NORMAL, then as many with synchronous=FULL; each statement
** (the whole autocommit transaction, commit included) is timed.  The
** automatic checkpoint stays at SQLite's default (1,000 pages), so p99
** includes the commits that ran one, as an application's would.  Every
** inserted row is read back and checked against the generator. */
static void wCommitLatency(void){
  static const char *const azSync[2] = { "NORMAL", "FULL" };
  static const char *const azKey[2][2] = {
    { "commit_normal_ms_p50", "commit_normal_ms_p99" },
    { "commit_full_ms_p50", "commit_full_ms_p99" },
  };
  sqlite3 *db;
  sqlite3_stmt *pIns, *pSum;
  Samples lat[2] = {{0}, {0}};
  char z[101], zSql[64];
  int64_t id = g.nRows + 1, nDone = 0;
  uint64_t sumGot = 0, sumExp = 0;
  double t0, tAll, tEnd;
  int s, i;
  if( sqlite3_stricmp(g.zJournal, "WAL")!=0 ) die("commit-latency: WAL mode only (--journal WAL)");
  db = openDb(g.zDb, 0);
  pIns = prep(db, "INSERT INTO t1(id,a,b) VALUES(?,?,?)");
  (void)one(db, "SELECT count(*) FROM sqlite_master");
  ioStart();
  tAll = now();
  for(s=0; s<2; s++){
    snprintf(zSql, sizeof(zSql), "PRAGMA synchronous=%s", azSync[s]);
    exec(db, zSql);
    for(i=0; i<g.nLatTxns; i++, id++){
      valB(id, z);
      sqlite3_bind_int64(pIns, 1, id);
      sqlite3_bind_int64(pIns, 2, valA(id));
      sqlite3_bind_text(pIns, 3, z, 100, SQLITE_TRANSIENT);
      t0 = now();
      stepDone(db, pIns, "commit-latency");
      samplesAdd(&lat[s], (now() - t0) * 1000);
      nDone++;
    }
  }
  tEnd = now();
  ioStop((double)nDone);
  check(db, sqlite3_finalize(pIns), "commit-latency");
  for(id=g.nRows+1; id<=g.nRows+nDone; id++) sumExp += expectedRow(id);
  pSum = prep(db, "SELECT id,a,b FROM t1 WHERE id>?");
  sqlite3_bind_int64(pSum, 1, g.nRows);
  while( sqlite3_step(pSum)==SQLITE_ROW ){
    sumGot += rowHash(sqlite3_column_int64(pSum, 0), sqlite3_column_int64(pSum, 1),
                      (const char*)sqlite3_column_text(pSum, 2), (size_t)sqlite3_column_bytes(pSum, 2));
  }
  check(db, sqlite3_finalize(pSum), "checksum");
  if( sumGot!=sumExp ) die("commit-latency: checksum mismatch (%016llx != %016llx)",
                           (unsigned long long)sumGot, (unsigned long long)sumExp);
  check(db, sqlite3_close(db), "close");
  outBegin();
  for(s=0; s<2; s++){
    outNum(azKey[s][0], pct(&lat[s], 0.5));
    outNum(azKey[s][1], pct(&lat[s], 0.99));
  }
  outNum("txns", (double)nDone);
  outNum("elapsed_s", tEnd - tAll);
  outU64("checksum", sumGot);
  outSamples("commit_normal_ms", &lat[0], 2000);
  outSamples("commit_full_ms", &lat[1], 2000);
  outEnd();
  free(lat[0].a);
  free(lat[1].a);
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
#if defined(BENCH_SQLITE3MC)
  {
    sqlite3 *db = 0;
    sqlite3_stmt *p;
    sqlite3_open(":memory:", &db);
    outStr("sqlite3mc", sqlite3mc_version());
    p = prep(db, "SELECT sqlite3mc_config('default:cipher')");
    outStr("cipher", sqlite3_step(p)==SQLITE_ROW && sqlite3_column_text(p, 0) ?
                     (const char*)sqlite3_column_text(p, 0) : "?");
    sqlite3_finalize(p);
    sqlite3_close(db);
  }
#elif defined(BENCH_SQLCIPHER)
  {
    sqlite3 *db = 0;
    sqlite3_stmt *p;
    sqlite3_open(":memory:", &db);
    p = prep(db, "PRAGMA cipher_version");
    outStr("sqlcipher", sqlite3_step(p)==SQLITE_ROW ? (const char*)sqlite3_column_text(p, 0) : "?");
    sqlite3_finalize(p);
    /* the provider is known once a key is set (a throwaway one, in memory) */
    exec(db, "PRAGMA key = 'versions'");
    p = prep(db, "PRAGMA cipher_provider");
    if( sqlite3_step(p)==SQLITE_ROW && sqlite3_column_text(p, 0) ){
      outStr("crypto_provider", (const char*)sqlite3_column_text(p, 0));
    }
    sqlite3_finalize(p);
    p = prep(db, "PRAGMA cipher_provider_version");
    if( sqlite3_step(p)==SQLITE_ROW && sqlite3_column_text(p, 0) ){
      outStr("crypto", (const char*)sqlite3_column_text(p, 0));
    }
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
    else if( ARG("--txn-rows") ) g.nTxnRows = atoi(v);
    else if( ARG("--min-obs") ) g.nMinObs = atoi(v);
    else if( ARG("--suite-rows") ) g.nSuiteRows = atoll(v);
    else if( ARG("--lat-txns") ) g.nLatTxns = atoi(v);
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
  if( g.nRows < 1 || g.nScale < 1 || g.nThreads < 1 || g.nRatRows < 1 || g.nTxnRows < 1 || g.nMinObs < 0
      || g.nSuiteRows < 20 || g.nLatTxns < 1 ) die("sizes must be >= 1 (--suite-rows >= 20)");
#ifdef BENCH_SQLCIPHER
  if( !g.zKeyFile ) die("--keyfile is required for sqlcipher");
  readKeyFile();
#  ifdef BENCH_SQLITE3MC
  /* its cipher VFS over the counter, as the default */
  cntRegister(0);
  if( sqlite3mc_vfs_create("benchcount", 1)!=SQLITE_OK ) die("sqlite3mc_vfs_create failed");
#  else
  cntRegister(1);
#  endif
#else
  cntRegister(1);     /* tde registers over the default: the counter */
  if( g.zKeyFile ) die("--keyfile: only the sqlcipher driver takes a key");
  tde_register(0);
#endif
  if( strcmp(g.zOp, "build")==0 ){ buildDataSet(); return 0; }
  if( strcmp(g.zOp, "convert")==0 ){ convertDataSet(); return 0; }
  if( strcmp(g.zOp, "run")!=0 ) die("--op build|convert|run|versions");
  if( strcmp(g.zWorkload, "insert")==0 ) wInsert();
  else if( strcmp(g.zWorkload, "delete-replenish")==0 ) wDeleteReplenish();
  else if( strcmp(g.zWorkload, "cold-scan")==0 ) wScan(1);
  else if( strcmp(g.zWorkload, "warm-scan")==0 ) wScan(0);
  else if( strcmp(g.zWorkload, "bounce")==0 ) wBounce();
  else if( strcmp(g.zWorkload, "row-at-a-time")==0 ) wRowAtATime();
  else if( strcmp(g.zWorkload, "tpcb-select")==0 ) wTpcb(0);
  else if( strcmp(g.zWorkload, "tpcb-rw")==0 ) wTpcb(1);
  else if( strcmp(g.zWorkload, "vacuum")==0 ) wVacuum();
  else if( strcmp(g.zWorkload, "update-all")==0 ) wUpdateAll();
  else if( strcmp(g.zWorkload, "checkpoint")==0 ) wCheckpoint();
  else if( strcmp(g.zWorkload, "update-rows")==0 ) wRowTxns(0);
  else if( strcmp(g.zWorkload, "delete-rows")==0 ) wRowTxns(1);
  else if( strcmp(g.zWorkload, "delete-spill")==0 ) wDeleteSpill();
  else if( strcmp(g.zWorkload, "suite")==0 ) wSuite();
  else if( strcmp(g.zWorkload, "commit-latency")==0 ) wCommitLatency();
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
