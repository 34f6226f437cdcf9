/*
** Rollback journals under the tde shim (docs/FORMAT.md "Rollback
** journal").  SQLite writes its journal at arbitrary offsets and lengths
** and relies on one property of the device: a write that is torn by a
** power loss damages only the sectors it was writing.  An encrypted block
** that must be re-sealed whole to change a few bytes of it would break
** that -- a torn re-seal would destroy journal records that were already
** synced.  So every 512-byte block of the journal has two slots:
**
**   pair j at file offset j * TDE_JPAIR:   slot 0 | slot 1
**   slot = sealed(seq u64 || len u16 || 6 zero bytes || 512 data bytes) + trailer
**
** A block is changed by sealing its new content with seq+1 into the slot
** that does not hold the newest valid version; the old version stays
** intact until the new one is complete.  Reads take the valid slot with
** the larger seq.  The logical size is that of the last pair; a last pair
** with no valid slot is a torn append and does not count.  A pair before
** the last with no valid slot was tampered with: SQLITE_IOERR_AUTH.
**
** Keys: the database's data key (another process may have to play a hot
** journal back), so the page cipher of this handle seals slots.
*/
#include "vfs/vfs_int.h"

#define JBLOCK      512                                  /* journal bytes per block */
#define JPLAIN      (16 + JBLOCK)                        /* seq, len, pad, data */
#define JSLOT       (JPLAIN + TDE_TRAILER_SIZE)          /* stored slot */
#define JPAIR       (2 * JSLOT)

/* The newest valid version of one block. */
typedef struct JBlock {
  int iSlot;            /* slot holding it, -1 if none is valid */
  int bPresent;         /* any byte of the pair exists */
  int bZero;            /* every byte present is zero: never written */
  uint64_t seq;
  uint32_t len;
  uint8_t aData[JBLOCK];
} JBlock;

static void journalAad(TdeFile *p, sqlite3_int64 j, uint8_t *aad){
  aad[0] = 'J';
  memcpy(aad+1, p->dbid, TDE_DBID_BYTES);
  tdePut64(aad+1+TDE_DBID_BYTES, (uint64_t)j);
}
#define JAAD_BYTES (1 + TDE_DBID_BYTES + 8)

static int journalPhys(TdeFile *p, sqlite3_int64 *pPhys){
  return p->pReal->pMethods->xFileSize(p->pReal, pPhys);
}

/* Load pair j: the newest slot that authenticates. */
static int journalLoad(TdeFile *p, sqlite3_int64 j, sqlite3_int64 phys, JBlock *b){
  uint8_t *aPair = p->aBuf;                 /* JPAIR bytes */
  uint8_t *aPlain = p->aBuf + JPAIR;        /* JPLAIN bytes */
  uint8_t aad[JAAD_BYTES];
  sqlite3_int64 start = j * JPAIR;
  sqlite3_int64 avail = phys - start;
  int bShort, rc;

  b->iSlot = -1;
  b->bPresent = avail>0;
  b->bZero = 0;
  b->seq = 0;
  b->len = 0;
  memset(b->aData, 0, JBLOCK);
  if( avail<=0 ) return SQLITE_OK;
  if( avail>JPAIR ) avail = JPAIR;
  rc = tdeRealRead(p, aPair, (int)avail, start, &bShort);
  if( rc ) return rc;
  {
    sqlite3_int64 i;
    for(i=0; i<avail && aPair[i]==0; i++){}
    b->bZero = i==avail;
  }
  journalAad(p, j, aad);
  for(int s=0; s<2; s++){
    const uint8_t *aSlot = aPair + s*JSLOT;
    uint64_t seq;
    uint32_t len;
    if( (s+1)*JSLOT > avail ) break;
    int trc = tdeOpen(p, aad, sizeof(aad), aSlot, JPLAIN, aSlot+JPLAIN, aPlain);
    if( trc==TDE_NOMEM || trc==TDE_IO || trc==TDE_CRYPTO ){
      /* Could not check the slot: an error, not an absent block. */
      tdeWipe(aPlain, JPLAIN);
      return trc==TDE_NOMEM ? SQLITE_NOMEM : SQLITE_IOERR_READ;
    }
    if( trc ) continue;
    seq = tdeGet64(aPlain);
    len = tdeGet16(aPlain+8);
    if( len>JBLOCK ) continue;
    if( b->iSlot<0 || seq>b->seq ){
      b->iSlot = s;
      b->seq = seq;
      b->len = len;
      memcpy(b->aData, aPlain+16, JBLOCK);
    }
  }
  tdeWipe(aPlain, JPLAIN);
  return SQLITE_OK;
}

