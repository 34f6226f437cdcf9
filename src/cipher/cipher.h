/*
** Crypto core of sqlite-tde, on OpenSSL 3 EVP only (no hand-written
** primitives).  Three parts:
**
**   secure memory   locked (mlock), excluded from core dumps
**                   (MADV_DONTDUMP), wiped on free;
**   primitives      AES-256-GCM, HKDF-SHA256, HMAC-SHA256, SHA-256,
**                   random bytes;
**   page cipher     the per-file-handle object that seals and opens pages
**                   and blocks with the 48-byte trailer of docs/FORMAT.md.
**
** This module never sees a keystore, a file or SQLite.  All functions
** return TDE_OK or a tde_rc code (TDE_AUTH for a tag mismatch, TDE_CRYPTO
** when OpenSSL fails, TDE_NOMEM, TDE_RANGE for bad lengths).  Outputs of a
** failed open are wiped before returning, so unauthenticated
** plaintext never escapes.
*/
#ifndef TDE_CIPHER_H
#define TDE_CIPHER_H

#include <stddef.h>
#include <stdint.h>

/* ---- secure memory ----------------------------------------------------- */

/* Allocate n zeroed bytes in memory that is mlock()ed (a failed mlock is a
** warning via tdeLog, not a failure) and marked MADV_DONTDUMP.  NULL on
** out-of-memory. */
void *tdeSecureAlloc(size_t n);
/* Wipe n bytes and free memory from tdeSecureAlloc (NULL is a no-op). */
void tdeSecureFree(void *p, size_t n);
/* Wipe memory so the compiler cannot elide it (OPENSSL_cleanse). */
void tdeWipe(void *p, size_t n);
/* Constant-time equality: 1 if equal, 0 if not. */
int tdeCtEqual(const void *a, const void *b, size_t n);
/* Cryptographically secure random bytes (RAND_bytes). */
int tdeRandom(void *p, size_t n);

/* ---- primitives -------------------------------------------------------- */

/* AES-256-GCM with a 16-byte tag.  ivlen is normally 12.  pt and ct may be
** the same buffer.  Open returns TDE_AUTH on tag mismatch and wipes pt. */
int tdeGcmSeal(const uint8_t key[32], const uint8_t *iv, size_t nIv,
               const uint8_t *aad, size_t nAad,
               const uint8_t *pt, size_t n, uint8_t *ct, uint8_t tag[16]);
int tdeGcmOpen(const uint8_t key[32], const uint8_t *iv, size_t nIv,
               const uint8_t *aad, size_t nAad,
               const uint8_t *ct, size_t n, const uint8_t tag[16], uint8_t *pt);

/* Record the latest OpenSSL failure as the detail of TDE_CRYPTO ("zWhat:
** OpenSSL's reason"), clear OpenSSL's error queue, return TDE_CRYPTO. */
int tdeSslErr(const char *zWhat);

/* HKDF-SHA256 (RFC 5869): extract with salt (may be NULL/0), expand with
** info, nOut bytes. */
int tdeHkdf(const uint8_t *ikm, size_t nIkm, const uint8_t *salt, size_t nSalt,
            const uint8_t *info, size_t nInfo, uint8_t *out, size_t nOut);

/* HMAC-SHA256 over the concatenation of nPart buffers. */
int tdeHmacSha256(const uint8_t *key, size_t nKey,
                  const uint8_t *const *apPart, const size_t *anPart, int nPart,
                  uint8_t out[32]);

/* A keyed HMAC-SHA256 context for many MACs under one key (no secret
** copy is kept outside OpenSSL's context; Free cleanses it). */
typedef struct TdeHmac TdeHmac;
int  tdeHmacNew(const uint8_t *key, size_t nKey, TdeHmac **pp);
int  tdeHmacCompute(TdeHmac *h, const uint8_t *const *apPart, const size_t *anPart, int nPart,
                    uint8_t out[32]);
