/*
** sqlite-tde upgrade DB: move a format-version-1 database to version 2
** (freshness checks) through tde_db_upgrade().  Uses only the public API.
*/
#include "cli.h"

#include <stdio.h>

int cliCmdUpgrade(Cli *pCli, const CliArgs *pArgs){
  const char *zDb = pArgs->azPos[0];
  sqlite3 *db = 0;
  sqlite3_stmt *pStmt = 0;
  int trc, rc = CLI_FAIL, iBefore = 0;
  if( cliKeystoreEnsure(pCli) ) return CLI_FAIL;
  if( cliOpenDb(pCli, zDb, 1, SQLITE_OPEN_READWRITE, &db) ) return CLI_FAIL;
  sqlite3_busy_timeout(db, 5000);
  if( sqlite3_prepare_v2(db, "SELECT format_version FROM tde_status WHERE schema='main'", -1, &pStmt, 0)==SQLITE_OK
   && sqlite3_step(pStmt)==SQLITE_ROW ){
    iBefore = sqlite3_column_int(pStmt, 0);
  }
  sqlite3_finalize(pStmt);
  trc = tde_db_upgrade(db, "main");
  if( trc ){
    cliErrDetail(zDb, trc);
  }else if( iBefore>=2 ){
    printf("%s: already format version 2; nothing to do\n", zDb);
    rc = CLI_OK;
  }else{
    printf("%s: upgraded to format version 2 (freshness checks on)\n", zDb);
    rc = CLI_OK;
  }
  sqlite3_close(db);
  return rc;
}
