/*
** Command keystore provider ("command", TDE_KS_COMMAND): master keys live
** in an external key manager (Vault/OpenBao Transit, a cloud KMS, a local
** tool), reached through helper programs the configuration names.  The
** helper wraps and unwraps data keys; this file only runs it and checks
** its answer.  The protocol (JSON on stdin/stdout, version 1) is
** docs/COMMAND-KEYSTORE.md, which this code follows.
**
**   wrap_command       = PROGRAM [ARG...]   required
**   unwrap_command     = PROGRAM [ARG...]   required
**   list_keys_command  = PROGRAM [ARG...]   which keys exist, which is current
**   new_key_command    = PROGRAM [ARG...]   create a key (needs list_keys_command)
**   command_key_id     = ID                 the one key, when there is no list
**   command_timeout_ms = N                  per run, default 10000
**
** Arguments are split on blanks (no quoting).  A PROGRAM with a '/' that is
** relative is resolved against the configuration's directory; one without
** a '/' is looked up in PATH when the keystore opens.  Helpers run in the
** configuration's directory, so relative arguments mean the same there.
**
** It must never put a data key, password or PIN on a command line or in a
** helper's environment (the key goes through the helper's stdin, the
** variable password_env names is removed from the child's environment),
** never log a helper's stdout, log its stderr only after removing
** non-printable bytes and the base64 of the key in flight, and never print.
** A helper runs at keystore open (list), database open (unwrap), and for
** create, rotate, migrate and rekey (wrap, new key): never per page.
** Every run has a deadline; a helper that misses it is killed with its
** process group.  The child gets its own stdin (a socket, so a helper that
** exits early cannot raise SIGPIPE here), stdout and stderr, and no other
** descriptor of this process.
*/
#include "tde_int.h"
#include "config.h"
#include "keystore/keystore.h"
#include "audit/audit.h"
#include "cipher/cipher.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define CMD_PROTOCOL     1
#define CMD_MAX_ARGS     32
#define CMD_OUT_MAX      (64 * 1024)   /* largest stdout accepted */
#define CMD_ERR_MAX      2048          /* stderr kept for the log */
#define CMD_TIMEOUT_DEF  10000
#define CMD_TIMEOUT_MAX  600000
#define CMD_MAX_KEYS     256

/* Helper exit codes with a meaning (docs/COMMAND-KEYSTORE.md). */
#define CMD_EXIT_NOKEY   3
#define CMD_EXIT_AUTH    4

/* The associated data the key code passes (docs/FORMAT.md). */
static const char zAadLabel[] = "sqlite-tde v1 dek";
#define CMD_AAD_LABEL 17

extern const tde_keystore_methods tdeCommandMethods;

static const char *const azCommandKeys[] = {
  "wrap_command", "unwrap_command", "new_key_command", "list_keys_command",
  "command_key_id", "command_timeout_ms", 0
};

typedef enum CmdOp { CMD_WRAP, CMD_UNWRAP, CMD_NEWKEY, CMD_LIST, CMD_NOP } CmdOp;
static const char *const azOpName[] = { "wrap", "unwrap", "new_key", "list_keys" };
static const char *const azOpKey[] = {
  "wrap_command", "unwrap_command", "new_key_command", "list_keys_command"
};

typedef struct CmdArgv {
  char *zBuf;                  /* the split copy of the value */
  char *azArg[CMD_MAX_ARGS+1]; /* NULL-ended; azArg[0] absolute or found in PATH */
  char *zProg;                 /* resolved program (malloc) */
  int nArg;
} CmdArgv;

typedef struct CmdKey {
  char zId[TDE_KEYID_MAX + 1];
  int64_t created;
  int bRetired;
} CmdKey;

typedef struct Command {
  TdeKeystore base;            /* must be first */
  pthread_mutex_t mutex;       /* guards everything below */
  CmdArgv aCmd[4];             /* by CmdOp; nArg==0 when not configured */
  char zFixedKey[TDE_KEYID_MAX + 1];   /* command_key_id, or "" */
  char *zDropEnv;              /* variable removed from the child's env, or NULL */
  char *zDir;                  /* the configuration's directory: helpers run there */
  char zLoc[256];              /* xDescribe: the wrap command line, shortened */
  int msTimeout;
  TdeConfig *pAudit;           /* audit settings, or NULL */
  CmdKey *aKey;                /* from list_keys, in the helper's order */
  int nKey;
  int bListed;                 /* aKey holds a listing */
} Command;

/* ---- small helpers -------------------------------------------------------- */

static void cmdAudit(const TdeConfig *pCfg, const char *zOp, const char *zKeyId,
                     int rc, const char *zDetail){
  tdeAuditKeystoreOp(pCfg, "command", zOp, zKeyId, rc, zDetail);
}

/* A key id is 1..TDE_KEYID_MAX printable ASCII bytes without blanks, '"'
** or '\\' (so it never needs escaping in JSON, a log or the CLI). */
static int cmdKeyIdOk(const char *z, size_t n){
  size_t i;
  if( n==0 || n>TDE_KEYID_MAX ) return 0;
  for(i=0; i<n; i++){
    unsigned char c = (unsigned char)z[i];
    if( c<=0x20 || c>=0x7f || c=='"' || c=='\\' ) return 0;
  }
  return 1;
}

static const char b64Alphabet[] =
  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Base64 (RFC 4648, padded) of a[n] into z, which has room for
** 4*((n+2)/3)+1 bytes; returns the length. */
static size_t cmdB64Encode(const uint8_t *a, size_t n, char *z){
  size_t i, k = 0;
  for(i=0; i+2<n; i+=3){
    uint32_t v = ((uint32_t)a[i]<<16) | ((uint32_t)a[i+1]<<8) | a[i+2];
    z[k++] = b64Alphabet[(v>>18)&63]; z[k++] = b64Alphabet[(v>>12)&63];
    z[k++] = b64Alphabet[(v>>6)&63];  z[k++] = b64Alphabet[v&63];
  }
  if( i<n ){
    uint32_t v = (uint32_t)a[i]<<16;
    if( i+1<n ) v |= (uint32_t)a[i+1]<<8;
    z[k++] = b64Alphabet[(v>>18)&63]; z[k++] = b64Alphabet[(v>>12)&63];
    z[k++] = i+1<n ? b64Alphabet[(v>>6)&63] : '=';
    z[k++] = '=';
  }
  z[k] = 0;
  return k;
}

static int b64Value(char c){
  if( c>='A' && c<='Z' ) return c-'A';
  if( c>='a' && c<='z' ) return c-'a'+26;
  if( c>='0' && c<='9' ) return c-'0'+52;
  if( c=='+' ) return 62;
  if( c=='/' ) return 63;
  return -1;
}

/* Strict padded base64 of z[n] into a[nMax]; *pn the length.  -1 if z is
** not canonical base64 or does not fit. */
static int cmdB64Decode(const char *z, size_t n, uint8_t *a, size_t nMax, size_t *pn){
  size_t i, k = 0;
  *pn = 0;
  if( n%4 ) return -1;
  for(i=0; i<n; i+=4){
    int v0 = b64Value(z[i]), v1 = b64Value(z[i+1]);
    int v2 = z[i+2]=='=' ? -2 : b64Value(z[i+2]);
    int v3 = z[i+3]=='=' ? -2 : b64Value(z[i+3]);
    uint32_t v;
    int nOut = 3;
    if( v0<0 || v1<0 || v2==-1 || v3==-1 ) return -1;
    if( v2==-2 || v3==-2 ){
      if( i+4!=n ) return -1;              /* padding only at the end */
      if( v2==-2 && v3!=-2 ) return -1;
      nOut = v2==-2 ? 1 : 2;
    }
    v = ((uint32_t)v0<<18) | ((uint32_t)v1<<12)
      | ((uint32_t)(v2<0 ? 0 : v2)<<6) | (uint32_t)(v3<0 ? 0 : v3);
    if( (nOut==1 && (v & 0xffff)) || (nOut==2 && (v & 0xff)) ) return -1;
    if( k+(size_t)nOut>nMax ) return -1;
    a[k++] = (uint8_t)(v>>16);
    if( nOut>1 ) a[k++] = (uint8_t)(v>>8);
    if( nOut>2 ) a[k++] = (uint8_t)v;
  }
  *pn = k;
  return 0;
}

/* ---- a strict little JSON reader ------------------------------------------ */
/* Enough for the answers of the protocol: the whole text must be one JSON
** value (RFC 8259), nesting at most 8 deep; values are found by member name
** in an object and returned as spans of the text. */

