/*
** Unit tests for the archive's object codec (src/archive/object.c,
** docs/ARCHIVE.md "Objects" and "Layout"): names built and parsed (and
** foreign names refused), header round trips, base copies and segments
** checked whole against a pinned Ed25519 key, and every tamper the
** restore must refuse (a byte of the copy or of a record, records
** reordered or dropped, a head of another key, database or sequence, a
** chain that does not continue, a MARK record).
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "archive/object.h"
#include "cipher/cipher.h"

static const uint8_t aDbid[16] = {0xde,0xad,0xbe,0xef,1,2,3,4,5,6,7,8,9,10,11,12};
static const uint8_t aHist[16] = {0x0f,0xf0,0,1,2,3,4,5,6,7,8,9,0xa,0xb,0xc,0xd};

static void testNames(void **state){
  char z[TDE_ARCH_NAME_MAX];
  TdeArchName nm;
  (void)state;
  assert_int_equal(tdeArchBaseName("pre/fix/", aDbid, aHist, 0x2a, z, sizeof(z)), TDE_OK);
  assert_string_equal(z, "pre/fix/deadbeef0102030405060708090a0b0c/0ff000010203040506070809"
                         "0a0b0c0d/base/000000000000002a.base");
  assert_int_equal(tdeArchNameParse("/pre/fix", z, &nm), TDE_OK);
  assert_int_equal(nm.eKind, TDE_ARCH_KIND_BASE);
  assert_memory_equal(nm.aDbid, aDbid, 16);
  assert_memory_equal(nm.aHistory, aHist, 16);
  assert_true(nm.first==0x2a && nm.last==0x2a);

  assert_int_equal(tdeArchSegName("", aDbid, aHist, 1, 0x1234567890abcdefull, z, sizeof(z)), TDE_OK);
  assert_string_equal(z, "deadbeef0102030405060708090a0b0c/0ff0000102030405060708090a0b0c0d/seg/"
                         "0000000000000001-1234567890abcdef.seg");
  assert_int_equal(tdeArchNameParse(0, z, &nm), TDE_OK);
  assert_int_equal(nm.eKind, TDE_ARCH_KIND_SEG);
  assert_true(nm.first==1 && nm.last==0x1234567890abcdefull);
  /* A name under another prefix is not ours. */
  assert_int_equal(tdeArchNameParse("other", z, &nm), TDE_NOTFOUND);

  assert_int_equal(tdeArchHistDir("p", aDbid, aHist, z, sizeof(z)), TDE_OK);
  assert_string_equal(z, "p/deadbeef0102030405060708090a0b0c/0ff0000102030405060708090a0b0c0d/");
  assert_int_equal(tdeArchDbDir("p", aDbid, z, sizeof(z)), TDE_OK);
  assert_string_equal(z, "p/deadbeef0102030405060708090a0b0c/");
  assert_int_equal(tdeArchDbDir("p", aDbid, z, 10), TDE_RANGE);

  /* Foreign or malformed names. */
  static const char *azBad[] = {
    "p/deadbeef0102030405060708090a0b0c/0ff0000102030405060708090a0b0c0d/seg/0000000000000002-0000000000000001.seg",
    "p/deadbeef0102030405060708090a0b0c/0ff0000102030405060708090a0b0c0d/seg/0000000000000000-0000000000000001.seg",
    "p/DEADBEEF0102030405060708090a0b0c/0ff0000102030405060708090a0b0c0d/base/0000000000000001.base",
    "p/deadbeef0102030405060708090a0b0c/0ff0000102030405060708090a0b0c0d/base/000000000000001.base",
    "p/deadbeef0102030405060708090a0b0c/0ff0000102030405060708090a0b0c0d/base/0000000000000001.bas",
    "p/deadbeef0102030405060708090a0b0c/0ff0000102030405060708090a0b0c0d/base/0000000000000001.base.tmp",
    "p/deadbeef0102030405060708090a0b0c/0ff0000102030405060708090a0b0c0d/x/0000000000000001.base",
    "p/deadbeef0102030405060708090a0b0c0ff0000102030405060708090a0b0c0d/base/0000000000000001.base",
    "p/deadbeef0102030405060708090a0b0c/0ff0000102030405060708090a0b0c0d/seg/000000000000000g-0000000000000001.seg",
  };
  for(size_t i=0; i<sizeof(azBad)/sizeof(azBad[0]); i++){
    assert_int_equal(tdeArchNameParse("p", azBad[i], &nm), TDE_NOTFOUND);
  }

  assert_int_equal(tdeArchPrefixCheck(""), TDE_OK);
  assert_int_equal(tdeArchPrefixCheck("/a/b-c_d.e/"), TDE_OK);
  assert_int_equal(tdeArchPrefixCheck("a//b"), TDE_CONFIG);
  assert_int_equal(tdeArchPrefixCheck("a/../b"), TDE_CONFIG);
  assert_int_equal(tdeArchPrefixCheck("a b"), TDE_CONFIG);
}

