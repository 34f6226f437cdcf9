/*
** The shipper (tde_ship_run_v2): a long-running process on the primary that
** captures committed WAL transactions as ciphertext into the spool
** DB-tdeship and sends them, in order, to one or more standbys.
**
**   capture   every cycle: SQLite's WAL write lock (walock.c: no writer
**             can append to or restart the WAL meanwhile), read the WAL
**             index header from -shm, copy frames (last captured, mxFrame]
**             from -wal into the spool, release, fsync.  The lock is held
**             only for that local copy.
**   senders   one thread per standby: hello (database id, spool history,
**             key check), then records from the standby's last applied
**             sequence, a window of unacknowledged ones in flight; a
**             standby that is too far behind (records trimmed, or a GAP
**             record) gets a base copy first.
**   base      under the WAL write and checkpoint locks: capture, then
**             copy the database file and apply frames 1..mxFrame of the
**             WAL to the copy, which is then consistent with the spool's
**             last sequence number.
**
** The process never opens the database through the tde VFS: it takes
** SQLite's locks on the WAL index through the VFS below (walock.c), so it
** needs no keystore and holds no key.  Must never: send a record the
** spool does not hold durably, or skip one.
*/
#include "repl/repl.h"
#include "repl/walock.h"
#include "cipher/cipher.h"
#include "keys/keys.h"
#include "keys/layout.h"
#include "audit/audit.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#define SHIP_WINDOW      256          /* records in flight per standby */
#define SHIP_TRIM_BYTES  (8<<20)      /* trim the spool beyond this size */
#define SHIP_CHUNK       (1<<20)      /* base copy message size */
#define SHIP_HEAD_EVERY  32           /* a signed head at least every K records */
#define SHIP_HEAD_BYTES  (8<<20)      /* ... or every this many bytes of records */

typedef struct Ship Ship;

/* One record the sender knows of: where it is in the spool. */
typedef struct ShipIdx {
  uint64_t seq;
  sqlite3_int64 iOff;
  uint32_t n;
  uint8_t kind;
  uint8_t flags;
  uint32_t nLost;             /* GAP with TDE_RECF_REWIND: frames the primary lost */
  uint64_t tCapture;
  int bChain;                 /* aChain known */
  uint8_t aSalt[8];           /* WAL generation and position after the record (sync mode) */
  uint32_t iLast;
  uint8_t bFrames;            /* a TXN with frames (a header-only one has no WAL position) */
  uint8_t aChain[32];         /* the record chain up to and with this record */
} ShipIdx;

typedef struct ShipPeer {
  Ship *pShip;
  int iPeer;
  const char *zAddr;
  const TdeShipDest *pDest;   /* not a standby: a destination (the archive) */
  TdeSpool *pSpool;           /* the destination's reader of the spool */
  pthread_t tid;
  int bThread;
  /* Guarded by Ship.mu. */
  char zState[32];
  char zError[256];           /* destination: its last error ("" none) */
  uint64_t errorMs;
  int bLeftBehind;            /* destination: the spool was trimmed past it (nMaxSpool) */
  int bAcked;                 /* has acknowledged something in this run */
  uint64_t ackedSeq, ackedCapture, sentSeq;
  int64_t lagBytes;
  /* Sender-private. */
  uint64_t rewindFrom;        /* the next base copy rewinds a standby at or past this (0: no) */
  uint64_t headSeq;           /* last signed head sent */
  uint64_t headSentMs;
  ShipIdx *aIdx;
  int nIdx, nIdxAlloc;
  TdeWalLock lock;            /* for base copies (bLock: open) */
  int bLock;
} ShipPeer;

struct Ship {
  const char *zDb;
  volatile int *pbStop;
  int nCycleMs;
  pthread_mutex_t mu;
  int nPeer;
  int nTo;                    /* standbys: aPeer[0..nTo), then the destinations */
  ShipPeer *aPeer;
  uint8_t aDbid[16];
  uint8_t aHistory[16];
  uint8_t aKeyCheck[32];
  /* Guarded by mu. */
  uint64_t capturedSeq, capturedMs;
  double holdMaxMs, holdSumMs;
  int64_t nCycle;
  int nBadCycles;             /* consecutive captures that found the WAL inconsistent */
  int eWait;                  /* TDE_WALOCK_NOINDEX or _RECOVER: why the last cycle captured nothing */
  uint64_t durableSeq;        /* spool records up to this one are synced: sendable */
  /* The database file and -shm, opened once and closed only after every
  ** lock of the process (walock.c) is closed: closing any descriptor of
  ** a file drops every POSIX lock the process holds on it, those taken
  ** through the VFS below included (the WAL write lock is a lock on
  ** -shm). */
  int fdDb, fdShm;
  int fdLock;                 /* DB-tdeship-lock, flock'd: one shipper per database */
  TdeReplCfg *pCfg;           /* TLS and the repl_* keys */
  /* The record chain at the record before the spool's first one, kept in
  ** DB-tdeship-chain across trims and restarts (guarded by mu). */
  int bChainBase;
  uint64_t chainBaseSeq;
  uint8_t aChainBase[32];
  /* Sync mode (sync.c; guarded by mu): DB-tdeship-sync and the newest
  ** acknowledged WAL position published in it. */
  int fdSync;
  int bDegraded;
  int bAckValid;
  uint8_t aAckSalt[8];
  uint32_t ackLast;
  uint64_t ackBest;           /* highest sequence any standby acknowledged */
  uint64_t startMs;
  ShipIdx *aIdx;              /* capture thread only: records of the spool */
  int nIdx, nIdxAlloc;
};

static uint64_t shipDurable(Ship *p){
  uint64_t seq;
  pthread_mutex_lock(&p->mu);
  seq = p->durableSeq;
  pthread_mutex_unlock(&p->mu);
  return seq;
}

/* The process-wide descriptors (caller holds the WAL write lock, so -shm
** exists). */
static void shipFds(Ship *p, int *pfdDb, int *pfdShm){
  pthread_mutex_lock(&p->mu);
  if( p->fdDb<0 ) p->fdDb = open(p->zDb, O_RDONLY | O_CLOEXEC);
  if( p->fdShm<0 ){
    char zPath[4200];
    snprintf(zPath, sizeof(zPath), "%s-shm", p->zDb);
    p->fdShm = open(zPath, O_RDONLY | O_CLOEXEC);
  }
  *pfdDb = p->fdDb;
  *pfdShm = p->fdShm;
  pthread_mutex_unlock(&p->mu);
}

static void msleep(int ms){
  struct timespec ts = { ms/1000, (long)(ms%1000)*1000000L };
  while( nanosleep(&ts, &ts)!=0 && errno==EINTR ){}
}

static double nowSec(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec/1e9;
}

/* Database id and key-check value from the header region: SHA-256 of the
** in-force slot's database id and keyring entries (no data key needed). */
static int shipReadIdentity(const char *zDb, uint8_t *aDbid, uint8_t *aKeyCheck){
  uint8_t *aRegion = sqlite3_malloc(TDE_HEADER_BYTES);
  TdeHeader *pHdr = sqlite3_malloc(sizeof(TdeHeader));
  int fd = open(zDb, O_RDONLY | O_CLOEXEC);
  int rc = TDE_OK, iSlot = 0, bShort;
  if( !aRegion || !pHdr ){ rc = TDE_NOMEM; goto done; }
  if( fd<0 ){ rc = tdeErr(TDE_IO, "%s: %s", zDb, strerror(errno)); goto done; }
  {
    TdeRawSrc src = { 0, fd };
    rc = tdeRawRead(&src, aRegion, TDE_HEADER_BYTES, 0, &bShort);
    if( rc==TDE_OK && bShort ) rc = tdeErr(TDE_FORMAT, "%s: no sqlite-tde header (empty database?)", zDb);
  }
  if( rc==TDE_OK ) rc = tdeHeaderPick(aRegion, TDE_HEADER_BYTES, pHdr, &iSlot);
  if( rc ){ tdeErr(rc, "%s: not an sqlite-tde encrypted database, or damaged", zDb); goto done; }
  memcpy(aDbid, pHdr->dbid, 16);
  {
    const uint8_t *aSlot = aRegion + iSlot*4096;
    size_t n = 50;
    for(int i=0; i<tdeGet16(aSlot+48) && n+2<=4032; i++) n += tdeGet16(aSlot+n);
    if( n>4032 ) n = 4032;
    tdeSha256(aSlot, n, aKeyCheck);     /* bytes [0,n) minus the sequence below */
    {
      uint8_t *aTmp = sqlite3_malloc((int)n);
      if( aTmp ){
        memcpy(aTmp, aSlot, n);
        memset(aTmp+12, 0, 8);          /* a header update alone does not change it */
        tdeSha256(aTmp, n, aKeyCheck);
        sqlite3_free(aTmp);
      }
    }
  }
done:
  if( fd>=0 ) close(fd);
  sqlite3_free(pHdr);
  sqlite3_free(aRegion);
  return rc;
}

/* The keyless lock on the database (walock.c): no keystore, no key.
** Whether it is in WAL mode shows at the first cycle (a database that is
** not has no WAL index: shipNoteWait). */
static int shipOpenDb(Ship *p, TdeWalLock *pLock){
  return tdeWalLockOpen(pLock, p->zDb);
}

/* WAL index end from the raw -shm, unchecked and unlocked: only a hint
** (sync mode's early wake-up). */
static void shipShmEnd(int fdShm, TdeWalEnd *pEnd){
  uint8_t a[96];
  int bShort = 1;
  memset(pEnd, 0, sizeof(*pEnd));
  if( fdShm<0 ) return;
  {
    TdeRawSrc src = { 0, fdShm };
    if( tdeRawRead(&src, a, 96, 0, &bShort)!=TDE_OK ) bShort = 1;
  }
  if( !bShort ) tdeShmHeaderEnd(a, pEnd);
}

/* The -wal, read through the VFS below the tde VFS (the one the shim's
** own WAL reads and the capture hook use), never with a raw open(2): a
** VFS stacked below sees these reads too.  SQLite takes no lock on a -wal
** (the unix VFS opens it without locking), so opening and closing it per
** cycle drops no lock of this process.  pFile is 0 when there is no -wal
** (or it is empty: every read of it would be short) or it cannot be
** opened, as a failed open(2) was. */
typedef struct ShipWal {
  sqlite3_vfs *pVfs;
  sqlite3_file *pFile;
  const char *zBlock;         /* sqlite3_create_filename(): outlives pFile */
  const char *zName;          /* the -wal name inside it, laid out as SQLite's own */
} ShipWal;

