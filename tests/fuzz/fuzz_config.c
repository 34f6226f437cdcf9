/*
** Fuzz target for the configuration parser (src/config.c: tdeConfigParse).
**
** The input, NUL-terminated, is parsed as a configuration file; accepted
** ones are walked with tdeConfigGet and tdeConfigPath.  Invariants: a
** refusal says why (tde_last_error not empty); an accepted config has a
** `keystore` key, at most TDE_CONFIG_MAX_ENTRIES entries, no duplicate
** key, non-empty keys and values, and tdeConfigGet returns each value.
** Nothing is read from disk (password files are never opened here).
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>

#include "sqlite-tde.h"
#include "tde_int.h"
#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *aData, size_t nData);

int LLVMFuzzerTestOneInput(const uint8_t *aData, size_t nData){
  TdeConfig *p = 0;
  char *z;
  int rc;
  if( nData>65536 ) return 0;
  z = malloc(nData + 1);
  if( !z ) return 0;
  memcpy(z, aData, nData);
  z[nData] = 0;
  rc = tdeConfigParse(z, "fuzz.conf", "/nonexistent-dir", &p);
  if( rc==TDE_OK ){
    char zPath[PATH_MAX];
    if( p==0 || tdeConfigGet(p, "keystore")==0 ) abort();
    if( p->nEntry<1 || p->nEntry>TDE_CONFIG_MAX_ENTRIES ) abort();
    for(int i=0; i<p->nEntry; i++){
      const TdeConfigEntry *e = &p->aEntry[i];
      const char *zV;
      if( !e->zKey || !e->zValue || !e->zKey[0] ) abort();
      for(int j=0; j<i; j++) if( strcmp(p->aEntry[j].zKey, e->zKey)==0 ) abort();
      zV = tdeConfigGet(p, e->zKey);
      if( zV==0 || strcmp(zV, e->zValue)!=0 ) abort();
      rc = tdeConfigPath(p, e->zKey, zPath, sizeof(zPath));
      if( rc==TDE_OK && strlen(zPath)>=sizeof(zPath) ) abort();
    }
    tdeConfigFree(p);
  }else{
    if( p!=0 ) abort();
    if( tde_last_error()[0]==0 ) abort();      /* every refusal says why */
  }
  free(z);
  return 0;
}

#include "fuzz_replay.h"
