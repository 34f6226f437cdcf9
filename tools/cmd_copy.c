/*
** sqlite-tde command-line tool: encrypt and decrypt, which copy a database
** into the other form.
**
** Method: VACUUM INTO a temporary file next to DST (through tde when
** encrypting, the plain unix VFS when decrypting), check the copy
** (integrity_check, and tde_verify for an encrypted copy), fsync it,
** rename(2) it to DST without replacing anything, fsync the directory.
** So DST appears only when complete, and on any failure the temporary file
** is removed.  SRC is opened read-only and never modified.
*/
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct CopyJob {
  Cli *pCli;
  const char *zSrc;
  const char *zDst;
  int bEncrypt;             /* plaintext -> encrypted, else the reverse */
  const char *zLabel;       /* progress bar label */
  char zTmp[PATH_MAX];      /* temporary copy next to DST */
  int bTmp;                 /* zTmp exists and must go on failure */
  int64_t nExpected;        /* approximate size of the copy, for progress */
  int64_t nPage, pgsz;      /* SRC's pages and page size */
  int bFormatSeen;          /* the copy's header was read for its format */
  mode_t srcMode;           /* SRC's permission bits */
} CopyJob;

/* An encrypted copy's size depends on its format version, which the
** configuration chooses: once the copy's header region is written, its
** version (bytes 8..9, big-endian: docs/FORMAT.md "Header region") is read,
** and version 3 adds its map regions, one of max(8192, P) bytes before each
** 508 pages (docs/FORMAT.md "Format version 3: Layout"). */
static void expectedFormat(CopyJob *pJob, int64_t nNow){
  unsigned char aV[2];
  int fd;
  if( !pJob->bEncrypt || pJob->bFormatSeen || nNow < tde_header_bytes() ) return;
  fd = open(pJob->zTmp, O_RDONLY | O_CLOEXEC);
  if( fd<0 ) return;
  if( pread(fd, aV, 2, 8)==2 ){
    pJob->bFormatSeen = 1;
    if( ((aV[0]<<8) | aV[1])==3 ){
      int64_t nRegion = pJob->pgsz>8192 ? pJob->pgsz : 8192;
      pJob->nExpected += nRegion * ((pJob->nPage + 507) / 508);
    }
  }
  close(fd);
}

/* sqlite3_progress_handler callback: progress bar, and stop on a signal. */
static int copyProgress(void *pArg){
  CopyJob *pJob = (CopyJob*)pArg;
  struct stat st;
  if( cliInterrupted ) return 1;
  if( pJob->pCli->bProgress && stat(pJob->zTmp, &st)==0 ){
    expectedFormat(pJob, (int64_t)st.st_size);
    cliProgress(pJob->pCli, pJob->zLabel, (int64_t)st.st_size, pJob->nExpected);
  }
  return 0;
}

/* DST must not exist (not even as a dangling symlink). */
static int checkDst(const char *zDst){
  struct stat st;
  if( lstat(zDst, &st)==0 ){
    cliErr("%s already exists; refusing to overwrite it", zDst);
    return CLI_FAIL;
  }
  if( errno!=ENOENT ){
    cliErr("cannot use %s: %s", zDst, strerror(errno));
    return CLI_FAIL;
  }
  return CLI_OK;
}

/* Size the copy will roughly have: SRC's pages (plus our header, and on
** format version 3 its map regions: expectedFormat). */
static void expectedSize(CopyJob *pJob, sqlite3 *db){
  sqlite3_stmt *pStmt = 0;
  int64_t nPage = 0, pgsz = 0;
  if( sqlite3_prepare_v2(db, "SELECT * FROM pragma_page_count, pragma_page_size", -1,
                         &pStmt, 0)==SQLITE_OK && sqlite3_step(pStmt)==SQLITE_ROW ){
    nPage = sqlite3_column_int64(pStmt, 0);
    pgsz = sqlite3_column_int64(pStmt, 1);
  }
  sqlite3_finalize(pStmt);
  pJob->nPage = nPage;
  pJob->pgsz = pgsz;
  pJob->nExpected = nPage*pgsz + (pJob->bEncrypt ? tde_header_bytes() : 0);
}

/* Create the empty temporary file (VACUUM INTO accepts an empty file). */
static int makeTemp(CopyJob *pJob){
  int fd;
  int n = snprintf(pJob->zTmp, sizeof(pJob->zTmp), "%s.tmp-XXXXXX", pJob->zDst);
  if( n<0 || (size_t)n>=sizeof(pJob->zTmp) ){
    cliErr("%s: path too long", pJob->zDst);
    return CLI_FAIL;
  }
  fd = mkstemp(pJob->zTmp);
  if( fd<0 ){
    cliErr("cannot create a temporary file next to %s: %s", pJob->zDst, strerror(errno));
    return CLI_FAIL;
  }
  pJob->bTmp = 1;
  close(fd);
  return CLI_OK;
}

