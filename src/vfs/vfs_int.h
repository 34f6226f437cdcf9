/*
** Private declarations of the tde VFS shim, shared by its two folders.
** src/vfs/: the file kinds, one read and one write path each, on top:
**   vfs.c        the VFS object, open/close dispatch, the main database
**                file (header region + encrypted pages), method table;
**   wal.c        WAL files: encrypted frame pages, authenticated headers;
**   journal.c    rollback journals: SQLite's layout, records sealed in place;
**   blockfile.c  temporary files: fixed-size encrypted blocks;
**   status.c     PRAGMA tde_status, the tde_status table, SQL functions;
**   api.c        registration, extension entry point, public C API;
**   repair.c     tde_db_reanchor and tde_db_remap: a connection of their
**                own with one check off (bypass tokens), audited.
** src/db/: the main database's state below them (never calls src/vfs/):
**   anchor.c     the external freshness anchor (check at load, updates);
**   pagemap.c    the page map DB-tdemap (reader check, folds, drops);
**   rekey.c      rekey: begin, steps, finish, the rekey journal;
**   upgrade3.c   format version 2 -> 3: the move of the pages;
**   upgrade.c    format version 1 -> 2;
**   keyops.c     the generic header writer (rotation, migration, epoch and
**                freshness updates): writes the header region only;
**   page1.c      page 1 kept per handle, the page-size probe, and the
**                rescue stage (the one place xPageRescue is raised);
**   dek.c        data keys by version, ciphers, header refresh, page
**                seal/open (tdeSealPage, tdeOpenPage*: pure), the one
**                report of a failed open (tdeAuthFail), the hole rule;
**   header_io.c  the header region on disk: its one reader (read, pick,
**                unwrap, verify) and its one writer (slot not in force,
**                sync, switch); keys/header.c is the byte codec;
**   capture.c    the standby's capture and sync wait, as hooks (raised
**                through hooks.c; calls only repl/);
**   hooks.c      the list of a main database's feature hooks (TdeMainHook:
**                page map, anchor, rekey, upgrade, capture) and their dispatchers:
**                calls only through the pointers;
**   fileio.c     the lowest layer: raw reads, scratch, result codes, the
**                registry of main files -- calls nothing else here.
** Calls go down one order, checked by scripts/callgraph.py (no circle
** between files or folders):
**   src/vfs:  api, status -> vfs -> repair, wal, journal, blockfile
**   src/db:   upgrade3 -> anchor -> pagemap -> rekey -> upgrade -> keyops -> page1
**             -> dek -> header_io, capture -> hooks, fileio.
** A feature below its caller that must tell one above it (the rekey's
** finish asking the anchor for a record under the key it keeps) raises a
** hook (hooks.c) instead of calling it.
** File layouts are specified in docs/FORMAT.md.
*/
#ifndef TDE_VFS_INT_H
#define TDE_VFS_INT_H

#include "tde_int.h"
#include "cipher/cipher.h"
#include "keys/keys.h"
#include "keys/layout.h"
#include "repl/repl.h"

#include <limits.h>

/* What a file is to the shim. */
#define TDE_KIND_MAIN    1   /* main database: header + encrypted pages */
#define TDE_KIND_WAL     2   /* write-ahead log: encrypted frames */
#define TDE_KIND_JOURNAL 3   /* rollback journal: blocks under the data key */
#define TDE_KIND_TEMP    4   /* temp/transient/statement files: ephemeral key */
#define TDE_KIND_PLAIN   5   /* super-journal: file names only, passed through */
#define TDE_KIND_PROBE   6   /* a child journal opened with SQLITE_OPEN_SUPER_JOURNAL: SQLite
                            ** reads its super-journal record (journal.c tdeJournalProbeRead) */

#define TDE_BLOCK_TEMP    4096   /* temp-file block plaintext */
#define TDE_BLOCK_MAX     4096
#define TDE_MAX_PAGE     65536

/* One data-key version and the WAL MAC key derived from it.  As many as
** the header's keyring can name (TDE_MAX_ENTRIES): every wrapped version
** can be held, so none is ever refused for lack of room. */
#define TDE_MAX_VERSIONS TDE_MAX_ENTRIES
typedef struct TdeDekVer {
  uint32_t version;
  uint8_t *aDek;              /* 32 bytes, secure memory */
  uint8_t *aWalMac;           /* 32 bytes, secure memory */
  TdeHmac *pWalHmac;          /* keyed with aWalMac, for WAL frame MACs */
} TdeDekVer;

