/*
** PKCS#11 keystore provider ("pkcs11", TDE_KS_PKCS11): master keys are
** AES-256 secret-key objects on a token of a PKCS#11 module (an HSM,
** SoftHSM, a TPM through tpm2-pkcs11), created sensitive and
** non-extractable.  Data keys are wrapped and unwrapped inside the token
** with AES-GCM through C_Encrypt / C_Decrypt; the blob is
** iv(12) || ciphertext || tag(16), mechanism TDE_MECH_AES256_GCM (the
** keystore type in the header tells it apart from a wallet wrapping).
**
** The module is dlopen()ed from the configuration (pkcs11_module), so the
** library links no vendor code.  The few PKCS#11 2.40 types and constants
** used are declared below, in this file only, under P11_ names: nothing of
** the OASIS headers (with their compatibility macros) reaches other files.
**
** Master key ids are the objects' CKA_LABEL:
**   <pkcs11_key_label>-<YYYYMMDDTHHMMSS.uuuuuu>Z   (UTC creation time)
** so `keystore list` shows creation times and ids sort by age.  A retired
** key has CKA_ENCRYPT set to false: the token itself then refuses to wrap
** with it, while CKA_DECRYPT keeps old wrappings readable.
**
** Robustness: C_Initialize with CKF_OS_LOCKING_OK; a module someone else
** initialised (CKR_CRYPTOKI_ALREADY_INITIALIZED) is used and never
** finalised by us; after fork() the pid change is noticed, every handle of
** the parent is dropped unused and the module re-initialised and logged
** in again; one session per keystore handle, used under its mutex; login
** once per process (the PIN is kept in locked memory to log in again after
** fork or token loss).  A size query (NULL output) comes first; an answer
** that does not fit closes the session, so no operation stays active.
**
** It must never log or return key bytes or PINs, never print, and never
** delete a master key.  Token calls happen at keystore open, data-key
** unwrap (database open), wrap (create, rotate, migrate, rekey) and key
** management, never per page or per transaction.
*/
#include "tde_int.h"
#include "config.h"
#include "keystore/keystore.h"
#include "audit/audit.h"
#include "cipher/cipher.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* ---- PKCS#11 2.40 subset (OASIS PKCS #11 Base Specification v2.40) -------- */

typedef unsigned long P11_ULONG;
typedef P11_ULONG P11_RV;
typedef P11_ULONG P11_FLAGS;
typedef P11_ULONG P11_SLOT_ID;
typedef P11_ULONG P11_SESSION_HANDLE;
typedef P11_ULONG P11_OBJECT_HANDLE;
typedef unsigned char P11_BBOOL;

typedef struct P11_VERSION { unsigned char major, minor; } P11_VERSION;

typedef struct P11_TOKEN_INFO {
  unsigned char label[32];
  unsigned char manufacturerID[32];
  unsigned char model[16];
  unsigned char serialNumber[16];
  P11_FLAGS flags;
  P11_ULONG ulMaxSessionCount, ulSessionCount;
  P11_ULONG ulMaxRwSessionCount, ulRwSessionCount;
  P11_ULONG ulMaxPinLen, ulMinPinLen;
  P11_ULONG ulTotalPublicMemory, ulFreePublicMemory;
  P11_ULONG ulTotalPrivateMemory, ulFreePrivateMemory;
  P11_VERSION hardwareVersion, firmwareVersion;
  unsigned char utcTime[16];
} P11_TOKEN_INFO;

typedef struct P11_ATTRIBUTE {
  P11_ULONG type;
  void *pValue;
  P11_ULONG ulValueLen;
} P11_ATTRIBUTE;

typedef struct P11_MECHANISM {
  P11_ULONG mechanism;
  void *pParameter;
  P11_ULONG ulParameterLen;
} P11_MECHANISM;

typedef struct P11_GCM_PARAMS {   /* as in the 2.40 header (with ulIvBits) */
  unsigned char *pIv;
  P11_ULONG ulIvLen;
  P11_ULONG ulIvBits;
  unsigned char *pAAD;
  P11_ULONG ulAADLen;
  P11_ULONG ulTagBits;
} P11_GCM_PARAMS;

typedef struct P11_C_INITIALIZE_ARGS {
  void *CreateMutex, *DestroyMutex, *LockMutex, *UnlockMutex;
  P11_FLAGS flags;
  void *pReserved;
} P11_C_INITIALIZE_ARGS;

typedef P11_RV (*P11_UNUSED)(void);   /* slots this file never calls */

/* CK_FUNCTION_LIST: the order of members is the ABI. */
typedef struct P11_FUNCTION_LIST {
  P11_VERSION version;
  P11_RV (*C_Initialize)(void *pInitArgs);
  P11_RV (*C_Finalize)(void *pReserved);
  P11_UNUSED C_GetInfo, C_GetFunctionList;
  P11_RV (*C_GetSlotList)(P11_BBOOL tokenPresent, P11_SLOT_ID *pSlotList, P11_ULONG *pulCount);
  P11_UNUSED C_GetSlotInfo;
  P11_RV (*C_GetTokenInfo)(P11_SLOT_ID slotID, P11_TOKEN_INFO *pInfo);
  P11_UNUSED C_GetMechanismList, C_GetMechanismInfo, C_InitToken, C_InitPIN, C_SetPIN;
  P11_RV (*C_OpenSession)(P11_SLOT_ID slotID, P11_FLAGS flags, void *pApplication,
                          void *Notify, P11_SESSION_HANDLE *phSession);
  P11_RV (*C_CloseSession)(P11_SESSION_HANDLE hSession);
  P11_UNUSED C_CloseAllSessions, C_GetSessionInfo, C_GetOperationState, C_SetOperationState;
  P11_RV (*C_Login)(P11_SESSION_HANDLE hSession, P11_ULONG userType,
                    unsigned char *pPin, P11_ULONG ulPinLen);
  P11_UNUSED C_Logout;
  P11_RV (*C_CreateObject)(P11_SESSION_HANDLE hSession, P11_ATTRIBUTE *pTemplate,
                           P11_ULONG ulCount, P11_OBJECT_HANDLE *phObject);
  P11_UNUSED C_CopyObject;
  P11_RV (*C_DestroyObject)(P11_SESSION_HANDLE hSession, P11_OBJECT_HANDLE hObject);
  P11_UNUSED C_GetObjectSize;
  P11_RV (*C_GetAttributeValue)(P11_SESSION_HANDLE hSession, P11_OBJECT_HANDLE hObject,
                                P11_ATTRIBUTE *pTemplate, P11_ULONG ulCount);
  P11_RV (*C_SetAttributeValue)(P11_SESSION_HANDLE hSession, P11_OBJECT_HANDLE hObject,
                                P11_ATTRIBUTE *pTemplate, P11_ULONG ulCount);
  P11_RV (*C_FindObjectsInit)(P11_SESSION_HANDLE hSession, P11_ATTRIBUTE *pTemplate,
                              P11_ULONG ulCount);
  P11_RV (*C_FindObjects)(P11_SESSION_HANDLE hSession, P11_OBJECT_HANDLE *phObject,
                          P11_ULONG ulMaxObjectCount, P11_ULONG *pulObjectCount);
  P11_RV (*C_FindObjectsFinal)(P11_SESSION_HANDLE hSession);
  P11_RV (*C_EncryptInit)(P11_SESSION_HANDLE hSession, P11_MECHANISM *pMechanism,
                          P11_OBJECT_HANDLE hKey);
  P11_RV (*C_Encrypt)(P11_SESSION_HANDLE hSession, unsigned char *pData, P11_ULONG ulDataLen,
                      unsigned char *pEncryptedData, P11_ULONG *pulEncryptedDataLen);
  P11_UNUSED C_EncryptUpdate, C_EncryptFinal;
  P11_RV (*C_DecryptInit)(P11_SESSION_HANDLE hSession, P11_MECHANISM *pMechanism,
                          P11_OBJECT_HANDLE hKey);
  P11_RV (*C_Decrypt)(P11_SESSION_HANDLE hSession, unsigned char *pEncryptedData,
                      P11_ULONG ulEncryptedDataLen, unsigned char *pData, P11_ULONG *pulDataLen);
  P11_UNUSED C_DecryptUpdate, C_DecryptFinal;
  P11_UNUSED C_DigestInit, C_Digest, C_DigestUpdate, C_DigestKey, C_DigestFinal;
  P11_UNUSED C_SignInit, C_Sign, C_SignUpdate, C_SignFinal, C_SignRecoverInit, C_SignRecover;
  P11_UNUSED C_VerifyInit, C_Verify, C_VerifyUpdate, C_VerifyFinal, C_VerifyRecoverInit;
  P11_UNUSED C_VerifyRecover, C_DigestEncryptUpdate, C_DecryptDigestUpdate;
  P11_UNUSED C_SignEncryptUpdate, C_DecryptVerifyUpdate;
  P11_RV (*C_GenerateKey)(P11_SESSION_HANDLE hSession, P11_MECHANISM *pMechanism,
                          P11_ATTRIBUTE *pTemplate, P11_ULONG ulCount, P11_OBJECT_HANDLE *phKey);
  P11_UNUSED C_GenerateKeyPair, C_WrapKey, C_UnwrapKey, C_DeriveKey, C_SeedRandom;
  P11_UNUSED C_GenerateRandom, C_GetFunctionStatus, C_CancelFunction, C_WaitForSlotEvent;
} P11_FUNCTION_LIST;

typedef P11_RV (*P11_GetFunctionList)(P11_FUNCTION_LIST **ppFunctionList);

#define P11_TRUE  1
#define P11_FALSE 0

