/* Multithreaded stress in the style of mimalloc's test-stress.
 *
 *   test_stress [threads=8] [iterations=200000] [rounds=10] [seed=42]
 *
 * Each round starts `threads` threads and joins them. A thread keeps a table of blocks of
 * random sizes (mostly small, some medium up to 256 KiB, rare large up to 4 MiB), each
 * filled with a pattern derived from its address and size, checked before every free and
 * realloc. Threads trade blocks through a shared transfer array (atomic exchange), so most
 * frees of traded blocks are cross-thread; at its end a thread leaves a quarter of its blocks
 * to the next round's threads, so blocks outlive the thread that allocated them.
 * Any corruption, NULL result or crash fails the test. */
#include "testhelper.h"

#include <pthread.h>

/* A block starts with its size and its seed; the rest is the pattern of the seed. */
typedef struct blk_s {
  size_t size;
  uint64_t seed;
} blk_t;

#define MIN_SIZE sizeof(blk_t)
#define SLOTS 400
#define TRANSFERS 1000
#define MAX_THREADS 64

static size_t n_threads = 8, n_iter = 200000, n_rounds = 10;
static uint64_t g_seed = 42;

static _Atomic(blk_t *) transfer[TRANSFERS];
static blk_t *kept[2][MAX_THREADS * SLOTS]; /* blocks left for the next round */
static size_t n_kept[2];
static int cur_round;
static atomic_size_t total_allocs, total_frees, total_transfers;

static uint64_t block_seed(const void *p, size_t size) {
  return th_mix64((uint64_t)(uintptr_t)p ^ ((uint64_t)size << 40));
}

static size_t pick_size(th_rng_t *r) {
  size_t k = th_below(r, 1000);
  size_t s;
  if (k < 900) /* small: mostly tiny */
    s = 1 + th_below(r, th_below(r, 4) == 0 ? 1024 : 128);
  else if (k < 997) /* medium */
    s = 1024 + th_below(r, 256 * TH_KIB);
  else /* large */
    s = 256 * TH_KIB + th_below(r, 4 * TH_MIB - 256 * TH_KIB);
  return s < MIN_SIZE ? MIN_SIZE : s;
}

static void check_blk(const blk_t *b, const char *when) {
  size_t size = b->size;
  CHECKF(size >= MIN_SIZE && size <= 4 * TH_MIB, "%s: block %p has a corrupt header (size %zu)",
         when, (const void *)b, size);
  CHECKF(b->seed == block_seed(b, size), "%s: block %p (%zu bytes) has a corrupt seed", when,
         (const void *)b, size);
  size_t bad = th_verify(b + 1, size - MIN_SIZE, b->seed, 1);
  CHECKF(bad == TH_OK, "%s: block %p (%zu bytes) corrupt at offset %zu", when, (const void *)b,
         size, bad + MIN_SIZE);
}

static void fill_blk(blk_t *b, size_t size) {
  b->size = size;
  b->seed = block_seed(b, size);
  th_fill(b + 1, size - MIN_SIZE, b->seed, 1);
}

static blk_t *alloc_blk(th_rng_t *r) {
  size_t size = pick_size(r);
  blk_t *b;
  size_t how = th_below(r, 100);
  if (how < 85) {
    b = (blk_t *)T_MALLOC(size);
  } else if (how < 95) {
    b = (blk_t *)T_CALLOC(1, size);
    CHECKF(b != NULL, "calloc(1, %zu) returned NULL", size);
    const unsigned char *c = (const unsigned char *)b;
    size_t lim = size < 4096 ? size : 4096; /* zero check of the first page (and the last byte) */
    for (size_t i = 0; i < lim; i++) CHECKF(c[i] == 0, "calloc(%zu): byte %zu not zero", size, i);
    CHECK(c[size - 1] == 0);
  } else {
    void *p = NULL;
    size_t align = (size_t)16 << th_below(r, 9); /* 16 .. 4096 */
    CHECKF(T_POSIX_MEMALIGN(&p, align, size) == 0, "posix_memalign(%zu, %zu) failed", align,
           size);
    CHECKF((uintptr_t)p % align == 0, "posix_memalign(%zu) = %p misaligned", align, p);
    b = (blk_t *)p;
  }
  CHECKF(b != NULL, "allocation of %zu bytes returned NULL", size);
  CHECKF(T_USABLE_SIZE(b) >= size, "usable size of %p < %zu", (void *)b, size);
  fill_blk(b, size);
  atomic_fetch_add_explicit(&total_allocs, 1, memory_order_relaxed);
  return b;
}

static void free_blk(blk_t *b) {
  if (!b) return;
  check_blk(b, "before free");
  T_FREE(b);
  atomic_fetch_add_explicit(&total_frees, 1, memory_order_relaxed);
}

