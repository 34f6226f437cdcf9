/*
** sqlite-tde command-line tool: status, verify and shell -- the commands
** that look at one encrypted database.
**
** shell replaces this process with the system sqlite3 binary.  The child
** opens the keystore itself, so it can only be given a configuration whose
** password source it can read: a password is never put on its argv.
*/
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- status ---------------------------------------------------------------- */

/* Print one row of tde_status as "column: value" lines. */
static void printStatusRow(sqlite3_stmt *pStmt){
  int i, n = sqlite3_column_count(pStmt);
  for(i=0; i<n; i++){
    const char *zVal = (const char*)sqlite3_column_text(pStmt, i);
    printf("%s: %s\n", sqlite3_column_name(pStmt, i), zVal ? zVal : "NULL");
  }
}

int cliCmdStatus(Cli *pCli, const CliArgs *pArgs){
  const char *zDb = pArgs->azPos[0];
  sqlite3 *db = 0;
  sqlite3_stmt *pStmt = 0;
  int rc = CLI_FAIL, src, nRow = 0;

  if( cliKeystoreEnsure(pCli) ) goto done;
  if( cliOpenDb(pCli, zDb, 1, SQLITE_OPEN_READONLY, &db) ) goto done;
  src = sqlite3_prepare_v2(db, "SELECT * FROM tde_status", -1, &pStmt, 0);
  while( src==SQLITE_OK && (src = sqlite3_step(pStmt))==SQLITE_ROW ){
    if( nRow++ ) printf("\n");     /* a blank line between schemas */
    printStatusRow(pStmt);
    src = SQLITE_OK;
  }
  if( src!=SQLITE_DONE ){
    cliErr("cannot read the status of %s: %s", zDb, sqlite3_errmsg(db));
    goto done;
  }
  rc = CLI_OK;
done:
  sqlite3_finalize(pStmt);
  sqlite3_close(db);
  return rc;
}

/* ---- verify ---------------------------------------------------------------- */

static int verifyProgress(void *pArg, int64_t nDone, int64_t nTotal){
  cliProgress((Cli*)pArg, "verifying", nDone, nTotal);
  return cliInterrupted ? 1 : 0;
}

/* Name what tde_verify reported as bad (see tde_verify in sqlite-tde.h). */
static void reportBad(const char *zDb, int64_t iBad, int64_t nChecked){
  if( iBad==TDE_VERIFY_HEADER_SLOT(0) || iBad==TDE_VERIFY_HEADER_SLOT(1) ){
    cliErr("%s: header slot %lld is damaged or was tampered with (the database opens from "
           "the other slot)", zDb, (long long)(TDE_VERIFY_HEADER_SLOT(0) - iBad));
  }else if( iBad>0 ){
    cliErr("%s: page %lld failed authentication (%lld pages/frames authenticated before it)",
           zDb, (long long)iBad, (long long)nChecked);
  }else if( iBad==TDE_VERIFY_WAL_HEADER ){
    cliErr("%s: the WAL header failed authentication", zDb);
  }else if( iBad<0 ){
    cliErr("%s: WAL frame %lld failed authentication", zDb, (long long)(-iBad-1));
  }else{
    cliErrDetail("verify failed", TDE_AUTH);
  }
}

int cliCmdVerify(Cli *pCli, const CliArgs *pArgs){
  const char *zDb = pArgs->azPos[0];
  sqlite3 *db = 0;
  int64_t nChecked = 0, iBad = 0;
  int rc = CLI_FAIL, trc;

  if( cliKeystoreEnsure(pCli) ) goto done;
  if( cliOpenDb(pCli, zDb, 1, SQLITE_OPEN_READONLY, &db) ) goto done;
  cliCatchSignals();
  trc = tde_verify(db, "main", &nChecked, &iBad, verifyProgress, pCli);
  cliProgressEnd(pCli);
  if( trc==TDE_AUTH ){
    reportBad(zDb, iBad, nChecked);
    goto done;
  }
  if( trc!=TDE_OK ){
    cliErrDetail(cliInterrupted ? "interrupted" : "verify failed", trc);
    goto done;
  }
  printf("%s: OK, %lld pages/frames authenticated\n", zDb, (long long)nChecked);
  rc = CLI_OK;
done:
  sqlite3_close(db);
  return rc;
}

/* ---- shell ----------------------------------------------------------------- */

/* The loadable extension: $SQLITE_TDE_EXTENSION, else tde.so next to this
** program, else ../lib/sqlite-tde/tde.so from it (the installed layout). */
static int findExtension(char *zOut, size_t nOut){
  static const char *const azRel[] = { "tde.so", "../lib/sqlite-tde/tde.so" };
  const char *zEnv = getenv("SQLITE_TDE_EXTENSION");
  char zExe[PATH_MAX];
  ssize_t n;
  size_t i;
  char *zSlash;

  if( zEnv && zEnv[0] ){
    snprintf(zOut, nOut, "%s", zEnv);
    if( access(zOut, R_OK)==0 ) return CLI_OK;
    cliErr("SQLITE_TDE_EXTENSION=%s: %s", zEnv, strerror(errno));
    return CLI_FAIL;
  }
  n = readlink("/proc/self/exe", zExe, sizeof(zExe)-1);
  if( n<0 ){
    cliErr("cannot find this program's directory: %s (set SQLITE_TDE_EXTENSION)", strerror(errno));
    return CLI_FAIL;
  }
  zExe[n] = 0;
  zSlash = strrchr(zExe, '/');
  if( zSlash ) zSlash[1] = 0;
  for(i=0; i<sizeof(azRel)/sizeof(azRel[0]); i++){
    int k = snprintf(zOut, nOut, "%s%s", zExe, azRel[i]);
    if( k>0 && (size_t)k<nOut && access(zOut, R_OK)==0 ) return CLI_OK;
  }
  cliErr("cannot find the tde extension (tde.so) next to %s; set SQLITE_TDE_EXTENSION", zExe);
  return CLI_FAIL;
}