#define CKF_TOKEN_PRESENT                 0x1UL      /* C_GetSlotList argument */
#define CKF_OS_LOCKING_OK                 0x2UL
#define CKF_RW_SESSION                    0x2UL
#define CKF_SERIAL_SESSION                0x4UL
#define CKF_LOGIN_REQUIRED                0x4UL
#define CKF_USER_PIN_INITIALIZED          0x8UL
#define CKF_PROTECTED_AUTHENTICATION_PATH 0x100UL
#define CKF_USER_PIN_FINAL_TRY            0x20000UL
#define CKF_USER_PIN_LOCKED               0x40000UL
#define CKU_USER                          1UL
#define CKO_DATA                          0UL
#define CKO_SECRET_KEY                    4UL
#define CKK_AES                           0x1FUL
#define CKA_CLASS                         0x000UL
#define CKA_TOKEN                         0x001UL
#define CKA_PRIVATE                       0x002UL
#define CKA_LABEL                         0x003UL
#define CKA_APPLICATION                   0x010UL
#define CKA_VALUE                         0x011UL
#define CKA_KEY_TYPE                      0x100UL
#define CKA_SENSITIVE                     0x103UL
#define CKA_ENCRYPT                       0x104UL
#define CKA_DECRYPT                       0x105UL
#define CKA_WRAP                          0x106UL
#define CKA_UNWRAP                        0x107UL
#define CKA_SIGN                          0x108UL
#define CKA_VERIFY                        0x10AUL
#define CKA_DERIVE                        0x10CUL
#define CKA_START_DATE                    0x110UL
#define CKA_VALUE_LEN                     0x161UL
#define CKA_EXTRACTABLE                   0x162UL
#define CKA_MODIFIABLE                    0x170UL
#define CKM_AES_KEY_GEN                   0x1080UL
#define CKM_AES_GCM                       0x1087UL

#define CKR_OK                            0x000UL
#define CKR_HOST_MEMORY                   0x002UL
#define CKR_GENERAL_ERROR                 0x005UL
#define CKR_FUNCTION_FAILED               0x006UL
#define CKR_ARGUMENTS_BAD                 0x007UL
#define CKR_ATTRIBUTE_READ_ONLY           0x010UL
#define CKR_ATTRIBUTE_SENSITIVE           0x011UL
#define CKR_ATTRIBUTE_TYPE_INVALID        0x012UL
#define CKR_ATTRIBUTE_VALUE_INVALID       0x013UL
#define CKR_DATA_LEN_RANGE                0x021UL
#define CKR_DEVICE_ERROR                  0x030UL
#define CKR_DEVICE_MEMORY                 0x031UL
#define CKR_DEVICE_REMOVED                0x032UL
#define CKR_ENCRYPTED_DATA_INVALID        0x040UL
#define CKR_ENCRYPTED_DATA_LEN_RANGE      0x041UL
#define CKR_FUNCTION_NOT_SUPPORTED        0x054UL
#define CKR_KEY_HANDLE_INVALID            0x060UL
#define CKR_KEY_FUNCTION_NOT_PERMITTED    0x068UL
#define CKR_MECHANISM_INVALID             0x070UL
#define CKR_MECHANISM_PARAM_INVALID       0x071UL
#define CKR_OBJECT_HANDLE_INVALID         0x082UL
#define CKR_OPERATION_ACTIVE              0x090UL
#define CKR_PIN_INCORRECT                 0x0A0UL
#define CKR_PIN_INVALID                   0x0A1UL
#define CKR_PIN_LEN_RANGE                 0x0A2UL
#define CKR_PIN_EXPIRED                   0x0A3UL
#define CKR_PIN_LOCKED                    0x0A4UL
#define CKR_SESSION_CLOSED                0x0B0UL
#define CKR_SESSION_COUNT                 0x0B1UL
#define CKR_SESSION_HANDLE_INVALID        0x0B3UL
#define CKR_SESSION_READ_ONLY             0x0B5UL
#define CKR_TEMPLATE_INCOMPLETE           0x0D0UL
#define CKR_TEMPLATE_INCONSISTENT         0x0D1UL
#define CKR_TOKEN_NOT_PRESENT             0x0E0UL
#define CKR_TOKEN_NOT_RECOGNIZED          0x0E1UL
#define CKR_TOKEN_WRITE_PROTECTED         0x0E2UL
#define CKR_USER_ALREADY_LOGGED_IN        0x100UL
#define CKR_USER_NOT_LOGGED_IN            0x101UL
#define CKR_USER_PIN_NOT_INITIALIZED      0x102UL
#define CKR_BUFFER_TOO_SMALL              0x150UL
#define CKR_CRYPTOKI_NOT_INITIALIZED      0x190UL
#define CKR_CRYPTOKI_ALREADY_INITIALIZED  0x191UL

/* ---- provider constants ---------------------------------------------------- */

#define P11_IV              12
#define P11_TAG             16
#define P11_KEY_BYTES       32
#define P11_LABEL_DEFAULT   "sqlite-tde-master"
#define P11_STAMP_LEN       23          /* "YYYYMMDDTHHMMSS.uuuuuuZ" */
#define P11_LABEL_MAX       (TDE_KEYID_MAX - 1 - P11_STAMP_LEN)
#define P11_TOKEN_LABEL_MAX 32
#define P11_OUT_MAX         4096        /* largest size answer we accept */
#define P11_MAX_KEYS        4096

/* ---- call counting (tests prove no token call per page or transaction) --- */

static uint64_t nP11Calls;

/* Number of PKCS#11 function calls this process made through the provider.
** Not in any header: the unit test declares it. */
uint64_t tdePkcs11CallCount(void);
uint64_t tdePkcs11CallCount(void){
  return __atomic_load_n(&nP11Calls, __ATOMIC_RELAXED);
}

#define P11(pF, fn) (__atomic_fetch_add(&nP11Calls, 1, __ATOMIC_RELAXED), (pF)->fn)

/* ---- modules: one per path per process, shared by every handle ------------- */

typedef struct P11Module P11Module;
struct P11Module {
  P11Module *pNext;
  char zPath[PATH_MAX];
  void *pLib;                   /* dlopen handle; never closed (modules
                                ** register atexit handlers and threads) */
  P11_FUNCTION_LIST *pF;
  pid_t pid;                    /* process where it is initialised, or 0 */
  int bOwned;                   /* we initialised it: we may finalise it */
  int nRef;                     /* open keystore handles */
};

static pthread_mutex_t p11ModMutex = PTHREAD_MUTEX_INITIALIZER;
static P11Module *pP11Modules;

static const char *p11RvName(P11_RV rv){
  switch( rv ){
    case CKR_OK: return "CKR_OK";
    case CKR_HOST_MEMORY: return "CKR_HOST_MEMORY";
    case CKR_GENERAL_ERROR: return "CKR_GENERAL_ERROR";
    case CKR_FUNCTION_FAILED: return "CKR_FUNCTION_FAILED";
    case CKR_ARGUMENTS_BAD: return "CKR_ARGUMENTS_BAD";
    case CKR_ATTRIBUTE_READ_ONLY: return "CKR_ATTRIBUTE_READ_ONLY";
    case CKR_ATTRIBUTE_SENSITIVE: return "CKR_ATTRIBUTE_SENSITIVE";
    case CKR_ATTRIBUTE_TYPE_INVALID: return "CKR_ATTRIBUTE_TYPE_INVALID";
    case CKR_ATTRIBUTE_VALUE_INVALID: return "CKR_ATTRIBUTE_VALUE_INVALID";
    case CKR_DATA_LEN_RANGE: return "CKR_DATA_LEN_RANGE";
    case CKR_DEVICE_ERROR: return "CKR_DEVICE_ERROR";
    case CKR_DEVICE_MEMORY: return "CKR_DEVICE_MEMORY";
    case CKR_DEVICE_REMOVED: return "CKR_DEVICE_REMOVED";
    case CKR_ENCRYPTED_DATA_INVALID: return "CKR_ENCRYPTED_DATA_INVALID";
    case CKR_ENCRYPTED_DATA_LEN_RANGE: return "CKR_ENCRYPTED_DATA_LEN_RANGE";
    case CKR_FUNCTION_NOT_SUPPORTED: return "CKR_FUNCTION_NOT_SUPPORTED";
    case CKR_KEY_HANDLE_INVALID: return "CKR_KEY_HANDLE_INVALID";
    case CKR_KEY_FUNCTION_NOT_PERMITTED: return "CKR_KEY_FUNCTION_NOT_PERMITTED";
    case CKR_MECHANISM_INVALID: return "CKR_MECHANISM_INVALID";
    case CKR_MECHANISM_PARAM_INVALID: return "CKR_MECHANISM_PARAM_INVALID";
    case CKR_OBJECT_HANDLE_INVALID: return "CKR_OBJECT_HANDLE_INVALID";
    case CKR_OPERATION_ACTIVE: return "CKR_OPERATION_ACTIVE";
    case CKR_PIN_INCORRECT: return "CKR_PIN_INCORRECT";
    case CKR_PIN_INVALID: return "CKR_PIN_INVALID";
    case CKR_PIN_LEN_RANGE: return "CKR_PIN_LEN_RANGE";
    case CKR_PIN_EXPIRED: return "CKR_PIN_EXPIRED";
    case CKR_PIN_LOCKED: return "CKR_PIN_LOCKED";
    case CKR_SESSION_CLOSED: return "CKR_SESSION_CLOSED";
    case CKR_SESSION_COUNT: return "CKR_SESSION_COUNT";
    case CKR_SESSION_HANDLE_INVALID: return "CKR_SESSION_HANDLE_INVALID";
    case CKR_SESSION_READ_ONLY: return "CKR_SESSION_READ_ONLY";
    case CKR_TEMPLATE_INCOMPLETE: return "CKR_TEMPLATE_INCOMPLETE";
    case CKR_TEMPLATE_INCONSISTENT: return "CKR_TEMPLATE_INCONSISTENT";
    case CKR_TOKEN_NOT_PRESENT: return "CKR_TOKEN_NOT_PRESENT";
    case CKR_TOKEN_NOT_RECOGNIZED: return "CKR_TOKEN_NOT_RECOGNIZED";
    case CKR_TOKEN_WRITE_PROTECTED: return "CKR_TOKEN_WRITE_PROTECTED";
    case CKR_USER_ALREADY_LOGGED_IN: return "CKR_USER_ALREADY_LOGGED_IN";
    case CKR_USER_NOT_LOGGED_IN: return "CKR_USER_NOT_LOGGED_IN";
    case CKR_USER_PIN_NOT_INITIALIZED: return "CKR_USER_PIN_NOT_INITIALIZED";
    case CKR_BUFFER_TOO_SMALL: return "CKR_BUFFER_TOO_SMALL";
    case CKR_CRYPTOKI_NOT_INITIALIZED: return "CKR_CRYPTOKI_NOT_INITIALIZED";
    case CKR_CRYPTOKI_ALREADY_INITIALIZED: return "CKR_CRYPTOKI_ALREADY_INITIALIZED";
    default: return "unknown PKCS#11 error";
  }
}

