/*
** The main file's layout arithmetic (src/keys/layout.c, docs/FORMAT.md
** "Main database file" and "Format version 3: Layout"), issue 24 step 1:
**  - versions 1 and 2: page N at 8192 + (N-1)*P, sizes shifted by 8192;
**  - version 3: the formula off(N) = 8192 + M*(1 + (N-1)/K) + (N-1)*P
**    written out independently here, at the group boundaries (N = 508,
**    509, 1016, 1017) and for page 1, at every page size;
**  - pages and regions never overlap and map slots lie in their region;
**  - xFileSize's rule (tdeLayoutSqliteSize) against a brute-force count of
**    the pages a file of each size touches, at every byte offset around
**    region ends and page ends, and the truncation size round-tripping;
**  - the upgrade cursor puts pages below it at version 2's places.
** Pure arithmetic: no file, no SQLite.
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "keys/layout.h"

static const uint32_t aPgsz[] = { 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536 };
#define N_PGSZ (sizeof(aPgsz)/sizeof(aPgsz[0]))
#define K 508

/* The specification's formula, written out on its own. */
static int64_t specOff(uint32_t P, uint32_t N){
  int64_t M = P>8192 ? P : 8192;
  return 8192 + M*(1 + (int64_t)((N-1)/K)) + (int64_t)(N-1)*P;
}

/* Brute force: pages of version 3 the first nPhys bytes reach into. */
static int64_t bruteTouched(uint32_t P, int64_t nPhys, uint32_t nMax, int bPartial){
  TdeLayout L = { 3, P, 0 };
  int64_t n = 0;
  for(uint32_t N=1; N<=nMax; N++){
    int64_t o = tdeLayoutPageOff(&L, N);
    if( bPartial ? o<nPhys : o+P<=nPhys ) n = N;
  }
  return n;
}

static void test_v2_layout(void **state){
  (void)state;
  for(size_t i=0; i<N_PGSZ; i++){
    for(int v=0; v<=2; v++){
      TdeLayout L = { v, aPgsz[i], 0 };
      uint32_t P = aPgsz[i];
      assert_false(tdeLayoutHasRegions(&L));
      assert_int_equal(tdeLayoutPageOff(&L, 1), 8192);
      assert_int_equal(tdeLayoutPageOff(&L, 509), 8192 + 508*(int64_t)P);
      assert_int_equal(tdeLayoutPageOff(&L, 4000000000u), 8192 + 3999999999ll*P);
      assert_int_equal(tdeLayoutPhysSize(&L, 0), 8192);
      assert_int_equal(tdeLayoutPhysSize(&L, 7*(int64_t)P), 8192 + 7*(int64_t)P);
      assert_int_equal(tdeLayoutSqliteSize(&L, 0), 0);
      assert_int_equal(tdeLayoutSqliteSize(&L, 8192), 0);
      assert_int_equal(tdeLayoutSqliteSize(&L, 8192 + 3*(int64_t)P), 3*(int64_t)P);
      assert_int_equal(tdeLayoutSqliteSize(&L, 8192 + 3*(int64_t)P + 1), 4*(int64_t)P);   /* partial: whole */
      assert_int_equal(tdeLayoutWholePages(&L, 8192 + 3*(int64_t)P + 1), 3);
      assert_int_equal(tdeLayoutWholePages(&L, 100), 0);
      /* A copy's size fits the page size only without a cut page. */
      assert_true(tdeLayoutWhole(&L, 8192));
      assert_true(tdeLayoutWhole(&L, 8192 + 3*(int64_t)P));
      assert_false(tdeLayoutWhole(&L, 8192 + 3*(int64_t)P + P/2));
    }
    {
      TdeLayout L0 = { 2, 0, 0 };       /* page size unknown: to the byte */
      assert_int_equal(tdeLayoutSqliteSize(&L0, 8192 + 777), 777);
      assert_int_equal(tdeLayoutWholePages(&L0, 8192 + 77777), 0);
    }
  }
}

