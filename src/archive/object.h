/*
** The archive's objects (docs/ARCHIVE.md "Objects", "Layout"): the
** fixed headers of a base copy ("TDEABAS1", 192 bytes) and of a segment
** ("TDEASEG1", 128 bytes), the checks of a whole object against the
** pinned signing keys, and the object names
**
**   PREFIX/DBID/HISTID/base/SSSSSSSSSSSSSSSS.base
**   PREFIX/DBID/HISTID/seg/FFFFFFFFFFFFFFFF-LLLLLLLLLLLLLLLL.seg
**
** Shared by the archiver (archive.c) and the restore: both sides build
** and read objects only through this file, so they cannot drift apart.
** Pure byte work plus the record chain and Ed25519 checks of src/repl
** (sign.c, spool.c): no network, no file, never a data key.
**
** Must never: accept a segment whose records do not continue each other
** one by one, whose chain does not end at the signed head, or whose head
** does not verify with a pinned key and name the expected database and
** history; accept a base copy whose bytes do not hash to the signed sum.
*/
#ifndef TDE_ARCHIVE_OBJECT_H
#define TDE_ARCHIVE_OBJECT_H

#include "repl/repl.h"

#include <stddef.h>
#include <stdint.h>

#define TDE_ARCH_BASE_MAGIC  "TDEABAS1"
#define TDE_ARCH_SEG_MAGIC   "TDEASEG1"
#define TDE_ARCH_BASE_HDR    192      /* then the copy: header region and pages */
#define TDE_ARCH_SEG_HDR     128      /* then the records, then the signed head */
#define TDE_ARCH_NAME_MAX    1025     /* S3 keys are at most 1024 bytes */

/* A base copy's header.  The signature (Ed25519, 64 bytes) covers the
** "TDEBASE1" statement of docs/FORMAT.md "Record chain and signatures"
** (tdeBaseSigned over these fields), exactly what a standby's BASE_END
** carries, so a base copy is verified as a standby verifies one. */
typedef struct TdeArchBase {
  uint8_t aDbid[16];
  uint8_t aHistory[16];
  uint64_t seq;               /* the copy is consistent with records 1..seq */
  uint64_t size;              /* bytes of the copy after the header */
  uint64_t tCapture;          /* ms since the epoch */
  uint8_t aChain[32];         /* record chain at seq */
  uint8_t aSum[32];           /* SHA-256 of the copy */
  uint8_t aSig[TDE_SIG_BYTES];
} TdeArchBase;

/* A segment's header: records first..last follow it back to back as
** stored in DB-tdeship (TXN and GAP, never MARK), nRecBytes in all, then
** the signed head (TDE_HEAD_BYTES) at last. */
typedef struct TdeArchSeg {
  uint8_t aDbid[16];
  uint8_t aHistory[16];
  uint64_t first, last;
  uint8_t aChainBefore[32];   /* record chain at first-1 */
  uint64_t nRecBytes;
  uint64_t tClosed;           /* ms since the epoch, when the archiver closed it */
} TdeArchSeg;

/* Encode into a[TDE_ARCH_*_HDR] (reserved bytes zero). */
void tdeArchBaseEncode(const TdeArchBase *p, uint8_t *a);
void tdeArchSegEncode(const TdeArchSeg *p, uint8_t *a);
/* Decode the header at the start of an object of n bytes (n may be the
** header alone).  TDE_FORMAT (with a message) for a wrong magic, a short
** buffer, non-zero reserved bytes or impossible fields (base: size below
** the header region; segment: first 0 or above last). */
int tdeArchBaseDecode(const uint8_t *a, size_t n, TdeArchBase *p);
int tdeArchSegDecode(const uint8_t *a, size_t n, TdeArchSeg *p);

