/* Large objects (above 1 MiB): each in its own mapping, aligned to 4 MiB so that the segment
 * map finds its header from the pointer. Freed mappings are cached for reuse and unmapped
 * after the purge delay: up to 64 of them, of which at most LARGE_CACHE_MB or a third of
 * the live large bytes (whichever is more) stay resident; past that the cache is purged
 * (madvise) down to that budget after the purge delay or as soon as the process takes fresh
 * memory (see _trove_large_free; then those idle for an eighth of the delay go back as well,
 * see _trove_large_trim), which keeps the peak RSS as low as unmapping would, and
 * reusing a purged mapping costs the page faults but not the mmap and two munmaps (4 MiB
 * alignment) of a fresh one.
 * A request takes the cached mapping nearest its size (see cache_take) and resizes it: a growth
 * within the mapping's reserve (see reserve_for) takes no system call, past it mremap grows it
 * in place or moves the pages; a mapping longer than the request keeps its tail while the
 * tails of live mappings fit in the resident budget, else gives the pages of a tail of 1 MiB
 * or more back. 32 buffers of 1-1.1 MiB allocated
 * and freed in 200 rounds took 0.10 s with 8 cached mappings (first fit) and 0.003 s with a
 * cache (as mimalloc and jemalloc). realloc resizes the same way: no copying. */
#include "internal.h"
#include <string.h>

#define TROVE_LARGE_HEADER 128       /* user pointer offset when no larger alignment is asked */
#define TROVE_LARGE_CACHE_MAX 64

static trove_large_t *live, *cache;
static size_t cache_count, cache_bytes, cache_resident;
static _Atomic size_t cache_resident_hint;   /* cache_resident, for readers without the lock */
/* When the cache's resident bytes last went past the budget (ms, made odd so that it is never
 * 0; 0 while within it): see _trove_large_free. Read without the lock as a hint. */
static _Atomic uint64_t excess_since;
/* Bytes live mappings hold past their requests' last pages: a reused mapping keeps its tail
 * while these stay within the resident budget (see _trove_large_alloc). */
static size_t live_excess;
static size_t last_request;      /* the latest large request's size (see _trove_large_free) */
size_t _trove_large_live_count, _trove_large_live_bytes;
void _trove_segmap_set_large(uintptr_t region, uint8_t kind) TROVE_HIDDEN;

static size_t round_os(size_t n) { return (n + 4095) & ~(size_t)4095; }

/* A mapping's address space runs on to the next 4 MiB boundary (its reserve): a growth within
 * it, by realloc or by a request that reuses a cached mapping, is a change of `map_size` and
 * no system call, and a shrink gives the tail's pages back with madvise and keeps the address
 * space. Each mremap or munmap takes the process's mmap lock for writing, which waits for the
 * page faults of every thread and holds off new ones, and bench/largebuf (buffers of 1-8 MiB
 * replaced by others of random size) made 161 growths in place by mremap and 34 munmaps in
 * 3,000 replacements at 8 threads, most of them by a few KiB (mimalloc: none and 5). The pages
 * past `map_size` are never written while they lie there (a shrink purges them), so they read
 * zero and are not resident. */
static size_t reserve_for(size_t map_size) {
  return (map_size + TROVE_SEGMENT_MASK) & ~(size_t)TROVE_SEGMENT_MASK;
}

/* Its holders keep it for list work (realloc's resize of a mapping aside), so a thread that
 * finds it taken spins a while before it sleeps: one thread handing 1-4 MiB buffers to
 * another made 663 futex calls in 20,000 handoffs with a plain lock, 11 with this. */
static void large_lock(void) {
  if (_trove_mutex_trylock(&_trove_locks.large) != 0) _trove_lock_wait(&_trove_locks.large);
}
static trove_large_t *resize_mapping(trove_large_t *l, size_t map_size);
static trove_large_t *excess_take(void);
static void excess_purge(trove_large_t *list);

