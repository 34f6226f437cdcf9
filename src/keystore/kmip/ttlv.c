/*
** KMIP TTLV encoder and decoder (see ttlv.h for the encoding).
**
** The decoder trusts nothing in its input: every length is checked against
** the bytes left before it is used, fixed-size types must carry their
** fixed length, padding must be zero, structures must be filled exactly by
** their children, nesting stops at TTLV_MAX_DEPTH and item count at
** TTLV_MAX_ITEMS.  It must never read outside [a, a+n), never recurse
** without bound, and never allocate more than the item limit allows.
**
** The encoder's buffer may hold a data key (Encrypt requests): it is wiped
** with explicit_bzero whenever it grows or is freed.
*/
#include "keystore/kmip/ttlv.h"
#include "sqlite-tde.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers -------------------------------------------------------------- */

static void ttlvPut32(uint8_t *p, uint32_t v){
  p[0] = (uint8_t)(v>>24); p[1] = (uint8_t)(v>>16); p[2] = (uint8_t)(v>>8); p[3] = (uint8_t)v;
}
static uint32_t ttlvGet32(const uint8_t *p){
  return ((uint32_t)p[0]<<24) | ((uint32_t)p[1]<<16) | ((uint32_t)p[2]<<8) | (uint32_t)p[3];
}
static uint64_t ttlvGet64(const uint8_t *p){
  return ((uint64_t)ttlvGet32(p)<<32) | ttlvGet32(p+4);
}
static size_t ttlvPadded(size_t n){ return (n + 7) & ~(size_t)7; }

/* ---- encoder -------------------------------------------------------------- */

void ttlvEncInit(TtlvEnc *p){
  memset(p, 0, sizeof(*p));
}

void ttlvEncFree(TtlvEnc *p){
  if( p->a ){
    explicit_bzero(p->a, p->nAlloc);
    free(p->a);
  }
  memset(p, 0, sizeof(*p));
}

/* Room for nMore bytes; a move copies then wipes the old buffer. */
static int ttlvReserve(TtlvEnc *p, size_t nMore){
  size_t nNeed, nNew;
  uint8_t *aNew;
  if( p->rc ) return p->rc;
  if( nMore>TTLV_MAX_MESSAGE || p->n + nMore>TTLV_MAX_MESSAGE ){
    p->rc = TDE_RANGE;
    return p->rc;
  }
  nNeed = p->n + nMore;
  if( nNeed<=p->nAlloc ) return TDE_OK;
  nNew = p->nAlloc ? p->nAlloc : 256;
  while( nNew<nNeed ) nNew *= 2;
  aNew = malloc(nNew);
  if( aNew==0 ){
    p->rc = TDE_NOMEM;
    return p->rc;
  }
  if( p->a ){
    memcpy(aNew, p->a, p->n);
    explicit_bzero(p->a, p->nAlloc);
    free(p->a);
  }
  p->a = aNew;
  p->nAlloc = nNew;
  return TDE_OK;
}

/* Header plus a value of nVal bytes (padded with zeros). */
static void ttlvEncItem(TtlvEnc *p, uint32_t tag, uint8_t type, const uint8_t *aVal, size_t nVal){
  size_t nPad = ttlvPadded(nVal);
  uint8_t *z;
  if( nVal>0xFFFFFFF0u ){ if( p->rc==0 ) p->rc = TDE_RANGE; return; }
  if( ttlvReserve(p, TTLV_HEADER + nPad) ) return;
  z = p->a + p->n;
  z[0] = (uint8_t)(tag>>16); z[1] = (uint8_t)(tag>>8); z[2] = (uint8_t)tag;
  z[3] = type;
  ttlvPut32(z+4, (uint32_t)nVal);
  if( nVal ) memcpy(z+TTLV_HEADER, aVal, nVal);
  memset(z+TTLV_HEADER+nVal, 0, nPad-nVal);
  p->n += TTLV_HEADER + nPad;
}

