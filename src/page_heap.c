/* The page heap: free page runs of all segments, in bins by length, coalesced with their
 * neighbours on free. Serves superblocks (to thread heaps) and medium objects (directly).
 * Arenas: the page heap is split into arenas (option ARENAS; by default one per CPU the
 * process may run on), each with its own lock, segments and bins; a thread heap takes pages
 * from its own, (id - 1) mod N (see arena_lock); a run goes back to the arena of its segment.
 * A lock is taken once per superblock (32-64 KiB of small allocations) or per medium object,
 * never on the small-object fast paths. With one lock
 * for all, 16 threads of bench/stability on 16 cores waited 7.5 s in all on it in a 2 s run
 * (5 us held per call). The price is locality across arenas: an arena's free runs serve its
 * own threads first, and others only when they have no resident run of their own (steal_run,
 * steal_wait); empty segments are shared (the cache below) and the dirty cap is global.
 *
 * Bins: one per run length up to 128 pages (1 MiB, the largest medium object), so that a
 * request takes the shortest run that fits (best fit; among equals, the segment in the lowest
 * slot's, then the lowest address); longer runs share the last bin in that order.
 *
 * Purging: a free run is "dirty" while its pages may be resident. Runs dirty for longer than
 * the purge delay are given back with madvise; and whenever the dirty total passes the cap
 * (option DIRTY_MAX_MB) the excess goes back at once, so that RSS follows the live data even
 * if the program makes no further call. A segment that stays entirely free for the delay is
 * unmapped. */
#include "internal.h"
#include <string.h>

#define BINS TROVE_PAGE_BINS           /* bin i < 129: runs of exactly i pages; 129: longer */
#define ARENAS_MAX TROVE_ARENAS_MAX

typedef struct arena_s {        /* its lock is _trove_locks.arena[its index] (see fork) */
  uint64_t nonempty[(BINS + 63) / 64]; /* bit b: some segment has runs of bin b */
  trove_segment_t *segments;          /* this arena's segments */
  /* Slots (see bin_push): the arena's segments numbered densely, lowest free number first;
   * one mapping holds, for nslots = 64 * nwords (grown by doubling):
   *   slot_seg[nslots]      the segment in each slot (NULL: free)
   *   slot_used[nwords]     a bit per slot in use
   *   binmap[BINS][nwords]  bit s of row b: slot s's segment has runs of bin b
   *   binsum[BINS][nsum]    bit w of row b: word w of binmap row b is not 0 */
  trove_segment_t **slot_seg;
  uint64_t *slot_used, *binmap, *binsum;
  uint32_t nwords, nsum;
  size_t dirty_pages;                 /* pages in free runs marked dirty */
  /* The changes to dirty_pages and to this arena's pages in use not yet added to the global
   * totals below (see count_dirty). */
  long dirty_unpub, used_unpub;
  /* The fewest dirty pages this arena had since `low_since` (ms): that many stayed unused
   * for the whole window (see _trove_pages_purge). */
  size_t dirty_low;
  uint64_t low_since;
  /* Huge pages (segment.c): the newest probe, a segment mapped for sparse runs without them
   * whose residency decides for the sparse segments mapped after it; and how many segments
   * were mapped for sparse runs (every SPARSE_PROBE_EVERY-th is a probe). */
  trove_segment_t *sparse_probe;
  uint32_t sparse_made;
  uint32_t nsegs;                     /* segments in the arena (slots in use) */
} __attribute__((aligned(TROVE_CACHE_LINE))) arena_t;

static arena_t arenas[ARENAS_MAX];
static trove_mutex_t *arena_mutex(arena_t *a) { return &_trove_locks.arena[a - arenas].m; }
static size_t narenas = 1;            /* set once by _trove_pages_init, before any thread heap */
/* Totals over all arenas, for the dirty cap (relaxed: a cap, not an account). */
static _Atomic size_t dirty_total;    /* pages in free runs marked dirty */
static _Atomic size_t used_total;     /* pages in runs handed out (superblocks, medium) */
/* Each arena adds its changes to these totals once they reach this many pages either way
 * (count_dirty, count_used), so the totals lag the arenas' exact counts by less than this
 * per arena: 128 pages (1 MiB), fewer with more than 8 arenas so that the lag of all of them
 * stays under 8 MiB (16 pages with 64). Added on every change, the two counters' cache line
 * went from core to core on each page run taken or freed, whichever arena it was:
 * bench/phases at 2 threads spent 9% of its time in bin_push's and bin_remove's `lock add`
 * on it. With TROVE_DIRTY_MAX_MB set (a strict cap) every change is added at once. */
static long publish_pages = 128;
/* The recent peak (see dirty_cap): the most pages in use in this window of the purge delay and
 * in the one before, and when this window began (ms). Relaxed: hints that decide how much
 * free memory to keep, not accounts. */
static _Atomic size_t peak_cur, peak_prev;
static _Atomic uint64_t window_ms;

/* Empty segments: an arena whose segment empties hands it here, and an arena that needs a
 * segment takes one from here before mapping a new one, so empty segments serve every arena.
 * At most 1 + N/8 wait (their free run's dirty pages count in dirty_total), each for at most
 * the purge delay; more are unmapped at once. (Kept in each arena instead, up to N empty
 * segments of 4 MiB could wait.) Lock order: an arena's lock, then this one. */
static trove_segment_t *cache;        /* newest first */
static _Atomic size_t ncached;       /* changed under _trove_locks.segment_cache; read without it as a hint */

void _trove_pages_init(void) {
  size_t n = (size_t)TROVE_OPT(ARENAS);
  if (n == 0) n = _trove_os_ncpus();
  narenas = n < 1 ? 1 : n > ARENAS_MAX ? ARENAS_MAX : n;
  for (size_t i = 0; i < narenas; i++) _trove_mutex_init(&_trove_locks.arena[i].m);
  if (narenas > 8) publish_pages = (long)(1024 / narenas);
  if (_trove_options_set[TROVE_OPT_DIRTY_MAX_MB]) publish_pages = 1;
}

size_t _trove_pages_narenas(void) { return narenas; }

/* Runs handed out that no page of was resident (never touched, or purged): a count that
 * tells the thread heaps when memory they keep in their medium caches would have served
 * (heap.c, others_fresh and the medium quick free). Relaxed: a hint. */
_Atomic uint64_t _trove_fresh_runs;

/* Arena lock held: count `d` pages more (or fewer) dirty, or in use, in arena `a`. */
static void count_dirty(arena_t *a, long d) {
  __atomic_store_n(&a->dirty_pages, a->dirty_pages + (size_t)d, __ATOMIC_RELAXED);  /* peeked */
  a->dirty_unpub += d;
  if (a->dirty_unpub >= publish_pages || -a->dirty_unpub >= publish_pages) {
    atomic_fetch_add_explicit(&dirty_total, (size_t)a->dirty_unpub, memory_order_relaxed);
    a->dirty_unpub = 0;
  }
}
static void count_used(arena_t *a, long d) {
  a->used_unpub += d;
  if (a->used_unpub >= publish_pages || -a->used_unpub >= publish_pages) {
    atomic_fetch_add_explicit(&used_total, (size_t)a->used_unpub, memory_order_relaxed);
    a->used_unpub = 0;
  }
}

/* Arena lock held, after a run was taken or purged (not inside: a split takes the whole run
 * out of its bin before the rest goes back). */
static void note_low(arena_t *a) {
  if (a->dirty_pages < a->dirty_low) a->dirty_low = a->dirty_pages;
}

/* Another arena's dirty pages, without its lock: a hint (whether its lock is worth taking). */
static size_t dirty_peek(const arena_t *a) {
  return __atomic_load_n(&a->dirty_pages, __ATOMIC_RELAXED);
}

static size_t seg_usable(const trove_segment_t *seg) { return TROVE_SEGMENT_PAGES - seg->first_page; }
static size_t cached_dirty(trove_segment_t *seg) {
  return _trove_seg_run(seg, seg->first_page)->dirty ? seg_usable(seg) : 0;
}

