/*
** Configuration file parser: turns tde.conf into a TdeConfig (see
** config.h for the format), checks the generic keys, resolves paths, and
** reads the password the configuration points to.
**
** It is a plain parser: it knows no keystore.  Which provider keys are
** valid is each provider's business (its xCheckConfig method);
** src/keystore/config_load.c puts the two together as tdeConfigParse and
** tdeConfigLoad.  So config.c depends on nothing above it, and the
** keystores, the audit trail and the key code may all call it.
**
** It must never print, never echo a configuration line back in an error
** (a user may have typed a password where it does not belong: only key
** names and line numbers go into messages), and never hold a password
** outside tdeSecureAlloc memory.
*/
#include "tde_int.h"
#include "config.h"
#include "cipher/cipher.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define TDE_CONFIG_DEFAULT   "/etc/sqlite-tde/tde.conf"
#define TDE_CONFIG_ENV       "SQLITE_TDE_CONFIG"
#define TDE_CONFIG_MAX_BYTES (64 * 1024)   /* a config is a few lines */

/* Keys every configuration may use, whatever the provider. */
static const char *const azGenericKeys[] = {
  "keystore", "password_file", "password_env", "password_fd", "audit_log", "audit_syslog",
  "format_version", "freshness_anchor", "freshness_anchor_interval", "standby_copies", 0
};

/* Copy zSrc into zOut[nOut]; TDE_RANGE if it does not fit. */
static int configCopy(char *zOut, size_t nOut, const char *zSrc){
  size_t n = strlen(zSrc);
  if( n>=nOut ) return tdeErr(TDE_RANGE, "path too long (%zu bytes)", n);
  memcpy(zOut, zSrc, n+1);
  return TDE_OK;
}

/* Write zDir "/" zRel into zOut; TDE_RANGE if it does not fit. */
static int configJoin(char *zOut, size_t nOut, const char *zDir, const char *zRel){
  size_t nDir = strlen(zDir);
  int n;
  while( nDir>1 && zDir[nDir-1]=='/' ) nDir--;   /* "/" stays "/" */
  n = snprintf(zOut, nOut, "%.*s%s%s", (int)nDir, zDir,
               (nDir==1 && zDir[0]=='/') ? "" : "/", zRel);
  if( n<0 || (size_t)n>=nOut ){
    return tdeErr(TDE_RANGE, "path too long: %s/%s", zDir, zRel);
  }
  return TDE_OK;
}

/* Absolute form of zPath in zOut: realpath() when the file exists (so two
** spellings of one file agree), else joined to the working directory. */
static int configAbsolute(const char *zPath, char *zOut, size_t nOut){
  char *zReal;
  char zCwd[PATH_MAX];
  if( zPath==0 || zPath[0]==0 ) return tdeErr(TDE_MISUSE, "empty configuration path");
  zReal = realpath(zPath, 0);
  if( zReal ){
    int rc = configCopy(zOut, nOut, zReal);
    free(zReal);
    return rc;
  }
  if( zPath[0]=='/' ) return configCopy(zOut, nOut, zPath);
  if( getcwd(zCwd, sizeof(zCwd))==0 ){
    return tdeErr(TDE_IO, "cannot resolve %s: working directory unknown: %s",
                  zPath, strerror(errno));
  }
  return configJoin(zOut, nOut, zCwd, zPath);
}

int tdeConfigLocate(const char *zExplicit, char *zOut, size_t nOut){
  const char *z = zExplicit;
  if( zOut==0 || nOut==0 ) return tdeErr(TDE_MISUSE, "tdeConfigLocate: no output buffer");
  if( z==0 || z[0]==0 ){
    z = getenv(TDE_CONFIG_ENV);
    if( z==0 || z[0]==0 ) z = TDE_CONFIG_DEFAULT;
  }
  return configAbsolute(z, zOut, nOut);
}

void tdeConfigFree(TdeConfig *p){
  int i;
  if( p==0 ) return;
  for(i=0; i<p->nEntry; i++){
    free(p->aEntry[i].zKey);
    free(p->aEntry[i].zValue);
  }
  free(p->zPath);
  free(p->zDir);
  free(p);
}

