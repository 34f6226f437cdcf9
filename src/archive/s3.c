/*
** The S3 client (s3.h): one libcurl easy handle per client, reset and set
** up again for each try (so connections are reused), signed with
** CURLOPT_AWS_SIGV4, and the retry loop around it.  A client is used by one
** thread at a time.  The secret key lives in
** this client's memory and in libcurl's copy (CURLOPT_PASSWORD) for the
** length of a request; it is wiped at tdeS3Close and never formatted into
** any message.
*/
#include "archive/s3.h"
#include "archive/s3_int.h"

#include <curl/curl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define S3_ERRBODY_MAX   8192     /* what is kept of an error response's body */
#define S3_LISTPAGE_MAX  (4u<<20) /* a ListObjectsV2 page of 1000 keys is far below */
#define S3_CRED_MAX      4096     /* a credentials file larger than this is refused */

struct TdeS3 {
  char *zEndpoint, *zRegion, *zBucket, *zCaFile;
  char zSigv4[96];
  char *zAccess;
  char *zSecret;
  CURL *hCurl;                  /* reset per request; keeps its connections */
  int nTry;
  unsigned msBackoff;
};

/* One request and what came back of it, reset before each try. */
typedef struct S3Req {
  const char *zMethod;          /* for messages: PUT GET HEAD DELETE LIST */
  const char *zKey;             /* object key, or NULL (bucket-level) */
  const char *zQuery;           /* query string without '?', or NULL */
  const uint8_t *pUp;           /* PUT body */
  size_t nUp, iUp;
  char zSha256Hex[65], zMd5B64[32];
  /* sink for a 2xx body: memory (bounded) or a file descriptor */
  uint8_t *aMem;
  size_t nMem, nMemAlloc, nMax;
  int fd;
  off_t iFdStart;
  uint64_t nGot;
  int bOver, bWriteFail, errnoWrite;
  EVP_MD_CTX *pMd5;             /* MD5 of a 2xx body, against the ETag */
  char aErr[S3_ERRBODY_MAX];
  size_t nErr;
  char zEtag[80];
  int64_t nLength;              /* Content-Length of the answer, -1 if none */
  long status;
} S3Req;

static pthread_once_t s3Once = PTHREAD_ONCE_INIT;
static CURLcode s3InitRc = CURLE_OK;
static void s3GlobalInit(void){ s3InitRc = curl_global_init(CURL_GLOBAL_DEFAULT); }

static char *s3Dup(const char *z){
  return z ? strdup(z) : 0;
}

static void s3FreeSecret(char *z){
  if( z ){ OPENSSL_cleanse(z, strlen(z)); free(z); }
}

/* ---- credentials ------------------------------------------------------- */

