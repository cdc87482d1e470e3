/* trove internals: the types of every layer and the inline fast paths.
 *
 *   process ──┬── thread heap (one per thread, no locks)         heap.c
 *             │     slots[] ─► current superblock per size (direct[]) and class (cur[])
 *             │     partial / full lists per class, one sparse list
 *             │     remote queue: blocks freed by other threads (lock-free push)
 *             ├── shared pool of superblocks (released or abandoned)  heap.c
 *             ├── page heap: free page runs in segments, coalesced   page_heap.c
 *             ├── segments: 4 MiB aligned, header + 512 pages of 8 KiB segment.c
 *             ├── large objects: their own aligned mappings         large.c
 *             └── OS layer: mmap, munmap, madvise, clock, stderr    os.c
 *
 * A pointer's owner is found in O(1): its 4 MiB segment is the pointer with the low 22 bits
 * cleared, the segment map (a byte per 4 MiB of address space) says whether that is a trove
 * segment, and the segment header's page map leads to the descriptor of the page run
 * (superblock or medium object) holding it. Small blocks carry no header.
 *
 * Layers, bottom to top: os → segment → page_heap → superblock → heap → large → alloc;
 * options and stats read all of them; override.c only forwards the standard names.
 */
#ifndef TROVE_INTERNAL_H
#define TROVE_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include "trove.h"

/* Every name declared below is internal: hidden declarations let the fast paths reach the
 * globals directly (one rip-relative load) instead of through the GOT. */
#pragma GCC visibility push(hidden)

#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define TROVE_NOINLINE __attribute__((noinline))
#define TROVE_INLINE   static inline __attribute__((always_inline))
#define TROVE_HIDDEN   __attribute__((visibility("hidden")))
#define TROVE_API      __attribute__((visibility("default")))
#define TROVE_CACHE_LINE 64

/* ---------------------------------------------------------------- geometry */
#define TROVE_SEGMENT_SHIFT 22                         /* 4 MiB segments */
#define TROVE_SEGMENT_SIZE  ((size_t)1 << TROVE_SEGMENT_SHIFT)
#define TROVE_SEGMENT_MASK  (TROVE_SEGMENT_SIZE - 1)
#define TROVE_PAGE_SHIFT    13                         /* 8 KiB pages inside a segment */
#define TROVE_PAGE_SIZE     ((size_t)1 << TROVE_PAGE_SHIFT)
#define TROVE_SEGMENT_PAGES (TROVE_SEGMENT_SIZE >> TROVE_PAGE_SHIFT)   /* 512 */
#define TROVE_VA_BITS       47
#define TROVE_SEGMAP_SIZE   ((size_t)1 << (TROVE_VA_BITS - TROVE_SEGMENT_SHIFT))

/* Size classes: multiples of 16 up to 128 B, then 8 classes per doubling up to 64 KiB, so that
 * above 128 B a block wastes at most 1/8 of the request (with TROVE_COLOUR=1, malloc's classes
 * that would be multiples of 1 KiB from 4 KiB up are 64 B larger, and the multiples of 4 KiB
 * stay for aligned requests: size_class.c, cache colour). Every block is 16-byte aligned, as
 * glibc's are: programs rely on it even where the C standard would allow 8 (SSE loads on a
 * float array of odd length), so 64-128 B keeps 16-byte steps (at most 15 bytes lost). */
#define TROVE_SMALL_MAX     ((size_t)64 * 1024)
#define TROVE_CLASSES       97                         /* class 0 unused */
#define TROVE_DIRECT_MAX    1024                       /* direct[] serves sizes up to this */
#define TROVE_DIRECT_SLOTS  (TROVE_DIRECT_MAX / 16 + 1)   /* every class size is a 16-multiple */
#define TROVE_REMOTE_LANES  7              /* remote queue chains (with its words, one cache line) */
/* Superblock (Hoard's S): 64 KiB for blocks up to 8 KiB; larger classes get runs that hold 8. */
#define TROVE_SB_SIZE       ((size_t)64 * 1024)
#define TROVE_SB_PAGES      (TROVE_SB_SIZE >> TROVE_PAGE_SHIFT)
/* Medium objects (above SMALL_MAX) are page runs; above MEDIUM_MAX they get their own mapping. */
#define TROVE_MEDIUM_MAX    ((size_t)1024 * 1024)
#define TROVE_CALLOC_TOUCH_MAX ((size_t)4 << 20)         /* calloc faults pages in by writing */
#define TROVE_MCACHE_MIN_PAGES ((TROVE_SMALL_MAX >> TROVE_PAGE_SHIFT) + 1)   /* 9 */
#define TROVE_MCACHE_MAX_PAGES (TROVE_MEDIUM_MAX >> TROVE_PAGE_SHIFT)         /* 128 */
#define TROVE_MCACHE_BINS   (TROVE_MCACHE_MAX_PAGES - TROVE_MCACHE_MIN_PAGES + 1)
#define TROVE_PAGE_BINS     130      /* page heap bins: runs of 1..128 pages, and longer ones */
#define TROVE_MAX_ALLOC     (((size_t)1 << 46))        /* anything larger fails with ENOMEM */

/* ---------------------------------------------------------------- blocks */
/* A free small block. `tag` is written on free and cleared by malloc, so a block whose tag
 * equals its address xor the process key is free: a second free of it is a double free.
 * The tag is the first word: free loads it soon after the program's last stores to the
 * block, and a program's first word is most often one 8-byte store (a pointer, a length),
 * from which the load is forwarded; at +8 it overlapped the last byte of 9-16 B blocks and
 * waited for those stores to reach the cache (fastpath ping-pong: 0.160 -> 0.129 s,
 * tcmalloc 0.134). */
typedef struct trove_block_s {
  uintptr_t tag;
  struct trove_block_s *next;
} trove_block_t;

extern uintptr_t _trove_key;                           /* random per process, set at init */
TROVE_INLINE uintptr_t _trove_tag(const void *p) { return (uintptr_t)p ^ _trove_key; }

/* ---------------------------------------------------------------- superblocks / page runs */
typedef enum {
  TROVE_SPAN_FREE = 0,     /* a free page run in the page heap */
  TROVE_SPAN_SMALL,        /* a superblock of one size class */
  TROVE_SPAN_MEDIUM,       /* one medium object */
  TROVE_SPAN_PURGING,      /* a free run out of the page heap while madvise runs */
} trove_span_kind_t;

typedef enum {             /* where a small superblock is; decides what a free's slow path does */
  TROVE_SB_CURRENT = 0,    /* its heap allocates from it (heap->cur[cls]) */
  TROVE_SB_PARTIAL,        /* owned, on the class's partial list */
  TROVE_SB_SPARSE,         /* owned, f-empty: on the heap's sparse list (at most K of them) */
  TROVE_SB_FULL,           /* owned, no free block: on the class's full list */
  TROVE_SB_POOL,           /* in the shared pool, owned by no heap */
  TROVE_SB_ABANDONED,      /* full, let go by its heap: the next free adopts it (heap.c) */
} trove_sb_state_t;
/* `heap` of an abandoned superblock: not NULL (the pool's mark), so that an adoption's
 * compare-and-swap from it cannot take a pool superblock. */
#define TROVE_ABANDONED ((struct trove_heap_s *)1)

struct trove_heap_s;

typedef struct trove_arena_ref_s {   /* page_heap.c: which arena a heap takes page runs from */
  uint32_t arena;
} trove_arena_ref_t;

/* The descriptor of a page run; lives in the segment header, one per page (only the first
 * page of a run is used). One cache line of hot fields, so descriptors of superblocks owned
 * by different threads never share a line. The owner alone touches the hot fields; other
 * threads only push onto thread_free (pool superblocks) or onto the owner's remote queue. */
