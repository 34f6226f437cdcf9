/*
** A failing allocator for the unit tests: sqlite3_malloc and
** sqlite3_realloc fail at their Nth call after mf is armed, once
** (transient).  Install with sqlite3_config(SQLITE_CONFIG_MALLOC,
** &memFault) after SQLITE_CONFIG_GETMALLOC filled memOrig, while SQLite is
** shut down.  Header-only (static): include it in one test file.  (The
** persistent mode of test_malloc.c stays there.)
*/
#ifndef TDE_MALLOCFAULT_H
#define TDE_MALLOCFAULT_H

#include <sqlite3.h>

static sqlite3_mem_methods memOrig;
static struct {
  int bArmed;                 /* counting and failing */
  int iCountdown;             /* the call that fails: 1 = the next */
  int bFired;                 /* it failed */
  long nCalls;                /* calls since armed */
} mf;

static int mfFail(void){
  if( !mf.bArmed ) return 0;
  mf.nCalls++;
  if( mf.bFired ) return 0;           /* transient: the Nth call only */
  if( --mf.iCountdown>0 ) return 0;
  mf.bFired = 1;
  return 1;
}
static void *mfMalloc(int n){ return mfFail() ? 0 : memOrig.xMalloc(n); }
static void *mfRealloc(void *p, int n){ return mfFail() ? 0 : memOrig.xRealloc(p, n); }
static void mfFree(void *p){ memOrig.xFree(p); }
static int mfSize(void *p){ return memOrig.xSize(p); }
static int mfRoundup(int n){ return memOrig.xRoundup(n); }
static int mfInit(void *p){ return memOrig.xInit(p); }
static void mfShutdown(void *p){ memOrig.xShutdown(p); }
static sqlite3_mem_methods memFault = {
  mfMalloc, mfFree, mfRealloc, mfSize, mfRoundup, mfInit, mfShutdown, 0
};

#endif /* TDE_MALLOCFAULT_H */
