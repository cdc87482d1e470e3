/* larson: the server simulation of Larson & Krishnan (ISMM 1998), as also run in the Hoard
 * paper (section 5.2) and by Bannatyne & Hollbach.
 *
 * t "lanes" run concurrently. A lane's thread holds a set of live blocks; it performs random
 * replacements (free a randomly chosen block, allocate a new one of random size and write
 * into it: one "malloc-free pair"). After --rounds replacements it starts a new thread, hands
 * it all its live blocks and exits, so blocks "bleed" from thread to thread (blocks/rounds of
 * the blocks a thread allocates are freed by another thread: 2% by default, as in the paper).
 * After --seconds the lanes stop; the result is malloc-free pairs per second.
 *
 * Variants: larson-small (10-100 B, 10,000 blocks per thread: the Hoard setting) and, with
 * --large, larson-large (10-1000 B, 1,000 blocks per thread: the LKmalloc paper's setting).
 *
 * Memory utilization (the paper's third metric): bytes the program has live at the end (sum
 * of requested sizes) divided by the RSS the process gained since just before the first block
 * was allocated (/proc/self/statm, read after all lanes stopped, blocks still live). RSS
 * growth counts the allocator's metadata, thread caches and fragmentation, like the paper's
 * "arena size".
 *
 * Latency: every 64th malloc and free is timed (TSC, converted to ns); p50/p99/p99.9/max.
 */
#include "bench_util.h"

typedef struct {
  void **blocks;    /* the lane's live blocks (bu_map) */
  uint64_t live_bytes;
  uint64_t ops;     /* replacements done by the lane's finished threads */
  uint64_t threads; /* threads the lane has run */
  bu_rng rng;
  bu_hist *hmalloc, *hfree;
  pthread_t prev;   /* the thread that handed the blocks over (joined by its successor) */
  pthread_t cur;    /* the lane's newest thread (read by main once 'done' is set) */
  double start;     /* when the lane's first thread passed the start barrier */
  bool has_prev;
  _Atomic int done; /* set by the lane's last thread, after which the lane is quiet */
} BU_ALIGNED lane_t;

static struct {
  long blocks, rounds, min, max;
  bool latency;
  _Atomic int stop;
  pthread_barrier_t start;
} G;

static void *lane_thread(void *arg) {
  lane_t *L = (lane_t *)arg;
  if (L->has_prev) {
    bu_thread_join(L->prev); /* the predecessor has exited; its writes to *L are visible */
  } else {
    for (long i = 0; i < G.blocks; i++) {
      size_t size = (size_t)bu_rand_range(&L->rng, (uint64_t)G.min, (uint64_t)G.max);
      L->blocks[i] = bu_alloc_stamped(size);
      L->live_bytes += size;
    }
    pthread_barrier_wait(&G.start);
    L->start = bu_now();
  }
  L->threads++;
  bu_rng *rng = &L->rng;
  void **blocks = L->blocks;
  const uint64_t nblocks = (uint64_t)G.blocks, lo = (uint64_t)G.min, hi = (uint64_t)G.max;
  uint64_t live = L->live_bytes, ops = 0;
  bool stopped = false;
  for (long r = 0; r < G.rounds; r++) {
    if ((r & 63) == 0) {
      if (atomic_load_explicit(&G.stop, memory_order_relaxed)) {
        stopped = true;
        break;
      }
      if (G.latency) { /* a timed replacement */
        uint64_t k = bu_rand_below(rng, nblocks);
        size_t size = (size_t)bu_rand_range(rng, lo, hi);
        void *old = blocks[k];
        live -= bu_check(old, "before free");
        uint64_t t0 = bu_ticks();
        free(old);
        uint64_t t1 = bu_ticks();
        void *p = malloc(size);
        uint64_t t2 = bu_ticks();
        bu_need(p, size);
        bu_stamp(p, size);
        blocks[k] = p;
        live += size;
        bu_hist_add(L->hfree, bu_ticks_to_ns(t1 - t0));
        bu_hist_add(L->hmalloc, bu_ticks_to_ns(t2 - t1));
        ops++;
        continue;
      }
    }
    uint64_t k = bu_rand_below(rng, nblocks);
    size_t size = (size_t)bu_rand_range(rng, lo, hi);
    live -= bu_free_checked(blocks[k]);
    blocks[k] = bu_alloc_stamped(size);
    live += size;
    ops++;
  }
  L->ops += ops;
  L->live_bytes = live;
  if (!stopped && atomic_load_explicit(&G.stop, memory_order_relaxed)) stopped = true;
  if (stopped) {
    atomic_store_explicit(&L->done, 1, memory_order_release);
    return NULL;
  }
  /* Hand the blocks to a new thread ("request") and exit. */
  L->prev = pthread_self();
  L->has_prev = true;
  bu_thread_create(&L->cur, lane_thread, L);
  return NULL;
}

