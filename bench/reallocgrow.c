/* reallocgrow: buffers grown by realloc, the way string builders, token buffers and growing
 * arrays of interpreters and servers use the allocator (request bodies read in pieces,
 * JSON or log lines assembled by appends).
 *
 * Each thread keeps --buffers buffers. An operation picks a random buffer and appends to it:
 * realloc to the new length, then write the appended bytes' first and last byte. Three kinds
 * of buffer, drawn when a buffer starts: 80% append 1-32 bytes at a time (a string builder),
 * 20% grow their capacity by half each time it is full (a vector; realloc only then). A
 * buffer is freed, and starts again empty, once it passes its target length, log-uniform in
 * 16 B - 16 KiB. So every block walks up through the size classes, most of the memory is
 * freed soon after it was allocated, and the live bytes stay about level: an allocator that
 * keeps what each class once held, or that cannot reuse blocks freed by a move for other
 * sizes, holds many times the live data.
 *
 * Threads share nothing. The total number of appends (--ops, over all threads) is fixed.
 * Result: time (s), throughput (appends per second, all threads), live_peak (KiB, the most
 * bytes live at once, summed over threads at the end of each thread's run: an estimate) and
 * peak_rss.
 */
#include "bench_util.h"

typedef struct {
  char *p;
  size_t len, cap, target;
  bool vector;
} buf_t;

static struct {
  long ops_per_thread, buffers;
  uint64_t seed;
  pthread_barrier_t start;
} G;

typedef struct {
  bu_span span;
  int index;
  size_t live_peak;
  uint64_t sum;
} BU_ALIGNED worker_t;

static void buf_start(bu_rng *rng, buf_t *b) {
  b->p = NULL;
  b->len = b->cap = 0;
  b->target = (size_t)bu_rand_logsize(rng, 16, 16 * 1024);
  b->vector = bu_rand_below(rng, 5) == 0;
}

static void *worker(void *arg) {
  worker_t *w = (worker_t *)arg;
  bu_rng rng;
  bu_rng_init(&rng, G.seed, (uint64_t)w->index);
  const long nb = G.buffers;
  buf_t *bufs = bu_map(sizeof(buf_t) * (size_t)nb);
  for (long i = 0; i < nb; i++) buf_start(&rng, &bufs[i]);
  size_t live = 0, peak = 0;
  uint64_t sum = 0;
  pthread_barrier_wait(&G.start);
  w->span.start = bu_now();
  for (long op = 0; op < G.ops_per_thread; op++) {
    buf_t *b = &bufs[bu_rand_below(&rng, (uint64_t)nb)];
    size_t add = 1 + (size_t)bu_rand_below(&rng, 32);
    size_t len = b->len + add;
    if (len > b->cap) {
      size_t cap = b->vector ? (b->cap < 16 ? 16 : b->cap + b->cap / 2) : len;
      if (cap < len) cap = len;
      char *q = realloc(b->p, cap);
      if (BU_UNLIKELY(q == NULL)) bu_oom(cap);
      if (b->len && BU_UNLIKELY(q[b->len - 1] != (char)(b->len - 1))) {
        fprintf(stderr, "reallocgrow: error: realloc lost the contents of a buffer\n");
        _exit(4);
      }
      live += cap - b->cap;
      if (live > peak) peak = live;
      b->p = q;
      b->cap = cap;
    }
    b->p[b->len] = (char)b->len;           /* first and last byte of what was appended */
    b->p[len - 1] = (char)(len - 1);
    b->len = len;
    if (len >= b->target) {
      sum += (unsigned char)b->p[len / 2];
      free(b->p);
      live -= b->cap;
      buf_start(&rng, b);
    }
  }
  w->span.end = bu_now();
  for (long i = 0; i < nb; i++) free(bufs[i].p);
  w->live_peak = peak;
  w->sum = sum;
  return NULL;
}

int main(int argc, char **argv) {
  bu_common c = bu_common_defaults(1);
  long ops = -1, buffers = 2000;
  const bu_opt opts[] = {
      {"ops", BU_OPT_LONG, &ops, "appends over all threads (default 20M, smoke 200k)"},
      {"buffers", BU_OPT_LONG, &buffers, "buffers per thread (2000)"},
  };
  bu_parse_args(argc, argv,
                "reallocgrow: buffers grown by realloc (string builders and growing arrays),\n"
                "freed and restarted past a random length.",
                &c, opts, (int)(sizeof opts / sizeof opts[0]));
  if (ops < 0) ops = bu_scaled(c.smoke ? 200000 : 20000000, c.scale, 1000);
  if (ops < 1 || buffers < 1) bu_die("bad parameters");
  const int t = c.threads;
  G.ops_per_thread = ops / t;
  G.buffers = buffers;
  G.seed = c.seed;

  bu_warm_allocator();
  worker_t *ws = bu_map(sizeof(worker_t) * (size_t)t);
  pthread_t *tids = bu_map(sizeof(pthread_t) * (size_t)t);
  bu_barrier_init(&G.start, (unsigned)t + 1);
  for (int i = 0; i < t; i++) {
    ws[i].index = i;
    bu_thread_create(&tids[i], worker, &ws[i]);
  }
  pthread_barrier_wait(&G.start);
  size_t live_peak = 0;
  uint64_t sum = 0;
  for (int i = 0; i < t; i++) {
    bu_thread_join(tids[i]);
    live_peak += ws[i].live_peak;
    sum += ws[i].sum;
  }
  bu_sink(sum);
  double secs = bu_span_seconds(&ws[0].span, sizeof ws[0], t);
  bu_result("reallocgrow", t, "time", secs, "s");
  bu_result("reallocgrow", t, "throughput", (double)G.ops_per_thread * t / secs, "ops/s");
  bu_result("reallocgrow", t, "live_peak", (double)live_peak / 1024.0, "KiB");
  bu_result_peak_rss("reallocgrow", t);
  return 0;
}
