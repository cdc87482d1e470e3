/* xmalloc: after xmalloc-test (Lever & Boreham, "malloc() Performance in a Multithreaded Linux
 * Environment", 2000; also in mimalloc-bench): threads allocate blocks in batches and hand
 * them to one another through a shared queue, so that most blocks are freed by a thread that
 * did not allocate them, in whole batches.
 *
 * Each thread repeats: take the oldest batch from the queue (if any) and free its blocks;
 * allocate a batch of --batch blocks of random sizes (uniform, 8 B .. --max-size, default
 * 4 KiB: most blocks land in the classes above 1 KiB, whose superblocks hold few blocks) and
 * write them; put it on the queue (at most --queue batches wait; when it is full, the thread
 * frees the oldest batch first). With one thread, a thread frees its own batches (the
 * baseline); with more, a batch is freed by whichever thread comes next. The total number of
 * batches (--batches, over all threads) is fixed. Result: time (s), throughput (malloc-free
 * pairs per second, all threads) and peak_rss.
 */
#include "bench_util.h"

typedef struct batch_s {
  void **blocks;
} batch_t;

static struct {
  long batches_per_thread, batch, queue_cap;
  size_t max_size;
  uint64_t seed;
  pthread_barrier_t start;
  pthread_mutex_t lock;     /* guards the queue */
  batch_t **queue;          /* ring of queue_cap batches */
  long head, count;
} G;

typedef struct {
  bu_span span;
  int index;
  uint64_t sum;
} BU_ALIGNED worker_t;

static batch_t *queue_take(void) {
  batch_t *b = NULL;
  pthread_mutex_lock(&G.lock);
  if (G.count > 0) {
    b = G.queue[G.head];
    G.head = (G.head + 1) % G.queue_cap;
    G.count--;
  }
  pthread_mutex_unlock(&G.lock);
  return b;
}

static bool queue_put(batch_t *b) {
  bool ok = false;
  pthread_mutex_lock(&G.lock);
  if (G.count < G.queue_cap) {
    G.queue[(G.head + G.count) % G.queue_cap] = b;
    G.count++;
    ok = true;
  }
  pthread_mutex_unlock(&G.lock);
  return ok;
}

static uint64_t batch_free(batch_t *b) {
  uint64_t sum = 0;
  for (long i = 0; i < G.batch; i++) sum += bu_free_checked(b->blocks[i]);
  free(b->blocks);
  free(b);
  return sum;
}

static void *worker(void *arg) {
  worker_t *w = (worker_t *)arg;
  bu_rng rng;
  bu_rng_init(&rng, G.seed, (uint64_t)w->index);
  uint64_t sum = 0;
  pthread_barrier_wait(&G.start);
  w->span.start = bu_now();
  for (long r = 0; r < G.batches_per_thread; r++) {
    batch_t *old = queue_take();
    if (old) sum += batch_free(old);
    batch_t *b = bu_malloc(sizeof *b);
    b->blocks = bu_malloc(sizeof(void *) * (size_t)G.batch);
    for (long i = 0; i < G.batch; i++)
      b->blocks[i] = bu_alloc_stamped((size_t)bu_rand_range(&rng, 8, G.max_size));
    while (!queue_put(b))
      if ((old = queue_take()) != NULL) sum += batch_free(old);
  }
  w->span.end = bu_now();
  w->sum = sum;
  return NULL;
}

int main(int argc, char **argv) {
  bu_common c = bu_common_defaults(1);
  long batches = -1, batch = 256, queue = 64, max_size = 4096;
  const bu_opt opts[] = {
      {"batches", BU_OPT_LONG, &batches, "batches over all threads (default 40k, smoke 400)"},
      {"batch", BU_OPT_LONG, &batch, "blocks per batch (256)"},
      {"queue", BU_OPT_LONG, &queue, "batches the queue holds at most (64)"},
      {"max-size", BU_OPT_LONG, &max_size, "largest block size in bytes (4096)"},
  };
  bu_parse_args(argc, argv,
                "xmalloc: threads allocate batches of blocks and free each other's, through a\n"
                "shared queue (after xmalloc-test, Lever & Boreham).",
                &c, opts, (int)(sizeof opts / sizeof opts[0]));
  if (batches < 0) batches = bu_scaled(c.smoke ? 400 : 40000, c.scale, 10);
  if (batches < 1 || batch < 1 || queue < 1 || max_size < 8) bu_die("bad parameters");
  const int t = c.threads;
  G.batches_per_thread = batches / t;
  G.batch = batch;
  G.queue_cap = queue;
  G.max_size = (size_t)max_size;
  G.seed = c.seed;
  G.queue = bu_map(sizeof(batch_t *) * (size_t)queue);
  pthread_mutex_init(&G.lock, NULL);

  bu_warm_allocator();
  worker_t *ws = bu_map(sizeof(worker_t) * (size_t)t);
  pthread_t *tids = bu_map(sizeof(pthread_t) * (size_t)t);
  bu_barrier_init(&G.start, (unsigned)t + 1);
  for (int i = 0; i < t; i++) {
    ws[i].index = i;
    bu_thread_create(&tids[i], worker, &ws[i]);
  }
  pthread_barrier_wait(&G.start);
  uint64_t sum = 0;
  for (int i = 0; i < t; i++) {
    bu_thread_join(tids[i]);
    sum += ws[i].sum;
  }
  double secs = bu_span_seconds(&ws[0].span, sizeof ws[0], t);
  for (batch_t *b; (b = queue_take()) != NULL;) sum += batch_free(b);
  bu_sink(sum);
  bu_result("xmalloc", t, "time", secs, "s");
  bu_result_spans("xmalloc", t, &ws[0].span, sizeof ws[0], t);
  bu_result("xmalloc", t, "throughput", (double)G.batches_per_thread * t * (double)batch / secs,
            "ops/s");
  bu_result_peak_rss("xmalloc", t);
  return 0;
}