/* Remember that pair j now holds two valid versions: after the next sync
** the older one is erased (see tdeJournalSync). */
static int journalNoteRewrite(TdeFile *p, sqlite3_int64 j){
  if( p->nJDirty>0 && p->aJDirty[p->nJDirty-1]==j ) return SQLITE_OK;
  if( p->nJDirty==p->nJDirtyAlloc ){
    int n = p->nJDirtyAlloc ? p->nJDirtyAlloc*2 : 16;
    sqlite3_int64 *a = sqlite3_realloc64(p->aJDirty, sizeof(sqlite3_int64)*(sqlite3_uint64)n);
    if( !a ) return SQLITE_NOMEM;
    p->aJDirty = a;
    p->nJDirtyAlloc = n;
  }
  p->aJDirty[p->nJDirty++] = j;
  return SQLITE_OK;
}

/*
** Sync, then erase the older version of every block rewritten since the
** last sync.  The older version exists only so that a write torn by a
** crash falls back to it; once the newer one is durable it is no longer
** needed, and leaving it would let someone who damages the newer one
** bring back stale journal content without an error.  The erasures are
** made durable by the next sync (until then a crash leaves a stale but
** consistent older version, as before the sync).
*/
int tdeJournalSync(TdeFile *p, int flags){
  static const uint8_t aZero[JSLOT];
  JBlock *b;
  sqlite3_int64 phys = 0;
  int rc = p->pReal->pMethods->xSync(p->pReal, flags);
  if( rc || p->nJDirty==0 ) return rc;
  rc = tdeScratch(p);
  if( rc ) return rc;
  b = sqlite3_malloc(sizeof(*b));
  if( !b ) return SQLITE_NOMEM;
  rc = journalPhys(p, &phys);
  for(int i=0; rc==SQLITE_OK && i<p->nJDirty; i++){
    sqlite3_int64 j = p->aJDirty[i];
    rc = journalLoad(p, j, phys, b);
    if( rc==SQLITE_OK && b->iSlot>=0 && (j+1)*JPAIR<=phys ){
      rc = p->pReal->pMethods->xWrite(p->pReal, aZero, JSLOT, j*JPAIR + (1-b->iSlot)*JSLOT);
    }
  }
  p->nJDirty = 0;
  tdeWipe(b, sizeof(*b));
  sqlite3_free(b);
  return rc;
}

void tdeJournalFree(TdeFile *p){
  sqlite3_free(p->aJDirty);
  p->aJDirty = 0;
  p->nJDirty = p->nJDirtyAlloc = 0;
}

/* Seal a new version of block j into the slot not holding the newest. */
static int journalStore(TdeFile *p, sqlite3_int64 j, const JBlock *pOld,
                        const uint8_t *aData, uint32_t len){
  uint8_t *aPlain = p->aBuf + JPAIR;
  uint8_t *aSlot = p->aBuf;
  uint8_t aad[JAAD_BYTES];
  int iSlot = pOld->iSlot==0 ? 1 : 0;
  int rc;
  memset(aPlain, 0, 16);
  tdePut64(aPlain, pOld->seq + 1);
  tdePut16(aPlain+8, (uint16_t)len);
  memcpy(aPlain+16, aData, len);
  memset(aPlain+16+len, 0, JBLOCK - len);
  journalAad(p, j, aad);
  rc = tdeSeal(p, aad, sizeof(aad), aPlain, JPLAIN, aSlot, aSlot+JPLAIN);
  tdeWipe(aPlain, JPLAIN);
  if( rc ) return SQLITE_IOERR_WRITE;
  rc = p->pReal->pMethods->xWrite(p->pReal, aSlot, JSLOT, j*JPAIR + iSlot*JSLOT);
  if( rc==SQLITE_OK && pOld->iSlot>=0 ) rc = journalNoteRewrite(p, j);
  return rc;
}

