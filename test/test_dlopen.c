/* dlopen under LD_PRELOAD=libtrove.so: a library that allocates in its constructor, frees in a
 * function called after dlopen, and hands out blocks that are freed after dlclose. Also from
 * several threads at once.   test_dlopen <path of libtrove_dltest.so> */
#include "testhelper.h"

#include <pthread.h>

static const char *lib_path;
static int threaded; /* threads may share one load of the library */

static void *cycle(void *arg) {
  int n = (int)(uintptr_t)arg;
  for (int i = 0; i < n; i++) {
    void *h = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
    CHECKF(h != NULL, "dlopen(%s): %s", lib_path, dlerror());
    int (*run)(void) = (int (*)(void))dlsym(h, "dltest_run");
    void *(*make)(size_t) = (void *(*)(size_t))dlsym(h, "dltest_make");
    CHECK(run != NULL && make != NULL);
    int rc = run();
    CHECKF(rc == 0 || (threaded && rc == 1), "dltest_run() = %d", rc); /* 1: already taken */
    unsigned char *p = (unsigned char *)make(5000 + (size_t)i);
    CHECK(p != NULL);
    CHECK(dlclose(h) == 0);
    for (size_t k = 0; k < 5000; k++) CHECK(p[k] == 0x7E);
    free(p); /* the library is gone; the block is still trove's */
  }
  return NULL;
}

int main(int argc, char **argv) {
  CHECKF(argc == 2, "usage: test_dlopen <path of libtrove_dltest.so>");
  lib_path = argv[1];
  th_check_trove_in_use();
  cycle((void *)(uintptr_t)50);
  pthread_t t[4];
  threaded = 1;
  for (int i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, cycle, (void *)(uintptr_t)25) == 0);
  for (int i = 0; i < 4; i++) CHECK(pthread_join(t[i], NULL) == 0);
  printf("test_dlopen: ok\n");
  return 0;
}
