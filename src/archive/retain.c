/*
** Retention of the keyless archive (docs/ARCHIVE.md "Retention"): the
** catalogue of a database's objects from one listing, the plan (what the
** count and age rules let go), and the deletions, segments before the base
** copy that reaches them.  See retain.h for the contract.
**
** The rules, per database:
**   - the current history keeps its base copies from the oldest one either
**     rule keeps (count: the newest K; age: the newest captured at or
**     before now-D and every later one; the newest always), and every
**     segment whose last sequence is not below that base's sequence;
**   - another history goes whole when the current one alone satisfies
**     every rule given (it holds K base copies; it has a base copy at or
**     before now-D and the other's newest point is older than that), else
**     it stays whole.
** Times come from headers: a base copy's capture time (the object is
** downloaded to a temporary file to read it, unless the archiver said it
** when it uploaded the copy) and a segment's closing time.
*/
#include "archive/retain.h"
#include "archive/object.h"
#include "audit/audit.h"
#include "repl/repl.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RT_SEG_MAX   ((size_t)1 << 30)   /* the largest segment read into memory */
#define RT_CACHE     64                  /* base copies whose capture time is remembered */

/* ---- capture times the archiver told us -------------------------------- */

static pthread_mutex_t rtMu = PTHREAD_MUTEX_INITIALIZER;
static struct { char *zKey; uint64_t t; } rtCache[RT_CACHE];
static int rtCacheNext;

static void rtCachePut(const char *zKey, uint64_t t){
  pthread_mutex_lock(&rtMu);
  free(rtCache[rtCacheNext].zKey);
  rtCache[rtCacheNext].zKey = strdup(zKey);
  rtCache[rtCacheNext].t = t;
  rtCacheNext = (rtCacheNext + 1) % RT_CACHE;
  pthread_mutex_unlock(&rtMu);
}

static int rtCacheGet(const char *zKey, uint64_t *pt){
  int bHit = 0;
  pthread_mutex_lock(&rtMu);
  for(int i=0; i<RT_CACHE && !bHit; i++){
    if( rtCache[i].zKey && strcmp(rtCache[i].zKey, zKey)==0 ){ *pt = rtCache[i].t; bHit = 1; }
  }
  pthread_mutex_unlock(&rtMu);
  return bHit;
}

/* ---- the catalogue ------------------------------------------------------ */

typedef struct RtObj {
  uint64_t first, last;           /* a base at S: S, S */
  char *zKey;
} RtObj;

typedef struct RtHist {
  uint8_t aHist[16];
  RtObj *aBase, *aSeg;
  int nBase, nSeg;
  uint64_t tLast;                 /* its newest point (0: not known yet) */
} RtHist;

typedef struct Rt {
  TdeS3 *pS3;
  const char *zPrefix;
  const uint8_t *aDbid;
  RtHist *aHist;
  int nHist;
} Rt;

static int rtAdd(RtObj **pa, int *pn, const TdeArchName *nm, const char *zKey){
  RtObj *a = realloc(*pa, sizeof(RtObj)*(size_t)(*pn+1));
  if( !a ) return TDE_NOMEM;
  *pa = a;
  a[*pn].first = nm->first;
  a[*pn].last = nm->last;
  a[*pn].zKey = strdup(zKey);
  if( !a[*pn].zKey ) return TDE_NOMEM;
  (*pn)++;
  return TDE_OK;
}

static int rtOnObject(void *pArg, const TdeS3Object *pObj){
  Rt *p = pArg;
  TdeArchName nm;
  RtHist *h = 0;
  if( tdeArchNameParse(p->zPrefix, pObj->zKey, &nm)!=TDE_OK || memcmp(nm.aDbid, p->aDbid, 16)!=0 ) return 0;
  for(int i=0; i<p->nHist && !h; i++) if( memcmp(p->aHist[i].aHist, nm.aHistory, 16)==0 ) h = &p->aHist[i];
  if( !h ){
    RtHist *a = realloc(p->aHist, sizeof(RtHist)*(size_t)(p->nHist+1));
    if( !a ) return TDE_NOMEM;
    p->aHist = a;
    h = &a[p->nHist++];
    memset(h, 0, sizeof(*h));
    memcpy(h->aHist, nm.aHistory, 16);
  }
  return nm.eKind==TDE_ARCH_KIND_BASE ? rtAdd(&h->aBase, &h->nBase, &nm, pObj->zKey)
                                      : rtAdd(&h->aSeg, &h->nSeg, &nm, pObj->zKey);
}

