/*
** sqlite-tde command-line tool: status, verify and shell -- the commands
** that look at one encrypted database.
**
** shell replaces this process with the system sqlite3 binary.  The child
** opens the keystore itself: from the configuration's password_file or
** password_fd, or from a password this process typed or took from
** password_env and hands over through a pipe -- never on its argv, never
** in its environment.
*/
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- status ---------------------------------------------------------------- */

/* The columns the compact view shows (NULL ones are left out), in this
** order: what a DBA looks at.  Everything else needs --all. */
static const char *const azStatusCompact[] = {
  "schema", "encrypted", "format_version", "freshness", "page_map", "anchor", "anchor_counter", "anchor_updated", "cipher", "keystore",
  "keystore_status", "master_key", "data_key_version", "page_size", "pages",
  "auth_failures", "rekey_in_progress",
  "pages_by_version", "role", "repl_state", "peer", "transport_lag_txn",
  "transport_lag_seconds", "apply_lag_txn", "apply_lag_seconds", 0
};

/* Print one row of tde_status as "column: value" lines: every column with
** bAll, else the compact set without NULLs (the replication columns only
** for a database that has a role). */
static void printStatusRow(sqlite3_stmt *pStmt, int bAll){
  int i, k, n = sqlite3_column_count(pStmt);
  if( bAll ){
    for(i=0; i<n; i++){
      const char *zVal = (const char*)sqlite3_column_text(pStmt, i);
      printf("%s: %s\n", sqlite3_column_name(pStmt, i), zVal ? zVal : "NULL");
    }
    return;
  }
  for(k=0; azStatusCompact[k]; k++){
    for(i=0; i<n && strcmp(sqlite3_column_name(pStmt, i), azStatusCompact[k])!=0; i++){}
    if( i<n ){
      const char *zVal = (const char*)sqlite3_column_text(pStmt, i);
      if( zVal && !(strcmp(azStatusCompact[k], "role")==0 && strcmp(zVal, "none")==0)
       && !(strcmp(azStatusCompact[k], "anchor")==0 && strcmp(zVal, "off")==0) ){
        printf("%s: %s\n", azStatusCompact[k], zVal);
      }
    }
  }
}

