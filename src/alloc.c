/* The trove_ API: the malloc family with the error conventions of C, POSIX and glibc.
 * override.c maps the standard names onto these. */
#define _GNU_SOURCE
#include "internal.h"
#include <errno.h>
#include <string.h>

void *_trove_malloc_medium(size_t size, size_t align, bool zero) TROVE_HIDDEN;

/* ------------------------------------------------------------------ misuse */
void _trove_free_bad(void *p, trove_sb_t *sb) {
  const trove_block_t *b = p;
  /* Every block starts 16-byte aligned, so only such a pointer's first word is read: an
   * interior one at any other offset may be misaligned for it, or lie less than 8 bytes
   * before the end of a page (UBSan: misaligned load, from a free of `p + 11`; test_ops). */
  if (((uintptr_t)p & 15) == 0 && b->tag == _trove_tag(p))
    _trove_misuse("double free", p, "the block is already free");
  else if (_trove_pages_in_free_run(sb, (uintptr_t)p))
    _trove_misuse("invalid free", p, "it points into free pages");
  else
    _trove_misuse("invalid free", p, "not the start of a block trove handed out");
}

void _trove_free_unmapped(void *p) {
  if (p == NULL) return;
  trove_large_t *l = _trove_large_header((uintptr_t)p);
  if (l && l->user == (uintptr_t)p) {
    if (l->usable == 0) _trove_misuse("double free", p, "the large block is already free");
    else _trove_large_free(l);
    return;
  }
  _trove_misuse("invalid free", p, "trove never handed out this address");
}

/* The run or large header behind a live pointer, validated as free() does; false (after the
 * misuse report, which may return in warn mode) for a bad pointer. */
typedef struct { trove_sb_t *sb; trove_large_t *large; } owner_t;
static bool lookup_live(const void *p, owner_t *o) {
  uintptr_t a = (uintptr_t)p;
  o->sb = NULL;
  o->large = NULL;
  if (_trove_segmap_kind(a) == TROVE_MAP_SEGMENT) {
    trove_sb_t *sb = _trove_sb_of(_trove_segment_of(a), a);
    if (!_trove_sb_is_block(sb, a) || ((const trove_block_t *)p)->tag == _trove_tag(p)) {
      _trove_free_bad((void *)p, sb);
      return false;
    }
    o->sb = sb;
    return true;
  }
  trove_large_t *l = _trove_large_header(a);
  if (l && l->user == a && l->usable) {
    o->large = l;
    return true;
  }
  _trove_free_unmapped((void *)p);
  return false;
}

/* ------------------------------------------------------------------ malloc family */
void *_trove_malloc(size_t size) { return _trove_malloc_inline(size); }
void _trove_free(void *p) { _trove_free_inline(p); }

static TROVE_NOINLINE void *alloc_zero(size_t size) {
  if (size <= TROVE_SMALL_MAX) {
    void *p = _trove_malloc_inline(size);
    if (p) memset(p, 0, size);
    return p;
  }
  _trove_init();
  void *p;
  bool collected = false;
  do p = size <= TROVE_MEDIUM_MAX ? _trove_malloc_medium(size, 0, true)
                                  : _trove_large_alloc(size, 0, true);
  while (p == NULL && _trove_heap_release_cache(&collected));
  if (p == NULL) _trove_os_set_enomem();
  return p;
}

/* calloc of a small block: popped as malloc pops it, then cleared here with 16-byte stores
 * up to the request rounded to 16 (within the block: class sizes are multiples of 16), not
 * by a call of memset (its PLT jump, its dispatch on the length, the registers saved around
 * it). A miss, or a larger request, takes alloc_zero. CALLOC_INLINE_MAX bounds the loop. */
#define CALLOC_INLINE_MAX 256
static TROVE_NOINLINE void *calloc_overflow(void) {
  _trove_os_set_enomem();
  return NULL;
}

void *_trove_calloc(size_t count, size_t size) {
  size_t total;
  if (unlikely(__builtin_mul_overflow(count, size, &total))) return calloc_overflow();
  if (unlikely(total > CALLOC_INLINE_MAX)) return alloc_zero(total);
  trove_heap_t *h = _trove_tls_heap;
  trove_sb_t *sb = h->slots[_trove_size_slot[(total + 15) >> 4]];
  trove_block_t *b = sb->free;
  if (unlikely(b == NULL)) return alloc_zero(total);
  typedef uint64_t pair_t __attribute__((vector_size(16), aligned(16)));
  size_t words = (total + 15) >> 4;
  pair_t *q = _trove_sb_pop(sb, b), *end = q + words;
  if (words & 1) *--end = (pair_t){0, 0};
  for (; q < end; q += 2) {
    q[0] = q[1] = (pair_t){0, 0};
    __asm__("" : : "r"(q) : "memory");   /* a store loop, not a call of memset */
  }
  return b;
}
TROVE_API void *trove_calloc(size_t count, size_t size) { return _trove_calloc(count, size); }

