/*
** SQL functions tde_keystore_open(config [, password]) and
** tde_keystore_open_fd(config, fd): open a keystore for
** the whole process from SQL, for hosts that cannot call the C API (Python,
** Node, the sqlite3 shell).  Registered on every connection by
** tdeStatusRegister(); it does the same as tde_keystore_open() in C, so
** databases opened afterwards with that configuration find the keystore
** open and need no password.
**
** config NULL means the default search ($SQLITE_TDE_CONFIG, then
** /etc/sqlite-tde/tde.conf); password omitted or NULL means the
** configuration's own password source.  The password is text, or a blob
** (one trailing newline dropped).  Returns 'OPEN', or fails with the
** library's reason (SQLITE_AUTH for a wrong or missing password).
**
** The password's text is overwritten in SQLite's memory once used (the
** register holding it; for a bound parameter that is the bound copy).  What
** SQLite keeps elsewhere is out of reach: the SQL text of the statement when
** the password is a literal (and any trace or history the host keeps of
** it), and the host's own string.  Hence: bind it as a parameter, never
** splice it into SQL.  A C caller must not bind it SQLITE_STATIC from
** read-only memory (it is written to); C programs call tde_keystore_open().
**
** Never logs or returns the password; DIRECTONLY, so a schema (a view or a
** trigger in a database someone else wrote) cannot call it.
*/
#include "tde_int.h"
#include "cipher/cipher.h"
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <unistd.h>

/* Fail the call with zMsg and record it for SQL tde_last_error() (an
** ERROR-level log line: the message never holds the password). */
void tdeSqlResultError(sqlite3_context *ctx, const char *zMsg, int sqlRc){
  tdeLog(TDE_LOG_ERROR, "%s", zMsg);
  sqlite3_result_error(ctx, zMsg, -1);
  if( sqlRc!=SQLITE_ERROR ) sqlite3_result_error_code(ctx, sqlRc);
}

/* The result of a keystore open: "OPEN", or the error with its detail
** (never the password), SQLITE_AUTH when the key cannot be had. */
static void sqlOpenResult(sqlite3_context *ctx, const char *zFn, int rc){
  char zMsg[1024];
  if( rc!=TDE_OK ){
    const char *zDetail = tde_last_error();
    snprintf(zMsg, sizeof(zMsg), "%s: %s", zFn, zDetail && zDetail[0] ? zDetail : tde_errstr(rc));
    tdeSqlResultError(ctx, zMsg, rc==TDE_BADPASSWORD || rc==TDE_NOKEY || rc==TDE_NOKEYSTORE
                                 ? SQLITE_AUTH : SQLITE_ERROR);
    return;
  }
  sqlite3_result_text(ctx, "OPEN", -1, SQLITE_STATIC);
}

static void fnKeystoreOpen(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  const char *zConfig = 0;
  char *zPw = 0;                 /* SQLite's buffer of the password argument */
  int nPw = 0, nUse = 0;
  char *zCopy = 0;               /* NUL-terminated copy, in locked memory */

  if( sqlite3_value_type(argv[0])!=SQLITE_NULL ){
    zConfig = (const char*)sqlite3_value_text(argv[0]);
    if( zConfig==0 ){ sqlite3_result_error_nomem(ctx); goto done; }
  }
  if( argc>1 && sqlite3_value_type(argv[1])!=SQLITE_NULL ){
    /* Text, or a blob (one trailing newline of a blob is not part of the
    ** password). */
    int eType = sqlite3_value_type(argv[1]);
    if( eType!=SQLITE_TEXT && eType!=SQLITE_BLOB ){
      tdeSqlResultError(ctx, "tde_keystore_open: the password must be text", SQLITE_ERROR);
      goto done;
    }
    zPw = eType==SQLITE_TEXT ? (char*)sqlite3_value_text(argv[1])
                             : (char*)sqlite3_value_blob(argv[1]);
    nPw = sqlite3_value_bytes(argv[1]);
    if( zPw==0 && nPw>0 ){ sqlite3_result_error_nomem(ctx); goto done; }
    nUse = nPw;
    if( eType==SQLITE_BLOB && nUse>0 && zPw[nUse-1]=='\n' ) nUse--;
    if( nUse==0 || memchr(zPw, 0, (size_t)nUse) ){
      tdeSqlResultError(ctx, nUse ? "tde_keystore_open: the password holds a NUL byte"
                                     : "tde_keystore_open: empty password", SQLITE_ERROR);
      goto done;
    }
    zCopy = tdeSecureAlloc((size_t)nUse + 1);
    if( zCopy==0 ){ sqlite3_result_error_nomem(ctx); goto done; }
    memcpy(zCopy, zPw, (size_t)nUse);
    zCopy[nUse] = 0;
  }
  sqlOpenResult(ctx, "tde_keystore_open", tde_keystore_open(zConfig, zCopy));
done:
  if( zPw && nPw>0 ) tdeWipe(zPw, (size_t)nPw);
  if( zCopy ) tdeSecureFree(zCopy, (size_t)nUse + 1);
}

