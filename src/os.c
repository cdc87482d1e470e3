/* The OS layer: the only file that talks to the kernel. Every primitive is allocation-free and
 * safe to call before the C library is initialized (from the dynamic loader's first malloc).
 *
 * Contracts:
 *  - map/map_aligned: fresh zeroed read-write memory, or NULL (errno untouched) on failure.
 *  - purge: the range stays mapped and reads back as zeros; its physical pages go back now
 *    (MADV_DONTNEED, so RSS drops at once rather than under memory pressure).
 *  - remap: moves a mapping onto `target`, a range of new_size from reserve_aligned that it
 *    replaces, without copying pages; remap and grow_in_place change address space only,
 *    and their caller counts what is held (count_mapped).
 */
#define _GNU_SOURCE
#include "internal.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

_Atomic size_t _trove_os_mapped, _trove_os_purged_now, _trove_os_peak_mapped;
_Atomic size_t _trove_os_purge_calls, _trove_os_purged_total;

static void note_mapped(ptrdiff_t delta) {
  size_t now = atomic_fetch_add_explicit(&_trove_os_mapped, (size_t)delta, memory_order_relaxed) +
               (size_t)delta;
  size_t peak = atomic_load_explicit(&_trove_os_peak_mapped, memory_order_relaxed);
  while (delta > 0 && now > peak &&
         !atomic_compare_exchange_weak_explicit(&_trove_os_peak_mapped, &peak, now,
                                                memory_order_relaxed, memory_order_relaxed)) {
  }
}

/* At `hint` if that range is free (a hint, not MAP_FIXED: nothing mapped there is replaced),
 * else wherever the kernel places it. */
