/*
** The S3 client's test driver (src/archive/s3.h), run by
** tests/integration/test_s3_client.sh against the local S3 server.
**
**   s3_client [--cred FILE] [--ca FILE|none] [--endpoint URL] [--region R]
**             [--bucket B] COMMAND ARGS
**
** Defaults from S3_ENDPOINT, S3_REGION, S3_BUCKET, S3_CA_FILE; without
** --cred the keys come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY.
**
**   put KEY FILE          store FILE's bytes
**   get KEY FILE [MAX]    read into memory (at most MAX bytes), write to FILE
**   getfd KEY FILE        read straight into FILE (opened, not truncated)
**   head KEY              print "SIZE ETAG"
**   list PREFIX           print "KEY SIZE" per object, then "count N"
**   delete KEY
**   putmany PREFIX N      N objects PREFIX000000.. holding "object I\n"
**   deleteall PREFIX      delete every object under PREFIX, print "deleted N"
**   parse FILE PREFIX     parse FILE as a ListObjectsV2 page (no server)
**
** Exit 0 on success; otherwise the tde_rc, with tde_last_error() on stderr.
*/
#include "archive/s3.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int readFile(const char *zPath, uint8_t **pp, size_t *pn){
  FILE *f = fopen(zPath, "rb");
  long n;
  if( !f ) return -1;
  if( fseek(f, 0, SEEK_END)!=0 || (n = ftell(f))<0 || fseek(f, 0, SEEK_SET)!=0 ){ fclose(f); return -1; }
  *pp = malloc((size_t)n + 1);
  *pn = (size_t)n;
  if( !*pp || fread(*pp, 1, (size_t)n, f)!=(size_t)n ){ fclose(f); free(*pp); return -1; }
  fclose(f);
  return 0;
}

static int printEach(void *pArg, const TdeS3Object *pObj){
  (*(long *)pArg)++;
  printf("%s %llu\n", pObj->zKey, (unsigned long long)pObj->nSize);
  return 0;
}

typedef struct KeyList { char **az; size_t n, nAlloc; } KeyList;
static int collectEach(void *pArg, const TdeS3Object *pObj){
  KeyList *k = pArg;
  if( k->n==k->nAlloc ){
    size_t nNew = k->nAlloc ? 2*k->nAlloc : 256;
    char **az = realloc(k->az, nNew*sizeof(char *));
    if( !az ) return 1;
    k->az = az;
    k->nAlloc = nNew;
  }
  if( (k->az[k->n] = strdup(pObj->zKey))==0 ) return 1;
  k->n++;
  return 0;
}