/* tde_keystore_open_fd(config, fd): the same, with the password read from
** file descriptor fd (a pipe) by tdePasswordRead (config.c): to end of
** file straight into locked memory -- no copy in SQL text, SQLite values
** or stdio buffers -- one trailing newline dropped, fd left open.
** `sqlite-tde shell` uses it. */
static void fnKeystoreOpenFd(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  const char *zConfig = 0;
  char *zPw = 0;                 /* locked memory of nPw+1 bytes */
  size_t nPw = 0;
  sqlite3_int64 fd;
  char zMsg[1024];

  TDE_UNUSED(argc);
  if( sqlite3_value_type(argv[0])!=SQLITE_NULL ){
    zConfig = (const char*)sqlite3_value_text(argv[0]);
    if( zConfig==0 ){ sqlite3_result_error_nomem(ctx); return; }
  }
  fd = sqlite3_value_int64(argv[1]);
  if( sqlite3_value_type(argv[1])!=SQLITE_INTEGER || fd<0 || fd>INT_MAX ){
    tdeSqlResultError(ctx, "tde_keystore_open_fd: the second argument must be a file "
                         "descriptor number", SQLITE_ERROR);
    return;
  }
  switch( tdePasswordRead((int)fd, &zPw, &nPw) ){
    case TDE_PWREAD_OK:
      sqlOpenResult(ctx, "tde_keystore_open_fd", tde_keystore_open(zConfig, zPw));
      break;
    case TDE_PWREAD_NOMEM:
      sqlite3_result_error_nomem(ctx);
      break;
    case TDE_PWREAD_IO:
      snprintf(zMsg, sizeof(zMsg), "tde_keystore_open_fd: cannot read descriptor %lld: %s",
               (long long)fd, strerror(errno));
      tdeSqlResultError(ctx, zMsg, SQLITE_ERROR);
      break;
    case TDE_PWREAD_LONG:
      tdeSqlResultError(ctx, "tde_keystore_open_fd: password too long", SQLITE_ERROR);
      break;
    case TDE_PWREAD_EMPTY:
      tdeSqlResultError(ctx, "tde_keystore_open_fd: no password (empty, or already read)",
                        SQLITE_ERROR);
      break;
    default:
      tdeSqlResultError(ctx, "tde_keystore_open_fd: the password holds a NUL byte", SQLITE_ERROR);
      break;
  }
  tdeSecureFree(zPw, zPw ? nPw + 1 : 0);
}

int tdeSqlFuncRegister(sqlite3 *db){
  int rc = sqlite3_create_function(db, "tde_keystore_open", 1, SQLITE_UTF8|SQLITE_DIRECTONLY,
                                   0, fnKeystoreOpen, 0, 0);
  if( rc==SQLITE_OK ){
    rc = sqlite3_create_function(db, "tde_keystore_open", 2, SQLITE_UTF8|SQLITE_DIRECTONLY,
                                 0, fnKeystoreOpen, 0, 0);
  }
  if( rc==SQLITE_OK ){
    rc = sqlite3_create_function(db, "tde_keystore_open_fd", 2, SQLITE_UTF8|SQLITE_DIRECTONLY,
                                 0, fnKeystoreOpenFd, 0, 0);
  }
  return rc;
}
