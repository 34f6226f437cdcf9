/*
** The page map (format version 2 and 3, WAL mode): it lists the GCM tag
** (first 8 bytes) of every data page as it is in the database file, so a
** page rolled back to an older authentic version of itself is refused.
** Version 2 keeps it in DB-tdemap; version 3 in the database file's own
** map regions (keys/layout.h), the same slots at other places (MapStore
** below), so no DB-tdemap is ever made for it.
** The map needs no key: its root, in the authenticated header, covers it.
** Layout, reader rule, folds and builds: docs/FORMAT.md "Page rollback:
** the page map".
**
** This file sits above rekey.c and keyops.c: it calls the header update
** (keyops), the rekey's state (rekey), the page-size probe (page1) and
** the raw I/O of fileio.c.  The pipeline reaches it through its hooks
** (tdeMapHook, raised through hooks.c): the check of every page a read
** returns (vfs.c), the drop before a write outside the WAL (vfs.c), the
** fold of a WAL generation that ends (wal.c: restart, truncation,
** deletion).  journal.c, wal.c (a fold whose end is unknown) and
** anchor.c (tde_db_remap) drop the map directly.
*/
#include "vfs/vfs_int.h"

#define MAP_SLOT        4096
#define MAP_PER_PAGE    508                    /* entries per map page */
#define MAP_ENTRY       8                      /* bytes of each tag kept */
#define MAP_HASH_OFF    (MAP_SLOT - 16)
#define MAP_TAG_OFF     24                     /* the GCM tag within a trailer */

struct TdeMap {
  uint8_t aRoot[16];          /* the header root this map matched */
  uint64_t G;                 /* its fold generation */
  uint32_t n;                 /* map pages */
  uint8_t *aTag;              /* n * MAP_PER_PAGE entries */
  uint8_t *aSlot;             /* per map page: slot in force (0/1) */
  uint64_t *aOther;           /* per map page: g of the other slot if valid, else 0 */
  uint8_t (*aHash)[16];       /* per map page: hash field of the slot in force */
  char *zPath;                /* DB-tdemap while it is open (mapOpen .. mapClose) */
};

static const char *mapDbName(TdeFile *p){ return p->zName ? p->zName : "(database)"; }

static int mapZero16(const uint8_t *a){
  static const uint8_t z[16];
  return memcmp(a, z, 16)==0;
}

/* Is the page map in use for this handle's database? */
int tdeMapActive(TdeFile *p){
  const TdeDbKeys *k = p->pDb->pKeys;
  return k && k->hdr.version>=TDE_FORMAT_V2 && !mapZero16(k->hdr.aMapRoot) && !p->pDb->repl.bStandby;
}

void tdeMapFree(TdeFile *p){
  struct TdeMap *m = p->pDb->map.pMap;
  if( !m ) return;
  sqlite3_free(m->aTag);
  sqlite3_free(m->aSlot);
  sqlite3_free(m->aOther);
  sqlite3_free(m->aHash);
  sqlite3_free(m->zPath);
  sqlite3_free(m);
  p->pDb->map.pMap = 0;
}

static int mapRoom(struct TdeMap *m, uint32_t n){
  void *a, *b, *c, *d;
  if( n<=m->n && m->aTag ) return SQLITE_OK;
  a = sqlite3_realloc64(m->aTag, (sqlite3_uint64)n * MAP_PER_PAGE * MAP_ENTRY + 1);
  if( a ) m->aTag = a;
  b = sqlite3_realloc64(m->aSlot, (sqlite3_uint64)n + 1);
  if( b ) m->aSlot = b;
  c = sqlite3_realloc64(m->aOther, ((sqlite3_uint64)n + 1) * sizeof(uint64_t));
  if( c ) m->aOther = c;
  d = sqlite3_realloc64(m->aHash, ((sqlite3_uint64)n + 1) * 16);
  if( d ) m->aHash = d;
  if( !a || !b || !c || !d ) return SQLITE_NOMEM;
  if( n>m->n ){
    memset(m->aTag + (size_t)m->n * MAP_PER_PAGE * MAP_ENTRY, 0, (size_t)(n - m->n) * MAP_PER_PAGE * MAP_ENTRY);
    memset(m->aSlot + m->n, 0, n - m->n);
    memset(m->aOther + m->n, 0, (n - m->n) * sizeof(uint64_t));
    memset(m->aHash + m->n, 0, (size_t)(n - m->n) * 16);
  }
  return SQLITE_OK;
}

/* The hash field of a slot: SHA-256("TM1\0" || dbid || bytes [0, 4080)). */
static int mapSlotHash(const uint8_t *dbid, const uint8_t *aSlot, uint8_t out[16]){
  uint8_t *a = sqlite3_malloc(4 + TDE_DBID_BYTES + MAP_HASH_OFF);
  uint8_t full[32];
  int rc;
  if( !a ) return SQLITE_NOMEM;
  memcpy(a, "TM1", 4);
  memcpy(a+4, dbid, TDE_DBID_BYTES);
  memcpy(a+4+TDE_DBID_BYTES, aSlot, MAP_HASH_OFF);
  rc = tdeSha256(a, 4 + TDE_DBID_BYTES + MAP_HASH_OFF, full) ? SQLITE_IOERR : SQLITE_OK;
  memcpy(out, full, 16);
  sqlite3_free(a);
  return rc;
}

