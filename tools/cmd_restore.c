/*
** sqlite-tde command-line tool: restore, the restoring half of the keyless
** archive (docs/ARCHIVE.md, src/archive/restore.c).
**
**   restore --s3 S3ENV --db-id HEX [--prefix P] [--history HEX] --pubkey PUB.pem --list
**   restore --s3 S3ENV --db-id HEX [--prefix P] [--history HEX] --pubkey PUB.pem
**           [--to-seq N | --to-time T] OUT.db
**
** The one command of the tool that reaches into src/ (the archive's static
** library, which links libcurl and is not part of the public library): it
** is built only where tde_archive is (libcurl >= 7.85).  Needs no keystore:
** S3 read credentials and the primary's public key only.
*/
#include "cli.h"

#ifdef TDE_HAVE_ARCHIVE
#include "archive/restore.h"

#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char cliRestoreHelp[] =
  "Rebuild an encrypted database from the keyless archive in an S3 bucket\n"
  "(docs/ARCHIVE.md): the newest base copy at or before the target, then the\n"
  "segments that continue it without a gap.  Every record's chain and every\n"
  "signed head and base copy are verified with the primary's public key, the\n"
  "database id and the history id; the records are applied without any key\n"
  "(pages stay the primary's ciphertext) into OUT.db.part, which is synced and\n"
  "renamed to OUT.db.  An existing OUT.db is never overwritten.  A gap, an\n"
  "edited, dropped, reordered or foreign segment, an object not signed by the\n"
  "pinned key and a target before the oldest base copy are refused, and\n"
  "nothing is written.  No keystore is needed; reading OUT.db needs the key,\n"
  "and its first open with it needs 'sqlite-tde remap OUT.db' (its header\n"
  "names the primary's page map, which the archive does not hold).\n"
  "\nOptions:\n"
  "  --s3 FILE        the bucket: KEY=VALUE lines S3_ENDPOINT, S3_REGION,\n"
  "                   S3_BUCKET, optional S3_CA_FILE and S3_PREFIX, and AWS_ACCESS_KEY_ID,\n"
  "                   AWS_SECRET_ACCESS_KEY (mode 0600).  Without it: the same\n"
  "                   names from the environment\n"
  "  --db-id HEX      the database id (32 hex digits; 'sqlite-tde status' shows it)\n"
  "  --prefix P       the folder in the bucket the archiver writes under\n"
  "                   (default S3_PREFIX, else none)\n"
  "  --history HEX    the history to restore (needed when the archive holds\n"
  "                   several; --list shows them)\n"
  "  --pubkey PEM[,PEM]  the primary's Ed25519 public key(s) (repl_sign_key's)\n"
  "  --list           show the restorable points of each history (verified)\n"
  "  --to-seq N       the state after transaction (sequence number) N\n"
  "  --to-time T      the newest state captured at or before T: UTC, ISO 8601\n"
  "                   (2026-12-03T12:00:00Z, fractions of a second allowed) or\n"
  "                   milliseconds since the epoch\n"
  "  (neither)        the newest restorable state\n";

typedef struct RestoreCli {
  TdeS3Config s3;
  TdeRestoreOpts o;
  char zEndpoint[512], zRegion[128], zBucket[128], zCa[4096], zCred[4096], zPrefix[512];
  int bList, bDbid;
} RestoreCli;

static int restoreUsage(const char *zMsg, const char *zArg){
  cliErr(zMsg, zArg);
  fprintf(stderr, "usage: sqlite-tde restore --s3 S3ENV --db-id HEX [--prefix P] [--history HEX] --pubkey PUB.pem\n"
                  "                          (--list | [--to-seq N | --to-time T] OUT.db)\n"
                  "Try 'sqlite-tde restore --help'.\n");
  return CLI_USAGE;
}

/* A setting too long for its buffer is cut (and then fails where used). */
static void restoreSet(char *z, size_t n, const char *zVal){
  size_t k = strlen(zVal);
  if( k>=n ) k = n-1;
  memcpy(z, zVal, k);
  z[k] = 0;
}