/* Unmap a list of segments taken out of the cache (no lock held: munmap can be slow). */
static void cache_release(trove_segment_t *list) {
  for (trove_segment_t *seg = list, *next; seg; seg = next) {
    next = seg->next;
    _trove_segment_free(seg);
  }
}

/* Take out of the cache the segments past `keep`, oldest first, or those cached before
 * `before` (ms; 0: none): the caller unmaps them. */
static trove_segment_t *cache_trim(size_t keep, uint64_t before) {
  trove_segment_t *out = NULL;
  _trove_mutex_lock(&_trove_locks.segment_cache);
  size_t i = 0;
  for (trove_segment_t *seg = cache, *next; seg; seg = next, i++) {
    next = seg->next;
    if (i < keep && !(before && seg->empty_since < before)) continue;
    if (seg->prev) seg->prev->next = seg->next; else cache = seg->next;
    if (seg->next) seg->next->prev = seg->prev;
    atomic_fetch_sub_explicit(&ncached, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&dirty_total, cached_dirty(seg), memory_order_relaxed);
    seg->next = out;
    out = seg;
  }
  _trove_mutex_unlock(&_trove_locks.segment_cache);
  return out;
}

/* Arena lock held: `seg` has just become all free (its whole run is made, not in a bin). */
static void slot_release(arena_t *a, trove_segment_t *seg);
static void cache_put(arena_t *a, trove_segment_t *seg, uint64_t at) {
  slot_release(a, seg);
  if (a->sparse_probe == seg) a->sparse_probe = NULL;
  if (seg->prev) seg->prev->next = seg->next; else a->segments = seg->next;
  if (seg->next) seg->next->prev = seg->prev;
  seg->empty_since = at ? at : 1;
  _trove_mutex_lock(&_trove_locks.segment_cache);
  seg->prev = NULL;
  seg->next = cache;
  if (cache) cache->prev = seg;
  cache = seg;
  atomic_fetch_add_explicit(&ncached, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&dirty_total, cached_dirty(seg), memory_order_relaxed);
  _trove_mutex_unlock(&_trove_locks.segment_cache);
}

/* No lock held: unmap the cached segments past the bound. */
static size_t recent_peak(size_t used, uint64_t now);
/* How many empty segments may wait: 1 + N/8, and enough to cover the recent peak (see
 * dirty_cap), rounded up. Rounded down, the last part segment of the way back to the peak was
 * unmapped and faulted in again each round: 32 buffers grown by doubling from 16 B to 2 MiB,
 * 20 rounds (scratch `vgrow 32`), released about two segments a round as the buffers grew:
 * 79k page faults and 0.66 s; rounded up, 67k and 0.61 s, for 1% more peak RSS (112 -> 113
 * MiB; mimalloc 96, tcmalloc 94; medians of 5). */
static size_t cache_keep(void) {
  size_t used = atomic_load_explicit(&used_total, memory_order_relaxed);
  size_t peak = recent_peak(used, _trove_os_now_ms());
  size_t keep = 1 + narenas / 8, per = TROVE_SEGMENT_PAGES - TROVE_HEADER_PAGES;
  if (peak > used) keep += (peak - used + per - 1) / per;
  return keep;
}

static void cache_bound(void) {
  /* at least 1 + N/8 stay: no clock read (cache_keep's) for the frees that find fewer */
  if (atomic_load_explicit(&ncached, memory_order_relaxed) <= 1 + narenas / 8) return;
  size_t keep = cache_keep();
  if (atomic_load_explicit(&ncached, memory_order_relaxed) <= keep) return;
  cache_release(cache_trim(keep, 0));
}

/* Arena lock held, slots_reserve done: the newest cached segment, now the arena's, or NULL. */
static void slot_take(arena_t *a, trove_segment_t *seg);
static trove_segment_t *cache_take(arena_t *a) {
  if (atomic_load_explicit(&ncached, memory_order_relaxed) == 0) return NULL;   /* a hint */
  _trove_mutex_lock(&_trove_locks.segment_cache);
  trove_segment_t *seg = cache;
  if (seg) {
    cache = seg->next;
    if (cache) cache->prev = NULL;
    atomic_fetch_sub_explicit(&ncached, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&dirty_total, cached_dirty(seg), memory_order_relaxed);
  }
  _trove_mutex_unlock(&_trove_locks.segment_cache);
  if (seg == NULL) return NULL;
  seg->empty_since = 0;
  seg->arena = (uint32_t)(a - arenas);
  slot_take(a, seg);
  seg->prev = NULL;
  seg->next = a->segments;
  if (a->segments) a->segments->prev = seg;
  a->segments = seg;
  return seg;
}

/* Lock the arena a heap takes pages from: its own, (id - 1) mod N, from its first call.
 * Threads that share an arena put their superblocks side by side in its segments, and their
 * descriptors and page map entries in the same pages of the segment header, which each
 * thread's malloc and free read and write on every call. Until the fifth session every heap
 * started in arena 0 and moved to its own only when it found that lock contended (for the
 * peak RSS of partly used segments: threadtest-64 17% more at 2 threads back then); measured
 * again, separate segments cost nothing there or on sizesweep, and two threads of
 * larson-small (no page heap call in their steady state, the lock never contended) went
 * from 133-142M to 152-157M replacements a second (mimalloc 149-154M), threadtest 5-7%
 * faster, shbench-small 3%, phases-large 10-13%; blowup-pc's peak RSS at 4 threads rose
 * 8-11%, shbench-large's 3-6%, mstress's 7-12% (docs/BENCHMARKS.md, fifth session). */
static arena_t *arena_lock(trove_arena_ref_t *ref) {
  arena_t *a = &arenas[ref->arena];
  _trove_lock(arena_mutex(a), TROVE_LOCK_PAGES);
  return a;
}

void _trove_pages_arena_init(trove_arena_ref_t *ref, uint32_t heap_id) {
  ref->arena = heap_id ? (uint32_t)((heap_id - 1) % narenas) : 0;
}

static size_t bin_of(size_t npages) { return npages < BINS - 1 ? npages : BINS - 1; }
static trove_segment_t *seg_of(trove_sb_t *run) { return _trove_segment_of((uintptr_t)run); }
static arena_t *arena_of(trove_segment_t *seg) { return &arenas[seg->arena]; }
static uintptr_t run_addr(trove_sb_t *run) {
  return (uintptr_t)seg_of(run) + ((uintptr_t)run->page << TROVE_PAGE_SHIFT);
}

/* A bin is two-level: a bitmap of the arena's segments that have runs of its length, by slot,
 * and in each segment those runs in page order (segment_t.bin_runs). Segments are taken
 * lowest slot first, so that allocations gather in the same segments and the others can
 * empty and go back. Inserting a run costs a walk of its segment's runs of that length (at
 * most 512 / length) and a bit; with one flat list of runs, a free walked every run of its
 * length (freeing every other one of 20,000 medium blocks of 72 KiB took 0.32 s: 16 us a
 * free; mimalloc and jemalloc 1-2 ms), and with a list of segments in creation order, a free
 * that was its segment's first run of that length walked the list to its place: with 600 MiB
 * of 64-256 KiB buffers in flight (handoff-medium, 8 threads), 280 segments, that walk was
 * 11% of the run's time and stretched the arena lock's hold. */
static uint64_t *bin_row(const arena_t *a, size_t b) { return a->binmap + b * a->nwords; }
static uint64_t *bin_sum(const arena_t *a, size_t b) { return a->binsum + b * a->nsum; }

/* The segment in the lowest slot at or above `from` that has runs of bin b, or NULL. */
static trove_segment_t *bin_seg_from(const arena_t *a, size_t b, size_t from) {
  size_t w = from / 64;
  if (w >= a->nwords) return NULL;         /* (no tables yet: nwords 0) */
  const uint64_t *row = bin_row(a, b), *sum = bin_sum(a, b);
  uint64_t m = row[w] & (~(uint64_t)0 << (from % 64));
  if (m == 0) {
    /* the next non-empty word after w, by the summary */
    size_t sw = (w + 1) / 64, bit = (w + 1) % 64;
    for (; sw < a->nsum; sw++, bit = 0) {
      uint64_t sm = sum[sw] & (~(uint64_t)0 << bit);
      if (sm) {
        w = sw * 64 + (size_t)__builtin_ctzll(sm);
        m = row[w];
        break;
      }
    }
    if (m == 0) return NULL;
  }
  return a->slot_seg[w * 64 + (size_t)__builtin_ctzll(m)];
}

