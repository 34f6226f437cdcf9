/*
** The main database file's layout: pure arithmetic (keys/layout.h,
** docs/FORMAT.md "Format version 3: Layout").  Must never: do I/O, keep
** state, or call anything but itself.
*/
#include "keys/layout.h"

#define V3(L) ((L)->version>=3)

int tdeLayoutHasRegions(const TdeLayout *L){
  return V3(L);
}

int64_t tdeLayoutRegionBytes(uint32_t pgsz){
  return pgsz>TDE_LAYOUT_HDR ? (int64_t)pgsz : (int64_t)TDE_LAYOUT_HDR;
}

/* Bytes of one group: its map region and its K pages. */
static int64_t groupBytes(uint32_t pgsz){
  return tdeLayoutRegionBytes(pgsz) + (int64_t)TDE_LAYOUT_K*pgsz;
}

static int64_t v2PageOff(uint32_t pgsz, uint32_t pgno){
  return TDE_LAYOUT_HDR + (int64_t)(pgno-1)*pgsz;
}

int64_t tdeLayoutPageOff(const TdeLayout *L, uint32_t pgno){
  int64_t m;
  if( !V3(L) || (L->cursor && pgno<L->cursor) ) return v2PageOff(L->pgsz, pgno);
  m = tdeLayoutRegionBytes(L->pgsz);
  return TDE_LAYOUT_HDR + m*(1 + (int64_t)((pgno-1)/TDE_LAYOUT_K)) + (int64_t)(pgno-1)*L->pgsz;
}

int64_t tdeLayoutMapOff(const TdeLayout *L, uint32_t g, int s){
  return TDE_LAYOUT_HDR + (int64_t)g*groupBytes(L->pgsz) + (s ? tdeLayoutRegionBytes(L->pgsz)/2 : 0);
}

int64_t tdeLayoutPhysSize(const TdeLayout *L, int64_t nSqlite){
  int64_t nPage;
  if( !V3(L) ) return nSqlite + TDE_LAYOUT_HDR;
  if( nSqlite<=0 || L->pgsz==0 ) return TDE_LAYOUT_HDR;
  nPage = (nSqlite + L->pgsz - 1) / L->pgsz;
  return tdeLayoutPageOff(L, (uint32_t)nPage) + L->pgsz;
}

/* Version 3: pages of a file of nPhys bytes; bPartial counts a page the
** file ends inside of. */
static int64_t v3Pages(const TdeLayout *L, int64_t nPhys, int bPartial){
  int64_t x, w, g, r, m, extra = 0;
  if( nPhys<=TDE_LAYOUT_HDR ) return 0;
  x = nPhys - TDE_LAYOUT_HDR;
  w = groupBytes(L->pgsz);
  m = tdeLayoutRegionBytes(L->pgsz);
  g = x / w;
  r = x - g*w;
  if( r>m ) extra = bPartial ? (r - m + L->pgsz - 1) / L->pgsz : (r - m) / L->pgsz;
  return g*TDE_LAYOUT_K + extra;
}

/* While a move is in progress (cursor c): the database's N pages are
** pages c .. N at their new places, so the file reaches off(N) once the
** first batch moved page N, and 1 .. c-1 at their old ones; before that
** batch c = N + 1 and the file is version 2's, whose version-3 page count
** is below N (every page's new place is higher than its old one). */
static int64_t movePages(const TdeLayout *L, int64_t nV3){
  if( L->cursor && (int64_t)(L->cursor - 1) > nV3 ) return (int64_t)(L->cursor - 1);
  return nV3;
}

int64_t tdeLayoutSqliteSize(const TdeLayout *L, int64_t nPhys){
  if( !V3(L) ){
    int64_t n = nPhys>TDE_LAYOUT_HDR ? nPhys - TDE_LAYOUT_HDR : 0;
    if( L->pgsz && n % L->pgsz ) n += L->pgsz - n % L->pgsz;
    return n;
  }
  if( L->pgsz==0 ) return 0;
  return movePages(L, v3Pages(L, nPhys, 1)) * L->pgsz;
}

uint32_t tdeLayoutWholePages(const TdeLayout *L, int64_t nPhys){
  if( L->pgsz==0 ) return 0;
  if( !V3(L) ) return nPhys>TDE_LAYOUT_HDR ? (uint32_t)((nPhys - TDE_LAYOUT_HDR) / L->pgsz) : 0;
  return (uint32_t)movePages(L, v3Pages(L, nPhys, 0));
}

int tdeLayoutWhole(const TdeLayout *L, int64_t nPhys){
  return tdeLayoutSqliteSize(L, nPhys)==(int64_t)tdeLayoutWholePages(L, nPhys)*L->pgsz;
}
