/* bench_util.h: what the trove benchmark programs share.
 *
 * Timing, a per-thread xorshift RNG, argument parsing with the common flags, RSS from
 * /proc/self/statm, a latency histogram with percentiles, block stamping/verification and the
 * RESULT line printer. Every program is one translation unit that includes this header first;
 * everything here is static inline so unused parts cost nothing.
 *
 * The benchmarks call plain malloc/free, so that they run under any allocator through
 * LD_PRELOAD. The benchmarks' own bookkeeping (pointer arrays, histograms) comes from mmap
 * (bu_map), so that it does not disturb the heap being measured.
 *
 * Output: one line per result on stdout, exactly
 *   RESULT benchmark=<name> threads=<t> metric=<metric> value=<number> unit=<unit>
 * Errors go to stderr and end the program with a non-zero status:
 *   1 usage or system error, 3 malloc returned NULL, 4 a block's contents were corrupted.
 */
#ifndef TROVE_BENCH_UTIL_H
#define TROVE_BENCH_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define BU_HAVE_TSC 1
#else
#define BU_HAVE_TSC 0
#endif

#define BU_CACHELINE 64
#define BU_ALIGNED __attribute__((aligned(BU_CACHELINE)))
#define BU_NOINLINE __attribute__((noinline))
#define BU_LIKELY(x) __builtin_expect(!!(x), 1)
#define BU_UNLIKELY(x) __builtin_expect(!!(x), 0)

static const char *bu_prog = "bench";

/* ------------------------------------------------------------------ errors */

__attribute__((format(printf, 1, 2), noreturn)) static inline void bu_die(const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "%s: error: ", bu_prog);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(1);
}

/* malloc returned NULL: exit 3. Written without stdio (the heap may be in a bad state). */
BU_NOINLINE static void bu_oom(size_t size) {
  char msg[160];
  int n = snprintf(msg, sizeof msg, "%s: error: malloc(%zu) returned NULL\n", bu_prog, size);
  if (n > 0) {
    ssize_t w = write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
    (void)w;
  }
  _exit(3);
}

/* malloc + check. The benchmarks call this (or malloc and bu_need) for every block. */
static inline void *bu_malloc(size_t size) {
  void *p = malloc(size);
  if (BU_UNLIKELY(p == NULL)) bu_oom(size);
  return p;
}

static inline void bu_need(const void *p, size_t size) {
  if (BU_UNLIKELY(p == NULL)) bu_oom(size);
}

/* ------------------------------------------------------------------ bookkeeping memory */

/* Zeroed memory straight from the OS, for the benchmark's own tables. */
static inline void *bu_map(size_t size) {
  if (size == 0) size = 1;
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) bu_die("mmap(%zu): %s", size, strerror(errno));
  return p;
}

static inline void bu_unmap(void *p, size_t size) {
  if (p) munmap(p, size ? size : 1);
}

/* Touch every page of a bu_map'ed table, so that it is part of a baseline RSS. */
static inline void bu_prefault(void *p, size_t size) {
  volatile char *c = (volatile char *)p;
  for (size_t off = 0; off < size; off += 4096) c[off] = 0;
}

/* ------------------------------------------------------------------ time */