static void list_push(trove_large_t **head, trove_large_t *l) {
  l->prev = NULL;
  l->next = *head;
  if (*head) (*head)->prev = l;
  *head = l;
}
static void list_remove(trove_large_t **head, trove_large_t *l) {
  if (l->prev) l->prev->next = l->next; else *head = l->next;
  if (l->next) l->next->prev = l->prev;
}

/* The cache's list and totals move together (the lock is held). */
static void cache_add(trove_large_t *l) {
  list_push(&cache, l);
  cache_count++;
  cache_bytes += l->map_size;
  cache_resident += l->resident;
  atomic_store_explicit(&cache_resident_hint, cache_resident, memory_order_relaxed);
}
static void cache_remove(trove_large_t *l) {
  list_remove(&cache, l);
  cache_count--;
  cache_bytes -= l->map_size;
  cache_resident -= l->resident;
  atomic_store_explicit(&cache_resident_hint, cache_resident, memory_order_relaxed);
}

static size_t excess_of(const trove_large_t *l) {
  return l->map_size - round_os(l->user - l->base + l->requested);
}

/* What freed and reused mappings may keep resident beyond live data (the lock is held):
 * LARGE_CACHE_MB, or a third of the live large bytes if more; 0 when the option is 0. */
static size_t resident_budget(void) {
  size_t max = (size_t)TROVE_OPT(LARGE_CACHE_MB) << 20;
  if (max > 0 && _trove_large_live_bytes / 3 > max) max = _trove_large_live_bytes / 3;
  return max;
}

static trove_large_t *header_at(uintptr_t user) {
  unsigned kind = _trove_segmap_kind(user);
  if (kind == TROVE_MAP_LARGE) return (trove_large_t *)(user & ~(uintptr_t)TROVE_SEGMENT_MASK);
  if (kind == TROVE_MAP_LARGE_BELOW)
    return (trove_large_t *)((user & ~(uintptr_t)TROVE_SEGMENT_MASK) - TROVE_SEGMENT_SIZE);
  return NULL;
}

trove_large_t *_trove_large_header(uintptr_t a) {
  trove_large_t *l = header_at(a);
  return l && l->magic == TROVE_LARGE_MAGIC ? l : NULL;
}

static void large_register(trove_large_t *l) {
  _trove_segmap_set_large(l->user, (l->user - l->base) >= TROVE_SEGMENT_SIZE ? TROVE_MAP_LARGE_BELOW
                                                                          : TROVE_MAP_LARGE);
}

/* `resident`: what the mapping still holds (its header page alone once purged). */
static void large_unmap(trove_large_t *l, size_t resident) {
  _trove_segmap_set_large(l->user, TROVE_MAP_NONE);
  _trove_os_release((void *)l->base, l->reserve, l->map_size, resident);
}

/* The cached mapping that costs `size` the fewest page faults, then the fewest pages held
 * beyond it: one that fits, else one at least half of it, which resize_mapping grows (its
 * pages stay; only the growth faults in). A smaller one is left for smaller requests, and the
 * cache keeps a spread of lengths. 8 live buffers of 1-8 MiB, replaced 3,000 times: taking
 * only mappings within a quarter above the size, every request got a fresh mapping, 3.85 s
 * (2.58M page faults; glibc 0.65 s, mimalloc 0.06 s); taking the nearest, whatever its
 * length, kept the cache at one mapping that every request resized, 1.38 s; from three
 * quarters of the size up 0.93 s, from two thirds 0.70 s, from a half 0.53 s (0.33M faults,
 * peak RSS 79 MiB instead of 91; glibc 76, mimalloc 98). */
static trove_large_t *cache_take(size_t size, size_t off) {
  trove_large_t *best = NULL;
  size_t best_cost = SIZE_MAX;
  for (trove_large_t *l = cache; l; l = l->next) {
    size_t cap = l->map_size > off ? l->map_size - off : 0;
    size_t grow = cap < size ? size - cap : 0;
    /* less than half the request, and it would have to move: not worth an mremap */
    if (grow > size / 2 && l->reserve < off + size) continue;
    size_t fault = l->resident ? grow : size;
    size_t cost = fault * 4 + (cap > size ? cap - size : 0);
    if (cost < best_cost) {
      best = l;
      best_cost = cost;
    }
  }
  if (best) {
    cache_remove(best);
    if (cache_resident <= resident_budget())      /* taken back within the budget */
      atomic_store_explicit(&excess_since, 0, memory_order_relaxed);
  }
  return best;
}