int main(int argc, char **argv) {
  bu_common c = bu_common_defaults(1);
  bool large = false, no_latency = false;
  double seconds = -1;
  G.blocks = -1;
  G.rounds = -1;
  G.min = -1;
  G.max = -1;
  const bu_opt opts[] = {
      {"large", BU_OPT_FLAG, &large, "larson-large: sizes 10-1000 B, 1000 blocks per thread"},
      {"seconds", BU_OPT_DOUBLE, &seconds, "run time (default 2, smoke 0.15; times --scale)"},
      {"blocks", BU_OPT_LONG, &G.blocks, "live blocks per thread (default 10000, large 1000)"},
      {"rounds", BU_OPT_LONG, &G.rounds, "replacements per thread before it hands over (50 x blocks)"},
      {"min", BU_OPT_LONG, &G.min, "smallest block size (default 10)"},
      {"max", BU_OPT_LONG, &G.max, "largest block size (default 100, large 1000)"},
      {"no-latency", BU_OPT_FLAG, &no_latency, "do not sample malloc/free latencies"},
  };
  bu_parse_args(argc, argv,
                "Larson & Krishnan's server benchmark: threads doing random replacements hand\n"
                "their live blocks to a new thread; malloc-free pairs per second.",
                &c, opts, (int)(sizeof opts / sizeof opts[0]));
  const char *name = large ? "larson-large" : "larson-small";
  if (G.min < 0) G.min = 10;
  if (G.max < 0) G.max = large ? 1000 : 100;
  if (G.blocks < 0) G.blocks = large ? (c.smoke ? 200 : 1000) : (c.smoke ? 1000 : 10000);
  if (G.rounds < 0) G.rounds = 50 * G.blocks;
  if (seconds < 0) seconds = c.smoke ? 0.15 : 2.0;
  seconds *= c.scale;
  if (G.min < 8 || G.max < G.min || G.blocks < 1 || G.rounds < 1 || seconds <= 0)
    bu_die("bad parameters: need 8 <= min <= max, blocks >= 1, rounds >= 1, seconds > 0");
  G.latency = !no_latency;
  const int t = c.threads;

  bu_ticks_calibrate();
  bu_warm_allocator();
  lane_t *lanes = bu_map(sizeof(lane_t) * (size_t)t);
  for (int i = 0; i < t; i++) {
    lane_t *L = &lanes[i];
    L->blocks = bu_map(sizeof(void *) * (size_t)G.blocks);
    L->hmalloc = bu_map(sizeof(bu_hist));
    L->hfree = bu_map(sizeof(bu_hist));
    bu_prefault(L->blocks, sizeof(void *) * (size_t)G.blocks);
    bu_prefault(L->hmalloc, sizeof(bu_hist));
    bu_prefault(L->hfree, sizeof(bu_hist));
    bu_rng_init(&L->rng, c.seed, (uint64_t)i);
  }
  long rss_base = bu_rss_kib();
  bu_barrier_init(&G.start, (unsigned)t + 1);
  for (int i = 0; i < t; i++) bu_thread_create(&lanes[i].cur, lane_thread, &lanes[i]);
  pthread_barrier_wait(&G.start);
  bu_sleep_until(bu_now() + seconds);
  atomic_store_explicit(&G.stop, 1, memory_order_release);
  double t1 = bu_now();
  for (int i = 0; i < t; i++) {
    while (!atomic_load_explicit(&lanes[i].done, memory_order_acquire)) bu_sleep(0.0005);
    bu_thread_join(lanes[i].cur);
  }
  /* from the earliest lane start (the main thread may have run late after the barrier) */
  double t0 = lanes[0].start;
  for (int i = 1; i < t; i++)
    if (lanes[i].start < t0) t0 = lanes[i].start;
  long rss_end = bu_rss_kib();

  uint64_t ops = 0, threads_run = 0, live = 0;
  bu_hist *hm = bu_map(sizeof(bu_hist)), *hf = bu_map(sizeof(bu_hist));
  for (int i = 0; i < t; i++) {
    ops += lanes[i].ops;
    threads_run += lanes[i].threads;
    live += lanes[i].live_bytes;
    bu_hist_merge(hm, lanes[i].hmalloc);
    bu_hist_merge(hf, lanes[i].hfree);
  }
  double held = (double)(rss_end - rss_base) * 1024.0;
  bu_result(name, t, "throughput", (double)ops / (t1 - t0), "ops/s");
  bu_result(name, t, "utilization", held > 0 ? (double)live / held : 0.0, "ratio");
  bu_result(name, t, "live", (double)live / 1024.0, "KiB");
  bu_result(name, t, "rss_growth", (double)(rss_end - rss_base), "KiB");
  bu_result(name, t, "threads_created", (double)threads_run, "count");
  if (G.latency) {
    bu_result_latency(name, t, "malloc", hm);
    bu_result_latency(name, t, "free", hf);
  }
  bu_result_peak_rss(name, t);

  if (!c.keep_live)
    for (int i = 0; i < t; i++)
      for (long k = 0; k < G.blocks; k++) bu_free_checked(lanes[i].blocks[k]);
  return 0;
}
