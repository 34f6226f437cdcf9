/*
** sqlite-tde reanchor DB: accept DB's current state as fresh in its
** freshness anchor (a backup restored on purpose) through
** tde_db_reanchor().  Uses only the public API.
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
