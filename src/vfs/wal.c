/*
** WAL files under the tde shim.  The WAL keeps SQLite's layout byte for
** byte (32-byte header, frames of 24-byte header + page), so offsets need
** no mapping, but what is stored differs (docs/FORMAT.md "WAL"):
**
**  - each frame's page is sealed exactly like a database page (same
**    associated data: database id, page number, page size), so a frame's
**    page can be copied into the database file without the key;
**  - SQLite's checksums (derived from plaintext) never reach the file: the
**    8 checksum bytes of the WAL header and of every frame header hold a
**    truncated HMAC instead, keyed from the data key, binding the header
**    fields, the frame's index and its page trailer;
**  - on reads the shim recomputes the checksums SQLite expects (its
**    documented running checksum) from the authenticated plaintext.
**
** SQLite writes a frame as a 24-byte header then the page; the header is
** held back until its page arrives so both go out in one write, with the
** MAC over the page's trailer.  A header rewritten alone (SQLite's
** walRewriteChecksums) is completed from the page trailer already on disk.
** A frame SQLite writes in pieces around a sync (sector padding without
** POWERSAFE_OVERWRITE) is sealed whole at its first piece from the frame
** it copies, and each piece's range written as it comes (walSplitBegin).
**
** Format version 2 (docs/FORMAT.md "WAL, version 2") chains the frame
** MACs: frame i's MAC covers frame i-1's (frame 1's the WAL header's), and
** the header's MAC covers the log epoch the generation is bound to, which
** the database header records.  A restart binds the new generation to
** L + 1 (WAL header written and synced, then the epoch update).  Pages are
** served only from frames that are part of one chain from the header up
** to a commit frame of this generation (or, for the writer, from frames of
** its own open transaction); what a handle has verified is cached, so a
** frame is verified once.
**
** Must never: return a frame page that failed authentication or that a
** chain from the current header does not reach; store a checksum SQLite
** computed.
*/
#include "vfs/vfs_int.h"

#define WAL_HDR    32
#define FRAME_HDR  24
#define MAC_BYTES  8

/* Frame read outcomes. */
#define FRAME_OK      0
#define FRAME_SHORT   1    /* not all bytes present */
#define FRAME_BAD     2    /* MAC or page authentication failed */
#define FRAME_STALE   3    /* (header) authentic, but bound to an older log epoch */

static const char *walName(TdeFile *p){ return p->zName ? p->zName : "(wal)"; }

/* Forget a frame written in pieces (walSplitBegin), wiping its copy. */
static void walSplitDrop(TdeFile *p){
  if( p->pWal->aSplit ){
    tdeWipe(p->pWal->aSplit, p->pWal->nSplit);
    sqlite3_free(p->pWal->aSplit);
  }
  p->pWal->aSplit = 0;
  p->pWal->nSplit = 0;
  p->pWal->iSplit = 0;
  p->pWal->nSplitDone = 0;
}

/* Frame MACs computed (walFrameMac), for the tests' cost counts. */
static uint64_t nWalFrameMac;
uint64_t tdeWalMacCount(void){ return __atomic_load_n(&nWalFrameMac, __ATOMIC_RELAXED); }

/* WAL MAC key of data-key version v (read the header again if this
** process does not know v yet).  NULL if unknown. */
static TdeHmac *walKey(TdeFile *p, uint32_t v){
  const TdeDekVer *d;
  if( !p->pMain || !p->pMain->pDb->pKeys ) return 0;
  d = tdeKeysFind(p->pMain->pDb->pKeys, v);
  if( !d && tdeMainRefresh(p->pMain)==SQLITE_OK ) d = tdeKeysFind(p->pMain->pDb->pKeys, v);
  return d ? d->pWalHmac : 0;
}

/* Before the WAL is restarted or truncated (hooks.c: the standby saves
** the committed frames a shipper has not captured yet, capture.c).  Never
** fails the write. */
static void walShipHook(TdeFile *p, int eWhy, const uint8_t *aNewHdr){
  if( p->pMain ) tdeMainHookWalEnd(p->pMain, p->pReal, eWhy, aNewHdr, 0);
}

/* Frees what p->pWal points to; the struct itself is its owner's (vfs.c
** tdeKindFree, or a caller's local). */
void tdeWalFree(TdeFile *p){
  if( p->eKind!=TDE_KIND_WAL ) return;
  sqlite3_free(p->pWal->aCk);
  p->pWal->aCk = 0;
  p->pWal->nCk = 0;
  sqlite3_free(p->pWal->aMac);
  p->pWal->aMac = 0;
  p->pWal->nMac = 0;
  walSplitDrop(p);
}

/* Is this the WAL of a format-version-2 database (chained MACs)? */
static int walV2(TdeFile *p){
  return p->pMain && p->pMain->pDb->pKeys && p->pMain->pDb->pKeys->hdr.version>=TDE_FORMAT_V2;
}

/* SQLite's WAL checksum, as the WAL file format documents it: 32-bit words
** (big-endian if the header magic's low bit is set, else little-endian),
** s0 += w[i] + s1; s1 += w[i+1] + s0. */
static void walChecksum(int bBig, const uint8_t *a, int n, const uint32_t *aIn, uint32_t *aOut){
  uint32_t s0 = aIn ? aIn[0] : 0, s1 = aIn ? aIn[1] : 0;
  for(int i=0; i<n; i+=8){
    uint32_t w0, w1;
    if( bBig ){
      w0 = tdeGet32(a+i); w1 = tdeGet32(a+i+4);
    }else{
      w0 = (uint32_t)a[i] | ((uint32_t)a[i+1]<<8) | ((uint32_t)a[i+2]<<16) | ((uint32_t)a[i+3]<<24);
      w1 = (uint32_t)a[i+4] | ((uint32_t)a[i+5]<<8) | ((uint32_t)a[i+6]<<16) | ((uint32_t)a[i+7]<<24);
    }
    s0 += w0 + s1;
    s1 += w1 + s0;
  }
  aOut[0] = s0;
  aOut[1] = s1;
}

static int walBigEndian(TdeFile *p){ return p->pWal->aHdr[3] & 1; }

/* MAC of the WAL header's first 24 bytes under WAL MAC key aKey (the
** current data-key version's when written; readers try each they hold). */
static int walHdrMac(TdeHmac *aKey, const uint8_t *aHdr, int bV2, uint64_t w, uint8_t mac[MAC_BYTES]){
  static const uint8_t zTag1[4] = { 'W', '1', 'H', 0 };
  static const uint8_t zTag2[4] = { 'W', '2', 'H', 0 };
  uint8_t aW[8];
  uint8_t full[32];
  const uint8_t *ap[3] = { bV2 ? zTag2 : zTag1, aHdr, aW };
  const size_t an[3] = { 4, 24, 8 };
  int rc;
  if( !aKey ) return SQLITE_IOERR;
  tdePut64(aW, w);
  rc = tdeHmacCompute(aKey, ap, an, bV2 ? 3 : 2, full);
  memcpy(mac, full, MAC_BYTES);
  tdeWipe(full, sizeof(full));
  return rc ? SQLITE_IOERR : SQLITE_OK;
}

/* MAC of frame idx: its header fields (page number, commit size, salts)
** and its page trailer (which authenticates the page); in version 2 also
** the previous frame's MAC aPrev (the WAL header's for frame 1).  aPrev
** NULL: version 1. */
static int walFrameMac(TdeFile *p, uint32_t idx, const uint8_t *aHdr16,
                       const uint8_t *aTrailer, const uint8_t *aPrev, uint8_t mac[MAC_BYTES]){
  /* The message in one buffer, one HMAC update (the MAC is over the
  ** concatenation either way): 8 + 16 + 48 + 8 bytes. */
  uint8_t aMsg[8 + 16 + TDE_TRAILER_SIZE + MAC_BYTES];
  uint8_t full[32];
  const uint8_t *ap[1] = { aMsg };
  size_t an[1];
  TdeHmac *aKey = walKey(p, tdeTrailerVersion(aTrailer));   /* the page's version */
  int rc;
  if( !aKey ) return SQLITE_NOTFOUND;   /* unknown data-key version: cannot authenticate */
  __atomic_fetch_add(&nWalFrameMac, 1, __ATOMIC_RELAXED);
  aMsg[0] = 'W'; aMsg[1] = aPrev ? '2' : '1'; aMsg[2] = 'F'; aMsg[3] = 0;
  tdePut32(aMsg+4, idx);
  memcpy(aMsg+8, aHdr16, 16);
  memcpy(aMsg+24, aTrailer, TDE_TRAILER_SIZE);
  an[0] = 24 + TDE_TRAILER_SIZE;
  if( aPrev ){
    memcpy(aMsg+an[0], aPrev, MAC_BYTES);
    an[0] += MAC_BYTES;
  }
  rc = tdeHmacCompute(aKey, ap, an, 1, full);
  memcpy(mac, full, MAC_BYTES);
  tdeWipe(full, sizeof(full));
  return rc ? SQLITE_IOERR : SQLITE_OK;
}

static sqlite3_int64 walFrameOffset(TdeFile *p, uint32_t idx){
  return WAL_HDR + (sqlite3_int64)(idx-1) * (FRAME_HDR + p->pWal->pgsz);
}

/* Forget the chain (a new header, a truncation); bHdr: aHdrMac is the
** current header's MAC and starts the new chain.  SQLITE_NOMEM when it
** cannot start (no chain then: no frame is served until a later reset
** succeeds -- never reported as a broken chain, see walReadPage). */
static int walMacRoom(TdeFile *p, uint32_t idx);
static int walChainReset(TdeFile *p, int bHdr){
  p->pWal->iChain = 0;
  p->pWal->iChainCommit = 0;
  p->pWal->bChain = 0;
  if( p->pWal->aMac ) memset(p->pWal->aMac, 0, sizeof(p->pWal->aMac[0]) * p->pWal->nMac);
  if( bHdr && walV2(p) ){
    if( !walMacRoom(p, 0) ) return SQLITE_NOMEM;
    memcpy(p->pWal->aMac[0].mac, p->pWal->aHdrMac, MAC_BYTES);
    p->pWal->bChain = 1;
  }
  return SQLITE_OK;
}

static int walCkForget(TdeFile *p){
  p->pWal->iRunFrame = 0;
  p->pWal->iSessLo = p->pWal->iSessHi = 0;
  if( p->pWal->aCk ) memset(p->pWal->aCk, 0, sizeof(p->pWal->aCk[0]) * p->pWal->nCk);
  return walChainReset(p, p->pWal->bHdr);
}

/* Make aMac hold index idx (a cache: 0 when memory runs out). */
static int walMacRoom(TdeFile *p, uint32_t idx){
  if( idx>=p->pWal->nMac ){
    uint32_t n = idx*2 + 64;
    void *pNew = sqlite3_realloc64(p->pWal->aMac, sizeof(p->pWal->aMac[0]) * (sqlite3_uint64)n);
    if( !pNew ) return 0;
    p->pWal->aMac = pNew;
    memset(p->pWal->aMac + p->pWal->nMac, 0, sizeof(p->pWal->aMac[0]) * (n - p->pWal->nMac));
    if( p->pWal->nMac==0 && p->pWal->bHdr ){
      memcpy(p->pWal->aMac[0].mac, p->pWal->aHdrMac, MAC_BYTES);
      p->pWal->bChain = 1;
    }
    p->pWal->nMac = n;
  }
  return 1;
}

/* The chain ends at frame iEnd: drop what was verified after it. */
static void walChainCut(TdeFile *p, uint32_t iEnd){
  if( p->pWal->iChain<=iEnd ) return;
  p->pWal->iChain = iEnd;
  while( p->pWal->iChainCommit>iEnd ){
    uint32_t j = iEnd;
    while( j>0 && !p->pWal->aMac[j].bCommit ) j--;
    p->pWal->iChainCommit = j;
  }
}

/* Is the frame header aHdr16 a commit frame of the current generation? */
static int walIsCommit(TdeFile *p, const uint8_t *aHdr16){
  return tdeGet32(aHdr16+4)!=0 && memcmp(aHdr16+8, p->pWal->aHdr+16, 8)==0;
}

/* Frame idx's MAC verified from the chain's aMac[idx-1]: extend the
** chain (or, where it already reached idx with another MAC, cut it there:
** another connection rewrote a frame of its open transaction).
** SQLITE_NOMEM when aMac cannot grow (the chain is left as it was). */
static int walChainNote(TdeFile *p, uint32_t idx, const uint8_t *aHdr16, const uint8_t *aTrl,
                        const uint8_t *mac){
  if( !p->pWal->bChain || idx==0 || idx>p->pWal->iChain+1 ) return SQLITE_OK;
  if( !walMacRoom(p, idx) ) return SQLITE_NOMEM;
  if( idx<=p->pWal->iChain ){
    if( memcmp(p->pWal->aMac[idx].mac, mac, MAC_BYTES)==0 ) return SQLITE_OK;
    walChainCut(p, idx-1);
  }
  memcpy(p->pWal->aMac[idx].mac, mac, MAC_BYTES);
  /* The page and its tag (the MAC covers both): the page map's view. */
  p->pWal->aMac[idx].pgno = tdeGet32(aHdr16);
  memcpy(p->pWal->aMac[idx].tag, aTrl + TDE_TRAILER_SIZE - 24, 8);
  p->pWal->aMac[idx].bCommit = (uint8_t)walIsCommit(p, aHdr16);
  p->pWal->iChain = idx;
  if( p->pWal->aMac[idx].bCommit ) p->pWal->iChainCommit = idx;
  return SQLITE_OK;
}

