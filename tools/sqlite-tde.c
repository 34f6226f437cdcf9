/*
** sqlite-tde: the command-line tool.  main(), global options, the command
** table, help texts and argument parsing; the commands live in cmd_*.c.
**
** Exit codes: 0 success, 1 the operation failed, 2 bad command line, 3 no
** key (keystore, password, master key), 4 damaged or not an encrypted
** database (CLI_* in cli.h; printUsage lists them).
** Everything the user should read about a failure goes to stderr prefixed
** "sqlite-tde: ", including the library's own log lines.  Passwords are
** never accepted on the command line.
*/
#include "cli.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

static const CliCommand aCommand[] = {
  { "keystore create", "[--auto-login]",
    "create the keystore the configuration describes",
    "Create the keystore the configuration describes (a wallet file, or the\n"
    "first master key on a PKCS#11 token or KMIP key manager) with one master\n"
    "key, and print the new master key id.  The wallet password comes from the\n"
    "configuration's password_file, password_env or password_fd if it names\n"
    "one.  Otherwise --auto-login creates an auto-login wallet (opens without\n"
    "a password; the file itself protects the keys, keep it mode 0600), or else\n"
    "the password is read twice from the terminal without echo.  Refuses to\n"
    "overwrite a wallet.\n",
    0, CLI_OPT_AUTOLOGIN, cliCmdKeystoreCreate },
  { "keystore status", "",
    "show the keystore's type, state and current master key",
    "Show the keystore the configuration names: type, status (OPEN, CLOSED,\n"
    "OPEN_NO_MASTER_KEY or NOT_AVAILABLE), location, whether it is auto-login,\n"
    "the current master key id and the number of keys.  Never prompts: a\n"
    "password wallet whose password the configuration does not supply shows\n"
    "as CLOSED.  Exit 3 when the keystore is NOT_AVAILABLE (missing wallet,\n"
    "module, token or server), 0 otherwise.\n",
    0, 0, cliCmdKeystoreStatus },
  { "keystore list", "",
    "list the master keys of the keystore",
    "List the master keys of the keystore: id, creation time (ISO-8601, UTC)\n"
    "and status (ACTIVE or RETIRED), one key per line.\n",
    0, 0, cliCmdKeystoreList },
  { "keystore seal", "",
    "seal the auto-login wallet's key with this machine's TPM 2.0",
    "Seal the key of the auto-login wallet the configuration names with this\n"
    "machine's TPM 2.0 (set wallet_seal = tpm2 first; wallet_tpm_pcrs binds it\n"
    "to PCR values too).  Afterwards the wallet file holds only the sealed key:\n"
    "a copy opens on no other machine.  Crash-safe and audited.  Copies of the\n"
    "old file still hold the master keys: delete them, then rotate-master-key.\n",
    0, 0, cliCmdKeystoreSeal },
  { "keystore unseal", "",
    "turn a TPM-sealed wallet back into a plain auto-login wallet",
    "Turn a TPM-sealed wallet back into a plain auto-login wallet whose key is\n"
    "in the file, for a planned move to other hardware (needs this TPM, and\n"
    "its PCRs as sealed).  Then remove wallet_seal from the configuration, move,\n"
    "and seal again on the new machine.  Crash-safe and audited.\n",
    0, 0, cliCmdKeystoreUnseal },
  { "keystore passwd", "[--kdf-t N] [--kdf-m KIB]",
    "change the wallet password (new salt, optionally new cost)",
    "Change the password of the password wallet the configuration names.  The\n"
    "current password comes from the configuration's password source, else it\n"
    "is asked for; the new one is always typed twice on the terminal.  The\n"
    "master keys are written again under the new password with a new random\n"
    "salt (crash-safe: a new file, synced, renamed over the old one); the old\n"
    "password stops working.  Audited as keystore_passwd.  A password_file in\n"
    "the configuration is not changed: write the new password into it.\n"
    "Processes that have the wallet open keep working; reopen them before they\n"
    "change keys.\n"
    "\nOptions:\n"
    "  --kdf-t N     Argon2id passes for the new key, 1 to 64 (default: keep)\n"
    "  --kdf-m KIB   Argon2id memory in KiB, 8192 to 1048576 (default: keep)\n",
    0, CLI_OPT_KDF, cliCmdKeystorePasswd },
  { "status", "[--all] DB",
    "show the encryption status of a database",
    "Open DB through the tde VFS and print its tde_status row as \"column: value\"\n"
    "lines: format version, freshness checks, cipher, keystore and its status,\n"
    "master key id, data key version, page size, pages, authentication\n"
    "failures, rekey progress, and the replication role and lag when DB is\n"
    "shipped or a standby.  Columns without\n"
    "a value are left out.  Exit 3 when the key cannot be had, 4 when DB is not\n"
    "a readable sqlite-tde database.\n"
    "\nOptions:\n"
    "  --all   every column of tde_status (NULL ones too), for every schema,\n"
    "          the temp schema included\n",
    1, CLI_OPT_ALL, cliCmdStatus },
  { "encrypt", "SRC DST",
    "write an encrypted copy of a plaintext database",
    "Write an encrypted copy of the plaintext SQLite database SRC to DST.  SRC\n"
    "is opened read-only and never modified (a WAL-mode SRC is fine: the copy\n"
    "is a consistent snapshot).  The copy is made with VACUUM INTO a temporary\n"
    "file next to DST, checked (PRAGMA integrity_check and tde_verify), synced\n"
    "and renamed to DST, so DST appears only when complete.  DST must not exist.\n"
    "DST gets SRC's permission bits.  An SRC that is already encrypted is\n"
    "refused with a message saying so.\n",
    2, 0, cliCmdEncrypt },
  { "decrypt", "SRC DST",
    "write a plaintext copy of an encrypted database",
    "Write a plaintext copy of the encrypted database SRC to DST, the inverse of\n"
    "encrypt: VACUUM INTO a temporary file, PRAGMA integrity_check, sync, rename.\n"
    "DST must not exist; it is created with mode 0600 because it holds the data\n"
    "in the clear.  Note: the plaintext copy keeps 48 reserved bytes at the end of\n"
    "every page (SQLite cannot drop reserved bytes); it is an ordinary SQLite\n"
    "database that any SQLite reads, and it can be encrypted again as is.\n",
    2, 0, cliCmdDecrypt },
  { "verify", "DB",
    "authenticate every page and WAL frame of a database",
    "Authenticate every page of DB and every frame of its WAL with the data key\n"
    "(tde_verify) and print how many were checked.  If one fails, name the page\n"
    "or WAL frame and exit 4.\n",
    1, 0, cliCmdVerify },
  { "shell", "DB [sqlite3 args...]",
    "run the sqlite3 shell on an encrypted database",
    "Run the system sqlite3 shell with the tde extension loaded and DB opened\n"
    "through the tde VFS; further arguments go to sqlite3 unchanged (options,\n"
    "or SQL to run instead of reading stdin).  The extension is tde.so next to\n"
    "this program, or $SQLITE_TDE_EXTENSION.  An existing DB is opened once first\n"
    "so a keystore or key problem is reported clearly; a new DB is created by the\n"
    "shell (encrypted on its first write).  The shell opens the keystore\n"
    "itself: a password wallet whose configuration names no password source\n"
    "is asked for here, on the terminal, and that password (or password_env's)\n"
    "reaches the shell through a pipe, never its command line or environment\n"
    "(the password_env variable is removed from it).\n",
    1, CLI_OPT_PASSTHRU, cliCmdShell },
  { "keystore retire", "KEYID",
    "retire a master key (it still unwraps, never wraps)",
    "Mark master key KEYID retired: databases still wrapped by it keep opening,\n"
    "but it is never used to wrap again.  The current master key cannot be\n"
    "retired: run rotate-master-key first.  Keys are never deleted by this\n"
    "tool.\n",
    1, 0, cliCmdKeystoreRetire },
  { "rotate-master-key", "[DB...]",
    "create a new master key and re-wrap databases under it",
    "Create a new master key in the configured keystore and make it current,\n"
    "then re-wrap the data key of each DB under it.  Only each database's\n"
    "4 KiB header is rewritten (crash-safe: a kill at any instant leaves a\n"
    "database that opens with the old or the new master key); pages are not\n"
    "touched, so the time does not depend on the database size.  Databases\n"
    "not named are re-wrapped at their next write transaction.  Other\n"
    "connections may keep the databases open; a database that another\n"
    "connection is writing is skipped with a message (run again).  Old master\n"
    "keys are kept; retire them with 'keystore retire'.  Every DB is checked\n"
    "first (it must exist, be non-empty and open with the keystore): if one\n"
    "fails, nothing is changed and no key is created.\n",
    0, CLI_OPT_MANY, cliCmdRotate },
  { "rekey", "[--step N] DB",
    "re-encrypt every page under a new data key",
    "Make a new data key current and re-encrypt every page of DB under it, in\n"
    "steps of 1024 pages, each in its own short write transaction; then remove\n"
    "the old data key from the header.  Crash-safe and resumable: pages carry\n"
    "their key version, the old ciphertext of each step is journalled first,\n"
    "and running rekey again continues.  The database stays readable\n"
    "throughout.  WAL mode: readers never wait, writers wait at most one step;\n"
    "rollback-journal mode: each step holds an exclusive lock (a few ms).\n"
    "\nOptions:\n  --step N   pages per step (default 1024)\n",
    1, CLI_OPT_STEP, cliCmdRekey },
  { "upgrade", "[--to 2|3] DB", "move a database to a newer format version in place",
    "Move DB in place to format version 3, the version new databases get (or to 2 with\n"
    "--to 2, or when the configuration says format_version = 2 or 1).  From version 1, first\n"
    "to 2 (docs/FORMAT.md \"Upgrade from version 1\"): in WAL mode a TRUNCATE checkpoint first,\n"
    "then one header update under the write lock, audited; pages are not rewritten.  Then to\n"
    "format version 3, the page map inside the database file (\"Upgrade from version 2\"):\n"
    "every page moves in place, in synced batches recorded in the header, then DB-tdemap is\n"
    "deleted.  It needs the database alone (no other connection open).  Crash-safe and\n"
    "resumable: run it again, or the next writer finishes an interrupted move.  Audited.\n",
    1, CLI_OPT_TOVER, cliCmdUpgrade },
  { "reanchor", "DB", "accept DB's current state in its freshness anchor (a backup restored on purpose)",
    "Record DB's current state as its freshness anchor (freshness_anchor in the\n"
    "configuration; docs/FORMAT.md \"External anchor\"), although DB may be older\n"
    "than the anchor: the one way to open a backup restored on purpose.  Takes the\n"
    "write lock, writes the header's anchor counter and the anchor record, and\n"
    "the audit line `reanchor`.\n", 1, 0, cliCmdReanchor },
  { "remap", "DB", "accept DB's pages as they are: rebuild its page map (DB-tdemap missing or from another time)",
    "Drop DB's page map (format version 2, WAL mode; docs/FORMAT.md \"Page rollback:\n"
    "the page map\") so that the next WAL restart builds it again from the pages as\n"
    "they are.  The one way to open a database whose DB-tdemap is missing or from\n"
    "another time: a file copy made without it (copy DB, DB-wal and DB-tdemap\n"
    "together), or a promoted standby (standby --promote runs it).  Takes the\n"
    "write lock; writes the audit line `remap`.\n", 1, 0, cliCmdRemap },
  { "migrate-keystore", "--to CFG [--drop-old] DB...",
    "move databases to the keystore another configuration names",
    "Add a wrapping of each DB's data key under the current master key of the\n"
    "keystore CFG names, so that both the old and the new keystore open it (like\n"
    "Oracle's FILE|HSM configuration).  Then open the databases with CFG.  With\n"
    "--drop-old, also remove every wrapping not made by the new keystore (run\n"
    "it once the new keystore is in use).  Header-only, crash-safe.  Every DB\n"
    "is checked first; if one does not open, nothing is changed.\n",
    1, CLI_OPT_MANY | CLI_OPT_MIGRATE, cliCmdMigrate },
  { "bench", "[options]",
    "measure encryption's cost: workloads, conditions, reports",
    "Run the benchmark kit (sqlite-tde-bench next to this program): insert,\n"
    "delete-replenish, cold and warm scans, bounce, row-at-a-time and TPC-B-like\n"
    "workloads under plain SQLite, the wallet keystores and the sqlcipher peer,\n"
    "interleaved with a printed seed; writes report.md, report.html and\n"
    "results.json to bench-out/.  Every argument goes to the kit: see\n"
    "'sqlite-tde bench --help' for its options (--quick, --seconds, --repeats,\n"
    "--out, ...).  docs/PERFORMANCE.md explains the method.\n",
    0, CLI_OPT_PASSTHRU, cliCmdBench },
  { "ship", "--to HOST:PORT... DB",
    "ship committed WAL transactions, encrypted, to standbys",
    cliShipHelp, 0, CLI_OPT_PASSTHRU, cliCmdShip },
  { "standby", "--listen|--promote|--status",
    "apply shipped transactions without the key; promote; lag",
    cliStandbyHelp, 0, CLI_OPT_PASSTHRU, cliCmdStandby },
#ifdef TDE_HAVE_ARCHIVE
  { "archive", "--s3 S3ENV --sign-key KEY DB",
    "archive committed transactions, encrypted and signed, to an S3 bucket",
    cliArchiveHelp, 0, CLI_OPT_PASSTHRU, cliCmdArchive },
  { "restore", "--s3 S3ENV --db-id HEX --pubkey PEM (--list | OUT.db)",
    "rebuild a database from the keyless S3 archive, verified, without a key",
    cliRestoreHelp, 0, CLI_OPT_PASSTHRU, cliCmdRestore },
#endif
};