/* A cached mapping taken for a request that needs less of it (the lock is held): the whole
 * 4 MiB regions past the request's part go back into the cache as a mapping of their own, its
 * header at its first byte, so that the next requests take those pages instead of fresh ones.
 * Kept whole, the mapping's tail stayed resident beside a live object that never used it:
 * `sort --parallel=4 -S 64M` frees its 64 MiB buffer and then takes four of 16 MiB, the first
 * from that mapping (its 48 MiB tail kept) and three fresh: peak RSS 105 MiB against glibc's
 * 68. Both parts keep their pages; their address spaces are adjacent ranges of one mapping,
 * each unmapped on its own later. */
static void split_tail(trove_large_t *l, size_t want) {
  size_t head = reserve_for(want);
  if (l->map_size < head + TROVE_SEGMENT_SIZE || cache_count >= TROVE_LARGE_CACHE_MAX) return;
  trove_large_t *t = (trove_large_t *)(l->base + head);
  t->magic = TROVE_LARGE_MAGIC;
  t->base = l->base + head;
  t->map_size = l->map_size - head;
  t->reserve = l->reserve - head;
  t->user = t->base + TROVE_LARGE_HEADER;
  t->usable = t->requested = 0;            /* free: a free of its pointer is a double free */
  t->resident = l->resident ? t->map_size : 0;
  t->freed_at = l->freed_at;
  l->map_size = l->reserve = head;
  if (l->resident) l->resident = head;
  large_register(t);
  cache_add(t);
  if (cache_resident > resident_budget() && atomic_load_explicit(&excess_since, memory_order_relaxed) == 0)
    atomic_store_explicit(&excess_since, _trove_os_now_ms() | 1, memory_order_relaxed);
}

/* calloc above TROVE_CALLOC_TOUCH_MAX in a resident cached mapping: its first `n` bytes at
 * `user` must read 0. A fresh mapping that size is left untouched (see the end of
 * _trove_large_alloc), for a big table that the program fills sparsely, but a reused one was
 * cleared whole, every page written, so the same program's time and RSS depended on whether
 * a freed buffer was at hand: 300 rounds of calloc(64 MiB), 16 reads and a write, then free,
 * took 3.2 s and 67 MiB peak RSS, against glibc's 15 ms and 1.4 MiB (a fresh mapping each
 * time). So where the block before left more than 1/8 of the pages not resident (mincore),
 * they are all dropped instead (then 0; the rest of the header's page is cleared): 15 ms,
 * 1.7 MiB. Where it wrote (nearly) all of them, clearing them is cheaper than faulting them
 * back in, and stays: 100 rounds of calloc(64 MiB) then a memset of all of it, 2.2 s
 * cleared, 4.5 s dropped (glibc 4.4 s). Pages this path cleared count as written: a mapping
 * reused by callocs of 4 MiB or less (cleared, see TROVE_CALLOC_TOUCH_MAX) is cleared after
 * them too. */
static void zero_by_purge(uintptr_t user, size_t n) {
  size_t pg = _trove_os_page_size();
  uintptr_t from = (user + pg - 1) & ~(uintptr_t)(pg - 1);
  uintptr_t end = (user + n + pg - 1) & ~(uintptr_t)(pg - 1);
  if (end <= from || _trove_os_mostly_resident((void *)from, end - from) ||
      !_trove_os_purge((void *)from, end - from)) {
    memset((void *)user, 0, n);
    return;
  }
  memset((void *)user, 0, from - user);
}

