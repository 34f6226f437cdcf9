/*
** The header slot's flags field (docs/FORMAT.md "Header slot"): no flag is
** defined, so a slot with any flag set is refused like any other slot that
** does not parse -- the other slot is used if it is valid, and a region
** with no valid slot is not an sqlite-tde database.  Before this check the
** field was read and ignored, so a flag a later format sets would have
** been silently dropped by this build.
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

#define SLOT_FLAGS 44          /* u32 flags (docs/FORMAT.md "Header slot") */

static char zDir[512];
static char zCfg[600];
static TdeKeystore *pKs;

static int setup(void **state){
  const char *zTmp = getenv("TDE_TEST_TMP");
  char zId[TDE_KEYID_MAX+1];
  FILE *f;
  (void)state;
  snprintf(zDir, sizeof(zDir), "%s/r4hdrXXXXXX", zTmp ? zTmp : "/tmp");
  if( zTmp ){ char zMk[600]; snprintf(zMk, sizeof(zMk), "mkdir -p '%s'", zTmp); if( system(zMk) ){} }
  if( !mkdtemp(zDir) ) return -1;
  snprintf(zCfg, sizeof(zCfg), "%s/a.conf", zDir);
  f = fopen(zCfg, "w");
  if( !f ) return -1;
  fputs("keystore = wallet\nwallet = a.wallet\n", f);
  fclose(f);
  if( tde_keystore_create(zCfg, NULL, zId, sizeof(zId)) ) return -1;
  if( tdeRegistryAcquire(zCfg, NULL, &pKs, NULL) ) return -1;
  return 0;
}

static int teardown(void **state){
  char zCmd[700];
  (void)state;
  tdeRegistryRelease(pKs);
  snprintf(zCmd, sizeof(zCmd), "rm -rf '%s'", zDir);
  return system(zCmd)==0 ? 0 : -1;
}

/* Both slots hold a fresh header of format version `version`. */
static void makeRegion(uint16_t version, uint8_t *aRegion){
  TdeHeader *h = calloc(1, sizeof(*h));
  uint8_t dek[32], mac[32];
  assert_non_null(h);
  memset(aRegion, 0, TDE_HEADER_BYTES);
  assert_int_equal(tdeKeyringCreate(pKs, h, dek), TDE_OK);
  h->version = version;
  assert_int_equal(tdeHeaderMacKey(dek, h->dbid, mac), TDE_OK);
  assert_int_equal(tdeHeaderEncode(h, mac, aRegion), TDE_OK);
  assert_int_equal(tdeHeaderEncode(h, mac, aRegion+TDE_SLOT_SIZE), TDE_OK);
  tdeWipe(dek, sizeof(dek));
  tdeWipe(mac, sizeof(mac));
  free(h);
}

/* Set one flag bit in a slot and recompute its SHA-256 (what anyone can do
** without a key; the MAC is not what refuses it). */
static void setFlag(uint8_t *aSlot, uint32_t flag){
  tdePut32(aSlot+SLOT_FLAGS, tdeGet32(aSlot+SLOT_FLAGS) | flag);
  assert_int_equal(tdeSha256(aSlot, TDE_SLOT_SIZE-32, aSlot+TDE_SLOT_SIZE-32), TDE_OK);
}

static void checkVersion(uint16_t version){
  static const uint32_t aFlag[] = { 0x00000001u, 0x00000100u, 0x00010000u, 0x80000000u };
  uint8_t *aRegion = malloc(TDE_HEADER_BYTES);
  TdeHeader *back = malloc(sizeof(*back));
  int iSlot = -1;
  assert_non_null(aRegion);
  assert_non_null(back);
  for(size_t i=0; i<sizeof(aFlag)/sizeof(aFlag[0]); i++){
    makeRegion(version, aRegion);
    assert_int_equal(tdeHeaderDecode(aRegion, back), TDE_OK);
    assert_int_equal(back->flags, 0);

    /* One slot flagged: that slot does not parse, the other is in force. */
    setFlag(aRegion, aFlag[i]);
    assert_int_equal(tdeHeaderDecode(aRegion, back), TDE_FORMAT);
    assert_non_null(strstr(tde_last_error(), "flags"));
    assert_int_equal(tdeHeaderDecode(aRegion+TDE_SLOT_SIZE, back), TDE_OK);
    assert_int_equal(tdeHeaderPick(aRegion, TDE_HEADER_BYTES, back, &iSlot), TDE_OK);
    assert_int_equal(iSlot, 1);
    assert_int_equal(back->flags, 0);

    /* Both flagged: no valid slot, not read as a database. */
    setFlag(aRegion+TDE_SLOT_SIZE, aFlag[i]);
    assert_int_equal(tdeHeaderPick(aRegion, TDE_HEADER_BYTES, back, &iSlot), TDE_FORMAT);
  }
  free(back);
  free(aRegion);
}

static void test_flags_refused_v1(void **state){
  (void)state;
  checkVersion(1);
}

static void test_flags_refused_v2(void **state){
  (void)state;
  checkVersion(2);
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_flags_refused_v1),
    cmocka_unit_test(test_flags_refused_v2),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