void ttlvEncOpen(TtlvEnc *p, uint32_t tag){
  size_t iOfst = p->n;
  if( p->rc ) return;
  if( p->nOpen>=TTLV_MAX_DEPTH ){ p->rc = TDE_RANGE; return; }
  ttlvEncItem(p, tag, TTLV_STRUCTURE, 0, 0);
  if( p->rc ) return;
  p->aOpen[p->nOpen++] = iOfst;
}

void ttlvEncClose(TtlvEnc *p){
  size_t iOfst;
  if( p->rc ) return;
  if( p->nOpen==0 ){ p->rc = TDE_MISUSE; return; }
  iOfst = p->aOpen[--p->nOpen];
  ttlvPut32(p->a + iOfst + 4, (uint32_t)(p->n - iOfst - TTLV_HEADER));
}

void ttlvEncInt(TtlvEnc *p, uint32_t tag, int32_t v){
  uint8_t a[4];
  ttlvPut32(a, (uint32_t)v);
  ttlvEncItem(p, tag, TTLV_INTEGER, a, 4);
}

void ttlvEncLong(TtlvEnc *p, uint32_t tag, int64_t v){
  uint8_t a[8];
  ttlvPut32(a, (uint32_t)((uint64_t)v>>32));
  ttlvPut32(a+4, (uint32_t)(uint64_t)v);
  ttlvEncItem(p, tag, TTLV_LONG, a, 8);
}

void ttlvEncEnum(TtlvEnc *p, uint32_t tag, uint32_t v){
  uint8_t a[4];
  ttlvPut32(a, v);
  ttlvEncItem(p, tag, TTLV_ENUM, a, 4);
}

void ttlvEncBool(TtlvEnc *p, uint32_t tag, int v){
  uint8_t a[8] = {0};
  a[7] = v ? 1 : 0;
  ttlvEncItem(p, tag, TTLV_BOOL, a, 8);
}

void ttlvEncText(TtlvEnc *p, uint32_t tag, const char *z, size_t n){
  ttlvEncItem(p, tag, TTLV_TEXT, (const uint8_t *)z, n);
}

void ttlvEncBytes(TtlvEnc *p, uint32_t tag, const uint8_t *a, size_t n){
  ttlvEncItem(p, tag, TTLV_BYTES, a, n);
}

void ttlvEncDateTime(TtlvEnc *p, uint32_t tag, int64_t unixTime){
  uint8_t a[8];
  ttlvPut32(a, (uint32_t)((uint64_t)unixTime>>32));
  ttlvPut32(a+4, (uint32_t)(uint64_t)unixTime);
  ttlvEncItem(p, tag, TTLV_DATETIME, a, 8);
}

void ttlvEncInterval(TtlvEnc *p, uint32_t tag, uint32_t seconds){
  uint8_t a[4];
  ttlvPut32(a, seconds);
  ttlvEncItem(p, tag, TTLV_INTERVAL, a, 4);
}

void ttlvEncBigInt(TtlvEnc *p, uint32_t tag, const uint8_t *a, size_t n){
  size_t nPad = ttlvPadded(n ? n : 1);
  size_t nExt = nPad - n;
  uint8_t ext = (n && (a[0] & 0x80)) ? 0xFF : 0x00;
  uint8_t *z;
  if( n>TTLV_MAX_MESSAGE ){ if( p->rc==0 ) p->rc = TDE_RANGE; return; }
  if( ttlvReserve(p, TTLV_HEADER + nPad) ) return;
  z = p->a + p->n;
  z[0] = (uint8_t)(tag>>16); z[1] = (uint8_t)(tag>>8); z[2] = (uint8_t)tag;
  z[3] = TTLV_BIGINT;
  ttlvPut32(z+4, (uint32_t)nPad);
  memset(z+TTLV_HEADER, ext, nExt);
  if( n ) memcpy(z+TTLV_HEADER+nExt, a, n);
  p->n += TTLV_HEADER + nPad;
}

int ttlvEncFinish(TtlvEnc *p, const uint8_t **pa, size_t *pn){
  *pa = 0;
  *pn = 0;
  if( p->rc ) return p->rc;
  if( p->nOpen!=0 || p->n==0 ) return TDE_MISUSE;
  *pa = p->a;
  *pn = p->n;
  return TDE_OK;
}

/* ---- decoder -------------------------------------------------------------- */

