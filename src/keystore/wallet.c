/*
** Software wallet keystore provider ("wallet", TDE_KS_WALLET): master keys
** kept in one file, sealed with AES-256-GCM under a wallet key that is
** either derived from a password with Argon2id (kind 1), stored in the
** file itself (kind 2, auto-login, protected only by file permissions), or
** sealed by this machine's TPM 2.0 (kind 3, auto-login bound to the TPM
** and optionally its PCRs: keystore/wallet_tpm.c does the TPM part).
** The byte layout is docs/WALLET.md, which this code follows.
**
** It must never write a wallet in place (new state goes to a temporary
** file, is synced, then renamed over the old one, so a crash leaves the
** old or the new wallet, never half of one), never overwrite a wallet on
** create, never modify the file when an open fails, never let key bytes or
** passwords leave secure memory except into caller buffers, and never
** print.  Master keys are never deleted by this code.
**
** A handle serialises its methods with a mutex.  Across processes, key
** rotation and retirement hold an exclusive flock() on the wallet's
** directory and re-read the file first, so two processes changing it at
** once cannot drop each other's changes; a lookup that misses, and every
** wrap, current-key query and listing, re-reads the file if it changed, so
** a key another process added is found and a key it retired is no longer
** wrapped with.
**
** Key lifecycle events (keystore_create, master_key_create,
** master_key_retire) go to the audit trail with key ids, never key bytes;
** keystore_open/close are audited by the registry.
*/
#include "tde_int.h"
#include "config.h"
#include "keystore/keystore.h"
#include "audit/audit.h"
#include "cipher/cipher.h"
#include "keystore/wallet_tpm.h"

#include <argon2.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- file format constants (docs/WALLET.md) ------------------------------ */

#define WALLET_MAGIC          "SQLTDEWL"
#define WALLET_MAGIC_LEN      8
#define WALLET_VERSION        1
#define WALLET_KIND_PASSWORD  1
#define WALLET_KIND_AUTOLOGIN 2
#define WALLET_KIND_TPM       3      /* auto-login, wallet key sealed by a TPM 2.0 */
#define WALLET_KDF_ARGON2ID   1      /* Argon2id, version 0x13 */

#define WALLET_OFS_VERSION    8
#define WALLET_OFS_KIND       10
#define WALLET_OFS_RESERVED   11
#define WALLET_OFS_CTLEN      12
#define WALLET_OFS_KEYSECT    16     /* 32 bytes: KDF parameters or the key */
#define WALLET_OFS_KDF_ID     16
#define WALLET_OFS_KDF_T      20
#define WALLET_OFS_KDF_M      24
#define WALLET_OFS_KDF_P      28
#define WALLET_OFS_SALT       32
#define WALLET_OFS_SEAL       16     /* kind 3: 1 = TPM 2.0 */
#define WALLET_OFS_PCRBANK    17     /* kind 3: 0 = no PCR policy, 1 = SHA-256 */
#define WALLET_OFS_PCRMASK    20     /* kind 3: bit i = PCR i */
#define WALLET_OFS_PARENT     24     /* kind 3: 0 = owner primary, else persistent handle */
#define WALLET_OFS_SEALLEN    28     /* kind 3: S, length of the sealed object (2 bytes) */
#define WALLET_OFS_CHECK      48
#define WALLET_HDR            64     /* bytes before the IV; all are AAD */
#define WALLET_IV             12
#define WALLET_TAG            16
#define WALLET_OVERHEAD       (WALLET_HDR + WALLET_IV + WALLET_TAG)
#define WALLET_SALT           16
#define WALLET_CHECK          16
#define WALLET_KEY            32

#define WALLET_MAX_KEYS       4096
#define WALLET_ENTRY_MAX      (1 + TDE_KEYID_MAX + 8 + 1 + WALLET_KEY)
#define WALLET_PAYLOAD_MAX    (4 + WALLET_MAX_KEYS * WALLET_ENTRY_MAX)
#define WALLET_FILE_MAX       (WALLET_OVERHEAD + WALLET_PAYLOAD_MAX + TDE_TPM_SEALED_MAX)

#define WALLET_ID_PREFIX      "wallet-"
#define WALLET_ID_LEN         (7 + 32)

/* Argon2id parameters: defaults, and the bounds accepted from the
** configuration and from a file (a corrupted file must not make us
** allocate gigabytes or spin for hours). */
#define WALLET_KDF_T_DEFAULT  3
#define WALLET_KDF_M_DEFAULT  65536  /* KiB */
#define WALLET_KDF_P_DEFAULT  1
#define WALLET_KDF_T_MIN      1
#define WALLET_KDF_T_MAX      64
#define WALLET_KDF_M_MIN      8192
#define WALLET_KDF_M_MAX      (1024 * 1024)   /* 1 GiB */
#define WALLET_KDF_P_MIN      1
#define WALLET_KDF_P_MAX      16

static const char zInfoCheck[] = "sqlite-tde wallet check v1";
static const char zInfoPayload[] = "sqlite-tde wallet payload v1";

/* ---- in-memory state ------------------------------------------------------ */

/* One master key.  Arrays of these live only in tdeSecureAlloc memory. */
typedef struct WalletKey {
  char zId[TDE_KEYID_MAX + 1];
  int64_t created;
  int bRetired;
  uint8_t aKey[WALLET_KEY];
} WalletKey;

typedef struct WalletKdf {
  uint32_t t;            /* Argon2 passes */
  uint32_t m;            /* memory, KiB */
  uint32_t p;            /* lanes */
  uint8_t aSalt[WALLET_SALT];
} WalletKdf;

/* Kind 3: the sealing policy and the sealed object (not secret: it is the
** wallet key wrapped by the TPM's parent key). */
typedef struct WalletSealed {
  TdeTpmSeal tpm;        /* PCRs and parent from the file, TCTI from the config */
  uint8_t aBlob[TDE_TPM_SEALED_MAX];
  size_t nBlob;
} WalletSealed;

/* What the fixed header says, once validated. */
typedef struct WalletHdr {
  int kind;
  WalletKdf kdf;         /* kind 1 only */
  uint32_t nCt;          /* payload ciphertext bytes */
  uint32_t pcrMask;      /* kind 3 only */
  uint32_t parent;       /* kind 3 only */
  size_t nSealed;        /* kind 3: bytes of sealed object after the tag */
} WalletHdr;

/* Identity of the file last read or written, to notice another process's
** rewrite cheaply. */
typedef struct WalletStamp {
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtim;
} WalletStamp;

typedef struct Wallet {
  TdeKeystore base;      /* must be first */
  pthread_mutex_t mutex; /* guards everything below */
  char zPath[PATH_MAX];
  int kind;
  WalletKdf kdf;         /* kind 1: kept to rewrite the file */
  uint8_t *aW;           /* WALLET_KEY bytes, secure: the wallet key */
  WalletSealed sealed;   /* kind 3: kept to rewrite the file */
  WalletKey *aKey;       /* nKey entries, secure, in creation order */
  int nKey;
  WalletStamp stamp;
  TdeConfig *pAudit;     /* own copy of the config's audit_* keys, or NULL;
                         ** a copy, not the caller's pointer, so a caller
                         ** may free its config while the wallet is open */
} Wallet;

/* ---- helpers -------------------------------------------------------------- */

static void walletStamp(const struct stat *pSt, WalletStamp *pStamp){
  pStamp->dev = pSt->st_dev;
  pStamp->ino = pSt->st_ino;
  pStamp->size = pSt->st_size;
  pStamp->mtim = pSt->st_mtim;
}

static int walletStampEqual(const WalletStamp *a, const WalletStamp *b){
  return a->dev==b->dev && a->ino==b->ino && a->size==b->size
      && a->mtim.tv_sec==b->mtim.tv_sec && a->mtim.tv_nsec==b->mtim.tv_nsec;
}

static void walletKeysFree(WalletKey *aKey, int nKey){
  tdeSecureFree(aKey, aKey ? (size_t)nKey * sizeof(WalletKey) : 0);
}

/* Parse an unsigned decimal config value in [mn, mx]. */
static int walletConfigU32(const TdeConfig *cfg, const char *zKey,
                           uint32_t mn, uint32_t mx, uint32_t *pVal){
  int i;
  for(i=0; i<cfg->nEntry; i++){
    const TdeConfigEntry *pE = &cfg->aEntry[i];
    const char *z;
    uint64_t v = 0;
    if( strcmp(pE->zKey, zKey)!=0 ) continue;
    for(z=pE->zValue; *z; z++){
      if( *z<'0' || *z>'9' || v>UINT32_MAX ) break;
      v = v*10 + (uint64_t)(*z - '0');
    }
    if( *z || z==pE->zValue || v<mn || v>mx ){
      return tdeErr(TDE_CONFIG, "%s:%d: %s must be a whole number from %u to %u",
                    cfg->zPath, pE->iLine, zKey, (unsigned)mn, (unsigned)mx);
    }
    *pVal = (uint32_t)v;
    return TDE_OK;
  }
  return TDE_OK;            /* absent: keep the default */
}

/* Wallet path and KDF parameters for new wallets, from the configuration. */
static int walletConfig(const TdeConfig *cfg, char *zPath, size_t nPath, WalletKdf *pKdf){
  int rc;
  if( cfg==0 ) return tdeErr(TDE_MISUSE, "wallet: no configuration");
  rc = tdeConfigPath(cfg, "wallet", zPath, nPath);
  if( rc==TDE_NOTFOUND ){
    return tdeErr(TDE_CONFIG, "%s: missing required key 'wallet' (path of the wallet file)",
                  cfg->zPath);
  }
  if( rc!=TDE_OK ) return rc;
  memset(pKdf, 0, sizeof(*pKdf));
  pKdf->t = WALLET_KDF_T_DEFAULT;
  pKdf->m = WALLET_KDF_M_DEFAULT;
  pKdf->p = WALLET_KDF_P_DEFAULT;
  rc = walletConfigU32(cfg, "wallet_kdf_t", WALLET_KDF_T_MIN, WALLET_KDF_T_MAX, &pKdf->t);
  if( rc!=TDE_OK ) return rc;
  return walletConfigU32(cfg, "wallet_kdf_m_kib", WALLET_KDF_M_MIN, WALLET_KDF_M_MAX, &pKdf->m);
}

/* aW = Argon2id(password, salt; t, m, p).  aW is caller's secure memory. */
static int walletArgon2(const char *zPath, const char *zPassword, const WalletKdf *pKdf,
                        uint8_t *aW){
  int arc = argon2id_hash_raw(pKdf->t, pKdf->m, pKdf->p, zPassword, strlen(zPassword),
                              pKdf->aSalt, WALLET_SALT, aW, WALLET_KEY);
  if( arc==ARGON2_OK ) return TDE_OK;
  tdeWipe(aW, WALLET_KEY);
  if( arc==ARGON2_MEMORY_ALLOCATION_ERROR ){
    return tdeErr(TDE_NOMEM, "wallet %s: out of memory deriving the wallet key "
                  "(Argon2id m=%u KiB)", zPath, (unsigned)pKdf->m);
  }
  return tdeErr(TDE_CRYPTO, "wallet %s: Argon2id failed: %s", zPath, argon2_error_message(arc));
}

