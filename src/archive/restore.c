/*
** sqlite-tde restore: rebuild a database from the keyless archive
** (docs/ARCHIVE.md).  The catalogue is a listing of PREFIX/DBID/; a restore
** picks the newest base copy at or before the target, then segments that
** continue it without a gap, and trusts nothing it has not verified:
**
**   base copy   its name, header, size, SHA-256 and Ed25519 signature (the
**               "TDEBASE1" statement of FORMAT.md "Record chain and
**               signatures"): its pages, header region, sequence and chain;
**   segment     every record whole (tdeRecCheck), in sequence, the chain
**               recomputed from the one before its first record, and the
**               signed head at its last record (database, history, sequence,
**               chain); then the chain at the point it continues from must
**               be the copy's, so a segment of another history, an edited,
**               reordered or replayed one and an older base do not fit.
**
** Records are validated against the copy (tdeRecValidate) and applied with
** tdeApplyRecord, the standby's routines, into OUT.part; OUT appears only
** whole (fdatasync, rename without replacing).  No key: pages stay the
** primary's ciphertext.  Never prints (the CLI does).
*/
#include "archive/restore.h"
#include "archive/object.h"
#include "repl/repl.h"
#include "keys/keys.h"
#include "keys/layout.h"

#include <errno.h>
#include <stdarg.h>
#include <time.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#define RS_SEG_MAX     ((size_t)1 << 30)   /* the largest segment read into memory */

/* ---- the catalogue ------------------------------------------------------ */

typedef struct RsObj {
  uint64_t a, b;                  /* base: sequence; segment: first, last */
  uint64_t nSize;
  char zKey[1025];
} RsObj;

typedef struct RsHist {
  uint8_t aHist[16];
  RsObj *aBase, *aSeg;
  int nBase, nSeg, nBaseAlloc, nSegAlloc;
} RsHist;

typedef struct Rs {
  const TdeRestoreOpts *pOpt;
  TdeS3 *pS3;
  EVP_PKEY *apKey[TDE_MAX_PUBKEYS];
  int nKey;
  char zRoot[600];                /* PREFIX/DBID/ */
  RsHist *aHist;
  int nHist, nIgnored;
  /* the copy being built */
  int fd;
  uint64_t seq, tCap;             /* applied up to seq, captured at tCap */
  uint8_t aChain[32];             /* chain at seq */
  uint32_t pgsz;                  /* 0: not known yet */
  uint64_t nBytes;                /* bytes of pages in the copy */
  TdeLayout L;                    /* the copy's (the base copy's header region's) */
  int64_t nPhys;                  /* the base copy's size until a record gives it (-1 then) */
  uint64_t nSegment, nRecord, nDown;
} Rs;

static RsHist *rsHistFind(Rs *p, const uint8_t *aHist){
  for(int i=0; i<p->nHist; i++) if( memcmp(p->aHist[i].aHist, aHist, 16)==0 ) return &p->aHist[i];
  RsHist *a = realloc(p->aHist, sizeof(RsHist)*(uint64_t)(p->nHist+1));
  if( !a ) return 0;
  p->aHist = a;
  memset(&a[p->nHist], 0, sizeof(RsHist));
  memcpy(a[p->nHist].aHist, aHist, 16);
  return &a[p->nHist++];
}

static int rsObjAdd(RsObj **pa, int *pn, int *pnAlloc, const RsObj *o){
  if( *pn==*pnAlloc ){
    int nNew = *pnAlloc ? 2 * *pnAlloc : 16;
    RsObj *a = realloc(*pa, sizeof(RsObj)*(uint64_t)nNew);
    if( !a ) return TDE_NOMEM;
    *pa = a;
    *pnAlloc = nNew;
  }
  (*pa)[(*pn)++] = *o;
  return TDE_OK;
}

