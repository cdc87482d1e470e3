/* phases: a program that works in phases, each building a large structure and freeing all of
 * it: a batch job's steps, a compiler pass over a unit, a worker that assembles a large
 * response, mimalloc-bench's alloc-test. Between two phases the live data falls to nothing
 * and rises again to the same peak, so what an allocator does with the memory freed at the
 * end of a phase decides the cost of the next one: kept, it is reused as it is; given back
 * to the OS, every page is faulted in (and zeroed by the kernel) again.
 *
 * Each thread runs --rounds phases; a phase allocates --mb MiB (divided among the threads)
 * of blocks of uniform random size in [--min, --max] (default 100 B - 4 KiB; --wide: 64-128
 * KiB buffers), writes one byte per 4 KiB, then frees them all (even slots, then odd ones).
 * Result: time (s, all phases), throughput (malloc-free pairs per second, all threads) and
 * peak_rss.
 */
#include "bench_util.h"

static struct {
  long rounds, blocks;
  size_t min, max;
  uint64_t seed;
  pthread_barrier_t start;
} G;

typedef struct {
  bu_span span;
  int index;
  long n;
  void **slot;
} BU_ALIGNED worker_t;

static void *worker(void *arg) {
  worker_t *w = (worker_t *)arg;
  bu_rng rng;
  bu_rng_init(&rng, G.seed, (uint64_t)w->index);
  pthread_barrier_wait(&G.start);
  w->span.start = bu_now();
  for (long r = 0; r < G.rounds; r++) {
    for (long i = 0; i < w->n; i++) {
      size_t size = (size_t)bu_rand_range(&rng, G.min, G.max);
      char *p = malloc(size);
      bu_need(p, size);
      for (size_t off = 0; off < size; off += 4096) p[off] = (char)off;
      w->slot[i] = p;
    }
    for (long i = 0; i < w->n; i += 2) free(w->slot[i]);
    for (long i = 1; i < w->n; i += 2) free(w->slot[i]);
  }
  w->span.end = bu_now();
  return NULL;
}

int main(int argc, char **argv) {
  bu_common c = bu_common_defaults(1);
  long rounds = -1, mb = 256, min = 100, max = 4096;
  bool wide = false;
  const bu_opt opts[] = {
      {"rounds", BU_OPT_LONG, &rounds, "phases (default 10, smoke 2; times --scale)"},
      {"mb", BU_OPT_LONG, &mb, "MiB built by each phase, over all threads (256)"},
      {"min", BU_OPT_LONG, &min, "smallest block (100)"},
      {"max", BU_OPT_LONG, &max, "largest block (4096)"},
      {"wide", BU_OPT_FLAG, &wide, "64-128 KiB buffers instead of --min..--max"},
  };
  bu_parse_args(argc, argv,
                "phases: each thread builds its share of --mb MiB of blocks, frees them all,\n"
                "and does it again, --rounds times.",
                &c, opts, (int)(sizeof opts / sizeof opts[0]));
  if (wide) {
    min = 64 * 1024 + 1;
    max = 128 * 1024;
  }
  if (rounds < 0) rounds = bu_scaled(c.smoke ? 2 : 10, c.scale, 2);
  if (c.smoke && mb == 256) mb = 8;
  if (rounds < 1 || mb < 1 || min < 1 || max < min) bu_die("bad parameters");
  G.rounds = rounds;
  G.min = (size_t)min;
  G.max = (size_t)max;
  G.seed = c.seed;
  const int t = c.threads;
  long blocks = (long)(((size_t)mb << 20) / ((G.min + G.max) / 2));
  if (blocks < t) blocks = t;

  bu_warm_allocator();
  worker_t *ws = bu_map(sizeof(worker_t) * (size_t)t);
  pthread_t *tids = bu_map(sizeof(pthread_t) * (size_t)t);
  long pairs = 0;
  for (int i = 0; i < t; i++) {
    ws[i].index = i;
    ws[i].n = blocks / t + (i < blocks % t ? 1 : 0);
    pairs += ws[i].n;
    ws[i].slot = bu_map(sizeof(void *) * (size_t)ws[i].n);
  }
  bu_barrier_init(&G.start, (unsigned)t + 1);
  for (int i = 0; i < t; i++) bu_thread_create(&tids[i], worker, &ws[i]);
  pthread_barrier_wait(&G.start);
  for (int i = 0; i < t; i++) bu_thread_join(tids[i]);
  const char *name = wide ? "phases-large" : "phases-small";
  double secs = bu_span_seconds(&ws[0].span, sizeof ws[0], t);
  bu_result(name, t, "time", secs, "s");
  bu_result_spans(name, t, &ws[0].span, sizeof ws[0], t);
  bu_result(name, t, "throughput", (double)pairs * (double)rounds / secs, "ops/s");
  bu_result_peak_rss(name, t);
  return 0;
}
