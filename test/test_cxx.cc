// C++ under LD_PRELOAD=libtrove.so (this program is not linked to trove).
//
//   test_cxx [--any]      (--any: do not require trove, e.g. to try the test on glibc)
//
// Containers (vector, map, string, unordered_map, shared_ptr) across std::threads, with
// objects destroyed by threads other than their creator; operator new/delete in every form
// (plain, array, sized, aligned, nothrow); aligned new honours the alignment; new of a huge
// size calls the installed new-handler, then throws std::bad_alloc; nothrow new calls it too
// and returns nullptr. Also checks that trove is in use: trove_version resolves and operator new and
// malloc resolve into libtrove.
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::fflush(stderr);                                                       \
      std::_Exit(1);                                                             \
    }                                                                            \
  } while (0)

// A failed CHECK_SOFT is reported and the test goes on, exiting 1 at the end.
static int soft_failures;
#define CHECK_SOFT(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);       \
      soft_failures++;                                                                    \
    }                                                                                     \
  } while (0)

static volatile std::size_t v_huge = SIZE_MAX / 2;
static void *volatile sink;

static bool in_libtrove(void *fn) {
  Dl_info info;
  return fn && dladdr(fn, &info) && info.dli_fname && std::strstr(info.dli_fname, "libtrove");
}

static void check_trove() {
  typedef const char *(*ver_t)();
  ver_t ver = reinterpret_cast<ver_t>(dlsym(RTLD_DEFAULT, "trove_version"));
  if (!ver) {
    std::fprintf(stderr, "trove is not loaded: run with LD_PRELOAD=.../libtrove.so\n");
    std::_Exit(1);
  }
  CHECK(ver() && ver()[0]);
  CHECK(in_libtrove(dlsym(RTLD_DEFAULT, "malloc")));
  void *(*op_new)(std::size_t) = &::operator new;
  void (*op_delete)(void *) noexcept = &::operator delete;
  void *(*op_new_al)(std::size_t, std::align_val_t) = &::operator new;
  CHECK(in_libtrove(reinterpret_cast<void *>(op_new)));
  CHECK(in_libtrove(reinterpret_cast<void *>(op_delete)));
  CHECK(in_libtrove(reinterpret_cast<void *>(op_new_al)));
  std::printf("trove in use: %s\n", ver());
}

// ---- containers across threads ----
struct Node {
  std::string name;
  std::vector<int> data;
  Node(int i) : name("node-" + std::to_string(i) + std::string(i % 200, 'x')), data(i % 100, i) {}
  bool ok(int i) const {
    return name == "node-" + std::to_string(i) + std::string(i % 200, 'x') &&
           data.size() == static_cast<std::size_t>(i % 100) &&
           (data.empty() || (data.front() == i && data.back() == i));
  }
};

struct Handoff {
  std::mutex lock;
  std::vector<std::pair<int, std::shared_ptr<Node>>> items;
};

static void container_worker(int id, Handoff *out, Handoff *in, std::atomic<long> *checked) {
  unsigned seed = 1234u + static_cast<unsigned>(id);
  for (int round = 0; round < 40; round++) {
    std::map<int, std::string> m;
    std::unordered_map<std::string, std::vector<int>> um;
    std::vector<std::string> v;
    for (int i = 0; i < 2000; i++) {
      seed = seed * 1103515245u + 12345u;
      int k = static_cast<int>(seed >> 8) % 100000;
      m[k] = std::to_string(k) + std::string(k % 64, 'm');
      um[std::to_string(k)].push_back(k);
      v.emplace_back(static_cast<std::size_t>(k % 300), static_cast<char>('a' + k % 26));
    }
    for (auto &kv : m) CHECK(kv.second.compare(0, std::to_string(kv.first).size(),
                                               std::to_string(kv.first)) == 0);
    for (auto &kv : um) CHECK(!kv.second.empty() && std::to_string(kv.second[0]) == kv.first);
    // shared_ptrs made here, dropped by the next thread
    {
      std::lock_guard<std::mutex> g(out->lock);
      for (int i = 0; i < 200; i++) {
        int key = id * 1000000 + round * 1000 + i;
        out->items.emplace_back(key, std::make_shared<Node>(key));
      }
    }
    std::vector<std::pair<int, std::shared_ptr<Node>>> got;
    {
      std::lock_guard<std::mutex> g(in->lock);
      got.swap(in->items);
    }
    for (auto &it : got) {
      CHECK(it.second->ok(it.first));
      checked->fetch_add(1);
    }
  }
}

static void test_containers() {
  const int n = 4;
  std::vector<Handoff> boxes(n);
  std::atomic<long> checked(0);
  std::vector<std::thread> th;
  for (int i = 0; i < n; i++)
    th.emplace_back(container_worker, i, &boxes[(i + 1) % n], &boxes[i], &checked);
  for (auto &t : th) t.join();
  for (auto &b : boxes)
    for (auto &it : b.items) CHECK(it.second->ok(it.first));
  std::printf("ok containers across %d threads (%ld objects freed by another thread)\n", n,
              checked.load());
}

