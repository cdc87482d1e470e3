/* heads: reading the heads of many page-sized blocks, the layout a program gets.
 *
 * Each of t threads mallocs --blocks blocks (512), of 4, 8, 16 and 32 KiB in turn (or all of
 * --size), writes each whole, and then, --rounds times over all threads, reads the first word
 * of each block and adds it to the second, as a program does that keeps many chunks or nodes
 * with a header in front (an allocator of its own that carves 16 KiB chunks, like Tcl's; a
 * table of 8 KiB pages, each with a count at its start) and visits them in turn.
 *
 * What it tests: where the blocks start within their pages. An allocator that starts every
 * block of a multiple of 4 KiB on a page puts all their first lines in one set of the
 * first-level cache (8 ways, indexed by address bits 6-11) and few of the second, and each
 * visit misses; glibc's 16-byte chunk header shifts each block, jemalloc starts its blocks
 * from 16 KiB at a random line of an extra page, trove does so with TROVE_COLOUR=1 (see
 * docs/BENCHMARKS.md, "Fifty-fifth session"). No malloc or free is timed.
 * Result: time (s) and throughput (heads visited a second), peak RSS.
 */
#include "bench_util.h"

static struct {
  long blocks, rounds, size;
  pthread_barrier_t start;
} G;

typedef struct {
  bu_span span;
  int index, threads;
  unsigned long sum;
  long visits;
} BU_ALIGNED worker_t;

static const size_t mix[4] = {4096, 8192, 16384, 32768};

static void *worker(void *arg) {
  worker_t *w = (worker_t *)arg;
  long n = G.blocks;
  unsigned long **b = bu_map(sizeof *b * (size_t)n);
  for (long i = 0; i < n; i++) {
    size_t size = G.size ? (size_t)G.size : mix[i % 4];
    b[i] = malloc(size);
    if (BU_UNLIKELY(b[i] == NULL)) bu_oom(size);
    memset(b[i], (int)(i & 0xff), size);
    b[i][0] = (unsigned long)i;
  }
  long rounds = G.rounds / w->threads;
  if (rounds < 1) rounds = 1;
  unsigned long s = 0;
  pthread_barrier_wait(&G.start);
  w->span.start = bu_now();
  for (long r = 0; r < rounds; r++)
    for (long i = 0; i < n; i++) {
      s += b[i][0];
      b[i][1] += s;
    }
  w->span.end = bu_now();
  w->sum = s;
  w->visits = rounds * n;
  for (long i = 0; i < n; i++) free(b[i]);
  return NULL;
}

int main(int argc, char **argv) {
  bu_common c = bu_common_defaults(1);
  long blocks = 512, rounds = -1, size = 0;
  const bu_opt opts[] = {
      {"blocks", BU_OPT_LONG, &blocks, "blocks a thread keeps (default 512)"},
      {"rounds", BU_OPT_LONG, &rounds, "visits of every block, over all threads (default 100000)"},
      {"size", BU_OPT_LONG, &size, "block size in bytes (default 0: 4, 8, 16, 32 KiB in turn)"},
  };
  bu_parse_args(argc, argv,
                "Threads keep page-sized blocks and read the head of each in turn: where\n"
                "the allocator starts them within their pages.",
                &c, opts, (int)(sizeof opts / sizeof opts[0]));
  if (rounds < 0) rounds = c.smoke ? 200 : (long)(100000 * c.scale);
  if (rounds < 1 || blocks < 1 || blocks > (1L << 20) || size < 0 || size > (1L << 30) ||
      (size > 0 && size < 16))
    bu_die("bad parameters");
  G.blocks = blocks;
  G.rounds = rounds;
  G.size = size;
  const int t = c.threads;

  bu_warm_allocator();
  worker_t *ws = bu_map(sizeof(worker_t) * (size_t)t);
  for (int i = 0; i < t; i++) {
    ws[i].index = i;
    ws[i].threads = t;
  }
  /* the workers set their blocks up before the barrier and free them after their spans: the
   * time is the visits', from the first start to the last end */
  bu_run_workers(t, worker, ws, sizeof ws[0], &G.start);
  long visits = 0;
  unsigned long sum = 0;
  double first = ws[0].span.start, last = ws[0].span.end;
  for (int i = 0; i < t; i++) {
    visits += ws[i].visits;
    sum += ws[i].sum;
    if (ws[i].span.start < first) first = ws[i].span.start;
    if (ws[i].span.end > last) last = ws[i].span.end;
  }
  double secs = last - first;
  if (sum == 1) bu_die("unlikely sum");      /* keeps the loads */
  bu_result("heads", t, "time", secs, "s");
  bu_result_spans("heads", t, &ws[0].span, sizeof ws[0], t);
  bu_result("heads", t, "throughput", (double)visits / secs, "ops/s");
  bu_result_peak_rss("heads", t);
  return 0;
}
