/* Sequences of allocator calls read from bytes, each result checked against a model of what
 * the program holds: the differential half of a fuzzer, without the fuzzing engine.
 *
 *   test_ops [inputs=1500] [seed=1] [length=600]
 *
 * An input is a byte string; each step takes an operation and its operands from it (a size
 * drawn from ranges around trove's class steps and its small/medium and medium/large
 * boundaries, an alignment, a slot) and applies it to one of 48 slots: malloc, calloc,
 * realloc (to any size, by small steps, to 0, from NULL), posix_memalign / aligned_alloc /
 * memalign with good and bad alignments, valloc and pvalloc, free, a write of the whole usable
 * size, frees and mallocs by a short-lived second thread (remote frees, blocks outliving their
 * thread), overflowing calloc, reallocarray and malloc, trove_collect and malloc_trim, bursts
 * in one class freed out of order, fork (the child frees what it inherited and allocates in
 * two threads), the statistics and reports (in use at least the live blocks), and with
 * TROVE_ON_MISUSE=warn double frees and frees of interior and foreign pointers (each must be
 * reported and change nothing else).
 * After each call the model checks what C, POSIX and glibc promise: non-NULL below 64 MiB,
 * alignment, usable size at least the request, no overlap with any live block, calloc's
 * zeroes, realloc keeping the prefix, errno and the pointer left alone on EINVAL, ENOMEM on
 * overflow. Each live block carries a pattern (sampled: its first and last 128 bytes and a
 * byte per 4 KiB) that is checked before it is freed, reallocated or handed to the other
 * thread, so a block handed out twice or written by trove shows up.
 * The main program feeds seeded pseudo-random inputs (deterministic: it cannot flake); built
 * with -DTROVE_LIBFUZZER the same interpreter is libFuzzer's target, for coverage-guided runs
 * by hand (scripts/fuzz.sh). The heap persists from one input to the next, as a program's
 * does; the slots are freed at the end of each input. */
#include "testhelper.h"

#include <pthread.h>
#include <stdbool.h>

#define SLOTS 48
#define BIG ((size_t)64 << 20) /* below this, NULL is a failure (the machine has the memory) */

typedef struct {
  unsigned char *p;
  size_t size;  /* bytes the pattern covers: the request, or the usable size once written */
  uint64_t seed;
} slot_t;

static slot_t slots[SLOTS];
static uint64_t serial;

typedef struct {
  const uint8_t *d;
  size_t n, i;
} in_t;

static unsigned get8(in_t *in) { return in->i < in->n ? in->d[in->i++] : 0; }
static unsigned get16(in_t *in) {
  unsigned lo = get8(in);
  return lo | get8(in) << 8;
}

/* A size near a boundary: 64 KiB (small/medium), 1 MiB (medium/large), 4 MiB (a segment),
 * or a page multiple. */
static size_t edge_size(unsigned v, int delta) {
  static const size_t edges[] = {(size_t)64 << 10, (size_t)1 << 20, (size_t)4 << 20, 8192,
                                 4096, 16384, 32768, (size_t)128 << 10};
  size_t s = edges[v % (sizeof edges / sizeof edges[0])];
  return (size_t)((ptrdiff_t)s + delta);
}

/* Sizes around the places where trove's paths change: every class step up to 64 KiB (small),
 * medium runs to 1 MiB, large mappings above; rare sizes of tens of MiB. */
static size_t get_size(in_t *in) {
  unsigned k = get8(in) % 64, v = get16(in);
  int delta = (int)(int8_t)(v >> 8);
  switch (k >> 3) {
  case 0: return v % 65;                                  /* 0..64 B */
  case 1: case 2: return v % 1025;                        /* up to 1 KiB: direct[] slots */
  case 3: return 1024 + v % (63 * 1024 + 1);              /* 1-64 KiB: the mid table */
  case 4: {                                               /* a power of two, +-128 B */
    size_t s = (size_t)1 << (4 + v % 21);                 /* 16 B .. 16 MiB */
    return (size_t)((ptrdiff_t)s + delta) > 0 ? (size_t)((ptrdiff_t)s + delta) : 0;
  }
  case 5: return edge_size(v, delta);
  case 6: return ((size_t)64 << 10) + (size_t)v * 15;     /* medium: 64 KiB .. ~1 MiB */
  default:
    if (k == 63) return ((size_t)8 << 20) + (size_t)v * 768;   /* 8-56 MiB, rare */
    return ((size_t)1 << 20) + (size_t)v * 64;            /* large: 1-5 MiB */
  }
}

