/*
** The main database file's layout (docs/FORMAT.md "Main database file" and
** "Format version 3: Layout"): where page N lies, where map page g's slots
** lie, and how SQLite's sizes translate to physical ones and back.  The one
** place these offsets are written out: src/vfs, src/db, src/repl and the
** CLI ask here rather than computing 8192 + (N-1)*P themselves.
**
** Versions 1 and 2: the 8192-byte header region, then page N at
** 8192 + (N-1)*P; SQLite's size is the file's minus 8192, to the byte.
** Version 3: groups of K = 508 pages, each after its map region of
** M = max(8192, P) bytes; SQLite's size is a whole number of pages.  An
** upgrade cursor c != 0 (a version-2 -> 3 move in progress) puts pages
** m < c at their version-2 places.
**
** Pure arithmetic: no I/O, no state, nothing above it called.  It lives in
** keys/ (beside the header codec that names the format version) because
** src/db and src/repl both use it and keys/ lies below both.
*/
#ifndef TDE_KEYS_LAYOUT_H
#define TDE_KEYS_LAYOUT_H

#include <stdint.h>

#define TDE_LAYOUT_HDR   8192      /* the header region: TDE_HEADER_BYTES */
#define TDE_LAYOUT_K     508       /* data pages per group: entries of one map page */

/* What decides a file's layout: its format version (0 counts as 1), its
** page size (512 .. 65536, a power of two) and the upgrade cursor (0: no
** move in progress; version 3 only). */
typedef struct TdeLayout {
  int version;
  uint32_t pgsz;
  uint64_t cursor;
} TdeLayout;

/* Does this layout put map regions among the pages (version 3)? */
int tdeLayoutHasRegions(const TdeLayout *L);

/* M: bytes of one map region at page size pgsz (version 3). */
int64_t tdeLayoutRegionBytes(uint32_t pgsz);

/* Physical offset of page pgno (>= 1). */
int64_t tdeLayoutPageOff(const TdeLayout *L, uint32_t pgno);

/* Physical offset of slot s (0 or 1) of map page g (version 3). */
int64_t tdeLayoutMapOff(const TdeLayout *L, uint32_t g, int s);

/* The physical size a truncation to SQLite size nSqlite bytes asks for
** (xTruncate, SQLITE_FCNTL_SIZE_HINT; never while the cursor is not 0:
** a writer finishes the move first).  Versions 1 and 2: nSqlite + 8192;
** version 3: off(N) + P for N = ceil(nSqlite / P) pages, 8192 for N = 0
** (and while the page size is unknown: the caller refuses that case). */
int64_t tdeLayoutPhysSize(const TdeLayout *L, int64_t nSqlite);

/* The SQLite size of a file of nPhys bytes (xFileSize).  A page the file
** ends inside of counts whole (SQLite then reads it, and the read reports
** the damage, or truncates it away).  Versions 1 and 2: nPhys - 8192 (0
** below), rounded up to whole pages when the page size is known (pgsz 0:
** to the byte); version 3: whole pages, a region the file ends inside of
** counting no page (0 while the page size is unknown).
** While an upgrade moves pages (cursor c != 0) the database holds
** max(c - 1, the version-3 count) pages: c - 1 until page N has moved,
** then N (docs/FORMAT.md "Upgrade from version 2"). */
int64_t tdeLayoutSqliteSize(const TdeLayout *L, int64_t nPhys);

/* Pages lying wholly inside a file of nPhys bytes (a last partial page
** not counted). */
uint32_t tdeLayoutWholePages(const TdeLayout *L, int64_t nPhys);

/* Does a file of nPhys bytes cut no page (pgsz known): versions 1 and 2,
** 8192 bytes plus a whole number of pages; version 3, a size whose page
** count (tdeLayoutSqliteSize) counts no partial page.  How a copy checks
** the page size it learns from a record (docs/FORMAT.md "Format version 3:
** Standby"). */
int tdeLayoutWhole(const TdeLayout *L, int64_t nPhys);

#endif /* TDE_KEYS_LAYOUT_H */
