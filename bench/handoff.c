/* handoff: blocks handed one at a time from the threads that allocate them to the threads
 * that free them, through lock-free single-producer single-consumer rings: a server's network
 * thread passing each request to a worker, workers passing log records or responses to one
 * writer thread. Unlike blowup-pc and xmalloc, which hand over batches under a lock, here the
 * two sides run at once on different cores, each block crossing soon after it was allocated,
 * so whatever the allocator's malloc and free both touch (a block's page or superblock
 * descriptor, a shared counter) goes from core to core on every message.
 *
 *   --mode in (handoff-in): t-1 producers, one consumer that frees every message.
 *   --mode out (handoff-out): one producer, t-1 consumers; it fills each one's ring in turn,
 *     32 messages at a time.
 *   --mode in --min-size 65536 --max-size 262144 (handoff-medium): buffers, not messages
 *     (the suite runs 400k of them).
 * t=2 is one producer-consumer pair in both modes; t=1 is one thread that fills its own ring
 * and empties it when full (the serial baseline). A producer allocates messages of uniform
 * random size 32-512 B (--min-size, --max-size) and writes a header (the first 64 bytes); the
 * consumer checks the header's first two words and frees the message. A side that finds its ring full (or empty) yields the CPU.
 * 8 M messages in all (fixed total work). Metrics: time, throughput (messages per second),
 * peak_rss.
 *
 * Written when a test of this shape found trove 3x slower than tcmalloc with one pair: free
 * and malloc read and wrote the same cache line of the superblock's descriptor (see
 * docs/BENCHMARKS.md).
 */
#include "bench_util.h"

#define RING 1024                 /* messages a ring holds (a power of two) */
#define TURN 32                   /* out: messages to one consumer before the next */

typedef struct {
  BU_ALIGNED _Atomic long head;   /* consumed (the consumer writes it) */
  BU_ALIGNED _Atomic long tail;   /* published (the producer writes it) */
  BU_ALIGNED _Atomic int done;    /* the producer has published its last message */
  void *slot[RING];
} ring_t;

static struct {
  bool out;
  int threads;
  long per_producer;
  size_t min_size, max_size;
  uint64_t seed;
  ring_t *rings;                  /* in: one per producer; out: one per consumer */
  pthread_barrier_t start;
} G;

typedef struct {
  int index;
  bu_span span;
  uint64_t sum;
} BU_ALIGNED worker_t;

static void ring_put(ring_t *r, void *p) {
  long t = atomic_load_explicit(&r->tail, memory_order_relaxed);
  while (t - atomic_load_explicit(&r->head, memory_order_acquire) == RING) sched_yield();
  r->slot[t & (RING - 1)] = p;
  atomic_store_explicit(&r->tail, t + 1, memory_order_release);
}

/* Free what `r` holds; returns how many. */
static long ring_drain(ring_t *r, uint64_t *sum) {
  long h = atomic_load_explicit(&r->head, memory_order_relaxed);
  long t = atomic_load_explicit(&r->tail, memory_order_acquire);
  for (long i = h; i < t; i++) {
    uint64_t *m = r->slot[i & (RING - 1)];
    if (m[1] != m[0] + 1) bu_die("message %p corrupt: header %llx %llx", (void *)m,
                                 (unsigned long long)m[0], (unsigned long long)m[1]);
    *sum += m[0];
    free(m);
  }
  atomic_store_explicit(&r->head, t, memory_order_release);
  return t - h;
}

static void *message(bu_rng *rng, long i) {
  size_t size = (size_t)bu_rand_range(rng, G.min_size, G.max_size);
  uint64_t *m = bu_malloc(size);
  for (size_t w = 0; w < 8 && w * 8 < size; w++) m[w] = (uint64_t)i + w;
  return m;
}

/* Produce n messages into rings[0..nrings), TURN at a time to each. */
static void produce(int index, ring_t *rings, int nrings, long n) {
  bu_rng rng;
  bu_rng_init(&rng, G.seed, (uint64_t)index);
  int k = 0;
  for (long i = 0; i < n; i++) {
    ring_put(&rings[k], message(&rng, i));
    if (nrings > 1 && i % TURN == TURN - 1) k = k + 1 == nrings ? 0 : k + 1;
  }
  for (int j = 0; j < nrings; j++) atomic_store_explicit(&rings[j].done, 1, memory_order_release);
}

