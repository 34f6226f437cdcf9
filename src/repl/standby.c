/*
** The standby (tde_standby_run, tde_standby_promote): receives the
** primary's transactions as ciphertext and applies them to its copy of the
** database without ever holding a key.
**
** Apply is atomic across crashes: a batch of whole transactions is first
** written to the redo log DB-tdestandby-log and synced; then, under the
** rollback-mode locks SQLite's unix VFS uses (so readers of the copy, with
** the key, see a transaction whole or not at all), the pages are written
** at 8192 + (pgno-1)*P, the file is truncated to the commit frame's size
** and synced, and the applied sequence is recorded in DB-tdestandby
** (temp file, fsync, rename); then the primary gets its acknowledgement.
** At start, log records after the recorded sequence are applied again
** (idempotent: whole pages at fixed positions).
**
** POSIX locks belong to the process: this process must never open the
** database through SQLite (closing that handle would drop our locks).
**
** Must never: apply a partial transaction, a transaction out of order,
** or a transaction of another database.
*/
#include "repl/repl.h"
#include "cipher/cipher.h"
#include "keys/keys.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <openssl/evp.h>

#define SB_BATCH_MAX    64
#define SB_BATCH_BYTES  (32<<20)

/* SQLite's unix VFS lock bytes (os_unix.c): readers hold a read lock on
** the SHARED range; a writer takes PENDING, then the SHARED range. */
#define SB_PENDING_BYTE  0x40000000
#define SB_SHARED_FIRST  (SB_PENDING_BYTE+2)
#define SB_SHARED_SIZE   510

typedef struct Standby {
  char zDb[4096];
  char zState[4200], zLog[4200], zLock[4200], zBase[4200];
  const char *zListen;
  volatile int *pbStop;
  int fdDb, fdLog, fdLock;
  int bHave;                  /* holds a copy (state file exists) */
  int bLocked;                /* this process holds DB-tdestandby-lock */
  uint8_t aDbid[16], aHistory[16];
  uint64_t applied, appliedCapture, appliedAt;
  uint32_t pgsz;              /* the copy's page size (0: not known yet) */
  uint64_t received, receivedCapture;
  uint64_t primarySeq, primaryCapture, primaryUnreceived;
  int64_t unappliedBytes;
  char zPeer[128];
  char zStatus[32];
  uint64_t tStateMs;
} Standby;

static void sbSleepMs(int ms){
  struct timespec ts = { ms/1000, (long)(ms%1000)*1000000L };
  while( nanosleep(&ts, &ts)!=0 && errno==EINTR ){}
}

static int sbPaths(Standby *p, const char *zDb){
  if( !realpath(zDb, p->zDb) ){
    /* A new standby: the file does not exist yet, its folder must. */
    char zDir[4096];
    const char *zSlash = strrchr(zDb, '/');
    if( zSlash ){
      size_t n = (size_t)(zSlash - zDb);
      if( n>=sizeof(zDir) ) return tdeErr(TDE_RANGE, "path too long");
      memcpy(zDir, zDb, n);
      zDir[n] = 0;
      if( n==0 ) snprintf(zDir, sizeof(zDir), "/");
    }else{
      snprintf(zDir, sizeof(zDir), ".");
    }
    {
      char zReal[4096];
      if( !realpath(zDir, zReal) ) return tdeErr(TDE_NOTFOUND, "%s: %s", zDir, strerror(errno));
      if( snprintf(p->zDb, sizeof(p->zDb), "%s/%s", zReal, zSlash ? zSlash+1 : zDb)>=(int)sizeof(p->zDb) ){
        return tdeErr(TDE_RANGE, "path too long");
      }
    }
  }
  snprintf(p->zState, sizeof(p->zState), "%s-tdestandby", p->zDb);
  snprintf(p->zLog, sizeof(p->zLog), "%s-tdestandby-log", p->zDb);
  snprintf(p->zLock, sizeof(p->zLock), "%s-tdestandby-lock", p->zDb);
  snprintf(p->zBase, sizeof(p->zBase), "%s-tdestandby-base", p->zDb);
  return TDE_OK;
}

