// C++ operator new and delete in every form, on trove. Built with the C linker and no
// libstdc++: the C++ runtime (the new-handler, std::bad_alloc) is reached through weak
// references, present in C++ programs, absent (and never needed) in C programs.
#include <cstddef>
#include <cstdlib>
#include <new>

// alloc.c's trove_malloc, trove_free and trove_posix_memalign under their hidden names, which
// a call reaches directly rather than through the PLT.
#define HIDDEN __attribute__((visibility("hidden")))
extern "C" {
HIDDEN void *_trove_malloc(std::size_t);
HIDDEN void _trove_free(void *);
HIDDEN int _trove_posix_memalign(void **, std::size_t, std::size_t);
}

// libstdc++'s std::get_new_handler() and std::__throw_bad_alloc(), weakly.
extern "C" std::new_handler _ZSt15get_new_handlerv() __attribute__((weak));
extern "C" void _ZSt17__throw_bad_allocv() __attribute__((weak, noreturn));

#define API __attribute__((visibility("default")))

namespace {
void *aligned(std::size_t n, std::size_t align) {
  void *p = nullptr;
  if (align < sizeof(void *)) align = sizeof(void *);
  return _trove_posix_memalign(&p, align, n ? n : 1) == 0 ? p : nullptr;
}

// Out of memory in a throwing new: call the new-handler until it frees memory, else throw.
void *retry_or_throw(std::size_t n, std::size_t align) {
  for (;;) {
    std::new_handler h = _ZSt15get_new_handlerv ? _ZSt15get_new_handlerv() : nullptr;
    if (h == nullptr) {
      if (_ZSt17__throw_bad_allocv) _ZSt17__throw_bad_allocv();
      std::abort();
    }
    h();
    void *p = align ? aligned(n, align) : _trove_malloc(n);
    if (p) return p;
  }
}

// The nothrow forms run the same new-handler loop and return nullptr where the throwing form
// would throw. (A handler that itself throws ends the program here: catching needs the C++
// runtime this library does not link.)
void *nothrow_new(std::size_t n, std::size_t align) noexcept {
  for (;;) {
    void *p = align ? aligned(n, align) : _trove_malloc(n);
    if (p) return p;
    std::new_handler h = _ZSt15get_new_handlerv ? _ZSt15get_new_handlerv() : nullptr;
    if (h == nullptr) return nullptr;
    h();
  }
}

inline void *new_impl(std::size_t n) {
  void *p = _trove_malloc(n);
  return __builtin_expect(p != nullptr, 1) ? p : retry_or_throw(n, 0);
}
inline void *new_aligned(std::size_t n, std::align_val_t al) {
  void *p = aligned(n, static_cast<std::size_t>(al));
  return p ? p : retry_or_throw(n, static_cast<std::size_t>(al));
}
}  // namespace

// operator new(size_t), new[](size_t), delete(void *), delete[](void *), the sized deletes and
// the aligned forms (but the nothrow ones) are defined in override.c, where malloc's and free's
// inline fast paths are: a new or a delete then costs what a malloc or a free does, with no
// call through the PLT. Their out of memory case comes here.
extern "C" __attribute__((visibility("hidden"))) void *_trove_new_oom(std::size_t n) {
  return retry_or_throw(n, 0);
}

API void *operator new(std::size_t n, const std::nothrow_t &) noexcept { return nothrow_new(n, 0); }
API void *operator new[](std::size_t n, const std::nothrow_t &) noexcept { return nothrow_new(n, 0); }
// The aligned forms' slow path (override.c has their fast path, and the aligned deletes).
extern "C" __attribute__((visibility("hidden"))) void *_trove_new_aligned_slow(std::size_t n,
                                                                               std::size_t al) {
  return new_aligned(n, static_cast<std::align_val_t>(al));
}
API void *operator new(std::size_t n, std::align_val_t al, const std::nothrow_t &) noexcept {
  return nothrow_new(n, static_cast<std::size_t>(al));
}
API void *operator new[](std::size_t n, std::align_val_t al, const std::nothrow_t &) noexcept {
  return nothrow_new(n, static_cast<std::size_t>(al));
}

API void operator delete(void *p, const std::nothrow_t &) noexcept { _trove_free(p); }
API void operator delete[](void *p, const std::nothrow_t &) noexcept { _trove_free(p); }
API void operator delete(void *p, std::align_val_t, const std::nothrow_t &) noexcept { _trove_free(p); }
API void operator delete[](void *p, std::align_val_t, const std::nothrow_t &) noexcept { _trove_free(p); }