/* Reads AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY from a KEY=VALUE file
** of mode 0600 or less; the buffer is wiped. */
static int s3CredFile(TdeS3 *p, const char *zPath){
  char aBuf[S3_CRED_MAX+1];
  struct stat st;
  ssize_t n;
  size_t nBuf = 0;
  int rc = TDE_OK, fd = open(zPath, O_RDONLY|O_CLOEXEC|O_NOFOLLOW);
  char *zLine, *zSave = 0;

  if( fd<0 ) return tdeErr(TDE_CONFIG, "S3 credentials file %s: cannot open: %s", zPath, strerror(errno));
  if( fstat(fd, &st)!=0 || !S_ISREG(st.st_mode) ){
    rc = tdeErr(TDE_CONFIG, "S3 credentials file %s is not a regular file", zPath);
    goto out;
  }
  rc = tdeModeCheck(TDE_CONFIG, "S3 credentials file", zPath, &st, 077, 0);
  if( rc!=TDE_OK ) goto out;
  while( (n = read(fd, aBuf+nBuf, sizeof(aBuf)-1-nBuf))>0 ) nBuf += (size_t)n;
  if( n<0 ){
    rc = tdeErr(TDE_CONFIG, "S3 credentials file %s: read failed: %s", zPath, strerror(errno));
    goto out;
  }
  if( nBuf>=S3_CRED_MAX ){
    rc = tdeErr(TDE_CONFIG, "S3 credentials file %s is larger than %d bytes", zPath, S3_CRED_MAX);
    goto out;
  }
  aBuf[nBuf] = 0;
  for(zLine=strtok_r(aBuf, "\n", &zSave); zLine; zLine=strtok_r(0, "\n", &zSave)){
    size_t m = strlen(zLine);
    char *zEq;
    char **pz = 0;
    if( m && zLine[m-1]=='\r' ) zLine[--m] = 0;
    if( m==0 || zLine[0]=='#' ) continue;
    zEq = strchr(zLine, '=');
    if( !zEq ){
      rc = tdeErr(TDE_CONFIG, "S3 credentials file %s: a line is not KEY=VALUE", zPath);
      goto out;
    }
    *zEq = 0;
    if( strcmp(zLine, "AWS_ACCESS_KEY_ID")==0 ) pz = &p->zAccess;
    else if( strcmp(zLine, "AWS_SECRET_ACCESS_KEY")==0 ) pz = &p->zSecret;
    if( !pz ) continue;
    if( *pz ){
      rc = tdeErr(TDE_CONFIG, "S3 credentials file %s: %s is set twice", zPath, zLine);
      goto out;
    }
    if( (*pz = strdup(zEq+1))==0 ){ rc = tdeErr(TDE_NOMEM, "out of memory"); goto out; }
  }
  if( !p->zAccess || !p->zSecret || !p->zAccess[0] || !p->zSecret[0] ){
    rc = tdeErr(TDE_CONFIG, "S3 credentials file %s: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                "are both needed", zPath);
  }
out:
  OPENSSL_cleanse(aBuf, sizeof(aBuf));
  close(fd);
  return rc;
}

static int s3CredEnv(TdeS3 *p){
  const char *zA = getenv("AWS_ACCESS_KEY_ID"), *zS = getenv("AWS_SECRET_ACCESS_KEY");
  if( !zA || !zA[0] || !zS || !zS[0] ){
    return tdeErr(TDE_CONFIG, "S3 credentials: no credentials file given and AWS_ACCESS_KEY_ID or "
                  "AWS_SECRET_ACCESS_KEY not set in the environment");
  }
  p->zAccess = strdup(zA);
  p->zSecret = strdup(zS);
  return (p->zAccess && p->zSecret) ? TDE_OK : tdeErr(TDE_NOMEM, "out of memory");
}

/* ---- open, close, names ------------------------------------------------ */

static int s3CheckConfig(const TdeS3Config *pCfg){
  const char *zB = pCfg->zBucket, *zR = pCfg->zRegion, *zE = pCfg->zEndpoint;
  size_t nB = zB ? strlen(zB) : 0;
  if( !zE || (strncmp(zE, "https://", 8)!=0 && strncmp(zE, "http://", 7)!=0) ){
    return tdeErr(TDE_CONFIG, "S3 endpoint must start with https:// (or http:// for diagnosis)");
  }
  if( strchr(zE+7, '?') || strchr(zE+7, '#') || strchr(zE+8, '/') ){
    return tdeErr(TDE_CONFIG, "S3 endpoint %s: only scheme, host and port (path-style URLs are made from it)", zE);
  }
  if( nB<3 || nB>63 || strspn(zB, "abcdefghijklmnopqrstuvwxyz0123456789.-")!=nB ){
    return tdeErr(TDE_CONFIG, "S3 bucket name must be 3 to 63 of a-z 0-9 . -");
  }
  if( !zR || !zR[0] || strlen(zR)>32 || strchr(zR, ':') ){
    return tdeErr(TDE_CONFIG, "S3 region must be set (at most 32 characters, no ':')");
  }
  return TDE_OK;
}

int tdeS3Open(const TdeS3Config *pCfg, TdeS3 **pp){
  TdeS3 *p;
  int rc;
  *pp = 0;
  if( (rc = s3CheckConfig(pCfg))!=TDE_OK ) return rc;
  pthread_once(&s3Once, s3GlobalInit);
  if( s3InitRc!=CURLE_OK ) return tdeErr(TDE_IO, "libcurl: %s", curl_easy_strerror(s3InitRc));
  if( (p = calloc(1, sizeof(*p)))==0 ) return tdeErr(TDE_NOMEM, "out of memory");
  p->zEndpoint = s3Dup(pCfg->zEndpoint);
  p->zRegion = s3Dup(pCfg->zRegion);
  p->zBucket = s3Dup(pCfg->zBucket);
  p->zCaFile = s3Dup(pCfg->zCaFile);
  p->nTry = pCfg->nTry>0 ? pCfg->nTry : 4;
  p->msBackoff = pCfg->msBackoff ? pCfg->msBackoff : 200;
  snprintf(p->zSigv4, sizeof(p->zSigv4), "aws:amz:%s:s3", pCfg->zRegion);
  p->hCurl = curl_easy_init();
  if( !p->hCurl || !p->zEndpoint || !p->zRegion || !p->zBucket || (pCfg->zCaFile && !p->zCaFile) ){
    rc = tdeErr(TDE_NOMEM, "out of memory");
  }else{
    rc = pCfg->zCredFile ? s3CredFile(p, pCfg->zCredFile) : s3CredEnv(p);
  }
  if( rc!=TDE_OK ){ tdeS3Close(p); return rc; }
  *pp = p;
  return TDE_OK;
}

void tdeS3Close(TdeS3 *p){
  if( !p ) return;
  if( p->hCurl ) curl_easy_cleanup(p->hCurl);
  free(p->zEndpoint);
  free(p->zRegion);
  free(p->zBucket);
  free(p->zCaFile);
  s3FreeSecret(p->zAccess);
  s3FreeSecret(p->zSecret);
  free(p);
}

int tdeS3KeyCheck(const char *zKey){
  size_t n = zKey ? strlen(zKey) : 0;
  if( n==0 || n>1024 ) return tdeErr(TDE_RANGE, "S3 key must be 1 to 1024 bytes");
  if( strspn(zKey, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._/-")!=n
   || zKey[0]=='/' || strstr(zKey, "//") ){
    return tdeErr(TDE_RANGE, "S3 key '%.64s' holds a character or '/' this client does not take", zKey);
  }
  for(const char *z=zKey; z; z=strchr(z, '/')){
    if( *z=='/' ) z++;
    if( (z[0]=='.' && (z[1]=='/' || z[1]==0)) || (z[0]=='.' && z[1]=='.' && (z[2]=='/' || z[2]==0)) ){
      return tdeErr(TDE_RANGE, "S3 key '%.64s' has a '.' or '..' segment", zKey);
    }
  }
  return TDE_OK;
}

/* ---- one request ------------------------------------------------------- */

static size_t s3OnBody(char *pData, size_t sz, size_t nmemb, void *pArg){
  S3Req *r = pArg;
  size_t n = sz*nmemb;
  if( r->status<200 || r->status>=300 ){
    size_t m = n < sizeof(r->aErr)-1-r->nErr ? n : sizeof(r->aErr)-1-r->nErr;
    memcpy(r->aErr+r->nErr, pData, m);
    r->nErr += m;
    return n;
  }
  if( r->nGot+n > r->nMax ){ r->bOver = 1; return 0; }
  if( r->pMd5 && EVP_DigestUpdate(r->pMd5, pData, n)!=1 ){ r->bWriteFail = 1; return 0; }
  if( r->fd>=0 ){
    for(size_t k=0; k<n; ){
      ssize_t w = write(r->fd, pData+k, n-k);
      if( w<0 && errno==EINTR ) continue;
      if( w<=0 ){ r->bWriteFail = 1; r->errnoWrite = errno; return 0; }
      k += (size_t)w;
    }
  }else{
    if( r->nMem+n > r->nMemAlloc ){
      size_t nNew = r->nMemAlloc ? r->nMemAlloc : 65536;
      uint8_t *aNew;
      while( nNew < r->nMem+n ) nNew *= 2;
      if( (aNew = realloc(r->aMem, nNew))==0 ){ r->bWriteFail = 1; r->errnoWrite = ENOMEM; return 0; }
      r->aMem = aNew;
      r->nMemAlloc = nNew;
    }
    memcpy(r->aMem+r->nMem, pData, n);
    r->nMem += n;
  }
  r->nGot += n;
  return n;
}

/* The status line resets what a header callback saw (a 100 Continue comes
** before the final answer); ETag is kept without its quotes. */
static size_t s3OnHeader(char *pData, size_t sz, size_t nmemb, void *pArg){
  S3Req *r = pArg;
  size_t n = sz*nmemb;
  if( n>5 && memcmp(pData, "HTTP/", 5)==0 ){
    r->zEtag[0] = 0;
    r->nLength = -1;
    if( sscanf(pData, "HTTP/%*s %ld", &r->status)!=1 ) r->status = 0;
  }else if( n>5 && strncasecmp(pData, "etag:", 5)==0 ){
    size_t i = 5, j = n;
    while( i<j && (pData[i]==' ' || pData[i]=='"') ) i++;
    while( j>i && (pData[j-1]=='\r' || pData[j-1]=='\n' || pData[j-1]==' ' || pData[j-1]=='"') ) j--;
    if( j-i < sizeof(r->zEtag) ){ memcpy(r->zEtag, pData+i, j-i); r->zEtag[j-i] = 0; }
  }else if( n>15 && strncasecmp(pData, "content-length:", 15)==0 ){
    char *zEnd = 0;
    long long v;
    errno = 0;
    v = strtoll(pData+15, &zEnd, 10);
    r->nLength = (errno || v<0 || zEnd==pData+15) ? -1 : (int64_t)v;
  }
  return n;
}

static size_t s3OnUpload(char *pBuf, size_t sz, size_t nmemb, void *pArg){
  S3Req *r = pArg;
  size_t n = sz*nmemb, m = r->nUp-r->iUp;
  if( m>n ) m = n;
  memcpy(pBuf, r->pUp+r->iUp, m);
  r->iUp += m;
  return m;
}

/* The object's URL: ENDPOINT/BUCKET[/KEY][?QUERY]; NULL when out of memory. */
static char *s3Url(TdeS3 *p, const S3Req *r){
  size_t n = strlen(p->zEndpoint) + strlen(p->zBucket) + (r->zKey ? strlen(r->zKey) : 0)
           + (r->zQuery ? strlen(r->zQuery) : 0) + 8;
  char *z = malloc(n);
  if( z ){
    snprintf(z, n, "%s/%s%s%s%s%s", p->zEndpoint, p->zBucket, r->zKey ? "/" : "",
             r->zKey ? r->zKey : "", r->zQuery ? "?" : "", r->zQuery ? r->zQuery : "");
  }
  return z;
}

/* Sets up one easy handle for r.  Returns the curl code of the first
** option that failed (CURLE_OK when all are set). */
static CURLcode s3Setup(TdeS3 *p, S3Req *r, CURL *h, const char *zUrl, struct curl_slist **ppHdr,
                        char *zCurlErr){
  struct curl_slist *pHdr = 0;
  char zHdr[160];
  CURLcode c = CURLE_OK;
  const char *zEmpty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

  /* curl 7.88 signs the payload hash it is given in this header; without
  ** it the server sees an unsigned payload (and RGW refuses the request) */
  snprintf(zHdr, sizeof(zHdr), "x-amz-content-sha256: %s", r->pUp ? r->zSha256Hex : zEmpty);
  pHdr = curl_slist_append(pHdr, zHdr);
  if( r->pUp ){
    snprintf(zHdr, sizeof(zHdr), "Content-MD5: %s", r->zMd5B64);
    pHdr = curl_slist_append(pHdr, zHdr);
    pHdr = curl_slist_append(pHdr, "Content-Type: application/octet-stream");
  }
  *ppHdr = pHdr;
  if( !pHdr ) return CURLE_OUT_OF_MEMORY;
#define S3_OPT(o, v) if( c==CURLE_OK ) c = curl_easy_setopt(h, o, v)
  S3_OPT(CURLOPT_URL, zUrl);
  S3_OPT(CURLOPT_PROTOCOLS_STR, strncmp(p->zEndpoint, "https:", 6)==0 ? "https" : "http");
  S3_OPT(CURLOPT_FOLLOWLOCATION, 0L);
  S3_OPT(CURLOPT_NOSIGNAL, 1L);
  S3_OPT(CURLOPT_ERRORBUFFER, zCurlErr);
  S3_OPT(CURLOPT_AWS_SIGV4, p->zSigv4);
  S3_OPT(CURLOPT_USERNAME, p->zAccess);
  S3_OPT(CURLOPT_PASSWORD, p->zSecret);
  S3_OPT(CURLOPT_HTTPHEADER, pHdr);
  S3_OPT(CURLOPT_CONNECTTIMEOUT, 30L);
  S3_OPT(CURLOPT_LOW_SPEED_LIMIT, 1L);      /* a stalled transfer ends after 60 s */
  S3_OPT(CURLOPT_LOW_SPEED_TIME, 60L);
  S3_OPT(CURLOPT_WRITEFUNCTION, s3OnBody);
  S3_OPT(CURLOPT_WRITEDATA, r);
  S3_OPT(CURLOPT_HEADERFUNCTION, s3OnHeader);
  S3_OPT(CURLOPT_HEADERDATA, r);
  if( p->zCaFile ) S3_OPT(CURLOPT_CAINFO, p->zCaFile);
  if( r->pUp ){
    S3_OPT(CURLOPT_UPLOAD, 1L);
    S3_OPT(CURLOPT_READFUNCTION, s3OnUpload);
    S3_OPT(CURLOPT_READDATA, r);
    S3_OPT(CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->nUp);
  }else if( strcmp(r->zMethod, "HEAD")==0 ){
    S3_OPT(CURLOPT_NOBODY, 1L);
  }else if( strcmp(r->zMethod, "DELETE")==0 ){
    S3_OPT(CURLOPT_CUSTOMREQUEST, "DELETE");
  }
#undef S3_OPT
  return c;
}

/* Back to the state before a try: empty sink, fd truncated to its start. */
static int s3Reset(S3Req *r){
  r->iUp = 0;
  r->nMem = 0;
  r->nGot = 0;
  r->bOver = r->bWriteFail = r->errnoWrite = 0;
  r->nErr = 0;
  r->zEtag[0] = 0;
  r->nLength = -1;
  r->status = 0;
  if( r->pMd5 && EVP_DigestInit_ex(r->pMd5, EVP_md5(), 0)!=1 ) return -1;
  if( r->fd>=0 && (ftruncate(r->fd, r->iFdStart)!=0 || lseek(r->fd, r->iFdStart, SEEK_SET)<0) ){
    r->errnoWrite = errno;
    return -1;
  }
  return 0;
}

/* The message and code of a failed try.  *pbRetry: worth another try. */
static int s3Failure(TdeS3 *p, const S3Req *r, CURLcode c, const char *zCurlErr, int *pbRetry){
  char zCode[64], zMsg[256];
  const char *zSep = r->zKey ? "/" : "";
  const char *zKey = r->zKey ? r->zKey : "";
  *pbRetry = 0;
  if( r->bOver ){
    return tdeErr(TDE_RANGE, "S3 %s %s%s%s: the object is larger than the %zu bytes allowed",
                  r->zMethod, p->zBucket, zSep, zKey, r->nMax);
  }
  if( r->bWriteFail ){
    return tdeErr(TDE_IO, "S3 %s %s%s%s: cannot store the body: %s", r->zMethod, p->zBucket,
                  zSep, zKey, strerror(r->errnoWrite ? r->errnoWrite : EIO));
  }
  if( c!=CURLE_OK ){
    *pbRetry = c==CURLE_COULDNT_CONNECT || c==CURLE_OPERATION_TIMEDOUT || c==CURLE_SEND_ERROR
            || c==CURLE_RECV_ERROR || c==CURLE_GOT_NOTHING || c==CURLE_PARTIAL_FILE;
    return tdeErr(TDE_IO, "S3 %s %s%s%s at %s: %s%s%s", r->zMethod, p->zBucket, zSep, zKey,
                  p->zEndpoint, curl_easy_strerror(c), zCurlErr[0] ? ": " : "", zCurlErr);
  }
  tdeS3ParseError(r->aErr, r->nErr, zCode, sizeof(zCode), zMsg, sizeof(zMsg));
  *pbRetry = r->status>=500;
  return tdeErr(r->status==404 ? TDE_NOTFOUND : (r->status==403 || r->status==401) ? TDE_AUTH : TDE_IO,
                "S3 %s %s%s%s: HTTP %ld%s%s%s%s", r->zMethod, p->zBucket, zSep, zKey, r->status,
                zCode[0] ? " " : "", zCode, zMsg[0] ? ": " : "", zMsg);
}

/* A 2xx GET body must match an ETag that is an MD5 (32 hex digits). */
static int s3CheckMd5(TdeS3 *p, S3Req *r){
  uint8_t aSum[16];
  char zHex[33];
  unsigned n = 0;
  if( !r->pMd5 || strlen(r->zEtag)!=32 || strspn(r->zEtag, "0123456789abcdef")!=32 ) return TDE_OK;
  if( EVP_DigestFinal_ex(r->pMd5, aSum, &n)!=1 || n!=16 ) return tdeErr(TDE_CRYPTO, "MD5 failed");
  for(unsigned i=0; i<16; i++) snprintf(zHex+2*i, 3, "%02x", aSum[i]);
  if( strcmp(zHex, r->zEtag)!=0 ){
    return tdeErr(TDE_IO, "S3 %s %s/%s: the body does not match its ETag (damaged on the way)",
                  r->zMethod, p->zBucket, r->zKey ? r->zKey : "");
  }
  return TDE_OK;
}

/* Runs r with retries: 5xx and connection errors, nTry times, pausing
** msBackoff, 2*msBackoff, ... between tries. */
static int s3Perform(TdeS3 *p, S3Req *r){
  char *zUrl = s3Url(p, r);
  unsigned ms = p->msBackoff;
  int rc = TDE_IO;
  if( !zUrl ) return tdeErr(TDE_NOMEM, "out of memory");
  for(int iTry=1; ; iTry++){
    char zCurlErr[CURL_ERROR_SIZE] = "";
    struct curl_slist *pHdr = 0;
    CURL *h = p->hCurl;
    CURLcode c;
    int bRetry = 0;
    if( s3Reset(r) ){
      rc = tdeErr(TDE_IO, "S3 %s: cannot reset the output: %s", r->zMethod, strerror(r->errnoWrite));
      break;
    }
    curl_easy_reset(h);           /* options cleared; connections and TLS sessions kept */
    c = s3Setup(p, r, h, zUrl, &pHdr, zCurlErr);
    if( c==CURLE_OK ) c = curl_easy_perform(h);
    if( c==CURLE_OK ) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
    curl_easy_reset(h);           /* no pointer into this frame stays set */
    curl_slist_free_all(pHdr);
    if( c==CURLE_OK && !r->bOver && !r->bWriteFail && r->status>=200 && r->status<300 ){
      rc = s3CheckMd5(p, r);
      break;
    }
    rc = s3Failure(p, r, c, zCurlErr, &bRetry);
    if( !bRetry || iTry>=p->nTry ) break;
    tdeLog(TDE_LOG_WARNING, "%s (try %d of %d; again in %u ms)", tde_last_error(), iTry, p->nTry, ms);
    struct timespec ts = { (time_t)(ms/1000), (long)(ms%1000)*1000000L };
    while( nanosleep(&ts, &ts)!=0 && errno==EINTR ){}
    ms *= 2;
  }
  free(zUrl);
  return rc;
}

static void s3ReqInit(S3Req *r, const char *zMethod, const char *zKey){
  memset(r, 0, sizeof(*r));
  r->zMethod = zMethod;
  r->zKey = zKey;
  r->fd = -1;
  r->nMax = SIZE_MAX;
}

/* ---- operations -------------------------------------------------------- */

int tdeS3Put(TdeS3 *p, const char *zKey, const void *pData, size_t n){
  S3Req *r;
  uint8_t aSha[32], aMd5[16];
  unsigned nMd = 0;
  int rc = tdeS3KeyCheck(zKey);
  if( rc!=TDE_OK ) return rc;
  if( (r = malloc(sizeof(*r)))==0 ) return tdeErr(TDE_NOMEM, "out of memory");
  s3ReqInit(r, "PUT", zKey);
  r->pUp = pData ? pData : (const uint8_t *)"";
  r->nUp = n;
  if( EVP_Digest(r->pUp, n, aSha, &nMd, EVP_sha256(), 0)!=1
   || EVP_Digest(r->pUp, n, aMd5, &nMd, EVP_md5(), 0)!=1 ){
    rc = tdeErr(TDE_CRYPTO, "SHA-256 or MD5 failed");
  }else{
    for(int i=0; i<32; i++) snprintf(r->zSha256Hex+2*i, 3, "%02x", aSha[i]);
    EVP_EncodeBlock((unsigned char *)r->zMd5B64, aMd5, 16);
    rc = s3Perform(p, r);
  }
  free(r);
  return rc;
}

/* GET into memory (fd<0) or to fd. */
static int s3Get(TdeS3 *p, const char *zKey, size_t nMax, int fd, S3Req *r){
  int rc = tdeS3KeyCheck(zKey);
  if( rc!=TDE_OK ) return rc;
  s3ReqInit(r, "GET", zKey);
  r->nMax = nMax;
  r->fd = fd;
  if( fd>=0 && (r->iFdStart = lseek(fd, 0, SEEK_CUR))<0 ){
    return tdeErr(TDE_IO, "S3 GET %s: the output is not seekable: %s", zKey, strerror(errno));
  }
  if( (r->pMd5 = EVP_MD_CTX_new())==0 ) return tdeErr(TDE_NOMEM, "out of memory");
  rc = s3Perform(p, r);
  EVP_MD_CTX_free(r->pMd5);
  r->pMd5 = 0;
  return rc;
}

int tdeS3Get(TdeS3 *p, const char *zKey, size_t nMax, uint8_t **ppData, size_t *pnData){
  S3Req *r = malloc(sizeof(*r));
  int rc;
  *ppData = 0;
  *pnData = 0;
  if( !r ) return tdeErr(TDE_NOMEM, "out of memory");
  rc = s3Get(p, zKey, nMax, -1, r);
  if( rc==TDE_OK && !r->aMem && (r->aMem = malloc(1))==0 ) rc = tdeErr(TDE_NOMEM, "out of memory");
  if( rc==TDE_OK ){
    *ppData = r->aMem;
    *pnData = r->nMem;
  }else{
    free(r->aMem);
  }
  free(r);
  return rc;
}

int tdeS3GetFd(TdeS3 *p, const char *zKey, int fd, uint64_t *pnData){
  S3Req *r = malloc(sizeof(*r));
  int rc;
  if( !r ) return tdeErr(TDE_NOMEM, "out of memory");
  rc = s3Get(p, zKey, SIZE_MAX, fd, r);
  if( pnData ) *pnData = rc==TDE_OK ? r->nGot : 0;
  free(r);
  return rc;
}

int tdeS3Head(TdeS3 *p, const char *zKey, TdeS3Object *pObj){
  S3Req *r;
  int rc = tdeS3KeyCheck(zKey);
  memset(pObj, 0, sizeof(*pObj));
  if( rc!=TDE_OK ) return rc;
  if( (r = malloc(sizeof(*r)))==0 ) return tdeErr(TDE_NOMEM, "out of memory");
  s3ReqInit(r, "HEAD", zKey);
  rc = s3Perform(p, r);
  if( rc==TDE_OK && r->nLength<0 ){
    rc = tdeErr(TDE_IO, "S3 HEAD %s/%s: the answer has no Content-Length", p->zBucket, zKey);
  }
  if( rc==TDE_OK ){
    snprintf(pObj->zKey, sizeof(pObj->zKey), "%s", zKey);
    pObj->nSize = (uint64_t)r->nLength;
    memcpy(pObj->zEtag, r->zEtag, sizeof(pObj->zEtag));
  }
  free(r);
  return rc;
}

int tdeS3Delete(TdeS3 *p, const char *zKey){
  S3Req *r;
  int rc = tdeS3KeyCheck(zKey);
  if( rc!=TDE_OK ) return rc;
  if( (r = malloc(sizeof(*r)))==0 ) return tdeErr(TDE_NOMEM, "out of memory");
  s3ReqInit(r, "DELETE", zKey);
  rc = s3Perform(p, r);
  free(r);
  return rc;
}

/* Appends zIn percent-encoded as SigV4 wants a query value (everything but
** A-Z a-z 0-9 - _ . ~ as %XX, upper-case hex).  -1 if it does not fit. */
static int s3QueryEncode(const char *zIn, char *zOut, size_t nOut){
  static const char aHex[] = "0123456789ABCDEF";
  size_t k = strlen(zOut);
  for(const unsigned char *z=(const unsigned char *)zIn; *z; z++){
    if( (*z>='A' && *z<='Z') || (*z>='a' && *z<='z') || (*z>='0' && *z<='9')
     || *z=='-' || *z=='_' || *z=='.' || *z=='~' ){
      if( k+2>nOut ) return -1;
      zOut[k++] = (char)*z;
    }else{
      if( k+4>nOut ) return -1;
      zOut[k++] = '%';
      zOut[k++] = aHex[*z>>4];
      zOut[k++] = aHex[*z&15];
    }
  }
  zOut[k] = 0;
  return 0;
}

typedef struct S3ListCtx {
  int (*xEach)(void *, const TdeS3Object *);
  void *pArg;
  char zLast[1025];
  int bOrder;                   /* a key came out of order */
} S3ListCtx;

/* Keys must come in strictly increasing order across all pages. */
static int s3ListEach(void *pArg, const TdeS3Object *pObj){
  S3ListCtx *x = pArg;
  if( x->zLast[0] && strcmp(pObj->zKey, x->zLast)<=0 ){ x->bOrder = 1; return -1; }
  memcpy(x->zLast, pObj->zKey, sizeof(x->zLast));
  return x->xEach(x->pArg, pObj);
}

/* Query parameters in the sorted order SigV4's canonical request has. */
int tdeS3List(TdeS3 *p, const char *zPrefix,
              int (*xEach)(void *pArg, const TdeS3Object *pObj), void *pArg){
  enum { nQuery = 3*1024*3 + 256, nToken = 2048 };
  S3ListCtx *x = calloc(1, sizeof(*x));
  S3Req *r = malloc(sizeof(*r));
  char *zQuery = malloc(nQuery), *zToken = calloc(1, nToken);
  int rc = TDE_OK, nPage = 0, iStop = 0;

  if( !x || !r || !zQuery || !zToken ){ rc = tdeErr(TDE_NOMEM, "out of memory"); goto out; }
  if( strlen(zPrefix)>1024 ){ rc = tdeErr(TDE_RANGE, "S3 prefix longer than 1024 bytes"); goto out; }
  x->xEach = xEach;
  x->pArg = pArg;
  do{
    zQuery[0] = 0;
    if( zToken[0] ){
      strcpy(zQuery, "continuation-token=");
      if( s3QueryEncode(zToken, zQuery, nQuery) ){ rc = tdeErr(TDE_RANGE, "S3 continuation token too long"); goto out; }
      strcat(zQuery, "&");
    }
    strcat(zQuery, "list-type=2&max-keys=1000&prefix=");
    if( s3QueryEncode(zPrefix, zQuery, nQuery) ){ rc = tdeErr(TDE_RANGE, "S3 prefix too long"); goto out; }
    s3ReqInit(r, "LIST", 0);
    r->zQuery = zQuery;
    r->nMax = S3_LISTPAGE_MAX;
    rc = s3Perform(p, r);
    if( rc==TDE_OK ){
      rc = tdeS3ParseList((const char *)r->aMem, r->nMem, zPrefix, s3ListEach, x, zToken, nToken, &iStop);
    }
    free(r->aMem);
    nPage++;
    if( rc==TDE_OK && x->bOrder ){
      rc = tdeErr(TDE_IO, "S3 listing of prefix '%s': key '%.64s' out of order (page %d)",
                  zPrefix, x->zLast, nPage);
    }else if( rc==TDE_OK && iStop ){
      rc = iStop;
    }
  }while( rc==TDE_OK && zToken[0] );
out:
  free(zToken);
  free(zQuery);
  free(r);
  free(x);
  return rc;
}
