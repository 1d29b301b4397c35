/* Blocks glibc maps alone, each split in two mappings by the program's
 * madvise(MADV_HUGEPAGE) over its page-aligned part, as numpy does to its
 * large arrays: the chunk's header page and the rest are separate lines of
 * /proc/PID/maps. One kept, one dropped. */
#include <stdint.h>
#include <sys/mman.h>

#include "scenario.h"

#define SIZE (8 << 20)

void *g_kept;

static void *split(char *p) {
  if (!p) exit(3);
  memset(p, 3, SIZE);
  uintptr_t page = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;
  if (madvise((void *)page, (uintptr_t)p + SIZE - page, MADV_HUGEPAGE)) exit(4);
  return p;
}

__attribute__((noinline)) static void setup(void) {
  g_kept = split(malloc(SIZE));
  void *lost = split(malloc_clear_of_4g(SIZE));
  KEEP(lost);
}

int main(void) {
  setup();
  wipe();
  ready("leak_count=1 leak_bytes=%d", SIZE);
  wait_for_test();
  return 0;
}
