/*
** Archive objects for tests/integration/test_restore.py, made from a real
** primary's ship spool (DB-tdeship, written by `sqlite-tde ship`) and its
** database file, with the archive's own codec (src/archive/object.h): a
** stand-in for the archiver while it is being built, and a forger of
** objects the restore must refuse.
**
**   archive_mock dump DB
**       one line per TXN/GAP record of DB-tdeship: "SEQ KIND NFRAME TCAPTURE"
**   archive_mock base DB SIGNKEY OUTDIR PREFIX
**       DB's file as it is (the caller checkpointed with TRUNCATE and holds
**       no writer) as the base copy at the spool's last sequence
**   archive_mock segs DB SIGNKEY N OUTDIR PREFIX [FIRST LAST]
**       the spool's records (FIRST..LAST, default all) as segments of N
**   archive_mock reseal SEG SIGNKEY DBID HIST OUT
**       segment SEG claiming database DBID and history HIST, signed with
**       SIGNKEY: a genuine-looking object of another database or history
**
** Objects are written as OUTDIR/<object name>; the names printed.  The
** history's chain is computed from the spool's first record (the spool is
** never trimmed in these tests: under 8 MiB).
*/
#include "archive/object.h"
#include "cipher/cipher.h"

#include <openssl/evp.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct Rec { uint64_t seq; uint8_t kind; uint32_t nFrame; uint64_t t; sqlite3_int64 off; size_t n; } Rec;
typedef struct Recs { Rec *a; int n; } Recs;

static void onRec(void *pArg, const TdeRec *r, sqlite3_int64 iOff, size_t n, const uint8_t *aSum){
  Recs *p = pArg;
  (void)aSum;
  if( !r ){ p->n = 0; return; }
  if( r->kind==TDE_REC_MARK ) return;
  p->a = realloc(p->a, sizeof(Rec)*(size_t)(p->n+1));
  if( !p->a ) exit(2);
  p->a[p->n++] = (Rec){ r->seq, r->kind, r->nFrame, r->tCapture, iOff, n };
}

static TdeSpool *openSpool(const char *zDb, Recs *pRecs){
  TdeSpool *s = 0;
  memset(pRecs, 0, sizeof(*pRecs));
  if( tdeSpoolOpen(zDb, 0, 0, &s) ){ fprintf(stderr, "archive_mock: %s\n", tde_last_error()); exit(1); }
  s->xOnRec = onRec;
  s->pOnRecArg = pRecs;
  if( tdeSpoolScan(s, 0) ){ fprintf(stderr, "archive_mock: scan: %s\n", tde_last_error()); exit(1); }
  return s;
}

static uint8_t *readRec(TdeSpool *s, const Rec *e, size_t *pn){
  TdeRec r;
  uint8_t *a = 0;
  if( tdeSpoolRead(s, e->off, &r, &a, pn) ){ fprintf(stderr, "archive_mock: read: %s\n", tde_last_error()); exit(1); }
  return a;
}

static void writeObj(const char *zDir, const char *zName, const uint8_t *a1, size_t n1, const uint8_t *a2, size_t n2,
                     const uint8_t *a3, size_t n3){
  char zPath[4096], zCmd[4200];
  FILE *f;
  snprintf(zPath, sizeof(zPath), "%s/%s", zDir, zName);
  snprintf(zCmd, sizeof(zCmd), "mkdir -p \"$(dirname '%s')\"", zPath);
  if( system(zCmd)!=0 ) exit(1);
  f = fopen(zPath, "wb");
  if( !f || fwrite(a1, 1, n1, f)!=n1 || (n2 && fwrite(a2, 1, n2, f)!=n2) || (n3 && fwrite(a3, 1, n3, f)!=n3)
      || fclose(f)!=0 ){
    fprintf(stderr, "archive_mock: cannot write %s\n", zPath);
    exit(1);
  }
  printf("%s\n", zName);
}

static uint8_t *readFile(const char *zPath, size_t *pn){
  FILE *f = fopen(zPath, "rb");
  long n;
  uint8_t *a;
  if( !f || fseek(f, 0, SEEK_END)!=0 || (n = ftell(f))<0 || fseek(f, 0, SEEK_SET)!=0 ) exit(1);
  a = malloc((size_t)n + 1);
  if( !a || fread(a, 1, (size_t)n, f)!=(size_t)n ) exit(1);
  fclose(f);
  *pn = (size_t)n;
  return a;
}

/* Chain at each record: aChain[i] after record i. */
static uint8_t (*chains(TdeSpool *s, const Recs *p))[32]{
  uint8_t (*a)[32] = malloc(32*(size_t)(p->n+1));
  uint8_t c[32];
  if( !a ) exit(2);
  tdeChainAnchor(s->aHistory, p->n ? p->a[0].seq-1 : 0, c);
  for(int i=0; i<p->n; i++){
    size_t n;
    uint8_t *r = readRec(s, &p->a[i], &n);
    tdeChainNext(c, r+n-TDE_REC_SUM, c);
    memcpy(a[i], c, 32);
    sqlite3_free(r);
  }
  return a;
}

static EVP_PKEY *key(const char *zPath){
  EVP_PKEY *k = 0;
  if( tdeSignKeyLoad(zPath, &k) ){ fprintf(stderr, "archive_mock: %s\n", tde_last_error()); exit(1); }
  return k;
}

