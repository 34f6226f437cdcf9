/*
** The standby wire protocol (docs/FORMAT.md "Wire protocol"): messages of
** type(1) || length(4) || body || SHA-256(type || length || body) over a
** TCP stream, inside mutual TLS (tls.c) unless the operator asked for
** --insecure-no-tls.  TLS authenticates the peer and every byte; the
** checksum still catches a message damaged before TLS saw it, and every
** body is validated whole by its reader, as without TLS.
**
** Every socket is non-blocking and every operation has a deadline, so a
** peer that sends a byte now and then can hold a connection but never a
** thread past its deadline (slow-loris).  Must never: block without a
** deadline, return a message that failed its checksum.
*/
#include "repl/repl.h"
#include "cipher/cipher.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>

int tdeNetParseAddr(const char *zAddr, char *zHost, size_t nHost, int *pPort){
  const char *zColon = strrchr(zAddr, ':');
  char *zEnd = 0;
  long port;
  size_t n;
  if( !zColon || zColon==zAddr ) return tdeErr(TDE_CONFIG, "'%s': expected HOST:PORT", zAddr);
  port = strtol(zColon+1, &zEnd, 10);
  if( !zEnd || *zEnd || port<1 || port>65535 ) return tdeErr(TDE_CONFIG, "'%s': bad port", zAddr);
  n = (size_t)(zColon - zAddr);
  if( zAddr[0]=='[' && n>=2 && zAddr[n-1]==']' ){ zAddr++; n -= 2; }
  if( n>=nHost ) return tdeErr(TDE_CONFIG, "'%s': host name too long", zAddr);
  memcpy(zHost, zAddr, n);
  zHost[n] = 0;
  *pPort = (int)port;
  return TDE_OK;
}

static int resolve(const char *zAddr, int bPassive, struct addrinfo **ppRes){
  char zHost[256], zPort[16];
  struct addrinfo hints;
  int port, rc;
  rc = tdeNetParseAddr(zAddr, zHost, sizeof(zHost), &port);
  if( rc ) return rc;
  snprintf(zPort, sizeof(zPort), "%d", port);
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if( bPassive ) hints.ai_flags = AI_PASSIVE;
  rc = getaddrinfo(zHost, zPort, &hints, ppRes);
  if( rc ) return tdeErr(TDE_CONFIG, "%s: %s", zAddr, gai_strerror(rc));
  return TDE_OK;
}

