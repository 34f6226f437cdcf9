/*
** One-shot cryptographic primitives of sqlite-tde (declared in cipher.h):
** AES-256-GCM, HKDF-SHA256, HMAC-SHA256 and SHA-256, all through OpenSSL 3
** EVP.  (AES key wrap, RFC 3394/5649, was removed: no keystore wraps or
** unwraps with it -- every provider uses AES-256-GCM -- so it was code
** nothing reached.)
**
** Each call builds and frees its own OpenSSL context; OpenSSL cleanses key
** schedules when a context is freed.  The page cipher (page.c) does not
** use tdeGcmSeal/Open: it keeps keyed contexts for speed.
**
** This file must never hand back unauthenticated plaintext: a failed
** open wipes its output before returning.  It never logs key
** bytes and never prints.
*/
#include "tde_int.h"
#include "cipher/cipher.h"

#include <limits.h>

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#define AEAD_TAG_BYTES   16
#define AEAD_HASH_BYTES  32
/* Largest HKDF-SHA256 output (RFC 5869: 255 * HashLen). */
#define AEAD_HKDF_MAX    (255 * AEAD_HASH_BYTES)

/*
** Record an OpenSSL failure: the most recent queued error becomes the
** detail of TDE_CRYPTO, and the thread's OpenSSL error queue is cleared so
** stale entries cannot confuse a later caller.
*/
int tdeSslErr(const char *zWhat){
  char zDetail[256];
  unsigned long e = ERR_peek_last_error();
  if( e!=0 ){
    ERR_error_string_n(e, zDetail, sizeof(zDetail));
  }else{
    memcpy(zDetail, "no detail", sizeof("no detail"));
  }
  ERR_clear_error();
  return tdeErr(TDE_CRYPTO, "%s: %s", zWhat, zDetail);
}

/* Algorithms fetched once per process: an implicit fetch (EVP_sha256(),
** EVP_aes_256_gcm() in an init call) costs about half a million
** instructions, HMAC runs once per WAL frame, SHA-256 three times per
** database open.  Fetched objects are immutable and safe to share between
** threads; they live until the process exits. */
static pthread_once_t aeadFetchOnce = PTHREAD_ONCE_INIT;
static EVP_MAC *aeadHmacAlg;
static EVP_KDF *aeadHkdfAlg;
static EVP_CIPHER *aeadGcmAlg;
static EVP_MD *aeadSha256Alg;
static void aeadFetch(void){
  aeadHmacAlg = EVP_MAC_fetch(NULL, "HMAC", NULL);
  aeadHkdfAlg = EVP_KDF_fetch(NULL, "HKDF", NULL);
  aeadGcmAlg = EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
  aeadSha256Alg = EVP_MD_fetch(NULL, "SHA256", NULL);
}

/* Key ctx for AES-256-GCM with an nIv-byte IV, encrypting if enc. */
static int aeadGcmInit(EVP_CIPHER_CTX *ctx, int enc, const uint8_t key[32],
                       const uint8_t *iv, size_t nIv){
  pthread_once(&aeadFetchOnce, aeadFetch);
  if( EVP_CipherInit_ex(ctx, aeadGcmAlg ? aeadGcmAlg : EVP_aes_256_gcm(), NULL, NULL, NULL, enc)!=1 ){
    return tdeSslErr("AES-256-GCM init");
  }
  if( nIv!=12
   && EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, (int)nIv, NULL)!=1 ){
    ERR_clear_error();
    return tdeErr(TDE_RANGE, "GCM IV length %zu not supported", nIv);
  }
  if( EVP_CipherInit_ex(ctx, NULL, NULL, key, iv, enc)!=1 ){
    return tdeSslErr("AES-256-GCM key");
  }
  return TDE_OK;
}

