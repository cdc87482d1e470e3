/* API conformance of the malloc family at every size-class boundary.
 *
 * Sizes 0..4096 one by one, then powers of two +-1 up to 64 MiB; alignments 8 B..1 MiB. For
 * every result: aligned (16 for sizes >= 16, 8 below), usable size >= request, writable over
 * the whole usable size; realloc keeps contents; calloc zeroes (also reused dirty memory);
 * the C/POSIX/glibc error conventions (ENOMEM, EINVAL, realloc(p, 0), malloc(0)); size-class
 * waste (usable <= size * 1.125 + 16 above 64 B). Built three ways (see testhelper.h):
 * standard names + libtrove.a, standard names under LD_PRELOAD, and the trove_ API. */
#include "testhelper.h"

#include <limits.h>
#include <pthread.h>
#include <stddef.h>

/* Volatile, so that the compiler neither warns about nor folds the absurd requests. */
static volatile size_t v_size_max = SIZE_MAX;
static volatile size_t v_zero = 0;

static size_t page_size;

static size_t min_align(size_t n) { return n >= 16 ? 16 : 8; }

/* A block the API returned: not NULL, aligned, usable >= req, writable over its usable size. */
static void check_block(void *p, size_t req, size_t align, const char *what) {
  CHECKF(p != NULL, "%s(%zu) returned NULL", what, req);
  CHECKF((uintptr_t)p % align == 0, "%s(%zu) = %p is not aligned to %zu", what, req, p, align);
  size_t us = T_USABLE_SIZE(p);
  CHECKF(us >= req, "%s(%zu) = %p: usable size %zu < requested", what, req, p, us);
  memset(p, 0xA5, us);
  if (us) CHECK(((volatile unsigned char *)p)[us - 1] == 0xA5);
}

/* The interesting sizes: 0..4096 one by one, then 2^k - 1, 2^k, 2^k + 1 up to 64 MiB. */
static size_t sweep_sizes(size_t *out) {
  size_t n = 0;
  for (size_t s = 0; s <= 4096; s++) out[n++] = s;
  for (int k = 12; k <= 26; k++) {
    size_t s = (size_t)1 << k;
    if (k > 12) out[n++] = s - 1;
    if (k > 12) out[n++] = s;
    out[n++] = s + 1;
  }
  return n;
}

/* Boundary sizes for the aligned functions (with 18 alignments each). */
static const size_t edge_sizes[] = {
    0,       1,       7,       8,       15,      16,      17,      24,      31,
    32,      33,      48,      63,      64,      65,      72,      100,     127,
    128,     129,     255,     256,     257,     1000,    1023,    1024,    1025,
    4095,    4096,    4097,    8191,    8192,    8193,    65535,   65536,   65537,
    100000,  1048575, 1048576, 1048577, 4194305};
#define N_EDGE (sizeof edge_sizes / sizeof edge_sizes[0])

/* byte i of the realloc pattern */
static unsigned char pat(size_t i) { return (unsigned char)(i * 7 + (i >> 9) + 3); }

static void fill_pat(unsigned char *p, size_t from, size_t to) {
  for (size_t i = from; i < to; i++) p[i] = pat(i);
}

static void verify_pat(const unsigned char *p, size_t n, const char *what, size_t size) {
  for (size_t i = 0; i < n; i++)
    CHECKF(p[i] == pat(i), "%s to %zu lost contents at offset %zu of %zu", what, size, i, n);
}

static void test_malloc_sweep(size_t *sizes, size_t nsizes) {
  for (size_t i = 0; i < nsizes; i++) {
    void *p = T_MALLOC(sizes[i]);
    check_block(p, sizes[i], min_align(sizes[i]), "malloc");
    T_FREE(p);
  }
  /* all of 0..4096 live at once: no two blocks overlap (each keeps its own pattern) */
  enum { N = 4097 };
  static void *live[N];
  static size_t us[N];
  for (size_t s = 0; s < N; s++) {
    live[s] = T_MALLOC(s);
    check_block(live[s], s, min_align(s), "malloc");
    us[s] = T_USABLE_SIZE(live[s]);
    th_fill(live[s], us[s], s * 0x1234567ull, 0);
  }
  for (size_t s = 0; s < N; s++)
    CHECKF(th_verify(live[s], us[s], s * 0x1234567ull, 0) == TH_OK,
           "block of %zu bytes at %p was overwritten (blocks overlap)", s, live[s]);
  th_rng_t r;
  th_rng_seed(&r, 1);
  for (size_t i = N - 1; i > 0; i--) { /* free in a seeded random order */
    size_t j = th_below(&r, i + 1);
    void *t = live[i];
    live[i] = live[j];
    live[j] = t;
  }
  for (size_t s = 0; s < N; s++) T_FREE(live[s]);
  printf("ok malloc sweep (%zu sizes)\n", nsizes);
}

/* Design property 6: size classes waste at most 1/8 above 64 B. */
static void test_usable_waste(void) {
  for (size_t s = 65; s <= 65536; s++) {
    void *p = T_MALLOC(s);
    CHECK(p != NULL);
    size_t us = T_USABLE_SIZE(p);
    CHECKF(us >= s && us <= s + s / 8 + 16, "malloc(%zu): usable size %zu wastes more than 1/8",
           s, us);
    T_FREE(p);
  }
  /* medium objects (page runs up to 1 MiB), sampled */
  for (size_t s = 65536; s <= TH_MIB; s += 4099) {
    void *p = T_MALLOC(s);
    CHECK(p != NULL);
    size_t us = T_USABLE_SIZE(p);
    CHECKF(us >= s && us <= s + s / 8 + 16, "malloc(%zu): usable size %zu wastes more than 1/8",
           s, us);
    T_FREE(p);
  }
  printf("ok usable-size waste <= 12.5%% + 16 B\n");
}

#if !defined(TROVE_TEST_API) && !defined(TROVE_TEST_PRELOAD)
/* The static build links the library's internals: its lookup tables, built at start-up in one
 * walk each (size_class.c), must give every size the class the spec gives it: 16 B steps to
 * 128 B, then eighths of each power of two up to 64 KiB; with TROVE_COLOUR=1, malloc's class
 * for a multiple of 1 KiB from 4 KiB up (but 5 KiB; not 64 KiB) is 64 B larger and the
 * multiples of 4 KiB and 6 KiB stay as classes for aligned requests. malloc's fast path finds
 * its superblock through _trove_size_slot; the aligned paths use the other two, whose classes
 * include the aligned-only ones. */
extern uint8_t _trove_size_slot[], _trove_class_mid[], _trove_class_direct[];
extern uint32_t _trove_class_size[];
/* The class sizes the spec lists: `plain` malloc's, else every class (aligned-only too). */
static size_t spec_sizes(int colour, int plain, size_t *out) {
  size_t n = 0;
  for (size_t bs = 16; bs <= 128; bs += 16) out[n++] = bs;
  for (size_t lg = 7; lg < 16; lg++)
    for (size_t k = 1; k <= 8; k++) {
      size_t bs = ((size_t)1 << lg) + k * ((size_t)1 << (lg - 3));
      if (colour && bs >= 4096 && bs < 65536 && bs % 1024 == 0 && bs != 5120) {
        if (!plain && (bs % 4096 == 0 || bs == 6144)) out[n++] = bs;
        bs += 64;
      }
      out[n++] = bs;
    }
  return n;
}
static size_t spec_smallest(const size_t *sizes, size_t n, size_t size) {
  for (size_t i = 0; i < n; i++)
    if (sizes[i] >= size) return sizes[i];
  return 0;
}
static void test_class_tables(void) {
  /* slots 0..64 (sizes up to 1 KiB) are direct[]'s, and _trove_size_slot maps them to
   * themselves; above, it holds 65 + the class (internal.h, TROVE_DIRECT_SLOTS) */
  static size_t plain[128], all[128];
  const char *env = getenv("TROVE_COLOUR");
  int colour = env != NULL && strcmp(env, "1") == 0;
  size_t np = spec_sizes(colour, 1, plain), na = spec_sizes(colour, 0, all);
  CHECKF(np == 80 && na == (colour ? 96u : 80u), "the spec lists %zu and %zu classes", np, na);
  for (size_t size = 1; size <= 65536; size++) {
    size_t want = spec_smallest(plain, np, size), slot = (size + 15) >> 4;
    size_t c = slot <= 64 ? _trove_class_direct[slot] : _trove_size_slot[slot] - 65u;
    CHECKF(_trove_class_size[c] == want, "size %zu: class %zu of %u B, want %zu B", size, c,
           _trove_class_size[c], want);
    if (slot <= 64)
      CHECKF(_trove_size_slot[slot] == slot, "size %zu: slot %u, want %zu", size,
             _trove_size_slot[slot], slot);
    size_t any = spec_smallest(all, na, size);
    if (size > 1024)
      CHECKF(_trove_class_size[_trove_class_mid[(size - 1) >> 6]] == any,
             "size %zu: mid table gives %u B, want %zu B", size,
             _trove_class_size[_trove_class_mid[(size - 1) >> 6]], any);
  }
  printf("ok class tables (sizes 1 B - 64 KiB%s)\n", colour ? ", TROVE_COLOUR=1" : "");
}
#endif

static void check_zero(const void *p, size_t n, const char *what, size_t size) {
  const unsigned char *c = (const unsigned char *)p;
  for (size_t i = 0; i < n; i++)
    CHECKF(c[i] == 0, "%s(%zu) = %p: byte %zu is 0x%02x, not zero", what, size, p, i, c[i]);
}

