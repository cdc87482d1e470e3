/* test_pages: the page heap's runs and bins, white-box (linked with libtrove_noov.a, and so
 * reaching trove's internal functions; single-threaded).
 *
 * One fresh segment is tiled with medium runs A(150 pages) x(10) B(150) y(10) and the free rest
 * T, then freed and taken again in an order that passes each way a run can join, leave or stay
 * in its bin: carved from the front of a long run whose rest stays in the long bin
 * (split_front), a free merging into a long neighbour after it or before it that stays in the
 * bin (merge_in_bin), a long run taken out when what is left of it is short, and a whole
 * segment going to the segment cache; a long run made of a long and a short one; a run carved
 * from a long one whose rest is 128 pages (the longest of the exact bins). After each step every segment is checked:
 *   - its runs tile it; each run is found by its first page and, if free or medium, its last;
 *   - its bins hold exactly its free runs, each in the bin of its length, in page order, with
 *     prev links that mirror next;
 *   - the page heap's own totals (free pages by walking the bins through the arena bitmaps,
 *     dirty pages by the arena counters) equal what the walk finds.
 * And where the bins must give a run back, the test checks it gets that run: a run lost from
 * its bin (its neighbours' links dropped) is not found again, and the allocation comes from
 * elsewhere. Run with TROVE_ARENAS=2 (CMakeLists.txt). */
#include "testhelper.h"
#include "internal.h"

static size_t bin_for(size_t npages) {
  return npages < TROVE_PAGE_BINS - 1 ? npages : TROVE_PAGE_BINS - 1;
}

/* The checks above over every segment; `step` names the step in a failure. */
static void check_all(const char *step) {
  _trove_pages_lock_all();
  size_t free_walk = 0, dirty_walk = 0;
  for (trove_segment_t *seg = _trove_pages_next_segment(NULL); seg;
       seg = _trove_pages_next_segment(seg)) {
    bool cached = seg->empty_since != 0;
    size_t seg_free = 0, pg = seg->first_page;
    while (pg < TROVE_SEGMENT_PAGES) {
      trove_sb_t *r = _trove_seg_run(seg, pg);
      if (r->page != pg || r->npages == 0 || pg + r->npages > TROVE_SEGMENT_PAGES) {
        EXPECT(0, "%s: segment %p page %zu: run at page %u of %u pages", step, (void *)seg, pg,
               r->page, r->npages);
        break;
      }
      if (r->kind == TROVE_SPAN_FREE || r->kind == TROVE_SPAN_MEDIUM)
        EXPECT(_trove_seg_run(seg, pg + r->npages - 1) == r,
               "%s: page %zu: the last page of a run of %u pages maps elsewhere", step, pg,
               r->npages);
      if (r->kind == TROVE_SPAN_FREE) {
        seg_free += r->npages;
        if (r->dirty) dirty_walk += r->npages;
      }
      pg += r->npages;
    }
    free_walk += seg_free;
    if (cached) {
      EXPECT(seg_free == TROVE_SEGMENT_PAGES - seg->first_page,
             "%s: a cached segment has %zu free pages", step, seg_free);
      continue;                                  /* in no bin */
    }
    size_t in_bins = 0;
    for (size_t b = 1; b < TROVE_PAGE_BINS; b++) {
      trove_sb_t *prev = NULL;
      for (trove_sb_t *r = seg->bin_runs[b]; r; prev = r, r = r->next) {
        EXPECT(r->kind == TROVE_SPAN_FREE, "%s: bin %zu holds a run of kind %d", step, b,
               r->kind);
        EXPECT(bin_for(r->npages) == b, "%s: bin %zu holds a run of %u pages", step, b,
               r->npages);
        EXPECT(r->prev == prev, "%s: bin %zu: the run at page %u has a wrong prev", step, b,
               r->page);
        EXPECT(prev == NULL || prev->page < r->page, "%s: bin %zu out of page order", step, b);
        EXPECT(_trove_seg_run(seg, r->page) == r, "%s: bin %zu: a run its page does not map",
               step, b);
        in_bins += r->npages;
        if (in_bins > TROVE_SEGMENT_PAGES) break;   /* a cycle */
      }
    }
    EXPECT(in_bins == seg_free, "%s: segment %p: %zu free pages in its bins, %zu in its runs",
           step, (void *)seg, in_bins, seg_free);
  }
  size_t free_bytes, dirty_bytes;
  _trove_pages_totals(&free_bytes, &dirty_bytes);
  _trove_pages_unlock_all();
  EXPECT(free_bytes >> TROVE_PAGE_SHIFT == free_walk,
         "%s: the bins hold %zu free pages, the segments %zu", step,
         free_bytes >> TROVE_PAGE_SHIFT, free_walk);
  EXPECT(dirty_bytes >> TROVE_PAGE_SHIFT == dirty_walk,
         "%s: the page heap counts %zu dirty pages, the segments hold %zu", step,
         dirty_bytes >> TROVE_PAGE_SHIFT, dirty_walk);
}

static trove_arena_ref_t ref;

static trove_sb_t *take(size_t npages, const char *what) {
  trove_sb_t *r = _trove_pages_alloc(&ref, npages, 1, TROVE_SPAN_MEDIUM);
  if (r == NULL) {
    fprintf(stderr, "FAIL: %s: no run of %zu pages\n", what, npages);
    exit(1);
  }
  EXPECT(r->npages == npages, "%s: %u pages, not %zu", what, r->npages, npages);
  check_all(what);
  return r;
}