/* Keys and header state of one open main database file. */
typedef struct TdeDbKeys {
  TdeHeader hdr;              /* header in force */
  int iSlot;                  /* slot it was read from (0/1) */
  TdeDekVer aVer[TDE_MAX_VERSIONS];   /* data keys this process holds */
  int nVer;
  uint8_t *aDek;              /* alias: data key of hdr.curVersion */
  uint8_t *aWalMac;           /* alias: its WAL MAC key */
  TdeKeystore *pKs;           /* registry-owned; retained while we hold it */
  int bRetained;
  const TdeConfig *pCfg;      /* registry-owned parsed configuration (audit) */
  char zConfig[PATH_MAX];     /* configuration file in use */
  char zMasterKey[TDE_KEYID_MAX + 1];   /* master key that unwrapped the DEK */
  uint32_t iRekeyCursor;      /* next page the rekey looks at (1 = start) */
  int bStaleWrap;             /* keystore's current master key wraps nothing here:
                              ** re-wrap at the next write transaction */
  int bSlotDamaged;           /* the slot not in force failed its checksum at open
                              ** (a torn header update, or damage): rewritten at
                              ** the next write transaction */
  uint64_t nSessions;         /* sealing sessions this connection's handles started */
  uint32_t nSessionsVersion;  /* ... under this data-key version (tde_status) */
  /* External freshness anchor (db/anchor.c, docs/FORMAT.md "External
  ** anchor"): its state, touched by anchor.c alone. */
  struct TdeAnchorState {
    int eKind;                /* TDE_ANCHOR_* when one is configured and the database is
                              ** version 2, else 0: no cost per transaction but one test */
    long long nInterval;      /* seconds between updates */
    int64_t tLast;            /* this connection's last update try (0: none yet) */
    int64_t tRecord;          /* time in the newest record read or written (status) */
    uint32_t version;         /* data-key version that MACed it */
    int bWrite;               /* rollback mode: the main file holds RESERVED or more */
    int bPlaceOk;             /* the store's place record for this path names this
                              ** database (checked at load or written by an update) */
  } anchor;
} TdeDbKeys;

/* What only a WAL file has (TdeFile.pWal, allocated at its open; wal.c). */
typedef struct TdeWal {
  uint32_t pgsz;              /* page size from the WAL header, 0 if unknown */
  int bHdr;                   /* aHdr holds the current header */
  uint8_t aHdr[32];           /* header as SQLite sees it (with its checksum) */
  int bPending;               /* a frame header write awaits its page */
  sqlite3_int64 iPendingOff;
  uint8_t aPending[24];
  uint32_t iRunFrame;         /* running checksum: frame index it ends at */
  uint32_t aRunCk[2];
  uint8_t aRunSalt[8];
  struct TdeWalCk { uint8_t mac[8]; uint32_t ck[2]; uint8_t bValid; } *aCk;
  uint32_t nCk;               /* entries allocated in aCk */
  uint32_t iMaxWritten;       /* highest frame this handle wrote ... */
  uint8_t aMaxSalt[8];        /* ... in the generation with these salts */
  /* Format version 2 (chained frame MACs, docs/FORMAT.md): aMac[0] is the
  ** WAL header's stored MAC, aMac[i] frame i's MAC as verified (i <=
  ** iChain: one chain from the header) or as this handle wrote it (bOwn,
  ** with the predecessor it was computed from). */
  struct TdeWalMac { uint8_t mac[8]; uint8_t prev[8]; uint8_t bOwn, bCommit;
                     uint32_t pgno; uint8_t tag[8]; } *aMac;   /* page and tag (page map) */
  uint32_t nMac;              /* entries allocated in aMac */
  int bChain;                 /* aMac[0] is the current header's MAC */
  uint32_t iChain;            /* frames 1..iChain verified as one chain */
  uint32_t iChainCommit;      /* last commit frame of this generation in 1..iChain */
  uint64_t w;                 /* log epoch the current WAL header is bound to */
  uint8_t aHdrMac[8];         /* the current WAL header's stored MAC */
  /* Frames iSessLo..iSessHi were written by this handle since its
  ** connection took the WAL write lock (0: none): no other connection can
  ** have rewritten them, so their aMac values need no re-read. */
  uint32_t iSessLo, iSessHi;
  /* Version 2: a restart's epoch update {L = wDue, salts} waits for the
  ** sync of the WAL header SQLite makes next (tdeWalSync), or for the
  ** shim's own sync before anything else touches the WAL (tdeWalFlush). */
  int bEpochDue;
  uint64_t wDue;
  uint8_t aDueSalt[8];
  /* The generation this handle last folded into the page map (salts, last
  ** commit frame) and the map root that fold left: a second fold of the
  ** same frames (the restart after the lock-time fold) is skipped. */
  int bFolded;
  uint8_t aFoldSalt[8];
  uint32_t iFoldEnd;
  uint8_t aFoldRoot[16];
  /* A frame SQLite writes in pieces (sector padding without
  ** POWERSAFE_OVERWRITE, wal.c walSplitBegin): sealed whole at its first
  ** piece; aSplit (sqlite3_malloc'd, nSplit bytes, wiped when freed) holds
  ** the sealed frame, the plaintext page and SQLite's frame header. */
  uint8_t *aSplit;
  uint32_t nSplit;
  uint32_t iSplit;            /* its frame index; 0: none */
  uint32_t nSplitDone;        /* bytes of the frame written so far */
  int bSplitCk;               /* SQLite's checksum of it is known (else recomputed on reads) */
} TdeWal;

typedef struct TdeFile TdeFile;

