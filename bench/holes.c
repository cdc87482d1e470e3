/* holes: a large heap of medium buffers (64-128 KiB) in which every other one is freed and
 * replaced, round after round: the free runs between live buffers are many and of few lengths,
 * which is what an allocator's free-page structure must handle without walking them all (a
 * server's I/O buffers, a cache of decoded objects).
 *
 * t threads each keep --blocks/t buffers of random size in [64 KiB + 1, 128 KiB] (the first
 * byte of each page written). Each round a thread frees the even or the odd slots (alternately)
 * and allocates new buffers in them. The threads share nothing; the total work is the same for
 * every t. Only the rounds are timed, not the set-up.
 * Result: time (s), throughput (malloc-free pairs per second), peak RSS.
 */
#include "bench_util.h"

static struct {
  long blocks, rounds;
  uint64_t seed;
  pthread_barrier_t start;
} G;

typedef struct {
  bu_span span;
  int index;
  long n;
  void **slot;
} BU_ALIGNED worker_t;

static void *fill(bu_rng *r) {
  size_t size = (size_t)bu_rand_range(r, 64 * 1024 + 1, 128 * 1024);
  char *p = malloc(size);
  bu_need(p, size);
  for (size_t off = 0; off < size; off += 4096) p[off] = (char)off;
  return p;
}

static void *worker(void *arg) {
  worker_t *w = (worker_t *)arg;
  bu_rng rng;
  bu_rng_init(&rng, G.seed, (uint64_t)w->index);
  for (long i = 0; i < w->n; i++) w->slot[i] = fill(&rng);
  pthread_barrier_wait(&G.start);
  w->span.start = bu_now();
  for (long r = 0; r < G.rounds; r++) {
    for (long i = r & 1; i < w->n; i += 2) free(w->slot[i]);
    for (long i = r & 1; i < w->n; i += 2) w->slot[i] = fill(&rng);
  }
  w->span.end = bu_now();
  for (long i = 0; i < w->n; i++) free(w->slot[i]);
  return NULL;
}

int main(int argc, char **argv) {
  bu_common c = bu_common_defaults(1);
  long blocks = 6000, rounds = -1;
  const bu_opt opts[] = {
      {"blocks", BU_OPT_LONG, &blocks, "buffers held, over all threads (6000: about 570 MiB)"},
      {"rounds", BU_OPT_LONG, &rounds, "rounds (default 40, smoke 2; times --scale)"},
  };
  bu_parse_args(argc, argv,
                "holes: t threads each hold blocks/t buffers of 64-128 KiB and replace every\n"
                "other one, round after round.",
                &c, opts, (int)(sizeof opts / sizeof opts[0]));
  if (rounds < 0) rounds = bu_scaled(c.smoke ? 2 : 40, c.scale, 2);
  if (c.smoke && blocks == 6000) blocks = 200;
  if (blocks < 2 || rounds < 1) bu_die("bad parameters");
  G.blocks = blocks;
  G.rounds = rounds;
  G.seed = c.seed;
  const int t = c.threads;

  bu_warm_allocator();
  worker_t *ws = bu_map(sizeof(worker_t) * (size_t)t);
  pthread_t *tids = bu_map(sizeof(pthread_t) * (size_t)t);
  long pairs = 0;
  for (int i = 0; i < t; i++) {
    ws[i].index = i;
    ws[i].n = blocks / t + (i < blocks % t ? 1 : 0);
    if (ws[i].n < 2) ws[i].n = 2;
    pairs += ws[i].n / 2;
    ws[i].slot = bu_map(sizeof(void *) * (size_t)ws[i].n);
  }
  bu_barrier_init(&G.start, (unsigned)t + 1);
  for (int i = 0; i < t; i++) bu_thread_create(&tids[i], worker, &ws[i]);
  pthread_barrier_wait(&G.start);
  for (int i = 0; i < t; i++) bu_thread_join(tids[i]);
  double secs = bu_span_seconds(&ws[0].span, sizeof ws[0], t);
  bu_result("holes", t, "time", secs, "s");
  bu_result("holes", t, "throughput", (double)pairs * (double)rounds / secs, "ops/s");
  bu_result_peak_rss("holes", t);
  return 0;
}
