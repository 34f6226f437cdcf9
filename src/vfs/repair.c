/*
** The two calls that accept a database's state as it is, each on a
** connection of its own opened with one check off: tde_db_reanchor (the
** anchor comparison: a restored backup put back in place) and tde_db_remap
** (the page-map check: the pages as they are).  Public API, above the file
** kinds: each opens the database through SQLite with a bypass token in its
** URI (tdeBypassFromUri, called by vfs.c at the open, reads it) and calls
** down into the features (db/anchor.c tdeMainReanchor, db/pagemap.c); both
** are audited.  Must never: switch a check off for any connection but its
** own, or leave a token registered after it returns.
*/
#include "vfs/vfs_int.h"
#include "audit/audit.h"
#include "config.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/*
** Bypass tokens.  tde_db_reanchor (the anchor comparison) and tde_db_remap
** (the page map check) must open the database with a check off -- the one
** way to accept an older copy -- on their own connection only: not on
** another database the same thread opens meanwhile, nor on anyone else's.
** Each call draws a random token, registers it here with the checks it
** switches off, puts it in its own connection's URI (tde_bypass=TOKEN), and
** removes it when done.  A URI an application builds cannot carry a
** registered token: it exists only inside the call, in this process.
*/
#define BYPASS_SLOTS 16
static pthread_mutex_t bypassMutex = PTHREAD_MUTEX_INITIALIZER;
static struct { char zTok[33]; int mBypass; } aBypass[BYPASS_SLOTS];

/* Register a new token for mBypass into zTok[33]. */
static int bypassBegin(int mBypass, char *zTok){
  static const char hex[] = "0123456789abcdef";
  uint8_t a[16];
  int i, rc = TDE_LOCKED;
  zTok[0] = 0;
  if( tdeRandom(a, sizeof(a)) ) return tdeErr(TDE_CRYPTO, "no random bytes for a bypass token");
  for(i=0; i<16; i++){ zTok[2*i] = hex[a[i]>>4]; zTok[2*i+1] = hex[a[i]&15]; }
  zTok[32] = 0;
  pthread_mutex_lock(&bypassMutex);
  for(i=0; i<BYPASS_SLOTS; i++){
    if( aBypass[i].zTok[0]==0 ){
      memcpy(aBypass[i].zTok, zTok, 33);
      aBypass[i].mBypass = mBypass;
      rc = TDE_OK;
      break;
    }
  }
  pthread_mutex_unlock(&bypassMutex);
  if( rc ) return tdeErr(rc, "more than %d remap/reanchor calls at once", BYPASS_SLOTS);
  return TDE_OK;
}

static void bypassEnd(const char *zTok){
  int i;
  if( !zTok[0] ) return;
  pthread_mutex_lock(&bypassMutex);
  for(i=0; i<BYPASS_SLOTS; i++){
    if( strcmp(aBypass[i].zTok, zTok)==0 ){
      tdeWipe(aBypass[i].zTok, sizeof(aBypass[i].zTok));
      aBypass[i].mBypass = 0;
    }
  }
  pthread_mutex_unlock(&bypassMutex);
}

void tdeBypassFromUri(TdeFile *p, const char *zName){
  const char *z = sqlite3_uri_parameter(zName, "tde_bypass");
  int i;
  if( !z || strlen(z)!=32 ) return;
  pthread_mutex_lock(&bypassMutex);
  for(i=0; i<BYPASS_SLOTS; i++){
    if( aBypass[i].zTok[0] && strcmp(aBypass[i].zTok, z)==0 ) p->pDb->mBypass = aBypass[i].mBypass;
  }
  pthread_mutex_unlock(&bypassMutex);
}

/* ---- the connection they work on ------------------------------------------ */

/* zIn percent-encoded for a URI path or query value. */
static char *repairUriEscape(const char *zIn){
  static const char hex[] = "0123456789ABCDEF";
  size_t n = strlen(zIn), j = 0;
  char *z = sqlite3_malloc64(3*n + 1);
  if( !z ) return 0;
  for(size_t i=0; i<n; i++){
    unsigned char c = (unsigned char)zIn[i];
    if( (c>='a' && c<='z') || (c>='A' && c<='Z') || (c>='0' && c<='9')
     || c=='/' || c=='.' || c=='_' || c=='-' || c=='~' ){
      z[j++] = (char)c;
    }else{
      z[j++] = '%'; z[j++] = hex[c>>4]; z[j++] = hex[c&15];
    }
  }
  z[j] = 0;
  return z;
}

