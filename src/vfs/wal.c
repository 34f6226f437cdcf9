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
**
** Must never: return a frame page that failed authentication; store a
** checksum SQLite computed.
*/
#include "vfs/vfs_int.h"

#define WAL_HDR    32
#define FRAME_HDR  24
#define MAC_BYTES  8

/* Frame read outcomes. */
#define FRAME_OK      0
#define FRAME_SHORT   1    /* not all bytes present */
#define FRAME_BAD     2    /* MAC or page authentication failed */

static const char *walName(TdeFile *p){ return p->zName ? p->zName : "(wal)"; }

/* WAL MAC key of data-key version v (read the header again if this
** process does not know v yet).  NULL if unknown. */
static TdeHmac *walKey(TdeFile *p, uint32_t v){
  const TdeDekVer *d;
  if( !p->pMain || !p->pMain->pKeys ) return 0;
  d = tdeKeysFind(p->pMain->pKeys, v);
  if( !d && tdeMainRefresh(p->pMain)==SQLITE_OK ) d = tdeKeysFind(p->pMain->pKeys, v);
  return d ? d->pWalHmac : 0;
}

/* Standby hook (repl/spool.c): before the WAL is restarted or truncated,
** save the committed frames a shipper has not captured yet.  Raw bytes
** only; a no-op (one access()) when the database is not shipped. */
static void walShipHook(TdeFile *p, int eWhy, const uint8_t *aNewHdr){
  TdeRawSrc wal = { p->pReal, -1 }, hdr = { 0, -1 };
  TdeWalEnd aEnd[2];
  if( !p->pMain || !p->pMain->zName ) return;
  hdr.pFile = p->pMain->pReal;
  tdeShmHeaderEnd(p->pMain->pShm0, &aEnd[0]);
  aEnd[1] = p->pMain->shipEnd;
  /* Never fails the write: a spool it cannot use is logged and the
  ** shipper records a GAP (see tdeShipHook). */
  (void)tdeShipHook(p->pMain->zName, &wal, aEnd, 2, &hdr, eWhy, aNewHdr);
}

