/*
** Loading a configuration: the plain parser (src/config.c) plus the checks
** only the providers can make.  tdeConfigParse and tdeConfigLoad (declared
** in config.h, where every caller already looks) live here, one floor
** above config.c and the provider table (providers.c) and one below the
** registry (registry.c), which they never call; each provider judges its
** own keys through its method table.
**
** Messages name the file, line and key, never a value: a user may have
** typed a secret where it does not belong.
*/
#include "tde_int.h"
#include "config.h"
#include "keystore/keystore.h"

#include <stddef.h>
#include <stdio.h>

static int checkInList(const char *const *az, const char *zKey){
  if( az==0 ) return 0;
  for(; *az; az++){
    if( strcmp(*az, zKey)==0 ) return 1;
  }
  return 0;
}

/* "a, b, c": the keys a configuration of this provider may hold, for the
** "unknown key" message (which names no key of the file).  Static buffer:
** the message is formatted before the next call on any thread matters. */
static const char *checkKnownKeys(const char *const *azKeys){
  static _Thread_local char zBuf[512];
  size_t n = 0;
  int pass;
  zBuf[0] = 0;
  for(pass=0; pass<2; pass++){
    const char *const *az = pass==0 ? azKeys : tdeConfigGenericKeys();
    for(; az && *az; az++){
      int k = snprintf(zBuf+n, sizeof(zBuf)-n, "%s%s", n ? ", " : "", *az);
      if( k<0 || (size_t)k>=sizeof(zBuf)-n ) return zBuf;
      n += (size_t)k;
    }
  }
  return zBuf;
}

int tdeKeystoreCheckKeys(const TdeConfig *cfg, const char *zName,
                         const char *const *azKeys){
  int i;
  if( zName==0 ) zName = cfg->zPath;
  for(i=0; i<cfg->nEntry; i++){
    const TdeConfigEntry *pE = &cfg->aEntry[i];
    if( tdeConfigIsGenericKey(pE->zKey) ) continue;
    if( checkInList(azKeys, pE->zKey) ) continue;
    /* The key is not echoed: the "key" may be a password that was given
    ** as the configuration file (its '=' padding makes it look like one). */
    if( strstr(pE->zKey, "pass") || strstr(pE->zKey, "secret")
     || strcmp(pE->zKey, "pin")==0 ){
      return tdeErr(TDE_CONFIG, "%s:%d: unknown key (secrets never go in "
                    "the configuration: use password_file or password_env)",
                    zName, pE->iLine);
    }
    return tdeErr(TDE_CONFIG, "%s:%d: unknown key (known: %s)", zName, pE->iLine,
                  checkKnownKeys(azKeys));
  }
  return TDE_OK;
}

/* The names of all providers, for the "unknown keystore" message. */
static void checkProviderNames(char *zBuf, size_t nBuf){
  size_t n = 0;
  int i;
  zBuf[0] = 0;
  for(i=1; i<=255; i++){
    const tde_keystore_methods *pM = tdeKeystoreByType((uint8_t)i);
    int k;
    if( pM==0 || pM->zName==0 ) continue;
    k = snprintf(zBuf+n, nBuf-n, "%s%s", n ? ", " : "", pM->zName);
    if( k<0 || (size_t)k>=nBuf-n ) break;
    n += (size_t)k;
  }
}

/* Does pM have the iVersion 2 member xCheckConfig? */
static int checkHasMethod(const tde_keystore_methods *pM){
  return pM->iVersion>=2
      && pM->szStruct >= (int)(offsetof(tde_keystore_methods, xCheckConfig)
                               + sizeof(pM->xCheckConfig))
      && pM->xCheckConfig!=0;
}

int tdeKeystoreCheckConfig(const TdeConfig *cfg, const char *zName){
  const char *zKs;
  const tde_keystore_methods *pM;
  int iLine = 0, i, rc;

  if( zName==0 ) zName = cfg->zPath;
  zKs = tdeConfigGet(cfg, "keystore");
  if( zKs==0 ){
    return tdeErr(TDE_CONFIG, "%s: missing required key 'keystore'", zName);
  }
  pM = tdeKeystoreByName(zKs);
  if( pM==0 ){
    char zNames[128];
    for(i=0; i<cfg->nEntry; i++){
      if( strcmp(cfg->aEntry[i].zKey, "keystore")==0 ) iLine = cfg->aEntry[i].iLine;
    }
    checkProviderNames(zNames, sizeof(zNames));
    return tdeErr(TDE_CONFIG, "%s:%d: unknown keystore '%s' (known: %s)",
                  zName, iLine, zKs, zNames);
  }
  if( checkHasMethod(pM) ){
    rc = pM->xCheckConfig(cfg, zName);
  }else{
    rc = tdeKeystoreCheckKeys(cfg, zName, pM->azKeys);
  }
  if( rc!=TDE_OK ) return rc;
  return tdeConfigCheckGeneric(cfg, zName);
}

int tdeConfigParse(const char *zText, const char *zName, const char *zDir, TdeConfig **pp){
  TdeConfig *p = 0;
  int rc;
  if( pp==0 ) return tdeErr(TDE_MISUSE, "tdeConfigParse: no output pointer");
  rc = tdeConfigParseText(zText, zName, zDir, &p);
  if( rc==TDE_OK ){
    rc = tdeKeystoreCheckConfig(p, p->zPath);
    if( rc!=TDE_OK ){
      tdeConfigFree(p);
      p = 0;
    }
  }
  *pp = p;
  return rc;
}

int tdeConfigLoad(const char *zPath, TdeConfig **pp){
  TdeConfig *p = 0;
  int rc;
  if( pp==0 ) return tdeErr(TDE_MISUSE, "tdeConfigLoad: no output pointer");
  *pp = 0;
  rc = tdeConfigReadFile(zPath, &p);
  if( rc!=TDE_OK ) return rc;
  rc = tdeKeystoreCheckConfig(p, p->zPath);
  if( rc!=TDE_OK ){
    tdeConfigFree(p);
    return rc;
  }
  *pp = p;
  return TDE_OK;
}