static EVP_PKEY *newKey(void){
  EVP_PKEY *k = EVP_PKEY_Q_keygen(0, 0, "ED25519");
  assert_non_null(k);
  return k;
}

static void testBase(void **state){
  EVP_PKEY *k = newKey(), *k2 = newKey();
  size_t nCopy = TDE_HEADER_BYTES + 2*4096, n = TDE_ARCH_BASE_HDR + nCopy;
  uint8_t *a = malloc(n);
  TdeArchBase b, d;
  uint8_t other[16];
  (void)state;
  assert_non_null(a);
  for(size_t i=0; i<nCopy; i++) a[TDE_ARCH_BASE_HDR+i] = (uint8_t)(i*7+3);
  memset(&b, 0, sizeof(b));
  memcpy(b.aDbid, aDbid, 16);
  memcpy(b.aHistory, aHist, 16);
  b.seq = 77;
  b.size = nCopy;
  b.tCapture = 1700000000123ull;
  memset(b.aChain, 0x5a, 32);
  assert_int_equal(tdeSha256(a+TDE_ARCH_BASE_HDR, nCopy, b.aSum), TDE_OK);
  assert_int_equal(tdeArchBaseSign(k, &b), TDE_OK);
  tdeArchBaseEncode(&b, a);
  assert_memory_equal(a, "TDEABAS1", 8);

  assert_int_equal(tdeArchBaseCheck(a, n, &k, 1, aDbid, aHist, &d), TDE_OK);
  assert_memory_equal(&d, &b, sizeof(b));
  /* Only the pinned key. */
  assert_int_equal(tdeArchBaseCheck(a, n, &k2, 1, aDbid, aHist, &d), TDE_AUTH);
  assert_int_equal(tdeArchBaseCheck(a, n, &k, 0, aDbid, aHist, &d), TDE_AUTH);
  /* Another database or history. */
  memcpy(other, aDbid, 16);
  other[0] ^= 1;
  assert_int_equal(tdeArchBaseCheck(a, n, &k, 1, other, aHist, &d), TDE_AUTH);
  assert_int_equal(tdeArchBaseCheck(a, n, &k, 1, aDbid, other, &d), TDE_AUTH);
  /* Truncated, or a byte of the copy changed. */
  assert_int_equal(tdeArchBaseCheck(a, n-1, &k, 1, aDbid, aHist, &d), TDE_FORMAT);
  a[n-100] ^= 0x40;
  assert_int_equal(tdeArchBaseCheck(a, n, &k, 1, aDbid, aHist, &d), TDE_AUTH);
  a[n-100] ^= 0x40;
  /* A header field changed (the sequence: an old base passed off as new). */
  a[47] ^= 1;
  assert_int_equal(tdeArchBaseCheck(a, n, &k, 1, aDbid, aHist, &d), TDE_AUTH);
  a[47] ^= 1;
  a[0] = 'X';
  assert_int_equal(tdeArchBaseDecode(a, n, &d), TDE_FORMAT);
  assert_int_equal(tdeArchBaseDecode(a, 100, &d), TDE_FORMAT);
  free(a);
  EVP_PKEY_free(k);
  EVP_PKEY_free(k2);
}