/* R = SHA-256("TR1\0" || dbid || G || n || hash fields of the slots in force). */
static int mapRoot(const uint8_t *dbid, uint64_t G, uint32_t n, uint8_t (*aHash)[16], uint8_t out[16]){
  size_t nBuf = 4 + TDE_DBID_BYTES + 8 + 4 + (size_t)n*16;
  uint8_t *a = sqlite3_malloc64(nBuf);
  uint8_t full[32];
  int rc;
  if( !a ) return SQLITE_NOMEM;
  memcpy(a, "TR1", 4);
  memcpy(a+4, dbid, TDE_DBID_BYTES);
  tdePut64(a+20, G);
  tdePut32(a+28, n);
  if( n ) memcpy(a+32, aHash, (size_t)n*16);
  rc = tdeSha256(a, nBuf, full) ? SQLITE_IOERR : SQLITE_OK;
  memcpy(out, full, 16);
  sqlite3_free(a);
  /* A zero root means "no map": never produce one. */
  if( rc==SQLITE_OK && mapZero16(out) ) out[15] = 1;
  return rc;
}

/* Open DB-tdemap through the VFS below tde.  SQLITE_CANTOPEN if it does
** not exist and bCreate is 0.  An existing file is opened without
** SQLITE_OPEN_CREATE: the unix VFS syncs the directory at the first sync
** of a journal-type file opened with it, which a fold of an existing map
** does not need (it made every fold pay a directory fsync). */
static int mapOpen(TdeFile *p, int bCreate, sqlite3_file **ppFd){
  sqlite3_vfs *pOrig = (sqlite3_vfs*)tdeVfs.pAppData;
  char *zPath;
  sqlite3_file *pFd;
  int bExists = 0, outFlags = 0, rc;
  *ppFd = 0;
  if( !p->zName ) return SQLITE_CANTOPEN;
  zPath = sqlite3_mprintf("%s-tdemap", p->zName);
  if( !zPath ) return SQLITE_NOMEM;
  rc = pOrig->xAccess(pOrig, zPath, SQLITE_ACCESS_EXISTS, &bExists);
  if( rc || (!bCreate && !bExists) ){ sqlite3_free(zPath); return rc ? rc : SQLITE_CANTOPEN; }
  pFd = sqlite3_malloc(pOrig->szOsFile);
  if( !pFd ){ sqlite3_free(zPath); return SQLITE_NOMEM; }
  memset(pFd, 0, (size_t)pOrig->szOsFile);
  rc = pOrig->xOpen(pOrig, zPath, pFd,
                    SQLITE_OPEN_READWRITE|(bCreate && !bExists ? SQLITE_OPEN_CREATE : 0)|SQLITE_OPEN_MAIN_JOURNAL,
                    &outFlags);
  /* The path must outlive the file (the unix VFS keeps the pointer). */
  if( rc ){
    if( pFd->pMethods ) pFd->pMethods->xClose(pFd);
    sqlite3_free(pFd);
    sqlite3_free(zPath);
    return rc;
  }
  *ppFd = pFd;
  /* Freed with the file by mapClose (the map in memory exists while the
  ** file is open: mapLoad and mapFoldWrite make it first). */
  sqlite3_free(p->pDb->map.pMap->zPath);
  p->pDb->map.pMap->zPath = zPath;
  return SQLITE_OK;
}

static void mapClose(TdeFile *p, sqlite3_file *pFd){
  if( pFd ){
    if( pFd->pMethods ) pFd->pMethods->xClose(pFd);
    sqlite3_free(pFd);
  }
  if( p->pDb->map.pMap ){
    sqlite3_free(p->pDb->map.pMap->zPath);
    p->pDb->map.pMap->zPath = 0;
  }
}

/* Where the map's slots are: DB-tdemap (version 2: map page k, slot s at
** (2k + s) * 4096) or the database file itself (version 3: slot s of map
** page k in region k, keys/layout.h), open from mapStoreOpen to
** mapStoreClose.  In the file, the database's own handle below the shim
** is used and never closed here, and a sync of the store syncs the
** database file. */
typedef struct MapStore {
  sqlite3_file *pFd;
  int bInFile;
  TdeLayout L;
} MapStore;

/* Version 3 with no move in progress: while the upgrade from version 2
** moves pages (cursor != 0) the map in force is still DB-tdemap's. */
static int mapInFile(TdeFile *p){
  return p->pDb->pKeys && p->pDb->pKeys->hdr.version>=TDE_FORMAT_V3 && p->pDb->pKeys->hdr.upgradeCursor==0;
}

static int mapStoreOpen(TdeFile *p, int bCreate, MapStore *s){
  memset(s, 0, sizeof(*s));
  if( mapInFile(p) ){
    if( !p->pDb->pgsz ) return SQLITE_IOERR;      /* callers found the page size first */
    s->pFd = p->pReal;
    s->bInFile = 1;
    s->L = tdeMainLayout(p, p->pDb->pgsz);
    return SQLITE_OK;
  }
  return mapOpen(p, bCreate, &s->pFd);
}