/* The keystore must open without a password from us: the shell cannot be
** handed one. */
static int checkKeystoreForShell(Cli *pCli){
  int trc = tde_keystore_open(pCli->zConfig, 0);
  if( trc==TDE_OK ) return CLI_OK;
  if( trc==TDE_BADPASSWORD && cliConfigHasPasswordSource(pCli)==0 ){
    cliErr("the keystore needs a password, and the sqlite3 shell cannot be given one safely "
           "(never on its command line): set password_file (mode 0600) or password_env "
           "in %s", cliConfigPath(pCli));
    return CLI_FAIL;
  }
  cliErrDetail("cannot open the keystore", trc);
  return CLI_FAIL;
}

/* A dot-command argument in double quotes, backslash-escaping \ and ". */
static char *quoteDotArg(const char *z){
  sqlite3_str *pStr = sqlite3_str_new(0);
  sqlite3_str_appendchar(pStr, 1, '"');
  for(; *z; z++){
    if( *z=='"' || *z=='\\' ) sqlite3_str_appendchar(pStr, 1, '\\');
    sqlite3_str_appendchar(pStr, 1, *z);
  }
  sqlite3_str_appendchar(pStr, 1, '"');
  return sqlite3_str_finish(pStr);
}

/*
** sqlite3 -cmd '.load "EXT"' -cmd ".open 'URI'" :memory: ARGS...
** ":memory:" takes the shell's database-name slot, so that a first
** positional argument in ARGS is run as SQL instead of being opened (and
** created) as a database file; the -cmd .open then replaces it with DB.
*/
static void freeShellArgv(char **azArgv){
  if( azArgv ){
    sqlite3_free(azArgv[2]);
    sqlite3_free(azArgv[4]);
    free(azArgv);
  }
}

static char **buildShellArgv(Cli *pCli, const char *zExt, const char *zDb, const CliArgs *pArgs){
  static char zArg0[] = "sqlite3", zCmdOpt[] = "-cmd", zMemory[] = ":memory:";
  char **azArgv = calloc((size_t)pArgs->nRest + 8, sizeof(char*));
  char **azOut = 0;
  char *zQuoted = quoteDotArg(zExt);
  char *zUri = cliUri(pCli, zDb, TDE_VFS_NAME, 0);
  int i, n = 0;

  if( azArgv==0 || zQuoted==0 || zUri==0 ) goto done;
  azArgv[n++] = zArg0;
  azArgv[n++] = zCmdOpt;
  azArgv[n++] = sqlite3_mprintf(".load %s", zQuoted);
  azArgv[n++] = zCmdOpt;
  azArgv[n++] = sqlite3_mprintf(".open '%s'", zUri);   /* zUri is %-escaped: no quotes */
  azArgv[n++] = zMemory;
  if( azArgv[2]==0 || azArgv[4]==0 ) goto done;
  for(i=0; i<pArgs->nRest; i++) azArgv[n++] = pArgs->azRest[i];
  azArgv[n] = 0;
  azOut = azArgv;
  azArgv = 0;
done:
  freeShellArgv(azArgv);
  sqlite3_free(zQuoted);
  sqlite3_free(zUri);
  return azOut;
}

int cliCmdShell(Cli *pCli, const CliArgs *pArgs){
  const char *zDb = pArgs->azPos[0];
  char zExt[PATH_MAX];
  char **azArgv = 0;
  sqlite3 *db = 0;

  if( findExtension(zExt, sizeof(zExt)) ) return CLI_FAIL;
  if( checkKeystoreForShell(pCli) ) return CLI_FAIL;
  /* A new database is the shell's to create; an existing one must open. */
  if( access(zDb, F_OK)==0 ){
    if( cliOpenDb(pCli, zDb, 1, SQLITE_OPEN_READONLY, &db) ) return CLI_FAIL;
    sqlite3_close(db);
  }
  azArgv = buildShellArgv(pCli, zExt, zDb, pArgs);
  if( azArgv==0 ){
    cliErr("out of memory");
    return CLI_FAIL;
  }
  tde_keystore_close(pCli->zConfig);   /* wipe our copy of the keys */
  /* execve() makes the process dumpable again (the core-size limit of 0
  ** survives it): tde.so marks the shell non-dumpable again when it loads,
  ** before the keystore opens. */
  if( setenv("SQLITE_TDE_NODUMP", "1", 1)!=0 ){
    cliErr("cannot set SQLITE_TDE_NODUMP: %s", strerror(errno));
    freeShellArgv(azArgv);
    return CLI_FAIL;
  }
  /* Every file the shell creates is encrypted under the same configuration:
  ** tde becomes the default VFS (.backup FILE, .save FILE, ATTACH, VACUUM
  ** INTO 'name' all open new files through it).  The configuration path is
  ** no secret; the keystore's password never goes in the environment (the
  ** shell is refused above for keystores that need one). */
  if( setenv("SQLITE_TDE_DEFAULT_VFS", "1", 1)!=0
   || (pCli->zConfig && setenv("SQLITE_TDE_CONFIG", pCli->zConfig, 1)!=0) ){
    cliErr("cannot set the tde environment for the shell: %s", strerror(errno));
    freeShellArgv(azArgv);
    return CLI_FAIL;
  }
  fflush(stdout);
  fflush(stderr);
  execvp(azArgv[0], azArgv);
  cliErr("cannot run sqlite3: %s (is the sqlite3 shell installed and on PATH?)",
         strerror(errno));
  freeShellArgv(azArgv);
  return CLI_FAIL;
}
