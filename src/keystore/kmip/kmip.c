/*
** KMIP keystore provider ("kmip", TDE_KS_KMIP): master keys live in an
** enterprise key manager and never leave it.  A data key is wrapped by the
** server's Encrypt (AES-256-GCM, a 12-byte IV we draw, the header bytes as
** associated data, a 16-byte tag) and unwrapped by its Decrypt; the blob in
** the database header is iv(12) || ct || tag(16), mechanism
** TDE_MECH_AES256_GCM (docs/FORMAT.md).  Only when `kmip_allow_get = yes`
** (servers without Encrypt/Decrypt) is the key material fetched with Get
** into locked memory and the same GCM done locally; status then says so.
**
** Master key ids are the KMIP Name attribute, "<kmip_key_prefix>-<32 hex>":
** portable across servers, unlike unique identifiers.  The keys of this
** keystore are the symmetric keys the client certificate may see whose
** name starts with the prefix; the current key is the newest Active one.
** Names resolve to unique identifiers once and are cached, so after open
** the only traffic is one Decrypt per database open and one Encrypt per
** rewrap: never per page or transaction.
**
** Messages are KMIP 1.2-1.4 (negotiated with DiscoverVersions; GCM with
** associated data needs 1.4), one batch item per request, fields in
** specification order (PyKMIP rejects any other).  This file must never
** log key bytes, and must wipe every buffer that held a data key or key
** material.  Retirement is the key manager's business (revoke or deactivate
** keys there): xRetire is refused.  Lifecycle events are audited like the
** wallet's.
*/
#include "tde_int.h"
#include "config.h"
#include "keystore/keystore.h"
#include "keystore/kmip/client.h"
#include "keystore/kmip/ttlv.h"
#include "audit/audit.h"
#include "cipher/cipher.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* ---- KMIP constants (KMIP 1.4 specification, section 9.1.3) ------------ */

#define TAG_ATTRIBUTE          0x420008u
#define TAG_ATTRIBUTE_NAME     0x42000Au
#define TAG_ATTRIBUTE_VALUE    0x42000Bu
#define TAG_BATCH_COUNT        0x42000Du
#define TAG_BATCH_ITEM         0x42000Fu
#define TAG_BLOCK_CIPHER_MODE  0x420011u
#define TAG_CRYPTO_ALGORITHM   0x420028u
#define TAG_CRYPTO_PARAMS      0x42002Bu
#define TAG_IV_NONCE           0x42003Du
#define TAG_KEY_BLOCK          0x420040u
#define TAG_KEY_MATERIAL       0x420043u
#define TAG_KEY_VALUE          0x420045u
#define TAG_NAME_TYPE          0x420054u
#define TAG_NAME_VALUE         0x420055u
#define TAG_OBJECT_TYPE        0x420057u
#define TAG_OPERATION          0x42005Cu
#define TAG_PROTOCOL_VERSION   0x420069u
#define TAG_PV_MAJOR           0x42006Au
#define TAG_PV_MINOR           0x42006Bu
#define TAG_REQUEST_HEADER     0x420077u
#define TAG_REQUEST_MESSAGE    0x420078u
#define TAG_REQUEST_PAYLOAD    0x420079u
#define TAG_RESPONSE_HEADER    0x42007Au
#define TAG_RESPONSE_MESSAGE   0x42007Bu
#define TAG_RESPONSE_PAYLOAD   0x42007Cu
#define TAG_RESULT_MESSAGE     0x42007Du
#define TAG_RESULT_REASON      0x42007Eu
#define TAG_RESULT_STATUS      0x42007Fu
#define TAG_REVOCATION_REASON  0x420081u
#define TAG_REVOCATION_CODE    0x420082u
#define TAG_STATE              0x42008Du
#define TAG_SYMMETRIC_KEY      0x42008Fu
#define TAG_TEMPLATE_ATTRIBUTE 0x420091u
#define TAG_UNIQUE_ID          0x420094u
#define TAG_DATA               0x4200C2u
#define TAG_TAG_LENGTH         0x4200CEu
#define TAG_AEAD_DATA          0x4200FEu
#define TAG_AEAD_TAG           0x4200FFu
#define TAG_KEY_FORMAT_TYPE    0x420042u
#define TAG_SECRET_DATA        0x420085u
#define TAG_SECRET_DATA_TYPE   0x420086u

#define OP_CREATE              1
#define OP_REGISTER            3
#define OP_LOCATE              8
#define OP_GET                 10
#define OP_GET_ATTRIBUTES      11
#define OP_ACTIVATE            18
#define OP_REVOKE              19
#define OP_DESTROY             20
#define OP_DISCOVER_VERSIONS   30
#define OP_ENCRYPT             31
#define OP_DECRYPT             32

#define OBJ_SYMMETRIC_KEY      2
#define OBJ_SECRET_DATA        7
#define SECRET_DATA_SEED       2
#define KEY_FORMAT_OPAQUE      2
#define ALG_AES                3
#define MODE_GCM               9
#define NAME_TYPE_TEXT         1
#define USAGE_ENCRYPT_DECRYPT  (0x04 | 0x08)

#define STATE_PRE_ACTIVE       1
#define STATE_ACTIVE           2

#define RESULT_SUCCESS         0
#define REASON_NOT_FOUND       1
#define REASON_CRYPTO_FAILURE  10
#define REASON_PERMISSION      12
#define REASON_GENERAL         0x100

/* ---- provider constants -------------------------------------------------- */

#define KMIP_DEFAULT_PORT        5696
#define KMIP_DEFAULT_PREFIX      "sqlite-tde"
#define KMIP_PREFIX_MAX          64
#define KMIP_UID_MAX             128
#define KMIP_CONNECT_TIMEOUT_S   5
#define KMIP_REQUEST_TIMEOUT_S   10
#define KMIP_MAX_KEYS            1024
#define KMIP_LIST_TTL_S          30     /* a key list older than this is re-read */
#define KMIP_IV                  12
#define KMIP_TAG                 16
#define KMIP_KEY                 32

extern const tde_keystore_methods tdeKmipMethods;

static const char *const azKmipKeys[] = {
  "kmip_servers", "kmip_port", "kmip_ca", "kmip_client_cert", "kmip_client_key",
  "kmip_key_prefix", "kmip_connect_timeout", "kmip_request_timeout", "kmip_allow_get", 0
};

typedef struct KmipKey {
  char zName[TDE_KEYID_MAX + 1];
  char zUid[KMIP_UID_MAX + 1];
  int64_t created;           /* Initial Date, Unix time (0 if unknown) */
  uint32_t state;            /* KMIP State */
} KmipKey;

typedef struct Kmip {
  TdeKeystore base;          /* must be first */
  pthread_mutex_t mutex;     /* guards everything below */
  KmipClient *pClient;
  char zPrefix[KMIP_PREFIX_MAX + 1];
  char zLoc[512];
  int bAllowGet;
  int major, minor;          /* negotiated protocol version */
  KmipKey *aKey;             /* keys with our prefix, as last listed */
  int nKey;
  int64_t tListed;           /* monotonic seconds of the last listing, 0 never */
  TdeConfig *pAudit;         /* own copy of the audit_* settings, or NULL */
} Kmip;

/* Response of one request, decoded.  aBuf is secure memory. */
typedef struct KmipResp {
  uint8_t *aBuf;
  size_t nBuf;
  TtlvDoc doc;
  int iPayload;              /* response payload item, -1 if none */
} KmipResp;

static void kmipRespFree(KmipResp *r){
  ttlvDocFree(&r->doc);
  tdeSecureFree(r->aBuf, r->nBuf);
  memset(r, 0, sizeof(*r));
  r->iPayload = -1;
}

static int64_t kmipMonoSec(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec;
}

static const char *kmipStateName(uint32_t s){
  static const char *const az[] = {
    "Unknown", "Pre-Active", "Active", "Deactivated", "Compromised",
    "Destroyed", "Destroyed Compromised"
  };
  return s<TDE_ARRAY_SIZE(az) ? az[s] : "Unknown";
}

/* ---- configuration ------------------------------------------------------- */

