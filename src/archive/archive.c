/*
** The archiver (docs/ARCHIVE.md): a destination of the shipper (repl.h
** "destinations"), so one process captures into one spool and feeds the
** standbys and the bucket from it.  Its thread uploads a signed base copy
** when the bucket holds none for the spool's history (and after a
** configured volume or interval, after a GAP, or when the spool no longer
** holds the next record), then segments of the spool's records, each
** closed after N transactions, M bytes or T seconds, and acknowledges a
** segment to the shipper only once the server acknowledged its PUT: the
** spool is trimmed only below that.  After a crash it lists its history's
** folder and resumes after the highest sequence there.
**
** An unreachable bucket never blocks a commit: the shipper keeps
** capturing, the spool grows up to its bound (then this destination is
** left behind and takes a base copy when the bucket is back), and the
** state file, the status and the audit log say so.
**
** Holds the bucket's credentials (in the S3 client) and the signing key
** (the shipper's); never a data key.  Must never: acknowledge a record the
** server has not acknowledged, upload a segment that does not continue the
** one before it, put a credential in a log line or the state file.
*/
#include "archive/object.h"
#include "archive/s3.h"
#include "cipher/cipher.h"
#include "sqlite-tde-archive.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ARCH_SEG_TXNS        1000
#define ARCH_SEG_BYTES       (16u<<20)
#define ARCH_SEG_MS          10000
#define ARCH_BASE_BYTES      (1ull<<30)
#define ARCH_BASE_MS         86400000ull
#define ARCH_MAX_SPOOL       (1ull<<30)
#define ARCH_ENV_MAX         8192

typedef struct Archive {
  tde_archive_options o;
  char zName[800];            /* "s3:BUCKET/PREFIX": its address in the status */
  char zPrefix[600];
  char zEndpoint[1024], zRegion[128], zBucket[128], zCaFile[4096];
  TdeShipDest dest;
  /* The destination's thread only. */
  TdeS3 *pS3;
  uint8_t aDbid[16], aHistory[16];
  struct evp_pkey_st *pKey;
  int bListed;                /* the bucket's folder of this history was read */
  int bNeedBase;              /* the archive continues only after a new base copy */
  int bPeriodic;              /* a base copy is due by volume or interval */
  uint64_t archived;          /* highest sequence the bucket holds (base or segment) */
  uint64_t lastBaseMs;
  uint64_t bytesSinceBase;
  int bDown;                  /* the bucket failed; said once (log, audit) */
  uint64_t nextTryMs;
  unsigned backoffMs;
} Archive;

static void archSleep(int ms){
  struct timespec ts = { ms/1000, (long)(ms%1000)*1000000L };
  while( nanosleep(&ts, &ts)!=0 && errno==EINTR ){}
}

/* ---- settings ------------------------------------------------------------- */

/* The non-secret S3_* settings from the S3ENV file (KEY=VALUE) or the
** environment.  The credentials are read by the S3 client itself. */
static void archSet(Archive *a, const char *zKey, const char *zVal){
  if( strcmp(zKey, "S3_ENDPOINT")==0 ) snprintf(a->zEndpoint, sizeof(a->zEndpoint), "%s", zVal);
  else if( strcmp(zKey, "S3_REGION")==0 ) snprintf(a->zRegion, sizeof(a->zRegion), "%s", zVal);
  else if( strcmp(zKey, "S3_BUCKET")==0 ) snprintf(a->zBucket, sizeof(a->zBucket), "%s", zVal);
  else if( strcmp(zKey, "S3_CA_FILE")==0 ) snprintf(a->zCaFile, sizeof(a->zCaFile), "%s", zVal);
  else if( strcmp(zKey, "S3_PREFIX")==0 && !a->o.zPrefix ) snprintf(a->zPrefix, sizeof(a->zPrefix), "%s", zVal);
}

