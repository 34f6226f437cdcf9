/*
** The features of a main database as hooks (issue 23): one list, one
** dispatcher per event.  A feature (the external anchor, the rekey
** journal's rescue of a torn page, the page map, the standby's capture)
** fills a static const TdeMainHook in its
** own file and is named once in aHook below; the pipeline (vfs.c, wal.c,
** page1.c, rekey.c)
** raises each event from exactly one place through the functions here.
**
** This file is the lowest layer of the feature wiring: it calls no
** function of another file by name, only the pointers the features
** registered, so a feature below its caller in the layer order (rekey.c
** reporting to anchor.c) never calls up.  Must never: keep state (it lives
** with each feature), or call a hook the feature left NULL.
*/
#include "vfs/vfs_int.h"

static const TdeMainHook *const aHook[] = {
  &tdeMapHook,              /* pagemap.c: the check of every page read, drops, folds */
  &tdeAnchorHook,           /* anchor.c: check at load, update at the end of a write */
  &tdeRekeyHook,            /* rekey.c: a page torn by an interrupted rekey, from its journal */
  &tdeUpgradeHook,          /* upgrade3.c: a page moved by another process's upgrade to format 3 */
  &tdeCaptureHook,          /* capture.c: the standby's capture and sync wait */
};

int tdeMainHookLoaded(TdeFile *p, int bNew){
  int rc = SQLITE_OK;
  for(size_t i=0; i<TDE_ARRAY_SIZE(aHook) && rc==SQLITE_OK; i++){
    if( aHook[i]->xLoaded ) rc = aHook[i]->xLoaded(p, bNew);
  }
  return rc;
}

void tdeMainHookWriteLock(TdeFile *p){
  for(size_t i=0; i<TDE_ARRAY_SIZE(aHook); i++){
    if( aHook[i]->xWriteLock ) aHook[i]->xWriteLock(p);
  }
}

void tdeMainHookWriteEnd(TdeFile *p, int bWal){
  for(size_t i=0; i<TDE_ARRAY_SIZE(aHook); i++){
    if( aHook[i]->xWriteEnd ) aHook[i]->xWriteEnd(p, bWal);
  }
}

int tdeMainHookBeforeKeyDrop(TdeFile *p){
  int rc = SQLITE_OK;
  for(size_t i=0; i<TDE_ARRAY_SIZE(aHook) && rc==SQLITE_OK; i++){
    if( aHook[i]->xBeforeKeyDrop ) rc = aHook[i]->xBeforeKeyDrop(p);
  }
  return rc;
}

int tdeMainHookPageRescue(TdeFile *p, uint32_t pgno, uint32_t pgsz, uint8_t *aOut, uint8_t aTag[16]){
  int rc = SQLITE_IOERR_AUTH;
  for(size_t i=0; i<TDE_ARRAY_SIZE(aHook) && rc==SQLITE_IOERR_AUTH; i++){
    if( aHook[i]->xPageRescue ) rc = aHook[i]->xPageRescue(p, pgno, pgsz, aOut, aTag);
  }
  return rc;
}

void tdeMainHookWalLock(TdeFile *p, int bLock){
  for(size_t i=0; i<TDE_ARRAY_SIZE(aHook); i++){
    if( aHook[i]->xWalLock ) aHook[i]->xWalLock(p, bLock);
  }
}

void tdeMainHookWalEnd(TdeFile *p, sqlite3_file *pWal, int eWhy, const uint8_t *aNewHdr, int bUnmap){
  for(size_t i=0; i<TDE_ARRAY_SIZE(aHook); i++){
    if( aHook[i]->xWalEnd ) aHook[i]->xWalEnd(p, pWal, eWhy, aNewHdr, bUnmap);
  }
}

int tdeMainHookPageCheck(TdeFile *p, uint32_t pgno, const uint8_t aTag[16], int bLast){
  int rc = SQLITE_OK;
  for(size_t i=0; i<TDE_ARRAY_SIZE(aHook) && rc==SQLITE_OK; i++){
    if( aHook[i]->xPageCheck ) rc = aHook[i]->xPageCheck(p, pgno, aTag, bLast);
  }
  return rc;
}

int tdeMainHookWriteOutsideWal(TdeFile *p){
  int rc = SQLITE_OK;
  for(size_t i=0; i<TDE_ARRAY_SIZE(aHook) && rc==SQLITE_OK; i++){
    if( aHook[i]->xWriteOutsideWal ) rc = aHook[i]->xWriteOutsideWal(p);
  }
  return rc;
}

int tdeMainHookWalFold(TdeFile *p, const uint32_t *aPgno, const uint8_t *aTag, uint32_t nFrame, uint32_t nDb){
  int rc = SQLITE_OK;
  for(size_t i=0; i<TDE_ARRAY_SIZE(aHook) && rc==SQLITE_OK; i++){
    if( aHook[i]->xWalFold ) rc = aHook[i]->xWalFold(p, aPgno, aTag, nFrame, nDb);
  }
  return rc;
}
