/*
** sqlite-tde command-line tool: bench -- runs the benchmark kit.
**
** The kit is a separate program, sqlite-tde-bench, next to this one (or
** $SQLITE_TDE_BENCH): it links its own copy of the library to drive the
** workloads and runs the report writer.  This command only finds it and
** replaces this process with it, passing every argument through, so that
** `sqlite-tde bench --help` shows the kit's own options, workloads and
** conditions.
*/
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cliCmdBench(Cli *pCli, const CliArgs *pArgs){
  char zExe[PATH_MAX], zBench[PATH_MAX + 32];
  const char *zEnv = getenv("SQLITE_TDE_BENCH");
  char **azArg;
  char *zSlash;
  ssize_t n;
  int i;
  (void)pCli;
  if( zEnv && zEnv[0] ){
    snprintf(zBench, sizeof(zBench), "%s", zEnv);
  }else{
    n = readlink("/proc/self/exe", zExe, sizeof(zExe)-1);
    if( n<0 ){
      cliErr("cannot find this program's directory: %s (set SQLITE_TDE_BENCH)", strerror(errno));
      return CLI_FAIL;
    }
    zExe[n] = 0;
    zSlash = strrchr(zExe, '/');
    if( zSlash ) zSlash[1] = 0;
    snprintf(zBench, sizeof(zBench), "%ssqlite-tde-bench", zExe);
  }
  azArg = calloc((size_t)pArgs->nRest + 2, sizeof(char*));
  if( !azArg ){
    cliErr("out of memory");
    return CLI_FAIL;
  }
  azArg[0] = zBench;
  for(i=0; i<pArgs->nRest; i++) azArg[i+1] = pArgs->azRest[i];
  fflush(stdout);
  execv(zBench, azArg);
  cliErr("cannot run %s: %s (build it with cmake, or set SQLITE_TDE_BENCH)", zBench, strerror(errno));
  free(azArg);
  return CLI_FAIL;
}