#define FOR_BIN(a, b, r)                                                                   \
  for (trove_segment_t *s_ = bin_seg_from((a), (b), 0); s_; s_ = bin_seg_from((a), (b), s_->slot + 1)) \
    for (trove_sb_t *r = s_->bin_runs[b], *rn_; r && ((rn_ = r->next), 1); r = rn_)

/* Arena lock held: make sure a slot is free for the next segment that joins the arena (a new
 * one or one from the cache); false if the bitmaps could not grow (out of memory). */
static bool slots_reserve(arena_t *a) {
  for (size_t w = 0; w < a->nwords; w++)
    if (~a->slot_used[w]) return true;
  size_t nw = a->nwords ? 2 * (size_t)a->nwords : 1, ns = (nw + 63) / 64;
  size_t bytes = nw * 64 * sizeof(trove_segment_t *) + (nw + BINS * nw + BINS * ns) * 8;
  char *m = _trove_os_map(bytes);
  if (m == NULL) return false;
  trove_segment_t **slot_seg = (trove_segment_t **)m;
  uint64_t *slot_used = (uint64_t *)(m + nw * 64 * sizeof(trove_segment_t *));
  uint64_t *binmap = slot_used + nw, *binsum = binmap + BINS * nw;
  if (a->nwords) {                         /* copy the old tables into the new layout */
    memcpy(slot_seg, a->slot_seg, a->nwords * 64 * sizeof(trove_segment_t *));
    memcpy(slot_used, a->slot_used, a->nwords * 8);
    for (size_t b = 0; b < BINS; b++) {
      memcpy(binmap + b * nw, bin_row(a, b), a->nwords * 8);
      memcpy(binsum + b * ns, bin_sum(a, b), a->nsum * 8);
    }
    size_t old = a->nwords * 64 * sizeof(trove_segment_t *) +
                 ((size_t)a->nwords + BINS * (size_t)a->nwords + BINS * (size_t)a->nsum) * 8;
    _trove_os_unmap(a->slot_seg, old);
  }
  a->slot_seg = slot_seg;
  a->slot_used = slot_used;
  a->binmap = binmap;
  a->binsum = binsum;
  a->nwords = (uint32_t)nw;
  a->nsum = (uint32_t)ns;
  return true;
}

/* Arena lock held, slots_reserve done: `seg` joins the arena in its lowest free slot. */
static void slot_take(arena_t *a, trove_segment_t *seg) {
  for (size_t w = 0; w < a->nwords; w++) {
    uint64_t f = ~a->slot_used[w];
    if (f) {
      size_t i = w * 64 + (size_t)__builtin_ctzll(f);
      a->slot_used[w] |= (uint64_t)1 << (i % 64);
      a->slot_seg[i] = seg;
      a->nsegs++;
      seg->slot = (uint32_t)i;
      return;
    }
  }
  __builtin_trap();                        /* unreachable: slots_reserve came first */
}

/* Arena lock held: `seg` leaves the arena (it has no run in any bin). */
static void slot_release(arena_t *a, trove_segment_t *seg) {
  size_t i = seg->slot;
  a->slot_used[i / 64] &= ~((uint64_t)1 << (i % 64));
  a->slot_seg[i] = NULL;
  a->nsegs--;
}

static void bin_push(arena_t *a, trove_sb_t *run) {
  size_t b = bin_of(run->npages);
  trove_segment_t *seg = seg_of(run);
  if (seg->bin_runs[b] == NULL) {            /* its first run of this length: join the bin */
    size_t s = seg->slot;
    bin_row(a, b)[s / 64] |= (uint64_t)1 << (s % 64);
    bin_sum(a, b)[s / 4096] |= (uint64_t)1 << ((s / 64) % 64);
    a->nonempty[b / 64] |= (uint64_t)1 << (b % 64);
  }
  trove_sb_t *prev = NULL, *next = seg->bin_runs[b];
  while (next && next->page < run->page) {
    prev = next;
    next = next->next;
  }
  run->prev = prev;
  run->next = next;
  if (next) next->prev = run;
  if (prev) prev->next = run; else seg->bin_runs[b] = run;
  if (run->dirty) count_dirty(a, run->npages);
}

static void bin_remove(arena_t *a, trove_sb_t *run) {
  size_t b = bin_of(run->npages);
  trove_segment_t *seg = seg_of(run);
  if (run->prev) run->prev->next = run->next; else seg->bin_runs[b] = run->next;
  if (run->next) run->next->prev = run->prev;
  if (seg->bin_runs[b] == NULL) {             /* its last run of this length: leave the bin */
    size_t s = seg->slot;
    uint64_t *word = &bin_row(a, b)[s / 64];
    *word &= ~((uint64_t)1 << (s % 64));
    if (*word == 0) {
      uint64_t *sum = bin_sum(a, b);
      sum[s / 4096] &= ~((uint64_t)1 << ((s / 64) % 64));
      bool any = false;
      for (size_t i = 0; i < a->nsum && !any; i++) any = sum[i] != 0;
      if (!any) a->nonempty[b / 64] &= ~((uint64_t)1 << (b % 64));
    }
  }
  if (run->dirty) count_dirty(a, -(long)run->npages);
}

/* Descriptor slots. A run's descriptor is the lowest free slot when the run is made, not
 * the slot of its first page: the 40-130 runs of a segment then share 2-3 pages of the header
 * instead of touching each of the 16 pages of slots (4.6 MiB resident for 256 MiB of live
 * blocks in 69 segments, 1.75%), and their hot lines lie side by side, in every set of the L1
 * cache. A slot is freed when its run merges into a neighbour; page-map entries inside free
 * runs (and medium runs: split maps only their ends) may still point to it, and to whatever
 * run takes it next, which is harmless: a lookup by such an inner page comes only from a bad
 * free, and _trove_sb_is_block rejects an address that is not a block start of the run
 * described, before or after it. */
static trove_sb_t *desc_new(trove_segment_t *seg) {
  for (size_t w = 0; w < TROVE_SEGMENT_PAGES / 64; w++) {
    uint64_t free_slots = ~seg->desc_used[w];
    if (free_slots) {
      size_t i = (size_t)__builtin_ctzll(free_slots);
      seg->desc_used[w] |= (uint64_t)1 << i;
      return &seg->sb[w * 64 + i];
    }
  }
  __builtin_trap();        /* unreachable: at most one run per usable page, fewer than slots */
}

static void desc_free(trove_segment_t *seg, trove_sb_t *d) {
  size_t i = (size_t)(d - seg->sb);
  d->kind = TROVE_SPAN_FREE;
  __atomic_store_n(&d->limit, 0, __ATOMIC_RELAXED);     /* no block passes _trove_sb_is_block */
  seg->desc_used[i / 64] &= ~((uint64_t)1 << (i % 64));
}

/* For a bad free's report (no lock: a hint): does `a` lie in the free run `sb` describes? The
 * slot an inner page leads to may be stale (above): freed, or another run's since. */
bool _trove_pages_in_free_run(const trove_sb_t *sb, uintptr_t a) {
  const trove_segment_t *seg = _trove_segment_of((uintptr_t)sb);
  size_t i = (size_t)(sb - seg->sb);
  return sb->kind == TROVE_SPAN_FREE && ((seg->desc_used[i / 64] >> (i % 64)) & 1) != 0 &&
         a - run_addr((trove_sb_t *)sb) < ((size_t)sb->npages << TROVE_PAGE_SHIFT);
}

static uint16_t desc_offset(trove_segment_t *seg, const trove_sb_t *d) {
  return (uint16_t)((const char *)d - (const char *)seg->sb);
}

/* Point every page of [first, first+n) at `run`, so that a lookup of any address in the run
 * finds its descriptor. */
static void map_pages(trove_segment_t *seg, trove_sb_t *run, size_t first, size_t n) {
  uint16_t off = desc_offset(seg, run);
  for (size_t i = 0; i < n; i++) seg->pagemap[first + i] = off;
}

