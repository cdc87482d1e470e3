/* Thread heaps, the shared pool, and the blowup rule.
 *
 * Ownership: every small superblock is owned by at most one heap (its `heap` field) and only
 * that heap's thread allocates from it, so two threads never carve blocks from the same cache
 * lines (no allocator-induced false sharing, Hoard 2.1). A superblock in the shared pool is
 * owned by none; the pool lock guards it there.
 *
 * Remote frees: a thread freeing a block of a superblock it does not own pushes the block onto
 * the owner heap's `remote` queue (one CAS, lock-free); the owner takes the whole queue with one
 * exchange per lane on its slow path and frees each block locally (LLAlloc's idea). A block of
 * a pool superblock goes onto that superblock's thread_free instead. A block in flight still counts
 * in its superblock's `used`, so the superblock cannot be freed under it; a block that reaches
 * a heap that no longer owns its superblock is forwarded.
 *
 * Blowup (Hoard 3.1): a superblock whose live blocks drop below (1-f) of its capacity is
 * "sparse" (empty ones included). A heap keeps sparse superblocks of K * 64 KiB at most; past
 * that it moves its emptiest one to the pool, where any thread adopts it for the same size
 * class, or, if it is empty, to the page heap for any size class (those with live blocks
 * after 1/32 of the purge delay past K: release_over_k; empty ones in a streak of frees may
 * first wait a while as spares, see "spare superblocks"). Every other superblock of a
 * heap is either current (one per class in use, C) or at least (1-f) full, so
 *     A <= U/(1-f) + P * (K * 64 KiB + C * S)
 * independent of the run's length. docs/DESIGN.md derives it. */
#include "internal.h"
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <string.h>

trove_sb_t _trove_sb_empty;
trove_heap_t _trove_heap_empty = {
    .slots = {[0 ... TROVE_DIRECT_SLOTS + TROVE_CLASSES - 1] = &_trove_sb_empty},
};
__thread trove_heap_t *_trove_tls_heap __attribute__((tls_model("initial-exec"))) =
    &_trove_heap_empty;
__thread trove_heap_t *_trove_tls_free __attribute__((tls_model("initial-exec"))) =
    &_trove_heap_empty;
__thread bool _trove_aligned_call __attribute__((tls_model("initial-exec")));

trove_heap_t *_trove_heaps_all;
static trove_heap_t *heaps_free;
/* Heaps a running thread owns (changed under _trove_locks.heaps, read anywhere as a hint). */
static _Atomic uint32_t heaps_alive;
static uint8_t *heap_chunk;
static size_t heap_chunk_left;
static uint32_t heap_next_id;
static _Atomic uint64_t next_purge_ms;
static __thread uint32_t remote_ticks __attribute__((tls_model("initial-exec")));
static __thread uint32_t remote_lane __attribute__((tls_model("initial-exec")));
static __thread bool freed_into_pool __attribute__((tls_model("initial-exec")));
extern pthread_key_t _trove_thread_key;
void _trove_fork_register(void) TROVE_HIDDEN;

static void route_block(trove_sb_t *sb, trove_block_t *b);
static void shared_tend(bool all);
static void shared_fork_child(void);
static trove_heap_t *heap_new_locked(void);
static void push_block(_Atomic(trove_block_t *) *list, trove_block_t *b);
static void drain_remote(trove_heap_t *h);
static inline void batch_queue(void);
static bool remote_pending(trove_heap_t *h);
static void remote_take(trove_heap_t *h, trove_block_t **lanes, unsigned *n);
static trove_block_t *queue_take_all(trove_heap_t *h);
static void push_remote(trove_heap_t *owner, trove_block_t *b, uint32_t flags);
/* remote_pending's bits (see push_chain) */
#define REMOTE_PENDING 1u                 /* the owner has blocks queued */
#define REMOTE_MEDIUM 2u                  /* and a medium run among them, perhaps */
static bool spare_put(trove_heap_t *h, trove_sb_t *sb);
static void parking_set(trove_heap_t *h, bool on);

