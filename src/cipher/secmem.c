/*
** Secure memory, wiping, constant-time comparison and random bytes for
** sqlite-tde (declared in cipher.h).
**
** Key material lives in its own anonymous mappings: locked so it is not
** swapped out, marked MADV_DONTDUMP so it stays out of core dumps, and
** wiped before it is unmapped.  A failed mlock (RLIMIT_MEMLOCK) is logged
** once per process and tolerated, as libsodium does.
**
** This file must never use memset() to clear a secret (the compiler may
** drop it), never log key bytes, and never print.
*/
#include "tde_int.h"
#include "cipher/cipher.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

/*
** Layout of one secure allocation: a mapping of whole pages whose first
** SECMEM_HDR bytes record the mapping length and a magic number; the
** caller's bytes follow.  The header lets tdeSecureFree unmap exactly what
** was mapped even if a caller passes a wrong n.  SECMEM_HDR keeps the
** caller's pointer aligned for any type.
*/
#define SECMEM_HDR   32
#define SECMEM_MAGIC 0x7464655365634d6dULL   /* "tdeSecMm" */

typedef struct SecMemHdr {
  size_t nMap;          /* bytes mapped, a multiple of the page size */
  uint64_t magic;       /* SECMEM_MAGIC while allocated */
} SecMemHdr;

_Static_assert(sizeof(SecMemHdr) <= SECMEM_HDR, "secure header too large");

static atomic_int bWarnedMlock;
static atomic_int bWarnedDump;

static size_t secmemPageSize(void){
  long sz = sysconf(_SC_PAGESIZE);
  return sz>0 ? (size_t)sz : (size_t)4096;
}

/* Log a warning once per process; pFlag is one of the bWarned* latches. */
static void secmemWarnOnce(atomic_int *pFlag, const char *zWhat, int err,
                           const char *zRisk){
  if( atomic_exchange(pFlag, 1)==0 ){
    tdeLog(TDE_LOG_WARNING, "%s failed (errno %d): %s", zWhat, err, zRisk);
  }
}

/*
** Return a pointer to n zeroed bytes in locked, non-dumpable memory, or
** NULL if the mapping fails.  The caller owns the memory and must release
** it with tdeSecureFree(p, n).  n==0 yields a valid, unique pointer.
*/
void *tdeSecureAlloc(size_t n){
  size_t szPage = secmemPageSize();
  size_t nMap;
  uint8_t *pBase;
  SecMemHdr hdr;

  if( n > SIZE_MAX - SECMEM_HDR - szPage ) return NULL;
  if( tdeFaultHook && tdeFaultHook(TDE_FAULT_ALLOC_SECURE) ) return NULL;
  nMap = (n + SECMEM_HDR + szPage - 1) / szPage * szPage;

  pBase = mmap(NULL, nMap, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS,
               -1, 0);
  if( pBase==MAP_FAILED ) return NULL;

  if( mlock(pBase, nMap)!=0 ){
    secmemWarnOnce(&bWarnedMlock, "mlock", errno,
                   "key memory may be swapped to disk (raise RLIMIT_MEMLOCK)");
  }
#ifdef MADV_DONTDUMP
  if( madvise(pBase, nMap, MADV_DONTDUMP)!=0 ){
    secmemWarnOnce(&bWarnedDump, "madvise(MADV_DONTDUMP)", errno,
                   "key memory may appear in core dumps");
  }
#endif

  /* Anonymous mappings are zero-filled: only the header needs writing. */
  hdr.nMap = nMap;
  hdr.magic = SECMEM_MAGIC;
  memcpy(pBase, &hdr, sizeof(hdr));
  return pBase + SECMEM_HDR;
}

/*
** Wipe and release memory from tdeSecureAlloc.  The whole mapping is
** wiped, whatever n says (the header records its length).  If the header
** is damaged (a caller wrote before its buffer, or p did not come from
** tdeSecureAlloc) the n bytes at p are wiped and the mapping is
** deliberately leaked rather than unmapping a length we cannot trust.
*/
void tdeSecureFree(void *p, size_t n){
  uint8_t *pBase;
  SecMemHdr hdr;

  if( p==NULL ) return;
  pBase = (uint8_t*)p - SECMEM_HDR;
  memcpy(&hdr, pBase, sizeof(hdr));
  if( hdr.magic!=SECMEM_MAGIC || hdr.nMap<=SECMEM_HDR
   || hdr.nMap % secmemPageSize()!=0 ){
    tdeWipe(p, n);
    tdeLog(TDE_LOG_ERROR, "tdeSecureFree: bad header, %zu bytes wiped and leaked", n);
    return;
  }
  if( n > hdr.nMap - SECMEM_HDR ){
    /* Misuse, but the header is sound: wiping the mapping covers it. */
    tdeLog(TDE_LOG_ERROR, "tdeSecureFree: size %zu larger than allocation", n);
  }
  OPENSSL_cleanse(pBase, hdr.nMap);
  munlock(pBase, hdr.nMap);      /* harmless if the mlock had failed */
  munmap(pBase, hdr.nMap);
}

/* Wipe n bytes at p in a way the compiler cannot remove.  NULL is a no-op. */
void tdeWipe(void *p, size_t n){
  if( p!=NULL && n>0 ) OPENSSL_cleanse(p, n);
}

/* 1 if the n bytes at a and b are equal, else 0; time depends on n only. */
int tdeCtEqual(const void *a, const void *b, size_t n){
  return CRYPTO_memcmp(a, b, n)==0;
}

/*
** Fill n bytes at p from OpenSSL's CSPRNG.  TDE_CRYPTO if the generator
** fails (p is then wiped, so a partial fill is never used as a key).
*/
int tdeRandom(void *p, size_t n){
  uint8_t *a = (uint8_t*)p;
  size_t i = 0;
  while( i<n ){
    size_t nChunk = n-i > (size_t)INT_MAX ? (size_t)INT_MAX : n-i;
    if( RAND_bytes(a+i, (int)nChunk)!=1 ){
      tdeWipe(p, n);
      return tdeErr(TDE_CRYPTO, "RAND_bytes failed");
    }
    i += nChunk;
  }
  return TDE_OK;
}