static size_t peak_now(void) {
  size_t a = atomic_load_explicit(&peak_prev, memory_order_relaxed);
  size_t b = atomic_load_explicit(&peak_cur, memory_order_relaxed);
  return a > b ? a : b;
}

/* A descriptor cleared by plain 16-byte stores. GCC makes a memset of its 128 bytes a `rep
 * stos`, whose start-up cost is most of a short one's time: 42% of split_front's samples in a
 * medium malloc/free loop (`perf record`, fastpath --medium). */
static inline void desc_zero(trove_sb_t *d) {
  typedef uint64_t zero_t __attribute__((vector_size(16), aligned(16)));
  _Static_assert(sizeof(trove_sb_t) % sizeof(zero_t) == 0 && _Alignof(trove_sb_t) >= 16,
                 "a descriptor is whole 16-byte words");
  zero_t *w = (zero_t *)(void *)d;
#pragma GCC unroll 16
  for (size_t i = 0; i < sizeof(trove_sb_t) / sizeof(zero_t); i++) w[i] = (zero_t){0, 0};
}

/* Describe the free run [first, first+n) with `run`, a descriptor slot of `seg`. */
static trove_sb_t *make_free_run(trove_segment_t *seg, trove_sb_t *run, size_t first, size_t n,
                                 bool dirty, uint64_t now) {
  desc_zero(run);
  run->kind = TROVE_SPAN_FREE;
  run->page = (uint16_t)first;
  run->npages = (uint16_t)n;
  run->span_bytes = (uint32_t)(n << TROVE_PAGE_SHIFT);
  run->dirty = dirty;
  run->freed_at = now;
  run->start = (uintptr_t)seg + (first << TROVE_PAGE_SHIFT);
  /* Only the ends: insert_free finds the run before through its last page; nothing else looks
   * a free run up by an inner page but a bad free, which the descriptor it finds rejects (see
   * desc_new). Mapping every page cost phases 890 instructions per page run taken: each split
   * of a long free run rewrote its whole remainder. */
  seg->pagemap[first] = seg->pagemap[first + n - 1] = desc_offset(seg, run);
  return run;
}

/* The first non-empty bin from `b` on, or BINS. (Walking the bins one by one, a page run taken
 * from a long free run, as after a phase that freed everything, passed ~120 empty bins:
 * bench/phases spent 450 instructions a superblock there.) */
static size_t next_bin(const arena_t *a, size_t b) {
  for (size_t w = b / 64; w < sizeof a->nonempty / sizeof a->nonempty[0]; w++) {
    uint64_t m = a->nonempty[w];
    if (w == b / 64) m &= ~(uint64_t)0 << (b % 64);
    if (m) return w * 64 + (size_t)__builtin_ctzll(m);
  }
  return BINS;
}

/* The first run that fits, by bin and slot. A sparse request (not `dense`) passes over the
 * untouched runs of a segment kept for dense superblocks in huge pages (segment.c): its
 * pages would fault in 2 MiB at a time whether the program writes them or not. Such runs
 * are few: the page heap fills a segment from its start, so only the newest dense segment of
 * an arena has an untouched tail. */
static trove_sb_t *find_run(arena_t *a, size_t need, bool dense) {
  for (size_t b = next_bin(a, bin_of(need)); b < BINS; b = next_bin(a, b + 1))
    FOR_BIN(a, b, r)
      if (r->npages >= need &&
          (dense || r->dirty || atomic_load_explicit(&s_->huge, memory_order_relaxed) != 2))
        return r;
  return NULL;
}

/* The carved run [page, page+n) of `seg`, described by `r`. */
TROVE_INLINE trove_sb_t *carved(arena_t *a, trove_segment_t *seg, trove_sb_t *r, size_t page,
                                size_t n, bool dirty, bool every_page) {
  r->page = (uint16_t)page;
  r->npages = (uint16_t)n;
  r->span_bytes = (uint32_t)(n << TROVE_PAGE_SHIFT);
  r->start = (uintptr_t)seg + (page << TROVE_PAGE_SHIFT);
  r->dirty = dirty;
  r->next = r->prev = NULL;
  r->freed_at = 0;
  if (every_page) map_pages(seg, r, page, n);
  else seg->pagemap[page] = seg->pagemap[page + n - 1] = desc_offset(seg, r);
  seg->free_pages -= (uint32_t)n;
  count_used(a, (long)n);
  size_t used = atomic_load_explicit(&used_total, memory_order_relaxed);
  if (used > atomic_load_explicit(&peak_cur, memory_order_relaxed))
    atomic_store_explicit(&peak_cur, used, memory_order_relaxed);   /* a hint: races lose little */
  return r;
}

/* Carve [page, page+n) out of free run `run` (already out of its bin); the
 * pieces before and after go to the bins. `every_page`: map each page of the carved run to it,
 * as a superblock needs (a free of any of its blocks looks its page up); else only its first page
 * (free, realloc and malloc_usable_size of the one block, which starts there) and its last
 * (insert_free finds the run before a freed one through its last page). A medium run's inner
 * pages may then point to a descriptor slot since freed or reused, which only a bad free
 * reads, and rejects as desc_new says. Mapping every page of medium runs cost a 1 MiB run 128
 * stores: fastpath-medium (200k pairs, 50k page-heap trips) took 125.25M instructions with
 * them, 122.68M with the ends only (callgrind).
 *
 * split_front: a run carved from the front of a long run (the bin of runs longer than 128
 * pages) whose rest is still that long leaves the rest where it is: it keeps its descriptor
 * and its place in its segment's list of the bin (in page order, and the rest only starts
 * later), and the carved run takes a new slot. Taken out and pushed back, the rest left the
 * bin's bitmaps and joined them again (its segment's only long run, most often): about 145
 * instructions of such a carve, as of a free that merges into such a run (insert_free). */
static trove_sb_t *split(arena_t *a, trove_sb_t *run, size_t page, size_t n, bool every_page) {
  trove_segment_t *seg = seg_of(run);
  size_t first = run->page, total = run->npages, end = first + total;
  bool dirty = run->dirty;
  uint64_t at = run->freed_at;
  /* The piece before keeps `run`'s slot; the carved run keeps it when there is none. */
  trove_sb_t *r = run;
  if (page > first) {
    bin_push(a, make_free_run(seg, run, first, page - first, dirty, at));
    r = desc_new(seg);
    desc_zero(r);
  }
  if (page + n < end)
    bin_push(a, make_free_run(seg, desc_new(seg), page + n, end - page - n, dirty, at));
  return carved(a, seg, r, page, n, dirty, every_page);
}

/* May split_front carve [page, page+n) out of `run`, in its bin? */
static bool front_of_long(const trove_sb_t *run, size_t page, size_t n) {
  return page == run->page && run->npages - n >= BINS - 1;
}

/* split where front_of_long holds. */
static TROVE_NOINLINE trove_sb_t *split_front(arena_t *a, trove_sb_t *run, size_t n,
                                              bool every_page) {
  trove_segment_t *seg = seg_of(run);
  size_t page = run->page, rest = run->npages - n;
  trove_sb_t *r = desc_new(seg);
  desc_zero(r);
  run->page = (uint16_t)(page + n);
  run->npages = (uint16_t)rest;
  run->span_bytes = (uint32_t)(rest << TROVE_PAGE_SHIFT);
  run->start = (uintptr_t)seg + ((page + n) << TROVE_PAGE_SHIFT);
  seg->pagemap[page + n] = desc_offset(seg, run);   /* its last page's entry stands */
  if (run->dirty) count_dirty(a, -(long)n);
  return carved(a, seg, r, page, n, run->dirty, every_page);
}

