/*
** Unit tests of the crypto core (src/cipher): known-answer tests from
** published vectors, round trips, and tampering.
**
** Vectors: AES-256-GCM test cases 13-18 of McGrew & Viega, "The
** Galois/Counter Mode of Operation" (the NIST GCM submission); RFC 5869
** test cases 1 and 3; RFC 4231 test case 2; FIPS 180-2 "abc".
**
** The page-cipher tests also re-derive every page independently (HKDF +
** one-shot GCM, both checked against the vectors above) to pin the
** trailer layout and subkey derivation of cipher.h.  Plaintext comes from
** a fixed-seed PRNG whose seed is printed.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <sys/wait.h>
#include <unistd.h>

#include "tde_int.h"
#include "cipher/cipher.h"

#include <openssl/evp.h>

#define TEST_SEED 0x5eed7de5u

/* ---- helpers ----------------------------------------------------------- */

static uint32_t rngState = TEST_SEED;

static uint32_t rngNext(void){
  uint32_t x = rngState;           /* xorshift32 */
  x ^= x<<13; x ^= x>>17; x ^= x<<5;
  rngState = x;
  return x;
}

static void rngFill(uint8_t *p, size_t n){
  size_t i;
  for(i=0; i<n; i++) p[i] = (uint8_t)rngNext();
}

static int hexVal(char c){
  if( c>='0' && c<='9' ) return c-'0';
  if( c>='a' && c<='f' ) return c-'a'+10;
  if( c>='A' && c<='F' ) return c-'A'+10;
  return -1;
}

/* Decode hex (spaces ignored) into out; returns the byte count. */
static size_t unhex(const char *z, uint8_t *out, size_t nOut){
  size_t n = 0;
  while( *z ){
    int hi, lo;
    if( *z==' ' ){ z++; continue; }
    hi = hexVal(z[0]);
    lo = hexVal(z[1]);
    assert_true(hi>=0 && lo>=0);
    assert_true(n<nOut);
    out[n++] = (uint8_t)(hi<<4 | lo);
    z += 2;
  }
  return n;
}

static int allZero(const uint8_t *p, size_t n){
  size_t i;
  for(i=0; i<n; i++) if( p[i] ) return 0;
  return 1;
}

/* ---- secure memory, compare, random ------------------------------------ */

static void test_secmem(void **state){
  static const size_t aSize[] = { 0, 1, 31, 32, 100, 4000, 4096, 5000, 70000 };
  size_t i;
  TDE_UNUSED(state);
  for(i=0; i<TDE_ARRAY_SIZE(aSize); i++){
    size_t n = aSize[i];
    uint8_t *p = tdeSecureAlloc(n);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 16, 0);
    assert_true(allZero(p, n));
    if( n>0 ) memset(p, 0xA5, n);
    tdeSecureFree(p, n);
  }
  tdeSecureFree(NULL, 10);        /* no-op */
}

static void test_wipe_compare_random(void **state){
  uint8_t a[64], b[64], r1[32], r2[32];
  TDE_UNUSED(state);
  memset(a, 0x11, sizeof(a));
  memcpy(b, a, sizeof(b));
  assert_int_equal(tdeCtEqual(a, b, sizeof(a)), 1);
  b[63] ^= 1;
  assert_int_equal(tdeCtEqual(a, b, sizeof(a)), 0);
  assert_int_equal(tdeCtEqual(a, b, 63), 1);
  assert_int_equal(tdeCtEqual(a, b, 0), 1);
  tdeWipe(a, sizeof(a));
  assert_true(allZero(a, sizeof(a)));
  tdeWipe(NULL, 5);

  assert_int_equal(tdeRandom(r1, sizeof(r1)), TDE_OK);
  assert_int_equal(tdeRandom(r2, sizeof(r2)), TDE_OK);
  assert_false(allZero(r1, sizeof(r1)));
  assert_memory_not_equal(r1, r2, sizeof(r1));
  assert_int_equal(tdeRandom(r1, 0), TDE_OK);
}

/* ---- AES-256-GCM: McGrew & Viega test cases 13-18 ---------------------- */