/* Block files (blockfile.c): temp, transient and statement files. */
typedef struct TdeBlockFile {
  uint32_t nBlock;            /* plaintext bytes per block */
  int bSized;                 /* nBlock fixed by the first write */
  /* the block written last while SQLite is still inside it, as plaintext
  ** not yet sealed (blockfile.c, "the held block"): aHeld (nBlock bytes,
  ** sqlite3_malloc'd, zero beyond nHeld unless bPart, wiped when dropped), its number
  ** and logical length; bHeld 0: none.  bPart: the block's stored bytes
  ** are not loaded yet, and aHeld holds only what SQLite wrote since,
  ** [iLo, iHi); the rest is loaded (merged under it) only when something
  ** needs it, which a block overwritten from its start never does. */
  uint8_t *aHeld;
  int bHeld;
  int bPart;
  sqlite3_int64 iHeld;
  uint32_t nHeld;
  uint32_t iLo, iHi;
} TdeBlockFile;

/* main, WAL mode: while this connection checkpoints, the last frame page
** it read, so the checkpoint's write of that page can store the frame's
** ciphertext (a valid page as it is) instead of sealing it again (wal.c
** walCkptRemember fills it, vfs.c tdeMainWrite uses it). */
typedef struct TdeCkptCopy {
  int bHeld;                  /* this connection holds the checkpoint lock */
  int bInCkpt;                /* SQLite is inside a checkpoint (SQLITE_FCNTL_CKPT_START .. CKPT_DONE) */
  int bCkptEnd;               /* CKPT_DONE seen, the checkpoint's truncation not yet (version 3's
                              ** fold point: SQLite truncates only when every frame was copied) */
  int bValid;
  uint32_t pgno, pgsz;
  uint8_t *aPlain, *aCipher;  /* TDE_MAX_PAGE each, heap */
} TdeCkptCopy;

/* main, version 2: the page map's state per connection (pagemap.c; the
** WAL index side kept by vfs.c tdeShmLock/tdeShmUnmap, the sync side by
** wal.c): the map as last loaded (its own struct: tags, slots, the path
** of DB-tdemap while open), the WAL index read-lock slot this connection
** holds plus one (0: none), whether it holds the WAL write lock, and the
** index's salts at its last read lock.  bWalIndexEnd/walIndexEnd: the WAL
** index's last frame when SQLite unmapped it to delete the log (the fold
** at deletion goes no further: frames past it, of a commit whose sync
** failed, were never part of the log); bWalSyncFailed: a WAL sync failed
** in this generation (without a shared index the fold then drops the map
** rather than trust the chain's end). */
typedef struct TdeMapConn {
  struct TdeMap *pMap;
  int iReadSlot1;
  int bWalWrite;
  uint8_t aShmSalt[8];
  int bWalIndexEnd;
  uint32_t walIndexEnd;
  int bWalSyncFailed;
} TdeMapConn;

/* What only a main database file has (TdeFile.pDb, allocated at its open). */
typedef struct TdeMainFile {
  TdeDbKeys *pKeys;           /* owned; NULL until loaded */
  uint32_t pgsz;              /* page size last seen, 0 if unknown */
  void volatile *pShm0;       /* SQLite's WAL index region 0, if mapped */
  TdeReplFile repl;           /* standby copy and shipping (repl/repl.h) */
  TdeCkptCopy ckpt;           /* the checkpoint's copy of a frame page */
  TdeMapConn map;             /* the page map (pagemap.c) */
  /* the database size (pages) committed before this connection's current
  ** write to the file began, read from the authenticated page 1 on disk at
  ** the first write; an all-zero page beyond it is a page SQLite never
  ** wrote (a spilled transaction extended the file past it). */
  int bTxnBase;
  uint32_t nTxnBase;
  /* the registry of open main files (tdeMainFind), which finds the main
  ** file of a journal or WAL under any stack of VFSes above tde. */
  TdeFile *pNextMain;
  TdeFile *pWalFile;          /* its open WAL, if any (set by the WAL) */
  /* where SQLite keeps the connection that uses the file
  ** (SQLITE_FCNTL_PDB hands the address of its b-tree's connection field,
  ** which SQLite points at whichever connection holds the b-tree at the
  ** time: with shared cache that changes), and whether the reserved bytes
  ** of a new database are still to be requested (vfs.c,
  ** tdeMainRequestReserve; cleared by the auto-extension, api.c). */
  sqlite3 **ppDb;
  int bReserveDue;
  /* page 1 as last authenticated by this handle, and the trailer stored
  ** with it (page1.c); nPage1 = its page size, 0 if none. */
  uint8_t *aPage1;
  uint32_t nPage1, nPage1Alloc;
  uint8_t aPage1Trailer[TDE_TRAILER_SIZE];
  /* version 2: the binding id J of the rollback journal in progress
  ** (journal.c), put into IV bits 95..64 of every page this handle seals
  ** (tdeSeal); 0 when there is none. */
  uint32_t jrnlBind;
  /* both header slots' SHA-256 fields as the last lock-time header check
  ** saw them (vfs.c tdeMainLockCheck); bHdrSums 0 if none.  Every header
  ** update changes them.  bLockChecked: done at RESERVED in this lock
  ** session (EXCLUSIVE then needs no second check). */
  int bHdrSums;
  uint8_t aHdrSums[64];
  int bLockChecked;
  /* the lock level SQLite holds through this handle (tdeLock / tdeUnlock);
  ** NONE: a read now is outside any transaction. */
  int eLockHeld;
  /* a page showed the header region rolled back (dek.c tdeOpen): this
  ** handle writes nothing more -- in particular no checkpoint of a stale
  ** WAL at close -- so the refusal modifies nothing. */
  int bHdrRolledBack;
  /* the checks tde_db_remap / tde_db_reanchor switch off on their own
  ** connection only (TDE_BYPASS_* bits, repair.c tdeBypassFromUri). */
  int mBypass;
} TdeMainFile;