static inline double bu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline uint64_t bu_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void bu_sleep(double seconds) {
  if (seconds <= 0) return;
  struct timespec ts;
  ts.tv_sec = (time_t)seconds;
  ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Sleep until an absolute CLOCK_MONOTONIC time given in seconds (bu_now's clock). */
static inline void bu_sleep_until(double when) {
  struct timespec ts;
  ts.tv_sec = (time_t)when;
  ts.tv_nsec = (long)((when - (double)ts.tv_sec) * 1e9);
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

/* Cheap timestamps for the latency samples: the TSC on x86 (fenced so that the timed call
 * cannot move across it), converted to ns with a factor calibrated against CLOCK_MONOTONIC;
 * clock_gettime elsewhere. */
static double bu_ns_per_tick = 1.0;
static double bu_timer_overhead_ns = 0.0;

static inline uint64_t bu_ticks(void) {
#if BU_HAVE_TSC
  _mm_lfence();
  uint64_t t = __rdtsc();
  _mm_lfence();
  return t;
#else
  return bu_now_ns();
#endif
}

static inline void bu_ticks_calibrate(void) {
#if BU_HAVE_TSC
  uint64_t n0 = bu_now_ns(), t0 = bu_ticks();
  uint64_t n1, t1;
  do {
    n1 = bu_now_ns();
    t1 = bu_ticks();
  } while (n1 - n0 < 20000000ull); /* 20 ms */
  if (t1 > t0) bu_ns_per_tick = (double)(n1 - n0) / (double)(t1 - t0);
#endif
  uint64_t best = UINT64_MAX;
  for (int i = 0; i < 1000; i++) {
    uint64_t a = bu_ticks(), b = bu_ticks();
    if (b - a < best) best = b - a;
  }
  bu_timer_overhead_ns = (double)best * bu_ns_per_tick;
}

static inline uint64_t bu_ticks_to_ns(uint64_t ticks) {
  return (uint64_t)((double)ticks * bu_ns_per_tick + 0.5);
}

/* ------------------------------------------------------------------ RNG */

/* xorshift64*, one per thread (never shared), seeded through splitmix64. */
typedef struct {
  uint64_t s;
} bu_rng;

static inline uint64_t bu_splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static inline void bu_rng_init(bu_rng *r, uint64_t seed, uint64_t stream) {
  uint64_t x = seed ^ (stream * 0xD1B54A32D192ED03ull) ^ 0x5DEECE66Dull;
  r->s = bu_splitmix64(&x);
  if (r->s == 0) r->s = 0x2545F4914F6CDD1Dull;
}

static inline uint64_t bu_rand(bu_rng *r) {
  uint64_t x = r->s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  r->s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

__extension__ typedef unsigned __int128 bu_u128;

/* Uniform in [0, n) (multiply-shift; n > 0). */
static inline uint64_t bu_rand_below(bu_rng *r, uint64_t n) {
  return (uint64_t)(((bu_u128)bu_rand(r) * n) >> 64);
}

/* Uniform in [lo, hi]. */
static inline uint64_t bu_rand_range(bu_rng *r, uint64_t lo, uint64_t hi) {
  return lo + bu_rand_below(r, hi - lo + 1);
}

/* Log-uniform in [lo, hi]: a power-of-two band first, uniform inside it, so that each
 * doubling of size is about as likely as the next (many size classes, mostly small bytes). */
static inline uint64_t bu_rand_logsize(bu_rng *r, uint64_t lo, uint64_t hi) {
  unsigned blo = 63u - (unsigned)__builtin_clzll(lo), bhi = 63u - (unsigned)__builtin_clzll(hi);
  unsigned b = blo + (unsigned)bu_rand_below(r, bhi - blo + 1);
  uint64_t a = (uint64_t)1 << b, z = (b >= 63) ? UINT64_MAX : ((uint64_t)1 << (b + 1)) - 1;
  if (a < lo) a = lo;
  if (z > hi) z = hi;
  return bu_rand_range(r, a, z);
}

/* ------------------------------------------------------------------ RSS */

/* Resident set size of this process in KiB, from /proc/self/statm; no allocation. */
static inline long bu_rss_kib(void) {
  char buf[256];
  int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  char *end;
  (void)strtol(buf, &end, 10);         /* size */
  long resident = strtol(end, NULL, 10); /* resident */
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Peak RSS of this process so far in KiB: VmHWM from /proc/self/status, the high-water mark
 * of this program's own address space. (getrusage's ru_maxrss is not used: Linux carries it
 * over fork and exec, so a program started from a big parent, e.g. Python, would report the
 * parent's RSS.) Falls back to ru_maxrss where /proc is missing. No allocation. */
static inline long bu_peak_rss_kib(void) {
  char buf[4096];
  int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n > 0) {
      buf[n] = 0;
      const char *p = strstr(buf, "VmHWM:");
      if (p) return strtol(p + 6, NULL, 10);
    }
  }
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
  return ru.ru_maxrss;
}

/* ------------------------------------------------------------------ blocks */

/* Every block a benchmark allocates is stamped: its first word holds its size mixed with its
 * address, one byte per 64-byte line and its last byte are written too. Before freeing, the
 * program checks the stamp: a block whose memory another allocation overwrote (an allocator
 * bug) ends the run with status 4 instead of a silently wrong number. Blocks must be at least
 * 8 bytes. bu_stamp writes about size/64 + 2 bytes, the work a program does when it
 * initialises a header and touches its object. */
#define BU_STAMP_MAGIC 0x7EB0C0FFEE5EED11ull

static inline uint64_t bu_stamp_word(const void *p, size_t size) {
  return (uint64_t)size ^ ((uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull) ^ BU_STAMP_MAGIC;
}

static inline void bu_stamp(void *p, size_t size) {
  unsigned char *c = (unsigned char *)p;
  uint64_t w = bu_stamp_word(p, size);
  for (size_t off = 64; off < size; off += 64) c[off] = (unsigned char)(off >> 6);
  memcpy(c, &w, 8);
  if (size > 8) c[size - 1] = (unsigned char)(w >> 8);
}

/* A lighter stamp for big blocks: the same first word and last byte (bu_check works), but
 * only one byte per 4 KiB page in between (every page is touched, as a program that uses the
 * block would, without the run time being all stores). */
static inline void bu_stamp_pages(void *p, size_t size) {
  unsigned char *c = (unsigned char *)p;
  uint64_t w = bu_stamp_word(p, size);
  for (size_t off = 4096; off < size; off += 4096) c[off] = (unsigned char)(off >> 12);
  memcpy(c, &w, 8);
  if (size > 8) c[size - 1] = (unsigned char)(w >> 8);
}

/* The lightest stamp: the first word and the last byte only (bu_check works), for a loop
 * that times the allocator's path on big blocks rather than the writes. */
static inline void bu_stamp_ends(void *p, size_t size) {
  unsigned char *c = (unsigned char *)p;
  uint64_t w = bu_stamp_word(p, size);
  memcpy(c, &w, 8);
  if (size > 8) c[size - 1] = (unsigned char)(w >> 8);
}

BU_NOINLINE static void bu_corrupt(const void *p, size_t size, const char *where) {
  fprintf(stderr, "%s: error: block %p (%zu bytes) corrupted (%s): two live blocks overlap?\n",
          bu_prog, p, size, where);
  fflush(stderr);
  _exit(4);
}

/* Check a stamped block and return its size (the size is recovered from the stamp). */
static inline size_t bu_check(const void *p, const char *where) {
  const unsigned char *c = (const unsigned char *)p;
  uint64_t w;
  memcpy(&w, c, 8);
  size_t size = (size_t)(w ^ ((uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull) ^ BU_STAMP_MAGIC);
  if (BU_UNLIKELY(size < 8 || size > ((size_t)1 << 40))) bu_corrupt(p, 0, where);
  if (size > 8 && BU_UNLIKELY(c[size - 1] != (unsigned char)(w >> 8))) bu_corrupt(p, size, where);
  return size;
}

/* Allocate and stamp. */
static inline void *bu_alloc_stamped(size_t size) {
  void *p = malloc(size);
  if (BU_UNLIKELY(p == NULL)) bu_oom(size);
  bu_stamp(p, size);
  return p;
}

/* Check and free; returns the block's size. */
static inline size_t bu_free_checked(void *p) {
  size_t size = bu_check(p, "before free");
  free(p);
  return size;
}

/* A sink for values computed from block contents, so the compiler keeps the reads. */
static volatile uint64_t bu_sink_value;
static inline void bu_sink(uint64_t v) { bu_sink_value += v; }

/* The false-sharing benchmarks' work on an object: write each byte, read it back, `reps`
 * times (Hoard's active-false / cache-thrash inner loop). Returns the sum of what it read. */
static inline uint64_t bu_hammer(volatile unsigned char *p, size_t size, long reps) {
  uint64_t sum = 0;
  for (long j = 0; j < reps; j++)
    for (size_t k = 0; k < size; k++) {
      p[k] = (unsigned char)(j + (long)k);
      sum += p[k];
    }
  return sum;
}

/* Check what bu_hammer left in an object (an allocator that handed the same bytes to two
 * threads would show here). */
static inline void bu_hammer_check(const volatile unsigned char *p, size_t size, long reps) {
  for (size_t k = 0; k < size; k++)
    if (p[k] != (unsigned char)(reps - 1 + (long)k)) bu_corrupt((const void *)p, size, "after writes");
}

/* ------------------------------------------------------------------ latency histogram */

/* Log-linear histogram of nanoseconds: values below 32 are exact, above that 32 buckets per
 * power of two (relative resolution about 3%). Mergeable, fixed size, no allocation. */
#define BU_HIST_SUB_BITS 5
#define BU_HIST_SUB (1u << BU_HIST_SUB_BITS)
#define BU_HIST_MAX_BITS 40
#define BU_HIST_BUCKETS (BU_HIST_SUB + (BU_HIST_MAX_BITS - BU_HIST_SUB_BITS) * BU_HIST_SUB)

typedef struct {
  uint64_t count[BU_HIST_BUCKETS];
  uint64_t n, max, sum;
} bu_hist;

static inline unsigned bu_hist_index(uint64_t v) {
  if (v < BU_HIST_SUB) return (unsigned)v;
  if (v >= ((uint64_t)1 << BU_HIST_MAX_BITS)) v = ((uint64_t)1 << BU_HIST_MAX_BITS) - 1;
  unsigned msb = 63u - (unsigned)__builtin_clzll(v);
  unsigned shift = msb - BU_HIST_SUB_BITS;
  unsigned sub = (unsigned)(v >> shift) - BU_HIST_SUB;
  return BU_HIST_SUB + shift * BU_HIST_SUB + sub;
}

/* The middle of a bucket's range. */
static inline double bu_hist_value(unsigned idx) {
  if (idx < BU_HIST_SUB) return (double)idx;
  unsigned shift = (idx - BU_HIST_SUB) / BU_HIST_SUB, sub = (idx - BU_HIST_SUB) % BU_HIST_SUB;
  double lo = (double)((uint64_t)(BU_HIST_SUB + sub) << shift);
  return lo + (double)((uint64_t)1 << shift) / 2.0 - 0.5;
}

static inline void bu_hist_add(bu_hist *h, uint64_t ns) {
  h->count[bu_hist_index(ns)]++;
  h->n++;
  h->sum += ns;
  if (ns > h->max) h->max = ns;
}

static inline void bu_hist_merge(bu_hist *into, const bu_hist *from) {
  for (unsigned i = 0; i < BU_HIST_BUCKETS; i++) into->count[i] += from->count[i];
  into->n += from->n;
  into->sum += from->sum;
  if (from->max > into->max) into->max = from->max;
}

/* Nearest-rank percentile, p in (0, 100]. */
static inline double bu_hist_percentile(const bu_hist *h, double p) {
  if (h->n == 0) return 0.0;
  uint64_t rank = (uint64_t)((p / 100.0) * (double)h->n + 0.999999);
  if (rank < 1) rank = 1;
  if (rank > h->n) rank = h->n;
  uint64_t seen = 0;
  for (unsigned i = 0; i < BU_HIST_BUCKETS; i++) {
    seen += h->count[i];
    if (seen >= rank) {
      double v = bu_hist_value(i);
      return v > (double)h->max ? (double)h->max : v;
    }
  }
  return (double)h->max;
}

/* Sample every BU_LAT_EVERY-th call: the two timestamps cost ~10-25 ns (bu_timer_overhead_ns,
 * included in the reported values), paid by every allocator alike. */
#define BU_LAT_EVERY 64

/* ------------------------------------------------------------------ results */

static inline void bu_result(const char *bench, int threads, const char *metric, double value,
                             const char *unit) {
  printf("RESULT benchmark=%s threads=%d metric=%s value=%.9g unit=%s\n", bench, threads, metric,
         value, unit);
  fflush(stdout);
}

/* Every program ends its results with its peak RSS (bench/run prefers /usr/bin/time's %M,
 * the same number measured from outside, where it has it). */
static inline void bu_result_peak_rss(const char *bench, int threads) {
  bu_result(bench, threads, "peak_rss", (double)bu_peak_rss_kib(), "KiB");
}

/* latency_<op>_{p50,p99,p999,max,mean}_ns for one histogram. */
static inline void bu_result_latency(const char *bench, int threads, const char *op,
                                     const bu_hist *h) {
  char m[64];
  static const struct {
    const char *name;
    double p;
  } ps[] = {{"p50", 50.0}, {"p99", 99.0}, {"p999", 99.9}};
  for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
    snprintf(m, sizeof m, "latency_%s_%s_ns", op, ps[i].name);
    bu_result(bench, threads, m, bu_hist_percentile(h, ps[i].p), "ns");
  }
  snprintf(m, sizeof m, "latency_%s_max_ns", op);
  bu_result(bench, threads, m, (double)h->max, "ns");
}

/* ------------------------------------------------------------------ threads */

static inline void bu_thread_create(pthread_t *t, void *(*fn)(void *), void *arg) {
  int rc;
  for (int tries = 0; (rc = pthread_create(t, NULL, fn, arg)) == EAGAIN && tries < 100; tries++)
    bu_sleep(0.001);
  if (rc != 0) bu_die("pthread_create: %s", strerror(rc));
}

static inline void bu_thread_join(pthread_t t) {
  int rc = pthread_join(t, NULL);
  if (rc != 0) bu_die("pthread_join: %s", strerror(rc));
}

static inline void bu_barrier_init(pthread_barrier_t *b, unsigned count) {
  int rc = pthread_barrier_init(b, NULL, count);
  if (rc != 0) bu_die("pthread_barrier_init: %s", strerror(rc));
}

/* Run t workers: thread i gets `items + i * stride`; they wait at `start` (set up here for
 * the t workers and the caller) so that all begin together, and all are joined on return. */
static inline void bu_run_workers(int t, void *(*fn)(void *), void *items, size_t stride,
                                  pthread_barrier_t *start) {
  pthread_t *tids = (pthread_t *)bu_map(sizeof(pthread_t) * (size_t)t);
  bu_barrier_init(start, (unsigned)t + 1);
  for (int i = 0; i < t; i++) bu_thread_create(&tids[i], fn, (char *)items + (size_t)i * stride);
  pthread_barrier_wait(start);
  for (int i = 0; i < t; i++) bu_thread_join(tids[i]);
}

static inline int bu_ncpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

/* ------------------------------------------------------------------ arguments */

typedef struct {
  int threads;    /* -t N, --threads N (default: the program's own) */
  bool smoke;     /* --smoke: tiny sizes, well under a second */
  uint64_t seed;  /* --seed N */
  double scale;   /* --scale F: multiplies iteration counts and durations (default 1) */
  bool keep_live; /* --keep-live: do not free the final live blocks (for a heap snapshot) */
} bu_common;

typedef enum { BU_OPT_FLAG, BU_OPT_LONG, BU_OPT_DOUBLE, BU_OPT_STRING } bu_opt_kind;

typedef struct {
  const char *name; /* without the leading "--" */
  bu_opt_kind kind;
  void *ptr; /* bool*, long*, double* or const char** */
  const char *help;
} bu_opt;

static inline void bu_usage(FILE *f, const char *desc, const bu_opt *opts, int nopts) {
  fprintf(f, "usage: %s [options]\n%s\n\ncommon options:\n", bu_prog, desc);
  fprintf(f, "  -t, --threads N   number of threads\n");
  fprintf(f, "  --smoke           tiny run (well under a second), for tests\n");
  fprintf(f, "  --seed N          random seed (default 1)\n");
  fprintf(f, "  --scale F         multiply the amount of work / run time by F (default 1)\n");
  fprintf(f, "  --keep-live       leave the last live blocks allocated at exit\n");
  fprintf(f, "  -h, --help        this text\n");
  if (nopts > 0) fprintf(f, "\n%s options:\n", bu_prog);
  for (int i = 0; i < nopts; i++) {
    const char *arg = opts[i].kind == BU_OPT_FLAG     ? ""
                      : opts[i].kind == BU_OPT_STRING ? " S"
                      : opts[i].kind == BU_OPT_DOUBLE ? " F"
                                                      : " N";
    char left[64];
    snprintf(left, sizeof left, "--%s%s", opts[i].name, arg);
    fprintf(f, "  %-18s%s\n", left, opts[i].help);
  }
}

static inline long bu_parse_long(const char *opt, const char *s) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 0);
  if (errno || end == s || *end) bu_die("%s: not an integer: '%s'", opt, s);
  if (v < LONG_MIN || v > LONG_MAX) bu_die("%s: out of range: '%s'", opt, s);
  return (long)v;
}

static inline double bu_parse_double(const char *opt, const char *s) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end) bu_die("%s: not a number: '%s'", opt, s);
  return v;
}

