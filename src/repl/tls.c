/*
** Transport security of the standby (docs/FORMAT.md "Wire protocol"):
** the replication configuration file (repl_* keys) and mutual TLS with
** OpenSSL for the shipper (client) and the standby (server).
**
** Both sides present a certificate chained to repl_ca and require one from
** the peer (the server sets SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT);
** TLS 1.2 is the floor, 1.3 is preferred.  The shipper checks the
** standby's name (repl_peer_name, else the host of --to); the standby
** checks the primary's name when repl_peer_name is set.  Either side may
** pin the peer's public key (repl_peer_pubkey_sha256).  Every handshake
** has a deadline (repl_timeout_ms).
**
** Must never: accept a peer without a verified certificate, print or log
** the private key, read a key file that group or others can read.
*/
#include "repl/repl.h"
#include "cipher/cipher.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

static const char *const azReplKeys[] = {
  "repl_ca", "repl_cert", "repl_key", "repl_peer_name", "repl_peer_pubkey_sha256",
  "repl_timeout_ms", "repl_primary_database_id", "repl_audit_log", "repl_sign_key", "repl_primary_pubkey",
  "repl_mode", "repl_sync_timeout_ms", 0
};

/* zOut = zValue, a relative path resolved against zDir. */
static int cfgPath(const char *zDir, const char *zValue, char *zOut, size_t nOut){
  int n = zValue[0]=='/' ? snprintf(zOut, nOut, "%s", zValue) : snprintf(zOut, nOut, "%s/%s", zDir, zValue);
  if( n<0 || (size_t)n>=nOut ) return tdeErr(TDE_RANGE, "path too long: %s", zValue);
  return TDE_OK;
}