static int rtCmp(const void *a, const void *b){
  const RtObj *x = a, *y = b;
  if( x->first!=y->first ) return x->first<y->first ? -1 : 1;
  return x->last<y->last ? -1 : x->last>y->last;
}

static void rtFree(Rt *p){
  for(int i=0; i<p->nHist; i++){
    for(int j=0; j<p->aHist[i].nBase; j++) free(p->aHist[i].aBase[j].zKey);
    for(int j=0; j<p->aHist[i].nSeg; j++) free(p->aHist[i].aSeg[j].zKey);
    free(p->aHist[i].aBase);
    free(p->aHist[i].aSeg);
  }
  free(p->aHist);
}

/* ---- times from headers -------------------------------------------------- */

/* The capture time of base copy o: remembered, or from its header (the
** object downloaded to a new file in $TMPDIR or /tmp, then removed). */
static int rtBaseTime(Rt *p, const RtObj *o, uint64_t *pt){
  char zTmp[4200];
  uint8_t aHdr[TDE_ARCH_BASE_HDR];
  const char *zDir = getenv("TMPDIR");
  TdeArchBase b;
  uint64_t n = 0;
  int fd, rc;
  if( rtCacheGet(o->zKey, pt) ) return TDE_OK;
  if( snprintf(zTmp, sizeof(zTmp), "%s/sqlite-tde-retain-XXXXXX", zDir && zDir[0] ? zDir : "/tmp")
      >=(int)sizeof(zTmp) ){
    return tdeErr(TDE_RANGE, "retention: TMPDIR too long");
  }
  fd = mkostemp(zTmp, O_CLOEXEC);
  if( fd<0 ) return tdeErr(TDE_IO, "retention: %s: %s", zTmp, strerror(errno));
  unlink(zTmp);
  rc = tdeS3GetFd(p->pS3, o->zKey, fd, &n);
  if( rc==TDE_OK && (n<TDE_ARCH_BASE_HDR || pread(fd, aHdr, sizeof(aHdr), 0)!=(ssize_t)sizeof(aHdr)
                     || tdeArchBaseDecode(aHdr, sizeof(aHdr), &b)!=TDE_OK || b.seq!=o->first) ){
    rc = tdeErr(TDE_FORMAT, "retention: %s is not the base copy its name says", o->zKey);
  }
  close(fd);
  if( rc ) return rc;
  rtCachePut(o->zKey, b.tCapture);
  *pt = b.tCapture;
  return TDE_OK;
}

/* The newest point of history h: its last segment's closing time, else
** its newest base copy's capture time. */
static int rtHistLast(Rt *p, RtHist *h, uint64_t *pt){
  int rc = TDE_OK;
  if( h->tLast==0 && h->nSeg>0 ){
    uint8_t *a = 0;
    size_t n = 0;
    TdeArchSeg s;
    const RtObj *o = &h->aSeg[h->nSeg-1];
    for(int i=0; i<h->nSeg; i++) if( h->aSeg[i].last>o->last ) o = &h->aSeg[i];
    rc = tdeS3Get(p->pS3, o->zKey, RT_SEG_MAX, &a, &n);
    if( rc==TDE_OK && tdeArchSegDecode(a, n, &s)!=TDE_OK ){
      rc = tdeErr(TDE_FORMAT, "retention: %s is not a segment", o->zKey);
    }
    if( rc==TDE_OK ) h->tLast = s.tClosed;
    free(a);
  }
  if( rc==TDE_OK && h->tLast==0 && h->nBase>0 ) rc = rtBaseTime(p, &h->aBase[h->nBase-1], &h->tLast);
  *pt = h->tLast;
  return rc;
}

/* ---- the plan ------------------------------------------------------------ */

/* What goes of one history: bases [0, nBaseGo) and the segments marked. */
typedef struct RtPlan {
  int bWhole;
  int nBaseGo;
  uint64_t keepSeq;               /* the oldest kept base's sequence */
} RtPlan;

