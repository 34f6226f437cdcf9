/*
** Protection mode "sync" (README "Standby"): a commit on the primary
** returns only once a standby has acknowledged it (it acknowledges after
** its redo log and its copy are synced), or after repl_sync_timeout_ms, when
** the shipper falls back to async and says so (tde_status, audit log).
**
** The shipper in sync mode keeps DB-tdeship-sync (docs/FORMAT.md): its
** mode, timeout and pid, and the WAL position (salts, last frame) of the
** newest transaction a standby acknowledged.  The shim, when a connection
** releases SQLite's WAL write lock after a commit, calls tdeReplSyncWait,
** which waits for that position to reach its own commit.  No file: no
** wait; the writer never talks to the network.  The absence is cached per
** connection for TDE_SYNC_RECHECK_US (one failed open(2) per that time
** instead of per commit), and a shipper that creates the file waits that
** long before it counts as started in sync mode: a writer that found no
** file at monotonic time t skips the check only until t + the interval,
** which is before the shipper's start returns, so every commit that
** begins after the start opens the file.
**
** The file's existence proves nothing (anyone who can write the folder can
** create it).  A commit waits only for a shipper whose presence is proven:
** the shipper holds an open-file-description write lock on the file for
** as long as it runs (the kernel drops it when the process dies), and the
** writer waits only while that lock is held and the path still names the
** file it opened; the wait never exceeds TDE_SYNC_MAX_WAIT_MS, the largest
** repl_sync_timeout_ms the configuration accepts, whatever the file says.
** Must never: block a commit on a file alone, or open a FIFO or a link.
*/
#include "repl/repl.h"
#include "cipher/cipher.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SYNC_MAGIC  "TDESYNC1"

typedef struct SyncView {
  uint32_t mode, timeoutMs, pid, degraded, valid, iLast;
  uint8_t aSalt[8];
} SyncView;

/* Two equal reads (the shipper rewrites the 40 bytes in one pwrite). */
static int syncRead(int fd, SyncView *v){
  uint8_t a[TDE_SYNC_BYTES], b[TDE_SYNC_BYTES];
  for(int i=0; i<4; i++){
    if( pread(fd, a, sizeof(a), 0)!=(ssize_t)sizeof(a) ) return TDE_NOTFOUND;
    if( pread(fd, b, sizeof(b), 0)!=(ssize_t)sizeof(b) ) return TDE_NOTFOUND;
    if( memcmp(a, b, sizeof(a))==0 ) break;
  }
  if( memcmp(a, SYNC_MAGIC, 8)!=0 ) return TDE_FORMAT;
  v->mode = tdeGet32(a+8);
  v->timeoutMs = tdeGet32(a+12);
  v->pid = tdeGet32(a+16);
  v->degraded = tdeGet32(a+20);
  memcpy(v->aSalt, a+24, 8);
  v->iLast = tdeGet32(a+32);
  v->valid = tdeGet32(a+36);
  return TDE_OK;
}

/* Has the acknowledged position reached (salts, mxFrame)?  WAL restarts
** add one to salt-1 (SQLite's walRestartHdr), so generations compare by
** it; a WAL cannot be deleted while this connection holds it open. */
int tdeSyncCovers(const uint8_t *aAckSalt, uint32_t ackLast, const uint8_t *aSalt, uint32_t mxFrame){
  int32_t d = (int32_t)(tdeGet32(aAckSalt) - tdeGet32(aSalt));
  /* A few restarts later: newer.  A difference beyond any plausible count
  ** of restarts is another WAL (salts are random when a WAL is created). */
  if( d>0 && d<(1<<16) ) return 1;
  return d==0 && memcmp(aAckSalt, aSalt, 8)==0 && ackLast>=mxFrame;
}

/* Monotonic microseconds (the same clock in every process). */
static uint64_t syncMonoUs(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec*1000000u + (uint64_t)ts.tv_nsec/1000u;
}

/* Is a write lock held on the file fd names, by another open file
** description (the shipper's)?  An error counts as no. */
static int syncLockHeld(int fd){
  struct flock fl;
  memset(&fl, 0, sizeof(fl));
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  if( fcntl(fd, F_OFD_GETLK, &fl)!=0 ) return 0;
  return fl.l_type!=F_UNLCK;
}

/* Does zPath still name the file fd has open (not removed or replaced)? */
static int syncSameFile(const char *zPath, int fd){
  struct stat a, b;
  if( stat(zPath, &a)!=0 || fstat(fd, &b)!=0 ) return 0;
  return a.st_dev==b.st_dev && a.st_ino==b.st_ino;
}