static void shipWalOpen(Ship *p, ShipWal *w){
  sqlite3_vfs *pTde = sqlite3_vfs_find(TDE_VFS_NAME);
  int bExists = 0, flagsOut = 0;
  char *zWal, *zJrnl;
  w->pVfs = pTde && pTde->pAppData ? (sqlite3_vfs*)pTde->pAppData : sqlite3_vfs_find(0);
  w->pFile = 0;
  w->zBlock = 0;
  if( !w->pVfs ) return;
  /* The name laid out SQLite's way (database, journal and WAL names in one
  ** block), so that a VFS below may call sqlite3_filename_database() or
  ** sqlite3_uri_parameter() on it as on SQLite's own. */
  zWal = sqlite3_mprintf("%s-wal", p->zDb);
  zJrnl = sqlite3_mprintf("%s-journal", p->zDb);
  if( zWal && zJrnl ) w->zBlock = sqlite3_create_filename(p->zDb, zJrnl, zWal, 0, 0);
  sqlite3_free(zWal);
  sqlite3_free(zJrnl);
  if( !w->zBlock ) return;
  w->zName = sqlite3_filename_wal(w->zBlock);
  /* Not there: no xOpen, whose failure SQLite would log. */
  if( w->pVfs->xAccess(w->pVfs, w->zName, SQLITE_ACCESS_EXISTS, &bExists)!=SQLITE_OK || !bExists ) return;
  w->pFile = sqlite3_malloc(w->pVfs->szOsFile);
  if( !w->pFile ) return;
  memset(w->pFile, 0, (size_t)w->pVfs->szOsFile);
  if( w->pVfs->xOpen(w->pVfs, w->zName, w->pFile, SQLITE_OPEN_WAL | SQLITE_OPEN_READONLY, &flagsOut)!=SQLITE_OK ){
    if( w->pFile->pMethods ) w->pFile->pMethods->xClose(w->pFile);
    sqlite3_free(w->pFile);
    w->pFile = 0;
  }
}

static void shipWalClose(ShipWal *w){
  if( w->pFile ){
    w->pFile->pMethods->xClose(w->pFile);
    sqlite3_free(w->pFile);
    w->pFile = 0;
  }
  sqlite3_free_filename(w->zBlock);
  w->zBlock = 0;
}

/*
** One capture under the lock shipBegin took: new frames into the spool.
** pEnd: the WAL index end read under it (bKnown 0: the database file's
** exclusive lock, no WAL content).
*/
static int shipCaptureLocked(Ship *p, TdeSpool *s, const TdeWalEnd *pEnd, int *pnNew){
  ShipWal w = { 0, 0, 0, 0 };
  int fdDb, fdShm, rc;
  *pnNew = 0;
  rc = tdeSpoolScan(s, 1);
  if( rc ) return rc;
  shipFds(p, &fdDb, &fdShm);
  shipWalOpen(p, &w);
  if( fdDb<0 ){
    rc = tdeErr(TDE_IO, "%s: %s", p->zDb, strerror(errno));
  }else{
    TdeRawSrc wal = { w.pFile, -1 }, hdr = { 0, fdDb };
    if( !s->pos.bValid ){
      /* A new spool: it starts at the WAL's current end, with a GAP so a
      ** standby starts from a base copy. */
      uint8_t aWalHdr[TDE_WAL_HDR];
      int bShort = 1;
      TdeRec g;
      memset(&g, 0, sizeof(g));
      if( w.pFile ) rc = tdeRawRead(&wal, aWalHdr, TDE_WAL_HDR, 0, &bShort);
      g.seq = 1;
      g.kind = TDE_REC_GAP;
      g.tCapture = tdeNowMs();
      if( rc==TDE_OK && !bShort && pEnd->bKnown && memcmp(pEnd->aSalt, aWalHdr+16, 8)==0 ){
        memcpy(g.aSalt, aWalHdr+16, 8);
        g.nCkpt = tdeGet32(aWalHdr+12);
        g.pgsz = tdeGet32(aWalHdr+8);
        g.iLast = pEnd->mxFrame;
      }else{
        g.flags = TDE_RECF_CLOSED;     /* no WAL: the next generation is new */
        if( !bShort ) memcpy(g.aSalt, aWalHdr+16, 8);
      }
      if( rc==TDE_OK ) rc = tdeSpoolAppend(s, &g, 0);
      if( rc==TDE_OK ) (*pnNew)++;
    }
    if( rc==TDE_OK ){
      int nNew = 0;
      rc = tdeSpoolCapture(s, w.pFile ? &wal : 0, pEnd, 1, &hdr, TDE_CAPTURE_CYCLE, 0, &nNew);
      *pnNew += nNew;
    }
  }
  shipWalClose(&w);
  return rc;
}

/* Why the capture found nothing to capture, in the state file (the
** status's note) and, at each change, the log. */
static void shipNoteWait(Ship *p, int eWait){
  int eWas;
  pthread_mutex_lock(&p->mu);
  eWas = p->eWait;
  p->eWait = eWait;
  pthread_mutex_unlock(&p->mu);
  if( eWait==eWas ) return;
  if( eWait==TDE_WALOCK_RECOVER ){
    tdeLog(TDE_LOG_WARNING, "ship %s: waiting for a connection to recover the WAL index (a writer stopped "
           "while changing it; SQLite's recovery reads pages, so needs the key)", p->zDb);
  }else if( eWait==TDE_WALOCK_NOINDEX ){
    tdeLog(TDE_LOG_WARNING, "ship %s: no WAL index: is the database in WAL mode (PRAGMA journal_mode=WAL)? "
           "(or no connection has it open)", p->zDb);
  }else{
    tdeLog(TDE_LOG_INFO, "ship %s: the WAL index is there: capturing", p->zDb);
  }
}

/*
** SQLite's WAL write lock (walock.c; flags TDE_WALOCK_*), tried for a
** while as SQLite's busy handler would: TDE_LOCKED if it stays busy or
** there is nothing to lock (*peWait why), *pEnd the WAL index end.
*/
static int shipBegin(Ship *p, TdeWalLock *pLock, unsigned flags, TdeWalEnd *pEnd, int *peWait){
  int rc = TDE_LOCKED;
  for(int k=0; k<200 && !*p->pbStop; k++){
    rc = tdeWalLockTake(pLock, flags, pEnd, peWait);
    if( rc!=TDE_LOCKED || *peWait!=TDE_WALOCK_BUSY ) break;
    msleep(1);
  }
  return rc;
}

static void shipEnd(TdeWalLock *pLock){
  tdeWalLockRelease(pLock);
}

/* The WAL does not hold what its index says (never seen in tests; a safety
** net): start over at the WAL's current end with a GAP, so standbys take a
** base copy instead of missing a transaction.  Caller holds the lock. */
static int shipGapLocked(Ship *p, TdeSpool *s, const TdeWalEnd *pEnd){
  ShipWal w = { 0, 0, 0, 0 };
  uint8_t aWalHdr[TDE_WAL_HDR];
  int bShort = 1, rc = TDE_OK;
  TdeRec g;
  memset(&g, 0, sizeof(g));
  shipWalOpen(p, &w);
  if( w.pFile ){
    TdeRawSrc wal = { w.pFile, -1 };
    rc = tdeRawRead(&wal, aWalHdr, TDE_WAL_HDR, 0, &bShort);
  }
  shipWalClose(&w);
  if( rc ) return rc;
  g.seq = s->pos.seq + 1;
  g.kind = TDE_REC_GAP;
  g.tCapture = tdeNowMs();
  memcpy(g.aHdrHash, s->pos.aHdrHash, 32);
  g.keySig = s->pos.keySig;
  if( !bShort && pEnd->bKnown && memcmp(pEnd->aSalt, aWalHdr+16, 8)==0 ){
    memcpy(g.aSalt, aWalHdr+16, 8);
    g.nCkpt = tdeGet32(aWalHdr+12);
    g.pgsz = tdeGet32(aWalHdr+8);
    g.iLast = pEnd->mxFrame;
  }else{
    g.flags = TDE_RECF_CLOSED;
    if( !bShort ) memcpy(g.aSalt, aWalHdr+16, 8);
  }
  rc = tdeSpoolAppend(s, &g, 0);
  if( rc==TDE_OK ) rc = tdeSpoolSync(s);
  return rc;
}

/* Whether the spool holds what this process has not scanned or synced:
** records the shim's hook saved (at the last connection's close, say). */
static int shipSpoolBehind(Ship *p, TdeSpool *s){
  struct stat st;
  if( !s->pos.bValid || s->pos.seq>shipDurable(p) ) return 1;
  return fstat(s->fd, &st)==0 && st.st_size!=(off_t)s->iEnd;
}

static int shipCycle(Ship *p, TdeWalLock *pLock, TdeSpool *s){
  TdeWalEnd end;
  double t0, t1;
  int nNew = 0, eWait = 0, rc;
  /* Without a WAL index, a database no connection has open is captured
  ** too (its file is all of it) when there is a reason to: the spool's
  ** first record, or records of the hook to scan and sync. */
  rc = shipBegin(p, pLock, shipSpoolBehind(p, s) ? TDE_WALOCK_DBFILE : 0, &end, &eWait);
  if( rc==TDE_LOCKED ){                   /* a long writer, or no WAL index: next cycle */
    if( eWait!=TDE_WALOCK_BUSY ) shipNoteWait(p, eWait);
    return TDE_OK;
  }
  if( rc ) return rc;
  shipNoteWait(p, end.bKnown ? 0 : TDE_WALOCK_NOINDEX);
  t0 = nowSec();
  rc = shipCaptureLocked(p, s, &end, &nNew);
  if( rc==TDE_FORMAT ){
    /* Retry a few cycles, then resynchronise rather than stop shipping. */
    if( ++p->nBadCycles==1 ) tdeLog(TDE_LOG_WARNING, "ship %s: %s; retrying", p->zDb, tde_last_error());
    rc = TDE_OK;
    if( p->nBadCycles>=20 ){
      tdeLog(TDE_LOG_WARNING, "ship %s: the WAL still does not match its index; recording a gap "
             "(standbys behind it take a base copy)", p->zDb);
      rc = shipGapLocked(p, s, &end);
      p->nBadCycles = 0;
    }
  }else if( rc==TDE_OK ){
    p->nBadCycles = 0;
  }
  t1 = nowSec();
  shipEnd(pLock);
  /* Sync outside the lock (writers do not wait for it); only synced
  ** records are ever sent, so a record a power loss takes back was never
  ** seen by a standby. */
  if( rc==TDE_OK && s->pos.seq>shipDurable(p) ){
    uint64_t seq = s->pos.seq;
    rc = tdeSpoolSync(s);
    if( rc==TDE_OK ){
      pthread_mutex_lock(&p->mu);
      if( seq>p->durableSeq ) p->durableSeq = seq;
      pthread_mutex_unlock(&p->mu);
    }
  }
  pthread_mutex_lock(&p->mu);
  p->nCycle++;
  p->holdSumMs += (t1-t0)*1000.0;
  if( (t1-t0)*1000.0 > p->holdMaxMs ) p->holdMaxMs = (t1-t0)*1000.0;
  if( s->pos.seq!=p->capturedSeq ){    /* by this cycle or by the shim's hook */
    p->capturedSeq = s->pos.seq;
    p->capturedMs = tdeNowMs();
  }
  pthread_mutex_unlock(&p->mu);
  return rc;
}

