/*
** TPM 2.0 sealing of the wallet key through tpm2-tss (ESAPI, the TCTI
** loader, MU for marshalling, RC for messages).  The wallet provider seals
** its 32-byte wallet key here when `wallet_seal = tpm2`, so a copy of the
** wallet file is useless away from this machine's TPM (and, with
** wallet_tpm_pcrs, away from its measured boot state).
**
** What the TPM holds: nothing persistent.  The parent is the primary
** storage key the TPM derives from its owner seed and a fixed template
** (the same key every time, on this TPM only), or a persistent key the
** configuration names.  The sealed object (a keyedhash object whose
** sensitive data is the wallet key, fixedTPM|fixedParent, authorised by
** a PolicyPCR digest or, without PCRs, by its empty auth value) lives in
** the wallet file, wrapped by the parent.
**
** Every command that carries the key (Create, Unseal) runs in a session
** salted with the parent key and with parameter encryption, so the key
** never crosses the TPM bus or socket in clear.
**
** It must never print: tpm2-tss logs errors to stderr unless TSS2_LOG says
** otherwise, so the first use sets TSS2_LOG=all+NONE when the environment
** does not already choose.  It never runs tpm2-tools and never stores the
** TCTI in a file (it belongs to the machine, not the wallet).
*/
#include "tde_int.h"
#include "config.h"
#include "keystore/wallet_tpm.h"
#include "cipher/cipher.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <tss2/tss2_esys.h>
#include <tss2/tss2_mu.h>
#include <tss2/tss2_rc.h>
#include <tss2/tss2_tctildr.h>

#define TPM_PCR_MAX 24

static pthread_once_t tpmLogOnce = PTHREAD_ONCE_INIT;
static void tpmQuietLog(void){
  setenv("TSS2_LOG", "all+NONE", 0);     /* keeps a choice already made */
}

/* ---- configuration -------------------------------------------------------- */

static int tpmConfigLine(const TdeConfig *cfg, const char *zKey){
  int i;
  for(i=0; i<cfg->nEntry; i++){
    if( strcmp(cfg->aEntry[i].zKey, zKey)==0 ) return cfg->aEntry[i].iLine;
  }
  return 0;
}

int tdeTpmConfig(const TdeConfig *cfg, int *pbSeal, TdeTpmSeal *p){
  const char *zSeal = tdeConfigGet(cfg, "wallet_seal");
  const char *zPcrs = tdeConfigGet(cfg, "wallet_tpm_pcrs");
  const char *zParent = tdeConfigGet(cfg, "wallet_tpm_parent");
  const char *zTcti = tdeConfigGet(cfg, "wallet_tpm_tcti");
  memset(p, 0, sizeof(*p));
  *pbSeal = 0;
  if( zSeal && strcmp(zSeal, "tpm2")!=0 && strcmp(zSeal, "none")!=0 ){
    return tdeErr(TDE_CONFIG, "%s:%d: wallet_seal must be 'tpm2' or 'none'",
                  cfg->zPath, tpmConfigLine(cfg, "wallet_seal"));
  }
  *pbSeal = zSeal && strcmp(zSeal, "tpm2")==0;
  if( !*pbSeal && (zPcrs || zParent) ){
    return tdeErr(TDE_CONFIG, "%s:%d: %s needs wallet_seal = tpm2", cfg->zPath,
                  tpmConfigLine(cfg, zPcrs ? "wallet_tpm_pcrs" : "wallet_tpm_parent"),
                  zPcrs ? "wallet_tpm_pcrs" : "wallet_tpm_parent");
  }
  if( zPcrs ){
    const char *z = zPcrs;
    for(;;){
      unsigned v = 0;
      int nDigit = 0;
      while( *z==' ' ) z++;
      while( *z>='0' && *z<='9' && nDigit<3 ){ v = v*10 + (unsigned)(*z - '0'); z++; nDigit++; }
      while( *z==' ' ) z++;
      if( nDigit==0 || v>=TPM_PCR_MAX || (*z!=',' && *z!=0) ){
        return tdeErr(TDE_CONFIG, "%s:%d: wallet_tpm_pcrs must be PCR numbers 0-23 "
                      "separated by commas (e.g. 7 or 0,2,7)", cfg->zPath,
                      tpmConfigLine(cfg, "wallet_tpm_pcrs"));
      }
      p->pcrMask |= 1u << v;
      if( *z==0 ) break;
      z++;
    }
  }
  if( zParent ){
    char *zEnd = 0;
    unsigned long v = strtoul(zParent, &zEnd, 16);
    if( strncmp(zParent, "0x", 2)!=0 || *zEnd || v<0x81000000ul || v>0x81FFFFFFul ){
      return tdeErr(TDE_CONFIG, "%s:%d: wallet_tpm_parent must be a persistent handle "
                    "0x81000000-0x81FFFFFF", cfg->zPath, tpmConfigLine(cfg, "wallet_tpm_parent"));
    }
    p->parent = (uint32_t)v;
  }
  if( zTcti ){
    if( strlen(zTcti)>=sizeof(p->zTcti) ){
      return tdeErr(TDE_CONFIG, "%s:%d: wallet_tpm_tcti is too long", cfg->zPath,
                    tpmConfigLine(cfg, "wallet_tpm_tcti"));
    }
    memcpy(p->zTcti, zTcti, strlen(zTcti)+1);
  }
  return TDE_OK;
}

