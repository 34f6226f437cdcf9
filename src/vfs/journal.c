/*
** Rollback journals under the tde shim (docs/FORMAT.md "Rollback
** journal").  The journal keeps SQLite's layout and size: a header sector
** at offset 0 (and at later sector boundaries after a journal sync in the
** middle of a transaction), then records of (page number, page image,
** checksum).  SQLite writes each record once and rewrites only headers.
**
**   header sector at h (H bytes): slot 0 (112) | slot 1 (112) | zeros
**   record at r = h + H + k*(P+8):
**     pgno (4, plain) | page sealed in place, trailer in its reserved
**     bytes (P) | first 4 bytes of the record's GCM tag (4)
**
** SQLite's checksum is never stored: it is recomputed on read from the
** authenticated page and the authenticated header's cksumInit.  A record
** is written with one pwrite (the page number and page are held until the
** checksum arrives); nothing is read before it is written.  Header
** rewrites go to the slot not holding the newest version, except those
** that invalidate the magic, which zero both slots.
**
** A journal left by the previous format (two 576-byte slots per 512-byte
** block) is read with the old rules until the first write or truncation.
**
** Format version 2 (docs/FORMAT.md "Rollback journal, version 2"): every
** header slot records the page 1 the journal was started from (a tag
** prefix T) and a random binding id J, which the main handle puts into
** the IV of every page it seals while the journal exists.  A hot journal
** read by another handle is allowed only if page 1 on disk is the one
** recorded or carries J; a playback handle also checks, before SQLite
** applies anything, every record a synced header counts.  Neither costs
** a write or an fsync.
**
** Keys: the database's data key (another process may have to play a hot
** journal back), in the sealing session of the main file's handle (jKeys).
** Must never: return bytes that did not authenticate (torn records read as
** page number 0, which ends SQLite's playback); store a checksum SQLite
** computed from plaintext.
*/
#include "vfs/vfs_int.h"

#define JHDR        28                                   /* SQLite's header bytes */
#define JSLOT_PLAIN 64                                   /* seq, header, id, binding */
#define JSLOT       (JSLOT_PLAIN + TDE_TRAILER_SIZE)     /* stored slot: 112 */
#define JSLOTS      (2 * JSLOT)
/* The smallest header sector (SQLite's sector size) that holds both slots:
** SQLite puts its first record right after the header sector, so a smaller
** one leaves no room for the second slot, and a single slot could not tell
** a torn record-count rewrite from a destroyed hot header. */
#define JSECTOR_MIN 256
#define JID_BYTES   16
#define JH_AAD      (2 + TDE_DBID_BYTES + 8 + 1)
#define JR_AAD      (2 + TDE_DBID_BYTES + JID_BYTES + 8 + 4 + 4)
#define JNREC_ALL   0xffffffffu                          /* nRec: count from the file size */
/* Binding fields in a slot's plaintext (version 2): T (7), flags (1), J (4). */
#define JB_OFF      (8 + JHDR + JID_BYTES)
#define JB_TAG      7
#define JB_BOUND    0x01                                 /* flags: a version-2 journal */
#define JB_SYNCED   0x02                                 /* flags: the counted records were synced first */

/* The previous format (read only, at the end of this file). */
#define OBLOCK 512
#define OPLAIN (16 + OBLOCK)
#define OSLOT  (OPLAIN + TDE_TRAILER_SIZE)
#define OPAIR  (2 * OSLOT)
#define OAAD   (1 + TDE_DBID_BYTES + 8)

static const uint8_t aJMagic[8] = { 0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7 };

/* Journal formats. */
#define JF_UNKNOWN 0
#define JF_NEW     1
#define JF_OLD     2   /* previous format: read only */

/* A decoded header. */
#define JH_NONE    0   /* no valid slot: reads as zeros */
#define JH_OK      1
#define JH_DAMAGED 2   /* newest valid version not hot, other slot destroyed */
typedef struct JHdr {
  sqlite3_int64 iOff;
  int eState;
  int iSlot;           /* slot holding the newest version, -1 if none */
  int bZero;           /* both slots are zero bytes */
  uint64_t seq;
  uint8_t a[JHDR];     /* SQLite's header bytes (zero if JH_NONE) */
  uint8_t flags;       /* binding flags of the newest version (JB_*) */
  uint32_t bindId;     /* J */
  uint8_t aTag[JB_TAG];/* T */
} JHdr;

/* Record states in the read cache. */
#define JR_OK      1   /* authentic */
#define JR_TORN    2   /* failed, may be torn: reads as page number 0 */
#define JR_BADCK   3   /* authentic page, checksum field torn */

struct TdeJrnl {
  int eFmt;
  int bId;                     /* aId known (from the header at 0) */
  uint8_t aId[JID_BYTES];      /* journal id */
  uint32_t nSector, pgsz;      /* H and P from the header at 0 */
  JHdr *aSeg;                  /* headers in file order; aSeg[0] at 0 */
  int nSeg, nSegAlloc;
  int bOwn;                    /* this handle wrote the header at 0 */
  sqlite3_int64 iOwnEnd;       /* ... and every byte below this offset */
  int ePend;                   /* 0, 1: page number held, 2: record sealed in aBuf */
  sqlite3_int64 iPend;         /* record offset of what is held */
  uint32_t pendCk;             /* checksum SQLite must send for it */
  sqlite3_int64 iCache;        /* record decoded in aBuf (-1 none) */
  int eCache;
  /* The super-journal record (multi-database commit), as SQLite sees it:
  ** lock-page number || name || length || checksum || magic. */
  int eSup;                    /* 0 not looked for, 1 none, 2 aSup valid, 3 being written */
  int nSupName;                /* name bytes; -1 while the name is awaited */
  int iSupStage;               /* writing: parts received (marker, name, length, checksum) */
  sqlite3_int64 iSup;          /* its offset */
  uint8_t *aSup;               /* nSupName + 20 bytes, heap */
  /* Version-2 binding (docs/FORMAT.md "Rollback journal, version 2"). */
  int bBound;                  /* the journal carries T and J */
  uint32_t bindId;             /* J */
  uint8_t aTag[JB_TAG];        /* T */
  int bDirty;                  /* a record written since this handle's last sync */
  int eHot;                    /* 0 not checked, 1 allowed, 2 refused */
  int bBindSet;                /* this journal installed J in its main handle */
};
#define JHOT_ALLOWED 1
#define JHOT_REFUSED 2

static const char *jName(TdeFile *p){ return p->zName ? p->zName : "(journal)"; }

/*
** The file whose ciphers seal and open journal data: the main database's
** handle.  Its sealing session outlives the journal (SQLite opens a new
** journal for every transaction in DELETE mode, and a new session costs a
** subkey derivation); SQLite uses a main file and its journal under one
** connection's lock, never at once, and one session's counter gives every
** seal its own IV, pages and journal data alike.
*/
static TdeFile *jKeys(TdeFile *p){ return p->pMain ? p->pMain : p; }

static uint32_t jCksum(uint32_t init, const uint8_t *aPage, uint32_t pgsz){
  uint32_t ck = init;
  int i = (int)pgsz - 200;
  while( i>0 ){ ck += aPage[i]; i -= 200; }
  return ck;
}

static int jIsHot(const uint8_t *a){ return memcmp(a, aJMagic, 8)==0; }

/* A tdeOpen failure that is not "does not authenticate" (no memory, an
** I/O error re-reading the header, OpenSSL failing): the SQLite error to
** return instead of treating the bytes as torn or absent; 0 otherwise. */
static int jOpenFailRc(int trc){
  if( trc==TDE_NOMEM ) return SQLITE_NOMEM;
  if( trc==TDE_IO || trc==TDE_CRYPTO ) return SQLITE_IOERR_READ;
  return 0;
}

static void jHdrAad(TdeFile *p, sqlite3_int64 h, int iSlot, uint8_t *aad){
  aad[0] = 'J'; aad[1] = 'H';
  memcpy(aad+2, p->dbid, TDE_DBID_BYTES);
  tdePut64(aad+2+TDE_DBID_BYTES, (uint64_t)h);
  aad[2+TDE_DBID_BYTES+8] = (uint8_t)iSlot;
}

static void jRecAad(TdeFile *p, const uint8_t *aId, sqlite3_int64 r, uint32_t pgno,
                    uint32_t pgsz, uint8_t *aad){
  aad[0] = 'J'; aad[1] = 'R';
  memcpy(aad+2, p->dbid, TDE_DBID_BYTES);
  memcpy(aad+2+TDE_DBID_BYTES, aId, JID_BYTES);
  tdePut64(aad+2+TDE_DBID_BYTES+JID_BYTES, (uint64_t)r);
  tdePut32(aad+10+TDE_DBID_BYTES+JID_BYTES, pgno);
  tdePut32(aad+14+TDE_DBID_BYTES+JID_BYTES, pgsz);
}

static int jAllZero(const uint8_t *a, size_t n){
  uint8_t acc = 0;
  for(size_t i=0; i<n; i++) acc |= a[i];
  return acc==0;
}

static int jState(TdeFile *p, struct TdeJrnl **pj){
  if( !p->pJrnl ){
    p->pJrnl = sqlite3_malloc(sizeof(*p->pJrnl));
    if( !p->pJrnl ) return SQLITE_NOMEM;
    memset(p->pJrnl, 0, sizeof(*p->pJrnl));
    p->pJrnl->iCache = -1;
  }
  *pj = p->pJrnl;
  return tdeScratch(p);
}

/* Forget every header at or after offset h. */
static void jSegCut(struct TdeJrnl *j, sqlite3_int64 h){
  while( j->nSeg>0 && j->aSeg[j->nSeg-1].iOff>=h ) j->nSeg--;
  if( j->nSeg==0 ){ j->bId = 0; j->nSector = j->pgsz = 0; }
}

