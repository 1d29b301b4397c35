/* A 64 GiB reservation with two pages in use (as a custom allocator, a JIT's
 * code cache or a ring of buffers keeps), one of them holding the only
 * pointer to a block: the pages in use are roots, the untouched rest is
 * zero and must cost nothing (no scan of 64 GiB, no page tables built). */
#include <sys/mman.h>

#include "scenario.h"

int main(void) {
  size_t n = (size_t)64 << 30;
  char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) { /* strict overcommit: a smaller one */
    n = (size_t)1 << 30;
    p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return 1;
  }
  p[0] = 1;
  *(void **)(p + n / 2 + 64) = malloc(200); /* kept: reachable from the reservation only */
  KEEP(malloc(100));                         /* dropped */
  wipe();
  ready("leak_count=1 leak_bytes=100 reserved=%zu", n);
  wait_for_test();
  return 0;
}
