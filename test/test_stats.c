/* Statistics and the heap map (issue 5), through the trove_ API of libtrove_noov, so that the
 * C library's own allocations do not show: in one thread the counters must match a known
 * sequence of allocations exactly; under threads they must stay within bounds; the heap map
 * must be valid JSON (checked by test_heapmap.py) and account for every superblock. */
#define _GNU_SOURCE   /* sched_getaffinity */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <stdbool.h>
#include <time.h>
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

/* Segments are mapped several at a time (segment.c), but only those in use count as held:
 * 40 MiB of small blocks take about 11 segments of the 15 that batches of 1, 2, 4 and 8 map,
 * and `held` is the segments' bytes plus the few 256 KiB chunks of heap descriptors. */
static void held_counts_segments_only(void) {
  enum { N = 80 * 1024 };
  static void *b[N];
  for (int i = 0; i < N; i++) CHECK((b[i] = trove_malloc(512)) != NULL);
  trove_stats_get(&st);
  CHECK(st.segments >= 10 && st.large_objects == 0);
  CHECK(st.held >= st.segments * (4u << 20));
  CHECK(st.held <= st.segments * (4u << 20) + (1u << 20));
  for (int i = 0; i < N; i++) trove_free(b[i]);
}

/* A large buffer freed and then taken by a shorter request: the 4 MiB regions past the
 * request's part go back into the cache as a mapping of their own (large.c, split_tail), so
 * that the next requests reuse those pages. `sort -S 64M --parallel=4` frees its 64 MiB
 * buffer, then takes four of 16 MiB: the first kept the other 48 MiB in its mapping, unused,
 * while the next three were mapped fresh (held 112 MiB). Each piece is its own block:
 * contents kept apart, calloc zeroes a piece that held data, each frees once. */
static void large_tail_reused(void) {
  const size_t mib = 1u << 20;
  trove_malloc_trim(0);                     /* no cached mapping from the tests before */
  trove_stats_get(&st);
  size_t held0 = st.held;
  unsigned char *big = trove_malloc(64 * mib);
  CHECK(big != NULL);
  for (size_t i = 0; i < 64 * mib; i += 4096) big[i] = 0xa5;
  trove_free(big);
  unsigned char *q[4];
  for (int k = 0; k < 4; k++) {
    q[k] = k & 1 ? trove_calloc(1, 16 * mib) : trove_malloc(16 * mib);
    CHECK(q[k] != NULL);
    if (k & 1)
      for (size_t i = 0; i < 16 * mib; i += 4093) CHECK(q[k][i] == 0);
    for (size_t i = 0; i < 16 * mib; i += 4096) q[k][i] = (unsigned char)(k + 1);
    q[k][16 * mib - 1] = (unsigned char)(k + 1);
  }
  trove_stats_get(&st);
  /* 64 MiB for the first three (4 MiB of alignment each) and at most a fresh 16 for the last */
  CHECK(st.held - held0 <= 84 * mib);
  CHECK(st.large_objects >= 4);
  for (int k = 0; k < 4; k++) {
    for (size_t i = 0; i < 16 * mib; i += 4096) CHECK(q[k][i] == (unsigned char)(k + 1));
    CHECK(q[k][16 * mib - 1] == (unsigned char)(k + 1));
    CHECK(trove_malloc_usable_size(q[k]) >= 16 * mib);
  }
  for (int k = 0; k < 4; k++) trove_free(q[k]);
  trove_stats_get(&st);
  CHECK(st.large_objects == 0);
  trove_malloc_trim(0);
}

/* A large buffer freed and not taken back for an eighth of the purge delay goes back to the
 * OS when the heap next takes fresh memory (large.c, _trove_large_trim), rather than wait the
 * whole delay resident beside what the program builds meanwhile (jq frees the string it read
 * its input into, then builds its arrays). */
static void large_idle_given_back_on_growth(void) {
  const size_t mib = 1u << 20;
  enum { N = 48 * 1024 };
  static void *v[N];
  trove_malloc_trim(0);
  unsigned char *big = trove_malloc(16 * mib);
  CHECK(big != NULL);
  for (size_t i = 0; i < 16 * mib; i += 4096) big[i] = 1;
  trove_free(big);
  trove_stats_get(&st);
  size_t purged0 = st.purged_bytes, segments0 = st.segments;
  struct timespec ts = {0, 100 * 1000 * 1000};   /* past 250 / 8 ms, within 250 */
  nanosleep(&ts, NULL);
  for (int i = 0; i < N; i++) {                  /* 48 MiB of small blocks: fresh segments */
    v[i] = trove_malloc(1000);
    CHECK(v[i] != NULL);
    memset(v[i], 1, 1000);
  }
  trove_stats_get(&st);
  CHECK(st.segments > segments0);
  CHECK(st.purged_bytes - purged0 >= 15 * mib);
  for (int i = 0; i < N; i++) trove_free(v[i]);
  trove_malloc_trim(0);
}

/* A burst freed and collected goes back, and is counted once in purged_bytes (test_options'
 * `purgecount` probe checks the case that counted it twice: segments purged, then unmapped). */
static void purged_counted_once(void) {
  enum { N = 24 * 1024 };
  static void *p[N];
  trove_stats_t a, b;
  trove_collect();
  trove_stats_get(&a);
  for (int i = 0; i < N; i++) {
    p[i] = trove_malloc(1000);
    CHECK(p[i] != NULL);
    memset(p[i], 1, 1000);
  }
  trove_stats_get(&b);
  size_t grown = b.held - a.held;
  for (int i = 0; i < N; i++) trove_free(p[i]);
  trove_collect();                          /* purges the free runs, then unmaps the segments */
  trove_stats_get(&b);
  size_t purged = b.purged_bytes - a.purged_bytes;
  printf("purged_counted_once: held grew %zu KiB, purged %zu KiB\n", grown >> 10, purged >> 10);
  CHECK(grown >= (size_t)N * 1000);
  CHECK(purged >= grown / 2 && purged <= grown + (1u << 20));
}

/* Empty superblocks wait on the sparse list for the purge delay, then go back. Superblocks of
 * 2 blocks (above 16 KiB) become sparse when already empty; they were once left out of the
 * heap's count of empty ones, so a heap with no other empty superblock never gave them back
 * (and the count wrapped below zero when one left the list). Runs first, on a fresh heap. */
static void sparse_empty_given_back(void) {
  enum { N = 40 };
  static void *p[N];
  const char *env = getenv("TROVE_PURGE_DELAY_MS");
  if (env != NULL) return;                        /* the default delay (250 ms) is assumed */
  for (int i = 0; i < N; i++) p[i] = trove_malloc(20000);
  size_t bs = trove_malloc_usable_size(p[0]);
  trove_stats_get(&st);
  CHECK(class_of(bs) != NULL && class_of(bs)->blocks_capacity / class_of(bs)->superblocks == 2);
  size_t sbs = class_of(bs)->superblocks;
  CHECK(sbs >= N / 2);
  for (int i = 0; i < N; i++) trove_free(p[i]);
  struct timespec ts = {0, 400 * 1000 * 1000};
  nanosleep(&ts, NULL);
  for (int i = 0; i < 256; i++) trove_free(trove_malloc(100000 + (size_t)i * 8));  /* slow paths */
  trove_stats_get(&st);
  CHECK(class_of(bs) == NULL || class_of(bs)->superblocks <= 1);   /* the current one may stay */
}

/* A thread's empty superblocks wait on its sparse list (within K) for its next ones: of their
 * own class as they are, of another class with runs of the same length carved again. */
