/*
** sqlite-tde command-line tool: ship and standby, the encrypted standby
** (README "Standby").
**
**   ship --to HOST:PORT [--to HOST:PORT...] [--cycle-ms N] (--repl-config F | --insecure-no-tls) DB
**   standby --listen HOST:PORT (--repl-config F | --insecure-no-tls) DB
**   standby --promote DB
**
** Both long-running commands stop cleanly on SIGINT/SIGTERM.  They parse
** their own options (the command table passes the arguments through).
*/
#include "cli.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char cliShipHelp[] =
  "Run on the primary host, next to the application.  It needs no keystore\n"
  "and holds no key: it takes SQLite's locks on the WAL index (DB-shm) without\n"
  "opening DB through the tde VFS, and reads the database id from DB's\n"
  "plaintext header; a --config CFG or $SQLITE_TDE_CONFIG is not loaded.\n"
  "Every cycle (default 50 ms) it takes SQLite's WAL write lock for a moment,\n"
  "copies the WAL frames committed since the last cycle into the spool\n"
  "DB-tdeship (ciphertext, fsync'd), and sends them in order to each standby.\n"
  "A standby that is new or too far behind first gets a base copy.  The tde\n"
  "VFS saves frames the shipper has not captured yet into the spool before a\n"
  "checkpoint discards them, so none is lost while the shipper is down.\n"
  "DB must be in WAL mode; a WAL index a crashed writer left is recovered by\n"
  "the application's next connection (the shipper waits for it: --status\n"
  "says so).  Runs until SIGINT or SIGTERM.\n"
  "\nOptions:\n"
  "  --to HOST:PORT   a standby (repeat for several)\n"
  "  --cycle-ms N     capture interval in milliseconds (default 50)\n"
  "  --repl-config F  TLS and the repl_* keys (below)\n"
  "  --insecure-no-tls  no TLS (test setups only)\n"
  "  --sync           protection mode sync (as repl_mode = sync): a commit on DB\n"
  "                   returns once a standby acknowledged it (logged and applied\n"
  "                   durably), or after repl_sync_timeout_ms (default 2000): then\n"
  "                   commits continue async until a standby catches up, and\n"
  "                   --status, tde_status and the audit log say so\n"
  "  --status         as `standby --status` (the shipper's side; also `archive --status`)\n"
  "A second shipper on the same database is refused, naming the running one's pid.\n"
  "\nTransport security (README \"Standby\"): every connection runs mutual TLS\n"
  "(TLS 1.3 preferred, 1.2 at least) configured by --repl-config FILE, a file of\n"
  "'key = value' lines in the style of the tde configuration:\n"
  "  repl_ca = PATH           CA certificate(s) the peer's certificate must chain to\n"
  "  repl_cert = PATH         this side's certificate (chain), PEM\n"
  "  repl_key = PATH          its private key, PEM; refused unless mode 0600 or stricter\n"
  "  repl_peer_name = NAME    name (DNS or IP SAN) the peer's certificate must carry;\n"
  "                           ship: default the host of --to; standby: optional\n"
  "  repl_peer_pubkey_sha256 = HEX[,HEX]  optional pin: SHA-256 of the peer's\n"
  "                           SubjectPublicKeyInfo (DER)\n"
  "  repl_timeout_ms = N      handshake and hello deadline (default 10000)\n"
  "  repl_primary_database_id = HEX  standby: the only database it accepts\n"
  "  repl_sign_key = PATH     ship: Ed25519 key (PEM, mode 0600) signing the record\n"
  "                           chain and base copies (openssl genpkey -algorithm ed25519)\n"
  "  repl_primary_pubkey = PATH[,PATH]  standby: the primary's public key(s); then\n"
  "                           nothing unsigned is logged or applied\n"
  "  repl_mode = async|sync   ship: protection mode; repl_sync_timeout_ms = N\n"
  "  repl_audit_log = PATH    audit log (default DB-tdeship-audit / DB-tdestandby-audit)\n"
  "Relative paths are relative to the file.  --insecure-no-tls runs plaintext\n"
  "without peer authentication (test setups only): a warning at start and in\n"
  "--status.\n";