/* Parses the common flags into *c (whose fields hold the defaults on entry) and the
 * program's own options. "--name value" and "--name=value" both work. */
static inline void bu_parse_args(int argc, char **argv, const char *desc, bu_common *c,
                                 const bu_opt *opts, int nopts) {
  if (argc > 0 && argv[0]) {
    const char *slash = strrchr(argv[0], '/');
    bu_prog = slash ? slash + 1 : argv[0];
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *val = NULL;
    char name[64];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      bu_usage(stdout, desc, opts, nopts);
      exit(0);
    }
    if (strcmp(a, "-t") == 0) {
      snprintf(name, sizeof name, "threads");
    } else if (strncmp(a, "--", 2) == 0) {
      const char *eq = strchr(a + 2, '=');
      size_t len = eq ? (size_t)(eq - (a + 2)) : strlen(a + 2);
      if (len >= sizeof name) bu_die("unknown option '%s' (try --help)", a);
      memcpy(name, a + 2, len);
      name[len] = 0;
      if (eq) val = eq + 1;
    } else {
      bu_die("unexpected argument '%s' (try --help)", a);
    }
#define BU_TAKE_VALUE()                                                   \
  do {                                                                    \
    if (!val) {                                                           \
      if (i + 1 >= argc) bu_die("option '%s' needs a value", a);          \
      val = argv[++i];                                                    \
    }                                                                     \
  } while (0)
    if (strcmp(name, "threads") == 0) {
      BU_TAKE_VALUE();
      long t = bu_parse_long(a, val);
      if (t < 1 || t > 4096) bu_die("%s: must be 1..4096", a);
      c->threads = (int)t;
    } else if (strcmp(name, "smoke") == 0 && !val) {
      c->smoke = true;
    } else if (strcmp(name, "keep-live") == 0 && !val) {
      c->keep_live = true;
    } else if (strcmp(name, "seed") == 0) {
      BU_TAKE_VALUE();
      c->seed = (uint64_t)bu_parse_long(a, val);
    } else if (strcmp(name, "scale") == 0) {
      BU_TAKE_VALUE();
      c->scale = bu_parse_double(a, val);
      if (!(c->scale > 0 && c->scale <= 1000)) bu_die("%s: must be in (0, 1000]", a);
    } else {
      int k;
      for (k = 0; k < nopts; k++)
        if (strcmp(name, opts[k].name) == 0) break;
      if (k == nopts) bu_die("unknown option '%s' (try --help)", a);
      switch (opts[k].kind) {
      case BU_OPT_FLAG:
        if (val) bu_die("option '--%s' takes no value", name);
        *(bool *)opts[k].ptr = true;
        break;
      case BU_OPT_LONG:
        BU_TAKE_VALUE();
        *(long *)opts[k].ptr = bu_parse_long(a, val);
        break;
      case BU_OPT_DOUBLE:
        BU_TAKE_VALUE();
        *(double *)opts[k].ptr = bu_parse_double(a, val);
        break;
      case BU_OPT_STRING:
        BU_TAKE_VALUE();
        *(const char **)opts[k].ptr = val;
        break;
      }
    }
#undef BU_TAKE_VALUE
  }
}

