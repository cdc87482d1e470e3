/* Segments: 4 MiB, 4 MiB-aligned regions mapped from the OS. The header (descriptor per page,
 * page map) fills the first pages; the rest is carved into page runs by the page heap.
 * The segment map records which 4 MiB regions are trove's, so that free() can reject a
 * pointer trove never handed out before touching memory through it. */
#include "internal.h"
#include <string.h>

uint8_t _trove_segmap[TROVE_SEGMAP_SIZE] __attribute__((aligned(4096)));

/* The map is 32 MiB of .bss, a byte per 4 MiB of 47-bit address space, of which a process
 * writes a page or two (a page covers 16 GiB). The loader charges .bss whole to the system's
 * commit count: each process that preloaded trove added 33 MiB to Committed_AS (glibc's
 * `sleep` 0.4 MiB), which is what strict-overcommit hosts and memory monitors count. So before
 * its first entry is set the map is replaced by an uncharged zero mapping (os.c), which
 * faults in only the pages written. Its size and page alignment keep the replacement to the
 * map's own pages. */
_Static_assert(TROVE_SEGMAP_SIZE % 4096 == 0, "the segment map is whole pages");
static pthread_once_t segmap_once = PTHREAD_ONCE_INIT;
static void segmap_uncharge(void) { (void)_trove_os_uncharge_zeros(_trove_segmap, TROVE_SEGMAP_SIZE); }

static void segmap_set(uintptr_t a, uint8_t kind) {
  pthread_once(&segmap_once, segmap_uncharge);
  __atomic_store_n(&_trove_segmap[a >> TROVE_SEGMENT_SHIFT], kind, __ATOMIC_RELEASE);
}

/* Segments are cut from address space mapped several at a time: 1, then 2, 4, 8 and at most
 * RESERVE_MAX segments per mmap, the batch doubling each time one runs out. An aligned map is
 * three calls (mmap, and munmap of both ends), each of which takes the process's mmap lock
 * for writing and waits for, and blocks, the page faults of every other thread in the VMA it
 * merges with (all of trove's segments, adjacent as the kernel places them). A program that
 * grows fast on several threads maps a segment every few milliseconds while its threads fault
 * in fresh pages: phases-small at 8 threads spent 16 ms in 83 mmap calls (194 us each) and
 * 6 ms in 57 munmaps.
 * The reservation is address space only: its pages are untouched until a segment of it is
 * used, and it is counted as held from the OS a segment at a time. Out of memory (or of
 * address space under RLIMIT_AS) a smaller batch is tried, down to one segment, and the
 * out-of-memory paths unmap what is left (_trove_pages_purge(true) calls
 * _trove_segment_unreserve). */
#define RESERVE_MAX 16
static uintptr_t reserve_next, reserve_end;       /* [next, end): mapped, not yet segments */
static size_t reserve_batch = 1;

static trove_segment_t *segment_map(void) {
  _trove_mutex_lock(&_trove_locks.segment);
  if (reserve_next == reserve_end) {
    for (size_t n = reserve_batch; n > 0; n /= 2) {
      void *p = _trove_os_reserve_aligned(n * TROVE_SEGMENT_SIZE, TROVE_SEGMENT_SIZE);
      if (p == NULL) continue;
      reserve_next = (uintptr_t)p;
      reserve_end = reserve_next + n * TROVE_SEGMENT_SIZE;
      if (reserve_batch < RESERVE_MAX) reserve_batch *= 2;
      break;
    }
  }
  trove_segment_t *seg = NULL;
  if (reserve_next != reserve_end) {
    seg = (trove_segment_t *)reserve_next;
    reserve_next += TROVE_SEGMENT_SIZE;
    _trove_os_count_mapped(TROVE_SEGMENT_SIZE);
  }
  _trove_mutex_unlock(&_trove_locks.segment);
  return seg;
}

void _trove_segment_unreserve(void) {
  _trove_mutex_lock(&_trove_locks.segment);
  if (reserve_next != reserve_end) _trove_os_unreserve((void *)reserve_next, reserve_end - reserve_next);
  reserve_next = reserve_end = 0;
  _trove_mutex_unlock(&_trove_locks.segment);
}