const char cliStandbyHelp[] =
  "--listen: receive the primary's transactions on HOST:PORT and apply them\n"
  "to the copy DB, atomically per transaction (a redo log DB-tdestandby-log is\n"
  "synced first), without any key: pages stay the primary's ciphertext.  The\n"
  "first connection creates DB from a base copy.  A primary of another\n"
  "database is refused.  With the key, DB serves read-only queries through\n"
  "the tde VFS while it is applied; writes fail with SQLITE_READONLY.\n"
  "Runs until SIGINT or SIGTERM.\n"
  "\n--accept-rewind (with --listen): a standby that refused its primary because\n"
  "the primary's history went back (sequence behind this copy, an older base copy,\n"
  "another history: state 'diverged') accepts the next base copy once.  Written\n"
  "to the audit log (repl_audit_log, default DB-tdestandby-audit).  A new standby\n"
  "names its primary: repl_primary_database_id and/or repl_peer_pubkey_sha256.\n"
  "\n--promote: with the standby stopped, apply the last complete transaction\n"
  "received and make DB an ordinary encrypted database (writable, WAL mode).\n"
  "\n--status: role, peer, shipped/acknowledged (primary) or received/applied\n"
  "(standby) sequence numbers, transport and apply lag in transactions, bytes\n"
  "and seconds, read from the state files (no key needed; works on either\n"
  "side).  The tde_status table shows the same columns; 'note:' carries\n"
  "warnings (insecure-no-tls, primary silent for N s, the last refused peer).\n"
  "\nTransport security (README \"Standby\"): every connection runs mutual TLS\n"
  "(TLS 1.3 preferred, 1.2 at least) configured by --repl-config FILE, a file of\n"
  "'key = value' lines in the style of the tde configuration:\n"
  "  repl_ca = PATH           CA certificate(s) the peer's certificate must chain to\n"
  "  repl_cert = PATH         this side's certificate (chain), PEM\n"
  "  repl_key = PATH          its private key, PEM; refused unless mode 0600 or stricter\n"
  "  repl_peer_name = NAME    name (DNS or IP SAN) the peer's certificate must carry;\n"
  "                           ship: default the host of --to; standby: optional\n"
  "  repl_peer_pubkey_sha256 = HEX[,HEX]  optional pin: SHA-256 of the peer's\n"
  "                           SubjectPublicKeyInfo (DER)\n"
  "  repl_timeout_ms = N      handshake and hello deadline (default 10000)\n"
  "  repl_primary_database_id = HEX  standby: the only database it accepts\n"
  "  repl_sign_key = PATH     ship: Ed25519 key (PEM, mode 0600) signing the record\n"
  "                           chain and base copies (openssl genpkey -algorithm ed25519)\n"
  "  repl_primary_pubkey = PATH[,PATH]  standby: the primary's public key(s); then\n"
  "                           nothing unsigned is logged or applied\n"
  "  repl_mode = async|sync   ship: protection mode; repl_sync_timeout_ms = N\n"
  "  repl_audit_log = PATH    audit log (default DB-tdeship-audit / DB-tdestandby-audit)\n"
  "Relative paths are relative to the file.  --insecure-no-tls runs plaintext\n"
  "without peer authentication (test setups only): a warning at start and in\n"
  "--status.\n";

static volatile int bStop;

static void onStop(int sig){
  (void)sig;
  bStop = 1;
}

static void catchStop(void){
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = onStop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, 0);
  sigaction(SIGTERM, &sa, 0);
  sigaction(SIGHUP, &sa, 0);
  signal(SIGPIPE, SIG_IGN);
}

static int usage(const char *zCmd, const char *zMsg, const char *zArg){
  cliErr(zMsg, zArg);
  if( strcmp(zCmd, "ship")==0 ){
    fprintf(stderr, "usage: sqlite-tde ship --to HOST:PORT [--to HOST:PORT...] [--cycle-ms N]\n"
                    "                  (--repl-config FILE | --insecure-no-tls) DB\n");
  }else{
    fprintf(stderr, "usage: sqlite-tde standby --listen HOST:PORT (--repl-config FILE | --insecure-no-tls) [--accept-rewind] DB\n"
                    "       sqlite-tde standby --promote DB\n"
                    "       sqlite-tde standby --status DB\n");
  }
  fprintf(stderr, "Try 'sqlite-tde %s --help'.\n", zCmd);
  return CLI_USAGE;
}

static int setConfig(Cli *pCli, const char *zArg){
  char *zReal = realpath(zArg, 0);
  snprintf(pCli->zConfigBuf, sizeof(pCli->zConfigBuf), "%s", zReal ? zReal : zArg);
  free(zReal);
  pCli->zConfig = pCli->zConfigBuf;
  return CLI_OK;
}