void tdeTpmDescribe(const TdeTpmSeal *p, char *z, size_t n){
  char zPcr[96], zParent[48];
  size_t k = 0;
  int i;
  zPcr[0] = 0;
  for(i=0; i<TPM_PCR_MAX; i++){
    if( p->pcrMask & (1u<<i) ){
      int m = snprintf(zPcr+k, sizeof(zPcr)-k, "%s%d", k ? "," : "", i);
      if( m<0 || (size_t)m>=sizeof(zPcr)-k ) break;
      k += (size_t)m;
    }
  }
  if( p->parent ) snprintf(zParent, sizeof(zParent), "persistent key 0x%08x", (unsigned)p->parent);
  else snprintf(zParent, sizeof(zParent), "owner-hierarchy primary key");
  snprintf(z, n, "TPM 2.0 (TCTI %s), parent %s, policy %s%s%s",
           p->zTcti[0] ? p->zTcti : "default", zParent,
           zPcr[0] ? "PCR " : "none (this TPM only)", zPcr, zPcr[0] ? " (sha256)" : "");
}

/* ---- talking to the TPM --------------------------------------------------- */

typedef struct Tpm {
  const TdeTpmSeal *pSeal;
  TSS2_TCTI_CONTEXT *pTcti;
  ESYS_CONTEXT *pEsys;
  ESYS_TR hParent;          /* ESYS_TR_NONE until set */
  int bFlushParent;         /* transient primary: flush at the end */
  ESYS_TR hSession;
  ESYS_TR hObject;
  char zWho[400];           /* tdeTpmDescribe, for messages */
} Tpm;

static int tpmLayerIsTcti(TSS2_RC rc){
  return (rc & TSS2_RC_LAYER_MASK)==TSS2_TCTI_RC_LAYER;
}

/* The TPM-layer response code without its handle/session/parameter
** number (format 1), for comparisons. */
static TSS2_RC tpmBase(TSS2_RC rc){
  if( (rc & TSS2_RC_LAYER_MASK)!=TSS2_TPM_RC_LAYER
   && (rc & TSS2_RC_LAYER_MASK)!=TSS2_RESMGR_TPM_RC_LAYER ) return rc;
  rc &= 0xFFF;
  if( rc & TPM2_RC_FMT1 ) return rc & (TPM2_RC_FMT1 | 0x3F);
  return rc;
}