static int jSegPush(struct TdeJrnl *j, const JHdr *h){
  if( j->nSeg==j->nSegAlloc ){
    int n = j->nSegAlloc ? j->nSegAlloc*2 : 8;
    JHdr *a = sqlite3_realloc64(j->aSeg, sizeof(JHdr)*(sqlite3_uint64)n);
    if( !a ) return SQLITE_NOMEM;
    j->aSeg = a;
    j->nSegAlloc = n;
  }
  j->aSeg[j->nSeg++] = *h;
  return SQLITE_OK;
}

static int jValidGeometry(uint32_t nSector, uint32_t pgsz){
  return nSector>=JSECTOR_MIN && nSector<=65536 && (nSector & (nSector-1))==0 && tdeValidPgsz(pgsz);
}

/*
** Decode the header at h from disk into *pH.  For h > 0 the journal id of
** the header at 0 must be known and is required.  At h = 0 a valid header
** sets the journal id and geometry.
*/
static int jHdrLoad(TdeFile *p, struct TdeJrnl *j, sqlite3_int64 h, JHdr *pH){
  uint8_t *aRaw = p->aBuf + TDE_MAX_PAGE;            /* JSLOTS bytes */
  uint8_t *aPlain = aRaw + JSLOTS;                    /* JSLOT_PLAIN bytes */
  uint8_t aad[JH_AAD];
  uint8_t aId[JID_BYTES] = { 0 };
  int abBad[2] = { 0, 0 };
  int bShort, rc, trc;

  memset(pH, 0, sizeof(*pH));
  pH->iOff = h;
  pH->iSlot = -1;
  j->iCache = -1;
  rc = tdeRealRead(p, aRaw, JSLOTS, h, &bShort);
  if( rc ) return rc;
  pH->bZero = jAllZero(aRaw, JSLOTS);
  for(int s=0; s<2; s++){
    const uint8_t *aSlot = aRaw + s*JSLOT;
    uint64_t seq;
    if( jAllZero(aSlot, JSLOT) ) continue;
    jHdrAad(p, h, s, aad);
    trc = tdeOpen(jKeys(p), aad, sizeof(aad), aSlot, JSLOT_PLAIN, aSlot+JSLOT_PLAIN, aPlain);
    if( jOpenFailRc(trc) ){
      tdeWipe(aPlain, JSLOT_PLAIN);
      return jOpenFailRc(trc);
    }
    if( trc!=TDE_OK
     || (h>0 && (!j->bId || !tdeCtEqual(aPlain+8+JHDR, j->aId, JID_BYTES))) ){
      abBad[s] = 1;
      continue;
    }
    seq = tdeGet64(aPlain);
    if( pH->iSlot<0 || seq>pH->seq ){
      pH->iSlot = s;
      pH->seq = seq;
      memcpy(pH->a, aPlain+8, JHDR);
      memcpy(aId, aPlain+8+JHDR, JID_BYTES);
      memcpy(pH->aTag, aPlain+JB_OFF, JB_TAG);
      pH->flags = aPlain[JB_OFF+JB_TAG];
      pH->bindId = tdeGet32(aPlain+JB_OFF+JB_TAG+1);
    }
  }
  tdeWipe(aPlain, JSLOT_PLAIN);
  if( pH->iSlot<0 ){
    memset(pH->a, 0, JHDR);
    pH->eState = JH_NONE;
    return SQLITE_OK;
  }
  pH->eState = JH_OK;
  if( !jIsHot(pH->a) && abBad[1-pH->iSlot] ){
    /* A hot version may have been destroyed: never read this as "no
    ** journal" silently. */
    pH->eState = JH_DAMAGED;
    p->nAuthFail++;
    tdeLog(TDE_LOG_ERROR, "%s: journal header at offset %lld is damaged (one slot fails "
           "authentication); if the database cannot be opened, this journal was tampered "
           "with or torn while its header was rewritten", jName(p), (long long)h);
    return SQLITE_OK;
  }
  if( h==0 ){
    uint32_t nSector = tdeGet32(pH->a+20), pgsz = tdeGet32(pH->a+24);
    if( !jValidGeometry(nSector, pgsz) ){
      pH->eState = JH_DAMAGED;
      tdeLog(TDE_LOG_ERROR, "%s: journal header names sector size %u and page size %u",
             jName(p), nSector, pgsz);
      return SQLITE_OK;
    }
    memcpy(j->aId, aId, JID_BYTES);
    j->bId = 1;
    j->nSector = nSector;
    j->pgsz = pgsz;
    if( !j->bOwn ){
      j->bBound = (pH->flags & JB_BOUND)!=0 && pH->bindId!=0;
      j->bindId = pH->bindId;
      memcpy(j->aTag, pH->aTag, JB_TAG);
    }
  }
  return SQLITE_OK;
}

/* The binding fields of a slot being sealed (zero for an unbound journal);
** bSynced: this version counts records synced before it was written. */
static void jSlotBind(const struct TdeJrnl *j, uint8_t *aPlain, int bSynced){
  uint8_t *a = aPlain + JB_OFF;
  memset(a, 0, JSLOT_PLAIN - JB_OFF);
  if( !j->bBound ) return;
  memcpy(a, j->aTag, JB_TAG);
  a[JB_TAG] = (uint8_t)(JB_BOUND | (bSynced ? JB_SYNCED : 0));
  tdePut32(a+JB_TAG+1, j->bindId);
}

/* Install J as the IV bits of every page the main handle seals (0: none). */
static void jBindInstall(TdeFile *p, struct TdeJrnl *j, int bOn){
  if( !p->pMain ) return;
  if( bOn ){
    p->pMain->pDb->jrnlBind = j->bindId;
    j->bBindSet = 1;
  }else if( j->bBindSet ){
    if( p->pMain->pDb->jrnlBind==j->bindId ) p->pMain->pDb->jrnlBind = 0;
    j->bBindSet = 0;
  }
}

/* Make sure the header at 0 is known (aSeg[0]). */
static int jHdr0(TdeFile *p, struct TdeJrnl *j){
  JHdr h;
  int rc;
  if( j->nSeg>0 ) return SQLITE_OK;
  rc = jHdrLoad(p, j, 0, &h);
  if( rc ) return rc;
  return jSegPush(j, &h);
}

/* Offset just past segment i's records, or -1 if it extends to the end of
** the file (not hot, or nRec counted from the file size). */
static sqlite3_int64 jSegNext(const struct TdeJrnl *j, int i){
  const JHdr *h = &j->aSeg[i];
  uint32_t nRec;
  sqlite3_int64 end, H = j->nSector;
  if( h->eState!=JH_OK || !jIsHot(h->a) ) return -1;
  nRec = tdeGet32(h->a+8);
  if( nRec==JNREC_ALL ) return -1;
  end = h->iOff + H + (sqlite3_int64)nRec * (j->pgsz + 8);
  return ((end-1)/H + 1) * H;
}

/*
** Find the segment holding offset iOff: *piSeg (its header is aSeg[i]),
** decoding later headers as SQLite's playback would reach them.  Requires
** a valid header at 0.
*/
static int jSegFind(TdeFile *p, struct TdeJrnl *j, sqlite3_int64 iOff, int *piSeg){
  int i = 0;
  for(;;){
    sqlite3_int64 next = jSegNext(j, i);
    JHdr h;
    int rc;
    if( next<0 || iOff<next ){ *piSeg = i; return SQLITE_OK; }
    if( i+1<j->nSeg && j->aSeg[i+1].iOff==next ){ i++; continue; }
    jSegCut(j, j->aSeg[i].iOff + 1);
    rc = jHdrLoad(p, j, next, &h);
    if( rc ) return rc;
    if( h.eState!=JH_OK ){
      /* No header where SQLite looks next: it stops there; so do we. */
      rc = jSegPush(j, &h);
      if( rc ) return rc;
      *piSeg = i+1;
      return SQLITE_OK;
    }
    rc = jSegPush(j, &h);
    if( rc ) return rc;
    i++;
  }
}

/* ---- the super-journal record ----------------------------------------- */

/* The page number SQLite writes as the marker of the record (its lock page). */
static uint32_t jLockPgno(const struct TdeJrnl *j){
  return 0x40000000u / (j->pgsz ? j->pgsz : 4096) + 1;
}

/* MAC of a stored super-journal record (version, name, length) at iSup. */
static int jSupMac(TdeFile *p, struct TdeJrnl *j, sqlite3_int64 iSup, const uint8_t *aStored,
                   int nName, uint8_t mac[12]){
  uint8_t pre[4+JID_BYTES+8] = { 'J', '1', 'S', 0 };
  uint8_t full[32];
  const uint8_t *ap[2] = { pre, aStored };
  const size_t an[2] = { sizeof(pre), (size_t)nName + 8 };
  const TdeDekVer *d;
  int rc;
  if( !p->pMain || !p->pMain->pDb->pKeys ) return SQLITE_IOERR;
  d = tdeKeysFind(p->pMain->pDb->pKeys, tdeGet32(aStored));
  if( !d || !d->pWalHmac ) return SQLITE_NOTFOUND;
  memcpy(pre+4, j->aId, JID_BYTES);
  tdePut64(pre+4+JID_BYTES, (uint64_t)iSup);
  rc = tdeHmacCompute(d->pWalHmac, ap, an, 2, full);
  memcpy(mac, full, 12);
  tdeWipe(full, sizeof(full));
  return rc ? SQLITE_IOERR : SQLITE_OK;
}

/* Turn the stored record (in aSup) into SQLite's bytes, in place. */
static void jSupLogical(struct TdeJrnl *j){
  uint8_t *a = j->aSup;
  uint32_t ck = 0;
  int n = j->nSupName;
  for(int i=0; i<n; i++) ck += a[4+i];
  tdePut32(a, jLockPgno(j));
  tdePut32(a+8+n, ck);
  memcpy(a+12+n, aJMagic, 8);
}