/* Whole number in [mn, mx] or the default when absent. */
static int kmipConfigInt(const TdeConfig *cfg, const char *zKey, int mn, int mx, int *pVal){
  const char *z = tdeConfigGet(cfg, zKey);
  long v = 0;
  const char *p;
  if( z==0 ) return TDE_OK;
  for(p=z; *p; p++){
    if( *p<'0' || *p>'9' || v>mx ) break;
    v = v*10 + (*p - '0');
  }
  if( *p || p==z || v<mn || v>mx ){
    return tdeErr(TDE_CONFIG, "%s: %s must be a whole number from %d to %d",
                  cfg->zPath, zKey, mn, mx);
  }
  *pVal = (int)v;
  return TDE_OK;
}

/* "host[:port],[v6addr]:port,..." into the client configuration. */
static int kmipParseServers(const TdeConfig *cfg, int defPort, KmipClientConfig *pC){
  const char *z = tdeConfigGet(cfg, "kmip_servers");
  if( z==0 ){
    return tdeErr(TDE_CONFIG, "%s: missing required key 'kmip_servers' "
                  "(host[:port], comma-separated for failover)", cfg->zPath);
  }
  pC->nServer = 0;
  while( *z ){
    const char *zEnd = strchr(z, ',');
    const char *zHostB, *zHostE, *zPort = 0;
    size_t nItem;
    int port = defPort;
    if( zEnd==0 ) zEnd = z + strlen(z);
    while( z<zEnd && *z==' ' ) z++;
    nItem = (size_t)(zEnd - z);
    while( nItem && z[nItem-1]==' ' ) nItem--;
    if( nItem==0 ) goto bad_server;
    if( z[0]=='[' ){
      const char *zClose = memchr(z, ']', nItem);
      if( zClose==0 ) goto bad_server;
      zHostB = z+1; zHostE = zClose;
      if( zClose+1<z+nItem ){
        if( zClose[1]!=':' ) goto bad_server;
        zPort = zClose+2;
      }
    }else{
      const char *zColon = memchr(z, ':', nItem);
      zHostB = z;
      zHostE = zColon ? zColon : z+nItem;
      if( zColon ) zPort = zColon+1;
    }
    if( zPort ){
      const char *q;
      long v = 0;
      if( zPort>=z+nItem ) goto bad_server;
      for(q=zPort; q<z+nItem; q++){
        if( *q<'0' || *q>'9' || v>65535 ) goto bad_server;
        v = v*10 + (*q - '0');
      }
      if( v<1 || v>65535 ) goto bad_server;
      port = (int)v;
    }
    if( zHostE<=zHostB || (size_t)(zHostE-zHostB)>KMIP_HOST_MAX ) goto bad_server;
    if( pC->nServer>=KMIP_MAX_SERVERS ){
      return tdeErr(TDE_CONFIG, "%s: kmip_servers lists more than %d servers",
                    cfg->zPath, KMIP_MAX_SERVERS);
    }
    memcpy(pC->azHost[pC->nServer], zHostB, (size_t)(zHostE-zHostB));
    pC->azHost[pC->nServer][zHostE-zHostB] = 0;
    pC->aPort[pC->nServer] = port;
    pC->nServer++;
    z = *zEnd ? zEnd+1 : zEnd;
  }
  if( pC->nServer==0 ) goto bad_server;
  return TDE_OK;

bad_server:
  return tdeErr(TDE_CONFIG, "%s: kmip_servers: expected host[:port] entries separated "
                "by commas ([address]:port for IPv6)", cfg->zPath);
}

static int kmipConfigPath(const TdeConfig *cfg, const char *zKey, const char *zWhat,
                          char *zOut, size_t nOut){
  int rc = tdeConfigPath(cfg, zKey, zOut, nOut);
  if( rc==TDE_NOTFOUND ){
    return tdeErr(TDE_CONFIG, "%s: missing required key '%s' (%s)", cfg->zPath, zKey, zWhat);
  }
  return rc;
}

/* Everything a handle needs from cfg.  zPrefix gets the key name prefix. */
static int kmipConfig(const TdeConfig *cfg, KmipClientConfig *pC, char *zPrefix, int *pbAllowGet){
  int port = KMIP_DEFAULT_PORT;
  int tConnect = KMIP_CONNECT_TIMEOUT_S, tRequest = KMIP_REQUEST_TIMEOUT_S;
  const char *z;
  int rc;

  if( cfg==0 ) return tdeErr(TDE_MISUSE, "kmip: no configuration");
  memset(pC, 0, sizeof(*pC));
  rc = kmipConfigInt(cfg, "kmip_port", 1, 65535, &port);
  if( rc==TDE_OK ) rc = kmipConfigInt(cfg, "kmip_connect_timeout", 1, 300, &tConnect);
  if( rc==TDE_OK ) rc = kmipConfigInt(cfg, "kmip_request_timeout", 1, 600, &tRequest);
  if( rc==TDE_OK ) rc = kmipParseServers(cfg, port, pC);
  if( rc==TDE_OK ) rc = kmipConfigPath(cfg, "kmip_ca", "PEM file of the CA that signs the "
                                       "key manager's certificate", pC->zCa, sizeof(pC->zCa));
  if( rc==TDE_OK ) rc = kmipConfigPath(cfg, "kmip_client_cert", "PEM client certificate",
                                       pC->zCert, sizeof(pC->zCert));
  if( rc==TDE_OK ) rc = kmipConfigPath(cfg, "kmip_client_key", "PEM client private key",
                                       pC->zKey, sizeof(pC->zKey));
  if( rc!=TDE_OK ) return rc;
  pC->connectTimeoutMs = tConnect * 1000;
  pC->requestTimeoutMs = tRequest * 1000;

  z = tdeConfigGet(cfg, "kmip_key_prefix");
  if( z==0 ) z = KMIP_DEFAULT_PREFIX;
  if( strlen(z)>KMIP_PREFIX_MAX || z[strspn(z, "abcdefghijklmnopqrstuvwxyz"
      "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")]!=0 ){
    return tdeErr(TDE_CONFIG, "%s: kmip_key_prefix must be at most %d letters, digits, "
                  "'.', '_' or '-'", cfg->zPath, KMIP_PREFIX_MAX);
  }
  memcpy(zPrefix, z, strlen(z)+1);

  *pbAllowGet = 0;
  z = tdeConfigGet(cfg, "kmip_allow_get");
  if( z ){
    if( strcmp(z, "yes")==0 ) *pbAllowGet = 1;
    else if( strcmp(z, "no")!=0 ){
      return tdeErr(TDE_CONFIG, "%s: kmip_allow_get must be 'yes' or 'no'", cfg->zPath);
    }
  }
  return TDE_OK;
}


/* One audit line for a kmip operation (tdeAuditKeystoreOp). */
static void kmipAudit(const TdeConfig *pCfg, const char *zOp, const char *zKeyId,
                      int rc, const char *zDetail){
  tdeAuditKeystoreOp(pCfg, "kmip", zOp, zKeyId, rc, zDetail);
}

/* ---- requests ------------------------------------------------------------ */

/* Request message up to the opened payload of its single batch item. */
static void kmipBegin(TtlvEnc *e, int major, int minor, uint32_t op){
  ttlvEncInit(e);
  ttlvEncOpen(e, TAG_REQUEST_MESSAGE);
  ttlvEncOpen(e, TAG_REQUEST_HEADER);
  ttlvEncOpen(e, TAG_PROTOCOL_VERSION);
  ttlvEncInt(e, TAG_PV_MAJOR, major);
  ttlvEncInt(e, TAG_PV_MINOR, minor);
  ttlvEncClose(e);
  ttlvEncInt(e, TAG_BATCH_COUNT, 1);
  ttlvEncClose(e);
  ttlvEncOpen(e, TAG_BATCH_ITEM);
  ttlvEncEnum(e, TAG_OPERATION, op);
  ttlvEncOpen(e, TAG_REQUEST_PAYLOAD);
}

static void kmipEncText(TtlvEnc *e, uint32_t tag, const char *z){
  ttlvEncText(e, tag, z, strlen(z));
}