/* Carve [page, page+npages) of `run` (in its bin if `in_bin`) at the alignment asked for. */
static trove_sb_t *carve(arena_t *a, trove_sb_t *run, size_t npages, size_t align_pages, int kind,
                         bool in_bin) {
  size_t page = run->page;
  if (align_pages > 1) {
    uintptr_t addr = run_addr(run), al = (uintptr_t)align_pages << TROVE_PAGE_SHIFT;
    page += (((addr + al - 1) & ~(al - 1)) - addr) >> TROVE_PAGE_SHIFT;
  }
  trove_sb_t *r;
  if (in_bin && front_of_long(run, page, npages)) {
    r = split_front(a, run, npages, kind == TROVE_SPAN_SMALL);
  } else {
    if (in_bin) bin_remove(a, run);
    r = split(a, run, page, npages, kind == TROVE_SPAN_SMALL);
  }
  r->kind = (uint8_t)kind;     /* before unlocking: a neighbour's free must not merge it */
  note_low(a);
  return r;
}

static trove_sb_t *find_dirty_run(arena_t *a, size_t need) {
  if (a->dirty_pages < need) return NULL;
  for (size_t b = next_bin(a, bin_of(need)); b < BINS; b = next_bin(a, b + 1))
    FOR_BIN(a, b, r)
      if (r->dirty && r->npages >= need) return r;
  return NULL;
}

/* Arena `a` (locked) has no run that fits, or only clean ones (purged or never touched):
 * take a resident (dirty) one from another arena whose lock is free, rather than fault in
 * pages. The run stays in its segment's arena (its free goes back there); only the allocation
 * crosses over: the runs a thread freed into another arena's segments (blocks it was handed,
 * medium objects) would otherwise wait there for the purge. On 16 cores, shbench-large at 16
 * threads: 142 MiB peak RSS without this, 133 stealing only when nothing fits, 125 also when
 * only clean runs fit (83 with one arena). A clean run of another arena saves no memory and
 * would put this thread's superblocks into that arena's segments (see arena_lock), so only
 * dirty ones are taken. trylock only: no thread waits for a second lock here; and no lock is
 * tried where a peek shows too few dirty pages (a single-threaded program's other arenas are
 * empty: bench/phases --wide at 1 thread tried one for 3,400 of its 30,600 page runs). */
static trove_sb_t *steal_run(arena_t *a, size_t npages, size_t align_pages, int kind) {
  size_t need = npages + align_pages - 1, me = (size_t)(a - arenas);
  for (size_t k = 1; k < narenas; k++) {
    arena_t *o = &arenas[(me + k) % narenas];
    if (dirty_peek(o) < need || _trove_mutex_trylock(arena_mutex(o)) != 0) continue;
    trove_sb_t *run = find_dirty_run(o, need), *r = NULL;
    if (run) {
      r = carve(o, run, npages, align_pages, kind, true);
    }
    _trove_mutex_unlock(arena_mutex(o));
    if (r) return r;
  }
  return NULL;
}

/* Arena `a` (locked) has no run that fits and the segment cache is empty: before mapping a new
 * segment, wait for each other arena's lock in turn and take a resident run there. The
 * trylock pass above skips the arenas that are busy, and on 16 cores, where 16 threads keep
 * their arenas busy, it skipped too many. `a` is unlocked meanwhile (no thread ever waits for
 * a second arena lock) and locked again on return. */
static trove_sb_t *steal_wait(arena_t *a, size_t npages, size_t align_pages, int kind) {
  size_t need = npages + align_pages - 1, me = (size_t)(a - arenas);
  trove_sb_t *r = NULL;
  _trove_mutex_unlock(arena_mutex(a));
  for (size_t k = 1; k < narenas && r == NULL; k++) {
    arena_t *o = &arenas[(me + k) % narenas];
    if (dirty_peek(o) < need) continue;
    _trove_lock(arena_mutex(o), TROVE_LOCK_PAGES);
    trove_sb_t *run = find_dirty_run(o, need);
    if (run) {
      r = carve(o, run, npages, align_pages, kind, true);
    }
    _trove_mutex_unlock(arena_mutex(o));
  }
  _trove_lock(arena_mutex(a), TROVE_LOCK_PAGES);
  return r;
}

/* A sparse segment in 8 is mapped without huge pages, as a probe (segment.c): the other 7 of
 * a program that writes what it allocates get them (with a probe in 4, bench/phases --wide
 * ran 1.29x as fast as with none in huge pages; with 1 in 8, 1.94x; all of them, 2.2x), and
 * a program that stops writing its buffers gets at most 7 more segments in huge pages per
 * arena before a probe shows it. */
#define SPARSE_PROBE_EVERY 8
trove_sb_t *_trove_pages_alloc(trove_arena_ref_t *ref, size_t npages, size_t align_pages,
                              int kind) {
  bool dense = (kind & TROVE_PAGES_DENSE) != 0;
  kind &= ~TROVE_PAGES_DENSE;
  if (align_pages == 0) align_pages = 1;
  size_t need = npages + align_pages - 1;
  if (need > TROVE_SEGMENT_PAGES - TROVE_HEADER_PAGES) return NULL;
  static trove_arena_ref_t no_heap;       /* callers without a heap: arena 0, never written */
  arena_t *a = arena_lock(ref ? ref : &no_heap);
  trove_sb_t *run = find_run(a, need, dense);
  if (narenas > 1 && (run == NULL || !run->dirty)) {
    trove_sb_t *r = steal_run(a, npages, align_pages, kind);
    if (r) {
      _trove_mutex_unlock(arena_mutex(a));
      return r;
    }
  }
  bool in_bin = run != NULL;                     /* else a whole new or cached segment */
  trove_segment_t *seg;
  if (run == NULL && slots_reserve(a) && (seg = cache_take(a)) != NULL) {
    run = _trove_seg_run(seg, seg->first_page);             /* its whole free run, in no bin */
    if (!dense && !run->dirty) _trove_segment_no_huge(seg);  /* untouched: sparse from now */
  } else if (run == NULL && narenas > 1) {
    trove_sb_t *r = steal_wait(a, npages, align_pages, kind);
    if (r) {
      _trove_mutex_unlock(arena_mutex(a));
      return r;
    }
    in_bin = (run = find_run(a, need, dense)) != NULL;  /* freed here meanwhile */
  }
  bool new_segment = false;
  if (run == NULL) {
    bool probe = !dense && a->sparse_made++ % SPARSE_PROBE_EVERY == 0;   /* see segment.c */
    trove_segment_t *judge = dense || probe ? NULL : a->sparse_probe;
    seg = slots_reserve(a) ? _trove_segment_new(&a->segments, a->nsegs, dense, judge) : NULL;
    new_segment = true;
    if (seg == NULL) {
      /* Out of address space or memory: give back every empty segment and cached mapping
       * now (they would go after the purge delay anyway) and try once more. */
      _trove_mutex_unlock(arena_mutex(a));
      _trove_large_purge(true);
      _trove_pages_purge(true);
      _trove_lock(arena_mutex(a), TROVE_LOCK_PAGES);
      in_bin = (run = find_run(a, need, dense)) != NULL;
      judge = dense || probe ? NULL : a->sparse_probe;   /* it may have left while unlocked */
      if (run == NULL &&
          (!slots_reserve(a) || (seg = _trove_segment_new(&a->segments, a->nsegs, dense, judge)) == NULL)) {
        _trove_mutex_unlock(arena_mutex(a));
        return NULL;
      }
    }
    if (run == NULL) {
      seg->arena = (uint32_t)(a - arenas);
      if (probe) a->sparse_probe = seg;
      slot_take(a, seg);
      run = make_free_run(seg, desc_new(seg), seg->first_page, seg_usable(seg), false, 0);
    }
  }
  if (!run->dirty) atomic_fetch_add_explicit(&_trove_fresh_runs, 1, memory_order_relaxed);
  trove_sb_t *r = carve(a, run, npages, align_pages, kind, in_bin);
  _trove_mutex_unlock(arena_mutex(a));
  if (new_segment) _trove_large_trim();    /* fresh memory: no large mapping kept past budget */
  return r;
}

/* Purging happens outside the lock (madvise can take a while on a large run, and other
 * threads must not wait for it): a run to purge leaves its bin with kind PURGING, which no
 * neighbour merges with and no segment unmap passes, and comes back clean afterwards. */
static void purge_take(arena_t *a, trove_sb_t *run, trove_sb_t **list) {
  bin_remove(a, run);
  run->kind = TROVE_SPAN_PURGING;
  run->next = *list;
  *list = run;
}