/* A super-journal write from SQLite (the record being written in parts). */
static int jSupWrite(TdeFile *p, struct TdeJrnl *j, const uint8_t *z, int n, sqlite3_int64 off){
  sqlite3_int64 s = j->iSup;
  int nName = j->nSupName;
  if( j->iSupStage==1 && off==s+4 && n>0 && n<=65536 ){
    j->aSup = sqlite3_malloc(n + 20);
    if( !j->aSup ) return SQLITE_NOMEM;
    memcpy(j->aSup+4, z, (size_t)n);
    j->nSupName = n;
    j->iSupStage = 2;
    return SQLITE_OK;
  }
  if( j->iSupStage==2 && off==s+4+nName && n==4 && tdeGet32(z)==(uint32_t)nName ){
    memcpy(j->aSup+4+nName, z, 4);
    j->iSupStage = 3;
    return SQLITE_OK;
  }
  if( j->iSupStage==3 && off==s+8+nName && n==4 ){
    uint32_t ck = 0;
    for(int i=0; i<nName; i++) ck += j->aSup[4+i];
    if( ck!=tdeGet32(z) ) return SQLITE_IOERR_WRITE;
    j->iSupStage = 4;
    return SQLITE_OK;
  }
  if( j->iSupStage==4 && off==s+12+nName && n==8 && memcmp(z, aJMagic, 8)==0 ){
    int rc, trc;
    TdePageCipher *c = tdeCipherForSeal(jKeys(p), &trc);
    if( !c ) return trc==TDE_NOMEM ? SQLITE_NOMEM : SQLITE_IOERR_WRITE;
    tdePut32(j->aSup, tdePageCipherVersion(c));
    rc = jSupMac(p, j, s, j->aSup, nName, j->aSup+8+nName);
    if( rc ) return SQLITE_IOERR_WRITE;
    rc = p->pReal->pMethods->xWrite(p->pReal, j->aSup, nName+20, s);
    if( rc ) return rc;
    if( s + nName + 20 > j->iOwnEnd ) j->iOwnEnd = s + nName + 20;
    jSupLogical(j);
    j->eSup = 2;
    j->ePend = 0;
    return SQLITE_OK;
  }
  tdeLog(TDE_LOG_ERROR, "%s: unexpected write of %d bytes at %lld inside the super-journal record",
         jName(p), n, (long long)off);
  return SQLITE_IOERR_WRITE;
}

/* Look for a super-journal record at the end of a journal this handle did
** not write: its length field is 16 bytes before the end. */
static int jSupFind(TdeFile *p, struct TdeJrnl *j){
  sqlite3_int64 sz = 0, s;
  uint8_t aTail[16], mac[12];
  uint32_t n;
  int bShort, rc;
  if( j->eSup ) return SQLITE_OK;
  j->eSup = 1;
  rc = p->pReal->pMethods->xFileSize(p->pReal, &sz);
  if( rc ) return rc;
  if( sz < (sqlite3_int64)j->nSector + 21 ) return SQLITE_OK;
  rc = tdeRealRead(p, aTail, 16, sz-16, &bShort);
  if( rc || bShort ) return rc;
  n = tdeGet32(aTail);
  s = sz - 20 - (sqlite3_int64)n;
  if( n==0 || n>65536 || s<(sqlite3_int64)j->nSector ) return SQLITE_OK;
  j->aSup = sqlite3_malloc((int)n + 20);
  if( !j->aSup ) return SQLITE_NOMEM;
  rc = tdeRealRead(p, j->aSup, (int)n + 20, s, &bShort);
  if( rc==SQLITE_OK && !bShort && jSupMac(p, j, s, j->aSup, (int)n, mac)==SQLITE_OK
   && tdeCtEqual(mac, j->aSup+8+n, 12) ){
    j->nSupName = (int)n;
    j->iSup = s;
    jSupLogical(j);
    j->eSup = 2;
    return SQLITE_OK;
  }
  sqlite3_free(j->aSup);
  j->aSup = 0;
  return rc;
}

/*
** A journal of a database of a multi-database commit, opened by SQLite
** with SQLITE_OPEN_SUPER_JOURNAL while it decides whether to delete the
** super-journal (after playing back another database's journal): SQLite
** reads only the super-journal record at the end, and keeps the
** super-journal while a journal still names it.  A journal in SQLite's own
** format (written through another VFS) reads as it is.  A journal of this
** format shows the record in SQLite's format -- its name and length are
** stored as SQLite wrote them, at the same offsets; the checksum and magic
** are recomputed -- and zeros everywhere else.  The name is not
** authenticated here (the journal's database may not be open in this
** process, so its keys may not be at hand): a name only makes SQLite keep
** a super-journal, the safe direction, and the journal's own playback
** authenticates its record (jSupFind).  Nothing is written.
*/
int tdeJournalProbeRead(TdeFile *p, void *zBuf, int iAmt, sqlite3_int64 iOfst){
  uint8_t *z = zBuf, *aRec = 0;
  uint8_t aHead[8], aTail[16];
  sqlite3_int64 sz = 0, s = 0;
  uint32_t n = 0, ck = 0;
  int bShort = 0, rc;
  rc = p->pReal->pMethods->xFileSize(p->pReal, &sz);
  if( rc ) return rc;
  if( sz>=24 ){
    rc = tdeRealRead(p, aHead, 8, 0, &bShort);
    if( rc==SQLITE_OK && !bShort ) rc = tdeRealRead(p, aTail, 16, sz-16, &bShort);
    if( rc ) return rc;
  }
  if( sz<24 || bShort || jIsHot(aHead) || memcmp(aTail+8, aJMagic, 8)==0 ){
    return p->pReal->pMethods->xRead(p->pReal, zBuf, iAmt, iOfst);
  }
  n = tdeGet32(aTail);
  s = sz - 20 - (sqlite3_int64)n;
  if( n>65536 || s<JSECTOR_MIN ) n = 0;        /* no record of this format */
  memset(z, 0, (size_t)iAmt);
  if( n>0 && iOfst < sz && iOfst + iAmt > s ){
    aRec = sqlite3_malloc((int)n + 20);
    if( !aRec ) return SQLITE_NOMEM;
    memset(aRec, 0, 4);                       /* (the lock-page number: SQLite skips it) */
    rc = tdeRealRead(p, aRec+4, (int)n + 4, s+4, &bShort);
    if( rc==SQLITE_OK && bShort ) rc = SQLITE_IOERR_SHORT_READ;
    if( rc==SQLITE_OK ){
      sqlite3_int64 iFrom = iOfst > s ? iOfst : s;
      sqlite3_int64 iTo = iOfst + iAmt < sz ? iOfst + iAmt : sz;
      for(uint32_t i=0; i<n; i++) ck += aRec[4+i];
      tdePut32(aRec+8+n, ck);
      memcpy(aRec+12+n, aJMagic, 8);
      memcpy(z + (iFrom - iOfst), aRec + (iFrom - s), (size_t)(iTo - iFrom));
    }
    sqlite3_free(aRec);
    if( rc ){ memset(z, 0, (size_t)iAmt); return rc; }
  }
  return iOfst + iAmt > sz ? SQLITE_IOERR_SHORT_READ : SQLITE_OK;
}

static void jSupForget(struct TdeJrnl *j){
  sqlite3_free(j->aSup);
  j->aSup = 0;
  j->eSup = 0;
  j->nSupName = 0;
  j->iSupStage = 0;
}

/* ---- writing ----------------------------------------------------------- */

/* Write what is held (a page number, or a sealed record without its
** checksum field): SQLite is doing something else in between. */
static int jFlush(TdeFile *p, struct TdeJrnl *j){
  int rc, n;
  if( !j || j->ePend==0 ) return SQLITE_OK;
  if( j->ePend==3 ){
    j->ePend = 0;
    jSupForget(j);
    tdeLog(TDE_LOG_ERROR, "%s: super-journal record left incomplete", jName(p));
    return SQLITE_IOERR_WRITE;
  }
  n = j->ePend==1 ? 4 : (int)(4 + j->pgsz);
  j->ePend = 0;
  j->bDirty = 1;
  rc = p->pReal->pMethods->xWrite(p->pReal, p->aBuf, n, j->iPend);
  if( rc==SQLITE_OK && j->iPend + n > j->iOwnEnd ) j->iOwnEnd = j->iPend + n;
  return rc;
}

int tdeJournalFlush(TdeFile *p){
  return jFlush(p, p->pJrnl);
}

/*
** A new journal at offset 0 of a version-2 database: record which page 1
** the database file holds now (T, from its trailer: one 48-byte pread,
** under SQLite's RESERVED lock, before any page of the transaction is
** written) and draw the binding id J.  Other versions: unbound.
*/
static int jBindNew(TdeFile *p, struct TdeJrnl *j, uint32_t pgsz){
  TdeFile *m = p->pMain;
  uint8_t aTr[TDE_TRAILER_SIZE], aJ[4];
  int bShort = 0, rc;
  j->bBound = 0;
  j->bindId = 0;
  memset(j->aTag, 0, JB_TAG);
  if( !m || !m->pDb->pKeys || m->pDb->pKeys->hdr.version<TDE_FORMAT_V2 ) return SQLITE_OK;
  rc = tdeRealRead(m, aTr, TDE_TRAILER_SIZE, tdeMainPageOff(m, pgsz, 1) + pgsz - TDE_TRAILER_SIZE, &bShort);
  if( rc ) return rc;
  if( bShort ) memset(aTr, 0, sizeof(aTr));
  memcpy(j->aTag, aTr+24, JB_TAG);
  do{
    if( tdeRandom(aJ, sizeof(aJ))!=TDE_OK ) return SQLITE_IOERR_WRITE;
    j->bindId = tdeGet32(aJ);
  }while( j->bindId==0 );
  j->bBound = 1;
  return SQLITE_OK;
}