/*
** The current history h: the index of the oldest base copy kept (*piKeep)
** and whether h alone satisfies every rule (*pbFull): then the other
** histories may go.  *ptCut: the window's start (age rule).
*/
static int rtPlanCurrent(Rt *p, RtHist *h, const TdeRetainOpts *o, uint64_t tCut, int *piKeep, int *pbFull){
  int iCount = h->nBase-1, iAge = h->nBase-1;
  int bCount = 1, bAge = 1;
  if( o->nBases ){
    iCount = h->nBase>(int)o->nBases ? h->nBase-(int)o->nBases : 0;
    bCount = h->nBase>=(int)o->nBases;
  }
  if( o->ageMs ){
    iAge = 0;
    bAge = 0;
    for(int i=h->nBase-1; i>=0; i--){
      uint64_t t = 0;
      int rc = rtBaseTime(p, &h->aBase[i], &t);
      if( rc ) return rc;
      if( t<=tCut ){ iAge = i; bAge = 1; break; }
    }
  }
  *piKeep = iCount<iAge ? iCount : iAge;
  if( *piKeep<0 ) *piKeep = 0;
  *pbFull = bCount && bAge && h->nBase>0;
  return TDE_OK;
}

/* ---- deletions ------------------------------------------------------------ */

typedef struct RtOut {
  const TdeRetainOpts *o;
  void (*xLine)(void*, const char*);
  void *pArg;
  TdeRetainResult *pRes;
} RtOut;

static int rtDelete(Rt *p, RtOut *w, const RtObj *o, int bBase){
  int rc = TDE_OK;
  if( w->xLine ){
    char z[1200];
    snprintf(z, sizeof(z), "%s %s", w->o->bDryRun ? "would delete" : "delete", o->zKey);
    w->xLine(w->pArg, z);
  }
  if( !w->o->bDryRun ) rc = tdeS3Delete(p->pS3, o->zKey);
  if( rc==TDE_OK ) (*(bBase ? &w->pRes->nBase : &w->pRes->nSeg))++;
  return rc;
}

/* Apply the plan of one history: segments first (ascending), then base
** copies (ascending); its ranges go to the result's detail. */
static int rtApply(Rt *p, RtOut *w, const RtHist *h, const RtPlan *pl){
  uint64_t s0 = 0, s1 = 0, b0 = 0, b1 = 0, nS = 0, nB = 0;
  int rc = TDE_OK;
  char zHist[33];
  size_t k;
  for(int i=0; rc==TDE_OK && i<h->nSeg; i++){
    if( !pl->bWhole && h->aSeg[i].last>=pl->keepSeq ) continue;
    rc = rtDelete(p, w, &h->aSeg[i], 0);
    if( rc==TDE_OK ){
      if( nS++==0 ) s0 = h->aSeg[i].first;
      if( h->aSeg[i].last>s1 ) s1 = h->aSeg[i].last;
    }
  }
  for(int i=0; rc==TDE_OK && i<(pl->bWhole ? h->nBase : pl->nBaseGo); i++){
    rc = rtDelete(p, w, &h->aBase[i], 1);
    if( rc==TDE_OK && nB++==0 ) b0 = h->aBase[i].first;
    if( rc==TDE_OK ) b1 = h->aBase[i].first;
  }
  if( nS==0 && nB==0 ) return rc;
  tdeHex(h->aHist, 16, zHist);
  k = strlen(w->pRes->zDetail);
  snprintf(w->pRes->zDetail + k, sizeof(w->pRes->zDetail) - k, "%shistory %.8s%s: %llu base copies "
           "%llu..%llu, %llu segments %llu..%llu", k ? "; " : "", zHist, pl->bWhole ? " whole" : "",
           (unsigned long long)nB, (unsigned long long)b0, (unsigned long long)b1, (unsigned long long)nS,
           (unsigned long long)s0, (unsigned long long)s1);
  if( pl->bWhole && rc==TDE_OK ) w->pRes->nHistWhole++;
  return rc;
}

/* The current history: the given one, else the one whose newest point is
** the newest.  -1 when the archive holds nothing of it. */
static int rtPickCurrent(Rt *p, const uint8_t *aCurrent, int *piCur){
  uint64_t tBest = 0;
  *piCur = -1;
  for(int i=0; i<p->nHist; i++){
    if( aCurrent ){
      if( memcmp(p->aHist[i].aHist, aCurrent, 16)==0 ) *piCur = i;
      continue;
    }
    if( p->nHist==1 ){ *piCur = 0; break; }
    {
      uint64_t t = 0;
      int rc = rtHistLast(p, &p->aHist[i], &t);
      if( rc ) return rc;
      if( *piCur<0 || t>tBest ){ tBest = t; *piCur = i; }
    }
  }
  return TDE_OK;
}