typedef struct trove_sb_s {
  /* Two cache lines: what every free reads (another thread's too) and the owner's. A remote
   * free reads the first to validate and route the block while the owner's mallocs write
   * `free` and `slack`; on one line, each side's access missed on the other's write. In a
   * producer-consumer pair (one thread allocates, the other frees; 32-512 B), 80% of free's
   * samples and 70% of malloc's were on those loads. */
  /* line 0: read by every free; written on slow paths only */
  uintptr_t start;             /* address of block 0 */
  uint64_t divm;               /* ceil(2^64 / bsize) (see is_block): no divide */
  uint64_t limit;              /* (carved / bsize) * (bsize * divm mod 2^64): see is_block */
  _Atomic(struct trove_heap_s *) heap;  /* owner; NULL in the pool, for medium and free runs */
  uint32_t carved;             /* bytes of the run handed to blocks so far (0 for a free run) */
  uint32_t bsize;              /* block size; for a medium object its usable size */
  uint32_t capacity;           /* blocks that fit */
  uint32_t span_bytes;         /* npages * PAGE */
  uint16_t page;               /* index of the first page in the segment */
  uint16_t npages;
  uint8_t kind;                /* trove_span_kind_t */
  uint8_t cls;
  uint8_t dirty;               /* free run: touched since the last purge */
  uint8_t reclaim;             /* pool: abandoned by an exiting thread, a free may adopt it */
  uint64_t freed_at;           /* free run / empty superblock: when it became free (ms) */
  /* line 1: the owner's (malloc and local free write it) */
  trove_block_t *free __attribute__((aligned(TROVE_CACHE_LINE)));   /* blocks malloc pops */
  int32_t slack;               /* used - trigger: a local free slow-paths when it drops below 0
                                  (used = live blocks, including remote frees not collected) */
  int32_t trigger;
  union {
    trove_block_t *local_free; /* blocks collected from thread_free; become `free` when it runs out */
    struct trove_heap_s *medium_heap;  /* medium: the heap that allocated it (heap.c) */
  };
  _Atomic(trove_block_t *) thread_free;
  struct trove_sb_s *next, *prev;       /* heap list, pool list or page-heap bin */
  uint8_t state;               /* trove_sb_state_t */
  uint8_t pool_full : 1;       /* pool: on the class's `full` list rather than `avail` */
  uint8_t pool_empty : 1;      /* pool: entered it empty and carved (see heap.c, pool_empties) */
  uint8_t kept : 1;            /* its heap took it back after abandoning it: not abandoned again */
  uint8_t claimed : 1;         /* taken up from the heap that abandoned it: empty, it goes on */
  uint8_t together : 1;        /* its last slow free came right after the one before it
                                  (heap.c, sb_underflow and sb_cycle) */
  uint16_t sparse_at;          /* fewer live blocks than this: f-empty (Hoard), see heap.c */
  _Atomic(int32_t) pool_live;  /* pool: live blocks not yet freed (a hint, see heap.c) */
  union {
    size_t requested;          /* medium: bytes asked for (stats) */
    uintptr_t idle_mark;       /* current superblock: its list heads when last seen idle */
    uintptr_t released_by;     /* empty in the pool: the heap that put it there */
  };
} trove_sb_t;

typedef struct trove_segment_s {
  uint64_t magic;
  struct trove_segment_s *next, *prev;       /* all segments (page heap lock) */
  uint32_t free_pages;                       /* pages in free runs */
  uint32_t first_page;                       /* pages before it hold this header */
  uint64_t empty_since;                      /* in the empty-segment cache since (ms), 0 if not */
  uint32_t arena;                            /* the page heap arena it belongs to */
  uint32_t slot;                             /* its place in that arena (page_heap.c, slots) */
  _Atomic uint32_t huge;                     /* asked for huge pages, not purged since: 1, or 2
                                                kept for dense runs (segment.c) */
  /* page_heap.c's bins: this segment's free runs of each bin's length, by page */
  struct trove_sb_s *bin_runs[TROVE_PAGE_BINS];
  /* page -> byte offset in sb[] of its run's descriptor (slot * 128 fits 16 bits) */
  uint16_t pagemap[TROVE_SEGMENT_PAGES] __attribute__((aligned(TROVE_CACHE_LINE)));
  /* Descriptor slots, one per run, handed out lowest first (page_heap.c, desc_new): a
   * segment has at most one run per usable page */
  uint64_t desc_used[TROVE_SEGMENT_PAGES / 64];
  trove_sb_t sb[TROVE_SEGMENT_PAGES] __attribute__((aligned(TROVE_CACHE_LINE)));
} trove_segment_t;

_Static_assert(sizeof(trove_sb_t) == 128, "pagemap offsets assume 128-byte descriptors");
_Static_assert(offsetof(trove_sb_t, freed_at) < TROVE_CACHE_LINE &&
                   offsetof(trove_sb_t, free) == TROVE_CACHE_LINE,
               "what every free reads and what the owner writes on separate lines");
#define TROVE_SEGMENT_MAGIC 0x65766f7274ull   /* "trove" */
#define TROVE_HEADER_PAGES ((sizeof(trove_segment_t) + TROVE_PAGE_SIZE - 1) >> TROVE_PAGE_SHIFT)

/* segment map: one byte per 4 MiB of address space (in .bss: untouched parts cost nothing) */
enum { TROVE_MAP_NONE = 0, TROVE_MAP_SEGMENT = 1, TROVE_MAP_LARGE = 2, TROVE_MAP_LARGE_BELOW = 3 };
extern uint8_t _trove_segmap[TROVE_SEGMAP_SIZE];

TROVE_INLINE unsigned _trove_segmap_kind(uintptr_t a);
TROVE_INLINE trove_segment_t *_trove_segment_of(uintptr_t a) {
  return (trove_segment_t *)(a & ~(uintptr_t)TROVE_SEGMENT_MASK);
}
/* The descriptor of the run that holds `page`: exact for a run's first and last page, free or
 * not, and for every page of a run in use (see page_heap.c, make_free_run). */
TROVE_INLINE trove_sb_t *_trove_seg_run(trove_segment_t *seg, size_t page) {
  return (trove_sb_t *)((char *)seg->sb + seg->pagemap[page]);
}
TROVE_INLINE trove_sb_t *_trove_sb_of(trove_segment_t *seg, uintptr_t a) {
  return _trove_seg_run(seg, (a & TROVE_SEGMENT_MASK) >> TROVE_PAGE_SHIFT);
}
/* Words other threads may write, read by the fast paths for one compare: `limit` (the owner
 * carves while other threads free), `heap` (an adoption or an exit changes the owner) and the
 * segment map's bytes (a segment or large mapping comes or goes). A
 * relaxed atomic load is all they need, but GCC does not fold an atomic load into the compare
 * that uses it (one instruction more per free, twice); an aligned word load is one access on
 * every target trove builds for, and each value is used once, so outside TSan builds they are
 * plain loads. TSan builds keep the atomic loads they stand for. */