/* SQLite writes a new header sector (or its first chunk) at h. */
static int jWriteNewHeader(TdeFile *p, struct TdeJrnl *j, const uint8_t *z, int n, sqlite3_int64 h){
  uint8_t *aOut = p->aBuf;
  uint8_t *aPlain = p->aBuf + TDE_MAX_PAGE;
  uint8_t aad[JH_AAD];
  JHdr hdr;
  int rc;
  if( h==0 ){
    uint32_t nSector = tdeGet32(z+20), pgsz = tdeGet32(z+24);
    if( nSector<JSECTOR_MIN && tdeValidPgsz(pgsz) ){
      /* Refused before anything of the transaction is written (SQLite
      ** writes the journal header first). */
      tdeErr(TDE_UNSUPPORTED, "%s: journal sector size %u is not supported (at least %d bytes): "
             "a VFS above tde reports it without SQLITE_IOCAP_POWERSAFE_OVERWRITE; nothing "
             "was written", jName(p), nSector, JSECTOR_MIN);
      tdeLog(TDE_LOG_ERROR, "%s", tde_last_error());
      return SQLITE_IOERR_WRITE;
    }
    if( !jValidGeometry(nSector, pgsz) || (uint32_t)n>nSector || n<JSLOTS ){
      tdeLog(TDE_LOG_ERROR, "%s: unexpected journal header (sector size %u, page size %u, %d bytes)",
             jName(p), nSector, pgsz, n);
      return SQLITE_IOERR_WRITE;
    }
    j->nSeg = 0;
    jBindInstall(p, j, 0);
    rc = jBindNew(p, j, pgsz);
    if( rc ) return rc;
    if( tdeRandom(j->aId, JID_BYTES)!=TDE_OK ) return SQLITE_IOERR_WRITE;
    j->bId = 1;
    j->nSector = nSector;
    j->pgsz = pgsz;
    j->bOwn = 1;
    j->iOwnEnd = 0;
    j->eHot = 0;
    if( j->bBound ) jBindInstall(p, j, 1);
  }else{
    jSegCut(j, h);
    if( !j->bId || (uint32_t)n>j->nSector || n<JSLOTS ) return SQLITE_IOERR_WRITE;
  }
  memset(&hdr, 0, sizeof(hdr));
  hdr.iOff = h;
  hdr.eState = JH_OK;
  hdr.iSlot = 0;
  hdr.seq = 1;
  memcpy(hdr.a, z, JHDR);
  memset(aOut, 0, (size_t)n);
  memset(aPlain, 0, JSLOT_PLAIN);
  tdePut64(aPlain, hdr.seq);
  memcpy(aPlain+8, hdr.a, JHDR);
  memcpy(aPlain+8+JHDR, j->aId, JID_BYTES);
  jSlotBind(j, aPlain, 0);
  hdr.flags = aPlain[JB_OFF+JB_TAG];
  hdr.bindId = j->bindId;
  memcpy(hdr.aTag, j->aTag, JB_TAG);
  jHdrAad(p, h, 0, aad);
  rc = tdeSeal(jKeys(p), aad, sizeof(aad), aPlain, JSLOT_PLAIN, aOut, aOut+JSLOT_PLAIN);
  tdeWipe(aPlain, JSLOT_PLAIN);
  if( rc ) return SQLITE_IOERR_WRITE;
  rc = jSegPush(j, &hdr);
  if( rc ) return rc;
  rc = p->pReal->pMethods->xWrite(p->pReal, aOut, n, h);
  if( rc==SQLITE_OK && j->bOwn && h + j->nSector > j->iOwnEnd ) j->iOwnEnd = h + j->nSector;
  return rc;
}

/* SQLite rewrites bytes [iIn, iIn+n) of the header of segment i. */
static int jWriteHeaderEdit(TdeFile *p, struct TdeJrnl *j, int i, const uint8_t *z, int n, int iIn){
  JHdr *h = &j->aSeg[i];
  uint8_t aNew[JHDR];
  uint8_t *aOut = p->aBuf;
  uint8_t *aPlain = p->aBuf + TDE_MAX_PAGE;
  uint8_t aad[JH_AAD];
  uint8_t newFlags;
  int iSlot, rc;
  if( iIn<0 || n<0 || n>JHDR-iIn ){
    tdeLog(TDE_LOG_ERROR, "%s: journal header rewrite of %d bytes at %d does not fit its %d bytes",
           jName(p), n, iIn, JHDR);
    return SQLITE_IOERR_WRITE;
  }
  if( h->eState==JH_DAMAGED ){
    p->nAuthFail++;
    return SQLITE_IOERR_AUTH;
  }
  memcpy(aNew, h->a, JHDR);
  memcpy(aNew+iIn, z, (size_t)n);
  jSegCut(j, h->iOff + 1);
  if( !jIsHot(aNew) ){
    /* The header stops being a journal header: zero both slots, so no
    ** older hot version survives (docs/FORMAT.md). */
    memset(aOut, 0, JSLOTS);
    rc = p->pReal->pMethods->xWrite(p->pReal, aOut, JSLOTS, h->iOff);
    if( rc ) return rc;
    h->eState = JH_NONE;
    h->iSlot = -1;
    memset(h->a, 0, JHDR);
    if( h->iOff==0 ){
      /* The journal ends here (PERSIST, exclusive mode): pages sealed from
      ** now on carry no binding id. */
      j->bOwn = 0;
      jBindInstall(p, j, 0);
    }
    return SQLITE_OK;
  }
  if( h->eState!=JH_OK || !j->bId ){
    tdeLog(TDE_LOG_ERROR, "%s: journal header rewrite at offset %lld without a header",
           jName(p), (long long)h->iOff);
    return SQLITE_IOERR_WRITE;
  }
  iSlot = h->iSlot==0 ? 1 : 0;
  memset(aPlain, 0, JSLOT_PLAIN);
  tdePut64(aPlain, h->seq + 1);
  memcpy(aPlain+8, aNew, JHDR);
  memcpy(aPlain+8+JHDR, j->aId, JID_BYTES);
  /* Synced: SQLite synced every record this count covers before writing
  ** it (synchronous=FULL); with NORMAL both reach the disk in one sync. */
  jSlotBind(j, aPlain, !j->bDirty);
  newFlags = aPlain[JB_OFF+JB_TAG];
  jHdrAad(p, h->iOff, iSlot, aad);
  rc = tdeSeal(jKeys(p), aad, sizeof(aad), aPlain, JSLOT_PLAIN, aOut, aOut+JSLOT_PLAIN);
  tdeWipe(aPlain, JSLOT_PLAIN);
  if( rc ) return SQLITE_IOERR_WRITE;
  rc = p->pReal->pMethods->xWrite(p->pReal, aOut, JSLOT, h->iOff + iSlot*JSLOT);
  if( rc ) return rc;
  h->seq++;
  h->iSlot = iSlot;
  memcpy(h->a, aNew, JHDR);
  h->flags = newFlags;
  return SQLITE_OK;
}

static int jOldRead(TdeFile *p, void *zBuf, int iAmt, sqlite3_int64 iOfst);
static int jOldSize(TdeFile *p, sqlite3_int64 *pSize);
static int jOldDetect(TdeFile *p, int *pbOld);

/* Learn the format of a journal this handle did not start. */
static int jDetect(TdeFile *p, struct TdeJrnl *j){
  int rc, bOld = 0;
  if( j->eFmt!=JF_UNKNOWN ) return SQLITE_OK;
  rc = jHdr0(p, j);
  if( rc ) return rc;
  if( j->aSeg[0].eState==JH_NONE ){
    /* (The previous format erased a rewritten block's older slot, so its
    ** first bytes may be zero while the block's newer slot holds data.) */
    rc = jOldDetect(p, &bOld);
    if( rc ) return rc;
  }
  j->eFmt = bOld ? JF_OLD : JF_NEW;
  if( bOld ){
    tdeLog(TDE_LOG_WARNING, "%s: journal in the previous format; reading it once to play it back",
           jName(p));
  }
  return SQLITE_OK;
}

/* A record's page, its page number held (ePend 1): sealed into aBuf
** beside the page number, held in turn until SQLite's checksum comes. */
static int jRecPage(TdeFile *p, struct TdeJrnl *j, const uint8_t *z){
  uint32_t pgno = tdeGet32(p->aBuf);
  uint32_t n = j->pgsz - TDE_TRAILER_SIZE;
  uint8_t aad[JR_AAD];
  int rc;
  jRecAad(p, j->aId, j->iPend, pgno, j->pgsz, aad);
  rc = tdeSeal(jKeys(p), aad, sizeof(aad), z, n, p->aBuf+4, p->aBuf+4+n);
  if( rc ){
    j->ePend = 0;
    tdeLog(TDE_LOG_ERROR, "%s: sealing journal record at %lld failed: %s", jName(p),
           (long long)j->iPend, tde_last_error());
    return SQLITE_IOERR_WRITE;
  }
  j->pendCk = jCksum(tdeGet32(j->aSeg[j->nSeg-1].a+12), z, j->pgsz);
  j->ePend = 2;
  return SQLITE_OK;
}

/* A record's checksum (ePend 2): checked against the one the shim
** computes, stored as the tag prefix, and the record out in one write. */
static int jRecChecksum(TdeFile *p, struct TdeJrnl *j, const uint8_t *z, sqlite3_int64 iOfst){
  uint8_t *aCk = p->aBuf + 4 + j->pgsz;
  int n = (int)(8 + j->pgsz);
  int rc;
  j->ePend = 0;
  if( tdeGet32(z)!=j->pendCk ){
    tdeLog(TDE_LOG_ERROR, "%s: SQLite's journal checksum at %lld is not the one the shim "
           "computes (layout mismatch); refusing the write", jName(p), (long long)iOfst);
    return SQLITE_IOERR_WRITE;
  }
  /* (What is held is ciphertext, a page number and a tag: nothing to wipe.) */
  memcpy(aCk, aCk - TDE_TRAILER_SIZE + 24, 4);
  j->bDirty = 1;
  rc = p->pReal->pMethods->xWrite(p->pReal, p->aBuf, n, j->iPend);
  if( rc==SQLITE_OK && j->iPend + n > j->iOwnEnd ) j->iOwnEnd = j->iPend + n;
  return rc;
}