void tdeHmacFree(TdeHmac *h);

/* SHA-256 of one buffer. */
int tdeSha256(const uint8_t *p, size_t n, uint8_t out[32]);

/* ---- page cipher --------------------------------------------------------
**
** A TdePageCipher holds one data key (DEK) of one key version and seals
** pages with per-session subkeys, so that a GCM nonce never repeats under a
** key:
**
**   on its first seal the object starts a session: a 12-byte salt S and a
**   64-bit counter start R from the kernel (getrandom);
**   subkey  K_S = HKDF-SHA256(ikm=DEK, salt=none,
**                             info="sqlite-tde v1 page subkey" || S)
**   the i-th seal of the session uses IV = 0 (4 bytes) || R + i mod 2^64
**   (8 bytes, big-endian); a new session starts after 2^32 seals and in a
**   child process (atfork counter or a changed getpid()).
**
** Trailer (TDE_TRAILER_SIZE = 48 bytes), appended to the ciphertext:
**   [0..12)   S, session salt
**   [12..24)  IV (the counter value used)
**   [24..40)  GCM tag
**   [40..44)  key version, u32 big-endian
**   [44..48)  reserved, u32, written as zero, authenticated
**
** The GCM associated data is the caller's aad followed by trailer[0..12)
** and trailer[40..48), so salt, key version and reserved field are bound.
**
** Open derives K_S for the trailer's salt (cached: a small LRU of subkey
** contexts per object, so pages written by one session cost one HKDF) and
** verifies the tag.  Open checks that the trailer's key version equals the
** object's version (TDE_NOKEY otherwise: the caller picks the right
** object).  On any failure the plaintext output is wiped.
**
** Not thread-safe: one object per file handle, used under SQLite's
** per-connection serialisation.  The DEK and subkeys live in secure memory;
** Free wipes them.
*/
#define TDE_TRAILER_SIZE 48

typedef struct TdePageCipher TdePageCipher;

int  tdePageCipherNew(const uint8_t dek[32], uint32_t keyVersion, TdePageCipher **pp);
void tdePageCipherFree(TdePageCipher *p);
uint32_t tdePageCipherVersion(const TdePageCipher *p);
/* Sessions (salts) this object has started so far. */
uint64_t tdePageCipherSessions(const TdePageCipher *p);
/* IV bits 95..64 of the following seals (0 unless set: format version 1;
** version 2 puts a WAL frame's index there).  Uniqueness rests on the low
** 64 bits alone. */
void tdePageCipherSetIvHigh(TdePageCipher *p, uint32_t iHigh);
/* Trailer field [44..48) of the following seals (0 unless set: format
** version 1; version 2 puts the header sequence number there). */
void tdePageCipherSetReserved(TdePageCipher *p, uint32_t v);
/* Tests only: pretend the current session has sealed nSeals pages. */
void tdePageCipherAgeSession(TdePageCipher *p, uint64_t nSeals);

/* Encrypt n bytes of pt into ct (may alias) and fill trailer. */
int tdePageSeal(TdePageCipher *p, const uint8_t *aad, size_t nAad,
                const uint8_t *pt, size_t n, uint8_t *ct,
                uint8_t trailer[TDE_TRAILER_SIZE]);
/* Decrypt and authenticate; TDE_AUTH on mismatch (pt wiped). */
int tdePageOpen(TdePageCipher *p, const uint8_t *aad, size_t nAad,
                const uint8_t *ct, size_t n,
                const uint8_t trailer[TDE_TRAILER_SIZE], uint8_t *pt);

/* Key version recorded in a trailer. */
static inline uint32_t tdeTrailerVersion(const uint8_t *t){
  return ((uint32_t)t[40]<<24) | ((uint32_t)t[41]<<16) | ((uint32_t)t[42]<<8) | t[43];
}

#endif /* TDE_CIPHER_H */
