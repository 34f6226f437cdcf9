/*
** Unit tests for the KMIP TTLV codec (src/keystore/kmip/ttlv.c): the
** encoding examples of the KMIP specification ("TTLV Encoding Examples",
** KMIP 1.x section 9.1.2; cross-checked against PyKMIP's encoder) both
** ways, a nested request round trip, and hostile input: truncated at every
** length, lying lengths, wrong fixed lengths, unknown types, bad tags,
** non-zero padding, a boolean of 2, trailing bytes, nesting past the depth
** limit, too many items, oversized messages, and getters asked for the
** wrong type.  Every case must come back as a clean error code with a
** message, and never read outside the buffer (ASan run).
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sqlite-tde.h"
#include "keystore/kmip/ttlv.h"

#define TAG 0x420020u

static size_t unhex(const char *z, uint8_t *a, size_t nMax){
  size_t n = 0;
  while( *z ){
    unsigned v;
    if( *z==' ' || *z=='|' ){ z++; continue; }
    assert_true(n<nMax);
    assert_int_equal(sscanf(z, "%2x", &v), 1);
    a[n++] = (uint8_t)v;
    z += 2;
  }
  return n;
}

/* Encode with xEnc and compare to the spec's bytes; decode the spec's bytes. */
static void expectBytes(TtlvEnc *e, const char *zHex){
  uint8_t aWant[256];
  const uint8_t *a;
  size_t n, nWant = unhex(zHex, aWant, sizeof(aWant));
  assert_int_equal(ttlvEncFinish(e, &a, &n), TDE_OK);
  assert_int_equal(n, nWant);
  assert_memory_equal(a, aWant, n);
  ttlvEncFree(e);
}

static void decodeOne(const char *zHex, TtlvDoc *pDoc, uint8_t *aBuf, size_t nBuf){
  size_t n = unhex(zHex, aBuf, nBuf);
  int rc = ttlvDecode(aBuf, n, pDoc);
  if( rc ) fail_msg("decode %s: %s", zHex, pDoc->zErr);
  assert_int_equal(pDoc->nItem >= 1, 1);
  assert_int_equal(pDoc->aItem[0].tag, TAG);
}