static void test_v3_offsets(void **state){
  static const uint32_t aN[] = { 1, 2, 507, 508, 509, 510, 1015, 1016, 1017, 5000, 262144, 4000000000u };
  (void)state;
  for(size_t i=0; i<N_PGSZ; i++){
    uint32_t P = aPgsz[i];
    TdeLayout L = { 3, P, 0 };
    int64_t M = tdeLayoutRegionBytes(P);
    assert_true(tdeLayoutHasRegions(&L));
    assert_int_equal(M, P>8192 ? P : 8192);
    assert_int_equal(M % P, 0);                         /* a whole number of pages */
    assert_int_equal(tdeLayoutPageOff(&L, 1), P<=8192 ? 16384 : 8192 + (int64_t)P);
    for(size_t j=0; j<sizeof(aN)/sizeof(aN[0]); j++){
      assert_int_equal(tdeLayoutPageOff(&L, aN[j]), specOff(P, aN[j]));
      /* pages aligned to P up to 8192, to 8192 above (the header region) */
      assert_int_equal(tdeLayoutPageOff(&L, aN[j]) % (P<8192 ? P : 8192), 0);
    }
    /* Inside a group pages are contiguous; across a group boundary the
    ** next region lies between them. */
    assert_int_equal(tdeLayoutPageOff(&L, 508) + P, tdeLayoutPageOff(&L, 509) - M);
    assert_int_equal(tdeLayoutPageOff(&L, 1016) + P, tdeLayoutPageOff(&L, 1017) - M);
    assert_int_equal(tdeLayoutPageOff(&L, 508) - tdeLayoutPageOff(&L, 507), P);
    /* Map slots: slot 0 starts the region, slot 1 at M/2, both before the
    ** group's first page and after the previous group's last. */
    for(uint32_t g=0; g<4; g++){
      int64_t s0 = tdeLayoutMapOff(&L, g, 0), s1 = tdeLayoutMapOff(&L, g, 1);
      assert_int_equal(s1 - s0, M/2);
      assert_int_equal(s0 + M, tdeLayoutPageOff(&L, g*K + 1));
      if( g>0 ) assert_int_equal(tdeLayoutPageOff(&L, g*K) + P, s0);
      assert_int_equal(s0 % (P==512 && (g&1) ? 2048 : 4096), 0);
      assert_int_equal(s1 % (P==512 && (g&1) ? 2048 : 4096), 0);
    }
    assert_int_equal(tdeLayoutMapOff(&L, 0, 0), 8192);
  }
}

/* xFileSize and truncation against brute force, at every byte around the
** ends of the first regions and pages (3 groups). */
static void test_v3_sizes(void **state){
  (void)state;
  for(size_t i=0; i<N_PGSZ; i++){
    uint32_t P = aPgsz[i];
    TdeLayout L = { 3, P, 0 };
    int64_t M = tdeLayoutRegionBytes(P);
    int64_t aEdge[16];
    int nEdge = 0;
    uint32_t nMax = 3*K + 2;
    aEdge[nEdge++] = 8192;
    for(uint32_t g=0; g<3; g++){
      aEdge[nEdge++] = tdeLayoutMapOff(&L, g, 0) + M/2;          /* inside a region */
      aEdge[nEdge++] = tdeLayoutMapOff(&L, g, 0) + M;            /* region end = first page */
      aEdge[nEdge++] = tdeLayoutPageOff(&L, g*K + 1) + P;        /* first page's end */
      aEdge[nEdge++] = tdeLayoutPageOff(&L, g*K + K) + P;        /* group end */
    }
    for(int e=0; e<nEdge; e++){
      for(int64_t d=-3; d<=3; d++){
        int64_t sz = aEdge[e] + d;
        int64_t nPartial = bruteTouched(P, sz, nMax, 1), nWhole = bruteTouched(P, sz, nMax, 0);
        assert_int_equal(tdeLayoutSqliteSize(&L, sz), nPartial*P);
        assert_int_equal(tdeLayoutWholePages(&L, sz), nWhole);
        assert_int_equal(tdeLayoutWhole(&L, sz), nPartial==nWhole);
      }
    }
    assert_int_equal(tdeLayoutSqliteSize(&L, 0), 0);
    assert_int_equal(tdeLayoutPhysSize(&L, 0), 8192);
    for(uint32_t N=1; N<=nMax; N+=(N<K-3 ? 97 : 1)){
      int64_t phys = tdeLayoutPhysSize(&L, (int64_t)N*P);
      assert_int_equal(phys, specOff(P, N) + P);
      assert_int_equal(tdeLayoutSqliteSize(&L, phys), (int64_t)N*P);      /* round trip */
      assert_int_equal(tdeLayoutWholePages(&L, phys), N);
      assert_true(tdeLayoutWhole(&L, phys));                              /* a standby's truncation fits */
      assert_int_equal(tdeLayoutPhysSize(&L, (int64_t)N*P - 1), phys);    /* a partial page: whole */
    }
    {
      TdeLayout L0 = { 3, 0, 0 };       /* page size unknown: nothing to count */
      assert_int_equal(tdeLayoutSqliteSize(&L0, 1000000), 0);
      assert_int_equal(tdeLayoutWholePages(&L0, 1000000), 0);
    }
  }
}