/* A write inside segment i (found by jSegFind): an edit of its header, the
** padding of its header sector, a record's page number (held until its
** page comes), or a checksum after its record. */
static int jWriteInSegment(TdeFile *p, struct TdeJrnl *j, int i, const uint8_t *z, int iAmt,
                           sqlite3_int64 iOfst){
  JHdr *h = &j->aSeg[i];
  sqlite3_int64 H = j->nSector;
  sqlite3_int64 iIn = iOfst - h->iOff;
  int rc;
  if( iIn<H ){
    if( iIn+iAmt<=JHDR ) return jWriteHeaderEdit(p, j, i, z, iAmt, (int)iIn);
    if( iIn>=JSLOTS && iIn+iAmt<=H ){
      /* Later chunks of a header sector (past the slots): padding SQLite
      ** never reads. */
      memset(p->aBuf, 0, (size_t)iAmt);
      rc = p->pReal->pMethods->xWrite(p->pReal, p->aBuf, iAmt, iOfst);
      if( rc==SQLITE_OK && j->bOwn && iOfst+iAmt > j->iOwnEnd ) j->iOwnEnd = iOfst+iAmt;
      return rc;
    }
  }else if( iAmt==4 && i==j->nSeg-1 && h->eState==JH_OK
         && (iIn-H) % (sqlite3_int64)(j->pgsz+8)==0 ){
    /* A record's page number: held until its page arrives. */
    memcpy(p->aBuf, z, 4);
    j->iPend = iOfst;
    j->ePend = 1;
    return SQLITE_OK;
  }else if( iAmt==4 && i==j->nSeg-1 && h->eState==JH_OK && iIn-H>=j->pgsz+4
         && (iIn-H-4-j->pgsz) % (sqlite3_int64)(j->pgsz+8)==0 ){
    /* A checksum arriving after its record was written (never seen from
    ** SQLite, which writes the three parts in a row): the tag prefix. */
    uint8_t aTag[4];
    int bShort;
    rc = tdeRealRead(p, aTag, 4, iOfst - TDE_TRAILER_SIZE + 24, &bShort);
    if( rc==SQLITE_OK && bShort ) rc = SQLITE_IOERR_WRITE;
    j->bDirty = 1;
    if( rc==SQLITE_OK ) rc = p->pReal->pMethods->xWrite(p->pReal, aTag, 4, iOfst);
    if( rc==SQLITE_OK && j->bOwn && iOfst+4 > j->iOwnEnd ) j->iOwnEnd = iOfst+4;
    return rc;
  }
  tdeLog(TDE_LOG_ERROR, "%s: unexpected journal write of %d bytes at offset %lld",
         jName(p), iAmt, (long long)iOfst);
  return SQLITE_IOERR_WRITE;
}

/*
** xWrite of a rollback journal: the held parts of a record first (its
** page, its checksum) or of a super-journal record; else complete what is
** held, and one stage per kind of write: a new header (at 0 or at a sector
** boundary), the start of a super-journal record, a write inside a segment.
*/
int tdeJournalWrite(TdeFile *p, const void *zBuf, int iAmt, sqlite3_int64 iOfst){
  const uint8_t *z = zBuf;
  struct TdeJrnl *j;
  int i, rc = jState(p, &j);
  if( rc ) return rc;
  j->iCache = -1;

  if( j->ePend==1 && iOfst==j->iPend+4 && (uint32_t)iAmt==j->pgsz ) return jRecPage(p, j, z);
  if( j->ePend==2 && iOfst==j->iPend+4+j->pgsz && iAmt==4 ) return jRecChecksum(p, j, z, iOfst);
  if( j->ePend==3 ) return jSupWrite(p, j, z, iAmt, iOfst);
  rc = jFlush(p, j);
  if( rc ) return rc;
  if( j->eSup==2 && iOfst < j->iSup + j->nSupName + 20 && iOfst + iAmt > j->iSup ) jSupForget(j);
  if( j->eSup==1 ) j->eSup = 0;

  if( iOfst==0 && iAmt>JHDR ){
    /* (Nothing else SQLite writes at 0 is longer than its 28 header bytes.) */
    jSupForget(j);
    j->eFmt = JF_NEW;
    return jWriteNewHeader(p, j, z, iAmt, 0);
  }
  if( j->eFmt==JF_OLD ){
    /* SQLite finalizes a journal it played back (or starts over at 0): from
    ** here on it is a journal of this format. */
    j->eFmt = JF_NEW;
    j->nSeg = 0;
  }
  rc = jDetect(p, j);
  if( rc ) return rc;
  j->eFmt = JF_NEW;
  rc = jHdr0(p, j);
  if( rc ) return rc;
  if( j->aSeg[0].eState==JH_NONE && iOfst+iAmt<=JHDR ){
    /* Zeroing a header that is already absent (PERSIST after a crash). */
    return jWriteHeaderEdit(p, j, 0, z, iAmt, (int)iOfst);
  }
  if( !j->bId ){
    tdeLog(TDE_LOG_ERROR, "%s: journal write of %d bytes at %lld before its header",
           jName(p), iAmt, (long long)iOfst);
    return j->aSeg[0].eState==JH_DAMAGED ? SQLITE_IOERR_AUTH : SQLITE_IOERR_WRITE;
  }
  if( iAmt==4 && j->bOwn && iOfst>=j->iOwnEnd && tdeGet32(z)==jLockPgno(j) ){
    /* The lock page is never journaled: this starts the super-journal
    ** record, held until complete and stored with one write. */
    jSupForget(j);
    j->ePend = 3;
    j->iSup = iOfst;
    j->nSupName = -1;
    j->iSupStage = 1;
    return SQLITE_OK;
  }
  if( iOfst%j->nSector==0 && iAmt>JHDR && (uint32_t)iAmt<=j->nSector ){
    return jWriteNewHeader(p, j, z, iAmt, iOfst);
  }
  rc = jSegFind(p, j, iOfst, &i);
  if( rc ) return rc;
  return jWriteInSegment(p, j, i, z, iAmt, iOfst);
}

/* ---- reading ----------------------------------------------------------- */

/*
** Decode the record at r of segment i into aBuf as SQLite's bytes:
** pgno (4) || page (P) || checksum (4).
*/
static int jRecLoad(TdeFile *p, struct TdeJrnl *j, int i, sqlite3_int64 r){
  const JHdr *h = &j->aSeg[i];
  uint32_t P = j->pgsz, n = P - TDE_TRAILER_SIZE, pgno, nRec = 0;
  uint8_t *a = p->aBuf;
  uint8_t aad[JR_AAD];
  uint8_t aTag[4];
  int bShort, rc, bAuth, bCovered;
  sqlite3_int64 k = (r - h->iOff - j->nSector) / (P + 8);

  if( j->iCache==r ) return SQLITE_OK;
  j->iCache = -1;
  if( h->eState==JH_OK && jIsHot(h->a) ) nRec = tdeGet32(h->a+8);
  /* Version 2: a count covers its records only if they were synced before
  ** it was written (synchronous=FULL); otherwise a power loss may keep
  ** the count and lose records, which SQLite reads as the torn end. */
  if( j->bBound && !(h->flags & JB_SYNCED) ) nRec = 0;
  bCovered = (j->bOwn && r + P + 8 <= j->iOwnEnd)
          || (nRec!=0 && nRec!=JNREC_ALL && k<(sqlite3_int64)nRec);
  rc = tdeRealRead(p, a, (int)(P + 8), r, &bShort);
  if( rc ) return rc;
  pgno = tdeGet32(a);
  memcpy(aTag, a + 4 + n + 24, 4);
  bAuth = 0;
  if( !bShort ){
    int trc;
    jRecAad(p, j->aId, r, pgno, P, aad);
    trc = tdeOpen(jKeys(p), aad, sizeof(aad), a+4, n, a+4+n, a+4);
    if( jOpenFailRc(trc) ){
      tdeWipe(a, P + 8);
      return jOpenFailRc(trc);
    }
    bAuth = trc==TDE_OK;
  }
  if( bAuth && tdeCtEqual(aTag, a+4+P, 4) ){
    memset(a+4+n, 0, TDE_TRAILER_SIZE);
    tdePut32(a+4+P, jCksum(tdeGet32(h->a+12), a+4, P));
    j->eCache = JR_OK;
  }else if( bCovered ){
    /* Synced before the header counted it: damage, or the journal was cut. */
    tdeWipe(a, P + 8);
    p->nAuthFail++;
    tdeLog(TDE_LOG_ERROR, "%s: journal record at offset %lld (page %u) %s", jName(p),
           (long long)r, pgno, bShort ? "is cut short although its header counts it"
                                      : "failed authentication");
    return SQLITE_IOERR_AUTH;
  }else if( bAuth ){
    /* Authentic page, checksum field torn: SQLite must reject the record. */
    memset(a+4+n, 0, TDE_TRAILER_SIZE);
    tdePut32(a+4+P, ~jCksum(tdeGet32(h->a+12), a+4, P));
    j->eCache = JR_BADCK;
  }else{
    /* Torn (or cut short): page number 0 ends SQLite's playback. */
    memset(a, 0, P + 8);
    j->eCache = bShort ? JR_TORN + 10 : JR_TORN;
  }
  j->iCache = r;
  return SQLITE_OK;
}

/* ---- version 2: the playback check ------------------------------------ */

