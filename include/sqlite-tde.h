/*
** sqlite-tde public API: Transparent Data Encryption for SQLite.
**
** sqlite-tde is a VFS shim named "tde" that encrypts every file SQLite
** writes with AES-256-GCM.  Each database has a random data key (DEK),
** stored only wrapped by master keys that live in a keystore (a password
** or auto-login wallet, a PKCS#11 token, a KMIP key manager).
**
** Applications use plain SQL.  This header is only for what a C program
** calls beyond that: registering the VFS when linking statically, opening a
** keystore with a password, creating keystores, status and verification.
** Everything here returns 0 (TDE_OK) on success or a tde_rc code; the
** detailed message of the last failure on the calling thread is
** tde_last_error().
**
** The library never prints.  Messages go to sqlite3_log() and to the
** callback set with tde_set_log().  It never logs or returns key bytes,
** passwords or PINs.
*/
#ifndef SQLITE_TDE_H
#define SQLITE_TDE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(TDE_BUILDING)
#  define TDE_API __attribute__((visibility("default")))
#else
#  define TDE_API
#endif

#define TDE_VERSION        "0.1.0"
#define TDE_VERSION_NUMBER 1000          /* major*1000000 + minor*1000 + patch */

/* Name of the VFS this library registers. */
#define TDE_VFS_NAME "tde"

/* Sizes, as macros and as functions (the functions answer for the library
** actually linked, the macros for the header compiled against). */
#define TDE_KEY_BYTES      32            /* AES-256 data and master keys */
#define TDE_RESERVE_BYTES  48            /* per-page trailer SQLite reserves */
#define TDE_HEADER_BYTES   8192          /* header region before page 1 */
#define TDE_KEYID_MAX      128           /* longest master key id, bytes */

TDE_API const char *tde_version(void);
TDE_API int tde_version_number(void);
TDE_API int tde_reserve_bytes(void);
TDE_API int tde_header_bytes(void);

/*
** Result codes.  The numbers never change once released; retired codes
** keep their slot.  They do not collide with SQLite's codes because they
** are never returned through SQLite: the VFS maps them (see docs/FORMAT.md).
*/
typedef enum tde_rc {
  TDE_OK            = 0,
  TDE_ERROR         = 1,   /* generic failure */
  TDE_NOMEM         = 2,   /* out of memory */
  TDE_IO            = 3,   /* read, write or sync failed */
  TDE_AUTH          = 4,   /* authentication tag mismatch: tampered or wrong key */
  TDE_BADPASSWORD   = 5,   /* keystore password wrong */
  TDE_NOKEYSTORE    = 6,   /* keystore missing or cannot be opened */
  TDE_NOKEY         = 7,   /* master key not in the keystore */
  TDE_CONFIG        = 8,   /* configuration file invalid */
  TDE_FORMAT        = 9,   /* not an sqlite-tde file, or unsupported format */
  TDE_PLAINTEXT     = 10,  /* a plaintext SQLite database where ciphertext was expected */
  TDE_UNSUPPORTED   = 11,  /* operation or parameter not supported */
  TDE_EXISTS        = 12,  /* destination already exists */
  TDE_MISUSE        = 13,  /* API called wrongly */
  TDE_RANGE         = 14,  /* value out of range, buffer too small */
  TDE_CRYPTO        = 15,  /* the crypto library failed */
  TDE_NOTFOUND      = 16,  /* named object not found */
  TDE_LOCKED        = 17   /* another connection holds a conflicting lock */
} tde_rc;

/* Static text for a result code. */
TDE_API const char *tde_errstr(int rc);

/* Detailed message of the last failure on this thread ("" if none).  Valid
** until the next sqlite-tde call on this thread. */
TDE_API const char *tde_last_error(void);

/* Log callback: level is one of TDE_LOG_*; msg never holds secrets. */
#define TDE_LOG_ERROR   1
#define TDE_LOG_WARNING 2
#define TDE_LOG_INFO    3
typedef void (*tde_log_fn)(void *pArg, int level, const char *zMsg);
TDE_API void tde_set_log(tde_log_fn xLog, void *pArg);

