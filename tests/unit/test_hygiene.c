/*
** Secret hygiene in memory (issue 7, item 7): where do key bytes and the
** keystore password live in this process while encrypted databases are
** open, and is any of them left anywhere once they are closed?
**
** One process creates a password wallet (a random password of the form
** "tde-hyg-pw-<32 hex>", so it is in no binary), opens the keystore with
** that password through tde_keystore_open() and a second time through a
** configuration with password_file, then writes, rolls back, checkpoints
** and reads a WAL database and a rollback-journal database (page size
** 1024) through the tde VFS, with temp tables.  It learns the real secret
** bytes without any hook in the library:
**   - each database's data key (DEK) and WAL MAC key from its main file's
**     TdeFile (SQLITE_FCNTL_FILE_POINTER; unit tests link the static
**     library and see vfs_int.h);
**   - the header MAC keys and every page subkey, derived from the DEK
**     with the library's tdeHkdf/tdeHeaderMacKey and the session salts in
**     the page trailers of the databases and the WAL (docs/FORMAT.md);
**   - the wallet key W = Argon2id(password), the payload key and the
**     master key, by decrypting the wallet file as docs/WALLET.md says.
** A debug accessor in wallet.c would have needed a second, hook-enabled
** build of the library; decoding the documented file needs no library
** change, cannot leak in production, and checks the format on the way.
** The derivation runs in a forked child, so the test's own Argon2 and HKDF
** temporaries never touch the memory being scanned: the child sends the
** bytes through a pipe and the parent read()s them straight into the
** "vault", one mapping the scanner skips, which also holds the scan
** buffer.  The password handed to tde_keystore_create/open is read(2) into
** a mapping of its own, wiped and unmapped after the call.
**
** The scanner reads every readable mapping in /proc/self/smaps through
** /proc/self/mem, skipping [vvar*], [vsyscall], the vault, mappings with
** nothing resident or swapped, and in mappings above 1 GiB (the ASan
** shadow) the pages mincore() reports absent.  Each secret is searched
** whole and as two 16-byte halves of its random part, so a copy whose
** start a free() overwrote is still counted (as partial).  Every copy is
** classified by its mapping: "secure" = anonymous, locked (VmFlags lo) and
** MADV_DONTDUMP (dd), which only tdeSecureAlloc memory is in this process
** (checked on the DEK's and WAL MAC key's own mappings; under ASan, whose
** runtime makes mlock() a no-op, dd alone); "heap" = [heap] or another
** anonymous writable mapping; "other" = stack, files, everything else.
**
** Asserted while open: the DEKs, master key, wallet key, payload key and
** header MAC keys only in secure memory (DEK, master key and WAL MAC key
** at least once: the positive control), the password nowhere.  The page
** subkeys and WAL MAC keys are also held, as expanded keys, by OpenSSL's
** keyed contexts on the ordinary heap (src/cipher/page.c says so): counted
** and printed as a KNOWN ISSUE, failing under TDE_HYGIENE_STRICT=1, never
** allowed in "other".  After sqlite3_close and tde_keystore_close: no copy,
** whole or partial, of any of these secrets anywhere.  A canary left in
** malloc'd memory checks that the scanner sees the heap.
**
** What it cannot see: a copy in a freed heap chunk that was reused before
** the scan, registers, the kernel, and the temp-file keys (random, never
** stored).  One hazard found while writing it: an application that
** memcpy()s the password before calling tde_keystore_open() leaves it in
** vector registers, and the dynamic linker's lazy-binding trampoline
** (_dl_runtime_resolve_xsavec) saves them on the stack at the library's
** first call of an unresolved function; LD_BIND_NOW=1 or -z now avoids it.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <argon2.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vfs/vfs_int.h"
#include "keystore/keystore.h"

/* ---- the vault: the test's own copies, skipped by the scanner ------------ */

enum { S_PASSWORD, S_WALLETKEY, S_PAYLOADKEY, S_MASTER, S_DEK, S_WALMAC, S_HDRMAC,
       S_SUBKEY, S_CANARY, S_NKIND };
static const char *const azKind[S_NKIND] = {
  "password", "wallet key", "wallet payload key", "master key", "data key",
  "WAL MAC key", "header MAC key", "page subkey", "heap canary"
};

#define MAX_MASTER  8
#define MAX_SUBKEY  64
#define MAX_DB      2
#define MAX_SECRET  (3 + MAX_MASTER + 3*MAX_DB + MAX_SUBKEY + 1)
#define PW_PREFIX   11                        /* "tde-hyg-pw-" */
#define PW_LEN      (PW_PREFIX + 32)          /* then 32 hex digits */
#define SCAN_CHUNK  (1u << 20)
#define SCAN_SLACK  64                        /* >= longest needle */

/* What the child derives and sends. */
typedef struct ChildMsg {
  int rc;                                     /* 0 ok, else zErr says why */
  char zErr[200];
  int nMaster;
  uint8_t aMaster[MAX_MASTER][32];
  uint8_t aW[32], aPayload[32];
  int nDb;
  uint8_t aDek[MAX_DB][32], aWalMac[MAX_DB][32], aHdrMac[MAX_DB][32];
  int nSub;
  uint8_t aSub[MAX_SUBKEY][32];
} ChildMsg;

