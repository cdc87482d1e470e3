/* The page heap: free page runs of all segments, in bins by length, coalesced with their
 * neighbours on free. Serves superblocks (to thread heaps) and medium objects (directly).
 * One lock: it is taken once per superblock (64 KiB of small allocations) or per medium
 * object, never on the small-object fast paths.
 *
 * Bins: one per run length up to 128 pages (1 MiB, the largest medium object), so that a
 * request takes the shortest run that fits (best fit; among equals, the oldest segment's,
 * then the lowest address); longer runs share the last bin in that order.
 *
 * Purging: a free run is "dirty" while its pages may be resident. Runs dirty for longer than
 * the purge delay are given back with madvise; and whenever the dirty total passes the cap
 * (option DIRTY_MAX_MB) the excess goes back at once, so that RSS follows the live data even
 * if the program makes no further call. A segment that stays entirely free for the delay is
 * unmapped. */
#include "internal.h"
#include <string.h>

#define BINS 130                      /* bin i < 129: runs of exactly i pages; 129: longer */

pthread_mutex_t _trove_pages_lock = PTHREAD_MUTEX_INITIALIZER;
static trove_sb_t *bins[BINS];
static size_t dirty_pages;            /* pages in free runs marked dirty */
static size_t empty_segments;         /* segments with every page free (empty_since set) */
static size_t used_pages;             /* pages in runs handed out (superblocks, medium) */

static size_t bin_of(size_t npages) { return npages < BINS - 1 ? npages : BINS - 1; }
static trove_segment_t *seg_of(trove_sb_t *run) { return _trove_segment_of((uintptr_t)run); }
static uintptr_t run_addr(trove_sb_t *run) {
  return (uintptr_t)seg_of(run) + ((uintptr_t)run->page << TROVE_PAGE_SHIFT);
}

/* Bins are kept in segment creation order, then address order, and served first to last:
 * live runs pack into the oldest segments and the newest ones empty out and go back to the
 * OS, where LIFO order would leave a little live data in every segment. Creation order rather
 * than address order because a new segment's pages are untouched: with address order, the
 * second segment (mapped below the first) was served first again after a phase freed
 * everything, and its untouched tail was faulted in while dirty pages of the first waited
 * (threadtest-64: peak RSS 10.5 MiB after the second round, 8.9 after the first). */
static uint64_t run_order(trove_sb_t *run) { return seg_of(run)->seq << 16 | run->page; }

static void bin_push(trove_sb_t *run) {
  size_t b = bin_of(run->npages);
  uint64_t key = run_order(run);
  trove_sb_t *prev = NULL, *next = bins[b];
  while (next && run_order(next) < key) {
    prev = next;
    next = next->next;
  }
  run->prev = prev;
  run->next = next;
  if (next) next->prev = run;
  if (prev) prev->next = run; else bins[b] = run;
  if (run->dirty) dirty_pages += run->npages;
}

static void bin_remove(trove_sb_t *run) {
  size_t b = bin_of(run->npages);
  if (run->prev) run->prev->next = run->next; else bins[b] = run->next;
  if (run->next) run->next->prev = run->prev;
  if (run->dirty) dirty_pages -= run->npages;
}

/* Point every page of [first, first+n) at `first`, so that a lookup of any address in the run
 * finds its descriptor. */
static void map_pages(trove_segment_t *seg, size_t first, size_t n) {
  for (size_t i = 0; i < n; i++) seg->pagemap[first + i] = (uint16_t)(first * sizeof(trove_sb_t));
}

static trove_sb_t *make_free_run(trove_segment_t *seg, size_t first, size_t n, bool dirty,
                                 uint64_t now) {
  trove_sb_t *run = &seg->sb[first];
  memset(run, 0, sizeof *run);
  run->kind = TROVE_SPAN_FREE;
  run->page = (uint16_t)first;
  run->npages = (uint16_t)n;
  run->span_bytes = (uint32_t)(n << TROVE_PAGE_SHIFT);
  run->dirty = dirty;
  run->freed_at = now;
  run->start = (uintptr_t)seg + (first << TROVE_PAGE_SHIFT);
  map_pages(seg, first, n);
  return run;
}

static trove_sb_t *find_run(size_t need) {
  for (size_t b = bin_of(need); b < BINS; b++)
    for (trove_sb_t *r = bins[b]; r; r = r->next)
      if (r->npages >= need) return r;
  return NULL;
}

/* Carve [page, page+n) out of free run `run` (already out of its bin); the pieces before and
 * after go back to the bins. */