/*
** Page 1 on disk must be the one the journal was started from (its tag
** prefix is T) or one this journal's transaction wrote (its IV bits
** 95..64 are J); the trailer alone decides, so a torn write of page 1 by
** this transaction still plays back.  Nothing is written.
*/
static int jBindCheck(TdeFile *p, struct TdeJrnl *j){
  TdeFile *m = p->pMain;
  uint8_t aTr[TDE_TRAILER_SIZE];
  int bShort = 0, rc;
  if( !m ) return SQLITE_OK;      /* (no keys either: nothing of it reads) */
  rc = tdeRealRead(m, aTr, TDE_TRAILER_SIZE, tdeMainPageOff(m, j->pgsz, 1) + j->pgsz - TDE_TRAILER_SIZE, &bShort);
  if( rc ) return rc;
  if( bShort ) memset(aTr, 0, sizeof(aTr));
  if( tdeCtEqual(aTr+24, j->aTag, JB_TAG) || tdeGet32(aTr+12)==j->bindId ) return SQLITE_OK;
  p->nAuthFail++;
  tdeErr(TDE_AUTH, "%s: this hot journal belongs to an older transaction (page 1 of the database "
         "was written by a later commit): it was put back from a copy; move it aside -- the "
         "database is consistent without it", jName(p));
  tdeLog(TDE_LOG_ERROR, "%s", tde_last_error());
  return SQLITE_IOERR_AUTH;
}

/*
** Before SQLite applies anything: every record that a synced header of
** each segment counts must authenticate (jRecLoad fails such a record as
** covered).  SQLite stops playback silently at the first bad record; a
** zeroed record in the middle would leave a torn database.
*/
static int jRecCheck(TdeFile *p, struct TdeJrnl *j){
  int i = 0, rc;
  for(;;){
    const JHdr *h = &j->aSeg[i];
    sqlite3_int64 next, hOff = h->iOff;
    uint32_t nRec;
    int iNext;
    if( h->eState!=JH_OK || !jIsHot(h->a) ) return SQLITE_OK;
    nRec = tdeGet32(h->a+8);
    if( nRec==JNREC_ALL ) return SQLITE_OK;    /* counted from the file size: no count to hold */
    if( h->flags & JB_SYNCED ){
      for(uint32_t k=0; k<nRec; k++){
        sqlite3_int64 r = hOff + j->nSector + (sqlite3_int64)k*(j->pgsz + 8);
        rc = jRecLoad(p, j, i, r);
        if( rc==SQLITE_IOERR_AUTH ){
          tdeErr(TDE_AUTH, "%s: record %u of the segment at offset %lld (journal offset %lld) "
                 "fails authentication although the synced journal header counts it: the "
                 "journal was damaged or tampered with; nothing was played back",
                 jName(p), k, (long long)hOff, (long long)r);
          tdeLog(TDE_LOG_ERROR, "%s", tde_last_error());
        }
        if( rc ) return rc;
      }
    }
    next = jSegNext(j, i);
    if( next<0 ) return SQLITE_OK;
    rc = jSegFind(p, j, next, &iNext);
    if( rc ) return rc;
    if( iNext!=i+1 ) return SQLITE_OK;
    i = iNext;
  }
}

/*
** A hot journal without a binding (written by version-1 code, or by
** sqlite-tde before the binding) next to a version-2 database: page 1 must
** carry no binding id (IV bits 95..64 zero).  Every commit in rollback
** mode since the binding rewrites page 1 with its journal's J, and WAL
** frames put their index there, so a non-zero value means page 1 was
** written after any such journal was current: a version-1 journal saved
** before `upgrade` and put back after a later commit.  (Code before the
** binding wrote 0 there outside the WAL.)  Nothing is written.
*/
static int jUnboundCheck(TdeFile *p, uint32_t pgsz){
  TdeFile *m = p->pMain;
  uint8_t aTr[TDE_TRAILER_SIZE];
  int bShort = 0, rc;
  if( !m || !m->pDb->pKeys || m->pDb->pKeys->hdr.version<TDE_FORMAT_V2 ) return SQLITE_OK;
  rc = tdeRealRead(m, aTr, TDE_TRAILER_SIZE, tdeMainPageOff(m, pgsz, 1) + pgsz - TDE_TRAILER_SIZE, &bShort);
  if( rc ) return rc;
  if( bShort || tdeGet32(aTr+12)==0 ){
    tdeLog(TDE_LOG_WARNING, "%s: hot journal without a freshness binding (written by format "
           "version 1 or an earlier sqlite-tde): played back unchecked", jName(p));
    return SQLITE_OK;
  }
  p->nAuthFail++;
  tdeErr(TDE_AUTH, "%s: this hot journal has no freshness binding (format version 1 or an "
         "earlier sqlite-tde wrote it) but page 1 of the database was written by a later, "
         "bound commit: it was put back from a copy; move it aside -- the database is "
         "consistent without it", jName(p));
  tdeLog(TDE_LOG_ERROR, "%s", tde_last_error());
  return SQLITE_IOERR_AUTH;
}

/* The same for a hot journal of the previous journal format (read once,
** by jOldRead): its page size from SQLite's header in its first block. */
static int jOldHotCheck(TdeFile *p, struct TdeJrnl *j){
  uint8_t a[JHDR];
  int rc;
  if( j->eHot==JHOT_ALLOWED ) return SQLITE_OK;
  if( j->eHot==JHOT_REFUSED ) return SQLITE_IOERR_AUTH;
  rc = jOldRead(p, a, JHDR, 0);
  if( rc==SQLITE_IOERR_SHORT_READ ) return SQLITE_OK;   /* no header: nothing to play back */
  if( rc ) return rc;
  if( !jIsHot(a) || !jValidGeometry(tdeGet32(a+20), tdeGet32(a+24)) ) return SQLITE_OK;
  rc = jUnboundCheck(p, tdeGet32(a+24));
  if( rc==SQLITE_IOERR_AUTH ) j->eHot = JHOT_REFUSED;
  else if( rc==SQLITE_OK ) j->eHot = JHOT_ALLOWED;
  return rc;
}

/*
** A hot journal read through a handle that did not write it: the binding
** (any handle; SQLite's read-only hot-journal probe too) and the counted
** records (handles that can play it back), once per handle.  On success
** the main handle seals the pages the playback writes with J.
*/
static int jHotCheck(TdeFile *p, struct TdeJrnl *j){
  const JHdr *h0 = &j->aSeg[0];
  int rc;
  if( j->eHot==JHOT_ALLOWED ) return SQLITE_OK;
  if( j->eHot==JHOT_REFUSED ) return SQLITE_IOERR_AUTH;
  if( h0->eState!=JH_OK || !jIsHot(h0->a) ) return SQLITE_OK;   /* nothing to play back */
  if( !j->bBound ){
    rc = jUnboundCheck(p, j->pgsz);
    if( rc ){
      if( rc==SQLITE_IOERR_AUTH ) j->eHot = JHOT_REFUSED;
      return rc;
    }
    j->eHot = JHOT_ALLOWED;
    return SQLITE_OK;
  }
  rc = jBindCheck(p, j);
  if( rc==SQLITE_OK && (p->openFlags & SQLITE_OPEN_READWRITE) ) rc = jRecCheck(p, j);
  if( rc ){
    if( rc==SQLITE_IOERR_AUTH ) j->eHot = JHOT_REFUSED;
    return rc;
  }
  j->eHot = JHOT_ALLOWED;
  jBindInstall(p, j, 1);
  return SQLITE_OK;
}

int tdeJournalRead(TdeFile *p, void *zBuf, int iAmt, sqlite3_int64 iOfst){
  uint8_t *z = zBuf;
  struct TdeJrnl *j;
  sqlite3_int64 H;
  int nDone = 0, bShort = 0;
  int rc = jState(p, &j);
  if( rc ) return rc;
  rc = jFlush(p, j);
  if( rc ) return rc;
  rc = jDetect(p, j);
  if( rc ) return rc;
  if( j->eFmt==JF_OLD ){
    rc = j->bOwn ? SQLITE_OK : jOldHotCheck(p, j);
    if( rc ) return rc;
    return jOldRead(p, zBuf, iAmt, iOfst);
  }
  rc = jHdr0(p, j);
  if( rc ) return rc;
  if( j->aSeg[0].eState==JH_DAMAGED ){ rc = SQLITE_IOERR_AUTH; goto done; }
  if( j->aSeg[0].eState==JH_NONE || !j->bId ){
    /* No journal header: the journal reads as zeros, as SQLite left it. */
    sqlite3_int64 sz = 0;
    memset(z, 0, (size_t)iAmt);
    rc = p->pReal->pMethods->xFileSize(p->pReal, &sz);
    if( rc ) return rc;
    return iOfst + iAmt > sz ? SQLITE_IOERR_SHORT_READ : SQLITE_OK;
  }
  H = j->nSector;
  if( !j->bOwn ){
    rc = jHotCheck(p, j);
    if( rc==SQLITE_OK ) rc = jSupFind(p, j);
    if( rc ) goto done;
  }
  if( j->eSup==2 && iOfst>=j->iSup ){
    /* Inside the super-journal record (SQLite reads it from the end). */
    sqlite3_int64 nSup = j->nSupName + 20, iIn = iOfst - j->iSup;
    memset(z, 0, (size_t)iAmt);
    if( iIn<nSup ) memcpy(z, j->aSup+iIn, (size_t)(nSup-iIn < iAmt ? nSup-iIn : iAmt));
    return iIn + iAmt > nSup ? SQLITE_IOERR_SHORT_READ : SQLITE_OK;
  }
  while( nDone<iAmt ){
    sqlite3_int64 off = iOfst + nDone;
    sqlite3_int64 iIn;
    int n = iAmt - nDone, i;
    JHdr *h;
    if( j->bOwn && off>=j->iOwnEnd ){
      /* Past everything this handle wrote of its journal: nothing of it.
      ** What lies there in the file is left from an earlier journal
      ** (PERSIST mode, exclusive locking mode, journal_size_limit): it
      ** reads as zeros (a torn end, no super-journal record), and as a
      ** short read only past the end of the file, as without encryption
      ** (SQLite reads the super-journal record from the file's end). */
      memset(z+nDone, 0, (size_t)n);
      if( bShort==0 ) bShort = 2;
      break;
    }
    rc = jSegFind(p, j, off, &i);
    if( rc ) goto done;
    h = &j->aSeg[i];
    iIn = off - h->iOff;
    if( h->eState==JH_DAMAGED ){ rc = SQLITE_IOERR_AUTH; goto done; }
    if( iIn<H ){
      if( n > H - iIn ) n = (int)(H - iIn);
      memset(z+nDone, 0, (size_t)n);
      if( iIn<JHDR ) memcpy(z+nDone, h->a+iIn, (size_t)(JHDR-iIn < n ? JHDR-iIn : n));
    }else{
      sqlite3_int64 next = jSegNext(j, i);
      sqlite3_int64 rel = iIn - H;
      sqlite3_int64 r = off - rel % (j->pgsz + 8);
      int iRec = (int)(off - r);
      if( next>=0 && r + j->pgsz + 8 > next ){
        /* Between the last record of a segment and the next header. */
        n = (int)(n < next - off ? n : next - off);
        memset(z+nDone, 0, (size_t)n);
      }else{
        if( n > (int)(j->pgsz + 8) - iRec ) n = (int)(j->pgsz + 8) - iRec;
        rc = jRecLoad(p, j, i, r);
        if( rc ) goto done;
        memcpy(z+nDone, p->aBuf + iRec, (size_t)n);
        if( j->eCache==JR_TORN + 10 && bShort==0 ) bShort = 2;
      }
    }
    nDone += n;
  }
done:
  if( rc ){ memset(z, 0, (size_t)iAmt); return rc; }
  if( bShort==2 ){
    /* A record cut by the end of the file: a short read only for bytes
    ** past the end, as without encryption. */
    sqlite3_int64 sz = 0;
    rc = p->pReal->pMethods->xFileSize(p->pReal, &sz);
    if( rc ){ memset(z, 0, (size_t)iAmt); return rc; }
    bShort = iOfst + iAmt > sz;
  }
  return bShort ? SQLITE_IOERR_SHORT_READ : SQLITE_OK;
}

