/*
** Header slots and keyring (src/keys/header.c): encode/decode round trips,
** newest-valid-slot selection, torn and truncated regions, corrupted
** slots (every byte), structurally malformed slots with valid checksums,
** MAC binding, and data-key unwrap through a real wallet.
*/
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tde_int.h"
#include "keys/keys.h"
#include "cipher/cipher.h"
#include "keystore/keystore.h"

static char zDir[512];
static char zCfg[600];
static char zCfg2[600];
static TdeKeystore *pKs;
static TdeKeystore *pKs2;

static void writeFile(const char *zPath, const char *zText){
  FILE *f = fopen(zPath, "w");
  assert_non_null(f);
  fputs(zText, f);
  fclose(f);
}

static int setup(void **state){
  const char *zTmp = getenv("TDE_TEST_TMP");
  char zPath[700], zId[TDE_KEYID_MAX+1];
  (void)state;
  snprintf(zDir, sizeof(zDir), "%s/hdrXXXXXX", zTmp ? zTmp : "/tmp");
  if( zTmp ){ char zMk[600]; snprintf(zMk, sizeof(zMk), "mkdir -p '%s'", zTmp); if( system(zMk) ){} }
  if( !mkdtemp(zDir) ) return -1;
  snprintf(zCfg, sizeof(zCfg), "%s/a.conf", zDir);
  snprintf(zCfg2, sizeof(zCfg2), "%s/b.conf", zDir);
  writeFile(zCfg, "keystore = wallet\nwallet = a.wallet\n");
  writeFile(zCfg2, "keystore = wallet\nwallet = b.wallet\n");
  if( tde_keystore_create(zCfg, NULL, zId, sizeof(zId)) ) return -1;
  if( tde_keystore_create(zCfg2, NULL, zId, sizeof(zId)) ) return -1;
  if( tdeRegistryAcquire(zCfg, NULL, &pKs, NULL) ) return -1;
  if( tdeRegistryAcquire(zCfg2, NULL, &pKs2, NULL) ) return -1;
  snprintf(zPath, sizeof(zPath), "%s", zDir);
  return 0;
}

static int teardown(void **state){
  char zCmd[700];
  (void)state;
  snprintf(zCmd, sizeof(zCmd), "rm -rf '%s'", zDir);
  return system(zCmd)==0 ? 0 : -1;
}

/* A fresh header + DEK + MAC key, encoded into aRegion slot iSlot. */
typedef struct Fixture {
  TdeHeader hdr;
  uint8_t dek[32];
  uint8_t mac[32];
  uint8_t aRegion[TDE_HEADER_BYTES];
} Fixture;

static void makeFixture(Fixture *f){
  memset(f, 0, sizeof(*f));
  assert_int_equal(tdeKeyringCreate(pKs, &f->hdr, f->dek), TDE_OK);
  assert_int_equal(tdeHeaderMacKey(f->dek, f->hdr.dbid, f->mac), TDE_OK);
  assert_int_equal(tdeHeaderEncode(&f->hdr, f->mac, f->aRegion), TDE_OK);
}

static void test_roundtrip(void **state){
  Fixture f;
  TdeHeader back;
  int iSlot = -1;
  uint8_t dek2[32];
  (void)state;
  makeFixture(&f);
  assert_int_equal(f.hdr.seq, 1);
  assert_int_equal(f.hdr.curVersion, 1);
  assert_int_equal(f.hdr.nEntry, 1);
  assert_memory_equal(f.aRegion, "SQLT-TDE", 8);
  assert_int_equal(tdeHeaderDecode(f.aRegion, &back), TDE_OK);
  assert_memory_equal(back.dbid, f.hdr.dbid, 16);
  assert_string_equal(back.aEntry[0].zKeyId, f.hdr.aEntry[0].zKeyId);
  assert_int_equal(back.aEntry[0].nBlob, f.hdr.aEntry[0].nBlob);
  assert_int_equal(back.aEntry[0].ksType, TDE_KS_WALLET);
  assert_int_equal(tdeHeaderCheckMac(f.aRegion, f.mac), TDE_OK);
  assert_int_equal(tdeHeaderPick(f.aRegion, sizeof(f.aRegion), &back, &iSlot), TDE_OK);
  assert_int_equal(iSlot, 0);
  assert_int_equal(tdeKeyringUnlock(pKs, &back, 1, dek2), TDE_OK);
  assert_memory_equal(dek2, f.dek, 32);
  /* The data key never appears in the header in the clear. */
  for(size_t i=0; i+32<=TDE_SLOT_SIZE; i++) assert_true(memcmp(f.aRegion+i, f.dek, 32)!=0);
}