/* One error for a failed TPM call, in the user's terms. */
static int tpmFail(Tpm *t, const char *zWhat, TSS2_RC rc){
  TSS2_RC b = tpmBase(rc);
  const char *zWhy = Tss2_RC_Decode(rc);
  if( tpmLayerIsTcti(rc) ){
    return tdeErr(TDE_NOKEYSTORE, "%s: TPM not reachable (%s failed: %s); the sealed wallet "
                  "cannot be opened without this machine's TPM", t->zWho, zWhat, zWhy);
  }
  if( b==TPM2_RC_POLICY_FAIL || b==TPM2_RC_PCR_CHANGED ){
    return tdeErr(TDE_AUTH, "%s: the TPM refuses to unseal the wallet key: the PCR policy "
                  "does not match (the measured boot state changed since the wallet was "
                  "sealed; %s)", t->zWho, zWhy);
  }
  if( b==TPM2_RC_INTEGRITY || (strcmp(zWhat, "Load")==0 && (b & TPM2_RC_FMT1)) ){
    return tdeErr(TDE_AUTH, "%s: the TPM refuses the sealed wallet key: it was not sealed by "
                  "this TPM (a copy from another machine, or the TPM was cleared; %s)",
                  t->zWho, zWhy);
  }
  if( b==TPM2_RC_LOCKOUT ){
    return tdeErr(TDE_AUTH, "%s: the TPM is in dictionary-attack lockout (%s)", t->zWho, zWhy);
  }
  if( b==TPM2_RC_BAD_AUTH || b==TPM2_RC_AUTH_FAIL ){
    return tdeErr(TDE_AUTH, "%s: the TPM refused the authorization for %s (the owner "
                  "hierarchy or parent key has a password; set wallet_tpm_parent to a "
                  "persistent key with an empty auth value; %s)", t->zWho, zWhat, zWhy);
  }
  return tdeErr(TDE_CRYPTO, "%s: %s failed: %s", t->zWho, zWhat, zWhy);
}

static void tpmClose(Tpm *t){
  if( t->pEsys ){
    if( t->hObject!=ESYS_TR_NONE ) Esys_FlushContext(t->pEsys, t->hObject);
    if( t->hSession!=ESYS_TR_NONE ) Esys_FlushContext(t->pEsys, t->hSession);
    if( t->hParent!=ESYS_TR_NONE ){
      if( t->bFlushParent ) Esys_FlushContext(t->pEsys, t->hParent);
      else Esys_TR_Close(t->pEsys, &t->hParent);
    }
    Esys_Finalize(&t->pEsys);
  }
  if( t->pTcti ) Tss2_TctiLdr_Finalize(&t->pTcti);
}