/* An upgrade in progress (cursor c): pages m < c at version 2's place,
** pages m >= c at version 3's.  A database of N pages (here across group
** boundaries) keeps its size N through the move: before the first batch
** (c = N + 1, the file still version 2's, a last partial page counted
** whole), after any batch (the file reaches page N's new place), at c = 1,
** and also when the file was extended past the new place; SQLite never
** sees a page vanish or appear mid-move. */
static void test_v3_cursor(void **state){
  static const uint32_t aN[] = { 1, 2, 508, 509, 1200 };
  (void)state;
  for(size_t i=0; i<N_PGSZ; i++){
    uint32_t P = aPgsz[i];
    TdeLayout L = { 3, P, 600 };
    assert_int_equal(tdeLayoutPageOff(&L, 1), 8192);
    assert_int_equal(tdeLayoutPageOff(&L, 599), 8192 + 598*(int64_t)P);
    assert_int_equal(tdeLayoutPageOff(&L, 600), specOff(P, 600));
    assert_true(tdeLayoutPageOff(&L, 600) > tdeLayoutPageOff(&L, 599));
    for(size_t j=0; j<sizeof(aN)/sizeof(aN[0]); j++){
      uint32_t N = aN[j];
      int64_t v2End = 8192 + (int64_t)N*P, v3End = specOff(P, N) + P;
      TdeLayout Ls = { 3, P, N + 1 };
      assert_int_equal(tdeLayoutSqliteSize(&Ls, v2End), (int64_t)N*P);
      assert_int_equal(tdeLayoutSqliteSize(&Ls, v2End - 1), (int64_t)N*P);   /* partial: whole */
      assert_int_equal(tdeLayoutWholePages(&Ls, v2End), N);
      assert_true(tdeLayoutSqliteSize(&(TdeLayout){ 3, P, 0 }, v2End) < (int64_t)N*P);
      for(uint32_t c=N; c>=1; c = c>3 ? c/2 : c-1){
        TdeLayout Lc = { 3, P, c };
        assert_int_equal(tdeLayoutSqliteSize(&Lc, v3End), (int64_t)N*P);
        assert_int_equal(tdeLayoutWholePages(&Lc, v3End), N);
        assert_int_equal(tdeLayoutSqliteSize(&Lc, specOff(P, N+1) + P), (int64_t)(N+1)*P);
        /* Moved pages above c at their new places, the rest at their old. */
        assert_int_equal(tdeLayoutPageOff(&Lc, N), c<=N ? specOff(P, N) : 8192 + (int64_t)(N-1)*P);
        if( c>1 ) assert_int_equal(tdeLayoutPageOff(&Lc, c-1), 8192 + (int64_t)(c-2)*P);
      }
    }
  }
}

int main(void){
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_v2_layout),
    cmocka_unit_test(test_v3_offsets),
    cmocka_unit_test(test_v3_sizes),
    cmocka_unit_test(test_v3_cursor),
  };
  return cmocka_run_group_tests(tests, 0, 0);
}
