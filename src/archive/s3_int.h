/*
** Private to src/archive/: the XML reader (s3xml.c) the client (s3.c) uses.
*/
#ifndef TDE_ARCHIVE_S3_INT_H
#define TDE_ARCHIVE_S3_INT_H

#include <stddef.h>

/* Entity-decode n bytes of XML text into zOut (at most nOut-1 bytes and a
** NUL); -1 for an unknown entity, a '<' or too long. */
int tdeS3XmlDecode(const char *z, size_t n, char *zOut, size_t nOut);

/* Code and Message of an S3 <Error> body, printable ASCII, bounded; ""
** when absent or the body is not an error document. */
void tdeS3ParseError(const char *zXml, size_t nXml, char *zCode, size_t nCode,
                     char *zMsg, size_t nMsg);

#endif /* TDE_ARCHIVE_S3_INT_H */
