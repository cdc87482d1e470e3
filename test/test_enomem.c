/* Out of memory: NULL + ENOMEM, never a crash, and recovery once memory is freed.
 *
 * In a child process, RLIMIT_AS is set to the current address-space size + 64 MiB. The child
 * allocates 1 MiB blocks, then 64-byte blocks, until the allocator returns NULL (errno must be
 * ENOMEM), and maps what address space is left; then every function of the family must fail
 * cleanly: malloc, calloc, realloc
 * (which must leave the old block intact), posix_memalign (ENOMEM), aligned_alloc, memalign,
 * valloc, pvalloc, and a 1 TiB request. After everything is freed, allocation must work
 * again: a 1 MiB block, 1000 small blocks, and a 32 MiB block (which needs the address space
 * of the freed blocks back). */
#include "testhelper.h"
#include <sys/mman.h>

#define MARGIN (64 * TH_MIB)

static volatile size_t v_zero = 0;

/* blocks are chained through their first word */
static void *push(void *list, void *p) {
  *(void **)p = list;
  return p;
}

/* Out of memory: posix_memalign fails with ENOMEM and leaves errno alone; aligned_alloc
 * returns NULL with errno ENOMEM. */
static void aligned_fails(size_t align, size_t size) {
  void *p = NULL;
  errno = EDOM;
  int rc = T_POSIX_MEMALIGN(&p, align, size);
  CHECKF(rc == ENOMEM && errno == EDOM, "posix_memalign(%zu, %zu) = %d, errno %d", align, size,
         rc, errno);
  errno = 0;
  p = T_ALIGNED_ALLOC(align, size);
  CHECKF(p == NULL && errno == ENOMEM, "aligned_alloc(%zu, %zu) = %p errno %d", align, size, p,
         errno);
}

static size_t free_list(void *list) {
  size_t n = 0;
  while (list) {
    void *next = *(void **)list;
    T_FREE(list);
    list = next;
    n++;
  }
  return n;
}

/* 64-byte blocks until malloc returns NULL (with ENOMEM), chained onto *list; how many */
static size_t fill_small(void **list, size_t most) {
  size_t n = 0;
  for (;;) {
    errno = 0;
    void *p = T_MALLOC(64);
    if (!p) {
      CHECKF(errno == ENOMEM, "malloc(64) failed with errno %d, not ENOMEM", errno);
      return n;
    }
    *list = push(*list, p);
    CHECKF(++n < most, "too many 64-byte blocks under the limit");
  }
}

/* Map what address space is left, 64 KiB at a time, chained onto *list (unmap_all gives it
 * back); how many bytes. */