static void test_calloc(size_t *sizes, size_t nsizes) {
  for (size_t i = 0; i < nsizes; i++) {
    size_t s = sizes[i];
    /* dirty the memory first, so that calloc reuses a dirty block */
    void *d = T_MALLOC(s);
    CHECK(d != NULL);
    memset(d, 0xFF, T_USABLE_SIZE(d));
    T_FREE(d);
    void *p = T_CALLOC(1, s);
    CHECKF(p != NULL, "calloc(1, %zu) returned NULL", s);
    CHECKF((uintptr_t)p % min_align(s) == 0, "calloc(1, %zu) = %p misaligned", s, p);
    CHECK(T_USABLE_SIZE(p) >= s);
    check_zero(p, s, "calloc", s);
    memset(p, 0xFF, T_USABLE_SIZE(p));
    T_FREE(p);
    /* the other way round, and split in two factors */
    p = T_CALLOC(s, 1);
    CHECK(p != NULL);
    check_zero(p, s, "calloc", s);
    memset(p, 0xEE, T_USABLE_SIZE(p));
    T_FREE(p);
    if (s >= 16 && s % 8 == 0) {
      p = T_CALLOC(s / 8, 8);
      CHECK(p != NULL);
      check_zero(p, s, "calloc", s);
      memset(p, 0xDD, s);
      T_FREE(p);
    }
  }
  /* several dirty blocks of one size freed, then calloc'd back */
  static const size_t sz[] = {16, 48, 100, 1024, 5000, 70000, 300000, 2 * TH_MIB, 8 * TH_MIB};
  for (size_t k = 0; k < sizeof sz / sizeof sz[0]; k++) {
    void *b[16];
    for (int i = 0; i < 16; i++) {
      b[i] = T_MALLOC(sz[k]);
      CHECK(b[i] != NULL);
      memset(b[i], 0xFF, sz[k]);
    }
    for (int i = 0; i < 16; i++) T_FREE(b[i]);
    for (int i = 0; i < 16; i++) {
      b[i] = T_CALLOC(1, sz[k]);
      CHECK(b[i] != NULL);
      check_zero(b[i], sz[k], "calloc after free of dirty blocks", sz[k]);
    }
    for (int i = 0; i < 16; i++) T_FREE(b[i]);
  }
  /* overflow of count * size */
  size_t big = v_size_max;
  static const size_t pairs[][2] = {
      {SIZE_MAX / 2 + 1, 2}, {2, SIZE_MAX / 2 + 1}, {(size_t)1 << 33, (size_t)1 << 33},
      {SIZE_MAX, SIZE_MAX},  {SIZE_MAX / 3 + 1, 3}, {65537, SIZE_MAX / 65536}};
  for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
    errno = 0;
    void *p = T_CALLOC(pairs[k][0] + v_zero, pairs[k][1] + v_zero);
    CHECKF(p == NULL && errno == ENOMEM, "calloc(%zu, %zu) = %p errno %d: expected NULL, ENOMEM",
           pairs[k][0], pairs[k][1], p, errno);
  }
  errno = 0;
  void *p = T_CALLOC(big, 1);
  CHECK(p == NULL && errno == ENOMEM);
  /* a zero count or size gives a unique, freeable block */
  void *z1 = T_CALLOC(0, big), *z2 = T_CALLOC(big, 0), *z3 = T_CALLOC(0, 0);
  CHECK(z1 != NULL && z2 != NULL && z3 != NULL && z1 != z2 && z2 != z3 && z1 != z3);
  T_FREE(z1);
  T_FREE(z2);
  T_FREE(z3);
  printf("ok calloc (zeroing after dirty reuse, overflow)\n");
}

static size_t in_use_now(void) {
  trove_stats_t st;
  th_stats(&st);
  return st.in_use;
}

static void test_realloc(size_t *sizes, size_t nsizes) {
  /* realloc(NULL, n) is malloc(n) */
  for (size_t s = 0; s <= 300; s += 7) {
    void *p = T_REALLOC(NULL, s);
    check_block(p, s, min_align(s), "realloc(NULL)");
    T_FREE(p);
  }
  /* grow through every size, then shrink back: contents always kept */
  unsigned char *p = NULL;
  size_t cur = 0;
  for (size_t i = 0; i < nsizes; i++) {
    size_t s = sizes[i];
    if (s == 0) continue;
    unsigned char *q = (unsigned char *)T_REALLOC(p, s);
    CHECKF(q != NULL, "realloc(%p, %zu) returned NULL", (void *)p, s);
    CHECKF((uintptr_t)q % min_align(s) == 0, "realloc to %zu = %p misaligned", s, (void *)q);
    CHECK(T_USABLE_SIZE(q) >= s);
    verify_pat(q, cur < s ? cur : s, "realloc growing", s);
    fill_pat(q, cur < s ? cur : s, s);
    p = q;
    cur = s;
  }
  for (size_t i = nsizes; i-- > 0;) {
    size_t s = sizes[i];
    if (s == 0) continue;
    unsigned char *q = (unsigned char *)T_REALLOC(p, s);
    CHECKF(q != NULL, "realloc(%p, %zu) returned NULL", (void *)p, s);
    CHECKF((uintptr_t)q % min_align(s) == 0, "realloc to %zu = %p misaligned", s, (void *)q);
    CHECK(T_USABLE_SIZE(q) >= s);
    verify_pat(q, s, "realloc shrinking", s);
    p = q;
    cur = s;
  }
  T_FREE(p);

  /* jumps between small, medium and large, both ways */
  static const size_t jumps[] = {100,     200000, 900000,  2 * TH_MIB + 3, 40 * TH_MIB, 3 * TH_MIB,
                                 70000,   17,     5 * TH_MIB, 64,         1500000,     300,
                                 66000,   131072, 1048576, 1048577,     32,          8 * TH_MIB};
  p = NULL;
  cur = 0;
  for (size_t i = 0; i < sizeof jumps / sizeof jumps[0]; i++) {
    size_t s = jumps[i];
    unsigned char *q = (unsigned char *)T_REALLOC(p, s);
    CHECKF(q != NULL, "realloc(%p, %zu) returned NULL", (void *)p, s);
    CHECK(T_USABLE_SIZE(q) >= s);
    verify_pat(q, cur < s ? cur : s, "realloc jumping", s);
    fill_pat(q, cur < s ? cur : s, s);
    p = q;
    cur = s;
  }
  /* many small steps on a medium block (it may grow into the next free run), into large */
  {
    unsigned char *q = (unsigned char *)T_REALLOC(p, 100000);
    CHECK(q != NULL);
    verify_pat(q, 100000, "realloc shrinking", 100000);
    p = q;
    cur = 100000;
  }
  for (size_t s = 100000; s < 1300 * TH_KIB; s += 8192 + 8) {
    unsigned char *q = (unsigned char *)T_REALLOC(p, s);
    CHECKF(q != NULL, "realloc(%p, %zu) returned NULL", (void *)p, s);
    verify_pat(q, cur < s ? cur : s, "realloc stepping", s);
    fill_pat(q, cur < s ? cur : s, s);
    p = q;
    cur = s;
  }
  /* a failing realloc keeps the block */
  errno = 0;
  void *fail = T_REALLOC(p, v_size_max);
  CHECK(fail == NULL && errno == ENOMEM);
  errno = 0;
  fail = T_REALLOC(p, v_size_max - 4096);
  CHECK(fail == NULL && errno == ENOMEM);
  verify_pat(p, cur, "failed realloc", cur);
  T_FREE(p);

  /* realloc of aligned blocks keeps contents */
  for (size_t a = 16; a <= 65536; a *= 4) {
    void *b = NULL;
    CHECK(T_POSIX_MEMALIGN(&b, a, 100) == 0);
    fill_pat(b, 0, 100);
    unsigned char *q = (unsigned char *)T_REALLOC(b, 100000);
    CHECK(q != NULL);
    verify_pat(q, 100, "realloc of an aligned block", 100000);
    q = (unsigned char *)T_REALLOC(q, 50);
    CHECK(q != NULL);
    verify_pat(q, 50, "realloc of an aligned block", 50);
    T_FREE(q);
  }

  /* realloc(p, 0) frees p and returns NULL (glibc) */
  static const size_t zs[] = {1, 100, 5000, 300000, 3 * TH_MIB};
  for (size_t k = 0; k < sizeof zs / sizeof zs[0]; k++) {
    size_t before = in_use_now();
    void *b = T_MALLOC(zs[k]);
    CHECK(b != NULL);
    memset(b, 1, zs[k]);
    CHECK(in_use_now() > before);
    void *r = T_REALLOC(b, v_zero);
    CHECKF(r == NULL, "realloc(p, 0) returned %p, not NULL", r);
    CHECKF(in_use_now() == before, "realloc(p, 0) did not free a %zu-byte block", zs[k]);
  }
  printf("ok realloc\n");
}

/* Medium buffers grown side by side by small appends (alloc.c, realloc_block): where one
 * cannot grow in place it moves to a run a quarter longer than it was, so that the next
 * appends fit without a move; 8 buffers grown by 1,000 bytes from 64 KiB to 600 KiB moved
 * 50-112 times each with runs of the exact length. A larger step gets the length it asks
 * for (400 -> 430 KiB). Contents survive every move. */
