/*
** Audit trail (interface and line format: audit.h).  Formats one JSON line
** per key operation and appends it to the file the configuration names
** (`audit_log`), and to syslog (LOG_AUTHPRIV|LOG_NOTICE) when
** `audit_syslog = yes`.
**
** The log is opened for every line (O_WRONLY|O_APPEND|O_CREAT|O_CLOEXEC,
** mode 0600 when created) and closed again: key operations are rare, and
** a log rotated or removed by logrotate is then simply recreated, with no
** cached descriptor to go stale, leak into children or survive a fork.
** Each line leaves in one write(2), so O_APPEND keeps lines from several
** processes whole.
**
** It must never fail or change the outcome of the operation it records: a
** log that cannot be written is a warning (once per path until it works
** again), and the caller's errno and tde_last_error() survive the call.
** It must never be handed secrets: records carry ids, never key bytes.
**
** Layering: src/audit/ sits below src/keystore/ (the providers record
** their operations here) and src/keys/, and above only config.c and the
** util code; it never calls a keystore, the header code or the VFS.
*/
#include "tde_int.h"
#include "config.h"
#include "audit/audit.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#define AUDIT_LINE_STACK 2048   /* most lines fit; longer ones use malloc */
#define AUDIT_WARNED_MAX 32     /* paths remembered as failing */

void tdeAuditInit(TdeAuditRec *r, const char *zOp){
  memset(r, 0, sizeof(*r));
  r->zOp = zOp;
  r->nPages = -1;
}

/* ---- formatting ----------------------------------------------------------- */

/* Output cursor: counts every byte it is asked for, stores those that fit,
** so one pass tells both the result and the size it needs. */
typedef struct AuditOut {
  char *z;
  size_t n;        /* capacity of z */
  size_t i;        /* bytes produced so far (may exceed n) */
} AuditOut;

static void auditPutc(AuditOut *p, char c){
  if( p->i<p->n ) p->z[p->i] = c;
  p->i++;
}

static void auditPuts(AuditOut *p, const char *z){
  for(; *z; z++) auditPutc(p, *z);
}

static void auditPutInt(AuditOut *p, int64_t v){
  char zBuf[24];
  snprintf(zBuf, sizeof(zBuf), "%lld", (long long)v);
  auditPuts(p, zBuf);
}

/* Length of the well-formed UTF-8 sequence at z (1 to 4), or 0 if the
** bytes there are not one (stray continuation byte, overlong form,
** surrogate, above U+10FFFF, truncated). */
static int auditUtf8Len(const unsigned char *z){
  unsigned char c = z[0];
  if( c>=0xC2 && c<=0xDF ){
    return (z[1]&0xC0)==0x80 ? 2 : 0;
  }
  if( c>=0xE0 && c<=0xEF ){
    unsigned char lo = c==0xE0 ? 0xA0 : 0x80;
    unsigned char hi = c==0xED ? 0x9F : 0xBF;
    return z[1]>=lo && z[1]<=hi && (z[2]&0xC0)==0x80 ? 3 : 0;
  }
  if( c>=0xF0 && c<=0xF4 ){
    unsigned char lo = c==0xF0 ? 0x90 : 0x80;
    unsigned char hi = c==0xF4 ? 0x8F : 0xBF;
    return z[1]>=lo && z[1]<=hi && (z[2]&0xC0)==0x80 && (z[3]&0xC0)==0x80 ? 4 : 0;
  }
  return 0;
}

/*
** A JSON string.  '"' and '\' are backslash-escaped; control characters
** (below 0x20, and DEL) become \u00xx so a line can never be split or
** carry terminal escapes; well-formed UTF-8 passes through unchanged.
** Bytes that are not UTF-8 (a file name may hold any bytes) become
** \ufffd, so every line stays valid JSON.  (The NUL that ends z stops a
** multi-byte check early, so reading past it cannot happen.)
*/
static void auditPutStr(AuditOut *p, const char *zIn){
  static const char hex[] = "0123456789abcdef";
  const unsigned char *z = (const unsigned char *)zIn;
  auditPutc(p, '"');
  while( *z ){
    unsigned char c = *z;
    if( c=='"' || c=='\\' ){
      auditPutc(p, '\\');
      auditPutc(p, (char)c);
      z++;
    }else if( c<0x20 || c==0x7F ){
      auditPuts(p, "\\u00");
      auditPutc(p, hex[c>>4]);
      auditPutc(p, hex[c&15]);
      z++;
    }else if( c<0x80 ){
      auditPutc(p, (char)c);
      z++;
    }else{
      int k = auditUtf8Len(z), j;
      if( k==0 ){
        auditPuts(p, "\\ufffd");
        z++;
      }else{
        for(j=0; j<k; j++) auditPutc(p, (char)z[j]);
        z += k;
      }
    }
  }
  auditPutc(p, '"');
}

static void auditKey(AuditOut *p, const char *zKey){
  auditPutc(p, ',');
  auditPutc(p, '"');
  auditPuts(p, zKey);
  auditPuts(p, "\":");
}