/* This handle is about to write frame idx with MAC mac computed from
** aPrev (bChain: aPrev was the chain's own aMac[idx-1]).  SQLITE_NOMEM
** when aMac cannot hold it: the frame must not be written then, or this
** handle could not tell it from a spliced one when it reads it back. */
static int walChainWrote(TdeFile *p, uint32_t idx, const uint8_t *aHdr16, const uint8_t *aTrl,
                         const uint8_t *mac, const uint8_t *aPrev, int bChain){
  if( !walMacRoom(p, idx) ){ walChainCut(p, 0); return SQLITE_NOMEM; }
  walChainCut(p, idx-1);
  if( bChain && p->pWal->iChain==idx-1 ){
    int rc = walChainNote(p, idx, aHdr16, aTrl, mac);
    if( rc ) return rc;
  }
  memcpy(p->pWal->aMac[idx].mac, mac, MAC_BYTES);
  memcpy(p->pWal->aMac[idx].prev, aPrev, MAC_BYTES);
  p->pWal->aMac[idx].bOwn = 1;
  /* SQLite appends frames in order and rewrites in place only frames of
  ** its open transaction, so the frames written under one write lock are
  ** one range. */
  if( !p->pWal->iSessLo || idx<p->pWal->iSessLo ) p->pWal->iSessLo = idx;
  if( idx>p->pWal->iSessHi ) p->pWal->iSessHi = idx;
  return SQLITE_OK;
}

/* The WAL write lock was taken or released by this handle's connection
** (vfs.c tdeShmLock): frames written before may be rewritten by others. */
void tdeWalLockChanged(TdeFile *p){
  if( p && p->eKind==TDE_KIND_WAL ){
    p->pWal->iSessLo = p->pWal->iSessHi = 0;
    /* A header SQLite rewrites alone is one of its open transaction's
    ** frames: frames of an earlier transaction (one that failed or rolled
    ** back) at the same index are new frames, written with their page. */
    p->pWal->iMaxWritten = 0;
    /* A restart's epoch update still due: the sync of its WAL header
    ** failed, and the transaction with it.  It is never done later without
    ** the write lock (another writer may have moved the epoch meanwhile,
    ** and the failure would surface in an unrelated statement); SQLite
    ** writes the header again with its next frames. */
    p->pWal->bEpochDue = 0;
  }
}

/* The stored MAC of frame j (j==0: the WAL header's). */
static int walStoredMac(TdeFile *p, uint32_t j, uint8_t *aOut){
  sqlite3_int64 iOff = j==0 ? 24 : walFrameOffset(p, j) + 16;
  int bShort = 0;
  int rc = tdeRealRead(p, aOut, MAC_BYTES, iOff, &bShort);
  if( rc==SQLITE_OK && bShort ) rc = SQLITE_IOERR_SHORT_READ;
  return rc;
}

/* The MAC frame idx chains from: the chain's own when frame idx-1 is the
** header or part of a committed prefix of it (those never change within a
** generation), else the one stored in frame idx-1's header on disk -- a
** frame beyond the last commit may have been rewritten by another
** connection since it was verified.  *pbChain: the value is the verified
** chain's (the stored one equals it). */
static int walPrevMac(TdeFile *p, uint32_t idx, uint8_t *aOut, int *pbChain){
  int rc;
  *pbChain = 0;
  if( p->pWal->bChain && idx-1<p->pWal->nMac && idx-1<=p->pWal->iChain
   && (idx==1 || idx-1<=p->pWal->iChainCommit) ){
    memcpy(aOut, p->pWal->aMac[idx-1].mac, MAC_BYTES);
    *pbChain = 1;
    return SQLITE_OK;
  }
  if( idx>=2 && p->pWal->iSessLo && idx-1>=p->pWal->iSessLo && idx-1<=p->pWal->iSessHi
   && idx-1<p->pWal->nMac && p->pWal->aMac[idx-1].bOwn ){
    /* Frame idx-1 as this handle wrote it under the write lock it still
    ** holds: what is on disk (a write that failed fails the transaction). */
    memcpy(aOut, p->pWal->aMac[idx-1].mac, MAC_BYTES);
    *pbChain = p->pWal->bChain && idx-1<=p->pWal->iChain;
    return SQLITE_OK;
  }
  rc = walStoredMac(p, idx-1, aOut);
  if( rc==SQLITE_OK && p->pWal->bChain && idx-1<p->pWal->nMac && idx-1<=p->pWal->iChain
   && memcmp(aOut, p->pWal->aMac[idx-1].mac, MAC_BYTES)==0 ){
    *pbChain = 1;
  }
  return rc;
}

static void walCkRemember(TdeFile *p, uint32_t idx, const uint8_t *mac, const uint8_t *aSqliteCk){
  if( idx>=p->pWal->nCk ){
    uint32_t n = idx*2 + 64;
    void *pNew = sqlite3_realloc64(p->pWal->aCk, sizeof(p->pWal->aCk[0]) * (sqlite3_uint64)n);
    if( !pNew ) return;   /* only a cache */
    p->pWal->aCk = pNew;
    memset(p->pWal->aCk + p->pWal->nCk, 0, sizeof(p->pWal->aCk[0]) * (n - p->pWal->nCk));
    p->pWal->nCk = n;
  }
  memcpy(p->pWal->aCk[idx].mac, mac, MAC_BYTES);
  p->pWal->aCk[idx].ck[0] = tdeGet32(aSqliteCk);
  p->pWal->aCk[idx].ck[1] = tdeGet32(aSqliteCk+4);
  p->pWal->aCk[idx].bValid = 1;
}

/* Does the stored header aHdr's MAC verify under some data-key version
** held, bound to log epoch w (version 2) or unbound (bV2 0)? */
static int walHdrVerifies(TdeFile *p, const uint8_t *aHdr, int bV2, uint64_t w, int *pbOk){
  const TdeDbKeys *k = p->pMain ? p->pMain->pDb->pKeys : 0;
  uint8_t mac[MAC_BYTES];
  *pbOk = 0;
  for(int i=0; k && i<k->nVer && !*pbOk; i++){
    int rc = walHdrMac(k->aVer[i].pWalHmac, aHdr, bV2, w, mac);
    if( rc ) return rc;
    *pbOk = tdeCtEqual(mac, aHdr+24, MAC_BYTES);
  }
  return SQLITE_OK;
}

/* Version 2: the log epochs a current header may be bound to, L (with the
** salts the database header records) and L + 1 (a restart interrupted
** before its epoch update).  *pw gets the one that verifies; *pbStale is
** set when the MAC verifies with w = L but the salts differ. */
static int walHdrCurrent(TdeFile *p, const uint8_t *aHdr, uint64_t *pw, int *pbOk, int *pbStale){
  const TdeHeader *h = &p->pMain->pDb->pKeys->hdr;
  int rc;
  *pbStale = 0;
  rc = walHdrVerifies(p, aHdr, 1, h->logEpoch, pbOk);
  if( rc==SQLITE_OK && *pbOk ){
    *pw = h->logEpoch;
    if( memcmp(aHdr+16, h->aWalSalt, 8)!=0 ){ *pbOk = 0; *pbStale = 1; }
    return SQLITE_OK;
  }
  if( rc==SQLITE_OK ) rc = walHdrVerifies(p, aHdr, 1, h->logEpoch+1, pbOk);
  if( rc==SQLITE_OK && *pbOk ) *pw = h->logEpoch+1;
  return rc;
}

/* Version 2, error path: is aHdr an authentic header of an older
** generation (bound to an older log epoch, or of version 1 from before an
** upgrade)?  *pw gets its epoch (0: version 1). */
static int walHdrOlder(TdeFile *p, const uint8_t *aHdr, uint64_t *pw, int *pbOk){
  uint64_t L = p->pMain->pDb->pKeys->hdr.logEpoch;
  int rc = SQLITE_OK;
  *pbOk = 0;
  for(uint64_t w=L; w>0 && w+64>L && rc==SQLITE_OK && !*pbOk; w--){
    rc = walHdrVerifies(p, aHdr, 1, w-1, pbOk);
    if( *pbOk ) *pw = w-1;
  }
  if( rc==SQLITE_OK && !*pbOk ){
    rc = walHdrVerifies(p, aHdr, 0, 0, pbOk);
    if( *pbOk ) *pw = 0;
  }
  return rc;
}

/* Refuse a stale WAL: log line and tde_last_error() naming the file. */
static int walStale(TdeFile *p, uint64_t w){
  uint64_t L = p->pMain && p->pMain->pDb->pKeys ? p->pMain->pDb->pKeys->hdr.logEpoch : 0;
  tdeErr(TDE_AUTH, "%s: this WAL belongs to an older state of the database (log epoch %llu, "
         "the database is at %llu): it was put back from a copy; move it aside -- the database "
         "opens at its last checkpoint", walName(p), (unsigned long long)w, (unsigned long long)L);
  tdeLog(TDE_LOG_ERROR, "%s", tde_last_error());
  p->nAuthFail++;
  return SQLITE_IOERR_AUTH;
}

/*
** Read and authenticate the WAL header from disk.  On success aHdr holds
** the header as SQLite wrote it, with SQLite's checksum recomputed, and is
** cached.  *pState: FRAME_OK, FRAME_SHORT (file shorter than a header),
** FRAME_BAD (MAC mismatch; aOut then holds the stored bytes), FRAME_STALE
** (version 2: authentic but bound to an older log epoch; *pw, if not NULL,
** gets that epoch).
*/
static int walLoadHeaderW(TdeFile *p, uint8_t *aOut, int *pState, uint64_t *pwStale){
  uint32_t ck[2];
  uint64_t w = 0;
  int bShort, rc, bOk = 0, bStale = 0;
  rc = tdeRealRead(p, aOut, WAL_HDR, 0, &bShort);
  if( rc ) return rc;
  if( bShort ){ *pState = FRAME_SHORT; return SQLITE_OK; }
  /* Written under the then-current data-key version: try each held, and
  ** again after reading the database header (another connection may have
  ** rekeyed, or restarted the WAL and advanced the log epoch). */
  for(int iPass=0; iPass<2 && !bOk; iPass++){
    if( iPass==1 ){
      /* A header that could not be re-read is an error, never "no log". */
      if( !p->pMain ) break;
      rc = tdeMainRefresh(p->pMain);
      if( rc ) return rc;
    }
    if( walV2(p) ) rc = walHdrCurrent(p, aOut, &w, &bOk, &bStale);
    else rc = walHdrVerifies(p, aOut, 0, 0, &bOk);
    if( rc ) return rc;
  }
  if( !bOk ){
    p->pWal->bChain = 0;           /* the header on disk is not the one cached */
    if( walV2(p) ){
      if( !bStale ){
        rc = walHdrOlder(p, aOut, &w, &bStale);
        if( rc ) return rc;
      }
      if( bStale ){
        if( pwStale ) *pwStale = w;
        *pState = FRAME_STALE;
        return SQLITE_OK;
      }
    }
    *pState = FRAME_BAD;
    return SQLITE_OK;
  }
  {
    uint8_t aMac[MAC_BYTES];
    memcpy(aMac, aOut+24, MAC_BYTES);
    walChecksum(aOut[3] & 1, aOut, 24, 0, ck);
    tdePut32(aOut+24, ck[0]);
    tdePut32(aOut+28, ck[1]);
    if( !p->pWal->bHdr || memcmp(p->pWal->aHdr, aOut, WAL_HDR)!=0 || memcmp(p->pWal->aHdrMac, aMac, MAC_BYTES)!=0
     || (walV2(p) && !p->pWal->bChain) ){
      memcpy(p->pWal->aHdr, aOut, WAL_HDR);
      memcpy(p->pWal->aHdrMac, aMac, MAC_BYTES);
      p->pWal->bHdr = 1;
      p->pWal->w = w;
      rc = walCkForget(p);
      if( rc ) return rc;     /* retried at the next load: bChain is 0 */
    }
  }
  if( tdeValidPgsz(tdeGet32(aOut+8)) ) p->pWal->pgsz = tdeGet32(aOut+8);
  *pState = FRAME_OK;
  return SQLITE_OK;
}



/* Make sure the header (and so the page size) is known. */
static int walNeedHeader(TdeFile *p){
  uint8_t aHdr[WAL_HDR];
  uint64_t w = 0;
  int state, rc;
  if( p->pWal->bHdr && p->pWal->pgsz ) return SQLITE_OK;
  rc = walLoadHeaderW(p, aHdr, &state, &w);
  if( rc ) return rc;
  if( state==FRAME_STALE ) return walStale(p, w);
  if( state!=FRAME_OK || !p->pWal->pgsz ){
    tdeLog(TDE_LOG_ERROR, "%s: WAL header missing or failed authentication", walName(p));
    return SQLITE_IOERR_AUTH;
  }
  return SQLITE_OK;
}

