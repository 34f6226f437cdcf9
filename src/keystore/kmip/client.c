/*
** KMIP transport over TLS with mutual authentication (see client.h).
**
** The server's chain is verified against the configured CA only (never the
** system store), its name against the host we dialled (IP literals as IP
** SANs), and nothing below TLS 1.2 is offered.  Every socket operation is
** non-blocking under poll() with a deadline, so a dead server costs at most
** the configured timeouts.  SIGPIPE is blocked while we write, so a server
** that hangs up cannot kill the host process.
**
** It must never print, never log request or response bytes (they carry
** wrapped and unwrapped data keys), never reuse a TLS connection in a
** process other than the one that opened it (after fork() both would write
** into one TLS stream), and never retry a request after any byte of its
** response has arrived.
*/
#include "tde_int.h"
#include "keystore/kmip/client.h"
#include "keystore/kmip/ttlv.h"
#include "cipher/cipher.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

struct KmipClient {
  pthread_mutex_t mutex;     /* guards everything below */
  KmipClientConfig cfg;
  SSL_CTX *pCtx;
  SSL *pSsl;                 /* kept-alive connection or NULL */
  int fd;                    /* its socket, -1 if none */
  pid_t pid;                 /* process that opened pSsl */
  int iServer;               /* server of pSsl, or the one to try first */
  uint64_t nRequest;
};

/* Outcomes of one exchange on an open connection. */
#define KX_OK       0
#define KX_BROKEN   1        /* EOF, reset: the connection is gone */
#define KX_TIMEOUT  2
#define KX_FORMAT   3        /* response framing wrong */
#define KX_NOMEM    4

static int64_t kmipNowMs(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec*1000 + ts.tv_nsec/1000000;
}

/* Wait until fd is ready for events or the deadline passes: 1 ready, 0
** timeout, -1 error. */
static int kmipWait(int fd, short events, int64_t deadline){
  for(;;){
    struct pollfd pfd;
    int64_t left = deadline - kmipNowMs();
    int rc;
    if( left<=0 ) return 0;
    pfd.fd = fd;
    pfd.events = events;
    pfd.revents = 0;
    rc = poll(&pfd, 1, left>INT32_MAX ? INT32_MAX : (int)left);
    if( rc>0 ) return 1;
    if( rc==0 ) return 0;
    if( errno!=EINTR ) return -1;
  }
}

/* Text of the first queued OpenSSL error (or zDefault); clears the queue. */
static void kmipSslWhy(char *zWhy, size_t nWhy, const char *zDefault){
  unsigned long e = ERR_get_error();
  if( e ){
    ERR_error_string_n(e, zWhy, nWhy);
  }else{
    snprintf(zWhy, nWhy, "%s", zDefault);
  }
  ERR_clear_error();
}

/*
** Name resolution under the connect deadline.  getaddrinfo() has no
** timeout (a dead DNS server costs the resolver's retries, tens of
** seconds), so a host name is resolved on a detached thread while we wait
** on a condition variable until the deadline.  The request is shared and
** reference-counted: when we give up, the thread frees it when it
** finishes.  IP literals never take the thread.
*/
typedef struct KmipResolve {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int nRef;                    /* 2 while both sides hold it */
  int bDone;
  int rc;                      /* getaddrinfo's result */
  struct addrinfo *pRes;
  char zHost[256];
  char zPort[16];
} KmipResolve;

static void kmipResolveUnref(KmipResolve *r){
  int n;
  pthread_mutex_lock(&r->mu);
  n = --r->nRef;
  pthread_mutex_unlock(&r->mu);
  if( n==0 ){
    if( r->pRes ) freeaddrinfo(r->pRes);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
  }
}