void *_trove_large_alloc(size_t size, size_t align, bool zero) {
  if (size > TROVE_MAX_ALLOC || align > TROVE_MAX_ALLOC) return NULL;
  size_t off = align > TROVE_LARGE_HEADER ? align : TROVE_LARGE_HEADER;
  size_t want = round_os(off + size);
  bool keep_tail = false;
  large_lock();
  /* an aligned request takes a cached mapping too (its header stays at the base), as long as
   * the pointer lies in the mapping's first 4 MiB, where the segment map finds the header:
   * posix_memalign(2 MiB, 100 KB) took a fresh mapping each time, 20 us a call (mimalloc
   * 0.4 us, glibc 5, tcmalloc 8) */
  trove_large_t *l = off < TROVE_SEGMENT_SIZE ? cache_take(size, off) : NULL;
  /* A reused mapping longer than the request keeps its tail while the tails that live
   * mappings keep add up to no more than the resident budget; past it, a tail of 1 MiB or
   * more goes back. A tail given back is faulted in again by the next larger request that
   * takes the mapping: giving it back from twice the request, bench/largebuf (8 live of
   * 1-8 MiB) took 0.142 s and 89k faults, peak RSS 82.7 MiB; from 5x 0.093 s / 51k / 81.8;
   * kept within the budget, 0.052 s / 19k / 79.2 (the tails are the pages the next request
   * would fault in; tcmalloc 0.076 s / 24k / 90.5, mimalloc 0.076 / 24k / 98.9). 20 live of
   * 5-25 MiB (largebuf --huge): 0.39 -> 0.21 s, peak RSS 454 -> 481 MiB (tcmalloc 0.20 s /
   * 470 MiB, glibc 468). */
  if (l && l->map_size > want) {
    keep_tail = live_excess + (l->map_size - want) <= resident_budget();
    if (keep_tail && cache == NULL &&
        live_excess + cache_resident + (l->map_size - want) <= resident_budget())
      split_tail(l, want);
  }
  /* pages to fault in ahead (a new mapping, a purged one, a growth): first what is cached
   * past the budget goes */
  trove_large_t *purge = NULL;
  size_t fault = l == NULL || l->resident == 0 ? want : want > l->map_size ? want - l->map_size : 0;
  if (fault && atomic_load_explicit(&excess_since, memory_order_relaxed) != 0)
    purge = excess_take();
  _trove_mutex_unlock(&_trove_locks.large);
  excess_purge(purge);
  if (fault) _trove_heap_yield(fault);     /* and the empty segments small blocks left */
  if (l) {
    size_t old_cap = l->map_size > off ? l->map_size - off : 0;
    bool dirty = l->resident != 0;
    if (want > l->map_size || (!keep_tail && l->map_size - want >= ((size_t)1 << 20))) {
      trove_large_t *m = resize_mapping(l, want);
      if (m == NULL) {
        large_unmap(l, dirty ? l->map_size : _trove_os_page_size());
        l = NULL;
      } else {
        l = m;
      }
    }
    if (l) l->user = l->base + off;
    if (l && zero) {   /* a purged mapping reads 0 but for the header's page, so do new pages */
      size_t head = _trove_os_page_size() - TROVE_LARGE_HEADER, old = old_cap < size ? old_cap : size;
      if (dirty && size > TROVE_CALLOC_TOUCH_MAX) zero_by_purge(l->user, old);
      else memset((void *)l->user, 0, dirty || old < head ? old : head);
    }
  }
  if (l == NULL) {
    size_t map_size = round_os(off + size);
    uintptr_t base;
    size_t reserve = map_size;
    if (off < TROVE_SEGMENT_SIZE) {
      reserve = reserve_for(map_size);
      base = (uintptr_t)_trove_os_reserve_aligned(reserve, TROVE_SEGMENT_SIZE);
      if (!base) {                /* give back cached mappings and empty segments, retry */
        _trove_large_purge(true);
        _trove_pages_purge(true);
        reserve = map_size;       /* and no reserve, if address space is what ran out */
        base = (uintptr_t)_trove_os_reserve_aligned(reserve, TROVE_SEGMENT_SIZE);
      }
      if (!base) return NULL;
      _trove_os_count_mapped((ptrdiff_t)map_size);
      l = (trove_large_t *)base;
    } else {                      /* header in the 4 MiB just below the aligned pointer */
      base = (uintptr_t)_trove_os_map_aligned(map_size, off);
      if (!base) return NULL;
      l = (trove_large_t *)(base + off - TROVE_SEGMENT_SIZE);
    }
    if (((base + reserve) >> TROVE_SEGMENT_SHIFT) >= TROVE_SEGMAP_SIZE) {
      _trove_os_release((void *)base, reserve, map_size, 0);
      return NULL;
    }
    l->magic = TROVE_LARGE_MAGIC;
    l->base = base;
    l->map_size = map_size;
    l->reserve = reserve;
    l->user = base + off;
    large_register(l);
  }
  l->usable = l->base + l->map_size - l->user;
  l->requested = size;
  /* calloc: fault the pages in by writing (see _trove_os_touch); above TROVE_CALLOC_TOUCH_MAX
   * they stay untouched, for a big table the program fills sparsely. */
  if (zero && size <= TROVE_CALLOC_TOUCH_MAX) _trove_os_touch((void *)l->user, size);
  large_lock();
  list_push(&live, l);
  last_request = size;
  _trove_large_live_count++;
  _trove_large_live_bytes += l->usable;
  live_excess += excess_of(l);
  _trove_mutex_unlock(&_trove_locks.large);
  return (void *)l->user;
}

