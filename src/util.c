/*
** Errors and logging for the whole library: the tde_rc string table, the
** per-thread last-error message, and the log fan-out to sqlite3_log() and
** the application's callback.  The library never writes to stdout/stderr.
*/
#include "tde_int.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static _Thread_local char tdeLastErr[512];

int (*tdeFaultHook)(int eSite);

/* The last failure logged on this thread (tdeLastFailure). */
static _Thread_local char tdeLastFail[1024];

const char *tdeLastFailure(void){ return tdeLastFail; }

/* SQLITE_TDE_LOG=stderr: the log also goes to stderr, for hosts that
** cannot set a log callback.  Opt-in by the user; read once. */
static int tdeLogToStderr(void){
  static int eState = -1;   /* -1 unknown, 0 no, 1 yes (a benign race: same answer) */
  if( eState<0 ){
    const char *z = getenv("SQLITE_TDE_LOG");
    eState = z && strcmp(z, "stderr")==0;
  }
  return eState;
}
static tde_log_fn tdeLogFn;
static void *tdeLogArg;

static const char *const azErrStr[] = {
  /* TDE_OK          */ "not an error",
  /* TDE_ERROR       */ "error",
  /* TDE_NOMEM       */ "out of memory",
  /* TDE_IO          */ "I/O error",
  /* TDE_AUTH        */ "authentication failed (data tampered with or wrong key)",
  /* TDE_BADPASSWORD */ "keystore password incorrect",
  /* TDE_NOKEYSTORE  */ "keystore not available",
  /* TDE_NOKEY       */ "master key not found in keystore",
  /* TDE_CONFIG      */ "configuration invalid",
  /* TDE_FORMAT      */ "not an sqlite-tde file or unsupported format",
  /* TDE_PLAINTEXT   */ "plaintext SQLite database",
  /* TDE_UNSUPPORTED */ "not supported",
  /* TDE_EXISTS      */ "already exists",
  /* TDE_MISUSE      */ "library misuse",
  /* TDE_RANGE       */ "value out of range",
  /* TDE_CRYPTO      */ "cryptographic library failure",
  /* TDE_NOTFOUND    */ "not found",
  /* TDE_LOCKED      */ "locked by another connection",
};

const char *tde_errstr(int rc){
  if( rc<0 || (size_t)rc>=TDE_ARRAY_SIZE(azErrStr) ) return "unknown error";
  return azErrStr[rc];
}

const char *tde_last_error(void){ return tdeLastErr; }

void tdeErrClear(void){ tdeLastErr[0] = 0; }

int tdeErr(int rc, const char *zFmt, ...){
  va_list ap;
  va_start(ap, zFmt);
  vsnprintf(tdeLastErr, sizeof(tdeLastErr), zFmt, ap);
  va_end(ap);
  return rc;
}

void tde_set_log(tde_log_fn xLog, void *pArg){
  tdeLogFn = xLog;
  tdeLogArg = pArg;
}

void tdeLog(int level, const char *zFmt, ...){
  char zMsg[1024];
  va_list ap;
  va_start(ap, zFmt);
  vsnprintf(zMsg, sizeof(zMsg), zFmt, ap);
  va_end(ap);
  if( level==TDE_LOG_ERROR ) memcpy(tdeLastFail, zMsg, strlen(zMsg)+1);
  if( tdeLogFn ) tdeLogFn(tdeLogArg, level, zMsg);
  /* The one place the library writes to stderr: the user asked for it. */
  if( tdeLogToStderr() ){
    fprintf(stderr, "sqlite-tde: %s: %s\n",
            level==TDE_LOG_ERROR ? "error" : level==TDE_LOG_WARNING ? "warning" : "info", zMsg);
  }
#ifndef TDE_NO_SQLITE
  sqlite3_log(level==TDE_LOG_ERROR ? SQLITE_ERROR :
              level==TDE_LOG_WARNING ? SQLITE_WARNING : SQLITE_NOTICE,
              "tde: %s", zMsg);
#endif
}