static size_t get_align(in_t *in) {
  unsigned v = get8(in);
  if (v % 16 == 15) return (size_t)(v / 16) * 24 + 24;   /* not a power of two */
  return (size_t)1 << (v % 23);                          /* 1 B .. 4 MiB */
}

/* ---- the pattern ---- */
static unsigned char pat(uint64_t seed, size_t off) {
  return (unsigned char)th_mix64(seed ^ (off * 0x9E3779B97F4A7C15ull));
}

/* Runs `body` with `off` at each sampled offset below n: the first and last 128 bytes and
 * one per 4 KiB (per 64 KiB past 1 MiB, so that a 50 MiB block is not all faulted in). */
#define FOR_SAMPLES(n, off, body)                                                           \
  do {                                                                                      \
    size_t n_ = (n), step_ = n_ > ((size_t)1 << 20) ? (size_t)64 << 10 : 4096;              \
    for (size_t off = 0; off < n_ && off < 128; off++) body;                                \
    for (size_t off = 128; off + 128 < n_; off += step_) body;                              \
    for (size_t off = n_ > 256 ? n_ - 128 : 128; off < n_; off++) body;                     \
  } while (0)

static void fill(slot_t *s) {
  s->seed = th_mix64(++serial);
  FOR_SAMPLES(s->size, off, s->p[off] = pat(s->seed, off));
}

/* The pattern's bytes below n (the ones fill wrote: the samples of the block's size). */
static void check_prefix(const slot_t *s, size_t n, const char *when) {
  FOR_SAMPLES(s->size, off,
              CHECKF(off >= n || s->p[off] == pat(s->seed, off),
                     "%s: block %p (%zu B) byte %zu changed", when, (void *)s->p, s->size, off));
}

/* A block just handed out: not NULL (below BIG), aligned, usable at least `size`, and
 * overlapping no live block. */
static void check_new(void *p, size_t size, size_t align, const char *what) {
  CHECKF(p != NULL || size >= BIG, "%s(%zu) returned NULL", what, size);
  if (p == NULL) return;
  size_t a = align > 16 ? align : (size >= 16 ? 16 : 8);
  CHECKF((uintptr_t)p % a == 0, "%s(%zu, align %zu) = %p misaligned", what, size, align, p);
  CHECKF(T_USABLE_SIZE(p) >= size, "%s(%zu): usable %zu", what, size, T_USABLE_SIZE(p));
  uintptr_t lo = (uintptr_t)p, hi = lo + (size ? size : 1);
  for (int i = 0; i < SLOTS; i++) {
    const slot_t *s = &slots[i];
    if (s->p == NULL) continue;
    uintptr_t slo = (uintptr_t)s->p, shi = slo + (s->size ? s->size : 1);
    CHECKF(hi <= slo || shi <= lo, "%s(%zu) = %p overlaps the live block %p (%zu B)", what,
           size, p, (void *)s->p, s->size);
  }
}

static void put(slot_t *s, void *p, size_t size) {
  s->p = p;
  s->size = size;
  if (p) fill(s);
}

static void drop(slot_t *s) {
  if (s->p == NULL) return;
  check_prefix(s, s->size, "before free");
  T_FREE(s->p);
  s->p = NULL;
}

/* ---- the second thread: frees some slots, or allocates into them, then exits ---- */
typedef struct {
  slot_t *take[SLOTS];
  int ntake;
  size_t sizes[4];
  void *made[4];
} job_t;

static void *job_main(void *arg) {
  job_t *j = arg;
  for (int i = 0; i < j->ntake; i++) T_FREE(j->take[i]->p);
  for (int i = 0; i < 4; i++) j->made[i] = j->sizes[i] ? T_MALLOC(j->sizes[i]) : NULL;
  return NULL;
}