static void empties_reused(void) {
  enum { N = 300 };                  /* 480 B: 68 blocks a 32 KiB superblock, 5 of them */
  static void *p[N];
  for (int i = 0; i < N; i++) p[i] = trove_malloc(470);
  trove_stats_get(&st);
  CHECK(class_of(480) != NULL);
  size_t sbs = class_of(480)->superblocks;
  CHECK(sbs >= 4);
  for (int i = 0; i < N; i++) trove_free(p[i]);
  for (int i = 0; i < N; i++) p[i] = trove_malloc(470);
  trove_stats_get(&st);
  CHECK(class_of(480)->superblocks == sbs);          /* its own empties, not fresh pages */
  for (int i = 0; i < N; i++) trove_free(p[i]);
  for (int i = 0; i < N; i++) p[i] = trove_malloc(440);   /* 448 B, also 32 KiB runs */
  trove_stats_get(&st);
  CHECK(class_of(480) == NULL || class_of(480)->superblocks <= 1);   /* carved again */
  for (int i = 0; i < N; i++) trove_free(p[i]);
}

/* Blocks freed out of order come back in address order once their superblocks emptied
 * (heap.c, recarve_if_scattered): a thread of its own allocates 16,384 blocks of 48 B (12
 * superblocks), frees them in a scattered order, and allocates them again; most consecutive
 * mallocs are then adjacent in memory (without the new carve, about 1 in 20). A burst freed in
 * order comes back in order either way. */
static void *scattered_thread(void *arg) {
  enum { N = 16384 };
  static char *p[N];
  for (int i = 0; i < N; i++) p[i] = trove_malloc(48);
  for (int i = 0; i < N; i++) trove_free(p[(size_t)i * 7919 % N]);   /* 7919 is prime */
  for (int i = 0; i < N; i++) p[i] = trove_malloc(48);
  int adjacent = 0;
  for (int i = 1; i < N; i++) adjacent += p[i] - p[i - 1] == 48;
  for (int i = 0; i < N; i++) trove_free(p[i]);
  printf("scattered_frees: %d of %d mallocs adjacent to the one before\n", adjacent, N - 1);
  *(int *)arg = adjacent;
  return NULL;
}

static void scattered_frees_come_back_in_order(void) {
  int adjacent = 0;
  pthread_t t;
  CHECK(pthread_create(&t, NULL, scattered_thread, &adjacent) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  CHECK(adjacent >= 16383 * 3 / 4);
}

/* The thread's medium cache (heap.c): freed runs of 64 KiB-1 MiB stay with the thread and the
 * same lengths come back from it without new pages; a burst of frees stays whole (at most
 * what the thread held before it) while no other thread takes fresh pages; it gives back what
 * waited longer than 1/8 of the purge delay; calloc's blocks from it are zero. */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static size_t medium_size(int i) { return 64 * 1024 + 1 + (size_t)((i * 7919) % 64) * 1024; }

static void medium_cache(void) {
  enum { M = 64 };
  static void *m[M];
  trove_collect();
  trove_stats_get(&st);
  CHECK(st.medium_cached_bytes == 0);
  size_t held0 = st.held, freed = 0;
  for (int i = 0; i < M; i++) m[i] = trove_malloc(medium_size(i));
  double t0 = now_s();
  for (int i = 0; i < M; i += 2) {
    freed += (trove_malloc_usable_size(m[i]) + 8191) & ~(size_t)8191;
    trove_free(m[i]);
  }
  trove_stats_get(&st);
  CHECK(st.medium_objects == M / 2);
  /* The exact checks assume no run aged out (1/8 of the purge delay, 31 ms by default): a
   * thread descheduled that long on a loaded machine skips them. */
  bool in_time = getenv("TROVE_PURGE_DELAY_MS") == NULL && now_s() - t0 < 0.015;
  if (in_time) CHECK(st.medium_cached_bytes == freed);   /* all: under 2 MiB + the live half */
  size_t held1 = st.held;
  CHECK(held1 >= held0);
  for (int i = 0; i < M; i += 2) m[i] = trove_malloc(medium_size(i));   /* the same lengths */
  trove_stats_get(&st);
  CHECK(st.medium_objects == M);
  if (in_time && now_s() - t0 < 0.015) {
    CHECK(st.medium_cached_bytes == 0);
    CHECK(st.held == held1);                        /* nothing new was mapped */
  }
  size_t all = 0;
  for (int i = 0; i < M; i++) all += (trove_malloc_usable_size(m[i]) + 8191) & ~(size_t)8191;
  double t2 = now_s();
  for (int i = 0; i < M; i++) trove_free(m[i]);
  trove_stats_get(&st);
  CHECK(st.medium_objects == 0);
  /* The burst: at most the batch allocated just before it (the half taken again, `freed`
   * bytes) past the fixed 2 MiB, and at least that batch while no other thread takes fresh
   * pages. */
  CHECK(st.medium_cached_bytes <= freed + (2u << 20) + (128u << 10));
  CHECK(all > freed + (2u << 20) + (128u << 10));     /* so the bound above is not all */
  if (getenv("TROVE_PURGE_DELAY_MS") == NULL && now_s() - t2 < 0.015)
    CHECK(st.medium_cached_bytes >= freed);
  /* calloc from the cache: a run that held data comes back zeroed (the burst above handed
   * back first, so that the run freed is the one a request of its length finds) */
  trove_collect();
  unsigned char *d = trove_malloc(100 * 1024);
  memset(d, 0xab, 100 * 1024);
  double t1 = now_s();
  trove_free(d);
  unsigned char *z = trove_calloc(1, 100 * 1024);
  if (getenv("TROVE_PURGE_DELAY_MS") == NULL && now_s() - t1 < 0.015)
    CHECK(z == d);                                 /* it was cached, and taken back */
  for (size_t i = 0; i < 100 * 1024; i++) CHECK(z[i] == 0);
  trove_free(z);
  /* a shorter request takes a cached run at most 1/4 longer than itself (heap.c,
   * medium_cache_take), and no longer one */
  trove_collect();
  void *r = trove_malloc(160 * 1024);
  double t3 = now_s();
  trove_free(r);
  void *s1 = trove_malloc(130 * 1024);             /* 160 <= 130 + 32.5: the cached run */
  size_t us1 = trove_malloc_usable_size(s1);
  CHECK(us1 >= 130 * 1024 && us1 <= 130 * 1024 + 130 * 1024 / 4);
  bool took = now_s() - t3 < 0.015 && getenv("TROVE_PURGE_DELAY_MS") == NULL;
  if (took) CHECK(s1 == r);
  double t4 = now_s();
  trove_free(s1);
  void *s2 = trove_malloc(120 * 1024);             /* 160 > 120 + 30: a run of its own */
  CHECK(trove_malloc_usable_size(s2) <= 120 * 1024 + 120 * 1024 / 8);
  /* (unless the cached run aged out meanwhile, and the page heap handed its pages out) */
  if (took && now_s() - t4 < 0.015) CHECK(s2 != r);
  trove_free(s2);
  /* the age limit: 1/8 of the purge delay (250 ms by default). The slow path of a medium
   * free looks at the cache's age; one medium free in 16 takes it (heap.c, MQUICK_PERIOD). */
  const char *env = getenv("TROVE_PURGE_DELAY_MS");
  if (env == NULL) {
    struct timespec ts = {0, 200 * 1000 * 1000};
    nanosleep(&ts, NULL);
    trove_stats_get(&st);
    size_t before = st.medium_cached_bytes, e_run = 0;
    double t5 = now_s();
    for (int i = 0; i < 16; i++) {
      void *e = trove_malloc(80 * 1024);
      e_run = (trove_malloc_usable_size(e) + 8191) & ~(size_t)8191;
      trove_free(e);
    }
    trove_stats_get(&st);
    CHECK(before > e_run);                         /* older runs were cached */
    if (now_s() - t5 < 0.015)
      CHECK(st.medium_cached_bytes == e_run);      /* only the run freed last is left */
  }
  trove_collect();
  trove_stats_get(&st);
  CHECK(st.medium_cached_bytes == 0);
}

/* Buffers of more lengths than the medium cache's fixed part holds, taken and freed in turn
 * (fastpath-medium's sixteen lengths of 72 KiB - 1 MiB, 5.1 MiB against 2 MiB): the cache
 * serves the shorter ones, and the page heap the others, on the quick paths as well (heap.c,
 * medium_quick_pages and medium_quick_unfit): few mallocs take the slow path, every run comes
 * back (none in use after, nothing mapped past the first round's share). */
static void *medium_turns_thread(void *arg) {
  (void)arg;
  static const size_t kib[16] = {72, 96, 128, 80, 160, 200, 256, 112, 320, 400, 512, 144,
                                 640, 768, 1024, 192};
  enum { PAIRS = 16000 };
  for (int i = 0; i < 16; i++) trove_free(trove_malloc(kib[i] << 10));   /* its heap, its runs */
  /* Its first runs were fresh pages, which keep the cache's cap open to bursts (and so the
   * quick free off the page heap) for 1/8 of the purge delay (31 ms by default): wait that
   * out, so that the loop below runs as a long-running thread's does. */
  struct timespec ts = {0, 40 * 1000 * 1000};
  nanosleep(&ts, NULL);
  trove_stats_get(&st);
  size_t slow0 = st.slow_mallocs, held0 = st.held;
  for (int i = 0; i < PAIRS; i++) {
    unsigned char *p = trove_malloc(kib[i & 15] << 10);
    CHECK(p != NULL);
    p[0] = 1;
    p[(kib[i & 15] << 10) - 1] = 2;
    trove_free(p);
  }
  trove_stats_get(&st);
  size_t slow = st.slow_mallocs - slow0;
  printf("medium_turns: %d pairs, %zu slow mallocs, held %zu -> %zu KiB\n", PAIRS, slow,
         held0 >> 10, st.held >> 10);
  CHECK(st.medium_objects == 0);                   /* every run came back */
  CHECK(st.held <= held0 + (8u << 20));            /* its runs reused, not mapped anew */
  /* one malloc in MQUICK_PERIOD (16) takes the slow path; through malloc_slow, each of the
   * four longest lengths' mallocs also did (5 in 16) */
  CHECK(slow <= PAIRS / 8);
  return NULL;
}

static void medium_turns(void) {
  pthread_t t;
  CHECK(pthread_create(&t, NULL, medium_turns_thread, NULL) == 0);
  CHECK(pthread_join(t, NULL) == 0);
}

/* Another thread that takes fresh pages (none resident were free) makes a thread's burst of
 * frees go to the page heap, past the fixed 2 MiB, for 1/8 of the purge delay: there that
 * thread's next requests reuse them. Kept in the cache, the phases of 64-128 KiB buffers of
 * 8 threads on 2 cores out of step (bench/phases --wide) held 26% more at their peak. */
static void *fresh_taker(void *arg) {
  enum { N = 64 };
  void *q[N];
  for (int i = 0; i < N; i++) q[i] = trove_malloc(128 * 1024);   /* 8 MiB, purged: fresh */
  for (int i = 0; i < N; i++) trove_free(q[i]);
  *(int *)arg = 1;
  return NULL;
}

static void medium_cache_lean_when_others_fault(void) {
  enum { M = 64 };
  static void *m[M];
  for (int i = 0; i < M; i++) m[i] = trove_malloc(medium_size(i));
  trove_collect();                                   /* every free page purged */
  int done = 0;
  pthread_t t;
  CHECK(pthread_create(&t, NULL, fresh_taker, &done) == 0);
  CHECK(pthread_join(t, NULL) == 0 && done);
  trove_stats_get(&st);
  size_t parked = st.medium_cached_bytes;            /* the exited thread's heap waits, parked */
  double t0 = now_s();
  for (int i = 0; i < M; i++) trove_free(m[i]);
  trove_stats_get(&st);
  if (getenv("TROVE_PURGE_DELAY_MS") == NULL && now_s() - t0 < 0.015)
    CHECK(st.medium_cached_bytes - parked <= (2u << 20) + (128u << 10));
  trove_collect();
}

/* A thread that frees a burst of buffers and then waits keeps the burst in its cache; the
 * timed work of another thread gives back what waited 1/8 of the purge delay, and
 * trove_collect from another thread all of it, while that thread still lives. */
static pthread_barrier_t idle_bar;
static void *burst_then_wait(void *arg) {
  enum { N = 48 };
  void *q[N];
  for (int i = 0; i < N; i++) q[i] = trove_malloc(medium_size(i));
  size_t all = 0;
  for (int i = 0; i < N; i++) all += (trove_malloc_usable_size(q[i]) + 8191) & ~(size_t)8191;
  for (int i = 0; i < N; i++) trove_free(q[i]);
  *(size_t *)arg = all;
  pthread_barrier_wait(&idle_bar);     /* freed */
  pthread_barrier_wait(&idle_bar);     /* main has looked */
  return NULL;
}

static void medium_cache_idle_thread(void) {
  for (int round = 0; round < 2; round++) {
    size_t all = 0;
    trove_collect();
    CHECK(pthread_barrier_init(&idle_bar, NULL, 2) == 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, burst_then_wait, &all) == 0);
    pthread_barrier_wait(&idle_bar);
    trove_stats_get(&st);
    CHECK(st.medium_cached_bytes <= all + (2u << 20));
    if (round == 0) {
      trove_collect();                                  /* from this thread: all of it */
      trove_stats_get(&st);
      CHECK(st.medium_cached_bytes == 0);
    } else if (getenv("TROVE_PURGE_DELAY_MS") == NULL) {
      /* the timed work: runs after half a purge delay, from any thread's slow path */
      struct timespec ts = {0, 200 * 1000 * 1000};
      nanosleep(&ts, NULL);
      static void *v[4096];                             /* small blocks only: no cache */
      for (int i = 0; i < 4096; i++) v[i] = trove_malloc(16 + (size_t)(i % 1024) * 16);
      for (int i = 0; i < 4096; i++) trove_free(v[i]);
      trove_stats_get(&st);
      CHECK(st.medium_cached_bytes == 0);
    }
    pthread_barrier_wait(&idle_bar);
    CHECK(pthread_join(t, NULL) == 0);
    pthread_barrier_destroy(&idle_bar);
  }
}

