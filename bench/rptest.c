/* rptest: in the shape of rpmalloc's benchmark (mimalloc-bench runs it as rptest): each
 * thread works in rounds; a round allocates --blocks blocks of random sizes (8 B .. --max-size,
 * default 16,000, skewed toward the small end: size = min + (max - min) * u^2 for u uniform in
 * [0, 1), so half the blocks are under a quarter of the range) and writes them, replaces
 * --ops of them at random (free, then malloc of a new size), frees the blocks the previous
 * thread in the ring handed it, and frees its own: all of them, except that every --cross-th
 * round it first hands a quarter of them to the next thread, which frees them in its next
 * round (a handoff that finds the last one still unclaimed frees that one itself). So every
 * round builds a working set and tears it down, as a server does per request, and a share
 * of the blocks is freed by a thread that did not allocate them. The blocks above 4 KiB are
 * a third of the count and most of the bytes. Each block gets its first and last bytes and a
 * byte per 4 KiB page written (bu_stamp_pages): a byte per cache line, as the other programs
 * write, would make this mostly a test of the memory bus at these sizes. Fixed total work
 * (--rounds over all threads). Result: time (s), throughput (malloc-free pairs per second,
 * all threads) and peak_rss.
 */
#include "bench_util.h"

static struct {
  long rounds, blocks, ops, cross;
  size_t min_size, max_size;
  uint64_t seed;
  int threads;
  pthread_barrier_t start;
} G;

typedef struct {
  _Atomic(void **) box;    /* blocks handed to this thread, NULL-terminated; NULL if none */
  char pad[56];
} BU_ALIGNED mailbox_t;
static mailbox_t *boxes;

typedef struct {
  bu_span span;
  int index;
  uint64_t sum;
} BU_ALIGNED worker_t;

static void *alloc_stamped(size_t size) {
  void *p = malloc(size);
  if (BU_UNLIKELY(p == NULL)) bu_oom(size);
  bu_stamp_pages(p, size);
  return p;
}

static size_t skewed_size(bu_rng *r) {
  double u = (double)(bu_rand(r) >> 11) * (1.0 / 9007199254740992.0);
  return G.min_size + (size_t)(u * u * (double)(G.max_size - G.min_size));
}

static uint64_t free_handoff(void **list) {
  uint64_t sum = 0;
  if (list == NULL) return 0;
  for (long i = 0; list[i] != NULL; i++) sum += bu_free_checked(list[i]);
  free(list);
  return sum;
}

static void *worker(void *arg) {
  worker_t *w = (worker_t *)arg;
  bu_rng rng;
  bu_rng_init(&rng, G.seed, (uint64_t)w->index);
  void **p = bu_map(sizeof(void *) * (size_t)G.blocks);
  uint64_t sum = 0;
  pthread_barrier_wait(&G.start);
  w->span.start = bu_now();
  for (long r = 0; r < G.rounds; r++) {
    for (long i = 0; i < G.blocks; i++) p[i] = alloc_stamped(skewed_size(&rng));
    for (long i = 0; i < G.ops; i++) {
      long k = (long)bu_rand_below(&rng, (uint64_t)G.blocks);
      sum += bu_free_checked(p[k]);
      p[k] = alloc_stamped(skewed_size(&rng));
    }
    sum += free_handoff(atomic_exchange_explicit(&boxes[w->index].box, NULL,
                                                 memory_order_acquire));
    long first = 0;
    if (G.threads > 1 && G.cross > 0 && r % G.cross == 0) {
      long q = G.blocks / 4;
      void **give = bu_malloc(sizeof(void *) * (size_t)(q + 1));
      for (long i = 0; i < q; i++) give[i] = p[i];
      give[q] = NULL;
      first = q;
      sum += free_handoff(atomic_exchange_explicit(&boxes[(w->index + 1) % G.threads].box,
                                                   give, memory_order_acq_rel));
    }
    for (long i = first; i < G.blocks; i++) sum += bu_free_checked(p[i]);
  }
  w->span.end = bu_now();
  w->sum = sum;
  bu_unmap(p, sizeof(void *) * (size_t)G.blocks);
  return NULL;
}

int main(int argc, char **argv) {
  bu_common c = bu_common_defaults(1);
  long rounds = -1, blocks = 1000, ops = 100, cross = 2, min_size = 8, max_size = 16000;
  const bu_opt opts[] = {
      {"rounds", BU_OPT_LONG, &rounds, "rounds over all threads (default 4,000, smoke 40)"},
      {"blocks", BU_OPT_LONG, &blocks, "blocks a round allocates (1,000)"},
      {"ops", BU_OPT_LONG, &ops, "random replacements a round (100)"},
      {"cross", BU_OPT_LONG, &cross, "every N-th round hands a quarter on (2; 0: never)"},
      {"min-size", BU_OPT_LONG, &min_size, "smallest block size in bytes (8)"},
      {"max-size", BU_OPT_LONG, &max_size, "largest block size in bytes (16,000)"},
  };
  bu_parse_args(argc, argv,
                "rptest: rounds that build a working set of 8 B - 16 KB blocks and tear it\n"
                "down, handing a share to the next thread (after rpmalloc's benchmark).",
                &c, opts, (int)(sizeof opts / sizeof opts[0]));
  if (rounds < 0) rounds = bu_scaled(c.smoke ? 40 : 4000, c.scale, 4);
  const int t = c.threads;
  rounds /= t;
  if (rounds < 1 || blocks < 4 || ops < 0 || cross < 0 || min_size < 8 || max_size <= min_size)
    bu_die("bad parameters");
  G.rounds = rounds;
  G.blocks = blocks;
  G.ops = ops;
  G.cross = cross;
  G.min_size = (size_t)min_size;
  G.max_size = (size_t)max_size;
  G.seed = c.seed;
  G.threads = t;
  boxes = bu_map(sizeof(mailbox_t) * (size_t)t);

  bu_warm_allocator();
  worker_t *ws = bu_map(sizeof(worker_t) * (size_t)t);
  for (int i = 0; i < t; i++) ws[i].index = i;
  bu_run_workers(t, worker, ws, sizeof ws[0], &G.start);
  uint64_t sum = 0;
  for (int i = 0; i < t; i++) {
    sum += ws[i].sum;
    sum += free_handoff(atomic_exchange_explicit(&boxes[i].box, NULL, memory_order_acquire));
  }
  double secs = bu_span_seconds(&ws[0].span, sizeof ws[0], t);
  bu_sink(sum);
  bu_result("rptest", t, "time", secs, "s");
  bu_result_spans("rptest", t, &ws[0].span, sizeof ws[0], t);
  bu_result("rptest", t, "throughput", (double)rounds * t * (double)(blocks + ops) / secs,
            "ops/s");
  bu_result_peak_rss("rptest", t);
  return 0;
}
