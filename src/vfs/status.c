/*
** Visibility: PRAGMA tde_status (one text row for one schema) and the
** eponymous virtual table tde_status (one row per attached database of the
** connection), in the spirit of Oracle's V$ENCRYPTION_WALLET; plus the SQL
** functions tde_version() and tde_reserve(schema).
**
** Reports key ids, versions and states only -- never key bytes.
*/
#include "vfs/vfs_int.h"
#include "keystore/keystore.h"

#include <stdio.h>
#include <time.h>

/* Everything status reports about one schema's main file. */
typedef struct TdeStatusRow {
  int bEncrypted;
  const char *zCipher;
  char zKeystore[16];
  char zKsStatus[32];
  char zMasterKey[TDE_KEYID_MAX + 1];
  sqlite3_int64 keyVersion;
  sqlite3_int64 pgsz;
  sqlite3_int64 nPages;
  char zDbid[33];
  int iSlot;
  sqlite3_int64 seq;
  char zConfig[PATH_MAX];
  sqlite3_int64 nAuthFail;
  int bRekey;                 /* a rekey is in progress */
  char zMasterKeys[1024];     /* every master key wrapping the current data key */
  TdeReplStatus repl;         /* standby / primary role and lag (repl/state.c) */
  sqlite3_int64 nSessions;    /* sealing sessions under the current data key */
  int formatVersion;          /* 0 until the header is written */
  const char *zAnchor;        /* freshness anchor kind, or "off" (db/anchor.c) */
  uint64_t anchorCounter;     /* the header's anchor counter A */
  char zAnchorTime[32];       /* the newest anchor record's time, UTC, or "" */
  const char *zPageMap;       /* page map (docs/FORMAT.md "Page rollback: the page map") */
  uint64_t upgradeCursor;     /* c of a move to version 3 under way, 0 if none */
} TdeStatusRow;

/* Sessions one data key may start (docs/FORMAT.md "Nonce uniqueness"). */
#define TDE_SESSION_LIMIT ((sqlite3_int64)1 << 48)

static void tdeStatusFill(TdeFile *p, TdeStatusRow *r){
  memset(r, 0, sizeof(*r));
  r->zCipher = "none";
  if( !p || p->base.pMethods!=&tdeIoMethods || p->eKind!=TDE_KIND_MAIN ){
    snprintf(r->zKsStatus, sizeof(r->zKsStatus), "NOT_APPLICABLE");
    r->iSlot = -1;
    return;
  }
  r->bEncrypted = 1;
  r->zCipher = "aes-256-gcm";
  r->nAuthFail = p->nAuthFail;
  if( !p->pDb->pKeys ){
    /* Empty database whose header is not written yet. */
    snprintf(r->zKsStatus, sizeof(r->zKsStatus), "OPEN");
    snprintf(r->zKeystore, sizeof(r->zKeystore), "pending");
    r->iSlot = -1;
    return;
  }
  {
    TdeDbKeys *k = p->pDb->pKeys;
    snprintf(r->zKeystore, sizeof(r->zKeystore), "%s", k->pKs->pMethods->zName);
    snprintf(r->zKsStatus, sizeof(r->zKsStatus), "%s",
             k->zMasterKey[0] ? "OPEN" : "OPEN_NO_MASTER_KEY");
    memcpy(r->zMasterKey, k->zMasterKey, sizeof(r->zMasterKey));
    r->keyVersion = k->hdr.curVersion;
    tdeDbidHex(k->hdr.dbid, r->zDbid);
    r->iSlot = k->iSlot;
    r->seq = (sqlite3_int64)k->hdr.seq;
    snprintf(r->zConfig, sizeof(r->zConfig), "%s", k->zConfig);
    r->bRekey = tdeRekeyInProgress(k);
    r->nSessions = k->nSessionsVersion==k->hdr.curVersion ? (sqlite3_int64)k->nSessions : 0;
    r->formatVersion = k->hdr.version ? k->hdr.version : TDE_FORMAT_V1;
    r->upgradeCursor = k->hdr.version>=TDE_FORMAT_V3 ? k->hdr.upgradeCursor : 0;
    r->zPageMap = r->formatVersion<TDE_FORMAT_V2 ? "off (format version 1)"
                : p->pDb->repl.bStandby ? "off (standby copy)"
                : tdeMapActive(p) ? "on" : "off";
    {
      int64_t t = 0;
      struct tm tm;
      time_t tt;
      tdeMainAnchorInfo(p, &r->zAnchor, &r->anchorCounter, &t);
      tt = (time_t)t;
      if( t>0 && gmtime_r(&tt, &tm) ) strftime(r->zAnchorTime, sizeof(r->zAnchorTime), "%Y-%m-%dT%H:%M:%SZ", &tm);
    }
    for(int i=0, n=0; i<k->hdr.nEntry; i++){
      const TdeWrapEntry *e = &k->hdr.aEntry[i];
      const tde_keystore_methods *pM = tdeKeystoreByType(e->ksType);
      if( e->version!=k->hdr.curVersion ) continue;
      n += snprintf(r->zMasterKeys+n, sizeof(r->zMasterKeys)-(size_t)n, "%s%s:%s",
                    n ? "," : "", pM ? pM->zName : "?", e->zKeyId);
      if( n>=(int)sizeof(r->zMasterKeys) ) break;
    }
  }
  r->pgsz = p->pDb->pgsz;
  tdeMainPageCount(p, &r->nPages);
  tdeReplStatusRead(p->zName, &r->repl);
}