/* Only one standby process (or promotion) per database copy. */
static int sbLockInstance(Standby *p){
  p->fdLock = open(p->zLock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if( p->fdLock<0 ) return tdeErr(TDE_IO, "%s: %s", p->zLock, strerror(errno));
  if( flock(p->fdLock, LOCK_EX | LOCK_NB)!=0 ){
    return tdeErr(TDE_LOCKED, "%s: a standby process is running on this database; stop it first", p->zDb);
  }
  p->bLocked = 1;
  return TDE_OK;
}

static int sbWriteState(Standby *p, int bSync){
  TdeKv *kv = tdeKvNew();
  char zHex[33];
  int rc;
  if( !kv ) return TDE_NOMEM;
  tdeHex(p->aDbid, 16, zHex);
  tdeKvSet(kv, "database_id", "%s", zHex);
  tdeHex(p->aHistory, 16, zHex);
  tdeKvSet(kv, "history", "%s", zHex);
  tdeKvSet(kv, "applied_seq", "%llu", (unsigned long long)p->applied);
  tdeKvSet(kv, "applied_capture_ms", "%llu", (unsigned long long)p->appliedCapture);
  tdeKvSet(kv, "applied_at_ms", "%llu", (unsigned long long)p->appliedAt);
  tdeKvSet(kv, "page_size", "%u", p->pgsz);
  tdeKvSet(kv, "received_seq", "%llu", (unsigned long long)p->received);
  tdeKvSet(kv, "received_capture_ms", "%llu", (unsigned long long)p->receivedCapture);
  tdeKvSet(kv, "primary_seq", "%llu", (unsigned long long)p->primarySeq);
  tdeKvSet(kv, "primary_capture_ms", "%llu", (unsigned long long)p->primaryCapture);
  tdeKvSet(kv, "primary_unreceived_bytes", "%llu", (unsigned long long)p->primaryUnreceived);
  tdeKvSet(kv, "unapplied_bytes", "%lld", (long long)p->unappliedBytes);
  tdeKvSet(kv, "primary", "%s", p->zPeer);
  tdeKvSet(kv, "listen", "%s", p->zListen ? p->zListen : "");
  tdeKvSet(kv, "state", "%s", p->zStatus);
  tdeKvSet(kv, "pid", "%d", (int)getpid());
  tdeKvSet(kv, "updated_ms", "%llu", (unsigned long long)tdeNowMs());
  rc = tdeKvWrite(kv, p->zState, TDE_STANDBY_STATE_MAGIC, bSync);
  tdeKvFree(kv);
  p->tStateMs = tdeNowMs();
  return rc;
}

static int sbLoadState(Standby *p){
  TdeKv *kv = 0;
  int rc = tdeKvRead(p->zState, TDE_STANDBY_STATE_MAGIC, &kv);
  if( rc==TDE_NOTFOUND ) return rc;
  if( rc ) return rc;
  if( tdeUnhex(tdeKvGet(kv, "database_id"), p->aDbid, 16)
   || tdeUnhex(tdeKvGet(kv, "history"), p->aHistory, 16) ){
    tdeKvFree(kv);
    return tdeErr(TDE_FORMAT, "%s: damaged", p->zState);
  }
  p->applied = (uint64_t)tdeKvInt(kv, "applied_seq");
  p->appliedCapture = (uint64_t)tdeKvInt(kv, "applied_capture_ms");
  p->appliedAt = (uint64_t)tdeKvInt(kv, "applied_at_ms");
  p->pgsz = (uint32_t)tdeKvInt(kv, "page_size");
  p->received = p->applied;
  p->receivedCapture = p->appliedCapture;
  p->primarySeq = (uint64_t)tdeKvInt(kv, "primary_seq");
  p->primaryCapture = (uint64_t)tdeKvInt(kv, "primary_capture_ms");
  snprintf(p->zPeer, sizeof(p->zPeer), "%s", tdeKvGet(kv, "primary") ? tdeKvGet(kv, "primary") : "");
  p->bHave = 1;
  tdeKvFree(kv);
  return TDE_OK;
}

/* ---- locks readers respect --------------------------------------------- */

static int sbLockRange(int fd, short type, off_t start, off_t len, int bWait){
  struct flock fl;
  memset(&fl, 0, sizeof(fl));
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = start;
  fl.l_len = len;
  while( fcntl(fd, F_SETLK, &fl)!=0 ){
    if( errno!=EAGAIN && errno!=EACCES && errno!=EINTR ) return tdeErr(TDE_IO, "lock: %s", strerror(errno));
    if( !bWait ) return TDE_LOCKED;
    sbSleepMs(1);
  }
  return TDE_OK;
}

/* EXCLUSIVE as SQLite's unix VFS takes it: PENDING (no new reader), then
** the SHARED range once the readers have finished. */
static int sbLockExclusive(Standby *p){
  uint64_t t0 = tdeNowMs();
  int bWarned = 0, rc;
  rc = sbLockRange(p->fdDb, F_WRLCK, SB_PENDING_BYTE, 1, 1);
  if( rc ) return rc;
  for(;;){
    rc = sbLockRange(p->fdDb, F_WRLCK, SB_SHARED_FIRST, SB_SHARED_SIZE, 0);
    if( rc!=TDE_LOCKED ) break;
    if( !bWarned && tdeNowMs()-t0>5000 ){
      tdeLog(TDE_LOG_WARNING, "standby %s: apply waits for a long read transaction", p->zDb);
      bWarned = 1;
    }
    if( *p->pbStop && tdeNowMs()-t0>2000 ){ rc = tdeErr(TDE_LOCKED, "stopped while waiting for readers"); break; }
    sbSleepMs(1);
  }
  if( rc ) sbLockRange(p->fdDb, F_UNLCK, SB_PENDING_BYTE, 512, 0);
  return rc;
}

static void sbUnlock(Standby *p){
  sbLockRange(p->fdDb, F_UNLCK, SB_PENDING_BYTE, 512, 0);
}

/* ---- apply -------------------------------------------------------------- */

typedef struct SbRec {
  uint8_t *a;
  size_t n;
  TdeRec r;
} SbRec;

static int sbWriteAll(int fd, const uint8_t *a, size_t n, off_t off){
  while( n>0 ){
    ssize_t k = pwrite(fd, a, n, off);
    if( k<0 && errno==EINTR ) continue;
    if( k<=0 ) return tdeErr(TDE_IO, "write: %s", strerror(errno));
    a += k; n -= (size_t)k; off += k;
  }
  return TDE_OK;
}

/*
** Validate records against the copy before they are logged or applied
** (tdeRecValidate), in order, as if the earlier ones of the batch were
** applied.  The copy's page size is learnt from the first record with
** frames after a base copy (the copy must be 8192 bytes plus a multiple of
** it) and kept in the state file; a WAL database never changes it.
*/
typedef struct SbCheck {
  int bInit;
  uint32_t pgsz;              /* 0: not known yet */
  uint64_t nBytes;            /* bytes of pages after the records checked */
} SbCheck;

static int sbValidate(Standby *p, SbCheck *c, const SbRec *pRec){
  const TdeRec *r = &pRec->r;
  int rc;
  if( !c->bInit ){
    struct stat st;
    if( fstat(p->fdDb, &st)!=0 ) return tdeErr(TDE_IO, "%s: %s", p->zDb, strerror(errno));
    c->pgsz = p->pgsz;
    c->nBytes = st.st_size>TDE_HEADER_BYTES ? (uint64_t)(st.st_size - TDE_HEADER_BYTES) : 0;
    c->bInit = 1;
  }
  if( r->kind==TDE_REC_TXN && r->nFrame>0 && c->pgsz==0 && (c->nBytes % r->pgsz)!=0 ){
    return tdeErr(TDE_FORMAT, "record %llu: page size %u does not divide the copy's %llu bytes of pages",
                  (unsigned long long)r->seq, r->pgsz, (unsigned long long)c->nBytes);
  }
  {
    uint32_t pgsz = c->pgsz ? c->pgsz : r->pgsz;
    rc = tdeRecValidate(pRec->a, r, c->pgsz, pgsz ? c->nBytes/pgsz : 0, p->aDbid);
  }
  if( rc ) return rc;
  if( r->kind==TDE_REC_TXN && r->nFrame>0 ){
    const uint8_t *f = pRec->a + pRec->n - TDE_REC_SUM - (TDE_FRAME_HDR + r->pgsz);
    c->pgsz = r->pgsz;
    c->nBytes = (uint64_t)tdeGet32(f+4) * r->pgsz;
  }
  return TDE_OK;
}

/* Apply whole records in order (already in the redo log, or being
** replayed from it); record the last as applied. */
static int sbApplyLocked(Standby *p, SbRec *aRec, int nRec){
  int rc = sbLockExclusive(p);
  if( rc ) return rc;
  for(int i=0; rc==TDE_OK && i<nRec; i++) rc = tdeApplyRecord(p->fdDb, aRec[i].a, &aRec[i].r);
  if( rc==TDE_OK && fdatasync(p->fdDb)!=0 ) rc = tdeErr(TDE_IO, "%s: fsync: %s", p->zDb, strerror(errno));
  if( rc==TDE_OK ){
    /* The state changes under the lock: readers derive SQLite's change
    ** counter from it, so a reader never caches pages across an apply.
    ** Memory says "applied" only once the state file does: on failure the
    ** old values come back, nothing is acknowledged, the session ends. */
    Standby old = *p;
    for(int i=0; i<nRec; i++){
      if( aRec[i].r.kind==TDE_REC_TXN && aRec[i].r.nFrame>0 ) p->pgsz = aRec[i].r.pgsz;
    }
    p->applied = aRec[nRec-1].r.seq;
    p->appliedCapture = aRec[nRec-1].r.tCapture;
    p->appliedAt = tdeNowMs();
    if( p->received<p->applied ){ p->received = p->applied; p->receivedCapture = p->appliedCapture; }
    p->unappliedBytes = 0;
    rc = sbWriteState(p, 1);
    if( rc ){
      p->pgsz = old.pgsz;
      p->applied = old.applied;
      p->appliedCapture = old.appliedCapture;
      p->appliedAt = old.appliedAt;
      p->received = old.received;
      p->receivedCapture = old.receivedCapture;
      p->unappliedBytes = old.unappliedBytes;
      tdeLog(TDE_LOG_ERROR, "standby %s: cannot record transaction %llu as applied: %s; not acknowledged",
             p->zDb, (unsigned long long)aRec[nRec-1].r.seq, tde_last_error());
    }
  }
  sbUnlock(p);
  return rc;
}

static int sbApplyBatch(Standby *p, SbRec *aRec, int nRec){
  off_t off = 0;
  int rc = TDE_OK;
  if( ftruncate(p->fdLog, 0)!=0 ) return tdeErr(TDE_IO, "%s: %s", p->zLog, strerror(errno));
  for(int i=0; rc==TDE_OK && i<nRec; i++){
    rc = sbWriteAll(p->fdLog, aRec[i].a, aRec[i].n, off);
    off += (off_t)aRec[i].n;
    p->unappliedBytes += (int64_t)aRec[i].n;
  }
  if( rc==TDE_OK && fdatasync(p->fdLog)!=0 ) rc = tdeErr(TDE_IO, "%s: fsync: %s", p->zLog, strerror(errno));
  if( rc ) return rc;
  p->received = aRec[nRec-1].r.seq;
  p->receivedCapture = aRec[nRec-1].r.tCapture;
  return sbApplyLocked(p, aRec, nRec);
}

/* Apply what the redo log holds beyond the recorded sequence (a crash
** between the log's sync and the state's rename). */
static int sbReplayLog(Standby *p, int *pnApplied){
  SbRec aRec[SB_BATCH_MAX];
  int nRec = 0, rc = TDE_OK;
  off_t off = 0;
  uint64_t next = p->applied + 1;
  SbCheck chk;
  memset(&chk, 0, sizeof(chk));
  *pnApplied = 0;
  for(;;){
    uint8_t aHdr[TDE_REC_HDR];
    TdeRawSrc src = { 0, p->fdLog };
    TdeRec r;
    int bShort;
    size_t n;
    uint8_t *a;
    rc = tdeRawRead(&src, aHdr, TDE_REC_HDR, off, &bShort);
    if( rc || bShort || tdeRecDecode(aHdr, &r)!=TDE_OK ) break;
    if( r.nPayload>TDE_REC_PAYLOAD_MAX ){
      tdeLog(TDE_LOG_WARNING, "standby %s: discarding the redo log from offset %lld on: a record too large",
             p->zDb, (long long)off);
      break;
    }
    n = (size_t)TDE_REC_HDR + r.nPayload + TDE_REC_SUM;
    a = sqlite3_malloc64(n);
    if( !a ){ rc = TDE_NOMEM; break; }
    rc = tdeRawRead(&src, a, (int)n, off, &bShort);
    if( rc || bShort || tdeRecCheck(a, n, &r)!=TDE_OK ){
      if( rc==TDE_OK && !bShort ){
        tdeLog(TDE_LOG_WARNING, "standby %s: discarding the redo log from offset %lld on: %s",
               p->zDb, (long long)off, tde_last_error());
      }
      sqlite3_free(a);
      break;
    }
    off += (off_t)n;
    if( r.seq<next || r.kind!=TDE_REC_TXN ){ sqlite3_free(a); continue; }
    if( r.seq!=next || nRec>=SB_BATCH_MAX ){ sqlite3_free(a); break; }
    aRec[nRec].a = a;
    aRec[nRec].n = n;
    aRec[nRec].r = r;
    if( sbValidate(p, &chk, &aRec[nRec])!=TDE_OK ){
      /* Never acknowledged as applied (the state file says what was): a
      ** damaged log must not block a restart or a failover. */
      tdeLog(TDE_LOG_WARNING, "standby %s: discarding the redo log from transaction %llu on: %s",
             p->zDb, (unsigned long long)r.seq, tde_last_error());
      sqlite3_free(a);
      break;
    }
    nRec++;
    next++;
  }
  tdeErrClear();
  if( rc==TDE_OK && nRec>0 ){
    rc = sbApplyLocked(p, aRec, nRec);
    if( rc==TDE_OK ) *pnApplied = nRec;
  }
  for(int i=0; i<nRec; i++) sqlite3_free(aRec[i].a);
  return rc;
}

/* ---- base copy ---------------------------------------------------------- */

static int sbReceiveBase(Standby *p, int fd, const uint8_t *aBegin, size_t nBegin, const uint8_t *aDbid){
  uint64_t seq, size, tCap, got = 0;
  uint8_t sum[32];
  unsigned int nSum;
  EVP_MD_CTX *c = 0;
  int fdOut = -1, rc = TDE_OK;
  if( nBegin<40 ) return tdeErr(TDE_FORMAT, "bad base copy header");
  seq = tdeGet64(aBegin);
  size = tdeGet64(aBegin+24);
  tCap = tdeGet64(aBegin+32);
  snprintf(p->zStatus, sizeof(p->zStatus), "base copy");
  tdeLog(TDE_LOG_INFO, "standby %s: receiving a base copy (%llu bytes, sequence %llu)", p->zDb,
         (unsigned long long)size, (unsigned long long)seq);
  fdOut = open(p->zBase, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  c = EVP_MD_CTX_new();
  if( fdOut<0 ){ rc = tdeErr(TDE_IO, "%s: %s", p->zBase, strerror(errno)); goto done; }
  if( !c || EVP_DigestInit_ex(c, EVP_sha256(), 0)!=1 ){ rc = TDE_CRYPTO; goto done; }
  for(;;){
    uint8_t *aBody = 0;
    size_t nBody = 0;
    int eType = 0;
    rc = tdeNetRecv(fd, 60000, &eType, &aBody, &nBody);
    if( rc==TDE_NOTFOUND ) rc = tdeErr(TDE_IO, "base copy: the primary went silent");
    if( rc ) goto done;
    if( eType==TDE_MSG_BASE_DATA && nBody>=8 && tdeGet64(aBody)==got ){
      rc = sbWriteAll(fdOut, aBody+8, nBody-8, (off_t)got);
      if( rc==TDE_OK && EVP_DigestUpdate(c, aBody+8, nBody-8)!=1 ) rc = TDE_CRYPTO;
      got += nBody-8;
      sqlite3_free(aBody);
      if( rc ) goto done;
      continue;
    }
    if( eType==TDE_MSG_BASE_END && nBody==32 ){
      if( EVP_DigestFinal_ex(c, sum, &nSum)!=1 ) rc = TDE_CRYPTO;
      else if( got!=size || memcmp(sum, aBody, 32)!=0 ) rc = tdeErr(TDE_AUTH, "base copy damaged in transit");
      sqlite3_free(aBody);
      break;
    }
    sqlite3_free(aBody);
    rc = tdeErr(TDE_FORMAT, "unexpected message during a base copy");
    goto done;
  }
  if( rc ) goto done;
  /* It must be a copy of the database the primary said hello for. */
  {
    uint8_t *aRegion = sqlite3_malloc(TDE_HEADER_BYTES);
    TdeHeader *h = sqlite3_malloc(sizeof(TdeHeader));
    TdeRawSrc src = { 0, fdOut };
    int bShort = 1, iSlot = 0;
    if( !aRegion || !h ) rc = TDE_NOMEM;
    if( rc==TDE_OK && size<TDE_HEADER_BYTES ){
      rc = tdeErr(TDE_FORMAT, "refusing a base copy of %llu bytes (no sqlite-tde header)", (unsigned long long)size);
    }
    if( rc==TDE_OK ) rc = tdeRawRead(&src, aRegion, TDE_HEADER_BYTES, 0, &bShort);
    if( rc==TDE_OK && (bShort || tdeHeaderPick(aRegion, TDE_HEADER_BYTES, h, &iSlot)!=TDE_OK) ){
      rc = tdeErr(TDE_FORMAT, "refusing a base copy whose header region does not parse");
    }
    if( rc==TDE_OK && memcmp(h->dbid, aDbid, 16)!=0 ){
      rc = tdeErr(TDE_FORMAT, "refusing a base copy of another database than the primary's");
    }
    sqlite3_free(h);
    sqlite3_free(aRegion);
    if( rc ){
      tdeLog(TDE_LOG_ERROR, "standby %s: %s", p->zDb, tde_last_error());
      goto done;
    }
  }
  if( fsync(fdOut)!=0 ){ rc = tdeErr(TDE_IO, "%s: fsync: %s", p->zBase, strerror(errno)); goto done; }
  /* Replace the copy: readers holding the old file keep their snapshot;
  ** a crash before the state records the new sequence replays records the
  ** primary sends again, which converge on the same pages. */
  if( p->fdDb>=0 ){
    rc = sbLockExclusive(p);
    if( rc ) goto done;
  }
  if( rename(p->zBase, p->zDb)!=0 ) rc = tdeErr(TDE_IO, "%s: rename: %s", p->zBase, strerror(errno));
  if( p->fdDb>=0 ){ sbUnlock(p); close(p->fdDb); p->fdDb = -1; }
  if( rc ) goto done;
  rc = tdeFsyncDir(p->zDb);
  if( rc ) goto done;
  p->fdDb = fdOut;
  fdOut = -1;
  if( ftruncate(p->fdLog, 0)!=0 ){ rc = tdeErr(TDE_IO, "%s: %s", p->zLog, strerror(errno)); goto done; }
  memcpy(p->aDbid, aDbid, 16);
  memcpy(p->aHistory, aBegin+8, 16);
  p->applied = p->received = seq;
  p->appliedCapture = p->receivedCapture = tCap;
  /* A WAL database keeps its page size: keep the one known unless the
  ** new copy's size says otherwise (then learn it again). */
  if( p->pgsz && (size<TDE_HEADER_BYTES || (size - TDE_HEADER_BYTES) % p->pgsz) ) p->pgsz = 0;
  p->appliedAt = tdeNowMs();
  p->bHave = 1;
  snprintf(p->zStatus, sizeof(p->zStatus), "streaming");
  rc = sbWriteState(p, 1);
done:
  EVP_MD_CTX_free(c);
  if( fdOut>=0 ){
    close(fdOut);
    if( rc ) unlink(p->zBase);
  }
  return rc;
}

/* ---- a session with the primary ----------------------------------------- */

static int sbAck(int fd, uint64_t seq){
  uint8_t a[8];
  tdePut64(a, seq);
  return tdeNetSend(fd, TDE_MSG_ACK, a, 8, 0, 0);
}

static int sbRefuse(int fd, const char *zWhy){
  tdeLog(TDE_LOG_ERROR, "standby: refusing the primary: %s", zWhy);
  return tdeNetSend(fd, TDE_MSG_REFUSE, (const uint8_t*)zWhy, strlen(zWhy), 0, 0);
}

/* Hello from a primary: refuse another database, else tell it where this
** copy is.  *aDbid gets the primary's database id. */
static int sbHello(Standby *p, int fd, uint8_t *aDbid){
  uint8_t *aBody = 0;
  size_t nBody = 0;
  int eType = 0, rc;
  rc = tdeNetRecv(fd, 15000, &eType, &aBody, &nBody);
  if( rc ) return rc==TDE_NOTFOUND ? tdeErr(TDE_IO, "no hello") : rc;
  if( eType!=TDE_MSG_HELLO || nBody<80 || memcmp(aBody, TDE_WIRE_MAGIC, 8)!=0 ){
    sqlite3_free(aBody);
    sbRefuse(fd, "not an sqlite-tde primary (bad hello)");
    return tdeErr(TDE_FORMAT, "bad hello");
  }
  memcpy(aDbid, aBody+8, 16);
  if( p->bHave && memcmp(aDbid, p->aDbid, 16)!=0 ){
    char zMine[33], zTheirs[33], zMsg[200];
    tdeHex(p->aDbid, 16, zMine);
    tdeHex(aDbid, 16, zTheirs);
    snprintf(zMsg, sizeof(zMsg), "this standby holds database %s; the primary offers database %s", zMine, zTheirs);
    sqlite3_free(aBody);
    sbRefuse(fd, zMsg);
    return tdeErr(TDE_AUTH, "%s", zMsg);
  }
  p->primarySeq = tdeGet64(aBody+72);
  sqlite3_free(aBody);
  {
    uint8_t aOk[25];
    tdePut64(aOk, p->applied);
    aOk[8] = p->bHave ? 1 : 0;
    memcpy(aOk+9, p->aHistory, 16);
    rc = tdeNetSend(fd, TDE_MSG_HELLO_OK, aOk, sizeof(aOk), 0, 0);
  }
  return rc;
}

/* A session with a primary that has said hello.  Another connection
** arriving meanwhile is answered at once: refused if it is another
** database, else it replaces this one (*pfdNext; the old one may be a
** connection the network cut without telling us). */
static int sbSession(Standby *p, int fd, const uint8_t *aDbid, int fdListen, int *pfdNext){
  uint8_t *aBody = 0;
  size_t nBody = 0;
  int eType = 0, rc;
  uint64_t resendFor = UINT64_MAX, tResend = 0, tLast = tdeNowMs();
  int bDupSeen = 0;
  SbRec aBatch[SB_BATCH_MAX];
  int nBatch = 0;
  uint8_t *aPend = 0;         /* a message read past the batch */
  size_t nPend = 0;
  int ePend = 0;

  *pfdNext = -1;
  snprintf(p->zStatus, sizeof(p->zStatus), "streaming");
  if( p->bHave ) sbWriteState(p, 0);

  while( !*p->pbStop ){
    if( aPend ){
      aBody = aPend; nBody = nPend; eType = ePend;
      aPend = 0;
    }else{
      struct pollfd aPoll[2] = { { fd, POLLIN, 0 }, { fdListen, POLLIN, 0 } };
      if( poll(aPoll, 2, 500)>0 && (aPoll[1].revents & POLLIN) ){
        uint8_t aOther[16];
        int fd2 = accept4(fdListen, 0, 0, SOCK_CLOEXEC);
        if( fd2>=0 ){
          tdeNetTune(fd2);
          if( sbHello(p, fd2, aOther)==TDE_OK ){
            tdeLog(TDE_LOG_INFO, "standby %s: a new connection from the primary replaces the current one", p->zDb);
            *pfdNext = fd2;
            return TDE_OK;
          }
          close(fd2);
        }
        continue;
      }
      rc = tdeNetRecv(fd, 0, &eType, &aBody, &nBody);
      if( rc==TDE_NOTFOUND ){
        if( tdeNowMs()-tLast>10000 && strcmp(p->zStatus, "silent")!=0 ){
          /* The primary sends a heartbeat every 0.5 s except while it makes
          ** a base copy: say so (status), keep the connection (keepalive
          ** ends a dead one; a new connection from the primary replaces it). */
          snprintf(p->zStatus, sizeof(p->zStatus), "silent");
          if( p->bHave ) sbWriteState(p, 0);
        }
        if( p->bHave && tdeNowMs()-p->tStateMs>1000 ) sbWriteState(p, 0);
        continue;
      }
      if( rc ) return rc;
      tLast = tdeNowMs();
      if( strcmp(p->zStatus, "silent")==0 ) snprintf(p->zStatus, sizeof(p->zStatus), "streaming");
    }
    if( eType==TDE_MSG_TXN ){
      TdeRec r;
      if( tdeRecCheck(aBody, nBody, &r)!=TDE_OK ){
        sqlite3_free(aBody);
        return tdeErr(TDE_AUTH, "a transaction failed its checksum: dropping the connection");
      }
      if( !p->bHave ){
        sqlite3_free(aBody);
        continue;            /* waiting for a base copy */
      }
      if( r.seq<=p->applied ){
        /* A duplicate: acknowledge again, apply nothing. */
        if( !bDupSeen ){
          tdeLog(TDE_LOG_INFO, "standby %s: transaction %llu is already applied: acknowledged again, "
                 "ignored (duplicates after this one are not logged)", p->zDb, (unsigned long long)r.seq);
          bDupSeen = 1;
        }
        sqlite3_free(aBody);
        rc = sbAck(fd, p->applied);
        if( rc ) return rc;
        continue;
      }
      if( r.seq!=p->applied+1 ){
        sqlite3_free(aBody);
        if( resendFor!=p->applied || tdeNowMs()-tResend>1000 ){
          uint8_t a[8];
          tdeLog(TDE_LOG_WARNING, "standby %s: got transaction %llu while waiting for %llu; asking to resend",
                 p->zDb, (unsigned long long)r.seq, (unsigned long long)p->applied+1);
          tdePut64(a, p->applied+1);
          rc = tdeNetSend(fd, TDE_MSG_RESEND, a, 8, 0, 0);
          if( rc ) return rc;
          resendFor = p->applied;
          tResend = tdeNowMs();
        }
        continue;
      }
      /* In order: gather what else has arrived, validate the whole
      ** batch, then apply it. */
      nBatch = 0;
      aBatch[nBatch].a = aBody; aBatch[nBatch].n = nBody; aBatch[nBatch].r = r; nBatch++;
      rc = TDE_OK;
      {
        size_t nBytes = nBody;
        while( nBatch<SB_BATCH_MAX && nBytes<SB_BATCH_BYTES && tdeNetReadable(fd, 0) ){
          uint8_t *a = 0;
          size_t n = 0;
          int e = 0;
          TdeRec r2;
          rc = tdeNetRecv(fd, 0, &e, &a, &n);
          if( rc==TDE_NOTFOUND ){ rc = TDE_OK; break; }
          if( rc ) break;
          if( e==TDE_MSG_TXN && tdeRecCheck(a, n, &r2)==TDE_OK && r2.seq==aBatch[nBatch-1].r.seq+1 ){
            aBatch[nBatch].a = a; aBatch[nBatch].n = n; aBatch[nBatch].r = r2; nBatch++;
            nBytes += n;
            continue;
          }
          aPend = a; nPend = n; ePend = e;
          break;
        }
      }
      if( rc==TDE_OK ){
        SbCheck chk;
        memset(&chk, 0, sizeof(chk));
        for(int i=0; rc==TDE_OK && i<nBatch; i++){
          rc = sbValidate(p, &chk, &aBatch[i]);
          if( rc ){
            /* Not logged, not applied, not acknowledged: the primary
            ** resends, and a fault that persists shows as this error. */
            tdeLog(TDE_LOG_ERROR, "standby %s: rejecting transaction %llu from %s: %s; "
                   "dropping the connection", p->zDb, (unsigned long long)aBatch[i].r.seq, p->zPeer,
                   tde_last_error());
          }
        }
      }
      if( rc==TDE_OK ) rc = sbApplyBatch(p, aBatch, nBatch);
      for(int i=0; i<nBatch; i++) sqlite3_free(aBatch[i].a);
      nBatch = 0;
      if( rc==TDE_OK ) rc = sbAck(fd, p->applied);
      if( rc ){ sqlite3_free(aPend); return rc; }
      resendFor = UINT64_MAX;
      continue;
    }
    if( eType==TDE_MSG_BASE_BEGIN ){
      rc = sbReceiveBase(p, fd, aBody, nBody, aDbid);
      sqlite3_free(aBody);
      if( rc ) return rc;
      tdeLog(TDE_LOG_INFO, "standby %s: base copy applied at sequence %llu", p->zDb, (unsigned long long)p->applied);
      rc = sbAck(fd, p->applied);
      if( rc ) return rc;
      continue;
    }
    if( eType==TDE_MSG_HEARTBEAT && nBody>=32 ){
      p->primarySeq = tdeGet64(aBody);
      p->primaryCapture = tdeGet64(aBody+8);
      p->primaryUnreceived = tdeGet64(aBody+24);
      sqlite3_free(aBody);
      if( p->bHave && tdeNowMs()-p->tStateMs>500 ) sbWriteState(p, 0);
      continue;
    }
    sqlite3_free(aBody);
  }
  return TDE_OK;
}

static int sbOpenFiles(Standby *p){
  if( !p->bHave ){
    struct stat st;
    if( stat(p->zDb, &st)==0 && st.st_size>0 ){
      return tdeErr(TDE_EXISTS, "%s exists and is not a standby copy (no %s): refusing to overwrite it",
                    p->zDb, p->zState);
    }
  }
  p->fdLog = open(p->zLog, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if( p->fdLog<0 ) return tdeErr(TDE_IO, "%s: %s", p->zLog, strerror(errno));
  if( p->bHave ){
    p->fdDb = open(p->zDb, O_RDWR | O_CLOEXEC);
    if( p->fdDb<0 ) return tdeErr(TDE_IO, "%s: the state file exists but the database copy cannot be "
                                  "opened: %s", p->zDb, strerror(errno));
  }
  return TDE_OK;
}

static void sbClose(Standby *p){
  if( !p->bHave && p->bLocked ){
    /* Never held a copy: leave nothing behind. */
    unlink(p->zLog);
    unlink(p->zLock);
  }
  if( p->fdDb>=0 ) close(p->fdDb);
  if( p->fdLog>=0 ) close(p->fdLog);
  if( p->fdLock>=0 ) close(p->fdLock);
  p->fdDb = p->fdLog = p->fdLock = -1;
}

TDE_API int tde_standby_run(const char *zDb, const char *zListen, volatile int *pbStop){
  Standby sb;
  Standby *p = &sb;
  volatile int bNever = 0;
  int fdListen = -1, rc, nReplayed = 0;
  memset(p, 0, sizeof(*p));
  p->fdDb = p->fdLog = p->fdLock = -1;
  p->zListen = zListen;
  p->pbStop = pbStop ? pbStop : &bNever;
  if( !zDb || !zListen ) return tdeErr(TDE_MISUSE, "tde_standby_run: a database and an address");
  rc = sbPaths(p, zDb);
  if( rc ) return rc;
  rc = sbLockInstance(p);
  if( rc ) goto done;
  rc = sbLoadState(p);
  if( rc==TDE_NOTFOUND ) rc = TDE_OK;
  if( rc ) goto done;
  rc = sbOpenFiles(p);
  if( rc ) goto done;
  if( p->bHave ){
    rc = sbReplayLog(p, &nReplayed);
    if( rc ) goto done;
    if( nReplayed ) tdeLog(TDE_LOG_INFO, "standby %s: re-applied %d logged transaction(s), now at %llu",
                           p->zDb, nReplayed, (unsigned long long)p->applied);
  }
  rc = tdeNetListen(zListen, &fdListen);
  if( rc ) goto done;
  snprintf(p->zStatus, sizeof(p->zStatus), "waiting");
  if( p->bHave ) sbWriteState(p, 0);
  tdeLog(TDE_LOG_INFO, "standby %s: listening on %s, at sequence %llu%s", p->zDb, zListen,
         (unsigned long long)p->applied, p->bHave ? "" : " (no copy yet: waiting for a base copy)");
  while( !*p->pbStop ){
    struct sockaddr_storage sa;
    socklen_t nSa = sizeof(sa);
    int fd;
    if( !tdeNetReadable(fdListen, 300) ) continue;
    fd = accept4(fdListen, (struct sockaddr*)&sa, &nSa, SOCK_CLOEXEC);
    if( fd<0 ) continue;
    tdeNetTune(fd);
    {
      char zHost[64] = "?";
      int port = 0;
      if( sa.ss_family==AF_INET ){
        struct sockaddr_in *s4 = (struct sockaddr_in*)&sa;
        inet_ntop(AF_INET, &s4->sin_addr, zHost, sizeof(zHost));
        port = ntohs(s4->sin_port);
      }else if( sa.ss_family==AF_INET6 ){
        struct sockaddr_in6 *s6 = (struct sockaddr_in6*)&sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, zHost, sizeof(zHost));
        port = ntohs(s6->sin6_port);
      }
      snprintf(p->zPeer, sizeof(p->zPeer), "%s:%d", zHost, port);
    }
    {
      uint8_t aDbid[16];
      rc = sbHello(p, fd, aDbid);
      while( rc==TDE_OK && fd>=0 ){
        int fdNext = -1;
        rc = sbSession(p, fd, aDbid, fdListen, &fdNext);
        close(fd);
        fd = fdNext;
      }
      if( fd>=0 ) close(fd);
    }
    if( rc && !*p->pbStop ){
      tdeLog(TDE_LOG_WARNING, "standby %s: connection from %s ended: %s; waiting for the primary "
             "(at sequence %llu)", p->zDb, p->zPeer, tde_last_error(), (unsigned long long)p->applied);
    }
    snprintf(p->zStatus, sizeof(p->zStatus), "waiting");
    if( p->bHave ) sbWriteState(p, 0);
    rc = TDE_OK;
  }
  snprintf(p->zStatus, sizeof(p->zStatus), "stopped");
  if( p->bHave ) sbWriteState(p, 1);
done:
  if( fdListen>=0 ) close(fdListen);
  sbClose(p);
  return rc;
}

TDE_API int tde_standby_promote(const char *zDb){
  Standby sb;
  Standby *p = &sb;
  volatile int bNever = 0;
  int rc, nReplayed = 0;
  memset(p, 0, sizeof(*p));
  p->fdDb = p->fdLog = p->fdLock = -1;
  p->pbStop = &bNever;
  if( !zDb ) return tdeErr(TDE_MISUSE, "tde_standby_promote: no database");
  rc = sbPaths(p, zDb);
  if( rc ) return rc;
  rc = sbLockInstance(p);
  if( rc ) goto done;
  rc = sbLoadState(p);
  if( rc==TDE_NOTFOUND ){ rc = tdeErr(TDE_NOTFOUND, "%s is not a standby copy (no %s)", p->zDb, p->zState); goto done; }
  if( rc ) goto done;
  rc = sbOpenFiles(p);
  if( rc ) goto done;
  /* Finish the last complete transaction the log holds; drop the rest. */
  rc = sbReplayLog(p, &nReplayed);
  if( rc ) goto done;
  if( fsync(p->fdDb)!=0 ){ rc = tdeErr(TDE_IO, "%s: fsync: %s", p->zDb, strerror(errno)); goto done; }
  if( unlink(p->zState)!=0 ){ rc = tdeErr(TDE_IO, "%s: %s", p->zState, strerror(errno)); goto done; }
  rc = tdeFsyncDir(p->zDb);
  unlink(p->zLog);
  unlink(p->zBase);
  unlink(p->zLock);
  tdeLog(TDE_LOG_INFO, "standby %s: promoted at sequence %llu%s", p->zDb, (unsigned long long)p->applied,
         nReplayed ? " (after re-applying logged transactions)" : "");
done:
  sbClose(p);
  return rc;
}
