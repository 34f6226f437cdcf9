/*
** sqlite-tde command-line tool: declarations shared by its source files.
**
**   sqlite-tde.c    main(), global options, command table, help, logging
**   cli_util.c      messages, URIs, opening databases, passwords, files
**   cmd_keystore.c  keystore create / status / list / passwd
**   cmd_copy.c      encrypt / decrypt (VACUUM INTO a temp file, rename)
**   cmd_db.c        status / verify / shell
**   cmd_lifecycle.c rotate-master-key / migrate-keystore / keystore retire
**   cmd_bench.c     bench (runs sqlite-tde-bench from bench/)
**   cmd_standby.c   ship / standby (encrypted standby)
**   cmd_restore.c   restore from the keyless S3 archive (links src/archive)
**
** The tool is a client of the library like any other program: it uses only
** the public header <sqlite-tde.h> and <sqlite3.h>, never anything from
** src/.  It never takes a password on argv, never prints one, and wipes
** every buffer that held one (explicit_bzero).
*/
#ifndef SQLITE_TDE_CLI_H
#define SQLITE_TDE_CLI_H

#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>
#include "sqlite-tde.h"

/* Exit codes (documented in --help and the README; never renumbered). */
#define CLI_OK      0    /* success */
#define CLI_FAIL    1    /* the operation failed (another reason) */
#define CLI_USAGE   2    /* bad command line */
#define CLI_NOKEY   3    /* keystore unavailable, wrong password or PIN, master key missing */
#define CLI_DAMAGED 4    /* a page, frame or header failed authentication, or the
                         ** file is not a (readable) sqlite-tde database */

/* A command returns CLI_FAIL; main() turns it into the most specific code
** the failure reports set with cliFailAs() (the last one wins). */
void cliFailAs(int code);
int cliFailCode(void);

typedef struct Cli Cli;
typedef struct CliCommand CliCommand;
typedef struct CliArgs CliArgs;

/* State shared by every command. */
struct Cli {
  const char *zConfig;       /* absolute configuration path, or NULL for
                             ** the library's default search */
  char zConfigBuf[PATH_MAX]; /* storage for zConfig */
  int bProgress;             /* stderr is a terminal: draw progress bars */
};

/* Command-line arguments of one command, after option parsing. */
struct CliArgs {
  int bAutoLogin;            /* keystore create --auto-login */
  int nPos;                  /* positional arguments */
  char **azPos;
  int nRest;                 /* shell: arguments after DB, passed through */
  char **azRest;
  const char *zTo;           /* migrate-keystore --to CFG (absolute path) */
  char zToBuf[PATH_MAX];
  int bDropOld;              /* migrate-keystore --drop-old */
  int nStep;                 /* rekey --step N (0: default) */
  uint32_t kdfT;             /* keystore passwd --kdf-t N (0: keep) */
  uint32_t kdfM;             /* keystore passwd --kdf-m KIB (0: keep) */
  int bAll;                  /* status --all */
  int iToVersion;            /* upgrade --to N (0: the library's default) */
};

/* One command.  zName is "encrypt" or "keystore create". */
struct CliCommand {
  const char *zName;
  const char *zArgs;         /* usage after the name, e.g. "SRC DST" */
  const char *zSummary;      /* one line for the command list */
  const char *zHelp;         /* paragraph(s) for CMD --help */
  int nPos;                  /* positional arguments required */
  unsigned flags;            /* CLI_OPT_* */
  int (*xRun)(Cli*, const CliArgs*);
};
#define CLI_OPT_AUTOLOGIN 0x01   /* accepts --auto-login */
#define CLI_OPT_PASSTHRU  0x02   /* arguments after the last positional go
                                 ** to azRest untouched */
#define CLI_OPT_MANY      0x04   /* nPos is a minimum: more positionals welcome */
#define CLI_OPT_MIGRATE   0x08   /* accepts --to CFG and --drop-old */
#define CLI_OPT_STEP      0x10   /* accepts --step N */
#define CLI_OPT_KDF       0x20   /* accepts --kdf-t N and --kdf-m KIB */
#define CLI_OPT_ALL       0x40   /* accepts --all */
#define CLI_OPT_TOVER     0x80   /* accepts --to N (a format version) */

/* Commands (cmd_*.c). */
int cliCmdKeystoreCreate(Cli*, const CliArgs*);
int cliCmdKeystoreStatus(Cli*, const CliArgs*);
int cliCmdKeystoreList(Cli*, const CliArgs*);
int cliCmdKeystoreSeal(Cli*, const CliArgs*);
int cliCmdKeystoreUnseal(Cli*, const CliArgs*);
int cliCmdKeystorePasswd(Cli*, const CliArgs*);
int cliCmdEncrypt(Cli*, const CliArgs*);
int cliCmdDecrypt(Cli*, const CliArgs*);
int cliCmdStatus(Cli*, const CliArgs*);
int cliCmdVerify(Cli*, const CliArgs*);
int cliCmdShell(Cli*, const CliArgs*);
int cliCmdRotate(Cli*, const CliArgs*);
int cliCmdMigrate(Cli*, const CliArgs*);
int cliCmdKeystoreRetire(Cli*, const CliArgs*);
int cliCmdRekey(Cli*, const CliArgs*);
int cliCmdUpgrade(Cli*, const CliArgs*);
int cliCmdReanchor(Cli*, const CliArgs*);
int cliCmdRemap(Cli*, const CliArgs*);
int cliCmdBench(Cli*, const CliArgs*);
int cliCmdShip(Cli*, const CliArgs*);       /* cmd_standby.c */
int cliCmdStandby(Cli*, const CliArgs*);
extern const char cliShipHelp[], cliStandbyHelp[];
/* --status of ship, standby and archive: the replication figures (cmd_standby.c). */
int cliReplStatus(const char *zDb);
#ifdef TDE_HAVE_ARCHIVE
int cliCmdArchive(Cli*, const CliArgs*);   /* cmd_archive.c */
extern const char cliArchiveHelp[];
int cliCmdRestore(Cli*, const CliArgs*);   /* cmd_restore.c */
extern const char cliRestoreHelp[];
#endif

