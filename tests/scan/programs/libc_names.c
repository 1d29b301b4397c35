/* A program linked with an allocator that defines glibc's __libc_malloc
 * names (libc_names_lib.c) and run under the shim: a block of each size map
 * level freed, one leaked. */
#include "scenario.h"

size_t libc_names_blocks(void);

__attribute__((noinline)) static void setup(void) {
  void *freed[3] = {malloc(100), malloc(472), malloc(5000)};
  for (int i = 0; i < 3; i++) {
    KEEP(freed[i]);
    free(freed[i]);
  }
  KEEP(malloc(300));
}

int main(void) {
  size_t before = libc_names_blocks();
  setup();
  wipe();
  ready("leak_count=1 leak_bytes=300 foreign_blocks=%zu", libc_names_blocks() - before);
  wait_for_test();
  return 0;
}