/* Errors after which the session (or the whole connection to the token)
** is gone: drop it and connect again once. */
static int p11RvLostSession(P11_RV rv){
  return rv==CKR_SESSION_HANDLE_INVALID || rv==CKR_SESSION_CLOSED
      || rv==CKR_DEVICE_REMOVED || rv==CKR_TOKEN_NOT_PRESENT
      || rv==CKR_USER_NOT_LOGGED_IN || rv==CKR_CRYPTOKI_NOT_INITIALIZED
      || rv==CKR_KEY_HANDLE_INVALID || rv==CKR_OBJECT_HANDLE_INVALID;
}

/* Initialise pMod in this process if it is not (first use, after our own
** C_Finalize, or in the child after fork()).  Caller holds p11ModMutex. */
static int p11ModuleInit(P11Module *pMod){
  P11_C_INITIALIZE_ARGS args;
  P11_RV rv;
  if( pMod->pid==getpid() ) return TDE_OK;
  memset(&args, 0, sizeof(args));
  args.flags = CKF_OS_LOCKING_OK;    /* NULL args: SoftHSM runs without locks */
  rv = P11(pMod->pF, C_Initialize)(&args);
  if( rv==CKR_OK ){
    pMod->bOwned = 1;
  }else if( rv==CKR_CRYPTOKI_ALREADY_INITIALIZED ){
    pMod->bOwned = 0;                /* someone else's: never finalise it */
  }else{
    return tdeErr(TDE_NOKEYSTORE, "pkcs11 module %s: C_Initialize failed: %s (0x%lx)",
                  pMod->zPath, p11RvName(rv), rv);
  }
  pMod->pid = getpid();
  return TDE_OK;
}

/* Load (once per process) and initialise the module at zPath; takes a
** reference, released by p11ModuleRelease. */
static int p11ModuleAcquire(const char *zPath, P11Module **ppMod){
  P11Module *pMod;
  P11_GetFunctionList xGet;
  int rc = TDE_OK;

  *ppMod = 0;
  pthread_mutex_lock(&p11ModMutex);
  for(pMod=pP11Modules; pMod && strcmp(pMod->zPath, zPath)!=0; pMod=pMod->pNext){}
  if( pMod==0 ){
    void *pLib;
    P11_FUNCTION_LIST *pF = 0;
    P11_RV rv;
    if( strlen(zPath)>=sizeof(pMod->zPath) ){
      rc = tdeErr(TDE_CONFIG, "pkcs11_module path too long");
      goto acquire_out;
    }
    /* The module runs with the keys: refused if others may rewrite it. */
    if( strchr(zPath, '/') && access(zPath, F_OK)==0 ){
      rc = tdeTrustedFile(TDE_NOKEYSTORE, "pkcs11 module", zPath, -1);
      if( rc!=TDE_OK ) goto acquire_out;
    }
    pLib = dlopen(zPath, RTLD_NOW | RTLD_LOCAL);
    if( pLib==0 ){
      const char *zWhy = dlerror();
      rc = tdeErr(TDE_NOKEYSTORE, "pkcs11 module %s: cannot load: %s", zPath,
                  zWhy ? zWhy : "unknown error");
      goto acquire_out;
    }
    *(void **)(&xGet) = dlsym(pLib, "C_GetFunctionList");
    if( xGet==0 ){
      dlclose(pLib);
      rc = tdeErr(TDE_NOKEYSTORE, "pkcs11 module %s: not a PKCS#11 module "
                  "(no C_GetFunctionList)", zPath);
      goto acquire_out;
    }
    __atomic_fetch_add(&nP11Calls, 1, __ATOMIC_RELAXED);
    rv = xGet(&pF);
    if( rv!=CKR_OK || pF==0 ){
      dlclose(pLib);
      rc = tdeErr(TDE_NOKEYSTORE, "pkcs11 module %s: C_GetFunctionList failed: %s",
                  zPath, p11RvName(rv));
      goto acquire_out;
    }
    if( pF->version.major!=2 ){
      dlclose(pLib);
      rc = tdeErr(TDE_NOKEYSTORE, "pkcs11 module %s: Cryptoki version %u.%u not supported "
                  "(2.x needed)", zPath, pF->version.major, pF->version.minor);
      goto acquire_out;
    }
    pMod = calloc(1, sizeof(*pMod));
    if( pMod==0 ){
      dlclose(pLib);
      rc = tdeErr(TDE_NOMEM, "pkcs11: out of memory");
      goto acquire_out;
    }
    memcpy(pMod->zPath, zPath, strlen(zPath)+1);
    pMod->pLib = pLib;
    pMod->pF = pF;
    pMod->pNext = pP11Modules;
    pP11Modules = pMod;
  }
  rc = p11ModuleInit(pMod);
  if( rc==TDE_OK ){
    pMod->nRef++;
    *ppMod = pMod;
  }
acquire_out:
  pthread_mutex_unlock(&p11ModMutex);
  return rc;
}

/* Drop a reference.  The last one finalises the module if we initialised
** it in this process (never if someone else did); the library stays
** loaded for a later open. */
static void p11ModuleRelease(P11Module *pMod){
  if( pMod==0 ) return;
  pthread_mutex_lock(&p11ModMutex);
  if( pMod->nRef>0 ) pMod->nRef--;
  if( pMod->nRef==0 ){
    if( pMod->bOwned && pMod->pid==getpid() ) P11(pMod->pF, C_Finalize)(0);
    /* Not ours: whoever initialised it may finalise it meanwhile, so the
    ** next open initialises again (and accepts ALREADY_INITIALIZED). */
    pMod->bOwned = 0;
    pMod->pid = 0;
  }
  pthread_mutex_unlock(&p11ModMutex);
}

/* ---- keystore handle -------------------------------------------------------- */

typedef struct P11Key {
  char zId[TDE_KEYID_MAX + 1];  /* CKA_LABEL */
  P11_OBJECT_HANDLE h;
  int64_t createdUs;            /* from the label */
  int bRetired;                 /* CKA_ENCRYPT false */
} P11Key;

typedef struct Pkcs11 {
  TdeKeystore base;             /* must be first */
  pthread_mutex_t mutex;        /* guards everything below and the session */
  P11Module *pMod;
  char zModule[PATH_MAX];
  char zToken[P11_TOKEN_LABEL_MAX + 1];
  char zLabel[P11_LABEL_MAX + 1];
  char *zPin;                   /* secure memory, or NULL (no PIN) */
  size_t nPin;
  pid_t pid;                    /* process the session belongs to */
  int bSession;
  P11_SESSION_HANDLE hSession;
  P11Key *aKey;                 /* sorted oldest first */
  int nKey;
  TdeConfig *pAudit;            /* own copy of the audit_* settings, or NULL */
} Pkcs11;


/* One audit line for a pkcs11 operation (tdeAuditKeystoreOp). */
static void p11Audit(const TdeConfig *pCfg, const char *zOp, const char *zKeyId,
                     int rc, const char *zDetail){
  tdeAuditKeystoreOp(pCfg, "pkcs11", zOp, zKeyId, rc, zDetail);
}

/* Labels may hold letters, digits, '.', '_' and '-': they become key ids in
** headers, audit lines and command output. */
static int p11LabelOk(const char *z){
  if( z[0]==0 ) return 0;
  for(; *z; z++){
    char c = *z;
    if( !((c>='a' && c<='z') || (c>='A' && c<='Z') || (c>='0' && c<='9')
          || c=='.' || c=='_' || c=='-') ) return 0;
  }
  return 1;
}

/* Read pkcs11_* settings into k (module, token, key label). */
static int p11Config(const TdeConfig *cfg, Pkcs11 *k){
  const char *zMod, *zTok, *zLab;
  size_t n;
  int rc;
  if( cfg==0 ) return tdeErr(TDE_MISUSE, "pkcs11: no configuration");
  zMod = tdeConfigGet(cfg, "pkcs11_module");
  zTok = tdeConfigGet(cfg, "pkcs11_token_label");
  zLab = tdeConfigGet(cfg, "pkcs11_key_label");
  if( zMod==0 ){
    return tdeErr(TDE_CONFIG, "%s: missing required key 'pkcs11_module' (path of the "
                  "PKCS#11 library)", cfg->zPath);
  }
  if( zTok==0 ){
    return tdeErr(TDE_CONFIG, "%s: missing required key 'pkcs11_token_label'", cfg->zPath);
  }
  if( strchr(zMod, '/') ){
    rc = tdeConfigPath(cfg, "pkcs11_module", k->zModule, sizeof(k->zModule));
    if( rc!=TDE_OK ) return rc;
  }else{
    /* A bare file name goes to dlopen()'s library search as is. */
    if( strlen(zMod)>=sizeof(k->zModule) ) return tdeErr(TDE_CONFIG, "%s: pkcs11_module too long", cfg->zPath);
    memcpy(k->zModule, zMod, strlen(zMod)+1);
  }
  n = strlen(zTok);
  if( n==0 || n>P11_TOKEN_LABEL_MAX ){
    return tdeErr(TDE_CONFIG, "%s: pkcs11_token_label must be 1 to %d bytes",
                  cfg->zPath, P11_TOKEN_LABEL_MAX);
  }
  memcpy(k->zToken, zTok, n+1);
  if( zLab==0 ) zLab = P11_LABEL_DEFAULT;
  n = strlen(zLab);
  if( n>P11_LABEL_MAX || !p11LabelOk(zLab) ){
    return tdeErr(TDE_CONFIG, "%s: pkcs11_key_label must be 1 to %d letters, digits, "
                  "'.', '_' or '-'", cfg->zPath, P11_LABEL_MAX);
  }
  memcpy(k->zLabel, zLab, n+1);
  return TDE_OK;
}

/* "YYYYMMDDTHHMMSS.uuuuuuZ" <-> microseconds since the epoch. */
static void p11Stamp(int64_t us, char z[64]){
  time_t t = (time_t)(us / 1000000);
  struct tm tm;
  gmtime_r(&t, &tm);
  snprintf(z, 64, "%04d%02d%02dT%02d%02d%02d.%06dZ",
           tm.tm_year+1900, tm.tm_mon+1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
           (int)(us % 1000000));
}