/* "YYYY-MM-DDTHH:MM:SS.mmmZ" for tsMillis milliseconds since the epoch. */
static void auditPutTime(AuditOut *p, int64_t tsMillis){
  char zBuf[48];
  int64_t sec = tsMillis / 1000;
  int64_t ms = tsMillis % 1000;
  time_t t;
  struct tm tm;
  if( ms<0 ){ ms += 1000; sec -= 1; }        /* floor, for times before 1970 */
  t = (time_t)sec;
  if( gmtime_r(&t, &tm)==0 ) memset(&tm, 0, sizeof(tm));
  snprintf(zBuf, sizeof(zBuf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
           tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
           tm.tm_hour, tm.tm_min, tm.tm_sec, (int)ms);
  auditPuts(p, zBuf);
}

/* Produce the line into p; returns 0, or -1 if r is unusable. */
static int auditBuild(const TdeAuditRec *r, int64_t tsMillis, int pid, AuditOut *p){
  static const char hex[] = "0123456789abcdef";
  int i;
  if( r==0 || r->zOp==0 || r->zOp[0]==0 ) return -1;
  auditPuts(p, "{\"ts\":\"");
  auditPutTime(p, tsMillis);
  auditPutc(p, '"');
  auditKey(p, "op");          auditPutStr(p, r->zOp);
  auditKey(p, "outcome");     auditPuts(p, r->bFailure ? "\"failure\"" : "\"success\"");
  auditKey(p, "pid");         auditPutInt(p, pid);
  if( r->zDbPath ){ auditKey(p, "db_path"); auditPutStr(p, r->zDbPath); }
  if( r->aDbid ){
    auditKey(p, "db_id");
    auditPutc(p, '"');
    for(i=0; i<16; i++){
      auditPutc(p, hex[r->aDbid[i]>>4]);
      auditPutc(p, hex[r->aDbid[i]&15]);
    }
    auditPutc(p, '"');
  }
  if( r->zKeystore ){ auditKey(p, "keystore"); auditPutStr(p, r->zKeystore); }
  if( r->zKeyId ){ auditKey(p, "key_id"); auditPutStr(p, r->zKeyId); }
  if( r->zNewKeyId ){ auditKey(p, "new_key_id"); auditPutStr(p, r->zNewKeyId); }
  if( r->keyVersion!=0 ){ auditKey(p, "key_version"); auditPutInt(p, r->keyVersion); }
  if( r->newKeyVersion!=0 ){ auditKey(p, "new_key_version"); auditPutInt(p, r->newKeyVersion); }
  if( r->nPages>=0 ){ auditKey(p, "pages"); auditPutInt(p, r->nPages); }
  if( r->zDetail ){ auditKey(p, "detail"); auditPutStr(p, r->zDetail); }
  auditPuts(p, "}\n");
  return 0;
}

int tdeAuditFormat(const TdeAuditRec *r, int64_t tsMillis, int pid, char *z, size_t n){
  AuditOut out;
  out.z = z;
  out.n = z ? n : 0;
  out.i = 0;
  if( auditBuild(r, tsMillis, pid, &out)!=0 ) return -1;
  if( out.i>=out.n || out.i>INT_MAX ) return -1;   /* room for the NUL too */
  z[out.i] = 0;
  return (int)out.i;
}

/* ---- writing -------------------------------------------------------------- */

/* Paths whose last write failed (FNV-1a hashes), so a broken log warns
** once, not on every key operation; a later success forgets the path. */
static pthread_mutex_t auditMutex = PTHREAD_MUTEX_INITIALIZER;
static uint64_t aWarned[AUDIT_WARNED_MAX];
static int nWarned;

static uint64_t auditHash(const char *z){
  uint64_t h = 0xcbf29ce484222325ULL;
  for(; *z; z++){ h ^= (unsigned char)*z; h *= 0x100000001b3ULL; }
  return h;
}

/* Record the outcome for zPath; returns 1 if a failure should be logged. */
static int auditNoteOutcome(const char *zPath, int bFailed){
  uint64_t h = auditHash(zPath);
  int i, bWarn = 0;
  pthread_mutex_lock(&auditMutex);
  for(i=0; i<nWarned && aWarned[i]!=h; i++){}
  if( bFailed ){
    if( i==nWarned ){
      bWarn = 1;
      if( nWarned<AUDIT_WARNED_MAX ) aWarned[nWarned++] = h;
    }
  }else if( i<nWarned ){
    aWarned[i] = aWarned[--nWarned];
  }
  pthread_mutex_unlock(&auditMutex);
  return bWarn;
}

/* Append z[0..n) with one write(2).  Returns NULL, or why it failed.  A
** short write (disk full, file size limit) is finished with further writes
** so that at least the line is terminated, and still reported. */
static const char *auditAppend(const char *zPath, const char *z, size_t n,
                               char *zWhy, size_t nWhy){
  size_t nDone = 0;
  int bTorn = 0;
  int fd;
  do{
    /* O_NOFOLLOW: a symbolic link put in the log's place must not have
    ** audit lines appended to the file it names. */
    fd = open(zPath, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW, 0600);
  }while( fd<0 && errno==EINTR );
  if( fd<0 ){
    snprintf(zWhy, nWhy, "cannot open: %s", strerror(errno));
    return zWhy;
  }
  while( nDone<n ){
    ssize_t k = write(fd, z+nDone, n-nDone);
    if( k<0 && errno==EINTR ) continue;
    if( k<=0 ){
      snprintf(zWhy, nWhy, "write failed: %s", k<0 ? strerror(errno) : "no progress");
      close(fd);
      return zWhy;
    }
    if( (size_t)k<n-nDone ) bTorn = 1;
    nDone += (size_t)k;
  }
  if( close(fd)!=0 && errno!=EINTR ){
    snprintf(zWhy, nWhy, "close failed: %s", strerror(errno));
    return zWhy;
  }
  if( bTorn ){
    snprintf(zWhy, nWhy, "short write (line split in pieces; disk full?)");
    return zWhy;
  }
  return 0;
}

void tdeAudit(const TdeConfig *pCfg, const TdeAuditRec *r){
  char zSavedErr[512];
  char zLog[PATH_MAX];
  char zStack[AUDIT_LINE_STACK];
  char *zLine = zStack;
  char *zHeap = 0;
  const char *zLogKey, *zSyslog;
  int bSyslog, bFile = 0;
  int savedErrno = errno;
  int nLine;
  struct timespec ts;
  AuditOut out;

  if( pCfg==0 || r==0 ) return;
  zLogKey = tdeConfigGet(pCfg, "audit_log");
  zSyslog = tdeConfigGet(pCfg, "audit_syslog");
  bSyslog = zSyslog && strcmp(zSyslog, "yes")==0;
  if( zLogKey==0 && !bSyslog ) return;

  /* Nothing below may disturb what the caller reports. */
  snprintf(zSavedErr, sizeof(zSavedErr), "%s", tde_last_error());

  if( zLogKey ){
    if( tdeConfigPath(pCfg, "audit_log", zLog, sizeof(zLog))==TDE_OK ){
      bFile = 1;
    }else if( auditNoteOutcome(zLogKey, 1) ){
      tdeLog(TDE_LOG_WARNING, "audit log %s (from %s): path too long; key operations "
             "are not being audited to it", zLogKey, pCfg->zPath);
    }
  }

  if( clock_gettime(CLOCK_REALTIME, &ts)!=0 ){ ts.tv_sec = time(0); ts.tv_nsec = 0; }
  out.z = zStack;
  out.n = sizeof(zStack);
  out.i = 0;
  if( auditBuild(r, (int64_t)ts.tv_sec*1000 + ts.tv_nsec/1000000, (int)getpid(), &out)!=0 ){
    tdeLog(TDE_LOG_WARNING, "audit: record without an operation name dropped");
    goto audit_out;
  }
  if( out.i>=out.n ){
    zHeap = malloc(out.i + 1);
    if( zHeap==0 ){
      tdeLog(TDE_LOG_WARNING, "audit: out of memory; %s record dropped", r->zOp);
      goto audit_out;
    }
    zLine = zHeap;
    out.z = zHeap;
    out.n = out.i + 1;
    out.i = 0;
    auditBuild(r, (int64_t)ts.tv_sec*1000 + ts.tv_nsec/1000000, (int)getpid(), &out);
  }
  nLine = (int)out.i;
  zLine[nLine] = 0;

  if( bFile ){
    char zWhy[160];
    const char *zErr = auditAppend(zLog, zLine, (size_t)nLine, zWhy, sizeof(zWhy));
    if( auditNoteOutcome(zLog, zErr!=0) ){
      tdeLog(TDE_LOG_WARNING, "audit log %s: %s; key operations are not being "
             "audited to it (warned once until it works again)", zLog, zErr);
    }
  }
  if( bSyslog ){
    /* Without the newline; the application's openlog() (if any) sets the
    ** identity, so the line says where it comes from. */
    syslog(LOG_AUTHPRIV | LOG_NOTICE, "sqlite-tde audit: %.*s", nLine-1, zLine);
  }

audit_out:
  free(zHeap);
  if( zSavedErr[0] ) tdeErr(0, "%s", zSavedErr);
  else tdeErrClear();
  errno = savedErrno;
}

void tdeAuditKeystoreOp(const TdeConfig *pCfg, const char *zKeystore, const char *zOp,
                        const char *zKeyId, int rc, const char *zDetail){
  TdeAuditRec r;
  if( pCfg==0 ) return;
  tdeAuditInit(&r, zOp);
  r.zKeystore = zKeystore;
  r.zKeyId = zKeyId && zKeyId[0] ? zKeyId : 0;
  if( rc!=TDE_OK ){
    r.bFailure = 1;
    r.zDetail = tde_last_error()[0] ? tde_last_error() : tde_errstr(rc);
  }else{
    r.zDetail = zDetail;
  }
  tdeAudit(pCfg, &r);
}