/*
** An open file of the shim.  The fields every kind uses, then one pointer
** per kind to what only that kind has: allocated at the open of that kind
** (pJrnl: at the journal's first use), freed at its close, NULL for every
** other kind -- a wrong-kind access crashes rather than aliases.
*/
struct TdeFile {
  sqlite3_file base;          /* must be first */
  sqlite3_file *pReal;        /* the file below us; follows this struct */
  int eKind;                  /* TDE_KIND_* */
  int openFlags;
  const char *zName;          /* as SQLite passed it (may be NULL for temp) */
  int bReadOnly;
  TdePageCipher *pCipher;     /* this handle's own sealing session */
  TdePageCipher *apVer[TDE_MAX_VERSIONS];  /* opening pages of other versions */
  uint8_t dbid[TDE_DBID_BYTES];   /* binds pages/blocks to the database */
  uint8_t *aBuf;              /* scratch: TDE_MAX_PAGE + 2 blocks */
  TdeFile *pMain;             /* WAL, journal: their main file (closed after them) */
  sqlite3_int64 nAuthFail;    /* pages/frames that failed authentication */
  TdeMainFile *pDb;           /* main database only */
  TdeWal *pWal;               /* WAL only */
  struct TdeJrnl *pJrnl;      /* journal only: layout state (journal.c), NULL until used */
  TdeBlockFile *pBlk;         /* temp files only */
};
#define TDE_BYPASS_MAP    1   /* the page map check */
#define TDE_BYPASS_ANCHOR 2   /* the anchor comparison at load */

/* fileio.c: the registry of open main files (added at open, removed at
** close).  tdeMainFind: the open main file whose journal or WAL is zName
** ("DB-journal", "DB-wal"), or NULL.  Works whatever VFS sits above tde. */
void tdeMainListAdd(TdeFile *p);
void tdeMainListRemove(TdeFile *p);
TdeFile *tdeMainFind(const char *zName);
/* The tde main file of schema zSchema of db, or NULL if it is not opened
** through tde (directly or below other VFSes). */
TdeFile *tdeMainOfDb(sqlite3 *db, const char *zSchema);

extern const sqlite3_io_methods tdeIoMethods;
extern sqlite3_vfs tdeVfs;

/* Associated data for pages (main database and WAL frame pages alike, so
** a frame's page ciphertext is valid in the database file). */
#define TDE_PAGE_AAD_BYTES (1 + TDE_DBID_BYTES + 4 + 4)
void tdePageAad(const uint8_t dbid[16], uint32_t pgno, uint32_t pgsz, uint8_t *aad);

/* Decrypt one stored page in place (aPage holds pgsz bytes read from disk);
** on success the trailer region is zeroed.  Pure: on failure the page is
** wiped and SQLITE_IOERR_AUTH returned, nothing counted or logged (a probe
** may fail); *pvNoKey (may be NULL) gets the trailer's data-key version
** when this database does not have it, else -1.  A caller that decides
** the failure is damage reports it once with tdeAuthFail. */
int tdeOpenPage(TdeFile *p, uint8_t *aPage, uint32_t pgsz, uint32_t pgno, int64_t *pvNoKey);
/* Same, reading the stored page from aIn and writing plaintext to aOut
** (may be the same buffer). */
int tdeOpenPageTo(TdeFile *p, const uint8_t *aIn, uint8_t *aOut, uint32_t pgsz, uint32_t pgno, int64_t *pvNoKey);
void tdeAuthFail(TdeFile *p, uint32_t pgno, const char *zWhat, int64_t vNoKey);
/* Seal a plaintext page into aOut (pgsz bytes). */
int tdeSealPage(TdeFile *p, const uint8_t *aPlain, uint32_t pgsz, uint32_t pgno, uint8_t *aOut);

/* fileio.c: the page sizes SQLite can use, in the order discovery tries
** them (the main file and the WAL alike). */
#define TDE_N_PROBE_PGSZ 8
extern const uint32_t tdeProbePgsz[TDE_N_PROBE_PGSZ];

/* Is this a page size SQLite can use? */
static inline int tdeValidPgsz(sqlite3_int64 n){
  return n>=512 && n<=TDE_MAX_PAGE && (n & (n-1))==0;
}

/* Map a tde_rc to an SQLite result code. */
int tdeSqliteRc(int rc);

/* Main database helpers used by status/verify. */
int tdeMainEnsureKeys(TdeFile *p, int bCreate);
/* vfs.c: the format version of a new database under configuration pCfg
** (may be NULL): its format_version, else 3 (keys.h tdeCreateVersion). */
int tdeNewFormatVersion(const TdeConfig *pCfg);
int tdeScratch(TdeFile *p);
int tdeRealRead(TdeFile *p, void *z, int n, sqlite3_int64 iOfst, int *pbShort);
/* fileio.c: pages lying wholly in the main file (0 while the page size
** is unknown); the layout of main file p at page size pgsz (its header's
** format version and upgrade cursor; version 2's before the header is
** loaded), the physical offset of page pgno in it, and the pages lying
** wholly in nPhys bytes of it. */
int tdeMainPageCount(TdeFile *p, sqlite3_int64 *pn);
uint32_t tdeMainWholePages(const TdeFile *p, uint32_t pgsz, sqlite3_int64 nPhys);
TdeLayout tdeMainLayout(const TdeFile *p, uint32_t pgsz);
sqlite3_int64 tdeMainPageOff(const TdeFile *p, uint32_t pgsz, uint32_t pgno);
int tdeMainCheckHeader(TdeFile *p, int *piBad);

