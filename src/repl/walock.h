/*
** The shipper's keyless lock on a WAL-mode database (walock.c): SQLite's
** WAL write lock (and, for a base copy, the checkpoint lock) taken on the
** WAL index through the VFS below the tde VFS, without a connection, a
** page read or a key.  docs/ARCHIVE.md "Keys and credentials" and
** docs/FORMAT.md "Standby" (the shipper's capture) describe it.
*/
#ifndef TDE_REPL_WALOCK_H
#define TDE_REPL_WALOCK_H

#include "repl/repl.h"

typedef struct TdeWalLock {
  sqlite3_vfs *pVfs;          /* the VFS below tde (or the default) */
  sqlite3_file *pFile;        /* the database opened by pVfs; 0: not open */
  const char *zBlock;         /* its name laid out as SQLite's: outlives pFile */
  volatile void *pShm;        /* region 0 of the WAL index; 0: not mapped yet */
  int bShmOpen;               /* xShmMap was called: the -shm is open */
  int nShmHeld;               /* WAL index slots held from 0 (1 write, 2 and checkpoint) */
  int eDbLock;                /* the database file's lock (SQLITE_LOCK_*) */
} TdeWalLock;

/* Flags of tdeWalLockTake. */
#define TDE_WALOCK_CKPT     0x01  /* the checkpoint lock too: the database file does not change */
#define TDE_WALOCK_DBFILE   0x02  /* no WAL index and no WAL content: lock the database file */

/* Why tdeWalLockTake returned TDE_LOCKED. */
#define TDE_WALOCK_BUSY     1     /* another connection holds the lock */
#define TDE_WALOCK_NOINDEX  2     /* no WAL index (no connection, or not WAL mode) */
#define TDE_WALOCK_RECOVER  3     /* the index needs SQLite's recovery (a crashed writer) */

/* Open zDb through the VFS below tde, read-write, never created. */
int tdeWalLockOpen(TdeWalLock *pLock, const char *zDb);

/*
** Take the lock, never waiting.  TDE_OK: held, *pEnd the WAL index end
** (bKnown 0 when TDE_WALOCK_DBFILE locked the database file exclusively:
** no connection has it open and there is no WAL content, so the database
** file is all of it).  TDE_LOCKED: not held, *peWait says why.  Else an
** error (nothing held).
*/
int tdeWalLockTake(TdeWalLock *pLock, unsigned flags, TdeWalEnd *pEnd, int *peWait);

/* Release what tdeWalLockTake took (no-op when nothing is held). */
void tdeWalLockRelease(TdeWalLock *pLock);

/* Release, unmap the WAL index (never deleting it) and close. */
void tdeWalLockClose(TdeWalLock *pLock);

#endif