static void test_spec_vectors(void **state){
  TtlvEnc e;
  TtlvDoc d;
  uint8_t a[256];
  int32_t i32; int64_t i64; uint32_t u32; int b;
  const char *z; const uint8_t *p; size_t n;
  (void)state;

  ttlvEncInit(&e); ttlvEncInt(&e, TAG, 8);
  expectBytes(&e, "420020 02 00000004 00000008 00000000");
  decodeOne("420020 02 00000004 00000008 00000000", &d, a, sizeof(a));
  assert_int_equal(ttlvGetInt(&d, 0, &i32), TDE_OK); assert_int_equal(i32, 8);
  ttlvDocFree(&d);

  ttlvEncInit(&e); ttlvEncLong(&e, TAG, 123456789000000000LL);
  expectBytes(&e, "420020 03 00000008 01B69B4BA5749200");
  decodeOne("420020 03 00000008 01B69B4BA5749200", &d, a, sizeof(a));
  assert_int_equal(ttlvGetLong(&d, 0, &i64), TDE_OK);
  assert_true(i64==123456789000000000LL);
  ttlvDocFree(&d);

  {
    static const uint8_t big[] = {0x03,0xFD,0x35,0xEB,0x6B,0xC2,0xDF,0x46,0x18,0x08,0x00,0x00};
    ttlvEncInit(&e); ttlvEncBigInt(&e, TAG, big, sizeof(big));
    expectBytes(&e, "420020 04 00000010 0000000003FD35EB 6BC2DF4618080000");
    decodeOne("420020 04 00000010 0000000003FD35EB 6BC2DF4618080000", &d, a, sizeof(a));
    assert_int_equal(ttlvGetBigInt(&d, 0, &p, &n), TDE_OK);
    assert_int_equal(n, 16);
    assert_memory_equal(p+4, big, sizeof(big));
    ttlvDocFree(&d);
  }

  ttlvEncInit(&e); ttlvEncEnum(&e, TAG, 255);
  expectBytes(&e, "420020 05 00000004 000000FF 00000000");
  decodeOne("420020 05 00000004 000000FF 00000000", &d, a, sizeof(a));
  assert_int_equal(ttlvGetEnum(&d, 0, &u32), TDE_OK); assert_int_equal(u32, 255);
  ttlvDocFree(&d);

  ttlvEncInit(&e); ttlvEncBool(&e, TAG, 1);
  expectBytes(&e, "420020 06 00000008 0000000000000001");
  decodeOne("420020 06 00000008 0000000000000001", &d, a, sizeof(a));
  assert_int_equal(ttlvGetBool(&d, 0, &b), TDE_OK); assert_int_equal(b, 1);
  ttlvDocFree(&d);

  ttlvEncInit(&e); ttlvEncText(&e, TAG, "Hello World", 11);
  expectBytes(&e, "420020 07 0000000B 48656C6C6F20576F 726C640000000000");
  decodeOne("420020 07 0000000B 48656C6C6F20576F 726C640000000000", &d, a, sizeof(a));
  assert_int_equal(ttlvGetText(&d, 0, &z, &n), TDE_OK);
  assert_int_equal(n, 11); assert_memory_equal(z, "Hello World", 11);
  ttlvDocFree(&d);

  {
    static const uint8_t b3[] = {1,2,3};
    ttlvEncInit(&e); ttlvEncBytes(&e, TAG, b3, 3);
    expectBytes(&e, "420020 08 00000003 0102030000000000");
    decodeOne("420020 08 00000003 0102030000000000", &d, a, sizeof(a));
    assert_int_equal(ttlvGetBytes(&d, 0, &p, &n), TDE_OK);
    assert_int_equal(n, 3); assert_memory_equal(p, b3, 3);
    ttlvDocFree(&d);
  }

  /* Friday, March 14, 2008, 11:56:40 GMT */
  ttlvEncInit(&e); ttlvEncDateTime(&e, TAG, 0x47DA67F8);
  expectBytes(&e, "420020 09 00000008 0000000047DA67F8");
  decodeOne("420020 09 00000008 0000000047DA67F8", &d, a, sizeof(a));
  assert_int_equal(ttlvGetDateTime(&d, 0, &i64), TDE_OK); assert_true(i64==0x47DA67F8);
  ttlvDocFree(&d);

  /* 10 days */
  ttlvEncInit(&e); ttlvEncInterval(&e, TAG, 864000);
  expectBytes(&e, "420020 0A 00000004 000D2F00 00000000");
  decodeOne("420020 0A 00000004 000D2F00 00000000", &d, a, sizeof(a));
  assert_int_equal(ttlvGetInterval(&d, 0, &u32), TDE_OK); assert_int_equal(u32, 864000);
  ttlvDocFree(&d);

  /* Structure holding Enumeration 254 (tag 420004) and Integer 255 (420005). */
  ttlvEncInit(&e);
  ttlvEncOpen(&e, TAG);
  ttlvEncEnum(&e, 0x420004, 254);
  ttlvEncInt(&e, 0x420005, 255);
  ttlvEncClose(&e);
  expectBytes(&e, "420020 01 00000020 420004 05 00000004 000000FE 00000000 "
                  "420005 02 00000004 000000FF 00000000");
  decodeOne("420020 01 00000020 420004 05 00000004 000000FE 00000000 "
            "420005 02 00000004 000000FF 00000000", &d, a, sizeof(a));
  assert_int_equal(d.nItem, 3);
  assert_int_equal(ttlvGetEnum(&d, ttlvChild(&d, 0, 0x420004), &u32), TDE_OK);
  assert_int_equal(u32, 254);
  assert_int_equal(ttlvGetInt(&d, ttlvChild(&d, 0, 0x420005), &i32), TDE_OK);
  assert_int_equal(i32, 255);
  assert_int_equal(ttlvChild(&d, 0, 0x420006), -1);
  /* Wrong type asked for: a clean error naming the tag. */
  assert_int_equal(ttlvGetInt(&d, ttlvChild(&d, 0, 0x420004), &i32), TDE_FORMAT);
  assert_non_null(strstr(d.zErr, "420004"));
  assert_int_equal(ttlvGetText(&d, -1, &z, &n), TDE_FORMAT);
  ttlvDocFree(&d);
}