/* Spare superblocks (heap.c): a thread that frees a working set past K in one streak keeps
 * the empty superblocks past K (up to 3 K) for its next burst, which takes them back instead
 * of going through the page heap; while it then waits, any thread's timed work gives them
 * back after 1/8 of the purge delay. */
static pthread_barrier_t spare_bar;
static size_t spare_kept, spare_released;
static void *spare_burst_then_wait(void *arg) {
  enum { N = 300 };                    /* 12 KiB blocks: 3.5 MiB, past K's 1.5 MiB */
  static void *q[N];
  (void)arg;
  trove_stats_t s0, s1;
  for (int round = 0; round < 2; round++) {
    /* a new thread counts the fresh pages taken before it as other threads' (see
     * others_fresh): it keeps none for 1/8 of the purge delay */
    struct timespec ts = {0, 50 * 1000 * 1000};
    if (round == 1) nanosleep(&ts, NULL);
    for (int i = 0; i < N; i++) CHECK((q[i] = trove_malloc(12000)) != NULL);
    trove_stats_get(&s0);
    for (int i = 0; i < N; i++) trove_free(q[i]);
    trove_stats_get(&s1);
    if (round == 1) {
      spare_kept = s1.spare_bytes;
      spare_released = s1.superblocks_released - s0.superblocks_released;
    }
  }
  pthread_barrier_wait(&spare_bar);    /* freed */
  pthread_barrier_wait(&spare_bar);    /* main has looked */
  return NULL;
}

