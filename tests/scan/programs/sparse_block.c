/* A 256 MiB block (glibc serves it with its own mmap) of which only a few
 * pages are touched, as a big table allocated up front and filled as it
 * goes: the pointers on its first page, on a page in the middle and in its
 * very last word are found, and the pages never touched (zero) cost no read.
 * The blocks reached only through it are kept; one block is dropped. */
#include "scenario.h"

#define BIG ((size_t)256 << 20)

void **g_table;

__attribute__((noinline)) static void setup(void) {
  g_table = malloc(BIG);
  size_t words = BIG / sizeof(void *);
  g_table[0] = malloc(24);
  g_table[words / 2 + 3] = malloc(40);
  g_table[words - 1] = malloc(56);
  /* A block reached through one reached through the table. */
  *(void **)g_table[words / 2 + 3] = malloc(72);
  KEEP(malloc(100)); /* dropped */
}

int main(void) {
  setup();
  wipe();
  ready("leak_count=1 leak_bytes=100 big=%zu", BIG);
  wait_for_test();
  return 0;
}
