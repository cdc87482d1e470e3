/* Statistics and the heap map. Nothing here runs on the fast paths: the figures are read off
 * the segments, superblock descriptors and slow-path counters when asked for. Under threads
 * the per-superblock counts are read while their owners change them, so they are a snapshot
 * within the bounds of what the threads are doing; in a single thread they are exact. */
#include "internal.h"
#include <errno.h>
#include <string.h>

trove_large_t *_trove_large_live(void) TROVE_HIDDEN;
size_t _trove_large_cached_bytes(void) TROVE_HIDDEN;
void _trove_options_print(void (*line)(void *, const char *), void *arg) TROVE_HIDDEN;
extern size_t _trove_large_live_count, _trove_large_live_bytes;

static _Atomic size_t peak_in_use, peak_resident;

static void raise_peak(_Atomic size_t *peak, size_t v) {
  size_t p = atomic_load_explicit(peak, memory_order_relaxed);
  while (v > p && !atomic_compare_exchange_weak(peak, &p, v)) {
  }
}

static const char *state_name(const trove_sb_t *sb) {
  static const char *const names[] = {"current", "partial", "sparse", "full", "pool", "abandoned"};
  if (sb->kind == TROVE_SPAN_FREE) return sb->dirty ? "dirty" : "purged";
  if (sb->kind == TROVE_SPAN_PURGING) return "purged";
  if (sb->kind == TROVE_SPAN_MEDIUM) return sb->state == TROVE_SB_POOL ? "cached" : "medium";
  return sb->state < 6 ? names[sb->state] : "?";
}

_Atomic size_t _trove_lock_waits[2];

/* Walk every run of every segment; the page heap lock keeps runs from splitting under us. */
static size_t walk_segments(trove_stats_t *st) {
  size_t pool_empty_bytes = 0;          /* empty superblocks waiting in the pool (heap.c) */
  /* Live blocks summed per class with their signs: a current superblock counts the blocks
   * parked on its list (heap.c, park) as free, below its own live blocks (it may go below
   * 0), while their own superblocks count them live; per class the two cancel. */
  int64_t used_sum[TROVE_CLASSES] = {0};
  for (trove_segment_t *seg = _trove_pages_next_segment(NULL); seg;
       seg = _trove_pages_next_segment(seg)) {
    st->segments++;
    st->segments_huge += atomic_load_explicit(&seg->huge, memory_order_relaxed) != 0;
    for (size_t pg = seg->first_page; pg < TROVE_SEGMENT_PAGES;) {
      const trove_sb_t *sb = _trove_seg_run(seg, pg);
      size_t n = sb->npages ? sb->npages : 1;
      if (sb->kind == TROVE_SPAN_SMALL) {
        trove_class_stats_t *c = &st->classes[sb->cls];
        c->block_size = sb->bsize;
        c->superblocks++;
        c->blocks_capacity += sb->capacity;
        used_sum[sb->cls] += _trove_sb_used(sb);
        if (sb->state == TROVE_SB_POOL && sb->pool_empty) {
          pool_empty_bytes += sb->span_bytes;   /* free memory waiting to be reused: dirty */
        } else if (sb->state == TROVE_SB_POOL) {
          st->pool_superblocks++;
          st->pool_bytes += sb->span_bytes;
        }
      } else if (sb->kind == TROVE_SPAN_MEDIUM && sb->state == 0) {
        st->medium_objects++;
        st->medium_bytes += sb->bsize;
        st->in_use += sb->bsize;
      } else if (sb->kind == TROVE_SPAN_MEDIUM) {      /* in a thread's medium cache */
        st->medium_cached_bytes += sb->span_bytes;
      }
      pg += n;
    }
  }
  for (size_t cls = 1; cls < TROVE_CLASSES; cls++)
    if (used_sum[cls] > 0) {
      st->classes[cls].blocks_in_use = (size_t)used_sum[cls];
      st->in_use += (size_t)used_sum[cls] * st->classes[cls].block_size;
    }
  return pool_empty_bytes;
}

