/*
** KMIP TTLV codec: the Tag-Type-Length-Value encoding of KMIP messages
** (KMIP 1.x/2.0 specification, section "Message Encoding").
**
** Every item is a 3-byte tag, a 1-byte type, a 4-byte big-endian length of
** the value and the value itself, padded with zero bytes to a multiple of
** 8.  A structure's value is its children, one after another.
**
** The encoder builds a message in a growable buffer that is wiped whenever
** it moves or is freed (requests carry data keys).  The decoder is for
** bytes that came from the network: it checks every length against the
** buffer, the type's fixed length, the padding, a depth limit, an item
** limit and a maximum message size, and answers TDE_FORMAT (or
** TDE_RANGE / TDE_NOMEM) with a short text in the document, never reading
** outside the input.  Decoded items point into the caller's buffer, which
** must outlive the document.
**
** This file depends on nothing but libc, so the fuzz target builds it alone.
*/
#ifndef TDE_KMIP_TTLV_H
#define TDE_KMIP_TTLV_H

#include <stddef.h>
#include <stdint.h>

/* Item types (KMIP spec, "Item Type"). */
#define TTLV_STRUCTURE   0x01
#define TTLV_INTEGER     0x02
#define TTLV_LONG        0x03
#define TTLV_BIGINT      0x04
#define TTLV_ENUM        0x05
#define TTLV_BOOL        0x06
#define TTLV_TEXT        0x07
#define TTLV_BYTES       0x08
#define TTLV_DATETIME    0x09
#define TTLV_INTERVAL    0x0A

/* Limits applied by the decoder (and by the encoder where they apply). */
#define TTLV_MAX_MESSAGE (1024 * 1024)   /* whole message, header included */
#define TTLV_MAX_DEPTH   16              /* structures open at once, top included */
#define TTLV_MAX_ITEMS   8192            /* items in one message */
#define TTLV_HEADER      8               /* tag(3) type(1) length(4) */

/* ---- encoder ----------------------------------------------------------- */

typedef struct TtlvEnc {
  uint8_t *a;                /* message so far (malloc; wiped on move/free) */
  size_t n, nAlloc;
  int rc;                    /* first failure; later calls do nothing */
  int nOpen;                 /* open structures */
  size_t aOpen[TTLV_MAX_DEPTH];  /* offset of each open structure's header */
} TtlvEnc;

void ttlvEncInit(TtlvEnc *p);
/* Wipe and free the buffer.  Safe on a zeroed or already freed encoder. */
void ttlvEncFree(TtlvEnc *p);

/* Open a structure; ttlvEncClose writes its length.  Nesting deeper than
** TTLV_MAX_DEPTH is TDE_RANGE. */
void ttlvEncOpen(TtlvEnc *p, uint32_t tag);
void ttlvEncClose(TtlvEnc *p);
void ttlvEncInt(TtlvEnc *p, uint32_t tag, int32_t v);
void ttlvEncLong(TtlvEnc *p, uint32_t tag, int64_t v);
void ttlvEncEnum(TtlvEnc *p, uint32_t tag, uint32_t v);
void ttlvEncBool(TtlvEnc *p, uint32_t tag, int v);
void ttlvEncText(TtlvEnc *p, uint32_t tag, const char *z, size_t n);
void ttlvEncBytes(TtlvEnc *p, uint32_t tag, const uint8_t *a, size_t n);
void ttlvEncDateTime(TtlvEnc *p, uint32_t tag, int64_t unixTime);
void ttlvEncInterval(TtlvEnc *p, uint32_t tag, uint32_t seconds);
/* Big integer from big-endian two's complement bytes; sign-extended on the
** left to a multiple of 8 bytes as the specification requires. */
void ttlvEncBigInt(TtlvEnc *p, uint32_t tag, const uint8_t *a, size_t n);

/* TDE_OK and the message (*pa owned by p) if every call succeeded and all
** structures are closed; else the first failure code. */
int ttlvEncFinish(TtlvEnc *p, const uint8_t **pa, size_t *pn);

/* ---- decoder ----------------------------------------------------------- */

typedef struct TtlvItem {
  uint32_t tag;
  uint8_t type;
  uint8_t depth;             /* 0 for the top-level item */
  uint32_t len;              /* value length as encoded (before padding) */
  const uint8_t *pVal;       /* into the decoded buffer */
  int iParent;               /* -1 for the top-level item */
  int iFirst;                /* first child, -1 if none */
  int iNext;                 /* next sibling, -1 if none */
} TtlvItem;

typedef struct TtlvDoc {
  TtlvItem *aItem;           /* aItem[0] is the top-level item */
  int nItem, nAlloc;
  char zErr[128];            /* why decoding failed, or what a getter refused */
} TtlvDoc;

/*
** Decode one complete TTLV item (normally a structure) that fills a[0..n)
** exactly.  Returns TDE_OK, or TDE_FORMAT / TDE_RANGE / TDE_NOMEM with
** pDoc->zErr set; in every case free pDoc with ttlvDocFree.
*/
int ttlvDecode(const uint8_t *a, size_t n, TtlvDoc *pDoc);
void ttlvDocFree(TtlvDoc *pDoc);

/*
** From the first TTLV_HEADER bytes of a message, the length of the whole
** message (header included) in *pnTotal: TDE_FORMAT if the header is not
** a structure or its length is not a multiple of 8, TDE_RANGE if the
** message would exceed TTLV_MAX_MESSAGE.  For readers of a stream.
*/
int ttlvMessageLength(const uint8_t *aHdr, size_t *pnTotal);

/* First child of structure iParent with the given tag, or -1 (also when
** iParent is -1 or not a structure).  ttlvNextSibling: the next sibling of
** item i with that tag, or -1. */
int ttlvChild(const TtlvDoc *pDoc, int iParent, uint32_t tag);
int ttlvNextSibling(const TtlvDoc *pDoc, int i, uint32_t tag);
/* Number of children of iParent with that tag. */
int ttlvCount(const TtlvDoc *pDoc, int iParent, uint32_t tag);

/* Typed getters: TDE_FORMAT (with zErr) if item i is absent (i<0) or has
** another type. */
int ttlvGetInt(TtlvDoc *pDoc, int i, int32_t *pv);
int ttlvGetLong(TtlvDoc *pDoc, int i, int64_t *pv);
int ttlvGetEnum(TtlvDoc *pDoc, int i, uint32_t *pv);
int ttlvGetBool(TtlvDoc *pDoc, int i, int *pv);
int ttlvGetDateTime(TtlvDoc *pDoc, int i, int64_t *pv);
int ttlvGetInterval(TtlvDoc *pDoc, int i, uint32_t *pv);
int ttlvGetText(TtlvDoc *pDoc, int i, const char **pz, size_t *pn);
int ttlvGetBytes(TtlvDoc *pDoc, int i, const uint8_t **pa, size_t *pn);
int ttlvGetBigInt(TtlvDoc *pDoc, int i, const uint8_t **pa, size_t *pn);

#endif /* TDE_KMIP_TTLV_H */