/* Transparent huge pages (TROVE_THP). A segment that asks for them before its first write has
 * its pages faulted in 2 MiB at a time where the kernel has huge pages free: a program that
 * builds 256 MiB of 100 B - 4 KiB blocks (bench/phases) takes 6,500 faults instead of 73,000,
 * and every access after needs fewer TLB entries (on this project's virtual machines a TLB miss
 * walks two page tables). The price is memory: a huge page is resident whole, written or not.
 *
 * Mode 1, the default: nothing until the arena holds 32 MiB (8 segments), so a small program
 * keeps 4 KiB pages (mimalloc 3, huge pages from the start: larson-small 6.1 MiB against
 * trove's 2.6). Each arena's newest segments are partly used, and in huge pages each holds up
 * to 2 MiB it does not use; counted over the process, 16 threads with an arena each passed
 * 32 MiB at once: larson at 16 threads with 16 arenas 18.5 -> 27.6 MiB, mtmalloctest 28 ->
 * 38, xmalloc 62 -> 75 (per arena: level). Past it, a segment asks for huge pages when what
 * it will hold is written whole:
 *  - mapped for a superblock of a class up to TROVE_DENSE_MAX ("dense"): carving writes the
 *    head of every block, so every page a carve reaches is written anyway. Its untouched pages
 *    are kept for dense superblocks (huge = 2): a sparse run (a medium object, a superblock of
 *    a larger class) takes a free run there only where trove wrote before (page_heap.c,
 *    find_run);
 *  - mapped for sparse runs, when the arena's probe is 7/8 resident: every 8th segment mapped
 *    for sparse runs is a probe, without huge pages, so that its residency says whether the
 *    program writes the buffers it allocates (page_heap.c). A segment in huge pages is
 *    resident whether written or not, so only a probe can tell.
 * bench/apps' node allocates 400k Buffers of 100 B - 5 KB it never writes: huge pages for
 * every segment past 32 MiB (TROVE_THP=2 behaves so from the start) took it from 989 to 1,382
 * MiB and 0.84 to 1.70 s; by the rules above its sparse segments are mostly under 3/4
 * resident (3 of 285 reached 7/8) and its peak RSS stays within 1-2%. bench/phases (100 B -
 * 4 KiB blocks), phases --wide and holes (64-128 KiB buffers) run 1.35-1.4x, 1.6-1.9x and
 * 1.3-1.5x as fast, perl 1.18x, for 1.5-3% more peak RSS (docs/BENCHMARKS.md, "Forty-second
 * session").
 *
 * A huge page is worth it while it faults in faster than the 512 small pages it replaces
 * (about 1 ms for 2 MiB on this project's virtual machines, 2 us a fault), and it may not:
 *  - with the kernel's `defrag` at `madvise` (the usual setting), a fault waits for
 *    compaction on a machine short of free huge pages;
 *  - on a virtual machine that reports free memory to its host (free page reporting, as on
 *    the Firecracker machines this project runs on, which report every free block of 2 MiB
 *    and more), a huge page comes from memory the host took back, and each fault waits for
 *    the host to supply and zero it again: 4-9 ms per huge page, against 0.23 ms for one
 *    freed just before, while small pages come from the recently freed ones the kernel keeps
 *    in its per-CPU lists. There, phases --wide (64-128 KiB buffers) started after another
 *    program took 0.53-0.62 s instead of 0.15-0.20 without huge pages, holes 1.2-1.7 s
 *    instead of 0.44-0.64, python-malloc 1.15x as long; run again at once (the huge pages
 *    just freed) they took half as long as without (docs/BENCHMARKS.md, forty-third session).
 * So the first write to a segment that asked (the header's, here, which faults its first huge
 * page in) is timed, and two in a row slower than TROVE_THP_SLOW_US (1 ms) or the 512 small
 * pages it stands for (timed on the headers of the segments in small pages) pause the
 * requests: the next 16 segments that would ask do not, then one asks and is timed again; a
 * slow one then doubles the pause (up to 1,024 segments, 4 GiB), a fast one ends the pauses.
 * A paused program pays one slow fault per pause, about 5 ms, and keeps small pages; a
 * program whose huge pages fault fast keeps them (one slow fault alone does not pause: a
 * few of the huge pages freed just before are slow too). Started after another program,
 * phases --wide now takes 0.22-0.24 s and holes 0.36-0.53; run again at once, 0.08-0.14 and
 * 0.21-0.33, as with huge pages throughout. `TROVE_THP=0` turns all this off.
 *
 * A segment's first purge turns them off for it (MADV_NOHUGEPAGE, then the purge, which splits
 * any huge page it cuts into): otherwise the kernel's khugepaged, which collapses the pages of
 * a huge-page range back into one huge page when any of them is present, would fault the
 * purged pages in again, and a server whose live data fell would keep 2 MiB for every range
 * with one live block in it. */
