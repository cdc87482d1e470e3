/* Process start-up, thread exit and fork.
 *
 * Start-up allocates nothing and calls nothing that may allocate: the first malloc can come
 * from the dynamic loader or libc before main. Options come from /proc/self/environ (os.c).
 * A thread's heap is set up on its first malloc (the slow path: a new thread's heap pointer is
 * the constant empty heap, whose lists are all empty); a pthread key's destructor hands the
 * heap back when the thread exits. pthread_atfork handlers hold every lock across fork(), so
 * the child finds the allocator consistent. */
#include "internal.h"
#include <stdlib.h>

bool _trove_initialized;
uintptr_t _trove_key;
pthread_key_t _trove_thread_key;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static _Atomic bool fork_registered;

static void init_body(void) {
  _trove_options_init();                   /* first: TROVE_COLOUR picks the size classes */
  _trove_size_classes_init();
  _trove_pages_init();
  _trove_pool_init();
  _trove_key = (uintptr_t)_trove_os_random();
  /* Not the lowest free key (0 in most programs): a program that uses a pthread_key_t it
   * never created, zero as a static, reads NULL and gets EINVAL on a write under glibc alone,
   * and so it must here too, not trove's heap (which it would then take for its own data or
   * overwrite). The spare goes back, so the program's first key is the one it had before. */
  pthread_key_t spare;
  bool spared = pthread_key_create(&spare, NULL) == 0;
  pthread_key_create(&_trove_thread_key, _trove_heap_thread_done);
  if (spared) pthread_key_delete(spare);
  __atomic_store_n(&_trove_initialized, true, __ATOMIC_RELEASE);
  if (TROVE_OPT(VERBOSE) > 0)
    _trove_message("trove: initialized (purge delay %ld ms, K=%ld, f=%ld%%)\n",
                   TROVE_OPT(PURGE_DELAY_MS), TROVE_OPT(BLOWUP_K), TROVE_OPT(BLOWUP_F_PCT));
}

void _trove_init(void) {
  if (likely(__atomic_load_n(&_trove_initialized, __ATOMIC_ACQUIRE))) return;
  pthread_once(&init_once, init_body);
}

/* ------------------------------------------------------------------ locks */
/* A slow-path lock (pool, page heap) found taken. Its holders keep it for well under a
 * microsecond (a list update, a run split), so the waiter spins first, retrying now and
 * then, and blocks only if it stays taken, when its holder was probably preempted: blocking
 * at once put the waiter to sleep, and waking it took longer than the wait. bench/phases at 2
 * threads on 2 cores (2% of page heap calls found the lock taken): 2,730 context switches a
 * run (mimalloc 23). */
static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#else
  atomic_signal_fence(memory_order_seq_cst);
#endif
}

/* The lock is held: sleep until it is ours. Whoever takes it here marks it 2, so that its
 * unlock wakes the next sleeper, if any (one may have left since: a wake for nobody). */
void _trove_mutex_wait(trove_mutex_t *m) {
  while (atomic_exchange_explicit(&m->word, 2, memory_order_acquire) != 0)
    _trove_os_futex_wait(&m->word, 2);
}

void _trove_lock_wait(trove_mutex_t *m) {
  for (int i = 0; i < 64; i++) {
    for (int k = 0; k < 8; k++) cpu_relax();
    if (atomic_load_explicit(&m->word, memory_order_relaxed) == 0 && _trove_mutex_trylock(m) == 0)
      return;
  }
  _trove_mutex_wait(m);
}

/* ------------------------------------------------------------------ fork */
trove_locks_t _trove_locks __attribute__((aligned(4096))) = {
  .pool0 = {[0 ... TROVE_CLASSES - 1] = {.lock = TROVE_MUTEX_INIT}},
  .pool_more = {[0 ... TROVE_POOL_SHARDS_MAX - 2] = {[0 ... TROVE_CLASSES - 1] =
                                                         {.lock = TROVE_MUTEX_INIT}}},
  .heaps = TROVE_MUTEX_INIT,
  .large = TROVE_MUTEX_INIT,
  .segment_cache = TROVE_MUTEX_INIT,
  .segment = TROVE_MUTEX_INIT,
  .serial = TROVE_MUTEX_INIT,
};
_Static_assert(offsetof(trove_locks_t, arena[26]) <= 2 * 4096, "26 arenas: two pages");

void _trove_shared_fork_prepare(void) TROVE_HIDDEN;
void _trove_shared_fork_parent(void) TROVE_HIDDEN;
static void fork_prepare(void) {
  _trove_background_fork_prepare();  /* first: its passes take the locks below */
  _trove_heap_flush_remote();        /* blocks of the parent's other heaps: not the child's */
  _trove_shared_fork_prepare();      /* before the others: taken first in heap.c too */
  _trove_mutex_lock(&_trove_locks.heaps);
  for (size_t s = 0; s < _trove_pool_shards; s++)
    if (_trove_pool_shard_in_use(s))
      for (size_t c = 1; c < TROVE_CLASSES; c++) _trove_mutex_lock(&_trove_pool_at(s, c)->lock);
  _trove_pages_lock_all();
  _trove_mutex_lock(&_trove_locks.large);
}

static void fork_parent(void) {
  _trove_mutex_unlock(&_trove_locks.large);
  _trove_pages_unlock_all();
  for (size_t s = _trove_pool_shards; s-- > 0;)
    if (_trove_pool_shard_in_use(s))
      for (size_t c = TROVE_CLASSES; --c > 0;) _trove_mutex_unlock(&_trove_pool_at(s, c)->lock);
  _trove_mutex_unlock(&_trove_locks.heaps);
  _trove_shared_fork_parent();
}

static void fork_child(void) {
  _trove_lock_reset(&_trove_locks.large);
  _trove_pages_fork_child();
  for (size_t s = 0; s < _trove_pool_shards; s++)
    if (_trove_pool_shard_in_use(s))
      for (size_t c = 1; c < TROVE_CLASSES; c++) _trove_lock_reset(&_trove_pool_at(s, c)->lock);
  _trove_lock_reset(&_trove_locks.heaps);
  _trove_heaps_fork_child();
}

/* Registered from the first thread heap's set-up, not from init_body: pthread_atfork may
 * allocate, and by then malloc works. */
void _trove_fork_register(void) TROVE_HIDDEN;
void _trove_fork_register(void) {
  if (atomic_load_explicit(&fork_registered, memory_order_relaxed)) return;
  if (atomic_exchange(&fork_registered, true)) return;
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* ------------------------------------------------------------------ process start and end */
__attribute__((constructor)) static void trove_constructor(void) {
  _trove_init();
  _trove_fork_register();
}

__attribute__((destructor)) static void trove_destructor(void) {
  if (TROVE_OPT(SHOW_STATS)) trove_stats_print(stderr);
  if (_trove_heap_map_path[0] && trove_heap_map_write(_trove_heap_map_path) != 0)
    _trove_message("trove: warning: could not write the heap map to %s\n", _trove_heap_map_path);
}