int tdeRetainPrune(TdeS3 *pS3, const char *zPrefix, const uint8_t *aDbid, const uint8_t *aCurrent,
                   const TdeRetainOpts *pOpt, void (*xLine)(void*, const char*), void *pArg,
                   TdeRetainResult *pRes){
  Rt rt;
  RtOut w = { pOpt, xLine, pArg, pRes };
  char zDir[TDE_ARCH_NAME_MAX];
  uint64_t now = pOpt->nowMs ? pOpt->nowMs : tdeNowMs();
  uint64_t tCut = pOpt->ageMs<now ? now - pOpt->ageMs : 0;
  int rc, iCur = -1, iKeep = 0, bFull = 0;
  memset(pRes, 0, sizeof(*pRes));
  if( !pOpt->nBases && !pOpt->ageMs ) return tdeErr(TDE_MISUSE, "retention: give a count of base copies, an age, or both");
  memset(&rt, 0, sizeof(rt));
  rt.pS3 = pS3;
  rt.zPrefix = zPrefix ? zPrefix : "";
  rt.aDbid = aDbid;
  rc = tdeArchDbDir(rt.zPrefix, aDbid, zDir, sizeof(zDir));
  if( rc==TDE_OK ) rc = tdeS3List(pS3, zDir, rtOnObject, &rt);
  for(int i=0; rc==TDE_OK && i<rt.nHist; i++){
    RtHist *h = &rt.aHist[i];
    if( h->nBase ) qsort(h->aBase, (size_t)h->nBase, sizeof(RtObj), rtCmp);
    if( h->nSeg ) qsort(h->aSeg, (size_t)h->nSeg, sizeof(RtObj), rtCmp);
  }
  if( rc==TDE_OK ) rc = rtPickCurrent(&rt, aCurrent, &iCur);
  if( rc==TDE_OK && iCur>=0 && rt.aHist[iCur].nBase>0 ){
    rc = rtPlanCurrent(&rt, &rt.aHist[iCur], pOpt, tCut, &iKeep, &bFull);
  }
  /* The other histories first: the current one's objects are the last to go. */
  for(int i=0; rc==TDE_OK && bFull && i<rt.nHist; i++){
    RtPlan pl = { 1, 0, 0 };
    uint64_t tLast = 0;
    if( i==iCur ) continue;
    if( pOpt->ageMs ){
      rc = rtHistLast(&rt, &rt.aHist[i], &tLast);
      if( rc || tLast>tCut ) continue;
    }
    rc = rtApply(&rt, &w, &rt.aHist[i], &pl);
  }
  if( rc==TDE_OK && iCur>=0 && rt.aHist[iCur].nBase>0 && iKeep>0 ){
    RtPlan pl = { 0, iKeep, rt.aHist[iCur].aBase[iKeep].first };
    rc = rtApply(&rt, &w, &rt.aHist[iCur], &pl);
  }
  rtFree(&rt);
  return rc;
}

/* ---- the archiver's call ------------------------------------------------- */

void tdeRetainAfterBase(TdeShipLink *pLink, TdeS3 *pS3, const char *zPrefix, const uint8_t *aDbid,
                        const uint8_t *aHistory, const char *zKey, uint64_t tCapture, uint32_t nBases,
                        uint64_t ageMs){
  TdeRetainOpts o;
  TdeRetainResult res;
  int rc;
  rtCachePut(zKey, tCapture);
  if( !nBases && !ageMs ) return;
  memset(&o, 0, sizeof(o));
  o.nBases = nBases;
  o.ageMs = ageMs;
  rc = tdeRetainPrune(pS3, zPrefix, aDbid, aHistory, &o, 0, 0, &res);
  if( res.nBase + res.nSeg > 0 ){
    char zLine[900];
    snprintf(zLine, sizeof(zLine), "%llu object(s): %llu base copies, %llu segments%s; %s",
             (unsigned long long)(res.nBase + res.nSeg), (unsigned long long)res.nBase,
             (unsigned long long)res.nSeg, rc ? " (stopped by an error)" : "", res.zDetail);
    tdeLog(TDE_LOG_INFO, "archive: retention deleted %s", zLine);
    tdeShipLinkAudit(pLink, "archive_prune", zLine);
  }
  if( rc ) tdeLog(TDE_LOG_WARNING, "archive: retention: %s (the archive goes on)", tde_last_error());
}