typedef struct JVal {
  char type;          /* 's' string (span inside the quotes), 'n' number,
                      ** 't' true, 'f' false, 'z' null, 'o' object, 'a' array */
  const char *z;      /* span */
  size_t n;
} JVal;

static void jsonWs(const char **pz, const char *zEnd){
  while( *pz<zEnd && (**pz==' ' || **pz=='\t' || **pz=='\n' || **pz=='\r') ) (*pz)++;
}

static int jsonValue(const char **pz, const char *zEnd, int depth, JVal *pV);

static int jsonStringSpan(const char **pz, const char *zEnd, JVal *pV){
  const char *z = *pz + 1;
  while( z<zEnd && *z!='"' ){
    unsigned char c = (unsigned char)*z;
    if( c<0x20 ) return -1;
    if( c=='\\' ){
      z++;
      if( z>=zEnd ) return -1;
      if( *z=='u' ){
        int i;
        for(i=1; i<=4; i++){
          char h = z+i<zEnd ? z[i] : 0;
          if( !((h>='0'&&h<='9') || (h>='a'&&h<='f') || (h>='A'&&h<='F')) ) return -1;
        }
        z += 4;
      }else if( strchr("\"\\/bfnrt", *z)==0 || *z==0 ){
        return -1;
      }
    }
    z++;
  }
  if( z>=zEnd ) return -1;
  pV->type = 's';
  pV->z = *pz + 1;
  pV->n = (size_t)(z - (*pz + 1));
  *pz = z + 1;
  return 0;
}

static int jsonNumber(const char **pz, const char *zEnd, JVal *pV){
  const char *z = *pz;
  if( z<zEnd && *z=='-' ) z++;
  if( z>=zEnd || *z<'0' || *z>'9' ) return -1;
  if( *z=='0' ) z++; else while( z<zEnd && *z>='0' && *z<='9' ) z++;
  if( z<zEnd && *z=='.' ){
    z++;
    if( z>=zEnd || *z<'0' || *z>'9' ) return -1;
    while( z<zEnd && *z>='0' && *z<='9' ) z++;
  }
  if( z<zEnd && (*z=='e' || *z=='E') ){
    z++;
    if( z<zEnd && (*z=='+' || *z=='-') ) z++;
    if( z>=zEnd || *z<'0' || *z>'9' ) return -1;
    while( z<zEnd && *z>='0' && *z<='9' ) z++;
  }
  pV->type = 'n';
  pV->z = *pz;
  pV->n = (size_t)(z - *pz);
  *pz = z;
  return 0;
}

static int jsonContainer(const char **pz, const char *zEnd, int depth, JVal *pV){
  const char *zStart = *pz;
  char close = **pz=='{' ? '}' : ']';
  int bObj = close=='}', bFirst = 1;
  JVal v;
  if( depth>8 ) return -1;
  (*pz)++;
  for(;;){
    jsonWs(pz, zEnd);
    if( *pz>=zEnd ) return -1;
    if( **pz==close && bFirst ){ (*pz)++; break; }
    if( bObj ){
      if( **pz!='"' || jsonStringSpan(pz, zEnd, &v) ) return -1;
      jsonWs(pz, zEnd);
      if( *pz>=zEnd || **pz!=':' ) return -1;
      (*pz)++;
    }
    if( jsonValue(pz, zEnd, depth+1, &v) ) return -1;
    jsonWs(pz, zEnd);
    if( *pz>=zEnd ) return -1;
    if( **pz==close ){ (*pz)++; break; }
    if( **pz!=',' ) return -1;
    (*pz)++;
    bFirst = 0;
  }
  pV->type = bObj ? 'o' : 'a';
  pV->z = zStart;
  pV->n = (size_t)(*pz - zStart);
  return 0;
}

static int jsonValue(const char **pz, const char *zEnd, int depth, JVal *pV){
  static const struct { const char *z; char type; } aWord[] = {
    { "true", 't' }, { "false", 'f' }, { "null", 'z' }
  };
  size_t i;
  jsonWs(pz, zEnd);
  if( *pz>=zEnd ) return -1;
  if( **pz=='"' ) return jsonStringSpan(pz, zEnd, pV);
  if( **pz=='{' || **pz=='[' ) return jsonContainer(pz, zEnd, depth, pV);
  if( **pz=='-' || (**pz>='0' && **pz<='9') ) return jsonNumber(pz, zEnd, pV);
  for(i=0; i<TDE_ARRAY_SIZE(aWord); i++){
    size_t n = strlen(aWord[i].z);
    if( (size_t)(zEnd-*pz)>=n && memcmp(*pz, aWord[i].z, n)==0 ){
      pV->type = aWord[i].type;
      pV->z = *pz;
      pV->n = n;
      *pz += n;
      return 0;
    }
  }
  return -1;
}

/* Parse the whole of z[n] as one value. */
static int jsonParse(const char *z, size_t n, JVal *pV){
  const char *zEnd = z + n;
  if( jsonValue(&z, zEnd, 0, pV) ) return -1;
  jsonWs(&z, zEnd);
  return z==zEnd ? 0 : -1;
}

/* Member zKey of object pObj (already validated): 1 found, 0 absent, -1 if
** the name occurs twice.  Member names with escapes never match. */
static int jsonGet(const JVal *pObj, const char *zKey, JVal *pOut){
  const char *z = pObj->z + 1, *zEnd = pObj->z + pObj->n - 1;
  size_t nKey = strlen(zKey);
  int nFound = 0;
  for(;;){
    JVal k, v;
    jsonWs(&z, zEnd);
    if( z>=zEnd || *z!='"' ) break;
    if( jsonStringSpan(&z, zEnd, &k) ) break;
    jsonWs(&z, zEnd);
    z++;                                     /* ':' */
    if( jsonValue(&z, zEnd, 1, &v) ) break;
    if( k.n==nKey && memcmp(k.z, zKey, nKey)==0 ){
      if( nFound++ ) return -1;
      *pOut = v;
    }
    jsonWs(&z, zEnd);
    if( z<zEnd && *z==',' ) z++;
  }
  return nFound;
}

/* Next element of array pArr after *pz (start with *pz = NULL). */
static int jsonNext(const JVal *pArr, const char **pz, JVal *pOut){
  const char *zEnd = pArr->z + pArr->n - 1;
  if( *pz==0 ) *pz = pArr->z + 1;
  jsonWs(pz, zEnd);
  if( *pz<zEnd && **pz==',' ) (*pz)++;
  jsonWs(pz, zEnd);
  if( *pz>=zEnd ) return 0;
  return jsonValue(pz, zEnd, 1, pOut)==0;
}

/* A string member without escapes (ids and base64 never need any). */
static int jsonPlainString(const JVal *pObj, const char *zKey, JVal *pOut){
  int r = jsonGet(pObj, zKey, pOut);
  if( r!=1 || pOut->type!='s' || memchr(pOut->z, '\\', pOut->n) ) return r==1 ? -1 : r;
  return 1;
}

/* ---- configuration -------------------------------------------------------- */

static void cmdArgvFree(CmdArgv *a){
  free(a->zBuf);
  free(a->zProg);
  memset(a, 0, sizeof(*a));
}

