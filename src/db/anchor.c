/*
** The external freshness anchor, VFS side (docs/FORMAT.md "External
** anchor"): the check at load, the update at the end of a write
** transaction, and tde_db_reanchor().
**
** Data flows as everywhere in src/vfs: this file reads and writes the
** header through keyops.c, and calls the keys layer (keys/anchor_record.c) for
** the record, which reaches the store through keystore/anchor_store.c.  It never
** speaks a keystore protocol itself.  Without `freshness_anchor` in the
** configuration (or on a version-1 database) k->anchor.eKind is 0 and its
** hooks (tdeAnchorHook, raised through hooks.c) cost one test per lock
** change.  It sits above the page map and below vfs.c; the rekey's finish
** reaches it only through the xBeforeKeyDrop hook.
*/
#include "vfs/vfs_int.h"
#include "keys/anchor_record.h"
#include "audit/audit.h"
#include "config.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

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

static const char *anchorDbName(TdeFile *p){
  return p->zName ? p->zName : "(database)";
}

static const char *anchorKindName(int eKind){
  switch( eKind ){
    case TDE_ANCHOR_FILE:   return "file";
    case TDE_ANCHOR_PKCS11: return "pkcs11";
    case TDE_ANCHOR_KMIP:   return "kmip";
    default:                return "off";
  }
}

/* xKey for tdeAnchorFetch: the data key of a version this handle holds. */
static const uint8_t *anchorKey(void *pArg, uint32_t version){
  const TdeDekVer *d = tdeKeysFind((const TdeDbKeys *)pArg, version);
  return d ? d->aDek : 0;
}

static void anchorTime(int64_t t, char *z, size_t n){
  struct tm tm;
  time_t tt = (time_t)t;
  if( t<=0 || !gmtime_r(&tt, &tm) || strftime(z, n, "%Y-%m-%dT%H:%M:%SZ", &tm)==0 ){
    snprintf(z, n, "unknown time");
  }
}

/* The database file's canonical path (symbolic links resolved), the name
** its place record is kept under; zName as given if it cannot be resolved. */
static void anchorPlace(TdeFile *p, char zOut[PATH_MAX]){
  if( !p->zName || !realpath(p->zName, zOut) ){
    snprintf(zOut, PATH_MAX, "%s", p->zName ? p->zName : "");
  }
}

/*
** The place check (docs/FORMAT.md "External anchor", "The place"): the
** store's place record for this path, if any, must name this database.
** Another database in its place -- a VACUUM INTO backup, a database of
** the same keystore copied over it -- carries its own id and would open
** as never anchored: refused until `reanchor` accepts it.  A new database
** created here is not refused (it holds nothing older); its first anchor
** update takes the place.  TDE_OK or the refusal (detail in tdeErr).
*/
static int anchorPlaceCheck(TdeFile *p, int bNew){
  TdeDbKeys *k = p->pDb->pKeys;
  char zPlace[PATH_MAX];
  uint8_t aDbid[TDE_DBID_BYTES];
  int bFound = 0, trc;
  if( bNew ) return TDE_OK;
  anchorPlace(p, zPlace);
  trc = tdePlaceFetch(k->pCfg, k->pKs, zPlace, aDbid, &bFound);
  if( trc || !bFound ) return trc;
  if( memcmp(aDbid, k->hdr.dbid, TDE_DBID_BYTES)!=0 ){
    char zWas[2*TDE_DBID_BYTES + 1], zIs[2*TDE_DBID_BYTES + 1];
    tdeDbidHex(aDbid, zWas);
    tdeDbidHex(k->hdr.dbid, zIs);
    return tdeErr(TDE_AUTH, "%s: another database is in this database's place (the freshness "
                  "anchor last saw database id %s here; this file is %s): a backup made with "
                  "VACUUM INTO or another database was put here. Restored on purpose? run "
                  "`sqlite-tde reanchor %s`", anchorDbName(p), zWas, zIs, anchorDbName(p));
  }
  k->anchor.bPlaceOk = 1;
  return TDE_OK;
}