static int ttlvFail(TtlvDoc *pDoc, int rc, const char *zFmt, ...)
  __attribute__((format(printf, 3, 4)));
static int ttlvFail(TtlvDoc *pDoc, int rc, const char *zFmt, ...){
  va_list ap;
  va_start(ap, zFmt);
  vsnprintf(pDoc->zErr, sizeof(pDoc->zErr), zFmt, ap);
  va_end(ap);
  return rc;
}

/* Value length each fixed-size type must carry (0: variable). */
static uint32_t ttlvFixedLen(uint8_t type){
  switch( type ){
    case TTLV_INTEGER:  case TTLV_ENUM: case TTLV_INTERVAL: return 4;
    case TTLV_LONG:     case TTLV_BOOL: case TTLV_DATETIME: return 8;
    default:            return 0;
  }
}

static int ttlvNewItem(TtlvDoc *pDoc){
  if( pDoc->nItem>=TTLV_MAX_ITEMS ){
    return ttlvFail(pDoc, TDE_RANGE, "more than %d items", TTLV_MAX_ITEMS);
  }
  if( pDoc->nItem>=pDoc->nAlloc ){
    int nNew = pDoc->nAlloc ? pDoc->nAlloc*2 : 64;
    TtlvItem *aNew;
    if( nNew>TTLV_MAX_ITEMS ) nNew = TTLV_MAX_ITEMS;
    aNew = realloc(pDoc->aItem, (size_t)nNew * sizeof(TtlvItem));
    if( aNew==0 ) return ttlvFail(pDoc, TDE_NOMEM, "out of memory");
    pDoc->aItem = aNew;
    pDoc->nAlloc = nNew;
  }
  return TDE_OK;
}

/*
** Decode the items that fill a[0..n) exactly as children of iParent at the
** given depth (iParent -1 and depth 0: exactly one top-level item).
** Recursion depth is bounded by TTLV_MAX_DEPTH.
*/
static int ttlvDecodeRange(TtlvDoc *pDoc, const uint8_t *a, size_t n, size_t iBase,
                           int iParent, int depth){
  size_t i = 0;
  int iPrev = -1;
  int rc;
  while( i<n ){
    TtlvItem *pItem;
    uint32_t tag, len, fixed;
    uint8_t type;
    size_t nPad, k;
    int iThis;

    if( n-i<TTLV_HEADER ){
      return ttlvFail(pDoc, TDE_FORMAT, "truncated item header at offset %zu", iBase+i);
    }
    tag = ((uint32_t)a[i]<<16) | ((uint32_t)a[i+1]<<8) | a[i+2];
    type = a[i+3];
    len = ttlvGet32(a+i+4);
    if( (tag>>16)!=0x42 && (tag>>16)!=0x54 ){
      return ttlvFail(pDoc, TDE_FORMAT, "invalid tag 0x%06x at offset %zu", (unsigned)tag, iBase+i);
    }
    if( type<TTLV_STRUCTURE || type>TTLV_INTERVAL ){
      return ttlvFail(pDoc, TDE_FORMAT, "unknown item type 0x%02x (tag 0x%06x) at offset %zu",
                      (unsigned)type, (unsigned)tag, iBase+i);
    }
    i += TTLV_HEADER;
    nPad = ttlvPadded((size_t)len);
    if( (size_t)len>n-i || nPad>n-i ){
      return ttlvFail(pDoc, TDE_FORMAT, "length %u of tag 0x%06x runs past the end "
                      "(%zu bytes left) at offset %zu",
                      (unsigned)len, (unsigned)tag, n-i, iBase+i-TTLV_HEADER);
    }
    fixed = ttlvFixedLen(type);
    if( fixed && len!=fixed ){
      return ttlvFail(pDoc, TDE_FORMAT, "tag 0x%06x: type 0x%02x needs length %u, not %u",
                      (unsigned)tag, (unsigned)type, (unsigned)fixed, (unsigned)len);
    }
    if( (type==TTLV_STRUCTURE || type==TTLV_BIGINT) && (len%8)!=0 ){
      return ttlvFail(pDoc, TDE_FORMAT, "tag 0x%06x: type 0x%02x length %u is not a "
                      "multiple of 8", (unsigned)tag, (unsigned)type, (unsigned)len);
    }
    if( type==TTLV_BIGINT && len==0 ){
      return ttlvFail(pDoc, TDE_FORMAT, "tag 0x%06x: empty big integer", (unsigned)tag);
    }
    for(k=len; k<nPad; k++){
      if( a[i+k]!=0 ){
        return ttlvFail(pDoc, TDE_FORMAT, "tag 0x%06x: non-zero padding", (unsigned)tag);
      }
    }
    if( type==TTLV_BOOL ){
      uint64_t v = ttlvGet64(a+i);
      if( v>1 ){
        return ttlvFail(pDoc, TDE_FORMAT, "tag 0x%06x: boolean is neither 0 nor 1", (unsigned)tag);
      }
    }

    /* The encoder's limit too: at most TTLV_MAX_DEPTH structures open. */
    if( type==TTLV_STRUCTURE && depth>=TTLV_MAX_DEPTH ){
      return ttlvFail(pDoc, TDE_FORMAT, "structures nested deeper than %d", TTLV_MAX_DEPTH);
    }
    rc = ttlvNewItem(pDoc);
    if( rc ) return rc;
    iThis = pDoc->nItem++;
    pItem = &pDoc->aItem[iThis];
    pItem->tag = tag;
    pItem->type = type;
    pItem->depth = (uint8_t)depth;
    pItem->len = len;
    pItem->pVal = a+i;
    pItem->iParent = iParent;
    pItem->iFirst = -1;
    pItem->iNext = -1;
    if( iPrev>=0 ){
      pDoc->aItem[iPrev].iNext = iThis;
    }else if( iParent>=0 ){
      pDoc->aItem[iParent].iFirst = iThis;
    }
    iPrev = iThis;

    if( type==TTLV_STRUCTURE && len>0 ){
      rc = ttlvDecodeRange(pDoc, a+i, len, iBase+i, iThis, depth+1);
      if( rc ) return rc;
    }
    i += nPad;
    if( depth==0 && i<n ){
      return ttlvFail(pDoc, TDE_FORMAT, "%zu bytes after the message", n-i);
    }
  }
  return TDE_OK;
}

