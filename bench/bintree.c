/* bintree: the benchmarks game's binary-trees, the allocation test of many language
 * runtimes' suites (and of allocator comparisons that run it in C).
 *
 * A long-lived tree of depth D is built first. Then each of t threads, for depths 4, 6, ...,
 * D, builds 2^(D - depth + 4) / t trees of that depth (16-byte nodes, depth first: a node, its
 * left subtree, its right subtree), walks each to count its nodes, and frees it depth first
 * (post-order: the children before their parent). Finally the long-lived tree is walked and
 * freed. The total work is the same for every t.
 *
 * What it tests besides malloc and free: the layout the allocator gives the next tree. Frees
 * come in another order than the mallocs, and an allocator that hands the freed blocks back
 * in the reverse order of the frees lays the next tree out scattered, so that the program's
 * own walks miss the cache (see docs/BENCHMARKS.md, "Fiftieth session").
 * Result: time (s) and throughput (nodes allocated and freed per second).
 */
#include "bench_util.h"

typedef struct node {
  struct node *left, *right;
} node_t;

static struct {
  int depth;
  pthread_barrier_t start;
} G;

typedef struct {
  bu_span span;
  int index, threads;
  long nodes, checked;
} BU_ALIGNED worker_t;

static node_t *build(int depth) {
  node_t *n = malloc(sizeof *n);
  if (BU_UNLIKELY(n == NULL)) bu_oom(sizeof *n);
  if (depth > 0) {
    n->left = build(depth - 1);
    n->right = build(depth - 1);
  } else {
    n->left = n->right = NULL;
  }
  return n;
}

static long check(const node_t *n) {
  return n->left ? 1 + check(n->left) + check(n->right) : 1;
}

static void release(node_t *n) {
  if (n->left) {
    release(n->left);
    release(n->right);
  }
  free(n);
}

static void *worker(void *arg) {
  worker_t *w = (worker_t *)arg;
  pthread_barrier_wait(&G.start);
  w->span.start = bu_now();
  for (int d = 4; d <= G.depth; d += 2) {
    long trees = (1L << (G.depth - d + 4)) / w->threads;
    if (trees < 1) trees = 1;
    for (long i = 0; i < trees; i++) {
      node_t *t = build(d);
      w->checked += check(t);
      release(t);
      w->nodes += (2L << d) - 1;
    }
  }
  w->span.end = bu_now();
  return NULL;
}

int main(int argc, char **argv) {
  bu_common c = bu_common_defaults(1);
  long depth = -1;
  const bu_opt opts[] = {
      {"depth", BU_OPT_LONG, &depth, "depth of the deepest trees (default 18, smoke 10)"},
  };
  bu_parse_args(argc, argv,
                "The benchmarks game's binary-trees: threads build, walk and free trees of\n"
                "16-byte nodes depth first, beside a long-lived tree.",
                &c, opts, (int)(sizeof opts / sizeof opts[0]));
  if (depth < 0) depth = c.smoke ? 10 : 18;
  if (c.scale < 1.0 && !c.smoke) {             /* each step of 2 in depth is 4x the work */
    for (double s = c.scale; s < 0.5 && depth > 10; s *= 4) depth -= 2;
  }
  if (depth < 4 || depth > 26) bu_die("bad parameters");
  G.depth = (int)depth;
  const int t = c.threads;

  bu_warm_allocator();
  double t0 = bu_now();
  node_t *longlived = build(G.depth);
  worker_t *ws = bu_map(sizeof(worker_t) * (size_t)t);
  pthread_t *tids = bu_map(sizeof(pthread_t) * (size_t)t);
  for (int i = 0; i < t; i++) {
    ws[i].index = i;
    ws[i].threads = t;
  }
  bu_barrier_init(&G.start, (unsigned)t + 1);
  for (int i = 0; i < t; i++) bu_thread_create(&tids[i], worker, &ws[i]);
  pthread_barrier_wait(&G.start);
  long nodes = (2L << G.depth) - 1, checked = check(longlived);
  for (int i = 0; i < t; i++) {
    bu_thread_join(tids[i]);
    nodes += ws[i].nodes;
    checked += ws[i].checked;
  }
  release(longlived);
  double secs = bu_now() - t0;
  if (checked != nodes) bu_die("a tree lost nodes");
  bu_result("bintree", t, "time", secs, "s");
  bu_result_spans("bintree", t, &ws[0].span, sizeof ws[0], t);
  bu_result("bintree", t, "throughput", (double)nodes / secs, "ops/s");
  bu_result_peak_rss("bintree", t);
  return 0;
}