static void printCommandUsage(FILE *out, const CliCommand *pCmd){
  fprintf(out, "usage: sqlite-tde [--config CFG] %s%s%s\n", pCmd->zName,
          pCmd->zArgs[0] ? " " : "", pCmd->zArgs);
}

static void printUsage(FILE *out){
  size_t i;
  fprintf(out,
    "usage: sqlite-tde [--config CFG] COMMAND [ARGS]\n"
    "       sqlite-tde --help | --version\n"
    "       sqlite-tde COMMAND --help\n"
    "\n"
    "Transparent Data Encryption for SQLite: keystores and encrypted databases.\n"
    "\n"
    "Commands:\n");
  for(i=0; i<sizeof(aCommand)/sizeof(aCommand[0]); i++){
    char zLeft[96];
    snprintf(zLeft, sizeof(zLeft), "%s %s", aCommand[i].zName, aCommand[i].zArgs);
    if( strlen(zLeft)>32 ){
      fprintf(out, "  %s\n  %-32s %s\n", zLeft, "", aCommand[i].zSummary);
    }else{
      fprintf(out, "  %-32s %s\n", zLeft, aCommand[i].zSummary);
    }
  }
  fprintf(out,
    "\n"
    "Options:\n"
    "  --config CFG   configuration file naming the keystore (default:\n"
    "                 $SQLITE_TDE_CONFIG, then /etc/sqlite-tde/tde.conf)\n"
    "  --help, -h     show this help\n"
    "  --version      show versions\n"
    "\n"
    "Passwords are never taken on the command line: the configuration's\n"
    "password_file, password_env or password_fd supplies them, or they are\n"
    "read from the terminal without echo.\n"
    "\n"
    "Exit status:\n"
    "  0  success\n"
    "  1  the operation failed (a reason other than those below)\n"
    "  2  bad command line\n"
    "  3  no key: keystore missing or unavailable, wrong password or PIN,\n"
    "     master key not in the keystore\n"
    "  4  damaged: a page, WAL frame or header failed authentication, or the\n"
    "     file is not a readable sqlite-tde database (plaintext, foreign, empty)\n");
}