void _trove_large_free(trove_large_t *l) {
  large_lock();
  list_remove(&live, l);
  _trove_large_live_count--;
  _trove_large_live_bytes -= l->usable;
  live_excess -= excess_of(l);
  l->requested = 0;
  /* The resident budget: 64 MiB, or a third of the live large bytes. With 32 MiB alone, 20
   * live buffers of 5-25 MiB (bench/largebuf --huge, after mimalloc-bench's malloc-large)
   * purged nearly every freed one and faulted it back in: 1.18 s against glibc's 0.33; with
   * a quarter of the live bytes 0.55 s, peak RSS +4% (425 MiB; glibc 468, mimalloc 434).
   * Later, with tails kept and growth by mremap, a quarter took 0.257 s, 161k page faults,
   * 440 MiB; a third 0.216 s, 130k, 449 MiB; a half 0.237 s, 120k, 481 MiB (tcmalloc 0.194 s,
   * 117k, 468 MiB; mimalloc 2.09 s, 468 MiB; jemalloc 2.66 s, 379 MiB).
   * 8 live of 1-8 MiB (bench/largebuf): 0.35 s at 32 MiB, 0.16 s at 64 (201k -> 89k page
   * faults), peak RSS 74 -> 83 MiB (glibc 77, tcmalloc 90, mimalloc 99, jemalloc 104). */
  size_t cache_max = resident_budget();
  if (l->user - l->base < TROVE_SEGMENT_SIZE && cache_count < TROVE_LARGE_CACHE_MAX &&
      cache_max > 0) {
    l->usable = 0;                          /* marks it free: a second free is a double free */
    l->next = l->prev = NULL;
    l->magic = TROVE_LARGE_MAGIC;
    l->resident = l->map_size;
    cache_add(l);
    l->freed_at = _trove_os_now_ms();
    trove_large_t *purge = NULL;
    if (cache_resident <= cache_max) {
      atomic_store_explicit(&excess_since, 0, memory_order_relaxed);
    } else {
      /* Past the budget the cache stays resident for the purge delay (as the page heap keeps
       * a burst of free runs), or until the process is about to fault pages in: a large
       * request the cache cannot serve resident, a growth, a new segment (_trove_large_trim).
       * Freeing gave nothing back, so keeping it raises no peak; a burst of frees (a program
       * tearing down its buffers, a phase's end) costs no system call, and a phase that
       * follows within the delay reuses the pages. Purged as they were freed, the 20 buffers
       * of 5-25 MiB that bench/largebuf --huge frees at its end took 18 madvise calls, 30 ms
       * of its 0.26 s (tcmalloc keeps them); now 0.24 s.
       * But not a mapping longer than the whole budget that the latest large request, larger
       * and still live, replaced: a vector grown by doubling (allocate twice the length,
       * copy, free the old one), which then fills the new one page by page, faults trove does
       * not see. Kept, each freed half stayed resident while the next was filled: a vector
       * grown to 256 MiB peaked at 444 MiB (glibc 257, jemalloc 268, tcmalloc 519); purged
       * at once, 322. (Built 3 times over, it took 0.97 s instead of 0.57, since each round
       * faults its largest buffers in again; glibc 1.07.) A buffer freed with no larger one
       * just taken (one reused in a loop, or a request's scratch buffer beside the program's
       * many others) stays. */
      uint64_t since = atomic_load_explicit(&excess_since, memory_order_relaxed);
      if (since == 0) {
        since = l->freed_at | 1;
        atomic_store_explicit(&excess_since, since, memory_order_relaxed);
      }
      if ((l->freed_at | 1) - since >= (uint64_t)TROVE_OPT(PURGE_DELAY_MS) ||
          (l->map_size > cache_max && last_request > l->map_size &&
           _trove_large_live_bytes >= last_request))
        purge = excess_take();
    }
    _trove_mutex_unlock(&_trove_locks.large);
    excess_purge(purge);
    _trove_background_poke();                /* a quiet process would keep the cache resident */
    return;
  }
  _trove_mutex_unlock(&_trove_locks.large);
  large_unmap(l, l->map_size);
}