int ttlvDecode(const uint8_t *a, size_t n, TtlvDoc *pDoc){
  memset(pDoc, 0, sizeof(*pDoc));
  if( a==0 || n==0 ) return ttlvFail(pDoc, TDE_FORMAT, "empty message");
  if( n>TTLV_MAX_MESSAGE ){
    return ttlvFail(pDoc, TDE_RANGE, "message of %zu bytes exceeds the %d-byte limit",
                    n, TTLV_MAX_MESSAGE);
  }
  return ttlvDecodeRange(pDoc, a, n, 0, -1, 0);
}

void ttlvDocFree(TtlvDoc *pDoc){
  free(pDoc->aItem);
  memset(pDoc, 0, sizeof(*pDoc));
}

int ttlvMessageLength(const uint8_t *aHdr, size_t *pnTotal){
  uint32_t len = ttlvGet32(aHdr+4);
  *pnTotal = 0;
  if( aHdr[0]!=0x42 || aHdr[3]!=TTLV_STRUCTURE || (len%8)!=0 ) return TDE_FORMAT;
  if( (size_t)len>TTLV_MAX_MESSAGE - TTLV_HEADER ) return TDE_RANGE;
  *pnTotal = TTLV_HEADER + (size_t)len;
  return TDE_OK;
}

int ttlvChild(const TtlvDoc *pDoc, int iParent, uint32_t tag){
  int i;
  if( iParent<0 || iParent>=pDoc->nItem || pDoc->aItem[iParent].type!=TTLV_STRUCTURE ) return -1;
  for(i=pDoc->aItem[iParent].iFirst; i>=0; i=pDoc->aItem[i].iNext){
    if( pDoc->aItem[i].tag==tag ) return i;
  }
  return -1;
}

