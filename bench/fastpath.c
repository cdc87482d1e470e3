/* fastpath: the cost of malloc and free when nothing is contended, one thread (Larson &
 * Krishnan's first requirement, "fast"; the Hoard paper's uniprocessor runtimes).
 *
 *   fastpath-pingpong (default): malloc a small block, write it, free it, again, cycling
 *     through 16 sizes from 8 to 256 B. Measures the allocator's fast path (thread cache or
 *     free list hit) in malloc-free pairs per second.
 *   fastpath-workset (--workset): a working set of 10,000 live blocks of random sizes
 *     (8 B - 1 KiB, log-uniform); each operation frees a random one and allocates a new one
 *     of random size in its place. The same fast paths, but with the free lists in random
 *     order and blocks spread over many pages (locality).
 *   fastpath-medium (--medium): the ping-pong with 16 sizes from 72 KiB to 1 MiB, buffers
 *     (a read buffer per request, a compression window per file) that only their first word
 *     and last byte are written of, so that the allocator's path is what is timed. Above the
 *     sizes most allocators serve from thread caches (tcmalloc: 256 KiB; trove: 64 KiB).
 *   workset-wide (--workset --wide): the same with 1,024 live blocks of 8 B - 32 KiB a thread,
 *     the shape of glibc's benchtests/bench-malloc-thread (sizes drawn about as 1/size, a
 *     fixed array per thread, each step frees a random slot and fills it again). Its sizes
 *     straddle 1 KiB at random, and a third of its blocks lie in classes whose superblocks
 *     hold 2-8 blocks; the suite runs it at every thread count.
 *
 * With -t N, N threads each do the same work independently (N/t operations each); the
 * benchmark suite runs it with one thread. Result: throughput (pairs per second) and time (s).
 */
#include "bench_util.h"

static const size_t pp_sizes[16] = {16, 32, 48, 64, 80, 96, 112, 128, 24, 40, 56, 72, 8, 100, 200, 256};
#define KB 1024
static const size_t medium_sizes[16] = {72 * KB, 96 * KB, 128 * KB,  80 * KB,  160 * KB, 200 * KB,
                                        256 * KB, 112 * KB, 320 * KB, 400 * KB, 512 * KB, 144 * KB,
                                        640 * KB, 768 * KB, 1024 * KB, 192 * KB};

static struct {
  bool workset, medium;
  long ops_per_thread, wsize, max_size;
  uint64_t seed;
  pthread_barrier_t start;
} G;

typedef struct {
  bu_span span;
  int index;
  void **a;
} BU_ALIGNED worker_t;

/* A byte per 64-byte line, as the other programs write, up to 1 KiB; above, a byte per 4 KiB
 * page (bu_stamp_pages): at a line each, the wide set's 4 MB of cold blocks made it a test of
 * the memory bus (25 times slower under every allocator). Inline: bench/icount counts the
 * calls the loop makes, and must see malloc's, not this function's. */
static inline __attribute__((always_inline)) void *workset_alloc(bu_rng *rng) {
  size_t size = (size_t)bu_rand_logsize(rng, 8, (uint64_t)G.max_size);
  void *p = malloc(size);
  if (BU_UNLIKELY(p == NULL)) bu_oom(size);
  if (size <= 1024) bu_stamp(p, size);
  else bu_stamp_pages(p, size);
  return p;
}

static void *worker(void *arg) {
  worker_t *w = (worker_t *)arg;
  bu_rng rng;
  bu_rng_init(&rng, G.seed, (uint64_t)w->index);
  const long n = G.ops_per_thread;
  if (G.medium) {
    pthread_barrier_wait(&G.start);
    w->span.start = bu_now();
    for (long i = 0; i < n; i++) {
      size_t size = medium_sizes[i & 15];
      void *p = malloc(size);
      if (BU_UNLIKELY(p == NULL)) bu_oom(size);
      bu_stamp_ends(p, size);
      bu_free_checked(p);
    }
    w->span.end = bu_now();
    return NULL;
  }
  if (!G.workset) {
    pthread_barrier_wait(&G.start);
    w->span.start = bu_now();
    for (long i = 0; i < n; i++) {
      void *p = bu_alloc_stamped(pp_sizes[i & 15]);
      bu_free_checked(p);
    }
    w->span.end = bu_now();
    return NULL;
  }
  void **a = w->a;
  const uint64_t ws = (uint64_t)G.wsize;
  for (uint64_t k = 0; k < ws; k++) a[k] = workset_alloc(&rng);
  pthread_barrier_wait(&G.start);
  w->span.start = bu_now();
  for (long i = 0; i < n; i++) {
    uint64_t k = bu_rand_below(&rng, ws);
    bu_free_checked(a[k]);
    a[k] = workset_alloc(&rng);
  }
  for (uint64_t k = 0; k < ws; k++) bu_free_checked(a[k]);
  w->span.end = bu_now();
  return NULL;
}

