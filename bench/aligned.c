/* aligned: blocks from posix_memalign, the way I/O code (O_DIRECT and io_uring buffers, page-
 * aligned arenas), SIMD code (32- and 64-byte vectors) and huge-page users (2 MiB) ask for them.
 * Allocators serve small alignments from their size classes, but a large alignment often
 * takes a path of its own, and some take a fresh mapping for each such block.
 *
 * t threads each keep --slots blocks and replace a random one at a time: free it, then
 * posix_memalign a block of a size uniform in [16, --max-size] and an alignment drawn from
 * the powers of two in [--align-min, --align-max] (each equally likely), check the alignment
 * and write the block's first and last byte (and one byte per 4 KiB page). The threads share
 * nothing; the total work (--ops, over all threads) is the same for every t.
 *
 *   aligned       alignments 16 B - 4 KiB, sizes up to 16 KiB (the common case)
 *   aligned-huge  (--huge) alignment 2 MiB, sizes up to 100 KB (huge-page-aligned buffers)
 *   bufswap       (--plain --min-size 4096 --max-size 262144) plain malloc of 4-256 KiB: a
 *                 server's buffers of varied sizes, replaced at random. Where an allocator
 *                 keeps few blocks of these sizes per unit of its own bookkeeping (a page run
 *                 or a short superblock each) every replacement takes its slow paths.
 *   bufpool       (--pool) plain malloc of one size, 4 KiB (--min-size): a pool of page-sized
 *                 buffers (a database's pages, a server's I/O buffers) churned at random, so
 *                 that each free lands in a block group other than the one the next malloc
 *                 takes from.
 *
 * Result: time (s), throughput (replacements per second, all threads) and peak_rss.
 */
#include "bench_util.h"

static struct {
  long ops_per_thread, slots;
  size_t min_size, max_size;
  bool plain;
  int lg_min, lg_max;
  uint64_t seed;
  pthread_barrier_t start;
} G;

typedef struct {
  bu_span span;
  int index;
  void **slot;
} BU_ALIGNED worker_t;

static void *aligned_block(bu_rng *rng) {
  size_t align = (size_t)1 << (G.lg_min + (int)bu_rand_below(rng, (uint64_t)(G.lg_max - G.lg_min + 1)));
  size_t size = (size_t)bu_rand_range(rng, G.min_size, G.max_size);
  void *p = NULL;
  if (G.plain) {
    if ((p = malloc(size)) == NULL) bu_oom(size);
    align = 16;
  } else if (posix_memalign(&p, align, size) != 0 || p == NULL) {
    bu_oom(size);
  }
  if ((uintptr_t)p % align != 0) {
    fprintf(stderr, "aligned: %s(%zu, %zu) = %p is misaligned\n",
            G.plain ? "malloc (16-byte alignment)" : "posix_memalign", align, size, p);
    exit(4);
  }
  bu_stamp_pages(p, size);
  return p;
}

static void *worker(void *arg) {
  worker_t *w = (worker_t *)arg;
  bu_rng rng;
  bu_rng_init(&rng, G.seed, (uint64_t)w->index);
  for (long k = 0; k < G.slots; k++) w->slot[k] = aligned_block(&rng);
  pthread_barrier_wait(&G.start);
  w->span.start = bu_now();
  for (long i = 0; i < G.ops_per_thread; i++) {
    uint64_t k = bu_rand_below(&rng, (uint64_t)G.slots);
    bu_free_checked(w->slot[k]);
    w->slot[k] = aligned_block(&rng);
  }
  w->span.end = bu_now();
  for (long k = 0; k < G.slots; k++) bu_free_checked(w->slot[k]);
  return NULL;
}

int main(int argc, char **argv) {
  bu_common c = bu_common_defaults(1);
  long ops = -1, slots = 256, min_size = -1, max_size = -1, align_min = -1, align_max = -1;
  bool huge = false, plain = false, pool = false;
  const bu_opt opts[] = {
      {"huge", BU_OPT_FLAG, &huge, "aligned-huge: 2 MiB alignment, sizes up to 100 KB"},
      {"plain", BU_OPT_FLAG, &plain, "bufswap: malloc, no alignment asked (result name bufswap)"},
      {"pool", BU_OPT_FLAG, &pool, "bufpool: malloc of one size, --min-size (4096)"},
      {"ops", BU_OPT_LONG, &ops, "replacements over all threads (400k; huge 40k; pool 10M; smoke 2000)"},
      {"slots", BU_OPT_LONG, &slots, "blocks each thread keeps (256)"},
      {"min-size", BU_OPT_LONG, &min_size, "smallest block in bytes (16; pool 4096)"},
      {"max-size", BU_OPT_LONG, &max_size, "largest block in bytes (16384; huge 102400)"},
      {"align-min", BU_OPT_LONG, &align_min, "smallest alignment, a power of two (16; huge 2 MiB)"},
      {"align-max", BU_OPT_LONG, &align_max, "largest alignment, a power of two (4096; huge 2 MiB)"},
  };
  bu_parse_args(argc, argv,
                "aligned: t threads each keep --slots blocks from posix_memalign and replace a\n"
                "random one at a time with one of another size and alignment.",
                &c, opts, (int)(sizeof opts / sizeof opts[0]));
  if (ops < 0) ops = bu_scaled(c.smoke ? 2000 : huge ? 40000 : pool ? 10000000 : 400000, c.scale, 10);
  if (max_size < 0) max_size = huge ? 102400 : 16384;
  if (align_min < 0) align_min = huge ? 2 << 20 : 16;
  if (align_max < 0) align_max = huge ? 2 << 20 : 4096;
  if (min_size < 0) min_size = pool ? 4096 : 16;
  if (pool) {
    plain = true;
    max_size = min_size;
  }
  if (c.smoke && slots > 32) slots = 32;
  if (ops < 1 || slots < 1 || min_size < 1 || max_size < min_size || align_min < 16 ||
      align_max < align_min ||
      (align_min & (align_min - 1)) || (align_max & (align_max - 1)) || align_max > (1L << 30))
    bu_die("bad parameters");
  const int t = c.threads;
  G.ops_per_thread = ops / t > 0 ? ops / t : 1;
  G.slots = slots;
  G.min_size = (size_t)min_size;
  G.max_size = (size_t)max_size;
  G.plain = plain;
  G.lg_min = __builtin_ctzl((unsigned long)align_min);
  G.lg_max = __builtin_ctzl((unsigned long)align_max);
  G.seed = c.seed;

  bu_warm_allocator();
  worker_t *ws = bu_map(sizeof(worker_t) * (size_t)t);
  for (int i = 0; i < t; i++) {
    ws[i].index = i;
    ws[i].slot = bu_map(sizeof(void *) * (size_t)slots);
  }
  bu_run_workers(t, worker, ws, sizeof ws[0], &G.start);
  double secs = bu_span_seconds(&ws[0].span, sizeof ws[0], t);
  const char *name = pool ? "bufpool" : plain ? "bufswap" : huge ? "aligned-huge" : "aligned";
  bu_result(name, t, "time", secs, "s");
  bu_result_spans(name, t, &ws[0].span, sizeof ws[0], t);
  bu_result(name, t, "throughput", (double)G.ops_per_thread * t / secs, "ops/s");
  bu_result_peak_rss(name, t);
  return 0;
}
