/*
** Private declarations shared by every sqlite-tde module: error and log
** helpers, big-endian byte helpers.  Never installed.
**
** Every .c file that calls SQLite includes this header first: it pulls in
** sqlite3ext.h so the same source builds the loadable extension (calls go
** through the sqlite3_api table) and the static library (SQLITE_CORE,
** direct calls).
*/
#ifndef TDE_INT_H
#define TDE_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT3

#include "sqlite-tde.h"

#define TDE_UNUSED(x) ((void)(x))
#define TDE_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/*
** Record the detail of a failure on this thread and return rc, so callers
** write `return tdeErr(TDE_CONFIG, "line %d: unknown key '%s'", n, k);`.
** The message must never contain key bytes, passwords or PINs.
*/
int tdeErr(int rc, const char *zFmt, ...) __attribute__((format(printf, 2, 3)));
/* Clear this thread's last error. */
void tdeErrClear(void);

/* Log through sqlite3_log() and the application's tde_set_log() callback.
** level is TDE_LOG_ERROR, TDE_LOG_WARNING or TDE_LOG_INFO. */
void tdeLog(int level, const char *zFmt, ...) __attribute__((format(printf, 2, 3)));

/*
** Fault injection inside the shim, for tests only (tests/unit/test_faults.c):
** when set, called at each site below before the real call; non-zero makes
** that call fail as the real one can (SQLITE_IOERR_READ for reads, NULL for
** allocations).  Covers what a VFS below the shim or a failing
** sqlite3_malloc cannot single out: the shim's own reads of the header,
** the journal and the WAL, and its secure (key) memory.  NULL in
** production; never set by the library.
*/
#define TDE_FAULT_READ_HEADER   1    /* main file, the header region */
#define TDE_FAULT_READ_PAGE     2    /* main file, a page */
#define TDE_FAULT_READ_JOURNAL  3    /* rollback journal */
#define TDE_FAULT_READ_WAL      4    /* WAL */
#define TDE_FAULT_ALLOC_SECURE  5    /* tdeSecureAlloc */
#define TDE_FAULT_UPGRADE_BATCH 6    /* the move to version 3 stops after a batch (as if killed) */
extern int (*tdeFaultHook)(int eSite);

/*
** Who may change a file the library trusts (wallets, password files, a
** configuration that names code, a helper program, and the folders they
** are in).  tdeModeCheck judges one stat result: a mode bit of mForbid set
** (077: group or others may read or write; 022: may write) is refused as
** rc with a message naming zWhat, zPath and the mode.  With bOwner, the
** file must also belong to this user or root.  A directory with the sticky
** bit (/tmp) is accepted although others may write it: they cannot rename
** or remove what is not theirs.  tdeTrustedFile checks a file (stat, or
** fstat of fd when fd>=0) and its directory (stat) against 022 and owner:
** the check for anything that chooses code run with the keys.
*/
int tdeModeCheck(int rc, const char *zWhat, const char *zPath, const void *pStat,
                 unsigned mForbid, int bOwner);
int tdeTrustedFile(int rc, const char *zWhat, const char *zPath, int fd);

/* Fail an SQL function call with zMsg (never a secret) and code sqlRc,
** logging it at ERROR level so that SQL tde_last_error() returns it
** (keystore/sql.c).  Every failing SQL function of the library uses it. */
void tdeSqlResultError(sqlite3_context *ctx, const char *zMsg, int sqlRc);

/* The last ERROR-level message tdeLog() logged on this thread ("" if
** none): SQL function tde_last_error() and the VFS's xGetLastError. */
const char *tdeLastFailure(void);

static inline void tdePut16(uint8_t *p, uint16_t v){ p[0]=(uint8_t)(v>>8); p[1]=(uint8_t)v; }
static inline void tdePut32(uint8_t *p, uint32_t v){
  p[0]=(uint8_t)(v>>24); p[1]=(uint8_t)(v>>16); p[2]=(uint8_t)(v>>8); p[3]=(uint8_t)v;
}
static inline void tdePut64(uint8_t *p, uint64_t v){ tdePut32(p, (uint32_t)(v>>32)); tdePut32(p+4, (uint32_t)v); }
static inline uint16_t tdeGet16(const uint8_t *p){ return (uint16_t)((p[0]<<8) | p[1]); }
static inline uint32_t tdeGet32(const uint8_t *p){
  return ((uint32_t)p[0]<<24) | ((uint32_t)p[1]<<16) | ((uint32_t)p[2]<<8) | (uint32_t)p[3];
}
static inline uint64_t tdeGet64(const uint8_t *p){ return ((uint64_t)tdeGet32(p)<<32) | tdeGet32(p+4); }

#endif /* TDE_INT_H */
