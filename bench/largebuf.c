/* largebuf: large buffers (above 1 MiB) of random sizes, replaced one at a time: a program
 * that decodes images, compresses, or assembles large responses, each buffer sized by its
 * input (mimalloc-bench's malloc-large: 20 live buffers of 5-25 MiB). What an allocator does
 * with a freed buffer decides the cost of the next, of another size: reused as it is or
 * resized, its pages stay; given back, or held where a request of another size cannot use it,
 * every page of the next is faulted in (and zeroed by the kernel) again.
 *
 * t threads each keep --live/t buffers; each of a thread's --ops/t operations frees a random
 * one of its buffers and allocates another of a size uniform in [--min, --max] MiB, writing
 * one byte per 4 KiB page (and checking the old buffer's stamp before the free). The threads
 * share nothing; the total work is the same for every t.
 * Result: time (s), throughput (replacements per second, all threads), faults (minor page
 * faults during the run, from getrusage) and peak_rss.
 */
#include "bench_util.h"

#include <sys/resource.h>

static struct {
  size_t min, max;
  long ops_per_thread;
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
  size_t size = (size_t)bu_rand_range(r, G.min, G.max);
  void *p = malloc(size);
  bu_need(p, size);
  bu_stamp_pages(p, size);
  return p;
}

static void *worker(void *arg) {
  worker_t *w = (worker_t *)arg;
  bu_rng rng;
  bu_rng_init(&rng, G.seed, (uint64_t)w->index);
  pthread_barrier_wait(&G.start);
  w->span.start = bu_now();
  for (long i = 0; i < w->n; i++) w->slot[i] = fill(&rng);
  for (long k = 0; k < G.ops_per_thread; k++) {
    long i = (long)bu_rand_below(&rng, (uint64_t)w->n);
    bu_free_checked(w->slot[i]);
    w->slot[i] = fill(&rng);
  }
  for (long i = 0; i < w->n; i++) bu_free_checked(w->slot[i]);
  w->span.end = bu_now();
  return NULL;
}

static long minor_faults(void) {
  struct rusage ru;
  return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_minflt : 0;
}

int main(int argc, char **argv) {
  bu_common c = bu_common_defaults(1);
  long live = -1, ops = -1;
  double min_mb = -1, max_mb = -1;
  bool huge = false;
  const bu_opt opts[] = {
      {"huge", BU_OPT_FLAG, &huge, "largebuf-huge: 20 buffers of 5-25 MiB, 500 replacements"},
      {"live", BU_OPT_LONG, &live, "buffers held, over all threads (8; huge 20)"},
      {"ops", BU_OPT_LONG, &ops, "replacements over all threads (3000; huge 500; smoke 40)"},
      {"min", BU_OPT_DOUBLE, &min_mb, "smallest buffer, MiB (1; huge 5)"},
      {"max", BU_OPT_DOUBLE, &max_mb, "largest buffer, MiB (8; huge 25)"},
  };
  bu_parse_args(argc, argv,
                "largebuf: t threads each hold live/t buffers of min-max MiB and replace a\n"
                "random one at a time with a buffer of another random size.",
                &c, opts, (int)(sizeof opts / sizeof opts[0]));
  if (live < 0) live = c.smoke ? 4 : huge ? 20 : 8;            /* smoke: under 32 MiB */
  if (min_mb < 0) min_mb = huge && !c.smoke ? 5 : 1;
  if (max_mb < 0) max_mb = c.smoke ? 4 : huge ? 25 : 8;
  if (ops < 0) ops = bu_scaled(c.smoke ? 40 : huge ? 500 : 3000, c.scale, 1);
  if (live < 1 || ops < 1 || min_mb < 0.001 || max_mb < min_mb || max_mb > 1024)
    bu_die("bad parameters");
  const int t = c.threads;
  G.min = (size_t)(min_mb * 1048576);
  G.max = (size_t)(max_mb * 1048576);
  G.ops_per_thread = ops / t > 0 ? ops / t : 1;
  G.seed = c.seed;

  bu_warm_allocator();
  worker_t *ws = bu_map(sizeof(worker_t) * (size_t)t);
  pthread_t *tids = bu_map(sizeof(pthread_t) * (size_t)t);
  for (int i = 0; i < t; i++) {
    ws[i].index = i;
    ws[i].n = live / t + (i < live % t ? 1 : 0);
    if (ws[i].n < 1) ws[i].n = 1;
    ws[i].slot = bu_map(sizeof(void *) * (size_t)ws[i].n);
  }
  bu_barrier_init(&G.start, (unsigned)t + 1);
  for (int i = 0; i < t; i++) bu_thread_create(&tids[i], worker, &ws[i]);
  long faults0 = minor_faults();
  pthread_barrier_wait(&G.start);
  for (int i = 0; i < t; i++) bu_thread_join(tids[i]);
  long faults = minor_faults() - faults0;
  double secs = bu_span_seconds(&ws[0].span, sizeof ws[0], t);
  const char *name = huge ? "largebuf-huge" : "largebuf";
  bu_result(name, t, "time", secs, "s");
  bu_result(name, t, "throughput", (double)G.ops_per_thread * t / secs, "ops/s");
  bu_result(name, t, "faults", (double)faults, "faults");
  bu_result_peak_rss(name, t);
  return 0;
}