static void printCommandHelp(const CliCommand *pCmd){
  printCommandUsage(stdout, pCmd);
  printf("\n%s", pCmd->zHelp);
  if( pCmd->flags & CLI_OPT_AUTOLOGIN ){
    printf("\nOptions:\n  --auto-login   create an auto-login wallet (no password)\n");
  }
  printf("\nThe configuration is --config CFG, else $SQLITE_TDE_CONFIG, else\n"
         "/etc/sqlite-tde/tde.conf.\n");
}

static int usageError(const CliCommand *pCmd, const char *zFmt, ...)
  __attribute__((format(printf, 2, 3)));
static int usageError(const CliCommand *pCmd, const char *zFmt, ...){
  va_list ap;
  fprintf(stderr, "sqlite-tde: ");
  va_start(ap, zFmt);
  vfprintf(stderr, zFmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  if( pCmd ){
    printCommandUsage(stderr, pCmd);
    fprintf(stderr, "Try 'sqlite-tde %s --help'.\n", pCmd->zName);
  }else{
    printUsage(stderr);
  }
  return CLI_USAGE;
}

static void printVersion(void){
  printf("sqlite-tde %s (library %s, SQLite %s)\n", TDE_VERSION, tde_version(),
         sqlite3_libversion());
}

/* --config CFG: keep the absolute path so the URIs handed to SQLite and
** the child shell name the same file whatever their working directory. */
static int setConfig(Cli *pCli, const char *zArg){
  char *zReal;
  if( zArg==0 || zArg[0]==0 ) return usageError(0, "--config needs a file name");
  zReal = realpath(zArg, 0);
  snprintf(pCli->zConfigBuf, sizeof(pCli->zConfigBuf), "%s", zReal ? zReal : zArg);
  free(zReal);
  pCli->zConfig = pCli->zConfigBuf;
  return CLI_OK;
}

/*
** Parse the arguments of one command (argv[0] is its first argument).
** Returns CLI_OK, CLI_USAGE (message printed), or -1 after printing the
** command's help (exit 0).
*/
static int parseArgs(Cli *pCli, const CliCommand *pCmd, int argc, char **argv, CliArgs *pArgs){
  int i, bOptsDone = 0;
  memset(pArgs, 0, sizeof(*pArgs));
  pArgs->azPos = argv;
  for(i=0; i<argc; i++){
    const char *z = argv[i];
    if( (pCmd->flags & CLI_OPT_PASSTHRU) && pArgs->nPos==pCmd->nPos ){
      pArgs->azRest = &argv[i];
      pArgs->nRest = argc - i;
      break;
    }
    if( !bOptsDone && z[0]=='-' && z[1] ){
      if( strcmp(z, "--")==0 ){ bOptsDone = 1; continue; }
      if( strcmp(z, "--help")==0 || strcmp(z, "-h")==0 ){ printCommandHelp(pCmd); return -1; }
      if( strcmp(z, "--config")==0 ){
        if( i+1>=argc ) return usageError(pCmd, "--config needs a file name");
        if( setConfig(pCli, argv[++i]) ) return CLI_USAGE;
        continue;
      }
      if( strncmp(z, "--config=", 9)==0 ){
        if( setConfig(pCli, z+9) ) return CLI_USAGE;
        continue;
      }
      if( (pCmd->flags & CLI_OPT_MIGRATE) && strcmp(z, "--to")==0 ){
        char *zReal;
        if( i+1>=argc ) return usageError(pCmd, "--to needs a configuration file");
        zReal = realpath(argv[++i], 0);
        if( !zReal ) return usageError(pCmd, "--to %s: no such file", argv[i]);
        snprintf(pArgs->zToBuf, sizeof(pArgs->zToBuf), "%s", zReal);
        free(zReal);
        pArgs->zTo = pArgs->zToBuf;
        continue;
      }
      if( (pCmd->flags & CLI_OPT_TOVER) && strcmp(z, "--to")==0 ){
        if( i+1>=argc ) return usageError(pCmd, "--to needs a format version");
        i++;
        if( strcmp(argv[i], "2")!=0 && strcmp(argv[i], "3")!=0 ) return usageError(pCmd, "--to: format version 2 or 3");
        pArgs->iToVersion = argv[i][0] - '0';
        continue;
      }
      if( (pCmd->flags & CLI_OPT_STEP) && strcmp(z, "--step")==0 ){
        char *zEnd = 0;
        long n;
        if( i+1>=argc ) return usageError(pCmd, "--step needs a number of pages");
        n = strtol(argv[++i], &zEnd, 10);
        if( !zEnd || *zEnd || n<1 || n>65536 ) return usageError(pCmd, "--step: a number from 1 to 65536");
        pArgs->nStep = (int)n;
        continue;
      }
      if( (pCmd->flags & CLI_OPT_KDF) && (strcmp(z, "--kdf-t")==0 || strcmp(z, "--kdf-m")==0) ){
        int bT = z[6]=='t';
        char *zEnd = 0;
        unsigned long n;
        if( i+1>=argc ) return usageError(pCmd, "%s needs a number", z);
        n = strtoul(argv[++i], &zEnd, 10);
        if( !zEnd || *zEnd || argv[i][0]=='-' || (bT ? (n<1 || n>64) : (n<8192 || n>1048576)) ){
          return usageError(pCmd, bT ? "--kdf-t: a number of passes from 1 to 64"
                                     : "--kdf-m: KiB from 8192 to 1048576");
        }
        if( bT ) pArgs->kdfT = (uint32_t)n; else pArgs->kdfM = (uint32_t)n;
        continue;
      }
      if( (pCmd->flags & CLI_OPT_ALL) && strcmp(z, "--all")==0 ){
        pArgs->bAll = 1;
        continue;
      }
      if( (pCmd->flags & CLI_OPT_MIGRATE) && strcmp(z, "--drop-old")==0 ){
        pArgs->bDropOld = 1;
        continue;
      }
      if( (pCmd->flags & CLI_OPT_AUTOLOGIN) && strcmp(z, "--auto-login")==0 ){
        pArgs->bAutoLogin = 1;
        continue;
      }
      if( strncmp(z, "--password", 10)==0 ){
        return usageError(pCmd, "%s: passwords are never taken on the command line; use "
                          "password_file or password_env in the configuration, or the prompt", z);
      }
      return usageError(pCmd, "unknown option '%s'", z);
    }
    /* Positionals are gathered at the front of argv (options were skipped). */
    if( pArgs->nPos>=pCmd->nPos && !(pCmd->flags & CLI_OPT_MANY) ){
      return usageError(pCmd, "unexpected argument '%s'", z);
    }
    argv[pArgs->nPos++] = (char*)z;
  }
  if( pArgs->nPos<pCmd->nPos ) return usageError(pCmd, "missing argument");
  if( (pCmd->flags & CLI_OPT_MIGRATE) && !pArgs->zTo ) return usageError(pCmd, "--to CFG is required");
  return CLI_OK;
}

static const CliCommand *findCommand(const char *zName){
  size_t i;
  for(i=0; i<sizeof(aCommand)/sizeof(aCommand[0]); i++){
    if( strcmp(aCommand[i].zName, zName)==0 ) return &aCommand[i];
  }
  return 0;
}

static void printKeystoreHelp(FILE *out){
  fprintf(out,
    "usage: sqlite-tde [--config CFG] keystore create [--auto-login]\n"
    "       sqlite-tde [--config CFG] keystore status\n"
    "       sqlite-tde [--config CFG] keystore list\n"
    "       sqlite-tde [--config CFG] keystore retire KEYID\n"
    "       sqlite-tde [--config CFG] keystore seal | unseal\n"
    "       sqlite-tde [--config CFG] keystore passwd [--kdf-t N] [--kdf-m KIB]\n"
    "\n"
    "Manage the keystore that holds the master keys (a wallet, a PKCS#11 token\n"
    "or a KMIP key manager, as the configuration says).  See\n"
    "'sqlite-tde keystore SUBCOMMAND --help'.\n");
}

/* Find the command argv[0] (and argv[1] for "keystore X"); *pnUsed gets
** how many words named it.  Returns CLI_OK, CLI_USAGE or -1 (help shown). */
static int resolveCommand(int argc, char **argv, const CliCommand **ppCmd, int *pnUsed){
  char zName[64];
  *ppCmd = 0;
  if( strcmp(argv[0], "keystore")==0 ){
    if( argc<2 ){
      fprintf(stderr, "sqlite-tde: keystore needs a subcommand\n");
      printKeystoreHelp(stderr);
      return CLI_USAGE;
    }
    if( strcmp(argv[1], "--help")==0 || strcmp(argv[1], "-h")==0 ){
      printKeystoreHelp(stdout);
      return -1;
    }
    snprintf(zName, sizeof(zName), "keystore %.40s", argv[1]);
    *pnUsed = 2;
  }else{
    snprintf(zName, sizeof(zName), "%.60s", argv[0]);
    *pnUsed = 1;
  }
  *ppCmd = findCommand(zName);
  if( *ppCmd==0 ){
    if( *pnUsed==2 ){
      fprintf(stderr, "sqlite-tde: unknown keystore subcommand '%s'\n", argv[1]);
      printKeystoreHelp(stderr);
      return CLI_USAGE;
    }
    return usageError(0, "unknown command '%s'", argv[0]);
  }
  return CLI_OK;
}

/* Core dumps would hold keys and passwords: none, from this process or a
** debugger attaching to it. */
static void disableCoreDumps(void){
  struct rlimit rl = { 0, 0 };
  if( setrlimit(RLIMIT_CORE, &rl)!=0 ) cliErr("warning: cannot disable core dumps");
  if( prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)!=0 ) cliErr("warning: cannot mark the process non-dumpable");
}

