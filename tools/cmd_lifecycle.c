/*
** sqlite-tde command-line tool: the key lifecycle -- rotate-master-key,
** migrate-keystore, keystore retire.  Each database is opened through the
** tde VFS and changed with one library call that rewrites only its header
** under SQLite's write lock; a failure on one database is reported and the
** others are still processed (exit status 1 at the end).
*/
#include "cli.h"

#include <stdio.h>
#include <string.h>

/* Before anything changes: every database named must be a non-empty file
** that opens through the tde VFS with the keystore (so its key can be had).
** Each problem is reported; CLI_OK only if there is none. */
static int checkAllDbs(Cli *pCli, const CliArgs *pArgs){
  int rc = CLI_OK;
  for(int i=0; i<pArgs->nPos; i++){
    sqlite3 *db = 0;
    if( cliCheckDbFile(pArgs->azPos[i], "encrypted database")
     || cliOpenDb(pCli, pArgs->azPos[i], 1, SQLITE_OPEN_READONLY, &db) ){
      rc = CLI_FAIL;
    }
    sqlite3_close(db);
  }
  if( rc ) cliErr("nothing changed: fix the databases named above, or leave them out");
  return rc;
}

/* Run xDo on every database named; returns CLI_OK if all succeeded. */
static int forEachDb(Cli *pCli, const CliArgs *pArgs, int iFirst,
                     int (*xDo)(Cli*, const CliArgs*, sqlite3*, const char*)){
  int rc = CLI_OK;
  for(int i=iFirst; i<pArgs->nPos; i++){
    const char *zDb = pArgs->azPos[i];
    sqlite3 *db = 0;
    if( cliOpenDb(pCli, zDb, 1, SQLITE_OPEN_READWRITE, &db) ){
      rc = CLI_FAIL;
      continue;
    }
    sqlite3_busy_timeout(db, 2000);
    if( xDo(pCli, pArgs, db, zDb) ) rc = CLI_FAIL;
    sqlite3_close(db);
  }
  return rc;
}

static int rewrapOne(Cli *pCli, const CliArgs *pArgs, sqlite3 *db, const char *zDb){
  int trc = tde_db_rewrap(db, "main");
  (void)pCli; (void)pArgs;
  if( trc ){
    cliErrDetail(zDb, trc);
    return CLI_FAIL;
  }
  printf("%s: data key re-wrapped under the current master key\n", zDb);
  return CLI_OK;
}

int cliCmdRotate(Cli *pCli, const CliArgs *pArgs){
  char zKeyId[TDE_KEYID_MAX+1];
  int trc;
  if( cliKeystoreEnsure(pCli) ) return CLI_FAIL;
  if( checkAllDbs(pCli, pArgs) ) return CLI_FAIL;
  trc = tde_keystore_new_key(cliConfigPath(pCli), zKeyId, sizeof(zKeyId));
  if( trc ){
    cliErrDetail("cannot create a new master key", trc);
    return CLI_FAIL;
  }
  printf("new master key: %s\n", zKeyId);
  return forEachDb(pCli, pArgs, 0, rewrapOne);
}

static int migrateOne(Cli *pCli, const CliArgs *pArgs, sqlite3 *db, const char *zDb){
  int trc = tde_db_migrate(db, "main", pArgs->zTo, pArgs->bDropOld);
  (void)pCli;
  if( trc ){
    cliErrDetail(zDb, trc);
    return CLI_FAIL;
  }
  printf("%s: %s\n", zDb, pArgs->bDropOld
         ? "only the new keystore's wrapping is left"
         : "wrapped under the new keystore too (both open it now)");
  return CLI_OK;
}

int cliCmdMigrate(Cli *pCli, const CliArgs *pArgs){
  if( cliKeystoreEnsure(pCli) ) return CLI_FAIL;
  if( checkAllDbs(pCli, pArgs) ) return CLI_FAIL;
  return forEachDb(pCli, pArgs, 0, migrateOne);
}

int cliCmdKeystoreRetire(Cli *pCli, const CliArgs *pArgs){
  int trc;
  if( cliKeystoreEnsure(pCli) ) return CLI_FAIL;
  trc = tde_keystore_retire(cliConfigPath(pCli), pArgs->azPos[0]);
  if( trc ){
    cliErrDetail("cannot retire the master key", trc);
    return CLI_FAIL;
  }
  printf("master key %s retired\n", pArgs->azPos[0]);
  return CLI_OK;
}

static int rekeyProgress(void *pArg, int64_t nDone, int64_t nTotal){
  cliProgress((Cli*)pArg, "rekey", nDone, nTotal);
  return cliInterrupted ? 1 : 0;
}

int cliCmdRekey(Cli *pCli, const CliArgs *pArgs){
  const char *zDb = pArgs->azPos[0];
  sqlite3 *db = 0;
  int trc, rc = CLI_FAIL;
  if( cliCheckDbFile(zDb, "encrypted database") ) return CLI_FAIL;
  if( cliKeystoreEnsure(pCli) ) return CLI_FAIL;
  if( cliOpenDb(pCli, zDb, 1, SQLITE_OPEN_READWRITE, &db) ) return CLI_FAIL;
  sqlite3_busy_timeout(db, 5000);
  cliCatchSignals();
  trc = tde_db_rekey(db, "main", pArgs->nStep ? pArgs->nStep : 1024, rekeyProgress, pCli);
  cliProgressEnd(pCli);
  if( trc ){
    cliErrDetail(zDb, trc);
  }else{
    printf("%s: every page re-encrypted under the new data key; old key removed\n", zDb);
    rc = CLI_OK;
  }
  sqlite3_close(db);
  return rc;
}