static void *kmipResolveThread(void *pArg){
  KmipResolve *r = pArg;
  struct addrinfo hints, *pRes = 0;
  int rc;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  rc = getaddrinfo(r->zHost, r->zPort, &hints, &pRes);
  pthread_mutex_lock(&r->mu);
  r->rc = rc;
  r->pRes = rc==0 ? pRes : 0;
  r->bDone = 1;
  pthread_cond_signal(&r->cv);
  pthread_mutex_unlock(&r->mu);
  kmipResolveUnref(r);
  return 0;
}

/* 0 and *ppRes (freeaddrinfo it), or a getaddrinfo error code, or
** EAI_AGAIN with *pbTimeout set when the deadline passed first. */
static int kmipResolve(const char *zHost, const char *zPort, int64_t deadline,
                       struct addrinfo **ppRes, int *pbTimeout){
  struct addrinfo hints;
  KmipResolve *r;
  pthread_t tid;
  pthread_attr_t attr;
  int rc;
  *ppRes = 0;
  *pbTimeout = 0;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_NUMERICHOST;
  if( getaddrinfo(zHost, zPort, &hints, ppRes)==0 ) return 0;      /* an IP literal */
  if( strlen(zHost)>=sizeof(r->zHost) ) return EAI_NONAME;
  r = malloc(sizeof(*r));
  if( !r ) return EAI_MEMORY;
  memset(r, 0, sizeof(*r));
  pthread_mutex_init(&r->mu, 0);
  pthread_cond_init(&r->cv, 0);
  r->nRef = 2;
  memcpy(r->zHost, zHost, strlen(zHost)+1);
  snprintf(r->zPort, sizeof(r->zPort), "%s", zPort);
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  rc = pthread_create(&tid, &attr, kmipResolveThread, r);
  pthread_attr_destroy(&attr);
  if( rc!=0 ){
    /* No thread: resolve here, unbounded, rather than fail. */
    r->nRef = 1;
    kmipResolveUnref(r);
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    return getaddrinfo(zHost, zPort, &hints, ppRes);
  }
  pthread_mutex_lock(&r->mu);
  while( !r->bDone ){
    int64_t left = deadline - kmipNowMs();
    struct timespec ts;
    if( left<=0 ) break;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += left/1000;
    ts.tv_nsec += (left%1000)*1000000;
    if( ts.tv_nsec>=1000000000 ){ ts.tv_sec++; ts.tv_nsec -= 1000000000; }
    pthread_cond_timedwait(&r->cv, &r->mu, &ts);
  }
  if( r->bDone ){
    rc = r->rc;
    *ppRes = r->pRes;          /* ours now */
    r->pRes = 0;
  }else{
    rc = EAI_AGAIN;
    *pbTimeout = 1;
  }
  pthread_mutex_unlock(&r->mu);
  kmipResolveUnref(r);
  return rc;
}

/* TCP connect to host:port with a deadline (name resolution included).
** Returns the non-blocking socket or -1 with zWhy set. */
static int kmipTcpConnect(const char *zHost, int port, int64_t deadline,
                          char *zWhy, size_t nWhy){
  struct addrinfo *pRes = 0, *pAi;
  char zPort[16];
  int fd = -1, rc, bTimeout = 0;
  snprintf(zPort, sizeof(zPort), "%d", port);
  rc = kmipResolve(zHost, zPort, deadline, &pRes, &bTimeout);
  if( rc!=0 ){
    if( bTimeout ) snprintf(zWhy, nWhy, "cannot resolve host: timed out");
    else snprintf(zWhy, nWhy, "cannot resolve host: %s", gai_strerror(rc));
    return -1;
  }
  snprintf(zWhy, nWhy, "no address");
  for(pAi=pRes; pAi; pAi=pAi->ai_next){
    int err = 0;
    socklen_t nErr = sizeof(err);
    fd = socket(pAi->ai_family, pAi->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, pAi->ai_protocol);
    if( fd<0 ){
      snprintf(zWhy, nWhy, "socket: %s", strerror(errno));
      continue;
    }
    if( connect(fd, pAi->ai_addr, pAi->ai_addrlen)==0 ) break;
    if( errno==EINPROGRESS ){
      rc = kmipWait(fd, POLLOUT, deadline);
      if( rc==1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &nErr)==0 && err==0 ) break;
      if( rc==0 ) snprintf(zWhy, nWhy, "connect timed out");
      else snprintf(zWhy, nWhy, "connect: %s", strerror(err ? err : errno));
    }else{
      snprintf(zWhy, nWhy, "connect: %s", strerror(errno));
    }
    close(fd);
    fd = -1;
  }
  freeaddrinfo(pRes);
  if( fd>=0 ){
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  }
  return fd;
}

