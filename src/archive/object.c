/*
** The archive's object codec (object.h; docs/ARCHIVE.md "Objects"): fixed
** big-endian headers, whole-object checks and object names.  Byte work and
** the checks of src/repl/sign.c only: no I/O, no key but the public ones.
*/
#include "archive/object.h"
#include "cipher/cipher.h"

#include <stdio.h>
#include <string.h>

/* ---- headers ------------------------------------------------------------ */

void tdeArchBaseEncode(const TdeArchBase *p, uint8_t *a){
  memset(a, 0, TDE_ARCH_BASE_HDR);
  memcpy(a, TDE_ARCH_BASE_MAGIC, 8);
  memcpy(a+8, p->aDbid, 16);
  memcpy(a+24, p->aHistory, 16);
  tdePut64(a+40, p->seq);
  tdePut64(a+48, p->size);
  tdePut64(a+56, p->tCapture);
  memcpy(a+64, p->aChain, 32);
  memcpy(a+96, p->aSum, 32);
  memcpy(a+128, p->aSig, TDE_SIG_BYTES);
}

int tdeArchBaseDecode(const uint8_t *a, size_t n, TdeArchBase *p){
  memset(p, 0, sizeof(*p));
  if( n<TDE_ARCH_BASE_HDR || memcmp(a, TDE_ARCH_BASE_MAGIC, 8)!=0 ){
    return tdeErr(TDE_FORMAT, "not an archive base copy (no TDEABAS1 header)");
  }
  memcpy(p->aDbid, a+8, 16);
  memcpy(p->aHistory, a+24, 16);
  p->seq = tdeGet64(a+40);
  p->size = tdeGet64(a+48);
  p->tCapture = tdeGet64(a+56);
  memcpy(p->aChain, a+64, 32);
  memcpy(p->aSum, a+96, 32);
  memcpy(p->aSig, a+128, TDE_SIG_BYTES);
  if( p->size<TDE_HEADER_BYTES ){
    return tdeErr(TDE_FORMAT, "archive base copy of %llu bytes: shorter than the header region",
                  (unsigned long long)p->size);
  }
  return TDE_OK;
}

void tdeArchSegEncode(const TdeArchSeg *p, uint8_t *a){
  memset(a, 0, TDE_ARCH_SEG_HDR);
  memcpy(a, TDE_ARCH_SEG_MAGIC, 8);
  memcpy(a+8, p->aDbid, 16);
  memcpy(a+24, p->aHistory, 16);
  tdePut64(a+40, p->first);
  tdePut64(a+48, p->last);
  memcpy(a+56, p->aChainBefore, 32);
  tdePut64(a+88, p->nRecBytes);
  tdePut64(a+96, p->tClosed);
}

int tdeArchSegDecode(const uint8_t *a, size_t n, TdeArchSeg *p){
  memset(p, 0, sizeof(*p));
  if( n<TDE_ARCH_SEG_HDR || memcmp(a, TDE_ARCH_SEG_MAGIC, 8)!=0 ){
    return tdeErr(TDE_FORMAT, "not an archive segment (no TDEASEG1 header)");
  }
  for(int i=104; i<TDE_ARCH_SEG_HDR; i++){
    if( a[i] ) return tdeErr(TDE_FORMAT, "archive segment header: reserved byte %d is not zero", i);
  }
  memcpy(p->aDbid, a+8, 16);
  memcpy(p->aHistory, a+24, 16);
  p->first = tdeGet64(a+40);
  p->last = tdeGet64(a+48);
  memcpy(p->aChainBefore, a+56, 32);
  p->nRecBytes = tdeGet64(a+88);
  p->tClosed = tdeGet64(a+96);
  if( p->first==0 || p->first>p->last ){
    return tdeErr(TDE_FORMAT, "archive segment header: bad range %llu..%llu",
                  (unsigned long long)p->first, (unsigned long long)p->last);
  }
  if( p->nRecBytes/(TDE_REC_HDR + TDE_REC_SUM) < p->last - p->first + 1 ){
    return tdeErr(TDE_FORMAT, "archive segment header: %llu bytes cannot hold records %llu..%llu",
                  (unsigned long long)p->nRecBytes, (unsigned long long)p->first, (unsigned long long)p->last);
  }
  return TDE_OK;
}

/* ---- signatures and whole objects ----------------------------------------- */

int tdeArchBaseSign(struct evp_pkey_st *k, TdeArchBase *p){
  uint8_t aStmt[TDE_BASE_SIGNED];
  tdeBaseSigned(p->aDbid, p->aHistory, p->seq, p->size, p->aSum, p->aChain, p->tCapture, aStmt);
  return tdeSign(k, aStmt, sizeof(aStmt), p->aSig);
}