static void mapStoreClose(TdeFile *p, MapStore *s){
  mapClose(p, s->bInFile ? 0 : s->pFd);
  s->pFd = 0;
}

static sqlite3_int64 mapSlotOff(const MapStore *s, uint32_t k, int iSlot){
  if( s->bInFile ) return tdeLayoutMapOff(&s->L, k, iSlot);
  return ((sqlite3_int64)k*2 + iSlot)*MAP_SLOT;
}

/* Read both slots of map page k into aBuf (2 * MAP_SLOT bytes); a slot
** beyond the end of the store reads as zeros (invalid), *pbShort set. */
static int mapReadSlots(const MapStore *s, uint32_t k, uint8_t *aBuf, int *pbShort){
  int rc = SQLITE_OK;
  for(int i=0; rc==SQLITE_OK && i<2; i++){
    int n = s->bInFile ? MAP_SLOT : 2*MAP_SLOT;
    if( !s->bInFile && i==1 ) break;              /* DB-tdemap: both in one read */
    rc = s->pFd->pMethods->xRead(s->pFd, aBuf + i*MAP_SLOT, n, mapSlotOff(s, k, i));
    if( rc==SQLITE_IOERR_SHORT_READ ){ *pbShort = 1; rc = SQLITE_OK; }
  }
  return rc;
}

/* The physical size the map in force needs (version 3: the end of its
** last region), 0 when it has none: a truncation of the database file
** never cuts the map the header names (the fold after it drops the map
** pages past the new size, and a later truncation cuts their regions).
** The xFileSize rule counts no page for a region the file ends with. */
sqlite3_int64 tdeMapKeepBytes(TdeFile *p){
  const TdeDbKeys *k = p->pDb->pKeys;
  TdeLayout L;
  if( !mapInFile(p) || !p->pDb->pgsz || mapZero16(k->hdr.aMapRoot) || k->hdr.mapPages==0 ) return 0;
  L = tdeMainLayout(p, p->pDb->pgsz);
  return tdeLayoutMapOff(&L, k->hdr.mapPages - 1, 0) + tdeLayoutRegionBytes(p->pDb->pgsz);
}

/* Log and record a map that cannot be used. */
static _Thread_local int bMapQuiet;   /* a load that will be retried: no log line */
static int mapRefuseInFile(TdeFile *p, const char *zWhy){
  tdeErr(TDE_AUTH, "%s: the page map the database file itself holds does not match its header "
         "(%s); nothing was read or changed. `sqlite-tde remap` accepts whatever pages are there "
         "now, including a rollback: restore from a backup instead unless you know the pages are "
         "the ones you want", mapDbName(p), zWhy);
  tdeLog(TDE_LOG_ERROR, "%s", tde_last_error());
  p->nAuthFail++;
  return SQLITE_IOERR_AUTH;
}

static int mapRefuse(TdeFile *p, const char *zWhy){
  if( bMapQuiet ) return SQLITE_IOERR_AUTH;
  if( mapInFile(p) ) return mapRefuseInFile(p, zWhy);
  /* Never suggest remap here: a copy made without the map and pages
  ** rolled back with the map removed look the same, and remap accepts
  ** both (README "The page map": how to tell them apart first). */
  tdeErr(TDE_AUTH, "%s-tdemap does not match the database header (%s): the page map was "
         "deleted, damaged or put back from another time, or older pages were put into the "
         "database with it; nothing was read or changed. Restore the database, its -wal and "
         "%s-tdemap from one backup. `sqlite-tde remap` would accept whatever pages the file "
         "holds now, a rollback included: check the file against a backup first",
         mapDbName(p), zWhy, mapDbName(p));
  tdeLog(TDE_LOG_ERROR, "%s", tde_last_error());
  p->nAuthFail++;
  return SQLITE_IOERR_AUTH;
}