static void other_thread(in_t *in) {
  job_t j = {0};
  unsigned mask = get16(in) | get16(in) << 16;
  for (int i = 0; i < SLOTS && i < 32; i++)
    if ((mask >> i & 1) && slots[i].p) {
      check_prefix(&slots[i], slots[i].size, "before a remote free");
      j.take[j.ntake++] = &slots[i];
    }
  unsigned n = get8(in) % 5;
  for (unsigned i = 0; i < n; i++) j.sizes[i] = get_size(in) % (4 << 20) + 1;
  pthread_t t;
  CHECK(pthread_create(&t, NULL, job_main, &j) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  for (int i = 0; i < j.ntake; i++) j.take[i]->p = NULL;
  for (unsigned i = 0; i < n; i++) {
    slot_t *s = &slots[(get8(in) + i) % SLOTS];
    drop(s);
    check_new(j.made[i], j.sizes[i], 0, "malloc in another thread");
    put(s, j.made[i], j.sizes[i]);
  }
}

/* Misuse under TROVE_ON_MISUSE=warn (misuse_warn): a double free right after the free, or a
 * free of an interior or foreign pointer, is reported and changes nothing else: the model's
 * blocks keep their patterns and no block is handed out twice. The reports go to /dev/null
 * meanwhile, and so would a sanitizer's or a crash's: a run that fails silently is run again
 * with OPS_LOUD=1 set, which keeps stderr. */
static bool misuse_warn;
static size_t misuses;
static void misuse(slot_t *s, unsigned how) {
  misuses++;
  static int null_fd = -1;
  if (null_fd < 0) null_fd = getenv("OPS_LOUD") ? 2 : open("/dev/null", O_WRONLY);
  if (s->p) check_prefix(s, s->size, "before a misuse");
  fflush(stderr);
  int saved = dup(2);
  CHECK(null_fd >= 0 && saved >= 0 && dup2(null_fd, 2) == 2);
  char local[32];
  if (how % 3 == 0 && s->p) {              /* double free */
    unsigned char *p = s->p;
    T_FREE(p);
    s->p = NULL;
    T_FREE(p);
  } else if (how % 3 == 1 && s->p && s->size > 16) {   /* interior pointer: the block stays */
    T_FREE(s->p + 16 + (how / 3) % (s->size - 16));
  } else {                                 /* never handed out */
    T_FREE(how & 8 ? (void *)local : (void *)&serial);
  }
  fflush(stderr);
  CHECK(dup2(saved, 2) == 2);
  close(saved);
}

/* trove_collect, which a preloaded test reaches through dlsym */
static void collect(void) {
#ifdef TROVE_TEST_PRELOAD
  static void (*fn)(void);
  if (fn == NULL) fn = (void (*)(void))dlsym(RTLD_DEFAULT, "trove_collect");
  CHECK(fn != NULL);
  fn();
#else
  trove_collect();
#endif
}

/* A fork: the child checks and frees the blocks it inherited, mallocs, reallocs and frees in
 * two threads, and exits 0; it must not hang (alarm) or fail. The parent's blocks stay. */
static void *child_thread(void *arg) {
  (void)arg;
  for (int i = 0; i < 64; i++) {
    void *p = T_MALLOC((size_t)(i * 997) % 70000);
    CHECK(p != NULL);
    T_FREE(p);
  }
  return NULL;
}

static size_t forks;
static void fork_child(in_t *in) {
  forks++;
  size_t size = get_size(in) % (2 << 20);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    signal(SIGALRM, SIG_DFL);              /* a hang kills the child (libFuzzer has a handler) */
    alarm(60);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, child_thread, NULL) == 0);
    for (int i = 0; i < SLOTS; i++)
      if (slots[i].p && (i & 1)) drop(&slots[i]);
    void *p = T_MALLOC(size);
    check_new(p, size, 0, "malloc after fork");
    p = T_REALLOC(p, size * 2 + 1);
    CHECK(p != NULL);
    T_FREE(p);
    CHECK(pthread_join(t, NULL) == 0);
    for (int i = 0; i < SLOTS; i++) drop(&slots[i]);
    _exit(0);
  }
  int status;
  pid_t got;
  while ((got = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }                                        /* libFuzzer's timer interrupts the wait */
  CHECK(got == pid);
  CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child of fork() failed: status 0x%x",
         status);
}

/* The statistics against the model: bytes in use at least the live blocks' (other blocks of
 * the process, remote frees not yet collected and class rounding only add to it), held at
 * least in use, no class with more live blocks than it has room for; and the other reports
 * write without failing. Not under preload (trove's own names would need dlsym). */