static int aeadGcmCheck(const uint8_t *key, const uint8_t *iv, size_t nIv,
                        const uint8_t *aad, size_t nAad, const uint8_t *pIn,
                        size_t n, const uint8_t *pOut, const uint8_t *tag){
  if( key==NULL || iv==NULL || tag==NULL || (nAad>0 && aad==NULL)
   || (n>0 && (pIn==NULL || pOut==NULL)) ){
    return tdeErr(TDE_MISUSE, "GCM: NULL argument");
  }
  if( nIv==0 || nIv>(size_t)INT_MAX ){
    return tdeErr(TDE_RANGE, "GCM IV length %zu", nIv);
  }
  if( nAad>(size_t)INT_MAX || n>(size_t)INT_MAX ){
    return tdeErr(TDE_RANGE, "GCM input too long");
  }
  return TDE_OK;
}

/*
** AES-256-GCM encrypt n bytes of pt into ct (which may be pt) and write the
** 16-byte tag.  nIv may be any length OpenSSL accepts (1..128 bytes in
** OpenSSL 3.0; others are TDE_RANGE); lengths above INT_MAX are TDE_RANGE.  On failure the tag
** is zeroed so it cannot be mistaken for a valid one.
*/
int tdeGcmSeal(const uint8_t key[32], const uint8_t *iv, size_t nIv,
               const uint8_t *aad, size_t nAad,
               const uint8_t *pt, size_t n, uint8_t *ct, uint8_t tag[16]){
  EVP_CIPHER_CTX *ctx = NULL;
  uint8_t aFinal[AEAD_TAG_BYTES];   /* GCM final emits nothing; scratch */
  int nOut = 0;
  int rc = aeadGcmCheck(key, iv, nIv, aad, nAad, pt, n, ct, tag);

  if( rc ) goto seal_out;
  ctx = EVP_CIPHER_CTX_new();
  if( ctx==NULL ){ rc = tdeErr(TDE_NOMEM, "EVP_CIPHER_CTX_new"); goto seal_out; }
  rc = aeadGcmInit(ctx, 1, key, iv, nIv);
  if( rc ) goto seal_out;
  if( nAad>0 && EVP_EncryptUpdate(ctx, NULL, &nOut, aad, (int)nAad)!=1 ){
    rc = tdeSslErr("GCM aad");
    goto seal_out;
  }
  if( n>0 && EVP_EncryptUpdate(ctx, ct, &nOut, pt, (int)n)!=1 ){
    rc = tdeSslErr("GCM encrypt");
    goto seal_out;
  }
  if( EVP_EncryptFinal_ex(ctx, aFinal, &nOut)!=1
   || EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, AEAD_TAG_BYTES, tag)!=1 ){
    rc = tdeSslErr("GCM final");
    goto seal_out;
  }

seal_out:
  if( rc && tag ) memset(tag, 0, AEAD_TAG_BYTES);   /* not secret */
  EVP_CIPHER_CTX_free(ctx);
  return rc;
}

/*
** AES-256-GCM decrypt and verify.  pt may be ct.  TDE_AUTH if the tag does
** not match; on that or any other failure the n bytes of pt are wiped.
*/
int tdeGcmOpen(const uint8_t key[32], const uint8_t *iv, size_t nIv,
               const uint8_t *aad, size_t nAad,
               const uint8_t *ct, size_t n, const uint8_t tag[16], uint8_t *pt){
  EVP_CIPHER_CTX *ctx = NULL;
  uint8_t aTag[AEAD_TAG_BYTES];
  uint8_t aFinal[AEAD_TAG_BYTES];
  int nOut = 0;
  int rc = aeadGcmCheck(key, iv, nIv, aad, nAad, ct, n, pt, tag);

  if( rc ) goto open_out;
  memcpy(aTag, tag, AEAD_TAG_BYTES);   /* tag may live in the pt buffer */
  ctx = EVP_CIPHER_CTX_new();
  if( ctx==NULL ){ rc = tdeErr(TDE_NOMEM, "EVP_CIPHER_CTX_new"); goto open_out; }
  rc = aeadGcmInit(ctx, 0, key, iv, nIv);
  if( rc ) goto open_out;
  if( EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, AEAD_TAG_BYTES, aTag)!=1 ){
    rc = tdeSslErr("GCM set tag");
    goto open_out;
  }
  if( nAad>0 && EVP_DecryptUpdate(ctx, NULL, &nOut, aad, (int)nAad)!=1 ){
    rc = tdeSslErr("GCM aad");
    goto open_out;
  }
  if( n>0 && EVP_DecryptUpdate(ctx, pt, &nOut, ct, (int)n)!=1 ){
    rc = tdeSslErr("GCM decrypt");
    goto open_out;
  }
  if( EVP_DecryptFinal_ex(ctx, aFinal, &nOut)<=0 ){
    ERR_clear_error();
    rc = tdeErr(TDE_AUTH, "GCM tag mismatch");
    goto open_out;
  }