/* ---- state file --------------------------------------------------------- */

static void shipWriteState(Ship *p, const char *zState){
  char zPath[4200], zHex[33];
  TdeKv *kv = tdeKvNew();
  if( !kv ) return;
  snprintf(zPath, sizeof(zPath), "%s-tdeship-state", p->zDb);
  pthread_mutex_lock(&p->mu);
  tdeHex(p->aDbid, 16, zHex);
  tdeKvSet(kv, "database_id", "%s", zHex);
  tdeHex(p->aHistory, 16, zHex);
  tdeKvSet(kv, "history", "%s", zHex);
  tdeKvSet(kv, "pid", "%d", (int)getpid());
  tdeKvSet(kv, "state", "%s", zState);
  tdeKvSet(kv, "transport", "%s", p->nTo==0 ? "none" : p->pCfg && p->pCfg->bInsecure ? "insecure-no-tls" : "tls");
  tdeKvSet(kv, "mode", "%s", p->fdSync>=0 ? "sync" : "async");
  tdeKvSet(kv, "sync_state", "%s", p->fdSync<0 ? "" : p->bDegraded ? "degraded" : "ok");
  tdeKvSet(kv, "captured_seq", "%llu", (unsigned long long)p->capturedSeq);
  tdeKvSet(kv, "captured_ms", "%llu", (unsigned long long)p->capturedMs);
  tdeKvSet(kv, "capture_cycles", "%lld", (long long)p->nCycle);
  tdeKvSet(kv, "capture_wait", "%s", p->eWait==TDE_WALOCK_RECOVER ? "waiting for a connection to recover the WAL index"
           : p->eWait==TDE_WALOCK_NOINDEX ? "no WAL index: is the database in WAL mode (PRAGMA journal_mode=WAL)? "
             "(or no connection has it open)" : "");
  tdeKvSet(kv, "capture_lock_ms_max", "%.3f", p->holdMaxMs);
  tdeKvSet(kv, "capture_lock_ms_avg", "%.3f", p->nCycle ? p->holdSumMs/(double)p->nCycle : 0.0);
  tdeKvSet(kv, "peers", "%d", p->nPeer);
  for(int i=0; i<p->nPeer; i++){
    ShipPeer *q = &p->aPeer[i];
    char zK[64];
    int64_t nBytes = 0;
    /* Spool bytes this standby has not acknowledged (also while it is away). */
    for(int k=p->nIdx-1; k>=0 && p->aIdx[k].seq>q->ackedSeq; k--) nBytes += p->aIdx[k].n;
    q->lagBytes = nBytes;
    snprintf(zK, sizeof(zK), "peer%d", i);            tdeKvSet(kv, zK, "%s", q->zAddr);
    snprintf(zK, sizeof(zK), "peer%d_state", i);      tdeKvSet(kv, zK, "%s", q->zState);
    snprintf(zK, sizeof(zK), "peer%d_sent_seq", i);   tdeKvSet(kv, zK, "%llu", (unsigned long long)q->sentSeq);
    snprintf(zK, sizeof(zK), "peer%d_acked_seq", i);  tdeKvSet(kv, zK, "%llu", (unsigned long long)q->ackedSeq);
    snprintf(zK, sizeof(zK), "peer%d_acked_capture_ms", i); tdeKvSet(kv, zK, "%llu", (unsigned long long)q->ackedCapture);
    snprintf(zK, sizeof(zK), "peer%d_lag_bytes", i);  tdeKvSet(kv, zK, "%lld", (long long)q->lagBytes);
    snprintf(zK, sizeof(zK), "peer%d_kind", i);       tdeKvSet(kv, zK, "%s", q->pDest ? "archive" : "standby");
    if( q->pDest ){
      snprintf(zK, sizeof(zK), "peer%d_error", i);    tdeKvSet(kv, zK, "%s", q->zError);
      snprintf(zK, sizeof(zK), "peer%d_error_ms", i); tdeKvSet(kv, zK, "%llu", (unsigned long long)q->errorMs);
    }
  }
  pthread_mutex_unlock(&p->mu);
  tdeKvSet(kv, "updated_ms", "%llu", (unsigned long long)tdeNowMs());
  tdeKvWrite(kv, zPath, TDE_SHIP_STATE_MAGIC, 0);
  tdeKvFree(kv);
}

/* ---- sender ------------------------------------------------------------- */

/*
** The chain before record seq, where nothing before it in the index says
** (the spool's first record, bFirst, or one after a record of unknown
** chain): DB-tdeship-chain's when the file names seq - 1; the history's
** anchor only for the first record of a spool that has no such file (it
** was never trimmed, so its first record starts the history).  Else
** unknown (0): the file names a later record (a trim was recorded and
** has not happened yet, or a crash came between the two), and the anchor
** would be a wrong chain that every receiver refuses further on.
*/
static int shipChainBefore(Ship *p, uint64_t seq, int bFirst, uint8_t *aOut){
  int ok = 0;
  pthread_mutex_lock(&p->mu);
  if( p->bChainBase && p->chainBaseSeq+1==seq ){ memcpy(aOut, p->aChainBase, 32); ok = 1; }
  else if( !p->bChainBase && bFirst ) ok = 2;
  pthread_mutex_unlock(&p->mu);
  if( ok==2 ){ tdeChainAnchor(p->aHistory, seq - 1, aOut); ok = 1; }
  return ok;
}

/*
** The record chain (sign.c) of index entry e for record r: from the
** record before (pPrev), else from DB-tdeship-chain when it names r or
** the record before (shipChainBefore).  Unknown otherwise (then the
** standby gets a signed base copy).
*/
static void shipChainRec(Ship *p, const TdeRec *r, const uint8_t *aSum, const ShipIdx *pPrev, ShipIdx *e){
  uint8_t aBefore[32];
  e->bChain = 0;
  if( !aSum ) return;
  if( pPrev && pPrev->bChain && pPrev->seq+1==r->seq ){
    tdeChainNext(pPrev->aChain, aSum, e->aChain);
    e->bChain = 1;
    return;
  }
  if( pPrev && pPrev->seq+1!=r->seq ) return;         /* a hole */
  pthread_mutex_lock(&p->mu);
  if( p->bChainBase && p->chainBaseSeq==r->seq ){
    memcpy(e->aChain, p->aChainBase, 32);     /* the record the file names itself */
    e->bChain = 1;
  }
  pthread_mutex_unlock(&p->mu);
  if( !e->bChain && shipChainBefore(p, r->seq, pPrev==0, aBefore) ){
    tdeChainNext(aBefore, aSum, e->aChain);
    e->bChain = 1;
  }
}

#define TDE_CHAIN_MAGIC "sqlite-tde-chain 1"

static void shipChainPath(Ship *p, char *z, size_t n){
  snprintf(z, n, "%s-tdeship-chain", p->zDb);
}

/* Load DB-tdeship-chain if it is of this history. */
static void shipChainLoad(Ship *p){
  char zPath[4200];
  TdeKv *kv = 0;
  uint8_t aH[16], aC[32];
  shipChainPath(p, zPath, sizeof(zPath));
  if( tdeKvRead(zPath, TDE_CHAIN_MAGIC, &kv)!=TDE_OK ){ tdeErrClear(); return; }
  if( tdeUnhex(tdeKvGet(kv, "history"), aH, 16)==TDE_OK && memcmp(aH, p->aHistory, 16)==0
   && tdeUnhex(tdeKvGet(kv, "chain"), aC, 32)==TDE_OK ){
    pthread_mutex_lock(&p->mu);
    p->bChainBase = 1;
    p->chainBaseSeq = (uint64_t)tdeKvInt(kv, "seq");
    memcpy(p->aChainBase, aC, 32);
    pthread_mutex_unlock(&p->mu);
  }
  tdeKvFree(kv);
}

/* Before a trim that keeps records after keepAfter: record the chain at
** keepAfter (synced), so the trimmed spool continues the same chain. */
static int shipChainSave(Ship *p, uint64_t keepAfter){
  char zPath[4200], zHex[65];
  TdeKv *kv;
  const ShipIdx *e = 0;
  int rc;
  for(int i=p->nIdx-1; i>=0; i--){ if( p->aIdx[i].seq==keepAfter ){ e = &p->aIdx[i]; break; } }
  if( !e || !e->bChain ) return tdeErr(TDE_NOTFOUND, "record chain at %llu unknown", (unsigned long long)keepAfter);
  kv = tdeKvNew();
  if( !kv ) return TDE_NOMEM;
  tdeHex(p->aHistory, 16, zHex);
  tdeKvSet(kv, "history", "%s", zHex);
  tdeKvSet(kv, "seq", "%llu", (unsigned long long)keepAfter);
  tdeHex(e->aChain, 32, zHex);
  tdeKvSet(kv, "chain", "%s", zHex);
  shipChainPath(p, zPath, sizeof(zPath));
  rc = tdeKvWrite(kv, zPath, TDE_CHAIN_MAGIC, 1);
  tdeKvFree(kv);
  if( rc ) return rc;
  pthread_mutex_lock(&p->mu);
  p->bChainBase = 1;
  p->chainBaseSeq = keepAfter;
  memcpy(p->aChainBase, e->aChain, 32);
  pthread_mutex_unlock(&p->mu);
  return TDE_OK;
}

/* The capture thread's index of the spool, for lag in bytes. */
static void shipOnRec(void *pArg, const TdeRec *r, sqlite3_int64 iOff, size_t n, const uint8_t *aSum){
  Ship *p = pArg;
  if( !r ){ p->nIdx = 0; return; }
  if( r->kind==TDE_REC_MARK ) return;
  if( p->nIdx>=p->nIdxAlloc ){
    int nNew = p->nIdxAlloc*2 + 256;
    ShipIdx *aNew = sqlite3_realloc64(p->aIdx, sizeof(ShipIdx)*(sqlite3_uint64)nNew);
    if( !aNew ) return;
    p->aIdx = aNew;
    p->nIdxAlloc = nNew;
  }
  p->aIdx[p->nIdx].seq = r->seq;
  p->aIdx[p->nIdx].iOff = iOff;
  p->aIdx[p->nIdx].n = (uint32_t)n;
  p->aIdx[p->nIdx].kind = r->kind;
  p->aIdx[p->nIdx].tCapture = r->tCapture;
  shipChainRec(p, r, aSum, p->nIdx ? &p->aIdx[p->nIdx-1] : 0, &p->aIdx[p->nIdx]);
  p->nIdx++;
}