static void stats_check(unsigned how) {
#ifndef TROVE_TEST_PRELOAD
  static trove_stats_t st;
  trove_stats_get(&st);
  size_t live = 0;
  for (int i = 0; i < SLOTS; i++)
    if (slots[i].p) live += slots[i].size;
  CHECKF(st.in_use >= live, "stats: in use %zu < the live blocks' %zu", st.in_use, live);
  CHECKF(st.held >= st.in_use, "stats: held %zu < in use %zu", st.held, st.in_use);
  for (int c = 0; c < TROVE_STATS_CLASSES && st.classes[c].block_size; c++)
    CHECKF(st.classes[c].blocks_in_use <= st.classes[c].blocks_capacity,
           "stats: class %zu B: %zu live in %zu", st.classes[c].block_size,
           st.classes[c].blocks_in_use, st.classes[c].blocks_capacity);
  if (how % 8 == 0) {
    FILE *f = fopen("/dev/null", "w");
    CHECK(f != NULL);
    CHECK(trove_malloc_info(0, f) == 0);
    trove_stats_print(f);
    fclose(f);
    CHECK(trove_heap_map_write("/dev/null") == 0);
  }
#else
  (void)how;
#endif
}

/* ---- one input ---- */
static void run(const uint8_t *data, size_t len) {
  static int env = -1;
  if (env < 0) {
    const char *m = getenv("TROVE_ON_MISUSE");
    env = m != NULL && (strcasecmp(m, "warn") == 0 || strcmp(m, "1") == 0);
    misuse_warn = env;
  }
  in_t in = {data, len, 0};
  while (in.i < in.n) {
    unsigned op = get8(&in) % 22;
    slot_t *s = &slots[get8(&in) % SLOTS];
    switch (op) {
    case 0: case 1: case 2: {
      size_t size = get_size(&in);
      drop(s);
      void *p = T_MALLOC(size);
      check_new(p, size, 0, "malloc");
      put(s, p, size);
      break;
    }
    case 3: {
      size_t size = get_size(&in) % (16 << 20), n = 1 + get8(&in) % 8, each = size / n;
      drop(s);
      unsigned char *p = T_CALLOC(n, each);
      check_new(p, n * each, 0, "calloc");
      FOR_SAMPLES(n * each, off, CHECKF(p[off] == 0, "calloc(%zu, %zu): byte %zu = %d", n,
                                       each, off, p[off]));
      put(s, p, n * each);
      break;
    }
    case 4: case 5: case 17: {             /* 17: by a step, as a buffer grows or shrinks */
      size_t size = get_size(&in);
      if (op == 17 && s->p) {
        size_t step = 1 + get16(&in) % 16384;
        size = (size & 1) || s->size <= step ? s->size + step : s->size - step;
      }
      if (s->p == NULL) {
        void *p = T_REALLOC(NULL, size);
        check_new(p, size, 0, "realloc(NULL)");
        put(s, p, size);
        break;
      }
      check_prefix(s, s->size, "before realloc");
      if (size == 0) {                     /* glibc: frees, returns NULL */
        CHECK(T_REALLOC(s->p, 0) == NULL);
        s->p = NULL;
        break;
      }
      unsigned char *old = s->p;
      s->p = NULL;                         /* out of the overlap check: it may stay in place */
      unsigned char *p = T_REALLOC(old, size);
      if (p == NULL) {
        CHECK(size >= BIG);
        s->p = old;
        break;
      }
      check_new(p, size, 0, "realloc");
      s->p = p;
      check_prefix(s, size, "after realloc");
      put(s, p, size);
      break;
    }
    case 6: case 7: {                      /* posix_memalign, aligned_alloc, memalign */
      size_t align = get_align(&in), size = get_size(&in) % (8 << 20);
      unsigned how = get8(&in) % 3;
      drop(s);
      bool pow2 = (align & (align - 1)) == 0;
      void *p = NULL;
      if (how == 0) {
        void *keep = (void *)&serial;
        p = keep;
        errno = 0;
        int rc = T_POSIX_MEMALIGN(&p, align, size);
        if (!pow2 || align < sizeof(void *)) {
          CHECKF(rc == EINVAL && p == keep && errno == 0, "posix_memalign(%zu, %zu): %d", align,
                 size, rc);
          break;
        }
        CHECKF(rc == 0 && errno == 0, "posix_memalign(%zu, %zu): %d, errno %d", align, size, rc,
               errno);
      } else if (how == 1) {
        errno = 0;
        p = T_ALIGNED_ALLOC(align, size);
        if (!pow2) {
          CHECKF(p == NULL && errno == EINVAL, "aligned_alloc(%zu, %zu)", align, size);
          break;
        }
      } else {
        p = T_MEMALIGN(align, size);
        if (!pow2) {                       /* glibc rounds the alignment up */
          size_t a = 1;
          while (a < align) a <<= 1;
          align = a;
        }
      }
      check_new(p, size, align,
                how == 0 ? "posix_memalign" : how == 1 ? "aligned_alloc" : "memalign");
      put(s, p, size);
      break;
    }
    case 8: case 9: case 10:
      drop(s);
      break;
    case 11:                               /* the whole usable size is the program's */
      if (s->p) {
        check_prefix(s, s->size, "before writing the usable size");
        s->size = T_USABLE_SIZE(s->p);
        fill(s);
      }
      break;
    case 12: case 13:
      other_thread(&in);
      break;
    case 14: {                             /* overflow: NULL and ENOMEM, nothing else moves */
      volatile size_t big = (size_t)1 << 32;   /* opaque: no compile-time overflow warning */
      size_t n = big + get8(&in), m = big + get8(&in);
      errno = 0;
      CHECK(T_CALLOC(n, m) == NULL && errno == ENOMEM);
      if (s->p) {
        errno = 0;
        CHECK(T_REALLOCARRAY(s->p, n, m) == NULL && errno == ENOMEM);
        check_prefix(s, s->size, "after a failed reallocarray");
      }
      errno = 0;
      volatile size_t most = SIZE_MAX;
      CHECK(T_MALLOC(most - get8(&in)) == NULL && errno == ENOMEM);
      break;
    }
    case 15: {
      size_t size = get_size(&in) % (4 << 20);
      bool pv = get8(&in) & 1;
      drop(s);
      void *p = pv ? T_PVALLOC(size) : T_VALLOC(size);
      size_t page = (size_t)sysconf(_SC_PAGESIZE);
      size_t want = pv ? (size + page - 1) / page * page : size;
      check_new(p, want ? want : (pv ? page : 0), page, pv ? "pvalloc" : "valloc");
      put(s, p, want);
      break;
    }
    case 18:
      if (misuse_warn) misuse(s, get8(&in));
      break;
    case 19:
      if (get8(&in) % 4 == 0) fork_child(&in);
      else stats_check(get8(&in));
      break;
    case 16:
      if (get8(&in) % 4 == 0) collect();
      else T_MALLOC_TRIM(0);
      break;
    default: {                             /* a short burst in one class, freed in turn */
      size_t size = get_size(&in) % (256 << 10);
      unsigned n = 1 + get8(&in) % 64;
      void *b[64];
      for (unsigned i = 0; i < n; i++) {
        b[i] = T_MALLOC(size);
        check_new(b[i], size, 0, "malloc in a burst");
        if (size) ((unsigned char *)b[i])[size - 1] = (unsigned char)i;
      }
      for (unsigned i = 0; i < n; i++) {
        unsigned k = (i * 7 + 3) % n;      /* not in allocation order */
        if (b[k] == NULL) continue;
        CHECK(size == 0 || ((unsigned char *)b[k])[size - 1] == (unsigned char)k);
        T_FREE(b[k]);
        b[k] = NULL;
      }
      for (unsigned i = 0; i < n; i++)
        if (b[i]) T_FREE(b[i]);
      break;
    }
    }
  }
  for (int i = 0; i < SLOTS; i++) drop(&slots[i]);
}

#ifdef TROVE_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len) {
  run(data, len);
  return 0;
}
#else
int main(int argc, char **argv) {
  size_t inputs = argc > 1 ? strtoul(argv[1], NULL, 0) : 1500;
  uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 0) : 1;
  size_t length = argc > 3 ? strtoul(argv[3], NULL, 0) : 600;
  th_check_trove_in_use();
  th_rng_t r;
  th_rng_seed(&r, seed);
  uint8_t *buf = T_MALLOC(length);
  CHECK(buf != NULL);
  for (size_t k = 0; k < inputs; k++) {
    size_t n = 1 + th_below(&r, length);
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)th_rand(&r);
    run(buf, n);
  }
  T_FREE(buf);
  printf("test_ops (%s): %zu inputs of up to %zu bytes, seed %llu, %zu forks, %zu misuses: ok\n",
         T_MODE, inputs, length, (unsigned long long)seed, forks, misuses);
  return 0;
}
#endif