/*
** Load the map the header in force names into p->pDb->map.pMap.  SQLITE_OK, or
** SQLITE_IOERR_AUTH (missing, damaged, another time) with the reason
** logged, or an I/O / memory error.
*/
static int mapLoad(TdeFile *p){
  const TdeHeader *h = &p->pDb->pKeys->hdr;
  struct TdeMap *m;
  MapStore st;
  uint8_t *aBuf = 0;
  uint8_t aRoot[16];
  int rc, bShort = 0;
  memset(&st, 0, sizeof(st));
  tdeMapFree(p);
  m = sqlite3_malloc(sizeof(*m));
  if( !m ) return SQLITE_NOMEM;
  memset(m, 0, sizeof(*m));
  p->pDb->map.pMap = m;
  m->G = h->mapGen;
  rc = mapRoom(m, h->mapPages);
  if( rc ) goto fail;
  m->n = h->mapPages;
  rc = mapStoreOpen(p, 0, &st);
  if( rc==SQLITE_CANTOPEN ){ rc = mapRefuse(p, "the file is missing"); goto fail; }
  if( rc ) goto fail;
  aBuf = sqlite3_malloc(2*MAP_SLOT);
  if( !aBuf ){ rc = SQLITE_NOMEM; goto fail; }
  for(uint32_t k=0; k<m->n; k++){
    int iBest = -1;
    uint64_t gBest = 0, gOther = 0;
    uint8_t aHash[2][16];
    rc = mapReadSlots(&st, k, aBuf, &bShort);      /* zero-filled if short: invalid slots */
    if( rc ) goto fail;
    for(int s=0; s<2; s++){
      const uint8_t *a = aBuf + s*MAP_SLOT;
      uint64_t g = tdeGet64(a);
      rc = mapSlotHash(h->dbid, a, aHash[s]);
      if( rc ) goto fail;
      if( g==0 || tdeGet32(a+8)!=k || tdeGet32(a+12)!=0 || !tdeCtEqual(aHash[s], a+MAP_HASH_OFF, 16) ) continue;
      if( g<=m->G && (iBest<0 || g>gBest) ){
        if( iBest>=0 ) gOther = gBest;
        iBest = s; gBest = g;
      }else{
        if( g>gOther ) gOther = g;
      }
    }
    if( iBest<0 ){
      rc = mapRefuse(p, st.bInFile && bShort ? "the file is shorter than its own map: a copy cut short "
                     "or a truncated file" : "a map page has no valid slot");
      goto fail;
    }
    m->aSlot[k] = (uint8_t)iBest;
    m->aOther[k] = gOther;
    memcpy(m->aHash[k], aHash[iBest], 16);
    memcpy(m->aTag + (size_t)k*MAP_PER_PAGE*MAP_ENTRY, aBuf + iBest*MAP_SLOT + 16, MAP_PER_PAGE*MAP_ENTRY);
  }
  rc = mapRoot(h->dbid, m->G, m->n, m->aHash, aRoot);
  if( rc ) goto fail;
  if( !tdeCtEqual(aRoot, h->aMapRoot, 16) ){
    rc = mapRefuse(p, st.bInFile && bShort ? "the file is shorter than its own map: a copy cut short "
                   "or a truncated file" : "its root differs");
    goto fail;
  }
  memcpy(m->aRoot, aRoot, 16);
  sqlite3_free(aBuf);
  mapStoreClose(p, &st);
  return SQLITE_OK;
fail:
  sqlite3_free(aBuf);
  mapStoreClose(p, &st);
  tdeMapFree(p);
  return rc;
}

/* Does the loaded map match the header held now? */
static int mapCurrent(TdeFile *p){
  return p->pDb->map.pMap && memcmp(p->pDb->map.pMap->aRoot, p->pDb->pKeys->hdr.aMapRoot, 16)==0;
}

/*
** Check a database page's tag (aTag: its 16 trailer tag bytes) against the
** map.  SQLITE_OK: it matches; SQLITE_NOTFOUND: it does not (the caller
** tries the WAL, then refuses); other: the map could not be used.
*/
static int mapCheck(TdeFile *p, uint32_t pgno, const uint8_t *aTag){
  struct TdeMap *m;
  uint64_t i;
  if( !tdeMapActive(p) || (p->pDb->mBypass & TDE_BYPASS_MAP) ) return SQLITE_OK;
  if( !mapCurrent(p) ){
    int rc = SQLITE_IOERR_AUTH;
    /* A connection holding an older header may find its slots rewritten by
    ** a later fold: read the header again and retry while it moves. */
    for(int iTry=0; iTry<8 && rc==SQLITE_IOERR_AUTH; iTry++){
      uint64_t G = p->pDb->pKeys->hdr.mapGen;
      bMapQuiet = iTry<7;
      rc = mapLoad(p);
      bMapQuiet = 0;
      if( rc!=SQLITE_IOERR_AUTH ) break;
      if( tdeMainRefresh(p)!=SQLITE_OK ) break;
      if( !tdeMapActive(p) ) return SQLITE_OK;
      if( p->pDb->pKeys->hdr.mapGen==G ){
        bMapQuiet = 0;
        rc = mapLoad(p);        /* the header did not move: this is the answer (logged) */
        break;
      }
    }
    if( rc ) return rc;
  }
  m = p->pDb->map.pMap;
  i = (uint64_t)pgno - 1;
  if( pgno==0 || i >= (uint64_t)m->n * MAP_PER_PAGE ) return SQLITE_NOTFOUND;
  return memcmp(m->aTag + i*MAP_ENTRY, aTag, MAP_ENTRY)==0 ? SQLITE_OK : SQLITE_NOTFOUND;
}

static int mapRefusePage(TdeFile *p, uint32_t pgno){
  if( mapInFile(p) ){
    tdeErr(TDE_AUTH, "%s: page %u does not match the page map the database file itself holds (the "
           "file's pages were rolled back, in part or whole, or edited; the page was not returned "
           "and nothing was changed). `sqlite-tde remap` accepts whatever pages are there now, "
           "including a rollback: restore from a backup instead unless you know the pages are the "
           "ones you want", mapDbName(p), pgno);
    tdeLog(TDE_LOG_ERROR, "%s", tde_last_error());
    p->nAuthFail++;
    return SQLITE_IOERR_AUTH;
  }
  tdeErr(TDE_AUTH, "%s: page %u is an older version than the page map records (the database "
         "file was rolled back, in part or whole, to an older copy; the page was not returned and "
         "nothing was changed): restore the database, its -wal and %s-tdemap from one backup",
         mapDbName(p), pgno, mapDbName(p));
  tdeLog(TDE_LOG_ERROR, "%s", tde_last_error());
  p->nAuthFail++;
  return SQLITE_IOERR_AUTH;
}

