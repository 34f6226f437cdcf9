/*
** Configuration file: which keystore to use and its parameters.
**
** Format (docs in README "Configuration"): UTF-8 text, one `key = value`
** per line; blank lines and lines starting with '#' are ignored, and a '#'
** after a space or tab starts a comment to the end of the line (a '#' right
** after another character is kept: "a#b"); values are taken verbatim after
** trimming spaces (no quoting, no escapes).  Keys are
** lower-case.  A key may appear once.  Relative paths in values are
** resolved against the directory of the configuration file by
** tdeConfigPath().
**
** Generic keys:     keystore (required), password_file, password_env,
**                   password_fd, audit_log, audit_syslog
** Provider keys:    checked by each provider (tde_keystore_methods.xCheckConfig)
**
** Unknown keys, missing values, duplicates and a missing `keystore` are
** errors naming the file and line (TDE_CONFIG via tdeErr).  Passwords never
** appear in the file itself: password_file names a file (which must not be
** group/world readable), password_env names an environment variable.
*/
#ifndef TDE_CONFIG_H
#define TDE_CONFIG_H

#include <stddef.h>

#define TDE_CONFIG_MAX_ENTRIES 32

typedef struct TdeConfigEntry {
  char *zKey;
  char *zValue;
  int iLine;
} TdeConfigEntry;

typedef struct TdeConfig {
  char *zPath;          /* absolute path of the file */
  char *zDir;           /* its directory, for relative paths */
  int nEntry;
  TdeConfigEntry aEntry[TDE_CONFIG_MAX_ENTRIES];
} TdeConfig;

/* Resolve which configuration file applies: zExplicit if not NULL, else
** $SQLITE_TDE_CONFIG, else the default /etc/sqlite-tde/tde.conf.  Writes an
** absolute path into zOut. */
int tdeConfigLocate(const char *zExplicit, char *zOut, size_t nOut);

/* Parse a file and validate keys against the provider it names.  On success
** *pp is a new config (free with tdeConfigFree).  Defined in
** src/keystore/config_load.c: validating provider keys asks the provider (its
** xCheckConfig method), and config.c itself knows no keystore. */
int tdeConfigLoad(const char *zPath, TdeConfig **pp);
/* Parse from memory (zName used in messages); zDir for relative paths.
** Validates like tdeConfigLoad (also defined in src/keystore/config_load.c). */
int tdeConfigParse(const char *zText, const char *zName, const char *zDir, TdeConfig **pp);
void tdeConfigFree(TdeConfig *p);

/* The plain parser (config.c): syntax, duplicates and the entry limit,
** no check of which keys exist.  tdeConfigReadFile also refuses files
** that are not regular, too large or hold a NUL byte. */
int tdeConfigParseText(const char *zText, const char *zName, const char *zDir, TdeConfig **pp);
int tdeConfigReadFile(const char *zPath, TdeConfig **pp);
/* 1 if zKey is one of the keys every configuration may use (keystore,
** password_file, password_env, audit_log, audit_syslog). */
int tdeConfigIsGenericKey(const char *zKey);
/* Those keys, NULL-ended (for messages listing what is known). */
const char *const *tdeConfigGenericKeys(void);
/* Check the values of the generic keys (audit_syslog yes/no, at most one
** password source); zName (NULL: p->zPath) names the file in messages. */
int tdeConfigCheckGeneric(const TdeConfig *p, const char *zName);

/* The one password reader (config.c), for password_file, password_fd and
** SQL tde_keystore_open_fd(): fd read to end of file into secure memory,
** one trailing "\n" or "\r\n" dropped.  Returns TDE_PWREAD_OK with *pz a
** NUL-terminated password of *pn bytes (free with tdeSecureFree(*pz,
** *pn+1)), else a reason below with *pz NULL and nothing left in memory;
** sets no message (the caller names the source).  fd stays open. */
#define TDE_PASSWORD_MAX   4096   /* longest password read from a file or fd */
#define TDE_PWREAD_OK      0
#define TDE_PWREAD_IO      1      /* read(2) failed: errno says why */
#define TDE_PWREAD_LONG    2      /* more than TDE_PASSWORD_MAX bytes */
#define TDE_PWREAD_EMPTY   3      /* nothing (or only a newline) */
#define TDE_PWREAD_NUL     4      /* a NUL byte inside */
#define TDE_PWREAD_NOMEM   5
int tdePasswordRead(int fd, char **pz, size_t *pn);

/* freshness_anchor (docs/FORMAT.md "External anchor"): *peKind one of
** TDE_ANCHOR_*, the directory of file:DIR into zDir (resolved against the
** configuration's directory), the interval in seconds (default 60).
** TDE_OK with TDE_ANCHOR_NONE when the key is absent. */
#define TDE_ANCHOR_NONE   0
#define TDE_ANCHOR_FILE   1
#define TDE_ANCHOR_PKCS11 2
#define TDE_ANCHOR_KMIP   3
#define TDE_ANCHOR_INTERVAL_DEFAULT 60
int tdeConfigAnchor(const TdeConfig *p, int *peKind, char *zDir, size_t nDir, long long *pnInterval);

/* standby_copies = DIR[:DIR...] (README "Standby"): the directories, each
** with everything below it, where this host keeps standby copies.  *pbIn 1
** if zDb's directory is one of them (paths resolved, links followed).  A
** DB-tdestandby counts only there: next to any other database it switches
** nothing (vfs.c refuses the open instead). */
int tdeConfigStandbyPlace(const TdeConfig *p, const char *zDb, int *pbIn);

/* Value of key or NULL. */
const char *tdeConfigGet(const TdeConfig *p, const char *zKey);
/* Value of key as a path, relative ones resolved against the config's
** directory; written to zOut.  TDE_NOTFOUND if absent. */
int tdeConfigPath(const TdeConfig *p, const char *zKey, char *zOut, size_t nOut);

/* Read the password the configuration points to (password_file or
** password_env) into secure memory: *pz (NUL-terminated, from
** tdeSecureAlloc, length *pn not counting the NUL; free with
** tdeSecureFree(*pz, *pn+1)).  TDE_NOTFOUND if the config names no source.
** A password_file readable by group or others is refused (TDE_CONFIG). */
int tdeConfigPassword(const TdeConfig *p, char **pz, size_t *pn);

/* Copy of cfg's audit_* settings for a keystore handle (NULL if none). */
int tdeConfigCopyAudit(const TdeConfig *cfg, TdeConfig **pp);

#endif /* TDE_CONFIG_H */
