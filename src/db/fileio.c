/*
** The lowest layer of the tde shim: what every file kind shares and that
** calls nothing else of src/vfs -- raw reads of the file below (with the
** test fault hook), the per-handle scratch buffer, the tde_rc -> SQLite
** result-code mapping, the page sizes SQLite can use in probe order, the
** page count of a main file and where its pages lie (keys/layout.h, with
** the header's format version), and the registry of open main files.  The
** other files of src/vfs call down into this one; it calls up into none
** (issue 12: vfs.c was a hub that eight files called back into).
**
** Must never: interpret page content, hold keys, or talk to a keystore.
*/
#include "vfs/vfs_int.h"

/* Page sizes in the order discovery tries them: the default first, then
** the sizes most databases use. */
const uint32_t tdeProbePgsz[TDE_N_PROBE_PGSZ] = { 4096, 1024, 512, 2048, 8192, 16384, 32768, 65536 };

int tdeSqliteRc(int rc){
  switch( rc ){
    case TDE_OK:          return SQLITE_OK;
    case TDE_NOMEM:       return SQLITE_NOMEM;
    case TDE_IO:          return SQLITE_IOERR;
    case TDE_AUTH:        return SQLITE_IOERR_AUTH;
    case TDE_BADPASSWORD:
    case TDE_NOKEYSTORE:
    case TDE_NOKEY:
    case TDE_CONFIG:      return SQLITE_AUTH;
    case TDE_FORMAT:
    case TDE_PLAINTEXT:   return SQLITE_NOTADB;
    case TDE_LOCKED:      return SQLITE_BUSY;
    default:              return SQLITE_ERROR;
  }
}

/* Scratch buffer big enough for the largest page plus a WAL frame header,
** or two stored blocks. */
int tdeScratch(TdeFile *p){
  if( !p->aBuf ){
    p->aBuf = sqlite3_malloc(TDE_MAX_PAGE + 2*(TDE_BLOCK_MAX + TDE_TRAILER_SIZE) + 64);
    if( !p->aBuf ) return SQLITE_NOMEM;
  }
  return SQLITE_OK;
}

/* Read exactly n bytes at iOfst from the file below.  *pnGot gets the
** bytes actually present (short reads are zero-filled by the VFS below). */
int tdeRealRead(TdeFile *p, void *z, int n, sqlite3_int64 iOfst, int *pbShort){
  int rc;
  *pbShort = 0;
  if( tdeFaultHook ){
    int eSite = p->eKind==TDE_KIND_WAL ? TDE_FAULT_READ_WAL
              : p->eKind==TDE_KIND_JOURNAL ? TDE_FAULT_READ_JOURNAL
              : iOfst<TDE_HEADER_BYTES ? TDE_FAULT_READ_HEADER : TDE_FAULT_READ_PAGE;
    if( p->eKind!=TDE_KIND_TEMP && tdeFaultHook(eSite) ){
      memset(z, 0, (size_t)n);
      return SQLITE_IOERR_READ;
    }
  }
  rc = p->pReal->pMethods->xRead(p->pReal, z, n, iOfst);
  if( rc==SQLITE_IOERR_SHORT_READ ){ *pbShort = 1; rc = SQLITE_OK; }
  return rc;
}

TdeLayout tdeMainLayout(const TdeFile *p, uint32_t pgsz){
  TdeLayout L;
  const TdeDbKeys *k = p->pDb->pKeys;
  L.version = k ? (int)k->hdr.version : TDE_FORMAT_V2;
  L.pgsz = pgsz;
  L.cursor = k && L.version>=TDE_FORMAT_V3 ? k->hdr.upgradeCursor : 0;
  return L;
}

sqlite3_int64 tdeMainPageOff(const TdeFile *p, uint32_t pgsz, uint32_t pgno){
  TdeLayout L = tdeMainLayout(p, pgsz);
  return tdeLayoutPageOff(&L, pgno);
}

uint32_t tdeMainWholePages(const TdeFile *p, uint32_t pgsz, sqlite3_int64 nPhys){
  TdeLayout L = tdeMainLayout(p, pgsz);
  return tdeLayoutWholePages(&L, nPhys);
}