/* Parse "key = value" lines (the style of the tde configuration file:
** '#' comments, lower-case keys, each once; unknown keys are errors). */
static int cfgParse(TdeReplCfg *p, char *zText){
  char *zLine = zText, *zDir = 0;
  int iLine = 0, rc = TDE_OK;
  char aSeen[16] = {0};
  {
    char *zSlash = strrchr(p->zPath, '/');
    zDir = sqlite3_mprintf("%.*s", zSlash ? (int)(zSlash - p->zPath) : 1, zSlash ? p->zPath : ".");
    if( !zDir ) return TDE_NOMEM;
  }
  while( rc==TDE_OK && zLine && *zLine ){
    char *zEnd = strchr(zLine, '\n'), *zEq, *zKey, *zVal, *z;
    int k;
    iLine++;
    if( zEnd ) *zEnd = 0;
    while( isspace((unsigned char)*zLine) ) zLine++;
    if( *zLine==0 || *zLine=='#' ){ zLine = zEnd ? zEnd+1 : 0; continue; }
    zEq = strchr(zLine, '=');
    if( !zEq ){ rc = tdeErr(TDE_CONFIG, "%s:%d: expected 'key = value'", p->zPath, iLine); break; }
    zKey = zLine;
    for(z=zEq; z>zKey && isspace((unsigned char)z[-1]); z--){}
    *z = 0;
    zVal = zEq+1;
    while( isspace((unsigned char)*zVal) ) zVal++;
    for(z=zVal+strlen(zVal); z>zVal && isspace((unsigned char)z[-1]); z--){}
    *z = 0;
    for(k=0; azReplKeys[k] && strcmp(azReplKeys[k], zKey)!=0; k++){}
    if( !azReplKeys[k] ){
      rc = tdeErr(TDE_CONFIG, "%s:%d: unknown key (known: repl_ca, repl_cert, repl_key, repl_peer_name, "
                  "repl_peer_pubkey_sha256, repl_timeout_ms, repl_primary_database_id, repl_audit_log, "
                  "repl_sign_key, repl_primary_pubkey, repl_mode, repl_sync_timeout_ms)", p->zPath, iLine);
      break;
    }
    if( aSeen[k] ){ rc = tdeErr(TDE_CONFIG, "%s:%d: duplicate key '%s'", p->zPath, iLine, zKey); break; }
    aSeen[k] = 1;
    if( *zVal==0 ){ rc = tdeErr(TDE_CONFIG, "%s:%d: '%s' has no value", p->zPath, iLine, zKey); break; }
    if( strcmp(zKey, "repl_ca")==0 ) rc = cfgPath(zDir, zVal, p->zCa, sizeof(p->zCa));
    else if( strcmp(zKey, "repl_cert")==0 ) rc = cfgPath(zDir, zVal, p->zCert, sizeof(p->zCert));
    else if( strcmp(zKey, "repl_key")==0 ) rc = cfgPath(zDir, zVal, p->zKey, sizeof(p->zKey));
    else if( strcmp(zKey, "repl_audit_log")==0 ) rc = cfgPath(zDir, zVal, p->zAudit, sizeof(p->zAudit));
    else if( strcmp(zKey, "repl_mode")==0 ){
      if( strcmp(zVal, "sync")==0 ) p->bSync = 1;
      else if( strcmp(zVal, "async")!=0 ) rc = tdeErr(TDE_CONFIG, "%s:%d: repl_mode: async or sync", p->zPath, iLine);
    }else if( strcmp(zKey, "repl_sync_timeout_ms")==0 ){
      char *zE = 0;
      long v = strtol(zVal, &zE, 10);
      if( !zE || *zE || v<1 || v>(long)TDE_SYNC_MAX_WAIT_MS ){
        rc = tdeErr(TDE_CONFIG, "%s:%d: repl_sync_timeout_ms: 1 to %u", p->zPath, iLine, TDE_SYNC_MAX_WAIT_MS);
      }else{
        p->syncTimeoutMs = (int)v;
      }
    }
    else if( strcmp(zKey, "repl_sign_key")==0 ) rc = cfgPath(zDir, zVal, p->zSignKey, sizeof(p->zSignKey));
    else if( strcmp(zKey, "repl_primary_pubkey")==0 ){
      /* The primary's Ed25519 public key(s), PEM: one, or the current and
      ** the next one while the signing key is rotated. */
      char *zTok = zVal;
      while( rc==TDE_OK && zTok ){
        char *zComma = strchr(zTok, ','), zFile[4096];
        if( zComma ) *zComma = 0;
        while( isspace((unsigned char)*zTok) ) zTok++;
        for(z=zTok+strlen(zTok); z>zTok && isspace((unsigned char)z[-1]); z--){}
        *z = 0;
        if( p->nPubKey>=TDE_MAX_PUBKEYS ){
          rc = tdeErr(TDE_CONFIG, "%s:%d: repl_primary_pubkey: at most %d keys", p->zPath, iLine, TDE_MAX_PUBKEYS);
          break;
        }
        rc = cfgPath(zDir, zTok, zFile, sizeof(zFile));
        if( rc==TDE_OK ) rc = tdePubKeyLoad(zFile, &p->apPubKey[p->nPubKey]);
        if( rc==TDE_OK ) p->nPubKey++;
        zTok = zComma ? zComma+1 : 0;
      }
    }
    else if( strcmp(zKey, "repl_peer_name")==0 ){
      if( strlen(zVal)>=sizeof(p->zPeerName) ) rc = tdeErr(TDE_CONFIG, "%s:%d: name too long", p->zPath, iLine);
      else snprintf(p->zPeerName, sizeof(p->zPeerName), "%s", zVal);
    }else if( strcmp(zKey, "repl_peer_pubkey_sha256")==0 ){
      /* One or more SHA-256 of the peer's SubjectPublicKeyInfo (DER), in
      ** hex, separated by commas (a rotation lists the old and the new). */
      char *zTok = zVal;
      while( rc==TDE_OK && zTok ){
        char *zComma = strchr(zTok, ',');
        char zHex[80];
        size_t n = zComma ? (size_t)(zComma - zTok) : strlen(zTok);
        while( n && isspace((unsigned char)*zTok) ){ zTok++; n--; }
        while( n && isspace((unsigned char)zTok[n-1]) ) n--;
        if( n!=64 || p->nPin>=TDE_REPL_MAX_PINS ){
          rc = tdeErr(TDE_CONFIG, "%s:%d: repl_peer_pubkey_sha256: expected up to %d comma-separated "
                      "64-digit hex SHA-256 values", p->zPath, iLine, TDE_REPL_MAX_PINS);
          break;
        }
        memcpy(zHex, zTok, 64);
        zHex[64] = 0;
        if( tdeUnhex(zHex, p->aPin[p->nPin], 32) ){
          rc = tdeErr(TDE_CONFIG, "%s:%d: repl_peer_pubkey_sha256: not hex", p->zPath, iLine);
          break;
        }
        p->nPin++;
        zTok = zComma ? zComma+1 : 0;
      }
    }else if( strcmp(zKey, "repl_timeout_ms")==0 ){
      char *zE = 0;
      long v = strtol(zVal, &zE, 10);
      if( !zE || *zE || v<100 || v>600000 ){
        rc = tdeErr(TDE_CONFIG, "%s:%d: repl_timeout_ms: 100 to 600000", p->zPath, iLine);
      }else{
        p->timeoutMs = (int)v;
      }
    }else if( strcmp(zKey, "repl_primary_database_id")==0 ){
      if( tdeUnhex(zVal, p->aPrimaryDbid, 16) ){
        rc = tdeErr(TDE_CONFIG, "%s:%d: repl_primary_database_id: 32 hex digits (sqlite-tde standby "
                    "--status on the primary, or bytes 20-35 of its file)", p->zPath, iLine);
      }else{
        p->bPrimaryDbid = 1;
      }
    }
    zLine = zEnd ? zEnd+1 : 0;
  }
  sqlite3_free(zDir);
  return rc;
}