/* The block kinds _trove_usable_size_inline leaves to here: NULL, large blocks, bad pointers. */
size_t _trove_usable_size_slow(const void *p) {
  if (p == NULL) return 0;
  owner_t o;
  if (!lookup_live(p, &o)) return 0;
  return o.sb ? o.sb->bsize : o.large->usable;
}
TROVE_API size_t trove_malloc_usable_size(const void *p) { return _trove_usable_size_inline(p); }

/* Move to a new block; the old one stays valid if there is none, as C requires. */
static void *realloc_move(void *p, size_t old_usable, size_t size) {
  void *q = _trove_malloc_inline(size);
  if (q == NULL) return NULL;
  memcpy(q, p, old_usable < size ? old_usable : size);
  _trove_free_inline(p);
  return q;
}

#define TROVE_REALLOC_ROOM_MAX ((size_t)8192)   /* see realloc_block */

/* A block of a superblock or a medium run that _trove_realloc validated, and that does not
 * fit `size` as it is: grow a medium run in place, else move (the old block is freed without
 * validating it again). */
static TROVE_NOINLINE void *realloc_block(void *p, trove_sb_t *sb, size_t size) {
  size_t usable = sb->bsize;
  if (size == 0) {                         /* glibc: frees and returns NULL */
    _trove_free_valid(p, sb);
    return NULL;
  }
  /* A block shrunk to half its size or more stays, but for two cases. A medium run shrunk to
   * between half and three quarters of its length (and not to a small size) gives its tail
   * back: kept whole, 300 buffers of 900 KiB written and then shrunk to 500 KiB held 273 MiB,
   * now 168 (glibc, which splits its chunk, 148). A block of a class above 8 KiB (a few
   * pages each) shrunk so moves to the class that fits: 2,000 of 60 KiB shrunk to 40 KiB held
   * 120 MiB in place, 81 moved (glibc 79), in the same time, since the blocks left behind
   * empty their superblocks for the page heap; smaller blocks stay (a string trimmed in place
   * costs no copy, and their superblocks hold many). A shrink by less keeps the block, as a
   * buffer that grows into the room a move gave it does (below). One shrunk below half moves:
   * the copy is short, and a medium run's whole run serves the next request of its length,
   * where a tail given back in place is a hole that a longer request cannot use (500 buffers
   * of 1,000 KiB shrunk to 70: 38 MiB moved, 49 trimmed). */
  if (size <= usable && size >= usable / 2 &&
      (sb->kind == TROVE_SPAN_MEDIUM || usable <= 8192 || size >= usable - usable / 4)) {
    if (sb->kind == TROVE_SPAN_MEDIUM && size > TROVE_SMALL_MAX && size < usable - usable / 4) {
      size_t npages = (size + TROVE_PAGE_SIZE - 1) >> TROVE_PAGE_SHIFT;
      trove_heap_t *h = _trove_tls_heap;
      if (h != &_trove_heap_empty) h->medium_net -= (int64_t)(sb->npages - npages);
      _trove_pages_shrink(sb, npages);
      _trove_sb_set_run(sb, npages << TROVE_PAGE_SHIFT, npages << TROVE_PAGE_SHIFT);
      sb->requested = size;
    }
    return p;
  }
  if (sb->kind == TROVE_SPAN_MEDIUM && size > usable && size <= TROVE_MEDIUM_MAX) {
    size_t npages = (size + TROVE_PAGE_SIZE - 1) >> TROVE_PAGE_SHIFT;
    size_t old_pages = sb->npages;
    if (_trove_pages_grow(sb, npages)) {   /* the next run was free: grow in place */
      trove_heap_t *h = _trove_tls_heap;   /* it took the pages (heap.c, medium_net) */
      if (h != &_trove_heap_empty) h->medium_net += (int64_t)sb->npages - (int64_t)old_pages;
      _trove_sb_set_run(sb, npages << TROVE_PAGE_SHIFT, npages << TROVE_PAGE_SHIFT);
      sb->requested = size;
      return p;
    }
  }
  /* Grown by less than a quarter: a buffer appended to piece by piece (string builders).
   * Moving it to the class that just fits would move it again a few appends later, so it
   * gets a quarter more room (two classes up); growth by a larger step (vectors, doubling)
   * gets what it asks for. Against no headroom, an eighth made reallocgrow 17% faster for 6%
   * more peak RSS; a quarter (as tcmalloc) halves the bytes copied again: reallocgrow 7-11%
   * faster than an eighth at 1-8 threads, peak RSS level (fewer classes passed through).
   * A buffer that stops growing keeps the quarter it never uses, and Redis grows its list
   * nodes by appends up to 8 KiB and no further (LPUSH of 300k 256-byte values: peak RSS 112
   * MiB with the quarter at every size, 92 with none from 8 KiB up, mimalloc 91). So a block
   * crossing 8 KiB gets 8 KiB at most, and only one already past 8 KiB, a buffer that did not
   * stop there, gets its quarter again: with no room at all from 8 KiB up, reallocgrow
   * (targets up to 16 KiB) copied 1.93 GB at 1 thread, tcmalloc 1.13, now 1.16; 0.368 ->
   * 0.315 s (tcmalloc 0.297), Redis's peak RSS level. A medium run grows in place when the
   * pages after it are free, as they are after a move when it grows alone; where other
   * buffers grow beside it, each move's new run is placed where the next one's move then
   * takes the pages after it, and without room a buffer grown by 1,000-byte appends from
   * 64 to 512 KiB (32 side by side) moved every few appends: 0.22 s, against 0.06 under
   * mimalloc 3 and 0.12 under tcmalloc (whose quarter this is). So a medium run gets the
   * quarter too, where it grows by a sixteenth or less (appends): 0.08 s. Not for a larger
   * step, which most often is the buffer's last (a message read whole): 2,000 buffers of
   * 70 KiB grown to 80 KiB each, side by side, held 185 MiB with the quarter and 163 without,
   * since the runs they moved to were carved from the pages of those that moved before, which
   * the quarter's pages kept resident (glibc 157). */
  if (size > usable && size < usable + usable / 4) {
    if (sb->kind == TROVE_SPAN_MEDIUM) {
      if (size - usable <= usable / 16) size = usable + usable / 4;
    } else if (usable + usable / 4 <= TROVE_REALLOC_ROOM_MAX || usable >= TROVE_REALLOC_ROOM_MAX) {
      size = usable + usable / 4;
    } else if (size < TROVE_REALLOC_ROOM_MAX) {
      size = TROVE_REALLOC_ROOM_MAX;
    }
  }
  void *q = _trove_malloc_inline(size);
  /* the old block stays valid, as C requires; a shrink keeps it (as glibc's never fails) */
  if (q == NULL) return size <= usable ? p : NULL;
  memcpy(q, p, usable < size ? usable : size);
  _trove_free_valid(p, sb);
  return q;
}