static int anchorCheck(TdeFile *p, int bNew){
  TdeDbKeys *k = p->pDb->pKeys;
  TdeAnchorRec rec;
  long long nIv = 0;
  char zDir[PATH_MAX];
  int eKind = 0, bFound = 0, trc, rc = SQLITE_OK;

  if( !k || !k->pCfg ) return SQLITE_OK;
  trc = tdeConfigAnchor(k->pCfg, &eKind, zDir, sizeof(zDir), &nIv);
  if( trc ){ rc = tdeSqliteRc(trc); goto done; }
  if( eKind==TDE_ANCHOR_NONE ) return SQLITE_OK;
  if( p->pDb->repl.bStandby ){
    /* A standby copy's header follows its primary's only through what
    ** the standby applies; its freshness is the replication's (sequence
    ** and signature checks, no silent rewind), not the anchor's. */
    tdeLog(TDE_LOG_INFO, "%s: a standby copy: the freshness anchor is not checked here",
           anchorDbName(p));
    return SQLITE_OK;
  }
  if( k->hdr.version<TDE_FORMAT_V2 ){
    tdeLog(TDE_LOG_WARNING, "%s: freshness_anchor is configured but the database is format "
           "version 1, which has no anchor counter: not anchored (run `sqlite-tde upgrade`)",
           anchorDbName(p));
    return SQLITE_OK;
  }
  k->anchor.eKind = eKind;
  k->anchor.nInterval = nIv;
  if( p->pDb->mBypass & TDE_BYPASS_ANCHOR ) return SQLITE_OK;

  trc = anchorPlaceCheck(p, bNew);
  for(int nTry=0; trc==TDE_OK && nTry<2; nTry++){
    trc = tdeAnchorFetch(k->pCfg, k->pKs, k->hdr.dbid, anchorKey, k, &rec, &bFound);
    if( trc ) break;
    if( !bFound ){
      if( k->hdr.anchorCounter==0 ) break;          /* never anchored: the first write does */
      trc = tdeErr(TDE_AUTH, "%s: the database was anchored (A=%llu) but the %s freshness "
                   "anchor holds no record for it (lost, or another anchor store). Restored "
                   "on purpose? run `sqlite-tde reanchor %s`", anchorDbName(p),
                   (unsigned long long)k->hdr.anchorCounter, anchorKindName(eKind), anchorDbName(p));
      break;
    }
    k->anchor.tRecord = rec.t;
    if( !tdeAnchorIsStale(&rec, k->hdr.anchorCounter, k->hdr.logEpoch, k->hdr.seq) ) break;
    if( nTry==0 ){
      /* Another connection may be between its header update and its store
      ** write: its header is durable before the record, so read it again. */
      rc = tdeMainRefresh(p);
      if( rc ) goto done;
      continue;
    }
    {
      char zWhen[40];
      anchorTime(rec.t, zWhen, sizeof(zWhen));
      trc = tdeErr(TDE_AUTH, "%s: the database is older than its freshness anchor (anchor "
                   "A=%llu L=%llu seq=%llu of %s; file A=%llu L=%llu seq=%llu): an older copy "
                   "was restored. Restored on purpose? run `sqlite-tde reanchor %s`",
                   anchorDbName(p), (unsigned long long)rec.A, (unsigned long long)rec.L,
                   (unsigned long long)rec.seq, zWhen,
                   (unsigned long long)k->hdr.anchorCounter, (unsigned long long)k->hdr.logEpoch,
                   (unsigned long long)k->hdr.seq, anchorDbName(p));
    }
  }
  if( trc ){
    /* Name the database in front of the store's detail (copied first:
    ** tdeErr formats into the buffer tde_last_error() points to). */
    char zDetail[768];
    snprintf(zDetail, sizeof(zDetail), "%s", tde_last_error());
    if( trc==TDE_AUTH ){
      if( strncmp(zDetail, anchorDbName(p), strlen(anchorDbName(p)))!=0 ){
        tdeErr(TDE_AUTH, "%s: freshness anchor refused: %s", anchorDbName(p), zDetail);
      }
      rc = SQLITE_IOERR_AUTH;
    }else{
      tdeErr(trc, "%s: the freshness anchor cannot be checked (the open is refused until it "
             "can): %s", anchorDbName(p), zDetail);
      rc = trc==TDE_NOMEM ? SQLITE_NOMEM : SQLITE_AUTH;
    }
  }
done:
  /* The caller (tdeMainLoad) logs the refusal; the audit trail records it. */
  if( rc && rc!=SQLITE_NOMEM ){
    TdeAuditRec r;
    tdeAuditInit(&r, "anchor_check");
    r.bFailure = 1;
    r.zDbPath = p->zName;
    r.aDbid = k->hdr.dbid;
    r.zKeystore = k->pKs ? k->pKs->pMethods->zName : 0;
    r.keyVersion = k->hdr.curVersion;
    r.zDetail = tde_last_error();
    tdeAudit(k->pCfg, &r);
  }
  return rc;
}

