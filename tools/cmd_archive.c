/*
** sqlite-tde command-line tool: archive, the keyless continuous archive to
** an S3 bucket (docs/ARCHIVE.md, README "Archive and point-in-time
** restore").
**
**   archive --s3 S3ENV (--sign-key KEY | --repl-config F) [--prefix P]
**           [--to HOST:PORT...] [segment, base and spool options] DB
**   archive --status DB
**
** `archive` is the shipper with the bucket as a destination (one process,
** one spool): with --to it feeds standbys from the same spool.  Uses the
** public headers <sqlite-tde.h> and <sqlite-tde-archive.h> only.  Built
** only with the archive library (libcurl with SigV4).
*/
#include "cli.h"
#include "sqlite-tde-archive.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char cliArchiveHelp[] =
  "Run on the primary host, next to the application, instead of `ship`: the\n"
  "shipper with an S3 bucket as a destination (standbys too with --to, from\n"
  "the same spool).  It uploads a signed base copy of DB when the bucket has\n"
  "none for the spool's history, then segments of the committed transactions'\n"
  "ciphertext frames (docs/ARCHIVE.md): nothing in the bucket is plaintext\n"
  "but metadata, and nothing needs a key to be restored.  A record leaves the\n"
  "spool only once the bucket acknowledged the segment holding it.  An\n"
  "unreachable bucket never blocks a commit: the spool grows (to --max-spool),\n"
  "the status and DB-tdeship-audit say so, and uploads resume when it is back.\n"
  "Like `ship` it needs no keystore and holds no key: it takes SQLite's locks\n"
  "on the WAL index (DB-shm) without opening DB through the tde VFS; a\n"
  "--config CFG or $SQLITE_TDE_CONFIG is not loaded.\n"
  "\nOptions:\n"
  "  --s3 FILE            KEY=VALUE lines, mode 0600: S3_ENDPOINT (https://...),\n"
  "                       S3_REGION, S3_BUCKET, optional S3_CA_FILE, S3_PREFIX,\n"
  "                       AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY.  Without it the\n"
  "                       same variables from this process's environment\n"
  "  --prefix P           object names start with P/ (default S3_PREFIX or none)\n"
  "  --sign-key KEY       Ed25519 private key, PEM, mode 0600, signing the segments'\n"
  "                       heads and the base copies (openssl genpkey -algorithm\n"
  "                       ed25519); or repl_sign_key in --repl-config\n"
  "  --segment-txns N     a segment closes after N transactions (default 1000),\n"
  "  --segment-bytes N    or N bytes of records (default 16777216),\n"
  "  --segment-ms N       or when its oldest transaction is N ms old (default 10000)\n"
  "  --base-every-bytes N a new base copy after N bytes of segments (default 1 GiB)\n"
  "  --base-every-ms N    or after N ms (default 86400000)\n"
  "  --max-spool N        spool bytes kept while the bucket is unreachable (default\n"
  "                       1 GiB); beyond, the archive takes a new base copy when back\n"
  "  --cycle-ms N         capture interval (default 50)\n"
  "  --to HOST:PORT       also a standby (then --repl-config or --insecure-no-tls)\n"
  "  --repl-config F, --insecure-no-tls, --sync   as for `ship`\n"
  "  --retain-bases K     retention after each base copy: keep the newest K base\n"
  "                       copies (and the segments after the oldest kept one),\n"
  "  --retain-age D       and/or every point of the last D (seconds, or 90s, 30m,\n"
  "                       12h, 7d); both: what either keeps (docs/ARCHIVE.md)\n"
  "\n--prune: one retention pass (the --retain-* options), no archiver, no key,\n"
  "no keystore: the database id from --db-id HEX or DB's plaintext header;\n"
  "--dry-run lists what would go.  With DB, an 'archive_prune' line goes to\n"
  "DB-tdeship-audit.\n"
  "\n--status DB: as `ship --status`: the archive is a peer 's3:BUCKET/PREFIX' with\n"
  "its archived (acknowledged) sequence; lag in transactions, bytes, seconds; its\n"
  "last error in 'note:'.\n";