int tdeArchBaseVerify(struct evp_pkey_st *const *aKey, int nKey, const TdeArchBase *p,
                      const uint8_t *aDbid, const uint8_t *aHistory){
  uint8_t aStmt[TDE_BASE_SIGNED];
  if( nKey<=0 ) return tdeErr(TDE_AUTH, "archive base copy: no public key to verify it with");
  tdeBaseSigned(p->aDbid, p->aHistory, p->seq, p->size, p->aSum, p->aChain, p->tCapture, aStmt);
  if( tdeVerify(aKey, nKey, aStmt, sizeof(aStmt), p->aSig) ){
    return tdeErr(TDE_AUTH, "archive base copy at sequence %llu: the signature does not verify with the "
                  "pinned primary key", (unsigned long long)p->seq);
  }
  if( aDbid && memcmp(aDbid, p->aDbid, 16)!=0 ) return tdeErr(TDE_AUTH, "archive base copy of another database");
  if( aHistory && memcmp(aHistory, p->aHistory, 16)!=0 ){
    return tdeErr(TDE_AUTH, "archive base copy of another history");
  }
  return TDE_OK;
}

int tdeArchBaseCheck(const uint8_t *a, size_t n, struct evp_pkey_st *const *aKey, int nKey,
                     const uint8_t *aDbid, const uint8_t *aHistory, TdeArchBase *p){
  uint8_t sum[32];
  int rc = tdeArchBaseDecode(a, n, p);
  if( rc ) return rc;
  rc = tdeArchBaseVerify(aKey, nKey, p, aDbid, aHistory);
  if( rc ) return rc;
  if( (uint64_t)(n - TDE_ARCH_BASE_HDR)!=p->size ){
    return tdeErr(TDE_FORMAT, "archive base copy: %zu bytes after the header, the header says %llu",
                  n - TDE_ARCH_BASE_HDR, (unsigned long long)p->size);
  }
  rc = tdeSha256(a + TDE_ARCH_BASE_HDR, n - TDE_ARCH_BASE_HDR, sum);
  if( rc ) return rc;
  if( memcmp(sum, p->aSum, 32)!=0 ) return tdeErr(TDE_AUTH, "archive base copy: the copy is not the one signed");
  return TDE_OK;
}

int tdeArchSegNext(const uint8_t *a, size_t n, size_t *pOff, TdeRec *r, const uint8_t **ppRec, size_t *pnRec){
  TdeArchSeg h;
  size_t iOff = TDE_ARCH_SEG_HDR + *pOff, nRec;
  int rc = tdeArchSegDecode(a, n, &h);
  if( rc ) return rc;
  if( h.nRecBytes > n - TDE_ARCH_SEG_HDR ) return tdeErr(TDE_FORMAT, "archive segment shorter than its records");
  if( *pOff>=h.nRecBytes ) return TDE_NOTFOUND;
  if( h.nRecBytes - *pOff < TDE_REC_HDR + TDE_REC_SUM ) return tdeErr(TDE_FORMAT, "archive segment: torn record");
  rc = tdeRecDecode(a + iOff, r);
  if( rc ) return rc;
  nRec = (size_t)TDE_REC_HDR + r->nPayload + TDE_REC_SUM;
  if( nRec > h.nRecBytes - *pOff ) return tdeErr(TDE_FORMAT, "archive segment: torn record");
  *ppRec = a + iOff;
  *pnRec = nRec;
  *pOff += nRec;
  return TDE_OK;
}

/* The records of a segment: whole, TXN or GAP, in sequence; the chain. */
static int segWalk(const uint8_t *a, size_t n, const TdeArchSeg *h, uint8_t *aChain){
  size_t iOff = 0;
  uint64_t want = h->first;
  for(;;){
    TdeRec r;
    const uint8_t *aRec;
    size_t nRec;
    int rc = tdeArchSegNext(a, n, &iOff, &r, &aRec, &nRec);
    if( rc==TDE_NOTFOUND ) break;
    if( rc ) return rc;
    rc = tdeRecCheck(aRec, nRec, &r);
    if( rc ) return tdeErr(rc, "archive segment %llu..%llu: record %llu damaged", (unsigned long long)h->first,
                           (unsigned long long)h->last, (unsigned long long)want);
    if( r.kind==TDE_REC_MARK ) return tdeErr(TDE_FORMAT, "archive segment holds a MARK record");
    if( r.seq!=want ){
      return tdeErr(TDE_AUTH, "archive segment %llu..%llu: record %llu where %llu belongs",
                    (unsigned long long)h->first, (unsigned long long)h->last, (unsigned long long)r.seq,
                    (unsigned long long)want);
    }
    tdeChainNext(aChain, aRec + nRec - TDE_REC_SUM, aChain);
    want++;
  }
  if( want!=h->last+1 ){
    return tdeErr(TDE_FORMAT, "archive segment %llu..%llu ends at record %llu", (unsigned long long)h->first,
                  (unsigned long long)h->last, (unsigned long long)(want-1));
  }
  return TDE_OK;
}

