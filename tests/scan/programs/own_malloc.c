/* A program with a malloc of its own (a bump allocator in its executable,
 * which the loader binds every malloc call to, libc's own included):
 * glibc's arenas stay empty, and a scan without the shim must say so
 * rather than report nothing leaked. */
#include <stddef.h>
#include <string.h>

#include "scenario.h"

static _Alignas(16) char pool[1 << 20];
static size_t used;

void *malloc(size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (used + n > sizeof(pool)) return NULL;
  used += n;
  return pool + used - n;
}
void free(void *p) { (void)p; }
void *calloc(size_t a, size_t b) {
  void *p = malloc(a * b);
  if (p) memset(p, 0, a * b);
  return p;
}
void *realloc(void *p, size_t n) {
  void *q = malloc(n);
  if (q && p) memcpy(q, p, n); /* the pool is one block: reading past p is safe */
  return q;
}

int main(void) {
  KEEP(malloc(100));
  ready("leak_count=1 leak_bytes=100");
  wait_for_test();
  return 0;
}