/* Connect and get the parent key. */
static int tpmOpen(Tpm *t, const TdeTpmSeal *p){
  TSS2_RC rc;
  memset(t, 0, sizeof(*t));
  t->pSeal = p;
  t->hParent = t->hSession = t->hObject = ESYS_TR_NONE;
  tdeTpmDescribe(p, t->zWho, sizeof(t->zWho));
  pthread_once(&tpmLogOnce, tpmQuietLog);
  rc = Tss2_TctiLdr_Initialize(p->zTcti[0] ? p->zTcti : 0, &t->pTcti);
  if( rc!=TSS2_RC_SUCCESS ){
    t->pTcti = 0;
    return tdeErr(TDE_NOKEYSTORE, "%s: TPM not reachable (cannot load or connect the TCTI: "
                  "%s); the sealed wallet cannot be opened without this machine's TPM",
                  t->zWho, Tss2_RC_Decode(rc));
  }
  rc = Esys_Initialize(&t->pEsys, t->pTcti, 0);
  if( rc!=TSS2_RC_SUCCESS ){
    t->pEsys = 0;
    return tpmFail(t, "Esys_Initialize", rc);
  }
  if( p->parent ){
    rc = Esys_TR_FromTPMPublic(t->pEsys, p->parent, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE,
                               &t->hParent);
    if( rc!=TSS2_RC_SUCCESS ){
      t->hParent = ESYS_TR_NONE;
      return tpmFail(t, "reading the persistent parent key", rc);
    }
  }else{
    TPM2B_SENSITIVE_CREATE sens;
    TPM2B_PUBLIC pub;
    TPM2B_DATA outside;
    TPML_PCR_SELECTION noPcr;
    memset(&sens, 0, sizeof(sens));
    memset(&pub, 0, sizeof(pub));
    memset(&outside, 0, sizeof(outside));
    memset(&noPcr, 0, sizeof(noPcr));
    pub.publicArea.type = TPM2_ALG_ECC;
    pub.publicArea.nameAlg = TPM2_ALG_SHA256;
    pub.publicArea.objectAttributes = TPMA_OBJECT_RESTRICTED | TPMA_OBJECT_DECRYPT
      | TPMA_OBJECT_FIXEDTPM | TPMA_OBJECT_FIXEDPARENT | TPMA_OBJECT_SENSITIVEDATAORIGIN
      | TPMA_OBJECT_USERWITHAUTH | TPMA_OBJECT_NODA;
    pub.publicArea.parameters.eccDetail.symmetric.algorithm = TPM2_ALG_AES;
    pub.publicArea.parameters.eccDetail.symmetric.keyBits.aes = 128;
    pub.publicArea.parameters.eccDetail.symmetric.mode.aes = TPM2_ALG_CFB;
    pub.publicArea.parameters.eccDetail.scheme.scheme = TPM2_ALG_NULL;
    pub.publicArea.parameters.eccDetail.curveID = TPM2_ECC_NIST_P256;
    pub.publicArea.parameters.eccDetail.kdf.scheme = TPM2_ALG_NULL;
    rc = Esys_CreatePrimary(t->pEsys, ESYS_TR_RH_OWNER, ESYS_TR_PASSWORD, ESYS_TR_NONE,
                            ESYS_TR_NONE, &sens, &pub, &outside, &noPcr, &t->hParent,
                            0, 0, 0, 0);
    if( rc!=TSS2_RC_SUCCESS ){
      t->hParent = ESYS_TR_NONE;
      return tpmFail(t, "CreatePrimary (owner hierarchy)", rc);
    }
    t->bFlushParent = 1;
  }
  return TDE_OK;
}

static void tpmPcrSelection(uint32_t mask, TPML_PCR_SELECTION *pSel){
  int i;
  memset(pSel, 0, sizeof(*pSel));
  pSel->count = 1;
  pSel->pcrSelections[0].hash = TPM2_ALG_SHA256;
  pSel->pcrSelections[0].sizeofSelect = 3;
  for(i=0; i<TPM_PCR_MAX; i++){
    if( mask & (1u<<i) ) pSel->pcrSelections[0].pcrSelect[i/8] |= (uint8_t)(1u << (i%8));
  }
}

/* Start a session salted with the parent key, AES-128-CFB parameter
** encryption both ways: type TPM2_SE_HMAC, _POLICY or _TRIAL. */
static int tpmSession(Tpm *t, TPM2_SE type){
  TPMT_SYM_DEF sym;
  TSS2_RC rc;
  memset(&sym, 0, sizeof(sym));
  sym.algorithm = TPM2_ALG_AES;
  sym.keyBits.aes = 128;
  sym.mode.aes = TPM2_ALG_CFB;
  rc = Esys_StartAuthSession(t->pEsys, type==TPM2_SE_TRIAL ? ESYS_TR_NONE : t->hParent,
                             ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE,
                             0, type, &sym, TPM2_ALG_SHA256, &t->hSession);
  if( rc!=TSS2_RC_SUCCESS ){
    t->hSession = ESYS_TR_NONE;
    return tpmFail(t, "StartAuthSession", rc);
  }
  if( type!=TPM2_SE_TRIAL ){
    rc = Esys_TRSess_SetAttributes(t->pEsys, t->hSession,
                                   TPMA_SESSION_DECRYPT | TPMA_SESSION_ENCRYPT
                                   | TPMA_SESSION_CONTINUESESSION, 0xff);
    if( rc!=TSS2_RC_SUCCESS ) return tpmFail(t, "setting session attributes", rc);
  }
  return TDE_OK;
}