/* A secret is searched whole and as two halves of its random part (a
** whole key, the hex digits of the password), so a copy whose start was
** overwritten -- a freed heap chunk gets allocator pointers in its first
** 16 bytes -- is still found.  16 random bytes never match by chance. */
typedef struct Secret {
  int eKind;
  const uint8_t *p;                           /* into the vault */
  size_t n;
  const uint8_t *pRand;                       /* random part, inside p */
  size_t nRand;
} Secret;

typedef struct Vault {
  char zPw[PW_LEN + 1];
  uint8_t aCanary[32];
  ChildMsg msg;
  Secret aSec[MAX_SECRET];
  int nSec;
  uint8_t aBuf[SCAN_CHUNK + SCAN_SLACK];
} Vault;

static Vault *pVault;
static size_t nVaultMap;

/* ---- process memory map -------------------------------------------------- */

#define MAX_REGION 8192
typedef struct Region {
  uintptr_t iStart, iEnd;
  char zPerm[5];
  char zName[96];
  int bLocked, bDontDump, bAnon, bHeap;
  size_t nRssKb, nSwapKb;
} Region;

static Region aRegion[MAX_REGION];
static int nRegion;
static char zSmaps[16u << 20];                /* /proc/self/smaps text */

/* Read all of zPath into z (NUL-terminated); bytes read or -1. */
static long readAll(const char *zPath, char *z, size_t nMax){
  int fd = open(zPath, O_RDONLY | O_CLOEXEC);
  size_t n = 0;
  if( fd<0 ) return -1;
  for(;;){
    ssize_t k = read(fd, z+n, nMax-1-n);
    if( k<0 && errno==EINTR ) continue;
    if( k<=0 ) break;
    n += (size_t)k;
    if( n>=nMax-1 ){ close(fd); return -1; }
  }
  close(fd);
  z[n] = 0;
  return (long)n;
}

/* Parse /proc/self/smaps into aRegion.  Only static memory is used, so the
** parse does not change the map it reads. */
static void loadRegions(void){
  char *z, *zLine, *zNext;
  Region *pR = 0;
  if( readAll("/proc/self/smaps", zSmaps, sizeof(zSmaps))<0 ){
    fail_msg("cannot read /proc/self/smaps (or larger than %zu bytes)", sizeof(zSmaps));
  }
  nRegion = 0;
  for(zLine=zSmaps; *zLine; zLine=zNext){
    unsigned long a, b, iOff, iIno;
    char zPerm[8], zDev[16];
    int nUsed = 0;
    zNext = strchr(zLine, '\n');
    if( zNext ) *zNext++ = 0; else zNext = zLine + strlen(zLine);
    if( sscanf(zLine, "%lx-%lx %7s %lx %15s %lu %n", &a, &b, zPerm, &iOff, zDev, &iIno, &nUsed)>=6
     && nUsed>0 && strchr(zLine, ':')!=0 && zLine[0]!=' ' && strncmp(zLine, "VmFlags", 7)!=0 ){
      if( nRegion>=MAX_REGION ) fail_msg("more than %d mappings", MAX_REGION);
      pR = &aRegion[nRegion++];
      memset(pR, 0, sizeof(*pR));
      pR->iStart = a;
      pR->iEnd = b;
      memcpy(pR->zPerm, zPerm, 4);
      z = zLine + nUsed;
      while( *z==' ' ) z++;
      snprintf(pR->zName, sizeof(pR->zName), "%s", z);
      pR->bHeap = strcmp(pR->zName, "[heap]")==0;
      pR->bAnon = iIno==0 && (pR->zName[0]==0 || pR->bHeap || strncmp(pR->zName, "[anon", 5)==0);
    }else if( pR && strncmp(zLine, "Rss:", 4)==0 ){
      pR->nRssKb = strtoul(zLine+4, 0, 10);
    }else if( pR && strncmp(zLine, "Swap:", 5)==0 ){
      pR->nSwapKb = strtoul(zLine+5, 0, 10);
    }else if( pR && strncmp(zLine, "VmFlags:", 8)==0 ){
      pR->bLocked = strstr(zLine, " lo")!=0;
      pR->bDontDump = strstr(zLine, " dd")!=0;
    }
  }
  if( nRegion<10 ) fail_msg("only %d mappings in /proc/self/smaps", nRegion);
}

static const Region *regionOf(uintptr_t p){
  for(int i=0; i<nRegion; i++){
    if( p>=aRegion[i].iStart && p<aRegion[i].iEnd ) return &aRegion[i];
  }
  return 0;
}

/* ---- the scanner ---------------------------------------------------------- */

enum { C_SECURE, C_HEAP, C_OTHER, C_N };

typedef struct Scan {
  int nRegions;                 /* mappings read */
  int nSkipped;                 /* not readable, [vvar]/[vsyscall], the vault */
  uint64_t nBytes;              /* bytes read and searched */
  int aFull[MAX_SECRET][C_N];   /* whole copies per secret and class */
  int aHalf[MAX_SECRET][C_N];   /* half hits (a whole copy has two) */
  int aKind[S_NKIND][C_N];      /* copies, whole or partial, per kind */
  int nTotal;                   /* copies, whole or partial */
  int nPartial;                 /* of which partial */
  char zFirstOther[MAX_SECRET][160];   /* where the first "other" copy was */
} Scan;