/* Negative numbers and sign extension of big integers. */
static void test_signs(void **state){
  TtlvEnc e;
  TtlvDoc d;
  const uint8_t *a; size_t n;
  int32_t i32; int64_t i64;
  static const uint8_t neg[] = {0x80, 0x01};
  (void)state;
  ttlvEncInit(&e);
  ttlvEncOpen(&e, TAG);
  ttlvEncInt(&e, 0x420001, -2);
  ttlvEncLong(&e, 0x420002, INT64_MIN);
  ttlvEncBigInt(&e, 0x420003, neg, 2);
  ttlvEncClose(&e);
  assert_int_equal(ttlvEncFinish(&e, &a, &n), TDE_OK);
  assert_int_equal(ttlvDecode(a, n, &d), TDE_OK);
  assert_int_equal(ttlvGetInt(&d, ttlvChild(&d, 0, 0x420001), &i32), TDE_OK);
  assert_int_equal(i32, -2);
  assert_int_equal(ttlvGetLong(&d, ttlvChild(&d, 0, 0x420002), &i64), TDE_OK);
  assert_true(i64==INT64_MIN);
  {
    const uint8_t *p; size_t np;
    static const uint8_t want[8] = {0xFF,0xFF,0xFF,0xFF,0xFF,0xFF,0x80,0x01};
    assert_int_equal(ttlvGetBigInt(&d, ttlvChild(&d, 0, 0x420003), &p, &np), TDE_OK);
    assert_int_equal(np, 8);
    assert_memory_equal(p, want, 8);
  }
  ttlvDocFree(&d);
  ttlvEncFree(&e);
}

/* A request-shaped message: nested structures, repeated tags, siblings. */
static void test_nested_roundtrip(void **state){
  TtlvEnc e;
  TtlvDoc d;
  const uint8_t *a; size_t n;
  int i, k, iBatch;
  (void)state;
  ttlvEncInit(&e);
  ttlvEncOpen(&e, 0x420078);                /* Request Message */
  ttlvEncOpen(&e, 0x420077);                /* Request Header */
  ttlvEncOpen(&e, 0x420069);                /* Protocol Version */
  ttlvEncInt(&e, 0x42006A, 1);
  ttlvEncInt(&e, 0x42006B, 4);
  ttlvEncClose(&e);
  ttlvEncInt(&e, 0x42000D, 3);              /* Batch Count */
  ttlvEncClose(&e);
  for(i=0; i<3; i++){
    ttlvEncOpen(&e, 0x42000F);              /* Batch Item */
    ttlvEncEnum(&e, 0x42005C, (uint32_t)(i+1));
    ttlvEncOpen(&e, 0x420079);              /* empty Request Payload */
    ttlvEncClose(&e);
    ttlvEncClose(&e);
  }
  ttlvEncClose(&e);
  assert_int_equal(ttlvEncFinish(&e, &a, &n), TDE_OK);
  assert_int_equal(n % 8, 0);
  {
    size_t nTotal;
    assert_int_equal(ttlvMessageLength(a, &nTotal), TDE_OK);
    assert_int_equal(nTotal, n);
  }
  assert_int_equal(ttlvDecode(a, n, &d), TDE_OK);
  assert_int_equal(ttlvCount(&d, 0, 0x42000F), 3);
  k = 0;
  for(iBatch=ttlvChild(&d, 0, 0x42000F); iBatch>=0; iBatch=ttlvNextSibling(&d, iBatch, 0x42000F)){
    uint32_t op;
    int iPay = ttlvChild(&d, iBatch, 0x420079);
    assert_int_equal(ttlvGetEnum(&d, ttlvChild(&d, iBatch, 0x42005C), &op), TDE_OK);
    assert_int_equal(op, (uint32_t)++k);
    assert_true(iPay>0);
    assert_int_equal(d.aItem[iPay].iFirst, -1);
    assert_int_equal(d.aItem[iPay].depth, 2);
  }
  {
    int iHdr = ttlvChild(&d, 0, 0x420077);
    int iPv = ttlvChild(&d, iHdr, 0x420069);
    int32_t v;
    assert_int_equal(ttlvGetInt(&d, ttlvChild(&d, iPv, 0x42006B), &v), TDE_OK);
    assert_int_equal(v, 4);
  }
  ttlvDocFree(&d);

  /* Every strict prefix is refused cleanly: copy to an exact-size heap
  ** buffer so ASan sees any over-read. */
  for(i=1; i<(int)n; i++){
    uint8_t *b = malloc((size_t)i);
    assert_non_null(b);
    memcpy(b, a, (size_t)i);
    assert_int_equal(ttlvDecode(b, (size_t)i, &d), TDE_FORMAT);
    assert_true(d.zErr[0]!=0);
    ttlvDocFree(&d);
    free(b);
  }
  ttlvEncFree(&e);
}

