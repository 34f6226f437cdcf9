/*
** The two bits of S3's XML this client reads: a ListObjectsV2 page
** (<ListBucketResult>) and an error body (<Error><Code>, <Message>).  A
** strict, minimal reader rather than an XML library: the documents are
** flat, machine-made and small (a page is at most 1000 entries), and
** everything this client does not expect (comments, CDATA, DOCTYPE,
** processing instructions other than the prolog, unbalanced or unclosed
** tags, unknown entities, nesting deeper than 8) is refused, not guessed
** at.  Unknown elements are skipped whole, so a server may add fields.
*/
#include "archive/s3.h"
#include "archive/s3_int.h"

#include <stdlib.h>
#include <string.h>

#define XML_DEPTH_MAX 8

typedef struct XmlCur {
  const char *z;
  size_t n, i;
} XmlCur;

static void xmlSkipSpace(XmlCur *c){
  while( c->i<c->n && (c->z[c->i]==' ' || c->z[c->i]=='\t' || c->z[c->i]=='\r' || c->z[c->i]=='\n') ){
    c->i++;
  }
}

static int xmlNameChar(char ch){
  return (ch>='A' && ch<='Z') || (ch>='a' && ch<='z') || (ch>='0' && ch<='9')
      || ch=='_' || ch=='-' || ch=='.' || ch==':';
}

/* At '<': reads a start tag (attributes skipped, quotes respected) or an
** end tag.  *pEnd: it was "</name>"; *pEmpty: "<name/>".  -1 if malformed. */
static int xmlTag(XmlCur *c, char *zName, size_t nName, int *pEnd, int *pEmpty){
  size_t k = 0;
  char q = 0;
  *pEnd = *pEmpty = 0;
  if( c->i>=c->n || c->z[c->i]!='<' ) return -1;
  c->i++;
  if( c->i<c->n && c->z[c->i]=='/' ){ *pEnd = 1; c->i++; }
  while( c->i<c->n && xmlNameChar(c->z[c->i]) ){
    if( k+1>=nName ) return -1;
    zName[k++] = c->z[c->i++];
  }
  zName[k] = 0;
  if( k==0 ) return -1;
  for(; c->i<c->n; c->i++){
    char ch = c->z[c->i];
    if( q ){ if( ch==q ) q = 0; continue; }
    if( *pEnd && ch!='>' && ch!=' ' && ch!='\t' && ch!='\r' && ch!='\n' ) return -1;
    if( ch=='"' || ch=='\'' ){ q = ch; continue; }
    if( ch=='<' ) return -1;
    if( ch=='>' ){
      *pEmpty = !*pEnd && c->z[c->i-1]=='/';
      c->i++;
      return 0;
    }
  }
  return -1;
}

/* Decode the entities of n bytes of text into zOut (NUL-terminated, at
** most nOut-1 bytes).  Only the five predefined entities and ASCII
** character references; -1 otherwise or when it does not fit. */
int tdeS3XmlDecode(const char *z, size_t n, char *zOut, size_t nOut){
  static const struct { const char *zEnt; char ch; } aEnt[] = {
    { "&amp;", '&' }, { "&lt;", '<' }, { "&gt;", '>' }, { "&quot;", '"' }, { "&apos;", '\'' },
  };
  size_t i = 0, k = 0;
  while( i<n ){
    char ch = z[i];
    if( ch=='<' ) return -1;
    if( ch=='&' ){
      size_t e;
      for(e=0; e<TDE_ARRAY_SIZE(aEnt); e++){
        size_t m = strlen(aEnt[e].zEnt);
        if( n-i>=m && memcmp(z+i, aEnt[e].zEnt, m)==0 ){ ch = aEnt[e].ch; i += m; break; }
      }
      if( e==TDE_ARRAY_SIZE(aEnt) ){
        unsigned long v = 0;
        size_t j = i+1;
        int bHex = 0, nDig = 0;
        if( j>=n || z[j]!='#' ) return -1;
        j++;
        if( j<n && z[j]=='x' ){ bHex = 1; j++; }
        for(; j<n && z[j]!=';' && nDig<6; j++, nDig++){
          char d = z[j];
          if( d>='0' && d<='9' ) v = v*(bHex ? 16u : 10u) + (unsigned long)(d-'0');
          else if( bHex && d>='a' && d<='f' ) v = v*16u + (unsigned long)(d-'a'+10);
          else if( bHex && d>='A' && d<='F' ) v = v*16u + (unsigned long)(d-'A'+10);
          else return -1;
        }
        if( j>=n || nDig==0 || v==0 || v>126 ) return -1;
        ch = (char)v;
        i = j+1;
      }
    }else{
      i++;
    }
    if( k+1>=nOut ) return -1;
    zOut[k++] = ch;
  }
  zOut[k] = 0;
  return 0;
}

