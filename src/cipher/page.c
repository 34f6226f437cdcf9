/*
** The page cipher of sqlite-tde (declared in cipher.h): one object per
** file handle seals and opens pages with AES-256-GCM under per-session
** subkeys, writing and checking the 48-byte trailer of docs/FORMAT.md.
**
** Speed matters here (every page read and write comes through), so the
** object keeps OpenSSL contexts already keyed: one for the subkey it seals
** with, and an LRU of PAGE_OPEN_SLOTS contexts for the session salts
** it has recently opened.  A call then only sets a fresh IV on a keyed
** context; HKDF and the AES key schedule run once per session salt.
**
** Secrets: the DEK and the scratch subkey live in tdeSecureAlloc memory;
** a subkey is wiped as soon as it has keyed its context.  The keyed
** contexts themselves are OpenSSL heap objects (not locked); OpenSSL
** cleanses them when they are freed.
**
** This file must never reuse an IV under a subkey: the counter is consumed
** before the encryption that uses it, a session ends after
** PAGE_SESSION_SEALS seals (long before its 64-bit counter could come back
** to its start), and a child process starts a new session on its first
** seal (parent and child would otherwise continue the same salt and
** counter) -- detected by an atfork counter and by a word in a
** MADV_WIPEONFORK page, which the kernel zeroes in every child, including
** one made by a raw clone() that runs no atfork handler (getpid() per seal
** where the kernel lacks MADV_WIPEONFORK).  Session salts and counter starts come
** from the kernel (getrandom), not from OpenSSL's user-space DRBG, whose
** state a VM snapshot or process checkpoint restores identically; the
** bound this gives is docs/FORMAT.md "Nonce uniqueness".  It must never
** return plaintext that failed authentication, and never print or log key
** bytes.
*/
#include "tde_int.h"
#include "cipher/cipher.h"

#include <errno.h>
#include <stdio.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>

#define PAGE_SALT_BYTES 12
#define PAGE_TAG_BYTES  16
#define PAGE_KEY_BYTES  32
#define PAGE_OPEN_SLOTS 8          /* LRU of keyed open contexts */
/* Seals per session: each session's 64-bit counter range is at most this
** long, which is what the reuse bound of docs/FORMAT.md counts. */
#define PAGE_SESSION_SEALS ((uint64_t)1 << 32)

/* Trailer offsets, as docs/FORMAT.md and cipher.h lay them out. */
#define TRL_SALT      0
#define TRL_IV        12
#define TRL_TAG       24
#define TRL_VERSION   40
#define TRL_RESERVED  44

/* HKDF info prefix; the 12-byte session salt follows it. */
static const char zPageInfo[] = "sqlite-tde v1 page subkey";
#define PAGE_INFO_PREFIX (sizeof(zPageInfo) - 1)

/* Secret bytes of one object, in one tdeSecureAlloc block. */
typedef struct PageSecret {
  uint8_t aDek[PAGE_KEY_BYTES];
  uint8_t aSubkey[PAGE_KEY_BYTES];   /* scratch: wiped after each use */
} PageSecret;

/* One cached decrypt context for one session salt. */
typedef struct PageOpenSlot {
  EVP_CIPHER_CTX *pCtx;              /* keyed with K_S when bValid */
  uint64_t iLastUse;                 /* LRU clock value of the last hit */
  int bValid;
  uint8_t aSalt[PAGE_SALT_BYTES];
} PageOpenSlot;

struct TdePageCipher {
  uint32_t keyVersion;
  PageSecret *pSecret;               /* DEK, scratch subkey */
  EVP_CIPHER *pAlg;                  /* fetched AES-256-GCM */

  /* Sealing session: created on the first seal, replaced after
  ** PAGE_SESSION_SEALS seals and in a child process.  IV = ivHigh ||
  ** ctrLo; ctrLo starts at a random value and advances by one per seal
  ** (mod 2^64). */
  EVP_CIPHER_CTX *pSealCtx;
  int bSealReady;                    /* pSealCtx keyed for aSealSalt */
  uint64_t iForkGen;                 /* pageForkGen when the session began */
  pid_t iPid;                        /* getpid() when the session began */
  uint64_t ctrLo;                    /* IV bits 63..0: the session counter */
  uint64_t nSealed;                  /* seals in this session */
  uint64_t nSessions;                /* sessions this object has started */
  uint32_t ivHigh;                   /* IV bits 95..64 (tdePageCipherSetIvHigh) */
  uint32_t reserved;                 /* trailer [44..48) (tdePageCipherSetReserved) */
  uint8_t aSealSalt[PAGE_SALT_BYTES];

