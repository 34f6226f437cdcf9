/*
** Issue 14 case 3 (format version 2, docs/FORMAT.md "Rollback journal,
** version 2 (binding)"): stale or damaged hot rollback journals.
**
**  - An old hot journal: saved while a transaction that spilled was in
**    progress, put back after that transaction and two later ones
**    committed.  Version 1: played back, rows return to older values.
**    Version 2: refused with SQLITE_IOERR_AUTH before anything is applied
**    (the database file is byte-identical), tde_last_error() names the
**    journal and says what to do; moved aside, the database opens at its
**    last commit.
**  - A zeroed record in the middle of a hot journal that its synced header
**    counts.  Version 1: playback applies the records before it and then
**    fails, and the database with the journal moved aside is torn (old and
**    new rows mixed) although every page authenticates.  Version 2:
**    refused before any record is applied.
**  - Genuine crashes are still played back, on both versions: a hot
**    journal of the transaction in progress with page 1 not yet written
**    (a spill), with page 1 written (the commit point: the journal's
**    deletion), and a crash during the playback itself.
**  - Page 1 sealed again after a rotation or a rekey's finish (case 4,
**    "Header rollback after a rekey") is crash-safe.  Rotation: the hot
**    journal that protects the write, with page 1 written or torn, is
**    played back.  Rekey: page 1 torn by the write, with the rekey journal
**    as it was synced just before, reads from the journal until the next
**    write transaction rewrites page 1.
**
** A snapshot VFS sits below tde (the default VFS when tde is registered):
** it forwards everything to "unix" and, when armed, copies the database
** and its journal just before the journal is deleted -- the moment after
** SQLite wrote and synced the database and before the commit point.
**
** It also keeps the content of a DB-tderekey file at each of its syncs.
**
** Run against SQLite 3.40 (system) and 3.53 (test_fresh_journal_353).
*/
#include "tdetest.h"


#include "tde_int.h"
#include "keys/keys.h"

#define NROW 600
#define PGSZ 4096
#include "freshtest.h"

/* ---- snapshot VFS: copy DB and DB-journal before the journal's deletion ---- */

static sqlite3_vfs *pUnix;
static sqlite3_vfs snapVfs;
static char zSnapDb[PATH_MAX];      /* armed for this database ("" = off) */
static char zSnapTo[PATH_MAX];      /* image: zSnapTo and zSnapTo-journal */
static int nSnaps;



/* DB-tderekey files: forwarded to unix; at each sync, a non-empty file's
** content is kept in aRk (the last one: the journal a re-seal of page 1
** writes just before the page). */
typedef struct SnapFile { sqlite3_file base; sqlite3_file *pReal; const char *zName; } SnapFile;
static unsigned char *aRk;
static size_t nRk;

#define SNAP_REAL(f) (((SnapFile*)(f))->pReal)
static int sfClose(sqlite3_file *f){ return SNAP_REAL(f)->pMethods->xClose(SNAP_REAL(f)); }
static int sfRead(sqlite3_file *f, void *z, int n, sqlite3_int64 o){ return SNAP_REAL(f)->pMethods->xRead(SNAP_REAL(f), z, n, o); }
static int sfWrite(sqlite3_file *f, const void *z, int n, sqlite3_int64 o){ return SNAP_REAL(f)->pMethods->xWrite(SNAP_REAL(f), z, n, o); }
static int sfTruncate(sqlite3_file *f, sqlite3_int64 n){ return SNAP_REAL(f)->pMethods->xTruncate(SNAP_REAL(f), n); }
static int sfSync(sqlite3_file *f, int fl){
  int rc = SNAP_REAL(f)->pMethods->xSync(SNAP_REAL(f), fl);
  size_t n = 0;
  unsigned char *a = readAll(((SnapFile*)f)->zName, &n);
  if( a && n>0 ){ free(aRk); aRk = a; nRk = n; }else{ free(a); }
  return rc;
}
static int sfFileSize(sqlite3_file *f, sqlite3_int64 *p){ return SNAP_REAL(f)->pMethods->xFileSize(SNAP_REAL(f), p); }
static int sfLock(sqlite3_file *f, int e){ return SNAP_REAL(f)->pMethods->xLock(SNAP_REAL(f), e); }
static int sfUnlock(sqlite3_file *f, int e){ return SNAP_REAL(f)->pMethods->xUnlock(SNAP_REAL(f), e); }
static int sfCheckReserved(sqlite3_file *f, int *p){ return SNAP_REAL(f)->pMethods->xCheckReservedLock(SNAP_REAL(f), p); }
static int sfFileControl(sqlite3_file *f, int op, void *p){ return SNAP_REAL(f)->pMethods->xFileControl(SNAP_REAL(f), op, p); }
static int sfSectorSize(sqlite3_file *f){ return SNAP_REAL(f)->pMethods->xSectorSize(SNAP_REAL(f)); }
static int sfDevChar(sqlite3_file *f){ return SNAP_REAL(f)->pMethods->xDeviceCharacteristics(SNAP_REAL(f)); }
static const sqlite3_io_methods snapIo = {
  1,                /* iVersion */
  sfClose,          /* xClose */
  sfRead,           /* xRead */
  sfWrite,          /* xWrite */
  sfTruncate,       /* xTruncate */
  sfSync,           /* xSync */
  sfFileSize,       /* xFileSize */
  sfLock,           /* xLock */
  sfUnlock,         /* xUnlock */
  sfCheckReserved,  /* xCheckReservedLock */
  sfFileControl,    /* xFileControl */
  sfSectorSize,     /* xSectorSize */
  sfDevChar,        /* xDeviceCharacteristics */
  0, 0, 0, 0, 0, 0  /* (version 1) */
};