static void spare_superblocks(void) {
  if (getenv("TROVE_PURGE_DELAY_MS") != NULL || getenv("TROVE_BLOWUP_K") != NULL) return;
  trove_collect();
  CHECK(pthread_barrier_init(&spare_bar, NULL, 2) == 0);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, spare_burst_then_wait, NULL) == 0);
  pthread_barrier_wait(&spare_bar);
  /* 2 MiB past K kept (3 K at most, 4.5 MiB); of the superblocks past K only the first of
   * the streak went on */
  printf("spare_superblocks: %zu KiB kept past K, %zu released\n", spare_kept >> 10,
         spare_released);
  CHECK(spare_kept >= (1u << 20) && spare_kept <= (9u << 19));
  CHECK(spare_released <= 2);
  /* the timed work: runs after half a purge delay, from any thread's slow path or heartbeat
   * (every TROVE_BEAT-th local free). A loop that empties no superblock of its own: one that
   * freed 32 MiB kept spares of its own once it ran past 1/8 of the purge delay (as it may
   * under load, ctest -j3), which this check then counted. */
  struct timespec ts = {0, 200 * 1000 * 1000};
  nanosleep(&ts, NULL);
  for (int i = 0; i < 4096; i++) {
    void *p = trove_malloc(64);
    CHECK(p != NULL);
    trove_free(p);
  }
  trove_stats_get(&st);
  CHECK(st.spare_bytes == 0);
  pthread_barrier_wait(&spare_bar);
  CHECK(pthread_join(t, NULL) == 0);
  pthread_barrier_destroy(&spare_bar);
}

/* Medium runs that another thread frees go back to the thread that allocated them, through
 * its remote queue; one that stops taking its queue (blocked, say, on its next request) does
 * not keep them: trove_collect from another thread, and the timed work after 1/8 of the purge
 * delay, give the runs queued for it to the page heap while it still lives (heap.c,
 * sweep_idle_queues, which looks only at heaps whose queue is flagged as holding one). */
static pthread_barrier_t handoff_bar;
static void *medium_handoff_then_wait(void *arg) {
  void **q = (void **)arg;
  for (int i = 0; i < 32; i++) CHECK((q[i] = trove_malloc(medium_size(i))) != NULL);
  pthread_barrier_wait(&handoff_bar);  /* handed over */
  pthread_barrier_wait(&handoff_bar);  /* main has freed them and looked */
  return NULL;
}

static void medium_queue_idle_owner(void) {
  for (int round = 0; round < 2; round++) {
    static void *q[32];
    trove_collect();
    trove_stats_get(&st);
    size_t before = st.medium_bytes;
    CHECK(pthread_barrier_init(&handoff_bar, NULL, 2) == 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, medium_handoff_then_wait, q) == 0);
    pthread_barrier_wait(&handoff_bar);
    size_t runs = 0;
    for (int i = 0; i < 32; i++) runs += trove_malloc_usable_size(q[i]);
    trove_stats_get(&st);
    CHECK(st.medium_bytes >= before + runs);
    for (int i = 0; i < 32; i++) trove_free(q[i]);   /* queued for the owner, which waits */
    trove_stats_get(&st);
    CHECK(st.medium_bytes >= before + runs);           /* still its until someone takes them */
    if (round == 0) {
      trove_collect();
      trove_stats_get(&st);
      CHECK(st.medium_bytes <= before);
    } else if (getenv("TROVE_PURGE_DELAY_MS") == NULL) {
      struct timespec ts = {0, 200 * 1000 * 1000};     /* past 1/8 of the 250 ms delay, and */
      nanosleep(&ts, NULL);                            /* past the half delay between rounds */
      static void *v[4096];                             /* small blocks: slow paths, ticks */
      for (int i = 0; i < 4096; i++) v[i] = trove_malloc(16 + (size_t)(i % 1024) * 16);
      for (int i = 0; i < 4096; i++) trove_free(v[i]);
      trove_stats_get(&st);
      CHECK(st.medium_bytes <= before);
    }
    pthread_barrier_wait(&handoff_bar);
    CHECK(pthread_join(t, NULL) == 0);
    pthread_barrier_destroy(&handoff_bar);
  }
}

/* A thread that ends gives its medium cache to the page heap (heap.c, _trove_heap_thread_done):
 * kept with its parked heap, the runs waited for whichever thread took that heap next. */
static void *medium_burst_then_exit(void *arg) {
  void *q[8];
  for (int i = 0; i < 8; i++) q[i] = trove_malloc(medium_size(i));
  for (int i = 0; i < 8; i++) trove_free(q[i]);
  trove_stats_t s;
  trove_stats_get(&s);
  *(size_t *)arg = s.medium_cached_bytes;          /* what it keeps while it runs */
  return NULL;
}