static int decodeHex(const char *zHex, char *zErr, size_t nErr){
  uint8_t a[512];
  size_t n = unhex(zHex, a, sizeof(a));
  uint8_t *b = malloc(n ? n : 1);
  TtlvDoc d;
  int rc;
  assert_non_null(b);
  memcpy(b, a, n);
  rc = ttlvDecode(b, n, &d);
  if( zErr ) snprintf(zErr, nErr, "%s", d.zErr);
  ttlvDocFree(&d);
  free(b);
  return rc;
}

static void test_hostile(void **state){
  char zErr[128];
  (void)state;
  /* Empty */
  assert_int_equal(decodeHex("", zErr, sizeof(zErr)), TDE_FORMAT);
  /* Lying length: says 0x20 bytes, has 8. */
  assert_int_equal(decodeHex("420020 01 00000020 420004 05 00000004 000000FE 00000000",
                             zErr, sizeof(zErr)), TDE_FORMAT);
  assert_non_null(strstr(zErr, "past the end"));
  /* Huge length (would wrap a 32-bit sum). */
  assert_int_equal(decodeHex("420020 08 FFFFFFFF 0000000000000000", zErr, sizeof(zErr)), TDE_FORMAT);
  assert_int_equal(decodeHex("420020 08 FFFFFFF9 0000000000000000", zErr, sizeof(zErr)), TDE_FORMAT);
  /* Integer with length 8 (wrong fixed length). */
  assert_int_equal(decodeHex("420020 02 00000008 0000000000000008", zErr, sizeof(zErr)), TDE_FORMAT);
  assert_non_null(strstr(zErr, "needs length 4"));
  /* Boolean with length 4, boolean of 2. */
  assert_int_equal(decodeHex("420020 06 00000004 0000000100000000", zErr, sizeof(zErr)), TDE_FORMAT);
  assert_int_equal(decodeHex("420020 06 00000008 0000000000000002", zErr, sizeof(zErr)), TDE_FORMAT);
  /* Unknown types 0x00, 0x0B, 0xFF. */
  assert_int_equal(decodeHex("420020 00 00000000", zErr, sizeof(zErr)), TDE_FORMAT);
  assert_int_equal(decodeHex("420020 0B 00000000", zErr, sizeof(zErr)), TDE_FORMAT);
  assert_int_equal(decodeHex("420020 FF 00000000", zErr, sizeof(zErr)), TDE_FORMAT);
  assert_non_null(strstr(zErr, "unknown item type"));
  /* Tag outside 0x42xxxx / 0x54xxxx. */
  assert_int_equal(decodeHex("000020 02 00000004 0000000800000000", zErr, sizeof(zErr)), TDE_FORMAT);
  /* Non-zero padding. */
  assert_int_equal(decodeHex("420020 02 00000004 0000000800000001", zErr, sizeof(zErr)), TDE_FORMAT);
  assert_int_equal(decodeHex("420020 08 00000003 0102030000000100", zErr, sizeof(zErr)), TDE_FORMAT);
  /* Structure whose length is not a multiple of 8. */
  assert_int_equal(decodeHex("420020 01 00000004 00000000", zErr, sizeof(zErr)), TDE_FORMAT);
  /* Child overruns its structure but not the buffer. */
  assert_int_equal(decodeHex("420020 01 00000008 420004 08 00000008 0000000000000000",
                             zErr, sizeof(zErr)), TDE_FORMAT);
  /* Trailing bytes after the top-level item. */
  assert_int_equal(decodeHex("420020 02 00000004 0000000800000000 420020 02 00000004 0000000800000000",
                             zErr, sizeof(zErr)), TDE_FORMAT);
  assert_non_null(strstr(zErr, "after the message"));
  /* Big integer of zero length or not a multiple of 8. */
  assert_int_equal(decodeHex("420020 04 00000000", zErr, sizeof(zErr)), TDE_FORMAT);
  assert_int_equal(decodeHex("420020 04 00000004 0000000100000000", zErr, sizeof(zErr)), TDE_FORMAT);
  /* Header alone, header cut short. */
  assert_int_equal(decodeHex("420020 02 000000", zErr, sizeof(zErr)), TDE_FORMAT);
  assert_int_equal(decodeHex("420020 02 00000004", zErr, sizeof(zErr)), TDE_FORMAT);
  /* Empty structure and empty text/bytes are fine. */
  assert_int_equal(decodeHex("420020 01 00000000", zErr, sizeof(zErr)), TDE_OK);
  assert_int_equal(decodeHex("420020 07 00000000", zErr, sizeof(zErr)), TDE_OK);
}