/* One listed key: a base copy or a segment of this database (the codec's
** names); anything else is counted and left alone. */
static int rsOnObject(void *pArg, const TdeS3Object *pObj){
  Rs *p = pArg;
  TdeArchName nm;
  RsObj o;
  RsHist *h;
  if( tdeArchNameParse(p->pOpt->zPrefix ? p->pOpt->zPrefix : "", pObj->zKey, &nm)!=TDE_OK
      || memcmp(nm.aDbid, p->pOpt->aDbid, 16)!=0 ){
    p->nIgnored++;
    return 0;
  }
  memset(&o, 0, sizeof(o));
  o.a = nm.first;
  o.b = nm.last;
  o.nSize = pObj->nSize;
  snprintf(o.zKey, sizeof(o.zKey), "%s", pObj->zKey);
  h = rsHistFind(p, nm.aHistory);
  if( !h ) return TDE_NOMEM;
  return nm.eKind==TDE_ARCH_KIND_BASE ? rsObjAdd(&h->aBase, &h->nBase, &h->nBaseAlloc, &o)
                                      : rsObjAdd(&h->aSeg, &h->nSeg, &h->nSegAlloc, &o);
}

static int rsCmpObj(const void *a, const void *b){
  const RsObj *x = a, *y = b;
  if( x->a!=y->a ) return x->a<y->a ? -1 : 1;
  if( x->b!=y->b ) return x->b<y->b ? -1 : 1;
  return 0;
}

int tdeRestoreKeys(const char *zList, EVP_PKEY **apKey, int *pnKey){
  char zBuf[8192];
  char *zSave = 0, *z;
  int rc = TDE_OK;
  *pnKey = 0;
  if( !zList || snprintf(zBuf, sizeof(zBuf), "%s", zList)>=(int)sizeof(zBuf) ){
    return tdeErr(TDE_MISUSE, "restore: the primary's public key is required (--pubkey PUB.pem)");
  }
  for(z = strtok_r(zBuf, ",", &zSave); z && rc==TDE_OK; z = strtok_r(0, ",", &zSave)){
    if( *pnKey==TDE_MAX_PUBKEYS ) return tdeErr(TDE_RANGE, "restore: at most %d public keys", TDE_MAX_PUBKEYS);
    rc = tdePubKeyLoad(z, &apKey[*pnKey]);
    if( rc==TDE_OK ) (*pnKey)++;
  }
  if( rc==TDE_OK && *pnKey==0 ) rc = tdeErr(TDE_MISUSE, "restore: no public key named");
  return rc;
}

/* Open the client, load the keys, list the database's folder. */
static int rsOpen(Rs *p, const TdeRestoreOpts *pOpt){
  const char *zPre = pOpt->zPrefix ? pOpt->zPrefix : "";
  int rc;
  memset(p, 0, sizeof(*p));
  p->pOpt = pOpt;
  p->fd = -1;
  rc = tdeArchPrefixCheck(zPre);
  if( rc==TDE_OK ) rc = tdeArchDbDir(zPre, pOpt->aDbid, p->zRoot, sizeof(p->zRoot));
  if( rc ) return rc;
  rc = tdeRestoreKeys(pOpt->zPubKey, p->apKey, &p->nKey);
  if( rc ) return rc;
  rc = tdeS3Open(pOpt->pS3, &p->pS3);
  if( rc ) return rc;
  rc = tdeS3List(p->pS3, p->zRoot, rsOnObject, p);
  if( rc ) return rc;
  for(int i=0; i<p->nHist; i++){
    RsHist *h = &p->aHist[i];
    if( h->nBase ) qsort(h->aBase, (size_t)h->nBase, sizeof(RsObj), rsCmpObj);
    if( h->nSeg ) qsort(h->aSeg, (size_t)h->nSeg, sizeof(RsObj), rsCmpObj);
  }
  if( p->nIgnored ){
    tdeLog(TDE_LOG_WARNING, "restore: %d object(s) under %s are neither base copies nor segments: ignored",
           p->nIgnored, p->zRoot);
  }
  return TDE_OK;
}

static void rsClose(Rs *p){
  for(int i=0; i<p->nHist; i++){
    free(p->aHist[i].aBase);
    free(p->aHist[i].aSeg);
  }
  free(p->aHist);
  for(int i=0; i<p->nKey; i++) EVP_PKEY_free(p->apKey[i]);
  tdeS3Close(p->pS3);
  if( p->fd>=0 ) close(p->fd);
  p->fd = -1;
}

/* ---- a base copy -------------------------------------------------------- */

static int rsReadAll(int fd, uint8_t *a, size_t n, off_t off){
  while( n>0 ){
    ssize_t k = pread(fd, a, n, off);
    if( k<0 && errno==EINTR ) continue;
    if( k<=0 ) return tdeErr(TDE_IO, "restore: read: %s", k<0 ? strerror(errno) : "short file");
    a += k; n -= (size_t)k; off += k;
  }
  return TDE_OK;
}