/* One record as the spool stores it: GAP without payload, TXN with one
** 512-byte frame, MARK without payload; seq as given. */
static size_t makeRec(uint8_t *a, uint64_t seq, int kind){
  TdeRec r;
  size_t nPay = kind==TDE_REC_TXN ? TDE_FRAME_HDR + 512 : 0;
  memset(&r, 0, sizeof(r));
  r.seq = seq;
  r.kind = (uint8_t)kind;
  r.pgsz = kind==TDE_REC_TXN ? 512 : 0;
  r.nFrame = kind==TDE_REC_TXN ? 1 : 0;
  r.iFirst = r.iLast = (uint32_t)seq;
  r.tCapture = 1700000000000ull + seq;
  r.nPayload = (uint32_t)nPay;
  tdeRecEncode(&r, a);
  for(size_t i=0; i<nPay; i++) a[TDE_REC_HDR+i] = (uint8_t)(seq + i);
  tdeSha256(a, TDE_REC_HDR + nPay, a + TDE_REC_HDR + nPay);
  return TDE_REC_HDR + nPay + TDE_REC_SUM;
}

/* A segment of records first..last (kinds from azKind, 'T' or 'G' or 'M'),
** chain before from aChainBefore, head signed by k at headSeq.  Returns
** its size; *paRecOff the offsets of the records. */
static size_t makeSeg(uint8_t *a, uint64_t first, const char *zKind, const uint8_t *aChainBefore,
                      EVP_PKEY *k, const uint8_t *aHeadDbid, int headDelta, size_t *aRecOff){
  TdeArchSeg h;
  uint8_t aChain[32];
  size_t iOff = TDE_ARCH_SEG_HDR;
  uint64_t seq = first;
  memcpy(aChain, aChainBefore, 32);
  for(int i=0; zKind[i]; i++){
    int kind = zKind[i]=='T' ? TDE_REC_TXN : zKind[i]=='G' ? TDE_REC_GAP : TDE_REC_MARK;
    size_t nRec = makeRec(a+iOff, seq, kind);
    aRecOff[i] = iOff;
    tdeChainNext(aChain, a+iOff+nRec-TDE_REC_SUM, aChain);
    iOff += nRec;
    seq++;
  }
  memset(&h, 0, sizeof(h));
  memcpy(h.aDbid, aDbid, 16);
  memcpy(h.aHistory, aHist, 16);
  h.first = first;
  h.last = seq-1;
  memcpy(h.aChainBefore, aChainBefore, 32);
  h.nRecBytes = iOff - TDE_ARCH_SEG_HDR;
  h.tClosed = 1700000009999ull;
  tdeArchSegEncode(&h, a);
  assert_int_equal(tdeHeadMake(k, aHeadDbid, aHist, (uint64_t)((int64_t)(seq-1) + headDelta), aChain, a+iOff),
                   TDE_OK);
  return iOff + TDE_HEAD_BYTES;
}