/* Past the resident budget (the lock is held): take cached mappings off the cache, the
 * longest resident one first (the most memory per system call), until the rest is within
 * it; excess_purge gives their pages back and returns them to the cache. Taken off, no
 * malloc finds one while it is purged. */
static trove_large_t *excess_take(void) {
  size_t budget = resident_budget();
  trove_large_t *list = NULL;
  while (cache_resident > budget) {
    trove_large_t *max = NULL;
    for (trove_large_t *l = cache; l; l = l->next)
      if (l->resident && (max == NULL || l->resident > max->resident)) max = l;
    if (max == NULL) break;
    cache_remove(max);
    max->next = list;
    list = max;
  }
  atomic_store_explicit(&excess_since, 0, memory_order_relaxed);
  return list;
}

/* Without the lock: purge each mapping taken by excess_take (the header's page stays, the
 * cache list runs through it) and put it back, or unmap it if the cache filled meanwhile. */
static void excess_purge(trove_large_t *list) {
  if (list == NULL) return;
  size_t pg = _trove_os_page_size();
  for (trove_large_t *l = list; l; l = l->next)
    l->resident = _trove_os_purge((void *)(l->base + pg), l->map_size - pg) ? 0 : l->map_size;
  trove_large_t *drop = NULL;
  large_lock();
  for (trove_large_t *l = list, *next; l; l = next) {
    next = l->next;
    if (cache_count >= TROVE_LARGE_CACHE_MAX) {
      l->next = drop;
      drop = l;
      continue;
    }
    cache_add(l);
  }
  _trove_mutex_unlock(&_trove_locks.large);
  for (trove_large_t *l = drop, *next; l; l = next) {
    next = l->next;
    large_unmap(l, l->resident ? l->resident : pg);
  }
}

/* The process is about to take fresh memory (the page heap maps a segment): cached mappings
 * kept resident past the budget go back first, and so do those that no request has taken
 * for an eighth of the purge delay. Within the budget a freed buffer waited for the whole
 * delay while the program built its small objects beside it, so that it counted in the peak:
 * `jq -R -s` over 8 MB of text frees the 14 MB string it read the input into, then builds
 * 182k arrays, peak RSS 104 MiB against glibc's 92 (88 with this). A buffer that comes back
 * within the eighth (a request's, reused as the heap grows) stays; one that came back later
 * is faulted in again, once per segment the heap grows by at most. */