/* Attribute { Attribute Name, Attribute Value } openers. */
static void kmipAttrEnum(TtlvEnc *e, const char *zName, uint32_t v){
  ttlvEncOpen(e, TAG_ATTRIBUTE);
  kmipEncText(e, TAG_ATTRIBUTE_NAME, zName);
  ttlvEncEnum(e, TAG_ATTRIBUTE_VALUE, v);
  ttlvEncClose(e);
}
static void kmipAttrInt(TtlvEnc *e, const char *zName, int32_t v){
  ttlvEncOpen(e, TAG_ATTRIBUTE);
  kmipEncText(e, TAG_ATTRIBUTE_NAME, zName);
  ttlvEncInt(e, TAG_ATTRIBUTE_VALUE, v);
  ttlvEncClose(e);
}
static void kmipAttrName(TtlvEnc *e, const char *zKeyName){
  ttlvEncOpen(e, TAG_ATTRIBUTE);
  kmipEncText(e, TAG_ATTRIBUTE_NAME, "Name");
  ttlvEncOpen(e, TAG_ATTRIBUTE_VALUE);
  kmipEncText(e, TAG_NAME_VALUE, zKeyName);
  ttlvEncEnum(e, TAG_NAME_TYPE, NAME_TYPE_TEXT);
  ttlvEncClose(e);
  ttlvEncClose(e);
}

/* Text of a response field into zOut (NUL-terminated), or "" if absent. */
static void kmipRespText(KmipResp *r, int i, char *zOut, size_t nOut){
  const char *z;
  size_t n;
  zOut[0] = 0;
  if( i<0 || ttlvGetText(&r->doc, i, &z, &n)!=TDE_OK ) return;
  if( n>=nOut ) n = nOut-1;
  memcpy(zOut, z, n);
  zOut[n] = 0;
  for(size_t k=0; k<n; k++){
    if( (unsigned char)zOut[k]<0x20 || zOut[k]==0x7f ) zOut[k] = '?';   /* no control bytes in logs */
  }
}

/*
** Close the request, send it, decode the response and check it answers the
** operation with success.  On success r->iPayload is the response payload
** (-1 if the server sent none).  A failure result is TDE_NOKEY for Item Not
** Found, TDE_AUTH for Permission Denied (the caller explains the state),
** else TDE_ERROR, with the server's reason and message in the error text;
** *pReason (may be NULL) gets the KMIP Result Reason (0 when none).
** The encoder is freed (and wiped) in every case.
*/
static int kmipSend(Kmip *k, TtlvEnc *e, uint32_t op, const char *zWhat, KmipResp *r,
                    uint32_t *pReason){
  const uint8_t *aReq;
  size_t nReq;
  int rc, iMsg, iHdr, iBatch, iOp;
  uint32_t v;

  memset(r, 0, sizeof(*r));
  r->iPayload = -1;
  if( pReason ) *pReason = 0;
  ttlvEncClose(e);               /* payload */
  ttlvEncClose(e);               /* batch item */
  ttlvEncClose(e);               /* message */
  rc = ttlvEncFinish(e, &aReq, &nReq);
  if( rc!=TDE_OK ){
    ttlvEncFree(e);
    return tdeErr(rc, "kmip: cannot encode the %s request", zWhat);
  }
  rc = kmipClientCall(k->pClient, aReq, nReq, &r->aBuf, &r->nBuf);
  ttlvEncFree(e);
  if( rc!=TDE_OK ) return rc;
  rc = ttlvDecode(r->aBuf, r->nBuf, &r->doc);
  if( rc!=TDE_OK ){
    return tdeErr(TDE_FORMAT, "kmip: malformed %s response: %s", zWhat, r->doc.zErr);
  }
  iMsg = 0;
  if( r->doc.aItem[0].tag!=TAG_RESPONSE_MESSAGE ){
    return tdeErr(TDE_FORMAT, "kmip: %s: the server's reply is not a Response Message", zWhat);
  }
  iHdr = ttlvChild(&r->doc, iMsg, TAG_RESPONSE_HEADER);
  iBatch = ttlvChild(&r->doc, iMsg, TAG_BATCH_ITEM);
  if( iHdr<0 || iBatch<0 || ttlvCount(&r->doc, iMsg, TAG_BATCH_ITEM)!=1 ){
    return tdeErr(TDE_FORMAT, "kmip: %s: response without a header or with %d batch items",
                  zWhat, ttlvCount(&r->doc, iMsg, TAG_BATCH_ITEM));
  }
  iOp = ttlvChild(&r->doc, iBatch, TAG_OPERATION);
  if( iOp>=0 && (ttlvGetEnum(&r->doc, iOp, &v)!=TDE_OK || v!=op) ){
    return tdeErr(TDE_FORMAT, "kmip: %s: the response answers another operation", zWhat);
  }
  if( ttlvGetEnum(&r->doc, ttlvChild(&r->doc, iBatch, TAG_RESULT_STATUS), &v)!=TDE_OK ){
    return tdeErr(TDE_FORMAT, "kmip: %s: response without a result status: %s",
                  zWhat, r->doc.zErr);
  }
  if( v!=RESULT_SUCCESS ){
    char zMsg[200];
    uint32_t reason = 0;
    int iReason = ttlvChild(&r->doc, iBatch, TAG_RESULT_REASON);
    if( iReason>=0 ) (void)ttlvGetEnum(&r->doc, iReason, &reason);
    kmipRespText(r, ttlvChild(&r->doc, iBatch, TAG_RESULT_MESSAGE), zMsg, sizeof(zMsg));
    if( pReason ) *pReason = reason;
    rc = reason==REASON_NOT_FOUND ? TDE_NOKEY
       : reason==REASON_PERMISSION ? TDE_AUTH : TDE_ERROR;
    return tdeErr(rc, "kmip: %s failed on the key manager (result status %u, reason %u)%s%s",
                  zWhat, (unsigned)v, (unsigned)reason, zMsg[0] ? ": " : "", zMsg);
  }
  r->iPayload = ttlvChild(&r->doc, iBatch, TAG_RESPONSE_PAYLOAD);
  return TDE_OK;
}

/* Negotiate the protocol version: we speak 1.4, 1.3 and 1.2. */
static int kmipDiscover(Kmip *k){
  static const int aMinor[] = {4, 3, 2};
  TtlvEnc e;
  KmipResp r;
  size_t i;
  int rc, iPv;
  kmipBegin(&e, 1, 2, OP_DISCOVER_VERSIONS);
  for(i=0; i<TDE_ARRAY_SIZE(aMinor); i++){
    ttlvEncOpen(&e, TAG_PROTOCOL_VERSION);
    ttlvEncInt(&e, TAG_PV_MAJOR, 1);
    ttlvEncInt(&e, TAG_PV_MINOR, aMinor[i]);
    ttlvEncClose(&e);
  }
  rc = kmipSend(k, &e, OP_DISCOVER_VERSIONS, "DiscoverVersions", &r, 0);
  if( rc==TDE_OK ){
    int32_t major = 0, minor = 0;
    iPv = ttlvChild(&r.doc, r.iPayload, TAG_PROTOCOL_VERSION);
    if( iPv<0
     || ttlvGetInt(&r.doc, ttlvChild(&r.doc, iPv, TAG_PV_MAJOR), &major)!=TDE_OK
     || ttlvGetInt(&r.doc, ttlvChild(&r.doc, iPv, TAG_PV_MINOR), &minor)!=TDE_OK
     || major!=1 || minor<2 || minor>4 ){
      rc = tdeErr(TDE_UNSUPPORTED, "kmip: the key manager supports none of KMIP 1.2, "
                  "1.3 and 1.4");
    }else{
      k->major = major;
      k->minor = minor;
    }
  }
  kmipRespFree(&r);
  if( rc==TDE_OK && k->minor<4 && !k->bAllowGet ){
    rc = tdeErr(TDE_UNSUPPORTED, "kmip: the key manager speaks KMIP 1.%d; AES-GCM "
                "Encrypt/Decrypt with associated data needs 1.4 (or set kmip_allow_get = "
                "yes to fetch key material instead)", k->minor);
  }
  return rc;
}