/* The non-secret S3_* settings of the S3ENV file (the keys are read by the
** client itself from the same file); 0 or -1 when it cannot be read. */
static int restoreReadEnv(RestoreCli *r, const char *zPath){
  char zLine[4200];
  FILE *f = fopen(zPath, "r");
  if( !f ) return -1;
  while( fgets(zLine, sizeof(zLine), f) ){
    size_t n = strcspn(zLine, "\r\n");
    zLine[n] = 0;
    if( strncmp(zLine, "S3_ENDPOINT=", 12)==0 ) restoreSet(r->zEndpoint, sizeof(r->zEndpoint), zLine+12);
    else if( strncmp(zLine, "S3_REGION=", 10)==0 ) restoreSet(r->zRegion, sizeof(r->zRegion), zLine+10);
    else if( strncmp(zLine, "S3_BUCKET=", 10)==0 ) restoreSet(r->zBucket, sizeof(r->zBucket), zLine+10);
    else if( strncmp(zLine, "S3_CA_FILE=", 11)==0 ) restoreSet(r->zCa, sizeof(r->zCa), zLine+11);
    else if( strncmp(zLine, "S3_PREFIX=", 10)==0 ) restoreSet(r->zPrefix, sizeof(r->zPrefix), zLine+10);
  }
  explicit_bzero(zLine, sizeof(zLine));
  fclose(f);
  return 0;
}

static void restoreFromEnv(char *z, size_t n, const char *zName){
  const char *zVal = getenv(zName);
  if( zVal && !z[0] ) snprintf(z, n, "%s", zVal);
}

static int restoreHex(const char *z, uint8_t *a){
  if( strlen(z)!=32 ) return -1;
  for(int i=0; i<16; i++){
    unsigned v;
    if( !isxdigit((unsigned char)z[2*i]) || !isxdigit((unsigned char)z[2*i+1]) ) return -1;
    if( sscanf(z+2*i, "%2x", &v)!=1 ) return -1;
    a[i] = (uint8_t)v;
  }
  return 0;
}

/* UTC: all digits = ms since the epoch; else YYYY-MM-DD[T ]HH:MM:SS[.fff][Z]. */
static int restoreTime(const char *z, uint64_t *pMs){
  struct tm tm;
  const char *zEnd;
  unsigned ms = 0;
  int nDigit = 0;
  if( z[0] && strspn(z, "0123456789")==strlen(z) ){
    *pMs = strtoull(z, 0, 10);
    return 0;
  }
  memset(&tm, 0, sizeof(tm));
  zEnd = strptime(z, "%Y-%m-%d", &tm);
  if( !zEnd || (*zEnd!='T' && *zEnd!=' ') ) return -1;
  zEnd = strptime(zEnd+1, "%H:%M:%S", &tm);
  if( !zEnd ) return -1;
  if( *zEnd=='.' ){
    for(zEnd++; isdigit((unsigned char)*zEnd); zEnd++, nDigit++){
      if( nDigit<3 ) ms = ms*10 + (unsigned)(*zEnd-'0');
    }
    for(; nDigit<3; nDigit++) ms *= 10;
  }
  if( *zEnd=='Z' ) zEnd++;
  else if( strcmp(zEnd, "+00:00")==0 ) zEnd += 6;
  if( *zEnd ) return -1;
  {
    time_t t = timegm(&tm);
    if( t<0 ) return -1;
    *pMs = (uint64_t)t*1000 + ms;
  }
  return 0;
}

