/*
** The external freshness anchor, VFS side (docs/FORMAT.md "External
** anchor"): the check at load, the update at the end of a write
** transaction, and the core of tde_db_reanchor() (vfs/repair.c).
**
** Data flows as everywhere in the shim: this file reads and writes the
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
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

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

/*
** The core of tde_db_reanchor (vfs/repair.c), on a connection opened with
** the anchor comparison off and holding the write lock, on a version-2
** database with an anchor configured (the caller checked): the store's
** record (any, even one that does not authenticate) replaced by a new one
** whose counter passes both the store's and the header's.  *pr is filled
** as far as it got (the audit line names it whatever the outcome).  TDE_OK
** or the error (detail in tdeErr).
*/
int tdeMainReanchor(TdeFile *p, TdeReanchor *pr){
  TdeDbKeys *k = p->pDb->pKeys;
  TdeAnchorRec rec;
  int rc, trc;
  memset(pr, 0, sizeof(*pr));
  pr->fileA = k->hdr.anchorCounter;
  trc = tdeAnchorFetch(k->pCfg, k->pKs, k->hdr.dbid, anchorKey, k, &rec, &pr->bFound);
  if( trc==TDE_AUTH ){ pr->bFound = 0; tdeErrClear(); trc = TDE_OK; }
  if( trc ) return trc;
  tdeErrClear();
  if( pr->bFound ) pr->storeA = rec.A;
  rc = anchorUpdate(p, pr->bFound ? rec.A : 0);
  pr->newA = k->hdr.anchorCounter;
  if( rc ){
    return tde_last_error()[0] ? TDE_ERROR : tdeErr(TDE_ERROR, "reanchor: header update failed (SQLite error %d)", rc);
  }
  return TDE_OK;
}

/* The name of an anchor kind (TDE_ANCHOR_*), for audit lines. */
const char *tdeAnchorKindName(int eKind){
  return anchorKindName(eKind);
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
