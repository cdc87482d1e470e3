/* manythreads: a thread-per-connection server (an Apache worker, a database backend thread,
 * a Java request thread): many more threads than cores, each holding a small working set of
 * its own and serving requests that allocate a few short-lived temporaries. What it
 * measures is what each thread costs: an allocator that gives every thread memory of its own
 * (a cache, current superblocks or pages per size class) pays for it once per thread, and
 * with hundreds of threads that overhead, not the live data, can decide the peak RSS.
 *
 * -t t starts t x --conns connection threads (default 100 per t: 100-800 threads). Each
 * allocates --held blocks (16) and waits until all threads have theirs; then it serves
 * --requests requests (2,000): a request allocates 2-8 temporaries, writes them, frees them
 * in reverse order, and replaces one held block; one request in 16 also reads into a buffer
 * of 64-256 KiB (one byte written per 4 KiB) that it frees. Then all wait again (every thread
 * still holding its blocks), free what they hold and exit. Sizes: 3 in 4 blocks 16-256 B,
 * 1 in 5 256 B - 4 KiB, 1 in 20 4-16 KiB. Result: time (s, the requests), throughput (requests per
 * second, all threads) and peak_rss.
 */
#include "bench_util.h"

static struct {
  long held, requests;
  uint64_t seed;
  pthread_barrier_t start, end;
} G;

typedef struct {
  bu_span span;
  int index;
} BU_ALIGNED worker_t;

static size_t pick_size(bu_rng *r) {
  uint64_t k = bu_rand_below(r, 20);
  if (k < 15) return (size_t)bu_rand_range(r, 16, 256);
  if (k < 19) return (size_t)bu_rand_range(r, 257, 4096);
  return (size_t)bu_rand_range(r, 4097, 16384);
}

static void *worker(void *arg) {
  worker_t *w = (worker_t *)arg;
  bu_rng rng;
  bu_rng_init(&rng, G.seed, (uint64_t)w->index);
  void *held[64], *tmp[8];
  for (long i = 0; i < G.held; i++) held[i] = bu_alloc_stamped(pick_size(&rng));
  pthread_barrier_wait(&G.start);
  w->span.start = bu_now();
  for (long r = 0; r < G.requests; r++) {
    int n = 2 + (int)bu_rand_below(&rng, 7);
    for (int i = 0; i < n; i++) tmp[i] = bu_alloc_stamped(pick_size(&rng));
    if (bu_rand_below(&rng, 16) == 0) {        /* an I/O buffer of 64-256 KiB */
      size_t size = (size_t)bu_rand_range(&rng, 64 << 10, 256 << 10);
      char *buf = malloc(size);
      bu_need(buf, size);
      bu_stamp_pages(buf, size);
      free(buf);
    }
    for (int i = n - 1; i >= 0; i--) bu_free_checked(tmp[i]);
    long j = (long)bu_rand_below(&rng, (uint64_t)G.held);
    bu_free_checked(held[j]);
    held[j] = bu_alloc_stamped(pick_size(&rng));
  }
  w->span.end = bu_now();
  pthread_barrier_wait(&G.end);
  for (long i = 0; i < G.held; i++) bu_free_checked(held[i]);
  return NULL;
}

int main(int argc, char **argv) {
  bu_common c = bu_common_defaults(1);
  long conns = 100, held = 16, requests = -1;
  const bu_opt opts[] = {
      {"conns", BU_OPT_LONG, &conns, "connection threads per -t (100)"},
      {"held", BU_OPT_LONG, &held, "blocks each thread holds, at most 64 (16)"},
      {"requests", BU_OPT_LONG, &requests, "requests per thread (default 2000, smoke 50)"},
  };
  bu_parse_args(argc, argv,
                "manythreads: a thread-per-connection server; t x --conns threads, each with a\n"
                "small working set, serve requests that allocate short-lived temporaries.",
                &c, opts, (int)(sizeof opts / sizeof opts[0]));
  if (requests < 0) requests = bu_scaled(c.smoke ? 50 : 2000, c.scale, 1);
  if (conns < 1 || held < 1 || held > 64 || requests < 1) bu_die("bad parameters");
  const int t = c.threads, n = (int)(conns * t);
  G.held = held;
  G.requests = requests;
  G.seed = c.seed;

  bu_warm_allocator();
  worker_t *ws = bu_map(sizeof(worker_t) * (size_t)n);
  pthread_t *tids = bu_map(sizeof(pthread_t) * (size_t)n);
  bu_barrier_init(&G.start, (unsigned)n);
  bu_barrier_init(&G.end, (unsigned)n);
  for (int i = 0; i < n; i++) {
    ws[i].index = i;
    bu_thread_create(&tids[i], worker, &ws[i]);
  }
  for (int i = 0; i < n; i++) bu_thread_join(tids[i]);
  double secs = bu_span_seconds(&ws[0].span, sizeof ws[0], n);
  bu_result("manythreads", t, "time", secs, "s");
  bu_result("manythreads", t, "throughput", (double)requests * (double)n / secs, "ops/s");
  bu_result_peak_rss("manythreads", t);
  return 0;
}