static int archSettings(Archive *a){
  static const char *azKey[] = { "S3_ENDPOINT", "S3_REGION", "S3_BUCKET", "S3_CA_FILE", "S3_PREFIX" };
  if( a->o.zPrefix ) snprintf(a->zPrefix, sizeof(a->zPrefix), "%s", a->o.zPrefix);
  if( a->o.zS3Env ){
    char *z = 0, *zLine, *zSave = 0;
    struct stat st;
    size_t n = 0;
    if( stat(a->o.zS3Env, &st)!=0 ) return tdeErr(TDE_CONFIG, "%s: %s", a->o.zS3Env, strerror(errno));
    if( st.st_mode & 077 ){
      return tdeErr(TDE_CONFIG, "%s is accessible by group or others (mode %03o): chmod 600 %s", a->o.zS3Env,
                    (unsigned)(st.st_mode & 0777), a->o.zS3Env);
    }
    if( tdeReadFileAll(a->o.zS3Env, &z, &n) ) return tdeErr(TDE_CONFIG, "%s: cannot read it", a->o.zS3Env);
    for(zLine=strtok_r(z, "\n", &zSave); zLine; zLine=strtok_r(0, "\n", &zSave)){
      char *zEq = strchr(zLine, '=');
      size_t m = strlen(zLine);
      if( m && zLine[m-1]=='\r' ) zLine[m-1] = 0;
      if( zLine[0]=='#' || !zEq ) continue;
      *zEq = 0;
      archSet(a, zLine, zEq+1);
    }
    explicit_bzero(z, n);             /* it held the secret key too */
    sqlite3_free(z);
  }else{
    for(size_t i=0; i<sizeof(azKey)/sizeof(azKey[0]); i++){
      if( getenv(azKey[i]) ) archSet(a, azKey[i], getenv(azKey[i]));
    }
  }
  if( !a->zEndpoint[0] || !a->zRegion[0] || !a->zBucket[0] ){
    return tdeErr(TDE_CONFIG, "the archive needs S3_ENDPOINT, S3_REGION and S3_BUCKET (%s)",
                  a->o.zS3Env ? a->o.zS3Env : "environment");
  }
  if( tdeArchPrefixCheck(a->zPrefix) ) return TDE_CONFIG;
  snprintf(a->zName, sizeof(a->zName), "s3:%s/%s", a->zBucket, a->zPrefix);
  return TDE_OK;
}

static int archOpenS3(Archive *a){
  TdeS3Config c;
  if( a->pS3 ) return TDE_OK;
  memset(&c, 0, sizeof(c));
  c.zEndpoint = a->zEndpoint;
  c.zRegion = a->zRegion;
  c.zBucket = a->zBucket;
  c.zCaFile = a->zCaFile[0] ? a->zCaFile : 0;
  c.zCredFile = a->o.zS3Env;
  return tdeS3Open(&c, &a->pS3);
}

/* ---- the bucket's state ------------------------------------------------- */

typedef struct ArchList {
  Archive *a;
  uint64_t maxSeg, maxBase;
  int bBase;
} ArchList;

static int archListEach(void *pArg, const TdeS3Object *pObj){
  ArchList *l = pArg;
  TdeArchName nm;
  if( tdeArchNameParse(l->a->zPrefix, pObj->zKey, &nm)!=TDE_OK ) return 0;
  if( memcmp(nm.aDbid, l->a->aDbid, 16)!=0 || memcmp(nm.aHistory, l->a->aHistory, 16)!=0 ) return 0;
  if( nm.eKind==TDE_ARCH_KIND_SEG && nm.last>l->maxSeg ) l->maxSeg = nm.last;
  if( nm.eKind==TDE_ARCH_KIND_BASE ){
    l->bBase = 1;
    if( nm.first>l->maxBase ) l->maxBase = nm.first;
  }
  return 0;
}