/*
** Version 2, frames checked on their own (scans past a bad frame, the
** first frame under a bad header): does frame idx's MAC (aHdr16, aTrl)
** verify from some MAC its predecessor may have had?  The one stored in
** frame idx-1, and the one recomputed from frame idx-1's own fields and
** the MAC stored before it (so a damaged MAC field in frame idx-1 does not
** hide an authentic frame idx); for frame 1 the WAL header's stored MAC
** and the MACs its first 24 bytes give under L and L + 1.
*/
static int walFrameVerifiesAlone(TdeFile *p, uint32_t idx, const uint8_t *aHdr16,
                                 const uint8_t *aTrl, int *pbOk){
  uint8_t aCand[1 + 2*TDE_MAX_VERSIONS][MAC_BYTES];
  uint8_t mac[MAC_BYTES];
  int nCand = 0, rc;
  *pbOk = 0;
  rc = walStoredMac(p, idx-1, aCand[nCand]);
  if( rc==SQLITE_OK ) nCand++;
  else if( rc!=SQLITE_IOERR_SHORT_READ ) return rc;
  if( idx==1 ){
    uint8_t aHdr[WAL_HDR];
    int bShort = 0;
    const TdeDbKeys *k = p->pMain->pDb->pKeys;
    rc = tdeRealRead(p, aHdr, WAL_HDR, 0, &bShort);
    if( rc ) return rc;
    for(int i=0; !bShort && i<k->nVer; i++){
      for(uint64_t w=k->hdr.logEpoch; w<=k->hdr.logEpoch+1; w++){
        rc = walHdrMac(k->aVer[i].pWalHmac, aHdr, 1, w, aCand[nCand]);
        if( rc ) return rc;
        nCand++;
      }
    }
  }else{
    uint8_t aPrevHdr[FRAME_HDR], aPrevTrl[TDE_TRAILER_SIZE], aPrevPrev[MAC_BYTES];
    int bShort = 0;
    sqlite3_int64 iOff = walFrameOffset(p, idx-1);
    rc = tdeRealRead(p, aPrevHdr, FRAME_HDR, iOff, &bShort);
    if( rc==SQLITE_OK && !bShort ){
      rc = tdeRealRead(p, aPrevTrl, TDE_TRAILER_SIZE, iOff + FRAME_HDR + p->pWal->pgsz - TDE_TRAILER_SIZE, &bShort);
    }
    if( rc==SQLITE_OK && !bShort ) rc = walStoredMac(p, idx-2, aPrevPrev);
    if( rc==SQLITE_OK && !bShort ){
      rc = walFrameMac(p, idx-1, aPrevHdr, aPrevTrl, aPrevPrev, aCand[nCand]);
      if( rc==SQLITE_OK ) nCand++;
    }
    if( rc==SQLITE_IOERR_SHORT_READ || rc==SQLITE_NOTFOUND ) rc = SQLITE_OK;
    if( rc ) return rc;
  }
  for(int i=0; i<nCand && !*pbOk; i++){
    rc = walFrameMac(p, idx, aHdr16, aTrl, aCand[i], mac);
    if( rc==SQLITE_NOTFOUND ) return SQLITE_OK;
    if( rc ) return rc;
    *pbOk = tdeCtEqual(mac, aHdr16+16, MAC_BYTES);
  }
  return SQLITE_OK;
}

/*
** Version 2: is frame idx (aFrame: stored header, then the stored page or
** at least its trailer at the end) one this handle wrote, exactly as it
** wrote it, in its own open transaction (beyond the committed end of the
** WAL index; any frame when there is no shared index, as with
** locking_mode=EXCLUSIVE, where no other connection writes)?
*/
static int walOwnFrame(TdeFile *p, uint32_t idx, const uint8_t *aFrame, int *pbOwn){
  const uint8_t *aTrl = aFrame + FRAME_HDR + p->pWal->pgsz - TDE_TRAILER_SIZE;
  uint8_t mac[MAC_BYTES];
  int rc;
  *pbOwn = 0;
  if( idx>=p->pWal->nMac || !p->pWal->aMac[idx].bOwn ) return SQLITE_OK;
  if( p->pMain->pDb->pShm0 ){
    TdeWalEnd end;
    tdeShmHeaderEnd(p->pMain->pDb->pShm0, &end);
    /* An index of another generation (or none yet) has committed nothing
    ** of this one: a restart's first transaction. */
    if( end.bKnown && memcmp(end.aSalt, p->pWal->aHdr+16, 8)==0 && idx<=end.mxFrame ) return SQLITE_OK;
  }
  rc = walFrameMac(p, idx, aFrame, aTrl, p->pWal->aMac[idx].prev, mac);
  if( rc==SQLITE_NOTFOUND ) return SQLITE_OK;
  if( rc ) return rc;
  *pbOwn = tdeCtEqual(mac, aFrame+16, MAC_BYTES) && memcmp(mac, p->pWal->aMac[idx].mac, MAC_BYTES)==0;
  return SQLITE_OK;
}

/* Why walLoadFrame found a frame FRAME_BAD, for the caller that decides
** it is damage (walFrameFail). */
typedef struct WalBad {
  int eWhy;                  /* WAL_BAD_PREV, WAL_BAD_MAC or WAL_BAD_PAGE */
  uint32_t pgno;             /* WAL_BAD_PAGE: the page the header names */
  int64_t vNoKey;            /* WAL_BAD_PAGE: as tdeOpenPage says */
} WalBad;
#define WAL_BAD_PREV 0       /* the frame before it could not be read */
#define WAL_BAD_MAC  1       /* the frame header's MAC */
#define WAL_BAD_PAGE 2       /* its page */
#define WAL_BAD_NONE 3       /* its page could not be checked (memory): no damage */

/* Frame idx, found FRAME_BAD (b), is damage: count it once and, when
** zWhat names what it is, log it. */
static void walFrameFail(TdeFile *p, uint32_t idx, const WalBad *b, const char *zWhat){
  if( b->eWhy==WAL_BAD_NONE ) return;
  if( b->eWhy==WAL_BAD_PAGE ){
    tdeAuthFail(p, b->pgno, zWhat, b->vNoKey);
    return;
  }
  if( zWhat && b->eWhy==WAL_BAD_MAC ){
    tdeLog(TDE_LOG_ERROR, "%s: frame %u header failed authentication", walName(p), idx);
  }
  tdeAuthFail(p, idx, 0, -1);
}

/*
** Load frame idx into aFrame (FRAME_HDR + pgsz bytes): verify its MAC and
** decrypt its page in place.  The header bytes are returned as stored
** (MAC in the checksum field).  Pure: a failure (FRAME_BAD) is counted
** and logged by the caller that decides it is damage (walFrameFail, with
** *pBad, which may be NULL for a probe).
*/
static int walLoadFrame(TdeFile *p, uint32_t idx, uint8_t *aFrame, int *pState, WalBad *pBad){
  WalBad bad;
  uint32_t pgsz = p->pWal->pgsz;
  uint8_t mac[MAC_BYTES];
  int bShort, rc;
  uint8_t aPrev[MAC_BYTES];
  int bChain = 0, bV2 = walV2(p);
  rc = tdeRealRead(p, aFrame, (int)(FRAME_HDR + pgsz), walFrameOffset(p, idx), &bShort);
  if( rc ) return rc;
  if( bShort ){ *pState = FRAME_SHORT; return SQLITE_OK; }
  if( bV2 ){
    /* Chained from the verified chain when it reaches idx-1, else from
    ** the MAC stored in frame idx-1 (the torn-or-tampered scans past a
    ** bad frame). */
    rc = walPrevMac(p, idx, aPrev, &bChain);
    if( rc==SQLITE_IOERR_SHORT_READ ){
      *pState = FRAME_BAD;
      if( pBad ) pBad->eWhy = WAL_BAD_PREV;
      return SQLITE_OK;
    }
    if( rc ) return rc;
  }
  rc = walFrameMac(p, idx, aFrame, aFrame + FRAME_HDR + pgsz - TDE_TRAILER_SIZE, bV2 ? aPrev : 0, mac);
  if( rc && rc!=SQLITE_NOTFOUND ) return rc;
  if( bV2 && !bChain && (rc==SQLITE_NOTFOUND || !tdeCtEqual(mac, aFrame+16, MAC_BYTES)) ){
    int bOk = 0;
    rc = walFrameVerifiesAlone(p, idx, aFrame, aFrame + FRAME_HDR + pgsz - TDE_TRAILER_SIZE, &bOk);
    if( rc ) return rc;
    if( bOk ) memcpy(mac, aFrame+16, MAC_BYTES);
    else rc = SQLITE_NOTFOUND;
  }
  if( bV2 && (rc==SQLITE_NOTFOUND || !tdeCtEqual(mac, aFrame+16, MAC_BYTES)) ){
    /* A frame of this handle's own open transaction whose predecessor
    ** SQLite rewrote in place: its chain is repaired at the commit. */
    int bOwn = 0;
    rc = walOwnFrame(p, idx, aFrame, &bOwn);
    if( rc ) return rc;
    if( bOwn ){
      memcpy(mac, aFrame+16, MAC_BYTES);
      bChain = 0;
    }else{
      rc = SQLITE_NOTFOUND;
    }
  }
  if( rc==SQLITE_NOTFOUND || !tdeCtEqual(mac, aFrame+16, MAC_BYTES) ){
    if( pBad ) pBad->eWhy = WAL_BAD_MAC;
    tdeWipe(aFrame+FRAME_HDR, pgsz);
    *pState = FRAME_BAD;
    return SQLITE_OK;
  }
  {
    uint8_t aTrl[TDE_TRAILER_SIZE];
    memcpy(aTrl, aFrame + FRAME_HDR + pgsz - TDE_TRAILER_SIZE, TDE_TRAILER_SIZE);
    bad.eWhy = WAL_BAD_PAGE;
    bad.pgno = tdeGet32(aFrame);
    rc = tdeOpenPage(p, aFrame+FRAME_HDR, pgsz, bad.pgno, &bad.vNoKey);
    if( rc && rc!=SQLITE_IOERR_AUTH ) bad.eWhy = WAL_BAD_NONE;
    if( pBad ) *pBad = bad;
    *pState = rc==SQLITE_OK ? FRAME_OK : FRAME_BAD;
    if( rc==SQLITE_OK && bChain ) return walChainNote(p, idx, aFrame, aTrl, mac);
  }
  return SQLITE_OK;
}

/*
** Version 2: extend the verified chain (frame headers and trailers only:
** 72 bytes and one HMAC per frame, once per frame per handle) until it
** holds a commit frame of this generation at or after idx, or breaks.
*/
static int walChainExtend(TdeFile *p, uint32_t idx){
  uint32_t pgsz = p->pWal->pgsz;
  while( p->pWal->bChain && p->pWal->iChainCommit<idx ){
    uint32_t j = p->pWal->iChain + 1;
    uint8_t aHdr[FRAME_HDR], aTrl[TDE_TRAILER_SIZE], mac[MAC_BYTES];
    int bShort = 0, rc;
    if( !walMacRoom(p, j) ) return SQLITE_NOMEM;
    rc = tdeRealRead(p, aHdr, FRAME_HDR, walFrameOffset(p, j), &bShort);
    if( rc==SQLITE_OK && !bShort ){
      rc = tdeRealRead(p, aTrl, TDE_TRAILER_SIZE, walFrameOffset(p, j) + FRAME_HDR + pgsz - TDE_TRAILER_SIZE, &bShort);
    }
    if( rc ) return rc;
    if( bShort ) break;
    rc = walFrameMac(p, j, aHdr, aTrl, p->pWal->aMac[j-1].mac, mac);
    if( rc==SQLITE_NOTFOUND ) break;
    if( rc ) return rc;
    if( !tdeCtEqual(mac, aHdr+16, MAC_BYTES) ) break;
    rc = walChainNote(p, j, aHdr, aTrl, mac);
    if( rc ) return rc;
    if( p->pWal->iChain!=j ) break;
  }
  return SQLITE_OK;
}

/*
** Version 2: may the page of frame idx (aFrame: its stored header, then
** its stored page) be served?  Only if its MAC verifies from the chain and
** the chain reaches a commit frame of this generation at or after it; or
** the frame is one this handle wrote as it is, beyond the committed end
** of the WAL index (its own open transaction, whose frames SQLite may
** read back before the commit).  *pbOk.
*/
static int walFrameCurrent(TdeFile *p, uint32_t idx, const uint8_t *aFrame, int *pbOk){
  const uint8_t *aTrl = aFrame + FRAME_HDR + p->pWal->pgsz - TDE_TRAILER_SIZE;
  uint8_t mac[MAC_BYTES];
  int rc;
  *pbOk = 0;
  if( !p->pWal->bChain ) return SQLITE_OK;
  /* A frame of this handle's own open transaction first: checked against
  ** the MAC this handle wrote (one MAC).  The chain cannot reach a commit
  ** frame after it, so trying the chain first re-walked every frame from
  ** the header on each read of a spilled page. */
  rc = walOwnFrame(p, idx, aFrame, pbOk);
  if( rc || *pbOk ) return rc;
  for(int iTry=0; iTry<3; iTry++){
    /* Again from the last verified commit (frames after it may have been
    ** rewritten by another connection's transaction), then from the
    ** header: a cache never refuses a frame the file holds validly. */
    if( iTry==1 ){
      if( p->pWal->iChain<=p->pWal->iChainCommit ) continue;
      walChainCut(p, p->pWal->iChainCommit);
    }
    if( iTry==2 ){
      if( p->pWal->iChain==0 ) break;
      walChainCut(p, 0);
    }
    rc = walChainExtend(p, idx);
    if( rc ) return rc;
    if( idx<=p->pWal->iChain && p->pWal->iChainCommit>=idx ){
      rc = walFrameMac(p, idx, aFrame, aTrl, p->pWal->aMac[idx-1].mac, mac);
      if( rc && rc!=SQLITE_NOTFOUND ) return rc;
      if( rc==SQLITE_OK && tdeCtEqual(mac, aFrame+16, MAC_BYTES)
       && memcmp(mac, p->pWal->aMac[idx].mac, MAC_BYTES)==0 ){
        *pbOk = 1;
        return SQLITE_OK;
      }
    }
  }
  return walOwnFrame(p, idx, aFrame, pbOk);
}

