/*
** The standby (tde_standby_run_v2, tde_standby_promote): receives the
** primary's transactions as ciphertext and applies them to its copy of the
** database without ever holding a key.
**
** Apply is atomic across crashes: a batch of whole transactions is first
** written to the redo log DB-tdestandby-log and synced; then, under the
** rollback-mode locks SQLite's unix VFS uses (so readers of the copy, with
** the key, see a transaction whole or not at all), the pages are written
** at their offsets in the layout the copy's header region names (8192 +
** (pgno-1)*P, or version 3's off(pgno): tdeApplyRecord), the file is
** truncated to the commit frame's size
** and synced, and the applied sequence is recorded in DB-tdestandby
** (temp file, fsync, rename); then the primary gets its acknowledgement.
** At start, log records after the recorded sequence are applied again
** (idempotent: whole pages at fixed positions).
**
** POSIX locks belong to the process: this process must never open the
** database through SQLite (closing that handle would drop our locks).
**
** Connections: an acceptor thread takes each new connection and hands it
** to a handshake thread of its own (TLS and the hello, both with a
** deadline, see tls.c).  Only a connection that passed both is posted to
** the main thread, which owns the copy: so a peer that connects and stalls
** never delays apply, and a peer without a verified certificate never
** reaches, let alone replaces, the session.  A verified connection from
** the primary replaces the current session (the old one may be a path the
** network cut without telling us).
**
** Must never: apply a partial transaction, a transaction out of order,
** or a transaction of another database.
*/
#include "repl/repl.h"
#include "cipher/cipher.h"
#include "keys/keys.h"
#include "keys/layout.h"
#include "audit/audit.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
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
#define SB_SILENT_MS    2000        /* four heartbeats missed */
#define SB_MAX_HEADS    16          /* verified heads kept ahead of the records */
#define SB_PEND_MAX     512         /* records waiting for a head: the primary signs every 32 */
#define SB_PEND_BYTES   (96u<<20)

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
  uint64_t tHeardMs;          /* last verified message from the session's primary */
  TdeReplCfg *pCfg;
  /* Connections handed over by the handshake threads (guarded by mu). */
  pthread_mutex_t mu;
  int bMu;
  int aWake[2];               /* a byte is written here when one is posted */
  int fdListen;
  int nHandshake;             /* handshake threads running */
  int bPending;
  TdeConn pending;
  uint8_t *aPendHello;
  size_t nPendHello;
  char zPendPeer[128];
  char zRefused[320];         /* the last refusal: peer and reason */
  uint64_t tRefusedMs;
  /* No silent rewind: a primary whose history goes back from this copy's
  ** is refused until the operator accepts it (--accept-rewind, once). */
  char zDiverged[320];        /* why ("" if not diverged); in the state file */
  int bAcceptRewind;          /* armed by TDE_REPL_ACCEPT_REWIND, used once */
  char zAudit[4200];          /* audit log (repl_audit_log, or DB-tdestandby-audit) */
  /* Records that prove where they come from (sign.c). */
  int bChain;                 /* aChain known (a v1 state file has none) */
  uint8_t aChain[32];         /* the record chain at applied_seq */
  uint64_t headSeq;           /* the last verified signed head */
  /* Verifying (repl_primary_pubkey): records received in order but not yet
  ** covered by a verified head, and the verified heads not reached yet. */
  struct SbRec *aPend;
  int nPend;
  size_t nPendBytes;
  int nHead;
  struct { uint64_t seq; uint8_t aChain[32]; } aHead[SB_MAX_HEADS];
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
  tdeKvSet(kv, "state", "%s", p->zDiverged[0] && strcmp(p->zStatus, "stopped")!=0 ? "diverged" : p->zStatus);
  tdeKvSet(kv, "diverged", "%s", p->zDiverged);
  if( p->bChain ){
    char zC[65];
    tdeHex(p->aChain, 32, zC);
    tdeKvSet(kv, "chain", "%s", zC);
  }
  tdeKvSet(kv, "head_seq", "%llu", (unsigned long long)p->headSeq);
  tdeKvSet(kv, "transport", "%s", p->pCfg && p->pCfg->bInsecure ? "insecure-no-tls" : "tls");
  tdeKvSet(kv, "heard_ms", "%llu", (unsigned long long)p->tHeardMs);
  if( p->bMu ) pthread_mutex_lock(&p->mu);
  tdeKvSet(kv, "refused", "%s", p->zRefused);
  tdeKvSet(kv, "refused_ms", "%llu", (unsigned long long)p->tRefusedMs);
  if( p->bMu ) pthread_mutex_unlock(&p->mu);
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
  snprintf(p->zDiverged, sizeof(p->zDiverged), "%s", tdeKvGet(kv, "diverged") ? tdeKvGet(kv, "diverged") : "");
  p->bChain = tdeUnhex(tdeKvGet(kv, "chain"), p->aChain, 32)==TDE_OK;   /* absent in version 1 */
  p->headSeq = (uint64_t)tdeKvInt(kv, "head_seq");
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
  int bChain;                 /* aChain known */
  uint8_t aChain[32];         /* the record chain with this record (sign.c) */
} SbRec;

/* The chain after rec, from the chain before it (the record's SHA-256
** trailer is its link). */
static void sbChainRec(const uint8_t *aPrev, SbRec *pRec){
  tdeChainNext(aPrev, pRec->a + pRec->n - TDE_REC_SUM, pRec->aChain);
  pRec->bChain = 1;
}

static void sbPendClear(Standby *p){
  for(int i=0; i<p->nPend; i++) sqlite3_free(p->aPend[i].a);
  p->nPend = 0;
  p->nPendBytes = 0;
  p->nHead = 0;
}

/* A verified head: kept in order of sequence (the largest dropped when
** full: a later one covers it). */
static void sbHeadAdd(Standby *p, uint64_t seq, const uint8_t *aChain){
  int i;
  if( seq>p->headSeq ) p->headSeq = seq;
  for(i=0; i<p->nHead && p->aHead[i].seq<seq; i++){}
  if( i<p->nHead && p->aHead[i].seq==seq ) return;
  if( p->nHead==SB_MAX_HEADS ){
    if( i==p->nHead ) return;
    p->nHead--;
  }
  memmove(&p->aHead[i+1], &p->aHead[i], sizeof(p->aHead[0])*(size_t)(p->nHead - i));
  p->aHead[i].seq = seq;
  memcpy(p->aHead[i].aChain, aChain, 32);
  p->nHead++;
}

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
** frames after a base copy (the copy's size must cut no page in its
** layout: tdeCopyBytes) and kept in the state file; a WAL database never
** changes it.
*/
typedef struct SbCheck {
  int bInit;
  uint32_t pgsz;              /* 0: not known yet */
  uint64_t nBytes;            /* bytes of pages after the records checked */
  TdeLayout L;                /* the copy's (its header region's) */
  int64_t nPhys;              /* the copy's size until a record gives it (-1 then) */
} SbCheck;