static void peerOnRec(void *pArg, const TdeRec *r, sqlite3_int64 iOff, size_t n, const uint8_t *aSum){
  ShipPeer *q = pArg;
  ShipIdx *e, *pPrev;
  if( !r ){ q->nIdx = 0; return; }
  if( r->kind==TDE_REC_MARK ) return;
  if( q->nIdx>=q->nIdxAlloc ){
    int nNew = q->nIdxAlloc*2 + 256;
    ShipIdx *aNew = sqlite3_realloc64(q->aIdx, sizeof(ShipIdx)*(sqlite3_uint64)nNew);
    if( !aNew ) return;
    q->aIdx = aNew;
    q->nIdxAlloc = nNew;
  }
  q->aIdx[q->nIdx].seq = r->seq;
  q->aIdx[q->nIdx].iOff = iOff;
  q->aIdx[q->nIdx].n = (uint32_t)n;
  q->aIdx[q->nIdx].kind = r->kind;
  q->aIdx[q->nIdx].flags = r->flags;
  q->aIdx[q->nIdx].nLost = r->kind==TDE_REC_GAP && (r->flags & TDE_RECF_REWIND) ? r->iFirst : 0;
  q->aIdx[q->nIdx].tCapture = r->tCapture;
  memcpy(q->aIdx[q->nIdx].aSalt, r->aSalt, 8);
  q->aIdx[q->nIdx].iLast = r->iLast;
  q->aIdx[q->nIdx].bFrames = r->kind==TDE_REC_TXN && r->nFrame>0;
  e = &q->aIdx[q->nIdx];
  pPrev = q->nIdx ? &q->aIdx[q->nIdx-1] : 0;
  shipChainRec(q->pShip, r, aSum, pPrev, e);
  q->nIdx++;
}

static ShipIdx *peerFind(ShipPeer *q, uint64_t seq){
  int lo = 0, hi = q->nIdx - 1;
  while( lo<=hi ){
    int mid = (lo+hi)/2;
    if( q->aIdx[mid].seq==seq ) return &q->aIdx[mid];
    if( q->aIdx[mid].seq<seq ) lo = mid+1; else hi = mid-1;
  }
  return 0;
}

/* The signed head (sign.c) of record seq into aOut; TDE_NOTFOUND when the
** chain up to it is not known (the standby then needs a base copy). */
static int peerHead(ShipPeer *q, uint64_t seq, uint8_t *aOut){
  Ship *p = q->pShip;
  ShipIdx *e = peerFind(q, seq);
  if( !e || !e->bChain ) return TDE_NOTFOUND;
  return tdeHeadMake(p->pCfg->pSignKey, p->aDbid, p->aHistory, seq, e->aChain, aOut);
}

/* Send the signed head of record seq (just sent), when signing. */
static int peerSendHead(ShipPeer *q, TdeConn *pConn, uint64_t seq){
  uint8_t aHead[TDE_HEAD_BYTES];
  int rc;
  if( !q->pShip->pCfg->pSignKey || seq==0 ) return TDE_OK;
  rc = peerHead(q, seq, aHead);
  if( rc==TDE_OK ) rc = tdeConnSend(pConn, TDE_MSG_HEAD, aHead, sizeof(aHead), 0, 0);
  if( rc==TDE_OK ){ q->headSeq = seq; q->headSentMs = tdeNowMs(); }
  return rc;
}

static void peerSetState(ShipPeer *q, const char *zState){
  pthread_mutex_lock(&q->pShip->mu);
  snprintf(q->zState, sizeof(q->zState), "%s", zState);
  pthread_mutex_unlock(&q->pShip->mu);
}

static void peerNoteAck(ShipPeer *q, uint64_t seq){
  ShipIdx *e;
  int64_t nBytes = 0;
  pthread_mutex_lock(&q->pShip->mu);
  if( q->pShip->fdSync>=0 && !q->pDest && seq>q->pShip->ackBest ){   /* sync waits for standbys only */
    /* Sync mode: writers waiting for this position may return. */
    Ship *p = q->pShip;
    ShipIdx *a = peerFind(q, seq);
    p->ackBest = seq;
    if( a && a->bFrames
     && (!p->bAckValid || tdeSyncCovers(a->aSalt, a->iLast, p->aAckSalt, p->ackLast)) ){
      memcpy(p->aAckSalt, a->aSalt, 8);
      p->ackLast = a->iLast;
      p->bAckValid = 1;
      tdeSyncPublish(p->fdSync, p->bDegraded, p->aAckSalt, p->ackLast, 1);
    }
  }
  if( !q->bAcked || seq>q->ackedSeq ){
    q->ackedSeq = seq;
    e = peerFind(q, seq);
    if( e ) q->ackedCapture = e->tCapture;
  }
  q->bAcked = 1;
  for(int i=q->nIdx-1; i>=0 && q->aIdx[i].seq>q->ackedSeq; i--) nBytes += q->aIdx[i].n;
  q->lagBytes = nBytes;
  pthread_mutex_unlock(&q->pShip->mu);
}