/* When a run with `*n` dirty pages, freed at `at`, merges with free run `r`: the merged run's
 * time, weighted by dirty pages (a purged run has no age). With the newer of the two, as
 * before, a long dirty run never aged while pieces kept joining it: bench/stability's threads,
 * moving from one size mix to the next, emptied superblocks one by one beside the runs the
 * last mix left, and 35 MiB of dirty pages stayed resident for a whole 0.7 s phase (purge
 * delay 250 ms) beside 33 MiB in use. Weighted, a big old run that takes a small new piece
 * stays nearly as old, and the piece goes back with it; a small old run that joins a big
 * new one waits for the new one's delay. */
static uint64_t merged_age(uint64_t at, size_t *n, const trove_sb_t *r) {
  if (!r->dirty) return at;
  size_t m = *n;
  *n += r->npages;
  if (m == 0) return r->freed_at;
  /* ages below 2^44 ms, counts below 2^16 pages: no overflow */
  return (at * m + r->freed_at * r->npages) / (m + r->npages);
}

/* insert_free where a free neighbour of `run` is a long run (the bin of runs longer than 128
 * pages): that neighbour stays where it is in its bin and describes the merged run, as
 * split_front leaves the rest of a long run (a neighbour after `run` moves its start back,
 * past no other free run, so the bin's page order holds). False, with nothing done, where
 * the merged run would be its whole segment (that goes to the segment cache). */
static bool merge_in_bin(arena_t *a, trove_segment_t *seg, trove_sb_t *run, trove_sb_t *left,
                         trove_sb_t *right, bool dirty, uint64_t at) {
  size_t first = run->page, n = run->npages, nd = dirty ? n : 0;
  size_t total = n + (left ? left->npages : 0) + (right ? right->npages : 0);
  if (total == seg_usable(seg)) return false;
  trove_sb_t *keep = left && left->npages >= BINS - 1 ? left : right;
  size_t kept_dirty = keep->dirty ? keep->npages : 0;
  if (left) {
    if (left != keep) bin_remove(a, left);
    at = merged_age(at, &nd, left);
    dirty |= left->dirty;
    first = left->page;
  }
  if (right) {
    if (right != keep) {
      bin_remove(a, right);
      desc_free(seg, right);
    }
    at = merged_age(at, &nd, right);
    dirty |= right->dirty;
  }
  desc_free(seg, run);
  if (left && left != keep) desc_free(seg, left);
  trove_sb_t *prev = keep->prev, *next = keep->next;
  make_free_run(seg, keep, first, total, dirty, at);
  keep->prev = prev;
  keep->next = next;
  long grew = (long)(dirty ? total : 0) - (long)kept_dirty;
  if (grew) count_dirty(a, grew);
  return true;
}

/* Insert `run`, now free, of `seg`, merged with free neighbours (lock held): the merged run
 * keeps the slot of the one first in it, the others' slots are freed (but see merge_in_bin). */
static void insert_free(arena_t *a, trove_segment_t *seg, trove_sb_t *run, bool dirty,
                        uint64_t at) {
  size_t first = run->page, n = run->npages, nd = dirty ? n : 0;   /* nd: dirty pages */
  trove_sb_t *left = NULL, *right = NULL;
  if (first > seg->first_page) {                      /* the run before, by its last page */
    left = _trove_seg_run(seg, first - 1);
    if (left->kind != TROVE_SPAN_FREE) left = NULL;
  }
  if (first + n < TROVE_SEGMENT_PAGES) {               /* and the run after */
    right = _trove_seg_run(seg, first + n);
    if (right->kind != TROVE_SPAN_FREE) right = NULL;
  }
  if (((left && left->npages >= BINS - 1) || (right && right->npages >= BINS - 1)) &&
      merge_in_bin(a, seg, run, left, right, dirty, at))
    return;
  if (left) {                                          /* coalesce with the run before */
    bin_remove(a, left);
    at = merged_age(at, &nd, left);
    dirty |= left->dirty;
    n += first - left->page;
    first = left->page;
    desc_free(seg, run);
    run = left;
  }
  if (right) {                                         /* and with the run after */
    bin_remove(a, right);
    at = merged_age(at, &nd, right);
    dirty |= right->dirty;
    n += right->npages;
    desc_free(seg, right);
  }
  make_free_run(seg, run, first, n, dirty, at);
  if (n == seg_usable(seg)) cache_put(a, seg, at);
  else bin_push(a, run);
}

static void purge_finish(arena_t *a, trove_sb_t *list) {
  if (list == NULL) return;
  for (trove_sb_t *r = list; r; r = r->next)
    _trove_segment_purge(seg_of(r), (void *)run_addr(r), r->span_bytes);
  _trove_lock(arena_mutex(a), TROVE_LOCK_PAGES);
  for (trove_sb_t *r = list, *next; r; r = next) {
    next = r->next;
    insert_free(a, seg_of(r), r, false, r->freed_at);
  }
  _trove_mutex_unlock(arena_mutex(a));
  cache_bound();
}

/* The dirty cap: DIRTY_MAX_MB or 1.5 x the pages in use, whichever is larger. Past it, dirty
 * runs go back at once (longest first: most memory per system call) until the total is under
 * 2/3 of the cap, that is under DIRTY_MAX_MB or the pages in use. A program that keeps a lot
 * live also churns a lot of free space between its blocks, and purging that at once would
 * only fault it back in (the purge delay still returns it when it stays unused); after a
 * burst is freed, the in-use part is small and the cap falls back to DIRTY_MAX_MB. With the
 * pages in use as the cap (and half of it as the floor), bench/holes, which frees half of a
 * 570 MiB heap of buffers and allocates it again each round, had half of each round purged
 * and faulted back: 4.3-4.8 s at 1 thread, 0.27 s now (mimalloc 0.34, glibc 0.58), for 2%
 * more peak RSS; no other benchmark of the suite moved but stability's peak RSS (+2.6% at 2
 * threads). With half the pages in use as the cap, sizesweep's 1 MiB phase (32 live blocks
 * of 8 B-1 MiB per thread) purged and faulted back 400 MiB: 52 us per malloc/free pair
 * instead of 4.
 *
 * The recent peak: a program that frees all it built and builds it again (a batch job's
 * phases, a compiler pass, a worker that assembles a large response) had every phase purged
 * by the cap and faulted back by the next: 10 phases of 285 MiB of 100 B-4 KiB blocks spent
 * 1.3 s allocating against mimalloc's 0.22 s, and of 64-128 KiB buffers 1.4-1.8 s against
 * 0.19-0.31 (most of it clear_page in the kernel, and munmap of segments past the cache's
 * bound). So the cap and the segment cache also cover 1.25 times the most pages in use in the
 * last one or two purge delays: a burst of frees waits for the purge delay like any free run
 * (or for the cap, if the program then builds something else larger), and a phase that
 * follows within it reuses the pages. A program that frees a burst and sleeps keeps it until
 * its next call into the allocator after the delay (as with mimalloc or jemalloc without
 * background threads). Before, this held only once the program had shown it worked in rounds
 * (it allocated the purged burst again): the first burst went back at once and was faulted
 * in again, a full extra pass (bench/phases: 140k page faults in 10 phases, 74k now, as
 * mimalloc; t1 0.31 -> 0.21 s; blowup-pc, stability, larson, holes, sizesweep, mtmalloctest,
 * shbench-large, reallocgrow and xmalloc peak RSS within 1.5%). Hoard's bound still holds
 * over the purge delay; within it the free pages are at most 1.25 times the recent peak.
 * TROVE_DIRTY_MAX_MB, when set, is a strict cap: no recent peak (0 gives back every burst). */