static int p11ParseStamp(const char *z, int64_t *pUs){
  struct tm tm;
  int a[7], i, j;
  static const int aw[7] = {4, 2, 2, 2, 2, 2, 6};
  const char *p = z;
  if( strlen(z)!=P11_STAMP_LEN || z[8]!='T' || z[15]!='.' || z[22]!='Z' ) return 0;
  for(i=0; i<7; i++){
    a[i] = 0;
    for(j=0; j<aw[i]; j++, p++){
      if( *p<'0' || *p>'9' ) return 0;
      a[i] = a[i]*10 + (*p - '0');
    }
    if( i==2 || i==5 ) p++;      /* skip 'T' and '.' */
  }
  memset(&tm, 0, sizeof(tm));
  tm.tm_year = a[0]-1900; tm.tm_mon = a[1]-1; tm.tm_mday = a[2];
  tm.tm_hour = a[3]; tm.tm_min = a[4]; tm.tm_sec = a[5];
  *pUs = (int64_t)timegm(&tm) * 1000000 + a[6];
  return 1;
}

/* Forget the session and key handles.  In the process that opened it the
** session is closed (ending any operation left active on it); in a child
** after fork() the parent's handles are dropped without a call. */
static void p11Drop(Pkcs11 *k){
  if( k->bSession && k->pid==getpid() ){
    P11(k->pMod->pF, C_CloseSession)(k->hSession);
  }
  k->bSession = 0;
  k->pid = getpid();
  free(k->aKey);
  k->aKey = 0;
  k->nKey = 0;
}

static int p11KeyCmp(const void *a, const void *b){
  const P11Key *x = a, *y = b;
  if( x->createdUs!=y->createdUs ) return x->createdUs<y->createdUs ? -1 : 1;
  return strcmp(x->zId, y->zId);
}

/* Re-read the list of our master keys from the token (caller holds the
** mutex and a session).  On failure the old list stays. */
static int p11Scan(Pkcs11 *k, P11_RV *pRv){
  P11_FUNCTION_LIST *pF = k->pMod->pF;
  P11_ULONG cls = CKO_SECRET_KEY, kt = CKK_AES;
  P11_BBOOL bTrue = P11_TRUE;
  P11_ATTRIBUTE aFind[3] = {
    { CKA_CLASS, &cls, sizeof(cls) },
    { CKA_KEY_TYPE, &kt, sizeof(kt) },
    { CKA_TOKEN, &bTrue, sizeof(bTrue) },
  };
  P11_OBJECT_HANDLE aH[64];
  P11_OBJECT_HANDLE *aAll = 0;
  P11Key *aNew = 0;
  size_t nAll = 0, nAlloc = 0, nLab = strlen(k->zLabel);
  int nNew = 0, rc = TDE_OK;
  P11_ULONG nGot = 0, i;
  P11_RV rv;

  *pRv = CKR_OK;
  rv = P11(pF, C_FindObjectsInit)(k->hSession, aFind, 3);
  if( rv!=CKR_OK ){ *pRv = rv; return TDE_NOKEYSTORE; }
  do{
    rv = P11(pF, C_FindObjects)(k->hSession, aH, (P11_ULONG)TDE_ARRAY_SIZE(aH), &nGot);
    if( rv!=CKR_OK ) break;
    if( nAll+nGot>nAlloc ){
      P11_OBJECT_HANDLE *aMore;
      nAlloc = nAll + nGot + 64;
      if( nAlloc>P11_MAX_KEYS*4 ){ rc = tdeErr(TDE_RANGE, "pkcs11: too many objects"); break; }
      aMore = realloc(aAll, nAlloc*sizeof(*aAll));
      if( aMore==0 ){ rc = tdeErr(TDE_NOMEM, "pkcs11: out of memory"); break; }
      aAll = aMore;
    }
    if( nGot ) memcpy(aAll+nAll, aH, nGot*sizeof(*aH));
    nAll += nGot;
  }while( nGot>0 );
  P11(pF, C_FindObjectsFinal)(k->hSession);
  if( rv!=CKR_OK ){ *pRv = rv; rc = TDE_NOKEYSTORE; goto scan_out; }
  if( rc!=TDE_OK ) goto scan_out;

  if( nAll ){
    aNew = calloc(nAll, sizeof(*aNew));
    if( aNew==0 ){ rc = tdeErr(TDE_NOMEM, "pkcs11: out of memory"); goto scan_out; }
  }
  for(i=0; i<nAll; i++){
    char zLab[TDE_KEYID_MAX + 2];
    P11_BBOOL bEnc = P11_FALSE;
    P11_ATTRIBUTE aGet[2] = {
      { CKA_LABEL, zLab, sizeof(zLab)-1 },
      { CKA_ENCRYPT, &bEnc, sizeof(bEnc) },
    };
    int64_t us;
    rv = P11(pF, C_GetAttributeValue)(k->hSession, aAll[i], aGet, 2);
    if( rv==CKR_BUFFER_TOO_SMALL || rv==CKR_ATTRIBUTE_SENSITIVE
     || rv==CKR_ATTRIBUTE_TYPE_INVALID || rv==CKR_OBJECT_HANDLE_INVALID ){
      continue;                 /* a label too long to be ours, or gone */
    }
    if( rv!=CKR_OK ){ *pRv = rv; rc = TDE_NOKEYSTORE; goto scan_out; }
    if( aGet[0].ulValueLen>=sizeof(zLab) ) continue;
    zLab[aGet[0].ulValueLen] = 0;
    if( strncmp(zLab, k->zLabel, nLab)!=0 || zLab[nLab]!='-' ) continue;
    if( !p11ParseStamp(zLab+nLab+1, &us) ) continue;
    memcpy(aNew[nNew].zId, zLab, strlen(zLab)+1);
    aNew[nNew].h = aAll[i];
    aNew[nNew].createdUs = us;
    aNew[nNew].bRetired = bEnc==P11_FALSE;
    nNew++;
  }
  if( nNew>1 ) qsort(aNew, (size_t)nNew, sizeof(*aNew), p11KeyCmp);
  free(k->aKey);
  k->aKey = aNew;
  k->nKey = nNew;
  aNew = 0;

scan_out:
  free(aNew);
  free(aAll);
  return rc;
}

/* Copy a blank-padded token label into z (NUL-terminated, trailing blanks
** removed). */
static void p11TokenLabel(const unsigned char *aLabel, char *z){
  int n = 32;
  while( n>0 && (aLabel[n-1]==' ' || aLabel[n-1]==0) ) n--;
  memcpy(z, aLabel, (size_t)n);
  z[n] = 0;
}

/*
** Make sure k has a logged-in session in this process and a fresh key
** list (caller holds the mutex).  Finds the slot by token label (slot
** numbers change), opens a read-write session and logs in with the PIN.
*/
static int p11Connect(Pkcs11 *k){
  P11_FUNCTION_LIST *pF;
  P11_SLOT_ID *aSlot = 0;
  P11_ULONG nSlot = 0, i;
  P11_TOKEN_INFO ti;
  char zSeen[256];
  size_t nSeen = 0;
  int bFound = 0, rc = TDE_OK;
  P11_RV rv;

  if( k->pid!=getpid() ){
    p11Drop(k);                 /* child after fork(): parent's handles */
  }
  if( k->bSession ) return TDE_OK;
  pthread_mutex_lock(&p11ModMutex);
  rc = p11ModuleInit(k->pMod);
  pthread_mutex_unlock(&p11ModMutex);
  if( rc!=TDE_OK ) return rc;
  pF = k->pMod->pF;

  zSeen[0] = 0;
  rv = P11(pF, C_GetSlotList)(P11_TRUE, 0, &nSlot);
  if( rv==CKR_OK && nSlot>0 ){
    aSlot = calloc(nSlot, sizeof(*aSlot));
    if( aSlot==0 ) return tdeErr(TDE_NOMEM, "pkcs11: out of memory");
    rv = P11(pF, C_GetSlotList)(P11_TRUE, aSlot, &nSlot);
  }
  if( rv!=CKR_OK ){
    rc = tdeErr(TDE_NOKEYSTORE, "pkcs11 module %s: C_GetSlotList failed: %s",
                k->zModule, p11RvName(rv));
    goto connect_out;
  }
  for(i=0; i<nSlot && !bFound; i++){
    char zTok[33];
    if( P11(pF, C_GetTokenInfo)(aSlot[i], &ti)!=CKR_OK ) continue;
    p11TokenLabel(ti.label, zTok);
    if( strcmp(zTok, k->zToken)==0 ){
      bFound = 1;
      break;
    }
    if( nSeen+strlen(zTok)+5 < sizeof(zSeen) ){
      nSeen += (size_t)snprintf(zSeen+nSeen, sizeof(zSeen)-nSeen, "%s'%s'", nSeen ? ", " : "", zTok);
    }
  }
  if( !bFound ){
    rc = tdeErr(TDE_NOKEYSTORE, "pkcs11 module %s: no token labelled '%s' (tokens present: %s)",
                k->zModule, k->zToken, zSeen[0] ? zSeen : "none");
    goto connect_out;
  }
  if( ti.flags & CKF_USER_PIN_LOCKED ){
    rc = tdeErr(TDE_BADPASSWORD, "pkcs11 token '%s': the user PIN is locked (too many "
                "wrong PINs); the security officer must unlock it", k->zToken);
    goto connect_out;
  }
  if( (ti.flags & CKF_LOGIN_REQUIRED) && !(ti.flags & CKF_USER_PIN_INITIALIZED) ){
    rc = tdeErr(TDE_NOKEYSTORE, "pkcs11 token '%s': the user PIN is not initialised", k->zToken);
    goto connect_out;
  }
  rv = P11(pF, C_OpenSession)(aSlot[i], CKF_SERIAL_SESSION | CKF_RW_SESSION, 0, 0, &k->hSession);
  if( rv!=CKR_OK ){
    rc = tdeErr(TDE_NOKEYSTORE, "pkcs11 token '%s': C_OpenSession failed: %s",
                k->zToken, p11RvName(rv));
    goto connect_out;
  }
  k->bSession = 1;
  k->pid = getpid();
  if( (ti.flags & CKF_LOGIN_REQUIRED) || k->zPin ){
    if( k->zPin==0 && !(ti.flags & CKF_PROTECTED_AUTHENTICATION_PATH) ){
      rc = tdeErr(TDE_BADPASSWORD, "pkcs11 token '%s' needs the user PIN (set password_file "
                  "or password_env in the config, or pass one)", k->zToken);
      goto connect_out;
    }
    rv = P11(pF, C_Login)(k->hSession, CKU_USER, (unsigned char *)k->zPin,
                          k->zPin ? (P11_ULONG)k->nPin : 0);
    if( rv==CKR_PIN_INCORRECT || rv==CKR_PIN_INVALID || rv==CKR_PIN_LEN_RANGE ){
      P11_TOKEN_INFO ti2;
      int bFinal = P11(pF, C_GetTokenInfo)(aSlot[i], &ti2)==CKR_OK
                && (ti2.flags & (CKF_USER_PIN_FINAL_TRY|CKF_USER_PIN_LOCKED));
      rc = tdeErr(TDE_BADPASSWORD, "pkcs11 token '%s': PIN incorrect%s", k->zToken,
                  bFinal ? " (the token allows at most one more try, or is now locked)" : "");
      goto connect_out;
    }
    if( rv==CKR_PIN_LOCKED ){
      rc = tdeErr(TDE_BADPASSWORD, "pkcs11 token '%s': the user PIN is locked (too many "
                  "wrong PINs); the security officer must unlock it", k->zToken);
      goto connect_out;
    }
    if( rv==CKR_PIN_EXPIRED ){
      rc = tdeErr(TDE_BADPASSWORD, "pkcs11 token '%s': the user PIN has expired; set a new "
                  "one with the token's tools", k->zToken);
      goto connect_out;
    }
    if( rv!=CKR_OK && rv!=CKR_USER_ALREADY_LOGGED_IN ){
      rc = tdeErr(TDE_NOKEYSTORE, "pkcs11 token '%s': C_Login failed: %s",
                  k->zToken, p11RvName(rv));
      goto connect_out;
    }
  }
  {
    P11_RV rvScan;
    rc = p11Scan(k, &rvScan);
    if( rc!=TDE_OK && rvScan!=CKR_OK ){
      rc = tdeErr(TDE_NOKEYSTORE, "pkcs11 token '%s': listing keys failed: %s",
                  k->zToken, p11RvName(rvScan));
    }
  }

connect_out:
  if( rc!=TDE_OK ) p11Drop(k);
  free(aSlot);
  return rc;
}

