/*
** A pass-through VFS for tests, registered above another VFS (tde): what a
** tracing VFS like SQLite's vfstrace or a statistics VFS does.  Each file
** it opens wraps the file of the VFS below; every method forwards; it
** counts opens and calls so a test can see it was in the path.  Written
** for sqlite-tde's tests (issue 12, item 5), header only, static inline.
*/
#ifndef STACKVFS_H
#define STACKVFS_H

#include <sqlite3.h>
#include <string.h>

typedef struct StackFile {
  sqlite3_file base;
  sqlite3_file *pReal;        /* the file of the VFS below, follows this struct */
} StackFile;

static sqlite3_vfs stackVfs;
static int stackNOpen;        /* files opened through the stack */
static long stackNCall;       /* file methods called */

#define STACK_REAL(p) (((StackFile*)(p))->pReal)
#define STACK_BELOW(v) ((sqlite3_vfs*)(v)->pAppData)

static inline int stackClose(sqlite3_file *p){
  int rc = STACK_REAL(p)->pMethods ? STACK_REAL(p)->pMethods->xClose(STACK_REAL(p)) : SQLITE_OK;
  stackNCall++;
  return rc;
}
static inline int stackRead(sqlite3_file *p, void *z, int n, sqlite3_int64 o){
  stackNCall++; return STACK_REAL(p)->pMethods->xRead(STACK_REAL(p), z, n, o);
}
static inline int stackWrite(sqlite3_file *p, const void *z, int n, sqlite3_int64 o){
  stackNCall++; return STACK_REAL(p)->pMethods->xWrite(STACK_REAL(p), z, n, o);
}
static inline int stackTruncate(sqlite3_file *p, sqlite3_int64 n){
  stackNCall++; return STACK_REAL(p)->pMethods->xTruncate(STACK_REAL(p), n);
}
static inline int stackSync(sqlite3_file *p, int f){
  stackNCall++; return STACK_REAL(p)->pMethods->xSync(STACK_REAL(p), f);
}
static inline int stackFileSize(sqlite3_file *p, sqlite3_int64 *pn){
  stackNCall++; return STACK_REAL(p)->pMethods->xFileSize(STACK_REAL(p), pn);
}
static inline int stackLock(sqlite3_file *p, int e){
  stackNCall++; return STACK_REAL(p)->pMethods->xLock(STACK_REAL(p), e);
}
static inline int stackUnlock(sqlite3_file *p, int e){
  stackNCall++; return STACK_REAL(p)->pMethods->xUnlock(STACK_REAL(p), e);
}
static inline int stackCheckReserved(sqlite3_file *p, int *pr){
  stackNCall++; return STACK_REAL(p)->pMethods->xCheckReservedLock(STACK_REAL(p), pr);
}
static inline int stackFileControl(sqlite3_file *p, int op, void *pArg){
  stackNCall++;
  if( op==SQLITE_FCNTL_VFSNAME ){
    int rc = STACK_REAL(p)->pMethods->xFileControl(STACK_REAL(p), op, pArg);
    if( rc==SQLITE_OK ) *(char**)pArg = sqlite3_mprintf("stack/%z", *(char**)pArg);
    return rc;
  }
  return STACK_REAL(p)->pMethods->xFileControl(STACK_REAL(p), op, pArg);
}
static inline int stackSectorSize(sqlite3_file *p){
  return STACK_REAL(p)->pMethods->xSectorSize(STACK_REAL(p));
}
static inline int stackDevChar(sqlite3_file *p){
  return STACK_REAL(p)->pMethods->xDeviceCharacteristics(STACK_REAL(p));
}
static inline int stackShmMap(sqlite3_file *p, int i, int n, int b, void volatile **pp){
  stackNCall++; return STACK_REAL(p)->pMethods->xShmMap(STACK_REAL(p), i, n, b, pp);
}
static inline int stackShmLock(sqlite3_file *p, int o, int n, int f){
  stackNCall++; return STACK_REAL(p)->pMethods->xShmLock(STACK_REAL(p), o, n, f);
}
static inline void stackShmBarrier(sqlite3_file *p){
  STACK_REAL(p)->pMethods->xShmBarrier(STACK_REAL(p));
}
static inline int stackShmUnmap(sqlite3_file *p, int d){
  stackNCall++; return STACK_REAL(p)->pMethods->xShmUnmap(STACK_REAL(p), d);
}
static inline int stackFetch(sqlite3_file *p, sqlite3_int64 o, int n, void **pp){
  return STACK_REAL(p)->pMethods->xFetch(STACK_REAL(p), o, n, pp);
}
static inline int stackUnfetch(sqlite3_file *p, sqlite3_int64 o, void *pPage){
  return STACK_REAL(p)->pMethods->xUnfetch(STACK_REAL(p), o, pPage);
}