/* Logical size: full blocks before the last pair, plus the last pair's
** length if it holds a valid version (a torn first append does not). */
static int journalSize(TdeFile *p, sqlite3_int64 phys, sqlite3_int64 *pSize, JBlock *b){
  sqlite3_int64 nPair = (phys + JPAIR - 1) / JPAIR;
  int rc;
  *pSize = 0;
  if( nPair==0 ) return SQLITE_OK;
  rc = journalLoad(p, nPair-1, phys, b);
  if( rc ) return rc;
  *pSize = (nPair-1)*JBLOCK + (b->iSlot>=0 ? b->len : 0);
  return SQLITE_OK;
}

int tdeJournalFileSize(TdeFile *p, sqlite3_int64 *pSize){
  sqlite3_int64 phys = 0;
  JBlock *b;
  int rc = tdeScratch(p);
  if( rc ) return rc;
  rc = journalPhys(p, &phys);
  if( rc ) return rc;
  b = sqlite3_malloc(sizeof(*b));
  if( !b ) return SQLITE_NOMEM;
  rc = journalSize(p, phys, pSize, b);
  tdeWipe(b, sizeof(*b));
  sqlite3_free(b);
  return rc;
}

static int journalBad(TdeFile *p, sqlite3_int64 j){
  p->nAuthFail++;
  tdeLog(TDE_LOG_ERROR, "%s: journal block %lld failed authentication in both slots",
         p->zName ? p->zName : "(journal)", (long long)j);
  return SQLITE_IOERR_AUTH;
}

int tdeJournalRead(TdeFile *p, void *zBuf, int iAmt, sqlite3_int64 iOfst){
  uint8_t *z = zBuf;
  sqlite3_int64 phys = 0, size = 0;
  JBlock *b;
  int nDone = 0;
  int rc = tdeScratch(p);
  if( rc ) return rc;
  b = sqlite3_malloc(sizeof(*b));
  if( !b ) return SQLITE_NOMEM;
  rc = journalPhys(p, &phys);
  if( rc==SQLITE_OK ) rc = journalSize(p, phys, &size, b);
  while( rc==SQLITE_OK && nDone<iAmt ){
    sqlite3_int64 off = iOfst + nDone;
    sqlite3_int64 j = off / JBLOCK;
    uint32_t iIn = (uint32_t)(off % JBLOCK);
    uint32_t n = JBLOCK - iIn;
    if( n > (uint32_t)(iAmt-nDone) ) n = (uint32_t)(iAmt-nDone);
    if( off>=size ) break;
    rc = journalLoad(p, j, phys, b);
    if( rc ) break;
    /* A pair of zeros was never written (a power loss kept later writes
    ** but not this one): it reads as zeros, as the file would without us.
    ** Non-zero bytes that do not authenticate are damage. */
    if( b->iSlot<0 && !b->bZero ){ rc = journalBad(p, j); break; }
    memcpy(z+nDone, b->aData+iIn, n);
    nDone += (int)n;
  }
  tdeWipe(b, sizeof(*b));
  sqlite3_free(b);
  if( rc ){ memset(z, 0, (size_t)iAmt); return rc; }
  if( nDone<iAmt ){
    if( iOfst + nDone < size ) nDone = (int)(size - iOfst);
    memset(z+nDone, 0, (size_t)(iAmt-nDone));
    return SQLITE_IOERR_SHORT_READ;
  }
  return SQLITE_OK;
}

