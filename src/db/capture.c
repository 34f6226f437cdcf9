/*
** The standby's capture and sync wait as hooks of a main database
** (tdeCaptureHook, raised through hooks.c; issue 23): before a WAL
** generation ends (restart, truncation, deletion) the committed frames a
** shipper has not captured yet are saved in its spool (repl/spool.c
** tdeShipHook), and in the standby's sync mode a commit returns once a
** standby acknowledged it (repl/sync.c tdeReplSyncWait).  Every byte of
** the -wal is read through the VFS below the shim (the handle SQLite's
** own WAL file wraps), never with open(2).
**
** Its state: the WAL index end when this connection took the WAL write
** lock (pDb->repl.shipEnd) and, between the release of that lock and its
** return, the end a sync wait waits for (syncEnd).  Calls only repl/ (the
** spool, the sync file) and fileio.c.  Must never: fail a write (a spool
** it cannot use is logged, and the shipper records a GAP), or wait while
** SQLite's WAL write lock is held.
*/
#include "vfs/vfs_int.h"

/* SQLite's WAL write lock taken (bLock 1: what is committed, for the
** capture at a restart or truncation, as the WAL index changes before
** either) or released (bLock 0: in sync mode, wait for the standby's
** acknowledgement of the commit, if this connection made one). */
static void captureWalLock(TdeFile *p, int bLock){
  if( p->eKind!=TDE_KIND_MAIN ) return;
  if( bLock ){
    tdeShmHeaderEnd(p->pDb->pShm0, &p->pDb->repl.shipEnd);
    return;
  }
  /* No shipper in sync mode: at most one failed open per
  ** TDE_SYNC_RECHECK_US (repl/sync.c). */
  if( p->pDb->repl.syncEnd.bKnown ) tdeReplSyncWait(p->zName, &p->pDb->repl.syncEnd, &p->pDb->repl.syncNoFileUntil);
  p->pDb->repl.syncEnd.bKnown = 0;
  p->pDb->repl.shipEnd.bKnown = 0;
}

/* The WAL write lock is about to be released (bWal 1): the WAL index as
** this writer leaves it, if a commit moved it, is what a sync wait waits
** for once the lock is released. */
static void captureWriteEnd(TdeFile *p, int bWal){
  TdeWalEnd end;
  p->pDb->repl.syncEnd.bKnown = 0;
  if( !bWal || p->eKind!=TDE_KIND_MAIN || !p->pDb->repl.shipEnd.bKnown ) return;
  tdeShmHeaderEnd(p->pDb->pShm0, &end);
  if( end.bKnown && (end.mxFrame!=p->pDb->repl.shipEnd.mxFrame || memcmp(end.aSalt, p->pDb->repl.shipEnd.aSalt, 8)) ){
    p->pDb->repl.syncEnd = end;
  }
}

/* The WAL (pWal: its file in the VFS below) is about to be restarted with
** header aNewHdr, or truncated or deleted (eWhy, TDE_CAPTURE_*): save the
** committed frames a shipper has not captured.  Under SQLite's WAL write
** lock (a restart, a truncation: the ends of the WAL index and of the
** lock's start are known), or, bUnmap, the last connection unmapping the
** WAL index before the log is deleted (the index's end alone).  Raw bytes
** only; a no-op (one access()) when the database is not shipped. */
static void captureWalEnd(TdeFile *p, sqlite3_file *pWal, int eWhy, const uint8_t *aNewHdr, int bUnmap){
  TdeRawSrc wal = { pWal, -1 }, hdr = { p->pReal, -1 };
  TdeWalEnd aEnd[2];
  if( !p->zName || !pWal ) return;
  tdeShmHeaderEnd(p->pDb->pShm0, &aEnd[0]);
  aEnd[1] = p->pDb->repl.shipEnd;
  (void)tdeShipHook(p->zName, &wal, aEnd, bUnmap ? 1 : 2, &hdr, eWhy, aNewHdr);
}

const TdeMainHook tdeCaptureHook = {
  "standby capture",
  0,                          /* xLoaded */
  0,                          /* xWriteLock */
  captureWriteEnd,            /* xWriteEnd */
  0,                          /* xBeforeKeyDrop */
  0,                          /* xPageRescue */
  captureWalLock,             /* xWalLock */
  captureWalEnd,              /* xWalEnd */
  0,                          /* xPageCheck */
  0,                          /* xWriteOutsideWal */
  0,                          /* xWalFold */
};