static int configIsSpace(char c){
  return c==' ' || c=='\t' || c=='\r' || c=='\v' || c=='\f';
}

static char *configStrndup(const char *z, size_t n){
  char *zOut = malloc(n+1);
  if( zOut ){
    memcpy(zOut, z, n);
    zOut[n] = 0;
  }
  return zOut;
}

static int configInList(const char *const *az, const char *zKey){
  if( az==0 ) return 0;
  for(; *az; az++){
    if( strcmp(*az, zKey)==0 ) return 1;
  }
  return 0;
}

static const TdeConfigEntry *configFind(const TdeConfig *p, const char *zKey){
  int i;
  if( p==0 || zKey==0 ) return 0;
  for(i=0; i<p->nEntry; i++){
    if( strcmp(p->aEntry[i].zKey, zKey)==0 ) return &p->aEntry[i];
  }
  return 0;
}

const char *const *tdeConfigGenericKeys(void){ return azGenericKeys; }

int tdeConfigIsGenericKey(const char *zKey){
  return zKey!=0 && configInList(azGenericKeys, zKey);
}

/* The checks on generic keys, after the provider has checked its own (so
** messages keep the order: keystore, unknown keys, values, conflicts). */
int tdeConfigCheckGeneric(const TdeConfig *p, const char *zName){
  const TdeConfigEntry *pFile = configFind(p, "password_file");
  const TdeConfigEntry *pEnv = configFind(p, "password_env");
  int i;

  if( zName==0 ) zName = p->zPath;
  /* A misspelt switch must not silently turn auditing off. */
  for(i=0; i<p->nEntry; i++){
    const TdeConfigEntry *pE = &p->aEntry[i];
    if( strcmp(pE->zKey, "audit_syslog")==0
     && strcmp(pE->zValue, "yes")!=0 && strcmp(pE->zValue, "no")!=0 ){
      return tdeErr(TDE_CONFIG, "%s:%d: audit_syslog must be 'yes' or 'no'",
                    zName, pE->iLine);
    }
    if( strcmp(pE->zKey, "format_version")==0
     && strcmp(pE->zValue, "1")!=0 && strcmp(pE->zValue, "2")!=0 && strcmp(pE->zValue, "3")!=0 ){
      return tdeErr(TDE_CONFIG, "%s:%d: format_version must be 1, 2 or 3 (the format of new "
                    "databases; 3 is the default)", zName, pE->iLine);
    }
  }
  /* The freshness anchor: a known kind, a store the keystore can hold, a
  ** whole number of seconds (docs/FORMAT.md "External anchor"). */
  for(i=0; i<p->nEntry; i++){
    const TdeConfigEntry *pE = &p->aEntry[i];
    int rc = TDE_OK;
    if( strcmp(pE->zKey, "freshness_anchor")==0 ){
      const char *zKs = tdeConfigGet(p, "keystore");
      if( strncmp(pE->zValue, "file:", 5)==0 ){
        if( pE->zValue[5]==0 ){
          rc = tdeErr(TDE_CONFIG, "%s:%d: freshness_anchor = file: needs a directory "
                      "(file:/path/to/anchor-dir)", zName, pE->iLine);
        }
      }else if( strcmp(pE->zValue, "pkcs11")==0 ){
        if( !zKs || strcmp(zKs, "pkcs11")!=0 ){
          rc = tdeErr(TDE_CONFIG, "%s:%d: freshness_anchor = pkcs11 needs keystore = pkcs11 "
                      "(the anchor is a data object on the keystore's token); use file:DIR "
                      "with this keystore", zName, pE->iLine);
        }
      }else if( strcmp(pE->zValue, "kmip")==0 ){
        if( !zKs || strcmp(zKs, "kmip")!=0 ){
          rc = tdeErr(TDE_CONFIG, "%s:%d: freshness_anchor = kmip needs keystore = kmip "
                      "(the anchor is an object on the key manager); use file:DIR with "
                      "this keystore", zName, pE->iLine);
        }
      }else{
        rc = tdeErr(TDE_CONFIG, "%s:%d: freshness_anchor must be 'file:DIR', 'pkcs11' or 'kmip'",
                    zName, pE->iLine);
      }
    }else if( strcmp(pE->zKey, "freshness_anchor_interval")==0 ){
      const char *z = pE->zValue;
      long long n = 0;
      int j;
      for(j=0; z[j]>='0' && z[j]<='9' && j<9; j++) n = n*10 + (z[j]-'0');
      if( j==0 || z[j]!=0 || n>31536000 ){
        rc = tdeErr(TDE_CONFIG, "%s:%d: freshness_anchor_interval must be a whole number of "
                    "seconds from 0 to 31536000", zName, pE->iLine);
      }else if( !configFind(p, "freshness_anchor") ){
        rc = tdeErr(TDE_CONFIG, "%s:%d: freshness_anchor_interval without freshness_anchor",
                    zName, pE->iLine);
      }
    }
    if( rc ) return rc;
  }
  /* Two password sources would make it unclear which one is used. */
  if( configFind(p, "password_fd") && (pFile || pEnv) ){
    const TdeConfigEntry *pFd = configFind(p, "password_fd");
    return tdeErr(TDE_CONFIG, "%s:%d: 'password_fd' conflicts with '%s': set only one "
                  "password source", zName, pFd->iLine, pFile ? "password_file" : "password_env");
  }
  if( pFile && pEnv ){
    const TdeConfigEntry *pLater = pFile->iLine > pEnv->iLine ? pFile : pEnv;
    const TdeConfigEntry *pFirst = pLater==pFile ? pEnv : pFile;
    return tdeErr(TDE_CONFIG, "%s:%d: '%s' conflicts with '%s' on line %d: "
                  "set only one password source", zName, pLater->iLine,
                  pLater->zKey, pFirst->zKey, pFirst->iLine);
  }
  return TDE_OK;
}