int tdeMainPageCount(TdeFile *p, sqlite3_int64 *pn){
  sqlite3_int64 sz = 0;
  int rc = p->pReal->pMethods->xFileSize(p->pReal, &sz);
  *pn = 0;
  if( rc ) return rc;
  if( p->pDb->pgsz ){
    TdeLayout L = tdeMainLayout(p, p->pDb->pgsz);
    *pn = tdeLayoutWholePages(&L, sz);
  }
  return SQLITE_OK;
}

/* ---- registry of open main files --------------------------------------- */

/*
** Every open tde main file, so a journal or WAL finds its database however
** many VFSes sit above tde (sqlite3_database_file_object() returns the
** topmost VFS's file, not ours).  Keyed by path; among several connections
** to one path, SQLite's own layout decides: the pager allocates a
** database's name and its journal and WAL names in one block, so the main
** file whose name lies closest below the journal's name is its own.
** Pointers are only compared, never followed outside a registered name.
*/
static TdeFile *tdeMainList;

static sqlite3_mutex *tdeMainListMutex(void){
  return sqlite3_mutex_alloc(SQLITE_MUTEX_STATIC_VFS2);
}

void tdeMainListAdd(TdeFile *p){
  sqlite3_mutex *m = tdeMainListMutex();
  sqlite3_mutex_enter(m);
  p->pDb->pNextMain = tdeMainList;
  tdeMainList = p;
  sqlite3_mutex_leave(m);
}

void tdeMainListRemove(TdeFile *p){
  sqlite3_mutex *m = tdeMainListMutex();
  sqlite3_mutex_enter(m);
  for(TdeFile **pp=&tdeMainList; *pp; pp=&(*pp)->pDb->pNextMain){
    if( *pp==p ){ *pp = p->pDb->pNextMain; break; }
  }
  p->pDb->pNextMain = 0;
  sqlite3_mutex_leave(m);
}

TdeFile *tdeMainFind(const char *zName){
  static const char *const azSuffix[] = { "-journal", "-wal" };
  sqlite3_mutex *m;
  TdeFile *pBest = 0;
  size_t nName, nDb = 0;
  if( !zName ) return 0;
  nName = strlen(zName);
  for(size_t i=0; i<TDE_ARRAY_SIZE(azSuffix); i++){
    size_t n = strlen(azSuffix[i]);
    if( nName>n && strcmp(zName+nName-n, azSuffix[i])==0 ){ nDb = nName-n; break; }
  }
  if( !nDb ) return 0;
  m = tdeMainListMutex();
  sqlite3_mutex_enter(m);
  for(TdeFile *q=tdeMainList; q; q=q->pDb->pNextMain){
    if( !q->zName || strlen(q->zName)!=nDb || memcmp(q->zName, zName, nDb)!=0 ) continue;
    if( !pBest ){ pBest = q; continue; }
    {
      uintptr_t j = (uintptr_t)zName, a = (uintptr_t)q->zName, b = (uintptr_t)pBest->zName;
      if( a<j && (b>j || a>b) ) pBest = q;
    }
  }
  sqlite3_mutex_leave(m);
  return pBest;
}

TdeFile *tdeMainOfDb(sqlite3 *db, const char *zSchema){
  sqlite3_file *pFile = 0;
  const char *zDb;
  sqlite3_mutex *m;
  TdeFile *pFound = 0;
  if( sqlite3_file_control(db, zSchema, SQLITE_FCNTL_FILE_POINTER, &pFile)!=SQLITE_OK || !pFile ) return 0;
  if( pFile->pMethods==&tdeIoMethods ){
    return ((TdeFile*)pFile)->eKind==TDE_KIND_MAIN ? (TdeFile*)pFile : 0;
  }
  /* Another VFS above tde: SQLite's name for the file is the one tde got. */
  zDb = sqlite3_db_filename(db, zSchema);
  if( !zDb ) return 0;
  m = tdeMainListMutex();
  sqlite3_mutex_enter(m);
  for(TdeFile *q=tdeMainList; q && !pFound; q=q->pDb->pNextMain){
    if( q->zName==zDb ) pFound = q;
  }
  sqlite3_mutex_leave(m);
  return pFound;
}