static void medium_cache_thread_exit(void) {
  trove_collect();
  size_t cached = 0;
  double t0 = now_s();
  pthread_t t;
  CHECK(pthread_create(&t, NULL, medium_burst_then_exit, &cached) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  trove_stats_get(&st);
  CHECK(st.medium_cached_bytes == 0);
  /* and so the check above is not idle: the thread's cache held its burst (unless a run aged
   * out first, 1/8 of the purge delay, on a loaded machine) */
  if (getenv("TROVE_PURGE_DELAY_MS") == NULL && now_s() - t0 < 0.015) CHECK(cached > 0);
}

/* The cache's batch term (heap.c, mcache_cap) counts the thread's medium pages taken and not
 * freed. A malloc served by a cached run up to 1/8 longer than it asked for took the run's
 * length, and its free gave that back: counted from the request, a thread that did so often
 * drifted below zero and kept no more than the fixed 2 MiB from then on. */
static void medium_cache_batch_after_reuse(void) {
  enum { M = 32 };
  static void *m[M], *keep[M];
  trove_collect();
  for (int round = 0; round < 100; round++) {      /* 13-page runs taken for 12-page requests */
    for (int i = 0; i < M; i++) m[i] = trove_malloc(104 * 1024);
    for (int i = 0; i < M; i++) trove_free(m[i]);
    for (int i = 0; i < M; i++) m[i] = trove_malloc(96 * 1024);
    for (int i = 0; i < M; i++) trove_free(m[i]);
  }
  trove_collect();
  for (int i = 0; i < M; i++) keep[i] = trove_malloc(256 * 1024);    /* 8 MiB held */
  for (int i = 0; i < M; i++) m[i] = trove_malloc(256 * 1024);
  double t0 = now_s();
  for (int i = 0; i < M; i++) trove_free(m[i]);   /* a batch of 8 MiB: above the fixed part */
  trove_stats_get(&st);
  if (getenv("TROVE_PURGE_DELAY_MS") == NULL && now_s() - t0 < 0.015)
    CHECK(st.medium_cached_bytes > (4u << 20));   /* well above the fixed 2 MiB */
  for (int i = 0; i < M; i++) trove_free(keep[i]);
  trove_collect();
}

/* Free pages that a thread's steady churn does not need go back within a few purge delays,
 * even though the churn keeps taking pages from them and giving pages back beside them. A
 * burst of 3.4 MiB of 20 KB blocks (2 to a 40 KiB superblock) in one segment is freed: the
 * thread keeps 1.5 MiB of its empty superblocks (Hoard's K), the rest is a store of free
 * pages, one run (or spare superblocks first, for 1/8 of the purge delay). Then a loop allocates 84 such blocks and frees them, again and again: 3 of
 * its superblocks come from the front of the store each time and go back into it. When a
 * merged run took the time of its newest part, the store never aged and stayed resident for
 * as long as the loop ran; now the part that no round drew on goes back (RSS, since a run
 * purged and merged again with a dirty piece counts as dirty as a whole). */
static void churn_leaves_store(void) {
  enum { BURST = 170, CHURN = 84 };
  static void *p[BURST];
  if (getenv("TROVE_PURGE_DELAY_MS") != NULL) return;    /* the default 250 ms is assumed */
  trove_collect();
  for (int i = 0; i < BURST; i++) {
    p[i] = trove_malloc(20000);
    CHECK(p[i] != NULL);
    memset(p[i], 1, 20000);
  }
  for (int i = 0; i < BURST; i++) trove_free(p[i]);
  trove_stats_get(&st);
  /* the store: free pages, and the empty superblocks past K that the heap may keep a while
   * as spares (whether it does depends on what other threads did just before) */
  size_t rss0 = st.process_rss, store = st.dirty_page_bytes + st.spare_bytes;
  double t0 = now_s();
  while (now_s() - t0 < 1.5) {
    for (int i = 0; i < CHURN; i++) {
      p[i] = trove_malloc(20000);
      CHECK(p[i] != NULL);
      memset(p[i], 2, 64);
    }
    for (int i = 0; i < CHURN; i++) trove_free(p[i]);
    struct timespec ts = {0, 2 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  trove_stats_get(&st);
  printf("churn_leaves_store: a store of %zu KiB; RSS %zu KiB after the burst, %zu KiB after "
         "the churn\n", store >> 10, rss0 >> 10, st.process_rss >> 10);
  CHECK(store >= (3u << 20) / 2);
  if (rss0 > 0) CHECK(st.process_rss + (1u << 20) <= rss0);      /* 1.75 MiB less here */
  trove_collect();
}

/* The heartbeat (every TROVE_BEAT-th local free runs the timed work) is what gives a burst's
 * pages back in a thread whose later calls all stay on the fast paths: an idle server's
 * health checks, a worker between jobs. Once the purge delay has passed, a light loop of
 * malloc/free pairs must see them go within a beat's frees (512); with 4,096, a thread that
 * freed 1,000 blocks a second kept a freed burst resident for 4 s. In a thread of its own,
 * whose heap starts with a full count (the burst's frees all take the slow path: 2 blocks
 * to a superblock), and whose loop's class is current before the wait, so that the loop
 * makes no slow call (whose every 32nd runs the timed work too). RSS read from /proc: the
 * statistics call does timed work of its own. */
static long statm_rss_kib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long size = 0, res = -1;
  if (f == NULL) return -1;
  if (fscanf(f, "%ld %ld", &size, &res) != 2) res = -1;
  fclose(f);
  return res < 0 ? -1 : res * 4;
}

static void *burst_then_light_loop(void *arg) {
  enum { N = 800 };                        /* 16 MB of 20 KB blocks */
  static void *p[N];
  for (int i = 0; i < N; i++) {
    p[i] = trove_malloc(20000);
    CHECK(p[i] != NULL);
    memset(p[i], 1, 20000);
  }
  trove_free(trove_malloc(64));            /* its class current */
  long before = statm_rss_kib();
  for (int i = 0; i < N; i++) trove_free(p[i]);
  struct timespec ts = {0, 350 * 1000 * 1000};
  nanosleep(&ts, NULL);                    /* past the purge delay */
  long pairs = 0;
  for (long i = 1; i <= 8192 && before > 0; i++) {
    trove_free(trove_malloc(64));
    if (i % 32 == 0 && statm_rss_kib() + 8192 <= before) {
      pairs = i;
      break;
    }
  }
  *(long *)arg = before > 0 ? pairs : -1;
  return NULL;
}

static void idle_thread_gives_back(void) {
  if (getenv("TROVE_PURGE_DELAY_MS") != NULL) return;    /* the default 250 ms is assumed */
  long pairs = 0;
  pthread_t t;
  trove_collect();
  CHECK(pthread_create(&t, NULL, burst_then_light_loop, &pairs) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  printf("idle_thread_gives_back: 8 MiB of the burst back after %ld malloc/free pairs\n", pairs);
  if (pairs < 0) return;                   /* no /proc */
  CHECK(pairs > 0 && pairs <= 1024);
}

/* realloc's headroom: growth by less than a quarter gets a quarter more room (two classes
 * up), except across 8 KiB, where it stops at 8 KiB (Redis grows list nodes up to 8 KiB by
 * appends); a block already past 8 KiB gets its quarter again; a larger step gets what it
 * asks for; a medium run gets none. */
static size_t grown(size_t from, size_t to) {
  void *p = trove_malloc(from);
  CHECK(p != NULL);
  size_t before = trove_malloc_usable_size(p);
  void *q = trove_realloc(p, to);
  CHECK(q != NULL && q != p);            /* each case must move */
  size_t u = trove_malloc_usable_size(q);
  CHECK(u >= to && before < to);
  trove_free(q);
  return u;
}

static void *realloc_headroom_thread(void *arg) {
  (void)arg;
  trove_collect();                         /* a parked heap it took over: its blocks go home */
  CHECK(grown(1024, 1030) == 1280);
  CHECK(grown(1024, 2000) == 2048);      /* vectors and doubling: what they ask for */
  CHECK(grown(6144, 6200) == 7680);      /* a quarter, still within 8 KiB */
  CHECK(grown(7168, 7200) == 8192);      /* crossing 8 KiB: 8 KiB at most */
  CHECK(grown(8192, 8200) == 10240);     /* past 8 KiB: a quarter again */
  CHECK(grown(12288, 12300) == 15360);
  void *m = trove_realloc(trove_malloc(100 * 1024), 100 * 1024 + 100);   /* moved or not */
  CHECK(m != NULL && trove_malloc_usable_size(m) == 104 * 1024);         /* medium: none */
  trove_free(m);
  return NULL;
}

/* In a thread of its own: a heap whose earlier tests left a class's superblocks full (or
 * its frees parked, heap.c "Parking on every free") may lend a block of the next class
 * (borrowing), whose size is not the headroom's. */
static void realloc_headroom(void) {
  pthread_t t;
  CHECK(pthread_create(&t, NULL, realloc_headroom_thread, NULL) == 0);
  CHECK(pthread_join(t, NULL) == 0);
}

/* Past 8 live threads per CPU (a thread per connection) a freed medium run goes back to the
 * page heap, where any thread's malloc can reuse it, instead of the freeing thread's cache,
 * and a thread takes coarse classes; once those threads are gone, the thread caches its runs
 * again and each class takes a superblock of its own. */
static pthread_barrier_t crowd_bar;
static void *crowd_thread(void *arg) {
  (void)arg;
  trove_free(trove_malloc(40));        /* a thread heap of its own: one more live thread */
  pthread_barrier_wait(&crowd_bar);    /* all started */
  pthread_barrier_wait(&crowd_bar);    /* main has looked */
  return NULL;
}

/* A thread's blocks of classes it has no superblock of: while threads crowd the CPUs, from
 * the coarse class above (heap.c, coarse mode): 270, 300 and 320 B (aligned to 64) all get
 * 384-byte blocks, aligned as asked, and 5,000 B (also aligned to 1 KiB: a class with no
 * direct[] slot, served through malloc's slow path and the aligned refill) 6 KiB ones; else
 * each its own class. */
static bool crowd_shares;   /* the crowd of medium_cache_crowded also shares classes */
static void *first_block_thread(void *arg) {
  void *a = trove_malloc(300);
  void *b = trove_malloc(270);
  void *c = trove_memalign(64, 320);
  void *d = trove_malloc(5000);
  void *e = trove_memalign(1024, 5000);
  size_t ua = trove_malloc_usable_size(a), ub = trove_malloc_usable_size(b);
  size_t uc = trove_malloc_usable_size(c), ud = trove_malloc_usable_size(d);
  size_t ue = trove_malloc_usable_size(e);
  CHECK(((uintptr_t)c & 63) == 0 && ((uintptr_t)e & 1023) == 0);
  *(bool *)arg = ua == 384 && ub == 384 && uc == 384 && ud == 6144 && ue == 6144;
  if (!*(bool *)arg) CHECK(ua == 320 && ub == 288 && uc == 320 && ud == 5120 && ue == 5120);
  memset(d, 1, ud);
  memset(e, 2, ue);
  /* Above 2 KiB a class whose coarse class already holds two full superblocks in this heap
   * takes superblocks of its own (heap.c, coarse_serves): the 40th of 40 blocks of 5,000 B
   * is 5 KiB, crowded or not. Not where the crowd also shares the classes above 256 B (8
   * CPUs or more here: 66 live heaps), since then the shared heaps fill those superblocks. */
  void *more[40];
  for (int i = 0; i < 40; i++) CHECK((more[i] = trove_malloc(5000)) != NULL);
  size_t u40 = trove_malloc_usable_size(more[39]);
  if (!crowd_shares && u40 != 5120) fprintf(stderr, "the 40th block of 5,000 B: %zu bytes\n", u40);
  CHECK(crowd_shares || u40 == 5120);
  for (int i = 0; i < 40; i++) trove_free(more[i]);
  trove_free(e);
  trove_free(d);
  trove_free(c);
  trove_free(b);
  trove_free(a);
  return NULL;
}

static bool coarse_blocks(void) {
  bool borrowed = false;
  pthread_t t;
  trove_stats_get(&st);
  CHECK(pthread_create(&t, NULL, first_block_thread, &borrowed) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  return borrowed;
}

static void medium_cache_crowded(void) {
  cpu_set_t set;
  int ncpu = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  int n = 8 * (ncpu > 0 ? ncpu : 1) + 1;
  crowd_shares = n + 1 > 63;           /* heap.c, shared_threshold: max(63, 8 per CPU) */
  pthread_t *tid = malloc(sizeof *tid * (size_t)n);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  CHECK(tid != NULL && pthread_barrier_init(&crowd_bar, NULL, (unsigned)n + 1) == 0);
  for (int i = 0; i < n; i++) CHECK(pthread_create(&tid[i], &attr, crowd_thread, NULL) == 0);
  pthread_barrier_wait(&crowd_bar);
  trove_collect();
  void *b = trove_malloc(100 * 1024);
  trove_free(b);
  trove_stats_get(&st);
  CHECK(st.medium_cached_bytes == 0);  /* n + 1 live threads: no fixed part */
  CHECK(coarse_blocks());
  pthread_barrier_wait(&crowd_bar);
  for (int i = 0; i < n; i++) CHECK(pthread_join(tid[i], NULL) == 0);
  pthread_barrier_destroy(&crowd_bar);
  pthread_attr_destroy(&attr);
  free(tid);
  b = trove_malloc(100 * 1024);
  trove_free(b);
  trove_stats_get(&st);
  CHECK(st.medium_cached_bytes == 104 * 1024);   /* alone again: the 13-page run is kept */
  CHECK(!coarse_blocks());
  /* main's own heap leaves coarse mode on its slow paths, which look at the thread count
   * every 32nd call: whether one fell while the crowd ran depends on timing, and the tests
   * that follow expect exact classes (medium mallocs are all slow) */
  for (int i = 0; i < 64; i++) trove_free(trove_malloc(100 * 1024));
  trove_collect();
}

/* Threads pass blocks to each other; while they run the totals stay within what exists. */
enum { T = 4, PER = 20000 };
static void *blocks[T][PER];
static pthread_barrier_t bar;
static void *worker(void *arg) {
  long t = (long)arg;
  for (int i = 0; i < PER; i++) blocks[t][i] = trove_malloc(16 + (size_t)(i % 50) * 8);
  pthread_barrier_wait(&bar);
  /* main looks at the totals now: freeing at once, a loaded machine let the frees run
   * before the look (in_use 0.9 MB of 17 MB live, 1 run in 36 under TROVE_ARENAS=4) */
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
  pthread_barrier_wait(&bar);                      /* looked: they free */
  pthread_barrier_wait(&bar);
  for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
  trove_collect();
  trove_stats_get(&st);
  CHECK(st.in_use <= max_live);
  CHECK(st.remote_frees > 0 || st.superblocks_adopted > 0);
  CHECK(st.threads == 1);
}

/* Design property 1: small blocks carry no header, so a superblock of 16-byte blocks holds
 * exactly its size / 16 of them. */
static void no_headers(void) {
  enum { N = 5000 };
  static void *p[N];
  for (int i = 0; i < N; i++) p[i] = trove_malloc(16);
  trove_stats_get(&st);
  const trove_class_stats_t *c = class_of(16);
  CHECK(c != NULL && c->superblocks >= 2);
  CHECK(c->blocks_capacity == c->superblocks * (64 * 1024 / 16));
  for (int i = 0; i < N; i++) trove_free(p[i]);
}

/* Design property 5: threads allocating at the same time never get blocks that share a cache
 * line (no allocator-induced false sharing, Hoard 2.1). */
enum { FS_T = 4, FS_N = 4000 };
static void *fs_blocks[FS_T][FS_N];
static pthread_barrier_t fs_bar;
static void *fs_worker(void *arg) {
  long t = (long)arg;
  pthread_barrier_wait(&fs_bar);
  for (int i = 0; i < FS_N; i++) fs_blocks[t][i] = trove_malloc(8 + (size_t)(i % 3) * 8);
  pthread_barrier_wait(&fs_bar);
  return NULL;
}
static int cmp_line(const void *a, const void *b) {
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return x < y ? -1 : x > y;
}
static void no_false_sharing(void) {
  static uintptr_t lines[FS_T * FS_N];
  pthread_t th[FS_T];
  pthread_barrier_init(&fs_bar, NULL, FS_T);
  for (long t = 0; t < FS_T; t++) pthread_create(&th[t], NULL, fs_worker, (void *)t);
  for (int t = 0; t < FS_T; t++) pthread_join(th[t], NULL);
  /* tag each line with its thread in the low bits, sort, and look for a line of two threads */
  for (int t = 0; t < FS_T; t++)
    for (int i = 0; i < FS_N; i++) lines[t * FS_N + i] = ((uintptr_t)fs_blocks[t][i] >> 6) << 2 | t;
  qsort(lines, FS_T * FS_N, sizeof lines[0], cmp_line);
  for (int i = 1; i < FS_T * FS_N; i++)
    CHECK(lines[i] >> 2 != lines[i - 1] >> 2 || (lines[i] & 3) == (lines[i - 1] & 3));
  for (int t = 0; t < FS_T; t++)
    for (int i = 0; i < FS_N; i++) trove_free(fs_blocks[t][i]);
}

/* The arena count follows TROVE_ARENAS (set by the stats_arenas test), and the lock counters
 * count: threads that take pages from one arena at once find its lock taken now and then,
 * and they never go down. */
static void *arena_worker(void *arg) {
  (void)arg;
  for (int r = 0; r < 200; r++) {
    void *p[16];
    for (int i = 0; i < 16; i++) p[i] = trove_malloc(96 * 1024);   /* page runs: arena locks */
    for (int i = 0; i < 16; i++) trove_free(p[i]);
  }
  return NULL;
}

static void arenas_and_locks(void) {
  trove_stats_t a, b;
  trove_stats_get(&a);
  const char *env = getenv("TROVE_ARENAS");
  if (env && atoi(env) > 0) CHECK(a.arenas == (size_t)atoi(env));
  CHECK(a.arenas >= 1 && a.arenas <= 64 && a.arenas_in_use <= a.arenas);
  cpu_set_t set;                  /* by default one per CPU of the affinity mask (os.c) */
  if (env == NULL && sched_getaffinity(0, sizeof set, &set) == 0) {
    size_t n = (size_t)CPU_COUNT(&set);
    CHECK(a.arenas == (n > 64 ? 64 : n));
  }
  pthread_t t[4];
  for (int i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, arena_worker, NULL) == 0);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  trove_stats_get(&b);
  CHECK(b.arenas == a.arenas && b.arenas_in_use >= 1 && b.arenas_in_use <= b.arenas);
  CHECK(b.lock_waits_pool >= a.lock_waits_pool && b.lock_waits_pages >= a.lock_waits_pages);
}

/* Borrowing (docs/DESIGN.md): once a class has filled a superblock and has no free block
 * left, a malloc takes a free block of one of the next two classes (at most a quarter
 * larger) before fresh pages; an aligned request never does. Class 5120 (superblocks of 6
 * blocks) next to 5632, whose current superblock holds two freed blocks. */
static void borrowing(void) {
  enum { N = 32 };
  void *lender[2], *own[N];
  lender[0] = trove_malloc(5500);
  lender[1] = trove_malloc(5500);
  size_t lbs = trove_malloc_usable_size(lender[0]);
  CHECK(lbs == 5632);
  trove_free(lender[0]);
  trove_free(lender[1]);
  trove_stats_get(&st);
  size_t borrowed0 = st.blocks_borrowed;
  /* fill the class until a malloc is served by the lender */
  int n = 0;
  size_t us = 0;
  while (n < N) {
    own[n] = trove_malloc(5000);
    CHECK(own[n] != NULL);
    us = trove_malloc_usable_size(own[n]);
    memset(own[n], 0x5a, us);
    n++;
    if (us != 5120) break;
  }
  printf("borrowing: block %d of 5000 B came from the %zu-byte class\n", n, us);
  CHECK(us == lbs);                        /* borrowed, not fresh pages */
  CHECK(us <= 5000 + 5000 / 4 + 16);
  trove_stats_get(&st);
  CHECK(st.blocks_borrowed == borrowed0 + 1);
  /* an aligned request of the same class now takes fresh pages, not the lender's last block
   * (5632-byte blocks are only 512-byte aligned) */
  void *al = trove_memalign(1024, 5000);
  CHECK(al != NULL && ((uintptr_t)al & 1023) == 0 && trove_malloc_usable_size(al) == 5120);
  trove_stats_get(&st);
  CHECK(st.blocks_borrowed == borrowed0 + 1);
  trove_free(al);
  for (int i = 0; i < n; i++) trove_free(own[i]);
  trove_stats_get(&st);
  CHECK(class_of(5632) == NULL || class_of(5632)->blocks_in_use == 0);
  CHECK(class_of(5120) == NULL || class_of(5120)->blocks_in_use == 0);
}

/* Parking (heap.c, "Parking"): a thread that replaces blocks of one class at random, in
 * superblocks of a few blocks that it keeps full, gets back from each malloc the block it
 * freed just before, though that block's superblock is not the current one, and without a
 * slow malloc (since the fifty-ninth session a heap that parks often parks every free for a
 * while, so free's slow path runs for few of them); the class's live count stays exact
 * while blocks are parked; and once the thread has exited and freed everything, nothing of
 * the class is left (its heap, handed back, unparks them). */
enum { PARK_N = 64, PARK_OPS = 20000, PARK_SIZE = 7000 };
static void *park_worker(void *arg) {
  size_t *res = arg;
  void *p[PARK_N];
  for (int i = 0; i < PARK_N; i++) CHECK((p[i] = trove_malloc(PARK_SIZE)) != NULL);
  trove_stats_get(&st);
  size_t slow0 = st.slow_mallocs, parked0 = st.blocks_parked;
  unsigned r = 1;
  for (int i = 0; i < PARK_OPS; i++) {
    r = r * 1103515245u + 12345u;
    int k = (int)((r >> 16) % PARK_N);
    void *old = p[k];
    trove_free(old);
    CHECK((p[k] = trove_malloc(PARK_SIZE)) != NULL);
    memset(p[k], 7, 64);
    res[0] += p[k] == old;
  }
  trove_stats_get(&st);
  const trove_class_stats_t *c = class_of(trove_malloc_usable_size(p[0]));
  res[1] = c ? c->blocks_in_use : 0;
  res[2] = c ? c->blocks_capacity / c->superblocks : 0;
  res[3] = trove_malloc_usable_size(p[0]);
  res[4] = st.slow_mallocs - slow0;        /* this thread's: the others wait in main */
  res[5] = st.blocks_parked - parked0;      /* parks on free's slow path */
  for (int i = 0; i < PARK_N; i++) trove_free(p[i]);
  return NULL;
}

static void parked_blocks(void) {
  size_t res[6] = {0, 0, 0, 0, 0, 0};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, park_worker, res) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  printf("parked_blocks: %zu of %d mallocs of %zu B (%zu a superblock) returned the block "
         "freed before (%zu slow mallocs, %zu parks on free's slow path); %zu live\n", res[0],
         PARK_OPS, res[3], res[2], res[4], res[5], res[1]);
  CHECK(res[2] < 32);                      /* a class whose blocks are parked */
  CHECK(res[0] >= PARK_OPS * 9 / 10);
  CHECK(res[4] <= PARK_OPS / 100);
  CHECK(res[5] <= PARK_OPS / 10);          /* 18,745 when only the slow path parked */
  CHECK(res[1] == PARK_N);
  trove_collect();
  trove_stats_get(&st);
  const trove_class_stats_t *c = class_of(res[3]);
  CHECK(c == NULL || (c->blocks_in_use == 0 && c->superblocks == 0));
}

/* Parking past the current superblock's count (heap.c, PARK_EXTRA): in a class of 2 blocks a
 * superblock, a thread that frees 4 blocks in a row and then allocates 4 gets the 4 it freed
 * back, the last freed first, without a slow malloc, though the current superblock holds at
 * most 2 live blocks. (Bounded by the count alone, 2 of the 4 went to their own superblocks,
 * and the third malloc left the fast path to switch to one of them.) The single replacements
 * between the bursts keep the heap parking every free. */
enum { BURST_N = 64, BURST_ROUNDS = 2000, BURST_SIZE = 20000, BURST = 4 };
static void *burst_worker(void *arg) {
  size_t *res = arg;
  void *p[BURST_N];
  for (int i = 0; i < BURST_N; i++) CHECK((p[i] = trove_malloc(BURST_SIZE)) != NULL);
  unsigned r = 7;
  size_t slow = 0;
  for (int round = 0; round < BURST_ROUNDS; round++) {
    for (int i = 0; i < 4; i++) {         /* single replacements */
      r = r * 1103515245u + 12345u;
      int k = (int)((r >> 16) % BURST_N);
      trove_free(p[k]);
      CHECK((p[k] = trove_malloc(BURST_SIZE)) != NULL);
    }
    int k[BURST];
    void *freed[BURST];
    for (int i = 0; i < BURST; i++) {     /* distinct slots */
      r = r * 1103515245u + 12345u;
      k[i] = (int)((r >> 16) % (BURST_N / BURST)) * BURST + i;
    }
    trove_stats_get(&st);
    size_t slow0 = st.slow_mallocs;
    for (int i = 0; i < BURST; i++) {
      freed[i] = p[k[i]];
      trove_free(freed[i]);
    }
    bool lifo = true;
    for (int i = 0; i < BURST; i++) {
      CHECK((p[k[i]] = trove_malloc(BURST_SIZE)) != NULL);
      lifo = lifo && p[k[i]] == freed[BURST - 1 - i];
    }
    trove_stats_get(&st);
    slow += st.slow_mallocs - slow0;
    res[0] += lifo;
  }
  const trove_class_stats_t *c = class_of(trove_malloc_usable_size(p[0]));
  res[1] = c ? c->blocks_capacity / c->superblocks : 0;
  res[2] = slow;
  for (int i = 0; i < BURST_N; i++) trove_free(p[i]);
  return NULL;
}

static void parked_bursts(void) {
  size_t res[3] = {0, 0, 0};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, burst_worker, res) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  printf("parked_bursts: %zu of %d bursts of %d frees of %d B (%zu a superblock) came back "
         "last freed first; %zu slow mallocs in the bursts\n", res[0], BURST_ROUNDS, BURST,
         BURST_SIZE, res[1], res[2]);
  CHECK(res[1] == 2);                      /* the class the test is about */
  CHECK(res[0] >= BURST_ROUNDS * 8 / 10);
  CHECK(res[2] <= BURST_ROUNDS / 10);
}

/* Idle free blocks above 4 KiB in superblocks with live blocks give their whole pages past
 * their first 16 bytes back (heap.c, idle_blocks_purge): at once on trove_collect, after the purge delay on
 * the thread's timed work. In a thread of its own (a heap with nothing else in its lists):
 * 512 blocks of 12 KiB (4 a superblock), written whole, three in four freed. The live ones
 * keep every byte, and the freed ones come back to malloc without new superblocks: their
 * links, in the page kept, still make each superblock's list of three whole. Twice: on
 * trove_collect, then on the timed work, by when the blowup rule has moved some of those
 * superblocks (6 MiB of them, past K, with the main thread's heap alive) to the pool, whose
 * timed sweep purges them (without it, 168 of the 384 were). */
enum { IDLE_N = 512, IDLE_SIZE = 12 * 1024 };
static size_t rss_now(void) {
  trove_stats_get(&st);
  return st.process_rss;
}
static void idle_fill(void **p, int i) {
  unsigned char *b = p[i];
  for (size_t k = 0; k < IDLE_SIZE; k += 256) b[k] = (unsigned char)(i + k / 256);
  b[IDLE_SIZE - 1] = (unsigned char)i;
}
static bool idle_live_intact(void **p) {
  for (int i = 0; i < IDLE_N; i += 4) {
    const unsigned char *b = p[i];
    for (size_t k = 0; k < IDLE_SIZE; k += 256)
      if (b[k] != (unsigned char)(i + k / 256)) return false;
    if (b[IDLE_SIZE - 1] != (unsigned char)i) return false;
  }
  return true;
}
static void *idle_worker(void *arg) {
  size_t *res = arg;   /* rss drop on collect (KiB), purged on collect, purged on timer, ok */
  static void *p[IDLE_N];
  for (int i = 0; i < IDLE_N; i++) {
    p[i] = trove_malloc(IDLE_SIZE);
    idle_fill(p, i);
  }
  trove_stats_get(&st);
  size_t sbs = class_of(trove_malloc_usable_size(p[0]))->superblocks;
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < IDLE_N; i++)
      if (i % 4) trove_free(p[i]);
    trove_stats_get(&st);
    size_t purged0 = st.blocks_purged, rss0 = st.process_rss;
    if (round == 0) {
      trove_collect();
      res[0] = rss0 > rss_now() ? (rss0 - st.process_rss) >> 10 : 0;
      res[1] = st.blocks_purged - purged0;
    } else {                  /* the timed work, run by the heartbeat of small pairs */
      const char *env = getenv("TROVE_PURGE_DELAY_MS");
      long delay = env ? atol(env) : 250;
      struct timespec ts = {0, 20 * 1000 * 1000};
      for (long waited = 0; waited < 20 * delay + 2000 && st.blocks_purged - purged0 < IDLE_N * 3 / 4;
           waited += 20) {
        nanosleep(&ts, NULL);
        for (int i = 0; i < 1024; i++) trove_free(trove_malloc(64));
        trove_stats_get(&st);
      }
      res[2] = st.blocks_purged - purged0;
    }
    bool ok = idle_live_intact(p);
    for (int i = 0; i < IDLE_N; i++)
      if (i % 4) {
        p[i] = trove_malloc(IDLE_SIZE);
        idle_fill(p, i);
      }
    trove_stats_get(&st);
    ok = ok && class_of(trove_malloc_usable_size(p[0]))->superblocks == sbs && idle_live_intact(p);
    res[3] += ok;
  }
  for (int i = 0; i < IDLE_N; i++) trove_free(p[i]);
  return NULL;
}

