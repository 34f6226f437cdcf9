/*
** A page answered from the rekey journal goes through the page-map check
** like any page (issue 22, review item: "the rekey-copy path returns
** before the page-map check").
**
** A page 1 that fails authentication is answered from DB-tderekey when
** that file holds a copy of it (page 1 is sealed again through that
** journal at a rekey's finish, so its copy is looked for even when no rekey
** runs).  Both read paths used to return that copy without the page-map
** check.  The attack here: a WAL-mode database (format 2, page map on)
** whose page 1 is saved while it is current, then changed (a second table)
** and folded into the map; then a DB-tderekey holding the saved page 1 is
** put beside it -- the journal is MACed with the data key, which the
** attacker does not have, so the test computes the MAC from the key the
** shim holds, standing in for a journal a crash left behind at an earlier
** time -- and page 1 in the file is damaged so that it fails.  Before, the
** saved page 1 was served (one table in sqlite_schema instead of two).
** Now the read is refused with SQLITE_IOERR_AUTH and "older version than
** the page map".  Without the map (rollback mode never keeps one) the
** copy is still served: that is the journal's purpose (a page torn by an
** interrupted rekey), and the case below checks it still works.
*/
#include "tdetest.h"
#include "vfs/vfs_int.h"

#include <fcntl.h>
#include <unistd.h>

#define PGSZ   4096
#define PAGE1  tdetestPageOff(PGSZ, 1)   /* page 1's place in the suite's format */

static void pageRead(const char *zDb, unsigned char *a){
  int fd = open(zDb, O_RDONLY);
  assert_true(fd>=0);
  assert_int_equal(pread(fd, a, PGSZ, PAGE1), PGSZ);
  close(fd);
}

static void pageFlip(const char *zDb){
  unsigned char c;
  int fd = open(zDb, O_RDWR);
  assert_true(fd>=0);
  assert_int_equal(pread(fd, &c, 1, PAGE1 + 200), 1);
  c ^= 0x5a;
  assert_int_equal(pwrite(fd, &c, 1, PAGE1 + 200), 1);
  assert_int_equal(close(fd), 0);
}

/* DB-tderekey holding aPage as page 1, MACed as docs/FORMAT.md "Rekey"
** says: HMAC-SHA256 under HKDF(current data key, salt dbid, info
** "sqlite-tde rekey journal") over everything before the MAC. */
static void rekeyJournalWrite(const char *zDb, const uint8_t *aDek, const uint8_t *aDbid,
                              const unsigned char *aPage){
  static const char zInfo[] = "sqlite-tde rekey journal";
  size_t n = 32 + 4 + PGSZ, nAll = n + 32;
  unsigned char *a = malloc(nAll);
  uint8_t key[32];
  char zPath[PATH_MAX];
  const uint8_t *apPart[1];
  size_t anPart[1];
  assert_non_null(a);
  memset(a, 0, nAll);
  memcpy(a, "TDERKJ02", 8);
  memcpy(a+8, aDbid, 16);
  tdePut32(a+24, PGSZ);
  tdePut32(a+28, 1);
  tdePut32(a+32, 1);
  memcpy(a+36, aPage, PGSZ);
  assert_int_equal(tdeHkdf(aDek, 32, aDbid, 16, (const uint8_t*)zInfo, sizeof(zInfo)-1, key, 32), TDE_OK);
  apPart[0] = a;
  anPart[0] = n;
  assert_int_equal(tdeHmacSha256(key, 32, apPart, anPart, 1, a+n), TDE_OK);
  tdeWipe(key, sizeof(key));
  snprintf(zPath, sizeof(zPath), "%s-tderekey", zDb);
  writeAll(zPath, a, nAll);
  free(a);
}

