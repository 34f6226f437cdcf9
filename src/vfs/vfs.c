/*
** The tde VFS shim: sits on the default VFS (unix) and encrypts every file
** SQLite writes.  This file holds the VFS object, xOpen's dispatch by file
** kind, the method table, and the main database file:
**
**   file offset 0 .. TDE_HEADER_BYTES   two header slots (keys/keys.h)
**   then the pages, where keys/layout.h puts them (version 1 and 2: page N
**   at TDE_HEADER_BYTES + (N-1)*pgsz), sealed with AES-256-GCM, each with
**   its 48-byte trailer in the page's reserved bytes (docs/FORMAT.md).
**
** Must never: return a page that failed authentication (the buffer is
** wiped and SQLITE_IOERR_AUTH returned), write plaintext, hand SQLite an
** mmap pointer (ciphertext), or talk to a keystore except through
** keys/keys.h at open.  Pattern: SQLite's ext/misc/cksumvfs.c.
*/
#include "vfs/vfs_int.h"
#include "keystore/keystore.h"
#include "audit/audit.h"
#include "config.h"

#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define ORIGVFS(p) ((sqlite3_vfs*)((p)->pAppData))
#define REALFILE(p) (((TdeFile*)(p))->pReal)

/* Device characteristics we must hide: our files are not written
** atomically by the device, and journals/main pages need sector-safe
** alignment (see docs/FORMAT.md "Crash safety"). */
#define TDE_IOCAP_CLEAR (SQLITE_IOCAP_ATOMIC | SQLITE_IOCAP_ATOMIC512 | SQLITE_IOCAP_ATOMIC1K \
  | SQLITE_IOCAP_ATOMIC2K | SQLITE_IOCAP_ATOMIC4K | SQLITE_IOCAP_ATOMIC8K | SQLITE_IOCAP_ATOMIC16K \
  | SQLITE_IOCAP_ATOMIC32K | SQLITE_IOCAP_ATOMIC64K | SQLITE_IOCAP_SAFE_APPEND \
  | SQLITE_IOCAP_BATCH_ATOMIC)

static int tdeClose(sqlite3_file*);
static int tdeRead(sqlite3_file*, void*, int iAmt, sqlite3_int64 iOfst);
static int tdeWrite(sqlite3_file*, const void*, int iAmt, sqlite3_int64 iOfst);
static int tdeTruncate(sqlite3_file*, sqlite3_int64 size);
static int tdeSync(sqlite3_file*, int flags);
static int tdeFileSize(sqlite3_file*, sqlite3_int64 *pSize);
static int tdeLock(sqlite3_file*, int);
static int tdeUnlock(sqlite3_file*, int);
static int tdeCheckReservedLock(sqlite3_file*, int *pResOut);
static int tdeFileControl(sqlite3_file*, int op, void *pArg);
static int tdeSectorSize(sqlite3_file*);
static int tdeDeviceCharacteristics(sqlite3_file*);
static int tdeShmMap(sqlite3_file*, int iPg, int pgsz, int, void volatile**);
static int tdeShmLock(sqlite3_file*, int offset, int n, int flags);
static void tdeShmBarrier(sqlite3_file*);
static int tdeShmUnmap(sqlite3_file*, int deleteFlag);
static int tdeFetch(sqlite3_file*, sqlite3_int64 iOfst, int iAmt, void **pp);
static int tdeUnfetch(sqlite3_file*, sqlite3_int64 iOfst, void *p);
static void tdeKindFree(TdeFile *p);

static int tdeVfsOpen(sqlite3_vfs*, const char *, sqlite3_file*, int, int*);
static int tdeVfsDelete(sqlite3_vfs*, const char *zName, int syncDir);
static int tdeVfsAccess(sqlite3_vfs*, const char *zName, int flags, int *);
static int tdeVfsFullPathname(sqlite3_vfs*, const char *zName, int, char *zOut);
static void *tdeVfsDlOpen(sqlite3_vfs*, const char *zFilename);
static void tdeVfsDlError(sqlite3_vfs*, int nByte, char *zErrMsg);
static void (*tdeVfsDlSym(sqlite3_vfs *pVfs, void *p, const char*zSym))(void);
static void tdeVfsDlClose(sqlite3_vfs*, void*);
static int tdeVfsRandomness(sqlite3_vfs*, int nByte, char *zOut);
static int tdeVfsSleep(sqlite3_vfs*, int microseconds);
static int tdeVfsCurrentTime(sqlite3_vfs*, double*);
static int tdeVfsGetLastError(sqlite3_vfs*, int, char *);
static int tdeVfsCurrentTimeInt64(sqlite3_vfs*, sqlite3_int64*);
static int tdeVfsSetSystemCall(sqlite3_vfs*, const char*, sqlite3_syscall_ptr);
static sqlite3_syscall_ptr tdeVfsGetSystemCall(sqlite3_vfs*, const char*);
static const char *tdeVfsNextSystemCall(sqlite3_vfs*, const char*);

sqlite3_vfs tdeVfs = {
  3,                            /* iVersion (set from the VFS below) */
  0,                            /* szOsFile (set when registered) */
  1024,                         /* mxPathname (set when registered) */
  0,                            /* pNext */
  TDE_VFS_NAME,                 /* zName */
  0,                            /* pAppData: the VFS below */
  tdeVfsOpen,                   /* xOpen */
  tdeVfsDelete,                 /* xDelete */
  tdeVfsAccess,                 /* xAccess */
  tdeVfsFullPathname,           /* xFullPathname */
  tdeVfsDlOpen,                 /* xDlOpen */
  tdeVfsDlError,                /* xDlError */
  tdeVfsDlSym,                  /* xDlSym */
  tdeVfsDlClose,                /* xDlClose */
  tdeVfsRandomness,             /* xRandomness */
  tdeVfsSleep,                  /* xSleep */
  tdeVfsCurrentTime,            /* xCurrentTime */
  tdeVfsGetLastError,           /* xGetLastError */
  tdeVfsCurrentTimeInt64,       /* xCurrentTimeInt64 */
  tdeVfsSetSystemCall,          /* xSetSystemCall */
  tdeVfsGetSystemCall,          /* xGetSystemCall */
  tdeVfsNextSystemCall          /* xNextSystemCall */
};

const sqlite3_io_methods tdeIoMethods = {
  3,                            /* iVersion */
  tdeClose,                     /* xClose */
  tdeRead,                      /* xRead */
  tdeWrite,                     /* xWrite */
  tdeTruncate,                  /* xTruncate */
  tdeSync,                      /* xSync */
  tdeFileSize,                  /* xFileSize */
  tdeLock,                      /* xLock */
  tdeUnlock,                    /* xUnlock */
  tdeCheckReservedLock,         /* xCheckReservedLock */
  tdeFileControl,               /* xFileControl */
  tdeSectorSize,                /* xSectorSize */
  tdeDeviceCharacteristics,     /* xDeviceCharacteristics */
  tdeShmMap,                    /* xShmMap */
  tdeShmLock,                   /* xShmLock */
  tdeShmBarrier,                /* xShmBarrier */
  tdeShmUnmap,                  /* xShmUnmap */
  tdeFetch,                     /* xFetch */
  tdeUnfetch                    /* xUnfetch */
};


/* A short display name for log messages. */
static const char *tdeFileName(TdeFile *p){
  return p->zName ? p->zName : "(temp file)";
}







/* ---- keys of the main database ----------------------------------------- */

/* Audit a key operation on this database (never key bytes). */
void tdeAuditKeys(TdeDbKeys *k, const char *zDbPath, const char *zOp, int trc){
  TdeAuditRec r;
  tdeAuditInit(&r, zOp);
  r.bFailure = trc!=TDE_OK;
  r.zDbPath = zDbPath;
  r.aDbid = k->hdr.dbid;
  r.zKeystore = k->pKs ? k->pKs->pMethods->zName : 0;
  r.zKeyId = k->zMasterKey[0] ? k->zMasterKey : 0;
  r.keyVersion = k->hdr.curVersion;
  r.zDetail = trc ? tde_last_error() : 0;
  tdeAudit(k->pCfg, &r);
}

static void tdeKeysFree(TdeDbKeys *k){
  if( !k ) return;
  if( k->bRetained ) tdeRegistryRelease(k->pKs);
  tdeKeysFreeVersions(k);
  tdeWipe(&k->hdr, sizeof(k->hdr));
  sqlite3_free(k);
}

static TdeDbKeys *tdeKeysAlloc(void){
  TdeDbKeys *k = sqlite3_malloc(sizeof(*k));
  if( !k ) return 0;
  memset(k, 0, sizeof(*k));
  return k;
}


/* Install keys on the handle: copy the database id and create this
** handle's sealing session. */
static int tdeInstallKeys(TdeFile *p, TdeDbKeys *k){
  int rc;
  memcpy(p->dbid, k->hdr.dbid, TDE_DBID_BYTES);
  if( p->pCipher ){ tdePageCipherFree(p->pCipher); p->pCipher = 0; }
  rc = tdePageCipherNew(k->aDek, k->hdr.curVersion, &p->pCipher);
  return rc ? tdeSqliteRc(rc) : SQLITE_OK;
}

/* Make k the keys of main file p: its own sealing session, a reference
** on the keystore, ownership (*pk becomes NULL on success).  Then the
** features' checks at load (the xLoaded hook, raised here only: the
** freshness anchor; bNew: a database just created); if one refuses, k
** goes back to the caller (*pk) and p holds no keys. */
static int tdeAdoptKeys(TdeFile *p, TdeDbKeys **pk, int bNew){
  TdeDbKeys *k = *pk;
  int rc = tdeInstallKeys(p, k);
  if( rc ) return rc;
  p->pDb->pKeys = k;               /* with the reference tdeRegistryAcquire took */
  *pk = 0;
  rc = tdeMainHookLoaded(p, bNew);
  if( rc ){ *pk = k; p->pDb->pKeys = 0; }
  return rc;
}

/* The load's key (tdeHdrRead): open the keystore the configuration
** names (the handle's URI may name the configuration), unwrap every data
** key version the picked header lists into the new keyring k (pArg; its
** header is the one picked), audited, and answer the current one. */
static int loadKey(TdeFile *p, const TdeHeader *pHdr, void *pArg, uint8_t *aDek){
  TdeDbKeys *k = pArg;
  const char *zUriCfg = p->zName ? sqlite3_uri_parameter(p->zName, "tde_config") : 0;
  int trc = tdeConfigLocate(zUriCfg, k->zConfig, sizeof(k->zConfig));
  (void)pHdr;
  if( trc==TDE_OK ) trc = tdeRegistryAcquire(k->zConfig, NULL, &k->pKs, &k->pCfg);
  if( trc==TDE_OK ) k->bRetained = 1;     /* tdeKeysFree releases it */
  if( trc==TDE_OK ){
    trc = tdeKeysUnlockAll(k);
    if( trc==TDE_OK ) tdeKeysNoteMasterKey(k);
    tdeAuditKeys(k, p->zName, "dek_unwrap", trc);
  }
  if( trc==TDE_OK ) memcpy(aDek, k->aDek, 32);
  return trc;
}

/*
** Read the header region of a non-empty main file, pick the newest valid
** slot, unwrap the data key, check the header MAC (tdeHdrRead, loadKey).
** On success p->pDb->pKeys is set.  Errors: SQLITE_NOTADB (plaintext, foreign,
** damaged), SQLITE_AUTH (keystore or key unavailable), with the detail in
** tde_last_error() and the log.
*/
static int tdeMainLoad(TdeFile *p, sqlite3_int64 nSize){
  TdeHdrRead r;
  TdeDbKeys *k = 0;
  int rc = SQLITE_OK, trc;

  memset(&r, 0, sizeof(r));
  k = tdeKeysAlloc();
  if( !k ){ rc = SQLITE_NOMEM; goto done; }
  r.nRead = nSize < TDE_HEADER_BYTES ? (int)nSize : TDE_HEADER_BYTES;
  r.xKey = loadKey;
  r.pArg = k;
  r.pHdr = &k->hdr;
  rc = tdeHdrRead(p, &r, &trc);
  if( rc ) goto done;
  k->iSlot = r.iSlot;
  if( trc ){
    rc = trc==TDE_AUTH ? SQLITE_NOTADB : tdeSqliteRc(trc);
    goto done;
  }
  tdeKeysNoteMasterKey(k);
  tdeKeysCheckStale(k);
  {
    /* The other slot should hold the same or an older valid header; say so
    ** when it does not (the database still opens from the good slot). */
    /* The check is not optional (a damaged slot not flagged is never
    ** rewritten): no memory for it fails the open. */
    TdeHeader *pOther = sqlite3_malloc(sizeof(TdeHeader));
    int iOther = 1 - k->iSlot;
    if( !pOther ){ rc = SQLITE_NOMEM; goto done; }
    if( r.nRead < (iOther+1)*TDE_SLOT_SIZE
     || tdeHeaderDecode(r.aRegion + iOther*TDE_SLOT_SIZE, pOther)!=TDE_OK ){
      tdeLog(TDE_LOG_WARNING, "%s: header slot %d is damaged; using slot %d "
             "(the next write transaction rewrites slot %d)",
             tdeFileName(p), iOther, k->iSlot, iOther);
      k->bSlotDamaged = 1;
    }
    sqlite3_free(pOther);
    tdeErrClear();
  }
  rc = tdeAdoptKeys(p, &k, 0);

done:
  if( rc && rc!=SQLITE_NOMEM ){
    tdeLog(TDE_LOG_ERROR, "%s: cannot open encrypted database: %s", tdeFileName(p), tde_last_error());
  }
  tdeKeysFree(k);
  tdeHdrReadDone(&r);
  return rc;
}

