/*
** Temporary files -- temp databases, statement journals, sorter runs,
** transient indices, VACUUM's scratch database -- keyed by a random key
** that exists only in this handle's memory, and never read after a crash.
**
** SQLite writes these files at arbitrary offsets and lengths (sorter runs
** are unaligned), so they are stored as a sequence of B-byte plaintext
** blocks, each sealed with its own 48-byte trailer (docs/FORMAT.md
** "Temporary files"); B is the page size when the file's first write is a
** page (see blockChooseSize), else 4096:
**
**   block i at file offset i*(B+48): ciphertext (len) || trailer
**
** Every block but the last is full; the last holds len = (file size -
** i*(B+48) - 48) bytes, so the logical size follows from the physical one.
** Writes that cover part of a block read, decrypt, merge and re-seal it.
** A block of all zero bytes is a hole SQLite skipped over.
**
** The held block: a write that leaves a block partly written (a statement
** journal appends 4-byte page numbers and P-byte pages, so nearly every
** write ends inside a block) keeps that block's plaintext in memory
** (aHeld) instead of sealing it; the writes that follow into the same
** block only update it.  A block that already exists on disk is not
** loaded when it becomes held: only the range SQLite writes is kept
** (bPart), and the stored bytes are decrypted and merged under it when a
** read or the seal needs bytes outside that range.  A statement journal
** rewritten from offset 0 by the next statement covers each block from
** its start, so its blocks are sealed without ever being decrypted.  It is sealed and written once, when a write
** reaches its end, when a write goes to another block, and before xSync,
** xTruncate and xClose (not for a DELETEONCLOSE file: its bytes are
** gone anyway).  Reads of it are served from memory and xFileSize counts
** it, so SQLite sees the same file as if every write had gone to disk;
** the blocks on disk are the same as before, only written less often.
** A failed seal or write leaves the block held (nothing lost) and its
** error goes to the operation that flushed.
**
** Must never: return a block that failed authentication; write plaintext;
** drop a held block that SQLite may still read.
*/
#include "vfs/vfs_int.h"

#define BSIZE(p)   ((sqlite3_int64)(p)->pBlk->nBlock)
#define BLOCK_PAGE_MIN 1024    /* page-sized blocks: smallest and ... */
#define BLOCK_PAGE_MAX 32768   /* ... largest (two stored blocks fit the scratch buffer) */
#define BSTORED(p) ((sqlite3_int64)(p)->pBlk->nBlock + TDE_TRAILER_SIZE)

static void blockAad(TdeFile *p, sqlite3_int64 iBlock, uint8_t *aad){
  aad[0] = 'B';
  aad[1] = (uint8_t)p->eKind;
  memcpy(aad+2, p->dbid, TDE_DBID_BYTES);
  tdePut64(aad+2+TDE_DBID_BYTES, (uint64_t)iBlock);
}
#define BLOCK_AAD_BYTES (2 + TDE_DBID_BYTES + 8)

static sqlite3_int64 blockLogicalSize(TdeFile *p, sqlite3_int64 phys){
  sqlite3_int64 nFull = phys / BSTORED(p);
  sqlite3_int64 rem = phys % BSTORED(p);
  return nFull*BSIZE(p) + (rem>TDE_TRAILER_SIZE ? rem - TDE_TRAILER_SIZE : 0);
}

static int blockPhysSize(TdeFile *p, sqlite3_int64 *pPhys){
  return p->pReal->pMethods->xFileSize(p->pReal, pPhys);
}