/* AddressSanitizer's runtime turns mlock() into a no-op that succeeds, so
** in the ASan build "secure" means excluded from core dumps only (the
** normal build checks both flags). */
#if defined(__SANITIZE_ADDRESS__)
# define NEED_LOCKED 0
#else
# define NEED_LOCKED 1
#endif

static int classify(const Region *pR){
  if( (pR->bLocked || !NEED_LOCKED) && pR->bDontDump && pR->bAnon ) return C_SECURE;
  if( pR->bAnon && pR->zPerm[1]=='w' ) return C_HEAP;
  return C_OTHER;
}

/* Search one buffer read from address iBase (n bytes; occurrences must
** start before iBase+nOwn, the rest is overlap with the next chunk). */
static void scanBuffer(Scan *pS, const Region *pR, uintptr_t iBase,
                       const uint8_t *a, size_t n, size_t nOwn){
  int c = classify(pR);
  for(int i=0; i<pVault->nSec; i++){
   const Secret *pSec = &pVault->aSec[i];
   for(int w=0; w<3; w++){
    const uint8_t *pNeedle = w==0 ? pSec->p : w==1 ? pSec->pRand : pSec->pRand + pSec->nRand/2;
    size_t nNeedle = w==0 ? pSec->n : w==1 ? pSec->nRand/2 : pSec->nRand - pSec->nRand/2;
    const uint8_t *z = a;
    size_t nLeft = n;
    while( nLeft>=nNeedle ){
      const uint8_t *pHit = memmem(z, nLeft, pNeedle, nNeedle);
      size_t iOfs;
      if( pHit==0 ) break;
      iOfs = (size_t)(pHit - a);
      if( iOfs>=nOwn ) break;
      if( w==0 ) pS->aFull[i][c]++; else pS->aHalf[i][c]++;
      if( c==C_OTHER && pS->zFirstOther[i][0]==0 ){
        snprintf(pS->zFirstOther[i], sizeof(pS->zFirstOther[i]), "%#lx in %s %s",
                 (unsigned long)(iBase + iOfs), pR->zPerm, pR->zName[0] ? pR->zName : "(anonymous)");
      }
      nLeft = n - iOfs - 1;
      z = pHit + 1;
    }
   }
  }
}

/* Read [iStart, iEnd) of our own memory through fdMem and search it. */
static void scanRange(Scan *pS, int fdMem, const Region *pR, uintptr_t iStart, uintptr_t iEnd){
  uintptr_t i = iStart;
  while( i<iEnd ){
    size_t nOwn = iEnd-i < SCAN_CHUNK ? (size_t)(iEnd-i) : SCAN_CHUNK;
    size_t nWant = nOwn + ((iEnd-i-nOwn) < SCAN_SLACK ? (size_t)(iEnd-i-nOwn) : SCAN_SLACK);
    ssize_t k = pread(fdMem, pVault->aBuf, nWant, (off_t)i);
    if( k<0 && errno==EINTR ) continue;
    if( k<=0 ){
      /* A page that cannot be read (a file mapping past its end): step
      ** over it, counting nothing. */
      i = (i | 4095) + 1;
      continue;
    }
    if( (size_t)k<nOwn ) nOwn = (size_t)k;
    scanBuffer(pS, pR, i, pVault->aBuf, (size_t)k, nOwn);
    pS->nBytes += nOwn;
    i += nOwn;
  }
}

static void scanRegionResident(Scan *pS, int fdMem, const Region *pR){
  static unsigned char aVec[(1u << 30) / 4096];
  const uintptr_t nStep = (uintptr_t)1 << 30;
  if( pR->nSwapKb>0 ) fail_msg("mapping %s of %zu GiB has swapped pages: cannot scan it by residency",
                               pR->zName, (size_t)((pR->iEnd-pR->iStart)>>30));
  for(uintptr_t a=pR->iStart; a<pR->iEnd; a+=nStep){
    uintptr_t e = pR->iEnd-a < nStep ? pR->iEnd : a+nStep;
    size_t nPg = (size_t)((e-a)/4096), j = 0;
    if( mincore((void*)a, (size_t)(e-a), aVec)!=0 ){
      fail_msg("mincore(%#lx, %zu): %s", (unsigned long)a, (size_t)(e-a), strerror(errno));
    }
    while( j<nPg ){
      size_t k;
      if( (aVec[j] & 1)==0 ){ j++; continue; }
      for(k=j; k<nPg && (aVec[k] & 1); k++){}
      scanRange(pS, fdMem, pR, a + j*4096, a + k*4096);
      j = k;
    }
  }
}

