/*
** Standalone replay main shared by the fuzz targets of tests/fuzz (after
** SQLite's test/dbfuzz2.c): built when TDE_LIBFUZZER is not defined, it
** runs LLVMFuzzerTestOneInput over every file named on the command line,
** or every file of every directory named, from an exact-size heap copy (so
** ASan sees a read one byte past the input).  A crash or abort() in the
** target fails the run; exit status 0 needs at least one input replayed.
** Include it once, at the end of a target.
*/
#ifndef TDE_FUZZ_REPLAY_H
#define TDE_FUZZ_REPLAY_H
#ifndef TDE_LIBFUZZER
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static int fuzzReplayFile(const char *zPath){
  FILE *f = fopen(zPath, "rb");
  uint8_t *a;
  long n;
  if( f==0 ){ fprintf(stderr, "cannot open %s\n", zPath); exit(1); }
  if( fseek(f, 0, SEEK_END)!=0 || (n = ftell(f))<0 || fseek(f, 0, SEEK_SET)!=0 ){
    fprintf(stderr, "cannot size %s\n", zPath);
    exit(1);
  }
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
        if( stat(zPath, &st2)==0 && S_ISREG(st2.st_mode) ) nRun += fuzzReplayFile(zPath);
      }
      closedir(pDir);
    }else{
      nRun += fuzzReplayFile(argv[i]);
    }
  }
  printf("%s: replayed %d input(s), no failure\n", argv[0], nRun);
  return nRun>0 ? 0 : 1;
}
#endif
#endif
