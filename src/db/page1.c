/*
** Page 1 of the main database, kept authenticated per file handle.
**
** In rollback mode SQLite reads 16 bytes of page 1 (the change counter at
** offset 24) at the start of every read transaction, and the 100-byte
** header at open.  Opening the whole page for that costs a page read and a
** GCM open each time.  Instead each handle keeps the plaintext of page 1
** it last authenticated (read or wrote) with the 48-byte trailer that was
** stored with it.  A partial read of page 1 re-reads only the trailer: if
** it equals the kept one (constant-time compare), the page on disk is the
** one that was authenticated -- every seal draws a fresh (salt, IV), so a
** page sealed again has another trailer -- and the bytes come from memory.
** Otherwise the page is read and opened again and kept.
**
** Also here: the page-size probe (tdeMainDiscoverPgsz), which finds the
** size page 1 authenticates at; its last resort, a page 1 torn by an
** interrupted rekey, comes through the rescue hook (hooks.c), so this file
** calls only down (dek, fileio, hooks).
**
** Must never: return bytes that did not authenticate (a page that fails is
** left to the caller's full path, which logs and fails it); keep the copy
** after close (wiped and freed in tdePage1Free).
*/
#include "vfs/vfs_int.h"

/*
** Keep aPlain (page 1 just authenticated, or sealed and written) with the
** trailer stored with it.  Optional by construction: the copy only spares
** a partial read of page 1 the full read and GCM open, and no check relies
** on it.  Without memory for it nothing is kept (nPage1 stays 0), so every
** partial read of page 1 reads and authenticates the whole page
** (tdePage1Read's second half) -- the same answer, checked the same way,
** at the cost of one page read.  Said in the log at INFO level (the lowest
** tde has), not returned: the read or write that called here succeeded.
*/
void tdePage1Keep(TdeFile *p, const uint8_t *aPlain, uint32_t pgsz, const uint8_t *aTrailer){
  if( p->pDb->aPage1 && p->pDb->nPage1Alloc<pgsz ) tdePage1Free(p);
  if( !p->pDb->aPage1 ){
    p->pDb->aPage1 = sqlite3_malloc((int)pgsz);
    if( !p->pDb->aPage1 ){
      p->pDb->nPage1 = 0;
      tdeLog(TDE_LOG_INFO, "%s: no memory to keep page 1; its partial reads open the whole "
             "page each time", p->zName ? p->zName : "database");
      return;
    }
    p->pDb->nPage1Alloc = pgsz;
  }
  memcpy(p->pDb->aPage1, aPlain, pgsz - TDE_TRAILER_SIZE);
  memset(p->pDb->aPage1 + pgsz - TDE_TRAILER_SIZE, 0, TDE_TRAILER_SIZE);
  memcpy(p->pDb->aPage1Trailer, aTrailer, TDE_TRAILER_SIZE);
  p->pDb->nPage1 = pgsz;
}

void tdePage1Forget(TdeFile *p){
  p->pDb->nPage1 = 0;
}

void tdePage1Free(TdeFile *p){
  if( p->pDb->aPage1 ){
    tdeWipe(p->pDb->aPage1, p->pDb->nPage1Alloc);
    sqlite3_free(p->pDb->aPage1);
  }
  p->pDb->aPage1 = 0;
  p->pDb->nPage1 = p->pDb->nPage1Alloc = 0;
  tdeWipe(p->pDb->aPage1Trailer, TDE_TRAILER_SIZE);
}