/* Scan every readable mapping but the vault (bSmall: only those of at
** most 1 GiB, enough for the heap control and much faster under ASan). */
static void scanAll(Scan *pS, int bSmall){
  uintptr_t iV0 = (uintptr_t)pVault, iV1 = iV0 + nVaultMap;
  int fdMem;
  memset(pS, 0, sizeof(*pS));
  loadRegions();
  fdMem = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
  if( fdMem<0 ) fail_msg("cannot open /proc/self/mem: %s", strerror(errno));
  for(int i=0; i<nRegion; i++){
    const Region *pR = &aRegion[i];
    if( pR->zPerm[0]!='r' || strncmp(pR->zName, "[vvar", 5)==0
     || strcmp(pR->zName, "[vsyscall]")==0 || (pR->iStart<iV1 && pR->iEnd>iV0) ){
      pS->nSkipped++;
      continue;
    }
    if( pR->nRssKb==0 && pR->nSwapKb==0 ){
      /* Nothing of it was ever touched (or it is a file never read):
      ** it holds no byte this process wrote. */
      pS->nSkipped++;
      continue;
    }
    if( bSmall && pR->iEnd - pR->iStart > ((uintptr_t)1 << 30) ){
      pS->nSkipped++;
      continue;
    }
    pS->nRegions++;
    if( pR->iEnd - pR->iStart > ((uintptr_t)1 << 30) ){
      scanRegionResident(pS, fdMem, pR);
    }else{
      scanRange(pS, fdMem, pR, pR->iStart, pR->iEnd);
    }
  }
  close(fdMem);
  for(int i=0; i<pVault->nSec; i++){
    for(int c=0; c<C_N; c++){
      int nPart = pS->aHalf[i][c] - 2*pS->aFull[i][c];
      if( nPart<0 ) nPart = 0;
      pS->aKind[pVault->aSec[i].eKind][c] += pS->aFull[i][c] + nPart;
      pS->nTotal += pS->aFull[i][c] + nPart;
      pS->nPartial += nPart;
    }
  }
}

static void printScan(const char *zPhase, const Scan *pS){
  printf("# %s: %d mappings scanned (%d skipped), %llu bytes, %d occurrences (%d partial)\n",
         zPhase, pS->nRegions, pS->nSkipped, (unsigned long long)pS->nBytes, pS->nTotal,
         pS->nPartial);
  for(int k=0; k<S_NKIND; k++){
    int nSec = 0;
    for(int i=0; i<pVault->nSec; i++) nSec += pVault->aSec[i].eKind==k;
    if( nSec==0 ) continue;
    printf("#   %-18s x%-2d  secure %d, heap %d, other %d\n", azKind[k], nSec,
           pS->aKind[k][C_SECURE], pS->aKind[k][C_HEAP], pS->aKind[k][C_OTHER]);
  }
  for(int i=0; i<pVault->nSec; i++){
    if( pS->zFirstOther[i][0] ){
      printf("#   %s #%d outside secure memory and heap: %s\n",
             azKind[pVault->aSec[i].eKind], i, pS->zFirstOther[i]);
    }
  }
}

/* ---- setup: scratch folder, wallet, database ------------------------------ */

static char zScratch[1024];
static char zCfgApi[PATH_MAX];     /* no password source: password by API */
static char zCfgFile[PATH_MAX];    /* same wallet, password_file */
static char zPwFile[PATH_MAX];     /* hygiene.pw */
static char azDb[MAX_DB][PATH_MAX];   /* a WAL database, a rollback one */
static char zWallet[PATH_MAX];

static int rmOne(const char *zPath, const struct stat *pSt, int flag, struct FTW *pFtw){
  (void)pSt; (void)flag; (void)pFtw;
  return remove(zPath);
}

