/* Superblocks (Hoard's term): a page run of one size class, carved into blocks lazily so that
 * pages no block has reached are never touched (and never resident). */
#include "internal.h"

/* Bytes carved per extension: enough blocks for a burst, few enough pages to stay lean. */
#define TROVE_EXTEND_BYTES 4096

/* The multiplier e of `limit` (see _trove_sb_is_block): bsize * divm, wrapped. */
static uint64_t limit_step(const trove_sb_t *sb) { return (uint64_t)sb->bsize * sb->divm; }

void _trove_sb_set_run(trove_sb_t *run, size_t bsize, size_t carved) {
  run->bsize = (uint32_t)bsize;
  /* ceil(2^64 / bsize), plus one where bsize is a power of two (else bsize * divm would wrap
   * to 0 and `limit` could not count blocks; the divisibility test holds either way). */
  run->divm = UINT64_MAX / bsize + 1 + ((bsize & (bsize - 1)) == 0);
  run->carved = (uint32_t)carved;
  __atomic_store_n(&run->limit, (uint64_t)(carved / bsize) * limit_step(run), __ATOMIC_RELAXED);
}

/* The offset of a superblock's first block into its run, for the classes 64 B above a multiple
 * of 1 KiB (TROVE_COLOUR=1; size_class.c, cache colour): a multiple of 64 within the run's
 * tail, picked by a hash of the run's address. Their blocks step 64 B through the sets of a
 * page, but from the same start each run would cover the same few: 512 blocks of 16 KiB
 * (16,448 B, 4 a run) on 4 sets of the first-level cache in all, 6x faster to read the heads
 * of than at one set, but still a third of glibc's speed; from a start anywhere in the
 * tail, level with it. */
static uintptr_t run_colour(uintptr_t run, size_t tail) {
  uint32_t hash = (uint32_t)(run >> TROVE_PAGE_SHIFT) * 2654435761u;
  return (uintptr_t)(((uint64_t)hash * (tail / 64 + 1)) >> 32) * 64;
}

void _trove_sb_init(trove_sb_t *sb, size_t cls) {
  size_t bs = _trove_class_size[cls];
  /* kind is already SMALL: the page heap sets it under its lock (neighbours read it there) */
  sb->cls = (uint8_t)cls;
  sb->capacity = sb->span_bytes / (uint32_t)bs;
  /* from the run's first page (the run may have served another class, with another offset) */
  uintptr_t run = (sb->start & ~(uintptr_t)TROVE_SEGMENT_MASK) +
                  ((uintptr_t)sb->page << TROVE_PAGE_SHIFT);
  sb->start = run;
  if (_trove_class_coloured[cls]) sb->start += run_colour(run, sb->span_bytes - sb->capacity * bs);
  /* at least 1, so that an empty superblock is always f-empty: with 0 (a capacity under
   * 1 / (1 - f), e.g. 4-9 blocks with TROVE_BLOWUP_F=0.9) its trigger never fired, and one
   * emptied on a partial list stayed there, its segment mapped, until the thread exited */
  uint32_t at = (uint32_t)(((uint64_t)sb->capacity * (uint64_t)(100 - TROVE_OPT(BLOWUP_F_PCT))) / 100);
  sb->sparse_at = (uint16_t)(at ? at : 1);
  sb->free = sb->local_free = NULL;
  sb->slack = 0;
  sb->trigger = 0;
  sb->kept = sb->claimed = 0;
  atomic_store_explicit(&sb->thread_free, NULL, memory_order_relaxed);
  _trove_sb_set_run(sb, bs, 0);
}

/* floor(x / bsize) for x < 2^32, by a multiply with divm (ceil(2^64 / bsize), one more for a
 * power of two): x / bsize is at least 1 / bsize below the next integer, and the multiply's
 * excess is under x / 2^64, so the floor is exact. No divide (26+ cycles, twice a carve). */
static size_t div_bsize(const trove_sb_t *sb, size_t x) {
  return (size_t)(((unsigned __int128)x * sb->divm) >> 64);
}

/* Push the blocks at lo, lo + bs, ..., hi onto `head`, lo first on the list. Each carved block
 * already carries the free tag, so a free of a block never handed out is caught like a
 * double free. */
static trove_block_t *push_blocks(uintptr_t lo, uintptr_t hi, size_t bs, trove_block_t *head,
                                  uintptr_t key) {
  for (uintptr_t a = hi;; a -= bs) {
    trove_block_t *b = (trove_block_t *)a;
    b->next = head;
    b->tag = a ^ key;                       /* = _trove_tag(b) */
    head = b;
    if (a == lo) break;
  }
  return head;
}