static int cfgCheckKeyFile(const char *zPath){
  struct stat st;
  if( stat(zPath, &st)!=0 ) return tdeErr(TDE_CONFIG, "repl_key %s: %s", zPath, strerror(errno));
  if( st.st_mode & 077 ){
    return tdeErr(TDE_CONFIG, "repl_key %s is accessible by group or others (mode %03o): chmod 600 %s",
                  zPath, (unsigned)(st.st_mode & 0777), zPath);
  }
  return TDE_OK;
}

static int cfgCtx(TdeReplCfg *p, int bServer){
  char zWhy[256];
  SSL_CTX *x = SSL_CTX_new(bServer ? TLS_server_method() : TLS_client_method());
  if( !x ){
    tdeSslWhy(zWhy, sizeof(zWhy), "SSL_CTX_new failed");
    return tdeErr(TDE_CRYPTO, "cannot create a TLS context: %s", zWhy);
  }
  p->pCtx = x;
  SSL_CTX_set_min_proto_version(x, TLS1_2_VERSION);
  SSL_CTX_set_options(x, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET | SSL_OP_NO_COMPRESSION);
  SSL_CTX_set_mode(x, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_ENABLE_PARTIAL_WRITE);
  SSL_CTX_set_session_cache_mode(x, SSL_SESS_CACHE_OFF);
  if( bServer ){
    SSL_CTX_set_num_tickets(x, 0);
    SSL_CTX_set_verify(x, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, 0);
  }else{
    SSL_CTX_set_verify(x, SSL_VERIFY_PEER, 0);
  }
  if( SSL_CTX_load_verify_locations(x, p->zCa, 0)!=1 ){
    tdeSslWhy(zWhy, sizeof(zWhy), "unreadable");
    return tdeErr(TDE_CONFIG, "repl_ca %s: %s", p->zCa, zWhy);
  }
  if( SSL_CTX_use_certificate_chain_file(x, p->zCert)!=1 ){
    tdeSslWhy(zWhy, sizeof(zWhy), "unreadable");
    return tdeErr(TDE_CONFIG, "repl_cert %s: %s", p->zCert, zWhy);
  }
  if( SSL_CTX_use_PrivateKey_file(x, p->zKey, SSL_FILETYPE_PEM)!=1 ){
    tdeSslWhy(zWhy, sizeof(zWhy), "unreadable");
    return tdeErr(TDE_CONFIG, "repl_key %s: %s", p->zKey, zWhy);
  }
  if( SSL_CTX_check_private_key(x)!=1 ){
    ERR_clear_error();
    return tdeErr(TDE_CONFIG, "repl_key %s does not match repl_cert %s", p->zKey, p->zCert);
  }
  return TDE_OK;
}