static void test_realloc_medium_appends(void) {
  enum { N = 8, STEP = 1000 };
  unsigned char *b[N];
  size_t moves[N] = {0}, roomy = 0;
  for (int k = 0; k < N; k++) {
    b[k] = (unsigned char *)T_MALLOC(64 * TH_KIB);
    CHECK(b[k] != NULL);
    memset(b[k], k + 1, 64 * TH_KIB);
  }
  for (size_t s = 64 * TH_KIB + STEP; s <= 600 * TH_KIB; s += STEP)
    for (int k = 0; k < N; k++) {
      size_t before = T_USABLE_SIZE(b[k]);
      unsigned char *q = (unsigned char *)T_REALLOC(b[k], s);
      CHECK(q != NULL);
      if (q != b[k]) {
        moves[k]++;
        CHECK(q[0] == k + 1 && q[s - STEP - 1] == (unsigned char)(k + 1 + s - STEP));
        CHECKF(T_USABLE_SIZE(q) >= before + before / 4 - 4096,
               "a medium buffer of %zu moved on a %d-byte append to %zu usable bytes", before,
               STEP, T_USABLE_SIZE(q));
        roomy++;
      }
      memset(q + s - STEP, (unsigned char)(k + 1 + s), STEP);
      b[k] = q;
    }
  for (int k = 0; k < N; k++) {
    CHECKF(moves[k] <= 30, "a medium buffer grown by appends moved %zu times", moves[k]);
    T_FREE(b[k]);
  }
  CHECK(roomy > 0);                        /* side by side, some had to move */
  /* a step of more than a sixteenth gets the length asked for (no cached run first, which
   * may be up to a quarter longer than a request) */
  th_collect();
  unsigned char *p = (unsigned char *)T_MALLOC(400 * TH_KIB), *fence[64];
  CHECK(p != NULL);
  memset(p, 7, 400 * TH_KIB);
  int adjacent = 0;                        /* a run right after p: it cannot grow in place */
  for (int i = 0; i < 64; i++) {
    fence[i] = (unsigned char *)T_MALLOC(68 * TH_KIB);
    CHECK(fence[i] != NULL);
    adjacent |= fence[i] == p + T_USABLE_SIZE(p);
  }
  unsigned char *q = (unsigned char *)T_REALLOC(p, 430 * TH_KIB);   /* 7.5% more */
  CHECK(q != NULL && q[400 * TH_KIB - 1] == 7);
  CHECKF(q != p || !adjacent, "a medium block grew in place over the run after it");
  if (q != p)
    CHECKF(T_USABLE_SIZE(q) < 470 * TH_KIB, "a 7.5%% growth moved to %zu usable bytes",
           T_USABLE_SIZE(q));
  T_FREE(q);
  for (int i = 0; i < 64; i++) T_FREE(fence[i]);
  printf("ok medium buffers grown by appends side by side (%zu moves with room%s)\n", roomy,
         adjacent ? "" : "; no run placed after the 400 KiB one");
}

/* A medium block shrunk to between half and three quarters of its size gives its tail pages
 * back in place (alloc.c, realloc_block; page_heap.c, _trove_pages_shrink): same pointer,
 * usable size cut to the pages it needs, contents kept, and it grows back. Shrunk by less it
 * keeps its size. A block of a class above 8 KiB shrunk so moves to the class that fits; a
 * smaller one stays where it is. */
static void test_realloc_medium_shrink(void) {
  const size_t big = 900 * TH_KIB, part = 500 * TH_KIB, most = 800 * TH_KIB;
  unsigned char *p = (unsigned char *)T_MALLOC(big);
  CHECK(p != NULL);
  size_t before = T_USABLE_SIZE(p);
  for (size_t i = 0; i < big; i += 4093) p[i] = pat(i);
  unsigned char *q = (unsigned char *)T_REALLOC(p, part);
  CHECKF(q == p, "realloc(%zu -> %zu) moved the block", big, part);
  CHECKF(T_USABLE_SIZE(q) >= part && T_USABLE_SIZE(q) < part + 16 * TH_KIB,
         "realloc(%zu -> %zu) in place kept %zu usable bytes", before, part, T_USABLE_SIZE(q));
  for (size_t i = 0; i < part; i += 4093) CHECK(q[i] == pat(i));
  size_t shrunk = T_USABLE_SIZE(q);
  unsigned char *g = (unsigned char *)T_REALLOC(q, big);
  CHECK(g != NULL && T_USABLE_SIZE(g) >= big);
  for (size_t i = 0; i < part; i += 4093) CHECK(g[i] == pat(i));
  for (size_t i = part - part % 4093 + 4093; i < big; i += 4093) g[i] = pat(i);
  size_t grown = T_USABLE_SIZE(g);
  unsigned char *k = (unsigned char *)T_REALLOC(g, most);
  CHECKF(k == g && T_USABLE_SIZE(k) == grown,
         "realloc(%zu -> %zu) changed the block (usable %zu -> %zu)", grown, most, grown,
         T_USABLE_SIZE(k));
  for (size_t i = 0; i < most; i += 4093) CHECK(k[i] == pat(i));
  T_FREE(k);
  /* a block of a class above 8 KiB shrunk so moves to the class that fits; a smaller one stays */
  static const size_t from[] = {60 * TH_KIB, 20 * TH_KIB, 4 * TH_KIB}, to[] = {40 * TH_KIB, 12 * TH_KIB, 2600};
  for (int c = 0; c < 3; c++) {
    unsigned char *b = (unsigned char *)T_MALLOC(from[c]);
    CHECK(b != NULL);
    size_t was = T_USABLE_SIZE(b);
    for (size_t i = 0; i < from[c]; i += 509) b[i] = pat(i);
    unsigned char *r = (unsigned char *)T_REALLOC(b, to[c]);
    CHECK(r != NULL);
    for (size_t i = 0; i < to[c]; i += 509) CHECK(r[i] == pat(i));
    if (was > 8192)
      CHECKF(T_USABLE_SIZE(r) < to[c] + to[c] / 8 + 16, "realloc(%zu -> %zu) kept %zu usable bytes",
             from[c], to[c], T_USABLE_SIZE(r));
    else
      CHECKF(r == b, "realloc(%zu -> %zu) moved a block of %zu", from[c], to[c], was);
    T_FREE(r);
  }
  printf("ok a medium block shrunk in place gives its tail back (%zu -> %zu usable bytes)\n",
         before, shrunk);
}

static void test_reallocarray(void) {
  unsigned char *p = (unsigned char *)T_REALLOCARRAY(NULL, 10, 100);
  CHECK(p != NULL && T_USABLE_SIZE(p) >= 1000);
  fill_pat(p, 0, 1000);
  unsigned char *q = (unsigned char *)T_REALLOCARRAY(p, 300, 100);
  CHECK(q != NULL && T_USABLE_SIZE(q) >= 30000);
  verify_pat(q, 1000, "reallocarray", 30000);
  fill_pat(q, 1000, 30000);
  p = q;
  static const size_t pairs[][2] = {
      {SIZE_MAX / 2 + 1, 2}, {3, SIZE_MAX / 3 + 1}, {(size_t)1 << 32, (size_t)1 << 32}};
  for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
    errno = 0;
    q = (unsigned char *)T_REALLOCARRAY(p, pairs[k][0] + v_zero, pairs[k][1] + v_zero);
    CHECKF(q == NULL && errno == ENOMEM, "reallocarray(p, %zu, %zu): expected NULL, ENOMEM",
           pairs[k][0], pairs[k][1]);
    verify_pat(p, 30000, "failed reallocarray", 30000);
  }
  errno = 0;
  q = (unsigned char *)T_REALLOCARRAY(NULL, SIZE_MAX / 2 + 1 + v_zero, 4);
  CHECK(q == NULL && errno == ENOMEM);
  T_FREE(p);
  printf("ok reallocarray\n");
}

static void test_aligned(void) {
  for (size_t a = 8; a <= TH_MIB; a *= 2) {
    for (size_t k = 0; k < N_EDGE; k++) {
      size_t s = edge_sizes[k];
      size_t want = a > min_align(s) ? a : min_align(s);
      void *b[3];
      for (int i = 0; i < 3; i++) { /* three live at once: they must not overlap */
        b[i] = NULL;
        int rc = T_POSIX_MEMALIGN(&b[i], a, s);
        CHECKF(rc == 0, "posix_memalign(%zu, %zu) = %d", a, s, rc);
        check_block(b[i], s, want, "posix_memalign");
        th_fill(b[i], s, (uint64_t)i * 77 + s, 1);
      }
      for (int i = 0; i < 3; i++) {
        CHECKF(th_verify(b[i], s, (uint64_t)i * 77 + s, 1) == TH_OK,
               "posix_memalign(%zu, %zu) blocks overlap", a, s);
        T_FREE(b[i]);
      }
      void *p = T_ALIGNED_ALLOC(a, s);
      check_block(p, s, want, "aligned_alloc");
      T_FREE(p);
      p = T_MEMALIGN(a, s);
      check_block(p, s, want, "memalign");
      T_FREE(p);
    }
  }
  /* alignments below sizeof(void *) are fine for aligned_alloc and memalign */
  for (size_t a = 1; a < sizeof(void *); a *= 2) {
    void *p = T_ALIGNED_ALLOC(a, 40);
    check_block(p, 40, 8, "aligned_alloc");
    T_FREE(p);
    p = T_MEMALIGN(a, 40);
    check_block(p, 40, 8, "memalign");
    T_FREE(p);
  }
  /* posix_memalign: not a power of two, or below sizeof(void *) -> EINVAL */
  static const size_t bad[] = {0, 1, 2, 4, 3, 12, 24, 48, 100, 4097, (1 << 20) + 8};
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    void *p = (void *)0x1;
    int rc = T_POSIX_MEMALIGN(&p, bad[k] + v_zero, 64);
    CHECKF(rc == EINVAL, "posix_memalign(alignment %zu) = %d, expected EINVAL", bad[k], rc);
  }
  /* aligned_alloc: not a power of two -> NULL, EINVAL */
  static const size_t bad2[] = {0, 3, 12, 24, 48, 100, 4097, (1 << 20) + 8};
  for (size_t k = 0; k < sizeof bad2 / sizeof bad2[0]; k++) {
    errno = 0;
    void *p = T_ALIGNED_ALLOC(bad2[k] + v_zero, 64);
    CHECKF(p == NULL && errno == EINVAL, "aligned_alloc(%zu, 64) = %p errno %d, expected NULL, "
           "EINVAL", bad2[k], p, errno);
  }
  /* memalign with an alignment that is not a power of two: NULL, or (glibc) rounded up */
  {
    errno = 0;
    void *p = T_MEMALIGN(24 + v_zero, 100);
    CHECKF(p == NULL ? errno == EINVAL : (uintptr_t)p % 32 == 0,
           "memalign(24, 100) = %p: neither EINVAL nor aligned to 32", p);
    T_FREE(p);
  }
  /* impossible sizes, also where size + alignment overflows */
  static const size_t huge[] = {SIZE_MAX, SIZE_MAX - 4096, SIZE_MAX - (1 << 19), SIZE_MAX / 2 + 1,
                                (size_t)1 << 60};
  for (size_t k = 0; k < sizeof huge / sizeof huge[0]; k++) {
    for (size_t a = 64; a <= TH_MIB; a *= 128) {
      void *p = (void *)0x1;
      int rc = T_POSIX_MEMALIGN(&p, a, huge[k] + v_zero);
      CHECKF(rc == ENOMEM, "posix_memalign(%zu, %zu) = %d, expected ENOMEM", a, huge[k], rc);
      errno = 0;
      p = T_ALIGNED_ALLOC(a, huge[k] + v_zero);
      CHECKF(p == NULL && errno == ENOMEM, "aligned_alloc(%zu, %zu): expected NULL, ENOMEM", a,
             huge[k]);
      errno = 0;
      p = T_MEMALIGN(a, huge[k] + v_zero);
      CHECKF(p == NULL && errno == ENOMEM, "memalign(%zu, %zu): expected NULL, ENOMEM", a,
             huge[k]);
    }
  }
  {
    /* a huge alignment cannot be served */
    void *p = (void *)0x1;
    int rc = T_POSIX_MEMALIGN(&p, (SIZE_MAX / 2 + 1) + v_zero, 1);
    CHECKF(rc == ENOMEM || rc == EINVAL, "posix_memalign(2^63, 1) = %d", rc);
  }
  printf("ok posix_memalign, aligned_alloc, memalign (alignments 8 B..1 MiB)\n");
}