/* The format version of a new database (docs/CONFIGURATION.md
** format_version): the configuration's "1", "2" or "3" (the config check
** refused others), else the library's default, 3 (keys/keys.h
** tdeCreateVersion: the test suites' hook for their format-2 twins).  "2"
** is for databases that builds before version 3 was the default must
** read, "1" for a fleet that still has version-1 readers (and for the
** benchmark kit's cost-of-version-2 comparison). */
int tdeNewFormatVersion(const TdeConfig *pCfg){
  const char *z = pCfg ? tdeConfigGet(pCfg, "format_version") : 0;
  if( z && strcmp(z, "1")==0 ) return TDE_FORMAT_V1;
  if( z && strcmp(z, "2")==0 ) return TDE_FORMAT_V2;
  if( z && strcmp(z, "3")==0 ) return TDE_FORMAT_V3;
  return tdeCreateVersion();
}

/* A version-1 header has no freshness area: the log epoch stays 0. */
static int tdeCreateFormat(const TdeConfig *pCfg, TdeHeader *h){
  h->version = (uint16_t)tdeNewFormatVersion(pCfg);
  h->logEpoch = h->version>=TDE_FORMAT_V2 ? 1 : 0;
  return TDE_OK;
}

/*
** Create the header of a new database: a random id and data key wrapped
** by the keystore's current master key, written to both slots, then
** synced.  The caller holds SQLite's write lock (we are called from
** the first write to the file or from the journal's open).
*/
static int tdeMainCreate(TdeFile *p){
  uint8_t *aRegion = 0;
  TdeDbKeys *k = 0;
  uint8_t macKey[32];
  int rc = SQLITE_OK, trc;
  const char *zUriCfg = p->zName ? sqlite3_uri_parameter(p->zName, "tde_config") : 0;

  if( p->bReadOnly ) return SQLITE_READONLY;
  aRegion = sqlite3_malloc(TDE_HEADER_BYTES);
  k = tdeKeysAlloc();
  if( !aRegion || !k ){ rc = SQLITE_NOMEM; goto done; }
  memset(aRegion, 0, TDE_HEADER_BYTES);
  trc = tdeConfigLocate(zUriCfg, k->zConfig, sizeof(k->zConfig));
  if( trc==TDE_OK ) trc = tdeRegistryAcquire(k->zConfig, NULL, &k->pKs, &k->pCfg);
  if( trc==TDE_OK ) k->bRetained = 1;     /* tdeKeysFree releases it */
  if( trc==TDE_OK ){
    uint8_t *aDek = tdeSecureAlloc(32);
    trc = aDek ? tdeKeyringCreate(k->pKs, &k->hdr, aDek) : TDE_NOMEM;
    if( trc==TDE_OK ) trc = tdeCreateFormat(k->pCfg, &k->hdr);
    if( trc==TDE_OK ) trc = tdeKeysAddVersion(k, k->hdr.curVersion, aDek);
    tdeSecureFree(aDek, 32);
    if( trc==TDE_OK ) tdeKeysNoteMasterKey(k);
    tdeAuditKeys(k, p->zName, "dek_create", trc);
  }
  if( trc==TDE_OK ) trc = tdeHeaderMacKey(k->aDek, k->hdr.dbid, macKey);
  if( trc==TDE_OK ) trc = tdeHeaderEncode(&k->hdr, macKey, aRegion);
  /* Both slots start with the same header, so one damaged slot (a bad
  ** sector) does not make the database unopenable. */
  if( trc==TDE_OK ) memcpy(aRegion + TDE_SLOT_SIZE, aRegion, TDE_SLOT_SIZE);
  tdeWipe(macKey, sizeof(macKey));
  if( trc ){ rc = tdeSqliteRc(trc); goto done; }
  rc = p->pReal->pMethods->xWrite(p->pReal, aRegion, TDE_HEADER_BYTES, 0);
  if( rc==SQLITE_OK ) rc = p->pReal->pMethods->xSync(p->pReal, SQLITE_SYNC_NORMAL);
  if( rc ) goto done;
  tdeKeysNoteMasterKey(k);
  rc = tdeAdoptKeys(p, &k, 1);

done:
  if( rc && rc!=SQLITE_NOMEM ){
    tdeLog(TDE_LOG_ERROR, "%s: cannot create encrypted database: %s", tdeFileName(p), tde_last_error());
  }
  tdeKeysFree(k);
  sqlite3_free(aRegion);
  return rc;
}

/*
** Make sure the main file's keys are loaded.  An empty file stays keyless
** until something must be written (bCreate).  A file that holds only a
** partly written header (size <= header region, no valid slot) while
** another connection is creating it counts as empty.
*/
/* A file of at most the header region holding no valid header but only
** zeros and our magic: a header write torn by a crash at creation (no
** page was ever written after it).  Anything else is a foreign file. */
static int tdeTornCreation(TdeFile *p, sqlite3_int64 sz){
  uint8_t *a;
  int bShort = 0, bTorn = 0;
  /* The header region is written whole; a crash tears it at a sector
  ** boundary (512 bytes at least).  Any other size (a 100-byte file that
  ** starts with the magic) is not ours to turn into a new database. */
  if( sz%512!=0 ) return 0;
  a = sqlite3_malloc(TDE_HEADER_BYTES);
  if( !a ) return 0;
  memset(a, 0, TDE_HEADER_BYTES);
  if( tdeRealRead(p, a, (int)sz, 0, &bShort)==SQLITE_OK ){
    int i;
    for(i=0; i<sz && a[i]==0; i++){}
    bTorn = i==sz || memcmp(a, TDE_HDR_MAGIC, 8)==0 || memcmp(a+TDE_SLOT_SIZE, TDE_HDR_MAGIC, 8)==0;
  }
  sqlite3_free(a);
  return bTorn;
}

static int tdeMainCreate(TdeFile *p);

int tdeMainEnsureKeys(TdeFile *p, int bCreate){
  sqlite3_int64 sz = 0;
  int rc;
  if( p->pDb->pKeys ) return SQLITE_OK;
  rc = p->pReal->pMethods->xFileSize(p->pReal, &sz);
  if( rc ) return rc;
  if( sz==0 ){
    return bCreate ? tdeMainCreate(p) : SQLITE_OK;
  }
  rc = tdeMainLoad(p, sz);
  if( rc==SQLITE_NOTADB && sz<=TDE_HEADER_BYTES ){
    if( !bCreate ) return SQLITE_OK;   /* header being created by another connection */
    if( tdeTornCreation(p, sz) ) return tdeMainCreate(p);   /* torn at creation; we hold the write lock */
  }
  return rc;
}

/*
** Check both header slots on disk: each must parse and carry a MAC made
** with this database's key.  *piBad gets the first damaged slot (-1 if
** none).  Used by tde_verify; an open only needs one good slot.
*/
/* tde_verify's key for a slot (tdeHdrRead): the keystore unwraps the
** slot's current data key. */
static int checkKey(TdeFile *p, const TdeHeader *pHdr, void *pArg, uint8_t *aDek){
  (void)pArg;
  return tdeKeyringUnlock(p->pDb->pKeys->pKs, pHdr, pHdr->curVersion, aDek);
}

int tdeMainCheckHeader(TdeFile *p, int *piBad){
  TdeHdrRead r;
  TdeHeader *pHdr;
  int rc, trc;
  *piBad = -1;
  if( !p->pDb->pKeys ) return TDE_OK;
  memset(&r, 0, sizeof(r));
  pHdr = sqlite3_malloc(sizeof(TdeHeader));
  if( !pHdr ) return TDE_NOMEM;
  r.nRead = TDE_HEADER_BYTES;
  r.bEach = 1;
  r.aDbid = p->pDb->pKeys->hdr.dbid;
  r.xKey = checkKey;
  r.pHdr = pHdr;
  rc = tdeHdrRead(p, &r, &trc);
  if( rc==SQLITE_NOMEM ) trc = TDE_NOMEM;
  else if( rc ) trc = tdeErr(TDE_IO, "cannot read the header");
  else if( trc==TDE_AUTH ) *piBad = r.iSlot;
  tdeWipe(pHdr, sizeof(TdeHeader));
  sqlite3_free(pHdr);
  tdeHdrReadDone(&r);
  return trc;
}



/* Does a rollback journal, a WAL or a rekey journal exist next to this
** main database? */
static int tdeHasJournalOrWal(TdeFile *p){
  static const char *const azSuffix[] = { "-journal", "-wal", "-tderekey" };
  sqlite3_vfs *pOrig = ORIGVFS(&tdeVfs);
  int bExists = 0;
  if( !p->zName ) return 0;
  for(size_t i=0; i<TDE_ARRAY_SIZE(azSuffix) && !bExists; i++){
    char *z = sqlite3_mprintf("%s%s", p->zName, azSuffix[i]);
    if( !z ) return 0;
    if( pOrig->xAccess(pOrig, z, SQLITE_ACCESS_EXISTS, &bExists) ) bExists = 0;
    sqlite3_free(z);
  }
  return bExists;
}

/*
** Page 1 failed authentication on a partial read.  SQLite reads the
** 100-byte file header before it looks for a hot journal or a WAL, and a
** page 1 torn by a crash is restored by one of them: for that read, when
** one exists, answer "no header" (the caller zeroed the buffer; never
** unauthenticated bytes) and let SQLite recover.  If it cannot, its full
** read of page 1 fails authentication later.  The same answer, for the
** same reason, when no lock is held: that read is SQLite's peek at open
** (sqlite3PagerReadFileheader, for a page size to start with), and another
** connection may be writing page 1 right then (a torn read, not damage:
** not counted).  SQLite reads page 1 again under its SHARED lock, where a
** page that fails is failed, logged and counted.
*/
static int tdeHeaderReadFailed(TdeFile *p, sqlite3_int64 iOfst, int iAmt){
  if( iOfst==0 && iAmt<=100 && p->pDb->eLockHeld==SQLITE_LOCK_NONE ){
    tdeLog(TDE_LOG_INFO, "%s: page 1 did not authenticate in the file-header read SQLite makes "
           "with no lock held (another connection writing it?); answered \"no header\", "
           "SQLite reads it again under its lock", tdeFileName(p));
    tdeErrClear();
    return SQLITE_OK;
  }
  if( iOfst==0 && iAmt<=100 && tdeHasJournalOrWal(p) ){
    tdeLog(TDE_LOG_WARNING, "%s: page 1 failed authentication; a journal or WAL exists, "
           "letting SQLite recover from it", tdeFileName(p));
    return SQLITE_OK;
  }
  return SQLITE_IOERR_AUTH;
}

/*
** The database size in pages committed on disk, into *pn: the in-header
** size of the authenticated page 1 (offset 28, valid when the
** version-valid-for number at 92 equals the change counter at 24, as
** SQLite's file format says), and in WAL mode at least the size SQLite's
** WAL index names (unauthenticated, so it may only make the answer larger,
** which is stricter).  0 when the file holds no whole page 1 yet (nothing
** committed).  UINT32_MAX when page 1 fails authentication or its size is
** not valid: then no page counts as never written.  Uses p->aBuf.
*/
static int tdeMainCommittedPages(TdeFile *p, uint32_t pgsz, uint32_t *pn){
  int rc, bShort;
  uint32_t n;
  *pn = UINT32_MAX;
  rc = tdeScratch(p);
  if( rc ) return rc;
  rc = tdeRealRead(p, p->aBuf, (int)pgsz, tdeMainPageOff(p, pgsz, 1), &bShort);
  if( rc ) return rc;
  if( bShort ){
    n = 0;
  }else if( tdeOpenPage(p, p->aBuf, pgsz, 1, 0)==SQLITE_OK ){
    n = memcmp(p->aBuf+24, p->aBuf+92, 4)==0 ? tdeGet32(p->aBuf+28) : UINT32_MAX;
  }else{
    uint8_t aTag[16];           /* reported, if at all, by the read of page 1 itself */
    n = tdeMainRescuePage(p, 1, pgsz, p->aBuf, aTag)==SQLITE_OK && memcmp(p->aBuf+24, p->aBuf+92, 4)==0
        ? tdeGet32(p->aBuf+28) : UINT32_MAX;
  }
  if( n!=UINT32_MAX && p->pDb->pShm0 ){
    uint32_t nWal;
    memcpy(&nWal, (const void*)((const volatile uint8_t*)p->pDb->pShm0 + 20), sizeof(nWal));
    if( nWal>n ) n = nWal;
  }
  tdeWipe(p->aBuf, pgsz);
  *pn = n;
  return SQLITE_OK;
}