/* After a start tag of zName: the text up to the next '<'.  Sets *pbLeaf
** when "</zName>" follows (consumed); otherwise the cursor is at the child
** element and the text must be blank. */
static int xmlContent(XmlCur *c, const char *zName, const char **pz, size_t *pn, int *pbLeaf){
  size_t i0 = c->i, m = strlen(zName);
  *pbLeaf = 0;
  while( c->i<c->n && c->z[c->i]!='<' ) c->i++;
  if( c->i+1>=c->n ) return -1;
  *pz = c->z+i0;
  *pn = c->i-i0;
  if( c->z[c->i+1]=='/' ){
    if( c->n-c->i<m+3 || memcmp(c->z+c->i+2, zName, m)!=0 || c->z[c->i+2+m]!='>' ) return -1;
    c->i += m+3;
    *pbLeaf = 1;
    return 0;
  }
  for(size_t k=0; k<*pn; k++){
    char ch = (*pz)[k];
    if( ch!=' ' && ch!='\t' && ch!='\r' && ch!='\n' ) return -1;
  }
  return 0;
}

/* Skip the children of an element whose start tag was read, through its
** end tag; depth counts the enclosing elements. */
static int xmlSkipBody(XmlCur *c, const char *zName, int depth){
  char zTag[64];
  int bEnd, bEmpty;
  for(;;){
    const char *z;
    size_t n;
    int bLeaf;
    if( depth>XML_DEPTH_MAX ) return -1;
    xmlSkipSpace(c);
    if( xmlTag(c, zTag, sizeof(zTag), &bEnd, &bEmpty) ) return -1;
    if( bEnd ) return strcmp(zTag, zName)==0 ? 0 : -1;
    if( bEmpty ) continue;
    if( xmlContent(c, zTag, &z, &n, &bLeaf) ) return -1;
    if( !bLeaf && xmlSkipBody(c, zTag, depth+1) ) return -1;
  }
}

/* Reads the children of <Contents> into *pObj (Key and Size required). */
static int xmlContents(XmlCur *c, TdeS3Object *pObj){
  char zTag[64];
  int bEnd, bEmpty, bKey = 0, bSize = 0;
  memset(pObj, 0, sizeof(*pObj));
  for(;;){
    const char *z;
    size_t n;
    int bLeaf;
    xmlSkipSpace(c);
    if( xmlTag(c, zTag, sizeof(zTag), &bEnd, &bEmpty) ) return -1;
    if( bEnd ) return (strcmp(zTag, "Contents")==0 && bKey && bSize) ? 0 : -1;
    if( bEmpty ){
      if( strcmp(zTag, "Key")==0 || strcmp(zTag, "Size")==0 ) return -1;
      continue;
    }
    if( xmlContent(c, zTag, &z, &n, &bLeaf) ) return -1;
    if( !bLeaf ){
      if( xmlSkipBody(c, zTag, 2) ) return -1;
    }else if( strcmp(zTag, "Key")==0 ){
      if( bKey || n==0 || tdeS3XmlDecode(z, n, pObj->zKey, sizeof(pObj->zKey)) ) return -1;
      bKey = 1;
    }else if( strcmp(zTag, "Size")==0 ){
      if( bSize || n==0 || n>19 ) return -1;
      for(size_t k=0; k<n; k++){
        if( z[k]<'0' || z[k]>'9' ) return -1;
        pObj->nSize = pObj->nSize*10u + (uint64_t)(z[k]-'0');
      }
      bSize = 1;
    }else if( strcmp(zTag, "ETag")==0 ){
      char zE[sizeof(pObj->zEtag)+2];
      size_t m;
      if( tdeS3XmlDecode(z, n, zE, sizeof(zE)) ) return -1;
      m = strlen(zE);
      if( m>=2 && zE[0]=='"' && zE[m-1]=='"' ){ zE[m-1] = 0; memmove(zE, zE+1, m-1); }
      if( strlen(zE)>=sizeof(pObj->zEtag) ) return -1;
      strcpy(pObj->zEtag, zE);
    }
  }
}

/* Skips the prolog and reads the root's start tag, which must be zRoot. */
static int xmlRoot(XmlCur *c, const char *zRoot){
  char zTag[64];
  int bEnd, bEmpty;
  xmlSkipSpace(c);
  if( c->n-c->i>=5 && memcmp(c->z+c->i, "<?xml", 5)==0 ){
    const char *zEnd = 0;
    for(size_t k=c->i; k+1<c->n; k++){
      if( c->z[k]=='?' && c->z[k+1]=='>' ){ zEnd = c->z+k+2; break; }
    }
    if( !zEnd ) return -1;
    c->i = (size_t)(zEnd-c->z);
    xmlSkipSpace(c);
  }
  if( xmlTag(c, zTag, sizeof(zTag), &bEnd, &bEmpty) || bEnd || bEmpty ) return -1;
  return strcmp(zTag, zRoot)==0 ? 0 : -1;
}