char *tdeStatusPragma(TdeFile *p){
  TdeStatusRow *r = sqlite3_malloc(sizeof(*r));
  char *z;
  if( !r ) return 0;
  tdeStatusFill(p, r);
  z = sqlite3_mprintf("encrypted=%d cipher=%s keystore=%s keystore_status=%s master_key=%s "
                      "data_key_version=%lld page_size=%lld database_id=%s header_slot=%d "
                      "header_seq=%lld auth_failures=%lld rekey_in_progress=%d master_keys=%s "
                      "nonce_sessions=%lld nonce_session_limit=%lld format_version=%d freshness=%s "
                      "anchor=%s anchor_counter=%llu page_map=%s upgrade_cursor=%llu",
                      r->bEncrypted, r->zCipher, r->zKeystore, r->zKsStatus,
                      r->zMasterKey[0] ? r->zMasterKey : "-", r->keyVersion, r->pgsz,
                      r->zDbid[0] ? r->zDbid : "-", r->iSlot, r->seq, r->nAuthFail,
                      r->bRekey, r->zMasterKeys[0] ? r->zMasterKeys : "-",
                      r->nSessions, r->bEncrypted ? TDE_SESSION_LIMIT : 0, r->formatVersion,
                      !r->formatVersion ? "-" : r->formatVersion>=TDE_FORMAT_V2 ? "on" : "off",
                      r->zAnchor ? r->zAnchor : "off", (unsigned long long)r->anchorCounter,
                      r->zPageMap ? r->zPageMap : "-", (unsigned long long)r->upgradeCursor);
  if( z && r->repl.zRole[0] && strcmp(r->repl.zRole, "none")!=0 ){
    const TdeReplStatus *q = &r->repl;
    z = sqlite3_mprintf("%z role=%s repl_state=%s peer=%s shipped_seq=%lld acked_seq=%lld "
                        "received_seq=%lld applied_seq=%lld transport_lag_txn=%lld "
                        "transport_lag_bytes=%lld transport_lag_seconds=%.3f apply_lag_txn=%lld "
                        "apply_lag_bytes=%lld apply_lag_seconds=%.3f", z, q->zRole,
                        q->zState[0] ? q->zState : "-", q->zPeer[0] ? q->zPeer : "-",
                        (long long)q->shippedSeq, (long long)q->ackedSeq, (long long)q->receivedSeq,
                        (long long)q->appliedSeq, (long long)q->transportLagTxn,
                        (long long)q->transportLagBytes, q->transportLagSec, (long long)q->applyLagTxn,
                        (long long)q->applyLagBytes, q->applyLagSec);
  }else if( z ){
    z = sqlite3_mprintf("%z role=none", z);
  }
  sqlite3_free(r);
  return z;
}