static void writeFd(const char *zPath, const void *p, size_t n){
  int fd = open(zPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if( fd<0 || write(fd, p, n)!=(ssize_t)n ) fail_msg("cannot write %s", zPath);
  close(fd);
}

static void writeText(const char *zPath, const char *zText){
  writeFd(zPath, zText, strlen(zText));
}

/* Call xFn with the password in a mapping of its own, then wipe and unmap
** it, so nothing of the test's making keeps the API's copy. */
static int withApiPassword(int (*xFn)(const char *zCfg, const char *zPw), const char *zCfg){
  char *zPw = mmap(0, 4096, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
  int rc;
  int fd;
  if( zPw==MAP_FAILED ) fail_msg("mmap");
  /* read(2) from the password file, not memcpy: see the lazy-binding
  ** hazard in the comment at the top. */
  fd = open(zPwFile, O_RDONLY | O_CLOEXEC);
  if( fd<0 || read(fd, zPw, PW_LEN)!=PW_LEN ) fail_msg("cannot read %s", zPwFile);
  close(fd);
  rc = xFn(zCfg, zPw);
  tdeWipe(zPw, 4096);
  munmap(zPw, 4096);
  return rc;
}

static int createWallet(const char *zCfg, const char *zPw){
  char zId[TDE_KEYID_MAX + 1];
  return tde_keystore_create(zCfg, zPw, zId, sizeof(zId));
}

static int openKeystore(const char *zCfg, const char *zPw){
  return tde_keystore_open(zCfg, zPw);
}

static void exec(sqlite3 *db, const char *zSql){
  char *zErr = 0;
  if( sqlite3_exec(db, zSql, 0, 0, &zErr)!=SQLITE_OK ){
    fail_msg("%s: %s", zSql, zErr ? zErr : "?");
  }
}

static int64_t queryInt(sqlite3 *db, const char *zSql){
  sqlite3_stmt *pStmt = 0;
  int64_t v = -1;
  if( sqlite3_prepare_v2(db, zSql, -1, &pStmt, 0)!=SQLITE_OK ) fail_msg("%s: %s", zSql, sqlite3_errmsg(db));
  if( sqlite3_step(pStmt)==SQLITE_ROW ) v = sqlite3_column_int64(pStmt, 0);
  sqlite3_finalize(pStmt);
  return v;
}

/* ---- the child: derive every secret, send it to the vault ---------------- */

static void addSalt(uint8_t aSalt[][12], int *pn, const uint8_t *t){
  static const uint8_t aZero[12];
  if( memcmp(t, aZero, 12)==0 ) return;
  for(int i=0; i<*pn; i++) if( memcmp(aSalt[i], t, 12)==0 ) return;
  if( *pn<MAX_SUBKEY ) memcpy(aSalt[(*pn)++], t, 12);
}

/* Session salts of every page trailer in database zDb and its WAL. */
static int collectSalts(const char *zDb, uint8_t aSalt[][12], int *pn, uint32_t pgsz,
                        char *zErr, size_t nErr){
  static uint8_t aPage[TDE_MAX_PAGE];
  static char zWal[PATH_MAX + 8];
  int fd = open(zDb, O_RDONLY | O_CLOEXEC);
  off_t iOfs;
  if( fd<0 ){ snprintf(zErr, nErr, "cannot open a database file"); return 1; }
  for(iOfs=TDE_HEADER_BYTES; pread(fd, aPage, pgsz, iOfs)==(ssize_t)pgsz; iOfs+=pgsz){
    addSalt(aSalt, pn, aPage + pgsz - TDE_TRAILER_SIZE);
  }
  close(fd);
  snprintf(zWal, sizeof(zWal), "%s-wal", zDb);
  fd = open(zWal, O_RDONLY | O_CLOEXEC);
  if( fd>=0 ){
    for(iOfs=32+24; pread(fd, aPage, pgsz, iOfs)==(ssize_t)pgsz; iOfs+=24+pgsz){
      addSalt(aSalt, pn, aPage + pgsz - TDE_TRAILER_SIZE);
    }
    close(fd);
  }
  return 0;
}

/* Decrypt the wallet file (docs/WALLET.md) with the password. */
static int decodeWallet(ChildMsg *m){
  static uint8_t a[4096], aPt[4096];
  int fd = open(zWallet, O_RDONLY | O_CLOEXEC);
  ssize_t n = fd>=0 ? read(fd, a, sizeof(a)) : -1;
  uint32_t nCt, nKey, t, mKib, p;
  size_t iOfs = 4;
  static const char zPayload[] = "sqlite-tde wallet payload v1";
  if( fd>=0 ) close(fd);
  if( n<92 || memcmp(a, "SQLTDEWL", 8)!=0 || a[10]!=1 ){
    snprintf(m->zErr, sizeof(m->zErr), "the wallet file is not a password wallet");
    return 1;
  }
  nCt = tdeGet32(a+12);
  t = tdeGet32(a+20); mKib = tdeGet32(a+24); p = tdeGet32(a+28);
  if( (size_t)n!=92+(size_t)nCt || nCt>sizeof(aPt) ){
    snprintf(m->zErr, sizeof(m->zErr), "wallet length %zd, payload %u", n, (unsigned)nCt);
    return 1;
  }
  if( argon2id_hash_raw(t, mKib, p, pVault->zPw, PW_LEN, a+32, 16, m->aW, 32)!=ARGON2_OK
   || tdeHkdf(m->aW, 32, 0, 0, (const uint8_t*)zPayload, sizeof(zPayload)-1, m->aPayload, 32)
   || tdeGcmOpen(m->aPayload, a+64, 12, a, 64, a+76, nCt, a+76+nCt, aPt) ){
    snprintf(m->zErr, sizeof(m->zErr), "wallet does not decrypt with the password");
    return 1;
  }
  nKey = tdeGet32(aPt);
  for(uint32_t i=0; i<nKey && i<MAX_MASTER; i++){
    size_t nId = aPt[iOfs];
    iOfs += 1 + nId + 8 + 1;
    if( iOfs+32>nCt ){ snprintf(m->zErr, sizeof(m->zErr), "wallet payload malformed"); return 1; }
    memcpy(m->aMaster[m->nMaster++], aPt+iOfs, 32);
    iOfs += 32;
  }
  return m->nMaster>0 ? 0 : 1;
}

static void childDerive(int fdOut, TdeFile **apFile, const uint32_t *aPgsz, int nDb){
  static ChildMsg m;
  static uint8_t aSalt[MAX_SUBKEY][12];
  static const char zSub[] = "sqlite-tde v1 page subkey";
  uint8_t aInfo[sizeof(zSub) - 1 + 12];
  memset(&m, 0, sizeof(m));
  m.rc = 1;
  memcpy(aInfo, zSub, sizeof(zSub) - 1);
  for(int d=0; d<nDb; d++){
    TdeDbKeys *k = apFile[d]->pDb->pKeys;
    int nSalt = 0;
    if( k==0 || k->aDek==0 || k->aWalMac==0 ){
      snprintf(m.zErr, sizeof(m.zErr), "a main file holds no data key");
      goto send;
    }
    memcpy(m.aDek[d], k->aDek, 32);
    memcpy(m.aWalMac[d], k->aWalMac, 32);
    if( tdeHeaderMacKey(m.aDek[d], k->hdr.dbid, m.aHdrMac[d]) ){
      snprintf(m.zErr, sizeof(m.zErr), "tdeHeaderMacKey failed");
      goto send;
    }
    m.nDb++;
    if( collectSalts(azDb[d], aSalt, &nSalt, aPgsz[d], m.zErr, sizeof(m.zErr)) ) goto send;
    for(int i=0; i<nSalt && m.nSub<MAX_SUBKEY; i++){
      memcpy(aInfo + sizeof(zSub) - 1, aSalt[i], 12);
      if( tdeHkdf(m.aDek[d], 32, 0, 0, aInfo, sizeof(aInfo), m.aSub[m.nSub++], 32) ){
        snprintf(m.zErr, sizeof(m.zErr), "tdeHkdf failed");
        goto send;
      }
    }
  }
  if( decodeWallet(&m) ) goto send;
  m.rc = 0;
send:
  if( write(fdOut, &m, sizeof(m))!=(ssize_t)sizeof(m) ) _exit(3);
  _exit(0);
}

/* The tde file of db's main database. */
static TdeFile *mainFile(sqlite3 *db){
  sqlite3_file *pF = 0;
  assert_int_equal(sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &pF), SQLITE_OK);
  assert_non_null(pF);
  assert_ptr_equal(pF->pMethods, &tdeIoMethods);
  assert_int_equal(((TdeFile*)pF)->eKind, TDE_KIND_MAIN);
  return (TdeFile*)pF;
}

/* Fork, derive in the child, read the result straight into the vault. */
static void learnSecrets(sqlite3 **aDb, int nDb){
  TdeFile *apFile[MAX_DB];
  uint32_t aPgsz[MAX_DB];
  int aFd[2], status = 0;
  size_t nGot = 0;
  pid_t pid;
  for(int d=0; d<nDb; d++){
    apFile[d] = mainFile(aDb[d]);
    aPgsz[d] = (uint32_t)queryInt(aDb[d], "PRAGMA page_size");
    assert_true(tdeValidPgsz(aPgsz[d]));
  }
  assert_int_equal(pipe(aFd), 0);
  fflush(stdout);
  pid = fork();
  assert_true(pid>=0);
  if( pid==0 ){
    close(aFd[0]);
    childDerive(aFd[1], apFile, aPgsz, nDb);
  }
  close(aFd[1]);
  while( nGot<sizeof(ChildMsg) ){
    ssize_t k = read(aFd[0], (uint8_t*)&pVault->msg + nGot, sizeof(ChildMsg) - nGot);
    if( k<0 && errno==EINTR ) continue;
    if( k<=0 ) break;
    nGot += (size_t)k;
  }
  close(aFd[0]);
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status)==0);
  assert_int_equal(nGot, sizeof(ChildMsg));
  if( pVault->msg.rc ) fail_msg("deriving the secrets: %s", pVault->msg.zErr);
}