/* `parked_ms` is read without the heaps lock by a free that looks for a heap to inherit. */
static uint64_t parked_since(const trove_heap_t *h) {
  return __atomic_load_n(&h->parked_ms, __ATOMIC_RELAXED);
}
static void set_parked(trove_heap_t *h, uint64_t ms) {
  __atomic_store_n(&h->parked_ms, ms, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------ intrusive lists */
/* The lists below are short: a class that churns has one to three superblocks on each, so
 * whether a neighbour exists is a coin toss for the branch predictor. In random replacement
 * of 16 B-16 KiB blocks (2-8 per superblock, a state change every other free) the branches
 * of these five functions made 270k of the 761k mispredictions in 400k malloc/free pairs
 * (cachegrind --branch-sim). So each picks the pointer to write with a conditional move and
 * writes unconditionally, to a scratch slot when there is no neighbour. The empty asm hides
 * which slot from the compiler, which would otherwise see the scratch store as dead and
 * bring the branch back. */
static inline void store_sb(bool cond, trove_sb_t **yes, trove_sb_t **no, trove_sb_t *v) {
  trove_sb_t **at = cond ? yes : no;
  __asm__("" : "+r"(at));
  *at = v;
}
/* `&n->field` for a node that may be NULL, without forming a member access through NULL */
#define SB_FIELD(n, field) ((trove_sb_t **)((uintptr_t)(n) + offsetof(trove_sb_t, field)))

static void list_push(trove_sb_t **head, trove_sb_t *sb) {
  trove_sb_t *first = *head, *scratch;
  sb->prev = NULL;
  sb->next = first;
  store_sb(first != NULL, SB_FIELD(first, prev), &scratch, sb);
  *head = sb;
}
static void list_remove(trove_sb_t **head, trove_sb_t *sb) {
  trove_sb_t *prev = sb->prev, *next = sb->next, *scratch;
  store_sb(prev != NULL, SB_FIELD(prev, next), head, next);
  store_sb(next != NULL, SB_FIELD(next, prev), &scratch, prev);
  sb->next = sb->prev = NULL;
}

/* The partial list is a queue: a superblock joins at the tail when it has 1/8 free again and
 * malloc takes the head, the one that has waited longest. Frees keep landing in a superblock
 * while it waits, so the oldest has the most free blocks, and a malloc that takes it up runs
 * longer before it needs another. Taking the newest (a stack) yielded little more than the
 * 1/8: fastpath-workset, one in eight of whose blocks are 1 KiB (some 40 superblocks of 32
 * blocks, nearly full), changed superblocks 19.8k times in 810k mallocs, 17.3k with the
 * queue (0.9 instructions per malloc/free pair). Hoard takes the fullest first, to let the
 * others drain; here peak RSS moved both ways: larson, shbench, mtmalloctest and threadtest
 * by under 1%, sizesweep, reallocgrow and xmalloc by -11% to +6% depending on the run's
 * length (sizesweep at 1 thread: 35.2 -> 34.3 MiB at --scale 0.7, 35.3 -> 37.4 at full
 * length). */
static void partial_append(trove_class_lists_t *l, trove_sb_t *sb) {
  trove_sb_t *tail = l->partial_tail;
  sb->next = NULL;
  sb->prev = tail;
  store_sb(tail != NULL, SB_FIELD(tail, next), &l->partial, sb);
  l->partial_tail = sb;
}
static void partial_unlink(trove_class_lists_t *l, trove_sb_t *sb) {
  trove_sb_t *prev = sb->prev, *next = sb->next;
  store_sb(prev != NULL, SB_FIELD(prev, next), &l->partial, next);
  store_sb(next != NULL, SB_FIELD(next, prev), &l->partial_tail, prev);
  sb->next = sb->prev = NULL;
}

static int32_t sparse_threshold(const trove_sb_t *sb) { return sb->sparse_at; }

/* An exhausted superblock waits on the full list until 1/8 of it is free again (8 blocks if
 * it has 32-63, any free if it has fewer than 8), then it becomes partial and can be current
 * again. Waiting for 1/8 rather than for the first free block means that taking it up again
 * yields at least that many blocks: in a random-replacement working set this cut the slow
 * mallocs to a third (fastpath-workset: 53.5k -> 18.4k per 400k pairs) for 3% more RSS, and
 * the blocks it holds back stay within the blowup bound (a full superblock is still 3/4 used,
 * above 1-f). The floor of 8 for the 512 B-1 KiB classes (32 KiB, 32-63 blocks) took the
 * working set from 67.6 to 63.7 instructions per pair for 2.5% more RSS there (larson-large
 * +1.6%); raising it for superblocks of 4-16 blocks as well cost stability 11% more RSS. */
static int32_t full_trigger(const trove_sb_t *sb) {
  uint32_t cap = sb->capacity, want = cap >> 3;
  if (cap >= 32 && want < 8) want = 8;
  return (int32_t)(cap + 1 - want);
}

/* Full superblocks are abandoned. A heap that fills a superblock lets it go, to no list
 * (its owner becomes TROVE_ABANDONED): every block is live, so a free of one of them will
 * find it, and the thread that adopts it (a compare-and-swap of its owner) is the freeing
 * one if it allocates blocks of that class, else the heap that let it go at its next slow
 * path, or, while that heap is idle, a thread about to take fresh pages (free_to_abandoner,
 * steal_abandoned). So a thread that allocates blocks for other threads to free
 * and then waits (Hoard's round robin; a worker that hands its results on and blocks for
 * its next request) no longer keeps the memory freed meanwhile out of every other thread's
 * reach until it wakes. A heap that takes one back keeps it when it fills again (`kept`),
 * so a thread that allocates all the time makes that trip once per superblock. Only with a
 * second thread alive (a thread alone would only take them back), for superblocks of 32
 * blocks or more (the classes up to 1 KiB: with 8, threads handing 8 B - 4 KiB blocks to
 * each other, bench/xmalloc, ran 10-14% slower), and not in shared heaps. An abandoned
 * superblock holds only live blocks and blocks queued for a heap, which count as live, so
 * Hoard's bound holds as before. `abandoned_out` counts them (a hint: the walk for idle
 * queues is skipped while it is 0). */
static _Atomic size_t abandoned_out;

static void abandon_full(trove_heap_t *h, trove_sb_t *sb) {
  sb->state = TROVE_SB_ABANDONED;
  __atomic_store_n(&sb->released_by, (uintptr_t)h, __ATOMIC_RELAXED);
  h->c.abandoned++;
  atomic_fetch_add_explicit(&abandoned_out, 1, memory_order_relaxed);
  atomic_store_explicit(&sb->heap, TROVE_ABANDONED, memory_order_release);
}

/* An exhausted current superblock goes on its class's full list until 1/8 of it is free. */
TROVE_INLINE void retire_full(trove_heap_t *h, size_t cls, trove_sb_t *sb) {
  if (!sb->kept && sb->capacity >= 32 && !h->shared &&
      atomic_load_explicit(&heaps_alive, memory_order_relaxed) >= 2) {
    abandon_full(h, sb);
    return;
  }
  sb->state = TROVE_SB_FULL;
  _trove_sb_set_trigger(sb, full_trigger(sb));
  list_push(&h->lists[cls].full, sb);
}

/* ------------------------------------------------------------------ current superblocks */
/* Coarse mode. With more than 8 live threads per CPU (a thread per connection), what each
 * thread's own superblocks cost decides the peak RSS, not the live data: such a thread holds
 * a few blocks of every class it uses, and a superblock per class, at least a page resident,
 * was most of what it held (bench/manythreads at 400 threads: 127 MiB in 13,000 superblocks
 * for 7.4 MiB in use, 40 classes up to 2 KiB in each thread). So a crowded thread's heap
 * takes a class up to TROVE_COARSE_MAX that has no superblock of its own from the next
 * coarse class (two per doubling, size_class.c), whose current superblock serves all the
 * classes between on the fast path too: their direct[] slots point at it. A block is then
 * at most half larger than the request (a quarter on average) instead of an eighth, and a
 * thread keeps 14 classes up to 2 KiB instead of 40 (manythreads at 100-800 threads: peak
 * RSS -36 to -49%, time -13 to -16% from the faults saved). Up to 64 KiB since the
 * thirty-seventh session: from 2 to 16 KiB a thread had 24 classes of a few blocks a
 * superblock, and 50 threads on 2 CPUs (crowded, but not past the shared heaps' floor) held
 * 30.5 MiB at peak, 0.5 MiB a thread (glibc 10.3); now 23.2, and 1.12x the requests a second.
 * The cost: a coarse class above 4 KiB, a few blocks a superblock, turns them over more often
 * (mtmalloctest, 16 B - 16 KiB in batches of 100, at 32 threads on 2 CPUs: 9% slower, still
 * ahead of every peer). Above 1 KiB a class has no direct[] slot, so such a malloc takes
 * malloc_slow to the coarse class (a path of its own that skipped malloc_slow's chores
 * changed neither mtmalloctest's time nor its instructions). A class that still has
 * superblocks of its own uses them until they run out, and see coarse_serves. Invariant: a
 * direct[] slot holds its class's current
 * superblock, or in coarse mode, when that is the empty one, its coarse class's; so it is
 * always a current superblock of this heap with blocks at least as large as the slot's
 * sizes. */
static trove_sb_t *direct_of(const trove_heap_t *h, size_t slot) {
  size_t c = _trove_class_direct[slot];
  trove_sb_t *sb = h->cur[c];
  return sb == &_trove_sb_empty && h->coarse ? h->cur[_trove_class_coarse[c]] : sb;
}

/* In coarse mode, whether cls's coarse class serves a malloc of cls: not when cls is coarse
 * itself or has superblocks of its own with free blocks; and above 2 KiB, not once the
 * coarse class holds two full superblocks in this heap. A crowded thread that holds much
 * data in such blocks loses up to a third of it to the coarse classes' rounding (bench/phases,
 * 100 B - 4 KiB blocks, at 32 threads on 2 CPUs: peak RSS 155 MiB with coarse classes up to
 * 2 KiB, 183 up to 64 KiB, 148 with this rule; 5 runs); a class so used pays for
 * superblocks of its own. (Up to 2 KiB superblocks of 32 blocks or more are
 * abandoned when full, so `full` says nothing there: those classes keep the rule of before.) */
static bool coarse_serves(const trove_heap_t *h, size_t cls) {
  size_t k = _trove_class_coarse[cls];
  if (k == cls || h->lists[cls].partial != NULL || h->lists[cls].sparse != NULL) return false;
  const trove_sb_t *f = h->lists[k].full;
  return _trove_class_size[cls] <= 2048 || f == NULL || f->next == NULL;
}

static void coarse_set(trove_heap_t *h, bool on) {
  h->coarse = on;
  if (on) parking_set(h, false);           /* no parking (those parked wait for a pop or unpark) */
  for (size_t i = 0; i < TROVE_DIRECT_SLOTS; i++) h->direct[i] = direct_of(h, i);
}

/* In coarse mode, the slots of cls's coarse group, each from direct_of (a slow path anyway). */
static TROVE_NOINLINE void coarse_group_set(trove_heap_t *h, size_t cls) {
  size_t k = _trove_class_coarse[cls];
  for (size_t i = _trove_class_group_lo[k]; i <= _trove_class_slot_hi[k]; i++)
    h->direct[i] = direct_of(h, i);
}

#define PARK_CAP 32                  /* classes of fewer blocks a superblock park (see park) */
/* The current superblock's trigger. It never leaves on a free, so no local free should take
 * the slow path for it; but the blocks parked on it (park, free_parking) lower its count, by
 * up to its live blocks, and once they have, each free of one of its own blocks takes it below
 * 0. At a trigger of 0 each such free went out of line to find nothing to do: a thread that
 * fills and empties a ring of 1,024 messages of 4-16 KiB (bench/handoff -t 1) slow-pathed 8%
 * of its frees so, 168k in 2M. Parked blocks are at most its live blocks (fewer than PARK_CAP)
 * plus PARK_EXTRA (see free_parking), so at -(PARK_CAP + PARK_EXTRA) `slack` stays at or
 * above 0 (free_parking reads the count as slack + trigger). */
#define PARK_EXTRA 4
#define CURRENT_TRIGGER (-(PARK_CAP + PARK_EXTRA))

/* Inline: _trove_malloc_generic's switch to a partial superblock is on the working-set fast
 * path (out of line, 0.3 instructions more a malloc/free pair on fastpath-workset). */
TROVE_INLINE void set_current(trove_heap_t *h, size_t cls, trove_sb_t *sb) {
  if (sb != &_trove_sb_empty) {
    sb->state = TROVE_SB_CURRENT;
    _trove_sb_set_trigger(sb, CURRENT_TRIGGER);   /* never leaves on a free */
    __atomic_store_n(&sb->idle_mark, 0, __ATOMIC_RELAXED);   /* see free_abandoned */
    sb->freed_at = 0;
  }
  h->cur[cls] = sb;
  if (unlikely(h->coarse)) {
    coarse_group_set(h, cls);
    return;
  }
  /* A class has 1, 2 or 4 direct[] slots (class steps are at most 64 B up to 1 KiB): four
   * stores cover each case without a loop, which GCC vectorized at a cost of 25 instructions
   * for 4 slots. */
  size_t lo = _trove_class_slot_lo[cls], hi = _trove_class_slot_hi[cls];
  if (lo <= hi) {
    h->direct[lo] = sb;
    h->direct[(lo + hi) / 2] = sb;
    h->direct[(lo + hi + 1) / 2] = sb;
    h->direct[hi] = sb;
  }
}

/* ------------------------------------------------------------------ pool */
/* The pool is sharded: one per page heap arena (up to TROVE_POOL_SHARDS_MAX), each with a
 * lock per class. A superblock goes to the shard of its segment's arena (fixed while the
 * superblock exists: a segment changes arena only when it is all free), so a heap that
 * releases superblocks and takes them back uses its own shard's locks, and what it takes
 * lies in its own arena's segments; a heap whose shard has none of a class looks in the
 * others before it takes fresh pages (pool_adopt_any), which keeps Hoard's bound: a free
 * superblock in any shard serves any heap. With one pool for all, 16 threads of
 * bench/phases (100 B-4 KiB) on 16 cores found a class's lock taken 62,000-72,000 times in
 * 95,000 pool calls.
 * Pool lists are changed under their class's lock only. A bit per class and shard says
 * whether its `avail` list has a superblock, so that a heap looking for one does not take
 * the lock of an empty pool (a class that borrows, see borrow, looks every time). Written
 * under the lock, read without it as a hint: a stale bit costs one malloc fresh pages, or an
 * empty look. */
#define MAP_WORDS ((TROVE_CLASSES + 63) / 64)
uint32_t _trove_pool_shards = 1;       /* set once by _trove_pool_init, before any heap */
_Atomic uint8_t _trove_pool_shard_used[TROVE_POOL_SHARDS_MAX] = {1};
static struct {
  _Atomic uint64_t avail[MAP_WORDS];
  _Atomic uint64_t empty[MAP_WORDS];   /* classes with empty superblocks (pool_empties) */
} __attribute__((aligned(TROVE_CACHE_LINE))) pool_maps[TROVE_POOL_SHARDS_MAX];
/* Per class, the shards whose `avail` bit is set: a heap that finds this 0 reads no shard's
 * map (the classes that borrow ask on every slow malloc; reading 16 shards' maps each time,
 * shbench-large at 8 threads with 16 arenas was 6% slower). Changed with the bits. */
static _Atomic uint8_t pool_avail_shards[TROVE_CLASSES];

void _trove_pool_init(void) {
  size_t n = _trove_pages_narenas();
  _trove_pool_shards = (uint32_t)(n < TROVE_POOL_SHARDS_MAX ? n : TROVE_POOL_SHARDS_MAX);
}

/* The heaps lock held: `h` takes pages from its arena from now on. */
static void pool_shard_mark(const trove_heap_t *h) {
  atomic_store_explicit(&_trove_pool_shard_used[h->arena.arena % _trove_pool_shards], 1,
                        memory_order_relaxed);
}

static size_t pool_shard_of(const trove_sb_t *sb) {
  return _trove_segment_of((uintptr_t)sb)->arena % _trove_pool_shards;
}

static void pool_avail_changed(size_t shard, size_t cls) {   /* the pool lock is held */
  uint64_t bit = (uint64_t)1 << (cls % 64);
  _Atomic uint64_t *w = &pool_maps[shard].avail[cls / 64];
  bool has = _trove_pool_at(shard, cls)->avail != NULL;
  if (has != ((atomic_load_explicit(w, memory_order_relaxed) & bit) != 0)) {
    if (has) {
      atomic_fetch_or_explicit(w, bit, memory_order_relaxed);
      atomic_fetch_add_explicit(&pool_avail_shards[cls], 1, memory_order_relaxed);
    } else {
      atomic_fetch_and_explicit(w, ~bit, memory_order_relaxed);
      atomic_fetch_sub_explicit(&pool_avail_shards[cls], 1, memory_order_relaxed);
    }
  }
}

static bool pool_may_have(size_t shard, size_t cls) {
  return (atomic_load_explicit(&pool_maps[shard].avail[cls / 64], memory_order_relaxed) >>
          (cls % 64)) & 1;
}

static void pool_put_locked(trove_sb_t *sb, size_t shard) {
  sb->state = TROVE_SB_POOL;
  sb->pool_full = 0;
  sb->pool_empty = 0;
  atomic_store_explicit(&sb->pool_live, _trove_sb_used(sb), memory_order_relaxed);
  atomic_store_explicit(&sb->heap, NULL, memory_order_release);
  list_push(&_trove_pool_at(shard, sb->cls)->avail, sb);
  pool_avail_changed(shard, sb->cls);
}

/* Empty superblocks that Hoard's K sent from a heap to the pool (sparse_release_emptiest):
 * there they keep their carved free lists for the next heap that needs their class, until
 * a sweep (at most half the purge delay later) or a request for fresh pages gives them to
 * the page heap, as free since they became empty; only while they and the dirty pages stay
 * under the page heap's purge target (_trove_pages_may_keep). The heap that released one
 * takes it back as it is; another heap carves it again (_trove_sb_recarve). Counted under
 * the class's pool lock, read anywhere as a hint. */
static _Atomic size_t pool_empty_pages;

static void pool_empty_leaves(trove_sb_t *sb, size_t shard) {    /* the pool lock is held */
  if (sb->pool_empty) {
    sb->pool_empty = 0;
    if (--_trove_pool_at(shard, sb->cls)->empties == 0)
      atomic_fetch_and_explicit(&pool_maps[shard].empty[sb->cls / 64],
                                ~((uint64_t)1 << (sb->cls % 64)), memory_order_relaxed);
    atomic_fetch_sub_explicit(&pool_empty_pages, sb->npages, memory_order_relaxed);
  }
}

static void pool_unlink(trove_sb_t *sb, size_t shard) {
  trove_pool_t *pool = _trove_pool_at(shard, sb->cls);
  list_remove(sb->pool_full ? &pool->full : &pool->avail, sb);
  sb->pool_full = 0;
  pool_avail_changed(shard, sb->cls);
  pool_empty_leaves(sb, shard);
}

static void sb_to_page_heap(trove_sb_t *sb) { _trove_pages_free(sb); }

/* An owned superblock leaves its heap: empty ones go back to the page heap (when `keeper`
 * is its heap, to the pool as they are, while _trove_pages_may_keep allows), others to the
 * pool. */
static void sb_release_to(trove_sb_t *sb, bool reclaim, trove_heap_t *keeper) {
  __atomic_store_n(&sb->reclaim, reclaim, __ATOMIC_RELAXED);
  sb->slack -= (int32_t)_trove_sb_collect(sb);
  bool empty = _trove_sb_used(sb) == 0;
  /* Only superblocks of 8 blocks or more (the classes up to 4 KiB): carving a few large
   * blocks again costs less than the trip through the pool (16 B-64 KiB random replacement,
   * where superblocks of 2-4 blocks empty all the time: 4% slower with them too). From 32
   * blocks down to 8, the 1-4 KiB classes of a thread that frees all it built (bench/phases)
   * come back carved: phases-small 0.196 -> 0.166 s at 1 thread, -5% at 2, -10% at 8, peak
   * RSS level; random replacement of 16 B-64 KiB and 1-4 KiB level. */
  if (empty && !(keeper && sb->capacity >= 8 &&
                 _trove_pages_may_keep(atomic_load_explicit(&pool_empty_pages,
                                                            memory_order_relaxed), sb->npages))) {
    atomic_store_explicit(&sb->heap, NULL, memory_order_relaxed);
    sb_to_page_heap(sb);
    return;
  }
  size_t shard = pool_shard_of(sb);
  trove_pool_t *pool = _trove_pool_at(shard, sb->cls);
  _trove_lock(&pool->lock, TROVE_LOCK_POOL);
  pool_put_locked(sb, shard);
  if (empty) {
    sb->pool_empty = 1;
    sb->released_by = (uintptr_t)keeper;
    if (sb->freed_at == 0) sb->freed_at = _trove_os_now_ms();
    if (pool->empties++ == 0)
      atomic_fetch_or_explicit(&pool_maps[shard].empty[sb->cls / 64],
                               (uint64_t)1 << (sb->cls % 64), memory_order_relaxed);
    atomic_fetch_add_explicit(&pool_empty_pages, sb->npages, memory_order_relaxed);
  }
  _trove_mutex_unlock(&pool->lock);
}
static void sb_release(trove_sb_t *sb, bool reclaim) { sb_release_to(sb, reclaim, NULL); }

/* Take an empty superblock off its class's `avail` list onto `*list` (the pool lock held). */
static void pool_take_empty(size_t shard, trove_sb_t *sb, trove_sb_t **list) {
  list_remove(&_trove_pool_at(shard, sb->cls)->avail, sb);
  pool_avail_changed(shard, sb->cls);
  pool_empty_leaves(sb, shard);
  sb->next = *list;
  *list = sb;
}

/* Give such a list to the page heap, each superblock as free since it emptied (0: now). */
static void empties_to_page_heap(trove_sb_t *list) {
  while (list) {
    trove_sb_t *next = list->next;
    _trove_pages_free_at(list, list->freed_at);
    list = next;
  }
}

/* Give the empty superblocks waiting in the pool to the page heap (the lock of each class
 * and shard that has some, in turn). */
static TROVE_NOINLINE void pool_flush_empties(void) {
  trove_sb_t *empty = NULL;
  for (size_t s = 0; s < _trove_pool_shards; s++)
    for (size_t w = 0; w < MAP_WORDS; w++)
      for (uint64_t m = atomic_load_explicit(&pool_maps[s].empty[w], memory_order_relaxed); m;
           m &= m - 1) {
        trove_pool_t *pool = _trove_pool_at(s, w * 64 + (size_t)__builtin_ctzll(m));
        _trove_lock(&pool->lock, TROVE_LOCK_POOL);
        for (trove_sb_t *sb = pool->avail, *next; sb && pool->empties; sb = next) {
          next = sb->next;
          if (sb->pool_empty) pool_take_empty(s, sb, &empty);
        }
        _trove_mutex_unlock(&pool->lock);
      }
  empties_to_page_heap(empty);
}

/* A free of a block of a pool superblock (owned by no heap). Its blocks are only counted
 * when the pool lock is held, so without more an emptied pool superblock would wait for the
 * next sweep (up to half the purge delay) before its pages served anything else: a thread
 * that grows strings by realloc, releasing sparse superblocks of many classes, had 16 MiB in
 * ~1,000 such superblocks holding 3 MiB after 0.1 s. `pool_live` counts down the frees since
 * the superblock entered the pool; the free that takes it to zero pushes its block under the
 * pool lock (so that no sweep or adoption can free the superblock under it), collects, and
 * gives the superblock to the page heap if it is indeed empty and still in the pool. The
 * count is only a hint: a stale decrement (the superblock was adopted and pooled again
 * meanwhile) makes it early, when the check under the lock finds live blocks, or late, when
 * the sweep still gives the superblock back. */
static void pool_free_block(trove_sb_t *sb, trove_block_t *b) {
  if (atomic_fetch_sub_explicit(&sb->pool_live, 1, memory_order_relaxed) != 1) {
    push_block(&sb->thread_free, b);
    return;
  }
  bool empty = false;
  size_t shard = pool_shard_of(sb);
  trove_mutex_t *lock = &_trove_pool_at(shard, sb->cls)->lock;
  _trove_lock(lock, TROVE_LOCK_POOL);
  push_block(&sb->thread_free, b);
  /* The owner first: once a heap has adopted the superblock (under this lock), its state is
   * that heap's to write, without the lock. */
  if (atomic_load_explicit(&sb->heap, memory_order_relaxed) == NULL && sb->state == TROVE_SB_POOL) {
    sb->slack -= (int32_t)_trove_sb_collect(sb);
    if (_trove_sb_used(sb) == 0) {
      pool_unlink(sb, shard);
      empty = true;
    }
  }
  _trove_mutex_unlock(lock);
  if (empty) sb_to_page_heap(sb);
}

/* Take a pool superblock of class `cls` with a free block, or NULL. An empty one that this
 * heap released itself first, if one of the first POOL_OWN_LOOK is: it lies in this heap's
 * arena's segments, whose header lines (descriptors, page map) the other threads' superblocks
 * do not share, its blocks may still be in this core's cache, and an empty one needs no
 * re-carving. Taking the head alone, two threads that each fill and empty more than K's
 * worth of 64-byte blocks (threadtest-64 at 2 threads on 2 cores) swapped superblocks
 * through the pool every round: 0.168 s, now 0.153 (mimalloc 0.152; 7 interleaved runs);
 * phases, xmalloc, threadtest, mtmalloctest, shbench-large, larson and blowup level. */
#define POOL_OWN_LOOK 8
/* An empty superblock of a class of small blocks (128 or more to a superblock, up to 256 B)
 * taken up again for its class, from the heap's empty list, its spares or the pool: if its
 * free list is scattered, carved again, so that its blocks go out in address order. Its list
 * is in the reverse order of the frees that emptied it, and a program that frees in another
 * order than it allocated (a tree freed depth first, in post-order) built its next structure
 * in that order: consecutive mallocs of the benchmarks game's binary-trees (16 B nodes, trees
 * of depth 18, 8 MiB) were 14% adjacent in memory (mimalloc 3 99%, tcmalloc 98%, which carve
 * emptied pages again), and its own walks of the trees missed the cache on most nodes: 36.2M
 * nodes a second against mimalloc 3's 105M; 94% adjacent and 94.5M so. Scattered: the first
 * four links of the list are not each one block apart, up or down (a burst freed in the order
 * it was allocated, or in reverse, keeps its list: carving again cost 7% there). Carving
 * writes a block's two words, 4 KiB at a time (superblock.c), so below 128 blocks to a
 * superblock a carve's slow call comes every few blocks, for a layout that matters less for
 * blocks of 288 B and up. */
static void recarve_if_scattered(trove_sb_t *sb) {
  if (sb->capacity < 128) return;
  const trove_block_t *b = sb->free;
  bool scattered = b == NULL;
  for (int k = 0; k < 4 && !scattered && b->next != NULL; k++, b = b->next) {
    uintptr_t d = (uintptr_t)b->next - (uintptr_t)b;
    scattered = d != sb->bsize && d != -(uintptr_t)sb->bsize;
  }
  if (scattered) _trove_sb_recarve(sb);
}

static trove_sb_t *pool_adopt(trove_heap_t *h, size_t shard, size_t cls) {
  trove_pool_t *pool = _trove_pool_at(shard, cls);
  trove_sb_t *found = NULL;
  _trove_lock(&pool->lock, TROVE_LOCK_POOL);
  for (trove_sb_t *sb; (sb = pool->avail) != NULL;) {
    unsigned k = 0;
    for (trove_sb_t *o = sb; o != NULL && k < POOL_OWN_LOOK; o = o->next, k++)
      if (o->pool_empty && o->released_by == (uintptr_t)h) {
        sb = o;
        break;
      }
    list_remove(&pool->avail, sb);
    if (sb->pool_empty) {
      if (sb->released_by != (uintptr_t)h) _trove_sb_recarve(sb);
      else recarve_if_scattered(sb);
      pool_empty_leaves(sb, shard);
    }
    sb->slack -= (int32_t)_trove_sb_collect(sb);
    if (_trove_sb_used(sb) < (int32_t)sb->capacity) {
      atomic_store_explicit(&sb->heap, h, memory_order_release);
      __atomic_store_n(&sb->reclaim, 0, __ATOMIC_RELAXED);
      sb->kept = sb->claimed = 0;
      found = sb;
      break;
    }
    list_push(&pool->full, sb);              /* no free block: out of the way until swept */
    sb->pool_full = 1;
  }
  pool_avail_changed(shard, cls);
  _trove_mutex_unlock(&pool->lock);
  if (found) h->c.adopted++;
  return found;
}

/* The heap's own shard first, then the others in turn. */
static trove_sb_t *pool_adopt_any(trove_heap_t *h, size_t cls) {
  if (atomic_load_explicit(&pool_avail_shards[cls], memory_order_relaxed) == 0) return NULL;
  size_t n = _trove_pool_shards, s = h->arena.arena % n;
  for (size_t i = 0; i < n; i++, s = s + 1 == n ? 0 : s + 1) {
    trove_sb_t *sb;
    if (pool_may_have(s, cls) && (sb = pool_adopt(h, s, cls)) != NULL) return sb;
  }
  return NULL;
}

/* Collect remote frees of pool superblocks and give empty ones back (any thread, on a tick).
 * One class at a time, so that an adoption waits for the walk of its own class at most.
 * Also forwards what is left in the queues of heaps whose threads exited. */
void _trove_pool_sweep(void) {
  trove_sb_t *empty = NULL;
  for (size_t i = 0; i < _trove_pool_shards * TROVE_CLASSES; i++) {
    size_t s = i / TROVE_CLASSES, c = i % TROVE_CLASSES;
    if (c == 0 || !_trove_pool_shard_in_use(s)) continue;
    trove_pool_t *pool = _trove_pool_at(s, c);
    /* Every class's lock, even where its lists are empty: the sweep runs at most every half
     * purge delay, and a peek at the lists without the lock was a data race. */
    _trove_lock(&pool->lock, TROVE_LOCK_POOL);
    bool full_walk = (++pool->sweeps & 7) == 0;
    for (trove_sb_t *sb = pool->full, *next; sb; sb = next) {
      next = sb->next;
      if (atomic_load_explicit(&sb->thread_free, memory_order_relaxed) == NULL) continue;
      list_remove(&pool->full, sb);
      list_push(&pool->avail, sb);             /* it has free blocks again */
      sb->pool_full = 0;
    }
    pool_avail_changed(s, c);
    for (trove_sb_t *sb = pool->avail, *next; sb; sb = next) {
      next = sb->next;
      /* Mostly only where the count says it may be empty: collecting walks every block freed
       * into the superblock, under the class's lock (bench/stability on 16 cores held it
       * 23 ms at a time, collecting them all). Every 8th sweep collects all, for counts that
       * a race left too high. */
      if (!full_walk && atomic_load_explicit(&sb->pool_live, memory_order_relaxed) > 0) continue;
      sb->slack -= (int32_t)_trove_sb_collect(sb);
      if (_trove_sb_used(sb) == 0) {
        if (!sb->pool_empty) sb->freed_at = 0;   /* emptied by frees: free from now */
        pool_take_empty(s, sb, &empty);
      }
    }
    _trove_mutex_unlock(&pool->lock);
  }
  empties_to_page_heap(empty);
  /* The queues are taken under the heaps lock and routed after it. A block of an abandoned
   * superblock adopts it into the routing thread's heap (free_abandoned), and a thread that
   * has none would take one (thread_heap_init, which takes that lock): routed under the
   * lock, test_xthread's thread that only frees waited on itself for good (2 runs in 15 with
   * three at once). Such a thread leaves those blocks queued for a sweep by a thread with a
   * heap. (Routed after the lock with a heap taken for it, test_xthread's phase 2 RSS check
   * failed in 2 runs of ctest -j3 in 8: what it adopted stayed with that heap, parked when
   * the thread exited.) */
  trove_block_t *taken = NULL;
  bool heapless = _trove_tls_heap == &_trove_heap_empty;
  _trove_mutex_lock(&_trove_locks.heaps);
  for (trove_heap_t *h = _trove_heaps_all; h; h = h->next_all) {
    /* parked heaps keep their queue for the next owner; one whose thread vanished in a fork
     * (`alive` from the parent, or `orphan`) is never walked */
    if (h->alive || h->orphan || parked_since(h) || h->expiring || !remote_pending(h))
      continue;
    for (trove_block_t *b = queue_take_all(h), *next; b; b = next) {
      next = b->next;
      uintptr_t a = (uintptr_t)b;
      trove_sb_t *sb = _trove_sb_of(_trove_segment_of(a), a);
      if (heapless && sb->kind != TROVE_SPAN_MEDIUM &&
          atomic_load_explicit(&sb->heap, memory_order_acquire) == TROVE_ABANDONED) {
        push_remote(h, b, REMOTE_PENDING);
        continue;
      }
      b->next = taken;
      taken = b;
    }
  }
  _trove_mutex_unlock(&_trove_locks.heaps);
  for (trove_block_t *b = taken, *next; b; b = next) {
    next = b->next;
    uintptr_t a = (uintptr_t)b;
    route_block(_trove_sb_of(_trove_segment_of(a), a), b);
  }
}

/* ------------------------------------------------------------------ the sparse list */
#define EMPTY_LENS (sizeof ((trove_heap_t *)0)->nempty_len / sizeof(uint16_t))
static size_t empty_len_index(const trove_sb_t *sb) {
  return sb->npages < EMPTY_LENS ? sb->npages : EMPTY_LENS - 1;
}

/* The empty list's counts: written under the cache's lock, read as hints without it. */
static void empty_count_add(trove_heap_t *h, const trove_sb_t *sb, int d) {
  uint16_t *c = &h->nempty_cls[sb->cls], *l = &h->nempty_len[empty_len_index(sb)];
  __atomic_store_n(&h->nempty, (uint32_t)((int)h->nempty + d), __ATOMIC_RELAXED);
  __atomic_store_n(c, (uint16_t)(*c + d), __ATOMIC_RELAXED);
  __atomic_store_n(l, (uint16_t)(*l + d), __ATOMIC_RELAXED);
}
static uint32_t empty_count(const trove_heap_t *h) {
  return __atomic_load_n(&h->nempty, __ATOMIC_RELAXED);
}
static uint16_t empty_count_cls(const trove_heap_t *h, size_t cls) {
  return __atomic_load_n(&h->nempty_cls[cls], __ATOMIC_RELAXED);
}
static uint16_t empty_count_len(const trove_heap_t *h, size_t n) {
  return __atomic_load_n(&h->nempty_len[n < EMPTY_LENS ? n : EMPTY_LENS - 1], __ATOMIC_RELAXED);
}

static void mc_lock(trove_heap_t *h);
static void mc_unlock(trove_heap_t *h);
static void empty_push(trove_heap_t *h, trove_sb_t *sb) {
  sb->freed_at = h->now_ms;                /* the clock as of the last tick: close enough */
  mc_lock(h);
  if (h->empty == NULL || sb->freed_at < h->empty_oldest) h->empty_oldest = sb->freed_at;
  list_push(&h->empty, sb);
  empty_count_add(h, sb, 1);
  mc_unlock(h);
}

/* The cache's lock held; the caller takes it off sparse_pages too (or a sweep, swept_pages). */
static void empty_remove_locked(trove_heap_t *h, trove_sb_t *sb) {
  list_remove(&h->empty, sb);
  empty_count_add(h, sb, -1);
}

/* The first empty superblock that `fits` (the cache's lock held), taken off the list; NULL if
 * none. */
static trove_sb_t *empty_take_locked(trove_heap_t *h, bool (*fits)(const trove_sb_t *, size_t, size_t),
                                     size_t a, size_t b) {
  for (trove_sb_t *sb = h->empty; sb; sb = sb->next)
    if (fits == NULL || fits(sb, a, b)) {
      empty_remove_locked(h, sb);
      h->sparse_pages -= sb->npages;
      return sb;
    }
  return NULL;
}
static trove_sb_t *empty_take(trove_heap_t *h, bool (*fits)(const trove_sb_t *, size_t, size_t),
                              size_t a, size_t b) {
  if (empty_count(h) == 0) return NULL;
  mc_lock(h);
  trove_sb_t *sb = empty_take_locked(h, fits, a, b);
  mc_unlock(h);
  return sb;
}

/* A sparse superblock with live blocks onto its class's list (an empty one: emptied). */
static void sparse_add_live(trove_heap_t *h, trove_sb_t *sb) {
  h->sparse_pages += sb->npages;
  trove_class_lists_t *l = &h->lists[sb->cls];
  list_push(&l->sparse, sb);
  l->nsparse++;       /* the bit unconditionally: whether it was clear is a coin toss too */
  h->sparse_map[sb->cls / 64] |= (uint64_t)1 << (sb->cls % 64);
}

static void sparse_unlink_live(trove_heap_t *h, trove_sb_t *sb) {
  trove_class_lists_t *l = &h->lists[sb->cls];
  list_remove(&l->sparse, sb);
  h->sparse_map[sb->cls / 64] &= ~((uint64_t)(--l->nsparse == 0) << (sb->cls % 64));
}

/* A sparse superblock with live blocks off its class's list (the empty ones leave through
 * empty_take): a superblock's live count only falls while it is sparse, and the free that
 * takes it to 0 moves it (sb_underflow, emptied). */
static void sparse_remove_live(trove_heap_t *h, trove_sb_t *sb) {
  h->sparse_pages -= sb->npages;
  sparse_unlink_live(h, sb);
}

/* ------------------------------------------------------------------ empty superblocks */
/* The cache's lock held: the empty ones emptied a purge delay before `now` (all if `all`) off
 * the list onto *out; how many pages they hold. A walk of them all (a descriptor load each,
 * up to K's worth), so only when the oldest is due: the sweep looks at every live heap. */
static uint32_t empty_due_locked(trove_heap_t *h, uint64_t now, bool all, trove_sb_t **out) {
  uint64_t delay = (uint64_t)TROVE_OPT(PURGE_DELAY_MS), oldest = UINT64_MAX;
  uint32_t pages = 0;
  if (h->empty == NULL || (!all && h->empty_oldest + delay > now)) return 0;
  for (trove_sb_t *sb = h->empty, *next; sb; sb = next) {
    next = sb->next;
    if (all || sb->freed_at + delay <= now) {
      empty_remove_locked(h, sb);
      pages += sb->npages;
      sb->next = *out;
      *out = sb;
    } else if (sb->freed_at < oldest) {
      oldest = sb->freed_at;
    }
  }
  h->empty_oldest = oldest;
  return pages;
}

/* An empty superblock stays on its heap's sparse list (it counts towards K) with its free
 * list intact, so the same class reuses it without carving again; it leaves when the sparse
 * list overflows or after the purge delay (also by another thread's sweep while its own
 * thread waits, see sweep_idle_caches). */
static void sparse_trim(trove_heap_t *h, bool all) {
  trove_sb_t *due = NULL;
  mc_lock(h);
  h->sparse_pages -= empty_due_locked(h, _trove_os_now_ms(), all, &due);
  mc_unlock(h);
  for (trove_sb_t *next; due; due = next) {
    next = due->next;
    sb_release(due, false);
  }
}

/* An empty current superblock of a class the thread no longer uses goes back like an empty
 * sparse one, after the purge delay: otherwise every class a thread ever used would keep
 * its carved pages resident for the thread's lifetime. Idleness is seen without touching the
 * fast paths: a scan (at most every half delay, on the heap's slow path) marks an empty
 * current superblock with its two list heads, and releases it when a scan at least the delay
 * later finds it still empty with the same heads (a malloc pops `free`, a free pushes onto
 * it). A false match only costs the next malloc of that class a slow path; a loop that takes
 * and frees one block leaves the same head at every scan, so the heartbeat that runs the scan
 * from such a loop's free clears that superblock's mark (_trove_heap_beat). */
static void unpark(trove_heap_t *h, trove_sb_t *cur);
static void idle_blocks_purge(trove_sb_t *sb, uint64_t now, bool all);
static void cur_trim(trove_heap_t *h, uint64_t now, bool all) {
  uint64_t delay = (uint64_t)TROVE_OPT(PURGE_DELAY_MS);
  for (size_t c = 1; c < TROVE_CLASSES; c++) {
    trove_sb_t *sb = h->cur[c];
    unpark(h, sb);
    if (sb == &_trove_sb_empty) continue;
    if (_trove_sb_used(sb) != 0) {
      idle_blocks_purge(sb, now, all);
      continue;
    }
    uintptr_t mark = ((uintptr_t)sb->free ^ ((uintptr_t)sb->local_free << 1)) | 1;
    if (all || (sb->idle_mark == mark && now - sb->freed_at >= delay)) {
      set_current(h, c, &_trove_sb_empty);
      sb_release(sb, false);
    } else if (sb->idle_mark != mark) {
      __atomic_store_n(&sb->idle_mark, mark, __ATOMIC_RELAXED);
      sb->freed_at = now;
    }
  }
}

/* ------------------------------------------------------------------ idle free blocks */
/* A superblock with live blocks never goes back to the OS, so its free blocks stay resident
 * however long they lie idle: after a burst of blocks above 4 KiB (2-8 to a superblock), a
 * few survivors pin the pages of their freed neighbours. A program that wrote 100 MiB of
 * 8-64 KiB blocks, freed nine in ten at random and went quiet held 23.8 MiB for 10.5 MiB
 * live (glibc, jemalloc, tcmalloc, mimalloc 3 and snmalloc kept all of their 104-127 MiB).
 * So a free block above 4 KiB that stays on its superblock's lists for the purge delay gives
 * back the whole (4 KiB) pages it holds past its first 16 bytes, which keep the free tag and
 * the link: a double free is still caught and the list stays whole, and a malloc that takes
 * the block again faults those pages back in, zeroed. That program now holds 15.2 MiB; with
 * 4-16 KiB blocks 27.2 MiB instead of 44.6, with 1-8 KiB 48.1 instead of 54.5 (a block of
 * 4.5-8 KiB holds a whole page past its head in some places of its superblock only).
 * Idleness is seen as cur_trim sees it: a scan (every half delay, the heap's timed work)
 * marks the superblock with its two list heads, and one at least the delay later that finds
 * the same heads purges what is on the lists then and marks it purged (bit 1), so that it is
 * not walked again until its lists change or it becomes current. The current superblocks
 * (cur_trim), the partial and sparse lists of those classes (at most PURGE_SCAN superblocks
 * a pass) and the pool's superblocks with live blocks are scanned; trove_collect and
 * malloc_trim purge them all at once. Segments in huge pages are left whole (a purge of
 * 4 KiB pieces would split them). */
#define PURGE_BLOCK_MIN ((size_t)4097)   /* blocks above a page: the classes from 4,608 B */
#define PURGE_SCAN 1024
static size_t purge_free_list(trove_block_t *b, size_t bsize) {
  size_t n = 0;
  uintptr_t page = _trove_os_page_size();   /* the OS's, for madvise (trove's pages are 8 KiB) */
  for (; b; b = b->next) {
    uintptr_t lo = ((uintptr_t)b + sizeof *b + page - 1) & ~(page - 1);
    uintptr_t hi = ((uintptr_t)b + bsize) & ~(page - 1);
    if (hi > lo && _trove_os_purge((void *)lo, hi - lo)) n++;
  }
  return n;
}

static _Atomic size_t blocks_purged;       /* trove_stats_t.blocks_purged */
size_t _trove_blocks_purged(void) {
  return atomic_load_explicit(&blocks_purged, memory_order_relaxed);
}

/* `sb`'s lists are the caller's: its heap's (the owner, or a shared heap's lock) or, in the
 * pool, the class's lock. */
static void idle_blocks_purge(trove_sb_t *sb, uint64_t now, bool all) {
  if (sb->bsize < PURGE_BLOCK_MIN || (sb->free == NULL && sb->local_free == NULL)) return;
  uintptr_t mark = ((uintptr_t)sb->free ^ ((uintptr_t)sb->local_free << 1)) | 1;
  if (sb->idle_mark == (mark | 2)) return;
  uint64_t delay = (uint64_t)TROVE_OPT(PURGE_DELAY_MS);
  if (all || (sb->idle_mark == mark && now - sb->freed_at >= delay)) {
    if (atomic_load_explicit(&_trove_segment_of(sb->start)->huge, memory_order_relaxed)) return;
    size_t n = purge_free_list(sb->free, sb->bsize) + purge_free_list(sb->local_free, sb->bsize);
    atomic_fetch_add_explicit(&blocks_purged, n, memory_order_relaxed);
    /* A current superblock's mark is armed again instead: malloc may pop a block and the
     * program free it back, leaving the same heads on a written block, all on the fast
     * paths. Any other one becomes current before a block of it is popped, and set_current
     * clears its mark. */
    bool current = sb->state == TROVE_SB_CURRENT;
    __atomic_store_n(&sb->idle_mark, current ? mark : mark | 2, __ATOMIC_RELAXED);
    if (current) sb->freed_at = now;
  } else if (sb->idle_mark != mark) {
    __atomic_store_n(&sb->idle_mark, mark, __ATOMIC_RELAXED);
    sb->freed_at = now;
  }
}

/* The partial and sparse superblocks of the classes from PURGE_BLOCK_MIN, largest first. */
static void lists_purge(trove_heap_t *h, uint64_t now, bool all) {
  unsigned budget = PURGE_SCAN;
  for (size_t c = TROVE_CLASSES - 1; c > 0 && _trove_class_size[c] >= PURGE_BLOCK_MIN; c--)
    for (int k = 0; k < 2; k++)
      for (trove_sb_t *sb = k ? h->lists[c].sparse : h->lists[c].partial; sb; sb = sb->next) {
        if (budget-- == 0) return;
        idle_blocks_purge(sb, now, all);
      }
}

/* The same in the pool, for the superblocks with live blocks that the blowup rule released
 * there (any thread, on the process's timed work, under each class's lock). */
static void pool_purge(uint64_t now, bool all) {
  for (size_t s = 0; s < _trove_pool_shards; s++) {
    if (!_trove_pool_shard_in_use(s)) continue;
    unsigned budget = PURGE_SCAN;
    for (size_t c = TROVE_CLASSES - 1; c > 0 && _trove_class_size[c] >= PURGE_BLOCK_MIN; c--) {
      trove_pool_t *pool = _trove_pool_at(s, c);
      if (atomic_load_explicit(&pool_avail_shards[c], memory_order_relaxed) == 0) continue;
      _trove_lock(&pool->lock, TROVE_LOCK_POOL);
      for (trove_sb_t *sb = pool->avail; sb && budget; sb = sb->next, budget--)
        if (!sb->pool_empty && _trove_sb_used(sb) > 0) idle_blocks_purge(sb, now, all);
      _trove_mutex_unlock(&pool->lock);
    }
  }
}

/* ------------------------------------------------------------------ the blowup rule */
/* `sb`, empty and off the heap's lists (no longer in sparse_pages), past K: a spare if their
 * cap allows (kept for the next burst), else on to the pool or the page heap. Not adopted
 * again on a free (no ping-pong). An empty one may wait in the pool as it is (see
 * pool_empty_pages): through the page heap it was carved again each time. A thread that
 * fills and empties 6.4 MB of 64 B blocks (threadtest-64, past K's 1.5 MiB) took 0.384 s so,
 * 0.324 s with this (mimalloc 0.336). */
static void release_empty(trove_heap_t *h, trove_sb_t *sb) {
  h->lists[sb->cls].churn = 1;             /* see sb_grow */
  if (spare_put(h, sb)) return;
  h->c.released++;
  sb_release_to(sb, false, h);
}

/* The emptiest of the first SPARSE_LOOK sparse superblocks with live blocks (any f-empty one
 * keeps Hoard's bound; the emptiest strands the fewest live blocks in the pool). Each one
 * looked at is a descriptor load that misses: walking all of them (up to K's worth, 12-96)
 * for every release was 10% of bench/phases' instructions at 1 thread (2.75M of 28.5M in a
 * short run, callgrind; 1.57M now); looking at 16, phases-small took 1-4% less time at 1-8
 * threads, and mtmalloctest, shbench-large, sizesweep and xmalloc kept their peak RSS. */
#define SPARSE_LOOK 16
static void sparse_release_emptiest(trove_heap_t *h) {
  trove_sb_t *min = empty_take(h, NULL, 0, 0);
  unsigned look = SPARSE_LOOK;
  for (size_t w = 0; min == NULL && w < sizeof h->sparse_map / sizeof h->sparse_map[0]; w++)
    for (uint64_t m = h->sparse_map[w]; m && look; m &= m - 1)
      for (trove_sb_t *sb = h->lists[w * 64 + (size_t)__builtin_ctzll(m)].sparse; sb && look;
           sb = sb->next, look--)
        if (min == NULL || _trove_sb_used(sb) < _trove_sb_used(min)) min = sb;
  if (min == NULL) return;                 /* a sweep took the empty ones meanwhile */
  if (_trove_sb_used(min) == 0) {
    release_empty(h, min);
    return;
  }
  sparse_remove_live(h, min);
  h->c.released++;
  sb_release_to(min, false, h);
}

/* Past K, the empty sparse superblocks go to the page heap; then the emptiest ones with live
 * blocks go to the pool, where other threads may adopt them (Hoard's bound) - unless no other
 * thread has a heap. A superblock in the pool keeps its pages (its blocks are live), so
 * releasing it saves no memory; it only lets another thread use its free blocks, and without
 * one every later free of its blocks took the pool's path: a single-threaded perl building a
 * 400k-key hash ran 7% slower (1.38 s against 1.29; peak RSS the same, 354 MiB). Once a
 * second thread runs, a heap over K releases again, at most 8 superblocks with live blocks
 * per call (each release walks the sparse lists for the emptiest).
 * And those with live blocks wait until the heap has been past K for 1/32
 * of the purge delay: a thread that frees all it built (bench/phases) takes each superblock
 * through the sparse state on its way to empty, and released on the spot they were adopted
 * by the threads building meanwhile, which then took the rest of its frees as remote ones
 * (phases-small at 2 threads: 105k remote frees and 25k adoptions in 0.12 s; waiting, none,
 * and 10-13% faster at 2-8 threads). The timed work releases them if the heap is still past
 * K when they are due (docs/DESIGN.md, the blowup bound). */
static bool over_k(trove_heap_t *h) {
  if (atomic_load_explicit(&h->swept_pages, memory_order_relaxed) != 0) {
    h->sparse_pages -= atomic_exchange_explicit(&h->swept_pages, 0, memory_order_relaxed);
    /* A sweep gave back empty ones that waited the purge delay: the heap was idle that
     * long, and its clock (read on its slow paths' ticks) with it. The ones its next burst
     * empties would be stamped that old (empty_push, emptied) and leave at the next trim
     * instead of serving the burst after: a thread woken every 0.4 s to build and free
     * 4,000 blocks of 208 B kept 25 of its 26 superblocks, or 26, as its ticks fell. */
    h->now_ms = _trove_os_now_ms();
  }
  return h->sparse_pages > (uint32_t)TROVE_OPT(BLOWUP_K) * TROVE_SB_PAGES;
}

static void release_over_k(trove_heap_t *h, bool timed) {
  unsigned live_releases = 0;
  while (over_k(h)) {
    if (empty_count(h) == 0) {
      if (live_releases++ == 8 || atomic_load_explicit(&heaps_alive, memory_order_relaxed) < 2)
        break;
      uint64_t now = timed ? h->now_ms : _trove_os_now_ms();
      if (h->over_since_ms == 0) h->over_since_ms = now;
      if (now - h->over_since_ms < (uint64_t)TROVE_OPT(PURGE_DELAY_MS) / 32) break;
    }
    sparse_release_emptiest(h);
  }
  if (!over_k(h)) h->over_since_ms = 0;
}

/* `sb` has just emptied and left its class's lists, still counted in sparse_pages: onto the
 * empty list, or past K on at once. (release_over_k takes the empty ones first, the newest
 * first: pushed there, `sb` came straight back off the list, two trips through the cache's
 * lock, 10% of the slow frees' instructions in rptest's rounds.) */
static void emptied(trove_heap_t *h, trove_sb_t *sb) {
  if (!over_k(h)) {
    empty_push(h, sb);
    return;
  }
  sb->freed_at = h->now_ms;                /* as empty_push stamps it */
  h->sparse_pages -= sb->npages;
  release_empty(h, sb);
  if (over_k(h)) release_over_k(h, false);
  else h->over_since_ms = 0;
}

static void make_sparse(trove_heap_t *h, trove_sb_t *sb) {
  sb->state = TROVE_SB_SPARSE;
  _trove_sb_set_trigger(sb, 1);            /* next slow free: when it becomes empty */
  if (_trove_sb_used(sb) == 0) {           /* a 2-block superblock goes partial at 1 live block,
                                              sparse at 0 */
    h->sparse_pages += sb->npages;
    if (!over_k(h)) h->over_since_ms = 0;
    emptied(h, sb);
    return;
  }
  sparse_add_live(h, sb);
  if (over_k(h)) release_over_k(h, false);
  else h->over_since_ms = 0;
}

/* A local free took `used` below the superblock's trigger.
 *
 * An empty sparse superblock stays on the sparse list (within K) rather than going to the page
 * heap at once, even in the classes above 1 KiB where a superblock holds few blocks: giving
 * those back on the spot let other classes reuse their pages (sizesweep peak RSS -6% at the
 * time) but sent producer/consumer threads through the page heap lock for nearly every
 * superblock they filled: bench/xmalloc (8 B-4 KiB blocks in batches freed by another
 * thread) took 0.51 s with it and 0.28 s without at 2 threads, for the same RSS. The cost is
 * mtmalloctest's peak RSS, 7% higher; sizesweep, stability and reallocgrow moved by 0-2%. */
static void sb_underflow(trove_heap_t *h, trove_sb_t *sb) {
  sb->together = h->last_underflow == sb;  /* see sb_cycle */
  h->last_underflow = sb;
  /* A superblock claimed from another heap (abandon_full) that empties goes on at once
   * rather than counting towards K: the thread that freed its blocks may never allocate
   * their class (a consumer), and kept there its pages waited while the threads that
   * allocate them took fresh ones (bench/handoff --mode in -t 8, 7 producers and a consumer:
   * peak RSS 5.6 MiB before abandoning, 7.1-7.9 with it, 6.0 with this). Decided first: the
   * moves below may hand `sb` itself on (release_over_k), after which it must not be read. */
  if (unlikely(sb->claimed) && _trove_sb_used(sb) == 0 && sb->state != TROVE_SB_CURRENT) {
    switch (sb->state) {
    case TROVE_SB_FULL:
      list_remove(&h->lists[sb->cls].full, sb);
      break;
    case TROVE_SB_PARTIAL:
      partial_unlink(&h->lists[sb->cls], sb);
      break;
    case TROVE_SB_SPARSE:                  /* on its class's list: it had live blocks */
      h->sparse_pages -= sb->npages;
      sparse_unlink_live(h, sb);
      break;
    default:
      return;
    }
    sb_release_to(sb, false, h);
    return;
  }
  switch (sb->state) {
  case TROVE_SB_FULL:
    list_remove(&h->lists[sb->cls].full, sb);
    if (_trove_sb_used(sb) < sparse_threshold(sb)) {
      make_sparse(h, sb);
    } else {
      sb->state = TROVE_SB_PARTIAL;
      _trove_sb_set_trigger(sb, sparse_threshold(sb));
      partial_append(&h->lists[sb->cls], sb);
    }
    break;
  case TROVE_SB_PARTIAL:
    partial_unlink(&h->lists[sb->cls], sb);
    make_sparse(h, sb);
    break;
  case TROVE_SB_SPARSE:
    /* Past K the heap gives empty ones on at once, as make_sparse does. Freed in allocation
     * order, each superblock turns sparse after the one before emptied, and make_sparse finds
     * that one to give; freed in a random order (a hash table torn down), all turn sparse
     * before any empties, and their empties then piled up on the heap's list for the timed
     * work: Redis after FLUSHALL held 150 MiB of empty superblocks in its one heap for as
     * long as it made no call (K is 1.5 MiB), out of reach of the background thread too. */
    if (_trove_sb_used(sb) == 0) {
      sparse_unlink_live(h, sb);
      emptied(h, sb);                      /* may hand `sb` on */
    }
    break;
  default:
    break;
  }
}

/* Parking. In the classes whose superblocks hold fewer than PARK_CAP blocks (above 1 KiB),
 * a thread that replaces blocks at random keeps its superblocks full: each free lands in a
 * full one, which turns partial, and the next malloc finds its current one exhausted and
 * switches to it, a state change on nearly every call (a thread replacing one of 64 blocks
 * of 4 KiB: 87% of its mallocs and frees on their slow paths; tcmalloc 2.5x as fast). So a
 * free that would turn a full superblock partial while the class's current one has no free
 * block and nothing left to carve leaves the block counted live in its own superblock and
 * puts it on the current one's list instead, whose count it lowers by one: the next malloc
 * pops it on the fast path (the block freed last, still in cache) and raises that count
 * back. That loop of 4-32 KiB blocks: 1.6-1.7x as fast (snmalloc's speed; tcmalloc's at 8 KiB
 * and up); mixed sizes level. While the current one could still carve, parking cost
 * mtmalloctest 4% more peak RSS (its classes borrowed a third as often). Only onto an empty
 * list, so at most one such block lies on a current superblock's list, below any freed into
 * it after. It leaves the list by a pop, or by unpark, which frees it into its own
 * superblock: every half purge delay (the heap's timed work, so that a thread that stops
 * using the class does not keep that superblock from emptying; if it empties so, it counts
 * as free since the block was parked) and when the current superblock stops being current
 * with blocks on its list (heap_abandon; cur_trim, where its understated count could make
 * it look empty). The statistics sum the counts per class, where the two cancel.
 *
 * Parking on every free (fifty-ninth session). Once a heap has parked PARK_FAST_AFTER
 * blocks here since the last scan of its current superblocks (every half purge delay),
 * `parking` is set, and until the next scan every local free of a class of fewer than
 * PARK_CAP blocks a superblock goes onto the class's current superblock while
 * that one's count is above -PARK_EXTRA, whatever the state of its own superblock: a thread
 * that replaces such blocks at random gets the block it freed last from its next malloc of
 * the class, and its superblocks change state only when the current one's count runs out.
 * The count is the bound: blocks parked on a current superblock are at most its live blocks
 * (fewer than PARK_CAP) plus PARK_EXTRA, and the scan's unpark_all gives them back to their
 * superblocks, as freed at the scan before. (With the count alone as the bound, a superblock
 * of 2-4 blocks took at most 2-4: in a mix of sizes a class's frees run ahead of its mallocs
 * by more than that, and each free past the bound, and each malloc after the list ran dry,
 * took a slow path. 4 more, the sixty-seventh session: 4,096 blocks replaced at random, half
 * of 16-271 B and half of 1,000-31,000 B, 428.5M -> 395.8M instructions (tcmalloc 363.2M),
 * 1.21x as fast, peak RSS 18.2 -> 15.5 MiB; rptest 110.2M -> 103.4M, workset-wide 217.5M ->
 * 208.7M. 2 more saved half as much; 8, 10% more, for 12% more peak RSS on reallocgrow (4:
 * 3-4%), whose buffers leave each class for the next as they grow.) Free's fast path does
 * not change: the thread's free key (_trove_tls_free, the heap's address) gets bit 0 set
 * while the heap parks, so no owner matches it and the local frees take _trove_free_other,
 * which hands them to free_parking.
 * There a conditional move picks the superblock, as classes that park and classes that do
 * not alternate at random in a mix of sizes. Tried on the fast path itself: a branch on the
 * class mispredicted enough to make mtmalloctest (16 B - 16 KiB) 8-10% slower; a conditional
 * move on every free cost 5 instructions a pair (ping-pong 0.89 of the time); behind a
 * per-heap flag, 2 (0.94). 256 blocks of 4 KiB replaced at random (bufpool) 1.34x,
 * posix_memalign of 16 B - 16 KiB blocks at 16 B - 4 KiB alignments (aligned) 1.23x,
 * workset-wide 1.17x; mtmalloctest, ping-pong level. Parking every class so, not only those
 * of few blocks a superblock, made threadtest's 8-byte rounds 10% slower (the next round's
 * blocks came from all over the heap). */
#define PARK_FAST_AFTER 64
static bool park(trove_heap_t *h, trove_sb_t *sb) {
  trove_sb_t *cur = h->cur[sb->cls];
  if (sb->state != TROVE_SB_FULL || sb->capacity >= PARK_CAP || cur->free != NULL ||
      cur->local_free != NULL || cur == &_trove_sb_empty || h->coarse || h->shared ||
      cur->carved < cur->capacity * cur->bsize)
    return false;
  trove_block_t *b = sb->free;             /* just pushed by the fast path: take it back */
  sb->free = b->next;
  sb->slack++;
  b->next = NULL;
  cur->free = b;
  cur->slack--;
  h->lists[sb->cls].parked_at = h->now_ms | 1;
  h->c.parked++;
  if (++h->parks == PARK_FAST_AFTER && !h->coarse && !h->shared) parking_set(h, true);
  return true;
}

/* The heap's thread frees through free_parking while `on` (its free key has bit 0 set). */
static void parking_set(trove_heap_t *h, bool on) {
  h->parking = on;
  if (h == _trove_tls_heap) _trove_tls_free = (trove_heap_t *)((uintptr_t)h | on);
}

static void parking_reset(trove_heap_t *h) {
  if (h->parking) parking_set(h, false);
  h->parks = 0;
}

/* A local free in a heap that parks: onto the class's current superblock while its count
 * allows (in the classes of fewer than PARK_CAP blocks a superblock), else as on the fast
 * path. Conditional moves, as the classes that park and those that do not alternate at
 * random in a mix of sizes. Parking is off in coarse mode and shared heaps (park,
 * coarse_set), so the current superblock is the class's own. */
static void free_parking(trove_heap_t *h, trove_sb_t *sb, trove_block_t *b) {
  trove_sb_t *to = h->cur[sb->cls];        /* &_trove_sb_empty (count 0) if none */
  /* its count plus PARK_EXTRA (0 or below if it does not park; _trove_sb_empty's is 0 -
   * PARK_CAP) */
  int32_t room = (to->slack + CURRENT_TRIGGER + PARK_EXTRA) & -(int32_t)(to->capacity < PARK_CAP);
#if defined(__x86_64__)
  __asm__("test %1, %1\n\tcmovg %2, %0" : "+r"(sb) : "r"(room), "r"(to) : "cc");
#else
  sb = room > 0 ? to : sb;
#endif
  b->next = sb->free;
  sb->free = b;
  if (unlikely(--sb->slack < 0)) _trove_free_slow(sb, h);
  else if (unlikely(--h->beat == 0)) _trove_heap_beat(h, sb);
}

static void free_local(trove_heap_t *h, trove_sb_t *sb, trove_block_t *b);
static void unpark(trove_heap_t *h, trove_sb_t *cur) {
  if (cur == &_trove_sb_empty || (h->lists[cur->cls].parked_at == 0 && cur->capacity >= PARK_CAP))
    return;
  /* Parked since the last scan of the current superblocks (a half purge delay ago; the
   * fast path notes no time): counted as freed then. */
  uint64_t d = (uint64_t)TROVE_OPT(PURGE_DELAY_MS) / 2 + 1;
  uint64_t at = h->cur_scan_ms > d ? h->cur_scan_ms - d : 0;
  if (at > h->now_ms) at = h->now_ms;
  h->lists[cur->cls].parked_at = 0;        /* a pop may have taken it: then none is found */
  uintptr_t lo = cur->start, n = cur->carved;
  for (trove_block_t **link = &cur->free, *b; (b = *link) != NULL;) {
    if ((uintptr_t)b - lo < n) {
      link = &b->next;
      continue;
    }
    *link = b->next;
    cur->slack++;
    uintptr_t a = (uintptr_t)b;
    trove_sb_t *home = _trove_sb_of(_trove_segment_of(a), a);
    if (_trove_sb_owner(home) != h) {
      _trove_free_other(b, home, 0);
      continue;
    }
    /* freed as of when it was parked (an empty superblock's age counts from the heap's
     * clock, see empty_push); `home` may be handed on inside, so not read after */
    uint64_t now = h->now_ms;
    h->now_ms = at;
    free_local(h, home, b);
    h->now_ms = now;
  }
}

static void unpark_all(trove_heap_t *h) {
  for (size_t c = 1; c < TROVE_CLASSES; c++)
    if (h->lists[c].parked_at || (h->cur[c]->capacity < PARK_CAP && h->cur[c]->free != NULL)) {
      unpark(h, h->cur[c]);
      h->lists[c].parked_at = 0;           /* no current one: its list had emptied */
    }
}

/* A park is the quick way out for a thread that replaces blocks at random, so it counts as
 * a fast free: the remote queue and the timed work wait for the heartbeat (every TROVE_BEAT-th
 * free), not for every 16th park. With a thread replacing one of 256 blocks of 4 KiB, every
 * free parks: 102 -> 91 instructions a malloc/free pair (bench/aligned --pool, callgrind). */
void _trove_free_slow(trove_sb_t *sb, trove_heap_t *h) {
  if (park(h, sb)) {
    if (unlikely(--h->beat == 0)) _trove_heap_beat(h, h->cur[sb->cls]);   /* it holds the block */
    return;
  }
  sb_underflow(h, sb);
  /* A thread that frees but never allocates must still collect what others freed into its
   * superblocks (say, blocks it adopted from an exited thread). */
  drain_remote(h);
  if ((++h->tick & 15) == 0) _trove_heap_maybe_purge(h);
}

static void free_local(trove_heap_t *h, trove_sb_t *sb, trove_block_t *b) {
  b->next = sb->free;
  sb->free = b;
  if (--sb->slack < 0) sb_underflow(h, sb);
}

/* Every TROVE_BEAT-th local free (see _trove_free_valid): what the slow paths do on their
 * ticks, for a thread whose mallocs and frees all stay on the fast paths (a loop that takes
 * and frees one block never runs out of free blocks). `sb`, freed into just now, is not idle
 * whatever its marks say: such a loop leaves the same head on its free list at every scan. */
void _trove_heap_beat(trove_heap_t *h, trove_sb_t *sb) {
  h->beat = TROVE_BEAT;
  __atomic_store_n(&sb->idle_mark, 0, __ATOMIC_RELAXED);
  batch_queue();
  drain_remote(h);
  _trove_heap_maybe_purge(h);
}

/* ------------------------------------------------------------------ remote frees */
static void push_block(_Atomic(trove_block_t *) *list, trove_block_t *b) {
  trove_block_t *head = atomic_load_explicit(list, memory_order_relaxed);
  do {
    b->next = head;
  } while (!atomic_compare_exchange_weak_explicit(list, &head, b, memory_order_release,
                                                  memory_order_relaxed));
}

/* The lane counter is per freeing thread: its pushes to one owner go round the lanes.
 * The flag is a Dekker pair, all seq_cst but the set: a push is CAS(lane), then load(flag),
 * setting the push's bits where they are clear; the owner exchanges the flag to 0, then loads
 * and takes each lane. If the owner's load of a lane misses a push, that push's CAS follows
 * the load in the single order of seq_cst operations, so the push's flag load follows the
 * owner's clear and sees it (or a later set): a block is never left in a lane with the flag
 * clear. A set ordered before the clear is released to it, so the owner's loads then see
 * that push's block. The set is a fetch_or, so that one push's bits never overwrite
 * another's (on 16 CPUs, one consumer freeing the blocks of 15 producers, handoff-in, ran
 * no slower with it than with a plain store: 0.161 s against 0.176, 9 runs). */
static void push_chain(trove_heap_t *owner, unsigned i, trove_block_t *first, trove_block_t *last) {
  _Atomic(trove_block_t *) *lane = &owner->remote[i];
  trove_block_t *head = atomic_load_explicit(lane, memory_order_relaxed);
  do {
    last->next = head;
  } while (!atomic_compare_exchange_weak_explicit(lane, &head, first, memory_order_seq_cst,
                                                  memory_order_relaxed));
}

/* After the pushes: the flag load follows every one of them (the argument above holds for
 * each). */
static void set_pending(trove_heap_t *owner, uint32_t flags) {
  uint32_t was = atomic_load_explicit(&owner->remote_pending, memory_order_seq_cst);
  if ((was & flags) != flags)
    atomic_fetch_or_explicit(&owner->remote_pending, flags, memory_order_release);
}

static void push_remote(trove_heap_t *owner, trove_block_t *b, uint32_t flags) {
  unsigned i = remote_lane;
  remote_lane = i + 1 == TROVE_REMOTE_LANES ? 0 : i + 1;
  push_chain(owner, i, b, b);
  set_pending(owner, flags);
}

/* Remote frees in batches. A thread holds the small blocks it frees for another heap (one
 * owner at a time) and queues them together: up to REMOTE_BATCH_BLOCKS, dealt round the lanes
 * as single pushes are, so each lane takes one chain with one compare-and-swap and the owner
 * still walks the lanes side by side (drain_remote_queue). A push costs more than its
 * compare-and-swap: as a locked instruction it waits for the freeing thread's earlier loads
 * and stores, among them its program's last read of the block and free's tag and link, on
 * lines the allocating core wrote last; so each free serialized the thread's cache misses,
 * which in a batch overlap. One producer and one consumer of 32-512 B messages
 * (bench/handoff -t 2) had 43% of their samples on that instruction (perf); batched, the same
 * misses show where the consumer reads each message, and overlap: 1.05-1.14 times the
 * messages a second at 2 threads, 1.06-1.32 at 8 (docs/BENCHMARKS.md, thirty-second session).
 * An earlier batch of one chain
 * in one lane lost as much in the owner's walk, one dependent miss at a time
 * (docs/BENCHMARKS.md, "Tried and left: batching remote frees").
 * Bounds: REMOTE_BATCH_BLOCKS blocks of at most REMOTE_BATCH_MAX_SIZE (27 KiB) per thread.
 * Queued at a change of owner, on the thread's slow mallocs and heartbeat, at trove_collect
 * and malloc_trim, before a fork and at thread exit: the pthread key's destructor, which a
 * thread without a heap (one that only frees) gets at its first remote free; after it, the
 * thread's frees are queued one by one (batch_state). Blocks in a batch stay counted live in
 * their superblocks, which so cannot be released under them; an owner that exits or hands
 * its superblocks back meanwhile gets them on its queue as a single push arriving late would
 * (drain_remote_queue forwards them). */
#define REMOTE_BATCH_BLOCKS (4 * TROVE_REMOTE_LANES)
#define REMOTE_BATCH_MAX_SIZE 1024        /* larger blocks are queued one by one */
typedef struct remote_batch_s {
  trove_heap_t *owner;                     /* NULL: none held; low bit set: for its orphans */
  trove_block_t *head[TROVE_REMOTE_LANES], *tail[TROVE_REMOTE_LANES];
  uint32_t n, lane;                        /* blocks held; the lane of the next one */
} remote_batch_t;
static __thread remote_batch_t batch __attribute__((tls_model("initial-exec")));
enum { BATCH_UNHOOKED = 0, BATCH_ON, BATCH_EXITED };
static __thread uint8_t batch_state __attribute__((tls_model("initial-exec")));

/* An owner whose thread has exited meanwhile (parked) may have handed its superblocks back
 * (heaps_expire), and then no thread may take its queue for a long time: each block goes
 * where a free would send it now (route_block: the pool, or the heap that owns it). */
static void orphans_push(trove_heap_t *home, trove_block_t *first, trove_block_t *last);
static TROVE_NOINLINE void batch_flush(void) {
  trove_heap_t *owner = (trove_heap_t *)((uintptr_t)batch.owner & ~(uintptr_t)1);
  unsigned used = batch.n < TROVE_REMOTE_LANES ? batch.n : TROVE_REMOTE_LANES;
  bool parked = parked_since(owner) != 0;
  if (((uintptr_t)batch.owner & 1) && !parked) {   /* orphans (free_to_abandoner): one chain */
    for (unsigned i = 0; i + 1 < used; i++) batch.tail[i]->next = batch.head[i + 1];
    orphans_push(owner, batch.head[0], batch.tail[used - 1]);
    for (unsigned i = 0; i < used; i++) batch.head[i] = NULL;
    batch.owner = NULL;
    batch.n = batch.lane = 0;
    return;
  }
  for (unsigned i = 0; i < used; i++) {
    if (unlikely(parked)) {
      for (trove_block_t *b = batch.head[i], *next; b; b = next) {
        next = b->next;
        uintptr_t a = (uintptr_t)b;
        route_block(_trove_sb_of(_trove_segment_of(a), a), b);
      }
    } else {
      push_chain(owner, i, batch.head[i], batch.tail[i]);
    }
    batch.head[i] = NULL;
  }
  if (!parked) set_pending(owner, REMOTE_PENDING);
  batch.owner = NULL;
  batch.n = batch.lane = 0;
}

static inline void batch_queue(void) {
  if (batch.owner != NULL) batch_flush();
}

/* b goes onto the chain of the next lane in turn (the batch has room and an owner). */
static inline void batch_push(trove_block_t *b) {
  unsigned i = batch.lane;
  trove_block_t *head = batch.head[i];
  b->next = head;
  batch.head[i] = b;
  if (head == NULL) batch.tail[i] = b;
  batch.lane = i + 1 == TROVE_REMOTE_LANES ? 0 : i + 1;
  batch.n++;
}

static TROVE_NOINLINE void batch_add_slow(trove_heap_t *owner, trove_block_t *b);
/* Only tail calls leave it: inlined into _trove_free_other, it saves no register. */
static inline void batch_add(trove_heap_t *owner, trove_block_t *b) {
  if (unlikely(batch.owner != owner || batch.n == REMOTE_BATCH_BLOCKS - 1)) {
    batch_add_slow(owner, b);
    return;
  }
  batch_push(b);
}

/* A new owner, or the batch's last block: the batch is queued when full.
 * A thread that only frees must still let time-based work happen (pool sweep, purge): a
 * full batch is 28 frees. */
static TROVE_NOINLINE void batch_add_slow(trove_heap_t *owner, trove_block_t *b) {
  if (batch.owner != owner) {
    batch_queue();
    batch.owner = owner;
  }
  batch_push(b);
  if (batch.n == REMOTE_BATCH_BLOCKS) {
    batch_flush();
    if ((++remote_ticks & 1) == 0) _trove_heap_maybe_purge(_trove_tls_heap);
  }
}

/* A block above REMOTE_BATCH_MAX_SIZE, queued alone (as every remote free was before the
 * batches). A thread that only frees must still let time-based work happen (pool sweep,
 * purge). */
static TROVE_NOINLINE void remote_free_one(trove_heap_t *owner, trove_block_t *b) {
  push_remote(owner, b, REMOTE_PENDING);
  if ((++remote_ticks & 63) == 0) _trove_heap_maybe_purge(_trove_tls_heap);
}

/* Whether the thread may hold a batch: a thread without a heap gets the exit hook (the
 * pthread key's destructor flushes) at its first remote free; once its exit has begun, no. */
static bool batch_hooked(void) {
  if (batch_state == BATCH_UNHOOKED &&
      pthread_setspecific(_trove_thread_key, &_trove_heap_empty) == 0)
    batch_state = BATCH_ON;
  return batch_state == BATCH_ON;
}

/* A remote free of a thread without a heap, or in its exit: the thread's first such free
 * hooks its exit (a thread with a heap has the hook already, see thread_heap_init), and once
 * its exit has begun the block is queued alone. */
static void remote_free_headless(trove_heap_t *owner, trove_block_t *b, uint32_t size) {
  if (batch_hooked() && size <= REMOTE_BATCH_MAX_SIZE) batch_add(owner, b);
  else push_remote(owner, b, REMOTE_PENDING);
}

void _trove_heap_flush_remote(void) { batch_queue(); }

/* A hint: a set may show late; the next check sees it. */
static inline bool remote_pending(trove_heap_t *h) {
  return atomic_load_explicit(&h->remote_pending, memory_order_relaxed) != 0;
}

/* Take every non-empty lane of h's queue, and its orphans: their chains go to lanes[0..*n)
 * (room for TROVE_REMOTE_LANES + 1). */
static void remote_take(trove_heap_t *h, trove_block_t **lanes, unsigned *n) {
  atomic_exchange_explicit(&h->remote_pending, 0, memory_order_seq_cst);
  for (unsigned i = 0; i < TROVE_REMOTE_LANES; i++) {
    if (atomic_load_explicit(&h->remote[i], memory_order_seq_cst) == NULL) continue;
    trove_block_t *b = atomic_exchange_explicit(&h->remote[i], NULL, memory_order_seq_cst);
    if (b) lanes[(*n)++] = b;
  }
  if (atomic_load_explicit(&h->orphans, memory_order_seq_cst) != NULL) {
    trove_block_t *b = atomic_exchange_explicit(&h->orphans, NULL, memory_order_seq_cst);
    if (b) lanes[(*n)++] = b;
  }
}

/* Another thread takes h's whole queue (a dead heap's, or an idle heap's for its medium
 * runs), as one chain. */
static trove_block_t *queue_take_all(trove_heap_t *h) {
  trove_block_t *lanes[TROVE_REMOTE_LANES + 1], *all = NULL;
  unsigned n = 0;
  remote_take(h, lanes, &n);
  for (unsigned i = 0; i < n; i++)
    for (trove_block_t *b = lanes[i], *next; b; b = next) {
      next = b->next;
      b->next = all;
      all = b;
    }
  return all;
}

static void free_abandoned(trove_sb_t *sb, trove_block_t *b);
static void free_to_abandoner(trove_sb_t *sb, trove_block_t *b);

/* Queue a freed block where its superblock's owner will find it: the owner heap's remote
 * queue, or the superblock's own list while it is in the pool (an abandoned one: the calling
 * thread adopts it). Takes no lock. */
static void route_block(trove_sb_t *sb, trove_block_t *b) {
  if (sb->kind == TROVE_SPAN_MEDIUM) {       /* its heap is gone: the page heap takes it */
    _trove_pages_free(sb);
    return;
  }
  trove_heap_t *owner = atomic_load_explicit(&sb->heap, memory_order_acquire);
  if (owner == TROVE_ABANDONED) free_abandoned(sb, b);
  else if (owner) push_remote(owner, b, REMOTE_PENDING);
  else pool_free_block(sb, b);
}

static trove_heap_t *thread_heap_init(trove_heap_t *want);
static void free_local(trove_heap_t *h, trove_sb_t *sb, trove_block_t *b);

/* ------------------------------------------------------------------ medium runs */
/* A thread keeps the medium runs it frees and reuses them without the page heap lock: a bin
 * per length (9-128 pages) and a bitmap of the bins that hold some, so a malloc finds a run of
 * its length or up to 1/4 longer in a few instructions. The bound is 2 MiB, plus a burst: the
 * medium pages the thread freed since its last medium malloc, when more than 2 MiB, and no
 * more than it held before the burst (`medium_net` + the burst) nor the batch it allocated
 * just before it (`mbatch`: a thread that takes a batch and frees a batch keeps a batch):
 * - a thread that frees a batch of buffers and then allocates the next batch (I/O buffers,
 *   decoded objects, a ring it fills and drains) keeps the whole batch. Bounded by what it
 *   still held (and half of all pages in use), the cache fell to 2 MiB as the batch ended:
 *   one thread filling and draining a ring of 1,024 buffers of 64-256 KiB (bench/handoff)
 *   took each buffer from the page heap, 0.15-0.24 s a run (mimalloc 0.11-0.17), now 0.06;
 * - where frees and mallocs of random lengths alternate, a cache can only fill up with the
 *   lengths no malloc wants (each length's count wanders, and the runs it holds cannot
 *   coalesce): with the batch term left out, sizesweep's peak RSS at 2 threads went from
 *   66 to 72 MiB; so there the bound stays near 2 MiB;
 * - but while other threads take fresh pages (not resident: none free in the page heap fit),
 *   a burst kept here is memory they fault in anew: 8 threads building and freeing phases of
 *   64-128 KiB buffers out of step on 2 cores (bench/phases --wide) peaked at 283 MiB
 *   instead of 218. For 1/8 of the purge delay after this heap sees another thread's fresh
 *   pages (the page heap's count, _trove_pages_fresh, less the ones it took itself), the
 *   bound is the earlier one: what it still holds, and half of all pages in use. And when it
 *   takes fresh pages itself, the runs it keeps do not fit its requests: they go back to the
 *   page heap, where they merge with their neighbours;
 * - a thread that frees what others allocated (net negative) keeps 2 MiB, and the part above
 *   2 MiB, summed over threads, is at most the medium pages they held at their bursts' start
 *   (at most the recent peak of those live), for 1/8 of the purge delay: Hoard's A = O(U + P)
 *   holds with U that peak, as the page heap's dirty cap does (1.25x the recent peak). Out of
 *   memory, a thread gives its cache back and tries again (_trove_heap_release_cache); a
 *   thread that frees a burst and then waits has it given back by the timed work of any
 *   other thread (sweep_idle_caches), under the cache's lock.
 * A run waits at most 1/8 of the purge delay (medium_cache_trim), and the cache follows the
 * bound down when it falls. Before this cache (8 runs, 2 MiB), bench/holes at 2 threads (each
 * frees half of 285 MiB of 64-128 KiB buffers, then allocates as much) spent its time waiting
 * for the page heap lock (42,000 waits, 7,000 context switches) and faulting in pages purged
 * meanwhile: 0.33-0.41 s, now 0.06 s (mimalloc 0.05-0.07). */
#define TROVE_MCACHE_FIXED (((size_t)2 << 20) >> TROVE_PAGE_SHIFT)
#define TROVE_MCACHE_FIXED_ALL (((size_t)32 << 20) >> TROVE_PAGE_SHIFT)   /* see mcache_fixed */

static size_t mcache_bin(size_t npages) { return npages - TROVE_MCACHE_MIN_PAGES; }

/* CPUs in the affinity mask, read once (the thread-count rules below and in
 * find_superblock_rest compare live heaps with it). */
static size_t ncpus(void) {
  static _Atomic size_t n;
  size_t v = atomic_load_explicit(&n, memory_order_relaxed);
  if (v == 0) {
    v = _trove_os_ncpus();
    atomic_store_explicit(&n, v, memory_order_relaxed);
  }
  return v;
}

/* Two thresholds on live thread heaps per CPU. Past 8 (`crowded`: a thread per connection,
 * most of them waiting) coarse mode, the shared heaps and no fixed part in the medium cache.
 * Past 5 (`many_threads`) the lean rules that cost a thread that works hard little: short
 * first superblocks and first borrows (find_superblock_rest, borrow) and a smaller fixed part
 * (mcache_fixed). 5, not 4: a benchmark of 4 workers per CPU has its main thread's heap too.
 * bench/manythreads --conns 12 -t 1 on 2 CPUs (6 per CPU; 100 threads on 16 CPUs is the same
 * ratio) took 27.7 MiB of peak RSS with only the rules past 8 per CPU and ran 2.4M requests/s,
 * against
 * 13.3 MiB and 3.8 M requests/s with these (glibc 5.7 MiB, jemalloc 16.2; medians of 7); the
 * short superblocks alone gave 23.7 MiB, the smaller fixed part alone 21. The costs at 12
 * threads on 2 CPUs (9 runs): mtmalloctest 16.7 -> 18.6 MiB (a thread past its short first
 * superblock of a class holds two partly carved runs of it); phases --wide, larson,
 * threadtest, shbench --wide, xmalloc, mstress, holes, sizesweep and handoff level. */
#define TROVE_CROWDED_PER_CPU 8
#define TROVE_MANY_PER_CPU 5
static bool crowded(void) {
  return atomic_load_explicit(&heaps_alive, memory_order_relaxed) > TROVE_CROWDED_PER_CPU * ncpus();
}
static bool many_threads(void) {
  return atomic_load_explicit(&heaps_alive, memory_order_relaxed) > TROVE_MANY_PER_CPU * ncpus();
}

/* The fixed part: 2 MiB, but the live threads' fixed parts together at most 8 MiB per CPU, 2
 * MiB per CPU past 5 threads per CPU, and never more than 32 MiB (tcmalloc bounds its thread
 * caches' total the same way, 32 MiB by default). Without the 32 MiB, on 16 CPUs each of 64
 * threads of bench/manythreads --conns 64 kept its 2 MiB: 184 MiB of peak RSS, 127 with it
 * (jemalloc 85), and 7.9M -> 10.7M requests/s from the faults saved; with 32 threads 94 -> 72
 * MiB. What it cost there: handoff-medium (64-256 KiB buffers handed to one thread) with 32
 * and 64 threads ran 4% slower, in 5% and 20% less memory (medians of 5). On up to 4 CPUs the
 * per-CPU bound is the smaller one. A thread per connection that reads into buffers of 100-200
 * KiB kept them all: 200 threads, each done with 4 such buffers, held 155 MiB (glibc 19.6,
 * jemalloc 16.8, tcmalloc 94, mimalloc 305). With 4 threads per CPU or fewer, as in every
 * benchmark of the suite, each keeps its 2 MiB: a handoff of 64-256 KiB buffers from 7 threads
 * to one on 2 CPUs ran 0.245 s with it, 0.33 s with 2 MiB per CPU for all. Past 5 per CPU the
 * threads that do not share a CPU keep a cache's worth between them: a cache of random lengths
 * holds what its thread's next mallocs mostly do not fit (bench/manythreads, one 64-256 KiB
 * buffer every 16th request, 12 threads on 2 CPUs: the caches held 14.5 MiB of its 29 MiB of
 * RSS). Past 8 threads per CPU there is no fixed part (the batch term stays): such threads
 * take turns on the CPUs, and a run one of them caches waits for that thread's next medium
 * malloc of the same length, while in the page heap any thread's malloc of any length up to it
 * reuses its pages. bench/manythreads at 100 threads (a 64-256 KiB buffer every 16th request)
 * kept 13 MiB in these caches: peak RSS 57.6 -> 43.8 MiB, time 0.048 -> 0.043 s (jemalloc 51.6
 * MiB, 0.039 s); at 800 threads the share was already near nothing.
 */
static size_t mcache_fixed_of(size_t alive) {
  size_t n = ncpus();
  if (alive > TROVE_CROWDED_PER_CPU * n) return 0;
  size_t b = TROVE_MCACHE_FIXED * (alive > TROVE_MANY_PER_CPU * n ? 1 : 4) * n;
  if (b > TROVE_MCACHE_FIXED_ALL) b = TROVE_MCACHE_FIXED_ALL;
  return alive * TROVE_MCACHE_FIXED <= b ? TROVE_MCACHE_FIXED : b / alive;
}
/* Every medium free reads it (the quick one too), and the live thread count it follows
 * changes rarely: the last one worked out is kept with the count it was for, both in one
 * word, so that a reader never pairs a count with another count's value (the bounds and the
 * divide were 22 instructions a call, 5% of a medium malloc/free loop's). The check inline,
 * the work out of line: as a call, the check itself was 15 instructions of each quick free. */
static _Atomic uint64_t mcache_fixed_memo;   /* (count + 1) << 32 | pages; 0: none yet */
static TROVE_NOINLINE size_t mcache_fixed_new(uint64_t alive) {
  size_t fixed = mcache_fixed_of((size_t)alive);
  atomic_store_explicit(&mcache_fixed_memo, (alive + 1) << 32 | fixed, memory_order_relaxed);
  return fixed;
}
/* The memo's pages in *fixed if it is for the live count now (else the count, for _new) */
static inline bool mcache_fixed_memo_hit(size_t *fixed, uint64_t *alive) {
  *alive = atomic_load_explicit(&heaps_alive, memory_order_relaxed);
  uint64_t m = atomic_load_explicit(&mcache_fixed_memo, memory_order_relaxed);
  *fixed = (size_t)(uint32_t)m;
  return m >> 32 == *alive + 1;
}
static inline size_t mcache_fixed(void) {
  size_t fixed;
  uint64_t alive;
  if (likely(mcache_fixed_memo_hit(&fixed, &alive))) return fixed;
  return mcache_fixed_new(alive);
}

/* Other threads took fresh pages (the page heap's count, less those this heap took itself)
 * within 1/8 of the purge delay, as of the heap's last tick. */
static bool others_fresh(trove_heap_t *h) {
  uint64_t f = _trove_pages_fresh();
  if (f != h->fresh_seen) {
    h->fresh_seen = f;
    h->fresh_others_ms = h->now_ms;
  }
  return h->now_ms - h->fresh_others_ms < (uint64_t)TROVE_OPT(PURGE_DELAY_MS) / 8 &&
         h->fresh_others_ms != 0;
}

/* The cap, and in `*steady` the part of it past the fixed part that the frees of the batch
 * under way cannot lower (see mquick_extra, below): where no other thread takes fresh pages,
 * each free moves its pages from `net` to `streak`, so `before` stays, the burst only grows and
 * `mbatch` is the batch's; where others do, `extra` falls as `net` does, and none is steady. */
static size_t mcache_cap(trove_heap_t *h, size_t *steady) {
  size_t net = h->medium_net > 0 ? (size_t)h->medium_net : 0, streak = h->mfree_streak;
  *steady = 0;
  if (others_fresh(h)) {
    size_t half_used = _trove_pages_used() / 2, extra = net < half_used ? net : half_used;
    return mcache_fixed() + (streak < extra ? streak : extra);
  }
  size_t before = net + streak, burst = streak > TROVE_MCACHE_FIXED ? streak : 0;
  if (burst > h->mbatch) burst = h->mbatch;   /* at most the batch it allocated before */
  *steady = burst < before ? burst : before;
  return mcache_fixed() + *steady;
}

/* Calls of give_back_unfit (fresh pages taken, by any thread): a clock of growth. */
static _Atomic uint32_t unfit_calls;

/* For give_back_others: stores only when the tick's clock or the fresh-page count moved
 * (other threads read them). */
static void note_medium(trove_heap_t *h) {
  if (atomic_load_explicit(&h->medium_ms, memory_order_relaxed) != h->now_ms)
    atomic_store_explicit(&h->medium_ms, h->now_ms, memory_order_relaxed);
  uint32_t u = atomic_load_explicit(&unfit_calls, memory_order_relaxed);
  if (atomic_load_explicit(&h->medium_unfit, memory_order_relaxed) != u)
    atomic_store_explicit(&h->medium_unfit, u, memory_order_relaxed);
}

static void mcache_unlink(trove_heap_t *h, trove_sb_t *run) {
  size_t b = mcache_bin(run->npages);
  list_remove(&h->mcache[b], run);
  if (h->mcache[b] == NULL) h->mcache_map[b / 64] &= ~((uint64_t)1 << (b % 64));
  __atomic_store_n(&h->mcache_pages, h->mcache_pages - run->npages, __ATOMIC_RELAXED);   /* peeked */
}

/* The head of bin `b` (which holds one), the most recently freed run of its length. */
static trove_sb_t *mcache_pop(trove_heap_t *h, size_t b) {
  trove_sb_t *run = h->mcache[b], *next = run->next;
  h->mcache[b] = next;
  if (next != NULL) next->prev = NULL;
  else h->mcache_map[b / 64] &= ~((uint64_t)1 << (b % 64));
  run->next = NULL;
  __atomic_store_n(&h->mcache_pages, h->mcache_pages - run->npages, __ATOMIC_RELAXED);   /* peeked */
  return run;
}

static void mcache_trim_locked(trove_heap_t *h, uint64_t now, bool all);
static void medium_cache_trim(trove_heap_t *h, bool all);

/* The cache's lock. Its owner takes it for each use (uncontended: one exchange), so that the
 * timed work of another thread can give back what an idle thread keeps (sweep_idle_caches):
 * a thread that frees a burst of buffers and then waits for its next job would otherwise
 * keep the burst until its next medium call. (The timed work's own trim looks at the count
 * first, and takes the lock only for a cache that holds something: medium_cache_trim.) */
static TROVE_NOINLINE void mc_lock_wait(trove_heap_t *h) {
  do
    while (atomic_load_explicit(&h->mcache_lock, memory_order_relaxed)) sched_yield();
  while (atomic_exchange_explicit(&h->mcache_lock, 1, memory_order_acquire));
}
/* The wait out of line, so that a caller saves no register for it. (The medium quick paths
 * do not wait: they take the lock with one exchange and, finding it held by a sweep, leave
 * the call to the slow path, which waits here.) */
static inline void mc_lock(trove_heap_t *h) {
  if (unlikely(atomic_exchange_explicit(&h->mcache_lock, 1, memory_order_acquire))) mc_lock_wait(h);
}
static bool mc_trylock(trove_heap_t *h) {
  return atomic_load_explicit(&h->mcache_lock, memory_order_relaxed) == 0 &&
         atomic_exchange_explicit(&h->mcache_lock, 1, memory_order_acquire) == 0;
}
static void mc_unlock(trove_heap_t *h) {
  atomic_store_explicit(&h->mcache_lock, 0, memory_order_release);
}

/* Hand back cached runs, the shortest first, until the cache holds `keep` pages. `now` is the
 * caller's clock: the owner's tick, or another thread's own reading (the owner writes its
 * tick outside the cache's lock). */
static void mcache_shrink(trove_heap_t *h, size_t keep, uint64_t now) {
  while (h->mcache_pages > keep) {
    size_t w = h->mcache_map[0] ? (size_t)__builtin_ctzll(h->mcache_map[0])
                                : 64 + (size_t)__builtin_ctzll(h->mcache_map[1]);
    trove_sb_t *old = h->mcache[w];
    mcache_unlink(h, old);
    _trove_pages_free_clock(old, 0, now);
  }
}

/* The medium quick paths. A thread that takes and frees medium buffers in turn (a read
 * buffer per request, a compression window per file) reuses its cached runs, but each call
 * went through the chores of a slow path: malloc_slow's (the tick, the remote queue), and on
 * a free a clock read, the age trim and the cap (mcache_cap). A malloc/free pair of 128 KiB
 * took about 400 instructions (callgrind) and 57 ns, where tcmalloc (whose thread caches hold
 * blocks up to 256 KiB) took 14 ns and mimalloc 3 20. So all but one of MQUICK_PERIOD medium
 * mallocs, and apart all but one of MQUICK_PERIOD medium frees, skip them: a malloc takes a
 * cached run under the cache's lock and does nothing else, and a free caches its run so as
 * long as the cache stays within the fixed part of the cap (mcache_fixed, below which the cap
 * never falls; none while threads crowd the CPUs), or within the part of the cap the last slow
 * free found that the frees of its batch cannot lower (`mquick_extra`, see mcache_cap; void
 * from the next medium malloc, or once another thread takes fresh pages, when the cap may
 * fall). (With the fixed part alone, a thread that freed a burst past it, as one that frees
 * the buffers it queued for itself, took the slow path at every free: handoff-medium at one
 * thread, 60.0M -> 50.5M instructions.) A malloc the cache cannot serve takes its run from
 * the page heap, and a free that does not fit gives its run to the page heap, on the quick
 * path too, where the slow path's cap would be the fixed part as well (medium_quick_pages,
 * medium_quick_unfit). The next call of each kind, and any free that may fit a cap the slow
 * path works out, takes the slow path, which does the chores and resets its count: that bounds
 * how many calls the chores wait for (as TROVE_BEAT does for small frees), and the age trim
 * comes within MQUICK_PERIOD frees. (Counted together, a thread that mallocs and frees in turn
 * sent every slow call to its mallocs, and its frees never trimmed.) The timed work
 * (_trove_heap_maybe_purge) still runs every 32nd medium malloc, quick or not, since a thread
 * may make no other calls. Between slow frees the heap's clock (`now_ms`) stands still: a run
 * freed meanwhile is stamped older than it is, so it is trimmed sooner, not later. Nor do the
 * quick calls mark the heap's medium use for give_back_others (note_medium): the slow ones
 * do, every MQUICK_PERIOD calls at most, and what that gives back is the cache past its fixed
 * part, of a thread that made no medium call for a while. */
#define MQUICK_PERIOD 16
static void mquick_takes_reset(trove_heap_t *h) { h->mquick_takes = MQUICK_PERIOD - 1; }
/* None with a purge delay under 8 ms: then the age trim keeps no run but the one freed last,
 * which the quick frees would leave to the next slow one. */
static void mquick_frees_reset(trove_heap_t *h) {
  h->mquick_frees = TROVE_OPT(PURGE_DELAY_MS) / 8 != 0 ? MQUICK_PERIOD - 1 : 0;
}

/* The accounting of a medium free of `npages` pages by the heap's own thread. */
static void medium_freed(trove_heap_t *h, size_t npages) {
  h->medium_net -= (int64_t)npages;
  if (h->mfree_streak == 0) {              /* a batch of frees starts: the mallocs' ends */
    h->mbatch = h->mmalloc_streak;
    h->mmalloc_streak = 0;
  }
  h->mfree_streak += npages;
}

/* Into the cache (its lock held), stamped `now`. */
static void mcache_put_locked(trove_heap_t *h, trove_sb_t *run, uint64_t now) {
  size_t b = mcache_bin(run->npages);
  run->state = TROVE_SB_POOL;              /* "not live", for the statistics */
  run->dirty = 1;
  run->freed_at = now;
  if (h->mcache_pages == 0) h->mcache_oldest = now;
  list_push(&h->mcache[b], run);
  h->mcache_map[b / 64] |= (uint64_t)1 << (b % 64);
  __atomic_store_n(&h->mcache_pages, h->mcache_pages + run->npages, __ATOMIC_RELAXED);
}

static bool mcache_fits(const trove_sb_t *run) {
  return run->npages >= TROVE_MCACHE_MIN_PAGES && run->npages <= TROVE_MCACHE_MAX_PAGES;
}

static void medium_free(trove_heap_t *h, trove_sb_t *run);
/* A quick free whose run does not fit the cache (the cache's lock held, released here). Where
 * medium_free's cap would be the fixed part too (no other thread took fresh pages lately, no
 * burst of frees past the fixed part under way, the cache within it), the run goes to the
 * page heap here; else medium_free works the cap out. Apart, so that the cache's hit saves no
 * register for it. */
static TROVE_NOINLINE void medium_quick_unfit(trove_heap_t *h, trove_sb_t *run, size_t fixed) {
  size_t npages = run->npages;
  bool fixed_cap = h->mfree_streak + npages <= TROVE_MCACHE_FIXED && h->mcache_pages <= fixed &&
                   !(h->fresh_others_ms != 0 &&
                     h->now_ms - h->fresh_others_ms < (uint64_t)TROVE_OPT(PURGE_DELAY_MS) / 8) &&
                   _trove_pages_fresh() == h->fresh_seen;
  mc_unlock(h);
  if (!fixed_cap) {
    medium_free(h, run);
    return;
  }
  h->mquick_frees--;
  medium_freed(h, npages);
  _trove_pages_free(run);                  /* a clock read: the heap's may be a while old */
}

/* The quick medium free (see above) of `run`, which `h`, the calling thread's heap, allocated;
 * medium_free if it does not fit. */
static TROVE_NOINLINE void medium_quick_free(trove_heap_t *h, trove_sb_t *run) {
  /* Every call out of it is a tail call, so that it saves no register: a lock another thread
   * holds (a sweep) or a thread count changed since the fixed part was worked out send the
   * run to medium_free, which waits for the lock and works the part out. */
  if (h->mquick_frees == 0 || !mcache_fits(run) ||
      atomic_exchange_explicit(&h->mcache_lock, 1, memory_order_acquire)) {
    medium_free(h, run);
    return;
  }
  size_t fixed;
  uint64_t alive;
  if (unlikely(!mcache_fixed_memo_hit(&fixed, &alive))) {
    mc_unlock(h);
    medium_free(h, run);
    return;
  }
  size_t after = h->mcache_pages + run->npages;
  if (after > fixed) {
    if (after > fixed + h->mquick_extra) {
      medium_quick_unfit(h, run, fixed);
      return;
    }
    if (_trove_pages_fresh() != h->fresh_seen) {   /* the cap may fall: medium_free's call */
      mc_unlock(h);
      medium_free(h, run);
      return;
    }
  }
  size_t npages = run->npages;             /* once unlocked, a sweep may hand `run` on */
  mcache_put_locked(h, run, h->now_ms);
  mc_unlock(h);
  h->mquick_frees--;
  medium_freed(h, npages);
}

static void medium_free(trove_heap_t *h, trove_sb_t *run) {
  if (h != &_trove_heap_empty) {
    medium_freed(h, run->npages);
    h->now_ms = _trove_os_now_ms();
    note_medium(h);
    mquick_frees_reset(h);
    mc_lock(h);
    mcache_trim_locked(h, h->now_ms, false);
    size_t cap = mcache_cap(h, &h->mquick_extra);
    if (mcache_fits(run) && h->mcache_pages + run->npages <= cap) {
      mcache_put_locked(h, run, h->now_ms);
      mc_unlock(h);
      return;
    }
    /* The cap falls as the thread frees what it holds (a thread winding down frees nearly all
     * of it): hand back two cached runs for each one that does not fit, the shortest first,
     * so the cache follows the cap down. */
    for (int k = 0; k < 2 && h->mcache_pages > cap; k++)
      mcache_shrink(h, h->mcache_pages - 1, h->now_ms);
    mc_unlock(h);
    _trove_pages_free_clock(run, 0, h->now_ms);   /* the clock just read: a vDSO call less */
    return;
  }
  _trove_pages_free(run);
}

/* A cached run of `npages` pages, or longer by at most 1/4 of `size` (as much as a borrowed
 * small block may be); the most recently freed of the shortest length that fits. With 1/8 (the
 * waste of a size class), a thread's cache of runs of random lengths often held none its next
 * request fitted, and each such miss took the page heap's lock twice: for the malloc, and for
 * a later free that found the cache full. 64-256 KiB buffers handed by 7 / 15 threads to one
 * on 16 CPUs (handoff-medium): 0.0540 -> 0.0470 s / 0.0495 -> 0.0456 s (mimalloc 0.0462 /
 * 0.0396); one pair 0.197 -> 0.170 s; 256 buffers of 4-256 KiB replaced at random (bufswap,
 * one thread) 0.229 -> 0.173 s (tcmalloc 0.159); medians of 5-7. The cost: sizesweep at one
 * thread (32 blocks of up to 1 MiB) peaks at 36.2 MiB instead of 34.5 (mimalloc 35.7, glibc
 * 25.4); with the part past 1/8 given back to the page heap, the peak stayed at 36.0 and the
 * gain was gone. With 1/2, handoff-medium gained a little more and sizesweep peaked at 37.1. */
static trove_sb_t *medium_cache_take(trove_heap_t *h, size_t size, size_t npages, size_t align) {
  size_t last = (size + size / 4) >> TROVE_PAGE_SHIFT;
  if (last > TROVE_MCACHE_MAX_PAGES) last = TROVE_MCACHE_MAX_PAGES;
  if (npages < TROVE_MCACHE_MIN_PAGES || last < npages) return NULL;
  /* Aligned past a page: a run that starts so aligned (as those of such requests came from
   * the page heap), among the first few of each length. Through the page heap, 16 blocks of
   * posix_memalign(64 KiB, 64 KiB) replaced at random took its lock twice a call: 300 ns a
   * call (tcmalloc 140, mimalloc 3 42, glibc 11.6 us); now 69 ns. */
  if (align > TROVE_PAGE_SIZE) {
    for (size_t b = mcache_bin(npages), lb = mcache_bin(last); b <= lb; b++) {
      if (((h->mcache_map[b / 64] >> (b % 64)) & 1) == 0) continue;
      unsigned look = 4;
      for (trove_sb_t *run = h->mcache[b]; run && look; run = run->next, look--)
        if ((run->start & (align - 1)) == 0) {
          mcache_unlink(h, run);
          run->state = 0;
          return run;
        }
    }
    return NULL;
  }
  for (size_t b = mcache_bin(npages), lb = mcache_bin(last); b <= lb; b = (b | 63) + 1) {
    uint64_t m = h->mcache_map[b / 64] >> (b % 64);
    if (m == 0) continue;
    b += (size_t)__builtin_ctzll(m);
    if (b > lb) break;
    trove_sb_t *run = mcache_pop(h, b);
    run->state = 0;
    return run;
  }
  return NULL;
}

/* Give the page heap the runs cached longer than 1/8 of the purge delay (all of them if `all`):
 * a run that no malloc of its length took for that long is not in a batch the thread is about
 * to allocate again. Without this the cache fills to its cap: where frees and mallocs of
 * random lengths alternate (bench/stability's mixed phase), each length's count wanders up
 * and down and only the cap stops it (peak RSS +17%). A walk of the whole cache, so it runs
 * only when the oldest run may be due. */
static void mcache_trim_locked(trove_heap_t *h, uint64_t now, bool all) {
  uint64_t age = (uint64_t)TROVE_OPT(PURGE_DELAY_MS) / 8;
  if (h->mcache_pages == 0 || (!all && now - h->mcache_oldest < age)) return;
  uint64_t oldest = UINT64_MAX;
  for (size_t b = 0; b < TROVE_MCACHE_BINS; b++)
    for (trove_sb_t *run = h->mcache[b], *next; run; run = next) {
      next = run->next;
      if (all || now - run->freed_at >= age) {
        mcache_unlink(h, run);
        _trove_pages_free(run);
      } else if (run->freed_at < oldest) {
        oldest = run->freed_at;
      }
    }
  h->mcache_oldest = oldest;
}
/* Without the lock when the cache is empty, as most threads' caches are (their programs take
 * no medium buffers): an exchange less on every tick of the timed work (bench/aligned --pool,
 * 600k replacements: 122.74M -> 121.70M instructions, callgrind). The caller is the owner,
 * or heaps_expire for a parked heap whose thread is gone: no other thread fills the cache
 * meanwhile, a sweep (sweep_idle_caches) only empties it. */
static void medium_cache_trim(trove_heap_t *h, bool all) {
  if (__atomic_load_n(&h->mcache_pages, __ATOMIC_RELAXED) == 0) return;
  mc_lock(h);
  mcache_trim_locked(h, h->now_ms, all);
  mc_unlock(h);
}

/* ------------------------------------------------------------------ spare superblocks */
/* Empty superblocks past K. A thread that builds a working set larger than K's 1.5 MiB and
 * frees it all, over and over (a server's requests; rptest's rounds of 1,000 blocks of
 * 8 B - 16 KB), sent each superblock past K to the page heap at the end of a burst and took
 * it back from there, to carve it again, in the next: rptest at 1 thread made 83 such trips
 * a round, 900 instructions each with the carving; 141M instructions for 400 rounds against
 * tcmalloc's 79M, 100M with spares (callgrind). So an empty one past K waits here, carved,
 * for the heap's next burst, as a medium run waits in the medium cache, and on its terms:
 * - only in a streak of frees: from the second empty one past K since the heap last took a
 *   superblock (find_superblock_rest). Where frees and mallocs of random sizes alternate,
 *   one that empties now and then is seldom what the next malloc wants: kept from the first,
 *   shbench-large's peak RSS rose 5% (7.2 -> 7.6 MiB at 1 thread, 13.1 -> 13.8 at 2), while
 *   from the second it stayed level and rptest kept its gain;
 * - at most three times K a heap (4.5 MiB), or eight times (12 MiB) while its bursts reuse
 *   them (it took a spare back within the purge delay), and the live heaps' spares together
 *   at most 32 MiB, as the medium cache's fixed parts. (At three times K, a thread filling
 *   and emptying a ring of 1,024 messages of 4-16 KiB, 10 MiB, still sent one superblock in
 *   six through the pool or the page heap: 1.17x as fast with 12 MiB, and batches of 1,600
 *   blocks of 8 KiB 1.10x; 24 MiB gained nothing more there. A heap's first burst keeps the
 *   smaller cap: a program that tears down a large table once and then waits keeps no more
 *   than before in its heap.) None with threads crowding the CPUs, none in a shared heap,
 *   none with K at 0 or TROVE_DIRTY_MAX_MB set (an operator's strict bounds: the pool keeps
 *   no empty ones then either);
 * - none while other threads take fresh pages: the pages kept here would be pages those
 *   fault in anew; and when this heap takes fresh pages itself, its spares did not fit its
 *   requests and go to the page heap, where they merge with their neighbours; so do those
 *   of a class that has since grown its superblocks (sb_grow), when the class looks;
 * - one waits at most 1/8 of the purge delay: its owner's timed work, or any thread's sweep
 *   under the cache's lock for a thread that freed a burst and then waits (sweep_idle_caches);
 * - out of memory (_trove_heap_release_cache) and at its thread's exit they all go.
 * So Hoard's bound holds as for the medium cache: past K a heap keeps at most what it
 * emptied in the last 1/8 of the purge delay, bounded per heap and in all. */
#define SPARE_STREAK 2
#define SPARE_ALL_PAGES (((size_t)32 << 20) >> TROVE_PAGE_SHIFT)
static size_t spare_cap(trove_heap_t *h) {
  bool reused = h->spare_hit_ms != 0 &&
                h->now_ms - h->spare_hit_ms < (uint64_t)TROVE_OPT(PURGE_DELAY_MS);
  size_t cap = (reused ? 8 : 3) * (size_t)TROVE_OPT(BLOWUP_K) * TROVE_SB_PAGES;
  if (cap == 0 || _trove_options_set[TROVE_OPT_DIRTY_MAX_MB] || h->shared || crowded() ||
      others_fresh(h))
    return 0;
  size_t alive = atomic_load_explicit(&heaps_alive, memory_order_relaxed);
  if (alive > 1 && cap * alive > SPARE_ALL_PAGES) cap = SPARE_ALL_PAGES / alive;
  return cap;
}

/* A spare leaves for the page heap as free since it emptied: the purge delay counts from
 * then, as for an empty superblock that waited in the pool. */
static void spare_release(trove_sb_t *sb) {
  __atomic_store_n(&sb->reclaim, false, __ATOMIC_RELAXED);
  atomic_store_explicit(&sb->heap, NULL, memory_order_relaxed);
  _trove_pages_free_at(sb, sb->freed_at);
}

/* The owner looks at the count without the lock (a sweep may lower it meanwhile). */
static uint32_t spare_pages(const trove_heap_t *h) {
  return __atomic_load_n(&h->spare_pages, __ATOMIC_RELAXED);
}
static _Atomic size_t spares_total;   /* all heaps' spare pages, for waiting_pages */
static _Atomic size_t parked_pages_total;   /* parked heaps' parked_pages, for waiting_pages */
static void spare_add_pages(trove_heap_t *h, long d) {   /* the cache's lock held */
  __atomic_store_n(&h->spare_pages, (uint32_t)((long)h->spare_pages + d), __ATOMIC_RELAXED);
  atomic_fetch_add_explicit(&spares_total, (size_t)d, memory_order_relaxed);
}

static void spare_unlink(trove_heap_t *h, trove_sb_t *sb) {   /* the cache's lock held */
  size_t c = sb->cls;
  list_remove(&h->spare[c], sb);
  if (h->spare[c] == NULL) h->spare_map[c / 64] &= ~((uint64_t)1 << (c % 64));
  spare_add_pages(h, -(long)sb->npages);
}

/* `sb`, empty and off the heap's lists, waits here if the cap allows. */
static bool spare_put(trove_heap_t *h, trove_sb_t *sb) {
  if (++h->spare_streak < SPARE_STREAK || spare_pages(h) + sb->npages > spare_cap(h)) return false;
  size_t c = sb->cls;
  mc_lock(h);
  if (h->spare_pages == 0) h->spare_oldest = h->now_ms;
  sb->freed_at = h->now_ms;
  list_push(&h->spare[c], sb);
  h->spare_map[c / 64] |= (uint64_t)1 << (c % 64);
  spare_add_pages(h, (long)sb->npages);
  mc_unlock(h);
  return true;
}

/* A spare of `want` to `pages` pages: of class `cls` (it keeps its free list), else if `any`,
 * of another class, carved again; NULL if none. Only the most recent of each class is
 * looked at (one whose class has since grown its superblocks does not fit: it waits until
 * it is due). */
static trove_sb_t *spare_take(trove_heap_t *h, size_t cls, bool any, size_t want,
                              size_t pages) {
  if (spare_pages(h) == 0) return NULL;
  mc_lock(h);
  trove_sb_t *sb = h->spare[cls], *stale = NULL;
  /* the class's that no longer fit (it has grown its superblocks, see sb_grow) go now */
  for (; sb != NULL && (sb->npages < want || sb->npages > pages); sb = h->spare[cls]) {
    spare_unlink(h, sb);
    sb->next = stale;
    stale = sb;
  }
  for (size_t w = 0; any && sb == NULL && w < sizeof h->spare_map / sizeof h->spare_map[0]; w++)
    for (uint64_t m = h->spare_map[w]; m; m &= m - 1) {
      trove_sb_t *o = h->spare[w * 64 + (size_t)__builtin_ctzll(m)];
      if (o->npages >= want && o->npages <= pages) {
        sb = o;
        break;
      }
    }
  if (sb) spare_unlink(h, sb);
  mc_unlock(h);
  for (trove_sb_t *next; stale; stale = next) {
    next = stale->next;
    spare_release(stale);
  }
  if (sb) h->spare_hit_ms = h->now_ms;
  if (sb && sb->cls != cls) _trove_sb_init(sb, cls);
  else if (sb) recarve_if_scattered(sb);
  return sb;
}

/* Give the page heap the spares that waited 1/8 of the purge delay (all if `all`); the
 * cache's lock held. A walk of them all (a descriptor load each), so only when the oldest is
 * due, and then those past half of that age go too: the next walk is at least that far off.
 * Walking for the due ones alone, a heap that kept putting spares walked on nearly every
 * tick (phases-small: 38k cache misses there, as many as the page heap's bins took). */
static void spare_trim_locked(trove_heap_t *h, uint64_t now, bool all) {
  uint64_t age = (uint64_t)TROVE_OPT(PURGE_DELAY_MS) / 8;
  if (h->spare_pages == 0 || (!all && now - h->spare_oldest < age)) return;
  age /= 2;
  uint64_t oldest = UINT64_MAX;
  for (size_t w = 0; w < sizeof h->spare_map / sizeof h->spare_map[0]; w++)
    for (uint64_t m = h->spare_map[w]; m; m &= m - 1)
      for (trove_sb_t *sb = h->spare[w * 64 + (size_t)__builtin_ctzll(m)], *next; sb;
           sb = next) {
        next = sb->next;
        if (all || now - sb->freed_at >= age) {
          spare_unlink(h, sb);
          spare_release(sb);
        } else if (sb->freed_at < oldest) {
          oldest = sb->freed_at;
        }
      }
  h->spare_oldest = oldest;
}
static void spare_trim(trove_heap_t *h, bool all) {
  if (spare_pages(h) == 0) return;
  mc_lock(h);
  spare_trim_locked(h, h->now_ms, all);
  mc_unlock(h);
}

/* Memory kept for reuse that a request just missed: it took fresh pages (a superblock or a
 * medium run) or a large block is about to fault pages in. The pool's empty superblocks and
 * the heap's cached runs past the fixed part and spares go to the page heap, where they merge
 * with their free neighbours and serve requests of any length and kind. A program that moved
 * between phases of small blocks and medium buffers took fresh pages for each phase while
 * the other's waited here (docs/DESIGN.md). `h` may be NULL or the empty heap. */
#define GIVE_BACK_OTHERS_EVERY 64
#define FRESH_IDLE (2 * GIVE_BACK_OTHERS_EVERY)   /* see give_back_others */
static void give_back_others(trove_heap_t *h);
static void give_back_unfit(trove_heap_t *h) {
  if (atomic_load_explicit(&pool_empty_pages, memory_order_relaxed) != 0) pool_flush_empties();
  if ((atomic_fetch_add_explicit(&unfit_calls, 1, memory_order_relaxed) &
       (GIVE_BACK_OTHERS_EVERY - 1)) == GIVE_BACK_OTHERS_EVERY - 1)
    give_back_others(h);
  if (h == NULL || h == &_trove_heap_empty) return;
  mc_lock(h);                              /* a sweep may be at them (sweep_idle_caches) */
  mcache_shrink(h, mcache_fixed(), h->now_ms);
  spare_trim_locked(h, h->now_ms, true);
  mc_unlock(h);
}

/* The other threads' medium caches past their fixed part, every GIVE_BACK_OTHERS_EVERY-th
 * give_back_unfit (fresh pages, or a large block's, taken by any thread). A thread that freed a burst of buffers and then waits
 * while another builds something else keeps its burst (mcache_cap allowed it: nobody took
 * fresh pages then) until the sweep, at least 1/8 of the purge delay later: two threads
 * taking turns, one building and freeing 200 MiB of 100 KB buffers, the other then 200 MiB
 * of 64 B blocks (scratch `shift4`), peaked at 302-447 MiB (now 263-269; tcmalloc 253).
 * Only the caches of threads that made no medium call for 1/32 of the purge delay, or while
 * FRESH_IDLE fresh runs were taken: with every cache, 3 threads handing 64-256 KiB buffers to
 * a fourth (handoff-medium) ran at 0.91 of the speed in 27% more peak RSS, each producer's
 * cache given back while it worked. The clock alone (8 ms, in 4 ms ticks) let a thread that
 * grows fast take 30-45 MiB of fresh pages beside a waiting thread's 68 MiB burst: test_api's
 * turns failed 6 runs in 291 with three at once, and with a purge delay of 20 s (so 625 ms) the
 * second thread's 64 MiB of 64 B blocks took 69 MiB fresh (test_options' `turns`; now 12).
 * Counted in runs taken, the wait is bounded in memory whatever the pace. Not every time:
 * the walk takes the heaps' lock and each cache's; a busy cache (its owner holds its lock)
 * is skipped. */
static void give_back_others(trove_heap_t *h) {
  size_t keep = mcache_fixed();
  uint64_t now = _trove_os_now_ms(), idle = (uint64_t)TROVE_OPT(PURGE_DELAY_MS) / 32;
  uint32_t unfit = atomic_load_explicit(&unfit_calls, memory_order_relaxed);
  _trove_mutex_lock(&_trove_locks.heaps);
  for (trove_heap_t *o = _trove_heaps_all; o; o = o->next_all) {
    if (o == h || !o->alive || o->shared || o->orphan || o->fork_gen != _trove_fork_gen ||
        (now - atomic_load_explicit(&o->medium_ms, memory_order_relaxed) < idle &&
         unfit - atomic_load_explicit(&o->medium_unfit, memory_order_relaxed) < FRESH_IDLE) ||
        !mc_trylock(o))
      continue;
    mcache_shrink(o, keep, now);
    mc_unlock(o);
  }
  _trove_mutex_unlock(&_trove_locks.heaps);
}

/* A free into a superblock that an exiting thread abandoned: the freeing thread adopts it, so
 * that the rest of its blocks are freed locally and its memory is reused or given back even if
 * no thread ever allocates from that class again (Larson's blocks outlive their threads). */
static bool reclaim_on_free(trove_sb_t *sb, trove_block_t *b) {
  trove_heap_t *h = _trove_tls_heap;
  if (h == &_trove_heap_empty && (h = thread_heap_init(NULL)) == NULL) return false;
  bool adopted = false;
  size_t shard = pool_shard_of(sb);
  trove_mutex_t *lock = &_trove_pool_at(shard, sb->cls)->lock;
  _trove_lock(lock, TROVE_LOCK_POOL);
  /* The owner first: once a heap has adopted it, its state is that heap's to write. */
  if (atomic_load_explicit(&sb->heap, memory_order_relaxed) == NULL &&
      __atomic_load_n(&sb->reclaim, __ATOMIC_RELAXED) && sb->state == TROVE_SB_POOL) {
    pool_unlink(sb, shard);
    sb->slack -= (int32_t)_trove_sb_collect(sb);
    atomic_store_explicit(&sb->heap, h, memory_order_release);
    __atomic_store_n(&sb->reclaim, 0, __ATOMIC_RELAXED);
    sb->kept = sb->claimed = 0;
    sb->state = TROVE_SB_FULL;             /* the local free below files it where it belongs */
    adopted = true;
  }
  _trove_mutex_unlock(lock);
  if (!adopted) return false;
  h->c.adopted++;
  _trove_sb_set_trigger(sb, (int32_t)sb->capacity + 1);
  list_push(&h->lists[sb->cls].full, sb);
  free_local(h, sb, b);
  return true;
}

/* A free into an abandoned superblock (abandon_full) that adopts it: the freeing thread's
 * heap takes it by a compare-and-swap of its owner, and the block is a local free. One that
 * lost the race frees to the winner. Without a heap (out of memory) the block waits on the
 * superblock's `thread_free` for the next adopter to collect. */
static void free_abandoned(trove_sb_t *sb, trove_block_t *b) {
  trove_heap_t *h = _trove_tls_heap;
  if (h == &_trove_heap_empty) {
    /* A new thread that frees a block of an exited thread's heap takes over that heap, as in
     * free_other_slow. The heap that let it go is a hint: another may have adopted it since
     * and made it current, whose idle mark shares the word (odd, see cur_trim); heaps are
     * never unmapped, so reading a stale one's `parked_ms` is safe. */
    uintptr_t was = __atomic_load_n(&sb->released_by, __ATOMIC_RELAXED);
    h = thread_heap_init(was != 0 && (was & 1) == 0 && parked_since((trove_heap_t *)was)
                             ? (trove_heap_t *)was : NULL);
  }
  for (;;) {
    trove_heap_t *owner = TROVE_ABANDONED;
    if (h != NULL && atomic_compare_exchange_strong_explicit(&sb->heap, &owner, h,
                                                             memory_order_acquire,
                                                             memory_order_acquire)) {
      atomic_fetch_sub_explicit(&abandoned_out, 1, memory_order_relaxed);
      if (sb->released_by == (uintptr_t)h) {
        sb->kept = 1;
      } else {
        sb->claimed = 1;
        h->c.claimed++;
      }
      sb->slack -= (int32_t)_trove_sb_collect(sb);
      sb->state = TROVE_SB_FULL;
      /* Taken from another heap, it serves mallocs only once it is sparse (f-empty), as a
       * superblock that Hoard moves between heaps: the blocks left live in it are another
       * thread's, and a block handed out beside one may share its cache line. */
      _trove_sb_set_trigger(sb, sb->claimed ? sparse_threshold(sb) : full_trigger(sb));
      list_push(&h->lists[sb->cls].full, sb);
      free_local(h, sb, b);
      return;
    }
    if (h == NULL && owner == TROVE_ABANDONED) owner = atomic_load_explicit(&sb->heap, memory_order_acquire);
    if (owner == TROVE_ABANDONED) {
      if (h == NULL) {
        push_block(&sb->thread_free, b);
        return;
      }
      continue;
    }
    if (owner) push_remote(owner, b, REMOTE_PENDING);
    else pool_free_block(sb, b);
    return;
  }
}

/* A free into an abandoned superblock (free_other_slow). A thread that allocates blocks of
 * its class (it has a current superblock there) adopts it at once (free_abandoned), and so
 * do the thread that let it go, a thread freeing into the superblock of an exited thread's
 * heap or of one from before a fork, and any thread when the word that names the heap that
 * let it go has been overwritten since (an adopter's idle mark, odd: see cur_trim). Any
 * other block goes on that heap's `orphans`, part of its queue: the heap takes it back at
 * its next slow path (a thread that allocates all the time gets its superblocks back,
 * `kept` from then on) unless it is idle and another thread needs the memory first
 * (steal_abandoned). A thread that only frees so adopts nothing: claimed by whichever thread
 * freed into them first, one producer's superblocks were spread over its 7 consumers, which
 * never allocate and whose frees into each other's came back late (bench/handoff --mode out
 * -t 8: 4 MiB peak RSS before abandoning, 23 MiB so). */
static void free_to_abandoner(trove_sb_t *sb, trove_block_t *b) {
  uintptr_t was = __atomic_load_n(&sb->released_by, __ATOMIC_RELAXED);
  trove_heap_t *h = _trove_tls_heap, *home = (trove_heap_t *)was;
  if (was == 0 || (was & 1) != 0 || home == h || h->cur[sb->cls] != &_trove_sb_empty ||
      __atomic_load_n(&home->fork_gen, __ATOMIC_RELAXED) != _trove_fork_gen ||
      parked_since(home)) {
    free_abandoned(sb, b);
    return;
  }
  /* batched as other remote frees are (a compare-and-swap each had blowup-pc's consumer
   * 15-25% slower), under the heap's address with its low bit set */
  if (batch_hooked()) batch_add((trove_heap_t *)(was | 1), b);
  else orphans_push(home, b, b);
}

static void orphans_push(trove_heap_t *home, trove_block_t *first, trove_block_t *last) {
  trove_block_t *head = atomic_load_explicit(&home->orphans, memory_order_relaxed);
  do {
    last->next = head;
  } while (!atomic_compare_exchange_weak_explicit(&home->orphans, &head, first,
                                                  memory_order_seq_cst, memory_order_relaxed));
  set_pending(home, REMOTE_PENDING);     /* the argument of push_chain holds for this list */
}

/* Before a heap takes fresh pages for a class: a heap that has not taken its queue for 2 ms
 * or more (its thread blocked, waiting for its turn or its next request, or preempted) may
 * hold on its `orphans` blocks that other threads freed into superblocks it abandoned,
 * memory that no thread can use until it wakes. Each such block adopts its superblock into
 * `h`, as if `h` had freed it. Hoard's round robin (bench/blowup --mode rr: each thread in
 * turn frees the batch the previous one allocated and allocates one; a thread that only
 * frees adopts nothing, see free_to_abandoner, and each thread's first turn is all frees)
 * held a batch per thread. Looks at the 32 most recent heaps at most. True if it adopted a
 * superblock. */
static TROVE_NOINLINE bool steal_abandoned(trove_heap_t *h) {
  uint64_t now = 0;
  bool got = false;
  unsigned look = 32;
  for (trove_heap_t *x = __atomic_load_n(&_trove_heaps_all, __ATOMIC_ACQUIRE); x && look;
       x = x->next_all, look--) {
    if (x == h || atomic_load_explicit(&x->orphans, memory_order_relaxed) == NULL ||
        !__atomic_load_n(&x->alive, __ATOMIC_RELAXED) ||
        __atomic_load_n(&x->shared, __ATOMIC_RELAXED) ||
        __atomic_load_n(&x->orphan, __ATOMIC_RELAXED) || parked_since(x) ||
        __atomic_load_n(&x->fork_gen, __ATOMIC_RELAXED) != _trove_fork_gen)
      continue;
    if (now == 0) now = _trove_os_now_ms();
    if (now - atomic_load_explicit(&x->remote_taken_ms, memory_order_relaxed) < 2) continue;
    for (trove_block_t *b = atomic_exchange_explicit(&x->orphans, NULL, memory_order_acquire),
                       *next; b; b = next) {
      next = b->next;
      uintptr_t a = (uintptr_t)b;
      free_abandoned(_trove_sb_of(_trove_segment_of(a), a), b);
      got = true;
    }
  }
  return got;
}

/* A free from a thread that does not own the block's superblock (or of a medium object). The
 * block's tag is already written. */
static TROVE_NOINLINE void free_other_slow(trove_block_t *b, trove_sb_t *sb) {
  if (sb->kind == TROVE_SPAN_MEDIUM) {
    /* Back to the thread that allocated it, as a small block goes, where its next medium
     * malloc takes it from its own cache (a thread that allocates buffers and hands them to
     * others to free). Kept by the freeing thread, such runs waited in a cache no malloc of
     * that thread used, and the allocating thread took runs from the page heap under its
     * lock, faulting in fresh pages. Not to a parked heap or one of a fork's parent. */
    trove_heap_t *h = _trove_tls_heap, *owner = sb->medium_heap;
    if (owner != NULL && owner != h &&
        __atomic_load_n(&owner->fork_gen, __ATOMIC_RELAXED) == _trove_fork_gen &&
        parked_since(owner) == 0) {
      /* flagged, so that the timed work can take them back from an owner that stopped
       * taking its queue (sweep_idle_queues). A flag on the line the push writes anyway, set
       * only when the owner has cleared it, not a count of the pages queued: one atomic
       * read-modify-write less for the freeing thread, and one for the owner per run. One
       * consumer freeing the 64-256 KiB buffers of 7 / 15 producers (handoff-medium) on 16
       * CPUs: 0.0609 -> 0.0544 s / 0.0550 -> 0.0470 s (mimalloc 0.0462 / 0.0389); one pair
       * on 2 cores 0.076 -> 0.069 s. */
      push_remote(owner, b, REMOTE_PENDING | REMOTE_MEDIUM);
      return;
    }
    medium_free(h, sb);
    _trove_background_poke();
    return;
  }
  trove_heap_t *owner = atomic_load_explicit(&sb->heap, memory_order_acquire);
  /* The thread's own heap first: parked_ms shares a line with fields the owner's slow paths
   * write, which every remote free would otherwise read. */
  if (owner != NULL && owner != TROVE_ABANDONED && _trove_tls_heap == &_trove_heap_empty &&
      parked_since(owner) && thread_heap_init(owner) != NULL) {
    /* A new thread's first call frees a block of a parked heap: it inherits that heap (the
     * thread it replaces handed it the block), not whichever heap was parked last. The
     * superblock may have left the heap before it was parked, after `owner` was read; now
     * that this thread owns the heap, no other can move it in or out. */
    if (atomic_load_explicit(&sb->heap, memory_order_acquire) == owner) free_local(owner, sb, b);
    else route_block(sb, b);
    return;
  }
  if (owner == TROVE_ABANDONED) free_to_abandoner(sb, b);
  else if (owner != NULL) remote_free_headless(owner, b, sb->bsize);
  else if (!(__atomic_load_n(&sb->reclaim, __ATOMIC_RELAXED) && reclaim_on_free(sb, b))) {
    pool_free_block(sb, b);
    freed_into_pool = true;
  }
  /* A thread that only frees must still let time-based work happen (pool sweep, purge). */
  if ((++remote_ticks & 63) == 0) _trove_heap_maybe_purge(_trove_tls_heap);
}

void _trove_free_other(trove_block_t *b, trove_sb_t *sb, uintptr_t me) {
  if (unlikely(me & 1) && _trove_sb_owner(sb) == (trove_heap_t *)(me - 1)) {
    free_parking((trove_heap_t *)(me - 1), sb, b);   /* a local free of a heap that parks */
    return;
  }
  trove_heap_t *owner = atomic_load_explicit(&sb->heap, memory_order_acquire);
  /* The common case, with no register saved: a small block of another thread's heap (a
   * medium run has no owner here), freed by a thread with a heap of its own (which so
   * inherits none, see below). */
  if (likely((uintptr_t)owner > (uintptr_t)TROVE_ABANDONED && _trove_tls_heap != &_trove_heap_empty)) {
    if (likely(sb->bsize <= REMOTE_BATCH_MAX_SIZE && batch_state == BATCH_ON)) {
      batch_add(owner, b);
      return;
    }
    if (sb->bsize > REMOTE_BATCH_MAX_SIZE) {
      remote_free_one(owner, b);
      return;
    }
  } else if (owner == NULL && sb->kind == TROVE_SPAN_MEDIUM &&
             sb->medium_heap == _trove_tls_heap) {
    medium_quick_free(sb->medium_heap, sb);  /* its own run (never the empty heap's) */
    return;
  }
  free_other_slow(b, sb);
}

/* The lanes are walked a step each in turn: the next pointers of all of them are loaded
 * before any block is freed, so their cache misses overlap. */
static TROVE_NOINLINE void drain_remote_queue(trove_heap_t *h) {
  trove_block_t *lanes[TROVE_REMOTE_LANES + 1], *next[TROVE_REMOTE_LANES + 1];
  unsigned n = 0;
  /* a store only when the tick's clock moved: remote frees of medium runs read this line */
  if (atomic_load_explicit(&h->remote_taken_ms, memory_order_relaxed) != h->now_ms)
    atomic_store_explicit(&h->remote_taken_ms, h->now_ms, memory_order_relaxed);
  remote_take(h, lanes, &n);
  while (n) {
    for (unsigned i = 0; i < n; i++) {
      next[i] = lanes[i]->next;
      if (next[i]) __builtin_prefetch(next[i], 1);
    }
    unsigned m = 0;
    for (unsigned i = 0; i < n; i++) {
      trove_block_t *b = lanes[i];
      uintptr_t a = (uintptr_t)b;
      trove_sb_t *sb = _trove_sb_of(_trove_segment_of(a), a);
      if (atomic_load_explicit(&sb->heap, memory_order_relaxed) == h) free_local(h, sb, b);
      else if (sb->kind == TROVE_SPAN_MEDIUM) medium_free(h, sb);
      else route_block(sb, b);               /* it changed hands: forward */
      h->c.remote_frees++;
      if (next[i]) lanes[m++] = next[i];
    }
    n = m;
  }
}

static inline void drain_remote(trove_heap_t *h) {
  if (remote_pending(h)) drain_remote_queue(h);
}

/* ------------------------------------------------------------------ heap life cycle */
static void heap_reset(trove_heap_t *h) {
  h->beat = TROVE_BEAT;
  h->parking = 0;
  h->parks = 0;
  for (size_t i = 0; i < TROVE_DIRECT_SLOTS; i++) h->direct[i] = &_trove_sb_empty;
  for (size_t i = 0; i < TROVE_CLASSES; i++) h->cur[i] = &_trove_sb_empty;
  h->coarse = false;
  memset(h->lists, 0, sizeof h->lists);
  memset(h->sparse_map, 0, sizeof h->sparse_map);
  mc_lock(h);                     /* a sweep may look at a live heap's cache (its thread exits) */
  h->empty = NULL;
  __atomic_store_n(&h->nempty, 0, __ATOMIC_RELAXED);
  for (size_t i = 0; i < TROVE_CLASSES; i++) __atomic_store_n(&h->nempty_cls[i], 0, __ATOMIC_RELAXED);
  for (size_t i = 0; i < EMPTY_LENS; i++) __atomic_store_n(&h->nempty_len[i], 0, __ATOMIC_RELAXED);
  atomic_store_explicit(&h->swept_pages, 0, memory_order_relaxed);
  memset(h->mcache, 0, sizeof h->mcache);
  memset(h->mcache_map, 0, sizeof h->mcache_map);
  __atomic_store_n(&h->mcache_pages, 0, __ATOMIC_RELAXED);
  h->mquick_takes = h->mquick_frees = 0;
  memset(h->spare, 0, sizeof h->spare);
  memset(h->spare_map, 0, sizeof h->spare_map);
  spare_add_pages(h, -(long)h->spare_pages);   /* 0 by now; and spares_total with it */
  h->spare_hit_ms = 0;
  mc_unlock(h);
  h->sparse_pages = 0;
  h->over_since_ms = 0;
  h->medium_net = 0;
  h->mfree_streak = 0;
  h->mquick_extra = 0;
  memset(h->first_borrows, 0, sizeof h->first_borrows);
}

/* A parked heap leaves the free list (heaps lock held): its pages no longer wait */
static void unpark_pages(trove_heap_t *h) {
  atomic_fetch_sub_explicit(&parked_pages_total, h->parked_pages, memory_order_relaxed);
  h->parked_pages = 0;
}

/* A heap for a new thread: `want` if it is still parked (NULL if not), else the most recently
 * freed heap, else a new one. */
static trove_heap_t *heap_acquire(trove_heap_t *want) {
  _trove_mutex_lock(&_trove_locks.heaps);
  trove_heap_t **pp = &heaps_free;
  if (want) {
    while (*pp && *pp != want) pp = &(*pp)->next_free;
    if (*pp == NULL || parked_since(want) == 0) {
      _trove_mutex_unlock(&_trove_locks.heaps);
      return NULL;
    }
  }
  trove_heap_t *h = *pp;
  if (h) {
    *pp = h->next_free;
    unpark_pages(h);
  } else {
    h = heap_new_locked();
  }
  if (h) {
    if (parked_since(h) == 0) heap_reset(h);   /* a parked heap is taken over as it is */
    set_parked(h, 0);
    h->alive = true;
    /* atomic: a free of a medium run it allocated in its previous life reads it unlocked */
    __atomic_store_n(&h->fork_gen, _trove_fork_gen, __ATOMIC_RELAXED);
    atomic_fetch_add_explicit(&heaps_alive, 1, memory_order_relaxed);
    h->now_ms = h->born_ms = _trove_os_now_ms();
  }
  _trove_mutex_unlock(&_trove_locks.heaps);
  return h;
}

/* A new heap, listed in _trove_heaps_all; NULL if no memory. _trove_locks.heaps held. */
static trove_heap_t *heap_new_locked(void) {
  /* Whole pairs of cache lines: the adjacent-line prefetcher moves lines in 128-byte pairs,
   * so a heap's first line (the free counter `beat`, written on every local free) must not
   * pair with the last line of the heap before it (its slow-path counters), as Intel's
   * optimization manual advises for data different threads write (folly pads to 128 bytes
   * on x86-64 for the same reason); no difference was measurable on 2 cores. */
  const size_t pair = 2 * TROVE_CACHE_LINE;
  size_t sz = (sizeof(trove_heap_t) + pair - 1) & ~(pair - 1);
  if (heap_chunk_left < sz) {
    heap_chunk = _trove_os_map(256 * 1024);
    heap_chunk_left = heap_chunk ? 256 * 1024 : 0;
  }
  if (heap_chunk_left < sz) return NULL;
  trove_heap_t *h = (trove_heap_t *)heap_chunk;
  heap_chunk += sz;
  heap_chunk_left -= sz;
  h->id = ++heap_next_id;
  _trove_pages_arena_init(&h->arena, h->id);
  pool_shard_mark(h);
  h->next_all = _trove_heaps_all;
  __atomic_store_n(&_trove_heaps_all, h, __ATOMIC_RELEASE);
  return h;
}

/* Hand every superblock of `h` back (to the page heap if empty, else to the pool). */
static void heap_abandon(trove_heap_t *h) {
  parking_set(h, false);                   /* its current superblocks go below */
  drain_remote(h);
  for (size_t c = 1; c < TROVE_CLASSES; c++) {
    trove_sb_t *sb = h->cur[c];
    unpark(h, sb);
    if (sb != &_trove_sb_empty) sb_release(sb, true);
    for (trove_sb_t **lst = &h->lists[c].partial; lst <= &h->lists[c].full; lst++)
      while (*lst) {
        sb = *lst;
        list_remove(lst, sb);
        sb_release(sb, true);
      }
  }
  for (size_t c = 1; c < TROVE_CLASSES; c++)
    while (h->lists[c].sparse) {
      trove_sb_t *sb = h->lists[c].sparse;
      sparse_remove_live(h, sb);
      sb_release(sb, true);
    }
  for (trove_sb_t *sb; (sb = empty_take(h, NULL, 0, 0)) != NULL;) sb_release(sb, true);
  medium_cache_trim(h, true);
  spare_trim(h, true);
  heap_reset(h);
}

/* pthread key destructor: the thread is exiting. Its heap is parked whole, superblocks and
 * all, at the head of the free heaps: a thread that starts within the purge delay takes it
 * over as it is (a server replacing a worker, Larson's threads handing their blocks on), so
 * the successor's frees of the blocks it inherits are local and its mallocs reuse the
 * superblocks they free into, instead of carving fresh ones while the old ones wait in the
 * pool. Blocks other threads free meanwhile queue on its remote list as for a live heap. A
 * heap parked longer than the delay is handed back by heaps_expire().
 *
 * That hand-back, like every timed purge, runs on some thread's slow path: a program whose
 * workers end and whose remaining thread then idles (a server after a burst, winding down,
 * waiting on a socket) never runs one, and kept the workers' memory for good: 8 threads that
 * churned 16 B - 256 KiB blocks, freed them all and ended left 55 MiB resident seconds later
 * (glibc 3.3 MiB, mimalloc 15, jemalloc 17.5, tcmalloc 47). So a thread that lived longer
 * than four purge delays (a worker, not one of a round of short tasks, whose successor
 * would take its heap over within milliseconds) hands its superblocks and medium runs back
 * as it exits; and when its exit leaves one thread or none with a heap, the process has gone
 * from parallel to serial work, and everything free is purged at once (the parked heaps of
 * short-lived threads too): 55 -> 2.3 MiB in that test. A short-lived thread's heap stays
 * parked for a successor; it counts among the pages the background thread waits for
 * (waiting_pages), so that once parked heaps hold 64 MiB a program that ran a burst of such
 * threads and then waits without a call still gets them back after the delay: 60 threads of
 * test_ring's shape (0.3 s) left 76 MiB resident as long as the main thread made no call
 * (glibc 3.6 MiB, jemalloc 20, tcmalloc 57, snmalloc 92); now 2.5 MiB 2 s later. */
static void heaps_expire(bool all);
/* The pages of the superblocks `h` holds (its current ones, its lists, the sparse and empty
 * ones): one walk of its lists, at its thread's exit. */
static uint32_t heap_pages(const trove_heap_t *h) {
  size_t n = h->sparse_pages;
  for (size_t c = 1; c < TROVE_CLASSES; c++) {
    if (h->cur[c] != &_trove_sb_empty) n += h->cur[c]->npages;
    for (const trove_sb_t *sb = h->lists[c].partial; sb; sb = sb->next) n += sb->npages;
    for (const trove_sb_t *sb = h->lists[c].full; sb; sb = sb->next) n += sb->npages;
  }
  return n < UINT32_MAX ? (uint32_t)n : UINT32_MAX;
}
void _trove_heap_thread_done(void *arg) {
  /* The thread's heap is _trove_tls_heap; the key's value only makes this run. A program that
   * writes a key it never created may have overwritten it, and glibc then passes that here. */
  (void)arg;
  trove_heap_t *h = _trove_tls_heap;
  batch_queue();                           /* and from now on, no batch (see batch_add) */
  batch_state = BATCH_EXITED;
  if (h == NULL || h == &_trove_heap_empty) return;
  /* Empty superblocks stay with the parked heap too (at most K sparse ones and one current
   * per class, until heaps_expire hands them back after the delay): a program that ends
   * threads and starts new ones in rounds reuses them as they are. Giving them to the page
   * heap at exit pushed its dirty total over the cap, and the purge that followed gave back
   * pages the next round faulted in again: in a test in the manner of mimalloc-bench's
   * mstress (4 threads a round, 100 rounds), 2,900 purges of 930 MiB in all and 0.27 s of
   * system time in a 0.65 s run, against none and 0.03 s in 0.49 s, for 8% more peak RSS
   * (25.3 MiB); test_options's `rounds` probe checks it.
   * The medium cache does go to the page heap: its runs fit only the lengths its thread freed,
   * up to 2 MiB of them, and a parked heap kept them for whichever thread took it next, while
   * in the page heap any thread's run of any length up to theirs reuses the pages. bench/mstress
   * (1 in 1,000 blocks 8-256 KiB) at exit held 16 MiB in the caches of 8 parked heaps; its
   * peak RSS at 1 / 2 / 8 threads went 9.7 -> 8.6, 15.7 -> 13.4 and 61.1 -> 56.1 MiB with the
   * same time and no purges more (tcmalloc 16.9 and 50.9). */
  drain_remote(h);
  medium_cache_trim(h, true);
  spare_trim(h, true);
  _trove_tls_heap = _trove_tls_free = &_trove_heap_empty;
  /* What this thread freed into pool superblocks may be all that keeps them: collect now, a
   * server's threads often exit right after a burst of frees and nothing else follows. */
  if (freed_into_pool) _trove_pool_sweep();
  freed_into_pool = false;
  uint64_t now = _trove_os_now_ms();
  bool worker = now - h->born_ms >= 4 * (uint64_t)TROVE_OPT(PURGE_DELAY_MS);
  if (worker) {
    h->now_ms = now;
    heap_abandon(h);                       /* parked empty: a successor starts afresh */
  }
  uint32_t pages = worker ? 0 : heap_pages(h);
  _trove_mutex_lock(&_trove_locks.heaps);
  h->alive = false;
  uint32_t left = atomic_fetch_sub_explicit(&heaps_alive, 1, memory_order_relaxed) - 1;
  set_parked(h, now ? now : 1);
  h->parked_pages = pages;
  atomic_fetch_add_explicit(&parked_pages_total, pages, memory_order_relaxed);
  h->next_free = heaps_free;
  heaps_free = h;
  _trove_mutex_unlock(&_trove_locks.heaps);
  if (worker && left <= 1) {
    /* One such clean-up at a time: with two threads ending together, their sweeps and
     * purges interleaved (each takes runs off the bins while it purges them) and now and
     * then left whole free segments dirty: test_options' `workers` probe kept 4-12 MiB in
     * about 1 run in 8 under load, none in 40 with the lock. */
    _trove_mutex_lock(&_trove_locks.serial);
    _trove_pool_sweep();
    heaps_expire(true);
    _trove_pages_purge(true);
    _trove_large_purge(false);
    _trove_mutex_unlock(&_trove_locks.serial);
  } else if (!worker) {
    _trove_background_poke();
  }
}

/* Hand back the superblocks of heaps parked longer than the purge delay (all parked heaps if
 * `all`): to the page heap if empty, else to the pool, where a free adopts them. A heap being
 * handed back is off the free list (no thread can take it) and marked `expiring`. */
static void heaps_expire(bool all) {
  uint64_t now = _trove_os_now_ms(), delay = (uint64_t)TROVE_OPT(PURGE_DELAY_MS);
  trove_heap_t *list = NULL;
  _trove_mutex_lock(&_trove_locks.heaps);
  for (trove_heap_t **pp = &heaps_free, *h; (h = *pp) != NULL;) {
    if (parked_since(h) && (all || now - parked_since(h) >= delay)) {
      *pp = h->next_free;
      unpark_pages(h);
      h->expiring = true;
      h->next_free = list;
      list = h;
    } else {
      pp = &h->next_free;
    }
  }
  _trove_mutex_unlock(&_trove_locks.heaps);
  if (list == NULL) return;
  for (trove_heap_t *h = list; h; h = h->next_free) {
    h->now_ms = now;
    heap_abandon(h);
    set_parked(h, 0);
  }
  _trove_mutex_lock(&_trove_locks.heaps);
  for (trove_heap_t *h = list, *next; h; h = next) {
    next = h->next_free;
    h->expiring = false;
    h->next_free = heaps_free;
    heaps_free = h;
  }
  _trove_mutex_unlock(&_trove_locks.heaps);
}

/* In the child of fork only the forking thread lives. The other threads' heaps may have been
 * caught in the middle of a list update, so they are not walked: they become orphans, never
 * reused. Their blocks stay valid; a free of one in the child is queued and kept (a bounded
 * leak of what the parent's other threads held, as no thread of the child owns it).
 * The others' heaps are not written either: each write would copy its page in the child (a
 * fork of a process with 256 threads took 250 faults more than with glibc, 9.4 ms against 6.9).
 * A new fork generation marks them instead: a heap is a live thread's while `alive` and of
 * the current generation (_trove_heap_live); the forking thread's heap moves to the new one. */
uint64_t _trove_fork_gen;

static trove_mutex_t background_pass;
static pthread_mutex_t background_lock;
static bool background_live, background_wake_made;
void _trove_heaps_fork_child(void) {
  uint32_t alive = 0;
  _trove_lock_reset(&_trove_locks.serial);   /* a thread ending in the parent may have held it */
  /* A background thread that a program thread started after fork()'s first step, mid-pass or
   * starting: the child has none. */
  _trove_lock_reset(&background_pass);
  background_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
  background_live = false;
  background_wake_made = false;              /* its waiter's state is the parent's */
  shared_fork_child();
  _trove_fork_gen++;
  for (trove_heap_t *h = _trove_heaps_all; h; h = h->next_all) {
    if (h->shared) continue;
    if (h->expiring) h->orphan = true;       /* off the free list, half handed back */
    if (h->alive && h == _trove_tls_heap) {
      h->fork_gen = _trove_fork_gen;
      alive++;
    }
  }
  if (atomic_load_explicit(&heaps_alive, memory_order_relaxed) != alive)   /* a page less */
    atomic_store_explicit(&heaps_alive, alive, memory_order_relaxed);
}

/* Set up the calling thread's heap: `want` if it is parked (else NULL), or any (see heap_acquire). */
static trove_heap_t *thread_heap_init(trove_heap_t *want) {
  _trove_init();
  trove_heap_t *h = heap_acquire(want);
  if (h == NULL) return NULL;
  if (crowded() != h->coarse) coarse_set(h, !h->coarse);
  _trove_tls_heap = h;
  _trove_tls_free = (trove_heap_t *)((uintptr_t)h | h->parking);   /* a parked heap taken over */
  pthread_setspecific(_trove_thread_key, h);
  if (batch_state == BATCH_UNHOOKED) batch_state = BATCH_ON;   /* the key's destructor flushes */
  _trove_fork_register();
  return h;
}

/* ------------------------------------------------------------------ purging */
static void sweep_idle_queues(bool all);
static void sweep_idle_caches(bool all);
static void grow_decay(trove_heap_t *h);
static void background_start(void);
enum { BACKGROUND_ALWAYS = 1, BACKGROUND_ON_DEMAND = 2 };   /* TROVE_BACKGROUND's values */
#define BACKGROUND_WANT (((size_t)64 << 20) >> TROVE_PAGE_SHIFT)   /* pages, see background_main */
/* Free memory that the timed work would give back once it waited the purge delay, in pages:
 * the page heap's free dirty pages, the pool's empty superblocks and the heaps' spares (where
 * a thread's burst past K goes), the cached large mappings' resident pages and the superblocks
 * of parked heaps (heaps_expire). Relaxed hints: they decide when the
 * background thread is worth having, not what it gives back. */
static size_t waiting_pages(void) {
  size_t spares = atomic_load_explicit(&spares_total, memory_order_relaxed);
  if (spares > SIZE_MAX / 2) spares = 0;     /* a moment below zero: heaps add theirs apart */
  return _trove_pages_dirty() + atomic_load_explicit(&pool_empty_pages, memory_order_relaxed) +
         spares + (_trove_large_cached_resident() >> TROVE_PAGE_SHIFT) +
         atomic_load_explicit(&parked_pages_total, memory_order_relaxed);
}
/* On the program's calls that may leave much free memory waiting, with no lock held: the
 * timed work's, a medium run's free into the page heap, a large free (large.c). */
void _trove_background_poke(void) {
  if (TROVE_OPT(BACKGROUND) == BACKGROUND_ON_DEMAND && waiting_pages() >= BACKGROUND_WANT)
    background_start();
}

void _trove_heap_maybe_purge(trove_heap_t *h) {
  uint64_t now = _trove_os_now_ms();
  if (h != &_trove_heap_empty) h->now_ms = now;
  uint64_t due = atomic_load_explicit(&next_purge_ms, memory_order_relaxed);
  if (h != &_trove_heap_empty && now >= h->cur_scan_ms) unpark_all(h);   /* before the trim */
  if (h != &_trove_heap_empty && empty_count(h) && now >= h->sparse_scan_ms) {
    sparse_trim(h, false);                 /* a full walk: at most every quarter delay */
    h->sparse_scan_ms = now + (uint64_t)TROVE_OPT(PURGE_DELAY_MS) / 4 + 1;
  }
  if (h != &_trove_heap_empty && h->over_since_ms != 0) release_over_k(h, true);
  if (h != &_trove_heap_empty) medium_cache_trim(h, false);
  if (h != &_trove_heap_empty) spare_trim(h, false);
  if (h != &_trove_heap_empty && now >= h->cur_scan_ms) {
    cur_trim(h, now, false);
    lists_purge(h, now, false);
    grow_decay(h);
    h->cur_scan_ms = now + (uint64_t)TROVE_OPT(PURGE_DELAY_MS) / 2 + 1;
    parking_reset(h);                      /* until the slow path parks often again */
  }
  /* Not behind the time gate below: the burst that piles the pages up may end within the
   * gate's half delay, and then no call of the program's may come to look again. */
  _trove_background_poke();
  if (now < due) return;
  uint64_t next = now + (uint64_t)TROVE_OPT(PURGE_DELAY_MS) / 2 + 1;
  if (!atomic_compare_exchange_strong(&next_purge_ms, &due, next)) return;  /* another does it */
  if (unlikely(TROVE_OPT(BACKGROUND) == BACKGROUND_ALWAYS)) background_start();
  _trove_pool_sweep();
  pool_purge(now, false);
  sweep_idle_queues(false);
  sweep_idle_caches(false);
  shared_tend(false);
  heaps_expire(false);
  _trove_pages_purge(false);
  _trove_large_purge(false);
}

/* The background thread. The timed work above runs on the program's own slow paths, so a
 * process that frees a burst and then waits (a PostgreSQL backend after a large sort, idle
 * until its client's next query; Redis after a FLUSHALL; a server between requests) keeps
 * what it freed resident for as long as it waits: bench/apps/pgserver's backend held 235 MiB
 * after an ORDER BY with work_mem 256 MB, as tcmalloc (254), mimalloc 3 (281) and snmalloc
 * (238) do, where glibc (74) and jemalloc (94) had unmapped their large blocks on free. This
 * thread runs the process-wide part of that work every half purge delay (at least 10 ms; up
 * to 8 half delays while its passes give nothing back, see background_main): the pool, idle
 * threads' queues, medium caches, spare and empty superblocks (sweep_idle_caches), the page
 * heap's free pages and the large mappings cached past the delay all go back without a call
 * from the program. A thread's current superblocks stay for its own calls (its fast paths use
 * them without a lock).
 *
 * It is a thread the program did not make (programs that count their threads, or warn on
 * fork() with several, would see it), so by default (TROVE_BACKGROUND=2) it exists only while
 * there is much to give back: it starts when a call of the program's finds BACKGROUND_WANT or
 * more of free dirty pages (a burst's worth, which the program's calls might never purge), and
 * ends once its passes have given nothing back for the longest wait and less than that waits.
 * A program whose free pages stay under it never sees the thread; one that frees a burst sees
 * it for about two seconds after it last gave something back. TROVE_BACKGROUND=1 starts it on
 * the first timed pass and keeps it; 0 never starts it. It starts on a slow path with no lock
 * held (never at load), once at a time per process: a child of fork() starts its own (its
 * fork generation differs), with every signal blocked so that none meant for the program's
 * threads lands on it. */
static _Atomic uint64_t background_gen;    /* _trove_fork_gen + 1 of the process running one;
                                              0 while none runs */
/* Held by each of the thread's passes. The statistics' walk (stats.c) reads superblocks
 * without the pools' locks (over 64 at once, more than ThreadSanitizer follows), a snapshot of
 * a moment when the program's threads leave them alone; the passes, which the program cannot
 * hold off, wait for it instead. */
static trove_mutex_t background_pass = TROVE_MUTEX_INIT;
void _trove_background_hold(void) { _trove_mutex_lock(&background_pass); }
void _trove_background_release(void) { _trove_mutex_unlock(&background_pass); }

/* The running thread, for fork() to stop (below). Under background_lock: `background_live`
 * (a thread that fork() must join is running), `background_stop` (fork() asks it to end);
 * the thread's own decision to end, under the same lock, excludes fork()'s. */
static pthread_mutex_t background_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t background_wake;
static pthread_t background_thread;
static bool background_live, background_stop, background_wake_made;

/* A pass that gave nothing back (the program idle with nothing due, or busy and purging on
 * its own calls) doubles the wait, up to 8 half delays (1 s by default), so that an idle
 * process is not woken 8 times a second for nothing; one that gave back resets it. */
static void *background_main(void *arg) {
  uint64_t mine = (uint64_t)(uintptr_t)arg;
  uint64_t half = (uint64_t)TROVE_OPT(PURGE_DELAY_MS) / 2, wait;
  if (half < 10) half = 10;
  wait = half;
  size_t seen = atomic_load_explicit(&_trove_os_purge_calls, memory_order_relaxed);
  pthread_mutex_lock(&background_lock);
  for (;;) {
    if (_trove_os_wait_ms(&background_wake, &background_lock, &background_stop, wait))
      break;                                 /* fork() joins it */
    pthread_mutex_unlock(&background_lock);
    _trove_mutex_lock(&background_pass);
    _trove_heap_maybe_purge(&_trove_heap_empty);   /* never takes a heap: it allocates nothing */
    _trove_mutex_unlock(&background_pass);
    size_t calls = atomic_load_explicit(&_trove_os_purge_calls, memory_order_relaxed);
    pthread_mutex_lock(&background_lock);
    if (!background_stop && calls == seen && wait == 8 * half &&
        TROVE_OPT(BACKGROUND) == BACKGROUND_ON_DEMAND && waiting_pages() < BACKGROUND_WANT) {
      background_live = false;               /* a later burst starts another */
      pthread_detach(pthread_self());
      atomic_compare_exchange_strong_explicit(&background_gen, &mine, 0, memory_order_relaxed,
                                              memory_order_relaxed);
      break;
    }
    wait = calls != seen ? half : wait * 2 < 8 * half ? wait * 2 : 8 * half;
    seen = calls;
  }
  pthread_mutex_unlock(&background_lock);
  if (TROVE_OPT(VERBOSE) > 0) _trove_message("trove: background thread stopped\n");
  return NULL;
}

static TROVE_NOINLINE void background_start(void) {
  uint64_t want = _trove_fork_gen + 1;
  uint64_t seen = atomic_load_explicit(&background_gen, memory_order_relaxed);
  if (seen == want ||
      !atomic_compare_exchange_strong_explicit(&background_gen, &seen, want,
                                               memory_order_relaxed, memory_order_relaxed))
    return;                                  /* running, or another thread starts it */
  pthread_attr_t attr;
  sigset_t all, old;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, (size_t)256 << 10);
  sigfillset(&all);
  /* Under the lock, so that a fork() meanwhile finds the thread either not made or made and
   * marked live. pthread_create's own mallocs come back here and find `want` already set. */
  pthread_mutex_lock(&background_lock);
  if (!background_wake_made) _trove_os_cond_init(&background_wake);
  background_wake_made = true;
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&background_thread, &attr, background_main, (void *)(uintptr_t)want);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  background_live = rc == 0;
  pthread_mutex_unlock(&background_lock);
  pthread_attr_destroy(&attr);
  /* On failure it is not tried again in this process (the flag stays): the program's own
   * calls do the work, as without the thread. Said only when asked for by name. */
  if (TROVE_OPT(VERBOSE) > 0 || (rc != 0 && TROVE_OPT(BACKGROUND) == BACKGROUND_ALWAYS))
    _trove_message(rc == 0 ? "trove: background thread started\n"
                           : "trove: warning: could not start the background thread\n");
}