/* Header edit: A = max(A on disk, floor) + 1. */
static int editAnchor(TdeFile *p, TdeHeader *h, void *pArg){
  uint64_t floor = *(uint64_t *)pArg;
  TDE_UNUSED(p);
  if( h->version<TDE_FORMAT_V2 ) return SQLITE_MISUSE;
  h->anchorCounter = (h->anchorCounter>floor ? h->anchorCounter : floor) + 1;
  return SQLITE_OK;
}

/*
** One anchor update (caller holds the write lock): the header's A
** advanced (durable first), then the record.  floor: the counter A must
** pass (reanchor: the store's A), else 0.  SQLite rc, detail in tdeErr.
*/
static int anchorUpdate(TdeFile *p, uint64_t floor){
  TdeDbKeys *k = p->pDb->pKeys;
  TdeAnchorRec rec;
  const TdeDekVer *d;
  int rc, trc;
  rc = tdeMainFreshnessUpdate(p, editAnchor, &floor);
  if( rc ){
    if( !tde_last_error()[0] ) tdeErr(TDE_IO, "header update failed (SQLite error %d)", rc);
    return rc;
  }
  memset(&rec, 0, sizeof(rec));
  memcpy(rec.dbid, k->hdr.dbid, TDE_DBID_BYTES);
  rec.A = k->hdr.anchorCounter;
  rec.L = k->hdr.logEpoch;
  rec.seq = k->hdr.seq;
  rec.version = k->hdr.curVersion;
  rec.t = (int64_t)time(0);
  d = tdeKeysFind(k, rec.version);
  if( !d ) return SQLITE_ERROR;
  trc = tdeAnchorPut(k->pCfg, k->pKs, &rec, d->aDek);
  k->anchor.tLast = rec.t;
  if( trc==TDE_OK && !k->anchor.bPlaceOk ){
    /* After the record: a crash between the two leaves the place
    ** unrecorded (as before the first update), never naming a database
    ** whose record is missing. */
    char zPlace[PATH_MAX];
    anchorPlace(p, zPlace);
    trc = tdePlacePut(k->pCfg, k->pKs, zPlace, k->hdr.dbid, rec.t);
    if( trc==TDE_OK ) k->anchor.bPlaceOk = 1;
  }
  if( trc ) return tdeSqliteRc(trc);
  k->anchor.version = rec.version;
  k->anchor.tRecord = rec.t;
  return SQLITE_OK;
}

/* The update when due, at the end of a write transaction (xWriteEnd):
** in rollback mode when the main file's lock drops to SHARED or below
** after a write lock (anchor.bWrite, set by anchorWriteLock), in WAL mode
** when the WAL write lock is released. */
static void anchorWriteEnd(TdeFile *p, int bWal){
  TdeDbKeys *k = p->pDb->pKeys;
  int64_t now;
  int rc;
  if( !k || !k->anchor.eKind || (!bWal && !k->anchor.bWrite) ) return;
  k->anchor.bWrite = 0;
  if( p->bReadOnly ) return;
  now = (int64_t)time(0);
  if( k->anchor.tLast && now - k->anchor.tLast < k->anchor.nInterval
   && k->anchor.version==k->hdr.curVersion ) return;
  tdeErrClear();
  rc = anchorUpdate(p, 0);
  if( rc ){
    /* The transaction is committed; the anchor lags until the next try,
    ** which waits for the interval (a store that is down costs one round
    ** trip per interval, not one per transaction). */
    k->anchor.tLast = now;
    tdeLog(TDE_LOG_WARNING, "%s: freshness anchor update failed (retried after %lld s): %s",
           anchorDbName(p), k->anchor.nInterval, tde_last_error());
    tdeErrClear();
  }
}