/* ---- the tde_status virtual table -------------------------------------- */

typedef struct StatusCursor {
  sqlite3_vtab_cursor base;
  sqlite3 *db;
  int iDb;                /* index into sqlite3_db_name() */
  TdeFile *pFile;         /* the schema's main file if it is ours */
  TdeStatusRow row;
} StatusCursor;

typedef struct StatusVtab {
  sqlite3_vtab base;
  sqlite3 *db;
} StatusVtab;

enum { COL_SCHEMA, COL_FILE, COL_ENCRYPTED, COL_CIPHER, COL_KEYSTORE, COL_KEYSTORE_STATUS,
       COL_MASTER_KEY, COL_KEY_VERSION, COL_PAGE_SIZE, COL_PAGES, COL_DBID, COL_SLOT,
       COL_SEQ, COL_CONFIG, COL_AUTH_FAILURES, COL_REKEY, COL_PAGES_BY_VERSION, COL_MASTER_KEYS,
       COL_ROLE, COL_REPL_STATE, COL_PEER, COL_SHIPPED, COL_ACKED, COL_RECEIVED, COL_APPLIED,
       COL_TLAG_TXN, COL_TLAG_BYTES, COL_TLAG_SEC, COL_ALAG_TXN, COL_ALAG_BYTES, COL_ALAG_SEC,
       COL_NONCE_SESSIONS, COL_NONCE_LIMIT, COL_FORMAT_VERSION, COL_FRESHNESS,
       COL_ANCHOR, COL_ANCHOR_COUNTER, COL_ANCHOR_UPDATED, COL_PAGE_MAP, COL_UPGRADE_CURSOR };

static int statusConnect(sqlite3 *db, void *pAux, int argc, const char *const *argv,
                         sqlite3_vtab **ppVtab, char **pzErr){
  StatusVtab *v;
  int rc;
  TDE_UNUSED(pAux); TDE_UNUSED(argc); TDE_UNUSED(argv); TDE_UNUSED(pzErr);
  rc = sqlite3_declare_vtab(db,
    "CREATE TABLE x(schema TEXT, file TEXT, encrypted INT, cipher TEXT, keystore TEXT, "
    "keystore_status TEXT, master_key TEXT, data_key_version INT, page_size INT, pages INT, "
    "database_id TEXT, header_slot INT, header_seq INT, config TEXT, auth_failures INT, "
    "rekey_in_progress INT, pages_by_version TEXT, master_keys TEXT, "
    "role TEXT, repl_state TEXT, peer TEXT, shipped_seq INT, acked_seq INT, received_seq INT, "
    "applied_seq INT, transport_lag_txn INT, transport_lag_bytes INT, transport_lag_seconds REAL, "
    "apply_lag_txn INT, apply_lag_bytes INT, apply_lag_seconds REAL, "
    "nonce_sessions INT, nonce_session_limit INT, format_version INT, freshness TEXT, "
    "anchor TEXT, anchor_counter INT, anchor_updated TEXT, page_map TEXT, upgrade_cursor INT)");
  if( rc ) return rc;
  v = sqlite3_malloc(sizeof(*v));
  if( !v ) return SQLITE_NOMEM;
  memset(v, 0, sizeof(*v));
  v->db = db;
  *ppVtab = &v->base;
  sqlite3_vtab_config(db, SQLITE_VTAB_DIRECTONLY);
  return SQLITE_OK;
}

static int statusDisconnect(sqlite3_vtab *pVtab){
  sqlite3_free(pVtab);
  return SQLITE_OK;
}

static int statusBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *pInfo){
  TDE_UNUSED(pVtab);
  pInfo->estimatedCost = 10;
  pInfo->estimatedRows = 4;
  return SQLITE_OK;
}

static int statusOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCur){
  StatusCursor *c = sqlite3_malloc(sizeof(*c));
  if( !c ) return SQLITE_NOMEM;
  memset(c, 0, sizeof(*c));
  c->db = ((StatusVtab*)pVtab)->db;
  *ppCur = &c->base;
  return SQLITE_OK;
}