/*
** Tamper or torn?  Scan the frames from idx to the end of the file: if an
** authentic commit frame of this generation is among them, the bad frame
** before it held part of a committed transaction, and dropping it would
** silently lose that commit.  Frames of a transaction that never
** committed (SQLite rewrites such frames in place while the transaction
** runs) can be damaged by a crash and do not count.  *pbCommit; an error
** (SQLITE_NOMEM, a failed read) when it cannot look: never a guess either
** way, which would call an allocation failure tampering or drop a commit.
*/
static int walCommitFollows(TdeFile *p, uint32_t idx, int *pbCommit){
  int state = FRAME_SHORT, rc = SQLITE_OK;
  uint8_t *aTmp = sqlite3_malloc((int)(FRAME_HDR + p->pWal->pgsz));
  *pbCommit = 0;
  if( !aTmp ) return SQLITE_NOMEM;
  /* To the end of the file: frames that fail authentication too (two
  ** damaged frames in a row must not hide the commits after them) and
  ** frames of older generations (the tail a restarted log leaves). */
  for(;; idx++){
    rc = walLoadFrame(p, idx, aTmp, &state, 0);
    if( rc || state==FRAME_SHORT ) break;
    if( state==FRAME_BAD ) continue;
    if( memcmp(aTmp+8, p->pWal->aHdr+16, 8)!=0 ) continue;
    if( tdeGet32(aTmp+4)!=0 ){ *pbCommit = 1; break; }
  }
  tdeWipe(aTmp, FRAME_HDR + p->pWal->pgsz);
  sqlite3_free(aTmp);
  return rc;
}

/* Does frame idx contain a 512-byte-aligned run of zeros on disk (a
** sector that was never written)?  Ciphertext and MACs never do. */
static int walHasZeroSector(TdeFile *p, uint32_t idx){
  sqlite3_int64 start = walFrameOffset(p, idx);
  sqlite3_int64 end = start + FRAME_HDR + p->pWal->pgsz;
  sqlite3_int64 s = (start + 511) / 512 * 512;
  uint8_t aSec[512];
  for(; s+512<=end; s+=512){
    int bShort = 0, i;
    if( tdeRealRead(p, aSec, 512, s, &bShort)!=SQLITE_OK || bShort ) return 1;
    for(i=0; i<512 && aSec[i]==0; i++){}
    if( i==512 ) return 1;
  }
  return 0;
}

/* Does frame 1 authenticate under some page size (whatever the header
** says)?  Its MAC does not depend on the WAL header.  *pbFound;
** SQLITE_NOMEM when it cannot look (never "no frame": the log would be
** ignored). */
static int walFirstFrameAuthentic(TdeFile *p, int *pbFound){
  uint32_t savePgsz = p->pWal->pgsz;
  uint8_t *aTmp = sqlite3_malloc(FRAME_HDR + TDE_MAX_PAGE);
  *pbFound = 0;
  if( !aTmp ) return SQLITE_NOMEM;
  for(size_t i=0; i<TDE_N_PROBE_PGSZ && !*pbFound; i++){
    int state = FRAME_SHORT;
    p->pWal->pgsz = tdeProbePgsz[i];
    if( walLoadFrame(p, 1, aTmp, &state, 0)==SQLITE_OK && state==FRAME_OK ) *pbFound = 1;
  }
  p->pWal->pgsz = savePgsz;
  tdeWipe(aTmp, FRAME_HDR + TDE_MAX_PAGE);
  sqlite3_free(aTmp);
  return SQLITE_OK;
}

/* SQLite's cumulative checksum after frame k (k>=0; k==0: the header). */
static int walCkAfter(TdeFile *p, uint32_t k, uint32_t *aCk){
  uint8_t *aTmp = 0;
  uint32_t j;
  int rc = SQLITE_OK, state;
  if( k==0 ){
    aCk[0] = tdeGet32(p->pWal->aHdr+24);
    aCk[1] = tdeGet32(p->pWal->aHdr+28);
    return SQLITE_OK;
  }
  if( p->pWal->iRunFrame==k && memcmp(p->pWal->aRunSalt, p->pWal->aHdr+16, 8)==0 ){
    aCk[0] = p->pWal->aRunCk[0];
    aCk[1] = p->pWal->aRunCk[1];
    return SQLITE_OK;
  }
  if( k<p->pWal->nCk && p->pWal->aCk[k].bValid ){
    uint8_t aHdr[FRAME_HDR];
    int bShort;
    rc = tdeRealRead(p, aHdr, FRAME_HDR, walFrameOffset(p, k), &bShort);
    if( rc ) return rc;
    if( !bShort && memcmp(aHdr+16, p->pWal->aCk[k].mac, MAC_BYTES)==0 ){
      aCk[0] = p->pWal->aCk[k].ck[0];
      aCk[1] = p->pWal->aCk[k].ck[1];
      return SQLITE_OK;
    }
  }
  /* Slow path: run the checksum from the header over frames 1..k. */
  aTmp = sqlite3_malloc((int)(FRAME_HDR + p->pWal->pgsz));
  if( !aTmp ) return SQLITE_NOMEM;
  walCkAfter(p, 0, aCk);
  for(j=1; j<=k; j++){
    WalBad bad;
    rc = walLoadFrame(p, j, aTmp, &state, &bad);
    if( rc ) break;
    if( state==FRAME_BAD ) walFrameFail(p, j, &bad, "WAL");
    if( state!=FRAME_OK ){ rc = SQLITE_IOERR_AUTH; break; }
    walChecksum(walBigEndian(p), aTmp, 8, aCk, aCk);
    walChecksum(walBigEndian(p), aTmp+FRAME_HDR, (int)p->pWal->pgsz, aCk, aCk);
  }
  if( rc==SQLITE_OK ){
    p->pWal->iRunFrame = k;
    p->pWal->aRunCk[0] = aCk[0];
    p->pWal->aRunCk[1] = aCk[1];
    memcpy(p->pWal->aRunSalt, p->pWal->aHdr+16, 8);
  }
  tdeWipe(aTmp, FRAME_HDR + p->pWal->pgsz);
  sqlite3_free(aTmp);
  return rc;
}

/*
** A whole frame as SQLite expects it (header with SQLite's checksum, then
** plaintext page) into aOut.  Frames from an older WAL generation (other
** salts) come back with zeroed page and checksum, which SQLite treats as
** the end of the log.  A frame that fails authentication is the end of
** the log when nothing valid follows it (a torn write after a crash);
** otherwise it is tampering and an error.
*/
/* Version 2: does the stored frame header aHdr16 carry the salts of
** another generation (not this one's, not zero)?  *pbOther; SQLITE_NOMEM
** when it cannot look (never "no": the frame would count as damage). */
static int walOtherGeneration(TdeFile *p, uint32_t idx, const uint8_t *aHdr16, int *pbOther){
  static const uint8_t aZero[8];
  uint8_t aFix[FRAME_HDR], aTrl[TDE_TRAILER_SIZE];
  int bShort = 0, bOk = 0;
  *pbOther = 0;
  if( !walV2(p) || memcmp(aHdr16+8, p->pWal->aHdr+16, 8)==0 || memcmp(aHdr16+8, aZero, 8)==0 ) return SQLITE_OK;
  /* A frame of this generation whose salts were altered verifies with
  ** this generation's salts put back: that is tampering, not the end. */
  memcpy(aFix, aHdr16, FRAME_HDR);
  memcpy(aFix+8, p->pWal->aHdr+16, 8);
  if( tdeRealRead(p, aTrl, TDE_TRAILER_SIZE, walFrameOffset(p, idx) + FRAME_HDR + p->pWal->pgsz - TDE_TRAILER_SIZE,
                  &bShort)!=SQLITE_OK || bShort ) return SQLITE_OK;
  if( walFrameVerifiesAlone(p, idx, aFix, aTrl, &bOk)!=SQLITE_OK ) return SQLITE_OK;
  if( !bOk && idx>=2 && p->pWal->bChain && idx-1<=p->pWal->iChain ){
    uint8_t mac[MAC_BYTES];
    if( walFrameMac(p, idx, aFix, aTrl, p->pWal->aMac[idx-1].mac, mac)==SQLITE_OK ){
      bOk = tdeCtEqual(mac, aFix+16, MAC_BYTES);
    }
  }
  if( bOk ) return SQLITE_OK;
  /* Its page must be a page of this database (GCM under its key, at the
  ** page number the header names): a frame from another database's WAL
  ** is damage, not an older generation of this one. */
  {
    uint8_t *aTmp = sqlite3_malloc((int)(FRAME_HDR + p->pWal->pgsz));
    int bPage = 0;
    if( !aTmp ) return SQLITE_NOMEM;
    if( tdeRealRead(p, aTmp, (int)(FRAME_HDR + p->pWal->pgsz), walFrameOffset(p, idx), &bShort)==SQLITE_OK && !bShort ){
      uint32_t ivHigh = tdeGet32(aTmp + FRAME_HDR + p->pWal->pgsz - TDE_TRAILER_SIZE + 12);
      bPage = tdeOpenPage(p, aTmp+FRAME_HDR, p->pWal->pgsz, tdeGet32(aTmp), 0)==SQLITE_OK;
      bPage = bPage && ivHigh==idx;       /* at its own index: not moved */
    }
    tdeWipe(aTmp, FRAME_HDR + p->pWal->pgsz);
    sqlite3_free(aTmp);
    *pbOther = bPage;
    return SQLITE_OK;
  }
}

/* Check, a frame of the current generation that failed authentication
** (recovery's whole-frame read): damage in mid-log if a later committed
** transaction authenticates, else the torn end of the log, handed to
** SQLite with a checksum that cannot match.  The salts are under the MAC:
** a frame whose salts were altered lands here too, so that damage in
** mid-log cannot pass for its end.  A frame with a sector of zeros was
** never completely written (a power loss that kept a later write): the
** torn end, as SQLite treats it. */
static int walBadFrame(TdeFile *p, uint32_t idx, uint8_t *aOut){
  uint32_t ck[2];
  int rc, bCommit = 0;
  if( !walHasZeroSector(p, idx) ){
    rc = walCommitFollows(p, idx+1, &bCommit);
    if( rc ){ memset(aOut, 0, FRAME_HDR + p->pWal->pgsz); return rc; }
  }
  if( bCommit ){
    tdeErr(TDE_AUTH, "%s: frame %u failed authentication and a later committed transaction "
           "authenticates: the WAL was tampered with", walName(p), idx);
    tdeLog(TDE_LOG_ERROR, "%s", tde_last_error());
    memset(aOut, 0, FRAME_HDR + p->pWal->pgsz);
    return SQLITE_IOERR_AUTH;
  }
  tdeLog(TDE_LOG_WARNING, "%s: frame %u failed authentication at the end of the log; "
         "treating it as a torn write (the transaction it belongs to was not committed durably)",
         walName(p), idx);
  memset(aOut+FRAME_HDR, 0, p->pWal->pgsz);
  rc = walCkAfter(p, idx-1, ck);
  if( rc ) return rc;
  tdePut32(aOut+16, ~ck[0]);   /* guaranteed checksum mismatch */
  tdePut32(aOut+20, ~ck[1]);
  return SQLITE_OK;
}

/* A whole frame as SQLite wrote it (recovery and checksum reads): read and
** authenticated (walLoadFrame), its generation checked, SQLite's running
** checksum recomputed into it. */
static int walReadFullFrame(TdeFile *p, uint32_t idx, uint8_t *aOut){
  uint32_t ck[2];
  WalBad bad;
  int state, rc;
  rc = walLoadFrame(p, idx, aOut, &state, &bad);
  if( rc ) return rc;
  if( state==FRAME_SHORT ){
    memset(aOut, 0, FRAME_HDR + p->pWal->pgsz);
    return SQLITE_IOERR_SHORT_READ;
  }
  if( state==FRAME_BAD ){
    int bOther = 0;
    rc = walOtherGeneration(p, idx, aOut, &bOther);
    if( rc || !bOther ) walFrameFail(p, idx, &bad, 0);
    if( rc ){ memset(aOut, 0, FRAME_HDR + p->pWal->pgsz); return rc; }
    if( bOther ){
      /* Version 2: a frame of another generation cannot be authenticated
      ** (the frame its MAC chains from was overwritten), so it is the end
      ** of the log, as an authentic one is in version 1: a power loss
      ** under synchronous=NORMAL can leave one before later frames, and
      ** altering a frame's salts only cuts the log short, as deleting
      ** frames does. */
      state = FRAME_OK;
    }
  }
  if( state==FRAME_OK && memcmp(aOut+8, p->pWal->aHdr+16, 8)!=0 ){
    /* An authentic frame of an older generation: the end of the log. */
    memset(aOut+16, 0, FRAME_HDR-16 + p->pWal->pgsz);
    return SQLITE_OK;
  }
  if( state==FRAME_BAD ) return walBadFrame(p, idx, aOut);
  rc = walCkAfter(p, idx-1, ck);
  if( rc ){ memset(aOut, 0, FRAME_HDR + p->pWal->pgsz); return rc; }
  walChecksum(walBigEndian(p), aOut, 8, ck, ck);
  walChecksum(walBigEndian(p), aOut+FRAME_HDR, (int)p->pWal->pgsz, ck, ck);
  tdePut32(aOut+16, ck[0]);
  tdePut32(aOut+20, ck[1]);
  p->pWal->iRunFrame = idx;
  p->pWal->aRunCk[0] = ck[0];
  p->pWal->aRunCk[1] = ck[1];
  memcpy(p->pWal->aRunSalt, p->pWal->aHdr+16, 8);
  return SQLITE_OK;
}

/*
** The WAL frame read path: locate (tdeWalRead: which frame, which part),
** read (the frame as stored), check (the frame is of the current
** generation and authentic: salts, then the chained MAC or, in version 1,
** the frame MAC), open (the page), return.
*/

