/* blowup: memory consumed against memory live under the two producer-consumer patterns of
 * the Hoard paper (section 2.2 and section 6), which make some allocators' footprint grow
 * with the number of threads (O(P) blowup) or with the length of the run (unbounded).
 *
 *   --mode pc (blowup-pc): producer-consumer pairs. Each producer allocates batches of blocks,
 *     writes them and queues them (at most --queue batches) to its consumer, which frees
 *     them. t threads form t/2 pairs (odd t: the extra thread idles); t=1 is one thread that
 *     produces and consumes itself (the baseline). The batches of the short run (--rounds)
 *     are divided among the pairs, so the total work does not grow with t. An allocator
 *     that puts the consumer's frees where the producer cannot reuse them (pure private
 *     heaps) grows without bound.
 *   --mode rr (blowup-rr): the round-robin of Hoard section 6. t threads in a ring pass a
 *     token; the holder frees the batch it received, allocates a new batch of K blocks and
 *     passes both on. The program never has more than K blocks live, but an allocator whose
 *     per-thread heaps each keep the blocks freed into them holds about t*K (O(P) blowup).
 *
 * Each run is a short run followed, in the same process, by three times more work: the
 * program reports peak RSS after the short run and at the end (4x the short run), so that
 * growth with run length shows.
 *   blowup        = (peak RSS - RSS before the first block) / peak live bytes (whole run)
 *   blowup_short  = the same after the short run
 *   blowup_growth = (peak RSS - base) at the end / (peak RSS - base) after the short run
 *                   (1.0: the footprint is bounded; > 1: it grows with the run's length)
 * Live bytes are the requested sizes of the blocks allocated and not yet freed. Peak RSS is
 * VmHWM from /proc/self/status (the number /usr/bin/time reports, measured from inside).
 */
#include "bench_util.h"

static struct {
  bool rr;
  long batch, queue, short_batches; /* pc: batches per producer in the short run */
  long short_turns;                 /* rr: turns in the short run */
  uint64_t seed;
  _Atomic int64_t live;
  _Atomic int64_t live_peak;
  int64_t live_peak_short;
  long peak_short_kib;
  pthread_barrier_t phase; /* all threads + main: start, end of short run, go on */
} G;

static inline void live_add(int64_t d) {
  int64_t v = atomic_fetch_add_explicit(&G.live, d, memory_order_relaxed) + d;
  int64_t p = atomic_load_explicit(&G.live_peak, memory_order_relaxed);
  while (v > p && !atomic_compare_exchange_weak_explicit(&G.live_peak, &p, v, memory_order_relaxed,
                                                          memory_order_relaxed)) {
  }
}

static int64_t alloc_batch(bu_rng *rng, void **b, long n) {
  int64_t bytes = 0;
  for (long i = 0; i < n; i++) {
    size_t size = (size_t)bu_rand_range(rng, 16, 1024);
    b[i] = bu_alloc_stamped(size);
    bytes += (int64_t)size;
  }
  return bytes;
}

static int64_t free_batch(void **b, long n) {
  int64_t bytes = 0;
  for (long i = 0; i < n; i++) {
    if (!b[i]) continue;
    bytes += (int64_t)bu_free_checked(b[i]);
    b[i] = NULL;
  }
  return bytes;
}

/* The main thread's part at the end of the short run (every worker waits meanwhile). */
static void phase_short_end(void) {
  pthread_barrier_wait(&G.phase); /* all workers are done with the short run */
  pthread_barrier_wait(&G.phase); /* main has measured */
}

/* ------------------------------------------------------------ producer-consumer */

typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t not_full, not_empty;
  long head, tail; /* batches published / consumed, under lock */
  void ***slots;   /* queue slots, each an array of G.batch pointers (bu_map) */
  int index;
} BU_ALIGNED pair_t;

static void pc_put_wait(pair_t *q) {
  pthread_mutex_lock(&q->lock);
  while (q->head - q->tail >= G.queue) pthread_cond_wait(&q->not_full, &q->lock);
  pthread_mutex_unlock(&q->lock);
}

static void pc_put_publish(pair_t *q) {
  pthread_mutex_lock(&q->lock);
  q->head++;
  pthread_cond_signal(&q->not_empty);
  pthread_mutex_unlock(&q->lock);
}

static void pc_get_wait(pair_t *q) {
  pthread_mutex_lock(&q->lock);
  while (q->tail == q->head) pthread_cond_wait(&q->not_empty, &q->lock);
  pthread_mutex_unlock(&q->lock);
}

static void pc_get_release(pair_t *q) {
  pthread_mutex_lock(&q->lock);
  q->tail++;
  pthread_cond_signal(&q->not_full);
  pthread_mutex_unlock(&q->lock);
}

