/*
** The header region of a main database on disk: its one reader and its
** one writer.  keys/header.c is the byte codec (decode, pick, encode, MAC);
** this file does the I/O around it.
**
** The reader (tdeHdrRead) reads the region, picks the newest valid slot
** (or, for tde_verify, takes each slot in turn), and verifies it: the
** database id it must name, then the data key from the caller (xKey: the
** key held, the keystore's unwrap, or a new keyring for the open), then
** the slot's MAC.  Used by the load at open (vfs.c), tde_verify's header
** check (vfs.c), the refresh (dek.c) and the header update (keyops.c).
**
** The writer (tdeHdrWrite) follows LMDB's meta-page discipline: the new
** header goes into the slot not in force, is synced, and only then into
** the other slot, synced again (docs/FORMAT.md "Header updates", "Epoch
** updates").
**
** Calls only down (fileio, keys/): the callers' key sources are passed in.
*/
#include "vfs/vfs_int.h"

/* One slot of r->aRegion: decoded into r->pHdr if bDecode (else the pick
** did it), checked to name r->aDbid, its MAC checked with xKey's key. */
static int hdrCheckSlot(TdeFile *p, TdeHdrRead *r, int iSlot, int bDecode){
  const uint8_t *aSlot = r->aRegion + iSlot*TDE_SLOT_SIZE;
  uint8_t macKey[32];
  uint8_t *aDek;
  int trc = bDecode ? tdeHeaderDecode(aSlot, r->pHdr) : TDE_OK;
  if( trc==TDE_OK && r->aDbid && memcmp(r->pHdr->dbid, r->aDbid, TDE_DBID_BYTES)!=0 ){
    trc = tdeErr(TDE_FORMAT, "the header names another database");
  }
  if( trc ) return trc;
  aDek = tdeSecureAlloc(32);
  if( !aDek ) return TDE_NOMEM;
  trc = r->xKey(p, r->pHdr, r->pArg, aDek);
  if( trc==TDE_OK ) trc = tdeHeaderMacKey(aDek, r->pHdr->dbid, macKey);
  if( trc==TDE_OK ) trc = tdeHeaderCheckMac(aSlot, macKey);
  tdeWipe(macKey, sizeof(macKey));
  tdeSecureFree(aDek, 32);
  return trc;
}

int tdeHdrRead(TdeFile *p, TdeHdrRead *r, int *pTrc){
  int bShort = 0, rc;
  *pTrc = TDE_OK;
  r->aRegion = sqlite3_malloc(TDE_HEADER_BYTES);
  if( !r->aRegion ) return SQLITE_NOMEM;
  memset(r->aRegion, 0, TDE_HEADER_BYTES);
  rc = tdeRealRead(p, r->aRegion, r->nRead, 0, &bShort);
  if( rc ) return rc;
  if( r->bEach ){
    if( bShort ){
      *pTrc = tdeErr(TDE_IO, "cannot read the header");
      return SQLITE_OK;
    }
    r->iSlot = -1;
    for(int i=0; i<2 && r->iSlot<0; i++){
      int t = hdrCheckSlot(p, r, i, 1);
      /* Out of memory is an error to report as such, not damage. */
      if( t==TDE_NOMEM ){ *pTrc = t; return SQLITE_OK; }
      if( t!=TDE_OK ) r->iSlot = i;
    }
    if( r->iSlot>=0 ) *pTrc = tdeErr(TDE_AUTH, "header slot %d is damaged or was tampered with", r->iSlot);
    return SQLITE_OK;
  }
  *pTrc = tdeHeaderPick(r->aRegion, (size_t)r->nRead, r->pHdr, &r->iSlot);
  if( *pTrc==TDE_OK ) *pTrc = hdrCheckSlot(p, r, r->iSlot, 0);
  return SQLITE_OK;
}

void tdeHdrReadDone(TdeHdrRead *r){
  sqlite3_free(r->aRegion);
  r->aRegion = 0;
}

/*
** Write pNew, sealed with a MAC keyed by aDek (its current data key), over
** the region r read (r->iSlot in force): into the other slot, sync, then
** into r->iSlot, sync.  bEpoch (a version-2 epoch or freshness update):
** a slot whose first TDE_HDR_EPOCH_SECTOR bytes are already the new ones
** is written from there only (one aligned sector a power loss cannot
** tear); else whole.  r->aRegion is used as scratch.
*/
int tdeHdrWrite(TdeFile *p, TdeHdrRead *r, const TdeHeader *pNew, const uint8_t *aDek, int bEpoch){
  sqlite3_file *pReal = p->pReal;
  uint8_t macKey[32];
  int iSlot = r->iSlot, rc = SQLITE_OK;
  int trc = tdeHeaderMacKey(aDek, pNew->dbid, macKey);
  if( trc==TDE_OK && bEpoch ){
    uint8_t *aSlot = sqlite3_malloc(TDE_SLOT_SIZE);
    if( !aSlot ){ tdeWipe(macKey, sizeof(macKey)); return SQLITE_NOMEM; }
    trc = tdeHeaderEncode(pNew, macKey, aSlot);
    for(int i=0; i<2 && trc==TDE_OK && rc==SQLITE_OK; i++){
      int iTo = i==0 ? 1-iSlot : iSlot;
      int bSame = memcmp(r->aRegion + iTo*TDE_SLOT_SIZE, aSlot, TDE_HDR_EPOCH_SECTOR)==0;
      int iFrom = bSame ? TDE_HDR_EPOCH_SECTOR : 0;
      rc = pReal->pMethods->xWrite(pReal, aSlot+iFrom, TDE_SLOT_SIZE-iFrom,
                                   (sqlite3_int64)iTo*TDE_SLOT_SIZE + iFrom);
      if( rc==SQLITE_OK ) rc = pReal->pMethods->xSync(pReal, SQLITE_SYNC_NORMAL);
    }
    sqlite3_free(aSlot);
  }else{
    if( trc==TDE_OK ) trc = tdeHeaderEncode(pNew, macKey, r->aRegion);
    if( trc==TDE_OK ){
      rc = pReal->pMethods->xWrite(pReal, r->aRegion, TDE_SLOT_SIZE, (1-iSlot)*TDE_SLOT_SIZE);
      if( rc==SQLITE_OK ) rc = pReal->pMethods->xSync(pReal, SQLITE_SYNC_NORMAL);
      if( rc==SQLITE_OK ) rc = pReal->pMethods->xWrite(pReal, r->aRegion, TDE_SLOT_SIZE, iSlot*TDE_SLOT_SIZE);
      if( rc==SQLITE_OK ) rc = pReal->pMethods->xSync(pReal, SQLITE_SYNC_NORMAL);
    }
  }
  tdeWipe(macKey, sizeof(macKey));
  return trc ? tdeSqliteRc(trc) : rc;
}