/* Structures nested one past the limit are refused; at the limit accepted. */
static void test_depth(void **state){
  uint8_t a[8 * (TTLV_MAX_DEPTH + 2)];
  TtlvDoc d;
  int nLevel, i;
  (void)state;
  for(nLevel=TTLV_MAX_DEPTH; nLevel<=TTLV_MAX_DEPTH+1; nLevel++){
    for(i=0; i<nLevel; i++){
      uint8_t *z = a + 8*i;
      z[0] = 0x42; z[1] = 0x00; z[2] = 0x20; z[3] = TTLV_STRUCTURE;
      z[4] = 0; z[5] = 0; z[6] = 0; z[7] = (uint8_t)(8*(nLevel-1-i));
    }
    {
      int rc = ttlvDecode(a, (size_t)(8*nLevel), &d);
      if( nLevel==TTLV_MAX_DEPTH ){
        if( rc ) fail_msg("depth %d: %s", nLevel, d.zErr);
      }else{
        assert_int_equal(rc, TDE_FORMAT);
        assert_non_null(strstr(d.zErr, "nested"));
      }
    }
    ttlvDocFree(&d);
  }
  /* The encoder refuses to nest past the limit as well. */
  {
    TtlvEnc e;
    const uint8_t *p; size_t n;
    ttlvEncInit(&e);
    for(i=0; i<TTLV_MAX_DEPTH; i++) ttlvEncOpen(&e, TAG);
    assert_int_equal(e.rc, TDE_OK);
    ttlvEncOpen(&e, TAG);
    assert_int_equal(ttlvEncFinish(&e, &p, &n), TDE_RANGE);
    ttlvEncFree(&e);
    /* Unbalanced close, unclosed structure. */
    ttlvEncInit(&e);
    ttlvEncClose(&e);
    assert_int_equal(ttlvEncFinish(&e, &p, &n), TDE_MISUSE);
    ttlvEncFree(&e);
    ttlvEncInit(&e);
    ttlvEncOpen(&e, TAG);
    assert_int_equal(ttlvEncFinish(&e, &p, &n), TDE_MISUSE);
    ttlvEncFree(&e);
  }
}