/* Split the value of zKey into argv.  The program is resolved: a relative
** path with '/' against the configuration's directory, a bare name in PATH.
** bResolve 0 only splits (configuration check). */
static int cmdArgvInit(const TdeConfig *cfg, const char *zName, const char *zKey,
                       int bResolve, CmdArgv *a){
  const char *zVal = tdeConfigGet(cfg, zKey);
  char *z;
  memset(a, 0, sizeof(*a));
  if( zVal==0 ) return TDE_OK;
  a->zBuf = strdup(zVal);
  if( a->zBuf==0 ) return tdeErr(TDE_NOMEM, "command: out of memory");
  for(z=a->zBuf; *z; ){
    while( *z==' ' || *z=='\t' ) *z++ = 0;
    if( *z==0 ) break;
    if( a->nArg>=CMD_MAX_ARGS ){
      cmdArgvFree(a);
      return tdeErr(TDE_CONFIG, "%s: %s has more than %d arguments", zName, zKey, CMD_MAX_ARGS);
    }
    a->azArg[a->nArg++] = z;
    while( *z && *z!=' ' && *z!='\t' ) z++;
  }
  if( a->nArg==0 ){
    cmdArgvFree(a);
    return tdeErr(TDE_CONFIG, "%s: %s names no program", zName, zKey);
  }
  if( !bResolve ) return TDE_OK;
  if( strchr(a->azArg[0], '/') ){
    char zPath[PATH_MAX];
    int n = a->azArg[0][0]=='/'
          ? snprintf(zPath, sizeof(zPath), "%s", a->azArg[0])
          : snprintf(zPath, sizeof(zPath), "%s/%s", cfg->zDir, a->azArg[0]);
    if( n<0 || (size_t)n>=sizeof(zPath) ){
      cmdArgvFree(a);
      return tdeErr(TDE_CONFIG, "%s: %s: program path too long", zName, zKey);
    }
    a->zProg = strdup(zPath);
  }else{
    const char *zPathEnv = getenv("PATH");
    const char *zDir = zPathEnv ? zPathEnv : "/usr/bin:/bin";
    while( zDir && *zDir ){
      const char *zColon = strchr(zDir, ':');
      size_t nDir = zColon ? (size_t)(zColon - zDir) : strlen(zDir);
      char zPath[PATH_MAX];
      int n = snprintf(zPath, sizeof(zPath), "%.*s/%s", (int)nDir,
                       nDir ? zDir : ".", a->azArg[0]);
      if( n>0 && (size_t)n<sizeof(zPath) && access(zPath, X_OK)==0 ){
        a->zProg = strdup(zPath);
        break;
      }
      zDir = zColon ? zColon+1 : 0;
    }
    if( a->zProg==0 ){
      int rc = tdeErr(TDE_NOKEYSTORE, "%s: %s: program '%s' not found in PATH",
                      zName, zKey, a->azArg[0]);
      cmdArgvFree(a);
      return rc;
    }
  }
  if( a->zProg==0 ){
    cmdArgvFree(a);
    return tdeErr(TDE_NOMEM, "command: out of memory");
  }
  if( access(a->zProg, X_OK)!=0 ){
    int rc = tdeErr(TDE_NOKEYSTORE, "%s: %s: cannot execute %s: %s",
                    zName, zKey, a->zProg, strerror(errno));
    cmdArgvFree(a);
    return rc;
  }
  {
    /* The helper sees every data key: whoever may rewrite it (or swap it
    ** in its folder) has them.  Refused as wallets are. */
    char zWhat[64];
    int rc;
    snprintf(zWhat, sizeof(zWhat), "%s program", zKey);
    rc = tdeTrustedFile(TDE_NOKEYSTORE, zWhat, a->zProg, -1);
    if( rc!=TDE_OK ){
      cmdArgvFree(a);
      return rc;
    }
  }
  return TDE_OK;
}

/* xCheckConfig: the provider's keys, the required ones, and the values
** that can be judged without running anything. */
static int cmdCheckConfig(const TdeConfig *cfg, const char *zName){
  const char *zTimeout = tdeConfigGet(cfg, "command_timeout_ms");
  const char *zKeyId = tdeConfigGet(cfg, "command_key_id");
  int i, rc;
  rc = tdeKeystoreCheckKeys(cfg, zName, azCommandKeys);
  if( rc!=TDE_OK ) return rc;
  if( tdeConfigGet(cfg, "wrap_command")==0 || tdeConfigGet(cfg, "unwrap_command")==0 ){
    return tdeErr(TDE_CONFIG, "%s: keystore = command needs wrap_command and unwrap_command",
                  zName);
  }
  if( (zKeyId!=0) == (tdeConfigGet(cfg, "list_keys_command")!=0) ){
    return tdeErr(TDE_CONFIG, "%s: keystore = command needs exactly one of command_key_id "
                  "(one fixed master key) and list_keys_command", zName);
  }
  if( tdeConfigGet(cfg, "new_key_command") && tdeConfigGet(cfg, "list_keys_command")==0 ){
    return tdeErr(TDE_CONFIG, "%s: new_key_command needs list_keys_command (the list says "
                  "which key is current)", zName);
  }
  if( zKeyId && !cmdKeyIdOk(zKeyId, strlen(zKeyId)) ){
    return tdeErr(TDE_CONFIG, "%s: command_key_id must be 1-%d printable characters without "
                  "blanks, quotes or backslashes", zName, TDE_KEYID_MAX);
  }
  if( zTimeout ){
    char *zEnd = 0;
    long v;
    errno = 0;
    v = strtol(zTimeout, &zEnd, 10);
    if( errno || zEnd==zTimeout || *zEnd || v<1 || v>CMD_TIMEOUT_MAX ){
      return tdeErr(TDE_CONFIG, "%s: command_timeout_ms must be an integer from 1 to %d",
                    zName, CMD_TIMEOUT_MAX);
    }
  }
  for(i=0; i<4; i++){
    CmdArgv a;
    rc = cmdArgvInit(cfg, zName, azOpKey[i], 0, &a);
    cmdArgvFree(&a);
    if( rc!=TDE_OK ) return rc;
  }
  return TDE_OK;
}

/* ---- running a helper ----------------------------------------------------- */

static int64_t cmdNowMs(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec*1000 + ts.tv_nsec/1000000;
}

/* The environment for the child: ours without the password variable. */
static char **cmdEnv(const Command *c){
  size_t n = 0, i, k = 0, nDrop = c->zDropEnv ? strlen(c->zDropEnv) : 0;
  char **az;
  while( environ && environ[n] ) n++;
  az = calloc(n+1, sizeof(char*));
  if( az==0 ) return 0;
  for(i=0; i<n; i++){
    if( nDrop && strncmp(environ[i], c->zDropEnv, nDrop)==0 && environ[i][nDrop]=='=' ) continue;
    az[k++] = environ[i];
  }
  return az;
}

/* A byte of base64, base64url or hex (not '=': "key=" stays readable). */
static int cmdIsKeyChar(char c){
  return (c>='A' && c<='Z') || (c>='a' && c<='z') || (c>='0' && c<='9')
      || c=='+' || c=='/' || c=='-' || c=='_';
}

/* Replace, in place, every run of CMD_REDACT_RUN or more base64/hex bytes
** (with its '=' padding) by "[redacted]".  An unwrap helper's stderr may
** hold the key it unwrapped, which this process does not know when the
** helper fails; a key of 16 bytes or more is at least 22 such bytes in
** base64 and 32 in hex.  Long file names and ids are redacted with it. */
#define CMD_REDACT_RUN 16
static void cmdRedactRuns(char *z){
  size_t i = 0, k = 0;
  while( z[i] ){
    size_t n = 0;
    while( cmdIsKeyChar(z[i+n]) ) n++;
    if( n>=CMD_REDACT_RUN ){
      while( z[i+n]=='=' ) n++;
      memcpy(z+k, "[redacted]", 10);
      k += 10;
      i += n;
    }else if( n>0 ){
      memmove(z+k, z+i, n);
      k += n;
      i += n;
    }else{
      z[k++] = z[i++];
    }
  }
  z[k] = 0;
}

/* Make stderr fit for a log line: printable ASCII only, each occurrence of
** zSecret (the base64 of the key in flight, may be NULL) replaced, then
** every run that could be a key (cmdRedactRuns). */
static void cmdCleanStderr(char *z, size_t n, const char *zSecret, char *zOut, size_t nOut){
  size_t i, k = 0, nSecret = zSecret ? strlen(zSecret) : 0;
  for(i=0; i<n && k+12<nOut; ){
    if( nSecret>=8 && i+nSecret<=n && memcmp(z+i, zSecret, nSecret)==0 ){
      memcpy(zOut+k, "[redacted]", 10);
      k += 10;
      i += nSecret;
      continue;
    }
    zOut[k++] = (z[i]>=0x20 && z[i]<0x7f) ? z[i] : (z[i]=='\n' ? '|' : '?');
    i++;
  }
  while( k>0 && (zOut[k-1]=='|' || zOut[k-1]==' ') ) k--;
  zOut[k] = 0;
  cmdRedactRuns(zOut);
}

/* A running helper: the pipes to it (our ends in [0], the child's in [1]),
** its process id (-1 once reaped or never started) and what it has written
** so far.  cmdChildInit before use; cmdChildFree kills a helper still
** running, closes every descriptor, frees zOut and wipes zErr. */
typedef struct CmdChild {
  int aIn[2], aOut[2], aErr[2];
  pid_t pid;
  char *zOut;                 /* stdout: CMD_OUT_MAX+1 bytes of secure memory */
  size_t nOut;
  int bBig;                   /* stdout went past CMD_OUT_MAX */
  size_t nSent;               /* bytes of the request written */
  char zErr[CMD_ERR_MAX + 1]; /* the first CMD_ERR_MAX bytes of stderr */
  size_t nErr;
  int bTimeout;               /* the deadline passed */
  int status;                 /* waitpid status, once reaped */
} CmdChild;

static void cmdChildInit(CmdChild *p){
  memset(p, 0, sizeof(*p));
  p->aIn[0] = p->aIn[1] = p->aOut[0] = p->aOut[1] = p->aErr[0] = p->aErr[1] = -1;
  p->pid = -1;
}