/*
** Register the "tde" VFS over the current default VFS and arrange for
** every new connection to get the tde_status table and SQL functions.  If
** makeDefault is non-zero, "tde" becomes the default VFS.  Safe to call
** more than once.  (The loadable extension does this in sqlite3_tde_init;
** set SQLITE_TDE_DEFAULT_VFS=1 in the environment to make it the default
** there, for hosts that cannot pass a vfs= URI parameter.)
*/
TDE_API int tde_register(int makeDefault);

/*
** Keystores.  zConfig is the path of a configuration file (see README);
** NULL means the default search: $SQLITE_TDE_CONFIG, then
** /etc/sqlite-tde/tde.conf.
**
** tde_keystore_open() opens the keystore named by the configuration for
** this process, using zPassword when not NULL (otherwise the password
** source the configuration names, if any), and keeps it open: databases
** opened later with the same configuration use it without asking again.
** The password is copied into locked memory only for the duration of the
** call and wiped.  SQL forms, for hosts without a C API:
** SELECT tde_keystore_open(config, password) and
** SELECT tde_keystore_open_fd(config, fd) (the password read from fd).
*/
TDE_API int tde_keystore_open(const char *zConfig, const char *zPassword);
TDE_API int tde_keystore_close(const char *zConfig);

/* Create a new keystore as the configuration describes, with one master
** key.  Fails with TDE_EXISTS if it exists.  zPassword NULL: the
** configuration's password source, or auto-login if it names none. */
TDE_API int tde_keystore_create(const char *zConfig, const char *zPassword,
                                char *zKeyIdOut, size_t nKeyIdOut);

/* Change the password of a password wallet: zOldPassword (NULL: the
** configuration's password source) must open it; the master keys are
** written again under zNewPassword with a new random salt and, when
** kdfT / kdfMKiB are not 0, a new Argon2id cost (passes 1..64, memory
** 8192..1048576 KiB; 0 keeps the wallet's).  Crash-safe (the old or the
** new wallet, never half of one); afterwards the old password fails.
** Audited as keystore_passwd.  A password_file the configuration names is
** not changed: update it.  TDE_UNSUPPORTED for auto-login wallets and other
** keystores. */
TDE_API int tde_keystore_passwd(const char *zConfig, const char *zOldPassword,
                                const char *zNewPassword, uint32_t kdfT, uint32_t kdfMKiB);

/*
** Structs the library fills (tde_keystore_info, tde_repl_info) may grow at
** their end in a later version, as sqlite3_vfs does.  Their first field,
** nSize, is set by the caller to the size of the struct it passes,
** sizeof(tde_keystore_info) or sizeof(tde_repl_info).  The library writes
** no byte beyond nSize: it fills the fields that fit and leaves the rest
** alone.  A size smaller than the first layout's (TDE_KEYSTORE_INFO_SIZE_V1,
** TDE_REPL_INFO_SIZE_V1), 0 included, is refused with TDE_MISUSE before
** anything is written.
*/

/* What tde_keystore_status() reports. */
typedef struct tde_keystore_info {
  uint32_t nSize;          /* set by the caller: sizeof(tde_keystore_info) */
  char zType[16];          /* "wallet", "pkcs11", "kmip", "command" */
  char zStatus[32];        /* OPEN, CLOSED, OPEN_NO_MASTER_KEY, NOT_AVAILABLE */
  char zLocation[512];     /* wallet path, module, server */
  char zCurrentKey[TDE_KEYID_MAX + 1];  /* master key used for new databases */
  int  nKeys;              /* master keys held */
  int  bAutoLogin;         /* opens without a password */
} tde_keystore_info;
#define TDE_KEYSTORE_INFO_SIZE_V1 (offsetof(tde_keystore_info, bAutoLogin) + sizeof(int))
TDE_API int tde_keystore_status(const char *zConfig, tde_keystore_info *pInfo);

/* List the master keys of a keystore: one callback per key.  Status is
** "ACTIVE" or "RETIRED"; created is a Unix time. */
typedef int (*tde_key_cb)(void *pArg, const char *zKeyId, int64_t created,
                          const char *zStatus);