/* After a start (or a crash): what the bucket holds of this history.  The
** records up to there are acknowledged; without a base copy one is due. */
static int archList(Archive *a, TdeShipLink *pLink, uint64_t durable){
  char zDir[TDE_ARCH_NAME_MAX];
  ArchList l = { a, 0, 0, 0 };
  int rc = tdeArchHistDir(a->zPrefix, a->aDbid, a->aHistory, zDir, sizeof(zDir));
  if( rc==TDE_OK ) rc = tdeS3List(a->pS3, zDir, archListEach, &l);
  if( rc ) return rc;
  a->bListed = 1;
  a->archived = l.maxSeg>l.maxBase ? l.maxSeg : l.maxBase;
  a->bNeedBase = !l.bBase;
  a->lastBaseMs = tdeNowMs();
  if( a->archived>durable ){
    tdeLog(TDE_LOG_WARNING, "archive %s: the bucket holds sequence %llu, the spool only %llu: a new base copy",
           a->zName, (unsigned long long)a->archived, (unsigned long long)durable);
    a->bNeedBase = 1;
    a->archived = 0;
  }
  tdeLog(TDE_LOG_INFO, "archive %s: the bucket holds this history up to sequence %llu%s", a->zName,
         (unsigned long long)a->archived, a->bNeedBase ? "; a base copy is due" : "");
  if( a->archived>0 && !a->bNeedBase ) tdeShipLinkAck(pLink, a->archived);
  return TDE_OK;
}

/* A failure of the bucket: keep spooling, say so once, try again later. */
static void archDown(Archive *a, TdeShipLink *pLink, const char *zWhat){
  char zErr[256];
  snprintf(zErr, sizeof(zErr), "%s: %s", zWhat, tde_last_error());
  tdeShipLinkState(pLink, "unreachable", zErr);
  if( !a->bDown ){
    tdeLog(TDE_LOG_WARNING, "archive %s: %s; spooling until the bucket is back", a->zName, zErr);
    tdeShipLinkAudit(pLink, "archive_unreachable", zErr);
    a->bDown = 1;
  }
  a->backoffMs = a->backoffMs ? (a->backoffMs*2 > 10000 ? 10000 : a->backoffMs*2) : 500;
  a->nextTryMs = tdeNowMs() + a->backoffMs;
}

static void archUp(Archive *a, TdeShipLink *pLink){
  if( a->bDown ){
    tdeLog(TDE_LOG_INFO, "archive %s: the bucket is back; uploading from sequence %llu", a->zName,
           (unsigned long long)a->archived+1);
    tdeShipLinkAudit(pLink, "archive_restored", a->zName);
    a->bDown = 0;
  }
  a->backoffMs = 0;
  tdeShipLinkState(pLink, "streaming", 0);
}

/* ---- uploads -------------------------------------------------------------- */