static void *producer(void *arg) {
  pair_t *q = (pair_t *)arg;
  bu_rng rng;
  bu_rng_init(&rng, G.seed, (uint64_t)q->index);
  pthread_barrier_wait(&G.phase);
  for (long i = 0; i < 4 * G.short_batches; i++) {
    if (i == G.short_batches) phase_short_end();
    pc_put_wait(q);
    live_add(alloc_batch(&rng, q->slots[i % G.queue], G.batch));
    pc_put_publish(q);
  }
  return NULL;
}

static void *consumer(void *arg) {
  pair_t *q = (pair_t *)arg;
  pthread_barrier_wait(&G.phase);
  for (long i = 0; i < 4 * G.short_batches; i++) {
    if (i == G.short_batches) phase_short_end();
    pc_get_wait(q);
    live_add(-free_batch(q->slots[i % G.queue], G.batch));
    pc_get_release(q);
  }
  return NULL;
}

/* t == 1: one thread produces into its queue and, when it is full, consumes the oldest. */
static void *solo(void *arg) {
  pair_t *q = (pair_t *)arg;
  bu_rng rng;
  bu_rng_init(&rng, G.seed, 0);
  pthread_barrier_wait(&G.phase);
  long tail = 0;
  for (long i = 0; i < 4 * G.short_batches; i++) {
    if (i == G.short_batches) phase_short_end();
    if (i - tail >= G.queue) {
      live_add(-free_batch(q->slots[tail % G.queue], G.batch));
      tail++;
    }
    live_add(alloc_batch(&rng, q->slots[i % G.queue], G.batch));
  }
  for (; tail < 4 * G.short_batches; tail++) live_add(-free_batch(q->slots[tail % G.queue], G.batch));
  return NULL;
}

/* ------------------------------------------------------------ round robin */

static struct {
  pthread_mutex_t lock;
  pthread_cond_t *turn_cv; /* one per thread */
  int turn, nthreads;
  long turns_done;
  bool finished;
  void **batch; /* the batch in flight, touched only by the token holder */
} R;

typedef struct {
  int index;
} BU_ALIGNED ring_t;

static void *ring_member(void *arg) {
  ring_t *me = (ring_t *)arg;
  bu_rng rng;
  bu_rng_init(&rng, G.seed, (uint64_t)me->index);
  pthread_barrier_wait(&G.phase);
  for (;;) {
    pthread_mutex_lock(&R.lock);
    while (R.turn != me->index && !R.finished) pthread_cond_wait(&R.turn_cv[me->index], &R.lock);
    bool finished = R.finished;
    pthread_mutex_unlock(&R.lock);
    if (finished) break;
    live_add(-free_batch(R.batch, G.batch));
    live_add(alloc_batch(&rng, R.batch, G.batch));
    pthread_mutex_lock(&R.lock);
    R.turns_done++;
    if (R.turns_done == G.short_turns) {
      G.peak_short_kib = bu_peak_rss_kib();
      G.live_peak_short = atomic_load_explicit(&G.live_peak, memory_order_relaxed);
    }
    if (R.turns_done >= 4 * G.short_turns) {
      R.finished = true;
      for (int i = 0; i < R.nthreads; i++) pthread_cond_signal(&R.turn_cv[i]);
    } else {
      R.turn = (me->index + 1) % R.nthreads;
      pthread_cond_signal(&R.turn_cv[R.turn]);
    }
    pthread_mutex_unlock(&R.lock);
  }
  return NULL;
}