const char *tde_version(void){ return TDE_VERSION; }
int tde_version_number(void){ return TDE_VERSION_NUMBER; }
int tde_reserve_bytes(void){ return TDE_RESERVE_BYTES; }
int tde_header_bytes(void){ return TDE_HEADER_BYTES; }

int tdeModeCheck(int rc, const char *zWhat, const char *zPath, const void *pStat,
                 unsigned mForbid, int bOwner){
  const struct stat *pSt = (const struct stat *)pStat;
  unsigned m = (unsigned)pSt->st_mode & mForbid;
  if( S_ISDIR(pSt->st_mode) && (pSt->st_mode & S_ISVTX) ) m &= ~(unsigned)(S_IWGRP|S_IWOTH);
  if( m ){
    return tdeErr(rc, "%s %s is %s by group or others (mode %04o); refusing to use it: "
                  "chmod %s it", zWhat, zPath,
                  (mForbid & (S_IRGRP|S_IROTH)) ? "accessible" : "writable",
                  (unsigned)(pSt->st_mode & 07777),
                  (mForbid & (S_IRGRP|S_IROTH)) ? (S_ISDIR(pSt->st_mode) ? "700" : "600")
                                                : "go-w");
  }
  if( bOwner && pSt->st_uid!=geteuid() && pSt->st_uid!=0 ){
    return tdeErr(rc, "%s %s belongs to user %ld, not to this user or root; refusing it",
                  zWhat, zPath, (long)pSt->st_uid);
  }
  return TDE_OK;
}

/* The directory part of zPath into zDir[PATH_MAX]; 0 if it does not fit. */
static int tdeDirOf(const char *zPath, char *zDir){
  const char *zSlash = strrchr(zPath, '/');
  if( zSlash==0 ){
    memcpy(zDir, ".", 2);
  }else if( zSlash==zPath ){
    memcpy(zDir, "/", 2);
  }else{
    size_t n = (size_t)(zSlash - zPath);
    if( n>=PATH_MAX ) return 0;
    memcpy(zDir, zPath, n);
    zDir[n] = 0;
  }
  return 1;
}

/* Check the directory of zPath (022, owner). */
static int tdeTrustedDir(int rc, const char *zWhat, const char *zPath){
  char zDir[PATH_MAX];
  char zDirWhat[PATH_MAX + 128];
  struct stat st;
  if( !tdeDirOf(zPath, zDir) ) return tdeErr(rc, "%s %s: path too long", zWhat, zPath);
  if( stat(zDir, &st)!=0 ){
    return tdeErr(rc, "%s %s: cannot stat its directory: %s", zWhat, zPath, strerror(errno));
  }
  snprintf(zDirWhat, sizeof(zDirWhat), "%s %s: its directory", zWhat, zPath);
  return tdeModeCheck(rc, zDirWhat, zDir, &st, S_IWGRP|S_IWOTH, 1);
}

int tdeTrustedFile(int rc, const char *zWhat, const char *zPath, int fd){
  char *zReal;
  struct stat st;
  int rc2;
  if( (fd>=0 ? fstat(fd, &st) : stat(zPath, &st))!=0 ){
    return tdeErr(rc, "%s %s: cannot stat: %s", zWhat, zPath, strerror(errno));
  }
  rc2 = tdeModeCheck(rc, zWhat, zPath, &st, S_IWGRP|S_IWOTH, 1);
  if( rc2==TDE_OK ) rc2 = tdeTrustedDir(rc, zWhat, zPath);
  /* Through a symbolic link: the folder of the file it names, too. */
  zReal = rc2==TDE_OK ? realpath(zPath, 0) : 0;
  if( zReal && strcmp(zReal, zPath)!=0 ) rc2 = tdeTrustedDir(rc, zWhat, zReal);
  free(zReal);
  return rc2;
}