static size_t recent_peak(size_t used, uint64_t now) {
  if (_trove_options_set[TROVE_OPT_DIRTY_MAX_MB]) return 0;   /* a cap the operator chose */
  uint64_t delay = (uint64_t)TROVE_OPT(PURGE_DELAY_MS);
  uint64_t w = atomic_load_explicit(&window_ms, memory_order_relaxed);
  /* `now` may be behind the window (a caller's clock read before another thread moved it):
   * then no window has passed, rather than 2^64 ms (which reset both peaks and so cut the
   * dirty cap to the pages in use) */
  if (now >= w && now - w >= delay && atomic_compare_exchange_strong(&window_ms, &w, now)) {
    /* after two windows or more with no call here, the last peak is not recent either */
    size_t last = now - w >= 2 * delay ? used : atomic_load(&peak_cur);
    atomic_store_explicit(&peak_prev, last, memory_order_relaxed);
    atomic_store_explicit(&peak_cur, used, memory_order_relaxed);
  }
  return peak_now();
}

/* `not_used`: pages counted in use that hold no live data (heap.c's empty pool superblocks). */
static size_t dirty_cap_at(size_t not_used, uint64_t now) {
  size_t cap = (size_t)TROVE_OPT(DIRTY_MAX_MB) << (20 - TROVE_PAGE_SHIFT);
  size_t used = atomic_load_explicit(&used_total, memory_order_relaxed);
  used = used > not_used ? used - not_used : 0;
  size_t peak = recent_peak(used, now);
  used += used / 2;
  peak += peak / 4;
  if (used < peak) used = peak;
  return cap < used ? used : cap;
}
static size_t dirty_cap_less(size_t not_used) { return dirty_cap_at(not_used, _trove_os_now_ms()); }
static size_t dirty_cap(void) { return dirty_cap_less(0); }

size_t _trove_pages_used(void) { return atomic_load_explicit(&used_total, memory_order_relaxed); }

/* Free dirty pages, the arenas' and the cached segments' (relaxed: a hint, behind each arena by
 * up to publish_pages; arenas publish their changes apart, so the sum may dip below zero for a
 * moment, read here as none). */
size_t _trove_pages_dirty(void) {
  size_t d = atomic_load_explicit(&dirty_total, memory_order_relaxed);
  return d > SIZE_MAX / 2 ? 0 : d;
}

/* The dirty total as arena `a` (locked, or NULL) sees it: with its own changes not yet added. */
static size_t dirty_seen(const arena_t *a) {
  size_t lag = a ? (size_t)a->dirty_unpub : 0;
  return atomic_load_explicit(&dirty_total, memory_order_relaxed) + lag;
}
static bool over_cap(const arena_t *a, size_t cap) { return dirty_seen(a) > cap; }

static trove_sb_t *purge_over_cap(arena_t *a, size_t cap) {
  trove_sb_t *list = NULL;
  for (size_t b = BINS; b-- > 1 && a->dirty_pages;)
    FOR_BIN(a, b, r) {
      if (!over_cap(a, cap / 3 * 2)) goto out;
      if (r->dirty) purge_take(a, r, &list);
    }
out:
  note_low(a);
  return list;
}

/* Over the cap: the arena that passed it purges first, then the others in turn (one arena
 * lock at a time) while the total stays over. */
static void purge_arenas_over_cap(arena_t *first, trove_sb_t *list) {
  purge_finish(first, list);
  size_t cap = dirty_cap();
  if (over_cap(NULL, cap / 3 * 2) && atomic_load_explicit(&ncached, memory_order_relaxed))
    cache_release(cache_trim(0, 0));
  for (size_t i = 0; i < narenas && over_cap(NULL, cap / 3 * 2); i++) {
    arena_t *a = &arenas[i];
    if (a == first || dirty_peek(a) == 0) continue;
    _trove_lock(arena_mutex(a), TROVE_LOCK_PAGES);
    trove_sb_t *more = purge_over_cap(a, cap);
    _trove_mutex_unlock(arena_mutex(a));
    purge_finish(a, more);
  }
}

/* Pages that become dirty when the run [first, first+n) of `seg` is inserted dirty: its own,
 * and those of the purged free runs it merges with (the merged run is dirty as a whole). */
static bool purged_run(const trove_sb_t *r) {
  /* `kind` alone first: a neighbour may be a superblock whose owner writes the byte beside it
   * (its state) without this lock; only a free run's fields are this lock's to read. */
  return __atomic_load_n(&r->kind, __ATOMIC_RELAXED) == TROVE_SPAN_FREE && !r->dirty;
}

static size_t dirty_growth(trove_segment_t *seg, size_t first, size_t n) {
  size_t g = n;
  if (first > seg->first_page) {
    trove_sb_t *left = _trove_seg_run(seg, first - 1);   /* its last page */
    if (purged_run(left)) g += left->npages;
  }
  if (first + n < TROVE_SEGMENT_PAGES && purged_run(_trove_seg_run(seg, first + n)))
    g += _trove_seg_run(seg, first + n)->npages;
  return g;
}

/* May `npages` more of free memory stay out of the page heap, besides `held_pages` already
 * kept so (heap.c's empty pool superblocks)? While the dirty pages and those stay under the
 * purge target of the dirty cap (computed without them as pages in use); never when the
 * operator set TROVE_DIRTY_MAX_MB (a strict cap, enforced in the page heap alone). */
bool _trove_pages_may_keep(size_t held_pages, size_t npages) {
  if (_trove_options_set[TROVE_OPT_DIRTY_MAX_MB]) return false;
  size_t cap = dirty_cap_less(held_pages);
  return atomic_load_explicit(&dirty_total, memory_order_relaxed) + held_pages + npages <=
         cap / 3 * 2;
}

void _trove_pages_free(trove_sb_t *run) { _trove_pages_free_clock(run, 0, _trove_os_now_ms()); }
void _trove_pages_free_at(trove_sb_t *run, uint64_t at) {
  _trove_pages_free_clock(run, at, _trove_os_now_ms());
}

void _trove_pages_free_clock(trove_sb_t *run, uint64_t at, uint64_t clock) {
  trove_segment_t *seg = seg_of(run);
  arena_t *a = arena_of(seg);
  uint64_t now = clock;
  if (at != 0 && at < now) now = at;       /* free since then: the purge delay counts from it */
  _trove_lock(arena_mutex(a), TROVE_LOCK_PAGES);
  seg->free_pages += run->npages;
  count_used(a, -(long)run->npages);
  run->carved = 0;
  __atomic_store_n(&run->limit, 0, __ATOMIC_RELAXED);   /* no block passes _trove_sb_is_block */
  atomic_store_explicit(&run->heap, NULL, memory_order_relaxed);
  size_t cap = dirty_cap_at(0, clock);     /* one clock read a free: 3 a medium pair before */
  bool self = dirty_seen(a) + dirty_growth(seg, run->page, run->npages) > cap;
  if (self) {
    /* Past the cap with this run: give back this run itself, outside the lock (PURGING: no
     * neighbour merges with it meanwhile). Merged dirty into a neighbour that was purged
     * already, it made that whole run dirty, and the longest-first purge below gave it back
     * again whole: freeing a burst of superblocks purged the same pages over and over (124 MB
     * of madvise for a 32 MiB burst, 1.47 GB for 570 MiB). */
    run->kind = TROVE_SPAN_PURGING;
    _trove_mutex_unlock(arena_mutex(a));
    _trove_segment_purge(seg, (void *)run_addr(run), run->span_bytes);
    _trove_lock(arena_mutex(a), TROVE_LOCK_PAGES);
  }
  insert_free(a, seg, run, !self, now);
  bool over = over_cap(a, cap);
  trove_sb_t *purge = over ? purge_over_cap(a, cap) : NULL;
  _trove_mutex_unlock(arena_mutex(a));
  if (over) purge_arenas_over_cap(a, purge);
  cache_bound();
}