/* fork()'s first step (init.c, before any lock of trove's is taken): the thread is stopped
 * and joined, so that the program forks with the threads it made itself. Python 3.12 and
 * later count the process's threads after os.fork() and warn when there are several; the
 * child would not have the thread anyway. The next call that finds much free memory waiting
 * (or, with TROVE_BACKGROUND=1, the next timed pass) starts it again. */
void _trove_background_fork_prepare(void) {
  pthread_mutex_lock(&background_lock);
  if (!background_live) {
    pthread_mutex_unlock(&background_lock);
    return;
  }
  background_stop = true;
  pthread_cond_signal(&background_wake);
  pthread_mutex_unlock(&background_lock);
  pthread_join(background_thread, NULL);
  pthread_mutex_lock(&background_lock);
  background_stop = false;
  background_live = false;
  atomic_store_explicit(&background_gen, 0, memory_order_relaxed);
  pthread_mutex_unlock(&background_lock);
}

/* Medium runs queued for a live heap that has not taken its queue for 1/8 of the purge
 * delay (all queued ones if `all`) go to the page heap. A thread that hands buffers to others
 * and then blocks (on a socket, for its next request) takes its queue on its next slow path
 * only: its runs would wait there, out of reach of the purge, for as long as it waits. The
 * lanes are taken as the owner takes them (the flag first: a push that a lane's load misses
 * sees the flag cleared and sets it), small blocks go back onto the owner's queue, and the
 * runs are freed after the heaps lock is let go. With a bound of 2 MiB on the queue instead,
 * 7 producers handing 64-256 KiB buffers to one consumer took 0.333 s against 0.226 (its
 * frees past the bound went to the page heap under the producers' arena locks). */
