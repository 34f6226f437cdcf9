/*
** TPM 2.0 sealing of the wallet key (keystore/wallet_tpm.c), used by the
** wallet provider for `wallet_seal = tpm2` (wallet kind 3, docs/WALLET.md).
** Only the wallet provider calls this; it never sees a master key, a data
** key or a page, only the 32-byte wallet key it seals or unseals.
*/
#ifndef TDE_WALLET_TPM_H
#define TDE_WALLET_TPM_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

#define TDE_TPM_SEALED_MAX 1024    /* largest sealed object (public || private) */

typedef struct TdeTpmSeal {
  uint32_t pcrMask;        /* SHA-256 PCRs in the policy, bit i = PCR i; 0: none */
  uint32_t parent;         /* 0: the owner-hierarchy primary key (ECC P-256
                           ** storage template, docs/WALLET.md); else a
                           ** persistent handle 0x81000000..0x81FFFFFF */
  char zTcti[256];         /* TCTI configuration ("swtpm:path=...",
                           ** "device:/dev/tpmrm0"); "" = the TSS default */
} TdeTpmSeal;

/* Read wallet_seal / wallet_tpm_pcrs / wallet_tpm_parent / wallet_tpm_tcti.
** *pbSeal is 1 when wallet_seal = tpm2.  TDE_CONFIG naming the line on a
** bad value. */
int tdeTpmConfig(const TdeConfig *cfg, int *pbSeal, TdeTpmSeal *p);

/* Seal aKey[nKey] (nKey <= 128) under the parent and PCR policy of p, with
** the PCRs' current values.  Output: TPM2B_PUBLIC || TPM2B_PRIVATE as the
** TPM marshals them, into aOut[nOut]; *pnOut its length.  The key travels
** to the TPM encrypted (salted session, parameter encryption). */
int tdeTpmSeal(const TdeTpmSeal *p, const uint8_t *aKey, size_t nKey,
               uint8_t *aOut, size_t nOut, size_t *pnOut);

/* Unseal a blob made by tdeTpmSeal into aKey[nKey] (exactly nKey bytes or
** TDE_FORMAT).  Errors name the TPM (TCTI) and the policy: TDE_NOKEYSTORE
** when the TPM cannot be reached, TDE_AUTH when it refuses (another TPM,
** PCRs changed, lockout).  aKey is wiped on failure. */
int tdeTpmUnseal(const TdeTpmSeal *p, const uint8_t *aBlob, size_t nBlob,
                 uint8_t *aKey, size_t nKey);

/* "TPM 2.0 (TCTI swtpm:path=...), policy PCR 7 (sha256)" into z[n]. */
void tdeTpmDescribe(const TdeTpmSeal *p, char *z, size_t n);

#endif /* TDE_WALLET_TPM_H */