TROVE_API void trove_stats_get(trove_stats_t *st) {
  _trove_init();
  memset(st, 0, sizeof *st);
  _trove_background_hold();                  /* see heap.c, background_pass */
  _trove_pages_lock_all();
  size_t pool_empty_bytes = walk_segments(st);
  _trove_pages_totals(&st->free_page_bytes, &st->dirty_page_bytes);
  st->free_page_bytes += pool_empty_bytes;
  st->dirty_page_bytes += pool_empty_bytes;
  st->arenas = _trove_pages_arenas(&st->arenas_in_use);
  st->huge_pauses = _trove_segment_huge_pauses();
  _trove_pages_unlock_all();
  _trove_background_release();
  _trove_mutex_lock(&_trove_locks.large);
  st->large_objects = _trove_large_live_count;
  st->large_bytes = _trove_large_live_bytes;
  size_t large_cached = _trove_large_cached_bytes();
  _trove_mutex_unlock(&_trove_locks.large);
  st->in_use += st->large_bytes;
  _trove_mutex_lock(&_trove_locks.heaps);
  for (trove_heap_t *h = _trove_heaps_all; h; h = h->next_all) {
    st->heaps_created++;
    if (_trove_heap_live(h) && !h->shared) st->threads++;
    st->remote_frees += h->c.remote_frees;
    st->slow_mallocs += h->c.slow_mallocs;
    st->superblocks_released += h->c.released;
    st->superblocks_adopted += h->c.adopted;
    st->superblocks_abandoned += h->c.abandoned;
    st->superblocks_claimed += h->c.claimed;
    st->blocks_borrowed += h->c.borrowed;
    st->blocks_parked += h->c.parked;
    st->spare_bytes += (size_t)__atomic_load_n(&h->spare_pages, __ATOMIC_RELAXED)
                       << TROVE_PAGE_SHIFT;
  }
  _trove_mutex_unlock(&_trove_locks.heaps);
  st->held = atomic_load(&_trove_os_mapped);
  st->peak_held = atomic_load(&_trove_os_peak_mapped);
  size_t clean = st->free_page_bytes - st->dirty_page_bytes;
  st->resident = st->held > clean ? st->held - clean : 0;
  (void)large_cached;
  st->blocks_purged = _trove_blocks_purged();
  st->purges = atomic_load(&_trove_os_purge_calls);
  st->lock_waits_pool = atomic_load(&_trove_lock_waits[TROVE_LOCK_POOL]);
  st->lock_waits_pages = atomic_load(&_trove_lock_waits[TROVE_LOCK_PAGES]);
  st->purged_bytes = atomic_load(&_trove_os_purged_total);
  st->process_rss = _trove_os_rss();
  raise_peak(&peak_in_use, st->in_use);
  raise_peak(&peak_resident, st->resident);
  st->peak_in_use = atomic_load(&peak_in_use);
  st->peak_resident = atomic_load(&peak_resident);
}

/* ------------------------------------------------------------------ printing */
static void print_line(void *arg, const char *s) { fprintf((FILE *)arg, "%s\n", s); }

static void kib(FILE *out, const char *name, size_t bytes) {
  fprintf(out, "  %-22s %12zu KiB\n", name, bytes >> 10);
}

TROVE_API void trove_stats_print(FILE *out) {
  if (out == NULL) out = stderr;
  static trove_stats_t st;           /* static: this may run at exit on a small stack */
  trove_stats_get(&st);
  fprintf(out, "trove statistics (%s)\n", trove_version());
  kib(out, "in use", st.in_use);
  kib(out, "peak in use (sampled)", st.peak_in_use);   /* at stats calls only */
  kib(out, "held from the OS", st.held);
  kib(out, "peak held", st.peak_held);
  kib(out, "resident (estimate)", st.resident);
  kib(out, "process RSS", st.process_rss);
  kib(out, "free pages", st.free_page_bytes);
  kib(out, "  of which dirty", st.dirty_page_bytes);
  kib(out, "medium objects", st.medium_bytes);
  kib(out, "medium thread caches", st.medium_cached_bytes);
  kib(out, "spare superblocks", st.spare_bytes);
  kib(out, "large objects", st.large_bytes);
  kib(out, "shared pool", st.pool_bytes);
  fprintf(out, "  segments %zu (%zu in huge pages, %zu pauses), medium %zu, large %zu, pool superblocks %zu\n",
          st.segments, st.segments_huge, st.huge_pauses, st.medium_objects, st.large_objects,
          st.pool_superblocks);
  fprintf(out, "  threads %zu live / %zu heaps, slow mallocs %zu, remote frees %zu\n", st.threads,
          st.heaps_created, st.slow_mallocs, st.remote_frees);
  fprintf(out,
          "  superblocks released %zu, adopted %zu, abandoned %zu, claimed %zu; blocks borrowed "
          "%zu, parked %zu, purged %zu; purges %zu (%zu KiB)\n",
          st.superblocks_released, st.superblocks_adopted, st.superblocks_abandoned,
          st.superblocks_claimed, st.blocks_borrowed, st.blocks_parked, st.blocks_purged,
          st.purges, st.purged_bytes >> 10);
  fprintf(out, "  arenas %zu (%zu in use); locks found taken: pool %zu, page heap %zu\n",
          st.arenas, st.arenas_in_use, st.lock_waits_pool, st.lock_waits_pages);
  fprintf(out, "  %8s %10s %10s %8s %6s\n", "class", "in use", "capacity", "sblocks", "full%");
  for (size_t c = 1; c < TROVE_STATS_CLASSES && c < TROVE_CLASSES; c++) {
    const trove_class_stats_t *cs = &st.classes[c];
    if (cs->superblocks == 0) continue;
    fprintf(out, "  %8zu %10zu %10zu %8zu %5.1f%%\n", cs->block_size, cs->blocks_in_use,
            cs->blocks_capacity, cs->superblocks,
            cs->blocks_capacity ? 100.0 * (double)cs->blocks_in_use / (double)cs->blocks_capacity
                                : 0.0);
  }
  fprintf(out, "options:\n");
  _trove_options_print(print_line, out);
  fflush(out);
}