static void testSegment(void **state){
  EVP_PKEY *k = newKey(), *k2 = newKey();
  static uint8_t a[8192], b[8192];
  size_t aOff[8], bOff[8], n, nB, iOff = 0, nRec;
  uint8_t aAnchor[32], aChain[32], aChain2[32], other[16];
  TdeArchSeg h;
  TdeRec r;
  const uint8_t *pRec;
  int nSeen = 0;
  (void)state;
  tdeChainAnchor(aHist, 4, aAnchor);
  n = makeSeg(a, 5, "GTTT", aAnchor, k, aDbid, 0, aOff);
  assert_int_equal(tdeArchSegCheck(a, n, &k, 1, aDbid, aHist, aAnchor, &h, aChain), TDE_OK);
  assert_true(h.first==5 && h.last==8 && h.nRecBytes==n-TDE_ARCH_SEG_HDR-TDE_HEAD_BYTES);
  assert_int_equal(tdeArchSegCheck(a, n, &k, 1, 0, 0, 0, &h, 0), TDE_OK);
  while( tdeArchSegNext(a, n, &iOff, &r, &pRec, &nRec)==TDE_OK ){
    assert_true(r.seq==5+(uint64_t)nSeen);
    assert_ptr_equal(pRec, a+aOff[nSeen]);
    nSeen++;
  }
  assert_int_equal(nSeen, 4);

  /* The next segment continues the chain; it checks only from there. */
  nB = makeSeg(b, 9, "TT", aChain, k, aDbid, 0, bOff);
  assert_int_equal(tdeArchSegCheck(b, nB, &k, 1, aDbid, aHist, aChain, &h, aChain2), TDE_OK);
  assert_int_equal(tdeArchSegCheck(b, nB, &k, 1, aDbid, aHist, aAnchor, &h, 0), TDE_AUTH);

  /* Pinned key only; another database; no key. */
  assert_int_equal(tdeArchSegCheck(a, n, &k2, 1, aDbid, aHist, aAnchor, &h, 0), TDE_AUTH);
  assert_int_equal(tdeArchSegCheck(a, n, &k, 0, aDbid, aHist, aAnchor, &h, 0), TDE_AUTH);
  memcpy(other, aDbid, 16);
  other[15] ^= 1;
  assert_int_equal(tdeArchSegCheck(a, n, &k, 1, other, aHist, aAnchor, &h, 0), TDE_AUTH);

  /* A byte of a record payload changed: its checksum fails. */
  a[aOff[2] + TDE_REC_HDR + 10] ^= 1;
  assert_int_equal(tdeArchSegCheck(a, n, &k, 1, aDbid, aHist, aAnchor, &h, 0), TDE_FORMAT);
  a[aOff[2] + TDE_REC_HDR + 10] ^= 1;
  /* Two records swapped (same sizes): out of sequence. */
  {
    size_t nR = aOff[3]-aOff[2];
    uint8_t t[1024];
    memcpy(t, a+aOff[2], nR);
    memcpy(a+aOff[2], a+aOff[3], nR);
    memcpy(a+aOff[3], t, nR);
    assert_int_equal(tdeArchSegCheck(a, n, &k, 1, aDbid, aHist, aAnchor, &h, 0), TDE_AUTH);
    memcpy(a+aOff[3], a+aOff[2], nR);
    memcpy(a+aOff[2], t, nR);
    assert_int_equal(tdeArchSegCheck(a, n, &k, 1, aDbid, aHist, aAnchor, &h, 0), TDE_OK);
  }
  /* Truncated object; the header's range or size changed. */
  assert_int_equal(tdeArchSegCheck(a, n-1, &k, 1, aDbid, aHist, aAnchor, &h, 0), TDE_FORMAT);
  a[55] ^= 1;   /* last = 9 */
  assert_int_not_equal(tdeArchSegCheck(a, n, &k, 1, aDbid, aHist, aAnchor, &h, 0), TDE_OK);
  a[55] ^= 1;
  a[120] = 1;   /* reserved */
  assert_int_equal(tdeArchSegDecode(a, n, &h), TDE_FORMAT);
  a[120] = 0;

  /* A head of another database, or at another sequence. */
  n = makeSeg(a, 5, "GTTT", aAnchor, k, other, 0, aOff);
  assert_int_equal(tdeArchSegCheck(a, n, &k, 1, aDbid, aHist, aAnchor, &h, 0), TDE_AUTH);
  n = makeSeg(a, 5, "GTTT", aAnchor, k, aDbid, -1, aOff);
  assert_int_equal(tdeArchSegCheck(a, n, &k, 1, aDbid, aHist, aAnchor, &h, 0), TDE_AUTH);
  /* A MARK never belongs in a segment. */
  n = makeSeg(a, 5, "TMT", aAnchor, k, aDbid, 0, aOff);
  assert_int_equal(tdeArchSegCheck(a, n, &k, 1, aDbid, aHist, aAnchor, &h, 0), TDE_FORMAT);
  EVP_PKEY_free(k);
  EVP_PKEY_free(k2);
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(testNames),
    cmocka_unit_test(testBase),
    cmocka_unit_test(testSegment),
  };
  return cmocka_run_group_tests(tests, 0, 0);
}
