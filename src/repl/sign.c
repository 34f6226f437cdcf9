/*
** Records that prove where they come from (docs/FORMAT.md "Record chain
** and signatures"): the hash chain over the records a primary ships and
** the Ed25519 signatures (OpenSSL EVP) of its head and of base copies.
**
**   chain(anchor)  = SHA-256("TDECHN1 anchor" || history id || seq BE64)
**                    for the record before the spool's first one;
**   chain(seq)     = SHA-256("TDECHN1" || chain(seq-1) || the record's
**                    SHA-256 trailer), over TXN and GAP records in order.
**
** The signing key lives in a PEM file with the wallet's protections (mode
** 0600 or stricter, else refused).  Must never: log or print a private
** key, accept a signature of another key than the pinned ones.
*/
#include "repl/repl.h"
#include "cipher/cipher.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

void tdeChainAnchor(const uint8_t *aHistory, uint64_t seq, uint8_t *aOut){
  uint8_t a[15 + 16 + 8];
  memcpy(a, "TDECHN1 anchor", 14);
  a[14] = 0;
  memcpy(a+15, aHistory, 16);
  tdePut64(a+31, seq);
  tdeSha256(a, sizeof(a), aOut);
}

void tdeChainNext(const uint8_t *aPrev, const uint8_t *aSum, uint8_t *aOut){
  uint8_t a[8 + 32 + 32];
  memcpy(a, "TDECHN1", 7);
  a[7] = 0;
  memcpy(a+8, aPrev, 32);
  memcpy(a+40, aSum, 32);
  tdeSha256(a, sizeof(a), aOut);
}

static int loadPem(const char *zPath, int bPrivate, EVP_PKEY **pp){
  FILE *f;
  EVP_PKEY *k;
  *pp = 0;
  if( bPrivate ){
    struct stat st;
    if( stat(zPath, &st)!=0 ) return tdeErr(TDE_CONFIG, "repl_sign_key %s: %s", zPath, strerror(errno));
    if( st.st_mode & 077 ){
      return tdeErr(TDE_CONFIG, "repl_sign_key %s is accessible by group or others (mode %03o): chmod 600 %s",
                    zPath, (unsigned)(st.st_mode & 0777), zPath);
    }
  }
  f = fopen(zPath, "re");
  if( !f ) return tdeErr(TDE_CONFIG, "%s %s: %s", bPrivate ? "repl_sign_key" : "repl_primary_pubkey", zPath,
                         strerror(errno));
  k = bPrivate ? PEM_read_PrivateKey(f, 0, 0, 0) : PEM_read_PUBKEY(f, 0, 0, 0);
  fclose(f);
  ERR_clear_error();
  if( !k || EVP_PKEY_get_id(k)!=EVP_PKEY_ED25519 ){
    EVP_PKEY_free(k);
    return tdeErr(TDE_CONFIG, "%s %s: not an Ed25519 %s key in PEM (openssl genpkey -algorithm ed25519)",
                  bPrivate ? "repl_sign_key" : "repl_primary_pubkey", zPath, bPrivate ? "private" : "public");
  }
  *pp = k;
  return TDE_OK;
}

int tdeSignKeyLoad(const char *zPath, EVP_PKEY **pp){ return loadPem(zPath, 1, pp); }
int tdePubKeyLoad(const char *zPath, EVP_PKEY **pp){ return loadPem(zPath, 0, pp); }

int tdeKeyFingerprint(EVP_PKEY *k, char *zHex){
  uint8_t aRaw[32], sum[32];
  size_t n = sizeof(aRaw);
  if( EVP_PKEY_get_raw_public_key(k, aRaw, &n)!=1 || n!=32 ){
    ERR_clear_error();
    return tdeErr(TDE_CRYPTO, "cannot read the Ed25519 public key");
  }
  tdeSha256(aRaw, 32, sum);
  tdeHex(sum, 32, zHex);
  return TDE_OK;
}

