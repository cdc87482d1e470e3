/* falseshare.h: the body of the four cache-locality benchmarks (active-false, passive-false,
 * cache-thrash, cache-scratch). Each of those programs defines FS_NAME and FS_BATCH/FS_PASSIVE
 * and includes this file.
 *
 * Hoard (section 2.1, 5.3): an allocator "actively" induces false sharing when it satisfies
 * requests of different threads from the same cache line, and "passively" when it lets a
 * thread reuse a piece of a line it freed although the rest of the line belongs to other
 * threads. These programs allocate small objects and then write each one many times, so the
 * allocation rate is low and the run time is dominated by the writes: if two threads' objects
 * share a cache line, the line ping-pongs between cores and the program stops scaling.
 *
 *   active-false  (Hoard 5.3): each thread repeatedly allocates one 8-byte object, writes it
 *                 reps/t times, frees it.
 *   passive-false (Hoard 5.3): first the main thread allocates t 8-byte objects one after the
 *                 other (normally in one cache line) and gives one to each thread, which frees
 *                 it; then as active-false.
 *   cache-thrash  (the Hoard suite's program, run by Bannatyne & Hollbach; our version with a
 *                 batch): each thread repeatedly allocates FS_BATCH 8-byte objects at once,
 *                 writes them in turn, frees them. Several live objects per thread, as in a
 *                 program that builds a small structure.
 *   cache-scratch (likewise): the main thread first allocates FS_BATCH*t objects and deals them
 *                 round-robin (object j to thread j mod t, so neighbours go to different
 *                 threads); each thread frees what it was dealt, then runs cache-thrash.
 *
 * The total work is the same for every t (Hoard divides the repetitions by t): the ideal is
 * a t-fold speedup up to the number of cores. Result: time (s) and throughput (object writes
 * per second, one write = one byte written and read back).
 */
#include "bench_util.h"

#ifndef FS_BATCH
#define FS_BATCH 1
#endif
#ifndef FS_PASSIVE
#define FS_PASSIVE 0
#endif

static struct {
  long objects, reps, size;
  pthread_barrier_t start;
} G;

typedef struct {
  bu_span span;
  int index;
  void *given[FS_BATCH]; /* passive variants: objects dealt by the main thread */
  uint64_t sum;
} BU_ALIGNED worker_t;

static void *worker(void *arg) {
  worker_t *w = (worker_t *)arg;
  const size_t size = (size_t)G.size;
  pthread_barrier_wait(&G.start);
  w->span.start = bu_now();
  if (FS_PASSIVE)
    for (int b = 0; b < FS_BATCH; b++) {
      bu_hammer_check(w->given[b], size, 1);
      free(w->given[b]);
    }
  uint64_t sum = 0;
  for (long i = 0; i < G.objects; i++) {
    unsigned char *obj[FS_BATCH];
    for (int b = 0; b < FS_BATCH; b++) obj[b] = bu_malloc(size);
    if (FS_BATCH == 1) {
      sum += bu_hammer(obj[0], size, G.reps);
    } else {
      /* the objects in turn, each written as often as one object of active-false */
      for (long j = 0; j < G.reps; j++)
        for (int b = 0; b < FS_BATCH; b++) {
          volatile unsigned char *p = obj[b];
          for (size_t k = 0; k < size; k++) {
            p[k] = (unsigned char)(j + (long)k);
            sum += p[k];
          }
        }
    }
    for (int b = 0; b < FS_BATCH; b++) {
      bu_hammer_check(obj[b], size, G.reps);
      free(obj[b]);
    }
  }
  w->sum = sum;
  w->span.end = bu_now();
  return NULL;
}

int main(int argc, char **argv) {
  bu_common c = bu_common_defaults(1);
  long objects = -1, reps = -1, size = 8;
  const bu_opt opts[] = {
      {"objects", BU_OPT_LONG, &objects, "objects (batches) each thread allocates (default 1000)"},
      {"reps", BU_OPT_LONG, &reps, "writes of each object, divided by t (default " FS_DEFAULT_REPS_S ")"},
      {"size", BU_OPT_LONG, &size, "object size in bytes (8)"},
  };
  bu_parse_args(argc, argv, FS_DESC, &c, opts, (int)(sizeof opts / sizeof opts[0]));
  if (objects < 0) objects = c.smoke ? 100 : 1000;
  if (reps < 0) reps = bu_scaled(c.smoke ? FS_DEFAULT_REPS / 50 : FS_DEFAULT_REPS, c.scale, 1);
  if (objects < 1 || reps < 1 || size < 1 || size > 4096) bu_die("bad parameters");
  const int t = c.threads;
  G.objects = objects;
  G.reps = reps / t > 0 ? reps / t : 1;
  G.size = size;

  bu_warm_allocator();
  worker_t *ws = bu_map(sizeof(worker_t) * (size_t)t);
  pthread_t *tids = bu_map(sizeof(pthread_t) * (size_t)t);
  if (FS_PASSIVE) /* consecutive allocations, dealt round-robin */
    for (int b = 0; b < FS_BATCH; b++)
      for (int i = 0; i < t; i++) {
        unsigned char *p = bu_malloc((size_t)size);
        bu_hammer(p, (size_t)size, 1);
        ws[i].given[b] = p;
      }
  for (int i = 0; i < t; i++) ws[i].index = i;
  bu_barrier_init(&G.start, (unsigned)t + 1);
  for (int i = 0; i < t; i++) bu_thread_create(&tids[i], worker, &ws[i]);
  pthread_barrier_wait(&G.start);
  for (int i = 0; i < t; i++) bu_thread_join(tids[i]);
  double secs = bu_span_seconds(&ws[0].span, sizeof ws[0], t);
  uint64_t sum = 0;
  for (int i = 0; i < t; i++) sum += ws[i].sum;
  bu_sink(sum);
  double writes = (double)t * (double)G.objects * (double)G.reps * (double)size * FS_BATCH;
  bu_result(FS_NAME, t, "time", secs, "s");
  bu_result_spans(FS_NAME, t, &ws[0].span, sizeof ws[0], t);
  bu_result(FS_NAME, t, "throughput", writes / secs, "ops/s");
  bu_result_peak_rss(FS_NAME, t);
  return 0;
}