/*
** Load block iBlock's plaintext into aOut (BSIZE(p) bytes, zero
** beyond its length).  *pnLen gets its length (0 if absent).  A block of
** all zero bytes in a temp file is a hole SQLite skipped over.
*/
static int blockLoad(TdeFile *p, sqlite3_int64 iBlock, sqlite3_int64 phys,
                     uint8_t *aOut, uint32_t *pnLen){
  sqlite3_int64 start = iBlock * BSTORED(p);
  uint8_t *aStored = p->aBuf + BSTORED(p);   /* second half of scratch */
  uint8_t aad[BLOCK_AAD_BYTES];
  sqlite3_int64 avail = phys - start;
  uint32_t nStored, nLen;
  int bShort, rc;

  memset(aOut, 0, BSIZE(p));
  *pnLen = 0;
  if( avail<=TDE_TRAILER_SIZE ) return SQLITE_OK;
  nStored = avail>BSTORED(p) ? BSTORED(p) : (uint32_t)avail;
  nLen = nStored - TDE_TRAILER_SIZE;
  rc = tdeRealRead(p, aStored, (int)nStored, start, &bShort);
  if( rc ) return rc;
  if( bShort ) return SQLITE_IOERR_SHORT_READ;
  {
    uint32_t i;
    for(i=0; i<nStored && aStored[i]==0; i++){}
    if( i==nStored ){ *pnLen = nLen; return SQLITE_OK; }
  }
  blockAad(p, iBlock, aad);
  rc = tdePageOpen(p->pCipher, aad, sizeof(aad), aStored, nLen, aStored+nLen, aOut);
  if( rc ){
    memset(aOut, 0, BSIZE(p));
    p->nAuthFail++;
    tdeLog(TDE_LOG_ERROR, "%s: temp file block %lld failed authentication",
           p->zName ? p->zName : "(temp file)", (long long)iBlock);
    return SQLITE_IOERR_AUTH;
  }
  *pnLen = nLen;
  return SQLITE_OK;
}

/* Seal nLen bytes of aPlain as block iBlock and write it. */
static int blockStore(TdeFile *p, sqlite3_int64 iBlock, const uint8_t *aPlain, uint32_t nLen){
  uint8_t *aStored = p->aBuf + BSTORED(p);
  uint8_t aad[BLOCK_AAD_BYTES];
  int rc;
  blockAad(p, iBlock, aad);
  rc = tdePageSeal(p->pCipher, aad, sizeof(aad), aPlain, nLen, aStored, aStored+nLen);
  if( rc ) return SQLITE_IOERR_WRITE;
  return p->pReal->pMethods->xWrite(p->pReal, aStored, (int)(nLen + TDE_TRAILER_SIZE),
                                    iBlock * BSTORED(p));
}

/* ---- the held block ---------------------------------------------------- */

/* Seal nLen bytes of aPlain as block iBlock, write it, and move *pPhys
** (the size of the file below, as this call knows it) past it. */
static int blockStoreAt(TdeFile *p, sqlite3_int64 iBlock, const uint8_t *aPlain,
                        uint32_t nLen, sqlite3_int64 *pPhys){
  int rc = blockStore(p, iBlock, aPlain, nLen);
  sqlite3_int64 end = iBlock*BSTORED(p) + nLen + TDE_TRAILER_SIZE;
  if( rc==SQLITE_OK && end>*pPhys ) *pPhys = end;
  return rc;
}

/* The logical size: the file below's, or the held block's end if later. */
static sqlite3_int64 blockSize(TdeFile *p, sqlite3_int64 phys){
  sqlite3_int64 n = blockLogicalSize(p, phys);
  if( p->pBlk->bHeld && p->pBlk->iHeld*BSIZE(p) + p->pBlk->nHeld > n ) n = p->pBlk->iHeld*BSIZE(p) + p->pBlk->nHeld;
  return n;
}

/* Forget the held block (its plaintext is wiped). */
static void blockDrop(TdeFile *p){
  if( p->pBlk->bHeld ) tdeWipe(p->pBlk->aHeld, BSIZE(p));
  p->pBlk->bHeld = 0;
  p->pBlk->bPart = 0;
}

/*
** A partly known held block (bPart) becomes whole: its stored bytes are
** loaded and what SQLite wrote since, [iLo, iHi), is laid over them.  On
** failure nothing changes (the block stays partly known).  Needs
** tdeScratch; uses its first half.
*/
static int blockHeldLoad(TdeFile *p){
  TdeBlockFile *b = p->pBlk;
  sqlite3_int64 phys = 0;
  uint32_t nLen;
  int rc;
  if( !b->bHeld || !b->bPart ) return SQLITE_OK;
  rc = blockPhysSize(p, &phys);
  if( rc==SQLITE_OK ) rc = blockLoad(p, b->iHeld, phys, p->aBuf, &nLen);
  if( rc==SQLITE_OK ){
    memcpy(p->aBuf + b->iLo, b->aHeld + b->iLo, b->iHi - b->iLo);
    memcpy(b->aHeld, p->aBuf, BSIZE(p));
    b->bPart = 0;
  }
  tdeWipe(p->aBuf, BSIZE(p));
  return rc;
}