static void sweep_idle_queues(bool all) {
  uint64_t now = _trove_os_now_ms(), wait = (uint64_t)TROVE_OPT(PURGE_DELAY_MS) / 8;
  trove_block_t *runs = NULL;
  _trove_mutex_lock(&_trove_locks.heaps);
  for (trove_heap_t *h = _trove_heaps_all; h; h = h->next_all) {
    if (!h->alive || h->shared || h->orphan || h->fork_gen != _trove_fork_gen ||
        (atomic_load_explicit(&h->remote_pending, memory_order_relaxed) & REMOTE_MEDIUM) == 0)
      continue;
    if (!all && now - atomic_load_explicit(&h->remote_taken_ms, memory_order_relaxed) < wait)
      continue;
    for (trove_block_t *b = queue_take_all(h), *next; b; b = next) {
      next = b->next;
      uintptr_t a = (uintptr_t)b;
      if (_trove_sb_of(_trove_segment_of(a), a)->kind == TROVE_SPAN_MEDIUM) {
        b->next = runs;
        runs = b;
      } else {
        push_remote(h, b, REMOTE_PENDING); /* the owner's, as before */
      }
    }
  }
  _trove_mutex_unlock(&_trove_locks.heaps);
  for (trove_block_t *b = runs, *next; b; b = next) {
    next = b->next;
    uintptr_t a = (uintptr_t)b;
    _trove_pages_free(_trove_sb_of(_trove_segment_of(a), a));
  }
}