/*
** Base copy for one standby: under the WAL write lock, capture, copy the
** database file and apply WAL frames 1..mxFrame to the copy.  *pSeq gets
** the spool sequence the copy is consistent with.  The copy is a
** temporary file the caller sends and removes.
*/
static int peerMakeBase(ShipPeer *q, TdeSpool *s, const char *zTmp, uint64_t *pSeq, uint64_t *pCapture){
  Ship *p = q->pShip;
  ShipWal w = { 0, 0, 0, 0 };
  TdeWalEnd end;
  int fdDb = -1, fdOut = -1, nNew = 0, eWait = 0, rc;
  uint8_t *aBuf = 0;
  w.pFile = 0;
  rc = q->bLock ? TDE_OK : shipOpenDb(p, &q->lock);
  if( rc ) return rc;
  q->bLock = 1;
  /* The checkpoint lock too: no checkpoint writes the file while it is
  ** copied. */
  while( (rc = shipBegin(p, &q->lock, TDE_WALOCK_CKPT | TDE_WALOCK_DBFILE, &end, &eWait))==TDE_LOCKED && !*p->pbStop ){
    msleep(p->nCycleMs);
  }
  if( rc ) return rc;
  rc = shipCaptureLocked(p, s, &end, &nNew);
  if( rc ) goto done;
  *pSeq = s->pos.seq;
  *pCapture = tdeNowMs();
  aBuf = sqlite3_malloc(SHIP_CHUNK + 65536);
  if( !aBuf ){ rc = TDE_NOMEM; goto done; }
  {
    int fdShm;
    shipFds(p, &fdDb, &fdShm);
  }
  fdOut = open(zTmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if( fdDb<0 || fdOut<0 ){ rc = tdeErr(TDE_IO, "base copy: %s", strerror(errno)); goto done; }
  for(off_t off=0;; ){
    ssize_t k = pread(fdDb, aBuf, SHIP_CHUNK, off);
    if( k<0 && errno==EINTR ) continue;
    if( k<0 ){ rc = tdeErr(TDE_IO, "%s: %s", p->zDb, strerror(errno)); goto done; }
    if( k==0 ) break;
    if( pwrite(fdOut, aBuf, (size_t)k, off)!=k ){ rc = tdeErr(TDE_IO, "%s: %s", zTmp, strerror(errno)); goto done; }
    off += k;
  }
  /* Frames 1..mxFrame of the current WAL generation: a checkpoint may
  ** have copied some of them into the database file while we read it;
  ** applying them all afterwards makes the copy exact. */
  shipWalOpen(p, &w);
  if( w.pFile && end.bKnown && end.mxFrame>0 ){
    TdeRawSrc wal = { w.pFile, -1 };
    uint8_t aWalHdr[TDE_WAL_HDR];
    int bShort;
    uint32_t pgsz, nTrunc = 0;
    TdeLayout L;      /* the copied header region's (docs/FORMAT.md "Format version 3: Standby") */
    rc = tdeRawRead(&wal, aWalHdr, TDE_WAL_HDR, 0, &bShort);
    if( rc ) goto done;
    pgsz = tdeGet32(aWalHdr+8);
    rc = tdeCopyLayout(fdOut, pgsz, &L);
    if( rc ) goto done;
    if( !bShort && memcmp(aWalHdr+16, end.aSalt, 8)==0 && pgsz>=512 && pgsz<=65536 ){
      for(uint32_t i=1; i<=end.mxFrame; i++){
        sqlite3_int64 off = TDE_WAL_HDR + (sqlite3_int64)(i-1)*(TDE_FRAME_HDR + pgsz);
        rc = tdeRawRead(&wal, aBuf, (int)(TDE_FRAME_HDR + pgsz), off, &bShort);
        if( rc ) goto done;
        if( bShort || memcmp(aBuf+8, end.aSalt, 8)!=0 ){
          rc = tdeErr(TDE_FORMAT, "base copy: WAL frame %u missing or of another generation", i);
          goto done;
        }
        if( pwrite(fdOut, aBuf+TDE_FRAME_HDR, pgsz, (off_t)tdeLayoutPageOff(&L, tdeGet32(aBuf)))!=(ssize_t)pgsz ){
          rc = tdeErr(TDE_IO, "%s: %s", zTmp, strerror(errno));
          goto done;
        }
        if( tdeGet32(aBuf+4) ) nTrunc = tdeGet32(aBuf+4);
      }
      if( nTrunc && ftruncate(fdOut, (off_t)tdeLayoutPhysSize(&L, (int64_t)nTrunc*pgsz))!=0 ){
        rc = tdeErr(TDE_IO, "%s: %s", zTmp, strerror(errno));
      }
    }
  }
done:
  shipEnd(&q->lock);
  shipWalClose(&w);
  if( fdOut>=0 ) close(fdOut);
  sqlite3_free(aBuf);
  return rc;
}

static int peerSendBase(ShipPeer *q, TdeConn *pConn, TdeSpool *s, uint64_t *pSeq){
  Ship *p = q->pShip;
  char zTmp[4200];
  uint8_t aBegin[48], aHdr[8], sum[32];
  uint8_t *aBuf = 0;
  uint64_t seq = 0, tCap = 0;
  unsigned int nSum;
  struct stat st;
  int fdIn = -1, rc;
  EVP_MD_CTX *c = 0;
  snprintf(zTmp, sizeof(zTmp), "%s-tdeship-base%d", p->zDb, q->iPeer);
  peerSetState(q, "base copy");
  rc = peerMakeBase(q, s, zTmp, &seq, &tCap);
  if( rc==TDE_OK ) rc = tdeSpoolSync(s);      /* the copy's sequence must be durable */
  if( rc ) goto done;
  pthread_mutex_lock(&p->mu);
  if( seq>p->durableSeq ) p->durableSeq = seq;
  pthread_mutex_unlock(&p->mu);
  fdIn = open(zTmp, O_RDONLY | O_CLOEXEC);
  if( fdIn<0 || fstat(fdIn, &st)!=0 ){ rc = tdeErr(TDE_IO, "%s: %s", zTmp, strerror(errno)); goto done; }
  tdeLog(TDE_LOG_INFO, "ship %s: sending a base copy (%lld bytes, sequence %llu)", q->zAddr,
         (long long)st.st_size, (unsigned long long)seq);
  tdePut64(aBegin, seq);
  memcpy(aBegin+8, p->aHistory, 16);
  tdePut64(aBegin+24, (uint64_t)st.st_size);
  tdePut64(aBegin+32, tCap);
  /* Flags: 1 the primary lost transactions this standby may have applied
  ** (it must not take the copy silently); then from which sequence. */
  memset(aBegin+40, 0, 8);
  if( q->rewindFrom ){
    aBegin[40] = 1;
    tdePut32(aBegin+44, (uint32_t)(q->rewindFrom > 0xffffffffu ? 0xffffffffu : q->rewindFrom));
  }
  rc = tdeConnSend(pConn, TDE_MSG_BASE_BEGIN, aBegin, sizeof(aBegin), 0, 0);
  aBuf = sqlite3_malloc(SHIP_CHUNK);
  c = EVP_MD_CTX_new();
  if( rc==TDE_OK && (!aBuf || !c) ) rc = TDE_NOMEM;
  if( rc==TDE_OK && EVP_DigestInit_ex(c, EVP_sha256(), 0)!=1 ) rc = TDE_CRYPTO;
  for(off_t off=0; rc==TDE_OK && off<st.st_size; ){
    ssize_t k = pread(fdIn, aBuf, SHIP_CHUNK, off);
    if( k<=0 ){ rc = tdeErr(TDE_IO, "%s: short read", zTmp); break; }
    tdePut64(aHdr, (uint64_t)off);
    if( EVP_DigestUpdate(c, aBuf, (size_t)k)!=1 ){ rc = TDE_CRYPTO; break; }
    rc = tdeConnSend(pConn, TDE_MSG_BASE_DATA, aHdr, 8, aBuf, (size_t)k);
    off += k;
  }
  if( rc==TDE_OK && EVP_DigestFinal_ex(c, sum, &nSum)!=1 ) rc = TDE_CRYPTO;
  if( rc==TDE_OK && p->pCfg->pSignKey ){
    /* Signed: the copy's SHA-256 (its pages and header region), its
    ** sequence and the record chain there, which the standby continues. */
    uint8_t aSigned[TDE_BASE_SIGNED], aEnd[32 + 32 + TDE_SIG_BYTES], aChain[32];
    ShipIdx *e = peerFind(q, seq);
    if( e && e->bChain ) memcpy(aChain, e->aChain, 32);
    else tdeChainAnchor(p->aHistory, seq, aChain);   /* the chain starts again here */
    tdeBaseSigned(p->aDbid, p->aHistory, seq, (uint64_t)st.st_size, sum, aChain, tCap, aSigned);
    memcpy(aEnd, sum, 32);
    memcpy(aEnd+32, aChain, 32);
    rc = tdeSign(p->pCfg->pSignKey, aSigned, sizeof(aSigned), aEnd+64);
    if( rc==TDE_OK ) rc = tdeConnSend(pConn, TDE_MSG_BASE_END, aEnd, sizeof(aEnd), 0, 0);
  }else if( rc==TDE_OK ){
    rc = tdeConnSend(pConn, TDE_MSG_BASE_END, sum, 32, 0, 0);
  }
  if( rc==TDE_OK ) *pSeq = seq;
done:
  EVP_MD_CTX_free(c);
  sqlite3_free(aBuf);
  if( fdIn>=0 ) close(fdIn);
  unlink(zTmp);
  return rc;
}

/* Where one connection's stream stands (peerSession). */
typedef struct PeerStream {
  uint64_t next;              /* the next record to send */
  uint64_t acked;             /* the standby acknowledged up to here */
  int bNeedBase;              /* the standby needs a base copy first */
  int nSinceHead;             /* records sent since the last signed head */
  size_t nBytesSinceHead;
  double tBeat;               /* last heartbeat sent */
  double tProgress;           /* last acknowledgement that moved (or resend) */
} PeerStream;

/* Hello, and the standby's answer: where it stands (st->acked) and
** whether it needs a base copy (st->bNeedBase). */
static int peerHello(ShipPeer *q, TdeConn *pConn, TdeSpool *s, PeerStream *st){
  Ship *p = q->pShip;
  uint8_t aHello[8+16+16+32+8];
  uint8_t *aBody = 0;
  size_t nBody = 0;
  int eType = 0, rc;
  uint64_t acked;

  memcpy(aHello, TDE_WIRE_MAGIC, 8);
  memcpy(aHello+8, p->aDbid, 16);
  memcpy(aHello+24, p->aHistory, 16);
  memcpy(aHello+40, p->aKeyCheck, 32);
  tdePut64(aHello+72, s->pos.seq);
  rc = tdeConnSend(pConn, TDE_MSG_HELLO, aHello, sizeof(aHello), 0, 0);
  if( rc==TDE_OK ) rc = tdeConnRecv(pConn, 15000, &eType, &aBody, &nBody);
  if( rc==TDE_NOTFOUND ) return tdeErr(TDE_IO, "no answer to hello");
  if( rc ) return rc;
  if( eType==TDE_MSG_REFUSE ){
    tdeLog(TDE_LOG_ERROR, "ship %s: the standby refused: %.*s", q->zAddr, (int)nBody, (const char*)aBody);
    sqlite3_free(aBody);
    peerSetState(q, "refused");
    return TDE_AUTH;
  }
  if( eType!=TDE_MSG_HELLO_OK || nBody<25 ){
    sqlite3_free(aBody);
    return tdeErr(TDE_FORMAT, "unexpected answer to hello");
  }
  acked = tdeGet64(aBody);
  if( !(aBody[8] & 1) || memcmp(aBody+9, p->aHistory, 16)!=0 || acked>s->pos.seq ){
    st->bNeedBase = 1;
  }else if( acked<s->pos.seq ){
    ShipIdx *e = peerFind(q, acked+1);
    if( !e ) st->bNeedBase = 1;
  }
  if( !st->bNeedBase && p->pCfg->pSignKey && (aBody[8] & 2) ){
    /* The standby verifies: continue its chain, or give it a signed base
    ** copy (flag 4: it knows its chain, which follows at 25). */
    ShipIdx *e = peerFind(q, acked);
    uint8_t aBefore[32];
    const uint8_t *aMine = 0;
    if( e && e->bChain ) aMine = e->aChain;
    else if( q->nIdx>0 && q->aIdx[0].seq==acked+1 && shipChainBefore(p, acked+1, 1, aBefore) ) aMine = aBefore;
    if( !(aBody[8] & 4) || nBody<57 || !aMine || memcmp(aMine, aBody+25, 32)!=0 ){
      tdeLog(TDE_LOG_INFO, "ship %s: the standby's record chain at %llu is not this spool's: a signed base copy",
             q->zAddr, (unsigned long long)acked);
      st->bNeedBase = 1;
    }
  }
  sqlite3_free(aBody);
  st->acked = acked;
  return TDE_OK;
}

/* Send the records the standby may take now: durable, within the window,
** a signed head every SHIP_HEAD_EVERY records or SHIP_HEAD_BYTES bytes and
** after the last.  A gap or a damaged record: st->bNeedBase. */
static int peerSendRecords(ShipPeer *q, TdeConn *pConn, TdeSpool *s, PeerStream *st){
  Ship *p = q->pShip;
  int rc;
  while( st->next<=s->pos.seq && st->next<=shipDurable(p) && st->next<=st->acked+SHIP_WINDOW ){
    ShipIdx *e = peerFind(q, st->next);
    TdeRec r;
    uint8_t *aRec = 0;
    size_t nRec = 0;
    if( !e || e->kind==TDE_REC_GAP ){
      if( e && e->nLost && st->acked+e->nLost>=e->seq ){
        /* This standby may hold transactions the primary lost. */
        q->rewindFrom = e->seq>e->nLost ? e->seq - e->nLost : 1;
      }
      st->bNeedBase = 1;
      return TDE_OK;
    }
    rc = tdeSpoolRead(s, e->iOff, &r, &aRec, &nRec);
    if( rc==TDE_FORMAT || rc==TDE_NOTFOUND ){
      /* A synced record that fails its checksum: damage to the spool. */
      tdeLog(TDE_LOG_WARNING, "ship %s: spool record %llu is damaged (%s); sending a base copy",
             q->zAddr, (unsigned long long)st->next, tde_last_error());
      st->bNeedBase = 1;
      return TDE_OK;
    }
    if( rc ) return rc;
    rc = tdeConnSend(pConn, TDE_MSG_TXN, aRec, nRec, 0, 0);
    sqlite3_free(aRec);
    if( rc ) return rc;
    pthread_mutex_lock(&p->mu);
    q->sentSeq = st->next;
    pthread_mutex_unlock(&p->mu);
    st->nSinceHead++;
    st->nBytesSinceHead += nRec;
    if( st->nSinceHead>=SHIP_HEAD_EVERY || st->nBytesSinceHead>=SHIP_HEAD_BYTES ){
      rc = peerSendHead(q, pConn, st->next);
      if( rc==TDE_NOTFOUND ){ st->bNeedBase = 1; return TDE_OK; }
      if( rc ) return rc;
      st->nSinceHead = 0;
      st->nBytesSinceHead = 0;
    }
    st->next++;
  }
  if( st->next-1>q->headSeq && st->nSinceHead>0 ){
    rc = peerSendHead(q, pConn, st->next-1);
    if( rc==TDE_NOTFOUND ) st->bNeedBase = 1;
    else if( rc ) return rc;
    st->nSinceHead = 0;
    st->nBytesSinceHead = 0;
  }
  return TDE_OK;
}

/* One message from the standby, if one comes within 20 ms: an
** acknowledgement, a request to resend, or the end of the stream. */
static int peerReadAnswer(ShipPeer *q, TdeConn *pConn, PeerStream *st){
  uint8_t *aBody = 0;
  size_t nBody = 0;
  int eType = 0, rc;
  rc = tdeConnRecv(pConn, 20, &eType, &aBody, &nBody);
  if( rc==TDE_NOTFOUND ) return TDE_OK;
  if( rc ) return rc;
  if( eType==TDE_MSG_ACK && nBody>=8 ){
    uint64_t a = tdeGet64(aBody);
    if( a>st->next-1 ) a = st->next-1;      /* never beyond what was sent */
    if( a>st->acked ){ st->acked = a; st->tProgress = nowSec(); }
    peerNoteAck(q, st->acked);
  }else if( eType==TDE_MSG_RESEND && nBody>=8 ){
    uint64_t from = tdeGet64(aBody);
    tdeLog(TDE_LOG_INFO, "ship %s: standby asks to resend from %llu", q->zAddr, (unsigned long long)from);
    if( from>st->next ) from = st->next;    /* never beyond what was sent */
    if( from>0 ){ st->next = from; if( from-1>st->acked ) st->acked = from-1; st->tProgress = nowSec(); }
  }else if( eType==TDE_MSG_REFUSE ){
    tdeLog(TDE_LOG_ERROR, "ship %s: the standby stopped the stream: %.*s", q->zAddr, (int)nBody, (const char*)aBody);
    sqlite3_free(aBody);
    return TDE_ERROR;
  }
  sqlite3_free(aBody);
  return TDE_OK;
}

/* Every 0.5 s: where the primary stands, and with a signing key the
** signed head of the newest durable record (the standby's lag is computed
** from it alone). */
static int peerHeartbeat(ShipPeer *q, TdeConn *pConn, TdeSpool *s, PeerStream *st){
  Ship *p = q->pShip;
  uint8_t aBeat[32 + TDE_HEAD_BYTES];
  size_t nBeat = 32;
  uint64_t capMs;
  int64_t lag;
  int rc;
  if( nowSec()-st->tBeat <= 0.5 ) return TDE_OK;
  pthread_mutex_lock(&p->mu);
  capMs = p->capturedMs;
  lag = q->lagBytes;
  pthread_mutex_unlock(&p->mu);
  tdePut64(aBeat, s->pos.seq);
  tdePut64(aBeat+8, capMs);
  tdePut64(aBeat+16, tdeNowMs());
  tdePut64(aBeat+24, (uint64_t)lag);
  if( p->pCfg->pSignKey && q->nIdx>0 ){
    uint64_t d = shipDurable(p), h = q->aIdx[q->nIdx-1].seq;
    if( d<h ) h = d;
    if( h>0 && peerHead(q, h, aBeat+32)==TDE_OK ) nBeat += TDE_HEAD_BYTES;
  }
  rc = tdeConnSend(pConn, TDE_MSG_HEARTBEAT, aBeat, nBeat, 0, 0);
  if( rc ) return rc;
  st->tBeat = nowSec();
  return TDE_OK;
}

/* The base copy the standby needs; the stream goes on after it. */
static int peerStreamBase(ShipPeer *q, TdeConn *pConn, TdeSpool *s, PeerStream *st){
  uint64_t seq = 0;
  int rc = peerSendBase(q, pConn, s, &seq);
  q->rewindFrom = 0;
  if( rc ) return rc;
  rc = tdeSpoolScan(s, 0);
  if( rc ) return rc;
  st->next = seq + 1;
  st->acked = seq;           /* the standby acknowledges the base with seq */
  st->bNeedBase = 0;
  peerSetState(q, "streaming");
  return TDE_OK;
}

/* One connection to the standby: hello, then stream until an error. */
static int peerSession(ShipPeer *q, TdeConn *pConn, TdeSpool *s){
  Ship *p = q->pShip;
  PeerStream st;
  int rc;

  memset(&st, 0, sizeof(st));
  st.tProgress = nowSec();
  rc = tdeSpoolScan(s, 0);
  if( rc==TDE_OK ) rc = peerHello(q, pConn, s, &st);
  if( rc ) return rc;
  q->headSeq = 0;
  if( !st.bNeedBase ) peerNoteAck(q, st.acked);
  st.next = st.acked + 1;
  tdeLog(TDE_LOG_INFO, "ship %s: connected; standby at sequence %llu%s", q->zAddr,
         (unsigned long long)st.acked, st.bNeedBase ? ", needs a base copy" : "");
  peerSetState(q, "streaming");

  while( !*p->pbStop ){
    if( st.bNeedBase ){
      rc = peerStreamBase(q, pConn, s, &st);
      if( rc ) return rc;
    }
    rc = tdeSpoolScan(s, 0);
    if( rc==TDE_OK ) rc = peerSendRecords(q, pConn, s, &st);
    if( rc ) return rc;
    if( st.bNeedBase ) continue;
    if( st.next>st.acked+1 && nowSec()-st.tProgress>1.5 ){
      /* Nothing acknowledged for a while although records are in flight:
      ** they (or the acknowledgements) were lost; send them again. */
      tdeLog(TDE_LOG_INFO, "ship %s: no acknowledgement for 1.5 s; resending from %llu", q->zAddr,
             (unsigned long long)st.acked+1);
      st.next = st.acked + 1;
      st.tProgress = nowSec();
      continue;
    }
    rc = peerReadAnswer(q, pConn, &st);
    if( rc==TDE_OK ) rc = peerHeartbeat(q, pConn, s, &st);
    if( rc ) return rc;
  }
  return TDE_OK;
}

/* A destination's thread: its own reader of the spool, then its xRun
** until the shipper stops (run again after an error, 1 s later). */
static void destMain(ShipPeer *q){
  Ship *p = q->pShip;
  while( !*p->pbStop ){
    int rc;
    if( !q->pSpool ){
      rc = tdeSpoolOpen(p->zDb, 0, p->aDbid, &q->pSpool);
      if( rc ){ q->pSpool = 0; msleep(200); continue; }
      q->pSpool->xOnRec = peerOnRec;
      q->pSpool->pOnRecArg = q;
    }
    rc = q->pDest->xRun((TdeShipLink*)q, q->pDest->pArg);
    if( rc && !*p->pbStop ){
      tdeLog(TDE_LOG_WARNING, "ship %s: %s stopped (%s); starting it again", p->zDb, q->zAddr, tde_last_error());
      for(int i=0; i<10 && !*p->pbStop; i++) msleep(100);
    }
  }
  tdeSpoolClose(q->pSpool);
  q->pSpool = 0;
  if( q->bLock ){ tdeWalLockClose(&q->lock); q->bLock = 0; }
}

static void *peerMain(void *pArg){
  ShipPeer *q = pArg;
  Ship *p = q->pShip;
  TdeSpool *s = 0;
  int bQuiet = 0, bTold = 0;
  if( q->pDest ){
    destMain(q);
    return 0;
  }
  while( !*p->pbStop ){
    TdeConn conn;
    int fd = -1, rc;
    if( !s ){
      rc = tdeSpoolOpen(p->zDb, 0, p->aDbid, &s);
      if( rc ){ msleep(200); continue; }
      s->xOnRec = peerOnRec;
      s->pOnRecArg = q;
    }
    rc = tdeNetConnect(q->zAddr, 2000, &fd);
    if( rc ){
      if( !bQuiet ) tdeLog(TDE_LOG_WARNING, "ship %s: %s; retrying", q->zAddr, tde_last_error());
      bQuiet = 1;
      peerSetState(q, "disconnected");
      msleep(300);
      continue;
    }
    bQuiet = 0;
    tdeConnOpen(&conn, fd);
    {
      char zHost[256], zWhy[512];
      int port;
      rc = tdeNetParseAddr(q->zAddr, zHost, sizeof(zHost), &port);
      if( rc==TDE_OK ) rc = tdeTlsClient(p->pCfg, &conn, zHost, zWhy, sizeof(zWhy));
      if( rc ){
        /* Not the standby we were told of: never send it anything. */
        tdeLog(TDE_LOG_ERROR, "ship %s: refusing the standby: %s", q->zAddr, zWhy);
        tdeConnClose(&conn);
        peerSetState(q, "refused");
        msleep(2000);
        continue;
      }
      if( !bTold ){
        tdeLog(TDE_LOG_INFO, "ship %s: connected over %s to %s", q->zAddr, tdeConnProto(&conn),
               conn.zPeerId[0] ? conn.zPeerId : "an unauthenticated peer (--insecure-no-tls)");
        bTold = 1;
      }
    }
    rc = peerSession(q, &conn, s);
    tdeConnClose(&conn);
    if( !*p->pbStop ){
      tdeLog(TDE_LOG_WARNING, "ship %s: connection lost (%s); reconnecting", q->zAddr,
             rc ? tde_last_error() : "closed");
      peerSetState(q, rc==TDE_AUTH ? "refused" : "disconnected");
      msleep(rc==TDE_AUTH ? 2000 : 200);
    }
  }
  tdeSpoolClose(s);
  if( q->bLock ){ tdeWalLockClose(&q->lock); q->bLock = 0; }
  return 0;
}

/* ---- main loop ---------------------------------------------------------- */

static void shipAudit(Ship *p, const char *zOp, const char *zDetail);

/* Sync mode: no standby acknowledged a captured transaction within the
** timeout: fall back to async (writers stop waiting), say so in the state
** file and the audit log; back to sync once a standby caught up. */
static void shipSyncCheck(Ship *p){
  uint64_t now = tdeNowMs(), oldest = 0;
  int bBehind, bChange = 0, bDeg;
  pthread_mutex_lock(&p->mu);
  bBehind = p->capturedSeq > p->ackBest;
  if( bBehind ){
    /* Capture time of the oldest transaction no standby acknowledged. */
    for(int i=p->nIdx-1; i>=0 && p->aIdx[i].seq>p->ackBest; i--) oldest = p->aIdx[i].tCapture;
    if( oldest<p->startMs ) oldest = p->startMs;   /* standbys get the timeout to say hello */
  }
  if( !p->bDegraded && bBehind && oldest && now>oldest+(uint64_t)p->pCfg->syncTimeoutMs ){
    p->bDegraded = 1;
    bChange = 1;
  }else if( p->bDegraded && !bBehind ){
    p->bDegraded = 0;
    bChange = 1;
  }
  bDeg = p->bDegraded;
  if( bChange ) tdeSyncPublish(p->fdSync, p->bDegraded, p->aAckSalt, p->ackLast, p->bAckValid);
  pthread_mutex_unlock(&p->mu);
  if( bChange ){
    char zD[128];
    snprintf(zD, sizeof(zD), bDeg ? "no standby acknowledged within %d ms: commits continue async"
                                   : "a standby caught up: commits wait for it again (sync)", p->pCfg->syncTimeoutMs);
    tdeLog(TDE_LOG_WARNING, "ship %s: sync mode %s: %s", p->zDb, bDeg ? "degraded" : "restored", zD);
    shipAudit(p, bDeg ? "repl_sync_degraded" : "repl_sync_restored", zD);
  }
}

/* One audit line (audit/audit.h format) in the shipper's audit log
** (repl_audit_log, default DB-tdeship-audit). */
static void shipAudit(Ship *p, const char *zOp, const char *zDetail){
  TdeAuditRec r;
  char zLine[1024], zPath[4200];
  int n, fd;
  if( p->pCfg->zAudit[0] ) snprintf(zPath, sizeof(zPath), "%s", p->pCfg->zAudit);
  else snprintf(zPath, sizeof(zPath), "%s-tdeship-audit", p->zDb);
  tdeAuditInit(&r, zOp);
  r.zDbPath = p->zDb;
  r.aDbid = p->aDbid;
  r.zDetail = zDetail;
  n = tdeAuditFormat(&r, (int64_t)tdeNowMs(), (int)getpid(), zLine, sizeof(zLine));
  if( n<0 ) return;
  fd = open(zPath, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if( fd<0 || write(fd, zLine, (size_t)n)!=n ){
    tdeLog(TDE_LOG_WARNING, "ship %s: cannot write the audit log %s: %s", p->zDb, zPath, strerror(errno));
  }
  if( fd>=0 ) close(fd);
}

/* One shipper per database: two would both append to the spool and
** collide on its temporary files.  flock (not a POSIX lock: those are
** SQLite's) on DB-tdeship-lock, which holds the owner's pid.  The file is
** never removed: removing it would let a third shipper lock a new file
** while the second holds the old one. */
static int shipLockInstance(Ship *p){
  char zPath[4200], zPid[32];
  int n;
  snprintf(zPath, sizeof(zPath), "%s-tdeship-lock", p->zDb);
  p->fdLock = open(zPath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if( p->fdLock<0 ) return tdeErr(TDE_IO, "%s: %s", zPath, strerror(errno));
  if( flock(p->fdLock, LOCK_EX | LOCK_NB)!=0 ){
    ssize_t k = pread(p->fdLock, zPid, sizeof(zPid)-1, 0);
    int pid = 0;
    zPid[k>0 ? k : 0] = 0;
    pid = atoi(zPid);
    if( pid>0 ){
      return tdeErr(TDE_LOCKED, "%s: a shipper is already running on this database (pid %d); stop it first",
                    p->zDb, pid);
    }
    return tdeErr(TDE_LOCKED, "%s: a shipper is already running on this database; stop it first", p->zDb);
  }
  n = snprintf(zPid, sizeof(zPid), "%d\n", (int)getpid());
  if( ftruncate(p->fdLock, 0)!=0 || pwrite(p->fdLock, zPid, (size_t)n, 0)!=n ){
    return tdeErr(TDE_IO, "%s: %s", zPath, strerror(errno));
  }
  return TDE_OK;
}

/* Say how the records are signed, and that plaintext is plaintext. */
static int shipAnnounce(Ship *p){
  if( p->pCfg->pSignKey ){
    char zFp[65];
    int rc = tdeKeyFingerprint(p->pCfg->pSignKey, zFp);
    if( rc ) return rc;
    tdeLog(TDE_LOG_INFO, "ship %s: signing the record chain with Ed25519 key %s (SHA-256 of the public key)",
           p->zDb, zFp);
    shipAudit(p, "repl_sign_key_use", zFp);
  }else{
    tdeLog(TDE_LOG_WARNING, "ship %s: no repl_sign_key: records and base copies are not signed (a standby with "
           "repl_primary_pubkey refuses them)", p->zDb);
  }
  if( p->pCfg->bInsecure && p->nTo>0 ){
    tdeLog(TDE_LOG_WARNING, "ship %s: --insecure-no-tls: the standby link is plaintext and unauthenticated; "
           "anyone on the network path can read, inject or redirect it", p->zDb);
  }
  return TDE_OK;
}

/* The spool.  A damaged spool (or another database's) is kept aside for
** diagnosis and a new one started; its new history makes every standby
** take a base copy, so nothing it held is needed. */
static int shipOpenSpool(Ship *p, TdeSpool **ps){
  const char *zAbs = p->zDb;
  int rc = tdeSpoolOpen(zAbs, 1, p->aDbid, ps);
  if( rc==TDE_FORMAT ){
    char *zOld = sqlite3_mprintf("%s-tdeship", zAbs);
    char *zAside = sqlite3_mprintf("%s-tdeship.damaged", zAbs);
    tdeLog(TDE_LOG_WARNING, "ship %s: %s; moving it to %s and starting a new spool (standbys take a "
           "base copy)", zAbs, tde_last_error(), zAside ? zAside : "?");
    rc = (zOld && zAside) ? TDE_OK : TDE_NOMEM;
    if( rc==TDE_OK && rename(zOld, zAside)!=0 ) rc = tdeErr(TDE_IO, "%s: rename: %s", zOld, strerror(errno));
    sqlite3_free(zOld);
    sqlite3_free(zAside);
    if( rc==TDE_OK ) rc = tdeSpoolOpen(zAbs, 1, p->aDbid, ps);
  }
  if( rc ) return rc;
  (*ps)->xOnRec = shipOnRec;
  (*ps)->pOnRecArg = p;
  memcpy(p->aHistory, (*ps)->aHistory, 16);
  shipChainLoad(p);
  return tdeSpoolScan(*ps, 1);
}

/* The first cycle runs before any sender starts (it creates the spool's
** first record). */
static int shipFirstCapture(Ship *p, TdeWalLock *pLock, TdeSpool *s){
  do{
    int rc = shipCycle(p, pLock, s);
    if( rc ) return rc;
    if( !s->pos.bValid ){
      shipWriteState(p, "starting");
      msleep(p->nCycleMs);
    }
  }while( !s->pos.bValid && !*p->pbStop );
  p->capturedSeq = s->pos.seq;
  p->capturedMs = tdeNowMs();
  return TDE_OK;
}

/* Protection mode sync: DB-tdeship-sync tells writers to wait for us. */
static int shipStartSync(Ship *p){
  char zT[32];
  int rc;
  if( !p->pCfg->bSync ) return TDE_OK;
  p->startMs = tdeNowMs();
  rc = tdeSyncCreate(p->zDb, (uint32_t)p->pCfg->syncTimeoutMs, &p->fdSync);
  if( rc ) return rc;
  snprintf(zT, sizeof(zT), "timeout %d ms", p->pCfg->syncTimeoutMs);
  shipAudit(p, "repl_sync_mode", zT);
  tdeLog(TDE_LOG_INFO, "ship %s: protection mode sync: a commit returns once a standby acknowledged it "
         "(or after %d ms, then async until the standbys catch up)", p->zDb, p->pCfg->syncTimeoutMs);
  return TDE_OK;
}

/* One sender thread per standby and per destination. */
static int shipStartPeers(Ship *p, const char *const *azTo, int nTo, const TdeShipDest *const *apDest, int nDest){
  int i, rc = TDE_OK, nAll = nTo + nDest;
  p->aPeer = sqlite3_malloc64(sizeof(ShipPeer)*(sqlite3_uint64)nAll);
  if( !p->aPeer ) return TDE_NOMEM;
  memset(p->aPeer, 0, sizeof(ShipPeer)*(size_t)nAll);
  p->nPeer = nAll;
  for(i=0; i<nAll; i++){
    ShipPeer *q = &p->aPeer[i];
    q->pShip = p;
    q->iPeer = i;
    q->pDest = i<nTo ? 0 : apDest[i-nTo];
    q->zAddr = q->pDest ? q->pDest->zName : azTo[i];
    snprintf(q->zState, sizeof(q->zState), "connecting");
  }
  for(i=0; i<nAll; i++){
    if( pthread_create(&p->aPeer[i].tid, 0, peerMain, &p->aPeer[i])!=0 ){
      rc = tdeErr(TDE_ERROR, "cannot start a sender thread");
      *(volatile int*)p->pbStop = 1;
      break;
    }
    p->aPeer[i].bThread = 1;
  }
  return rc;
}

/* Drop what every standby has acknowledged, once the spool is large. */
static int shipTrim(Ship *p, TdeWalLock *pLock, TdeSpool *s){
  uint64_t minAck = UINT64_MAX;
  TdeWalEnd end;
  int bAll = 1, eWait = 0, rc = TDE_OK;
  if( s->iEnd <= SHIP_TRIM_BYTES ) return TDE_OK;
  pthread_mutex_lock(&p->mu);
  for(int i=0; i<p->nPeer; i++){
    ShipPeer *q = &p->aPeer[i];
    if( q->pDest && q->pDest->nMaxSpool && (uint64_t)s->iEnd > q->pDest->nMaxSpool ){
      /* Bounded: a destination that cannot keep up (an unreachable
      ** bucket) is left behind; it takes a base copy when it is back. */
      if( !q->bLeftBehind ){
        tdeLog(TDE_LOG_WARNING, "ship %s: the spool is past %llu bytes: trimming it past %s, which will need "
               "a new base copy", p->zDb, (unsigned long long)q->pDest->nMaxSpool, q->zAddr);
      }
      q->bLeftBehind = 1;
      continue;
    }
    q->bLeftBehind = 0;
    if( !q->bAcked ) bAll = 0;
    else if( q->ackedSeq<minAck ) minAck = q->ackedSeq;
  }
  pthread_mutex_unlock(&p->mu);
  if( bAll && minAck==UINT64_MAX ) minAck = s->pos.seq>0 ? s->pos.seq - 1 : 0;   /* every one left behind */
  if( bAll && minAck!=UINT64_MAX && minAck>=s->firstSeq
   && shipBegin(p, pLock, TDE_WALOCK_DBFILE, &end, &eWait)==TDE_OK ){
    /* Only once the chain there is saved: the trimmed spool must
    ** continue it, or every standby would need a base copy. */
    if( tdeSpoolScan(s, 1)==TDE_OK && shipChainSave(p, minAck)==TDE_OK ) rc = tdeSpoolTrim(s, minAck);
    tdeErrClear();
    shipEnd(pLock);
  }
  return rc;
}

/* Until the next cycle.  Sync mode: a writer waits for us; look at the
** WAL index every millisecond and capture as soon as it moved. */
static void shipWaitCycle(Ship *p){
  double t0 = nowSec();
  TdeWalEnd seen, now;
  int fdDb0, fdShm0;
  if( p->fdSync<0 ){
    msleep(p->nCycleMs);
    return;
  }
  shipFds(p, &fdDb0, &fdShm0);
  shipShmEnd(fdShm0, &seen);
  while( !*p->pbStop && (nowSec()-t0)*1000.0 < p->nCycleMs ){
    msleep(1);
    shipShmEnd(fdShm0, &now);
    if( now.bKnown && (!seen.bKnown || now.mxFrame!=seen.mxFrame || memcmp(now.aSalt, seen.aSalt, 8)) ) break;
  }
}

/* Capture every cycle until stopped; then stop the senders. */
static int shipCaptureLoop(Ship *p, TdeWalLock *pLock, TdeSpool *s){
  double tState = 0;
  int rc = TDE_OK;
  tdeLog(TDE_LOG_INFO, "ship %s: capturing every %d ms from sequence %llu", p->zDb, p->nCycleMs,
         (unsigned long long)s->pos.seq);
  while( rc==TDE_OK && !*p->pbStop ){
    rc = shipCycle(p, pLock, s);
    if( rc ){
      tdeLog(TDE_LOG_ERROR, "ship %s: capture failed: %s", p->zDb, tde_last_error());
      break;
    }
    if( p->fdSync>=0 ) shipSyncCheck(p);
    if( nowSec()-tState > 0.2 ){
      shipWriteState(p, "running");
      tState = nowSec();
    }
    rc = shipTrim(p, pLock, s);
    shipWaitCycle(p);
  }
  return rc;
}

/* ---- the link of a destination (repl.h "destinations") ------------------ */

int tdeShipLinkStopped(TdeShipLink *l){ return *((ShipPeer*)l)->pShip->pbStop; }
const char *tdeShipLinkDb(TdeShipLink *l){ return ((ShipPeer*)l)->pShip->zDb; }

void tdeShipLinkIds(TdeShipLink *l, uint8_t *aDbid, uint8_t *aHistory, struct evp_pkey_st **ppSignKey){
  Ship *p = ((ShipPeer*)l)->pShip;
  memcpy(aDbid, p->aDbid, 16);
  memcpy(aHistory, p->aHistory, 16);
  *ppSignKey = p->pCfg->pSignKey;
}

int tdeShipLinkScan(TdeShipLink *l, uint64_t *pFirst, uint64_t *pDurable, uint64_t *pCaptureMs){
  ShipPeer *q = (ShipPeer*)l;
  uint64_t d;
  ShipIdx *e;
  int rc = tdeSpoolScan(q->pSpool, 0);
  if( rc ) return rc;
  d = shipDurable(q->pShip);
  if( d>q->pSpool->pos.seq ) d = q->pSpool->pos.seq;
  *pFirst = q->nIdx>0 ? q->aIdx[0].seq : 0;
  *pDurable = d;
  e = peerFind(q, d);
  *pCaptureMs = e ? e->tCapture : 0;
  return TDE_OK;
}

/* The chain before record e (index i): the one before it, or for the
** spool's first record what shipChainRec started it from. */
static int linkChainBefore(ShipPeer *q, int i, uint8_t *aOut){
  if( i>0 ){
    if( !q->aIdx[i-1].bChain || q->aIdx[i-1].seq+1!=q->aIdx[i].seq ) return 0;
    memcpy(aOut, q->aIdx[i-1].aChain, 32);
    return 1;
  }
  return shipChainBefore(q->pShip, q->aIdx[0].seq, 1, aOut);
}

int tdeShipLinkRecord(TdeShipLink *l, uint64_t seq, TdeRec *r, uint8_t **ppRec, size_t *pnRec,
                      uint8_t *aChainBefore, uint8_t *aChainAfter){
  ShipPeer *q = (ShipPeer*)l;
  ShipIdx *e = peerFind(q, seq);
  int rc;
  *ppRec = 0;
  if( !e || !e->bChain || !linkChainBefore(q, (int)(e - q->aIdx), aChainBefore) ){
    return tdeErr(TDE_NOTFOUND, "record %llu is not in the spool any more", (unsigned long long)seq);
  }
  rc = tdeSpoolRead(q->pSpool, e->iOff, r, ppRec, pnRec);
  if( rc ) return rc;
  if( r->seq!=seq ){
    sqlite3_free(*ppRec);
    *ppRec = 0;
    return tdeErr(TDE_FORMAT, "spool record at the place of %llu is %llu", (unsigned long long)seq,
                  (unsigned long long)r->seq);
  }
  memcpy(aChainAfter, e->aChain, 32);
  return TDE_OK;
}

int tdeShipLinkBase(TdeShipLink *l, const char *zTmp, uint64_t *pSeq, uint64_t *pCaptureMs, uint8_t *aChain){
  ShipPeer *q = (ShipPeer*)l;
  Ship *p = q->pShip;
  ShipIdx *e;
  int rc = peerMakeBase(q, q->pSpool, zTmp, pSeq, pCaptureMs);
  if( rc==TDE_OK ) rc = tdeSpoolSync(q->pSpool);      /* the copy's sequence must be durable */
  if( rc==TDE_OK ) rc = tdeSpoolScan(q->pSpool, 0);
  if( rc ) return rc;
  pthread_mutex_lock(&p->mu);
  if( *pSeq>p->durableSeq ) p->durableSeq = *pSeq;
  pthread_mutex_unlock(&p->mu);
  e = peerFind(q, *pSeq);
  if( e && e->bChain ) memcpy(aChain, e->aChain, 32);
  else tdeChainAnchor(p->aHistory, *pSeq, aChain);      /* the chain starts again here */
  return TDE_OK;
}

void tdeShipLinkAck(TdeShipLink *l, uint64_t seq){ peerNoteAck((ShipPeer*)l, seq); }

void tdeShipLinkState(TdeShipLink *l, const char *zState, const char *zError){
  ShipPeer *q = (ShipPeer*)l;
  pthread_mutex_lock(&q->pShip->mu);
  if( zState ) snprintf(q->zState, sizeof(q->zState), "%s", zState);
  if( zError ){
    snprintf(q->zError, sizeof(q->zError), "%s", zError);
    for(char *z = q->zError; *z; z++){ if( (unsigned char)*z<0x20 ) *z = ' '; }   /* one line of the state file */
    q->errorMs = zError[0] ? tdeNowMs() : 0;
  }
  pthread_mutex_unlock(&q->pShip->mu);
}

void tdeShipLinkAudit(TdeShipLink *l, const char *zOp, const char *zDetail){
  shipAudit(((ShipPeer*)l)->pShip, zOp, zDetail);
}

/* The shipper's configuration: TLS and the repl_* keys (none needed
** without standbys), and the signing key given apart from it. */
static int shipLoadCfg(Ship *p, const char *zReplConfig, const char *zSignKey, unsigned flags, int nTo){
  int rc;
  if( nTo==0 && !zReplConfig ) flags |= TDE_REPL_INSECURE_NO_TLS;   /* no connection is ever made */
  rc = tdeReplCfgLoad(zReplConfig, flags, 0, &p->pCfg);
  if( rc ) return rc;
  if( zSignKey ){
    if( p->pCfg->pSignKey ) return tdeErr(TDE_CONFIG, "a signing key both in the replication configuration and given apart");
    rc = tdeSignKeyLoad(zSignKey, &p->pCfg->pSignKey);
  }
  return rc;
}

TDE_API int tde_ship_run_v2(const char *zDb, const char *zConfig, const char *zReplConfig, unsigned flags,
                            const char *const *azTo, int nTo, int nCycleMs, volatile int *pbStop){
  if( nTo<1 ) return tdeErr(TDE_MISUSE, "tde_ship_run_v2: a database and at least one standby");
  return tdeShipRun(zDb, zConfig, zReplConfig, 0, flags, azTo, nTo, 0, 0, nCycleMs, pbStop);
}

int tdeShipRun(const char *zDb, const char *zConfig, const char *zReplConfig, const char *zSignKey,
               unsigned flags, const char *const *azTo, int nTo, const TdeShipDest *const *apDest, int nDest,
               int nCycleMs, volatile int *pbStop){
  Ship ship;
  Ship *p = &ship;
  TdeWalLock lock;
  TdeSpool *s = 0;
  char zAbs[4096];
  int rc, i;
  volatile int bNever = 0;

  (void)zConfig;                         /* no keystore: the lock needs no key (walock.c) */
  memset(p, 0, sizeof(*p));
  memset(&lock, 0, sizeof(lock));
  p->fdDb = p->fdShm = p->fdLock = p->fdSync = -1;
  if( !zDb || nTo<0 || nDest<0 || nTo+nDest<1 ){
    return tdeErr(TDE_MISUSE, "ship: a database and at least one standby or destination");
  }
  for(i=0; i<nTo; i++){
    char zHost[256];
    int port;
    if( tdeNetParseAddr(azTo[i], zHost, sizeof(zHost), &port) ) return TDE_CONFIG;
  }
  if( !realpath(zDb, zAbs) ) return tdeErr(TDE_NOTFOUND, "%s: %s", zDb, strerror(errno));
  p->nTo = nTo;
  rc = shipLoadCfg(p, zReplConfig, zSignKey, flags, nTo);
  if( rc ){ tdeReplCfgFree(p->pCfg); return rc; }
  p->zDb = zAbs;
  p->pbStop = pbStop ? pbStop : &bNever;
  p->nCycleMs = nCycleMs>0 ? nCycleMs : 50;
  pthread_mutex_init(&p->mu, 0);
  rc = shipReadIdentity(zAbs, p->aDbid, p->aKeyCheck);
  if( rc==TDE_OK ) rc = shipOpenDb(p, &lock);
  if( rc==TDE_OK ) rc = shipLockInstance(p);
  if( rc==TDE_OK ) rc = shipAnnounce(p);
  if( rc==TDE_OK ) rc = shipOpenSpool(p, &s);
  if( rc==TDE_OK ) rc = shipFirstCapture(p, &lock, s);
  if( rc==TDE_OK ) rc = shipStartSync(p);
  if( rc ) goto done;
  rc = shipStartPeers(p, azTo, nTo, apDest, nDest);
  if( !p->aPeer ) goto done;             /* no sender started */
  if( rc==TDE_OK ) rc = shipCaptureLoop(p, &lock, s);
  *(volatile int*)p->pbStop = 1;
  for(i=0; i<p->nPeer; i++){
    if( p->aPeer[i].bThread ) pthread_join(p->aPeer[i].tid, 0);
  }
  shipWriteState(p, "stopped");

done:
  if( p->aPeer ){
    for(i=0; i<p->nPeer; i++) sqlite3_free(p->aPeer[i].aIdx);
    sqlite3_free(p->aPeer);
  }
  sqlite3_free(p->aIdx);
  tdeSpoolClose(s);
  tdeWalLockClose(&lock);
  if( p->fdDb>=0 ) close(p->fdDb);       /* after every lock of ours */
  if( p->fdShm>=0 ) close(p->fdShm);
  if( p->fdSync>=0 ) tdeSyncRemove(zAbs, p->fdSync);   /* writers stop waiting */
  if( p->fdLock>=0 ) close(p->fdLock);   /* releases the flock */
  tdeReplCfgFree(p->pCfg);
  pthread_mutex_destroy(&p->mu);
  return rc;
}
