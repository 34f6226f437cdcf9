/*
** The process-wide registry that keeps one open keystore per configuration
** file.  It sits above the configuration checks (config_load.c) and the
** provider table (providers.c), and nothing below calls it.
**
** The registry opens a keystore once (which may cost a memory-hard key
** derivation) and hands the same handle to every database that uses that
** configuration.  It must never cache a failed open (so a later call with
** the right password can succeed), never keep a password after the open
** returns, and never print.  Each real open (success or failure, once the
** configuration is read) and each close is recorded in the audit trail;
** the failure detail is the tde_last_error() text, which by contract never
** holds a password.
*/
#include "tde_int.h"
#include "config.h"
#include "keystore/keystore.h"
#include "audit/audit.h"
#include "cipher/cipher.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>

typedef struct RegEntry RegEntry;
struct RegEntry {
  RegEntry *pNext;
  char *zPath;           /* absolute configuration path: the lookup key */
  TdeConfig *pCfg;       /* parsed configuration, owned here */
  TdeKeystore *pKs;      /* open keystore, owned here */
  int nRef;              /* open databases using pKs (tdeRegistryRetain) */
};

/* The list and every entry in it are guarded by regMutex.  The mutex is
** also held across the provider's xOpen, so two threads acquiring the same
** configuration derive the wallet key once, not twice. */
static pthread_mutex_t regMutex = PTHREAD_MUTEX_INITIALIZER;
static RegEntry *pRegList;

static RegEntry *regFind(const char *zPath){
  RegEntry *p;
  for(p=pRegList; p; p=p->pNext){
    if( strcmp(p->zPath, zPath)==0 ) return p;
  }
  return 0;
}

/* Audit a keystore open or close.  pKs, when not NULL, is the open keystore:
** its current master key is named.  Called with regMutex held, so pCfg
** cannot be freed meanwhile by another thread's close. */
static void regAudit(const TdeConfig *pCfg, const char *zOp, const char *zKeystore,
                     TdeKeystore *pKs, int rc){
  char zKeyId[TDE_KEYID_MAX + 1];
  TdeAuditRec r;
  tdeAuditInit(&r, zOp);
  r.zKeystore = zKeystore;
  if( rc!=TDE_OK ){
    r.bFailure = 1;
    r.zDetail = tde_last_error()[0] ? tde_last_error() : tde_errstr(rc);
  }else if( pKs && pKs->pMethods->xCurrentKey(pKs, zKeyId, sizeof(zKeyId))==TDE_OK ){
    r.zKeyId = zKeyId;
  }else if( pKs ){
    tdeErrClear();             /* no current key is not this call's failure */
    r.zDetail = "no active master key";
  }
  tdeAudit(pCfg, &r);
}

/*
** Open (first call) or find the keystore of a configuration.  zPassword,
** when not NULL, is used as is and not retained; otherwise the password
** source the configuration names is read into secure memory and wiped
** before returning.  On failure nothing is cached and *ppKs is NULL.
** On success the caller holds a reference (taken under the registry's
** lock, so no close can free the keystore meanwhile) and gives it back
** with tdeRegistryRelease when it no longer uses *ppKs or *ppCfg.
*/
int tdeRegistryAcquire(const char *zConfigPath, const char *zPassword,
                       TdeKeystore **ppKs, const TdeConfig **ppCfg){
  char zAbs[PATH_MAX];
  RegEntry *pEntry = 0;
  TdeConfig *pCfg = 0;
  TdeKeystore *pKs = 0;
  const tde_keystore_methods *pM;
  char *zCfgPw = 0;
  size_t nCfgPw = 0;
  int bLocked = 0, bAudit = 0;
  int rc;

  if( ppKs ) *ppKs = 0;
  if( ppCfg ) *ppCfg = 0;
  if( ppKs==0 ) return tdeErr(TDE_MISUSE, "tdeRegistryAcquire: no output pointer");
  rc = tdeConfigLocate(zConfigPath, zAbs, sizeof(zAbs));
  if( rc!=TDE_OK ) goto acquire_out;

  pthread_mutex_lock(&regMutex);
  bLocked = 1;
  pEntry = regFind(zAbs);
  if( pEntry ){
    /* The reference is taken before the lock is let go: a close on
    ** another thread cannot free the keystore under the caller. */
    pEntry->nRef++;
    *ppKs = pEntry->pKs;
    if( ppCfg ) *ppCfg = pEntry->pCfg;
    pEntry = 0;
    rc = TDE_OK;
    goto acquire_out;
  }

  rc = tdeConfigLoad(zAbs, &pCfg);
  if( rc!=TDE_OK ) goto acquire_out;
  bAudit = 1;                     /* from here on the open is audited */
  pM = tdeKeystoreByName(tdeConfigGet(pCfg, "keystore"));
  if( pM==0 ){
    /* tdeConfigLoad validated the name; only a broken build gets here. */
    rc = tdeErr(TDE_CONFIG, "%s: keystore provider not available", zAbs);
    goto acquire_out;
  }
  if( zPassword==0 ){
    rc = tdeConfigPassword(pCfg, &zCfgPw, &nCfgPw);
    if( rc==TDE_NOTFOUND ){
      rc = TDE_OK;                /* no source: auto-login or a clear error */
      tdeErrClear();
    }else if( rc!=TDE_OK ){
      goto acquire_out;
    }
  }
  rc = pM->xOpen(pCfg, zPassword ? zPassword : zCfgPw, &pKs);
  if( rc!=TDE_OK ) goto acquire_out;

  pEntry = calloc(1, sizeof(*pEntry));
  if( pEntry ) pEntry->zPath = strdup(zAbs);
  if( pEntry==0 || pEntry->zPath==0 ){
    rc = tdeErr(TDE_NOMEM, "%s: out of memory", zAbs);
    goto acquire_out;
  }
  pEntry->pCfg = pCfg;
  pEntry->pKs = pKs;
  pEntry->nRef = 1;               /* the caller's */
  pEntry->pNext = pRegList;
  pRegList = pEntry;
  *ppKs = pKs;
  if( ppCfg ) *ppCfg = pCfg;
  regAudit(pCfg, "keystore_open", pM->zName, pKs, TDE_OK);
  bAudit = 0;
  pEntry = 0;
  pCfg = 0;
  pKs = 0;

acquire_out:
  if( bAudit ){
    regAudit(pCfg, "keystore_open", tdeConfigGet(pCfg, "keystore"), 0, rc);
  }
  if( bLocked ) pthread_mutex_unlock(&regMutex);
  tdeSecureFree(zCfgPw, zCfgPw ? nCfgPw+1 : 0);
  if( pEntry ){
    free(pEntry->zPath);
    free(pEntry);
  }
  if( pKs ) pKs->pMethods->xClose(pKs);
  tdeConfigFree(pCfg);
  return rc;
}

