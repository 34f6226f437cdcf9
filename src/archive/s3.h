/*
** A small S3 client for the keyless archive (docs/ARCHIVE.md): put, get,
** head, list by prefix and delete of whole objects in one bucket, over
** libcurl with AWS Signature Version 4 (CURLOPT_AWS_SIGV4), path-style URLs
** (ENDPOINT/BUCKET/KEY), HTTPS verified against the system's CAs or a CA
** file.  No home-made HTTP, TLS or signing.
**
** Not part of the library or the loadable extension: src/archive/ is built
** into a static library of its own (tde_archive) that the CLI and the tests
** link, so the VFS's load-time needs do not grow by libcurl.  Calls nothing
** in src/vfs or src/db; holds no data or master key, only the bucket's
** credentials.
**
** Must never: turn TLS verification off, put the secret key in a log line,
** an error message, a URL or a command line, or retry an operation that is
** not idempotent (every operation here is: whole-object PUT, GET, HEAD,
** DELETE, LIST).
**
** Errors: functions return a tde_rc (TDE_OK, TDE_NOTFOUND for a missing
** object or bucket, TDE_AUTH for a refused signature or access, TDE_RANGE
** for an object over the caller's bound or a key this client does not take,
** TDE_IO for everything the server or the network failed, TDE_CONFIG for
** the configuration and credentials) and record the detail with tdeErr():
** the operation, bucket and key, the HTTP status, the S3 error code and
** message from the body, or curl's error text.
*/
#ifndef TDE_ARCHIVE_S3_H
#define TDE_ARCHIVE_S3_H

#include "tde_int.h"

#include <stddef.h>
#include <stdint.h>

typedef struct TdeS3 TdeS3;

typedef struct TdeS3Config {
  const char *zEndpoint;    /* https://host[:port] (http:// only for diagnosis) */
  const char *zRegion;      /* signing region, e.g. "us-east-1"; RGW: its zonegroup */
  const char *zBucket;      /* 3..63 of [a-z0-9.-] */
  const char *zCaFile;      /* PEM CA bundle; NULL: the system's */
  const char *zCredFile;    /* KEY=VALUE file (mode 0600); NULL: the environment */
  int nTry;                 /* tries per operation for 5xx and network errors; 0: 4 */
  unsigned msBackoff;       /* first pause between tries, doubled each time; 0: 200 */
} TdeS3Config;

/* What HEAD and LIST report of an object. */
typedef struct TdeS3Object {
  char zKey[1025];          /* S3 keys are at most 1024 bytes */
  uint64_t nSize;
  char zEtag[80];           /* without quotes; the MD5 in hex for a single PUT */
} TdeS3Object;

/*
** Open a client.  The credentials come from pCfg->zCredFile (lines
** KEY=VALUE; blank lines and lines starting with '#' are skipped, other keys
** ignored; AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY required; refused
** when group or others may read it) or, with no file, from the variables
** AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.  The configuration's strings
** are copied.  *pp is NULL on failure.
*/
int tdeS3Open(const TdeS3Config *pCfg, TdeS3 **pp);
/* Free the client; the secret key is wiped.  NULL is a no-op. */
void tdeS3Close(TdeS3 *p);

/* Keys this client takes: 1..1024 bytes of [A-Za-z0-9._/-], no "//", no
** leading '/', no "." or ".." segment (so the URL needs no escaping and
** names one object).  TDE_OK or TDE_RANGE with a message. */
int tdeS3KeyCheck(const char *zKey);

/* Store n bytes under zKey, replacing any object of that name whole.  The
** request carries the payload's SHA-256 (signed) and MD5, so the server
** refuses a body damaged on the way. */
int tdeS3Put(TdeS3 *p, const char *zKey, const void *pData, size_t n);

/* Read the object into a new malloc'ed buffer (*ppData, free()), at most
** nMax bytes (more: TDE_RANGE, nothing returned).  The body is checked
** against the ETag when that is an MD5 (a single PUT's). */
int tdeS3Get(TdeS3 *p, const char *zKey, size_t nMax, uint8_t **ppData, size_t *pnData);

/* Write the object to fd from its current offset (a retry truncates back to
** it); *pnData (may be NULL) receives its size.  Checked as tdeS3Get. */
int tdeS3GetFd(TdeS3 *p, const char *zKey, int fd, uint64_t *pnData);

/* Size and ETag of an object (zKey filled in); TDE_NOTFOUND if absent. */
int tdeS3Head(TdeS3 *p, const char *zKey, TdeS3Object *pObj);

/* Every object whose key starts with zPrefix ("" for all), in key order,
** through ListObjectsV2 pages of at most 1000 and their continuation
** tokens.  xEach returning non-zero stops the listing; that value is
** returned. */
int tdeS3List(TdeS3 *p, const char *zPrefix,
              int (*xEach)(void *pArg, const TdeS3Object *pObj), void *pArg);

/* Delete an object; deleting an absent one succeeds (S3's rule). */
int tdeS3Delete(TdeS3 *p, const char *zKey);

/* The strict parser of one ListObjectsV2 page (exposed for the tests):
** calls xEach per <Contents>, copies the next token (bounded by nToken) or
** "" when the page is the last.  TDE_IO for anything malformed. */
int tdeS3ParseList(const char *zXml, size_t nXml, const char *zPrefix,
                   int (*xEach)(void *pArg, const TdeS3Object *pObj), void *pArg,
                   char *zToken, size_t nToken, int *pStop);

#endif /* TDE_ARCHIVE_S3_H */