TDE_API int tde_keystore_list(const char *zConfig, tde_key_cb xCb, void *pArg);

/* Create a new master key and make it current: the first step of a
** rotation (databases keep their old wrapping until rewrapped).  The new
** id goes to zKeyIdOut if not NULL, which then needs TDE_KEYID_MAX+1
** bytes.  Audited as master_key_create. */
TDE_API int tde_keystore_new_key(const char *zConfig, char *zKeyIdOut, size_t nKeyIdOut);

/* Retire master key zKeyId: it still unwraps data keys it wrapped, but
** never wraps new ones.  The current key is refused (TDE_MISUSE): create
** a new key first.  TDE_NOKEY if the keystore does not hold it.  Audited
** as master_key_retire. */
TDE_API int tde_keystore_retire(const char *zConfig, const char *zKeyId);

/* bSeal 1: seal the auto-login wallet's key with this machine's TPM 2.0
** (the configuration must say wallet_seal = tpm2; wallet_tpm_pcrs,
** wallet_tpm_parent and wallet_tpm_tcti as needed): afterwards the file
** holds only the sealed key and opens only with this TPM.  bSeal 0: turn
** a sealed wallet back into a plain auto-login wallet (for a planned
** hardware move; needs the TPM).  Master keys are unchanged.  Crash-safe
** (new file renamed into place), audited as keystore_seal/keystore_unseal. */
TDE_API int tde_wallet_seal(const char *zConfig, int bSeal);

/*
** Verify: authenticate both header slots, every page of the database file
** zSchema ("main" when NULL) of the open connection db, and every frame of
** its WAL if one exists, and (format versions 2 and 3 in WAL mode) that every
** page whose newest copy is in the database file is the one its page map
** records, as a read would check: an older authentic copy put back is
** TDE_AUTH with that page as *pBadPage.  Reports the number of pages and
** frames checked and where the first damage is through *pBadPage: 0 none;
** n > 0 database page n; TDE_VERIFY_WAL_HEADER; TDE_VERIFY_WAL_FRAME(k) for WAL frame k;
** TDE_VERIFY_HEADER_SLOT(s) for header slot s (0 or 1).  Returns TDE_OK,
** TDE_AUTH, or another code.
** xProgress, if not NULL, is called with (done, total) now and then; a
** non-zero return stops the scan with TDE_ERROR.
*/
#define TDE_VERIFY_WAL_HEADER      (-1)
#define TDE_VERIFY_WAL_FRAME(k)    (-1 - (int64_t)(k))
#define TDE_VERIFY_HEADER_SLOT(s)  (-1000 - (int64_t)(s))
struct sqlite3;
typedef int (*tde_progress_fn)(void *pArg, int64_t nDone, int64_t nTotal);
TDE_API int tde_verify(struct sqlite3 *db, const char *zSchema,
                       int64_t *pnChecked, int64_t *pBadPage,
                       tde_progress_fn xProgress, void *pArg);

/*
** Key lifecycle on an open database (each runs in its own write
** transaction, BEGIN IMMEDIATE: it fails with TDE_LOCKED, changing nothing,
** when another connection is writing; and with TDE_MISUSE inside an open
** transaction).  Both rewrite only the database header.
**
** tde_db_rewrap: wrap the data key under the current master key of the
** database's keystore (after tde_keystore_new_key) and drop wrappings by
** that keystore's older master keys.  Databases not rewrapped explicitly
** are rewrapped at their next write transaction.
**
** tde_db_migrate: add a wrapping under the current master key of the
** keystore zNewConfig names (both then open the database); with bDropOld,
** also remove every wrapping not made by that keystore.  Afterwards open
** the database with zNewConfig.
*/
TDE_API int tde_db_rewrap(struct sqlite3 *db, const char *zSchema);
TDE_API int tde_db_migrate(struct sqlite3 *db, const char *zSchema, const char *zNewConfig,
                           int bDropOld);