/* dek.c: data keys by version, cipher choice, header refresh. */
const TdeDekVer *tdeKeysFind(const TdeDbKeys *k, uint32_t version);
int tdeKeysAddVersion(TdeDbKeys *k, uint32_t version, const uint8_t *aDek);
int tdeKeysUnlockAll(TdeDbKeys *k);
void tdeKeysFreeVersions(TdeDbKeys *k);
void tdeKeysAlias(TdeDbKeys *k);
TdePageCipher *tdeCipherForSeal(TdeFile *p, int *pRc);
TdePageCipher *tdeCipherForOpen(TdeFile *p, uint32_t version, int *pRc);
void tdeCiphersFree(TdeFile *p);
int tdeSeal(TdeFile *p, const uint8_t *aad, size_t nAad, const uint8_t *pt, size_t n,
            uint8_t *ct, uint8_t *trailer);
/* tdeOpen: TDE_OK; TDE_AUTH or TDE_NOKEY when the data is not authentic;
** TDE_NOMEM, TDE_IO or TDE_CRYPTO when it could not be checked (an error
** to report as such, never to treat as absent or damaged data). */
int tdeOpen(TdeFile *p, const uint8_t *aad, size_t nAad, const uint8_t *ct, size_t n,
            const uint8_t *trailer, uint8_t *pt);
int tdePageIsZero(const uint8_t *aPage, uint32_t pgsz);
int tdePageIsHole(uint32_t pgno, uint32_t nCommitted, int bNewer);
int tdeMainRefresh(TdeFile *pMain);
int tdeMainRefreshIfChanged(TdeFile *pMain);

/* header_io.c: one read of a main database's header region.  The caller
** fills the inputs; tdeHdrRead returns an SQLite code for the read itself
** (I/O, memory) and puts the verdict on the header in *pTrc (a tde_rc,
** the detail in tde_last_error()).  tdeHdrReadDone frees the region. */
typedef int (*TdeHdrKey)(TdeFile *pMain, const TdeHeader *pHdr, void *pArg, uint8_t *aDek);
typedef struct TdeHdrRead {
  int nRead;                 /* in: bytes of the region to read (the file may be shorter) */
  int bEach;                 /* in: verify both slots (tde_verify; a short region fails) */
  const uint8_t *aDbid;      /* in: the database id a slot must name; NULL: any */
  TdeHdrKey xKey;            /* in: the data key that checks the slot's MAC (its
                             ** current version), or an error: stop before the MAC */
  void *pArg;                /* in: for xKey */
  TdeHeader *pHdr;           /* in: where the slot is decoded */
  uint8_t *aRegion;          /* out: the region, TDE_HEADER_BYTES, zero past nRead */
  int iSlot;                 /* out: the slot picked; bEach: the first that fails, or -1 */
} TdeHdrRead;
int tdeHdrRead(TdeFile *pMain, TdeHdrRead *r, int *pTrc);
void tdeHdrReadDone(TdeHdrRead *r);
/* Bytes of a slot before its last 512-byte sector (log epoch, salts, MAC,
** checksum): what an epoch update leaves alone when it can. */
#define TDE_HDR_EPOCH_SECTOR (TDE_SLOT_SIZE - 512)
int tdeHdrWrite(TdeFile *pMain, TdeHdrRead *r, const TdeHeader *pNew, const uint8_t *aDek, int bEpoch);

/* WAL (wal.c) */
int tdeWalRead(TdeFile *p, void *zBuf, int iAmt, sqlite3_int64 iOfst);
int tdeWalWrite(TdeFile *p, const void *zBuf, int iAmt, sqlite3_int64 iOfst);
int tdeWalFlush(TdeFile *p);
int tdeWalSync(TdeFile *p, int flags);
int tdeWalTruncate(TdeFile *p, sqlite3_int64 size);
void tdeWalFree(TdeFile *p);
void tdeWalLockChanged(TdeFile *p);   /* the WAL write lock taken or released */
/* Verify the frames of the WAL that belong to the database (1..mxFrame
** from SQLite's WAL index, or 0 if unknown); *pnFrames counted, *piBad
** first bad frame (0 none, -1 the WAL header). */
int tdeWalVerify(TdeFile *p, uint32_t mxFrame, sqlite3_int64 *pnFrames, sqlite3_int64 *piBad);
int tdeWalPageList(TdeFile *p, uint32_t iFirst, uint32_t mxFrame, uint32_t **paPgno, uint32_t *pn);