/* ---- messages (cli_util.c) --------------------------------------------- */

/* "sqlite-tde: <message>\n" on stderr.  Clears a progress line first. */
void cliErr(const char *zFmt, ...) __attribute__((format(printf, 1, 2)));

/* "sqlite-tde: zWhat: <tde_last_error()>", leaving the detail out when the
** library has just logged it.  rc names the failure if there is no detail. */
void cliErrDetail(const char *zWhat, int rc);

/* Library log callback for tde_set_log(): every line to stderr. */
void cliLogCallback(void *pArg, int level, const char *zMsg);

/* Progress bar on stderr: "\r<label> [#####     ]  42%".  Only redraws when
** the percentage changes; cliProgressEnd() finishes the line. */
void cliProgress(Cli *pCli, const char *zLabel, int64_t nDone, int64_t nTotal);
void cliProgressEnd(Cli *pCli);

/* Set by SIGINT/SIGTERM while a long operation runs; polled by progress
** callbacks, which then stop the operation so temp files get removed. */
extern volatile sig_atomic_t cliInterrupted;
void cliCatchSignals(void);

/* ---- URIs and databases (cli_util.c) ----------------------------------- */

/* A new "file:" URI for zPath (%-escaped), with "?vfs=zVfs" when zVfs is
** not NULL and "&tde_config=<config>" when zVfs is "tde" and a config was
** given.  sqlite3_free() the result.  NULL when out of memory. */
char *cliUri(const Cli *pCli, const char *zPath, const char *zVfs, const char *zExtra);

/* Open zPath (through tde when bTde, else the plain default VFS) with
** flags (SQLITE_OPEN_URI is added), then read the schema so that keys are
** loaded and a bad keystore, key or file shows now.  On failure prints why
** (library detail included), closes and returns CLI_FAIL. */
int cliOpenDb(Cli *pCli, const char *zPath, int bTde, int flags, sqlite3 **pDb);

/* Run PRAGMA integrity_check on db; prints the problems. */
int cliIntegrityCheck(sqlite3 *db, const char *zWhat);

/* zPath must be an existing, non-empty regular file (so no command turns a
** typo or a 0-byte leftover into a new database).  zKind names what it
** should be ("encrypted database").  Prints why not and returns CLI_FAIL. */
int cliCheckDbFile(const char *zPath, const char *zKind);

/* Whether zPath starts with an sqlite-tde header ("SQLT-TDE"): 1 yes, 0 no
** or unreadable. */
int cliIsTdeFile(const char *zPath);

/* ---- keystore and passwords (cli_util.c) ------------------------------- */

/* The configuration file the library uses: --config, $SQLITE_TDE_CONFIG,
** or /etc/sqlite-tde/tde.conf. */
const char *cliConfigPath(const Cli *pCli);

/* Whether the configuration names a password source (password_file or
** password_env).  -1 if it cannot be read. */
int cliConfigHasPasswordSource(const Cli *pCli);

/* The value of zKey in the configuration (first occurrence, trailing
** comment removed) into zOut: 1 found, 0 not there, -1 unreadable. */
int cliConfigValue(const Cli *pCli, const char *zKey, char *zOut, size_t nOut);

/* Read a password from the terminal without echo into zBuf (NUL-
** terminated, newline stripped).  Fails unless stdin is a terminal.  The
** caller wipes zBuf with explicit_bzero. */
int cliReadPassword(const char *zPrompt, char *zBuf, size_t nBuf);

/* Open the configured keystore for this process.  If it needs a password
** and the configuration names no source, prompt on the terminal (when
** stdin is one) and pass the password to tde_keystore_open().  Prints why
** on failure and returns CLI_FAIL. */
int cliKeystoreEnsure(Cli *pCli);

/* Size of the largest password the tool reads, including the NUL. */
#define CLI_PASSWORD_MAX 1024

/* ---- files (cli_util.c) ------------------------------------------------ */

/* fsync a file by name, and the directory holding a path. */
int cliFsyncPath(const char *zPath);
int cliFsyncDirOf(const char *zPath);

/* Rename zFrom to zTo unless zTo exists (renameat2 RENAME_NOREPLACE). */
int cliRenameNoReplace(const char *zFrom, const char *zTo);

/* Remove zPath and the -journal, -wal and -shm files SQLite may leave. */
void cliRemoveDbFiles(const char *zPath);

#endif /* SQLITE_TDE_CLI_H */