typedef struct GcmVector {
  int iCase;
  const char *zKey, *zIv, *zAad, *zPt, *zCt, *zTag;
} GcmVector;

#define GCM_K0  "00000000000000000000000000000000 00000000000000000000000000000000"
#define GCM_K1  "feffe9928665731c6d6a8f9467308308 feffe9928665731c6d6a8f9467308308"
#define GCM_P60 "d9313225f88406e5a55909c5aff5269a 86a7a9531534f7da2e4c303d8a318a72" \
                "1c3c0c95956809532fcf0e2449a6b525 b16aedf5aa0de657ba637b39"
#define GCM_A   "feedfacedeadbeeffeedfacedeadbeef abaddad2"

static const GcmVector aGcm[] = {
  { 13, GCM_K0, "000000000000000000000000", "", "", "",
    "530f8afbc74536b9a963b4f1c4cb738b" },
  { 14, GCM_K0, "000000000000000000000000", "",
    "00000000000000000000000000000000",
    "cea7403d4d606b6e074ec5d3baf39d18",
    "d0d1c8a799996bf0265b98b5d48ab919" },
  { 15, GCM_K1, "cafebabefacedbaddecaf888", "",
    GCM_P60 "1aafd255",
    "522dc1f099567d07f47f37a32a84427d 643a8cdcbfe5c0c97598a2bd2555d1aa"
    "8cb08e48590dbb3da7b08b1056828838 c5f61e6393ba7a0abcc9f662898015ad",
    "b094dac5d93471bdec1a502270e3cc6c" },
  { 16, GCM_K1, "cafebabefacedbaddecaf888", GCM_A, GCM_P60,
    "522dc1f099567d07f47f37a32a84427d 643a8cdcbfe5c0c97598a2bd2555d1aa"
    "8cb08e48590dbb3da7b08b1056828838 c5f61e6393ba7a0abcc9f662",
    "76fc6ece0f4e1768cddf8853bb2d551b" },
  { 17, GCM_K1, "cafebabefacedbad", GCM_A, GCM_P60,
    "c3762df1ca787d32ae47c13bf19844cb af1ae14d0b976afac52ff7d79bba9de0"
    "feb582d33934a4f0954cc2363bc73f78 62ac430e64abe499f47c9b1f",
    "3a337dbf46a792c45e454913fe2ea8f2" },
  { 18, GCM_K1,
    "9313225df88406e555909c5aff5269aa 6a7a9538534f7da1e4c303d2a318a728"
    "c3c0c95156809539fcf0e2429a6b5254 16aedbf5a0de6a57a637b39b",
    GCM_A, GCM_P60,
    "5a8def2f0c9e53f1f75d7853659e2a20 eeb2b22aafde6419a058ab4f6f746bf4"
    "0fc0c3b780f244452da3ebf1c5d82cde a2418997200ef82e44ae7e3f",
    "a44a8266ee1c8eb0c8b5d4cf5ae9f19a" },
};