static int rsWriteAll(int fd, const uint8_t *a, size_t n, off_t off){
  while( n>0 ){
    ssize_t k = pwrite(fd, a, n, off);
    if( k<0 && errno==EINTR ) continue;
    if( k<=0 ) return tdeErr(TDE_IO, "restore: write: %s", strerror(errno));
    a += k; n -= (size_t)k; off += k;
  }
  return TDE_OK;
}

/*
** Download base copy o into fdTmp (a new empty file), check it whole and
** copy its pages into fdOut (when >= 0).  *pH gets its verified header.
** The header's signature is checked first (it covers the copy's SHA-256),
** then the copy is hashed as it is copied and compared.
*/
static int rsBaseFetch(Rs *p, const RsHist *pHist, const RsObj *o, int fdTmp, int fdOut, TdeArchBase *pH){
  uint8_t aHdr[TDE_ARCH_BASE_HDR], aSum[32];
  uint8_t *aBuf = malloc(1<<20);
  uint64_t nObj = 0, off;
  unsigned int nSum = 0;
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  int rc = TDE_OK;
  if( !aBuf || !c ){ rc = TDE_NOMEM; goto done; }
  rc = tdeS3GetFd(p->pS3, o->zKey, fdTmp, &nObj);
  if( rc ) goto done;
  p->nDown += nObj;
  if( nObj<TDE_ARCH_BASE_HDR || rsReadAll(fdTmp, aHdr, TDE_ARCH_BASE_HDR, 0)!=TDE_OK
      || tdeArchBaseDecode(aHdr, sizeof(aHdr), pH)!=TDE_OK ){
    rc = tdeErr(TDE_AUTH, "restore: %s is not a base copy", o->zKey);
    goto done;
  }
  if( tdeArchBaseVerify(p->apKey, p->nKey, pH, p->pOpt->aDbid, pHist->aHist)!=TDE_OK ){
    rc = tdeErr(TDE_AUTH, "restore: %s: %s", o->zKey, tde_last_error());
    goto done;
  }
  if( pH->seq!=o->a || pH->size!=nObj-TDE_ARCH_BASE_HDR ){
    rc = tdeErr(TDE_AUTH, "restore: %s holds a base copy at sequence %llu of %llu bytes: not what its name "
                "and size say", o->zKey, (unsigned long long)pH->seq, (unsigned long long)pH->size);
    goto done;
  }
  if( EVP_DigestInit_ex(c, EVP_sha256(), 0)!=1 ){ rc = TDE_CRYPTO; goto done; }
  for(off=0; off<pH->size; ){
    size_t n = pH->size-off < (1u<<20) ? (size_t)(pH->size-off) : (1u<<20);
    rc = rsReadAll(fdTmp, aBuf, n, (off_t)(TDE_ARCH_BASE_HDR + off));
    if( rc==TDE_OK && EVP_DigestUpdate(c, aBuf, n)!=1 ) rc = TDE_CRYPTO;
    if( rc==TDE_OK && fdOut>=0 ) rc = rsWriteAll(fdOut, aBuf, n, (off_t)off);
    if( rc ) goto done;
    off += n;
  }
  if( EVP_DigestFinal_ex(c, aSum, &nSum)!=1 ){ rc = TDE_CRYPTO; goto done; }
  if( memcmp(aSum, pH->aSum, 32)!=0 ){
    rc = tdeErr(TDE_AUTH, "restore: %s: the copy does not hash to the signed SHA-256 (altered)", o->zKey);
  }
done:
  EVP_MD_CTX_free(c);
  free(aBuf);
  return rc;
}

