/* fork() while other threads allocate: the child must be able to use the allocator.
 *
 *   test_fork [forks=20] [seed=5]
 *
 * Four threads allocate, free and trade blocks in a loop. The main thread forks while they
 * run; the child (alarm(30): a deadlock kills it) mallocs, frees and reallocs many blocks,
 * frees blocks that the parent's threads (which do not exist in the child) allocated, starts
 * a thread that allocates, and _exit(0)s. The parent checks the child's exit status, and
 * kills a child that has not finished after 60 s and fails. Repeated `forks` times. */
#include "testhelper.h"

#include <pthread.h>

#define WORKERS 4
#define SHARED 256

static atomic_int stop;
static _Atomic(void *) shared[SHARED]; /* blocks with their size in the first word */
static uint64_t g_seed = 5;

static void *make_block(th_rng_t *r) {
  size_t size = 16 + th_below(r, th_below(r, 8) == 0 ? 100000 : 600);
  size_t *p = (size_t *)T_MALLOC(size);
  CHECK(p != NULL);
  p[0] = size;
  th_fill(p + 1, size - sizeof(size_t), size, 1);
  return p;
}

static void drop_block(void *b) {
  if (!b) return;
  size_t *p = (size_t *)b;
  size_t size = p[0];
  CHECKF(size >= 16 && size < 100016, "block %p has a corrupt size %zu", b, size);
  CHECKF(th_verify(p + 1, size - sizeof(size_t), size, 1) == TH_OK, "block %p corrupt", b);
  T_FREE(b);
}

static void *worker(void *arg) {
  th_rng_t r;
  th_rng_seed(&r, g_seed * 100 + (uint64_t)(uintptr_t)arg);
  void *local[64] = {0};
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    for (int k = 0; k < 256; k++) {
      size_t i = th_below(&r, 64);
      size_t what = th_below(&r, 10);
      if (what < 6) {
        drop_block(local[i]);
        local[i] = make_block(&r);
      } else if (what < 8) {
        drop_block(local[i]);
        local[i] = NULL;
      } else {
        local[i] = atomic_exchange(&shared[th_below(&r, SHARED)], local[i]);
      }
    }
  }
  for (int i = 0; i < 64; i++) drop_block(local[i]);
  return NULL;
}

static void *child_thread(void *arg) {
  th_rng_t r;
  th_rng_seed(&r, (uint64_t)(uintptr_t)arg);
  void *b[500];
  for (int i = 0; i < 500; i++) b[i] = make_block(&r);
  for (int i = 0; i < 500; i++) drop_block(b[i]);
  return NULL;
}

/* In the child: everything must work, also for blocks of threads that are gone. */
static void child_work(int n) {
  alarm(30);
  th_rng_t r;
  th_rng_seed(&r, g_seed * 77 + (uint64_t)n);
#ifndef TROVE_TEST_PRELOAD   /* (dlsym in a child of a threaded parent: not here) */
  /* only this thread's heap counts as a live thread's: the workers' are not, though the child
   * leaves their pages alone (no write marks them, see heap.c) */
  trove_stats_t st;
  th_stats(&st);
  CHECKF(st.threads == 1, "fork %d: the child counts %zu live threads, expected 1", n,
         st.threads);
#endif
  /* blocks the parent's threads allocated (their heaps do not exist here) */
  for (size_t i = 0; i < SHARED; i++) drop_block(atomic_exchange(&shared[i], NULL));
  static void *b[2000];
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < 2000; i++) b[i] = make_block(&r);
    for (int i = 0; i < 2000; i += 2) { /* realloc half, keeping the header */
      size_t *p = (size_t *)b[i];
      size_t old = p[0];
      CHECK(th_verify(p + 1, old - sizeof(size_t), old, 1) == TH_OK);
      size_t size = 16 + th_below(&r, 3000);
      p = (size_t *)T_REALLOC(p, size);
      CHECK(p != NULL);
      p[0] = size;
      th_fill(p + 1, size - sizeof(size_t), size, 1);
      b[i] = p;
    }
    for (int i = 0; i < 2000; i++) drop_block(b[i]);
  }
  void *big = T_CALLOC(1, 8 * TH_MIB);
  CHECK(big != NULL && ((char *)big)[8 * TH_MIB - 1] == 0);
  T_FREE(big);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, child_thread, (void *)(uintptr_t)n) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  _exit(0);
}

int main(int argc, char **argv) {
  int forks = argc > 1 ? atoi(argv[1]) : 20;
  if (argc > 2) g_seed = strtoull(argv[2], NULL, 10);
  setvbuf(stdout, NULL, _IONBF, 0);
  th_check_trove_in_use();
  double t0 = th_now();
  pthread_t th[WORKERS];
  for (int i = 0; i < WORKERS; i++)
    CHECK(pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i) == 0);
  th_rng_t r;
  th_rng_seed(&r, g_seed);
  void *mine[100];
  for (int n = 0; n < forks; n++) {
    /* the main thread allocates too, so that its heap is busy at the fork */
    for (int i = 0; i < 100; i++) mine[i] = make_block(&r);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) child_work(n);
    for (int i = 0; i < 100; i++) drop_block(mine[i]);
    int status = 0;
    double deadline = th_now() + 60;
    pid_t w;
    while ((w = waitpid(pid, &status, WNOHANG)) == 0 && th_now() < deadline) th_sleep_ms(5);
    if (w == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      CHECKF(0, "fork %d: the child did not finish in 60 s (deadlock in the allocator?)", n);
    }
    CHECK(w == pid);
    char buf[64];
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fork %d: the child ended with %s%s",
           n, th_status_str(status, buf, sizeof buf),
           WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM ? " (deadlock: alarm fired)" : "");
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < WORKERS; i++) CHECK(pthread_join(th[i], NULL) == 0);
  for (size_t i = 0; i < SHARED; i++) drop_block(atomic_exchange(&shared[i], NULL));
  printf("test_fork (%s): %d forks with %d threads allocating: ok in %.2f s\n", T_MODE, forks,
         WORKERS, th_now() - t0);
  return 0;
}