int main(int argc, char **argv) {
  bu_common c = bu_common_defaults(1);
  bool workset = false, wide = false, medium = false;
  long ops = -1, wsize = -1, max_size = -1;
  const bu_opt opts[] = {
      {"workset", BU_OPT_FLAG, &workset, "fastpath-workset: random replacement in a working set"},
      {"medium", BU_OPT_FLAG, &medium, "fastpath-medium: the ping-pong with buffers of 72 KiB - 1 MiB"},
      {"ops", BU_OPT_LONG, &ops,
       "malloc-free pairs over all threads (pingpong 100M, medium 4M, workset 25M, wide 10M)"},
      {"wide", BU_OPT_FLAG, &wide, "workset-wide: 1,024 blocks of 8 B - 32 KiB (with --workset)"},
      {"working-set", BU_OPT_LONG, &wsize, "workset: live blocks a thread (10,000; wide 1,024)"},
      {"max-size", BU_OPT_LONG, &max_size, "workset: largest block in bytes (1,024; wide 32,768)"},
  };
  bu_parse_args(argc, argv,
                "Single-thread fast paths: malloc/free ping-pong of small (or medium) sizes,\n"
                "or random replacement in a working set of random sizes.",
                &c, opts, (int)(sizeof opts / sizeof opts[0]));
  if (ops < 0) {
    long n = medium ? (c.smoke ? 100000 : 4000000)
             : !workset ? (c.smoke ? 2000000 : 100000000)
             : wide ? (c.smoke ? 200000 : 10000000) : (c.smoke ? 500000 : 25000000);
    ops = bu_scaled(n, c.scale, 1000);
  }
  if (wsize < 0) wsize = wide ? 1024 : 10000;
  if (max_size < 0) max_size = wide ? 32768 : 1024;
  if (ops < 1 || wsize < 1 || max_size < 8 || (wide && !workset) || (medium && workset))
    bu_die("bad parameters");
  const int t = c.threads;
  const char *name = medium ? "fastpath-medium"
                     : !workset ? "fastpath-pingpong"
                     : wide ? "workset-wide" : "fastpath-workset";
  G.workset = workset;
  G.medium = medium;
  G.ops_per_thread = ops / t > 0 ? ops / t : 1;
  G.wsize = wsize;
  G.max_size = max_size;
  G.seed = c.seed;

  bu_warm_allocator();
  worker_t *ws = bu_map(sizeof(worker_t) * (size_t)t);
  pthread_t *tids = bu_map(sizeof(pthread_t) * (size_t)t);
  for (int i = 0; i < t; i++) {
    ws[i].index = i;
    if (workset) ws[i].a = bu_map(sizeof(void *) * (size_t)wsize);
  }
  bu_barrier_init(&G.start, (unsigned)t + 1);
  for (int i = 0; i < t; i++) bu_thread_create(&tids[i], worker, &ws[i]);
  pthread_barrier_wait(&G.start);
  for (int i = 0; i < t; i++) bu_thread_join(tids[i]);
  /* workset: includes freeing the working set at the end */
  double secs = bu_span_seconds(&ws[0].span, sizeof ws[0], t);
  bu_result(name, t, "throughput", (double)G.ops_per_thread * t / secs, "ops/s");
  bu_result(name, t, "time", secs, "s");
  bu_result_spans(name, t, &ws[0].span, sizeof ws[0], t);
  bu_result_peak_rss(name, t);
  return 0;
}