/* Key check value and payload key from the wallet key.  aEnc, when not
** NULL, is secure memory of WALLET_KEY bytes. */
static int walletCheckValue(const uint8_t *aW, uint8_t aCheck[WALLET_CHECK]){
  return tdeHkdf(aW, WALLET_KEY, 0, 0, (const uint8_t *)zInfoCheck, sizeof(zInfoCheck)-1,
                 aCheck, WALLET_CHECK);
}
static int walletPayloadKey(const uint8_t *aW, uint8_t *aEnc){
  return tdeHkdf(aW, WALLET_KEY, 0, 0, (const uint8_t *)zInfoPayload, sizeof(zInfoPayload)-1,
                 aEnc, WALLET_KEY);
}

static int walletNewId(char *zId, size_t nId){
  static const char hex[] = "0123456789abcdef";
  uint8_t a[16];
  int i, rc;
  if( nId<WALLET_ID_LEN+1 ) return tdeErr(TDE_RANGE, "wallet: key id buffer too small");
  rc = tdeRandom(a, sizeof(a));
  if( rc!=TDE_OK ) return tdeErr(rc, "wallet: random number generator failed");
  memcpy(zId, WALLET_ID_PREFIX, 7);
  for(i=0; i<16; i++){
    zId[7+2*i] = hex[a[i]>>4];
    zId[8+2*i] = hex[a[i]&15];
  }
  zId[WALLET_ID_LEN] = 0;
  return TDE_OK;
}


/* One audit line for a wallet operation (tdeAuditKeystoreOp). */
static void walletAudit(const TdeConfig *pCfg, const char *zOp, const char *zKeyId,
                        int rc, const char *zDetail){
  tdeAuditKeystoreOp(pCfg, "wallet", zOp, zKeyId, rc, zDetail);
}

/* ---- reading -------------------------------------------------------------- */