  uint64_t iClock;                   /* LRU clock */
  PageOpenSlot aSlot[PAGE_OPEN_SLOTS];
};

/*
** Fork generation: bumped in every child process by a pthread_atfork
** handler, so a session begun before fork() is never continued after it.
** Registered once per process (glibc drops it if the library is unloaded).
*/
static atomic_uint_fast64_t pageForkGen;
static pthread_once_t pageForkOnce = PTHREAD_ONCE_INIT;
static int pageForkRc;

/* One word the kernel zeroes in every child process (MADV_WIPEONFORK,
** Linux 4.14): 1 in a process that has seen it, 0 in a child that has
** not.  NULL where the kernel lacks it: sessions then compare getpid(). */
static atomic_uint_fast64_t *pageWipeWord;

static void pageForkChild(void){
  atomic_fetch_add_explicit(&pageForkGen, 1, memory_order_relaxed);
}
static void pageForkRegister(void){
  void *pPage = mmap(NULL, 4096, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
  if( pPage!=MAP_FAILED ){
    if( madvise(pPage, 4096, MADV_WIPEONFORK)==0 ){
      pageWipeWord = pPage;
      atomic_store_explicit(pageWipeWord, 1, memory_order_relaxed);
    }else{
      munmap(pPage, 4096);
    }
  }
  pageForkRc = pthread_atfork(NULL, NULL, pageForkChild);
}
/* The fork generation; a child whose wipe word the kernel zeroed moves it
** on (two threads of the child racing here both move it: still new). */
static uint64_t pageForkNow(void){
  if( pageWipeWord && atomic_load_explicit(pageWipeWord, memory_order_relaxed)==0 ){
    atomic_fetch_add_explicit(&pageForkGen, 1, memory_order_relaxed);
    atomic_store_explicit(pageWipeWord, 1, memory_order_relaxed);
  }
  return (uint64_t)atomic_load_explicit(&pageForkGen, memory_order_relaxed);
}
/* Has the process changed since the session began?  getpid() only where
** the wipe word is missing: it is a system call per seal. */
static int pageForked(const TdePageCipher *p){
  return p->iForkGen!=pageForkNow() || (pageWipeWord==NULL && p->iPid!=getpid());
}

/*
** n bytes from the kernel's generator (getrandom(2), blocking only until
** the kernel pool is first initialised).  TDE_CRYPTO if it fails; p is then
** wiped, so a partial fill is never used.
*/
static int pageKernelRandom(void *p, size_t n){
  uint8_t *a = p;
  size_t i = 0;
  while( i<n ){
    ssize_t got = getrandom(a+i, n-i, 0);
    if( got<0 ){
      if( errno==EINTR ) continue;
      tdeWipe(p, n);
      return tdeErr(TDE_CRYPTO, "getrandom failed (errno %d)", errno);
    }
    i += (size_t)got;
  }
  return TDE_OK;
}

/* TDE_CRYPTO with OpenSSL's latest error as detail; clears its queue
** (the shared recorder, aead.c). */
static int pageSslErr(const char *zWhat){
  char zFull[64];
  snprintf(zFull, sizeof(zFull), "page cipher: %s", zWhat);
  return tdeSslErr(zFull);
}

/*
** Derive K_S for aSalt and key pCtx with it (encrypting if enc).  pCtx
** must already be initialised with p->pAlg; only the key changes, so no
** allocation happens.  The subkey is wiped before returning.
*/
static int pageKeyCtx(TdePageCipher *p, const uint8_t aSalt[PAGE_SALT_BYTES],
                      EVP_CIPHER_CTX *pCtx, int enc){
  uint8_t aInfo[PAGE_INFO_PREFIX + PAGE_SALT_BYTES];
  int rc;

  memcpy(aInfo, zPageInfo, PAGE_INFO_PREFIX);
  memcpy(aInfo + PAGE_INFO_PREFIX, aSalt, PAGE_SALT_BYTES);
  rc = tdeHkdf(p->pSecret->aDek, PAGE_KEY_BYTES, NULL, 0,
               aInfo, sizeof(aInfo), p->pSecret->aSubkey, PAGE_KEY_BYTES);
  if( rc ) goto key_out;
  if( EVP_CipherInit_ex(pCtx, NULL, NULL, p->pSecret->aSubkey, NULL, enc)!=1 ){
    rc = pageSslErr("subkey init");
    goto key_out;
  }

key_out:
  tdeWipe(p->pSecret->aSubkey, PAGE_KEY_BYTES);
  return rc;
}

/* A new context bound to p->pAlg, not yet keyed; NULL on failure. */
static EVP_CIPHER_CTX *pageNewCtx(TdePageCipher *p, int enc){
  EVP_CIPHER_CTX *pCtx = EVP_CIPHER_CTX_new();
  if( pCtx==NULL ) return NULL;
  if( EVP_CipherInit_ex(pCtx, p->pAlg, NULL, NULL, NULL, enc)!=1 ){
    EVP_CIPHER_CTX_free(pCtx);
    return NULL;
  }
  return pCtx;
}

/*
** Start a sealing session: draw a fresh salt and counter start from the
** kernel, key the seal context with the salt's subkey.  On failure
** bSealReady stays 0, so no seal happens until a later call succeeds.
*/
static int pageNewSession(TdePageCipher *p){
  uint8_t aRand[PAGE_SALT_BYTES + 8];   /* salt || counter start */
  int rc;

  p->bSealReady = 0;
  if( p->pSealCtx==NULL ){
    p->pSealCtx = pageNewCtx(p, 1);
    if( p->pSealCtx==NULL ) return pageSslErr("seal context");
  }
  rc = pageKernelRandom(aRand, sizeof(aRand));
  if( rc ) return rc;
  rc = pageKeyCtx(p, aRand, p->pSealCtx, 1);
  if( rc==TDE_OK ){
    memcpy(p->aSealSalt, aRand, PAGE_SALT_BYTES);
    p->ctrLo = tdeGet64(aRand + PAGE_SALT_BYTES);
    p->nSealed = 0;
    p->iForkGen = pageForkNow();
    p->iPid = getpid();
    p->nSessions++;
    p->bSealReady = 1;
  }
  tdeWipe(aRand, sizeof(aRand));
  return rc;
}

/*
** Find the keyed context that opens pages of session salt aSalt: the seal
** context for our own session (GCM uses the same key schedule both ways;
** every use re-initialises direction and IV), else an LRU slot, deriving
** into the least recently used slot on a miss.
*/
static int pageOpenCtx(TdePageCipher *p, const uint8_t aSalt[PAGE_SALT_BYTES],
                       EVP_CIPHER_CTX **ppCtx){
  PageOpenSlot *pSlot = NULL;
  int i, rc;

  if( p->bSealReady && memcmp(aSalt, p->aSealSalt, PAGE_SALT_BYTES)==0 ){
    *ppCtx = p->pSealCtx;
    return TDE_OK;
  }
  p->iClock++;
  for(i=0; i<PAGE_OPEN_SLOTS; i++){
    PageOpenSlot *pS = &p->aSlot[i];
    if( pS->bValid && memcmp(aSalt, pS->aSalt, PAGE_SALT_BYTES)==0 ){
      pS->iLastUse = p->iClock;
      *ppCtx = pS->pCtx;
      return TDE_OK;
    }
    /* Victim: first empty slot, else the least recently used. */
    if( pSlot==NULL || (pSlot->bValid
                        && (!pS->bValid || pS->iLastUse<pSlot->iLastUse)) ){
      pSlot = pS;
    }
  }

  pSlot->bValid = 0;
  if( pSlot->pCtx==NULL ){
    pSlot->pCtx = pageNewCtx(p, 0);
    if( pSlot->pCtx==NULL ) return pageSslErr("open context");
  }
  rc = pageKeyCtx(p, aSalt, pSlot->pCtx, 0);
  if( rc ) return rc;
  memcpy(pSlot->aSalt, aSalt, PAGE_SALT_BYTES);
  pSlot->iLastUse = p->iClock;
  pSlot->bValid = 1;
  *ppCtx = pSlot->pCtx;
  return TDE_OK;
}

/* Feed the GCM associated data: caller aad || salt || version,reserved. */
static int pageAad(EVP_CIPHER_CTX *pCtx, const uint8_t *aad, size_t nAad,
                   const uint8_t *t){
  uint8_t aBuf[64];
  int nOut = 0;
  /* One update call when it fits (the usual few-byte aad), else three. */
  if( nAad<=sizeof(aBuf) - PAGE_SALT_BYTES - 8 ){
    if( nAad>0 ) memcpy(aBuf, aad, nAad);
    memcpy(aBuf + nAad, t + TRL_SALT, PAGE_SALT_BYTES);
    memcpy(aBuf + nAad + PAGE_SALT_BYTES, t + TRL_VERSION, 8);
    return EVP_CipherUpdate(pCtx, NULL, &nOut, aBuf,
                            (int)(nAad + PAGE_SALT_BYTES + 8))==1;
  }
  return EVP_CipherUpdate(pCtx, NULL, &nOut, aad, (int)nAad)==1
      && EVP_CipherUpdate(pCtx, NULL, &nOut, t + TRL_SALT, PAGE_SALT_BYTES)==1
      && EVP_CipherUpdate(pCtx, NULL, &nOut, t + TRL_VERSION, 8)==1;
}

/*
** Create a page cipher for a copy of dek (copied into secure memory; the
** caller keeps and wipes its own).  *pp is NULL on failure.
*/
int tdePageCipherNew(const uint8_t dek[32], uint32_t keyVersion, TdePageCipher **pp){
  TdePageCipher *p = NULL;
  int rc = TDE_OK;

  if( pp==NULL ) return tdeErr(TDE_MISUSE, "tdePageCipherNew: NULL output");
  *pp = NULL;
  if( dek==NULL ) return tdeErr(TDE_MISUSE, "tdePageCipherNew: NULL key");
  pthread_once(&pageForkOnce, pageForkRegister);
  if( pageForkRc!=0 ) return tdeErr(TDE_NOMEM, "pthread_atfork failed");

  p = calloc(1, sizeof(*p));
  if( p==NULL ){ rc = tdeErr(TDE_NOMEM, "page cipher"); goto new_out; }
  p->keyVersion = keyVersion;
  p->pSecret = tdeSecureAlloc(sizeof(PageSecret));
  if( p->pSecret==NULL ){ rc = tdeErr(TDE_NOMEM, "page cipher secure memory"); goto new_out; }
  memcpy(p->pSecret->aDek, dek, PAGE_KEY_BYTES);
  p->pAlg = EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
  if( p->pAlg==NULL ){ rc = pageSslErr("fetch AES-256-GCM"); goto new_out; }
  /* The sealing session (salt, subkey) starts on the first seal, so a
  ** handle that only reads never derives a seal subkey. */

new_out:
  if( rc ){
    tdePageCipherFree(p);
    return rc;
  }
  *pp = p;
  return TDE_OK;
}

/* Free p, wiping the DEK and every keyed context.  NULL is a no-op. */
void tdePageCipherFree(TdePageCipher *p){
  int i;
  if( p==NULL ) return;
  EVP_CIPHER_CTX_free(p->pSealCtx);
  for(i=0; i<PAGE_OPEN_SLOTS; i++) EVP_CIPHER_CTX_free(p->aSlot[i].pCtx);
  tdeSecureFree(p->pSecret, sizeof(PageSecret));
  EVP_CIPHER_free(p->pAlg);
  tdeWipe(p, sizeof(*p));
  free(p);
}

uint32_t tdePageCipherVersion(const TdePageCipher *p){
  return p->keyVersion;
}

uint64_t tdePageCipherSessions(const TdePageCipher *p){
  return p->nSessions;
}

void tdePageCipherSetIvHigh(TdePageCipher *p, uint32_t iHigh){
  p->ivHigh = iHigh;
}

void tdePageCipherSetReserved(TdePageCipher *p, uint32_t v){
  p->reserved = v;
}

void tdePageCipherAgeSession(TdePageCipher *p, uint64_t nSeals){
  if( p->bSealReady ) p->nSealed = nSeals;
}

/*
** Seal n bytes of pt into ct (may be the same buffer) and write the
** trailer.  The counter value is consumed before encryption starts, so a
** failure part-way never leads to the IV being used twice.  On failure
** the trailer is zeroed.
*/
int tdePageSeal(TdePageCipher *p, const uint8_t *aad, size_t nAad,
                const uint8_t *pt, size_t n, uint8_t *ct,
                uint8_t trailer[TDE_TRAILER_SIZE]){
  uint8_t t[TDE_TRAILER_SIZE];
  uint8_t aFinal[PAGE_TAG_BYTES];
  EVP_CIPHER_CTX *pCtx;
  int nOut = 0;
  int rc = TDE_OK;

  if( p==NULL || trailer==NULL || (n>0 && (pt==NULL || ct==NULL))
   || (nAad>0 && aad==NULL) ){
    return tdeErr(TDE_MISUSE, "tdePageSeal: NULL argument");
  }
  if( n>(size_t)INT_MAX || nAad>(size_t)INT_MAX ){
    rc = tdeErr(TDE_RANGE, "tdePageSeal: length too large");
    goto seal_out;
  }
  if( !p->bSealReady || p->nSealed>=PAGE_SESSION_SEALS
   || pageForked(p) ){
    rc = pageNewSession(p);
    if( rc ) goto seal_out;
  }
  pCtx = p->pSealCtx;

  memcpy(t + TRL_SALT, p->aSealSalt, PAGE_SALT_BYTES);
  tdePut32(t + TRL_IV, p->ivHigh);
  tdePut64(t + TRL_IV + 4, p->ctrLo);
  tdePut32(t + TRL_VERSION, p->keyVersion);
  tdePut32(t + TRL_RESERVED, p->reserved);
  /* Consume the counter now (mod 2^64: a session's PAGE_SESSION_SEALS
  ** values from its random start never repeat). */
  p->ctrLo++;
  p->nSealed++;

  if( EVP_EncryptInit_ex(pCtx, NULL, NULL, NULL, t + TRL_IV)!=1
   || !pageAad(pCtx, aad, nAad, t)
   || (n>0 && EVP_EncryptUpdate(pCtx, ct, &nOut, pt, (int)n)!=1)
   || EVP_EncryptFinal_ex(pCtx, aFinal, &nOut)!=1
   || EVP_CIPHER_CTX_ctrl(pCtx, EVP_CTRL_GCM_GET_TAG, PAGE_TAG_BYTES, t + TRL_TAG)!=1 ){
    rc = pageSslErr("seal");
    goto seal_out;
  }
  memcpy(trailer, t, TDE_TRAILER_SIZE);

seal_out:
  if( rc ) memset(trailer, 0, TDE_TRAILER_SIZE);   /* not secret */
  return rc;
}

/*
** Authenticate and decrypt n bytes of ct into pt (may be the same buffer).
** TDE_NOKEY if the trailer names another key version, TDE_AUTH if the tag
** does not verify; on any failure the n bytes of pt are wiped (so an
** in-place caller loses the ciphertext too: check tdeTrailerVersion()
** first when more than one version may be present).
*/
int tdePageOpen(TdePageCipher *p, const uint8_t *aad, size_t nAad,
                const uint8_t *ct, size_t n,
                const uint8_t trailer[TDE_TRAILER_SIZE], uint8_t *pt){
  uint8_t t[TDE_TRAILER_SIZE];
  uint8_t aFinal[PAGE_TAG_BYTES];
  EVP_CIPHER_CTX *pCtx = NULL;
  uint32_t v;
  int nOut = 0;
  int rc = TDE_OK;

  if( p==NULL || trailer==NULL || (n>0 && (pt==NULL || ct==NULL))
   || (nAad>0 && aad==NULL) ){
    rc = tdeErr(TDE_MISUSE, "tdePageOpen: NULL argument");
    goto open_out;
  }
  if( n>(size_t)INT_MAX || nAad>(size_t)INT_MAX ){
    rc = tdeErr(TDE_RANGE, "tdePageOpen: length too large");
    goto open_out;
  }
  /* Private copy: the trailer usually sits right after ct in the caller's
  ** page buffer, and pt may be that buffer. */
  memcpy(t, trailer, TDE_TRAILER_SIZE);
  v = tdeGet32(t + TRL_VERSION);
  if( v!=p->keyVersion ){
    rc = tdeErr(TDE_NOKEY, "page sealed with key version %u, cipher holds %u",
                v, p->keyVersion);
    goto open_out;
  }
  rc = pageOpenCtx(p, t + TRL_SALT, &pCtx);
  if( rc ) goto open_out;

  if( EVP_DecryptInit_ex(pCtx, NULL, NULL, NULL, t + TRL_IV)!=1
   || EVP_CIPHER_CTX_ctrl(pCtx, EVP_CTRL_GCM_SET_TAG, PAGE_TAG_BYTES, t + TRL_TAG)!=1
   || !pageAad(pCtx, aad, nAad, t)
   || (n>0 && EVP_DecryptUpdate(pCtx, pt, &nOut, ct, (int)n)!=1) ){
    rc = pageSslErr("open");
    goto open_out;
  }
  if( EVP_DecryptFinal_ex(pCtx, aFinal, &nOut)<=0 ){
    ERR_clear_error();
    rc = tdeErr(TDE_AUTH, "page authentication failed");
    goto open_out;
  }

open_out:
  if( rc && pt ) tdeWipe(pt, n);
  return rc;
}