static int sbValidate(Standby *p, SbCheck *c, const SbRec *pRec){
  const TdeRec *r = &pRec->r;
  int rc;
  if( !c->bInit ){
    struct stat st;
    if( fstat(p->fdDb, &st)!=0 ) return tdeErr(TDE_IO, "%s: %s", p->zDb, strerror(errno));
    rc = tdeCopyLayout(p->fdDb, p->pgsz, &c->L);
    if( rc ) return rc;
    c->pgsz = p->pgsz;
    c->nPhys = (int64_t)st.st_size;
    c->bInit = 1;
  }
  if( c->nPhys>=0 ){
    rc = tdeCopyBytes(&c->L, c->nPhys, r, &c->nBytes);
    if( rc ) return rc;
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
    c->nPhys = -1;
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
    p->bChain = aRec[nRec-1].bChain;
    if( p->bChain ) memcpy(p->aChain, aRec[nRec-1].aChain, 32);
    p->appliedAt = tdeNowMs();
    if( p->received<p->applied ){ p->received = p->applied; p->receivedCapture = p->appliedCapture; }
    p->unappliedBytes = 0;
    p->zDiverged[0] = 0;        /* only a session the operator accepted gets here */
    rc = sbWriteState(p, 1);
    if( rc ){
      p->pgsz = old.pgsz;
      p->bChain = old.bChain;
      memcpy(p->aChain, old.aChain, 32);
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
    aRec[nRec].bChain = 0;
    if( nRec ? aRec[nRec-1].bChain : p->bChain ) sbChainRec(nRec ? aRec[nRec-1].aChain : p->aChain, &aRec[nRec]);
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

/* One audit line (audit/audit.h format) in the standby's audit log. */
static void sbAudit(Standby *p, const char *zOp, int bFailure, const char *zDetail){
  TdeAuditRec r;
  char zLine[1024];
  int n, fd;
  tdeAuditInit(&r, zOp);
  r.bFailure = bFailure;
  r.zDbPath = p->zDb;
  r.aDbid = p->bHave ? p->aDbid : 0;
  r.zDetail = zDetail;
  n = tdeAuditFormat(&r, (int64_t)tdeNowMs(), (int)getpid(), zLine, sizeof(zLine));
  if( n<0 ) return;
  fd = open(p->zAudit, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if( fd<0 || write(fd, zLine, (size_t)n)!=n ){
    tdeLog(TDE_LOG_WARNING, "standby %s: cannot write the audit log %s: %s", p->zDb, p->zAudit, strerror(errno));
  }
  if( fd>=0 ) close(fd);
}

/* The primary's history goes back from what this copy applied: refuse,
** durably (a restart stays diverged), until the operator accepts it. */
static int sbDiverge(Standby *p, const char *zPeer, const char *zWhy){
  snprintf(p->zDiverged, sizeof(p->zDiverged), "%s", zWhy);
  tdeLog(TDE_LOG_ERROR, "standby %s: diverged: %s (from %s); refusing the primary, nothing acknowledged; "
         "restart with --accept-rewind to take its base copy, or re-seed", p->zDb, zWhy, zPeer);
  sbAudit(p, "standby_diverged", 1, zWhy);
  sbWriteState(p, 1);
  return tdeErr(TDE_AUTH, "diverged: %s", zWhy);
}

/* ---- base copy ---------------------------------------------------------- */

/* A base copy being received (sbReceiveBase): what BASE_BEGIN said, and
** the record chain its end carries. */
typedef struct SbBase {
  const uint8_t *aBegin;      /* the BASE_BEGIN body */
  size_t nBegin;
  const uint8_t *aDbid;       /* the database the primary said hello for */
  uint64_t seq, size, tCap;
  int bChain;                 /* aChain came with the copy */
  uint8_t aChain[32];
} SbBase;

/* The base copy takes back what this copy applied (another history, an
** older sequence, or transactions the primary lost): zWhy says how; ""
** if it does not. */
static void sbBaseRewinds(const Standby *p, const SbBase *pB, char *zWhy, size_t nWhy){
  const uint8_t *aBegin = pB->aBegin;
  zWhy[0] = 0;
  if( memcmp(aBegin+8, p->aHistory, 16)!=0 ){
    snprintf(zWhy, nWhy, "a base copy of another history than the one this copy applied "
             "%llu transactions of", (unsigned long long)p->applied);
  }else if( pB->seq<p->applied ){
    snprintf(zWhy, nWhy, "a base copy at transaction %llu, older than the %llu this copy applied",
             (unsigned long long)pB->seq, (unsigned long long)p->applied);
  }else if( pB->nBegin>=48 && (aBegin[40] & 1) && p->applied>=tdeGet32(aBegin+44) ){
    snprintf(zWhy, nWhy, "the primary lost transactions from about %u on, and this copy applied "
             "up to %llu: its base copy would take them back", tdeGet32(aBegin+44),
             (unsigned long long)p->applied);
  }
}

/* BASE_END: the copy's digest, and its signature if a primary key is
** pinned (its pages, header region, sequence and chain).  Takes no
** ownership of aBody. */
static int sbBaseCheckEnd(Standby *p, SbBase *pB, const uint8_t *aSum, uint64_t got, const uint8_t *aBody,
                          size_t nBody){
  int rc = TDE_OK;
  if( got!=pB->size || memcmp(aSum, aBody, 32)!=0 ){
    rc = tdeErr(TDE_AUTH, "base copy damaged in transit");
  }else if( p->pCfg->nPubKey ){
    uint8_t aSigned[TDE_BASE_SIGNED];
    if( nBody!=64 + TDE_SIG_BYTES ){
      rc = tdeErr(TDE_AUTH, "refusing an unsigned base copy (repl_primary_pubkey is set)");
    }else{
      tdeBaseSigned(pB->aDbid, pB->aBegin+8, pB->seq, pB->size, aSum, aBody+32, pB->tCap, aSigned);
      rc = tdeVerify(p->pCfg->apPubKey, p->pCfg->nPubKey, aSigned, sizeof(aSigned), aBody+64);
      if( rc ) rc = tdeErr(TDE_AUTH, "refusing a base copy whose signature does not verify with the pinned "
                           "primary key");
      else{ memcpy(pB->aChain, aBody+32, 32); pB->bChain = 1; }
    }
  }else if( nBody==64 + TDE_SIG_BYTES ){
    memcpy(pB->aChain, aBody+32, 32);      /* not verified: no key pinned */
    pB->bChain = 1;
  }
  return rc;
}

/* The copy's bytes into fdOut, up to BASE_END and its checks. */
static int sbBaseReceive(Standby *p, TdeConn *pConn, SbBase *pB, int fdOut){
  uint64_t got = 0;
  uint8_t sum[32];
  unsigned int nSum;
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  int rc = TDE_OK;
  if( !c || EVP_DigestInit_ex(c, EVP_sha256(), 0)!=1 ){ rc = TDE_CRYPTO; goto done; }
  for(;;){
    uint8_t *aBody = 0;
    size_t nBody = 0;
    int eType = 0;
    rc = tdeConnRecv(pConn, 60000, &eType, &aBody, &nBody);
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
    if( eType==TDE_MSG_BASE_END && (nBody==32 || nBody==64 + TDE_SIG_BYTES) ){
      if( EVP_DigestFinal_ex(c, sum, &nSum)!=1 ) rc = TDE_CRYPTO;
      else rc = sbBaseCheckEnd(p, pB, sum, got, aBody, nBody);
      sqlite3_free(aBody);
      if( rc ) tdeLog(TDE_LOG_ERROR, "standby %s: %s", p->zDb, tde_last_error());
      goto done;
    }
    sqlite3_free(aBody);
    rc = tdeErr(TDE_FORMAT, "unexpected message during a base copy");
    goto done;
  }
done:
  EVP_MD_CTX_free(c);
  return rc;
}

/* It must be a copy of the database the primary said hello for. */
static int sbBaseCheckHeader(Standby *p, const SbBase *pB, int fdOut){
  uint8_t *aRegion = sqlite3_malloc(TDE_HEADER_BYTES);
  TdeHeader *h = sqlite3_malloc(sizeof(TdeHeader));
  TdeRawSrc src = { 0, fdOut };
  int bShort = 1, iSlot = 0, rc = TDE_OK;
  if( !aRegion || !h ) rc = TDE_NOMEM;
  if( rc==TDE_OK && pB->size<TDE_HEADER_BYTES ){
    rc = tdeErr(TDE_FORMAT, "refusing a base copy of %llu bytes (no sqlite-tde header)",
                (unsigned long long)pB->size);
  }
  if( rc==TDE_OK ) rc = tdeRawRead(&src, aRegion, TDE_HEADER_BYTES, 0, &bShort);
  if( rc==TDE_OK && (bShort || tdeHeaderPick(aRegion, TDE_HEADER_BYTES, h, &iSlot)!=TDE_OK) ){
    rc = tdeErr(TDE_FORMAT, "refusing a base copy whose header region does not parse");
  }
  if( rc==TDE_OK && memcmp(h->dbid, pB->aDbid, 16)!=0 ){
    rc = tdeErr(TDE_FORMAT, "refusing a base copy of another database than the primary's");
  }
  sqlite3_free(h);
  sqlite3_free(aRegion);
  if( rc ) tdeLog(TDE_LOG_ERROR, "standby %s: %s", p->zDb, tde_last_error());
  return rc;
}

/* Replace the copy with the synced base copy in *pfdOut (the standby
** keeps it open: *pfdOut becomes -1 once it is the copy).  Readers
** holding the old file fail their next read transaction (the shim sees
** the path name another file) and reopen; a crash before the state
** records the new sequence replays records the primary sends again, which
** converge on the same pages. */
static int sbBaseInstall(Standby *p, int *pfdOut){
  int rc = TDE_OK;
  if( fsync(*pfdOut)!=0 ) return tdeErr(TDE_IO, "%s: fsync: %s", p->zBase, strerror(errno));
  if( p->fdDb>=0 ){
    rc = sbLockExclusive(p);
    if( rc ) return rc;
  }
  if( rename(p->zBase, p->zDb)!=0 ) rc = tdeErr(TDE_IO, "%s: rename: %s", p->zBase, strerror(errno));
  if( p->fdDb>=0 ){ sbUnlock(p); close(p->fdDb); p->fdDb = -1; }
  if( rc ) return rc;
  rc = tdeFsyncDir(p->zDb);
  if( rc ) return rc;
  p->fdDb = *pfdOut;
  *pfdOut = -1;
  if( ftruncate(p->fdLog, 0)!=0 ) return tdeErr(TDE_IO, "%s: %s", p->zLog, strerror(errno));
  return TDE_OK;
}

/* The copy is the base copy: its sequence, history and chain, recorded in
** the state file.  A rewind the operator accepted is audited, once. */
static int sbBaseAdopt(Standby *p, const SbBase *pB){
  const uint8_t *aBegin = pB->aBegin;
  char zWhy[300];
  sbBaseRewinds(p, pB, zWhy, sizeof(zWhy));
  if( p->bHave && p->bAcceptRewind && (zWhy[0] || p->zDiverged[0]) ){
    char zAudit[800];
    snprintf(zAudit, sizeof(zAudit), "rewind accepted by the operator (--accept-rewind): base copy at transaction "
             "%llu replaces the copy at %llu%s%s", (unsigned long long)pB->seq, (unsigned long long)p->applied,
             p->zDiverged[0] ? "; was diverged: " : "", p->zDiverged);
    tdeLog(TDE_LOG_WARNING, "standby %s: %s", p->zDb, zAudit);
    sbAudit(p, "standby_rewind_accepted", 0, zAudit);
    p->bAcceptRewind = 0;
  }
  p->zDiverged[0] = 0;
  p->bChain = pB->bChain;
  if( pB->bChain ) memcpy(p->aChain, pB->aChain, 32);
  p->headSeq = pB->seq;
  memcpy(p->aDbid, pB->aDbid, 16);
  memcpy(p->aHistory, aBegin+8, 16);
  p->applied = p->received = pB->seq;
  p->appliedCapture = p->receivedCapture = pB->tCap;
  /* A WAL database keeps its page size: keep the one known unless the
  ** new copy's size says otherwise (then learn it again). */
  if( p->pgsz ){
    TdeLayout L;
    if( tdeCopyLayout(p->fdDb, p->pgsz, &L)!=TDE_OK || !tdeLayoutWhole(&L, (int64_t)pB->size) ) p->pgsz = 0;
  }
  p->appliedAt = tdeNowMs();
  p->bHave = 1;
  snprintf(p->zStatus, sizeof(p->zStatus), "streaming");
  return sbWriteState(p, 1);
}

static int sbReceiveBase(Standby *p, TdeConn *pConn, const uint8_t *aBegin, size_t nBegin, const uint8_t *aDbid){
  SbBase base;
  int fdOut = -1, rc;
  if( nBegin<40 ) return tdeErr(TDE_FORMAT, "bad base copy header");
  memset(&base, 0, sizeof(base));
  base.aBegin = aBegin;
  base.nBegin = nBegin;
  base.aDbid = aDbid;
  base.seq = tdeGet64(aBegin);
  base.size = tdeGet64(aBegin+24);
  base.tCap = tdeGet64(aBegin+32);
  if( p->bHave && !p->bAcceptRewind ){
    char zWhy[300];
    sbBaseRewinds(p, &base, zWhy, sizeof(zWhy));
    if( zWhy[0] ) return sbDiverge(p, p->zPeer, zWhy);
  }
  snprintf(p->zStatus, sizeof(p->zStatus), "base copy");
  tdeLog(TDE_LOG_INFO, "standby %s: receiving a base copy (%llu bytes, sequence %llu)", p->zDb,
         (unsigned long long)base.size, (unsigned long long)base.seq);
  fdOut = open(p->zBase, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if( fdOut<0 ) return tdeErr(TDE_IO, "%s: %s", p->zBase, strerror(errno));
  rc = sbBaseReceive(p, pConn, &base, fdOut);
  if( rc==TDE_OK ) rc = sbBaseCheckHeader(p, &base, fdOut);
  if( rc==TDE_OK ) rc = sbBaseInstall(p, &fdOut);
  if( rc==TDE_OK ) rc = sbBaseAdopt(p, &base);
  if( fdOut>=0 ){
    close(fdOut);
    if( rc ) unlink(p->zBase);
  }
  return rc;
}

/* ---- a session with the primary ----------------------------------------- */

static int sbAck(TdeConn *pConn, uint64_t seq){
  uint8_t a[8];
  tdePut64(a, seq);
  return tdeConnSend(pConn, TDE_MSG_ACK, a, 8, 0, 0);
}

/* Remember a refusal for the status (any thread). */
static void sbNoteRefusal(Standby *p, const char *zPeer, const char *zWhy){
  pthread_mutex_lock(&p->mu);
  snprintf(p->zRefused, sizeof(p->zRefused), "%s: %s", zPeer, zWhy);
  p->tRefusedMs = tdeNowMs();
  pthread_mutex_unlock(&p->mu);
}

static int sbRefuse(TdeConn *pConn, const char *zWhy){
  tdeLog(TDE_LOG_ERROR, "standby: refusing the primary: %s", zWhy);
  return tdeConnSend(pConn, TDE_MSG_REFUSE, (const uint8_t*)zWhy, strlen(zWhy), 0, 0);
}

/* Hello from a primary (received whole by its handshake thread): refuse
** another database, else tell it where this copy is.  *aDbid gets the
** primary's database id. */
static int sbHello(Standby *p, TdeConn *pConn, const uint8_t *aBody, size_t nBody, const char *zPeer,
                   uint8_t *aDbid){
  int rc;
  if( nBody<80 ) return tdeErr(TDE_FORMAT, "bad hello");
  memcpy(aDbid, aBody+8, 16);
  if( (p->bHave && memcmp(aDbid, p->aDbid, 16)!=0)
   || (p->pCfg->bPrimaryDbid && memcmp(aDbid, p->pCfg->aPrimaryDbid, 16)!=0) ){
    char zMine[33], zTheirs[33], zMsg[200];
    tdeHex(p->bHave ? p->aDbid : p->pCfg->aPrimaryDbid, 16, zMine);
    tdeHex(aDbid, 16, zTheirs);
    snprintf(zMsg, sizeof(zMsg), "this standby %s database %s; the primary offers database %s",
             p->bHave ? "holds" : "is configured for", zMine, zTheirs);
    sbRefuse(pConn, zMsg);
    sbNoteRefusal(p, zPeer, zMsg);
    return tdeErr(TDE_AUTH, "%s", zMsg);
  }
  if( p->bHave ){
    char zWhy[300];
    zWhy[0] = 0;
    if( memcmp(aBody+24, p->aHistory, 16)!=0 ){
      char zH[33];
      tdeHex(aBody+24, 16, zH);
      snprintf(zWhy, sizeof(zWhy), "the primary offers another history (%s) than the one this copy applied "
               "%llu transactions of", zH, (unsigned long long)p->applied);
    }else if( tdeGet64(aBody+72)<p->applied ){
      snprintf(zWhy, sizeof(zWhy), "the primary's history ends at transaction %llu, this copy applied %llu",
               (unsigned long long)tdeGet64(aBody+72), (unsigned long long)p->applied);
    }
    if( (zWhy[0] || p->zDiverged[0]) && p->bAcceptRewind ){
      if( zWhy[0] ){
        tdeLog(TDE_LOG_WARNING, "standby %s: %s: accepted (--accept-rewind); waiting for its base copy", p->zDb, zWhy);
      }else{
        /* The hello does not go back; its base copy may (a primary that
        ** lost commits): still armed for that one. */
        tdeLog(TDE_LOG_WARNING, "standby %s: was diverged (%s); --accept-rewind: taking the primary's stream "
               "or base copy", p->zDb, p->zDiverged);
      }
    }else if( zWhy[0] || p->zDiverged[0] ){
      char zMsg[600];
      if( zWhy[0] ) sbDiverge(p, zPeer, zWhy);
      snprintf(zMsg, sizeof(zMsg), "this standby has diverged from the primary: %s; the operator must restart "
               "it with --accept-rewind or re-seed it", p->zDiverged);
      sbRefuse(pConn, zMsg);
      sbNoteRefusal(p, zPeer, zMsg);
      return tdeErr(TDE_AUTH, "%s", zMsg);
    }
  }
  p->primarySeq = tdeGet64(aBody+72);
  {
    uint8_t aOk[25 + 32];
    tdePut64(aOk, p->applied);
    /* Flags: 1 holds a copy, 2 verifies signatures, 4 its record chain
    ** at the applied sequence follows. */
    aOk[8] = (uint8_t)((p->bHave ? 1 : 0) | (p->pCfg->nPubKey ? 2 : 0) | (p->bChain ? 4 : 0));
    memcpy(aOk+9, p->aHistory, 16);
    if( p->bChain ) memcpy(aOk+25, p->aChain, 32);
    else memset(aOk+25, 0, 32);
    rc = tdeConnSend(pConn, TDE_MSG_HELLO_OK, aOk, sizeof(aOk), 0, 0);
  }
  return rc;
}

/* ---- connections: acceptor and handshake threads -------------------------- */

#define SB_MAX_HANDSHAKES  8

typedef struct SbHs {
  Standby *p;
  int fd;
  char zPeer[128];
} SbHs;

static void sbPeerName(const struct sockaddr_storage *sa, char *z, size_t n){
  char zHost[64] = "?";
  int port = 0;
  if( sa->ss_family==AF_INET ){
    const struct sockaddr_in *s4 = (const struct sockaddr_in*)sa;
    inet_ntop(AF_INET, &s4->sin_addr, zHost, sizeof(zHost));
    port = ntohs(s4->sin_port);
  }else if( sa->ss_family==AF_INET6 ){
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6*)sa;
    inet_ntop(AF_INET6, &s6->sin6_addr, zHost, sizeof(zHost));
    port = ntohs(s6->sin6_port);
  }
  snprintf(z, n, "%s:%d", zHost, port);
}

/* TLS, then the hello, each by its deadline; only then is the connection
** posted to the main thread.  Never touches the copy. */
static void *sbHandshakeMain(void *pArg){
  SbHs *h = pArg;
  Standby *p = h->p;
  TdeConn c;
  char zWhy[512];
  uint8_t *aBody = 0;
  size_t nBody = 0;
  int eType = 0, rc;
  tdeConnOpen(&c, h->fd);
  rc = tdeTlsServer(p->pCfg, &c, zWhy, sizeof(zWhy));
  if( rc==TDE_OK ){
    uint64_t deadline = tdeNowMs() + (uint64_t)p->pCfg->timeoutMs;
    rc = tdeConnRecvBy(&c, p->pCfg->timeoutMs, deadline, &eType, &aBody, &nBody);
    if( rc==TDE_NOTFOUND ){
      snprintf(zWhy, sizeof(zWhy), "no hello within %d ms", p->pCfg->timeoutMs);
    }else if( rc ){
      snprintf(zWhy, sizeof(zWhy), "no hello: %s", tde_last_error());
    }else if( eType!=TDE_MSG_HELLO || nBody<80 || memcmp(aBody, TDE_WIRE_MAGIC, 8)!=0 ){
      snprintf(zWhy, sizeof(zWhy), "not an sqlite-tde primary (bad hello)");
      tdeConnSend(&c, TDE_MSG_REFUSE, (const uint8_t*)zWhy, strlen(zWhy), 0, 0);
      rc = TDE_FORMAT;
    }
  }
  if( rc ){
    tdeLog(TDE_LOG_ERROR, "standby %s: refusing the connection from %s: %s", p->zDb, h->zPeer, zWhy);
    sbNoteRefusal(p, h->zPeer, zWhy);
    sqlite3_free(aBody);
    tdeConnClose(&c);
  }else{
    TdeConn old;
    uint8_t *aOld = 0;
    int bOld = 0;
    pthread_mutex_lock(&p->mu);
    if( p->bPending ){ old = p->pending; aOld = p->aPendHello; bOld = 1; }
    p->pending = c;
    p->aPendHello = aBody;
    p->nPendHello = nBody;
    snprintf(p->zPendPeer, sizeof(p->zPendPeer), "%s", h->zPeer);
    p->bPending = 1;
    pthread_mutex_unlock(&p->mu);
    if( bOld ){ tdeConnClose(&old); sqlite3_free(aOld); }
    {
      char b = 1;
      if( write(p->aWake[1], &b, 1)<0 ){ /* the pipe is full: a wake-up is pending anyway */ }
    }
  }
  pthread_mutex_lock(&p->mu);
  p->nHandshake--;
  pthread_mutex_unlock(&p->mu);
  sqlite3_free(h);
  return 0;
}

static void *sbAcceptMain(void *pArg){
  Standby *p = pArg;
  while( !*p->pbStop ){
    struct sockaddr_storage sa;
    socklen_t nSa = sizeof(sa);
    SbHs *h;
    pthread_t tid;
    pthread_attr_t attr;
    int fd, nBusy;
    if( !tdeNetReadable(p->fdListen, 300) ) continue;
    fd = accept4(p->fdListen, (struct sockaddr*)&sa, &nSa, SOCK_CLOEXEC);
    if( fd<0 ) continue;
    tdeNetTune(fd);
    h = sqlite3_malloc(sizeof(*h));
    if( !h ){ close(fd); continue; }
    h->p = p;
    h->fd = fd;
    sbPeerName(&sa, h->zPeer, sizeof(h->zPeer));
    pthread_mutex_lock(&p->mu);
    nBusy = p->nHandshake;
    if( nBusy<SB_MAX_HANDSHAKES ) p->nHandshake++;
    pthread_mutex_unlock(&p->mu);
    if( nBusy>=SB_MAX_HANDSHAKES ){
      /* A flood of connections: drop the newest, never the session. */
      tdeLog(TDE_LOG_WARNING, "standby %s: refusing the connection from %s: %d handshakes already in progress",
             p->zDb, h->zPeer, nBusy);
      sbNoteRefusal(p, h->zPeer, "too many handshakes in progress");
      close(fd);
      sqlite3_free(h);
      continue;
    }
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if( pthread_create(&tid, &attr, sbHandshakeMain, h)!=0 ){
      pthread_mutex_lock(&p->mu);
      p->nHandshake--;
      pthread_mutex_unlock(&p->mu);
      close(fd);
      sqlite3_free(h);
    }
    pthread_attr_destroy(&attr);
  }
  return 0;
}

/* Take the connection a handshake thread posted, if any (main thread). */
static int sbTakePending(Standby *p, TdeConn *pConn, uint8_t **paHello, size_t *pnHello, char *zPeer, size_t nPeer){
  int bGot = 0;
  char aBuf[64];
  while( read(p->aWake[0], aBuf, sizeof(aBuf))>0 ){}
  pthread_mutex_lock(&p->mu);
  if( p->bPending ){
    *pConn = p->pending;
    *paHello = p->aPendHello;
    *pnHello = p->nPendHello;
    snprintf(zPeer, nPeer, "%s", p->zPendPeer);
    p->bPending = 0;
    p->aPendHello = 0;
    bGot = 1;
  }
  pthread_mutex_unlock(&p->mu);
  return bGot;
}

/*
** Verifying (repl_primary_pubkey): apply the pending records that verified
** heads cover, after checking that the record chain there is the one the
** primary signed; acknowledge after each batch.  A mismatch means a record
** was re-sequenced, replayed or altered: nothing of it is logged or
** applied, the connection ends.
*/
static int sbApplyVerified(Standby *p, TdeConn *pConn){
  int rc = TDE_OK;
  while( p->nHead>0 ){
    uint64_t hs = p->aHead[0].seq;
    int k;
    if( hs<=p->applied ){
      if( hs==p->applied && p->bChain && memcmp(p->aHead[0].aChain, p->aChain, 32)!=0 ){
        return tdeErr(TDE_AUTH, "the primary's signed head at %llu is not this copy's record chain",
                      (unsigned long long)hs);
      }
      p->nHead--;
      memmove(&p->aHead[0], &p->aHead[1], sizeof(p->aHead[0])*(size_t)p->nHead);
      continue;
    }
    if( hs > p->applied + (uint64_t)p->nPend ) break;
    k = (int)(hs - p->applied);
    if( memcmp(p->aPend[k-1].aChain, p->aHead[0].aChain, 32)!=0 ){
      return tdeErr(TDE_AUTH, "transaction %llu is not the one the primary signed (record chain mismatch): "
                    "a re-sequenced, replayed or altered record", (unsigned long long)hs);
    }
    for(int i0=0; i0<k; i0+=SB_BATCH_MAX){
      int nB = k-i0<SB_BATCH_MAX ? k-i0 : SB_BATCH_MAX;
      SbCheck chk;
      memset(&chk, 0, sizeof(chk));
      for(int i=0; rc==TDE_OK && i<nB; i++){
        rc = sbValidate(p, &chk, &p->aPend[i0+i]);
        if( rc ){
          tdeLog(TDE_LOG_ERROR, "standby %s: rejecting transaction %llu from %s: %s; dropping the connection",
                 p->zDb, (unsigned long long)p->aPend[i0+i].r.seq, p->zPeer, tde_last_error());
        }
      }
      if( rc==TDE_OK ) rc = sbApplyBatch(p, &p->aPend[i0], nB);
      if( rc==TDE_OK ) rc = sbAck(pConn, p->applied);
      if( rc ) return rc;
    }
    for(int i=0; i<k; i++){ p->nPendBytes -= p->aPend[i].n; sqlite3_free(p->aPend[i].a); }
    p->nPend -= k;
    memmove(&p->aPend[0], &p->aPend[k], sizeof(SbRec)*(size_t)p->nPend);
    p->nHead--;
    memmove(&p->aHead[0], &p->aHead[1], sizeof(p->aHead[0])*(size_t)p->nHead);
  }
  return rc;
}

/* One session with a primary (sbSession): its connection, the one that
** replaces it, and what the stream asked for. */
typedef struct SbSession {
  TdeConn *pConn;
  const uint8_t *aDbid;       /* the database the primary said hello for */
  TdeConn *pNext;             /* out: a verified connection that replaces this one */
  int *pbNext;
  uint8_t *aNextDbid;         /* out: its database id */
  uint64_t resendFor;         /* the sequence last asked for again (UINT64_MAX: none) */
  uint64_t tResend;
  int bDupSeen;               /* a duplicate was logged */
  uint8_t *aPend;             /* a message read past the batch */
  size_t nPend;
  int ePend;
} SbSession;

/* A verified connection posted meanwhile (sbHandshakeMain) is answered at
** once: refused if it is another database, else it replaces this session
** (*ss->pbNext). */
static void sbTakeOver(Standby *p, SbSession *ss){
  TdeConn c2;
  uint8_t *aH = 0;
  size_t nH = 0;
  char zPeer2[128];
  if( !sbTakePending(p, &c2, &aH, &nH, zPeer2, sizeof(zPeer2)) ) return;
  if( sbHello(p, &c2, aH, nH, zPeer2, ss->aNextDbid)==TDE_OK ){
    tdeLog(TDE_LOG_INFO, "standby %s: a new verified connection from the primary (%s, %s) replaces "
           "the current one", p->zDb, zPeer2, c2.zPeerId[0] ? c2.zPeerId : "no TLS");
    snprintf(p->zPeer, sizeof(p->zPeer), "%s", zPeer2);
    *ss->pNext = c2;
    *ss->pbNext = 1;
    sqlite3_free(aH);
    return;
  }
  tdeConnClose(&c2);
  sqlite3_free(aH);
}

/* No message: the primary sends a heartbeat every 0.5 s except while it
** makes a base copy; after SB_SILENT_MS say so (status), keep the
** connection (keepalive ends a dead one; a new connection from the primary
** replaces it). */
static void sbNoteSilence(Standby *p){
  if( tdeNowMs()-p->tHeardMs>SB_SILENT_MS && strcmp(p->zStatus, "silent")!=0 ){
    snprintf(p->zStatus, sizeof(p->zStatus), "silent");
    if( p->bHave ) sbWriteState(p, 0);
  }
  if( p->bHave && tdeNowMs()-p->tStateMs>1000 ) sbWriteState(p, 0);
}

/* The next message, waiting up to 0.5 s (*pbGot: one came), or a
** connection that replaces the session (*ss->pbNext). */
static int sbWaitMessage(Standby *p, SbSession *ss, int *peType, uint8_t **paBody, size_t *pnBody, int *pbGot){
  struct pollfd aPoll[2] = { { ss->pConn->fd, POLLIN, 0 }, { p->aWake[0], POLLIN, 0 } };
  int rc;
  *pbGot = 0;
  if( !tdeConnReadable(ss->pConn, 0) ) poll(aPoll, 2, 500);
  if( aPoll[1].revents & POLLIN ){
    sbTakeOver(p, ss);
    return TDE_OK;
  }
  rc = tdeConnRecv(ss->pConn, 0, peType, paBody, pnBody);
  if( rc==TDE_NOTFOUND ){
    sbNoteSilence(p);
    return TDE_OK;
  }
  if( rc ) return rc;
  p->tHeardMs = tdeNowMs();
  if( strcmp(p->zStatus, "silent")==0 ) snprintf(p->zStatus, sizeof(p->zStatus), "streaming");
  *pbGot = 1;
  return TDE_OK;
}

/* A transaction already applied: acknowledge again, apply nothing. */
static int sbDuplicate(Standby *p, SbSession *ss, uint64_t seq){
  if( !ss->bDupSeen ){
    tdeLog(TDE_LOG_INFO, "standby %s: transaction %llu is already applied: acknowledged again, "
           "ignored (duplicates after this one are not logged)", p->zDb, (unsigned long long)seq);
    ss->bDupSeen = 1;
  }
  return sbAck(ss->pConn, p->applied);
}

/* A transaction after a missing one: ask for `expect` again (at most once
** a second for the same one). */
static int sbAskResend(Standby *p, SbSession *ss, uint64_t seq, uint64_t expect){
  uint8_t a[8];
  int rc;
  if( ss->resendFor==expect && tdeNowMs()-ss->tResend<=1000 ) return TDE_OK;
  tdeLog(TDE_LOG_WARNING, "standby %s: got transaction %llu while waiting for %llu; asking to resend",
         p->zDb, (unsigned long long)seq, (unsigned long long)expect);
  tdePut64(a, expect);
  rc = tdeConnSend(ss->pConn, TDE_MSG_RESEND, a, 8, 0, 0);
  if( rc ) return rc;
  ss->resendFor = expect;
  ss->tResend = tdeNowMs();
  return TDE_OK;
}

/* Verifying (repl_primary_pubkey): a transaction waits, in order, for the
** signed head that covers it.  Takes aBody. */
static int sbOnTxnVerified(Standby *p, SbSession *ss, uint8_t *aBody, size_t nBody){
  TdeRec r;
  uint64_t expect;
  int rc;
  if( tdeRecCheck(aBody, nBody, &r)!=TDE_OK ){
    sqlite3_free(aBody);
    return tdeErr(TDE_AUTH, "a transaction failed its checksum: dropping the connection");
  }
  if( !p->bHave ){ sqlite3_free(aBody); return TDE_OK; }
  if( r.seq<=p->applied ){
    sqlite3_free(aBody);
    return sbDuplicate(p, ss, r.seq);
  }
  expect = p->applied + (uint64_t)p->nPend + 1;
  if( r.seq<expect ){ sqlite3_free(aBody); return TDE_OK; }     /* already waiting for its head */
  if( r.seq>expect ){
    sqlite3_free(aBody);
    return sbAskResend(p, ss, r.seq, expect);
  }
  if( !(p->nPend ? p->aPend[p->nPend-1].bChain : p->bChain) ){
    sqlite3_free(aBody);
    return tdeErr(TDE_AUTH, "this copy's record chain is not known (a version 1 state file or an unsigned "
                  "base copy): it needs a signed base copy");
  }
  if( p->nPend>=SB_PEND_MAX || p->nPendBytes+nBody>SB_PEND_BYTES ){
    sqlite3_free(aBody);
    return tdeErr(TDE_AUTH, "%d transactions without a signed head: dropping the connection", p->nPend);
  }
  if( !p->aPend ){
    p->aPend = sqlite3_malloc64(sizeof(SbRec)*SB_PEND_MAX);
    if( !p->aPend ){ sqlite3_free(aBody); return TDE_NOMEM; }
  }
  p->aPend[p->nPend].a = aBody;
  p->aPend[p->nPend].n = nBody;
  p->aPend[p->nPend].r = r;
  sbChainRec(p->nPend ? p->aPend[p->nPend-1].aChain : p->aChain, &p->aPend[p->nPend]);
  p->nPend++;
  p->nPendBytes += nBody;
  rc = sbApplyVerified(p, ss->pConn);
  if( rc ){
    tdeLog(TDE_LOG_ERROR, "standby %s: from %s: %s; nothing of it applied, dropping the connection", p->zDb,
           p->zPeer, tde_last_error());
    return rc;
  }
  ss->resendFor = UINT64_MAX;
  return TDE_OK;
}

/* A signed head (or a heartbeat carrying one).  Verifying: only what a
** signed head says counts, lag included.  Takes aBody. */
static int sbOnHead(Standby *p, SbSession *ss, int eType, uint8_t *aBody, size_t nBody){
  uint64_t hs = 0;
  uint8_t hc[32];
  size_t off = eType==TDE_MSG_HEAD ? 0 : 32;
  int rc;
  if( !p->pCfg->nPubKey || !p->bHave || nBody<off + TDE_HEAD_BYTES ){
    sqlite3_free(aBody);        /* not verifying, no copy yet, or an unsigned heartbeat: ignored */
    return TDE_OK;
  }
  rc = tdeHeadCheck(p->pCfg->apPubKey, p->pCfg->nPubKey, aBody+off, nBody-off, p->aDbid, p->aHistory, &hs, hc);
  if( rc ){
    sqlite3_free(aBody);
    tdeLog(TDE_LOG_ERROR, "standby %s: refusing a head from %s: %s; dropping the connection", p->zDb,
           p->zPeer, tde_last_error());
    return rc;
  }
  if( hs>p->primarySeq ){
    p->primarySeq = hs;
    p->primaryCapture = tdeGet64(aBody+off+80);
  }
  if( off ) p->primaryUnreceived = tdeGet64(aBody+24);
  sqlite3_free(aBody);
  sbHeadAdd(p, hs, hc);
  rc = sbApplyVerified(p, ss->pConn);
  if( rc ){
    tdeLog(TDE_LOG_ERROR, "standby %s: from %s: %s; nothing of it applied, dropping the connection", p->zDb,
           p->zPeer, tde_last_error());
    return rc;
  }
  if( tdeNowMs()-p->tStateMs>500 ) sbWriteState(p, 0);
  return TDE_OK;
}

/* The in-order transactions that have arrived after aBatch[0], up to a
** batch; a message that does not continue it waits in ss->aPend. */
static int sbGatherBatch(SbSession *ss, SbRec *aBatch, int *pnBatch){
  size_t nBytes = aBatch[0].n;
  int rc = TDE_OK;
  while( *pnBatch<SB_BATCH_MAX && nBytes<SB_BATCH_BYTES && tdeConnReadable(ss->pConn, 0) ){
    uint8_t *a = 0;
    size_t n = 0;
    int e = 0;
    TdeRec r2;
    rc = tdeConnRecv(ss->pConn, 0, &e, &a, &n);
    if( rc==TDE_NOTFOUND ){ rc = TDE_OK; break; }
    if( rc ) break;
    if( e==TDE_MSG_TXN && tdeRecCheck(a, n, &r2)==TDE_OK && r2.seq==aBatch[*pnBatch-1].r.seq+1 ){
      aBatch[*pnBatch].a = a; aBatch[*pnBatch].n = n; aBatch[*pnBatch].r = r2; (*pnBatch)++;
      nBytes += n;
      continue;
    }
    ss->aPend = a; ss->nPend = n; ss->ePend = e;
    break;
  }
  return rc;
}

/* Not verifying: transaction r is the next one.  Gather what else has
** arrived, validate the whole batch, then apply and acknowledge it.
** Takes aBody. */
static int sbApplyInOrder(Standby *p, SbSession *ss, uint8_t *aBody, size_t nBody, const TdeRec *r){
  SbRec aBatch[SB_BATCH_MAX];
  int nBatch = 0, rc;
  aBatch[nBatch].a = aBody; aBatch[nBatch].n = nBody; aBatch[nBatch].r = *r; nBatch++;
  rc = sbGatherBatch(ss, aBatch, &nBatch);
  for(int i=0; i<nBatch; i++){
    /* The chain is kept (not verified: no key pinned) for a later switch. */
    aBatch[i].bChain = 0;
    if( i ? aBatch[i-1].bChain : p->bChain ) sbChainRec(i ? aBatch[i-1].aChain : p->aChain, &aBatch[i]);
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
  if( rc==TDE_OK ) rc = sbAck(ss->pConn, p->applied);
  if( rc ) return rc;
  ss->resendFor = UINT64_MAX;
  return TDE_OK;
}

/* Not verifying: a transaction, applied in order.  Takes aBody. */
static int sbOnTxn(Standby *p, SbSession *ss, uint8_t *aBody, size_t nBody){
  TdeRec r;
  if( tdeRecCheck(aBody, nBody, &r)!=TDE_OK ){
    sqlite3_free(aBody);
    return tdeErr(TDE_AUTH, "a transaction failed its checksum: dropping the connection");
  }
  if( !p->bHave ){
    sqlite3_free(aBody);
    return TDE_OK;           /* waiting for a base copy */
  }
  if( r.seq<=p->applied ){
    sqlite3_free(aBody);
    return sbDuplicate(p, ss, r.seq);
  }
  if( r.seq!=p->applied+1 ){
    sqlite3_free(aBody);
    return sbAskResend(p, ss, r.seq, p->applied+1);
  }
  return sbApplyInOrder(p, ss, aBody, nBody, &r);
}

/* A base copy replaces the copy.  Takes aBody. */
static int sbOnBase(Standby *p, SbSession *ss, uint8_t *aBody, size_t nBody){
  int rc;
  sbPendClear(p);
  rc = sbReceiveBase(p, ss->pConn, aBody, nBody, ss->aDbid);
  sqlite3_free(aBody);
  if( rc ) return rc;
  tdeLog(TDE_LOG_INFO, "standby %s: base copy applied at sequence %llu", p->zDb, (unsigned long long)p->applied);
  return sbAck(ss->pConn, p->applied);
}

/* Not verifying: where the primary stands.  Takes aBody. */
static void sbOnHeartbeat(Standby *p, uint8_t *aBody){
  p->primarySeq = tdeGet64(aBody);
  p->primaryCapture = tdeGet64(aBody+8);
  p->primaryUnreceived = tdeGet64(aBody+24);
  sqlite3_free(aBody);
  if( p->bHave && tdeNowMs()-p->tStateMs>500 ) sbWriteState(p, 0);
}

/* A session with a primary that has said hello.  A verified connection
** posted meanwhile (sbHandshakeMain) is answered at once: refused if it is
** another database, else it replaces this one (*pNext, *pbNext, its
** database id in aNextDbid; the old one may be a connection the network
** cut without telling us). */
static int sbSession(Standby *p, TdeConn *pConn, const uint8_t *aDbid, TdeConn *pNext, int *pbNext,
                     uint8_t *aNextDbid){
  SbSession ss;
  int rc = TDE_OK;

  memset(&ss, 0, sizeof(ss));
  ss.pConn = pConn;
  ss.aDbid = aDbid;
  ss.pNext = pNext;
  ss.pbNext = pbNext;
  ss.aNextDbid = aNextDbid;
  ss.resendFor = UINT64_MAX;
  *pbNext = 0;
  sbPendClear(p);
  p->tHeardMs = tdeNowMs();
  snprintf(p->zStatus, sizeof(p->zStatus), "streaming");
  if( p->bHave ) sbWriteState(p, 0);

  while( rc==TDE_OK && !*p->pbStop ){
    uint8_t *aBody = 0;
    size_t nBody = 0;
    int eType = 0, bGot = 1;
    if( ss.aPend ){
      aBody = ss.aPend; nBody = ss.nPend; eType = ss.ePend;
      ss.aPend = 0;
    }else{
      rc = sbWaitMessage(p, &ss, &eType, &aBody, &nBody, &bGot);
      if( rc || *pbNext ) break;
      if( !bGot ) continue;
    }
    if( eType==TDE_MSG_TXN && p->pCfg->nPubKey ){
      rc = sbOnTxnVerified(p, &ss, aBody, nBody);
    }else if( eType==TDE_MSG_HEAD || (eType==TDE_MSG_HEARTBEAT && p->pCfg->nPubKey) ){
      rc = sbOnHead(p, &ss, eType, aBody, nBody);
    }else if( eType==TDE_MSG_TXN ){
      rc = sbOnTxn(p, &ss, aBody, nBody);
    }else if( eType==TDE_MSG_BASE_BEGIN ){
      rc = sbOnBase(p, &ss, aBody, nBody);
    }else if( eType==TDE_MSG_HEARTBEAT && nBody>=32 ){
      sbOnHeartbeat(p, aBody);
    }else{
      sqlite3_free(aBody);
    }
  }
  sqlite3_free(ss.aPend);
  return rc;
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

TDE_API int tde_standby_run_v2(const char *zDb, const char *zListen, const char *zReplConfig, unsigned flags,
                               volatile int *pbStop){
  Standby sb;
  Standby *p = &sb;
  volatile int bNever = 0;
  int fdListen = -1, rc, nReplayed = 0, bAccept = 0;
  pthread_t tidAccept;
  memset(p, 0, sizeof(*p));
  p->fdDb = p->fdLog = p->fdLock = -1;
  p->aWake[0] = p->aWake[1] = -1;
  p->zListen = zListen;
  p->pbStop = pbStop ? pbStop : &bNever;
  if( !zDb || !zListen ) return tdeErr(TDE_MISUSE, "tde_standby_run_v2: a database and an address");
  rc = tdeReplCfgLoad(zReplConfig, flags, 1, &p->pCfg);
  if( rc ) return rc;
  pthread_mutex_init(&p->mu, 0);
  p->bMu = 1;
  rc = sbPaths(p, zDb);
  if( rc ) goto done;
  if( (p->pCfg->zAudit[0] ? snprintf(p->zAudit, sizeof(p->zAudit), "%s", p->pCfg->zAudit)
                           : snprintf(p->zAudit, sizeof(p->zAudit), "%s-tdestandby-audit", p->zDb))>=(int)sizeof(p->zAudit) ){
    rc = tdeErr(TDE_RANGE, "audit log path too long");
    goto done;
  }
  p->bAcceptRewind = (flags & TDE_REPL_ACCEPT_REWIND)!=0;
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
  if( !p->bHave && !p->pCfg->bInsecure && !p->pCfg->bPrimaryDbid && p->pCfg->nPin==0 ){
    /* Whoever connects first must not become this standby's primary. */
    rc = tdeErr(TDE_CONFIG, "%s: a new standby must name its primary: set repl_primary_database_id or "
                "repl_peer_pubkey_sha256 in %s", p->zDb, p->pCfg->zPath);
    goto done;
  }
  if( !p->bHave && p->pCfg->bInsecure && !p->pCfg->bPrimaryDbid ){
    tdeLog(TDE_LOG_WARNING, "standby %s: no copy yet and no repl_primary_database_id: the first peer that "
           "connects becomes the primary (--insecure-no-tls)", p->zDb);
  }
  if( p->bAcceptRewind ){
    sbAudit(p, "standby_accept_rewind", 0, "armed: the next base copy may replace this copy even if older "
            "or of another history");
  }
  rc = tdeNetListen(zListen, &fdListen);
  if( rc ) goto done;
  p->fdListen = fdListen;
  if( pipe2(p->aWake, O_CLOEXEC | O_NONBLOCK)!=0 ){
    rc = tdeErr(TDE_IO, "pipe: %s", strerror(errno));
    goto done;
  }
  if( pthread_create(&tidAccept, 0, sbAcceptMain, p)!=0 ){
    rc = tdeErr(TDE_ERROR, "cannot start the acceptor thread");
    goto done;
  }
  bAccept = 1;
  snprintf(p->zStatus, sizeof(p->zStatus), "waiting");
  if( p->bHave ) sbWriteState(p, 0);
  if( p->pCfg->bInsecure ){
    tdeLog(TDE_LOG_WARNING, "standby %s: --insecure-no-tls: any host that reaches %s can feed this standby; "
           "plaintext, no peer authentication", p->zDb, zListen);
  }
  tdeLog(TDE_LOG_INFO, "standby %s: listening on %s (%s), at sequence %llu%s", p->zDb, zListen,
         p->pCfg->bInsecure ? "no TLS" : "mutual TLS", (unsigned long long)p->applied,
         p->bHave ? "" : " (no copy yet: waiting for a base copy)");
  while( !*p->pbStop ){
    TdeConn conn;
    uint8_t *aH = 0;
    size_t nH = 0;
    char zPeer[128];
    if( !sbTakePending(p, &conn, &aH, &nH, zPeer, sizeof(zPeer)) ){
      tdeNetReadable(p->aWake[0], 300);
      if( p->bHave && tdeNowMs()-p->tStateMs>1000 ) sbWriteState(p, 0);
      continue;
    }
    {
      uint8_t aDbid[16];
      int bHas = 1;
      rc = sbHello(p, &conn, aH, nH, zPeer, aDbid);
      sqlite3_free(aH);
      if( rc==TDE_OK ){
        snprintf(p->zPeer, sizeof(p->zPeer), "%s", zPeer);
        tdeLog(TDE_LOG_INFO, "standby %s: session with %s over %s (%s)", p->zDb, zPeer, tdeConnProto(&conn),
               conn.zPeerId[0] ? conn.zPeerId : "unauthenticated");
      }
      while( rc==TDE_OK && bHas ){
        TdeConn next;
        int bNext = 0;
        uint8_t aNext[16];
        rc = sbSession(p, &conn, aDbid, &next, &bNext, aNext);
        sbPendClear(p);
        tdeConnClose(&conn);
        bHas = 0;
        if( bNext ){ conn = next; memcpy(aDbid, aNext, 16); bHas = 1; }
      }
      if( bHas ) tdeConnClose(&conn);
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
  if( bAccept ){
    *(volatile int*)p->pbStop = 1;
    pthread_join(tidAccept, 0);
  }
  /* Handshake threads end by their deadline. */
  for(;;){
    int n;
    pthread_mutex_lock(&p->mu);
    n = p->nHandshake;
    pthread_mutex_unlock(&p->mu);
    if( n==0 ) break;
    sbSleepMs(10);
  }
  if( p->bPending ){ tdeConnClose(&p->pending); sqlite3_free(p->aPendHello); p->bPending = 0; }
  if( fdListen>=0 ) close(fdListen);
  if( p->aWake[0]>=0 ) close(p->aWake[0]);
  if( p->aWake[1]>=0 ) close(p->aWake[1]);
  pthread_mutex_destroy(&p->mu);
  sbPendClear(p);
  sqlite3_free(p->aPend);
  tdeReplCfgFree(p->pCfg);
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