#define PIECE 65536
static size_t map_rest(void **list) {
  size_t bytes = 0;
  for (;;) {
    void *q = mmap(NULL, PIECE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (q == MAP_FAILED) return bytes;
    *list = push(*list, q);
    bytes += PIECE;
  }
}
static void unmap_all(void *list) {
  while (list) {
    void *next = *(void **)list;
    munmap(list, PIECE);
    list = next;
  }
}

static int child(void *arg) {
  (void)arg;
  /* trove is set up and the pattern blocks exist before the limit */
  unsigned char *keep = (unsigned char *)T_MALLOC(64);
  unsigned char *keep_big = (unsigned char *)T_MALLOC(TH_MIB);
  unsigned char *keep_large = (unsigned char *)T_MALLOC(3 * TH_MIB);
  unsigned char *keep_mid = (unsigned char *)T_MALLOC(60 * TH_KIB);
  CHECK(keep != NULL && keep_big != NULL && keep_large != NULL && keep_mid != NULL);
  th_fill(keep, 64, 1, 0);
  th_fill(keep_mid, 60 * TH_KIB, 4, 0);
  th_fill(keep_big, TH_MIB, 2, 0);
  th_fill(keep_large, 3 * TH_MIB, 3, 0);

  size_t vm = th_vm_bytes();
  CHECK(vm > 0);
  struct rlimit rl = {vm + MARGIN, vm + MARGIN};
  CHECK(setrlimit(RLIMIT_AS, &rl) == 0);

  void *big = NULL, *small = NULL;
  size_t nbig = 0, nsmall = 0;
  for (;;) {
    errno = 0;
    void *p = T_MALLOC(TH_MIB);
    if (!p) {
      CHECKF(errno == ENOMEM, "malloc(1 MiB) failed with errno %d, not ENOMEM", errno);
      break;
    }
    memset(p, 0x11, 4096);
    big = push(big, p);
    CHECKF(++nbig < 1000, "1000 MiB allocated under a limit of 64 MiB more than in use");
  }
  nsmall = fill_small(&small, 4 * MARGIN / 64);
  CHECKF(nbig >= 16, "only %zu blocks of 1 MiB fit in a 64 MiB margin", nbig);
  /* What is left is less than a new segment (see last_segment_child), but a large block may
   * still fit in it: map it all, so that nothing below can succeed by where the limit fell. */
  void *eaten = NULL;
  map_rest(&eaten);

  /* now every function must fail cleanly */
  errno = 0;
  CHECK(T_MALLOC(TH_MIB) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(T_MALLOC(64) == NULL && errno == ENOMEM);
  errno = 0;
  void *p = T_CALLOC(1, TH_MIB);
  CHECKF(p == NULL && errno == ENOMEM, "calloc(1, 1 MiB) = %p errno %d", p, errno);
  errno = 0;
  p = T_CALLOC(1000, 1000);
  CHECKF(p == NULL && errno == ENOMEM, "calloc(1000, 1000) = %p errno %d", p, errno);
  errno = 0;
  p = T_REALLOC(keep, 2 * TH_MIB);
  CHECKF(p == NULL && errno == ENOMEM, "realloc(64 B -> 2 MiB) = %p errno %d", p, errno);
  CHECKF(th_verify(keep, 64, 1, 0) == TH_OK, "a failed realloc damaged the old block");
  errno = 0;
  p = T_REALLOC(keep_big, 32 * TH_MIB);
  CHECKF(p == NULL && errno == ENOMEM, "realloc(1 MiB -> 32 MiB) = %p errno %d", p, errno);
  CHECKF(th_verify(keep_big, TH_MIB, 2, 0) == TH_OK, "a failed realloc damaged the old block");
  errno = 0;
  p = T_REALLOC(keep_large, 96 * TH_MIB);
  CHECKF(p == NULL && errno == ENOMEM, "realloc(3 MiB -> 96 MiB) = %p errno %d", p, errno);
  CHECKF(th_verify(keep_large, 3 * TH_MIB, 3, 0) == TH_OK,
         "a failed realloc damaged the old large block");
  /* A shrink that would move the block (above 8 KiB, to under three quarters: alloc.c,
   * realloc_block) but finds no block of the smaller class keeps the block, as glibc's
   * shrinks never fail. */
  errno = 0;
  p = T_MALLOC(40 * TH_KIB);
  if (p == NULL) {
    p = T_REALLOC(keep_mid, 40 * TH_KIB);
    CHECKF(p == keep_mid, "realloc(60 KiB -> 40 KiB) with no memory left = %p, not the block", p);
    CHECKF(th_verify(keep_mid, 40 * TH_KIB, 4, 0) == TH_OK, "a shrink damaged the block");
  } else {
    small = push(small, p);                /* (a block of the class was left: nothing to check) */
    nsmall++;
  }
  p = NULL;
  int rc = T_POSIX_MEMALIGN(&p, 4096, TH_MIB);
  CHECKF(rc == ENOMEM, "posix_memalign(4096, 1 MiB) = %d, not ENOMEM", rc);
  /* A small aligned request in the class malloc(64) just ran out of: the aligned fast path's
   * refill (alloc.c) fails, and posix_memalign still leaves errno alone. */
  aligned_fails(64, 64);
  /* The same through the aligned fast path's other branch (a class above 1 KiB, picked by
   * size class and alignment rather than by direct[] slot), once posix_memalign(4096, 4096)
   * has run out too: posix_memalign(2048, 3000) takes that class, the 4 KiB one (with
   * TROVE_COLOUR=1 malloc's class for 4 KiB is another, of 4,160 B: size_class.c). */
  for (; T_POSIX_MEMALIGN(&p, 4096, 4096) == 0; nsmall++) {
    small = push(small, p);
    CHECKF(nsmall < 4 * MARGIN / 64, "too many blocks under the limit");
  }
  aligned_fails(2048, 3000);
  errno = 0;
  p = T_ALIGNED_ALLOC(4096, TH_MIB);
  CHECK(p == NULL && errno == ENOMEM);
  errno = 0;
  p = T_MEMALIGN(65536, TH_MIB);
  CHECK(p == NULL && errno == ENOMEM);
  errno = 0;
  p = T_VALLOC(TH_MIB);
  CHECK(p == NULL && errno == ENOMEM);
  errno = 0;
  p = T_PVALLOC(TH_MIB);
  CHECK(p == NULL && errno == ENOMEM);
  errno = 0;
  p = T_MALLOC(((size_t)1 << 40) + v_zero); /* 1 TiB */
  CHECK(p == NULL && errno == ENOMEM);
  errno = 0;
  p = T_CALLOC(((size_t)1 << 20) + v_zero, (size_t)1 << 20); /* 1 TiB */
  CHECK(p == NULL && errno == ENOMEM);

  /* free everything: allocation works again */
  unmap_all(eaten);
  CHECK(free_list(small) == nsmall);
  CHECK(free_list(big) == nbig);
  CHECK(th_verify(keep_big, TH_MIB, 2, 0) == TH_OK);
  CHECK(th_verify(keep_large, 3 * TH_MIB, 3, 0) == TH_OK);
  T_FREE(keep);
  T_FREE(keep_big);
  T_FREE(keep_large);
  T_FREE(keep_mid);
  p = T_MALLOC(TH_MIB);
  CHECKF(p != NULL, "malloc(1 MiB) fails after everything was freed (errno %d)", errno);
  memset(p, 0x22, TH_MIB);
  void *list = NULL;
  for (int i = 0; i < 1000; i++) {
    void *q = T_MALLOC(16 + (size_t)i % 300);
    CHECKF(q != NULL, "small malloc %d fails after everything was freed", i);
    list = push(list, q);
  }
  free_list(list);
  T_FREE(p);
  p = T_MALLOC(32 * TH_MIB);
  if (!p) {
    T_MALLOC_TRIM(0);
    void *q = T_MALLOC(32 * TH_MIB);
    int after_trim = q != NULL;
    T_FREE(q);
    CHECKF(0, "malloc(32 MiB) fails after everything (%zu MiB) was freed: the allocator keeps "
           "the freed address space and does not release it on a failed mapping (%s)",
           nbig + 4, after_trim ? "malloc_trim(0) first makes it work" : "even after malloc_trim(0)");
  }
  memset(p, 0x33, 32 * TH_MIB);
  T_FREE(p);
  printf("child: %zu blocks of 1 MiB and %zu of 64 B until ENOMEM; recovered\n", nbig, nsmall);
  return 0;
}

/* trove maps segments several at a time (segment.c): address space it holds but does not use
 * yet must go back when a mapping fails for want of it. Under a limit of 96 MiB more than in
 * use, 40 MiB of 64-byte blocks take 10-11 segments of the 15 that batches of 1, 2, 4 and 8
 * map; a large block of 8 MiB more than the address space left then fits only in the part of
 * the batches that no segment uses. */
static int reserve_child(void *arg) {
  (void)arg;
  size_t vm = th_vm_bytes();
  CHECK(vm > 0);
  struct rlimit rl = {vm + 96 * TH_MIB, vm + 96 * TH_MIB};
  CHECK(setrlimit(RLIMIT_AS, &rl) == 0);
  void *small = NULL;
  for (size_t n = 0; n < 40 * TH_MIB / 64; n++) {
    void *p = T_MALLOC(64);
    CHECKF(p != NULL, "malloc(64) failed after %zu blocks under a limit of 96 MiB more", n);
    small = push(small, p);
  }
  size_t now = th_vm_bytes(), left = vm + 96 * TH_MIB - now;
  CHECK(now > vm && left < 96 * TH_MIB);
  size_t size = (left & ~(TH_MIB - 1)) + 8 * TH_MIB;
  errno = 0;
  void *p = T_MALLOC(size);
  CHECKF(p != NULL, "malloc(%zu MiB) with %zu MiB of address space left failed (errno %d): "
         "the segments mapped ahead were not given back", size / TH_MIB, left / TH_MIB, errno);
  memset(p, 0x44, size);
  T_FREE(p);
  free_list(small);
  printf("reserve child: %zu MiB block with %zu MiB left\n", size / TH_MIB, left / TH_MIB);
  return 0;
}

/* The last segment's worth: a segment is mapped with `align` more address space than it
 * needs, to be cut aligned from it (os.c, reserve_aligned). Once less than that is left, a
 * segment must still be mapped from what is: 64-byte blocks under a limit run out with less
 * than a segment (4 MiB) of address space unused (glibc's leave 64 KiB). With only the
 * over-map, malloc(64) failed with 7.7-8 MiB left under these limits. */
#define SEGMENT (4 * TH_MIB)
static int last_segment_child(void *arg) {
  size_t extra = (size_t)(uintptr_t)arg;
  size_t vm = th_vm_bytes();
  CHECK(vm > 0);
  struct rlimit rl = {vm + extra, vm + extra};
  CHECK(setrlimit(RLIMIT_AS, &rl) == 0);
  void *small = NULL, *rest = NULL;
  size_t n = fill_small(&small, 4 * extra / 64);
  size_t left = map_rest(&rest);
  unmap_all(rest);
  CHECKF(left < SEGMENT, "malloc(64) ran out with %zu KiB of address space left under a "
         "limit of %zu MiB more than in use: a segment (%zu KiB) still fit", left >> 10,
         extra / TH_MIB, SEGMENT >> 10);
  free_list(small);
  printf("last segment child: %zu blocks of 64 B under %zu MiB more, %zu KiB left\n", n,
         extra / TH_MIB, left >> 10);
  return 0;
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  th_check_trove_in_use();
  static char out[65536];
  int timed_out = 0;
  int status = th_run_child(child, NULL, NULL, NULL, 120, out, sizeof out, &timed_out);
  char buf[64];
  fputs(out, stdout);
  CHECKF(!timed_out, "the child did not finish in 120 s");
  CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child ended with %s",
         th_status_str(status, buf, sizeof buf));
  status = th_run_child(reserve_child, NULL, NULL, NULL, 120, out, sizeof out, &timed_out);
  fputs(out, stdout);
  CHECKF(!timed_out, "the reserve child did not finish in 120 s");
  CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the reserve child ended with %s",
         th_status_str(status, buf, sizeof buf));
  /* two limits, so that what is left past the last whole segment differs */
  for (size_t extra = 40 * TH_MIB; extra <= 42 * TH_MIB; extra += 2 * TH_MIB) {
    status = th_run_child(last_segment_child, (void *)(uintptr_t)extra, NULL, NULL, 120, out,
                          sizeof out, &timed_out);
    fputs(out, stdout);
    CHECKF(!timed_out, "the last-segment child did not finish in 120 s");
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the last-segment child ended with %s",
           th_status_str(status, buf, sizeof buf));
  }
  printf("test_enomem (%s): ok\n", T_MODE);
  return 0;
}