/* PolicyPCR on the current session (trial or real) over p's PCRs. */
static int tpmPolicyPcr(Tpm *t){
  TPML_PCR_SELECTION sel;
  TPM2B_DIGEST empty;
  TSS2_RC rc;
  tpmPcrSelection(t->pSeal->pcrMask, &sel);
  memset(&empty, 0, sizeof(empty));
  rc = Esys_PolicyPCR(t->pEsys, t->hSession, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE,
                      &empty, &sel);
  if( rc!=TSS2_RC_SUCCESS ) return tpmFail(t, "PolicyPCR", rc);
  return TDE_OK;
}

int tdeTpmSeal(const TdeTpmSeal *p, const uint8_t *aKey, size_t nKey,
               uint8_t *aOut, size_t nOut, size_t *pnOut){
  Tpm t;
  TPM2B_SENSITIVE_CREATE sens;
  TPM2B_PUBLIC pub;
  TPM2B_DATA outside;
  TPML_PCR_SELECTION noPcr;
  TPM2B_DIGEST *pPolicy = 0;
  TPM2B_PUBLIC *pOutPub = 0;
  TPM2B_PRIVATE *pOutPriv = 0;
  size_t nDone = 0;
  TSS2_RC trc;
  int rc;

  *pnOut = 0;
  memset(&sens, 0, sizeof(sens));
  if( nKey==0 || nKey>sizeof(sens.sensitive.data.buffer) ){
    return tdeErr(TDE_RANGE, "tpm: cannot seal %zu bytes", nKey);
  }
  rc = tpmOpen(&t, p);
  if( rc!=TDE_OK ) goto seal_out;

  memset(&pub, 0, sizeof(pub));
  memset(&outside, 0, sizeof(outside));
  memset(&noPcr, 0, sizeof(noPcr));
  pub.publicArea.type = TPM2_ALG_KEYEDHASH;
  pub.publicArea.nameAlg = TPM2_ALG_SHA256;
  pub.publicArea.objectAttributes = TPMA_OBJECT_FIXEDTPM | TPMA_OBJECT_FIXEDPARENT;
  pub.publicArea.parameters.keyedHashDetail.scheme.scheme = TPM2_ALG_NULL;
  if( p->pcrMask ){
    /* Only the policy authorises it: no userWithAuth. */
    rc = tpmSession(&t, TPM2_SE_TRIAL);
    if( rc==TDE_OK ) rc = tpmPolicyPcr(&t);
    if( rc!=TDE_OK ) goto seal_out;
    trc = Esys_PolicyGetDigest(t.pEsys, t.hSession, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE,
                               &pPolicy);
    if( trc!=TSS2_RC_SUCCESS ){ rc = tpmFail(&t, "PolicyGetDigest", trc); goto seal_out; }
    pub.publicArea.authPolicy = *pPolicy;
    Esys_FlushContext(t.pEsys, t.hSession);
    t.hSession = ESYS_TR_NONE;
  }else{
    pub.publicArea.objectAttributes |= TPMA_OBJECT_USERWITHAUTH;
  }
  rc = tpmSession(&t, TPM2_SE_HMAC);
  if( rc!=TDE_OK ) goto seal_out;
  sens.sensitive.data.size = (UINT16)nKey;
  memcpy(sens.sensitive.data.buffer, aKey, nKey);
  trc = Esys_Create(t.pEsys, t.hParent, t.hSession, ESYS_TR_NONE, ESYS_TR_NONE,
                    &sens, &pub, &outside, &noPcr, &pOutPriv, &pOutPub, 0, 0, 0);
  if( trc!=TSS2_RC_SUCCESS ){ rc = tpmFail(&t, "Create (sealing the wallet key)", trc); goto seal_out; }
  trc = Tss2_MU_TPM2B_PUBLIC_Marshal(pOutPub, aOut, nOut, &nDone);
  if( trc==TSS2_RC_SUCCESS ) trc = Tss2_MU_TPM2B_PRIVATE_Marshal(pOutPriv, aOut, nOut, &nDone);
  if( trc!=TSS2_RC_SUCCESS ){
    rc = tdeErr(TDE_RANGE, "%s: sealed object does not fit (%s)", t.zWho, Tss2_RC_Decode(trc));
    goto seal_out;
  }
  *pnOut = nDone;

seal_out:
  tdeWipe(&sens, sizeof(sens));
  Esys_Free(pPolicy);
  Esys_Free(pOutPub);
  Esys_Free(pOutPriv);
  tpmClose(&t);
  return rc;
}

