/*
** Keystore provider interface.  A keystore holds master keys and wraps /
** unwraps data keys with them; it never sees a page, a file of SQLite or a
** database other than the associated data the caller passes.  Providers
** live one per file (wallet.c, pkcs11.c, kmip/, command.c) behind this table
** of function pointers, which starts with a version and a size so it can
** grow the way sqlite3_vfs does: new members are only ever appended, and
** callers check iVersion before using a member added later.
**
** Contract for all methods:
**  - return TDE_OK or a tde_rc, with detail through tdeErr();
**  - never log or return key bytes, passwords or PINs;
**  - a keystore handle may be used from several threads: providers
**    serialise internally;
**  - output key material goes only into caller buffers, which the caller
**    allocated with tdeSecureAlloc; providers wipe their own temporaries.
*/
#ifndef TDE_KEYSTORE_H
#define TDE_KEYSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "sqlite-tde.h"

/* Keystore type ids as stored in the database header (never renumber). */
#define TDE_KS_WALLET 1
#define TDE_KS_PKCS11 2
#define TDE_KS_KMIP   3
#define TDE_KS_COMMAND 4  /* external helper program (keystore/command.c) */

/* Wrapping mechanisms as stored in the header (never renumber). */
#define TDE_MECH_AES256_GCM  1   /* blob = iv(12) || ct || tag(16); aad bound */
#define TDE_MECH_AES_KWP     2   /* RFC 5649 key wrap with padding; no aad */
#define TDE_MECH_AES_KW      3   /* RFC 3394 key wrap; no aad */
#define TDE_MECH_EXTERNAL    4   /* opaque blob of an external key manager; aad
                                 ** bound by it (docs/COMMAND-KEYSTORE.md) */

#define TDE_WRAP_MAX 256         /* largest wrapped-key blob */

typedef struct TdeKeystore TdeKeystore;
typedef struct tde_keystore_methods tde_keystore_methods;

/* Every open keystore starts with this. */
struct TdeKeystore {
  const tde_keystore_methods *pMethods;
};

typedef struct TdeKeyInfo {
  char zId[TDE_KEYID_MAX + 1];
  int64_t created;          /* Unix time */
  int bRetired;             /* 0 active, 1 retired */
} TdeKeyInfo;

struct tde_keystore_methods {
  int iVersion;             /* 2 (xCheckConfig) */
  int szStruct;             /* sizeof(tde_keystore_methods) */
  const char *zName;        /* value of `keystore =` in the config */
  uint8_t typeId;           /* TDE_KS_* */
  const char *const *azKeys;/* config keys this provider accepts, NULL-ended */

  /* Create the keystore described by cfg with one new master key whose id
  ** goes to zKeyId.  zPassword NULL means auto-login (where supported).
  ** TDE_EXISTS if it already exists; never overwrites. */
  int (*xCreate)(const TdeConfig *cfg, const char *zPassword,
                 char *zKeyId, size_t nKeyId);
  /* Open.  zPassword may be NULL (auto-login, or no password available:
  ** then a password keystore fails with TDE_BADPASSWORD and a message
  ** saying a password is needed).  Missing keystore: TDE_NOKEYSTORE.
  ** Wrong password: TDE_BADPASSWORD. */
  int (*xOpen)(const TdeConfig *cfg, const char *zPassword, TdeKeystore **pp);
  void (*xClose)(TdeKeystore *p);
  /* Human-readable location (path, module, server) and auto-login flag. */
  int (*xDescribe)(TdeKeystore *p, char *zLoc, size_t nLoc, int *pbAutoLogin);
  /* Id of the master key new wrappings use (the newest active key).
  ** TDE_NOKEY if the keystore holds none. */
  int (*xCurrentKey)(TdeKeystore *p, char *zKeyId, size_t nKeyId);
  /* 1 if the keystore holds key zKeyId (active or retired), else 0. */
  int (*xHasKey)(TdeKeystore *p, const char *zKeyId);
  /* Create a new master key and make it current (rotation). */
  int (*xNewKey)(TdeKeystore *p, char *zKeyId, size_t nKeyId);
  /* List keys: xCb per key, stop early if it returns non-zero. */
  int (*xList)(TdeKeystore *p, int (*xCb)(void *, const TdeKeyInfo *), void *pArg);
  /* Wrap nDek bytes of aDek under master key zKeyId, binding aAad where the
  ** mechanism allows.  Writes the blob and its mechanism. */
  int (*xWrap)(TdeKeystore *p, const char *zKeyId,
               const uint8_t *aDek, size_t nDek,
               const uint8_t *aAad, size_t nAad,
               uint8_t *aOut, size_t nOut, size_t *pnOut, uint8_t *pMech);
  /* Unwrap a blob made by xWrap; TDE_AUTH if it does not authenticate,
  ** TDE_NOKEY if zKeyId is not held. */
  int (*xUnwrap)(TdeKeystore *p, const char *zKeyId, uint8_t mech,
                 const uint8_t *aIn, size_t nIn,
                 const uint8_t *aAad, size_t nAad,
                 uint8_t *aDek, size_t nDek);
  /* Mark master key zKeyId retired: it still unwraps but never wraps.
  ** Refused (TDE_MISUSE, clear message) for the current key: rotate first.
  ** TDE_NOKEY if not held.  Added in iVersion 1 (not yet released). */
  int (*xRetire)(TdeKeystore *p, const char *zKeyId);
  /* Added in iVersion 2.  Check a parsed configuration that names this
  ** provider: every key that is not generic (tdeConfigIsGenericKey) must
  ** be one of the provider's, and values the provider can judge without
  ** opening anything may be checked too.  zName names the file in
  ** messages ("NAME:LINE: ...", never echoing a value).  TDE_CONFIG on
  ** the first problem in line order.  Providers without it (iVersion 1 or
  ** NULL) get tdeKeystoreCheckKeys against azKeys. */
  int (*xCheckConfig)(const TdeConfig *cfg, const char *zName);
  /* Added in iVersion 3.  Freshness anchor records (docs/FORMAT.md
  ** "External anchor"): an opaque value of at most TDE_ANCHOR_VALUE_MAX
  ** bytes kept under zName where the holder of the database files cannot
  ** write.  The provider never interprets it (the keys layer builds and
  ** checks it).  xAnchorGet: TDE_NOTFOUND if there is none, TDE_RANGE if
  ** it is larger than nOut.  xAnchorSet replaces it atomically (or creates
  ** it).  NULL where the provider keeps no anchors. */
  int (*xAnchorGet)(TdeKeystore *p, const char *zName, uint8_t *aOut, size_t nOut, size_t *pnOut);
  int (*xAnchorSet)(TdeKeystore *p, const char *zName, const uint8_t *aIn, size_t nIn);
};