void tdeWalFree(TdeFile *p){
  if( p->eKind!=TDE_KIND_WAL ) return;
  sqlite3_free(p->wal.aCk);
  p->wal.aCk = 0;
  p->wal.nCk = 0;
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

static int walBigEndian(TdeFile *p){ return p->wal.aHdr[3] & 1; }

/* MAC of the WAL header's first 24 bytes under WAL MAC key aKey (the
** current data-key version's when written; readers try each they hold). */
static int walHdrMac(TdeHmac *aKey, const uint8_t *aHdr, uint8_t mac[MAC_BYTES]){
  static const uint8_t zTag[4] = { 'W', '1', 'H', 0 };
  uint8_t full[32];
  const uint8_t *ap[2] = { zTag, aHdr };
  const size_t an[2] = { sizeof(zTag), 24 };
  int rc;
  if( !aKey ) return SQLITE_IOERR;
  rc = tdeHmacCompute(aKey, ap, an, 2, full);
  memcpy(mac, full, MAC_BYTES);
  tdeWipe(full, sizeof(full));
  return rc ? SQLITE_IOERR : SQLITE_OK;
}

/* MAC of frame idx: its header fields (page number, commit size, salts)
** and its page trailer (which authenticates the page). */
static int walFrameMac(TdeFile *p, uint32_t idx, const uint8_t *aHdr16,
                       const uint8_t *aTrailer, uint8_t mac[MAC_BYTES]){
  uint8_t pre[8] = { 'W', '1', 'F', 0, 0, 0, 0, 0 };
  uint8_t full[32];
  const uint8_t *ap[3] = { pre, aHdr16, aTrailer };
  const size_t an[3] = { sizeof(pre), 16, TDE_TRAILER_SIZE };
  TdeHmac *aKey = walKey(p, tdeTrailerVersion(aTrailer));   /* the page's version */
  int rc;
  if( !aKey ) return SQLITE_NOTFOUND;   /* unknown data-key version: cannot authenticate */
  tdePut32(pre+4, idx);
  rc = tdeHmacCompute(aKey, ap, an, 3, full);
  memcpy(mac, full, MAC_BYTES);
  tdeWipe(full, sizeof(full));
  return rc ? SQLITE_IOERR : SQLITE_OK;
}

static sqlite3_int64 walFrameOffset(TdeFile *p, uint32_t idx){
  return WAL_HDR + (sqlite3_int64)(idx-1) * (FRAME_HDR + p->wal.pgsz);
}

static void walCkForget(TdeFile *p){
  p->wal.iRunFrame = 0;
  if( p->wal.aCk ) memset(p->wal.aCk, 0, sizeof(p->wal.aCk[0]) * p->wal.nCk);
}

static void walCkRemember(TdeFile *p, uint32_t idx, const uint8_t *mac, const uint8_t *aSqliteCk){
  if( idx>=p->wal.nCk ){
    uint32_t n = idx*2 + 64;
    void *pNew = sqlite3_realloc64(p->wal.aCk, sizeof(p->wal.aCk[0]) * (sqlite3_uint64)n);
    if( !pNew ) return;   /* only a cache */
    p->wal.aCk = pNew;
    memset(p->wal.aCk + p->wal.nCk, 0, sizeof(p->wal.aCk[0]) * (n - p->wal.nCk));
    p->wal.nCk = n;
  }
  memcpy(p->wal.aCk[idx].mac, mac, MAC_BYTES);
  p->wal.aCk[idx].ck[0] = tdeGet32(aSqliteCk);
  p->wal.aCk[idx].ck[1] = tdeGet32(aSqliteCk+4);
  p->wal.aCk[idx].bValid = 1;
}

/*
** Read and authenticate the WAL header from disk.  On success aHdr holds
** the header as SQLite wrote it, with SQLite's checksum recomputed, and is
** cached.  *pState: FRAME_OK, FRAME_SHORT (file shorter than a header),
** FRAME_BAD (MAC mismatch; aOut then holds the stored bytes).
*/
static int walLoadHeader(TdeFile *p, uint8_t *aOut, int *pState){
  uint8_t mac[MAC_BYTES];
  uint32_t ck[2];
  int bShort, rc;
  rc = tdeRealRead(p, aOut, WAL_HDR, 0, &bShort);
  if( rc ) return rc;
  if( bShort ){ *pState = FRAME_SHORT; return SQLITE_OK; }
  {
    /* Written under the then-current data-key version: try each held. */
    const TdeDbKeys *k = p->pMain ? p->pMain->pKeys : 0;
    int bOk = 0;
    for(int i=0; k && i<k->nVer && !bOk; i++){
      rc = walHdrMac(k->aVer[i].pWalHmac, aOut, mac);
      if( rc ) return rc;
      bOk = tdeCtEqual(mac, aOut+24, MAC_BYTES);
    }
    if( !bOk && p->pMain && tdeMainRefresh(p->pMain)==SQLITE_OK ){
      for(int i=0; k && i<k->nVer && !bOk; i++){
        rc = walHdrMac(k->aVer[i].pWalHmac, aOut, mac);
        if( rc ) return rc;
        bOk = tdeCtEqual(mac, aOut+24, MAC_BYTES);
      }
    }
    if( !bOk ){ *pState = FRAME_BAD; return SQLITE_OK; }
  }
  walChecksum(aOut[3] & 1, aOut, 24, 0, ck);
  tdePut32(aOut+24, ck[0]);
  tdePut32(aOut+28, ck[1]);
  if( !p->wal.bHdr || memcmp(p->wal.aHdr, aOut, WAL_HDR)!=0 ){
    memcpy(p->wal.aHdr, aOut, WAL_HDR);
    p->wal.bHdr = 1;
    walCkForget(p);
  }
  if( tdeValidPgsz(tdeGet32(aOut+8)) ) p->wal.pgsz = tdeGet32(aOut+8);
  *pState = FRAME_OK;
  return SQLITE_OK;
}

/* Make sure the header (and so the page size) is known. */
static int walNeedHeader(TdeFile *p){
  uint8_t aHdr[WAL_HDR];
  int state, rc;
  if( p->wal.bHdr && p->wal.pgsz ) return SQLITE_OK;
  rc = walLoadHeader(p, aHdr, &state);
  if( rc ) return rc;
  if( state!=FRAME_OK || !p->wal.pgsz ){
    tdeLog(TDE_LOG_ERROR, "%s: WAL header missing or failed authentication", walName(p));
    return SQLITE_IOERR_AUTH;
  }
  return SQLITE_OK;
}

/*
** Load frame idx into aFrame (FRAME_HDR + pgsz bytes): verify its MAC and
** decrypt its page in place.  The header bytes are returned as stored
** (MAC in the checksum field).  zWhat non-NULL: log a failure.
*/
static int walLoadFrame(TdeFile *p, uint32_t idx, uint8_t *aFrame, int *pState, const char *zWhat){
  uint32_t pgsz = p->wal.pgsz;
  uint8_t mac[MAC_BYTES];
  int bShort, rc;
  rc = tdeRealRead(p, aFrame, (int)(FRAME_HDR + pgsz), walFrameOffset(p, idx), &bShort);
  if( rc ) return rc;
  if( bShort ){ *pState = FRAME_SHORT; return SQLITE_OK; }
  rc = walFrameMac(p, idx, aFrame, aFrame + FRAME_HDR + pgsz - TDE_TRAILER_SIZE, mac);
  if( rc && rc!=SQLITE_NOTFOUND ) return rc;
  if( rc==SQLITE_NOTFOUND || !tdeCtEqual(mac, aFrame+16, MAC_BYTES) ){
    if( zWhat ) tdeLog(TDE_LOG_ERROR, "%s: frame %u header failed authentication", walName(p), idx);
    p->nAuthFail++;
    tdeWipe(aFrame+FRAME_HDR, pgsz);
    *pState = FRAME_BAD;
    return SQLITE_OK;
  }
  rc = tdeOpenPage(p, aFrame+FRAME_HDR, pgsz, tdeGet32(aFrame), zWhat);
  *pState = rc==SQLITE_OK ? FRAME_OK : FRAME_BAD;
  return SQLITE_OK;
}

/*
** Tamper or torn?  Scan the frames from idx to the end of the file: if an
** authentic commit frame of this generation is among them, the bad frame
** before it held part of a committed transaction, and dropping it would
** silently lose that commit.  Frames of a transaction that never
** committed (SQLite rewrites such frames in place while the transaction
** runs) can be damaged by a crash and do not count.
*/
static int walCommitFollows(TdeFile *p, uint32_t idx){
  int state = FRAME_SHORT, bCommit = 0;
  uint8_t *aTmp = sqlite3_malloc((int)(FRAME_HDR + p->wal.pgsz));
  /* Cannot look: say a commit follows, so the bad frame fails the read
  ** rather than being dropped as a torn tail with commits after it. */
  if( !aTmp ) return 1;
  /* To the end of the file: frames that fail authentication too (two
  ** damaged frames in a row must not hide the commits after them) and
  ** frames of older generations (the tail a restarted log leaves). */
  for(;; idx++){
    if( walLoadFrame(p, idx, aTmp, &state, 0)!=SQLITE_OK || state==FRAME_SHORT ) break;
    if( state==FRAME_BAD ){ p->nAuthFail--; continue; }
    if( memcmp(aTmp+8, p->wal.aHdr+16, 8)!=0 ) continue;
    if( tdeGet32(aTmp+4)!=0 ){ bCommit = 1; break; }
  }
  tdeWipe(aTmp, FRAME_HDR + p->wal.pgsz);
  sqlite3_free(aTmp);
  return bCommit;
}

/* Does frame idx contain a 512-byte-aligned run of zeros on disk (a
** sector that was never written)?  Ciphertext and MACs never do. */
static int walHasZeroSector(TdeFile *p, uint32_t idx){
  sqlite3_int64 start = walFrameOffset(p, idx);
  sqlite3_int64 end = start + FRAME_HDR + p->wal.pgsz;
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
** says)?  Its MAC does not depend on the WAL header. */
static int walFirstFrameAuthentic(TdeFile *p){
  uint32_t savePgsz = p->wal.pgsz;
  int bFound = 0;
  uint8_t *aTmp = sqlite3_malloc(FRAME_HDR + TDE_MAX_PAGE);
  if( !aTmp ) return 0;
  for(size_t i=0; i<TDE_N_PROBE_PGSZ && !bFound; i++){
    int state = FRAME_SHORT;
    p->wal.pgsz = tdeProbePgsz[i];
    if( walLoadFrame(p, 1, aTmp, &state, 0)==SQLITE_OK && state==FRAME_OK ) bFound = 1;
    else if( state==FRAME_BAD ) p->nAuthFail--;   /* a wrong guess */
  }
  p->wal.pgsz = savePgsz;
  tdeWipe(aTmp, FRAME_HDR + TDE_MAX_PAGE);
  sqlite3_free(aTmp);
  return bFound;
}

/* SQLite's cumulative checksum after frame k (k>=0; k==0: the header). */
static int walCkAfter(TdeFile *p, uint32_t k, uint32_t *aCk){
  uint8_t *aTmp = 0;
  uint32_t j;
  int rc = SQLITE_OK, state;
  if( k==0 ){
    aCk[0] = tdeGet32(p->wal.aHdr+24);
    aCk[1] = tdeGet32(p->wal.aHdr+28);
    return SQLITE_OK;
  }
  if( p->wal.iRunFrame==k && memcmp(p->wal.aRunSalt, p->wal.aHdr+16, 8)==0 ){
    aCk[0] = p->wal.aRunCk[0];
    aCk[1] = p->wal.aRunCk[1];
    return SQLITE_OK;
  }
  if( k<p->wal.nCk && p->wal.aCk[k].bValid ){
    uint8_t aHdr[FRAME_HDR];
    int bShort;
    rc = tdeRealRead(p, aHdr, FRAME_HDR, walFrameOffset(p, k), &bShort);
    if( rc ) return rc;
    if( !bShort && memcmp(aHdr+16, p->wal.aCk[k].mac, MAC_BYTES)==0 ){
      aCk[0] = p->wal.aCk[k].ck[0];
      aCk[1] = p->wal.aCk[k].ck[1];
      return SQLITE_OK;
    }
  }
  /* Slow path: run the checksum from the header over frames 1..k. */
  aTmp = sqlite3_malloc((int)(FRAME_HDR + p->wal.pgsz));
  if( !aTmp ) return SQLITE_NOMEM;
  walCkAfter(p, 0, aCk);
  for(j=1; j<=k; j++){
    rc = walLoadFrame(p, j, aTmp, &state, "WAL");
    if( rc ) break;
    if( state!=FRAME_OK ){ rc = SQLITE_IOERR_AUTH; break; }
    walChecksum(walBigEndian(p), aTmp, 8, aCk, aCk);
    walChecksum(walBigEndian(p), aTmp+FRAME_HDR, (int)p->wal.pgsz, aCk, aCk);
  }
  if( rc==SQLITE_OK ){
    p->wal.iRunFrame = k;
    p->wal.aRunCk[0] = aCk[0];
    p->wal.aRunCk[1] = aCk[1];
    memcpy(p->wal.aRunSalt, p->wal.aHdr+16, 8);
  }
  tdeWipe(aTmp, FRAME_HDR + p->wal.pgsz);
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
static int walReadFullFrame(TdeFile *p, uint32_t idx, uint8_t *aOut){
  uint32_t ck[2];
  int state, rc;
  rc = walLoadFrame(p, idx, aOut, &state, 0);
  if( rc ) return rc;
  if( state==FRAME_SHORT ){
    memset(aOut, 0, FRAME_HDR + p->wal.pgsz);
    return SQLITE_IOERR_SHORT_READ;
  }
  if( state==FRAME_OK && memcmp(aOut+8, p->wal.aHdr+16, 8)!=0 ){
    /* An authentic frame of an older generation: the end of the log. */
    memset(aOut+16, 0, FRAME_HDR-16 + p->wal.pgsz);
    return SQLITE_OK;
  }
  if( state==FRAME_BAD ){
    /* The salts are under the MAC: a frame whose salts were altered lands
    ** here too, so that damage in mid-log cannot pass for its end.  A frame
    ** with a sector of zeros was never completely written (a power loss
    ** that kept a later write): the torn end, as SQLite treats it. */
    if( !walHasZeroSector(p, idx) && walCommitFollows(p, idx+1) ){
      tdeLog(TDE_LOG_ERROR, "%s: frame %u failed authentication and a later committed transaction "
             "authenticates: the WAL was tampered with", walName(p), idx);
      memset(aOut, 0, FRAME_HDR + p->wal.pgsz);
      return SQLITE_IOERR_AUTH;
    }
    tdeLog(TDE_LOG_WARNING, "%s: frame %u failed authentication at the end of the log; "
           "treating it as a torn write (the transaction it belongs to was not committed durably)",
           walName(p), idx);
    memset(aOut+FRAME_HDR, 0, p->wal.pgsz);
    rc = walCkAfter(p, idx-1, ck);
    if( rc ) return rc;
    tdePut32(aOut+16, ~ck[0]);   /* guaranteed checksum mismatch */
    tdePut32(aOut+20, ~ck[1]);
    return SQLITE_OK;
  }
  rc = walCkAfter(p, idx-1, ck);
  if( rc ){ memset(aOut, 0, FRAME_HDR + p->wal.pgsz); return rc; }
  walChecksum(walBigEndian(p), aOut, 8, ck, ck);
  walChecksum(walBigEndian(p), aOut+FRAME_HDR, (int)p->wal.pgsz, ck, ck);
  tdePut32(aOut+16, ck[0]);
  tdePut32(aOut+20, ck[1]);
  p->wal.iRunFrame = idx;
  p->wal.aRunCk[0] = ck[0];
  p->wal.aRunCk[1] = ck[1];
  memcpy(p->wal.aRunSalt, p->wal.aHdr+16, 8);
  return SQLITE_OK;
}

/* The page of frame idx, for SQLite's page reads (walReadFrame and the
** checkpointer).  Strict: any failure is an error. */
static int walReadPage(TdeFile *p, uint32_t idx, uint8_t *zBuf){
  uint32_t pgsz = p->wal.pgsz;
  uint8_t *aFrame = p->aBuf;
  uint8_t mac[MAC_BYTES];
  int bShort, rc;
  rc = tdeRealRead(p, aFrame, (int)(FRAME_HDR + pgsz), walFrameOffset(p, idx), &bShort);
  if( rc ) return rc;
  if( bShort ){
    memset(zBuf, 0, pgsz);
    return SQLITE_IOERR_SHORT_READ;
  }
  /* Frames of the current generation carry its salts; frames of an
  ** uncommitted transaction whose checksums SQLite will rewrite carry
  ** zero salts.  Anything else is foreign. */
  if( memcmp(aFrame+8, p->wal.aHdr+16, 8)!=0 ){
    static const uint8_t aZero[8];
    if( memcmp(aFrame+8, aZero, 8)!=0 ){
      uint8_t aHdr[WAL_HDR];
      int state;
      rc = walLoadHeader(p, aHdr, &state);
      if( rc ) return rc;
      if( state!=FRAME_OK || memcmp(aFrame+8, p->wal.aHdr+16, 8)!=0 ){
        tdeLog(TDE_LOG_ERROR, "%s: frame %u belongs to another WAL generation or was tampered with",
               walName(p), idx);
        p->nAuthFail++;
        memset(zBuf, 0, pgsz);
        return SQLITE_IOERR_AUTH;
      }
    }
  }
  rc = walFrameMac(p, idx, aFrame, aFrame + FRAME_HDR + pgsz - TDE_TRAILER_SIZE, mac);
  if( rc && rc!=SQLITE_NOTFOUND ) return rc;
  if( rc==SQLITE_NOTFOUND || !tdeCtEqual(mac, aFrame+16, MAC_BYTES) ){
    tdeLog(TDE_LOG_ERROR, "%s: frame %u header failed authentication", walName(p), idx);
    p->nAuthFail++;
    memset(zBuf, 0, pgsz);
    return SQLITE_IOERR_AUTH;
  }
  rc = tdeOpenPageTo(p, aFrame+FRAME_HDR, zBuf, pgsz, tdeGet32(aFrame), "WAL frame");
  if( rc==SQLITE_OK && p->pMain && p->pMain->bCkpt && p->pMain->pKeys
   && tdeTrailerVersion(aFrame + FRAME_HDR + pgsz - TDE_TRAILER_SIZE)==p->pMain->pKeys->hdr.curVersion ){
    /* Checkpoint in progress: remember the page for its write (vfs.c). */
    TdeFile *m = p->pMain;
    if( !m->aCkptPlain ) m->aCkptPlain = sqlite3_malloc(TDE_MAX_PAGE);
    if( !m->aCkptCipher ) m->aCkptCipher = sqlite3_malloc(TDE_MAX_PAGE);
    if( m->aCkptPlain && m->aCkptCipher ){
      memcpy(m->aCkptPlain, zBuf, pgsz);
      memcpy(m->aCkptCipher, aFrame+FRAME_HDR, pgsz);
      m->ckptPgno = tdeGet32(aFrame);
      m->ckptPgsz = pgsz;
      m->bCkptValid = 1;
    }
  }
  return rc;
}

int tdeWalRead(TdeFile *p, void *zBuf, int iAmt, sqlite3_int64 iOfst){
  uint8_t *z = zBuf;
  uint32_t szFrame, idx, within;
  int rc, state;

  rc = tdeWalFlush(p);
  if( rc ) return rc;
  rc = tdeScratch(p);
  if( rc ) return rc;

  if( iOfst<WAL_HDR ){
    uint8_t aHdr[WAL_HDR];
    if( iOfst+iAmt>WAL_HDR ) return SQLITE_IOERR_READ;
    rc = walLoadHeader(p, aHdr, &state);
    if( rc ) return rc;
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
      if( walFirstFrameAuthentic(p) ){
        tdeLog(TDE_LOG_ERROR, "%s: WAL header failed authentication: tampered with", walName(p));
        memset(z, 0, (size_t)iAmt);
        return SQLITE_IOERR_AUTH;
      }
      tdeLog(TDE_LOG_WARNING, "%s: WAL header failed authentication and no authentic frame "
             "follows; treating the log as empty", walName(p));
      p->wal.bHdr = 0;
      aHdr[24] ^= 0xff;    /* SQLite's header check fails: log ignored */
      memcpy(z, aHdr+iOfst, (size_t)iAmt);
      return SQLITE_OK;
    }
    memcpy(z, aHdr+iOfst, (size_t)iAmt);
    return SQLITE_OK;
  }

  rc = walNeedHeader(p);
  if( rc ){ memset(z, 0, (size_t)iAmt); return rc; }
  szFrame = FRAME_HDR + p->wal.pgsz;
  idx = (uint32_t)((iOfst - WAL_HDR) / szFrame) + 1;
  within = (uint32_t)((iOfst - WAL_HDR) % szFrame);

  if( within==FRAME_HDR && (uint32_t)iAmt==p->wal.pgsz ){
    return walReadPage(p, idx, z);
  }
  if( within==0 && (uint32_t)iAmt==szFrame ){
    return walReadFullFrame(p, idx, z);
  }
  if( within==16 && iAmt==8 ){
    uint32_t ck[2];
    rc = walCkAfter(p, idx, ck);
    if( rc ) return rc;
    tdePut32(z, ck[0]);
    tdePut32(z+4, ck[1]);
    return SQLITE_OK;
  }
  /* Any other range inside one frame: assemble the whole frame. */
  if( within + (uint32_t)iAmt > szFrame ) return SQLITE_IOERR_READ;
  {
    uint8_t *aFrame = sqlite3_malloc((int)szFrame);
    if( !aFrame ) return SQLITE_NOMEM;
    rc = walReadFullFrame(p, idx, aFrame);
    if( rc==SQLITE_OK || rc==SQLITE_IOERR_SHORT_READ ) memcpy(z, aFrame+within, (size_t)iAmt);
    tdeWipe(aFrame, szFrame);
    sqlite3_free(aFrame);
    return rc;
  }
}

/* Write the held-back frame header whose page is already on disk. */
int tdeWalFlush(TdeFile *p){
  uint8_t aTrailer[TDE_TRAILER_SIZE];
  uint8_t aHdr[FRAME_HDR];
  uint32_t idx;
  int bShort, rc;
  if( p->eKind!=TDE_KIND_WAL || !p->wal.bPending ) return SQLITE_OK;
  p->wal.bPending = 0;
  idx = (uint32_t)((p->wal.iPendingOff - WAL_HDR) / (FRAME_HDR + p->wal.pgsz)) + 1;
  rc = tdeRealRead(p, aTrailer, TDE_TRAILER_SIZE,
                   p->wal.iPendingOff + FRAME_HDR + p->wal.pgsz - TDE_TRAILER_SIZE, &bShort);
  if( rc ) return rc;
  if( bShort ){
    tdeLog(TDE_LOG_ERROR, "%s: frame %u header written without its page", walName(p), idx);
    return SQLITE_IOERR_WRITE;
  }
  memcpy(aHdr, p->wal.aPending, 16);
  rc = walFrameMac(p, idx, aHdr, aTrailer, aHdr+16);
  if( rc ) return rc;
  rc = p->pReal->pMethods->xWrite(p->pReal, aHdr, FRAME_HDR, p->wal.iPendingOff);
  if( rc ) return rc;
  walCkRemember(p, idx, aHdr+16, p->wal.aPending+16);
  if( p->wal.iRunFrame>=idx ) p->wal.iRunFrame = 0;
  return SQLITE_OK;
}

int tdeWalWrite(TdeFile *p, const void *zBuf, int iAmt, sqlite3_int64 iOfst){
  const uint8_t *z = zBuf;
  uint32_t szFrame, idx, within;
  int rc;

  rc = tdeScratch(p);
  if( rc ) return rc;
  /* WAL writes happen inside a write transaction: re-wrap a header left
  ** behind by a master-key rotation, rewrite a torn header slot (a flag
  ** test when nothing is due). */
  if( p->pMain ){
    rc = tdeMainHeaderDue(p->pMain);
    if( rc ) return rc;
  }
  if( iOfst==0 && iAmt==WAL_HDR ){
    uint8_t aHdr[WAL_HDR];
    rc = tdeWalFlush(p);
    if( rc ) return rc;
    walShipHook(p, TDE_CAPTURE_RESTART, z);
    memcpy(aHdr, z, 24);
    {
      const TdeDbKeys *k = p->pMain ? p->pMain->pKeys : 0;
      const TdeDekVer *d = k ? tdeKeysFind(k, k->hdr.curVersion) : 0;
      rc = walHdrMac(d ? d->pWalHmac : 0, aHdr, aHdr+24);
    }
    if( rc ) return rc;
    memset(aHdr+24+MAC_BYTES, 0, WAL_HDR-24-MAC_BYTES);
    rc = p->pReal->pMethods->xWrite(p->pReal, aHdr, WAL_HDR, 0);
    if( rc ) return rc;
    memcpy(p->wal.aHdr, z, WAL_HDR);
    p->wal.bHdr = 1;
    p->wal.pgsz = tdeValidPgsz(tdeGet32(z+8)) ? tdeGet32(z+8) : 0;
    p->wal.iMaxWritten = 0;     /* a new generation */
    walCkForget(p);
    return SQLITE_OK;
  }
  if( iOfst<WAL_HDR ){
    tdeLog(TDE_LOG_ERROR, "%s: unexpected partial WAL header write", walName(p));
    return SQLITE_IOERR_WRITE;
  }
  rc = walNeedHeader(p);
  if( rc ) return rc;
  szFrame = FRAME_HDR + p->wal.pgsz;
  idx = (uint32_t)((iOfst - WAL_HDR) / szFrame) + 1;
  within = (uint32_t)((iOfst - WAL_HDR) % szFrame);

  if( within==0 && iAmt==FRAME_HDR ){
    rc = tdeWalFlush(p);
    if( rc ) return rc;
    memcpy(p->wal.aPending, z, FRAME_HDR);
    p->wal.iPendingOff = iOfst;
    p->wal.bPending = 1;
    /* A frame this handle already wrote (SQLite rewriting the checksums of
    ** a transaction that spilled, up to its commit frame): its page is on
    ** disk and no page write follows -- complete it now, or the commit
    ** would wait in memory for the next I/O call. */
    if( idx<=p->wal.iMaxWritten && memcmp(z+8, p->wal.aMaxSalt, 8)==0 ) return tdeWalFlush(p);
    return SQLITE_OK;
  }
  if( within==FRAME_HDR && (uint32_t)iAmt==p->wal.pgsz ){
    uint8_t *aFrame = p->aBuf;
    uint32_t pgno;
    int bJoin = p->wal.bPending && p->wal.iPendingOff==iOfst-FRAME_HDR;
    if( !bJoin ){
      int bShort;
      rc = tdeWalFlush(p);
      if( rc ) return rc;
      rc = tdeRealRead(p, aFrame, FRAME_HDR, iOfst-FRAME_HDR, &bShort);
      if( rc ) return rc;
      if( bShort ){
        tdeLog(TDE_LOG_ERROR, "%s: frame %u page written without a header", walName(p), idx);
        return SQLITE_IOERR_WRITE;
      }
    }else{
      memcpy(aFrame, p->wal.aPending, FRAME_HDR);
    }
    pgno = tdeGet32(aFrame);
    if( pgno==1 && z[20]<TDE_RESERVE_BYTES ){
      tdeLog(TDE_LOG_ERROR, "%s: page 1 has %d reserved bytes, sqlite-tde needs %d",
             walName(p), z[20], TDE_RESERVE_BYTES);
      return SQLITE_IOERR_WRITE;
    }
    rc = tdeSealPage(p, z, p->wal.pgsz, pgno, aFrame+FRAME_HDR);
    if( rc ) return rc;
    rc = walFrameMac(p, idx, aFrame, aFrame + szFrame - TDE_TRAILER_SIZE, aFrame+16);
    if( rc ) return rc;
    if( p->wal.iRunFrame>=idx ) p->wal.iRunFrame = 0;
    {
      static const uint8_t aZero[8];
      const uint8_t *aSalt = aFrame+8;          /* the frame's own salts */
      if( memcmp(aSalt, aZero, 8)!=0 ){
        if( memcmp(aSalt, p->wal.aMaxSalt, 8)!=0 ){
          memcpy(p->wal.aMaxSalt, aSalt, 8);     /* a new generation */
          p->wal.iMaxWritten = 0;
        }
        if( idx>p->wal.iMaxWritten ) p->wal.iMaxWritten = idx;
      }else if( idx>p->wal.iMaxWritten && p->wal.iMaxWritten>0 ){
        p->wal.iMaxWritten = idx;                /* same transaction, checksums pending */
      }
    }
    if( bJoin ){
      p->wal.bPending = 0;
      rc = p->pReal->pMethods->xWrite(p->pReal, aFrame, (int)szFrame, iOfst-FRAME_HDR);
      if( rc==SQLITE_OK ) walCkRemember(p, idx, aFrame+16, p->wal.aPending+16);
      return rc;
    }
    /* A page rewritten in place (a frame of the open transaction, whose
    ** headers SQLite rewrites at commit): the header's new MAC and the
    ** page go out in one write, the header fields are left as they are. */
    if( idx<p->wal.nCk ) p->wal.aCk[idx].bValid = 0;
    return p->pReal->pMethods->xWrite(p->pReal, aFrame+16, MAC_BYTES + iAmt, iOfst-FRAME_HDR+16);
  }
  tdeLog(TDE_LOG_ERROR, "%s: unexpected WAL write of %d bytes at offset %lld",
         walName(p), iAmt, (long long)iOfst);
  return SQLITE_IOERR_WRITE;
}

int tdeWalTruncate(TdeFile *p, sqlite3_int64 size){
  int rc = tdeWalFlush(p);
  if( rc ) return rc;
  if( size<WAL_HDR ){
    /* Truncated to nothing: every frame goes (a shorter truncation only
    ** drops frames beyond the ones just committed, captured already). */
    walShipHook(p, TDE_CAPTURE_CLOSE, 0);
  }
  walCkForget(p);
  p->wal.iMaxWritten = 0;
  if( size<WAL_HDR ) p->wal.bHdr = 0;
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
  rc = walLoadHeader(p, aHdr, &state);
  if( rc ) return rc;
  if( state==FRAME_SHORT ) return SQLITE_OK;
  if( state==FRAME_BAD ){
    if( mxFrame>0 || walFirstFrameAuthentic(p) ){ *piBad = -1; return SQLITE_IOERR_AUTH; }
    return SQLITE_OK;
  }
  if( !p->wal.pgsz ) return SQLITE_OK;
  aFrame = sqlite3_malloc((int)(FRAME_HDR + p->wal.pgsz));
  if( !aFrame ) return SQLITE_NOMEM;
  for(idx=1; mxFrame==0 || idx<=mxFrame; idx++){
    rc = walLoadFrame(p, idx, aFrame, &state, mxFrame ? "WAL" : 0);
    if( rc ) break;
    if( state==FRAME_SHORT ){
      if( mxFrame ){ *piBad = idx; rc = SQLITE_IOERR_AUTH; }
      break;
    }
    if( state==FRAME_BAD ){
      if( mxFrame || walCommitFollows(p, idx+1) ){ *piBad = idx; rc = SQLITE_IOERR_AUTH; }
      else p->nAuthFail--;
      break;
    }
    if( memcmp(aFrame+8, p->wal.aHdr+16, 8)!=0 ){
      if( mxFrame ){ *piBad = idx; rc = SQLITE_IOERR_AUTH; }
      break;                       /* older generation: the end */
    }
    (*pnFrames)++;
  }
  tdeWipe(aFrame, FRAME_HDR + p->wal.pgsz);
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
  if( mxFrame<iFirst || !p->wal.pgsz ) return SQLITE_OK;
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