/*
** Page pgno read as all zeros from inside the file.  SQLite legitimately
** reads such a page when a spilled transaction extended the file past a
** page it has not written yet: that is exactly a page beyond the size
** committed before the transaction's first write (or, outside a write,
** beyond the size committed on disk now): the hole rule (tdePageIsHole)
** with that size and no WAL exemption, as the page is returned.  *pbHole
** set if so; anywhere else the page is damage and fails authentication as
** usual.
*/
static int tdeMainIsHole(TdeFile *p, uint32_t pgno, uint32_t pgsz, int *pbHole){
  uint32_t nCommitted;
  int rc;
  *pbHole = 0;
  if( p->pDb->bTxnBase ){
    nCommitted = p->pDb->nTxnBase;
  }else{
    rc = tdeMainCommittedPages(p, pgsz, &nCommitted);
    if( rc ) return rc;
  }
  if( tdePageIsHole(pgno, nCommitted, 0) ){
    *pbHole = 1;
  }else{
    tdeLog(TDE_LOG_ERROR, "%s: database page %u is all zeros inside the committed database "
           "size (%u pages): erased or damaged", tdeFileName(p), pgno, nCommitted);
  }
  return SQLITE_OK;
}

/*
** A read of page pgno came back short.  A page the file ends inside of is
** damage (a truncated file), never a short read: fail it like a bad tag.
** Past the last whole page, SQLite's short-read contract: zero-filled,
** SQLITE_IOERR_SHORT_READ.
*/
static int tdeMainShortPage(TdeFile *p, uint8_t *zBuf, int iAmt, uint32_t pgno, uint32_t pgsz){
  sqlite3_int64 sz = 0;
  sqlite3_int64 iStart = tdeMainPageOff(p, pgsz, pgno);
  int rc = p->pReal->pMethods->xFileSize(p->pReal, &sz);
  memset(zBuf, 0, (size_t)iAmt);
  if( rc ) return rc;
  if( sz>iStart ){
    p->nAuthFail++;
    tdeLog(TDE_LOG_ERROR, "%s: database page %u is only partly present (the file ends %lld bytes "
           "into it: truncated)", tdeFileName(p), pgno, (long long)(sz-iStart));
    return SQLITE_IOERR_AUTH;
  }
  return SQLITE_IOERR_SHORT_READ;
}

/* The WAL index bound of this connection's read transaction for the page
** map's rule (docs/FORMAT.md "What a database page must be"): read mark
** k's value, or the backfill mark for slot 0; UINT32_MAX without a shared
** index.  aSalt: the index's generation (NULL if unknown). */
static uint32_t tdeMainReadBound(TdeFile *p, uint8_t aSalt[8], int *pbSalt){
  const volatile uint8_t *a = (const volatile uint8_t*)p->pDb->pShm0;
  uint32_t v;
  *pbSalt = 0;
  if( !a || p->pDb->map.iReadSlot1<=0 ) return UINT32_MAX;
  memcpy(&v, (const void*)(a + (p->pDb->map.iReadSlot1==1 ? 96 : 100 + 4*(p->pDb->map.iReadSlot1-1))), 4);
  memcpy(aSalt, (const void*)(a + 32), 8);
  *pbSalt = 1;
  return v;
}

/*
** The check stage, its hook (hooks.c xPageCheck: the page map of version
** 2): may database page pgno, whose trailer tag is aTag (16 bytes, as
** stored), be served?  The hook's record, else the newest frame for it at
** or below this reader's bound; the header (and map) read again once
** before the hook's refusal.  aPage (iAmt bytes)
** is wiped on refusal.  Every page a read returns passes here, rescued
** or not.
*/
int tdeMainCheckPage(TdeFile *p, uint32_t pgno, const uint8_t *aTag, uint8_t *aPage, int iAmt){
  int rc;
  /* No lock held: SQLite's header peek at open (sqlite3PagerReadFileheader),
  ** outside any read transaction and before the WAL is open, so the rule
  ** has no read mark to go by; a checkpoint may have copied page 1 from
  ** a WAL not yet folded.  SQLite reads page 1 again under SHARED, where
  ** the check is made. */
  if( p->pDb->eLockHeld==SQLITE_LOCK_NONE ) return SQLITE_OK;
  rc = tdeMainHookPageCheck(p, pgno, aTag, 0);
  for(int iTry=0; rc==SQLITE_NOTFOUND && iTry<2; iTry++){
    if( p->pDb->pWalFile ){
      uint8_t aSalt[8], aFrameTag[8];
      int bSalt = 0, bFound = 0;
      uint32_t bound = tdeMainReadBound(p, aSalt, &bSalt);
      rc = tdeWalNewestTag(p->pDb->pWalFile, pgno, bound, bSalt ? aSalt : 0, aFrameTag, &bFound);
      if( rc ) break;
      if( bFound && memcmp(aFrameTag, aTag, 8)==0 ) return SQLITE_OK;
      rc = SQLITE_NOTFOUND;
    }
    if( iTry==0 ){
      /* Another connection may have folded since this one read the header. */
      rc = tdeMainRefresh(p);
      if( rc ) break;
      rc = tdeMainHookPageCheck(p, pgno, aTag, 0);
    }
  }
  if( rc==SQLITE_NOTFOUND ) rc = tdeMainHookPageCheck(p, pgno, aTag, 1);   /* refused */
  if( rc ) memset(aPage, 0, (size_t)iAmt);
  return rc;
}

/* Returned by the read stages below (never to SQLite): the page size is
** not the one SQLite asked with; read in pieces of the real one. */
#define MAIN_BY_PIECES (-1)
/* ... a page SQLite left as a hole (all zeros, beyond the committed size). */
#define MAIN_HOLE      (-2)

/* An all-zero page read from inside the file: a hole SQLite left
** (MAIN_HOLE), or damage (SQLITE_IOERR_AUTH, logged and counted). */
static int tdeMainZeroPage(TdeFile *p, uint32_t pgno, uint32_t pgsz){
  int bHole = 0;
  int rc = tdeMainIsHole(p, pgno, pgsz, &bHole);
  if( rc ) return rc;
  if( bHole ) return MAIN_HOLE;
  p->nAuthFail++;
  return SQLITE_IOERR_AUTH;
}

/* A whole-page read came back short.  Page 1 at a size the file is not
** written in: another connection created the database (or changed its
** page size) after this one assumed SQLite's default, so find the real
** size (MAIN_BY_PIECES: serve what is there, as the unix VFS does; SQLite
** reads the real size from the header).  Otherwise tdeMainShortPage. */
static int tdeMainShortWhole(TdeFile *p, uint8_t *zBuf, uint32_t pgno, uint32_t pgsz){
  if( pgno==1 && p->pDb->pgsz!=pgsz ){
    int rc = tdeScratch(p);
    if( rc ) return rc;
    rc = tdeMainDiscoverPgsz(p);
    if( rc==SQLITE_OK && p->pDb->pgsz!=pgsz ) return MAIN_BY_PIECES;
    if( rc!=SQLITE_OK && rc!=SQLITE_IOERR_SHORT_READ ){ memset(zBuf, 0, pgsz); return rc; }
  }
  return tdeMainShortPage(p, zBuf, (int)pgsz, pgno, pgsz);
}

/*
** The rescue stage, after a whole page failed to open: one stage for every
** way an authentic page can still be had, whose result goes through the
** check stage like any page.  In order: read once more (a read racing
** another process's write of the same page, a checkpoint, sees a mix of
** both); the rescue hook (a page torn by an interrupted rekey: its old
** copy, rekey.c); and, when the page size was not known, the size found
** again (SQLite reads page 1 with its default size after a hot journal
** rollback: MAIN_BY_PIECES).  SQLITE_OK: plaintext in zBuf, its stored tag
** in aTag.  A failure is counted and logged once, here, when final.
*/
static int tdeMainRescue(TdeFile *p, uint8_t *zBuf, uint32_t pgno, uint32_t pgsz, uint8_t aTag[16]){
  int64_t vNoKey = -1;
  int bShort, rc;
  rc = tdeRealRead(p, zBuf, (int)pgsz, tdeMainPageOff(p, pgsz, pgno), &bShort);
  if( rc ) return rc;
  if( bShort ) return tdeMainShortPage(p, zBuf, (int)pgsz, pgno, pgsz);
  memcpy(aTag, zBuf + pgsz - 24, 16);
  rc = tdeOpenPage(p, zBuf, pgsz, pgno, &vNoKey);
  if( rc==SQLITE_IOERR_AUTH && p->pDb->pgsz==pgsz
   && tdeMainRescuePage(p, pgno, pgsz, zBuf, aTag)==SQLITE_OK ){
    rc = SQLITE_OK;
  }
  if( rc==SQLITE_IOERR_AUTH && p->pDb->pgsz ) tdeAuthFail(p, pgno, "database", vNoKey);
  if( rc==SQLITE_IOERR_AUTH && p->pDb->pgsz==0 ){
    rc = tdeScratch(p);
    if( rc ) return rc;
    rc = tdeMainDiscoverPgsz(p);
    if( rc==SQLITE_OK && p->pDb->pgsz!=pgsz ) return MAIN_BY_PIECES;
    if( rc==SQLITE_OK ) rc = SQLITE_IOERR_AUTH;
    memset(zBuf, 0, pgsz);
  }
  return rc;
}

/* A whole page of the size known (or the first one seen), decrypted in
** place in SQLite's buffer: locate, read, open, rescue (its hook), check
** (its hook). */
static int tdeMainReadWhole(TdeFile *p, uint8_t *zBuf, int iAmt, sqlite3_int64 iOfst){
  uint32_t pgsz = (uint32_t)iAmt, pgno = (uint32_t)(iOfst/iAmt) + 1;     /* locate */
  uint8_t aTrailer1[TDE_TRAILER_SIZE], aTag[16];
  int bShort, rc;
  rc = tdeRealRead(p, zBuf, iAmt, tdeMainPageOff(p, pgsz, pgno), &bShort);   /* read */
  if( rc ) return rc;
  if( bShort ) return tdeMainShortWhole(p, zBuf, pgno, pgsz);
  if( p->pDb->pgsz==pgsz && tdePageIsZero(zBuf, pgsz) ){
    rc = tdeMainZeroPage(p, pgno, pgsz);
    return rc==MAIN_HOLE ? SQLITE_OK : rc;      /* zeros, as SQLite left them */
  }
  if( pgno==1 ) memcpy(aTrailer1, zBuf + pgsz - TDE_TRAILER_SIZE, TDE_TRAILER_SIZE);
  memcpy(aTag, zBuf + pgsz - 24, 16);
  rc = tdeOpenPage(p, zBuf, pgsz, pgno, 0);                              /* open (pure) */
  if( rc==SQLITE_OK && pgno==1 ) tdePage1Keep(p, zBuf, pgsz, aTrailer1);
  if( rc==SQLITE_IOERR_AUTH ) rc = tdeMainRescue(p, zBuf, pgno, pgsz, aTag);   /* rescue */
  if( rc ) return rc;
  p->pDb->pgsz = pgsz;
  rc = tdeMainCheckPage(p, pgno, aTag, zBuf, iAmt);                       /* check */
  if( rc && pgno==1 ) tdePage1Forget(p);
  return rc;
}