#define TDE_ANCHOR_VALUE_MAX 256

/*
** Anchor stores (keystore/anchor_store.c): where `freshness_anchor` in cfg says
** -- a record file in a directory (file:DIR) or the keystore's own store
** (pkcs11: xAnchorGet/xAnchorSet of ks).  Same contract as the methods
** above; a store that cannot be reached is TDE_NOKEYSTORE with a message
** naming it.  Without freshness_anchor: TDE_MISUSE.
*/
int tdeAnchorStoreGet(const TdeConfig *cfg, TdeKeystore *ks, const char *zName,
                      uint8_t *aOut, size_t nOut, size_t *pnOut);
int tdeAnchorStoreSet(const TdeConfig *cfg, TdeKeystore *ks, const char *zName,
                      const uint8_t *aIn, size_t nIn);

/* The built-in providers. */
extern const tde_keystore_methods tdeWalletMethods;
extern const tde_keystore_methods tdePkcs11Methods;
extern const tde_keystore_methods tdeCommandMethods;

/* Find a provider by config name or by header type id (NULL if none);
** keystore/providers.c holds the table. */
const tde_keystore_methods *tdeKeystoreByName(const char *zName);
const tde_keystore_methods *tdeKeystoreByType(uint8_t typeId);

/* The common key check providers use in xCheckConfig (keystore/config_load.c):
** every key is generic or in azKeys (NULL-ended), else TDE_CONFIG naming
** zName, the line and the key (a key that looks like a secret gets a hint
** that secrets never go in the configuration). */
int tdeKeystoreCheckKeys(const TdeConfig *cfg, const char *zName,
                         const char *const *azKeys);
/* Validate a parsed configuration: `keystore` present and known, the
** provider's keys (xCheckConfig), then the generic values. */
int tdeKeystoreCheckConfig(const TdeConfig *cfg, const char *zName);

/*
** Process-wide registry: one open keystore per configuration file, opened
** once and shared by every database that uses that configuration.  Thread
** safe.  tdeRegistryAcquire opens on first use (password from zPassword if
** not NULL, else from the configuration's password source, else none) and
** returns with a reference taken for the caller, who releases it
** (tdeRegistryRelease) when done with the keystore; the keystore stays open
** until tdeRegistryClose (refused while references are held) or process
** exit.  *ppCfg (may be NULL) receives the parsed configuration, owned by
** the registry and valid while the reference is held.
*/
int tdeRegistryAcquire(const char *zConfigPath, const char *zPassword,
                       TdeKeystore **ppKs, const TdeConfig **ppCfg);
/* A database that keeps using a keystore handle retains it and releases it
** when it closes; tdeRegistryClose refuses (TDE_LOCKED) while any does. */
void tdeRegistryRetain(TdeKeystore *pKs);
void tdeRegistryRelease(TdeKeystore *pKs);
/* Close and forget the keystore of a configuration (TDE_NOTFOUND if not open). */
int tdeRegistryClose(const char *zConfigPath);
/* Already open?  Returns the keystore or NULL, without opening. */
TdeKeystore *tdeRegistryPeek(const char *zConfigPath);

#endif /* TDE_KEYSTORE_H */