int cliCmdShip(Cli *pCli, const CliArgs *pArgs){
  const char *azTo[16];
  const char *zDb = 0, *zRepl = 0;
  unsigned flags = 0;
  int nTo = 0, nCycle = 0, bStatus = 0, rc;
  for(int i=0; i<pArgs->nRest; i++){
    const char *z = pArgs->azRest[i];
    if( strcmp(z, "--help")==0 || strcmp(z, "-h")==0 ){
      printf("usage: sqlite-tde ship --to HOST:PORT [--to HOST:PORT...] [--cycle-ms N]\n"
             "                  (--repl-config FILE | --insecure-no-tls) DB\n\n%s", cliShipHelp);
      return CLI_OK;
    }
    if( strcmp(z, "--to")==0 ){
      if( i+1>=pArgs->nRest ) return usage("ship", "%s needs HOST:PORT", z);
      if( nTo>=16 ) return usage("ship", "%s: at most 16 standbys", z);
      azTo[nTo++] = pArgs->azRest[++i];
    }else if( strcmp(z, "--cycle-ms")==0 ){
      char *zEnd = 0;
      long n;
      if( i+1>=pArgs->nRest ) return usage("ship", "%s needs a number", z);
      n = strtol(pArgs->azRest[++i], &zEnd, 10);
      if( !zEnd || *zEnd || n<1 || n>60000 ) return usage("ship", "%s: 1 to 60000 milliseconds", z);
      nCycle = (int)n;
    }else if( strcmp(z, "--repl-config")==0 ){
      if( i+1>=pArgs->nRest ) return usage("ship", "%s needs a file name", z);
      zRepl = pArgs->azRest[++i];
    }else if( strcmp(z, "--insecure-no-tls")==0 ){
      flags |= TDE_REPL_INSECURE_NO_TLS;
    }else if( strcmp(z, "--sync")==0 ){
      flags |= TDE_REPL_SYNC;
    }else if( strcmp(z, "--status")==0 ){
      bStatus = 1;
    }else if( strcmp(z, "--config")==0 ){
      if( i+1>=pArgs->nRest ) return usage("ship", "%s needs a file name", z);
      setConfig(pCli, pArgs->azRest[++i]);
    }else if( z[0]=='-' && z[1] ){
      return usage("ship", "unknown option '%s'", z);
    }else if( zDb ){
      return usage("ship", "unexpected argument '%s'", z);
    }else{
      zDb = z;
    }
  }
  if( !zDb ) return usage("ship", "missing argument%s", "");
  if( bStatus ) return cliReplStatus(zDb);
  if( nTo==0 ) return usage("ship", "--to HOST:PORT is required%s", "");
  if( (zRepl!=0)==((flags & TDE_REPL_INSECURE_NO_TLS)!=0) ){
    return usage("ship", "give --repl-config FILE (TLS) or --insecure-no-tls%s", "");
  }
  /* No keystore: the shipper holds no key (src/repl/walock.c). */
  if( flags & TDE_REPL_INSECURE_NO_TLS ){
    fprintf(stderr, "sqlite-tde: warning: --insecure-no-tls: the standby link is plaintext and unauthenticated\n");
  }
  catchStop();
  rc = tde_ship_run_v2(zDb, 0, zRepl, flags, azTo, nTo, nCycle, &bStop);
  if( rc ){
    cliErrDetail("ship stopped", rc);
    return CLI_FAIL;
  }
  return CLI_OK;
}

/* --status: the replication figures of either side, from its state files
** (no keystore needed). */
int cliReplStatus(const char *zDb){
  tde_repl_info r = { .nSize = sizeof(tde_repl_info) };
  int rc = tde_repl_status(zDb, &r);
  if( rc ){
    cliErrDetail("cannot read the replication status", rc);
    return CLI_FAIL;
  }
  printf("role: %s\n", r.zRole);
  if( strcmp(r.zRole, "none")==0 ) return CLI_OK;
  printf("state: %s\npeer: %s\n", r.zState, r.zPeer);
  if( strcmp(r.zRole, "primary")==0 ){
    printf("shipped_seq: %lld\nacked_seq: %lld\n", (long long)r.shippedSeq, (long long)r.ackedSeq);
  }else{
    printf("received_seq: %lld\napplied_seq: %lld\n", (long long)r.receivedSeq, (long long)r.appliedSeq);
  }
  printf("transport_lag_txn: %lld\ntransport_lag_bytes: %lld\ntransport_lag_seconds: %.3f\n",
         (long long)r.transportLagTxn, (long long)r.transportLagBytes, r.transportLagSec);
  if( strcmp(r.zRole, "standby")==0 ){
    printf("apply_lag_txn: %lld\napply_lag_bytes: %lld\napply_lag_seconds: %.3f\n",
           (long long)r.applyLagTxn, (long long)r.applyLagBytes, r.applyLagSec);
  }
  printf("updated_ms: %lld\n", (long long)r.updatedMs);
  if( r.zNote[0] ) printf("note: %s\n", r.zNote);
  return CLI_OK;
}

