/*
** sqlite-tde archive: continuous, keyless archive of an encrypted WAL
** database to an S3 bucket (docs/ARCHIVE.md).  Part of the archive library
** (libsqlite-tde-archive, static; it links libcurl), not of libsqlite-tde
** or the loadable extension: only programs that archive link it.
*/
#ifndef SQLITE_TDE_ARCHIVE_H
#define SQLITE_TDE_ARCHIVE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
** Options of tde_archive_run; zero means the default.  nSize: set by the
** caller to sizeof(tde_archive_options).
*/
typedef struct tde_archive_options {
  uint32_t nSize;
  const char *zS3Env;         /* KEY=VALUE file, mode 0600: S3_ENDPOINT, S3_REGION, S3_BUCKET,
                              ** optional S3_CA_FILE and S3_PREFIX, AWS_ACCESS_KEY_ID,
                              ** AWS_SECRET_ACCESS_KEY; NULL: the same variables from the
                              ** environment of this process */
  const char *zPrefix;        /* object name prefix (overrides S3_PREFIX); "" none */
  const char *zSignKey;       /* Ed25519 private key, PEM, mode 0600 (else repl_sign_key) */
  const char *zReplConfig;    /* replication configuration (with standbys, or for repl_sign_key) */
  unsigned replFlags;         /* TDE_REPL_* for the standbys */
  const char *const *azTo;    /* standbys fed from the same spool, or none */
  int nTo;
  int nCycleMs;               /* capture interval (default 50) */
  uint32_t segTxns;           /* a segment closes after this many transactions (default 1000) */
  uint64_t segBytes;          /* ... or this many bytes of records (default 16 MiB) */
  uint32_t segMs;             /* ... or when its oldest transaction is this old (default 10000) */
  uint64_t baseEveryBytes;    /* a new base copy after this many bytes of segments (default 1 GiB) */
  uint64_t baseEveryMs;       /* ... or after this interval (default 86400000: a day) */
  uint64_t maxSpool;          /* spool bytes kept for an unreachable bucket (default 1 GiB) */
  /* Retention (docs/ARCHIVE.md "Retention"), after each base copy and by tde_archive_prune. */
  uint32_t retainBases;       /* keep the newest N base copies (0: no count rule) */
  uint64_t retainAgeMs;       /* keep every point of the last N ms (0: no age rule) */
  const char *zDbId;          /* tde_archive_prune: the database id, 32 hex digits (NULL: zDb's header) */
  int bDryRun;                /* tde_archive_prune: list what would go, delete nothing */
} tde_archive_options;

/*
** Run the shipper of zDb (no keystore, no key: zConfig is ignored, kept
** for compatibility) with the archive as a destination, until *pbStop.
** Returns TDE_OK once stopped, or the error that stopped it.
*/
int tde_archive_run(const char *zDb, const char *zConfig, const tde_archive_options *pOpt, volatile int *pbStop);

/*
** One retention pass over the archive of a database (pOpt: the bucket's
** settings, zPrefix, retainBases and/or retainAgeMs, zDbId, bDryRun),
** without running the archiver and without any key: the database id is
** pOpt->zDbId or read from the plaintext header of zDb (then zDb may be
** NULL otherwise).  xLine (may be NULL) gets one line per object deleted
** (or that would be) and a summary; with zDb, a prune that deleted
** something appends one "archive_prune" line to zDb-tdeship-audit.
*/
int tde_archive_prune(const char *zDb, const tde_archive_options *pOpt,
                      void (*xLine)(void *pArg, const char *zLine), void *pArg);

#ifdef __cplusplus
}
#endif
#endif /* SQLITE_TDE_ARCHIVE_H */
