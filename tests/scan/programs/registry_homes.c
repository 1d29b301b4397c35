/* A block kept and a block dropped in each of the registry's homes (abi.h):
 * a size map (at most 65,534 bytes) and a shard (bigger), and blocks that
 * realloc shrank in place, so that they moved from a shard to a map at the
 * same address. */
#include "scenario.h"

#define BIG_BLOCK ((size_t)8 << 20) /* glibc mmaps it; left untouched */

void *g_kept[3];

/* glibc mremaps an mmapped chunk down in place. */
static void *shrunk(size_t from, size_t to) {
  char *p = malloc(from);
  p[0] = 1;
  return realloc(p, to);
}

__attribute__((noinline)) static void setup(void) {
  g_kept[0] = malloc(5000);
  g_kept[1] = malloc(BIG_BLOCK);
  g_kept[2] = shrunk(BIG_BLOCK, 1000);
  void *lost[3] = {malloc(5000), malloc_clear_of_4g(BIG_BLOCK), shrunk(BIG_BLOCK, 1000)};
  for (int i = 0; i < 3; i++) {
    if (!lost[i] || !g_kept[i]) exit(3);
    KEEP(lost[i]);
  }
}

int main(void) {
  setup();
  wipe();
  ready("leak_count=3 leak_bytes=%zu", 5000 + BIG_BLOCK + 1000);
  wait_for_test();
  return 0;
}
