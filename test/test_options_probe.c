/* Probe for test_options.py: exercises one behaviour an option controls and prints the
 * figures the test compares, then the statistics (which list the options in force). Linked
 * with libtrove_noov; options come from the environment as in any trove process. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <sys/wait.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "trove.h"

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Allocate and free 32 MiB of small blocks, keeping one in 4096 (so segments stay mapped):
 * empty superblocks go back to the page heap as dirty pages. */
static void burst(void) {
  enum { N = 32 * 1024 };
  static void *p[N];
  for (int i = 0; i < N; i++) p[i] = trove_malloc(1000);
  for (int i = 0; i < N; i++)
    if (i % 4096) trove_free(p[i]);
}

/* The process's resident set (KiB), from the kernel rather than trove's estimate. */
static size_t rss_kib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long size = 0, resident = 0;
  if (f) {
    if (fscanf(f, "%lu %lu", &size, &resident) != 2) resident = 0;
    fclose(f);
  }
  return resident * (size_t)sysconf(_SC_PAGESIZE) / 1024;
}

/* The process's threads, from the kernel: trove's background thread counts. */
static int threads_now(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  int n = 0;
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "Threads:", 8) == 0) n = atoi(line + 8);
  if (f) fclose(f);
  return n;
}

/* A hash table torn down, then a quiet server: `mib` MiB of 320-byte blocks, written, freed in
 * a random order, then no call for up to `wait_ms`. Prints what went on to the pool and the page
 * heap right after the frees (a heap's superblocks past K go on at once), the RSS then and a second
 * later, the threads a second later and how long until trove's background thread, if any,
 * was gone (polled every 50 ms). */
static void teardown(size_t mib) {
  size_t n = (mib << 20) / 320;
  void **p = trove_malloc(n * sizeof *p);
  if (p == NULL) return;
  for (size_t i = 0; i < n; i++) {
    p[i] = trove_malloc(320);
    if (p[i]) memset(p[i], 1, 320);
  }
  uint64_t x = 88172645463325252u;
  for (size_t i = n - 1; i > 0; i--) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    size_t j = (size_t)(x % (i + 1));
    void *t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
  for (size_t i = 0; i < n; i++) trove_free(p[i]);
  trove_free(p);
}
static void teardown_then_wait(size_t mib, long wait_ms) {
  teardown(mib);
  trove_stats_t st;
  trove_stats_get(&st);
  printf("given_on_kib=%zu\nfreed_kib=%zu\n", (st.pool_bytes + st.free_page_bytes) >> 10,
         rss_kib());
  fflush(stdout);
  sleep_ms(1000);
  printf("idle_kib=%zu\nthreads_1s=%d\n", rss_kib(), threads_now());
  long waited = 1000;
  while (threads_now() > 1 && waited < wait_ms) {
    sleep_ms(50);
    waited += 50;
  }
  printf("threads_end=%d\nwaited_ms=%ld\n", threads_now(), waited);
}

/* 48 MiB in large blocks and 16 MiB in medium ones, written, then freed: what a query's sort
 * leaves behind. Then no call for a second. Prints the RSS after the frees and after it. */
static void free_then_wait(const char *tag) {
  enum { L = 3, M = 64 };
  void *l[L], *m[M];
  for (int i = 0; i < L; i++) {
    l[i] = trove_malloc(16u << 20);
    if (l[i]) memset(l[i], 1, 16u << 20);
  }
  for (int i = 0; i < M; i++) {
    m[i] = trove_malloc(256u << 10);
    if (m[i]) memset(m[i], 1, 256u << 10);
  }
  for (int i = 0; i < L; i++) trove_free(l[i]);
  for (int i = 0; i < M; i++) trove_free(m[i]);
  printf("%sfreed_kib=%zu\n", tag, rss_kib());
  sleep_ms(1000);
  printf("%sidle_kib=%zu\n", tag, rss_kib());
  fflush(stdout);
}

/* Many slow-path calls spread over time, so that timed work gets its chances. */
static void ticks(void) {
  for (int round = 0; round < 20; round++) {
    for (int i = 0; i < 2000; i++) {
      void *q = trove_malloc(70000);            /* medium: always the slow path */
      trove_free(q);
    }
    sleep_ms(5);
  }
}

/* One thread of a round: 8 blocks in each of 64 sizes (16 B-1 KiB, classes of at least 8
 * blocks a superblock), all freed, then the thread exits, leaving one empty current
 * superblock per size class and nothing on its sparse list. */
static void *round_worker(void *arg) {
  enum { SIZES = 64, PER = 8 };
  void *p[SIZES * PER];
  (void)arg;
  for (int i = 0; i < SIZES * PER; i++) {
    p[i] = trove_malloc((size_t)(i / PER + 1) * 16);
    if (p[i] == NULL) return NULL;
    memset(p[i], 1, 16);
  }
  for (int i = 0; i < SIZES * PER; i++) trove_free(p[i]);
  return NULL;
}

/* A worker of the "workers" probe: 4 MiB of 1000 B blocks and 16 medium buffers of 100 KiB,
 * all freed, leaving empty superblocks and a medium cache with its heap; then, if `arg` is
 * set, it lives on for five purge delays (a worker, not a short task) before it exits. */
static void *churn_worker(void *arg) {
  enum { N = 4096, M = 16 };
  static _Thread_local void *p[N], *q[M];
  for (int i = 0; i < N; i++) p[i] = trove_malloc(1000);
  for (int i = 0; i < M; i++) q[i] = trove_malloc(100 * 1024);
  for (int i = 0; i < N; i++) {
    if (p[i]) memset(p[i], 1, 1000);
    trove_free(p[i]);
  }
  for (int i = 0; i < M; i++) {
    if (q[i]) memset(q[i], 1, 100 * 1024);
    trove_free(q[i]);
  }
  if (arg) {
    const char *d = getenv("TROVE_PURGE_DELAY_MS");
    sleep_ms(5 * (d ? atol(d) : 250));
  }
  return NULL;
}