/* A large block shrunk to a medium size stays in its mapping, as one shrunk to a large size
 * does, where the pages it gives up go back (a tail of 1 MiB or more: large.c, resize_mapping)
 * or are at most half of them; below a quarter of TROVE_MEDIUM_MAX it moves, the copy being
 * short. Moved, it was copied whole, and moved and copied again when it grew back: a buffer
 * resized between 10 MiB and 1 MiB in turn took 75 us a realloc, 99.6% of it in memmove
 * (glibc, which mremaps its mappings, 3.3-5.6 us; now 1.8 us). */
static bool shrinks_in_place(size_t usable, size_t size) {
  return size > TROVE_MEDIUM_MAX / 4 && size < usable &&
         (usable - size >= ((size_t)1 << 20) || size >= usable / 2);
}

/* Everything _trove_realloc does not validate itself: large blocks, bad pointers. */
static TROVE_NOINLINE void *realloc_slow(void *p, size_t size) {
  owner_t o;
  if (!lookup_live(p, &o)) return NULL;
  if (o.sb) return realloc_block(p, o.sb, size);   /* not reached: _trove_realloc takes these */
  if (size == 0) {
    _trove_free_inline(p);
    return NULL;
  }
  if (size > TROVE_MEDIUM_MAX || shrinks_in_place(o.large->usable, size)) {
    void *q = _trove_large_realloc(o.large, size);
    if (q) return q;
  }
  return realloc_move(p, o.large->usable, size);
}

/* The common case first, in a function that saves no register: a small block that still fits
 * (most appends to a string builder). The pointer must be a block start, as free() checks; a
 * valid block that does not fit takes realloc_block once its tag says it is not free (a
 * double free if it were: realloc_block frees it); anything else, a bad pointer included,
 * realloc_slow, which validates again and reports.
 * A block that fits stays where it is without its tag being read: the first word of a buffer
 * grown at its end is rarely in cache, and that load cost 12% of bench/reallocgrow at 1
 * thread (0.443 -> 0.392 s without it; 1.57M of 1.6M such reallocs missed it in the first
 * level). So a realloc of an already freed block within its size is not reported; it is a
 * use after free, which no allocator's fast path sees (glibc, jemalloc, tcmalloc and
 * mimalloc return the block too). One that moves the block, or frees it, is reported. */