/*
** One page of a read in pieces, into p->aBuf: read, open, rescue (the
** hook), check.  SQLITE_OK (plaintext in p->aBuf), MAIN_HOLE, or an error:
** *pbFinal 1 when it is the read's answer as it stands (zBuf wiped as the
** case requires), 0 when the page failed to open (the caller may find the
** page size again, or let SQLite recover from a journal).
*/
static int tdeMainReadPiece(TdeFile *p, uint8_t *zBuf, int iAmt, int nDone, uint32_t pgno,
                            int bRetried, int *pbFinal){
  uint32_t pgsz = p->pDb->pgsz;
  uint8_t aTag[16];
  int64_t vNoKey = -1;
  int bShort, rc;
  *pbFinal = 1;
  rc = tdeRealRead(p, p->aBuf, (int)pgsz, tdeMainPageOff(p, pgsz, pgno), &bShort);
  if( rc ) return rc;
  if( bShort ){
    /* Past the last whole page: what was read stays, the rest is zero; a
    ** page the file ends inside of fails (tdeMainShortPage). */
    rc = tdeMainShortPage(p, p->aBuf, (int)pgsz, pgno, pgsz);
    memset(zBuf+nDone, 0, (size_t)(iAmt-nDone));
    if( rc==SQLITE_IOERR_AUTH ) memset(zBuf, 0, (size_t)iAmt);
    return rc;
  }
  if( pgno>1 && tdePageIsZero(p->aBuf, pgsz) ){
    rc = tdeMainZeroPage(p, pgno, pgsz);
    if( rc!=MAIN_HOLE ) memset(zBuf, 0, (size_t)iAmt);
    return rc;
  }
  memcpy(aTag, p->aBuf + pgsz - 24, 16);
  rc = tdeOpenPage(p, p->aBuf, pgsz, pgno, &vNoKey);
  if( rc==SQLITE_IOERR_AUTH && tdeMainRescuePage(p, pgno, pgsz, p->aBuf, aTag)==SQLITE_OK ){
    rc = SQLITE_OK;
  }
  /* Page 1 on the first try may be read at a stale page size: the caller
  ** finds the size again before calling it damage. */
  if( rc==SQLITE_IOERR_AUTH && (bRetried || pgno!=1)
   && !(pgno==1 && p->pDb->eLockHeld==SQLITE_LOCK_NONE) ){      /* see tdeHeaderReadFailed */
    tdeAuthFail(p, pgno, "database", vNoKey);
  }
  if( rc ){ *pbFinal = 0; return rc; }
  rc = tdeMainCheckPage(p, pgno, aTag, p->aBuf, (int)pgsz);
  if( rc ) memset(zBuf, 0, (size_t)iAmt);
  return rc;
}

/* The page size for a read in pieces: found and, when page 1 authenticates
** at no size, logged and counted (SQLITE_IOERR_AUTH); with no lock held the
** same answer, quiet (tdeHeaderReadFailed says why). */
static int tdeMainPiecesPgsz(TdeFile *p){
  int rc;
  if( p->pDb->eLockHeld!=SQLITE_LOCK_NONE ) return tdeMainDiscoverPgsz(p);
  rc = tdeMainProbePgsz(p);
  return rc==SQLITE_NOTFOUND ? SQLITE_IOERR_AUTH : rc;
}

/* Part of a page (SQLite reads bits of the page 1 header this way), or a
** read whose size is not the page size: decrypt the pages it covers into
** scratch and copy. */
static int tdeMainReadPieces(TdeFile *p, uint8_t *zBuf, int iAmt, sqlite3_int64 iOfst){
  int nDone = 0, bRetried = 0, bFinal, rc;
  rc = tdeScratch(p);
  if( rc ) return rc;
  if( !p->pDb->pgsz ){
    rc = tdeMainPiecesPgsz(p);
    if( rc==SQLITE_IOERR_AUTH || rc==SQLITE_IOERR_SHORT_READ ) memset(zBuf, 0, (size_t)iAmt);
    if( rc==SQLITE_IOERR_AUTH ) return tdeHeaderReadFailed(p, iOfst, iAmt);
    if( rc ) return rc;
  }
  while( nDone<iAmt ){
    sqlite3_int64 off = iOfst + nDone;
    uint32_t pgno = (uint32_t)(off/p->pDb->pgsz) + 1;
    int iIn = (int)(off % p->pDb->pgsz);
    int n = (int)p->pDb->pgsz - iIn;
    if( n > iAmt-nDone ) n = iAmt-nDone;
    rc = tdeMainReadPiece(p, zBuf, iAmt, nDone, pgno, bRetried, &bFinal);
    if( rc==MAIN_HOLE ){ memset(zBuf+nDone, 0, (size_t)n); nDone += n; continue; }
    if( rc && bFinal ) return rc;
    if( rc && pgno==1 && !bRetried ){
      /* The page size may have changed under us (VACUUM elsewhere). */
      bRetried = 1;
      rc = tdeMainPiecesPgsz(p);
      if( rc==SQLITE_OK ) continue;
    }
    if( rc ) memset(zBuf, 0, (size_t)iAmt);
    if( rc==SQLITE_IOERR_AUTH ) return tdeHeaderReadFailed(p, iOfst, iAmt);
    if( rc ) return rc;
    memcpy(zBuf+nDone, p->aBuf+iIn, (size_t)n);
    nDone += n;
  }
  return SQLITE_OK;
}

/* xRead of the main database: a whole page, or the kept page 1 (the
** change counter and header reads), else the pages covered, in pieces. */
static int tdeMainRead(TdeFile *p, uint8_t *zBuf, int iAmt, sqlite3_int64 iOfst){
  int rc = tdeMainEnsureKeys(p, 0);
  if( rc ) return rc;
  if( !p->pDb->pKeys ){
    memset(zBuf, 0, (size_t)iAmt);
    return SQLITE_IOERR_SHORT_READ;
  }
  if( tdeValidPgsz(iAmt) && iOfst%iAmt==0 && (p->pDb->pgsz==0 || p->pDb->pgsz==(uint32_t)iAmt) ){
    rc = tdeMainReadWhole(p, zBuf, iAmt, iOfst);
  }else{
    rc = tdePage1Read(p, zBuf, iAmt, iOfst);
    if( rc==SQLITE_NOTFOUND ) rc = MAIN_BY_PIECES;
  }
  return rc==MAIN_BY_PIECES ? tdeMainReadPieces(p, zBuf, iAmt, iOfst) : rc;
}

static int tdeMainWrite(TdeFile *p, const uint8_t *zBuf, int iAmt, sqlite3_int64 iOfst){
  uint32_t pgno;
  int rc;
  /* Refuse what cannot be written before anything is: a new database's
  ** header is created only for a write that will succeed. */
  if( !tdeValidPgsz(iAmt) || iOfst%iAmt!=0 ){
    tdeLog(TDE_LOG_ERROR, "%s: refusing a %d-byte write at offset %lld that is not a whole page",
           tdeFileName(p), iAmt, (long long)iOfst);
    return SQLITE_IOERR_WRITE;
  }
  pgno = (uint32_t)(iOfst/iAmt) + 1;
  if( pgno==1 ){
    uint32_t hdrPgsz = ((uint32_t)zBuf[16]<<8) | ((uint32_t)zBuf[17]<<16);
    if( memcmp(zBuf, "SQLite format 3", 16)!=0 ){
      tdeLog(TDE_LOG_ERROR, "%s: page 1 does not carry a valid SQLite header", tdeFileName(p));
      return SQLITE_IOERR_WRITE;
    }
    if( hdrPgsz!=(uint32_t)iAmt ){
      /* SQLite writes pages of the old size holding pages of the new one;
      ** each stored page must be sealed whole, so this cannot be done in
      ** place.  The transaction fails and is rolled back. */
      tdeLog(TDE_LOG_ERROR, "%s: changing the page size of an encrypted database in place "
             "(PRAGMA page_size + VACUUM, or a backup from a database with another page size) "
             "is not supported; VACUUM INTO a new file instead, which may use any page size",
             tdeFileName(p));
      return SQLITE_IOERR_WRITE;
    }
    if( zBuf[20]<TDE_RESERVE_BYTES ){
      tdeLog(TDE_LOG_ERROR, "%s: the database has %d reserved bytes per page, sqlite-tde needs %d; "
             "a plaintext database must be converted with `sqlite-tde encrypt` (a new database "
             "gets them from the shim; if this one did not, SELECT tde_reserve('schema') before "
             "its first write)", tdeFileName(p), zBuf[20], TDE_RESERVE_BYTES);
      return SQLITE_IOERR_WRITE;
    }
  }
  rc = tdeMainEnsureKeys(p, 1);
  if( rc ) return rc;
  if( !p->pDb->ckpt.bHeld && !p->pDb->ckpt.bInCkpt ){
    /* Not a checkpoint's copy (rollback-journal mode): hooks.c, the page
    ** map is dropped (docs/FORMAT.md "Writes outside the WAL"). */
    rc = tdeMainHookWriteOutsideWal(p);
    if( rc ) return rc;
  }
  if( !p->pDb->bTxnBase ){
    /* First write since the lock or the last commit: remember what was
    ** committed, before page 1 on disk changes (tdeMainIsHole). */
    rc = tdeMainCommittedPages(p, (uint32_t)iAmt, &p->pDb->nTxnBase);
    if( rc ) return rc;
    p->pDb->bTxnBase = 1;
  }
  if( (p->pDb->ckpt.bHeld || p->pDb->ckpt.bInCkpt) && p->pDb->ckpt.bValid && pgno!=p->pDb->ckpt.pgno ){
    /* The checkpoint copies the frame page it just read to the position
    ** SQLite's (unauthenticated) WAL index names; that frame holds another
    ** page: the index was altered.  Never seal one page's content as
    ** another's. */
    tdeLog(TDE_LOG_ERROR, "%s: checkpoint would write page %u from a frame holding page %u: "
           "the WAL index (-shm) was tampered with", tdeFileName(p), pgno, p->pDb->ckpt.pgno);
    p->pDb->ckpt.bValid = 0;
    return SQLITE_IOERR_AUTH;
  }
  if( p->pDb->ckpt.bValid && pgno==p->pDb->ckpt.pgno && (uint32_t)iAmt==p->pDb->ckpt.pgsz
   && memcmp(zBuf, p->pDb->ckpt.aPlain, (size_t)iAmt)==0 ){
    /* A checkpoint copying the frame page it just read: that frame's
    ** ciphertext is already this page sealed for this position. */
    p->pDb->ckpt.bValid = 0;
    rc = p->pReal->pMethods->xWrite(p->pReal, p->pDb->ckpt.aCipher, iAmt, tdeMainPageOff(p, (uint32_t)iAmt, pgno));
    if( rc==SQLITE_OK ) p->pDb->pgsz = (uint32_t)iAmt;
    if( pgno==1 ) tdePage1Forget(p);
    return rc;
  }
  rc = tdeScratch(p);
  if( rc ) return rc;
  rc = tdeSealPage(p, zBuf, (uint32_t)iAmt, pgno, p->aBuf);
  if( rc ) return rc;
  rc = p->pReal->pMethods->xWrite(p->pReal, p->aBuf, iAmt, tdeMainPageOff(p, (uint32_t)iAmt, pgno));
  if( rc==SQLITE_OK ) p->pDb->pgsz = (uint32_t)iAmt;
  if( pgno==1 ){
    if( rc==SQLITE_OK ) tdePage1Keep(p, zBuf, (uint32_t)iAmt, p->aBuf + iAmt - TDE_TRAILER_SIZE);
    else tdePage1Forget(p);
  }
  return rc;
}

/* ---- standby copies ---------------------------------------------------- */

/*
** A standby copy is applied by another process (repl/standby.c) under
** rollback-mode locks.  Readers see page 1 as a rollback-mode database
** (bytes 18 and 19 = 1: no -wal, no -shm) whose change counter (offset 24)
** is the applied sequence number, so SQLite's pager, which re-reads those
** bytes at every read transaction, drops its cache after each applied
** transaction; offset 92 differs from it, so SQLite takes the size from the
** file.  Only what SQLite is handed changes, never the file.
**
** The database is read only through the handle's own descriptor: opening
** and closing another one would drop the POSIX locks of every connection
** of this process on the file, and the applier would write under a reader
** that believes it holds SHARED.  When the state cannot be read (or no
** longer names this database) the counter handed is one never handed
** before, so SQLite drops its cache rather than keep pages of an unknown
** version.  A base copy replaces the file (rename): a handle of the old
** file would read it for ever, so reads fail once the path names another
** file, and the application reopens.
*/
static int tdeStandbyStat(const char *zName, uint64_t *pDev, uint64_t *pIno){
  struct stat st;
  if( stat(zName, &st)!=0 ) return 0;
  *pDev = (uint64_t)st.st_dev;
  *pIno = (uint64_t)st.st_ino;
  return 1;
}

static int tdeStandbyDbid(TdeFile *p, uint8_t aDbid[16]){
  int rc = p->pReal->pMethods->xRead(p->pReal, aDbid, 16, 20);
  return rc==SQLITE_OK;
}