static volatile int bStop;

static void onStop(int sig){
  (void)sig;
  bStop = 1;
}

static int usage(const char *zMsg, const char *zArg){
  cliErr(zMsg, zArg);
  fprintf(stderr, "usage: sqlite-tde archive --s3 S3ENV (--sign-key KEY | --repl-config F) [options] DB\n"
                  "       sqlite-tde archive --status DB\n"
                  "Try 'sqlite-tde archive --help'.\n");
  return CLI_USAGE;
}

/* A positive integer option value. */
static int number(const char *zOpt, const char *z, unsigned long long nMax, unsigned long long *pn){
  char *zEnd = 0;
  unsigned long long n = strtoull(z, &zEnd, 10);
  if( !zEnd || *zEnd || z[0]=='-' || n<1 || n>nMax ) return usage("%s: a number out of range", zOpt);
  *pn = n;
  return CLI_OK;
}

/* The options taking a number, and where they go. */
static int numberOpt(const char *z, const char *zVal, tde_archive_options *o){
  unsigned long long n = 0;
  static const char *azOpt[] = { "--segment-txns", "--segment-bytes", "--segment-ms", "--base-every-bytes",
                                 "--base-every-ms", "--max-spool", "--cycle-ms" };
  int i, rc;
  for(i=0; i<7 && strcmp(z, azOpt[i])!=0; i++){}
  if( i==7 ) return -1;
  rc = number(z, zVal, i==0 || i==2 ? 100000000ull : i==6 ? 60000ull : (1ull<<50), &n);
  if( rc ) return rc;
  switch( i ){
    case 0: o->segTxns = (uint32_t)n; break;
    case 1: o->segBytes = n; break;
    case 2: o->segMs = (uint32_t)n; break;
    case 3: o->baseEveryBytes = n; break;
    case 4: o->baseEveryMs = n; break;
    case 5: o->maxSpool = n; break;
    default: o->nCycleMs = (int)n; break;
  }
  return CLI_OK;
}

/* --retain-bases K, --retain-age D (seconds, or a number with s, m, h, d). */
static int retainOpt(const char *z, const char *zVal, tde_archive_options *o){
  unsigned long long n = 0, unit = 1000;
  char zNum[32];
  size_t k = strlen(zVal);
  if( strcmp(z, "--retain-bases")==0 ){
    int rc = number(z, zVal, 1000000ull, &n);
    if( rc==CLI_OK ) o->retainBases = (uint32_t)n;
    return rc;
  }
  if( k>0 && k<sizeof(zNum) && strchr("smhd", zVal[k-1]) ){
    unit = zVal[k-1]=='s' ? 1000ull : zVal[k-1]=='m' ? 60000ull : zVal[k-1]=='h' ? 3600000ull : 86400000ull;
    memcpy(zNum, zVal, k-1);
    zNum[k-1] = 0;
    zVal = zNum;
  }
  if( number(z, zVal, 100000000000ull, &n) ) return CLI_USAGE;
  o->retainAgeMs = n * unit;
  return CLI_OK;
}

static void pruneLine(void *pArg, const char *zLine){
  (void)pArg;
  printf("%s\n", zLine);
}

/* archive --prune: one retention pass, no archiver, no keystore. */
static int prune(const char *zDb, const tde_archive_options *o){
  int rc;
  if( !o->retainBases && !o->retainAgeMs ) return usage("--prune needs --retain-bases K and/or --retain-age D%s", "");
  if( !zDb && !o->zDbId ) return usage("--prune needs --db-id HEX or the database%s", "");
  if( o->zDbId && (strlen(o->zDbId)!=32 || strspn(o->zDbId, "0123456789abcdefABCDEF")!=32) ){
    return usage("--db-id: 32 hex digits, not '%s'", o->zDbId);
  }
  rc = tde_archive_prune(zDb, o, pruneLine, 0);
  fflush(stdout);
  if( rc ){
    cliErrDetail("archive --prune", rc);
    return CLI_FAIL;
  }
  return CLI_OK;
}