static int cmdBase(const char *zDb, const char *zKey, const char *zDir, const char *zPrefix){
  Recs recs;
  TdeSpool *s = openSpool(zDb, &recs);
  uint8_t (*ac)[32] = chains(s, &recs);
  TdeArchBase b;
  uint8_t aHdr[TDE_ARCH_BASE_HDR];
  char zName[TDE_ARCH_NAME_MAX];
  size_t n;
  uint8_t *aCopy = readFile(zDb, &n);
  memset(&b, 0, sizeof(b));
  memcpy(b.aDbid, s->aDbid, 16);
  memcpy(b.aHistory, s->aHistory, 16);
  b.seq = recs.a[recs.n-1].seq;
  b.size = n;
  b.tCapture = tdeNowMs();
  memcpy(b.aChain, ac[recs.n-1], 32);
  tdeSha256(aCopy, n, b.aSum);
  if( tdeArchBaseSign(key(zKey), &b) ) exit(1);
  tdeArchBaseEncode(&b, aHdr);
  tdeArchBaseName(zPrefix, b.aDbid, b.aHistory, b.seq, zName, sizeof(zName));
  writeObj(zDir, zName, aHdr, sizeof(aHdr), aCopy, n, 0, 0);
  return 0;
}

static void oneSeg(TdeSpool *s, const Recs *p, uint8_t (*ac)[32], int i0, int i1, EVP_PKEY *k, const char *zDir,
                   const char *zPrefix){
  TdeArchSeg g;
  uint8_t aHdr[TDE_ARCH_SEG_HDR], aHead[TDE_HEAD_BYTES];
  uint8_t *aBody = 0;
  size_t nBody = 0;
  char zName[TDE_ARCH_NAME_MAX];
  memset(&g, 0, sizeof(g));
  memcpy(g.aDbid, s->aDbid, 16);
  memcpy(g.aHistory, s->aHistory, 16);
  g.first = p->a[i0].seq;
  g.last = p->a[i1].seq;
  if( i0>0 ) memcpy(g.aChainBefore, ac[i0-1], 32);
  else tdeChainAnchor(s->aHistory, g.first-1, g.aChainBefore);
  for(int i=i0; i<=i1; i++){
    size_t n;
    uint8_t *r = readRec(s, &p->a[i], &n);
    aBody = realloc(aBody, nBody+n);
    if( !aBody ) exit(2);
    memcpy(aBody+nBody, r, n);
    nBody += n;
    sqlite3_free(r);
  }
  g.nRecBytes = nBody;
  g.tClosed = tdeNowMs();
  tdeArchSegEncode(&g, aHdr);
  if( tdeHeadMake(k, g.aDbid, g.aHistory, g.last, ac[i1], aHead) ) exit(1);
  tdeArchSegName(zPrefix, g.aDbid, g.aHistory, g.first, g.last, zName, sizeof(zName));
  writeObj(zDir, zName, aHdr, sizeof(aHdr), aBody, nBody, aHead, sizeof(aHead));
  free(aBody);
}

static int cmdSegs(int argc, char **argv){
  Recs recs;
  TdeSpool *s = openSpool(argv[0], &recs);
  uint8_t (*ac)[32] = chains(s, &recs);
  EVP_PKEY *k = key(argv[1]);
  int nPer = atoi(argv[2]);
  uint64_t first = argc>5 ? strtoull(argv[5], 0, 10) : 0, last = argc>6 ? strtoull(argv[6], 0, 10) : UINT64_MAX;
  int i0 = -1;
  for(int i=0; i<recs.n; i++){
    if( recs.a[i].seq<first || recs.a[i].seq>last ) continue;
    if( i0<0 ) i0 = i;
    if( i-i0+1==nPer || i==recs.n-1 || recs.a[i].seq==last ){
      oneSeg(s, &recs, ac, i0, i, k, argv[3], argv[4]);
      i0 = -1;
    }
  }
  return 0;
}

/* The segment's records and chain as they are, its header and head made
** to name another database or history, signed with the given key. */
static int cmdReseal(char **argv){
  size_t n;
  uint8_t *a = readFile(argv[0], &n);
  TdeArchSeg g;
  uint8_t aChain[32];
  EVP_PKEY *k = key(argv[1]);
  if( tdeArchSegDecode(a, n, &g) || tdeUnhex(argv[2], g.aDbid, 16) || tdeUnhex(argv[3], g.aHistory, 16) ) exit(1);
  memcpy(aChain, a+n-TDE_HEAD_BYTES+48, 32);
  tdeArchSegEncode(&g, a);
  if( tdeHeadMake(k, g.aDbid, g.aHistory, g.last, aChain, a+n-TDE_HEAD_BYTES) ) exit(1);
  {
    FILE *f = fopen(argv[4], "wb");
    if( !f || fwrite(a, 1, n, f)!=n || fclose(f)!=0 ) exit(1);
  }
  return 0;
}

int main(int argc, char **argv){
  if( argc==3 && strcmp(argv[1], "dump")==0 ){
    Recs recs;
    openSpool(argv[2], &recs);
    for(int i=0; i<recs.n; i++){
      printf("%llu %s %u %llu\n", (unsigned long long)recs.a[i].seq, recs.a[i].kind==TDE_REC_TXN ? "TXN" : "GAP",
             recs.a[i].nFrame, (unsigned long long)recs.a[i].t);
    }
    return 0;
  }
  if( argc==6 && strcmp(argv[1], "base")==0 ) return cmdBase(argv[2], argv[3], argv[4], argv[5]);
  if( (argc==7 || argc==9) && strcmp(argv[1], "segs")==0 ) return cmdSegs(argc-2, argv+2);
  if( argc==7 && strcmp(argv[1], "reseal")==0 ) return cmdReseal(argv+2);
  fprintf(stderr, "usage: see tests/tools/archive_mock.c\n");
  return 2;
}