static void addSecret(int eKind, const uint8_t *p, size_t n){
  Secret *pS;
  assert_true(pVault->nSec < MAX_SECRET);
  pS = &pVault->aSec[pVault->nSec++];
  pS->eKind = eKind;
  pS->p = p;
  pS->n = n;
  pS->pRand = eKind==S_PASSWORD ? p + PW_PREFIX : p;
  pS->nRand = eKind==S_PASSWORD ? n - PW_PREFIX : n;
}

static void listSecrets(void){
  ChildMsg *m = &pVault->msg;
  pVault->nSec = 0;
  addSecret(S_PASSWORD, (const uint8_t*)pVault->zPw, PW_LEN);
  addSecret(S_WALLETKEY, m->aW, 32);
  addSecret(S_PAYLOADKEY, m->aPayload, 32);
  for(int i=0; i<m->nMaster; i++) addSecret(S_MASTER, m->aMaster[i], 32);
  for(int d=0; d<m->nDb; d++){
    addSecret(S_DEK, m->aDek[d], 32);
    addSecret(S_WALMAC, m->aWalMac[d], 32);
    addSecret(S_HDRMAC, m->aHdrMac[d], 32);
  }
  for(int i=0; i<m->nSub; i++) addSecret(S_SUBKEY, m->aSub[i], 32);
}

/* ---- the test -------------------------------------------------------------- */