static void cmdCloseFd(int *pFd){
  if( *pFd>=0 ) close(*pFd);
  *pFd = -1;
}

static void cmdChildFree(CmdChild *p){
  int status;
  if( p->pid>0 ){
    kill(-p->pid, SIGKILL);
    kill(p->pid, SIGKILL);
    while( waitpid(p->pid, &status, 0)<0 && errno==EINTR ){}
    p->pid = -1;
  }
  cmdCloseFd(&p->aIn[0]);
  cmdCloseFd(&p->aIn[1]);
  cmdCloseFd(&p->aOut[0]);
  cmdCloseFd(&p->aOut[1]);
  cmdCloseFd(&p->aErr[0]);
  cmdCloseFd(&p->aErr[1]);
  tdeSecureFree(p->zOut, CMD_OUT_MAX + 1);
  p->zOut = 0;
  tdeWipe(p->zErr, sizeof(p->zErr));
}

/* In the child, between fork and execve: only async-signal-safe calls. */
static _Noreturn void cmdChildExec(const Command *c, const CmdArgv *a, char **azEnv,
                                   const CmdChild *p){
  struct sigaction sa;
  sigset_t none;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &sa, 0);
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, 0);
  setpgid(0, 0);
  if( dup2(p->aIn[1], 0)<0 || dup2(p->aOut[1], 1)<0 || dup2(p->aErr[1], 2)<0 ) _exit(126);
  closefrom(3);
  if( chdir(c->zDir)!=0 ) _exit(126);
  execve(a->zProg, a->azArg, azEnv);
  _exit(127);
}

/* Stage 1: the pipes, fork and exec.  On TDE_OK the helper runs in a
** process group of its own and p holds our ends, non-blocking. */
static int cmdSpawn(const Command *c, const CmdArgv *a, char **azEnv, CmdChild *p){
  if( socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p->aIn)!=0
   || pipe2(p->aOut, O_CLOEXEC)!=0 || pipe2(p->aErr, O_CLOEXEC)!=0 ){
    return tdeErr(TDE_IO, "command: cannot create pipes: %s", strerror(errno));
  }
  p->pid = fork();
  if( p->pid<0 ){
    return tdeErr(TDE_IO, "command: fork failed: %s", strerror(errno));
  }
  if( p->pid==0 ) cmdChildExec(c, a, azEnv, p);
  setpgid(p->pid, p->pid);      /* also done by the child: no race on kill(-pid) */
  cmdCloseFd(&p->aIn[1]);
  cmdCloseFd(&p->aOut[1]);
  cmdCloseFd(&p->aErr[1]);
  fcntl(p->aIn[0], F_SETFL, O_NONBLOCK);
  fcntl(p->aOut[0], F_SETFL, O_NONBLOCK);
  fcntl(p->aErr[0], F_SETFL, O_NONBLOCK);
  return TDE_OK;
}

/* Write what the helper's stdin takes of the rest of the request. */
static void cmdSendSome(CmdChild *p, const char *zReq, size_t nReq){
  ssize_t w = send(p->aIn[0], zReq+p->nSent, nReq-p->nSent, MSG_NOSIGNAL | MSG_DONTWAIT);
  if( w>0 ){
    p->nSent += (size_t)w;
    if( p->nSent==nReq ) shutdown(p->aIn[0], SHUT_WR);
  }else if( w<0 && errno!=EAGAIN && errno!=EINTR ){
    /* The helper stopped reading: its exit status will tell why. */
    cmdCloseFd(&p->aIn[0]);
  }
}

/* Read from stdout into zOut; past CMD_OUT_MAX into a wiped sink (bBig). */
static void cmdReadOut(CmdChild *p){
  char aSink[512];
  ssize_t r;
  if( p->nOut<CMD_OUT_MAX ) r = read(p->aOut[0], p->zOut+p->nOut, CMD_OUT_MAX-p->nOut);
  else r = read(p->aOut[0], aSink, sizeof(aSink));
  if( r>0 && p->nOut<CMD_OUT_MAX ) p->nOut += (size_t)r;
  else if( r>0 ) p->bBig = 1;
  if( r>0 && p->nOut==CMD_OUT_MAX ) p->bBig = 1;
  tdeWipe(aSink, sizeof(aSink));
  if( r==0 || (r<0 && errno!=EAGAIN && errno!=EINTR) ) cmdCloseFd(&p->aOut[0]);
}

/* Read from stderr: the first CMD_ERR_MAX bytes are kept, the rest dropped. */
static void cmdReadErr(CmdChild *p){
  char aSink[512];
  ssize_t r = p->nErr<CMD_ERR_MAX ? read(p->aErr[0], p->zErr+p->nErr, CMD_ERR_MAX-p->nErr)
                                  : read(p->aErr[0], aSink, sizeof(aSink));
  if( r>0 && p->nErr<CMD_ERR_MAX ) p->nErr += (size_t)r;
  if( r==0 || (r<0 && errno!=EAGAIN && errno!=EINTR) ) cmdCloseFd(&p->aErr[0]);
}

/* Stage 2: feed the request and collect stdout and stderr until both
** close or the deadline passes (p->bTimeout).  Only a failing poll is an
** error here. */
static int cmdExchange(CmdChild *p, const char *zReq, size_t nReq, int64_t deadline){
  while( p->aOut[0]>=0 || p->aErr[0]>=0 ){
    struct pollfd aP[3];
    int nP = 0, iIn = -1, iOut = -1, iErr = -1, k;
    int64_t left = deadline - cmdNowMs();
    if( left<=0 ){ p->bTimeout = 1; break; }
    if( p->aIn[0]>=0 && p->nSent<nReq ){ aP[nP].fd = p->aIn[0]; aP[nP].events = POLLOUT; iIn = nP++; }
    if( p->aOut[0]>=0 ){ aP[nP].fd = p->aOut[0]; aP[nP].events = POLLIN; iOut = nP++; }
    if( p->aErr[0]>=0 ){ aP[nP].fd = p->aErr[0]; aP[nP].events = POLLIN; iErr = nP++; }
    k = poll(aP, (nfds_t)nP, (int)left);
    if( k<0 ){
      if( errno==EINTR ) continue;
      return tdeErr(TDE_IO, "command: poll failed: %s", strerror(errno));
    }
    if( iIn>=0 && aP[iIn].revents ) cmdSendSome(p, zReq, nReq);
    if( iOut>=0 && aP[iOut].revents ) cmdReadOut(p);
    if( iErr>=0 && aP[iErr].revents ) cmdReadErr(p);
  }
  return TDE_OK;
}

/* Stage 3: both streams closed (or the deadline passed): collect the
** helper, killing it (and its process group) once the deadline passes. */
static int cmdReap(const Command *c, CmdOp op, CmdChild *p, int64_t deadline){
  while( !p->bTimeout ){
    pid_t w = waitpid(p->pid, &p->status, WNOHANG);
    if( w==p->pid ){ p->pid = -1; break; }
    if( w<0 && errno==EINTR ) continue;
    if( w<0 ){
      int rc = tdeErr(TDE_NOKEYSTORE, "command keystore: %s helper %s: exit status lost: %s",
                      azOpName[op], c->aCmd[op].azArg[0], strerror(errno));
      p->pid = -1;
      return rc;
    }
    if( cmdNowMs()>=deadline ){ p->bTimeout = 1; break; }
    usleep(2000);
  }
  if( p->bTimeout ){
    kill(-p->pid, SIGKILL);
    kill(p->pid, SIGKILL);
    while( waitpid(p->pid, &p->status, 0)<0 && errno==EINTR ){}
    p->pid = -1;
  }
  return TDE_OK;
}

/* Stage 4: judge how the helper ended.  zClean is its cleaned stderr. */
static int cmdVerdict(const Command *c, CmdOp op, const CmdChild *p, const char *zClean){
  const char *zProg = c->aCmd[op].azArg[0];
  int status = p->status;
  if( p->bTimeout ){
    return tdeErr(TDE_NOKEYSTORE, "command keystore: %s helper %s did not finish within %d ms "
                  "and was killed", azOpName[op], zProg, c->msTimeout);
  }
  if( WIFSIGNALED(status) ){
    return tdeErr(TDE_NOKEYSTORE, "command keystore: %s helper %s was killed by signal %d%s%.160s",
                  azOpName[op], zProg, WTERMSIG(status), zClean[0] ? ": " : "", zClean);
  }
  if( WIFEXITED(status) && WEXITSTATUS(status)!=0 ){
    int e = WEXITSTATUS(status);
    int rc = e==CMD_EXIT_NOKEY ? TDE_NOKEY : e==CMD_EXIT_AUTH ? TDE_AUTH : TDE_NOKEYSTORE;
    return tdeErr(rc, "command keystore: %s helper %s failed (exit code %d%s)%s%.160s",
                  azOpName[op], zProg, e,
                  e==127 ? ": cannot execute it" :
                  e==CMD_EXIT_NOKEY ? ": no such master key" :
                  e==CMD_EXIT_AUTH ? ": wrapped key does not authenticate" : "",
                  zClean[0] ? ": " : "", zClean);
  }
  if( p->bBig ){
    return tdeErr(TDE_NOKEYSTORE, "command keystore: %s helper %s wrote more than %d bytes",
                  azOpName[op], zProg, CMD_OUT_MAX);
  }
  return TDE_OK;
}