/* A thread of the "taskburst" probe: 4 MiB of 1000 B blocks, written; it frees every other
 * one (its superblocks stay partial, with its heap) and leaves the rest to the main thread,
 * and ends at once (a short task). */
enum { BURST_THREADS = 24, BURST_BLOCKS = 4096 };
static void *burst_blocks[BURST_THREADS][BURST_BLOCKS];
static pthread_barrier_t burst_bar;
static void *burst_task(void *arg) {
  void **p = burst_blocks[(size_t)arg];
  for (int i = 0; i < BURST_BLOCKS; i++) {
    p[i] = trove_malloc(1000);
    if (p[i]) memset(p[i], 1, 1000);
  }
  for (int i = 1; i < BURST_BLOCKS; i += 2) {
    trove_free(p[i]);
    p[i] = NULL;
  }
  /* all alive at once, so that none takes over another's parked heap (on a loaded machine,
   * tasks that ran one after the other filled each other's freed halves: 60 MiB parked) */
  pthread_barrier_wait(&burst_bar);
  return NULL;
}

/* A thread of the "crowded" probe: one 1000-byte block (the 1 KiB class), held until all
 * threads have theirs. */
static pthread_barrier_t crowd_bar;
static void *crowd_worker(void *arg) {
  (void)arg;
  void *p = trove_malloc(1000);
  pthread_barrier_wait(&crowd_bar);
  pthread_barrier_wait(&crowd_bar);
  trove_free(p);
  return NULL;
}

/* A thread of the "busy" probe: once all threads have their heaps (a first malloc), one
 * 1000-byte block held, like crowd_worker, and 4 buffers of 200 KiB (medium runs) freed
 * before the count. */
static void *busy_worker(void *arg) {
  (void)arg;
  trove_free(trove_malloc(16));
  pthread_barrier_wait(&crowd_bar);
  void *p = trove_malloc(1000), *m[4];
  for (int i = 0; i < 4; i++)
    if ((m[i] = trove_malloc(200 * 1024)) != NULL) memset(m[i], 1, 200 * 1024);
  for (int i = 0; i < 4; i++) trove_free(m[i]);
  pthread_barrier_wait(&crowd_bar);
  pthread_barrier_wait(&crowd_bar);
  trove_free(p);
  return NULL;
}

/* Threads of the "shared" probe: each allocates 2 blocks of 3000 bytes (the 3 KiB class,
 * shared between threads when they crowd the CPUs), and once all have theirs, frees the 2 of
 * the next thread (remote frees into the shared heaps), allocates and frees 200 more, and
 * exits. */
#define SHARE_HELD 2
/* a class above 2 KiB, and one above 256 B with direct[] slots (640 B, coarse 768) */
static const size_t share_size[2] = {3000, 600};
static pthread_barrier_t share_bar;
static void **share_blocks;
static int share_n;
static void *share_worker(void *arg) {
  int i = (int)(intptr_t)arg;
  trove_free(trove_malloc(16));              /* a heap of its own first */
  pthread_barrier_wait(&share_bar);          /* then all allocate, crowded */
  for (int k = 0; k < 2 * SHARE_HELD; k++) {
    size_t size = share_size[k / SHARE_HELD];
    void *p = share_blocks[i * 2 * SHARE_HELD + k] = trove_malloc(size);
    if (p) memset(p, i & 0xff, size);
  }
  pthread_barrier_wait(&share_bar);
  pthread_barrier_wait(&share_bar);          /* main reads the statistics in between */
  int j = (i + 1) % share_n;
  for (int k = 0; k < 2 * SHARE_HELD; k++) {
    size_t size = share_size[k / SHARE_HELD];
    unsigned char *b = share_blocks[j * 2 * SHARE_HELD + k];
    if (b && (b[0] != (j & 0xff) || b[size - 1] != (j & 0xff))) abort();   /* overwritten */
    trove_free(b);
  }
  for (int r = 0; r < 200; r++) {
    void *p = trove_malloc(1500 + (size_t)(r % 7) * 1000);
    if (p) memset(p, 1, 1500);
    trove_free(p);
  }
  return NULL;
}

/* Start n threads with small stacks, each given its index; NULL if not all could start. */
/* The blocks a superblock of the class of `block_size` holds, on average over its superblocks. */
/* "turns": thread 0 builds 64 MiB of 100 KB buffers, frees them (its medium cache keeps them)
 * and waits at the barrier while thread 1 builds 64 MiB of 64-byte blocks. What each held
 * from the OS at the end of its build goes to turn_held[id]. */
enum { TURN_MB = 64 };
static pthread_barrier_t turn_bar;
static size_t turn_held[2];
static void *turn_worker(void *arg) {
  long id = (long)arg;
  size_t sz = id == 0 ? 100000 : 64, n = ((size_t)TURN_MB << 20) / sz;
  void **p = calloc(n, sizeof *p);
  for (int turn = 0; turn < 2; turn++) {
    if (turn == id && p) {
      for (size_t i = 0; i < n; i++)
        if ((p[i] = trove_malloc(sz)) != NULL) memset(p[i], 1, 64);
      trove_stats_t st;
      trove_stats_get(&st);
      turn_held[id] = st.held;
      for (size_t i = 0; i < n; i++) trove_free(p[i]);
    }
    pthread_barrier_wait(&turn_bar);
  }
  free(p);
  return NULL;
}

static void print_blocks_per_superblock(const trove_stats_t *st, size_t block_size) {
  for (size_t c = 0; c < sizeof st->classes / sizeof st->classes[0]; c++)
    if (st->classes[c].block_size == block_size)
      printf("blocks_per_superblock=%zu\n",
             st->classes[c].blocks_capacity / (st->classes[c].superblocks ? st->classes[c].superblocks : 1));
}