static void test_secrets_in_memory(void **state){
  static Scan sOpen, sCanary, sClosed;
  uint8_t aRand[16];
  char zUri[2*PATH_MAX + 64];
  sqlite3 *aDb[MAX_DB] = {0, 0};
  const Region *pR;
  uint8_t *pHeap;
  int bStrict = getenv("TDE_HYGIENE_STRICT") && atoi(getenv("TDE_HYGIENE_STRICT"));
  (void)state;

  /* A random, distinctive password, made in the vault only. */
  assert_int_equal(tdeRandom(aRand, sizeof(aRand)), TDE_OK);
  memcpy(pVault->zPw, "tde-hyg-pw-", PW_PREFIX);
  for(int i=0; i<16; i++){
    pVault->zPw[PW_PREFIX+2*i] = "0123456789abcdef"[aRand[i]>>4];
    pVault->zPw[PW_PREFIX+1+2*i] = "0123456789abcdef"[aRand[i]&15];
  }
  pVault->zPw[PW_LEN] = 0;
  tdeWipe(aRand, sizeof(aRand));

  snprintf(zWallet, sizeof(zWallet), "%s/hygiene.tdew", zScratch);
  snprintf(azDb[0], sizeof(azDb[0]), "%s/hygiene-wal.db", zScratch);
  snprintf(azDb[1], sizeof(azDb[1]), "%s/hygiene-rollback.db", zScratch);
  snprintf(zCfgApi, sizeof(zCfgApi), "%s/api.conf", zScratch);
  snprintf(zCfgFile, sizeof(zCfgFile), "%s/file.conf", zScratch);
  snprintf(zPwFile, sizeof(zPwFile), "%s/hygiene.pw", zScratch);
  writeFd(zPwFile, pVault->zPw, PW_LEN);        /* write(2): no stdio buffer */
  writeText(zCfgApi, "keystore = wallet\nwallet = hygiene.tdew\n"
                     "wallet_kdf_t = 1\nwallet_kdf_m_kib = 8192\n");
  writeText(zCfgFile, "keystore = wallet\nwallet = hygiene.tdew\npassword_file = hygiene.pw\n");

  /* Create through the API, open through the API and through the file. */
  assert_int_equal(withApiPassword(createWallet, zCfgApi), TDE_OK);
  assert_int_equal(withApiPassword(openKeystore, zCfgApi), TDE_OK);
  assert_int_equal(tde_keystore_open(zCfgFile, 0), TDE_OK);

  /* A WAL database and a rollback-journal one, with a temp table and a
  ** rolled-back transaction, through the API-opened keystore. */
  for(int d=0; d<MAX_DB; d++){
    sqlite3 *db;
    snprintf(zUri, sizeof(zUri), "file:%s?vfs=tde&tde_config=%s", azDb[d], zCfgApi);
    assert_int_equal(sqlite3_open_v2(zUri, &aDb[d], SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE|SQLITE_OPEN_URI, 0),
                     SQLITE_OK);
    db = aDb[d];
    exec(db, d==0 ? "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0"
                  : "PRAGMA page_size=1024; PRAGMA journal_mode=DELETE");
    exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT)");
    exec(db, "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM s WHERE i<3000) "
             "INSERT INTO t SELECT i, printf('row %d %.*c', i, 80, 'x') FROM s");
    if( d==0 ) exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
    exec(db, "WITH RECURSIVE s(i) AS (SELECT 3001 UNION ALL SELECT i+1 FROM s WHERE i<4000) "
             "INSERT INTO t SELECT i, printf('row %d %.*c', i, 80, 'y') FROM s");
    exec(db, "BEGIN; UPDATE t SET a=upper(a) WHERE id%7=0; ROLLBACK");
    exec(db, "CREATE TEMP TABLE tt AS SELECT * FROM t ORDER BY a DESC");
    assert_int_equal(queryInt(db, "SELECT count(*) FROM t"), 4000);
    assert_int_equal(queryInt(db, "SELECT sum(id) FROM tt"), 4000*4001/2);
    assert_int_equal(queryInt(db, "SELECT count(*) FROM t WHERE a LIKE 'row 17 %x'"), 1);
  }

  learnSecrets(aDb, MAX_DB);
  listSecrets();
  printf("# secrets: password, wallet key, payload key, %d master key(s), %d data key(s) "
         "with their WAL MAC and header MAC keys, %d page subkey(s)\n",
         pVault->msg.nMaster, pVault->msg.nDb, pVault->msg.nSub);
  assert_int_equal(pVault->msg.nDb, MAX_DB);
  assert_true(pVault->msg.nSub>=MAX_DB);

  /* The data keys' and WAL MAC keys' own mappings: locked and not dumped. */
  if( !NEED_LOCKED ){
    printf("# ASan build: mlock() is a no-op under AddressSanitizer; secure = MADV_DONTDUMP only\n");
  }
  loadRegions();
  for(int d=0; d<MAX_DB; d++){
    TdeFile *pFile = mainFile(aDb[d]);
    pR = regionOf((uintptr_t)pFile->pDb->pKeys->aDek);
    assert_non_null(pR);
    if( (NEED_LOCKED && !pR->bLocked) || !pR->bDontDump ){
      fail_msg("the data key's mapping %lx-%lx: locked %s, MADV_DONTDUMP %s (RLIMIT_MEMLOCK?)",
               (unsigned long)pR->iStart, (unsigned long)pR->iEnd,
               pR->bLocked ? "yes" : "no", pR->bDontDump ? "yes" : "no");
    }
    assert_int_equal(classify(pR), C_SECURE);
    pR = regionOf((uintptr_t)pFile->pDb->pKeys->aWalMac);
    assert_non_null(pR);
    assert_int_equal(classify(pR), C_SECURE);
  }

  /* (a) While open. */
  scanAll(&sOpen, 0);
  printScan("open", &sOpen);
  assert_true(sOpen.nRegions>=10);
  assert_true(sOpen.nBytes>=(1u<<20));
  assert_true(sOpen.aKind[S_DEK][C_SECURE]>=1);              /* the scanner finds it */
  assert_true(sOpen.aKind[S_MASTER][C_SECURE]>=1);
  assert_true(sOpen.aKind[S_WALMAC][C_SECURE]>=1);
  for(int k=0; k<S_NKIND; k++){
    int nOut = sOpen.aKind[k][C_HEAP] + sOpen.aKind[k][C_OTHER];
    if( k==S_PASSWORD ){
      if( sOpen.aKind[k][C_SECURE] + nOut ) fail_msg("the password is retained (%d copies)",
                                                     sOpen.aKind[k][C_SECURE] + nOut);
    }else if( k==S_SUBKEY || k==S_WALMAC ){
      if( sOpen.aKind[k][C_OTHER] ) fail_msg("%s outside secure memory and heap", azKind[k]);
      if( sOpen.aKind[k][C_HEAP] ){
        printf("# KNOWN ISSUE: %d %s cop%s in OpenSSL keyed contexts on the unlocked heap%s\n",
               sOpen.aKind[k][C_HEAP], azKind[k], sOpen.aKind[k][C_HEAP]==1 ? "y" : "ies",
               bStrict ? " (TDE_HYGIENE_STRICT: failing)" : "");
        if( bStrict ) fail_msg("%s on the heap", azKind[k]);
      }
    }else if( nOut ){
      fail_msg("%s outside secure memory: %d on the heap, %d elsewhere", azKind[k],
               sOpen.aKind[k][C_HEAP], sOpen.aKind[k][C_OTHER]);
    }
  }

  /* The scanner sees the heap: a canary in malloc'd memory is found there. */
  assert_int_equal(tdeRandom(pVault->aCanary, sizeof(pVault->aCanary)), TDE_OK);
  pHeap = malloc(64);
  assert_non_null(pHeap);
  memcpy(pHeap + 16, pVault->aCanary, 32);
  addSecret(S_CANARY, pVault->aCanary, 32);
  scanAll(&sCanary, 1);
  assert_int_equal(sCanary.aKind[S_CANARY][C_HEAP], 1);
  pVault->nSec--;
  tdeWipe(pHeap, 64);
  free(pHeap);

  /* (b) After closing the database and both keystores. */
  for(int d=0; d<MAX_DB; d++) assert_int_equal(sqlite3_close(aDb[d]), SQLITE_OK);
  assert_int_equal(tde_keystore_close(zCfgApi), TDE_OK);
  assert_int_equal(tde_keystore_close(zCfgFile), TDE_OK);
  scanAll(&sClosed, 0);
  printScan("closed", &sClosed);
  for(int k=0; k<S_NKIND; k++){
    int n = sClosed.aKind[k][C_SECURE] + sClosed.aKind[k][C_HEAP] + sClosed.aKind[k][C_OTHER];
    if( n ) fail_msg("%d cop%s of the %s left after close", n, n==1 ? "y" : "ies", azKind[k]);
  }
  assert_true(sClosed.nBytes>=(1u<<20));
  {
    int aSum[C_N] = {0, 0, 0};
    for(int k=0; k<S_NKIND; k++) for(int c=0; c<C_N; c++) aSum[c] += sOpen.aKind[k][c];
    printf("hygiene: open: %d mappings, %llu bytes, %d occurrences (secure %d, heap %d, other %d); "
           "closed: %d mappings, %llu bytes, %d occurrences\n",
           sOpen.nRegions, (unsigned long long)sOpen.nBytes, sOpen.nTotal,
           aSum[C_SECURE], aSum[C_HEAP], aSum[C_OTHER],
           sClosed.nRegions, (unsigned long long)sClosed.nBytes, sClosed.nTotal);
  }
}

int main(void){
  const char *zTmp = getenv("TDE_TEST_TMP");
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_secrets_in_memory),
  };
  int rc;
  umask(077);
  if( zTmp==0 || zTmp[0]==0 ) zTmp = "/tmp";
  mkdir(zTmp, 0700);
  snprintf(zScratch, sizeof(zScratch), "%s/tdehyg-XXXXXX", zTmp);
  if( mkdtemp(zScratch)==0 ){ perror("mkdtemp"); return 1; }
  nVaultMap = (sizeof(Vault) + 4095) / 4096 * 4096;
  pVault = mmap(0, nVaultMap, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
  if( pVault==MAP_FAILED ){ perror("mmap"); return 1; }
  if( tde_register(0)!=TDE_OK ) return 1;
  rc = cmocka_run_group_tests_name("hygiene", tests, 0, 0);
  if( getenv("TDE_KEEP_SCRATCH")==0 ) nftw(zScratch, rmOne, 16, FTW_DEPTH | FTW_PHYS);
  tdeWipe(pVault, nVaultMap);
  munmap(pVault, nVaultMap);
  return rc;
}