/* ---- changes ------------------------------------------------------------ */

typedef struct MapEdit {
  const uint8_t *aRoot;
  uint64_t G;
  uint32_t n;
} MapEdit;

static int editMap(TdeFile *p, TdeHeader *h, void *pArg){
  const MapEdit *e = pArg;
  (void)p;
  if( h->version<TDE_FORMAT_V2 ) return SQLITE_MISUSE;
  if( e->aRoot ) memcpy(h->aMapRoot, e->aRoot, 16);
  else memset(h->aMapRoot, 0, 16);
  h->mapGen = e->G;
  h->mapPages = e->n;
  return SQLITE_OK;
}


/* A write outside the WAL is about to change pages: no map from now on
** (docs/FORMAT.md "Writes outside the WAL").  Caller holds the write lock. */
int tdeMapDrop(TdeFile *p){
  MapEdit e = { 0, 0, 0 };
  int rc;
  e.G = 0;
  if( !p->pDb->pKeys || p->pDb->pKeys->hdr.version<TDE_FORMAT_V2 || p->pDb->repl.bStandby ) return SQLITE_OK;
  rc = tdeMainRefreshIfChanged(p);
  if( rc ) return rc;
  if( mapZero16(p->pDb->pKeys->hdr.aMapRoot) ) return SQLITE_OK;
  e.G = p->pDb->pKeys->hdr.mapGen + 1;     /* G never goes back (the slot order) */
  rc = tdeMainFreshnessUpdate(p, editMap, &e);
  if( rc==SQLITE_OK ) tdeMapFree(p);
  return rc;
}

/* Tags of pages 1..nPage from the database file (the map's build). */
static int mapReadFileTags(TdeFile *p, struct TdeMap *m, uint32_t nPage){
  uint32_t pgsz = p->pDb->pgsz;
  for(uint32_t pg=1; pg<=nPage; pg++){
    uint8_t aTag[MAP_ENTRY];
    int bShort = 0;
    int rc = tdeRealRead(p, aTag, MAP_ENTRY,
                         tdeMainPageOff(p, pgsz, pg) + pgsz - TDE_TRAILER_SIZE + MAP_TAG_OFF, &bShort);
    if( rc ) return rc;
    if( bShort ) memset(aTag, 0, MAP_ENTRY);
    memcpy(m->aTag + (size_t)(pg-1)*MAP_ENTRY, aTag, MAP_ENTRY);
  }
  return SQLITE_OK;
}

/* The map a fold starts from: the one on disk (not the copy held: another
** process's fold that failed may have left slots of the next generation,
** aOther), or under a zero root (bBuild) one built from the database
** file's tags.  On failure the caller frees p->pDb->map.pMap. */
static int mapFoldBase(TdeFile *p, int bBuild){
  struct TdeMap *m;
  sqlite3_int64 sz = 0;
  TdeLayout L = tdeMainLayout(p, p->pDb->pgsz);
  uint32_t nFile;
  int rc;
  if( !bBuild ) return mapLoad(p);
  tdeMapFree(p);
  m = sqlite3_malloc(sizeof(*m));
  if( !m ) return SQLITE_NOMEM;
  memset(m, 0, sizeof(*m));
  p->pDb->map.pMap = m;
  rc = p->pReal->pMethods->xFileSize(p->pReal, &sz);
  if( rc ) return rc;
  nFile = tdeLayoutWholePages(&L, sz);
  rc = mapRoom(m, (nFile + MAP_PER_PAGE - 1) / MAP_PER_PAGE);
  if( rc ) return rc;
  m->n = (nFile + MAP_PER_PAGE - 1) / MAP_PER_PAGE;
  return mapReadFileTags(p, m, nFile);
}

