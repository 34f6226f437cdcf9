/*
** The standby wire protocol (docs/FORMAT.md "Wire protocol"): messages of
** type(1) || length(4) || body || SHA-256(type || length || body) over a
** TCP stream.  Plaintext framing: every body that carries data is
** ciphertext already (pages authenticate with the data key the standby
** never needs), and the checksum catches corruption; a bad checksum ends
** the connection.  Loopback or private networks; TLS is left out (see
** README "Standby").
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

#include <openssl/evp.h>

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
  if( bind(fd, pRes->ai_addr, pRes->ai_addrlen)!=0 || listen(fd, 4)!=0 ){
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
  struct timeval tv = { 30, 0 };
  int one = 1, idle = 10, intvl = 5, cnt = 3;
  /* A peer that stops reading (a path cut without a reset) fails our sends
  ** after 30 s instead of blocking forever; keepalive finds a dead peer
  ** on an idle connection. */
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
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
  fcntl(fd, F_SETFL, fl);
  tdeNetTune(fd);
  *pFd = fd;
done:
  freeaddrinfo(pRes);
  return rc;
}

static int sendAll(int fd, const uint8_t *a, size_t n){
  while( n>0 ){
    ssize_t k = send(fd, a, n, MSG_NOSIGNAL);
    if( k<0 && errno==EINTR ) continue;
    if( k<=0 ) return tdeErr(TDE_IO, "send: %s", k<0 ? strerror(errno) : "closed");
    a += k;
    n -= (size_t)k;
  }
  return TDE_OK;
}

int tdeNetSend(int fd, int eType, const uint8_t *a1, size_t n1, const uint8_t *a2, size_t n2){
  uint8_t aHdr[5], sum[32];
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  unsigned int nSum = 0;
  int rc;
  if( !c ) return TDE_NOMEM;
  aHdr[0] = (uint8_t)eType;
  tdePut32(aHdr+1, (uint32_t)(n1 + n2));
  if( EVP_DigestInit_ex(c, EVP_sha256(), 0)!=1 || EVP_DigestUpdate(c, aHdr, 5)!=1
   || (n1 && EVP_DigestUpdate(c, a1, n1)!=1) || (n2 && EVP_DigestUpdate(c, a2, n2)!=1)
   || EVP_DigestFinal_ex(c, sum, &nSum)!=1 ){
    EVP_MD_CTX_free(c);
    return tdeErr(TDE_CRYPTO, "SHA-256 failed");
  }
  EVP_MD_CTX_free(c);
  rc = sendAll(fd, aHdr, 5);
  if( rc==TDE_OK && n1 ) rc = sendAll(fd, a1, n1);
  if( rc==TDE_OK && n2 ) rc = sendAll(fd, a2, n2);
  if( rc==TDE_OK ) rc = sendAll(fd, sum, 32);
  return rc;
}

int tdeNetReadable(int fd, int timeoutMs){
  struct pollfd pfd = { fd, POLLIN, 0 };
  int k;
  do{ k = poll(&pfd, 1, timeoutMs); }while( k<0 && errno==EINTR );
  return k>0;
}

/* Read exactly n bytes; a stall of more than 30 s mid-message is a dead peer. */
static int recvAll(int fd, uint8_t *a, size_t n){
  while( n>0 ){
    ssize_t k;
    if( !tdeNetReadable(fd, 30000) ) return tdeErr(TDE_IO, "receive: timed out");
    k = recv(fd, a, n, 0);
    if( k<0 && errno==EINTR ) continue;
    if( k<=0 ) return tdeErr(TDE_IO, "receive: %s", k<0 ? strerror(errno) : "connection closed");
    a += k;
    n -= (size_t)k;
  }
  return TDE_OK;
}

int tdeNetRecv(int fd, int timeoutMs, int *peType, uint8_t **ppBody, size_t *pn){
  uint8_t aHdr[5], sum[32], mine[32];
  uint8_t *a = 0;
  uint32_t n;
  int rc;
  *ppBody = 0;
  *pn = 0;
  if( timeoutMs>=0 && !tdeNetReadable(fd, timeoutMs) ) return TDE_NOTFOUND;
  rc = recvAll(fd, aHdr, 5);
  if( rc ) return rc;
  n = tdeGet32(aHdr+1);
  if( n>TDE_MSG_MAX ) return tdeErr(TDE_AUTH, "message of %u bytes: corrupted stream", n);
  a = sqlite3_malloc64((sqlite3_uint64)n + 5);
  if( !a ) return TDE_NOMEM;
  memcpy(a, aHdr, 5);
  rc = recvAll(fd, a+5, n);
  if( rc==TDE_OK ) rc = recvAll(fd, sum, 32);
  if( rc==TDE_OK ) rc = tdeSha256(a, (size_t)n + 5, mine);
  if( rc==TDE_OK && memcmp(sum, mine, 32)!=0 ) rc = tdeErr(TDE_AUTH, "message checksum mismatch: corrupted in transit");
  if( rc ){ sqlite3_free(a); return rc; }
  memmove(a, a+5, n);
  *peType = aHdr[0];
  *ppBody = a;
  *pn = n;
  return TDE_OK;
}