/* Connect and re-read the key list, reconnecting once if the session was
** lost (token removed and back, module restarted). */
static int p11Refresh(Pkcs11 *k){
  P11_RV rv = CKR_OK;
  int rc, nTry;
  for(nTry=0; nTry<2; nTry++){
    int bNew = !k->bSession || k->pid!=getpid();
    rc = p11Connect(k);
    if( rc!=TDE_OK ) return rc;
    if( bNew ) return TDE_OK;        /* p11Connect just scanned */
    rc = p11Scan(k, &rv);
    if( rc==TDE_OK ) return TDE_OK;
    if( rv==CKR_OK ) return rc;
    if( !p11RvLostSession(rv) ) break;
    p11Drop(k);
  }
  return tdeErr(TDE_NOKEYSTORE, "pkcs11 token '%s': listing keys failed: %s",
                k->zToken, p11RvName(rv));
}

static P11Key *p11Find(Pkcs11 *k, const char *zKeyId){
  int i;
  for(i=0; i<k->nKey; i++){
    if( strcmp(k->aKey[i].zId, zKeyId)==0 ) return &k->aKey[i];
  }
  return 0;
}

/* Find a key, re-reading the token once on a miss (a key another process
** created) or when the session is gone (fork, token lost: reconnect).
** Caller holds the mutex.  NULL with *pRc TDE_OK: not on the token; NULL
** with an error: the token could not be reached (detail in tdeErr). */
static P11Key *p11Lookup(Pkcs11 *k, const char *zKeyId, int *pRc){
  P11Key *pKey = k->pid==getpid() && k->bSession ? p11Find(k, zKeyId) : 0;
  *pRc = TDE_OK;
  if( pKey ) return pKey;
  *pRc = p11Refresh(k);
  return *pRc==TDE_OK ? p11Find(k, zKeyId) : 0;
}

/* Newest active key, or NULL. */
static P11Key *p11Current(Pkcs11 *k){
  int i;
  for(i=k->nKey-1; i>=0 && k->aKey[i].bRetired; i--){}
  return i>=0 ? &k->aKey[i] : 0;
}

/*
** Generate a new master key on the token (caller holds the mutex and a
** fresh key list).  Its creation time is now, or one microsecond after the
** newest key if the clock says otherwise, so it sorts as the newest.
*/
static int p11Generate(Pkcs11 *k, char *zId){
  P11_FUNCTION_LIST *pF = k->pMod->pF;
  P11_ULONG cls = CKO_SECRET_KEY, kt = CKK_AES, nLen = P11_KEY_BYTES;
  P11_BBOOL bT = P11_TRUE, bF = P11_FALSE;
  P11_MECHANISM mech = { CKM_AES_KEY_GEN, 0, 0 };
  char zLab[TDE_KEYID_MAX + 1];
  char zStamp[64];
  char aDate[8];
  struct timespec ts;
  int64_t us;
  P11_OBJECT_HANDLE h = 0;
  P11Key *aMore;
  P11_RV rv;
  P11_ATTRIBUTE aT[] = {
    { CKA_CLASS, &cls, sizeof(cls) },
    { CKA_KEY_TYPE, &kt, sizeof(kt) },
    { CKA_VALUE_LEN, &nLen, sizeof(nLen) },
    { CKA_TOKEN, &bT, sizeof(bT) },
    { CKA_PRIVATE, &bT, sizeof(bT) },
    { CKA_SENSITIVE, &bT, sizeof(bT) },
    { CKA_EXTRACTABLE, &bF, sizeof(bF) },
    { CKA_MODIFIABLE, &bT, sizeof(bT) },   /* retirement clears CKA_ENCRYPT */
    { CKA_ENCRYPT, &bT, sizeof(bT) },
    { CKA_DECRYPT, &bT, sizeof(bT) },
    { CKA_WRAP, &bF, sizeof(bF) },
    { CKA_UNWRAP, &bF, sizeof(bF) },
    { CKA_SIGN, &bF, sizeof(bF) },
    { CKA_VERIFY, &bF, sizeof(bF) },
    { CKA_DERIVE, &bF, sizeof(bF) },
    { CKA_LABEL, zLab, 0 },
    { CKA_START_DATE, aDate, sizeof(aDate) },
  };

  clock_gettime(CLOCK_REALTIME, &ts);
  us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
  if( k->nKey>0 && us<=k->aKey[k->nKey-1].createdUs ) us = k->aKey[k->nKey-1].createdUs + 1;
  p11Stamp(us, zStamp);
  snprintf(zLab, sizeof(zLab), "%s-%.*s", k->zLabel, P11_STAMP_LEN, zStamp);
  aT[TDE_ARRAY_SIZE(aT)-2].ulValueLen = (P11_ULONG)strlen(zLab);
  memcpy(aDate, zStamp, 8);             /* CK_DATE: "YYYYMMDD" */
  if( k->nKey>=P11_MAX_KEYS ){
    return tdeErr(TDE_RANGE, "pkcs11 token '%s': at most %d master keys", k->zToken, P11_MAX_KEYS);
  }
  rv = P11(pF, C_GenerateKey)(k->hSession, &mech, aT, (P11_ULONG)TDE_ARRAY_SIZE(aT), &h);
  if( rv!=CKR_OK ){
    if( p11RvLostSession(rv) ) p11Drop(k);
    return tdeErr(rv==CKR_TOKEN_WRITE_PROTECTED || rv==CKR_SESSION_READ_ONLY ? TDE_IO : TDE_ERROR,
                  "pkcs11 token '%s': creating an AES-256 key failed: %s", k->zToken, p11RvName(rv));
  }
  aMore = realloc(k->aKey, (size_t)(k->nKey+1)*sizeof(*aMore));
  if( aMore==0 ){
    /* The key exists on the token; the next scan finds it. */
    return tdeErr(TDE_NOMEM, "pkcs11: out of memory");
  }
  k->aKey = aMore;
  memset(&k->aKey[k->nKey], 0, sizeof(P11Key));
  memcpy(k->aKey[k->nKey].zId, zLab, strlen(zLab)+1);
  k->aKey[k->nKey].h = h;
  k->aKey[k->nKey].createdUs = us;
  k->nKey++;
  memcpy(zId, zLab, strlen(zLab)+1);
  tdeLog(TDE_LOG_INFO, "pkcs11 token '%s': new master key %s", k->zToken, zLab);
  return TDE_OK;
}

/* ---- methods ----------------------------------------------------------------- */

static int p11Create(const TdeConfig *cfg, const char *zPassword, char *zKeyId, size_t nKeyId);
static int p11Open(const TdeConfig *cfg, const char *zPassword, TdeKeystore **pp);
static void p11Close(TdeKeystore *p);
static int p11Describe(TdeKeystore *p, char *zLoc, size_t nLoc, int *pbAutoLogin);
static int p11CurrentKey(TdeKeystore *p, char *zKeyId, size_t nKeyId);
static int p11HasKey(TdeKeystore *p, const char *zKeyId);
static int p11NewKey(TdeKeystore *p, char *zKeyId, size_t nKeyId);
static int p11List(TdeKeystore *p, int (*xCb)(void *, const TdeKeyInfo *), void *pArg);
static int p11Wrap(TdeKeystore *p, const char *zKeyId,
                   const uint8_t *aDek, size_t nDek,
                   const uint8_t *aAad, size_t nAad,
                   uint8_t *aOut, size_t nOut, size_t *pnOut, uint8_t *pMech);
static int p11Unwrap(TdeKeystore *p, const char *zKeyId, uint8_t mech,
                     const uint8_t *aIn, size_t nIn,
                     const uint8_t *aAad, size_t nAad,
                     uint8_t *aDek, size_t nDek);
static int p11Retire(TdeKeystore *p, const char *zKeyId);
static int p11AnchorGet(TdeKeystore *p, const char *zName, uint8_t *aOut, size_t nOut, size_t *pnOut);
static int p11AnchorSet(TdeKeystore *p, const char *zName, const uint8_t *aIn, size_t nIn);

static const char *const azPkcs11Keys[] = {
  "pkcs11_module", "pkcs11_token_label", "pkcs11_key_label", 0
};

/* The provider's own keys (keystore.h: xCheckConfig). */
static int p11CheckConfig(const TdeConfig *cfg, const char *zName){
  return tdeKeystoreCheckKeys(cfg, zName, azPkcs11Keys);
}

