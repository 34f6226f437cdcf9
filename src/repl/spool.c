/*
** The ship spool DB-tdeship (docs/FORMAT.md "Ship spool"): committed WAL
** transactions of the primary, captured as the ciphertext frames SQLite
** wrote, one record per transaction with a sequence number, in commit
** order.  Two kinds of writers append to it, always under SQLite's WAL
** write lock (or the exclusive lock at the last close), so they never
** race: the shipper's capture cycles, and the shim's hook (wal.c, vfs.c)
** just before a WAL restart, truncation or deletion would discard frames
** the shipper has not captured yet.  The capture position is the last
** record's; a record torn by a crash fails its checksum and is cut off.
**
** Also here: applying a record to a copy of the database file (the
** standby, and the shipper's base copy).
**
** Must never: use a key (frames are copied as they are), lose a committed
** frame the spool does not hold, or record a partial transaction.
*/
#include "repl/repl.h"
#include "keys/layout.h"
#include "cipher/cipher.h"
#include "keys/keys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- raw reads ---------------------------------------------------------- */

int tdeRawRead(const TdeRawSrc *src, void *z, int n, sqlite3_int64 iOff, int *pbShort){
  *pbShort = 0;
  if( src->pFile ){
    int rc = src->pFile->pMethods->xRead(src->pFile, z, n, iOff);
    if( rc==SQLITE_IOERR_SHORT_READ ){ *pbShort = 1; return TDE_OK; }
    return rc==SQLITE_OK ? TDE_OK : tdeErr(TDE_IO, "read failed (SQLite error %d)", rc);
  }else{
    size_t nDone = 0;
    while( nDone<(size_t)n ){
      ssize_t k = pread(src->fd, (uint8_t*)z + nDone, (size_t)n - nDone, (off_t)(iOff + (sqlite3_int64)nDone));
      if( k<0 && errno==EINTR ) continue;
      if( k<0 ) return tdeErr(TDE_IO, "read failed: %s", strerror(errno));
      if( k==0 ) break;
      nDone += (size_t)k;
    }
    if( nDone<(size_t)n ){
      memset((uint8_t*)z + nDone, 0, (size_t)n - nDone);
      *pbShort = 1;
    }
    return TDE_OK;
  }
}

static int writeAll(int fd, const void *z, size_t n, off_t iOff){
  size_t nDone = 0;
  while( nDone<n ){
    ssize_t k = pwrite(fd, (const uint8_t*)z + nDone, n - nDone, iOff + (off_t)nDone);
    if( k<0 && errno==EINTR ) continue;
    if( k<=0 ) return tdeErr(TDE_IO, "write failed: %s", k<0 ? strerror(errno) : "no progress");
    nDone += (size_t)k;
  }
  return TDE_OK;
}

void tdeShmHeaderEnd(const volatile void *pShm, TdeWalEnd *pEnd){
  uint8_t a[96];
  const volatile uint8_t *v = pShm;
  memset(pEnd, 0, sizeof(*pEnd));
  if( !pShm ) return;
  for(int i=0; i<96; i++) a[i] = v[i];
  /* Two copies of the 48-byte WalIndexHdr; isInit at 12, mxFrame (native
  ** byte order) at 16, salts (as in the WAL header) at 32. */
  if( memcmp(a, a+48, 48)!=0 || a[12]==0 ) return;
  memcpy(&pEnd->mxFrame, a+16, 4);
  memcpy(pEnd->aSalt, a+32, 8);
  pEnd->bKnown = 1;
}

/* ---- records ------------------------------------------------------------ */

void tdeRecEncode(const TdeRec *r, uint8_t *a){
  memset(a, 0, TDE_REC_HDR);
  memcpy(a, TDE_REC_MAGIC, 8);
  tdePut64(a+8, r->seq);
  a[16] = r->kind;
  a[17] = r->flags;
  tdePut32(a+20, r->pgsz);
  memcpy(a+24, r->aSalt, 8);
  tdePut32(a+32, r->nCkpt);
  tdePut32(a+36, r->iFirst);
  tdePut32(a+40, r->iLast);
  tdePut32(a+44, r->nFrame);
  tdePut64(a+48, r->tCapture);
  memcpy(a+56, r->aHdrHash, 32);
  tdePut32(a+88, r->nPayload);
  tdePut32(a+92, r->keySig);
}

int tdeRecDecode(const uint8_t *a, TdeRec *r){
  memset(r, 0, sizeof(*r));
  if( memcmp(a, TDE_REC_MAGIC, 8)!=0 ) return tdeErr(TDE_FORMAT, "not a spool record");
  r->seq = tdeGet64(a+8);
  r->kind = a[16];
  r->flags = a[17];
  r->pgsz = tdeGet32(a+20);
  memcpy(r->aSalt, a+24, 8);
  r->nCkpt = tdeGet32(a+32);
  r->iFirst = tdeGet32(a+36);
  r->iLast = tdeGet32(a+40);
  r->nFrame = tdeGet32(a+44);
  r->tCapture = tdeGet64(a+48);
  memcpy(r->aHdrHash, a+56, 32);
  r->nPayload = tdeGet32(a+88);
  r->keySig = tdeGet32(a+92);
  if( r->kind<TDE_REC_TXN || r->kind>TDE_REC_GAP ) return tdeErr(TDE_FORMAT, "bad record kind %d", r->kind);
  if( r->nFrame>0 && (r->pgsz<512 || r->pgsz>65536 || (r->pgsz & (r->pgsz-1))) ){
    return tdeErr(TDE_FORMAT, "bad page size %u in a record", r->pgsz);
  }
  if( (uint64_t)r->nPayload != (uint64_t)((r->flags & TDE_RECF_HEADER) ? TDE_HEADER_BYTES : 0)
                               + (uint64_t)r->nFrame*(TDE_FRAME_HDR + r->pgsz) ){
    return tdeErr(TDE_FORMAT, "record payload length does not match its frames");
  }
  return TDE_OK;
}

uint32_t tdeShipMaxRecord(void){
  /* TDE_SHIP_MAX_RECORD is for tests only (a transaction above the real
  ** limit is 64 MiB of WAL): it can lower the limit, never raise it.
  ** Read at every capture, so a test can set it per process. */
  const char *z = getenv("TDE_SHIP_MAX_RECORD");
  uint32_t nMax = TDE_REC_PAYLOAD_MAX;
  if( z && *z ){
    long long v = atoll(z);
    if( v>0 && v<(long long)nMax ) nMax = (uint32_t)v;
  }
  return nMax;
}

int tdeRecCheck(const uint8_t *a, size_t n, TdeRec *r){
  uint8_t sum[32];
  int rc;
  if( n<TDE_REC_HDR + TDE_REC_SUM ) return tdeErr(TDE_FORMAT, "record too short");
  rc = tdeRecDecode(a, r);
  if( rc ) return rc;
  if( r->nPayload > TDE_REC_PAYLOAD_MAX ) return tdeErr(TDE_FORMAT, "record too large");
  if( (size_t)TDE_REC_HDR + r->nPayload + TDE_REC_SUM != n ) return tdeErr(TDE_FORMAT, "record length mismatch");
  rc = tdeSha256(a, n - TDE_REC_SUM, sum);
  if( rc ) return rc;
  if( memcmp(sum, a + n - TDE_REC_SUM, 32)!=0 ) return tdeErr(TDE_FORMAT, "record checksum mismatch");
  return TDE_OK;
}