void tdeReplSyncWait(const char *zDb, const TdeWalEnd *pMine, uint64_t *pNoFileUntil){
  char zPath[4200];
  SyncView v;
  struct stat st;
  uint64_t deadline, tBefore;
  uint32_t waitMs;
  int fd;
  if( !zDb || !pMine->bKnown ) return;
  /* The clock is read before the open: the absence it records is at
  ** least as old as the open that saw it. */
  tBefore = syncMonoUs();
  if( pNoFileUntil && tBefore<*pNoFileUntil ) return;   /* no file, seen less than the interval ago */
  if( snprintf(zPath, sizeof(zPath), "%s-tdeship-sync", zDb)>=(int)sizeof(zPath) ) return;
  /* O_NONBLOCK: a FIFO put there must not block the open. */
  fd = open(zPath, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if( fd<0 ){
    /* async: no shipper in sync mode */
    if( pNoFileUntil ) *pNoFileUntil = tBefore + TDE_SYNC_RECHECK_US;
    return;
  }
  if( pNoFileUntil ) *pNoFileUntil = 0;
  if( fstat(fd, &st)!=0 || !S_ISREG(st.st_mode) ) goto done;
  if( syncRead(fd, &v)!=TDE_OK || v.mode!=TDE_SYNC_MODE_SYNC || v.degraded ) goto done;
  if( !syncLockHeld(fd) ) goto done;       /* no shipper holds it: nobody to wait for */
  waitMs = v.timeoutMs<TDE_SYNC_MAX_WAIT_MS ? v.timeoutMs : TDE_SYNC_MAX_WAIT_MS;
  deadline = tdeNowMs() + waitMs;
  for(unsigned n=0;; n++){
    struct timespec ts = { 0, 100000 };
    if( v.valid && tdeSyncCovers(v.aSalt, v.iLast, pMine->aSalt, pMine->mxFrame) ) break;
    if( v.degraded ) break;
    if( tdeNowMs()>=deadline ){
      tdeLog(TDE_LOG_WARNING, "%s: sync mode: no standby acknowledged the commit within %u ms; continuing "
             "(the shipper falls back to async)", zDb, waitMs);
      break;
    }
    /* Every 10 ms: the shipper still there, the file still in place. */
    if( (n % 100)==99 && (!syncLockHeld(fd) || !syncSameFile(zPath, fd)) ) break;
    nanosleep(&ts, 0);
    if( syncRead(fd, &v)!=TDE_OK ) break;
  }
done:
  close(fd);
}

int tdeSyncCreate(const char *zDb, uint32_t timeoutMs, int *pFd){
  char zPath[4200];
  uint8_t a[TDE_SYNC_BYTES];
  struct flock fl;
  struct stat st;
  int fd, rc;
  snprintf(zPath, sizeof(zPath), "%s-tdeship-sync", zDb);
  fd = open(zPath, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if( fd<0 ) return tdeErr(TDE_IO, "%s: %s", zPath, strerror(errno));
  if( fstat(fd, &st)!=0 || !S_ISREG(st.st_mode) ){
    close(fd);
    return tdeErr(TDE_IO, "%s: not a regular file; remove it", zPath);
  }
  /* The lock proves this shipper's presence to writers (held until the
  ** process ends or tdeSyncRemove closes the descriptor). */
  memset(&fl, 0, sizeof(fl));
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  if( fcntl(fd, F_OFD_SETLK, &fl)!=0 ){
    rc = errno==EAGAIN || errno==EACCES
       ? tdeErr(TDE_LOCKED, "%s: another shipper in sync mode holds it", zPath)
       : tdeErr(TDE_IO, "%s: lock: %s", zPath, strerror(errno));
    close(fd);
    return rc;
  }
  memset(a, 0, sizeof(a));
  memcpy(a, SYNC_MAGIC, 8);
  tdePut32(a+8, TDE_SYNC_MODE_SYNC);
  tdePut32(a+12, timeoutMs);
  tdePut32(a+16, (uint32_t)getpid());
  if( ftruncate(fd, 0)!=0 || pwrite(fd, a, sizeof(a), 0)!=(ssize_t)sizeof(a) ){
    rc = tdeErr(TDE_IO, "%s: %s", zPath, strerror(errno));
    close(fd);
    unlink(zPath);
    return rc;
  }
  {
    /* Writers that found no file may skip the check for
    ** TDE_SYNC_RECHECK_US from before that open: sync mode starts once
    ** every such interval begun before the file existed has ended. */
    uint64_t tEnd = syncMonoUs() + TDE_SYNC_RECHECK_US + 1;
    for(uint64_t t=syncMonoUs(); t<tEnd; t=syncMonoUs()){
      struct timespec ts = { 0, (long)((tEnd - t)*1000u) };
      nanosleep(&ts, 0);
    }
  }
  *pFd = fd;
  return TDE_OK;
}

void tdeSyncPublish(int fd, int bDegraded, const uint8_t *aSalt, uint32_t iLast, int bValid){
  uint8_t a[20];
  tdePut32(a, (uint32_t)(bDegraded!=0));
  if( bValid ) memcpy(a+4, aSalt, 8); else memset(a+4, 0, 8);
  tdePut32(a+12, iLast);
  tdePut32(a+16, (uint32_t)(bValid!=0));
  if( pwrite(fd, a, sizeof(a), 20)!=(ssize_t)sizeof(a) ){ /* readers time out and continue */ }
}

void tdeSyncRemove(const char *zDb, int fd){
  char zPath[4200];
  snprintf(zPath, sizeof(zPath), "%s-tdeship-sync", zDb);
  unlink(zPath);
  if( fd>=0 ) close(fd);
}
