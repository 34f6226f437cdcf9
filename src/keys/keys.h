/*
** The database header and its keyring (docs/FORMAT.md, "Header").
**
** The first TDE_HEADER_BYTES of every encrypted main database file hold two
** header slots of TDE_SLOT_SIZE bytes.  Each slot is a complete header with
** a sequence number; writers overwrite the slot NOT holding the newest
** valid header, sync, and only then is the new one in force -- so a crash at
** any instant leaves at least one valid slot (the LMDB meta-page pattern).
**
** A header names the database (random 16-byte id), the cipher, the data
** key version new pages use, and a keyring: entries (key version, keystore
** type, mechanism, master key id, wrapped data key).  Several entries may
** wrap the same version under different master keys: rotation and moving
** to another keystore only rewrite the header.
**
** This module parses and builds slots and unwraps data keys through a
** keystore; it never reads or writes a file and never sees a page.
*/
#ifndef TDE_KEYS_H
#define TDE_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "keystore/keystore.h"
#include "keys/layout.h"

#define TDE_SLOT_SIZE     4096
#define TDE_MAX_ENTRIES   16
#define TDE_CIPHER_AES256GCM_V1 1
#define TDE_FORMAT_V1     1
#define TDE_FORMAT_V2     2                   /* freshness (docs/FORMAT.md "Format version 2") */
#define TDE_FORMAT_V3     3                   /* one file: the pages among map regions (docs/FORMAT.md
                                              ** "Format version 3"); opt-in, experimental */
#define TDE_FORMAT_VERSION TDE_FORMAT_V2      /* what new databases get by default */
#define TDE_HDR_MAGIC     "SQLT-TDE"          /* 8 bytes, no NUL stored */
#define TDE_DBID_BYTES    16

typedef struct TdeWrapEntry {
  uint32_t version;                 /* data key version */
  uint8_t ksType;                   /* TDE_KS_* */
  uint8_t mech;                     /* TDE_MECH_* */
  uint16_t nBlob;
  char zKeyId[TDE_KEYID_MAX + 1];   /* master key id */
  uint8_t aBlob[TDE_WRAP_MAX];
} TdeWrapEntry;

typedef struct TdeHeader {
  uint64_t seq;                     /* newer slot has the larger number */
  uint8_t dbid[TDE_DBID_BYTES];
  uint16_t cipher;                  /* TDE_CIPHER_AES256GCM_V1 */
  uint16_t reserve;                 /* TDE_RESERVE_BYTES */
  uint32_t curVersion;              /* data key version for new writes */
  uint32_t flags;                   /* 0: no flag is defined; a slot with any set is refused */
  uint16_t version;                 /* format version: TDE_FORMAT_V1, _V2 or _V3 (0 encodes as 1) */
  /* Version 2 and 3 only (the freshness area; zero in version 1): */
  uint64_t logEpoch;                /* L: what the current WAL generation / journal is bound to */
  uint8_t aWalSalt[8];              /* salts of the WAL generation bound to L (zero: a journal) */
  uint8_t aMapRoot[16];             /* page-map root (zero: none) */
  uint64_t upgradeCursor;           /* zero: no upgrade in progress */
  uint64_t anchorCounter;           /* A: external anchor updates (zero: never anchored) */
  uint64_t mapGen;                  /* G: fold generation of the page map (zero with aMapRoot) */
  uint32_t mapPages;                /* n: map pages in force (zero with aMapRoot) */
  int nEntry;
  TdeWrapEntry aEntry[TDE_MAX_ENTRIES];
} TdeHeader;

/* Serialise into one slot, MAC keyed with macKey (tdeHeaderMacKey of the
** current data key).  TDE_RANGE if the entries do not fit. */
int tdeHeaderEncode(const TdeHeader *p, const uint8_t macKey[32], uint8_t *aSlot);

/* Parse one slot: magic, version, checksum, structure.  Does not check the
** MAC (that needs the data key).  TDE_FORMAT if invalid. */
int tdeHeaderDecode(const uint8_t *aSlot, TdeHeader *p);

/* Check a slot's MAC: TDE_OK or TDE_AUTH. */
int tdeHeaderCheckMac(const uint8_t *aSlot, const uint8_t macKey[32]);

/* Is header a newer than b (sequence, then version 2's L, G, A)? */
int tdeHeaderNewer(const TdeHeader *a, const TdeHeader *b);

/* Pick the newest valid slot of a header region of nRegion bytes (short
** regions count missing slots as invalid).  *piSlot gets 0 or 1.
** TDE_PLAINTEXT if the region is a plaintext SQLite database,
** TDE_FORMAT if no slot is valid. */
int tdeHeaderPick(const uint8_t *aRegion, size_t nRegion, TdeHeader *p, int *piSlot);

/* The layout a header region names (docs/FORMAT.md "Format version 3:
** Standby"): the format version and upgrade cursor of the slot
** tdeHeaderPick finds in force (no key: the MAC is not checked), with page
** size pgsz (0: not known).  The one place a copy of the database -- a
** standby's, a base copy, a restore -- learns where its pages lie.
** TDE_FORMAT (or TDE_PLAINTEXT) if no slot parses; *pL is then untouched. */
int tdeHeaderLayout(const uint8_t *aRegion, size_t nRegion, uint32_t pgsz, TdeLayout *pL);

/* Key that MACs the header: HKDF(dek, info="sqlite-tde v1 header mac"||dbid). */
int tdeHeaderMacKey(const uint8_t dek[32], const uint8_t dbid[16], uint8_t out[32]);

/* Associated data binding a wrapped data key to its database and version. */
#define TDE_WRAP_AAD_BYTES (17 + TDE_DBID_BYTES + 4)
void tdeWrapAad(const uint8_t dbid[16], uint32_t version, uint8_t out[TDE_WRAP_AAD_BYTES]);

/* New database: random id and data key (version 1) wrapped under the
** keystore's current master key, format version tdeCreateVersion().  aDek
** (32 bytes, secure memory) receives the data key. */
int tdeKeyringCreate(TdeKeystore *ks, TdeHeader *p, uint8_t *aDek);

/* Format version new databases get when the configuration has no
** format_version (TDE_FORMAT_V3 unless set; the setter exists for tests
** that need a version-1 or version-2 database: the format-2 twins).
** Process-wide. */
int tdeCreateVersion(void);
void tdeSetCreateVersion(int v);

/* Unwrap data key `version` with any wrapping the keystore can use.
** TDE_NOKEY with a message naming the master keys if none is held. */
int tdeKeyringUnlock(TdeKeystore *ks, const TdeHeader *p, uint32_t version, uint8_t *aDek);

/* Add a wrapping of data key `version` (aDek) under master key zKeyId of
** keystore ks.  Replaces an existing entry for the same version and key. */
int tdeKeyringAddWrap(TdeKeystore *ks, TdeHeader *p, uint32_t version,
                      const uint8_t *aDek, const char *zKeyId);

/* Hex of the database id into z (33 bytes). */
void tdeDbidHex(const uint8_t dbid[16], char *z);

#endif /* TDE_KEYS_H */