/*
** Run helper op with request zReq[nReq] on its stdin.  On TDE_OK *pzOut is
** its stdout, NUL-terminated, in secure memory of CMD_OUT_MAX+1 bytes (free
** with tdeSecureFree(*pzOut, CMD_OUT_MAX+1)), and *pnOut its length.
** zSecret (may be NULL) is redacted from stderr.  Errors name the helper,
** the operation and the reason (exit code, signal, timeout) with the first
** part of its cleaned stderr.  Caller holds the mutex.
*/
static int cmdRun(Command *c, CmdOp op, const char *zReq, size_t nReq,
                  const char *zSecret, char **pzOut, size_t *pnOut){
  CmdChild ch;
  char **azEnv = 0;
  char zClean[CMD_ERR_MAX + 16];
  int64_t deadline;
  int rc;

  *pzOut = 0;
  *pnOut = 0;
  zClean[0] = 0;
  cmdChildInit(&ch);
  ch.zOut = tdeSecureAlloc(CMD_OUT_MAX + 1);
  azEnv = cmdEnv(c);
  if( ch.zOut==0 || azEnv==0 ){ rc = tdeErr(TDE_NOMEM, "command: out of memory"); goto run_out; }
  rc = cmdSpawn(c, &c->aCmd[op], azEnv, &ch);
  if( rc!=TDE_OK ) goto run_out;
  if( nReq==0 ) shutdown(ch.aIn[0], SHUT_WR);

  deadline = cmdNowMs() + c->msTimeout;
  rc = cmdExchange(&ch, zReq, nReq, deadline);
  if( rc==TDE_OK ) rc = cmdReap(c, op, &ch, deadline);
  if( rc!=TDE_OK ) goto run_out;
  cmdCleanStderr(ch.zErr, ch.nErr, zSecret, zClean, sizeof(zClean));
  if( zClean[0] ){
    tdeLog(TDE_LOG_WARNING, "command keystore: %s helper %s wrote on stderr: %s",
           azOpName[op], c->aCmd[op].azArg[0], zClean);
  }
  rc = cmdVerdict(c, op, &ch, zClean);
  if( rc!=TDE_OK ) goto run_out;
  ch.zOut[ch.nOut] = 0;
  *pzOut = ch.zOut;
  *pnOut = ch.nOut;
  ch.zOut = 0;

run_out:
  cmdChildFree(&ch);
  free(azEnv);
  return rc;
}

/* Parse and check the common part of an answer: one JSON object with
** "protocol": 1 and no "error".  Messages never quote the answer (it may
** hold a key). */
static int cmdAnswer(const Command *c, CmdOp op, const char *z, size_t n, JVal *pObj){
  JVal v;
  const char *zProg = c->aCmd[op].azArg[0];
  if( jsonParse(z, n, pObj) || pObj->type!='o' ){
    return tdeErr(TDE_NOKEYSTORE, "command keystore: %s helper %s did not answer with one "
                  "JSON object (%zu bytes of output)", azOpName[op], zProg, n);
  }
  if( jsonGet(pObj, "protocol", &v)!=1 || v.type!='n' || v.n!=1 || v.z[0]!='1' ){
    return tdeErr(TDE_NOKEYSTORE, "command keystore: %s helper %s answered without "
                  "\"protocol\": %d", azOpName[op], zProg, CMD_PROTOCOL);
  }
  if( jsonGet(pObj, "error", &v)!=0 ){
    return tdeErr(TDE_NOKEYSTORE, "command keystore: %s helper %s answered with an error "
                  "but exit code 0", azOpName[op], zProg);
  }
  return TDE_OK;
}

/* ---- key list ------------------------------------------------------------- */

/* Run list_keys and replace the cached list.  Caller holds the mutex. */
static int cmdRefresh(Command *c){
  static const char zReq[] = "{\"protocol\":1,\"op\":\"list_keys\"}\n";
  char *zOut = 0;
  size_t nOut = 0;
  CmdKey *aKey = 0;
  JVal obj, arr, el;
  const char *zIt = 0;
  int nKey = 0, rc;

  if( c->aCmd[CMD_LIST].nArg==0 ) return TDE_OK;   /* fixed key */
  rc = cmdRun(c, CMD_LIST, zReq, sizeof(zReq)-1, 0, &zOut, &nOut);
  if( rc!=TDE_OK ) goto refresh_out;
  rc = cmdAnswer(c, CMD_LIST, zOut, nOut, &obj);
  if( rc!=TDE_OK ) goto refresh_out;
  if( jsonGet(&obj, "keys", &arr)!=1 || arr.type!='a' ){
    rc = tdeErr(TDE_NOKEYSTORE, "command keystore: list_keys helper %s answered without a "
                "\"keys\" array", c->aCmd[CMD_LIST].azArg[0]);
    goto refresh_out;
  }
  aKey = calloc(CMD_MAX_KEYS, sizeof(*aKey));
  if( aKey==0 ){ rc = tdeErr(TDE_NOMEM, "command: out of memory"); goto refresh_out; }
  while( jsonNext(&arr, &zIt, &el) ){
    JVal id, v;
    if( nKey>=CMD_MAX_KEYS ){
      rc = tdeErr(TDE_NOKEYSTORE, "command keystore: list_keys helper listed more than %d keys",
                  CMD_MAX_KEYS);
      goto refresh_out;
    }
    if( el.type!='o' || jsonPlainString(&el, "key_id", &id)!=1 || !cmdKeyIdOk(id.z, id.n) ){
      rc = tdeErr(TDE_NOKEYSTORE, "command keystore: list_keys helper %s: entry %d has no "
                  "valid \"key_id\" (1-%d printable characters, no blanks or quotes)",
                  c->aCmd[CMD_LIST].azArg[0], nKey+1, TDE_KEYID_MAX);
      goto refresh_out;
    }
    memcpy(aKey[nKey].zId, id.z, id.n);
    aKey[nKey].zId[id.n] = 0;
    if( jsonGet(&el, "created", &v)==1 && v.type=='n' ){
      aKey[nKey].created = strtoll(v.z, 0, 10);
    }
    if( jsonGet(&el, "retired", &v)==1 && v.type=='t' ) aKey[nKey].bRetired = 1;
    nKey++;
  }
  free(c->aKey);
  c->aKey = aKey;
  c->nKey = nKey;
  c->bListed = 1;
  aKey = 0;

refresh_out:
  free(aKey);
  tdeSecureFree(zOut, zOut ? CMD_OUT_MAX + 1 : 0);
  return rc;
}

static const CmdKey *cmdFind(const Command *c, const char *zId){
  int i;
  for(i=0; i<c->nKey; i++){
    if( strcmp(c->aKey[i].zId, zId)==0 ) return &c->aKey[i];
  }
  return 0;
}

/* The current key: command_key_id, else the last active key listed. */
static const char *cmdCurrent(const Command *c){
  int i;
  if( c->zFixedKey[0] ) return c->zFixedKey;
  for(i=c->nKey-1; i>=0; i--){
    if( !c->aKey[i].bRetired ) return c->aKey[i].zId;
  }
  return 0;
}

/* ---- provider methods ------------------------------------------------------ */

static int cmdCreate(const TdeConfig *cfg, const char *zPassword, char *zKeyId, size_t nKeyId);
static int cmdOpen(const TdeConfig *cfg, const char *zPassword, TdeKeystore **pp);
static void cmdClose(TdeKeystore *p);
static int cmdDescribe(TdeKeystore *p, char *zLoc, size_t nLoc, int *pbAutoLogin);
static int cmdCurrentKey(TdeKeystore *p, char *zKeyId, size_t nKeyId);
static int cmdHasKey(TdeKeystore *p, const char *zKeyId);
static int cmdNewKey(TdeKeystore *p, char *zKeyId, size_t nKeyId);
static int cmdList(TdeKeystore *p, int (*xCb)(void *, const TdeKeyInfo *), void *pArg);
static int cmdWrap(TdeKeystore *p, const char *zKeyId,
                   const uint8_t *aDek, size_t nDek,
                   const uint8_t *aAad, size_t nAad,
                   uint8_t *aOut, size_t nOut, size_t *pnOut, uint8_t *pMech);
