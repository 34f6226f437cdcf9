/*
** Public keystore API (include/sqlite-tde.h): open, close, create, status,
** list, new master key and retirement, over the provider interface and the
** process-wide registry.
** Passwords passed in are never copied except by the provider into secure
** memory; nothing here logs or returns key bytes.
*/
#include "tde_int.h"
#include "config.h"
#include "keystore/keystore.h"
#include "cipher/cipher.h"

#include <limits.h>
#include <stddef.h>
#include <stdio.h>

int tde_keystore_open(const char *zConfig, const char *zPassword){
  char zPath[PATH_MAX];
  TdeKeystore *pKs;
  int rc = tdeConfigLocate(zConfig, zPath, sizeof(zPath));
  if( rc ) return rc;
  rc = tdeRegistryAcquire(zPath, zPassword, &pKs, NULL);
  if( rc==TDE_OK ) tdeRegistryRelease(pKs);
  return rc;
}

int tde_keystore_close(const char *zConfig){
  char zPath[PATH_MAX];
  int rc = tdeConfigLocate(zConfig, zPath, sizeof(zPath));
  if( rc ) return rc;
  return tdeRegistryClose(zPath);
}

int tde_keystore_create(const char *zConfig, const char *zPassword, char *zKeyIdOut, size_t nKeyIdOut){
  char zPath[PATH_MAX];
  char zKeyId[TDE_KEYID_MAX+1];
  TdeConfig *pCfg = 0;
  const tde_keystore_methods *pM;
  char *zPw = 0;
  size_t nPw = 0;
  int rc = tdeConfigLocate(zConfig, zPath, sizeof(zPath));
  if( rc ) return rc;
  rc = tdeConfigLoad(zPath, &pCfg);
  if( rc ) return rc;
  pM = tdeKeystoreByName(tdeConfigGet(pCfg, "keystore"));
  if( !pM ){ rc = tdeErr(TDE_CONFIG, "%s: unknown keystore type", zPath); goto done; }
  if( !zPassword ){
    rc = tdeConfigPassword(pCfg, &zPw, &nPw);
    if( rc==TDE_NOTFOUND ) rc = TDE_OK;
    if( rc ) goto done;
    zPassword = zPw;
  }
  rc = pM->xCreate(pCfg, zPassword, zKeyId, sizeof(zKeyId));
  if( rc==TDE_OK && zKeyIdOut && nKeyIdOut ) snprintf(zKeyIdOut, nKeyIdOut, "%s", zKeyId);
done:
  if( zPw ) tdeSecureFree(zPw, nPw+1);
  tdeConfigFree(pCfg);
  return rc;
}

typedef struct CountCtx { int n; } CountCtx;
static int countKey(void *pArg, const TdeKeyInfo *pInfo){
  TDE_UNUSED(pInfo);
  ((CountCtx*)pArg)->n++;
  return 0;
}

/* Fill *pInfo whole (the layout this library knows). */
static int keystoreStatus(const char *zConfig, tde_keystore_info *pInfo){
  char zPath[PATH_MAX];
  TdeKeystore *pKs;
  const TdeConfig *pCfg = 0;
  CountCtx cnt = {0};
  int rc;
  rc = tdeConfigLocate(zConfig, zPath, sizeof(zPath));
  if( rc ) return rc;
  rc = tdeRegistryAcquire(zPath, NULL, &pKs, &pCfg);
  if( rc ){
    TdeConfig *pTmp = 0;
    if( tdeConfigLoad(zPath, &pTmp)==TDE_OK ){
      snprintf(pInfo->zType, sizeof(pInfo->zType), "%s", tdeConfigGet(pTmp, "keystore"));
      tdeConfigFree(pTmp);
    }
    snprintf(pInfo->zStatus, sizeof(pInfo->zStatus), "%s",
             rc==TDE_BADPASSWORD ? "CLOSED" : "NOT_AVAILABLE");
    return rc==TDE_BADPASSWORD || rc==TDE_NOKEYSTORE ? TDE_OK : rc;
  }
  snprintf(pInfo->zType, sizeof(pInfo->zType), "%s", pKs->pMethods->zName);
  pKs->pMethods->xDescribe(pKs, pInfo->zLocation, sizeof(pInfo->zLocation), &pInfo->bAutoLogin);
  pKs->pMethods->xList(pKs, countKey, &cnt);
  pInfo->nKeys = cnt.n;
  rc = pKs->pMethods->xCurrentKey(pKs, pInfo->zCurrentKey, sizeof(pInfo->zCurrentKey));
  snprintf(pInfo->zStatus, sizeof(pInfo->zStatus), "%s", rc==TDE_OK ? "OPEN" : "OPEN_NO_MASTER_KEY");
  tdeRegistryRelease(pKs);
  return TDE_OK;
}