int tdeTpmUnseal(const TdeTpmSeal *p, const uint8_t *aBlob, size_t nBlob,
                 uint8_t *aKey, size_t nKey){
  Tpm t;
  TPM2B_PUBLIC pub;
  TPM2B_PRIVATE priv;
  TPM2B_SENSITIVE_DATA *pData = 0;
  size_t nDone = 0;
  TSS2_RC trc;
  int rc;

  memset(&pub, 0, sizeof(pub));
  memset(&priv, 0, sizeof(priv));
  trc = Tss2_MU_TPM2B_PUBLIC_Unmarshal(aBlob, nBlob, &nDone, &pub);
  if( trc==TSS2_RC_SUCCESS ) trc = Tss2_MU_TPM2B_PRIVATE_Unmarshal(aBlob, nBlob, &nDone, &priv);
  if( trc!=TSS2_RC_SUCCESS || nDone!=nBlob ){
    tdeWipe(aKey, nKey);
    return tdeErr(TDE_FORMAT, "tpm: the sealed wallet key is damaged (%s)",
                  trc ? Tss2_RC_Decode(trc) : "trailing bytes");
  }
  rc = tpmOpen(&t, p);
  if( rc!=TDE_OK ) goto unseal_out;
  trc = Esys_Load(t.pEsys, t.hParent, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE,
                  &priv, &pub, &t.hObject);
  if( trc!=TSS2_RC_SUCCESS ){
    t.hObject = ESYS_TR_NONE;
    rc = tpmFail(&t, "Load", trc);
    goto unseal_out;
  }
  if( p->pcrMask ){
    rc = tpmSession(&t, TPM2_SE_POLICY);
    if( rc==TDE_OK ) rc = tpmPolicyPcr(&t);
  }else{
    rc = tpmSession(&t, TPM2_SE_HMAC);
  }
  if( rc!=TDE_OK ) goto unseal_out;
  trc = Esys_Unseal(t.pEsys, t.hObject, t.hSession, ESYS_TR_NONE, ESYS_TR_NONE, &pData);
  if( trc!=TSS2_RC_SUCCESS ){
    pData = 0;
    rc = tpmFail(&t, "Unseal", trc);
    goto unseal_out;
  }
  if( pData->size!=nKey ){
    rc = tdeErr(TDE_FORMAT, "%s: the unsealed wallet key has %u bytes, expected %zu",
                t.zWho, (unsigned)pData->size, nKey);
    goto unseal_out;
  }
  memcpy(aKey, pData->buffer, nKey);

unseal_out:
  if( pData ){
    tdeWipe(pData, sizeof(*pData));
    Esys_Free(pData);
  }
  if( rc!=TDE_OK ) tdeWipe(aKey, nKey);
  tpmClose(&t);
  return rc;
}
