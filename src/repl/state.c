/*
** State files of the standby feature (docs/FORMAT.md "Standby state
** files"): DB-tdeship-state, written by the shipper, and DB-tdestandby,
** written by the standby.  Both are "key=value" text lines ending with a
** "sha256=" line over the text before it, replaced atomically (temp file,
** fsync, rename), so a reader sees the old or the new version, never a mix.
** The shim reads them for tde_status and to recognise a standby copy.
**
** Holds no secret: sequence numbers, times, addresses, the database id.
*/
#include "repl/repl.h"
#include "cipher/cipher.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

uint64_t tdeNowMs(void){
  struct timeval tv;
  gettimeofday(&tv, 0);
  return (uint64_t)tv.tv_sec*1000 + (uint64_t)tv.tv_usec/1000;
}

void tdeHex(const uint8_t *a, size_t n, char *zOut){
  static const char hex[] = "0123456789abcdef";
  for(size_t i=0; i<n; i++){ zOut[2*i] = hex[a[i]>>4]; zOut[2*i+1] = hex[a[i]&15]; }
  zOut[2*n] = 0;
}

int tdeUnhex(const char *z, uint8_t *a, size_t n){
  if( !z || strlen(z)!=2*n ) return TDE_FORMAT;
  for(size_t i=0; i<2*n; i++){
    char c = z[i];
    int v = c>='0'&&c<='9' ? c-'0' : c>='a'&&c<='f' ? c-'a'+10 : c>='A'&&c<='F' ? c-'A'+10 : -1;
    if( v<0 ) return TDE_FORMAT;
    if( i%2==0 ) a[i/2] = (uint8_t)(v<<4); else a[i/2] |= (uint8_t)v;
  }
  return TDE_OK;
}