static void test_gcm_kat(void **state){
  size_t i;
  TDE_UNUSED(state);
  for(i=0; i<TDE_ARRAY_SIZE(aGcm); i++){
    const GcmVector *v = &aGcm[i];
    uint8_t key[32], iv[64], aad[32], pt[64], ct[64], tag[16];
    uint8_t out[64], outTag[16], buf[64];
    size_t nKey = unhex(v->zKey, key, sizeof(key));
    size_t nIv = unhex(v->zIv, iv, sizeof(iv));
    size_t nAad = unhex(v->zAad, aad, sizeof(aad));
    size_t nPt = unhex(v->zPt, pt, sizeof(pt));
    size_t nCt = unhex(v->zCt, ct, sizeof(ct));
    unhex(v->zTag, tag, sizeof(tag));
    assert_int_equal(nKey, 32);
    assert_int_equal(nPt, nCt);
    print_message("GCM test case %d\n", v->iCase);

    /* seal, separate buffers */
    assert_int_equal(tdeGcmSeal(key, iv, nIv, aad, nAad, pt, nPt, out, outTag), TDE_OK);
    if( nCt ) assert_memory_equal(out, ct, nCt);
    assert_memory_equal(outTag, tag, 16);

    /* open, separate buffers */
    memset(out, 0xEE, sizeof(out));
    assert_int_equal(tdeGcmOpen(key, iv, nIv, aad, nAad, ct, nCt, tag, out), TDE_OK);
    if( nPt ) assert_memory_equal(out, pt, nPt);

    /* in place both ways */
    memcpy(buf, pt, nPt);
    assert_int_equal(tdeGcmSeal(key, iv, nIv, aad, nAad, buf, nPt, buf, outTag), TDE_OK);
    if( nCt ) assert_memory_equal(buf, ct, nCt);
    assert_int_equal(tdeGcmOpen(key, iv, nIv, aad, nAad, buf, nCt, outTag, buf), TDE_OK);
    if( nPt ) assert_memory_equal(buf, pt, nPt);

    /* a wrong tag fails and wipes the output */
    outTag[0] = tag[0] ^ 0x80;
    memcpy(outTag+1, tag+1, 15);
    memset(out, 0xEE, sizeof(out));
    assert_int_equal(tdeGcmOpen(key, iv, nIv, aad, nAad, ct, nCt, outTag, out), TDE_AUTH);
    assert_true(allZero(out, nCt));
    /* so does changed aad (or ciphertext) */
    if( nAad ){
      aad[nAad-1] ^= 1;
      memset(out, 0xEE, sizeof(out));
      assert_int_equal(tdeGcmOpen(key, iv, nIv, aad, nAad, ct, nCt, tag, out), TDE_AUTH);
      assert_true(allZero(out, nCt));
    }
    if( nCt ){
      ct[nCt-1] ^= 1;
      memset(out, 0xEE, sizeof(out));
      assert_int_equal(tdeGcmOpen(key, iv, nIv, aad, nAad, ct, nCt, tag, out), TDE_AUTH);
      assert_true(allZero(out, nCt));
    }
  }
}

static void test_gcm_bad_lengths(void **state){
  uint8_t key[32] = {0}, iv[32] = {0}, pt[16] = {0}, ct[16], tag[16], back[16];
  size_t nIv;
  TDE_UNUSED(state);
  /* IV lengths other than 12 round-trip (GHASH-derived counter block) */
  for(nIv=1; nIv<=sizeof(iv); nIv+=5){
    iv[0] = (uint8_t)nIv;
    assert_int_equal(tdeGcmSeal(key, iv, nIv, NULL, 0, pt, 16, ct, tag), TDE_OK);
    assert_int_equal(tdeGcmOpen(key, iv, nIv, NULL, 0, ct, 16, tag, back), TDE_OK);
    assert_memory_equal(back, pt, 16);
  }
  iv[0] = 0;
  assert_int_equal(tdeGcmSeal(key, NULL, 12, NULL, 0, pt, 16, ct, tag), TDE_MISUSE);
  assert_int_equal(tdeGcmSeal(key, iv, 0, NULL, 0, pt, 16, ct, tag), TDE_RANGE);
  assert_int_equal(tdeGcmSeal(key, iv, 12, NULL, 0, pt, (size_t)INT32_MAX + 1u, ct, tag),
                   TDE_RANGE);
  memset(ct, 0xEE, sizeof(ct));
  assert_int_equal(tdeGcmOpen(key, iv, 0, NULL, 0, pt, 16, tag, ct), TDE_RANGE);
  assert_true(allZero(ct, sizeof(ct)));
}


/* ---- HKDF, HMAC, SHA-256 ----------------------------------------------- */

static void test_hkdf_rfc5869(void **state){
  uint8_t ikm[22], salt[13], info[10], okm[42], want[42];
  TDE_UNUSED(state);
  unhex("0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", ikm, sizeof(ikm));
  unhex("000102030405060708090a0b0c", salt, sizeof(salt));
  unhex("f0f1f2f3f4f5f6f7f8f9", info, sizeof(info));

  /* Test case 1 */
  unhex("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf"
        "34007208d5b887185865", want, sizeof(want));
  assert_int_equal(tdeHkdf(ikm, 22, salt, 13, info, 10, okm, 42), TDE_OK);
  assert_memory_equal(okm, want, 42);

  /* Test case 3: no salt, no info (the page-subkey derivation has no salt) */
  unhex("8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d"
        "9d201395faa4b61a96c8", want, sizeof(want));
  assert_int_equal(tdeHkdf(ikm, 22, NULL, 0, NULL, 0, okm, 42), TDE_OK);
  assert_memory_equal(okm, want, 42);

  assert_int_equal(tdeHkdf(ikm, 22, NULL, 0, NULL, 0, okm, 0), TDE_RANGE);
}