int tdeSign(EVP_PKEY *k, const uint8_t *a, size_t n, uint8_t *aSig){
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  size_t nSig = TDE_SIG_BYTES;
  int rc = TDE_OK;
  if( !c ) return TDE_NOMEM;
  if( EVP_DigestSignInit(c, 0, 0, 0, k)!=1 || EVP_DigestSign(c, aSig, &nSig, a, n)!=1 || nSig!=TDE_SIG_BYTES ){
    ERR_clear_error();
    rc = tdeErr(TDE_CRYPTO, "Ed25519 signing failed");
  }
  EVP_MD_CTX_free(c);
  return rc;
}

int tdeVerify(EVP_PKEY *const *aKey, int nKey, const uint8_t *a, size_t n, const uint8_t *aSig){
  for(int i=0; i<nKey; i++){
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    int ok;
    if( !c ) return TDE_NOMEM;
    ok = EVP_DigestVerifyInit(c, 0, 0, 0, aKey[i])==1 && EVP_DigestVerify(c, aSig, TDE_SIG_BYTES, a, n)==1;
    EVP_MD_CTX_free(c);
    ERR_clear_error();
    if( ok ) return TDE_OK;
  }
  return tdeErr(TDE_AUTH, "signature does not verify with the pinned primary key");
}

/* HEAD: "TDEHEAD1" || database id || history || seq || chain || time ||
** signature over the bytes before it. */
int tdeHeadMake(EVP_PKEY *k, const uint8_t *aDbid, const uint8_t *aHistory, uint64_t seq, const uint8_t *aChain,
                uint8_t *aOut){
  memcpy(aOut, "TDEHEAD1", 8);
  memcpy(aOut+8, aDbid, 16);
  memcpy(aOut+24, aHistory, 16);
  tdePut64(aOut+40, seq);
  memcpy(aOut+48, aChain, 32);
  tdePut64(aOut+80, tdeNowMs());
  return tdeSign(k, aOut, 88, aOut+88);
}

int tdeHeadCheck(EVP_PKEY *const *aKey, int nKey, const uint8_t *a, size_t n, const uint8_t *aDbid,
                 const uint8_t *aHistory, uint64_t *pSeq, uint8_t *aChain){
  int rc;
  if( n<TDE_HEAD_BYTES || memcmp(a, "TDEHEAD1", 8)!=0 ) return tdeErr(TDE_FORMAT, "bad signed head");
  rc = tdeVerify(aKey, nKey, a, 88, a+88);
  if( rc ){
    return tdeErr(TDE_AUTH, "signed head of sequence %llu: the signature does not verify with the pinned "
                  "primary key", (unsigned long long)tdeGet64(a+40));
  }
  if( memcmp(a+8, aDbid, 16)!=0 ) return tdeErr(TDE_AUTH, "signed head of another database");
  if( memcmp(a+24, aHistory, 16)!=0 ) return tdeErr(TDE_AUTH, "signed head of another history");
  *pSeq = tdeGet64(a+40);
  memcpy(aChain, a+48, 32);
  return TDE_OK;
}

/* Base copy: "TDEBASE1" || database id || history || seq || size ||
** SHA-256 of the whole copy || chain at seq || capture time. */
void tdeBaseSigned(const uint8_t *aDbid, const uint8_t *aHistory, uint64_t seq, uint64_t size, const uint8_t *aSum,
                   const uint8_t *aChain, uint64_t tCap, uint8_t *aOut){
  memcpy(aOut, "TDEBASE1", 8);
  memcpy(aOut+8, aDbid, 16);
  memcpy(aOut+24, aHistory, 16);
  tdePut64(aOut+40, seq);
  tdePut64(aOut+48, size);
  memcpy(aOut+56, aSum, 32);
  memcpy(aOut+88, aChain, 32);
  tdePut64(aOut+120, tCap);
}