static void test_pick_newest_and_torn(void **state){
  Fixture f;
  TdeHeader h2, back;
  int iSlot = -1;
  (void)state;
  makeFixture(&f);
  h2 = f.hdr;
  h2.seq = 2;
  assert_int_equal(tdeHeaderEncode(&h2, f.mac, f.aRegion + TDE_SLOT_SIZE), TDE_OK);
  assert_int_equal(tdeHeaderPick(f.aRegion, sizeof(f.aRegion), &back, &iSlot), TDE_OK);
  assert_int_equal(iSlot, 1);
  assert_int_equal(back.seq, 2);
  /* Tear the newer slot at every 512-byte sector boundary: the old one wins. */
  for(int cut=512; cut<TDE_SLOT_SIZE; cut+=512){
    uint8_t aCopy[TDE_HEADER_BYTES];
    memcpy(aCopy, f.aRegion, sizeof(aCopy));
    memset(aCopy + TDE_SLOT_SIZE + cut, 0xA5, TDE_SLOT_SIZE - cut);
    assert_int_equal(tdeHeaderPick(aCopy, sizeof(aCopy), &back, &iSlot), TDE_OK);
    assert_int_equal(iSlot, 0);
    assert_int_equal(back.seq, 1);
  }
}

static void test_truncated(void **state){
  Fixture f;
  TdeHeader back;
  int iSlot;
  (void)state;
  makeFixture(&f);
  for(size_t n=0; n<=TDE_HEADER_BYTES; n+=(n<64 ? 1 : 61)){
    int rc = tdeHeaderPick(f.aRegion, n, &back, &iSlot);
    if( n>=TDE_SLOT_SIZE ) assert_int_equal(rc, TDE_OK);
    else assert_int_equal(rc, TDE_FORMAT);
  }
}

static void test_every_byte_flip(void **state){
  Fixture f;
  TdeHeader back;
  int iSlot;
  int nDecodeFail = 0;
  (void)state;
  makeFixture(&f);
  for(int i=0; i<TDE_SLOT_SIZE; i++){
    f.aRegion[i] ^= 0x01;
    if( tdeHeaderPick(f.aRegion, sizeof(f.aRegion), &back, &iSlot)!=TDE_OK ) nDecodeFail++;
    f.aRegion[i] ^= 0x01;
  }
  /* Every byte is under the SHA-256 checksum (or is it). */
  assert_int_equal(nDecodeFail, TDE_SLOT_SIZE);
}

/* Recompute only the SHA-256 of a slot (what an attacker without keys can do). */
static void resum(uint8_t *aSlot){
  assert_int_equal(tdeSha256(aSlot, TDE_SLOT_SIZE-32, aSlot+TDE_SLOT_SIZE-32), TDE_OK);
}

static void test_mac_catches_rechecksummed_tamper(void **state){
  Fixture f;
  TdeHeader back;
  int iSlot;
  (void)state;
  makeFixture(&f);
  /* Change the current version field (offset 40) and fix the checksum: it
  ** parses, but the MAC fails. */
  f.aRegion[43] ^= 0x02;
  resum(f.aRegion);
  assert_int_equal(tdeHeaderPick(f.aRegion, sizeof(f.aRegion), &back, &iSlot), TDE_OK);
  assert_int_equal(tdeHeaderCheckMac(f.aRegion, f.mac), TDE_AUTH);
}