/* A signed base copy: the shipper's copy of the database (consistent with
** a spool sequence S), as base/S.base.  bPeriodic: the segments go on
** from where they are (they still cover every sequence, for a restore to
** any point); else the archive continues after S (none before, a GAP, or
** records the spool lost). */
static int archBase(Archive *a, TdeShipLink *pLink, int bPeriodic){
  char zTmp[4200], zKey[TDE_ARCH_NAME_MAX];
  TdeArchBase b;
  uint8_t *aObj = 0;
  struct stat st;
  int fd = -1, rc;
  memset(&b, 0, sizeof(b));
  snprintf(zTmp, sizeof(zTmp), "%s-tdeship-archive-base", tdeShipLinkDb(pLink));
  tdeShipLinkState(pLink, "base copy", 0);
  rc = tdeShipLinkBase(pLink, zTmp, &b.seq, &b.tCapture, b.aChain);
  if( rc ) goto done;
  fd = open(zTmp, O_RDONLY | O_CLOEXEC);
  if( fd<0 || fstat(fd, &st)!=0 ){ rc = tdeErr(TDE_IO, "%s: %s", zTmp, strerror(errno)); goto done; }
  b.size = (uint64_t)st.st_size;
  aObj = malloc(TDE_ARCH_BASE_HDR + b.size);
  if( !aObj ){ rc = tdeErr(TDE_NOMEM, "base copy of %llu bytes: out of memory", (unsigned long long)b.size); goto done; }
  for(uint64_t off=0; off<b.size; ){
    ssize_t k = pread(fd, aObj + TDE_ARCH_BASE_HDR + off, b.size - off, (off_t)off);
    if( k<0 && errno==EINTR ) continue;
    if( k<=0 ){ rc = tdeErr(TDE_IO, "%s: short read", zTmp); goto done; }
    off += (uint64_t)k;
  }
  memcpy(b.aDbid, a->aDbid, 16);
  memcpy(b.aHistory, a->aHistory, 16);
  rc = tdeSha256(aObj + TDE_ARCH_BASE_HDR, b.size, b.aSum);
  if( rc==TDE_OK ) rc = tdeArchBaseSign(a->pKey, &b);
  if( rc==TDE_OK ) rc = tdeArchBaseName(a->zPrefix, a->aDbid, a->aHistory, b.seq, zKey, sizeof(zKey));
  if( rc ) goto done;
  tdeArchBaseEncode(&b, aObj);
  rc = tdeS3Put(a->pS3, zKey, aObj, TDE_ARCH_BASE_HDR + b.size);
  if( rc ){ archDown(a, pLink, "uploading a base copy"); rc = TDE_OK; goto done; }
  tdeLog(TDE_LOG_INFO, "archive %s: base copy at sequence %llu (%llu bytes) uploaded", a->zName,
         (unsigned long long)b.seq, (unsigned long long)b.size);
  if( !bPeriodic ){
    a->archived = b.seq;
    tdeShipLinkAck(pLink, b.seq);
  }
  a->bNeedBase = 0;
  a->bPeriodic = 0;
  a->lastBaseMs = tdeNowMs();
  a->bytesSinceBase = 0;
  archUp(a, pLink);
done:
  if( fd>=0 ) close(fd);
  free(aObj);
  unlink(zTmp);
  return rc;
}

/* Records archived+1.. into a segment: at most segTxns records and about
** segBytes bytes, TXN records only (a GAP ends it and makes a base copy
** due).  Kept across steps: only records new since the last step are read. */
typedef struct ArchSeg {
  uint8_t *aBuf;
  size_t nBuf, nAlloc;
  uint64_t first, last;       /* records collected so far (nRec of them) */
  uint32_t nRec;
  uint8_t aChainBefore[32], aChain[32];
  uint64_t tOldest;           /* capture time of its first record */
} ArchSeg;

static int archSegAdd(ArchSeg *g, const uint8_t *aRec, size_t nRec){
  if( g->nBuf + nRec + TDE_HEAD_BYTES > g->nAlloc ){
    size_t nNew = (g->nBuf + nRec + TDE_HEAD_BYTES)*2;
    uint8_t *aNew = realloc(g->aBuf, nNew);
    if( !aNew ) return tdeErr(TDE_NOMEM, "segment: out of memory");
    g->aBuf = aNew;
    g->nAlloc = nNew;
  }
  memcpy(g->aBuf + g->nBuf, aRec, nRec);
  g->nBuf += nRec;
  return TDE_OK;
}

static int archCollect(Archive *a, TdeShipLink *pLink, uint64_t durable, ArchSeg *g){
  if( g->nRec==0 || g->first!=a->archived+1 ){
    g->nBuf = TDE_ARCH_SEG_HDR;
    g->nRec = 0;
    g->first = a->archived + 1;
  }
  for(uint64_t seq=g->first+g->nRec; seq<=durable && g->nRec<a->o.segTxns && g->nBuf<a->o.segBytes; seq++){
    TdeRec r;
    uint8_t *aRec = 0, aBefore[32], aAfter[32];
    size_t nRec = 0;
    int rc = tdeShipLinkRecord(pLink, seq, &r, &aRec, &nRec, aBefore, aAfter);
    if( rc==TDE_OK && r.kind==TDE_REC_GAP ){ sqlite3_free(aRec); rc = TDE_NOTFOUND; }
    if( rc==TDE_NOTFOUND || rc==TDE_FORMAT ){
      /* Trimmed past us, a GAP, or damage: only a base copy continues. */
      tdeErrClear();
      if( g->nRec==0 ) a->bNeedBase = 1;
      break;
    }
    if( rc ) return rc;
    if( g->nRec==0 ){ memcpy(g->aChainBefore, aBefore, 32); g->tOldest = r.tCapture; }
    rc = archSegAdd(g, aRec, nRec);
    sqlite3_free(aRec);
    if( rc ) return rc;
    memcpy(g->aChain, aAfter, 32);
    g->last = seq;
    g->nRec++;
  }
  return TDE_OK;
}