int tdeArchSegCheck(const uint8_t *a, size_t n, struct evp_pkey_st *const *aKey, int nKey,
                    const uint8_t *aDbid, const uint8_t *aHistory, const uint8_t *aChainPrev,
                    TdeArchSeg *p, uint8_t *aChainOut){
  uint8_t aChain[32], aHeadChain[32];
  uint64_t headSeq = 0;
  int rc = tdeArchSegDecode(a, n, p);
  if( rc ) return rc;
  if( nKey<=0 ) return tdeErr(TDE_AUTH, "archive segment: no public key to verify it with");
  if( (aDbid && memcmp(aDbid, p->aDbid, 16)!=0) || (aHistory && memcmp(aHistory, p->aHistory, 16)!=0) ){
    return tdeErr(TDE_AUTH, "archive segment %llu..%llu of another database or history",
                  (unsigned long long)p->first, (unsigned long long)p->last);
  }
  if( n < TDE_ARCH_SEG_HDR + TDE_HEAD_BYTES || n - TDE_ARCH_SEG_HDR - TDE_HEAD_BYTES != p->nRecBytes ){
    return tdeErr(TDE_FORMAT, "archive segment %llu..%llu: %zu bytes, not header + %llu + head",
                  (unsigned long long)p->first, (unsigned long long)p->last, n, (unsigned long long)p->nRecBytes);
  }
  if( aChainPrev && memcmp(aChainPrev, p->aChainBefore, 32)!=0 ){
    return tdeErr(TDE_AUTH, "archive segment %llu..%llu does not continue the chain before it",
                  (unsigned long long)p->first, (unsigned long long)p->last);
  }
  memcpy(aChain, p->aChainBefore, 32);
  rc = segWalk(a, n, p, aChain);
  if( rc ) return rc;
  rc = tdeHeadCheck(aKey, nKey, a + TDE_ARCH_SEG_HDR + p->nRecBytes, TDE_HEAD_BYTES, p->aDbid, p->aHistory,
                    &headSeq, aHeadChain);
  if( rc ) return rc;
  if( headSeq!=p->last || memcmp(aHeadChain, aChain, 32)!=0 ){
    return tdeErr(TDE_AUTH, "archive segment %llu..%llu: the signed head (sequence %llu) does not carry the "
                  "chain of its records", (unsigned long long)p->first, (unsigned long long)p->last,
                  (unsigned long long)headSeq);
  }
  if( aChainOut ) memcpy(aChainOut, aChain, 32);
  return TDE_OK;
}

/* ---- names ---------------------------------------------------------------- */

/* The prefix without leading and trailing '/': *pn bytes at the result. */
static const char *prefixTrim(const char *zPrefix, size_t *pn){
  size_t n;
  if( !zPrefix ) zPrefix = "";
  while( *zPrefix=='/' ) zPrefix++;
  n = strlen(zPrefix);
  while( n>0 && zPrefix[n-1]=='/' ) n--;
  *pn = n;
  return zPrefix;
}

int tdeArchPrefixCheck(const char *zPrefix){
  size_t n, iSeg = 0;
  const char *z = prefixTrim(zPrefix, &n);
  if( n==0 ) return TDE_OK;
  if( n>512 ) return tdeErr(TDE_CONFIG, "archive prefix longer than 512 bytes");
  for(size_t i=0; i<=n; i++){
    if( i==n || z[i]=='/' ){
      size_t nSeg = i - iSeg;
      if( nSeg==0 ) return tdeErr(TDE_CONFIG, "archive prefix '%s': empty segment", zPrefix);
      if( (nSeg==1 && z[iSeg]=='.') || (nSeg==2 && z[iSeg]=='.' && z[iSeg+1]=='.') ){
        return tdeErr(TDE_CONFIG, "archive prefix '%s': '.' or '..' segment", zPrefix);
      }
      iSeg = i+1;
      continue;
    }
    char c = z[i];
    if( !((c>='a' && c<='z') || (c>='A' && c<='Z') || (c>='0' && c<='9') || c=='.' || c=='_' || c=='-') ){
      return tdeErr(TDE_CONFIG, "archive prefix '%s': only [A-Za-z0-9._-] and '/'", zPrefix);
    }
  }
  return TDE_OK;
}