/* `rounds` batches of `per` blocks of `size` (at most 2,048), each written and freed before
 * the next, in the order they were allocated or (`shuffle`) in a shuffled order; the
 * statistics while the last batch is live. False if a malloc failed. */
static bool batches(size_t size, int per, int rounds, bool shuffle, trove_stats_t *st) {
  static void *q[2048];
  uint64_t x = 88172645463325252ull;
  for (int round = 0; round < rounds; round++) {
    for (int i = 0; i < per; i++) {
      q[i] = trove_malloc(size);
      if (q[i] == NULL) return false;
      memset(q[i], 1, 64);
    }
    if (round == rounds - 1) trove_stats_get(st);
    for (int i = per - 1; shuffle && i > 0; i--) {   /* Fisher-Yates, xorshift */
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      int j = (int)(x % (uint64_t)(i + 1));
      void *t = q[i];
      q[i] = q[j];
      q[j] = t;
    }
    for (int i = 0; i < per; i++) trove_free(q[i]);
  }
  return true;
}

static pthread_t *start_threads(int n, void *(*fn)(void *)) {
  pthread_t *t = malloc(sizeof *t * (size_t)n);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  int made = 0;
  while (t && made < n && pthread_create(&t[made], &attr, fn, (void *)(intptr_t)made) == 0) made++;
  return made == n ? t : NULL;
}

/* A second thread with a heap, blocked until told to exit: superblocks released to the
 * shared pool are for other threads to adopt, so trove releases them only while one runs. */
static pthread_mutex_t other_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t other_cv = PTHREAD_COND_INITIALIZER;
static int other_state;                      /* 1: it has its heap; 2: it may exit */
static void *other_thread(void *arg) {
  (void)arg;
  trove_free(trove_malloc(32));
  pthread_mutex_lock(&other_lock);
  other_state = 1;
  pthread_cond_broadcast(&other_cv);
  while (other_state != 2) pthread_cond_wait(&other_cv, &other_lock);
  pthread_mutex_unlock(&other_lock);
  return NULL;
}

/* Whether the mapping that holds `p` has `flag` among its VmFlags in /proc/self/smaps ("hg":
 * MADV_HUGEPAGE, "nh": MADV_NOHUGEPAGE); -1 if no mapping holds it or the file cannot say. */
