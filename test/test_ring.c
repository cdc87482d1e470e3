/* Hoard's producer-consumer blowup scenario: peak memory must not grow with the run's length.
 *
 *   test_ring [threads=4] [rounds=400] [batch=1000] [seed=3]
 *
 * P threads form a ring. In each round, thread i allocates a batch of blocks, hands it to
 * thread i+1, takes the batch of thread i-1, checks it and frees it: every block is freed by
 * a thread other than the one that allocated it. The run is done for R rounds and for 4R
 * rounds, each in a fresh child process (this program exec'd with "child ..."), and the peak
 * RSS (VmHWM) of the 4R run must stay within 1.5x + 4 MiB of the R run's: with a bounded
 * blowup (docs/DESIGN.md), memory depends on what is live, not on how long the program runs. */
#include "testhelper.h"

#include <pthread.h>

#define MAX_THREADS 64

static size_t n_threads = 4, n_rounds = 400, n_batch = 1000;
static uint64_t g_seed = 3;

typedef struct batch_s {
  size_t n;
  uint64_t seed;
  void **p;
  size_t *size;
} batch_t;

typedef struct mailbox_s {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  batch_t *b;
} mailbox_t;

static mailbox_t box[MAX_THREADS];

static void send_batch(mailbox_t *m, batch_t *b) {
  pthread_mutex_lock(&m->lock);
  while (m->b) pthread_cond_wait(&m->cond, &m->lock);
  m->b = b;
  pthread_cond_broadcast(&m->cond);
  pthread_mutex_unlock(&m->lock);
}

static batch_t *receive_batch(mailbox_t *m) {
  pthread_mutex_lock(&m->lock);
  while (!m->b) pthread_cond_wait(&m->cond, &m->lock);
  batch_t *b = m->b;
  m->b = NULL;
  pthread_cond_broadcast(&m->cond);
  pthread_mutex_unlock(&m->lock);
  return b;
}

static size_t pick_size(th_rng_t *r) {
  size_t k = th_below(r, 1000);
  if (k < 950) return 16 + th_below(r, 497);
  if (k < 990) return 513 + th_below(r, 3584);
  return 8192 + th_below(r, 57 * 1024);
}

static batch_t *make_batch(th_rng_t *r, uint64_t seed) {
  batch_t *b = (batch_t *)T_MALLOC(sizeof *b);
  CHECK(b != NULL);
  b->n = n_batch;
  b->seed = seed;
  b->p = (void **)T_MALLOC(n_batch * sizeof(void *));
  b->size = (size_t *)T_MALLOC(n_batch * sizeof(size_t));
  CHECK(b->p != NULL && b->size != NULL);
  for (size_t i = 0; i < n_batch; i++) {
    size_t s = pick_size(r);
    b->p[i] = T_MALLOC(s);
    CHECKF(b->p[i] != NULL, "malloc(%zu) returned NULL", s);
    b->size[i] = s;
    th_fill(b->p[i], s, th_mix64(seed + i), 1);
  }
  return b;
}

static void free_batch(batch_t *b) {
  for (size_t i = 0; i < b->n; i++) {
    size_t bad = th_verify(b->p[i], b->size[i], th_mix64(b->seed + i), 1);
    CHECKF(bad == TH_OK, "block %p (%zu bytes) from another thread corrupt at offset %zu",
           b->p[i], b->size[i], bad);
    T_FREE(b->p[i]);
  }
  T_FREE(b->p);
  T_FREE(b->size);
  T_FREE(b);
}

static void *ring_thread(void *arg) {
  size_t id = (size_t)(uintptr_t)arg;
  th_rng_t r;
  th_rng_seed(&r, g_seed * 7919 + id);
  for (size_t round = 0; round < n_rounds; round++) {
    send_batch(&box[(id + 1) % n_threads], make_batch(&r, th_mix64(id * 1000003 + round)));
    free_batch(receive_batch(&box[id]));
  }
  return NULL;
}