static int nameFmt(char *z, size_t n, const char *zPrefix, const uint8_t *aDbid, const uint8_t *aHistory,
                   const char *zTail){
  char zDb[33], zHist[33];
  size_t nPre;
  const char *zPre = prefixTrim(zPrefix, &nPre);
  int k;
  tdeHex(aDbid, 16, zDb);
  if( aHistory ) tdeHex(aHistory, 16, zHist);
  k = snprintf(z, n, "%.*s%s%s/%s%s%s", (int)nPre, zPre, nPre ? "/" : "", zDb,
               aHistory ? zHist : "", aHistory ? "/" : "", zTail);
  if( k<0 || (size_t)k>=n || k>=TDE_ARCH_NAME_MAX ){
    if( n ) z[0] = 0;
    return tdeErr(TDE_RANGE, "archive object name too long");
  }
  return TDE_OK;
}

int tdeArchHistDir(const char *zPrefix, const uint8_t *aDbid, const uint8_t *aHistory, char *z, size_t n){
  return nameFmt(z, n, zPrefix, aDbid, aHistory, "");
}

int tdeArchDbDir(const char *zPrefix, const uint8_t *aDbid, char *z, size_t n){
  return nameFmt(z, n, zPrefix, aDbid, 0, "");
}

int tdeArchBaseName(const char *zPrefix, const uint8_t *aDbid, const uint8_t *aHistory, uint64_t seq,
                    char *z, size_t n){
  char zTail[64];
  snprintf(zTail, sizeof(zTail), "base/%016llx.base", (unsigned long long)seq);
  return nameFmt(z, n, zPrefix, aDbid, aHistory, zTail);
}

int tdeArchSegName(const char *zPrefix, const uint8_t *aDbid, const uint8_t *aHistory, uint64_t first,
                   uint64_t last, char *z, size_t n){
  char zTail[64];
  snprintf(zTail, sizeof(zTail), "seg/%016llx-%016llx.seg", (unsigned long long)first, (unsigned long long)last);
  return nameFmt(z, n, zPrefix, aDbid, aHistory, zTail);
}

/* Exactly nHex lower-case hex digits at z into a (nHex/2 bytes). */
static int hexStrict(const char *z, size_t nHex, uint8_t *a){
  for(size_t i=0; i<nHex; i++){
    char c = z[i];
    int v = (c>='0' && c<='9') ? c-'0' : (c>='a' && c<='f') ? c-'a'+10 : -1;
    if( v<0 ) return 0;
    if( i%2==0 ) a[i/2] = (uint8_t)(v<<4);
    else a[i/2] |= (uint8_t)v;
  }
  return 1;
}

static int seqStrict(const char *z, uint64_t *p){
  uint8_t a[8];
  if( !hexStrict(z, 16, a) ) return 0;
  *p = tdeGet64(a);
  return 1;
}

int tdeArchNameParse(const char *zPrefix, const char *zKey, TdeArchName *p){
  size_t nPre, n;
  const char *zPre = prefixTrim(zPrefix, &nPre);
  const char *z = zKey;
  memset(p, 0, sizeof(*p));
  if( nPre ){
    if( strncmp(z, zPre, nPre)!=0 || z[nPre]!='/' ) return TDE_NOTFOUND;
    z += nPre + 1;
  }
  /* DBID/HISTID/ then base/S.base (5+16+5) or seg/F-L.seg (4+16+1+16+4) */
  n = strlen(z);
  if( n<66 || z[32]!='/' || z[65]!='/' ) return TDE_NOTFOUND;
  if( !hexStrict(z, 32, p->aDbid) || !hexStrict(z+33, 32, p->aHistory) ) return TDE_NOTFOUND;
  z += 66;
  n -= 66;
  if( n==26 && memcmp(z, "base/", 5)==0 && memcmp(z+21, ".base", 5)==0 && seqStrict(z+5, &p->first) ){
    p->eKind = TDE_ARCH_KIND_BASE;
    p->last = p->first;
    return TDE_OK;
  }
  if( n==41 && memcmp(z, "seg/", 4)==0 && z[20]=='-' && memcmp(z+37, ".seg", 4)==0
   && seqStrict(z+4, &p->first) && seqStrict(z+21, &p->last) && p->first>=1 && p->first<=p->last ){
    p->eKind = TDE_ARCH_KIND_SEG;
    return TDE_OK;
  }
  memset(p, 0, sizeof(*p));
  return TDE_NOTFOUND;
}