void *_trove_realloc(void *p, size_t size) {
  uintptr_t a = (uintptr_t)p;
  if (a == 0) return _trove_malloc_inline(size);   /* Lua and others allocate through realloc */
  if (likely(_trove_segmap_kind(a) == TROVE_MAP_SEGMENT)) {
    trove_sb_t *sb = _trove_sb_of(_trove_segment_of(a), a);
    if (likely(_trove_sb_is_block(sb, a))) {
      size_t usable = sb->bsize;
      /* from three quarters of its size up it stays (so size != 0: usable >= 16); from half
       * too, in realloc_block, where a medium run gives its tail back */
      if (likely(size <= usable && size >= usable - usable / 4)) return p;
      if (likely(((const trove_block_t *)p)->tag != _trove_tag(p)))
        return realloc_block(p, sb, size);
    }
  }
  return realloc_slow(p, size);
}
TROVE_API void *trove_realloc(void *p, size_t size) { return _trove_realloc(p, size); }

void *_trove_reallocarray(void *p, size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    _trove_os_set_enomem();
    return NULL;
  }
  return _trove_realloc(p, total);
}

static bool is_pow2(size_t x) { return x && (x & (x - 1)) == 0; }
static void *aligned_refill(trove_sb_t *sb, size_t key);

/* Blocks of a class are aligned to the largest power of two dividing the class size (runs
 * start on 8 KiB pages), so small aligned requests just pick such a class: on the fast path
 * (_trove_aligned_sb, and aligned_refill below when the class is out of blocks), here for
 * what that path does not serve and when it ran out of memory. */
static TROVE_NOINLINE void *alloc_aligned(size_t align, size_t size) {
  if (align <= 16) return _trove_malloc_inline(size);   /* every block is 16-byte aligned */
  if (size == 0) size = 1;
  if (size > TROVE_MAX_ALLOC || align > TROVE_MAX_ALLOC) goto enomem;
  size_t rounded = (size + align - 1) & ~(align - 1);
  if (align <= TROVE_PAGE_SIZE && rounded <= TROVE_SMALL_MAX) {
    size_t row = (size_t)__builtin_ctzl(align) - 4;
    size_t cls = _trove_class_aligned[row][_trove_size_class_lookup(rounded)];
    /* the class's own superblock, as the fast path takes it: malloc of the class's size
     * would take malloc's class for it, which may be another one (a class 64 B larger for a
     * multiple of 4 KiB, whose blocks are not so aligned: size_class.c) */
    trove_sb_t *sb = _trove_tls_heap->cur[cls];
    trove_block_t *b = sb->free;
    void *p = b ? _trove_sb_pop(sb, b) : aligned_refill(sb, 256 + cls);
    if (p) return p;
    goto enomem;
  }
  _trove_init();
  void *p;
  bool collected = false;
  do {
    if (rounded <= TROVE_MEDIUM_MAX && align <= TROVE_MEDIUM_MAX)
      p = _trove_malloc_medium(rounded > TROVE_SMALL_MAX ? rounded : TROVE_SMALL_MAX + 1, align,
                               false);
    else
      p = _trove_large_alloc(size, align, false);
  } while (p == NULL && _trove_heap_release_cache(&collected));
  if (p) return p;
enomem:
  _trove_os_set_enomem();
  return NULL;
}

/* The aligned fast path's class had no free block at hand in its current superblock `sb` (or
 * the thread has none): malloc's slow path for that superblock and class size `cs`, as
 * alloc_aligned would reach it through _trove_malloc_inline(cs), without a larger class's
 * block and without touching errno; NULL when out of memory. The fast paths tail-call it
 * with what they found. In random replacement of 16 B - 16 KiB blocks at 16 B - 4 KiB
 * alignments (bench/aligned) a third of the calls come here: through alloc_aligned they
 * took 90 instructions more (the checks, the class found again, posix_memalign_slow's
 * errno); finding the superblock and class again here, and saving errno, 40 more. */
static void *aligned_refill(trove_sb_t *sb, size_t key) {
  _trove_aligned_call = true;
  void *p = _trove_malloc_generic(_trove_aligned_key_size(key), _trove_tls_heap, sb);
  _trove_aligned_call = false;
  return p;
}
static TROVE_NOINLINE void *aligned_alloc_refill(size_t align, size_t size, trove_sb_t *sb,
                                                 size_t key) {
  void *p = aligned_refill(sb, key);
  return likely(p != NULL) ? p : alloc_aligned(align, size);
}