/* The generation's frames into p->pDb->map.pMap (see tdeMapFold), and which map
** pages changed: *paDirty (sqlite3_malloc'd, one byte per map page), *pbAny
** set if any did. */
static int mapFoldApply(TdeFile *p, int bBuild, const uint32_t *aPgno, const uint8_t *aTag,
                        uint32_t nFrame, uint32_t nDb, uint8_t **paDirty, int *pbAny){
  struct TdeMap *m = p->pDb->map.pMap;
  uint32_t nOld = bBuild ? 0 : m->n, nNew = m->n;
  uint8_t *aDirty;
  int rc;
  *pbAny = 0;
  /* Room for the pages the generation reaches. */
  for(uint32_t i=0; i<nFrame; i++){
    uint32_t need = (aPgno[i] + MAP_PER_PAGE - 1) / MAP_PER_PAGE;
    if( need>nNew ) nNew = need;
  }
  rc = mapRoom(m, nNew);
  if( rc ) return rc;
  *paDirty = aDirty = sqlite3_malloc64((sqlite3_uint64)nNew + 1);
  if( !aDirty ) return SQLITE_NOMEM;
  memset(aDirty, bBuild ? 1 : 0, (size_t)nNew + 1);
  for(uint32_t kk=nOld; kk<nNew; kk++){ aDirty[kk] = 1; m->aSlot[kk] = 1; m->aOther[kk] = 0; }
  m->n = nNew;
  for(uint32_t i=0; i<nFrame; i++){
    uint8_t *pE = m->aTag + (size_t)(aPgno[i]-1)*MAP_ENTRY;
    if( aPgno[i]==0 ) continue;
    if( memcmp(pE, aTag + (size_t)i*MAP_ENTRY, MAP_ENTRY)!=0 ){
      memcpy(pE, aTag + (size_t)i*MAP_ENTRY, MAP_ENTRY);
      aDirty[(aPgno[i]-1)/MAP_PER_PAGE] = 1;
    }
  }
  if( nFrame && nDb ){
    /* Pages beyond the size the last commit records are gone. */
    for(uint64_t i=nDb; i<(uint64_t)m->n*MAP_PER_PAGE; i++){
      uint8_t *pE = m->aTag + i*MAP_ENTRY;
      static const uint8_t z[MAP_ENTRY];
      if( memcmp(pE, z, MAP_ENTRY)!=0 ){ memset(pE, 0, MAP_ENTRY); aDirty[i/MAP_PER_PAGE] = 1; }
    }
  }
  if( nFrame && nDb && mapInFile(p) && (nDb + MAP_PER_PAGE - 1) / MAP_PER_PAGE < m->n ){
    /* Version 3: map pages past the database's size are dropped (their
    ** regions go with the truncation that follows; FORMAT.md "Folding"). */
    m->n = (nDb + MAP_PER_PAGE - 1) / MAP_PER_PAGE;
    *pbAny = 1;
  }
  /* A slot not in force that a fold which did not finish wrote with the
  ** generation about to be used would compete with the one in force. */
  for(uint32_t kk=0; kk<nOld && kk<m->n; kk++) if( m->aOther[kk] > m->G ) aDirty[kk] = 1;
  for(uint32_t kk=0; kk<m->n && !*pbAny; kk++) if( aDirty[kk] ) *pbAny = 1;
  return SQLITE_OK;
}

/* The changed map pages written as generation G + 1 into their slots not
** in force (slot 0 of a new file when building), synced, then the new
** root into the header (a freshness update). */
static int mapFoldWrite(TdeFile *p, int bBuild, const uint8_t *aDirty){
  TdeDbKeys *k = p->pDb->pKeys;
  struct TdeMap *m = p->pDb->map.pMap;
  MapStore st;
  uint8_t *aBuf = 0;
  uint8_t aRoot[16];
  MapEdit e;
  int rc;
  e.G = k->hdr.mapGen + 1;
  rc = mapStoreOpen(p, 1, &st);
  if( rc ) goto done;
  if( bBuild && !st.bInFile ){
    rc = st.pFd->pMethods->xTruncate(st.pFd, 0);
    if( rc ) goto done;
  }
  aBuf = sqlite3_malloc(MAP_SLOT);
  if( !aBuf ){ rc = SQLITE_NOMEM; goto done; }
  for(uint32_t kk=0; kk<m->n; kk++){
    int s;
    if( !aDirty[kk] ) continue;
    s = bBuild ? 0 : 1 - m->aSlot[kk];
    memset(aBuf, 0, MAP_SLOT);
    tdePut64(aBuf, e.G);
    tdePut32(aBuf+8, kk);
    memcpy(aBuf+16, m->aTag + (size_t)kk*MAP_PER_PAGE*MAP_ENTRY, MAP_PER_PAGE*MAP_ENTRY);
    rc = mapSlotHash(k->hdr.dbid, aBuf, aBuf+MAP_HASH_OFF);
    if( rc ) goto done;
    rc = st.pFd->pMethods->xWrite(st.pFd, aBuf, MAP_SLOT, mapSlotOff(&st, kk, s));
    if( rc ) goto done;
    memcpy(m->aHash[kk], aBuf+MAP_HASH_OFF, 16);
    m->aOther[kk] = 0;          /* the slot it replaces holds a generation <= G */
    m->aSlot[kk] = (uint8_t)s;
  }
  rc = st.pFd->pMethods->xSync(st.pFd, SQLITE_SYNC_NORMAL);
  if( rc ) goto done;
  rc = mapRoot(k->hdr.dbid, e.G, m->n, m->aHash, aRoot);
  if( rc ) goto done;
  e.aRoot = aRoot;
  e.n = m->n;
  rc = tdeMainFreshnessUpdate(p, editMap, &e);
  if( rc ) goto done;
  m->G = e.G;
  memcpy(m->aRoot, aRoot, 16);
done:
  sqlite3_free(aBuf);
  mapStoreClose(p, &st);
  return rc;
}

