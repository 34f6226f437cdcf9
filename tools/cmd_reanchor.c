/*
** sqlite-tde reanchor DB: accept DB's current state as fresh in its
** freshness anchor (a backup restored on purpose) through
** tde_db_reanchor().  sqlite-tde remap DB: accept its pages as they are
** (a DB-tdemap missing or from another time) through tde_db_remap().
** Uses only the public API.
*/
#include "cli.h"

#include <stdio.h>

int cliCmdReanchor(Cli *pCli, const CliArgs *pArgs){
  const char *zDb = pArgs->azPos[0];
  unsigned long long nOld = 0, nNew = 0;
  int trc;
  if( cliKeystoreEnsure(pCli) ) return CLI_FAIL;
  trc = tde_db_reanchor(zDb, pCli->zConfig, &nOld, &nNew);
  if( trc ){
    cliErrDetail(zDb, trc);
    return CLI_FAIL;
  }
  printf("%s: re-anchored: its current state is now the freshness anchor "
         "(anchor counter %llu -> %llu; audited)\n", zDb, nOld, nNew);
  return CLI_OK;
}

int cliCmdRemap(Cli *pCli, const CliArgs *pArgs){
  const char *zDb = pArgs->azPos[0];
  int trc;
  if( cliKeystoreEnsure(pCli) ) return CLI_FAIL;
  trc = tde_db_remap(zDb, pCli->zConfig);
  if( trc ){
    cliErrDetail(zDb, trc);
    return CLI_FAIL;
  }
  printf("%s: page map dropped: its pages are accepted as they are, and the map is built again "
         "at the next WAL restart (audited)\n", zDb);
  return CLI_OK;
}
