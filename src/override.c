/* The standard names: the only file that defines malloc. Linked into libtrove.so (preloaded or
 * linked) and libtrove.a; libtrove_noov.a leaves them out. Each forwards to the inline fast
 * path, so malloc and free cost no extra call. glibc's __libc_ aliases are covered too, since
 * some programs and libraries call them directly. */
#define _GNU_SOURCE
#include "internal.h"
#include <malloc.h>
#include <string.h>

#define API TROVE_API
/* The two hot entry points start on a cache line, so that how fast they run does not depend
 * on where unrelated code changes happen to push them (decoded-uop cache windows are 32 or 64
 * bytes; a shifted loop costs up to 10% on threadtest with the same instruction count). */
#define HOT __attribute__((aligned(64)))

API HOT void *malloc(size_t size) { return _trove_malloc_inline(size); }
API HOT void free(void *p) { _trove_free_inline(p); }
API void cfree(void *p) { _trove_free_inline(p); }
API void *calloc(size_t n, size_t size) { return _trove_calloc(n, size); }
API void *realloc(void *p, size_t size) { return _trove_realloc(p, size); }
API void *reallocarray(void *p, size_t n, size_t size) { return _trove_reallocarray(p, n, size); }
API int posix_memalign(void **out, size_t align, size_t size) {
  return _trove_posix_memalign(out, align, size);
}
API void *aligned_alloc(size_t align, size_t size) { return _trove_aligned_alloc(align, size); }
API void *memalign(size_t align, size_t size) { return _trove_memalign(align, size); }
API void *valloc(size_t size) { return _trove_valloc(size); }
API void *pvalloc(size_t size) { return _trove_pvalloc(size); }
API size_t malloc_usable_size(void *p) { return _trove_usable_size_inline(p); }
API int malloc_trim(size_t pad) { return trove_malloc_trim(pad); }
/* C23 */
API void free_sized(void *p, size_t size) { (void)size; _trove_free_inline(p); }
API void free_aligned_sized(void *p, size_t align, size_t size) {
  (void)align;
  (void)size;
  _trove_free_inline(p);
}

/* C++: operator new(size_t) and new[](size_t), operator delete(void *) and delete[](void *),
 * and the sized deletes, by their Itanium C++ ABI names (size_t is unsigned long, "m", on the
 * LP64 targets trove builds for), and below the aligned new and delete (align_val_t, also an
 * unsigned long). They are here so that they use the inline fast paths; the nothrow forms,
 * and new's out-of-memory path (the new-handler, std::bad_alloc), are in override_new.cc. */
_Static_assert(sizeof(size_t) == sizeof(unsigned long), "operator new names assume LP64");
void *_trove_new_oom(size_t size) TROVE_HIDDEN;
static TROVE_NOINLINE void *new_generic(size_t size, trove_heap_t *h, trove_sb_t *sb) {
  void *p = _trove_malloc_generic(size, h, sb);
  return likely(p != NULL) ? p : _trove_new_oom(size);
}
static TROVE_NOINLINE void *new_big(size_t size, trove_heap_t *h) {
  void *p = _trove_malloc_big(size, h);
  return likely(p != NULL) ? p : _trove_new_oom(size);
}
API HOT void *_Znwm(size_t size) { return _trove_alloc_inline(size, new_generic, new_big); }
API void *_Znam(size_t size) { return _trove_alloc_inline(size, new_generic, new_big); }
API HOT void _ZdlPv(void *p) { _trove_free_inline(p); }
API void _ZdaPv(void *p) { _trove_free_inline(p); }
API HOT void _ZdlPvm(void *p, size_t size) {
  (void)size;
  _trove_free_inline(p);
}
API void _ZdaPvm(void *p, size_t size) {
  (void)size;
  _trove_free_inline(p);
}