const tde_keystore_methods tdePkcs11Methods = {
  3,                              /* iVersion */
  (int)sizeof(tde_keystore_methods), /* szStruct */
  "pkcs11",                       /* zName */
  TDE_KS_PKCS11,                  /* typeId */
  azPkcs11Keys,                   /* azKeys */
  p11Create,                      /* xCreate */
  p11Open,                        /* xOpen */
  p11Close,                       /* xClose */
  p11Describe,                    /* xDescribe */
  p11CurrentKey,                  /* xCurrentKey */
  p11HasKey,                      /* xHasKey */
  p11NewKey,                      /* xNewKey */
  p11List,                        /* xList */
  p11Wrap,                        /* xWrap */
  p11Unwrap,                      /* xUnwrap */
  p11Retire,                      /* xRetire */
  p11CheckConfig,                 /* xCheckConfig */
  p11AnchorGet,                   /* xAnchorGet */
  p11AnchorSet,                   /* xAnchorSet */
};

/*
** Open: load the module, find the token, log in, list the master keys.
** zPassword is the user PIN (NULL: none; fine for a token with a protected
** authentication path or one that needs no login).  It is copied into
** locked memory for later logins (after fork or token loss) and wiped at
** close.
*/
static int p11Open(const TdeConfig *cfg, const char *zPassword, TdeKeystore **pp){
  Pkcs11 *k = 0;
  int bMutex = 0;
  int rc;

  if( pp==0 ) return tdeErr(TDE_MISUSE, "pkcs11: no output pointer");
  *pp = 0;
  k = calloc(1, sizeof(*k));
  if( k==0 ) return tdeErr(TDE_NOMEM, "pkcs11: out of memory");
  k->base.pMethods = &tdePkcs11Methods;
  k->pid = getpid();
  rc = p11Config(cfg, k);
  if( rc!=TDE_OK ) goto open_out;
  if( zPassword ){
    k->nPin = strlen(zPassword);
    k->zPin = tdeSecureAlloc(k->nPin+1);
    if( k->zPin==0 ){ rc = tdeErr(TDE_NOMEM, "pkcs11: out of memory"); goto open_out; }
    memcpy(k->zPin, zPassword, k->nPin+1);
  }
  rc = tdeConfigCopyAudit(cfg, &k->pAudit);
  if( rc!=TDE_OK ) goto open_out;
  if( pthread_mutex_init(&k->mutex, 0)!=0 ){
    rc = tdeErr(TDE_NOMEM, "pkcs11: cannot create mutex");
    goto open_out;
  }
  bMutex = 1;
  rc = p11ModuleAcquire(k->zModule, &k->pMod);
  if( rc!=TDE_OK ) goto open_out;
  rc = p11Connect(k);
  if( rc!=TDE_OK ) goto open_out;
  *pp = &k->base;
  k = 0;

open_out:
  if( k ){
    if( k->pMod ){
      p11Drop(k);
      p11ModuleRelease(k->pMod);
    }
    if( bMutex ) pthread_mutex_destroy(&k->mutex);
    tdeSecureFree(k->zPin, k->zPin ? k->nPin+1 : 0);
    tdeConfigFree(k->pAudit);
    free(k->aKey);
    free(k);
  }
  return rc;
}

static void p11Close(TdeKeystore *p){
  Pkcs11 *k = (Pkcs11 *)p;
  if( k==0 ) return;
  p11Drop(k);
  p11ModuleRelease(k->pMod);
  pthread_mutex_destroy(&k->mutex);
  tdeSecureFree(k->zPin, k->zPin ? k->nPin+1 : 0);
  tdeConfigFree(k->pAudit);
  free(k->aKey);
  free(k);
}

/*
** Create: the token must exist and be initialised (with the vendor's tools
** or softhsm2-util); this makes the first master key.  TDE_EXISTS if the
** token already holds keys with this key label.  Audited as
** keystore_create.
*/
static int p11Create(const TdeConfig *cfg, const char *zPassword, char *zKeyId, size_t nKeyId){
  TdeKeystore *pKs = 0;
  Pkcs11 *k;
  char zDetail[PATH_MAX + 96];
  int rc;

  zDetail[0] = 0;
  if( zKeyId==0 || nKeyId<TDE_KEYID_MAX+1 ){
    rc = tdeErr(TDE_RANGE, "pkcs11: key id buffer needs %d bytes", TDE_KEYID_MAX+1);
    goto create_out;
  }
  zKeyId[0] = 0;
  rc = p11Open(cfg, zPassword, &pKs);
  if( rc!=TDE_OK ) goto create_out;
  k = (Pkcs11 *)pKs;
  snprintf(zDetail, sizeof(zDetail), "token '%s' in %s", k->zToken, k->zModule);
  pthread_mutex_lock(&k->mutex);
  if( k->nKey>0 ){
    rc = tdeErr(TDE_EXISTS, "pkcs11 token '%s' already holds master keys labelled '%s-*'; "
                "refusing to create another keystore there", k->zToken, k->zLabel);
  }else{
    rc = p11Generate(k, zKeyId);
  }
  pthread_mutex_unlock(&k->mutex);

create_out:
  if( cfg ) p11Audit(cfg, "keystore_create", rc==TDE_OK ? zKeyId : 0, rc, zDetail[0] ? zDetail : 0);
  if( pKs ) p11Close(pKs);
  return rc;
}

static int p11Describe(TdeKeystore *p, char *zLoc, size_t nLoc, int *pbAutoLogin){
  Pkcs11 *k = (Pkcs11 *)p;
  int n;
  if( k==0 ) return tdeErr(TDE_MISUSE, "pkcs11: no handle");
  if( pbAutoLogin ) *pbAutoLogin = k->zPin==0;
  if( zLoc==0 ) return TDE_OK;
  n = snprintf(zLoc, nLoc, "token '%s' in %s", k->zToken, k->zModule);
  if( n<0 || (size_t)n>=nLoc ){
    if( nLoc ) zLoc[0] = 0;
    return tdeErr(TDE_RANGE, "pkcs11: location buffer too small");
  }
  return TDE_OK;
}

/* Re-reads the token (a key another process created or retired counts);
** called at database open and after header changes, never per page. */
static int p11CurrentKey(TdeKeystore *p, char *zKeyId, size_t nKeyId){
  Pkcs11 *k = (Pkcs11 *)p;
  P11Key *pKey;
  int rc;
  if( k==0 || zKeyId==0 || nKeyId==0 ) return tdeErr(TDE_MISUSE, "pkcs11: bad arguments");
  zKeyId[0] = 0;
  pthread_mutex_lock(&k->mutex);
  rc = p11Refresh(k);
  if( rc==TDE_OK ){
    pKey = p11Current(k);
    if( pKey==0 ){
      rc = tdeErr(TDE_NOKEY, "pkcs11 token '%s' holds no active master key labelled '%s-*' "
                  "(create one: sqlite-tde keystore create)", k->zToken, k->zLabel);
    }else if( strlen(pKey->zId)>=nKeyId ){
      rc = tdeErr(TDE_RANGE, "pkcs11: key id buffer too small");
    }else{
      memcpy(zKeyId, pKey->zId, strlen(pKey->zId)+1);
    }
  }
  pthread_mutex_unlock(&k->mutex);
  return rc;
}

static int p11HasKey(TdeKeystore *p, const char *zKeyId){
  Pkcs11 *k = (Pkcs11 *)p;
  int bHas, rc;
  if( k==0 || zKeyId==0 ) return 0;
  pthread_mutex_lock(&k->mutex);
  bHas = p11Lookup(k, zKeyId, &rc)!=0;
  pthread_mutex_unlock(&k->mutex);
  if( rc!=TDE_OK ){
    tdeLog(TDE_LOG_WARNING, "%s", tde_last_error());
    tdeErrClear();
  }
  return bHas;
}

static int p11NewKey(TdeKeystore *p, char *zKeyId, size_t nKeyId){
  Pkcs11 *k = (Pkcs11 *)p;
  char zNew[TDE_KEYID_MAX + 1];
  int rc;
  zNew[0] = 0;
  if( k==0 ) return tdeErr(TDE_MISUSE, "pkcs11: no handle");
  if( zKeyId==0 || nKeyId<TDE_KEYID_MAX+1 ){
    return tdeErr(TDE_RANGE, "pkcs11: key id buffer needs %d bytes", TDE_KEYID_MAX+1);
  }
  zKeyId[0] = 0;
  pthread_mutex_lock(&k->mutex);
  rc = p11Refresh(k);
  if( rc==TDE_OK ) rc = p11Generate(k, zNew);
  pthread_mutex_unlock(&k->mutex);
  if( rc==TDE_OK ) memcpy(zKeyId, zNew, strlen(zNew)+1);
  p11Audit(k->pAudit, "master_key_create", zNew, rc, 0);
  return rc;
}

/* Callbacks run on a copy, without the mutex. */
static int p11List(TdeKeystore *p, int (*xCb)(void *, const TdeKeyInfo *), void *pArg){
  Pkcs11 *k = (Pkcs11 *)p;
  TdeKeyInfo *aInfo = 0;
  int nInfo = 0, i, rc;
  if( k==0 || xCb==0 ) return tdeErr(TDE_MISUSE, "pkcs11: bad arguments");
  pthread_mutex_lock(&k->mutex);
  rc = p11Refresh(k);
  if( rc==TDE_OK && k->nKey>0 ){
    aInfo = calloc((size_t)k->nKey, sizeof(*aInfo));
    if( aInfo==0 ){
      rc = tdeErr(TDE_NOMEM, "pkcs11: out of memory");
    }else{
      nInfo = k->nKey;
      for(i=0; i<nInfo; i++){
        memcpy(aInfo[i].zId, k->aKey[i].zId, sizeof(aInfo[i].zId));
        aInfo[i].created = k->aKey[i].createdUs / 1000000;
        aInfo[i].bRetired = k->aKey[i].bRetired;
      }
    }
  }
  pthread_mutex_unlock(&k->mutex);
  for(i=0; i<nInfo; i++){
    if( xCb(pArg, &aInfo[i]) ) break;
  }
  free(aInfo);
  return rc;
}