/*
** tde_db_rekey: re-encrypt every page under a new data key.  Starts (or
** resumes) a rekey, then rewrites up to nPagesPerStep pages (default 1024
** when < 1) per short write transaction until none is left under the old
** key, then removes the old key from the header.  Crash-safe and
** resumable: run it again after any interruption.  In WAL mode readers
** keep working throughout and writers wait at most one step; in rollback
** mode each step holds an EXCLUSIVE lock.  xProgress(done, total) after
** each step; returning non-zero pauses the rekey (TDE_ERROR).  When the
** configuration's new databases are format version 3, the finish then
** moves an older database to version 3 (as tde_db_upgrade_to(db, zSchema,
** 3)); the rekey succeeds whatever the move does: its outcome is in the
** audit log (`upgrade`), and a move left or stopped is finished by
** tde_db_upgrade_to or the next writer.
*/
TDE_API int tde_db_rekey(struct sqlite3 *db, const char *zSchema, int nPagesPerStep,
                         tde_progress_fn xProgress, void *pArg);

/*
** tde_db_upgrade: move a database in place to the format version new
** databases get under its configuration: 3 (as tde_db_upgrade_to(db,
** zSchema, 3) below), or 2 when the configuration says format_version = 2
** or 1.  From version 1, first to version 2 (freshness checks,
** docs/FORMAT.md "Upgrade from version 1"): in WAL mode a TRUNCATE
** checkpoint first, then one header update under the write lock, audited.
** Crash-safe and resumable; TDE_OK without change if already there;
** TDE_LOCKED while readers keep the WAL from being emptied.
*/
TDE_API int tde_db_upgrade(struct sqlite3 *db, const char *zSchema);

/*
** tde_db_upgrade_to: as tde_db_upgrade, to format version iVersion (2 or
** 3).  Version 3 (docs/FORMAT.md "Upgrade from version 2")
** moves every page in place to make room for the page map inside the
** database file, in synced batches recorded in the header: crash-safe and
** resumable (a writer that finds a move unfinished finishes it), audited;
** DB-tdemap is deleted at the end.  Needs the database alone (TDE_LOCKED
** while another connection has it open).  tde_db_upgrade goes to the
** version new databases get (format_version in the configuration: 3
** unless it says 2 or 1).
*/
TDE_API int tde_db_upgrade_to(struct sqlite3 *db, const char *zSchema, int iVersion);

/*
** tde_db_reanchor: accept the current state of the database at zDbPath as
** fresh: record it in the freshness anchor the configuration zConfig
** (NULL: $SQLITE_TDE_CONFIG or the default) names, although the database
** may be older than the anchor (a backup restored on purpose).  Opens the
** database itself without the anchor comparison, under SQLite's write
** lock, and writes the audit line `reanchor`.  *pnOld / *pnNew (may be
** NULL) receive the anchor counter before and after.  docs/FORMAT.md
** "External anchor".
*/
TDE_API int tde_db_reanchor(const char *zDbPath, const char *zConfig,
                            unsigned long long *pnOld, unsigned long long *pnNew);

/*
** tde_db_remap: accept the pages of the database at zDbPath as they are:
** drop its page map (format versions 2 and 3, WAL mode; docs/FORMAT.md
** "Page rollback: the page map"), which the next WAL restart builds again
** from the file.  The one way to open a database whose pages disagree with
** its map (version 3: the map inside the file; version 2: DB-tdemap, also
** when it is missing or from another time, a promoted standby, a file copy
** made without it): it accepts whatever pages are there.
** Opens the database itself with the map check off, under SQLite's write
** lock, and writes the audit line `remap`.
*/
TDE_API int tde_db_remap(const char *zDbPath, const char *zConfig);

