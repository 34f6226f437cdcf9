/*
** sqlite-tde command-line tool: helpers the commands share -- messages and
** progress bars on stderr, SQLite URIs, opening databases with a clear
** explanation when that fails, passwords from the terminal, opening the
** keystore, and the file operations that make a copy appear atomically.
**
** Must never: echo or print a password, keep one after use (buffers are
** wiped with explicit_bzero), or leave the terminal without echo.
*/
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

volatile sig_atomic_t cliInterrupted;
static int iFailCode;            /* cliFailAs() */

void cliFailAs(int code){ iFailCode = code; }
int cliFailCode(void){ return iFailCode; }

/* The exit code a library result code means. */
static void failAsTde(int rc){
  if( rc==TDE_BADPASSWORD || rc==TDE_NOKEYSTORE || rc==TDE_NOKEY ) cliFailAs(CLI_NOKEY);
  else if( rc==TDE_AUTH || rc==TDE_FORMAT ) cliFailAs(CLI_DAMAGED);
}

/* ---- messages and progress --------------------------------------------- */

static int bProgressLine;        /* a progress bar is on the current line */
static int iProgressPct = -1;    /* percentage last drawn */
static char zLastLogged[1024];   /* last library error line, to avoid repeating it */

static void progressClear(void){
  if( bProgressLine ){
    fputs("\r\033[K", stderr);
    bProgressLine = 0;
    iProgressPct = -1;
  }
}