/* After an SSL call returned ret <= 0: wait for what it wants.  1 to call
** again, 0 timeout, -1 failure (connection broken or protocol error). */
static int kmipSslWait(SSL *pSsl, int fd, int ret, int64_t deadline){
  int err = SSL_get_error(pSsl, ret);
  int rc;
  if( err==SSL_ERROR_WANT_READ ) rc = kmipWait(fd, POLLIN, deadline);
  else if( err==SSL_ERROR_WANT_WRITE ) rc = kmipWait(fd, POLLOUT, deadline);
  else return -1;
  return rc;
}

/* Drop the connection.  bNotify: send close_notify (only in the process
** that opened it, and without waiting for the peer's). */
static void kmipDrop(KmipClient *p, int bNotify){
  if( p->pSsl ){
    if( bNotify ){
      (void)SSL_shutdown(p->pSsl);
    }
    SSL_free(p->pSsl);
    p->pSsl = 0;
  }
  if( p->fd>=0 ){
    close(p->fd);
    p->fd = -1;
  }
  ERR_clear_error();
}

/* Connect and handshake with server i.  TDE_OK or TDE_NOKEYSTORE with the
** reason in zWhy. */
static int kmipConnectOne(KmipClient *p, int i, char *zWhy, size_t nWhy){
  const char *zHost = p->cfg.azHost[i];
  int64_t deadline = kmipNowMs() + p->cfg.connectTimeoutMs;
  X509_VERIFY_PARAM *pParam;
  SSL *pSsl = 0;
  int fd, ret;

  fd = kmipTcpConnect(zHost, p->cfg.aPort[i], deadline, zWhy, nWhy);
  if( fd<0 ) return TDE_NOKEYSTORE;
  ERR_clear_error();
  pSsl = SSL_new(p->pCtx);
  if( pSsl==0 || SSL_set_fd(pSsl, fd)!=1 ){
    kmipSslWhy(zWhy, nWhy, "SSL_new failed");
    goto connect_fail;
  }
  pParam = SSL_get0_param(pSsl);
  X509_VERIFY_PARAM_set_hostflags(pParam, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  if( X509_VERIFY_PARAM_set1_ip_asc(pParam, zHost)!=1 ){
    /* Not an IP literal: a DNS name, checked against the SANs, and sent
    ** as SNI. */
    ERR_clear_error();
    if( X509_VERIFY_PARAM_set1_host(pParam, zHost, 0)!=1
     || SSL_set_tlsext_host_name(pSsl, zHost)!=1 ){
      kmipSslWhy(zWhy, nWhy, "cannot set the expected host name");
      goto connect_fail;
    }
  }
  for(;;){
    int w;
    ERR_clear_error();
    ret = SSL_connect(pSsl);
    if( ret==1 ) break;
    w = kmipSslWait(pSsl, fd, ret, deadline);
    if( w==1 ) continue;
    if( w==0 ){
      snprintf(zWhy, nWhy, "TLS handshake timed out");
    }else if( SSL_get_verify_result(pSsl)!=X509_V_OK ){
      snprintf(zWhy, nWhy, "server certificate refused: %s",
               X509_verify_cert_error_string(SSL_get_verify_result(pSsl)));
      ERR_clear_error();
    }else{
      kmipSslWhy(zWhy, nWhy, "connection closed during the TLS handshake "
                 "(client certificate refused?)");
    }
    goto connect_fail;
  }
  p->pSsl = pSsl;
  p->fd = fd;
  p->pid = getpid();
  p->iServer = i;
  return TDE_OK;

connect_fail:
  SSL_free(pSsl);
  close(fd);
  ERR_clear_error();
  return TDE_NOKEYSTORE;
}

/* Connect to the first server that answers, starting with p->iServer. */
static int kmipConnectAny(KmipClient *p){
  char zAll[1024];
  size_t nAll = 0;
  int k;
  zAll[0] = 0;
  for(k=0; k<p->cfg.nServer; k++){
    int i = (p->iServer + k) % p->cfg.nServer;
    char zWhy[256];
    int n;
    if( kmipConnectOne(p, i, zWhy, sizeof(zWhy))==TDE_OK ){
      if( k>0 ){
        tdeLog(TDE_LOG_WARNING, "kmip: failed over to %s:%d (%s)",
               p->cfg.azHost[i], p->cfg.aPort[i], zAll);
      }
      return TDE_OK;
    }
    n = snprintf(zAll+nAll, sizeof(zAll)-nAll, "%s%s:%d: %s", nAll ? "; " : "",
                 p->cfg.azHost[i], p->cfg.aPort[i], zWhy);
    if( n>0 && (size_t)n<sizeof(zAll)-nAll ) nAll += (size_t)n;
  }
  return tdeErr(TDE_NOKEYSTORE, "kmip: no key manager reachable (%s)", zAll);
}

/* Write all of a[0..n) before the deadline. */
static int kmipWriteAll(KmipClient *p, const uint8_t *a, size_t n, int64_t deadline){
  size_t nDone = 0;
  while( nDone<n ){
    size_t nStep = n - nDone;
    int ret, w;
    if( nStep>INT32_MAX ) nStep = INT32_MAX;
    ERR_clear_error();
    ret = SSL_write(p->pSsl, a+nDone, (int)nStep);
    if( ret>0 ){ nDone += (size_t)ret; continue; }
    w = kmipSslWait(p->pSsl, p->fd, ret, deadline);
    if( w==0 ) return KX_TIMEOUT;
    if( w<0 ) return KX_BROKEN;
  }
  return KX_OK;
}

/* Read exactly n bytes; *pnGot counts bytes read so far (also on failure). */
static int kmipReadAll(KmipClient *p, uint8_t *a, size_t n, int64_t deadline, size_t *pnGot){
  size_t nDone = 0;
  while( nDone<n ){
    size_t nStep = n - nDone;
    int ret, w;
    if( nStep>INT32_MAX ) nStep = INT32_MAX;
    ERR_clear_error();
    ret = SSL_read(p->pSsl, a+nDone, (int)nStep);
    if( ret>0 ){ nDone += (size_t)ret; *pnGot += (size_t)ret; continue; }
    w = kmipSslWait(p->pSsl, p->fd, ret, deadline);
    if( w==0 ) return KX_TIMEOUT;
    if( w<0 ) return KX_BROKEN;
  }
  return KX_OK;
}

/* One request and its response on the open connection. */
static int kmipExchange(KmipClient *p, const uint8_t *aReq, size_t nReq,
                        uint8_t **paResp, size_t *pnResp, size_t *pnGot){
  int64_t deadline = kmipNowMs() + p->cfg.requestTimeoutMs;
  uint8_t aHdr[TTLV_HEADER];
  uint8_t *aResp;
  size_t nTotal;
  int rc;

  *pnGot = 0;
  rc = kmipWriteAll(p, aReq, nReq, deadline);
  if( rc ) return rc;
  rc = kmipReadAll(p, aHdr, TTLV_HEADER, deadline, pnGot);
  if( rc ) return rc;
  if( ttlvMessageLength(aHdr, &nTotal)!=TDE_OK ) return KX_FORMAT;
  aResp = tdeSecureAlloc(nTotal);
  if( aResp==0 ) return KX_NOMEM;
  memcpy(aResp, aHdr, TTLV_HEADER);
  rc = kmipReadAll(p, aResp+TTLV_HEADER, nTotal-TTLV_HEADER, deadline, pnGot);
  if( rc ){
    tdeSecureFree(aResp, nTotal);
    return rc;
  }
  *paResp = aResp;
  *pnResp = nTotal;
  return KX_OK;
}

/* SIGPIPE blocked for this thread while we talk to a server; a SIGPIPE our
** writes raised is consumed on restore unless one was already pending. */
typedef struct KmipSigState {
  sigset_t old;
  int bPending;
} KmipSigState;

static void kmipSigpipeBlock(KmipSigState *pS){
  sigset_t set, pending;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  sigpending(&pending);
  pS->bPending = sigismember(&pending, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &set, &pS->old);
}

static void kmipSigpipeRestore(KmipSigState *pS){
  sigset_t set, pending;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  if( !pS->bPending ){
    struct timespec ts0 = {0, 0};
    sigpending(&pending);
    if( sigismember(&pending, SIGPIPE) ) (void)sigtimedwait(&set, 0, &ts0);
  }
  pthread_sigmask(SIG_SETMASK, &pS->old, 0);
}

int kmipClientCall(KmipClient *p, const uint8_t *aReq, size_t nReq,
                   uint8_t **paResp, size_t *pnResp){
  KmipSigState sig;
  int attempt, rc = TDE_OK;

  *paResp = 0;
  *pnResp = 0;
  if( p==0 || aReq==0 || nReq==0 ) return tdeErr(TDE_MISUSE, "kmip: bad request");
  kmipSigpipeBlock(&sig);

  pthread_mutex_lock(&p->mutex);
  if( p->pSsl && p->pid!=getpid() ){
    /* Inherited across fork(): the parent owns that TLS stream. */
    kmipDrop(p, 0);
  }
  for(attempt=0; attempt<2; attempt++){
    int bReused = p->pSsl!=0;
    size_t nGot = 0;
    int kx;
    if( !bReused ){
      rc = kmipConnectAny(p);
      if( rc!=TDE_OK ) break;
    }
    p->nRequest++;
    kx = kmipExchange(p, aReq, nReq, paResp, pnResp, &nGot);
    if( kx==KX_OK ){ rc = TDE_OK; break; }
    kmipDrop(p, 0);
    if( kx==KX_BROKEN && bReused && nGot==0 ){
      tdeLog(TDE_LOG_INFO, "kmip: kept-alive connection to %s:%d was closed; reconnecting",
             p->cfg.azHost[p->iServer], p->cfg.aPort[p->iServer]);
      continue;                  /* server closed an idle connection: once more */
    }
    if( kx==KX_TIMEOUT ){
      rc = tdeErr(TDE_IO, "kmip: %s:%d did not answer within %d ms",
                  p->cfg.azHost[p->iServer], p->cfg.aPort[p->iServer], p->cfg.requestTimeoutMs);
    }else if( kx==KX_FORMAT ){
      rc = tdeErr(TDE_FORMAT, "kmip: %s:%d sent a response that is not a KMIP message "
                  "(or larger than %d bytes)", p->cfg.azHost[p->iServer],
                  p->cfg.aPort[p->iServer], TTLV_MAX_MESSAGE);
    }else if( kx==KX_NOMEM ){
      rc = tdeErr(TDE_NOMEM, "kmip: out of memory");
    }else{
      rc = tdeErr(TDE_IO, "kmip: connection to %s:%d lost during a request",
                  p->cfg.azHost[p->iServer], p->cfg.aPort[p->iServer]);
    }
    break;
  }
  pthread_mutex_unlock(&p->mutex);
  kmipSigpipeRestore(&sig);
  return rc;
}

int kmipClientNew(const KmipClientConfig *pCfg, KmipClient **pp){
  KmipClient *p;
  char zWhy[256];
  int rc = TDE_OK;

  *pp = 0;
  if( pCfg->nServer<1 || pCfg->nServer>KMIP_MAX_SERVERS ){
    return tdeErr(TDE_CONFIG, "kmip: between 1 and %d servers", KMIP_MAX_SERVERS);
  }
  p = calloc(1, sizeof(*p));
  if( p==0 ) return tdeErr(TDE_NOMEM, "kmip: out of memory");
  p->cfg = *pCfg;
  p->fd = -1;
  pthread_mutex_init(&p->mutex, 0);
  ERR_clear_error();
  p->pCtx = SSL_CTX_new(TLS_client_method());
  if( p->pCtx==0 ){
    kmipSslWhy(zWhy, sizeof(zWhy), "SSL_CTX_new failed");
    rc = tdeErr(TDE_CRYPTO, "kmip: cannot create a TLS context: %s", zWhy);
    goto new_out;
  }
  SSL_CTX_set_min_proto_version(p->pCtx, TLS1_2_VERSION);
  SSL_CTX_set_verify(p->pCtx, SSL_VERIFY_PEER, 0);
  SSL_CTX_set_mode(p->pCtx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if( SSL_CTX_load_verify_locations(p->pCtx, pCfg->zCa, 0)!=1 ){
    kmipSslWhy(zWhy, sizeof(zWhy), "unreadable");
    rc = tdeErr(TDE_CONFIG, "kmip: cannot load CA file %s: %s", pCfg->zCa, zWhy);
    goto new_out;
  }
  if( SSL_CTX_use_certificate_chain_file(p->pCtx, pCfg->zCert)!=1 ){
    kmipSslWhy(zWhy, sizeof(zWhy), "unreadable");
    rc = tdeErr(TDE_CONFIG, "kmip: cannot load client certificate %s: %s", pCfg->zCert, zWhy);
    goto new_out;
  }
  if( SSL_CTX_use_PrivateKey_file(p->pCtx, pCfg->zKey, SSL_FILETYPE_PEM)!=1 ){
    kmipSslWhy(zWhy, sizeof(zWhy), "unreadable");
    rc = tdeErr(TDE_CONFIG, "kmip: cannot load client key %s: %s", pCfg->zKey, zWhy);
    goto new_out;
  }
  if( SSL_CTX_check_private_key(p->pCtx)!=1 ){
    ERR_clear_error();
    rc = tdeErr(TDE_CONFIG, "kmip: client key %s does not match certificate %s",
                pCfg->zKey, pCfg->zCert);
    goto new_out;
  }

new_out:
  if( rc!=TDE_OK ){
    kmipClientFree(p);
    return rc;
  }
  *pp = p;
  return TDE_OK;
}

void kmipClientFree(KmipClient *p){
  KmipSigState sig;
  if( p==0 ) return;
  kmipSigpipeBlock(&sig);
  kmipDrop(p, p->pSsl && p->pid==getpid());
  kmipSigpipeRestore(&sig);
  if( p->pCtx ) SSL_CTX_free(p->pCtx);
  pthread_mutex_destroy(&p->mutex);
  free(p);
}

void kmipClientServer(KmipClient *p, char *zOut, size_t nOut){
  pthread_mutex_lock(&p->mutex);
  snprintf(zOut, nOut, "%s:%d", p->cfg.azHost[p->iServer], p->cfg.aPort[p->iServer]);
  pthread_mutex_unlock(&p->mutex);
}

uint64_t kmipClientRequests(KmipClient *p){
  uint64_t n;
  pthread_mutex_lock(&p->mutex);
  n = p->nRequest;
  pthread_mutex_unlock(&p->mutex);
  return n;
}