/* Name and state (and Initial Date) of object zUid. */
static int kmipGetAttrs(Kmip *k, const char *zUid, KmipKey *pKey){
  TtlvEnc e;
  KmipResp r;
  int rc, i;
  kmipBegin(&e, k->major, k->minor, OP_GET_ATTRIBUTES);
  kmipEncText(&e, TAG_UNIQUE_ID, zUid);
  kmipEncText(&e, TAG_ATTRIBUTE_NAME, "Name");
  kmipEncText(&e, TAG_ATTRIBUTE_NAME, "State");
  kmipEncText(&e, TAG_ATTRIBUTE_NAME, "Initial Date");
  rc = kmipSend(k, &e, OP_GET_ATTRIBUTES, "Get Attributes", &r, 0);
  if( rc==TDE_OK ){
    memset(pKey, 0, sizeof(*pKey));
    snprintf(pKey->zUid, sizeof(pKey->zUid), "%s", zUid);
    for(i=ttlvChild(&r.doc, r.iPayload, TAG_ATTRIBUTE); i>=0;
        i=ttlvNextSibling(&r.doc, i, TAG_ATTRIBUTE)){
      char zName[64];
      int iVal = ttlvChild(&r.doc, i, TAG_ATTRIBUTE_VALUE);
      kmipRespText(&r, ttlvChild(&r.doc, i, TAG_ATTRIBUTE_NAME), zName, sizeof(zName));
      if( strcmp(zName, "Name")==0 && pKey->zName[0]==0 ){
        kmipRespText(&r, ttlvChild(&r.doc, iVal, TAG_NAME_VALUE), pKey->zName, sizeof(pKey->zName));
      }else if( strcmp(zName, "State")==0 ){
        if( ttlvGetEnum(&r.doc, iVal, &pKey->state)!=TDE_OK ) pKey->state = 0;
      }else if( strcmp(zName, "Initial Date")==0 ){
        if( ttlvGetDateTime(&r.doc, iVal, &pKey->created)!=TDE_OK ) pKey->created = 0;
      }
    }
  }
  kmipRespFree(&r);
  return rc;
}

/*
** Locate symmetric keys, by name if zName is not NULL.  Unique identifiers
** go to azUid (up to nMax); *pn gets how many.
*/
static int kmipLocate(Kmip *k, const char *zName, char (*azUid)[KMIP_UID_MAX+1], int nMax, int *pn){
  TtlvEnc e;
  KmipResp r;
  int rc, i;
  *pn = 0;
  kmipBegin(&e, k->major, k->minor, OP_LOCATE);
  kmipAttrEnum(&e, "Object Type", OBJ_SYMMETRIC_KEY);
  if( zName ) kmipAttrName(&e, zName);
  rc = kmipSend(k, &e, OP_LOCATE, "Locate", &r, 0);
  if( rc==TDE_OK ){
    for(i=ttlvChild(&r.doc, r.iPayload, TAG_UNIQUE_ID); i>=0 && *pn<nMax;
        i=ttlvNextSibling(&r.doc, i, TAG_UNIQUE_ID)){
      kmipRespText(&r, i, azUid[*pn], KMIP_UID_MAX+1);
      if( azUid[*pn][0] ) (*pn)++;
    }
  }
  kmipRespFree(&r);
  return rc;
}

static int kmipHasPrefix(const Kmip *k, const char *zName){
  size_t n = strlen(k->zPrefix);
  return strncmp(zName, k->zPrefix, n)==0 && zName[n]=='-';
}

/* Re-read the list of our keys from the server (caller holds the mutex). */
static int kmipRefresh(Kmip *k){
  char (*azUid)[KMIP_UID_MAX+1] = 0;
  KmipKey *aNew = 0;
  int nUid = 0, nNew = 0, i, rc;
  azUid = calloc(KMIP_MAX_KEYS, sizeof(*azUid));
  aNew = calloc(KMIP_MAX_KEYS, sizeof(*aNew));
  if( azUid==0 || aNew==0 ){ rc = tdeErr(TDE_NOMEM, "kmip: out of memory"); goto refresh_out; }
  rc = kmipLocate(k, 0, azUid, KMIP_MAX_KEYS, &nUid);
  for(i=0; rc==TDE_OK && i<nUid; i++){
    KmipKey key;
    rc = kmipGetAttrs(k, azUid[i], &key);
    if( rc==TDE_NOKEY ){ rc = TDE_OK; tdeErrClear(); continue; }   /* destroyed meanwhile */
    if( rc==TDE_OK && kmipHasPrefix(k, key.zName) ) aNew[nNew++] = key;
  }
  if( rc==TDE_OK ){
    KmipKey *aFit = realloc(aNew, (size_t)(nNew ? nNew : 1) * sizeof(KmipKey));
    if( aFit ) aNew = aFit;        /* give back the unused slots */
    free(k->aKey);
    k->aKey = aNew;
    k->nKey = nNew;
    k->tListed = kmipMonoSec();
    aNew = 0;
  }
refresh_out:
  free(aNew);
  free(azUid);
  return rc;
}

/* Index of the current key: newest Active (ties: greatest name); -1 none. */
static int kmipCurrentIndex(const Kmip *k){
  int i, iBest = -1;
  for(i=0; i<k->nKey; i++){
    const KmipKey *p = &k->aKey[i];
    if( p->state!=STATE_ACTIVE ) continue;
    if( iBest<0 || p->created>k->aKey[iBest].created
     || (p->created==k->aKey[iBest].created && strcmp(p->zName, k->aKey[iBest].zName)>0) ){
      iBest = i;
    }
  }
  return iBest;
}

/* Find a key by name in the cache, else ask the server (one Locate and one
** Get Attributes) and remember it.  Caller holds the mutex. */
static KmipKey *kmipFind(Kmip *k, const char *zName, int *pRc){
  char azUid[1][KMIP_UID_MAX+1];
  KmipKey key, *aNew;
  int i, n = 0, rc;
  *pRc = TDE_OK;
  for(i=0; i<k->nKey; i++){
    if( strcmp(k->aKey[i].zName, zName)==0 ) return &k->aKey[i];
  }
  if( !kmipHasPrefix(k, zName) ){
    *pRc = tdeErr(TDE_NOKEY, "kmip: '%s' is not a key of this keystore (prefix '%s')",
                  zName, k->zPrefix);
    return 0;
  }
  rc = kmipLocate(k, zName, azUid, 1, &n);
  if( rc==TDE_OK && n==0 ){
    rc = tdeErr(TDE_NOKEY, "kmip: no master key named '%s' on the key manager", zName);
  }
  if( rc==TDE_OK ) rc = kmipGetAttrs(k, azUid[0], &key);
  if( rc==TDE_OK && k->nKey>=KMIP_MAX_KEYS ) rc = tdeErr(TDE_RANGE, "kmip: too many keys");
  if( rc!=TDE_OK ){ *pRc = rc; return 0; }
  aNew = realloc(k->aKey, (size_t)(k->nKey+1) * sizeof(KmipKey));
  if( aNew==0 ){ *pRc = tdeErr(TDE_NOMEM, "kmip: out of memory"); return 0; }
  k->aKey = aNew;
  snprintf(key.zName, sizeof(key.zName), "%s", zName);
  k->aKey[k->nKey] = key;
  return &k->aKey[k->nKey++];
}

/* After a refused Encrypt/Decrypt: re-read the key's state and name it. */
static int kmipExplainState(Kmip *k, KmipKey *pKey, const char *zOp){
  char zSaved[256];
  KmipKey now;
  snprintf(zSaved, sizeof(zSaved), "%s", tde_last_error());
  if( kmipGetAttrs(k, pKey->zUid, &now)==TDE_OK ){
    pKey->state = now.state;
    if( now.state!=STATE_ACTIVE ){
      /* Logged as well: callers up the stack may replace the detail. */
      tdeLog(TDE_LOG_ERROR, "kmip: master key '%s' is %s on the key manager; it cannot "
             "%s (only Active keys can)", pKey->zName, kmipStateName(now.state), zOp);
      return tdeErr(TDE_NOKEY, "kmip: master key '%s' is %s on the key manager; it "
                    "cannot %s (only Active keys can)", pKey->zName,
                    kmipStateName(now.state), zOp);
    }
  }
  return tdeErr(TDE_AUTH, "%s", zSaved);
}

