/* Segments: 4 MiB, 4 MiB-aligned regions mapped from the OS. The header (descriptor per page,
 * page map) fills the first pages; the rest is carved into page runs by the page heap.
 * The segment map records which 4 MiB regions are trove's, so that free() can reject a
 * pointer trove never handed out before touching memory through it. */
#include "internal.h"
#include <string.h>

uint8_t _trove_segmap[TROVE_SEGMAP_SIZE] __attribute__((aligned(4096)));

static void segmap_set(uintptr_t a, uint8_t kind) {
  __atomic_store_n(&_trove_segmap[a >> TROVE_SEGMENT_SHIFT], kind, __ATOMIC_RELEASE);
}

/* Called with the lock of the arena whose segment list `list` is held. Returns a segment whose
 * usable pages form one free run that the caller inserts into the arena. */
trove_segment_t *_trove_segment_new(trove_segment_t **list) {
  trove_segment_t *seg = _trove_os_map_aligned(TROVE_SEGMENT_SIZE, TROVE_SEGMENT_SIZE);
  if (seg == NULL) return NULL;
  if (((uintptr_t)seg >> TROVE_SEGMENT_SHIFT) >= TROVE_SEGMAP_SIZE) {  /* beyond 47 bits */
    _trove_os_unmap(seg, TROVE_SEGMENT_SIZE);
    return NULL;
  }
  static _Atomic uint64_t created;
  seg->magic = TROVE_SEGMENT_MAGIC;
  seg->seq = atomic_fetch_add_explicit(&created, 1, memory_order_relaxed) + 1;
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
  size_t resident = header + (seg->sb[seg->first_page].dirty ? TROVE_SEGMENT_SIZE - header : 0);
  segmap_set((uintptr_t)seg, TROVE_MAP_NONE);
  _trove_os_release(seg, TROVE_SEGMENT_SIZE, resident);
}

/* large.c registers its mappings here too, so that one table answers "is this ours?". */
void _trove_segmap_set_large(uintptr_t region, uint8_t kind) TROVE_HIDDEN;
void _trove_segmap_set_large(uintptr_t region, uint8_t kind) { segmap_set(region, kind); }