int cliCmdStandby(Cli *pCli, const CliArgs *pArgs){
  const char *zListen = 0, *zDb = 0, *zRepl = 0;
  unsigned flags = 0;
  int bPromote = 0, bStatus = 0, rc;
  for(int i=0; i<pArgs->nRest; i++){
    const char *z = pArgs->azRest[i];
    if( strcmp(z, "--help")==0 || strcmp(z, "-h")==0 ){
      printf("usage: sqlite-tde standby --listen HOST:PORT (--repl-config FILE | --insecure-no-tls) [--accept-rewind] DB\n"
             "       sqlite-tde standby --promote DB\n"
             "       sqlite-tde standby --status DB\n\n%s", cliStandbyHelp);
      return CLI_OK;
    }
    if( strcmp(z, "--listen")==0 ){
      if( i+1>=pArgs->nRest ) return usage("standby", "%s needs HOST:PORT", z);
      zListen = pArgs->azRest[++i];
    }else if( strcmp(z, "--promote")==0 ){
      bPromote = 1;
    }else if( strcmp(z, "--repl-config")==0 ){
      if( i+1>=pArgs->nRest ) return usage("standby", "%s needs a file name", z);
      zRepl = pArgs->azRest[++i];
    }else if( strcmp(z, "--accept-rewind")==0 ){
      flags |= TDE_REPL_ACCEPT_REWIND;
    }else if( strcmp(z, "--insecure-no-tls")==0 ){
      flags |= TDE_REPL_INSECURE_NO_TLS;
    }else if( strcmp(z, "--status")==0 ){
      bStatus = 1;
    }else if( strcmp(z, "--config")==0 ){
      if( i+1>=pArgs->nRest ) return usage("standby", "%s needs a file name", z);
      setConfig(pCli, pArgs->azRest[++i]);   /* accepted; the standby needs no key */
    }else if( z[0]=='-' && z[1] ){
      return usage("standby", "unknown option '%s'", z);
    }else if( zDb ){
      return usage("standby", "unexpected argument '%s'", z);
    }else{
      zDb = z;
    }
  }
  if( !zDb ) return usage("standby", "missing argument%s", "");
  if( bPromote + bStatus + (zListen!=0)!=1 ){
    return usage("standby", "give exactly one of --listen, --promote and --status%s", "");
  }
  if( bStatus ) return cliReplStatus(zDb);
  if( bPromote ){
    rc = tde_standby_promote(zDb);
    if( rc ){
      cliErrDetail("promotion failed", rc);
      return CLI_FAIL;
    }
    printf("promoted %s: it is now an ordinary encrypted database\n", zDb);
    /* The copy's header is the primary's and names the primary's page map,
    ** which a standby never receives: accept the pages as applied. */
    if( cliKeystoreEnsure(pCli)==0 && tde_db_remap(zDb, pCli->zConfig)==TDE_OK ){
      printf("%s: page map reset (built again at its first WAL restart)\n", zDb);
    }else{
      fprintf(stderr, "sqlite-tde: warning: %s: could not reset its page map (%s): run "
              "`sqlite-tde remap %s` once the keystore is reachable, before opening it\n",
              zDb, tde_last_error(), zDb);
    }
    return CLI_OK;
  }
  if( (zRepl!=0)==((flags & TDE_REPL_INSECURE_NO_TLS)!=0) ){
    return usage("standby", "give --repl-config FILE (TLS) or --insecure-no-tls%s", "");
  }
  if( flags & TDE_REPL_INSECURE_NO_TLS ){
    fprintf(stderr, "sqlite-tde: warning: --insecure-no-tls: any host that reaches %s can feed this standby\n",
            zListen);
  }
  catchStop();
  rc = tde_standby_run_v2(zDb, zListen, zRepl, flags, &bStop);
  if( rc ){
    cliErrDetail("standby stopped", rc);
    return CLI_FAIL;
  }
  return CLI_OK;
}