static void test_malformed_with_valid_checksum(void **state){
  Fixture f;
  TdeHeader back;
  uint8_t aCopy[TDE_SLOT_SIZE];
  unsigned seed = 12345;       /* fixed, printed seed */
  int nOk = 0, nFormat = 0;
  (void)state;
  printf("# malformed-slot fuzz seed %u\n", seed);
  makeFixture(&f);
  for(int iter=0; iter<20000; iter++){
    memcpy(aCopy, f.aRegion, sizeof(aCopy));
    int nMut = 1 + (int)(rand_r(&seed)%4);
    for(int m=0; m<nMut; m++){
      int off = 36 + (int)(rand_r(&seed) % 300);      /* fields + keyring */
      aCopy[off] = (uint8_t)rand_r(&seed);
    }
    resum(aCopy);
    int rc = tdeHeaderDecode(aCopy, &back);
    if( rc==TDE_OK ){
      nOk++;
      assert_true(back.nEntry<=TDE_MAX_ENTRIES);
      for(int i=0; i<back.nEntry; i++){
        assert_true(back.aEntry[i].nBlob<=TDE_WRAP_MAX);
        assert_true(strlen(back.aEntry[i].zKeyId)<=TDE_KEYID_MAX);
      }
    }else{
      assert_int_equal(rc, TDE_FORMAT);
      nFormat++;
    }
  }
  printf("# malformed slots: %d parsed, %d rejected\n", nOk, nFormat);
  assert_true(nFormat>0);
}

static void test_plaintext_detected(void **state){
  uint8_t aRegion[TDE_HEADER_BYTES];
  TdeHeader back;
  int iSlot;
  (void)state;
  memset(aRegion, 0, sizeof(aRegion));
  memcpy(aRegion, "SQLite format 3", 16);
  assert_int_equal(tdeHeaderPick(aRegion, sizeof(aRegion), &back, &iSlot), TDE_PLAINTEXT);
  assert_non_null(strstr(tde_last_error(), "sqlite-tde encrypt"));
  memset(aRegion, 0, sizeof(aRegion));
  assert_int_equal(tdeHeaderPick(aRegion, sizeof(aRegion), &back, &iSlot), TDE_FORMAT);
}

static void test_keyring_full(void **state){
  Fixture f;
  uint8_t aSlot[TDE_SLOT_SIZE];
  char zId[TDE_KEYID_MAX+1];
  (void)state;
  makeFixture(&f);
  assert_int_equal(pKs->pMethods->xCurrentKey(pKs, zId, sizeof(zId)), TDE_OK);
  /* Same version + same key replaces, it does not add. */
  assert_int_equal(tdeKeyringAddWrap(pKs, &f.hdr, 1, f.dek, zId), TDE_OK);
  assert_int_equal(f.hdr.nEntry, 1);
  for(uint32_t v=2; f.hdr.nEntry<TDE_MAX_ENTRIES; v++){
    assert_int_equal(tdeKeyringAddWrap(pKs, &f.hdr, v, f.dek, zId), TDE_OK);
  }
  assert_int_equal(tdeKeyringAddWrap(pKs, &f.hdr, 999, f.dek, zId), TDE_RANGE);
  assert_int_equal(tdeHeaderEncode(&f.hdr, f.mac, aSlot), TDE_OK);
}

static void test_unlock_wrong_keystore_and_swap(void **state){
  Fixture a, b;
  uint8_t dek[32];
  TdeHeader mixed;
  (void)state;
  makeFixture(&a);
  makeFixture(&b);
  /* A keystore without the master key: TDE_NOKEY naming the key id. */
  assert_int_equal(tdeKeyringUnlock(pKs2, &a.hdr, 1, dek), TDE_NOKEY);
  assert_non_null(strstr(tde_last_error(), a.hdr.aEntry[0].zKeyId));
  /* Version not present. */
  assert_int_equal(tdeKeyringUnlock(pKs, &a.hdr, 7, dek), TDE_NOKEY);
  /* Database b's wrapped key put into database a's header: bound to b's id. */
  mixed = a.hdr;
  mixed.aEntry[0] = b.hdr.aEntry[0];
  assert_int_equal(tdeKeyringUnlock(pKs, &mixed, 1, dek), TDE_AUTH);
  for(int i=0; i<32; i++) assert_int_equal(dek[i], 0);
  /* A flipped bit in the wrapped key. */
  mixed = a.hdr;
  mixed.aEntry[0].aBlob[20] ^= 0x80;
  assert_int_equal(tdeKeyringUnlock(pKs, &mixed, 1, dek), TDE_AUTH);
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_roundtrip),
    cmocka_unit_test(test_pick_newest_and_torn),
    cmocka_unit_test(test_truncated),
    cmocka_unit_test(test_every_byte_flip),
    cmocka_unit_test(test_mac_catches_rechecksummed_tamper),
    cmocka_unit_test(test_malformed_with_valid_checksum),
    cmocka_unit_test(test_plaintext_detected),
    cmocka_unit_test(test_keyring_full),
    cmocka_unit_test(test_unlock_wrong_keystore_and_swap),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
