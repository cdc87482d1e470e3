/* Shared helpers of trove's tests: the name mapping (standard names or trove_ API), CHECK,
 * a seeded RNG, block patterns, memory readings that do not allocate, and a child-process
 * runner with a timeout and captured output.
 *
 * Build modes (one per executable, chosen by the test's CMakeLists.txt):
 *   default               standard names (malloc, ...), linked with libtrove.a (trove_static)
 *   -DTROVE_TEST_API      trove_ names, linked with libtrove_noov.a (also the sanitizer builds)
 *   -DTROVE_TEST_PRELOAD  standard names, not linked to trove: run under LD_PRELOAD=libtrove.so;
 *                         trove's own functions are then reached through dlsym
 *   -DTROVE_TEST_SANITIZE (with TROVE_TEST_API) a sanitizer build: RSS readings include the
 *                         sanitizer's shadow memory, so only trove's own counters are used
 *   -DTROVE_TEST_SHIM     (by hand only) standard names on another allocator, to try a test's
 *                         own logic there: skips the "trove is the allocator" check
 */
#ifndef TROVE_TESTHELPER_H
#define TROVE_TESTHELPER_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "trove.h"

/* ---- the names under test ---- */
#ifdef TROVE_TEST_API
#define T_MALLOC trove_malloc
#define T_FREE trove_free
#define T_CALLOC trove_calloc
#define T_REALLOC trove_realloc
#define T_REALLOCARRAY trove_reallocarray
#define T_POSIX_MEMALIGN trove_posix_memalign
#define T_ALIGNED_ALLOC trove_aligned_alloc
#define T_MEMALIGN trove_memalign
#define T_VALLOC trove_valloc
#define T_PVALLOC trove_pvalloc
#define T_USABLE_SIZE trove_malloc_usable_size
#define T_MALLOC_TRIM trove_malloc_trim
#define T_MODE "api"
#else
#define T_MALLOC malloc
#define T_FREE free
#define T_CALLOC calloc
#define T_REALLOC realloc
#define T_REALLOCARRAY reallocarray
#define T_POSIX_MEMALIGN posix_memalign
#define T_ALIGNED_ALLOC aligned_alloc
#define T_MEMALIGN memalign
#define T_VALLOC valloc
#define T_PVALLOC pvalloc
#define T_USABLE_SIZE malloc_usable_size
#define T_MALLOC_TRIM malloc_trim
#ifdef TROVE_TEST_PRELOAD
#define T_MODE "preload"
#else
#define T_MODE "static"
#endif
#endif

#define TH_KIB ((size_t)1 << 10)
#define TH_MIB ((size_t)1 << 20)

/* ---- CHECK: print file:line and exit 1 (no atexit handlers: they could block) ---- */
#define CHECK(cond)                                                                         \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);              \
      fflush(stderr);                                                                       \
      _exit(1);                                                                             \
    }                                                                                       \
  } while (0)

/* CHECK with a printf-style explanation. */
#define CHECKF(cond, ...)                                                                   \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);              \
      fprintf(stderr, __VA_ARGS__);                                                         \
      fputc('\n', stderr);                                                                  \
      fflush(stderr);                                                                       \
      _exit(1);                                                                             \
    }                                                                                       \
  } while (0)

/* ---- EXPECT: CHECKF that goes on, counting the misses in th_failures (the white-box tests,
 * which report every invariant a step broke before they stop) ---- */
static int th_failures __attribute__((unused));
#define EXPECT(cond, ...)                                                                   \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                       \
      fprintf(stderr, __VA_ARGS__);                                                         \
      fprintf(stderr, "\n");                                                                \
      th_failures++;                                                                        \
    }                                                                                       \
  } while (0)

/* ---- seeded RNG (splitmix64 seeding a xorshift64*) ---- */
typedef struct th_rng_s {
  uint64_t s;
} th_rng_t;