/* The caller's nSize says how many bytes of *pInfo exist (include/sqlite-tde.h):
** below the first layout's size it is refused before anything is written;
** otherwise no byte beyond it, nor beyond this library's layout, is written. */
int tde_keystore_status(const char *zConfig, tde_keystore_info *pInfo){
  tde_keystore_info info;
  size_t nCopy;
  int rc;
  if( !pInfo ) return tdeErr(TDE_MISUSE, "tde_keystore_status: no tde_keystore_info");
  if( pInfo->nSize<TDE_KEYSTORE_INFO_SIZE_V1 ){
    return tdeErr(TDE_MISUSE, "tde_keystore_status: tde_keystore_info.nSize is %u; set it to "
                  "sizeof(tde_keystore_info) (at least %u)", (unsigned)pInfo->nSize,
                  (unsigned)TDE_KEYSTORE_INFO_SIZE_V1);
  }
  memset(&info, 0, sizeof(info));
  rc = keystoreStatus(zConfig, &info);
  info.nSize = pInfo->nSize;
  nCopy = pInfo->nSize<sizeof(info) ? pInfo->nSize : sizeof(info);
  memcpy(pInfo, &info, nCopy);
  return rc;
}

typedef struct ListCtx { tde_key_cb xCb; void *pArg; } ListCtx;
static int listKey(void *pArg, const TdeKeyInfo *pInfo){
  ListCtx *c = pArg;
  return c->xCb(c->pArg, pInfo->zId, pInfo->created, pInfo->bRetired ? "RETIRED" : "ACTIVE");
}

int tde_keystore_list(const char *zConfig, tde_key_cb xCb, void *pArg){
  char zPath[PATH_MAX];
  TdeKeystore *pKs;
  ListCtx c;
  int rc = tdeConfigLocate(zConfig, zPath, sizeof(zPath));
  if( rc ) return rc;
  rc = tdeRegistryAcquire(zPath, NULL, &pKs, NULL);
  if( rc ) return rc;
  c.xCb = xCb;
  c.pArg = pArg;
  rc = pKs->pMethods->xList(pKs, listKey, &c);
  tdeRegistryRelease(pKs);
  return rc;
}

/* Does provider pM implement member xRetire?  (Checked by size, the way
** sqlite3_vfs members are checked by iVersion: a provider built against an
** older table has no such slot.) */
static int apiHasRetire(const tde_keystore_methods *pM){
  return pM->szStruct >= (int)(offsetof(tde_keystore_methods, xRetire) + sizeof(pM->xRetire))
      && pM->xRetire!=0;
}

/* The provider audits master_key_create itself. */
int tde_keystore_new_key(const char *zConfig, char *zKeyIdOut, size_t nKeyIdOut){
  char zPath[PATH_MAX];
  char zKeyId[TDE_KEYID_MAX+1];
  TdeKeystore *pKs;
  int rc;
  if( zKeyIdOut && nKeyIdOut ) zKeyIdOut[0] = 0;
  if( zKeyIdOut && nKeyIdOut<TDE_KEYID_MAX+1 ){
    /* Checked first: a key created but not reported would be confusing. */
    return tdeErr(TDE_RANGE, "tde_keystore_new_key: key id buffer needs %d bytes",
                  TDE_KEYID_MAX+1);
  }
  rc = tdeConfigLocate(zConfig, zPath, sizeof(zPath));
  if( rc ) return rc;
  rc = tdeRegistryAcquire(zPath, NULL, &pKs, NULL);
  if( rc ) return rc;
  rc = pKs->pMethods->xNewKey(pKs, zKeyId, sizeof(zKeyId));
  tdeRegistryRelease(pKs);
  if( rc==TDE_OK && zKeyIdOut ) snprintf(zKeyIdOut, nKeyIdOut, "%s", zKeyId);
  return rc;
}

/* The provider audits master_key_retire itself. */
int tde_keystore_retire(const char *zConfig, const char *zKeyId){
  char zPath[PATH_MAX];
  TdeKeystore *pKs;
  int rc;
  if( zKeyId==0 || zKeyId[0]==0 ){
    return tdeErr(TDE_MISUSE, "tde_keystore_retire: no master key id");
  }
  rc = tdeConfigLocate(zConfig, zPath, sizeof(zPath));
  if( rc ) return rc;
  rc = tdeRegistryAcquire(zPath, NULL, &pKs, NULL);
  if( rc ) return rc;
  if( !apiHasRetire(pKs->pMethods) ){
    rc = tdeErr(TDE_UNSUPPORTED, "keystore %s cannot retire master keys",
                pKs->pMethods->zName);
  }else{
    rc = pKs->pMethods->xRetire(pKs, zKeyId);
  }
  tdeRegistryRelease(pKs);
  return rc;
}