/*
** Parse zText.  Owns nothing of the caller's; on success *pp is a new
** config whose zPath is a copy of zName and zDir a copy of zDir (the
** working directory when zDir is NULL).  On failure *pp is NULL and
** nothing is leaked.
*/
int tdeConfigParseText(const char *zText, const char *zName, const char *zDir, TdeConfig **pp){
  TdeConfig *p = 0;
  const char *z;
  int iLine = 0;
  int rc = TDE_OK;
  char zCwd[PATH_MAX];

  if( pp==0 ) return tdeErr(TDE_MISUSE, "tdeConfigParseText: no output pointer");
  *pp = 0;
  if( zText==0 ) return tdeErr(TDE_MISUSE, "tdeConfigParseText: no text");
  if( zName==0 ) zName = "(config)";
  if( zDir==0 ){
    if( getcwd(zCwd, sizeof(zCwd))==0 ){
      return tdeErr(TDE_IO, "%s: working directory unknown: %s", zName, strerror(errno));
    }
    zDir = zCwd;
  }

  p = calloc(1, sizeof(*p));
  if( p==0 ){ rc = tdeErr(TDE_NOMEM, "%s: out of memory", zName); goto parse_out; }
  p->zPath = strdup(zName);
  p->zDir = strdup(zDir);
  if( p->zPath==0 || p->zDir==0 ){
    rc = tdeErr(TDE_NOMEM, "%s: out of memory", zName);
    goto parse_out;
  }

  z = zText;
  /* A UTF-8 byte order mark some editors write is not part of line 1. */
  if( (unsigned char)z[0]==0xEF && (unsigned char)z[1]==0xBB && (unsigned char)z[2]==0xBF ){
    z += 3;
  }
  while( *z ){
    const char *zEnd = strchr(z, '\n');
    const char *zNext;
    const char *zB, *zE, *zEq;
    const char *zKb, *zKe, *zVb, *zVe;
    TdeConfigEntry *pE;
    int i;

    if( zEnd==0 ) zEnd = z + strlen(z);
    zNext = *zEnd ? zEnd+1 : zEnd;
    iLine++;

    zB = z; zE = zEnd;
    while( zB<zE && configIsSpace(*zB) ) zB++;
    while( zE>zB && configIsSpace(zE[-1]) ) zE--;
    z = zNext;
    if( zB==zE || *zB=='#' ) continue;
    /* A '#' after a space or tab starts a trailing comment; a '#' right
    ** after another character is part of the value ("a#b"). */
    for(zEq=zB+1; zEq<zE; zEq++){
      if( *zEq=='#' && (zEq[-1]==' ' || zEq[-1]=='\t') ){
        zE = zEq;
        while( zE>zB && configIsSpace(zE[-1]) ) zE--;
        break;
      }
    }

    zEq = memchr(zB, '=', (size_t)(zE-zB));
    if( zEq==0 ){
      /* Never echo the line: it may be a stray secret. */
      rc = tdeErr(TDE_CONFIG, "%s:%d: expected 'key = value'", zName, iLine);
      goto parse_out;
    }
    zKb = zB; zKe = zEq;
    while( zKe>zKb && configIsSpace(zKe[-1]) ) zKe--;
    zVb = zEq+1; zVe = zE;
    while( zVb<zVe && configIsSpace(*zVb) ) zVb++;
    if( zKb==zKe ){
      rc = tdeErr(TDE_CONFIG, "%s:%d: missing key before '='", zName, iLine);
      goto parse_out;
    }
    for(i=0; zKb+i<zKe; i++){
      char c = zKb[i];
      if( !((c>='a' && c<='z') || (c>='0' && c<='9') || c=='_') ){
        rc = tdeErr(TDE_CONFIG, "%s:%d: invalid key before '=' (keys are lower-case "
                    "letters, digits and '_')", zName, iLine);
        goto parse_out;
      }
    }
    if( zVb==zVe ){
      rc = tdeErr(TDE_CONFIG, "%s:%d: missing value after '='", zName, iLine);
      goto parse_out;
    }
    for(i=0; i<p->nEntry; i++){
      const TdeConfigEntry *pPrev = &p->aEntry[i];
      if( strlen(pPrev->zKey)==(size_t)(zKe-zKb)
       && memcmp(pPrev->zKey, zKb, (size_t)(zKe-zKb))==0 ){
        rc = tdeErr(TDE_CONFIG, "%s:%d: duplicate key (first set on line %d)",
                    zName, iLine, pPrev->iLine);
        goto parse_out;
      }
    }
    if( p->nEntry>=TDE_CONFIG_MAX_ENTRIES ){
      rc = tdeErr(TDE_CONFIG, "%s:%d: too many entries (at most %d)",
                  zName, iLine, TDE_CONFIG_MAX_ENTRIES);
      goto parse_out;
    }
    pE = &p->aEntry[p->nEntry];
    pE->zKey = configStrndup(zKb, (size_t)(zKe-zKb));
    pE->zValue = configStrndup(zVb, (size_t)(zVe-zVb));
    pE->iLine = iLine;
    p->nEntry++;                 /* counted now so tdeConfigFree frees both */
    if( pE->zKey==0 || pE->zValue==0 ){
      rc = tdeErr(TDE_NOMEM, "%s: out of memory", zName);
      goto parse_out;
    }
  }

parse_out:
  if( rc!=TDE_OK ){
    tdeConfigFree(p);
    return rc;
  }
  *pp = p;
  return TDE_OK;
}