/* VACUUM INTO the temporary file.  The URI is bound as a parameter, so no
** quoting of file names in SQL is needed. */
static int vacuumInto(CopyJob *pJob, sqlite3 *db){
  sqlite3_stmt *pStmt = 0;
  char *zUri = cliUri(pJob->pCli, pJob->zTmp, pJob->bEncrypt ? TDE_VFS_NAME : "unix", 0);
  int rc = CLI_FAIL, src;

  if( zUri==0 ){ cliErr("out of memory"); goto done; }
  if( pJob->bEncrypt ){
    /* Only sets the reserve VACUUM gives the new file: pages need room for
    ** the tde trailer.  (The call writes the old value back into n.) */
    int n = tde_reserve_bytes();
    sqlite3_file_control(db, "main", SQLITE_FCNTL_RESERVE_BYTES, &n);
  }
  sqlite3_progress_handler(db, 1000, copyProgress, pJob);
  src = sqlite3_prepare_v2(db, "VACUUM INTO ?1", -1, &pStmt, 0);
  if( src==SQLITE_OK ) src = sqlite3_bind_text(pStmt, 1, zUri, -1, SQLITE_STATIC);
  if( src==SQLITE_OK ) src = sqlite3_step(pStmt);
  if( src==SQLITE_DONE ) cliProgress(pJob->pCli, pJob->zLabel, 1, 1);
  cliProgressEnd(pJob->pCli);
  if( src!=SQLITE_DONE ){
    if( cliInterrupted ){
      cliErr("interrupted");
    }else if( sqlite3_system_errno(db) ){
      cliErr("copying %s failed: %s (%s)", pJob->zSrc, sqlite3_errmsg(db),
             strerror(sqlite3_system_errno(db)));
    }else{
      cliErr("copying %s failed: %s", pJob->zSrc, sqlite3_errmsg(db));
    }
    goto done;
  }
  rc = CLI_OK;
done:
  sqlite3_progress_handler(db, 0, 0, 0);
  sqlite3_finalize(pStmt);
  sqlite3_free(zUri);
  return rc;
}

/* Open the finished temporary copy as its readers will and check it. */
static int checkCopy(CopyJob *pJob){
  sqlite3 *db = 0;
  int64_t nChecked = 0, iBad = 0;
  int rc = CLI_FAIL, trc;

  if( cliOpenDb(pJob->pCli, pJob->zTmp, pJob->bEncrypt, SQLITE_OPEN_READONLY, &db) ) goto done;
  if( cliIntegrityCheck(db, pJob->zTmp) ) goto done;
  if( pJob->bEncrypt ){
    trc = tde_verify(db, "main", &nChecked, &iBad, 0, 0);
    if( trc!=TDE_OK ){
      cliErrDetail("the encrypted copy does not verify", trc);
      goto done;
    }
  }
  rc = CLI_OK;
done:
  sqlite3_close(db);
  return rc;
}

/* Make the copy from SRC, which db has open. */
static int copyFrom(CopyJob *pJob, sqlite3 *db){
  expectedSize(pJob, db);
  if( makeTemp(pJob) ) return CLI_FAIL;
  return vacuumInto(pJob, db);
}

/* Permissions, fsync, rename into place, fsync the directory. */
static int publish(CopyJob *pJob){
  /* An encrypted copy may be as readable as its source; a plaintext copy
  ** keeps mkstemp's 0600 (its source was protected by encryption). */
  if( pJob->bEncrypt && chmod(pJob->zTmp, pJob->srcMode)!=0 ){
    cliErr("cannot set the mode of %s: %s", pJob->zTmp, strerror(errno));
    return CLI_FAIL;
  }
  if( cliFsyncPath(pJob->zTmp) ) return CLI_FAIL;
  if( cliRenameNoReplace(pJob->zTmp, pJob->zDst) ) return CLI_FAIL;
  pJob->bTmp = 0;
  return cliFsyncDirOf(pJob->zDst);
}

static int copyRun(CopyJob *pJob){
  sqlite3 *db = 0;
  struct stat st;
  int rc = CLI_FAIL;

  if( checkDst(pJob->zDst) ) goto done;
  if( cliCheckDbFile(pJob->zSrc, pJob->bEncrypt ? "SQLite database" : "encrypted database") ) goto done;
  if( pJob->bEncrypt && cliIsTdeFile(pJob->zSrc) ){
    cliErr("%s is already encrypted (an sqlite-tde database); nothing to do", pJob->zSrc);
    goto done;
  }
  if( stat(pJob->zSrc, &st)!=0 ){
    cliErr("cannot open %s: %s", pJob->zSrc, strerror(errno));
    goto done;
  }
  pJob->srcMode = st.st_mode & 0777;
  if( cliKeystoreEnsure(pJob->pCli) ) goto done;
  if( cliOpenDb(pJob->pCli, pJob->zSrc, !pJob->bEncrypt, SQLITE_OPEN_READONLY, &db) ) goto done;
  cliCatchSignals();
  if( copyFrom(pJob, db) ) goto done;
  sqlite3_close(db);
  db = 0;
  if( cliInterrupted ){ cliErr("interrupted"); goto done; }
  if( checkCopy(pJob) ) goto done;
  if( cliInterrupted ){ cliErr("interrupted"); goto done; }
  if( publish(pJob) ) goto done;
  printf("%s %s -> %s\n", pJob->bEncrypt ? "encrypted" : "decrypted", pJob->zSrc, pJob->zDst);
  rc = CLI_OK;
done:
  sqlite3_close(db);
  if( pJob->bTmp ) cliRemoveDbFiles(pJob->zTmp);
  return rc;
}

static int copyCommand(Cli *pCli, const CliArgs *pArgs, int bEncrypt){
  CopyJob job;
  memset(&job, 0, sizeof(job));
  job.pCli = pCli;
  job.zSrc = pArgs->azPos[0];
  job.zDst = pArgs->azPos[1];
  job.bEncrypt = bEncrypt;
  job.zLabel = bEncrypt ? "encrypting" : "decrypting";
  return copyRun(&job);
}

int cliCmdEncrypt(Cli *pCli, const CliArgs *pArgs){
  return copyCommand(pCli, pArgs, 1);
}

int cliCmdDecrypt(Cli *pCli, const CliArgs *pArgs){
  return copyCommand(pCli, pArgs, 0);
}