open_out:
  if( rc && pt ) tdeWipe(pt, n);
  EVP_CIPHER_CTX_free(ctx);
  return rc;
}

/*
** HKDF-SHA256: nOut bytes (1..8160) from ikm, optional salt and info.
** out is wiped on failure.
*/
int tdeHkdf(const uint8_t *ikm, size_t nIkm, const uint8_t *salt, size_t nSalt,
            const uint8_t *info, size_t nInfo, uint8_t *out, size_t nOut){
  EVP_KDF *pKdf = NULL;
  EVP_KDF_CTX *pCtx = NULL;
  OSSL_PARAM aParam[5];
  OSSL_PARAM *pParam = aParam;
  int rc = TDE_OK;

  if( nOut==0 || nOut>AEAD_HKDF_MAX ){
    return tdeErr(TDE_RANGE, "HKDF output length %zu", nOut);
  }
  pthread_once(&aeadFetchOnce, aeadFetch);
  pKdf = aeadHkdfAlg;
  if( pKdf==NULL ){ rc = tdeSslErr("HKDF fetch"); goto hkdf_out; }
  pCtx = EVP_KDF_CTX_new(pKdf);
  if( pCtx==NULL ){ rc = tdeSslErr("HKDF context"); goto hkdf_out; }

  *pParam++ = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST,
                                               (char*)"SHA256", 0);
  *pParam++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY,
                                                (void*)ikm, nIkm);
  if( nSalt>0 ){
    *pParam++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT,
                                                  (void*)salt, nSalt);
  }
  if( nInfo>0 ){
    *pParam++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO,
                                                  (void*)info, nInfo);
  }
  *pParam = OSSL_PARAM_construct_end();

  if( EVP_KDF_derive(pCtx, out, nOut, aParam)!=1 ){
    rc = tdeSslErr("HKDF derive");
    goto hkdf_out;
  }

hkdf_out:
  if( rc ) tdeWipe(out, nOut);
  EVP_KDF_CTX_free(pCtx);       /* cleanses its copy of ikm */
  return rc;
}

/*
** HMAC-SHA256 of the concatenation of nPart buffers (a part may be NULL
** only if its length is 0).  An empty key is allowed.  out is wiped on
** failure.
*/
int tdeHmacSha256(const uint8_t *key, size_t nKey,
                  const uint8_t *const *apPart, const size_t *anPart, int nPart,
                  uint8_t out[32]){
  static const uint8_t aNoKey[1] = {0};
  EVP_MAC *pMac = NULL;
  EVP_MAC_CTX *pCtx = NULL;
  OSSL_PARAM aParam[2];
  size_t nMac = 0;
  int i;
  int rc = TDE_OK;

  if( nPart<0 || (nPart>0 && (apPart==NULL || anPart==NULL)) ){
    return tdeErr(TDE_MISUSE, "tdeHmacSha256: bad part list");
  }
  pthread_once(&aeadFetchOnce, aeadFetch);
  pMac = aeadHmacAlg;
  if( pMac==NULL ){ rc = tdeSslErr("HMAC fetch"); goto hmac_out; }
  pCtx = EVP_MAC_CTX_new(pMac);
  if( pCtx==NULL ){ rc = tdeSslErr("HMAC context"); goto hmac_out; }
  aParam[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
                                               (char*)"SHA256", 0);
  aParam[1] = OSSL_PARAM_construct_end();
  /* OpenSSL wants a non-NULL key pointer even for a zero-length key. */
  if( EVP_MAC_init(pCtx, nKey>0 ? key : aNoKey, nKey, aParam)!=1 ){
    rc = tdeSslErr("HMAC init");
    goto hmac_out;
  }
  for(i=0; i<nPart; i++){
    if( anPart[i]>0 && EVP_MAC_update(pCtx, apPart[i], anPart[i])!=1 ){
      rc = tdeSslErr("HMAC update");
      goto hmac_out;
    }
  }
  if( EVP_MAC_final(pCtx, out, &nMac, AEAD_HASH_BYTES)!=1 || nMac!=AEAD_HASH_BYTES ){
    rc = tdeSslErr("HMAC final");
    goto hmac_out;
  }

hmac_out:
  if( rc ) tdeWipe(out, AEAD_HASH_BYTES);
  EVP_MAC_CTX_free(pCtx);       /* cleanses the keyed state */
  return rc;
}

