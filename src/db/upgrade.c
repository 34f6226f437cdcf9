/*
** Upgrade of a format-version-1 database to version 2 in place
** (docs/FORMAT.md "Upgrade from version 1"), for tde_db_upgrade() and
** `sqlite-tde upgrade` (through upgrade3.c, which goes on to version 3).
**
** The upgrade is one header update under SQLite's write lock: version 2,
** log epoch 1, no WAL generation bound yet.  Pages are not rewritten
** (version-1 pages are valid version-2 pages), so the header update is the
** atomic switch: a crash leaves the old or the new header in force, and
** running it again finishes or finds nothing to do.  In WAL mode the WAL
** must be empty first (its version-1 frames are not chained): the caller
** runs a TRUNCATE checkpoint, and the update refuses (SQLITE_BUSY, retry)
** if frames remain.
**
** A rekey also upgrades (rekey.c): its begin -- or, in WAL mode with frames
** present then, its finish, after the WAL was emptied -- writes version 2
** with these same fields (tdeUpgradeEdit), audited the same way.
**
** Must never: upgrade with WAL frames present; write anything but the
** header.
*/
#include "vfs/vfs_int.h"
#include "audit/audit.h"

void tdeUpgradeEdit(TdeHeader *h){
  h->version = TDE_FORMAT_V2;
  h->logEpoch = 1;
  memset(h->aWalSalt, 0, sizeof(h->aWalSalt));
  memset(h->aMapRoot, 0, sizeof(h->aMapRoot));
  h->upgradeCursor = 0;
}

static int editUpgrade(TdeFile *p, TdeHeader *h, void *pArg){
  TDE_UNUSED(p); TDE_UNUSED(pArg);
  tdeUpgradeEdit(h);
  return SQLITE_OK;
}

int tdeUpgradeWalEmpty(TdeFile *p){
  TdeWalEnd end;
  if( !p->pDb->pShm0 ) return 1;
  tdeShmHeaderEnd(p->pDb->pShm0, &end);
  return end.bKnown && end.mxFrame==0;
}

void tdeUpgradeAudit(TdeFile *p, int rc, const char *zHow){
  TdeAuditRec r;
  tdeAuditInit(&r, "upgrade");
  r.bFailure = rc!=SQLITE_OK;
  r.zDbPath = p->zName;
  r.aDbid = p->pDb->pKeys->hdr.dbid;
  r.keyVersion = p->pDb->pKeys->hdr.curVersion;
  r.zDetail = rc==SQLITE_OK ? zHow : tde_last_error();
  tdeAudit(p->pDb->pKeys->pCfg, &r);
  if( rc==SQLITE_OK ){
    tdeLog(TDE_LOG_INFO, "%s: upgrade: %s", p->zName ? p->zName : "", zHow);
  }
}

int tdeMainUpgradeV2(TdeFile *p, int *pbDone){
  int rc;
  *pbDone = 0;
  if( !p->pDb->pKeys ) return SQLITE_MISUSE;
  rc = tdeMainRefreshIfChanged(p);
  if( rc ) return rc;
  if( p->pDb->pKeys->hdr.version>=TDE_FORMAT_V2 ) return SQLITE_OK;   /* nothing to do */
  if( !tdeUpgradeWalEmpty(p) ){
    tdeErr(TDE_LOCKED, "%s: the WAL still holds frames (a reader or a writer kept it from being "
           "emptied); nothing was changed, try again", p->zName ? p->zName : "");
    return SQLITE_BUSY;
  }
  rc = tdeMainHeaderUpdate(p, editUpgrade, 0);
  tdeUpgradeAudit(p, rc, "format version 1 -> 2 (freshness checks on); header only");
  if( rc==SQLITE_OK ) *pbDone = 1;
  return rc;
}