/* ---- the spool file ----------------------------------------------------- */

/* Where the last frame header of a record with frames starts in its
** payload. */
static size_t recLastFhOff(const TdeRec *r){
  return ((r->flags & TDE_RECF_HEADER) ? (size_t)TDE_HEADER_BYTES : 0)
       + (size_t)(r->nFrame-1)*(TDE_FRAME_HDR + r->pgsz);
}

/* The position after record r.  aPayload: its payload in memory, or NULL
** (then iRecOff, the record's offset in the spool, locates its last frame
** header for tdeSpoolScan to read). */
static void posApply(TdeSpoolPos *p, const TdeRec *r, const uint8_t *aPayload, sqlite3_int64 iRecOff){
  if( r->kind==TDE_REC_TXN && r->nFrame>0 ){
    if( aPayload ){
      memcpy(p->aLastFh, aPayload + recLastFhOff(r), TDE_FRAME_HDR);
      p->bLastFh = 1;
    }else{
      p->iLastFhOff = iRecOff + TDE_REC_HDR + (sqlite3_int64)recLastFhOff(r);
      p->bLastFh = 2;
    }
  }else if( !p->bValid || memcmp(p->aSalt, r->aSalt, 8)!=0 || p->iFrame!=r->iLast ){
    p->bLastFh = 0;           /* a position whose frame was not captured */
  }
  if( r->kind!=TDE_REC_MARK ) p->seq = r->seq;
  memcpy(p->aSalt, r->aSalt, 8);
  p->nCkpt = r->nCkpt;
  p->iFrame = r->iLast;
  p->bClosed = (r->flags & TDE_RECF_CLOSED)!=0;
  memcpy(p->aHdrHash, r->aHdrHash, 32);
  p->keySig = r->keySig;
  p->bValid = 1;
}

static int spoolReadHeader(TdeSpool *s){
  uint8_t a[TDE_SPOOL_HDR], sum[32];
  TdeRawSrc src = { 0, s->fd };
  int bShort, rc;
  rc = tdeRawRead(&src, a, TDE_SPOOL_HDR, 0, &bShort);
  if( rc ) return rc;
  if( bShort ) return tdeErr(TDE_FORMAT, "%s: spool header missing", s->zPath);
  tdeSha256(a, 64, sum);
  if( memcmp(a, TDE_SPOOL_MAGIC, 8)!=0 || memcmp(sum, a+64, 32)!=0 ){
    return tdeErr(TDE_FORMAT, "%s: not a ship spool, or damaged", s->zPath);
  }
  memcpy(s->aDbid, a+8, 16);
  memcpy(s->aHistory, a+24, 16);
  return TDE_OK;
}

static int spoolWriteHeader(int fd, const uint8_t *aDbid, const uint8_t *aHistory){
  uint8_t a[TDE_SPOOL_HDR];
  memset(a, 0, sizeof(a));
  memcpy(a, TDE_SPOOL_MAGIC, 8);
  memcpy(a+8, aDbid, 16);
  memcpy(a+24, aHistory, 16);
  tdeSha256(a, 64, a+64);
  return writeAll(fd, a, sizeof(a), 0);
}

int tdeSpoolOpen(const char *zDb, int bCreate, const uint8_t *aDbid, TdeSpool **pp){
  TdeSpool *s;
  struct stat st;
  int rc;
  *pp = 0;
  s = sqlite3_malloc(sizeof(*s));
  if( !s ) return TDE_NOMEM;
  memset(s, 0, sizeof(*s));
  s->fd = -1;
  s->zPath = sqlite3_mprintf("%s-tdeship", zDb);
  if( !s->zPath ){ sqlite3_free(s); return TDE_NOMEM; }
  s->fd = open(s->zPath, O_RDWR | O_CLOEXEC | (bCreate ? O_CREAT : 0), 0600);
  if( s->fd<0 ){
    rc = errno==ENOENT ? TDE_NOTFOUND : tdeErr(TDE_IO, "%s: %s", s->zPath, strerror(errno));
    goto fail;
  }
  if( fstat(s->fd, &st)!=0 ){ rc = tdeErr(TDE_IO, "%s: %s", s->zPath, strerror(errno)); goto fail; }
  if( st.st_size<TDE_SPOOL_HDR && bCreate ){
    uint8_t aHist[16];
    if( !aDbid ){ rc = tdeErr(TDE_MISUSE, "spool creation needs the database id"); goto fail; }
    rc = tdeRandom(aHist, sizeof(aHist));
    if( rc==TDE_OK && ftruncate(s->fd, 0)!=0 ) rc = tdeErr(TDE_IO, "%s: %s", s->zPath, strerror(errno));
    if( rc==TDE_OK ) rc = spoolWriteHeader(s->fd, aDbid, aHist);
    if( rc==TDE_OK && fsync(s->fd)!=0 ) rc = tdeErr(TDE_IO, "%s: fsync: %s", s->zPath, strerror(errno));
    if( rc==TDE_OK ) rc = tdeFsyncDir(s->zPath);
    if( rc ) goto fail;
  }
  rc = spoolReadHeader(s);
  if( rc ) goto fail;
  if( aDbid && memcmp(aDbid, s->aDbid, 16)!=0 ){
    rc = tdeErr(TDE_FORMAT, "%s: the spool belongs to another database", s->zPath);
    goto fail;
  }
  s->ino = st.st_ino;
  s->iEnd = TDE_SPOOL_HDR;
  *pp = s;
  return TDE_OK;
fail:
  tdeSpoolClose(s);
  return rc;
}

void tdeSpoolClose(TdeSpool *s){
  if( !s ) return;
  if( s->fd>=0 ) close(s->fd);
  sqlite3_free(s->zPath);
  sqlite3_free(s);
}

int tdeSpoolRead(TdeSpool *s, sqlite3_int64 iOff, TdeRec *r, uint8_t **ppRec, size_t *pn){
  uint8_t aHdr[TDE_REC_HDR];
  TdeRawSrc src = { 0, s->fd };
  uint8_t *a;
  size_t n;
  int bShort, rc;
  *ppRec = 0;
  *pn = 0;
  rc = tdeRawRead(&src, aHdr, TDE_REC_HDR, iOff, &bShort);
  if( rc ) return rc;
  if( bShort ) return TDE_NOTFOUND;
  rc = tdeRecDecode(aHdr, r);
  if( rc ) return rc;
  if( r->nPayload > TDE_REC_PAYLOAD_MAX ) return tdeErr(TDE_FORMAT, "record %llu too large (%u bytes)",
                                                        (unsigned long long)r->seq, r->nPayload);
  n = (size_t)TDE_REC_HDR + r->nPayload + TDE_REC_SUM;
  a = sqlite3_malloc64(n);
  if( !a ) return TDE_NOMEM;
  rc = tdeRawRead(&src, a, (int)n, iOff, &bShort);
  if( rc==TDE_OK && bShort ) rc = TDE_NOTFOUND;
  if( rc==TDE_OK ) rc = tdeRecCheck(a, n, r);
  if( rc ){ sqlite3_free(a); return rc; }
  *ppRec = a;
  *pn = n;
  return TDE_OK;
}

