/* Size classes: 16, 32, ..., 128, then 8 per doubling up to 64 KiB (80 classes). With
 * TROVE_COLOUR=1, malloc's class for a multiple of 1 KiB from 4 KiB up (below 64 KiB; not
 * 5 KiB) is 64 B larger, and the multiples of 4 KiB (and 6 KiB) stay as classes of their own
 * for aligned requests (96 classes; see "Cache colour" below).
 * Bound: above 128 bytes a class is at most 1/8 larger than any request it serves; from 64 to
 * 128 bytes at most 15 bytes larger (16-byte alignment). */
#include "internal.h"
#include <string.h>

uint32_t _trove_class_size[TROVE_CLASSES];
uint16_t _trove_class_pages[TROVE_CLASSES];
uint16_t _trove_class_starter[TROVE_CLASSES];
uint8_t  _trove_class_direct[TROVE_DIRECT_SLOTS];
uint8_t  _trove_class_mid[TROVE_SMALL_MAX >> 6];
uint8_t  _trove_size_slot[TROVE_SIZE_SLOTS];
uint8_t  _trove_class_slot_lo[TROVE_CLASSES], _trove_class_slot_hi[TROVE_CLASSES];
uint8_t  _trove_class_coarse[TROVE_CLASSES], _trove_class_group_lo[TROVE_CLASSES];
uint8_t  _trove_class_aligned[TROVE_ALIGN_ROWS][TROVE_CLASSES];
uint8_t  _trove_aligned_slot[TROVE_ALIGN_DIRECT_LG + 1][128];
uint8_t  _trove_class_aligned_only[TROVE_CLASSES], _trove_class_coloured[TROVE_CLASSES];

/* Cache colour (TROVE_COLOUR=1; off by default). Blocks of a class lie at the class size's
 * stride from a run that starts on a page, so where that size is a multiple of 4 KiB every
 * block of the class starts at the same offset in its page: its first line falls in one set
 * of the first-level cache (8 ways, indexed by address bits 6-11) and in one of a few of the
 * second (1 MiB, 8 ways: bits 6-16). A program that keeps many such blocks and reads the head
 * of each (an allocator of its own that carves 16 KiB chunks with a header in front, an array
 * of 8 KiB nodes) misses on every one. A scratch loop that reads and writes the first word
 * of 512 blocks ran 17-20x as fast under glibc (whose 16-byte header shifts each chunk) as
 * under trove, tcmalloc, mimalloc 3 or snmalloc at 4, 8 and 16 KiB, 9x at 6 KiB and 2.7x at
 * 5 KiB (2 and 4 offsets in a page), level at 4.5 KiB (8); jemalloc, which starts its blocks
 * of 16 KiB and up at a random line of an extra page, as fast as glibc from 16 KiB. Tcl's
 * allocator takes its memory in chunks of 16,284 B: tclsh ran 3-8% slower under trove than
 * under glibc with the same instructions, and glibc with those chunks page-aligned (a shim)
 * as slow as trove.
 * With the option, malloc's class for such a size is 64 B larger, so that each block's offset
 * moves by a line, and a superblock of it starts its first block at a multiple of 64 B into
 * its run's tail (superblock.c, run_colour), so that runs do not all cover the same sets; the
 * class of the size itself serves aligned requests only (_trove_class_aligned_only: no slot
 * of malloc's maps to it), since a page-aligned 4 KiB buffer has to start on a page. The
 * multiples of 1 KiB that are not of 4 KiB get only the larger class, except 6 KiB, which
 * coarse mode needs (2^k and 3 * 2^k, below). The loop above then runs as fast as under
 * glibc, and tclsh 4-10% faster than by default. Not the default, for what it costs in memory:
 * such a run holds one block fewer or takes a page more (7 blocks of 4,160 B in 32 KiB where
 * 8 of 4 KiB fit), and a block off a page boundary touches one 4 KiB page more, which stays
 * resident when the block is free and its inner pages go back (heap.c, idle free blocks):
 * peak RSS +4-11% on the suite's workloads of such blocks (bufpool, workset-wide, shbench-
 * large, mtmalloctest, stability, aligned) and +7% for tclsh, bufpool 9% slower. */
static bool colour_class(size_t bs) {
  /* not 5 KiB: 5,184 B would waste more than 1/8 of 4,609 B (the class below is 4.5 KiB) */
  return TROVE_OPT(COLOUR) && bs >= 4096 && bs < TROVE_SMALL_MAX && bs % 1024 == 0 && bs != 5120;
}
static bool keep_aligned(size_t bs) { return bs % 4096 == 0 || bs == 6144; }

static bool is_coarse_size(size_t bs) {
  size_t odd = bs >> __builtin_ctzl(bs);
  return odd == 1 || odd == 3;
}