/*
** Fold a generation's frames into the map (docs/FORMAT.md "Folding"):
** aPgno[i], aTag[i*8..] for the committed frames in order (the newest of
** a page last), nDb the database size its last commit frame records (0:
** no frame).  Under a zero root the map is built from the database file
** first.  Caller holds the WAL write lock or the EXCLUSIVE lock.
*/
static int mapFold(TdeFile *p, const uint32_t *aPgno, const uint8_t *aTag, uint32_t nFrame, uint32_t nDb){
  TdeDbKeys *k = p->pDb->pKeys;
  uint8_t *aDirty = 0;
  int bBuild, bAny = 0, rc;

  if( !k || k->hdr.version<TDE_FORMAT_V2 || p->pDb->repl.bStandby || p->bReadOnly ) return SQLITE_OK;
  rc = tdeMainRefreshIfChanged(p);
  if( rc ) return rc;
  if( tdeRekeyInProgress(k) ) return SQLITE_OK;   /* the rekey rewrites pages outside the WAL */
  if( !p->pDb->pgsz ){
    rc = tdeScratch(p);
    if( rc==SQLITE_OK ) rc = tdeMainDiscoverPgsz(p);
    if( rc==SQLITE_IOERR_SHORT_READ ) return SQLITE_OK;   /* nothing in the file yet */
    if( rc ) return rc;
  }
  bBuild = mapZero16(k->hdr.aMapRoot);
  if( !bBuild && nFrame==0 ) return SQLITE_OK;   /* nothing changed */
  rc = mapFoldBase(p, bBuild);
  if( rc==SQLITE_OK ) rc = mapFoldApply(p, bBuild, aPgno, aTag, nFrame, nDb, &aDirty, &bAny);
  if( rc==SQLITE_OK && (bAny || bBuild) ) rc = mapFoldWrite(p, bBuild, aDirty);
  sqlite3_free(aDirty);
  /* Whatever failed, the map in memory may not be what is on disk. */
  if( rc ) tdeMapFree(p);
  return rc;
}

/*
** Version 3, before a truncation of the database file to nPage pages that
** would cut regions of the map in force: the map pages past the new size
** are dropped first, by a freshness update to {R' over the first n'
** slots in force, G + 1, n' = ceil(nPage / 508)} (entries of the last
** map page past nPage stay until the next fold rewrites it).  SQLITE_OK
** with the map shrunk, SQLITE_BUSY when a slot not in force carries
** generation G + 1 (a fold that did not finish: only a fold may take G + 1
** then), or an error; the caller then keeps the regions.  Caller: the
** checkpoint's truncation (every frame backfilled) or a write lock.
*/
int tdeMapShrink(TdeFile *p, uint32_t nPage){
  TdeDbKeys *k = p->pDb->pKeys;
  uint32_t n = (nPage + MAP_PER_PAGE - 1) / MAP_PER_PAGE;
  struct TdeMap *m;
  uint8_t aRoot[16];
  MapEdit e;
  int rc;
  if( !mapInFile(p) || mapZero16(k->hdr.aMapRoot) || n>=k->hdr.mapPages ) return SQLITE_OK;
  if( n==0 ) return tdeMapDrop(p);
  if( !mapCurrent(p) ){
    rc = mapLoad(p);
    if( rc ) return rc;
  }
  m = p->pDb->map.pMap;
  for(uint32_t kk=0; kk<n; kk++) if( m->aOther[kk] > m->G ) return SQLITE_BUSY;
  e.G = k->hdr.mapGen + 1;
  rc = mapRoot(k->hdr.dbid, e.G, n, m->aHash, aRoot);
  if( rc ) return rc;
  e.aRoot = aRoot;
  e.n = n;
  rc = tdeMainFreshnessUpdate(p, editMap, &e);
  if( rc ){ tdeMapFree(p); return rc; }
  m->G = e.G;
  m->n = n;
  memcpy(m->aRoot, aRoot, 16);
  return SQLITE_OK;
}

/* ---- the upgrade from version 2 (upgrade.c) ----------------------------- */

/* Does DB-tdemap hold the map the header names (nothing to check under a
** zero root)?  SQLITE_OK, or version 2's refusal (logged) or an error.
** Before the move writes anything: a map missing or from another time
** stops the upgrade with nothing changed. */
int tdeMapCheckSource(TdeFile *p){
  const TdeDbKeys *k = p->pDb->pKeys;
  if( !k || k->hdr.version<TDE_FORMAT_V2 || mapZero16(k->hdr.aMapRoot) ) return SQLITE_OK;
  if( mapInFile(p) ) return SQLITE_MISUSE;
  return mapLoad(p);
}