/* Check, generation: frames of the current generation carry its salts;
** frames of an uncommitted transaction whose checksums SQLite will rewrite
** carry zero salts.  Anything else is foreign, unless the header on disk
** changed (re-read here). */
static int walFrameOfGeneration(TdeFile *p, uint32_t idx, const uint8_t *aFrame){
  static const uint8_t aZero[8];
  uint8_t aHdr[WAL_HDR];
  uint64_t w = 0;
  int state, rc;
  if( memcmp(aFrame+8, p->pWal->aHdr+16, 8)==0 || memcmp(aFrame+8, aZero, 8)==0 ) return SQLITE_OK;
  rc = walLoadHeaderW(p, aHdr, &state, &w);
  if( rc ) return rc;
  if( state==FRAME_STALE ) return walStale(p, w);
  if( state!=FRAME_OK || memcmp(aFrame+8, p->pWal->aHdr+16, 8)!=0 ){
    tdeLog(TDE_LOG_ERROR, "%s: frame %u belongs to another WAL generation or was tampered with",
           walName(p), idx);
    p->nAuthFail++;
    return SQLITE_IOERR_AUTH;
  }
  return SQLITE_OK;
}

/* Check, version 2: frame idx is part of an authentic committed
** transaction (the chain of frame MACs from the WAL header reaches it). */
static int walFrameChained(TdeFile *p, uint32_t idx, const uint8_t *aFrame){
  int bOk = 0;
  int rc = walFrameCurrent(p, idx, aFrame, &bOk);
  if( rc==SQLITE_OK && !bOk ){
    /* The WAL header may have been rewritten with the same salts (a
    ** restart whose first transaction rolled back, then the next one):
    ** read it again, and if it changed, check against the new chain.
    ** (Or the chain could not start before: an allocation failed.) */
    uint8_t aHdr[WAL_HDR], aOld[MAC_BYTES];
    uint64_t w = 0;
    int state, bHadChain = p->pWal->bChain;
    memcpy(aOld, p->pWal->aHdrMac, MAC_BYTES);
    rc = walLoadHeaderW(p, aHdr, &state, &w);
    if( rc==SQLITE_OK && state==FRAME_STALE ) return walStale(p, w);
    if( rc==SQLITE_OK && state==FRAME_OK
     && (memcmp(aOld, p->pWal->aHdrMac, MAC_BYTES)!=0 || (!bHadChain && p->pWal->bChain)) ){
      rc = walFrameCurrent(p, idx, aFrame, &bOk);
    }
  }
  if( rc ) return rc;
  if( !bOk ){
    tdeErr(TDE_AUTH, "%s: frame %u is not part of an authentic committed transaction of this "
           "WAL (the chain of frame MACs from the WAL header breaks after frame %u): frames "
           "were spliced in, damaged or rolled back", walName(p), idx, p->pWal->iChain);
    tdeLog(TDE_LOG_ERROR, "%s", tde_last_error());
    p->nAuthFail++;
    return SQLITE_IOERR_AUTH;
  }
  return SQLITE_OK;
}

/* Check, version 1: the frame header's own MAC. */
static int walFrameMacOk(TdeFile *p, uint32_t idx, const uint8_t *aFrame){
  uint8_t mac[MAC_BYTES];
  int rc = walFrameMac(p, idx, aFrame, aFrame + FRAME_HDR + p->pWal->pgsz - TDE_TRAILER_SIZE, 0, mac);
  if( rc && rc!=SQLITE_NOTFOUND ) return rc;
  if( rc==SQLITE_NOTFOUND || !tdeCtEqual(mac, aFrame+16, MAC_BYTES) ){
    tdeLog(TDE_LOG_ERROR, "%s: frame %u header failed authentication", walName(p), idx);
    p->nAuthFail++;
    return SQLITE_IOERR_AUTH;
  }
  return SQLITE_OK;
}

/* After the page opened: a checkpoint in progress remembers it for its
** write of the same page to the database (vfs.c), if sealed under the
** current key version. */
static void walCkptRemember(TdeFile *p, const uint8_t *aFrame, const uint8_t *zPlain){
  uint32_t pgsz = p->pWal->pgsz;
  TdeFile *m = p->pMain;
  if( !m || !(m->pDb->ckpt.bHeld || m->pDb->ckpt.bInCkpt) || !m->pDb->pKeys ) return;
  if( tdeTrailerVersion(aFrame + FRAME_HDR + pgsz - TDE_TRAILER_SIZE)!=m->pDb->pKeys->hdr.curVersion ) return;
  if( !m->pDb->ckpt.aPlain ) m->pDb->ckpt.aPlain = sqlite3_malloc(TDE_MAX_PAGE);
  if( !m->pDb->ckpt.aCipher ) m->pDb->ckpt.aCipher = sqlite3_malloc(TDE_MAX_PAGE);
  if( m->pDb->ckpt.aPlain && m->pDb->ckpt.aCipher ){
    memcpy(m->pDb->ckpt.aPlain, zPlain, pgsz);
    memcpy(m->pDb->ckpt.aCipher, aFrame+FRAME_HDR, pgsz);
    m->pDb->ckpt.pgno = tdeGet32(aFrame);
    m->pDb->ckpt.pgsz = pgsz;
    m->pDb->ckpt.bValid = 1;
  }
}

/* The page of frame idx, for SQLite's page reads (walReadFrame and the
** checkpointer): read, check, open.  Strict: any failure is an error, and
** zBuf is zeros after one. */
static int walReadPage(TdeFile *p, uint32_t idx, uint8_t *zBuf){
  uint32_t pgsz = p->pWal->pgsz;
  uint8_t *aFrame = p->aBuf;
  int bShort, rc;
  rc = tdeRealRead(p, aFrame, (int)(FRAME_HDR + pgsz), walFrameOffset(p, idx), &bShort);
  if( rc ) return rc;
  if( bShort ){
    memset(zBuf, 0, pgsz);
    return SQLITE_IOERR_SHORT_READ;
  }
  rc = walFrameOfGeneration(p, idx, aFrame);
  if( rc==SQLITE_OK ) rc = walV2(p) ? walFrameChained(p, idx, aFrame) : walFrameMacOk(p, idx, aFrame);
  if( rc ){
    memset(zBuf, 0, pgsz);
    return rc;
  }
  {
    int64_t vNoKey = -1;
    rc = tdeOpenPageTo(p, aFrame+FRAME_HDR, zBuf, pgsz, tdeGet32(aFrame), &vNoKey);
    if( rc==SQLITE_IOERR_AUTH ) tdeAuthFail(p, tdeGet32(aFrame), "WAL frame", vNoKey);
  }
  if( rc==SQLITE_OK ) walCkptRemember(p, aFrame, zBuf);
  return rc;
}

/* A read of the WAL header (or part of it): as SQLite wrote it, checked. */
static int walReadHeaderRange(TdeFile *p, uint8_t *z, int iAmt, sqlite3_int64 iOfst){
  uint8_t aHdr[WAL_HDR];
  uint64_t w = 0;
  int state, bFound = 0;
  int rc = walLoadHeaderW(p, aHdr, &state, &w);
  if( rc ) return rc;
  if( state==FRAME_STALE ){
    memset(z, 0, (size_t)iAmt);
    return walStale(p, w);
  }
  if( state==FRAME_SHORT ){
    memset(z, 0, (size_t)iAmt);
    return SQLITE_IOERR_SHORT_READ;
  }
  if( state==FRAME_BAD ){
    /* A header that fails authentication while the log holds an
    ** authentic first frame was tampered with: refuse, or SQLite would
    ** silently ignore committed transactions.  (SQLite writes the
    ** 32-byte header in one sector-sized write, so a crash does not tear
    ** it.)  Without an authentic frame the log is empty to SQLite. */
    rc = walFirstFrameAuthentic(p, &bFound);
    if( rc ){ memset(z, 0, (size_t)iAmt); return rc; }
    if( bFound ){
      tdeLog(TDE_LOG_ERROR, "%s: WAL header failed authentication: tampered with", walName(p));
      memset(z, 0, (size_t)iAmt);
      return SQLITE_IOERR_AUTH;
    }
    tdeLog(TDE_LOG_WARNING, "%s: WAL header failed authentication and no authentic frame "
           "follows; treating the log as empty", walName(p));
    p->pWal->bHdr = 0;
    aHdr[24] ^= 0xff;    /* SQLite's header check fails: log ignored */
  }
  memcpy(z, aHdr+iOfst, (size_t)iAmt);
  return SQLITE_OK;
}

/* Any other range inside one frame: the whole frame, assembled. */
static int walReadRange(TdeFile *p, uint32_t idx, uint32_t within, uint8_t *z, int iAmt){
  uint32_t szFrame = FRAME_HDR + p->pWal->pgsz;
  uint8_t *aFrame;
  int rc;
  if( within + (uint32_t)iAmt > szFrame ) return SQLITE_IOERR_READ;
  aFrame = sqlite3_malloc((int)szFrame);
  if( !aFrame ) return SQLITE_NOMEM;
  rc = walReadFullFrame(p, idx, aFrame);
  if( rc==SQLITE_OK || rc==SQLITE_IOERR_SHORT_READ ) memcpy(z, aFrame+within, (size_t)iAmt);
  tdeWipe(aFrame, szFrame);
  sqlite3_free(aFrame);
  return rc;
}

/*
** xRead of a -wal: locate the part SQLite asks for and hand it to its
** reader: the header, a frame's page (the hot path), a whole frame
** (recovery), a frame's running checksum, or any other range of a frame.
*/
int tdeWalRead(TdeFile *p, void *zBuf, int iAmt, sqlite3_int64 iOfst){
  uint8_t *z = zBuf;
  uint32_t szFrame, idx, within;
  int rc;

  rc = tdeWalFlush(p);
  if( rc ) return rc;
  rc = tdeScratch(p);
  if( rc ) return rc;
  if( iOfst<WAL_HDR ){
    if( iOfst+iAmt>WAL_HDR ) return SQLITE_IOERR_READ;
    return walReadHeaderRange(p, z, iAmt, iOfst);
  }
  rc = walNeedHeader(p);
  if( rc ){ memset(z, 0, (size_t)iAmt); return rc; }
  szFrame = FRAME_HDR + p->pWal->pgsz;
  idx = (uint32_t)((iOfst - WAL_HDR) / szFrame) + 1;
  within = (uint32_t)((iOfst - WAL_HDR) % szFrame);

  if( within==FRAME_HDR && (uint32_t)iAmt==p->pWal->pgsz ) return walReadPage(p, idx, z);
  if( within==0 && (uint32_t)iAmt==szFrame ) return walReadFullFrame(p, idx, z);
  if( within==16 && iAmt==8 ){
    uint32_t ck[2];
    rc = walCkAfter(p, idx, ck);
    if( rc ) return rc;
    tdePut32(z, ck[0]);
    tdePut32(z+4, ck[1]);
    return SQLITE_OK;
  }
  return walReadRange(p, idx, within, z, iAmt);
}

/*
** Version 2: the epoch update of a restart whose WAL header was written
** (tdeWalWrite).  bSynced: the WAL was synced after that write; if not, it
** is synced here first.  The WAL header is durable before the database
** header is bound to it (docs/FORMAT.md "Restart").
*/
static int walEpochDue(TdeFile *p, int bSynced){
  int rc = SQLITE_OK;
  if( p->eKind!=TDE_KIND_WAL || !p->pWal->bEpochDue ) return SQLITE_OK;
  p->pWal->bEpochDue = 0;
  if( !bSynced ) rc = p->pReal->pMethods->xSync(p->pReal, SQLITE_SYNC_NORMAL);
  if( rc==SQLITE_OK ) rc = tdeMainEpochUpdate(p->pMain, p->pWal->wDue, p->pWal->aDueSalt);
  if( rc ){
    tdeLog(TDE_LOG_ERROR, "%s: WAL restart: the log epoch update failed (SQLite error %d)",
           walName(p), rc);
    p->pWal->bHdr = 0;
  }
  return rc;
}

static int walFlushFrame(TdeFile *p);

/* Before any other use of the WAL: a pending epoch update (with its own
** sync), then the held-back frame header. */
int tdeWalFlush(TdeFile *p){
  int rc = walEpochDue(p, 0);
  if( rc ) return rc;
  return walFlushFrame(p);
}

/* xSync of the WAL: SQLite syncs a new WAL header right after writing it
** (unless synchronous=OFF), and that sync is the one the epoch update
** waits for. */
static int walSplitHeld(TdeFile *p);
int tdeWalSync(TdeFile *p, int flags){
  /* A header held at a sync is one whose page SQLite writes after it (a
  ** header rewritten alone went out at once): the frame crossing the
  ** sector boundary of a padded commit, split right after its header. */
  int rc = p->pWal->bPending ? walSplitHeld(p) : walFlushFrame(p);
  if( rc==SQLITE_OK ){
    rc = p->pReal->pMethods->xSync(p->pReal, flags);
    if( rc && p->pMain ) p->pMain->pDb->map.bWalSyncFailed = 1;   /* the page map's fold (tdeWalFoldMap) */
  }
  if( rc==SQLITE_OK ) rc = walEpochDue(p, 1);
  return rc;
}

static void walWriteFailed(TdeFile *p, uint32_t idx);