static inline uint64_t th_mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static inline void th_rng_seed(th_rng_t *r, uint64_t seed) {
  r->s = th_mix64(seed) | 1;
}

static inline uint64_t th_rand(th_rng_t *r) {
  uint64_t x = r->s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  r->s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

/* uniform in [0, n) (n > 0; the tiny modulo bias does not matter here) */
static inline size_t th_below(th_rng_t *r, size_t n) {
  return (size_t)(th_rand(r) % n);
}

/* ---- block patterns ----
 * th_fill writes a pattern derived from `seed` over [p, p+size); th_verify checks it and
 * returns the offset of the first wrong byte, or (size_t)-1. With `sampled`, blocks over
 * 8 KiB are written and checked only in their first and last 4 KiB and one word per 4 KiB in
 * between (every page is still touched), so that large blocks stay cheap. */
#define TH_OK ((size_t)-1)

static inline uint64_t th_word(uint64_t seed, size_t i) {
  return seed ^ ((uint64_t)i * 0x9E3779B97F4A7C15ull);
}

static inline void th_fill_range(unsigned char *p, size_t from, size_t to, uint64_t seed) {
  for (size_t i = from; i < to; i++) p[i] = (unsigned char)(th_word(seed, i >> 3) >> ((i & 7) * 8));
}

static inline size_t th_verify_range(const unsigned char *p, size_t from, size_t to,
                                     uint64_t seed) {
  for (size_t i = from; i < to; i++)
    if (p[i] != (unsigned char)(th_word(seed, i >> 3) >> ((i & 7) * 8))) return i;
  return TH_OK;
}

static inline void th_fill(void *block, size_t size, uint64_t seed, int sampled) {
  unsigned char *p = (unsigned char *)block;
  if (!sampled || size <= 8 * TH_KIB) {
    th_fill_range(p, 0, size, seed);
    return;
  }
  th_fill_range(p, 0, 4 * TH_KIB, seed);
  for (size_t off = 4 * TH_KIB; off + 8 <= size - 4 * TH_KIB; off += 4 * TH_KIB)
    th_fill_range(p, off, off + 8, seed);
  th_fill_range(p, size - 4 * TH_KIB, size, seed);
}

static inline size_t th_verify(const void *block, size_t size, uint64_t seed, int sampled) {
  const unsigned char *p = (const unsigned char *)block;
  if (!sampled || size <= 8 * TH_KIB) return th_verify_range(p, 0, size, seed);
  size_t r = th_verify_range(p, 0, 4 * TH_KIB, seed);
  if (r != TH_OK) return r;
  for (size_t off = 4 * TH_KIB; off + 8 <= size - 4 * TH_KIB; off += 4 * TH_KIB) {
    r = th_verify_range(p, off, off + 8, seed);
    if (r != TH_OK) return r;
  }
  return th_verify_range(p, size - 4 * TH_KIB, size, seed);
}

/* ---- time ---- */
static inline double th_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void th_sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* ---- memory readings that do not allocate ---- */
static inline ssize_t th_read_file(const char *path, char *buf, size_t len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t n = 0;
  while (n + 1 < len) {
    ssize_t r = read(fd, buf + n, len - 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
  }
  close(fd);
  buf[n] = 0;
  return (ssize_t)n;
}

/* /proc/self/statm: field 0 = virtual size, field 1 = resident (pages). 0 if unknown. */
static inline size_t th_statm_field(int field) {
  char buf[256];
  if (th_read_file("/proc/self/statm", buf, sizeof buf) <= 0) return 0;
  char *s = buf;
  for (int i = 0; i < field; i++) {
    s = strchr(s, ' ');
    if (!s) return 0;
    s++;
  }
  return (size_t)strtoull(s, NULL, 10) * (size_t)sysconf(_SC_PAGESIZE);
}
static inline size_t th_rss_bytes(void) { return th_statm_field(1); }
static inline size_t th_vm_bytes(void) { return th_statm_field(0); }

/* A "Name:   N kB" line of /proc/self/status in bytes (VmHWM = peak RSS of this image). */
static inline size_t th_status_kb_field(const char *name) {
  char buf[8192];
  if (th_read_file("/proc/self/status", buf, sizeof buf) <= 0) return 0;
  size_t nl = strlen(name);
  for (char *s = buf; s && *s; s = strchr(s, '\n'), s = s ? s + 1 : NULL) {
    if (strncmp(s, name, nl) == 0 && s[nl] == ':') return (size_t)strtoull(s + nl + 1, NULL, 10) * 1024;
  }
  return 0;
}

/* ---- trove's own functions: direct where linked, through dlsym under preload ---- */
#ifdef TROVE_TEST_PRELOAD
static inline void *th_trove_sym(const char *name) { return dlsym(RTLD_DEFAULT, name); }
/* returns 0 when trove is not loaded */
static inline int th_stats(trove_stats_t *st) {
  void (*get)(trove_stats_t *) = (void (*)(trove_stats_t *))th_trove_sym("trove_stats_get");
  memset(st, 0, sizeof *st);
  if (!get) return 0;
  get(st);
  return 1;
}
static inline void th_collect(void) {
  void (*c)(void) = (void (*)(void))th_trove_sym("trove_collect");
  if (c) c();
}
#else
static inline int th_stats(trove_stats_t *st) {
  memset(st, 0, sizeof *st);
  trove_stats_get(st);
  return 1;
}
static inline void th_collect(void) { trove_collect(); }
#endif

/* ---- running a child with a timeout ----
 * Forks; the child runs `fn(arg)` (when fn is set, then _exit with its return value) or execs
 * this program again with `argv` and the extra environment entries `env_extra` ("NAME=VALUE",
 * NULL-terminated, may be NULL). The child's stdout and stderr go into `out` (NUL-terminated,
 * truncated to outlen-1). A child still running after `timeout_s` seconds is killed with
 * SIGKILL and *timed_out is set. Returns the wait status. */
extern char **environ;

static inline int th_run_child(int (*fn)(void *), void *arg, char *const argv[],
                               char *const env_extra[], int timeout_s, char *out, size_t outlen,
                               int *timed_out) {
  int pfd[2];
  CHECK(pipe(pfd) == 0);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    close(pfd[0]);
    dup2(pfd[1], 1);
    dup2(pfd[1], 2);
    close(pfd[1]);
    struct rlimit nocore = {0, 0};
    setrlimit(RLIMIT_CORE, &nocore); /* aborting children must not write core files */
    if (fn || argv == NULL) _exit(fn ? fn(arg) : 127);   /* a function, or a program to run */
    char *envp[512];
    size_t n = 0;
    for (char **e = environ; *e && n < 400; e++) envp[n++] = *e;
    for (size_t i = 0; env_extra && env_extra[i] && n < 510; i++) envp[n++] = env_extra[i];
    envp[n] = NULL;
    execve("/proc/self/exe", argv, envp);
    fprintf(stderr, "execve failed: %s\n", strerror(errno));
    _exit(127);
  }
  close(pfd[1]);
  fcntl(pfd[0], F_SETFL, O_NONBLOCK);
  size_t got = 0;
  int status = 0, done = 0, eof = 0;
  double deadline = th_now() + timeout_s;
  *timed_out = 0;
  while (!done || !eof) {
    if (!eof) {
      struct pollfd p = {pfd[0], POLLIN, 0};
      int r = poll(&p, 1, 50);
      if (r > 0) {
        char buf[4096];
        ssize_t k = read(pfd[0], buf, sizeof buf);
        if (k > 0) {
          size_t take = (size_t)k;
          if (got + take > outlen - 1) take = outlen - 1 - got;
          memcpy(out + got, buf, take);
          got += take;
        } else if (k == 0 || (errno != EAGAIN && errno != EINTR)) {
          eof = 1;
        }
      }
    } else {
      th_sleep_ms(10);
    }
    if (!done) {
      pid_t w = waitpid(pid, &status, WNOHANG);
      if (w == pid) done = 1;
    }
    if (th_now() > deadline) {
      if (!done) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        done = 1;
        *timed_out = 1;
      }
      break;
    }
  }
  close(pfd[0]);
  out[got] = 0;
  return status;
}