int cliCmdStatus(Cli *pCli, const CliArgs *pArgs){
  const char *zDb = pArgs->azPos[0];
  sqlite3 *db = 0;
  sqlite3_stmt *pStmt = 0;
  int rc = CLI_FAIL, src, nRow = 0;

  if( cliCheckDbFile(zDb, "encrypted database") ) goto done;
  if( cliKeystoreEnsure(pCli) ) goto done;
  if( cliOpenDb(pCli, zDb, 1, SQLITE_OPEN_READONLY, &db) ) goto done;
  src = sqlite3_prepare_v2(db, pArgs->bAll ? "SELECT * FROM tde_status"
                           : "SELECT * FROM tde_status WHERE schema<>'temp'", -1, &pStmt, 0);
  while( src==SQLITE_OK && (src = sqlite3_step(pStmt))==SQLITE_ROW ){
    if( nRow++ ) printf("\n");     /* a blank line between schemas */
    printStatusRow(pStmt, pArgs->bAll);
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

  if( cliCheckDbFile(zDb, "encrypted database") ) goto done;
  if( cliKeystoreEnsure(pCli) ) goto done;
  if( cliOpenDb(pCli, zDb, 1, SQLITE_OPEN_READONLY, &db) ) goto done;
  cliCatchSignals();
  trc = tde_verify(db, "main", &nChecked, &iBad, verifyProgress, pCli);
  cliProgressEnd(pCli);
  if( trc==TDE_AUTH ){
    cliFailAs(CLI_DAMAGED);
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

/* How the sqlite3 child gets the keystore.  A password the child needs is
** handed over through a pipe it reads with tde_keystore_open_fd(): never
** on its command line, never in its
** environment (a password_env variable is removed before exec). */
typedef struct ShellKey {
  char zPw[CLI_PASSWORD_MAX];   /* password for the child; "" for none */
  char zEnvVar[256];            /* password_env variable to remove */
  int bChildReads;              /* password_fd: only the child may read it */
} ShellKey;

static int shellKeystore(Cli *pCli, ShellKey *k){
  char zFd[32];
  int trc;
  if( cliConfigValue(pCli, "password_fd", zFd, sizeof(zFd))==1 ){
    /* A descriptor can be read once: leave it to the child. */
    k->bChildReads = 1;
    return CLI_OK;
  }
  trc = tde_keystore_open(pCli->zConfig, 0);
  if( trc==TDE_OK ){
    if( cliConfigValue(pCli, "password_env", k->zEnvVar, sizeof(k->zEnvVar))==1 ){
      const char *zVal = getenv(k->zEnvVar);
      if( zVal && strlen(zVal)<sizeof(k->zPw) ){
        memcpy(k->zPw, zVal, strlen(zVal)+1);
      }else if( zVal ){
        cliErr("the password in $%s is too long (at most %zu bytes)", k->zEnvVar, sizeof(k->zPw)-1);
        return CLI_FAIL;
      }
    }
    return CLI_OK;
  }
  if( trc==TDE_BADPASSWORD || trc==TDE_NOKEYSTORE || trc==TDE_NOKEY ) cliFailAs(CLI_NOKEY);
  if( trc==TDE_BADPASSWORD && cliConfigHasPasswordSource(pCli)==0 ){
    if( !isatty(STDIN_FILENO) ){
      cliErr("the keystore needs a password: run on a terminal to be asked, or set "
             "password_file (mode 0600), password_env or password_fd in %s", cliConfigPath(pCli));
      return CLI_FAIL;
    }
    if( cliReadPassword("Keystore password: ", k->zPw, sizeof(k->zPw)) ) return CLI_FAIL;
    trc = tde_keystore_open(pCli->zConfig, k->zPw);
    if( trc==TDE_OK ) return CLI_OK;
  }
  cliErrDetail("cannot open the keystore", trc);
  return CLI_FAIL;
}

/* The pipe carrying the password to the child: its read end (inherited
** across exec) in *pFd; the write end is written and closed here.  The
** child's tde_keystore_open_fd() reads it straight into locked memory, and
** a pipe holds nothing once read. */
static int shellKeyPipe(const char *zPw, int *pFd){
  int aFd[2];
  size_t n = strlen(zPw);
  ssize_t k;
  *pFd = -1;
  if( pipe(aFd)!=0 ){
    cliErr("cannot make a pipe for the password: %s", strerror(errno));
    return CLI_FAIL;
  }
  do{ k = write(aFd[1], zPw, n); }while( k<0 && errno==EINTR );
  close(aFd[1]);
  if( k!=(ssize_t)n ){
    cliErr("cannot write the password to the pipe: %s", k<0 ? strerror(errno) : "short write");
    close(aFd[0]);
    return CLI_FAIL;
  }
  *pFd = aFd[0];
  return CLI_OK;
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
static char zShellArg0[] = "sqlite3", zShellCmdOpt[] = "-cmd", zShellMemory[] = ":memory:";

/* Slots 2 and 4 are ours, and slot 6 when slot 5 is a third -cmd (the key
** command); after that come the user's arguments. */
static void freeShellArgv(char **azArgv){
  if( azArgv ){
    sqlite3_free(azArgv[2]);
    sqlite3_free(azArgv[4]);
    if( azArgv[5]==zShellCmdOpt ) sqlite3_free(azArgv[6]);
    free(azArgv);
  }
}

/* iKeyFd >= 0: a -cmd opening the keystore with the password read from
** that descriptor (shellKeyPipe), before the .open; the SELECT returns no
** row, so it prints nothing. */
static char **buildShellArgv(Cli *pCli, const char *zExt, const char *zDb, const CliArgs *pArgs,
                             int iKeyFd){
  char **azArgv = calloc((size_t)pArgs->nRest + 10, sizeof(char*));
  char **azOut = 0;
  char *zQuoted = quoteDotArg(zExt);
  char *zUri = cliUri(pCli, zDb, TDE_VFS_NAME, 0);
  int i, n = 0;

  if( azArgv==0 || zQuoted==0 || zUri==0 ) goto done;
  azArgv[n++] = zShellArg0;
  azArgv[n++] = zShellCmdOpt;
  azArgv[n++] = sqlite3_mprintf(".load %s", zQuoted);
  azArgv[n++] = zShellCmdOpt;
  azArgv[n++] = sqlite3_mprintf(".open '%s'", zUri);   /* zUri is %-escaped: no quotes */
  if( azArgv[2]==0 || azArgv[4]==0 ) goto done;
  if( iKeyFd>=0 ){
    /* Before the .open: slot 4 becomes the key command, slot 6 the .open. */
    azArgv[6] = azArgv[4];
    azArgv[4] = sqlite3_mprintf("SELECT 1 WHERE tde_keystore_open_fd(%Q, %d) IS NULL",
                                pCli->zConfig, iKeyFd);
    azArgv[5] = zShellCmdOpt;
    n = 7;
    if( azArgv[4]==0 ) goto done;
  }
  azArgv[n++] = zShellMemory;
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
  ShellKey key;
  int bLocked, iKeyFd = -1, rc = CLI_FAIL;

  explicit_bzero(&key, sizeof(key));   /* holds the password later; wiped again at done */
  bLocked = mlock(&key, sizeof(key))==0;
  if( findExtension(zExt, sizeof(zExt)) ) goto done;
  if( shellKeystore(pCli, &key) ) goto done;
  /* A new database is the shell's to create; an existing one must open. */
  if( !key.bChildReads && access(zDb, F_OK)==0 ){
    if( cliOpenDb(pCli, zDb, 1, SQLITE_OPEN_READONLY, &db) ) goto done;
    sqlite3_close(db);
  }
  if( key.zPw[0] && shellKeyPipe(key.zPw, &iKeyFd) ) goto done;
  explicit_bzero(key.zPw, sizeof(key.zPw));
  /* The child gets the password from the pipe, not from its environment. */
  if( key.zEnvVar[0] && unsetenv(key.zEnvVar)!=0 ){
    cliErr("cannot remove $%s from the environment: %s", key.zEnvVar, strerror(errno));
    goto done;
  }
  azArgv = buildShellArgv(pCli, zExt, zDb, pArgs, iKeyFd);
  if( azArgv==0 ){
    cliErr("out of memory");
    goto done;
  }
  tde_keystore_close(pCli->zConfig);   /* wipe our copy of the keys */
  /* execve() makes the process dumpable again (the core-size limit of 0
  ** survives it): tde.so marks the shell non-dumpable again when it loads,
  ** before the keystore opens. */
  if( setenv("SQLITE_TDE_NODUMP", "1", 1)!=0 ){
    cliErr("cannot set SQLITE_TDE_NODUMP: %s", strerror(errno));
    goto done;
  }
  /* Every file the shell creates is encrypted under the same configuration:
  ** tde becomes the default VFS (.backup FILE, .save FILE, ATTACH, VACUUM
  ** INTO 'name' all open new files through it).  The configuration path is
  ** no secret; the keystore's password never goes in the environment (the
  ** child reads it from the pipe above). */
  if( setenv("SQLITE_TDE_DEFAULT_VFS", "1", 1)!=0
   || (pCli->zConfig && setenv("SQLITE_TDE_CONFIG", pCli->zConfig, 1)!=0) ){
    cliErr("cannot set the tde environment for the shell: %s", strerror(errno));
    goto done;
  }
  if( bLocked ) munlock(&key, sizeof(key));
  fflush(stdout);
  fflush(stderr);
  execvp(azArgv[0], azArgv);
  cliErr("cannot run sqlite3: %s (is the sqlite3 shell installed and on PATH?)",
         strerror(errno));
done:
  explicit_bzero(&key, sizeof(key));
  if( bLocked ) munlock(&key, sizeof(key));
  if( iKeyFd>=0 ) close(iKeyFd);
  freeShellArgv(azArgv);
  return rc;
}