/*
** Step 3 of the move (docs/FORMAT.md "Upgrade from version 2"): header at
** version 3 with cursor 1 (the map in force still DB-tdemap's), caller
** holds the EXCLUSIVE lock.  The slot in force of each map page k <
** min(n, ceil(nPage / 508)) is copied verbatim (its own g) into slot 0 of
** region k, the rest of the region zero; the file is synced.  *pOut gets
** the header's map fields for the update to cursor 0: unchanged when no
** map page was dropped (no trust on first use), else the root over the
** pages kept with G + 1.  No map: nothing written, *pOut zero.
*/
int tdeMapIntoFile(TdeFile *p, uint32_t nPage, TdeMapFields *pOut){
  const TdeHeader *h = &p->pDb->pKeys->hdr;
  TdeLayout L3 = { TDE_FORMAT_V3, p->pDb->pgsz, 0 };
  int64_t nRegion = tdeLayoutRegionBytes(p->pDb->pgsz);
  uint32_t nKeep;
  struct TdeMap *m;
  sqlite3_file *pFd = 0;
  uint8_t *aBuf = 0;
  int rc;
  memset(pOut, 0, sizeof(*pOut));
  if( mapZero16(h->aMapRoot) ) return SQLITE_OK;
  rc = tdeMapCheckSource(p);
  if( rc ) return rc;
  m = p->pDb->map.pMap;
  nKeep = (nPage + MAP_PER_PAGE - 1) / MAP_PER_PAGE;
  if( nKeep>m->n ) nKeep = m->n;
  rc = mapOpen(p, 0, &pFd);
  if( rc==SQLITE_OK ){
    aBuf = sqlite3_malloc64((sqlite3_uint64)nRegion + 2*MAP_SLOT);
    if( !aBuf ) rc = SQLITE_NOMEM;
  }
  for(uint32_t kk=0; rc==SQLITE_OK && kk<nKeep; kk++){
    uint8_t *aPair = aBuf + nRegion, aHash[16];
    rc = pFd->pMethods->xRead(pFd, aPair, 2*MAP_SLOT, (sqlite3_int64)kk*2*MAP_SLOT);
    if( rc==SQLITE_IOERR_SHORT_READ ) rc = SQLITE_OK;   /* a slot never written: zeros */
    if( rc ) break;
    aPair += m->aSlot[kk]*MAP_SLOT;
    rc = mapSlotHash(h->dbid, aPair, aHash);
    if( rc==SQLITE_OK && !tdeCtEqual(aHash, m->aHash[kk], 16) ) rc = mapRefuse(p, "it changed during the upgrade");
    if( rc ) break;
    memset(aBuf, 0, (size_t)nRegion);
    memcpy(aBuf, aPair, MAP_SLOT);
    rc = p->pReal->pMethods->xWrite(p->pReal, aBuf, (int)nRegion, tdeLayoutMapOff(&L3, kk, 0));
  }
  if( rc==SQLITE_OK ) rc = p->pReal->pMethods->xSync(p->pReal, SQLITE_SYNC_NORMAL);
  if( rc==SQLITE_OK ){
    pOut->G = m->G;
    pOut->n = nKeep;
    memcpy(pOut->aRoot, m->aRoot, 16);
    if( nKeep<m->n ){
      pOut->G = m->G + 1;
      rc = mapRoot(h->dbid, pOut->G, nKeep, m->aHash, pOut->aRoot);
    }
  }
  sqlite3_free(aBuf);
  mapClose(p, pFd);
  tdeMapFree(p);
  return rc;
}

/* The version-2 map file, no longer used once the header says version 3
** with cursor 0: deleted (SQLITE_OK if there is none).  *pbRemoved (may be
** NULL): set if this call deleted one. */
int tdeMapRemoveFile(TdeFile *p, int *pbRemoved){
  sqlite3_vfs *pOrig = (sqlite3_vfs*)tdeVfs.pAppData;
  char *zPath;
  int bExists = 0, rc;
  if( pbRemoved ) *pbRemoved = 0;
  if( !p->zName ) return SQLITE_OK;
  zPath = sqlite3_mprintf("%s-tdemap", p->zName);
  if( !zPath ) return SQLITE_NOMEM;
  rc = pOrig->xAccess(pOrig, zPath, SQLITE_ACCESS_EXISTS, &bExists);
  if( rc==SQLITE_OK && bExists ){
    rc = pOrig->xDelete(pOrig, zPath, 1);
    if( rc==SQLITE_IOERR_DELETE_NOENT ) rc = SQLITE_OK;   /* another connection was first */
    else if( rc==SQLITE_OK && pbRemoved ) *pbRemoved = 1;
  }
  sqlite3_free(zPath);
  return rc;
}

/* ---- hooks -------------------------------------------------------------- */

/* A page a read returns, its stored tag aTag: the map's entry, else
** SQLITE_NOTFOUND (the pipeline looks in the WAL and reads the header
** again), at last (bLast) the refusal, logged and counted. */
static int mapPageCheck(TdeFile *p, uint32_t pgno, const uint8_t aTag[16], int bLast){
  int rc = mapCheck(p, pgno, aTag);
  if( rc==SQLITE_NOTFOUND && bLast ) rc = mapRefusePage(p, pgno);
  return rc;
}

/* A write outside the WAL is about to change pages: no map from now on. */
static int mapWriteOutsideWal(TdeFile *p){
  return tdeMapActive(p) ? tdeMapDrop(p) : SQLITE_OK;
}

const TdeMainHook tdeMapHook = {
  "page map",
  0,                          /* xLoaded */
  0,                          /* xWriteLock */
  0,                          /* xWriteEnd */
  0,                          /* xBeforeKeyDrop */
  0,                          /* xPageRescue */
  0,                          /* xWalLock */
  0,                          /* xWalEnd */
  mapPageCheck,               /* xPageCheck */
  mapWriteOutsideWal,         /* xWriteOutsideWal */
  mapFold,                    /* xWalFold */
};