#if defined(__SANITIZE_THREAD__)
#define TROVE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TROVE_TSAN 1
#endif
#endif
#ifdef TROVE_TSAN
TROVE_INLINE uint64_t _trove_peek_u64(const uint64_t *p) {
  return __atomic_load_n(p, __ATOMIC_RELAXED);
}
TROVE_INLINE struct trove_heap_s *_trove_sb_owner(const trove_sb_t *sb) {
  return atomic_load_explicit(&((trove_sb_t *)sb)->heap, memory_order_relaxed);
}
TROVE_INLINE uint8_t _trove_peek_u8(const uint8_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
#else
TROVE_INLINE uint8_t _trove_peek_u8(const uint8_t *p) { return *p; }
TROVE_INLINE uint64_t _trove_peek_u64(const uint64_t *p) { return *p; }
TROVE_INLINE struct trove_heap_s *_trove_sb_owner(const trove_sb_t *sb) {
  return *(struct trove_heap_s *const *)&sb->heap;
}
#endif

/* The kind of the 4 MiB region of `a`. The map is written (atomically) when segments and
 * large mappings come and go; a peek is a plain byte load, which the compiler folds into the
 * compare. */
TROVE_INLINE unsigned _trove_segmap_kind_at(uintptr_t i) {   /* i = address >> SEGMENT_SHIFT */
  return likely(i < TROVE_SEGMAP_SIZE) ? _trove_peek_u8(&_trove_segmap[i]) : TROVE_MAP_NONE;
}
TROVE_INLINE unsigned _trove_segmap_kind(uintptr_t a) {
  return _trove_segmap_kind_at(a >> TROVE_SEGMENT_SHIFT);
}

/* Live blocks of a small superblock, and the trigger that keeps `slack` = used - trigger. */
TROVE_INLINE int32_t _trove_sb_used(const trove_sb_t *sb) { return sb->slack + sb->trigger; }
TROVE_INLINE void _trove_sb_set_trigger(trove_sb_t *sb, int32_t t) {
  sb->slack += sb->trigger - t;
  sb->trigger = t;
}
/* Is `a` the start of a block of `sb` that has been handed out at least once? Rejects
 * addresses in headers, free runs, tails and interiors of blocks, with one multiply and one
 * compare. With d = bsize, c = divm = ceil(2^64/d) (2^64/d + 1 for a power of two) and
 * e = d*c mod 2^64 (0 < e <= d): for an offset n < 2^32, n*c mod 2^64 is q*e if n = q*d, and
 * at least 2^64/d >= 2^44 if d does not divide n (Lemire; for a power of two 2^k, it is n
 * plus (n mod d) * 2^(64-k)). So n is the start of one of the first k blocks exactly when
 * n*c mod 2^64 < k*e, since k*e < 2^32 < 2^44 for every run (k*e <= 4096 * 2^16; a medium run
 * has k = 1 and e <= 1 MiB). `limit` holds k*e for the k blocks carved so far, 0 for free
 * runs and freed descriptor slots (so that nothing passes, whatever `start` says). The run
 * found for an address is in the same segment, but it may start after the address (a stale
 * page-map entry inside a free run, see page_heap.c's desc_new): a negative offset above
 * -4 MiB wraps to a product above 2^43, far past any limit, and fails too (checked for every
 * class and for medium runs of 9-128 pages over offsets of -4..+4 MiB, by brute force). */
TROVE_INLINE bool _trove_sb_is_block(const trove_sb_t *sb, uintptr_t a) {
  uint64_t off = a - sb->start;
  return likely(off * sb->divm < _trove_peek_u64(&sb->limit));
}

/* ---------------------------------------------------------------- size classes (size_class.c) */
extern uint32_t _trove_class_size[TROVE_CLASSES];
extern uint16_t _trove_class_pages[TROVE_CLASSES];     /* run length of a superblock */
extern uint16_t _trove_class_starter[TROVE_CLASSES];   /* the same, crowded (heap.c) */
extern uint8_t  _trove_class_direct[TROVE_DIRECT_SLOTS]; /* (size+15)>>4 -> class */
/* (size-1)>>6 -> class, for 1 KiB < size <= 64 KiB (classes there are 64-byte multiples;
 * aligned-only ones included: _trove_size_class_lookup) */
extern uint8_t  _trove_class_mid[TROVE_SMALL_MAX >> 6];
/* (size+15)>>4 -> the heap's slot for size <= SMALL_MAX: the direct[] slot up to DIRECT_MAX,
 * TROVE_DIRECT_SLOTS + class above (heap.slots[]) */
#define TROVE_SIZE_SLOTS ((TROVE_SMALL_MAX >> 4) + 1)
extern uint8_t  _trove_size_slot[TROVE_SIZE_SLOTS];
_Static_assert(TROVE_DIRECT_SLOTS + TROVE_CLASSES <= 256, "a slot fits a byte");
/* the direct[] slots of a class: lo..hi (lo > hi for the classes above DIRECT_MAX) */
extern uint8_t  _trove_class_slot_lo[TROVE_CLASSES], _trove_class_slot_hi[TROVE_CLASSES];
/* Coarse classes, for threads that crowd the CPUs (heap.c, coarse mode): up to
 * TROVE_COARSE_MAX, the smallest class at or above `c` whose size is 2^k or 3 * 2^k (two per
 * doubling), else `c`; and the first direct[] slot of the classes that map to a coarse one. */
#define TROVE_COARSE_MAX TROVE_SMALL_MAX
extern uint8_t  _trove_class_coarse[TROVE_CLASSES];
extern uint8_t  _trove_class_group_lo[TROVE_CLASSES];
/* Aligned classes: row lg - 4 for an alignment of 2^lg bytes, 16 <= 2^lg <= TROVE_PAGE_SIZE;
 * the smallest class at or above `c` whose size 2^lg divides. Never 0: the largest class,
 * 64 KiB, is a multiple of every such alignment. A block of that class is so aligned, since
 * superblocks start on pages (alloc.c). */
#define TROVE_ALIGN_ROWS (TROVE_PAGE_SHIFT - 4 + 1)
extern uint8_t  _trove_class_aligned[TROVE_ALIGN_ROWS][TROVE_CLASSES];
/* The same folded into malloc's direct[] slots, for the common aligned requests: row lg for
 * an alignment of 2^lg up to 2^TROVE_ALIGN_DIRECT_LG (rows below 4 as row 4), column
 * (size + 15) >> 4 for size <= TROVE_DIRECT_MAX: the slot of the aligned class, 0 where that
 * class is above TROVE_DIRECT_MAX (the general aligned path serves it). One load instead of
 * three table lookups and a slot computation. */
#define TROVE_ALIGN_DIRECT_LG 10
extern uint8_t  _trove_aligned_slot[TROVE_ALIGN_DIRECT_LG + 1][128];
_Static_assert(TROVE_DIRECT_SLOTS <= 128, "a row of _trove_aligned_slot holds every slot");
/* malloc's class of 0 < size <= SMALL_MAX, as its fast path finds it (for the slow paths). */
TROVE_INLINE size_t _trove_size_class_plain(size_t size) {
  size_t slot = _trove_size_slot[(size + 15) >> 4];
  return slot < TROVE_DIRECT_SLOTS ? _trove_class_direct[slot] : slot - TROVE_DIRECT_SLOTS;
}
/* The smallest class of any kind that holds 0 < size <= SMALL_MAX, aligned-only included:
 * the aligned paths' start (_trove_class_aligned). Two loads, no bit scan. */
TROVE_INLINE size_t _trove_size_class_lookup(size_t size) {
  return size <= TROVE_DIRECT_MAX ? _trove_class_direct[(size + 15) >> 4]
                                  : _trove_class_mid[(size - 1) >> 6];
}
/* Classes that serve aligned requests only: no slot of malloc's maps to them; and malloc's
 * classes 64 B above those, whose superblocks start their first block at an offset into the
 * run (superblock.c). Both for cache colour: size_class.c. */
extern uint8_t  _trove_class_aligned_only[TROVE_CLASSES], _trove_class_coloured[TROVE_CLASSES];
void _trove_size_classes_init(void);

/* ---------------------------------------------------------------- thread heaps (heap.c) */

typedef struct trove_class_lists_s {
  trove_sb_t *partial, *full;              /* partial: oldest first (heap.c, partial_append) */
  trove_sb_t *sparse;                      /* sparse ones of this class with a live block */
  uint32_t nsparse;                        /* on `sparse` */
  /* heap.c, sb_grow: its superblocks are class_pages << grow long; fresh ones taken since
   * the last idle scan (up to 16 KiB: since fresh_ms, the heap's clock, truncated) */
  uint8_t grow, churn;
  uint16_t fresh;
  uint32_t fresh_ms;
  /* heap.c, sb_cycle: empty ones that a batch freed whole, taken back since cycled_ms (the
   * heap's clock, truncated) */
  uint16_t cycled;
  uint8_t cgrow;                           /* sb_cycle's: such batches' superblocks are
                                              class_pages << cgrow long */
  uint32_t cycled_ms;
  trove_sb_t *partial_tail;
  uint64_t parked_at;                      /* heap.c, park: when a block was last parked on
                                              the current superblock (ms, a tick's), 0: none
                                              since the last unpark */
} trove_class_lists_t;

typedef struct trove_heap_counters_s {   /* owner-only, summed by stats.c */
  size_t slow_mallocs, remote_frees, released, adopted, sb_fresh, borrowed, parked;
  size_t abandoned, claimed;               /* full superblocks let go; taken up by another heap */
} trove_heap_counters_t;

typedef struct trove_heap_s {
  uint32_t beat;                           /* local frees until the next _trove_heap_beat */
  uint8_t parking;                         /* local frees park (heap.c, "Parking") */
  uint32_t parks;                          /* slow parks since the last scan of the current ones */
  union {
    /* malloc's view: _trove_size_slot[(size + 15) >> 4] indexes this for every small size,
     * direct[] below 1 KiB and cur[] above, with no branch between the two (see
     * _trove_alloc_inline) */
    trove_sb_t *slots[TROVE_DIRECT_SLOTS + TROVE_CLASSES];
    struct {
      trove_sb_t *direct[TROVE_DIRECT_SLOTS];  /* size (<=1 KiB) -> current superblock */
      trove_sb_t *cur[TROVE_CLASSES];          /* class -> current superblock (never NULL) */
    };
  };
  /* blocks freed by other threads, pushed lock-free, taken whole by the owner. A freeing
   * thread spreads its pushes over the lanes in turn, so that the owner walks several chains
   * side by side: each step of a chain is a load that misses (the freeing core wrote the
   * block), and independent chains keep that many misses in flight instead of one.
   * `remote_pending` (same line) is set by a push that finds it clear and cleared by the owner
   * before it takes the lanes, so the owner's check is one load; its second bit says that a
   * medium run may be queued (heap.c, sweep_idle_queues). */
  _Atomic(trove_block_t *) remote[TROVE_REMOTE_LANES] __attribute__((aligned(TROVE_CACHE_LINE)));
  _Atomic(uint32_t) remote_pending;
  trove_class_lists_t lists[TROVE_CLASSES] __attribute__((aligned(TROVE_CACHE_LINE)));
  /* f-empty owned superblocks ("sparse"): those with a live block on their class's list
   * (lists[c].sparse, and a bit per class in sparse_map), the empty ones of every class here,
   * under mcache_lock (another thread's timed work gives back those of an idle heap, heap.c
   * "idle empty superblocks") */
  trove_sb_t *empty;
  /* how many of `empty` there are, of each class, and of each length in pages (the last counts
   * all longer ones): find_superblock_rest walks the list only when it holds one it can use.
   * Written under mcache_lock, read without it as hints (relaxed atomic accesses). */
  uint32_t nempty;
  uint64_t empty_oldest;                    /* none of `empty` emptied before this (ms; a hint) */
  uint16_t nempty_cls[TROVE_CLASSES];
  uint16_t nempty_len[TROVE_SB_PAGES * 4];
  uint64_t sparse_map[(TROVE_CLASSES + 63) / 64];
  uint32_t sparse_pages;                    /* pages of all sparse ones: at most K * TROVE_SB_PAGES */
  _Atomic uint32_t swept_pages;             /* of those, given back by a sweep, not yet subtracted */
  /* medium runs this thread freed, for reuse (heap.c): a list per length, and a bitmap of the
   * lists that are not empty */
  trove_sb_t *mcache[TROVE_MCACHE_BINS];
  uint64_t mcache_map[(TROVE_MCACHE_BINS + 63) / 64];
  uint32_t mcache_pages;
  uint64_t mcache_oldest;                  /* no cached run was freed before this (ms) */
  /* empty superblocks past K kept for the thread's next burst (heap.c, "spare superblocks"),
   * a list per class and a bitmap of the lists that are not empty, under mcache_lock too */
  trove_sb_t *spare[TROVE_CLASSES];
  uint64_t spare_map[(TROVE_CLASSES + 63) / 64];
  uint32_t spare_pages;
  uint32_t spare_streak;                   /* empty ones past K since a superblock was taken */
  uint64_t spare_oldest;                   /* none was put there before this (ms) */
  uint64_t spare_hit_ms;                   /* when it last took one back (ms, a tick's) */
  _Atomic uint8_t mcache_lock;             /* the cache: its owner's, or a sweep's (heap.c) */
  int64_t medium_net;                      /* medium pages it allocated minus those it freed */
  uint64_t mfree_streak;                   /* medium pages freed since its last medium malloc */
  uint64_t mmalloc_streak;                 /* medium pages taken since its last medium free */
  uint64_t mbatch;                         /* mmalloc_streak when its last batch of frees began */
  uint32_t mquick_takes, mquick_frees;     /* medium mallocs / frees left to the quick paths
                                              before one takes the slow path (heap.c) */
  size_t mquick_extra;                     /* pages past the fixed part the quick frees may
                                              cache, till the next medium malloc (heap.c) */
  uint64_t fresh_seen;                     /* _trove_pages_fresh() as of its last look, plus
                                              the fresh runs it took itself since */
  uint64_t fresh_others_ms;                /* when it last saw that other threads took some */
  const trove_sb_t *last_underflow;        /* the last superblock a local free slow-pathed
                                              (heap.c, sb_underflow; compared, not read) */
  uint32_t tick;                           /* slow-path calls, to pace the clock reads */
  uint32_t refills;                        /* quick refills left before a slow malloc */
  uint8_t regrow;                          /* the class whose next superblock replaces one
                                              sb_cycle gave back (heap.c), 0: none */
  bool coarse;                             /* coarse classes (heap.c): threads crowd the CPUs;
                                            * owner-only, apart from the flags others read */
  uint64_t now_ms;                         /* the clock at the last tick (ms) */
  uint64_t cur_scan_ms;                    /* next idle scan of the current superblocks */
  uint64_t sparse_scan_ms;                 /* next scan for empty sparse ones past the delay */
  uint64_t over_since_ms;                  /* past K with live sparse ones since (0: not) */
  trove_heap_counters_t c;
  /* Read by other threads' frees (a medium run's, heap.c): a line the owner seldom writes */
  uint64_t fork_gen __attribute__((aligned(TROVE_CACHE_LINE)));  /* the fork generation it was taken in */
  _Atomic uint64_t remote_taken_ms;        /* when the owner last took its queue (ms, a tick's) */
  _Atomic uint64_t medium_ms;              /* its last medium malloc or free (ms, a tick's) */
  _Atomic uint32_t medium_unfit;           /* heap.c's unfit_calls at that call */
  /* Blocks freed into superblocks it abandoned: part of its queue (the owner takes them with
   * the lanes), apart so that a thread may take them while it is idle (heap.c) */
  _Atomic(trove_block_t *) orphans;
  bool alive;                              /* a thread runs on it (or it is shared), if
                                            * fork_gen is the current one (_trove_heap_live) */
  bool shared;                             /* a heap threads share (heap.c, shared heaps) */
  bool orphan;                             /* a fork caught it expiring: never reused */
  bool expiring;                           /* a sweep is handing its superblocks back */
  uint64_t parked_ms;                      /* exited, superblocks kept for the next thread (0: no) */
  uint32_t parked_pages;                   /* the pages of those superblocks (heap.c, waiting_pages) */
  uint64_t born_ms;                        /* when its thread took it (see _trove_heap_thread_done) */
  uint32_t id;
  trove_arena_ref_t arena;                 /* the page heap arena it takes runs from */
  uint8_t first_borrows[TROVE_CLASSES];    /* heap.c, borrow: with threads crowding the CPUs */
  struct trove_heap_s *next_all;           /* every heap ever made (never unmapped) */
  struct trove_heap_s *next_free;          /* heaps of exited threads, for reuse */
} trove_heap_t;
_Static_assert(offsetof(trove_heap_t, remote_pending) + 4 <=
                   offsetof(trove_heap_t, remote) + TROVE_CACHE_LINE,
               "the remote queue's flags share its lanes' line");

extern trove_heap_t _trove_heap_empty;     /* a thread's heap before its first malloc */
extern trove_sb_t _trove_sb_empty;         /* has no free block: sends malloc to the slow path */
extern __thread trove_heap_t *_trove_tls_heap __attribute__((tls_model("initial-exec")));
/* free's view of the same heap: its address, with bit 0 set while the heap parks on free's
 * fast path (heap.c, "Parking on every free") */
extern __thread trove_heap_t *_trove_tls_free __attribute__((tls_model("initial-exec")));
/* Set around an aligned request's call of malloc's slow path (alloc.c): its class was picked
 * for its alignment, so the slow path must not lend it a block of a larger class (heap.c,
 * borrow); and on failure it leaves errno alone, since alloc.c's aligned paths try again and
 * set it themselves, or (posix_memalign) must not change it. */
extern __thread bool _trove_aligned_call __attribute__((tls_model("initial-exec")));

/* A thread of this process runs on `h` (or it is shared): `alive` set in the parent of a fork
 * and never cleared in the child marks a heap whose thread the child does not have. */
extern uint64_t _trove_fork_gen;
static inline bool _trove_heap_live(const trove_heap_t *h) {
  return h->alive && (h->shared || h->fork_gen == _trove_fork_gen);
}

void *_trove_malloc_generic(size_t size, trove_heap_t *h, trove_sb_t *sb) TROVE_HIDDEN;
void *_trove_malloc_big(size_t size, trove_heap_t *h) TROVE_HIDDEN;   /* above SMALL_MAX */
void _trove_heap_flush_remote(void) TROVE_HIDDEN;   /* the calling thread's batch (heap.c) */
void _trove_free_slow(trove_sb_t *sb, trove_heap_t *h) TROVE_HIDDEN;
size_t _trove_blocks_purged(void) TROVE_HIDDEN;   /* heap.c: idle free blocks purged so far */
void _trove_free_other(trove_block_t *b, trove_sb_t *sb, uintptr_t me) TROVE_HIDDEN;
void _trove_free_unmapped(void *p) TROVE_HIDDEN;
void _trove_heap_thread_done(void *h) TROVE_HIDDEN;
void _trove_heap_collect(trove_heap_t *h, bool force) TROVE_HIDDEN;
bool _trove_heap_release_cache(bool *collected) TROVE_HIDDEN;
void _trove_heaps_fork_child(void) TROVE_HIDDEN;
void _trove_pool_sweep(void) TROVE_HIDDEN;
void _trove_heap_maybe_purge(trove_heap_t *h) TROVE_HIDDEN;
/* trove's lock (every one but the background thread's, which waits on a condition variable):
 * a futex word, 0 free, 1 held, 2 held and a thread may sleep on it. Taking it is one
 * compare-and-swap inline and giving it back one exchange, which wakes a sleeper only if the
 * word said 2. A thread that finds it held sleeps in the kernel at once (_trove_mutex_wait)
 * as with glibc's mutex; the pool and page heap locks spin a while first (_trove_lock). It
 * replaces glibc's mutex, whose trylock and unlock took about 58 instructions a pair (calls
 * through the PLT, checks of the mutex's kind and owner): 5.8% of a medium malloc/free
 * loop's instructions (docs/BENCHMARKS.md, "Fifty-eighth session"). Not recursive; any thread
 * may give it back. The trylock returns 0 when it took the lock, as pthread_mutex_trylock. */
typedef struct {
  _Atomic uint32_t word;
} trove_mutex_t;
#define TROVE_MUTEX_INIT {0}
void _trove_mutex_wait(trove_mutex_t *m) TROVE_HIDDEN;   /* init.c: sleep until it is ours */
void _trove_os_futex_wait(_Atomic uint32_t *word, uint32_t value) TROVE_HIDDEN;   /* os.c */
void _trove_os_futex_wake(_Atomic uint32_t *word) TROVE_HIDDEN;                   /* os.c: one */
TROVE_INLINE int _trove_mutex_trylock(trove_mutex_t *m) {
  uint32_t free_word = 0;
  return atomic_compare_exchange_strong_explicit(&m->word, &free_word, 1, memory_order_acquire,
                                                 memory_order_relaxed) ? 0 : 1;
}
TROVE_INLINE void _trove_mutex_lock(trove_mutex_t *m) {
  if (_trove_mutex_trylock(m) != 0) _trove_mutex_wait(m);
}
TROVE_INLINE void _trove_mutex_unlock(trove_mutex_t *m) {
  if (atomic_exchange_explicit(&m->word, 0, memory_order_release) == 2)
    _trove_os_futex_wake(&m->word);
}
TROVE_INLINE void _trove_mutex_init(trove_mutex_t *m) { atomic_init(&m->word, 0); }

/* The shared pool of one size class (Hoard's global heap): superblocks owned by no heap. One
 * lock per class, each on its own cache line: with one lock for all classes, 16 threads of
 * bench/stability on 16 cores waited 7.4 s in all on it in a 2 s run. And one such pool per
 * shard (heap.c, pool_shard_of): a superblock goes to the shard of its segment's page heap
 * arena, and a heap looks in its own arena's shard first, then in the others. */
typedef struct trove_pool_s {
  trove_mutex_t lock;
  trove_sb_t *avail;           /* superblocks that may have a free block */
  trove_sb_t *full;            /* found without one by an adoption; out of the way until swept */
  uint32_t sweeps;
  uint32_t empties;            /* on `avail` with pool_empty set */
} __attribute__((aligned(TROVE_CACHE_LINE))) trove_pool_t;

/* A slow-path lock that counts the times it was found taken (trove_stats_t's lock_waits_*):
 * the first thing to look at when a program scales badly. */
enum { TROVE_LOCK_POOL, TROVE_LOCK_PAGES };

#define TROVE_ARENAS_MAX 64
/* Pool shards: one per arena, up to this many (fork holds every lock of those in use). */
#define TROVE_POOL_SHARDS_MAX 16
/* The locks fork() holds (init.c), side by side: the first shard's pool locks and 26 arenas'
 * fit two pages with the rest, and each other shard in use (a heap of its arena exists) adds
 * 5 KiB; the pages of shards no heap uses are not written.
 * After a fork the parent unlocks each and the child makes each anew, and either one's first
 * write to a page they share takes a copy-on-write fault: spread over five pages of .bss
 * (the pool's, the heap list's, the large objects', the segment cache's, the reservation's),
 * a fork of a small single-threaded process cost 14 faults more than with glibc (32 against
 * 18; 97 us against 60 a fork and wait). */
typedef struct {
  trove_mutex_t heaps __attribute__((aligned(TROVE_CACHE_LINE)));   /* _trove_heaps_all */
  trove_mutex_t large __attribute__((aligned(TROVE_CACHE_LINE)));   /* large.c */
  trove_mutex_t segment_cache __attribute__((aligned(TROVE_CACHE_LINE))); /* page_heap.c */
  trove_mutex_t segment __attribute__((aligned(TROVE_CACHE_LINE)));      /* segment.c */
  trove_mutex_t serial __attribute__((aligned(TROVE_CACHE_LINE)));   /* heap.c, thread exit */
  /* heap.c's pools, one lock per class and shard, each on its own line: shard 0, then (after
   * the arenas' locks, so that a process with a few threads and CPUs writes two pages) the
   * others, up to _trove_pool_shards; see _trove_pool_at */
  trove_pool_t pool0[TROVE_CLASSES];
  /* page_heap.c's arenas', in use up to its `narenas` (26 fit the second page) */
  struct { trove_mutex_t m; } __attribute__((aligned(TROVE_CACHE_LINE))) arena[TROVE_ARENAS_MAX];
  trove_pool_t pool_more[TROVE_POOL_SHARDS_MAX - 1][TROVE_CLASSES];
} trove_locks_t;
extern uint32_t _trove_pool_shards;
/* Shards a heap's arena maps to (set under the heaps lock, so fork, which holds it, sees
 * them all); shard 0 always. A superblock's shard is its segment's arena's, and only an
 * arena that served a heap (or arena 0) has segments. */
extern _Atomic uint8_t _trove_pool_shard_used[TROVE_POOL_SHARDS_MAX];
extern trove_locks_t _trove_locks;
/* A fork's child makes the locks its parent held anew by assignment: no call into libc, whose
 * code pages the child would fault in first. */
static inline void _trove_lock_reset(trove_mutex_t *m) {
  atomic_store_explicit(&m->word, 0, memory_order_relaxed);
}
extern _Atomic size_t _trove_lock_waits[2];
TROVE_INLINE trove_pool_t *_trove_pool_at(size_t shard, size_t cls) {
  return shard ? &_trove_locks.pool_more[shard - 1][cls] : &_trove_locks.pool0[cls];
}
TROVE_INLINE bool _trove_pool_shard_in_use(size_t shard) {
  return atomic_load_explicit(&_trove_pool_shard_used[shard], memory_order_relaxed) != 0;
}
void _trove_lock_wait(trove_mutex_t *m) TROVE_HIDDEN;   /* init.c: spin a while, then sleep */
static inline void _trove_lock(trove_mutex_t *m, int which) {
  if (_trove_mutex_trylock(m) == 0) return;
  atomic_fetch_add_explicit(&_trove_lock_waits[which], 1, memory_order_relaxed);
  _trove_lock_wait(m);
}
extern trove_heap_t *_trove_heaps_all;

/* ---------------------------------------------------------------- segments and page heap */
/* Arena lock held: a segment for the arena whose segment list is `list` and which holds
 * `nsegs` segments. `dense`: for a dense superblock; `probe`: the residency probe that decides
 * for a sparse one (NULL: none, or this segment is one). See segment.c, huge pages. */
trove_segment_t *_trove_segment_new(trove_segment_t **list, size_t nsegs, bool dense,
                                    trove_segment_t *probe) TROVE_HIDDEN;
void _trove_segment_no_huge(trove_segment_t *seg) TROVE_HIDDEN;   /* huge pages off, if on */
size_t _trove_segment_huge_pauses(void) TROVE_HIDDEN;   /* slow huge-page faults seen (stats) */
/* Or-ed into _trove_pages_alloc's kind: a superblock of a class up to TROVE_DENSE_MAX, whose
 * carve writes every page it reaches (superblock.c writes each block's head) */
#define TROVE_PAGES_DENSE 0x100
#define TROVE_DENSE_MAX 4096
void _trove_segment_unreserve(void) TROVE_HIDDEN;  /* out of memory: unmap what is mapped ahead */
void _trove_segment_free(trove_segment_t *seg) TROVE_HIDDEN;     /* off every list; no lock */
/* Give a free run's pages back to the OS (page_heap.c's purges); see segment.c, huge pages. */
void _trove_segment_purge(trove_segment_t *seg, void *p, size_t size) TROVE_HIDDEN;
void _trove_pages_init(void) TROVE_HIDDEN;
size_t _trove_pages_narenas(void) TROVE_HIDDEN;
/* Runs handed out fresh (page_heap.c), read inline by the medium quick free */
extern _Atomic uint64_t _trove_fresh_runs;
TROVE_INLINE uint64_t _trove_pages_fresh(void) {
  return atomic_load_explicit(&_trove_fresh_runs, memory_order_relaxed);
}
void _trove_pool_init(void) TROVE_HIDDEN;
size_t _trove_pages_used(void) TROVE_HIDDEN;   /* pages in runs handed out (relaxed: a hint) */
size_t _trove_pages_dirty(void) TROVE_HIDDEN;  /* free dirty pages (relaxed: a hint) */
size_t _trove_large_cached_resident(void) TROVE_HIDDEN;   /* a hint, without the lock */
void _trove_pages_arena_init(trove_arena_ref_t *ref, uint32_t heap_id) TROVE_HIDDEN;
/* A run from the heap's arena (`ref` NULL: arena 0) */
trove_sb_t *_trove_pages_alloc(trove_arena_ref_t *ref, size_t npages, size_t align_pages,
                              int kind) TROVE_HIDDEN;
void _trove_pages_free(trove_sb_t *run) TROVE_HIDDEN;         /* to the arena of its segment */
void _trove_pages_free_at(trove_sb_t *run, uint64_t at) TROVE_HIDDEN;   /* free since `at` (ms) */
/* the same, for a caller that has just read the clock (`clock`, _trove_os_now_ms) */
void _trove_pages_free_clock(trove_sb_t *run, uint64_t at, uint64_t clock) TROVE_HIDDEN;
bool _trove_pages_may_keep(size_t held_pages, size_t npages) TROVE_HIDDEN;
void _trove_sb_recarve(trove_sb_t *sb) TROVE_HIDDEN;         /* an empty one: carve it again */
bool _trove_pages_grow(trove_sb_t *run, size_t npages) TROVE_HIDDEN;  /* in place */
void _trove_pages_shrink(trove_sb_t *run, size_t npages) TROVE_HIDDEN; /* in place */
void _trove_pages_purge(bool all) TROVE_HIDDEN;
void _trove_pages_yield(size_t bytes) TROVE_HIDDEN;
void _trove_heap_yield(size_t bytes) TROVE_HIDDEN;
void _trove_pages_lock_all(void) TROVE_HIDDEN;
void _trove_pages_unlock_all(void) TROVE_HIDDEN;
void _trove_pages_fork_child(void) TROVE_HIDDEN;
trove_segment_t *_trove_pages_next_segment(trove_segment_t *seg) TROVE_HIDDEN;
void _trove_pages_totals(size_t *free_bytes, size_t *dirty_bytes) TROVE_HIDDEN;
size_t _trove_pages_arenas(size_t *in_use) TROVE_HIDDEN;        /* how many; with segments */

/* superblock.c */
void _trove_sb_init(trove_sb_t *sb, size_t cls) TROVE_HIDDEN;
bool _trove_sb_extend(trove_sb_t *sb) TROVE_HIDDEN;
void *_trove_sb_carve_one(trove_sb_t *sb) TROVE_HIDDEN;   /* extend, then pop the first */
uint32_t _trove_sb_collect(trove_sb_t *sb) TROVE_HIDDEN;   /* thread_free -> local_free */
void _trove_sb_set_run(trove_sb_t *run, size_t bsize, size_t carved) TROVE_HIDDEN;

/* ---------------------------------------------------------------- large objects (large.c) */
typedef struct trove_large_s {
  uint64_t magic;
  size_t map_size;         /* the part in use, counted as held (pages past it are zero) */
  size_t reserve;          /* the whole mapping: map_size and address space after it */
  size_t usable;           /* bytes from the user pointer to the end of the mapping */
  size_t requested;
  uintptr_t base;          /* mapping start */
  uintptr_t user;          /* the pointer handed out */
  uint64_t freed_at;       /* in the cache: when it was freed (ms) */
  size_t resident;         /* in the cache: bytes that may be resident (0 once purged) */
  struct trove_large_s *next, *prev;
} trove_large_t;
#define TROVE_LARGE_MAGIC 0x656772616cull
void *_trove_large_alloc(size_t size, size_t align, bool zero) TROVE_HIDDEN;
trove_large_t *_trove_large_header(uintptr_t a) TROVE_HIDDEN;    /* NULL if not large */
void _trove_large_free(trove_large_t *l) TROVE_HIDDEN;
void *_trove_large_realloc(trove_large_t *l, size_t size) TROVE_HIDDEN;
void _trove_large_purge(bool all) TROVE_HIDDEN;
void _trove_large_trim(void) TROVE_HIDDEN;   /* fresh memory ahead: the cache's excess goes */

/* ---------------------------------------------------------------- OS layer (os.c) */
void *_trove_os_map(size_t size) TROVE_HIDDEN;                   /* NULL on failure */
void *_trove_os_map_aligned(size_t size, size_t align) TROVE_HIDDEN;
void _trove_os_unmap(void *p, size_t size) TROVE_HIDDEN;
/* Address space mapped ahead (segment.c's reservation): not counted as held from the OS
 * until _trove_os_count_mapped says a part of it is in use; _trove_os_unmap gives that part
 * back, _trove_os_unreserve the rest. */
void *_trove_os_reserve_aligned(size_t size, size_t align) TROVE_HIDDEN;
void _trove_os_unreserve(void *p, size_t size) TROVE_HIDDEN;
void _trove_os_count_mapped(ptrdiff_t delta) TROVE_HIDDEN;
/* unmap `size` bytes, `counted` of them held: a purge of `resident` */
void _trove_os_release(void *p, size_t size, size_t counted, size_t resident) TROVE_HIDDEN;
void _trove_os_hugepage(void *p, size_t size, bool on) TROVE_HIDDEN;
bool _trove_os_purge(void *p, size_t size) TROVE_HIDDEN;         /* drop contents (then 0) */
void _trove_os_touch(void *p, size_t size) TROVE_HIDDEN;         /* write-fault zero pages */
bool _trove_os_mostly_resident(void *p, size_t size) TROVE_HIDDEN; /* 7/8 of its pages */
bool _trove_os_uncharge_zeros(void *p, size_t size) TROVE_HIDDEN; /* zero pages, uncharged */
void *_trove_os_remap(void *old, size_t old_size, size_t new_size, void *target) TROVE_HIDDEN;
bool _trove_os_grow_in_place(void *p, size_t old_size, size_t new_size) TROVE_HIDDEN;
uint64_t _trove_os_now_ms(void) TROVE_HIDDEN;
uint64_t _trove_os_now_ns(void) TROVE_HIDDEN;                   /* CLOCK_MONOTONIC, fine */
void _trove_os_cond_init(pthread_cond_t *c) TROVE_HIDDEN;
bool _trove_os_wait_ms(pthread_cond_t *c, pthread_mutex_t *m, const bool *stop,
                       uint64_t ms) TROVE_HIDDEN;
uint64_t _trove_os_random(void) TROVE_HIDDEN;
size_t _trove_os_rss(void) TROVE_HIDDEN;                         /* bytes, 0 if unknown */
void _trove_os_write_stderr(const char *s, size_t n) TROVE_HIDDEN;
const char *_trove_os_getenv(const char *name) TROVE_HIDDEN;     /* no allocation */
const char *_trove_os_env_next(size_t *cursor) TROVE_HIDDEN;
int _trove_os_open_write(const char *path) TROVE_HIDDEN;
void _trove_os_write_fd(int fd, const char *s, size_t n) TROVE_HIDDEN;
void _trove_os_close(int fd) TROVE_HIDDEN;
void _trove_os_set_enomem(void) TROVE_HIDDEN;
size_t _trove_os_page_size(void) TROVE_HIDDEN;
size_t _trove_os_ncpus(void) TROVE_HIDDEN;                       /* CPUs we may run on, >= 1 */
int _trove_os_cpu(void) TROVE_HIDDEN;                            /* now; -1 if unknown */
/* bytes mapped and purged, for stats (relaxed atomics, slow paths only) */
extern _Atomic size_t _trove_os_mapped, _trove_os_purged_now, _trove_os_peak_mapped;
extern _Atomic size_t _trove_os_purge_calls, _trove_os_purged_total;

/* ---------------------------------------------------------------- options (options.c) */
typedef enum {
  TROVE_OPT_PURGE_DELAY_MS, TROVE_OPT_BLOWUP_K, TROVE_OPT_BLOWUP_F_PCT, TROVE_OPT_SHOW_STATS,
  TROVE_OPT_VERBOSE, TROVE_OPT_ON_MISUSE, TROVE_OPT_DIRTY_MAX_MB, TROVE_OPT_LARGE_CACHE_MB,
  TROVE_OPT_ARENAS, TROVE_OPT_SHARED_THREADS, TROVE_OPT_THP, TROVE_OPT_THP_SLOW_US,
  TROVE_OPT_BACKGROUND, TROVE_OPT_COLOUR, TROVE_OPT_COUNT
} trove_option_t;
enum { TROVE_MISUSE_ABORT = 0, TROVE_MISUSE_WARN = 1 };
extern long _trove_options[TROVE_OPT_COUNT];
extern bool _trove_options_set[TROVE_OPT_COUNT];       /* given in the environment */
extern char _trove_heap_map_path[256];
#define TROVE_OPT(o) (_trove_options[TROVE_OPT_##o])
void _trove_options_init(void) TROVE_HIDDEN;
void _trove_message(const char *fmt, ...) TROVE_HIDDEN __attribute__((format(printf, 1, 2)));
void _trove_misuse(const char *what, const void *p, const char *detail) TROVE_HIDDEN;
int _trove_snprintf(char *buf, size_t n, const char *fmt, ...) TROVE_HIDDEN
    __attribute__((format(printf, 3, 4)));

/* ---------------------------------------------------------------- init (init.c) */
extern bool _trove_initialized;
void _trove_init(void) TROVE_HIDDEN;

/* ---------------------------------------------------------------- the fast paths */
/* malloc: pop the current superblock's free list. Everything else is `slow` (the first call
 * of a thread, an empty list: _trove_malloc_generic) or `big` (medium and large sizes:
 * _trove_malloc_big), or for operator new functions that also handle running out of memory:
 * constants, so the calls to them are direct tail calls and the fast path saves no register
 * (the size first: it arrives in that register). `slow` gets the superblock whose list ran
 * out (refilled from the owner's frees without another lookup), or the empty one.
 * Every small size finds its superblock through one table, _trove_size_slot, with no branch
 * on the size below 64 KiB. A test `size <= 1 KiB` (direct[] below, a class table above) is
 * two instructions less, but a program whose sizes straddle 1 KiB at random mispredicts it
 * on a third to a half of its mallocs: glibc's bench-malloc-thread shape (1/size from 4 B to
 * 32 KiB) took 1.90M mispredictions per 2M pairs, 1.21M of them in malloc (cachegrind); the
 * table took such programs 3-11% faster (docs/BENCHMARKS.md, thirty-first session), for
 * two instructions more (ping-pong 50.6 -> 52.7 a pair) and up to 5% on programs of small
 * blocks only (threadtest's 8 B blocks back to back). */
typedef void *(*trove_slow_alloc_t)(size_t size, trove_heap_t *h, trove_sb_t *sb);
typedef void *(*trove_big_alloc_t)(size_t size, trove_heap_t *h);
/* Pop `b`, sb's first free block: malloc's fast path (and the aligned one's). */
TROVE_INLINE void *_trove_sb_pop(trove_sb_t *sb, trove_block_t *b) {
  sb->free = b->next;
  sb->slack++;
  b->tag = 0;
  return b;
}
TROVE_INLINE void *_trove_alloc_inline(size_t size, trove_slow_alloc_t slow,
                                       trove_big_alloc_t big) {
  trove_heap_t *h = _trove_tls_heap;
  trove_sb_t *sb;
  if (likely(size <= TROVE_SMALL_MAX)) sb = h->slots[_trove_size_slot[(size + 15) >> 4]];
  else return big(size, h);
  trove_block_t *b = sb->free;
  if (unlikely(b == NULL)) return slow(size, h, sb);
  return _trove_sb_pop(sb, b);
}
TROVE_INLINE void *_trove_malloc_inline(size_t size) {
  return _trove_alloc_inline(size, _trove_malloc_generic, _trove_malloc_big);
}

/* An aligned request (a power of two `align`) served as malloc is: the class of `size`, moved
 * up to the first class whose size `align` divides, popped from its current superblock. This
 * finds that superblock (the empty one if the thread has none) and a key to the class for
 * the slow path, *key (_trove_aligned_key_size gives its size); NULL when this path does not
 * serve the request (larger than a small block or a page's alignment), which alloc.c's slow
 * path then takes. Through the general path, posix_memalign(64, 48-248 B) took 100
 * instructions against malloc's 15; with three lookups here, 46; with _trove_aligned_slot,
 * 32 (35 for posix_memalign: its checks). The key is what each branch has at hand, the
 * direct[] slot or 256 + the class, so that the fast path computes no class size it does
 * not use (the size itself, set on both branches, cost the pop an instruction). */
TROVE_INLINE trove_sb_t *_trove_aligned_sb(size_t align, size_t size, size_t *key) {
  trove_heap_t *h = _trove_tls_heap;
  size_t lg = (size_t)__builtin_ctzl(align);
  if (likely(size <= TROVE_DIRECT_MAX && lg <= TROVE_ALIGN_DIRECT_LG)) {
    size_t slot = _trove_aligned_slot[lg][(size + 15) >> 4];
    if (unlikely(slot == 0)) return NULL;
    *key = slot;
    trove_sb_t *sb = h->direct[slot];
    if (sb == NULL) __builtin_unreachable();       /* never: so the caller's NULL test folds */
    return sb;
  }
  if (unlikely(size > TROVE_SMALL_MAX || lg > TROVE_PAGE_SHIFT)) return NULL;
  if (lg < 4) lg = 4;                              /* every block is 16-byte aligned */
  size_t cls = _trove_class_aligned[lg - 4][_trove_size_class_lookup(size)];
  *key = 256 + cls;
  /* Here the class is above TROVE_DIRECT_MAX (the size is, or the alignment is above
   * 2^TROVE_ALIGN_DIRECT_LG), so its superblock is in cur[], never in direct[]. */
  trove_sb_t *sb = h->cur[cls];
  if (sb == NULL) __builtin_unreachable();
  return sb;
}
/* The class size of _trove_aligned_sb's key: slots are 16ths of it. */
TROVE_INLINE size_t _trove_aligned_key_size(size_t key) {
  return key < 256 ? key << 4 : _trove_class_size[key - 256];
}
_Static_assert(TROVE_CLASSES <= 256 && TROVE_DIRECT_SLOTS <= 256, "aligned keys are distinct");
_Static_assert(((size_t)2 << TROVE_ALIGN_DIRECT_LG) > TROVE_DIRECT_MAX,
               "an alignment past the direct[] rows makes a class above TROVE_DIRECT_MAX");

void _trove_free_bad(void *p, trove_sb_t *sb) TROVE_HIDDEN;
bool _trove_pages_in_free_run(const trove_sb_t *sb, uintptr_t a) TROVE_HIDDEN;   /* its report */
/* The trove_ functions under names the standard ones reach without the PLT (alloc.c) */
void *_trove_malloc(size_t size) TROVE_HIDDEN;
void _trove_free(void *p) TROVE_HIDDEN;
void *_trove_calloc(size_t count, size_t size) TROVE_HIDDEN;
void *_trove_realloc(void *p, size_t size) TROVE_HIDDEN;
void *_trove_reallocarray(void *p, size_t count, size_t size) TROVE_HIDDEN;
int _trove_posix_memalign(void **out, size_t align, size_t size) TROVE_HIDDEN;
void *_trove_aligned_alloc(size_t align, size_t size) TROVE_HIDDEN;
void *_trove_memalign(size_t align, size_t size) TROVE_HIDDEN;
void *_trove_valloc(size_t size) TROVE_HIDDEN;
void *_trove_pvalloc(size_t size) TROVE_HIDDEN;

/* malloc_usable_size: the block's size, as free validates it (a bad pointer is reported, and
 * gives 0, as a free block does in glibc). A small or medium block here, the rest in alloc.c.
 * Programs that track their memory (Redis's zmalloc) call it on every malloc and free. */
size_t _trove_usable_size_slow(const void *p) TROVE_HIDDEN;
TROVE_INLINE size_t _trove_usable_size_inline(const void *p) {
  uintptr_t a = (uintptr_t)p;
  if (likely(_trove_segmap_kind(a) == TROVE_MAP_SEGMENT)) {
    const trove_sb_t *sb = _trove_sb_of(_trove_segment_of(a), a);
    if (likely(_trove_sb_is_block(sb, a) && ((const trove_block_t *)p)->tag != _trove_tag(p)))
      return sb->bsize;
  }
  return _trove_usable_size_slow(p);
}

/* The second half of free, for a block already validated (ours, a block start, not free): tag
 * it as free, then push it on its superblock's free list, where the owner's next malloc of
 * the class takes it first while it is still in cache; a block of another heap's superblock
 * (or a medium run) takes _trove_free_other. realloc calls it directly after a move.
 * Since a thread that mallocs and frees in turn may then never run out of free blocks, every
 * TROVE_BEAT-th local free runs what its slow paths would (_trove_heap_beat). The period is
 * also how late such a thread gives a freed burst back once its calls slow down: 4,096 frees
 * were 4 s at 1,000 a second (docs/DESIGN.md, "The fast paths"). */
#define TROVE_BEAT 512
void _trove_heap_beat(trove_heap_t *h, trove_sb_t *sb) TROVE_HIDDEN;
void _trove_background_poke(void) TROVE_HIDDEN;   /* heap.c: TROVE_BACKGROUND=2, no lock held */
void _trove_background_hold(void) TROVE_HIDDEN;      /* stats.c: no background pass meanwhile */
void _trove_background_release(void) TROVE_HIDDEN;
void _trove_background_fork_prepare(void) TROVE_HIDDEN;   /* init.c: stop and join it */
TROVE_INLINE void _trove_free_valid(trove_block_t *b, trove_sb_t *sb) {
  b->tag = _trove_tag(b);
  /* the heap, with bit 0 set while it parks: then no superblock's owner matches, and its
   * local frees too take _trove_free_other (heap.c, "Parking on every free") */
  trove_heap_t *h = _trove_tls_free;
  if (likely(_trove_sb_owner(sb) == h)) {
    b->next = sb->free;
    sb->free = b;
    if (unlikely(--sb->slack < 0)) _trove_free_slow(sb, h);
    else if (unlikely(--h->beat == 0)) _trove_heap_beat(h, sb);
    return;
  }
  _trove_free_other(b, sb, (uintptr_t)h);
}

/* free: validate (ours, a block start, not already free), then _trove_free_valid. */
TROVE_INLINE void _trove_free_inline(void *p) {
  uintptr_t a = (uintptr_t)p;
  uintptr_t i = a >> TROVE_SEGMENT_SHIFT;
  if (unlikely(_trove_segmap_kind_at(i) != TROVE_MAP_SEGMENT)) {
    _trove_free_unmapped(p);                 /* NULL, large objects, foreign pointers */
    return;
  }
  /* The segment from the map's index, shifted back in place (one instruction): left to
   * itself, GCC sees that this is `a` masked and derives it from `a` again, with a copy and
   * a mask (free's instructions 36 -> 35: fastpath ping-pong and workset, callgrind). */
  __asm__("" : "+r"(i));
  trove_sb_t *sb = _trove_sb_of((trove_segment_t *)(i << TROVE_SEGMENT_SHIFT), a);
  trove_block_t *b = (trove_block_t *)p;
  uintptr_t tag = _trove_tag(p);
  if (unlikely(!_trove_sb_is_block(sb, a) || b->tag == tag)) {
    _trove_free_bad(p, sb);
    return;
  }
  _trove_free_valid(b, sb);
}

#pragma GCC visibility pop

#endif