void cliErr(const char *zFmt, ...){
  va_list ap;
  progressClear();
  fputs("sqlite-tde: ", stderr);
  va_start(ap, zFmt);
  vfprintf(stderr, zFmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

void cliLogCallback(void *pArg, int level, const char *zMsg){
  (void)pArg;
  progressClear();
  fprintf(stderr, "sqlite-tde: %s%s\n", level==TDE_LOG_WARNING ? "warning: " : "", zMsg);
  if( level==TDE_LOG_ERROR ) snprintf(zLastLogged, sizeof(zLastLogged), "%s", zMsg);
}

/* The detail is left out when the library has just logged it: the user
** would read the same words twice. */
void cliErrDetail(const char *zWhat, int rc){
  const char *zDetail = tde_last_error();
  if( zDetail[0]==0 ) zDetail = tde_errstr(rc);
  if( zLastLogged[0] && strstr(zLastLogged, zDetail) ){
    cliErr("%s", zWhat);
  }else{
    cliErr("%s: %s", zWhat, zDetail);
  }
}

void cliProgress(Cli *pCli, const char *zLabel, int64_t nDone, int64_t nTotal){
  static const char zHashes[] = "##############################";
  const int nWidth = (int)sizeof(zHashes) - 1;
  int pct, nFill;
  if( !pCli->bProgress ) return;
  pct = nTotal>0 ? (int)(nDone*100 / nTotal) : 0;
  if( pct<0 ) pct = 0;
  if( pct>100 ) pct = 100;
  if( bProgressLine && pct==iProgressPct ) return;
  nFill = pct*nWidth/100;
  fprintf(stderr, "\r%s [%.*s%*s] %3d%%", zLabel, nFill, zHashes, nWidth-nFill, "", pct);
  fflush(stderr);
  bProgressLine = 1;
  iProgressPct = pct;
}

void cliProgressEnd(Cli *pCli){
  (void)pCli;
  if( bProgressLine ){
    fputc('\n', stderr);
    bProgressLine = 0;
    iProgressPct = -1;
  }
}

static void onSignal(int sig){
  (void)sig;
  cliInterrupted = 1;
}

void cliCatchSignals(void){
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, 0);
  sigaction(SIGTERM, &sa, 0);
  sigaction(SIGHUP, &sa, 0);
}

/* ---- URIs and databases ------------------------------------------------ */

/* Append z %-escaping everything but unreserved characters and '/', so
** '?', '#', '%', '&', '=' and quotes in names survive any URI context. */
static void uriAppendEscaped(sqlite3_str *pStr, const char *z){
  for(; *z; z++){
    unsigned char c = (unsigned char)*z;
    if( isalnum(c) || c=='-' || c=='.' || c=='_' || c=='~' || c=='/' ){
      sqlite3_str_appendchar(pStr, 1, (char)c);
    }else{
      char zHex[4];
      snprintf(zHex, sizeof(zHex), "%%%02X", (unsigned)c);
      sqlite3_str_appendall(pStr, zHex);
    }
  }
}

char *cliUri(const Cli *pCli, const char *zPath, const char *zVfs, const char *zExtra){
  sqlite3_str *pStr = sqlite3_str_new(0);
  char cSep = '?';
  /* "file:///abs" (empty authority) so a path starting "//" stays a path. */
  sqlite3_str_appendall(pStr, zPath[0]=='/' ? "file://" : "file:");
  uriAppendEscaped(pStr, zPath);
  if( zVfs ){
    sqlite3_str_appendall(pStr, "?vfs=");
    uriAppendEscaped(pStr, zVfs);
    cSep = '&';
    if( strcmp(zVfs, TDE_VFS_NAME)==0 && pCli->zConfig ){
      sqlite3_str_appendall(pStr, "&tde_config=");
      uriAppendEscaped(pStr, pCli->zConfig);
    }
  }
  if( zExtra ){
    sqlite3_str_appendchar(pStr, 1, cSep);
    sqlite3_str_appendall(pStr, zExtra);
  }
  return sqlite3_str_finish(pStr);
}

/* Explain why opening zPath failed, in the user's terms. */
static void reportOpenError(const char *zPath, int bTde, sqlite3 *db, int rc){
  char zWhat[PATH_MAX + 128];
  const char *zMsg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  if( rc==SQLITE_IOERR_AUTH ){
    cliFailAs(CLI_DAMAGED);
    cliErr("cannot read %s: a page failed authentication (tampered with, damaged, "
           "or a wrong key)", zPath);
    return;
  }
  switch( rc & 0xff ){
    case SQLITE_AUTH:
      cliFailAs(CLI_NOKEY);
      snprintf(zWhat, sizeof(zWhat), "cannot open %s: keystore or master key not available", zPath);
      cliErrDetail(zWhat, TDE_NOKEYSTORE);
      break;
    case SQLITE_NOTADB:
      if( bTde || !cliIsTdeFile(zPath) ) cliFailAs(CLI_DAMAGED);
      if( !bTde && cliIsTdeFile(zPath) ){
        cliErr("%s is already encrypted (an sqlite-tde database); nothing to do", zPath);
      }else if( bTde ){
        snprintf(zWhat, sizeof(zWhat), "cannot open %s: not an sqlite-tde encrypted database, "
                 "or damaged", zPath);
        cliErrDetail(zWhat, TDE_FORMAT);
      }else{
        cliErr("cannot open %s: not a plaintext SQLite database (%s)", zPath, zMsg);
      }
      break;
    case SQLITE_CANTOPEN:
      if( access(zPath, F_OK)!=0 ){
        cliErr("cannot open %s: %s", zPath, strerror(errno));
      }else{
        cliErr("cannot open %s: %s", zPath, zMsg);
      }
      break;
    default:
      cliErr("cannot open %s: %s", zPath, zMsg);
      break;
  }
}

int cliOpenDb(Cli *pCli, const char *zPath, int bTde, int flags, sqlite3 **pDb){
  sqlite3 *db = 0;
  char *zUri = cliUri(pCli, zPath, bTde ? TDE_VFS_NAME : 0, 0);
  int rc = CLI_FAIL, src;

  *pDb = 0;
  if( zUri==0 ){ cliErr("out of memory"); goto done; }
  zLastLogged[0] = 0;
  src = sqlite3_open_v2(zUri, &db, flags | SQLITE_OPEN_URI, 0);
  if( src==SQLITE_OK ) sqlite3_extended_result_codes(db, 1);
  /* Reading the schema loads the keys: problems show here, not later. */
  if( src==SQLITE_OK ) src = sqlite3_exec(db, "SELECT count(*) FROM sqlite_schema", 0, 0, 0);
  if( src!=SQLITE_OK ){
    if( db ) src = sqlite3_extended_errcode(db);   /* open returns the primary code */
    reportOpenError(zPath, bTde, db, src);
    goto done;
  }
  *pDb = db;
  db = 0;
  rc = CLI_OK;
done:
  sqlite3_close(db);
  sqlite3_free(zUri);
  return rc;
}

int cliIntegrityCheck(sqlite3 *db, const char *zWhat){
  sqlite3_stmt *pStmt = 0;
  int rc = CLI_FAIL, src, nRow = 0, bOk = 0;

  src = sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &pStmt, 0);
  while( src==SQLITE_OK && (src = sqlite3_step(pStmt))==SQLITE_ROW ){
    const char *z = (const char*)sqlite3_column_text(pStmt, 0);
    nRow++;
    if( nRow==1 && z && strcmp(z, "ok")==0 ){
      bOk = 1;
    }else if( nRow<=10 ){
      cliErr("integrity check of %s: %s", zWhat, z ? z : "?");
    }
    src = SQLITE_OK;
  }
  if( src!=SQLITE_DONE ){
    cliErr("integrity check of %s failed: %s", zWhat, sqlite3_errmsg(db));
    goto done;
  }
  if( !bOk || nRow!=1 ) goto done;
  rc = CLI_OK;
done:
  sqlite3_finalize(pStmt);
  return rc;
}