int tdeSpoolScan(TdeSpool *s, int bRepair){
  struct stat st;
  if( stat(s->zPath, &st)==0 && st.st_ino!=s->ino ){
    /* Replaced by a trim: start over on the new file. */
    int fd = open(s->zPath, O_RDWR | O_CLOEXEC);
    if( fd<0 ) return tdeErr(TDE_IO, "%s: %s", s->zPath, strerror(errno));
    close(s->fd);
    s->fd = fd;
    s->ino = st.st_ino;
    s->iEnd = TDE_SPOOL_HDR;
    memset(&s->pos, 0, sizeof(s->pos));
    s->firstSeq = 0;
    if( s->xOnRec ) s->xOnRec(s->pOnRecArg, 0, 0, 0, 0);
    if( spoolReadHeader(s) ) return TDE_FORMAT;
  }
  if( fstat(s->fd, &st)!=0 ) return tdeErr(TDE_IO, "%s: %s", s->zPath, strerror(errno));
  if( st.st_size<s->iEnd ){
    /* The file shrank under us (another writer cut a tail, or damage):
    ** what we counted may be gone; read it again from the start. */
    tdeLog(TDE_LOG_WARNING, "%s: the spool shrank from %lld to %lld bytes; reading it again", s->zPath,
           (long long)s->iEnd, (long long)st.st_size);
    s->iEnd = TDE_SPOOL_HDR;
    memset(&s->pos, 0, sizeof(s->pos));
    s->firstSeq = 0;
    if( s->xOnRec ) s->xOnRec(s->pOnRecArg, 0, 0, 0, 0);
  }
  /* Record headers only, except the last record, which is checked whole:
  ** an append torn by a crash can only be the last.  (Every record is
  ** checked whole again when it is read to be sent.) */
  for(;;){
    uint8_t aHdr[TDE_REC_HDR];
    TdeRawSrc src = { 0, s->fd };
    TdeRec r;
    size_t n = 0;
    int bShort = 0, bTorn = 0, rc;
    if( s->iEnd>=st.st_size ) break;
    rc = tdeRawRead(&src, aHdr, TDE_REC_HDR, s->iEnd, &bShort);
    if( rc ) return rc;
    if( bShort || tdeRecDecode(aHdr, &r)!=TDE_OK ){
      bTorn = 1;
    }else{
      n = (size_t)TDE_REC_HDR + r.nPayload + TDE_REC_SUM;
      if( s->iEnd + (sqlite3_int64)n > st.st_size ){
        bTorn = 1;
      }else if( r.nPayload > TDE_REC_PAYLOAD_MAX ){
        /* Complete but larger than any reader takes (written by an older
        ** version): never cut it, or the records after it go too.  The
        ** sender finds it unreadable and sends a base copy; a trim
        ** replaces it with a GAP. */
      }else if( s->iEnd + (sqlite3_int64)n == st.st_size ){
        uint8_t *a = 0;
        size_t n2 = 0;
        rc = tdeSpoolRead(s, s->iEnd, &r, &a, &n2);
        sqlite3_free(a);
        if( rc==TDE_FORMAT || rc==TDE_NOTFOUND ) bTorn = 1;
        else if( rc ) return rc;
      }
    }
    if( bTorn ){
      tdeErrClear();
      if( bRepair ){
        /* A record torn by a crash during its append: cut it off. */
        tdeLog(TDE_LOG_WARNING, "%s: cutting a torn record at offset %lld", s->zPath, (long long)s->iEnd);
        if( ftruncate(s->fd, (off_t)s->iEnd)!=0 ) return tdeErr(TDE_IO, "%s: %s", s->zPath, strerror(errno));
      }
      break;
    }
    posApply(&s->pos, &r, 0, s->iEnd);
    if( r.kind!=TDE_REC_MARK && s->firstSeq==0 ) s->firstSeq = r.seq;
    if( s->xOnRec ){
      uint8_t aSum[TDE_REC_SUM];
      int bS = 1;
      if( r.kind!=TDE_REC_MARK && tdeRawRead(&src, aSum, TDE_REC_SUM, s->iEnd + (sqlite3_int64)n - TDE_REC_SUM, &bS)!=TDE_OK ){
        bS = 1;
      }
      s->xOnRec(s->pOnRecArg, &r, s->iEnd, n, (r.kind==TDE_REC_MARK || bS) ? 0 : aSum);
    }
    s->iEnd += (sqlite3_int64)n;
  }
  if( s->pos.bLastFh==2 ){
    TdeRawSrc src = { 0, s->fd };
    int bShort = 1;
    if( tdeRawRead(&src, s->pos.aLastFh, TDE_FRAME_HDR, s->pos.iLastFhOff, &bShort)!=TDE_OK || bShort ){
      tdeErrClear();
      s->pos.bLastFh = 0;
    }else{
      s->pos.bLastFh = 1;
    }
  }
  return TDE_OK;
}

int tdeSpoolAppend(TdeSpool *s, TdeRec *r, const uint8_t *aPayload){
  size_t n;
  uint8_t *a;
  int rc;
  if( r->kind==TDE_REC_MARK ) r->seq = s->pos.seq;
  n = (size_t)TDE_REC_HDR + r->nPayload + TDE_REC_SUM;
  a = sqlite3_malloc64(n);
  if( !a ) return TDE_NOMEM;
  tdeRecEncode(r, a);
  if( r->nPayload ) memcpy(a+TDE_REC_HDR, aPayload, r->nPayload);
  rc = tdeSha256(a, n - TDE_REC_SUM, a + n - TDE_REC_SUM);
  if( rc==TDE_OK ) rc = writeAll(s->fd, a, n, (off_t)s->iEnd);
  if( rc==TDE_OK && s->xOnRec ) s->xOnRec(s->pOnRecArg, r, s->iEnd, n, r->kind==TDE_REC_MARK ? 0 : a + n - TDE_REC_SUM);
  sqlite3_free(a);
  if( rc ) return rc;
  posApply(&s->pos, r, aPayload, s->iEnd);
  s->iEnd += (sqlite3_int64)n;
  if( r->kind!=TDE_REC_MARK && s->firstSeq==0 ) s->firstSeq = r->seq;
  return TDE_OK;
}

int tdeSpoolSync(TdeSpool *s){
  if( fdatasync(s->fd)!=0 ) return tdeErr(TDE_IO, "%s: fsync: %s", s->zPath, strerror(errno));
  return TDE_OK;
}