/* Rollback journals (journal.c) */
int tdeJournalRead(TdeFile *p, void *zBuf, int iAmt, sqlite3_int64 iOfst);
int tdeJournalWrite(TdeFile *p, const void *zBuf, int iAmt, sqlite3_int64 iOfst);
int tdeJournalTruncate(TdeFile *p, sqlite3_int64 size);
int tdeJournalFileSize(TdeFile *p, sqlite3_int64 *pSize);
int tdeJournalSync(TdeFile *p, int flags);
int tdeJournalFlush(TdeFile *p);     /* write a record held in memory (before close) */
int tdeJournalProbeRead(TdeFile *p, void *zBuf, int iAmt, sqlite3_int64 iOfst);
/* After a rotation or migration (api.c), under RESERVED with no journal
** open: on a version-2 database in rollback mode, seal page 1 again under
** the header in force, protected by a one-record hot journal.  Never
** fails: a journal file kept, or an error, leaves a log line. */
void tdeJournalResealPage1(TdeFile *pMain);
void tdeJournalFree(TdeFile *p);

/* page1.c: page 1 kept per handle, for SQLite's partial reads of it. */
int tdePage1Read(TdeFile *p, uint8_t *zBuf, int iAmt, sqlite3_int64 iOfst);
void tdePage1Keep(TdeFile *p, const uint8_t *aPlain, uint32_t pgsz, const uint8_t *aTrailer);
void tdePage1Forget(TdeFile *p);
void tdePage1Free(TdeFile *p);
/* page1.c: the page size, from page 1 authenticated at each size SQLite
** can use (then the rescue hook).  SQLITE_OK (p->pgsz set),
** SQLITE_IOERR_SHORT_READ (no whole page yet), SQLITE_IOERR_AUTH (logged). */
int tdeMainDiscoverPgsz(TdeFile *p);
int tdeMainProbePgsz(TdeFile *p);
/* page1.c: the page size for version 3's sizes, also with page 1 torn
** (page 2, then the file's length). */
int tdeMainSizePgsz(TdeFile *p, uint32_t *pPgsz);
/* page1.c: the rescue stage, the one place xPageRescue is raised from: a
** page that failed to open looked for through the hook; SQLITE_OK (aOut
** authentic, aTag its stored tag) or SQLITE_IOERR_AUTH.  Pure: the caller
** that decides a failure is final counts it (tdeAuthFail). */
int tdeMainRescuePage(TdeFile *p, uint32_t pgno, uint32_t pgsz, uint8_t *aOut, uint8_t aTag[16]);

/* Temporary files (blockfile.c) */
int tdeBlockRead(TdeFile *p, void *zBuf, int iAmt, sqlite3_int64 iOfst);
int tdeBlockWrite(TdeFile *p, const void *zBuf, int iAmt, sqlite3_int64 iOfst);
int tdeBlockTruncate(TdeFile *p, sqlite3_int64 size);
int tdeBlockFileSize(TdeFile *p, sqlite3_int64 *pSize);
/* Seal and write the held block (before xSync); tdeBlockClose also frees
** it, writing it first unless the file is DELETEONCLOSE. */
int tdeBlockFlush(TdeFile *p);
int tdeBlockClose(TdeFile *p);

/* keyops.c: header updates (caller holds SQLite's write lock). */
typedef int (*TdeHeaderEdit)(TdeFile *pMain, TdeHeader *pNew, void *pArg);
int tdeMainHeaderUpdate(TdeFile *pMain, TdeHeaderEdit xEdit, void *pArg);
/* Version 2: advance the log epoch to logEpoch (= L + 1) bound to WAL salts
** aSalt (NULL: a rollback journal); the last sector of each slot written and
** synced, one after the other (docs/FORMAT.md "Epoch updates"). */
int tdeMainEpochUpdate(TdeFile *pMain, uint64_t logEpoch, const uint8_t *aSalt);
int tdeEditRewrap(TdeFile *pMain, TdeHeader *pNew, void *pArg);
int tdeMainMigrate(TdeFile *pMain, TdeKeystore *pNew, const TdeConfig *pNewCfg, int bDropOthers);
/* Re-wrap under the keystore's current master key if the header is stale
** (called at the start of a write transaction). */
int tdeMainHeaderDue(TdeFile *pMain);
int tdeMainRewrapAudited(TdeFile *pMain, const char *zOp, const char *zDetail);
/* dek.c: which master key unwrapped the current data key (status), and
** whether the keystore's current master key wraps it (else re-wrap due). */
void tdeKeysCheckStale(TdeDbKeys *k);
void tdeKeysNoteMasterKey(TdeDbKeys *k);
/* vfs.c */
void tdeMainReserveDone(TdeFile *p);
void tdeAuditKeys(TdeDbKeys *k, const char *zDbPath, const char *zOp, int trc);

/* keyops.c: a version-2 freshness-area update (sequence unchanged, one
** sector per slot, as an epoch update) with the caller's edit. */
int tdeMainFreshnessUpdate(TdeFile *pMain, TdeHeaderEdit xEdit, void *pArg);