int tdeJournalWrite(TdeFile *p, const void *zBuf, int iAmt, sqlite3_int64 iOfst){
  const uint8_t *z = zBuf;
  sqlite3_int64 phys = 0, size = 0, nPair, jLast;
  JBlock *b;
  uint8_t *aNew;
  int nDone = 0;
  int rc = tdeScratch(p);
  if( rc ) return rc;
  b = sqlite3_malloc(sizeof(*b) + JBLOCK);
  if( !b ) return SQLITE_NOMEM;
  aNew = (uint8_t*)&b[1];
  rc = journalPhys(p, &phys);
  if( rc==SQLITE_OK ) rc = journalSize(p, phys, &size, b);
  if( rc ) goto done;
  nPair = (phys + JPAIR - 1) / JPAIR;
  jLast = size ? (size-1)/JBLOCK : -1;

  /* Writing past a partial last block: make that block full first, since
  ** only the last block may be short. */
  if( jLast>=0 && size%JBLOCK!=0 && iOfst/JBLOCK > jLast ){
    rc = journalLoad(p, jLast, phys, b);
    if( rc ) goto done;
    if( b->iSlot<0 ){ rc = journalBad(p, jLast); goto done; }
    rc = journalStore(p, jLast, b, b->aData, JBLOCK);
    if( rc ) goto done;
  }

  while( nDone<iAmt ){
    sqlite3_int64 off = iOfst + nDone;
    sqlite3_int64 j = off / JBLOCK;
    uint32_t iIn = (uint32_t)(off % JBLOCK);
    uint32_t n = JBLOCK - iIn;
    uint32_t nNew;
    if( n > (uint32_t)(iAmt-nDone) ) n = (uint32_t)(iAmt-nDone);
    rc = journalLoad(p, j, phys, b);
    if( rc ) goto done;
    if( b->iSlot<0 && b->bPresent && !b->bZero && j<nPair-1 ){
      /* Only the last pair may be invalid (a torn append). */
      rc = journalBad(p, j);
      goto done;
    }
    if( b->iSlot<0 ){ b->seq = 0; b->len = 0; memset(b->aData, 0, JBLOCK); }
    memcpy(aNew, b->aData, JBLOCK);
    memcpy(aNew+iIn, z+nDone, n);
    nNew = iIn + n > b->len ? iIn + n : b->len;
    rc = journalStore(p, j, b, aNew, nNew);
    if( rc ) goto done;
    nDone += (int)n;
  }

done:
  tdeWipe(b, sizeof(*b) + JBLOCK);
  sqlite3_free(b);
  return rc;
}

int tdeJournalTruncate(TdeFile *p, sqlite3_int64 size){
  sqlite3_int64 phys = 0, cur = 0, j;
  uint32_t nKeep;
  JBlock *b;
  int rc = tdeScratch(p);
  if( rc ) return rc;
  if( size==0 ) return p->pReal->pMethods->xTruncate(p->pReal, 0);
  b = sqlite3_malloc(sizeof(*b));
  if( !b ) return SQLITE_NOMEM;
  rc = journalPhys(p, &phys);
  if( rc==SQLITE_OK ) rc = journalSize(p, phys, &cur, b);
  if( rc ) goto done;
  if( size>=cur ){
    /* SQLite does not grow journals by truncation; nothing to do. */
    goto done;
  }
  j = (size-1) / JBLOCK;
  nKeep = (uint32_t)(size - j*JBLOCK);
  rc = journalLoad(p, j, phys, b);
  if( rc ) goto done;
  if( b->iSlot<0 ){ rc = journalBad(p, j); goto done; }
  if( b->len!=nKeep ){
    memset(b->aData+nKeep, 0, JBLOCK-nKeep);
    rc = journalStore(p, j, b, b->aData, nKeep);
    if( rc ) goto done;
  }
  rc = p->pReal->pMethods->xTruncate(p->pReal, (j+1)*JPAIR);
done:
  tdeWipe(b, sizeof(*b));
  sqlite3_free(b);
  return rc;
}