/* The medium caches of live threads: the runs cached for 1/8 of the purge delay (all of them
 * if `all`) go back to the page heap, for a thread that has made no medium call since (its
 * own calls trim its cache); so do their spare superblocks past the same age, and their
 * empty superblocks past the purge delay.
 *
 * Idle empty superblocks. Within K a heap keeps the superblocks it emptied (up to 1.5 MiB),
 * for its own next burst, and its own timed work gives back those that waited a purge delay
 * (sparse_trim). A thread that frees a burst and then blocks (a pool's worker between jobs,
 * a connection's thread waiting on its client) makes no call, so its empty ones stayed
 * resident for as long as it waited: 16 threads that each built and freed 4 MiB of 16-512 B
 * blocks and then blocked held 34 MiB after 3 s (with the background thread; 10.5 of it was
 * the rest: current superblocks, which the fast paths use without a lock). The empty list is
 * under the cache's lock for that (its owner takes it on the slow paths that push or take an
 * empty superblock, one exchange each), and the sweep gives back the empty ones that waited
 * a purge delay, as their owner would: what they held is subtracted from the owner's
 * sparse_pages when it next looks (swept_pages), so the owner's counters stay its own.
 *
 * A cache whose owner holds its lock is skipped: the owner is at work on it. */
static void sweep_idle_caches(bool all) {
  uint64_t now = _trove_os_now_ms();
  trove_sb_t *due = NULL;
  _trove_mutex_lock(&_trove_locks.heaps);
  for (trove_heap_t *h = _trove_heaps_all; h; h = h->next_all) {
    if (!h->alive || h->shared || h->orphan || h->fork_gen != _trove_fork_gen) continue;
    if (!mc_trylock(h)) continue;
    mcache_trim_locked(h, now, all);
    spare_trim_locked(h, now, all);
    uint32_t pages = empty_due_locked(h, now, all, &due);
    if (pages) atomic_fetch_add_explicit(&h->swept_pages, pages, memory_order_relaxed);
    mc_unlock(h);
  }
  _trove_mutex_unlock(&_trove_locks.heaps);
  /* to the page heap as free since they emptied, as spares go (spare_release) */
  for (trove_sb_t *next; due; due = next) {
    next = due->next;
    spare_release(due);
  }
}