/* posix_memalign leaves errno as it was, even when it fails (glibc does the same). */
static TROVE_NOINLINE int posix_memalign_slow(void **out, size_t align, size_t size) {
  int saved = errno;
  void *p = alloc_aligned(align, size);
  if (p == NULL) {
    errno = saved;
    return ENOMEM;
  }
  *out = p;
  return 0;
}

static TROVE_NOINLINE int posix_memalign_refill(void **out, size_t align, size_t size,
                                                trove_sb_t *sb, size_t key) {
  void *p = aligned_refill(sb, key);
  if (unlikely(p == NULL)) return posix_memalign_slow(out, align, size);
  *out = p;
  return 0;
}

int _trove_posix_memalign(void **out, size_t align, size_t size) {
  if (unlikely(!is_pow2(align) || align % sizeof(void *))) return EINVAL;
  size_t key;
  trove_sb_t *sb = _trove_aligned_sb(align, size, &key);
  if (unlikely(sb == NULL)) return posix_memalign_slow(out, align, size);
  trove_block_t *b = sb->free;
  if (unlikely(b == NULL)) return posix_memalign_refill(out, align, size, sb, key);
  *out = _trove_sb_pop(sb, b);
  return 0;
}

/* aligned_alloc and memalign, once `align` is a power of two. */
static inline void *aligned_inline(size_t align, size_t size) {
  size_t key;
  trove_sb_t *sb = _trove_aligned_sb(align, size, &key);
  if (unlikely(sb == NULL)) return alloc_aligned(align, size);
  trove_block_t *b = sb->free;
  if (unlikely(b == NULL)) return aligned_alloc_refill(align, size, sb, key);
  return _trove_sb_pop(sb, b);
}

void *_trove_aligned_alloc(size_t align, size_t size) {
  if (unlikely(!is_pow2(align))) {
    errno = EINVAL;
    return NULL;
  }
  return aligned_inline(align, size);
}

void *_trove_memalign(size_t align, size_t size) {
  if (align <= 16) return _trove_malloc_inline(size);
  if (!is_pow2(align)) {                   /* glibc rounds up to a power of two */
    size_t a = 1;
    while (a < align && a) a <<= 1;
    if (a == 0) {
      errno = EINVAL;
      return NULL;
    }
    align = a;
  }
  return aligned_inline(align, size);
}

void *_trove_valloc(size_t size) { return alloc_aligned(_trove_os_page_size(), size); }

void *_trove_pvalloc(size_t size) {
  size_t ps = _trove_os_page_size();
  if (size > TROVE_MAX_ALLOC) {
    errno = ENOMEM;
    return NULL;
  }
  size_t rounded = (size + ps - 1) & ~(ps - 1);
  return alloc_aligned(ps, rounded ? rounded : ps);
}

TROVE_API int trove_malloc_trim(size_t pad) {
  (void)pad;
  size_t before = atomic_load(&_trove_os_purge_calls);
  _trove_init();
  _trove_heap_collect(_trove_tls_heap, true);
  return atomic_load(&_trove_os_purge_calls) != before;   /* madvise or unmap gave some back */
}

TROVE_API void trove_collect(void) {
  _trove_init();
  _trove_heap_collect(_trove_tls_heap, true);
}

TROVE_API const char *trove_version(void) { return "trove 0.1"; }

/* The exported trove_ names of the functions above that the standard names forward to: those
 * are defined under hidden names, which override.c and override_new.cc call directly. A call
 * to a function of this library with default visibility goes through the PLT (an indirect
 * jump), so posix_memalign, for one, took a jump more than malloc on its fast path. */
#define TROVE_EXPORT_AS(public, hidden) \
  extern __typeof(hidden) public __attribute__((alias(#hidden), visibility("default")))
TROVE_EXPORT_AS(trove_malloc, _trove_malloc);
TROVE_EXPORT_AS(trove_free, _trove_free);
TROVE_EXPORT_AS(trove_posix_memalign, _trove_posix_memalign);
TROVE_EXPORT_AS(trove_aligned_alloc, _trove_aligned_alloc);
TROVE_EXPORT_AS(trove_memalign, _trove_memalign);
TROVE_EXPORT_AS(trove_valloc, _trove_valloc);
TROVE_EXPORT_AS(trove_pvalloc, _trove_pvalloc);
TROVE_EXPORT_AS(trove_reallocarray, _trove_reallocarray);
