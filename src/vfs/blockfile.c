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
** Must never: return a block that failed authentication; write plaintext.
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

int tdeBlockFileSize(TdeFile *p, sqlite3_int64 *pSize){
  sqlite3_int64 phys = 0;
  int rc = blockPhysSize(p, &phys);
  if( rc ) return rc;
  *pSize = blockLogicalSize(p, phys);
  return SQLITE_OK;
}

int tdeBlockRead(TdeFile *p, void *zBuf, int iAmt, sqlite3_int64 iOfst){
  uint8_t *z = zBuf;
  uint8_t *aPlain;
  sqlite3_int64 phys = 0, size;
  int nDone = 0;
  int rc = tdeScratch(p);
  if( rc ) return rc;
  aPlain = p->aBuf;
  rc = blockPhysSize(p, &phys);
  if( rc ) return rc;
  size = blockLogicalSize(p, phys);
  while( nDone<iAmt ){
    sqlite3_int64 off = iOfst + nDone;
    sqlite3_int64 iBlock = off / BSIZE(p);
    uint32_t iIn = (uint32_t)(off % BSIZE(p));
    uint32_t n = BSIZE(p) - iIn, nLen;
    if( n > (uint32_t)(iAmt-nDone) ) n = (uint32_t)(iAmt-nDone);
    if( off>=size ) break;
    rc = blockLoad(p, iBlock, phys, aPlain, &nLen);
    if( rc ){ memset(z, 0, (size_t)iAmt); return rc==SQLITE_IOERR_SHORT_READ ? SQLITE_IOERR_READ : rc; }
    memcpy(z+nDone, aPlain+iIn, n);
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

int tdeBlockWrite(TdeFile *p, const void *zBuf, int iAmt, sqlite3_int64 iOfst){
  const uint8_t *z = zBuf;
  uint8_t *aPlain;
  sqlite3_int64 phys = 0, size, iLast;
  uint32_t nLastLen;
  int nDone = 0;
  int rc = tdeScratch(p);
  if( rc ) return rc;
  aPlain = p->aBuf;
  rc = blockPhysSize(p, &phys);
  if( rc ) return rc;
  blockChooseSize(p, iAmt, iOfst, phys);
  size = blockLogicalSize(p, phys);
  iLast = size ? (size-1) / BSIZE(p) : -1;
  nLastLen = size ? (uint32_t)(size - iLast*BSIZE(p)) : 0;

  /* Writing past a partial last block: pad that block to full size first,
  ** since only the last block may be short. */
  if( iLast>=0 && nLastLen<BSIZE(p) && iOfst/BSIZE(p) > iLast ){
    uint32_t nLen;
    rc = blockLoad(p, iLast, phys, aPlain, &nLen);
    if( rc==SQLITE_OK ) rc = blockStore(p, iLast, aPlain, BSIZE(p));
    if( rc ) goto done;
    nLastLen = BSIZE(p);
    phys = (iLast+1) * BSTORED(p);
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
    if( iIn==0 && n>=nExist ){
      memcpy(aPlain, z+nDone, n);
    }else{
      uint32_t nLen;
      rc = blockLoad(p, iBlock, phys, aPlain, &nLen);
      if( rc ) goto done;
      memcpy(aPlain+iIn, z+nDone, n);
    }
    rc = blockStore(p, iBlock, aPlain, nNew);
    if( rc ) goto done;
    if( iBlock>=iLast ){
      /* Blocks between the old last block and this one stay holes. */
      iLast = iBlock;
      nLastLen = nNew;
      phys = iBlock*BSTORED(p) + nNew + TDE_TRAILER_SIZE;
    }
    nDone += (int)n;
  }

done:
  tdeWipe(aPlain, BSIZE(p));
  return rc;
}

int tdeBlockTruncate(TdeFile *p, sqlite3_int64 size){
  sqlite3_int64 phys = 0, cur, iBlock;
  uint32_t nLen, nKeep;
  int rc = tdeScratch(p);
  if( rc ) return rc;
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
      return SQLITE_OK;
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