static const sqlite3_io_methods stackIo = {
  3,                    /* iVersion */
  stackClose,           /* xClose */
  stackRead,            /* xRead */
  stackWrite,           /* xWrite */
  stackTruncate,        /* xTruncate */
  stackSync,            /* xSync */
  stackFileSize,        /* xFileSize */
  stackLock,            /* xLock */
  stackUnlock,          /* xUnlock */
  stackCheckReserved,   /* xCheckReservedLock */
  stackFileControl,     /* xFileControl */
  stackSectorSize,      /* xSectorSize */
  stackDevChar,         /* xDeviceCharacteristics */
  stackShmMap,          /* xShmMap */
  stackShmLock,         /* xShmLock */
  stackShmBarrier,      /* xShmBarrier */
  stackShmUnmap,        /* xShmUnmap */
  stackFetch,           /* xFetch */
  stackUnfetch          /* xUnfetch */
};

static inline int stackOpen(sqlite3_vfs *v, const char *zName, sqlite3_file *pFile, int flags, int *pOut){
  StackFile *p = (StackFile*)pFile;
  int rc;
  memset(p, 0, sizeof(*p));
  p->pReal = (sqlite3_file*)&p[1];
  rc = STACK_BELOW(v)->xOpen(STACK_BELOW(v), zName, p->pReal, flags, pOut);
  if( rc ){
    if( p->pReal->pMethods ) p->pReal->pMethods->xClose(p->pReal);
    pFile->pMethods = 0;
    return rc;
  }
  stackNOpen++;
  pFile->pMethods = &stackIo;
  return SQLITE_OK;
}
static inline int stackDelete(sqlite3_vfs *v, const char *z, int d){ return STACK_BELOW(v)->xDelete(STACK_BELOW(v), z, d); }
static inline int stackAccess(sqlite3_vfs *v, const char *z, int f, int *pr){ return STACK_BELOW(v)->xAccess(STACK_BELOW(v), z, f, pr); }
static inline int stackFullPathname(sqlite3_vfs *v, const char *z, int n, char *zOut){ return STACK_BELOW(v)->xFullPathname(STACK_BELOW(v), z, n, zOut); }
static inline void *stackDlOpen(sqlite3_vfs *v, const char *z){ return STACK_BELOW(v)->xDlOpen(STACK_BELOW(v), z); }
static inline void stackDlError(sqlite3_vfs *v, int n, char *z){ STACK_BELOW(v)->xDlError(STACK_BELOW(v), n, z); }
static inline void (*stackDlSym(sqlite3_vfs *v, void *p, const char *z))(void){ return STACK_BELOW(v)->xDlSym(STACK_BELOW(v), p, z); }
static inline void stackDlClose(sqlite3_vfs *v, void *p){ STACK_BELOW(v)->xDlClose(STACK_BELOW(v), p); }
static inline int stackRandomness(sqlite3_vfs *v, int n, char *z){ return STACK_BELOW(v)->xRandomness(STACK_BELOW(v), n, z); }
static inline int stackSleep(sqlite3_vfs *v, int n){ return STACK_BELOW(v)->xSleep(STACK_BELOW(v), n); }
static inline int stackCurrentTime(sqlite3_vfs *v, double *p){ return STACK_BELOW(v)->xCurrentTime(STACK_BELOW(v), p); }
static inline int stackGetLastError(sqlite3_vfs *v, int n, char *z){ return STACK_BELOW(v)->xGetLastError(STACK_BELOW(v), n, z); }
static inline int stackCurrentTimeInt64(sqlite3_vfs *v, sqlite3_int64 *p){ return STACK_BELOW(v)->xCurrentTimeInt64(STACK_BELOW(v), p); }

/* Register VFS zName above the VFS zBelow (not as the default).  SQLite
** result code. */
static inline int stackVfsRegister(const char *zName, const char *zBelow){
  sqlite3_vfs *pBelow = sqlite3_vfs_find(zBelow);
  if( !pBelow ) return SQLITE_ERROR;
  memset(&stackVfs, 0, sizeof(stackVfs));
  stackVfs.iVersion = 2;
  stackVfs.szOsFile = (int)sizeof(StackFile) + pBelow->szOsFile;
  stackVfs.mxPathname = pBelow->mxPathname;
  stackVfs.zName = zName;
  stackVfs.pAppData = pBelow;
  stackVfs.xOpen = stackOpen;
  stackVfs.xDelete = stackDelete;
  stackVfs.xAccess = stackAccess;
  stackVfs.xFullPathname = stackFullPathname;
  stackVfs.xDlOpen = stackDlOpen;
  stackVfs.xDlError = stackDlError;
  stackVfs.xDlSym = stackDlSym;
  stackVfs.xDlClose = stackDlClose;
  stackVfs.xRandomness = stackRandomness;
  stackVfs.xSleep = stackSleep;
  stackVfs.xCurrentTime = stackCurrentTime;
  stackVfs.xGetLastError = stackGetLastError;
  stackVfs.xCurrentTimeInt64 = stackCurrentTimeInt64;
  return sqlite3_vfs_register(&stackVfs, 0);
}

#endif /* STACKVFS_H */