int tdeReplCfgLoad(const char *zPath, unsigned flags, int bServer, TdeReplCfg **pp){
  TdeReplCfg *p;
  char *zText = 0;
  size_t nText = 0;
  int rc = TDE_OK;
  *pp = 0;
  p = sqlite3_malloc(sizeof(*p));
  if( !p ) return TDE_NOMEM;
  memset(p, 0, sizeof(*p));
  p->timeoutMs = 10000;
  p->syncTimeoutMs = 2000;
  p->flags = flags;
  if( !zPath && !(flags & TDE_REPL_INSECURE_NO_TLS) ){
    rc = tdeErr(TDE_CONFIG, "the standby link needs TLS: give --repl-config FILE (repl_ca, repl_cert, "
                "repl_key), or --insecure-no-tls for a test setup");
    goto done;
  }
  if( zPath ){
    if( !realpath(zPath, p->zPath) ){ rc = tdeErr(TDE_CONFIG, "%s: %s", zPath, strerror(errno)); goto done; }
    rc = tdeReadFileAll(p->zPath, &zText, &nText);
    if( rc ) goto done;
    if( strlen(zText)!=nText ){ rc = tdeErr(TDE_CONFIG, "%s: contains a NUL byte", p->zPath); goto done; }
    rc = cfgParse(p, zText);
    if( rc ) goto done;
  }
  if( flags & TDE_REPL_SYNC ) p->bSync = 1;
  if( p->zSignKey[0] ){
    rc = tdeSignKeyLoad(p->zSignKey, &p->pSignKey);
    if( rc ) goto done;
  }
  if( flags & TDE_REPL_INSECURE_NO_TLS ){
    p->bInsecure = 1;
    goto done;
  }
  if( !p->zCa[0] || !p->zCert[0] || !p->zKey[0] ){
    rc = tdeErr(TDE_CONFIG, "%s: repl_ca, repl_cert and repl_key are all required for TLS", p->zPath);
    goto done;
  }
  rc = cfgCheckKeyFile(p->zKey);
  if( rc ) goto done;
  rc = cfgCtx(p, bServer);
done:
  sqlite3_free(zText);
  if( rc ){ tdeReplCfgFree(p); return rc; }
  *pp = p;
  return TDE_OK;
}

void tdeReplCfgFree(TdeReplCfg *p){
  if( !p ) return;
  if( p->pCtx ) SSL_CTX_free(p->pCtx);
  EVP_PKEY_free(p->pSignKey);
  for(int i=0; i<p->nPubKey; i++) EVP_PKEY_free(p->apPubKey[i]);
  sqlite3_free(p);
}

/* After the handshake: name the peer, check the pins. */
static int tlsCheckPeer(const TdeReplCfg *p, TdeConn *c, char *zWhy, size_t nWhy){
  X509 *pCert = SSL_get0_peer_certificate(c->pSsl);
  EVP_PKEY *pKey;
  uint8_t *aDer = 0, sum[32];
  int nDer, bMatch = 0;
  if( !pCert ){ snprintf(zWhy, nWhy, "the peer sent no certificate"); return TDE_AUTH; }
  X509_NAME_oneline(X509_get_subject_name(pCert), c->zPeerId, sizeof(c->zPeerId));
  if( p->nPin==0 ) return TDE_OK;
  pKey = X509_get0_pubkey(pCert);
  nDer = pKey ? i2d_PUBKEY(pKey, &aDer) : -1;
  if( nDer<=0 ){ snprintf(zWhy, nWhy, "cannot read the peer's public key"); ERR_clear_error(); return TDE_AUTH; }
  tdeSha256(aDer, (size_t)nDer, sum);
  OPENSSL_free(aDer);
  for(int i=0; i<p->nPin; i++) bMatch |= CRYPTO_memcmp(sum, p->aPin[i], 32)==0;
  if( !bMatch ){
    char zHex[65];
    tdeHex(sum, 32, zHex);
    snprintf(zWhy, nWhy, "the peer's public key (SHA-256 %s, %s) is not the pinned one", zHex, c->zPeerId);
    return TDE_AUTH;
  }
  return TDE_OK;
}