/*
** Read the whole wallet file into secure memory (*paFile, *pnFile; free
** with tdeSecureFree(*paFile, *pnFile)).  Missing file: TDE_NOKEYSTORE.
** A file whose length changes while it is read is refused (writers always
** rename a complete file into place, so this means someone wrote in place).
*/
static int walletReadFile(const char *zPath, uint8_t **paFile, size_t *pnFile,
                          struct stat *pSt){
  uint8_t *a = 0;
  uint8_t probe = 0;          /* one byte past the end: may be key material */
  size_t n = 0, nAlloc = 0;
  int fd;
  int rc = TDE_OK;

  *paFile = 0;
  *pnFile = 0;
  fd = open(zPath, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if( fd<0 ){
    if( errno==ENOENT || errno==ENOTDIR ){
      return tdeErr(TDE_NOKEYSTORE, "wallet %s: not found", zPath);
    }
    return tdeErr(TDE_NOKEYSTORE, "wallet %s: cannot open: %s", zPath, strerror(errno));
  }
  if( fstat(fd, pSt)!=0 ){
    rc = tdeErr(TDE_IO, "wallet %s: cannot stat: %s", zPath, strerror(errno));
    goto read_out;
  }
  if( !S_ISREG(pSt->st_mode) ){
    rc = tdeErr(TDE_FORMAT, "wallet %s: not a regular file", zPath);
    goto read_out;
  }
  /* An auto-login wallet readable by others gives them every master key;
  ** a password wallet gives them an offline guessing target. */
  rc = tdeModeCheck(TDE_NOKEYSTORE, "wallet", zPath, pSt, 077, 0);
  if( rc!=TDE_OK ) goto read_out;
  if( pSt->st_size>WALLET_FILE_MAX ){
    rc = tdeErr(TDE_FORMAT, "wallet %s: too large to be a wallet (%lld bytes)",
                zPath, (long long)pSt->st_size);
    goto read_out;
  }
  nAlloc = (size_t)pSt->st_size;
  a = tdeSecureAlloc(nAlloc);
  if( a==0 ){ rc = tdeErr(TDE_NOMEM, "wallet %s: out of memory", zPath); goto read_out; }
  for(;;){
    ssize_t k = n<nAlloc ? read(fd, a+n, nAlloc-n) : read(fd, &probe, 1);
    if( k<0 ){
      if( errno==EINTR ) continue;
      rc = tdeErr(TDE_IO, "wallet %s: read failed: %s", zPath, strerror(errno));
      goto read_out;
    }
    if( k==0 ) break;
    if( n==nAlloc ){
      rc = tdeErr(TDE_IO, "wallet %s: file grew while being read", zPath);
      goto read_out;
    }
    n += (size_t)k;
  }
  if( n!=nAlloc ){
    rc = tdeErr(TDE_IO, "wallet %s: file shrank while being read", zPath);
    goto read_out;
  }
  *paFile = a;
  *pnFile = nAlloc;
  a = 0;

read_out:
  close(fd);
  tdeWipe(&probe, sizeof(probe));
  tdeSecureFree(a, nAlloc);
  return rc;
}

/* Validate the fixed header of a file image and decode it. */
static int walletParseHeader(const char *zPath, const uint8_t *a, size_t n, WalletHdr *pHdr){
  memset(pHdr, 0, sizeof(*pHdr));
  if( n<WALLET_MAGIC_LEN || memcmp(a, WALLET_MAGIC, WALLET_MAGIC_LEN)!=0 ){
    return tdeErr(TDE_FORMAT, "wallet %s: not an sqlite-tde wallet (bad magic)", zPath);
  }
  if( n<WALLET_OVERHEAD ){
    return tdeErr(TDE_FORMAT, "wallet %s: truncated (%zu bytes)", zPath, n);
  }
  if( tdeGet16(a+WALLET_OFS_VERSION)!=WALLET_VERSION ){
    return tdeErr(TDE_FORMAT, "wallet %s: unsupported wallet format version %u",
                  zPath, (unsigned)tdeGet16(a+WALLET_OFS_VERSION));
  }
  pHdr->kind = a[WALLET_OFS_KIND];
  if( pHdr->kind!=WALLET_KIND_PASSWORD && pHdr->kind!=WALLET_KIND_AUTOLOGIN
   && pHdr->kind!=WALLET_KIND_TPM ){
    return tdeErr(TDE_FORMAT, "wallet %s: unknown wallet kind %d", zPath, pHdr->kind);
  }
  if( a[WALLET_OFS_RESERVED]!=0 ){
    return tdeErr(TDE_FORMAT, "wallet %s: corrupted header (reserved byte set)", zPath);
  }
  pHdr->nCt = tdeGet32(a+WALLET_OFS_CTLEN);
  if( pHdr->kind==WALLET_KIND_TPM ){
    int i, bBad = a[WALLET_OFS_SEAL]!=1 || a[WALLET_OFS_PCRBANK]>1;
    pHdr->pcrMask = tdeGet32(a+WALLET_OFS_PCRMASK);
    pHdr->parent = tdeGet32(a+WALLET_OFS_PARENT);
    pHdr->nSealed = tdeGet16(a+WALLET_OFS_SEALLEN);
    for(i=18; i<20; i++) bBad |= a[i]!=0;
    for(i=30; i<WALLET_OFS_CHECK; i++) bBad |= a[i]!=0;
    if( bBad || (a[WALLET_OFS_PCRBANK]==0)!=(pHdr->pcrMask==0) || pHdr->pcrMask>>24
     || (pHdr->parent && (pHdr->parent>>24)!=0x81)
     || pHdr->nSealed==0 || pHdr->nSealed>TDE_TPM_SEALED_MAX ){
      return tdeErr(TDE_FORMAT, "wallet %s: corrupted header (TPM sealing fields)", zPath);
    }
  }
  if( pHdr->nCt<4 || pHdr->nCt>WALLET_PAYLOAD_MAX
   || n!=(size_t)WALLET_OVERHEAD + pHdr->nCt + pHdr->nSealed ){
    return tdeErr(TDE_FORMAT, "wallet %s: truncated or corrupted (%zu bytes, header "
                  "says %zu)", zPath, n, (size_t)WALLET_OVERHEAD + pHdr->nCt + pHdr->nSealed);
  }
  if( pHdr->kind==WALLET_KIND_PASSWORD ){
    WalletKdf *pK = &pHdr->kdf;
    if( a[WALLET_OFS_KDF_ID]!=WALLET_KDF_ARGON2ID
     || a[WALLET_OFS_KDF_ID+1] || a[WALLET_OFS_KDF_ID+2] || a[WALLET_OFS_KDF_ID+3] ){
      return tdeErr(TDE_FORMAT, "wallet %s: unknown key derivation %u",
                    zPath, (unsigned)a[WALLET_OFS_KDF_ID]);
    }
    pK->t = tdeGet32(a+WALLET_OFS_KDF_T);
    pK->m = tdeGet32(a+WALLET_OFS_KDF_M);
    pK->p = tdeGet32(a+WALLET_OFS_KDF_P);
    memcpy(pK->aSalt, a+WALLET_OFS_SALT, WALLET_SALT);
    if( pK->t<WALLET_KDF_T_MIN || pK->t>WALLET_KDF_T_MAX
     || pK->m<WALLET_KDF_M_MIN || pK->m>WALLET_KDF_M_MAX
     || pK->p<WALLET_KDF_P_MIN || pK->p>WALLET_KDF_P_MAX ){
      return tdeErr(TDE_FORMAT, "wallet %s: corrupted header (Argon2id parameters "
                    "t=%u m=%u p=%u out of range)", zPath,
                    (unsigned)pK->t, (unsigned)pK->m, (unsigned)pK->p);
    }
  }
  return TDE_OK;
}

/* Is the file's key check value the one of aW?  (constant time) */
static int walletCheckMatches(const uint8_t *a, const uint8_t *aW, int *pbMatch){
  uint8_t aCheck[WALLET_CHECK];
  int rc = walletCheckValue(aW, aCheck);
  *pbMatch = rc==TDE_OK && tdeCtEqual(aCheck, a+WALLET_OFS_CHECK, WALLET_CHECK);
  tdeWipe(aCheck, sizeof(aCheck));
  if( rc!=TDE_OK ) return tdeErr(rc, "wallet: key derivation failed");
  return TDE_OK;
}

static int walletCorrupt(const char *zPath){
  return tdeErr(TDE_FORMAT, "wallet %s: corrupted key list", zPath);
}

/*
** Decrypt and parse the payload of a validated image with wallet key aW.
** On success *paKey / *pnKey is a new secure array.  Every failure is
** TDE_FORMAT naming the path: by now the key check value matched, so a
** tag mismatch means the file is damaged, not that the password is wrong.
*/
static int walletDecrypt(const char *zPath, const uint8_t *a, const WalletHdr *pHdr,
                         const uint8_t *aW, WalletKey **paKey, int *pnKey){
  uint8_t *aEnc = 0;          /* payload key, secure */
  uint8_t *aPt = 0;           /* plaintext payload, secure */
  WalletKey *aKey = 0;
  uint32_t nKey = 0, i;
  size_t nPt = pHdr->nCt, iOfs;
  const uint8_t *aCt = a + WALLET_HDR + WALLET_IV;
  int rc;

  *paKey = 0;
  *pnKey = 0;
  aEnc = tdeSecureAlloc(WALLET_KEY);
  aPt = tdeSecureAlloc(nPt);
  if( aEnc==0 || aPt==0 ){ rc = tdeErr(TDE_NOMEM, "wallet %s: out of memory", zPath); goto dec_out; }
  rc = walletPayloadKey(aW, aEnc);
  if( rc!=TDE_OK ){ rc = tdeErr(rc, "wallet %s: key derivation failed", zPath); goto dec_out; }
  rc = tdeGcmOpen(aEnc, a+WALLET_HDR, WALLET_IV, a, WALLET_HDR,
                  aCt, nPt, aCt+nPt, aPt);
  if( rc==TDE_AUTH ){
    rc = tdeErr(TDE_FORMAT, "wallet %s: corrupted (payload does not authenticate)", zPath);
    goto dec_out;
  }
  if( rc!=TDE_OK ){ rc = tdeErr(rc, "wallet %s: decryption failed", zPath); goto dec_out; }

  nKey = tdeGet32(aPt);
  if( nKey>WALLET_MAX_KEYS ){
    rc = tdeErr(TDE_FORMAT, "wallet %s: corrupted (%u keys)", zPath, (unsigned)nKey);
    goto dec_out;
  }
  if( nKey>0 ){
    aKey = tdeSecureAlloc((size_t)nKey * sizeof(WalletKey));
    if( aKey==0 ){ rc = tdeErr(TDE_NOMEM, "wallet %s: out of memory", zPath); goto dec_out; }
  }
  iOfs = 4;
  for(i=0; i<nKey; i++){
    WalletKey *pK = &aKey[i];
    size_t nId, j;
    uint64_t created;
    if( iOfs+1>nPt ){ rc = walletCorrupt(zPath); goto dec_out; }
    nId = aPt[iOfs++];
    if( nId==0 || nId>TDE_KEYID_MAX || iOfs+nId+8+1+WALLET_KEY>nPt ){
      rc = walletCorrupt(zPath);
      goto dec_out;
    }
    for(j=0; j<nId; j++){
      if( aPt[iOfs+j]<0x21 || aPt[iOfs+j]>0x7e ){ rc = walletCorrupt(zPath); goto dec_out; }
    }
    memcpy(pK->zId, aPt+iOfs, nId);
    pK->zId[nId] = 0;
    iOfs += nId;
    created = tdeGet64(aPt+iOfs);
    if( created>(uint64_t)INT64_MAX ){ rc = walletCorrupt(zPath); goto dec_out; }
    pK->created = (int64_t)created;
    iOfs += 8;
    if( aPt[iOfs]>1 ){ rc = walletCorrupt(zPath); goto dec_out; }
    pK->bRetired = aPt[iOfs];
    iOfs += 1;
    memcpy(pK->aKey, aPt+iOfs, WALLET_KEY);
    iOfs += WALLET_KEY;
    for(j=0; j<i; j++){
      if( strcmp(aKey[j].zId, pK->zId)==0 ){ rc = walletCorrupt(zPath); goto dec_out; }
    }
  }
  if( iOfs!=nPt ){ rc = walletCorrupt(zPath); goto dec_out; }
  *paKey = aKey;
  *pnKey = (int)nKey;
  aKey = 0;
  rc = TDE_OK;

dec_out:
  walletKeysFree(aKey, (int)nKey);
  tdeSecureFree(aPt, nPt);
  tdeSecureFree(aEnc, WALLET_KEY);
  return rc;
}

/* ---- writing -------------------------------------------------------------- */

/*
** Build a complete file image in secure memory (*paFile / *pnFile; free
** with tdeSecureFree).  A fresh random IV every time.
*/
static int walletEncode(int kind, const WalletKdf *pKdf, const uint8_t *aW,
                        const WalletKey *aKey, int nKey, const WalletSealed *pSealed,
                        uint8_t **paFile, size_t *pnFile){
  uint8_t *aEnc = 0, *aPt = 0, *aFile = 0;
  size_t nPt = 4, nFile = 0, iOfs;
  int i, rc;

  *paFile = 0;
  *pnFile = 0;
  if( nKey<0 || nKey>WALLET_MAX_KEYS ){
    return tdeErr(TDE_RANGE, "wallet: at most %d master keys", WALLET_MAX_KEYS);
  }
  for(i=0; i<nKey; i++) nPt += 1 + strlen(aKey[i].zId) + 8 + 1 + WALLET_KEY;
  nFile = WALLET_OVERHEAD + nPt;
  if( kind==WALLET_KIND_TPM ){
    if( pSealed==0 || pSealed->nBlob==0 || pSealed->nBlob>TDE_TPM_SEALED_MAX ){
      return tdeErr(TDE_MISUSE, "wallet: no sealed wallet key to write");
    }
    nFile += pSealed->nBlob;
  }
  aEnc = tdeSecureAlloc(WALLET_KEY);
  aPt = tdeSecureAlloc(nPt);
  aFile = tdeSecureAlloc(nFile);
  if( aEnc==0 || aPt==0 || aFile==0 ){ rc = tdeErr(TDE_NOMEM, "wallet: out of memory"); goto enc_out; }

  tdePut32(aPt, (uint32_t)nKey);
  iOfs = 4;
  for(i=0; i<nKey; i++){
    size_t nId = strlen(aKey[i].zId);
    aPt[iOfs++] = (uint8_t)nId;
    memcpy(aPt+iOfs, aKey[i].zId, nId);
    iOfs += nId;
    tdePut64(aPt+iOfs, (uint64_t)aKey[i].created);
    iOfs += 8;
    aPt[iOfs++] = aKey[i].bRetired ? 1 : 0;
    memcpy(aPt+iOfs, aKey[i].aKey, WALLET_KEY);
    iOfs += WALLET_KEY;
  }

  memcpy(aFile, WALLET_MAGIC, WALLET_MAGIC_LEN);
  tdePut16(aFile+WALLET_OFS_VERSION, WALLET_VERSION);
  aFile[WALLET_OFS_KIND] = (uint8_t)kind;
  aFile[WALLET_OFS_RESERVED] = 0;
  tdePut32(aFile+WALLET_OFS_CTLEN, (uint32_t)nPt);
  if( kind==WALLET_KIND_PASSWORD ){
    aFile[WALLET_OFS_KDF_ID] = WALLET_KDF_ARGON2ID;
    tdePut32(aFile+WALLET_OFS_KDF_T, pKdf->t);
    tdePut32(aFile+WALLET_OFS_KDF_M, pKdf->m);
    tdePut32(aFile+WALLET_OFS_KDF_P, pKdf->p);
    memcpy(aFile+WALLET_OFS_SALT, pKdf->aSalt, WALLET_SALT);
  }else if( kind==WALLET_KIND_TPM ){
    /* The file holds only the sealed object, never the wallet key. */
    aFile[WALLET_OFS_SEAL] = 1;
    aFile[WALLET_OFS_PCRBANK] = pSealed->tpm.pcrMask ? 1 : 0;
    tdePut32(aFile+WALLET_OFS_PCRMASK, pSealed->tpm.pcrMask);
    tdePut32(aFile+WALLET_OFS_PARENT, pSealed->tpm.parent);
    tdePut16(aFile+WALLET_OFS_SEALLEN, (uint16_t)pSealed->nBlob);
    memcpy(aFile+WALLET_OVERHEAD+nPt, pSealed->aBlob, pSealed->nBlob);
  }else{
    memcpy(aFile+WALLET_OFS_KEYSECT, aW, WALLET_KEY);
  }
  rc = walletCheckValue(aW, aFile+WALLET_OFS_CHECK);
  if( rc==TDE_OK ) rc = walletPayloadKey(aW, aEnc);
  if( rc!=TDE_OK ){ rc = tdeErr(rc, "wallet: key derivation failed"); goto enc_out; }
  rc = tdeRandom(aFile+WALLET_HDR, WALLET_IV);
  if( rc!=TDE_OK ){ rc = tdeErr(rc, "wallet: random number generator failed"); goto enc_out; }
  rc = tdeGcmSeal(aEnc, aFile+WALLET_HDR, WALLET_IV, aFile, WALLET_HDR,
                  aPt, nPt, aFile+WALLET_HDR+WALLET_IV, aFile+WALLET_HDR+WALLET_IV+nPt);
  if( rc!=TDE_OK ){ rc = tdeErr(rc, "wallet: encryption failed"); goto enc_out; }
  *paFile = aFile;
  *pnFile = nFile;
  aFile = 0;

enc_out:
  tdeSecureFree(aFile, nFile);
  tdeSecureFree(aPt, nPt);
  tdeSecureFree(aEnc, WALLET_KEY);
  return rc;
}

/* Directory part of zPath ("." if none) into zDir[nDir]. */
static void walletDirOf(const char *zPath, char *zDir, size_t nDir){
  const char *zSlash = strrchr(zPath, '/');
  if( zSlash==0 ){
    snprintf(zDir, nDir, ".");
  }else if( zSlash==zPath ){
    snprintf(zDir, nDir, "/");
  }else{
    snprintf(zDir, nDir, "%.*s", (int)(zSlash-zPath), zPath);
  }
}

/*
** Write a file image to zPath: a new temporary file in the same directory
** (O_CREAT|O_EXCL, mode 0600), fsync, rename over zPath (bCreate: only if
** zPath does not exist, else TDE_EXISTS), fsync the directory.  *pbSwitched
** says whether zPath now holds the new image, even if a later step failed.
** The temporary file never outlives a failure.
*/
static int walletWriteFile(const char *zPath, const uint8_t *a, size_t n,
                           int bCreate, int *pbSwitched){
  static const char hex[] = "0123456789abcdef";
  char zTmp[PATH_MAX + 32];
  char zDir[PATH_MAX];
  int fd = -1, dfd = -1, bTmp = 0;
  size_t nDone = 0;
  int i, rc = TDE_OK;

  *pbSwitched = 0;
  for(i=0; i<16; i++){
    uint8_t r[8];
    char zSuffix[17];
    int j, k;
    rc = tdeRandom(r, sizeof(r));
    if( rc!=TDE_OK ){ rc = tdeErr(rc, "wallet: random number generator failed"); goto write_out; }
    for(j=0; j<8; j++){ zSuffix[2*j] = hex[r[j]>>4]; zSuffix[2*j+1] = hex[r[j]&15]; }
    zSuffix[16] = 0;
    k = snprintf(zTmp, sizeof(zTmp), "%s.tmp-%s", zPath, zSuffix);
    if( k<0 || (size_t)k>=sizeof(zTmp) ){
      rc = tdeErr(TDE_RANGE, "wallet %s: path too long", zPath);
      goto write_out;
    }
    fd = open(zTmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0600);
    if( fd>=0 || errno!=EEXIST ) break;
  }
  if( fd<0 ){
    rc = tdeErr(TDE_IO, "wallet %s: cannot create temporary file: %s", zPath, strerror(errno));
    goto write_out;
  }
  bTmp = 1;
  while( nDone<n ){
    ssize_t k = write(fd, a+nDone, n-nDone);
    if( k<0 ){
      if( errno==EINTR ) continue;
      rc = tdeErr(TDE_IO, "wallet %s: write failed: %s", zPath, strerror(errno));
      goto write_out;
    }
    nDone += (size_t)k;
  }
  if( fsync(fd)!=0 ){
    rc = tdeErr(TDE_IO, "wallet %s: fsync failed: %s", zPath, strerror(errno));
    goto write_out;
  }
  i = close(fd);
  fd = -1;
  if( i!=0 ){
    rc = tdeErr(TDE_IO, "wallet %s: close failed: %s", zPath, strerror(errno));
    goto write_out;
  }

  if( bCreate ){
    /* Atomic "rename unless the target exists"; hard link where the file
    ** system lacks RENAME_NOREPLACE.  Never a check-then-rename race. */
    if( renameat2(AT_FDCWD, zTmp, AT_FDCWD, zPath, RENAME_NOREPLACE)==0 ){
      bTmp = 0;
    }else if( errno==EINVAL || errno==ENOSYS || errno==ENOTSUP ){
      if( link(zTmp, zPath)!=0 ){
        rc = errno==EEXIST
           ? tdeErr(TDE_EXISTS, "wallet %s: already exists; refusing to overwrite", zPath)
           : tdeErr(TDE_IO, "wallet %s: cannot create: %s", zPath, strerror(errno));
        goto write_out;
      }
      /* zTmp is removed below; zPath is the new wallet. */
    }else{
      rc = errno==EEXIST
         ? tdeErr(TDE_EXISTS, "wallet %s: already exists; refusing to overwrite", zPath)
         : tdeErr(TDE_IO, "wallet %s: cannot create: %s", zPath, strerror(errno));
      goto write_out;
    }
  }else{
    if( rename(zTmp, zPath)!=0 ){
      rc = tdeErr(TDE_IO, "wallet %s: cannot replace: %s", zPath, strerror(errno));
      goto write_out;
    }
    bTmp = 0;
  }
  *pbSwitched = 1;

  walletDirOf(zPath, zDir, sizeof(zDir));
  dfd = open(zDir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if( dfd<0 || fsync(dfd)!=0 ){
    rc = tdeErr(TDE_IO, "wallet %s: cannot sync directory %s: %s",
                zPath, zDir, strerror(errno));
    goto write_out;
  }

write_out:
  if( fd>=0 ) close(fd);
  if( dfd>=0 ) close(dfd);
  if( bTmp ) unlink(zTmp);
  return rc;
}

/* ---- methods -------------------------------------------------------------- */

static int walletCreate(const TdeConfig *cfg, const char *zPassword,
                        char *zKeyId, size_t nKeyId);
static int walletOpen(const TdeConfig *cfg, const char *zPassword, TdeKeystore **pp);
static void walletClose(TdeKeystore *p);
static int walletDescribe(TdeKeystore *p, char *zLoc, size_t nLoc, int *pbAutoLogin);
static int walletCurrentKey(TdeKeystore *p, char *zKeyId, size_t nKeyId);
static int walletHasKey(TdeKeystore *p, const char *zKeyId);
static int walletNewKey(TdeKeystore *p, char *zKeyId, size_t nKeyId);
static int walletList(TdeKeystore *p, int (*xCb)(void *, const TdeKeyInfo *), void *pArg);
static int walletWrap(TdeKeystore *p, const char *zKeyId,
                      const uint8_t *aDek, size_t nDek,
                      const uint8_t *aAad, size_t nAad,
                      uint8_t *aOut, size_t nOut, size_t *pnOut, uint8_t *pMech);
static int walletUnwrap(TdeKeystore *p, const char *zKeyId, uint8_t mech,
                        const uint8_t *aIn, size_t nIn,
                        const uint8_t *aAad, size_t nAad,
                        uint8_t *aDek, size_t nDek);
static int walletRetire(TdeKeystore *p, const char *zKeyId);

static const char *const azWalletKeys[] = {
  "wallet", "wallet_kdf_t", "wallet_kdf_m_kib",
  "wallet_seal", "wallet_tpm_pcrs", "wallet_tpm_parent", "wallet_tpm_tcti", 0
};

/* The provider's own keys (keystore.h: xCheckConfig), and the TPM
** sealing values, which can be judged without a TPM. */
static int walletCheckConfig(const TdeConfig *cfg, const char *zName){
  TdeTpmSeal tpm;
  int bSeal = 0;
  int rc = tdeKeystoreCheckKeys(cfg, zName, azWalletKeys);
  if( rc==TDE_OK ) rc = tdeTpmConfig(cfg, &bSeal, &tpm);
  return rc;
}

const tde_keystore_methods tdeWalletMethods = {
  2,                              /* iVersion */
  (int)sizeof(tde_keystore_methods), /* szStruct */
  "wallet",                       /* zName */
  TDE_KS_WALLET,                  /* typeId */
  azWalletKeys,                   /* azKeys */
  walletCreate,                   /* xCreate */
  walletOpen,                     /* xOpen */
  walletClose,                    /* xClose */
  walletDescribe,                 /* xDescribe */
  walletCurrentKey,               /* xCurrentKey */
  walletHasKey,                   /* xHasKey */
  walletNewKey,                   /* xNewKey */
  walletList,                     /* xList */
  walletWrap,                     /* xWrap */
  walletUnwrap,                   /* xUnwrap */
  walletRetire,                   /* xRetire */
  walletCheckConfig,              /* xCheckConfig */
  0,                              /* xAnchorGet: none (docs/FORMAT.md "External anchor") */
  0,                              /* xAnchorSet */
};

/*
** Create a wallet with one active master key.  zPassword NULL makes an
** auto-login wallet.  The password is only read; the derived wallet key
** and the master key are wiped before returning.  Audited as
** keystore_create (its key_id is the first master key; no separate
** master_key_create line), success or failure.
*/
static int walletCreate(const TdeConfig *cfg, const char *zPassword,
                        char *zKeyId, size_t nKeyId){
  char zPath[PATH_MAX];
  WalletKdf kdf;
  WalletKey *pKey = 0;         /* secure */
  uint8_t *aW = 0;             /* secure */
  uint8_t *aFile = 0;
  size_t nFile = 0;
  WalletSealed *pSealed = 0;   /* kind 3 */
  TdeTpmSeal tpm;
  int kind = zPassword ? WALLET_KIND_PASSWORD : WALLET_KIND_AUTOLOGIN;
  int bSwitched = 0, bSeal = 0;
  int rc;
  struct stat st;

  zPath[0] = 0;
  if( zKeyId==0 || nKeyId<WALLET_ID_LEN+1 ){
    rc = tdeErr(TDE_RANGE, "wallet: key id buffer needs %d bytes", WALLET_ID_LEN+1);
    goto create_out;
  }
  zKeyId[0] = 0;
  rc = walletConfig(cfg, zPath, sizeof(zPath), &kdf);
  if( rc==TDE_OK ) rc = tdeTpmConfig(cfg, &bSeal, &tpm);
  if( rc!=TDE_OK ) goto create_out;
  if( bSeal && zPassword ){
    rc = tdeErr(TDE_MISUSE, "wallet %s: wallet_seal = tpm2 seals an auto-login wallet; "
                "create it without a password (--auto-login, no password source)", zPath);
    goto create_out;
  }
  if( bSeal ) kind = WALLET_KIND_TPM;
  if( lstat(zPath, &st)==0 ){
    rc = tdeErr(TDE_EXISTS, "wallet %s: already exists; refusing to overwrite", zPath);
    goto create_out;
  }
  if( zPassword && zPassword[0]==0 ){
    rc = tdeErr(TDE_BADPASSWORD, "wallet %s: the password must not be empty", zPath);
    goto create_out;
  }

  aW = tdeSecureAlloc(WALLET_KEY);
  pKey = tdeSecureAlloc(sizeof(WalletKey));
  if( aW==0 || pKey==0 ){ rc = tdeErr(TDE_NOMEM, "wallet %s: out of memory", zPath); goto create_out; }
  if( kind==WALLET_KIND_PASSWORD ){
    rc = tdeRandom(kdf.aSalt, WALLET_SALT);
    if( rc!=TDE_OK ){ rc = tdeErr(rc, "wallet: random number generator failed"); goto create_out; }
    rc = walletArgon2(zPath, zPassword, &kdf, aW);
  }else{
    rc = tdeRandom(aW, WALLET_KEY);
    if( rc!=TDE_OK ) rc = tdeErr(rc, "wallet: random number generator failed");
  }
  if( rc!=TDE_OK ) goto create_out;
  if( kind==WALLET_KIND_TPM ){
    pSealed = calloc(1, sizeof(*pSealed));
    if( pSealed==0 ){ rc = tdeErr(TDE_NOMEM, "wallet %s: out of memory", zPath); goto create_out; }
    pSealed->tpm = tpm;
    rc = tdeTpmSeal(&tpm, aW, WALLET_KEY, pSealed->aBlob, sizeof(pSealed->aBlob), &pSealed->nBlob);
    if( rc!=TDE_OK ) goto create_out;
  }

  rc = walletNewId(pKey->zId, sizeof(pKey->zId));
  if( rc!=TDE_OK ) goto create_out;
  rc = tdeRandom(pKey->aKey, WALLET_KEY);
  if( rc!=TDE_OK ){ rc = tdeErr(rc, "wallet: random number generator failed"); goto create_out; }
  pKey->created = (int64_t)time(0);
  pKey->bRetired = 0;

  rc = walletEncode(kind, &kdf, aW, pKey, 1, pSealed, &aFile, &nFile);
  if( rc!=TDE_OK ) goto create_out;
  rc = walletWriteFile(zPath, aFile, nFile, 1, &bSwitched);
  if( bSwitched ) memcpy(zKeyId, pKey->zId, WALLET_ID_LEN+1);
  if( rc==TDE_OK ){
    tdeLog(TDE_LOG_INFO, "wallet %s created (%s) with master key %s", zPath,
           kind==WALLET_KIND_PASSWORD ? "password" :
           kind==WALLET_KIND_TPM ? "auto-login, sealed by the TPM" : "auto-login", pKey->zId);
  }

create_out:
  if( cfg ){
    char zDetail[PATH_MAX + 32];
    snprintf(zDetail, sizeof(zDetail), "%s wallet %s",
             kind==WALLET_KIND_PASSWORD ? "password" :
             kind==WALLET_KIND_TPM ? "TPM-sealed auto-login" : "auto-login", zPath);
    walletAudit(cfg, "keystore_create", rc==TDE_OK ? zKeyId : 0, rc, zDetail);
  }
  tdeSecureFree(aFile, nFile);
  tdeSecureFree(pKey, sizeof(WalletKey));
  tdeSecureFree(aW, WALLET_KEY);
  free(pSealed);
  return rc;
}

/*
** Kind 3: unseal the wallet key of file image a into aW (secure) with this
** machine's TPM, the policy the file records and the TCTI the
** configuration names; *pSealed keeps the sealed object for rewrites.
*/
static int walletUnsealKey(const TdeConfig *cfg, const char *zPath, const uint8_t *a,
                           const WalletHdr *pHdr, WalletSealed *pSealed, uint8_t *aW){
  int bSeal = 0, rc;
  rc = tdeTpmConfig(cfg, &bSeal, &pSealed->tpm);
  if( rc!=TDE_OK ) return rc;
  pSealed->tpm.pcrMask = pHdr->pcrMask;     /* the policy it was sealed under */
  pSealed->tpm.parent = pHdr->parent;
  memcpy(pSealed->aBlob, a+WALLET_OVERHEAD+pHdr->nCt, pHdr->nSealed);
  pSealed->nBlob = pHdr->nSealed;
  rc = tdeTpmUnseal(&pSealed->tpm, pSealed->aBlob, pSealed->nBlob, aW, WALLET_KEY);
  if( rc!=TDE_OK ){
    char zWhy[768];
    snprintf(zWhy, sizeof(zWhy), "%s", tde_last_error());   /* tdeErr reuses its buffer */
    return tdeErr(rc, "wallet %s: %s", zPath, zWhy);
  }
  return TDE_OK;
}

static const char *walletKindName(int kind){
  return kind==WALLET_KIND_PASSWORD ? "a password" :
         kind==WALLET_KIND_AUTOLOGIN ? "an auto-login (unsealed)" : "a TPM-sealed auto-login";
}

/*
** The configuration pins the wallet's kind (docs/WALLET.md, "The
** configuration pins the wallet's kind"): with wallet_seal = tpm2 only a
** TPM-sealed wallet opens; with a password source in the configuration
** only a password wallet.  (A password the caller passes to a
** configuration without a source pins nothing: an auto-login wallet
** ignores it, as documented.)  Someone who can write the
** wallet's folder could otherwise put a wallet of their own there, and
** every database created meanwhile would be wrapped under their master
** key.  Converting a wallet (tde_wallet_seal) reads the file itself and
** is not subject to this.
*/
static int walletKindPinned(const TdeConfig *cfg, const char *zPath, int kind){
  TdeTpmSeal tpm;
  int bSeal = 0;
  int rc = tdeTpmConfig(cfg, &bSeal, &tpm);
  const char *zSrc;
  if( rc!=TDE_OK ) return rc;
  if( bSeal && kind!=WALLET_KIND_TPM ){
    return tdeErr(TDE_NOKEYSTORE, "wallet %s is %s wallet, but the configuration says "
                  "wallet_seal = tpm2: refusing it (a wallet of another kind in its place may "
                  "be someone else's; to seal a wallet you made, run sqlite-tde keystore seal)",
                  zPath, walletKindName(kind));
  }
  zSrc = tdeConfigGet(cfg, "password_file") ? "password_file"
       : tdeConfigGet(cfg, "password_env") ? "password_env"
       : tdeConfigGet(cfg, "password_fd") ? "password_fd" : 0;
  if( zSrc && kind!=WALLET_KIND_PASSWORD ){
    return tdeErr(TDE_NOKEYSTORE, "wallet %s is %s wallet, but the configuration expects "
                  "a password wallet (%s): refusing it (a wallet of another kind in its place "
                  "may be someone else's)", zPath, walletKindName(kind), zSrc);
  }
  return TDE_OK;
}

/*
** Open a wallet.  Never writes to the file.  A password wallet needs
** zPassword; an auto-login wallet ignores it.  The wallet key and master
** keys are kept in secure memory until xClose.
*/
static int walletOpen(const TdeConfig *cfg, const char *zPassword, TdeKeystore **pp){
  char zPath[PATH_MAX];
  WalletKdf kdfCfg;
  WalletHdr hdr;
  Wallet *w = 0;
  uint8_t *aFile = 0;
  size_t nFile = 0;
  int bMutex = 0, bMatch = 0;
  int rc;
  struct stat st;

  if( pp==0 ) return tdeErr(TDE_MISUSE, "wallet: no output pointer");
  *pp = 0;
  rc = walletConfig(cfg, zPath, sizeof(zPath), &kdfCfg);
  if( rc!=TDE_OK ) return rc;
  rc = walletReadFile(zPath, &aFile, &nFile, &st);
  if( rc!=TDE_OK ) goto open_out;
  rc = walletParseHeader(zPath, aFile, nFile, &hdr);
  if( rc!=TDE_OK ) goto open_out;
  rc = walletKindPinned(cfg, zPath, hdr.kind);
  if( rc!=TDE_OK ) goto open_out;
  if( hdr.kind==WALLET_KIND_PASSWORD && zPassword==0 ){
    rc = tdeErr(TDE_BADPASSWORD, "wallet %s needs a password (set password_file or "
                "password_env in the config, or pass one)", zPath);
    goto open_out;
  }

  w = calloc(1, sizeof(*w));
  if( w ) w->aW = tdeSecureAlloc(WALLET_KEY);
  if( w==0 || w->aW==0 ){ rc = tdeErr(TDE_NOMEM, "wallet %s: out of memory", zPath); goto open_out; }
  w->base.pMethods = &tdeWalletMethods;
  memcpy(w->zPath, zPath, strlen(zPath)+1);
  w->kind = hdr.kind;
  w->kdf = hdr.kdf;
  walletStamp(&st, &w->stamp);
  rc = tdeConfigCopyAudit(cfg, &w->pAudit);
  if( rc!=TDE_OK ) goto open_out;

  if( hdr.kind==WALLET_KIND_PASSWORD ){
    rc = walletArgon2(zPath, zPassword, &hdr.kdf, w->aW);
    if( rc!=TDE_OK ) goto open_out;
  }else if( hdr.kind==WALLET_KIND_TPM ){
    rc = walletUnsealKey(cfg, zPath, aFile, &hdr, &w->sealed, w->aW);
    if( rc!=TDE_OK ) goto open_out;
  }else{
    memcpy(w->aW, aFile+WALLET_OFS_KEYSECT, WALLET_KEY);
  }
  rc = walletCheckMatches(aFile, w->aW, &bMatch);
  if( rc!=TDE_OK ) goto open_out;
  if( !bMatch ){
    rc = hdr.kind==WALLET_KIND_PASSWORD
       ? tdeErr(TDE_BADPASSWORD, "wallet %s: password incorrect", zPath)
       : tdeErr(TDE_FORMAT, "wallet %s: corrupted (key check failed)", zPath);
    goto open_out;
  }
  rc = walletDecrypt(zPath, aFile, &hdr, w->aW, &w->aKey, &w->nKey);
  if( rc!=TDE_OK ) goto open_out;
  if( pthread_mutex_init(&w->mutex, 0)!=0 ){
    rc = tdeErr(TDE_NOMEM, "wallet %s: cannot create mutex", zPath);
    goto open_out;
  }
  bMutex = 1;
  *pp = &w->base;
  w = 0;

open_out:
  tdeSecureFree(aFile, nFile);
  if( w ){
    if( bMutex ) pthread_mutex_destroy(&w->mutex);
    walletKeysFree(w->aKey, w->nKey);
    tdeSecureFree(w->aW, WALLET_KEY);
    tdeConfigFree(w->pAudit);
    free(w);
  }
  return rc;
}

/*
** Seal (bSeal) an auto-login wallet's key with this machine's TPM, or turn
** a sealed wallet back into a plain auto-login wallet for a planned move
** to other hardware (needs the TPM).  Public: tde_wallet_seal.
**
** A new wallet key is drawn either way and the master keys are carried
** over unchanged (databases need no change).  Sealing is proven before
** the switch: the new sealed object is unsealed again and must give back
** the new key.  The new file replaces the old one atomically (temporary
** file, fsync, rename, directory fsync) under the wallet directory's
** lock, so a crash leaves the old or the new wallet.  Audited as
** keystore_seal / keystore_unseal.  Refused while this process has the
** keystore open (it would keep using the old file's state).
*/
int tde_wallet_seal(const char *zConfig, int bSeal){
  char zCfgPath[PATH_MAX], zPath[PATH_MAX], zDir[PATH_MAX];
  char zDetail[600];            /* tdeTpmDescribe */
  char zKeyId[TDE_KEYID_MAX + 1];
  TdeConfig *pCfg = 0;
  WalletKdf kdf;
  WalletHdr hdr;
  TdeTpmSeal tpm;
  WalletSealed *pOld = 0, *pNew = 0;
  WalletKey *aKey = 0;
  uint8_t *aFile = 0, *aOut = 0, *aW = 0, *aW2 = 0, *aCheck = 0;
  size_t nFile = 0, nOut = 0;
  int nKey = 0, bCfgSeal = 0, bMatch = 0, bSwitched = 0, fdDir = -1, i, rc;
  struct stat st;

  zDetail[0] = 0;
  zKeyId[0] = 0;
  zPath[0] = 0;
  rc = tdeConfigLocate(zConfig, zCfgPath, sizeof(zCfgPath));
  if( rc==TDE_OK ) rc = tdeConfigLoad(zCfgPath, &pCfg);
  if( rc!=TDE_OK ) return rc;
  if( strcmp(tdeConfigGet(pCfg, "keystore"), "wallet")!=0 ){
    rc = tdeErr(TDE_MISUSE, "%s: keystore seal/unseal applies to keystore = wallet", zCfgPath);
    goto seal_out;
  }
  if( tdeRegistryPeek(zCfgPath) ){
    rc = tdeErr(TDE_LOCKED, "%s: the keystore is open in this process; close it first", zCfgPath);
    goto seal_out;
  }
  rc = walletConfig(pCfg, zPath, sizeof(zPath), &kdf);
  if( rc==TDE_OK ) rc = tdeTpmConfig(pCfg, &bCfgSeal, &tpm);
  if( rc!=TDE_OK ) goto seal_out;
  if( bSeal && !bCfgSeal ){
    rc = tdeErr(TDE_MISUSE, "%s: set wallet_seal = tpm2 (and wallet_tpm_pcrs, "
                "wallet_tpm_tcti as needed) in the configuration before sealing", zCfgPath);
    goto seal_out;
  }
  pOld = calloc(1, sizeof(*pOld));
  pNew = calloc(1, sizeof(*pNew));
  aW = tdeSecureAlloc(WALLET_KEY);
  aW2 = tdeSecureAlloc(WALLET_KEY);
  aCheck = tdeSecureAlloc(WALLET_KEY);
  if( pOld==0 || pNew==0 || aW==0 || aW2==0 || aCheck==0 ){
    rc = tdeErr(TDE_NOMEM, "wallet %s: out of memory", zPath);
    goto seal_out;
  }

  /* Serialise with key rotation and retirement in other processes. */
  walletDirOf(zPath, zDir, sizeof(zDir));
  fdDir = open(zDir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if( fdDir<0 ){
    rc = tdeErr(TDE_IO, "wallet %s: cannot open directory %s: %s", zPath, zDir, strerror(errno));
    goto seal_out;
  }
  while( flock(fdDir, LOCK_EX)!=0 ){
    if( errno==EINTR ) continue;
    tdeLog(TDE_LOG_WARNING, "wallet %s: cannot lock directory %s (%s); converting without "
           "a cross-process lock", zPath, zDir, strerror(errno));
    break;
  }

  rc = walletReadFile(zPath, &aFile, &nFile, &st);
  if( rc==TDE_OK ) rc = walletParseHeader(zPath, aFile, nFile, &hdr);
  if( rc!=TDE_OK ) goto seal_out;
  if( hdr.kind==WALLET_KIND_PASSWORD ){
    rc = tdeErr(TDE_MISUSE, "wallet %s is a password wallet: its password protects it; "
                "sealing is for auto-login wallets", zPath);
    goto seal_out;
  }
  if( bSeal && hdr.kind==WALLET_KIND_TPM ){
    rc = tdeErr(TDE_MISUSE, "wallet %s is already sealed by the TPM", zPath);
    goto seal_out;
  }
  if( !bSeal && hdr.kind!=WALLET_KIND_TPM ){
    rc = tdeErr(TDE_MISUSE, "wallet %s is not sealed; nothing to unseal", zPath);
    goto seal_out;
  }
  if( hdr.kind==WALLET_KIND_TPM ){
    rc = walletUnsealKey(pCfg, zPath, aFile, &hdr, pOld, aW);
    if( rc!=TDE_OK ) goto seal_out;
  }else{
    memcpy(aW, aFile+WALLET_OFS_KEYSECT, WALLET_KEY);
  }
  rc = walletCheckMatches(aFile, aW, &bMatch);
  if( rc==TDE_OK && !bMatch ) rc = tdeErr(TDE_FORMAT, "wallet %s: corrupted (key check failed)", zPath);
  if( rc==TDE_OK ) rc = walletDecrypt(zPath, aFile, &hdr, aW, &aKey, &nKey);
  if( rc!=TDE_OK ) goto seal_out;
  for(i=nKey-1; i>=0; i--){
    if( !aKey[i].bRetired ){ memcpy(zKeyId, aKey[i].zId, strlen(aKey[i].zId)+1); break; }
  }

  rc = tdeRandom(aW2, WALLET_KEY);
  if( rc!=TDE_OK ){ rc = tdeErr(rc, "wallet: random number generator failed"); goto seal_out; }
  if( bSeal ){
    pNew->tpm = tpm;
    rc = tdeTpmSeal(&tpm, aW2, WALLET_KEY, pNew->aBlob, sizeof(pNew->aBlob), &pNew->nBlob);
    if( rc==TDE_OK ) rc = tdeTpmUnseal(&tpm, pNew->aBlob, pNew->nBlob, aCheck, WALLET_KEY);
    if( rc==TDE_OK && !tdeCtEqual(aCheck, aW2, WALLET_KEY) ){
      rc = tdeErr(TDE_CRYPTO, "wallet %s: the TPM unsealed another key than it sealed", zPath);
    }
    if( rc!=TDE_OK ) goto seal_out;
    tdeTpmDescribe(&tpm, zDetail, sizeof(zDetail));
  }else{
    tdeTpmDescribe(&pOld->tpm, zDetail, sizeof(zDetail));
  }
  rc = walletEncode(bSeal ? WALLET_KIND_TPM : WALLET_KIND_AUTOLOGIN, &kdf, aW2, aKey, nKey,
                    bSeal ? pNew : 0, &aOut, &nOut);
  if( rc==TDE_OK ) rc = walletWriteFile(zPath, aOut, nOut, 0, &bSwitched);
  if( rc==TDE_OK ){
    tdeLog(TDE_LOG_INFO, "wallet %s %s (%s)", zPath,
           bSeal ? "sealed" : "unsealed: its key is in the file again", zDetail);
  }

seal_out:
  if( pCfg && zPath[0] ){
    char zAudit[PATH_MAX + 700];
    snprintf(zAudit, sizeof(zAudit), "wallet %s%s%s", zPath, zDetail[0] ? ", " : "", zDetail);
    walletAudit(pCfg, bSeal ? "keystore_seal" : "keystore_unseal", zKeyId[0] ? zKeyId : 0,
                rc, zAudit);
  }
  if( fdDir>=0 ) close(fdDir);
  walletKeysFree(aKey, nKey);
  tdeSecureFree(aFile, nFile);
  tdeSecureFree(aOut, nOut);
  tdeSecureFree(aW, aW ? WALLET_KEY : 0);
  tdeSecureFree(aW2, aW2 ? WALLET_KEY : 0);
  tdeSecureFree(aCheck, aCheck ? WALLET_KEY : 0);
  free(pOld);
  free(pNew);
  tdeConfigFree(pCfg);
  return rc;
}

static void walletClose(TdeKeystore *p){
  Wallet *w = (Wallet *)p;
  if( w==0 ) return;
  pthread_mutex_destroy(&w->mutex);
  walletKeysFree(w->aKey, w->nKey);
  tdeSecureFree(w->aW, WALLET_KEY);
  tdeConfigFree(w->pAudit);
  tdeWipe(w, sizeof(*w));
  free(w);
}

/* Open the wallet's directory and take an exclusive flock on it, which
** serialises key changes (rotation, retirement) across processes; *pFd
** gets the descriptor (closing it releases the lock).  zDoing names the
** operation for the warning when the file system refuses directory locks:
** it then proceeds, only concurrent changes by two processes being
** unprotected. */
static int walletLockDir(Wallet *w, const char *zDoing, int *pFd){
  char zDir[PATH_MAX];
  int fd;
  walletDirOf(w->zPath, zDir, sizeof(zDir));
  *pFd = fd = open(zDir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if( fd<0 ){
    return tdeErr(TDE_IO, "wallet %s: cannot open directory %s: %s", w->zPath, zDir, strerror(errno));
  }
  while( flock(fd, LOCK_EX)!=0 ){
    if( errno==EINTR ) continue;
    tdeLog(TDE_LOG_WARNING, "wallet %s: cannot lock directory %s (%s); "
           "%s without a cross-process lock", w->zPath, zDir, strerror(errno), zDoing);
    break;
  }
  return TDE_OK;
}

/*
** Re-read the wallet file into w (caller holds w->mutex).  The file must
** still be the same wallet (same kind, KDF parameters and wallet key);
** its keys are merged with the ones in memory so none is ever lost.
*/
static int walletReload(Wallet *w){
  uint8_t *aFile = 0;
  size_t nFile = 0;
  WalletHdr hdr;
  WalletKey *aDisk = 0, *aNew = 0;
  int nDisk = 0, nNew = 0, nExtra = 0;
  int i, j, bMatch = 0;
  int rc;
  struct stat st;

  rc = walletReadFile(w->zPath, &aFile, &nFile, &st);
  if( rc!=TDE_OK ) goto reload_out;
  rc = walletParseHeader(w->zPath, aFile, nFile, &hdr);
  if( rc!=TDE_OK ) goto reload_out;
  if( hdr.kind==w->kind && hdr.kind==WALLET_KIND_PASSWORD ){
    bMatch = hdr.kdf.t==w->kdf.t && hdr.kdf.m==w->kdf.m && hdr.kdf.p==w->kdf.p
          && memcmp(hdr.kdf.aSalt, w->kdf.aSalt, WALLET_SALT)==0;
  }else if( hdr.kind==w->kind && hdr.kind==WALLET_KIND_TPM ){
    bMatch = hdr.nSealed==w->sealed.nBlob
          && memcmp(aFile+WALLET_OVERHEAD+hdr.nCt, w->sealed.aBlob, hdr.nSealed)==0;
  }else if( hdr.kind==w->kind ){
    bMatch = tdeCtEqual(aFile+WALLET_OFS_KEYSECT, w->aW, WALLET_KEY);
  }
  if( bMatch ){
    rc = walletCheckMatches(aFile, w->aW, &bMatch);
    if( rc!=TDE_OK ) goto reload_out;
  }
  if( !bMatch ){
    rc = tdeErr(TDE_ERROR, "wallet %s was replaced by a different wallet since it "
                "was opened; close and reopen it", w->zPath);
    goto reload_out;
  }
  rc = walletDecrypt(w->zPath, aFile, &hdr, w->aW, &aDisk, &nDisk);
  if( rc!=TDE_OK ) goto reload_out;

  for(i=0; i<w->nKey; i++){
    for(j=0; j<nDisk && strcmp(aDisk[j].zId, w->aKey[i].zId)!=0; j++){}
    if( j==nDisk ) nExtra++;
  }
  nNew = nDisk + nExtra;
  if( nNew>WALLET_MAX_KEYS ){
    rc = tdeErr(TDE_RANGE, "wallet %s: at most %d master keys", w->zPath, WALLET_MAX_KEYS);
    goto reload_out;
  }
  if( nNew>0 ){
    aNew = tdeSecureAlloc((size_t)nNew * sizeof(WalletKey));
    if( aNew==0 ){ rc = tdeErr(TDE_NOMEM, "wallet %s: out of memory", w->zPath); goto reload_out; }
    if( nDisk ) memcpy(aNew, aDisk, (size_t)nDisk * sizeof(WalletKey));
  }
  nNew = nDisk;
  for(i=0; i<w->nKey; i++){
    for(j=0; j<nDisk && strcmp(aDisk[j].zId, w->aKey[i].zId)!=0; j++){}
    if( j==nDisk ){
      aNew[nNew++] = w->aKey[i];
    }else if( w->aKey[i].bRetired ){
      aNew[j].bRetired = 1;    /* retirement is one-way: a restored older
                               ** file does not bring a retired key back */
    }
  }
  walletKeysFree(w->aKey, w->nKey);
  w->aKey = aNew;
  w->nKey = nNew;
  aNew = 0;
  walletStamp(&st, &w->stamp);

reload_out:
  walletKeysFree(aNew, nNew);
  walletKeysFree(aDisk, nDisk);
  tdeSecureFree(aFile, nFile);
  return rc;
}

/* Find a key (caller holds w->mutex).  On a miss, re-read the wallet if
** another process rewrote it since, and look again. */
static WalletKey *walletFind(Wallet *w, const char *zKeyId){
  struct stat st;
  WalletStamp now;
  int i;
  for(i=0; i<w->nKey; i++){
    if( strcmp(w->aKey[i].zId, zKeyId)==0 ) return &w->aKey[i];
  }
  if( stat(w->zPath, &st)!=0 ) return 0;
  walletStamp(&st, &now);
  if( walletStampEqual(&now, &w->stamp) ) return 0;
  if( walletReload(w)!=TDE_OK ){
    tdeLog(TDE_LOG_WARNING, "%s", tde_last_error());
    return 0;
  }
  for(i=0; i<w->nKey; i++){
    if( strcmp(w->aKey[i].zId, zKeyId)==0 ) return &w->aKey[i];
  }
  return 0;
}

/* Re-read the wallet if another process rewrote it since (caller holds
** w->mutex), so new keys and retirements made elsewhere are seen.  A file
** that cannot be re-read leaves memory as it was, with a warning: the keys
** held are still good. */
static void walletRefresh(Wallet *w){
  struct stat st;
  WalletStamp now;
  if( stat(w->zPath, &st)!=0 ) return;
  walletStamp(&st, &now);
  if( walletStampEqual(&now, &w->stamp) ) return;
  if( walletReload(w)!=TDE_OK ){
    tdeLog(TDE_LOG_WARNING, "%s", tde_last_error());
    tdeErrClear();
  }
}

static int walletDescribe(TdeKeystore *p, char *zLoc, size_t nLoc, int *pbAutoLogin){
  Wallet *w = (Wallet *)p;
  size_t n;
  if( w==0 ) return tdeErr(TDE_MISUSE, "wallet: no handle");
  pthread_mutex_lock(&w->mutex);
  if( pbAutoLogin ) *pbAutoLogin = w->kind==WALLET_KIND_AUTOLOGIN || w->kind==WALLET_KIND_TPM;
  n = strlen(w->zPath);
  if( zLoc && nLoc>n ) memcpy(zLoc, w->zPath, n+1);
  if( zLoc && nLoc>n && w->kind==WALLET_KIND_TPM ){
    char zTpm[512];
    tdeTpmDescribe(&w->sealed.tpm, zTpm, sizeof(zTpm));
    snprintf(zLoc+n, nLoc-n, " (sealed: %s)", zTpm);
  }
  pthread_mutex_unlock(&w->mutex);
  if( zLoc && nLoc<=n ){
    if( nLoc ) zLoc[0] = 0;
    return tdeErr(TDE_RANGE, "wallet: location buffer too small (%zu bytes needed)", n+1);
  }
  return TDE_OK;
}

/* Current key = the last active key in creation order (the newest). */
static int walletCurrentKey(TdeKeystore *p, char *zKeyId, size_t nKeyId){
  Wallet *w = (Wallet *)p;
  int i, rc = TDE_OK;
  if( w==0 || zKeyId==0 || nKeyId==0 ) return tdeErr(TDE_MISUSE, "wallet: bad arguments");
  zKeyId[0] = 0;
  pthread_mutex_lock(&w->mutex);
  walletRefresh(w);
  for(i=w->nKey-1; i>=0 && w->aKey[i].bRetired; i--){}
  if( i<0 ){
    rc = tdeErr(TDE_NOKEY, "wallet %s holds no active master key", w->zPath);
  }else if( strlen(w->aKey[i].zId)>=nKeyId ){
    rc = tdeErr(TDE_RANGE, "wallet: key id buffer too small");
  }else{
    memcpy(zKeyId, w->aKey[i].zId, strlen(w->aKey[i].zId)+1);
  }
  pthread_mutex_unlock(&w->mutex);
  return rc;
}

static int walletHasKey(TdeKeystore *p, const char *zKeyId){
  Wallet *w = (Wallet *)p;
  int bHas;
  if( w==0 || zKeyId==0 ) return 0;
  pthread_mutex_lock(&w->mutex);
  bHas = walletFind(w, zKeyId)!=0;
  pthread_mutex_unlock(&w->mutex);
  return bHas;
}

/*
** Add a new active master key and rewrite the wallet (temp file, fsync,
** rename, fsync directory) under an exclusive flock() on the directory,
** after merging whatever another process wrote since.  If the rename
** happened, memory follows the file even when the directory sync failed.
*/
static int walletNewKey(TdeKeystore *p, char *zKeyId, size_t nKeyId){
  Wallet *w = (Wallet *)p;
  WalletKey *aNew = 0;
  int nNew = 0;
  uint8_t *aFile = 0;
  size_t nFile = 0;
  int dfd = -1, bSwitched = 0;
  int rc;
  char zNewId[TDE_KEYID_MAX + 1];
  struct stat st;

  zNewId[0] = 0;
  if( w==0 ) return tdeErr(TDE_MISUSE, "wallet: no handle");
  if( zKeyId==0 || nKeyId<WALLET_ID_LEN+1 ){
    return tdeErr(TDE_RANGE, "wallet: key id buffer needs %d bytes", WALLET_ID_LEN+1);
  }
  zKeyId[0] = 0;
  pthread_mutex_lock(&w->mutex);

  rc = walletLockDir(w, "rotating", &dfd);
  if( rc!=TDE_OK ) goto newkey_out;
  rc = walletReload(w);
  if( rc!=TDE_OK ) goto newkey_out;
  if( w->nKey>=WALLET_MAX_KEYS ){
    rc = tdeErr(TDE_RANGE, "wallet %s: at most %d master keys", w->zPath, WALLET_MAX_KEYS);
    goto newkey_out;
  }

  nNew = w->nKey + 1;
  aNew = tdeSecureAlloc((size_t)nNew * sizeof(WalletKey));
  if( aNew==0 ){ rc = tdeErr(TDE_NOMEM, "wallet %s: out of memory", w->zPath); goto newkey_out; }
  if( w->nKey ) memcpy(aNew, w->aKey, (size_t)w->nKey * sizeof(WalletKey));
  rc = walletNewId(aNew[nNew-1].zId, sizeof(aNew[nNew-1].zId));
  if( rc!=TDE_OK ) goto newkey_out;
  rc = tdeRandom(aNew[nNew-1].aKey, WALLET_KEY);
  if( rc!=TDE_OK ){ rc = tdeErr(rc, "wallet: random number generator failed"); goto newkey_out; }
  aNew[nNew-1].created = (int64_t)time(0);
  aNew[nNew-1].bRetired = 0;

  rc = walletEncode(w->kind, &w->kdf, w->aW, aNew, nNew, &w->sealed, &aFile, &nFile);
  if( rc!=TDE_OK ) goto newkey_out;
  rc = walletWriteFile(w->zPath, aFile, nFile, 0, &bSwitched);
  if( bSwitched ){
    walletKeysFree(w->aKey, w->nKey);
    w->aKey = aNew;
    w->nKey = nNew;
    aNew = 0;
    if( stat(w->zPath, &st)==0 ) walletStamp(&st, &w->stamp);
    memcpy(zNewId, w->aKey[nNew-1].zId, WALLET_ID_LEN+1);
    if( rc==TDE_OK ){
      memcpy(zKeyId, w->aKey[nNew-1].zId, WALLET_ID_LEN+1);
      tdeLog(TDE_LOG_INFO, "wallet %s: new master key %s", w->zPath, zKeyId);
    }
  }

newkey_out:
  if( dfd>=0 ) close(dfd);     /* releases the flock */
  pthread_mutex_unlock(&w->mutex);
  walletKeysFree(aNew, nNew);
  tdeSecureFree(aFile, nFile);
  /* A key renamed into place whose directory sync then failed exists:
  ** the failure line names it. */
  walletAudit(w->pAudit, "master_key_create", zNewId, rc, 0);
  return rc;
}

/*
** Retire master key zKeyId: it keeps unwrapping what it wrapped, but xWrap
** refuses it and it is never current again.  Retiring the current key is
** refused (TDE_MISUSE): make a new key first, rewrap, then retire.  The
** wallet is rewritten the way walletNewKey does it (directory flock,
** reload-and-merge, temporary file, fsync, rename).  Retiring a retired
** key changes nothing and succeeds.  Audited as master_key_retire.
*/
static int walletRetire(TdeKeystore *p, const char *zKeyId){
  Wallet *w = (Wallet *)p;
  WalletKey *aNew = 0;
  int nNew = 0;
  uint8_t *aFile = 0;
  size_t nFile = 0;
  int dfd = -1, bSwitched = 0;
  int i, iCur;
  int rc;
  const char *zDetail = 0;
  struct stat st;

  if( w==0 ) return tdeErr(TDE_MISUSE, "wallet: no handle");
  if( zKeyId==0 || zKeyId[0]==0 ){
    rc = tdeErr(TDE_MISUSE, "wallet: no master key id to retire");
    walletAudit(w->pAudit, "master_key_retire", 0, rc, 0);
    return rc;
  }
  pthread_mutex_lock(&w->mutex);

  rc = walletLockDir(w, "retiring", &dfd);
  if( rc!=TDE_OK ) goto retire_out;
  /* Only after the reload is "current" known: another process may have
  ** added a newer key, or retired this one, since we last looked. */
  rc = walletReload(w);
  if( rc!=TDE_OK ) goto retire_out;
  for(i=0; i<w->nKey && strcmp(w->aKey[i].zId, zKeyId)!=0; i++){}
  for(iCur=w->nKey-1; iCur>=0 && w->aKey[iCur].bRetired; iCur--){}
  if( i==w->nKey ){
    rc = tdeErr(TDE_NOKEY, "wallet %s: no master key '%s'", w->zPath, zKeyId);
    goto retire_out;
  }
  if( w->aKey[i].bRetired ){
    zDetail = "already retired";
    goto retire_out;
  }
  if( i==iCur ){
    rc = tdeErr(TDE_MISUSE, "wallet %s: master key '%s' is the current key and cannot "
                "be retired; create a new master key (rotate) first", w->zPath, zKeyId);
    goto retire_out;
  }

  nNew = w->nKey;
  aNew = tdeSecureAlloc((size_t)nNew * sizeof(WalletKey));
  if( aNew==0 ){ rc = tdeErr(TDE_NOMEM, "wallet %s: out of memory", w->zPath); goto retire_out; }
  memcpy(aNew, w->aKey, (size_t)nNew * sizeof(WalletKey));
  aNew[i].bRetired = 1;
  rc = walletEncode(w->kind, &w->kdf, w->aW, aNew, nNew, &w->sealed, &aFile, &nFile);
  if( rc!=TDE_OK ) goto retire_out;
  rc = walletWriteFile(w->zPath, aFile, nFile, 0, &bSwitched);
  if( bSwitched ){
    walletKeysFree(w->aKey, w->nKey);
    w->aKey = aNew;
    w->nKey = nNew;
    aNew = 0;
    if( stat(w->zPath, &st)==0 ) walletStamp(&st, &w->stamp);
    if( rc==TDE_OK ) tdeLog(TDE_LOG_INFO, "wallet %s: master key %s retired", w->zPath, zKeyId);
  }

retire_out:
  if( dfd>=0 ) close(dfd);     /* releases the flock */
  pthread_mutex_unlock(&w->mutex);
  walletKeysFree(aNew, nNew);
  tdeSecureFree(aFile, nFile);
  walletAudit(w->pAudit, "master_key_retire", zKeyId, rc, zDetail);
  return rc;
}

/* Callbacks run without the mutex held (on a copy of the non-secret key
** information), so they may call back into this keystore. */
static int walletList(TdeKeystore *p, int (*xCb)(void *, const TdeKeyInfo *), void *pArg){
  Wallet *w = (Wallet *)p;
  TdeKeyInfo *aInfo = 0;
  int nInfo, i;
  if( w==0 || xCb==0 ) return tdeErr(TDE_MISUSE, "wallet: bad arguments");
  pthread_mutex_lock(&w->mutex);
  walletRefresh(w);
  nInfo = w->nKey;
  if( nInfo>0 ){
    aInfo = calloc((size_t)nInfo, sizeof(TdeKeyInfo));
    if( aInfo ){
      for(i=0; i<nInfo; i++){
        memcpy(aInfo[i].zId, w->aKey[i].zId, sizeof(aInfo[i].zId));
        aInfo[i].created = w->aKey[i].created;
        aInfo[i].bRetired = w->aKey[i].bRetired;
      }
    }
  }
  pthread_mutex_unlock(&w->mutex);
  if( nInfo>0 && aInfo==0 ) return tdeErr(TDE_NOMEM, "wallet: out of memory");
  for(i=0; i<nInfo; i++){
    if( xCb(pArg, &aInfo[i]) ) break;
  }
  free(aInfo);
  return TDE_OK;
}

/* blob = iv(12) || AES-256-GCM(master key, iv, aad; dek) || tag(16). */
static int walletWrap(TdeKeystore *p, const char *zKeyId,
                      const uint8_t *aDek, size_t nDek,
                      const uint8_t *aAad, size_t nAad,
                      uint8_t *aOut, size_t nOut, size_t *pnOut, uint8_t *pMech){
  Wallet *w = (Wallet *)p;
  const WalletKey *pKey;
  size_t nBlob = WALLET_IV + nDek + WALLET_TAG;
  int rc;

  if( pnOut ) *pnOut = 0;
  if( w==0 || zKeyId==0 || aDek==0 || aOut==0 || pnOut==0 || pMech==0 || (nAad && aAad==0) ){
    return tdeErr(TDE_MISUSE, "wallet: bad arguments to wrap");
  }
  if( nDek==0 || nBlob>TDE_WRAP_MAX ){
    return tdeErr(TDE_RANGE, "wallet: cannot wrap a %zu-byte key", nDek);
  }
  if( nOut<nBlob ){
    return tdeErr(TDE_RANGE, "wallet: wrap buffer too small (%zu bytes needed)", nBlob);
  }
  pthread_mutex_lock(&w->mutex);
  walletRefresh(w);
  pKey = walletFind(w, zKeyId);
  if( pKey==0 ){
    rc = tdeErr(TDE_NOKEY, "wallet %s: no master key '%s'", w->zPath, zKeyId);
  }else if( pKey->bRetired ){
    rc = tdeErr(TDE_NOKEY, "wallet %s: master key '%s' is retired; wrap with the "
                "current key", w->zPath, zKeyId);
  }else{
    rc = tdeRandom(aOut, WALLET_IV);
    if( rc!=TDE_OK ) rc = tdeErr(rc, "wallet: random number generator failed");
    if( rc==TDE_OK ){
      rc = tdeGcmSeal(pKey->aKey, aOut, WALLET_IV, aAad, nAad, aDek, nDek,
                      aOut+WALLET_IV, aOut+WALLET_IV+nDek);
      if( rc!=TDE_OK ) rc = tdeErr(rc, "wallet: encryption failed");
    }
  }
  pthread_mutex_unlock(&w->mutex);
  if( rc!=TDE_OK ){
    tdeWipe(aOut, nBlob);
    return rc;
  }
  *pnOut = nBlob;
  *pMech = TDE_MECH_AES256_GCM;
  return TDE_OK;
}

static int walletUnwrap(TdeKeystore *p, const char *zKeyId, uint8_t mech,
                        const uint8_t *aIn, size_t nIn,
                        const uint8_t *aAad, size_t nAad,
                        uint8_t *aDek, size_t nDek){
  Wallet *w = (Wallet *)p;
  const WalletKey *pKey;
  int rc;

  if( w==0 || zKeyId==0 || aIn==0 || aDek==0 || (nAad && aAad==0) ){
    return tdeErr(TDE_MISUSE, "wallet: bad arguments to unwrap");
  }
  if( mech!=TDE_MECH_AES256_GCM ){
    return tdeErr(TDE_UNSUPPORTED, "wallet: wrapping mechanism %u not supported",
                  (unsigned)mech);
  }
  if( nDek==0 || nIn!=WALLET_IV + nDek + WALLET_TAG ){
    return tdeErr(TDE_FORMAT, "wallet: wrapped key is %zu bytes, expected %zu",
                  nIn, (size_t)WALLET_IV + nDek + WALLET_TAG);
  }
  pthread_mutex_lock(&w->mutex);
  pKey = walletFind(w, zKeyId);
  if( pKey==0 ){
    rc = tdeErr(TDE_NOKEY, "wallet %s: no master key '%s'", w->zPath, zKeyId);
  }else{
    rc = tdeGcmOpen(pKey->aKey, aIn, WALLET_IV, aAad, nAad, aIn+WALLET_IV, nDek,
                    aIn+WALLET_IV+nDek, aDek);
    if( rc==TDE_AUTH ){
      rc = tdeErr(TDE_AUTH, "wallet %s: wrapped key does not authenticate under "
                  "master key '%s' (tampered, or bound to other data)", w->zPath, zKeyId);
    }else if( rc!=TDE_OK ){
      rc = tdeErr(rc, "wallet: decryption failed");
    }
  }
  pthread_mutex_unlock(&w->mutex);
  if( rc!=TDE_OK ) tdeWipe(aDek, nDek);
  return rc;
}

/* ---- password change (tde_keystore_passwd) -------------------------------- */

/*
** Change the password of the password wallet cfg names: derive the wallet
** key from zOld with the file's own parameters and check it, decrypt the
** keys, then write them again under a wallet key derived from zNew with a
** fresh random salt and the cost t / m (0: the file's).  Crash-safe like
** every wallet write (new file, fsync, rename, directory fsync) and under
** the directory lock rotation and retirement take, reading the file after
** taking it, so no key another process just added is lost.  Audited as
** keystore_passwd (with the new cost, never a password), success or not.
** Processes that have the wallet open keep their keys; their next change
** to it fails ("replaced by a different wallet") until they reopen it.
*/
static int walletPasswd(const TdeConfig *cfg, const char *zOld, const char *zNew,
                        uint32_t t, uint32_t m){
  Wallet *w = 0;               /* only zPath, for walletLockDir */
  WalletKdf kdfCfg, kdfNew;
  WalletHdr hdr;
  WalletKey *aKey = 0;
  int nKey = 0;
  uint8_t *aOld = 0, *aNew = 0;  /* secure: old and new wallet keys */
  uint8_t *aFile = 0, *aOut = 0;
  size_t nFile = 0, nOut = 0;
  int dfd = -1, bMatch = 0, bSwitched = 0;
  int rc;
  char zDetail[PATH_MAX + 64];
  struct stat st;

  zDetail[0] = 0;
  w = calloc(1, sizeof(*w));
  aOld = tdeSecureAlloc(WALLET_KEY);
  aNew = tdeSecureAlloc(WALLET_KEY);
  if( w==0 || aOld==0 || aNew==0 ){ rc = tdeErr(TDE_NOMEM, "wallet: out of memory"); goto passwd_out; }
  rc = walletConfig(cfg, w->zPath, sizeof(w->zPath), &kdfCfg);
  if( rc!=TDE_OK ) goto passwd_out;
  if( zNew==0 || zNew[0]==0 ){
    rc = tdeErr(TDE_BADPASSWORD, "wallet %s: the new password must not be empty", w->zPath);
    goto passwd_out;
  }
  if( (t && (t<WALLET_KDF_T_MIN || t>WALLET_KDF_T_MAX))
   || (m && (m<WALLET_KDF_M_MIN || m>WALLET_KDF_M_MAX)) ){
    rc = tdeErr(TDE_RANGE, "wallet %s: Argon2id cost out of range (passes %d..%d, "
                "memory %d..%d KiB)", w->zPath, WALLET_KDF_T_MIN, WALLET_KDF_T_MAX,
                WALLET_KDF_M_MIN, WALLET_KDF_M_MAX);
    goto passwd_out;
  }
  rc = walletLockDir(w, "changing the password", &dfd);
  if( rc!=TDE_OK ) goto passwd_out;
  rc = walletReadFile(w->zPath, &aFile, &nFile, &st);
  if( rc!=TDE_OK ) goto passwd_out;
  rc = walletParseHeader(w->zPath, aFile, nFile, &hdr);
  if( rc!=TDE_OK ) goto passwd_out;
  if( hdr.kind!=WALLET_KIND_PASSWORD ){
    rc = tdeErr(TDE_UNSUPPORTED, "wallet %s is an auto-login wallet: it has no password "
                "to change", w->zPath);
    goto passwd_out;
  }
  if( zOld==0 ){
    rc = tdeErr(TDE_BADPASSWORD, "wallet %s: the current password is needed", w->zPath);
    goto passwd_out;
  }
  rc = walletArgon2(w->zPath, zOld, &hdr.kdf, aOld);
  if( rc==TDE_OK ) rc = walletCheckMatches(aFile, aOld, &bMatch);
  if( rc!=TDE_OK ) goto passwd_out;
  if( !bMatch ){
    rc = tdeErr(TDE_BADPASSWORD, "wallet %s: password incorrect", w->zPath);
    goto passwd_out;
  }
  rc = walletDecrypt(w->zPath, aFile, &hdr, aOld, &aKey, &nKey);
  if( rc!=TDE_OK ) goto passwd_out;

  kdfNew.t = t ? t : hdr.kdf.t;
  kdfNew.m = m ? m : hdr.kdf.m;
  kdfNew.p = hdr.kdf.p;
  rc = tdeRandom(kdfNew.aSalt, WALLET_SALT);
  if( rc!=TDE_OK ){ rc = tdeErr(rc, "wallet: random number generator failed"); goto passwd_out; }
  snprintf(zDetail, sizeof(zDetail), "wallet %s, Argon2id t=%u m=%u KiB p=%u", w->zPath,
           (unsigned)kdfNew.t, (unsigned)kdfNew.m, (unsigned)kdfNew.p);
  rc = walletArgon2(w->zPath, zNew, &kdfNew, aNew);
  if( rc!=TDE_OK ) goto passwd_out;
  rc = walletEncode(WALLET_KIND_PASSWORD, &kdfNew, aNew, aKey, nKey, 0, &aOut, &nOut);
  if( rc!=TDE_OK ) goto passwd_out;
  rc = walletWriteFile(w->zPath, aOut, nOut, 0, &bSwitched);
  if( rc==TDE_OK ){
    tdeLog(TDE_LOG_INFO, "wallet %s: password changed (%d master keys kept; %s)",
           w->zPath, nKey, zDetail);
  }else if( bSwitched ){
    tdeLog(TDE_LOG_WARNING, "wallet %s: the new password is in force, but: %s",
           w->zPath, tde_last_error());
  }

passwd_out:
  if( dfd>=0 ) close(dfd);     /* releases the flock */
  walletAudit(cfg, "keystore_passwd", 0, rc, zDetail[0] ? zDetail : 0);
  walletKeysFree(aKey, nKey);
  tdeSecureFree(aOut, nOut);
  tdeSecureFree(aFile, nFile);
  tdeSecureFree(aNew, WALLET_KEY);
  tdeSecureFree(aOld, WALLET_KEY);
  free(w);
  return rc;
}

int tde_keystore_passwd(const char *zConfig, const char *zOldPassword, const char *zNewPassword,
                        uint32_t kdfT, uint32_t kdfMKiB){
  char zPath[PATH_MAX];
  TdeConfig *pCfg = 0;
  const tde_keystore_methods *pM;
  char *zPw = 0;
  size_t nPw = 0;
  int rc = tdeConfigLocate(zConfig, zPath, sizeof(zPath));
  if( rc ) return rc;
  rc = tdeConfigLoad(zPath, &pCfg);
  if( rc ) return rc;
  pM = tdeKeystoreByName(tdeConfigGet(pCfg, "keystore"));
  if( pM!=&tdeWalletMethods ){
    rc = tdeErr(TDE_UNSUPPORTED, "%s: keystore '%s' has no password sqlite-tde can change "
                "(a token's PIN or a key manager's credentials are changed with its own tools)",
                zPath, tdeConfigGet(pCfg, "keystore"));
    goto done;
  }
  if( zOldPassword==0 ){
    rc = tdeConfigPassword(pCfg, &zPw, &nPw);
    if( rc==TDE_NOTFOUND ) rc = TDE_OK;
    if( rc ) goto done;
    zOldPassword = zPw;
  }
  rc = walletPasswd(pCfg, zOldPassword, zNewPassword, kdfT, kdfMKiB);
  /* This process's open handle still holds the old salt: reopen on next use. */
  if( rc==TDE_OK && tdeRegistryClose(zPath)==TDE_LOCKED ){
    tdeLog(TDE_LOG_WARNING, "%s: the keystore stays open in this process with databases "
           "using it; reopen it before changing its keys", zPath);
  }
done:
  if( zPw ) tdeSecureFree(zPw, nPw+1);
  tdeConfigFree(pCfg);
  return rc;
}