static int cmdUnwrap(TdeKeystore *p, const char *zKeyId, uint8_t mech,
                     const uint8_t *aIn, size_t nIn,
                     const uint8_t *aAad, size_t nAad,
                     uint8_t *aDek, size_t nDek);
static int cmdRetire(TdeKeystore *p, const char *zKeyId);

const tde_keystore_methods tdeCommandMethods = {
  2,                              /* iVersion */
  (int)sizeof(tde_keystore_methods), /* szStruct */
  "command",                      /* zName */
  TDE_KS_COMMAND,                 /* typeId */
  azCommandKeys,                  /* azKeys */
  cmdCreate,                      /* xCreate */
  cmdOpen,                        /* xOpen */
  cmdClose,                       /* xClose */
  cmdDescribe,                    /* xDescribe */
  cmdCurrentKey,                  /* xCurrentKey */
  cmdHasKey,                      /* xHasKey */
  cmdNewKey,                      /* xNewKey */
  cmdList,                        /* xList */
  cmdWrap,                        /* xWrap */
  cmdUnwrap,                      /* xUnwrap */
  cmdRetire,                      /* xRetire */
  cmdCheckConfig,                 /* xCheckConfig */
  0,                              /* xAnchorGet: none (docs/FORMAT.md "External anchor") */
  0,                              /* xAnchorSet */
};

static void cmdFree(Command *c){
  int i;
  if( c==0 ) return;
  for(i=0; i<4; i++) cmdArgvFree(&c->aCmd[i]);
  free(c->zDropEnv);
  free(c->zDir);
  free(c->aKey);
  tdeConfigFree(c->pAudit);
  free(c);
}

/* Open: resolve the programs and, with list_keys_command, list the keys
** once (the one helper run of an open).  No password is used. */
static int cmdOpen(const TdeConfig *cfg, const char *zPassword, TdeKeystore **pp){
  Command *c = 0;
  const char *z;
  int i, bMutex = 0, rc;

  (void)zPassword;
  if( pp==0 || cfg==0 ) return tdeErr(TDE_MISUSE, "command: bad arguments to open");
  *pp = 0;
  rc = cmdCheckConfig(cfg, cfg->zPath);
  if( rc!=TDE_OK ) return rc;
  c = calloc(1, sizeof(*c));
  if( c==0 ) return tdeErr(TDE_NOMEM, "command: out of memory");
  c->base.pMethods = &tdeCommandMethods;
  c->msTimeout = CMD_TIMEOUT_DEF;
  z = tdeConfigGet(cfg, "command_timeout_ms");
  if( z ) c->msTimeout = (int)strtol(z, 0, 10);
  z = tdeConfigGet(cfg, "command_key_id");
  if( z ) snprintf(c->zFixedKey, sizeof(c->zFixedKey), "%s", z);
  z = tdeConfigGet(cfg, "password_env");
  if( z && (c->zDropEnv = strdup(z))==0 ){ rc = tdeErr(TDE_NOMEM, "command: out of memory"); goto open_out; }
  c->zDir = strdup(cfg->zDir);
  if( c->zDir==0 ){ rc = tdeErr(TDE_NOMEM, "command: out of memory"); goto open_out; }
  for(i=0; i<4; i++){
    rc = cmdArgvInit(cfg, cfg->zPath, azOpKey[i], 1, &c->aCmd[i]);
    if( rc!=TDE_OK ) goto open_out;
  }
  snprintf(c->zLoc, sizeof(c->zLoc), "helper %s", tdeConfigGet(cfg, "wrap_command"));
  rc = tdeConfigCopyAudit(cfg, &c->pAudit);
  if( rc!=TDE_OK ) goto open_out;
  if( pthread_mutex_init(&c->mutex, 0)!=0 ){
    rc = tdeErr(TDE_NOMEM, "command: cannot create mutex");
    goto open_out;
  }
  bMutex = 1;
  rc = cmdRefresh(c);
  if( rc!=TDE_OK ) goto open_out;
  *pp = &c->base;
  c = 0;

open_out:
  if( c ){
    if( bMutex ) pthread_mutex_destroy(&c->mutex);
    cmdFree(c);
  }
  return rc;
}

static void cmdClose(TdeKeystore *p){
  Command *c = (Command *)p;
  if( c==0 ) return;
  pthread_mutex_destroy(&c->mutex);
  cmdFree(c);
}

/* Wrap or unwrap a random key under zKeyId and check it comes back: the
** proof `keystore create` gives that the helpers work.  Caller holds no
** mutex. */
static int cmdSelfTest(Command *c, const char *zKeyId){
  static const uint8_t aAad[] = "sqlite-tde command keystore self-test";
  uint8_t *aKey = tdeSecureAlloc(64);
  uint8_t aBlob[TDE_WRAP_MAX];
  size_t nBlob = 0;
  uint8_t mech = 0;
  int rc;
  if( aKey==0 ) return tdeErr(TDE_NOMEM, "command: out of memory");
  rc = tdeRandom(aKey, 32);
  if( rc==TDE_OK ) rc = cmdWrap(&c->base, zKeyId, aKey, 32, aAad, sizeof(aAad)-1,
                                aBlob, sizeof(aBlob), &nBlob, &mech);
  if( rc==TDE_OK ) rc = cmdUnwrap(&c->base, zKeyId, mech, aBlob, nBlob, aAad, sizeof(aAad)-1,
                                  aKey+32, 32);
  if( rc==TDE_OK && !tdeCtEqual(aKey, aKey+32, 32) ){
    rc = tdeErr(TDE_AUTH, "command keystore: the unwrap helper returned another key than "
                "the one wrapped (self-test)");
  }
  tdeSecureFree(aKey, 64);
  return rc;
}

/*
** Create: with new_key_command, make the first master key (TDE_EXISTS if
** the list already holds keys); otherwise use the configured or listed
** key.  Either way a wrap/unwrap round trip proves the helpers before the
** keystore is reported created.  Audited as keystore_create.
*/
static int cmdCreate(const TdeConfig *cfg, const char *zPassword, char *zKeyId, size_t nKeyId){
  TdeKeystore *pKs = 0;
  Command *c;
  char zId[TDE_KEYID_MAX + 1];
  int rc;

  zId[0] = 0;
  if( zKeyId==0 || nKeyId<TDE_KEYID_MAX+1 ){
    rc = tdeErr(TDE_RANGE, "command: key id buffer needs %d bytes", TDE_KEYID_MAX+1);
    goto create_out;
  }
  zKeyId[0] = 0;
  (void)zPassword;              /* the key manager authenticates the helper */
  rc = cmdOpen(cfg, 0, &pKs);
  if( rc!=TDE_OK ) goto create_out;
  c = (Command *)pKs;
  if( c->aCmd[CMD_NEWKEY].nArg ){
    if( c->nKey>0 ){
      rc = tdeErr(TDE_EXISTS, "command keystore: list_keys already lists %d master key(s); "
                  "refusing to create another keystore there", c->nKey);
      goto create_out;
    }
    rc = cmdNewKey(pKs, zId, sizeof(zId));
    if( rc!=TDE_OK ) goto create_out;
  }else{
    const char *zCur = cmdCurrent(c);
    if( zCur==0 ){
      rc = tdeErr(TDE_NOKEY, "command keystore: list_keys lists no active master key and "
                  "there is no new_key_command");
      goto create_out;
    }
    snprintf(zId, sizeof(zId), "%s", zCur);
  }
  rc = cmdSelfTest(c, zId);
  if( rc==TDE_OK ) memcpy(zKeyId, zId, strlen(zId)+1);

create_out:
  if( cfg ) cmdAudit(cfg, "keystore_create", zId[0] ? zId : 0, rc, 0);
  if( pKs ) cmdClose(pKs);
  return rc;
}

static int cmdDescribe(TdeKeystore *p, char *zLoc, size_t nLoc, int *pbAutoLogin){
  Command *c = (Command *)p;
  int n;
  if( c==0 ) return tdeErr(TDE_MISUSE, "command: no handle");
  if( pbAutoLogin ) *pbAutoLogin = 1;
  if( zLoc==0 ) return TDE_OK;
  n = snprintf(zLoc, nLoc, "%s", c->zLoc);
  if( n<0 || (size_t)n>=nLoc ){
    if( nLoc ) zLoc[0] = 0;
    return tdeErr(TDE_RANGE, "command: location buffer too small");
  }
  return TDE_OK;
}

