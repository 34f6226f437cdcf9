/*
** sqlite-tde command-line tool: keystore create, keystore status,
** keystore list, keystore seal, keystore unseal and keystore passwd.
**
** The wallet password of `keystore create` comes from the configuration's
** password source, else --auto-login means none, else it is typed twice on
** the terminal.  It is never read from argv and is wiped after use.
*/
#include "cli.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* Whether the keystore already exists (then asking for a password would
** be wasted typing): a status other than NOT_AVAILABLE means it was found. */
static int keystoreExists(Cli *pCli){
  tde_keystore_info info = { .nSize = sizeof(tde_keystore_info) };
  if( tde_keystore_status(pCli->zConfig, &info)!=TDE_OK ) return 0;
  return strcmp(info.zStatus, "NOT_AVAILABLE")!=0;
}

/* A keystore that takes no password (keystore = command: the key manager
** authenticates its helper) is never prompted for one. */
static int keystoreTakesNoPassword(Cli *pCli){
  tde_keystore_info info = { .nSize = sizeof(tde_keystore_info) };
  if( tde_keystore_status(pCli->zConfig, &info)!=TDE_OK ) return 0;
  return strcmp(info.zType, "command")==0;
}

/* Ask twice for the new wallet password; CLI_OK when both agree. */
static int promptNewPassword(Cli *pCli, char *zPw, char *zPw2, size_t nPw){
  if( keystoreExists(pCli) ){
    cliErr("the keystore %s describes already exists; refusing to overwrite it",
           cliConfigPath(pCli));
    return CLI_FAIL;
  }
  if( !isatty(STDIN_FILENO) ){
    cliErr("cannot prompt for the new wallet password: standard input is not a terminal; "
           "set password_file, password_env or password_fd in the configuration, or use --auto-login");
    return CLI_FAIL;
  }
  if( cliReadPassword("New keystore password: ", zPw, nPw) ) return CLI_FAIL;
  if( zPw[0]==0 ){
    cliErr("the password must not be empty");
    return CLI_FAIL;
  }
  if( cliReadPassword("Repeat the password: ", zPw2, nPw) ) return CLI_FAIL;
  if( strcmp(zPw, zPw2)!=0 ){
    cliErr("the passwords do not match");
    return CLI_FAIL;
  }
  return CLI_OK;
}

int cliCmdKeystoreCreate(Cli *pCli, const CliArgs *pArgs){
  char zKeyId[TDE_KEYID_MAX + 1];
  char zPw[CLI_PASSWORD_MAX] = "", zPw2[CLI_PASSWORD_MAX] = "";
  const char *zPassword = 0;
  int rc = CLI_FAIL, trc, bLocked;
  int bSource = cliConfigHasPasswordSource(pCli);

  bLocked = mlock(zPw, sizeof(zPw))==0 && mlock(zPw2, sizeof(zPw2))==0;
  if( bSource>0 && pArgs->bAutoLogin ){
    cliErr("--auto-login conflicts with %s, which names a password source "
           "(password_file, password_env or password_fd)", cliConfigPath(pCli));
    goto done;
  }
  /* bSource<0: the configuration is unreadable; the library says why. */
  if( bSource==0 && !pArgs->bAutoLogin && !keystoreTakesNoPassword(pCli) ){
    if( promptNewPassword(pCli, zPw, zPw2, sizeof(zPw)) ) goto done;
    zPassword = zPw;
  }
  trc = tde_keystore_create(pCli->zConfig, zPassword, zKeyId, sizeof(zKeyId));
  if( trc!=TDE_OK ){
    cliErrDetail("cannot create the keystore", trc);
    goto done;
  }
  printf("%s\n", zKeyId);
  rc = CLI_OK;
done:
  explicit_bzero(zPw, sizeof(zPw));
  explicit_bzero(zPw2, sizeof(zPw2));
  if( bLocked ){
    munlock(zPw, sizeof(zPw));
    munlock(zPw2, sizeof(zPw2));
  }
  return rc;
}

static const char *orDash(const char *z){
  return z && z[0] ? z : "-";
}

int cliCmdKeystoreStatus(Cli *pCli, const CliArgs *pArgs){
  tde_keystore_info info = { .nSize = sizeof(tde_keystore_info) };
  int bOpen, trc;
  (void)pArgs;
  trc = tde_keystore_status(pCli->zConfig, &info);
  if( trc!=TDE_OK ){
    cliErrDetail("cannot get the keystore status", trc);
    return CLI_FAIL;
  }
  bOpen = strncmp(info.zStatus, "OPEN", 4)==0;
  printf("config: %s\n", cliConfigPath(pCli));
  printf("type: %s\n", orDash(info.zType));
  printf("status: %s\n", info.zStatus);
  printf("location: %s\n", orDash(info.zLocation));
  printf("auto-login: %s\n", bOpen ? (info.bAutoLogin ? "yes" : "no") : "-");
  printf("current master key: %s\n", orDash(info.zCurrentKey));
  if( bOpen ) printf("keys: %d\n", info.nKeys); else printf("keys: -\n");
  if( !bOpen && tde_last_error()[0] ){
    /* Why it is closed or not available. */
    cliErr("note: %s", tde_last_error());
  }
  /* CLOSED is a state (no password given here); a keystore that is not
  ** there at all is a failure scripts must see. */
  return strcmp(info.zStatus, "NOT_AVAILABLE")==0 ? CLI_NOKEY : CLI_OK;
}