/* ------------------------------------------------------------------ malloc_info */
/* glibc's malloc_info(3), in glibc's XML shape so that tools that parse it read trove's
 * figures: one <heap> (trove's thread heaps and page heap are one pool as far as this format
 * goes), a <size> line per size class that has free blocks (all of a class's blocks are of one
 * size, so `from` = `to`), the free blocks, free pages and cached medium runs as the "rest",
 * large objects as "mmap", the bytes mapped from the OS as the "system" and "aspace" sizes.
 * Returns 0, or -1 with EINVAL for options other than 0 (as glibc does). */
TROVE_API int trove_malloc_info(int options, FILE *out) {
  if (options != 0 || out == NULL) {
    errno = EINVAL;
    return -1;
  }
  trove_stats_t *st = trove_malloc(sizeof *st);   /* 4 KiB: not on a caller's small stack */
  if (st == NULL) return -1;
  trove_stats_get(st);
  size_t free_blocks = 0, free_block_bytes = 0;
  fprintf(out, "<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n");
  for (size_t c = 1; c < TROVE_STATS_CLASSES && c < TROVE_CLASSES; c++) {
    const trove_class_stats_t *cs = &st->classes[c];
    if (cs->blocks_capacity <= cs->blocks_in_use) continue;
    size_t n = cs->blocks_capacity - cs->blocks_in_use;
    free_blocks += n;
    free_block_bytes += n * cs->block_size;
    fprintf(out, "  <size from=\"%zu\" to=\"%zu\" total=\"%zu\" count=\"%zu\"/>\n",
            cs->block_size, cs->block_size, n * cs->block_size, n);
  }
  size_t rest = free_block_bytes + st->free_page_bytes + st->medium_cached_bytes;
  size_t seg_bytes = st->held - st->large_bytes, peak = st->peak_held;
  fprintf(out,
          "</sizes>\n<total type=\"fast\" count=\"0\" size=\"0\"/>\n"
          "<total type=\"rest\" count=\"%zu\" size=\"%zu\"/>\n"
          "<system type=\"current\" size=\"%zu\"/>\n<system type=\"max\" size=\"%zu\"/>\n"
          "<aspace type=\"total\" size=\"%zu\"/>\n<aspace type=\"mprotect\" size=\"%zu\"/>\n"
          "</heap>\n",
          free_blocks, rest, seg_bytes, peak, seg_bytes, seg_bytes);
  fprintf(out,
          "<total type=\"fast\" count=\"0\" size=\"0\"/>\n"
          "<total type=\"rest\" count=\"%zu\" size=\"%zu\"/>\n"
          "<total type=\"mmap\" count=\"%zu\" size=\"%zu\"/>\n"
          "<system type=\"current\" size=\"%zu\"/>\n<system type=\"max\" size=\"%zu\"/>\n"
          "<aspace type=\"total\" size=\"%zu\"/>\n<aspace type=\"mprotect\" size=\"%zu\"/>\n"
          "</malloc>\n",
          free_blocks, rest, st->large_objects, st->large_bytes, st->held, peak, st->held,
          st->held);
  trove_free(st);
  return 0;
}

/* ------------------------------------------------------------------ heap map (JSON) */
typedef struct { int fd; char buf[8192]; size_t n; bool first; } jw_t;

static void jw_flush(jw_t *w) {
  _trove_os_write_fd(w->fd, w->buf, w->n);
  w->n = 0;
}
static void jw_put(jw_t *w, const char *s) {
  size_t len = strlen(s);
  if (w->n + len > sizeof w->buf) jw_flush(w);
  memcpy(w->buf + w->n, s, len);
  w->n += len;
}