static trove_sb_t *split(trove_sb_t *run, size_t page, size_t n) {
  trove_segment_t *seg = seg_of(run);
  size_t first = run->page, total = run->npages, end = first + total;
  bool dirty = run->dirty;
  uint64_t at = run->freed_at;
  if (page > first) bin_push(make_free_run(seg, first, page - first, dirty, at));
  if (page + n < end) bin_push(make_free_run(seg, page + n, end - page - n, dirty, at));
  trove_sb_t *r = &seg->sb[page];
  if (r != run) memset(r, 0, sizeof *r);
  r->page = (uint16_t)page;
  r->npages = (uint16_t)n;
  r->span_bytes = (uint32_t)(n << TROVE_PAGE_SHIFT);
  r->start = (uintptr_t)seg + (page << TROVE_PAGE_SHIFT);
  r->dirty = dirty;
  r->next = r->prev = NULL;
  r->freed_at = 0;
  map_pages(seg, page, n);
  seg->free_pages -= (uint32_t)n;
  used_pages += n;
  if (seg->empty_since) empty_segments--;
  seg->empty_since = 0;
  return r;
}

trove_sb_t *_trove_pages_alloc(size_t npages, size_t align_pages, int kind) {
  if (align_pages == 0) align_pages = 1;
  size_t need = npages + align_pages - 1;
  if (need > TROVE_SEGMENT_PAGES - TROVE_HEADER_PAGES) return NULL;
  pthread_mutex_lock(&_trove_pages_lock);
  trove_sb_t *run = find_run(need);
  if (run == NULL) {
    trove_segment_t *seg = _trove_segment_new();
    if (seg == NULL) {
      /* Out of address space or memory: give back every empty segment and cached mapping
       * now (they would go after the purge delay anyway) and try once more. */
      pthread_mutex_unlock(&_trove_pages_lock);
      _trove_large_purge(true);
      _trove_pages_purge(true);
      pthread_mutex_lock(&_trove_pages_lock);
      if ((run = find_run(need)) != NULL) goto found;
      seg = _trove_segment_new();
    }
    if (seg == NULL) {
      pthread_mutex_unlock(&_trove_pages_lock);
      return NULL;
    }
    run = make_free_run(seg, seg->first_page, seg->free_pages, false, 0);
  } else {
  found:
    bin_remove(run);
  }
  size_t page = run->page;
  if (align_pages > 1) {
    uintptr_t a = run_addr(run), al = (uintptr_t)align_pages << TROVE_PAGE_SHIFT;
    page += (((a + al - 1) & ~(al - 1)) - a) >> TROVE_PAGE_SHIFT;
  }
  trove_sb_t *r = split(run, page, npages);
  r->kind = (uint8_t)kind;     /* before unlocking: a neighbour's free must not merge it */
  pthread_mutex_unlock(&_trove_pages_lock);
  return r;
}

/* Purging happens outside the lock (madvise can take a while on a large run, and other
 * threads must not wait for it): a run to purge leaves its bin with kind PURGING, which no
 * neighbour merges with and no segment unmap passes, and comes back clean afterwards. */
static void purge_take(trove_sb_t *run, trove_sb_t **list) {
  bin_remove(run);
  run->kind = TROVE_SPAN_PURGING;
  run->next = *list;
  *list = run;
}

/* Insert the free run [first, first+n) of `seg`, merged with free neighbours (lock held). */
static void insert_free(trove_segment_t *seg, size_t first, size_t n, bool dirty, uint64_t at) {
  if (first > seg->first_page) {                      /* coalesce with the run before */
    trove_sb_t *left = _trove_sb_of(seg, (uintptr_t)seg + ((first - 1) << TROVE_PAGE_SHIFT));
    if (left->kind == TROVE_SPAN_FREE) {
      bin_remove(left);
      dirty |= left->dirty;
      if (left->freed_at > at) at = left->freed_at;
      n += first - left->page;
      first = left->page;
    }
  }
  if (first + n < TROVE_SEGMENT_PAGES) {               /* and with the run after */
    trove_sb_t *right = &seg->sb[first + n];
    if (right->kind == TROVE_SPAN_FREE) {
      bin_remove(right);
      dirty |= right->dirty;
      if (right->freed_at > at) at = right->freed_at;
      n += right->npages;
    }
  }
  trove_sb_t *run = make_free_run(seg, first, n, dirty, at);
  bin_push(run);
  if (n == TROVE_SEGMENT_PAGES - seg->first_page && seg->empty_since == 0) {
    if (empty_segments >= 1) {       /* one empty segment waits for reuse; more go back now */
      bin_remove(run);
      _trove_segment_free(seg);
      return;
    }
    empty_segments++;
    seg->empty_since = at ? at : 1;
  }
}

static void purge_finish(trove_sb_t *list) {
  if (list == NULL) return;
  for (trove_sb_t *r = list; r; r = r->next) _trove_os_purge((void *)run_addr(r), r->span_bytes);
  pthread_mutex_lock(&_trove_pages_lock);
  for (trove_sb_t *r = list, *next; r; r = next) {
    next = r->next;
    insert_free(seg_of(r), r->page, r->npages, false, r->freed_at);
  }
  pthread_mutex_unlock(&_trove_pages_lock);
}