void _trove_large_trim(void) {
  large_lock();
  trove_large_t *purge = atomic_load_explicit(&excess_since, memory_order_relaxed) != 0
                             ? excess_take() : NULL;
  if (cache_resident > 0) {
    uint64_t now = _trove_os_now_ms(), idle = (uint64_t)TROVE_OPT(PURGE_DELAY_MS) / 8;
    for (trove_large_t *l = cache, *next; l; l = next) {
      next = l->next;
      if (l->resident && now - l->freed_at >= idle) {
        cache_remove(l);
        l->next = purge;
        purge = l;
      }
    }
  }
  _trove_mutex_unlock(&_trove_locks.large);
  excess_purge(purge);
}

void _trove_large_purge(bool all) {
  uint64_t now = _trove_os_now_ms(), delay = (uint64_t)TROVE_OPT(PURGE_DELAY_MS);
  trove_large_t *drop = NULL, *purge = NULL;
  large_lock();
  for (trove_large_t *l = cache, *next; l; l = next) {
    next = l->next;
    if (all || now - l->freed_at >= delay) {
      cache_remove(l);
      l->next = drop;
      drop = l;
    }
  }
  uint64_t since = atomic_load_explicit(&excess_since, memory_order_relaxed);
  if (since != 0 && cache_resident <= resident_budget())
    atomic_store_explicit(&excess_since, 0, memory_order_relaxed);
  else if (since != 0 && (all || (now | 1) - since >= delay))
    purge = excess_take();
  _trove_mutex_unlock(&_trove_locks.large);
  excess_purge(purge);
  while (drop) {
    trove_large_t *next = drop->next;
    large_unmap(drop, drop->resident ? drop->resident : _trove_os_page_size());
    drop = next;
  }
}

/* Resize mapping `l` (header at its base) to `map_size`: the pages of a tail of 1 MiB or more
 * go back (its address space stays in the reserve); a growth within the reserve only counts
 * the pages, past it the reserve grows in place where the address space allows, else the
 * pages move by mremap to a fresh 4 MiB-aligned range. No byte is copied. Returns the mapping
 * (perhaps moved), or NULL (`l` unchanged). The caller holds the lock or has the mapping to
 * itself. */
static trove_large_t *resize_mapping(trove_large_t *l, size_t map_size) {
  if (map_size <= l->map_size) {
    if (l->map_size - map_size >= ((size_t)1 << 20)) {   /* shrink: give the tail back */
      _trove_os_purge((void *)(l->base + map_size), l->map_size - map_size);
      _trove_os_count_mapped(-(ptrdiff_t)(l->map_size - map_size));
      l->map_size = map_size;
    }
    return l;
  }
  size_t reserve = reserve_for(map_size);
  if (map_size > l->reserve) {
    if (_trove_os_grow_in_place((void *)l->base, l->reserve, reserve)) {
      l->reserve = reserve;
    } else {
      size_t off = l->user - l->base;    /* read before the move: `l` is in the mapping */
      void *target = _trove_os_reserve_aligned(reserve, TROVE_SEGMENT_SIZE);
      if (target == NULL && reserve > map_size)    /* short of address space: no reserve */
        target = _trove_os_reserve_aligned(reserve = map_size, TROVE_SEGMENT_SIZE);
      if (target == NULL) return NULL;
      /* Unregister first: once mremap returns, another thread may map the old range. */
      _trove_segmap_set_large(l->user, TROVE_MAP_NONE);
      void *moved = _trove_os_remap((void *)l->base, l->reserve, reserve, target);
      if (moved == NULL) {
        large_register(l);
        _trove_os_unreserve(target, reserve);
        return NULL;
      }
      l = (trove_large_t *)moved;
      l->base = (uintptr_t)moved;
      l->user = l->base + off;
      l->reserve = reserve;
      large_register(l);
    }
  }
  _trove_os_count_mapped((ptrdiff_t)(map_size - l->map_size));
  l->map_size = map_size;
  return l;
}

