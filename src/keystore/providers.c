/*
** The built-in keystore providers, by configuration name and by the type
** id a database header records.  A table of method structs and nothing
** else: the floor below everything that must know which providers exist
** (the configuration checks in config_load.c, the registry, the status
** report).  It calls no function: adding a provider is one line here.
*/
#include "tde_int.h"
#include "keystore/keystore.h"

extern const tde_keystore_methods tdeKmipMethods;   /* keystore/kmip/kmip.c */
static const tde_keystore_methods *const apProvider[] = {
  &tdeWalletMethods,
  &tdeKmipMethods,
  &tdePkcs11Methods,
  &tdeCommandMethods,
};

const tde_keystore_methods *tdeKeystoreByName(const char *zName){
  size_t i;
  if( zName==0 ) return 0;
  for(i=0; i<TDE_ARRAY_SIZE(apProvider); i++){
    if( strcmp(apProvider[i]->zName, zName)==0 ) return apProvider[i];
  }
  return 0;
}

const tde_keystore_methods *tdeKeystoreByType(uint8_t typeId){
  size_t i;
  for(i=0; i<TDE_ARRAY_SIZE(apProvider); i++){
    if( apProvider[i]->typeId==typeId ) return apProvider[i];
  }
  return 0;
}