#define THP_AUTO_MIN ((size_t)32 << 20)
#define THP_PAUSE_MIN 16
#define THP_PAUSE_MAX 1024
/* Relaxed: a hint shared by the arenas, whose locks order nothing between them. */
static _Atomic uint32_t thp_skip;                  /* segments left to map without asking */
static _Atomic uint32_t thp_pause = THP_PAUSE_MIN; /* the next pause, in segments */
static _Atomic uint32_t thp_strikes;               /* slow faults in a row */
static _Atomic size_t thp_pauses;                  /* pauses so far (statistics) */
/* What a small page takes to fault in here: a running mean over the segments mapped in small
 * pages (the first 8 of each arena at least), each sample taken as at most 100 us (a thread
 * preempted meanwhile). */
static _Atomic uint32_t small_fault_ns;

static void small_fault_note(uint64_t ns) {
  if (ns > 100000) ns = 100000;
  int64_t m = atomic_load_explicit(&small_fault_ns, memory_order_relaxed);
  atomic_store_explicit(&small_fault_ns, (uint32_t)(m == 0 ? (int64_t)ns : m + ((int64_t)ns - m) / 4),
                        memory_order_relaxed);
}

/* Slow: TROVE_THP_SLOW_US where the environment sets it; by default the larger of 1 ms and
 * the 512 small pages the huge page stands for (on a machine where small pages too fault in
 * slowly, as a fresh virtual machine's do, huge pages still save the 511 faults). */
static uint64_t thp_slow_ns(void) {
  uint64_t bound = (uint64_t)TROVE_OPT(THP_SLOW_US) * 1000;
  if (_trove_options_set[TROVE_OPT_THP_SLOW_US]) return bound;
  uint64_t small = 512 * (uint64_t)atomic_load_explicit(&small_fault_ns, memory_order_relaxed);
  return small > bound ? small : bound;
}

static bool thp_paused(void) {
  uint32_t n = atomic_load_explicit(&thp_skip, memory_order_relaxed);
  while (n != 0 && !atomic_compare_exchange_weak_explicit(&thp_skip, &n, n - 1, memory_order_relaxed,
                                                          memory_order_relaxed)) {
  }
  return n != 0;
}

static void thp_judge(uint64_t ns) {
  if (TROVE_OPT(THP_SLOW_US) == 0) return;
  uint64_t slow = thp_slow_ns();
  if (ns <= slow) {
    atomic_store_explicit(&thp_strikes, 0, memory_order_relaxed);
    atomic_store_explicit(&thp_pause, THP_PAUSE_MIN, memory_order_relaxed);
    return;
  }
  uint32_t n = atomic_load_explicit(&thp_pause, memory_order_relaxed);
  if (atomic_fetch_add_explicit(&thp_strikes, 1, memory_order_relaxed) == 0 && n == THP_PAUSE_MIN)
    return;                                /* one slow fault alone may be bad luck */
  atomic_store_explicit(&thp_skip, n, memory_order_relaxed);
  atomic_store_explicit(&thp_pause, n < THP_PAUSE_MAX ? 2 * n : n, memory_order_relaxed);
  atomic_fetch_add_explicit(&thp_pauses, 1, memory_order_relaxed);
  if (TROVE_OPT(VERBOSE) >= 1)
    _trove_message("a huge page took %llu us to fault in (slow: over %llu us): none for the next"
                   " %u segments\n", (unsigned long long)(ns / 1000), (unsigned long long)(slow / 1000), n);
}