/* Global options up to the command name.  *piCmd gets its index.
** Returns CLI_OK, CLI_USAGE, or -1 when --help/--version was handled. */
static int parseGlobal(Cli *pCli, int argc, char **argv, int *piCmd){
  int i;
  for(i=1; i<argc; i++){
    const char *z = argv[i];
    if( z[0]!='-' ) break;
    if( strcmp(z, "--help")==0 || strcmp(z, "-h")==0 ){ printUsage(stdout); return -1; }
    if( strcmp(z, "--version")==0 || strcmp(z, "-V")==0 ){ printVersion(); return -1; }
    if( strcmp(z, "--config")==0 ){
      if( i+1>=argc ) return usageError(0, "--config needs a file name");
      if( setConfig(pCli, argv[++i]) ) return CLI_USAGE;
      continue;
    }
    if( strncmp(z, "--config=", 9)==0 ){
      if( setConfig(pCli, z+9) ) return CLI_USAGE;
      continue;
    }
    return usageError(0, "unknown option '%s'", z);
  }
  if( i>=argc ) return usageError(0, "no command given");
  *piCmd = i;
  return CLI_OK;
}

int main(int argc, char **argv){
  Cli cli;
  CliArgs args;
  const CliCommand *pCmd = 0;
  int iCmd = 0, nUsed = 0, rc;

  disableCoreDumps();
  memset(&cli, 0, sizeof(cli));
  cli.bProgress = isatty(STDERR_FILENO);
  rc = parseGlobal(&cli, argc, argv, &iCmd);
  if( rc ) return rc<0 ? CLI_OK : rc;
  rc = resolveCommand(argc-iCmd, argv+iCmd, &pCmd, &nUsed);
  if( rc ) return rc<0 ? CLI_OK : rc;
  rc = parseArgs(&cli, pCmd, argc-iCmd-nUsed, argv+iCmd+nUsed, &args);
  if( rc ) return rc<0 ? CLI_OK : rc;

  tde_set_log(cliLogCallback, &cli);
  if( tde_register(0)!=TDE_OK ){
    cliErr("cannot register the tde VFS: %s", tde_last_error());
    return CLI_FAIL;
  }
  rc = pCmd->xRun(&cli, &args);
  if( rc==CLI_FAIL && cliFailCode() ) rc = cliFailCode();
  return rc;
}