static int tdeStandbyPatch(TdeFile *p, uint8_t *zBuf, int iAmt, sqlite3_int64 iOfst){
  static const int aOff[] = { 18, 19, 24, 25, 26, 27, 92, 93, 94, 95 };
  static uint32_t nMiss = 0;
  uint8_t aVal[96], aDbid[16];
  uint64_t seq = 0, dev, ino;
  uint32_t v;
  if( iOfst>=96 ) return SQLITE_OK;
  if( !tdeStandbyStat(p->zName, &dev, &ino) || dev!=p->pDb->repl.standbyDev || ino!=p->pDb->repl.standbyIno ){
    memset(zBuf, 0, (size_t)iAmt);
    tdeLog(TDE_LOG_ERROR, "%s: the standby copy was replaced (a base copy) or removed since it was "
           "opened: close and reopen it", tdeFileName(p));
    return SQLITE_IOERR_READ;
  }
  if( tdeStandbyIsCopy(p->zName, tdeStandbyDbid(p, aDbid) ? aDbid : 0, &seq) ){
    v = (uint32_t)seq;
  }else{
    v = __atomic_sub_fetch(&nMiss, 1, __ATOMIC_RELAXED);
  }
  aVal[18] = aVal[19] = 1;
  tdePut32(aVal+24, v);
  tdePut32(aVal+92, ~v);
  for(size_t i=0; i<TDE_ARRAY_SIZE(aOff); i++){
    int o = aOff[i];
    if( o>=iOfst && o<iOfst+iAmt ) zBuf[o-iOfst] = aVal[o];
  }
  return SQLITE_OK;
}

static int tdeStandbyRefuse(TdeFile *p){
  tdeLog(TDE_LOG_ERROR, "%s is a standby copy (it has a -tdestandby state file): read-only; "
         "promote it (sqlite-tde standby --promote) to write", tdeFileName(p));
  return SQLITE_READONLY;
}

/* ---- io methods -------------------------------------------------------- */

static int tdeClose(sqlite3_file *pFile){
  TdeFile *p = (TdeFile*)pFile;
  int rc = SQLITE_OK;
  if( p->eKind==TDE_KIND_MAIN ) tdeMainListRemove(p);
  if( p->eKind==TDE_KIND_WAL && p->pMain && p->pMain->pDb->pWalFile==p ) p->pMain->pDb->pWalFile = 0;
  if( p->eKind==TDE_KIND_WAL ){
    rc = tdeWalFlush(p);
    tdeWalFree(p);
  }
  if( p->eKind==TDE_KIND_JOURNAL ) rc = tdeJournalFlush(p);
  if( p->eKind==TDE_KIND_TEMP ) rc = tdeBlockClose(p);
  tdeJournalFree(p);
  if( p->pReal->pMethods ){
    int rc2 = p->pReal->pMethods->xClose(p->pReal);
    if( rc==SQLITE_OK ) rc = rc2;
  }
  tdeCiphersFree(p);
  if( p->eKind==TDE_KIND_MAIN ){
    tdeMapFree(p);
    tdeKeysFree(p->pDb->pKeys);
    p->pDb->pKeys = 0;
    tdePage1Free(p);
    if( p->pDb->ckpt.aPlain ){ tdeWipe(p->pDb->ckpt.aPlain, TDE_MAX_PAGE); sqlite3_free(p->pDb->ckpt.aPlain); p->pDb->ckpt.aPlain = 0; }
    sqlite3_free(p->pDb->ckpt.aCipher);
    p->pDb->ckpt.aCipher = 0;
  }
  tdeKindFree(p);
  if( p->aBuf ){
    tdeWipe(p->aBuf, TDE_MAX_PAGE + 2*(TDE_BLOCK_MAX + TDE_TRAILER_SIZE) + 64);
    sqlite3_free(p->aBuf);
    p->aBuf = 0;
  }
  return rc;
}

static int tdeRead(sqlite3_file *pFile, void *zBuf, int iAmt, sqlite3_int64 iOfst){
  TdeFile *p = (TdeFile*)pFile;
  switch( p->eKind ){
    case TDE_KIND_MAIN: {
      int rc = tdeMainRead(p, zBuf, iAmt, iOfst);
      if( rc==SQLITE_OK && p->pDb->repl.bStandby ) rc = tdeStandbyPatch(p, zBuf, iAmt, iOfst);
      return rc;
    }
    case TDE_KIND_WAL:     return tdeWalRead(p, zBuf, iAmt, iOfst);
    case TDE_KIND_JOURNAL: return tdeJournalRead(p, zBuf, iAmt, iOfst);
    case TDE_KIND_TEMP:    return tdeBlockRead(p, zBuf, iAmt, iOfst);
    case TDE_KIND_PROBE:   return tdeJournalProbeRead(p, zBuf, iAmt, iOfst);
    default:               return p->pReal->pMethods->xRead(p->pReal, zBuf, iAmt, iOfst);
  }
}

static int tdeWrite(sqlite3_file *pFile, const void *zBuf, int iAmt, sqlite3_int64 iOfst){
  TdeFile *p = (TdeFile*)pFile;
  TdeFile *m = p->eKind==TDE_KIND_MAIN ? p : p->pMain;
  if( m && m->pDb->bHdrRolledBack && (p->eKind==TDE_KIND_MAIN || p->eKind==TDE_KIND_WAL) ){
    /* The header region was found rolled back: write nothing (dek.c). */
    tdeLog(TDE_LOG_ERROR, "%s: not written: the header region of this database was rolled "
           "back (see the earlier error); close the connection", m->zName ? m->zName : "database");
    return SQLITE_IOERR_AUTH;
  }
  switch( p->eKind ){
    case TDE_KIND_MAIN:    return p->pDb->repl.bStandby ? tdeStandbyRefuse(p) : tdeMainWrite(p, zBuf, iAmt, iOfst);
    case TDE_KIND_WAL:     return tdeWalWrite(p, zBuf, iAmt, iOfst);
    case TDE_KIND_JOURNAL: return tdeJournalWrite(p, zBuf, iAmt, iOfst);
    case TDE_KIND_TEMP:    return tdeBlockWrite(p, zBuf, iAmt, iOfst);
    default:               return p->pReal->pMethods->xWrite(p->pReal, zBuf, iAmt, iOfst);
  }
}

/* The layout of main file p for SQLite's sizes: version 3 needs the page
** size, found from page 1 when this handle has not seen it yet, from page
** 2 or the file's length when page 1 is torn (tdeMainSizePgsz; a database
** without a whole page 1 has none: its size is then 0). */
static int tdeMainSizeLayout(TdeFile *p, TdeLayout *pL){
  uint32_t pgsz = p->pDb->pgsz;
  int rc = SQLITE_OK;
  if( p->pDb->pKeys && p->pDb->pKeys->hdr.version>=TDE_FORMAT_V3 && !pgsz ){
    rc = tdeScratch(p);
    if( rc==SQLITE_OK ) rc = tdeMainSizePgsz(p, &pgsz);   /* page 1 torn: page 2 */
  }
  *pL = tdeMainLayout(p, pgsz);
  return rc;
}

/* SQLite's WAL write lock for a change of the map at a truncation (the
** fold, a shrink): 1 when it is held (by this connection: a RESTART or
** TRUNCATE checkpoint, a commit; or taken here without waiting, *pbTaken,
** released by tdeMainWalWriteEnd) or when there is no shared WAL index
** (locking_mode=EXCLUSIVE, or rollback mode: no other connection can
** write); 0 when another connection holds it. */
static int tdeMainWalWriteTry(TdeFile *p, int *pbTaken){
  *pbTaken = 0;
  if( !p->pDb->pShm0 || p->pDb->map.bWalWrite ) return 1;
  if( p->pReal->pMethods->xShmLock(p->pReal, 0, 1, SQLITE_SHM_LOCK|SQLITE_SHM_EXCLUSIVE) ) return 0;
  *pbTaken = 1;
  return 1;
}

static void tdeMainWalWriteEnd(TdeFile *p, int bTaken){
  if( bTaken ) p->pReal->pMethods->xShmLock(p->pReal, 0, 1, SQLITE_SHM_UNLOCK|SQLITE_SHM_EXCLUSIVE);
}

/*
** Version 3: SQLite truncates the database file in a checkpoint (after
** SQLITE_FCNTL_CKPT_DONE, before its sync) only when it copied every frame
** of the WAL: the map is folded then, so that the file alone is a
** complete database while its connections stay open (docs/FORMAT.md
** "Folding"; a generation already folded is not folded again).  The fold
** syncs the database file (the checkpoint's pages and the map slots) before
** its header update.  Under SQLite's WAL write lock (tdeMainWalWriteTry);
** busy, the fold waits for the next fold point.  Without a shared WAL
** index (locking_mode=EXCLUSIVE) no other connection exists: the fold runs
** to the end of the WAL's verified chain, every frame of which this
** checkpoint copied.  A fold that fails fails the truncation, so the
** checkpoint reports it (as a fold at a WAL restart does) and records no
** backfill; the pages it copied stay, and the next checkpoint folds.
*/
static int tdeMainCkptFold(TdeFile *p){
  int bTaken = 0, rc;
  p->pDb->ckpt.bCkptEnd = 0;
  if( !p->pDb->pWalFile || p->bReadOnly || p->pDb->repl.bStandby ) return SQLITE_OK;
  if( !tdeMainWalWriteTry(p, &bTaken) ) return SQLITE_OK;
  rc = tdeWalFoldMap(p->pDb->pWalFile);
  tdeMainWalWriteEnd(p, bTaken);
  if( rc ){
    tdeLog(TDE_LOG_WARNING, "%s: the page map was not folded after the checkpoint (SQLite error "
           "%d): the checkpoint fails, the next one folds", tdeFileName(p), rc);
  }
  return rc;
}

/* xTruncate of a version-3 main file: to off(N) + P.  Map regions the
** header in force names past it are first dropped from the map
** (tdeMapShrink, under the WAL write lock as a fold: a PASSIVE checkpoint
** does not hold it, and another connection's fold may be updating the
** header); when they cannot be (the lock busy, a fold unfinished), the
** file keeps them (the size rule counts no page for a region it ends
** with) until a later truncation (docs/FORMAT.md "The map in the file";
** the header read again, as another connection may have folded). */
static int tdeMainTruncate3(TdeFile *p, const TdeLayout *pL, sqlite3_int64 size){
  sqlite3_int64 nPhys, nKeep;
  int bTaken = 0, rc;
  if( !pL->pgsz && size>0 ){
    tdeLog(TDE_LOG_ERROR, "%s: truncation to %lld bytes before the page size is known",
           tdeFileName(p), (long long)size);
    return SQLITE_IOERR_TRUNCATE;
  }
  rc = p->pDb->ckpt.bCkptEnd ? tdeMainCkptFold(p) : SQLITE_OK;
  if( rc==SQLITE_OK ) rc = tdeMainRefreshIfChanged(p);
  if( rc ) return rc;
  nPhys = tdeLayoutPhysSize(pL, size);
  if( tdeMapKeepBytes(p)>nPhys && tdeMainWalWriteTry(p, &bTaken) ){
    rc = tdeMainRefreshIfChanged(p);
    if( rc==SQLITE_OK && tdeMapKeepBytes(p)>nPhys
     && tdeMapShrink(p, (uint32_t)((size + pL->pgsz - 1) / pL->pgsz))!=SQLITE_OK ){
      tdeErrClear();              /* the file keeps the regions */
    }
  }
  if( rc==SQLITE_OK ){
    nKeep = tdeMapKeepBytes(p);
    rc = p->pReal->pMethods->xTruncate(p->pReal, nKeep>nPhys ? nKeep : nPhys);
  }
  tdeMainWalWriteEnd(p, bTaken);
  return rc;
}

static int tdeTruncate(sqlite3_file *pFile, sqlite3_int64 size){
  TdeFile *p = (TdeFile*)pFile;
  switch( p->eKind ){
    case TDE_KIND_MAIN: {
      TdeLayout L;
      int rc;
      if( p->pDb->repl.bStandby ) return tdeStandbyRefuse(p);
      rc = tdeMainEnsureKeys(p, 0);
      if( rc ) return rc;
      if( !p->pDb->pKeys ) return p->pReal->pMethods->xTruncate(p->pReal, 0);
      rc = tdeMainSizeLayout(p, &L);
      if( rc ) return rc;
      if( tdeLayoutHasRegions(&L) ) return tdeMainTruncate3(p, &L, size);
      return p->pReal->pMethods->xTruncate(p->pReal, tdeLayoutPhysSize(&L, size));
    }
    case TDE_KIND_WAL:     return tdeWalTruncate(p, size);
    case TDE_KIND_JOURNAL: return tdeJournalTruncate(p, size);
    case TDE_KIND_TEMP:    return tdeBlockTruncate(p, size);
    default:               return p->pReal->pMethods->xTruncate(p->pReal, size);
  }
}

static int tdeSync(sqlite3_file *pFile, int flags){
  TdeFile *p = (TdeFile*)pFile;
  if( p->eKind==TDE_KIND_JOURNAL ) return tdeJournalSync(p, flags);
  if( p->eKind==TDE_KIND_WAL ) return tdeWalSync(p, flags);
  if( p->eKind==TDE_KIND_TEMP ){
    int rc = tdeBlockFlush(p);
    if( rc ) return rc;
  }
  return p->pReal->pMethods->xSync(p->pReal, flags);
}