static void test_hmac_rfc4231(void **state){
  static const char zData[] = "what do ya want for nothing?";
  uint8_t want[32], mac[32];
  const uint8_t *apPart[3];
  size_t anPart[3];
  TDE_UNUSED(state);
  unhex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", want, 32);

  apPart[0] = (const uint8_t*)zData;
  anPart[0] = sizeof(zData)-1;
  assert_int_equal(tdeHmacSha256((const uint8_t*)"Jefe", 4, apPart, anPart, 1, mac), TDE_OK);
  assert_memory_equal(mac, want, 32);

  /* same message in three parts, one of them empty */
  apPart[0] = (const uint8_t*)zData;      anPart[0] = 7;
  apPart[1] = NULL;                       anPart[1] = 0;
  apPart[2] = (const uint8_t*)zData + 7;  anPart[2] = sizeof(zData)-1-7;
  memset(mac, 0, sizeof(mac));
  assert_int_equal(tdeHmacSha256((const uint8_t*)"Jefe", 4, apPart, anPart, 3, mac), TDE_OK);
  assert_memory_equal(mac, want, 32);

  /* empty key and empty message work too (any answer but an error) */
  assert_int_equal(tdeHmacSha256(NULL, 0, NULL, NULL, 0, mac), TDE_OK);
  assert_int_equal(tdeHmacSha256(NULL, 0, NULL, NULL, -1, mac), TDE_MISUSE);
}

static void test_sha256(void **state){
  uint8_t want[32], md[32];
  TDE_UNUSED(state);
  unhex("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", want, 32);
  assert_int_equal(tdeSha256((const uint8_t*)"abc", 3, md), TDE_OK);
  assert_memory_equal(md, want, 32);
  unhex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", want, 32);
  assert_int_equal(tdeSha256(NULL, 0, md), TDE_OK);
  assert_memory_equal(md, want, 32);
}

/* ---- page cipher ------------------------------------------------------- */

static const uint8_t aDek[32] = {
  0x60,0x3d,0xeb,0x10,0x15,0xca,0x71,0xbe,0x2b,0x73,0xae,0xf0,0x85,0x7d,0x77,0x81,
  0x1f,0x35,0x2c,0x07,0x3b,0x61,0x08,0xd7,0x2d,0x98,0x10,0xa3,0x09,0x14,0xdf,0xf4
};
#define TEST_VERSION 7u

/*
** Open a sealed page from first principles (cipher.h's description),
** without the page cipher: K_S by HKDF, then one-shot GCM with
** aad || trailer[0..12) || trailer[40..48).
*/
static int referenceOpen(const uint8_t dek[32], const uint8_t *aad, size_t nAad,
                         const uint8_t *ct, size_t n, const uint8_t *trailer,
                         uint8_t *pt){
  static const char zInfo[] = "sqlite-tde v1 page subkey";
  uint8_t info[sizeof(zInfo) - 1 + 12];
  uint8_t ks[32];
  uint8_t aFull[256];
  int rc;
  assert_true(nAad + 20 <= sizeof(aFull));
  memcpy(info, zInfo, sizeof(zInfo) - 1);
  memcpy(info + sizeof(zInfo) - 1, trailer, 12);
  assert_int_equal(tdeHkdf(dek, 32, NULL, 0, info, sizeof(info), ks, 32), TDE_OK);
  if( nAad ) memcpy(aFull, aad, nAad);
  memcpy(aFull + nAad, trailer, 12);
  memcpy(aFull + nAad + 12, trailer + 40, 8);
  rc = tdeGcmOpen(ks, trailer + 12, 12, aFull, nAad + 20, ct, n, trailer + 24, pt);
  tdeWipe(ks, sizeof(ks));
  return rc;
}