static void *raw_map_at(void *hint, size_t size) {
  int saved = errno;
  void *p = mmap(hint, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  errno = saved;
  return p == MAP_FAILED ? NULL : p;
}
static void *raw_map(size_t size) { return raw_map_at(NULL, size); }

static void raw_unmap(void *p, size_t size) {
  int saved = errno;
  munmap(p, size);
  errno = saved;
}

void *_trove_os_map(size_t size) {
  void *p = raw_map(size);
  if (p) note_mapped((ptrdiff_t)size);
  return p;
}

/* Over-map by `align` and trim both ends: costs address space only, never memory. Where the
 * process has less than size + align of address space left (RLIMIT_AS) or of commit charge
 * (vm.overcommit_memory=2, which ignores MAP_NORESERVE) but `size` still fits, that over-map
 * fails, and with it every malloc that needed a new segment, though a segment's worth was
 * left: under limits of 40-64 MiB more than in use, mallocs of 64 B failed with 4-8 MiB unused
 * (glibc's with 64 KiB). So map `size` alone: the kernel places a mapping just below the
 * lowest one, which for trove's aligned segments leaves it aligned; otherwise ask for the
 * aligned address below it, then the one above (hints: a taken range is never replaced). */
static void *reserve_aligned_exact(size_t size, size_t align) {
  uint8_t *p = raw_map(size);
  if (p == NULL || ((uintptr_t)p & (align - 1)) == 0) return p;
  raw_unmap(p, size);
  uintptr_t down = (uintptr_t)p & ~(uintptr_t)(align - 1);
  uintptr_t hints[2] = {down, down + align};
  for (int i = 0; i < 2; i++) {
    void *q = raw_map_at((void *)hints[i], size);
    if (q == (void *)hints[i]) return q;
    if (q) raw_unmap(q, size);
  }
  return NULL;
}

void *_trove_os_reserve_aligned(size_t size, size_t align) {
  if (size + align < size) return NULL;
  uint8_t *p = raw_map(size + align);
  if (p == NULL) return reserve_aligned_exact(size, align);
  uintptr_t a = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
  size_t head = a - (uintptr_t)p, tail = align - head;
  if (head) raw_unmap(p, head);
  if (tail) raw_unmap((uint8_t *)a + size, tail);
  return (void *)a;
}

void _trove_os_unreserve(void *p, size_t size) { raw_unmap(p, size); }
void _trove_os_count_mapped(ptrdiff_t delta) { note_mapped(delta); }

void *_trove_os_map_aligned(size_t size, size_t align) {
  void *p = _trove_os_reserve_aligned(size, align);
  if (p) note_mapped((ptrdiff_t)size);
  return p;
}

void _trove_os_unmap(void *p, size_t size) {
  raw_unmap(p, size);
  note_mapped(-(ptrdiff_t)size);
}

/* Unmap memory that held data (a segment, a large mapping and its reserve), of which `counted`
 * bytes were counted as held: a purge of the `resident` bytes it still held (its header
 * alone, if its pages were purged already: counting the whole mapping again had a teardown
 * of 570 MiB report 1.5 GB given back). */
void _trove_os_release(void *p, size_t size, size_t counted, size_t resident) {
  raw_unmap(p, size);
  note_mapped(-(ptrdiff_t)counted);
  atomic_fetch_add_explicit(&_trove_os_purge_calls, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&_trove_os_purged_total, resident, memory_order_relaxed);
}

/* Ask for transparent huge pages in [p, p + size), or no longer (segment.c says when). A hint:
 * a kernel without them, or with them off, ignores it (or fails it, which changes nothing). */
void _trove_os_hugepage(void *p, size_t size, bool on) {
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
  int saved = errno;
  (void)madvise(p, size, on ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  errno = saved;
#else
  (void)p, (void)size, (void)on;
#endif
}

bool _trove_os_purge(void *p, size_t size) {
  int saved = errno;
  bool ok = madvise(p, size, MADV_DONTNEED) == 0;
  errno = saved;
  atomic_fetch_add_explicit(&_trove_os_purge_calls, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&_trove_os_purged_total, size, memory_order_relaxed);
  return ok;
}

/* Fault in, writable, the pages of a zeroed block that are untouched or purged. calloc's
 * caller often reads before it writes (a table checked for empty slots); a read of such a page
 * maps the shared zero page, and the write after it must replace that mapping, which in a
 * multithreaded process flushes the TLB of every CPU the process runs on (an IPI to each).
 * A write first takes one fault and no flush. The pages read 0 already: storing 0 into each
 * changes nothing the caller can see. */
void _trove_os_touch(void *p, size_t size) {
  volatile char *c = (volatile char *)p;
  for (size_t off = 0; off < size; off += 4096) c[off] = 0;
}

/* Whether at least 7/8 of the pages of [p, p + size) (page-aligned) are resident (mincore);
 * true if that cannot be told. Walked 1,024 pages at a time (a vector on the stack), and it
 * stops as soon as more than 1/8 are found missing. */
bool _trove_os_mostly_resident(void *p, size_t size) {
  enum { CHUNK_PAGES = 1024 };
  unsigned char vec[CHUNK_PAGES];
  size_t pg = _trove_os_page_size(), pages = size / pg, absent_max = pages / 8, absent = 0;
  int saved = errno;
  for (size_t done = 0; done < pages;) {
    size_t n = pages - done < CHUNK_PAGES ? pages - done : CHUNK_PAGES;
    if (mincore((char *)p + done * pg, n * pg, vec) != 0) {
      errno = saved;
      return true;
    }
    for (size_t i = 0; i < n; i++) absent += !(vec[i] & 1);
    if (absent > absent_max) {
      errno = saved;
      return false;
    }
    done += n;
  }
  errno = saved;
  return true;
}

/* Address space only (the caller counts what is held): the reserve at target is replaced. */
void *_trove_os_remap(void *old, size_t old_size, size_t new_size, void *target) {
  int saved = errno;
  void *p = mremap(old, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, target);
  errno = saved;
  return p == MAP_FAILED ? NULL : p;
}

bool _trove_os_grow_in_place(void *p, size_t old_size, size_t new_size) {
  int saved = errno;
  void *q = mremap(p, old_size, new_size, 0);
  errno = saved;
  return q != MAP_FAILED;
}

uint64_t _trove_os_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t _trove_os_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The background thread's wait (heap.c): on a condition variable of the monotonic clock (a
 * change of the wall clock does not stretch it), so that fork() can wake the thread to stop
 * it. `m` is held; returns *stop once it is set or `ms` have passed. */
void _trove_os_cond_init(pthread_cond_t *c) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(c, &attr);
  pthread_condattr_destroy(&attr);
}
bool _trove_os_wait_ms(pthread_cond_t *c, pthread_mutex_t *m, const bool *stop, uint64_t ms) {
  struct timespec at;
  int saved = errno;
  clock_gettime(CLOCK_MONOTONIC, &at);
  at.tv_sec += (time_t)(ms / 1000u);
  at.tv_nsec += (long)(ms % 1000u) * 1000000L;
  if (at.tv_nsec >= 1000000000L) at.tv_sec++, at.tv_nsec -= 1000000000L;
  while (!*stop && pthread_cond_timedwait(c, m, &at) != ETIMEDOUT) {
  }
  errno = saved;
  return *stop;
}