static int vm_flag(const void *p, const char *flag) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (f == NULL) return -1;
  char line[512];
  int in = 0, found = -1;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
      continue;
    }
    if (in && strncmp(line, "VmFlags:", 8) == 0) {
      found = 0;
      for (char *t = strtok(line + 8, " \n"); t; t = strtok(NULL, " \n"))
        if (strcmp(t, flag) == 0) found = 1;
      break;
    }
  }
  fclose(f);
  return found;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  trove_stats_t st;
  if (strcmp(mode, "dirty") == 0) {
    burst();
    trove_stats_get(&st);
    printf("dirty_kib=%zu\n", st.dirty_page_bytes >> 10);
  } else if (strcmp(mode, "delay") == 0) {
    burst();
    ticks();
    trove_stats_get(&st);
    printf("dirty_kib=%zu\n", st.dirty_page_bytes >> 10);
  } else if (strcmp(mode, "blowup") == 0 || strcmp(mode, "blowup-alone") == 0) {
    /* Fill many superblocks of one class, then free three blocks in four (with another
     * thread alive, or alone). */
    enum { N = 64 * 1024 };
    static void *p[N];
    pthread_t other;
    bool alone = strcmp(mode, "blowup-alone") == 0;
    if (!alone) {
      pthread_create(&other, NULL, other_thread, NULL);
      pthread_mutex_lock(&other_lock);
      while (other_state != 1) pthread_cond_wait(&other_cv, &other_lock);
      pthread_mutex_unlock(&other_lock);
    }
    for (int i = 0; i < N; i++) p[i] = trove_malloc(64);
    for (int i = 0; i < N; i++)
      if (i % 4) trove_free(p[i]);
    trove_stats_get(&st);
    printf("released=%zu\n", st.superblocks_released);
    ticks();                         /* 100 ms of slow paths: the timed work runs */
    trove_stats_get(&st);
    printf("released_later=%zu\n", st.superblocks_released);
    if (!alone) {
      pthread_mutex_lock(&other_lock);
      other_state = 2;
      pthread_cond_broadcast(&other_cv);
      pthread_mutex_unlock(&other_lock);
      pthread_join(other, NULL);
    }
  } else if (strcmp(mode, "large") == 0) {
    void *p = trove_malloc(8u << 20);
    memset(p, 1, 8u << 20);
    trove_stats_get(&st);
    size_t before = st.held;
    trove_free(p);
    trove_stats_get(&st);
    printf("unmapped_kib=%zu\n", (before - st.held) >> 10);
  } else if (strcmp(mode, "idle") == 0) {
    /* One class used, then left empty while the thread goes on with other sizes: its current
     * superblock must go back after the purge delay. */
    static void *p[100];
    for (int i = 0; i < 100; i++) p[i] = trove_malloc(3000);
    size_t bs = trove_malloc_usable_size(p[0]);
    for (int i = 0; i < 100; i++) trove_free(p[i]);
    ticks();
    trove_stats_get(&st);
    size_t n = 0;
    for (int c = 0; c < TROVE_STATS_CLASSES; c++)
      if (st.classes[c].block_size == bs) n = st.classes[c].superblocks;
    printf("idle_superblocks=%zu\n", n);
  } else if (strcmp(mode, "pool") == 0) {
    /* Strings grown by realloc in small steps: each block moves up through the classes and
     * the sparse superblocks the heap lets go (blowup rule) empty soon after. With no sweep
     * in sight (long purge delay), the pool must not keep them. */
    enum { N = 2000 };
    static char *s[N];
    static size_t len[N];
    unsigned r = 1;
    for (int it = 0; it < 1000000; it++) {
      r = r * 1103515245u + 12345u;
      int i = (int)((r >> 8) % N);
      if (len[i] > 4096) {
        trove_free(s[i]);
        s[i] = NULL;
        len[i] = 0;
      }
      size_t nl = len[i] + 1 + ((r >> 16) & 31);
      char *q = trove_realloc(s[i], nl);
      if (q == NULL) return 1;
      q[nl - 1] = 1;
      s[i] = q;
      len[i] = nl;
    }
    trove_stats_get(&st);
    printf("pool_kib=%zu\nin_use_kib=%zu\n", st.pool_bytes >> 10, st.in_use >> 10);
  } else if (strcmp(mode, "purgecount") == 0) {
    /* A burst freed under a strict cap purges its runs as they are freed; the segments they
     * empty are unmapped later, and that unmap must not count their pages again. */
    enum { N = 24 * 1024 };
    static void *p[N];
    trove_stats_get(&st);
    size_t held0 = st.held, purged0 = st.purged_bytes;
    for (int i = 0; i < N; i++) {
      p[i] = trove_malloc(1000);
      if (p[i] == NULL) return 1;
      memset(p[i], 1, 1000);
    }
    trove_stats_get(&st);
    size_t grown = st.held - held0;
    for (int i = 0; i < N; i++) trove_free(p[i]);
    trove_collect();
    trove_stats_get(&st);
    printf("grown_kib=%zu\npurged_kib=%zu\n", grown >> 10, (st.purged_bytes - purged0) >> 10);
  } else if (strcmp(mode, "rounds") == 0) {
    /* Threads that end and are replaced in rounds (a pool that recycles its workers,
     * mimalloc-bench's mstress): what one round freed, the next reuses. Purging it between
     * rounds only to fault it in again would show as purged bytes many times the peak. */
    for (int round = 0; round < 40; round++) {
      pthread_t t[4];
      for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, round_worker, (void *)(size_t)(round * 4 + i));
      for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    }
    trove_stats_get(&st);
    printf("purged_kib=%zu\npeak_held_kib=%zu\n", st.purged_bytes >> 10, st.peak_held >> 10);
  } else if (strcmp(mode, "workers") == 0 || strcmp(mode, "tasks") == 0) {
    /* Four threads churn memory, free it all and exit; then the process makes no allocator
     * call (a server idling after its workers ended). Workers (lived past four purge delays)
     * hand back what they held as they exit; tasks (short-lived) park it with their heaps
     * for a successor, and only a timed purge on a later slow path returns it. */
    pthread_t t[4];
    bool workers = strcmp(mode, "workers") == 0;
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, churn_worker, workers ? (void *)1 : NULL);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    trove_stats_get(&st);
    printf("kept_kib=%zu\nresident_kib=%zu\n",
           (st.dirty_page_bytes + st.medium_cached_bytes) >> 10, st.resident >> 10);
  } else if (strcmp(mode, "taskburst") == 0) {
    /* A burst of short tasks: 24 threads each leave 2 MiB of blocks in 4 MiB of superblocks
     * and end; the main thread frees those blocks (onto the queues of the parked heaps) and
     * then makes no call for 1.5 s (a program that waits once its parallel phase is over). */
    pthread_t t[BURST_THREADS];
    pthread_barrier_init(&burst_bar, NULL, BURST_THREADS);
    for (size_t i = 0; i < BURST_THREADS; i++) pthread_create(&t[i], NULL, burst_task, (void *)i);
    for (int i = 0; i < BURST_THREADS; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < BURST_THREADS; i++)
      for (int k = 0; k < BURST_BLOCKS; k++) trove_free(burst_blocks[i][k]);
    printf("freed_kib=%zu\n", rss_kib());
    fflush(stdout);
    sleep_ms(1500);
    printf("idle_kib=%zu\n", rss_kib());
  } else if (strcmp(mode, "crowded") == 0 || strcmp(mode, "uncrowded") == 0) {
    /* Threads that each hold one block of the 1 KiB class: 4 of them, or more than 8 per
     * CPU (then a heap's first superblock of a class is a short run: 8 blocks, not 32). */
    long cpus = sysconf(_SC_NPROCESSORS_CONF);
    int n = strcmp(mode, "crowded") == 0 ? (int)(16 * (cpus > 0 ? cpus : 1) + 16) : 4;
    pthread_barrier_init(&crowd_bar, NULL, (unsigned)n + 1);
    pthread_t *t = start_threads(n, crowd_worker);
    if (t == NULL) return 1;
    pthread_barrier_wait(&crowd_bar);
    trove_stats_get(&st);
    print_blocks_per_superblock(&st, 1024);
    pthread_barrier_wait(&crowd_bar);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    free(t);
  } else if (strcmp(mode, "busy") == 0) {
    /* 6 threads per CPU of the affinity mask (trove counts those): past 5 per CPU, short
     * first superblocks, and the medium caches' fixed parts share 2 MiB per CPU; not past 8,
     * so neither coarse classes nor shared heaps. */
    cpu_set_t set;
    int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    int n = 6 * (cpus > 0 ? cpus : 1);
    pthread_barrier_init(&crowd_bar, NULL, (unsigned)n + 1);
    pthread_t *t = start_threads(n, busy_worker);
    if (t == NULL) return 1;
    pthread_barrier_wait(&crowd_bar);
    pthread_barrier_wait(&crowd_bar);
    trove_stats_get(&st);
    print_blocks_per_superblock(&st, 1024);
    printf("cpus=%d\nmedium_cached_kib=%zu\n", cpus, st.medium_cached_bytes >> 10);
    pthread_barrier_wait(&crowd_bar);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    free(t);
  } else if (strcmp(mode, "colour") == 0) {
    /* 256 blocks each of 4, 8 and 16 KiB: over how many sets of a first-level cache (64 B
     * lines, 64 sets: address bits 6-11) their first lines fall, the fewest of the three;
     * and whether page-aligned requests of those sizes still get pages */
    static const size_t sizes[3] = {4096, 8192, 16384};
    enum { NB = 256 };
    static void *b[NB];
    size_t fewest = 64;
    int aligned = 1;
    for (int s = 0; s < 3; s++) {
      uint64_t seen = 0;
      for (int i = 0; i < NB; i++) {
        b[i] = trove_malloc(sizes[s]);
        if (b[i] == NULL) return 1;
        memset(b[i], 1, 64);
        seen |= (uint64_t)1 << (((uintptr_t)b[i] >> 6) & 63);
      }
      size_t sets = (size_t)__builtin_popcountll(seen);
      if (sets < fewest) fewest = sets;
      for (int i = 0; i < NB; i++) trove_free(b[i]);
      void *p = NULL;
      if (trove_posix_memalign(&p, 4096, sizes[s]) != 0) return 1;
      aligned = aligned && ((uintptr_t)p & 4095) == 0 && trove_malloc_usable_size(p) >= sizes[s];
      trove_free(p);
    }
    printf("head_sets=%zu\npage_aligned=%d\n", fewest, aligned);
  } else if (strcmp(mode, "grow") == 0 || strcmp(mode, "nogrow") == 0 ||
             strcmp(mode, "cycle2") == 0) {
    /* Batches of 32 KiB blocks (2 a superblock at first), all freed: 1,024 a batch (32 MiB,
     * far past K and the heap's spare superblocks, so empty superblocks leave the heap and
     * fresh ones are carved), or 16 (512 KiB, within K: the same superblocks serve every
     * batch), freed in a shuffled order (nogrow: the two blocks of a superblock seldom one
     * after the other) or in order (cycle2, 400 batches: 3,200 superblocks emptied by two
     * frees in a row and taken back). Then the blocks a superblock of the class holds,
     * counted while the last batch is live. */
    bool grow = strcmp(mode, "grow") == 0, nogrow = strcmp(mode, "nogrow") == 0;
    if (!batches(32768, grow ? 1024 : 16, grow || nogrow ? 200 : 400, nogrow, &st)) return 1;
    print_blocks_per_superblock(&st, 32768);
  } else if (strcmp(mode, "cycle") == 0 || strcmp(mode, "cyclerandom") == 0 ||
             strcmp(mode, "cyclegrow") == 0) {
    /* 600 batches of 100 blocks of 4 KiB (8 a superblock at first, 400 KiB a batch: within
     * K, so the same superblocks serve every batch, emptied and taken back some 7,000 times
     * in all), freed in the order they were allocated, or in a shuffled order. Then the
     * blocks a superblock of the class holds, counted while the last batch is live; or
     * (cyclegrow) once 5,000 such blocks (20 MiB) are live after the batches. */
    static void *q[100], *keep[5000];
    uint64_t x = 88172645463325252ull;
    bool shuffle = strcmp(mode, "cyclerandom") == 0, grow = strcmp(mode, "cyclegrow") == 0;
    for (int round = 0; round < 600; round++) {
      for (int i = 0; i < 100; i++) {
        q[i] = trove_malloc(4096);
        if (q[i] == NULL) return 1;
        memset(q[i], 1, 64);
      }
      if (round == 599 && !grow) trove_stats_get(&st);
      for (int i = 99; shuffle && i > 0; i--) {   /* Fisher-Yates, xorshift */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int j = (int)(x % (uint64_t)(i + 1));
        void *t = q[i];
        q[i] = q[j];
        q[j] = t;
      }
      for (int i = 0; i < 100; i++) trove_free(q[i]);
    }
    for (int i = 0; grow && i < 5000; i++) {
      keep[i] = trove_malloc(4096);
      if (keep[i] == NULL) return 1;
      memset(keep[i], 1, 64);
    }
    if (grow) trove_stats_get(&st);
    print_blocks_per_superblock(&st, 4096);
    for (int i = 0; grow && i < 5000; i++) trove_free(keep[i]);
  } else if (strcmp(mode, "growsoon") == 0) {
    /* Four batches of 2,048 blocks of 8 KiB (4 a superblock at first), each freed before the
     * next: 16 MiB, past K and the spares, so each batch takes some 300 fresh superblocks, 900
     * in all, fewer than the 1,024 an idle scan's period counts for longer superblocks. Then
     * the blocks a superblock of the class holds, counted while the last batch is live. */
    if (!batches(8192, 2048, 4, false, &st)) return 1;
    print_blocks_per_superblock(&st, 8192);
  } else if (strcmp(mode, "growspares") == 0) {
    /* 100 batches of 512 blocks of 8 KiB (4 a superblock at first), each freed in a shuffled
     * order before the next (so that sb_cycle, which counts only superblocks a batch freed in
     * order, does not grow them): 4 MiB, past K but within K and the spares (6 MiB after a
     * heap's first burst), so the empty superblocks past K wait as spares and serve the next
     * batch, some 80 a batch; one a batch (the streak's first) goes to the page heap, fewer in
     * all than the 128 fresh ones that would grow the class. Then the blocks a superblock of
     * the class holds, counted while the last batch is live. */
    if (!batches(8192, 512, 100, true, &st)) return 1;
    print_blocks_per_superblock(&st, 8192);
  } else if (strcmp(mode, "shared") == 0 || strcmp(mode, "unshared") == 0) {
    /* More than max(63, 8 per CPU) threads with a heap: the classes above 256 B come from
     * heaps the threads share, so far fewer superblocks of the 3 KiB class, and of the
     * class of 600 B, than threads; then they free each other's blocks and exit, and a fork
     * and trove_collect follow. */
    long cpus = sysconf(_SC_NPROCESSORS_CONF);
    long crowd = 8 * (cpus > 0 ? cpus : 1);
    int n = strcmp(mode, "shared") == 0 ? (int)(crowd > 63 ? crowd : 63) + 16 : 8;
    share_n = n;
    share_blocks = malloc(sizeof(void *) * 2 * SHARE_HELD * (size_t)n);
    pthread_barrier_init(&share_bar, NULL, (unsigned)n + 1);
    pthread_t *t = start_threads(n, share_worker);
    if (t == NULL) return 1;
    pthread_barrier_wait(&share_bar);
    pthread_barrier_wait(&share_bar);
    trove_stats_get(&st);
    size_t sbs = 0, used = 0, small_sbs = 0, small_used = 0;
    for (size_t c = 0; c < sizeof st.classes / sizeof st.classes[0]; c++) {
      if (st.classes[c].block_size == 3072) {
        sbs = st.classes[c].superblocks;
        used = st.classes[c].blocks_in_use;
      }
      if (st.classes[c].block_size == 640 || st.classes[c].block_size == 768) {
        small_sbs += st.classes[c].superblocks;
        small_used += st.classes[c].blocks_in_use;
      }
    }
    printf("threads=%d\nsuperblocks=%zu\nin_use_blocks=%zu\n", n, sbs, used);
    printf("small_superblocks=%zu\nsmall_in_use_blocks=%zu\n", small_sbs, small_used);
    pid_t pid = fork();                      /* a child while the shared heaps are in use */
    if (pid == 0) {
      void *p = trove_malloc(3000);
      trove_free(p);
      _exit(p ? 0 : 3);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    printf("child_ok=%d\n", WIFEXITED(status) && WEXITSTATUS(status) == 0);
    pthread_barrier_wait(&share_bar);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    trove_collect();
    trove_stats_get(&st);
    used = 0;
    for (size_t c = 0; c < sizeof st.classes / sizeof st.classes[0]; c++)
      if (st.classes[c].block_size == 3072 || st.classes[c].block_size == 640 ||
          st.classes[c].block_size == 768)
        used += st.classes[c].blocks_in_use;
    printf("in_use_after=%zu\n", used);
    free(t);
    free(share_blocks);
  } else if (strcmp(mode, "phases") == 0) {
    /* One thread in phases: 32 MiB of small blocks allocated, then all freed, 8 times (a
     * batch job, a compiler pass, a request that builds a large structure). The cap covers
     * the recent peak, so each phase reuses the pages the last one freed instead of purging
     * and faulting them in (unless TROVE_DIRTY_MAX_MB is set: then every burst goes back).
     * Then the program idles past the purge delay and runs on: the pages go back. */
    enum { N = 32 * 1024 };
    static void *p[N];
    size_t after2 = 0;
    for (int round = 0; round < 8; round++) {
      for (int i = 0; i < N; i++) p[i] = trove_malloc(1000);
      for (int i = 0; i < N; i++) trove_free(p[i]);
      if (round == 1) {
        trove_stats_get(&st);
        after2 = st.purged_bytes;
      }
    }
    trove_stats_get(&st);
    printf("purged_first2_kib=%zu\npurged_later_kib=%zu\n", after2 >> 10,
           (st.purged_bytes - after2) >> 10);
    const char *d = getenv("TROVE_PURGE_DELAY_MS");
    long delay = d ? atol(d) : 250;
    if (delay <= 500) {                  /* the idle part: five delays' sleep, then work */
      sleep_ms(5 * delay);
      ticks();
      trove_stats_get(&st);
      printf("dirty_after_idle_kib=%zu\n", st.dirty_page_bytes >> 10);
    }
  } else if (strcmp(mode, "turns") == 0) {
    pthread_t t[2];
    pthread_barrier_init(&turn_bar, NULL, 2);
    for (long i = 0; i < 2; i++) pthread_create(&t[i], NULL, turn_worker, (void *)i);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    printf("turn_first_kib=%zu\nturn_second_kib=%zu\n", turn_held[0] >> 10, turn_held[1] >> 10);
  } else if (strcmp(mode, "pingpong") == 0) {
    /* A burst of 32 MiB freed, then, past the purge delay, a loop that mallocs and frees one
     * small block: every call stays on the fast paths (the block goes back on the free list
     * the next malloc takes it from), so the timed work must come from the local frees'
     * heartbeat (_trove_heap_beat), or the burst's pages would stay for good. */
    enum { N = 32 * 1024 };
    static void *p[N];
    trove_free(trove_malloc(48));       /* the loop's class has its superblock before the sleep */
    for (int i = 0; i < N; i++) p[i] = trove_malloc(1000);
    for (int i = 0; i < N; i++) trove_free(p[i]);
    /* again: a burst slowed past the purge delay (a loaded machine) lets the timed work
     * release the loop's superblock as idle, and the loop's first malloc would be slow */
    trove_free(trove_malloc(48));
    trove_stats_get(&st);
    printf("dirty_after_burst_kib=%zu\n", st.dirty_page_bytes >> 10);
    const char *d = getenv("TROVE_PURGE_DELAY_MS");
    sleep_ms(5 * (d ? atol(d) : 250));
    trove_stats_get(&st);
    size_t slow0 = st.slow_mallocs;
    for (long i = 0; i < 2000000; i++) {
      void *q = trove_malloc(48);
      *(volatile char *)q = 1;
      trove_free(q);
    }
    trove_stats_get(&st);
    printf("slow_mallocs_in_loop=%zu\ndirty_after_loop_kib=%zu\n", st.slow_mallocs - slow0,
           st.dirty_page_bytes >> 10);
  } else if (strcmp(mode, "largecache") == 0) {
    /* Buffers just over 1 MiB (large objects), 32 live, freed and allocated again in rounds:
     * the cache must serve them all, past its resident budget too, without new mappings. */
    enum { N = 32 };
    void *b[N];
    for (int round = 0; round < 20; round++) {
      for (int i = 0; i < N; i++) {
        b[i] = trove_malloc((1u << 20) + (size_t)i * 4096);
        if (b[i] == NULL) return 1;
        memset(b[i], 1, 4096);
      }
      if (round == 0) trove_stats_get(&st);
      for (int i = 0; i < N; i++) trove_free(b[i]);
    }
    size_t first = st.purges;
    trove_stats_get(&st);
    printf("purges_after_first=%zu\n", st.purges - first);
    void *z = trove_calloc(1, (1u << 20) + 31 * 4096);   /* a purged one, reused: zero */
    size_t bad = 0;
    for (size_t i = 0; z && i < (1u << 20) + 31 * 4096; i++) bad += ((unsigned char *)z)[i] != 0;
    printf("calloc_nonzero=%zu\n", z ? bad : (size_t)-1);
    trove_free(z);
  } else if (strcmp(mode, "largeburst") == 0) {
    /* 8 buffers of 4 MiB freed together, past an 8 MiB resident budget: kept resident (no
     * purge) until a request needs fresh memory; then the excess goes, the longest first,
     * and a calloc served by a purged mapping reads zero. */
    enum { N = 8, MB = 1 << 20 };
    void *b[N];
    for (int i = 0; i < N; i++) {
      b[i] = trove_malloc(4 * MB);
      if (b[i] == NULL) return 1;
      memset(b[i], 1, 4 * MB);
    }
    trove_stats_get(&st);
    size_t p0 = st.purges;
    for (int i = 0; i < N; i++) trove_free(b[i]);
    trove_stats_get(&st);
    printf("purges_after_frees=%zu\n", st.purges - p0);
    /* fresh memory: a large request no cached mapping serves, or (with "pages") 16 MiB of
     * medium buffers, for which the page heap maps new segments */
    bool pages = argc > 2 && strcmp(argv[2], "pages") == 0;
    enum { M = 64 };
    static void *m[M];
    void *big = pages ? NULL : trove_malloc(40 * MB);
    for (int i = 0; pages && i < M; i++) m[i] = trove_malloc(256 * 1024);
    trove_stats_get(&st);
    printf("purges_after_fresh=%zu\n", st.purges - p0);
    void *r[2];
    for (int i = 0; i < 2; i++) r[i] = trove_malloc(4 * MB);   /* the one kept resident first */
    unsigned char *z = trove_calloc(1, 4 * MB);                 /* a purged one */
    size_t bad = 0;
    for (size_t i = 0; z && i < 4 * MB; i++) bad += z[i] != 0;
    printf("calloc_nonzero=%zu\n", z ? bad : (size_t)-1);
    trove_stats_get(&st);
    printf("purges_at_end=%zu\n", st.purges - p0);
    trove_free(z);
    for (int i = 0; i < 2; i++) trove_free(r[i]);
    trove_free(big);
    for (int i = 0; pages && i < M; i++) trove_free(m[i]);
  } else if (strcmp(mode, "refill") == 0) {
    /* 8 MiB of 64 B blocks (or of the size given), all freed, then allocated again: the
     * empty superblocks past K wait in the pool with their free lists, and the refill takes
     * them back from there. */
    enum { N = 128 * 1024 };
    static void *p[N];
    size_t size = argc > 2 ? (size_t)atol(argv[2]) : 64;
    int n = (int)((8u << 20) / size);
    if (n > N) n = N;
    for (int round = 0; round < 2; round++) {
      for (int i = 0; i < n; i++) p[i] = trove_malloc(size);
      if (round == 0) {
        for (int i = 0; i < n; i++) trove_free(p[i]);
        trove_stats_get(&st);
      }
    }
    size_t adopted0 = st.superblocks_adopted;
    trove_stats_get(&st);
    printf("adopted_in_refill=%zu\n", st.superblocks_adopted - adopted0);
    for (int i = 0; i < n; i++) trove_free(p[i]);
  } else if (strcmp(mode, "spares") == 0) {
    /* argv[2] (300: 3.5 MiB) blocks of 12 KiB built and freed in one streak, twice (the
     * second time past 1/8 of the default purge delay, when the fresh pages of the first are
     * old news), or once (argv[3] "once"): the empty superblocks past K wait with the heap
     * as spares, up to the heap's cap (4.5 MiB, 12 MiB once it took spares back), unless
     * the operator's bounds say otherwise (K = 0, TROVE_DIRTY_MAX_MB set). */
    static void *p[4096];
    size_t n = argc > 2 ? (size_t)atol(argv[2]) : 300;
    int rounds = argc > 3 && strcmp(argv[3], "once") == 0 ? 1 : 2;
    if (n > 4096) n = 4096;
    for (int round = 0; round < rounds; round++) {
      if (round == 1) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
      }
      for (size_t i = 0; i < n; i++)
        if ((p[i] = trove_malloc(12000)) == NULL) return 1;
      for (size_t i = 0; i < n; i++) trove_free(p[i]);
    }
    trove_stats_get(&st);
    printf("spare_kib=%zu\n", st.spare_bytes >> 10);
  } else if (strcmp(mode, "largetail") == 0) {
    /* 8 buffers of 16 MiB freed, then 8 of 1.5 MiB that reuse their mappings: a reused
     * mapping keeps its tail only while the tails of live buffers fit the resident budget. */
    enum { N = 8 };
    void *b[N];
    for (int i = 0; i < N; i++) {
      b[i] = trove_malloc((size_t)16 << 20);
      if (b[i] == NULL) return 1;
      memset(b[i], 1, (size_t)16 << 20);
    }
    for (int i = 0; i < N; i++) trove_free(b[i]);
    size_t small = (size_t)3 << 19, bad = 0;
    for (int i = 0; i < N; i++) {
      b[i] = trove_malloc(small);
      if (b[i] == NULL) return 1;
      memset(b[i], 2, small);
    }
    trove_stats_get(&st);
    for (int i = 0; i < N; i++)
      for (size_t k = 0; k < small; k += 4096) bad += ((unsigned char *)b[i])[k] != 2;
    printf("large_live_kib=%zu\nlarge_requested_kib=%zu\nlarge_bad=%zu\n",
           st.large_bytes >> 10, (N * small) >> 10, bad);
    for (int i = 0; i < N; i++) trove_free(b[i]);
  } else if (strcmp(mode, "thp") == 0) {
    /* argv[2] MiB of 1000-byte blocks; then all but one in 64 freed and the pages purged */
    size_t n = ((size_t)(argc > 2 ? atol(argv[2]) : 64) << 20) / 1000;
    void **b = malloc(n * sizeof *b);
    for (size_t i = 0; i < n; i++) b[i] = trove_malloc(1000);
    printf("thp_first_hg=%d\nthp_last_hg=%d\n", vm_flag(b[0], "hg"), vm_flag(b[n - 1], "hg"));
    for (size_t i = 0; i < n; i++)
      if (i % 64) trove_free(b[i]);
    trove_collect();
    trove_stats_get(&st);
    printf("thp_purges=%zu\nthp_last_hg_after=%d\nthp_last_nh_after=%d\n", st.purges,
           vm_flag(b[n - 1], "hg"), vm_flag(b[n - 1], "nh"));
    for (size_t i = 0; i < n; i += 64) trove_free(b[i]);
    free(b);
  } else if (strcmp(mode, "thppause") == 0) {
    /* 128 MiB of 1000-byte blocks, never freed: 32 segments, of which the 24 past the first
     * 32 MiB would ask for huge pages; the statistics say how many did, and how many faults
     * were slow (TROVE_THP_SLOW_US) */
    size_t n = ((size_t)128 << 20) / 1000;
    void **b = malloc(n * sizeof *b);
    for (size_t i = 0; i < n; i++)
      if ((b[i] = trove_malloc(1000)) == NULL) return 1;
    trove_stats_get(&st);
    printf("pause_segments=%zu\npause_huge=%zu\npause_pauses=%zu\n", st.segments,
           st.segments_huge, st.huge_pauses);
    for (size_t i = 0; i < n; i++) trove_free(b[i]);
    free(b);
  } else if (strcmp(mode, "thpsparse") == 0) {
    /* Past 32 MiB of small blocks: 64 MiB of 8 KiB blocks never written but for their heads
     * (as the carve leaves them), then 64 MiB written whole. Segments for blocks above 4 KiB
     * ask for huge pages only when the arena's probe segment was mostly resident (segment.c).
     * The counts come from the statistics (segments_huge), what each segment asked for. */
    enum { DENSE = 40 << 10, SPARSE = 8 << 10 };
    static void *d[DENSE], *u[SPARSE], *w[SPARSE];
    for (int i = 0; i < DENSE; i++)
      if ((d[i] = trove_malloc(1000)) == NULL) return 1;
    trove_stats_get(&st);
    size_t h0 = st.segments_huge, s0 = st.segments;
    for (int i = 0; i < SPARSE; i++)
      if ((u[i] = trove_malloc(8192)) == NULL) return 1;
    trove_stats_get(&st);
    size_t h1 = st.segments_huge, s1 = st.segments;
    for (int i = 0; i < SPARSE; i++) {
      if ((w[i] = trove_malloc(8192)) == NULL) return 1;
      memset(w[i], 1, 8192);
    }
    trove_stats_get(&st);
    printf("dense_huge=%zu\ndense_segments=%zu\nunwritten_huge=%zu\nunwritten_segments=%zu\n"
           "written_huge=%zu\nwritten_segments=%zu\nunwritten_hg=%d\nunwritten_first_hg=%d\n",
           h0, s0, h1 - h0, s1 - s0, st.segments_huge - h1, st.segments - s1,
           vm_flag(u[SPARSE - 1], "hg"), vm_flag(u[0], "hg"));
    for (int i = 0; i < DENSE; i++) trove_free(d[i]);
    for (int i = 0; i < SPARSE; i++) trove_free(u[i]), trove_free(w[i]);
  } else if (strcmp(mode, "background") == 0) {
    /* A burst freed, then a second without a call, in this process and in a child of fork()
     * (whose background thread, if any, is its own). */
    for (int i = 0; i < 64; i++) trove_free(trove_malloc(70000));   /* slow paths: timed work */
    free_then_wait("");
    pid_t pid = fork();
    if (pid == 0) {
      for (int i = 0; i < 64; i++) trove_free(trove_malloc(70000));
      sleep_ms(10);
      for (int i = 0; i < 64; i++) trove_free(trove_malloc(70000));
      free_then_wait("child_");
      _exit(0);
    }
    int status = 0;
    if (pid > 0) waitpid(pid, &status, 0);
  } else if (strcmp(mode, "teardown") == 0) {
    teardown_then_wait(argc > 2 ? (size_t)atol(argv[2]) : 96, 8000);
  } else if (strcmp(mode, "teardown-fork") == 0) {
    /* The same burst, then at once (the thread running, the burst still waiting for the
     * purge delay) fork(): the parent forks with its own threads only, and a large free
     * after it (a call that may leave memory waiting) starts the thread again. */
    teardown(96);
    printf("threads_before_fork=%d\n", threads_now());
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) _exit(threads_now() == 1 ? 0 : 3);
    printf("threads_after_fork=%d\n", threads_now());
    int status = -1;
    if (pid > 0) waitpid(pid, &status, 0);
    printf("child_status=%d\n", status);
    trove_free(trove_malloc(8u << 20));
    sleep_ms(50);
    printf("threads_after_call=%d\n", threads_now());
  } else if (strcmp(mode, "misuse") == 0) {
    void *p = trove_malloc(64);
    trove_free(p);
    trove_free(p);
    printf("survived\n");
  }
  trove_stats_print(stdout);
  return 0;
}