static void test_page_roundtrip_sizes(void **state){
  TdePageCipher *pSeal = NULL, *pOpen = NULL;
  size_t P;
  uint32_t pgno = 1;
  TDE_UNUSED(state);
  assert_int_equal(tdePageCipherNew(aDek, TEST_VERSION, &pSeal), TDE_OK);
  assert_int_equal(tdePageCipherNew(aDek, TEST_VERSION, &pOpen), TDE_OK);
  assert_int_equal(tdePageCipherVersion(pSeal), TEST_VERSION);

  for(P=512; P<=65536; P*=2, pgno++){
    size_t n = P - TDE_TRAILER_SIZE;
    uint8_t *orig = malloc(P), *page = malloc(P), *out = malloc(P);
    uint8_t aad[4];
    assert_non_null(orig); assert_non_null(page); assert_non_null(out);
    tdePut32(aad, pgno);
    rngFill(orig, n);

    /* in place: the VFS's layout, trailer right after the data */
    memcpy(page, orig, n);
    assert_int_equal(tdePageSeal(pSeal, aad, 4, page, n, page, page + n), TDE_OK);
    assert_memory_not_equal(page, orig, n);
    assert_int_equal(tdeTrailerVersion(page + n), TEST_VERSION);
    assert_true(allZero(page + n + 44, 4));            /* reserved */

    /* independent derivation agrees */
    assert_int_equal(referenceOpen(aDek, aad, 4, page, n, page + n, out), TDE_OK);
    assert_memory_equal(out, orig, n);

    /* another object (new session) opens it, out of place then in place */
    memset(out, 0, P);
    assert_int_equal(tdePageOpen(pOpen, aad, 4, page, n, page + n, out), TDE_OK);
    assert_memory_equal(out, orig, n);
    /* the sealer itself opens it (its own session's context) */
    memset(out, 0, P);
    assert_int_equal(tdePageOpen(pSeal, aad, 4, page, n, page + n, out), TDE_OK);
    assert_memory_equal(out, orig, n);
    assert_int_equal(tdePageOpen(pOpen, aad, 4, page, n, page + n, page), TDE_OK);
    assert_memory_equal(page, orig, n);

    /* out of place seal */
    assert_int_equal(tdePageSeal(pSeal, aad, 4, orig, n, out, out + n), TDE_OK);
    assert_int_equal(tdePageOpen(pOpen, aad, 4, out, n, out + n, page), TDE_OK);
    assert_memory_equal(page, orig, n);

    free(orig); free(page); free(out);
  }
  tdePageCipherFree(pSeal);
  tdePageCipherFree(pOpen);
}

/* Every flipped byte of ciphertext and trailer is rejected, pt wiped. */
static void test_page_tamper(void **state){
  enum { P = 4096, N = P - TDE_TRAILER_SIZE };
  TdePageCipher *pSeal = NULL, *pOpen = NULL;
  uint8_t *orig = malloc(P), *page = malloc(P), *out = malloc(P);
  uint8_t aad[4] = { 0, 0, 0, 42 };
  size_t i;
  TDE_UNUSED(state);
  assert_non_null(orig); assert_non_null(page); assert_non_null(out);
  assert_int_equal(tdePageCipherNew(aDek, TEST_VERSION, &pSeal), TDE_OK);
  assert_int_equal(tdePageCipherNew(aDek, TEST_VERSION, &pOpen), TDE_OK);
  rngFill(orig, N);
  assert_int_equal(tdePageSeal(pSeal, aad, 4, orig, N, page, page + N), TDE_OK);

  for(i=0; i<P; i++){
    int rcWant = (i>=N+40 && i<N+44) ? TDE_NOKEY : TDE_AUTH;
    page[i] ^= 0x01;
    memset(out, 0xAA, N);
    assert_int_equal(tdePageOpen(pOpen, aad, 4, page, N, page + N, out), rcWant);
    assert_true(allZero(out, N));
    page[i] ^= 0x01;
  }
  /* a high-bit flip in each trailer byte too */
  for(i=N; i<P; i++){
    int rcWant = (i>=N+40 && i<N+44) ? TDE_NOKEY : TDE_AUTH;
    page[i] ^= 0x80;
    memset(out, 0xAA, N);
    assert_int_equal(tdePageOpen(pOpen, aad, 4, page, N, page + N, out), rcWant);
    assert_true(allZero(out, N));
    page[i] ^= 0x80;
  }
  /* wrong and missing aad */
  aad[3] = 43;
  memset(out, 0xAA, N);
  assert_int_equal(tdePageOpen(pOpen, aad, 4, page, N, page + N, out), TDE_AUTH);
  assert_true(allZero(out, N));
  aad[3] = 42;
  memset(out, 0xAA, N);
  assert_int_equal(tdePageOpen(pOpen, NULL, 0, page, N, page + N, out), TDE_AUTH);
  assert_true(allZero(out, N));
  /* truncated ciphertext */
  assert_int_equal(tdePageOpen(pOpen, aad, 4, page, N - 16, page + N, out), TDE_AUTH);
  /* in-place failure wipes the buffer */
  memcpy(out, page, P);
  out[5] ^= 1;
  assert_int_equal(tdePageOpen(pOpen, aad, 4, out, N, out + N, out), TDE_AUTH);
  assert_true(allZero(out, N));
  /* the untouched page still opens after all that */
  assert_int_equal(tdePageOpen(pOpen, aad, 4, page, N, page + N, out), TDE_OK);
  assert_memory_equal(out, orig, N);

  tdePageCipherFree(pSeal);
  tdePageCipherFree(pOpen);
  free(orig); free(page); free(out);
}