/* Free what rings[0..nrings) bring until every producer is done and they are empty. */
static uint64_t consume(ring_t *rings, int nrings) {
  uint64_t sum = 0;
  for (;;) {
    bool all_done = true;
    long got = 0;
    for (int j = 0; j < nrings; j++) {
      if (!atomic_load_explicit(&rings[j].done, memory_order_acquire)) all_done = false;
      got += ring_drain(&rings[j], &sum);
    }
    if (got == 0) {
      if (all_done) break;        /* done was seen before the drain that found nothing */
      sched_yield();
    }
  }
  return sum;
}

static void *worker(void *arg) {
  worker_t *w = arg;
  int t = G.threads;
  pthread_barrier_wait(&G.start);
  w->span.start = bu_now();
  if (t == 1) {                   /* fill the ring, then empty it */
    bu_rng rng;
    bu_rng_init(&rng, G.seed, 0);
    ring_t *r = &G.rings[0];
    for (long i = 0; i < G.per_producer; i++) {
      if (atomic_load_explicit(&r->tail, memory_order_relaxed) -
              atomic_load_explicit(&r->head, memory_order_relaxed) == RING)
        ring_drain(r, &w->sum);
      ring_put(r, message(&rng, i));
    }
    ring_drain(r, &w->sum);
  } else if (!G.out) {            /* in: workers 0..t-2 produce, t-1 consumes */
    if (w->index < t - 1) produce(w->index, &G.rings[w->index], 1, G.per_producer);
    else w->sum = consume(G.rings, t - 1);
  } else {                        /* out: worker 0 produces, 1..t-1 consume */
    if (w->index == 0) produce(0, G.rings, t - 1, G.per_producer);
    else w->sum = consume(&G.rings[w->index - 1], 1);
  }
  w->span.end = bu_now();
  return NULL;
}

int main(int argc, char **argv) {
  bu_common c = bu_common_defaults(2);
  const char *mode = "in";
  long messages = -1, min_size = 32, max_size = 512;
  const bu_opt opts[] = {
      {"mode", BU_OPT_STRING, &mode, "in (t-1 producers, 1 consumer) or out (1 producer)"},
      {"messages", BU_OPT_LONG, &messages, "messages in all (default 8M, smoke 80k)"},
      {"min-size", BU_OPT_LONG, &min_size, "smallest message in bytes (32)"},
      {"max-size", BU_OPT_LONG, &max_size, "largest message in bytes (512)"},
  };
  bu_parse_args(argc, argv,
                "handoff: producers hand each block to the consumer that frees it, through\n"
                "lock-free rings, one message at a time.",
                &c, opts, (int)(sizeof opts / sizeof opts[0]));
  if (strcmp(mode, "in") == 0) G.out = false;
  else if (strcmp(mode, "out") == 0) G.out = true;
  else bu_die("--mode must be in or out");
  if (messages < 0) messages = bu_scaled(c.smoke ? 80000 : 8000000, c.scale, 1000);
  if (messages < 1 || min_size < 16 || max_size < min_size) bu_die("bad parameters");
  G.min_size = (size_t)min_size;
  G.max_size = (size_t)max_size;
  const int t = c.threads;
  /* the suite's variants: 32-512 B messages, and 64-256 KiB buffers handed in */
  const char *name = G.out ? "handoff-out" : "handoff-in";
  if (!G.out && min_size == 65536 && max_size == 262144) name = "handoff-medium";
  int producers = t == 1 ? 1 : G.out ? 1 : t - 1;
  int nrings = t == 1 ? 1 : t - 1;
  G.threads = t;
  G.per_producer = messages / producers;
  G.seed = c.seed;
  G.rings = bu_map(sizeof(ring_t) * (size_t)nrings);

  bu_warm_allocator();
  worker_t *ws = bu_map(sizeof(worker_t) * (size_t)t);
  pthread_t *tids = bu_map(sizeof(pthread_t) * (size_t)t);
  pthread_barrier_init(&G.start, NULL, (unsigned)t);
  for (int i = 0; i < t; i++) {
    ws[i].index = i;
    bu_thread_create(&tids[i], worker, &ws[i]);
  }
  uint64_t sum = 0;
  for (int i = 0; i < t; i++) {
    bu_thread_join(tids[i]);
    sum += ws[i].sum;
  }
  bu_sink(sum);
  double secs = bu_span_seconds(&ws[0].span, sizeof ws[0], t);
  bu_result(name, t, "time", secs, "s");
  bu_result_spans(name, t, &ws[0].span, sizeof ws[0], t);
  bu_result(name, t, "throughput", (double)G.per_producer * producers / secs, "ops/s");
  bu_result_peak_rss(name, t);
  return 0;
}