int tdeSpoolTrim(TdeSpool *s, uint64_t keepAfter){
  char *zTmp = sqlite3_mprintf("%s.tmp", s->zPath);
  sqlite3_int64 iOff = TDE_SPOOL_HDR, iOut = TDE_SPOOL_HDR;
  int fd = -1, rc;
  if( !zTmp ) return TDE_NOMEM;
  fd = open(zTmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if( fd<0 ){ rc = tdeErr(TDE_IO, "%s: %s", zTmp, strerror(errno)); goto done; }
  rc = spoolWriteHeader(fd, s->aDbid, s->aHistory);
  while( rc==TDE_OK && iOff<s->iEnd ){
    TdeRec r;
    uint8_t *a = 0;
    size_t n = 0;
    {
      uint8_t aHdr[TDE_REC_HDR];
      TdeRawSrc src = { 0, s->fd };
      int bShort = 0;
      rc = tdeRawRead(&src, aHdr, TDE_REC_HDR, iOff, &bShort);
      if( rc==TDE_OK && !bShort && tdeRecDecode(aHdr, &r)==TDE_OK && r.nPayload>TDE_REC_PAYLOAD_MAX ){
        /* A record no reader takes: keep its place as a GAP (standbys
        ** behind it take a base copy). */
        iOff += (sqlite3_int64)TDE_REC_HDR + r.nPayload + TDE_REC_SUM;
        if( r.seq>keepAfter || iOff>=s->iEnd ){
          uint8_t aGap[TDE_REC_HDR + TDE_REC_SUM];
          r.kind = TDE_REC_GAP;
          r.flags &= TDE_RECF_CLOSED;
          r.nFrame = 0;
          r.nPayload = 0;
          tdeRecEncode(&r, aGap);
          rc = tdeSha256(aGap, TDE_REC_HDR, aGap + TDE_REC_HDR);
          if( rc==TDE_OK ) rc = writeAll(fd, aGap, sizeof(aGap), (off_t)iOut);
          iOut += (sqlite3_int64)sizeof(aGap);
        }
        continue;
      }
      tdeErrClear();
    }
    rc = tdeSpoolRead(s, iOff, &r, &a, &n);
    if( rc ) break;
    iOff += (sqlite3_int64)n;
    if( r.seq>keepAfter || iOff>=s->iEnd ){
      rc = writeAll(fd, a, n, (off_t)iOut);
      iOut += (sqlite3_int64)n;
    }
    sqlite3_free(a);
  }
  if( rc==TDE_OK && fsync(fd)!=0 ) rc = tdeErr(TDE_IO, "%s: fsync: %s", zTmp, strerror(errno));
  if( rc==TDE_OK && rename(zTmp, s->zPath)!=0 ) rc = tdeErr(TDE_IO, "%s: rename: %s", zTmp, strerror(errno));
  if( rc==TDE_OK ) rc = tdeFsyncDir(s->zPath);
  if( rc==TDE_OK ) rc = tdeSpoolScan(s, 0);
done:
  if( fd>=0 ) close(fd);
  if( rc ) unlink(zTmp);
  sqlite3_free(zTmp);
  return rc;
}

/* ---- capture ------------------------------------------------------------ */

/* Frames accumulated for the transaction being captured. */
typedef struct CapBuf {
  uint8_t *a;
  size_t n, nAlloc;
} CapBuf;

static int capReserve(CapBuf *b, size_t nMore){
  if( b->n + nMore > b->nAlloc ){
    size_t nNew = (b->n + nMore) * 2 + 65536;
    uint8_t *aNew = sqlite3_realloc64(b->a, nNew);
    if( !aNew ) return TDE_NOMEM;
    b->a = aNew;
    b->nAlloc = nNew;
  }
  return TDE_OK;
}

/* Which data-key versions a header region lists (FNV-1a over the current
** version and the sorted set) and, for version 3, its layout (format
** version, upgrade cursor), without any key.  0 if it does not parse. */
static uint32_t tdeKeySig(const uint8_t *aRegion){
  TdeHeader *h = sqlite3_malloc(sizeof(TdeHeader));
  uint32_t sig = 2166136261u, aV[32];
  int nV = 0, iSlot = 0;
  if( !h ) return 0;
  if( tdeHeaderPick(aRegion, TDE_HEADER_BYTES, h, &iSlot)!=TDE_OK ){ sqlite3_free(h); return 0; }
  for(int i=0; i<h->nEntry && nV<32; i++){
    int k = 0;
    while( k<nV && aV[k]!=h->aEntry[i].version ) k++;
    if( k==nV ) aV[nV++] = h->aEntry[i].version;
  }
  for(int i=1; i<nV; i++){            /* insertion sort: a handful of versions */
    uint32_t v = aV[i];
    int k = i-1;
    while( k>=0 && aV[k]>v ){ aV[k+1] = aV[k]; k--; }
    aV[k+1] = v;
  }
  sig = (sig ^ h->curVersion) * 16777619u;
  for(int i=0; i<nV; i++) sig = (sig ^ aV[i]) * 16777619u;
  if( h->version>=TDE_FORMAT_V3 ){
    /* The layout too (docs/FORMAT.md "Format version 3: Standby"): an
    ** upgrade moves pages outside the WAL, as a rekey rewrites them. */
    sig = (sig ^ h->version) * 16777619u;
    sig = (sig ^ (uint32_t)h->upgradeCursor) * 16777619u;
    sig = (sig ^ (uint32_t)(h->upgradeCursor>>32)) * 16777619u;
  }
  sqlite3_free(h);
  return sig ? sig : 1;
}

/* Header region of the database, if it changed since the spool's last.
** *pbRekey: its data-key versions changed (a rekey began or ended). */
static int capHeader(TdeSpool *s, const TdeRawSrc *pHdrSrc, CapBuf *b, int *pbHdr, uint8_t *aHash,
                     uint32_t *pKeySig, int *pbRekey){
  int bShort, rc;
  *pbHdr = 0;
  *pbRekey = 0;
  memcpy(aHash, s->pos.aHdrHash, 32);
  *pKeySig = s->pos.keySig;
  if( !pHdrSrc ) return TDE_OK;
  rc = capReserve(b, TDE_HEADER_BYTES);
  if( rc ) return rc;
  rc = tdeRawRead(pHdrSrc, b->a + b->n, TDE_HEADER_BYTES, 0, &bShort);
  if( rc || bShort ) return rc;
  tdeSha256(b->a + b->n, TDE_HEADER_BYTES, aHash);
  if( memcmp(aHash, s->pos.aHdrHash, 32)!=0 ){
    *pKeySig = tdeKeySig(b->a + b->n);
    *pbRekey = s->pos.keySig!=0 && *pKeySig!=s->pos.keySig;
    b->n += TDE_HEADER_BYTES;
    *pbHdr = 1;
  }
  return TDE_OK;
}

/* A GAP record after the spool's position, for WAL generation aSalt,
** carrying the position's header hash and key signature (callers set
** the frame fields and flags, or another hash). */
static void capGapInit(const TdeSpool *s, TdeRec *g, const uint8_t *aSalt, uint32_t nCkpt,
                       uint32_t pgsz, uint64_t tNow){
  memset(g, 0, sizeof(*g));
  g->seq = s->pos.seq + 1;
  g->kind = TDE_REC_GAP;
  memcpy(g->aSalt, aSalt, 8);
  g->nCkpt = nCkpt;
  g->pgsz = pgsz;
  g->tCapture = tNow;
  memcpy(g->aHdrHash, s->pos.aHdrHash, 32);
  g->keySig = s->pos.keySig;
}

/* The GAP that says the primary lost commits (flag REWIND): nLost frames
** at most, the capture position then iEnd of generation aSalt. */
static int capLostCommits(TdeSpool *s, const uint8_t *aSalt, uint32_t nCkpt, uint32_t pgsz,
                          uint32_t iEnd, uint32_t nLost, uint64_t tNow){
  TdeRec g;
  capGapInit(s, &g, aSalt, nCkpt, pgsz, tNow);
  g.iLast = iEnd;
  g.flags = TDE_RECF_REWIND;
  g.iFirst = nLost;
  tdeLog(TDE_LOG_WARNING, "%s: the WAL ends at frame %u but frames up to %u were captured%s: "
         "the primary lost commits; standbys behind sequence %llu need a base copy", s->zPath, iEnd,
         s->pos.iFrame, iEnd>=s->pos.iFrame ? ", and it holds other frames there" : "",
         (unsigned long long)g.seq);
  return tdeSpoolAppend(s, &g, 0);
}

/* One capture pass (tdeSpoolCapture): the WAL generation read, the frames
** to capture, the transaction being gathered and the header region that
** goes with it. */
typedef struct Capture {
  TdeSpool *s;
  const TdeRawSrc *pWal;
  uint64_t tNow;
  int *pnNew;                 /* records appended so far */
  int bWal;                   /* the WAL has a valid header */
  uint8_t aSalt[8];           /* its generation */
  uint32_t pgsz, nCkpt;
  uint32_t iStart, iEnd;      /* frames to capture (iStart 0: none) */
  CapBuf b;                   /* the transaction's frames (header region first) */
  int bHdr;                   /* b starts with a changed header region */
  uint8_t aHash[32];          /* the header region's hash */
  uint32_t keySig;
  int bRekey;                 /* the data-key versions changed */
} Capture;

static int capAppend(Capture *c, TdeRec *r, const uint8_t *aPayload){
  int rc = tdeSpoolAppend(c->s, r, aPayload);
  if( rc==TDE_OK ) (*c->pnNew)++;
  return rc;
}

/* The WAL header: its page size, generation and checkpoint count. */
static int capWalHeader(Capture *c){
  uint8_t aWalHdr[TDE_WAL_HDR];
  int bShort = 0, rc;
  if( !c->pWal ) return TDE_OK;
  rc = tdeRawRead(c->pWal, aWalHdr, TDE_WAL_HDR, 0, &bShort);
  if( rc ) return rc;
  c->pgsz = tdeGet32(aWalHdr+8);
  c->bWal = !bShort && c->pgsz>=512 && c->pgsz<=65536 && (c->pgsz & (c->pgsz-1))==0;
  if( c->bWal ){
    memcpy(c->aSalt, aWalHdr+16, 8);
    c->nCkpt = tdeGet32(aWalHdr+12);
  }
  return TDE_OK;
}

static sqlite3_int64 capFrameOffset(const Capture *c, uint32_t iFrame){
  return TDE_WAL_HDR + (sqlite3_int64)(iFrame-1)*(TDE_FRAME_HDR + c->pgsz);
}

/* The first frame to capture from this generation. */
static int capFirstFrame(Capture *c){
  TdeSpool *s = c->s;
  if( memcmp(c->aSalt, s->pos.aSalt, 8)==0 ){
    /* The same generation, even one recorded as ended: a WAL deletion
    ** that a crash undid brings it back, and SQLite appends to it. */
    c->iStart = s->pos.iFrame + 1;
  }else if( s->pos.bClosed ){
    c->iStart = 1;                 /* the previous generation ended: a new one */
  }else{
    /* Another generation although the last one was never closed: its
    ** frames were discarded without being captured (a WAL deleted or
    ** rewritten by something other than the tde VFS). */
    TdeRec g;
    int rc;
    capGapInit(s, &g, c->aSalt, c->nCkpt, c->pgsz, c->tNow);
    tdeLog(TDE_LOG_WARNING, "%s: WAL frames were discarded before they were captured; "
           "standbys behind sequence %llu need a base copy", s->zPath, (unsigned long long)g.seq);
    rc = capAppend(c, &g, 0);
    if( rc ) return rc;
    c->iStart = 1;
  }
  return TDE_OK;
}

/* *pbRewound: the same generation, but the WAL no longer holds the very
** frame the capture ended at.  A primary that lost commits (a power loss
** with synchronous=NORMAL) and then wrote past the old end again has
** another frame there, whatever the WAL index says: capturing on from the
** old position would splice the tail of a new history onto the old one. */
static int capCheckLastFrame(const Capture *c, int *pbRewound, int *pbSame){
  const TdeSpool *s = c->s;
  uint8_t aFh[TDE_FRAME_HDR];
  int bS = 1, rc;
  *pbRewound = *pbSame = 0;
  if( !(c->iStart>1 && c->iStart==s->pos.iFrame+1 && s->pos.bLastFh==1) ) return TDE_OK;
  rc = tdeRawRead(c->pWal, aFh, TDE_FRAME_HDR, capFrameOffset(c, c->iStart-1), &bS);
  if( rc ) return rc;
  if( !bS && memcmp(aFh, s->pos.aLastFh, TDE_FRAME_HDR)!=0 ) *pbRewound = 1;
  if( !bS && !*pbRewound ) *pbSame = 1;
  return TDE_OK;
}

/* The last committed frame: the WAL index's, or with no WAL index of this
** generation to ask, the last commit frame of this generation.  (An index
** of the next generation: a restart whose writer died before it wrote the
** new WAL header.) */
static int capLastFrame(Capture *c, const TdeWalEnd *aEnd, int nEnd, int bSame){
  uint8_t aFh[TDE_FRAME_HDR];
  int bMovedOn = 0;
  for(int k=0; k<nEnd; k++){
    if( aEnd[k].bKnown && memcmp(aEnd[k].aSalt, c->aSalt, 8)==0 ){
      c->iEnd = aEnd[k].mxFrame;
      return TDE_OK;
    }
    if( aEnd[k].bKnown ) bMovedOn = 1;
  }
  /* An index of another generation restarted the WAL, which SQLite does
  ** only once every frame was copied to the database: nothing captured
  ** from this one was lost, whatever remains of it in the file.  Nor was
  ** it when the frame the capture ended at is still there, unchanged
  ** (bSame): the scan below then only looks for commits after it. */
  c->iEnd = (bMovedOn || bSame) && c->iStart>0 ? c->iStart - 1 : 0;
  for(uint32_t i=c->iStart;; i++){
    sqlite3_int64 off = capFrameOffset(c, i);
    uint8_t aLast;
    int bS, rc;
    rc = tdeRawRead(c->pWal, aFh, TDE_FRAME_HDR, off, &bS);
    if( rc ) return rc;
    if( bS || memcmp(aFh+8, c->aSalt, 8)!=0 ) break;
    rc = tdeRawRead(c->pWal, &aLast, 1, off + TDE_FRAME_HDR + c->pgsz - 1, &bS);
    if( rc ) return rc;
    if( bS ) break;
    if( tdeGet32(aFh+4)!=0 ) c->iEnd = i;
  }
  return TDE_OK;
}

/* Which frames of the WAL to capture (c->iStart..c->iEnd), after the
** records that say frames were discarded or commits lost. */
static int capLocateFrames(Capture *c, const TdeWalEnd *aEnd, int nEnd){
  int bRewound = 0, bSame = 0, rc;
  if( !c->bWal ) return TDE_OK;
  rc = capFirstFrame(c);
  if( rc==TDE_OK ) rc = capCheckLastFrame(c, &bRewound, &bSame);
  if( rc==TDE_OK ) rc = capLastFrame(c, aEnd, nEnd, bSame);
  if( rc ) return rc;
  if( c->iEnd+1<c->iStart || bRewound ){
    /* The WAL ends before what was captured from this very generation,
    ** or holds other frames where the capture ended: the primary lost
    ** commits (a power loss with synchronous=NORMAL), and frames after
    ** the loss are, or will be, written again with other content.
    ** Standbys must start over from a base copy, which holds the WAL
    ** up to iEnd; the capture goes on after it. */
    rc = capLostCommits(c->s, c->aSalt, c->nCkpt, c->pgsz, c->iEnd,
                        bRewound ? c->s->pos.iFrame : c->iStart - 1 - c->iEnd, c->tNow);
    if( rc ) return rc;
    (*c->pnNew)++;
    c->iStart = c->iEnd + 1;
  }
  return TDE_OK;
}

/* A transaction too large for a record (no reader would take it): frame i
** is skipped; at its commit frame a GAP goes instead, so standbys take a
** base copy and the records after it still ship.  *pbSkip: still inside
** the transaction. */
static int capSkipFrame(Capture *c, uint32_t i, uint32_t nMax, uint32_t *piFirst, int *pbSkip){
  uint8_t aFh[TDE_FRAME_HDR];
  int bShort = 0, rc;
  if( !*pbSkip ){
    tdeLog(TDE_LOG_WARNING, "%s: the transaction from WAL frame %u is larger than a record may be "
           "(%u bytes): standbys will take a base copy", c->s->zPath, *piFirst, nMax);
  }
  *pbSkip = 1;
  c->b.n = 0;
  c->bHdr = 0;               /* a header change goes with the GAP (its hash) */
  rc = tdeRawRead(c->pWal, aFh, TDE_FRAME_HDR, capFrameOffset(c, i), &bShort);
  if( rc ) return rc;
  if( bShort || memcmp(aFh+8, c->aSalt, 8)!=0 ){
    return tdeErr(TDE_FORMAT, "WAL frame %u (of %u committed) is missing or of another generation", i, c->iEnd);
  }
  if( tdeGet32(aFh+4)!=0 ){
    TdeRec g;
    capGapInit(c->s, &g, c->aSalt, c->nCkpt, c->pgsz, c->tNow);
    g.iFirst = *piFirst;
    g.iLast = i;
    memcpy(g.aHdrHash, c->aHash, 32);
    g.keySig = c->keySig;
    rc = capAppend(c, &g, 0);
    if( rc ) return rc;
    *pbSkip = 0;
    *piFirst = i + 1;
  }
  return TDE_OK;
}

/* Frame i into the transaction being gathered; at a commit frame, the
** transaction (iFirst..i, the changed header region first) is a record. */
static int capTakeFrame(Capture *c, uint32_t i, uint32_t *piFirst){
  uint8_t *f;
  int bShort = 0, rc;
  rc = capReserve(&c->b, TDE_FRAME_HDR + c->pgsz);
  if( rc ) return rc;
  f = c->b.a + c->b.n;
  rc = tdeRawRead(c->pWal, f, (int)(TDE_FRAME_HDR + c->pgsz), capFrameOffset(c, i), &bShort);
  if( rc ) return rc;
  if( bShort || memcmp(f+8, c->aSalt, 8)!=0 ){
    char zA[17], zB[17];
    tdeHex(f+8, 8, zA);
    tdeHex(c->aSalt, 8, zB);
    return tdeErr(TDE_FORMAT, "WAL frame %u (of %u committed, from %u) is missing or of another generation "
                  "(short %d, salts %s, WAL header %s, page %u, commit %u)", i, c->iEnd, c->iStart, bShort, zA,
                  zB, tdeGet32(f), tdeGet32(f+4));
  }
  c->b.n += TDE_FRAME_HDR + c->pgsz;
  if( tdeGet32(f+4)!=0 ){
    TdeRec r;
    memset(&r, 0, sizeof(r));
    r.seq = c->s->pos.seq + 1;
    r.kind = TDE_REC_TXN;
    r.flags = c->bHdr ? TDE_RECF_HEADER : 0;
    r.pgsz = c->pgsz;
    memcpy(r.aSalt, c->aSalt, 8);
    r.nCkpt = c->nCkpt;
    r.iFirst = *piFirst;
    r.iLast = i;
    r.nFrame = i - *piFirst + 1;
    r.tCapture = c->tNow;
    memcpy(r.aHdrHash, c->aHash, 32);
    r.keySig = c->keySig;
    r.nPayload = (uint32_t)c->b.n;
    rc = capAppend(c, &r, c->b.a);
    if( rc ) return rc;
    c->b.n = 0;
    c->bHdr = 0;
    *piFirst = i + 1;
  }
  return TDE_OK;
}

/* Every committed frame from c->iStart to c->iEnd, as records. */
static int capFrames(Capture *c){
  uint32_t nMax = tdeShipMaxRecord(), iFirst = c->iStart;
  int bSkip = 0, rc = TDE_OK;
  for(uint32_t i=c->iStart; rc==TDE_OK && c->iStart && i<=c->iEnd; i++){
    if( bSkip || c->b.n + TDE_FRAME_HDR + c->pgsz > nMax ){
      rc = capSkipFrame(c, i, nMax, &iFirst, &bSkip);
    }else{
      rc = capTakeFrame(c, i, &iFirst);
    }
  }
  return rc;
}

/* The header region changed (rotation, rekey) with no frame to carry it:
** a transaction of its own. */
static int capHeaderAlone(Capture *c){
  TdeSpool *s = c->s;
  TdeRec r;
  memset(&r, 0, sizeof(r));
  r.seq = s->pos.seq + 1;
  r.kind = TDE_REC_TXN;
  r.flags = TDE_RECF_HEADER;
  r.pgsz = 0;
  memcpy(r.aSalt, s->pos.aSalt, 8);
  r.nCkpt = s->pos.nCkpt;
  r.iFirst = r.iLast = s->pos.iFrame;
  r.tCapture = c->tNow;
  memcpy(r.aHdrHash, c->aHash, 32);
  r.keySig = c->keySig;
  r.nPayload = TDE_HEADER_BYTES;
  if( s->pos.bClosed ) r.flags |= TDE_RECF_CLOSED;
  return capAppend(c, &r, c->b.a);
}

/* A rekey began or ended, or the layout changed (an upgrade to version 3
** or a step of its move): both rewrite pages in the database file
** directly, never through the WAL, so standbys must take a base copy
** rather than miss them (or apply pages at the old layout's places). */
static int capRekeyGap(Capture *c){
  TdeSpool *s = c->s;
  TdeRec g;
  capGapInit(s, &g, s->pos.aSalt, s->pos.nCkpt, 0, c->tNow);
  g.iLast = s->pos.iFrame;
  g.flags = s->pos.bClosed ? TDE_RECF_CLOSED : 0;
  tdeLog(TDE_LOG_INFO, "%s: the data-key versions or the layout changed (rekey, upgrade): standbys take a base copy at "
         "sequence %llu", s->zPath, (unsigned long long)g.seq);
  return capAppend(c, &g, 0);
}

/* The MARK a WAL restart (the new generation, from aNewHdr) or a close
** (the generation ended) leaves. */
static int capMark(Capture *c, int eWhy, const uint8_t *aNewHdr){
  TdeSpool *s = c->s;
  TdeRec m;
  memset(&m, 0, sizeof(m));
  m.kind = TDE_REC_MARK;
  m.tCapture = c->tNow;
  memcpy(m.aHdrHash, s->pos.aHdrHash, 32);
  m.keySig = s->pos.keySig;
  if( eWhy==TDE_CAPTURE_RESTART && aNewHdr ){
    memcpy(m.aSalt, aNewHdr+16, 8);
    m.nCkpt = tdeGet32(aNewHdr+12);
    m.pgsz = tdeGet32(aNewHdr+8);
  }else if( eWhy==TDE_CAPTURE_CLOSE && c->bWal && !s->pos.bClosed ){
    m.flags = TDE_RECF_CLOSED;
    memcpy(m.aSalt, c->aSalt, 8);
    m.nCkpt = c->nCkpt;
    m.pgsz = c->pgsz;
    m.iLast = s->pos.iFrame;
  }else{
    return TDE_OK;
  }
  return capAppend(c, &m, 0);
}

int tdeSpoolCapture(TdeSpool *s, const TdeRawSrc *pWal, const TdeWalEnd *aEnd, int nEnd,
                    const TdeRawSrc *pHdrSrc, int eWhy, const uint8_t *aNewHdr, int *pnNew){
  Capture c;
  int rc;
  *pnNew = 0;
  if( !s->pos.bValid ) return TDE_OK;
  memset(&c, 0, sizeof(c));
  c.s = s;
  c.pWal = pWal;
  c.tNow = tdeNowMs();
  c.pnNew = pnNew;

  rc = capWalHeader(&c);
  if( rc==TDE_OK ) rc = capLocateFrames(&c, aEnd, nEnd);
  if( rc ) return rc;
  rc = capHeader(s, pHdrSrc, &c.b, &c.bHdr, c.aHash, &c.keySig, &c.bRekey);
  if( rc==TDE_OK ) rc = capFrames(&c);
  if( rc==TDE_OK && c.bHdr ) rc = capHeaderAlone(&c);
  sqlite3_free(c.b.a);
  if( rc==TDE_OK && c.bRekey ) rc = capRekeyGap(&c);
  if( rc==TDE_OK ) rc = capMark(&c, eWhy, aNewHdr);
  return rc;
}

/* Hash of the last hook failure logged (database and message); 0 after a
** success, so a fault that comes back is logged again. */
static uint32_t shipHookLastFault = 0;

int tdeShipHook(const char *zDb, const TdeRawSrc *pWal, const TdeWalEnd *aEnd, int nEnd,
                const TdeRawSrc *pHdrSrc, int eWhy, const uint8_t *aNewHdr){
  TdeSpool *s = 0;
  char zPath[4200];
  int rc, nNew = 0;
  if( !zDb ) return SQLITE_OK;
  snprintf(zPath, sizeof(zPath), "%s-tdeship", zDb);
  if( access(zPath, F_OK)!=0 ) return SQLITE_OK;     /* not shipped: nothing to do */
  rc = tdeSpoolOpen(zDb, 0, 0, &s);
  if( rc==TDE_NOTFOUND ) return SQLITE_OK;
  if( rc==TDE_OK ) rc = tdeSpoolScan(s, 1);
  if( rc==TDE_OK ) rc = tdeSpoolCapture(s, pWal, aEnd, nEnd, pHdrSrc, eWhy, aNewHdr, &nNew);
  /* No fsync here, in the writer's transaction: the shipper syncs the
  ** spool before it sends anything, and records lost to a power loss
  ** before that were never sent -- the capture then finds the WAL's
  ** generation unknown and records a GAP (a base copy). */
  tdeSpoolClose(s);
  if( rc ){
    /* Never fail the user's write or checkpoint for the standby: the WAL
    ** generation the spool missed shows at the shipper's next capture as
    ** an unclosed generation replaced by another, which it records as a
    ** GAP (standbys take a base copy).  Warn once per cause, not per call. */
    const char *zErr = tde_last_error();
    uint32_t h = 2166136261u;
    for(const char *z=zDb; *z; z++) h = (h ^ (uint8_t)*z) * 16777619u;
    for(const char *z=zErr ? zErr : ""; *z; z++) h = (h ^ (uint8_t)*z) * 16777619u;
    if( h==0 ) h = 1;
    if( __atomic_exchange_n(&shipHookLastFault, h, __ATOMIC_RELAXED)!=h ){
      tdeLog(TDE_LOG_WARNING, "%s: cannot save WAL frames for the standby before the WAL %s: %s; "
             "the write goes on, and standbys will need a base copy (further failures of this kind "
             "are not logged)", zDb, eWhy==TDE_CAPTURE_RESTART ? "restarts" : "is truncated",
             zErr ? zErr : "unknown error");
    }
    tdeErrClear();
    return SQLITE_OK;
  }
  __atomic_store_n(&shipHookLastFault, 0, __ATOMIC_RELAXED);
  return SQLITE_OK;
}

/* ---- apply -------------------------------------------------------------- */

/* SQLite's largest possible page count (SQLITE_MAX_PAGE_COUNT's ceiling). */
#define TDE_PGNO_MAX  0xfffffffeu

int tdeRecValidate(const uint8_t *aRec, const TdeRec *r, uint32_t pgszCopy, uint64_t nCopyPages,
                   const uint8_t *aDbid){
  const uint8_t *p = aRec + TDE_REC_HDR;
  uint64_t limit;
  uint32_t nCommit = 0;
  if( r->kind!=TDE_REC_TXN ){
    if( r->nFrame || (r->flags & TDE_RECF_HEADER) ){
      return tdeErr(TDE_FORMAT, "record %llu: a %s record carries frames or a header region",
                    (unsigned long long)r->seq, r->kind==TDE_REC_GAP ? "GAP" : "MARK");
    }
    return TDE_OK;
  }
  if( r->flags & TDE_RECF_HEADER ){
    TdeHeader *h = sqlite3_malloc(sizeof(TdeHeader));
    int iSlot = 0, rc;
    if( !h ) return TDE_NOMEM;
    rc = tdeHeaderPick(p, TDE_HEADER_BYTES, h, &iSlot);
    if( rc==TDE_OK && memcmp(h->dbid, aDbid, 16)!=0 ) rc = TDE_AUTH;
    sqlite3_free(h);
    tdeErrClear();
    if( rc==TDE_AUTH ){
      return tdeErr(TDE_FORMAT, "record %llu: its header region belongs to another database",
                    (unsigned long long)r->seq);
    }
    if( rc ){
      return tdeErr(TDE_FORMAT, "record %llu: its header region does not parse as an sqlite-tde header",
                    (unsigned long long)r->seq);
    }
    p += TDE_HEADER_BYTES;
  }
  if( r->nFrame==0 ){
    if( !(r->flags & TDE_RECF_HEADER) ){
      return tdeErr(TDE_FORMAT, "record %llu: a transaction with no frame and no header region",
                    (unsigned long long)r->seq);
    }
    return TDE_OK;
  }
  if( pgszCopy && r->pgsz!=pgszCopy ){
    return tdeErr(TDE_FORMAT, "record %llu: page size %u, but the copy's page size is %u",
                  (unsigned long long)r->seq, r->pgsz, pgszCopy);
  }
  /* The commit frame is the last and only the last. */
  {
    const uint8_t *f = p;
    for(uint32_t i=0; i<r->nFrame; i++, f += TDE_FRAME_HDR + r->pgsz){
      int bLast = i+1==r->nFrame;
      if( (tdeGet32(f+4)!=0)!=bLast ){
        return tdeErr(TDE_FORMAT, "record %llu: frame %u of %u %s a commit frame",
                      (unsigned long long)r->seq, i+1, r->nFrame, bLast ? "is not" : "is");
      }
      if( memcmp(f+8, r->aSalt, 8)!=0 ){
        return tdeErr(TDE_FORMAT, "record %llu: frame %u has salts other than the record's",
                      (unsigned long long)r->seq, i+1);
      }
    }
    nCommit = tdeGet32(f - (TDE_FRAME_HDR + r->pgsz) + 4);
  }
  /* The database grows by at most the pages the transaction writes (plus
  ** the lock-byte page, which is never written); a frame may hold a page
  ** beyond the final size (a spilled page of a transaction that then
  ** shrank the database), never beyond what the database held during the
  ** transaction. */
  limit = nCopyPages + r->nFrame + 1;
  if( limit>TDE_PGNO_MAX ) limit = TDE_PGNO_MAX;
  if( nCommit==0 || nCommit>limit ){
    return tdeErr(TDE_FORMAT, "record %llu: database size %u pages at commit is out of range "
                  "(the copy has %llu pages, the record %u frames)", (unsigned long long)r->seq, nCommit,
                  (unsigned long long)nCopyPages, r->nFrame);
  }
  {
    const uint8_t *f = p;
    for(uint32_t i=0; i<r->nFrame; i++, f += TDE_FRAME_HDR + r->pgsz){
      uint32_t pgno = tdeGet32(f);
      if( pgno==0 || pgno>limit ){
        return tdeErr(TDE_FORMAT, "record %llu: frame %u has page number %u, out of range 1..%llu",
                      (unsigned long long)r->seq, i+1, pgno, (unsigned long long)limit);
      }
    }
  }
  return TDE_OK;
}

int tdeCopyLayout(int fd, uint32_t pgsz, TdeLayout *pL){
  uint8_t *aRegion = sqlite3_malloc(TDE_HEADER_BYTES);
  TdeRawSrc src = { 0, fd };
  int bShort = 1, rc;
  if( !aRegion ) return TDE_NOMEM;
  rc = tdeRawRead(&src, aRegion, TDE_HEADER_BYTES, 0, &bShort);
  if( rc==TDE_OK && bShort ) rc = tdeErr(TDE_FORMAT, "the copy has no whole header region");
  if( rc==TDE_OK ) rc = tdeHeaderLayout(aRegion, TDE_HEADER_BYTES, pgsz, pL);
  sqlite3_free(aRegion);
  return rc;
}

int tdeCopyBytes(const TdeLayout *L, int64_t nPhys, const TdeRec *r, uint64_t *pnBytes){
  TdeLayout x = *L;
  if( x.pgsz==0 && r->kind==TDE_REC_TXN && r->nFrame>0 ){
    x.pgsz = r->pgsz;
    if( !tdeLayoutWhole(&x, nPhys) ){
      return tdeErr(TDE_FORMAT, "record %llu: page size %u does not fit the copy's %lld bytes "
                    "(format version %d)", (unsigned long long)r->seq, r->pgsz, (long long)nPhys, x.version);
    }
  }
  *pnBytes = (uint64_t)tdeLayoutSqliteSize(&x, nPhys);
  return TDE_OK;
}

int tdeApplyRecord(int fd, const uint8_t *aRec, const TdeRec *r){
  const uint8_t *p = aRec + TDE_REC_HDR;
  TdeLayout L;                /* the copy's: docs/FORMAT.md "Format version 3: Standby" */
  uint32_t nTrunc = 0;
  int rc;
  if( r->kind!=TDE_REC_TXN ) return TDE_OK;
  if( r->flags & TDE_RECF_HEADER ){
    rc = tdeHeaderLayout(p, TDE_HEADER_BYTES, r->pgsz, &L);
  }else{
    rc = tdeCopyLayout(fd, r->pgsz, &L);
  }
  if( rc ) return rc;
  if( r->flags & TDE_RECF_HEADER ){
    rc = writeAll(fd, p, TDE_HEADER_BYTES, 0);
    if( rc ) return rc;
    p += TDE_HEADER_BYTES;
  }
  for(uint32_t i=0; i<r->nFrame; i++, p += TDE_FRAME_HDR + r->pgsz){
    uint32_t pgno = tdeGet32(p);
    if( pgno==0 ) return tdeErr(TDE_FORMAT, "frame with page number 0");
    rc = writeAll(fd, p + TDE_FRAME_HDR, r->pgsz, (off_t)tdeLayoutPageOff(&L, pgno));
    if( rc ) return rc;
    if( tdeGet32(p+4) ) nTrunc = tdeGet32(p+4);
  }
  if( nTrunc && ftruncate(fd, (off_t)tdeLayoutPhysSize(&L, (int64_t)nTrunc*r->pgsz))!=0 ){
    return tdeErr(TDE_IO, "truncate failed: %s", strerror(errno));
  }
  return TDE_OK;
}