/* Create an AES-256 key named zName and activate it. */
static int kmipCreateKey(Kmip *k, const char *zName, KmipKey *pKey){
  TtlvEnc e;
  KmipResp r;
  int rc;
  memset(pKey, 0, sizeof(*pKey));
  kmipBegin(&e, k->major, k->minor, OP_CREATE);
  ttlvEncEnum(&e, TAG_OBJECT_TYPE, OBJ_SYMMETRIC_KEY);
  ttlvEncOpen(&e, TAG_TEMPLATE_ATTRIBUTE);
  kmipAttrEnum(&e, "Cryptographic Algorithm", ALG_AES);
  kmipAttrInt(&e, "Cryptographic Length", 256);
  kmipAttrInt(&e, "Cryptographic Usage Mask", USAGE_ENCRYPT_DECRYPT);
  kmipAttrName(&e, zName);
  ttlvEncClose(&e);
  rc = kmipSend(k, &e, OP_CREATE, "Create", &r, 0);
  if( rc==TDE_OK ){
    kmipRespText(&r, ttlvChild(&r.doc, r.iPayload, TAG_UNIQUE_ID), pKey->zUid, sizeof(pKey->zUid));
    if( pKey->zUid[0]==0 ) rc = tdeErr(TDE_FORMAT, "kmip: Create response without a unique identifier");
  }
  kmipRespFree(&r);
  if( rc!=TDE_OK ) return rc;
  kmipBegin(&e, k->major, k->minor, OP_ACTIVATE);
  kmipEncText(&e, TAG_UNIQUE_ID, pKey->zUid);
  rc = kmipSend(k, &e, OP_ACTIVATE, "Activate", &r, 0);
  kmipRespFree(&r);
  if( rc!=TDE_OK ) return rc;
  snprintf(pKey->zName, sizeof(pKey->zName), "%s", zName);
  pKey->state = STATE_ACTIVE;
  pKey->created = (int64_t)time(0);
  return TDE_OK;
}

/* "<prefix>-<32 hex>": the first 6 bytes are the creation time in
** milliseconds (big-endian), the other 10 random, so names sort by age
** where the server's Initial Date (whole seconds) ties. */
static int kmipNewName(const Kmip *k, char *zName, size_t nName){
  static const char hex[] = "0123456789abcdef";
  uint8_t a[16];
  char zHex[33];
  struct timespec ts;
  uint64_t ms;
  int i, rc = tdeRandom(a+6, sizeof(a)-6);
  if( rc!=TDE_OK ) return tdeErr(rc, "kmip: random number generator failed");
  clock_gettime(CLOCK_REALTIME, &ts);
  ms = (uint64_t)ts.tv_sec*1000 + (uint64_t)ts.tv_nsec/1000000;
  for(i=0; i<6; i++) a[i] = (uint8_t)(ms >> (8*(5-i)));
  for(i=0; i<16; i++){
    zHex[2*i] = hex[a[i]>>4];
    zHex[2*i+1] = hex[a[i]&15];
  }
  zHex[32] = 0;
  if( (size_t)snprintf(zName, nName, "%s-%s", k->zPrefix, zHex)>=nName ){
    return tdeErr(TDE_RANGE, "kmip: key id buffer too small");
  }
  return TDE_OK;
}

/* Key material of pKey (allow_get only) into aKey (secure, 32 bytes). */
static int kmipGetMaterial(Kmip *k, const KmipKey *pKey, uint8_t *aKey){
  TtlvEnc e;
  KmipResp r;
  const uint8_t *a;
  size_t n;
  int rc, i;
  kmipBegin(&e, k->major, k->minor, OP_GET);
  kmipEncText(&e, TAG_UNIQUE_ID, pKey->zUid);
  rc = kmipSend(k, &e, OP_GET, "Get", &r, 0);
  if( rc==TDE_OK ){
    i = ttlvChild(&r.doc, r.iPayload, TAG_SYMMETRIC_KEY);
    i = ttlvChild(&r.doc, i, TAG_KEY_BLOCK);
    i = ttlvChild(&r.doc, i, TAG_KEY_VALUE);
    i = ttlvChild(&r.doc, i, TAG_KEY_MATERIAL);
    if( ttlvGetBytes(&r.doc, i, &a, &n)!=TDE_OK || n!=KMIP_KEY ){
      rc = tdeErr(TDE_FORMAT, "kmip: Get of '%s' did not return 32 bytes of raw key material",
                  pKey->zName);
    }else{
      memcpy(aKey, a, KMIP_KEY);
    }
  }
  kmipRespFree(&r);
  return rc;
}

static void kmipCryptoParams(TtlvEnc *e){
  ttlvEncOpen(e, TAG_CRYPTO_PARAMS);
  ttlvEncEnum(e, TAG_BLOCK_CIPHER_MODE, MODE_GCM);
  ttlvEncEnum(e, TAG_CRYPTO_ALGORITHM, ALG_AES);
  ttlvEncInt(e, TAG_TAG_LENGTH, KMIP_TAG);
  ttlvEncClose(e);
}

/* ---- methods ------------------------------------------------------------- */

static void kmipFreeHandle(Kmip *k){
  if( k==0 ) return;
  kmipClientFree(k->pClient);
  free(k->aKey);
  tdeConfigFree(k->pAudit);
  pthread_mutex_destroy(&k->mutex);
  free(k);
}

/* A connected handle with a negotiated version (no key listing yet). */
static int kmipConnect(const TdeConfig *cfg, Kmip **pp){
  KmipClientConfig cc;
  Kmip *k;
  int rc;
  char zServers[400];
  size_t nUsed = 0;
  int i;

  *pp = 0;
  k = calloc(1, sizeof(*k));
  if( k==0 ) return tdeErr(TDE_NOMEM, "kmip: out of memory");
  pthread_mutex_init(&k->mutex, 0);
  k->base.pMethods = &tdeKmipMethods;
  rc = kmipConfig(cfg, &cc, k->zPrefix, &k->bAllowGet);
  if( rc==TDE_OK ) rc = tdeConfigCopyAudit(cfg, &k->pAudit);
  if( rc==TDE_OK ) rc = kmipClientNew(&cc, &k->pClient);
  if( rc==TDE_OK ) rc = kmipDiscover(k);
  if( rc!=TDE_OK ){
    kmipFreeHandle(k);
    return rc;
  }
  zServers[0] = 0;
  for(i=0; i<cc.nServer; i++){
    int n = snprintf(zServers+nUsed, sizeof(zServers)-nUsed, "%s%s:%d", i ? "," : "",
                     cc.azHost[i], cc.aPort[i]);
    if( n<0 || (size_t)n>=sizeof(zServers)-nUsed ) break;
    nUsed += (size_t)n;
  }
  snprintf(k->zLoc, sizeof(k->zLoc), "kmip://%s (KMIP 1.%d, %s)", zServers, k->minor,
           k->bAllowGet ? "allow_get: key material fetched into locked memory"
                        : "wrapping done by the key manager");
  *pp = k;
  return TDE_OK;
}

static int kmipOpen(const TdeConfig *cfg, const char *zPassword, TdeKeystore **pp){
  Kmip *k = 0;
  int rc;
  TDE_UNUSED(zPassword);           /* the client certificate authenticates */
  if( pp==0 ) return tdeErr(TDE_MISUSE, "kmip: no output pointer");
  *pp = 0;
  rc = kmipConnect(cfg, &k);
  if( rc==TDE_OK ) rc = kmipRefresh(k);
  if( rc!=TDE_OK ){
    kmipFreeHandle(k);
    return rc;
  }
  *pp = &k->base;
  return TDE_OK;
}

static void kmipClose(TdeKeystore *p){
  kmipFreeHandle((Kmip *)p);
}

static int kmipCreate(const TdeConfig *cfg, const char *zPassword, char *zKeyId, size_t nKeyId){
  Kmip *k = 0;
  KmipKey key;
  char zName[TDE_KEYID_MAX + 1];
  TdeConfig *pAudit = 0;
  int rc;

  TDE_UNUSED(zPassword);
  zName[0] = 0;
  if( zKeyId && nKeyId ) zKeyId[0] = 0;
  if( cfg && tdeConfigCopyAudit(cfg, &pAudit)!=TDE_OK ) pAudit = 0;
  rc = kmipConnect(cfg, &k);
  if( rc==TDE_OK ) rc = kmipRefresh(k);
  if( rc==TDE_OK && k->nKey>0 ){
    rc = tdeErr(TDE_EXISTS, "kmip: the key manager already holds %d master key(s) named "
                "'%s-*' for this client; use a different kmip_key_prefix", k->nKey, k->zPrefix);
  }
  if( rc==TDE_OK ) rc = kmipNewName(k, zName, sizeof(zName));
  if( rc==TDE_OK && (zKeyId==0 || strlen(zName)>=nKeyId) ){
    rc = tdeErr(TDE_RANGE, "kmip: key id buffer too small");
  }
  if( rc==TDE_OK ) rc = kmipCreateKey(k, zName, &key);
  if( rc==TDE_OK ){
    memcpy(zKeyId, zName, strlen(zName)+1);
    tdeLog(TDE_LOG_INFO, "kmip: keystore created with master key %s on %s", zName, k->zLoc);
  }
  kmipAudit(pAudit, "keystore_create", rc==TDE_OK ? zName : 0, rc, 0);
  if( rc==TDE_OK ) kmipAudit(pAudit, "master_key_create", zName, rc, 0);
  tdeConfigFree(pAudit);
  kmipFreeHandle(k);
  return rc;
}