/* Write the held-back frame header whose page is already on disk. */
static int walFlushFrame(TdeFile *p){
  uint8_t aTrailer[TDE_TRAILER_SIZE];
  uint8_t aHdr[FRAME_HDR];
  uint32_t idx;
  int bShort, rc;
  if( p->eKind!=TDE_KIND_WAL || !p->pWal->bPending ) return SQLITE_OK;
  p->pWal->bPending = 0;
  idx = (uint32_t)((p->pWal->iPendingOff - WAL_HDR) / (FRAME_HDR + p->pWal->pgsz)) + 1;
  rc = tdeRealRead(p, aTrailer, TDE_TRAILER_SIZE,
                   p->pWal->iPendingOff + FRAME_HDR + p->pWal->pgsz - TDE_TRAILER_SIZE, &bShort);
  if( rc ) return rc;
  if( bShort ){
    /* Its page write never reached tde (it failed above it, and the
    ** statement with it): nothing to complete, and no error for the
    ** unrelated call that found the header held. */
    tdeLog(TDE_LOG_WARNING, "%s: frame %u header dropped: its page was never written",
           walName(p), idx);
    return SQLITE_OK;
  }
  memcpy(aHdr, p->pWal->aPending, 16);
  if( walV2(p) ){
    uint8_t aPrev[MAC_BYTES];
    int bChain = 0;
    rc = walPrevMac(p, idx, aPrev, &bChain);
    if( rc==SQLITE_OK ) rc = walFrameMac(p, idx, aHdr, aTrailer, aPrev, aHdr+16);
    if( rc==SQLITE_OK ) rc = walChainWrote(p, idx, aHdr, aTrailer, aHdr+16, aPrev, bChain);
    if( rc ) return rc;
  }else{
    rc = walFrameMac(p, idx, aHdr, aTrailer, 0, aHdr+16);
    if( rc ) return rc;
  }
  rc = p->pReal->pMethods->xWrite(p->pReal, aHdr, FRAME_HDR, p->pWal->iPendingOff);
  if( rc ){
    walWriteFailed(p, idx);
    return rc;
  }
  walCkRemember(p, idx, aHdr+16, p->pWal->aPending+16);
  if( p->pWal->iRunFrame>=idx ) p->pWal->iRunFrame = 0;
  return SQLITE_OK;
}

/*
** Seal frame idx: aFrame holds its header fields (bytes 0..15); its page
** (pgsz bytes, plaintext z) is sealed into aFrame+FRAME_HDR and its MAC
** into aFrame+16; in version 2 the chain notes the frame as this handle's.
*/
static int walSealFrame(TdeFile *p, uint32_t idx, uint8_t *aFrame, const uint8_t *z){
  uint32_t szFrame = FRAME_HDR + p->pWal->pgsz;
  uint32_t pgno = tdeGet32(aFrame);
  int rc;
  if( pgno==1 && z[20]<TDE_RESERVE_BYTES ){
    tdeLog(TDE_LOG_ERROR, "%s: page 1 has %d reserved bytes, sqlite-tde needs %d",
           walName(p), z[20], TDE_RESERVE_BYTES);
    return SQLITE_IOERR_WRITE;
  }
  {
    /* Version 2: the frame index in the page's IV bits 95..64, so the
    ** page (GCM) names its index even where the chain cannot be
    ** checked (a frame of an older generation). */
    int trc;
    TdePageCipher *c = tdeCipherForSeal(p, &trc);
    if( !c ) return trc==TDE_NOMEM ? SQLITE_NOMEM : SQLITE_IOERR_WRITE;
    tdePageCipherSetIvHigh(c, walV2(p) ? idx : 0);
  }
  rc = tdeSealPage(p, z, p->pWal->pgsz, pgno, aFrame+FRAME_HDR);
  if( rc ) return rc;
  if( walV2(p) ){
    uint8_t aPrev[MAC_BYTES];
    int bChain = 0;
    rc = walPrevMac(p, idx, aPrev, &bChain);
    if( rc==SQLITE_OK ) rc = walFrameMac(p, idx, aFrame, aFrame + szFrame - TDE_TRAILER_SIZE, aPrev, aFrame+16);
    if( rc==SQLITE_OK ) rc = walChainWrote(p, idx, aFrame, aFrame + szFrame - TDE_TRAILER_SIZE, aFrame+16, aPrev, bChain);
    if( rc ) return rc;
  }else{
    rc = walFrameMac(p, idx, aFrame, aFrame + szFrame - TDE_TRAILER_SIZE, 0, aFrame+16);
    if( rc ) return rc;
  }
  if( p->pWal->iRunFrame>=idx ) p->pWal->iRunFrame = 0;
  return SQLITE_OK;
}

/* Frame idx, with the salts aSalt, is on disk as this handle sealed it. */
static void walNoteWritten(TdeFile *p, uint32_t idx, const uint8_t *aSalt){
  static const uint8_t aZero[8];
  if( memcmp(aSalt, aZero, 8)!=0 ){
    if( memcmp(aSalt, p->pWal->aMaxSalt, 8)!=0 ){
      memcpy(p->pWal->aMaxSalt, aSalt, 8);     /* a new generation */
      p->pWal->iMaxWritten = 0;
    }
    if( idx>p->pWal->iMaxWritten ) p->pWal->iMaxWritten = idx;
  }else if( idx>p->pWal->iMaxWritten && p->pWal->iMaxWritten>0 ){
    p->pWal->iMaxWritten = idx;                /* same transaction, checksums pending */
  }
}

/* A write of frame idx failed: what walSealFrame noted is not on disk.
** Forget it, so that no chain, page map view or header rewrite counts
** the frame until SQLite writes it again. */
static void walWriteFailed(TdeFile *p, uint32_t idx){
  if( idx<p->pWal->nMac ) p->pWal->aMac[idx].bOwn = 0;
  if( idx>0 ) walChainCut(p, idx-1);
  if( idx<p->pWal->nCk ) p->pWal->aCk[idx].bValid = 0;
  if( p->pWal->iRunFrame>=idx ) p->pWal->iRunFrame = 0;
}

/*
** Sector padding without POWERSAFE_OVERWRITE.  With synchronous=FULL,
** SQLite pads a commit to the WAL's sector boundary with copies of the
** commit frame, and writes the copy that crosses the boundary in two
** pieces with a sync between them (walWriteToLog's iSyncPoint): the bytes
** before the boundary are durable before any byte after it is written.
** The cut can fall inside the frame header, right after it, or inside the
** page.  A page is sealed whole, so the frame is sealed when its first
** piece arrives, from the frame it copies (frame idx-1: the commit frame
** or an earlier copy); each piece must equal that prediction, and the
** sealed bytes of exactly its range go out at its offset, so the file
** holds what SQLite meant at every sync.  A piece that differs, or a
** first piece with nothing to predict it from, is refused with nothing of
** it written.
**
** walSplitBegin: the first piece of frame idx, the frame header's first
** nHdr bytes aHdr and (nHdr == FRAME_HDR) the page's first nPage bytes z;
** bCk: aHdr holds SQLite's checksum (else the header as stored).
*/
static int walSplitBegin(TdeFile *p, uint32_t idx, const uint8_t *aHdr, uint32_t nHdr, int bCk,
                         const uint8_t *z, uint32_t nPage){
  uint32_t pgsz = p->pWal->pgsz, szFrame = FRAME_HDR + pgsz, nBody = pgsz - TDE_TRAILER_SIZE;
  sqlite3_int64 iOff = walFrameOffset(p, idx);
  uint8_t *aSealed, *aPlain, *aSql;
  const char *zWhy = 0;
  int64_t vNoKey = -1;
  int bShort = 0, rc = SQLITE_IOERR_WRITE;
  walSplitDrop(p);
  if( idx<2 || nHdr>FRAME_HDR || (nPage>0 && nHdr!=FRAME_HDR) || nPage>=pgsz || nHdr+nPage==0 ){
    zWhy = "not a piece SQLite's sector padding writes";
    goto refuse;
  }
  p->pWal->nSplit = szFrame + pgsz + FRAME_HDR;
  p->pWal->aSplit = sqlite3_malloc64(p->pWal->nSplit);
  if( !p->pWal->aSplit ){ p->pWal->nSplit = 0; return SQLITE_NOMEM; }
  aSealed = p->pWal->aSplit;            /* the frame as stored */
  aPlain = aSealed + szFrame;         /* its page as SQLite writes it */
  aSql = aPlain + pgsz;               /* its header as SQLite writes it */
  /* The frame it copies, as stored; its header fields complete the ones
  ** this piece does not hold yet. */
  rc = tdeRealRead(p, aSealed, (int)szFrame, walFrameOffset(p, idx-1), &bShort);
  if( rc ) goto fail;
  if( bShort ){ zWhy = "the frame before it is not on disk"; rc = SQLITE_IOERR_WRITE; goto refuse; }
  memcpy(aSql, aSealed, 16);
  memset(aSql+16, 0, FRAME_HDR-16);
  memcpy(aSql, aHdr, nHdr);
  if( memcmp(aSql, aSealed, 8)!=0 ){
    zWhy = "not a copy of the frame before it";
    goto refuse;
  }
  rc = tdeOpenPageTo(p, aSealed+FRAME_HDR, aPlain, pgsz, tdeGet32(aSealed), &vNoKey);
  if( rc==SQLITE_IOERR_AUTH ) tdeAuthFail(p, tdeGet32(aSealed), "WAL frame", vNoKey);
  if( rc ){
    if( rc==SQLITE_NOMEM ) goto fail;
    zWhy = "the frame before it does not authenticate";
    rc = SQLITE_IOERR_WRITE;
    goto refuse;
  }
  if( memcmp(z ? z : aPlain, aPlain, nPage<nBody ? nPage : nBody)!=0 ){
    zWhy = "its page is not a copy of the frame before it";
    rc = SQLITE_IOERR_WRITE;
    goto refuse;
  }
  memcpy(aSealed, aSql, 16);
  rc = walSealFrame(p, idx, aSealed, aPlain);
  if( rc ) goto fail;
  rc = p->pReal->pMethods->xWrite(p->pReal, aSealed, (int)(nHdr + nPage), iOff);
  if( rc ){
    walWriteFailed(p, idx);
    goto fail;
  }
  p->pWal->iSplit = idx;
  p->pWal->nSplitDone = nHdr + nPage;
  p->pWal->bSplitCk = bCk;
  return SQLITE_OK;
refuse:
  tdeLog(TDE_LOG_ERROR, "%s: WAL write of %u bytes at offset %lld (frame %u split after %u "
         "bytes) refused: %s", walName(p), nHdr + nPage, (long long)iOff, idx, nHdr + nPage, zWhy);
fail:
  walSplitDrop(p);
  return rc;
}

/* The next piece of the frame walSplitBegin sealed: iAmt bytes z at byte
** within of the frame. */
static int walSplitNext(TdeFile *p, const uint8_t *z, int iAmt, uint32_t within){
  uint32_t idx = p->pWal->iSplit, pgsz = p->pWal->pgsz, szFrame = FRAME_HDR + pgsz;
  uint32_t nBody = pgsz - TDE_TRAILER_SIZE;
  uint8_t *aSealed = p->pWal->aSplit, *aPlain = aSealed + szFrame, *aSql = aPlain + pgsz;
  int rc;
  if( iAmt<=0 || within!=p->pWal->nSplitDone || (uint64_t)within + (uint64_t)iAmt > szFrame
   || p->pWal->nSplit!=szFrame + pgsz + FRAME_HDR ){
    tdeLog(TDE_LOG_ERROR, "%s: WAL write of %d bytes into frame %u at byte %u refused: not the "
           "rest of the frame SQLite began", walName(p), iAmt, idx, within);
    walSplitDrop(p);
    return SQLITE_IOERR_WRITE;
  }
  for(uint32_t i=within; i<within+(uint32_t)iAmt; i++){
    uint8_t c = z[i-within];
    int bSame = 1;
    if( i<16 ) bSame = c==aSql[i];                  /* header fields */
    else if( i<FRAME_HDR ) aSql[i] = c;             /* SQLite's checksum, never stored */
    else if( i<FRAME_HDR+nBody ) bSame = c==aPlain[i-FRAME_HDR];
    if( !bSame ){
      tdeLog(TDE_LOG_ERROR, "%s: WAL write of %d bytes into frame %u at byte %u refused: it "
             "differs from the frame SQLite began (a copy of the frame before it)",
             walName(p), iAmt, idx, within);
      walSplitDrop(p);
      return SQLITE_IOERR_WRITE;
    }
  }
  rc = p->pReal->pMethods->xWrite(p->pReal, aSealed+within, iAmt, walFrameOffset(p, idx) + within);
  if( rc ){
    walWriteFailed(p, idx);
    walSplitDrop(p);
    return rc;
  }
  p->pWal->nSplitDone += (uint32_t)iAmt;
  if( p->pWal->nSplitDone==szFrame ){
    if( p->pWal->bSplitCk ) walCkRemember(p, idx, aSealed+16, aSql+16);
    else if( idx<p->pWal->nCk ) p->pWal->aCk[idx].bValid = 0;
    walNoteWritten(p, idx, aSealed+8);
    walSplitDrop(p);
  }
  return SQLITE_OK;
}

/* tdeWalSync with a frame header held: its page comes after the sync. */
static int walSplitHeld(TdeFile *p){
  uint32_t idx = (uint32_t)((p->pWal->iPendingOff - WAL_HDR) / (FRAME_HDR + p->pWal->pgsz)) + 1;
  p->pWal->bPending = 0;
  return walSplitBegin(p, idx, p->pWal->aPending, FRAME_HDR, 1, 0, 0);
}

/*
** tdeWalWrite's stages.  SQLite writes a -wal as: the 32-byte header at a
** restart, then per frame its 24-byte header and its page (or, with sector
** padding, a frame in pieces).  Each stage below is one of those writes.
*/