static int tdeFileSize(sqlite3_file *pFile, sqlite3_int64 *pSize){
  TdeFile *p = (TdeFile*)pFile;
  int rc;
  switch( p->eKind ){
    case TDE_KIND_MAIN: {
      sqlite3_int64 sz = 0;
      TdeLayout L;
      rc = tdeMainEnsureKeys(p, 0);
      if( rc ) return rc;
      rc = p->pReal->pMethods->xFileSize(p->pReal, &sz);
      if( rc ) return rc;
      /* Whole pages only: a page the file ends inside of counts whole, so
      ** that SQLite reads it (and the read reports the damage,
      ** tdeMainShortPage) or truncates it away (rolling back a
      ** transaction whose append a crash tore): keys/layout.h. */
      rc = tdeMainSizeLayout(p, &L);
      if( rc ) return rc;
      *pSize = p->pDb->pKeys ? tdeLayoutSqliteSize(&L, sz) : 0;
      return SQLITE_OK;
    }
    case TDE_KIND_WAL:
      rc = tdeWalFlush(p);
      if( rc ) return rc;
      return p->pReal->pMethods->xFileSize(p->pReal, pSize);
    case TDE_KIND_JOURNAL:
      return tdeJournalFileSize(p, pSize);
    case TDE_KIND_TEMP:
      return tdeBlockFileSize(p, pSize);
    default:
      return p->pReal->pMethods->xFileSize(p->pReal, pSize);
  }
}

/*
** New databases need TDE_RESERVE_BYTES reserved at the end of every page
** before SQLite lays out page 1, and SQLite takes that number only from the
** header of an existing database or from SQLITE_FCNTL_RESERVE_BYTES on the
** connection.  The request is made outside the VFS wherever SQLite gives
** tde control there: the auto-extension (api.c, tdeConnInit) makes it for
** the main database of every connection as it opens, and clears
** bReserveDue.  What is left has no hook outside the VFS: an ATTACHed or
** VACUUM INTO database, or a connection opened after sqlite3_shutdown()
** with no tde_register() since (no auto-extension).  For those only, the
** request is made here, before SQLite's first transaction on the file (its
** first SHARED lock) or its first PRAGMA on it.
**
** A call into SQLite from inside a VFS method is safe only on the
** connection that is calling: SQLite holds that connection's (recursive)
** mutex and its b-tree, so the file control re-enters them.  Any other
** connection's b-tree mutex may be held by this very thread (shared cache:
** the b-tree is shared, and the connection that last named the file is not
** the one writing), and taking it would hang for ever (issue 21, bug 3).
** SQLITE_FCNTL_PDB hands the address of the b-tree's connection field,
** which SQLite sets to the connection holding the b-tree each time one
** takes it (btmutex.c): read at the lock, it names the caller.  An existing
** database keeps the reserve its page 1 records; the page size stays free.
*/
static int tdeMainRequestReserve(TdeFile *p){
  sqlite3 *db = p->pDb->ppDb ? *p->pDb->ppDb : 0;
  sqlite3_int64 sz = 0;
  const char *zSchema = 0;
  int rc, n = TDE_RESERVE_BYTES;
  p->pDb->bReserveDue = 0;
  if( !db || !p->zName ) return SQLITE_OK;
  rc = p->pReal->pMethods->xFileSize(p->pReal, &sz);
  if( rc ) return rc;
  if( sz>TDE_HEADER_BYTES ) return SQLITE_OK;
  if( sqlite3_libversion_number()>=3039000 ){
    for(int i=0; (zSchema = sqlite3_db_name(db, i))!=0; i++){
      if( sqlite3_db_filename(db, zSchema)==p->zName ) break;
    }
  }else if( sqlite3_db_filename(db, "main")==p->zName ){
    zSchema = "main";     /* SQLite before 3.39 cannot list schemas: main only */
  }
  if( zSchema ) sqlite3_file_control(db, zSchema, SQLITE_FCNTL_RESERVE_BYTES, &n);
  return SQLITE_OK;
}

/* api.c: the auto-extension made the request for this file. */
void tdeMainReserveDone(TdeFile *p){
  p->pDb->bReserveDue = 0;
}

/* A lock refused because the header could not be re-read (tdeLock,
** tdeShmLock): I/O and memory errors as they are, anything else (a key
** that cannot be had) as SQLITE_AUTH. */
static int tdeRefreshLockRc(int rc){
  return (rc&0xff)==SQLITE_IOERR || rc==SQLITE_NOMEM || rc==SQLITE_BUSY ? rc : SQLITE_AUTH;
}

/*
** The header check when a connection takes a write lock (RESERVED, or the
** WAL write or checkpoint lock): learn of a header update another process
** made (rotation, migration, rekey, epoch update) before writing.  Every
** header update rewrites the SHA-256 field of both slots (offset 4064 of
** each, docs/FORMAT.md; the field changes with any byte of the slot), so
** when both are as this handle's last check saw them, nothing changed and
** one read of [4064, 8192) answers it.  Otherwise tdeMainRefreshIfChanged
** decides (and re-reads the header if it is newer), and the fields read
** before it are kept: a change after that read shows at the next check.
** Uses p->aBuf.
*/
static int tdeMainLockCheckHeader(TdeFile *p){
  uint8_t aSums[64];
  int rc, bShort = 1;
  if( !p->pDb->pKeys ) return SQLITE_OK;
  rc = tdeScratch(p);
  if( rc ) return rc;
  rc = tdeRealRead(p, p->aBuf, TDE_SLOT_SIZE + 32, TDE_SLOT_SIZE - 32, &bShort);
  if( rc ) return rc;
  memcpy(aSums, p->aBuf, 32);
  memcpy(aSums + 32, p->aBuf + TDE_SLOT_SIZE, 32);
  if( !bShort && p->pDb->bHdrSums && memcmp(aSums, p->pDb->aHdrSums, sizeof(aSums))==0 ) return SQLITE_OK;
  p->pDb->bHdrSums = 0;
  rc = tdeMainRefreshIfChanged(p);
  if( rc==SQLITE_OK && !bShort ){
    memcpy(p->pDb->aHdrSums, aSums, sizeof(aSums));
    p->pDb->bHdrSums = 1;
  }
  return rc;
}

/* The check, then a move to format version 3 that a crash or an
** interrupted upgrade left unfinished (upgrade.c): no write while the
** header's upgrade cursor is not 0 (SQLITE_BUSY while another connection
** keeps the move from finishing). */
static int tdeMainLockCheck(TdeFile *p){
  int rc = tdeMainLockCheckHeader(p);
  if( rc==SQLITE_OK && p->pDb->pKeys && p->pDb->pKeys->hdr.upgradeCursor ) rc = tdeUpgradeFinish(p);
  return rc;
}

static int tdeLock(sqlite3_file *pFile, int eLock){
  TdeFile *p = (TdeFile*)pFile;
  int rc;
  if( p->eKind==TDE_KIND_MAIN && p->pDb->bReserveDue && eLock==SQLITE_LOCK_SHARED ){
    rc = tdeMainRequestReserve(p);
    if( rc ) return rc;
  }
  rc = p->pReal->pMethods->xLock(p->pReal, eLock);
  if( rc==SQLITE_OK && p->eKind==TDE_KIND_MAIN ) p->pDb->eLockHeld = eLock;
  /* A write transaction starts: seal with the newest data key (another
  ** process may have begun a rekey).  Once per lock session: from RESERVED
  ** to EXCLUSIVE no other connection can update the header (header
  ** updates run under the write lock), so EXCLUSIVE checks only when it
  ** was taken without RESERVED's check (a hot-journal rollback). */
  if( rc==SQLITE_OK && eLock>=SQLITE_LOCK_RESERVED && p->eKind==TDE_KIND_MAIN
   && !(eLock==SQLITE_LOCK_EXCLUSIVE && p->pDb->bLockChecked) ){
    int rc2 = tdeMainLockCheck(p);
    if( rc2==SQLITE_OK && eLock==SQLITE_LOCK_RESERVED ) p->pDb->bLockChecked = 1;
    if( rc2==SQLITE_OK && p->pDb->pKeys ) tdeMainHookWriteLock(p);
    if( rc2 ){
      /* Could not learn the current data key: do not write with an old one.
      ** RESERVED was taken from SHARED, so drop back to it; a failed
      ** EXCLUSIVE keeps the lock until SQLite ends the transaction, which
      ** it does on this error (xUnlock releases every level). */
      if( eLock==SQLITE_LOCK_RESERVED ) p->pReal->pMethods->xUnlock(p->pReal, SQLITE_LOCK_SHARED);
      return tdeRefreshLockRc(rc2);
    }
  }
  return rc;
}
static int tdeUnlock(sqlite3_file *pFile, int eLock){
  TdeFile *p = (TdeFile*)pFile;
  if( p->eKind==TDE_KIND_MAIN ){
    p->pDb->bTxnBase = 0;
    /* End of a rollback-mode write transaction (hooks.c: the anchor). */
    if( eLock<=SQLITE_LOCK_SHARED && p->pDb->pKeys ) tdeMainHookWriteEnd(p, 0);
    if( eLock<SQLITE_LOCK_RESERVED ) p->pDb->bLockChecked = 0;
    p->pDb->eLockHeld = eLock;
  }
  return p->pReal->pMethods->xUnlock(p->pReal, eLock);
}
static int tdeCheckReservedLock(sqlite3_file *pFile, int *pResOut){
  return REALFILE(pFile)->pMethods->xCheckReservedLock(REALFILE(pFile), pResOut);
}

static int tdeFileControl(sqlite3_file *pFile, int op, void *pArg){
  TdeFile *p = (TdeFile*)pFile;
  sqlite3_file *pReal = p->pReal;
  int rc;
  switch( op ){
    case SQLITE_FCNTL_PDB:
      if( p->eKind==TDE_KIND_MAIN ){
        p->pDb->ppDb = (sqlite3**)pArg;
        p->pDb->bReserveDue = 1;
      }
      break;
    case SQLITE_FCNTL_PRAGMA: {
      char **azArg = (char**)pArg;
      if( p->eKind==TDE_KIND_MAIN && p->pDb->bReserveDue ){
        rc = tdeMainRequestReserve(p);
        if( rc ) return rc;
      }
      if( p->eKind==TDE_KIND_MAIN && azArg[1] && sqlite3_stricmp(azArg[1], "tde_status")==0 ){
        if( azArg[2] ){
          azArg[0] = sqlite3_mprintf("tde_status takes no argument");
          return SQLITE_ERROR;
        }
        azArg[0] = tdeStatusPragma(p);
        return azArg[0] ? SQLITE_OK : SQLITE_NOMEM;
      }
      break;
    }
    case SQLITE_FCNTL_SIZE_HINT:
      if( p->eKind==TDE_KIND_MAIN ){
        TdeLayout L = tdeMainLayout(p, p->pDb->pgsz);
        sqlite3_int64 sz = tdeLayoutPhysSize(&L, *(sqlite3_int64*)pArg);
        if( tdeLayoutHasRegions(&L) && !L.pgsz ) return SQLITE_OK;   /* a hint only */
        return pReal->pMethods->xFileControl(pReal, op, &sz);
      }
      if( p->eKind==TDE_KIND_JOURNAL || p->eKind==TDE_KIND_TEMP ) return SQLITE_OK;
      break;
    case SQLITE_FCNTL_CKPT_START:
      if( p->eKind==TDE_KIND_MAIN ){ p->pDb->ckpt.bInCkpt = 1; p->pDb->ckpt.bCkptEnd = 0; }
      break;
    case SQLITE_FCNTL_CKPT_DONE:
      if( p->eKind==TDE_KIND_MAIN ){
        p->pDb->ckpt.bInCkpt = 0;
        p->pDb->ckpt.bCkptEnd = 1;
      }
      break;
    case SQLITE_FCNTL_COMMIT_PHASETWO:
      /* Committed (also with locking_mode=EXCLUSIVE, which keeps the lock):
      ** the next write starts from the new committed size. */
      if( p->eKind==TDE_KIND_MAIN ) p->pDb->bTxnBase = 0;
      break;
    case SQLITE_FCNTL_MMAP_SIZE:
      /* Never map encrypted files: SQLite would read ciphertext. */
      if( *(sqlite3_int64*)pArg > 0 ) *(sqlite3_int64*)pArg = 0;
      break;
    case SQLITE_FCNTL_VFSNAME:
      rc = pReal->pMethods->xFileControl(pReal, op, pArg);
      if( rc==SQLITE_OK ){
        *(char**)pArg = sqlite3_mprintf("tde/%z", *(char**)pArg);
        if( *(char**)pArg==0 ) return SQLITE_NOMEM;
      }
      return rc;
    default:
      break;
  }
  return pReal->pMethods->xFileControl(pReal, op, pArg);
}

static int tdeSectorSize(sqlite3_file *pFile){
  return REALFILE(pFile)->pMethods->xSectorSize(REALFILE(pFile));
}