static int kmipDescribe(TdeKeystore *p, char *zLoc, size_t nLoc, int *pbAutoLogin){
  Kmip *k = (Kmip *)p;
  size_t n;
  if( k==0 ) return tdeErr(TDE_MISUSE, "kmip: no handle");
  if( pbAutoLogin ) *pbAutoLogin = 1;    /* no password: the certificate logs in */
  n = strlen(k->zLoc);
  if( zLoc==0 || nLoc<=n ){
    if( zLoc && nLoc ){
      memcpy(zLoc, k->zLoc, nLoc-1);
      zLoc[nLoc-1] = 0;
    }
    return TDE_OK;
  }
  memcpy(zLoc, k->zLoc, n+1);
  return TDE_OK;
}

/* The listing is re-read when older than KMIP_LIST_TTL_S (keys made by
** other processes), but a failing server leaves the cached answer. */
static int kmipCurrentKey(TdeKeystore *p, char *zKeyId, size_t nKeyId){
  Kmip *k = (Kmip *)p;
  int i, rc = TDE_OK;
  if( k==0 || zKeyId==0 || nKeyId==0 ) return tdeErr(TDE_MISUSE, "kmip: bad arguments");
  zKeyId[0] = 0;
  pthread_mutex_lock(&k->mutex);
  if( kmipMonoSec() - k->tListed > KMIP_LIST_TTL_S && kmipRefresh(k)!=TDE_OK ){
    tdeLog(TDE_LOG_WARNING, "kmip: cannot refresh the key list (%s); using the cached one",
           tde_last_error());
    tdeErrClear();
  }
  i = kmipCurrentIndex(k);
  if( i<0 ){
    rc = tdeErr(TDE_NOKEY, "kmip: the key manager holds no Active master key named '%s-*'",
                k->zPrefix);
  }else if( strlen(k->aKey[i].zName)>=nKeyId ){
    rc = tdeErr(TDE_RANGE, "kmip: key id buffer too small");
  }else{
    memcpy(zKeyId, k->aKey[i].zName, strlen(k->aKey[i].zName)+1);
  }
  pthread_mutex_unlock(&k->mutex);
  return rc;
}

static int kmipHasKey(TdeKeystore *p, const char *zKeyId){
  Kmip *k = (Kmip *)p;
  int rc, bHas;
  if( k==0 || zKeyId==0 ) return 0;
  pthread_mutex_lock(&k->mutex);
  bHas = kmipFind(k, zKeyId, &rc)!=0;
  pthread_mutex_unlock(&k->mutex);
  if( !bHas ) tdeErrClear();
  return bHas;
}

static int kmipNewKey(TdeKeystore *p, char *zKeyId, size_t nKeyId){
  Kmip *k = (Kmip *)p;
  char zName[TDE_KEYID_MAX + 1];
  KmipKey key, *aNew;
  int rc;
  zName[0] = 0;
  if( k==0 ) return tdeErr(TDE_MISUSE, "kmip: no handle");
  if( zKeyId && nKeyId ) zKeyId[0] = 0;
  pthread_mutex_lock(&k->mutex);
  rc = kmipNewName(k, zName, sizeof(zName));
  if( rc==TDE_OK && (zKeyId==0 || strlen(zName)>=nKeyId) ){
    rc = tdeErr(TDE_RANGE, "kmip: key id buffer too small");
  }
  if( rc==TDE_OK ) rc = kmipCreateKey(k, zName, &key);
  if( rc==TDE_OK ){
    /* Newest by construction, whatever the server's clock says. */
    int iCur = kmipCurrentIndex(k);
    if( iCur>=0 && key.created<=k->aKey[iCur].created ) key.created = k->aKey[iCur].created + 1;
    aNew = realloc(k->aKey, (size_t)(k->nKey+1) * sizeof(KmipKey));
    if( aNew==0 ){
      rc = tdeErr(TDE_NOMEM, "kmip: out of memory");
    }else{
      k->aKey = aNew;
      k->aKey[k->nKey++] = key;
      memcpy(zKeyId, zName, strlen(zName)+1);
      tdeLog(TDE_LOG_INFO, "kmip: new master key %s", zName);
    }
  }
  pthread_mutex_unlock(&k->mutex);
  kmipAudit(k->pAudit, "master_key_create", zName, rc, 0);
  return rc;
}

static int kmipList(TdeKeystore *p, int (*xCb)(void *, const TdeKeyInfo *), void *pArg){
  Kmip *k = (Kmip *)p;
  TdeKeyInfo *aInfo = 0;
  int nInfo, i;
  if( k==0 || xCb==0 ) return tdeErr(TDE_MISUSE, "kmip: bad arguments");
  pthread_mutex_lock(&k->mutex);
  if( kmipRefresh(k)!=TDE_OK ){
    tdeLog(TDE_LOG_WARNING, "kmip: cannot list keys (%s); using the cached list",
           tde_last_error());
    tdeErrClear();
  }
  nInfo = k->nKey;
  if( nInfo>0 ){
    aInfo = calloc((size_t)nInfo, sizeof(TdeKeyInfo));
    for(i=0; aInfo && i<nInfo; i++){
      memcpy(aInfo[i].zId, k->aKey[i].zName, sizeof(aInfo[i].zId));
      aInfo[i].created = k->aKey[i].created;
      aInfo[i].bRetired = k->aKey[i].state!=STATE_ACTIVE;
    }
  }
  pthread_mutex_unlock(&k->mutex);
  if( nInfo>0 && aInfo==0 ) return tdeErr(TDE_NOMEM, "kmip: out of memory");
  for(i=0; i<nInfo; i++){
    if( xCb(pArg, &aInfo[i]) ) break;
  }
  free(aInfo);
  return TDE_OK;
}

/* blob = iv(12) || ct || tag(16): the server's AES-256-GCM under the key. */
static int kmipWrap(TdeKeystore *p, const char *zKeyId,
                    const uint8_t *aDek, size_t nDek,
                    const uint8_t *aAad, size_t nAad,
                    uint8_t *aOut, size_t nOut, size_t *pnOut, uint8_t *pMech){
  Kmip *k = (Kmip *)p;
  size_t nBlob = KMIP_IV + nDek + KMIP_TAG;
  KmipKey *pKey;
  uint8_t *aKey = 0;
  int rc;

  if( pnOut ) *pnOut = 0;
  if( k==0 || zKeyId==0 || aDek==0 || aOut==0 || pnOut==0 || pMech==0 || (nAad && aAad==0) ){
    return tdeErr(TDE_MISUSE, "kmip: bad arguments to wrap");
  }
  if( nDek==0 || nBlob>TDE_WRAP_MAX ) return tdeErr(TDE_RANGE, "kmip: cannot wrap a %zu-byte key", nDek);
  if( nOut<nBlob ) return tdeErr(TDE_RANGE, "kmip: wrap buffer too small (%zu bytes needed)", nBlob);

  pthread_mutex_lock(&k->mutex);
  pKey = kmipFind(k, zKeyId, &rc);
  if( pKey && pKey->state!=STATE_ACTIVE ){
    rc = tdeErr(TDE_NOKEY, "kmip: master key '%s' is %s; wrap with an Active key",
                zKeyId, kmipStateName(pKey->state));
    pKey = 0;
  }
  if( pKey ) rc = tdeRandom(aOut, KMIP_IV);
  if( pKey && rc==TDE_OK && k->bAllowGet ){
    aKey = tdeSecureAlloc(KMIP_KEY);
    rc = aKey ? kmipGetMaterial(k, pKey, aKey) : tdeErr(TDE_NOMEM, "kmip: out of memory");
    if( rc==TDE_OK ){
      rc = tdeGcmSeal(aKey, aOut, KMIP_IV, aAad, nAad, aDek, nDek, aOut+KMIP_IV, aOut+KMIP_IV+nDek);
      if( rc!=TDE_OK ) rc = tdeErr(rc, "kmip: encryption failed");
    }
  }else if( pKey && rc==TDE_OK ){
    TtlvEnc e;
    KmipResp r;
    const uint8_t *a;
    size_t n;
    kmipBegin(&e, k->major, k->minor, OP_ENCRYPT);
    kmipEncText(&e, TAG_UNIQUE_ID, pKey->zUid);
    kmipCryptoParams(&e);
    ttlvEncBytes(&e, TAG_DATA, aDek, nDek);
    ttlvEncBytes(&e, TAG_IV_NONCE, aOut, KMIP_IV);
    ttlvEncBytes(&e, TAG_AEAD_DATA, aAad, nAad);
    rc = kmipSend(k, &e, OP_ENCRYPT, "Encrypt", &r, 0);
    if( rc==TDE_AUTH ) rc = kmipExplainState(k, pKey, "wrap");
    if( rc==TDE_OK ){
      if( ttlvGetBytes(&r.doc, ttlvChild(&r.doc, r.iPayload, TAG_DATA), &a, &n)!=TDE_OK || n!=nDek ){
        rc = tdeErr(TDE_FORMAT, "kmip: Encrypt returned no ciphertext of %zu bytes", nDek);
      }else{
        memcpy(aOut+KMIP_IV, a, nDek);
      }
    }
    if( rc==TDE_OK ){
      if( ttlvGetBytes(&r.doc, ttlvChild(&r.doc, r.iPayload, TAG_AEAD_TAG), &a, &n)!=TDE_OK
       || n!=KMIP_TAG ){
        rc = tdeErr(TDE_FORMAT, "kmip: Encrypt returned no 16-byte GCM tag (the key "
                    "manager needs KMIP 1.4 authenticated encryption)");
      }else{
        memcpy(aOut+KMIP_IV+nDek, a, KMIP_TAG);
      }
    }
    kmipRespFree(&r);
  }
  pthread_mutex_unlock(&k->mutex);
  tdeSecureFree(aKey, KMIP_KEY);
  if( rc!=TDE_OK ){
    tdeWipe(aOut, nBlob);
    return rc;
  }
  *pnOut = nBlob;
  *pMech = TDE_MECH_AES256_GCM;
  return TDE_OK;
}