size_t _trove_segment_huge_pauses(void) {
  return atomic_load_explicit(&thp_pauses, memory_order_relaxed);
}

/* Before the segment's first write. In mode 1 that write is timed, as a huge page's fault
 * here (the write of `huge`) or a small page's in the caller (see above). */
static bool segment_want_huge(trove_segment_t *seg, size_t nsegs, bool dense,
                              trove_segment_t *probe) {
  long mode = TROVE_OPT(THP);
  if (mode == 0 || (mode == 1 && nsegs * TROVE_SEGMENT_SIZE < THP_AUTO_MIN)) return false;
  if (mode == 1 && !dense && (probe == NULL || !_trove_os_mostly_resident(probe, TROVE_SEGMENT_SIZE)))
    return false;
  if (mode == 1 && thp_paused()) return false;
  _trove_os_hugepage(seg, TROVE_SEGMENT_SIZE, true);
  uint64_t start = _trove_os_now_ns();
  atomic_store_explicit(&seg->huge, dense ? 2 : 1, memory_order_relaxed);
  if (mode == 1) thp_judge(_trove_os_now_ns() - start);
  return true;
}

void _trove_segment_no_huge(trove_segment_t *seg) {
  if (atomic_load_explicit(&seg->huge, memory_order_relaxed) &&
      atomic_exchange_explicit(&seg->huge, 0, memory_order_relaxed))
    _trove_os_hugepage(seg, TROVE_SEGMENT_SIZE, false);
}

void _trove_segment_purge(trove_segment_t *seg, void *p, size_t size) {
  _trove_segment_no_huge(seg);
  _trove_os_purge(p, size);
}

/* Called with the lock of the arena whose segment list `list` is held. Returns a segment whose
 * usable pages form one free run that the caller inserts into the arena. */
trove_segment_t *_trove_segment_new(trove_segment_t **list, size_t nsegs, bool dense,
                                    trove_segment_t *probe) {
  trove_segment_t *seg = segment_map();
  if (seg == NULL) return NULL;
  if (((uintptr_t)seg >> TROVE_SEGMENT_SHIFT) >= TROVE_SEGMAP_SIZE) {  /* beyond 47 bits */
    _trove_os_unmap(seg, TROVE_SEGMENT_SIZE);
    return NULL;
  }
  bool asked = segment_want_huge(seg, nsegs, dense, probe);   /* before the first write */
  seg->magic = TROVE_SEGMENT_MAGIC;
  if (!asked && TROVE_OPT(THP) == 1) {
    /* A write to the header's second page (descriptors, zero until used): a small page's
     * fault alone, the first write having made the page table. */
    uint64_t start = _trove_os_now_ns();
    *(volatile uint8_t *)((char *)seg + 4096) = 0;
    small_fault_note(_trove_os_now_ns() - start);
  }
  seg->first_page = (uint32_t)TROVE_HEADER_PAGES;
  seg->free_pages = (uint32_t)(TROVE_SEGMENT_PAGES - TROVE_HEADER_PAGES);
  seg->next = *list;
  seg->prev = NULL;
  if (*list) (*list)->prev = seg;
  *list = seg;
  segmap_set((uintptr_t)seg, TROVE_MAP_SEGMENT);
  return seg;
}

/* The caller has taken the segment off its list; its usable pages are one free run. */
void _trove_segment_free(trove_segment_t *seg) {
  size_t header = (size_t)seg->first_page << TROVE_PAGE_SHIFT;
  size_t resident = header + (_trove_seg_run(seg, seg->first_page)->dirty ? TROVE_SEGMENT_SIZE - header : 0);
  segmap_set((uintptr_t)seg, TROVE_MAP_NONE);
  _trove_os_release(seg, TROVE_SEGMENT_SIZE, TROVE_SEGMENT_SIZE, resident);
}

/* large.c registers its mappings here too, so that one table answers "is this ours?". */
void _trove_segmap_set_large(uintptr_t region, uint8_t kind) TROVE_HIDDEN;
void _trove_segmap_set_large(uintptr_t region, uint8_t kind) { segmap_set(region, kind); }