static int tlsHandshake(const TdeReplCfg *p, TdeConn *c, int bServer, const char *zName, char *zWhy, size_t nWhy){
  uint64_t deadline = tdeNowMs() + (uint64_t)p->timeoutMs;
  X509_VERIFY_PARAM *pParam;
  SSL *s = SSL_new(p->pCtx);
  zWhy[0] = 0;
  if( !s || SSL_set_fd(s, c->fd)!=1 ){
    tdeSslWhy(zWhy, nWhy, "SSL_new failed");
    SSL_free(s);
    return TDE_CRYPTO;
  }
  c->pSsl = s;
  pParam = SSL_get0_param(s);
  if( zName && zName[0] ){
    unsigned char aIp[16];
    int bIp = inet_pton(AF_INET, zName, aIp)==1 || inet_pton(AF_INET6, zName, aIp)==1;
    X509_VERIFY_PARAM_set_hostflags(pParam, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if( (bIp ? X509_VERIFY_PARAM_set1_ip_asc(pParam, zName) : X509_VERIFY_PARAM_set1_host(pParam, zName, 0))!=1
     || (!bServer && !bIp && SSL_set_tlsext_host_name(s, zName)!=1) ){
      tdeSslWhy(zWhy, nWhy, "cannot set the peer name");
      return TDE_CRYPTO;
    }
  }
  for(;;){
    int ret = bServer ? SSL_accept(s) : SSL_connect(s);
    int err;
    if( ret==1 ) break;
    err = SSL_get_error(s, ret);
    if( err==SSL_ERROR_WANT_READ || err==SSL_ERROR_WANT_WRITE ){
      if( !tdeNetWait(c->fd, err==SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline) ){
        snprintf(zWhy, nWhy, "TLS handshake timed out after %d ms", p->timeoutMs);
        return TDE_IO;
      }
      continue;
    }
    if( SSL_get_verify_result(s)!=X509_V_OK ){
      snprintf(zWhy, nWhy, "TLS: the peer's certificate: %s",
               X509_verify_cert_error_string(SSL_get_verify_result(s)));
      ERR_clear_error();
    }else{
      char zE[200];
      tdeSslWhy(zE, sizeof(zE), "connection closed during the handshake");
      snprintf(zWhy, nWhy, "TLS handshake failed: %s", zE);
    }
    return TDE_AUTH;
  }
  if( SSL_get_verify_result(s)!=X509_V_OK ){
    snprintf(zWhy, nWhy, "TLS: the peer's certificate: %s", X509_verify_cert_error_string(SSL_get_verify_result(s)));
    return TDE_AUTH;
  }
  return tlsCheckPeer(p, c, zWhy, nWhy);
}

int tdeTlsClient(const TdeReplCfg *p, TdeConn *c, const char *zHost, char *zWhy, size_t nWhy){
  if( p->bInsecure ) return TDE_OK;
  return tlsHandshake(p, c, 0, p->zPeerName[0] ? p->zPeerName : zHost, zWhy, nWhy);
}

int tdeTlsServer(const TdeReplCfg *p, TdeConn *c, char *zWhy, size_t nWhy){
  if( p->bInsecure ) return TDE_OK;
  return tlsHandshake(p, c, 1, p->zPeerName, zWhy, nWhy);
}

const char *tdeConnProto(const TdeConn *c){
  return c->pSsl ? SSL_get_version(c->pSsl) : "plaintext";
}