/* SHA-256 of n bytes at p (p may be NULL if n is 0). */
int tdeSha256(const uint8_t *p, size_t n, uint8_t out[32]){
  static const uint8_t aEmpty[1] = {0};
  unsigned int nMd = 0;
  pthread_once(&aeadFetchOnce, aeadFetch);
  if( EVP_Digest(n>0 ? p : aEmpty, n, out, &nMd, aeadSha256Alg ? aeadSha256Alg : EVP_sha256(), NULL)!=1
   || nMd!=AEAD_HASH_BYTES ){
    return tdeSslErr("SHA-256");
  }
  return TDE_OK;
}

/* ---- keyed HMAC contexts ------------------------------------------------
** For MACs computed many times under one key (WAL frames): the key is set
** once; each computation re-initialises the context with the same key
** (EVP_MAC_init with a NULL key keeps it), which saves the fetch, the
** context allocation and the key schedule of tdeHmacSha256.
*/
struct TdeHmac {
  EVP_MAC_CTX *pCtx;
};

int tdeHmacNew(const uint8_t *key, size_t nKey, TdeHmac **pp){
  TdeHmac *h;
  OSSL_PARAM aParam[2];
  *pp = NULL;
  pthread_once(&aeadFetchOnce, aeadFetch);
  if( aeadHmacAlg==NULL ) return tdeSslErr("HMAC fetch");
  h = OPENSSL_zalloc(sizeof(*h));
  if( h==NULL ) return tdeErr(TDE_NOMEM, "out of memory");
  h->pCtx = EVP_MAC_CTX_new(aeadHmacAlg);
  aParam[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char*)"SHA256", 0);
  aParam[1] = OSSL_PARAM_construct_end();
  if( h->pCtx==NULL || EVP_MAC_init(h->pCtx, key, nKey, aParam)!=1 ){
    tdeHmacFree(h);
    return tdeSslErr("HMAC init");
  }
  *pp = h;
  return TDE_OK;
}

void tdeHmacFree(TdeHmac *h){
  if( h==NULL ) return;
  EVP_MAC_CTX_free(h->pCtx);     /* cleanses the keyed state */
  OPENSSL_free(h);
}

int tdeHmacCompute(TdeHmac *h, const uint8_t *const *apPart, const size_t *anPart, int nPart,
                   uint8_t out[32]){
  size_t nMac = 0;
  if( EVP_MAC_init(h->pCtx, NULL, 0, NULL)!=1 ) return tdeSslErr("HMAC re-init");
  for(int i=0; i<nPart; i++){
    if( anPart[i]>0 && EVP_MAC_update(h->pCtx, apPart[i], anPart[i])!=1 ){
      return tdeSslErr("HMAC update");
    }
  }
  if( EVP_MAC_final(h->pCtx, out, &nMac, AEAD_HASH_BYTES)!=1 || nMac!=AEAD_HASH_BYTES ){
    tdeWipe(out, AEAD_HASH_BYTES);
    return tdeSslErr("HMAC final");
  }
  return TDE_OK;
}
