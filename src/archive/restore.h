/*
** Restore from the keyless archive (docs/ARCHIVE.md "Restore"): rebuild an
** encrypted database from the base copies and segments an archiver left in
** an S3 bucket, verifying every record's chain and the signed heads with
** the primary's pinned public key, and applying the records keylessly as
** a standby does (tdeRecValidate, tdeApplyRecord).
**
** Part of src/archive/ (static library tde_archive, linked by the CLI and
** the tests): needs S3 read credentials and the public key, never a data
** key, a master key or a keystore.  Must never: leave a half-written output
** (OUT.part, synced, then renamed without replacing), overwrite an existing
** file, apply a record that no verified signed head covers.
*/
#ifndef TDE_ARCHIVE_RESTORE_H
#define TDE_ARCHIVE_RESTORE_H

#include "archive/s3.h"

#include <stdint.h>

struct evp_pkey_st;

#define TDE_RESTORE_LATEST 0      /* the newest restorable point */
#define TDE_RESTORE_SEQ    1      /* the state after sequence number target */
#define TDE_RESTORE_TIME   2      /* the newest state captured at or before target (ms since the epoch) */

typedef struct TdeRestoreOpts {
  const TdeS3Config *pS3;
  const char *zPrefix;        /* folder in the bucket ("" or NULL: none) */
  uint8_t aDbid[16];          /* the database whose history is restored */
  int bHistory;               /* aHistory names the history (else: the only one) */
  uint8_t aHistory[16];
  const char *zPubKey;        /* the primary's Ed25519 public key(s): PATH[,PATH] (PEM) */
  int eTarget;                /* TDE_RESTORE_* */
  uint64_t target;
  const char *zOut;           /* the database to create (must not exist) */
} TdeRestoreOpts;

/* What a restore did. */
typedef struct TdeRestoreResult {
  uint8_t aHistory[16];
  uint64_t baseSeq;           /* the base copy used */
  uint64_t baseCapture;       /* its capture time (ms) */
  uint64_t seq;               /* the sequence the output holds */
  uint64_t tCapture;          /* its capture time (ms) */
  uint64_t nSegment;          /* segments read */
  uint64_t nRecord;           /* transactions applied */
  uint64_t nBytes;            /* bytes downloaded */
  uint64_t archiveEnd;        /* the newest sequence of the history in the archive */
} TdeRestoreResult;

/*
** Restore into pOpt->zOut.  TDE_EXISTS if it (or its .part) exists;
** TDE_AUTH for anything that does not verify (a signature, the chain, an
** object of another database or history, a name its content contradicts);
** TDE_NOTFOUND for a target the archive cannot reach (before the oldest
** base copy, past a gap, past its end); the detail in tde_last_error().
** Nothing is left at zOut unless TDE_OK.
*/
int tdeRestoreRun(const TdeRestoreOpts *pOpt, TdeRestoreResult *pRes);

/*
** The restorable points of every history of the database (pOpt's target
** and output are ignored), verified as a restore would verify them: one
** line of text per history, base copy and run of segments, through xLine.
*/
int tdeRestoreList(const TdeRestoreOpts *pOpt, void (*xLine)(void *pArg, const char *zLine), void *pArg);

/* Load PATH[,PATH] (at most 2 Ed25519 public keys, PEM) into apKey. */
int tdeRestoreKeys(const char *zList, struct evp_pkey_st **apKey, int *pnKey);

#endif /* TDE_ARCHIVE_RESTORE_H */