static void give(trove_sb_t *r, const char *what) {
  _trove_pages_free(r);
  check_all(what);
}

int main(void) {
  T_FREE(T_MALLOC(1));                             /* trove is set up */
  /* An arena of its own (TROVE_ARENAS=2; the one thread's heap takes runs from the first): no
   * run of a heap's superblock or another segment's free tail is found before the test's. */
  if (_trove_pages_narenas() < 2) {
    fprintf(stderr, "FAIL: run with TROVE_ARENAS=2 or more\n");
    return 1;
  }
  ref.arena = (uint32_t)_trove_pages_narenas() - 1;
  check_all("start");
  /* A whole segment's worth first, so that the tiling below starts at a fresh one's start
   * whatever the arena held: then given back, the segment waits in the cache, and A takes it. */
  trove_sb_t *whole = take(TROVE_SEGMENT_PAGES - TROVE_HEADER_PAGES, "a whole segment");
  trove_segment_t *seg = _trove_segment_of((uintptr_t)whole);
  give(whole, "the whole segment back");
  size_t usable = TROVE_SEGMENT_PAGES - seg->first_page, rest = usable - 320;
  if (rest < TROVE_PAGE_BINS) {
    fprintf(stderr, "FAIL: segments of %zu usable pages: too few for this test\n", usable);
    return 1;
  }

  trove_sb_t *A = take(150, "A"), *x = take(10, "x (the rest of the segment stays in its bin)");
  trove_sb_t *B = take(150, "B"), *y = take(10, "y");
  trove_segment_t *s = _trove_segment_of((uintptr_t)A);
  size_t p0 = A->page;
  EXPECT(p0 == s->first_page, "A at page %zu of its segment, not its first (%u)", p0,
         s->first_page);
  EXPECT(_trove_segment_of((uintptr_t)y) == s && x->page == p0 + 150 && B->page == p0 + 160 &&
             y->page == p0 + 310,
         "the runs do not tile one segment from its start: %u %u %u %u", A->page, x->page,
         B->page, y->page);
  EXPECT(bin_for(rest) == TROVE_PAGE_BINS - 1 && _trove_seg_run(s, p0 + 320)->npages == rest,
         "the free rest is %u pages, not %zu", _trove_seg_run(s, p0 + 320)->npages, rest);

  give(A, "A freed: a long run alone");
  give(y, "y freed: merged into the long rest after it, which keeps its place (after A)");
  give(B, "B freed: merged into the long run after it");
  trove_sb_t *big = _trove_seg_run(s, p0 + 160);
  EXPECT(big->kind == TROVE_SPAN_FREE && big->npages == 160 + rest,
         "B, y and the rest: one free run of %u pages, not %zu", big->npages, 160 + rest);

  /* Too long for A: from the long run at B, leaving a short piece (out of the long bin). */
  trove_sb_t *C = take(110 + rest, "C from the merged run, its rest short");
  EXPECT(C->page == p0 + 160, "C at page %u, not %zu", C->page, p0 + 160);
  trove_sb_t *A2 = take(150, "A again");
  EXPECT(_trove_segment_of((uintptr_t)A2) == s && A2->page == p0,
         "150 pages not from A's free run: segment %p page %u", (void *)_trove_segment_of((uintptr_t)A2),
         A2->page);
  trove_sb_t *D = take(20, "D from the short piece after C");
  EXPECT(_trove_segment_of((uintptr_t)D) == s && D->page == p0 + 270 + rest,
         "D at page %u, not %zu", D->page, p0 + 270 + rest);

  give(x, "x freed: a short run between live ones");
  give(A2, "A freed again: merged with x, a long run");
  give(C, "C freed: merged into the long run before it, which stays in its bin");
  EXPECT(_trove_seg_run(s, p0)->npages == 270 + rest, "A to C: %u pages, not %zu",
         _trove_seg_run(s, p0)->npages, 270 + rest);
  give(D, "D freed: the segment whole again, to the cache");
  EXPECT(s->empty_since != 0, "the whole segment is not in the segment cache");

  /* Again from a fresh (or cached) segment: G(150) I(10) J(10) K(10) and the free rest. */
  trove_sb_t *G = take(150, "G"), *I = take(10, "I"), *J = take(10, "J"), *K = take(10, "K");
  s = _trove_segment_of((uintptr_t)G);
  p0 = G->page;
  EXPECT(p0 == s->first_page && _trove_segment_of((uintptr_t)K) == s && K->page == p0 + 170,
         "G to K do not tile one segment from its start: %u %u", G->page, K->page);
  give(G, "G freed: a long run alone");
  give(J, "J freed: short, between live runs");
  give(I, "I freed: into the long run before it and the short one after it");
  EXPECT(_trove_seg_run(s, p0)->npages == 170, "G to J: %u pages, not 170",
         _trove_seg_run(s, p0)->npages);
  trove_sb_t *L = take(42, "L from the front of G to J, its rest 128 pages (a short run)");
  EXPECT(L->page == p0 && _trove_seg_run(s, p0 + 42)->npages == 128,
         "L at page %u, not %zu, or its rest not 128 pages", L->page, p0);
  give(L, "L freed: merged with the short run after it");
  give(K, "K freed: the segment whole again");
  EXPECT(s->empty_since != 0, "the whole segment is not in the segment cache");

  if (th_failures) {
    fprintf(stderr, "test_pages: %d failures\n", th_failures);
    return 1;
  }
  printf("test_pages: ok\n");
  return 0;
}