/* Sign a base header (fills p->aSig); verify one with the pinned keys
** (aKey[0..nKey)) and check it names database aDbid and history aHistory
** (either NULL: not checked).  Verifying the header alone proves the
** fields, not the copy: compare the copy's SHA-256 with p->aSum. */
int tdeArchBaseSign(struct evp_pkey_st *k, TdeArchBase *p);
int tdeArchBaseVerify(struct evp_pkey_st *const *aKey, int nKey, const TdeArchBase *p,
                      const uint8_t *aDbid, const uint8_t *aHistory);

/*
** Check a whole base object a[0..n): header, signature (tdeArchBaseVerify),
** n == TDE_ARCH_BASE_HDR + size, SHA-256 of the copy.  *p gets the header.
*/
int tdeArchBaseCheck(const uint8_t *a, size_t n, struct evp_pkey_st *const *aKey, int nKey,
                     const uint8_t *aDbid, const uint8_t *aHistory, TdeArchBase *p);

/*
** Check a whole segment object a[0..n): header; n == header + nRecBytes +
** TDE_HEAD_BYTES; every record whole (tdeRecCheck), TXN or GAP, sequences
** first, first+1, ..., last exactly; the chain from aChainPrev (NULL: the
** header's aChainBefore; else they must be equal) over every record; the
** head verifies with a pinned key, names aDbid and aHistory (NULL: the
** header's), is at last and carries the chain computed.  nKey 0 is refused.
** *p gets the header, aChainOut (may be NULL) the chain at last.
** TDE_FORMAT for a malformed object, TDE_AUTH for a chain, a signature or
** a name that does not match.
*/
int tdeArchSegCheck(const uint8_t *a, size_t n, struct evp_pkey_st *const *aKey, int nKey,
                    const uint8_t *aDbid, const uint8_t *aHistory, const uint8_t *aChainPrev,
                    TdeArchSeg *p, uint8_t *aChainOut);

/*
** Walk the records of a segment already through tdeArchSegCheck: *pOff
** starts at 0 and is advanced; each call sets *r, *ppRec (inside a) and
** *pnRec.  TDE_NOTFOUND after the last record.
*/
int tdeArchSegNext(const uint8_t *a, size_t n, size_t *pOff, TdeRec *r, const uint8_t **ppRec, size_t *pnRec);

/* ---- names ---------------------------------------------------------------- */

/* A prefix: "" or segments of [A-Za-z0-9._-] separated by single '/',
** without "." or ".." segments; leading and trailing '/' are ignored by
** the builders.  TDE_OK or TDE_CONFIG with a message. */
int tdeArchPrefixCheck(const char *zPrefix);

/* "PREFIX/DBID/HISTID/" (with the trailing '/'; without a prefix
** "DBID/HISTID/"), the folder of one history; zDbPrefix: "PREFIX/DBID/"
** (all histories of a database).  TDE_RANGE if n is too small. */
int tdeArchHistDir(const char *zPrefix, const uint8_t *aDbid, const uint8_t *aHistory, char *z, size_t n);
int tdeArchDbDir(const char *zPrefix, const uint8_t *aDbid, char *z, size_t n);
int tdeArchBaseName(const char *zPrefix, const uint8_t *aDbid, const uint8_t *aHistory, uint64_t seq,
                    char *z, size_t n);
int tdeArchSegName(const char *zPrefix, const uint8_t *aDbid, const uint8_t *aHistory, uint64_t first,
                   uint64_t last, char *z, size_t n);

#define TDE_ARCH_KIND_BASE  1
#define TDE_ARCH_KIND_SEG   2

/* What a name says.  A base at S: first = last = S. */
typedef struct TdeArchName {
  int eKind;
  uint8_t aDbid[16];
  uint8_t aHistory[16];
  uint64_t first, last;
} TdeArchName;

/* Parse zKey under zPrefix (as given to the builders): exactly one of the
** two forms, lower-case hex of the right lengths, first <= last.
** TDE_NOTFOUND for a key of any other form (not ours: a listing skips it). */
int tdeArchNameParse(const char *zPrefix, const char *zKey, TdeArchName *p);

#endif /* TDE_ARCHIVE_OBJECT_H */