/*
** Seal and write the held block, if any, and forget it.  On failure it
** stays held: reads still see it and the next flush tries again.  Needs
** tdeScratch.  *pPhys as for blockStoreAt.
*/
static int blockFlushAt(TdeFile *p, sqlite3_int64 *pPhys){
  int rc;
  if( !p->pBlk->bHeld ) return SQLITE_OK;
  if( p->pBlk->bPart && (p->pBlk->iLo>0 || p->pBlk->iHi<p->pBlk->nHeld) ){
    rc = blockHeldLoad(p);
    if( rc ) return rc;
  }
  rc = blockStoreAt(p, p->pBlk->iHeld, p->pBlk->aHeld, p->pBlk->nHeld, pPhys);
  if( rc ) return rc;
  blockDrop(p);
  return SQLITE_OK;
}

/*
** Make block iBlock the held block, after flushing the one held before.
** Its nExist stored bytes are not loaded (bPart, nothing written yet):
** blockHeldPut records what SQLite writes and blockHeldLoad merges (it
** replaces every byte outside that range, so only a new block's buffer
** needs zeroing).
*/
static int blockHold(TdeFile *p, sqlite3_int64 iBlock, uint32_t nExist, sqlite3_int64 *pPhys){
  TdeBlockFile *b = p->pBlk;
  int rc = blockFlushAt(p, pPhys);
  if( rc ) return rc;
  if( !b->aHeld ){
    b->aHeld = sqlite3_malloc((int)BSIZE(p));
    if( !b->aHeld ) return SQLITE_NOMEM;
  }
  if( nExist==0 ) memset(b->aHeld, 0, BSIZE(p));
  b->bHeld = 1;
  b->bPart = nExist>0;
  b->iLo = b->iHi = 0;
  b->iHeld = iBlock;
  b->nHeld = nExist;
  return SQLITE_OK;
}

/* Write n bytes at iIn into the held block; a write that reaches the
** block's end seals it (SQLite has moved past it).  A partly known block
** keeps one written range: a write that does not touch it merges first. */
static int blockHeldPut(TdeFile *p, uint32_t iIn, const uint8_t *z, uint32_t n,
                        sqlite3_int64 *pPhys){
  TdeBlockFile *b = p->pBlk;
  if( b->bPart ){
    if( b->iHi==b->iLo ){
      b->iLo = iIn; b->iHi = iIn + n;
    }else if( iIn<=b->iHi && iIn + n>=b->iLo ){
      if( iIn<b->iLo ) b->iLo = iIn;
      if( iIn + n>b->iHi ) b->iHi = iIn + n;
    }else{
      int rc = blockHeldLoad(p);
      if( rc ) return rc;
    }
  }
  memcpy(b->aHeld + iIn, z, n);
  if( iIn + n > b->nHeld ) b->nHeld = iIn + n;
  if( iIn + n==BSIZE(p) ) return blockFlushAt(p, pPhys);
  return SQLITE_OK;
}

int tdeBlockFlush(TdeFile *p){
  sqlite3_int64 phys = 0;
  int rc;
  if( !p->pBlk->bHeld ) return SQLITE_OK;
  rc = tdeScratch(p);
  if( rc==SQLITE_OK ) rc = blockFlushAt(p, &phys);
  return rc;
}

int tdeBlockClose(TdeFile *p){
  int rc = SQLITE_OK;
  if( (p->openFlags & SQLITE_OPEN_DELETEONCLOSE)==0 ) rc = tdeBlockFlush(p);
  blockDrop(p);
  sqlite3_free(p->pBlk->aHeld);
  p->pBlk->aHeld = 0;
  return rc;
}

/* ---- methods ------------------------------------------------------------ */

int tdeBlockFileSize(TdeFile *p, sqlite3_int64 *pSize){
  sqlite3_int64 phys = 0;
  int rc = blockPhysSize(p, &phys);
  if( rc ) return rc;
  *pSize = blockSize(p, phys);
  return SQLITE_OK;
}