/* One more reference on pKs (already referenced by the caller); paired
** with tdeRegistryRelease. */
void tdeRegistryRetain(TdeKeystore *pKs){
  RegEntry *p;
  pthread_mutex_lock(&regMutex);
  for(p=pRegList; p; p=p->pNext){
    if( p->pKs==pKs ){ p->nRef++; break; }
  }
  pthread_mutex_unlock(&regMutex);
}

void tdeRegistryRelease(TdeKeystore *pKs){
  RegEntry *p;
  pthread_mutex_lock(&regMutex);
  for(p=pRegList; p; p=p->pNext){
    if( p->pKs==pKs && p->nRef>0 ){ p->nRef--; break; }
  }
  pthread_mutex_unlock(&regMutex);
}

/*
** Close the keystore of a configuration and forget it.  Refused with
** TDE_LOCKED while open databases still use it.
*/
int tdeRegistryClose(const char *zConfigPath){
  char zAbs[PATH_MAX];
  RegEntry **pp;
  RegEntry *pEntry = 0;
  int rc;

  rc = tdeConfigLocate(zConfigPath, zAbs, sizeof(zAbs));
  if( rc!=TDE_OK ) return rc;
  pthread_mutex_lock(&regMutex);
  for(pp=&pRegList; *pp; pp=&(*pp)->pNext){
    if( strcmp((*pp)->zPath, zAbs)==0 ){
      if( (*pp)->nRef>0 ){
        int n = (*pp)->nRef;
        rc = tdeErr(TDE_LOCKED, "%s: keystore in use by %d open database(s)", zAbs, n);
        regAudit((*pp)->pCfg, "keystore_close", (*pp)->pKs->pMethods->zName, 0, rc);
        pthread_mutex_unlock(&regMutex);
        return rc;
      }
      pEntry = *pp;
      *pp = pEntry->pNext;
      break;
    }
  }
  pthread_mutex_unlock(&regMutex);
  if( pEntry==0 ){
    return tdeErr(TDE_NOTFOUND, "%s: no keystore open for this configuration", zAbs);
  }
  /* The entry is out of the list: only this thread sees its config now. */
  {
    TdeAuditRec r;
    tdeAuditInit(&r, "keystore_close");
    r.zKeystore = pEntry->pKs->pMethods->zName;
    pEntry->pKs->pMethods->xClose(pEntry->pKs);
    tdeAudit(pEntry->pCfg, &r);
  }
  tdeConfigFree(pEntry->pCfg);
  free(pEntry->zPath);
  free(pEntry);
  return TDE_OK;
}

TdeKeystore *tdeRegistryPeek(const char *zConfigPath){
  char zAbs[PATH_MAX];
  RegEntry *pEntry;
  TdeKeystore *pKs;
  if( tdeConfigLocate(zConfigPath, zAbs, sizeof(zAbs))!=TDE_OK ){
    tdeErrClear();
    return 0;
  }
  pthread_mutex_lock(&regMutex);
  pEntry = regFind(zAbs);
  pKs = pEntry ? pEntry->pKs : 0;
  pthread_mutex_unlock(&regMutex);
  return pKs;
}