int tdeFsyncDir(const char *zPath){
  char zDir[4096];
  const char *zSlash = strrchr(zPath, '/');
  int fd, rc = TDE_OK;
  if( !zSlash ){
    snprintf(zDir, sizeof(zDir), ".");
  }else{
    size_t n = (size_t)(zSlash - zPath);
    if( n==0 ) n = 1;
    if( n>=sizeof(zDir) ) return tdeErr(TDE_RANGE, "path too long");
    memcpy(zDir, zPath, n);
    zDir[n] = 0;
  }
  fd = open(zDir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if( fd<0 ) return tdeErr(TDE_IO, "%s: %s", zDir, strerror(errno));
  if( fsync(fd)!=0 && errno!=EINVAL ) rc = tdeErr(TDE_IO, "%s: fsync: %s", zDir, strerror(errno));
  close(fd);
  return rc;
}

int tdeWriteFileAtomic(const char *zPath, const char *zData, size_t n, int bSync){
  static unsigned nSeq = 0;      /* per process: two threads never share a name */
  char zTmp[4200];
  int fd, rc = TDE_OK, nTry;
  size_t nDone = 0;
  unsigned iSeq = __atomic_add_fetch(&nSeq, 1, __ATOMIC_RELAXED);
  int k0 = snprintf(zTmp, sizeof(zTmp), "%s.tmp%d.%u", zPath, (int)getpid(), iSeq);
  if( k0<0 || (size_t)k0>=sizeof(zTmp) ) return tdeErr(TDE_RANGE, "%s: path too long", zPath);
  /* A new file, never one already there: a symbolic link put in the temp
  ** file's place would otherwise have the state written through it.  A
  ** stale temp file of a dead process with the same pid is removed (the
  ** link itself, not what it names) and the create tried once more. */
  for(nTry=0; ; nTry++){
    fd = open(zTmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if( fd>=0 || errno!=EEXIST || nTry>0 || unlink(zTmp)!=0 ) break;
  }
  if( fd<0 ) return tdeErr(TDE_IO, "%s: %s", zTmp, strerror(errno));
  while( nDone<n ){
    ssize_t k = write(fd, zData + nDone, n - nDone);
    if( k<0 && errno==EINTR ) continue;
    if( k<=0 ){ rc = tdeErr(TDE_IO, "%s: %s", zTmp, strerror(errno)); break; }
    nDone += (size_t)k;
  }
  if( rc==TDE_OK && bSync && fsync(fd)!=0 ) rc = tdeErr(TDE_IO, "%s: fsync: %s", zTmp, strerror(errno));
  close(fd);
  if( rc==TDE_OK && rename(zTmp, zPath)!=0 ) rc = tdeErr(TDE_IO, "%s: rename: %s", zTmp, strerror(errno));
  if( rc ) unlink(zTmp);
  if( rc==TDE_OK && bSync ) rc = tdeFsyncDir(zPath);
  return rc;
}

int tdeReadFileAll(const char *zPath, char **pz, size_t *pn){
  int fd = open(zPath, O_RDONLY | O_CLOEXEC);
  struct stat st;
  char *z;
  size_t nDone = 0;
  *pz = 0;
  *pn = 0;
  if( fd<0 ) return errno==ENOENT ? TDE_NOTFOUND : tdeErr(TDE_IO, "%s: %s", zPath, strerror(errno));
  if( fstat(fd, &st)!=0 || st.st_size>(1<<20) ){ close(fd); return tdeErr(TDE_FORMAT, "%s: unreadable or too large", zPath); }
  z = sqlite3_malloc64((sqlite3_uint64)st.st_size + 1);
  if( !z ){ close(fd); return TDE_NOMEM; }
  while( nDone<(size_t)st.st_size ){
    ssize_t k = read(fd, z + nDone, (size_t)st.st_size - nDone);
    if( k<0 && errno==EINTR ) continue;
    if( k<=0 ) break;
    nDone += (size_t)k;
  }
  close(fd);
  z[nDone] = 0;
  *pz = z;
  *pn = nDone;
  return TDE_OK;
}

/* ---- key=value files ---------------------------------------------------- */

#define KV_MAX 96
struct TdeKv {
  int n;
  char *azKey[KV_MAX];
  char *azVal[KV_MAX];
};

TdeKv *tdeKvNew(void){
  TdeKv *p = sqlite3_malloc(sizeof(*p));
  if( p ) memset(p, 0, sizeof(*p));
  return p;
}

void tdeKvFree(TdeKv *p){
  if( !p ) return;
  for(int i=0; i<p->n; i++){ sqlite3_free(p->azKey[i]); sqlite3_free(p->azVal[i]); }
  sqlite3_free(p);
}

static void kvPut(TdeKv *p, const char *zKey, char *zVal){
  for(int i=0; i<p->n; i++){
    if( strcmp(p->azKey[i], zKey)==0 ){ sqlite3_free(p->azVal[i]); p->azVal[i] = zVal; return; }
  }
  if( p->n>=KV_MAX ){ sqlite3_free(zVal); return; }
  p->azKey[p->n] = sqlite3_mprintf("%s", zKey);
  p->azVal[p->n] = zVal;
  if( !p->azKey[p->n] ){ sqlite3_free(zVal); return; }
  p->n++;
}

void tdeKvSet(TdeKv *p, const char *zKey, const char *zFmt, ...){
  va_list ap;
  char *z;
  if( !p ) return;
  va_start(ap, zFmt);
  z = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  if( z ) kvPut(p, zKey, z);
}

const char *tdeKvGet(const TdeKv *p, const char *zKey){
  for(int i=0; p && i<p->n; i++){
    if( strcmp(p->azKey[i], zKey)==0 ) return p->azVal[i];
  }
  return 0;
}

int64_t tdeKvInt(const TdeKv *p, const char *zKey){
  const char *z = tdeKvGet(p, zKey);
  return z ? strtoll(z, 0, 10) : 0;
}

int tdeKvWrite(TdeKv *p, const char *zPath, const char *zMagic, int bSync){
  sqlite3_str *s = sqlite3_str_new(0);
  uint8_t sum[32];
  char zSum[65];
  char *z;
  int n, rc;
  sqlite3_str_appendf(s, "%s\n", zMagic);
  for(int i=0; i<p->n; i++) sqlite3_str_appendf(s, "%s=%s\n", p->azKey[i], p->azVal[i]);
  n = sqlite3_str_length(s);
  z = sqlite3_str_finish(s);
  if( !z ) return TDE_NOMEM;
  tdeSha256((const uint8_t*)z, (size_t)n, sum);
  tdeHex(sum, 32, zSum);
  z = sqlite3_mprintf("%zsha256=%s\n", z, zSum);
  if( !z ) return TDE_NOMEM;
  rc = tdeWriteFileAtomic(zPath, z, strlen(z), bSync);
  sqlite3_free(z);
  return rc;
}

int tdeKvRead(const char *zPath, const char *zMagic, TdeKv **pp){
  char *z = 0, *zSum, *zLine;
  size_t n = 0;
  uint8_t sum[32];
  char zHex[65];
  TdeKv *p;
  int rc;
  *pp = 0;
  rc = tdeReadFileAll(zPath, &z, &n);
  if( rc ) return rc;
  zSum = strstr(z, "\nsha256=");
  if( !zSum || strncmp(z, zMagic, strlen(zMagic))!=0 ){
    sqlite3_free(z);
    return tdeErr(TDE_FORMAT, "%s: not a state file of this kind", zPath);
  }
  zSum++;
  tdeSha256((const uint8_t*)z, (size_t)(zSum - z), sum);
  tdeHex(sum, 32, zHex);
  if( strncmp(zSum+7, zHex, 64)!=0 ){
    sqlite3_free(z);
    return tdeErr(TDE_FORMAT, "%s: checksum mismatch", zPath);
  }
  *zSum = 0;
  p = tdeKvNew();
  if( !p ){ sqlite3_free(z); return TDE_NOMEM; }
  zLine = strchr(z, '\n');
  while( zLine ){
    char *zEnd, *zEq;
    zLine++;
    zEnd = strchr(zLine, '\n');
    if( zEnd ) *zEnd = 0;
    zEq = strchr(zLine, '=');
    if( zEq ){
      *zEq = 0;
      kvPut(p, zLine, sqlite3_mprintf("%s", zEq+1));
    }
    zLine = zEnd;
  }
  sqlite3_free(z);
  *pp = p;
  return TDE_OK;
}

/* ---- status ------------------------------------------------------------- */

static void noteAdd(TdeReplStatus *p, const char *zFmt, ...) __attribute__((format(printf, 2, 3)));
static void noteAdd(TdeReplStatus *p, const char *zFmt, ...){
  size_t n = strlen(p->zNote);
  va_list ap;
  if( n && n+2<sizeof(p->zNote) ){ memcpy(p->zNote+n, "; ", 3); n += 2; }
  va_start(ap, zFmt);
  vsnprintf(p->zNote+n, sizeof(p->zNote)-n, zFmt, ap);
  va_end(ap);
}

/* Shown this long after a refusal. */
#define TDE_REFUSAL_SHOWN_MS  (10*60*1000)

/*
** zDb is a standby copy when DB-tdestandby is a valid standby state file
** (magic and checksum) naming the database id that zDb's header carries
** (plaintext at offset 20 of header slot 0), or naming any id while zDb
** holds no header yet (a standby waiting for its first base copy).  A bare,
** damaged or foreign DB-tdestandby is ignored with a warning, so it cannot
** make a primary read-only.  The state file is replaced atomically by the
** standby (temp file, fsync, rename): a valid one is never half-written.
*/
int tdeStandbyIsCopy(const char *zDb, const uint8_t *aDbid, uint64_t *pSeq){
  char zPath[4200];
  TdeKv *kv = 0;
  uint8_t aWant[16];
  int bCopy = 0;
  *pSeq = 0;
  if( !zDb ) return 0;
  snprintf(zPath, sizeof(zPath), "%s-tdestandby", zDb);
  if( access(zPath, F_OK)!=0 ) return 0;
  if( tdeKvRead(zPath, TDE_STANDBY_STATE_MAGIC, &kv)!=TDE_OK ){
    tdeLog(TDE_LOG_WARNING, "%s: ignoring %s: not a valid standby state file (%s); "
           "the database opens as a primary", zDb, zPath, tde_last_error());
    return 0;
  }
  if( tdeUnhex(tdeKvGet(kv, "database_id"), aWant, sizeof(aWant)) ){
    tdeLog(TDE_LOG_WARNING, "%s: ignoring %s: it names no database id; the database opens "
           "as a primary", zDb, zPath);
    goto done;
  }
  /* The database is never opened here: closing any descriptor of a file
  ** drops every POSIX lock this process holds on it (SQLite's readers
  ** included), and the applier would then write under a reader. */
  if( aDbid && memcmp(aDbid, aWant, sizeof(aWant))!=0 ){
    tdeLog(TDE_LOG_WARNING, "%s: ignoring %s: it names another database; the database "
           "opens as a primary", zDb, zPath);
    goto done;
  }
  *pSeq = (uint64_t)tdeKvInt(kv, "applied_seq");
  bCopy = 1;
done:
  tdeKvFree(kv);
  return bCopy;
}

int tdeReplStatusRead(const char *zDb, TdeReplStatus *p){
  char zPath[4200];
  TdeKv *kv = 0;
  uint64_t now = tdeNowMs();
  memset(p, 0, sizeof(*p));
  snprintf(p->zRole, sizeof(p->zRole), "none");
  if( !zDb ) return TDE_OK;
  snprintf(zPath, sizeof(zPath), "%s-tdestandby", zDb);
  if( tdeKvRead(zPath, TDE_STANDBY_STATE_MAGIC, &kv)==TDE_OK ){
    int64_t primarySeq = tdeKvInt(kv, "primary_seq");
    int64_t primaryMs = tdeKvInt(kv, "primary_capture_ms");
    int64_t appliedMs = tdeKvInt(kv, "applied_capture_ms");
    int64_t receivedMs = tdeKvInt(kv, "received_capture_ms");
    snprintf(p->zRole, sizeof(p->zRole), "standby");
    snprintf(p->zPeer, sizeof(p->zPeer), "%s", tdeKvGet(kv, "primary") ? tdeKvGet(kv, "primary") : "");
    snprintf(p->zState, sizeof(p->zState), "%s", tdeKvGet(kv, "state") ? tdeKvGet(kv, "state") : "");
    p->receivedSeq = tdeKvInt(kv, "received_seq");
    p->appliedSeq = tdeKvInt(kv, "applied_seq");
    if( p->receivedSeq<p->appliedSeq ) p->receivedSeq = p->appliedSeq;
    if( primarySeq<p->receivedSeq ) primarySeq = p->receivedSeq;
    p->transportLagTxn = primarySeq - p->receivedSeq;
    p->transportLagBytes = tdeKvInt(kv, "primary_unreceived_bytes");
    p->transportLagSec = p->transportLagTxn>0 && primaryMs>receivedMs ? (double)(primaryMs - receivedMs)/1000.0 : 0.0;
    p->applyLagTxn = p->receivedSeq - p->appliedSeq;
    p->applyLagBytes = tdeKvInt(kv, "unapplied_bytes");
    p->applyLagSec = p->applyLagTxn>0 && receivedMs>appliedMs ? (double)(receivedMs - appliedMs)/1000.0 : 0.0;
    p->updatedMs = tdeKvInt(kv, "updated_ms");
    if( tdeKvGet(kv, "pid") ){
      /* A standby that is not running says so. */
      pid_t pid = (pid_t)tdeKvInt(kv, "pid");
      if( pid>0 && kill(pid, 0)!=0 && errno==ESRCH ) snprintf(p->zState, sizeof(p->zState), "stopped");
    }
    if( tdeKvGet(kv, "transport") && strcmp(tdeKvGet(kv, "transport"), "insecure-no-tls")==0 ){
      noteAdd(p, "insecure-no-tls: the link is plaintext and unauthenticated");
    }
    if( tdeKvGet(kv, "diverged") && tdeKvGet(kv, "diverged")[0] ){
      const char *zWhy = tdeKvGet(kv, "diverged");
      noteAdd(p, "diverged: %s; nothing is acknowledged until the operator runs standby --accept-rewind or "
              "re-seeds", zWhy ? zWhy : "");
    }
    {
      /* Lag is known only from verified messages: a primary not heard
      ** from says nothing about how far behind this copy is. */
      int64_t heard = tdeKvInt(kv, "heard_ms");
      if( (strcmp(p->zState, "streaming")==0 || strcmp(p->zState, "silent")==0)
       && heard>0 && (int64_t)now - heard > 2000 ){
        double sec = (double)((int64_t)now - heard)/1000.0;
        snprintf(p->zState, sizeof(p->zState), "silent");
        noteAdd(p, "primary silent for %.0f s: transport lag unknown", sec);
        p->transportLagTxn = -1;
        if( p->transportLagSec<sec ) p->transportLagSec = sec;
      }
    }
    {
      const char *zRefused = tdeKvGet(kv, "refused");
      int64_t t = tdeKvInt(kv, "refused_ms");
      if( zRefused && zRefused[0] && t>0 && (int64_t)now - t < TDE_REFUSAL_SHOWN_MS ){
        noteAdd(p, "refused %s (%.0f s ago)", zRefused, (double)((int64_t)now - t)/1000.0);
      }
    }
    tdeKvFree(kv);
    return TDE_OK;
  }
  snprintf(zPath, sizeof(zPath), "%s-tdeship-state", zDb);
  if( tdeKvRead(zPath, TDE_SHIP_STATE_MAGIC, &kv)==TDE_OK ){
    int64_t captured = tdeKvInt(kv, "captured_seq");
    int64_t capturedMs = tdeKvInt(kv, "captured_ms");
    int nPeer = (int)tdeKvInt(kv, "peers");
    int64_t minAck = -1, minSent = -1, maxBytes = 0;
    double maxSec = 0;
    int n = 0;
    snprintf(p->zRole, sizeof(p->zRole), "primary");
    snprintf(p->zState, sizeof(p->zState), "%s", tdeKvGet(kv, "state") ? tdeKvGet(kv, "state") : "");
    for(int i=0; i<nPeer && i<16; i++){
      char zK[64];
      const char *zAddr, *zSt;
      int64_t acked, ackedCap, bytes;
      snprintf(zK, sizeof(zK), "peer%d", i);
      zAddr = tdeKvGet(kv, zK);
      snprintf(zK, sizeof(zK), "peer%d_state", i);
      zSt = tdeKvGet(kv, zK);
      snprintf(zK, sizeof(zK), "peer%d_acked_seq", i);
      acked = tdeKvInt(kv, zK);
      snprintf(zK, sizeof(zK), "peer%d_acked_capture_ms", i);
      ackedCap = tdeKvInt(kv, zK);
      snprintf(zK, sizeof(zK), "peer%d_lag_bytes", i);
      bytes = tdeKvInt(kv, zK);
      snprintf(zK, sizeof(zK), "peer%d_sent_seq", i);
      if( minSent<0 || tdeKvInt(kv, zK)<minSent ) minSent = tdeKvInt(kv, zK);
      n += snprintf(p->zPeer+n, sizeof(p->zPeer)-(size_t)(n<(int)sizeof(p->zPeer)?n:(int)sizeof(p->zPeer)-1),
                    "%s%s(%s,acked=%lld)", i ? " " : "", zAddr ? zAddr : "?", zSt ? zSt : "?", (long long)acked);
      if( n>=(int)sizeof(p->zPeer) ) n = (int)sizeof(p->zPeer)-1;
      snprintf(zK, sizeof(zK), "peer%d_error", i);
      if( tdeKvGet(kv, zK) && tdeKvGet(kv, zK)[0] ){
        /* A destination (the archive): its last error, and since when. */
        int64_t t;
        snprintf(zK, sizeof(zK), "peer%d_error_ms", i);
        t = tdeKvInt(kv, zK);
        snprintf(zK, sizeof(zK), "peer%d_error", i);
        noteAdd(p, "%s %s; last error %.0f s ago: %s", zAddr ? zAddr : "?", zSt ? zSt : "?",
                t>0 ? (double)((int64_t)now - t)/1000.0 : 0.0, tdeKvGet(kv, zK));
      }
      if( minAck<0 || acked<minAck ) minAck = acked;
      if( bytes>maxBytes ) maxBytes = bytes;
      if( acked<captured && capturedMs>ackedCap && (double)(capturedMs-ackedCap)/1000.0>maxSec ){
        maxSec = (double)(capturedMs - ackedCap)/1000.0;
      }
    }
    p->ackedSeq = minAck<0 ? 0 : minAck;
    p->shippedSeq = minSent<0 ? 0 : minSent;
    if( p->shippedSeq<p->ackedSeq ) p->shippedSeq = p->ackedSeq;
    p->transportLagTxn = captured - p->ackedSeq;
    if( p->transportLagTxn<0 ) p->transportLagTxn = 0;
    p->transportLagBytes = maxBytes;
    p->transportLagSec = maxSec;
    p->updatedMs = tdeKvInt(kv, "updated_ms");
    if( tdeKvGet(kv, "pid") ){
      pid_t pid = (pid_t)tdeKvInt(kv, "pid");
      if( pid>0 && kill(pid, 0)!=0 && errno==ESRCH ) snprintf(p->zState, sizeof(p->zState), "stopped");
    }
    if( tdeKvGet(kv, "transport") && strcmp(tdeKvGet(kv, "transport"), "insecure-no-tls")==0 ){
      noteAdd(p, "insecure-no-tls: the link is plaintext and unauthenticated");
    }
    if( tdeKvGet(kv, "capture_wait") && tdeKvGet(kv, "capture_wait")[0] && strcmp(p->zState, "stopped")!=0 ){
      noteAdd(p, "%s", tdeKvGet(kv, "capture_wait"));
    }
    if( tdeKvGet(kv, "sync_state") && strcmp(tdeKvGet(kv, "sync_state"), "degraded")==0
     && strcmp(p->zState, "stopped")!=0 ){
      snprintf(p->zState, sizeof(p->zState), "sync degraded");
      noteAdd(p, "sync mode degraded to async: no standby acknowledged within the timeout; commits do not wait "
              "until one catches up");
    }else if( tdeKvGet(kv, "mode") && strcmp(tdeKvGet(kv, "mode"), "sync")==0 ){
      noteAdd(p, "protection mode sync");
    }
    tdeKvFree(kv);
  }
  return TDE_OK;
}

/* The caller's nSize says how many bytes of *pInfo exist (include/sqlite-tde.h):
** below the first layout's size it is refused before anything is written;
** otherwise no byte beyond it, nor beyond this library's layout, is written. */
TDE_API int tde_repl_status(const char *zDb, tde_repl_info *pInfo){
  tde_repl_info info;
  size_t nCopy;
  int rc;
  if( !zDb || !pInfo ) return tdeErr(TDE_MISUSE, "tde_repl_status: no database");
  if( pInfo->nSize<TDE_REPL_INFO_SIZE_V1 ){
    return tdeErr(TDE_MISUSE, "tde_repl_status: tde_repl_info.nSize is %u; set it to "
                  "sizeof(tde_repl_info) (at least %u)", (unsigned)pInfo->nSize,
                  (unsigned)TDE_REPL_INFO_SIZE_V1);
  }
  rc = tdeReplStatusRead(zDb, &info);
  info.nSize = pInfo->nSize;
  nCopy = pInfo->nSize<sizeof(info) ? pInfo->nSize : sizeof(info);
  memcpy(pInfo, &info, nCopy);
  return rc;
}