int tdeBlockRead(TdeFile *p, void *zBuf, int iAmt, sqlite3_int64 iOfst){
  uint8_t *z = zBuf;
  uint8_t *aPlain;
  sqlite3_int64 phys = 0, size;
  int nDone = 0;
  int rc;
  if( p->pBlk->bPart && iOfst<(p->pBlk->iHeld+1)*BSIZE(p) && iOfst+iAmt>p->pBlk->iHeld*BSIZE(p)
   && (iOfst<p->pBlk->iHeld*BSIZE(p) + p->pBlk->iLo || iOfst+iAmt>p->pBlk->iHeld*BSIZE(p) + p->pBlk->iHi) ){
    /* The read needs stored bytes of the held block that are not loaded. */
    rc = tdeScratch(p);
    if( rc==SQLITE_OK ) rc = blockHeldLoad(p);
    if( rc ){ memset(z, 0, (size_t)iAmt); return rc==SQLITE_IOERR_SHORT_READ ? SQLITE_IOERR_READ : rc; }
  }
  if( p->pBlk->bHeld && iOfst>=p->pBlk->iHeld*BSIZE(p) && iOfst+iAmt<=(p->pBlk->iHeld+1)*BSIZE(p)
   && iOfst - p->pBlk->iHeld*BSIZE(p) < p->pBlk->nHeld ){
    /* All of it in the held block (as below: bytes past the end read as zero). */
    memcpy(z, p->pBlk->aHeld + (iOfst - p->pBlk->iHeld*BSIZE(p)), (size_t)iAmt);
    return SQLITE_OK;
  }
  rc = tdeScratch(p);
  if( rc ) return rc;
  aPlain = p->aBuf;
  rc = blockPhysSize(p, &phys);
  if( rc ) return rc;
  size = blockSize(p, phys);
  while( nDone<iAmt ){
    sqlite3_int64 off = iOfst + nDone;
    sqlite3_int64 iBlock = off / BSIZE(p);
    uint32_t iIn = (uint32_t)(off % BSIZE(p));
    uint32_t n = BSIZE(p) - iIn, nLen;
    if( n > (uint32_t)(iAmt-nDone) ) n = (uint32_t)(iAmt-nDone);
    if( off>=size ) break;
    if( p->pBlk->bHeld && iBlock==p->pBlk->iHeld ){
      memcpy(z+nDone, p->pBlk->aHeld+iIn, n);
    }else{
      rc = blockLoad(p, iBlock, phys, aPlain, &nLen);
      if( rc ){ memset(z, 0, (size_t)iAmt); return rc==SQLITE_IOERR_SHORT_READ ? SQLITE_IOERR_READ : rc; }
      memcpy(z+nDone, aPlain+iIn, n);
    }
    nDone += (int)n;
  }
  tdeWipe(aPlain, BSIZE(p));
  if( nDone<iAmt ){
    /* Past the end: zero-fill, as the unix VFS does. */
    if( iOfst + nDone < size ) nDone = (int)(size - iOfst);
    memset(z+nDone, 0, (size_t)(iAmt-nDone));
    return SQLITE_IOERR_SHORT_READ;
  }
  return SQLITE_OK;
}

/*
** The first write of an empty temp file sets its block size: a write of a
** power-of-two size from 1024 to 32768 bytes at a multiple of it -- a temp
** database's pager, the sorter's buffered writer -- makes blocks of that
** size, so each page is sealed once, where SQLite writes it; anything else
** (statement journals, which SQLite writes in arbitrary chunks, temp
** journals, whose first write is a 512-byte header) keeps 4096.
*/
static void blockChooseSize(TdeFile *p, int iAmt, sqlite3_int64 iOfst, sqlite3_int64 phys){
  if( p->pBlk->bSized ) return;
  p->pBlk->bSized = 1;
  if( phys==0 && (p->openFlags & SQLITE_OPEN_SUBJOURNAL)==0
   && iAmt>=BLOCK_PAGE_MIN && iAmt<=BLOCK_PAGE_MAX && (iAmt & (iAmt-1))==0 && iOfst%iAmt==0 ){
    p->pBlk->nBlock = (uint32_t)iAmt;
  }
}

/*
** Only the last block may be short: before a write goes past a partial
** last block, that block is padded to its full size (held: in memory).
*/
static int blockPadLast(TdeFile *p, sqlite3_int64 iLast, sqlite3_int64 *pPhys){
  uint32_t nLen;
  int rc;
  if( p->pBlk->bHeld && p->pBlk->iHeld==iLast ){
    p->pBlk->nHeld = BSIZE(p);
    return SQLITE_OK;
  }
  rc = blockLoad(p, iLast, *pPhys, p->aBuf, &nLen);
  if( rc==SQLITE_OK ) rc = blockStoreAt(p, iLast, p->aBuf, BSIZE(p), pPhys);
  tdeWipe(p->aBuf, BSIZE(p));
  return rc;
}