/* The held frame header: a page write at the offset after it takes it
** (aJoin), whatever becomes of this write (after a failure SQLite writes
** both again), so no later call flushes a header whose page never came. */
static int walTakeHeld(TdeFile *p, sqlite3_int64 iOfst, uint8_t *aJoin){
  if( !p->pWal->bPending || iOfst!=p->pWal->iPendingOff+FRAME_HDR ) return 0;
  memcpy(aJoin, p->pWal->aPending, FRAME_HDR);
  p->pWal->bPending = 0;
  return 1;
}

/* Restart, first stage: the generation ends.  A split frame is given up,
** a held header completed, the generation's pages folded into the page map
** and the ship hook told, before the new header replaces the old. */
static int walGenerationEnds(TdeFile *p, const uint8_t *z){
  int rc;
  walSplitDrop(p);
  rc = tdeWalFlush(p);
  if( rc ) return rc;
  rc = tdeWalFoldMap(p);
  if( rc ) return rc;
  if( p->pMain ) p->pMain->pDb->map.bWalSyncFailed = 0;   /* a new generation */
  walShipHook(p, TDE_CAPTURE_RESTART, z);
  return SQLITE_OK;
}

/* Restart, epoch binding: version 2 binds the new generation to L + 1 (the
** database header was re-read when this connection took the write lock;
** refreshed here whatever the lock path). */
static int walHeaderEpoch(TdeFile *p, int *pbV2, uint64_t *pw){
  int rc;
  *pw = 0;
  *pbV2 = walV2(p);
  if( !*pbV2 ) return SQLITE_OK;
  rc = tdeMainRefreshIfChanged(p->pMain);
  if( rc ) return rc;
  *pw = p->pMain->pDb->pKeys->hdr.logEpoch + 1;
  return SQLITE_OK;
}

/* Restart, seal: SQLite's first 24 bytes, their MAC, zeros to WAL_HDR. */
static int walHeaderSeal(TdeFile *p, const uint8_t *z, int bV2, uint64_t w, uint8_t *aHdr){
  const TdeDbKeys *k = p->pMain ? p->pMain->pDb->pKeys : 0;
  const TdeDekVer *d = k ? tdeKeysFind(k, k->hdr.curVersion) : 0;
  int rc;
  memcpy(aHdr, z, 24);
  rc = walHdrMac(d ? d->pWalHmac : 0, aHdr, bV2, w, aHdr+24);
  if( rc ) return rc;
  memset(aHdr+24+MAC_BYTES, 0, WAL_HDR-24-MAC_BYTES);
  return SQLITE_OK;
}

/* Restart, last stage: the header is on disk; this handle's view of the
** generation starts, and (version 2) the epoch update falls due. */
static void walHeaderWritten(TdeFile *p, const uint8_t *z, const uint8_t *aHdr, int bV2, uint64_t w){
  memcpy(p->pWal->aHdr, z, WAL_HDR);
  memcpy(p->pWal->aHdrMac, aHdr+24, MAC_BYTES);
  p->pWal->w = w;
  p->pWal->bHdr = 1;
  p->pWal->pgsz = tdeValidPgsz(tdeGet32(z+8)) ? tdeGet32(z+8) : 0;
  p->pWal->iMaxWritten = 0;     /* a new generation */
  /* A chain that cannot start for want of memory starts when aMac is
  ** first allocated (walMacRoom) or at the next header load, so the write
  ** itself stands. */
  (void)walCkForget(p);
  if( bV2 ){
    /* The WAL header durable first, then the epoch update, both before
    ** the first frame: a crash in between leaves a header bound to L + 1,
    ** which readers accept (the generation has no frame yet); never a
    ** database header bound to a WAL header that is not on disk.  The
    ** sync is SQLite's own of this header when it makes one (tdeWalSync),
    ** else the shim's (tdeWalFlush).  (docs/FORMAT.md "Restart") */
    p->pWal->bEpochDue = 1;
    p->pWal->wDue = w;
    memcpy(p->pWal->aDueSalt, z+16, 8);
  }
}

/* The WAL header write of a restart: end, bind, seal, write, note. */
static int walWriteHeader(TdeFile *p, const uint8_t *z){
  uint8_t aHdr[WAL_HDR];
  uint64_t w = 0;
  int bV2 = 0, rc;
  rc = walGenerationEnds(p, z);
  if( rc==SQLITE_OK ) rc = walHeaderEpoch(p, &bV2, &w);
  if( rc==SQLITE_OK ) rc = walHeaderSeal(p, z, bV2, w, aHdr);
  if( rc==SQLITE_OK ) rc = p->pReal->pMethods->xWrite(p->pReal, aHdr, WAL_HDR, 0);
  if( rc ) return rc;
  walHeaderWritten(p, z, aHdr, bV2, w);
  return SQLITE_OK;
}

/* The stored header fields of frame idx, for a page write whose header
** went out at once (locking_mode=EXCLUSIVE after a rollback: SQLite
** rewrites a frame this handle wrote before). */
static int walStoredFrameHeader(TdeFile *p, uint32_t idx, sqlite3_int64 iOfst, uint8_t *aHdr){
  int bShort = 0;
  int rc = tdeWalFlush(p);
  if( rc==SQLITE_OK ) rc = tdeRealRead(p, aHdr, FRAME_HDR, iOfst-FRAME_HDR, &bShort);
  if( rc ) return rc;
  if( bShort ){
    tdeLog(TDE_LOG_ERROR, "%s: frame %u page written without a header", walName(p), idx);
    return SQLITE_IOERR_WRITE;
  }
  return SQLITE_OK;
}

/* A frame written in pieces (sector padding): a piece of the header or,
** after the header, of the page. */
static int walIsPiece(TdeFile *p, uint32_t within, int iAmt){
  if( iAmt<=0 ) return 0;
  if( within==0 ) return iAmt<FRAME_HDR;
  return within==FRAME_HDR && (uint32_t)iAmt<p->pWal->pgsz;
}

/* The next piece of the frame in pieces, or the first piece of one. */
static int walWritePiece(TdeFile *p, uint32_t idx, uint32_t within, const uint8_t *z, int iAmt,
                         sqlite3_int64 iOfst, const uint8_t *aJoin){
  uint8_t aHdr[FRAME_HDR];
  int rc;
  if( p->pWal->iSplit ) return walSplitNext(p, z, iAmt, within);
  if( within==0 ){
    rc = tdeWalFlush(p);
    if( rc ) return rc;
    return walSplitBegin(p, idx, z, (uint32_t)iAmt, 1, 0, 0);
  }
  if( aJoin ) return walSplitBegin(p, idx, aJoin, FRAME_HDR, 1, z, (uint32_t)iAmt);
  rc = walStoredFrameHeader(p, idx, iOfst, aHdr);
  if( rc ) return rc;
  return walSplitBegin(p, idx, aHdr, FRAME_HDR, 0, z, (uint32_t)iAmt);
}

/* A frame header write: version 2 first checks that this handle's chain
** still starts from the header on disk (another connection may have
** restarted the WAL since this handle read it), then holds the header
** until its page comes. */
static int walHoldFrameHeader(TdeFile *p, uint32_t idx, const uint8_t *z, sqlite3_int64 iOfst){
  static const uint8_t aZero[8];
  int rc;
  if( walV2(p) && memcmp(z+8, aZero, 8)!=0 && memcmp(z+8, p->pWal->aHdr+16, 8)!=0 ){
    uint8_t aHdr[WAL_HDR];
    uint64_t w = 0;
    int state;
    rc = tdeWalFlush(p);
    if( rc==SQLITE_OK ) rc = walLoadHeaderW(p, aHdr, &state, &w);
    if( rc ) return rc;
    if( state==FRAME_STALE ) return walStale(p, w);
  }
  rc = tdeWalFlush(p);
  if( rc ) return rc;
  memcpy(p->pWal->aPending, z, FRAME_HDR);
  p->pWal->iPendingOff = iOfst;
  p->pWal->bPending = 1;
  /* A frame this handle already wrote (SQLite rewriting the checksums of
  ** a transaction that spilled, up to its commit frame): its page is on
  ** disk and no page write follows -- complete it now, or the commit
  ** would wait in memory for the next I/O call. */
  if( idx<=p->pWal->iMaxWritten && memcmp(z+8, p->pWal->aMaxSalt, 8)==0 ) return tdeWalFlush(p);
  return SQLITE_OK;
}

/* A whole page with its held header (aJoin): seal with the chained MAC,
** then one write of the frame. */
static int walWriteJoined(TdeFile *p, uint32_t idx, const uint8_t *z, sqlite3_int64 iOfst,
                          const uint8_t *aJoin){
  uint8_t *aFrame = p->aBuf;
  int rc;
  memcpy(aFrame, aJoin, FRAME_HDR);
  rc = walSealFrame(p, idx, aFrame, z);
  if( rc ) return rc;
  rc = p->pReal->pMethods->xWrite(p->pReal, aFrame, (int)(FRAME_HDR + p->pWal->pgsz), iOfst-FRAME_HDR);
  if( rc ){
    walWriteFailed(p, idx);
    return rc;
  }
  walCkRemember(p, idx, aFrame+16, aJoin+16);
  walNoteWritten(p, idx, aFrame+8);
  return SQLITE_OK;
}

/* A whole page rewritten in place (a frame of the open transaction, whose
** headers SQLite rewrites at commit): the header fields as stored, the
** header's new MAC and the page out in one write. */
static int walWriteRewrite(TdeFile *p, uint32_t idx, const uint8_t *z, int iAmt, sqlite3_int64 iOfst){
  uint8_t *aFrame = p->aBuf;
  int rc = walStoredFrameHeader(p, idx, iOfst, aFrame);
  if( rc==SQLITE_OK ) rc = walSealFrame(p, idx, aFrame, z);
  if( rc ) return rc;
  if( idx<p->pWal->nCk ) p->pWal->aCk[idx].bValid = 0;
  rc = p->pReal->pMethods->xWrite(p->pReal, aFrame+16, MAC_BYTES + iAmt, iOfst-FRAME_HDR+16);
  if( rc ){
    walWriteFailed(p, idx);
    return rc;
  }
  walNoteWritten(p, idx, aFrame+8);
  return SQLITE_OK;
}

/*
** xWrite of a -wal: take a held frame header, let the main database
** rewrite a header that is due, then one stage per kind of write: the WAL
** header (restart), a piece of a frame, a frame header (held), a page.
*/
int tdeWalWrite(TdeFile *p, const void *zBuf, int iAmt, sqlite3_int64 iOfst){
  const uint8_t *z = zBuf;
  uint8_t aJoin[FRAME_HDR];
  uint32_t szFrame, idx, within;
  int bJoin, rc;

  bJoin = walTakeHeld(p, iOfst, aJoin);
  rc = tdeScratch(p);
  if( rc ) return rc;
  /* WAL writes happen inside a write transaction: re-wrap a header left
  ** behind by a master-key rotation, rewrite a torn header slot (a flag
  ** test when nothing is due). */
  if( p->pMain ){
    rc = tdeMainHeaderDue(p->pMain);
    if( rc ) return rc;
  }
  if( iOfst==0 && iAmt==WAL_HDR ) return walWriteHeader(p, z);
  if( iOfst<WAL_HDR ){
    tdeLog(TDE_LOG_ERROR, "%s: unexpected partial WAL header write", walName(p));
    return SQLITE_IOERR_WRITE;
  }
  rc = walNeedHeader(p);
  if( rc ) return rc;
  szFrame = FRAME_HDR + p->pWal->pgsz;
  idx = (uint32_t)((iOfst - WAL_HDR) / szFrame) + 1;
  within = (uint32_t)((iOfst - WAL_HDR) % szFrame);

  if( p->pWal->iSplit && (idx!=p->pWal->iSplit || within!=p->pWal->nSplitDone) ){
    walSplitDrop(p);            /* SQLite gave the frame up (an error between its pieces) */
  }
  if( p->pWal->iSplit || walIsPiece(p, within, iAmt) ){
    return walWritePiece(p, idx, within, z, iAmt, iOfst, bJoin ? aJoin : 0);
  }
  if( within==0 && iAmt==FRAME_HDR ) return walHoldFrameHeader(p, idx, z, iOfst);
  if( within==FRAME_HDR && (uint32_t)iAmt==p->pWal->pgsz ){
    if( bJoin ) return walWriteJoined(p, idx, z, iOfst, aJoin);
    return walWriteRewrite(p, idx, z, iAmt, iOfst);
  }
  tdeLog(TDE_LOG_ERROR, "%s: unexpected WAL write of %d bytes at offset %lld",
         walName(p), iAmt, (long long)iOfst);
  return SQLITE_IOERR_WRITE;
}

int tdeWalTruncate(TdeFile *p, sqlite3_int64 size){
  int rc;
  walSplitDrop(p);
  rc = tdeWalFlush(p);
  if( rc ) return rc;
  if( size<WAL_HDR ){
    rc = tdeWalFoldMap(p);      /* the generation ends: its pages into the page map */
    if( rc ) return rc;
    if( p->pMain ) p->pMain->pDb->map.bWalSyncFailed = 0;
    /* Truncated to nothing: every frame goes (a shorter truncation only
    ** drops frames beyond the ones just committed, captured already). */
    walShipHook(p, TDE_CAPTURE_CLOSE, 0);
  }
  (void)walCkForget(p);         /* as after a header write (tdeWalWrite) */
  p->pWal->iMaxWritten = 0;
  if( size<WAL_HDR ) p->pWal->bHdr = 0;
  return p->pReal->pMethods->xTruncate(p->pReal, size);
}

