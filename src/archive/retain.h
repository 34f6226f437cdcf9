/*
** Retention of the keyless archive (docs/ARCHIVE.md "Retention"): which
** base copies and segments of a database's archive may go, by count
** (the newest K base copies) and by age (every point of the last D), and
** their deletion, segments first, then base copies.
**
** Used by the archiver after each base copy it uploads (archive.c, one
** call) and by `sqlite-tde archive --prune` (tde_archive_prune).  Needs
** only the bucket: no key of any kind, no database.  Reads object names
** (a listing) and, for the age rule, the capture times in the headers of
** base copies and segments; verifies no signature (a prune that trusted a
** forged time would keep more or delete more of what whoever can write to
** the bucket can delete anyway).
**
** Must never delete: the newest base copy of the current history, a
** segment whose last record is at or after the oldest kept base copy, any
** object of the current history not below that base, or a history the
** rules do not let go whole.  Deletes a segment before the base copy that
** reaches it, so a crash midway never leaves a segment whose base is gone
** while the segment is still needed.
*/
#ifndef TDE_ARCHIVE_RETAIN_H
#define TDE_ARCHIVE_RETAIN_H

#include "archive/s3.h"

#include <stdint.h>

struct TdeShipLink;

typedef struct TdeRetainOpts {
  uint32_t nBases;            /* keep the newest nBases base copies (0: no count rule) */
  uint64_t ageMs;             /* keep every point of the last ageMs ms (0: no age rule) */
  int bDryRun;                /* say what would go; delete nothing */
  uint64_t nowMs;             /* the time the window ends (0: now) */
} TdeRetainOpts;

/* What a prune deleted (or, dry run, would delete). */
typedef struct TdeRetainResult {
  uint64_t nBase, nSeg;       /* objects */
  uint64_t nHistWhole;        /* histories deleted whole */
  char zDetail[700];          /* ranges per history, for the audit line */
} TdeRetainResult;

/*
** Prune the archive of database aDbid under zPrefix.  aCurrent: the
** current history (the archiver's own); NULL: the history whose newest
** point is the newest (one download of its last segment per history when
** there are several).  xLine (may be NULL) gets one line per object
** deleted or, dry run, that would be.  At least one rule must be given
** (TDE_MISUSE).  Stops at the first failed deletion (what was deleted
** before stays deleted; a later prune finishes the job).
*/
int tdeRetainPrune(TdeS3 *pS3, const char *zPrefix, const uint8_t *aDbid, const uint8_t *aCurrent,
                   const TdeRetainOpts *pOpt, void (*xLine)(void*, const char*), void *pArg,
                   TdeRetainResult *pRes);

/*
** The archiver's call after a base copy zKey (captured at tCapture) is
** stored: remember its time (no download to learn it later), prune with
** the archiver's rules, and write one audit line ("archive_prune") when
** something went.  Failures are logged and otherwise ignored: retention
** never stops the archive.
*/
void tdeRetainAfterBase(struct TdeShipLink *pLink, TdeS3 *pS3, const char *zPrefix, const uint8_t *aDbid,
                        const uint8_t *aHistory, const char *zKey, uint64_t tCapture, uint32_t nBases,
                        uint64_t ageMs);

/*
** `sqlite-tde archive --prune` (tde_archive_prune): the database id from
** zDbId (32 hex digits) or else the plaintext header of zDb (no key), one
** prune, a summary line through xLine, and with zDb one audit line
** ("archive_prune") in zDb-tdeship-audit when something was deleted.
*/
int tdeRetainOnce(TdeS3 *pS3, const char *zPrefix, const char *zDb, const char *zDbId, uint32_t nBases,
                  uint64_t ageMs, int bDryRun, void (*xLine)(void*, const char*), void *pArg);

#endif /* TDE_ARCHIVE_RETAIN_H */