/* The history: table a, page 1 saved, table b; in zMode.  The data key
** and id the shim holds into aDek/aDbid.  Closed at the end. */
static void history(const char *zDb, const char *zMode, unsigned char *aOld1, uint8_t *aDek, uint8_t *aDbid){
  sqlite3 *db = 0;
  TdeFile *p;
  char zSql[200];
  assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
  snprintf(zSql, sizeof(zSql), "PRAGMA journal_mode=%s; CREATE TABLE a(x); INSERT INTO a VALUES(1)", zMode);
  exec(db, zSql);
  exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  pageRead(zDb, aOld1);
  exec(db, "CREATE TABLE b(y); INSERT INTO b VALUES(2)");
  exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
  p = tdeMainOfDb(db, "main");
  assert_non_null(p);
  assert_non_null(p->pDb->pKeys);
  memcpy(aDek, p->pDb->pKeys->aDek, 32);
  memcpy(aDbid, p->dbid, 16);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

/* count(*) of sqlite_schema through tde: its result code, *pn the count. */
static int schemaCount(const char *zDb, sqlite3_int64 *pn){
  sqlite3 *db = 0;
  sqlite3_stmt *p = 0;
  int rc = openTdeCfg(zDb, zCfg, &db);
  *pn = -1;
  if( rc==SQLITE_OK ){
    sqlite3_extended_result_codes(db, 1);
    rc = sqlite3_prepare_v2(db, "SELECT count(*) FROM sqlite_schema", -1, &p, 0);
  }
  if( rc==SQLITE_OK ){
    rc = sqlite3_step(p);
    if( rc==SQLITE_ROW ){ *pn = sqlite3_column_int64(p, 0); rc = SQLITE_OK; }
    else rc = sqlite3_extended_errcode(db);
  }
  sqlite3_finalize(p);
  sqlite3_close(db);
  return rc;
}

static void test_wal_rekey_copy_map_checked(void **state){
  char zDb[PATH_MAX];
  unsigned char aOld1[PGSZ];
  uint8_t aDek[32], aDbid[16];
  sqlite3_int64 n = 0;
  int rc;
  (void)state;
  joinPath(zDb, zScratch, "wal.db");
  history(zDb, "WAL", aOld1, aDek, aDbid);
  rekeyJournalWrite(zDb, aDek, aDbid, aOld1);
  tdeWipe(aDek, sizeof(aDek));
  pageFlip(zDb);
  rc = schemaCount(zDb, &n);
  assert_int_not_equal(n, 1);                      /* the saved page 1 (one table) is never served */
  assert_int_equal(rc, SQLITE_IOERR_AUTH);
  /* The map's refusal: version 3's map is in the database file. */
  assert_non_null(strstr(tde_last_error(), tdetestFormat()==3
                         ? "does not match the page map the database file itself holds"
                         : "older version than the page map"));
}

static void test_rollback_rekey_copy_served(void **state){
  char zDb[PATH_MAX];
  unsigned char aCur1[PGSZ];
  uint8_t aDek[32], aDbid[16];
  sqlite3_int64 n = 0;
  (void)state;
  joinPath(zDb, zScratch, "delete.db");
  history(zDb, "DELETE", aCur1, aDek, aDbid);
  /* The current page 1 in the journal, the file's copy torn: what an
  ** interrupted rekey leaves, and what the journal is for. */
  pageRead(zDb, aCur1);
  rekeyJournalWrite(zDb, aDek, aDbid, aCur1);
  tdeWipe(aDek, sizeof(aDek));
  pageFlip(zDb);
  assert_int_equal(schemaCount(zDb, &n), SQLITE_OK);
  assert_int_equal(n, 2);
}

static int groupSetup(void **state){
  (void)state;
  return tdetestGroupSetup("tderekeycopy", 0);
}

static int groupTeardown(void **state){
  (void)state;
  tdetestScratchRemove();
  return 0;
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_wal_rekey_copy_map_checked),
    cmocka_unit_test(test_rollback_rekey_copy_served),
  };
  return cmocka_run_group_tests_name("rekeycopy", tests, groupSetup, groupTeardown);
}