/* A temporary file for a base copy's download: next to the output (zOut),
** or, for --list (zOut NULL), a new file in $TMPDIR or /tmp. */
static int rsTempOpen(const char *zOut, char *zTmp, size_t nTmp, int *pfd){
  if( zOut ){
    if( snprintf(zTmp, nTmp, "%s.part-base", zOut)>=(int)nTmp ) return tdeErr(TDE_RANGE, "restore: path too long");
    unlink(zTmp);     /* OUT.part, created O_EXCL before, says no other restore uses it */
    *pfd = open(zTmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  }else{
    const char *zDir = getenv("TMPDIR");
    if( snprintf(zTmp, nTmp, "%s/sqlite-tde-restore-XXXXXX", zDir && zDir[0] ? zDir : "/tmp")>=(int)nTmp ){
      return tdeErr(TDE_RANGE, "restore: TMPDIR too long");
    }
    *pfd = mkostemp(zTmp, O_CLOEXEC);
  }
  if( *pfd<0 ) return tdeErr(TDE_IO, "restore: %s: %s", zTmp, strerror(errno));
  return TDE_OK;
}

/* ---- segments ----------------------------------------------------------- */

/* A verified segment in memory: aOff[i] the offsets of its records. */
typedef struct RsSeg {
  uint8_t *a;
  size_t n;
  TdeArchSeg h;
  size_t *aOff;
  int nRec;
} RsSeg;

static void rsSegFree(RsSeg *s){
  free(s->a);
  free(s->aOff);
  memset(s, 0, sizeof(*s));
}

/* Download segment o and check it whole (tdeArchSegCheck: records in
** sequence, chain, signed head of this database and history at its last
** record), and that it holds what its name says. */
static int rsSegFetch(Rs *p, const RsHist *pHist, const RsObj *o, RsSeg *s){
  size_t off = 0, nRec = 0;
  const uint8_t *aRec = 0;
  TdeRec r;
  int rc;
  memset(s, 0, sizeof(*s));
  rc = tdeS3Get(p->pS3, o->zKey, RS_SEG_MAX, &s->a, &s->n);
  if( rc ) return rc;
  p->nDown += s->n;
  p->nSegment++;
  rc = tdeArchSegCheck(s->a, s->n, p->apKey, p->nKey, p->pOpt->aDbid, pHist->aHist, 0, &s->h, 0);
  if( rc ) return tdeErr(TDE_AUTH, "restore: %s: %s", o->zKey, tde_last_error());
  if( s->h.first!=o->a || s->h.last!=o->b ){
    return tdeErr(TDE_AUTH, "restore: %s holds records %llu..%llu, not what its name says", o->zKey,
                  (unsigned long long)s->h.first, (unsigned long long)s->h.last);
  }
  while( (rc = tdeArchSegNext(s->a, s->n, &off, &r, &aRec, &nRec))==TDE_OK ){
    if( (s->nRec & 63)==0 ){
      size_t *a = realloc(s->aOff, sizeof(size_t)*(uint64_t)(s->nRec+64));
      if( !a ) return TDE_NOMEM;
      s->aOff = a;
    }
    s->aOff[s->nRec++] = (size_t)(aRec - s->a);
  }
  return rc==TDE_NOTFOUND ? TDE_OK : rc;
}

/* The copy is at p->seq with chain p->aChain: the segment (first <= seq+1)
** must carry that chain at that point. */
static int rsSegJoins(const Rs *p, const RsSeg *s, const RsObj *o){
  uint8_t aChain[32];
  memcpy(aChain, s->h.aChainBefore, 32);
  for(int i=0; s->h.first+(uint64_t)i<=p->seq && i<s->nRec; i++){
    const uint8_t *a = s->a + s->aOff[i];
    size_t nRec = TDE_REC_HDR + tdeGet32(a+88) + TDE_REC_SUM;
    tdeChainNext(aChain, a+nRec-TDE_REC_SUM, aChain);
  }
  if( memcmp(aChain, p->aChain, 32)!=0 ){
    return tdeErr(TDE_AUTH, "restore: %s does not continue the chain at sequence %llu (a splice, an older "
                  "base copy or another history)", o->zKey, (unsigned long long)p->seq);
  }
  return TDE_OK;
}

/* Validate (as the standby does) and apply one TXN record to the copy. */
static int rsApplyOne(Rs *p, const uint8_t *a, const TdeRec *r){
  int rc;
  if( p->nPhys>=0 && tdeCopyBytes(&p->L, p->nPhys, r, &p->nBytes)!=TDE_OK ){
    return tdeErr(TDE_AUTH, "restore: %s", tde_last_error());
  }
  {
    uint32_t pgsz = p->pgsz ? p->pgsz : r->pgsz;
    rc = tdeRecValidate(a, r, p->pgsz, pgsz ? p->nBytes/pgsz : 0, p->pOpt->aDbid);
  }
  if( rc ) return tdeErr(TDE_AUTH, "restore: %s", tde_last_error());
  rc = tdeApplyRecord(p->fd, a, r);
  if( rc ) return rc;
  if( r->nFrame>0 ){
    const uint8_t *f = a + TDE_REC_HDR + r->nPayload - (TDE_FRAME_HDR + r->pgsz);
    p->pgsz = r->pgsz;
    p->nBytes = (uint64_t)tdeGet32(f+4) * r->pgsz;
    p->nPhys = -1;
  }
  p->nRecord++;
  return TDE_OK;
}

/* Is record r past the target? */
static int rsPast(const Rs *p, const TdeRec *r){
  const TdeRestoreOpts *o = p->pOpt;
  if( o->eTarget==TDE_RESTORE_SEQ ) return r->seq>o->target;
  if( o->eTarget==TDE_RESTORE_TIME ) return r->tCapture>o->target;
  return 0;
}

#define RS_STOP_NOSEG   0    /* no segment holds the next sequence */
#define RS_STOP_TARGET  1    /* the target is reached */
#define RS_STOP_GAP     2    /* a GAP record: frames were lost; only a later base copy goes on */

/* Apply the records of verified segment s after the copy's sequence, up to
** the target.  *peStop: why it stopped (NOSEG: it did not). */
static int rsSegApply(Rs *p, const RsSeg *s, int *peStop, uint64_t *pGap){
  for(int i=0; i<s->nRec; i++){
    const uint8_t *a = s->a + s->aOff[i];
    TdeRec r;
    int rc;
    tdeRecDecode(a, &r);
    if( r.seq<=p->seq ) continue;
    if( rsPast(p, &r) ){ *peStop = RS_STOP_TARGET; return TDE_OK; }
    if( r.kind==TDE_REC_GAP ){ *pGap = r.seq; *peStop = RS_STOP_GAP; return TDE_OK; }
    if( p->fd>=0 ){
      rc = rsApplyOne(p, a, &r);
      if( rc ) return rc;
    }
    tdeChainNext(p->aChain, a + TDE_REC_HDR + r.nPayload, p->aChain);
    p->seq = r.seq;
    p->tCap = r.tCapture;
  }
  return TDE_OK;
}

/* The segment with the highest last sequence that holds seq (or -1). */
static int rsSegFind(const RsHist *h, uint64_t seq){
  int iBest = -1;
  for(int i=0; i<h->nSeg; i++){
    if( h->aSeg[i].a<=seq && seq<=h->aSeg[i].b && (iBest<0 || h->aSeg[i].b>h->aSeg[iBest].b) ) iBest = i;
  }
  return iBest;
}

static uint64_t rsHistEnd(const RsHist *h){
  uint64_t end = 0;
  for(int i=0; i<h->nSeg; i++) if( h->aSeg[i].b>end ) end = h->aSeg[i].b;
  for(int i=0; i<h->nBase; i++) if( h->aBase[i].a>end ) end = h->aBase[i].a;
  return end;
}

/*
** From the copy at p->seq, verify and apply segments that continue it,
** until the target, a GAP record or the last segment (*peStop says which;
** *pGap: the GAP's sequence).
*/
static int rsWalk(Rs *p, const RsHist *h, int *peStop, uint64_t *pGap){
  *pGap = 0;
  *peStop = RS_STOP_NOSEG;
  for(;;){
    int i;
    RsSeg s;
    int rc;
    if( p->pOpt->eTarget==TDE_RESTORE_SEQ && p->seq>=p->pOpt->target ){
      *peStop = RS_STOP_TARGET;
      return TDE_OK;
    }
    i = rsSegFind(h, p->seq+1);
    if( i<0 ) return TDE_OK;
    rc = rsSegFetch(p, h, &h->aSeg[i], &s);
    if( rc==TDE_OK ) rc = rsSegJoins(p, &s, &h->aSeg[i]);
    if( rc==TDE_OK ) rc = rsSegApply(p, &s, peStop, pGap);
    rsSegFree(&s);
    if( rc || *peStop!=RS_STOP_NOSEG ) return rc;
  }
}

/* ---- restore ------------------------------------------------------------ */

/* Capture times of a history's first and last records, from its first and
** last segments (verified; 0 when it has none). */
static int rsHistSpan(Rs *p, const RsHist *h, uint64_t *ptFirst, uint64_t *ptLast){
  int iFirst = 0, iLast = 0, rc = TDE_OK;
  *ptFirst = *ptLast = 0;
  if( h->nSeg==0 ) return TDE_OK;
  for(int i=1; i<h->nSeg; i++) if( h->aSeg[i].b>h->aSeg[iLast].b ) iLast = i;
  for(int k=0; rc==TDE_OK && k<2; k++){
    RsSeg s;
    TdeRec r;
    rc = rsSegFetch(p, h, &h->aSeg[k ? iLast : iFirst], &s);
    if( rc==TDE_OK && s.nRec>0 && tdeRecDecode(s.a + s.aOff[k ? s.nRec-1 : 0], &r)==TDE_OK ){
      *(k ? ptLast : ptFirst) = r.tCapture;
    }
    rsSegFree(&s);
  }
  return rc;
}

/*
** The history to restore: --history, or the only one.  With several, a
** sequence number is ambiguous (they count per history): refused; the
** newest state is in the history whose last record is the newest, the
** state at time T in the newest history whose first record is at or
** before T.
*/
static int rsPickHist(Rs *p, RsHist **ppHist){
  const TdeRestoreOpts *o = p->pOpt;
  char zDbid[33], zHist[33];
  uint64_t tBest = 0;
  tdeHex(o->aDbid, 16, zDbid);
  *ppHist = 0;
  if( o->bHistory ){
    for(int i=0; i<p->nHist; i++) if( memcmp(p->aHist[i].aHist, o->aHistory, 16)==0 ) *ppHist = &p->aHist[i];
    tdeHex(o->aHistory, 16, zHist);
    if( !*ppHist ) return tdeErr(TDE_NOTFOUND, "restore: no history %s of database %s in the archive", zHist, zDbid);
    return TDE_OK;
  }
  if( p->nHist==0 ) return tdeErr(TDE_NOTFOUND, "restore: the archive holds nothing of database %s (under %s)",
                                  zDbid, p->zRoot);
  if( p->nHist==1 ){
    *ppHist = &p->aHist[0];
    return TDE_OK;
  }
  if( o->eTarget==TDE_RESTORE_SEQ ){
    return tdeErr(TDE_MISUSE, "restore: the archive holds %d histories of database %s and sequence numbers "
                  "count per history: name one with --history (see --list)", p->nHist, zDbid);
  }
  for(int i=0; i<p->nHist; i++){
    uint64_t tFirst, tLast;
    int rc = rsHistSpan(p, &p->aHist[i], &tFirst, &tLast);
    if( rc ) return rc;
    if( o->eTarget==TDE_RESTORE_LATEST ? tLast>tBest : (tFirst<=o->target && tFirst>tBest) ){
      tBest = o->eTarget==TDE_RESTORE_LATEST ? tLast : tFirst;
      *ppHist = &p->aHist[i];
    }
  }
  if( !*ppHist ) return tdeErr(TDE_NOTFOUND, "restore: the target is before the first record of every history");
  tdeHex((*ppHist)->aHist, 16, zHist);
  tdeLog(TDE_LOG_INFO, "restore: %d histories of database %s: restoring history %s (the %s)", p->nHist, zDbid,
         zHist, o->eTarget==TDE_RESTORE_LATEST ? "newest" : "newest begun by the target time");
  return TDE_OK;
}

/*
** The newest base copy at or before the target, verified, copied into
** p->fd.  For a time target the capture time is in the base's header: try
** from the newest down.
*/
static int rsPlaceBase(Rs *p, const RsHist *h, TdeArchBase *pB){
  const TdeRestoreOpts *o = p->pOpt;
  char zTmp[4200];
  int fdTmp = -1, rc = TDE_NOTFOUND, i;
  for(i=h->nBase-1; i>=0; i--){
    if( o->eTarget==TDE_RESTORE_SEQ && h->aBase[i].a>o->target ) continue;
    rc = rsTempOpen(o->zOut, zTmp, sizeof(zTmp), &fdTmp);
    if( rc ) return rc;
    if( ftruncate(p->fd, 0)!=0 ) rc = tdeErr(TDE_IO, "restore: %s: %s", o->zOut, strerror(errno));
    else rc = rsBaseFetch(p, h, &h->aBase[i], fdTmp, p->fd, pB);
    close(fdTmp);
    unlink(zTmp);
    if( rc ) return rc;
    if( o->eTarget!=TDE_RESTORE_TIME || pB->tCapture<=o->target ) break;
    rc = TDE_NOTFOUND;
  }
  if( i<0 ){
    return tdeErr(TDE_NOTFOUND, "restore: the target is before the oldest base copy in the archive%s",
                  h->nBase ? "" : " (it holds none)");
  }
  p->seq = pB->seq;
  p->tCap = pB->tCapture;
  memcpy(p->aChain, pB->aChain, 32);
  p->pgsz = 0;
  p->nPhys = (int64_t)pB->size;
  return tdeCopyLayout(p->fd, 0, &p->L);
}

/* Did the walk reach what was asked?  A history that goes on past where
** the walk stopped has a gap (or a GAP record with no base copy after it). */
static int rsReached(const Rs *p, const RsHist *h, int eStop, uint64_t gap){
  const TdeRestoreOpts *o = p->pOpt;
  uint64_t end = rsHistEnd(h);
  if( eStop==RS_STOP_TARGET ) return TDE_OK;
  if( eStop==RS_STOP_GAP ){
    return tdeErr(TDE_NOTFOUND, "restore: a GAP at sequence %llu (frames lost on the primary) and no base copy "
                  "after it before the target: the archive cannot restore past %llu", (unsigned long long)gap,
                  (unsigned long long)p->seq);
  }
  if( o->eTarget==TDE_RESTORE_SEQ && o->target>end ){
    return tdeErr(TDE_NOTFOUND, "restore: sequence %llu is past the end of the archive (%llu)",
                  (unsigned long long)o->target, (unsigned long long)end);
  }
  if( p->seq>=end ) return TDE_OK;
  return tdeErr(TDE_NOTFOUND, "restore: a gap in the archive: no segment holds sequence %llu, yet it goes on "
                "to %llu (a segment dropped?)", (unsigned long long)(p->seq+1), (unsigned long long)end);
}

/* Make OUT from OUT.part: synced, renamed without replacing anything. */
static int rsFinish(Rs *p, const char *zPart){
  const char *zOut = p->pOpt->zOut;
  if( fdatasync(p->fd)!=0 ) return tdeErr(TDE_IO, "restore: %s: fsync: %s", zPart, strerror(errno));
  close(p->fd);
  p->fd = -1;
  if( link(zPart, zOut)!=0 ){
    return tdeErr(errno==EEXIST ? TDE_EXISTS : TDE_IO, "restore: %s: %s", zOut, strerror(errno));
  }
  unlink(zPart);
  return tdeFsyncDir(zOut);
}

int tdeRestoreRun(const TdeRestoreOpts *pOpt, TdeRestoreResult *pRes){
  Rs rs;
  Rs *p = &rs;
  RsHist *h = 0;
  TdeArchBase base;
  char zPart[4200];
  struct stat st;
  uint64_t gap = 0;
  int rc, bPart = 0, eStop = 0;
  memset(pRes, 0, sizeof(*pRes));
  if( !pOpt->zOut || snprintf(zPart, sizeof(zPart), "%s.part", pOpt->zOut)>=(int)sizeof(zPart) ){
    return tdeErr(TDE_MISUSE, "restore: an output path");
  }
  if( lstat(pOpt->zOut, &st)==0 ) return tdeErr(TDE_EXISTS, "restore: %s exists: not overwritten", pOpt->zOut);
  rc = rsOpen(p, pOpt);
  if( rc==TDE_OK ) rc = rsPickHist(p, &h);
  if( rc ) goto done;
  p->fd = open(zPart, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if( p->fd<0 ){
    rc = tdeErr(errno==EEXIST ? TDE_EXISTS : TDE_IO, "restore: %s: %s%s", zPart, strerror(errno),
                errno==EEXIST ? " (another restore, or one that crashed: remove it)" : "");
    goto done;
  }
  bPart = 1;
  rc = rsPlaceBase(p, h, &base);
  if( rc==TDE_OK ) rc = rsWalk(p, h, &eStop, &gap);
  if( rc==TDE_OK ) rc = rsReached(p, h, eStop, gap);
  if( rc==TDE_OK ) rc = rsFinish(p, zPart);
  if( rc==TDE_OK ){
    memcpy(pRes->aHistory, h->aHist, 16);
    pRes->baseSeq = base.seq;
    pRes->baseCapture = base.tCapture;
    pRes->seq = p->seq;
    pRes->tCapture = p->tCap;
    pRes->archiveEnd = rsHistEnd(h);
  }
done:
  pRes->nSegment = p->nSegment;
  pRes->nRecord = p->nRecord;
  pRes->nBytes = p->nDown;
  rsClose(p);
  if( rc && bPart ) unlink(zPart);
  return rc;
}

/* ---- list --------------------------------------------------------------- */

static void rsLine(void (*xLine)(void*, const char*), void *pArg, const char *zFmt, ...)
  __attribute__((format(printf, 3, 4)));
static void rsLine(void (*xLine)(void*, const char*), void *pArg, const char *zFmt, ...){
  char z[1024];
  va_list ap;
  va_start(ap, zFmt);
  vsnprintf(z, sizeof(z), zFmt, ap);
  va_end(ap);
  xLine(pArg, z);
}

static void rsTime(uint64_t ms, char *z, size_t n){
  time_t t = (time_t)(ms/1000);
  struct tm tm;
  char zDate[32];
  gmtime_r(&t, &tm);
  strftime(zDate, sizeof(zDate), "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(z, n, "%s.%03uZ", zDate, (unsigned)(ms%1000));
}

/* One history: each base copy verified, then the segments that continue it
** (verified, nothing applied). */
static int rsListHist(Rs *p, RsHist *h, void (*xLine)(void*, const char*), void *pArg){
  char zHist[33], zT0[40], zT1[40];
  tdeHex(h->aHist, 16, zHist);
  rsLine(xLine, pArg, "history %s: %d base copies, %d segments, sequences up to %llu", zHist, h->nBase, h->nSeg,
         (unsigned long long)rsHistEnd(h));
  for(int i=0; i<h->nBase; i++){
    TdeArchBase b;
    char zTmp[4200];
    int fdTmp = -1, rc, eStop = 0;
    uint64_t gap = 0;
    rc = rsTempOpen(0, zTmp, sizeof(zTmp), &fdTmp);
    if( rc ) return rc;
    rc = rsBaseFetch(p, h, &h->aBase[i], fdTmp, -1, &b);
    close(fdTmp);
    unlink(zTmp);
    if( rc ){
      rsLine(xLine, pArg, "  base %llu: REFUSED: %s", (unsigned long long)h->aBase[i].a, tde_last_error());
      continue;
    }
    p->seq = b.seq;
    p->tCap = b.tCapture;
    memcpy(p->aChain, b.aChain, 32);
    rsTime(b.tCapture, zT0, sizeof(zT0));
    rc = rsWalk(p, h, &eStop, &gap);
    rsTime(p->tCap, zT1, sizeof(zT1));
    rsLine(xLine, pArg, "  base %llu (captured %s, %llu bytes): restorable to sequences %llu..%llu "
           "(captured %s .. %s)%s%s", (unsigned long long)b.seq, zT0, (unsigned long long)b.size,
           (unsigned long long)b.seq, (unsigned long long)p->seq, zT0, zT1,
           rc ? "; then REFUSED: " : (gap ? "; then a GAP" : ""), rc ? tde_last_error() : "");
  }
  return TDE_OK;
}

int tdeRestoreList(const TdeRestoreOpts *pOpt, void (*xLine)(void*, const char*), void *pArg){
  Rs rs;
  TdeRestoreOpts o = *pOpt;
  int rc;
  o.eTarget = TDE_RESTORE_LATEST;
  rc = rsOpen(&rs, &o);
  if( rc==TDE_OK && rs.nHist==0 ){
    char zDbid[33];
    tdeHex(pOpt->aDbid, 16, zDbid);
    rc = tdeErr(TDE_NOTFOUND, "restore: the archive holds nothing of database %s (under %s)", zDbid, rs.zRoot);
  }
  for(int i=0; rc==TDE_OK && i<rs.nHist; i++){
    if( o.bHistory && memcmp(rs.aHist[i].aHist, o.aHistory, 16)!=0 ) continue;
    rc = rsListHist(&rs, &rs.aHist[i], xLine, pArg);
  }
  rsClose(&rs);
  return rc;
}