/* Aligned requests again and again, so that most come from blocks freed just before (the
 * aligned fast path, which pops the current superblock of the class it picks, as malloc
 * does): each aligned, its usable size covered, no two live ones overlapping, errno left
 * alone by posix_memalign. Plain mallocs of the same sizes in between fill the classes the
 * aligned ones skip, so a class picked without regard to the alignment would show. */
static void test_aligned_reuse(void) {
  enum { N = 96 };
  static void *b[N], *plain[N];
  static const size_t sizes[] = {1, 24, 48, 100, 130, 200, 250, 320, 700, 1000, 1100, 1500,
                                 2100, 3000, 5000, 7000, 9000, 20000, 40000, 65536};
  for (size_t a = 16; a <= 16384; a *= 2) {
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      size_t s = sizes[k] + v_zero;
      for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) {
          plain[i] = T_MALLOC(s + (size_t)i % 40);
          CHECK(plain[i] != NULL);
          errno = 4242;
          int rc = T_POSIX_MEMALIGN(&b[i], a, s);
          CHECKF(rc == 0 && errno == 4242, "posix_memalign(%zu, %zu) = %d, errno %d", a, s, rc,
                 errno);
          CHECKF((uintptr_t)b[i] % a == 0, "posix_memalign(%zu, %zu) = %p: misaligned", a, s,
                 b[i]);
          CHECK(T_USABLE_SIZE(b[i]) >= s);
          th_fill(b[i], s, (uint64_t)i * 131 + s + a, 1);
        }
        for (int i = 0; i < N; i++) {
          CHECKF(th_verify(b[i], s, (uint64_t)i * 131 + s + a, 1) == TH_OK,
                 "posix_memalign(%zu, %zu): blocks overlap", a, s);
          /* free in an order that leaves both free and used blocks in each superblock */
          if (i % 3 != round) {
            T_FREE(b[i]);
            b[i] = NULL;
          }
          T_FREE(plain[i]);
        }
        for (int i = 0; i < N; i++) {
          void *p = (i & 1) ? T_ALIGNED_ALLOC(a, s) : T_MEMALIGN(a, s);
          CHECKF(p != NULL && (uintptr_t)p % a == 0, "aligned_alloc/memalign(%zu, %zu) = %p", a,
                 s, p);
          CHECK(T_USABLE_SIZE(p) >= s);
          T_FREE(p);
          T_FREE(b[i]);
        }
      }
    }
  }
  /* every size up to a little past 1 KiB at every alignment up to 2 KiB: the fast path's
   * table of slots (internal.h, _trove_aligned_slot) has an entry for each up to 1 KiB */
  for (size_t a = 1; a <= 2048; a *= 2) {
    for (size_t s = 0; s <= 1100; s++) {
      void *keep = T_ALIGNED_ALLOC(a, s + v_zero);
      void *p = T_ALIGNED_ALLOC(a, s + v_zero);
      T_FREE(p);                                   /* the next one may take it back */
      void *q = T_ALIGNED_ALLOC(a, s + v_zero);
      void *r = NULL;
      int rc = a >= sizeof(void *) ? T_POSIX_MEMALIGN(&r, a, s + v_zero) : 0;
      CHECKF(keep != NULL && (uintptr_t)keep % a == 0, "aligned_alloc(%zu, %zu) = %p", a, s, keep);
      CHECKF(q != NULL && (uintptr_t)q % a == 0, "aligned_alloc(%zu, %zu) = %p", a, s, q);
      CHECKF(rc == 0 && (uintptr_t)r % a == 0, "posix_memalign(%zu, %zu) = %d, %p", a, s, rc, r);
      CHECK(T_USABLE_SIZE(keep) >= s && T_USABLE_SIZE(q) >= s);
      CHECK(r == NULL || T_USABLE_SIZE(r) >= s);
      CHECK(q != keep && r != keep && r != q);
      T_FREE(keep);
      T_FREE(q);
      T_FREE(r);
    }
  }
  /* Alignments past a page on medium sizes: the thread's cache of freed runs serves them only
   * with a run that starts aligned (heap.c, medium_cache_take), among runs of plain mallocs
   * freed beside them that start anywhere. */
  {
    enum { RING = 8 };
    void *al[RING] = {0}, *pl[RING] = {0};
    size_t als[RING] = {0};
    for (int round = 0; round < 400; round++) {
      int k = round % RING;
      if (al[k]) {
        CHECKF(th_verify(al[k], als[k], (uint64_t)round, 1) == TH_OK,
               "an aligned medium block lost its contents (round %d)", round);
        T_FREE(al[k]);
      }
      T_FREE(pl[k]);
      pl[k] = T_MALLOC(66000 + (size_t)(round % 13) * 4096 + v_zero);
      CHECK(pl[k] != NULL);
      memset(pl[k], 0x5c, 66000);
      size_t a = (size_t)16384 << (round % 5), sz = 100 + (size_t)round * 7919 % (200 * 1024);
      CHECKF(T_POSIX_MEMALIGN(&al[k], a, sz) == 0 && (uintptr_t)al[k] % a == 0,
             "posix_memalign(%zu, %zu) = %p", a, sz, al[k]);
      CHECK(T_USABLE_SIZE(al[k]) >= sz);
      als[k] = sz;
      th_fill(al[k], sz, (uint64_t)round + RING, 1);
    }
    for (int k = 0; k < RING; k++) {
      T_FREE(al[k]);
      T_FREE(pl[k]);
    }
  }
  printf("ok aligned requests served from freed blocks (alignments 16 B..256 KiB)\n");
}

static void test_valloc(void) {
  for (size_t k = 0; k < N_EDGE; k++) {
    size_t s = edge_sizes[k];
    void *p = T_VALLOC(s);
    check_block(p, s, page_size, "valloc");
    T_FREE(p);
    p = T_PVALLOC(s);
    size_t rounded = (s + page_size - 1) / page_size * page_size;
    check_block(p, rounded, page_size, "pvalloc");
    T_FREE(p);
  }
  static const size_t huge[] = {SIZE_MAX, SIZE_MAX - 100, SIZE_MAX - 4096, SIZE_MAX / 2 + 1};
  for (size_t k = 0; k < sizeof huge / sizeof huge[0]; k++) {
    errno = 0;
    void *p = T_VALLOC(huge[k] + v_zero);
    CHECKF(p == NULL && errno == ENOMEM, "valloc(%zu): expected NULL, ENOMEM", huge[k]);
    errno = 0;
    p = T_PVALLOC(huge[k] + v_zero); /* rounding up to a page overflows */
    CHECKF(p == NULL && errno == ENOMEM, "pvalloc(%zu) = %p: expected NULL, ENOMEM", huge[k], p);
  }
  printf("ok valloc, pvalloc\n");
}

static int cmp_ptr(const void *a, const void *b) {
  uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
  return x < y ? -1 : x > y;
}

/* Cache colour (superblock.c): a thread that allocates and frees blocks of ten classes in
 * turn reuses one block of each, the first a fresh superblock hands out. Those must not all
 * share an L1 set (address bits 6-11; 8 ways on common x86), as they did when that was
 * block 0, at the start of a page. Run first, while the superblocks are fresh. */
static void test_cache_colour(void) {
  static const size_t sizes[16] = {16, 32, 48, 64, 80, 96, 112, 128, 24, 40, 56, 72, 8, 100, 200, 256};
  unsigned per_set[64] = {0};
  uintptr_t seen[16];
  size_t nseen = 0;
  for (int round = 0; round < 2; round++)
    for (int i = 0; i < 16; i++) {
      char *p = T_MALLOC(sizes[i]);
      CHECK(p != NULL);
      p[0] = 1;
      uintptr_t line = (uintptr_t)p >> 6;
      int dup = 0;
      for (size_t k = 0; k < nseen; k++) dup |= seen[k] == line;
      if (!dup && nseen < 16) {
        seen[nseen++] = line;
        per_set[line & 63]++;
      }
      T_FREE(p);
    }
  unsigned most = 0;
  for (int s = 0; s < 64; s++) most = per_set[s] > most ? per_set[s] : most;
  CHECK(nseen >= 10);
  CHECK(most <= 8);
}

