/* A small shared library for test_dlopen: it allocates in its constructor, frees in a function
 * called after dlopen, hands out a block that outlives it, and allocates in its destructor. */
#include <stdlib.h>
#include <string.h>

static unsigned char *ctor_block;
static size_t ctor_size = 3000;

__attribute__((constructor)) static void dltest_init(void) {
  ctor_block = (unsigned char *)malloc(ctor_size);
  if (ctor_block) memset(ctor_block, 0x5C, ctor_size);
}

__attribute__((destructor)) static void dltest_fini(void) {
  void *p = malloc(100);
  if (p) memset(p, 1, 100);
  free(p);
}

/* 0 when the constructor's block is intact (it is freed here) and some churn works; 1 when
 * another thread already took the block of this load */
__attribute__((visibility("default"))) int dltest_run(void) {
  /* taken once per load (threads may share one load) */
  unsigned char *b0 = __atomic_exchange_n(&ctor_block, NULL, __ATOMIC_ACQ_REL);
  if (!b0) return 1;
  for (size_t i = 0; i < ctor_size; i++)
    if (b0[i] != 0x5C) return 2;
  free(b0);
  void *b[1000];
  for (int i = 0; i < 1000; i++) {
    b[i] = malloc((size_t)(16 + i * 13));
    if (!b[i]) return 3;
    memset(b[i], i, (size_t)(16 + i * 13));
  }
  for (int i = 0; i < 1000; i++) free(b[i]);
  return 0;
}

/* a block the caller frees after dlclose */
__attribute__((visibility("default"))) void *dltest_make(size_t n) {
  void *p = malloc(n);
  if (p) memset(p, 0x7E, n);
  return p;
}