TROVE_API int trove_heap_map_write(const char *path) {
  _trove_init();
  int fd = _trove_os_open_write(path);
  if (fd < 0) return -1;
  static jw_t w;                       /* static: no large frame, no malloc */
  static trove_mutex_t map_lock = TROVE_MUTEX_INIT;
  _trove_mutex_lock(&map_lock);
  w.fd = fd;
  w.n = 0;
  char line[320];
  _trove_snprintf(line, sizeof line,
                  "{\"version\":\"%s\",\"segment_size\":%zu,\"page_size\":%zu,\"segments\":[",
                  trove_version(), (size_t)TROVE_SEGMENT_SIZE, (size_t)TROVE_PAGE_SIZE);
  jw_put(&w, line);
  _trove_background_hold();
  _trove_pages_lock_all();
  bool first_seg = true;
  for (trove_segment_t *seg = _trove_pages_next_segment(NULL); seg;
       seg = _trove_pages_next_segment(seg)) {
    _trove_snprintf(line, sizeof line,
                    "%s\n{\"base\":\"%p\",\"size\":%zu,\"page_size\":%zu,\"header_pages\":%u,"
                    "\"spans\":[",
                    first_seg ? "" : ",", (void *)seg, (size_t)TROVE_SEGMENT_SIZE,
                    (size_t)TROVE_PAGE_SIZE, seg->first_page);
    jw_put(&w, line);
    first_seg = false;
    bool first = true;
    for (size_t pg = seg->first_page; pg < TROVE_SEGMENT_PAGES;) {
      const trove_sb_t *sb = _trove_seg_run(seg, pg);
      size_t n = sb->npages ? sb->npages : 1;
      const char *kind = sb->kind == TROVE_SPAN_SMALL    ? "small"
                         : sb->kind == TROVE_SPAN_MEDIUM ? "medium"
                                                         : "free";
      trove_heap_t *owner = atomic_load_explicit(&sb->heap, memory_order_relaxed);
      int32_t used = sb->kind == TROVE_SPAN_SMALL ? _trove_sb_used(sb) : 0;
      _trove_snprintf(line, sizeof line,
                      "%s{\"page\":%zu,\"npages\":%zu,\"kind\":\"%s\",\"state\":\"%s\","
                      "\"block_size\":%u,\"capacity\":%u,\"used\":%d,\"owner\":%u}",
                      first ? "" : ",", pg, n, kind, state_name(sb),
                      sb->kind == TROVE_SPAN_FREE ? 0u : sb->bsize,
                      sb->kind == TROVE_SPAN_SMALL ? sb->capacity : (sb->kind ? 1u : 0u),
                      sb->kind == TROVE_SPAN_SMALL ? (used > 0 ? used : 0)
                                                   : (sb->kind == TROVE_SPAN_MEDIUM &&
                                                      sb->state != TROVE_SB_POOL),
                      owner && owner != TROVE_ABANDONED ? owner->id : 0u);
      jw_put(&w, line);
      first = false;
      pg += n;
    }
    jw_put(&w, "]}");
  }
  _trove_pages_unlock_all();
  _trove_background_release();
  jw_put(&w, "\n],\"large\":[");
  _trove_mutex_lock(&_trove_locks.large);
  bool first = true;
  for (trove_large_t *l = _trove_large_live(); l; l = l->next) {
    _trove_snprintf(line, sizeof line, "%s{\"base\":\"%p\",\"size\":%zu,\"usable\":%zu}",
                    first ? "" : ",", (void *)l->user, l->map_size, l->usable);
    jw_put(&w, line);
    first = false;
  }
  _trove_mutex_unlock(&_trove_locks.large);
  jw_put(&w, "],\"pool\":[");
  first = true;
  for (size_t c = 1; c < TROVE_CLASSES; c++) {
    size_t count = 0, used = 0, cap = 0;
    for (size_t s = 0; s < _trove_pool_shards; s++) {
      if (!_trove_pool_shard_in_use(s)) continue;
      trove_pool_t *pool = _trove_pool_at(s, c);
      _trove_mutex_lock(&pool->lock);
      for (int full = 0; full < 2; full++)
        for (trove_sb_t *sb = full ? pool->full : pool->avail; sb; sb = sb->next) {
          count++;
          used += (size_t)_trove_sb_used(sb);
          cap += sb->capacity;
        }
      _trove_mutex_unlock(&pool->lock);
    }
    if (!count) continue;
    _trove_snprintf(line, sizeof line,
                    "%s{\"block_size\":%u,\"superblocks\":%zu,\"used\":%zu,\"capacity\":%zu}",
                    first ? "" : ",", _trove_class_size[c], count, used, cap);
    jw_put(&w, line);
    first = false;
  }
  jw_put(&w, "]}\n");
  jw_flush(&w);
  _trove_mutex_unlock(&map_lock);
  _trove_os_close(fd);
  return 0;
}