static int kmipUnwrap(TdeKeystore *p, const char *zKeyId, uint8_t mech,
                      const uint8_t *aIn, size_t nIn,
                      const uint8_t *aAad, size_t nAad,
                      uint8_t *aDek, size_t nDek){
  Kmip *k = (Kmip *)p;
  KmipKey *pKey;
  uint8_t *aKey = 0;
  int rc;

  if( k==0 || zKeyId==0 || aIn==0 || aDek==0 || (nAad && aAad==0) ){
    return tdeErr(TDE_MISUSE, "kmip: bad arguments to unwrap");
  }
  if( mech!=TDE_MECH_AES256_GCM ){
    return tdeErr(TDE_UNSUPPORTED, "kmip: wrapping mechanism %u not supported", (unsigned)mech);
  }
  if( nDek==0 || nIn!=KMIP_IV + nDek + KMIP_TAG ){
    return tdeErr(TDE_FORMAT, "kmip: wrapped key is %zu bytes, expected %zu",
                  nIn, (size_t)KMIP_IV + nDek + KMIP_TAG);
  }
  pthread_mutex_lock(&k->mutex);
  pKey = kmipFind(k, zKeyId, &rc);
  if( pKey && k->bAllowGet ){
    aKey = tdeSecureAlloc(KMIP_KEY);
    rc = aKey ? kmipGetMaterial(k, pKey, aKey) : tdeErr(TDE_NOMEM, "kmip: out of memory");
    if( rc==TDE_OK ){
      rc = tdeGcmOpen(aKey, aIn, KMIP_IV, aAad, nAad, aIn+KMIP_IV, nDek, aIn+KMIP_IV+nDek, aDek);
    }
  }else if( pKey ){
    TtlvEnc e;
    KmipResp r;
    const uint8_t *a;
    size_t n;
    uint32_t reason = 0;
    kmipBegin(&e, k->major, k->minor, OP_DECRYPT);
    kmipEncText(&e, TAG_UNIQUE_ID, pKey->zUid);
    kmipCryptoParams(&e);
    ttlvEncBytes(&e, TAG_DATA, aIn+KMIP_IV, nDek);
    ttlvEncBytes(&e, TAG_IV_NONCE, aIn, KMIP_IV);
    ttlvEncBytes(&e, TAG_AEAD_DATA, aAad, nAad);
    ttlvEncBytes(&e, TAG_AEAD_TAG, aIn+KMIP_IV+nDek, KMIP_TAG);
    rc = kmipSend(k, &e, OP_DECRYPT, "Decrypt", &r, &reason);
    if( rc==TDE_AUTH ) rc = kmipExplainState(k, pKey, "unwrap");
    else if( rc==TDE_ERROR && (reason==REASON_CRYPTO_FAILURE || reason==REASON_GENERAL) ){
      /* The key exists and may decrypt: a tag mismatch.  PyKMIP reports it
      ** as General Failure, others as Cryptographic Failure. */
      rc = TDE_AUTH;
    }
    if( rc==TDE_OK ){
      if( ttlvGetBytes(&r.doc, ttlvChild(&r.doc, r.iPayload, TAG_DATA), &a, &n)!=TDE_OK || n!=nDek ){
        rc = tdeErr(TDE_FORMAT, "kmip: Decrypt returned no plaintext of %zu bytes", nDek);
      }else{
        memcpy(aDek, a, nDek);
      }
    }
    kmipRespFree(&r);
  }
  if( rc==TDE_AUTH ){
    rc = tdeErr(TDE_AUTH, "kmip: wrapped key does not authenticate under master key '%s' "
                "(tampered, or bound to other data)%s%s", zKeyId,
                tde_last_error()[0] ? ": " : "", tde_last_error());
  }
  pthread_mutex_unlock(&k->mutex);
  tdeSecureFree(aKey, KMIP_KEY);
  if( rc!=TDE_OK ) tdeWipe(aDek, nDek);
  return rc;
}

static int kmipRetire(TdeKeystore *p, const char *zKeyId){
  Kmip *k = (Kmip *)p;
  int rc;
  if( k==0 ) return tdeErr(TDE_MISUSE, "kmip: no handle");
  rc = tdeErr(TDE_UNSUPPORTED, "kmip: master key '%s' is retired on the key manager itself "
              "(deactivate or revoke it there once no database uses it)",
              zKeyId ? zKeyId : "");
  kmipAudit(k->pAudit, "master_key_retire", zKeyId, rc, 0);
  return rc;
}

/* ---- freshness anchors (docs/FORMAT.md "External anchor") ----------------
**
** A Secret Data object named like the record (Register), whose value is a
** generation (8 bytes, big-endian) followed by the record.  An update
** registers the next generation, then destroys the older objects; a
** Locate that finds several (a crash in between) reads the newest.  PyKMIP
** 0.10 stores no custom attributes, so the record is not an attribute of
** the master-key object. */
#define KMIP_ANCHOR_MAXOBJ 16

typedef struct KmipAnchorObj {
  char zUid[KMIP_UID_MAX + 1];
  uint64_t gen;
  uint8_t aVal[TDE_ANCHOR_VALUE_MAX];
  size_t nVal;
} KmipAnchorObj;

