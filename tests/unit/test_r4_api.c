/*
** Public structs the library fills carry their size (include/sqlite-tde.h):
** tde_keystore_status() and tde_repl_status() refuse a size below the first
** layout's before writing anything, fill a struct of exactly their layout,
** and write no byte beyond the size a caller from a newer header passes
** (its struct is larger) nor beyond the size an older layout would have.
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

#include "sqlite-tde.h"

static char zDir[512];
static char zCfg[600];
static char zDb[600];

static int setup(void **state){
  const char *zTmp = getenv("TDE_TEST_TMP");
  char zId[TDE_KEYID_MAX+1];
  FILE *f;
  (void)state;
  snprintf(zDir, sizeof(zDir), "%s/r4apiXXXXXX", zTmp ? zTmp : "/tmp");
  if( zTmp ){ char zMk[600]; snprintf(zMk, sizeof(zMk), "mkdir -p '%s'", zTmp); if( system(zMk) ){} }
  if( !mkdtemp(zDir) ) return -1;
  snprintf(zCfg, sizeof(zCfg), "%s/a.conf", zDir);
  snprintf(zDb, sizeof(zDb), "%s/none.db", zDir);
  f = fopen(zCfg, "w");
  if( !f ) return -1;
  fputs("keystore = wallet\nwallet = a.wallet\n", f);
  fclose(f);
  if( tde_keystore_create(zCfg, NULL, zId, sizeof(zId)) ) return -1;
  return 0;
}

static int teardown(void **state){
  char zCmd[700];
  (void)state;
  tde_keystore_close(zCfg);
  snprintf(zCmd, sizeof(zCmd), "rm -rf '%s'", zDir);
  return system(zCmd)==0 ? 0 : -1;
}

#define FILL 0xA5
#define SLACK 64               /* what a newer header's struct might add */

static int allFill(const unsigned char *a, size_t n){
  for(size_t i=0; i<n; i++) if( a[i]!=FILL ) return 0;
  return 1;
}

static void test_keystore_info_size(void **state){
  union { tde_keystore_info info; unsigned char a[sizeof(tde_keystore_info)+SLACK]; } u;
  (void)state;
  assert_true(TDE_KEYSTORE_INFO_SIZE_V1<=sizeof(tde_keystore_info));

  /* Not set (0) or too small: refused, nothing written but the size. */
  memset(&u, FILL, sizeof(u));
  u.info.nSize = 0;
  assert_int_equal(tde_keystore_status(zCfg, &u.info), TDE_MISUSE);
  assert_non_null(strstr(tde_last_error(), "nSize"));
  assert_true(allFill(u.a+sizeof(u.info.nSize), sizeof(u)-sizeof(u.info.nSize)));
  u.info.nSize = (uint32_t)TDE_KEYSTORE_INFO_SIZE_V1 - 1;
  assert_int_equal(tde_keystore_status(zCfg, &u.info), TDE_MISUSE);
  assert_true(allFill(u.a+sizeof(u.info.nSize), sizeof(u)-sizeof(u.info.nSize)));
  assert_int_equal(tde_keystore_status(zCfg, NULL), TDE_MISUSE);

  /* This header's size: filled, the size kept. */
  memset(&u, FILL, sizeof(u));
  u.info.nSize = sizeof(tde_keystore_info);
  assert_int_equal(tde_keystore_status(zCfg, &u.info), TDE_OK);
  assert_int_equal(u.info.nSize, sizeof(tde_keystore_info));
  assert_string_equal(u.info.zType, "wallet");
  assert_string_equal(u.info.zStatus, "OPEN");
  assert_int_equal(u.info.nKeys, 1);
  assert_int_equal(u.info.bAutoLogin, 1);
  assert_true(allFill(u.a+sizeof(tde_keystore_info), SLACK));

  /* A newer header's larger struct: the known part filled, the rest untouched. */
  memset(&u, FILL, sizeof(u));
  u.info.nSize = sizeof(u);
  assert_int_equal(tde_keystore_status(zCfg, &u.info), TDE_OK);
  assert_int_equal(u.info.nSize, sizeof(u));
  assert_int_equal(u.info.nKeys, 1);
  assert_true(allFill(u.a+sizeof(tde_keystore_info), SLACK));

  /* Exactly the first layout (no tail padding): every field, no byte more. */
  memset(&u, FILL, sizeof(u));
  u.info.nSize = (uint32_t)TDE_KEYSTORE_INFO_SIZE_V1;
  assert_int_equal(tde_keystore_status(zCfg, &u.info), TDE_OK);
  assert_int_equal(u.info.bAutoLogin, 1);
  assert_true(allFill(u.a+TDE_KEYSTORE_INFO_SIZE_V1, sizeof(u)-TDE_KEYSTORE_INFO_SIZE_V1));
}

static void test_repl_info_size(void **state){
  union { tde_repl_info info; unsigned char a[sizeof(tde_repl_info)+SLACK]; } u;
  (void)state;
  assert_true(TDE_REPL_INFO_SIZE_V1<=sizeof(tde_repl_info));

  memset(&u, FILL, sizeof(u));
  u.info.nSize = 0;
  assert_int_equal(tde_repl_status(zDb, &u.info), TDE_MISUSE);
  assert_non_null(strstr(tde_last_error(), "nSize"));
  assert_true(allFill(u.a+sizeof(u.info.nSize), sizeof(u)-sizeof(u.info.nSize)));
  u.info.nSize = (uint32_t)TDE_REPL_INFO_SIZE_V1 - 1;
  assert_int_equal(tde_repl_status(zDb, &u.info), TDE_MISUSE);
  assert_true(allFill(u.a+sizeof(u.info.nSize), sizeof(u)-sizeof(u.info.nSize)));

  memset(&u, FILL, sizeof(u));
  u.info.nSize = sizeof(tde_repl_info);
  assert_int_equal(tde_repl_status(zDb, &u.info), TDE_OK);
  assert_int_equal(u.info.nSize, sizeof(tde_repl_info));
  assert_string_equal(u.info.zRole, "none");
  assert_int_equal(u.info.appliedSeq, 0);
  assert_string_equal(u.info.zNote, "");
  assert_true(allFill(u.a+sizeof(tde_repl_info), SLACK));

  memset(&u, FILL, sizeof(u));
  u.info.nSize = sizeof(u);
  assert_int_equal(tde_repl_status(zDb, &u.info), TDE_OK);
  assert_int_equal(u.info.nSize, sizeof(u));
  assert_string_equal(u.info.zRole, "none");
  assert_true(allFill(u.a+sizeof(tde_repl_info), SLACK));

  memset(&u, FILL, sizeof(u));
  u.info.nSize = (uint32_t)TDE_REPL_INFO_SIZE_V1;
  assert_int_equal(tde_repl_status(zDb, &u.info), TDE_OK);
  assert_string_equal(u.info.zNote, "");
  assert_true(allFill(u.a+TDE_REPL_INFO_SIZE_V1, sizeof(u)-TDE_REPL_INFO_SIZE_V1));
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_keystore_info_size),
    cmocka_unit_test(test_repl_info_size),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