/*
** A read of part of page 1 (the page size is known).  SQLITE_OK with the
** bytes in zBuf, an I/O error, or SQLITE_NOTFOUND: not answered here (the
** caller's full path decides; it also logs and fails a bad page).
*/
int tdePage1Read(TdeFile *p, uint8_t *zBuf, int iAmt, sqlite3_int64 iOfst){
  uint32_t pgsz = p->pDb->pgsz;
  uint8_t aTrailer[TDE_TRAILER_SIZE];
  int bShort, rc;
  if( !pgsz || iOfst<0 || iOfst + iAmt > (sqlite3_int64)pgsz ) return SQLITE_NOTFOUND;
  if( p->pDb->nPage1==pgsz ){
    rc = tdeRealRead(p, aTrailer, TDE_TRAILER_SIZE, tdeMainPageOff(p, pgsz, 1) + pgsz - TDE_TRAILER_SIZE, &bShort);
    if( rc ) return rc;
    if( !bShort && tdeCtEqual(aTrailer, p->pDb->aPage1Trailer, TDE_TRAILER_SIZE) ){
      memcpy(zBuf, p->pDb->aPage1 + iOfst, (size_t)iAmt);
      return SQLITE_OK;
    }
  }
  /* Changed (or not kept yet): read and open the page, keep it. */
  p->pDb->nPage1 = 0;
  rc = tdeScratch(p);
  if( rc ) return rc;
  rc = tdeRealRead(p, p->aBuf, (int)pgsz, tdeMainPageOff(p, pgsz, 1), &bShort);
  if( rc ) return rc;
  if( bShort ) return SQLITE_NOTFOUND;
  memcpy(aTrailer, p->aBuf + pgsz - TDE_TRAILER_SIZE, TDE_TRAILER_SIZE);
  if( tdeOpenPage(p, p->aBuf, pgsz, 1, 0)!=SQLITE_OK ){
    return SQLITE_NOTFOUND;             /* reported by the caller's full path */
  }
  tdePage1Keep(p, p->aBuf, pgsz, aTrailer);
  memcpy(zBuf, p->aBuf + iOfst, (size_t)iAmt);
  tdeWipe(p->aBuf, pgsz);
  return SQLITE_OK;
}

/* ---- page size discovery -------------------------------------------------- */

/*
** Find the page size of a database whose page 1 this handle has not yet
** seen in a full-page read: try each size until page 1 authenticates (the
** page size is in the associated data, so only the right one can).  A
** page 1 torn by an interrupted rekey is then looked for through the
** rescue hook (rekey.c keeps its old copy, at the database's page size):
** the one stage of rescue, after which the caller's checks all run.
** SQLITE_OK (p->pDb->pgsz set), SQLITE_IOERR_SHORT_READ (no whole page yet:
** the database is empty), SQLITE_IOERR_AUTH (logged, counted once), or an
** I/O error.  Uses p->aBuf (the caller made it, tdeScratch).
*/
/* Page 1 at each legal size, then through the rescue hook: the size it
** authenticates at, or 0 (nothing logged or counted); *pSz the file's size. */
static int discoverPage1(TdeFile *p, sqlite3_int64 *pSz, uint32_t *pPgsz){
  sqlite3_int64 sz = 0;
  int rc, bShort;
  *pPgsz = 0;
  rc = p->pReal->pMethods->xFileSize(p->pReal, &sz);
  *pSz = sz;
  if( rc ) return rc;
  /* No whole page yet (the header was written, page 1 not): nothing to
  ** authenticate, the database is empty. */
  if( sz < tdeMainPageOff(p, 512, 1) + 512 ) return SQLITE_IOERR_SHORT_READ;
  for(size_t i=0; i<TDE_N_PROBE_PGSZ; i++){
    uint32_t n = tdeProbePgsz[i];
    if( sz < tdeMainPageOff(p, n, 1) + n ) continue;
    rc = tdeRealRead(p, p->aBuf, (int)n, tdeMainPageOff(p, n, 1), &bShort);
    if( rc ) return rc;
    if( tdeOpenPage(p, p->aBuf, n, 1, 0)==SQLITE_OK ){
      *pPgsz = n;
      return SQLITE_OK;
    }                 /* a wrong guess is not a failure */
  }
  for(size_t i=0; i<TDE_N_PROBE_PGSZ; i++){
    uint8_t aTag[16];           /* size discovery only: the read checks the page */
    if( sz < tdeMainPageOff(p, tdeProbePgsz[i], 1) + tdeProbePgsz[i] ) continue;
    if( tdeMainRescuePage(p, 1, tdeProbePgsz[i], p->aBuf, aTag)==SQLITE_OK ){
      *pPgsz = tdeProbePgsz[i];
      return SQLITE_OK;
    }
  }
  return SQLITE_OK;
}

/* The same probe, quiet: SQLITE_NOTFOUND when page 1 authenticates at no
** size, nothing logged or counted.  For the read of the file header that
** SQLite makes at open with no lock held (tdeMainReadPieces): a page 1
** another connection is writing right then reads torn, which is no damage. */
int tdeMainProbePgsz(TdeFile *p){
  sqlite3_int64 sz = 0;
  uint32_t n = 0;
  int rc = discoverPage1(p, &sz, &n);
  if( rc ) return rc;
  if( !n ) return SQLITE_NOTFOUND;
  p->pDb->pgsz = n;
  return SQLITE_OK;
}

