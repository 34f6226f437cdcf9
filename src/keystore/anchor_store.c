/*
** Anchor stores: where a database's freshness anchor record is kept
** (docs/FORMAT.md "External anchor").  `freshness_anchor = file:DIR` keeps
** it in a file of its own in DIR, written atomically; `pkcs11` asks the
** keystore provider (xAnchorGet / xAnchorSet, a data object on the token).
**
** A store keeps an opaque value: it never parses the record, never sees a
** page or a key, and never logs the value.  The keys layer (keys/anchor_record.c)
** builds and checks records; the VFS never calls this file directly.
*/
#include "tde_int.h"
#include "keystore/keystore.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

/* The directory must exist, be a directory, belong to us or root and not
** be writable by group or others: the point is a place the holder of the
** database files cannot write. */
static int anchorDirCheck(const char *zDir){
  struct stat st;
  if( stat(zDir, &st)!=0 ){
    return tdeErr(TDE_NOKEYSTORE, "freshness anchor directory %s cannot be reached: %s",
                  zDir, strerror(errno));
  }
  if( !S_ISDIR(st.st_mode) ){
    return tdeErr(TDE_NOKEYSTORE, "freshness anchor %s is not a directory", zDir);
  }
  if( (st.st_mode & (S_IWGRP|S_IWOTH))!=0 || (st.st_uid!=geteuid() && st.st_uid!=0) ){
    return tdeErr(TDE_NOKEYSTORE, "freshness anchor directory %s must be owned by this user "
                  "(or root) and not writable by group or others (chmod go-w)", zDir);
  }
  return TDE_OK;
}

static int anchorFilePath(const char *zDir, const char *zName, int bTmp, char *zOut, size_t nOut){
  int n = bTmp ? snprintf(zOut, nOut, "%s/.%s.%ld", zDir, zName, (long)getpid())
               : snprintf(zOut, nOut, "%s/%s", zDir, zName);
  if( n<0 || (size_t)n>=nOut ) return tdeErr(TDE_RANGE, "freshness anchor path too long");
  return TDE_OK;
}