static void test_edges(void) {
  /* malloc(0): a unique pointer each time, freeable */
  enum { N = 1000 };
  static void *z[N];
  for (int i = 0; i < N; i++) {
    z[i] = T_MALLOC(v_zero);
    CHECK(z[i] != NULL);
  }
  qsort(z, N, sizeof z[0], cmp_ptr);
  for (int i = 1; i < N; i++) CHECKF(z[i] != z[i - 1], "malloc(0) returned %p twice", z[i]);
  for (int i = 0; i < N; i++) T_FREE(z[i]);
  T_FREE(NULL);
  CHECK(T_USABLE_SIZE(NULL) == 0);
  /* impossible sizes */
  static const size_t huge[] = {SIZE_MAX,     SIZE_MAX - 1,      SIZE_MAX - 4096,
                                SIZE_MAX - TH_MIB, SIZE_MAX / 2 + 1, PTRDIFF_MAX,
                                (size_t)1 << 60,   (size_t)1 << 50};
  for (size_t k = 0; k < sizeof huge / sizeof huge[0]; k++) {
    errno = 0;
    void *p = T_MALLOC(huge[k] + v_zero);
    CHECKF(p == NULL && errno == ENOMEM, "malloc(%zu) = %p errno %d: expected NULL, ENOMEM",
           huge[k], p, errno);
  }
  /* a successful call after a failed one works normally */
  void *p = T_MALLOC(100);
  check_block(p, 100, 16, "malloc");
  T_FREE(p);
  printf("ok malloc(0), free(NULL), malloc(SIZE_MAX)\n");
}

/* Large buffers of changing sizes: a freed mapping is taken by a request of another size and
 * resized (its tail given back, grown in place, or its pages moved). Every live buffer keeps its
 * contents, calloc reads zeros also where a reused mapping was dirty or grew, and the usable
 * size covers the request. */
static void test_large_reuse(void) {
  enum { LIVE = 6, ROUNDS = 240 };
  unsigned char *b[LIVE] = {0};
  size_t n[LIVE] = {0};
  uint64_t r = 0x2545f4914f6cdd1du;
  for (int round = 0; round < ROUNDS; round++) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    int k = (int)(r % LIVE);
    size_t size = TH_MIB + 1 + (size_t)((r >> 8) % (8 * TH_MIB));
    if (b[k]) {
      for (size_t i = 0; i < n[k]; i += 4093)   /* every page's sample, and the last byte */
        CHECKF(b[k][i] == pat(i + (size_t)k), "large buffer of %zu lost contents at %zu", n[k], i);
      CHECK(b[k][n[k] - 1] == pat(n[k] - 1 + (size_t)k));
      T_FREE(b[k]);
    }
    int zero = round & 1;
    b[k] = (unsigned char *)(zero ? T_CALLOC(1, size) : T_MALLOC(size));
    CHECKF(b[k] != NULL, "%s(%zu) returned NULL", zero ? "calloc" : "malloc", size);
    CHECK((uintptr_t)b[k] % 16 == 0);
    CHECKF(T_USABLE_SIZE(b[k]) >= size, "usable size %zu < %zu", T_USABLE_SIZE(b[k]), size);
    if (zero)
      for (size_t i = 0; i < size; i += 509)
        CHECKF(b[k][i] == 0, "calloc(%zu) of a reused mapping: byte %zu is %u", size, i, b[k][i]);
    n[k] = size;
    for (size_t i = 0; i < size; i += 4093) b[k][i] = pat(i + (size_t)k);
    b[k][size - 1] = pat(size - 1 + (size_t)k);
  }
  for (int k = 0; k < LIVE; k++) T_FREE(b[k]);
  printf("ok large buffers of changing sizes (reused mappings resized)\n");
}

/* Aligned large blocks reuse cached mappings too (large.c, cache_take): each is aligned and
 * keeps its contents, and a calloc that takes a mapping an aligned block dirtied reads zeros. */
static void test_large_aligned_reuse(void) {
  th_collect();
  unsigned char *b[4] = {0};
  size_t aligns[] = {2 * TH_MIB, TH_MIB, 64 * TH_KIB, 1 * TH_MIB + 0};
  for (int round = 0; round < 40; round++) {
    int k = round % 4;
    if (b[k]) {
      CHECKF(b[k][0] == (unsigned char)(round - 4) && b[k][TH_MIB] == (unsigned char)(round - 4),
             "aligned large block lost its contents (round %d)", round);
      T_FREE(b[k]);
    }
    size_t align = aligns[(size_t)round % 4 == 3 ? 3 : (size_t)k], size = TH_MIB + 4096 + (size_t)round * 40000;
    void *p = NULL;
    CHECK(T_POSIX_MEMALIGN(&p, align, size) == 0 && p != NULL);
    CHECKF((uintptr_t)p % align == 0, "posix_memalign(%zu, %zu) = %p", align, size, p);
    CHECK(T_USABLE_SIZE(p) >= size);
    b[k] = (unsigned char *)p;
    memset(b[k], (unsigned char)round, size);
  }
  for (int k = 0; k < 4; k++) T_FREE(b[k]);
  unsigned char *z = (unsigned char *)T_CALLOC(1, 3 * TH_MIB);
  CHECK(z != NULL);
  size_t bad = 0;
  for (size_t i = 0; i < 3 * TH_MIB; i += 509) bad += z[i] != 0;
  CHECKF(bad == 0, "calloc after aligned large blocks: %zu sampled bytes not zero", bad);
  T_FREE(z);
  printf("ok aligned large blocks reuse cached mappings\n");
}

/* A large block shrunk by realloc gives its tail's pages back but keeps the address space
 * (large.c, reserve_for); a calloc that takes the freed mapping and grows into that tail
 * again must read zeros there, not the bytes the tail held before. */
static void test_large_shrunk_tail(void) {
  th_collect();                            /* an empty cache: the calloc takes this mapping */
  size_t big = 8 * TH_MIB, small = 2 * TH_MIB, again = 7 * TH_MIB;
  unsigned char *p = (unsigned char *)T_MALLOC(big);
  CHECK(p != NULL);
  memset(p, 0xab, big);
  unsigned char *q = (unsigned char *)T_REALLOC(p, small);
  CHECK(q != NULL);
  for (size_t i = 0; i < small; i += 4093) CHECK(q[i] == 0xab);
  T_FREE(q);
  unsigned char *z = (unsigned char *)T_CALLOC(1, again);
  CHECK(z != NULL);
  size_t bad = 0;
  for (size_t i = 0; i < again; i += 509) bad += z[i] != 0;
  CHECKF(bad == 0, "calloc(%zu) after a shrunk mapping: %zu sampled bytes not zero", again, bad);
  T_FREE(z);
  printf("ok calloc over a large block's shrunk tail reads zeros\n");
}

/* A thread whose first calls are aligned medium requests and medium callocs sets up its
 * heap there (heap.c, _trove_malloc_medium), so the runs it frees wait in its cache for its
 * next calls; without a heap they went straight to the page heap. */