int cliCheckDbFile(const char *zPath, const char *zKind){
  struct stat st;
  if( stat(zPath, &st)!=0 ){
    cliErr("cannot open %s: %s", zPath, strerror(errno));
    return CLI_FAIL;
  }
  if( !S_ISREG(st.st_mode) ){
    cliErr("%s is not a regular file", zPath);
    return CLI_FAIL;
  }
  if( st.st_size==0 ){
    cliFailAs(CLI_DAMAGED);
    cliErr("%s is empty (0 bytes), not an %s; refusing to touch it", zPath, zKind);
    return CLI_FAIL;
  }
  return CLI_OK;
}

int cliIsTdeFile(const char *zPath){
  char aMagic[8];
  int fd = open(zPath, O_RDONLY | O_CLOEXEC | O_NOCTTY), bTde = 0;
  if( fd<0 ) return 0;
  if( read(fd, aMagic, sizeof(aMagic))==(ssize_t)sizeof(aMagic)
   && memcmp(aMagic, "SQLT-TDE", 8)==0 ){
    bTde = 1;
  }
  close(fd);
  return bTde;
}

/* ---- keystore and passwords -------------------------------------------- */

const char *cliConfigPath(const Cli *pCli){
  const char *z = pCli->zConfig;
  if( z==0 ) z = getenv("SQLITE_TDE_CONFIG");
  if( z==0 || z[0]==0 ) z = "/etc/sqlite-tde/tde.conf";
  return z;
}

/* Whether the key of a config line ("key = value") is zKey. */
static int lineHasKey(const char *zLine, const char *zKey){
  size_t n = strlen(zKey);
  while( *zLine==' ' || *zLine=='\t' ) zLine++;
  if( strncmp(zLine, zKey, n)!=0 ) return 0;
  zLine += n;
  while( *zLine==' ' || *zLine=='\t' ) zLine++;
  return *zLine=='=';
}