int ttlvNextSibling(const TtlvDoc *pDoc, int i, uint32_t tag){
  if( i<0 || i>=pDoc->nItem ) return -1;
  for(i=pDoc->aItem[i].iNext; i>=0; i=pDoc->aItem[i].iNext){
    if( pDoc->aItem[i].tag==tag ) return i;
  }
  return -1;
}

int ttlvCount(const TtlvDoc *pDoc, int iParent, uint32_t tag){
  int n = 0, i;
  for(i=ttlvChild(pDoc, iParent, tag); i>=0; i=ttlvNextSibling(pDoc, i, tag)) n++;
  return n;
}

/* Item i if present and of the type wanted, else NULL with zErr set. */
static const TtlvItem *ttlvTyped(TtlvDoc *pDoc, int i, uint8_t type){
  if( i<0 || i>=pDoc->nItem ){
    ttlvFail(pDoc, TDE_FORMAT, "missing field");
    return 0;
  }
  if( pDoc->aItem[i].type!=type ){
    ttlvFail(pDoc, TDE_FORMAT, "tag 0x%06x has type 0x%02x, expected 0x%02x",
             (unsigned)pDoc->aItem[i].tag, (unsigned)pDoc->aItem[i].type, (unsigned)type);
    return 0;
  }
  return &pDoc->aItem[i];
}

int ttlvGetInt(TtlvDoc *pDoc, int i, int32_t *pv){
  const TtlvItem *p = ttlvTyped(pDoc, i, TTLV_INTEGER);
  if( p==0 ) return TDE_FORMAT;
  *pv = (int32_t)ttlvGet32(p->pVal);
  return TDE_OK;
}

int ttlvGetLong(TtlvDoc *pDoc, int i, int64_t *pv){
  const TtlvItem *p = ttlvTyped(pDoc, i, TTLV_LONG);
  if( p==0 ) return TDE_FORMAT;
  *pv = (int64_t)ttlvGet64(p->pVal);
  return TDE_OK;
}

int ttlvGetEnum(TtlvDoc *pDoc, int i, uint32_t *pv){
  const TtlvItem *p = ttlvTyped(pDoc, i, TTLV_ENUM);
  if( p==0 ) return TDE_FORMAT;
  *pv = ttlvGet32(p->pVal);
  return TDE_OK;
}

int ttlvGetBool(TtlvDoc *pDoc, int i, int *pv){
  const TtlvItem *p = ttlvTyped(pDoc, i, TTLV_BOOL);
  if( p==0 ) return TDE_FORMAT;
  *pv = p->pVal[7]!=0;
  return TDE_OK;
}

int ttlvGetDateTime(TtlvDoc *pDoc, int i, int64_t *pv){
  const TtlvItem *p = ttlvTyped(pDoc, i, TTLV_DATETIME);
  if( p==0 ) return TDE_FORMAT;
  *pv = (int64_t)ttlvGet64(p->pVal);
  return TDE_OK;
}

int ttlvGetInterval(TtlvDoc *pDoc, int i, uint32_t *pv){
  const TtlvItem *p = ttlvTyped(pDoc, i, TTLV_INTERVAL);
  if( p==0 ) return TDE_FORMAT;
  *pv = ttlvGet32(p->pVal);
  return TDE_OK;
}

int ttlvGetText(TtlvDoc *pDoc, int i, const char **pz, size_t *pn){
  const TtlvItem *p = ttlvTyped(pDoc, i, TTLV_TEXT);
  if( p==0 ) return TDE_FORMAT;
  *pz = (const char *)p->pVal;
  *pn = p->len;
  return TDE_OK;
}

int ttlvGetBytes(TtlvDoc *pDoc, int i, const uint8_t **pa, size_t *pn){
  const TtlvItem *p = ttlvTyped(pDoc, i, TTLV_BYTES);
  if( p==0 ) return TDE_FORMAT;
  *pa = p->pVal;
  *pn = p->len;
  return TDE_OK;
}

int ttlvGetBigInt(TtlvDoc *pDoc, int i, const uint8_t **pa, size_t *pn){
  const TtlvItem *p = ttlvTyped(pDoc, i, TTLV_BIGINT);
  if( p==0 ) return TDE_FORMAT;
  *pa = p->pVal;
  *pn = p->len;
  return TDE_OK;
}
