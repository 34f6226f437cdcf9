/*
** KMIP transport: one request message out, one response message back, over
** TLS 1.2+ with mutual authentication (client.c).
**
** A client holds the TLS context (server CA, client certificate and key),
** the list of servers to try in order, and at most one kept-alive TLS
** connection, shared by every thread of the process under a mutex.  A
** connection inherited across fork() is never used by the child: it opens
** its own.  It knows nothing of KMIP operations; kmip.c builds and reads
** the messages.
*/
#ifndef TDE_KMIP_CLIENT_H
#define TDE_KMIP_CLIENT_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#define KMIP_MAX_SERVERS 8
#define KMIP_HOST_MAX    255

typedef struct KmipClientConfig {
  int nServer;
  char azHost[KMIP_MAX_SERVERS][KMIP_HOST_MAX + 1];  /* DNS name or IP literal */
  int aPort[KMIP_MAX_SERVERS];
  char zCa[PATH_MAX];            /* PEM file of the CA(s) that sign servers */
  char zCert[PATH_MAX];          /* PEM client certificate (chain) */
  char zKey[PATH_MAX];           /* PEM client private key */
  int connectTimeoutMs;          /* TCP connect + TLS handshake, per server */
  int requestTimeoutMs;          /* one request: send and whole response */
} KmipClientConfig;

typedef struct KmipClient KmipClient;

/* Load the CA, certificate and key into a TLS context (no connection is
** made yet).  TDE_CONFIG with a message naming the file on failure. */
int kmipClientNew(const KmipClientConfig *pCfg, KmipClient **pp);
/* Close the connection (TLS close_notify when this process opened it) and
** free everything. */
void kmipClientFree(KmipClient *p);

/*
** Send aReq and read one complete response message (TTLV framing checked,
** at most TTLV_MAX_MESSAGE bytes).  Connects on first use or after a
** broken connection, trying each server in turn from the one that last
** worked.  If a kept-alive connection turns out broken before any byte of
** the response arrived, the request is sent once more on a new connection.
** *paResp is secure memory (it may hold key material): free it with
** tdeSecureFree(*paResp, *pnResp).  Errors: TDE_NOKEYSTORE (no server
** reachable, or the TLS handshake refused; the message says which server
** and why), TDE_IO (timeout or connection lost mid-request), TDE_FORMAT
** (bad framing), TDE_NOMEM.
*/
int kmipClientCall(KmipClient *p, const uint8_t *aReq, size_t nReq,
                   uint8_t **paResp, size_t *pnResp);

/* "host:port" of the server last used (or the first one configured). */
void kmipClientServer(KmipClient *p, char *zOut, size_t nOut);
/* Requests sent so far by this client (each try counts). */
uint64_t kmipClientRequests(KmipClient *p);

#endif /* TDE_KMIP_CLIENT_H */