/* Does the configuration name a program or a library to run with the
** keys?  Every key that does ends in "_command" or is "pkcs11_module". */
static int configNamesCode(const TdeConfig *p){
  int i;
  for(i=0; i<p->nEntry; i++){
    const char *z = p->aEntry[i].zKey;
    size_t n = strlen(z);
    if( (n>8 && strcmp(z+n-8, "_command")==0) || strcmp(z, "pkcs11_module")==0 ) return 1;
  }
  return 0;
}

/*
** Read and parse zPath.  The config's zPath becomes the absolute path and
** zDir its directory.  A file that cannot be read is TDE_CONFIG.
*/
int tdeConfigReadFile(const char *zPath, TdeConfig **pp){
  char zAbs[PATH_MAX];
  char zDir[PATH_MAX];
  char *zText = 0;
  char *zSlash;
  size_t nText = 0;
  int fd = -1;
  int rc;
  struct stat st;

  if( pp==0 ) return tdeErr(TDE_MISUSE, "tdeConfigReadFile: no output pointer");
  *pp = 0;
  rc = configAbsolute(zPath, zAbs, sizeof(zAbs));
  if( rc!=TDE_OK ) goto load_out;

  fd = open(zAbs, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if( fd<0 ){
    rc = tdeErr(TDE_CONFIG, "%s: cannot open: %s", zAbs, strerror(errno));
    goto load_out;
  }
  if( fstat(fd, &st)!=0 ){
    rc = tdeErr(TDE_CONFIG, "%s: cannot stat: %s", zAbs, strerror(errno));
    goto load_out;
  }
  if( !S_ISREG(st.st_mode) ){
    rc = tdeErr(TDE_CONFIG, "%s: not a regular file", zAbs);
    goto load_out;
  }
  if( st.st_size>TDE_CONFIG_MAX_BYTES ){
    rc = tdeErr(TDE_CONFIG, "%s: too large (%lld bytes, at most %d)",
                zAbs, (long long)st.st_size, TDE_CONFIG_MAX_BYTES);
    goto load_out;
  }
  zText = malloc(TDE_CONFIG_MAX_BYTES + 1);
  if( zText==0 ){ rc = tdeErr(TDE_NOMEM, "%s: out of memory", zAbs); goto load_out; }
  for(;;){
    ssize_t k = read(fd, zText+nText, TDE_CONFIG_MAX_BYTES + 1 - nText);
    if( k<0 ){
      if( errno==EINTR ) continue;
      rc = tdeErr(TDE_CONFIG, "%s: read failed: %s", zAbs, strerror(errno));
      goto load_out;
    }
    if( k==0 ) break;
    nText += (size_t)k;
    if( nText>TDE_CONFIG_MAX_BYTES ){
      rc = tdeErr(TDE_CONFIG, "%s: too large (at most %d bytes)", zAbs, TDE_CONFIG_MAX_BYTES);
      goto load_out;
    }
  }
  zText[nText] = 0;
  if( memchr(zText, 0, nText) ){
    rc = tdeErr(TDE_CONFIG, "%s: contains a NUL byte; not a text file", zAbs);
    goto load_out;
  }

  memcpy(zDir, zAbs, strlen(zAbs)+1);
  zSlash = strrchr(zDir, '/');
  if( zSlash==zDir ) zSlash[1] = 0;   /* file in "/" */
  else if( zSlash ) *zSlash = 0;

  rc = tdeConfigParseText(zText, zAbs, zDir, pp);
  /* A configuration that chooses code run with the keys (a helper, a
  ** module) is trusted like that code: nobody else may rewrite it or swap
  ** it in its folder.  Checked on the descriptor read. */
  if( rc==TDE_OK && configNamesCode(*pp) ){
    rc = tdeTrustedFile(TDE_CONFIG, "configuration", zAbs, fd);
    if( rc!=TDE_OK ){
      tdeConfigFree(*pp);
      *pp = 0;
    }
  }

load_out:
  if( fd>=0 ) close(fd);
  free(zText);
  return rc;
}

const char *tdeConfigGet(const TdeConfig *p, const char *zKey){
  const TdeConfigEntry *pE = configFind(p, zKey);
  return pE ? pE->zValue : 0;
}

int tdeConfigPath(const TdeConfig *p, const char *zKey, char *zOut, size_t nOut){
  const char *zVal;
  if( p==0 || zKey==0 || zOut==0 || nOut==0 ){
    return tdeErr(TDE_MISUSE, "tdeConfigPath: bad arguments");
  }
  zVal = tdeConfigGet(p, zKey);
  if( zVal==0 ){
    return tdeErr(TDE_NOTFOUND, "%s: no '%s' key", p->zPath, zKey);
  }
  if( zVal[0]=='/' ) return configCopy(zOut, nOut, zVal);
  return configJoin(zOut, nOut, p->zDir, zVal);
}

int tdeConfigStandbyPlace(const TdeConfig *p, const char *zDb, int *pbIn){
  const char *zVal = p ? tdeConfigGet(p, "standby_copies") : 0;
  char zDbDir[PATH_MAX], zReal[PATH_MAX], zEntry[PATH_MAX], zJoined[PATH_MAX];
  char *zSlash;
  *pbIn = 0;
  if( zVal==0 || zDb==0 ) return TDE_OK;
  if( configCopy(zDbDir, sizeof(zDbDir), zDb) ) return TDE_RANGE;
  zSlash = strrchr(zDbDir, '/');
  if( zSlash==zDbDir ) zDbDir[1] = 0;
  else if( zSlash ) *zSlash = 0;
  else snprintf(zDbDir, sizeof(zDbDir), ".");
  if( !realpath(zDbDir, zReal) ) return TDE_OK;     /* unresolvable: not a standby place */
  while( *zVal ){
    size_t n = strcspn(zVal, ":");
    if( n>0 && n<sizeof(zEntry) ){
      char zDir[PATH_MAX];
      memcpy(zEntry, zVal, n);
      zEntry[n] = 0;
      if( (zEntry[0]=='/' ? configCopy(zJoined, sizeof(zJoined), zEntry)
                          : configJoin(zJoined, sizeof(zJoined), p->zDir, zEntry))==TDE_OK
       && realpath(zJoined, zDir) ){
        size_t m = strlen(zDir);
        if( strcmp(zDir, "/")==0
         || (strncmp(zReal, zDir, m)==0 && (zReal[m]==0 || zReal[m]=='/')) ){
          *pbIn = 1;
          break;
        }
      }
    }
    zVal += n;
    if( *zVal==':' ) zVal++;
  }
  tdeErrClear();
  return TDE_OK;
}

int tdeConfigAnchor(const TdeConfig *p, int *peKind, char *zDir, size_t nDir, long long *pnInterval){
  const char *zVal = tdeConfigGet(p, "freshness_anchor");
  const char *zIv = tdeConfigGet(p, "freshness_anchor_interval");
  *peKind = TDE_ANCHOR_NONE;
  *pnInterval = zIv ? atoll(zIv) : TDE_ANCHOR_INTERVAL_DEFAULT;
  if( nDir ) zDir[0] = 0;
  if( zVal==0 ) return TDE_OK;
  if( strncmp(zVal, "file:", 5)==0 && zVal[5] ){
    *peKind = TDE_ANCHOR_FILE;
    return zVal[5]=='/' ? configCopy(zDir, nDir, zVal+5) : configJoin(zDir, nDir, p->zDir, zVal+5);
  }
  if( strcmp(zVal, "pkcs11")==0 ){ *peKind = TDE_ANCHOR_PKCS11; return TDE_OK; }
  if( strcmp(zVal, "kmip")==0 ){ *peKind = TDE_ANCHOR_KMIP; return TDE_OK; }
  return tdeErr(TDE_CONFIG, "%s: freshness_anchor: unknown kind", p->zPath);
}

/*
** The one password reader behind password_file, password_fd and SQL
** tde_keystore_open_fd(): read fd to end of file into secure memory, at
** most TDE_PASSWORD_MAX bytes, drop one trailing "\n" or "\r\n", refuse
** an empty password or one with a NUL byte.  The password is then copied
** into a buffer of its own size, so no more of the secret stays in memory
** than it needs; every temporary is wiped on every path.  It sets no
** error message (the caller knows what the source is called) and keeps
** errno of a failed read for the caller's message.
*/
int tdePasswordRead(int fd, char **pz, size_t *pn){
  char *zBuf;           /* TDE_PASSWORD_MAX+1 bytes of secure memory */
  char *zPw = 0;
  size_t n = 0;
  int eWhy = TDE_PWREAD_OK, eSaved = 0;

  *pz = 0;
  *pn = 0;
  zBuf = tdeSecureAlloc(TDE_PASSWORD_MAX + 1);
  if( zBuf==0 ) return TDE_PWREAD_NOMEM;
  for(;;){
    ssize_t k = read(fd, zBuf+n, TDE_PASSWORD_MAX + 1 - n);
    if( k<0 && errno==EINTR ) continue;
    if( k<0 ){ eWhy = TDE_PWREAD_IO; eSaved = errno; goto pwread_out; }
    if( k==0 ) break;
    n += (size_t)k;
    if( n>TDE_PASSWORD_MAX ){ eWhy = TDE_PWREAD_LONG; goto pwread_out; }
  }
  if( n>0 && zBuf[n-1]=='\n' ){
    n--;
    if( n>0 && zBuf[n-1]=='\r' ) n--;
  }
  if( n==0 ){ eWhy = TDE_PWREAD_EMPTY; goto pwread_out; }
  if( memchr(zBuf, 0, n) ){ eWhy = TDE_PWREAD_NUL; goto pwread_out; }
  zPw = tdeSecureAlloc(n+1);
  if( zPw==0 ){ eWhy = TDE_PWREAD_NOMEM; goto pwread_out; }
  memcpy(zPw, zBuf, n);
  zPw[n] = 0;
  *pz = zPw;
  *pn = n;

pwread_out:
  tdeSecureFree(zBuf, TDE_PASSWORD_MAX + 1);
  if( eWhy==TDE_PWREAD_IO ) errno = eSaved;
  return eWhy;
}

/*
** Read password_file.  The file must be a regular file with no group or
** other permission bits (checked on the open descriptor: the file checked
** is the file read); tdePasswordRead reads it.
*/
static int configPasswordFile(const TdeConfig *p, char **pz, size_t *pn){
  char zPath[PATH_MAX];
  int fd = -1;
  int rc;
  struct stat st;

  rc = tdeConfigPath(p, "password_file", zPath, sizeof(zPath));
  if( rc!=TDE_OK ) goto pwfile_out;
  fd = open(zPath, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if( fd<0 ){
    rc = tdeErr(TDE_CONFIG, "%s: password_file %s: cannot open: %s",
                p->zPath, zPath, strerror(errno));
    goto pwfile_out;
  }
  if( fstat(fd, &st)!=0 ){
    rc = tdeErr(TDE_CONFIG, "%s: password_file %s: cannot stat: %s",
                p->zPath, zPath, strerror(errno));
    goto pwfile_out;
  }
  if( !S_ISREG(st.st_mode) ){
    rc = tdeErr(TDE_CONFIG, "%s: password_file %s is not a regular file", p->zPath, zPath);
    goto pwfile_out;
  }
  rc = tdeModeCheck(TDE_CONFIG, "password_file", zPath, &st, 077, 0);
  if( rc!=TDE_OK ) goto pwfile_out;
  switch( tdePasswordRead(fd, pz, pn) ){
    case TDE_PWREAD_OK:    rc = TDE_OK; break;
    case TDE_PWREAD_NOMEM: rc = tdeErr(TDE_NOMEM, "out of memory reading password"); break;
    case TDE_PWREAD_IO:
      rc = tdeErr(TDE_CONFIG, "%s: password_file %s: read failed: %s",
                  p->zPath, zPath, strerror(errno));
      break;
    case TDE_PWREAD_LONG:
      rc = tdeErr(TDE_CONFIG, "%s: password_file %s is longer than %d bytes",
                  p->zPath, zPath, TDE_PASSWORD_MAX);
      break;
    case TDE_PWREAD_EMPTY:
      rc = tdeErr(TDE_CONFIG, "%s: password_file %s is empty", p->zPath, zPath);
      break;
    default:
      rc = tdeErr(TDE_CONFIG, "%s: password_file %s contains a NUL byte", p->zPath, zPath);
      break;
  }

pwfile_out:
  if( fd>=0 ) close(fd);
  return rc;
}

/* Copy the variable password_env names into secure memory.  The
** environment itself is not ours to wipe.  An unset variable is not a
** broken configuration but a password not supplied to this process:
** TDE_BADPASSWORD, the code a keystore gives when it gets no password
** (so status reports CLOSED, and create never falls back to auto-login). */
static int configPasswordEnv(const TdeConfig *p, const char *zVar, char **pz, size_t *pn){
  const char *zEnv = getenv(zVar);
  char *zPw;
  size_t n;
  if( zEnv==0 || zEnv[0]==0 ){
    return tdeErr(TDE_BADPASSWORD, "%s: password_env names %s, which is %s in the environment",
                  p->zPath, zVar, zEnv ? "empty" : "not set");
  }
  n = strlen(zEnv);
  zPw = tdeSecureAlloc(n+1);
  if( zPw==0 ) return tdeErr(TDE_NOMEM, "out of memory reading password");
  memcpy(zPw, zEnv, n+1);
  *pz = zPw;
  *pn = n;
  return TDE_OK;
}

/* password_fd = N: read the password from inherited file descriptor N (a
** pipe a service manager or parent process wrote it to) with
** tdePasswordRead.  The descriptor is read once and left open (it is the
** caller's): after the keystore is open nothing reads it again, and a
** second read finds it empty. */
static int configPasswordFd(const TdeConfig *p, const char *zFd, char **pz, size_t *pn){
  char *zEnd = 0;
  long fd;
  struct stat st;

  errno = 0;
  fd = strtol(zFd, &zEnd, 10);
  if( errno || zEnd==zFd || *zEnd || fd<0 || fd>INT_MAX ){
    return tdeErr(TDE_CONFIG, "%s: password_fd must be a file descriptor number", p->zPath);
  }
  if( fstat((int)fd, &st)!=0 ){
    return tdeErr(TDE_BADPASSWORD, "%s: password_fd %ld is not open in this process: %s",
                  p->zPath, fd, strerror(errno));
  }
  switch( tdePasswordRead((int)fd, pz, pn) ){
    case TDE_PWREAD_OK:    return TDE_OK;
    case TDE_PWREAD_NOMEM: return tdeErr(TDE_NOMEM, "out of memory reading password");
    case TDE_PWREAD_IO:
      return tdeErr(TDE_CONFIG, "%s: password_fd %ld: read failed: %s", p->zPath, fd,
                    strerror(errno));
    case TDE_PWREAD_LONG:
      return tdeErr(TDE_CONFIG, "%s: password_fd %ld: longer than %d bytes", p->zPath, fd,
                    TDE_PASSWORD_MAX);
    case TDE_PWREAD_EMPTY:
      return tdeErr(TDE_BADPASSWORD, "%s: password_fd %ld gave no password (empty, or "
                    "already read)", p->zPath, fd);
    default:
      return tdeErr(TDE_BADPASSWORD, "%s: password_fd %ld gave a password with a NUL byte",
                    p->zPath, fd);
  }
}

int tdeConfigPassword(const TdeConfig *p, char **pz, size_t *pn){
  const char *zEnv, *zFd;
  if( p==0 || pz==0 || pn==0 ) return tdeErr(TDE_MISUSE, "tdeConfigPassword: bad arguments");
  *pz = 0;
  *pn = 0;
  if( tdeConfigGet(p, "password_file") ) return configPasswordFile(p, pz, pn);
  zEnv = tdeConfigGet(p, "password_env");
  if( zEnv ) return configPasswordEnv(p, zEnv, pz, pn);
  zFd = tdeConfigGet(p, "password_fd");
  if( zFd ) return configPasswordFd(p, zFd, pz, pn);
  return tdeErr(TDE_NOTFOUND, "%s: no password_file, password_env or password_fd", p->zPath);
}

/*
** A copy of cfg's audit_* settings (with its path and directory, so a
** relative audit_log resolves as before), for a keystore handle that must
** keep auditing after the caller frees cfg.  *pp is NULL when cfg names
** no audit setting.  Free with tdeConfigFree.
*/
int tdeConfigCopyAudit(const TdeConfig *cfg, TdeConfig **pp){
  TdeConfig *p;
  int i;
  *pp = 0;
  for(i=0; i<cfg->nEntry && strncmp(cfg->aEntry[i].zKey, "audit_", 6)!=0; i++){}
  if( i==cfg->nEntry ) return TDE_OK;
  p = calloc(1, sizeof(*p));
  if( p==0 ) return tdeErr(TDE_NOMEM, "out of memory");
  p->zPath = strdup(cfg->zPath);
  p->zDir = strdup(cfg->zDir);
  if( p->zPath==0 || p->zDir==0 ) goto copy_nomem;
  for(i=0; i<cfg->nEntry; i++){
    const TdeConfigEntry *pE = &cfg->aEntry[i];
    TdeConfigEntry *pNew;
    if( strncmp(pE->zKey, "audit_", 6)!=0 ) continue;
    pNew = &p->aEntry[p->nEntry++];
    pNew->zKey = strdup(pE->zKey);
    pNew->zValue = strdup(pE->zValue);
    pNew->iLine = pE->iLine;
    if( pNew->zKey==0 || pNew->zValue==0 ) goto copy_nomem;
  }
  *pp = p;
  return TDE_OK;

copy_nomem:
  tdeConfigFree(p);
  return tdeErr(TDE_NOMEM, "out of memory");
}