/* The aligned forms (C++17, for types declared alignas more than 16: cache-line-aligned
 * counters and queues) pop as posix_memalign's fast path does, returning the block rather
 * than storing it; anything else (a miss, a large or odd alignment, out of memory) goes to
 * override_new.cc. Through posix_memalign, 64-byte-aligned 48-byte objects, 64 live, replaced
 * at random: 121M pairs a second against snmalloc's 169M and tcmalloc's 158M. */
void *_trove_new_aligned_slow(size_t size, size_t align) TROVE_HIDDEN;
static inline void *new_aligned_inline(size_t size, size_t align) {
  if (likely((align & (align - 1)) == 0 && align != 0)) {
    size_t key;
    trove_sb_t *sb = _trove_aligned_sb(align, size, &key);
    if (likely(sb != NULL)) {
      trove_block_t *b = sb->free;
      if (likely(b != NULL)) return _trove_sb_pop(sb, b);
    }
  }
  return _trove_new_aligned_slow(size, align);
}
API HOT void *_ZnwmSt11align_val_t(size_t size, size_t align) { return new_aligned_inline(size, align); }
API void *_ZnamSt11align_val_t(size_t size, size_t align) { return new_aligned_inline(size, align); }
API HOT void _ZdlPvSt11align_val_t(void *p, size_t align) {
  (void)align;
  _trove_free_inline(p);
}
API void _ZdaPvSt11align_val_t(void *p, size_t align) {
  (void)align;
  _trove_free_inline(p);
}
API HOT void _ZdlPvmSt11align_val_t(void *p, size_t size, size_t align) {
  (void)size;
  (void)align;
  _trove_free_inline(p);
}
API void _ZdaPvmSt11align_val_t(void *p, size_t size, size_t align) {
  (void)size;
  (void)align;
  _trove_free_inline(p);
}

API void *__libc_malloc(size_t size) { return _trove_malloc_inline(size); }
API void __libc_free(void *p) { _trove_free_inline(p); }
API void *__libc_calloc(size_t n, size_t size) { return _trove_calloc(n, size); }
API void *__libc_realloc(void *p, size_t size) { return _trove_realloc(p, size); }
API void *__libc_memalign(size_t align, size_t size) { return _trove_memalign(align, size); }
API void *__libc_valloc(size_t size) { return _trove_valloc(size); }
API void *__libc_pvalloc(size_t size) { return _trove_pvalloc(size); }

/* glibc's statistics entry points, answered from trove's own counters. */
API void malloc_stats(void) { trove_stats_print(stderr); }
API int malloc_info(int options, FILE *fp) { return trove_malloc_info(options, fp); }

API struct mallinfo2 mallinfo2(void) {
  trove_stats_t st;
  trove_stats_get(&st);
  struct mallinfo2 mi;
  memset(&mi, 0, sizeof mi);
  mi.arena = st.held - st.large_bytes;
  mi.hblks = st.large_objects;
  mi.hblkhd = st.large_bytes;
  mi.uordblks = st.in_use;
  mi.fordblks = st.held > st.in_use ? st.held - st.in_use : 0;
  mi.keepcost = st.dirty_page_bytes;
  mi.usmblks = st.peak_held;
  return mi;
}

API struct mallinfo mallinfo(void) {
  struct mallinfo2 m2 = mallinfo2();
  struct mallinfo mi;
  mi.arena = (int)m2.arena;
  mi.ordblks = (int)m2.ordblks;
  mi.smblks = (int)m2.smblks;
  mi.hblks = (int)m2.hblks;
  mi.hblkhd = (int)m2.hblkhd;
  mi.usmblks = (int)m2.usmblks;
  mi.fsmblks = (int)m2.fsmblks;
  mi.uordblks = (int)m2.uordblks;
  mi.fordblks = (int)m2.fordblks;
  mi.keepcost = (int)m2.keepcost;
  return mi;
}

/* Tuning knobs of glibc's allocator mean nothing here; accept them so programs that set them
 * keep working. */
API int mallopt(int param, int value) {
  (void)param;
  (void)value;
  return 1;
}