static void idle_blocks_purged(void) {
  size_t res[4] = {0, 0, 0, 0};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, idle_worker, res) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  printf("idle_blocks_purged: collect gave back %zu KiB, %zu blocks purged; the timed work %zu\n",
         res[0], res[1], res[2]);
  CHECK(res[1] >= IDLE_N * 3 / 4);
  CHECK(res[0] >= (size_t)IDLE_N * 3 / 4 * 4);   /* half of the 8 KiB past each one's first page */
  CHECK(res[2] >= IDLE_N * 3 / 4);
  CHECK(res[3] == 2);
}

/* A thread that frees a burst within K and then blocks keeps the empty superblocks on its
 * sparse list; trove_collect from another thread gives them back, and so does any thread's
 * timed work once they waited a purge delay (heap.c, sweep_idle_caches), while the thread
 * still lives. The owner's count of them stays right: its next burst keeps as many again. */
static pthread_barrier_t ie_bar;
enum { IE_N = 4000, IE_SIZE = 200 };  /* 208 B blocks: 157 a 32 KiB superblock, 26 of them */
static void *idle_empties_worker(void *arg) {
  static void *q[IE_N];
  (void)arg;
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < IE_N; i++) CHECK((q[i] = trove_malloc(IE_SIZE)) != NULL);
    for (int i = 0; i < IE_N; i++) memset(q[i], 0x5a, IE_SIZE);
    for (int i = 0; i < IE_N; i++) trove_free(q[i]);
    pthread_barrier_wait(&ie_bar);    /* freed */
    pthread_barrier_wait(&ie_bar);    /* main has looked */
  }
  return NULL;
}