void _trove_heap_collect(trove_heap_t *h, bool force) {
  batch_queue();
  if (h != &_trove_heap_empty) {
    drain_remote(h);
    if (force) {
      parking_reset(h);                    /* cur_trim gives back what is parked */
      cur_trim(h, 0, true);
      lists_purge(h, 0, true);
    }
    sparse_trim(h, force);
    medium_cache_trim(h, force);
  }
  _trove_pool_sweep();
  if (force) pool_purge(0, true);
  sweep_idle_queues(force);
  sweep_idle_caches(force);
  shared_tend(force);
  heaps_expire(force);
  _trove_pages_purge(force);
  _trove_large_purge(force);
}

/* ------------------------------------------------------------------ shared heaps */
/* A thread per connection: with hundreds of threads, each holding a few blocks of many
 * classes, what each thread's own superblocks cost decides the peak RSS, not the live data
 * (bench/manythreads: 100 threads held 104 MiB, 45 of it in superblocks of the classes above
 * 4 KiB and 29 in those of 1-4 KiB, one or two per class and thread; glibc 14, jemalloc 44).
 * So past max(63, 8 per CPU) live thread heaps, a thread that needs a superblock of a class
 * above 256 B and has none of its own with a free block allocates from one of 4 heaps per
 * CPU that the threads share (Hoard's heaps per processor), under its lock (a busy one is
 * passed for a free one, as glibc's arenas are): one superblock per class serves many
 * threads. Blocks go back to it like any other heap's, through its remote queue, which it
 * drains under the lock; the timed work tends it (shared_tend). Classes up to 256 B, which
 * most allocations use, keep the thread heaps' lock-free paths, as do all classes in a
 * program with fewer threads. With the floor at 2 KiB, manythreads at 100 / 800 threads
 * went from 104 -> 56 / 733 -> 269 MiB peak RSS (jemalloc 51 / 252), time level; coarse
 * mode (see direct_of) then took it to 23 / 115 MiB, most of that each thread's current
 * superblocks of the 14 coarse classes up to 2 KiB, a page each. Sharing from 256 B up: 100
 * / 200 / 800 threads 23.4 -> 19.6, 36.9 -> 28.2, 114.6 -> 74.5 MiB (glibc 13.6 / 20.7 /
 * 64.9), and 1-8% fewer requests a second (6.36M -> 5.86M, 6.40M -> 6.32M, 6.54M -> 6.40M;
 * glibc 5.52M / 5.65M / 5.67M); from 512 B up 20.9 / 31.1 / 86.7 MiB for about as much
 * time; from 128 B up, 30% slower (the lock and the remote frees cost 330 instructions more
 * a shared malloc and its free, and 128-256 B is a third of its mallocs). With one shared
 * heap per CPU and no passing, 32 threads of mtmalloctest took 0.46 s instead of 0.26,
 * hence the floor of 64 threads: thread pools a few times the CPUs keep their own heaps.
 * A shared class may have direct[] slots: heap_alloc_small points them away from a
 * superblock it puts on the full list (set_current), so that no slot keeps it while a
 * shared heap serves the class (when it only reset cur[], the slots of the 2-4 KiB classes
 * kept such a superblock after it went back to the page heap, and test_stress's crowded run
 * caught misaligned and overwritten blocks). */
