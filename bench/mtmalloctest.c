/* mtmalloctest: after Greg Nakhimovsky's test in the Sun article on Solaris malloc, mtmalloc,
 * ptmalloc, Hoard and libumem (Nadgir & Attardi): threads allocate and free blocks of varying
 * sizes in loops.
 *
 * Each thread repeats a round: allocate --batch blocks whose sizes vary over a wide range
 * (a power of two from 16 B to 8 KiB, chosen at random, plus up to the same again at random,
 * so 16 B .. 16 KiB with every size class touched), write into each, then free them: the
 * first half in allocation order, the second half in reverse. The total number of rounds is
 * fixed (divided among the threads), so a scalable allocator gets faster with more threads.
 * Result: time (s) and throughput (malloc-free pairs per second).
 */
#include "bench_util.h"

static struct {
  long rounds_per_thread, batch;
  uint64_t seed;
  pthread_barrier_t start;
} G;

typedef struct {
  bu_span span;
  int index;
  void **blocks;
} BU_ALIGNED worker_t;

static void *worker(void *arg) {
  worker_t *w = (worker_t *)arg;
  bu_rng rng;
  bu_rng_init(&rng, G.seed, (uint64_t)w->index);
  void **b = w->blocks;
  const long n = G.batch;
  pthread_barrier_wait(&G.start);
  w->span.start = bu_now();
  for (long r = 0; r < G.rounds_per_thread; r++) {
    for (long i = 0; i < n; i++) {
      size_t base = (size_t)16 << bu_rand_below(&rng, 10); /* 16 B .. 8 KiB */
      size_t size = base + (size_t)bu_rand_below(&rng, base);
      b[i] = bu_alloc_stamped(size);
    }
    for (long i = 0; i < n / 2; i++) bu_free_checked(b[i]);
    for (long i = n - 1; i >= n / 2; i--) bu_free_checked(b[i]);
  }
  w->span.end = bu_now();
  return NULL;
}

int main(int argc, char **argv) {
  bu_common c = bu_common_defaults(1);
  long rounds = -1, batch = 100;
  const bu_opt opts[] = {
      {"rounds", BU_OPT_LONG, &rounds, "rounds over all threads (default 100000, smoke 2000)"},
      {"batch", BU_OPT_LONG, &batch, "blocks allocated per round (100)"},
  };
  bu_parse_args(argc, argv,
                "mtmalloctest (Sun article): threads allocate and free blocks of varying sizes\n"
                "in loops.",
                &c, opts, (int)(sizeof opts / sizeof opts[0]));
  if (rounds < 0) rounds = bu_scaled(c.smoke ? 2000 : 100000, c.scale, 1);
  if (rounds < 1 || batch < 2) bu_die("bad parameters");
  const int t = c.threads;
  G.rounds_per_thread = rounds / t > 0 ? rounds / t : 1;
  G.batch = batch;
  G.seed = c.seed;

  bu_warm_allocator();
  worker_t *ws = bu_map(sizeof(worker_t) * (size_t)t);
  for (int i = 0; i < t; i++) {
    ws[i].index = i;
    ws[i].blocks = bu_map(sizeof(void *) * (size_t)batch);
  }
  bu_run_workers(t, worker, ws, sizeof ws[0], &G.start);
  double secs = bu_span_seconds(&ws[0].span, sizeof ws[0], t);
  bu_result("mtmalloctest", t, "time", secs, "s");
  bu_result_spans("mtmalloctest", t, &ws[0].span, sizeof ws[0], t);
  bu_result("mtmalloctest", t, "throughput", (double)G.rounds_per_thread * (double)t * (double)batch / secs, "ops/s");
  bu_result_peak_rss("mtmalloctest", t);
  return 0;
}