/* A short description of a wait status, for messages. */
static inline const char *th_status_str(int status, char *buf, size_t len) {
  if (WIFEXITED(status))
    snprintf(buf, len, "exit %d", WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    snprintf(buf, len, "signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
  else
    snprintf(buf, len, "status 0x%x", status);
  return buf;
}

/* Where trove is in use through the standard names, check that it is (so that a test never
 * passes by measuring glibc instead). */
static inline void th_check_trove_in_use(void) {
#if defined(TROVE_TEST_PRELOAD)
  const char *(*ver)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "trove_version");
  CHECKF(ver != NULL, "trove is not loaded: run this test with LD_PRELOAD=.../libtrove.so");
  const char *v = ver();
  CHECK(v != NULL && v[0] != 0);
  Dl_info info;
  void *m = dlsym(RTLD_DEFAULT, "malloc");
  CHECK(m != NULL);
  CHECK(dladdr(m, &info) != 0 && info.dli_fname != NULL);
  CHECKF(strstr(info.dli_fname, "libtrove") != NULL, "malloc resolves into %s, not libtrove",
         info.dli_fname);
#elif !defined(TROVE_TEST_API) && !defined(TROVE_TEST_SHIM) /* SHIM: tests' own check on glibc */
  /* linked with libtrove.a: a 4 MiB malloc must show up as a trove large object */
  const char *v = trove_version();
  CHECK(v != NULL && v[0] != 0);
  trove_stats_t a, b;
  th_stats(&a);
  void *volatile p = malloc(4 * TH_MIB + 1);
  CHECK(p != NULL);
  th_stats(&b);
  free(p);
  CHECKF(b.large_objects == a.large_objects + 1 && b.in_use >= a.in_use + 4 * TH_MIB,
         "malloc is not trove's (large objects %zu -> %zu)", a.large_objects, b.large_objects);
#endif
}

/* ---- checks of the default policy ----
 * Some checks test how trove behaves with its options at their defaults: how much memory it
 * holds, which free run a request reuses, whether an exited thread's heap is taken over
 * whole. Under other TROVE_* values (test/options-matrix.sh runs the tests under a list of
 * them) such a check would test the option, not the allocator, so it is made only when this
 * returns true; the checks of correctness (contents, misuse reports, NULL on failure) run
 * under every option. True when no TROVE_* variable is set except those that change no
 * policy (SHOW_STATS, VERBOSE, ON_MISUSE) and those in `own`, a comma-separated list of the
 * ones the test's CTest entry sets itself ("TROVE_PURGE_DELAY_MS"; NULL for none). */
static inline int th_policy_default(const char *own) {
  static const char *const neutral[] = {"TROVE_SHOW_STATS", "TROVE_VERBOSE", "TROVE_ON_MISUSE"};
  for (char **e = environ; *e; e++) {
    if (strncmp(*e, "TROVE_", 6) != 0) continue;
    size_t n = strcspn(*e, "=");
    int allowed = 0;
    for (size_t i = 0; i < sizeof neutral / sizeof neutral[0] && !allowed; i++)
      allowed = strlen(neutral[i]) == n && strncmp(*e, neutral[i], n) == 0;
    for (const char *o = own; o && *o && !allowed; o += strcspn(o, ","), o += *o == ',') {
      size_t m = strcspn(o, ",");
      allowed = m == n && strncmp(*e, o, n) == 0;
    }
    if (!allowed) return 0;
  }
  return 1;
}

#endif /* TROVE_TESTHELPER_H */