#define SHARED_MAX 64
#define SHARED_MIN_SIZE 256      /* classes above this are shared when threads crowd the CPUs */
typedef struct {
  trove_mutex_t lock;
  trove_heap_t *_Atomic heap;    /* set once, under _trove_locks.heaps, after `lock` is made */
  bool broken;                   /* a fork's child: it was not locked across the fork */
} __attribute__((aligned(TROVE_CACHE_LINE))) trove_shared_t;
static trove_shared_t shared[SHARED_MAX];
static uint64_t shared_forked;   /* fork: the shared heaps whose locks fork_prepare holds */

/* Live thread heaps past which the classes above 256 B are shared: TROVE_SHARED_THREADS, or
 * by default more than 8 per CPU and at least 64. */
static uint32_t shared_threshold(void) {
  long o = TROVE_OPT(SHARED_THREADS);
  if (o > 0) return (uint32_t)o;
  size_t t = 8 * ncpus();
  return t > 63 ? (uint32_t)t : 63;
}

static bool shared_class(const trove_heap_t *h, size_t cls) {
  return _trove_class_size[cls] > SHARED_MIN_SIZE && h->lists[cls].partial == NULL &&
         h->lists[cls].sparse == NULL &&
         atomic_load_explicit(&heaps_alive, memory_order_relaxed) > shared_threshold();
}

static size_t shared_count(void) { return 4 * ncpus() < SHARED_MAX ? 4 * ncpus() : SHARED_MAX; }

static void *heap_alloc_small(trove_heap_t *h, size_t cls, bool share);
static trove_shared_t *shared_get(size_t i) {
  trove_shared_t *sh = &shared[i];
  if (atomic_load_explicit(&sh->heap, memory_order_acquire) != NULL) return sh;
  _trove_mutex_lock(&_trove_locks.heaps);
  if (atomic_load_explicit(&sh->heap, memory_order_relaxed) == NULL) {
    trove_heap_t *h = heap_new_locked();
    if (h != NULL) {
      heap_reset(h);
      h->shared = true;
      h->alive = true;            /* never parked, swept or counted as a thread's */
      _trove_pages_arena_init(&h->arena, (uint32_t)i + 1);
      pool_shard_mark(h);
      h->now_ms = h->born_ms = _trove_os_now_ms();
      _trove_mutex_init(&sh->lock);
      atomic_store_explicit(&sh->heap, h, memory_order_release);
    }
  }
  _trove_mutex_unlock(&_trove_locks.heaps);
  return atomic_load_explicit(&sh->heap, memory_order_acquire) ? sh : NULL;
}

/* Allocate a block of `cls` for thread heap `h` from its arena's shared heap; *served is false
 * if there is none (it could not be made, or a fork's child cannot use it). */
static void *shared_malloc(trove_heap_t *h, size_t cls, bool *served) {
  /* The thread's home among the 4 shared heaps of the CPU it runs on now (by its id within
   * those 4), so that a shared heap's lock and lists stay in one core's cache: with the home
   * fixed by the thread's id alone, every heap's lock line went from core to core as
   * threads took turns, 30 ns a trylock; bench/manythreads at 100 threads 0.043-0.044 ->
   * 0.037-0.040 s, at 800 0.40-0.42 -> 0.36-0.37 s (two sets of 5-7 interleaved runs; at
   * 200 and 400 threads -6% and -3%), peak RSS level. */
  size_t n = shared_count();
  int cpu = _trove_os_cpu();
  size_t home = cpu >= 0 ? ((size_t)cpu * 4 + h->id % 4) % n : (h->id - 1) % n;
  trove_shared_t *sh = shared_get(home);
  *served = sh != NULL && !sh->broken;
  if (!*served) return NULL;
  /* Busy (its holder may be descheduled: threads outnumber CPUs here): another one that is
   * free, as glibc's arenas do; else wait for the thread's own. */
  if (_trove_mutex_trylock(&sh->lock) != 0) {
    trove_shared_t *got = NULL;
    for (size_t k = 1; k < n && got == NULL; k++) {
      trove_shared_t *o = shared_get((home + k) % n);
      if (o != NULL && !o->broken && _trove_mutex_trylock(&o->lock) == 0) got = o;
    }
    if (got) sh = got;
    else _trove_lock(&sh->lock, TROVE_LOCK_POOL);
  }
  trove_heap_t *s = atomic_load_explicit(&sh->heap, memory_order_relaxed);
  s->now_ms = h->now_ms;
  s->c.slow_mallocs++;
  drain_remote(s);
  void *p = heap_alloc_small(s, cls, false);
  _trove_mutex_unlock(&sh->lock);
  return p;
}

/* The timed work of the shared heaps (their threads' slow paths do none of it): collect what
 * was freed into them, release idle current superblocks and empty ones past the delay. A heap
 * whose lock is taken is left for the next time. */
static void shared_tend(bool all) {
  uint64_t now = _trove_os_now_ms();
  for (size_t i = 0; i < SHARED_MAX; i++) {
    trove_shared_t *sh = &shared[i];
    trove_heap_t *s = atomic_load_explicit(&sh->heap, memory_order_acquire);
    if (s == NULL || sh->broken || _trove_mutex_trylock(&sh->lock) != 0) continue;
    s->now_ms = now;
    drain_remote(s);
    sparse_trim(s, all);
    cur_trim(s, now, all);
    lists_purge(s, now, all);
    _trove_mutex_unlock(&sh->lock);
  }
}

void _trove_shared_fork_prepare(void) TROVE_HIDDEN;
void _trove_shared_fork_prepare(void) {
  /* written only if it changes: every page the parent writes costs it a fault per fork */
  if (shared_forked) shared_forked = 0;
  for (size_t i = 0; i < SHARED_MAX; i++)
    if (atomic_load_explicit(&shared[i].heap, memory_order_acquire) != NULL) {
      _trove_mutex_lock(&shared[i].lock);
      shared_forked |= (uint64_t)1 << i;
    }
}
void _trove_shared_fork_parent(void) TROVE_HIDDEN;
void _trove_shared_fork_parent(void) {
  for (size_t i = SHARED_MAX; i-- > 0;)
    if (shared_forked & ((uint64_t)1 << i)) _trove_mutex_unlock(&shared[i].lock);
}
/* In the child a shared heap made while the fork was being prepared may have been in use by a
 * thread that no longer exists: it is not used again (its blocks stay valid). */
static void shared_fork_child(void) {
  for (size_t i = 0; i < SHARED_MAX; i++) {
    if (atomic_load_explicit(&shared[i].heap, memory_order_relaxed) == NULL) continue;
    _trove_lock_reset(&shared[i].lock);
    if (!(shared_forked & ((uint64_t)1 << i))) shared[i].broken = true;
  }
}

/* ------------------------------------------------------------------ the malloc slow path */
/* A superblock of class `cls` to allocate from: the fullest kinds first (Hoard), then the
 * pool, then an empty one, then (after a borrowed block, see borrow) fresh pages. */
static TROVE_NOINLINE trove_sb_t *find_superblock_rest(trove_heap_t *h, size_t cls, void **lent);
/* A superblock for class `cls` to become current; NULL with a block in `*lent` if a larger
 * class lent one instead (see borrow), NULL alone when out of memory. */
static trove_sb_t *find_superblock(trove_heap_t *h, size_t cls, void **lent) {
  trove_sb_t *sb = h->lists[cls].partial;
  if (sb) {
    partial_unlink(&h->lists[cls], sb);
    return sb;
  }
  return find_superblock_rest(h, cls, lent);
}

/* Borrowing. A class that has used up its superblocks (one at least is full) and would now
 * take fresh pages first takes a free block of one of the next two classes, at most a
 * quarter larger, from its current superblock or the first partial one. In a wide mix of
 * sizes the block count of each class rises and falls, and a class that keeps its own peak
 * count carved holds that many blocks whatever the others do; borrowing lets one class's peak
 * ride on a neighbour's trough. mtmalloctest (100 blocks of 16 B - 16 KiB per round, all
 * freed) at 8 threads: peak RSS 14.7 -> 12.6 MiB (mimalloc 11.4, 4 classes per doubling).
 * The block goes home on free like any other. Bounded: only two lists of each lender are
 * looked at, so a class growing while its neighbours hold many free blocks borrows at most
 * those lists' worth (each block through the slow path) each time it has filled a
 * superblock, then takes fresh pages as before. Never for an aligned request (its class was
 * picked for its alignment, and a larger class's blocks may be less aligned), nor in a shared
 * heap. So a block is at most 1/8 (16 B up to 128 B) larger than the request, or a quarter
 * when borrowed.
 *
 * With more than 5 live threads per CPU (many_threads) a class also borrows
 * before it has a superblock of its own, for its first TROVE_FIRST_BORROWS blocks: such a
 * thread uses a few blocks of many classes, and a superblock of its own in each, one 8 KiB
 * page resident whole once a freed buffer has dirtied it, was most of what it held
 * (bench/manythreads at 100 threads: 41 classes up to 2 KiB, 330 KiB a thread). Borrowing,
 * about one class in three keeps a superblock: peak RSS at 100 / 200 / 400 threads 44.3 ->
 * 38.3, 77.9 -> 65.7, 145 -> 121 MiB (jemalloc 44.8 / 85.7 / 144), time level within the
 * noise (+1-3%); mstress 61 -> 57 MiB. A class a thread uses often gets its own superblock
 * after those blocks, and its fast path with it. Since coarse mode (set_current), the
 * classes up to 2 KiB mostly map to a coarse class instead, and this serves the larger ones
 * of a thread that does not share them yet (manythreads with 40 threads, coarse mode on:
 * 28.2 MiB peak RSS without first borrows, 24.7 with). */
#define TROVE_FIRST_BORROWS 64
static void *borrow(trove_heap_t *h, size_t cls) {
  if (_trove_aligned_call) return NULL;
  size_t bs = _trove_class_size[cls];
  for (size_t c = cls + 1; c <= cls + 2 && c < TROVE_CLASSES; c++) {
    if (_trove_class_size[c] > bs + bs / 4) break;
    trove_sb_t *sb = h->cur[c];
    trove_block_t *b = sb->free;             /* &_trove_sb_empty: none */
    if (b == NULL && (sb = h->lists[c].partial) != NULL) b = sb->free;
    if (b == NULL) continue;
    sb->free = b->next;
    sb->slack++;
    b->tag = 0;
    h->c.borrowed++;
    return b;
  }
  return NULL;
}

/* Longer superblocks for a class a thread keeps carving again. Above 4 KiB a superblock
 * holds 2-4 blocks (size_class.c: in a wide mix every class in use holds its current one,
 * and short ones keep that lean) and an empty one past K goes to the page heap, not to the
 * pool (sb_release_to: 8 blocks or more). So a thread that allocates such blocks by the
 * thousand and frees them in batches sent each few blocks through the page heap (its lock,
 * bins, split and coalesce) and carved them again: one thread filling and draining a ring of
 * 1,024 messages of 16-64 KiB (bench/handoff -t 1) spent 55% of its time there, 0.140 s
 * against mimalloc's 0.069 (512 KiB pages for blocks up to 128 KiB). So once a heap has taken
 * SB_GROW_AFTER fresh superblocks of such a class within an idle scan's period (half the
 * purge delay) while giving empty ones of it back (`churn`), its next ones are twice as long,
 * up to SB_GROW_MAX_PAGES and SB_GROW_MAX_BLOCKS; each scan that finds none taken halves them
 * again (grow_decay). (Without the block bound a 4-16 KiB ring, 2M messages, took 0.066 s and
 * 17.9 MiB peak RSS; with 16 at most, 0.080 s and 14.8 MiB; before growth 0.138 s, 13.8 MiB;
 * tcmalloc 0.040 s, 14.9 MiB.)
 * Blocks are carved lazily, so a long superblock costs resident pages only for blocks it has
 * handed out; what it costs is the free blocks it strands while one of its blocks lives. With
 * 8 fresh ones as the trigger, shbench-large (8 B-16 KiB, 18k page-heap trips a second) grew
 * its superblocks and held 22-32% more peak RSS; 1,024 in 125 ms (8k a second, where the trips
 * cost ~0.1% of the time) leaves it as it was. From 1 KiB up (the pool keeps those carved),
 * phases-small gained 15% at 1 thread but its peak RSS at 2 threads went from 283 to 376 MiB.
 * Counted over a whole period, the rate is seen late by a program that keeps it up for about
 * that long: rptest at `--scale 0.3` (rounds of 1,000 blocks of 8 B - 16 KB built and freed,
 * 0.14 s) ended with most of its classes above 4 KiB grown once. So in the classes whose
 * superblocks hold 4 blocks (up to SB_GROW_WINDOW_MAX) the count runs over windows of
 * 1/SB_GROW_WINDOWS of the purge delay, at the same rate, and they grow in its first rounds:
 * rptest 1.10-1.22x as fast at 1 thread (`--scale 0.3` and 1), 1.15x at 2, peak RSS 10.1 ->
 * 10.6 MiB and 20.1 -> 21.9 (tcmalloc 15.8 and 28.8); the suite's other programs within
 * their noise, in time and peak RSS (docs/BENCHMARKS.md, sixty-first session). Not for 2
 * blocks a superblock (above 16 KiB, size_class.c): counted so, workset-wide (a random
 * working set up to 32 KiB) grew its 32 KiB class and its peak RSS 7% (12.7 -> 13.6 MiB).
 * An empty one past K may instead wait in the heap's spares (spare superblocks, above) and
 * serve the next burst from there: that round trip counts as one through the page heap does
 * (release_empty sets `churn` before it tries the spares, find_superblock_rest counts a
 * spare of the class taken back). Until the sixty-eighth session only fresh ones counted,
 * and a heap whose bursts fit its spares kept 2-4 blocks a superblock: a program's only
 * thread filling and draining a ring of 1,024 messages of 4-16 KiB took 76 ns a message,
 * now 56 (tcmalloc 32, mimalloc 3 87), 2-32 KiB 96 -> 69 ns; rptest's rounds in the
 * program's only thread 1.30x as fast, peak RSS 9.9 -> 11.3 MiB (tcmalloc 1.64x the old
 * speed, 16.0 MiB). The suite's programs, whose main thread's first malloc held the spares
 * off for their first 1/8 purge delay (others_fresh), so that fresh ones counted there,
 * kept their speed and peak RSS. */
#define SB_GROW_AFTER 1024
#define SB_GROW_WINDOWS 16                   /* a window: PURGE_DELAY_MS / 16 (2 * 1024 / 16 in it) */
#define SB_GROW_WINDOW_MAX 16384
#define SB_GROW_MAX_PAGES 64                 /* 512 KiB */
#define SB_GROW_MAX_BLOCKS 16
#define SB_GROW_MIN_SIZE 4096                /* classes above this grow */
static void sb_grow(trove_heap_t *h, size_t cls) {
  trove_class_lists_t *l = &h->lists[cls];
  size_t bs = _trove_class_size[cls];
  if (bs <= SB_GROW_MIN_SIZE || !l->churn) return;
  uint32_t after = SB_GROW_AFTER;
  if (bs <= SB_GROW_WINDOW_MAX) {
    uint32_t now = (uint32_t)h->now_ms;
    if (now - l->fresh_ms > (uint32_t)((uint64_t)TROVE_OPT(PURGE_DELAY_MS) / SB_GROW_WINDOWS)) {
      l->fresh_ms = now;
      l->fresh = 0;
    }
    after = 2 * SB_GROW_AFTER / SB_GROW_WINDOWS;
  }
  if (++l->fresh < after) return;
  l->fresh = 0;
  size_t pages = (size_t)_trove_class_pages[cls] << (l->grow + 1);
  if (pages <= SB_GROW_MAX_PAGES &&
      (pages << TROVE_PAGE_SHIFT) / _trove_class_size[cls] <= SB_GROW_MAX_BLOCKS)
    l->grow++;
}

static void grow_decay(trove_heap_t *h) {
  for (size_t c = 1; c < TROVE_CLASSES; c++) {
    trove_class_lists_t *l = &h->lists[c];
    if (l->fresh == 0 && l->grow) l->grow--;
    if (l->cycled == 0 && l->cgrow) l->cgrow--;
    l->fresh = l->churn = 0;
    l->cycled = 0;
  }
}