/*
** One single-part AES-GCM C_Encrypt or C_Decrypt (bEncrypt) of aIn under
** key h, output into aOut[nOut]; *pnOut the length produced.  The size is
** asked first; an answer larger than nOut closes the session so that no
** operation stays active on it.  Caller holds the mutex and a session.
*/
static P11_RV p11Gcm(Pkcs11 *k, int bEncrypt, P11_OBJECT_HANDLE h, uint8_t *aIv,
                     const uint8_t *aAad, size_t nAad, const uint8_t *aIn, size_t nIn,
                     uint8_t *aOut, size_t nOut, size_t *pnOut){
  P11_FUNCTION_LIST *pF = k->pMod->pF;
  P11_GCM_PARAMS gcm;
  P11_MECHANISM mech;
  P11_ULONG n = 0;
  P11_RV rv;

  *pnOut = 0;
  memset(&gcm, 0, sizeof(gcm));
  gcm.pIv = aIv;
  gcm.ulIvLen = P11_IV;
  gcm.ulIvBits = P11_IV * 8;
  gcm.pAAD = (unsigned char *)aAad;
  gcm.ulAADLen = (P11_ULONG)nAad;
  gcm.ulTagBits = P11_TAG * 8;
  mech.mechanism = CKM_AES_GCM;
  mech.pParameter = &gcm;
  mech.ulParameterLen = sizeof(gcm);
  rv = bEncrypt ? P11(pF, C_EncryptInit)(k->hSession, &mech, h)
                : P11(pF, C_DecryptInit)(k->hSession, &mech, h);
  if( rv!=CKR_OK ) return rv;
  /* From here an operation is active until a call ends it. */
  rv = bEncrypt ? P11(pF, C_Encrypt)(k->hSession, (unsigned char *)aIn, (P11_ULONG)nIn, 0, &n)
                : P11(pF, C_Decrypt)(k->hSession, (unsigned char *)aIn, (P11_ULONG)nIn, 0, &n);
  if( rv!=CKR_OK ) return rv;            /* an error ends the operation */
  if( n>nOut ){
    p11Drop(k);                          /* closing the session ends it */
    return CKR_BUFFER_TOO_SMALL;
  }
  n = (P11_ULONG)nOut;
  rv = bEncrypt ? P11(pF, C_Encrypt)(k->hSession, (unsigned char *)aIn, (P11_ULONG)nIn, aOut, &n)
                : P11(pF, C_Decrypt)(k->hSession, (unsigned char *)aIn, (P11_ULONG)nIn, aOut, &n);
  if( rv==CKR_BUFFER_TOO_SMALL ){
    p11Drop(k);
    return rv;
  }
  if( rv==CKR_OK ) *pnOut = n;
  return rv;
}

/* blob = iv(12) || AES-256-GCM(master key on the token, iv, aad; dek) || tag(16).
** The IV is fresh from OpenSSL's DRBG (no token round trip for it). */
static int p11Wrap(TdeKeystore *p, const char *zKeyId,
                   const uint8_t *aDek, size_t nDek,
                   const uint8_t *aAad, size_t nAad,
                   uint8_t *aOut, size_t nOut, size_t *pnOut, uint8_t *pMech){
  Pkcs11 *k = (Pkcs11 *)p;
  size_t nBlob = P11_IV + nDek + P11_TAG, nCt = 0;
  P11Key *pKey;
  P11_RV rv = CKR_OK;
  int rc = TDE_OK, nTry;

  if( pnOut ) *pnOut = 0;
  if( k==0 || zKeyId==0 || aDek==0 || aOut==0 || pnOut==0 || pMech==0 || (nAad && aAad==0) ){
    return tdeErr(TDE_MISUSE, "pkcs11: bad arguments to wrap");
  }
  if( nDek==0 || nBlob>TDE_WRAP_MAX ){
    return tdeErr(TDE_RANGE, "pkcs11: cannot wrap a %zu-byte key", nDek);
  }
  if( nOut<nBlob ){
    return tdeErr(TDE_RANGE, "pkcs11: wrap buffer too small (%zu bytes needed)", nBlob);
  }
  pthread_mutex_lock(&k->mutex);
  for(nTry=0; nTry<2; nTry++){
    pKey = p11Lookup(k, zKeyId, &rc);
    if( pKey==0 ){
      if( rc==TDE_OK ){
        rc = tdeErr(TDE_NOKEY, "pkcs11 token '%s': no master key '%s'", k->zToken, zKeyId);
      }
      break;
    }
    if( pKey->bRetired ){
      rc = tdeErr(TDE_NOKEY, "pkcs11 token '%s': master key '%s' is retired; wrap with "
                  "the current key", k->zToken, zKeyId);
      break;
    }
    rc = tdeRandom(aOut, P11_IV);
    if( rc!=TDE_OK ){ rc = tdeErr(rc, "pkcs11: random number generator failed"); break; }
    rv = p11Gcm(k, 1, pKey->h, aOut, aAad, nAad, aDek, nDek, aOut+P11_IV, nOut-P11_IV, &nCt);
    if( rv==CKR_OK ) break;
    if( !p11RvLostSession(rv) ) break;
    p11Drop(k);                 /* session or handle gone: reconnect once */
  }
  if( rc==TDE_OK && rv!=CKR_OK ){
    if( rv==CKR_KEY_FUNCTION_NOT_PERMITTED ){
      rc = tdeErr(TDE_NOKEY, "pkcs11 token '%s': master key '%s' may not encrypt "
                  "(retired)", k->zToken, zKeyId);
    }else{
      rc = tdeErr(p11RvLostSession(rv) ? TDE_NOKEYSTORE : TDE_CRYPTO,
                  "pkcs11 token '%s': wrapping with '%s' failed: %s",
                  k->zToken, zKeyId, p11RvName(rv));
    }
  }else if( rc==TDE_OK && nCt!=nDek+P11_TAG ){
    rc = tdeErr(TDE_CRYPTO, "pkcs11 token '%s': AES-GCM returned %zu bytes, expected %zu",
                k->zToken, nCt, nDek+P11_TAG);
  }
  pthread_mutex_unlock(&k->mutex);
  if( rc!=TDE_OK ){
    tdeWipe(aOut, nBlob);
    return rc;
  }
  *pnOut = nBlob;
  *pMech = TDE_MECH_AES256_GCM;
  return TDE_OK;
}

static int p11Unwrap(TdeKeystore *p, const char *zKeyId, uint8_t mech,
                     const uint8_t *aIn, size_t nIn,
                     const uint8_t *aAad, size_t nAad,
                     uint8_t *aDek, size_t nDek){
  Pkcs11 *k = (Pkcs11 *)p;
  uint8_t aIv[P11_IV];
  uint8_t *aTmp = 0;            /* secure: the data key passes through it */
  size_t nTmp = nDek + P11_TAG, nPt = 0;
  P11Key *pKey;
  P11_RV rv = CKR_OK;
  int rc = TDE_OK, nTry;

  if( k==0 || zKeyId==0 || aIn==0 || aDek==0 || (nAad && aAad==0) ){
    return tdeErr(TDE_MISUSE, "pkcs11: bad arguments to unwrap");
  }
  if( mech!=TDE_MECH_AES256_GCM ){
    return tdeErr(TDE_UNSUPPORTED, "pkcs11: wrapping mechanism %u not supported", (unsigned)mech);
  }
  if( nDek==0 || nIn!=P11_IV + nDek + P11_TAG ){
    return tdeErr(TDE_FORMAT, "pkcs11: wrapped key is %zu bytes, expected %zu",
                  nIn, (size_t)P11_IV + nDek + P11_TAG);
  }
  aTmp = tdeSecureAlloc(nTmp);
  if( aTmp==0 ) return tdeErr(TDE_NOMEM, "pkcs11: out of memory");
  memcpy(aIv, aIn, P11_IV);
  pthread_mutex_lock(&k->mutex);
  for(nTry=0; nTry<2; nTry++){
    pKey = p11Lookup(k, zKeyId, &rc);
    if( pKey==0 ){
      if( rc==TDE_OK ){
        rc = tdeErr(TDE_NOKEY, "pkcs11 token '%s': no master key '%s'", k->zToken, zKeyId);
      }
      break;
    }
    rv = p11Gcm(k, 0, pKey->h, aIv, aAad, nAad, aIn+P11_IV, nIn-P11_IV, aTmp, nTmp, &nPt);
    if( rv==CKR_OK ) break;
    if( !p11RvLostSession(rv) ) break;
    p11Drop(k);
  }
  if( rc==TDE_OK && rv!=CKR_OK ){
    if( rv==CKR_ENCRYPTED_DATA_INVALID || rv==CKR_ENCRYPTED_DATA_LEN_RANGE
     || rv==CKR_FUNCTION_FAILED || rv==CKR_GENERAL_ERROR ){
      /* Modules report a tag mismatch in different ways. */
      rc = tdeErr(TDE_AUTH, "pkcs11 token '%s': wrapped key does not authenticate under "
                  "master key '%s' (tampered, or bound to other data): %s",
                  k->zToken, zKeyId, p11RvName(rv));
    }else{
      rc = tdeErr(p11RvLostSession(rv) ? TDE_NOKEYSTORE : TDE_CRYPTO,
                  "pkcs11 token '%s': unwrapping with '%s' failed: %s",
                  k->zToken, zKeyId, p11RvName(rv));
    }
  }else if( rc==TDE_OK && nPt!=nDek ){
    rc = tdeErr(TDE_AUTH, "pkcs11 token '%s': unwrapped key has %zu bytes, expected %zu",
                k->zToken, nPt, nDek);
  }
  pthread_mutex_unlock(&k->mutex);
  if( rc==TDE_OK ){
    memcpy(aDek, aTmp, nDek);
  }else{
    tdeWipe(aDek, nDek);
  }
  tdeSecureFree(aTmp, nTmp);
  return rc;
}

/*
** Retire: set CKA_ENCRYPT false on the key object, so the token refuses to
** wrap with it while it still decrypts old wrappings.  The current key is
** refused (TDE_MISUSE).  Audited as master_key_retire.
*/
static int p11Retire(TdeKeystore *p, const char *zKeyId){
  Pkcs11 *k = (Pkcs11 *)p;
  P11Key *pKey;
  const char *zDetail = 0;
  P11_BBOOL bF = P11_FALSE;
  P11_ATTRIBUTE a = { CKA_ENCRYPT, &bF, sizeof(bF) };
  P11_RV rv;
  int rc;

  if( k==0 ) return tdeErr(TDE_MISUSE, "pkcs11: no handle");
  if( zKeyId==0 || zKeyId[0]==0 ){
    rc = tdeErr(TDE_MISUSE, "pkcs11: no master key id to retire");
    p11Audit(k->pAudit, "master_key_retire", 0, rc, 0);
    return rc;
  }
  pthread_mutex_lock(&k->mutex);
  rc = p11Refresh(k);
  if( rc!=TDE_OK ) goto retire_out;
  pKey = p11Find(k, zKeyId);
  if( pKey==0 ){
    rc = tdeErr(TDE_NOKEY, "pkcs11 token '%s': no master key '%s'", k->zToken, zKeyId);
  }else if( pKey->bRetired ){
    zDetail = "already retired";
  }else if( pKey==p11Current(k) ){
    rc = tdeErr(TDE_MISUSE, "pkcs11 token '%s': master key '%s' is the current key and "
                "cannot be retired; create a new master key (rotate) first", k->zToken, zKeyId);
  }else{
    rv = P11(k->pMod->pF, C_SetAttributeValue)(k->hSession, pKey->h, &a, 1);
    if( rv==CKR_OK ){
      pKey->bRetired = 1;
      tdeLog(TDE_LOG_INFO, "pkcs11 token '%s': master key %s retired", k->zToken, zKeyId);
    }else{
      rc = tdeErr(TDE_ERROR, "pkcs11 token '%s': retiring '%s' (CKA_ENCRYPT=false) failed: %s",
                  k->zToken, zKeyId, p11RvName(rv));
      if( p11RvLostSession(rv) ) p11Drop(k);
    }
  }
retire_out:
  pthread_mutex_unlock(&k->mutex);
  p11Audit(k->pAudit, "master_key_retire", zKeyId, rc, zDetail);
  return rc;
}