int tdeJournalFileSize(TdeFile *p, sqlite3_int64 *pSize){
  struct TdeJrnl *j;
  int rc = jState(p, &j);
  if( rc ) return rc;
  rc = jFlush(p, j);
  if( rc ) return rc;
  if( j->eFmt==JF_UNKNOWN ){
    rc = jDetect(p, j);
    if( rc ) return rc;
  }
  if( j->eFmt==JF_OLD ) return jOldSize(p, pSize);
  return p->pReal->pMethods->xFileSize(p->pReal, pSize);
}

int tdeJournalTruncate(TdeFile *p, sqlite3_int64 size){
  struct TdeJrnl *j;
  int rc = jState(p, &j);
  if( rc ) return rc;
  rc = jFlush(p, j);
  if( rc ) return rc;
  j->iCache = -1;
  if( size==0 || j->eFmt!=JF_NEW ){
    /* Empty, or a journal of unknown or the previous format: what stays is
    ** read afresh. */
    j->eFmt = size==0 ? JF_NEW : JF_UNKNOWN;
    j->nSeg = 0;
    j->bId = 0;
    j->bOwn = 0;
    j->iOwnEnd = 0;
    j->eHot = 0;
    jBindInstall(p, j, 0);       /* the journal ended (TRUNCATE mode) */
    jSupForget(j);
  }else{
    /* PERSIST mode cutting what lies past its journal (journal_size_limit,
    ** the end of a super-journal record). */
    jSegCut(j, size);
    if( j->iOwnEnd > size ) j->iOwnEnd = size;
    if( j->eSup==2 && size < j->iSup + j->nSupName + 20 ) jSupForget(j);
    if( j->eSup==1 ) j->eSup = 0;
  }
  return p->pReal->pMethods->xTruncate(p->pReal, size);
}

int tdeJournalSync(TdeFile *p, int flags){
  int rc = jFlush(p, p->pJrnl);
  if( rc ) return rc;
  rc = p->pReal->pMethods->xSync(p->pReal, flags);
  if( rc==SQLITE_OK && p->pJrnl ) p->pJrnl->bDirty = 0;
  return rc;
}

/*
** Close: wipe the parts of the scratch buffer a journal uses -- records
** decoded at its start (page plaintext), header slots at TDE_MAX_PAGE --
** and free it, so the close does not wipe all of it (about 74 KiB at every
** transaction's journal).
*/
void tdeJournalFree(TdeFile *p){
  if( p->pJrnl && p->aBuf && p->pJrnl->pgsz ){
    size_t n = (size_t)p->pJrnl->pgsz + 8;
    if( n < p->pJrnl->nSector ) n = p->pJrnl->nSector;
    if( n < OPAIR + OPLAIN ) n = OPAIR + OPLAIN;
    /* (n <= TDE_MAX_PAGE + 8: the slots region starts 8 bytes into a
    ** 64 KiB page's record, and is wiped as well.) */
    tdeWipe(p->aBuf, n);
    tdeWipe(p->aBuf + TDE_MAX_PAGE, JSLOTS + JSLOT_PLAIN);
    sqlite3_free(p->aBuf);
    p->aBuf = 0;
  }
  if( p->pJrnl ){
    jBindInstall(p, p->pJrnl, 0);   /* the journal ends (DELETE mode) */
    sqlite3_free(p->pJrnl->aSeg);
    sqlite3_free(p->pJrnl->aSup);
    tdeWipe(p->pJrnl, sizeof(*p->pJrnl));
    sqlite3_free(p->pJrnl);
    p->pJrnl = 0;
  }
}

/* ---- the previous format (read only) ------------------------------------
** Every 512-byte block j was stored at j * 1152 as two slots of
** sealed(seq u64 || len u16 || 6 zero bytes || 512 data bytes) + trailer,
** associated data 'J' || database id || j.  The newest valid slot holds the
** block; the last pair may be a torn append; an earlier pair of zeros was
** never written and reads as zeros.
*/

typedef struct OBlock {
  int iSlot, bZero;
  uint32_t len;
  uint8_t aData[OBLOCK];
} OBlock;

static int oLoad(TdeFile *p, sqlite3_int64 jb, sqlite3_int64 phys, OBlock *b){
  uint8_t *aPair = p->aBuf, *aPlain = p->aBuf + OPAIR;
  uint8_t aad[OAAD];
  sqlite3_int64 avail = phys - jb*OPAIR;
  uint64_t best = 0;
  int bShort, rc;
  b->iSlot = -1; b->bZero = 0; b->len = 0;
  memset(b->aData, 0, OBLOCK);
  if( avail<=0 ) return SQLITE_OK;
  if( avail>OPAIR ) avail = OPAIR;
  rc = tdeRealRead(p, aPair, (int)avail, jb*OPAIR, &bShort);
  if( rc ) return rc;
  b->bZero = jAllZero(aPair, (size_t)avail);
  aad[0] = 'J';
  memcpy(aad+1, p->dbid, TDE_DBID_BYTES);
  tdePut64(aad+1+TDE_DBID_BYTES, (uint64_t)jb);
  for(int s=0; s<2; s++){
    const uint8_t *aSlot = aPair + s*OSLOT;
    if( (s+1)*OSLOT > avail ) break;
    int trc = tdeOpen(jKeys(p), aad, sizeof(aad), aSlot, OPLAIN, aSlot+OPLAIN, aPlain);
    if( jOpenFailRc(trc) ){
      tdeWipe(aPlain, OPLAIN);
      return jOpenFailRc(trc);
    }
    if( trc!=TDE_OK ) continue;
    if( tdeGet16(aPlain+8)>OBLOCK ) continue;
    if( b->iSlot<0 || tdeGet64(aPlain)>best ){
      b->iSlot = s;
      best = tdeGet64(aPlain);
      b->len = tdeGet16(aPlain+8);
      memcpy(b->aData, aPlain+16, OBLOCK);
    }
  }
  tdeWipe(aPlain, OPLAIN);
  return SQLITE_OK;
}

static int oSize(TdeFile *p, sqlite3_int64 phys, sqlite3_int64 *pSize, OBlock *b){
  sqlite3_int64 nPair = (phys + OPAIR - 1) / OPAIR;
  int rc;
  *pSize = 0;
  if( nPair==0 ) return SQLITE_OK;
  rc = oLoad(p, nPair-1, phys, b);
  if( rc ) return rc;
  *pSize = (nPair-1)*OBLOCK + (b->iSlot>=0 ? b->len : 0);
  return SQLITE_OK;
}

static int jOldDetect(TdeFile *p, int *pbOld){
  sqlite3_int64 phys = 0;
  OBlock *b;
  int rc = p->pReal->pMethods->xFileSize(p->pReal, &phys);
  *pbOld = 0;
  if( rc || phys<OSLOT ) return rc;
  b = sqlite3_malloc(sizeof(*b));
  if( !b ) return SQLITE_NOMEM;
  rc = oLoad(p, 0, phys, b);
  *pbOld = rc==SQLITE_OK && b->iSlot>=0;
  tdeWipe(b, sizeof(*b));
  sqlite3_free(b);
  return rc;
}

static int jOldSize(TdeFile *p, sqlite3_int64 *pSize){
  sqlite3_int64 phys = 0;
  OBlock *b;
  int rc = p->pReal->pMethods->xFileSize(p->pReal, &phys);
  if( rc ) return rc;
  b = sqlite3_malloc(sizeof(*b));
  if( !b ) return SQLITE_NOMEM;
  rc = oSize(p, phys, pSize, b);
  tdeWipe(b, sizeof(*b));
  sqlite3_free(b);
  return rc;
}