int main(int argc, char **argv) {
  bu_common c = bu_common_defaults(1);
  const char *mode = "pc";
  long batch = -1, queue = 16, rounds = -1;
  const bu_opt opts[] = {
      {"mode", BU_OPT_STRING, &mode, "pc (producer-consumer pairs) or rr (round-robin ring)"},
      {"batch", BU_OPT_LONG, &batch, "blocks per batch (pc 1024, rr 8192), 16-1024 B each"},
      {"queue", BU_OPT_LONG, &queue, "pc: batches a producer may have queued (16)"},
      {"rounds", BU_OPT_LONG, &rounds,
       "short run: pc batches over all producers (600), rr turns (200); long run = 4x"},
  };
  bu_parse_args(argc, argv,
                "Hoard's blowup patterns: producer-consumer pairs or a round-robin ring; peak RSS\n"
                "against peak live bytes, after a short run and after a run 4x longer.",
                &c, opts, (int)(sizeof opts / sizeof opts[0]));
  if (strcmp(mode, "pc") == 0)
    G.rr = false;
  else if (strcmp(mode, "rr") == 0)
    G.rr = true;
  else
    bu_die("--mode must be pc or rr");
  const char *name = G.rr ? "blowup-rr" : "blowup-pc";
  if (batch < 0) batch = G.rr ? (c.smoke ? 1024 : 8192) : (c.smoke ? 256 : 1024);
  if (rounds < 0) rounds = bu_scaled(G.rr ? (c.smoke ? 20 : 200) : (c.smoke ? 40 : 600), c.scale, 2);
  if (batch < 1 || queue < 1 || rounds < 1) bu_die("bad parameters");
  G.batch = batch;
  G.queue = queue;
  const int t0_threads = c.threads;
  /* pc: the short run's batches are shared among the pairs, so the total work (and the run
   * time) does not grow with t; each producer still fills its queue many times over. */
  G.short_batches = t0_threads >= 2 ? rounds / (t0_threads / 2) : rounds;
  if (G.short_batches < 2 * queue) G.short_batches = 2 * queue;
  G.short_turns = rounds;
  G.seed = c.seed;
  const int t = c.threads;

  bu_warm_allocator();
  pthread_t *tids = bu_map(sizeof(pthread_t) * (size_t)(t + 1));
  int nthreads = 0;
  pair_t *pairs = NULL;
  ring_t *ring = NULL;
  int npairs = t >= 2 ? t / 2 : 1;
  if (!G.rr) {
    pairs = bu_map(sizeof(pair_t) * (size_t)npairs);
    for (int p = 0; p < npairs; p++) {
      pthread_mutex_init(&pairs[p].lock, NULL);
      pthread_cond_init(&pairs[p].not_full, NULL);
      pthread_cond_init(&pairs[p].not_empty, NULL);
      pairs[p].index = p;
      pairs[p].slots = bu_map(sizeof(void **) * (size_t)queue);
      for (long s = 0; s < queue; s++) {
        pairs[p].slots[s] = bu_map(sizeof(void *) * (size_t)batch);
        bu_prefault(pairs[p].slots[s], sizeof(void *) * (size_t)batch);
      }
    }
    nthreads = t >= 2 ? 2 * npairs : 1;
  } else {
    pthread_mutex_init(&R.lock, NULL);
    R.turn_cv = bu_map(sizeof(pthread_cond_t) * (size_t)t);
    for (int i = 0; i < t; i++) pthread_cond_init(&R.turn_cv[i], NULL);
    R.nthreads = t;
    R.batch = bu_map(sizeof(void *) * (size_t)batch);
    bu_prefault(R.batch, sizeof(void *) * (size_t)batch);
    ring = bu_map(sizeof(ring_t) * (size_t)t);
    nthreads = t;
  }
  long rss_base = bu_rss_kib();
  bu_barrier_init(&G.phase, (unsigned)nthreads + 1);
  if (!G.rr) {
    if (t < 2) {
      bu_thread_create(&tids[0], solo, &pairs[0]);
    } else {
      for (int p = 0; p < npairs; p++) {
        bu_thread_create(&tids[2 * p], producer, &pairs[p]);
        bu_thread_create(&tids[2 * p + 1], consumer, &pairs[p]);
      }
    }
  } else {
    for (int i = 0; i < t; i++) {
      ring[i].index = i;
      bu_thread_create(&tids[i], ring_member, &ring[i]);
    }
  }
  double t0 = bu_now(); /* the workers wait at the barrier already, or nearly */
  pthread_barrier_wait(&G.phase);
  if (!G.rr) {
    pthread_barrier_wait(&G.phase); /* short run done */
    G.peak_short_kib = bu_peak_rss_kib();
    G.live_peak_short = atomic_load_explicit(&G.live_peak, memory_order_relaxed);
    pthread_barrier_wait(&G.phase);
  }
  for (int i = 0; i < nthreads; i++) bu_thread_join(tids[i]);
  double secs = bu_now() - t0;
  long peak = bu_peak_rss_kib();
  double live_peak = (double)atomic_load_explicit(&G.live_peak, memory_order_relaxed);
  double live_short = (double)G.live_peak_short;
  double b_short = live_short > 0 ? (double)(G.peak_short_kib - rss_base) * 1024.0 / live_short : 0;
  double b_long = live_peak > 0 ? (double)(peak - rss_base) * 1024.0 / live_peak : 0;
  bu_result(name, t, "blowup", b_long, "ratio");
  bu_result(name, t, "blowup_short", b_short, "ratio");
  double grown = (double)(peak - rss_base), grown_short = (double)(G.peak_short_kib - rss_base);
  bu_result(name, t, "blowup_growth", grown_short > 0 ? grown / grown_short : 0, "ratio");
  bu_result(name, t, "peak_rss", (double)peak, "KiB");
  bu_result(name, t, "peak_rss_short", (double)G.peak_short_kib, "KiB");
  bu_result(name, t, "live_peak", live_peak / 1024.0, "KiB");
  bu_result(name, t, "time", secs, "s");
  if (G.rr && !c.keep_live) free_batch(R.batch, G.batch);
  return 0;
}
