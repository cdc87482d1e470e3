/* idlers: a server's worker pool at the end of its busy hours. t worker threads each serve a
 * burst (allocate --mb MiB of small blocks of --min-size..--max-size bytes, uniform, write
 * them, free them all) and then block, waiting for work that does not come, while the main
 * thread stays lightly active: 16 malloc/free pairs of 16-256 B every 10 ms (stability's
 * idle traffic) for --idle seconds. LKmalloc's requirement that memory follow the live data:
 * does what the idle workers freed go back to the OS while they wait? An allocator that lets
 * only a thread's own calls give back what that thread keeps (its caches, its heap's empty
 * pages) holds the bursts for as long as the workers wait.
 *
 * --shuffle frees each burst in a random order (a cache or hash table torn down, as Redis's
 * FLUSHALL does: every superblock then drains at once instead of one after another), and
 * --quiet keeps the main thread from the allocator too during the wait: a process gone quiet
 * after a flush, whose own calls cannot give anything back (the `quiet` benchmark: one worker,
 * 96 MiB).
 *
 * Result: rss_idle (KiB at the end of the wait; the main table's metric, lower is better),
 * rss_burst (KiB once every worker has freed its burst), idle_ratio ((rss_idle - base) /
 * (rss_burst - base), base = RSS before the bursts: 0 when everything went back, 1 when
 * nothing did), time (s, the bursts), peak_rss.
 */
#include "bench_util.h"

static struct {
  size_t bytes, min_size, max_size;
  uint64_t seed;
  bool shuffle;
  pthread_barrier_t freed, done;
} G;

typedef struct {
  bu_span span;
  int index;
} BU_ALIGNED worker_t;

static void *worker(void *arg) {
  worker_t *w = (worker_t *)arg;
  bu_rng rng;
  bu_rng_init(&rng, G.seed, (uint64_t)w->index);
  size_t cap = G.bytes / G.min_size + 1, n = 0, total = 0;
  void **b = bu_map(sizeof(void *) * cap);
  w->span.start = bu_now();
  while (total < G.bytes && n < cap) {
    size_t size = (size_t)bu_rand_range(&rng, G.min_size, G.max_size);
    b[n++] = bu_alloc_stamped(size);
    total += size;
  }
  if (G.shuffle)
    for (size_t i = n; i > 1; i--) {
      size_t j = (size_t)bu_rand_below(&rng, i);
      void *x = b[i - 1];
      b[i - 1] = b[j];
      b[j] = x;
    }
  for (size_t i = 0; i < n; i++) bu_free_checked(b[i]);
  w->span.end = bu_now();
  bu_unmap(b, sizeof(void *) * cap);
  pthread_barrier_wait(&G.freed);
  pthread_barrier_wait(&G.done);   /* blocked: no call into the allocator until the end */
  return NULL;
}

int main(int argc, char **argv) {
  bu_common c = bu_common_defaults(1);
  double mb = -1, idle = -1;
  long min_size = 16, max_size = 512;
  bool shuffle = false, quiet = false;
  const bu_opt opts[] = {
      {"shuffle", BU_OPT_FLAG, &shuffle, "free each burst in a random order"},
      {"quiet", BU_OPT_FLAG, &quiet, "no calls from the main thread during the wait either"},
      {"mb", BU_OPT_DOUBLE, &mb, "MiB each worker allocates and frees (default 4, smoke 0.5; times --scale)"},
      {"min-size", BU_OPT_LONG, &min_size, "smallest block (16)"},
      {"max-size", BU_OPT_LONG, &max_size, "largest block (512)"},
      {"idle", BU_OPT_DOUBLE, &idle, "seconds the workers then wait (default 1.5, smoke 0.1; not scaled)"},
  };
  bu_parse_args(argc, argv,
                "idlers: worker threads free a burst each and then block while the main thread\n"
                "makes light calls; RSS after the wait.",
                &c, opts, (int)(sizeof opts / sizeof opts[0]));
  if (mb < 0) mb = (c.smoke ? 0.5 : 4.0) * c.scale;
  if (idle < 0) idle = c.smoke ? 0.1 : 1.5;
  if (mb <= 0 || idle < 0 || min_size < 8 || max_size < min_size) bu_die("bad parameters");
  const int t = c.threads;
  G.bytes = (size_t)(mb * 1048576.0);
  G.min_size = (size_t)min_size;
  G.max_size = (size_t)max_size;
  G.seed = c.seed;
  G.shuffle = shuffle;
  bu_barrier_init(&G.freed, (unsigned)t + 1);
  bu_barrier_init(&G.done, (unsigned)t + 1);

  bu_warm_allocator();
  long base = bu_rss_kib();
  worker_t *ws = bu_map(sizeof(worker_t) * (size_t)t);
  pthread_t *tids = bu_map(sizeof(pthread_t) * (size_t)t);
  for (int i = 0; i < t; i++) {
    ws[i].index = i;
    bu_thread_create(&tids[i], worker, &ws[i]);
  }
  pthread_barrier_wait(&G.freed);
  long burst = bu_rss_kib();
  bu_rng rng;
  bu_rng_init(&rng, G.seed, (uint64_t)t + 1);
  double start = bu_now();
  for (double next = start + 0.01; next < start + idle; next += 0.01) {
    if (quiet) {
      bu_sleep_until(next);
      continue;
    }
    void *v[16];
    for (int i = 0; i < 16; i++) v[i] = bu_alloc_stamped((size_t)bu_rand_range(&rng, 16, 256));
    for (int i = 0; i < 16; i++) bu_free_checked(v[i]);
    bu_sleep_until(next);
  }
  long rss_idle = bu_rss_kib();
  pthread_barrier_wait(&G.done);
  for (int i = 0; i < t; i++) bu_thread_join(tids[i]);

  double secs = bu_span_seconds(&ws[0].span, sizeof ws[0], t);
  const char *name = quiet ? "quiet" : "idlers";
  bu_result(name, t, "rss_idle", (double)rss_idle, "KiB");
  bu_result(name, t, "rss_burst", (double)burst, "KiB");
  bu_result(name, t, "idle_ratio",
            burst > base ? (double)(rss_idle > base ? rss_idle - base : 0) / (double)(burst - base) : 0.0,
            "ratio");
  bu_result(name, t, "time", secs, "s");
  bu_result_peak_rss(name, t);
  return 0;
}
