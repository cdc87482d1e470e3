/* Statistics and the heap map (issue 5), through the trove_ API of libtrove_noov, so that the
 * C library's own allocations do not show: in one thread the counters must match a known
 * sequence of allocations exactly; under threads they must stay within bounds; the heap map
 * must be valid JSON (checked by test_heapmap.py) and account for every superblock. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "trove.h"

#define CHECK(c)                                                                     \
  do {                                                                               \
    if (!(c)) {                                                                      \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c);          \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

static trove_stats_t st;

static const trove_class_stats_t *class_of(size_t usable) {
  for (int c = 0; c < TROVE_STATS_CLASSES; c++)
    if (st.classes[c].block_size == usable) return &st.classes[c];
  return NULL;
}

static void single_thread_exact(void) {
  enum { N = 1000 };
  static void *small[N], *medium[10], *large[3];
  trove_stats_get(&st);
  CHECK(st.in_use == 0 && st.medium_objects == 0 && st.large_objects == 0);
  size_t expect = 0;
  for (int i = 0; i < N; i++) {
    small[i] = trove_malloc(100);
    expect += trove_malloc_usable_size(small[i]);
  }
  size_t bs = trove_malloc_usable_size(small[0]);
  CHECK(bs >= 100 && bs <= 100 + 100 / 8);
  for (int i = 0; i < 10; i++) {
    medium[i] = trove_malloc(200 * 1024);
    expect += trove_malloc_usable_size(medium[i]);
  }
  for (int i = 0; i < 3; i++) {
    large[i] = trove_malloc(8u << 20);
    expect += trove_malloc_usable_size(large[i]);
  }
  trove_stats_get(&st);
  const trove_class_stats_t *c = class_of(bs);
  CHECK(c != NULL);
  CHECK(c->blocks_in_use == N);
  CHECK(c->blocks_capacity >= N && c->superblocks >= 1);
  CHECK(st.in_use == expect);
  CHECK(st.medium_objects == 10 && st.large_objects == 3);
  CHECK(st.large_bytes == 3 * trove_malloc_usable_size(large[0]));
  CHECK(st.held >= st.in_use && st.peak_held >= st.held);
  CHECK(st.peak_in_use >= st.in_use);
  CHECK(st.threads == 1);
  for (int i = 0; i < N; i += 2) trove_free(small[i]);
  trove_stats_get(&st);
  CHECK(class_of(bs)->blocks_in_use == N / 2);
  for (int i = 1; i < N; i += 2) trove_free(small[i]);
  for (int i = 0; i < 10; i++) trove_free(medium[i]);
  for (int i = 0; i < 3; i++) trove_free(large[i]);
  trove_stats_get(&st);
  CHECK(st.in_use == 0);
  CHECK(st.medium_objects == 0 && st.large_objects == 0);
  CHECK(st.peak_in_use >= expect);
  trove_collect();
  trove_stats_get(&st);
  CHECK(st.dirty_page_bytes == 0);
  CHECK(st.purges > 0 && st.purged_bytes > 0);
}

/* Threads pass blocks to each other; while they run the totals stay within what exists. */
enum { T = 4, PER = 20000 };
static void *blocks[T][PER];
static pthread_barrier_t bar;
static void *worker(void *arg) {
  long t = (long)arg;
  for (int i = 0; i < PER; i++) blocks[t][i] = trove_malloc(16 + (size_t)(i % 50) * 8);
  pthread_barrier_wait(&bar);
  for (int i = 0; i < PER; i++) trove_free(blocks[(t + 1) % T][i]); /* remote frees */
  pthread_barrier_wait(&bar);
  return NULL;
}

static void threads_within_bounds(void) {
  pthread_t th[T];
  pthread_barrier_init(&bar, NULL, T + 1);
  for (long t = 0; t < T; t++) pthread_create(&th[t], NULL, worker, (void *)t);
  pthread_barrier_wait(&bar);                      /* all allocated, none freed yet */
  trove_stats_get(&st);
  size_t max_live = (size_t)T * PER * (16 + 49 * 8 + 56);
  CHECK(st.in_use >= (size_t)T * PER * 16 && st.in_use <= max_live);
  CHECK(st.threads >= T + 1);
  pthread_barrier_wait(&bar);
  for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
  trove_collect();
  trove_stats_get(&st);
  CHECK(st.in_use <= max_live);
  CHECK(st.remote_frees > 0 || st.superblocks_adopted > 0);
  CHECK(st.threads == 1);
}

int main(int argc, char **argv) {
  single_thread_exact();
  threads_within_bounds();
  void *keep[64];
  for (int i = 0; i < 64; i++) keep[i] = trove_malloc((size_t)(i + 1) * 24);
  void *med = trove_malloc(300 * 1024), *big = trove_malloc(3u << 20);
  if (argc > 1) CHECK(trove_heap_map_write(argv[1]) == 0);
  trove_stats_t s2;
  trove_stats_get(&s2);
  size_t sbs = 0;
  for (int c = 0; c < TROVE_STATS_CLASSES; c++) sbs += s2.classes[c].superblocks;
  printf("superblocks=%zu medium=%zu large=%zu segments=%zu\n", sbs, s2.medium_objects,
         s2.large_objects, s2.segments);
  trove_stats_print(stdout);
  for (int i = 0; i < 64; i++) trove_free(keep[i]);
  trove_free(med);
  trove_free(big);
  CHECK(trove_heap_map_write("/nonexistent-dir/x.json") != 0);
  return 0;
}