/*
** Verify the frames of the current generation.  mxFrame > 0: SQLite's
** WAL index says frames 1..mxFrame are the log, and each must
** authenticate; later ones are not part of the database (an unfinished
** transaction, or older frames).  mxFrame == 0 (no index to ask): frames
** are checked until the first that is not of this generation; a bad one
** is damage only if a committed transaction follows it (the rule recovery
** applies).
*/
int tdeWalVerify(TdeFile *p, uint32_t mxFrame, sqlite3_int64 *pnFrames, sqlite3_int64 *piBad){
  uint8_t aHdr[WAL_HDR];
  uint8_t *aFrame;
  int rc, state;
  uint32_t idx;
  *pnFrames = 0;
  *piBad = 0;
  rc = tdeWalFlush(p);
  if( rc ) return rc;
  {
    uint64_t w = 0;
    rc = walLoadHeaderW(p, aHdr, &state, &w);
    if( rc ) return rc;
    if( state==FRAME_STALE ){ *piBad = -1; return walStale(p, w); }
  }
  if( state==FRAME_SHORT ) return SQLITE_OK;
  if( state==FRAME_BAD ){
    int bFound = 0;
    if( mxFrame==0 ){
      rc = walFirstFrameAuthentic(p, &bFound);
      if( rc ) return rc;
    }
    if( mxFrame>0 || bFound ){ *piBad = -1; return SQLITE_IOERR_AUTH; }
    return SQLITE_OK;
  }
  if( !p->pWal->pgsz ) return SQLITE_OK;
  aFrame = sqlite3_malloc((int)(FRAME_HDR + p->pWal->pgsz));
  if( !aFrame ) return SQLITE_NOMEM;
  for(idx=1; mxFrame==0 || idx<=mxFrame; idx++){
    WalBad bad;
    rc = walLoadFrame(p, idx, aFrame, &state, &bad);
    if( rc ) break;
    if( state==FRAME_SHORT ){
      if( mxFrame ){ *piBad = idx; rc = SQLITE_IOERR_AUTH; }
      break;
    }
    if( state==FRAME_BAD && !mxFrame ){
      int bOther = 0;
      rc = walOtherGeneration(p, idx, aFrame, &bOther);
      if( rc ) walFrameFail(p, idx, &bad, 0);
      if( rc ) break;
      if( bOther ) break;          /* as recovery reads it: the end */
    }
    if( state==FRAME_BAD ){
      int bCommit = 0;
      if( !mxFrame ) rc = walCommitFollows(p, idx+1, &bCommit);
      if( rc || mxFrame || bCommit ) walFrameFail(p, idx, &bad, mxFrame ? "WAL" : 0);
      if( rc ) break;
      if( mxFrame || bCommit ){ *piBad = idx; rc = SQLITE_IOERR_AUTH; }
      break;
    }
    if( memcmp(aFrame+8, p->pWal->aHdr+16, 8)!=0 ){
      if( mxFrame ){ *piBad = idx; rc = SQLITE_IOERR_AUTH; }
      break;                       /* older generation: the end */
    }
    (*pnFrames)++;
  }
  tdeWipe(aFrame, FRAME_HDR + p->pWal->pgsz);
  sqlite3_free(aFrame);
  return rc;
}

/* Page numbers of frames iFirst..mxFrame of the current generation, for
** tde_verify (a database page torn by a crash during a checkpoint is
** harmless while a frame not yet checkpointed holds a newer copy).
** *paPgno is sqlite3_malloc'd. */
int tdeWalPageList(TdeFile *p, uint32_t iFirst, uint32_t mxFrame, uint32_t **paPgno, uint32_t *pn){
  uint32_t *a;
  uint32_t n = 0;
  int rc = SQLITE_OK;
  *paPgno = 0;
  *pn = 0;
  if( iFirst<1 ) iFirst = 1;
  if( mxFrame<iFirst || !p->pWal->pgsz ) return SQLITE_OK;
  a = sqlite3_malloc64(sizeof(uint32_t) * (sqlite3_uint64)(mxFrame - iFirst + 1));
  if( !a ) return SQLITE_NOMEM;
  for(uint32_t idx=iFirst; idx<=mxFrame; idx++){
    uint8_t aHdr[FRAME_HDR];
    int bShort = 0;
    rc = tdeRealRead(p, aHdr, FRAME_HDR, walFrameOffset(p, idx), &bShort);
    if( rc || bShort ) break;
    a[n++] = tdeGet32(aHdr);
  }
  *paPgno = a;
  *pn = n;
  return rc;
}

/* ---- the page map's view of the log ------------------------------------ */

int tdeWalNewestTag(TdeFile *p, uint32_t pgno, uint32_t bound, const uint8_t *aSalt,
                    uint8_t aTag[8], int *pbFound){
  uint32_t e;
  int rc;
  *pbFound = 0;
  if( !p || p->eKind!=TDE_KIND_WAL || !walV2(p) ) return SQLITE_OK;
  if( !p->pWal->bHdr || (aSalt && memcmp(p->pWal->aHdr+16, aSalt, 8)!=0) || !p->pWal->bChain ){
    /* Another connection restarted the log: read its header again. */
    uint8_t aHdr[WAL_HDR];
    uint64_t w = 0;
    int state;
    rc = walLoadHeaderW(p, aHdr, &state, &w);
    if( rc ) return rc;
    if( state!=FRAME_OK ) return SQLITE_OK;
    if( aSalt && memcmp(p->pWal->aHdr+16, aSalt, 8)!=0 ) return SQLITE_OK;
    if( !p->pWal->bChain ){
      rc = walChainReset(p, 1);
      if( rc ) return rc;
    }
  }
  rc = walChainExtend(p, bound);
  if( rc ) return rc;
  e = p->pWal->iChainCommit;
  if( bound<e ) e = bound;
  for(uint32_t j=e; j>0; j--){
    if( p->pWal->aMac[j].pgno==pgno ){
      memcpy(aTag, p->pWal->aMac[j].tag, 8);
      *pbFound = 1;
      break;
    }
  }
  return SQLITE_OK;
}

/*
** The generation on disk ends (a restart writes a new header, the log is
** truncated or deleted): fold its committed frames -- the verified chain
** from the header bound to the database's L up to its last commit frame --
** into the page map.  A header that is not the current generation's (no
** log yet, an interrupted restart, damage) has no committed frame.
*/
/* The frames of the log as SQLite's WAL index has them, for a fold, into
** *pBound: its last frame when it is mapped; else (no shared index) the
** chain's end, unless a WAL sync failed in this generation (a commit frame
** past SQLite's end may then be on disk): *pbDrop = drop the map instead.
**
** An index whose salts are not the log's (as on disk) describes another
** generation: with locking_mode=EXCLUSIVE entered after the shared index
** existed, SQLite keeps the index but takes no shm lock, so it resets the
** index for the next generation (walRestartHdr) with no lock-time fold
** before, and the index's end is not this generation's (issue 21, bug 4).
** Then, as without a shared index: a generation this handle folded already
** stays as folded, otherwise the chain's end.  (The salts on disk are read
** unauthenticated: they only choose between two bounds of the verified
** chain.) */
static int walFoldBound(TdeFile *p, uint32_t *pBound, int *pbDrop){
  TdeFile *m = p->pMain;
  *pbDrop = 0;
  if( m->pDb->pShm0 ){
    uint32_t mx;
    uint8_t aSalt[8], aDisk[8];
    int bShort = 0, rc;
    memcpy(&mx, (const void*)((const volatile uint8_t*)m->pDb->pShm0 + 16), 4);
    memcpy(aSalt, (const void*)((const volatile uint8_t*)m->pDb->pShm0 + 32), 8);
    rc = tdeRealRead(p, aDisk, 8, 16, &bShort);
    if( rc ) return rc;
    *pBound = mx;
    if( bShort || memcmp(aSalt, aDisk, 8)==0 ) return SQLITE_OK;
    if( p->pWal->bFolded && memcmp(p->pWal->aFoldSalt, aDisk, 8)==0 ){
      *pBound = p->pWal->iFoldEnd;
      return SQLITE_OK;
    }
  }
  if( m->pDb->map.bWalSyncFailed ){ *pbDrop = 1; *pBound = 0; return SQLITE_OK; }
  *pBound = UINT32_MAX;
  return SQLITE_OK;
}

int tdeWalFoldMap(TdeFile *p){
  int bDrop = 0, rc;
  uint32_t bound = 0;
  if( !walV2(p) || !p->pMain || p->pMain->pDb->repl.bStandby ) return SQLITE_OK;
  rc = walFoldBound(p, &bound, &bDrop);
  if( rc ) return rc;
  if( bDrop ) return tdeMapDrop(p->pMain);
  return tdeWalFoldMapTo(p, bound);
}

int tdeWalFoldMapTo(TdeFile *p, uint32_t bound){
  uint8_t aHdr[WAL_HDR];
  uint32_t *aPgno = 0, n = 0, nDb = 0;
  uint8_t *aTag = 0;
  uint64_t w = 0;
  int state, rc;
  if( !walV2(p) || !p->pMain || p->pMain->pDb->repl.bStandby ) return SQLITE_OK;
  rc = tdeMainRefreshIfChanged(p->pMain);
  if( rc ) return rc;
  rc = walLoadHeaderW(p, aHdr, &state, &w);
  if( rc ) return rc;
  if( state==FRAME_OK && p->pWal->w==p->pMain->pDb->pKeys->hdr.logEpoch && p->pWal->pgsz ){
    if( !p->pWal->bChain ){
      rc = walChainReset(p, 1);
      if( rc ) return rc;
    }
    rc = walChainExtend(p, bound);
    if( rc ) return rc;
    n = p->pWal->iChainCommit;
    if( n>bound ){
      /* The last commit frame at or below SQLite's end of the log. */
      n = bound;
      while( n>0 && !p->pWal->aMac[n].bCommit ) n--;
    }
  }
  if( p->pWal->bFolded && p->pWal->iFoldEnd==n && memcmp(p->pWal->aFoldSalt, p->pWal->aHdr+16, 8)==0
   && memcmp(p->pWal->aFoldRoot, p->pMain->pDb->pKeys->hdr.aMapRoot, 16)==0 ){
    return SQLITE_OK;           /* folded already, and the map is still that fold's */
  }
  if( n ){
    uint8_t aFh[8];
    int bShort = 0;
    aPgno = sqlite3_malloc64((sqlite3_uint64)n * sizeof(uint32_t));
    aTag = sqlite3_malloc64((sqlite3_uint64)n * 8);
    if( !aPgno || !aTag ){ rc = SQLITE_NOMEM; goto done; }
    for(uint32_t j=1; j<=n; j++){
      aPgno[j-1] = p->pWal->aMac[j].pgno;
      memcpy(aTag + (size_t)(j-1)*8, p->pWal->aMac[j].tag, 8);
    }
    rc = tdeRealRead(p, aFh, 8, walFrameOffset(p, n), &bShort);
    if( rc==SQLITE_OK && bShort ) rc = SQLITE_IOERR_SHORT_READ;
    if( rc ) goto done;
    nDb = tdeGet32(aFh+4);
  }
  rc = tdeMainHookWalFold(p->pMain, aPgno, aTag, n, nDb);   /* the page map (hooks.c) */
  if( rc==SQLITE_OK && n ){
    p->pWal->bFolded = 1;
    p->pWal->iFoldEnd = n;
    memcpy(p->pWal->aFoldSalt, p->pWal->aHdr+16, 8);
    memcpy(p->pWal->aFoldRoot, p->pMain->pDb->pKeys->hdr.aMapRoot, 16);
  }
done:
  sqlite3_free(aPgno);
  sqlite3_free(aTag);
  return rc;
}

/* The same for a WAL that no handle has open (SQLite closed it before
** deleting it): read through the VFS below tde. */
int tdeWalFoldMapFile(TdeFile *pMain, const char *zWal){
  sqlite3_vfs *pOrig = (sqlite3_vfs*)tdeVfs.pAppData;
  sqlite3_file *pFd;
  TdeFile w;
  TdeWal wPart;               /* w's own part (TdeFile.pWal) */
  int outFlags = 0, bExists = 0, rc;
  if( !pMain->pDb->pKeys || pMain->pDb->pKeys->hdr.version<TDE_FORMAT_V2 || pMain->pDb->repl.bStandby ) return SQLITE_OK;
  rc = pOrig->xAccess(pOrig, zWal, SQLITE_ACCESS_EXISTS, &bExists);
  if( rc || !bExists ) return rc;
  pFd = sqlite3_malloc(pOrig->szOsFile);
  if( !pFd ) return SQLITE_NOMEM;
  memset(pFd, 0, (size_t)pOrig->szOsFile);
  rc = pOrig->xOpen(pOrig, zWal, pFd, SQLITE_OPEN_READONLY|SQLITE_OPEN_WAL, &outFlags);
  if( rc==SQLITE_OK ){
    memset(&w, 0, sizeof(w));
    memset(&wPart, 0, sizeof(wPart));
    w.pWal = &wPart;
    w.eKind = TDE_KIND_WAL;
    w.pReal = pFd;
    w.pMain = pMain;
    w.zName = zWal;
    /* As far as SQLite's WAL index went when it was unmapped for this
    ** deletion; without one (locking_mode=EXCLUSIVE), as tdeWalFoldMap. */
    if( pMain->pDb->map.bWalIndexEnd ) rc = tdeWalFoldMapTo(&w, pMain->pDb->map.walIndexEnd);
    else if( pMain->pDb->map.bWalSyncFailed ) rc = tdeMapDrop(pMain);
    else rc = tdeWalFoldMapTo(&w, UINT32_MAX);
    if( rc==SQLITE_OK ){ pMain->pDb->map.bWalIndexEnd = 0; pMain->pDb->map.bWalSyncFailed = 0; }
    tdeWalFree(&w);
  }
  if( pFd->pMethods ) pFd->pMethods->xClose(pFd);
  sqlite3_free(pFd);
  return rc;
}