static int jOldRead(TdeFile *p, void *zBuf, int iAmt, sqlite3_int64 iOfst){
  uint8_t *z = zBuf;
  sqlite3_int64 phys = 0, size = 0;
  OBlock *b;
  int nDone = 0;
  int rc = p->pReal->pMethods->xFileSize(p->pReal, &phys);
  if( rc ) return rc;
  b = sqlite3_malloc(sizeof(*b));
  if( !b ) return SQLITE_NOMEM;
  rc = oSize(p, phys, &size, b);
  while( rc==SQLITE_OK && nDone<iAmt ){
    sqlite3_int64 off = iOfst + nDone;
    uint32_t iIn = (uint32_t)(off % OBLOCK);
    uint32_t n = OBLOCK - iIn;
    if( n > (uint32_t)(iAmt-nDone) ) n = (uint32_t)(iAmt-nDone);
    if( off>=size ) break;
    rc = oLoad(p, off / OBLOCK, phys, b);
    if( rc ) break;
    if( b->iSlot<0 && !b->bZero ){
      p->nAuthFail++;
      tdeLog(TDE_LOG_ERROR, "%s: journal block %lld (previous format) failed authentication",
             jName(p), (long long)(off / OBLOCK));
      rc = SQLITE_IOERR_AUTH;
      break;
    }
    memcpy(z+nDone, b->aData+iIn, n);
    nDone += (int)n;
  }
  tdeWipe(b, sizeof(*b));
  sqlite3_free(b);
  if( rc ){ memset(z, 0, (size_t)iAmt); return rc; }
  if( nDone<iAmt ){
    memset(z+nDone, 0, (size_t)(iAmt-nDone));
    return SQLITE_IOERR_SHORT_READ;
  }
  return SQLITE_OK;
}

/* ---- page 1 sealed again under a hot journal (version 2) ----------------
**
** After a rotation or a migration (a header update to sequence s), page 1
** is sealed again so it records s ("Header rollback after a rekey" in
** docs/FORMAT.md).  It is protected the way SQLite protects a page: a
** journal DB-journal of this format holding page 1 is written through the
** functions above, in SQLite's own order (header with no magic, record,
** sync, magic and record count, sync), then page 1 is written, the
** database synced and the journal deleted.  A crash leaves a hot journal
** bound to page 1 (T, and J in the re-sealed page) that SQLite plays back:
** page 1 comes back with the same content.  Rollback mode only; the caller
** holds SQLite's RESERVED lock and the connection has no journal open.
*/
static int jResealPage1(TdeFile *pMain){
  sqlite3_vfs *pOrig = (sqlite3_vfs*)tdeVfs.pAppData;
  TdeFile jf;
  uint8_t *aPage = 0, *aSealed = 0, aHdr[512], a4[4];
  uint32_t P = pMain->pDb->pgsz, ckInit;
  sqlite3_int64 sz = 0;
  char *zJ = 0;
  int bExists = 0, bShort = 0, bCreated = 0, bHot = 0, rc, outFlags = 0;
  int64_t vNoKey = -1;

  memset(&jf, 0, sizeof(jf));
  if( !pMain->zName || !tdeValidPgsz(P) ) return SQLITE_OK;
  /* A write outside the WAL: no page map from now on (a map left from WAL
  ** mode would name page 1's old tag). */
  rc = tdeMapDrop(pMain);
  if( rc ) return rc;
  zJ = sqlite3_mprintf("%s-journal", pMain->zName);
  jf.pReal = sqlite3_malloc(pOrig->szOsFile);
  aPage = sqlite3_malloc((int)P);
  aSealed = sqlite3_malloc((int)P);
  if( !zJ || !jf.pReal || !aPage || !aSealed ){ rc = SQLITE_NOMEM; goto done; }
  memset(jf.pReal, 0, (size_t)pOrig->szOsFile);
  rc = pOrig->xAccess(pOrig, zJ, SQLITE_ACCESS_EXISTS, &bExists);
  if( rc ) goto done;
  if( bExists ){
    /* A journal file kept by PERSIST or TRUNCATE mode, or one another
    ** process is about to play back: leave page 1 as it is. */
    rc = SQLITE_BUSY;
    goto done;
  }
  rc = pMain->pReal->pMethods->xFileSize(pMain->pReal, &sz);
  if( rc ) goto done;
  if( sz < tdeMainPageOff(pMain, P, 1) + (sqlite3_int64)P ) goto done;        /* no page 1 yet */
  rc = tdeRealRead(pMain, aPage, (int)P, tdeMainPageOff(pMain, P, 1), &bShort);
  if( rc==SQLITE_OK && bShort ) rc = SQLITE_IOERR_SHORT_READ;
  if( rc==SQLITE_OK ) rc = tdeOpenPage(pMain, aPage, P, 1, &vNoKey);
  if( rc==SQLITE_IOERR_AUTH ) tdeAuthFail(pMain, 1, "database", vNoKey);
  if( rc ) goto done;

  jf.eKind = TDE_KIND_JOURNAL;
  jf.openFlags = SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE|SQLITE_OPEN_MAIN_JOURNAL;
  jf.zName = zJ;
  jf.pMain = pMain;
  memcpy(jf.dbid, pMain->dbid, TDE_DBID_BYTES);
  rc = pOrig->xOpen(pOrig, zJ, jf.pReal, jf.openFlags, &outFlags);
  if( rc ){ jf.pReal->pMethods = 0; goto done; }
  bCreated = 1;

  /* SQLite's header (synchronous=FULL): no magic yet, nRec 0. */
  memset(aHdr, 0, sizeof(aHdr));
  if( tdeRandom(a4, 4)!=TDE_OK ){ rc = SQLITE_IOERR_WRITE; goto done; }
  ckInit = tdeGet32(a4);
  tdePut32(aHdr+12, ckInit);
  tdePut32(aHdr+16, tdeMainWholePages(pMain, P, sz));             /* dbOrigSize */
  tdePut32(aHdr+20, 512);                                         /* sector size */
  tdePut32(aHdr+24, P);
  rc = tdeJournalWrite(&jf, aHdr, (int)sizeof(aHdr), 0);
  /* The record: page number, page image, checksum. */
  tdePut32(a4, 1);
  if( rc==SQLITE_OK ) rc = tdeJournalWrite(&jf, a4, 4, 512);
  if( rc==SQLITE_OK ) rc = tdeJournalWrite(&jf, aPage, (int)P, 516);
  tdePut32(a4, jCksum(ckInit, aPage, P));
  if( rc==SQLITE_OK ) rc = tdeJournalWrite(&jf, a4, 4, 516 + P);
  if( rc==SQLITE_OK ) rc = tdeJournalSync(&jf, SQLITE_SYNC_NORMAL);
  /* The magic and the record count: hot from here on. */
  memcpy(aHdr, aJMagic, 8);
  tdePut32(aHdr+8, 1);
  if( rc==SQLITE_OK ) rc = tdeJournalWrite(&jf, aHdr, 12, 0);
  if( rc==SQLITE_OK ) rc = tdeJournalSync(&jf, SQLITE_SYNC_NORMAL);
  if( rc ) goto done;
  bHot = 1;

  /* Page 1 sealed again (it carries the journal's J), durable; then the
  ** journal goes. */
  rc = tdeSealPage(pMain, aPage, P, 1, aSealed);
  if( rc==SQLITE_OK ) rc = pMain->pReal->pMethods->xWrite(pMain->pReal, aSealed, (int)P, tdeMainPageOff(pMain, P, 1));
  tdePage1Forget(pMain);
  if( rc==SQLITE_OK ) rc = pMain->pReal->pMethods->xSync(pMain->pReal, SQLITE_SYNC_NORMAL);
  if( rc ) goto done;
  jf.pReal->pMethods->xClose(jf.pReal);
  jf.pReal->pMethods = 0;
  rc = pOrig->xDelete(pOrig, zJ, 0);
  bCreated = 0;

done:
  if( jf.pReal ){
    if( jf.pReal->pMethods ) jf.pReal->pMethods->xClose(jf.pReal);
    /* A journal that never became hot protects nothing: remove it.  A hot
    ** one stays after a failure once page 1 may have been written: SQLite
    ** plays it back when the connection's lock is released. */
    if( bCreated && rc && !bHot ) pOrig->xDelete(pOrig, zJ, 0);
    sqlite3_free(jf.pReal);
  }
  tdeJournalFree(&jf);       /* wipes its scratch; J leaves the main handle */
  if( jf.aBuf ){ tdeWipe(jf.aBuf, TDE_MAX_PAGE); sqlite3_free(jf.aBuf); }
  if( aPage ){ tdeWipe(aPage, P); sqlite3_free(aPage); }
  sqlite3_free(aSealed);
  sqlite3_free(zJ);
  return rc;
}

/*
** The caller's entry (api.c, after a rotation or migration -- a header
** update to sequence s -- that keyops.c wrote): on a version-2 database in
** rollback mode, seal page 1 again, so that the header region saved before
** the update, put back, is refused at the open.  Skipped, with a log line,
** when a journal file is kept (PERSIST, TRUNCATE); nothing to do in WAL
** mode.  Never fails the key operation: the header update is already
** durable.
*/
void tdeJournalResealPage1(TdeFile *pMain){
  int rc;
  if( !pMain->pDb->pKeys || pMain->pDb->pKeys->hdr.version<TDE_FORMAT_V2 || pMain->pDb->pWalFile || pMain->pDb->pShm0 ) return;
  rc = jResealPage1(pMain);
  if( rc ){
    tdeLog(TDE_LOG_WARNING, "%s: header updated, but page 1 was not sealed again (%s): a header "
           "region put back now is detected from the next write of a page on",
           pMain->zName ? pMain->zName : "", rc==SQLITE_BUSY ? "a journal file is kept" : sqlite3_errstr(rc));
    tdeErrClear();
  }
}
