/* test_mutex: trove's own lock (trove_mutex_t, internal.h), white-box (linked with
 * libtrove_noov.a, and so reaching trove's internal functions).
 *
 *   - trylock on a free lock takes it, on a held one fails and leaves it held;
 *   - exclusion: threads take one lock in turn, by the three ways in (lock, the spinning
 *     _trove_lock, trylock), and in the critical section check that no other thread is in it
 *     and add to a plain counter; some of them yield there, so that others find it held for
 *     long and go to sleep in the kernel; the counter ends exact;
 *   - sleepers wake: the main thread holds the lock while threads queue on it, waits until
 *     the word says a thread sleeps (2), and gives it back; every thread must get it in turn
 *     (a lost wake-up hangs, and the watchdog fails the test after 60 s);
 *   - the sleep and the wake leave errno as it was (malloc must not change it on success).
 * ThreadSanitizer checks the critical sections' plain accesses against the lock's ordering. */
#include "testhelper.h"
#include "internal.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <time.h>

static trove_mutex_t lock = TROVE_MUTEX_INIT;
static long counter;                       /* plain: the lock guards it */
static _Atomic int inside;                 /* threads in the critical section */
static _Atomic long overlaps;
static _Atomic long errno_changed;
static long rounds;

static void critical(long k) {
  if (atomic_fetch_add_explicit(&inside, 1, memory_order_relaxed) != 0)
    atomic_fetch_add_explicit(&overlaps, 1, memory_order_relaxed);
  counter++;
  if (k % 64 == 0) sched_yield();          /* held for long: the others sleep */
  atomic_fetch_sub_explicit(&inside, 1, memory_order_relaxed);
}

static void *contender(void *arg) {
  long id = (long)(intptr_t)arg;
  for (long k = 0; k < rounds; k++) {
    int way = (int)((k + id) % 3);
    errno = 1234;
    if (way == 0) {
      _trove_mutex_lock(&lock);
    } else if (way == 1) {
      _trove_lock(&lock, TROVE_LOCK_POOL);
    } else {
      while (_trove_mutex_trylock(&lock) != 0) sched_yield();
    }
    critical(k);
    _trove_mutex_unlock(&lock);
    if (errno != 1234) atomic_fetch_add_explicit(&errno_changed, 1, memory_order_relaxed);
  }
  return NULL;
}

static _Atomic int through;
static void *sleeper(void *arg) {
  (void)arg;
  errno = 4321;
  _trove_mutex_lock(&lock);
  critical(1);
  _trove_mutex_unlock(&lock);
  if (errno != 4321) atomic_fetch_add_explicit(&errno_changed, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&through, 1, memory_order_relaxed);
  return NULL;
}

static void watchdog(int sig) {
  (void)sig;
  static const char msg[] = "FAIL test_mutex: stuck (a thread asleep on the lock was not woken)\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  _exit(1);
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 4;
  rounds = argc > 2 ? atol(argv[2]) : 20000;
  signal(SIGALRM, watchdog);
  alarm(60);

  /* trylock */
  EXPECT(_trove_mutex_trylock(&lock) == 0, "a free lock was not taken");
  EXPECT(_trove_mutex_trylock(&lock) != 0, "a held lock was taken again");
  EXPECT(atomic_load(&lock.word) != 0, "a failed trylock freed the lock");
  _trove_mutex_unlock(&lock);
  EXPECT(atomic_load(&lock.word) == 0, "unlock left the word at %u", atomic_load(&lock.word));

  /* exclusion under contention */
  pthread_t t[64];
  if (threads > 64) threads = 64;
  for (int i = 0; i < threads; i++)
    if (pthread_create(&t[i], NULL, contender, (void *)(intptr_t)i) != 0) return 2;
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  EXPECT(counter == threads * rounds, "counter %ld, expected %ld", counter, threads * rounds);
  EXPECT(atomic_load(&overlaps) == 0, "%ld entries found another thread inside",
         atomic_load(&overlaps));
  EXPECT(atomic_load(&lock.word) == 0, "the lock was left held (word %u)", atomic_load(&lock.word));

  /* sleepers wake, one after another */
  counter = 0;
  _trove_mutex_lock(&lock);
  for (int i = 0; i < threads; i++)
    if (pthread_create(&t[i], NULL, sleeper, NULL) != 0) return 2;
  bool slept = false;
  for (int ms = 0; ms < 5000 && !slept; ms++) {
    slept = atomic_load(&lock.word) == 2;
    struct timespec d = {0, 1000000};
    nanosleep(&d, NULL);
  }
  EXPECT(slept, "no thread went to sleep on the held lock in 5 s");
  struct timespec d = {0, 20000000};         /* let the others queue too */
  nanosleep(&d, NULL);
  EXPECT(atomic_load(&through) == 0, "%d threads got a held lock", atomic_load(&through));
  _trove_mutex_unlock(&lock);
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  EXPECT(atomic_load(&through) == threads, "%d of %d sleepers got the lock",
         atomic_load(&through), threads);
  EXPECT(counter == threads, "counter %ld after the sleepers, expected %d", counter, threads);
  EXPECT(atomic_load(&overlaps) == 0, "a sleeper found another thread inside");
  EXPECT(atomic_load(&errno_changed) == 0, "the lock changed errno %ld times",
         atomic_load(&errno_changed));
  EXPECT(atomic_load(&lock.word) == 0, "the lock was left held (word %u)", atomic_load(&lock.word));

  alarm(0);
  if (th_failures) {
    fprintf(stderr, "test_mutex: %d failure(s)\n", th_failures);
    return 1;
  }
  printf("test_mutex: ok (%d threads, %ld rounds)\n", threads, rounds);
  return 0;
}