/* ---- freshness anchors: CKO_DATA objects (docs/FORMAT.md "External anchor") -- */

/* Each update creates a new object and then destroys the older ones
** (SoftHSM2 refuses C_SetAttributeValue on a data object's CKA_VALUE), so
** a crash between the two leaves two objects: CKA_APPLICATION carries a
** generation ("sqlite-tde anchor " and 16 hex digits), and the newest wins. */
#define P11_ANCHOR_APP    "sqlite-tde anchor "
#define P11_ANCHOR_MAXOBJ 16

typedef struct P11AnchorObj { P11_OBJECT_HANDLE h; uint64_t gen; } P11AnchorObj;

/* The token data objects labelled zName, with their generations (objects
** whose CKA_APPLICATION is not ours get generation 0).  Caller holds the
** mutex and a live session. */
static int p11AnchorFind(Pkcs11 *k, const char *zName, P11AnchorObj *aObj, int *pnObj, P11_RV *pRv){
  P11_FUNCTION_LIST *pF = k->pMod->pF;
  P11_ULONG cls = CKO_DATA;
  P11_BBOOL bTrue = P11_TRUE;
  P11_ATTRIBUTE aFind[3] = {
    { CKA_CLASS, &cls, sizeof(cls) },
    { CKA_TOKEN, &bTrue, sizeof(bTrue) },
    { CKA_LABEL, (void *)zName, strlen(zName) },
  };
  P11_OBJECT_HANDLE aH[P11_ANCHOR_MAXOBJ];
  P11_ULONG nGot = 0, i;
  P11_RV rv;
  *pnObj = 0;
  rv = P11(pF, C_FindObjectsInit)(k->hSession, aFind, 3);
  if( rv==CKR_OK ){
    rv = P11(pF, C_FindObjects)(k->hSession, aH, P11_ANCHOR_MAXOBJ, &nGot);
    P11(pF, C_FindObjectsFinal)(k->hSession);
  }
  *pRv = rv;
  if( rv!=CKR_OK ){
    return tdeErr(TDE_NOKEYSTORE, "pkcs11 token '%s': finding the anchor object failed: %s",
                  k->zToken, p11RvName(rv));
  }
  for(i=0; i<nGot; i++){
    char zApp[64];
    P11_ATTRIBUTE a = { CKA_APPLICATION, zApp, sizeof(zApp)-1 };
    uint64_t gen = 0;
    size_t nPre = sizeof(P11_ANCHOR_APP)-1;
    rv = P11(pF, C_GetAttributeValue)(k->hSession, aH[i], &a, 1);
    if( rv==CKR_OK && a.ulValueLen==nPre+16 && memcmp(zApp, P11_ANCHOR_APP, nPre)==0 ){
      for(size_t j=nPre; j<nPre+16; j++){
        char c = zApp[j];
        int d = c>='0' && c<='9' ? c-'0' : c>='a' && c<='f' ? c-'a'+10 : -1;
        if( d<0 ){ gen = 0; break; }
        gen = (gen<<4) | (uint64_t)d;
      }
    }
    aObj[i].h = aH[i];
    aObj[i].gen = gen;
  }
  *pnObj = (int)nGot;
  return TDE_OK;
}

/* Run xOp with the mutex held and a live session, reconnecting once if the
** session was lost (as p11Refresh does for key lookups). */
typedef int (*P11AnchorOp)(Pkcs11 *k, void *pArg, P11_RV *pRv);
static int p11AnchorRun(Pkcs11 *k, P11AnchorOp xOp, void *pArg){
  int rc = TDE_OK, nTry;
  pthread_mutex_lock(&k->mutex);
  for(nTry=0; nTry<2; nTry++){
    P11_RV rv = CKR_OK;
    rc = p11Connect(k);
    if( rc ) break;
    rc = xOp(k, pArg, &rv);
    if( rc==TDE_OK || !p11RvLostSession(rv) ) break;
    p11Drop(k);
  }
  pthread_mutex_unlock(&k->mutex);
  return rc;
}

typedef struct P11AnchorArg {
  const char *zName;
  uint8_t *aOut; size_t nOut; size_t *pnOut;      /* get */
  const uint8_t *aIn; size_t nIn;                 /* set */
} P11AnchorArg;

static int p11AnchorGetOp(Pkcs11 *k, void *pArg, P11_RV *pRv){
  P11AnchorArg *a = pArg;
  P11AnchorObj aObj[P11_ANCHOR_MAXOBJ];
  int nObj = 0, iBest = -1, i;
  int rc = p11AnchorFind(k, a->zName, aObj, &nObj, pRv);
  if( rc ) return rc;
  for(i=0; i<nObj; i++){
    if( aObj[i].gen && (iBest<0 || aObj[i].gen>aObj[iBest].gen) ) iBest = i;
  }
  if( iBest<0 && nObj ){
    return tdeErr(TDE_AUTH, "pkcs11 token '%s': data object %s was not made by sqlite-tde",
                  k->zToken, a->zName);
  }
  if( iBest<0 ) return TDE_NOTFOUND;
  {
    P11_ATTRIBUTE v = { CKA_VALUE, a->aOut, a->nOut };
    P11_RV rv = P11(k->pMod->pF, C_GetAttributeValue)(k->hSession, aObj[iBest].h, &v, 1);
    *pRv = rv;
    if( rv==CKR_BUFFER_TOO_SMALL ){
      return tdeErr(TDE_AUTH, "pkcs11 token '%s': anchor object %s is too large to be an "
                    "anchor record", k->zToken, a->zName);
    }
    if( rv!=CKR_OK ){
      return tdeErr(TDE_NOKEYSTORE, "pkcs11 token '%s': reading anchor object %s failed: %s",
                    k->zToken, a->zName, p11RvName(rv));
    }
    *a->pnOut = (size_t)v.ulValueLen;
  }
  return TDE_OK;
}

static int p11AnchorSetOp(Pkcs11 *k, void *pArg, P11_RV *pRv){
  P11AnchorArg *a = pArg;
  P11_FUNCTION_LIST *pF = k->pMod->pF;
  P11AnchorObj aObj[P11_ANCHOR_MAXOBJ];
  P11_OBJECT_HANDLE h = 0;
  uint64_t gen = 0;
  char zApp[64];
  int nObj = 0, i;
  int rc = p11AnchorFind(k, a->zName, aObj, &nObj, pRv);
  P11_RV rv;
  if( rc ) return rc;
  if( nObj==P11_ANCHOR_MAXOBJ ){
    return tdeErr(TDE_RANGE, "pkcs11 token '%s': too many data objects labelled %s",
                  k->zToken, a->zName);
  }
  for(i=0; i<nObj; i++) if( aObj[i].gen>gen ) gen = aObj[i].gen;
  snprintf(zApp, sizeof(zApp), "%s%016llx", P11_ANCHOR_APP, (unsigned long long)(gen+1));
  {
    P11_ULONG cls = CKO_DATA;
    P11_BBOOL bTrue = P11_TRUE;
    P11_ATTRIBUTE aT[7] = {
      { CKA_CLASS, &cls, sizeof(cls) },
      { CKA_TOKEN, &bTrue, sizeof(bTrue) },
      { CKA_PRIVATE, &bTrue, sizeof(bTrue) },
      { CKA_MODIFIABLE, &bTrue, sizeof(bTrue) },
      { CKA_LABEL, (void *)a->zName, strlen(a->zName) },
      { CKA_APPLICATION, zApp, strlen(zApp) },
      { CKA_VALUE, (void *)a->aIn, a->nIn },
    };
    rv = P11(pF, C_CreateObject)(k->hSession, aT, 7, &h);
  }
  *pRv = rv;
  if( rv!=CKR_OK ){
    return tdeErr(TDE_NOKEYSTORE, "pkcs11 token '%s': writing anchor object %s failed: %s",
                  k->zToken, a->zName, p11RvName(rv));
  }
  /* The new object is on the token: the older ones can go.  One that
  ** cannot be destroyed is harmless (the newest generation is read) but
  ** is logged; objects that are not ours are left alone. */
  for(i=0; i<nObj; i++){
    if( aObj[i].gen==0 ) continue;
    rv = P11(pF, C_DestroyObject)(k->hSession, aObj[i].h);
    if( rv!=CKR_OK ){
      tdeLog(TDE_LOG_WARNING, "pkcs11 token '%s': an older anchor object %s could not be "
             "destroyed: %s", k->zToken, a->zName, p11RvName(rv));
    }
  }
  return TDE_OK;
}

static int p11AnchorGet(TdeKeystore *p, const char *zName, uint8_t *aOut, size_t nOut, size_t *pnOut){
  P11AnchorArg a;
  memset(&a, 0, sizeof(a));
  a.zName = zName; a.aOut = aOut; a.nOut = nOut; a.pnOut = pnOut;
  *pnOut = 0;
  if( p==0 ) return tdeErr(TDE_MISUSE, "pkcs11: no handle");
  return p11AnchorRun((Pkcs11 *)p, p11AnchorGetOp, &a);
}

static int p11AnchorSet(TdeKeystore *p, const char *zName, const uint8_t *aIn, size_t nIn){
  P11AnchorArg a;
  memset(&a, 0, sizeof(a));
  a.zName = zName; a.aIn = aIn; a.nIn = nIn;
  if( p==0 ) return tdeErr(TDE_MISUSE, "pkcs11: no handle");
  return p11AnchorRun((Pkcs11 *)p, p11AnchorSetOp, &a);
}