int cliConfigValue(const Cli *pCli, const char *zKey, char *zOut, size_t nOut){
  char zLine[1024];
  FILE *in = fopen(cliConfigPath(pCli), "r");
  int bFound = 0, bLineStart = 1;
  zOut[0] = 0;
  if( in==0 ) return -1;
  while( !bFound && fgets(zLine, sizeof(zLine), in) ){
    if( bLineStart && lineHasKey(zLine, zKey) ){
      char *z = strchr(zLine, '=') + 1, *zEnd;
      while( *z==' ' || *z=='\t' ) z++;
      /* The library's rule: '#' after a space or tab starts a comment. */
      for(zEnd=z; *zEnd && *zEnd!='\n' && *zEnd!='\r'; zEnd++){
        if( *zEnd=='#' && zEnd>z && (zEnd[-1]==' ' || zEnd[-1]=='\t') ) break;
      }
      while( zEnd>z && (zEnd[-1]==' ' || zEnd[-1]=='\t') ) zEnd--;
      snprintf(zOut, nOut, "%.*s", (int)(zEnd-z), z);
      bFound = 1;
    }
    bLineStart = strchr(zLine, '\n')!=0;
  }
  fclose(in);
  return bFound;
}

int cliConfigHasPasswordSource(const Cli *pCli){
  char zLine[1024];
  FILE *in = fopen(cliConfigPath(pCli), "r");
  int bFound = 0, bLineStart = 1;
  if( in==0 ) return -1;
  while( !bFound && fgets(zLine, sizeof(zLine), in) ){
    if( bLineStart ){
      bFound = lineHasKey(zLine, "password_file") || lineHasKey(zLine, "password_env")
            || lineHasKey(zLine, "password_fd");
    }
    bLineStart = strchr(zLine, '\n')!=0;
  }
  fclose(in);
  return bFound;
}

/* The terminal settings to restore if a signal arrives mid-prompt. */
static struct termios savedTermios;
static volatile sig_atomic_t bEchoOff;

static void onSignalInPrompt(int sig){
  if( bEchoOff ) tcsetattr(STDIN_FILENO, TCSAFLUSH, &savedTermios);
  signal(sig, SIG_DFL);
  raise(sig);
}

/* Read one line from stdin byte by byte (no stdio buffer keeps a copy). */
static int readLine(char *zBuf, size_t nBuf, int *pbTooLong){
  size_t n = 0;
  char c = 0;
  int bLine = 0;
  *pbTooLong = 0;
  for(;;){
    ssize_t got = read(STDIN_FILENO, &c, 1);
    if( got<0 && errno==EINTR ) continue;
    if( got<=0 ) break;
    if( c=='\n' ){ bLine = 1; break; }
    if( n+1<nBuf ) zBuf[n++] = c; else *pbTooLong = 1;
  }
  zBuf[n] = 0;
  explicit_bzero(&c, sizeof(c));
  return bLine || n>0;
}

int cliReadPassword(const char *zPrompt, char *zBuf, size_t nBuf){
  struct termios noEcho;
  struct sigaction sa, aOld[3];
  static const int aSig[3] = { SIGINT, SIGTERM, SIGHUP };
  int i, bGot, bTooLong = 0;

  zBuf[0] = 0;
  if( !isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &savedTermios)!=0 ){
    cliErr("cannot prompt for a password: standard input is not a terminal "
           "(set password_file, password_env or password_fd in the configuration)");
    return CLI_FAIL;
  }
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = onSignalInPrompt;
  sigemptyset(&sa.sa_mask);
  for(i=0; i<3; i++) sigaction(aSig[i], &sa, &aOld[i]);
  noEcho = savedTermios;
  noEcho.c_lflag &= ~(tcflag_t)ECHO;
  fputs(zPrompt, stderr);
  fflush(stderr);
  bEchoOff = tcsetattr(STDIN_FILENO, TCSAFLUSH, &noEcho)==0;
  bGot = readLine(zBuf, nBuf, &bTooLong);
  if( bEchoOff ) tcsetattr(STDIN_FILENO, TCSAFLUSH, &savedTermios);
  bEchoOff = 0;
  for(i=0; i<3; i++) sigaction(aSig[i], &aOld[i], 0);
  fputc('\n', stderr);
  if( !bGot ){ cliErr("no password entered"); return CLI_FAIL; }
  if( bTooLong ){
    explicit_bzero(zBuf, nBuf);
    cliErr("password too long (at most %zu bytes)", nBuf-1);
    return CLI_FAIL;
  }
  return CLI_OK;
}

