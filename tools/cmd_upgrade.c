/*
** sqlite-tde upgrade [--to 2|3] DB: move a database to a newer format
** version in place through tde_db_upgrade() / tde_db_upgrade_to().  Uses
** only the public API.
*/
#include "cli.h"

#include <stdio.h>

static int upgradeVersion(sqlite3 *db){
  sqlite3_stmt *pStmt = 0;
  int iVersion = 0;
  if( sqlite3_prepare_v2(db, "SELECT format_version FROM tde_status WHERE schema='main'", -1, &pStmt, 0)==SQLITE_OK
   && sqlite3_step(pStmt)==SQLITE_ROW ){
    iVersion = sqlite3_column_int(pStmt, 0);
  }
  sqlite3_finalize(pStmt);
  return iVersion;
}

int cliCmdUpgrade(Cli *pCli, const CliArgs *pArgs){
  const char *zDb = pArgs->azPos[0];
  sqlite3 *db = 0;
  int trc, rc = CLI_FAIL, iBefore, iAfter;
  if( cliKeystoreEnsure(pCli) ) return CLI_FAIL;
  if( cliOpenDb(pCli, zDb, 1, SQLITE_OPEN_READWRITE, &db) ) return CLI_FAIL;
  sqlite3_busy_timeout(db, 5000);
  iBefore = upgradeVersion(db);
  trc = pArgs->iToVersion ? tde_db_upgrade_to(db, "main", pArgs->iToVersion) : tde_db_upgrade(db, "main");
  iAfter = upgradeVersion(db);
  if( trc ){
    cliErrDetail(zDb, trc);
  }else if( iAfter==iBefore && iAfter>=2 ){
    printf("%s: already format version %d; nothing to do\n", zDb, iAfter);
    rc = CLI_OK;
  }else{
    printf("%s: upgraded to format version %d%s\n", zDb, iAfter,
           iAfter>=3 ? " (the page map inside the database file)" : " (freshness checks on)");
    rc = CLI_OK;
  }
  sqlite3_close(db);
  return rc;
}
