/* threadtest: Hoard's threadtest (Berger et al., ASPLOS 2000, section 5.2; also in the Sun
 * article and Bannatyne & Hollbach).
 *
 * t threads each repeatedly (--rounds times) allocate 100,000/t objects of 8 bytes, write
 * them, then free them all. The threads share nothing; the total work is the same for every
 * t, so an allocator that scales runs in time/t (up to the number of cores).
 * --size 64 gives the threadtest-64 variant (other sizes: threadtest-<size>).
 * Result: time (s) and throughput (malloc-free pairs per second).
 */
#include "bench_util.h"

static struct {
  long objects, rounds, size;
  pthread_barrier_t start;
} G;

typedef struct {
  bu_span span;
  int index;
  long n;
  void **objs;
} BU_ALIGNED worker_t;

static void *worker(void *arg) {
  worker_t *w = (worker_t *)arg;
  const size_t size = (size_t)G.size;
  void **objs = w->objs;
  const long n = w->n;
  pthread_barrier_wait(&G.start);
  w->span.start = bu_now();
  for (long r = 0; r < G.rounds; r++) {
    for (long i = 0; i < n; i++) objs[i] = bu_alloc_stamped(size);
    for (long i = 0; i < n; i++) bu_free_checked(objs[i]);
  }
  w->span.end = bu_now();
  return NULL;
}

int main(int argc, char **argv) {
  bu_common c = bu_common_defaults(1);
  long objects = 100000, rounds = -1, size = 8;
  const bu_opt opts[] = {
      {"objects", BU_OPT_LONG, &objects, "objects allocated per round, over all threads (100000)"},
      {"rounds", BU_OPT_LONG, &rounds, "rounds (default 500, smoke 10; times --scale)"},
      {"size", BU_OPT_LONG, &size, "object size in bytes (8; 64 gives threadtest-64)"},
  };
  bu_parse_args(argc, argv,
                "Hoard's threadtest: t threads each allocate and free 100,000/t small objects,\n"
                "repeatedly, sharing nothing.",
                &c, opts, (int)(sizeof opts / sizeof opts[0]));
  if (rounds < 0) rounds = bu_scaled(c.smoke ? 10 : 500, c.scale, 1);
  if (objects < 1 || rounds < 1 || size < 8 || size > (1L << 30)) bu_die("bad parameters");
  G.objects = objects;
  G.rounds = rounds;
  G.size = size;
  char name[64];
  if (size == 8)
    snprintf(name, sizeof name, "threadtest");
  else
    snprintf(name, sizeof name, "threadtest-%ld", size);
  const int t = c.threads;

  bu_warm_allocator();
  worker_t *ws = bu_map(sizeof(worker_t) * (size_t)t);
  pthread_t *tids = bu_map(sizeof(pthread_t) * (size_t)t);
  long total = 0;
  for (int i = 0; i < t; i++) {
    ws[i].index = i;
    ws[i].n = objects / t + (i < objects % t ? 1 : 0);
    if (ws[i].n < 1) ws[i].n = 1;
    total += ws[i].n;
    ws[i].objs = bu_map(sizeof(void *) * (size_t)ws[i].n);
  }
  bu_barrier_init(&G.start, (unsigned)t + 1);
  for (int i = 0; i < t; i++) bu_thread_create(&tids[i], worker, &ws[i]);
  pthread_barrier_wait(&G.start);
  for (int i = 0; i < t; i++) bu_thread_join(tids[i]);
  double secs = bu_span_seconds(&ws[0].span, sizeof ws[0], t);
  bu_result(name, t, "time", secs, "s");
  bu_result_spans(name, t, &ws[0].span, sizeof ws[0], t);
  bu_result(name, t, "throughput", (double)total * (double)rounds / secs, "ops/s");
  bu_result_peak_rss(name, t);
  return 0;
}