static void reportKeystoreError(int rc){
  failAsTde(rc);
  cliErrDetail("cannot open the keystore", rc);
}

int cliKeystoreEnsure(Cli *pCli){
  char zPw[CLI_PASSWORD_MAX] = "";
  int rc = CLI_FAIL, trc, bLocked;

  bLocked = mlock(zPw, sizeof(zPw))==0;
  zLastLogged[0] = 0;
  trc = tde_keystore_open(pCli->zConfig, 0);
  if( trc==TDE_OK ){ rc = CLI_OK; goto done; }
  if( trc!=TDE_BADPASSWORD || cliConfigHasPasswordSource(pCli)!=0 ){
    reportKeystoreError(trc);
    goto done;
  }
  if( !isatty(STDIN_FILENO) ){
    cliFailAs(CLI_NOKEY);
    cliErr("the keystore needs a password and %s names no password_file, "
           "password_env or password_fd: set one, or run on a terminal to be asked",
           cliConfigPath(pCli));
    goto done;
  }
  if( cliReadPassword("Keystore password: ", zPw, sizeof(zPw)) ) goto done;
  trc = tde_keystore_open(pCli->zConfig, zPw);
  if( trc!=TDE_OK ){ reportKeystoreError(trc); goto done; }
  rc = CLI_OK;
done:
  explicit_bzero(zPw, sizeof(zPw));
  if( bLocked ) munlock(zPw, sizeof(zPw));
  return rc;
}

/* ---- files --------------------------------------------------------------- */

int cliFsyncPath(const char *zPath){
  int fd = open(zPath, O_RDONLY | O_CLOEXEC);
  int rc = CLI_OK;
  if( fd<0 || fsync(fd)!=0 ){
    cliErr("cannot sync %s: %s", zPath, strerror(errno));
    rc = CLI_FAIL;
  }
  if( fd>=0 ) close(fd);
  return rc;
}

int cliFsyncDirOf(const char *zPath){
  char zDir[PATH_MAX];
  const char *zSlash = strrchr(zPath, '/');
  int fd, rc = CLI_OK;
  if( zSlash==0 ){
    snprintf(zDir, sizeof(zDir), ".");
  }else if( zSlash==zPath ){
    snprintf(zDir, sizeof(zDir), "/");
  }else{
    snprintf(zDir, sizeof(zDir), "%.*s", (int)(zSlash-zPath), zPath);
  }
  fd = open(zDir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if( fd<0 || fsync(fd)!=0 ){
    cliErr("cannot sync directory %s: %s", zDir, strerror(errno));
    rc = CLI_FAIL;
  }
  if( fd>=0 ) close(fd);
  return rc;
}

int cliRenameNoReplace(const char *zFrom, const char *zTo){
  if( renameat2(AT_FDCWD, zFrom, AT_FDCWD, zTo, RENAME_NOREPLACE)==0 ) return CLI_OK;
  if( errno==EINVAL || errno==ENOSYS ){
    /* File system without RENAME_NOREPLACE: link(2) fails if zTo exists. */
    if( link(zFrom, zTo)==0 ){
      unlink(zFrom);
      return CLI_OK;
    }
  }
  cliErr("cannot rename %s to %s: %s", zFrom, zTo, strerror(errno));
  return CLI_FAIL;
}

void cliRemoveDbFiles(const char *zPath){
  static const char *const azSuffix[] = { "", "-journal", "-wal", "-shm" };
  char zName[PATH_MAX + 16];
  size_t i;
  for(i=0; i<sizeof(azSuffix)/sizeof(azSuffix[0]); i++){
    snprintf(zName, sizeof(zName), "%s%s", zPath, azSuffix[i]);
    if( unlink(zName)!=0 && errno!=ENOENT ){
      cliErr("cannot remove %s: %s", zName, strerror(errno));
    }
  }
}
