/*
** Fuzz target for the KMIP TTLV decoder (src/keystore/kmip/ttlv.c).
**
** LLVMFuzzerTestOneInput decodes the input, walks every item through the
** typed getters and the child/sibling accessors, and checks one invariant:
** whatever the decoder accepts re-encodes to exactly the same bytes (the
** decoder accepts only canonical TTLV: exact lengths, zero padding).  Any
** crash, over-read (ASan) or broken invariant (abort) is a bug.
**
** Built two ways:
**  - with clang -fsanitize=fuzzer (TDE_LIBFUZZER defined): libFuzzer's main;
**  - with any compiler otherwise: a replay main, after SQLite's
**    test/dbfuzz2.c, that runs every file named on the command line, or
**    every file of every directory named, and fails if one crashes.  CTest
**    runs it over tests/fuzz/corpus_ttlv on every run.
*/
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sqlite-tde.h"
#include "keystore/kmip/ttlv.h"

int LLVMFuzzerTestOneInput(const uint8_t *aData, size_t nData);

/* Re-encode item i (and its children) with the encoder. */
static void fuzzReencode(TtlvDoc *pDoc, int i, TtlvEnc *pEnc){
  const TtlvItem *p = &pDoc->aItem[i];
  int32_t i32; int64_t i64; uint32_t u32; int b;
  const char *z; const uint8_t *a; size_t n;
  int iChild;
  switch( p->type ){
    case TTLV_STRUCTURE:
      ttlvEncOpen(pEnc, p->tag);
      for(iChild=p->iFirst; iChild>=0; iChild=pDoc->aItem[iChild].iNext){
        fuzzReencode(pDoc, iChild, pEnc);
      }
      ttlvEncClose(pEnc);
      break;
    case TTLV_INTEGER:
      if( ttlvGetInt(pDoc, i, &i32) ) abort();
      ttlvEncInt(pEnc, p->tag, i32);
      break;
    case TTLV_LONG:
      if( ttlvGetLong(pDoc, i, &i64) ) abort();
      ttlvEncLong(pEnc, p->tag, i64);
      break;
    case TTLV_BIGINT:
      if( ttlvGetBigInt(pDoc, i, &a, &n) ) abort();
      ttlvEncBigInt(pEnc, p->tag, a, n);
      break;
    case TTLV_ENUM:
      if( ttlvGetEnum(pDoc, i, &u32) ) abort();
      ttlvEncEnum(pEnc, p->tag, u32);
      break;
    case TTLV_BOOL:
      if( ttlvGetBool(pDoc, i, &b) ) abort();
      ttlvEncBool(pEnc, p->tag, b);
      break;
    case TTLV_TEXT:
      if( ttlvGetText(pDoc, i, &z, &n) ) abort();
      ttlvEncText(pEnc, p->tag, z, n);
      break;
    case TTLV_BYTES:
      if( ttlvGetBytes(pDoc, i, &a, &n) ) abort();
      ttlvEncBytes(pEnc, p->tag, a, n);
      break;
    case TTLV_DATETIME:
      if( ttlvGetDateTime(pDoc, i, &i64) ) abort();
      ttlvEncDateTime(pEnc, p->tag, i64);
      break;
    case TTLV_INTERVAL:
      if( ttlvGetInterval(pDoc, i, &u32) ) abort();
      ttlvEncInterval(pEnc, p->tag, u32);
      break;
    default:
      abort();                 /* the decoder let an unknown type through */
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *aData, size_t nData){
  TtlvDoc d;
  int rc = ttlvDecode(aData, nData, &d);
  if( rc==TDE_OK ){
    TtlvEnc e;
    const uint8_t *a;
    size_t n;
    int i;
    if( d.nItem<1 || d.nItem>TTLV_MAX_ITEMS ) abort();
    for(i=0; i<d.nItem; i++){
      const TtlvItem *p = &d.aItem[i];
      if( p->pVal<aData || p->pVal+p->len>aData+nData ) abort();
      if( p->depth>TTLV_MAX_DEPTH ) abort();
      (void)ttlvCount(&d, i, 0x42000F);
      (void)ttlvChild(&d, p->iParent, p->tag);
    }
    ttlvEncInit(&e);
    fuzzReencode(&d, 0, &e);
    if( ttlvEncFinish(&e, &a, &n)!=TDE_OK || n!=nData || memcmp(a, aData, n)!=0 ) abort();
    ttlvEncFree(&e);
  }else if( rc!=TDE_FORMAT && rc!=TDE_RANGE && rc!=TDE_NOMEM ){
    abort();
  }else if( d.zErr[0]==0 ){
    abort();                   /* every refusal says why */
  }
  ttlvDocFree(&d);
  if( nData>=TTLV_HEADER ){
    size_t nTotal;
    rc = ttlvMessageLength(aData, &nTotal);
    if( rc==TDE_OK && (nTotal<TTLV_HEADER || nTotal>TTLV_MAX_MESSAGE) ) abort();
  }
  return 0;
}

#ifndef TDE_LIBFUZZER
/* Replay one file; returns 1 if it was run. */
static int replayFile(const char *zPath){
  FILE *f = fopen(zPath, "rb");
  uint8_t *a;
  long n;
  if( f==0 ){ fprintf(stderr, "cannot open %s\n", zPath); exit(1); }
  if( fseek(f, 0, SEEK_END)!=0 || (n = ftell(f))<0 || fseek(f, 0, SEEK_SET)!=0 ){
    fprintf(stderr, "cannot size %s\n", zPath);
    exit(1);
  }
  /* Exact-size heap copy, so ASan catches a read one byte past the input. */
  a = malloc(n>0 ? (size_t)n : 1);
  if( a==0 || (n>0 && fread(a, 1, (size_t)n, f)!=(size_t)n) ){
    fprintf(stderr, "cannot read %s\n", zPath);
    exit(1);
  }
  fclose(f);
  LLVMFuzzerTestOneInput(a, (size_t)n);
  free(a);
  return 1;
}

int main(int argc, char **argv){
  int i, nRun = 0;
  if( argc<2 ){
    fprintf(stderr, "usage: %s FILE-OR-DIRECTORY...\n", argv[0]);
    return 2;
  }
  for(i=1; i<argc; i++){
    struct stat st;
    if( stat(argv[i], &st)!=0 ){ fprintf(stderr, "cannot stat %s\n", argv[i]); return 1; }
    if( S_ISDIR(st.st_mode) ){
      DIR *pDir = opendir(argv[i]);
      struct dirent *pEnt;
      if( pDir==0 ){ fprintf(stderr, "cannot open %s\n", argv[i]); return 1; }
      while( (pEnt = readdir(pDir))!=0 ){
        char zPath[4096];
        struct stat st2;
        if( pEnt->d_name[0]=='.' ) continue;
        snprintf(zPath, sizeof(zPath), "%s/%s", argv[i], pEnt->d_name);
        if( stat(zPath, &st2)==0 && S_ISREG(st2.st_mode) ) nRun += replayFile(zPath);
      }
      closedir(pDir);
    }else{
      nRun += replayFile(argv[i]);
    }
  }
  printf("fuzz_ttlv: replayed %d input(s), no failure\n", nRun);
  return nRun>0 ? 0 : 1;
}
#endif