static void test_page_wrong_key_or_version(void **state){
  enum { P = 1024, N = P - TDE_TRAILER_SIZE };
  TdePageCipher *pSeal = NULL, *pOther = NULL, *pV8 = NULL;
  uint8_t dek2[32];
  uint8_t page[P], out[P];
  TDE_UNUSED(state);
  memcpy(dek2, aDek, 32);
  dek2[0] ^= 1;
  assert_int_equal(tdePageCipherNew(aDek, TEST_VERSION, &pSeal), TDE_OK);
  assert_int_equal(tdePageCipherNew(dek2, TEST_VERSION, &pOther), TDE_OK);
  assert_int_equal(tdePageCipherNew(aDek, TEST_VERSION + 1, &pV8), TDE_OK);
  rngFill(page, N);
  assert_int_equal(tdePageSeal(pSeal, NULL, 0, page, N, page, page + N), TDE_OK);

  memset(out, 0xAA, sizeof(out));
  assert_int_equal(tdePageOpen(pOther, NULL, 0, page, N, page + N, out), TDE_AUTH);
  assert_true(allZero(out, N));
  memset(out, 0xAA, sizeof(out));
  assert_int_equal(tdePageOpen(pV8, NULL, 0, page, N, page + N, out), TDE_NOKEY);
  assert_true(allZero(out, N));
  assert_int_equal(tdePageOpen(pSeal, NULL, 0, page, N, page + N, out), TDE_OK);

  tdePageCipherFree(pSeal);
  tdePageCipherFree(pOther);
  tdePageCipherFree(pV8);
  assert_int_equal(tdePageCipherNew(NULL, 1, &pSeal), TDE_MISUSE);
  assert_null(pSeal);
  tdePageCipherFree(NULL);
}