/* Only blanks may follow the root's end tag. */
static int xmlTail(XmlCur *c){
  xmlSkipSpace(c);
  return c->i==c->n ? 0 : -1;
}

/* One leaf child of a ListBucketResult. */
static int listLeaf(const char *zTag, const char *z, size_t n, const char *zPrefix,
                    char *zToken, size_t nToken, int *pbTrunc){
  char zVal[1100];
  if( strcmp(zTag, "IsTruncated")==0 ){
    if( *pbTrunc>=0 ) return -1;
    if( n==4 && memcmp(z, "true", 4)==0 ) *pbTrunc = 1;
    else if( n==5 && memcmp(z, "false", 5)==0 ) *pbTrunc = 0;
    else return -1;
  }else if( strcmp(zTag, "NextContinuationToken")==0 ){
    if( zToken[0] || n==0 || tdeS3XmlDecode(z, n, zToken, nToken) ) return -1;
  }else if( strcmp(zTag, "Prefix")==0 ){
    if( tdeS3XmlDecode(z, n, zVal, sizeof(zVal)) || strcmp(zVal, zPrefix)!=0 ) return -1;
  }
  return 0;
}

int tdeS3ParseList(const char *zXml, size_t nXml, const char *zPrefix,
                   int (*xEach)(void *pArg, const TdeS3Object *pObj), void *pArg,
                   char *zToken, size_t nToken, int *pStop){
  XmlCur c = { zXml, nXml, 0 };
  char zTag[64];
  int bEnd, bEmpty, bTrunc = -1;
  size_t nPrefix = strlen(zPrefix);
  TdeS3Object *pObj = malloc(sizeof(*pObj));
  int rc = TDE_OK;

  *pStop = 0;
  zToken[0] = 0;
  if( !pObj ) return tdeErr(TDE_NOMEM, "out of memory reading an S3 listing");
  if( xmlRoot(&c, "ListBucketResult") ) goto malformed;
  for(;;){
    const char *z;
    size_t n;
    int bLeaf;
    xmlSkipSpace(&c);
    if( xmlTag(&c, zTag, sizeof(zTag), &bEnd, &bEmpty) ) goto malformed;
    if( bEnd ){
      if( strcmp(zTag, "ListBucketResult")!=0 || xmlTail(&c) ) goto malformed;
      break;
    }
    if( bEmpty ){
      if( strcmp(zTag, "Contents")==0 || strcmp(zTag, "IsTruncated")==0 ) goto malformed;
      continue;
    }
    if( strcmp(zTag, "Contents")==0 ){
      if( xmlContents(&c, pObj) ) goto malformed;
      if( strncmp(pObj->zKey, zPrefix, nPrefix)!=0 ) goto malformed;
      if( (*pStop = xEach(pArg, pObj))!=0 ) goto out;
      continue;
    }
    if( xmlContent(&c, zTag, &z, &n, &bLeaf) ) goto malformed;
    if( !bLeaf ){
      if( xmlSkipBody(&c, zTag, 1) ) goto malformed;
    }else if( listLeaf(zTag, z, n, zPrefix, zToken, nToken, &bTrunc) ){
      goto malformed;
    }
  }
  if( bTrunc<0 || (bTrunc==1)!=(zToken[0]!=0) ) goto malformed;
  goto out;
malformed:
  rc = tdeErr(TDE_IO, "S3 listing of prefix '%s': the server's answer is not a ListObjectsV2 "
              "result this client reads (malformed at byte %zu of %zu)", zPrefix, c.i, nXml);
out:
  free(pObj);
  return rc;
}

/* Code and Message of an <Error> body, made printable and bounded; empty
** strings when the body is not one. */
void tdeS3ParseError(const char *zXml, size_t nXml, char *zCode, size_t nCode,
                     char *zMsg, size_t nMsg){
  XmlCur c = { zXml, nXml, 0 };
  char zTag[64];
  int bEnd, bEmpty;
  zCode[0] = zMsg[0] = 0;
  if( xmlRoot(&c, "Error") ) return;
  for(;;){
    const char *z;
    size_t n;
    int bLeaf;
    xmlSkipSpace(&c);
    if( xmlTag(&c, zTag, sizeof(zTag), &bEnd, &bEmpty) || bEnd ) break;
    if( bEmpty ) continue;
    if( xmlContent(&c, zTag, &z, &n, &bLeaf) ) break;
    if( !bLeaf ){
      if( xmlSkipBody(&c, zTag, 1) ) break;
      continue;
    }
    if( strcmp(zTag, "Code")==0 && tdeS3XmlDecode(z, n, zCode, nCode) ) zCode[0] = 0;
    if( strcmp(zTag, "Message")==0 && tdeS3XmlDecode(z, n, zMsg, nMsg) ) zMsg[0] = 0;
  }
  for(char *p=zCode; *p; p++) if( *p<' ' || *p>'~' ) *p = '?';
  for(char *p=zMsg; *p; p++) if( *p<' ' || *p>'~' ) *p = '?';
}