/* Longer superblocks, too, for a class whose superblocks a thread fills and empties in turn
 * at a high rate from its own empty ones (take_own), without fresh pages: a loop that
 * allocates a batch of blocks and then frees them all (glibc's bench-malloc-simple, a
 * request's buffers). Above 1 KiB a superblock holds 2-28 blocks, and each one's round
 * trip took about 600 instructions of slow paths (two or three state changes on its way down
 * to empty, then the malloc's switch to it: take_own, the empty list under the cache's lock,
 * the full list for the one it replaces), 72 a malloc/free pair in 100 blocks of 4 KiB
 * allocated then freed (124 in all; tcmalloc 70). So once a heap has taken back
 * SB_CYCLE_AFTER such empty ones of a class within a window (1/SB_GROW_WINDOWS of the purge
 * delay: about 65,000 a second, where the trips are a visible share of the time), its next
 * ones are twice as long, up to SB_GROW_MAX_PAGES and SB_CYCLE_MAX_BLOCKS, and the shorter
 * empty ones it takes back go to the page heap; an idle scan that finds neither these nor
 * fresh ones taken shortens them again (grow_decay); the longer length is for those that
 * replace the shorter ones or serve batches past K (find_superblock_rest). That loop: 69 instructions a pair, and
 * 1.30x as fast; with 8 KiB blocks 1.5-1.9x, 2 KiB 1.2x, 32 KiB (2 a superblock) 1.3-2.1x
 * (tcmalloc 2.1x, 1.4x, 1.9-2.5x; docs/BENCHMARKS.md, sixty-third session). Counted only
 * for a superblock that a batch torn down whole emptied, where a longer superblock strands
 * no free block: one whose free list runs in address order at its head (blocks freed in
 * the order they were allocated, or the reverse), or where it holds 2 or 3 blocks (whose
 * lists are always so) one whose last two slow frees came one after the other
 * (`together`, set by sb_underflow). Counted for every empty one taken back, at 128 a
 * window, shbench-large (8 B - 16 KiB at random) held 5-8% more peak RSS and xmalloc
 * 13-18%; at 1,024 a window, but counted for every one, shbench-large and rptest at 2
 * threads 5-7%. Not where a superblock holds 32 blocks or more (those of 1 KiB and less),
 * which also stops parking (see park); nor past 5 live threads per CPU (many_threads), where
 * what each thread holds decides the peak RSS: a longer superblock keeps up to 31 blocks
 * more than the batch, and 16 threads cycling batches of 100 blocks of 4 KiB on 2 CPUs
 * peaked at 6.4 MiB instead of 4.7 for 1.07-1.09x the speed. */
#define SB_CYCLE_AFTER 1024
#define SB_CYCLE_MAX_BLOCKS 32
static bool freed_in_order(const trove_sb_t *sb) {
  const trove_block_t *b = sb->free;
  bool ordered = b != NULL;
  for (int k = 0; k < 3 && ordered && b->next != NULL; k++, b = b->next) {
    uintptr_t d = (uintptr_t)b->next - (uintptr_t)b;
    ordered = d == sb->bsize || d == -(uintptr_t)sb->bsize;
  }
  return ordered;
}

/* `e`, an empty superblock of the class just taken back by its heap: counts the trip, and
 * says whether `e` is shorter than the class's superblocks now are (then the caller gives it
 * to the page heap and takes a longer one). */
static bool sb_cycle(trove_heap_t *h, const trove_sb_t *e) {
  size_t cls = e->cls, bs = _trove_class_size[cls];
  if (e->capacity >= PARK_CAP || many_threads()) return false;
  trove_class_lists_t *l = &h->lists[cls];
  if (e->capacity < 4 ? e->together : freed_in_order(e)) {
    uint32_t now = (uint32_t)h->now_ms;
    if (now - l->cycled_ms > (uint32_t)((uint64_t)TROVE_OPT(PURGE_DELAY_MS) / SB_GROW_WINDOWS)) {
      l->cycled_ms = now;
      l->cycled = 0;
    }
    if (++l->cycled >= SB_CYCLE_AFTER) {
      l->cycled = 0;
      size_t pages = (size_t)_trove_class_pages[cls] << (l->cgrow + 1);
      if (pages <= SB_GROW_MAX_PAGES && (pages << TROVE_PAGE_SHIFT) / bs <= SB_CYCLE_MAX_BLOCKS)
        l->cgrow++;
    }
  }
  return l->cgrow != 0 && e->npages < ((size_t)_trove_class_pages[cls] << l->cgrow);
}

/* The heap's own superblock of class `cls` to become current, if it has one: the fullest of
 * the first SPARSE_LOOK sparse ones (a thread alone keeps all its sparse ones, see
 * make_sparse), else an empty one of the class, the most recent first (its pages are the
 * likeliest to be in cache), which keeps its free list. Each step of a walk is a descriptor
 * load, so the sparse ones are listed per class and the empty ones apart, with counts per
 * class and per length: with one list of all classes, the walk's loads of other classes'
 * descriptors were 14% of shbench-large's cache misses in the allocator (cachegrind, 1
 * thread), and walked on every slow malloc, the empty list (up to K's worth, 100-200
 * superblocks of every class) was 10% of a CPython run's time (PYTHONMALLOC=malloc, a class
 * borrowing its blocks went there on every malloc: 230M steps in 2.25M calls). */
static bool of_class(const trove_sb_t *sb, size_t cls, size_t unused) {
  (void)unused;
  return sb->cls == cls;
}
static bool of_length(const trove_sb_t *sb, size_t want, size_t pages) {
  return sb->npages >= want && sb->npages <= pages;
}
static trove_sb_t *take_own(trove_heap_t *h, size_t cls) {
  trove_sb_t *best = NULL;
  unsigned look = SPARSE_LOOK;
  for (trove_sb_t *sb = h->lists[cls].sparse; sb && look; sb = sb->next, look--)
    if (best == NULL || _trove_sb_used(sb) > _trove_sb_used(best)) best = sb;
  if (best) {
    sparse_remove_live(h, best);
    return best;
  }
  trove_sb_t *e = empty_count_cls(h, cls) != 0 ? empty_take(h, of_class, cls, 0) : NULL;
  if (e == NULL) return NULL;
  if (sb_cycle(h, e)) {
    sb_release(e, false);
    h->regrow = (uint8_t)cls;              /* find_superblock_rest: the longer one */
    return NULL;
  }
  recarve_if_scattered(e);
  return e;
}

static TROVE_NOINLINE trove_sb_t *find_superblock_rest(trove_heap_t *h, size_t cls, void **lent) {
  h->spare_streak = 0;
  /* The heap's own of this class (take_own), else (after the pool) an empty one of the same
   * length to carve again, the most recent first. */
  trove_sb_t *sb, *best = take_own(h, cls), *empty = NULL;
  if (best != NULL) return best;
  /* blocks freed for an idle heap first (a partial superblock of this class if one came) */
  if (atomic_load_explicit(&abandoned_out, memory_order_relaxed) != 0 && !h->shared &&
      steal_abandoned(h)) {
    if ((best = h->lists[cls].partial) != NULL) {
      partial_unlink(&h->lists[cls], best);
      return best;
    }
    if ((best = take_own(h, cls)) != NULL) return best;
  }
  size_t pages = _trove_class_pages[cls];
  /* More than 5 live threads per CPU (many_threads): per-thread memory is what
   * costs, so a heap's first superblock of a class is short, a page for the classes up to
   * 4 KiB. Such a thread often holds one or two blocks of most classes it uses, and a full
   * run per class (64 KiB up to 128 B, 32 KiB up to 4 KiB) was resident whole when its pages
   * came back dirty from freed buffers: bench/manythreads at 100 threads, 148 -> 107 MiB
   * peak RSS. Not with fewer threads: a thread that goes on past the short one holds two
   * partly carved runs of the class (larson-large's utilization 0.42 -> 0.38). A shared
   * heap, which serves many such threads, takes full-length ones (level with short ones on
   * manythreads: 100-800 threads within 1-2% in peak RSS and +-8% in time, 5 runs). */
  pages <<= h->lists[cls].grow;
  /* sb_cycle's longer superblocks: to replace a shorter one it gave back, or while the heap
   * gives empty ones of the class past K back (`churn`: batches larger than it keeps), but
   * not for a working set that grows (fresh ones past its empty and spare ones), which
   * would keep the longer ones long after the batches stop; spares of either length
   * serve. */
  size_t cycle = (size_t)_trove_class_pages[cls] << h->lists[cls].cgrow, longest = pages;
  bool batch = (h->regrow == cls || h->lists[cls].churn) && cycle > pages;
  if (batch) pages = cycle;
  h->regrow = 0;
  if (cycle > longest) longest = cycle;
  size_t want = pages;
  /* `full` is empty in a class whose full superblocks were abandoned (abandon_full): such a
   * class borrows less (see the thirty-third session in docs/BENCHMARKS.md). A batch's
   * superblock is never a first one. */
  bool used_up = h->lists[cls].full != NULL;
  bool crowded_first = !used_up && !h->shared && !batch && many_threads();
  if (crowded_first) want = _trove_class_starter[cls];
  /* The empty list is walked for one of another class only when it holds one of a length
   * to carve again (see take_own). */
  bool other = false;
  for (size_t n = want; !other && n <= pages; n++) other = empty_count_len(h, n) != 0;
  /* a spare of the class next, as it is: a round trip past K, as a fresh one is (sb_grow) */
  if ((best = spare_take(h, cls, false, want, longest)) != NULL) {
    sb_grow(h, cls);
    return best;
  }
  if ((best = pool_adopt_any(h, cls)) != NULL) return best;
  if (other && (empty = empty_take(h, of_length, want, pages)) != NULL) {
    _trove_sb_init(empty, cls);              /* an empty one of another class: re-carve */
    return empty;
  }
  if ((best = spare_take(h, cls, true, want, pages)) != NULL) return best;
  /* Crowded threads borrow too before a class has a superblock of their own, for its first
   * TROVE_FIRST_BORROWS blocks (see borrow). */
  bool first = crowded_first && h->first_borrows[cls] < TROVE_FIRST_BORROWS;
  if ((first || (used_up && !h->shared)) && (*lent = borrow(h, cls)) != NULL) {
    h->first_borrows[cls] += first;
    return NULL;
  }
  /* Fresh pages: the empty pool superblocks of other classes go to the page heap first, so
   * that a program moving to other sizes reuses their pages (waiting for the sweep cost
   * blowup-rr 6% more peak RSS). */
  if (atomic_load_explicit(&pool_empty_pages, memory_order_relaxed) != 0) pool_flush_empties();
  int kind = TROVE_SPAN_SMALL | (_trove_class_size[cls] <= TROVE_DENSE_MAX ? TROVE_PAGES_DENSE : 0);
  sb = _trove_pages_alloc(&h->arena, want, 1, kind);   /* dense: see segment.c, huge pages */
  if (sb == NULL) return NULL;
  if (!sb->dirty) {
    h->fresh_seen++;                        /* its own: see mcache_cap */
    give_back_unfit(h);                     /* spares and cached runs: see spare superblocks */
  }
  _trove_sb_init(sb, cls);
  atomic_store_explicit(&sb->heap, h, memory_order_release);
  h->c.sb_fresh++;
  sb_grow(h, cls);
  return sb;
}

/* Refill `sb` from its own lists; false if it has no free block at all. */
static bool sb_refill(trove_sb_t *sb) {
  if (sb->local_free == NULL &&
      atomic_load_explicit(&sb->thread_free, memory_order_relaxed) != NULL)
    sb->slack -= (int32_t)_trove_sb_collect(sb);
  if (sb->local_free) {
    sb->free = sb->local_free;
    sb->local_free = NULL;
    return true;
  }
  return sb->carved < sb->capacity * sb->bsize && _trove_sb_extend(sb);
}

/* A medium run handed out to `h`'s thread (h NULL: a thread without a heap). */
static void *medium_taken(trove_heap_t *h, trove_sb_t *run, size_t size) {
  if (h) {
    /* the run's length, not the request's: a cached run may be longer, and its free takes
     * its whole length off (counted from the request, a thread that reused longer runs
     * drifted below zero, and a negative net bound its cache to the fixed part for good) */
    h->medium_net += (int64_t)run->npages;
    h->mmalloc_streak += run->npages;
  }
  run->medium_heap = h;
  run->requested = size;
  ((trove_block_t *)run->start)->tag = 0;   /* a tag left by an earlier free is not ours */
  return (void *)run->start;
}

/* A medium run of `npages` from the page heap (NULL if it has none). */
static void give_back_unfit(trove_heap_t *h);
static trove_sb_t *medium_pages(trove_heap_t *h, size_t npages, size_t align_pages) {
  trove_sb_t *run = _trove_pages_alloc(h ? &h->arena : NULL, npages, align_pages, TROVE_SPAN_MEDIUM);
  if (run == NULL) return NULL;
  if (!run->dirty) {                        /* fresh pages: what it keeps did not fit */
    if (h) h->fresh_seen++;                 /* its own: see mcache_cap */
    give_back_unfit(h);
  }
  run->state = 0;
  _trove_sb_set_run(run, npages << TROVE_PAGE_SHIFT, npages << TROVE_PAGE_SHIFT);
  atomic_store_explicit(&run->heap, NULL, memory_order_relaxed);
  return run;
}

/* The quick medium malloc (see MQUICK_PERIOD): a run from the thread's cache, else from the
 * page heap, without malloc_slow's chores (the next slow call does them). A thread whose
 * buffers do not all fit its cache (sixteen lengths of 72 KiB - 1 MiB in turn, 5.1 MiB, in a
 * cache of 2 MiB: the four longest never do) went through malloc_slow and malloc_medium for
 * each miss and medium_free for each free that did not fit, the cache's lock taken twice and
 * a clock read each: fastpath-medium (200k pairs) 97.39M -> 89.96M instructions with both,
 * bufswap -4.7%, holes -3.1%. malloc_slow if the page heap has none. */
static void *malloc_slow(trove_heap_t *h, size_t size);
/* The timed work, then `p`: a tail call for the quick take. */
static TROVE_NOINLINE void *medium_tick(trove_heap_t *h, void *p) {
  _trove_heap_maybe_purge(h);
  return p;
}
static void *medium_quick_taken(trove_heap_t *h, trove_sb_t *run, size_t size) {
  h->mquick_takes--;
  h->mfree_streak = 0;
  h->mquick_extra = 0;
  void *p = medium_taken(h, run, size);
  if ((++h->tick & 31) == 0) return medium_tick(h, p);   /* as often as malloc_slow */
  return p;
}
/* Apart, so that the cache's hit saves no register for it. */
static TROVE_NOINLINE void *medium_quick_pages(trove_heap_t *h, size_t size, size_t npages) {
  trove_sb_t *run = medium_pages(h, npages, 1);
  return run ? medium_quick_taken(h, run, size) : malloc_slow(h, size);
}
/* The quick take past the exact length's bin, the cache's lock held (released here). */
static TROVE_NOINLINE void *medium_quick_other(trove_heap_t *h, size_t size, size_t npages) {
  trove_sb_t *run = h->mcache_pages ? medium_cache_take(h, size, npages, 0) : NULL;
  mc_unlock(h);
  if (run == NULL) return medium_quick_pages(h, size, npages);
  return medium_quick_taken(h, run, size);
}
/* malloc above SMALL_MAX, straight from the fast path: the quick take while the count allows
 * (the empty heap's is 0), else malloc_slow. The exact length first, as medium_cache_take
 * would find it (the shortest that fits), with no walk of the bitmap. Through
 * _trove_malloc_generic (past the checks of a small class's refill) and a call of the quick
 * take, a medium malloc cost 100 instructions, now 57 (batches of 25 buffers of 128 KiB),
 * and 49 with no register saved (the whole program 41.5M -> 40.0M instructions). */
void *_trove_malloc_big(size_t size, trove_heap_t *h) {
  /* Every call out of it is a tail call, so that it saves no register: remote frees waiting
   * (runs other threads freed go first) or the cache's lock held by a sweep send the call
   * to malloc_slow, which drains them or waits. */
  if (h->mquick_takes == 0 || size > TROVE_MEDIUM_MAX || remote_pending(h) ||
      atomic_exchange_explicit(&h->mcache_lock, 1, memory_order_acquire))
    return malloc_slow(h, size);
  size_t npages = (size + TROVE_PAGE_SIZE - 1) >> TROVE_PAGE_SHIFT, b = mcache_bin(npages);
  if (h->mcache[b] == NULL) return medium_quick_other(h, size, npages);
  trove_sb_t *run = mcache_pop(h, b);
  mc_unlock(h);
  run->state = 0;
  return medium_quick_taken(h, run, size);
}

static void *malloc_medium(trove_heap_t *h, size_t size, size_t align) {
  size_t npages = (size + TROVE_PAGE_SIZE - 1) >> TROVE_PAGE_SHIFT;
  size_t align_pages = align > TROVE_PAGE_SIZE ? align >> TROVE_PAGE_SHIFT : 1;
  if (h) drain_remote(h);                  /* medium runs other threads freed come back here */
  trove_sb_t *run = NULL;
  if (h) {
    mc_lock(h);
    if (h->mcache_pages) run = medium_cache_take(h, size, npages, align);
    mc_unlock(h);
  }
  if (h) {
    h->mfree_streak = 0;
    h->mquick_extra = 0;
    note_medium(h);
    mquick_takes_reset(h);
  }
  if (run == NULL && (run = medium_pages(h, npages, align_pages)) == NULL) return NULL;
  return medium_taken(h, run, size);
}

/* large.c is about to fault `bytes` in for a large block, which can reuse no page of the
 * page heap: the pool's empty superblocks and the calling thread's cached runs and spares go
 * to the page heap, and as many of the segments that leaves empty go back to the OS
 * (_trove_pages_yield). */
void _trove_heap_yield(size_t bytes) {
  give_back_unfit(_trove_tls_heap);
  _trove_pages_yield(bytes);
}

/* Out of memory or address space, a request failed: free memory that trove keeps goes back so
 * that the caller can try again, true if there may be some. First the calling thread's cached
 * medium runs and spare superblocks (cheap, and most often enough); once those are gone, once
 * per failing request (*collected), what malloc_trim gives back: every heap's empty
 * superblocks within K, the pool's, idle threads' caches, exited threads' heaps. The page
 * heap then unmaps the segments that emptied (its own failure path purges only what is
 * already free). Without that, a program that freed 51 MiB under RLIMIT_AS could not
 * allocate 32 MiB afterwards, since the empty superblocks within K kept their segments
 * mapped (test_enomem). */
bool _trove_heap_release_cache(bool *collected) {
  trove_heap_t *h = _trove_tls_heap;
  if (h != &_trove_heap_empty) {
    mc_lock(h);
    bool had = h->mcache_pages != 0 || spare_pages(h) != 0;
    mcache_trim_locked(h, 0, true);
    spare_trim_locked(h, 0, true);
    mc_unlock(h);
    if (had) return true;
  }
  if (*collected) return false;
  *collected = true;
  _trove_heap_collect(h, true);
  return true;
}

void *_trove_malloc_medium(size_t size, size_t align, bool zero) TROVE_HIDDEN;
void *_trove_malloc_medium(size_t size, size_t align, bool zero) {
  /* calloc and the aligned calls come here, not through malloc_slow: a thread whose first
   * calls they are sets up its heap here too. Without one it had no run cache, and each call
   * took the page heap's lock twice (a thread whose only calls were posix_memalign(64 KiB,
   * 64 KiB), 16 blocks replaced at random: 300 ns a call; with its heap 69 ns). */
  trove_heap_t *h = _trove_tls_heap;
  if (h == &_trove_heap_empty) h = thread_heap_init(NULL);    /* NULL: out of memory, no cache */
  void *p = malloc_medium(h, size, align);
  if (p && zero) {
    trove_sb_t *run = _trove_sb_of(_trove_segment_of((uintptr_t)p), (uintptr_t)p);
    if (run->dirty) memset(p, 0, run->bsize);
    else _trove_os_touch(p, size);
  }
  return p;
}

/* A block of class `cls` from `h`'s superblocks, current first; NULL when out of memory. `h`
 * is the thread's heap, or a shared heap under its lock (then `share` is false). */
static void *heap_alloc_small(trove_heap_t *h, size_t cls, bool share) {
  trove_sb_t *sb = h->cur[cls];
  for (;;) {
    if (sb->free || (sb != &_trove_sb_empty && sb_refill(sb))) break;
    if (sb != &_trove_sb_empty) {         /* exhausted: it waits on the full list */
      retire_full(h, cls, sb);
      /* its direct[] slots too (see direct_of): a shared heap may serve this malloc and
       * leave the class without a current superblock of its own */
      set_current(h, cls, &_trove_sb_empty);
      sb = &_trove_sb_empty;
    }
    if (h->coarse && coarse_serves(h, cls)) {   /* coarse mode: its coarse class serves it */
      cls = _trove_class_coarse[cls];
      sb = h->cur[cls];
      continue;
    }
    if (share && shared_class(h, cls)) {
      bool served;
      void *p = shared_malloc(h, cls, &served);
      if (served) return p;
    }
    void *lent = NULL;
    sb = find_superblock(h, cls, &lent);
    if (sb == NULL) {
      set_current(h, cls, &_trove_sb_empty);
      return lent;                         /* NULL: out of memory */
    }
    set_current(h, cls, sb);
  }
  trove_block_t *b = sb->free;
  sb->free = b->next;
  sb->slack++;
  b->tag = 0;
  return b;
}

static TROVE_NOINLINE void *malloc_slow(trove_heap_t *h, size_t size) {
  if (unlikely(h == &_trove_heap_empty)) {
    h = thread_heap_init(NULL);
    if (h == NULL) goto enomem;
  }
  h->c.slow_mallocs++;
  h->refills = 32;
  batch_queue();
  drain_remote(h);
  if ((++h->tick & 31) == 0) {
    if (unlikely(crowded() != h->coarse)) coarse_set(h, !h->coarse);  /* and at thread start */
    _trove_heap_maybe_purge(h);
  }
  if (size > TROVE_SMALL_MAX) {
    void *p;
    bool collected = false;
    do p = size <= TROVE_MEDIUM_MAX ? malloc_medium(h, size, 0) : _trove_large_alloc(size, 0, false);
    while (p == NULL && _trove_heap_release_cache(&collected));
    if (p == NULL) goto enomem;
    return p;
  }
  void *p;
  bool collected = false;
  /* an aligned request's class (alloc.c), which may be one that malloc never takes */
  size_t cls = _trove_aligned_call ? _trove_size_class_lookup(size)
                                   : _trove_size_class_plain(size);
  do p = heap_alloc_small(h, cls, true);
  while (p == NULL && _trove_heap_release_cache(&collected));
  if (p == NULL) goto enomem;
  return p;
enomem:
  if (!_trove_aligned_call) _trove_os_set_enomem();   /* see _trove_aligned_call */
  return NULL;
}

/* The class's current superblock is exhausted and it has no partial one: the heap's own
 * sparse or empty superblock of the class (take_own), if it has one, becomes current without
 * the chores of malloc_slow (those run every 32nd time anyway, see below). Taken before the
 * coarse class or a shared heap only where malloc_slow takes it too. A thread that takes and
 * frees bursts of blocks above 4 KiB (2-4 to a superblock) switches every few mallocs: 25
 * blocks of 4 KiB / 16 KiB taken and freed in turn, 130.6M -> 118.1M / 193.2M -> 167.4M
 * instructions for 1M pairs (callgrind; tcmalloc 89.5M). */
static TROVE_NOINLINE void *switch_own(trove_heap_t *h, size_t size, trove_sb_t *sb) {
  size_t cls = sb->cls;
  if (h->lists[cls].sparse == NULL &&
      (empty_count_cls(h, cls) == 0 || h->coarse || shared_class(h, cls)))
    return malloc_slow(h, size);
  trove_sb_t *next = take_own(h, cls);
  if (unlikely(next == NULL)) return malloc_slow(h, size);   /* a sweep took the empty one */
  retire_full(h, cls, sb);
  set_current(h, cls, next);
  /* never fails (a sparse or empty one has fewer live blocks than it holds); if it did,
   * malloc_slow would find the class's current superblock exhausted as usual */
  if (next->free == NULL && !sb_refill(next)) return malloc_slow(h, size);
  trove_block_t *b = next->free;
  next->free = b->next;
  next->slack++;
  b->tag = 0;
  return b;
}

/* The common cases first, in a function that saves no register. `sb` is the current
 * superblock malloc found empty (or &_trove_sb_empty, which never has a free block: before
 * the thread's first malloc; sizes above SMALL_MAX go to _trove_malloc_big).
 *  - Refill: the blocks collected from other threads' frees (`local_free`, say after an
 *    adoption) become its free list.
 *  - Carve: its free list ran out and part of its run is not carved yet: the next blocks
 *    are carved and the first is handed out. A thread that builds up its data (bench/phases,
 *    the first round of anything) carves every 4 KiB, every block or two above 2 KiB; through
 *    malloc_slow that cost 150 instructions a carve.
 *  - Switch: it is exhausted (nothing collected or waiting in `thread_free`, every block
 *    carved) and its class has a partial superblock with free blocks: it goes on the full
 *    list and that one becomes current, as malloc_slow would do. In a random-replacement
 *    working set (fastpath-workset) four switches in five are this case; through malloc_slow
 *    each cost 165 instructions (its chores, and the registers it saves), here about 50.
 *    With no partial one, switch_own takes its own sparse or empty one.
 * When blocks other threads freed are waiting, the full slow path runs instead and drains
 * them, so they are reused before more of a superblock is carved; every 32nd time it runs
 * anyway, so timed work is never starved. (This does not help a thread that is blocked while
 * others free into it: see blowup-rr in docs/BENCHMARKS.md.) */
void *_trove_malloc_generic(size_t size, trove_heap_t *h, trove_sb_t *sb) {
  trove_block_t *b = sb->local_free;
  trove_sb_t *next;
  if (likely(b != NULL)) {
    if (likely(--h->refills != 0) && !remote_pending(h)) {
      sb->free = b->next;
      sb->local_free = NULL;
      sb->slack++;
      b->tag = 0;
      return b;
    }
  } else if (sb != &_trove_sb_empty) {     /* then `h` is a thread's own heap, not the empty one */
    if (atomic_load_explicit(&sb->thread_free, memory_order_relaxed) != NULL ||
        unlikely(--h->refills == 0) || remote_pending(h))
      return malloc_slow(h, size);
    if (sb->carved < sb->capacity * sb->bsize) return _trove_sb_carve_one(sb);
    if ((next = h->lists[sb->cls].partial) != NULL && next->free != NULL) {
      size_t cls = sb->cls;
      retire_full(h, cls, sb);
      partial_unlink(&h->lists[cls], next);
      set_current(h, cls, next);
      b = next->free;
      next->free = b->next;
      next->slack++;
      b->tag = 0;
      return b;
    }
    if (next == NULL) return switch_own(h, size, sb);
  }
  return malloc_slow(h, size);
}