void _trove_size_classes_init(void) {
  size_t n = 1;
  for (size_t c = 1; c <= 8; c++) _trove_class_size[n++] = (uint32_t)(16 * c);
  for (size_t lg = 7; lg < 16; lg++)
    for (size_t k = 1; k <= 8; k++) {
      size_t bs = ((size_t)1 << lg) + k * ((size_t)1 << (lg - 3));
      if (colour_class(bs)) {
        if (keep_aligned(bs)) {
          _trove_class_aligned_only[n] = 1;
          _trove_class_size[n++] = (uint32_t)bs;
        }
        bs += 64;
        _trove_class_coloured[n] = 1;
      }
      _trove_class_size[n++] = (uint32_t)bs;
    }
  /* TROVE_CLASSES counts them with TROVE_COLOUR; without, the last class fills the rest (no
   * size maps to a copy: every table takes the first class that holds a size) */
  if (n != TROVE_CLASSES && TROVE_OPT(COLOUR)) __builtin_trap();
  for (; n < TROVE_CLASSES; n++) _trove_class_size[n] = _trove_class_size[n - 1];
  for (size_t c = 1; c < TROVE_CLASSES; c++) {
    size_t bs = _trove_class_size[c];
    /* A superblock is 64 KiB for blocks up to 128 B, 32 KiB up to 4 KiB and 16 KiB above,
     * grown until it holds at least 8 blocks (4 above 4 KiB, 2 above 16 KiB) with at most 1/8
     * lost in its tail. Every class in use keeps a current superblock per thread, and a partly
     * used one ties up its whole run once carved, so the larger classes get fewer blocks per
     * superblock: larson's 10-1000 B mix needs a third less RSS at 32 KiB than at 64, and
     * 16 KiB / 4 blocks above 1 KiB (instead of 32 KiB / 8) cut peak RSS by 12-15% on
     * mtmalloctest and 10% on stability. But from 1 to 4 KiB, 16 KiB is only 4-14 blocks,
     * and threads that hand such blocks to each other (bench/xmalloc) changed superblocks
     * every few calls: 32 KiB there made xmalloc 19-24% faster for 9% more peak RSS, and
     * cost mtmalloctest, shbench-large, reallocgrow and stability 1-4% more RSS.
     * Above 16 KiB, 2 blocks: every class in use holds a current superblock, and at 4 blocks
     * the 24 classes from 9 to 64 KiB held 2.3 MiB of a `git log -p` run's 9.5 MiB; at 2
     * above 16 KiB its peak RSS is 8% lower, reallocgrow's 4% and stability's 3%. At 2 from
     * 8 KiB up, mtmalloctest's peak RSS was 17% lower and reallocgrow's 11%, but
     * shbench-large (8 B-16 KiB) ran 4% slower at 1 thread and 10-13% at 4 (a superblock
     * turnover every 2 blocks); from 4 KiB up mtmalloctest and stability got 5-10% slower;
     * a single block per superblock above 32 KiB cost stability 40% more RSS. 64 KiB for
     * all classes up to 16 KiB (at least 8 blocks) was faster still on shbench-large (11%
     * at 1 thread) but cost it 20% more peak RSS, and mtmalloctest 14%. */
    size_t pages = bs <= 128 ? TROVE_SB_PAGES : bs <= 4096 ? TROVE_SB_PAGES / 2 : TROVE_SB_PAGES / 4;
    size_t min_blocks = bs <= 4096 ? 8 : bs <= 16384 ? 4 : 2;
    while (pages * TROVE_PAGE_SIZE < min_blocks * bs ||
           (pages * TROVE_PAGE_SIZE) % bs > (pages * TROVE_PAGE_SIZE) / 8)
      pages++;
    /* And a page more where that cuts the tail's share to half or less, from over 3%: six
     * classes (2,560, 3,072, 3,328, 4,608, 5,120, 11,264 B), whose tails lost 6-9%. SQLite
     * keeps its cached pages (4,368 B) in the 4,608-byte class: bench/apps' sqlite run peaked
     * at 136.8 MiB instead of 141.3 (5 runs; glibc 124); the suite's A/B set, peak RSS
     * included, stayed within its noise. */
    size_t run = pages * TROVE_PAGE_SIZE, run1 = run + TROVE_PAGE_SIZE;
    if ((run % bs) * 100 > run * 3 && (run1 % bs) * run * 2 <= (run % bs) * run1) pages++;
    _trove_class_pages[c] = (uint16_t)pages;
    /* A heap's first superblock of a class when threads crowd the CPUs (heap.c,
     * find_superblock_rest): the fewest pages that hold 2 blocks with at most 1/8 lost in
     * the tail, at most the class's length. */
    size_t start = 1;
    while (start < pages && (start * TROVE_PAGE_SIZE < 2 * bs ||
                             (start * TROVE_PAGE_SIZE) % bs > (start * TROVE_PAGE_SIZE) / 8))
      start++;
    _trove_class_starter[c] = (uint16_t)start;
  }
  /* The lookup tables, each in one walk up the classes (cls: the smallest class that holds
   * the entry's size; for _trove_class_mid, the aligned paths' table, aligned-only classes
   * included). Every process that preloads trove builds them at start: with a call of a
   * class function per entry, 4,600 of them, they were 100k instructions, two thirds of its
   * start-up (a `/bin/true` took 294k against glibc's 126k, callgrind). test_api's static
   * build checks every entry against the class sizes the spec gives. */
  size_t cls = 1;
  for (size_t i = 0; i < (TROVE_SMALL_MAX >> 6); i++) {
    while (_trove_class_size[cls] < ((i + 1) << 6)) cls++;
    _trove_class_mid[i] = (uint8_t)cls;
  }
  cls = 1;
  for (size_t i = 0; i < TROVE_DIRECT_SLOTS; i++) {
    while (_trove_class_size[cls] < (i == 0 ? 1 : i * 16)) cls++;
    _trove_class_direct[i] = (uint8_t)cls;
  }
  /* above DIRECT_MAX every class size is a multiple of 64, so the sizes of a 16-byte step
   * (16(i-1), 16i] share the class of 16i: class c takes the slots from the one after the
   * previous class's size to its own size / 16 (malloc's classes: not the aligned-only) */
  for (size_t i = 0; i < TROVE_DIRECT_SLOTS; i++) _trove_size_slot[i] = (uint8_t)i;
  for (size_t c = 1, lo = TROVE_DIRECT_SLOTS; c < TROVE_CLASSES; c++) {
    size_t hi = _trove_class_size[c] / 16;
    if (hi < lo || _trove_class_aligned_only[c]) continue;
    memset(&_trove_size_slot[lo], (int)(TROVE_DIRECT_SLOTS + c), hi - lo + 1);
    lo = hi + 1;
  }
  for (size_t c = 1; c < TROVE_CLASSES; c++) {        /* lo > hi: no slot */
    _trove_class_slot_lo[c] = UINT8_MAX;
    _trove_class_slot_hi[c] = 0;
  }
  for (size_t i = TROVE_DIRECT_SLOTS; i-- > 0;) {
    size_t c = _trove_class_direct[i];
    _trove_class_slot_lo[c] = (uint8_t)i;
    if (_trove_class_slot_hi[c] < i) _trove_class_slot_hi[c] = (uint8_t)i;
  }
  /* Coarse classes: every class up to TROVE_COARSE_MAX maps to one of 2^k or 3 * 2^k bytes,
   * at most half larger (16 B steps up to 64 B, then 96, 128, 192, 256, ...). A block of
   * the coarse class of an aligned request's class is as aligned (alloc.c picks a class
   * whose size is a multiple of the alignment A = 2^a: that is A or 2A, both coarse, or a
   * class above 2A, whose coarse size 2^k > 2A or 3 * 2^j > 2A, so 2^j >= A, is a multiple
   * of A too). */
  for (size_t c = TROVE_CLASSES; c-- > 1;) {
    size_t bs = _trove_class_size[c];
    _trove_class_coarse[c] = (uint8_t)c;
    if (bs <= TROVE_COARSE_MAX && !is_coarse_size(bs))   /* so c + 1 is a class */
      _trove_class_coarse[c] = _trove_class_coarse[c + 1];
  }
  for (size_t c = 1; c < TROVE_CLASSES; c++) {
    size_t k = _trove_class_coarse[c];
    /* the argument above, checked: the coarse size is divisible by what the class's is */
    if (__builtin_ctz(_trove_class_size[k]) < __builtin_ctz(_trove_class_size[c])) __builtin_trap();
    if (k != c && _trove_class_slot_lo[c] <= _trove_class_slot_hi[c] &&
        (_trove_class_group_lo[k] == 0 || _trove_class_slot_lo[c] < _trove_class_group_lo[k]))
      _trove_class_group_lo[k] = _trove_class_slot_lo[c];
  }
  for (size_t c = 1; c < TROVE_CLASSES; c++)
    if (_trove_class_group_lo[c] == 0) _trove_class_group_lo[c] = _trove_class_slot_lo[c];
  for (size_t row = 0; row < TROVE_ALIGN_ROWS; row++) {
    uint32_t mask = ((uint32_t)16 << row) - 1;
    for (size_t c = TROVE_CLASSES, k = 0; c-- > 1;) {
      if ((_trove_class_size[c] & mask) == 0) k = c;
      if (k == 0) __builtin_trap();   /* the largest class is a multiple of every alignment */
      _trove_class_aligned[row][c] = (uint8_t)k;
    }
  }
  for (size_t lg = 0; lg <= TROVE_ALIGN_DIRECT_LG; lg++)
    for (size_t i = 0; i < TROVE_DIRECT_SLOTS; i++) {
      size_t k = _trove_class_aligned[lg < 4 ? 0 : lg - 4][_trove_class_direct[i]];
      size_t cs = _trove_class_size[k];
      _trove_aligned_slot[lg][i] = cs <= TROVE_DIRECT_MAX ? (uint8_t)((cs + 15) >> 4) : 0;
    }
  /* heap.c's set_current stores at most 4 slots per class; a class table that broke this
   * would leave direct[] pointing at superblocks that are no longer current. */
  for (size_t c = 1; c < TROVE_CLASSES; c++)
    if (_trove_class_slot_lo[c] <= _trove_class_slot_hi[c] &&
        _trove_class_slot_hi[c] - _trove_class_slot_lo[c] > 3)
      __builtin_trap();
}