static int snapOpen(sqlite3_vfs *v, const char *z, sqlite3_file *f, int fl, int *pOut){
  size_t n = z ? strlen(z) : 0;
  (void)v;
  if( n>9 && strcmp(z + n - 9, "-tderekey")==0 ){
    SnapFile *p = (SnapFile*)f;
    int rc;
    p->pReal = (sqlite3_file*)&p[1];
    p->zName = z;
    rc = pUnix->xOpen(pUnix, z, p->pReal, fl, pOut);
    p->base.pMethods = rc==SQLITE_OK ? &snapIo : 0;
    return rc;
  }
  return pUnix->xOpen(pUnix, z, f, fl, pOut);
}

static int snapDelete(sqlite3_vfs *v, const char *z, int bSync){
  char zJ[PATH_MAX], zTo[PATH_MAX];
  (void)v;
  if( zSnapDb[0] ){
    sidePath(zJ, zSnapDb, "-journal");
    if( strcmp(z, zJ)==0 ){
      fileCopy(zSnapDb, zSnapTo);
      sidePath(zTo, zSnapTo, "-journal");
      fileCopy(zJ, zTo);
      zSnapDb[0] = 0;
      nSnaps++;
    }
  }
  return pUnix->xDelete(pUnix, z, bSync);
}

/* Arm: the next deletion of zDb's journal first copies both to zTo. */
static void snapArm(const char *zDb, const char *zTo){
  snprintf(zSnapDb, sizeof(zSnapDb), "%s", zDb);
  snprintf(zSnapTo, sizeof(zSnapTo), "%s", zTo);
}

/* ---- helpers ---------------------------------------------------------------- */







/*
** Start transaction T1 (every row to "T1 ..."), spilling (the cache holds
** 40 pages): the journal is hot and pages are in the database.  Copies the
** journal to zSavedJ and, if zImage, the database and journal to zImage
** (a crash image with page 1 not yet written).  Returns the connection
** with T1 open.
*/
static sqlite3 *beginSpillMode(const char *zDb, const char *zMode, const char *zSavedJ,
                               const char *zImage){
  char zJ[PATH_MAX], zSql[64];
  sqlite3 *db = 0;
  sidePath(zJ, zDb, "-journal");
  assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
  snprintf(zSql, sizeof(zSql), "PRAGMA journal_mode=%s", zMode);
  exec(db, zSql);
  exec(db, "PRAGMA cache_size=40; PRAGMA synchronous=FULL; BEGIN;"
           "UPDATE t SET v=printf('T1 %04d %.900c', id, 'b');");
  assert_true(fileExists(zJ));
  if( zSavedJ ) fileCopy(zJ, zSavedJ);
  if( zImage ){
    char zTo[PATH_MAX];
    fileCopy(zDb, zImage);
    sidePath(zTo, zImage, "-journal");
    fileCopy(zJ, zTo);
  }
  return db;
}