static blk_t *realloc_blk(th_rng_t *r, blk_t *b) {
  check_blk(b, "before realloc");
  size_t old = b->size;
  size_t size = th_below(r, 4) == 0 ? old + th_below(r, old + 1) : pick_size(r);
  if (size > 4 * TH_MIB) size = 4 * TH_MIB;
  uint64_t seed = b->seed;
  uintptr_t was = (uintptr_t)b;
  blk_t *n = (blk_t *)T_REALLOC(b, size);
  CHECKF(n != NULL, "realloc(%#lx, %zu) returned NULL", (unsigned long)was, size);
  size_t keep = (old < size ? old : size) - MIN_SIZE;
  /* the kept prefix: all of it when small, its first 4 KiB otherwise (a large block's pattern
   * is only sampled) */
  size_t bad = th_verify_range((const unsigned char *)(n + 1), 0, keep < 4096 ? keep : 4096, seed);
  CHECKF(bad == TH_OK, "realloc %zu -> %zu (%#lx -> %p) lost contents at offset %zu", old, size,
         (unsigned long)was, (void *)n, bad);
  fill_blk(n, size);
  return n;
}

typedef struct targ_s {
  size_t id;
} targ_t;

static void *worker(void *arg) {
  size_t id = ((targ_t *)arg)->id;
  th_rng_t r;
  th_rng_seed(&r, g_seed * 1000003u + (uint64_t)cur_round * 1009u + id);
  blk_t *slot[SLOTS] = {0};
  int prev = (cur_round + 1) & 1; /* the blocks the previous round left */
  /* free this thread's share of the blocks that outlived their thread */
  for (size_t i = id; i < n_kept[prev]; i += n_threads) {
    free_blk(kept[prev][i]);
    kept[prev][i] = NULL;
  }
  for (size_t it = 0; it < n_iter; it++) {
    size_t k = th_below(&r, 100);
    size_t i = th_below(&r, SLOTS);
    if (k < 50) { /* allocate (replacing what is there) */
      free_blk(slot[i]);
      slot[i] = alloc_blk(&r);
    } else if (k < 75) { /* free */
      free_blk(slot[i]);
      slot[i] = NULL;
    } else if (k < 85) { /* realloc */
      if (slot[i]) slot[i] = realloc_blk(&r, slot[i]);
    } else { /* trade with whatever thread put a block in the transfer slot */
      size_t t = th_below(&r, TRANSFERS);
      if (slot[i]) check_blk(slot[i], "before transfer");
      slot[i] = atomic_exchange_explicit(&transfer[t], slot[i], memory_order_acq_rel);
      if (slot[i]) check_blk(slot[i], "after transfer");
      atomic_fetch_add_explicit(&total_transfers, 1, memory_order_relaxed);
    }
  }
  /* a quarter outlives the thread; the rest is freed here */
  int cur = cur_round & 1;
  for (size_t i = 0; i < SLOTS; i++) {
    if (!slot[i]) continue;
    if (i % 4 == id % 4)
      kept[cur][id * SLOTS + i] = slot[i];
    else
      free_blk(slot[i]);
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc > 1) n_threads = strtoul(argv[1], NULL, 10);
  if (argc > 2) n_iter = strtoul(argv[2], NULL, 10);
  if (argc > 3) n_rounds = strtoul(argv[3], NULL, 10);
  if (argc > 4) g_seed = strtoull(argv[4], NULL, 10);
  CHECK(n_threads >= 1 && n_threads <= MAX_THREADS && n_rounds >= 1);
  th_check_trove_in_use();
  double t0 = th_now();
  pthread_t th[MAX_THREADS];
  targ_t args[MAX_THREADS];
  for (size_t round = 0; round < n_rounds; round++) {
    cur_round = (int)round;
    int cur = cur_round & 1;
    memset(kept[cur], 0, sizeof kept[cur]);
    n_kept[cur] = n_threads * SLOTS;
    for (size_t t = 0; t < n_threads; t++) {
      args[t].id = t;
      CHECK(pthread_create(&th[t], NULL, worker, &args[t]) == 0);
    }
    for (size_t t = 0; t < n_threads; t++) CHECK(pthread_join(th[t], NULL) == 0);
  }
  /* the main thread frees everything left: kept blocks and the transfer array */
  int last = cur_round & 1;
  for (size_t i = 0; i < n_kept[last]; i++) free_blk(kept[last][i]);
  for (size_t t = 0; t < TRANSFERS; t++) free_blk(atomic_exchange(&transfer[t], NULL));
  trove_stats_t st;
  th_stats(&st);
  printf("test_stress (%s): %zu threads x %zu iterations x %zu rounds, seed %llu: %zu allocs, "
         "%zu frees, %zu transfers in %.2f s; trove in use %zu KiB, held %zu KiB\n",
         T_MODE, n_threads, n_iter, n_rounds, (unsigned long long)g_seed,
         atomic_load(&total_allocs), atomic_load(&total_frees), atomic_load(&total_transfers),
         th_now() - t0, st.in_use / 1024, st.held / 1024);
  CHECKF(atomic_load(&total_allocs) == atomic_load(&total_frees),
         "%zu blocks allocated but %zu freed", atomic_load(&total_allocs),
         atomic_load(&total_frees));
  return 0;
}