/* ---- sqlite-tde archive --prune ----------------------------------------- */

/* The database id: 32 hex digits, or offset 20 of the first header slot
** whose magic is right (docs/FORMAT.md "Header slot": plaintext). */
static int rtDbid(const char *zDb, const char *zDbId, uint8_t *aDbid){
  if( zDbId ){
    if( strlen(zDbId)!=32 || strspn(zDbId, "0123456789abcdefABCDEF")!=32 ){
      return tdeErr(TDE_MISUSE, "retention: a database id is 32 hex digits, not '%s'", zDbId);
    }
    for(int i=0; i<16; i++){
      unsigned v = 0;
      sscanf(zDbId + 2*i, "%2x", &v);
      aDbid[i] = (uint8_t)v;
    }
    return TDE_OK;
  }
  if( zDb ){
    uint8_t a[36];
    int fd = open(zDb, O_RDONLY | O_CLOEXEC);
    if( fd<0 ) return tdeErr(TDE_IO, "retention: %s: %s", zDb, strerror(errno));
    for(off_t off=0; off<=4096; off+=4096){
      if( pread(fd, a, sizeof(a), off)==(ssize_t)sizeof(a) && memcmp(a, "SQLT-TDE", 8)==0 ){
        memcpy(aDbid, a+20, 16);
        close(fd);
        return TDE_OK;
      }
    }
    close(fd);
    return tdeErr(TDE_FORMAT, "retention: %s has no sqlite-tde header: give --db-id", zDb);
  }
  return tdeErr(TDE_MISUSE, "retention: give the database (for its id) or --db-id");
}

static void rtAudit(const char *zDb, const uint8_t *aDbid, const char *zDetail){
  TdeAuditRec r;
  char zLine[1024], zPath[4200];
  int n, fd;
  snprintf(zPath, sizeof(zPath), "%s-tdeship-audit", zDb);
  tdeAuditInit(&r, "archive_prune");
  r.zDbPath = zDb;
  r.aDbid = aDbid;
  r.zDetail = zDetail;
  n = tdeAuditFormat(&r, (int64_t)tdeNowMs(), (int)getpid(), zLine, sizeof(zLine));
  if( n<0 ) return;
  fd = open(zPath, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if( fd<0 || write(fd, zLine, (size_t)n)!=n ){
    tdeLog(TDE_LOG_WARNING, "archive --prune: cannot write the audit log %s: %s", zPath, strerror(errno));
  }
  if( fd>=0 ) close(fd);
}

int tdeRetainOnce(TdeS3 *pS3, const char *zPrefix, const char *zDb, const char *zDbId, uint32_t nBases,
                  uint64_t ageMs, int bDryRun, void (*xLine)(void*, const char*), void *pArg){
  TdeRetainOpts o;
  TdeRetainResult res;
  uint8_t aDbid[16];
  char zLine[1000], zHex[33];
  int rc = rtDbid(zDb, zDbId, aDbid);
  if( rc ) return rc;
  memset(&o, 0, sizeof(o));
  o.nBases = nBases;
  o.ageMs = ageMs;
  o.bDryRun = bDryRun;
  rc = tdeRetainPrune(pS3, zPrefix, aDbid, 0, &o, xLine, pArg, &res);
  tdeHex(aDbid, 16, zHex);
  snprintf(zLine, sizeof(zLine), "%llu object(s): %llu base copies, %llu segments%s%s%s",
           (unsigned long long)(res.nBase + res.nSeg), (unsigned long long)res.nBase,
           (unsigned long long)res.nSeg, rc ? " (stopped by an error)" : "", res.zDetail[0] ? "; " : "",
           res.zDetail);
  if( xLine ){
    char z[1100];
    snprintf(z, sizeof(z), "%s database %s: %s", bDryRun ? "would prune" : "pruned", zHex, zLine);
    xLine(pArg, z);
  }
  if( !bDryRun && zDb && res.nBase + res.nSeg > 0 ) rtAudit(zDb, aDbid, zLine);
  return rc;
}