/* Lock held: pick dirty runs to give back until the dirty total is under half the cap,
 * longest runs first (most memory per system call). The cap is DIRTY_MAX_MB or the pages in
 * use, whichever is larger: a program that keeps a lot live also churns a lot of free space
 * between its blocks, and purging that at once would only fault it back in (the purge delay
 * still returns it when it stays unused); after a burst is freed, the in-use part is small
 * and the cap falls back to DIRTY_MAX_MB. With half the pages in use as the cap, sizesweep's
 * 1 MiB phase (32 live blocks of 8 B-1 MiB per thread) purged and faulted back 400 MiB:
 * 52 us per malloc/free pair instead of 4, for 3 MiB less peak RSS. */
static trove_sb_t *purge_over_cap(void) {
  size_t cap = (size_t)TROVE_OPT(DIRTY_MAX_MB) << (20 - TROVE_PAGE_SHIFT);
  if (cap < used_pages) cap = used_pages;
  trove_sb_t *list = NULL;
  if (dirty_pages <= cap) return NULL;
  for (size_t b = BINS; b-- > 1 && dirty_pages > cap / 2;)
    for (trove_sb_t *r = bins[b], *next; r && dirty_pages > cap / 2; r = next) {
      next = r->next;
      if (r->dirty) purge_take(r, &list);
    }
  return list;
}

void _trove_pages_free(trove_sb_t *run) {
  trove_segment_t *seg = seg_of(run);
  uint64_t now = _trove_os_now_ms();
  pthread_mutex_lock(&_trove_pages_lock);
  seg->free_pages += run->npages;
  used_pages -= run->npages;
  run->carved = 0;
  __atomic_store_n(&run->limit, 0, __ATOMIC_RELAXED);   /* no block passes _trove_sb_is_block */
  atomic_store_explicit(&run->heap, NULL, memory_order_relaxed);
  insert_free(seg, run->page, run->npages, true, now);
  trove_sb_t *purge = purge_over_cap();
  pthread_mutex_unlock(&_trove_pages_lock);
  purge_finish(purge);
}

bool _trove_pages_grow(trove_sb_t *run, size_t npages) {
  trove_segment_t *seg = seg_of(run);
  bool ok = false;
  pthread_mutex_lock(&_trove_pages_lock);
  size_t end = run->page + run->npages;
  if (npages <= run->npages) {
    ok = true;
  } else if (end < TROVE_SEGMENT_PAGES) {
    trove_sb_t *right = &seg->sb[end];
    size_t extra = npages - run->npages;
    if (right->kind == TROVE_SPAN_FREE && right->npages >= extra) {
      bin_remove(right);
      trove_sb_t *piece = split(right, end, extra);
      memset(piece, 0, sizeof *piece);
      run->npages = (uint16_t)npages;
      run->span_bytes = (uint32_t)(npages << TROVE_PAGE_SHIFT);
      map_pages(seg, run->page, npages);
      ok = true;
    }
  }
  pthread_mutex_unlock(&_trove_pages_lock);
  return ok;
}

/* Give back what has been free longer than the delay (everything if `all`), and unmap
 * segments that stayed empty that long. */
void _trove_pages_purge(bool all) {
  uint64_t now = _trove_os_now_ms(), delay = (uint64_t)TROVE_OPT(PURGE_DELAY_MS);
  trove_sb_t *list = NULL;
  pthread_mutex_lock(&_trove_pages_lock);
  for (trove_segment_t *seg = _trove_segments, *next; seg; seg = next) {
    next = seg->next;
    trove_sb_t *whole = &seg->sb[seg->first_page];
    if (seg->empty_since && whole->kind == TROVE_SPAN_FREE &&
        whole->npages == TROVE_SEGMENT_PAGES - seg->first_page &&
        (all || now - seg->empty_since >= delay)) {
      bin_remove(whole);
      empty_segments--;
      _trove_segment_free(seg);
    }
  }
  for (size_t b = 1; b < BINS; b++)
    for (trove_sb_t *r = bins[b], *next; r; r = next) {
      next = r->next;
      if (r->dirty && (all || now - r->freed_at >= delay)) purge_take(r, &list);
    }
  pthread_mutex_unlock(&_trove_pages_lock);
  purge_finish(list);
}

/* stats.c reads the bins under the lock */
void _trove_pages_totals(size_t *free_bytes, size_t *dirty_bytes) TROVE_HIDDEN;
void _trove_pages_totals(size_t *free_bytes, size_t *dirty_bytes) {
  size_t f = 0;
  for (size_t b = 1; b < BINS; b++)
    for (trove_sb_t *r = bins[b]; r; r = r->next) f += r->npages;
  *free_bytes = f << TROVE_PAGE_SHIFT;
  *dirty_bytes = dirty_pages << TROVE_PAGE_SHIFT;
}