/* Close and upload the collected segment; acknowledge it once stored. */
static int archSegPut(Archive *a, TdeShipLink *pLink, ArchSeg *g){
  TdeArchSeg h;
  char zKey[TDE_ARCH_NAME_MAX];
  int rc;
  memset(&h, 0, sizeof(h));
  memcpy(h.aDbid, a->aDbid, 16);
  memcpy(h.aHistory, a->aHistory, 16);
  h.first = a->archived + 1;
  h.last = g->last;
  memcpy(h.aChainBefore, g->aChainBefore, 32);
  h.nRecBytes = g->nBuf - TDE_ARCH_SEG_HDR;
  h.tClosed = tdeNowMs();
  tdeArchSegEncode(&h, g->aBuf);
  rc = tdeHeadMake(a->pKey, a->aDbid, a->aHistory, h.last, g->aChain, g->aBuf + g->nBuf);
  if( rc==TDE_OK ) rc = tdeArchSegName(a->zPrefix, a->aDbid, a->aHistory, h.first, h.last, zKey, sizeof(zKey));
  if( rc ) return rc;
  rc = tdeS3Put(a->pS3, zKey, g->aBuf, g->nBuf + TDE_HEAD_BYTES);
  if( rc ){ archDown(a, pLink, "uploading a segment"); return TDE_OK; }
  a->archived = h.last;
  a->bytesSinceBase += h.nRecBytes;
  g->nRec = 0;
  archUp(a, pLink);
  tdeShipLinkAck(pLink, h.last);
  return TDE_OK;
}

/* Is a segment due: full, or its oldest transaction old enough, or the
** shipper stopping (what is spooled is uploaded before the exit)? */
static int archSegDue(Archive *a, const ArchSeg *g, int bStop){
  if( g->nRec==0 ) return 0;
  return bStop || g->nRec>=a->o.segTxns || g->nBuf>=a->o.segBytes
      || tdeNowMs() >= g->tOldest + a->o.segMs;
}

/* One step: list (once), a base copy if due, a segment if due. */
static int archStep(Archive *a, TdeShipLink *pLink, ArchSeg *g, int bStop){
  uint64_t first = 0, durable = 0, capMs = 0;
  int rc = tdeShipLinkScan(pLink, &first, &durable, &capMs);
  if( rc ) return rc;
  if( a->bDown && a->bListed ){
    /* A cheap look before anything costly (a base copy takes SQLite's
    ** write lock for its copy): is the bucket back? */
    char zKey[TDE_ARCH_NAME_MAX];
    TdeS3Object obj;
    rc = tdeArchBaseName(a->zPrefix, a->aDbid, a->aHistory, 0, zKey, sizeof(zKey));
    if( rc==TDE_OK ) rc = tdeS3Head(a->pS3, zKey, &obj);
    if( rc==TDE_NOTFOUND ){ tdeErrClear(); rc = TDE_OK; }
    if( rc ){ archDown(a, pLink, "probing the bucket"); return TDE_OK; }
  }
  if( !a->bListed ){
    rc = archList(a, pLink, durable);
    if( rc ){ archDown(a, pLink, "listing the bucket"); return TDE_OK; }
    archUp(a, pLink);
  }
  if( !a->bNeedBase && a->lastBaseMs
   && (a->bytesSinceBase>=a->o.baseEveryBytes || tdeNowMs()-a->lastBaseMs>=a->o.baseEveryMs) ){
    a->bPeriodic = 1;
  }
  if( (a->bNeedBase || a->bPeriodic) && !bStop ){
    rc = archBase(a, pLink, !a->bNeedBase);
    if( rc || a->bNeedBase ) return rc;
  }
  if( a->bNeedBase ) return TDE_OK;
  rc = archCollect(a, pLink, durable, g);
  if( rc || !archSegDue(a, g, bStop) ) return rc;
  return archSegPut(a, pLink, g);
}