int tdeBlockWrite(TdeFile *p, const void *zBuf, int iAmt, sqlite3_int64 iOfst){
  const uint8_t *z = zBuf;
  sqlite3_int64 phys = 0, size, iLast;
  uint32_t nLastLen;
  int nDone = 0;
  int rc = tdeScratch(p);
  if( rc ) return rc;
  if( p->pBlk->bHeld && iOfst>=p->pBlk->iHeld*BSIZE(p) && iOfst+iAmt<=(p->pBlk->iHeld+1)*BSIZE(p) ){
    /* All of it in the held block: no read, no seal, no system call. */
    return blockHeldPut(p, (uint32_t)(iOfst - p->pBlk->iHeld*BSIZE(p)), z, (uint32_t)iAmt, &phys);
  }
  rc = blockPhysSize(p, &phys);
  if( rc ) return rc;
  blockChooseSize(p, iAmt, iOfst, phys);
  size = blockSize(p, phys);
  iLast = size ? (size-1) / BSIZE(p) : -1;
  nLastLen = size ? (uint32_t)(size - iLast*BSIZE(p)) : 0;
  if( iLast>=0 && nLastLen<BSIZE(p) && iOfst/BSIZE(p) > iLast ){
    rc = blockPadLast(p, iLast, &phys);
    if( rc ) return rc;
    nLastLen = BSIZE(p);
  }

  while( nDone<iAmt ){
    sqlite3_int64 off = iOfst + nDone;
    sqlite3_int64 iBlock = off / BSIZE(p);
    uint32_t iIn = (uint32_t)(off % BSIZE(p));
    uint32_t n = BSIZE(p) - iIn;
    uint32_t nExist, nNew;
    if( n > (uint32_t)(iAmt-nDone) ) n = (uint32_t)(iAmt-nDone);
    nExist = iBlock<iLast ? BSIZE(p) : iBlock==iLast ? nLastLen : 0;
    nNew = iIn + n > nExist ? iIn + n : nExist;
    if( p->pBlk->bHeld && p->pBlk->iHeld==iBlock ){
      rc = blockHeldPut(p, iIn, z+nDone, n, &phys);
    }else if( n==BSIZE(p) ){
      /* A whole block (a temp database's page): sealed where it is. */
      rc = blockStoreAt(p, iBlock, z+nDone, n, &phys);
    }else{
      rc = blockHold(p, iBlock, nExist, &phys);
      if( rc==SQLITE_OK ) rc = blockHeldPut(p, iIn, z+nDone, n, &phys);
    }
    if( rc ) return rc;
    if( iBlock>=iLast ){
      /* Blocks between the old last block and this one stay holes. */
      iLast = iBlock;
      nLastLen = nNew;
    }
    nDone += (int)n;
  }
  return SQLITE_OK;
}

int tdeBlockTruncate(TdeFile *p, sqlite3_int64 size){
  sqlite3_int64 phys = 0, cur, iBlock;
  uint32_t nLen, nKeep;
  int rc = tdeScratch(p);
  if( rc ) return rc;
  if( p->pBlk->bHeld && size<=p->pBlk->iHeld*BSIZE(p) ){
    blockDrop(p);             /* cut away whole */
  }else{
    rc = blockFlushAt(p, &phys);
    if( rc ) return rc;
  }
  rc = blockPhysSize(p, &phys);
  if( rc ) return rc;
  cur = blockLogicalSize(p, phys);
  if( size>=cur ){
    if( size==cur ) return SQLITE_OK;
    /* Growing: write zeros (rare; SQLite grows these files by writing). */
    {
      static const uint8_t aZero[TDE_BLOCK_MAX];
      while( cur<size ){
        int n = (int)(size-cur > TDE_BLOCK_MAX ? TDE_BLOCK_MAX : size-cur);
        rc = tdeBlockWrite(p, aZero, n, cur);
        if( rc ) return rc;
        cur += n;
      }
      return tdeBlockFlush(p);
    }
  }
  if( size==0 ) return p->pReal->pMethods->xTruncate(p->pReal, 0);
  iBlock = (size-1) / BSIZE(p);
  nKeep = (uint32_t)(size - iBlock*BSIZE(p));
  if( nKeep<BSIZE(p) ){
    rc = blockLoad(p, iBlock, phys, p->aBuf, &nLen);
    if( rc==SQLITE_OK ) rc = blockStore(p, iBlock, p->aBuf, nKeep);
    tdeWipe(p->aBuf, BSIZE(p));
    if( rc ) return rc;
  }
  return p->pReal->pMethods->xTruncate(p->pReal, iBlock*BSTORED(p) + nKeep + TDE_TRAILER_SIZE);
}