/*
** hooks.c: the features of a main database as hooks.  A feature fills one
** static const TdeMainHook in its own file (NULL for events it ignores);
** hooks.c lists them; the pipeline raises each event from one place:
**   xLoaded        header authenticated and keys adopted (vfs.c, load and
**                  create): SQLITE_OK or the refusal of the open, logged;
**   xWriteLock     the main file's write lock taken, header checked (tdeLock);
**   xWriteEnd      a write transaction ended: bWal 0 when the rollback-mode
**                  lock drops to SHARED or below, 1 when the WAL write lock
**                  is released (tdeUnlock, tdeShmLock);
**   xBeforeKeyDrop a rekey's finish is about to drop older data keys
**                  (rekey.c): an error stops the finish;
**   xPageRescue    a database page failed authentication: SQLITE_OK with an
**                  authentic copy in aOut and its stored tag in aTag (the
**                  caller's later checks, the page map's, still run), else
**                  SQLITE_IOERR_AUTH, nothing counted.
**   xWalLock       SQLite's WAL write lock taken (bLock 1) or released
**                  (bLock 0) by this connection, after the fact (tdeShmLock);
**   xWalEnd        the WAL (pWal: its file in the VFS below) is about to be
**                  restarted with header aNewHdr or truncated (eWhy,
**                  TDE_CAPTURE_*; wal.c), or, bUnmap, deleted after the last
**                  connection unmaps the WAL index (tdeShmUnmap).
**   xPageCheck     a database page a read is about to return, rescued or
**                  not, its stored tag aTag (tdeMainCheckPage, under a
**                  lock): SQLITE_OK to serve it; SQLITE_NOTFOUND when the
**                  feature's record names another tag (the pipeline looks
**                  for it as the reader's newest WAL frame of the page,
**                  reads the header again once, asks again, and last with
**                  bLast, when the feature refuses: logged, counted, an
**                  error); else an error;
**   xWriteOutsideWal  pages are about to be written outside the WAL (the
**                  main file's xWrite, not a checkpoint's copy), under the
**                  write lock: an error fails the write;
**   xWalFold       a WAL generation ends (restart, truncation, deletion;
**                  wal.c), under the write or EXCLUSIVE lock: its committed
**                  frames' pages aPgno and 8-byte tags aTag in order, nDb
**                  the size its last commit records (0: no frame).
** Dispatchers stop at the first error (xLoaded, xBeforeKeyDrop,
** xPageCheck, xWriteOutsideWal, xWalFold) or the first rescue.
*/
typedef struct TdeMainHook {
  const char *zName;
  int  (*xLoaded)(TdeFile *pMain, int bNew);
  void (*xWriteLock)(TdeFile *pMain);
  void (*xWriteEnd)(TdeFile *pMain, int bWal);
  int  (*xBeforeKeyDrop)(TdeFile *pMain);
  int  (*xPageRescue)(TdeFile *pMain, uint32_t pgno, uint32_t pgsz, uint8_t *aOut, uint8_t aTag[16]);
  void (*xWalLock)(TdeFile *pMain, int bLock);
  void (*xWalEnd)(TdeFile *pMain, sqlite3_file *pWal, int eWhy, const uint8_t *aNewHdr, int bUnmap);
  int  (*xPageCheck)(TdeFile *pMain, uint32_t pgno, const uint8_t aTag[16], int bLast);
  int  (*xWriteOutsideWal)(TdeFile *pMain);
  int  (*xWalFold)(TdeFile *pMain, const uint32_t *aPgno, const uint8_t *aTag, uint32_t nFrame, uint32_t nDb);
} TdeMainHook;
extern const TdeMainHook tdeMapHook;      /* pagemap.c */
extern const TdeMainHook tdeAnchorHook;   /* anchor.c */
extern const TdeMainHook tdeRekeyHook;    /* rekey.c */
extern const TdeMainHook tdeCaptureHook;  /* capture.c */
extern const TdeMainHook tdeUpgradeHook;  /* upgrade3.c */
int tdeMainHookLoaded(TdeFile *pMain, int bNew);
void tdeMainHookWriteLock(TdeFile *pMain);
void tdeMainHookWriteEnd(TdeFile *pMain, int bWal);
int tdeMainHookBeforeKeyDrop(TdeFile *pMain);
int tdeMainHookPageRescue(TdeFile *pMain, uint32_t pgno, uint32_t pgsz, uint8_t *aOut, uint8_t aTag[16]);
void tdeMainHookWalLock(TdeFile *pMain, int bLock);
void tdeMainHookWalEnd(TdeFile *pMain, sqlite3_file *pWal, int eWhy, const uint8_t *aNewHdr, int bUnmap);
int tdeMainHookPageCheck(TdeFile *pMain, uint32_t pgno, const uint8_t aTag[16], int bLast);
/* The read path's check stage (vfs.c): may page pgno, stored tag aTag, be
** served to this reader?  Also tde_verify's freshness check of each page. */
int tdeMainCheckPage(TdeFile *p, uint32_t pgno, const uint8_t *aTag, uint8_t *aPage, int iAmt);
int tdeMainHookWriteOutsideWal(TdeFile *pMain);
int tdeMainHookWalFold(TdeFile *pMain, const uint32_t *aPgno, const uint8_t *aTag, uint32_t nFrame, uint32_t nDb);