/* trove_mutex_t's sleep and wake (internal.h). Private futexes: a lock is never shared with
 * another process (a fork's child makes its locks anew). The wait returns at once if the word
 * no longer holds `value`, and may return early (a signal, a wake meant for another): the
 * caller looks again. Neither changes errno. */
void _trove_os_futex_wait(_Atomic uint32_t *word, uint32_t value) {
  int saved = errno;
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, value, NULL, NULL, 0);
  errno = saved;
}
void _trove_os_futex_wake(_Atomic uint32_t *word) {
  int saved = errno;
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  errno = saved;
}

uint64_t _trove_os_random(void) {
  uint64_t r = 0;
  int saved = errno;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    r = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)&r;
  }
  errno = saved;
  return r | 1;
}

size_t _trove_os_page_size(void) { return 4096; }

/* The CPU the calling thread runs on now, or -1: glibc's sched_getcpu, which reads it through
 * the vDSO (or rdpid) without a system call. A hint only: the thread may move at once. */
int _trove_os_cpu(void) {
  int saved = errno, c = sched_getcpu();
  errno = saved;
  return c;
}

/* The CPUs this process may run on (its affinity mask, as taskset or a container sets it):
 * one system call, no allocation, so it is safe during early init. Made through syscall():
 * the sched_getaffinity wrapper lies in a part of libc's text nothing else at start-up
 * touches, and its first call faulted in 64 KiB more of it (fault-around), in every process
 * (a program that mallocs once: 1,848 -> 1,788 KiB resident; glibc alone 1,444). The kernel
 * fills the mask's first bytes only (it returns how many): the rest is zeroed first. */
size_t _trove_os_ncpus(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  int saved = errno;
  long got = syscall(SYS_sched_getaffinity, 0, sizeof set, &set);
  errno = saved;
  if (got <= 0) return 1;
  int n = CPU_COUNT(&set);
  return n > 0 ? (size_t)n : 1;
}

static ssize_t read_file(const char *path, char *buf, size_t n) {
  int saved = errno;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t got = -1;
  if (fd >= 0) {
    got = 0;
    while ((size_t)got < n - 1) {
      ssize_t r = read(fd, buf + got, n - 1 - (size_t)got);
      if (r <= 0) break;
      got += r;
    }
    close(fd);
    buf[got] = 0;
  }
  errno = saved;
  return got;
}

size_t _trove_os_rss(void) {
  char buf[128];
  if (read_file("/proc/self/statm", buf, sizeof buf) <= 0) return 0;
  const char *s = buf;
  while (*s && *s != ' ') s++;          /* skip the size field */
  size_t pages = 0;
  while (*s == ' ') s++;
  while (*s >= '0' && *s <= '9') pages = pages * 10 + (size_t)(*s++ - '0');
  return pages * (size_t)sysconf(_SC_PAGESIZE);
}

/* Replace [p, p + size) (page-aligned memory of this process that holds only zeros, such as
 * the segment map in .bss) with a fresh zero mapping that is not charged to the system's
 * commit count (MAP_NORESERVE; the loader's mapping of .bss is charged whole). Not under
 * strict overcommit (vm.overcommit_memory=2): there the kernel ignores MAP_NORESERVE, and
 * may unmap the old range before it refuses the charge, leaving a hole. True if replaced.
 * Readers of the range meanwhile fault on the kernel's mmap lock and see zeros either way. */
