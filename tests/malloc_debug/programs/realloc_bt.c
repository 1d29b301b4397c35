/* Every realloc re-records the allocation's backtrace (bionic since P),
 * including a shrink that keeps the same pointer. */
#include <dlfcn.h>
#include <sys/types.h>

#include "md.h"

typedef ssize_t (*bt_fn)(void *, uintptr_t *, size_t);

__attribute__((noinline)) static void *site_a(size_t n) {
  void *p = malloc(n);
  KEEP(p);
  return p;
}

__attribute__((noinline)) static void *site_b(void *p, size_t n) {
  void *q = realloc(p, n);
  KEEP(q);
  return q;
}

int main(void) {
  bt_fn bt = (bt_fn)dlsym(RTLD_DEFAULT, "malloc_backtrace");
  if (!bt) return 2;
  uintptr_t f1[16], f2[16], f3[16];
  void *p = site_a(1000);
  ssize_t n1 = bt(p, f1, 16);
  void *q = site_b(p, 500); /* shrink: in place */
  ssize_t n2 = bt(q, f2, 16);
  void *r = site_b(q, 100000); /* grow: moves */
  ssize_t n3 = bt(r, f3, 16);
  say("same %d n %zd %zd %zd changed %d %d\n", p == q, n1, n2, n3,
      n1 != n2 || memcmp(f1, f2, (size_t)n1 * sizeof f1[0]) != 0, n3 > 0 && f3[0] == f2[0]);
  free(r);
  return 0;
}