static int cmdCurrentKey(TdeKeystore *p, char *zKeyId, size_t nKeyId){
  Command *c = (Command *)p;
  const char *zCur;
  int rc = TDE_OK;
  if( c==0 || zKeyId==0 || nKeyId==0 ) return tdeErr(TDE_MISUSE, "command: bad arguments");
  zKeyId[0] = 0;
  pthread_mutex_lock(&c->mutex);
  zCur = cmdCurrent(c);
  if( zCur==0 ){
    rc = tdeErr(TDE_NOKEY, "command keystore: list_keys lists no active master key "
                "(create one: sqlite-tde keystore create)");
  }else if( strlen(zCur)>=nKeyId ){
    rc = tdeErr(TDE_RANGE, "command: key id buffer too small");
  }else{
    memcpy(zKeyId, zCur, strlen(zCur)+1);
  }
  pthread_mutex_unlock(&c->mutex);
  return rc;
}

/* A key not in the cached list makes the list be read again once (another
** process may have created it).  With a fixed key only that key is held. */
static int cmdHasKey(TdeKeystore *p, const char *zKeyId){
  Command *c = (Command *)p;
  int bHas;
  if( c==0 || zKeyId==0 ) return 0;
  pthread_mutex_lock(&c->mutex);
  if( c->zFixedKey[0] ){
    bHas = strcmp(c->zFixedKey, zKeyId)==0;
  }else{
    bHas = cmdFind(c, zKeyId)!=0;
    if( !bHas ){
      if( cmdRefresh(c)!=TDE_OK ){
        tdeLog(TDE_LOG_WARNING, "%s", tde_last_error());
        tdeErrClear();
      }
      bHas = cmdFind(c, zKeyId)!=0;
    }
  }
  pthread_mutex_unlock(&c->mutex);
  return bHas;
}

/* New key: run new_key_command, then list again; the new key must be
** listed and current.  Audited as master_key_create. */
static int cmdNewKey(TdeKeystore *p, char *zKeyId, size_t nKeyId){
  static const char zReq[] = "{\"protocol\":1,\"op\":\"new_key\"}\n";
  Command *c = (Command *)p;
  char zNew[TDE_KEYID_MAX + 1];
  char *zOut = 0;
  size_t nOut = 0;
  JVal obj, id;
  int rc;

  zNew[0] = 0;
  if( c==0 ) return tdeErr(TDE_MISUSE, "command: no handle");
  if( zKeyId==0 || nKeyId<TDE_KEYID_MAX+1 ){
    return tdeErr(TDE_RANGE, "command: key id buffer needs %d bytes", TDE_KEYID_MAX+1);
  }
  zKeyId[0] = 0;
  if( c->aCmd[CMD_NEWKEY].nArg==0 ){
    rc = tdeErr(TDE_UNSUPPORTED, "command keystore: no new_key_command configured; rotate "
                "the key inside the key manager, or configure new_key_command and "
                "list_keys_command");
    cmdAudit(c->pAudit, "master_key_create", 0, rc, 0);
    return rc;
  }
  pthread_mutex_lock(&c->mutex);
  rc = cmdRun(c, CMD_NEWKEY, zReq, sizeof(zReq)-1, 0, &zOut, &nOut);
  if( rc==TDE_OK ) rc = cmdAnswer(c, CMD_NEWKEY, zOut, nOut, &obj);
  if( rc==TDE_OK && (jsonPlainString(&obj, "key_id", &id)!=1 || !cmdKeyIdOk(id.z, id.n)) ){
    rc = tdeErr(TDE_NOKEYSTORE, "command keystore: new_key helper %s answered without a "
                "valid \"key_id\"", c->aCmd[CMD_NEWKEY].azArg[0]);
  }
  if( rc==TDE_OK ){
    const char *zCur;
    memcpy(zNew, id.z, id.n);
    zNew[id.n] = 0;
    rc = cmdRefresh(c);
    zCur = rc==TDE_OK ? cmdCurrent(c) : 0;
    if( rc==TDE_OK && (zCur==0 || strcmp(zCur, zNew)!=0) ){
      rc = tdeErr(TDE_NOKEYSTORE, "command keystore: new key '%s' is not the current key "
                  "list_keys reports (the newest active key must be listed last)", zNew);
    }
  }
  pthread_mutex_unlock(&c->mutex);
  tdeSecureFree(zOut, zOut ? CMD_OUT_MAX + 1 : 0);
  if( rc==TDE_OK ) memcpy(zKeyId, zNew, strlen(zNew)+1);
  cmdAudit(c->pAudit, "master_key_create", zNew[0] ? zNew : 0, rc, 0);
  return rc;
}

/* Re-lists (list_keys), so keys other processes made count. */
static int cmdList(TdeKeystore *p, int (*xCb)(void *, const TdeKeyInfo *), void *pArg){
  Command *c = (Command *)p;
  TdeKeyInfo *aInfo = 0;
  int nInfo = 0, i, rc;
  if( c==0 || xCb==0 ) return tdeErr(TDE_MISUSE, "command: bad arguments");
  pthread_mutex_lock(&c->mutex);
  rc = cmdRefresh(c);
  if( rc==TDE_OK ){
    nInfo = c->zFixedKey[0] ? 1 : c->nKey;
    aInfo = calloc((size_t)nInfo + 1, sizeof(*aInfo));
    if( aInfo==0 ){
      rc = tdeErr(TDE_NOMEM, "command: out of memory");
      nInfo = 0;
    }else if( c->zFixedKey[0] ){
      memcpy(aInfo[0].zId, c->zFixedKey, sizeof(aInfo[0].zId));
    }else{
      for(i=0; i<nInfo; i++){
        memcpy(aInfo[i].zId, c->aKey[i].zId, sizeof(aInfo[i].zId));
        aInfo[i].created = c->aKey[i].created;
        aInfo[i].bRetired = c->aKey[i].bRetired;
      }
    }
  }
  pthread_mutex_unlock(&c->mutex);
  for(i=0; i<nInfo; i++){
    if( xCb(pArg, &aInfo[i]) ) break;
  }
  free(aInfo);
  return rc;
}

/* The request members every wrap and unwrap carries: key id, associated
** data (base64) and, when it has the layout of docs/FORMAT.md, the
** database id and data-key version decoded from it. */
static int cmdRequestHead(char *z, size_t n, const char *zOp, const char *zKeyId,
                          const uint8_t *aAad, size_t nAad){
  char zAad[4*((TDE_WRAP_MAX+2)/3)+1];
  int k;
  if( nAad>TDE_WRAP_MAX ) return -1;
  cmdB64Encode(aAad, nAad, zAad);
  k = snprintf(z, n, "{\"protocol\":1,\"op\":\"%s\",\"key_id\":\"%s\",\"aad\":\"%s\"",
               zOp, zKeyId, zAad);
  if( k<0 || (size_t)k>=n ) return -1;
  if( nAad==CMD_AAD_LABEL+16+4 && memcmp(aAad, zAadLabel, CMD_AAD_LABEL)==0 ){
    char zHex[33];
    int i, k2;
    for(i=0; i<16; i++) snprintf(zHex+2*i, 3, "%02x", aAad[CMD_AAD_LABEL+i]);
    k2 = snprintf(z+k, n-(size_t)k, ",\"db_id\":\"%s\",\"key_version\":%u", zHex,
                  (unsigned)tdeGet32(aAad+CMD_AAD_LABEL+16));
    if( k2<0 || (size_t)k2>=n-(size_t)k ) return -1;
    k += k2;
  }
  return k;
}

#define CMD_REQ_MAX 2048