static int statusClose(sqlite3_vtab_cursor *pCur){
  sqlite3_free(pCur);
  return SQLITE_OK;
}

static void statusLoad(StatusCursor *c){
  const char *zSchema = sqlite3_db_name(c->db, c->iDb);
  TdeFile *p;
  if( !zSchema ) return;
  p = tdeMainOfDb(c->db, zSchema);     /* also below other VFSes */
  tdeStatusFill(p, &c->row);
  c->pFile = c->row.bEncrypted ? p : 0;
}

static int statusFilter(sqlite3_vtab_cursor *pCur, int idxNum, const char *idxStr,
                        int argc, sqlite3_value **argv){
  StatusCursor *c = (StatusCursor*)pCur;
  TDE_UNUSED(idxNum); TDE_UNUSED(idxStr); TDE_UNUSED(argc); TDE_UNUSED(argv);
  c->iDb = 0;
  statusLoad(c);
  return SQLITE_OK;
}

static int statusNext(sqlite3_vtab_cursor *pCur){
  StatusCursor *c = (StatusCursor*)pCur;
  c->iDb++;
  statusLoad(c);
  return SQLITE_OK;
}

static int statusEof(sqlite3_vtab_cursor *pCur){
  StatusCursor *c = (StatusCursor*)pCur;
  return sqlite3_db_name(c->db, c->iDb)==0;
}

static void resultText(sqlite3_context *ctx, const char *z){
  if( z && z[0] ) sqlite3_result_text(ctx, z, -1, SQLITE_TRANSIENT);
  else sqlite3_result_null(ctx);
}