static int tdeDeviceCharacteristics(sqlite3_file *pFile){
  TdeFile *p = (TdeFile*)pFile;
  int dc = p->pReal->pMethods->xDeviceCharacteristics(p->pReal) & ~TDE_IOCAP_CLEAR;
  /* Temp files re-seal whole blocks: no powersafe overwrite for them.
  ** The main file, the WAL and the journal keep what the VFS below says:
  ** pages, frames and journal records are written whole, in place. */
  if( p->eKind==TDE_KIND_TEMP ) dc &= ~SQLITE_IOCAP_POWERSAFE_OVERWRITE;
  return dc;
}

static int tdeShmMap(sqlite3_file *pFile, int iPg, int pgsz, int bExtend, void volatile **pp){
  TdeFile *p = (TdeFile*)pFile;
  int rc = p->pReal->pMethods->xShmMap(p->pReal, iPg, pgsz, bExtend, pp);
  /* Remember where SQLite's WAL index header is, for tde_verify. */
  if( rc==SQLITE_OK && iPg==0 && p->eKind==TDE_KIND_MAIN ){ p->pDb->pShm0 = *pp; p->pDb->map.bWalIndexEnd = 0; }
  return rc;
}
static int tdeShmLock(sqlite3_file *pFile, int offset, int n, int flags){
  TdeFile *p = (TdeFile*)pFile;
  int rc;
  /* SQLite maps a WAL index only for a database file (never a WAL, a journal
  ** or a temp file): other kinds have no state here. */
  if( p->eKind!=TDE_KIND_MAIN ) return p->pReal->pMethods->xShmLock(p->pReal, offset, n, flags);
  /* End of a WAL write transaction (hooks.c: the anchor, the standby's
  ** sync wait, which waits once the lock is released: xWalLock). */
  if( offset==0 && flags==(SQLITE_SHM_UNLOCK|SQLITE_SHM_EXCLUSIVE) ) tdeMainHookWriteEnd(p, 1);
  rc = p->pReal->pMethods->xShmLock(p->pReal, offset, n, flags);
  /* The read mark this connection reads under (WAL_READ_LOCK(k) is slot
  ** 3 + k): the page map's bound (tdeMainReadBound). */
  if( rc==SQLITE_OK && n==1 && offset>=3 && offset<8 && (flags & SQLITE_SHM_SHARED) ){
    if( flags & SQLITE_SHM_LOCK ){
      p->pDb->map.iReadSlot1 = offset - 3 + 1;
      /* A read transaction begins.  Folds happen only when a WAL generation
      ** ends, which changes the salts in SQLite's index: on new salts the
      ** header is read again (two small reads), so a reader never checks
      ** pages against a map older than the generation it reads. */
      if( p->pDb->pShm0 && tdeMapActive(p) ){
        uint8_t aSalt[8];
        memcpy(aSalt, (const void*)((const volatile uint8_t*)p->pDb->pShm0 + 32), 8);
        if( memcmp(aSalt, p->pDb->map.aShmSalt, 8)!=0 ){
          int rc2 = tdeMainRefreshIfChanged(p);
          if( rc2 ){
            /* The header could not be read: the read transaction does not
            ** begin (an error SQLite reports, never a check skipped). */
            p->pReal->pMethods->xShmLock(p->pReal, offset, n, SQLITE_SHM_UNLOCK|SQLITE_SHM_SHARED);
            p->pDb->map.iReadSlot1 = 0;
            return tdeRefreshLockRc(rc2);
          }
          memcpy(p->pDb->map.aShmSalt, aSalt, 8);
        }
      }
    }else if( p->pDb->map.iReadSlot1==offset - 3 + 1 ){
      p->pDb->map.iReadSlot1 = 0;
    }
  }
  if( rc==SQLITE_OK && offset<=1 && offset+n>1 && (flags & SQLITE_SHM_EXCLUSIVE) ){
    p->pDb->ckpt.bHeld = (flags & SQLITE_SHM_LOCK)!=0;   /* WAL_CKPT_LOCK is slot 1 */
    p->pDb->ckpt.bValid = 0;
    p->pDb->bTxnBase = 0;    /* a checkpoint's writes are a transaction of their own */
  }
  /* WAL write lock taken or released (hooks.c: the standby remembers what
  ** is committed, as the WAL index changes before a restart or truncation;
  ** after a commit, in its sync mode, returns once it is acknowledged). */
  if( rc==SQLITE_OK && offset==0 && (flags & SQLITE_SHM_EXCLUSIVE) && p->eKind==TDE_KIND_MAIN ){
    p->pDb->map.bWalWrite = (flags & SQLITE_SHM_LOCK)!=0;
    tdeMainHookWalLock(p, p->pDb->map.bWalWrite);
    tdeWalLockChanged(p->pDb->pWalFile);
  }
  /* The writer takes every read mark but slot 0's only to restart the log
  ** (walRestartLog; a RESTART or TRUNCATE checkpoint): every frame is in
  ** the database file, and readers that begin after the restart in SQLite's
  ** index read the file alone -- the page map must already name what the
  ** frames put there (docs/FORMAT.md "Folding"). */
  if( rc==SQLITE_OK && offset==4 && n==4 && flags==(SQLITE_SHM_LOCK|SQLITE_SHM_EXCLUSIVE)
   && p->eKind==TDE_KIND_MAIN && p->pDb->map.bWalWrite && p->pDb->pWalFile ){
    int rc2 = tdeWalFoldMap(p->pDb->pWalFile);
    if( rc2 ){
      p->pReal->pMethods->xShmLock(p->pReal, offset, n, SQLITE_SHM_UNLOCK|SQLITE_SHM_EXCLUSIVE);
      return rc2;
    }
  }
  /* WAL writer (slot 0) or checkpointer (slot 1) lock taken: as above. */
  if( rc==SQLITE_OK && offset<=1 && (flags & SQLITE_SHM_LOCK) && (flags & SQLITE_SHM_EXCLUSIVE)
   && p->eKind==TDE_KIND_MAIN ){
    int rc2 = tdeMainLockCheck(p);
    if( rc2 ){
      /* Could not learn the current data key: do not write with an old one. */
      p->pReal->pMethods->xShmLock(p->pReal, offset, n, SQLITE_SHM_UNLOCK|SQLITE_SHM_EXCLUSIVE);
      if( offset+n>1 ) p->pDb->ckpt.bHeld = 0;
      return tdeRefreshLockRc(rc2);
    }
  }
  return rc;
}
static void tdeShmBarrier(sqlite3_file *pFile){
  REALFILE(pFile)->pMethods->xShmBarrier(REALFILE(pFile));
}
static int tdeShmUnmap(sqlite3_file *pFile, int deleteFlag){
  TdeFile *p = (TdeFile*)pFile;
  if( p->eKind!=TDE_KIND_MAIN ) return p->pReal->pMethods->xShmUnmap(p->pReal, deleteFlag);
  if( deleteFlag && p->eKind==TDE_KIND_MAIN && p->pDb->pShm0 ){
    /* The log's end for the page map's fold at its deletion, next. */
    memcpy(&p->pDb->map.walIndexEnd, (const void*)((const volatile uint8_t*)p->pDb->pShm0 + 16), 4);
    p->pDb->map.bWalIndexEnd = 1;
  }
  if( deleteFlag && p->eKind==TDE_KIND_MAIN && p->pDb->pShm0 && p->pDb->pWalFile ){
    /* Last connection closing (it holds the exclusive lock): the WAL, still
    ** open below, is deleted next (hooks.c: the standby saves the frames a
    ** shipper has not captured). */
    tdeMainHookWalEnd(p, p->pDb->pWalFile->pReal, TDE_CAPTURE_CLOSE, 0, 1);
  }
  p->pDb->pShm0 = 0;
  return REALFILE(pFile)->pMethods->xShmUnmap(REALFILE(pFile), deleteFlag);
}

/* Memory-mapped reads would hand SQLite ciphertext: always decline. */
static int tdeFetch(sqlite3_file *pFile, sqlite3_int64 iOfst, int iAmt, void **pp){
  TDE_UNUSED(pFile); TDE_UNUSED(iOfst); TDE_UNUSED(iAmt);
  *pp = 0;
  return SQLITE_OK;
}
static int tdeUnfetch(sqlite3_file *pFile, sqlite3_int64 iOfst, void *pPage){
  TDE_UNUSED(pFile); TDE_UNUSED(iOfst); TDE_UNUSED(pPage);
  return SQLITE_OK;
}

/* ---- open -------------------------------------------------------------- */

static int tdeKindOf(int flags, const char *zName){
  if( flags & SQLITE_OPEN_MAIN_DB ) return TDE_KIND_MAIN;
  if( flags & SQLITE_OPEN_WAL ) return TDE_KIND_WAL;
  if( flags & SQLITE_OPEN_MAIN_JOURNAL ) return TDE_KIND_JOURNAL;
  if( flags & SQLITE_OPEN_SUPER_JOURNAL ){
    /* The super-journal itself (SQLite names it DB-mjXXXXXXXXX), or, while
    ** SQLite decides whether to delete one, the journal of a database of
    ** the transaction (DB-journal), read for its super-journal record. */
    size_t n = zName ? strlen(zName) : 0;
    if( n>8 && strcmp(zName + n - 8, "-journal")==0 && !(flags & SQLITE_OPEN_READWRITE) ){
      return TDE_KIND_PROBE;
    }
    return TDE_KIND_PLAIN;
  }
  return TDE_KIND_TEMP;   /* temp db, temp journal, transient db, subjournal */
}


/* WAL and rollback journal: key them from their main database. */
static int tdeOpenDependent(TdeFile *p, const char *zName){
  TdeFile *pMain = tdeMainFind(zName);
  int rc;
  if( !pMain ){
    tdeLog(TDE_LOG_ERROR, "%s: its database is not open through the tde VFS", zName);
    return SQLITE_CANTOPEN;
  }
  rc = tdeMainEnsureKeys(pMain, (p->openFlags & SQLITE_OPEN_READWRITE)!=0);
  if( rc ) return rc;
  if( !pMain->pDb->pKeys ){
    tdeLog(TDE_LOG_ERROR, "%s: database has no keys yet", zName);
    return SQLITE_CANTOPEN;
  }
  p->pMain = pMain;
  if( p->eKind==TDE_KIND_JOURNAL && (p->openFlags & SQLITE_OPEN_READWRITE) ){
    /* A journal is opened for writing inside a write transaction: the
    ** moment to re-wrap a header left behind by a master-key rotation, or
    ** to rewrite a header slot a crash tore. */
    rc = tdeMainHeaderDue(pMain);
    if( rc ) return rc;
  }
  rc = tdeInstallKeys(p, pMain->pDb->pKeys);
  if( rc ) return rc;
  return rc;
}

/* Temp files: a random key that never touches disk. */
static int tdeOpenTemp(TdeFile *p){
  uint8_t *aKey = tdeSecureAlloc(32);
  int trc;
  if( !aKey ) return SQLITE_NOMEM;
  trc = tdeRandom(aKey, 32);
  if( trc==TDE_OK ) trc = tdeRandom(p->dbid, sizeof(p->dbid));
  if( trc==TDE_OK ) trc = tdePageCipherNew(aKey, 1, &p->pCipher);
  tdeSecureFree(aKey, 32);
  return trc ? tdeSqliteRc(trc) : SQLITE_OK;
}

/*
** A valid DB-tdestandby names this database: it is a standby copy only in
** a place the configuration declares (standby_copies), which the holder of
** the database's folder cannot write.  Anywhere else the file is forged or
** stale, and it must switch no check off (anchor, page map, the -wal):
** the open is refused, naming the file, and nothing is written.
*/
static int tdeStandbyPlaceCheck(const char *zName){
  char zCfg[PATH_MAX];
  TdeConfig *pCfg = 0;
  const char *zUriCfg = sqlite3_uri_parameter(zName, "tde_config");
  int bIn = 0, trc;
  trc = tdeConfigLocate(zUriCfg, zCfg, sizeof(zCfg));
  if( trc==TDE_OK ) trc = tdeConfigLoad(zCfg, &pCfg);
  if( trc==TDE_OK ) trc = tdeConfigStandbyPlace(pCfg, zName, &bIn);
  tdeConfigFree(pCfg);
  if( trc ){
    tdeLog(TDE_LOG_ERROR, "%s: cannot open encrypted database: %s", zName, tde_last_error());
    return tdeSqliteRc(trc);
  }
  if( bIn ) return SQLITE_OK;
  tdeErr(TDE_AUTH, "%s-tdestandby says %s is a standby copy, but the configuration %s names no "
         "standby_copies directory holding it: next to a primary the file is forged or stale "
         "(remove it); on a standby host, add standby_copies = DIR to the configuration",
         zName, zName, zCfg);
  tdeLog(TDE_LOG_ERROR, "%s", tde_last_error());
  return SQLITE_AUTH;
}