static sqlite3 *beginSpill(const char *zDb, const char *zSavedJ, const char *zImage){
  return beginSpillMode(zDb, "DELETE", zSavedJ, zImage);
}


/* ---- old journal put back (case 3, first half) ------------------------------- */

static void oldJournalCase(int bV2){
  char zDb[PATH_MAX], zJ[PATH_MAX], zSaved[PATH_MAX], zBefore[PATH_MAX];
  sqlite3 *db;
  sqlite3_int64 v = 0;
  int rc;
  pathOf(zDb, bV2 ? "oldjrnl-v2.db" : "oldjrnl-v1.db");
  sidePath(zJ, zDb, "-journal");
  sidePath(zSaved, zDb, "-journal.saved");
  sidePath(zBefore, zDb, ".before");
  makeDb(zDb, bV2);
  db = beginSpill(zDb, zSaved, 0);                /* the attacker's copy, mid-T1 */
  exec(db, "COMMIT");
  exec(db, "UPDATE t SET v=printf('T2 %04d %.900c', id, 'c') WHERE id%2=0");
  exec(db, "UPDATE t SET v=printf('T3 %04d %.900c', id, 'd') WHERE id%3=0");
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  assert_false(fileExists(zJ));
  fileCopy(zDb, zBefore);

  fileCopy(zSaved, zJ);                          /* put back */
  tdeErrClear();
  rc = openAndCount(zDb, "T0", &v);
  if( !bV2 ){
    /* Version 1: played back; rows return to the values before T1. */
    assert_int_equal(rc, SQLITE_OK);
    assert_true(v>0);
    assert_false(fileExists(zJ));
    assert_false(sameFile(zDb, zBefore));
    return;
  }
  assert_int_equal(rc, SQLITE_IOERR_AUTH);
  assert_non_null(strstr(tde_last_error(), zJ));
  assert_non_null(strstr(tde_last_error(), "older transaction"));
  assert_non_null(strstr(tde_last_error(), "move it aside"));
  /* Nothing was modified by the refusal. */
  assert_true(sameFile(zDb, zBefore));
  assert_true(sameFile(zJ, zSaved));
  /* What to do: move it aside; the database is at its last commit. */
  assert_int_equal(rename(zJ, zSaved), 0);
  assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
  assert_int_equal(countLike(db, "T0"), 0);
  assert_int_equal(countLike(db, "T3"), NROW/3);
  assert_int_equal(countLike(db, "T2"), NROW/2 - NROW/6);
  assert_int_equal(countLike(db, "T1"), NROW - NROW/3 - (NROW/2 - NROW/6));
  assert_true(integrityOk(db));
  assert_int_equal(tde_verify(db, "main", 0, 0, 0, 0), TDE_OK);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

static void test_old_journal_v1(void **s){ (void)s; oldJournalCase(0); }
static void test_old_journal_v2(void **s){ (void)s; oldJournalCase(1); }

/* ---- zeroed record (case 3, second half) ------------------------------------- */

static void zeroedRecordCase(int bV2){
  char zDb[PATH_MAX], zImg[PATH_MAX], zImgJ[PATH_MAX], zBefore[PATH_MAX];
  unsigned char *aJ;
  size_t nJ = 0;
  sqlite3 *db;
  sqlite3_int64 v = 0, nT0, nT1;
  const size_t H = 512, k = 10, r = H + k*(PGSZ + 8);
  uint32_t pgno;
  int rc;
  pathOf(zDb, bV2 ? "zrec-v2.db" : "zrec-v1.db");
  pathOf(zImg, bV2 ? "zrec-v2-img.db" : "zrec-v1-img.db");
  sidePath(zImgJ, zImg, "-journal");
  sidePath(zBefore, zImg, ".before");
  makeDb(zDb, bV2);
  db = beginSpill(zDb, 0, zImg);                 /* a crash image, mid-T1 */
  exec(db, "ROLLBACK");
  assert_int_equal(sqlite3_close(db), SQLITE_OK);

  /* Zero record k of the first segment (its synced header counts 40 or so
  ** records; the page number field is stored in the clear). */
  aJ = readAll(zImgJ, &nJ);
  assert_non_null(aJ);
  assert_true(nJ >= r + PGSZ + 8);
  pgno = ((uint32_t)aJ[r]<<24) | ((uint32_t)aJ[r+1]<<16) | ((uint32_t)aJ[r+2]<<8) | aJ[r+3];
  assert_true(pgno>=2 && pgno<=200);             /* the layout assumed here */
  memset(aJ + r, 0, PGSZ + 8);
  writeAll(zImgJ, aJ, nJ);
  free(aJ);
  fileCopy(zImg, zBefore);

  tdeErrClear();
  rc = openAndCount(zImg, "T0", &v);
  assert_int_equal(rc, SQLITE_IOERR_AUTH);
  if( bV2 ){
    assert_non_null(strstr(tde_last_error(), zImgJ));
    assert_non_null(strstr(tde_last_error(), "although the synced journal header counts it"));
    assert_true(sameFile(zImg, zBefore));        /* nothing was applied */
    return;
  }
  /* Version 1: the records before the zeroed one were applied, then the
  ** playback failed; with the journal moved aside the database is torn --
  ** old and new rows mixed -- and every page authenticates. */
  assert_false(sameFile(zImg, zBefore));
  assert_int_equal(unlink(zImgJ), 0);
  assert_int_equal(openTdeCfg(zImg, zCfg, &db), SQLITE_OK);
  nT0 = countLike(db, "T0");
  nT1 = countLike(db, "T1");
  assert_true(nT0>0 && nT1>0);
  assert_int_equal(tde_verify(db, "main", 0, 0, 0, 0), TDE_OK);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

static void test_zeroed_record_v1(void **s){ (void)s; zeroedRecordCase(0); }
static void test_zeroed_record_v2(void **s){ (void)s; zeroedRecordCase(1); }

/* ---- genuine crashes are played back ----------------------------------------- */

/* The image zImg (database and hot journal) plays back to the T0 state. */
static void expectRecovered(const char *zImg){
  char zJ[PATH_MAX];
  sqlite3 *db = 0;
  sidePath(zJ, zImg, "-journal");
  assert_true(fileExists(zJ));
  assert_int_equal(openTdeCfg(zImg, zCfg, &db), SQLITE_OK);
  sqlite3_extended_result_codes(db, 1);
  assert_int_equal(countLike(db, "T0"), NROW);
  assert_false(fileExists(zJ));
  assert_true(integrityOk(db));
  assert_int_equal(tde_verify(db, "main", 0, 0, 0, 0), TDE_OK);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

static void genuineCrashCase(int bV2){
  char zDb[PATH_MAX], zSpill[PATH_MAX], zCommit[PATH_MAX], zReplay[PATH_MAX], zTmp[PATH_MAX];
  sqlite3 *db;
  pathOf(zDb, bV2 ? "crash-v2.db" : "crash-v1.db");
  pathOf(zSpill, bV2 ? "crash-v2-spill.db" : "crash-v1-spill.db");
  pathOf(zCommit, bV2 ? "crash-v2-commit.db" : "crash-v1-commit.db");
  pathOf(zReplay, bV2 ? "crash-v2-replay.db" : "crash-v1-replay.db");
  removeDb(zSpill);
  removeDb(zCommit);
  removeDb(zReplay);
  makeDb(zDb, bV2);

  /* 1. Mid-transaction, after a spill: page 1 is still the committed one. */
  db = beginSpill(zDb, 0, zSpill);
  /* 2. At the commit point: the database written and synced, page 1 with
  ** the new change counter, the journal about to be deleted. */
  nSnaps = 0;
  snapArm(zDb, zCommit);
  exec(db, "COMMIT");
  assert_int_equal(nSnaps, 1);
  assert_int_equal(countLike(db, "T1"), NROW);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  expectRecovered(zSpill);

  /* 3. A crash during the playback of image 2, after it wrote every page
  ** back and before it deleted the journal: played back again.  (Image 2
  ** is kept in zTmp for step 4.) */
  {
    char zJ[PATH_MAX], zTmpJ[PATH_MAX];
    sqlite3_int64 v = 0;
    pathOf(zTmp, bV2 ? "crash-v2-commit-copy.db" : "crash-v1-commit-copy.db");
    sidePath(zJ, zCommit, "-journal");
    sidePath(zTmpJ, zTmp, "-journal");
    fileCopy(zCommit, zTmp);
    fileCopy(zJ, zTmpJ);
    nSnaps = 0;
    snapArm(zCommit, zReplay);
    assert_int_equal(openAndCount(zCommit, "T0", &v), SQLITE_OK);
    assert_int_equal(v, NROW);
    assert_int_equal(nSnaps, 1);
    expectRecovered(zReplay);
  }
  /* 4. Image 2 itself. */
  expectRecovered(zTmp);
}

static void test_genuine_crash_v1(void **s){ (void)s; genuineCrashCase(0); }
static void test_genuine_crash_v2(void **s){ (void)s; genuineCrashCase(1); }

/* ---- PERSIST mode: the header rewritten for each transaction ------------------ */

/* A persistent journal saved while T1 ran, put back after T1 and T2 (each
** zeroing the header at its commit, the next one writing a new header at
** 0): refused on version 2; a crash image of the transaction in progress
** plays back. */
static void test_persist_v2(void **s){
  char zDb[PATH_MAX], zJ[PATH_MAX], zSaved[PATH_MAX], zImg[PATH_MAX], zBefore[PATH_MAX];
  sqlite3 *db = 0;
  sqlite3_int64 v = 0;
  (void)s;
  pathOf(zDb, "persist-v2.db");
  pathOf(zImg, "persist-v2-img.db");
  removeDb(zImg);
  sidePath(zJ, zDb, "-journal");
  sidePath(zSaved, zDb, "-journal.saved");
  sidePath(zBefore, zDb, ".before");
  makeDb(zDb, 1);
  db = beginSpillMode(zDb, "PERSIST", zSaved, zImg);
  exec(db, "COMMIT");
  exec(db, "UPDATE t SET v=printf('T2 %04d %.900c', id, 'c') WHERE id%2=0");
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  assert_true(fileExists(zJ));                   /* persistent, header zeroed */
  fileCopy(zDb, zBefore);
  fileCopy(zSaved, zJ);
  tdeErrClear();
  assert_int_equal(openAndCount(zDb, "T0", &v), SQLITE_IOERR_AUTH);
  assert_non_null(strstr(tde_last_error(), "older transaction"));
  assert_true(sameFile(zDb, zBefore));
  expectRecovered(zImg);
}

/* ---- page 1 sealed again after a header update: crash safety --------------- */

/*
** A master-key rotation: the snapshot VFS copies the database and the hot
** journal that protects the page-1 write just before that journal is
** deleted (page 1 written and synced).  That image, and the same with
** page 1 torn after its first sector (its trailer still the old one),
** open: the journal is played back (it is bound to page 1 either way).
*/
static void test_torn_reseal_rotation(void **s){
  char zDb[PATH_MAX], zImg[PATH_MAX], zImgJ[PATH_MAX], zTorn[PATH_MAX], zTornJ[PATH_MAX];
  char zId[TDE_KEYID_MAX+1];
  unsigned char *aOld, *aImg;
  size_t nOld = 0, nImg = 0;
  const size_t P = PGSZ, HDR = (size_t)tdetestPageOff(PGSZ, 1);   /* page 1 */
  sqlite3 *db = 0;
  (void)s;
  pathOf(zDb, "reseal-rotate.db");
  pathOf(zImg, "reseal-rotate-img.db");
  pathOf(zTorn, "reseal-rotate-torn.db");
  sidePath(zImgJ, zImg, "-journal");
  sidePath(zTornJ, zTorn, "-journal");
  removeDb(zImg);
  removeDb(zTorn);
  makeDb(zDb, 1);
  aOld = readAll(zDb, &nOld);
  assert_true(aOld && nOld>HDR + P);
  assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
  assert_int_equal(tde_keystore_new_key(zCfg, zId, sizeof(zId)), TDE_OK);
  nSnaps = 0;
  snapArm(zDb, zImg);
  assert_int_equal(tde_db_rewrap(db, "main"), TDE_OK);
  assert_int_equal(nSnaps, 1);                   /* the re-seal's journal, deleted */
  assert_int_equal(sqlite3_close(db), SQLITE_OK);

  aImg = readAll(zImg, &nImg);
  assert_true(aImg && nImg==nOld);
  assert_memory_not_equal(aImg + HDR, aOld + HDR, P);    /* page 1 sealed again */
  memcpy(aImg + HDR + 512, aOld + HDR + 512, P - 512);   /* torn after its first sector */
  writeAll(zTorn, aImg, nImg);
  fileCopy(zImgJ, zTornJ);
  free(aImg);
  free(aOld);
  expectRecovered(zImg);
  expectRecovered(zTorn);
}

/*
** A rekey (its finish seals page 1 again).  The state a crash leaves
** mid-way through that page-1 write is
** rebuilt: the rekey journal as synced just before (captured by the
** snapshot VFS), page 1 with only its first 512-byte sector new.  The
** database opens and reads (page 1 from the journal); the next write
** transaction rewrites page 1 (the change counter), and then every page
** verifies.
*/
static void test_torn_reseal_rekey(void **s){
  char zDb[PATH_MAX], zRk[PATH_MAX];
  unsigned char *aDb, *aOldPage;
  size_t nDb = 0;
  sqlite3 *db = 0;
  const size_t P = PGSZ, HDR = (size_t)tdetestPageOff(PGSZ, 1);   /* page 1 */
  (void)s;
  pathOf(zDb, "torn-reseal-rekey.db");
  sidePath(zRk, zDb, "-tderekey");
  makeDb(zDb, 1);
  unlink(zRk);
  free(aRk);
  aRk = 0;
  nRk = 0;
  assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
  assert_int_equal(tde_db_rekey(db, "main", 1000, 0, 0), TDE_OK);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
  assert_false(fileExists(zRk));

  /* The last journal synced: one entry, page 1's ciphertext before. */
  assert_true(aRk && nRk==32 + 4 + P + 32);
  assert_memory_equal(aRk, "TDERKJ02", 8);
  assert_int_equal(((uint32_t)aRk[28]<<24 | (uint32_t)aRk[29]<<16 | (uint32_t)aRk[30]<<8 | aRk[31]), 1);
  assert_int_equal(((uint32_t)aRk[32]<<24 | (uint32_t)aRk[33]<<16 | (uint32_t)aRk[34]<<8 | aRk[35]), 1);
  aOldPage = aRk + 36;
  aDb = readAll(zDb, &nDb);
  assert_true(aDb && nDb>HDR + P);
  assert_memory_not_equal(aDb + HDR, aOldPage, P);       /* page 1 was sealed again */
  memcpy(aDb + HDR + 512, aOldPage + 512, P - 512);      /* torn after its first sector */
  writeAll(zDb, aDb, nDb);
  writeAll(zRk, aRk, nRk);
  free(aDb);

  assert_int_equal(openTdeCfg(zDb, zCfg, &db), SQLITE_OK);
  sqlite3_extended_result_codes(db, 1);
  assert_int_equal(countLike(db, "T0"), NROW);
  assert_true(integrityOk(db));
  exec(db, "UPDATE t SET v=printf('T1 %04d', id) WHERE id=1");
  assert_int_equal(countLike(db, "T1"), 1);
  assert_int_equal(tde_verify(db, "main", 0, 0, 0, 0), TDE_OK);
  assert_int_equal(sqlite3_close(db), SQLITE_OK);
}


static int groupSetup(void **state){
  (void)state;
  return tdetestGroupSetup("tdefreshj", 0);
}

static int groupTeardown(void **state){
  (void)state;
  tdetestScratchRemove();
  return 0;
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_old_journal_v1),
    cmocka_unit_test(test_old_journal_v2),
    cmocka_unit_test(test_zeroed_record_v1),
    cmocka_unit_test(test_zeroed_record_v2),
    cmocka_unit_test(test_genuine_crash_v1),
    cmocka_unit_test(test_genuine_crash_v2),
    cmocka_unit_test(test_persist_v2),
    cmocka_unit_test(test_torn_reseal_rotation),
    cmocka_unit_test(test_torn_reseal_rekey),
  };
  /* The snapshot VFS goes below tde: the default before tde_register. */
  if( sqlite3_initialize() ) return 1;
  pUnix = sqlite3_vfs_find("unix");
  if( !pUnix ) return 1;
  snapVfs = *pUnix;
  snapVfs.zName = "tdetest-snap";
  snapVfs.pNext = 0;
  snapVfs.xOpen = snapOpen;
  snapVfs.szOsFile = (int)sizeof(SnapFile) + pUnix->szOsFile;
  snapVfs.xDelete = snapDelete;
  if( sqlite3_vfs_register(&snapVfs, 1) ) return 1;
  return tdetestExit(cmocka_run_group_tests_name("fresh_journal", tests, groupSetup, groupTeardown));
}