static int anchorFileGet(const char *zDir, const char *zName, uint8_t *aOut, size_t nOut, size_t *pnOut){
  char zPath[PATH_MAX];
  struct stat st;
  size_t n = 0;
  int fd = -1, rc;
  rc = anchorDirCheck(zDir);
  if( rc==TDE_OK ) rc = anchorFilePath(zDir, zName, 0, zPath, sizeof(zPath));
  if( rc ) goto done;
  fd = open(zPath, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if( fd<0 ){
    rc = errno==ENOENT ? TDE_NOTFOUND
                       : tdeErr(TDE_NOKEYSTORE, "freshness anchor %s: %s", zPath, strerror(errno));
    goto done;
  }
  if( fstat(fd, &st)!=0 || !S_ISREG(st.st_mode) ){
    rc = tdeErr(TDE_AUTH, "freshness anchor %s is not a regular file", zPath);
    goto done;
  }
  if( (size_t)st.st_size>nOut ){
    rc = tdeErr(TDE_AUTH, "freshness anchor %s has %lld bytes: not an anchor record",
                zPath, (long long)st.st_size);
    goto done;
  }
  while( n<(size_t)st.st_size ){
    ssize_t got = read(fd, aOut+n, (size_t)st.st_size-n);
    if( got<0 && errno==EINTR ) continue;
    if( got<=0 ){
      rc = tdeErr(TDE_IO, "freshness anchor %s: read failed", zPath);
      goto done;
    }
    n += (size_t)got;
  }
  *pnOut = n;
done:
  if( fd>=0 ) close(fd);
  return rc;
}

/* Temporary file (O_EXCL, 0600), write, fsync, rename over the record,
** fsync the directory: a crash leaves the old record or the new one. */
static int anchorFileSet(const char *zDir, const char *zName, const uint8_t *aIn, size_t nIn){
  char zPath[PATH_MAX], zTmp[PATH_MAX];
  size_t n = 0;
  int fd = -1, dfd = -1, rc, bTmp = 0;
  rc = anchorDirCheck(zDir);
  if( rc==TDE_OK ) rc = anchorFilePath(zDir, zName, 0, zPath, sizeof(zPath));
  if( rc==TDE_OK ) rc = anchorFilePath(zDir, zName, 1, zTmp, sizeof(zTmp));
  if( rc ) goto done;
  unlink(zTmp);   /* a leftover of a crashed update by a process with our pid */
  fd = open(zTmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if( fd<0 ){
    rc = tdeErr(TDE_NOKEYSTORE, "freshness anchor %s: cannot create: %s", zTmp, strerror(errno));
    goto done;
  }
  bTmp = 1;
  while( n<nIn ){
    ssize_t put = write(fd, aIn+n, nIn-n);
    if( put<0 && errno==EINTR ) continue;
    if( put<=0 ){
      rc = tdeErr(TDE_IO, "freshness anchor %s: write failed: %s", zTmp, strerror(errno));
      goto done;
    }
    n += (size_t)put;
  }
  if( fsync(fd)!=0 ){
    rc = tdeErr(TDE_IO, "freshness anchor %s: fsync failed: %s", zTmp, strerror(errno));
    goto done;
  }
  if( close(fd)!=0 ){
    fd = -1;
    rc = tdeErr(TDE_IO, "freshness anchor %s: close failed: %s", zTmp, strerror(errno));
    goto done;
  }
  fd = -1;
  if( rename(zTmp, zPath)!=0 ){
    rc = tdeErr(TDE_IO, "freshness anchor %s: rename failed: %s", zPath, strerror(errno));
    goto done;
  }
  bTmp = 0;
  dfd = open(zDir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if( dfd<0 || fsync(dfd)!=0 ){
    rc = tdeErr(TDE_IO, "freshness anchor directory %s: fsync failed: %s", zDir, strerror(errno));
    goto done;
  }
done:
  if( fd>=0 ) close(fd);
  if( dfd>=0 ) close(dfd);
  if( bTmp ) unlink(zTmp);
  return rc;
}

/* The provider's anchor methods, if it has them (iVersion 3). */
static int anchorHasMethods(const tde_keystore_methods *pM){
  return pM->iVersion>=3
      && pM->szStruct >= (int)(offsetof(tde_keystore_methods, xAnchorSet) + sizeof(pM->xAnchorSet))
      && pM->xAnchorGet!=0 && pM->xAnchorSet!=0;
}

static int anchorKind(const TdeConfig *cfg, TdeKeystore *ks, char *zDir, size_t nDir, int *peKind){
  long long nIv;
  int rc = tdeConfigAnchor(cfg, peKind, zDir, nDir, &nIv);
  if( rc ) return rc;
  if( *peKind==TDE_ANCHOR_NONE ) return tdeErr(TDE_MISUSE, "no freshness_anchor configured");
  if( *peKind!=TDE_ANCHOR_FILE && (!ks || !anchorHasMethods(ks->pMethods)) ){
    return tdeErr(TDE_UNSUPPORTED, "keystore '%s' keeps no freshness anchors",
                  ks ? ks->pMethods->zName : "(none)");
  }
  return TDE_OK;
}

int tdeAnchorStoreGet(const TdeConfig *cfg, TdeKeystore *ks, const char *zName,
                      uint8_t *aOut, size_t nOut, size_t *pnOut){
  char zDir[PATH_MAX];
  int eKind, rc = anchorKind(cfg, ks, zDir, sizeof(zDir), &eKind);
  *pnOut = 0;
  if( rc ) return rc;
  if( eKind==TDE_ANCHOR_FILE ) return anchorFileGet(zDir, zName, aOut, nOut, pnOut);
  return ks->pMethods->xAnchorGet(ks, zName, aOut, nOut, pnOut);
}

int tdeAnchorStoreSet(const TdeConfig *cfg, TdeKeystore *ks, const char *zName,
                      const uint8_t *aIn, size_t nIn){
  char zDir[PATH_MAX];
  int eKind, rc = anchorKind(cfg, ks, zDir, sizeof(zDir), &eKind);
  if( rc ) return rc;
  if( nIn>TDE_ANCHOR_VALUE_MAX ) return tdeErr(TDE_RANGE, "anchor record too large");
  if( eKind==TDE_ANCHOR_FILE ) return anchorFileSet(zDir, zName, aIn, nIn);
  return ks->pMethods->xAnchorSet(ks, zName, aIn, nIn);
}