/* A main database that is a standby copy: checked for its place, served
** read-only, and refused (bReplaced) if the file named before the open
** (dev0, ino0; bStat0: named at all) is not the one opened. */
static int tdeOpenStandbyCopy(TdeFile *p, const char *zName, int bStat0, uint64_t dev0,
                              uint64_t ino0, int *pOutFlags, int *pbReplaced){
  uint64_t seq;
  uint8_t aDbid[16];
  int rc;
  if( !tdeStandbyIsCopy(zName, tdeStandbyDbid(p, aDbid) ? aDbid : 0, &seq) ) return SQLITE_OK;
  rc = tdeStandbyPlaceCheck(zName);
  /* Served read-only while the standby applies it (see above).  The
  ** file is named before and after the open: a base copy renamed in
  ** between would leave the handle on the old file. */
  if( rc==SQLITE_OK && (!bStat0 || !tdeStandbyStat(zName, &p->pDb->repl.standbyDev, &p->pDb->repl.standbyIno)
                        || dev0!=p->pDb->repl.standbyDev || ino0!=p->pDb->repl.standbyIno) ){
    *pbReplaced = 1;
  }
  p->pDb->repl.bStandby = 1;
  *pOutFlags = (*pOutFlags & ~SQLITE_OPEN_READWRITE) | SQLITE_OPEN_READONLY;
  return rc;
}

/* A main database: its header loaded; a new or empty one checks now that
** its keystore opens, so a wrong password fails the open rather than the
** first write. */
static int tdeOpenMain(TdeFile *p, const char *zName){
  char zCfg[PATH_MAX];
  TdeKeystore *pKs;
  const char *zUriCfg;
  sqlite3_int64 sz = 0;
  int rc, trc;
  if( zName ) tdeBypassFromUri(p, zName);
  rc = p->pReal->pMethods->xFileSize(p->pReal, &sz);
  if( rc ) return rc;
  if( sz>0 ){
    rc = tdeMainLoad(p, sz);
    if( rc==SQLITE_NOTADB && sz<=TDE_HEADER_BYTES && tdeTornCreation(p, sz) ){
      rc = SQLITE_OK;   /* keys are created at the first write */
    }
    return rc;
  }
  zUriCfg = zName ? sqlite3_uri_parameter(zName, "tde_config") : 0;
  trc = tdeConfigLocate(zUriCfg, zCfg, sizeof(zCfg));
  if( trc==TDE_OK ) trc = tdeRegistryAcquire(zCfg, NULL, &pKs, NULL);
  if( trc==TDE_OK ) tdeRegistryRelease(pKs);
  if( trc ){
    tdeLog(TDE_LOG_ERROR, "%s: cannot open encrypted database: %s", zName, tde_last_error());
    return tdeSqliteRc(trc);
  }
  return SQLITE_OK;
}

/* What only p's kind has (pDb, pWal, pBlk), allocated zeroed before the
** open below; SQLITE_NOMEM leaves nothing allocated.  tdeKindFree frees it
** at the close or a failed open, after each kind freed what it points to. */
static int tdeKindAlloc(TdeFile *p){
  switch( p->eKind ){
    case TDE_KIND_MAIN:
      p->pDb = sqlite3_malloc(sizeof(*p->pDb));
      if( !p->pDb ) return SQLITE_NOMEM;
      memset(p->pDb, 0, sizeof(*p->pDb));
      break;
    case TDE_KIND_WAL:
      p->pWal = sqlite3_malloc(sizeof(*p->pWal));
      if( !p->pWal ) return SQLITE_NOMEM;
      memset(p->pWal, 0, sizeof(*p->pWal));
      break;
    case TDE_KIND_TEMP:
      p->pBlk = sqlite3_malloc(sizeof(*p->pBlk));
      if( !p->pBlk ) return SQLITE_NOMEM;
      memset(p->pBlk, 0, sizeof(*p->pBlk));
      p->pBlk->nBlock = TDE_BLOCK_TEMP;
      break;
    default:
      break;
  }
  return SQLITE_OK;
}
static void tdeKindFree(TdeFile *p){
  sqlite3_free(p->pDb);
  p->pDb = 0;
  sqlite3_free(p->pWal);
  p->pWal = 0;
  sqlite3_free(p->pBlk);
  p->pBlk = 0;
}

/* A failed open: a main database file it created goes, the file below is
** closed, and whatever the per-kind setup allocated is freed. */
static void tdeOpenUndo(TdeFile *p, sqlite3_vfs *pOrig, const char *zName, int bExisted){
  if( p->eKind==TDE_KIND_MAIN && !bExisted && zName ){
    /* A failed open leaves no file it created.  Only while it is still
    ** empty and no other connection holds it (an exclusive lock): then
    ** nobody has begun to create a database in it. */
    sqlite3_int64 sz = -1;
    if( p->pReal->pMethods->xLock(p->pReal, SQLITE_LOCK_SHARED)==SQLITE_OK ){
      if( p->pReal->pMethods->xLock(p->pReal, SQLITE_LOCK_EXCLUSIVE)==SQLITE_OK
       && p->pReal->pMethods->xFileSize(p->pReal, &sz)==SQLITE_OK && sz==0 ){
        (void)pOrig->xDelete(pOrig, zName, 0);
      }
      p->pReal->pMethods->xUnlock(p->pReal, SQLITE_LOCK_NONE);
    }
  }
  p->pReal->pMethods->xClose(p->pReal);
  tdeWalFree(p);
  tdeJournalFree(p);
  tdeCiphersFree(p);
  if( p->eKind==TDE_KIND_MAIN ){
    tdeMapFree(p);
    tdeKeysFree(p->pDb->pKeys);
    p->pDb->pKeys = 0;
    tdePage1Free(p);
  }
  tdeKindFree(p);
}

/*
** xOpen: the kind of file, the open below (a main database that is a
** standby copy is checked and served read-only), the per-kind setup
** (main: header and keys; WAL and journal: keys from the main database;
** temp: a random key), then the method table.  One exit for failure.
*/
static int tdeVfsOpen(sqlite3_vfs *pVfs, const char *zName, sqlite3_file *pFile,
                      int flags, int *pOutFlags){
  TdeFile *p = (TdeFile*)pFile;
  sqlite3_vfs *pOrig = ORIGVFS(pVfs);
  int rc;
  int bExisted = 1;
  int outFlags = 0;
  int bStat0 = 0, bReplaced = 0;
  uint64_t dev0 = 0, ino0 = 0;

  memset(p, 0, sizeof(*p));
  p->pReal = (sqlite3_file*)&p[1];
  p->eKind = tdeKindOf(flags, zName);
  p->openFlags = flags;
  p->zName = zName;
  rc = tdeKindAlloc(p);
  if( rc ) goto fail;
  if( p->eKind==TDE_KIND_MAIN && zName ){
    rc = pOrig->xAccess(pOrig, zName, SQLITE_ACCESS_EXISTS, &bExisted);
    if( rc ) bExisted = 1;
    bStat0 = tdeStandbyStat(zName, &dev0, &ino0);
  }
  rc = pOrig->xOpen(pOrig, zName, p->pReal, flags, &outFlags);
  if( rc ){
    tdeKindFree(p);
    goto fail;
  }
  if( p->eKind==TDE_KIND_MAIN && zName ){
    rc = tdeOpenStandbyCopy(p, zName, bStat0, dev0, ino0, &outFlags, &bReplaced);
  }
  if( pOutFlags ) *pOutFlags = outFlags;
  p->bReadOnly = (outFlags & SQLITE_OPEN_READONLY)!=0;
  if( rc==SQLITE_OK ){
    tdeErrClear();
    switch( p->eKind ){
      case TDE_KIND_MAIN:    rc = tdeOpenMain(p, zName);       break;
      case TDE_KIND_WAL:
      case TDE_KIND_JOURNAL: rc = tdeOpenDependent(p, zName);  break;
      case TDE_KIND_TEMP:    rc = tdeOpenTemp(p);              break;
      default:               break;
    }
  }
  if( rc==SQLITE_OK && bReplaced ){
    tdeLog(TDE_LOG_ERROR, "%s: the standby copy was replaced (a base copy) while it was opened: retry", zName);
    rc = SQLITE_BUSY;
  }
  if( rc ){
    tdeOpenUndo(p, pOrig, zName, bExisted);
    goto fail;
  }
  pFile->pMethods = &tdeIoMethods;
  if( p->eKind==TDE_KIND_MAIN && zName ) tdeMainListAdd(p);
  if( p->eKind==TDE_KIND_WAL ) p->pMain->pDb->pWalFile = p;
  return SQLITE_OK;

fail:
  pFile->pMethods = 0;
  return rc;
}

/* ---- VFS methods that only forward ------------------------------------- */

static int tdeVfsDelete(sqlite3_vfs *pVfs, const char *zPath, int dirSync){
  size_t n = zPath ? strlen(zPath) : 0;
  if( n>4 && memcmp(zPath + n - 4, "-wal", 4)==0 ){
    /* The log goes (the last connection's close): its pages into the page
    ** map first; if that fails the log stays, and the next open recovers
    ** it (SQLite treats this deletion's failure as benign). */
    TdeFile *pMain = tdeMainFind(zPath);
    if( pMain ){
      int rc = tdeWalFoldMapFile(pMain, zPath);
      if( rc ) return rc;
    }
  }
  return ORIGVFS(pVfs)->xDelete(ORIGVFS(pVfs), zPath, dirSync);
}
static int tdeVfsAccess(sqlite3_vfs *pVfs, const char *zPath, int flags, int *pResOut){
  return ORIGVFS(pVfs)->xAccess(ORIGVFS(pVfs), zPath, flags, pResOut);
}
static int tdeVfsFullPathname(sqlite3_vfs *pVfs, const char *zPath, int nOut, char *zOut){
  return ORIGVFS(pVfs)->xFullPathname(ORIGVFS(pVfs), zPath, nOut, zOut);
}
static void *tdeVfsDlOpen(sqlite3_vfs *pVfs, const char *zPath){
  return ORIGVFS(pVfs)->xDlOpen(ORIGVFS(pVfs), zPath);
}
static void tdeVfsDlError(sqlite3_vfs *pVfs, int nByte, char *zErrMsg){
  ORIGVFS(pVfs)->xDlError(ORIGVFS(pVfs), nByte, zErrMsg);
}
static void (*tdeVfsDlSym(sqlite3_vfs *pVfs, void *p, const char *zSym))(void){
  return ORIGVFS(pVfs)->xDlSym(ORIGVFS(pVfs), p, zSym);
}
static void tdeVfsDlClose(sqlite3_vfs *pVfs, void *pHandle){
  ORIGVFS(pVfs)->xDlClose(ORIGVFS(pVfs), pHandle);
}
static int tdeVfsRandomness(sqlite3_vfs *pVfs, int nByte, char *zBufOut){
  return ORIGVFS(pVfs)->xRandomness(ORIGVFS(pVfs), nByte, zBufOut);
}
static int tdeVfsSleep(sqlite3_vfs *pVfs, int nMicro){
  return ORIGVFS(pVfs)->xSleep(ORIGVFS(pVfs), nMicro);
}
static int tdeVfsCurrentTime(sqlite3_vfs *pVfs, double *pTimeOut){
  return ORIGVFS(pVfs)->xCurrentTime(ORIGVFS(pVfs), pTimeOut);
}
/* The system error number of the VFS below; the message, when tde logged a
** failure on this thread, is tde's (file, page, cause: tde_last_error()). */
static int tdeVfsGetLastError(sqlite3_vfs *pVfs, int nBuf, char *zBuf){
  int rc = ORIGVFS(pVfs)->xGetLastError ? ORIGVFS(pVfs)->xGetLastError(ORIGVFS(pVfs), nBuf, zBuf) : 0;
  const char *z = tdeLastFailure();
  if( z[0] && zBuf && nBuf>0 ) sqlite3_snprintf(nBuf, zBuf, "%s", z);
  return rc;
}
static int tdeVfsCurrentTimeInt64(sqlite3_vfs *pVfs, sqlite3_int64 *p){
  return ORIGVFS(pVfs)->xCurrentTimeInt64(ORIGVFS(pVfs), p);
}
static int tdeVfsSetSystemCall(sqlite3_vfs *pVfs, const char *zName, sqlite3_syscall_ptr pCall){
  return ORIGVFS(pVfs)->xSetSystemCall(ORIGVFS(pVfs), zName, pCall);
}
static sqlite3_syscall_ptr tdeVfsGetSystemCall(sqlite3_vfs *pVfs, const char *zName){
  return ORIGVFS(pVfs)->xGetSystemCall(ORIGVFS(pVfs), zName);
}
static const char *tdeVfsNextSystemCall(sqlite3_vfs *pVfs, const char *zName){
  return ORIGVFS(pVfs)->xNextSystemCall(ORIGVFS(pVfs), zName);
}