/* Default common settings: threads as given, seed 1, scale 1. */
static inline bu_common bu_common_defaults(int threads) {
  bu_common c;
  memset(&c, 0, sizeof c);
  c.threads = threads;
  c.seed = 1;
  c.scale = 1.0;
  return c;
}

/* n * scale, at least lo. */
static inline long bu_scaled(long n, double scale, long lo) {
  double v = (double)n * scale;
  if (v < (double)lo) return lo;
  if (v > (double)LONG_MAX / 2) return LONG_MAX / 2;
  return (long)(v + 0.5);
}

/* Initialise the allocator under test (and stdio) before a baseline RSS is taken. */
static inline void bu_warm_allocator(void) {
  void *p = bu_malloc(64);
  bu_stamp(p, 64);
  bu_free_checked(p);
}

/* Run time of a phase that several threads run: each thread records when it passed the start
 * barrier and when it finished; the phase lasted from the earliest start to the latest end.
 * (Timing in the main thread instead would go wrong with more threads than cores: the main
 * thread may not be scheduled for a while after the barrier opens.) */
typedef struct {
  double start, end;
} bu_span;

static inline double bu_span_seconds(const bu_span *s, size_t stride_bytes, int n) {
  double lo = 0, hi = 0;
  for (int i = 0; i < n; i++) {
    const bu_span *x = (const bu_span *)((const char *)s + (size_t)i * stride_bytes);
    if (i == 0 || x->start < lo) lo = x->start;
    if (i == 0 || x->end > hi) hi = x->end;
  }
  return hi - lo;
}