/* A growth of `l` past its reserve where the address space right after it is a cached mapping
 * (the lock is held): most often the tail split_tail cut off this very mapping when a smaller
 * request took it, which the growth would otherwise have to move around, faulting fresh pages
 * in while the tail's stayed resident in the cache. A buffer built by realloc, freed, and
 * built again (a file read into a growing buffer per request) took the freed 32 MiB mapping
 * at 1 MiB, left its 28 MiB tail in the cache and grew elsewhere: peak RSS 64 MiB the second
 * time and 68 the third, against 35 the first (glibc 33). So `l` takes that mapping's address
 * space into its reserve, and its pages as they are: the written ones (all of them while it
 * is resident, its header's page once purged) join `l`'s part in use while the tails that
 * live mappings keep fit in the resident budget (as a reused mapping's tail does), else go
 * back, so that the pages past `map_size` still read zero. Returns the length to resize `l`
 * to: `map_size`, or more where it keeps written pages. */
static size_t absorb_next(trove_large_t *l, size_t map_size) {
  trove_large_t *t = cache;
  while (t && t->base != l->base + l->reserve) t = t->next;
  if (t == NULL) return map_size;
  size_t at = t->base - l->base;
  size_t written = at + (t->resident ? t->map_size : _trove_os_page_size());
  cache_remove(t);
  _trove_segmap_set_large(t->user, TROVE_MAP_NONE);
  _trove_os_count_mapped(-(ptrdiff_t)t->map_size);   /* counted again as `l` grows over it */
  l->reserve = at + t->reserve;
  if (written <= map_size) return map_size;
  if (live_excess + (written - map_size) <= resident_budget() ||
      !_trove_os_purge((void *)(l->base + map_size), written - map_size))
    return written;
  return map_size;
}

/* Returns the (possibly moved) pointer, or NULL if the caller must allocate and copy. */
void *_trove_large_realloc(trove_large_t *l, size_t size) {
  size_t off = l->user - l->base;
  if (off != TROVE_LARGE_HEADER || size > TROVE_MAX_ALLOC) return NULL;
  large_lock();
  trove_large_t *purge = NULL;
  if (round_os(off + size) > l->map_size &&
      atomic_load_explicit(&excess_since, memory_order_relaxed) != 0) {
    purge = excess_take();                 /* a growth faults pages in: the excess goes first */
    _trove_mutex_unlock(&_trove_locks.large);
    excess_purge(purge);
    large_lock();
  }
  live_excess -= excess_of(l);
  /* A growth that the mapping holds already (a tail it kept when a request reused it) leaves
   * it as it is. Sent to resize_mapping as any size within it, it gave back the tail as if
   * the block had shrunk, and the growth faulted the pages in again: a buffer grown by 4 KiB
   * steps from 1 KiB to 4 MiB, 20 times, took 43 ms and 16.6k page faults (glibc 5 ms). */
  size_t map_size = round_os(off + size);
  if (map_size > l->reserve) map_size = absorb_next(l, map_size);
  trove_large_t *m =
      map_size <= l->map_size && size >= l->requested ? l : resize_mapping(l, map_size);
  if (m == NULL) {
    live_excess += excess_of(l);
    _trove_mutex_unlock(&_trove_locks.large);
    return NULL;
  }
  if (m != l) {                              /* moved: relink it in the live list */
    if (m->prev) m->prev->next = m; else live = m;
    if (m->next) m->next->prev = m;
  }
  _trove_large_live_bytes -= m->usable;
  m->usable = m->base + m->map_size - m->user;
  _trove_large_live_bytes += m->usable;
  m->requested = size;
  live_excess += excess_of(m);
  _trove_mutex_unlock(&_trove_locks.large);
  return (void *)m->user;
}

/* stats.c and the heap map walk the live list under the lock. */
trove_large_t *_trove_large_live(void) TROVE_HIDDEN;
trove_large_t *_trove_large_live(void) { return live; }
size_t _trove_large_cached_bytes(void) TROVE_HIDDEN;
size_t _trove_large_cached_bytes(void) { return cache_bytes; }
/* Resident bytes of the cached mappings, without the lock (heap.c's background thread). */
size_t _trove_large_cached_resident(void) {
  return atomic_load_explicit(&cache_resident_hint, memory_order_relaxed);
}
