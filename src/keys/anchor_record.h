/*
** Freshness anchor records (docs/FORMAT.md "External anchor"): the keys
** layer's side of whole-file rollback detection.  A record names the
** database and the state its header had at the last anchor update (anchor
** counter A, log epoch L, sequence number), MACed with a key derived from
** a data key, and is kept by an anchor store (keystore/anchor_store.c) that
** never interprets it.  This module builds, checks and compares records;
** it never reads a database file and never sees a page.
*/
#ifndef TDE_KEYS_ANCHOR_RECORD_H
#define TDE_KEYS_ANCHOR_RECORD_H

#include <stdint.h>

#include "keys/keys.h"

#define TDE_ANCHOR_REC_BYTES 96
#define TDE_ANCHOR_NAME_MAX  64     /* "sqlite-tde-anchor-" + 32 hex + NUL */

typedef struct TdeAnchorRec {
  uint8_t dbid[TDE_DBID_BYTES];
  uint64_t A;                 /* anchor counter */
  uint64_t L;                 /* log epoch */
  uint64_t seq;               /* header sequence number */
  uint32_t version;           /* data-key version whose key MACs the record */
  int64_t t;                  /* Unix time of the update (informational) */
} TdeAnchorRec;

/* The store name of dbid's record: "sqlite-tde-anchor-<dbid hex>". */
void tdeAnchorName(const uint8_t dbid[TDE_DBID_BYTES], char zName[TDE_ANCHOR_NAME_MAX]);

/* Fetch dbid's record from the store cfg names (ks: the keystore, for
** stores on it) and check it: structure, database id, then the MAC with
** the data key of the record's version, which xKey returns (NULL if the
** caller does not hold that version).  TDE_OK with *pbFound 0: no record.
** TDE_AUTH: a record that is not authentic (message names why).
** TDE_NOKEYSTORE: the store cannot be reached. */
int tdeAnchorFetch(const TdeConfig *cfg, TdeKeystore *ks, const uint8_t dbid[TDE_DBID_BYTES],
                   const uint8_t *(*xKey)(void *, uint32_t), void *pArg,
                   TdeAnchorRec *pRec, int *pbFound);

/* Build r's record, MAC it with aDek (the data key of r->version) and
** write it to the store. */
int tdeAnchorPut(const TdeConfig *cfg, TdeKeystore *ks, const TdeAnchorRec *r, const uint8_t *aDek);

/* 1 if the header state (A, L, seq) is older than the record. */
int tdeAnchorIsStale(const TdeAnchorRec *r, uint64_t A, uint64_t L, uint64_t seq);

/*
** Place records (docs/FORMAT.md "External anchor", "The place"): which
** database id the store last anchored at a path, so that another database
** put in a database's place (a VACUUM INTO backup, a copy of another
** database under the same keystore: each has its own id and so its own
** anchor record) is refused.  zPlace is the database file's canonical
** path.  Not MACed: the store's protection keeps it, as it keeps the
** anchor record from being put back.
**
** Fetch: TDE_OK with *pbFound 0 (no record) or 1 and aDbid set;
** TDE_AUTH: a value that is not a place record for zPlace;
** TDE_NOKEYSTORE: the store cannot be reached.
*/
#define TDE_PLACE_REC_BYTES 96
int tdePlaceFetch(const TdeConfig *cfg, TdeKeystore *ks, const char *zPlace,
                  uint8_t aDbid[TDE_DBID_BYTES], int *pbFound);
int tdePlacePut(const TdeConfig *cfg, TdeKeystore *ks, const char *zPlace,
                const uint8_t dbid[TDE_DBID_BYTES], int64_t t);

#endif /* TDE_KEYS_ANCHOR_RECORD_H */
