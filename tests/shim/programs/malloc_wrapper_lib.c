/* A malloc wrapper, as glibc's libmemusage.so, libtrash or a program's own
 * interposer are: it counts the calls and forwards each to the next
 * definition after it (dlsym(RTLD_NEXT)), which is the shim's when it is
 * preloaded ahead of the shim. dlsym may allocate while the names are still
 * being found (its error state): those calls are served from a small pool
 * of its own, as such wrappers do. */
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static void *(*next_malloc)(size_t);
static void (*next_free)(void *);
static void *(*next_calloc)(size_t, size_t);
static void *(*next_realloc)(void *, size_t);
static int finding;
static _Alignas(16) char pool[4096];
static size_t pool_used;
static size_t calls;

static int from_pool(const void *p) { return (const char *)p >= pool && (const char *)p < pool + sizeof pool; }

static void *pool_alloc(size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (pool_used + n > sizeof pool) return NULL;
  pool_used += n;
  return memset(pool + pool_used - n, 0, n);
}

static void find_next(void) {
  if (next_malloc || finding) return;
  finding = 1;
  next_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
  next_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
  next_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
  next_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
  finding = 0;
}

void *malloc(size_t n) {
  find_next();
  if (!next_malloc) return pool_alloc(n);
  __atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED);
  return next_malloc(n);
}
void free(void *p) {
  find_next();
  if (!p || from_pool(p)) return;
  __atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED);
  next_free(p);
}
void *calloc(size_t n, size_t m) {
  find_next();
  if (!next_calloc) return pool_alloc(n * m);
  __atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED);
  return next_calloc(n, m);
}
void *realloc(void *p, size_t n) {
  find_next();
  if (from_pool(p)) {
    void *q = malloc(n);
    if (q) memcpy(q, p, n < 64 ? n : 64);
    return q;
  }
  __atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED);
  return next_realloc(p, n);
}

/* How many calls it forwarded. */
size_t malloc_wrapper_calls(void) { return calls; }
