/* A dropped 32 MiB block (glibc serves it with its own mmap) beside a kept one. */
#include "scenario.h"

void *g_kept;

__attribute__((noinline)) static void setup(void) {
  g_kept = malloc(32 << 20);
  memset(g_kept, 1, 32 << 20);
  void *lost = malloc_clear_of_4g(32 << 20);
  memset(lost, 2, 32 << 20);
  KEEP(lost);
}

int main(void) {
  setup();
  wipe();
  ready("leak_count=1 leak_bytes=%d", 32 << 20);
  wait_for_test();
  return 0;
}