static int cmdWrap(TdeKeystore *p, const char *zKeyId,
                   const uint8_t *aDek, size_t nDek,
                   const uint8_t *aAad, size_t nAad,
                   uint8_t *aOut, size_t nOut, size_t *pnOut, uint8_t *pMech){
  Command *c = (Command *)p;
  char *zReq = 0, *zKey64 = 0, *zOut = 0;
  size_t nKey64 = 0, nAns = 0, nBlob = 0;
  JVal obj, w;
  int k, rc = TDE_OK;

  if( pnOut ) *pnOut = 0;
  if( c==0 || zKeyId==0 || aDek==0 || aOut==0 || pnOut==0 || pMech==0 || (nAad && aAad==0) ){
    return tdeErr(TDE_MISUSE, "command: bad arguments to wrap");
  }
  if( nDek==0 || nDek>64 ) return tdeErr(TDE_RANGE, "command: cannot wrap a %zu-byte key", nDek);
  if( !cmdKeyIdOk(zKeyId, strlen(zKeyId)) ){
    return tdeErr(TDE_NOKEY, "command keystore: invalid master key id");
  }
  zReq = tdeSecureAlloc(CMD_REQ_MAX);
  zKey64 = tdeSecureAlloc(4*((64+2)/3)+1);
  if( zReq==0 || zKey64==0 ){ rc = tdeErr(TDE_NOMEM, "command: out of memory"); goto wrap_out; }
  nKey64 = cmdB64Encode(aDek, nDek, zKey64);
  k = cmdRequestHead(zReq, CMD_REQ_MAX, "wrap", zKeyId, aAad, nAad);
  if( k<0 || snprintf(zReq+k, CMD_REQ_MAX-(size_t)k, ",\"key\":\"%s\"}\n", zKey64)
             >= (int)(CMD_REQ_MAX-(size_t)k) ){
    rc = tdeErr(TDE_RANGE, "command: request too long");
    goto wrap_out;
  }
  pthread_mutex_lock(&c->mutex);
  if( !c->zFixedKey[0] ){
    const CmdKey *pKey = cmdFind(c, zKeyId);
    if( pKey==0 && cmdRefresh(c)==TDE_OK ) pKey = cmdFind(c, zKeyId);
    if( pKey==0 ){
      rc = tdeErr(TDE_NOKEY, "command keystore: no master key '%s' in the list", zKeyId);
    }else if( pKey->bRetired ){
      rc = tdeErr(TDE_NOKEY, "command keystore: master key '%s' is retired; wrap with the "
                  "current key", zKeyId);
    }
  }else if( strcmp(zKeyId, c->zFixedKey)!=0 ){
    rc = tdeErr(TDE_NOKEY, "command keystore: no master key '%s' (command_key_id is '%s')",
                zKeyId, c->zFixedKey);
  }
  if( rc==TDE_OK ) rc = cmdRun(c, CMD_WRAP, zReq, strlen(zReq), zKey64, &zOut, &nAns);
  pthread_mutex_unlock(&c->mutex);
  if( rc!=TDE_OK ) goto wrap_out;
  rc = cmdAnswer(c, CMD_WRAP, zOut, nAns, &obj);
  if( rc!=TDE_OK ) goto wrap_out;
  if( jsonPlainString(&obj, "wrapped", &w)!=1
   || cmdB64Decode(w.z, w.n, aOut, nOut<TDE_WRAP_MAX ? nOut : TDE_WRAP_MAX, &nBlob)
   || nBlob==0 ){
    rc = tdeErr(TDE_NOKEYSTORE, "command keystore: wrap helper %s answered without a valid "
                "\"wrapped\" (base64 of 1-%d bytes)", c->aCmd[CMD_WRAP].azArg[0], TDE_WRAP_MAX);
    goto wrap_out;
  }
  /* The wrapping must not be the key itself. */
  if( nBlob>=nDek && memmem(aOut, nBlob, aDek, nDek) ){
    rc = tdeErr(TDE_NOKEYSTORE, "command keystore: wrap helper %s returned the data key in "
                "clear inside its answer; refusing it", c->aCmd[CMD_WRAP].azArg[0]);
    goto wrap_out;
  }
  *pnOut = nBlob;
  *pMech = TDE_MECH_EXTERNAL;

wrap_out:
  if( rc!=TDE_OK ){
    tdeLog(TDE_LOG_ERROR, "%s", tde_last_error());
    if( aOut ) tdeWipe(aOut, nOut);
  }
  tdeSecureFree(zOut, zOut ? CMD_OUT_MAX + 1 : 0);
  tdeSecureFree(zReq, zReq ? CMD_REQ_MAX : 0);
  tdeSecureFree(zKey64, zKey64 ? 4*((64+2)/3)+1 : 0);
  (void)nKey64;
  return rc;
}

static int cmdUnwrap(TdeKeystore *p, const char *zKeyId, uint8_t mech,
                     const uint8_t *aIn, size_t nIn,
                     const uint8_t *aAad, size_t nAad,
                     uint8_t *aDek, size_t nDek){
  Command *c = (Command *)p;
  char *zReq = 0, *zOut = 0;
  char zBlob[4*((TDE_WRAP_MAX+2)/3)+1];
  uint8_t *aTmp = 0;
  size_t nAns = 0, nKey = 0;
  JVal obj, v;
  int k, rc = TDE_OK;

  if( c==0 || zKeyId==0 || aIn==0 || aDek==0 || (nAad && aAad==0) ){
    return tdeErr(TDE_MISUSE, "command: bad arguments to unwrap");
  }
  if( mech!=TDE_MECH_EXTERNAL ){
    return tdeErr(TDE_UNSUPPORTED, "command: wrapping mechanism %u not supported", (unsigned)mech);
  }
  if( nIn==0 || nIn>TDE_WRAP_MAX || nDek==0 || nDek>64 ){
    return tdeErr(TDE_FORMAT, "command: wrapped key of %zu bytes not supported", nIn);
  }
  if( !cmdKeyIdOk(zKeyId, strlen(zKeyId)) ){
    return tdeErr(TDE_NOKEY, "command keystore: invalid master key id");
  }
  zReq = tdeSecureAlloc(CMD_REQ_MAX);
  aTmp = tdeSecureAlloc(128);
  if( zReq==0 || aTmp==0 ){ rc = tdeErr(TDE_NOMEM, "command: out of memory"); goto unwrap_out; }
  cmdB64Encode(aIn, nIn, zBlob);
  k = cmdRequestHead(zReq, CMD_REQ_MAX, "unwrap", zKeyId, aAad, nAad);
  if( k<0 || snprintf(zReq+k, CMD_REQ_MAX-(size_t)k, ",\"wrapped\":\"%s\"}\n", zBlob)
             >= (int)(CMD_REQ_MAX-(size_t)k) ){
    rc = tdeErr(TDE_RANGE, "command: request too long");
    goto unwrap_out;
  }
  pthread_mutex_lock(&c->mutex);
  rc = cmdRun(c, CMD_UNWRAP, zReq, strlen(zReq), 0, &zOut, &nAns);
  pthread_mutex_unlock(&c->mutex);
  if( rc!=TDE_OK ) goto unwrap_out;
  rc = cmdAnswer(c, CMD_UNWRAP, zOut, nAns, &obj);
  if( rc!=TDE_OK ) goto unwrap_out;
  if( jsonPlainString(&obj, "key", &v)!=1 || cmdB64Decode(v.z, v.n, aTmp, 128, &nKey) ){
    rc = tdeErr(TDE_NOKEYSTORE, "command keystore: unwrap helper %s answered without a valid "
                "\"key\" (base64)", c->aCmd[CMD_UNWRAP].azArg[0]);
    goto unwrap_out;
  }
  if( nKey!=nDek ){
    rc = tdeErr(TDE_AUTH, "command keystore: unwrap helper %s returned a %zu-byte key, "
                "expected %zu", c->aCmd[CMD_UNWRAP].azArg[0], nKey, nDek);
    goto unwrap_out;
  }
  /* An answer that names a database must name this one. */
  if( nAad==CMD_AAD_LABEL+16+4 && jsonGet(&obj, "db_id", &v)==1 ){
    char zHex[33];
    int i;
    for(i=0; i<16; i++) snprintf(zHex+2*i, 3, "%02x", aAad[CMD_AAD_LABEL+i]);
    if( v.type!='s' || v.n!=32 || memcmp(v.z, zHex, 32)!=0 ){
      rc = tdeErr(TDE_AUTH, "command keystore: unwrap helper %s answered for another "
                  "database (db_id differs from %s)", c->aCmd[CMD_UNWRAP].azArg[0], zHex);
      goto unwrap_out;
    }
  }
  memcpy(aDek, aTmp, nDek);

unwrap_out:
  if( rc!=TDE_OK ){
    /* The key code names the database but replaces this detail: log it. */
    tdeLog(TDE_LOG_ERROR, "%s", tde_last_error());
    tdeWipe(aDek, nDek);
  }
  tdeSecureFree(aTmp, aTmp ? 128 : 0);
  tdeSecureFree(zOut, zOut ? CMD_OUT_MAX + 1 : 0);
  tdeSecureFree(zReq, zReq ? CMD_REQ_MAX : 0);
  return rc;
}

static int cmdRetire(TdeKeystore *p, const char *zKeyId){
  Command *c = (Command *)p;
  int rc;
  if( c==0 ) return tdeErr(TDE_MISUSE, "command: no handle");
  rc = tdeErr(TDE_UNSUPPORTED, "command keystore: retire master key '%s' in the key manager "
              "(list_keys then reports it \"retired\": true)", zKeyId ? zKeyId : "");
  cmdAudit(c->pAudit, "master_key_retire", zKeyId, rc, 0);
  return rc;
}