/*
** The database at zDbPath opened through tde under zConfig (its path into
** zCfg) and a write transaction begun on it (BEGIN IMMEDIATE and a read
** of the schema): what tde_db_reanchor and tde_db_remap work under.  The
** caller registered zTok (bypassBegin), which this connection's URI
** carries.  TDE_OK, or the error (zOp names the operation in its
** message); *pDb is set either way (close it).
*/
static int freshOpenForWrite(const char *zOp, const char *zDbPath, const char *zConfig,
                             const char *zTok, char *zCfg, size_t nCfg, sqlite3 **pDb){
  char *zPath = 0, *zCfgEsc = 0, *zUri = 0;
  int rc, trc;
  *pDb = 0;
  if( !zDbPath || !zDbPath[0] ) return tdeErr(TDE_MISUSE, "%s: no database", zOp);
  trc = tdeConfigLocate(zConfig, zCfg, nCfg);
  if( trc ) return trc;
  zPath = repairUriEscape(zDbPath);
  zCfgEsc = repairUriEscape(zCfg);
  if( zPath && zCfgEsc ){
    zUri = sqlite3_mprintf("file:%s?vfs=tde&tde_config=%s&tde_bypass=%s", zPath, zCfgEsc, zTok);
  }
  sqlite3_free(zPath);
  sqlite3_free(zCfgEsc);
  if( !zUri ) return tdeErr(TDE_NOMEM, "%s: out of memory", zOp);
  rc = sqlite3_open_v2(zUri, pDb, SQLITE_OPEN_READWRITE | SQLITE_OPEN_URI, 0);
  sqlite3_free(zUri);
  if( rc==SQLITE_OK ) sqlite3_busy_timeout(*pDb, 5000);
  if( rc==SQLITE_OK ) rc = sqlite3_exec(*pDb, "BEGIN IMMEDIATE; SELECT count(*) FROM sqlite_schema", 0, 0, 0);
  if( rc ){
    return tdeErr(rc==SQLITE_BUSY ? TDE_LOCKED : TDE_ERROR, "%s: cannot open %s for writing: %s",
                  zOp, zDbPath, *pDb ? sqlite3_errmsg(*pDb) : "out of memory");
  }
  return TDE_OK;
}

/* End the write transaction freshOpenForWrite began (commit on success)
** with the audit line zOp: zDetail, or the error when trc is not TDE_OK. */
static void freshEndAudited(sqlite3 *db, const char *zOp, int trc, const char *zDetail){
  TdeFile *p = tdeMainOfDb(db, "main");
  if( p && p->pDb->pKeys ){
    TdeAuditRec r;
    tdeAuditInit(&r, zOp);
    r.bFailure = trc!=TDE_OK;
    r.zDbPath = sqlite3_db_filename(db, "main");
    r.aDbid = p->pDb->pKeys->hdr.dbid;
    r.zKeystore = p->pDb->pKeys->pKs ? p->pDb->pKeys->pKs->pMethods->zName : 0;
    r.keyVersion = p->pDb->pKeys->hdr.curVersion;
    r.zDetail = trc ? tde_last_error() : zDetail;
    tdeAudit(p->pDb->pKeys->pCfg, &r);
  }
  sqlite3_exec(db, trc ? "ROLLBACK" : "COMMIT", 0, 0, 0);
}