int tdeNetListen(const char *zAddr, int *pFd){
  struct addrinfo *pRes = 0;
  int fd = -1, one = 1, rc;
  *pFd = -1;
  rc = resolve(zAddr, 1, &pRes);
  if( rc ) return rc;
  fd = socket(pRes->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if( fd<0 ){ rc = tdeErr(TDE_IO, "socket: %s", strerror(errno)); goto done; }
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if( bind(fd, pRes->ai_addr, pRes->ai_addrlen)!=0 || listen(fd, 16)!=0 ){
    rc = tdeErr(TDE_IO, "cannot listen on %s: %s", zAddr, strerror(errno));
    close(fd);
    fd = -1;
    goto done;
  }
  *pFd = fd;
done:
  freeaddrinfo(pRes);
  return rc;
}

void tdeNetTune(int fd){
  int one = 1, idle = 10, intvl = 5, cnt = 3;
  int fl = fcntl(fd, F_GETFL);
  /* Non-blocking: every wait is a poll() with a deadline.  Keepalive finds
  ** a dead peer on an idle connection. */
  if( fl>=0 ) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int tdeNetConnect(const char *zAddr, int timeoutMs, int *pFd){
  struct addrinfo *pRes = 0;
  int fd = -1, rc, fl;
  *pFd = -1;
  rc = resolve(zAddr, 0, &pRes);
  if( rc ) return rc;
  fd = socket(pRes->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if( fd<0 ){ rc = tdeErr(TDE_IO, "socket: %s", strerror(errno)); goto done; }
  fl = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, fl | O_NONBLOCK);
  if( connect(fd, pRes->ai_addr, pRes->ai_addrlen)!=0 ){
    struct pollfd pfd = { fd, POLLOUT, 0 };
    int err = 0;
    socklen_t nErr = sizeof(err);
    if( errno!=EINPROGRESS || poll(&pfd, 1, timeoutMs)!=1
     || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &nErr)!=0 || err!=0 ){
      rc = tdeErr(TDE_IO, "cannot connect to %s: %s", zAddr, strerror(err ? err : errno ? errno : ETIMEDOUT));
      close(fd);
      fd = -1;
      goto done;
    }
  }
  tdeNetTune(fd);
  *pFd = fd;
done:
  freeaddrinfo(pRes);
  return rc;
}

int tdeNetReadable(int fd, int timeoutMs){
  struct pollfd pfd = { fd, POLLIN, 0 };
  int k;
  do{ k = poll(&pfd, 1, timeoutMs); }while( k<0 && errno==EINTR );
  return k>0;
}

/* ---- connections ------------------------------------------------------- */

void tdeConnOpen(TdeConn *c, int fd){
  memset(c, 0, sizeof(*c));
  c->fd = fd;
}

void tdeConnClose(TdeConn *c){
  if( c->pSsl ){
    /* One close_notify, never waiting for the peer's. */
    (void)SSL_shutdown(c->pSsl);
    SSL_free(c->pSsl);
    c->pSsl = 0;
  }
  if( c->fd>=0 ) close(c->fd);
  c->fd = -1;
  ERR_clear_error();
}

/* Wait until fd is ready for ev or deadline (ms since the epoch) passes.
** 1 ready, 0 timed out. */
int tdeNetWait(int fd, short ev, uint64_t deadline){
  for(;;){
    struct pollfd pfd = { fd, ev, 0 };
    uint64_t now = tdeNowMs();
    int k;
    if( now>=deadline ) return 0;
    k = poll(&pfd, 1, (int)(deadline - now > 60000 ? 60000 : deadline - now));
    if( k>0 ) return 1;
    if( k<0 && errno!=EINTR ) return 1;   /* let the read or write report it */
  }
}

/* The OpenSSL error queue as one line (and cleared). */
void tdeSslWhy(char *zOut, size_t nOut, const char *zDefault){
  unsigned long e = ERR_get_error();
  if( e ) ERR_error_string_n(e, zOut, nOut);
  else snprintf(zOut, nOut, "%s", zDefault);
  ERR_clear_error();
}

/* Write n bytes by deadline. */
static int connWrite(TdeConn *c, const uint8_t *a, size_t n, uint64_t deadline){
  while( n>0 ){
    if( c->pSsl ){
      size_t k = 0;
      int ret = SSL_write_ex(c->pSsl, a, n, &k);
      if( ret==1 ){ a += k; n -= k; continue; }
      switch( SSL_get_error(c->pSsl, ret) ){
        case SSL_ERROR_WANT_WRITE:
          if( !tdeNetWait(c->fd, POLLOUT, deadline) ) return tdeErr(TDE_IO, "send: timed out");
          break;
        case SSL_ERROR_WANT_READ:
          if( !tdeNetWait(c->fd, POLLIN, deadline) ) return tdeErr(TDE_IO, "send: timed out");
          break;
        default: {
          char zWhy[200];
          tdeSslWhy(zWhy, sizeof(zWhy), "connection closed");
          return tdeErr(TDE_IO, "send: TLS: %s", zWhy);
        }
      }
    }else{
      ssize_t k = send(c->fd, a, n, MSG_NOSIGNAL);
      if( k>0 ){ a += k; n -= (size_t)k; continue; }
      if( k<0 && errno==EINTR ) continue;
      if( k<0 && (errno==EAGAIN || errno==EWOULDBLOCK) ){
        if( !tdeNetWait(c->fd, POLLOUT, deadline) ) return tdeErr(TDE_IO, "send: timed out");
        continue;
      }
      return tdeErr(TDE_IO, "send: %s", k<0 ? strerror(errno) : "closed");
    }
  }
  return TDE_OK;
}

/* Read up to n bytes by deadline: *pGot bytes read (at least one unless
** the deadline passed: TDE_NOTFOUND). */
static int connReadSome(TdeConn *c, uint8_t *a, size_t n, uint64_t deadline, size_t *pGot){
  *pGot = 0;
  for(;;){
    if( c->pSsl ){
      size_t k = 0;
      int ret = SSL_read_ex(c->pSsl, a, n, &k);
      if( ret==1 ){ *pGot = k; return TDE_OK; }
      switch( SSL_get_error(c->pSsl, ret) ){
        case SSL_ERROR_WANT_READ:
          if( !tdeNetWait(c->fd, POLLIN, deadline) ) return TDE_NOTFOUND;
          break;
        case SSL_ERROR_WANT_WRITE:
          if( !tdeNetWait(c->fd, POLLOUT, deadline) ) return TDE_NOTFOUND;
          break;
        case SSL_ERROR_ZERO_RETURN:
          return tdeErr(TDE_IO, "receive: connection closed");
        default: {
          char zWhy[200];
          tdeSslWhy(zWhy, sizeof(zWhy), "connection closed");
          return tdeErr(TDE_IO, "receive: TLS: %s", zWhy);
        }
      }
    }else{
      ssize_t k = recv(c->fd, a, n, 0);
      if( k>0 ){ *pGot = (size_t)k; return TDE_OK; }
      if( k<0 && errno==EINTR ) continue;
      if( k<0 && (errno==EAGAIN || errno==EWOULDBLOCK) ){
        if( !tdeNetWait(c->fd, POLLIN, deadline) ) return TDE_NOTFOUND;
        continue;
      }
      return tdeErr(TDE_IO, "receive: %s", k<0 ? strerror(errno) : "connection closed");
    }
  }
}

static int connReadAll(TdeConn *c, uint8_t *a, size_t n, uint64_t deadline){
  while( n>0 ){
    size_t k = 0;
    int rc = connReadSome(c, a, n, deadline, &k);
    if( rc==TDE_NOTFOUND ) return tdeErr(TDE_IO, "receive: timed out (a message must arrive whole within its deadline)");
    if( rc ) return rc;
    a += k;
    n -= k;
  }
  return TDE_OK;
}

int tdeConnSend(TdeConn *c, int eType, const uint8_t *a1, size_t n1, const uint8_t *a2, size_t n2){
  uint8_t aHdr[5], sum[32];
  EVP_MD_CTX *x = EVP_MD_CTX_new();
  unsigned int nSum = 0;
  uint64_t deadline;
  int rc;
  if( !x ) return TDE_NOMEM;
  aHdr[0] = (uint8_t)eType;
  tdePut32(aHdr+1, (uint32_t)(n1 + n2));
  if( EVP_DigestInit_ex(x, EVP_sha256(), 0)!=1 || EVP_DigestUpdate(x, aHdr, 5)!=1
   || (n1 && EVP_DigestUpdate(x, a1, n1)!=1) || (n2 && EVP_DigestUpdate(x, a2, n2)!=1)
   || EVP_DigestFinal_ex(x, sum, &nSum)!=1 ){
    EVP_MD_CTX_free(x);
    return tdeErr(TDE_CRYPTO, "SHA-256 failed");
  }
  EVP_MD_CTX_free(x);
  /* A peer that stops reading fails our send instead of blocking us. */
  deadline = tdeNowMs() + TDE_NET_MSG_MS + (uint64_t)(n1 + n2)/TDE_NET_MIN_RATE*1000;
  rc = connWrite(c, aHdr, 5, deadline);
  if( rc==TDE_OK && n1 ) rc = connWrite(c, a1, n1, deadline);
  if( rc==TDE_OK && n2 ) rc = connWrite(c, a2, n2, deadline);
  if( rc==TDE_OK ) rc = connWrite(c, sum, 32, deadline);
  return rc;
}

int tdeConnReadable(TdeConn *c, int timeoutMs){
  struct pollfd pfd = { c->fd, POLLIN, 0 };
  int k;
  if( c->pSsl && SSL_pending(c->pSsl)>0 ) return 1;
  do{ k = poll(&pfd, 1, timeoutMs); }while( k<0 && errno==EINTR );
  return k>0;
}

int tdeConnRecvBy(TdeConn *c, int timeoutMs, uint64_t deadline, int *peType, uint8_t **ppBody, size_t *pn){
  uint8_t aHdr[5], sum[32], mine[32];
  uint8_t *a = 0;
  uint32_t n;
  size_t k = 0;
  int rc, bExplicit = deadline!=0;
  *ppBody = 0;
  *pn = 0;
  {
    uint64_t tFirst = timeoutMs<0 ? UINT64_MAX : tdeNowMs() + (uint64_t)timeoutMs;
    if( deadline && deadline<tFirst ) tFirst = deadline;
    rc = connReadSome(c, aHdr, 5, tFirst, &k);
    if( rc ) return rc;           /* TDE_NOTFOUND: nothing within timeoutMs */
  }
  /* The rest of the message has a deadline of its own, from its size: a
  ** peer dribbling bytes cannot hold the reader. */
  if( !deadline ) deadline = tdeNowMs() + TDE_NET_MSG_MS;
  rc = connReadAll(c, aHdr+k, 5-k, deadline);
  if( rc ) return rc;
  n = tdeGet32(aHdr+1);
  if( n>TDE_MSG_MAX ) return tdeErr(TDE_AUTH, "message of %u bytes: corrupted stream", n);
  {
    uint64_t d2 = tdeNowMs() + TDE_NET_MSG_MS + (uint64_t)n/TDE_NET_MIN_RATE*1000;
    if( !bExplicit || d2<deadline ) deadline = d2;
  }
  a = sqlite3_malloc64((sqlite3_uint64)n + 5);
  if( !a ) return TDE_NOMEM;
  memcpy(a, aHdr, 5);
  rc = connReadAll(c, a+5, n, deadline);
  if( rc==TDE_OK ) rc = connReadAll(c, sum, 32, deadline);
  if( rc==TDE_OK ) rc = tdeSha256(a, (size_t)n + 5, mine);
  if( rc==TDE_OK && memcmp(sum, mine, 32)!=0 ) rc = tdeErr(TDE_AUTH, "message checksum mismatch: corrupted in transit");
  if( rc ){ sqlite3_free(a); return rc; }
  memmove(a, a+5, n);
  *peType = aHdr[0];
  *ppBody = a;
  *pn = n;
  return TDE_OK;
}

int tdeConnRecv(TdeConn *c, int timeoutMs, int *peType, uint8_t **ppBody, size_t *pn){
  return tdeConnRecvBy(c, timeoutMs, 0, peType, ppBody, pn);
}