static void *medium_first_thread(void *arg) {
  size_t *cached = (size_t *)arg;
  trove_stats_t st0, st1;
  th_stats(&st0);
  void *p[4];
  for (int i = 0; i < 4; i++) {
    if (i & 1) {
      p[i] = T_CALLOC(1, 100 * TH_KIB);
    } else {
      p[i] = NULL;
      CHECK(T_POSIX_MEMALIGN(&p[i], 64 * TH_KIB, 64 * TH_KIB) == 0);
      CHECK((uintptr_t)p[i] % (64 * TH_KIB) == 0);
    }
    CHECK(p[i] != NULL);
  }
  for (int i = 0; i < 4; i++) T_FREE(p[i]);
  th_stats(&st1);
  *cached = st1.medium_cached_bytes > st0.medium_cached_bytes
                ? st1.medium_cached_bytes - st0.medium_cached_bytes : 0;
  return NULL;
}
static void test_medium_first_calls(void) {
  pthread_t t;
  size_t cached = 0;
  CHECK(pthread_create(&t, NULL, medium_first_thread, &cached) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  CHECKF(cached >= 64 * TH_KIB,
         "a thread that began with medium callocs and aligned requests cached %zu bytes", cached);
  printf("ok a thread's first medium calloc or aligned request sets up its heap\n");
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
/* trove's pthread key (init.c, heap.c). A program that uses a pthread_key_t it never created
 * (a zeroed static: key 0) must find key 0 as glibc alone leaves it, unused: NULL to read,
 * EINVAL to write, not trove's heap. And a thread whose program overwrote trove's key with
 * something else must still hand its heap back at exit (glibc passes the destructor the
 * overwritten value; this crashed). (The sanitizers' runtimes create keys of their own.) */
enum { KEYS_LOOKED = 32 };
static void *key_clobber_thread(void *arg) {
  int *found = arg;
  void *before[KEYS_LOOKED];
  for (int k = 0; k < KEYS_LOOKED; k++) before[k] = pthread_getspecific((pthread_key_t)k);
  void *p = T_MALLOC(100);                /* sets up this thread's heap, and trove's key */
  CHECK(p != NULL);
  T_FREE(p);
  *found = -1;
  for (int k = 0; k < KEYS_LOOKED; k++)
    if (before[k] == NULL && pthread_getspecific((pthread_key_t)k) != NULL) *found = k;
  if (*found >= 0) pthread_setspecific((pthread_key_t)*found, (void *)1);
  for (int i = 0; i < 1000; i++) T_FREE(T_MALLOC((size_t)(16 + i * 40)));
  return NULL;
}

static void test_thread_key(void) {
  void *p = T_MALLOC(64);                 /* trove initialized and this thread's heap set */
  CHECK(p != NULL);
  CHECKF(pthread_getspecific((pthread_key_t)0) == NULL,
         "key 0, never created by this program, reads %p", pthread_getspecific((pthread_key_t)0));
  CHECKF(pthread_setspecific((pthread_key_t)0, (void *)1) == EINVAL,
         "a write to key 0, never created by this program, was accepted");
  T_FREE(p);
  trove_stats_t st;
  th_stats(&st);
  size_t threads = st.threads;
  for (int r = 0; r < 3; r++) {
    pthread_t t;
    int found = -2;
    CHECK(pthread_create(&t, NULL, key_clobber_thread, &found) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECKF(found > 0, "trove's key not found among keys 1..%d (%d)", KEYS_LOOKED - 1, found);
    th_stats(&st);
    CHECKF(st.threads == threads, "%zu thread heaps live after the thread exited, %zu before",
           st.threads, threads);
  }
  printf("ok trove's pthread key: not key 0, and an overwritten value does not matter\n");
}
#endif

/* A program that moves between small blocks and medium buffers in phases (a build step of
 * many small nodes, then one of large buffers, and again) must reuse the pages the last phase
 * freed: the medium runs a thread caches go to the page heap when its superblocks need fresh
 * pages, and the empty superblocks the pool keeps carved when a medium run does. Before,
 * a phase took fresh pages while the other's sat there: 32 MiB of 64-byte blocks, then of
 * 100 KB buffers, in turn, in a new thread: 44 MiB held from the OS after the first phase,
 * 76 after the second (the pool's empty superblocks), or after the fifth (the thread's
 * cached runs) with the pool's half fixed alone; now 48-52 after every phase. */
/* One phase: n blocks of sz bytes built (a line of each written) and freed; what trove held
 * from the OS at its height. */
static size_t phase_held(void **p, size_t n, size_t sz) {
  for (size_t i = 0; i < n; i++) {
    p[i] = T_MALLOC(sz);
    CHECK(p[i] != NULL);
    memset(p[i], 1, 64);
  }
  trove_stats_t st;
  th_stats(&st);
  for (size_t i = 0; i < n; i++) T_FREE(p[i]);
  return st.held;
}

static void *phase_shift_thread(void *arg) {
  (void)arg;
  enum { MB = 32, ROUNDS = 6 };
  static const size_t sz[2] = {64, 100000};
  static void *p[(MB << 20) / 64];
  size_t first = 0;
  for (int r = 0; r < ROUNDS; r++) {
    size_t held = phase_held(p, ((size_t)MB << 20) / sz[r & 1], sz[r & 1]);
    if (r == 0) first = held;
    else if (th_policy_default(NULL))   /* (a larger K, for one, keeps more between phases) */
      CHECKF(held <= first + ((size_t)MB << 20) / 2,
             "phase %d (%zu-byte blocks) held %zu KiB from the OS, the first %zu", r, sz[r & 1],
             held >> 10, first >> 10);
  }
  return NULL;
}

static void test_phase_shift(void) {
  pthread_t t;
  CHECK(pthread_create(&t, NULL, phase_shift_thread, NULL) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  printf("ok phases of small blocks and medium buffers in turn reuse each other's pages\n");
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
/* Two threads take turns, three times: one builds and frees 64 MiB of 100 KB buffers, then
 * waits while the other builds and frees 64 MiB of 64-byte blocks. From the second turn on,
 * the waiting thread's medium cache kept its whole burst until a sweep (1/8 of the purge
 * delay or more) while the other took fresh pages beside it: the third small phase held
 * 127-148 MiB from the OS against the first buffer phase's 78-86 (now 94). Fresh pages now
 * give the other threads' caches back past their fixed part (heap.c, give_back_others).
 * Not under the sanitizers: their 2-3x slower calls change the timing it depends on (once, in
 * a CI run beside the other sanitizer tests, 106.8 MiB against a bound of 106). */
enum { TURN_MB = 64 };
static pthread_barrier_t turn_bar;
static size_t turn_first;
static void *turn_thread(void *arg) {
  long id = (long)arg;
  size_t sz = id == 0 ? 100000 : 64, n = ((size_t)TURN_MB << 20) / sz;
  void **p = (void **)T_MALLOC(n * sizeof *p);
  CHECK(p != NULL);
  for (int turn = 0; turn < 6; turn++) {
    if (turn % 2 == id) {
      size_t held = phase_held(p, n, sz);
      if (turn == 0) turn_first = held;
      if (id == 1 && th_policy_default(NULL))
        CHECKF(held <= turn_first + ((size_t)TURN_MB << 20) / 2,
               "the second thread's phase held %zu KiB from the OS, the first's %zu",
               held >> 10, turn_first >> 10);
    }
    pthread_barrier_wait(&turn_bar);
  }
  T_FREE(p);
  return NULL;
}

static void test_phase_turns(void) {
  th_collect();                            /* no free pages left by the tests before */
  pthread_t t[2];
  CHECK(pthread_barrier_init(&turn_bar, NULL, 2) == 0);
  for (long i = 0; i < 2; i++) CHECK(pthread_create(&t[i], NULL, turn_thread, (void *)i) == 0);
  for (int i = 0; i < 2; i++) CHECK(pthread_join(t[i], NULL) == 0);
  pthread_barrier_destroy(&turn_bar);
  th_collect();                            /* nor any for the tests after */
  printf("ok a thread's small blocks reuse the buffers another thread freed and waits beside\n");
}
#endif

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
/* Small blocks freed, then large buffers (mappings of their own, which cannot reuse the
 * small blocks' pages): the pages those left go back as the buffers are faulted in
 * (_trove_heap_yield), so RSS stays near one phase's worth. Before, the recent-peak rule
 * kept them through the next phase: 64 MiB of 64-byte blocks, then 32 buffers of 2 MiB,
 * rose by 64 MiB (now 14-18). (The sanitizers' shadow memory would count here too.) */
static void test_small_then_large(void) {
  enum { MB = 64 };
  static void *p[(MB << 20) / 64];
  size_t n = ((size_t)MB << 20) / 64;
  for (size_t i = 0; i < n; i++) {
    p[i] = T_MALLOC(64);
    CHECK(p[i] != NULL);
    memset(p[i], 1, 64);
  }
  size_t rss1 = th_rss_bytes();
  for (size_t i = 0; i < n; i++) T_FREE(p[i]);
  enum { BUFS = MB / 2 };
  void *b[BUFS];
  for (int i = 0; i < BUFS; i++) {
    b[i] = T_MALLOC((size_t)2 << 20);
    CHECK(b[i] != NULL);
    memset(b[i], 2, (size_t)2 << 20);
  }
  size_t rss2 = th_rss_bytes();
  for (int i = 0; i < BUFS; i++) T_FREE(b[i]);
  /* (with a K of many MiB the freed superblocks are the thread's to keep) */
  CHECKF(rss1 > 0 && (rss2 <= rss1 + ((size_t)MB << 20) / 2 || !th_policy_default(NULL)),
         "RSS %zu KiB with the small blocks, %zu KiB with the large buffers after them",
         rss1 >> 10, rss2 >> 10);
  printf("ok large buffers after small blocks: RSS %zu -> %zu KiB\n", rss1 >> 10, rss2 >> 10);
}
#endif

/* A written mapping of `big` bytes is freed (the cache emptied first) and taken by a request
 * of `start` bytes, which realloc then grows in `step` steps up to `end`, writing each step's
 * last byte: returns the block (contents checked), with the page faults the growth took. */
static unsigned char *grow_in_reused_mapping(size_t big, size_t start, size_t step, size_t end,
                                             long *faults) {
  th_collect();                            /* an empty cache: the next malloc takes this one */
  unsigned char *p = (unsigned char *)T_MALLOC(big);
  CHECK(p != NULL);
  memset(p, 0x11, big);
  T_FREE(p);
  unsigned char *q = (unsigned char *)T_MALLOC(start);
  CHECK(q != NULL);
  for (size_t i = 0; i < start; i += 4093) q[i] = pat(i);
  struct rusage r0, r1;
  getrusage(RUSAGE_SELF, &r0);
  size_t last = start;
  for (size_t s = start + step; s <= end; s += step) {
    q = (unsigned char *)T_REALLOC(q, s);
    CHECK(q != NULL);
    q[s - 1] = 0x33;
    last = s;
  }
  getrusage(RUSAGE_SELF, &r1);
  for (size_t i = 0; i < start; i += 4093) CHECKF(q[i] == pat(i), "lost contents at %zu", i);
  CHECK(q[start + step - 1] == 0x33 && q[last - 1] == 0x33);
  *faults = r1.ru_minflt - r0.ru_minflt;
  return q;
}

/* A large block that took a longer cached mapping keeps the mapping's tail (large.c), and a
 * realloc that grows it within that tail gives nothing back first: grown page by page to
 * near the mapping's length, it faults no page in (it faulted ~750 when each growth was
 * taken for a shrink). Contents survive. */
static void test_large_grow_in_kept_tail(void) {
  long faults;
  unsigned char *q =
      grow_in_reused_mapping(4 * TH_MIB, TH_MIB + 4096, 4096, 4 * TH_MIB - 8192, &faults);
#ifndef TROVE_TEST_SANITIZE
  /* (with no large-block cache the tail is not kept) */
  if (th_policy_default(NULL))
    CHECKF(faults < 64, "growing a large block within its mapping faulted %ld pages in", faults);
#else
  (void)faults;
#endif
  T_FREE(q);
  printf("ok a large block grows by realloc into the tail its mapping kept\n");
}

/* A freed 24 MiB mapping taken by a 1 MiB request is cut in two (large.c, split_tail): the
 * request keeps the first 4 MiB, the rest waits in the cache. A realloc that grows the block
 * past its 4 MiB takes that rest back (absorb_next) instead of moving to fresh pages beside
 * it: grown to 20 MiB it faults no page in (256 when it moved, one a step written) and keeps
 * its contents; and a calloc that takes the mapping once it is freed reads zeros over both
 * parts. */
static void test_large_grow_over_split_tail(void) {
  const size_t big = 24 * TH_MIB;
  long faults;
  unsigned char *q = grow_in_reused_mapping(big, TH_MIB + 4096, 64 * TH_KIB, 20 * TH_MIB, &faults);
#ifndef TROVE_TEST_SANITIZE
  if (th_policy_default(NULL))
    CHECKF(faults < 64, "growing a large block over its mapping's split tail faulted %ld pages in",
           faults);
#else
  (void)faults;
#endif
  T_FREE(q);
  unsigned char *z = (unsigned char *)T_CALLOC(1, big + 4 * TH_MIB);
  CHECK(z != NULL);
  size_t bad = 0;
  for (size_t i = 0; i < big + 4 * TH_MIB; i += 509) bad += z[i] != 0;
  CHECKF(bad == 0, "calloc over a grown block's mapping: %zu sampled bytes not zero", bad);
  T_FREE(z);
  printf("ok a large block grows by realloc over the tail split off its mapping (%ld faults)\n",
         faults);
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
/* RSS `from` -> `to` bytes over the free of `what`, which should have stayed resident. */
static void check_stayed(size_t from, size_t to, const char *what) {
#ifndef TROVE_TEST_SANITIZE
  if (th_policy_default(NULL) && from > 0)
    CHECKF(to + 64 * TH_MIB > from, "RSS %zu -> %zu KiB: %s went at once", from >> 10, to >> 10,
           what);
#else
  (void)from, (void)to, (void)what;
#endif
}

/* A freed large block larger than the cache's whole resident budget (64 MiB here) that the
 * latest large request, larger and live, replaced (a vector grown by doubling) gives its pages
 * back at once (large.c, _trove_large_free), instead of staying resident for the purge delay
 * while the program fills the larger one. A block of that size freed with no larger request
 * after it (a scratch buffer beside other live ones, a buffer reused in a loop) stays. */
static void test_large_superseded_purged(void) {
  const size_t a_size = 80 * TH_MIB, b_size = 100 * TH_MIB;
  th_collect();
  unsigned char *a = (unsigned char *)T_MALLOC(a_size);
  unsigned char *b = (unsigned char *)T_MALLOC(b_size);
  CHECK(a != NULL && b != NULL);
  memset(a, 1, a_size);
  memset(b, 2, b_size);
  size_t before = th_rss_bytes();
  T_FREE(a);
  size_t after = th_rss_bytes();
#ifndef TROVE_TEST_SANITIZE
  if (th_policy_default(NULL) && before > 0)
    CHECKF(after + 64 * TH_MIB < before,
           "RSS %zu -> %zu KiB: an 80 MiB buffer freed beside a live 100 MiB one stayed resident",
           before >> 10, after >> 10);
#endif
  /* a scratch buffer beside b, freed: no larger request came after it */
  unsigned char *c = (unsigned char *)T_MALLOC(a_size);
  CHECK(c != NULL);
  memset(c, 3, a_size);
  size_t with_c = th_rss_bytes();
  T_FREE(c);
  size_t scratch = th_rss_bytes();
  check_stayed(with_c, scratch, "a scratch buffer");
  T_FREE(b);
  size_t kept = th_rss_bytes();
  check_stayed(scratch, kept, "the last large buffer");
  th_collect();
  printf("ok a large buffer superseded by a larger one gives its pages back (RSS %zu -> %zu KiB;"
         " scratch %zu -> %zu, last %zu KiB)\n", before >> 10, after >> 10, with_c >> 10,
         scratch >> 10, kept >> 10);
}
#endif

/* A large block shrunk by realloc to a medium size stays where it is (alloc.c,
 * shrinks_in_place), holding no more than twice its size or 1 MiB past it, and grows back in
 * its mapping; one shrunk far below its size moves. Contents survive every step. */
static void test_large_shrink_to_medium(void) {
  const size_t big = 10 * TH_MIB, mid = TH_MIB, far = 300 * TH_KIB;
  unsigned char *p = (unsigned char *)T_MALLOC(big);
  CHECK(p != NULL);
  for (size_t i = 0; i < big; i += 4093) p[i] = pat(i);
  for (int round = 0; round < 4; round++) {
    unsigned char *q = (unsigned char *)T_REALLOC(p, mid);
    CHECKF(q == p, "realloc(%zu -> %zu) moved the block (round %d)", big, mid, round);
    CHECKF(T_USABLE_SIZE(q) >= mid && T_USABLE_SIZE(q) <= mid + TH_MIB,
           "realloc to %zu kept %zu usable bytes", mid, T_USABLE_SIZE(q));
    for (size_t i = 0; i < mid; i += 4093) CHECK(q[i] == pat(i));
    p = (unsigned char *)T_REALLOC(q, big);
    CHECK(p != NULL);
    for (size_t i = 0; i < mid; i += 4093) CHECK(p[i] == pat(i));
    for (size_t i = mid - mid % 4093 + 4093; i < big; i += 4093) p[i] = pat(i);
  }
  /* 2 MiB -> 300 KiB: in place, its tail of over 1 MiB given back */
  unsigned char *r = (unsigned char *)T_REALLOC(p, 2 * TH_MIB);
  CHECK(r != NULL);
  unsigned char *s2 = (unsigned char *)T_REALLOC(r, far);
  CHECKF(s2 == r, "realloc(%zu -> %zu) moved the block", 2 * TH_MIB, far);
  CHECKF(T_USABLE_SIZE(s2) >= far && T_USABLE_SIZE(s2) < far + 8 * TH_KIB,
         "realloc to %zu in place kept %zu usable bytes", far, T_USABLE_SIZE(s2));
  for (size_t i = 0; i < far; i += 4093) CHECK(s2[i] == pat(i));
  /* 1.1 MiB -> 300 KiB: a tail under 1 MiB and more than half of it: moved, not kept */
  r = (unsigned char *)T_REALLOC(s2, TH_MIB + 100 * TH_KIB);
  CHECK(r != NULL);
  for (size_t i = 0; i < far; i += 4093) CHECK(r[i] == pat(i));
  s2 = (unsigned char *)T_REALLOC(r, far);
  CHECK(s2 != NULL);
  CHECKF(T_USABLE_SIZE(s2) < 2 * far, "realloc to %zu kept %zu usable bytes", far,
         T_USABLE_SIZE(s2));
  for (size_t i = 0; i < far; i += 4093) CHECK(s2[i] == pat(i));
  T_FREE(s2);
  printf("ok large blocks shrunk to a medium size stay in place and grow back\n");
}

/* A calloc above 4 MiB that takes a cached mapping: where the block before it was used
 * sparsely (most of its pages never written), those pages are dropped instead of cleared
 * (large.c, zero_by_purge), so the calloc makes no more resident than a fresh mapping
 * would; where it was written whole they are cleared; part written, dropped. Every byte
 * reads 0 in each case, the ones written before included. */
static void check_zero_sampled(const unsigned char *p, size_t n, const char *what) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i += 509) bad += p[i] != 0;
  bad += p[n - 1] != 0;
  CHECKF(bad == 0, "calloc(%zu) %s: %zu sampled bytes not zero", n, what, bad);
}
static void test_large_calloc_reuse(void) {
  const size_t size = 32 * TH_MIB;
  th_collect();                            /* an empty cache: the second calloc takes the first's */
  unsigned char *p = (unsigned char *)T_CALLOC(1, size);
  CHECK(p != NULL);
  for (size_t i = 0; i < size; i += size / 16) CHECK(p[i] == 0);
  for (size_t i = 5000; i < size; i += 4 * TH_MIB) p[i] = 0xcd;
  T_FREE(p);
  size_t rss0 = th_rss_bytes();
  unsigned char *q = (unsigned char *)T_CALLOC(1, size);
  size_t rss1 = th_rss_bytes();
  CHECK(q != NULL);
  for (size_t i = 5000; i < size; i += 4 * TH_MIB)
    CHECKF(q[i] == 0, "calloc(%zu) over a sparsely used mapping: byte %zu is %u", size, i, q[i]);
  check_zero_sampled(q, size, "over a sparsely used mapping");
#ifndef TROVE_TEST_SANITIZE
  CHECKF(rss1 < rss0 + 8 * TH_MIB,
         "calloc(%zu) over a sparsely used mapping made %zu KiB resident", size,
         (rss1 - rss0) / 1024);
#else
  (void)rss0;
  (void)rss1;
#endif
  memset(q, 0x77, size);                   /* written whole: the next calloc clears it */
  T_FREE(q);
  unsigned char *z = (unsigned char *)T_CALLOC(1, size);
  CHECK(z != NULL);
  check_zero_sampled(z, size, "over a mapping written whole");
  memset(z, 0x33, size / 2 + size / 8);    /* 5/8 written: the next calloc drops its pages */
  T_FREE(z);
  z = (unsigned char *)T_CALLOC(1, size);
  CHECK(z != NULL);
  check_zero_sampled(z, size, "over a mapping written in part");
  T_FREE(z);
  printf("ok calloc above 4 MiB over reused mappings (sparse, whole, in part)\n");
}

/* More segments in one arena than the page heap's first slot tables hold (64; they grow by
 * doubling), from one thread: 240 medium blocks of 640-976 KiB (3-6 to a 4 MiB segment),
 * every other one freed, then 360 of 1 MiB, which fit none of those holes and take ~120 new
 * segments, the tables growing twice while the holes wait in the bins. The freed blocks
 * allocated again must go into their holes (the bins still find them), not into new
 * segments (a few may: the thread's medium cache keeps some freed runs and lends them to
 * other lengths; 0-4 new segments in 12 runs, 26 when growing the tables lost the bins' bits);
 * and every block keeps its contents. */
static void put_marks(unsigned char *p, size_t n, size_t i) {
  p[0] = pat(i);
  p[n / 2] = pat(i + 1);
  p[n - 1] = pat(i + 2);
}
static void check_marks(const unsigned char *p, size_t n, size_t i) {
  CHECKF(p[0] == pat(i) && p[n / 2] == pat(i + 1) && p[n - 1] == pat(i + 2),
         "medium block #%zu of %zu bytes lost its contents", i, n);
}
static void test_many_segments(void) {
  enum { A = 240, B = 360, N = A + B };
  static unsigned char *b[N];
  static size_t n[N];
  trove_stats_t st0, st1, st2;
  th_stats(&st0);
  for (size_t i = 0; i < N; i++) {
    if (i == A)
      for (size_t j = 1; j < A; j += 2) {
        check_marks(b[j], n[j], j);
        T_FREE(b[j]);
      }
    n[i] = i < A ? 640 * TH_KIB + (i % 7) * 56 * TH_KIB : TH_MIB;
    b[i] = (unsigned char *)T_MALLOC(n[i]);
    CHECKF(b[i] != NULL, "malloc(%zu) #%zu returned NULL", n[i], i);
    put_marks(b[i], n[i], i);
  }
  th_stats(&st1);
  CHECKF(st1.segments >= st0.segments + 140, "%d blocks of 640 KiB - 1 MiB in %zu segments",
         N - A / 2, st1.segments - st0.segments);
  for (size_t j = 1; j < A; j += 2) {
    b[j] = (unsigned char *)T_MALLOC(n[j]);
    CHECKF(b[j] != NULL, "malloc(%zu) #%zu returned NULL", n[j], j);
    put_marks(b[j], n[j], j);
  }
  th_stats(&st2);
  CHECKF(st2.segments <= st1.segments + 12,
         "%d blocks allocated again into their own holes grew %zu segments to %zu", A / 2,
         st1.segments, st2.segments);
  for (size_t i = 0; i < N; i++) {
    check_marks(b[i], n[i], i);
    T_FREE(b[i]);
  }
  printf("ok %zu segments in one arena, holes found again (+%zu)\n", st1.segments - st0.segments, st2.segments - st1.segments);
}

static void test_trim(void) {
  int r = T_MALLOC_TRIM(0);
  CHECK(r == 0 || r == 1);
  /* 64 MiB of medium blocks, touched then freed: malloc_trim(0) gives it back */
  enum { N = 256 };
  static void *b[N];
  trove_stats_t st0, st1;
  th_stats(&st0);
  size_t rss0 = th_rss_bytes();
  for (int i = 0; i < N; i++) {
    b[i] = T_MALLOC(256 * TH_KIB);
    CHECK(b[i] != NULL);
    memset(b[i], 0x5A, 256 * TH_KIB);
  }
  for (int i = 0; i < N; i++) T_FREE(b[i]);
  r = T_MALLOC_TRIM(0);
  CHECK(r == 0 || r == 1);
  th_stats(&st1);
  size_t rss1 = th_rss_bytes();
  CHECKF(st1.resident <= st0.resident + 16 * TH_MIB,
         "after malloc_trim(0) trove still holds %zu KiB resident (before: %zu KiB)",
         st1.resident / 1024, st0.resident / 1024);
#ifndef TROVE_TEST_SANITIZE
  CHECKF(rss1 <= rss0 + 16 * TH_MIB, "after malloc_trim(0) RSS is %zu KiB (before: %zu KiB)",
         rss1 / 1024, rss0 / 1024);
#else
  (void)rss0;
  (void)rss1;
#endif
  printf("ok malloc_trim\n");
}

/* glibc's statistics entry points (mallinfo2, malloc_info) answer from trove's counters. */
#ifdef TROVE_TEST_API
#define T_MALLOC_INFO trove_malloc_info
#else
#define T_MALLOC_INFO malloc_info
#endif
static size_t xml_size(const char *xml, const char *after, const char *tag) {
  const char *p = strstr(xml, after);
  CHECKF(p != NULL, "malloc_info: no %s in\n%s", after, xml);
  p = strstr(p, tag);
  CHECKF(p != NULL, "malloc_info: no %s after %s in\n%s", tag, after, xml);
  return (size_t)strtoull(p + strlen(tag), NULL, 10);
}

#ifndef TROVE_TEST_API
/* C23's sized frees, which trove defines with the standard names (override.c). Declared weak
 * here: glibc 2.36's headers and library do not have them, and the preload build resolves
 * them in libtrove.so at run time. */
extern void free_sized(void *p, size_t size) __attribute__((weak));
extern void free_aligned_sized(void *p, size_t align, size_t size) __attribute__((weak));

/* Each frees its block (in use back where it was), whatever the size class, and takes NULL. */
static void test_free_sized(void) {
  CHECKF(free_sized != NULL && free_aligned_sized != NULL,
         "free_sized / free_aligned_sized do not resolve into trove");
  free_sized(NULL, 0);
  free_sized(NULL, 100);
  free_aligned_sized(NULL, 64, 0);
  static const size_t sizes[] = {1, 16, 24, 100, 1024, 4097, 40000, 300000, 2u << 20, 9u << 20};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t n = sizes[k], before = in_use_now();
    unsigned char *p = T_MALLOC(n);
    CHECK(p != NULL);
    memset(p, 0x5a, n);
    CHECKF(in_use_now() > before, "malloc(%zu) not counted in use", n);
    free_sized(p, n);
    CHECKF(in_use_now() == before, "free_sized(p, %zu) did not free the block", n);
  }
  static const size_t aligns[] = {16, 64, 256, 4096, 65536, 1u << 21};
  for (size_t k = 0; k < sizeof aligns / sizeof aligns[0]; k++)
    for (size_t m = 1; m <= 3; m++) {
      size_t al = aligns[k], n = al * m, before = in_use_now();
      unsigned char *p = T_ALIGNED_ALLOC(al, n);
      CHECK(p != NULL);
      CHECKF((uintptr_t)p % al == 0, "aligned_alloc(%zu, %zu) = %p", al, n, (void *)p);
      p[0] = p[n - 1] = 1;
      free_aligned_sized(p, al, n);
      CHECKF(in_use_now() == before, "free_aligned_sized(p, %zu, %zu) did not free the block",
             al, n);
    }
  printf("ok free_sized, free_aligned_sized (C23)\n");
}
#endif

static void test_glibc_stats(void) {
  void *big = T_MALLOC(8 * TH_MIB), *small = T_MALLOC(100);
  CHECK(big != NULL && small != NULL);
  FILE *f = tmpfile();
  CHECK(f != NULL);
  fputs("x", f);                  /* stdio's buffer is allocated now, not during the checks */
  rewind(f);
  trove_stats_t st0, st1;
  th_stats(&st0);
  th_stats(&st0);
  CHECK(T_MALLOC_INFO(0, f) == 0);
  th_stats(&st1);
  long n = ftell(f);
  CHECK(n > 0 && n < 65536);
  static char xml[65536];
  rewind(f);
  CHECK(fread(xml, 1, (size_t)n, f) == (size_t)n);
  xml[n] = 0;
  CHECKF(strncmp(xml, "<malloc version=\"1\">", 20) == 0 && strstr(xml, "</malloc>") != NULL,
         "malloc_info: not glibc's XML shape:\n%s", xml);
  CHECK(st0.large_objects >= 1 && st0.large_objects == st1.large_objects);
  CHECK(xml_size(xml, "</heap>", "<total type=\"mmap\" count=\"") == st0.large_objects);
  CHECK(xml_size(xml, "<total type=\"mmap\"", " size=\"") == st0.large_bytes);
  if (st0.held == st1.held)     /* nothing mapped meanwhile */
    CHECK(xml_size(xml, "</heap>", "<system type=\"current\" size=\"") == st0.held);
  errno = 0;
  CHECK(T_MALLOC_INFO(1, f) == -1 && errno == EINVAL);
  fclose(f);
#ifndef TROVE_TEST_API
  th_stats(&st0);
  struct mallinfo2 mi = mallinfo2();
  CHECK(mi.hblks == st0.large_objects && mi.hblkhd == st0.large_bytes);
  CHECK(mi.uordblks >= 8 * TH_MIB + 100 && mi.arena + mi.hblkhd >= mi.uordblks);
  CHECK(mi.usmblks >= mi.arena);
#endif
  T_FREE(big);
  T_FREE(small);
  printf("ok malloc_info and mallinfo2 from trove's counters\n");
}

/* What the process is charged for in the system's commit count (Committed_AS): the mappings
 * smaps flags "ac" (VM_ACCOUNT). Run first, before any thread's stack is mapped. trove's
 * segment map (32 MiB of .bss) was charged whole: a process that had made one malloc call
 * counted 33 MiB where glibc counts 0.4. Not under strict overcommit, where trove leaves the
 * charge as the loader made it (os.c), nor under a sanitizer (its own mappings). */
static void test_commit_charge(void) {
#ifndef TROVE_TEST_SANITIZE
  char mode = '0';
  FILE *m = fopen("/proc/sys/vm/overcommit_memory", "r");
  if (m) {
    if (fscanf(m, " %c", &mode) != 1) mode = '0';
    fclose(m);
  }
  FILE *f = fopen("/proc/self/smaps", "r");
  if (f == NULL || mode == '2') {
    if (f) fclose(f);
    printf("skip commit charge (no smaps or strict overcommit)\n");
    return;
  }
  void *p = T_MALLOC(100);
  CHECK(p != NULL);
  char line[512];
  size_t size_kb = 0, charged_kb = 0;
  while (fgets(line, sizeof line, f)) {
    size_t kb;
    if (sscanf(line, "Size: %zu kB", &kb) == 1) size_kb = kb;
    else if (strncmp(line, "VmFlags:", 8) == 0 && strstr(line, " ac")) charged_kb += size_kb;
  }
  fclose(f);
  T_FREE(p);
  CHECKF(charged_kb < 16 * 1024, "mappings charged to the commit count: %zu KiB", charged_kb);
  printf("ok commit charge: %zu KiB\n", charged_kb);
#endif
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  page_size = (size_t)sysconf(_SC_PAGESIZE);
  test_cache_colour();
  th_check_trove_in_use();
  test_commit_charge();
  static size_t sizes[4200];
  size_t nsizes = sweep_sizes(sizes);
  test_edges();
  test_malloc_sweep(sizes, nsizes);
  test_usable_waste();
#if !defined(TROVE_TEST_API) && !defined(TROVE_TEST_PRELOAD)
  test_class_tables();
#endif
  test_calloc(sizes, nsizes);
  test_realloc(sizes, nsizes);
  test_realloc_medium_appends();
  test_realloc_medium_shrink();
  test_reallocarray();
  test_aligned();
  test_aligned_reuse();
  test_valloc();
  test_large_reuse();
  test_large_shrunk_tail();
  test_large_aligned_reuse();
  test_large_calloc_reuse();
  test_large_shrink_to_medium();
  test_large_grow_in_kept_tail();
  test_large_grow_over_split_tail();
  test_medium_first_calls();
  test_phase_shift();
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  test_small_then_large();
  test_large_superseded_purged();
#endif
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  test_thread_key();
#endif
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  test_phase_turns();
#endif
  test_many_segments();
  test_trim();
#ifndef TROVE_TEST_API
  test_free_sized();
#endif
  test_glibc_stats();
  printf("test_api (%s): all checks passed\n", T_MODE);
  return 0;
}