bool _trove_os_uncharge_zeros(void *p, size_t size) {
  char mode[8];
  if (read_file("/proc/sys/vm/overcommit_memory", mode, sizeof mode) <= 0 || mode[0] == '2')
    return false;
  int saved = errno;
  void *q = mmap(p, size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  errno = saved;
  return q == p;
}

void _trove_os_write_stderr(const char *s, size_t n) { _trove_os_write_fd(2, s, n); }

void _trove_os_write_fd(int fd, const char *s, size_t n) {
  int saved = errno;
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w <= 0) break;
    s += w;
    n -= (size_t)w;
  }
  errno = saved;
}

int _trove_os_open_write(const char *path) {
  int saved = errno;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  errno = saved;
  return fd;
}

void _trove_os_close(int fd) {
  int saved = errno;
  close(fd);
  errno = saved;
}

void _trove_os_set_enomem(void) { errno = ENOMEM; }

/* The environment as the process started, read from /proc without allocating: options must be
 * known at the first malloc, which can come before libc has set up `environ`. Falls back to
 * `environ` where /proc is missing. */
extern char **environ;
static char env_buf[32768];
static size_t env_len;
static int env_state;              /* 0 unread, 1 /proc copy, 2 use environ */

/* Where the copy's TROVE_ variables start: init looks up each option by name, and a scan of
 * the whole environment per option was a quarter of a process's start-up in trove (35k
 * instructions of 148k for `/bin/true` in a usual shell's environment, callgrind). */
#define TROVE_VARS_MAX 32
static uint32_t trove_vars[TROVE_VARS_MAX];
static size_t ntrove_vars;              /* TROVE_VARS_MAX + 1: too many, scan the whole copy */

const char *_trove_os_getenv(const char *name) {
  size_t nl = strlen(name);
  if (env_state == 0) {
    ssize_t n = read_file("/proc/self/environ", env_buf, sizeof env_buf);
    env_state = n > 0 ? 1 : 2;
    env_len = n > 0 ? (size_t)n : 0;
    for (size_t i = 0; i < env_len && ntrove_vars <= TROVE_VARS_MAX;) {
      size_t l = strnlen(env_buf + i, env_len - i);
      if (l > 6 && memcmp(env_buf + i, "TROVE_", 6) == 0) {
        if (ntrove_vars < TROVE_VARS_MAX) trove_vars[ntrove_vars] = (uint32_t)i;
        ntrove_vars++;
      }
      i += l + 1;
    }
  }
  if (env_state == 1 && ntrove_vars <= TROVE_VARS_MAX && nl > 6 && memcmp(name, "TROVE_", 6) == 0) {
    for (size_t k = 0; k < ntrove_vars; k++) {
      const char *e = env_buf + trove_vars[k];
      if (strnlen(e, env_len - trove_vars[k]) > nl && memcmp(e, name, nl) == 0 && e[nl] == '=')
        return e + nl + 1;
    }
    return NULL;
  }
  if (env_state == 1) {
    for (size_t i = 0; i < env_len;) {
      const char *e = env_buf + i;
      size_t l = strnlen(e, env_len - i);
      if (l > nl && memcmp(e, name, nl) == 0 && e[nl] == '=') return e + nl + 1;
      i += l + 1;
    }
    return NULL;
  }
  for (char **e = environ; e && *e; e++)
    if (strncmp(*e, name, nl) == 0 && (*e)[nl] == '=') return *e + nl + 1;
  return NULL;
}

/* Iterate the environment as _trove_os_getenv sees it: returns "NAME=VALUE" strings, NULL at
 * the end. `*cursor` starts at 0. */
const char *_trove_os_env_next(size_t *cursor) {
  if (env_state == 0) (void)_trove_os_getenv("TROVE_");
  if (env_state == 1) {
    if (*cursor >= env_len) return NULL;
    const char *e = env_buf + *cursor;
    *cursor += strnlen(e, env_len - *cursor) + 1;
    return e;
  }
  if (environ == NULL || environ[*cursor] == NULL) return NULL;
  return environ[(*cursor)++];
}