/*
** Before a rekey's finish removes the older data-key versions (caller
** holds the write lock): the record must be MACed by the current version,
** or no open could read it again (refused as forged: a lockout once the
** store is back).  If the last record this connection wrote is not, one
** update now; if that fails, so does the finish (the rekey is resumable:
** run it again once the store can be written).
*/
static int anchorBeforeKeyDrop(TdeFile *p){
  TdeDbKeys *k = p->pDb->pKeys;
  char zDetail[512];
  int rc;
  if( !k || !k->anchor.eKind || (p->pDb->mBypass & TDE_BYPASS_ANCHOR) ) return SQLITE_OK;
  if( k->anchor.version==k->hdr.curVersion ) return SQLITE_OK;
  tdeErrClear();
  rc = anchorUpdate(p, 0);
  if( rc==SQLITE_OK ) return SQLITE_OK;
  snprintf(zDetail, sizeof(zDetail), "%s", tde_last_error());
  tdeErr(TDE_AUTH, "%s: the rekey cannot finish yet: the freshness anchor record is MACed by an "
         "older data key, which the finish removes, and updating it failed (%s); the database "
         "keeps both keys -- run the rekey again once the anchor store can be written",
         anchorDbName(p), zDetail);
  tdeLog(TDE_LOG_ERROR, "%s", tde_last_error());
  return rc;
}

/* A write lock taken on the main file (RESERVED, after its header
** check): the end of the transaction may update the anchor. */
static void anchorWriteLock(TdeFile *p){
  if( p->pDb->pKeys ) p->pDb->pKeys->anchor.bWrite = p->pDb->pKeys->anchor.eKind!=0;
}

const TdeMainHook tdeAnchorHook = {
  "anchor",
  anchorCheck,                /* xLoaded */
  anchorWriteLock,            /* xWriteLock */
  anchorWriteEnd,             /* xWriteEnd */
  anchorBeforeKeyDrop,        /* xBeforeKeyDrop */
  0,                          /* xPageRescue */
  0,                          /* xWalLock */
  0,                          /* xWalEnd */
  0,                          /* xPageCheck */
  0,                          /* xWriteOutsideWal */
  0,                          /* xWalFold */
};

/* ---- tde_db_reanchor ------------------------------------------------------ */

/* zIn percent-encoded for a URI path or query value. */
static char *anchorUriEscape(const char *zIn){
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
  zPath = anchorUriEscape(zDbPath);
  zCfgEsc = anchorUriEscape(zCfg);
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
  TdeFile *p;
  TdeDbKeys *k;
  TdeAnchorRec rec;
  uint64_t oldA = 0;
  int bFound = 0, bTxn = 0, rc, trc = TDE_OK;
  char zDetail[160];
  char zTok[33];

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
  oldA = k->hdr.anchorCounter;
  /* Any record, even one that does not authenticate, is replaced: its A
  ** is passed when it can be read, else the header's own A suffices. */
  trc = tdeAnchorFetch(k->pCfg, k->pKs, k->hdr.dbid, anchorKey, k, &rec, &bFound);
  if( trc==TDE_AUTH ){ bFound = 0; tdeErrClear(); trc = TDE_OK; }
  if( trc ) goto done;
  tdeErrClear();
  rc = anchorUpdate(p, bFound ? rec.A : 0);
  if( rc ){
    trc = tde_last_error()[0] ? TDE_ERROR : tdeErr(TDE_ERROR, "reanchor: header update failed (SQLite error %d)", rc);
    goto done;
  }
  if( pnOld ) *pnOld = bFound ? rec.A : oldA;
  if( pnNew ) *pnNew = k->hdr.anchorCounter;

done:
  if( db && bTxn ){
    p = tdeMainOfDb(db, "main");
    if( p && p->pDb->pKeys ){
      snprintf(zDetail, sizeof(zDetail), "%s anchor: A %llu (file %llu) -> %llu",
               anchorKindName(p->pDb->pKeys->anchor.eKind), (unsigned long long)(bFound ? rec.A : 0),
               (unsigned long long)oldA, (unsigned long long)p->pDb->pKeys->hdr.anchorCounter);
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

int tdeMainAnchorInfo(TdeFile *p, const char **pzKind, uint64_t *pA, int64_t *pt){
  TdeDbKeys *k = p->pDb->pKeys;
  *pzKind = "off";
  *pA = 0;
  *pt = 0;
  if( !k ) return SQLITE_OK;
  *pA = k->hdr.anchorCounter;
  *pt = k->anchor.tRecord;
  if( k->anchor.eKind ) *pzKind = anchorKindName(k->anchor.eKind);
  else if( k->hdr.version<TDE_FORMAT_V2 && k->pCfg && tdeConfigGet(k->pCfg, "freshness_anchor") ){
    *pzKind = "off (format version 1)";
  }
  return SQLITE_OK;
}
