/*
 * C++ operator new and delete, every variant, over the shim. libstdc++'s own
 * reach the shim through malloc anyway; these matter where another library
 * defines them: jemalloc and tcmalloc do, so a program linked with either
 * would put every C++ object in that allocator, out of the registry's sight
 * (and a block from one freed by the other would crash). Preloaded, the
 * shim's definitions come first; a program's own operator new still wins,
 * since the executable is searched before any preload.
 *
 * Failure follows the standard: call the new-handler until it gives up,
 * then throw std::bad_alloc (nothrow forms return NULL). Both come from the
 * C++ runtime the program has loaded, found when first needed; this file is
 * built with unwind tables so the exception passes through it.
 */
#include <dlfcn.h>
#include <stdlib.h>

#include <malloc.h>

#include "state.h"

typedef void (*new_handler_t)(void);

static void *cxx_alloc(size_t n, size_t align) {
  if (n == 0) n = 1; /* every new-expression gets a distinct pointer */
  return align > 16 ? memalign(align, n) : malloc(n);
}

/* The runtime's function by name, for libstdc++ or libc++. */
static void *runtime_fn(const char *gnu, const char *llvm) {
  void *f = dlsym(RTLD_DEFAULT, gnu);
  return f ? f : dlsym(RTLD_DEFAULT, llvm);
}

__attribute__((noinline)) static void *new_failed(size_t n, size_t align, int nothrow) {
  for (;;) {
    new_handler_t (*get)(void) = (new_handler_t(*)(void))runtime_fn(
        "_ZSt15get_new_handlerv", "_ZSt15get_new_handlerv");
    new_handler_t handler = get ? get() : NULL;
    if (!handler) {
      if (nothrow) return NULL;
      void (*throw_bad_alloc)(void) =
          (void (*)(void))runtime_fn("_ZSt17__throw_bad_allocv", "_ZNSt3__117__throw_bad_allocEv");
      if (throw_bad_alloc) throw_bad_alloc();
      static const char msg[] = "unreachable: operator new: out of memory, no C++ runtime to throw\n";
      ur_write_stderr(msg, sizeof msg - 1);
      abort();
    }
    handler();
    void *p = cxx_alloc(n, align);
    if (p) return p;
  }
}

static inline void *cxx_new(size_t n, size_t align, int nothrow) {
  void *p = cxx_alloc(n, align);
  return p ? p : new_failed(n, align, nothrow);
}

/* The Itanium C++ ABI's names: m is size_t, St11align_val_t the alignment,
 * RKSt9nothrow_t the nothrow tag. */
UR_EXPORT void *_Znwm(size_t n) { return cxx_new(n, 0, 0); }
UR_EXPORT void *_Znam(size_t n) { return cxx_new(n, 0, 0); }
UR_EXPORT void *_ZnwmRKSt9nothrow_t(size_t n, const void *tag) {
  (void)tag;
  return cxx_new(n, 0, 1);
}
UR_EXPORT void *_ZnamRKSt9nothrow_t(size_t n, const void *tag) {
  (void)tag;
  return cxx_new(n, 0, 1);
}
UR_EXPORT void *_ZnwmSt11align_val_t(size_t n, size_t align) { return cxx_new(n, align, 0); }
UR_EXPORT void *_ZnamSt11align_val_t(size_t n, size_t align) { return cxx_new(n, align, 0); }
UR_EXPORT void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t align, const void *tag) {
  (void)tag;
  return cxx_new(n, align, 1);
}
UR_EXPORT void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t align, const void *tag) {
  (void)tag;
  return cxx_new(n, align, 1);
}

UR_EXPORT void _ZdlPv(void *p) { free(p); }
UR_EXPORT void _ZdaPv(void *p) { free(p); }
UR_EXPORT void _ZdlPvm(void *p, size_t n) {
  (void)n;
  free(p);
}
UR_EXPORT void _ZdaPvm(void *p, size_t n) {
  (void)n;
  free(p);
}
UR_EXPORT void _ZdlPvRKSt9nothrow_t(void *p, const void *tag) {
  (void)tag;
  free(p);
}
UR_EXPORT void _ZdaPvRKSt9nothrow_t(void *p, const void *tag) {
  (void)tag;
  free(p);
}
UR_EXPORT void _ZdlPvSt11align_val_t(void *p, size_t align) {
  (void)align;
  free(p);
}
UR_EXPORT void _ZdaPvSt11align_val_t(void *p, size_t align) {
  (void)align;
  free(p);
}
UR_EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t align) {
  (void)n;
  (void)align;
  free(p);
}
UR_EXPORT void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t align) {
  (void)n;
  (void)align;
  free(p);
}
UR_EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t align, const void *tag) {
  (void)align;
  (void)tag;
  free(p);
}
UR_EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t align, const void *tag) {
  (void)align;
  (void)tag;
  free(p);
}