static int statusColumn(sqlite3_vtab_cursor *pCur, sqlite3_context *ctx, int i){
  StatusCursor *c = (StatusCursor*)pCur;
  TdeStatusRow *r = &c->row;
  switch( i ){
    case COL_SCHEMA:   resultText(ctx, sqlite3_db_name(c->db, c->iDb)); break;
    case COL_FILE:     resultText(ctx, sqlite3_db_filename(c->db, sqlite3_db_name(c->db, c->iDb))); break;
    case COL_ENCRYPTED: sqlite3_result_int(ctx, r->bEncrypted); break;
    case COL_CIPHER:   resultText(ctx, r->bEncrypted ? r->zCipher : 0); break;
    case COL_KEYSTORE: resultText(ctx, r->zKeystore); break;
    case COL_KEYSTORE_STATUS: resultText(ctx, r->bEncrypted ? r->zKsStatus : "NOT_APPLICABLE"); break;
    case COL_MASTER_KEY: resultText(ctx, r->zMasterKey); break;
    case COL_KEY_VERSION: if( r->keyVersion ) sqlite3_result_int64(ctx, r->keyVersion); else sqlite3_result_null(ctx); break;
    case COL_PAGE_SIZE: if( r->pgsz ) sqlite3_result_int64(ctx, r->pgsz); else sqlite3_result_null(ctx); break;
    case COL_PAGES:    if( r->bEncrypted ) sqlite3_result_int64(ctx, r->nPages); else sqlite3_result_null(ctx); break;
    case COL_DBID:     resultText(ctx, r->zDbid); break;
    case COL_SLOT:     if( r->iSlot>=0 && r->bEncrypted ) sqlite3_result_int(ctx, r->iSlot); else sqlite3_result_null(ctx); break;
    case COL_SEQ:      if( r->seq ) sqlite3_result_int64(ctx, r->seq); else sqlite3_result_null(ctx); break;
    case COL_CONFIG:   resultText(ctx, r->zConfig); break;
    case COL_AUTH_FAILURES: if( r->bEncrypted ) sqlite3_result_int64(ctx, r->nAuthFail); else sqlite3_result_null(ctx); break;
    case COL_REKEY:    if( r->bEncrypted ) sqlite3_result_int(ctx, r->bRekey); else sqlite3_result_null(ctx); break;
    case COL_MASTER_KEYS: resultText(ctx, r->zMasterKeys); break;
    case COL_NONCE_SESSIONS: if( r->keyVersion ) sqlite3_result_int64(ctx, r->nSessions); else sqlite3_result_null(ctx); break;
    case COL_NONCE_LIMIT: if( r->bEncrypted ) sqlite3_result_int64(ctx, TDE_SESSION_LIMIT); else sqlite3_result_null(ctx); break;
    case COL_FORMAT_VERSION: if( r->formatVersion ) sqlite3_result_int(ctx, r->formatVersion); else sqlite3_result_null(ctx); break;
    case COL_FRESHNESS: resultText(ctx, !r->formatVersion ? 0 : r->formatVersion>=TDE_FORMAT_V2 ? "on" : "off"); break;
    case COL_ANCHOR_UPDATED: resultText(ctx, r->zAnchorTime[0] ? r->zAnchorTime : 0); break;
    case COL_PAGE_MAP: resultText(ctx, r->zPageMap); break;
    case COL_UPGRADE_CURSOR: if( r->formatVersion ) sqlite3_result_int64(ctx, (sqlite3_int64)r->upgradeCursor); else sqlite3_result_null(ctx); break;
    case COL_ANCHOR:   resultText(ctx, r->bEncrypted ? (r->zAnchor ? r->zAnchor : "off") : 0); break;
    case COL_ANCHOR_COUNTER: if( r->formatVersion>=TDE_FORMAT_V2 && ((r->zAnchor && strcmp(r->zAnchor, "off")!=0) || r->anchorCounter) ) sqlite3_result_int64(ctx, (sqlite3_int64)r->anchorCounter); else sqlite3_result_null(ctx); break;
    default:
      if( i>=COL_ROLE && r->bEncrypted ){
        /* Replication (repl/state.c): NULL where the role has no such figure. */
        const TdeReplStatus *q = &r->repl;
        int bPrim = strcmp(q->zRole, "primary")==0, bStby = strcmp(q->zRole, "standby")==0;
        switch( i ){
          case COL_ROLE:       resultText(ctx, q->zRole[0] ? q->zRole : "none"); break;
          case COL_REPL_STATE: resultText(ctx, q->zState); break;
          case COL_PEER:       resultText(ctx, q->zPeer); break;
          case COL_SHIPPED:    if( bPrim ) sqlite3_result_int64(ctx, q->shippedSeq); break;
          case COL_ACKED:      if( bPrim ) sqlite3_result_int64(ctx, q->ackedSeq); break;
          case COL_RECEIVED:   if( bStby ) sqlite3_result_int64(ctx, q->receivedSeq); break;
          case COL_APPLIED:    if( bStby ) sqlite3_result_int64(ctx, q->appliedSeq); break;
          case COL_TLAG_TXN:   if( bPrim || bStby ) sqlite3_result_int64(ctx, q->transportLagTxn); break;
          case COL_TLAG_BYTES: if( bPrim || bStby ) sqlite3_result_int64(ctx, q->transportLagBytes); break;
          case COL_TLAG_SEC:   if( bPrim || bStby ) sqlite3_result_double(ctx, q->transportLagSec); break;
          case COL_ALAG_TXN:   if( bStby ) sqlite3_result_int64(ctx, q->applyLagTxn); break;
          case COL_ALAG_BYTES: if( bStby ) sqlite3_result_int64(ctx, q->applyLagBytes); break;
          case COL_ALAG_SEC:   if( bStby ) sqlite3_result_double(ctx, q->applyLagSec); break;
          default: break;
        }
      }
      break;
    case COL_PAGES_BY_VERSION: {
      /* Reads every page's trailer: computed only when asked for. */
      uint32_t aV[TDE_MAX_VERSIONS*2];
      sqlite3_int64 aN[TDE_MAX_VERSIONS*2];
      int nV = 0;
      if( c->pFile && tdeMainCountVersions(c->pFile, aV, aN, (int)TDE_ARRAY_SIZE(aV), &nV)==SQLITE_OK && nV>0 ){
        char z[256];
        int n = 0;
        for(int v=0; v<nV && n<(int)sizeof(z); v++){
          n += snprintf(z+n, sizeof(z)-(size_t)n, "%s%u:%lld", v ? " " : "", aV[v], (long long)aN[v]);
        }
        sqlite3_result_text(ctx, z, -1, SQLITE_TRANSIENT);
      }else{
        sqlite3_result_null(ctx);
      }
      break;
    }
  }
  return SQLITE_OK;
}