/* anchor.c: the external freshness anchor (its hooks: tdeAnchorHook). */
/* For tde_status: anchor kind ("off", "file", "pkcs11", "off (format
** version 1)"), the header's anchor counter, the time of the newest anchor
** record this connection read or wrote (0: none). */
int tdeMainAnchorInfo(TdeFile *pMain, const char **pzKind, uint64_t *pA, int64_t *pt);
/* anchor.c: the core of tde_db_reanchor (repair.c), under the write lock
** on its own connection: the store's counter (if a record was found), the
** header's before, and the new one, for the audit line; the name of an
** anchor kind for audit lines. */
typedef struct TdeReanchor { uint64_t storeA, fileA, newA; int bFound; } TdeReanchor;
int tdeMainReanchor(TdeFile *pMain, TdeReanchor *pr);
const char *tdeAnchorKindName(int eKind);

/* pagemap.c (docs/FORMAT.md "Page rollback: the page map"; its check and
** fold only through its hooks, tdeMapHook).  Drop: a write outside the
** WAL follows (journal.c, a fold whose end is unknown, tde_db_remap). */
int tdeMapActive(TdeFile *p);
int tdeMapDrop(TdeFile *p);
/* Version 3: the physical size the map in force needs (the end of its
** last region in the database file), 0 if none: truncations keep it. */
sqlite3_int64 tdeMapKeepBytes(TdeFile *p);
int tdeMapShrink(TdeFile *p, uint32_t nPage);
void tdeMapFree(TdeFile *p);
/* repair.c: set p->mBypass from the URI parameter tde_bypass of a main
** file, which only tde_db_remap / tde_db_reanchor can fill (a one-time
** random token of the call, registered while it runs). */
void tdeBypassFromUri(TdeFile *p, const char *zName);
/* wal.c: the tag of the newest frame for pgno at or below bound (a commit
** frame index; UINT32_MAX: the verified end) of the generation with salts
** aSalt (NULL: the WAL's own); *pbFound 0 if none.  Fold the committed
** frames of the WAL's generation into the page map. */
int tdeWalNewestTag(TdeFile *p, uint32_t pgno, uint32_t bound, const uint8_t *aSalt,
                    uint8_t aTag[8], int *pbFound);
int tdeWalFoldMap(TdeFile *p);
int tdeWalFoldMapFile(TdeFile *pMain, const char *zWal);
/* wal.c: frame MACs computed by this process so far (tests count the
** cost of a read with it). */
uint64_t tdeWalMacCount(void);
int tdeWalFoldMapTo(TdeFile *p, uint32_t bound);

/* upgrade.c: format version 1 -> 2 (caller holds the write lock, the WAL
** emptied); *pbDone 1 if this call upgraded it. */
int tdeMainUpgradeV2(TdeFile *pMain, int *pbDone);
/* upgrade3.c: format version 1 -> 2 (as above), then to 3 if iTo is 3
** (the move of the pages, docs/FORMAT.md "Upgrade from version 2"); caller
** holds the write lock, the WAL emptied; *pbDone 1 if this call changed
** the version or finished a move. */
int tdeMainUpgrade(TdeFile *pMain, int iTo, int *pbDone);
/* upgrade3.c: a writer (the write-lock check, vfs.c) finds a version-3
** header with a move not finished: finish it under an EXCLUSIVE lock taken
** without waiting (SQLITE_BUSY if another connection is open). */
int tdeUpgradeFinish(TdeFile *pMain);
/* upgrade3.c: after a rekey's finish (tde_db_rekey, under its last lock),
** the move to version 3 (as tdeMainUpgrade to 3).  The rekey is done
** whatever it returns: a move that cannot have its lock is left for
** `sqlite-tde upgrade` (audited, logged); one stopped midway is finished
** by the next writer. */
int tdeMainUpgradeAfterRekey(TdeFile *pMain);
/* pagemap.c, for the upgrade to version 3: does DB-tdemap hold the map
** the header names; the map's slots in force into the file's regions
** (*pOut: the header's map fields after); DB-tdemap deleted. */
typedef struct TdeMapFields { uint8_t aRoot[16]; uint64_t G; uint32_t n; } TdeMapFields;
int tdeMapCheckSource(TdeFile *pMain);
int tdeMapIntoFile(TdeFile *pMain, uint32_t nPage, TdeMapFields *pOut);
int tdeMapRemoveFile(TdeFile *pMain, int *pbRemoved);
/* The header fields an upgrade writes; whether the WAL holds no frame (1
** in rollback mode); the audit line of an upgrade (zHow on success). */
void tdeUpgradeEdit(TdeHeader *h);
int tdeUpgradeWalEmpty(TdeFile *pMain);
void tdeUpgradeAudit(TdeFile *pMain, int rc, const char *zHow);

/* rekey.c: re-encrypt every page under a new data-key version. */
int tdeRekeyInProgress(const TdeDbKeys *k);
int tdeMainRekeyBegin(TdeFile *pMain);
int tdeMainRekeyStep(TdeFile *pMain, int nMax, sqlite3_int64 *pnRewritten,
                     sqlite3_int64 *pnPages, int *pbClean);
int tdeMainRekeyFinish(TdeFile *pMain);
int tdeRekeyRecover(TdeFile *pMain);
int tdeMainCountVersions(TdeFile *pMain, uint32_t *aVersion, sqlite3_int64 *anPages, int nMax,
                         int *pnFound);

/* status.c: per-connection SQL objects; PRAGMA text. */
int tdeStatusRegister(sqlite3 *db);
char *tdeStatusPragma(TdeFile *p);   /* sqlite3_malloc'd */

#endif /* TDE_VFS_INT_H */