static int printKey(void *pArg, const char *zKeyId, int64_t created, const char *zStatus){
  char zTime[32];
  time_t t = (time_t)created;
  struct tm tm;
  int *pnKey = (int*)pArg;
  if( gmtime_r(&t, &tm)==0 || strftime(zTime, sizeof(zTime), "%Y-%m-%dT%H:%M:%SZ", &tm)==0 ){
    snprintf(zTime, sizeof(zTime), "%lld", (long long)created);
  }
  printf("%-40s  %-20s  %s\n", zKeyId, zTime, zStatus);
  (*pnKey)++;
  return 0;
}

int cliCmdKeystoreList(Cli *pCli, const CliArgs *pArgs){
  int nKey = 0, trc;
  (void)pArgs;
  if( cliKeystoreEnsure(pCli) ) return CLI_FAIL;
  printf("%-40s  %-20s  %s\n", "ID", "CREATED", "STATUS");
  trc = tde_keystore_list(pCli->zConfig, printKey, &nKey);
  if( trc!=TDE_OK ){
    cliErrDetail("cannot list the keystore", trc);
    return CLI_FAIL;
  }
  return CLI_OK;
}

static int keystoreSeal(Cli *pCli, int bSeal){
  int trc = tde_wallet_seal(pCli->zConfig, bSeal);
  if( trc!=TDE_OK ){
    cliErrDetail(bSeal ? "cannot seal the wallet" : "cannot unseal the wallet", trc);
    return CLI_FAIL;
  }
  printf("%s\n", bSeal ? "wallet sealed: it now opens only with this machine's TPM"
                       : "wallet unsealed: its key is in the file again; remove wallet_seal "
                         "from the configuration");
  return CLI_OK;
}

int cliCmdKeystoreSeal(Cli *pCli, const CliArgs *pArgs){
  (void)pArgs;
  return keystoreSeal(pCli, 1);
}

int cliCmdKeystoreUnseal(Cli *pCli, const CliArgs *pArgs){
  (void)pArgs;
  return keystoreSeal(pCli, 0);
}

/* keystore passwd: the current password from the configuration's source or
** the terminal, the new one typed twice; both wiped. */
int cliCmdKeystorePasswd(Cli *pCli, const CliArgs *pArgs){
  char zOld[CLI_PASSWORD_MAX] = "", zNew[CLI_PASSWORD_MAX] = "", zNew2[CLI_PASSWORD_MAX] = "";
  char zSrc[PATH_MAX];
  const char *zOldArg = 0;
  int rc = CLI_FAIL, trc, bLocked;
  int bSource = cliConfigHasPasswordSource(pCli);

  bLocked = mlock(zOld, sizeof(zOld))==0 && mlock(zNew, sizeof(zNew))==0
         && mlock(zNew2, sizeof(zNew2))==0;
  if( !isatty(STDIN_FILENO) ){
    cliErr("keystore passwd asks for the new password on a terminal; standard input is not one");
    goto done;
  }
  if( bSource<=0 ){
    if( cliReadPassword("Current keystore password: ", zOld, sizeof(zOld)) ) goto done;
    zOldArg = zOld;
  }
  if( cliReadPassword("New keystore password: ", zNew, sizeof(zNew)) ) goto done;
  if( zNew[0]==0 ){
    cliErr("the password must not be empty");
    goto done;
  }
  if( cliReadPassword("Repeat the new password: ", zNew2, sizeof(zNew2)) ) goto done;
  if( strcmp(zNew, zNew2)!=0 ){
    cliErr("the passwords do not match; nothing changed");
    goto done;
  }
  trc = tde_keystore_passwd(pCli->zConfig, zOldArg, zNew, pArgs->kdfT, pArgs->kdfM);
  if( trc!=TDE_OK ){
    cliErrDetail("cannot change the keystore password", trc);
    goto done;
  }
  printf("keystore password changed\n");
  if( cliConfigValue(pCli, "password_file", zSrc, sizeof(zSrc))==1 ){
    cliErr("note: write the new password into password_file %s: the old one no longer opens "
           "the wallet", zSrc);
  }else if( cliConfigValue(pCli, "password_env", zSrc, sizeof(zSrc))==1 ){
    cliErr("note: give the new password in $%s from now on", zSrc);
  }
  rc = CLI_OK;
done:
  explicit_bzero(zOld, sizeof(zOld));
  explicit_bzero(zNew, sizeof(zNew));
  explicit_bzero(zNew2, sizeof(zNew2));
  if( bLocked ){
    munlock(zOld, sizeof(zOld));
    munlock(zNew, sizeof(zNew));
    munlock(zNew2, sizeof(zNew2));
  }
  return rc;
}