static int restoreArgs(RestoreCli *r, int argc, char **argv){
  for(int i=0; i<argc; i++){
    const char *z = argv[i];
    const char *zVal = i+1<argc ? argv[i+1] : 0;
    if( strcmp(z, "--list")==0 ){ r->bList = 1; continue; }
    if( strcmp(z, "--help")==0 || strcmp(z, "-h")==0 ){
      printf("usage: sqlite-tde restore --s3 S3ENV --db-id HEX [--prefix P] [--history HEX] --pubkey PUB.pem\n"
             "                          (--list | [--to-seq N | --to-time T] OUT.db)\n\n%s", cliRestoreHelp);
      return -1;
    }
    if( z[0]!='-' ){
      if( r->o.zOut ) return restoreUsage("unexpected argument '%s'", z);
      r->o.zOut = z;
      continue;
    }
    if( !zVal ) return restoreUsage("%s needs a value", z);
    i++;
    if( strcmp(z, "--s3")==0 ){
      snprintf(r->zCred, sizeof(r->zCred), "%s", zVal);
      if( restoreReadEnv(r, zVal) ) return restoreUsage("--s3: cannot read %s", zVal);
    }else if( strcmp(z, "--db-id")==0 ){
      if( restoreHex(zVal, r->o.aDbid) ) return restoreUsage("--db-id: 32 hex digits, not '%s'", zVal);
      r->bDbid = 1;
    }else if( strcmp(z, "--history")==0 ){
      if( restoreHex(zVal, r->o.aHistory) ) return restoreUsage("--history: 32 hex digits, not '%s'", zVal);
      r->o.bHistory = 1;
    }else if( strcmp(z, "--prefix")==0 ){
      r->o.zPrefix = zVal;
    }else if( strcmp(z, "--pubkey")==0 ){
      r->o.zPubKey = zVal;
    }else if( strcmp(z, "--to-seq")==0 ){
      char *zEnd = 0;
      if( r->o.eTarget ) return restoreUsage("give at most one of --to-seq and --to-time%s", "");
      r->o.target = strtoull(zVal, &zEnd, 10);
      if( !zEnd || *zEnd || zVal[0]<'0' || zVal[0]>'9' ) return restoreUsage("--to-seq: a number, not '%s'", zVal);
      r->o.eTarget = TDE_RESTORE_SEQ;
    }else if( strcmp(z, "--to-time")==0 ){
      if( r->o.eTarget ) return restoreUsage("give at most one of --to-seq and --to-time%s", "");
      if( restoreTime(zVal, &r->o.target) ){
        return restoreUsage("--to-time: UTC as 2026-12-03T12:00:00Z or milliseconds since the epoch, not '%s'",
                            zVal);
      }
      r->o.eTarget = TDE_RESTORE_TIME;
    }else{
      return restoreUsage("unknown option '%s'", z);
    }
  }
  restoreFromEnv(r->zEndpoint, sizeof(r->zEndpoint), "S3_ENDPOINT");
  restoreFromEnv(r->zRegion, sizeof(r->zRegion), "S3_REGION");
  restoreFromEnv(r->zBucket, sizeof(r->zBucket), "S3_BUCKET");
  restoreFromEnv(r->zCa, sizeof(r->zCa), "S3_CA_FILE");
  restoreFromEnv(r->zPrefix, sizeof(r->zPrefix), "S3_PREFIX");
  if( !r->o.zPrefix ) r->o.zPrefix = r->zPrefix;
  if( !r->zEndpoint[0] || !r->zBucket[0] ) return restoreUsage("no bucket: give --s3 S3ENV%s", "");
  if( !r->bDbid ) return restoreUsage("--db-id HEX is required%s", "");
  if( !r->o.zPubKey ) return restoreUsage("--pubkey PUB.pem is required: nothing unsigned is restored%s", "");
  if( r->bList ? r->o.zOut!=0 || r->o.eTarget : r->o.zOut==0 ){
    return restoreUsage(r->bList ? "--list takes no target and no output%s" : "missing argument OUT.db%s", "");
  }
  r->s3.zEndpoint = r->zEndpoint;
  r->s3.zRegion = r->zRegion[0] ? r->zRegion : "us-east-1";
  r->s3.zBucket = r->zBucket;
  r->s3.zCaFile = r->zCa[0] ? r->zCa : 0;
  r->s3.zCredFile = r->zCred[0] ? r->zCred : 0;
  r->o.pS3 = &r->s3;
  return CLI_OK;
}