/* Beside that span, for more than one thread: the longest single thread's (end - start) as
 * `thread_max` and how far apart the threads started as `start_skew`. On many cores one late
 * or slow thread sets max(end) - min(start); these two say which it was (a thread that
 * started late, or one whose own work ran long). */
static inline void bu_result_spans(const char *bench, int threads, const bu_span *s,
                                   size_t stride_bytes, int n) {
  if (n < 2) return;
  double longest = 0, first = 0, last = 0;
  for (int i = 0; i < n; i++) {
    const bu_span *x = (const bu_span *)((const char *)s + (size_t)i * stride_bytes);
    if (x->end - x->start > longest) longest = x->end - x->start;
    if (i == 0 || x->start < first) first = x->start;
    if (i == 0 || x->start > last) last = x->start;
  }
  bu_result(bench, threads, "thread_max", longest, "s");
  bu_result(bench, threads, "start_skew", last - first, "s");
}

/* A counter owned by one thread and read by another (the sampler): own cache line,
 * relaxed atomics, so there is no data race and no false sharing. */
typedef struct {
  _Atomic uint64_t v;
  char pad[BU_CACHELINE - sizeof(uint64_t)];
} bu_counter;

static inline void bu_counter_set(bu_counter *c, uint64_t v) {
  atomic_store_explicit(&c->v, v, memory_order_relaxed);
}
static inline uint64_t bu_counter_get(bu_counter *c) {
  return atomic_load_explicit(&c->v, memory_order_relaxed);
}

#endif /* TROVE_BENCH_UTIL_H */