int tde_db_reanchor(const char *zDbPath, const char *zConfig, unsigned long long *pnOld,
                    unsigned long long *pnNew){
  char zCfg[PATH_MAX];
  sqlite3 *db = 0;
  TdeFile *p = 0;
  TdeDbKeys *k;
  TdeReanchor r;
  int bTxn = 0, trc;
  char zDetail[160];
  char zTok[33];

  memset(&r, 0, sizeof(r));
  zDetail[0] = 0;
  if( pnOld ) *pnOld = 0;
  if( pnNew ) *pnNew = 0;
  trc = bypassBegin(TDE_BYPASS_ANCHOR, zTok);
  if( trc==TDE_OK ) trc = freshOpenForWrite("reanchor", zDbPath, zConfig, zTok, zCfg, sizeof(zCfg), &db);
  if( trc ) goto done;
  bTxn = 1;
  p = tdeMainOfDb(db, "main");
  k = p ? p->pDb->pKeys : 0;
  if( !k ){ trc = tdeErr(TDE_PLAINTEXT, "reanchor: %s is not an encrypted database", zDbPath); goto done; }
  if( k->hdr.version<TDE_FORMAT_V2 ){
    trc = tdeErr(TDE_UNSUPPORTED, "reanchor: %s is format version 1, which cannot be anchored; "
                 "run `sqlite-tde upgrade` first", zDbPath);
    goto done;
  }
  if( !k->anchor.eKind ){
    trc = tdeErr(TDE_CONFIG, "reanchor: %s configures no freshness_anchor", zCfg);
    goto done;
  }
  trc = tdeMainReanchor(p, &r);
  if( trc ) goto done;
  if( pnOld ) *pnOld = r.bFound ? r.storeA : r.fileA;
  if( pnNew ) *pnNew = r.newA;

done:
  if( db && bTxn ){
    p = tdeMainOfDb(db, "main");
    if( p && p->pDb->pKeys ){
      /* The store's counter and the file's before (0: not read), the new one. */
      snprintf(zDetail, sizeof(zDetail), "%s anchor: A %llu (file %llu) -> %llu",
               tdeAnchorKindName(p->pDb->pKeys->anchor.eKind), (unsigned long long)r.storeA,
               (unsigned long long)r.fileA,
               (unsigned long long)p->pDb->pKeys->hdr.anchorCounter);
    }
    freshEndAudited(db, "reanchor", trc, zDetail);
  }
  sqlite3_close(db);
  bypassEnd(zTok);
  return trc;
}

/* ---- tde_db_remap --------------------------------------------------------- */

/*
** Accept the database's pages as they are: the page map is dropped (a
** freshness update setting its root to zero, under the write lock) and
** built again from the file at the next WAL restart (docs/FORMAT.md
** "Building the map").  The one way to open a database whose DB-tdemap is
** missing or from another time -- a promoted standby, a file copy made
** without it.  Opened with the map check off on its own connection only
** (bypass token); audited.
*/
int tde_db_remap(const char *zDbPath, const char *zConfig){
  char zCfg[PATH_MAX];
  sqlite3 *db = 0;
  TdeFile *p = 0;
  int rc, trc, bHadMap = 0;
  char zTok[33];

  trc = bypassBegin(TDE_BYPASS_MAP, zTok);
  if( trc==TDE_OK ) trc = freshOpenForWrite("remap", zDbPath, zConfig, zTok, zCfg, sizeof(zCfg), &db);
  if( trc==TDE_OK ){
    p = tdeMainOfDb(db, "main");
    if( !p || !p->pDb->pKeys ){
      trc = tdeErr(TDE_PLAINTEXT, "remap: %s is not an encrypted database", zDbPath);
    }else if( p->pDb->pKeys->hdr.version<TDE_FORMAT_V2 ){
      trc = tdeErr(TDE_UNSUPPORTED, "remap: %s is format version 1, which has no page map", zDbPath);
    }else{
      rc = tdeMainRefresh(p);
      bHadMap = rc==SQLITE_OK && tdeMapActive(p);
      if( rc==SQLITE_OK ) rc = tdeMapDrop(p);
      if( rc ){
        trc = tde_last_error()[0] ? TDE_ERROR
            : tdeErr(TDE_ERROR, "remap: header update failed (SQLite error %d)", rc);
      }
    }
    freshEndAudited(db, "remap", trc, bHadMap
      ? "page map dropped: built again from the pages as they are at the next WAL restart"
      : "no page map was in force");
  }
  sqlite3_close(db);
  bypassEnd(zTok);
  return trc;
}