/* SIGINT, SIGTERM, SIGHUP during a restore: remove OUT.part and
** OUT.part-base (the library removes them on every failure it returns;
** a signal ends the process before that), then exit 130.  unlink and
** _exit are async-signal-safe. */
static char zPartPath[4200], zPartBasePath[4200];

static void restoreOnSignal(int sig){
  (void)sig;
  if( zPartPath[0] ) unlink(zPartPath);
  if( zPartBasePath[0] ) unlink(zPartBasePath);
  _exit(130);
}

static void restoreCatch(const char *zOut){
  struct sigaction sa;
  if( snprintf(zPartPath, sizeof(zPartPath), "%s.part", zOut)>=(int)sizeof(zPartPath)
      || snprintf(zPartBasePath, sizeof(zPartBasePath), "%s.part-base", zOut)>=(int)sizeof(zPartBasePath) ){
    zPartPath[0] = zPartBasePath[0] = 0;
    return;
  }
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = restoreOnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, 0);
  sigaction(SIGTERM, &sa, 0);
  sigaction(SIGHUP, &sa, 0);
}

static void restorePrintLine(void *pArg, const char *zLine){
  (void)pArg;
  printf("%s\n", zLine);
}

static void restoreIso(uint64_t ms, char *z, size_t n){
  time_t t = (time_t)(ms/1000);
  struct tm tm;
  char zDate[32];
  gmtime_r(&t, &tm);
  strftime(zDate, sizeof(zDate), "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(z, n, "%s.%03uZ", zDate, (unsigned)(ms%1000));
}

int cliCmdRestore(Cli *pCli, const CliArgs *pArgs){
  RestoreCli r;
  TdeRestoreResult res;
  int rc;
  (void)pCli;
  memset(&r, 0, sizeof(r));
  rc = restoreArgs(&r, pArgs->nRest, pArgs->azRest);
  if( rc ) return rc<0 ? CLI_OK : rc;
  if( r.bList ){
    rc = tdeRestoreList(&r.o, restorePrintLine, 0);
  }else{
    struct stat st;
    char zPart[4200];
    /* Only a restore that may create OUT.part may remove it: one that will
    ** be refused because OUT or OUT.part exists (another restore) leaves
    ** them alone. */
    snprintf(zPart, sizeof(zPart), "%s.part", r.o.zOut);
    if( stat(r.o.zOut, &st)!=0 && errno==ENOENT && stat(zPart, &st)!=0 && errno==ENOENT ) restoreCatch(r.o.zOut);
    rc = tdeRestoreRun(&r.o, &res);
    if( rc==TDE_OK ){
      char zHist[33], zT[40];
      for(int i=0; i<16; i++) snprintf(zHist+2*i, 3, "%02x", res.aHistory[i]);
      restoreIso(res.tCapture, zT, sizeof(zT));
      printf("restored %s: sequence %llu (captured %s) of history %s, from the base copy at %llu and %llu "
             "transaction(s) of %llu segment(s); %llu bytes read; the archive holds up to %llu\n",
             r.o.zOut, (unsigned long long)res.seq, zT, zHist, (unsigned long long)res.baseSeq,
             (unsigned long long)res.nRecord, (unsigned long long)res.nSegment, (unsigned long long)res.nBytes,
             (unsigned long long)res.archiveEnd);
    }
  }
  if( rc ){
    cliErrDetail(r.bList ? "restore --list" : "restore refused", rc);
    if( rc==TDE_AUTH ) cliFailAs(CLI_DAMAGED);
    return CLI_FAIL;
  }
  return CLI_OK;
}

#else
typedef int cliRestoreAbsent;    /* no libcurl: no restore command */
#endif /* TDE_HAVE_ARCHIVE */