bool _trove_pages_grow(trove_sb_t *run, size_t npages) {
  trove_segment_t *seg = seg_of(run);
  arena_t *a = arena_of(seg);
  bool ok = false;
  _trove_lock(arena_mutex(a), TROVE_LOCK_PAGES);
  size_t end = run->page + run->npages;
  if (npages <= run->npages) {
    ok = true;
  } else if (end < TROVE_SEGMENT_PAGES) {
    trove_sb_t *right = _trove_seg_run(seg, end);
    size_t extra = npages - run->npages;
    if (right->kind == TROVE_SPAN_FREE && right->npages >= extra) {
      trove_sb_t *piece;
      if (front_of_long(right, end, extra)) {
        piece = split_front(a, right, extra, false);
      } else {
        bin_remove(a, right);
        piece = split(a, right, end, extra, false);
      }
      note_low(a);
      run->npages = (uint16_t)npages;
      run->span_bytes = (uint32_t)(npages << TROVE_PAGE_SHIFT);
      seg->pagemap[run->page + npages - 1] = desc_offset(seg, run);   /* a medium run (split) */
      desc_free(seg, piece);
      ok = true;
    }
  }
  _trove_mutex_unlock(arena_mutex(a));
  return ok;
}

/* The pages of medium run `run` past its first `npages` go back as a run of their own, freed
 * as any run is (merged with a free run after it, dirty, purged by the usual rules): realloc
 * shrinking a buffer in place. The tail gets a descriptor of its own under the lock, with the
 * map's entries for its ends and for the run's new last page, before it is freed. */
void _trove_pages_shrink(trove_sb_t *run, size_t npages) {
  trove_segment_t *seg = seg_of(run);
  arena_t *a = arena_of(seg);
  _trove_lock(arena_mutex(a), TROVE_LOCK_PAGES);
  size_t first = run->page + npages, n = run->npages - npages;
  trove_sb_t *tail = desc_new(seg);
  desc_zero(tail);
  tail->kind = TROVE_SPAN_MEDIUM;
  tail->page = (uint16_t)first;
  tail->npages = (uint16_t)n;
  tail->span_bytes = (uint32_t)(n << TROVE_PAGE_SHIFT);
  tail->start = (uintptr_t)seg + (first << TROVE_PAGE_SHIFT);
  tail->dirty = 1;
  seg->pagemap[first] = seg->pagemap[first + n - 1] = desc_offset(seg, tail);
  run->npages = (uint16_t)npages;
  run->span_bytes = (uint32_t)(npages << TROVE_PAGE_SHIFT);
  seg->pagemap[run->page + npages - 1] = desc_offset(seg, run);
  _trove_mutex_unlock(arena_mutex(a));
  _trove_pages_free(tail);
}

#define LOW_WATER_MIN (((size_t)1 << 20) >> TROVE_PAGE_SHIFT)   /* 1 MiB: worth the calls */

/* Give back what has been free longer than the delay (everything if `all`, and the address
 * space mapped ahead for segments), and unmap segments that stayed empty that long. */
void _trove_pages_purge(bool all) {
  uint64_t now = _trove_os_now_ms(), delay = (uint64_t)TROVE_OPT(PURGE_DELAY_MS);
  /* The recent peak's bound here too: with 1 + N/8, a timed purge that fell between two phases
   * unmapped every segment the last one had emptied, and the next faulted them all in again
   * (bench/phases: 49k more page faults in 4 phases of 256 MiB). Segments empty longer than
   * the delay go whatever the bound. */
  cache_release(cache_trim(all ? 0 : cache_keep(), all || now < delay ? 0 : now - delay + 1));
  if (all) _trove_segment_unreserve();
  for (size_t i = 0; i < narenas; i++) {
    arena_t *a = &arenas[i];
    trove_sb_t *list = NULL;
    _trove_lock(arena_mutex(a), TROVE_LOCK_PAGES);
    size_t low = 0;                   /* dirty pages that no allocation needed for a window */
    bool window = !all && now - a->low_since >= delay;
    if (window) {
      low = a->dirty_low <= a->dirty_pages ? a->dirty_low : a->dirty_pages;
      if (low < LOW_WATER_MIN) low = 0;
      a->low_since = now;
    }
    size_t before = a->dirty_pages;
    for (size_t b = 1; b < BINS; b++)
      FOR_BIN(a, b, r)
        if (r->dirty && (all || now - r->freed_at >= delay)) purge_take(a, r, &list);
    /* Those not old enough yet, longest runs first: pages freed and taken again in turn keep
     * their runs young (merging, splitting), but a store of free pages that never fell below
     * `low` in a whole window is that much larger than the program's churn needs. */
    for (size_t b = BINS; b-- > 1 && before - a->dirty_pages < low;)
      FOR_BIN(a, b, r) {
        if (before - a->dirty_pages >= low) break;
        if (r->dirty) purge_take(a, r, &list);
      }
    if (window || all) a->dirty_low = a->dirty_pages;     /* the next window's low mark */
    else note_low(a);
    _trove_mutex_unlock(arena_mutex(a));
    purge_finish(a, list);
  }
}

/* `bytes` of memory are about to be faulted in outside the page heap (large.c: a mapping
 * that no resident cached one serves): as many empty segments as that leave the cache, the
 * oldest first. The recent-peak rule keeps them for a next phase of the same kind, which
 * reuses them; a phase of large blocks cannot (each is a mapping of its own), and then they
 * were resident beside it: 200 MiB of 64-byte blocks freed, then 200 MiB of 2 MB buffers,
 * peaked at 437 MiB (tcmalloc 241, glibc 283). Only whole empty segments: a phase that is
 * over has emptied them (heap.c gives the pool's empty superblocks back first), while dirty
 * runs beside live blocks are the churn of a program still at work, and purging those as
 * well faulted 25% more pages in for none less RSS (medium buffers grown by doubling into
 * large ones, 32 at a time). */
void _trove_pages_yield(size_t bytes) {
  size_t have = atomic_load_explicit(&ncached, memory_order_relaxed);
  if (have == 0) return;
  size_t seg_bytes = (size_t)(TROVE_SEGMENT_PAGES - TROVE_HEADER_PAGES) << TROVE_PAGE_SHIFT;
  size_t n = (bytes + seg_bytes - 1) / seg_bytes;
  cache_release(cache_trim(have > n ? have - n : 0, 0));
}

/* For the statistics and the heap map (stats.c), and fork (init.c). */
void _trove_pages_lock_all(void) {
  for (size_t i = 0; i < narenas; i++) _trove_mutex_lock(&_trove_locks.arena[i].m);
  _trove_mutex_lock(&_trove_locks.segment_cache);
  _trove_mutex_lock(&_trove_locks.segment);
}
void _trove_pages_unlock_all(void) {
  _trove_mutex_unlock(&_trove_locks.segment);
  _trove_mutex_unlock(&_trove_locks.segment_cache);
  for (size_t i = narenas; i-- > 0;) _trove_mutex_unlock(&_trove_locks.arena[i].m);
}
void _trove_pages_fork_child(void) {
  for (size_t i = 0; i < narenas; i++) _trove_lock_reset(&_trove_locks.arena[i].m);
  _trove_lock_reset(&_trove_locks.segment_cache);
  _trove_lock_reset(&_trove_locks.segment);
}

/* Every segment, arena by arena, then the cached ones: NULL starts, NULL ends (all locks
 * held, _trove_pages_lock_all). */
trove_segment_t *_trove_pages_next_segment(trove_segment_t *seg) {
  size_t i = 0;
  if (seg) {
    if (seg->next) return seg->next;
    if (seg->empty_since) return NULL;            /* the end of the cache */
    i = seg->arena + 1;
  }
  for (; i < narenas; i++)
    if (arenas[i].segments) return arenas[i].segments;
  return cache;
}

size_t _trove_pages_arenas(size_t *in_use) {   /* all arena locks held */
  size_t n = 0;
  for (size_t i = 0; i < narenas; i++) n += arenas[i].segments != NULL;
  *in_use = n;
  return narenas;
}

/* All arena locks held. */
void _trove_pages_totals(size_t *free_bytes, size_t *dirty_bytes) {
  size_t f = 0, d = 0;
  for (size_t i = 0; i < narenas; i++) {
    for (size_t b = 1; b < BINS; b++)
      FOR_BIN(&arenas[i], b, r) f += r->npages;
    d += arenas[i].dirty_pages;
  }
  for (trove_segment_t *seg = cache; seg; seg = seg->next) {
    f += seg_usable(seg);
    d += cached_dirty(seg);
  }
  *free_bytes = f << TROVE_PAGE_SHIFT;
  *dirty_bytes = d << TROVE_PAGE_SHIFT;
}
