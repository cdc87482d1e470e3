/* sizesweep: speed against the maximum block size, after the NYU report (Manghwani & He,
 * "Scalable Memory Allocation", figures 2-4: time against the maximum bytes per malloc call,
 * 2^6 = 64 B .. 2^20 = 1 MiB, for 1, 2, 3, 4, 8 ... threads).
 *
 * For each maximum size M = 64 B, 128 B, ..., 1 MiB, t threads each keep 32 live blocks and
 * do random replacements (free a random block, allocate one of uniform random size in
 * [8, M], write its first word and last byte and one byte per 4 KiB page). The threads
 * share nothing. Fewer operations are done for large M (the count falls as 1/M above 256 B,
 * never below 256 per thread), so the result is normalised:
 *   pair_ns_max_<M>: wall-clock ns per malloc-free pair, all threads together
 *                    (= 1 / aggregate throughput), lower is better
 * plus time (s), the total of the timed phases. Watch for allocators whose cost jumps past
 * their thread-cache or mmap thresholds (TCMalloc's 32 KiB/2 MiB cache limits in the report).
 */
#include "bench_util.h"

#define NSIZES 15 /* 64 B .. 1 MiB */
#define SLOTS 32

static struct {
  long ops_per_thread[NSIZES];
  uint64_t seed;
  pthread_barrier_t bar;
} G;

typedef struct {
  bu_span span[NSIZES];
  int index;
  void *slot[SLOTS];
} BU_ALIGNED worker_t;

static void *worker(void *arg) {
  worker_t *w = (worker_t *)arg;
  bu_rng rng;
  bu_rng_init(&rng, G.seed, (uint64_t)w->index);
  for (int s = 0; s < NSIZES; s++) {
    const uint64_t max = (uint64_t)64 << s;
    for (int k = 0; k < SLOTS; k++) {
      size_t size = (size_t)bu_rand_range(&rng, 8, max);
      w->slot[k] = bu_malloc(size);
      bu_stamp_pages(w->slot[k], size);
    }
    pthread_barrier_wait(&G.bar); /* start */
    w->span[s].start = bu_now();
    for (long i = 0; i < G.ops_per_thread[s]; i++) {
      uint64_t k = bu_rand_below(&rng, SLOTS);
      bu_free_checked(w->slot[k]);
      size_t size = (size_t)bu_rand_range(&rng, 8, max);
      void *p = bu_malloc(size);
      bu_stamp_pages(p, size);
      w->slot[k] = p;
    }
    w->span[s].end = bu_now();
    pthread_barrier_wait(&G.bar); /* end */
    for (int k = 0; k < SLOTS; k++) bu_free_checked(w->slot[k]);
  }
  return NULL;
}

int main(int argc, char **argv) {
  bu_common c = bu_common_defaults(1);
  long ops = -1;
  const bu_opt opts[] = {
      {"ops", BU_OPT_LONG, &ops,
       "pairs over all threads at M <= 256 B (default 8M, smoke 100k); x 256/M above"},
  };
  bu_parse_args(argc, argv,
                "Speed against the maximum block size (NYU report figs 2-4): random replacement\n"
                "of blocks of uniform size in [8, M], M = 64 B .. 1 MiB.",
                &c, opts, (int)(sizeof opts / sizeof opts[0]));
  if (ops < 0) ops = bu_scaled(c.smoke ? 100000 : 8000000, c.scale, 1000);
  if (ops < 1) bu_die("bad parameters");
  const int t = c.threads;
  for (int s = 0; s < NSIZES; s++) {
    long max = 64L << s;
    long total = max <= 256 ? ops : (long)((double)ops * 256.0 / (double)max);
    long per = total / t;
    G.ops_per_thread[s] = per < 256 ? 256 : per;
  }
  G.seed = c.seed;

  bu_warm_allocator();
  worker_t *ws = bu_map(sizeof(worker_t) * (size_t)t);
  pthread_t *tids = bu_map(sizeof(pthread_t) * (size_t)t);
  bu_barrier_init(&G.bar, (unsigned)t + 1);
  for (int i = 0; i < t; i++) {
    ws[i].index = i;
    bu_thread_create(&tids[i], worker, &ws[i]);
  }
  double total = 0, ns[NSIZES];
  for (int s = 0; s < NSIZES; s++) {
    pthread_barrier_wait(&G.bar);
    pthread_barrier_wait(&G.bar);
  }
  for (int i = 0; i < t; i++) bu_thread_join(tids[i]);
  for (int s = 0; s < NSIZES; s++) {
    double secs = bu_span_seconds(&ws[0].span[s], sizeof ws[0], t);
    total += secs;
    ns[s] = secs * 1e9 / ((double)G.ops_per_thread[s] * t);
  }
  for (int s = 0; s < NSIZES; s++) {
    char m[48];
    snprintf(m, sizeof m, "pair_ns_max_%ld", 64L << s);
    bu_result("sizesweep", t, m, ns[s], "ns");
  }
  bu_result("sizesweep", t, "time", total, "s");
  bu_result_peak_rss("sizesweep", t);
  return 0;
}
