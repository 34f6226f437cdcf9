/*
** Audit trail: every key operation appends one JSON line to the audit log
** named by the configuration (`audit_log = PATH`; also to syslog when
** `audit_syslog = yes`).  A line never holds key material, passwords or
** PINs -- only operation, outcome, database path and id, key ids and
** versions, process id, time and a short detail text.
**
** Line format (keys in this order, absent ones omitted):
**   {"ts":"2026-11-30T06:20:00.123Z","op":"dek_unwrap","outcome":"success",
**    "pid":1234,"db_path":"/var/db/app.db","db_id":"<32 hex>",
**    "keystore":"wallet","key_id":"wallet-...","new_key_id":"wallet-...",
**    "key_version":1,"new_key_version":2,"pages":1000,"detail":"..."}
** Strings are JSON-escaped.  Each line is written with one write(2) on a
** descriptor opened O_APPEND|O_CLOEXEC, mode 0600 when created, so lines
** from several processes never interleave.  Failing to write the audit log
** is logged (tdeLog warning) but does not fail the key operation.
**
** Operations (zOp): keystore_open, keystore_close, keystore_create,
** master_key_create, master_key_rotate, master_key_retire, dek_create,
** dek_unwrap, header_rewrap, header_repair, rekey_start, rekey_progress, rekey_end,
** keystore_migrate, keystore_drop, keystore_seal, keystore_unseal,
** reanchor (sqlite-tde reanchor), anchor_check (an open refused by the
** freshness anchor, always "failure"), and any
** of them with outcome "failure".
*/
#ifndef TDE_AUDIT_H
#define TDE_AUDIT_H

#include <stdint.h>

#include "config.h"

typedef struct TdeAuditRec {
  const char *zOp;            /* required */
  int bFailure;               /* 0 success, 1 failure */
  const char *zDbPath;        /* may be NULL */
  const uint8_t *aDbid;       /* 16 bytes or NULL */
  const char *zKeystore;      /* provider name or NULL */
  const char *zKeyId;         /* master key id or NULL */
  const char *zNewKeyId;      /* or NULL */
  int64_t keyVersion;         /* data key version, 0 = absent */
  int64_t newKeyVersion;      /* 0 = absent */
  int64_t nPages;             /* -1 = absent */
  const char *zDetail;        /* short text, or NULL; never secrets */
} TdeAuditRec;

/* Initialise a record with everything absent. */
void tdeAuditInit(TdeAuditRec *r, const char *zOp);

/* Append r to the audit log(s) pCfg names; no-op if it names none or pCfg
** is NULL.  Thread safe. */
void tdeAudit(const TdeConfig *pCfg, const TdeAuditRec *r);

/* One line for a keystore operation (keystore providers): zKeystore is the
** provider's name; rc!=TDE_OK records a failure with the tde_last_error()
** text (never holds secrets) as detail, else zDetail.  No-op if pCfg is
** NULL. */
void tdeAuditKeystoreOp(const TdeConfig *pCfg, const char *zKeystore, const char *zOp,
                        const char *zKeyId, int rc, const char *zDetail);

/* Format r as one JSON line (with the trailing newline) into z; returns
** the length, or -1 if it does not fit.  Exposed for tests. */
int tdeAuditFormat(const TdeAuditRec *r, int64_t tsMillis, int pid, char *z, size_t n);

#endif /* TDE_AUDIT_H */