/* Salts differ between objects; IVs are 0 || R, R+1, R+2, ... per object
** (R the session's random counter start). */
static void test_page_salts_and_ivs(void **state){
  enum { NSEAL = 20000 };
  TdePageCipher *pA = NULL, *pB = NULL;
  uint8_t data[64], tA[TDE_TRAILER_SIZE], tB[TDE_TRAILER_SIZE], t[TDE_TRAILER_SIZE];
  uint8_t saltA[12];
  uint32_t i;
  TDE_UNUSED(state);
  assert_int_equal(tdePageCipherNew(aDek, TEST_VERSION, &pA), TDE_OK);
  assert_int_equal(tdePageCipherNew(aDek, TEST_VERSION, &pB), TDE_OK);
  rngFill(data, sizeof(data));
  assert_int_equal(tdePageSeal(pA, NULL, 0, data, sizeof(data), data, tA), TDE_OK);
  assert_int_equal(tdePageSeal(pB, NULL, 0, data, sizeof(data), data, tB), TDE_OK);
  assert_memory_not_equal(tA, tB, 12);                /* different sessions */
  assert_int_equal(tdeGet32(tA + 12), 0);             /* IV bits 95..64 */
  assert_int_equal(tdeGet32(tB + 12), 0);
  assert_true(tdeGet64(tA + 16)!=tdeGet64(tB + 16));  /* random starts (2^-64) */
  memcpy(saltA, tA, 12);

  /* strictly increasing counter => all IVs distinct; salt fixed */
  for(i=1; i<NSEAL; i++){
    assert_int_equal(tdePageSeal(pA, NULL, 0, data, sizeof(data), data, t), TDE_OK);
    assert_memory_equal(t, saltA, 12);
    assert_int_equal(tdeGet32(t + 12), 0);
    assert_int_equal(tdeGet64(t + 16), tdeGet64(tA + 16) + i);
    assert_int_equal(tdeTrailerVersion(t), TEST_VERSION);
  }
  tdePageCipherFree(pA);
  tdePageCipherFree(pB);
}

/*
** A child process must not continue its parent's session (same salt and
** counter would repeat IVs): after fork() parent and child seal under
** different salts, both new to the pre-fork one only in the child.
*/
static void test_page_fork(void **state){
  TdePageCipher *p = NULL;
  uint8_t data[32] = {0}, tBefore[TDE_TRAILER_SIZE], tParent[TDE_TRAILER_SIZE];
  uint8_t tChild[TDE_TRAILER_SIZE];
  int aPipe[2], status = 0;
  pid_t pid;
  TDE_UNUSED(state);
  assert_int_equal(tdePageCipherNew(aDek, TEST_VERSION, &p), TDE_OK);
  assert_int_equal(tdePageSeal(p, NULL, 0, data, sizeof(data), data, tBefore), TDE_OK);
  assert_int_equal(pipe(aPipe), 0);
  pid = fork();
  assert_true(pid>=0);
  if( pid==0 ){
    uint8_t t[TDE_TRAILER_SIZE];
    int ok = tdePageSeal(p, NULL, 0, data, sizeof(data), data, t)==TDE_OK
          && write(aPipe[1], t, sizeof(t))==(ssize_t)sizeof(t);
    _exit(ok ? 0 : 1);
  }
  close(aPipe[1]);
  assert_int_equal(read(aPipe[0], tChild, sizeof(tChild)), (ssize_t)sizeof(tChild));
  close(aPipe[0]);
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status)==0);

  assert_int_equal(tdePageSeal(p, NULL, 0, data, sizeof(data), data, tParent), TDE_OK);
  assert_memory_equal(tParent, tBefore, 12);            /* parent continues */
  assert_int_equal(tdeGet64(tParent + 16), tdeGet64(tBefore + 16) + 1);
  assert_memory_not_equal(tChild, tBefore, 12);         /* child: new salt */
  assert_int_equal(tdeGet32(tChild + 12), 0);
  tdePageCipherFree(p);
}