int tdeMainDiscoverPgsz(TdeFile *p){
  int rc = tdeMainProbePgsz(p);
  if( rc!=SQLITE_NOTFOUND ) return rc;
  tdeLog(TDE_LOG_ERROR, "%s: page 1 failed authentication at every page size", (p->zName ? p->zName : ""));
  tdeAuthFail(p, 1, 0, -1);
  return SQLITE_IOERR_AUTH;
}

/*
** The page size SQLite's size of a version-3 file needs (xFileSize,
** xTruncate), also when page 1 is torn: a crash tore SQLite's rewrite of
** page 1 while its hot journal holds the page, and SQLite asks for the size
** before it plays the journal back (a size of 0 would make it delete the
** journal as stale).  Page 1 first (tdeMainDiscoverPgsz, p->pDb->pgsz
** set); else page 2 at each size (authentic at one size only; kept as the
** database's page size, as page 1's would be); else a file that ends right
** after page 1 at exactly one size (a one-page database; not kept).  When
** none fits, SQLITE_IOERR_AUTH as tdeMainDiscoverPgsz (never a size of 0,
** which would let SQLite delete a hot journal).  *pPgsz 0 and SQLITE_OK:
** no whole page yet.  Uses p->aBuf (tdeScratch).  Nothing here returns
** bytes; a page that failed is failed by the read that returns it.
*/
int tdeMainSizePgsz(TdeFile *p, uint32_t *pPgsz){
  sqlite3_int64 sz = 0;
  uint32_t n = 0, nFit = 0, nFits = 0;
  int rc, bShort;
  *pPgsz = p->pDb->pgsz;
  if( *pPgsz ) return SQLITE_OK;
  rc = discoverPage1(p, &sz, &n);
  if( rc==SQLITE_IOERR_SHORT_READ ) return SQLITE_OK;
  if( rc ) return rc;
  if( n ){
    p->pDb->pgsz = *pPgsz = n;
    return SQLITE_OK;
  }
  for(size_t i=0; i<TDE_N_PROBE_PGSZ; i++){
    n = tdeProbePgsz[i];
    if( sz == tdeMainPageOff(p, n, 1) + n ){ nFit = n; nFits++; }
    if( sz < tdeMainPageOff(p, n, 2) + n ) continue;
    rc = tdeRealRead(p, p->aBuf, (int)n, tdeMainPageOff(p, n, 2), &bShort);
    if( rc ) return rc;
    if( tdeOpenPage(p, p->aBuf, n, 2, 0)==SQLITE_OK ){
      tdeWipe(p->aBuf, n);
      p->pDb->pgsz = *pPgsz = n;
      return SQLITE_OK;
    }
  }
  if( nFits==1 ){
    *pPgsz = nFit;
    tdeLog(TDE_LOG_WARNING, "%s: page 1 does not authenticate (a torn write, if a hot journal "
           "restores it); the page size is taken from the file's length", (p->zName ? p->zName : ""));
    return SQLITE_OK;
  }
  tdeLog(TDE_LOG_ERROR, "%s: page 1 failed authentication at every page size", (p->zName ? p->zName : ""));
  tdeAuthFail(p, 1, 0, -1);
  return SQLITE_IOERR_AUTH;
}

/*
** The rescue stage's hook, raised from here only (the read of a whole
** page, of a page in pieces, the committed-size probe and the page size
** discovery all come here): a page pgno of size pgsz that failed to open,
** looked for through xPageRescue (hooks.c).  Pure, as the opens are:
** SQLITE_OK with an authentic copy in aOut and its stored tag in aTag (the
** caller's checks, the page map's, still run), else SQLITE_IOERR_AUTH;
** the caller that decides the failure is final counts it (tdeAuthFail).
*/
int tdeMainRescuePage(TdeFile *p, uint32_t pgno, uint32_t pgsz, uint8_t *aOut, uint8_t aTag[16]){
  return tdeMainHookPageRescue(p, pgno, pgsz, aOut, aTag);
}