/*
** Encrypted standby (README "Standby", docs/FORMAT.md "Standby").  The
** primary's committed WAL transactions are shipped as the ciphertext they
** are; the standby applies them to its copy without any key.
**
** tde_ship_run_v2: capture committed transactions of the WAL-mode database
** zDb (SQLite's locks taken on its WAL index through the VFS below tde:
** no keystore, no key; zConfig is ignored, kept for compatibility) every
** nCycleMs milliseconds
** (<= 0: 50) into the spool zDb-tdeship, and send them to each standby in
** azTo[0..nTo) ("host:port").  Runs until *pbStop becomes non-zero (may be
** NULL: forever); returns TDE_OK then, or the error that stopped it.
**
** tde_standby_run_v2: listen on zListen ("host:port"), receive transactions
** and apply them to the copy zDb (created from a base copy the first time)
** until *pbStop becomes non-zero.  Never needs a key.  Only one primary
** database is accepted per copy; another is refused with a message.
**
** Transport security: zReplConfig names the replication configuration file
** (repl_ca, repl_cert, repl_key and the optional repl_* keys); every
** connection then runs mutual TLS.  Without one, flags must hold
** TDE_REPL_INSECURE_NO_TLS (plaintext, for a test setup; logged as a
** warning and shown in the status): with neither, both refuse to run.
** TDE_REPL_ACCEPT_REWIND (standby): accept once a primary whose history
** goes back from what this copy applied (audited).  TDE_REPL_SYNC (ship):
** a commit returns once a standby acknowledged it, or after
** repl_sync_timeout_ms (then async until the standbys catch up).
**
** tde_standby_promote: with no standby process running on zDb, apply the
** last complete transaction it received and make zDb an ordinary database
** (its state files removed); TDE_LOCKED while a standby runs.
**
** Progress and problems go to the log (tde_set_log); nothing is printed.
*/
#define TDE_REPL_INSECURE_NO_TLS  0x01
#define TDE_REPL_ACCEPT_REWIND    0x02
#define TDE_REPL_SYNC             0x04    /* ship: protection mode sync (as repl_mode = sync) */
TDE_API int tde_ship_run_v2(const char *zDb, const char *zConfig, const char *zReplConfig, unsigned flags,
                            const char *const *azTo, int nTo, int nCycleMs, volatile int *pbStop);
TDE_API int tde_standby_run_v2(const char *zDb, const char *zListen, const char *zReplConfig, unsigned flags,
                               volatile int *pbStop);
TDE_API int tde_standby_promote(const char *zDb);

/*
** Replication status of zDb from its state files (no key needed; the
** tde_status table shows the same columns): role "primary" (a shipper runs
** or ran for it), "standby" (a standby copy) or "none".  Primary: shipped =
** last sent to the standbys, acked = lowest acknowledged (a standby
** acknowledges after applying); transport lag = captured but unacknowledged.
** Standby: received and applied sequence numbers; transport lag = what the
** primary last said it had beyond what arrived; apply lag = received but not
** applied.  Lags in transactions, bytes of spool records, and seconds
** between the capture times on the primary.  zState: streaming, waiting,
** silent (connected, nothing heard for 10 s), base copy, disconnected,
** refused, running, stopped.
*/
typedef struct tde_repl_info {
  uint32_t nSize;             /* set by the caller: sizeof(tde_repl_info) */
  char zRole[16];
  char zState[64];
  char zPeer[512];
  int64_t shippedSeq, ackedSeq, receivedSeq, appliedSeq;
  int64_t transportLagTxn, transportLagBytes;
  double transportLagSec;
  int64_t applyLagTxn, applyLagBytes;
  double applyLagSec;
  int64_t updatedMs;          /* when the state file was written (ms since the epoch) */
  /* Warnings for the operator, "" if none: "insecure-no-tls", "primary
  ** silent for N s", "diverged: ...", the last refused peer and why. */
  char zNote[512];
} tde_repl_info;
#define TDE_REPL_INFO_SIZE_V1 (offsetof(tde_repl_info, zNote) + sizeof(((tde_repl_info *)0)->zNote))
TDE_API int tde_repl_status(const char *zDb, tde_repl_info *pInfo);

/* Loadable-extension entry point (".load tde"). */
struct sqlite3_api_routines;
TDE_API int sqlite3_tde_init(struct sqlite3 *db, char **pzErrMsg,
                             const struct sqlite3_api_routines *pApi);

#ifdef __cplusplus
}
#endif
#endif /* SQLITE_TDE_H */