static void idle_thread_empties(void) {
  if (getenv("TROVE_PURGE_DELAY_MS") != NULL || getenv("TROVE_BLOWUP_K") != NULL) return;
  trove_collect();
  trove_stats_get(&st);
  size_t bs = 208, base = class_of(bs) ? class_of(bs)->superblocks : 0, kept[3], released[3];
  CHECK(pthread_barrier_init(&ie_bar, NULL, 2) == 0);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, idle_empties_worker, NULL) == 0);
  for (int round = 0; round < 3; round++) {
    pthread_barrier_wait(&ie_bar);
    trove_stats_get(&st);
    kept[round] = class_of(bs) ? class_of(bs)->superblocks - base : 0;
    released[round] = st.superblocks_released;
    CHECK(st.spare_bytes == 0);                     /* none past K: the count was right */
    CHECK(kept[round] >= 20);                       /* within K: kept for the next burst */
    if (round == 0) {
      trove_collect();                              /* from this thread: all but its current one */
    } else if (round == 1) {
      /* the timed work: runs after half a purge delay, from any thread's slow path or
       * heartbeat; the empty ones go once they waited the delay */
      struct timespec ts = {0, 400 * 1000 * 1000};
      nanosleep(&ts, NULL);
      for (int i = 0; i < 4096; i++) {
        void *p = trove_malloc(64);
        CHECK(p != NULL);
        trove_free(p);
      }
    }
    if (round < 2) {
      trove_stats_get(&st);
      CHECK((class_of(bs) ? class_of(bs)->superblocks : 0) <= base + 1);
    }
    pthread_barrier_wait(&ie_bar);
  }
  printf("idle_thread_empties: %zu, %zu, %zu superblocks kept\n", kept[0], kept[1], kept[2]);
  CHECK(kept[1] == kept[0] && kept[2] == kept[0]);
  CHECK(released[1] == released[0] && released[2] == released[0]);
  CHECK(pthread_join(t, NULL) == 0);
  pthread_barrier_destroy(&ie_bar);
}

int main(int argc, char **argv) {
  borrowing();
  sparse_empty_given_back();
  parked_blocks();
  empties_reused();
  single_thread_exact();
  purged_counted_once();
  medium_cache();
  medium_turns();
  medium_cache_lean_when_others_fault();
  medium_cache_idle_thread();
  spare_superblocks();
  idle_thread_empties();
  medium_queue_idle_owner();
  medium_cache_thread_exit();
  medium_cache_batch_after_reuse();
  churn_leaves_store();
  idle_thread_gives_back();
  medium_cache_crowded();
  realloc_headroom();
  arenas_and_locks();
  no_headers();
  no_false_sharing();
  threads_within_bounds();
  held_counts_segments_only();
  large_tail_reused();
  large_idle_given_back_on_growth();
  idle_blocks_purged();
  scattered_frees_come_back_in_order();   /* its thread takes fresh pages: see medium_cache */
  parked_bursts();                        /* so does this one's */
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