/* Every Secret Data object named zName, with its value.  Caller holds the
** mutex.  Objects whose value has no generation get gen 0. */
static int kmipAnchorList(Kmip *k, const char *zName, KmipAnchorObj *aObj, int *pnObj){
  TtlvEnc e;
  KmipResp r;
  int rc, i, n = 0;
  *pnObj = 0;
  kmipBegin(&e, k->major, k->minor, OP_LOCATE);
  kmipAttrEnum(&e, "Object Type", OBJ_SECRET_DATA);
  kmipAttrName(&e, zName);
  rc = kmipSend(k, &e, OP_LOCATE, "Locate (anchor)", &r, 0);
  if( rc==TDE_OK ){
    for(i=ttlvChild(&r.doc, r.iPayload, TAG_UNIQUE_ID); i>=0 && n<KMIP_ANCHOR_MAXOBJ;
        i=ttlvNextSibling(&r.doc, i, TAG_UNIQUE_ID)){
      kmipRespText(&r, i, aObj[n].zUid, sizeof(aObj[n].zUid));
      if( aObj[n].zUid[0] ) n++;
    }
  }
  kmipRespFree(&r);
  if( rc ) return rc;
  for(i=0; i<n; i++){
    const uint8_t *a;
    size_t nA;
    int j;
    kmipBegin(&e, k->major, k->minor, OP_GET);
    kmipEncText(&e, TAG_UNIQUE_ID, aObj[i].zUid);
    rc = kmipSend(k, &e, OP_GET, "Get (anchor)", &r, 0);
    if( rc==TDE_NOKEY ){                       /* destroyed meanwhile */
      tdeErrClear();
      rc = TDE_OK;
      aObj[i].gen = 0;
      aObj[i].nVal = 0;
      kmipRespFree(&r);
      continue;
    }
    if( rc==TDE_OK ){
      j = ttlvChild(&r.doc, r.iPayload, TAG_SECRET_DATA);
      j = ttlvChild(&r.doc, j, TAG_KEY_BLOCK);
      j = ttlvChild(&r.doc, j, TAG_KEY_VALUE);
      j = ttlvChild(&r.doc, j, TAG_KEY_MATERIAL);
      if( ttlvGetBytes(&r.doc, j, &a, &nA)!=TDE_OK || nA<8 || nA-8>TDE_ANCHOR_VALUE_MAX ){
        aObj[i].gen = 0;                       /* not ours */
        aObj[i].nVal = 0;
      }else{
        aObj[i].gen = 0;
        for(int b=0; b<8; b++) aObj[i].gen = (aObj[i].gen<<8) | a[b];
        memcpy(aObj[i].aVal, a+8, nA-8);
        aObj[i].nVal = nA-8;
      }
    }
    kmipRespFree(&r);
    if( rc ) return rc;
  }
  *pnObj = n;
  return TDE_OK;
}

static int kmipAnchorGet(TdeKeystore *p, const char *zName, uint8_t *aOut, size_t nOut, size_t *pnOut){
  Kmip *k = (Kmip *)p;
  KmipAnchorObj *aObj;
  int nObj = 0, iBest = -1, i, rc;
  *pnOut = 0;
  if( k==0 ) return tdeErr(TDE_MISUSE, "kmip: no handle");
  aObj = calloc(KMIP_ANCHOR_MAXOBJ, sizeof(*aObj));
  if( !aObj ) return tdeErr(TDE_NOMEM, "kmip: out of memory");
  pthread_mutex_lock(&k->mutex);
  rc = kmipAnchorList(k, zName, aObj, &nObj);
  pthread_mutex_unlock(&k->mutex);
  if( rc==TDE_OK ){
    for(i=0; i<nObj; i++){
      if( aObj[i].gen && (iBest<0 || aObj[i].gen>aObj[iBest].gen) ) iBest = i;
    }
    if( iBest<0 && nObj ){
      rc = tdeErr(TDE_AUTH, "kmip: Secret Data object %s was not made by sqlite-tde", zName);
    }else if( iBest<0 ){
      rc = TDE_NOTFOUND;
    }else if( aObj[iBest].nVal>nOut ){
      rc = tdeErr(TDE_AUTH, "kmip: anchor object %s is too large to be an anchor record", zName);
    }else{
      memcpy(aOut, aObj[iBest].aVal, aObj[iBest].nVal);
      *pnOut = aObj[iBest].nVal;
    }
  }else if( rc!=TDE_NOMEM ){
    char zDetail[512];
    snprintf(zDetail, sizeof(zDetail), "%s", tde_last_error());
    rc = tdeErr(TDE_NOKEYSTORE, "kmip: reading the anchor %s failed: %s", zName, zDetail);
  }
  free(aObj);
  return rc;
}

static int kmipAnchorSet(TdeKeystore *p, const char *zName, const uint8_t *aIn, size_t nIn){
  Kmip *k = (Kmip *)p;
  KmipAnchorObj *aObj;
  uint8_t aVal[8 + TDE_ANCHOR_VALUE_MAX];
  uint64_t gen = 0;
  TtlvEnc e;
  KmipResp r;
  int nObj = 0, i, rc;
  if( k==0 ) return tdeErr(TDE_MISUSE, "kmip: no handle");
  if( nIn>TDE_ANCHOR_VALUE_MAX ) return tdeErr(TDE_RANGE, "kmip: anchor record too large");
  aObj = calloc(KMIP_ANCHOR_MAXOBJ, sizeof(*aObj));
  if( !aObj ) return tdeErr(TDE_NOMEM, "kmip: out of memory");
  pthread_mutex_lock(&k->mutex);
  rc = kmipAnchorList(k, zName, aObj, &nObj);
  if( rc==TDE_OK && nObj==KMIP_ANCHOR_MAXOBJ ){
    rc = tdeErr(TDE_RANGE, "kmip: too many Secret Data objects named %s", zName);
  }
  if( rc==TDE_OK ){
    for(i=0; i<nObj; i++) if( aObj[i].gen>gen ) gen = aObj[i].gen;
    gen++;
    for(i=0; i<8; i++) aVal[i] = (uint8_t)(gen >> (8*(7-i)));
    memcpy(aVal+8, aIn, nIn);
    kmipBegin(&e, k->major, k->minor, OP_REGISTER);
    ttlvEncEnum(&e, TAG_OBJECT_TYPE, OBJ_SECRET_DATA);
    ttlvEncOpen(&e, TAG_TEMPLATE_ATTRIBUTE);
    kmipAttrName(&e, zName);
    ttlvEncClose(&e);
    ttlvEncOpen(&e, TAG_SECRET_DATA);
    ttlvEncEnum(&e, TAG_SECRET_DATA_TYPE, SECRET_DATA_SEED);
    ttlvEncOpen(&e, TAG_KEY_BLOCK);
    ttlvEncEnum(&e, TAG_KEY_FORMAT_TYPE, KEY_FORMAT_OPAQUE);
    ttlvEncOpen(&e, TAG_KEY_VALUE);
    ttlvEncBytes(&e, TAG_KEY_MATERIAL, aVal, 8+nIn);
    ttlvEncClose(&e);
    ttlvEncClose(&e);
    ttlvEncClose(&e);
    rc = kmipSend(k, &e, OP_REGISTER, "Register (anchor)", &r, 0);
    kmipRespFree(&r);
  }
  /* The new generation is stored: the older objects can go.  One that
  ** cannot be destroyed is harmless (the newest is read) but logged. */
  for(i=0; rc==TDE_OK && i<nObj; i++){
    int rc2;
    if( aObj[i].gen==0 ) continue;            /* not ours: left alone */
    kmipBegin(&e, k->major, k->minor, OP_DESTROY);
    kmipEncText(&e, TAG_UNIQUE_ID, aObj[i].zUid);
    rc2 = kmipSend(k, &e, OP_DESTROY, "Destroy (old anchor)", &r, 0);
    kmipRespFree(&r);
    if( rc2 ){
      tdeLog(TDE_LOG_WARNING, "kmip: an older anchor object %s could not be destroyed: %s",
             zName, tde_last_error());
      tdeErrClear();
    }
  }
  pthread_mutex_unlock(&k->mutex);
  if( rc && rc!=TDE_NOMEM && rc!=TDE_RANGE ){
    char zDetail[512];
    snprintf(zDetail, sizeof(zDetail), "%s", tde_last_error());
    rc = tdeErr(TDE_NOKEYSTORE, "kmip: writing the anchor %s failed: %s", zName, zDetail);
  }
  tdeWipe(aVal, sizeof(aVal));
  free(aObj);
  return rc;
}

/* The provider's own keys (keystore.h: xCheckConfig). */
static int kmipCheckConfig(const TdeConfig *cfg, const char *zName){
  return tdeKeystoreCheckKeys(cfg, zName, azKmipKeys);
}

const tde_keystore_methods tdeKmipMethods = {
  3,                              /* iVersion */
  sizeof(tde_keystore_methods),   /* szStruct */
  "kmip",                         /* zName */
  TDE_KS_KMIP,                    /* typeId */
  azKmipKeys,                     /* azKeys */
  kmipCreate,                     /* xCreate */
  kmipOpen,                       /* xOpen */
  kmipClose,                      /* xClose */
  kmipDescribe,                   /* xDescribe */
  kmipCurrentKey,                 /* xCurrentKey */
  kmipHasKey,                     /* xHasKey */
  kmipNewKey,                     /* xNewKey */
  kmipList,                       /* xList */
  kmipWrap,                       /* xWrap */
  kmipUnwrap,                     /* xUnwrap */
  kmipRetire,                     /* xRetire */
  kmipCheckConfig,                /* xCheckConfig */
  kmipAnchorGet,                  /* xAnchorGet */
  kmipAnchorSet,                  /* xAnchorSet */
};