/* Cache colour: which of a run's first n blocks goes out first. The block a thread hands out
 * first is the one it reuses most (each free puts it back on top), so when every run began
 * with block 0, a loop that allocates and frees blocks of ten classes in turn touched ten
 * lines at the same page offset: one set of the L1 cache (8 ways, indexed by address bits
 * 6-11), which could not hold them. bench/fastpath's ping-pong of 16 sizes missed L1 on 94%
 * of its mallocs (cachegrind: 1.88M misses in 2M pairs; 4.2k with colours); on this machine's
 * Xeon, 16 lines at one offset cost 5 ns a touch against 1 ns spread out. A hash of the
 * run's address picks the block, so the first blocks of a thread's runs fall on different
 * sets. Unlike an offset for block 0, it costs no block of the run. */
static size_t colour(uintptr_t run, size_t n) {
  uint32_t hash = (uint32_t)(run >> TROVE_PAGE_SHIFT) * 2654435761u;
  return (size_t)(((uint64_t)hash * n) >> 32);
}

/* Carve the next few blocks onto the free list. */
bool _trove_sb_extend(trove_sb_t *sb) {
  size_t bs = sb->bsize, end = (size_t)sb->capacity * bs;
  if (sb->carved >= end) return false;
  size_t n = div_bsize(sb, TROVE_EXTEND_BYTES), left = div_bsize(sb, end - sb->carved);
  /* At least one block: from 2 KiB up an extension is 1-2 blocks. Carving writes each block's
   * head, so every block carved ahead touches a page of its own; with a floor of 4 blocks, a
   * thread that holds one or two blocks of a 3-20 KiB class kept 2-3 more pages resident per
   * class. 500 threads holding 20 blocks of 24 B - 20 KiB each: peak RSS 64.6 -> 58.6 MiB
   * (2 blocks each: 17.9 -> 15.5 MiB; glibc 38.1 / 9.1, tcmalloc 48.1 / 16.4, mimalloc 97.9 /
   * 43.1); sizesweep, xmalloc, mtmalloctest and shbench-large time level (interleaved). */
  if (n < 1) n = 1;
  if (n > left) n = left;
  /* Built from the highest block down, so that the lowest is first on the list; a pointer
   * walk, 7 instructions a block (a thread that fills and empties its heap, threadtest,
   * carves its superblocks again every round). The first carve of a run starts the list at
   * its colour, block j, and wraps round to block 0 after the last (colour, above). */
  uintptr_t first = sb->start + sb->carved, key = _trove_key;
  size_t j = sb->carved == 0 ? colour(first, n) : 0;
  trove_block_t *head = sb->free;
  if (j > 0) head = push_blocks(first, first + (j - 1) * bs, bs, head, key);
  head = push_blocks(first + j * bs, first + (n - 1) * bs, bs, head, key);
  sb->free = head;
  __atomic_store_n(&sb->carved, sb->carved + (uint32_t)(n * bs), __ATOMIC_RELAXED);
  __atomic_store_n(&sb->limit, sb->limit + n * limit_step(sb), __ATOMIC_RELAXED);
  return true;
}

/* Carve and hand out the first new block: the slow path of a malloc whose current superblock
 * ran out of free blocks but not of run (the caller checked carved < capacity * bsize). A
 * tail call from _trove_malloc_generic, which so saves no register. */
void *_trove_sb_carve_one(trove_sb_t *sb) {
  _trove_sb_extend(sb);
  trove_block_t *b = sb->free;
  sb->free = b->next;
  sb->slack++;
  b->tag = 0;
  return b;
}

/* An empty superblock (no live block, nothing in thread_free) taken up by a heap other than
 * the one that emptied it: forget its free list and carve it again, so that its blocks go
 * out in address order and are written before they are read (the list, in the order the
 * blocks were freed, is a chain of loads from another core's cache). */
void _trove_sb_recarve(trove_sb_t *sb) {
  sb->free = sb->local_free = NULL;
  sb->slack = 0;
  sb->trigger = 0;
  _trove_sb_set_run(sb, sb->bsize, 0);
}

/* Move the blocks other threads pushed onto thread_free to local_free; returns how many. The
 * caller owns the superblock (or holds the pool lock) and subtracts the count from `used`. */
uint32_t _trove_sb_collect(trove_sb_t *sb) {
  if (atomic_load_explicit(&sb->thread_free, memory_order_relaxed) == NULL) return 0;
  trove_block_t *list = atomic_exchange_explicit(&sb->thread_free, NULL, memory_order_acquire);
  uint32_t n = 0;
  trove_block_t *tail = list;
  for (trove_block_t *b = list; b; b = b->next) {
    n++;
    tail = b;
  }
  if (n) {
    tail->next = sb->local_free;
    sb->local_free = list;
  }
  return n;
}