/* Too many items, and messages over the size limit. */
static void test_limits(void **state){
  size_t nItems = TTLV_MAX_ITEMS + 1;   /* children, plus the structure itself */
  size_t n = 8 + 8*nItems;
  uint8_t *a = calloc(1, n);
  TtlvDoc d;
  size_t i, nTotal;
  uint8_t hdr[8] = {0x42, 0x00, 0x7B, 0x01, 0x00, 0x10, 0x00, 0x00};
  (void)state;
  assert_non_null(a);
  a[0] = 0x42; a[1] = 0x00; a[2] = 0x20; a[3] = TTLV_STRUCTURE;
  a[4] = (uint8_t)((8*nItems)>>24); a[5] = (uint8_t)((8*nItems)>>16);
  a[6] = (uint8_t)((8*nItems)>>8); a[7] = (uint8_t)(8*nItems);
  for(i=0; i<nItems; i++){
    uint8_t *z = a + 8 + 8*i;
    z[0] = 0x42; z[1] = 0x00; z[2] = 0x21; z[3] = TTLV_TEXT;   /* empty text */
  }
  assert_int_equal(ttlvDecode(a, n, &d), TDE_RANGE);
  assert_non_null(strstr(d.zErr, "items"));
  ttlvDocFree(&d);
  free(a);

  /* 1 MiB + 8: refused before looking at it. */
  n = TTLV_MAX_MESSAGE + 8;
  a = calloc(1, n);
  assert_non_null(a);
  assert_int_equal(ttlvDecode(a, n, &d), TDE_RANGE);
  ttlvDocFree(&d);
  free(a);

  /* Stream framing: a header announcing more than the limit, a non-structure,
  ** a length that is not a multiple of 8. */
  assert_int_equal(ttlvMessageLength(hdr, &nTotal), TDE_RANGE);
  hdr[5] = 0x00; hdr[6] = 0x01; hdr[7] = 0x00;
  assert_int_equal(ttlvMessageLength(hdr, &nTotal), TDE_OK);
  assert_int_equal(nTotal, 8 + 256);
  hdr[7] = 0x04;
  assert_int_equal(ttlvMessageLength(hdr, &nTotal), TDE_FORMAT);
  hdr[7] = 0x00; hdr[3] = TTLV_BYTES;
  assert_int_equal(ttlvMessageLength(hdr, &nTotal), TDE_FORMAT);

  /* The encoder stops at the limit too. */
  {
    TtlvEnc e;
    const uint8_t *p;
    uint8_t *big = calloc(1, TTLV_MAX_MESSAGE);
    assert_non_null(big);
    ttlvEncInit(&e);
    ttlvEncBytes(&e, TAG, big, TTLV_MAX_MESSAGE);
    assert_int_equal(ttlvEncFinish(&e, &p, &n), TDE_RANGE);
    ttlvEncFree(&e);
    free(big);
  }
}

/* Every single-byte change of a valid message decodes or fails cleanly. */
static void test_mutations(void **state){
  TtlvEnc e;
  const uint8_t *a; size_t n, i;
  int bit;
  (void)state;
  ttlvEncInit(&e);
  ttlvEncOpen(&e, 0x42007B);
  ttlvEncOpen(&e, 0x42007A);
  ttlvEncInt(&e, 0x42000D, 1);
  ttlvEncDateTime(&e, 0x420092, 1700000000);
  ttlvEncClose(&e);
  ttlvEncOpen(&e, 0x42000F);
  ttlvEncEnum(&e, 0x42007F, 0);
  ttlvEncText(&e, 0x420094, "abc", 3);
  ttlvEncBool(&e, 0x420008, 0);
  ttlvEncClose(&e);
  ttlvEncClose(&e);
  assert_int_equal(ttlvEncFinish(&e, &a, &n), TDE_OK);
  for(i=0; i<n; i++){
    for(bit=0; bit<8; bit++){
      uint8_t *b = malloc(n);
      TtlvDoc d;
      int rc;
      assert_non_null(b);
      memcpy(b, a, n);
      b[i] ^= (uint8_t)(1u<<bit);
      rc = ttlvDecode(b, n, &d);
      assert_true(rc==TDE_OK || rc==TDE_FORMAT || rc==TDE_RANGE);
      if( rc ) assert_true(d.zErr[0]!=0);
      ttlvDocFree(&d);
      free(b);
    }
  }
  ttlvEncFree(&e);
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_spec_vectors),
    cmocka_unit_test(test_signs),
    cmocka_unit_test(test_nested_roundtrip),
    cmocka_unit_test(test_hostile),
    cmocka_unit_test(test_depth),
    cmocka_unit_test(test_limits),
    cmocka_unit_test(test_mutations),
  };
  return cmocka_run_group_tests(tests, 0, 0);
}