static int statusRowid(sqlite3_vtab_cursor *pCur, sqlite3_int64 *pRowid){
  *pRowid = ((StatusCursor*)pCur)->iDb;
  return SQLITE_OK;
}

static const sqlite3_module tdeStatusModule = {
  0,                  /* iVersion */
  0,                  /* xCreate: eponymous only */
  statusConnect,      /* xConnect */
  statusBestIndex,    /* xBestIndex */
  statusDisconnect,   /* xDisconnect */
  0,                  /* xDestroy */
  statusOpen,         /* xOpen */
  statusClose,        /* xClose */
  statusFilter,       /* xFilter */
  statusNext,         /* xNext */
  statusEof,          /* xEof */
  statusColumn,       /* xColumn */
  statusRowid,        /* xRowid */
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0   /* xUpdate .. xShadowName */
#if SQLITE_VERSION_NUMBER >= 3044000
  , 0                 /* xIntegrity (the module is iVersion 0: never called) */
#endif
};

/* ---- SQL functions ------------------------------------------------------ */

static void fnVersion(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  TDE_UNUSED(argc); TDE_UNUSED(argv);
  sqlite3_result_text(ctx, TDE_VERSION, -1, SQLITE_STATIC);
}

/* tde_reserve(schema): give a new (empty) encrypted database the reserved
** bytes sqlite-tde needs; for databases ATTACHed after the connection was
** opened.  Returns the reserve now requested. */
static void fnReserve(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  sqlite3 *db = sqlite3_context_db_handle(ctx);
  const char *zSchema = argc>0 ? (const char*)sqlite3_value_text(argv[0]) : "main";
  int n = TDE_RESERVE_BYTES;
  int rc;
  if( !zSchema ) zSchema = "main";
  rc = sqlite3_file_control(db, zSchema, SQLITE_FCNTL_RESERVE_BYTES, &n);
  if( rc ){
    tdeSqlResultError(ctx, "tde_reserve: no such schema", SQLITE_ERROR);
    return;
  }
  n = -1;
  sqlite3_file_control(db, zSchema, SQLITE_FCNTL_RESERVE_BYTES, &n);
  sqlite3_result_int(ctx, n);
}

/* tde_last_error(): the last failure the shim logged on this thread, with
** the file, the page and the cause (log messages never hold key bytes,
** passwords or PINs); NULL if none.  For hosts that cannot set a log
** callback (the sqlite3 shell, Python, Node), whose error messages carry
** only SQLite's generic text ("disk I/O error", "authorization denied").
** It survives the failed statement and a failed open on this thread, and
** is replaced by the next failure. */
static void fnLastError(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  const char *z = tdeLastFailure();
  TDE_UNUSED(argc); TDE_UNUSED(argv);
  if( z[0] ) sqlite3_result_text(ctx, z, -1, SQLITE_TRANSIENT);
  else sqlite3_result_null(ctx);
}

int tdeSqlFuncRegister(sqlite3 *db);   /* keystore/sql.c: tde_keystore_open() */

int tdeStatusRegister(sqlite3 *db){
  int rc = sqlite3_create_module(db, "tde_status", &tdeStatusModule, 0);
  if( rc==SQLITE_OK ) rc = tdeSqlFuncRegister(db);
  if( rc==SQLITE_OK ){
    rc = sqlite3_create_function(db, "tde_version", 0, SQLITE_UTF8|SQLITE_DETERMINISTIC, 0,
                                 fnVersion, 0, 0);
  }
  if( rc==SQLITE_OK ){
    rc = sqlite3_create_function(db, "tde_reserve", 1, SQLITE_UTF8|SQLITE_DIRECTONLY, 0,
                                 fnReserve, 0, 0);
  }
  if( rc==SQLITE_OK ){
    rc = sqlite3_create_function(db, "tde_last_error", 0, SQLITE_UTF8, 0, fnLastError, 0, 0);
  }
  return rc;
}
