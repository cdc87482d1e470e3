/* mstress: after mimalloc's stress test (test-stress.c; "mstress" in mimalloc-bench): teams
 * of short-lived threads that allocate zeroed blocks of mostly small, sometimes large sizes,
 * free some at random, keep others to the end, and swap blocks with one another through a
 * shared table, so that blocks outlive the threads that allocated them and are freed by
 * threads started later.
 *
 * --rounds times: start the team of -t threads and wait for all of them to end. A thread
 * makes `allocs` blocks into its own array (threads differ: thread i makes (i % 8 + 1) *
 * 100 * --scale-n), and half as many it keeps until it ends; on each step it frees one of its
 * blocks at random (2 in 3 steps) and swaps one with a random slot of the shared table (1 in
 * 4). Sizes: 8 B times a power of two up to 16 (32 for kept blocks), and 1 in 100 blocks is
 * 100x that (1 in 1,000: 1,000x, up to 256 KiB; 1 in 10,000: 10,000x, up to 2.5 MiB). Every
 * block comes from calloc, is checked to be zero and filled with a pattern that free checks.
 * After each round, each slot of the table is freed with chance 1/2 (all after the last).
 * Result: time (s), throughput (blocks allocated per second) and peak_rss.
 */
#include "bench_util.h"

#define TRANSFERS 1000

static struct {
  long scale_n;
  uint64_t seed;
  _Atomic(uint64_t *) transfer[TRANSFERS];
  _Atomic long made;
} G;

typedef struct {
  int index;
  uint64_t round;
} worker_t;

/* Block layout: word 0 holds the word count; word i holds (n - i) ^ key. */
static const uint64_t KEY = 0xbf58476d1ce4e5b9ull;

static uint64_t *make_block(bu_rng *r, size_t words) {
  uint64_t x = bu_rand_below(r, 10000);
  if (x == 0) words *= 10000;
  else if (x < 10) words *= 1000;
  else if (x < 100) words *= 100;
  uint64_t *p = calloc(words, sizeof(uint64_t));
  bu_need(p, words * sizeof(uint64_t));
  for (size_t i = 0; i < words; i++) {
    if (BU_UNLIKELY(p[i] != 0)) bu_corrupt(p, words * 8, "calloc gave a dirty block");
    p[i] = (i == 0) ? words : ((words - i) ^ KEY);
  }
  return p;
}

static void drop_block(uint64_t *p) {
  if (p == NULL) return;
  size_t words = (size_t)p[0];
  if (BU_UNLIKELY(words == 0 || words > ((size_t)1 << 28))) bu_corrupt(p, 0, "before free");
  for (size_t i = 1; i < words; i++)
    if (BU_UNLIKELY(p[i] != ((words - i) ^ KEY))) bu_corrupt(p, words * 8, "before free");
  free(p);
}

static void *worker(void *arg) {
  worker_t *w = (worker_t *)arg;
  bu_rng r;
  bu_rng_init(&r, G.seed, (uint64_t)w->index * 1000003u + w->round);
  size_t allocs = (size_t)(100 * G.scale_n * (w->index % 8 + 1));
  size_t keep = allocs / 2, made = allocs + keep;
  /* the arrays come from the allocator under test, as in the original (it grows `data` by
   * realloc) */
  uint64_t **kept = calloc(keep ? keep : 1, sizeof(uint64_t *));
  bu_need(kept, keep * sizeof(uint64_t *));
  uint64_t **data = NULL;
  size_t top = 0, cap = 0, ktop = 0;
  while (allocs > 0 || keep > 0) {
    if (keep == 0 || (allocs > 0 && bu_rand_below(&r, 2) == 0)) {
      allocs--;
      if (top == cap) {
        cap += 10000;
        data = realloc(data, cap * sizeof(uint64_t *));
        bu_need(data, cap * sizeof(uint64_t *));
      }
      data[top++] = make_block(&r, (size_t)1 << bu_rand_below(&r, 5));
    } else {
      kept[ktop++] = make_block(&r, (size_t)1 << bu_rand_below(&r, 6));
      keep--;
    }
    if (top > 0 && bu_rand_below(&r, 3) < 2) {
      size_t i = bu_rand_below(&r, top);
      drop_block(data[i]);
      data[i] = NULL;
    }
    if (top > 0 && bu_rand_below(&r, 4) == 0) {
      size_t i = bu_rand_below(&r, top);
      data[i] = atomic_exchange(&G.transfer[bu_rand_below(&r, TRANSFERS)], data[i]);
    }
  }
  for (size_t i = 0; i < ktop; i++) drop_block(kept[i]);
  for (size_t i = 0; i < top; i++) drop_block(data[i]);
  free(kept);
  free(data);
  atomic_fetch_add(&G.made, (long)made);
  return NULL;
}

int main(int argc, char **argv) {
  bu_common c = bu_common_defaults(2);
  long rounds = -1, scale_n = 50;
  const bu_opt opts[] = {
      {"rounds", BU_OPT_LONG, &rounds, "thread teams started one after another (default 25, smoke 2)"},
      {"scale-n", BU_OPT_LONG, &scale_n, "blocks per thread, in hundreds, times (index % 8 + 1) (50)"},
  };
  bu_parse_args(argc, argv,
                "mstress: teams of short-lived threads allocate zeroed blocks and swap them\n"
                "through a shared table (after mimalloc's stress test).",
                &c, opts, (int)(sizeof opts / sizeof opts[0]));
  if (rounds < 0) rounds = bu_scaled(c.smoke ? 2 : 25, c.scale, 1);
  if (c.smoke) scale_n = 2;
  if (rounds < 1 || scale_n < 1) bu_die("bad parameters");
  const int t = c.threads;
  G.scale_n = scale_n;
  G.seed = c.seed;

  bu_warm_allocator();
  worker_t *ws = bu_map(sizeof(worker_t) * (size_t)t);
  pthread_t *tids = bu_map(sizeof(pthread_t) * (size_t)t);
  bu_rng r;
  bu_rng_init(&r, c.seed, 0xfeed);
  double start = bu_now();
  for (long n = 0; n < rounds; n++) {
    for (int i = 0; i < t; i++) {
      ws[i].index = i;
      ws[i].round = (uint64_t)n;
      bu_thread_create(&tids[i], worker, &ws[i]);
    }
    for (int i = 0; i < t; i++) bu_thread_join(tids[i]);
    for (int i = 0; i < TRANSFERS; i++)
      if (n + 1 == rounds || bu_rand_below(&r, 2) == 0)
        drop_block(atomic_exchange(&G.transfer[i], NULL));
  }
  double secs = bu_now() - start;
  bu_result("mstress", t, "time", secs, "s");
  bu_result("mstress", t, "throughput", (double)atomic_load(&G.made) / secs, "ops/s");
  bu_result_peak_rss("mstress", t);
  return 0;
}