int cliCmdArchive(Cli *pCli, const CliArgs *pArgs){
  tde_archive_options o;
  const char *azTo[16];
  const char *zDb = 0;
  int nTo = 0, bStatus = 0, bPrune = 0, rc;
  (void)pCli;                 /* no keystore, no --config: the archiver holds no key */
  memset(&o, 0, sizeof(o));
  o.nSize = sizeof(o);
  for(int i=0; i<pArgs->nRest; i++){
    const char *z = pArgs->azRest[i];
    const char *zVal = i+1<pArgs->nRest ? pArgs->azRest[i+1] : 0;
    if( strcmp(z, "--help")==0 || strcmp(z, "-h")==0 ){
      printf("usage: sqlite-tde archive --s3 S3ENV (--sign-key KEY | --repl-config F) [options] DB\n"
             "       sqlite-tde archive --prune --s3 S3ENV (--retain-bases K | --retain-age D)... [--dry-run]\n"
             "                          [--prefix P] (--db-id HEX | DB)\n"
             "       sqlite-tde archive --status DB\n\n%s", cliArchiveHelp);
      return CLI_OK;
    }
    if( strcmp(z, "--status")==0 ){ bStatus = 1; continue; }
    if( strcmp(z, "--prune")==0 ){ bPrune = 1; continue; }
    if( strcmp(z, "--dry-run")==0 ){ o.bDryRun = 1; continue; }
    if( strcmp(z, "--insecure-no-tls")==0 ){ o.replFlags |= TDE_REPL_INSECURE_NO_TLS; continue; }
    if( strcmp(z, "--sync")==0 ){ o.replFlags |= TDE_REPL_SYNC; continue; }
    if( z[0]=='-' && z[1] ){
      if( !zVal ) return usage("%s needs a value", z);
      i++;
      if( strcmp(z, "--s3")==0 ) o.zS3Env = zVal;
      else if( strcmp(z, "--prefix")==0 ) o.zPrefix = zVal;
      else if( strcmp(z, "--sign-key")==0 ) o.zSignKey = zVal;
      else if( strcmp(z, "--repl-config")==0 ) o.zReplConfig = zVal;
      else if( strcmp(z, "--db-id")==0 ) o.zDbId = zVal;
      else if( strcmp(z, "--retain-bases")==0 || strcmp(z, "--retain-age")==0 ){
        rc = retainOpt(z, zVal, &o);
        if( rc ) return rc;
      }
      else if( strcmp(z, "--to")==0 ){
        if( nTo>=16 ) return usage("%s: at most 16 standbys", z);
        azTo[nTo++] = zVal;
      }else{
        rc = numberOpt(z, zVal, &o);
        if( rc<0 ) return usage("unknown option '%s'", z);
        if( rc ) return rc;
      }
      continue;
    }
    if( zDb ) return usage("unexpected argument '%s'", z);
    zDb = z;
  }
  if( bPrune ) return prune(zDb, &o);
  if( o.bDryRun || o.zDbId ) return usage("--dry-run and --db-id go with --prune%s", "");
  if( !zDb ) return usage("missing argument%s", "");
  if( bStatus ) return cliReplStatus(zDb);
  if( nTo>0 && (o.zReplConfig!=0)==((o.replFlags & TDE_REPL_INSECURE_NO_TLS)!=0) ){
    return usage("with --to, give --repl-config FILE (TLS) or --insecure-no-tls%s", "");
  }
  o.azTo = azTo;
  o.nTo = nTo;
  /* No keystore: the archiver holds no key (src/repl/walock.c). */
  {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = onStop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, 0);
    sigaction(SIGTERM, &sa, 0);
    sigaction(SIGHUP, &sa, 0);
    signal(SIGPIPE, SIG_IGN);
  }
  rc = tde_archive_run(zDb, 0, &o, &bStop);
  if( rc ){
    cliErrDetail("archive stopped", rc);
    return CLI_FAIL;
  }
  return CLI_OK;
}