static int runCommand(TdeS3 *p, int argc, char **argv){
  const char *zCmd = argv[0];
  int rc = TDE_MISUSE;
  if( strcmp(zCmd, "put")==0 && argc==3 ){
    uint8_t *a;
    size_t n;
    if( readFile(argv[2], &a, &n) ){ fprintf(stderr, "s3_client: cannot read %s\n", argv[2]); return TDE_IO; }
    rc = tdeS3Put(p, argv[1], a, n);
    free(a);
  }else if( strcmp(zCmd, "get")==0 && (argc==3 || argc==4) ){
    uint8_t *a;
    size_t n;
    rc = tdeS3Get(p, argv[1], argc==4 ? strtoull(argv[3], 0, 10) : (64u<<20), &a, &n);
    if( rc==TDE_OK ){
      FILE *f = fopen(argv[2], "wb");
      if( !f || fwrite(a, 1, n, f)!=n || fclose(f)!=0 ) rc = TDE_IO;
      free(a);
    }
  }else if( strcmp(zCmd, "getfd")==0 && argc==3 ){
    uint64_t n = 0;
    int fd = open(argv[2], O_WRONLY|O_CREAT|O_CLOEXEC, 0600);
    if( fd<0 ) return TDE_IO;
    rc = tdeS3GetFd(p, argv[1], fd, &n);
    if( close(fd)!=0 && rc==TDE_OK ) rc = TDE_IO;
    if( rc==TDE_OK ) printf("%llu\n", (unsigned long long)n);
  }else if( strcmp(zCmd, "head")==0 && argc==2 ){
    TdeS3Object o;
    rc = tdeS3Head(p, argv[1], &o);
    if( rc==TDE_OK ) printf("%llu %s\n", (unsigned long long)o.nSize, o.zEtag);
  }else if( strcmp(zCmd, "list")==0 && argc==2 ){
    long n = 0;
    rc = tdeS3List(p, argv[1], printEach, &n);
    if( rc==TDE_OK ) printf("count %ld\n", n);
  }else if( strcmp(zCmd, "delete")==0 && argc==2 ){
    rc = tdeS3Delete(p, argv[1]);
  }else if( strcmp(zCmd, "putmany")==0 && argc==3 ){
    long n = atol(argv[2]);
    rc = TDE_OK;
    for(long i=0; i<n && rc==TDE_OK; i++){
      char zKey[1100], zBody[64];
      snprintf(zKey, sizeof(zKey), "%s%06ld", argv[1], i);
      snprintf(zBody, sizeof(zBody), "object %ld\n", i);
      rc = tdeS3Put(p, zKey, zBody, strlen(zBody));
    }
  }else if( strcmp(zCmd, "deleteall")==0 && argc==2 ){
    KeyList k = { 0, 0, 0 };
    rc = tdeS3List(p, argv[1], collectEach, &k);
    if( rc==1 ) rc = TDE_NOMEM;
    for(size_t i=0; i<k.n; i++){
      if( rc==TDE_OK ) rc = tdeS3Delete(p, k.az[i]);
      free(k.az[i]);
    }
    if( rc==TDE_OK ) printf("deleted %zu\n", k.n);
    free(k.az);
  }
  return rc;
}

int main(int argc, char **argv){
  TdeS3Config cfg = { getenv("S3_ENDPOINT"), getenv("S3_REGION"), getenv("S3_BUCKET"),
                      getenv("S3_CA_FILE"), 0, 0, 0 };
  TdeS3 *p = 0;
  int i = 1, rc;
  for(; i+1<argc && strncmp(argv[i], "--", 2)==0; i+=2){
    if( strcmp(argv[i], "--cred")==0 ) cfg.zCredFile = argv[i+1];
    else if( strcmp(argv[i], "--ca")==0 ) cfg.zCaFile = strcmp(argv[i+1], "none")==0 ? 0 : argv[i+1];
    else if( strcmp(argv[i], "--endpoint")==0 ) cfg.zEndpoint = argv[i+1];
    else if( strcmp(argv[i], "--region")==0 ) cfg.zRegion = argv[i+1];
    else if( strcmp(argv[i], "--bucket")==0 ) cfg.zBucket = argv[i+1];
    else break;
  }
  if( i>=argc ){ fprintf(stderr, "usage: s3_client [options] COMMAND ARGS\n"); return TDE_MISUSE; }
  if( strcmp(argv[i], "parse")==0 && argc-i==3 ){
    uint8_t *a;
    size_t n;
    char zToken[2048];
    long nObj = 0;
    int iStop;
    if( readFile(argv[i+1], &a, &n) ) return TDE_IO;
    rc = tdeS3ParseList((const char *)a, n, argv[i+2], printEach, &nObj, zToken, sizeof(zToken), &iStop);
    free(a);
    if( rc==TDE_OK ) printf("count %ld token '%s'\n", nObj, zToken);
    else fprintf(stderr, "s3_client: %s\n", tde_last_error());
    return rc;
  }
  rc = tdeS3Open(&cfg, &p);
  if( rc==TDE_OK ) rc = runCommand(p, argc-i, argv+i);
  if( rc==TDE_MISUSE ) fprintf(stderr, "s3_client: bad command or arguments\n");
  else if( rc!=TDE_OK ) fprintf(stderr, "s3_client: %s\n", tde_last_error());
  tdeS3Close(p);
  return rc;
}