static int run_child(void) {
  for (size_t i = 0; i < n_threads; i++) {
    pthread_mutex_init(&box[i].lock, NULL);
    pthread_cond_init(&box[i].cond, NULL);
    box[i].b = NULL;
  }
  pthread_t th[MAX_THREADS];
  for (size_t i = 0; i < n_threads; i++)
    CHECK(pthread_create(&th[i], NULL, ring_thread, (void *)(uintptr_t)i) == 0);
  for (size_t i = 0; i < n_threads; i++) CHECK(pthread_join(th[i], NULL) == 0);
  trove_stats_t st;
  th_stats(&st);
  size_t hwm = th_status_kb_field("VmHWM");
  if (hwm == 0) { /* no /proc: the peak of the whole process */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    hwm = (size_t)ru.ru_maxrss * 1024;
  }
  printf("peak_rss_kb=%zu held_kb=%zu in_use_kb=%zu\n", hwm / 1024, st.held / 1024,
         st.in_use / 1024);
  return 0;
}

static size_t run_one(size_t rounds, size_t *held_kb) {
  char a_threads[32], a_rounds[32], a_batch[32], a_seed[32];
  snprintf(a_threads, sizeof a_threads, "%zu", n_threads);
  snprintf(a_rounds, sizeof a_rounds, "%zu", rounds);
  snprintf(a_batch, sizeof a_batch, "%zu", n_batch);
  snprintf(a_seed, sizeof a_seed, "%llu", (unsigned long long)g_seed);
  char *argv[] = {"test_ring", "child", a_threads, a_rounds, a_batch, a_seed, NULL};
  static char out[65536];
  int timed_out = 0;
  int status = th_run_child(NULL, NULL, argv, NULL, 240, out, sizeof out, &timed_out);
  char buf[64];
  CHECKF(!timed_out, "the ring of %zu rounds did not finish in 240 s (deadlock?): %s", rounds,
         out);
  CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the ring of %zu rounds failed (%s):\n%s",
         rounds, th_status_str(status, buf, sizeof buf), out);
  const char *s = strstr(out, "peak_rss_kb=");
  CHECKF(s != NULL, "no result from the child:\n%s", out);
  size_t peak = strtoull(s + 12, NULL, 10);
  const char *h = strstr(out, "held_kb=");
  *held_kb = h ? strtoull(h + 8, NULL, 10) : 0;
  printf("%zu threads, %zu rounds of %zu blocks: peak RSS %zu KiB, held at the end %zu KiB\n",
         n_threads, rounds, n_batch, peak, *held_kb);
  return peak;
}

int main(int argc, char **argv) {
  int child = argc > 1 && strcmp(argv[1], "child") == 0;
  int a = child ? 2 : 1;
  if (argc > a) n_threads = strtoul(argv[a], NULL, 10);
  if (argc > a + 1) n_rounds = strtoul(argv[a + 1], NULL, 10);
  if (argc > a + 2) n_batch = strtoul(argv[a + 2], NULL, 10);
  if (argc > a + 3) g_seed = strtoull(argv[a + 3], NULL, 10);
  CHECK(n_threads >= 2 && n_threads <= MAX_THREADS && n_rounds >= 1 && n_batch >= 1);
  setvbuf(stdout, NULL, _IONBF, 0);
  th_check_trove_in_use();
  if (child) return run_child();
  double t0 = th_now();
  size_t held1, held4;
  size_t p1 = run_one(n_rounds, &held1);
  size_t p4 = run_one(4 * n_rounds, &held4);
  size_t limit = p1 + p1 / 2 + 4 * 1024;
  /* The default policy's bound. Under other options (shared heaps: each of up to 4 per CPU
   * keeps its own K, and which ones a thread's blocks land in varies from run to run, so a
   * run's peak moved by 0.6-1.5x between two runs of the same length) only the contents of
   * the blocks are checked. */
  CHECKF(p4 <= limit || !th_policy_default(NULL),
         "peak RSS grows with the run's length: %zu KiB for %zu rounds, %zu KiB for %zu rounds "
         "(limit %zu KiB)", p1, n_rounds, p4, 4 * n_rounds, limit);
  printf("test_ring (%s): peak ratio %.2f (limit 1.5 + 4 MiB): ok in %.2f s\n", T_MODE,
         (double)p4 / (double)p1, th_now() - t0);
  return 0;
}
