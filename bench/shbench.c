/* shbench: a version of MicroQuill's SmartHeap stress test as the Hoard paper describes it
 * (section 5.2): each thread repeatedly allocates randomly-sized blocks and frees them in
 * random order, many staying live for a while.
 *
 * Each thread owns --slots slots. A round fills every empty slot with a new block of random
 * size (written), then visits all slots in a random order (random start, random odd stride)
 * and frees each block with probability 1/2. Lifetimes are thus geometric (some blocks live
 * many rounds), frees come in random order and the heap stays about half full. The total
 * number of blocks allocated (--blocks, over all threads) is the same for every t.
 *
 * Variants: shbench-small (8-100 B, uniform, as in the Hoard paper) and, with --wide,
 * shbench-large (8 B - 16 KiB, log-uniform: many size classes, a few page-sized blocks).
 * Result: time (s) and throughput (malloc-free pairs per second).
 */
#include "bench_util.h"

static struct {
  long slots, per_thread;
  bool wide;
  uint64_t seed;
  pthread_barrier_t start;
} G;

typedef struct {
  bu_span span;
  int index;
  void **slots;
} BU_ALIGNED worker_t;

static void *worker(void *arg) {
  worker_t *w = (worker_t *)arg;
  bu_rng rng;
  bu_rng_init(&rng, G.seed, (uint64_t)w->index);
  void **s = w->slots;
  const uint64_t n = (uint64_t)G.slots; /* a power of two: odd strides visit every slot */
  long allocated = 0;
  pthread_barrier_wait(&G.start);
  w->span.start = bu_now();
  while (allocated < G.per_thread) {
    for (uint64_t i = 0; i < n; i++) {
      if (s[i]) continue;
      size_t size = G.wide ? (size_t)bu_rand_logsize(&rng, 8, 16384)
                           : (size_t)bu_rand_range(&rng, 8, 100);
      s[i] = bu_alloc_stamped(size);
      allocated++;
    }
    uint64_t start = bu_rand_below(&rng, n), stride = bu_rand(&rng) | 1;
    uint64_t coin = 0;
    for (uint64_t k = 0; k < n; k++) {
      if ((k & 63) == 0) coin = bu_rand(&rng);
      uint64_t i = (start + k * stride) & (n - 1);
      if (s[i] && ((coin >> (k & 63)) & 1)) {
        bu_free_checked(s[i]);
        s[i] = NULL;
      }
    }
  }
  for (uint64_t i = 0; i < n; i++)
    if (s[i]) {
      bu_free_checked(s[i]);
      s[i] = NULL;
    }
  w->span.end = bu_now();
  return NULL;
}

int main(int argc, char **argv) {
  bu_common c = bu_common_defaults(1);
  long blocks = -1, slots = 1024;
  bool wide = false;
  const bu_opt opts[] = {
      {"wide", BU_OPT_FLAG, &wide, "shbench-large: sizes 8 B - 16 KiB (log-uniform)"},
      {"blocks", BU_OPT_LONG, &blocks, "blocks allocated over all threads (default 40M, wide 10M)"},
      {"slots", BU_OPT_LONG, &slots, "slots per thread, a power of two (1024)"},
  };
  bu_parse_args(argc, argv,
                "shbench-like stress test: threads allocate random-sized blocks and free them in\n"
                "random order.",
                &c, opts, (int)(sizeof opts / sizeof opts[0]));
  if (blocks < 0) blocks = bu_scaled(c.smoke ? 200000 : (wide ? 10000000 : 40000000), c.scale, 1000);
  if (slots < 2 || (slots & (slots - 1))) bu_die("--slots must be a power of two >= 2");
  const int t = c.threads;
  const char *name = wide ? "shbench-large" : "shbench-small";
  G.slots = slots;
  G.per_thread = blocks / t > 0 ? blocks / t : 1;
  G.wide = wide;
  G.seed = c.seed;

  bu_warm_allocator();
  worker_t *ws = bu_map(sizeof(worker_t) * (size_t)t);
  for (int i = 0; i < t; i++) {
    ws[i].index = i;
    ws[i].slots = bu_map(sizeof(void *) * (size_t)slots);
  }
  bu_run_workers(t, worker, ws, sizeof ws[0], &G.start);
  double secs = bu_span_seconds(&ws[0].span, sizeof ws[0], t);
  bu_result(name, t, "time", secs, "s");
  bu_result_spans(name, t, &ws[0].span, sizeof ws[0], t);
  bu_result(name, t, "throughput", (double)G.per_thread * t / secs, "ops/s");
  bu_result_peak_rss(name, t);
  return 0;
}