/* The destination's thread (TdeShipDest.xRun). */
static int archRun(TdeShipLink *pLink, void *pArg){
  Archive *a = pArg;
  ArchSeg g;
  int rc = TDE_OK;
  memset(&g, 0, sizeof(g));
  tdeShipLinkIds(pLink, a->aDbid, a->aHistory, &a->pKey);
  if( !a->pKey ){
    tdeShipLinkState(pLink, "refused", "no signing key: the archive uploads signed objects only");
    while( !tdeShipLinkStopped(pLink) ) archSleep(100);
    return tdeErr(TDE_CONFIG, "the archive needs a signing key (--sign-key or repl_sign_key)");
  }
  rc = archOpenS3(a);
  if( rc ){
    tdeShipLinkState(pLink, "refused", tde_last_error());
    return rc;
  }
  while( rc==TDE_OK ){
    int bStop = tdeShipLinkStopped(pLink);
    if( tdeNowMs()>=a->nextTryMs ) rc = archStep(a, pLink, &g, bStop && !a->bDown);
    if( bStop ) break;
    archSleep(50);
  }
  free(g.aBuf);
  return rc;
}

int tde_archive_run(const char *zDb, const char *zConfig, const tde_archive_options *pOpt, volatile int *pbStop){
  Archive *a;
  const TdeShipDest *apDest[1];
  int rc;
  if( !zDb || !pOpt || pOpt->nSize<sizeof(tde_archive_options) ){
    return tdeErr(TDE_MISUSE, "tde_archive_run: a database and options (nSize set)");
  }
  a = calloc(1, sizeof(*a));
  if( !a ) return TDE_NOMEM;
  a->o = *pOpt;
  if( !a->o.segTxns ) a->o.segTxns = ARCH_SEG_TXNS;
  if( !a->o.segBytes ) a->o.segBytes = ARCH_SEG_BYTES;
  if( !a->o.segMs ) a->o.segMs = ARCH_SEG_MS;
  if( !a->o.baseEveryBytes ) a->o.baseEveryBytes = ARCH_BASE_BYTES;
  if( !a->o.baseEveryMs ) a->o.baseEveryMs = ARCH_BASE_MS;
  if( !a->o.maxSpool ) a->o.maxSpool = ARCH_MAX_SPOOL;
  rc = archSettings(a);
  if( rc==TDE_OK && !a->o.zSignKey && !a->o.zReplConfig ){
    rc = tdeErr(TDE_CONFIG, "the archive uploads signed objects only: give --sign-key (or repl_sign_key in "
                "--repl-config)");
  }
  if( rc==TDE_OK ){
    a->dest.iVersion = 1;
    a->dest.zName = a->zName;
    a->dest.nMaxSpool = a->o.maxSpool;
    a->dest.pArg = a;
    a->dest.xRun = archRun;
    apDest[0] = &a->dest;
    tdeLog(TDE_LOG_INFO, "archive %s: segments of %u transactions, %llu bytes or %u ms; a base copy every "
           "%llu bytes or %llu ms", a->zName, a->o.segTxns, (unsigned long long)a->o.segBytes, a->o.segMs,
           (unsigned long long)a->o.baseEveryBytes, (unsigned long long)a->o.baseEveryMs);
    rc = tdeShipRun(zDb, zConfig, a->o.zReplConfig, a->o.zSignKey, a->o.replFlags, a->o.azTo, a->o.nTo,
                    apDest, 1, a->o.nCycleMs, pbStop);
  }
  tdeS3Close(a->pS3);
  free(a);
  return rc;
}