/*
** One reader opens pages of more sessions than its cache holds, in an
** order that forces evictions, interleaved with its own seals (whose
** context it shares for opening).  Everything must still open.
*/
static void test_page_many_sessions(void **state){
  enum { NSESS = 20, P = 512, N = P - TDE_TRAILER_SIZE };
  TdePageCipher *apS[NSESS];
  TdePageCipher *pR = NULL;
  static uint8_t aPage[NSESS][P], aOrig[NSESS][N];
  uint8_t own[P], ownOrig[N], out[P];
  int i, round;
  TDE_UNUSED(state);
  assert_int_equal(tdePageCipherNew(aDek, TEST_VERSION, &pR), TDE_OK);
  for(i=0; i<NSESS; i++){
    uint8_t aad[4];
    tdePut32(aad, (uint32_t)i);
    assert_int_equal(tdePageCipherNew(aDek, TEST_VERSION, &apS[i]), TDE_OK);
    rngFill(aOrig[i], N);
    assert_int_equal(tdePageSeal(apS[i], aad, 4, aOrig[i], N, aPage[i], aPage[i] + N),
                     TDE_OK);
    tdePageCipherFree(apS[i]);
  }
  for(round=0; round<5; round++){
    for(i=0; i<NSESS; i++){
      int k = (i*7 + round*3) % NSESS;
      uint8_t aad[4];
      tdePut32(aad, (uint32_t)k);
      assert_int_equal(tdePageOpen(pR, aad, 4, aPage[k], N, aPage[k] + N, out), TDE_OK);
      assert_memory_equal(out, aOrig[k], N);
      /* session 0 is used at every step, so LRU keeps it; wrong aad
      ** for it still fails */
      assert_int_equal(tdePageOpen(pR, aad, 0, aPage[0], N, aPage[0] + N, out), TDE_AUTH);
      tdePut32(aad, 0);
      assert_int_equal(tdePageOpen(pR, aad, 4, aPage[0], N, aPage[0] + N, out), TDE_OK);

      /* interleave own seals and opens on the shared seal context */
      rngFill(ownOrig, N);
      assert_int_equal(tdePageSeal(pR, NULL, 0, ownOrig, N, own, own + N), TDE_OK);
      assert_int_equal(tdePageOpen(pR, NULL, 0, own, N, own + N, out), TDE_OK);
      assert_memory_equal(out, ownOrig, N);
      assert_int_equal(referenceOpen(aDek, NULL, 0, own, N, own + N, out), TDE_OK);
      assert_memory_equal(out, ownOrig, N);
    }
  }
  tdePageCipherFree(pR);
}

/* Long aad (more than the one-call fast path) and empty pages. */
static void test_page_aad_and_empty(void **state){
  TdePageCipher *p = NULL;
  uint8_t aad[200], data[100], ct[100], out[100], t[TDE_TRAILER_SIZE];
  size_t nAad;
  TDE_UNUSED(state);
  assert_int_equal(tdePageCipherNew(aDek, TEST_VERSION, &p), TDE_OK);
  rngFill(aad, sizeof(aad));
  rngFill(data, sizeof(data));
  for(nAad=0; nAad<=sizeof(aad); nAad+=11){
    assert_int_equal(tdePageSeal(p, aad, nAad, data, sizeof(data), ct, t), TDE_OK);
    assert_int_equal(referenceOpen(aDek, aad, nAad, ct, sizeof(ct), t, out), TDE_OK);
    assert_memory_equal(out, data, sizeof(data));
    assert_int_equal(tdePageOpen(p, aad, nAad, ct, sizeof(ct), t, out), TDE_OK);
    assert_memory_equal(out, data, sizeof(data));
    if( nAad ){
      aad[nAad/2] ^= 1;
      assert_int_equal(tdePageOpen(p, aad, nAad, ct, sizeof(ct), t, out), TDE_AUTH);
      aad[nAad/2] ^= 1;
    }
  }
  assert_int_equal(tdePageSeal(p, NULL, 0, NULL, 0, NULL, t), TDE_OK);
  assert_int_equal(tdePageOpen(p, NULL, 0, NULL, 0, t, NULL), TDE_OK);
  t[30] ^= 1;
  assert_int_equal(tdePageOpen(p, NULL, 0, NULL, 0, t, NULL), TDE_AUTH);
  tdePageCipherFree(p);
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_secmem),
    cmocka_unit_test(test_wipe_compare_random),
    cmocka_unit_test(test_gcm_kat),
    cmocka_unit_test(test_gcm_bad_lengths),
    cmocka_unit_test(test_hkdf_rfc5869),
    cmocka_unit_test(test_hmac_rfc4231),
    cmocka_unit_test(test_sha256),
    cmocka_unit_test(test_page_roundtrip_sizes),
    cmocka_unit_test(test_page_tamper),
    cmocka_unit_test(test_page_wrong_key_or_version),
    cmocka_unit_test(test_page_salts_and_ivs),
    cmocka_unit_test(test_page_fork),
    cmocka_unit_test(test_page_many_sessions),
    cmocka_unit_test(test_page_aad_and_empty),
  };
  printf("test_cipher: PRNG seed 0x%08x\n", (unsigned)TEST_SEED);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