// ---- operator new/delete in every form ----
struct alignas(64) A64 {
  char c[100];
};
struct alignas(4096) A4096 {
  char c[10];
};

static void test_new_forms() {
  int *p = new int(5);
  CHECK(*p == 5);
  delete p;
  int *a = new int[1000];
  a[999] = 1;
  delete[] a;
  // sized
  void *s = ::operator new(100);
  std::memset(s, 1, 100);
  ::operator delete(s, 100);
  s = ::operator new[](5000);
  std::memset(s, 1, 5000);
  ::operator delete[](s, 5000);
  // aligned, through the language
  for (int i = 0; i < 100; i++) {
    A64 *x = new A64;
    CHECK(reinterpret_cast<std::uintptr_t>(x) % 64 == 0);
    x->c[99] = 1;
    sink = x;
    delete x;
    A64 *xs = new A64[7];
    CHECK(reinterpret_cast<std::uintptr_t>(xs) % 64 == 0);
    delete[] xs;
    A4096 *y = new A4096;
    CHECK(reinterpret_cast<std::uintptr_t>(y) % 4096 == 0);
    delete y;
  }
  // aligned, explicit, every alignment with sized and unsized delete
  for (std::size_t al = 1; al <= (1u << 20); al *= 2) {
    for (std::size_t size : {std::size_t(0), std::size_t(1), std::size_t(64), std::size_t(1000),
                             al + 1, std::size_t(100000)}) {
      void *q = ::operator new(size, std::align_val_t(al));
      void *q2 = ::operator new(size, std::align_val_t(al));   // two live: distinct, even at 0
      CHECK(q && q2 && q != q2 && reinterpret_cast<std::uintptr_t>(q) % al == 0 &&
            reinterpret_cast<std::uintptr_t>(q2) % al == 0);
      std::memset(q, 2, size);
      std::memset(q2, 4, size);
      ::operator delete(q2, std::align_val_t(al));
      ::operator delete(q, size, std::align_val_t(al));
      q = ::operator new[](size, std::align_val_t(al));
      CHECK(q && reinterpret_cast<std::uintptr_t>(q) % al == 0);
      std::memset(q, 3, size);
      ::operator delete[](q, std::align_val_t(al));
      q = ::operator new(size, std::align_val_t(al), std::nothrow);
      CHECK(q && reinterpret_cast<std::uintptr_t>(q) % al == 0);
      ::operator delete(q, std::align_val_t(al), std::nothrow);
    }
  }
  // nothrow
  int *n = new (std::nothrow) int[100];
  CHECK(n != nullptr);
  n[99] = 1;
  delete[] n;
  void *nt = ::operator new(300, std::nothrow);
  CHECK(nt != nullptr);
  ::operator delete(nt, std::nothrow);
  std::printf("ok operator new/delete forms (plain, array, sized, aligned 16 B..1 MiB, nothrow)\n");
}

// ---- failure: new-handler, bad_alloc, nothrow nullptr ----
static int handler_calls;
static void handler() {
  handler_calls++;
  std::set_new_handler(nullptr);  // the next failure throws
}

static void test_failure() {
  std::size_t huge = v_huge;
  handler_calls = 0;
  std::set_new_handler(handler);
  bool thrown = false;
  try {
    char *c = new char[huge];
    sink = c;
  } catch (const std::bad_alloc &) {
    thrown = true;
  }
  CHECK(thrown);
  CHECK(handler_calls == 1);

  thrown = false;
  try {
    sink = ::operator new(huge);
  } catch (const std::bad_alloc &) {
    thrown = true;
  }
  CHECK(thrown);

  handler_calls = 0;
  std::set_new_handler(handler);
  thrown = false;
  try {
    sink = ::operator new(huge, std::align_val_t(64));
  } catch (const std::bad_alloc &) {
    thrown = true;
  }
  CHECK(thrown);
  CHECK(handler_calls == 1);

  handler_calls = 0;
  std::set_new_handler(handler);
  void *q = ::operator new(huge, std::nothrow);
  CHECK(q == nullptr);
  // [new.delete.single]: the nothrow form behaves as the throwing one (new-handler loop), but
  // returns nullptr instead of throwing
  CHECK_SOFT(handler_calls == 1);
  std::set_new_handler(nullptr);
  q = ::operator new[](huge, std::align_val_t(256), std::nothrow);
  CHECK(q == nullptr);
  // a huge vector reports bad_alloc or length_error, never crashes
  thrown = false;
  try {
    std::vector<char> v(huge / 2);
    sink = v.data();
  } catch (const std::bad_alloc &) {
    thrown = true;
  } catch (const std::length_error &) {
    thrown = true;
  }
  CHECK(thrown);
  std::printf("ok new-handler called before bad_alloc; nothrow returns nullptr\n");
}

int main(int argc, char **argv) {
  bool any = argc > 1 && std::strcmp(argv[1], "--any") == 0;
  if (!any) check_trove();
  test_new_forms();
  test_failure();
  test_containers();
  if (soft_failures) {
    std::fprintf(stderr, "test_cxx: %d check(s) failed\n", soft_failures);
    return 1;
  }
  std::printf("test_cxx: all checks passed\n");
  return 0;
}
